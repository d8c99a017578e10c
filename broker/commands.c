/*
 * broker/commands.c — the command table and one function per command.
 *
 * Loop half (cmd_<name>): runs on the event-loop thread; checks every
 * argument (names, numbers, limits from the config) so that a bad request is
 * answered without touching the storage thread, then either replies at once
 * or builds a storage job (cmd_job_t: a copy of the arguments, parsed).
 * Storage half (<name>_exec): runs on the storage thread, calls the store /
 * scheduler and writes the reply; its writes commit with the rest of the
 * group (writer.c) before the reply is sent.
 *
 * Error wording: "-ERR <what was wrong>", naming the argument or the limit;
 * syntax problems start with "ERR syntax error:". See docs/broker.md.
 */
#include <config.h>   /* autoconf: PACKAGE_VERSION */
#include "base/alloc.h"
#include "broker/commands.h"

#include <fnmatch.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "common/log.h"
#include "broker/metrics.h"
#include "levels/msg.h"
#include "levels/sched.h"
#include "levels/store.h"
#include "levels/table.h"

#define MAX_LEASE_MS (UINT64_C(24) * 3600 * 1000)
#define DLQ_LIST_DEFAULT 100

/* ---- the storage job of a command --------------------------------------- */

typedef struct cmd_job {
    job_t job;                  /* first member: job_t * <-> cmd_job_t * */
    server_t *srv;
    size_t argc;
    resp_arg_t *argv;           /* copies of the arguments, in this allocation */
    /* parsed arguments (views into argv) */
    resp_arg_t group, topic, key, payload, reason, id_text;
    int level;                  /* SEND / NACK LEVEL; -1 absent */
    int has_delay, has_at;
    uint64_t delay_ms, at_ms;
    int count;
    uint64_t lease_ms;
    int from_first, max_reconsume;
    uint64_t id, after_id;
    int all;                    /* DLQ REQUEUE/DROP ALL */
    int to_dlq;                 /* NACK ... DLQ */
    int nids;
    uint64_t *ids;              /* in this allocation, room for argc */
    int sub;                    /* subcommand */
    int info_mask;
} cmd_job_t;

enum { SUB_CREATE = 1, SUB_LIST, SUB_DEL, SUB_LEN, SUB_REQUEUE, SUB_DROP };

/* Copy call's arguments into a new job whose exec is fn. */
static cmd_job_t *job_new(cmd_call_t *call, job_result_t (*fn)(job_t *, writer_t *))
{
    size_t bytes = 0;
    for (size_t i = 0; i < call->argc; i++) { bytes += call->argv[i].len + 1; }
    size_t head = (sizeof(cmd_job_t) + 15) & ~(size_t)15;
    size_t argv_sz = call->argc * sizeof(resp_arg_t);
    size_t ids_sz = call->argc * sizeof(uint64_t);
    char *mem = xmalloc(head + argv_sz + ids_sz + bytes);
    cmd_job_t *cj = (cmd_job_t *)mem;
    memset(cj, 0, sizeof *cj);
    cj->argv = (resp_arg_t *)(mem + head);
    cj->ids = (uint64_t *)(mem + head + argv_sz);
    char *p = mem + head + argv_sz + ids_sz;
    for (size_t i = 0; i < call->argc; i++) {
        memcpy(p, call->argv[i].ptr, call->argv[i].len);
        p[call->argv[i].len] = '\0';
        cj->argv[i].ptr = p;
        cj->argv[i].len = call->argv[i].len;
        p += call->argv[i].len + 1;
    }
    cj->argc = call->argc;
    cj->srv = call->srv;
    cj->level = -1;
    cj->max_reconsume = -1;
    resp_buf_init(&cj->job.reply);
    cj->job.exec = fn;
    return cj;
}

/* ---- argument helpers ------------------------------------------------------- */

static int arg_is(const resp_arg_t *a, const char *word)
{
    size_t n = strlen(word);
    return a->len == n && strncasecmp(a->ptr, word, n) == 0;
}

/* Strict decimal, no sign. */
static int parse_u64(const resp_arg_t *a, uint64_t *out)
{
    if (a->len == 0 || a->len > 20) { return -1; }
    uint64_t v = 0;
    for (size_t i = 0; i < a->len; i++) {
        char c = a->ptr[i];
        if (c < '0' || c > '9') { return -1; }
        if (v > (UINT64_MAX - (uint64_t)(c - '0')) / 10) { return -1; }
        v = v * 10 + (uint64_t)(c - '0');
    }
    *out = v;
    return 0;
}

/* Milliseconds: a bare integer, or a duration with a unit (base/units.h). */
static int parse_ms(const resp_arg_t *a, uint64_t *out)
{
    return units_parse_duration(a->ptr, a->len, UNITS_BARE_MS, out, NULL, 0);
}

/* A printable copy of an argument for messages (cut, non-printables as '?'). */
static const char *shown(const resp_arg_t *a, char *buf, size_t buflen)
{
    size_t n = a->len < buflen - 4 ? a->len : buflen - 4;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)a->ptr[i];
        buf[i] = (c >= 0x20 && c < 0x7f && c != '\'') ? (char)c : '?';
    }
    if (n < a->len) { memcpy(buf + n, "...", 3); n += 3; }
    buf[n] = '\0';
    return buf;
}

static void upper_name(const resp_arg_t *a, char *buf, size_t buflen)
{
    shown(a, buf, buflen);
    for (char *p = buf; *p; p++) { if (*p >= 'a' && *p <= 'z') { *p = (char)(*p - 32); } }
}

static int check_name(cmd_call_t *call, const char *what, const resp_arg_t *a)
{
    char err[200];
    if (msg_check_name(what, a->ptr, a->len, err, sizeof err) != 0) {
        resp_add_errorf(call->out, "ERR %s", err);
        return -1;
    }
    return 0;
}

static int parse_id(cmd_call_t *call, const resp_arg_t *a, uint64_t *id)
{
    if (store_id_parse(a->ptr, a->len, id) != 0) {
        char b[40];
        resp_add_errorf(call->out, "ERR invalid message id '%s' (16 hex digits)", shown(a, b, sizeof b));
        return -1;
    }
    return 0;
}

/* The value of option argv[i] (i + 1 must exist), or an error reply. */
static const resp_arg_t *opt_value(cmd_call_t *call, const resp_arg_t *argv, size_t argc, size_t i)
{
    if (i + 1 >= argc) {
        char b[40];
        upper_name(&argv[i], b, sizeof b);
        resp_add_errorf(call->out, "ERR syntax error: %s needs a value", b);
        return NULL;
    }
    return &argv[i + 1];
}

static int once(cmd_call_t *call, int *seen, const char *what)
{
    if (*seen) {
        resp_add_errorf(call->out, "ERR syntax error: %s given twice", what);
        return -1;
    }
    *seen = 1;
    return 0;
}

