/*
 * broker/writer_wake.c — the storage thread's service of its parked jobs
 * (PULL … BLOCK waiting for messages; the indexes are parked.c): parking
 * and unparking them (publishing the count for the loop), the budget of
 * woken replies against the clients' memory (writer_set_wake_budget),
 * waking the jobs of the topics the store marked, expiring those past
 * their deadline, and dropping a closed connection's.
 *
 * Invariants:
 *  - w->nparked is w->parked.count after every park and unpark.
 *  - A budgeted reply (a PULL BLOCK's with a wake budget) is counted in
 *    w->woken_built from when it is built until the loop reports it
 *    delivered (writer_note_client_memory); a job refused room stays
 *    parked and its topic (or parked.any) is asked again after
 *    WAKE_RETRY_MS.
 *  - Nothing is woken while the store is closed or the disk is full; after
 *    a reopen or a disk-full episode (w->wake_all) every parked job is
 *    asked once.
 * Thread: the storage thread only (called from writer_thread.c and
 * writer_serve.c).
 */
#include "broker/writer_internal.h"
#include "base/clock.h"
#include "base/map.h"

#include <pthread.h>
#include <stdatomic.h>

#define WAKE_RETRY_MS 10 /* woken PULLs left parked for want of client memory are tried again this often */

/* Park j, and publish the count for the loop. */
void writer_park(writer_t *w, job_t *j, uint64_t now_mono)
{
    parked_add(&w->parked, j, now_mono);
    atomic_store(&w->nparked, w->parked.count);
}

/* Take j out of the parked set, and publish the count. */
static void unpark(writer_t *w, job_t *j)
{
    parked_remove(&w->parked, j);
    atomic_store(&w->nparked, w->parked.count);
}

/* The budget of PULL BLOCK replies (writer_set_wake_budget): conn_sweep.c leaves
 * a PULL BLOCK's reply estimate out of the client memory it counts (it
 * waits holding nothing), so its reply is budgeted here, before it is
 * built, whether it runs at once or woken. Room for j: 1 with
 * j->reply_cap set (0: no budget, or more room than it could use), or 0
 * when less than one message is left (j waits parked; its topic is noted
 * and asked again after WAKE_RETRY_MS). */
int writer_wake_reserve(writer_t *w, job_t *j)
{
    j->reply_cap = 0;
    if (w->wake_budget == 0 || j->reply_estimate == 0 || !j->block_set) {
        return 1;
    }
    pthread_mutex_lock(&w->done_mu);
    uint64_t held = w->sweep_held, delivered = w->sweep_woken_delivered;
    pthread_mutex_unlock(&w->done_mu);
    uint64_t in_flight = w->woken_built - delivered; /* delivered <= built: counted by the loop after posting */
    uint64_t out = held + in_flight;
    uint64_t room = out < w->wake_budget ? w->wake_budget - out : 0;
    /* Less than one message of room waits while a budgeted reply is on its way to the loop (its memory will be
     * counted, and the sweep may close a holder); with none on its way one reply of a message goes (else a
     * budget below one message, or clients holding it all, would stall every PULL BLOCK). */
    if (room < w->wake_one_message && in_flight > 0) {
        w->stats.wake_deferrals++;
        if (j->wake_topic != NULL) {
            map_put(&w->deferred_topics, j->wake_topic, j->wake_topic_len, w);
        } else {
            w->deferred_any = 1;
        }
        return 0;
    }
    uint64_t cap = room > w->wake_one_message ? room - w->wake_one_message : 1; /* a listing passes its budget
                                                                                  by one message at most */
    if (cap < (uint64_t)j->reply_estimate) {
        j->reply_cap = cap;
    }
    return 1;
}

/* After j ran: a budgeted reply is counted until the loop has it. */
void writer_count_budgeted(writer_t *w, job_t *j)
{
    if (w->wake_budget != 0 && j->block_set && j->reply_estimate > 0) {
        j->woken_bytes = j->reply.raw.len;
        w->woken_built += j->woken_bytes;
    }
}


