/*
 * broker/cmd_table.c — THE command table, and dispatch: unknown command,
 * arity, authentication and roles, then the command's function; COMMAND
 * (COUNT DOCS LIST INFO HELP) prints the same table.
 *
 * One row per command {name, arity, flags, roles, subcommand roles, proc,
 * syntax, summary}. The roles column is the single authority for who may run
 * what: a command (or subcommand) whose roles are ROLE_ADMIN alone is an
 * admin command, shown with the "admin" flag by COMMAND. Today every
 * connection has every role (conn->roles = ROLE_ALL); the users issue will
 * give each user its roles, and this check then applies unchanged.
 *
 * Loop thread only.
 */
#include "broker/cmd_shared.h"

#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "common/log.h"

/* Command flags (legend):
 *   CMD_STORAGE  needs the store: becomes a storage job
 *   CMD_WRITE    may change the store (for a future read-only mode)
 *   CMD_BLOCKING may park (PULL BLOCK): the connection waits for it
 *   CMD_NOAUTH   allowed before authentication (AUTH, HELLO, PING, QUIT)
 *   CMD_LOOP     answered on the loop thread
 *   CMD_DURABLE  its reply is a promise (SEND's id, an admin change): the batch
 *                holding it is fsynced before the reply (fsync always). Other
 *                writes (leases, ACK, NACK, TOUCH, due moves) are written without
 *                fsync: losing them in a power cut only repeats a delivery, which
 *                at-least-once allows, and the next fsync covers them anyway.
 * Who may run a command is not a flag: it is the roles column. */
#define CMD_STORAGE  0x01
#define CMD_WRITE    0x02
#define CMD_BLOCKING 0x04
#define CMD_NOAUTH   0x08
#define CMD_LOOP     0x20
#define CMD_DURABLE  0x40

/* A subcommand whose roles differ from its command's. */
typedef struct cmd_sub {
    const char *name; /* lower case */
    unsigned roles;   /* ROLE_* bits allowed to run it */
} cmd_sub_t;

typedef struct cmd_def {
    const char *name;      /* lower case */
    int arity;             /* argc including the name; -N: at least N */
    int flags;             /* CMD_* */
    unsigned roles;        /* ROLE_* bits allowed to run it */
    const cmd_sub_t *subs; /* NULL, or subcommands with their own roles (NULL-name terminated) */
    cmd_proc_t *proc;
    const char *syntax; /* arguments, for help */
    const char *summary;
} cmd_def_t;

#define R_ANY  ROLE_ALL
#define R_PROD (ROLE_PRODUCER | ROLE_ADMIN)
#define R_CONS (ROLE_CONSUMER | ROLE_ADMIN)
#define R_ADM  ROLE_ADMIN

static const cmd_sub_t group_subs[] = {
    { "del", R_ADM },
    { "delete", R_ADM },
    { "destroy", R_ADM },
    { NULL, 0 },
};

