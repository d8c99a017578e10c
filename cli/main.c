/*
 * cli/main.c — hourglass-cli, the operator's tool: levels, groups, INFO,
 * send, draining a dead-letter queue, looking up and revoking messages, and
 * the order view (overdue orders, why, manual cancel).
 *
 *   hourglass-cli [OPTIONS] COMMAND [ARGS]   (options anywhere on the line)
 *
 * This file: the command table (name, handler, usage, help) from which
 * `--help` output and dispatch come, the global options (taken out of argv
 * wherever they stand, up to "--"), and the one broker connection and the
 * one order database every command uses. The commands are in cli/cmd_*.c;
 * output is an aligned table for people or, with --json, one JSON value on
 * stdout for scripts. Messages go to stderr (cli/messages.c: they and the
 * exit codes, and a command's help, sit below this file and the commands).
 *
 * Exit codes (also in --help):
 *   0  success
 *   1  the broker answered an error (or something the cli cannot read),
 *      or the thing asked for does not exist (dlq show/requeue/drop ID)
 *   2  usage: bad command, option or URI
 *   3  cannot reach the broker (or MariaDB): connect failed, lost, timed out
 *
 * Single-threaded; everything is freed before exit (valgrind-clean).
 */
#include "cli/cli.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "base/alloc.h"
#include "base/units.h"
#include "cli/args.h"
#include "common/argv_secret.h"
#include "common/passwd.h"
#include "common/tls_keys.h"
#include "common/uri_password.h"

/* ------------------------------------------------------------------------
 * Connection and commands
 * ------------------------------------------------------------------------ */

/* What the library's "no password given for user 'u'" lacks: where this
 * program takes a password. */
#define NO_PASSWORD_HINT "give it with --password-file F, or as user:pass@ in --uri or $HOURGLASS_URI"

/* The client options of cli's flags into *opts: the credentials (--user;
 * --password-file read into password[PASSWD_FILE_MAX + 1], which the caller
 * wipes), the timeouts, the TLS files. Returns 0, or EXIT_USAGE with why
 * (--user without a password anywhere, an unreadable password file). */
static int client_opts(const cli_t *cli, hg_client_opts_t *opts, char *password, char *why, size_t whylen)
{
    hg_client_opts_init(opts);
    size_t password_at, password_len; /* the URI's user:pass@ (not "user:@": libhourglass refuses an empty one) */
    if (cli->user != NULL && cli->password_file == NULL && !uri_password_span(cli->uri, &password_at, &password_len)) {
        snprintf(why, whylen,
                 "--user '%s' needs --password-file F (or the URI's user:pass@) (see hourglass-cli --help)", cli->user);
        return EXIT_USAGE;
    }
    if (cli->password_file != NULL) {
        if (passwd_read_file(cli->password_file, password, PASSWD_FILE_MAX + 1, why, whylen) != 0)
            return EXIT_USAGE;
        opts->password = password;
    }
    opts->user = cli->user;
    /* --timeout 0 waits for replies forever; a connection attempt still
     * gives up after the default 5 s (the library refuses 0 there). */
    opts->connect_timeout_ms = cli->timeout_ms != 0 ? cli->timeout_ms : CLI_DEFAULT_TIMEOUT_MS;
    opts->read_timeout_ms = cli->timeout_ms;
    opts->reconnect_backoff.attempts = 1; /* an operator wants an answer now */
    opts->resend_sends = 0;               /* `send` once, as typed */
    opts->tls_ca_file = cli->tls_ca_cert_file;
    opts->tls_cert_file = cli->tls_cert_file;
    opts->tls_key_file = cli->tls_key_file;
    opts->tls_server_name = cli->tls_server_name;
    return 0;
}

