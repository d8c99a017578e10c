/*
 * compensator/stuck.c — the orders whose cancel fails permanently (contract:
 * stuck.h). A base/map keyed by the 8 bytes of the order id, each value the
 * order's last error (code and a hash of its text) and when it was last
 * logged, under one mutex; the overdue and inspection threads call it once
 * per failed or settled order, and the metrics thread reads the count.
 */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include "compensator/stuck.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "base/map.h"

typedef struct stuck_order {
    unsigned code;         /* the server's error code (0: the library's own) */
    uint32_t text_hash;    /* FNV-1a of the message: "its error changed" */
    uint64_t logged_ms;    /* clock_mono_ms of the last error-level line */
    uint64_t retry_ms;     /* clock_mono_ms before which it is not tried again */
    uint32_t failures;     /* permanent failures in a row */
    hg_order_error_t last; /* its last error, for the rounds that skip it */
} stuck_order_t;

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static map_t orders; /* zeroed: an empty map (map_init is a memset) */
static atomic_size_t count;
static atomic_uint_fast64_t overflows;
static atomic_uint_fast64_t backoff_first_ms;

void comp_stuck_set_backoff(uint64_t first_ms)
{
    atomic_store(&backoff_first_ms, first_ms);
}

/* The pause after the failures-th failure in a row: first, doubled, capped. */
static uint64_t backoff_ms(uint32_t failures)
{
    uint64_t d = atomic_load(&backoff_first_ms);
    for (uint32_t i = 1; i < failures && d < COMP_STUCK_BACKOFF_CAP_MS; i++)
        d *= 2;
    return d < COMP_STUCK_BACKOFF_CAP_MS ? d : COMP_STUCK_BACKOFF_CAP_MS;
}

static uint32_t text_hash(const char *s)
{
    uint32_t h = 2166136261u;
    for (const unsigned char *p = (const unsigned char *)s; *p; p++)
        h = (h ^ *p) * 16777619u;
    return h;
}

int comp_stuck_failed(uint64_t order_id, const hg_order_error_t *err, uint64_t now_ms)
{
    uint32_t hash = text_hash(err->message);
    int log_it = 1;
    pthread_mutex_lock(&lock);
    stuck_order_t *s = map_get(&orders, &order_id, sizeof order_id);
    if (s == NULL) {
        if (map_count(&orders) < COMP_STUCK_MAX) {
            s = xcalloc(1, sizeof *s);
            map_put(&orders, &order_id, sizeof order_id, s);
            atomic_store(&count, map_count(&orders));
        } else {
            atomic_fetch_add(&overflows, 1);
        }
    } else if (s->code == err->code && s->text_hash == hash && now_ms - s->logged_ms < COMP_STUCK_REMIND_MS) {
        log_it = 0;
    }
    if (s != NULL) {
        s->code = err->code;
        s->text_hash = hash;
        if (log_it)
            s->logged_ms = now_ms;
        s->failures++;
        s->retry_ms = now_ms + backoff_ms(s->failures);
        s->last = *err;
    }
    pthread_mutex_unlock(&lock);
    return log_it;
}

int comp_stuck_deferred(uint64_t order_id, uint64_t now_ms, hg_order_error_t *err)
{
    if (atomic_load(&count) == 0)
        return 0;
    int deferred = 0;
    pthread_mutex_lock(&lock);
    const stuck_order_t *s = map_get(&orders, &order_id, sizeof order_id);
    if (s != NULL && now_ms < s->retry_ms) {
        deferred = 1;
        *err = s->last;
        snprintf(err->message, sizeof err->message, "(not tried for %.1f s more) %.440s",
                 (double)(s->retry_ms - now_ms) / 1000.0, s->last.message);
    }
    pthread_mutex_unlock(&lock);
    return deferred;
}

void comp_stuck_settled(uint64_t order_id)
{
    if (atomic_load(&count) == 0)
        return;
    pthread_mutex_lock(&lock);
    free(map_del(&orders, &order_id, sizeof order_id));
    atomic_store(&count, map_count(&orders));
    pthread_mutex_unlock(&lock);
}

size_t comp_stuck_count(void)
{
    return atomic_load(&count);
}

uint64_t comp_stuck_overflows(void)
{
    return atomic_load(&overflows);
}

void comp_stuck_reset(void)
{
    pthread_mutex_lock(&lock);
    map_free(&orders, free);
    map_init(&orders);
    atomic_store(&count, 0);
    pthread_mutex_unlock(&lock);
}
