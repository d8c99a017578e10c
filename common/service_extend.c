/*
 * common/service_extend.c — the thread that asks systemd for more start time
 * (common/service_extend.h).
 *
 * It waits on a condition variable timed on CLOCK_MONOTONIC (a wall clock
 * step neither hurries nor stalls it), so service_extend_stop wakes it at
 * once; each wake-up past a tick sends one request, of 3 ticks or of what is
 * left up to max_ms, whichever is less. Once max_ms is reached it sends no
 * more and only waits for the stop.
 */
#include "common/service_extend.h"
#include "common/log.h"
#include "common/service_notify.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define EXTEND_TICKS    3 /* each request covers this many ticks: two may be lost */
#define EXTEND_WHAT_MAX 256

struct service_extend {
    pthread_t thread;
    pthread_mutex_t lock;
    pthread_cond_t wake;
    int stopping; /* under lock */
    uint64_t tick_ms, max_ms, start_ms;
    char what[EXTEND_WHAT_MAX];
};

static uint64_t mono_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

/* One request at elapsed_ms into the step; 0 when it was the last (max_ms
 * reached). */
static int ask(const service_extend_t *e, uint64_t elapsed_ms)
{
    uint64_t want_ms = EXTEND_TICKS * e->tick_ms;
    uint64_t left_ms = e->max_ms > elapsed_ms ? e->max_ms - elapsed_ms : 0;
    unsigned long long so_far_s = (unsigned long long)(elapsed_ms / 1000u);
    if (left_ms > want_ms) {
        service_notify_or_warn("EXTEND_TIMEOUT_USEC=%llu\nSTATUS=%s: %llu s so far",
                               (unsigned long long)want_ms * 1000u, e->what, so_far_s);
        return 1;
    }
    service_notify_or_warn("EXTEND_TIMEOUT_USEC=%llu\nSTATUS=%s: %llu s so far; no more start time asked after %llu s "
                           "(TimeoutStartSec= in a drop-in allows more)",
                           (unsigned long long)left_ms * 1000u, e->what, so_far_s,
                           (unsigned long long)(e->max_ms / 1000u));
    return 0;
}

static void *extend_thread(void *arg)
{
    service_extend_t *e = arg;
    uint64_t next_ms = e->start_ms;
    int asking = 1;
    pthread_mutex_lock(&e->lock);
    while (!e->stopping) {
        uint64_t now = mono_ms();
        if (asking && now >= next_ms) {
            pthread_mutex_unlock(&e->lock); /* the send outside the lock: stop never waits on a socket */
            asking = ask(e, now - e->start_ms);
            pthread_mutex_lock(&e->lock);
            next_ms += e->tick_ms;
            continue;
        }
        if (!asking) {
            pthread_cond_wait(&e->wake, &e->lock);
            continue;
        }
        struct timespec until;
        clock_gettime(CLOCK_MONOTONIC, &until);
        uint64_t wait_ms = next_ms - now;
        until.tv_sec += (time_t)(wait_ms / 1000u);
        until.tv_nsec += (long)(wait_ms % 1000u) * 1000000L;
        if (until.tv_nsec >= 1000000000L) {
            until.tv_sec++;
            until.tv_nsec -= 1000000000L;
        }
        pthread_cond_timedwait(&e->wake, &e->lock, &until);
    }
    pthread_mutex_unlock(&e->lock);
    return NULL;
}

service_extend_t *service_extend_start(const char *what, uint64_t tick_ms, uint64_t max_ms)
{
    const char *name = getenv("NOTIFY_SOCKET");
    if (name == NULL || name[0] == '\0' || tick_ms == 0) {
        return NULL;
    }
    service_extend_t *e = calloc(1, sizeof *e);
    if (e == NULL) {
        log_warn("systemd notification: no memory to ask for more start time while %s", what);
        return NULL;
    }
    snprintf(e->what, sizeof e->what, "%s", what);
    e->tick_ms = tick_ms;
    e->max_ms = max_ms;
    e->start_ms = mono_ms();
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&e->wake, &ca);
    pthread_condattr_destroy(&ca);
    pthread_mutex_init(&e->lock, NULL);
    int rc = pthread_create(&e->thread, NULL, extend_thread, e);
    if (rc != 0) {
        log_warn("systemd notification: cannot start the thread that asks for more start time while %s: %s", e->what,
                 strerror(rc));
        pthread_cond_destroy(&e->wake);
        pthread_mutex_destroy(&e->lock);
        free(e);
        return NULL;
    }
    return e;
}

void service_extend_stop(service_extend_t *e)
{
    if (e == NULL) {
        return;
    }
    pthread_mutex_lock(&e->lock);
    e->stopping = 1;
    pthread_cond_signal(&e->wake);
    pthread_mutex_unlock(&e->lock);
    pthread_join(e->thread, NULL);
    pthread_cond_destroy(&e->wake);
    pthread_mutex_destroy(&e->lock);
    free(e);
}