static void unknown_option(cmd_call_t *call, const resp_arg_t *a, const char *cmd)
{
    char b[40];
    resp_add_errorf(call->out, "ERR syntax error: unknown option '%s' for '%s'", shown(a, b, sizeof b), cmd);
}

static int parse_count(cmd_call_t *call, const resp_arg_t *v, int *count)
{
    const config_t *cfg = server_config(call->srv);
    uint64_t n;
    if (parse_u64(v, &n) != 0 || n < 1 || n > (uint64_t)cfg->max_pull_count) {
        char b[40];
        resp_add_errorf(call->out, "ERR COUNT must be 1..%lld, got '%s'", cfg->max_pull_count, shown(v, b, sizeof b));
        return -1;
    }
    *count = (int)n;
    return 0;
}

static int parse_lease(cmd_call_t *call, const resp_arg_t *v, uint64_t *ms)
{
    if (parse_ms(v, ms) != 0 || *ms < 1 || *ms > MAX_LEASE_MS) {
        char b[40];
        resp_add_errorf(call->out, "ERR LEASE must be 1ms..24h (milliseconds, or a duration such as 30s), got '%s'",
                        shown(v, b, sizeof b));
        return -1;
    }
    return 0;
}

static int check_delay(cmd_call_t *call, const resp_arg_t *v, uint64_t *ms)
{
    const config_t *cfg = server_config(call->srv);
    if (parse_ms(v, ms) != 0) {
        char b[40];
        resp_add_errorf(call->out, "ERR DELAY must be a duration such as 500ms, 10s, 25m, 2h (or milliseconds), got '%s'",
                        shown(v, b, sizeof b));
        return -1;
    }
    if (*ms > (uint64_t)cfg->max_delay_ms) {
        char a[32], b[32];
        units_format_duration(*ms, a, sizeof a);
        units_format_duration((uint64_t)cfg->max_delay_ms, b, sizeof b);
        resp_add_errorf(call->out, "ERR delay %s exceeds max-delay %s", a, b);
        return -1;
    }
    return 0;
}

static int parse_level(cmd_call_t *call, const resp_arg_t *v, int min, int *level)
{
    const config_t *cfg = server_config(call->srv);
    uint64_t n;
    if (parse_u64(v, &n) != 0 || n < (uint64_t)min || n > (uint64_t)cfg->level_table.count) {
        char b[40];
        resp_add_errorf(call->out, "ERR LEVEL must be %d..%d, got %s", min, cfg->level_table.count,
                        shown(v, b, sizeof b));
        return -1;
    }
    *level = (int)n;
    return 0;
}

static void reply_store_error(job_t *j, const char *err)
{
    resp_buf_clear(&j->reply);
    resp_add_errorf(&j->reply, "ERR %s", err);
}

static void add_bulk_arg(resp_buf_t *b, const resp_arg_t *a) { resp_add_bulk(b, a->ptr, a->len); }

static void add_id(resp_buf_t *b, uint64_t id)
{
    char hex[17];
    store_id_format(id, hex);
    resp_add_bulk(b, hex, 16);
}

/* ---- PING ECHO QUIT SELECT AUTH -------------------------------------------- */

static void cmd_ping(cmd_call_t *call)
{
    if (call->argc > 2) {
        resp_add_error(call->out, "ERR wrong number of arguments for 'ping' command");
    } else if (call->argc == 2) {
        add_bulk_arg(call->out, &call->argv[1]);
    } else {
        resp_add_simple(call->out, "PONG");
    }
}

static void cmd_echo(cmd_call_t *call) { add_bulk_arg(call->out, &call->argv[1]); }

static void cmd_quit(cmd_call_t *call)
{
    resp_add_simple(call->out, "OK");
    call->close_after = 1;
}

static void cmd_select(cmd_call_t *call)
{
    if (arg_is(&call->argv[1], "0")) { resp_add_simple(call->out, "OK"); }
    else { resp_add_error(call->out, "ERR DB index is out of range"); }
}

static void cmd_auth(cmd_call_t *call)
{
    if (call->argc > 3) {
        resp_add_error(call->out, "ERR wrong number of arguments for 'auth' command");
        return;
    }
    resp_add_error(call->out, "ERR AUTH called without any users configured");
}

static void cmd_shutdown(cmd_call_t *call)
{
    for (size_t i = 1; i < call->argc; i++) {
        const resp_arg_t *a = &call->argv[i];
        if (!(arg_is(a, "nosave") || arg_is(a, "save") || arg_is(a, "now") || arg_is(a, "force"))) {
            unknown_option(call, a, "shutdown");
            return;
        }
    }
    char why[96];
    snprintf(why, sizeof why, "SHUTDOWN from client id=%llu addr=%s", (unsigned long long)call->conn->id,
             call->conn->addr);
    call->no_reply = 1;
    server_shutdown(call->srv, why);
}

/* ---- HELLO ----------------------------------------------------------------- */

static void cmd_hello(cmd_call_t *call)
{
    conn_t *c = call->conn;
    int proto = c->proto;
    size_t i = 1;
    if (call->argc >= 2) {
        uint64_t v;
        if (parse_u64(&call->argv[1], &v) != 0) {
            resp_add_error(call->out, "ERR Protocol version is not an integer or out of range");
            return;
        }
        if (v != 2 && v != 3) {
            resp_add_error(call->out, "NOPROTO unsupported protocol version");
            return;
        }
        proto = (int)v;
        i = 2;
    }
    const resp_arg_t *setname = NULL;
    for (; i < call->argc; i++) {
        if (arg_is(&call->argv[i], "auth")) {
            if (i + 2 >= call->argc) {
                resp_add_error(call->out, "ERR syntax error: AUTH needs a user name and a password");
                return;
            }
            resp_add_error(call->out, "ERR AUTH called without any users configured");
            return;
        } else if (arg_is(&call->argv[i], "setname")) {
            if (i + 1 >= call->argc) {
                resp_add_error(call->out, "ERR syntax error: SETNAME needs a value");
                return;
            }
            setname = &call->argv[++i];
        } else {
            unknown_option(call, &call->argv[i], "hello");
            return;
        }
    }
    if (setname) {
        if (setname->len >= sizeof c->name || memchr(setname->ptr, ' ', setname->len) ||
            memchr(setname->ptr, '\n', setname->len)) {
            resp_add_error(call->out, "ERR Client names cannot contain spaces, newlines or special characters.");
            return;
        }
        memcpy(c->name, setname->ptr, setname->len);
        c->name[setname->len] = '\0';
    }
    c->proto = proto;
    call->out->proto = proto;
    resp_add_map(call->out, 7);
    resp_add_bulk_str(call->out, "server");
    resp_add_bulk_str(call->out, "hourglass");
    resp_add_bulk_str(call->out, "version");
    resp_add_bulk_str(call->out, PACKAGE_VERSION);
    resp_add_bulk_str(call->out, "proto");
    resp_add_int(call->out, proto);
    resp_add_bulk_str(call->out, "id");
    resp_add_int(call->out, (long long)c->id);
    resp_add_bulk_str(call->out, "mode");
    resp_add_bulk_str(call->out, "standalone");
    resp_add_bulk_str(call->out, "role");
    resp_add_bulk_str(call->out, "master");
    resp_add_bulk_str(call->out, "modules");
    resp_add_array(call->out, 0);
}

