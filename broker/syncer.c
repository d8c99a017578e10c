/*
 * broker/syncer.c — the fsync thread (see syncer.h).
 *
 * Invariants:
 *  - A job queued with mark m is posted only after a sync that began
 *    after the job was queued, hence after every batch holding ids below m
 *    was written (the storage thread writes before it queues).
 *  - synced_mark only grows while syncs succeed; it is the largest mark of
 *    the jobs a successful sync covered.
 *  - Once a sync failed, nothing is posted as durable until syncer_reset.
 *
 * Threads: the queue is shared under mu; the sync function runs on the
 * syncer thread.
 */
#include "broker/syncer.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/alloc.h"
#include "base/clock.h"

struct syncer {
    pthread_t thread;
    int started;
    syncer_sync_fn sync;
    void *sync_ctx;
    syncer_post_fn post;
    void *ctx;

    pthread_mutex_t mu;
    pthread_cond_t cond;
    job_t *head, *tail;
    size_t n;
    uint64_t queued_mark; /* the largest mark queued */
    int stop;
    int failed;
    int failed_full; /* that failure was for want of space (syncer_failed_full) */
    char failed_msg[512];

    prom_hist_t fsync_seconds; /* under mu: each fdatasync's duration */
    uint64_t last_sync_us;     /* under mu: the last one's */

    _Atomic uint64_t synced_mark;
};

/* Upper bounds (seconds) of the fsync histogram: a healthy SSD syncs in
 * 0.1-2 ms; tens of milliseconds or more are what a producer's SEND waits. */
static const double fsync_bounds[] = { 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01,
                                       0.025,  0.05,    0.1,    0.25,  0.5,    1,     2.5 };

syncer_t *syncer_new(syncer_sync_fn sync, void *sync_ctx, syncer_post_fn post, void *ctx)
{
    syncer_t *sy = xcalloc(1, sizeof *sy);
    sy->sync = sync;
    sy->sync_ctx = sync_ctx;
    sy->post = post;
    sy->ctx = ctx;
    pthread_mutex_init(&sy->mu, NULL);
    pthread_cond_init(&sy->cond, NULL);
    prom_hist_init(&sy->fsync_seconds, fsync_bounds, (int)(sizeof fsync_bounds / sizeof fsync_bounds[0]));
    return sy;
}

static void *syncer_main(void *arg);

int syncer_start(syncer_t *sy, char *err, size_t errlen)
{
    int rc = pthread_create(&sy->thread, NULL, syncer_main, sy);
    if (rc != 0) {
        snprintf(err, errlen, "cannot start the fsync thread: %s", strerror(rc));
        return -1;
    }
    sy->started = 1;
    return 0;
}

void syncer_add(syncer_t *sy, job_t *head, job_t *tail, size_t n, uint64_t mark)
{
    if (head == NULL) {
        return;
    }
    tail->next = NULL;
    pthread_mutex_lock(&sy->mu);
    if (sy->tail) {
        sy->tail->next = head;
    } else {
        sy->head = head;
    }
    sy->tail = tail;
    sy->n += n;
    if (mark > sy->queued_mark) {
        sy->queued_mark = mark;
    }
    pthread_mutex_unlock(&sy->mu);
    pthread_cond_signal(&sy->cond);
}

uint64_t syncer_synced_mark(syncer_t *sy)
{
    return atomic_load(&sy->synced_mark);
}

int syncer_failed(syncer_t *sy, char *why, size_t whylen)
{
    pthread_mutex_lock(&sy->mu);
    int failed = sy->failed;
    if (failed) {
        snprintf(why, whylen, "%s", sy->failed_msg);
    }
    pthread_mutex_unlock(&sy->mu);
    return failed;
}

int syncer_failed_full(syncer_t *sy)
{
    pthread_mutex_lock(&sy->mu);
    int full = sy->failed && sy->failed_full;
    pthread_mutex_unlock(&sy->mu);
    return full;
}

void syncer_reset(syncer_t *sy)
{
    pthread_mutex_lock(&sy->mu);
    sy->failed = 0;
    sy->failed_full = 0;
    pthread_mutex_unlock(&sy->mu);
}

void syncer_fsync_stats(syncer_t *sy, prom_hist_t *hist, uint64_t *last_us)
{
    if (sy == NULL) { /* fsync no: no syncs, the same buckets */
        prom_hist_init(hist, fsync_bounds, (int)(sizeof fsync_bounds / sizeof fsync_bounds[0]));
        *last_us = 0;
        return;
    }
    pthread_mutex_lock(&sy->mu);
    *hist = sy->fsync_seconds;
    *last_us = sy->last_sync_us;
    pthread_mutex_unlock(&sy->mu);
}

static void fail_all(job_t *j, const char *msg)
{
    for (; j; j = j->next) {
        resp_buf_clear(&j->reply);
        resp_add_errorf(&j->reply, "ERR storage failure: %s", msg);
        j->failed = 1;
    }
}

static void *syncer_main(void *arg)
{
    syncer_t *sy = arg;
    for (;;) {
        pthread_mutex_lock(&sy->mu);
        while (sy->head == NULL && !sy->stop) {
            pthread_cond_wait(&sy->cond, &sy->mu);
        }
        job_t *head = sy->head, *tail = sy->tail;
        size_t n = sy->n;
        uint64_t mark = sy->queued_mark;
        int failed = sy->failed;
        char msg[512];
        snprintf(msg, sizeof msg, "%s", sy->failed_msg);
        sy->head = sy->tail = NULL;
        sy->n = 0;
        int stop = sy->stop;
        pthread_mutex_unlock(&sy->mu);
        if (head == NULL && stop) {
            break;
        }
        if (!failed) {
            uint64_t t0 = clock_mono_us();
            char err[512];
            int full = 0;
            if (sy->sync(sy->sync_ctx, &full, err, sizeof err) != 0) {
                pthread_mutex_lock(&sy->mu);
                sy->failed = 1;
                sy->failed_full = full;
                snprintf(sy->failed_msg, sizeof sy->failed_msg, "%s", err);
                pthread_mutex_unlock(&sy->mu);
                failed = 1;
                snprintf(msg, sizeof msg, "%s", err);
            } else {
                uint64_t took = clock_mono_us() - t0;
                pthread_mutex_lock(&sy->mu);
                sy->last_sync_us = took;
                prom_hist_add(&sy->fsync_seconds, (double)took / 1e6);
                pthread_mutex_unlock(&sy->mu);
                if (mark > atomic_load(&sy->synced_mark)) {
                    atomic_store(&sy->synced_mark, mark);
                }
            }
        }
        if (failed) {
            fail_all(head, msg);
        }
        sy->post(sy->ctx, head, tail, n);
    }
    return NULL;
}

void syncer_stop(syncer_t *sy)
{
    if (sy == NULL) {
        return;
    }
    if (sy->started) {
        pthread_mutex_lock(&sy->mu);
        sy->stop = 1;
        pthread_mutex_unlock(&sy->mu);
        pthread_cond_signal(&sy->cond);
        pthread_join(sy->thread, NULL);
    }
    pthread_mutex_destroy(&sy->mu);
    pthread_cond_destroy(&sy->cond);
    free(sy);
}
