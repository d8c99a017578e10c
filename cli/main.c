/*
 * cli/main.c — hourglass-cli, the operator's tool: levels, groups, INFO,
 * send, and draining a dead-letter queue by hand.
 *
 *   hourglass-cli [--uri URI] [--user U] [--password-file F] [--json] [--timeout MS] COMMAND [ARGS]
 *
 * This file: the command table (name, handler, usage, help) from which
 * `--help` output and dispatch come, the global options, the messages and
 * exit codes, and the one connection every command uses. The commands are in
 * cli/cmd_broker.c and cli/cmd_dlq.c; output is an aligned table for people
 * or, with --json, one JSON value on stdout for scripts. Messages go to
 * stderr.
 *
 * Exit codes (also in --help):
 *   0  success
 *   1  the broker answered an error (or something the cli cannot read),
 *      or the thing asked for does not exist (dlq show/requeue/drop ID)
 *   2  usage: bad command, option or URI
 *   3  cannot reach the broker: connect failed, connection lost, timed out
 *
 * Single-threaded; everything is freed before exit (valgrind-clean).
 */
#include "cli/cli.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "cli/args.h"
#include "common/passwd.h"

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
    return cli_fail(cli_exit_code(e), "%s", hg_client_errmsg(cli->client));
}

/* ------------------------------------------------------------------------
 * Connection and commands
 * ------------------------------------------------------------------------ */

int cli_connect(cli_t *cli)
{
    hg_client_opts_t opts;
    hg_error_t err;
    hg_err_t e;
    char password[PASSWD_FILE_MAX + 1], why[HG_ERRMSG_MAX];

    if (cli->client != NULL)
        return 0;
    hg_client_opts_init(&opts);
    if (cli->password_file != NULL) {
        if (passwd_read_file(cli->password_file, password, sizeof(password), why, sizeof(why)) != 0)
            return cli_fail(EXIT_USAGE, "%s", why);
        opts.password = password;
    }
    opts.user = cli->user;
    opts.connect_timeout_ms = cli->timeout_ms;
    opts.read_timeout_ms = cli->timeout_ms;
    opts.reconnect_backoff.attempts = 1; /* an operator wants an answer now */
    opts.resend_sends = 0;               /* `send` once, as typed */
    opts.tls_ca_file = cli->tls_ca_cert_file;
    opts.tls_cert_file = cli->tls_cert_file;
    opts.tls_key_file = cli->tls_key_file;
    opts.tls_server_name = cli->tls_server_name;
    e = hg_client_open(cli->uri, &opts, &cli->client, &err);
    memset(password, 0, sizeof(password));
    if (e != HG_OK)
        return cli_fail(cli_exit_code(e), "%s", err.message);
    return 0;
}

int cli_run(cli_t *cli, hg_reply_t **reply, int argc, const char *const *argv)
{
    hg_err_t e;
    int rc = cli_connect(cli);

    *reply = NULL;
    if (rc != 0)
        return rc;
    e = hg_client_command(cli->client, argc, argv, NULL, reply);
    if (e != HG_OK)
        return cli_client_failure(cli, e);
    return 0;
}

int cli_unexpected(const char *cmd, const hg_reply_t *r)
{
    (void)r;
    return cli_fail(EXIT_BROKER, "unexpected reply to %s from the broker", cmd);
}

/* ------------------------------------------------------------------------
 * The command table and help
 * ------------------------------------------------------------------------ */

static int cmd_dlq(cli_t *cli, int argc, char **argv);