int cli_open_client(cli_t *cli, char *why, size_t whylen)
{
    hg_client_opts_t opts;
    hg_error_t err;
    hg_err_t e;
    char password[PASSWD_FILE_MAX + 1];
    int rc;

    why[0] = '\0';
    if (cli->client != NULL)
        return 0;
    if ((rc = client_opts(cli, &opts, password, why, whylen)) != 0)
        return rc;
    e = hg_client_open(cli->uri, &opts, &cli->client, &err);
    memset(password, 0, sizeof(password));
    if (e != HG_OK) {
        /* Without a CA named, the system's trust store was used: a private
         * CA's certificate fails there, so say which flag names it. */
        if (strstr(err.message, "is not trusted") != NULL && cli->tls_ca_cert_file == NULL &&
            strstr(cli->uri, "ca=") == NULL)
            snprintf(why, whylen,
                     "%s (checked against the system's trust store: name the broker's CA with "
                     "--tls-ca-cert-file FILE or ?ca=FILE in the URI)",
                     err.message);
        /* The library does not know where this program takes a password:
         * say it (the URI names a user, and no --password-file was given). */
        else if (e == HG_ERR_ARG && strncmp(err.message, "no password given for user", 26) == 0)
            snprintf(why, whylen, "%s: " NO_PASSWORD_HINT, err.message);
        else
            snprintf(why, whylen, "%s", err.message);
        return cli_exit_code(e);
    }
    return 0;
}

int cli_connect(cli_t *cli)
{
    char why[CLI_WHY_MAX];
    int rc = cli_open_client(cli, why, sizeof why);

    if (rc != 0)
        return cli_fail(rc, "%s", why);
    return 0;
}

int cli_run_notice(cli_t *cli, hg_reply_t **reply, int argc, const char *const *argv, uint32_t notice_ms,
                   void (*notice)(void *arg), void *arg)
{
    hg_err_t e;
    int rc = cli_connect(cli);

    *reply = NULL;
    if (rc != 0)
        return rc;
    if (notice != NULL)
        e = hg_client_command_notice(cli->client, argc, argv, NULL, notice_ms, notice, arg, reply);
    else
        e = hg_client_command(cli->client, argc, argv, NULL, reply);
    if (e != HG_OK)
        return cli_client_failure(cli, e);
    return 0;
}

int cli_run(cli_t *cli, hg_reply_t **reply, int argc, const char *const *argv)
{
    return cli_run_notice(cli, reply, argc, argv, 0, NULL, NULL);
}

int cli_unexpected(const char *cmd, const hg_reply_t *r)
{
    (void)r;
    return cli_fail(EXIT_BROKER, "unexpected reply to %s from the broker", cmd);
}

int cli_orders_db(cli_t *cli)
{
    char err[600];

    if (cli->orders != NULL)
        return 0;
    cli->orders = cli_config_open_db(&cli->conf, err, sizeof err);
    if (cli->orders == NULL)
        return cli_fail(strncmp(err, "MariaDB:", 8) == 0 ? EXIT_CONNECT : EXIT_USAGE, "%s", err);
    return 0;
}

/* ------------------------------------------------------------------------
 * The command table and help
 * ------------------------------------------------------------------------ */

static int cmd_family(cli_t *cli, int argc, char **argv);

