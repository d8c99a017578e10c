/*
 * broker/commands.h — how the connection hands a parsed command to the
 * command table (broker/cmd_table.c) and gets its reply back.
 *
 * The commands are cut by family: cmd_table.c (the table and dispatch:
 * arity, unknown command, roles, COMMAND), cmd_conn.c (connection commands),
 * cmd_msg.c (SEND PULL ACK NACK TOUCH), cmd_group.c (TOPICS, TOPIC, GROUP, DLQ), cmd_admin.c
 * (INFO CONFIG LEVELS SHUTDOWN); what they share is in cmd_shared.h.
 *
 * A command's loop half runs on the loop thread with the already parsed
 * argc/argv (never re-parsed). It parses its arguments into a typed request
 * of its own and checks them (the store's limits through config_t.store;
 * SEND through store_send_validate), then either
 *   - writes its reply into call->out (PING, ECHO, HELLO, QUIT, COMMAND,
 *     CLIENT, ... and every argument error), or
 *   - sets call->job: a storage job holding its typed request (with copies
 *     of the argument bytes it needs); the exec half runs on the storage
 *     thread, uses only that request, and writes the reply there.
 * Storage replies are formatted with the connection's protocol as of the
 * request (HELLO 3 earlier in a pipeline applies to later requests).
 */
#ifndef HG_BROKER_COMMANDS_H
#define HG_BROKER_COMMANDS_H

#include <stddef.h>

#include "broker/conn.h"
#include "broker/writer.h"
#include "proto/reply.h"
#include "proto/request.h"

typedef struct server server_t;

typedef struct cmd_call {
    conn_t *conn;
    server_t *srv;
    size_t argc;
    const resp_arg_t *argv;
    resp_buf_t *out; /* the immediate reply (proto = the connection's) */
    job_t *job;      /* set: a storage job to queue (out is then unused) */
    int close_after; /* close the connection after this reply (QUIT) */
    int no_reply;    /* nothing to send (SHUTDOWN) */
    int auth;        /* job is an auth_req_t (broker/auth.h): verified off the loop; the
                        connection parses nothing more until it is answered */
} cmd_call_t;

/* Find the command, check arity and the caller's roles, run it. Every
 * failure is written into call->out as one error line. Loop thread. */
void cmd_dispatch(cmd_call_t *call);

/* The roles column of the command named name (lower case; the command's
 * own row, not a subcommand's), or 0 when there is no such command. */
unsigned cmd_roles_of(const char *name);

/* The audit log (broker/cmd_audit.c). cmd_audit_call: after a command the
 * table flags CMD_AUDIT ran (loop thread) — destructive or admin — it is logged at info
 * with the client's id, address and user and its arguments: at once when it
 * was answered on the loop, else when its storage job comes back, through
 * cmd_audit_done (conn_reply.c), with what it changed. */
void cmd_audit_call(const cmd_call_t *call);
void cmd_audit_done(job_t *j);

/* The audit line of a group created implicitly (a PULL naming a group that
 * did not exist), worded as GROUP CREATE's with who ran it:
 *   audit: client id=N addr=A user=U PULL g t: created group 'g' bound to topic 't' (no such group before)
 * addr and user as the connection showed them when the command came. Any
 * thread (the log is thread-safe; it uses only its arguments). */
void cmd_audit_group_created(uint64_t conn_id, const char *addr, const char *user, const char *command,
                             const resp_arg_t *group, const resp_arg_t *topic);

#endif
