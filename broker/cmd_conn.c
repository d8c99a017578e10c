/*
 * broker/cmd_conn.c — the connection commands: PING ECHO QUIT SELECT AUTH
 * HELLO CLIENT ACL.
 *
 * All answered on the loop thread from the connection's own state (conn_t:
 * protocol, name, id, user, roles); none touches the store. AUTH and
 * HELLO ... AUTH check the password against the users file (broker/users.h):
 * a password verified before is answered at once from broker/auth.h's cache;
 * any other goes to the AUTH thread as an auth_call_t, and its complete()
 * (loop thread) logs the user in (or logs the failure) and writes the reply.
 * `AUTH pass` with one argument is `AUTH default pass` (Redis semantics).
 * A failed AUTH leaves the connection as it was (still logged in as before,
 * or not at all).
 */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif
#include "broker/cmd_shared.h"

#include <stdio.h>
#include <string.h>

#include "base/buf.h"
#include "broker/auth.h"
#include "broker/authfail.h"
#include "broker/server.h"
#include "common/log.h"

#define WRONGPASS "WRONGPASS invalid username-password pair or user is disabled."
/* AUTH and HELLO ... AUTH on a broker without a users file. It keeps Redis's
 * words for a server whose default user has no password: ioredis recognises
 * them, warns and goes on, where any other error makes it reconnect forever
 * (docs/protocol.md, "Client libraries"). hourglass-console reads the text up
 * to "(see users-file)". */
#define NO_USERS_AUTH                                                                                            \
    "ERR AUTH called without any users configured (see users-file), so without any password configured for the " \
    "default user: every client is served without AUTH"

/* An AUTH being verified off the loop (broker/auth.h). */
typedef struct auth_call {
    auth_req_t req; /* first member */
    server_t *srv;
    conn_set_t *set;
    char user[USERS_NAME_MAX + 1]; /* a known user's name; "" for an unknown one (user_len 0) */
    size_t user_len;
    size_t typed_len;  /* the length of the name as typed: what the log shows of an unknown one */
    const char *why;   /* for the log when it fails: "wrong password", "no such user", ... */
    char why_text[80]; /* why, when it says a length */
    int hello;         /* 0: AUTH; 2 or 3: HELLO's protocol */
    int has_setname;
    char setname[128];
} auth_call_t;

static void add_bulk_arg(resp_buf_t *b, const resp_arg_t *a)
{
    resp_add_bulk(b, a->ptr, a->len);
}

/* The one client-name rule, for CLIENT SETNAME and HELLO ... SETNAME: printable
 * ASCII without spaces (no control bytes, CR, LF, NUL, DEL or 8-bit bytes),
 * shorter than conn_t.name; empty clears the name. Sets it and returns 0, or
 * writes the error reply and returns -1 with the name unchanged. */
static int check_client_name(cmd_call_t *call, const resp_arg_t *v)
{
    conn_t *c = call->conn;
    for (size_t i = 0; i < v->len; i++) {
        unsigned char ch = (unsigned char)v->ptr[i];
        if (ch <= ' ' || ch >= 0x7f) {
            resp_add_error(call->out, "ERR Client names cannot contain spaces, newlines or special characters.");
            return -1;
        }
    }
    if (v->len >= sizeof c->name) {
        resp_add_errorf(call->out, "ERR client name longer than %zu bytes", sizeof c->name - 1);
        return -1;
    }
    return 0;
}

static int set_client_name(cmd_call_t *call, const resp_arg_t *v)
{
    conn_t *c = call->conn;
    if (check_client_name(call, v) != 0) {
        return -1;
    }
    memcpy(c->name, v->ptr, v->len);
    c->name[v->len] = '\0';
    return 0;
}

void cmd_ping(cmd_call_t *call)
{
    if (call->argc > 2) {
        resp_add_error(call->out, "ERR wrong number of arguments for 'ping' command");
    } else if (call->argc == 2) {
        add_bulk_arg(call->out, &call->argv[1]);
    } else {
        resp_add_simple(call->out, "PONG");
    }
}

void cmd_echo(cmd_call_t *call)
{
    add_bulk_arg(call->out, &call->argv[1]);
}

void cmd_quit(cmd_call_t *call)
{
    resp_add_simple(call->out, "OK");
    call->close_after = 1;
}

void cmd_select(cmd_call_t *call)
{
    if (cmd_arg_is(&call->argv[1], "0")) {
        resp_add_simple(call->out, "OK");
    } else {
        char b[40];
        resp_add_errorf(call->out, "ERR DB index is out of range: '%s' (one keyspace: SELECT 0 only)",
                        cmd_shown(&call->argv[1], b, sizeof b));
    }
}