static const command_t commands[] = {
    { "ping", cli_cmd_ping, "", "Check that the broker answers." },
    { "levels", cli_cmd_levels, "",
      "The delay levels: number, delay, messages waiting (depth) and when the head is due." },
    { "topics", cli_cmd_topics, "[--count N] [--after TOPIC]",
      "The topics: messages ready for some group, delayed (still on the levels), retained in the log, SENDs "
      "since the broker started, whether keyed SENDs deduplicate (dedup-topics), and the topic's groups. "
      "--count N --after TOPIC: one page, the N topics after TOPIC in name order (TOPICS COUNT n AFTER t)." },
    { "topic", cmd_family, "(del) ...", "Delete an empty topic. See `hourglass-cli topic del --help`." },
    { "topic del", cli_cmd_topic_del, "TOPIC [--purge]",
      "Delete an empty topic: no group bound to it, no message in its log or on the levels (the broker's admin "
      "role; audited). It frees its place under max-topics. --purge: first delete the messages a topic without "
      "groups keeps for retention (TOPIC DEL topic PURGE; waits for the answer up to 10 minutes or --timeout "
      "if longer, forever with --timeout 0). Exit 1 when "
      "there is no such topic, or when it is not empty (the broker says why)." },
    { "groups", cli_cmd_groups, "[--count N] [--after GROUP]",
      "The consumer groups: topic, ready/backlog/retry/in-flight/DLQ counts, max retries. "
      "--count N --after GROUP: one page, the N groups after GROUP in name order (GROUP LIST COUNT n AFTER g)." },
    { "group", cmd_family, "(create|del) ...",
      "Create or delete a consumer group. See `hourglass-cli group SUBCOMMAND --help`." },
    { "group create", cli_cmd_group_create, "GROUP TOPIC [--from first|now] [--max-retry N]",
      "Create a consumer group bound to TOPIC. --from first (default): it gets every message the topic "
      "still holds; --from now: only messages that arrive later. --max-retry N: failures retried before "
      "the DLQ (0..1000; default the broker's max-reconsume). Exit 1 when the group exists (the broker "
      "names its topic)." },
    { "group del", cli_cmd_group_del, "GROUP",
      "Delete a consumer group with its retry queue, leases and DLQ (the broker's admin role; audited): it is gone "
      "at once, its entries are deleted in the background (INFO groups_deleting_entries). "
      "Exit 1 when there is no such group." },
    { "info", cli_cmd_info, "[SECTION]",
      "The broker's INFO text (sections: server clients levels groups storage stats memory; all: every one; "
      "another name is a usage error). "
      "With --json: an object of sections, each an object of fields." },
    { "backup", cli_cmd_backup, "NAME [--no-wait]",
      "Copy the broker's data directory while it runs, consistent as of the command, to backup-dir/NAME on the "
      "broker's host (BACKUP; the admin role; audited), and wait until the copy is whole: exit 0, or 1 with the "
      "broker's reason. --no-wait: return once the copy started (INFO storage shows it). Restore: stop the "
      "broker and start it on a copy of that directory (docs/operations.md)." },
    { "send", cli_cmd_send, "TOPIC PAYLOAD [--key K] [--level N | --delay D | --at MS]",
      "Send one message and print its id. --level N: exactly level N of the broker's table (0 = now; "
      "checked against its LEVELS). "
      "--delay D: a duration (1500 = ms, or 500ms 30s 25m 2h 1d), reached by chaining levels. "
      "--at MS: an absolute Unix time in milliseconds. Without any: deliver now." },
    { "dlq", cmd_family, "(list|show|requeue|drop) ...",
      "Inspect and drain a group's dead-letter queue. See `hourglass-cli dlq SUBCOMMAND --help`." },
    { "dlq list", cli_cmd_dlq_list, "GROUP [--count N] [--after ID] [--all]",
      "List parked messages in id order: id, key, failures, when parked, the last failure "
      "reason, the payload (shortened; see dlq show). --count: at most N (default 100); "
      "--after ID: page on from the last id shown; when there are more, a last line says how to "
      "page on. --all: every message, in pages, with progress on stderr." },
    { "dlq show", cli_cmd_dlq_show, "GROUP ID", "Show one parked message in full. Exit 1 when it is not in the DLQ." },
    { "dlq requeue", cli_cmd_dlq_requeue, "GROUP (ID | --all)",
      "Move one message (or all) back to the group's retry-ready queue with its failure count "
      "reset; consumers get it at once. Exit 1 when the ID is not in the DLQ. --all: the broker "
      "moves them in steps, serving other clients in between, and answers after the last; "
      "the reply timeout grows by 50 ms per 1000 messages." },
    { "dlq drop", cli_cmd_dlq_drop, "GROUP (ID | --all)",
      "Delete one parked message (or all) for good. Exit 1 when the ID is not in the DLQ. "
      "--all: in steps, as dlq requeue --all." },
    { "passwd", cli_cmd_passwd, "[--pbkdf2] [--cost N] [USER ROLES]",
      "Make a password hash for the broker's users-file (no broker needed). The password is "
      "asked twice on the terminal without echo, or read as the first line of stdin (a NUL byte in it is "
      "refused). Prints "
      "the hash, or with USER and ROLES (producer, consumer, admin, viewer; comma-separated) "
      "a whole users-file line (USER: 1..64 of A-Z a-z 0-9 . _ @ -; a name or role the broker would refuse is a "
      "usage error, and so is a --cost out of range; each is refused before the password is asked). Default: "
      "scrypt ln=15 r=8 p=1 (--cost: ln, 10..18: at most 256 MiB); --pbkdf2: PBKDF2-SHA256, 600000 iterations "
      "(--cost: iterations, 1000..10000000)." },
    { "orders", cmd_family, "(overdue|show|cancel) ...",
      "The order view on MariaDB (needs --mysql-database or a --config file). "
      "See `hourglass-cli orders SUBCOMMAND --help`." },
    { "orders overdue", cli_cmd_orders_overdue, "[--older-than D] [--limit N] [--after CURSOR]",
      "Pending orders past their expiry, oldest first: how late, the outbox row, the state of the "
      "timeout message in the broker (FIND) and why the order is late: not-sent, no-message (lost), "
      "in-dlq, delayed or consumer-lagging. --older-than D: only orders overdue by more than D "
      "(a duration: 30s, 5m, 2h); --limit N: at most N (default 50, at most 1000); --after: page on "
      "from the cursor the last page printed." },
    { "orders show", cli_cmd_orders_show, "ID",
      "One order in full: status, times, cancel reason, items, the outbox row, its message(s) in the "
      "broker and, when it is late, why. Exit 1 when there is no such order." },
    { "orders cancel", cli_cmd_orders_cancel, "ID [--reason R]",
      "Cancel an order by hand through the same idempotent cancel as the consumer (claim, stock "
      "back, outbox row done, one transaction), recording reason R (default manual). Prints the "
      "outcome: cancelled, not-pending (paid or cancelled already; nothing changed) or not-found "
      "(exit 1)." },
    { "msg", cmd_family, "(show|find|revoke) ...",
      "Look up and revoke messages in the broker. See `hourglass-cli msg SUBCOMMAND --help`." },
    { "msg show", cli_cmd_msg_show, "ID",
      "One message and its state (GET): delayed on a level, ready, leased, retrying, in a DLQ or "
      "gone; its topic, key, due time, failures and each group's copy." },
    { "msg find", cli_cmd_msg_find, "TOPIC KEY",
      "The messages of TOPIC with key KEY the broker still holds (FIND), with their states. "
      "(TOPIC --key KEY is taken too.)" },
    { "msg revoke", cli_cmd_msg_revoke, "(ID | TOPIC KEY)",
      "Take back messages not delivered yet (REVOKE): one by id (16 hex digits, as send and msg find print it), "
      "or every one of TOPIC with KEY, the same TOPIC KEY as msg find (TOPIC --key KEY, the older form, is taken "
      "too). Prints how many were revoked and why the others were refused (already delivered)." },
};

