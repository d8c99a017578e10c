/*
 * compensator/stop.c — stop flag, interruptible sleep and the bounded stop
 * (contract: stop.h).
 *
 * A condition variable on CLOCK_MONOTONIC, so a wall-clock step never
 * stretches or cuts a layer's interval. Waits are sliced to 100 ms so a flag
 * set by a signal handler (which cannot signal the condition) is noticed.
 * The grace and the cut are common/stop_grace.c's thread; `grace` is set by
 * comp_stop_start before any layer or signal handler exists and cleared by
 * comp_stop_finish after they are gone.
 */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include "compensator/stop.h"

#include <pthread.h>
#include <signal.h>
#include <time.h>

#include "common/stop_grace.h"

#define SLICE_MS 100

static volatile sig_atomic_t stop_flag;
static pthread_mutex_t stop_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t stop_cond;
static pthread_once_t cond_once = PTHREAD_ONCE_INIT;
static stop_grace_t *volatile grace; /* NULL: no bounded stop (no comp_stop_start) */

int comp_stop_start(uint64_t grace_ms, char *err, size_t errlen)
{
    const stop_grace_opts_t opts = {
        .grace_ms = grace_ms,
        .finishing = "finishing the layers' work in flight",
        .handles = "MariaDB connections",
        .after_cut = "the broker calls in flight end too; a transaction in flight is rolled back by the server and its "
                     "rows are left for the next start (relay rows 'new' and leased, a cut send's too; orders pending)",
    };
    stop_grace_t *g = stop_grace_start(&opts, err, errlen);
    if (g == NULL)
        return -1;
    grace = g;
    return 0;
}

void comp_stop_finish(void)
{
    stop_grace_t *g = grace;
    grace = NULL;
    stop_grace_finish(g);
}

/* The cut functions (the stop thread, or a layer registering after the cut). */
static void cut_conn(void *c)
{
    db_interrupt(c);
}

static void cut_order_db(void *db)
{
    hg_order_db_interrupt(db);
}

void comp_stop_watch_conn(db_conn_t *c)
{
    stop_grace_t *g = grace;
    if (g != NULL && c != NULL)
        stop_grace_watch(g, cut_conn, c);
}

void comp_stop_watch_order_db(hg_order_db *db)
{
    stop_grace_t *g = grace;
    if (g != NULL && db != NULL)
        stop_grace_watch(g, cut_order_db, db);
}

void comp_stop_unwatch(const void *handle)
{
    stop_grace_t *g = grace;
    if (g != NULL && handle != NULL)
        stop_grace_unwatch(g, handle);
}

int comp_stop_broker_fd(void)
{
    stop_grace_t *g = grace;
    return g != NULL ? stop_grace_cut_fd(g) : -1;
}

int comp_stop_cut(void)
{
    stop_grace_t *g = grace;
    return g != NULL && stop_grace_cut(g);
}

static void cond_init(void)
{
    pthread_condattr_t a;
    pthread_condattr_init(&a);
    pthread_condattr_setclock(&a, CLOCK_MONOTONIC);
    pthread_cond_init(&stop_cond, &a);
    pthread_condattr_destroy(&a);
}

void comp_stop_request(void)
{
    pthread_once(&cond_once, cond_init);
    pthread_mutex_lock(&stop_lock);
    stop_flag = 1;
    pthread_cond_broadcast(&stop_cond);
    pthread_mutex_unlock(&stop_lock);
    stop_grace_t *g = grace;
    if (g != NULL)
        stop_grace_request(g);
}

void comp_stop_request_from_signal(void)
{
    stop_flag = 1;
    stop_grace_t *g = grace;
    if (g != NULL)
        stop_grace_request(g); /* async-signal-safe: one write(2) */
}

int comp_stopping(void)
{
    return stop_flag != 0;
}

int comp_sleep_ms(uint64_t ms)
{
    pthread_once(&cond_once, cond_init);
    struct timespec end;
    clock_gettime(CLOCK_MONOTONIC, &end);
    end.tv_sec += (time_t)(ms / 1000);
    end.tv_nsec += (long)(ms % 1000) * 1000000L;
    if (end.tv_nsec >= 1000000000L) {
        end.tv_sec++;
        end.tv_nsec -= 1000000000L;
    }
    pthread_mutex_lock(&stop_lock);
    while (!stop_flag) {
        struct timespec now, slice;
        clock_gettime(CLOCK_MONOTONIC, &now);
        if (now.tv_sec > end.tv_sec || (now.tv_sec == end.tv_sec && now.tv_nsec >= end.tv_nsec))
            break;
        slice = now;
        slice.tv_nsec += SLICE_MS * 1000000L;
        if (slice.tv_nsec >= 1000000000L) {
            slice.tv_sec++;
            slice.tv_nsec -= 1000000000L;
        }
        if (slice.tv_sec > end.tv_sec || (slice.tv_sec == end.tv_sec && slice.tv_nsec > end.tv_nsec))
            slice = end;
        pthread_cond_timedwait(&stop_cond, &stop_lock, &slice);
    }
    int stopping = stop_flag != 0;
    pthread_mutex_unlock(&stop_lock);
    return stopping;
}

int comp_sleep_keepalive(uint64_t ms, uint64_t every_ms, void (*keepalive)(void *arg), void *arg)
{
    uint64_t left = ms;
    while (keepalive != NULL && every_ms > 0 && left > every_ms) {
        if (comp_sleep_ms(every_ms))
            return 1;
        left -= every_ms;
        keepalive(arg);
    }
    return comp_sleep_ms(left);
}
