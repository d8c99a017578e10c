/*
 * broker/cmd_table.c — THE command table, and dispatch: unknown command,
 * arity, authentication and roles, then the command's function; COMMAND
 * (COUNT DOCS LIST INFO HELP) prints the same table.
 *
 * One row per command {name, arity, flags, roles, subcommands, proc,
 * syntax, summary}; a command with subcommands (GROUP, TOPIC, DLQ, CLIENT)
 * has a row per subcommand {name, arity, flags, roles}, and a call of one
 * runs with that row's roles and flags. The roles columns are the single
 * authority for who may run what: a command or subcommand whose roles are
 * ROLE_ADMIN alone is an admin command, shown with the "admin" flag by
 * COMMAND (Redis 7's entries: a command with subcommands shows only the
 * flags all of them share, and each subcommand's own entry, "group|list"). A connection gets
 * its roles from the user it AUTHs as (broker/users.h); without users every
 * connection has every role. docs/protocol.md prints this column.
 *
 * How the roles are chosen (docs/security.md):
 *   producer  SEND (and what sending needs: LEVELS, PING, COMMAND ...)
 *   consumer  PULL ACK NACK TOUCH, GROUP CREATE, and read-only introspection
 *   viewer    read-only introspection only (dashboards): changes nothing
 *   admin     everything, and alone: GROUP DEL, DLQ REQUEUE/DROP, CONFIG,
 *             CLIENT LIST (other clients' addresses), SHUTDOWN, BACKUP
 *
 * Loop thread only.
 */
#include "broker/cmd_shared.h"

#include <stdio.h>
#include <string.h>

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
 *   CMD_AUDIT    destructive or admin: logged with who ran it (cmd_audit.c); on a
 *                command with subcommands, its row covers the subcommands not in
 *                its table (GROUP's unknown ones are audited, DLQ's are not)
 * Who may run a command is not a flag: it is the roles column. */
#define CMD_STORAGE  0x01
#define CMD_WRITE    0x02
#define CMD_BLOCKING 0x04
#define CMD_NOAUTH   0x08
#define CMD_LOOP     0x20
#define CMD_DURABLE  0x40
#define CMD_AUDIT    0x80

/* A subcommand: its own arity, flags and roles (GROUP LIST reads, GROUP DEL is
 * an operator's change). A subcommand not in its command's table runs with
 * the command's flags and roles (the handler answers an unknown one). */