#define NCOMMANDS (sizeof(commands) / sizeof(commands[0]))

const command_t *cli_find_command(const char *name)
{
    for (size_t i = 0; i < NCOMMANDS; i++)
        if (strcmp(commands[i].name, name) == 0)
            return &commands[i];
    return NULL;
}

static void print_help(FILE *f)
{
    fprintf(f,
            "usage: hourglass-cli [OPTIONS] COMMAND [ARGS]\n"
            "\n"
            "Administer an Hourglass broker, drain dead-letter queues, look up and revoke messages,\n"
            "and find and cancel overdue orders by hand.\n"
            "\n"
            "Options (anywhere on the line, before or after the command):\n"
            "  -u, --uri URI  broker to talk to: hourglass://[user[:pass]@]host[:port] (user@ alone: the\n"
            "                 password from --password-file), or\n"
            "                 hourglass+tls://…[?ca=FILE&cert=FILE&key=FILE&sni=NAME] for its tls-port,\n"
            "                 amqp://[user:pass@]host[:port][,…][/vhost][?levels=1s,5s,…] or amqps://… for RabbitMQ\n"
            "                 (default: $HOURGLASS_URI, else the file's uri, else " CLI_DEFAULT_URI ")\n"
            "  --user U       log in as U (instead of the URI's user; the password: --password-file or the URI's)\n"
            "  --password-file F  read the password from file F (instead of the URI's)\n"
            "  --tls-ca-cert-file FILE  CA the broker's certificate must chain to (hourglass+tls://, amqps://)\n"
            "                 (default: the system's trust store)\n"
            "  --tls-cert-file FILE, --tls-key-file FILE  client certificate and key (mutual TLS)\n"
            "  --tls-server-name NAME   name the broker's certificate must carry (default: the host)\n"
            "  --json         print one JSON value for scripts instead of tables\n"
            "  --timeout D    connect and reply timeout, a duration: 500ms, 5s, 2m (a bare number is\n"
            "                 milliseconds; at most 1d; 0: wait for replies forever) (default 5s)\n"
            "  -c, --config FILE  an INI file of the keys below (and uri)\n"
            "  --check-config check the file, the flags and the URI without connecting, print the\n"
            "                 effective configuration (the URI without its password); exit 0 if\n"
            "                 valid, 2 if not (no COMMAND)\n"
            "  --help         this text; COMMAND --help describes one command\n"
            "  --version      print the version\n"
            "\n"
            "The order database (orders …), as for hourglass-consumer and hourglass-compensator:\n");
    for (size_t i = 1; i < cli_config_table.count; i++)
        fprintf(f, "  --%-24s %s\n", cli_config_table.keys[i].name, cli_config_table.keys[i].help);
    fprintf(f, "  (each as --KEY VALUE or --KEY=VALUE)\n");
    fprintf(f, "\n"
               "Commands:\n");
    for (size_t i = 0; i < NCOMMANDS; i++)
        if (commands[i].fn != cmd_family)
            fprintf(f, "  %s%s%s\n", commands[i].name, commands[i].usage[0] ? " " : "", commands[i].usage);
    fprintf(f, "\n"
               "Exit status:\n"
               "  0  success\n"
               "  1  the broker answered an error, or the one thing named is not there (dlq show|requeue|drop\n"
               "     ID, msg show|revoke ID, group del, topic del, orders show|cancel); a search by key\n"
               "     (msg find, msg revoke TOPIC KEY) or a listing that finds nothing is 0\n"
               "  2  usage error: unknown command or option, bad argument or URI\n"
               "  3  cannot reach the broker (or MariaDB): connection refused, lost or timed out\n");
}

