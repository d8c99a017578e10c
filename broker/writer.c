/*
 * broker/writer.c — the writer's loop side (see writer.h): creating,
 * starting, stopping and freeing it, the submit queue the loop feeds, and
 * the done queue's event that hands finished jobs back to the loop
 * (done_cb). The storage thread itself is writer_thread.c and the files
 * writer_internal.h lists; struct writer is shared through
 * writer_internal.h.
 *
 * Invariants:
 *  - The loop touches only the submit queue (under mu), the done queue and
 *    what is published under done_mu, and the atomics; everything else in
 *    struct writer belongs to the storage thread once writer_start ran
 *    (writer_set_wake_budget and writer_set_disk_reserve come before it).
 *  - A job submitted is owned by the writer until done_cb hands it to
 *    on_done; on_stopped is called once, after the last job.
 * Thread: the event loop, but post_synced (the syncer thread's post).
 */
#include "broker/writer.h"
#include "broker/writer_internal.h"
#include "base/alloc.h"
#include "base/err.h"
#include "base/map.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "broker/backup.h"
#include "broker/diskguard.h"
#include "broker/parked.h"
#include "broker/syncer.h"
#include "common/log.h"
#include "base/clock.h"

#define STALL_MS 10000 /* /healthz: queued work and no progress this long */

void job_free(job_t *j)
{
    if (j == NULL) {
        return;
    }
    resp_buf_free(&j->reply);
    free(j->audit);
    free(j);
}

/* ---- public, loop side ----------------------------------------------------- */

static void done_cb(evutil_socket_t fd, short what, void *arg);

writer_t *writer_new(store_t *store, const store_options_t *opts, struct event_base *base, writer_done_fn done,
                     writer_stopped_fn stopped, void *ctx)
{
    writer_t *w = xmalloc(sizeof *w);
    memset(w, 0, sizeof *w);
    pthread_mutex_init(&w->mu, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&w->cond, &ca);
    pthread_condattr_destroy(&ca);
    pthread_mutex_init(&w->done_mu, NULL);
    pthread_mutex_init(&w->store_mu, NULL);
    w->done_ev = event_new(base, -1, 0, done_cb, w);
    if (w->done_ev == NULL) {
        log_error("cannot create the storage completion event (out of memory)");
        abort();
    }
    w->on_done = done;
    w->on_stopped = stopped;
    w->ctx = ctx;
    w->store = store;
    writer_watch_checkpoints(w);
    w->synced_store = store;
    w->opts = opts;
    w->sched = sched_new(store, NULL, NULL);
    w->backup = backup_new();
    storage_stats_init(&w->stats, sched_now(w->sched));
    w->stats.backup = w->backup;
    w->maintain_needed = 1;
    w->collect_budget = COLLECT_BUDGET_MIN;
    parked_init(&w->parked);
    fairq_init(&w->fair);
    map_init(&w->deferred_topics);
    atomic_store(&w->heartbeat_mono, clock_mono_ms());
    return w;
}

/* The syncer's post: jobs whose fsync returned go to the loop (syncer thread). */
static void post_synced(void *ctx, job_t *head, job_t *tail, size_t n)
{
    writer_t *w = ctx;
    (void)n;
    pthread_mutex_lock(&w->done_mu);
    if (w->done_tail) {
        w->done_tail->next = head;
    } else {
        w->done_head = head;
    }
    w->done_tail = tail;
    pthread_mutex_unlock(&w->done_mu);
    event_active(w->done_ev, EV_READ, 0);
}

void writer_set_synced_store(writer_t *w, store_t *store, int log_synced)
{
    pthread_mutex_lock(&w->store_mu);
    w->synced_store = store;
    w->closed_synced = store == NULL && log_synced;
    pthread_mutex_unlock(&w->store_mu);
}

/* The syncer's sync function (syncer thread): the commit log of the store
 * open now. The lock keeps the storage thread from closing it meanwhile. */
static int sync_store_log(void *ctx, int *full, char *err, size_t errlen)
{
    writer_t *w = ctx;
    pthread_mutex_lock(&w->store_mu);
    int rc = 0;
    if (w->synced_store != NULL) {
        rc = store_log_sync(w->synced_store, err, errlen);
        *full = rc != 0 && store_failure_errno_full(errno); /* the fdatasync's errno (store_log_sync's contract) */
    } else if (!w->closed_synced) { /* closed_synced: the storage thread synced it before it closed it */
        rc = err_set(err, errlen, "the store is closed (being reopened)");
    }
    pthread_mutex_unlock(&w->store_mu);
    return rc;
}

int writer_start(writer_t *w, char *err, size_t errlen)
{
    if (w->opts->sync) {
        w->syncer = syncer_new(sync_store_log, w, post_synced, w);
        if (syncer_start(w->syncer, err, errlen) != 0) {
            syncer_stop(w->syncer);
            w->syncer = NULL;
            return -1;
        }
        w->stats.syncer = w->syncer;
    }
    int rc = pthread_create(&w->thread, NULL, writer_main, w);
    if (rc != 0) {
        snprintf(err, errlen, "cannot start the storage thread: %s", strerror(rc));
        return -1;
    }
    w->started = 1;
    return 0;
}

void writer_set_wake_budget(writer_t *w, uint64_t budget, uint64_t one_message)
{
    w->wake_budget = budget;
    w->wake_one_message = one_message;
}

void writer_note_client_memory(writer_t *w, uint64_t held, uint64_t woken_delivered)
{
    pthread_mutex_lock(&w->done_mu);
    w->sweep_held = held;
    w->sweep_woken_delivered = woken_delivered;
    pthread_mutex_unlock(&w->done_mu);
}