static const cmd_def_t commands[] = {
    { "send", -3, CMD_STORAGE | CMD_WRITE | CMD_DURABLE, R_PROD, NULL, cmd_send,
      "topic payload [KEY k [DEDUP]] [LEVEL n | DELAY d | AT unix-ms]",
      "enqueue a delayed message; replies its id once durable (DEDUP: [id, duplicate])" },
    { "pull", -3, CMD_STORAGE | CMD_WRITE | CMD_BLOCKING, R_CONS, NULL, cmd_pull,
      "group topic [COUNT n] [BLOCK ms] [LEASE ms]",
      "lease ready messages: [id, topic, key, payload, reconsume, due_ms]" },
    { "ack", -3, CMD_STORAGE | CMD_WRITE, R_CONS, NULL, cmd_ack, "group id [id ...]",
      "release leases; replies how many" },
    { "nack", -3, CMD_STORAGE | CMD_WRITE, R_CONS, NULL, cmd_nack, "group id [LEVEL n | DELAY d | DLQ] [REASON text]",
      "fail a lease: retry (replies next due ms), DLQ (0) or no lease (-1)" },
    { "touch", -3, CMD_STORAGE | CMD_WRITE, R_CONS, NULL, cmd_touch, "group id [LEASE ms]",
      "extend a lease; replies the new deadline or 0" },
    { "group", -2, CMD_STORAGE | CMD_WRITE | CMD_DURABLE, R_ANY, group_subs, cmd_group,
      "CREATE group topic [FROM FIRST|NOW] [MAXRETRY n] | LIST | DEL group", "consumer groups" },
    { "dlq", -3, CMD_STORAGE | CMD_WRITE | CMD_DURABLE, R_ADM, NULL, cmd_dlq,
      "LEN group | LIST group [COUNT n] [AFTER id] | REQUEUE group id|ALL | DROP group id|ALL",
      "the dead-letter queue" },
    { "get", 2, CMD_STORAGE, R_ANY, NULL, cmd_get, "id",
      "where a message is: a map of its state, topic, key, payload, due times and per-group copies" },
    { "find", 3, CMD_STORAGE, R_ANY, NULL, cmd_find, "topic key",
      "the messages of a topic with that key that the broker still holds (maps as GET, no payload)" },
    { "revoke", -2, CMD_STORAGE | CMD_WRITE | CMD_DURABLE, R_PROD, NULL, cmd_revoke, "id | topic KEY key",
      "take back messages no group has received yet; replies how many and from where" },
    { "levels", 1, CMD_STORAGE, R_ANY, NULL, cmd_levels, "", "per level: [level, delay_ms, depth, next_due_ms]" },
    { "info", -1, CMD_STORAGE, R_ANY, NULL, cmd_info, "[section ...]",
      "server, clients, levels, groups, storage, stats (Redis-style text)" },
    { "ping", -1, CMD_LOOP | CMD_NOAUTH, R_ANY, NULL, cmd_ping, "[message]", "PONG, or the message" },
    { "echo", 2, CMD_LOOP, R_ANY, NULL, cmd_echo, "message", "the message" },
    { "hello", -1, CMD_LOOP | CMD_NOAUTH, R_ANY, NULL, cmd_hello, "[2|3] [AUTH user pass] [SETNAME name]",
      "choose RESP2/RESP3; server facts" },
    { "auth", -2, CMD_LOOP | CMD_NOAUTH, R_ANY, NULL, cmd_auth, "[user] password",
      "authenticate (needs users: not yet)" },
    { "quit", 1, CMD_LOOP | CMD_NOAUTH, R_ANY, NULL, cmd_quit, "", "+OK, then close" },
    { "shutdown", -1, CMD_LOOP, R_ADM, NULL, cmd_shutdown, "[NOSAVE|SAVE|NOW|FORCE]",
      "finish the batch in flight, close the store, exit 0" },
    { "command", -1, CMD_LOOP, R_ANY, NULL, cmd_command, "[COUNT|DOCS|LIST|INFO name...|HELP]", "the command table" },
    { "client", -2, CMD_LOOP, R_ANY, NULL, cmd_client, "SETNAME n|GETNAME|ID|SETINFO k v|LIST|INFO",
      "connection facts" },
    { "select", 2, CMD_LOOP, R_ANY, NULL, cmd_select, "0", "+OK for 0 (one keyspace; for Redis clients)" },
    { "config", -2, CMD_LOOP, R_ADM, NULL, cmd_config, "GET pattern", "read configuration keys" },
};

#define NCOMMANDS (sizeof commands / sizeof commands[0])

static const cmd_def_t *cmd_lookup(const char *name, size_t len)
{
    for (size_t i = 0; i < NCOMMANDS; i++) {
        if (strlen(commands[i].name) == len && strncasecmp(commands[i].name, name, len) == 0) {
            return &commands[i];
        }
    }
    return NULL;
}

/* The roles allowed to run this call: the subcommand's row when it has one. */
static unsigned call_roles(const cmd_def_t *d, const cmd_call_t *call)
{
    if (d->subs == NULL || call->argc < 2) {
        return d->roles;
    }
    for (const cmd_sub_t *s = d->subs; s->name != NULL; s++) {
        if (cmd_arg_is(&call->argv[1], s->name)) {
            return s->roles;
        }
    }
    return d->roles;
}

/* ---- COMMAND --------------------------------------------------------------- */