static const command_t commands[] = {
    { "ping", cli_cmd_ping, "", "Check that the broker answers." },
    { "levels", cli_cmd_levels, "",
      "The delay levels: number, delay, messages waiting (depth) and when the head is due." },
    { "groups", cli_cmd_groups, "",
      "The consumer groups: topic, ready/backlog/retry/in-flight/DLQ counts, max retries." },
    { "info", cli_cmd_info, "[SECTION]",
      "The broker's INFO text (sections: server clients levels groups storage stats). "
      "With --json: an object of sections, each an object of fields." },
    { "send", cli_cmd_send, "TOPIC PAYLOAD [--key K] [--level N | --delay D | --at MS]",
      "Send one message and print its id. --level N: exactly level N (0 = now). "
      "--delay D: a duration (1500 = ms, or 500ms 30s 25m 2h 1d), reached by chaining levels. "
      "--at MS: an absolute Unix time in milliseconds. Without any: deliver now." },
    { "dlq", cmd_dlq, "(list|show|requeue|drop) ...",
      "Inspect and drain a group's dead-letter queue. See `hourglass-cli dlq SUBCOMMAND --help`." },
    { "dlq list", cli_cmd_dlq_list, "GROUP [--count N] [--after ID]",
      "List parked messages in id order: id, key, failures, when parked, the last failure "
      "reason, the payload (shortened; see dlq show). --count: at most N (default 100); "
      "--after ID: page on from the last id shown." },
    { "dlq show", cli_cmd_dlq_show, "GROUP ID", "Show one parked message in full. Exit 1 when it is not in the DLQ." },
    { "dlq requeue", cli_cmd_dlq_requeue, "GROUP (ID | --all)",
      "Move one message (or all) back to the group's retry-ready queue with its failure count "
      "reset; consumers get it at once. Exit 1 when the ID is not in the DLQ." },
    { "dlq drop", cli_cmd_dlq_drop, "GROUP (ID | --all)",
      "Delete one parked message (or all) for good. Exit 1 when the ID is not in the DLQ." },
    { "passwd", cli_cmd_passwd, "[--pbkdf2] [--cost N] [USER ROLES]",
      "Make a password hash for the broker's users-file (no broker needed). The password is "
      "asked twice on the terminal without echo, or read as the first line of stdin. Prints "
      "the hash, or with USER and ROLES (producer, consumer, admin, viewer; comma-separated) "
      "a whole users-file line. Default: scrypt ln=15 r=8 p=1 (--cost: ln, 10..20); --pbkdf2: "
      "PBKDF2-SHA256, 600000 iterations (--cost: iterations)." },
};

#define NCOMMANDS (sizeof(commands) / sizeof(commands[0]))

const command_t *cli_find_command(const char *name)
{
    for (size_t i = 0; i < NCOMMANDS; i++)
        if (strcmp(commands[i].name, name) == 0)
            return &commands[i];
    return NULL;
}

/* Print text word-wrapped at 78 columns, every line indented by indent. */
static void print_wrapped(FILE *f, int indent, const char *text)
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
    print_wrapped(f, 0, cmd->help);
}

static void print_help(FILE *f)
{
    fprintf(f, "usage: hourglass-cli [--uri URI] [--tls-* FILE] [--json] [--timeout MS] COMMAND [ARGS]\n"
               "\n"
               "Administer an Hourglass broker and drain dead-letter queues by hand.\n"
               "\n"
               "Options:\n"
               "  --uri URI      broker to talk to: hourglass://[user:pass@]host[:port], or\n"
               "                 hourglass+tls://…[?ca=FILE&cert=FILE&key=FILE&sni=NAME] for its tls-port\n"
               "                 (default: $HOURGLASS_URI, else " CLI_DEFAULT_URI ")\n"
               "  --user U       log in as U (instead of the URI's user)\n"
               "  --password-file F  read the password from file F (instead of the URI's)\n"
               "  --tls-ca-cert-file FILE  CA the broker's certificate must chain to\n"
               "                 (default: the system's trust store)\n"
               "  --tls-cert-file FILE, --tls-key-file FILE  client certificate and key (mutual TLS)\n"
               "  --tls-server-name NAME   name the broker's certificate must carry (default: the host)\n"
               "  --json         print one JSON value for scripts instead of tables\n"
               "  --timeout MS   connect and reply timeout in milliseconds (default 5000)\n"
               "  --help         this text; COMMAND --help describes one command\n"
               "  --version      print the version\n"
               "\n"
               "Commands:\n");
    for (size_t i = 0; i < NCOMMANDS; i++)
        if (strcmp(commands[i].name, "dlq") != 0)
            fprintf(f, "  %s%s%s\n", commands[i].name, commands[i].usage[0] ? " " : "", commands[i].usage);
    fprintf(f, "\n"
               "Exit status:\n"
               "  0  success\n"
               "  1  the broker answered an error, or the message asked for is not there\n"
               "  2  usage error: unknown command or option, bad argument or URI\n"
               "  3  cannot reach the broker: connection refused, lost or timed out\n");
}

