/*
 * cli/cli.h — hourglass-cli's shared state, its command table type, the
 * exit codes and the calls every command makes (connect, run a command,
 * report a failure). The command implementations live by family:
 * cli/cmd_broker.c (ping, levels, topics, groups, info, send), cli/cmd_group.c
 * (group create/del), cli/cmd_dlq.c
 * (dlq list/show/requeue/drop), cli/cmd_orders.c (orders overdue/show/cancel,
 * over <hourglass/order_view.h>) and cli/cmd_msg.c (msg show/find/revoke);
 * the table, the global help and main() in cli/main.c; the messages, exit
 * codes and a command's help in cli/messages.c; argument parsing in
 * cli/args.h, output in cli/output.h, settings in cli/config.h.
 *
 * A client of the public libhourglass API only (<hourglass/hourglass.h>).
 * Single-threaded.
 */
#ifndef HG_CLI_CLI_H
#define HG_CLI_CLI_H

#include <hourglass/hourglass.h>

#include <stdint.h>
#include <stdio.h>

#include "cli/config.h"

/* Exit codes (also in --help). */
#define EXIT_BROKER  1 /* the broker answered an error, or the thing asked for is not there */
#define EXIT_USAGE   2 /* bad command, option or URI */
#define EXIT_CONNECT 3 /* cannot reach the broker: connect failed, connection lost, timed out */

#define CLI_DEFAULT_URI        "hourglass://127.0.0.1:7379"
#define CLI_DEFAULT_TIMEOUT_MS 5000u     /* --timeout when not given */
#define CLI_TIMEOUT_MAX_MS     86400000u /* --timeout at most a day */

typedef struct cli {
    const char *uri;
    /* hourglass+tls:// (the --tls-* flags; NULL: unset) */
    const char *tls_ca_cert_file, *tls_cert_file, *tls_key_file, *tls_server_name;
    const char *user;          /* --user, or NULL (the URI's) */
    const char *password_file; /* --password-file, or NULL (the URI's password) */
    int json;
    int check_config;    /* --check-config: check and print the configuration, run no command */
    uint32_t timeout_ms; /* --timeout: connect and reply; 0: replies without end (connect: the default) */
    hg_client_t *client; /* opened on first use */
    cli_config_t conf;   /* the order database, the order topic (cli/config.h) */
    hg_order_db *orders; /* opened on first use (cli_orders_db) */
} cli_t;

/* A command: called with argv[0] = its (last) name word; returns the exit code. */
typedef int (*command_fn)(cli_t *cli, int argc, char **argv);

typedef struct command {
    const char *name; /* "dlq list" */
    command_fn fn;
    const char *usage; /* after the name */
    const char *help;  /* one paragraph */
} command_t;

/* ---- cli/messages.c: messages, exit codes, a command's help ---- */

/* Print "hourglass-cli: <message> (see hourglass-cli --help)" to stderr;
 * returns EXIT_USAGE. */
int cli_usage_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* Print "hourglass-cli: <message>" to stderr; returns code. */
int cli_fail(int code, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* The exit code for a library error (usage, connect or broker). */
int cli_exit_code(hg_err_t e);

/* Report a failed library call on the open client; returns the exit code. */
int cli_client_failure(cli_t *cli, hg_err_t e);

/* Print text to f word-wrapped at 78 columns, every line indented by indent. */
void cli_print_wrapped(FILE *f, int indent, const char *text);

/* "usage: hourglass-cli … NAME USAGE" and the help paragraph, to f. */
void cli_print_command_help(FILE *f, const command_t *cmd);

/* ---- cli/main.c: the table, the connection ---- */

/* The table entry named name ("dlq list"), or NULL. */
const command_t *cli_find_command(const char *name);

/* Room for cli_open_client's message: the library's and a hint. */
#define CLI_WHY_MAX (HG_ERRMSG_MAX + 256)

/* Open the client once: the URI with --user, --password-file and the
 * --tls-* files, timeouts from --timeout, one connect attempt, no resends.
 * Returns 0, or the exit code (EXIT_USAGE for an unusable --user or
 * --password-file or a bad URI; cli_exit_code of the library's error else)
 * with the message — the library's own words: a refused password, an
 * untrusted certificate (and, when no CA was named, which flag names it), a
 * refused connection — in why[whylen] (CLI_WHY_MAX is enough), printed
 * nowhere (why is "" on success). The one place client options are built. */
int cli_open_client(cli_t *cli, char *why, size_t whylen);

/* cli_open_client with its message printed. Returns 0 or the exit code. */
int cli_connect(cli_t *cli);

/* Run a command given as C strings; on success *reply is set (free it with
 * hg_reply_free). Returns 0 or the exit code (the message printed). */
int cli_run(cli_t *cli, hg_reply_t **reply, int argc, const char *const *argv);

/* cli_run that calls notice(arg) once when the reply has not come within
 * notice_ms (hg_client_command_notice), and goes on waiting. */
int cli_run_notice(cli_t *cli, hg_reply_t **reply, int argc, const char *const *argv, uint32_t notice_ms,
                   void (*notice)(void *arg), void *arg);

/* "unexpected reply to CMD from the broker"; returns EXIT_BROKER. */
int cli_unexpected(const char *cmd, const hg_reply_t *r);

/* The commands. Each parses its own arguments (argv[0] is its name word;
 * --help prints its help and returns 0), runs its broker command(s) on the
 * shared client, prints a table or --json, and returns the exit code. */

/* ---- cli/cmd_broker.c ---- */
int cli_cmd_ping(cli_t *cli, int argc, char **argv);
int cli_cmd_levels(cli_t *cli, int argc, char **argv);
int cli_cmd_topics(cli_t *cli, int argc, char **argv);
int cli_cmd_groups(cli_t *cli, int argc, char **argv);
int cli_cmd_info(cli_t *cli, int argc, char **argv);
int cli_cmd_send(cli_t *cli, int argc, char **argv);
int cli_cmd_backup(cli_t *cli, int argc, char **argv);

/* Open the order database once (cli/config.h's keys). Returns 0, or the exit
 * code (EXIT_USAGE for a missing key, EXIT_CONNECT when MariaDB cannot be
 * reached) with the message printed. */
int cli_orders_db(cli_t *cli);

/* ---- cli/cmd_group.c ---- */
int cli_cmd_group_create(cli_t *cli, int argc, char **argv);
int cli_cmd_group_del(cli_t *cli, int argc, char **argv);
int cli_cmd_topic_del(cli_t *cli, int argc, char **argv);

/* ---- cli/cmd_orders.c ---- */
int cli_cmd_orders_overdue(cli_t *cli, int argc, char **argv);
int cli_cmd_orders_show(cli_t *cli, int argc, char **argv);
int cli_cmd_orders_cancel(cli_t *cli, int argc, char **argv);

/* ---- cli/cmd_msg.c ---- */
int cli_cmd_msg_show(cli_t *cli, int argc, char **argv);
int cli_cmd_msg_find(cli_t *cli, int argc, char **argv);
int cli_cmd_msg_revoke(cli_t *cli, int argc, char **argv);

/* ---- cli/cmd_dlq.c ---- */
int cli_cmd_dlq_list(cli_t *cli, int argc, char **argv);
int cli_cmd_dlq_show(cli_t *cli, int argc, char **argv);
int cli_cmd_dlq_requeue(cli_t *cli, int argc, char **argv);
int cli_cmd_dlq_drop(cli_t *cli, int argc, char **argv);

/* ---- cli/cmd_passwd.c ---- */
int cli_cmd_passwd(cli_t *cli, int argc, char **argv);

#endif