/* ---- COMMAND --------------------------------------------------------------- */

static const cmd_def_t *cmd_lookup(const char *name, size_t len);

static void add_command_entry(resp_buf_t *out, const cmd_def_t *d)
{
    resp_add_array(out, 6);
    resp_add_bulk_str(out, d->name);
    resp_add_int(out, d->arity);
    int nflags = 0;
    const char *flags[6];
    if (d->flags & CMD_WRITE) { flags[nflags++] = "write"; }
    if (!(d->flags & CMD_WRITE)) { flags[nflags++] = "readonly"; }
    if (d->flags & CMD_BLOCKING) { flags[nflags++] = "blocking"; }
    if (d->flags & CMD_ADMIN) { flags[nflags++] = "admin"; }
    if (d->flags & CMD_NOAUTH) { flags[nflags++] = "no_auth"; }
    if (d->flags & CMD_LOOP) { flags[nflags++] = "fast"; }
    resp_add_set(out, (size_t)nflags);
    for (int i = 0; i < nflags; i++) { resp_add_simple(out, flags[i]); }
    resp_add_int(out, 0);
    resp_add_int(out, 0);
    resp_add_int(out, 0);
}

static void cmd_command(cmd_call_t *call)
{
    size_t n;
    const cmd_def_t *t = cmd_table(&n);
    resp_buf_t *out = call->out;
    if (call->argc == 1) {
        resp_add_array(out, n);
        for (size_t i = 0; i < n; i++) { add_command_entry(out, &t[i]); }
        return;
    }
    const resp_arg_t *sub = &call->argv[1];
    if (arg_is(sub, "count")) {
        resp_add_int(out, (long long)n);
    } else if (arg_is(sub, "docs")) {
        resp_add_map(out, 0);   /* redis-cli asks at start; no docs is fine */
    } else if (arg_is(sub, "list")) {
        resp_add_array(out, n);
        for (size_t i = 0; i < n; i++) { resp_add_bulk_str(out, t[i].name); }
    } else if (arg_is(sub, "info")) {
        resp_add_array(out, call->argc - 2);
        for (size_t i = 2; i < call->argc; i++) {
            const cmd_def_t *d = cmd_lookup(call->argv[i].ptr, call->argv[i].len);
            if (d) { add_command_entry(out, d); } else { resp_add_null(out); }
        }
    } else if (arg_is(sub, "help")) {
        resp_add_array(out, n + 1);
        resp_add_simple(out, "hourglass-broker commands (docs/broker.md has the details):");
        for (size_t i = 0; i < n; i++) {
            char line[320];
            char upper[32];
            snprintf(upper, sizeof upper, "%s", t[i].name);
            for (char *p = upper; *p; p++) { if (*p >= 'a' && *p <= 'z') { *p = (char)(*p - 32); } }
            snprintf(line, sizeof line, "%s%s%s -- %s", upper, t[i].syntax[0] ? " " : "", t[i].syntax, t[i].summary);
            resp_add_simple(out, line);
        }
    } else {
        char b[40];
        resp_add_errorf(out, "ERR unknown subcommand '%s'. Try COMMAND HELP.", shown(sub, b, sizeof b));
    }
}

/* ---- CLIENT / CONFIG ---------------------------------------------------------- */

static void cmd_client(cmd_call_t *call)
{
    conn_t *c = call->conn;
    const resp_arg_t *sub = &call->argv[1];
    resp_buf_t *out = call->out;
    if (arg_is(sub, "setname") && call->argc == 3) {
        const resp_arg_t *v = &call->argv[2];
        for (size_t i = 0; i < v->len; i++) {
            unsigned char ch = (unsigned char)v->ptr[i];
            if (ch <= ' ' || ch >= 0x7f) {
                resp_add_error(out, "ERR Client names cannot contain spaces, newlines or special characters.");
                return;
            }
        }
        if (v->len >= sizeof c->name) {
            resp_add_errorf(out, "ERR client name longer than %zu bytes", sizeof c->name - 1);
            return;
        }
        memcpy(c->name, v->ptr, v->len);
        c->name[v->len] = '\0';
        resp_add_simple(out, "OK");
    } else if (arg_is(sub, "getname") && call->argc == 2) {
        if (c->name[0]) { resp_add_bulk_str(out, c->name); } else { resp_add_null(out); }
    } else if (arg_is(sub, "id") && call->argc == 2) {
        resp_add_int(out, (long long)c->id);
    } else if (arg_is(sub, "setinfo") && call->argc == 4) {
        resp_add_simple(out, "OK");
    } else if ((arg_is(sub, "no-evict") || arg_is(sub, "no-touch")) && call->argc == 3) {
        resp_add_simple(out, "OK");
    } else if (arg_is(sub, "list") || arg_is(sub, "info")) {
        buf_t text = BUF_INIT;
        server_client_list(call->srv, &text, arg_is(sub, "info") ? c : NULL);
        resp_add_verbatim(out, "txt", text.data ? text.data : "", text.len);
        buf_free(&text);
    } else if (arg_is(sub, "help")) {
        resp_add_array(out, 6);
        resp_add_simple(out, "CLIENT SETNAME name | GETNAME | ID | SETINFO attr value | LIST | INFO");
        resp_add_simple(out, "SETNAME: name this connection (shown by CLIENT LIST)");
        resp_add_simple(out, "GETNAME: the name, or null");
        resp_add_simple(out, "ID: this connection's id");
        resp_add_simple(out, "SETINFO: accepted and ignored (client library name/version)");
        resp_add_simple(out, "LIST / INFO: every connection / this one");
    } else {
        char b[40];
        resp_add_errorf(out, "ERR unknown subcommand or wrong number of arguments for '%s'. Try CLIENT HELP.",
                        shown(sub, b, sizeof b));
    }
}

