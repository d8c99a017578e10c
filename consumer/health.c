/*
 * consumer/health.c — the consumer's health state for /healthz (contract:
 * health.h). Two monotonic times — the last cancel that reached an end,
 * the first failure since then — and the last failure's reason.
 */
#include "consumer/health.h"
#include "base/clock.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

static atomic_uint_fast64_t failing_since_ms; /* 0: healthy */
static atomic_uint_fast64_t failures;         /* since failing_since_ms */
static pthread_mutex_t reason_lock = PTHREAD_MUTEX_INITIALIZER;
static char reason_text[400];

static uint64_t mono_ms(void)
{
    return clock_mono_ms() + 1; /* never 0 */
}

void health_cancel_ok(void)
{
    if (atomic_load_explicit(&failing_since_ms, memory_order_relaxed) != 0) {
        atomic_store(&failing_since_ms, 0);
        atomic_store(&failures, 0);
    }
}

void health_cancel_failed(const char *reason)
{
    pthread_mutex_lock(&reason_lock);
    snprintf(reason_text, sizeof reason_text, "%s", reason);
    pthread_mutex_unlock(&reason_lock);
    uint_fast64_t none = 0;
    atomic_compare_exchange_strong(&failing_since_ms, &none, mono_ms());
    atomic_fetch_add(&failures, 1);
}

int health_render(buf_t *out, void *arg)
{
    (void)arg;
    uint64_t since = atomic_load(&failing_since_ms);
    if (since == 0)
        return 0;
    char reason[sizeof reason_text];
    pthread_mutex_lock(&reason_lock);
    memcpy(reason, reason_text, sizeof reason);
    pthread_mutex_unlock(&reason_lock);
    char line[600];
    int n =
        snprintf(line, sizeof line, "cancels failing for %llu s (%llu attempts): %s\n",
                 (unsigned long long)((mono_ms() - since) / 1000), (unsigned long long)atomic_load(&failures), reason);
    buf_append(out, line, n > 0 && (size_t)n < sizeof line ? (size_t)n : sizeof line - 1);
    return 1;
}
