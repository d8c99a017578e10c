/*
 * broker/cmd_conn.c — the connection commands: PING ECHO QUIT SELECT AUTH
 * HELLO CLIENT.
 *
 * All answered on the loop thread from the connection's own state (conn_t:
 * protocol, name, id); none touches the store. AUTH and HELLO AUTH are the
 * seam of the users issue: today no users exist, so both refuse.
 */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif
#include "broker/cmd_shared.h"

#include <string.h>

#include "base/buf.h"

static void add_bulk_arg(resp_buf_t *b, const resp_arg_t *a)
{
    resp_add_bulk(b, a->ptr, a->len);
}

/* The one client-name rule, for CLIENT SETNAME and HELLO ... SETNAME: printable
 * ASCII without spaces (no control bytes, CR, LF, NUL, DEL or 8-bit bytes),
 * shorter than conn_t.name; empty clears the name. Sets it and returns 0, or
 * writes the error reply and returns -1 with the name unchanged. */
static int set_client_name(cmd_call_t *call, const resp_arg_t *v)
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
        resp_add_error(call->out, "ERR DB index is out of range");
    }
}

void cmd_auth(cmd_call_t *call)
{
    if (call->argc > 3) {
        resp_add_error(call->out, "ERR wrong number of arguments for 'auth' command");
        return;
    }
    resp_add_error(call->out, "ERR AUTH called without any users configured");
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
    const resp_arg_t *setname = NULL;
    for (; i < call->argc; i++) {
        if (cmd_arg_is(&call->argv[i], "auth")) {
            if (i + 2 >= call->argc) {
                resp_add_error(call->out, "ERR syntax error: AUTH needs a user name and a password");
                return;
            }
            resp_add_error(call->out, "ERR AUTH called without any users configured");
            return;
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
    if (setname && set_client_name(call, setname) != 0) {
        return;
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
        resp_add_simple(out, "OK");
    } else if ((cmd_arg_is(sub, "no-evict") || cmd_arg_is(sub, "no-touch")) && call->argc == 3) {
        resp_add_simple(out, "OK");
    } else if (cmd_arg_is(sub, "list") || cmd_arg_is(sub, "info")) {
        buf_t text = BUF_INIT;
        conn_list(c->set, &text, cmd_arg_is(sub, "info") ? c : NULL);
        resp_add_verbatim(out, "txt", text.data ? text.data : "", text.len);
        buf_free(&text);
    } else if (cmd_arg_is(sub, "help")) {
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
                        cmd_shown(sub, b, sizeof b));
    }
}
