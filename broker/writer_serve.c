/*
 * broker/writer_serve.c — the storage thread's fair serving of queued jobs
 * (see writer_internal.h): the submitted jobs sorted into one queue per
 * connection (fairq.c), served round-robin, and one job's run with the
 * refusals the writer decides itself (disk full, store unavailable), its
 * parking and its reply queued for the commit.
 *
 * Invariants:
 *  - Fair share: submitted jobs are sorted into one queue per connection,
 *    served round-robin, one job of each connection per turn, in each
 *    connection's own order. Jobs that build no listing (SEND, ACK, PING's
 *    kin) all run in the iteration that finds them; listings (a job with a
 *    reply_estimate: PULL, DLQ LIST, GET, FIND, PEEK) stop for the
 *    iteration once those run in it built FAIR_LISTING_BYTES of replies,
 *    and the rest wait for the next one (which follows at once). So a
 *    SEND waits behind at most about that much listing work, however many
 *    listings other clients queued (it waited behind all of them: 3.1 s at
 *    worst under hourglass-limits-bench's pressure part, 0.5 s now). A
 *    connection's cancel (it closed) also drops its queued read-only jobs
 *    and PULL … BLOCKs not run yet: nobody reads them, and a blocked client
 *    that leaves gets nothing leased.
 *  - A job that steps (JOB_AGAIN) goes back to the head of its
 *    connection's queue and runs once per iteration (writer_thread.c).
 *  - A burst is committed (and answered) once the batch holds
 *    STORE_BATCH_MAX_BYTES, so the batch never holds a whole burst.
 * Thread: the storage thread only (called from writer_main).
 */
#include "broker/writer_internal.h"
#include "broker/fairq.h"
#include "broker/joblist.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>

#define FAIR_LISTING_BYTES STORE_BATCH_MAX_BYTES /* listing replies built per iteration (at least one listing) */

static job_result_t run_exec(writer_t *w, job_t *j, job_list_t *done, uint64_t now_mono)
{
    /* A write on a full disk is told so, also while the store cannot reopen: the commit log's open may
       need to write (clearing a torn tail) where the disk has no room. */
    if (w->disk_full && !j->reads_only) {
        writer_answer_error(j, "disk full: writes are refused until space returns on ", w->opts->path);
        w->stats.disk_full_refusals++;
        job_list_push(done, j);
        return JOB_DONE;
    }
    if (w->store == NULL) {
        char msg[600];
        pthread_mutex_lock(&w->done_mu);
        snprintf(msg, sizeof msg, "store unavailable: %s", w->broken_msg);
        pthread_mutex_unlock(&w->done_mu);
        writer_fail_job(j, msg);
        job_list_push(done, j);
        return JOB_DONE;
    }
    if (!writer_wake_reserve(w, j)) { /* no client memory for a PULL BLOCK's reply yet: it waits parked */
        writer_park(w, j, now_mono);
        return JOB_PARK;
    }
    job_result_t r = j->exec(j, w);
    if (r == JOB_AGAIN) {
        return r; /* not answered yet: its promise is made by the step that finishes it */
    }
    w->batch_durable |= j->durable;
    if (r == JOB_PARK && j->block_set) {
        writer_park(w, j, now_mono);
        return JOB_PARK;
    }
    writer_count_budgeted(w, j);
    job_list_push(done, j);
    return JOB_DONE;
}

/* ---- fair share: one queue per connection, served round-robin ------------------ */

/* A connection closed: drop its parked jobs and its queued droppable ones
 * (fairq_cancel: a client closed for not reading its listings costs no
 * more storage work). Its other queued writes still run: their outcome is
 * durable either way. */
static void cancel_conn(writer_t *w, uint64_t conn_id)
{
    writer_cancel_parked(w, conn_id);
    job_list_t dropped = { 0 };
    fairq_cancel(&w->fair, conn_id, &dropped);
    while (dropped.head != NULL) {
        job_t *j = job_list_pop(&dropped);
        atomic_fetch_sub(&w->nqueued, 1);
        job_free(j);
        w->stats.closed_jobs_dropped++;
    }
}

/* Sort the submitted jobs (in submission order) into their connections' queues. */
void writer_fair_intake(writer_t *w, job_t *batch)
{
    while (batch) {
        job_t *j = batch;
        batch = j->next;
        j->next = NULL;
        if (j->kind == JOB_CANCEL_KIND) {
            cancel_conn(w, j->conn_id);
            atomic_fetch_sub(&w->nqueued, 1);
            job_free(j);
            continue;
        }
        fairq_push(&w->fair, j);
    }
}

/* Run queued jobs round-robin, one per connection per turn, until every
 * queue is empty or holds only listings and this iteration's listings built
 * FAIR_LISTING_BYTES (the file comment). Returns the number run. */
size_t writer_fair_serve(writer_t *w, job_list_t *done, uint64_t now_mono)
{
    size_t njobs = 0, listing_bytes = 0;
    for (int ran = 1; ran && w->fair.ring != NULL;) {
        ran = 0;
        fairq_queue_t *q = w->fair.ring;
        for (size_t k = 0, turns = fairq_conns(&w->fair); k < turns && w->fair.ring != NULL; k++) {
            fairq_queue_t *next = q->ring_next;
            job_t *j = q->jobs.head;
            int stepped = j->again_iteration == w->iteration; /* a step per iteration: see JOB_AGAIN */
            if (!stepped && (!fairq_is_listing(j) || listing_bytes < FAIR_LISTING_BYTES)) {
                fairq_take(&w->fair, q);
                atomic_fetch_sub(&w->nqueued, 1);
                if (run_exec(w, j, done, now_mono) == JOB_AGAIN) {
                    j->again_iteration = w->iteration; /* back at the head of its connection's queue */
                    fairq_put_back(&w->fair, q, j);
                    atomic_fetch_add(&w->nqueued, 1);
                }
                if (fairq_is_listing(j)) {
                    listing_bytes += j->reply.raw.len > 0 ? j->reply.raw.len : 1;
                }
                njobs++;
                ran = 1;
                fairq_advance(&w->fair, q, next); /* the next turn goes to the next connection */
                if (w->store != NULL && store_pending_bytes(w->store) >= STORE_BATCH_MAX_BYTES) {
                    writer_commit_pending(w, done); /* a burst: commit (and answer) what the batch holds so far */
                    writer_post(w, done, 0);
                }
            }
            q = next;
        }
    }
    return njobs;
}