/* dlq SUBCOMMAND: the subcommands are table entries named "dlq list" …. */
static int cmd_dlq(cli_t *cli, int argc, char **argv)
{
    char name[32];
    const command_t *sub;

    if (argc < 2 || strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0) {
        FILE *f = argc < 2 ? stderr : stdout;
        fprintf(f, "usage: hourglass-cli [--uri URI] [--json] dlq SUBCOMMAND ...\n\n");
        for (size_t i = 0; i < NCOMMANDS; i++)
            if (strncmp(commands[i].name, "dlq ", 4) == 0) {
                fprintf(f, "  %s %s\n", commands[i].name, commands[i].usage);
                print_wrapped(f, 6, commands[i].help);
            }
        return argc < 2 ? EXIT_USAGE : 0;
    }
    snprintf(name, sizeof(name), "dlq %s", argv[1]);
    sub = cli_find_command(name);
    if (sub == NULL)
        return cli_usage_error("unknown dlq subcommand '%s' (list, show, requeue, drop)", argv[1]);
    return sub->fn(cli, argc - 1, argv + 1);
}

/* The field of a --tls-* flag a[0..n), or NULL when a is not one. */
static const char **tls_flag(cli_t *cli, const char *a, size_t n)
{
    static const char *const names[] = { "--tls-ca-cert-file", "--tls-cert-file", "--tls-key-file",
                                         "--tls-server-name" };
    const char **fields[] = { &cli->tls_ca_cert_file, &cli->tls_cert_file, &cli->tls_key_file, &cli->tls_server_name };
    for (size_t k = 0; k < sizeof(names) / sizeof(names[0]); k++)
        if (strlen(names[k]) == n && strncmp(a, names[k], n) == 0)
            return fields[k];
    return NULL;
}

int main(int argc, char **argv)
{
    cli_t cli;
    const command_t *cmd;
    const char *env = getenv("HOURGLASS_URI");
    int i, rc;

    memset(&cli, 0, sizeof(cli));
    cli.uri = env != NULL && env[0] != '\0' ? env : CLI_DEFAULT_URI;
    cli.timeout_ms = 5000;

    for (i = 1; i < argc && argv[i][0] == '-'; i++) {
        const char *a = argv[i], *value = NULL;
        size_t n = strcspn(a, "=");
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
            print_help(stdout);
            return 0;
        }
        if (strcmp(a, "--version") == 0) {
            printf("hourglass-cli %s\n", HG_VERSION_STRING);
            return 0;
        }
        if (strcmp(a, "--json") == 0) {
            cli.json = 1;
            continue;
        }
        const char **tls_value = tls_flag(&cli, a, n);
        if ((n == 5 && strncmp(a, "--uri", 5) == 0) || (n == 9 && strncmp(a, "--timeout", 9) == 0) ||
            (n == 6 && strncmp(a, "--user", 6) == 0) || (n == 15 && strncmp(a, "--password-file", 15) == 0) ||
            tls_value != NULL) {
            if (a[n] == '=')
                value = a + n + 1;
            else if (i + 1 < argc)
                value = argv[++i];
            else
                return cli_usage_error("%.*s needs a value", (int)n, a);
            if (value[0] == '\0')
                return cli_usage_error("%.*s needs a value", (int)n, a);
            if (tls_value != NULL) {
                *tls_value = value;
            } else if (n == 5) {
                cli.uri = value;
            } else if (n == 6) {
                cli.user = value;
            } else if (n == 15) {
                cli.password_file = value;
            } else {
                uint64_t v;
                if (cli_parse_u64(value, &v) < 0 || v == 0 || v > 86400000)
                    return cli_usage_error("--timeout '%s' is not a number of milliseconds 1..86400000", value);
                cli.timeout_ms = (uint32_t)v;
            }
            continue;
        }
        return cli_usage_error("unknown option '%s'", a);
    }
    if (i >= argc) {
        print_help(stderr);
        return EXIT_USAGE;
    }
    if ((cli.tls_ca_cert_file || cli.tls_cert_file || cli.tls_key_file || cli.tls_server_name) &&
        strncasecmp(cli.uri, "hourglass+tls://", 16) != 0)
        return cli_usage_error("--tls-* given but the URI is not hourglass+tls:// (it would not be used)");
    cmd = cli_find_command(argv[i]);
    if (cmd == NULL || strchr(argv[i], ' ') != NULL)
        return cli_usage_error("unknown command '%s'", argv[i]);
    rc = cmd->fn(&cli, argc - i, argv + i);
    hg_client_close(cli.client);
    if (fflush(stdout) != 0 && rc == 0)
        rc = cli_fail(EXIT_BROKER, "writing the output: %s", strerror(errno));
    return rc;
}
