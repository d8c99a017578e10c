/*
 * broker/cmd_multi.c — MULTI / EXEC / DISCARD: a batch of SENDs that is
 * stored atomically, so Redis clients' transactional pipelines work (redis-py's
 * default pipeline() sends MULTI, its commands, EXEC).
 *
 * Between MULTI and EXEC a connection queues commands instead of running them:
 * each is parsed and checked by its own loop half at once (an argument error
 * is answered then and dooms the transaction: EXEC answers -EXECABORT, as
 * Redis), and answered +QUEUED. Only SEND may be queued, because only writes
 * that need no other read can share one batch: EXEC becomes ONE storage job
 * that runs the queued SENDs back to back, so they all join the same pending
 * batch — one batch of the commit log, fsynced before the reply (EXEC is
 * CMD_DURABLE): after a crash all of them are there or none. So that no
 * SEND of the run commits the batch to make room in its log segment, EXEC
 * asks for the whole run's room at store_send_run_begin (the sum of
 * store_send_run_bytes over the queued SENDs); a run no segment holds is
 * refused there, naming the sizes, before anything is checked or written.
 *
 * All or none holds for refusals too. What was checked when a SEND was
 * queued can still fail when EXEC runs (a new topic over max-topics, since
 * other clients create topics; an AT that a wall-clock step moved past
 * max-delay; a broken store; a read error of DEDUP's lookup), so EXEC checks
 * every queued SEND first, in order, with store_send_check: the store's own
 * refusal code, run without writing, counting the new topics and keys of the
 * SENDs checked before it. Only when all pass are they stored; otherwise EXEC
 * answers one error naming the first refused SEND (its place, 1-based, its
 * topic and the reason) and nothing of the transaction is written. The
 * storage thread is the store's only user, so nothing changes between the
 * two passes; both use one wall time. A SEND refused in the second pass
 * anyway (a read that failed only the second time) drops the whole pending
 * batch (store_break: this turn's jobs fail as after a failed write) rather
 * than write a part of the transaction. A rollback of the batch instead
 * would have to undo the in-memory state the SENDs changed (ids, level
 * heads, topic counters, the keys sent) without undoing other jobs' writes
 * in the same batch; the check needs no undo. A SEND … DEDUP
 * (or a keyed SEND to a dedup-topics topic) may be queued too: EXEC first
 * commits other pending work (store_send_run_begin), and from there on a
 * DEDUP SEND reads the committed index and the keys sent in the batch
 * without committing it, so the run stays one batch. Any
 * other command inside MULTI is refused with a reason (and aborts the
 * transaction); MULTI, EXEC and DISCARD themselves, and QUIT, keep their
 * meaning (a MULTI inside is refused, and dooms the transaction as any
 * refusal does). EXEC answers an array with each SEND's reply (its id), or
 * the one error above. A
 * transaction holds at most MULTI_MAX SENDs and max-inflight-bytes of their
 * arguments (the loop keeps them until EXEC, outside the connection's other
 * budgets, and EXEC writes them as one batch).
 *
 * Loop thread, except the EXEC job's exec half (storage thread).
 */
#include "broker/cmd_shared.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "levels/msg.h"
#include "levels/store.h"

#define MULTI_MAX 10000 /* queued commands per transaction */

struct cmd_multi {
    job_t **jobs; /* the queued SENDs' storage jobs, not submitted */
    size_t n, cap;
    size_t bytes; /* their arguments' bytes: at most max-inflight-bytes (the loop holds them until EXEC, and EXEC
                     writes them as one WriteBatch, which STORE_BATCH_MAX_BYTES cannot split) */
    int aborted;  /* an error while queueing: EXEC answers EXECABORT */
};

typedef struct exec_job {
    job_t job; /* first member */
    job_t **jobs;
    size_t n;
} exec_job_t;

size_t cmd_multi_bytes(const cmd_multi_t *m)
{
    return m != NULL ? m->bytes : 0;
}

size_t cmd_multi_count(const cmd_multi_t *m)
{
    return m != NULL ? m->n : 0;
}

void cmd_multi_free(cmd_multi_t *m)
{
    if (m == NULL) {
        return;
    }
    for (size_t i = 0; i < m->n; i++) {
        job_free(m->jobs[i]);
    }
    free(m->jobs);
    free(m);
}

void cmd_multi(cmd_call_t *call)
{
    if (call->conn->multi != NULL) { /* a refusal while queueing: it dooms the transaction (as Redis 7) */
        resp_add_error(call->out, "ERR MULTI calls can not be nested");
        call->conn->multi->aborted = 1;
        return;
    }
    call->conn->multi = xcalloc(1, sizeof(cmd_multi_t));
    resp_add_simple(call->out, "OK");
}

void cmd_discard(cmd_call_t *call)
{
    if (call->conn->multi == NULL) {
        resp_add_error(call->out, "ERR DISCARD without MULTI");
        return;
    }
    cmd_multi_free(call->conn->multi);
    call->conn->multi = NULL;
    resp_add_simple(call->out, "OK");
}

void cmd_multi_fail(const cmd_call_t *call)
{
    if (call->conn->multi != NULL) {
        call->conn->multi->aborted = 1;
    }
}