/* The user a connection acts as, for HELLO, ACL WHOAMI and messages. */
static const char *user_shown(const conn_t *c)
{
    return c->user[0] ? c->user : "default";
}

/* HELLO's reply map: server facts, and who the connection is. */
static void hello_reply(resp_buf_t *out, const conn_t *c)
{
    char roles[USERS_ROLES_TEXT];
    users_roles_text(c->roles, roles, sizeof roles);
    resp_add_map(out, 9);
    resp_add_bulk_str(out, "server");
    resp_add_bulk_str(out, "hourglass");
    resp_add_bulk_str(out, "version");
    resp_add_bulk_str(out, PACKAGE_VERSION);
    resp_add_bulk_str(out, "proto");
    resp_add_int(out, c->proto);
    resp_add_bulk_str(out, "id");
    resp_add_int(out, (long long)c->id);
    resp_add_bulk_str(out, "mode");
    resp_add_bulk_str(out, "standalone");
    resp_add_bulk_str(out, "role");
    resp_add_bulk_str(out, "master");
    resp_add_bulk_str(out, "modules");
    resp_add_array(out, 0);
    resp_add_bulk_str(out, "user");
    resp_add_bulk_str(out, user_shown(c));
    resp_add_bulk_str(out, "roles");
    size_t n = 0;
    for (unsigned bit = 1; bit <= ROLE_ALL; bit <<= 1) {
        n += (c->roles & bit) != 0;
    }
    resp_add_array(out, n);
    for (unsigned bit = 1; bit <= ROLE_ALL; bit <<= 1) {
        if (c->roles & bit) {
            char one[USERS_ROLES_TEXT];
            resp_add_bulk_str(out, users_roles_text(bit, one, sizeof one));
        }
    }
}

/* Log c in as e. */
static void log_in(conn_t *c, const users_entry_t *e)
{
    char roles[USERS_ROLES_TEXT];
    c->authenticated = 1;
    c->roles = e->roles;
    snprintf(c->user, sizeof c->user, "%s", e->name);
    log_debug("client id=%llu addr=%s logged in as '%s' (%s)", (unsigned long long)c->id, c->addr, e->name,
              users_roles_text(e->roles, roles, sizeof roles));
}

/* The reply of a successful AUTH / HELLO AUTH (after log_in). */
static void auth_ok_reply(resp_buf_t *out, conn_t *c, int hello, const char *setname)
{
    if (hello == 0) {
        resp_add_simple(out, "OK");
        return;
    }
    if (setname != NULL) {
        snprintf(c->name, sizeof c->name, "%s", setname);
    }
    c->proto = hello;
    out->proto = hello;
    hello_reply(out, c);
}

/* Loop thread: the AUTH thread answered. */
static void auth_complete(job_t *j)
{
    auth_call_t *ac = (auth_call_t *)(void *)j;
    conn_t *c = conn_by_id(ac->set, j->conn_id);
    if (c == NULL) {
        return; /* gone: conn_job_done frees the job */
    }
    /* The users file may have been reloaded meanwhile: the user must still be there with the same hash. */
    const users_entry_t *e = ac->user_len > 0 ? users_find(server_users(ac->srv), ac->user, ac->user_len) : NULL;
    int ok = ac->req.ok && e != NULL && !e->disabled && strcmp(e->hash, ac->req.hash) == 0;
    resp_buf_clear(&j->reply);
    j->reply.proto = c->proto;
    if (!ok) {
        /* A name is shown only when it is a user's (the users file allows no control bytes, no blanks): a name
         * that is none may be a password typed in its place ("AUTH password user"), so only its length is. */
        char who[USERS_NAME_MAX + 48];
        if (ac->user_len > 0) {
            snprintf(who, sizeof who, "user '%s'", ac->user);
        } else {
            snprintf(who, sizeof who, "unknown user (%zu bytes)", ac->typed_len);
        }
        log_warn("AUTH failed from %s for %s (%s): reply held back %u ms (%u failures from this address in "
                 "the last minute)",
                 c->addr, who, ac->req.ok ? "user changed meanwhile" : ac->why, ac->req.delay_ms, ac->req.failures);
        if (ac->req.refused) {
            resp_add_errorf(&j->reply,
                            "ERR AUTH refused: the password is longer than %d bytes (not checked; "
                            "counted as a failed AUTH)",
                            PASSWD_MAX);
        } else {
            resp_add_error(&j->reply, WRONGPASS);
        }
        return;
    }
    auth_cache_put(server_auth(ac->srv), e->name, &ac->req);
    log_in(c, e);
    auth_ok_reply(&j->reply, c, ac->hello, ac->has_setname ? ac->setname : NULL);
}

