/*
 * broker/cmd_shared.h — what the command files share (internal to broker/).
 *
 * The per-command functions the table points at, the argument helpers every
 * family uses (strict numbers, names, ids, option values, messages that show
 * an argument), and the storage-job plumbing: a family's job is its own
 * struct {job_t job; <typed request>} allocated together with the argument
 * bytes it copies, so a command costs one allocation.
 *
 * Argument helpers that can fail write the one error reply into call->out and
 * return -1 (or NULL); the command then returns at once. Loop thread only,
 * except the cmd_reply_* and cmd_add_* writers, which the exec halves call on
 * the storage thread.
 */
#ifndef HG_BROKER_CMD_SHARED_H
#define HG_BROKER_CMD_SHARED_H

#include <stddef.h>
#include <stdint.h>

#include "broker/commands.h"
#include "broker/settings.h"
#include "broker/users.h"

/* The roles that read introspection (cmd_table.c's R_READ: INFO's figures, the
 * DLQ listings, GET/FIND); INFO answers the others its server section only. */
#define CMD_ROLES_READ (ROLE_VIEWER | ROLE_CONSUMER | ROLE_ADMIN)

/* ---- the commands (one family per file) -------------------------------- */

typedef void cmd_proc_t(cmd_call_t *call);

cmd_proc_t cmd_ping, cmd_echo, cmd_quit, cmd_select, cmd_auth, cmd_hello, cmd_client, cmd_acl; /* cmd_conn.c */
cmd_proc_t cmd_send, cmd_pull, cmd_ack, cmd_nack, cmd_touch;                                   /* cmd_msg.c */
cmd_proc_t cmd_topics, cmd_topic, cmd_group, cmd_dlq;                                          /* cmd_group.c */
cmd_proc_t cmd_info, cmd_config, cmd_levels, cmd_shutdown, cmd_backup;                         /* cmd_admin.c */
cmd_proc_t cmd_get, cmd_find, cmd_revoke, cmd_peek;                                            /* cmd_lookup.c */

/* MULTI / EXEC / DISCARD (cmd_multi.c). Inside MULTI, cmd_dispatch asks
 * cmd_multi_queue whether the command may be queued (1), else it wrote the
 * refusal and doomed the transaction (0); a queued command's loop half runs
 * and cmd_multi_queued keeps its job (answering +QUEUED) or, when it
 * answered an error, dooms the transaction. cmd_multi_fail dooms it (an
 * unknown command, an arity error). cmd_multi_free: NULL is fine. */
typedef struct cmd_multi cmd_multi_t;
cmd_proc_t cmd_multi, cmd_exec, cmd_discard;
int cmd_multi_queue(cmd_call_t *call, int is_send);
void cmd_multi_queued(cmd_call_t *call);
void cmd_multi_fail(const cmd_call_t *call);
/* The bytes of the SENDs queued in m (0 for NULL): the connection's memory
 * (max-client-memory) counts them while the transaction is open. */
size_t cmd_multi_bytes(const cmd_multi_t *m);
size_t cmd_multi_count(const cmd_multi_t *m); /* the commands queued (CLIENT LIST's multi=) */
void cmd_multi_free(cmd_multi_t *m);

/* EXEC's two passes over a queued SEND job j (cmd_msg.c; storage thread),
 * both at the same wall time now. cmd_send_check: 0 when j would be stored
 * (or found, DEDUP) as the next SEND after those checked into c (see
 * store_send_check), else -1 with why in err — the AT check and the store's
 * refusals, nothing written. cmd_send_run: j's own exec at now, its reply in
 * j->reply; 0, or -1 when it was refused (its reply is "ERR <err>", err too).
 * cmd_send_topic: j's topic (j's copy, valid while j is); cmd_send_req:
 * j's message as parsed (its sizes for store_send_run_bytes; an AT's delay
 * is counted at exec time). */
int cmd_send_check(job_t *j, writer_t *w, store_send_check_t *c, uint64_t now, char *err, size_t errlen);
int cmd_send_run(job_t *j, writer_t *w, uint64_t now, char *err, size_t errlen);
resp_arg_t cmd_send_topic(const job_t *j);
const store_send_req_t *cmd_send_req(const job_t *j);

/* COMMAND DOCS (cmd_docs.c): name's entry — its name, then the map of its
 * summary, since, group and arguments (parsed from syntax) — into out. */