int cmd_multi_queue(cmd_call_t *call, int is_send)
{
    cmd_multi_t *m = call->conn->multi;
    if (!is_send) {
        char b[40];
        resp_add_errorf(call->out, "ERR %s is not allowed inside MULTI: a transaction holds SENDs only",
                        cmd_shown(&call->argv[0], b, sizeof b));
        m->aborted = 1;
        return 0;
    }
    if (m->n == MULTI_MAX) {
        resp_add_errorf(call->out, "ERR a transaction holds at most %d commands", MULTI_MAX);
        m->aborted = 1;
        return 0;
    }
    size_t bytes = 0;
    for (size_t i = 0; i < call->argc; i++) {
        bytes += call->argv[i].len;
    }
    long long limit = cmd_config_of(call)->max_inflight_bytes;
    if (m->bytes + bytes > (size_t)limit) {
        resp_add_errorf(
            call->out, "ERR a transaction holds at most max-inflight-bytes (%lld) of SENDs; this one would make it %zu",
            limit, m->bytes + bytes);
        m->aborted = 1;
        return 0;
    }
    m->bytes += bytes;
    return 1;
}

void cmd_multi_queued(cmd_call_t *call)
{
    cmd_multi_t *m = call->conn->multi;
    if (call->job == NULL) { /* the SEND's own argument error is the reply */
        m->aborted = 1;
        return;
    }
    if (m->n == m->cap) {
        m->cap = m->cap ? m->cap * 2 : 16;
        m->jobs = xrealloc(m->jobs, m->cap * sizeof *m->jobs);
    }
    call->job->proto = call->conn->proto;
    call->job->reply.proto = call->conn->proto;
    m->jobs[m->n++] = call->job;
    call->job = NULL;
    resp_add_simple(call->out, "QUEUED");
}

/* Storage thread: every queued SEND checked (cmd_send_check, writing
 * nothing), then — only when none is refused — every one into the one
 * pending batch, then the array of their replies. Both passes at one wall
 * time, so an AT means the same in each. */
static job_result_t exec_exec(job_t *j, writer_t *w)
{
    exec_job_t *ej = (exec_job_t *)j;
    store_t *s = writer_store(w);
    uint64_t now = writer_now(w);
    char err[768];
    uint64_t run_bytes = 0; /* the whole run's room in the log is asked for at once: one batch, all or none */
    for (size_t i = 0; i < ej->n; i++) {
        run_bytes += store_send_run_bytes(cmd_send_req(ej->jobs[i]));
    }
    if (store_send_run_begin(s, run_bytes, err, sizeof err) != 0) {
        if (store_broken(s)) {
            cmd_reply_store_error(j, err);
        } else {
            resp_add_errorf(&j->reply, "ERR EXEC stored nothing: %s", err);
        }
        return JOB_DONE;
    }
    store_send_check_t *c = store_send_check_new();
    for (size_t i = 0; i < ej->n; i++) {
        if (cmd_send_check(ej->jobs[i], w, c, now, err, sizeof err) != 0) {
            store_send_check_free(c);
            resp_arg_t topic = cmd_send_topic(ej->jobs[i]);
            char b[MSG_MAX_NAME + 4];
            resp_add_errorf(&j->reply, "ERR EXEC stored nothing: SEND %zu (topic '%s'): %s", i + 1,
                            cmd_shown(&topic, b, sizeof b), err);
            return JOB_DONE;
        }
    }
    store_send_check_free(c);
    resp_add_array(&j->reply, ej->n);
    for (size_t i = 0; i < ej->n; i++) {
        job_t *q = ej->jobs[i];
        if (cmd_send_run(q, w, now, err, sizeof err) != 0) {
            /* Checked, yet refused: only a read of DEDUP's lookup failing the
             * second time can do that. The SENDs before it are in the batch:
             * drop the batch (the commit then fails this turn's jobs, as a
             * failed write does, and the store is reopened), never write a
             * part of the transaction. */
            char why[1100];
            resp_arg_t topic = cmd_send_topic(q);
            char b[MSG_MAX_NAME + 4];
            snprintf(why, sizeof why, "EXEC dropped the batch: SEND %zu (topic '%s') failed after its check passed: %s",
                     i + 1, cmd_shown(&topic, b, sizeof b), err);
            store_break(s, why);
            cmd_reply_store_error(j, why);
            return JOB_DONE;
        }
        resp_buf_t *r = &q->reply;
        buf_append(&j->reply.raw, r->raw.data ? r->raw.data : "", r->raw.len);
    }
    return JOB_DONE;
}

static void exec_complete(job_t *j)
{
    exec_job_t *ej = (exec_job_t *)j;
    for (size_t i = 0; i < ej->n; i++) {
        job_free(ej->jobs[i]);
    }
    free(ej->jobs);
    ej->jobs = NULL;
    ej->n = 0;
}

void cmd_exec(cmd_call_t *call)
{
    cmd_multi_t *m = call->conn->multi;
    if (m == NULL) {
        resp_add_error(call->out, "ERR EXEC without MULTI");
        return;
    }
    call->conn->multi = NULL;
    if (m->aborted) {
        resp_add_error(call->out, "EXECABORT Transaction discarded because of previous errors.");
        cmd_multi_free(m);
        return;
    }
    char *arena;
    exec_job_t *ej = cmd_job_new(sizeof *ej, 0, exec_exec, &arena);
    ej->jobs = m->jobs;
    ej->n = m->n;
    ej->job.complete = exec_complete;
    ej->job.carried_bytes = m->bytes; /* held until its batch is written, as the SENDs' own bytes would be */
    m->jobs = NULL;
    m->n = 0;
    cmd_multi_free(m);
    call->job = &ej->job;
}