static void add_command_entry(resp_buf_t *out, const cmd_def_t *d)
{
    resp_add_array(out, 6);
    resp_add_bulk_str(out, d->name);
    resp_add_int(out, d->arity);
    int nflags = 0;
    const char *flags[6];
    if (d->flags & CMD_WRITE) {
        flags[nflags++] = "write";
    }
    if (!(d->flags & CMD_WRITE)) {
        flags[nflags++] = "readonly";
    }
    if (d->flags & CMD_BLOCKING) {
        flags[nflags++] = "blocking";
    }
    if (d->roles == ROLE_ADMIN) {
        flags[nflags++] = "admin";
    }
    if (d->flags & CMD_NOAUTH) {
        flags[nflags++] = "no_auth";
    }
    if (d->flags & CMD_LOOP) {
        flags[nflags++] = "fast";
    }
    resp_add_set(out, (size_t)nflags);
    for (int i = 0; i < nflags; i++) {
        resp_add_simple(out, flags[i]);
    }
    resp_add_int(out, 0);
    resp_add_int(out, 0);
    resp_add_int(out, 0);
}

void cmd_command(cmd_call_t *call)
{
    size_t n = NCOMMANDS;
    const cmd_def_t *t = commands;
    resp_buf_t *out = call->out;
    if (call->argc == 1) {
        resp_add_array(out, n);
        for (size_t i = 0; i < n; i++) {
            add_command_entry(out, &t[i]);
        }
        return;
    }
    const resp_arg_t *sub = &call->argv[1];
    if (cmd_arg_is(sub, "count")) {
        resp_add_int(out, (long long)n);
    } else if (cmd_arg_is(sub, "docs")) {
        resp_add_map(out, 0); /* redis-cli asks at start; no docs is fine */
    } else if (cmd_arg_is(sub, "list")) {
        resp_add_array(out, n);
        for (size_t i = 0; i < n; i++) {
            resp_add_bulk_str(out, t[i].name);
        }
    } else if (cmd_arg_is(sub, "info")) {
        resp_add_array(out, call->argc - 2);
        for (size_t i = 2; i < call->argc; i++) {
            const cmd_def_t *d = cmd_lookup(call->argv[i].ptr, call->argv[i].len);
            if (d) {
                add_command_entry(out, d);
            } else {
                resp_add_null(out);
            }
        }
    } else if (cmd_arg_is(sub, "help")) {
        resp_add_array(out, n + 1);
        resp_add_simple(out, "hourglass-broker commands (docs/broker.md has the details):");
        for (size_t i = 0; i < n; i++) {
            char line[320];
            char upper[32];
            snprintf(upper, sizeof upper, "%s", t[i].name);
            for (char *p = upper; *p; p++) {
                if (*p >= 'a' && *p <= 'z') {
                    *p = (char)(*p - 32);
                }
            }
            snprintf(line, sizeof line, "%s%s%s -- %s", upper, t[i].syntax[0] ? " " : "", t[i].syntax, t[i].summary);
            resp_add_simple(out, line);
        }
    } else {
        char b[40];
        resp_add_errorf(out, "ERR unknown subcommand '%s'. Try COMMAND HELP.", cmd_shown(sub, b, sizeof b));
    }
}

/* ---- dispatch -------------------------------------------------------------- */

void cmd_dispatch(cmd_call_t *call)
{
    const resp_arg_t *name = &call->argv[0];
    const cmd_def_t *d = cmd_lookup(name->ptr, name->len);
    if (d == NULL) {
        char b[64];
        resp_add_errorf(call->out, "ERR unknown command '%s'", cmd_shown(name, b, sizeof b));
        log_debug("client id=%llu: unknown command '%s'", (unsigned long long)call->conn->id, b);
        return;
    }
    snprintf(call->conn->last_cmd, sizeof call->conn->last_cmd, "%s", d->name);
    if ((d->arity > 0 && call->argc != (size_t)d->arity) || (d->arity < 0 && call->argc < (size_t)-d->arity)) {
        resp_add_errorf(call->out, "ERR wrong number of arguments for '%s' command", d->name);
        return;
    }
    if (!call->conn->authenticated && !(d->flags & CMD_NOAUTH)) {
        resp_add_error(call->out, "NOAUTH Authentication required.");
        return;
    }
    if ((call->conn->roles & call_roles(d, call)) == 0) {
        resp_add_errorf(call->out, "NOPERM this user has no permissions to run the '%s' command", d->name);
        return;
    }
    d->proc(call);
    if (call->job) {
        call->job->durable = (d->flags & CMD_DURABLE) != 0;
        if (!(d->flags & CMD_WRITE)) {
            call->job->reads_only = 1;
        }
    }
    cmd_audit_call(call);
}