/* FAMILY SUBCOMMAND (dlq, orders, msg): the subcommands are table entries
 * named "dlq list" …. */
static int cmd_family(cli_t *cli, int argc, char **argv)
{
    char name[64], prefix[32], names[128] = "";
    const command_t *sub;
    size_t plen;

    snprintf(prefix, sizeof prefix, "%s ", argv[0]);
    plen = strlen(prefix);
    for (size_t i = 0; i < NCOMMANDS; i++)
        if (strncmp(commands[i].name, prefix, plen) == 0)
            snprintf(names + strlen(names), sizeof names - strlen(names), "%s%s", names[0] ? ", " : "",
                     commands[i].name + plen);
    if (argc < 2 || strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0) {
        FILE *f = argc < 2 ? stderr : stdout;
        fprintf(f, "usage: hourglass-cli [--uri URI] [--json] %s SUBCOMMAND ...\n\n", argv[0]);
        for (size_t i = 0; i < NCOMMANDS; i++)
            if (strncmp(commands[i].name, prefix, plen) == 0) {
                fprintf(f, "  %s %s\n", commands[i].name, commands[i].usage);
                cli_print_wrapped(f, 6, commands[i].help);
            }
        return argc < 2 ? EXIT_USAGE : 0;
    }
    snprintf(name, sizeof(name), "%s%s", prefix, argv[1]);
    sub = cli_find_command(name);
    if (sub == NULL)
        return cli_usage_error("unknown %s subcommand '%s' (%s)", argv[0], argv[1], names);
    return sub->fn(cli, argc - 1, argv + 1);
}

/* A global option with a value: "--uri URI", "--uri=URI", "-u URI". Returns
 * 1 and *value (advancing *i past it) when argv[*i] is name (or short), 0
 * when it is not, -1 with a usage error printed when the value is missing. */
