/*
 * cli/args.c — hourglass-cli's per-command argument parsing (contract:
 * args.h): options (--name value, --name=value, flags) and positionals, and
 * the number and message-id grammars of the command arguments. Pure apart
 * from printing usage errors and --help. Single-threaded.
 */
#include "cli/args.h"

#include <ctype.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

int cli_parse_args(const command_t *cmd, int argc, char **argv, cli_opt_t *specs, char **pos, int maxpos,
                   int *exit_code)
{
    int npos = 0;

    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
            cli_print_command_help(stdout, cmd);
            *exit_code = 0;
            return -1;
        }
        if (strcmp(a, "--") == 0) {
            for (i++; i < argc; i++) {
                if (npos >= maxpos) {
                    *exit_code = cli_usage_error("%s: unexpected argument '%s'", cmd->name, argv[i]);
                    return -1;
                }
                pos[npos++] = argv[i];
            }
            break;
        }
        if (a[0] == '-' && a[1] == '-' && a[2] != '\0') {
            const char *eq = strchr(a, '=');
            size_t n = eq != NULL ? (size_t)(eq - a) : strlen(a);
            cli_opt_t *s = specs;
            for (; s != NULL && s->name != NULL; s++)
                if (strlen(s->name) == n && strncmp(s->name, a, n) == 0)
                    break;
            if (s == NULL || s->name == NULL) {
                *exit_code = cli_usage_error("%s: unknown option '%.*s'", cmd->name, (int)n, a);
                return -1;
            }
            if (s->value != NULL) {
                *exit_code = cli_usage_error("%s: %s given twice", cmd->name, s->name);
                return -1;
            }
            if (!s->takes_value) {
                if (eq != NULL) {
                    *exit_code = cli_usage_error("%s: %s takes no value", cmd->name, s->name);
                    return -1;
                }
                s->value = "";
            } else if (eq != NULL) {
                s->value = eq + 1;
            } else if (i + 1 < argc) {
                s->value = argv[++i];
            } else {
                *exit_code = cli_usage_error("%s: %s needs a value", cmd->name, s->name);
                return -1;
            }
            continue;
        }
        if (npos >= maxpos) {
            *exit_code = cli_usage_error("%s: unexpected argument '%s'", cmd->name, a);
            return -1;
        }
        pos[npos++] = argv[i];
    }
    return npos;
}

int cli_parse_u64(const char *s, uint64_t *out)
{
    char *end;
    unsigned long long v;

    if (s == NULL || !isdigit((unsigned char)s[0]))
        return -1;
    errno = 0;
    v = strtoull(s, &end, 10);
    if (errno != 0 || *end != '\0')
        return -1;
    *out = v;
    return 0;
}

int cli_parse_id(const char *s, uint64_t *out)
{
    uint64_t v = 0;
    size_t n = strlen(s);

    if (n != 16)
        return -1;
    for (size_t i = 0; i < n; i++) {
        int c = tolower((unsigned char)s[i]);
        if (!isxdigit(c))
            return -1;
        v = v * 16 + (uint64_t)(isdigit(c) ? c - '0' : c - 'a' + 10);
    }
    *out = v;
    return 0;
}