void writer_cancel_parked(writer_t *w, uint64_t conn_id)
{
    parked_list_t *l = parked_of_conn(&w->parked, conn_id);
    while (l != NULL) {
        job_t *j = l->head;
        int last = j->conn_next == NULL; /* unpark frees l with its last job */
        unpark(w, j);
        job_free(j);
        w->stats.closed_jobs_dropped++;
        if (last) {
            break;
        }
    }
}

/* Ask each job of l whether it may run now; run it and answer it if so,
 * within the budget of woken replies: once that is spent, the rest of l
 * waits (its topic is asked again after WAKE_RETRY_MS). l may be freed when
 * its last job leaves it. */
static void retry_list(writer_t *w, parked_list_t *l, job_list_t *done)
{
    for (job_t *j = l->head, *n; j; j = n) {
        n = j->topic_next;
        if (!j->wake(j, w)) {
            continue;
        }
        if (!writer_wake_reserve(w, j)) {
            return;
        }
        if (j->exec(j, w) == JOB_DONE) {
            writer_count_budgeted(w, j);
            unpark(w, j);
            job_list_push(done, j);
        }
    }
}

typedef struct woken_ctx {
    writer_t *w;
    job_list_t *done;
} woken_ctx_t;

static void retry_topic(void *arg, const char *topic, size_t topic_len)
{
    woken_ctx_t *c = arg;
    parked_list_t *l = parked_of_topic(&c->w->parked, topic, topic_len);
    if (l != NULL) {
        retry_list(c->w, l, c->done);
    }
}

static void ignore_topic(void *arg, const char *topic, size_t topic_len)
{
    (void)arg;
    (void)topic;
    (void)topic_len;
}

/* Parked jobs: expire those past their deadline (every one when expire_all),
 * retry those of the topics the store marked since the last time (every one
 * after a reopen or a disk-full episode) whose wake() says so. */
void writer_service_parked(writer_t *w, job_list_t *done, uint64_t now_mono, int expire_all)
{
    if (expire_all) {
        map_iter_t it = { 0 };
        void *val;
        while (map_next(&w->parked.conns, &it, NULL, NULL, &val)) {
            parked_list_t *l = val;
            while (l != NULL) {
                job_t *j = l->head;
                int last = j->conn_next == NULL;
                unpark(w, j);
                j->expire(j, w);
                job_list_push(done, j);
                if (last) {
                    break;
                }
            }
        }
    }
    for (job_t *j; (j = parked_next_deadline(&w->parked)) != NULL && j->deadline_mono <= now_mono;) {
        unpark(w, j);
        j->expire(j, w);
        job_list_push(done, j);
    }
    if (w->store == NULL || w->disk_full) {
        return;
    }
    map_t deferred = w->deferred_topics; /* their woken jobs waited for client memory: asked again below */
    map_init(&w->deferred_topics);
    if (w->wake_all) {
        w->wake_all = 0;
        store_take_woken(w->store, ignore_topic, NULL);
        map_iter_t it = { 0 };
        void *val;
        while (map_next(&w->parked.topics, &it, NULL, NULL, &val)) {
            retry_list(w, val, done); /* may delete the entry just returned: allowed */
        }
    } else {
        woken_ctx_t woken = { w, done };
        store_take_woken(w->store, retry_topic, &woken);
    }
    map_iter_t it = { 0 };
    const char *topic;
    size_t len;
    woken_ctx_t c = { w, done };
    while (map_next(&deferred, &it, &topic, &len, NULL)) {
        retry_topic(&c, topic, len);
    }
    map_free(&deferred, NULL);
    w->deferred_any = 0;
    retry_list(w, &w->parked.any, done);
}

uint64_t writer_earliest_parked_deadline(writer_t *w)
{
    const job_t *first = parked_next_deadline(&w->parked);
    uint64_t at = first != NULL ? first->deadline_mono : UINT64_MAX;
    if ((map_count(&w->deferred_topics) > 0 || w->deferred_any) && w->store != NULL && !w->disk_full) {
        uint64_t retry = clock_mono_ms() + WAKE_RETRY_MS;
        at = retry < at ? retry : at;
    }
    return at;
}