static int global_value(int argc, char **argv, int *i, const char *name, const char *short_name, const char **value)
{
    const char *a = argv[*i];
    size_t n = strlen(name);

    if (strncmp(a, name, n) == 0 && a[n] == '=') {
        *value = a + n + 1;
        return 1;
    }
    if (strcmp(a, name) != 0 && (short_name == NULL || strcmp(a, short_name) != 0))
        return 0;
    if (*i + 1 >= argc) {
        cli_usage_error("%s needs a value", a);
        return -1;
    }
    *value = argv[++*i];
    return 1;
}

/* The field a string-valued global option (--user, --password-file,
 * --tls-*; a may carry "=value") sets. Only called for those names. */
static const char **string_option(cli_t *cli, const char *a)
{
    static const char *const names[] = { "--user",          "--password-file", "--tls-ca-cert-file",
                                         "--tls-cert-file", "--tls-key-file",  "--tls-server-name" };
    const char **fields[] = { &cli->user,          &cli->password_file, &cli->tls_ca_cert_file,
                              &cli->tls_cert_file, &cli->tls_key_file,  &cli->tls_server_name };
    size_t n = strcspn(a, "=");
    for (size_t k = 0; k < sizeof(names) / sizeof(names[0]); k++)
        if (strlen(names[k]) == n && strncmp(a, names[k], n) == 0)
            return fields[k];
    abort(); /* unreachable: parse_globals matched one of names */
}

/* Take the global options out of argv wherever they stand (before or after
 * the command, never after "--"), so `hourglass-cli ping --json` works; the
 * rest, in order, go to rest[]. --help before the command is the global
 * help; after it, the command's. Returns -1 to go on, or the exit code. */
static int parse_globals(cli_t *cli, int argc, char **argv, char **rest, int *nrest, const char **config_path,
                         const char **db_flags, int *ndb)
{
    int have_command = 0, raw = 0;

    *nrest = 0;
    *ndb = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *value = NULL;
        int r;
        if (raw || a[0] != '-' || a[1] == '\0') {
            have_command = 1;
            rest[(*nrest)++] = argv[i];
            continue;
        }
        if (strcmp(a, "--") == 0) {
            raw = 1;
            rest[(*nrest)++] = argv[i];
            continue;
        }
        if (!have_command && (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0)) {
            print_help(stdout);
            return 0;
        }
        if (!have_command && strcmp(a, "--check-config") == 0) {
            cli->check_config = 1;
            continue;
        }
        if (!have_command && strcmp(a, "--version") == 0) {
            printf("hourglass-cli %s\n", HG_VERSION_STRING);
            return 0;
        }
        if (strcmp(a, "--json") == 0) {
            cli->json = 1;
            continue;
        }
        if ((r = global_value(argc, argv, &i, "--uri", "-u", &value)) != 0) {
            if (r < 0)
                return EXIT_USAGE;
            cli->uri = value;
            continue;
        }
        if ((r = global_value(argc, argv, &i, "--user", NULL, &value)) != 0 ||
            (r = global_value(argc, argv, &i, "--password-file", NULL, &value)) != 0 ||
            (r = global_value(argc, argv, &i, "--tls-ca-cert-file", NULL, &value)) != 0 ||
            (r = global_value(argc, argv, &i, "--tls-cert-file", NULL, &value)) != 0 ||
            (r = global_value(argc, argv, &i, "--tls-key-file", NULL, &value)) != 0 ||
            (r = global_value(argc, argv, &i, "--tls-server-name", NULL, &value)) != 0) {
            if (r < 0)
                return EXIT_USAGE;
            if (value[0] == '\0')
                return cli_usage_error("%.*s needs a value", (int)strcspn(a, "="), a);
            *string_option(cli, a) = value;
            continue;
        }
        if ((r = global_value(argc, argv, &i, "--config", "-c", &value)) != 0) {
            if (r < 0)
                return EXIT_USAGE;
            *config_path = value;
            continue;
        }
        if ((r = global_value(argc, argv, &i, "--timeout", NULL, &value)) != 0) {
            /* The one duration grammar (base/units.h); a bare number stays
             * milliseconds, as --timeout took before and scripts still give. */
            uint64_t v;
            char why[200];
            if (r < 0)
                return EXIT_USAGE;
            if (units_parse_duration_str(value, UNITS_BARE_MS, &v, why, sizeof why) < 0)
                return cli_usage_error("--timeout '%s' is not a duration: %s (e.g. 500ms, 5s, 2m; a bare number is "
                                       "milliseconds; 0: wait for replies forever)",
                                       value, why);
            if (v > CLI_TIMEOUT_MAX_MS)
                return cli_usage_error("--timeout '%s' is above the maximum of 1d (0 waits for replies forever)",
                                       value);
            cli->timeout_ms = (uint32_t)v;
            continue;
        }
        if (cli_config_is_flag(a)) {
            db_flags[(*ndb)++] = a;
            if (strchr(a, '=') == NULL) {
                if (i + 1 >= argc)
                    return cli_usage_error("%s needs a value", a);
                db_flags[(*ndb)++] = argv[++i];
            } else {
                db_flags[(*ndb)++] = NULL;
            }
            continue;
        }
        if (!have_command)
            return cli_usage_error("unknown option '%s'", a);
        rest[(*nrest)++] = argv[i]; /* the command's own option */
    }
    return -1;
}