static void cmd_config(cmd_call_t *call)
{
    const resp_arg_t *sub = &call->argv[1];
    resp_buf_t *out = call->out;
    const config_t *cfg = server_config(call->srv);
    if (arg_is(sub, "get")) {
        if (call->argc < 3) {
            resp_add_error(out, "ERR wrong number of arguments for 'config|get' command");
            return;
        }
        int n = config_key_count();
        char match[CONFIG_MAX_KEYS];
        size_t hits = 0;
        memset(match, 0, sizeof match);
        for (size_t a = 2; a < call->argc; a++) {
            if (memchr(call->argv[a].ptr, '\0', call->argv[a].len)) { continue; }
            for (int i = 0; i < n; i++) {
                if (!match[i] && fnmatch(call->argv[a].ptr, config_key_name(i), FNM_CASEFOLD) == 0) {
                    match[i] = 1;
                    hits++;
                }
            }
        }
        /* Two Redis keys that redis-benchmark asks for at start (it warns
         * when they are missing): answered only when named exactly. */
        int want_save = 0, want_aof = 0;
        for (size_t a = 2; a < call->argc; a++) {
            if (arg_is(&call->argv[a], "save")) { want_save = 1; }
            if (arg_is(&call->argv[a], "appendonly")) { want_aof = 1; }
        }
        resp_add_map(out, hits + (size_t)want_save + (size_t)want_aof);
        for (int i = 0; i < n; i++) {
            if (!match[i]) { continue; }
            char value[4096];
            config_key_value(cfg, i, value, sizeof value);
            resp_add_bulk_str(out, config_key_name(i));
            resp_add_bulk_str(out, value);
        }
        if (want_save) {
            resp_add_bulk_str(out, "save");
            resp_add_bulk_str(out, "");
        }
        if (want_aof) {
            resp_add_bulk_str(out, "appendonly");
            resp_add_bulk_str(out, cfg->fsync_always ? "yes" : "no");
        }
    } else if (arg_is(sub, "set") || arg_is(sub, "rewrite")) {
        resp_add_error(out, "ERR CONFIG SET is not supported: change the config file and restart");
    } else if (arg_is(sub, "resetstat")) {
        resp_add_simple(out, "OK");
    } else {
        char b[40];
        resp_add_errorf(out, "ERR unknown subcommand '%s'. Try CONFIG GET.", shown(sub, b, sizeof b));
    }
}

/* ---- SEND ---------------------------------------------------------------------- */

static job_result_t send_exec(job_t *j, writer_t *w)
{
    cmd_job_t *cj = (cmd_job_t *)j;
    store_t *s = writer_store(w);
    uint64_t now = writer_now(w);
    store_send_req_t req = {
        .topic = cj->topic.ptr, .topic_len = cj->topic.len,
        .key = cj->key.ptr, .key_len = cj->key.len,
        .payload = cj->payload.ptr, .payload_len = cj->payload.len,
        .level = cj->level > 0 ? cj->level : 0,
        .delay_ms = cj->delay_ms,
    };
    if (cj->has_at) { req.delay_ms = cj->at_ms > now ? cj->at_ms - now : 0; }
    uint64_t id, due;
    char err[300];
    if (store_send(s, &req, now, &id, &due, err, sizeof err) != 0) {
        reply_store_error(j, err);
        return JOB_DONE;
    }
    writer_stats(w)->sends++;
    add_id(&j->reply, id);
    return JOB_DONE;
}

static void cmd_send(cmd_call_t *call)
{
    const config_t *cfg = server_config(call->srv);
    const resp_arg_t *argv = call->argv;
    if (check_name(call, "topic", &argv[1]) != 0) { return; }
    if (argv[2].len > (size_t)cfg->max_payload) {
        resp_add_errorf(call->out, "ERR payload is %zu bytes, larger than max-payload %lld", argv[2].len,
                        cfg->max_payload);
        return;
    }
    int seen_key = 0, seen_when = 0;
    int level = -1, has_delay = 0, has_at = 0;
    uint64_t delay = 0, at = 0;
    const resp_arg_t *key = NULL;
    for (size_t i = 3; i < call->argc; i += 2) {
        const resp_arg_t *o = &argv[i];
        int is_key = arg_is(o, "key"), is_level = arg_is(o, "level"), is_delay = arg_is(o, "delay"),
            is_at = arg_is(o, "at");
        if (!(is_key || is_level || is_delay || is_at)) { unknown_option(call, o, "send"); return; }
        const resp_arg_t *v = opt_value(call, argv, call->argc, i);
        if (v == NULL) { return; }
        if (is_key) {
            if (once(call, &seen_key, "KEY") != 0) { return; }
            if (v->len > MSG_MAX_KEY) {
                resp_add_errorf(call->out, "ERR key is %zu bytes, longer than the limit of %d", v->len, MSG_MAX_KEY);
                return;
            }
            key = v;
            continue;
        }
        if (seen_when) {
            resp_add_error(call->out, "ERR syntax error: only one of LEVEL, DELAY and AT may be given");
            return;
        }
        seen_when = 1;
        if (is_level) {
            if (parse_level(call, v, 0, &level) != 0) { return; }
        } else if (is_delay) {
            if (check_delay(call, v, &delay) != 0) { return; }
            has_delay = 1;
        } else {
            if (parse_u64(v, &at) != 0) {
                char b[40];
                resp_add_errorf(call->out, "ERR AT must be a unix time in milliseconds, got '%s'", shown(v, b, sizeof b));
                return;
            }
            has_at = 1;
        }
    }
    cmd_job_t *cj = job_new(call, send_exec);
    cj->topic = cj->argv[1];
    cj->payload = cj->argv[2];
    if (key) { cj->key = cj->argv[key - argv]; }
    cj->level = level;
    cj->has_delay = has_delay;
    cj->delay_ms = delay;
    cj->has_at = has_at;
    cj->at_ms = at;
    call->job = &cj->job;
}

/* ---- PULL ------------------------------------------------------------------------ */

static job_result_t pull_exec(job_t *j, writer_t *w)
{
    cmd_job_t *cj = (cmd_job_t *)j;
    store_t *s = writer_store(w);
    uint64_t now = writer_now(w);
    msg_owned_t *msgs = xmalloc((size_t)cj->count * sizeof *msgs);
    int n = 0;
    char err[300];
    if (store_lease(s, cj->group.ptr, cj->group.len, cj->topic.ptr, cj->topic.len, cj->count, cj->lease_ms, now,
                    msgs, &n, err, sizeof err) != 0) {
        free(msgs);
        reply_store_error(j, err);
        return JOB_DONE;
    }
    if (n == 0 && j->block_set) {
        free(msgs);
        return JOB_PARK;
    }
    storage_stats_t *st = writer_stats(w);
    resp_add_array(&j->reply, (size_t)n);
    for (int i = 0; i < n; i++) {
        const msg_t *m = &msgs[i].m;
        resp_add_array(&j->reply, 6);
        add_id(&j->reply, m->id);
        resp_add_bulk(&j->reply, m->topic.ptr, m->topic.len);
        resp_add_bulk(&j->reply, m->key.ptr, m->key.len);
        resp_add_bulk(&j->reply, m->payload.ptr, m->payload.len);
        resp_add_int(&j->reply, (long long)m->reconsume);
        resp_add_int(&j->reply, (long long)m->due_ms);
        prom_hist_add(&st->lateness, now > m->due_ms ? (double)(now - m->due_ms) / 1000.0 : 0.0);
        msg_owned_free(&msgs[i]);
    }
    st->deliveries += (uint64_t)n;
    free(msgs);
    return JOB_DONE;
}

