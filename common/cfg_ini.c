/*
 * common/cfg_ini.c — the config-table engine's INI file reader
 * (cfg_load_file, contract: cfg.h), over libinih: each line read by our
 * own reader, a long value joined from its indented continuation lines,
 * each key applied through the table (cfg_set_key) with the line that set
 * it noted. The print that reads back through it is cfg_ini_print.c.
 *
 * Invariants: a file sets a key once (only a CFG_CUSTOM key repeats); the
 * first error is the one reported, with the file and line; nothing is read
 * after it. Runs on the main thread (or cfg_reload's load).
 */
#include "common/cfg.h"
#include "common/cfg_internal.h"

#include "base/alloc.h"
#include "base/err.h"

#include <ctype.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <ini.h>

/* ---- the INI file ---------------------------------------------------------
 * libinih reads lines of at most INI_MAX_LINE bytes and silently splits
 * longer ones, so our reader refuses them with an error that says what to do:
 * continue a long value on indented lines, which libinih hands to the handler
 * as the same key again; the reader's `indented` flag tells such a
 * continuation from a repeated key (a CFG_CUSTOM key may repeat). */

typedef struct ini_state {
    const cfg_table_t *t;
    void *conf;
    FILE *file;
    const char *path;
    int line;                        /* of the line last read */
    int indented;                    /* it started with a blank */
    char pending_name[CFG_MAX_NAME]; /* the key being collected ("" when none) */
    int pending_line;
    char *pending_value;
    int *set_line;   /* per key of the table: the line that set it, 0 when none yet */
    char error[512]; /* the first error, "" when none */
} ini_state_t;

