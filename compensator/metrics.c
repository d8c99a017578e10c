/*
 * compensator/metrics.c — the Prometheus text and /healthz (contract:
 * metrics.h).
 *
 * Rendering reads relaxed atomics (stats.h): each value exact, the page not
 * one snapshot. The text helpers and the HTTP endpoint (its own thread and
 * event base) are common/prom.c's; this file says what the figures are.
 */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include "compensator/metrics.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/clock.h"
#include "common/prom.h"
#include "compensator/alerts.h"
#include "compensator/stats.h"
#include "compensator/stuck.h"

#define PREFIX "hourglass_compensator_"

static int layer_on(const comp_config_t *cfg, int l)
{
    return (cfg->layers & COMP_LAYER_BIT(l)) != 0;
}

static void render(buf_t *b, const comp_config_t *cfg)
{
    char labels[256];

    /* gauges of the monitor layer */
    prom_header(b, PREFIX "overdue_pending_orders", "gauge",
                "Pending orders past expire_at + inspect-grace, at the last monitor run (-1: unknown).");
    prom_sample_i64(b, PREFIX "overdue_pending_orders", "", comp_gauge_get(&comp_stats.overdue_pending));
    prom_header(b, PREFIX "overdue_oldest_seconds", "gauge",
                "How long past expire_at the oldest of them is (-1: unknown).");
    prom_sample_i64(b, PREFIX "overdue_oldest_seconds", "", comp_gauge_get(&comp_stats.overdue_oldest_seconds));
    prom_header(b, PREFIX "outbox_unsent_rows", "gauge",
                "Outbox rows still 'new' (not sent yet), at the last monitor run (-1: unknown).");
    prom_sample_i64(b, PREFIX "outbox_unsent_rows", "", comp_gauge_get(&comp_stats.outbox_unsent));
    prom_header(b, PREFIX "dlq_depth", "gauge",
                "Messages in the DLQ of each watched group, read from the broker (-1: unknown).");
    for (size_t i = 0; i < cfg->group_count; i++) {
        char g[160];
        prom_label_escape(cfg->groups[i], g, sizeof g);
        snprintf(labels, sizeof labels, "{group=\"%s\"}", g);
        prom_sample_i64(b, PREFIX "dlq_depth", labels, comp_gauge_get(&comp_stats.dlq_depth[i]));
    }
    prom_metric_u64(b, PREFIX "dlq_read_errors_total", "counter", "DLQ LEN reads that failed.",
                    comp_load(&comp_stats.dlq_read_errors));

    /* relay */
    prom_metric_u64(b, PREFIX "relayed_total", "counter", "Outbox rows sent to the broker and marked 'sent'.",
                    comp_load(&comp_stats.relay_sent));
    prom_metric_u64(b, PREFIX "relay_superseded_total", "counter",
                    "Outbox rows sent to the broker whose order was paid or cancelled during the send (the row was"
                    " 'done' by then: left so, not in relayed_total).",
                    comp_load(&comp_stats.relay_superseded));
    prom_metric_u64(b, PREFIX "relay_send_failures_total", "counter",
                    "Outbox rows whose send failed (attempts + 1, backoff).",
                    comp_load(&comp_stats.relay_send_failures));
    prom_metric_u64(b, PREFIX "relay_batches_total", "counter", "Relay transactions that locked at least one row.",
                    comp_load(&comp_stats.relay_batches));
    prom_metric_u64(b, PREFIX "relay_lease_overruns_total", "counter",
                    "Relay batches whose sends took longer than their lease (another relay may have sent them too).",
                    comp_load(&comp_stats.relay_lease_overruns));

    /* cancels */
    static const char *const canceller[COMP_CANCELLERS][2] = { { "overdue", "outbox-overdue" },
                                                               { "inspection", "inspection" } };
    static const char *const outcome[COMP_CANCEL_OUTCOMES] = { "cancelled", "not-pending", "not-found",
                                                               "transient", "permanent",   "locked" };
    prom_header(b, PREFIX "cancels_total", "counter",
                "Orders cancelled by the compensator, by layer and cancel reason. A lower bound: an order whose "
                "COMMIT's outcome was unknown (the connection lost during it) and landed counts as not_pending on the "
                "retry (hourglass_compensator_commit_unknown_total bounds it from above).");
    for (int c = 0; c < COMP_CANCELLERS; c++) {
        snprintf(labels, sizeof labels, "{layer=\"%s\",reason=\"%s\"}", canceller[c][0], canceller[c][1]);
        prom_sample_u64(b, PREFIX "cancels_total", labels, comp_load(&comp_stats.cancels[c][COMP_CANCEL_DONE]));
    }
    prom_header(b, PREFIX "commit_unknown_total", "counter",
                "Cancel transactions whose COMMIT's outcome was unknown (the connection lost during it), by layer and "
                "cancel reason, one per transaction (a batch's counts once): each may have cancelled its orders, and "
                "was retried.");
    for (int c = 0; c < COMP_CANCELLERS; c++) {
        snprintf(labels, sizeof labels, "{layer=\"%s\",reason=\"%s\"}", canceller[c][0], canceller[c][1]);
        prom_sample_u64(b, PREFIX "commit_unknown_total", labels, comp_load(&comp_stats.commit_unknown[c]));
    }
    prom_header(b, PREFIX "cancel_attempts_total", "counter",
                "Orders the layers asked to cancel (hg_order_cancel or hg_order_cancel_batch), by layer and outcome.");
    for (int c = 0; c < COMP_CANCELLERS; c++)
        for (int o = 0; o < COMP_CANCEL_OUTCOMES; o++) {
            snprintf(labels, sizeof labels, "{layer=\"%s\",outcome=\"%s\"}", canceller[c][0], outcome[o]);
            prom_sample_u64(b, PREFIX "cancel_attempts_total", labels, comp_load(&comp_stats.cancels[c][o]));
        }
    prom_metric_u64(b, PREFIX "orders_failing_permanently", "gauge",
                    "Orders whose last cancel failed permanently (e.g. a CHECK constraint, MariaDB 4025), each logged "
                    "at error once, again when its error changes or an hour later; tried again after "
                    "permanent-failure-backoff, doubled per failure up to an hour.",
                    comp_stuck_count());
    prom_metric_u64(b, PREFIX "orders_failing_permanently_unremembered_total", "counter",
                    "Permanent cancel failures beyond the 10000 orders remembered: each logged at error every time.",
                    comp_stuck_overflows());
    prom_metric_u64(b, PREFIX "outbox_closed_total", "counter",
                    "Overdue outbox rows of orders no longer pending, marked 'done'.",
                    comp_load(&comp_stats.outbox_closed));

    /* runs per layer */
    prom_header(b, PREFIX "layer_enabled", "gauge", "1 for the layers this instance runs.");
    for (int l = 0; l < COMP_LAYER_COUNT; l++) {
        snprintf(labels, sizeof labels, "{layer=\"%s\"}", comp_layer_name(l));
        prom_sample_u64(b, PREFIX "layer_enabled", labels, (uint64_t)layer_on(cfg, l));
    }
    prom_header(b, PREFIX "runs_total", "counter",
                "Runs of each layer by outcome (ok, failed, skipped: lock held elsewhere, lock-lost).");
    for (int l = 0; l < COMP_LAYER_COUNT; l++)
        for (int o = 0; o < COMP_RUN_OUTCOMES; o++) {
            if (!layer_on(cfg, l) ||
                ((o == COMP_RUN_SKIPPED || o == COMP_RUN_LOCK_LOST) && l != COMP_LAYER_INDEX_INSPECTION))
                continue;
            snprintf(labels, sizeof labels, "{layer=\"%s\",outcome=\"%s\"}", comp_layer_name(l),
                     comp_run_outcome_name((comp_run_outcome_t)o));
            prom_sample_u64(b, PREFIX "runs_total", labels, comp_load(&comp_stats.layer[l].runs[o]));
        }
    prom_header(b, PREFIX "last_run_timestamp_seconds", "gauge",
                "Unix time the last run of each layer ended (0: never ran).");
    for (int l = 0; l < COMP_LAYER_COUNT; l++)
        if (layer_on(cfg, l)) {
            snprintf(labels, sizeof labels, "{layer=\"%s\"}", comp_layer_name(l));
            buf_printf(b, PREFIX "last_run_timestamp_seconds%s %.3f\n", labels,
                       (double)comp_load(&comp_stats.layer[l].last_end_ms) / 1000.0);
        }
    prom_header(b, PREFIX "last_run_duration_seconds", "gauge", "How long the last run of each layer took.");
    for (int l = 0; l < COMP_LAYER_COUNT; l++)
        if (layer_on(cfg, l)) {
            snprintf(labels, sizeof labels, "{layer=\"%s\"}", comp_layer_name(l));
            buf_printf(b, PREFIX "last_run_duration_seconds%s %.6f\n", labels,
                       (double)comp_load(&comp_stats.layer[l].last_duration_us) / 1e6);
        }
    prom_header(b, PREFIX "last_run_success", "gauge",
                "1 when the last run of the layer did not fail (-1: never ran).");
    for (int l = 0; l < COMP_LAYER_COUNT; l++)
        if (layer_on(cfg, l)) {
            int o = atomic_load_explicit(&comp_stats.layer[l].last_outcome, memory_order_relaxed);
            snprintf(labels, sizeof labels, "{layer=\"%s\"}", comp_layer_name(l));
            prom_sample_i64(b, PREFIX "last_run_success", labels, o < 0 ? -1 : o != COMP_RUN_FAILED);
        }
    prom_header(b, PREFIX "last_run_outcome", "gauge",
                "The outcome of the last run of each layer (1 on the outcome's series).");
    for (int l = 0; l < COMP_LAYER_COUNT; l++)
        if (layer_on(cfg, l)) {
            int last = atomic_load_explicit(&comp_stats.layer[l].last_outcome, memory_order_relaxed);
            for (int o = 0; o < COMP_RUN_OUTCOMES; o++) {
                if ((o == COMP_RUN_SKIPPED || o == COMP_RUN_LOCK_LOST) && l != COMP_LAYER_INDEX_INSPECTION)
                    continue;
                snprintf(labels, sizeof labels, "{layer=\"%s\",outcome=\"%s\"}", comp_layer_name(l),
                         comp_run_outcome_name((comp_run_outcome_t)o));
                prom_sample_u64(b, PREFIX "last_run_outcome", labels, (uint64_t)(last == o));
            }
        }
    prom_header(b, PREFIX "consecutive_failures", "gauge", "Failed runs in a row of each layer.");
    for (int l = 0; l < COMP_LAYER_COUNT; l++)
        if (layer_on(cfg, l)) {
            snprintf(labels, sizeof labels, "{layer=\"%s\"}", comp_layer_name(l));
            prom_sample_u64(b, PREFIX "consecutive_failures", labels,
                            comp_load(&comp_stats.layer[l].consecutive_failures));
        }

    /* inspection and its lock */
    prom_header(b, PREFIX "inspection_lock_held", "gauge",
                "1 while this instance holds the inspection lock (GET_LOCK).");
    prom_sample_i64(b, PREFIX "inspection_lock_held", "",
                    atomic_load_explicit(&comp_stats.lock_held, memory_order_relaxed));
    prom_header(b, PREFIX "inspection_scanning", "gauge", "1 while an inspection scan runs in this instance.");
    prom_sample_i64(b, PREFIX "inspection_scanning", "",
                    atomic_load_explicit(&comp_stats.scanning, memory_order_relaxed));
    prom_metric_u64(b, PREFIX "inspection_scans_total", "counter", "Inspection scans started (under the lock).",
                    comp_load(&comp_stats.scans_started));
    prom_metric_u64(b, PREFIX "inspection_scans_completed_total", "counter",
                    "Inspection scans that read the whole overdue range.", comp_load(&comp_stats.scans_completed));
    prom_metric_u64(b, PREFIX "inspection_pages_total", "counter", "Keyset pages read by the inspection.",
                    comp_load(&comp_stats.pages));
    prom_metric_u64(b, PREFIX "inspection_rows_read_total", "counter", "Overdue pending orders read by the inspection.",
                    comp_load(&comp_stats.rows_read));
    prom_metric_u64(b, PREFIX "inspection_lock_acquired_total", "counter",
                    "Times this instance acquired the inspection lock.", comp_load(&comp_stats.lock_acquired));
    prom_metric_u64(b, PREFIX "inspection_lock_lost_total", "counter",
                    "Times the lock was found lost (its connection died).", comp_load(&comp_stats.lock_lost));
    prom_metric_u64(b, PREFIX "inspection_lock_busy_total", "counter",
                    "Rounds skipped because another instance holds the lock.", comp_load(&comp_stats.lock_busy));

    /* alerts */
    prom_header(b, PREFIX "alerts_fired_total", "counter",
                "Alerts fired (alert-command run, or logged without one), by alert.");
    for (int k = 0; k < COMP_ALERT_KINDS; k++) {
        snprintf(labels, sizeof labels, "{alert=\"%s\"}", comp_alert_name(k));
        prom_sample_u64(b, PREFIX "alerts_fired_total", labels, comp_load(&comp_stats.alerts_fired[k]));
    }
    prom_header(b, PREFIX "alerts_suppressed_total", "counter",
                "Checks of an active alert that did not fire because of alert-min-interval, by alert.");
    for (int k = 0; k < COMP_ALERT_KINDS; k++) {
        snprintf(labels, sizeof labels, "{alert=\"%s\"}", comp_alert_name(k));
        prom_sample_u64(b, PREFIX "alerts_suppressed_total", labels, comp_load(&comp_stats.alerts_suppressed[k]));
    }
    prom_header(b, PREFIX "alerts_active", "gauge",
                "Alerts whose condition holds now (firing, or held back by alert-min-interval), by alert.");
    for (int k = 0; k < COMP_ALERT_KINDS; k++) {
        snprintf(labels, sizeof labels, "{alert=\"%s\"}", comp_alert_name(k));
        prom_sample_i64(b, PREFIX "alerts_active", labels,
                        atomic_load_explicit(&comp_stats.alerts_active[k], memory_order_relaxed));
    }
    prom_metric_u64(b, PREFIX "alert_command_failures_total", "counter",
                    "Alert commands that failed, timed out or could not start.",
                    comp_load(&comp_stats.alert_command_failures));
}

