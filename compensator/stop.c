/*
 * compensator/stop.c — stop flag and interruptible sleep (contract: stop.h).
 *
 * A condition variable on CLOCK_MONOTONIC, so a wall-clock step never
 * stretches or cuts a layer's interval. Waits are sliced to 100 ms so a flag
 * set by a signal handler (which cannot signal the condition) is noticed.
 */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include "compensator/stop.h"

#include <pthread.h>
#include <signal.h>
#include <time.h>

#define SLICE_MS 100

static volatile sig_atomic_t stop_flag;
static pthread_mutex_t stop_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t stop_cond;
static pthread_once_t cond_once = PTHREAD_ONCE_INIT;

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
}

void comp_stop_request_from_signal(void)
{
    stop_flag = 1;
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