typedef struct cmd_sub {
    const char *name; /* lower case */
    int arity;        /* argc including the command's name, as Redis 7 counts a subcommand's (-N: at least N) */
    int flags;        /* CMD_*: what this subcommand does (COMMAND INFO, the job's durable / reads_only) */
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

#define R_ANY  ROLE_ALL                     /* every logged-in user */
#define R_PROD (ROLE_PRODUCER | ROLE_ADMIN) /* sending */
#define R_CONS (ROLE_CONSUMER | ROLE_ADMIN) /* consuming */
#define R_READ CMD_ROLES_READ               /* read-only introspection */
#define R_ADM  ROLE_ADMIN                   /* changes an operator makes */

#define F_READ  CMD_STORAGE                             /* reads the store */
#define F_WRITE (CMD_STORAGE | CMD_WRITE | CMD_DURABLE) /* changes it, and the reply is a promise */
#define F_ADMIN (F_WRITE | CMD_AUDIT)                   /* and is logged with who did it */

static const cmd_sub_t group_subs[] = {
    { "create", -4, F_ADMIN, R_CONS }, { "list", -2, F_READ, R_READ },   { "del", 3, F_ADMIN, R_ADM },
    { "delete", 3, F_ADMIN, R_ADM },   { "destroy", 3, F_ADMIN, R_ADM }, { NULL, 0, 0, 0 },
};

static const cmd_sub_t topic_subs[] = {
    { "del", -3, F_ADMIN, R_ADM },
    { "delete", -3, F_ADMIN, R_ADM },
    { "destroy", -3, F_ADMIN, R_ADM },
    { NULL, 0, 0, 0 },
};

static const cmd_sub_t dlq_subs[] = {
    { "len", 3, F_READ, R_READ },
    { "list", -3, F_READ, R_READ },
    { "requeue", 4, F_ADMIN, R_ADM },
    { "drop", 4, F_ADMIN, R_ADM },
    { NULL, 0, 0, 0 },
};

static const cmd_sub_t client_subs[] = {
    { "setname", 3, CMD_LOOP, R_ANY },
    { "getname", 2, CMD_LOOP, R_ANY },
    { "id", 2, CMD_LOOP, R_ANY },
    { "setinfo", 4, CMD_LOOP, R_ANY },
    { "no-evict", 3, CMD_LOOP, R_ANY },
    { "no-touch", 3, CMD_LOOP, R_ANY },
    { "info", -2, CMD_LOOP, R_ANY },
    { "list", -2, CMD_LOOP, R_ADM },             /* every client's address and name */
    { "kill", -3, CMD_LOOP | CMD_AUDIT, R_ADM }, /* close other clients */
    { NULL, 0, 0, 0 },
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
    { "group", -2, F_ADMIN, R_ADM, group_subs, cmd_group,
      "CREATE group topic [FROM FIRST|NOW] [MAXRETRY n] | LIST [COUNT n] [AFTER group] | DEL group",
      "consumer groups" },
    { "topics", -1, CMD_STORAGE, R_READ, NULL, cmd_topics, "[COUNT n] [AFTER topic]",
      "per topic: ready, delayed (on the levels), retained, appended, sends since start, and its groups' counts" },
    { "topic", -2, F_ADMIN, R_ADM, topic_subs, cmd_topic, "DEL topic [PURGE]",
      "delete an empty topic (no group bound to it, no message in its log or on the levels); PURGE first deletes "
      "what a topic without groups keeps for retention" },
    { "dlq", -3, CMD_STORAGE | CMD_WRITE | CMD_DURABLE, R_ADM, dlq_subs, cmd_dlq,
      "LEN group | LIST group [COUNT n] [AFTER id] | REQUEUE group id|ALL | DROP group id|ALL",
      "the dead-letter queue" },
    { "get", 2, CMD_STORAGE, R_READ, NULL, cmd_get, "id",
      "where a message is: a map of its state, topic, key, payload, due times and per-group copies" },
    { "find", 3, CMD_STORAGE, R_READ, NULL, cmd_find, "topic key",
      "the messages of a topic with that key that the broker still holds (maps as GET, no payload)" },
    { "revoke", -2, F_ADMIN, R_PROD, NULL, cmd_revoke, "id | topic KEY key",
      "take back messages no group has received yet; replies how many and from where" },
    { "peek", -3, CMD_STORAGE, R_READ, NULL, cmd_peek, "LEVEL n [COUNT c] | TOPIC t [COUNT c]",
      "read a level queue from its head or a topic log from its oldest: [id, topic, key, payload, reconsume, due_ms, "
      "hop_due_ms | entered_ms]; never leases" },
    { "levels", 1, CMD_STORAGE, R_ANY, NULL, cmd_levels, "", "per level: [level, delay_ms, depth, next_due_ms]" },
    { "info", -1, CMD_STORAGE, R_ANY, NULL, cmd_info, "[section ...]",
      "server, clients, levels, groups, storage, stats (Redis-style text)" },
    { "ping", -1, CMD_LOOP | CMD_NOAUTH, R_ANY, NULL, cmd_ping, "[message]", "PONG, or the message" },
    { "echo", 2, CMD_LOOP, R_ANY, NULL, cmd_echo, "message", "the message" },
    { "hello", -1, CMD_LOOP | CMD_NOAUTH, R_ANY, NULL, cmd_hello, "[2|3] [AUTH user pass] [SETNAME name]",
      "choose RESP2/RESP3; server facts" },
    { "auth", -2, CMD_LOOP | CMD_NOAUTH, R_ANY, NULL, cmd_auth, "[user] password",
      "log in as a user of the users-file (user \"default\" when omitted)" },
    { "quit", 1, CMD_LOOP | CMD_NOAUTH, R_ANY, NULL, cmd_quit, "", "+OK, then close" },
    { "shutdown", -1, CMD_LOOP | CMD_AUDIT, R_ADM, NULL, cmd_shutdown, "[NOSAVE|SAVE] [NOW] [FORCE]",
      "finish the batch in flight, close the store, exit 0" },
    { "backup", 2, CMD_STORAGE | CMD_AUDIT, R_ADM, NULL, cmd_backup, "name",
      "copy the data directory online, consistent as of now, to backup-dir/name (INFO storage: backup_*)" },
    { "multi", 1, CMD_LOOP, R_PROD, NULL, cmd_multi, "",
      "start a transaction: the SENDs until EXEC are stored atomically" },
    { "exec", 1, CMD_STORAGE | CMD_WRITE | CMD_DURABLE, R_PROD, NULL, cmd_exec, "",
      "store the queued SENDs in one batch, all or none; replies their ids, or one error naming the refused SEND" },
    { "discard", 1, CMD_LOOP, R_ANY, NULL, cmd_discard, "", "drop the queued SENDs" },
    { "command", -1, CMD_LOOP, R_ANY, NULL, cmd_command, "[COUNT|DOCS|LIST|INFO name...|HELP]", "the command table" },
    { "client", -2, CMD_LOOP, R_ANY, client_subs, cmd_client,
      "SETNAME n|GETNAME|ID|SETINFO k v|LIST|INFO|KILL filter v ...", "connection facts; KILL closes clients (admin)" },
    { "select", 2, CMD_LOOP, R_ANY, NULL, cmd_select, "0", "+OK for 0 (one keyspace; for Redis clients)" },
    { "config", -2, CMD_LOOP | CMD_AUDIT, R_ADM, NULL, cmd_config, "GET pattern", "read configuration keys" },
    { "acl", -2, CMD_LOOP, R_ANY, NULL, cmd_acl, "WHOAMI", "the user this connection is logged in as" },
};

#define NCOMMANDS (sizeof commands / sizeof commands[0])

/* The row named name[0..len) in any case (cmd_arg_is), or NULL. A scan: the
 * hot commands (SEND, PULL, ACK) are the table's first rows, and a row whose
 * name differs costs a compare that stops at its first differing byte. */
static const cmd_def_t *cmd_lookup(const char *name, size_t len)
{
    const resp_arg_t a = { name, len };
    for (size_t i = 0; i < NCOMMANDS; i++) {
        if (cmd_arg_is(&a, commands[i].name)) {
            return &commands[i];
        }
    }
    return NULL;
}

unsigned cmd_roles_of(const char *name)
{
    const cmd_def_t *d = cmd_lookup(name, strlen(name));
    return d != NULL ? d->roles : 0;
}

/* The subcommand row of this call, or NULL (no subcommands, or not one of them). */
static const cmd_sub_t *call_sub(const cmd_def_t *d, const cmd_call_t *call)
{
    if (d->subs == NULL || call->argc < 2) {
        return NULL;
    }
    for (const cmd_sub_t *s = d->subs; s->name != NULL; s++) {
        if (cmd_arg_is(&call->argv[1], s->name)) {
            return s;
        }
    }
    return NULL;
}

/* ---- COMMAND --------------------------------------------------------------- */

/* COMMAND's flag names, in the order shown. */
enum {
    SHOW_WRITE = 1,
    SHOW_READONLY = 2,
    SHOW_BLOCKING = 4,
    SHOW_ADMIN = 8,
    SHOW_NO_AUTH = 16,
    SHOW_FAST = 32
};
static const char *const show_names[] = { "write", "readonly", "blocking", "admin", "no_auth", "fast" };

/* The COMMAND flags of a command or subcommand with these CMD_* flags and roles. */
static unsigned shown_flags(int flags, unsigned roles)
{
    return ((flags & CMD_WRITE) ? SHOW_WRITE : SHOW_READONLY) | ((flags & CMD_BLOCKING) ? SHOW_BLOCKING : 0) |
           (roles == ROLE_ADMIN ? SHOW_ADMIN : 0) | ((flags & CMD_NOAUTH) ? SHOW_NO_AUTH : 0) |
           ((flags & CMD_LOOP) ? SHOW_FAST : 0);
}

/* A command's flags: with subcommands (Redis 7: a container command), only
 * what holds for every one of them — GROUP is not admin (GROUP CREATE is a
 * consumer's, GROUP LIST a viewer's) nor read-only; each subcommand's own
 * flags are in its entry. */
static unsigned command_shown_flags(const cmd_def_t *d)
{
    if (d->subs == NULL) {
        return shown_flags(d->flags, d->roles);
    }
    unsigned all = ~0u;
    for (const cmd_sub_t *s = d->subs; s->name != NULL; s++) {
        all &= shown_flags(s->flags, s->roles);
    }
    return all;
}

/* One entry of COMMAND / COMMAND INFO, Redis 7's ten fields: name, arity,
 * flags, first key, last key, key step (no keys: 0 0 0), ACL categories, tips
 * and key specifications (none), subcommands (their entries; subs NULL: none). */
static void add_entry(resp_buf_t *out, const char *name, int arity, unsigned shown, const char *parent,
                      const cmd_sub_t *subs)
{
    resp_add_array(out, 10);
    if (parent != NULL) {
        char full[64];
        snprintf(full, sizeof full, "%s|%s", parent, name);
        resp_add_bulk_str(out, full);
    } else {
        resp_add_bulk_str(out, name);
    }
    resp_add_int(out, arity);
    size_t nflags = 0;
    for (size_t i = 0; i < sizeof show_names / sizeof show_names[0]; i++) {
        nflags += (shown >> i) & 1;
    }
    resp_add_set(out, nflags);
    for (size_t i = 0; i < sizeof show_names / sizeof show_names[0]; i++) {
        if ((shown >> i) & 1) {
            resp_add_simple(out, show_names[i]);
        }
    }
    resp_add_int(out, 0);
    resp_add_int(out, 0);
    resp_add_int(out, 0);
    resp_add_set(out, 0);   /* ACL categories */
    resp_add_array(out, 0); /* tips */
    resp_add_array(out, 0); /* key specifications */
    size_t nsubs = 0;
    for (const cmd_sub_t *s = subs; s != NULL && s->name != NULL; s++) {
        nsubs++;
    }
    resp_add_array(out, nsubs);
    for (const cmd_sub_t *s = subs; s != NULL && s->name != NULL; s++) {
        add_entry(out, s->name, s->arity, shown_flags(s->flags, s->roles), name, NULL);
    }
}

static void add_command_entry(resp_buf_t *out, const cmd_def_t *d)
{
    add_entry(out, d->name, d->arity, command_shown_flags(d), NULL, d->subs);
}

/* COMMAND INFO's answer for a name: a command, or "command|subcommand" (as
 * Redis 7 answers "config|get"); a null when there is none. */
static void add_info_entry(resp_buf_t *out, const resp_arg_t *a)
{
    const char *bar = memchr(a->ptr, '|', a->len);
    const cmd_def_t *d = cmd_lookup(a->ptr, bar ? (size_t)(bar - a->ptr) : a->len);
    if (d != NULL && bar == NULL) {
        add_command_entry(out, d);
        return;
    }
    if (d != NULL && d->subs != NULL) {
        resp_arg_t sub = { bar + 1, a->len - (size_t)(bar + 1 - a->ptr) };
        for (const cmd_sub_t *s = d->subs; s->name != NULL; s++) {
            if (cmd_arg_is(&sub, s->name)) {
                add_entry(out, s->name, s->arity, shown_flags(s->flags, s->roles), d->name, NULL);
                return;
            }
        }
    }
    resp_add_null(out);
}

/* COMMAND DOCS name…: 1 when name is one of the names asked for. */
static int cmd_docs_named(const cmd_call_t *call, const char *name)
{
    for (size_t i = 2; i < call->argc; i++) {
        if (cmd_arg_is(&call->argv[i], name)) {
            return 1;
        }
    }
    return 0;
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
    if ((cmd_arg_is(sub, "count") || cmd_arg_is(sub, "list") || cmd_arg_is(sub, "help")) && call->argc != 2) {
        char b[40];
        cmd_shown(sub, b, sizeof b);
        for (char *p = b; *p; p++) {
            if (*p >= 'A' && *p <= 'Z') {
                *p = (char)(*p + 32);
            }
        }
        resp_add_errorf(out, "ERR wrong number of arguments for 'command|%s' command", b);
        return;
    }
    if (cmd_arg_is(sub, "count")) {
        resp_add_int(out, (long long)n);
    } else if (cmd_arg_is(sub, "docs")) { /* redis-cli's hints, help and completion (cmd_docs.c) */
        size_t found = 0;
        for (size_t i = 0; i < n; i++) {
            found += call->argc == 2 || cmd_docs_named(call, t[i].name);
        }
        resp_add_map(out, found);
        for (size_t i = 0; i < n; i++) {
            if (call->argc == 2 || cmd_docs_named(call, t[i].name)) {
                cmd_docs_add(out, t[i].name, t[i].syntax, t[i].summary);
            }
        }
    } else if (cmd_arg_is(sub, "list")) {
        resp_add_array(out, n);
        for (size_t i = 0; i < n; i++) {
            resp_add_bulk_str(out, t[i].name);
        }
    } else if (cmd_arg_is(sub, "info")) {
        resp_add_array(out, call->argc - 2);
        for (size_t i = 2; i < call->argc; i++) {
            add_info_entry(out, &call->argv[i]);
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
        cmd_multi_fail(call);
        resp_add_errorf(call->out, "ERR unknown command '%s'", cmd_shown(name, b, sizeof b));
        log_debug("client id=%llu: unknown command '%s'", (unsigned long long)call->conn->id, b);
        return;
    }
    call->conn->last_cmd = d->name; /* the table's own string: no copy per command */
    if ((d->arity > 0 && call->argc != (size_t)d->arity) || (d->arity < 0 && call->argc < (size_t)-d->arity)) {
        cmd_multi_fail(call);
        resp_add_errorf(call->out, "ERR wrong number of arguments for '%s' command", d->name);
        return;
    }
    if (!call->conn->authenticated) {
        if (!(d->flags & CMD_NOAUTH)) {
            resp_add_error(call->out, "NOAUTH Authentication required.");
            return;
        }
    }
    const cmd_sub_t *sub_row = call_sub(d, call);
    int flags = sub_row ? sub_row->flags : d->flags;
    if (call->conn->authenticated && (call->conn->roles & (sub_row ? sub_row->roles : d->roles)) == 0) {
        const conn_t *c = call->conn;
        cmd_multi_fail(call);
        char roles[USERS_ROLES_TEXT], sub[40] = "";
        if (d->subs != NULL && call->argc >= 2) {
            char b[32];
            snprintf(sub, sizeof sub, "|%s", cmd_shown(&call->argv[1], b, sizeof b));
            for (char *p = sub; *p; p++) {
                if (*p >= 'A' && *p <= 'Z') {
                    *p = (char)(*p + 32);
                }
            }
        }
        resp_add_errorf(call->out, "NOPERM User %s (roles: %s) has no permissions to run the '%s%s' command",
                        c->user[0] ? c->user : "default", users_roles_text(c->roles, roles, sizeof roles), d->name,
                        sub);
        if (flags & CMD_AUDIT) {
            cmd_audit_call(call); /* a refused DLQ DROP, CLIENT KILL, SHUTDOWN … is logged with who tried it */
        }
        return;
    }
    if (call->conn->multi != NULL && d->proc != cmd_exec && d->proc != cmd_discard && d->proc != cmd_multi &&
        d->proc != cmd_quit) { /* queued (cmd_multi.c) */
        if (cmd_multi_queue(call, d->proc == cmd_send)) {
            d->proc(call);
            cmd_multi_queued(call);
        }
        return;
    }
    d->proc(call);
    if (call->job) {
        call->job->durable = (flags & CMD_DURABLE) != 0;
        if (!(flags & CMD_WRITE)) {
            call->job->reads_only = 1;
        }
    }
    if (flags & CMD_AUDIT) {
        cmd_audit_call(call);
    }
}