/* Parked PULL: worth trying again when its group has something ready. */
static int pull_wake(job_t *j, writer_t *w)
{
    cmd_job_t *cj = (cmd_job_t *)j;
    store_t *s = writer_store(w);
    store_group_info_t gi;
    if (store_group_info(s, cj->group.ptr, cj->group.len, &gi)) { return gi.ready > 0; }
    store_topic_info_t ti;
    return store_topic_info(s, cj->topic.ptr, cj->topic.len, &ti) && ti.retained > 0;
}

static void pull_expire(job_t *j, writer_t *w)
{
    (void)w;
    resp_buf_clear(&j->reply);
    resp_add_array(&j->reply, 0);
}

static void cmd_pull(cmd_call_t *call)
{
    const config_t *cfg = server_config(call->srv);
    const resp_arg_t *argv = call->argv;
    if (check_name(call, "group", &argv[1]) != 0 || check_name(call, "topic", &argv[2]) != 0) { return; }
    int count = 1, seen_count = 0, seen_block = 0, seen_lease = 0;
    uint64_t block = 0, lease = (uint64_t)cfg->lease_ms;
    for (size_t i = 3; i < call->argc; i += 2) {
        const resp_arg_t *o = &argv[i];
        if (arg_is(o, "count")) {
            const resp_arg_t *v = opt_value(call, argv, call->argc, i);
            if (!v || once(call, &seen_count, "COUNT") != 0 || parse_count(call, v, &count) != 0) { return; }
        } else if (arg_is(o, "block")) {
            const resp_arg_t *v = opt_value(call, argv, call->argc, i);
            if (!v || once(call, &seen_block, "BLOCK") != 0) { return; }
            if (parse_ms(v, &block) != 0 || block > LVL_MAX_DURATION_MS) {
                char b[40];
                resp_add_errorf(call->out, "ERR BLOCK must be milliseconds (0 = forever) or a duration, got '%s'",
                                shown(v, b, sizeof b));
                return;
            }
        } else if (arg_is(o, "lease")) {
            const resp_arg_t *v = opt_value(call, argv, call->argc, i);
            if (!v || once(call, &seen_lease, "LEASE") != 0 || parse_lease(call, v, &lease) != 0) { return; }
        } else {
            unknown_option(call, o, "pull");
            return;
        }
    }
    cmd_job_t *cj = job_new(call, pull_exec);
    cj->group = cj->argv[1];
    cj->topic = cj->argv[2];
    cj->count = count;
    cj->lease_ms = lease;
    if (seen_block) {
        cj->job.block_set = 1;
        cj->job.block_ms = block;
        cj->job.wake = pull_wake;
        cj->job.expire = pull_expire;
    }
    call->job = &cj->job;
}

/* ---- ACK NACK TOUCH ------------------------------------------------------------------- */

static job_result_t ack_exec(job_t *j, writer_t *w)
{
    cmd_job_t *cj = (cmd_job_t *)j;
    int released = 0;
    char err[300];
    if (store_ack(writer_store(w), cj->group.ptr, cj->group.len, cj->ids, cj->nids, &released, err, sizeof err) != 0) {
        reply_store_error(j, err);
        return JOB_DONE;
    }
    writer_stats(w)->acks += (uint64_t)released;
    resp_add_int(&j->reply, released);
    return JOB_DONE;
}

static void cmd_ack(cmd_call_t *call)
{
    if (check_name(call, "group", &call->argv[1]) != 0) { return; }
    uint64_t first;
    for (size_t i = 2; i < call->argc; i++) {
        if (parse_id(call, &call->argv[i], &first) != 0) { return; }
    }
    cmd_job_t *cj = job_new(call, ack_exec);
    cj->group = cj->argv[1];
    for (size_t i = 2; i < cj->argc; i++) { store_id_parse(cj->argv[i].ptr, cj->argv[i].len, &cj->ids[cj->nids++]); }
    call->job = &cj->job;
}

static job_result_t nack_exec(job_t *j, writer_t *w)
{
    cmd_job_t *cj = (cmd_job_t *)j;
    sched_nack_req_t req = {
        .to_dlq = cj->to_dlq,
        .level = cj->level > 0 ? cj->level : 0,
        .delay_ms = cj->delay_ms,
        .reason = cj->reason.ptr, .reason_len = cj->reason.len,
    };
    int found = 0;
    uint64_t next_due = 0;
    sched_stats_t st = { 0 };
    char err[300];
    if (sched_nack(writer_sched(w), cj->group.ptr, cj->group.len, cj->id, &req, &found, &next_due, &st,
                   err, sizeof err) != 0) {
        reply_store_error(j, err);
        return JOB_DONE;
    }
    storage_stats_t *ss = writer_stats(w);
    if (found) { ss->nacks++; }
    ss->retries += st.retried;
    ss->dlq_moves += st.dead;
    resp_add_int(&j->reply, found ? (long long)next_due : -1);
    return JOB_DONE;
}

static void cmd_nack(cmd_call_t *call)
{
    const resp_arg_t *argv = call->argv;
    if (check_name(call, "group", &argv[1]) != 0) { return; }
    uint64_t id;
    if (parse_id(call, &argv[2], &id) != 0) { return; }
    int seen_when = 0, seen_reason = 0, level = -1, to_dlq = 0;
    uint64_t delay = 0;
    const resp_arg_t *reason = NULL;
    for (size_t i = 3; i < call->argc; i += 2) {
        const resp_arg_t *o = &argv[i];
        int is_level = arg_is(o, "level"), is_delay = arg_is(o, "delay"), is_reason = arg_is(o, "reason");
        if (arg_is(o, "dlq")) {   /* a permanent failure: straight to the DLQ (no value) */
            if (seen_when) {
                resp_add_error(call->out, "ERR syntax error: only one of LEVEL, DELAY and DLQ may be given");
                return;
            }
            seen_when = 1;
            to_dlq = 1;
            i--;   /* the loop steps by two; DLQ takes no value */
            continue;
        }
        if (!(is_level || is_delay || is_reason)) { unknown_option(call, o, "nack"); return; }
        const resp_arg_t *v = opt_value(call, argv, call->argc, i);
        if (v == NULL) { return; }
        if (is_reason) {
            if (once(call, &seen_reason, "REASON") != 0) { return; }
            if (v->len > MSG_MAX_REASON) {
                resp_add_errorf(call->out, "ERR REASON is %zu bytes, longer than the limit of %d", v->len, MSG_MAX_REASON);
                return;
            }
            reason = v;
            continue;
        }
        if (seen_when) {
            resp_add_error(call->out, "ERR syntax error: only one of LEVEL, DELAY and DLQ may be given");
            return;
        }
        seen_when = 1;
        if (is_level) {
            if (parse_level(call, v, 1, &level) != 0) { return; }
        } else {
            if (check_delay(call, v, &delay) != 0) { return; }
            if (delay == 0) {
                resp_add_error(call->out, "ERR NACK DELAY must be greater than 0");
                return;
            }
        }
    }
    cmd_job_t *cj = job_new(call, nack_exec);
    cj->group = cj->argv[1];
    cj->id = id;
    cj->level = level;
    cj->delay_ms = delay;
    cj->to_dlq = to_dlq;
    if (reason) { cj->reason = cj->argv[reason - argv]; }
    call->job = &cj->job;
}