static void ini_error(ini_state_t *st, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void ini_error(ini_state_t *st, const char *fmt, ...)
{
    if (st->error[0] != '\0')
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(st->error, sizeof st->error, fmt, ap);
    va_end(ap);
}

static char *ini_read_line(char *str, int num, void *stream)
{
    ini_state_t *st = stream;
    char buf[CFG_MAX_VALUE];
    size_t len = 0;
    int c = EOF;
    if (st->error[0] != '\0')
        return NULL;
    /* byte by byte, not fgets: a NUL byte would end the line for strlen and
     * drop the rest of it without a word */
    while (len < sizeof buf - 1 && (c = getc(st->file)) != EOF) {
        buf[len++] = (char)c;
        if (c == '\n')
            break;
    }
    if (len == 0)
        return NULL;
    buf[len] = '\0';
    st->line++;
    if (memchr(buf, '\0', len) != NULL) {
        ini_error(st, "%s:%d: a NUL byte in the line (not a text file?)", st->path, st->line);
        return NULL;
    }
    if (len >= (size_t)num) {
        ini_error(st,
                  "%s:%d: line longer than %d bytes (libinih's limit): continue a long value on the next "
                  "line, indented",
                  st->path, st->line, num - 2);
        return NULL;
    }
    st->indented = buf[0] == ' ' || buf[0] == '\t';
    memcpy(str, buf, len + 1);
    return str;
}

/* Apply the collected key, if any. */
static void ini_flush(ini_state_t *st)
{
    if (st->pending_name[0] == '\0')
        return;
    const cfg_key_t *k = cfg_find(st->t, st->pending_name);
    char err[512];
    /* A key set twice in one file: which line the reader meant is a guess
     * (one edited, the other in force); only a CFG_CUSTOM key repeats. */
    int *first = k != NULL ? &st->set_line[k - st->t->keys] : NULL;
    if (k == NULL)
        ini_error(st, "%s:%d: unknown key '%s' (see --help for the keys)", st->path, st->pending_line,
                  st->pending_name);
    else if (k->type != CFG_CUSTOM && *first != 0)
        ini_error(st, "%s:%d: %s is set again (first at line %d): a key may be set once in a file", st->path,
                  st->pending_line, k->name, *first);
    else if (cfg_set_key(st->t, st->conf, k, st->pending_value, CFG_SOURCE_FILE, err, sizeof err) != 0)
        ini_error(st, "%s:%d: %s", st->path, st->pending_line, err);
    else
        cfg_note_origin(st->t, st->conf, k, st->pending_line);
    if (first != NULL && *first == 0)
        *first = st->pending_line;
    st->pending_name[0] = '\0';
    free(st->pending_value);
    st->pending_value = NULL;
}

static int section_known(const cfg_table_t *t, const char *section)
{
    if (section[0] == '\0')
        return 1;
    for (const char *const *s = t->sections; s != NULL && *s != NULL; s++)
        if (strcasecmp(section, *s) == 0)
            return 1;
    return 0;
}

static int ini_line(void *user, const char *section, const char *name, const char *value)
{
    ini_state_t *st = user;
    if (!section_known(st->t, section)) {
        char list[256] = "";
        for (const char *const *s = st->t->sections; s != NULL && *s != NULL; s++)
            snprintf(list + strlen(list), sizeof list - strlen(list), "%s%s", list[0] ? ", " : "", *s);
        ini_error(st, "%s:%d: unknown section [%s] (sections: %s)", st->path, st->line, section, list);
        return 0;
    }
    if (st->indented && st->pending_name[0] != '\0' && strcmp(name, st->pending_name) == 0) {
        /* libinih hands a continuation line over whole, where a key's own line
         * loses its inline comment (a ';' after a blank): cut it here too, or
         * the joined value holds " ;…", which no line --check-config prints
         * can say (it reads back as a comment) */
        size_t b = cfg_inline_comment_at(value, strlen(value));
        while (b > 0 && isspace((unsigned char)value[b - 1]))
            b--;
        size_t a = strlen(st->pending_value);
        char *joined = malloc(a + b + 2);
        if (joined == NULL)
            abort();
        memcpy(joined, st->pending_value, a);
        joined[a] = ' ';
        memcpy(joined + a + 1, value, b);
        joined[a + 1 + b] = '\0';
        free(st->pending_value);
        st->pending_value = joined;
        return 1;
    }
    ini_flush(st);
    if (name[0] == '\0') { /* "= value": without this, a line read and dropped (and its value never freed) */
        ini_error(st, "%s:%d: a value with no key name (want key = value)", st->path, st->line);
        return 0;
    }
    if (strlen(name) >= sizeof st->pending_name) {
        ini_error(st, "%s:%d: unknown key '%.40s…'", st->path, st->line, name);
        return 0;
    }
    snprintf(st->pending_name, sizeof st->pending_name, "%s", name);
    st->pending_line = st->line;
    st->pending_value = xstrdup(value);
    return 1;
}

int cfg_load_file(const cfg_table_t *t, void *conf, const char *path, char *err, size_t errlen)
{
    ini_state_t st = { .t = t, .conf = conf, .path = path };
    st.file = fopen(path, "r");
    if (st.file == NULL) {
        err_set(err, errlen, "config: cannot open %s: %s", path, strerror(errno));
        return -1;
    }
    st.set_line = xcalloc(t->count > 0 ? t->count : 1, sizeof *st.set_line);
    if (cfg_origins(t, conf) != NULL)
        snprintf(cfg_origins(t, conf)->file, sizeof cfg_origins(t, conf)->file, "%s", path);
    int rc = ini_parse_stream(ini_read_line, &st, ini_line, &st);
    ini_flush(&st);
    fclose(st.file);
    free(st.set_line);
    if (st.error[0] == '\0' && rc > 0)
        ini_error(&st, "%s:%d: not a 'key = value' line, a [section] or a comment", path, rc);
    if (st.error[0] == '\0' && rc < 0)
        ini_error(&st, "%s: cannot read", path);
    free(st.pending_value);
    if (st.error[0] != '\0') {
        err_set(err, errlen, "%s", st.error);
        return -1;
    }
    return 0;
}
