/*
 * common/cfg_print.c — the config table and the effective values printed
 * (contract: cfg.h): --help's key list, --help-markdown's table (the
 * configuration reference in docs/operations.md is generated from it), and
 * --check-config's INI print of every value, with the secrets and the
 * passwords in URIs left out. One setting's INI lines are cfg_ini_print.c.
 */
#include "common/cfg.h"
#include "common/cfg_internal.h"

#include "common/uri_password.h"

#include <stdio.h>
#include <string.h>

/* ---- help and the effective values ----------------------------------------- */

static const char *type_hint(const cfg_key_t *k)
{
    static const char *const hints[] = {
        [CFG_STRING] = "TEXT",       [CFG_BOOL] = "yes|no",   [CFG_INT] = "N",   [CFG_SIZE] = "SIZE",
        [CFG_DURATION] = "DURATION", [CFG_DOUBLE] = "NUMBER", [CFG_ENUM] = NULL, [CFG_CUSTOM] = "TEXT",
    };
    if (k->hint != NULL)
        return k->hint;
    return k->type == CFG_ENUM ? k->words : hints[k->type];
}

void cfg_print_keys(const cfg_table_t *t, FILE *out)
{
    for (size_t i = 0; i < t->count; i++) {
        const cfg_key_t *k = &t->keys[i];
        const char *def = k->shown_default != NULL ? k->shown_default : k->def;
        char left[96];
        snprintf(left, sizeof left, "--%s %s", k->name, type_hint(k));
        fprintf(out, "  %-34s %s%s%s%s%s\n", left, k->help, k->reload ? " (reloaded on SIGHUP)" : "",
                def != NULL ? " [" : "", def != NULL ? def : "", def != NULL ? "]" : "");
    }
    int sizes = 0, durations = 0;
    for (size_t i = 0; i < t->count; i++) {
        sizes |= t->keys[i].type == CFG_SIZE && t->keys[i].hint == NULL;
        durations |= t->keys[i].type == CFG_DURATION && t->keys[i].hint == NULL;
    }
    if (sizes || durations)
        fprintf(out, "\n%s%s%s\n", sizes ? "SIZE: bytes, or a number with kb, mb, gb." : "",
                sizes && durations ? " " : "",
                durations ? "DURATION: a number with ms, s, m, h, d (\"0\" = zero)." : "");
}

/* s into out for a Markdown table cell: '|' escaped, as code when code. */
static void md_cell(FILE *out, const char *s, int code)
{
    fputs(code ? "`" : "", out);
    for (; *s != '\0'; s++) {
        if (*s == '|')
            fputs("\\|", out);
        else
            fputc(*s, out);
    }
    fputs(code ? "`" : "", out);
}

void cfg_print_markdown(const cfg_table_t *t, FILE *out)
{
    fprintf(out, "| key | value | default | meaning |\n| --- | --- | --- | --- |\n");
    for (size_t i = 0; i < t->count; i++) {
        const cfg_key_t *k = &t->keys[i];
        const char *def = k->shown_default != NULL ? k->shown_default : k->def;
        fputs("| ", out);
        md_cell(out, k->name, 1);
        fputs(" | ", out);
        md_cell(out, type_hint(k), 0);
        fputs(" | ", out);
        if (def == NULL)
            fputs("(unset)", out);
        else if (def[0] == '\0')
            fputs("(empty)", out);
        else
            md_cell(out, def, k->shown_default == NULL);
        fputs(" | ", out);
        md_cell(out, k->help, 0);
        fputs(k->reload ? " (reloaded on SIGHUP)" : "", out);
        fputs(" |\n", out);
    }
}

/* A key that must read back as not set, as a comment line naming it. */
static void print_absent(FILE *out, const char *name, const char *why)
{
    fprintf(out, "; %s = (%s)\n", name, why);
}

/* A URI key's value v (CFG_MAX_VALUE bytes) in place without the password
 * of its user:password@, after a comment saying so when it had one. */
static void take_out_uri_password(FILE *out, const char *name, char *v)
{
    char bare[CFG_MAX_VALUE]; /* as large as v: what is left always fits */
    if (uri_password_strip(v, bare, sizeof bare) != 1)
        return;
    fprintf(out, "; %s: its password is not shown (give it in password-file, or put it back)\n", name);
    memcpy(v, bare, strlen(bare) + 1);
}

int cfg_print_values(const cfg_table_t *t, const void *conf, FILE *out)
{
    int unprintable = 0;
    for (size_t i = 0; i < t->count; i++) {
        const cfg_key_t *k = &t->keys[i];
        if (k->type == CFG_CUSTOM) {
            if (k->print != NULL)
                unprintable += k->print(conf, k, out);
            continue;
        }
        if (k->type == CFG_STRING && *(char *const *)((const char *)conf + k->offset) == NULL) {
            print_absent(out, k->name, "not set");
            continue;
        }
        if (k->secret == CFG_SECRET_VALUE) {
            print_absent(out, k->name, "set, not shown");
            continue;
        }
        char v[CFG_MAX_VALUE];
        cfg_value_text(t, conf, i, v, sizeof v);
        if (k->secret == CFG_SECRET_URI)
            take_out_uri_password(out, k->name, v);
        if (cfg_print_setting(out, k->name, v) != 0)
            unprintable++;
    }
    return unprintable;
}

int cfg_print_check(const cfg_table_t *t, const void *conf, const char *version, const char *section,
                    const char *config_path, FILE *out, FILE *err)
{
    fprintf(out, "# %s %s: effective configuration\n", t->program, version);
    if (section != NULL)
        fprintf(out, "[%s]\n", section);
    int unprintable = cfg_print_values(t, conf, out);
    if (config_path != NULL)
        fprintf(out, "; %s: configuration OK (%s)\n", t->program, config_path);
    else
        fprintf(out, "; %s: configuration OK\n", t->program);
    if (unprintable > 0) {
        fflush(out); /* the comments it points at come first */
        fprintf(err, "%s: %d value%s cannot be printed so that %s back; see the comments\n", t->program, unprintable,
                unprintable == 1 ? "" : "s", unprintable == 1 ? "it reads" : "they read");
    }
    return unprintable;
}
