/*
 * compensator/stats.c — the process-wide counters (contract: stats.h).
 */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include "compensator/stats.h"
#include "base/clock.h"

#include <stdio.h>
#include <string.h>
#include <time.h>

comp_stats_t comp_stats;

const char *comp_run_outcome_name(comp_run_outcome_t o)
{
    static const char *const names[] = { "ok", "failed", "skipped", "lock-lost" };
    return (unsigned)o < COMP_RUN_OUTCOMES ? names[o] : "unknown";
}

void comp_stats_init(void)
{
    memset(&comp_stats, 0, sizeof comp_stats);
    for (int i = 0; i < COMP_LAYER_COUNT; i++) {
        pthread_mutex_init(&comp_stats.layer[i].error_lock, NULL);
        atomic_store(&comp_stats.layer[i].last_outcome, -1);
    }
    comp_gauge_set(&comp_stats.overdue_pending, -1);
    comp_gauge_set(&comp_stats.overdue_oldest_seconds, -1);
    comp_gauge_set(&comp_stats.outbox_unsent, -1);
    for (int i = 0; i < COMP_MAX_DLQ_GROUPS; i++)
        comp_gauge_set(&comp_stats.dlq_depth[i], -1);
}

void comp_stats_run_end(int layer, comp_run_outcome_t outcome, uint64_t duration_us, const char *error)
{
    comp_layer_stats_t *l = &comp_stats.layer[layer];
    comp_count(&l->runs[outcome], 1);
    atomic_store_explicit(&l->last_duration_us, duration_us, memory_order_relaxed);
    atomic_store_explicit(&l->last_end_ms, clock_wall_ms(), memory_order_relaxed);
    atomic_store_explicit(&l->last_outcome, (int)outcome, memory_order_relaxed);
    if (outcome == COMP_RUN_FAILED)
        comp_count(&l->consecutive_failures, 1);
    else
        atomic_store_explicit(&l->consecutive_failures, 0, memory_order_relaxed);
    pthread_mutex_lock(&l->error_lock);
    snprintf(l->last_error, sizeof l->last_error, "%s", outcome == COMP_RUN_FAILED && error != NULL ? error : "");
    pthread_mutex_unlock(&l->error_lock);
}

void comp_stats_last_error(int layer, char *buf, size_t len)
{
    comp_layer_stats_t *l = &comp_stats.layer[layer];
    pthread_mutex_lock(&l->error_lock);
    snprintf(buf, len, "%s", l->last_error);
    pthread_mutex_unlock(&l->error_lock);
}
