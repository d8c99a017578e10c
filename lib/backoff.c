/*
 * lib/backoff.c — capped exponential backoff with jitter.
 *
 * delay(k) = raw * (1 - jitter * u), raw = min(cap, base * factor^k), u in
 * [0, 1): the delay lies in (raw * (1 - jitter), raw]. Jitter only ever
 * shortens, so the cap is a true upper bound and jitter 0 is exact. The
 * power is computed in double and clamped before conversion, so any attempt
 * number is safe (no overflow, no inf → integer conversion).
 *
 * The random source is injected (hg_random_fn) so tests are deterministic;
 * the default is a thread-local splitmix64, so no lock and no shared state.
 */
#include "lib/backoff.h"

#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <time.h>

void hg_backoff_default(hg_backoff_t *b)
{
    if (b == NULL)
        return;
    b->base_ms = 100;
    b->factor = 2.0;
    b->cap_ms = 10000;
    b->attempts = 5;
    b->jitter = 0.2;
}

double backoff_unit(uint64_t bits)
{
    return (double)(bits >> 11) * (1.0 / 9007199254740992.0); /* 2^-53 */
}

static uint64_t splitmix64(uint64_t *state)
{
    uint64_t z = (*state += UINT64_C(0x9E3779B97F4A7C15));
    z = (z ^ (z >> 30)) * UINT64_C(0xBF58476D1CE4E5B9);
    z = (z ^ (z >> 27)) * UINT64_C(0x94D049BB133111EB);
    return z ^ (z >> 31);
}

uint64_t backoff_random(void *unused)
{
    static _Thread_local uint64_t state;
    static _Thread_local int seeded;
    static atomic_uint_fast64_t counter;

    (void)unused;
    if (!seeded) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        state = (uint64_t)ts.tv_nsec ^ ((uint64_t)ts.tv_sec << 32) ^ (uint64_t)(uintptr_t)&state ^
                (atomic_fetch_add(&counter, 1) * UINT64_C(0x2545F4914F6CDD1D));
        seeded = 1;
    }
    return splitmix64(&state);
}

uint64_t hg_backoff_delay(const hg_backoff_t *b, unsigned attempt, hg_random_fn rnd, void *rnd_arg)
{
    if (b == NULL)
        return 0;
    double factor = b->factor, jitter = b->jitter, raw, cap = (double)b->cap_ms;
    double base = (double)b->base_ms, u, delay;

    if (!(factor >= 1.0)) /* also catches NaN */
        factor = 1.0;
    if (!(jitter >= 0.0))
        jitter = 0.0;
    if (jitter > 1.0)
        jitter = 1.0;
    if (cap < base)
        cap = base;

    raw = base * pow(factor, (double)attempt);
    if (!(raw <= cap)) /* inf and NaN end at the cap too */
        raw = cap;
    if (jitter == 0.0)
        return (uint64_t)raw;
    u = backoff_unit(rnd != NULL ? rnd(rnd_arg) : backoff_random(NULL));
    delay = raw * (1.0 - jitter * u);
    if (delay < 0.0)
        delay = 0.0;
    return (uint64_t)delay;
}

uint64_t backoff_total_ms(const hg_backoff_t *b, unsigned n)
{
    hg_backoff_t exact = *b;
    uint64_t total = 0;

    exact.jitter = 0.0;
    for (unsigned k = 0; k < n; k++) {
        uint64_t delay = hg_backoff_delay(&exact, k, NULL, NULL);
        if (delay >= (uint64_t)exact.cap_ms) /* every later one is the cap too */
            return total + (uint64_t)(n - k) * delay;
        total += delay;
    }
    return total;
}

int backoff_check(const hg_backoff_t *b, const char *what, char *err, size_t errlen)
{
    if (!(b->factor >= 1.0 && b->factor <= 1000.0)) {
        snprintf(err, errlen, "%s: factor %g out of range 1.0..1000", what, b->factor);
        return -1;
    }
    if (!(b->jitter >= 0.0 && b->jitter <= 1.0)) {
        snprintf(err, errlen, "%s: jitter %g out of range 0..1", what, b->jitter);
        return -1;
    }
    if (b->cap_ms < b->base_ms) {
        snprintf(err, errlen, "%s: cap %ums is below base %ums", what, (unsigned)b->cap_ms, (unsigned)b->base_ms);
        return -1;
    }
    if (b->attempts < 0 || b->attempts > 1000000) {
        snprintf(err, errlen, "%s: attempts %d out of range 0..1000000", what, b->attempts);
        return -1;
    }
    return 0;
}