static job_result_t touch_exec(job_t *j, writer_t *w)
{
    cmd_job_t *cj = (cmd_job_t *)j;
    uint64_t deadline = writer_now(w) + cj->lease_ms;
    int found = 0;
    char err[300];
    if (store_touch(writer_store(w), cj->group.ptr, cj->group.len, cj->id, deadline, &found, err, sizeof err) != 0) {
        reply_store_error(j, err);
        return JOB_DONE;
    }
    if (found) { writer_stats(w)->touches++; }
    resp_add_int(&j->reply, found ? (long long)deadline : 0);
    return JOB_DONE;
}

static void cmd_touch(cmd_call_t *call)
{
    const config_t *cfg = server_config(call->srv);
    const resp_arg_t *argv = call->argv;
    if (check_name(call, "group", &argv[1]) != 0) { return; }
    uint64_t id, lease = (uint64_t)cfg->lease_ms;
    if (parse_id(call, &argv[2], &id) != 0) { return; }
    if (call->argc == 4 || call->argc > 5) {
        resp_add_error(call->out, "ERR syntax error: TOUCH group id [LEASE ms]");
        return;
    }
    if (call->argc == 5) {
        if (!arg_is(&argv[3], "lease")) { unknown_option(call, &argv[3], "touch"); return; }
        if (parse_lease(call, &argv[4], &lease) != 0) { return; }
    }
    cmd_job_t *cj = job_new(call, touch_exec);
    cj->group = cj->argv[1];
    cj->id = id;
    cj->lease_ms = lease;
    call->job = &cj->job;
}

/* ---- GROUP ------------------------------------------------------------------------------ */

typedef struct group_row {
    char name[MSG_MAX_NAME + 1];
    store_group_info_t info;
} group_row_t;

typedef struct group_rows {
    group_row_t *rows;
    size_t n, cap;
} group_rows_t;

static int collect_group(void *ctx, const char *group, const store_group_info_t *info)
{
    group_rows_t *r = ctx;
    if (r->n == r->cap) {
        r->cap = r->cap ? r->cap * 2 : 16;
        r->rows = xrealloc(r->rows, r->cap * sizeof *r->rows);
    }
    snprintf(r->rows[r->n].name, sizeof r->rows[r->n].name, "%s", group);
    r->rows[r->n].info = *info;
    r->n++;
    return 0;
}

static int cmp_rows(const void *a, const void *b)
{
    return strcmp(((const group_row_t *)a)->name, ((const group_row_t *)b)->name);
}

static void add_kv_int(resp_buf_t *b, const char *k, uint64_t v)
{
    resp_add_bulk_str(b, k);
    resp_add_int(b, (long long)v);
}

static job_result_t group_exec(job_t *j, writer_t *w)
{
    cmd_job_t *cj = (cmd_job_t *)j;
    store_t *s = writer_store(w);
    char err[300];
    if (cj->sub == SUB_CREATE) {
        if (store_group_create(s, cj->group.ptr, cj->group.len, cj->topic.ptr, cj->topic.len, cj->from_first,
                               cj->max_reconsume, writer_now(w), err, sizeof err) != 0) {
            reply_store_error(j, err);
        } else {
            resp_add_simple(&j->reply, "OK");
        }
    } else if (cj->sub == SUB_DEL) {
        int found = 0;
        if (store_group_delete(s, cj->group.ptr, cj->group.len, &found, err, sizeof err) != 0) {
            reply_store_error(j, err);
        } else {
            resp_add_int(&j->reply, found);
        }
    } else {
        group_rows_t r = { 0 };
        store_group_foreach(s, collect_group, &r);
        if (r.n > 1) { qsort(r.rows, r.n, sizeof *r.rows, cmp_rows); }
        resp_add_array(&j->reply, r.n);
        for (size_t i = 0; i < r.n; i++) {
            const store_group_info_t *gi = &r.rows[i].info;
            resp_add_map(&j->reply, 11);
            resp_add_bulk_str(&j->reply, "group");
            resp_add_bulk_str(&j->reply, r.rows[i].name);
            resp_add_bulk_str(&j->reply, "topic");
            resp_add_bulk_str(&j->reply, gi->topic);
            add_kv_int(&j->reply, "ready", gi->ready);
            add_kv_int(&j->reply, "backlog", gi->backlog);
            add_kv_int(&j->reply, "retry-ready", gi->retry_ready);
            add_kv_int(&j->reply, "retry-delayed", gi->retry_delayed);
            add_kv_int(&j->reply, "inflight", gi->inflight);
            add_kv_int(&j->reply, "dlq", gi->dlq);
            add_kv_int(&j->reply, "max-reconsume", gi->max_reconsume);
            add_kv_int(&j->reply, "created-ms", gi->created_ms);
            add_kv_int(&j->reply, "retry", gi->retry_ready + gi->retry_delayed);
        }
        free(r.rows);
    }
    return JOB_DONE;
}

static void cmd_group(cmd_call_t *call)
{
    const resp_arg_t *argv = call->argv;
    const resp_arg_t *sub = &argv[1];
    int code;
    if (arg_is(sub, "create")) {
        code = SUB_CREATE;
        if (call->argc < 4) {
            resp_add_error(call->out, "ERR wrong number of arguments for 'group|create' command");
            return;
        }
        if (check_name(call, "group", &argv[2]) != 0 || check_name(call, "topic", &argv[3]) != 0) { return; }
    } else if (arg_is(sub, "list")) {
        code = SUB_LIST;
        if (call->argc != 2) {
            resp_add_error(call->out, "ERR wrong number of arguments for 'group|list' command");
            return;
        }
    } else if (arg_is(sub, "del") || arg_is(sub, "delete") || arg_is(sub, "destroy")) {
        code = SUB_DEL;
        if (call->argc != 3) {
            resp_add_error(call->out, "ERR wrong number of arguments for 'group|del' command");
            return;
        }
        if (check_name(call, "group", &argv[2]) != 0) { return; }
    } else {
        char b[40];
        resp_add_errorf(call->out, "ERR unknown subcommand '%s' for 'group' (CREATE, LIST, DEL)", shown(sub, b, sizeof b));
        return;
    }
    int from_first = 1, maxretry = -1, seen_from = 0, seen_max = 0;
    if (code == SUB_CREATE) {
        for (size_t i = 4; i < call->argc; i += 2) {
            const resp_arg_t *o = &argv[i];
            const resp_arg_t *v;
            if (arg_is(o, "from")) {
                if (!(v = opt_value(call, argv, call->argc, i)) || once(call, &seen_from, "FROM") != 0) { return; }
                if (arg_is(v, "first")) { from_first = 1; }
                else if (arg_is(v, "now")) { from_first = 0; }
                else { resp_add_error(call->out, "ERR FROM must be FIRST or NOW"); return; }
            } else if (arg_is(o, "maxretry")) {
                if (!(v = opt_value(call, argv, call->argc, i)) || once(call, &seen_max, "MAXRETRY") != 0) { return; }
                uint64_t n;
                if (parse_u64(v, &n) != 0 || n > STORE_MAX_MAX_RECONSUME) {
                    char b[40];
                    resp_add_errorf(call->out, "ERR MAXRETRY must be 0..%d, got '%s'", STORE_MAX_MAX_RECONSUME,
                                    shown(v, b, sizeof b));
                    return;
                }
                maxretry = (int)n;
            } else {
                unknown_option(call, o, "group create");
                return;
            }
        }
    }
    cmd_job_t *cj = job_new(call, group_exec);
    cj->sub = code;
    if (code != SUB_LIST) { cj->group = cj->argv[2]; }
    if (code == SUB_CREATE) { cj->topic = cj->argv[3]; }
    cj->from_first = from_first;
    cj->max_reconsume = maxretry;
    call->job = &cj->job;
}

