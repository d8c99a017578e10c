/*
 * levels/clog_finisher.c — the thread that makes one call at a time for its
 * owner (contracts in levels/clog_finisher.h): the commit log's checkpoint
 * finish, so that its syncs run beside the owner's work instead of in it.
 *
 * Why a thread of its own and not the broker's syncer: the syncer's
 * fdatasync of the log is what every SEND's reply waits for, and a
 * checkpoint's syncs (one per CQ and slot file written since the last: 2 000
 * topics written in a second are 2 000 fdatasyncs, 0.4–1 s here) queued
 * ahead of it would hold those replies instead of the storage thread.
 *
 * Under mu: state, rc, err, stop, done. The call and the done hook run
 * without mu.
 */
#include "levels/clog_finisher.h"
#include "base/alloc.h"
#include "base/err.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct clog_finisher {
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cond; /* the owner's start or stop, for the thread; the call's end, for a waiting owner */
    clog_finisher_fn fn;
    void *arg;
    clog_finisher_done_fn done; /* told once a call's outcome waits (clog_finisher_on_done) */
    void *done_arg;
    enum clog_finisher_state state;
    int stop;
    int rc;
    char err[1024];
};

static void *finisher_main(void *arg)
{
    clog_finisher_t *f = arg;
    pthread_mutex_lock(&f->mu);
    for (;;) {
        while (f->state != CLOG_FINISHER_RUNNING && !f->stop) {
            pthread_cond_wait(&f->cond, &f->mu);
        }
        if (f->state != CLOG_FINISHER_RUNNING) {
            break; /* stopped, nothing started */
        }
        pthread_mutex_unlock(&f->mu);
        char err[sizeof f->err];
        err[0] = '\0';
        int rc = f->fn(f->arg, err, sizeof err);
        pthread_mutex_lock(&f->mu);
        f->rc = rc;
        memcpy(f->err, err, sizeof err);
        f->state = CLOG_FINISHER_DONE;
        pthread_cond_broadcast(&f->cond);
        clog_finisher_done_fn done = f->done;
        void *done_arg = f->done_arg;
        if (done != NULL) { /* without mu: the owner's hook may take its lock, which it holds when it asks f */
            pthread_mutex_unlock(&f->mu);
            done(done_arg);
            pthread_mutex_lock(&f->mu);
        }
    }
    pthread_mutex_unlock(&f->mu);
    return NULL;
}

clog_finisher_t *clog_finisher_new(clog_finisher_fn fn, void *arg, char *err, size_t errlen)
{
    clog_finisher_t *f = xcalloc(1, sizeof *f);
    f->fn = fn;
    f->arg = arg;
    f->state = CLOG_FINISHER_IDLE;
    pthread_mutex_init(&f->mu, NULL);
    pthread_cond_init(&f->cond, NULL);
    int rc = pthread_create(&f->thread, NULL, finisher_main, f);
    if (rc != 0) {
        err_set(err, errlen, "cannot start the checkpoint's thread: %s", strerror(rc));
        pthread_cond_destroy(&f->cond);
        pthread_mutex_destroy(&f->mu);
        free(f);
        return NULL;
    }
    return f;
}

void clog_finisher_on_done(clog_finisher_t *f, clog_finisher_done_fn done, void *arg)
{
    pthread_mutex_lock(&f->mu);
    f->done = done;
    f->done_arg = arg;
    pthread_mutex_unlock(&f->mu);
}

int clog_finisher_start(clog_finisher_t *f)
{
    pthread_mutex_lock(&f->mu);
    int idle = f->state == CLOG_FINISHER_IDLE;
    if (idle) {
        f->state = CLOG_FINISHER_RUNNING;
        pthread_cond_broadcast(&f->cond);
    }
    pthread_mutex_unlock(&f->mu);
    return idle ? 0 : -1;
}

enum clog_finisher_state clog_finisher_state(clog_finisher_t *f)
{
    pthread_mutex_lock(&f->mu);
    enum clog_finisher_state st = f->state;
    pthread_mutex_unlock(&f->mu);
    return st;
}

int clog_finisher_take(clog_finisher_t *f, int wait, int *had, char *err, size_t errlen)
{
    pthread_mutex_lock(&f->mu);
    while (wait && f->state == CLOG_FINISHER_RUNNING) {
        pthread_cond_wait(&f->cond, &f->mu);
    }
    int rc = 0;
    *had = f->state == CLOG_FINISHER_DONE;
    if (*had) {
        rc = f->rc;
        if (rc != 0) {
            err_set(err, errlen, "%s", f->err);
        }
        f->state = CLOG_FINISHER_IDLE;
    }
    pthread_mutex_unlock(&f->mu);
    return rc;
}

void clog_finisher_free(clog_finisher_t *f)
{
    if (f == NULL) {
        return;
    }
    pthread_mutex_lock(&f->mu);
    f->stop = 1;
    pthread_cond_broadcast(&f->cond);
    pthread_mutex_unlock(&f->mu);
    pthread_join(f->thread, NULL); /* a running call ends first: the thread looks at stop only between calls */
    pthread_cond_destroy(&f->cond);
    pthread_mutex_destroy(&f->mu);
    free(f);
}