/* The configuration: defaults, the --config file, the --mysql-* flags (pairs
 * of flag and value; value NULL when the flag carries "=value"). Returns 0
 * or EXIT_USAGE with the message printed. */
static int load_config(cli_t *cli, const char *config_path, const char **db_flags, int ndb)
{
    char err[512];

    if (config_path != NULL && cfg_load_file(&cli_config_table, &cli->conf, config_path, err, sizeof err) < 0) {
        /* The table's message already points at --help: not twice. An
         * unknown key is most often one of a daemon's files (user, tls-*),
         * which this file does not take: say where those go. */
        char *see = strstr(err, " (see --help for the keys)");
        if (see == NULL)
            return cli_usage_error("%s", err);
        *see = '\0';
        if (strstr(err, ": unknown key '") != NULL)
            return cli_fail(EXIT_USAGE,
                            "%s: this file takes uri, order-topic and the mysql-* keys only (see --help); the user "
                            "and the TLS files go in flags (--user, --password-file, --tls-ca-cert-file) or in the "
                            "uri (hourglass+tls://user@host:port?ca=FILE, with --password-file)",
                            err);
        return cli_fail(EXIT_USAGE, "%s (see --help for the keys)", err);
    }
    for (int k = 0; k < ndb; k += 2) {
        const char *flag = db_flags[k] + 2, *value = db_flags[k + 1];
        char name[64];
        size_t n = strcspn(flag, "=");
        if (value == NULL)
            value = flag + n + 1;
        snprintf(name, sizeof name, "%.*s", (int)n, flag);
        if (cfg_set(&cli_config_table, &cli->conf, name, value, CFG_SOURCE_FLAG, err, sizeof err) < 0)
            return cli_usage_error("%s", err);
    }
    return 0;
}

/* The broker URI a command uses: --uri/-u, else $HOURGLASS_URI (when not
 * empty), else the --config file's uri, else the default. */
static const char *effective_uri(const cli_t *cli)
{
    const char *env = getenv("HOURGLASS_URI");

    if (cli->uri != NULL)
        return cli->uri;
    if (env != NULL && env[0] != '\0')
        return env;
    return cli->conf.uri != NULL ? cli->conf.uri : CLI_DEFAULT_URI;
}

/* The --tls-* flags act on a TLS URI only: refuse them with another, so a
 * forgotten "+tls" is not plaintext. Returns 0, or EXIT_USAGE with the
 * message printed. */
static int check_tls_flags(const cli_t *cli)
{
    if ((cli->tls_ca_cert_file || cli->tls_cert_file || cli->tls_key_file || cli->tls_server_name) &&
        !tls_uri(cli->uri))
        return cli_usage_error(
            "--tls-* given but the URI is neither hourglass+tls:// nor amqps:// (it would not be used)");
    return 0;
}

/* cli->uri and the flags a client takes from (credentials, TLS files),
 * checked by libhourglass without connecting (common/tls_keys.h), with
 * order-topic, the topic the order commands read. Returns 0, or -1 with err
 * ("uri: bad URI: bad port '0': …", "--password-file: …"). */