void writer_set_disk_reserve(writer_t *w, uint64_t bytes)
{
    char err[512];
    w->disk_reserve = bytes;
    uint64_t free_bytes = diskguard_free_bytes(w->opts->path);
    w->stats.disk_free_bytes = free_bytes;
    if (bytes == 0) {
        diskguard_ballast_create(w->opts->path, 0, NULL, 0);
        return;
    }
    if (free_bytes != UINT64_MAX && free_bytes < writer_disk_resume_bytes(w)) {
        w->disk_full = 1;
        w->stats.disk_full = 1;
        w->stats.disk_full_events++;
        log_error("disk full: %llu bytes free on %s, less than writes resume at (%llu bytes: twice disk-reserve, at "
                  "least disk-reserve + one commit-log segment); writes are refused until space returns",
                  (unsigned long long)free_bytes, w->opts->path, (unsigned long long)writer_disk_resume_bytes(w));
        return;
    }
    if (diskguard_ballast_create(w->opts->path, bytes, err, sizeof err) != 0) {
        log_warn("%s; running without a disk reserve", err);
    }
}

void writer_submit(writer_t *w, job_t *j)
{
    j->next = NULL;
    pthread_mutex_lock(&w->mu);
    if (w->q_tail) {
        w->q_tail->next = j;
    } else {
        w->q_head = j;
    }
    w->q_tail = j;
    int was_empty = w->q_len++ == 0;
    atomic_fetch_add(&w->nqueued, 1);
    pthread_mutex_unlock(&w->mu);
    if (was_empty) {
        pthread_cond_signal(&w->cond);
    }
}

/* The store's checkpoint thread, a checkpoint finished: wake the storage
 * thread to settle it (store_log_checkpoint_step). */
static void checkpoint_finished(void *arg)
{
    writer_t *w = arg;
    pthread_mutex_lock(&w->mu);
    w->checkpoint_finished = 1;
    pthread_mutex_unlock(&w->mu);
    pthread_cond_signal(&w->cond);
}

void writer_watch_checkpoints(writer_t *w)
{
    store_log_on_checkpoint_finished(w->store, checkpoint_finished, w);
}

void writer_cancel(writer_t *w, uint64_t conn_id)
{
    job_t *j = xmalloc(sizeof *j);
    memset(j, 0, sizeof *j);
    resp_buf_init(&j->reply);
    j->kind = JOB_CANCEL_KIND;
    j->conn_id = conn_id;
    writer_submit(w, j);
}

void writer_stop(writer_t *w)
{
    pthread_mutex_lock(&w->mu);
    w->stop_requested = 1;
    pthread_mutex_unlock(&w->mu);
    pthread_cond_signal(&w->cond);
}

void writer_free(writer_t *w)
{
    if (w == NULL) {
        return;
    }
    if (w->started) {
        pthread_join(w->thread, NULL);
    }
    w->stats.syncer = NULL;
    syncer_stop(w->syncer); /* when the thread never ran: nothing queued */
    w->syncer = NULL;
    job_t *j = w->done_head;
    while (j) {
        job_t *n = j->next;
        job_free(j);
        j = n;
    }
    j = w->q_head;
    while (j) {
        job_t *n = j->next;
        job_free(j);
        j = n;
    }
    if (w->sched) {
        sched_free(w->sched);
    }
    backup_free(w->backup); /* its snapshot belongs to the store */
    if (w->store) {
        store_close(w->store, NULL, 0);
    }
    parked_free(&w->parked); /* empty once the thread ran: stopping expires every parked job */
    fairq_free(&w->fair);    /* empty too: stopping runs every queued job */
    map_free(&w->deferred_topics, NULL);
    event_free(w->done_ev);
    pthread_mutex_destroy(&w->mu);
    pthread_cond_destroy(&w->cond);
    pthread_mutex_destroy(&w->done_mu);
    pthread_mutex_destroy(&w->store_mu);
    free(w);
}

int writer_healthy(writer_t *w, char *why, size_t whylen)
{
    if (atomic_load(&w->broken)) {
        pthread_mutex_lock(&w->done_mu);
        snprintf(why, whylen, "storage broken: %s", w->broken_msg);
        pthread_mutex_unlock(&w->done_mu);
        return 0;
    }
    size_t queued = atomic_load(&w->nqueued);
    uint64_t hb = atomic_load(&w->heartbeat_mono), now = clock_mono_ms();
    if (queued > 0 && now > hb + STALL_MS) {
        snprintf(why, whylen, "storage thread made no progress for %llu ms with %zu jobs queued",
                 (unsigned long long)(now - hb), queued);
        return 0;
    }
    snprintf(why, whylen, "ok");
    return 1;
}

size_t writer_queued(writer_t *w)
{
    return atomic_load(&w->nqueued);
}

size_t writer_parked(writer_t *w)
{
    return atomic_load(&w->nparked);
}

static void done_cb(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    writer_t *w = arg;
    pthread_mutex_lock(&w->done_mu);
    job_t *j = w->done_head;
    w->done_head = w->done_tail = NULL;
    int stopped = w->stopped;
    pthread_mutex_unlock(&w->done_mu);
    while (j) {
        job_t *n = j->next;
        j->next = NULL;
        w->on_done(j, w->ctx);
        j = n;
    }
    if (stopped == 1) {
        pthread_mutex_lock(&w->done_mu);
        w->stopped = 2; /* report once */
        pthread_mutex_unlock(&w->done_mu);
        w->on_stopped(w->ctx);
    }
}