/* ---- DLQ ------------------------------------------------------------------------------------ */

static job_result_t dlq_exec(job_t *j, writer_t *w)
{
    cmd_job_t *cj = (cmd_job_t *)j;
    store_t *s = writer_store(w);
    char err[300];
    store_group_info_t gi;
    if (!store_group_info(s, cj->group.ptr, cj->group.len, &gi)) {
        char b[80];
        resp_add_errorf(&j->reply, "ERR no such group '%s'", shown(&cj->group, b, sizeof b));
        return JOB_DONE;
    }
    uint64_t count = 0;
    switch (cj->sub) {
    case SUB_LEN:
        resp_add_int(&j->reply, (long long)gi.dlq);
        break;
    case SUB_LIST: {
        msg_owned_t *msgs = xmalloc((size_t)cj->count * sizeof *msgs);
        int n = 0;
        if (store_dlq_list(s, cj->group.ptr, cj->group.len, cj->after_id, cj->count, msgs, &n, err, sizeof err) != 0) {
            free(msgs);
            reply_store_error(j, err);
            break;
        }
        resp_add_array(&j->reply, (size_t)n);
        for (int i = 0; i < n; i++) {
            const msg_t *m = &msgs[i].m;
            resp_add_array(&j->reply, 6);
            add_id(&j->reply, m->id);
            resp_add_bulk(&j->reply, m->key.ptr, m->key.len);
            resp_add_bulk(&j->reply, m->payload.ptr, m->payload.len);
            resp_add_int(&j->reply, (long long)m->reconsume);
            resp_add_bulk(&j->reply, m->reason.ptr, m->reason.len);
            resp_add_int(&j->reply, (long long)m->stamp_ms);
            msg_owned_free(&msgs[i]);
        }
        free(msgs);
        break;
    }
    case SUB_REQUEUE:
        if (store_dlq_requeue(s, cj->group.ptr, cj->group.len, cj->id, cj->all, writer_now(w), &count, err,
                              sizeof err) != 0) {
            reply_store_error(j, err);
            break;
        }
        writer_stats(w)->requeued += count;
        resp_add_int(&j->reply, (long long)count);
        break;
    case SUB_DROP:
        if (store_dlq_drop(s, cj->group.ptr, cj->group.len, cj->id, cj->all, &count, err, sizeof err) != 0) {
            reply_store_error(j, err);
            break;
        }
        writer_stats(w)->dropped += count;
        resp_add_int(&j->reply, (long long)count);
        break;
    }
    return JOB_DONE;
}

static void cmd_dlq(cmd_call_t *call)
{
    const config_t *cfg = server_config(call->srv);
    const resp_arg_t *argv = call->argv;
    const resp_arg_t *sub = &argv[1];
    int code;
    if (arg_is(sub, "len")) { code = SUB_LEN; }
    else if (arg_is(sub, "list")) { code = SUB_LIST; }
    else if (arg_is(sub, "requeue")) { code = SUB_REQUEUE; }
    else if (arg_is(sub, "drop")) { code = SUB_DROP; }
    else {
        char b[40];
        resp_add_errorf(call->out, "ERR unknown subcommand '%s' for 'dlq' (LEN, LIST, REQUEUE, DROP)",
                        shown(sub, b, sizeof b));
        return;
    }
    static const char *const names[] = { "", "", "list", "", "len", "requeue", "drop" };
    if (call->argc < 3 || (code == SUB_LEN && call->argc != 3) ||
        ((code == SUB_REQUEUE || code == SUB_DROP) && call->argc != 4)) {
        resp_add_errorf(call->out, "ERR wrong number of arguments for 'dlq|%s' command", names[code]);
        return;
    }
    if (check_name(call, "group", &argv[2]) != 0) { return; }
    int count = DLQ_LIST_DEFAULT < cfg->max_pull_count ? DLQ_LIST_DEFAULT : (int)cfg->max_pull_count;
    uint64_t after = 0, id = 0;
    int all = 0;
    if (code == SUB_LIST) {
        int seen_count = 0, seen_after = 0;
        for (size_t i = 3; i < call->argc; i += 2) {
            const resp_arg_t *o = &argv[i];
            const resp_arg_t *v;
            if (arg_is(o, "count")) {
                if (!(v = opt_value(call, argv, call->argc, i)) || once(call, &seen_count, "COUNT") != 0 ||
                    parse_count(call, v, &count) != 0) { return; }
            } else if (arg_is(o, "after")) {
                if (!(v = opt_value(call, argv, call->argc, i)) || once(call, &seen_after, "AFTER") != 0 ||
                    parse_id(call, v, &after) != 0) { return; }
            } else {
                unknown_option(call, o, "dlq list");
                return;
            }
        }
    } else if (code == SUB_REQUEUE || code == SUB_DROP) {
        if (arg_is(&argv[3], "all")) { all = 1; }
        else if (parse_id(call, &argv[3], &id) != 0) { return; }
    }
    cmd_job_t *cj = job_new(call, dlq_exec);
    cj->sub = code;
    cj->group = cj->argv[2];
    cj->count = count;
    cj->after_id = after;
    cj->id = id;
    cj->all = all;
    call->job = &cj->job;
}

/* ---- LEVELS INFO ------------------------------------------------------------------------ */

static job_result_t levels_exec(job_t *j, writer_t *w)
{
    store_t *s = writer_store(w);
    const lvl_table_t *t = store_levels(s);
    resp_add_array(&j->reply, (size_t)t->count);
    for (int l = 1; l <= t->count; l++) {
        store_level_info_t li;
        store_level_info(s, l, &li);
        resp_add_array(&j->reply, 4);
        resp_add_int(&j->reply, l);
        resp_add_int(&j->reply, (long long)li.delay_ms);
        resp_add_int(&j->reply, (long long)li.depth);
        resp_add_int(&j->reply, (long long)li.head_due_ms);
    }
    return JOB_DONE;
}

static void cmd_levels(cmd_call_t *call)
{
    call->job = &job_new(call, levels_exec)->job;
}