/* Check user/pass: at once when the cache knows the password, else through
 * the AUTH thread (call->job). hello: 0 for AUTH, else HELLO's protocol;
 * setname: HELLO's SETNAME (already checked) or NULL. */
static void start_auth(cmd_call_t *call, const resp_arg_t *user, const resp_arg_t *pass, int hello,
                       const resp_arg_t *setname)
{
    conn_t *c = call->conn;
    auth_worker_t *aw = server_auth(call->srv);
    const users_entry_t *e = users_find(server_users(call->srv), user->ptr, user->len);
    int refused = pass->len > PASSWD_MAX; /* never hashed, not even by the cache's HMAC */
    if (!refused && e != NULL && !e->disabled && auth_cache_hit(aw, e->name, e->hash, pass->ptr, pass->len)) {
        char name[128];
        if (setname != NULL) {
            snprintf(name, sizeof name, "%.*s", (int)setname->len, setname->ptr);
        }
        log_in(c, e);
        auth_ok_reply(call->out, c, hello, setname ? name : NULL);
        return;
    }
    char *arena;
    size_t copied = refused ? 0 : pass->len;
    auth_call_t *ac = cmd_job_new(sizeof *ac, copied + 1, NULL, &arena);
    memcpy(arena, pass->ptr, copied);
    arena[copied] = '\0';
    ac->req.password = arena;
    ac->req.password_len = copied;
    ac->req.refused = refused;
    /* The address without the port, IPv6 by its /64: "1.2.3.4:5" -> "1.2.3.4", "[2001:db8::7]:5" -> "[2001:db8::/64]". */
    authfail_key(c->addr, ac->req.ip, sizeof ac->req.ip);
    ac->typed_len = user->len;
    if (e != NULL) { /* a user's name: its exact bytes (at most USERS_NAME_MAX, of the users file's characters) */
        snprintf(ac->user, sizeof ac->user, "%s", e->name);
        ac->user_len = strlen(ac->user);
    }
    if (e == NULL) {
        ac->why = "no such user";
    } else if (e->disabled) {
        ac->why = "user is disabled";
    } else {
        ac->why = "wrong password";
        snprintf(ac->req.hash, sizeof ac->req.hash, "%s", e->hash);
    }
    if (refused) {
        snprintf(ac->why_text, sizeof ac->why_text, "a password of %zu bytes, longer than %d: not checked", pass->len,
                 PASSWD_MAX);
        ac->why = ac->why_text;
    }
    ac->srv = call->srv;
    ac->set = c->set;
    ac->hello = hello;
    if (setname != NULL) {
        ac->has_setname = 1;
        snprintf(ac->setname, sizeof ac->setname, "%.*s", (int)setname->len, setname->ptr);
    }
    ac->req.job.complete = auth_complete;
    call->job = &ac->req.job;
    call->auth = 1;
}

void cmd_auth(cmd_call_t *call)
{
    if (call->argc > 3) {
        resp_add_error(call->out, "ERR wrong number of arguments for 'auth' command");
        return;
    }
    if (!server_auth_required(call->srv)) {
        resp_add_error(call->out, NO_USERS_AUTH);
        return;
    }
    static const resp_arg_t default_user = { "default", 7 };
    start_auth(call, call->argc == 3 ? &call->argv[1] : &default_user, &call->argv[call->argc - 1], 0, NULL);
}