static int check_uri(const cli_t *cli, char *err, size_t errlen)
{
    hg_client_opts_t client;
    hg_consumer_opts_t o;
    char password[PASSWD_FILE_MAX + 1];

    if (cli->uri[0] == '\0') {
        snprintf(err, errlen, "uri: empty (give --uri URI, $HOURGLASS_URI or uri in the --config file)");
        return -1;
    }
    if (client_opts(cli, &client, password, err, errlen) != 0)
        return -1;
    hg_consumer_opts_init(&o);
    o.client = &client;
    o.uri = cli->uri;
    o.group = "check";
    o.topic = cli->conf.order_topic;
    int rc = tls_keys_check_uri(&o, "order-topic", NO_PASSWORD_HINT, err, errlen);
    memset(password, 0, sizeof password);
    return rc;
}

/* --check-config: what the file and the flags make (the daemons' --check-config: the checks that need no
 * connection, then the effective keys, the URI used among them without its password, and "configuration OK").
 * Returns 0, or EXIT_USAGE with the message. */
static int check_config(cli_t *cli, const char *config_path, const char *command)
{
    char err[512];

    if (command != NULL)
        return cli_usage_error("--check-config runs no command ('%s' given)", command);
    if (DB_KEYS_CHECK(&cli->conf, err, sizeof err) < 0)
        return cli_usage_error("%s", err);
    if (check_uri(cli, err, sizeof err) < 0)
        return cli_fail(EXIT_USAGE, "%s", err); /* as a command says it, without connecting */
    /* The print shows the URI a command would use (the table's print takes its password out). */
    if (cfg_set(&cli_config_table, &cli->conf, "uri", cli->uri, CFG_SOURCE_FLAG, err, sizeof err) < 0)
        return cli_usage_error("%s", err);
    cfg_print_check(&cli_config_table, &cli->conf, HG_VERSION_STRING, NULL, config_path, stdout, stderr);
    return 0; /* a value not printable is said on stderr; the configuration is still valid */
}

int main(int argc, char **argv_shown)
{
    /* The cli reads a copy of its arguments: in argv_shown (ps, /proc/PID/cmdline) a password is hidden. */
    char **argv = argv_secret_protect(argc, argv_shown, "--password-file (or $HOURGLASS_URI)");
    cli_t cli;
    const command_t *cmd;
    const char *config_path = NULL;
    char **rest = xcalloc((size_t)argc + 1, sizeof *rest);
    const char **db_flags = xcalloc((size_t)argc * 2 + 2, sizeof *db_flags);
    int nrest, ndb, rc;

    memset(&cli, 0, sizeof(cli));
    cli.timeout_ms = CLI_DEFAULT_TIMEOUT_MS;
    cli_config_init(&cli.conf);
    rc = parse_globals(&cli, argc, argv, rest, &nrest, &config_path, db_flags, &ndb);
    if (rc < 0)
        rc = load_config(&cli, config_path, db_flags, ndb);
    else
        nrest = -1; /* help, version or a usage error: done */
    if (rc == 0 && nrest >= 0) {
        cli.uri = effective_uri(&cli);
        rc = check_tls_flags(&cli);
    }
    if (rc == 0 && nrest >= 0 && cli.check_config) {
        rc = check_config(&cli, config_path, nrest > 0 ? rest[0] : NULL);
        nrest = -1;
    }
    if (rc == 0 && nrest >= 0) {
        if (nrest == 0) {
            print_help(stderr);
            rc = EXIT_USAGE;
        } else if ((cmd = cli_find_command(rest[0])) == NULL || strchr(rest[0], ' ') != NULL) {
            rc = cli_usage_error("unknown command '%s'", rest[0]);
        } else {
            rc = cmd->fn(&cli, nrest, rest);
        }
    }
    hg_client_close(cli.client);
    hg_order_db_close(cli.orders);
    cli_config_free(&cli.conf);
    free(rest);
    free(db_flags);
    if (fflush(stdout) != 0 && rc == 0)
        rc = cli_fail(EXIT_BROKER, "writing the output: %s", strerror(errno));
    return rc;
}