static job_result_t info_exec(job_t *j, writer_t *w)
{
    cmd_job_t *cj = (cmd_job_t *)j;
    metrics_info_storage(&j->reply.raw, cj->info_mask, writer_store(w), writer_stats(w), writer_now(w), 0);
    return JOB_DONE;
}

/* Loop thread: wrap the storage text with the loop's sections into one bulk. */
static void info_complete(job_t *j)
{
    if (j->failed) { return; }
    cmd_job_t *cj = (cmd_job_t *)j;
    loop_info_t li;
    server_loop_info(cj->srv, &li);
    buf_t text = BUF_INIT;
    metrics_info_loop_head(&text, cj->info_mask, &li);
    buf_append(&text, j->reply.raw.data, j->reply.raw.len);
    metrics_info_loop_tail(&text, cj->info_mask, &li);
    resp_buf_clear(&j->reply);
    resp_add_verbatim(&j->reply, "txt", text.data ? text.data : "", text.len);
    buf_free(&text);
}

static void cmd_info(cmd_call_t *call)
{
    int mask = 0;
    if (call->argc == 1) {
        mask = INFO_ALL;
    } else {
        for (size_t i = 1; i < call->argc; i++) { mask |= metrics_info_mask(call->argv[i].ptr, call->argv[i].len); }
    }
    if ((mask & ~(INFO_SERVER | INFO_CLIENTS)) == 0) {
        loop_info_t li;
        server_loop_info(call->srv, &li);
        buf_t text = BUF_INIT;
        metrics_info_loop_head(&text, mask, &li);
        resp_add_verbatim(call->out, "txt", text.data ? text.data : "", text.len);
        buf_free(&text);
        return;
    }
    cmd_job_t *cj = job_new(call, info_exec);
    cj->info_mask = mask;
    cj->job.complete = info_complete;
    call->job = &cj->job;
}

/* ---- the table ---------------------------------------------------------------------------- */

#define R_ANY ROLE_ALL
#define R_PROD (ROLE_PRODUCER | ROLE_ADMIN)
#define R_CONS (ROLE_CONSUMER | ROLE_ADMIN)
#define R_ADM ROLE_ADMIN

static const cmd_def_t commands[] = {
    { "send", -3, CMD_STORAGE | CMD_WRITE | CMD_DURABLE, R_PROD, cmd_send,
      "topic payload [KEY k] [LEVEL n | DELAY d | AT unix-ms]", "enqueue a delayed message; replies its id once durable" },
    { "pull", -3, CMD_STORAGE | CMD_WRITE | CMD_BLOCKING, R_CONS, cmd_pull,
      "group topic [COUNT n] [BLOCK ms] [LEASE ms]", "lease ready messages: [id, topic, key, payload, reconsume, due_ms]" },
    { "ack", -3, CMD_STORAGE | CMD_WRITE, R_CONS, cmd_ack, "group id [id ...]", "release leases; replies how many" },
    { "nack", -3, CMD_STORAGE | CMD_WRITE, R_CONS, cmd_nack, "group id [LEVEL n | DELAY d | DLQ] [REASON text]",
      "fail a lease: retry (replies next due ms), DLQ (0) or no lease (-1)" },
    { "touch", -3, CMD_STORAGE | CMD_WRITE, R_CONS, cmd_touch, "group id [LEASE ms]",
      "extend a lease; replies the new deadline or 0" },
    { "group", -2, CMD_STORAGE | CMD_WRITE | CMD_DURABLE, R_ANY, cmd_group,
      "CREATE group topic [FROM FIRST|NOW] [MAXRETRY n] | LIST | DEL group", "consumer groups" },
    { "dlq", -3, CMD_STORAGE | CMD_WRITE | CMD_ADMIN | CMD_DURABLE, R_ADM, cmd_dlq,
      "LEN group | LIST group [COUNT n] [AFTER id] | REQUEUE group id|ALL | DROP group id|ALL", "the dead-letter queue" },
    { "levels", 1, CMD_STORAGE, R_ANY, cmd_levels, "", "per level: [level, delay_ms, depth, next_due_ms]" },
    { "info", -1, CMD_STORAGE, R_ANY, cmd_info, "[section ...]",
      "server, clients, levels, groups, storage, stats (Redis-style text)" },
    { "ping", -1, CMD_LOOP | CMD_NOAUTH, R_ANY, cmd_ping, "[message]", "PONG, or the message" },
    { "echo", 2, CMD_LOOP, R_ANY, cmd_echo, "message", "the message" },
    { "hello", -1, CMD_LOOP | CMD_NOAUTH, R_ANY, cmd_hello, "[2|3] [AUTH user pass] [SETNAME name]",
      "choose RESP2/RESP3; server facts" },
    { "auth", -2, CMD_LOOP | CMD_NOAUTH, R_ANY, cmd_auth, "[user] password", "authenticate (needs users: not yet)" },
    { "quit", 1, CMD_LOOP | CMD_NOAUTH, R_ANY, cmd_quit, "", "+OK, then close" },
    { "shutdown", -1, CMD_LOOP | CMD_ADMIN, R_ADM, cmd_shutdown, "[NOSAVE|SAVE|NOW|FORCE]",
      "finish the batch in flight, close the store, exit 0" },
    { "command", -1, CMD_LOOP, R_ANY, cmd_command, "[COUNT|DOCS|LIST|INFO name...|HELP]", "the command table" },
    { "client", -2, CMD_LOOP, R_ANY, cmd_client, "SETNAME n|GETNAME|ID|SETINFO k v|LIST|INFO", "connection facts" },
    { "select", 2, CMD_LOOP, R_ANY, cmd_select, "0", "+OK for 0 (one keyspace; for Redis clients)" },
    { "config", -2, CMD_LOOP | CMD_ADMIN, R_ANY, cmd_config, "GET pattern", "read configuration keys" },
};

#define NCOMMANDS (sizeof commands / sizeof commands[0])

const cmd_def_t *cmd_table(size_t *count)
{
    *count = NCOMMANDS;
    return commands;
}

static const cmd_def_t *cmd_lookup(const char *name, size_t len)
{
    for (size_t i = 0; i < NCOMMANDS; i++) {
        if (strlen(commands[i].name) == len && strncasecmp(commands[i].name, name, len) == 0) { return &commands[i]; }
    }
    return NULL;
}

void cmd_dispatch(cmd_call_t *call)
{
    const resp_arg_t *name = &call->argv[0];
    const cmd_def_t *d = cmd_lookup(name->ptr, name->len);
    if (d == NULL) {
        char b[64];
        resp_add_errorf(call->out, "ERR unknown command '%s'", shown(name, b, sizeof b));
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
    if ((call->conn->roles & d->roles) == 0) {
        resp_add_errorf(call->out, "NOPERM this user has no permissions to run the '%s' command", d->name);
        return;
    }
    d->proc(call);
    if (call->job) { call->job->durable = (d->flags & CMD_DURABLE) != 0; }
}
