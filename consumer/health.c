/*
 * consumer/health.c — the consumer's health state for /healthz (contract:
 * health.h). Two monotonic times — the last cancel that reached an end,
 * the first failure since then — and the last failure's reason; the
 * broker's side is the library's (hg_consumer_pull_failing_ms).
 */
#include "consumer/health.h"
#include "base/clock.h"

#include <hourglass/hourglass.h>

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
static uint64_t broker_grace_ms = 10000;                   /* health_set_broker_grace */
#define HEALTH_WORKERS 256                                 /* the workers key's maximum */
static atomic_uint_fast64_t step_since_ms[HEALTH_WORKERS]; /* the step's last answer; 0: no step in flight */
static uint64_t stuck_after_ms = 55000;                    /* health_set_stuck_after */

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

void health_set_broker_grace(uint64_t ms)
{
    broker_grace_ms = ms;
}

void health_set_stuck_after(uint64_t ms)
{
    stuck_after_ms = ms;
}

void health_step_begin(int worker)
{
    if (worker >= 0 && worker < HEALTH_WORKERS)
        atomic_store_explicit(&step_since_ms[worker], mono_ms(), memory_order_relaxed);
}

void health_step_end(int worker)
{
    if (worker >= 0 && worker < HEALTH_WORKERS)
        atomic_store_explicit(&step_since_ms[worker], 0, memory_order_relaxed);
}

void health_step_answered(void *worker)
{
    int w = (int)(intptr_t)worker;
    if (w >= 0 && w < HEALTH_WORKERS && atomic_load_explicit(&step_since_ms[w], memory_order_relaxed) != 0)
        atomic_store_explicit(&step_since_ms[w], mono_ms(), memory_order_relaxed);
}

/* One line per worker whose MariaDB round trip has waited past the bound; how many. */
static int render_stuck(buf_t *out)
{
    uint64_t now = mono_ms();
    int stuck = 0;
    for (int w = 0; w < HEALTH_WORKERS; w++) {
        uint64_t since = atomic_load_explicit(&step_since_ms[w], memory_order_relaxed);
        if (since == 0 || now < since || now - since <= stuck_after_ms)
            continue;
        buf_printf(out, "worker %d: stuck in a MariaDB call for %.1f s (bound %.1f s): MariaDB does not answer\n", w,
                   (double)(now - since) / 1000, (double)stuck_after_ms / 1000);
        stuck++;
    }
    return stuck;
}

/* The broker's line, when every PULL has failed for the grace: 1, else 0. */
static int render_broker(buf_t *out, const hg_consumer_t *consumer)
{
    uint64_t failing = consumer != NULL ? hg_consumer_pull_failing_ms(consumer) : 0;
    if (failing == 0 || failing < broker_grace_ms)
        return 0;
    hg_error_t last;
    hg_consumer_last_error(consumer, &last);
    char line[700];
    int n = snprintf(line, sizeof line, "broker: every PULL failing for %llu s: %s\n",
                     (unsigned long long)(failing / 1000), last.message[0] ? last.message : hg_strerror(last.code));
    buf_append(out, line, n > 0 && (size_t)n < sizeof line ? (size_t)n : sizeof line - 1);
    return 1;
}

/* The database's line, while cancels fail because of it: 1, else 0. */
static int render_database(buf_t *out)
{
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

int health_render(buf_t *out, void *arg)
{
    int database = render_database(out);
    int stuck = render_stuck(out);
    int broker = render_broker(out, arg);
    return database || stuck || broker;
}