void cmd_hello(cmd_call_t *call)
{
    conn_t *c = call->conn;
    int proto = c->proto;
    size_t i = 1;
    if (call->argc >= 2) {
        uint64_t v;
        if (cmd_parse_u64(&call->argv[1], &v) != 0) {
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
    const resp_arg_t *setname = NULL, *user = NULL, *pass = NULL;
    for (; i < call->argc; i++) {
        if (cmd_arg_is(&call->argv[i], "auth")) {
            if (i + 2 >= call->argc) {
                resp_add_error(call->out, "ERR syntax error: AUTH needs a user name and a password");
                return;
            }
            user = &call->argv[++i];
            pass = &call->argv[++i];
        } else if (cmd_arg_is(&call->argv[i], "setname")) {
            if (i + 1 >= call->argc) {
                resp_add_error(call->out, "ERR syntax error: SETNAME needs a value");
                return;
            }
            setname = &call->argv[++i];
        } else {
            cmd_unknown_option(call, &call->argv[i], "hello");
            return;
        }
    }
    if (setname && check_client_name(call, setname) != 0) {
        return;
    }
    if (user != NULL) {
        if (!server_auth_required(call->srv)) {
            resp_add_error(call->out, NO_USERS_AUTH);
            return;
        }
        start_auth(call, user, pass, proto, setname);
        return;
    }
    if (!c->authenticated) {
        resp_add_error(call->out, "NOAUTH HELLO must be called with the client already authenticated, otherwise the "
                                  "HELLO <proto> AUTH <user> <pass> option can be used to authenticate the client and "
                                  "select the RESP protocol version at the same time");
        return;
    }
    if (setname && set_client_name(call, setname) != 0) {
        return;
    }
    c->proto = proto;
    call->out->proto = proto;
    hello_reply(call->out, c);
}

void cmd_acl(cmd_call_t *call)
{
    const resp_arg_t *sub = &call->argv[1];
    if (cmd_arg_is(sub, "whoami") && call->argc == 2) {
        resp_add_bulk_str(call->out, user_shown(call->conn));
    } else if (cmd_arg_is(sub, "help")) {
        resp_add_array(call->out, 2);
        resp_add_simple(call->out, "ACL WHOAMI");
        resp_add_simple(call->out, "WHOAMI: the user this connection is logged in as (\"default\" without users)");
    } else {
        char b[40];
        resp_add_errorf(call->out, "ERR unknown subcommand or wrong number of arguments for '%s'. Try ACL HELP.",
                        cmd_shown(sub, b, sizeof b));
    }
}

/* CLIENT KILL ip:port (Redis's old form: +OK, or an error when no such
 * client) and CLIENT KILL <ID id | ADDR ip:port | USER name | SKIPME yes|no>
 * ... (the count closed; SKIPME yes by default). */
static void client_kill(cmd_call_t *call)
{
    conn_t *c = call->conn;
    conn_kill_filter_t f = { 0 };
    char addr[64], user[USERS_NAME_MAX + 1], b[40];
    int old_form = call->argc == 3;
    if (old_form) {
        if (call->argv[2].len >= sizeof addr) {
            resp_add_error(call->out, "ERR No such client");
            return;
        }
        memcpy(addr, call->argv[2].ptr, call->argv[2].len);
        addr[call->argv[2].len] = '\0';
        f.addr = addr;
    } else {
        if (call->argc % 2 != 0) {
            resp_add_error(call->out, "ERR CLIENT KILL takes filter-value pairs: ID id | ADDR ip:port | USER name | "
                                      "SKIPME yes|no");
            return;
        }
        f.skip_self = 1;
        for (size_t i = 2; i + 1 < call->argc; i += 2) {
            const resp_arg_t *k = &call->argv[i], *v = &call->argv[i + 1];
            if (cmd_arg_is(k, "id")) {
                if (cmd_parse_u64(v, &f.id) != 0 || f.id == 0) {
                    resp_add_errorf(call->out, "ERR CLIENT KILL ID '%s' is not a client id (a positive integer)",
                                    cmd_shown(v, b, sizeof b));
                    return;
                }
            } else if (cmd_arg_is(k, "addr") || cmd_arg_is(k, "user")) {
                int is_addr = cmd_arg_is(k, "addr");
                char *dst = is_addr ? addr : user;
                size_t cap = is_addr ? sizeof addr : sizeof user;
                if (v->len == 0 || v->len >= cap) {
                    resp_add_errorf(call->out, "ERR CLIENT KILL %s '%s': no client can have it",
                                    is_addr ? "ADDR" : "USER", cmd_shown(v, b, sizeof b));
                    return;
                }
                memcpy(dst, v->ptr, v->len);
                dst[v->len] = '\0';
                if (is_addr) {
                    f.addr = addr;
                } else {
                    f.user = user;
                }
            } else if (cmd_arg_is(k, "skipme")) {
                if (!cmd_arg_is(v, "yes") && !cmd_arg_is(v, "no")) {
                    resp_add_errorf(call->out, "ERR CLIENT KILL SKIPME '%s': yes or no", cmd_shown(v, b, sizeof b));
                    return;
                }
                f.skip_self = cmd_arg_is(v, "yes");
            } else {
                resp_add_errorf(call->out, "ERR CLIENT KILL filter '%s' is not supported (ID, ADDR, USER, SKIPME)",
                                cmd_shown(k, b, sizeof b));
                return;
            }
        }
    }
    int self_matched;
    size_t n = conn_kill(c->set, &f, c, &self_matched);
    if (self_matched) {
        call->close_after = 1;
    }
    if (!old_form) {
        resp_add_int(call->out, (long long)n);
    } else if (n == 0) {
        resp_add_error(call->out, "ERR No such client");
    } else {
        resp_add_simple(call->out, "OK");
    }
}

/* CLIENT SETINFO LIB-NAME|LIB-VER value, as Redis 7.2: the client library's
 * name or version, shown by CLIENT LIST; printable ASCII without blanks,
 * empty clears it. Libraries send both on connect and ignore an error. */
static void client_setinfo(cmd_call_t *call)
{
    conn_t *c = call->conn;
    const resp_arg_t *attr = &call->argv[2], *v = &call->argv[3];
    char b[40];
    int is_name = cmd_arg_is(attr, "lib-name");
    if (!is_name && !cmd_arg_is(attr, "lib-ver")) {
        resp_add_errorf(call->out, "ERR Unrecognized option '%s' for CLIENT SETINFO (LIB-NAME or LIB-VER)",
                        cmd_shown(attr, b, sizeof b));
        return;
    }
    char *dst = is_name ? c->lib_name : c->lib_ver;
    size_t cap = is_name ? sizeof c->lib_name : sizeof c->lib_ver;
    const char *what = is_name ? "lib-name" : "lib-ver";
    for (size_t i = 0; i < v->len; i++) {
        unsigned char ch = (unsigned char)v->ptr[i];
        if (ch <= ' ' || ch >= 0x7f) {
            resp_add_errorf(call->out, "ERR %s cannot contain spaces, newlines or special characters.", what);
            return;
        }
    }
    if (v->len >= cap) {
        resp_add_errorf(call->out, "ERR %s is %zu bytes, longer than %zu", what, v->len, cap - 1);
        return;
    }
    memcpy(dst, v->ptr, v->len);
    dst[v->len] = '\0';
    resp_add_simple(call->out, "OK");
}

void cmd_client(cmd_call_t *call)
{
    conn_t *c = call->conn;
    const resp_arg_t *sub = &call->argv[1];
    resp_buf_t *out = call->out;
    if (cmd_arg_is(sub, "setname") && call->argc == 3) {
        if (set_client_name(call, &call->argv[2]) == 0) {
            resp_add_simple(out, "OK");
        }
    } else if (cmd_arg_is(sub, "getname") && call->argc == 2) {
        if (c->name[0]) {
            resp_add_bulk_str(out, c->name);
        } else {
            resp_add_null(out);
        }
    } else if (cmd_arg_is(sub, "id") && call->argc == 2) {
        resp_add_int(out, (long long)c->id);
    } else if (cmd_arg_is(sub, "setinfo") && call->argc == 4) {
        client_setinfo(call);
    } else if ((cmd_arg_is(sub, "no-evict") || cmd_arg_is(sub, "no-touch")) && call->argc == 3) {
        resp_add_simple(out, "OK");
    } else if (cmd_arg_is(sub, "kill") && call->argc >= 3) {
        client_kill(call);
    } else if (cmd_arg_is(sub, "list") || cmd_arg_is(sub, "info")) {
        buf_t text = BUF_INIT;
        conn_list(c->set, &text, cmd_arg_is(sub, "info") ? c : NULL);
        resp_add_verbatim(out, "txt", text.data ? text.data : "", text.len);
        buf_free(&text);
    } else if (cmd_arg_is(sub, "help")) {
        resp_add_array(out, 7);
        resp_add_simple(out, "CLIENT SETNAME name | GETNAME | ID | SETINFO LIB-NAME|LIB-VER value | LIST | INFO | KILL "
                             "filter value ...");
        resp_add_simple(out, "SETNAME: name this connection (shown by CLIENT LIST)");
        resp_add_simple(out, "GETNAME: the name, or null");
        resp_add_simple(out, "ID: this connection's id");
        resp_add_simple(out, "SETINFO LIB-NAME|LIB-VER value: the client library, shown by CLIENT LIST");
        resp_add_simple(out, "LIST / INFO: every connection / this one");
        resp_add_simple(out, "KILL ip:port | KILL [ID id] [ADDR ip:port] [USER name] [SKIPME yes|no]: close clients "
                             "(admin); the second form replies how many");
    } else {
        char b[40];
        resp_add_errorf(out, "ERR unknown subcommand or wrong number of arguments for '%s'. Try CLIENT HELP.",
                        cmd_shown(sub, b, sizeof b));
    }
}
