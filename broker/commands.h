/*
 * broker/commands.h — the command table and the command functions.
 *
 * One table {name, arity, flags, roles, proc, summary, syntax}: arity errors,
 * unknown commands, COMMAND / COMMAND HELP output and (with the users issue)
 * role checks all come from it.
 *
 * A command's proc runs on the loop thread with the already parsed
 * argc/argv (never re-parsed). It validates its arguments against the
 * configuration and then either
 *   - writes its reply into call->out (loop commands: PING, ECHO, HELLO,
 *     QUIT, COMMAND, CLIENT, ... and every argument error), or
 *   - sets call->job: a storage job holding a copy of the arguments; its
 *     exec half (same file, "_exec") runs on the storage thread and writes
 *     the reply there (SEND, PULL, ACK, ...).
 * Storage replies are formatted with the connection's protocol as of the
 * request (HELLO 3 earlier in a pipeline applies to later requests).
 */
#ifndef HG_BROKER_COMMANDS_H
#define HG_BROKER_COMMANDS_H

#include <stddef.h>

#include "broker/server.h"
#include "broker/writer.h"
#include "proto/resp.h"

/* Command flags (legend):
 *   CMD_STORAGE  needs the store: becomes a storage job
 *   CMD_WRITE    may change the store (for a future read-only mode)
 *   CMD_BLOCKING may park (PULL BLOCK): the connection waits for it
 *   CMD_NOAUTH   allowed before authentication (AUTH, HELLO, PING, QUIT)
 *   CMD_ADMIN    operator command (SHUTDOWN, GROUP DEL, DLQ DROP, CONFIG)
 *   CMD_LOOP     answered on the loop thread
 *   CMD_DURABLE  its reply is a promise (SEND's id, an admin change): the batch
 *                holding it is fsynced before the reply (fsync always). Other
 *                writes (leases, ACK, NACK, TOUCH, due moves) are written without
 *                fsync: losing them in a power cut only repeats a delivery, which
 *                at-least-once allows, and the next fsync covers them anyway. */
#define CMD_STORAGE  0x01
#define CMD_WRITE    0x02
#define CMD_BLOCKING 0x04
#define CMD_NOAUTH   0x08
#define CMD_ADMIN    0x10
#define CMD_LOOP     0x20
#define CMD_DURABLE  0x40

typedef struct cmd_call {
    conn_t *conn;
    server_t *srv;
    size_t argc;
    const resp_arg_t *argv;
    resp_buf_t *out;        /* the immediate reply (proto = the connection's) */
    job_t *job;             /* set: a storage job to queue (out is then unused) */
    int close_after;        /* close the connection after this reply (QUIT) */
    int no_reply;           /* nothing to send (SHUTDOWN) */
} cmd_call_t;

typedef void cmd_proc_t(cmd_call_t *call);

typedef struct cmd_def {
    const char *name;       /* lower case */
    int arity;              /* argc including the name; -N: at least N */
    int flags;              /* CMD_* */
    unsigned roles;         /* ROLE_* bits allowed to run it */
    cmd_proc_t *proc;
    const char *syntax;     /* arguments, for help */
    const char *summary;
} cmd_def_t;

/* Find the command, check arity and permissions, run its proc. Every
 * failure is written into call->out as one error line. */
void cmd_dispatch(cmd_call_t *call);

/* The table (for COMMAND) and its size. */
const cmd_def_t *cmd_table(size_t *count);

#endif
