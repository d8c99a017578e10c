/*
 * broker/cmd_audit.c — the audit log: every destructive or admin command
 * (GROUP CREATE / DEL, DLQ REQUEUE / DROP, REVOKE, CONFIG SET, CLIENT KILL,
 * SHUTDOWN, BACKUP) is logged at info with who ran it and what it changed:
 *
 *   audit: client id=7 addr=127.0.0.1:50312 user=- REVOKE order-timeout KEY 42: revoked 1 (delayed 1, ready 0), refused 0
 *
 * A call the roles refused (NOPERM) is logged the same way, its reply
 * saying so — who tried to drop the DLQ matters as much as who did; one
 * refused before AUTH (NOAUTH) is not: it names no user.
 *
 * Which calls are audited is the command table's CMD_AUDIT flag (cmd_table.c):
 * cmd_dispatch calls cmd_audit_call for those only, after the command's loop
 * half (or its NOPERM refusal): a command
 * answered on the loop (SHUTDOWN, CONFIG, an argument error) is logged at
 * once with its reply's first line; a storage job carries the "who and what"
 * line (job_t.audit) and is logged when it comes back (cmd_audit_done, from
 * conn_reply.c), with the exec half's own account (job_t.audit_result) or the
 * reply's first line. user is the connection's user as CLIENT LIST shows it
 * (conn_user_shown: "default" without users, "-" before AUTH).
 *
 * A group a PULL creates implicitly (docs/protocol.md) is audited too, by
 * the PULL's exec half when it finds it created the group
 * (cmd_audit_group_created): a PULL with group and topic swapped creates a
 * group bound to the wrong topic, and that must be found in the log as an
 * explicit GROUP CREATE is.
 *
 * Loop thread only, but for cmd_audit_group_created (any thread).
 */
#include "broker/cmd_shared.h"

#include <stdio.h>
#include <string.h>

#include "base/alloc.h"
#include "common/log.h"

/* The table's CMD_AUDIT flag picks the calls; CONFIG is one row for GET and
 * the rest, and GET changes nothing. */
static int audited(const cmd_call_t *call)
{
    return !(cmd_arg_is(&call->argv[0], "config") && call->argc >= 2 && cmd_arg_is(&call->argv[1], "get"));
}

/* "client id=N addr=A user=U CMD arg arg …" (arguments shown printable, cut). */
static void who_line(const cmd_call_t *call, char *out, size_t outlen)
{
    const conn_t *c = call->conn;
    size_t n = (size_t)snprintf(out, outlen, "client id=%llu addr=%s user=%s", (unsigned long long)c->id, c->addr,
                                conn_user_shown(c));
    for (size_t i = 0; i < call->argc && n + 2 < outlen; i++) {
        char shown[80];
        cmd_shown(&call->argv[i], shown, sizeof shown);
        if (i == 0) {
            for (char *p = shown; *p; p++) {
                *p = (char)(*p >= 'a' && *p <= 'z' ? *p - 32 : *p);
            }
        }
        n += (size_t)snprintf(out + n, outlen - n, " %s", shown);
    }
}

/* The first line of a RESP reply, for the log: "OK", "3", "ERR …", "[…]". */
static void reply_line(const resp_buf_t *r, char *out, size_t outlen)
{
    const char *p = r->raw.data;
    size_t len = r->raw.len;
    if (p == NULL || len == 0) {
        snprintf(out, outlen, "no reply");
        return;
    }
    const char *end = memchr(p, '\r', len);
    size_t l = end ? (size_t)(end - p) : len;
    switch (p[0]) {
    case '+':
    case '-':
    case ':':
        snprintf(out, outlen, "%.*s", (int)(l - 1 < 150 ? l - 1 : 150), p + 1);
        break;
    default:
        snprintf(out, outlen, "done (reply type '%c')", p[0]);
        break;
    }
}

void cmd_audit_call(const cmd_call_t *call)
{
    if (call->argc == 0 || !audited(call)) {
        return;
    }
    char who[512];
    who_line(call, who, sizeof who);
    if (call->job != NULL) {
        call->job->audit = xstrdup(who);
        return;
    }
    char what[160];
    reply_line(call->out, what, sizeof what);
    log_info("audit: %s: %s", who, call->no_reply ? "shutting down" : what);
}

void cmd_audit_done(job_t *j)
{
    char what[160];
    if (j->audit_result[0] == '\0') {
        reply_line(&j->reply, what, sizeof what);
    }
    log_info("audit: %s: %s", j->audit, j->audit_result[0] ? j->audit_result : what);
}

void cmd_audit_group_created(uint64_t conn_id, const char *addr, const char *user, const char *command,
                             const resp_arg_t *group, const resp_arg_t *topic)
{
    char g[80], t[80];
    cmd_shown(group, g, sizeof g);
    cmd_shown(topic, t, sizeof t);
    log_info("audit: client id=%llu addr=%s user=%s %s %s %s: created group '%s' bound to topic '%s' (no such group "
             "before)",
             (unsigned long long)conn_id, addr, user, command, g, t, g, t);
}