void cmd_docs_add(resp_buf_t *out, const char *name, const char *syntax, const char *summary);
cmd_proc_t cmd_command; /* cmd_table.c */

/* ---- argument helpers ---------------------------------------------------- */

/* 1 when a equals word, ignoring the case of ASCII letters (as strncasecmp in the
 * C locale: any other byte matches only itself). */
int cmd_arg_is(const resp_arg_t *a, const char *word);

/* Strict decimal, no sign, no blanks: 0 and *out, or -1. No reply. */
int cmd_parse_u64(const resp_arg_t *a, uint64_t *out);

/* The duration of option what (DELAY, BLOCK, LEASE) in v — milliseconds as
 * a bare integer, or a duration with a unit (base/units.h) —: 0 and *ms, or
 * -1 with "ERR <what> '<v>' is not a duration: <the grammar's reason>". */
int cmd_parse_duration(cmd_call_t *call, const char *what, const resp_arg_t *v, uint64_t *ms);

/* A printable copy of a for messages, in buf[buflen] (cut with "...",
 * non-printables as '?'). Returns buf. */
const char *cmd_shown(const resp_arg_t *a, char *buf, size_t buflen);

/* The configuration (the store's options are cfg->store). */
const config_t *cmd_config_of(const cmd_call_t *call);

/* A topic or group name (msg_check_name): 0, or -1 with "ERR <why>". */
int cmd_check_name(cmd_call_t *call, const char *what, const resp_arg_t *a);

/* A message id (16 hex digits): 0 and *id, or -1 with the error reply. */
int cmd_parse_id(cmd_call_t *call, const resp_arg_t *a, uint64_t *id);

/* The value of option argv[i], or NULL with "ERR syntax error: X needs a value". */
const resp_arg_t *cmd_opt_value(cmd_call_t *call, const resp_arg_t *argv, size_t argc, size_t i);

/* An option seen for the first time: 0 (and *seen = 1), or -1 with
 * "ERR syntax error: <what> given twice". */
int cmd_once(cmd_call_t *call, int *seen, const char *what);

/* Reply "ERR syntax error: unknown option 'x' for '<cmd>'". */
void cmd_unknown_option(cmd_call_t *call, const resp_arg_t *a, const char *cmd);

/* COUNT 1..max-pull-count: 0 and *count, or -1 with the error reply. */
int cmd_parse_count(cmd_call_t *call, const resp_arg_t *v, int *count);

/* LEASE 1ms..24h: 0 and *ms, or -1 with the error reply. */
int cmd_parse_lease(cmd_call_t *call, const resp_arg_t *v, uint64_t *ms);

/* ---- replies (any thread that owns the buffer) -------------------------- */

/* Replace j's reply with "ERR <err>" (a store call failed), and for a job
 * that steps what its steps did before (writer_steps_suffix). */
void cmd_reply_store_error(job_t *j, const char *err);

/* Replace j's reply with "ERR the broker is shutting down: <what its steps
 * did>, the rest are still there (…)": a job that steps (JOB_AGAIN) and is
 * told to finish (writer_stopping) before its last step. */
void cmd_reply_stopping(job_t *j);

/* A bulk of the 16 hex digits of id. */
void cmd_add_id(resp_buf_t *b, uint64_t id);

/* ---- storage jobs --------------------------------------------------------- */

/* A new storage job: head_size bytes (the family's struct, whose first member
 * is the job_t; zeroed) followed by an arena of `extra` bytes for argument
 * copies (*arena points at it; NULL arena when extra is 0 is fine). Its
 * reply buffer is initialised and exec set. One allocation, freed by
 * job_free. */
void *cmd_job_new(size_t head_size, size_t extra, job_result_t (*exec)(job_t *, writer_t *), char **arena);

/* Bytes cmd_job_copy needs for a (its length plus a NUL). */
static inline size_t cmd_copy_size(const resp_arg_t *a)
{
    return a ? a->len + 1 : 0;
}

/* Copy a (may be NULL: an empty argument) into *arena, NUL-terminated, and
 * advance *arena; returns the copy. */
resp_arg_t cmd_job_copy(char **arena, const resp_arg_t *a);

/* The most bytes a reply of up to count messages can reach under the byte
 * budget (msg_budget_t: max-pull-bytes plus one message), for job_t's
 * reply_estimate: a listing command (PULL, DLQ LIST) sets it so that its
 * connection is charged for the reply before it exists (conn_request.c). */
size_t cmd_listing_estimate(const config_t *cfg, long long count);

#endif
