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

static _Thread_local int thread_layer = -1; /* comp_stats_busy's layer on this thread */

static uint64_t mono_ms1(void)
{
    return clock_mono_ms() + 1; /* never 0 */
}

void comp_stats_busy(int layer)
{
    comp_layer_stats_t *l = &comp_stats.layer[layer];
    uint64_t now = mono_ms1();
    thread_layer = layer;
    atomic_store_explicit(&l->progress_ms, now, memory_order_relaxed);
    atomic_store_explicit(&l->busy_since_ms, now, memory_order_relaxed);
}

void comp_progress(void)
{
    if (thread_layer >= 0)
        atomic_store_explicit(&comp_stats.layer[thread_layer].progress_ms, mono_ms1(), memory_order_relaxed);
}

void comp_stats_idle(int layer)
{
    atomic_store_explicit(&comp_stats.layer[layer].busy_since_ms, 0, memory_order_relaxed);
}

uint64_t comp_stats_stuck_after_ms(const comp_config_t *cfg, int layer)
{
    uint64_t step = cfg->mysql_lock_wait_timeout_ms != 0 ? cfg->mysql_lock_wait_timeout_ms : 50000;
    uint64_t broker = cfg->broker_connect_timeout_ms + 2 * cfg->broker_timeout_ms;
    if ((layer == COMP_LAYER_INDEX_RELAY || layer == COMP_LAYER_INDEX_MONITOR) && broker > step)
        step = broker;
    if (layer == COMP_LAYER_INDEX_MONITOR && cfg->alert_command != NULL && cfg->alert_command_timeout_ms > step)
        step = cfg->alert_command_timeout_ms;
    if (layer == COMP_LAYER_INDEX_INSPECTION)
        step += cfg->inspect_page_pause_ms;
    return step + 5000;
}

int comp_stats_stuck(const comp_config_t *cfg, int layer, uint64_t now_ms, uint64_t *idle_ms, uint64_t *round_ms)
{
    comp_layer_stats_t *l = &comp_stats.layer[layer];
    uint64_t since = atomic_load_explicit(&l->busy_since_ms, memory_order_relaxed);
    uint64_t progress = atomic_load_explicit(&l->progress_ms, memory_order_relaxed);
    now_ms++; /* the same +1 as the stored times */
    if (since == 0)
        return 0;
    if (progress < since) /* read between the two stores of comp_stats_busy */
        progress = since;
    *idle_ms = now_ms > progress ? now_ms - progress : 0;
    *round_ms = now_ms > since ? now_ms - since : 0;
    return *idle_ms > comp_stats_stuck_after_ms(cfg, layer);
}

void comp_stats_run_end(int layer, comp_run_outcome_t outcome, uint64_t duration_us, const char *error)
{
    comp_layer_stats_t *l = &comp_stats.layer[layer];
    comp_stats_idle(layer);
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
