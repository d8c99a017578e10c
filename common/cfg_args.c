/*
 * common/cfg_args.c — the config-table engine's command line
 * (cfg_parse_args, contract: cfg.h): the actions (--help, --version,
 * --check-config, --help-markdown), the program's switches and the config
 * file found in a first pass, the file loaded, then every --key value and
 * --key=value applied over it in a second pass, so a flag wins over the
 * file wherever it stands. Runs on the main thread (or cfg_reload's load).
 */
#include "common/cfg.h"
#include "common/cfg_internal.h"

#include "base/err.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- the command line ------------------------------------------------------ */

/* Index of arg in t->switches, or -1. */
static int switch_index(const cfg_table_t *t, const char *arg)
{
    for (int i = 0; t->switches != NULL && t->switches[i] != NULL; i++)
        if (strcmp(arg, t->switches[i]) == 0)
            return i;
    return -1;
}

static int is_config_flag(const char *a)
{
    return strcmp(a, "-c") == 0 || strcmp(a, "--config") == 0;
}

int cfg_parse_args(const cfg_table_t *t, void *conf, int argc, char **argv, cfg_args_t *out, char *err, size_t errlen)
{
    memset(out, 0, sizeof *out);
    /* Pass 1: the actions and --config, so the file is applied before any flag. */
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
            out->action = CFG_HELP;
            return 0;
        }
        if (strcmp(a, "--help-markdown") == 0) {
            cfg_print_markdown(t, stdout);
            fflush(stdout);
            exit(ferror(stdout) ? 1 : 0);
        }
        if (strcmp(a, "-V") == 0 || strcmp(a, "-v") == 0 || strcmp(a, "--version") == 0) {
            out->action = CFG_VERSION;
            return 0;
        }
        if (strcmp(a, "--check-config") == 0) {
            out->action = CFG_CHECK;
        } else if (is_config_flag(a)) {
            if (i + 1 >= argc) {
                err_set(err, errlen, "%s needs a file name", a);
                return -1;
            }
            out->config_path = argv[++i];
        } else if (strncmp(a, "--config=", 9) == 0) {
            out->config_path = a + 9;
        } else if (switch_index(t, a) >= 0) {
            out->switches |= 1u << switch_index(t, a);
        } else if (strncmp(a, "--", 2) == 0) {
            if (strchr(a, '=') == NULL)
                i++; /* skip the flag's value */
        } else if (t->positional_config && out->config_path == NULL) {
            out->config_path = a;
        } else {
            err_set(err, errlen, "unexpected argument '%s' (see --help)", a);
            return -1;
        }
    }
    if (out->config_path != NULL && cfg_load_file(t, conf, out->config_path, err, errlen) != 0)
        return -1;
    /* Pass 2: every --key value / --key=value, over the file. */
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "--check-config") == 0 || strncmp(a, "--config=", 9) == 0 || switch_index(t, a) >= 0)
            continue;
        if (is_config_flag(a)) {
            i++;
            continue;
        }
        if (strncmp(a, "--", 2) != 0)
            continue; /* the positional config file (pass 1 refused any other) */
        char name[CFG_MAX_NAME];
        const char *eq = strchr(a + 2, '=');
        size_t len = eq != NULL ? (size_t)(eq - a - 2) : strlen(a + 2);
        const cfg_key_t *k = NULL;
        if (len < sizeof name) {
            memcpy(name, a + 2, len);
            name[len] = '\0';
            k = cfg_find(t, name);
        }
        if (k == NULL) {
            err_set(err, errlen, "unknown option '%s' (see --help)", a);
            return -1;
        }
        const char *value;
        if (eq != NULL) {
            value = eq + 1;
        } else if (i + 1 < argc) {
            value = argv[++i];
        } else {
            err_set(err, errlen, "--%s needs a value", name);
            return -1;
        }
        if (cfg_set_key(t, conf, k, value, CFG_SOURCE_FLAG, err, errlen) != 0)
            return -1;
        cfg_note_origin(t, conf, k, -1);
    }
    return 0;
}
