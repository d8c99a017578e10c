/*
 * consumer/metrics.c — hourglass-consumer's counters, its handler latency
 * histogram and their /metrics text (contract: metrics.h). The counters are
 * relaxed atomics, bumped by the workers; the metrics thread renders them.
 */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include "consumer/metrics.h"

#include "common/prom.h"

static const double latency_bounds[] = { CONSUMER_LATENCY_BOUNDS };

_Static_assert(sizeof latency_bounds / sizeof latency_bounds[0] == CONSUMER_LATENCY_BUCKETS,
               "CONSUMER_LATENCY_BUCKETS counts CONSUMER_LATENCY_BOUNDS");

struct consumer_counters consumer_counters;

void metrics_observe_latency(uint64_t us)
{
    size_t b = 0;
    while (b < CONSUMER_LATENCY_BUCKETS && (double)us / 1e6 > latency_bounds[b])
        b++;
    metrics_count(&consumer_counters.latency_bucket[b]);
    metrics_count(&consumer_counters.latency_count);
    atomic_fetch_add_explicit(&consumer_counters.latency_sum_us, us, memory_order_relaxed);
}

void metrics_count_unknown_commits(const hg_order_db *db, uint64_t before)
{
    atomic_fetch_add_explicit(&consumer_counters.commit_unknown, hg_order_db_commits_unknown(db) - before,
                              memory_order_relaxed);
}

/* This program's counters and the handler histogram. */
void metrics_render_counters(buf_t *b)
{
    prom_metric_u64(b, "hourglass_consumer_cancelled_total", "counter",
                    "Orders this consumer cancelled. A lower bound: an order whose COMMIT's outcome was unknown (the "
                    "connection lost during it) and landed counts as not pending on the retry "
                    "(hourglass_consumer_commit_unknown_total bounds it from above).",
                    metrics_load(&consumer_counters.cancelled));
    prom_metric_u64(b, "hourglass_consumer_commit_unknown_total", "counter",
                    "Cancel transactions whose COMMIT's outcome was unknown (the connection lost during it), one per "
                    "transaction (a batch's counts once): each may have cancelled its orders, and was retried.",
                    metrics_load(&consumer_counters.commit_unknown));
    prom_metric_u64(b, "hourglass_consumer_not_pending_total", "counter",
                    "Messages for orders already paid or cancelled (nothing changed; also a retry after a COMMIT whose "
                    "outcome was unknown and which landed).",
                    metrics_load(&consumer_counters.not_pending));
    prom_metric_u64(b, "hourglass_consumer_not_found_total", "counter",
                    "Messages for unknown orders (nothing changed).", metrics_load(&consumer_counters.not_found));
    prom_metric_u64(b, "hourglass_consumer_retries_total", "counter",
                    "Transient failures (deadlock, lock wait, lost connection …) handed to the retry schedule.",
                    metrics_load(&consumer_counters.transient));
    prom_metric_u64(b, "hourglass_consumer_permanent_failures_total", "counter",
                    "Permanent failures (bad payload, SQL refused …) NACKed with their reason.",
                    metrics_load(&consumer_counters.permanent));
    prom_metric_u64(b, "hourglass_consumer_bad_payload_total", "counter",
                    "Payloads that are not an order id (part of the permanent failures).",
                    metrics_load(&consumer_counters.bad_payload));
    prom_metric_u64(b, "hourglass_consumer_db_unavailable_total", "counter",
                    "Messages retried because MariaDB could not be reached.",
                    metrics_load(&consumer_counters.db_unavailable));

    prom_metric_u64(b, "hourglass_consumer_locked_skipped_total", "counter",
                    "Orders skipped because another transaction held their row (retried later).",
                    metrics_load(&consumer_counters.locked));
    prom_metric_u64(b, "hourglass_consumer_batch_transactions_total", "counter",
                    "Batch cancel transactions attempted (batch-size > 1), halves of failed batches included.",
                    metrics_load(&consumer_counters.transactions));
    prom_metric_u64(b, "hourglass_consumer_batch_splits_total", "counter",
                    "Failed batch transactions retried as two halves.", metrics_load(&consumer_counters.splits));

    prom_hist_t h; /* a snapshot of the atomic buckets */
    prom_hist_init(&h, latency_bounds, (int)CONSUMER_LATENCY_BUCKETS);
    for (size_t i = 0; i <= CONSUMER_LATENCY_BUCKETS; i++)
        h.buckets[i] = metrics_load(&consumer_counters.latency_bucket[i]);
    h.count = metrics_load(&consumer_counters.latency_count);
    h.sum = (double)metrics_load(&consumer_counters.latency_sum_us) / 1e6;
    prom_hist_write(b, "hourglass_consumer_handler_seconds",
                    "Time to handle one message (parse + its cancel transaction: the batch's, with batch-size > 1).",
                    &h);
}

/* The loop's statistics; arg: the totals (hg_consumer_stats_t) of every
 * library consumer this process ran (one more after each broker password
 * rotation). */
void metrics_render_loop(buf_t *b, const hg_consumer_stats_t *totals)
{
    const hg_consumer_stats_t st = *totals;
    prom_metric_u64(b, "hourglass_consumer_delivered_total", "counter", "Messages received from PULL.", st.delivered);
    prom_metric_u64(b, "hourglass_consumer_acked_total", "counter", "Messages ACKed.", st.done);
    prom_metric_u64(b, "hourglass_consumer_local_retries_total", "counter",
                    "Handler calls repeated after a local backoff.", st.retried);
    prom_metric_u64(b, "hourglass_consumer_nacked_total", "counter", "NACKs after the local retries ran out.",
                    st.nacked);
    prom_metric_u64(b, "hourglass_consumer_failed_total", "counter", "NACKs of permanent failures.", st.failed);
    prom_metric_u64(b, "hourglass_consumer_lease_lost_total", "counter", "ACK/NACK/TOUCH that found the lease expired.",
                    st.lease_lost);
    prom_metric_u64(b, "hourglass_consumer_broker_errors_total", "counter",
                    "Connection and broker errors met by the workers.", st.errors);
}

/* *sum += *more, counter by counter. */
void metrics_stats_add(hg_consumer_stats_t *sum, const hg_consumer_stats_t *more)
{
    sum->delivered += more->delivered;
    sum->done += more->done;
    sum->retried += more->retried;
    sum->nacked += more->nacked;
    sum->failed += more->failed;
    sum->touched += more->touched;
    sum->lease_lost += more->lease_lost;
    sum->errors += more->errors;
    sum->reconnects += more->reconnects;
}