static void render_cb(buf_t *out, void *arg)
{
    render(out, arg);
}

/* /healthz: one line per enabled layer that is stuck (busy, its last step
 * ended longer ago than comp_stats_stuck_after_ms: MariaDB or the broker
 * does not answer, and the call would fail only at its timeout), or whose
 * last run failed. Returns 0 when there is none. */
static int health_cb(buf_t *out, void *arg)
{
    const comp_config_t *cfg = arg;
    int failing = 0;
    uint64_t now = clock_mono_ms();
    for (int l = 0; l < COMP_LAYER_COUNT; l++) {
        if (!layer_on(cfg, l))
            continue;
        uint64_t idle_ms, round_ms;
        if (comp_stats_stuck(cfg, l, now, &idle_ms, &round_ms)) {
            buf_printf(out,
                       "%s: stuck: no step ended for %.1f s (bound %.1f s), its round running for %.1f s: "
                       "MariaDB or the broker does not answer\n",
                       comp_layer_name(l), (double)idle_ms / 1000, (double)comp_stats_stuck_after_ms(cfg, l) / 1000,
                       (double)round_ms / 1000);
            failing++;
            continue;
        }
        if (atomic_load_explicit(&comp_stats.layer[l].last_outcome, memory_order_relaxed) != COMP_RUN_FAILED)
            continue;
        char last[512];
        comp_stats_last_error(l, last, sizeof last);
        /* A layer's MariaDB connection and broker client carry its name ("relay: connect to …"): said once here
         * ("relay: relay: connect …" before). Another label stays ("inspection: lock: connect …"). */
        const char *name = comp_layer_name(l), *text = last;
        size_t len = strlen(name);
        if (strncmp(text, name, len) == 0 && text[len] == ':' && text[len + 1] == ' ')
            text += len + 2;
        buf_printf(out, "%s: %s\n", name, text);
        failing++;
    }
    return failing == 0 ? 0 : -1;
}

int comp_metrics_start(comp_metrics_t **out, const comp_config_t *cfg, char *err, size_t errlen)
{
    return prom_http_start(out, cfg->metrics_bind, cfg->metrics_allowed_hosts, (unsigned)cfg->metrics_port, render_cb,
                           health_cb, (void *)cfg, err, errlen);
}

void comp_metrics_stop(comp_metrics_t *m)
{
    prom_http_stop(m);
}
