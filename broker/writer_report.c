/*
 * broker/writer_report.c — what the storage thread reports of the store's
 * failures it works around without a reopen: a scheduler run that failed
 * (retried SCHED_RETRY_MS later, logged by broker/logrepeat.h's rule),
 * levels whose due move fails at their head, and group queues a PULL
 * found damaged (each finding and each recovery logged once, and counted
 * in the storage stats).
 * Thread: the storage thread only.
 */
#include "broker/writer_internal.h"
#include "common/log.h"
#include "base/units.h"

#define SCHED_RETRY_MS 1000 /* a failed scheduler run is retried this often */

/* A scheduler run failed with err: retry it SCHED_RETRY_MS later (its work
 * is still due, so the loop would run it again at once), and log a cause
 * once, then once a LOG_REPEAT_PERIOD_MS while it repeats. */
void writer_sched_failed(writer_t *w, const char *err, uint64_t now_mono)
{
    w->sched_retry_mono = now_mono + SCHED_RETRY_MS;
    log_repeat_report(&w->sched_log, LOG_LEVEL_ERROR, now_mono, err, LOG_REPEAT_COUNT_ATTEMPTS, "scheduler: %s",
                      "scheduler: still failing (%llu attempts, one a second): %s");
}

/* A scheduler run succeeded: after failures, say so once. */
void writer_sched_succeeded(writer_t *w)
{
    uint64_t failed = log_repeat_ok(&w->sched_log);
    if (failed > 0) {
        log_info("scheduler: due work runs again after %llu failed attempts", (unsigned long long)failed);
    }
    w->sched_retry_mono = 0;
}

/* Levels the due move found damaged (store_move_due skips them and moves the
 * others): each logged once, and once when it moves again. */
void writer_report_level_damage(writer_t *w)
{
    uint64_t events = store_level_damage_events(w->store);
    if (events == w->level_damage_seen && w->levels_damaged_logged == 0) {
        return; /* nothing new, and no logged level to watch for its recovery */
    }
    if (events > w->level_damage_seen) {
        w->stats.level_damage_events += events - w->level_damage_seen;
    }
    w->level_damage_seen = events;
    for (int l = 1; l <= store_levels(w->store)->count; l++) {
        store_level_info_t li;
        if (store_level_info(w->store, l, &li) != 0) {
            continue;
        }
        if (li.damaged && !w->level_damage_logged[l]) {
            char every[32];
            units_format_duration(store_options(w->store)->damage_retry_ms, every, sizeof every);
            log_error("level %d: its due move fails at its head, so its %llu messages wait (tried again every %s; "
                      "the other levels move): %s",
                      l, (unsigned long long)li.depth, every, li.damage);
            w->level_damage_logged[l] = 1;
            w->levels_damaged_logged++;
        } else if (!li.damaged && w->level_damage_logged[l]) {
            log_info("level %d: due messages move again", l);
            w->level_damage_logged[l] = 0;
            w->levels_damaged_logged--;
        }
    }
}

/* Group queues a PULL found damaged at their head (store_lease skips them
 * and serves the group's other queue): each finding logged once, and each
 * recovery (a damaged queue served again) once; when the iteration's PULLs
 * made several, the last with how many others. */
void writer_report_group_damage(writer_t *w)
{
    uint64_t events = store_group_damage_events(w->store);
    if (events != w->group_damage_seen) {
        uint64_t fresh = events > w->group_damage_seen ? events - w->group_damage_seen : events;
        w->stats.group_damage_events += fresh;
        w->group_damage_seen = events;
        if (fresh > 1) {
            log_error("%s (and %llu more group queues found damaged since the last report)",
                      store_group_damage_last(w->store), (unsigned long long)(fresh - 1));
        } else {
            log_error("%s", store_group_damage_last(w->store));
        }
    }
    uint64_t recoveries = store_group_recoveries(w->store);
    if (recoveries != w->group_recoveries_seen) {
        uint64_t fresh = recoveries > w->group_recoveries_seen ? recoveries - w->group_recoveries_seen : recoveries;
        w->group_recoveries_seen = recoveries;
        if (fresh > 1) {
            log_info("%s (and %llu more damaged group queues served again since the last report)",
                     store_group_recovery_last(w->store), (unsigned long long)(fresh - 1));
        } else {
            log_info("%s", store_group_recovery_last(w->store));
        }
    }
}
