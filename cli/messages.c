/*
 * cli/messages.c — what hourglass-cli says besides a command's output
 * (contract: cli.h, "cli/messages.c"): the "hourglass-cli: …" messages on
 * stderr with the exit code each goes with (a usage error, a failure, a
 * failed library call), and a command's help text, word-wrapped. Below the
 * command table (cli/main.c), the argument parser (cli/args.c) and the
 * commands (cli/cmd_*.c), which all report through it; it knows none of
 * them. Single-threaded.
 */
#include "cli/cli.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

/* ------------------------------------------------------------------------
 * Messages and exit codes
 * ------------------------------------------------------------------------ */

/* "hourglass-cli: <message><end>" on stderr. */
static void report(const char *end, const char *fmt, va_list ap) __attribute__((format(printf, 2, 0)));
static void report(const char *end, const char *fmt, va_list ap)
{
    fputs("hourglass-cli: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputs(end, stderr);
}

int cli_usage_error(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    report(" (see hourglass-cli --help)\n", fmt, ap);
    va_end(ap);
    return EXIT_USAGE;
}

int cli_fail(int code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    report("\n", fmt, ap);
    va_end(ap);
    return code;
}

int cli_exit_code(hg_err_t e)
{
    switch (e) {
    case HG_OK:
        return 0;
    case HG_ERR_ARG:
    case HG_ERR_URI:
    case HG_ERR_UNSUPPORTED:
        return EXIT_USAGE;
    case HG_ERR_CONNECT:
    case HG_ERR_IO:
    case HG_ERR_TIMEOUT:
    case HG_ERR_STOPPED:
        return EXIT_CONNECT;
    default:
        return EXIT_BROKER;
    }
}

int cli_client_failure(cli_t *cli, hg_err_t e)
{
    const char *msg = hg_client_errmsg(cli->client);

    /* A broker with users answers a client that did not log in with a bare
     * NOAUTH: say how this program logs in. */
    if (strncmp(msg, "NOAUTH", 6) == 0 && cli->user == NULL && cli->uri != NULL && strchr(cli->uri, '@') == NULL)
        return cli_fail(cli_exit_code(e),
                        "%s (the broker has users: log in with --user U --password-file F, or "
                        "hourglass://user:pass@host:port in --uri or $HOURGLASS_URI)",
                        msg);
    return cli_fail(cli_exit_code(e), "%s", msg);
}

/* ------------------------------------------------------------------------
 * Help
 * ------------------------------------------------------------------------ */

void cli_print_wrapped(FILE *f, int indent, const char *text)
{
    const int width = 78;
    int col = 0;

    while (*text != '\0') {
        size_t word = strcspn(text, " ");
        if (col > 0 && col + 1 + (int)word > width) {
            fputc('\n', f);
            col = 0;
        }
        if (col == 0) {
            fprintf(f, "%*s", indent, "");
            col = indent;
        } else {
            fputc(' ', f);
            col++;
        }
        fwrite(text, 1, word, f);
        col += (int)word;
        text += word;
        while (*text == ' ')
            text++;
    }
    fputc('\n', f);
}

void cli_print_command_help(FILE *f, const command_t *cmd)
{
    fprintf(f, "usage: hourglass-cli [--uri URI] [--json] %s%s%s\n\n", cmd->name, cmd->usage[0] ? " " : "", cmd->usage);
    cli_print_wrapped(f, 0, cmd->help);
}
