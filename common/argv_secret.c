/*
 * common/argv_secret.c — passwords on a command line hidden from ps
 * (contract: argv_secret.h).
 *
 * Thread: main, at start-up.
 */
#include "common/argv_secret.h"

#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "common/uri_password.h"

char **argv_secret_copy(int argc, char *const *argv)
{
    char **copy = xcalloc((size_t)argc + 1, sizeof *copy);
    for (int i = 0; i < argc; i++)
        copy[i] = xstrdup(argv[i]);
    return copy;
}

void argv_secret_free(int argc, char **copy)
{
    if (copy == NULL)
        return;
    for (int i = 0; i < argc; i++)
        free(copy[i]);
    free(copy);
}

int argv_secret_hide_uri(char *uri)
{
    size_t start, len;
    if (!uri_password_span(uri, &start, &len))
        return 0;
    memset(uri + start, 'x', len);
    return 1;
}

/* Hide the password in value as opt says; 1 when there was one. */
static int hide_value(char *value, const argv_secret_opt_t *opt)
{
    if (opt->is_uri)
        return argv_secret_hide_uri(value);
    if (value[0] == '\0')
        return 0;
    memset(value, 'x', strlen(value));
    return 1;
}

int argv_secret_hide(int argc, char **argv, const argv_secret_opt_t *opts, size_t nopts, const char *use_instead,
                     FILE *warn)
{
    int hidden = 0;
    for (int i = 1; i < argc && strcmp(argv[i], "--") != 0; i++)
        for (size_t k = 0; k < nopts; k++) {
            const argv_secret_opt_t *o = &opts[k];
            size_t n = strlen(o->name);
            if (strncmp(argv[i], o->name, n) == 0 && argv[i][n] == '=') {
                hidden += hide_value(argv[i] + n + 1, o);
                break;
            }
            if ((strcmp(argv[i], o->name) == 0 || (o->short_name != NULL && strcmp(argv[i], o->short_name) == 0)) &&
                i + 1 < argc) {
                hidden += hide_value(argv[++i], o);
                break;
            }
        }
    if (hidden > 0 && warn != NULL) {
        fprintf(warn, "Warning: using a password on the command line may not be safe; use %s\n", use_instead);
        fflush(warn);
    }
    return hidden;
}

static int kept_argc;

char **argv_secret_protect(int argc, char **argv, const char *use_instead)
{
    static const argv_secret_opt_t opts[] = {
        { "--uri", "-u", 1 },
        { "--mysql-password", NULL, 0 },
    };
    static char **kept; /* the program's argv for the life of the process */
    argv_secret_free(kept_argc, kept);
    kept = argv_secret_copy(argc, argv);
    kept_argc = argc;
    argv_secret_hide(argc, argv, opts, sizeof opts / sizeof opts[0], use_instead, stderr);
    return kept;
}
