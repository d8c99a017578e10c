/*
 * base/clock.h — the two clocks the programs read, one call each.
 *
 *   wall (CLOCK_REALTIME): due times, timestamps, ages shown to people —
 *       what must mean the same after a restart or on another host;
 *   mono (CLOCK_MONOTONIC): timeouts, deadlines, durations, pacing — what
 *       must never go back when the wall clock is set.
 *
 * Header only: every module (the library, the daemons, the engine) reads
 * them without linking anything. A deadline for pthread_cond_timedwait
 * needs a struct timespec and reads clock_gettime itself.
 */
#ifndef HG_BASE_CLOCK_H
#define HG_BASE_CLOCK_H

#include <stdint.h>
#include <time.h>

static inline uint64_t clock_read_(clockid_t id, uint64_t per_second)
{
    struct timespec ts;
    clock_gettime(id, &ts);
    return (uint64_t)ts.tv_sec * per_second + (uint64_t)ts.tv_nsec / (1000000000u / per_second);
}

/* Wall-clock time since the epoch, in milliseconds / microseconds. */
static inline uint64_t clock_wall_ms(void)
{
    return clock_read_(CLOCK_REALTIME, 1000u);
}

static inline uint64_t clock_wall_us(void)
{
    return clock_read_(CLOCK_REALTIME, 1000000u);
}

/* Monotonic time (an arbitrary start), in milliseconds / microseconds. */
static inline uint64_t clock_mono_ms(void)
{
    return clock_read_(CLOCK_MONOTONIC, 1000u);
}

static inline uint64_t clock_mono_us(void)
{
    return clock_read_(CLOCK_MONOTONIC, 1000000u);
}

#endif
