/*
 * consumer/metrics.h — hourglass-consumer's counters and /metrics text: the
 * cancel outcomes and the handler latency histogram (bumped by the workers,
 * relaxed atomics: any thread), and the library consumer's statistics,
 * added up over the library consumers a process made (one more after each
 * broker password rotation). Rendered by the metrics thread.
 */
#ifndef HG_CONSUMER_METRICS_H
#define HG_CONSUMER_METRICS_H

#include <hourglass/hourglass.h>
#include <hourglass/order.h>

#include <stdatomic.h>
#include <stdint.h>

#include "base/buf.h"

#define CONSUMER_LATENCY_BOUNDS  0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10
#define CONSUMER_LATENCY_BUCKETS 14 /* the bounds above */

struct consumer_counters {
    atomic_uint_fast64_t cancelled, not_pending, not_found, transient, permanent, bad_payload, db_unavailable;
    atomic_uint_fast64_t commit_unknown;               /* cancel transactions whose COMMIT's outcome was unknown */
    atomic_uint_fast64_t locked, transactions, splits; /* batch cancels */
    atomic_uint_fast64_t latency_bucket[CONSUMER_LATENCY_BUCKETS + 1]; /* last: +Inf */
    atomic_uint_fast64_t latency_count, latency_sum_us;
};
extern struct consumer_counters consumer_counters;

static inline void metrics_count(atomic_uint_fast64_t *c)
{
    atomic_fetch_add_explicit(c, 1, memory_order_relaxed);
}

static inline uint64_t metrics_load(atomic_uint_fast64_t *c)
{
    return atomic_load_explicit(c, memory_order_relaxed);
}

/* The COMMITs with an unknown outcome on db since hg_order_db_commits_unknown
 * read before (the worker's own handle, before its cancel call), counted. */
void metrics_count_unknown_commits(const hg_order_db *db, uint64_t before);

/* One handler call of us microseconds, into the histogram. */
void metrics_observe_latency(uint64_t us);

/* The counters and the histogram as Prometheus text, appended to b. */
void metrics_render_counters(buf_t *b);

/* The library consumer's statistics (*totals: metrics_stats_add over every
 * library consumer the process made), appended to b. */
void metrics_render_loop(buf_t *b, const hg_consumer_stats_t *totals);

/* *sum += *more, counter by counter. */
void metrics_stats_add(hg_consumer_stats_t *sum, const hg_consumer_stats_t *more);

#endif
