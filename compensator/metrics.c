/*
 * compensator/metrics.c — the Prometheus text and the HTTP server
 * (contract: metrics.h).
 *
 * Rendering reads relaxed atomics (stats.h): each value exact, the page not
 * one snapshot. The server thread only runs event_base_dispatch; the main
 * thread stops it with event_base_loopbreak (thread-safe after
 * evthread_use_pthreads).
 *
 * Note: the "# HELP / # TYPE / value" writer is the same small helper
 * hourglass-consumer has (static in consumer_main.c); a shared
 * metrics-text helper would serve both.
 */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include "compensator/metrics.h"

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <event2/buffer.h>
#include <event2/event.h>
#include <event2/http.h>

#include "compensator/alerts.h"
#include "compensator/stats.h"

#define PREFIX "hourglass_compensator_"

struct comp_metrics {
    const comp_config_t *cfg;
    struct event_base *base;
    struct evhttp *http;
    pthread_t thread;
};

static void header(struct evbuffer *b, const char *name, const char *type, const char *help)
{
    evbuffer_add_printf(b, "# HELP " PREFIX "%s %s\n# TYPE " PREFIX "%s %s\n", name, help, name, type);
}

static void value_u(struct evbuffer *b, const char *name, const char *labels, uint64_t v)
{
    evbuffer_add_printf(b, PREFIX "%s%s %" PRIu64 "\n", name, labels, v);
}

static void value_i(struct evbuffer *b, const char *name, const char *labels, int64_t v)
{
    evbuffer_add_printf(b, PREFIX "%s%s %" PRId64 "\n", name, labels, v);
}

static void single_u(struct evbuffer *b, const char *name, const char *type, const char *help, uint64_t v)
{
    header(b, name, type, help);
    value_u(b, name, "", v);
}

/* A label value with \, " and newline escaped (Prometheus text format). */
static void escape_label(const char *in, char *out, size_t len)
{
    size_t n = 0;
    for (; *in != '\0' && n + 3 < len; in++) {
        if (*in == '\\' || *in == '"') {
            out[n++] = '\\';
            out[n++] = *in;
        } else if (*in == '\n') {
            out[n++] = '\\';
            out[n++] = 'n';
        } else {
            out[n++] = *in;
        }
    }
    out[n] = '\0';
}

static int layer_on(const comp_config_t *cfg, int l)
{
    return (cfg->layers & COMP_LAYER_BIT(l)) != 0;
}

static void render(struct evbuffer *b, const comp_config_t *cfg)
{
    char labels[256];

    /* gauges of the monitor layer */
    header(b, "overdue_pending_orders", "gauge",
           "Pending orders past expire_at + inspect-grace, at the last monitor run (-1: unknown).");
    value_i(b, "overdue_pending_orders", "", comp_gauge_get(&comp_stats.overdue_pending));
    header(b, "overdue_oldest_seconds", "gauge", "How long past expire_at the oldest of them is (-1: unknown).");
    value_i(b, "overdue_oldest_seconds", "", comp_gauge_get(&comp_stats.overdue_oldest_seconds));
    header(b, "outbox_unsent_rows", "gauge", "Outbox rows still 'new' (not sent yet), at the last monitor run (-1: unknown).");
    value_i(b, "outbox_unsent_rows", "", comp_gauge_get(&comp_stats.outbox_unsent));
    header(b, "dlq_depth", "gauge", "Messages in the DLQ of each watched group, read from the broker (-1: unknown).");
    for (size_t i = 0; i < cfg->group_count; i++) {
        char g[160];
        escape_label(cfg->groups[i], g, sizeof g);
        snprintf(labels, sizeof labels, "{group=\"%s\"}", g);
        value_i(b, "dlq_depth", labels, comp_gauge_get(&comp_stats.dlq_depth[i]));
    }
    single_u(b, "dlq_read_errors_total", "counter", "DLQ LEN reads that failed.", comp_load(&comp_stats.dlq_read_errors));

    /* relay */
    single_u(b, "relayed_total", "counter", "Outbox rows sent to the broker and marked 'sent'.",
             comp_load(&comp_stats.relay_sent));
    single_u(b, "relay_send_failures_total", "counter", "Outbox rows whose send failed (attempts + 1, backoff).",
             comp_load(&comp_stats.relay_send_failures));
    single_u(b, "relay_batches_total", "counter", "Relay transactions that locked at least one row.",
             comp_load(&comp_stats.relay_batches));

    /* cancels */
    static const char *const canceller[COMP_CANCELLERS][2] = {{"overdue", "outbox-overdue"}, {"inspection", "inspection"}};
    static const char *const outcome[COMP_CANCEL_OUTCOMES] = {"cancelled", "not-pending", "not-found", "transient",
                                                              "permanent"};
    header(b, "cancels_total", "counter", "Orders cancelled by the compensator, by layer and cancel reason.");
    for (int c = 0; c < COMP_CANCELLERS; c++) {
        snprintf(labels, sizeof labels, "{layer=\"%s\",reason=\"%s\"}", canceller[c][0], canceller[c][1]);
        value_u(b, "cancels_total", labels, comp_load(&comp_stats.cancels[c][COMP_CANCEL_DONE]));
    }
    header(b, "cancel_attempts_total", "counter", "hg_order_cancel calls by layer and outcome.");
    for (int c = 0; c < COMP_CANCELLERS; c++)
        for (int o = 0; o < COMP_CANCEL_OUTCOMES; o++) {
            snprintf(labels, sizeof labels, "{layer=\"%s\",outcome=\"%s\"}", canceller[c][0], outcome[o]);
            value_u(b, "cancel_attempts_total", labels, comp_load(&comp_stats.cancels[c][o]));
        }
    single_u(b, "outbox_closed_total", "counter", "Overdue outbox rows of orders no longer pending, marked 'done'.",
             comp_load(&comp_stats.outbox_closed));

    /* runs per layer */
    header(b, "layer_enabled", "gauge", "1 for the layers this instance runs.");
    for (int l = 0; l < COMP_LAYER_COUNT; l++) {
        snprintf(labels, sizeof labels, "{layer=\"%s\"}", comp_layer_name(l));
        value_u(b, "layer_enabled", labels, (uint64_t)layer_on(cfg, l));
    }
    header(b, "runs_total", "counter", "Runs of each layer by outcome (ok, failed, skipped: lock held elsewhere, lock-lost).");
    for (int l = 0; l < COMP_LAYER_COUNT; l++)
        for (int o = 0; o < COMP_RUN_OUTCOMES; o++) {
            if (!layer_on(cfg, l) || ((o == COMP_RUN_SKIPPED || o == COMP_RUN_LOCK_LOST) && l != COMP_LAYER_INDEX_INSPECTION))
                continue;
            snprintf(labels, sizeof labels, "{layer=\"%s\",outcome=\"%s\"}", comp_layer_name(l),
                     comp_run_outcome_name((comp_run_outcome_t)o));
            value_u(b, "runs_total", labels, comp_load(&comp_stats.layer[l].runs[o]));
        }
    header(b, "last_run_timestamp_seconds", "gauge", "Unix time the last run of each layer ended (0: never ran).");
    for (int l = 0; l < COMP_LAYER_COUNT; l++)
        if (layer_on(cfg, l)) {
            snprintf(labels, sizeof labels, "{layer=\"%s\"}", comp_layer_name(l));
            evbuffer_add_printf(b, PREFIX "last_run_timestamp_seconds%s %.3f\n", labels,
                                (double)comp_load(&comp_stats.layer[l].last_end_ms) / 1000.0);
        }
    header(b, "last_run_duration_seconds", "gauge", "How long the last run of each layer took.");
    for (int l = 0; l < COMP_LAYER_COUNT; l++)
        if (layer_on(cfg, l)) {
            snprintf(labels, sizeof labels, "{layer=\"%s\"}", comp_layer_name(l));
            evbuffer_add_printf(b, PREFIX "last_run_duration_seconds%s %.6f\n", labels,
                                (double)comp_load(&comp_stats.layer[l].last_duration_us) / 1e6);
        }
    header(b, "last_run_success", "gauge", "1 when the last run of the layer did not fail (-1: never ran).");
    for (int l = 0; l < COMP_LAYER_COUNT; l++)
        if (layer_on(cfg, l)) {
            int o = atomic_load_explicit(&comp_stats.layer[l].last_outcome, memory_order_relaxed);
            snprintf(labels, sizeof labels, "{layer=\"%s\"}", comp_layer_name(l));
            value_i(b, "last_run_success", labels, o < 0 ? -1 : o != COMP_RUN_FAILED);
        }
    header(b, "last_run_outcome", "gauge", "The outcome of the last run of each layer (1 on the outcome's series).");
    for (int l = 0; l < COMP_LAYER_COUNT; l++)
        if (layer_on(cfg, l)) {
            int last = atomic_load_explicit(&comp_stats.layer[l].last_outcome, memory_order_relaxed);
            for (int o = 0; o < COMP_RUN_OUTCOMES; o++) {
                if ((o == COMP_RUN_SKIPPED || o == COMP_RUN_LOCK_LOST) && l != COMP_LAYER_INDEX_INSPECTION)
                    continue;
                snprintf(labels, sizeof labels, "{layer=\"%s\",outcome=\"%s\"}", comp_layer_name(l),
                         comp_run_outcome_name((comp_run_outcome_t)o));
                value_u(b, "last_run_outcome", labels, (uint64_t)(last == o));
            }
        }
    header(b, "consecutive_failures", "gauge", "Failed runs in a row of each layer.");
    for (int l = 0; l < COMP_LAYER_COUNT; l++)
        if (layer_on(cfg, l)) {
            snprintf(labels, sizeof labels, "{layer=\"%s\"}", comp_layer_name(l));
            value_u(b, "consecutive_failures", labels, comp_load(&comp_stats.layer[l].consecutive_failures));
        }

    /* inspection and its lock */
    header(b, "inspection_lock_held", "gauge", "1 while this instance holds the inspection lock (GET_LOCK).");
    value_i(b, "inspection_lock_held", "", atomic_load_explicit(&comp_stats.lock_held, memory_order_relaxed));
    header(b, "inspection_scanning", "gauge", "1 while an inspection scan runs in this instance.");
    value_i(b, "inspection_scanning", "", atomic_load_explicit(&comp_stats.scanning, memory_order_relaxed));
    single_u(b, "inspection_scans_total", "counter", "Inspection scans started (under the lock).",
             comp_load(&comp_stats.scans_started));
    single_u(b, "inspection_scans_completed_total", "counter", "Inspection scans that read the whole overdue range.",
             comp_load(&comp_stats.scans_completed));
    single_u(b, "inspection_pages_total", "counter", "Keyset pages read by the inspection.", comp_load(&comp_stats.pages));
    single_u(b, "inspection_rows_read_total", "counter", "Overdue pending orders read by the inspection.",
             comp_load(&comp_stats.rows_read));
    single_u(b, "inspection_lock_acquired_total", "counter", "Times this instance acquired the inspection lock.",
             comp_load(&comp_stats.lock_acquired));
    single_u(b, "inspection_lock_lost_total", "counter", "Times the lock was found lost (its connection died).",
             comp_load(&comp_stats.lock_lost));
    single_u(b, "inspection_lock_busy_total", "counter", "Rounds skipped because another instance holds the lock.",
             comp_load(&comp_stats.lock_busy));

    /* alerts */
    header(b, "alerts_fired_total", "counter", "Alerts fired (alert-command run, or logged without one), by alert.");
    for (int k = 0; k < COMP_ALERT_KINDS; k++) {
        snprintf(labels, sizeof labels, "{alert=\"%s\"}", comp_alert_name(k));
        value_u(b, "alerts_fired_total", labels, comp_load(&comp_stats.alerts_fired[k]));
    }
    header(b, "alerts_suppressed_total", "counter",
           "Checks of an active alert that did not fire because of alert-min-interval, by alert.");
    for (int k = 0; k < COMP_ALERT_KINDS; k++) {
        snprintf(labels, sizeof labels, "{alert=\"%s\"}", comp_alert_name(k));
        value_u(b, "alerts_suppressed_total", labels, comp_load(&comp_stats.alerts_suppressed[k]));
    }
    single_u(b, "alert_command_failures_total", "counter", "Alert commands that failed, timed out or could not start.",
             comp_load(&comp_stats.alert_command_failures));
}

char *comp_metrics_text(const comp_config_t *cfg)
{
    struct evbuffer *b = evbuffer_new();
    if (b == NULL)
        abort();
    render(b, cfg);
    size_t len = evbuffer_get_length(b);
    char *text = malloc(len + 1);
    if (text == NULL)
        abort();
    evbuffer_remove(b, text, len);
    text[len] = '\0';
    evbuffer_free(b);
    return text;
}

static void metrics_cb(struct evhttp_request *req, void *arg)
{
    comp_metrics_t *m = arg;
    struct evbuffer *b = evbuffer_new();
    if (b == NULL) {
        evhttp_send_error(req, HTTP_INTERNAL, "out of memory");
        return;
    }
    render(b, m->cfg);
    evhttp_add_header(evhttp_request_get_output_headers(req), "Content-Type", "text/plain; version=0.0.4");
    evhttp_send_reply(req, HTTP_OK, "OK", b);
    evbuffer_free(b);
}

static void healthz_cb(struct evhttp_request *req, void *arg)
{
    comp_metrics_t *m = arg;
    struct evbuffer *b = evbuffer_new();
    if (b == NULL) {
        evhttp_send_error(req, HTTP_INTERNAL, "out of memory");
        return;
    }
    int failing = 0;
    for (int l = 0; l < COMP_LAYER_COUNT; l++) {
        if (!layer_on(m->cfg, l)
            || atomic_load_explicit(&comp_stats.layer[l].last_outcome, memory_order_relaxed) != COMP_RUN_FAILED)
            continue;
        char last[512];
        comp_stats_last_error(l, last, sizeof last);
        evbuffer_add_printf(b, "%s: %s\n", comp_layer_name(l), last);
        failing++;
    }
    if (failing == 0) {
        evbuffer_add_printf(b, "ok\n");
        evhttp_send_reply(req, HTTP_OK, "OK", b);
    } else {
        evhttp_send_reply(req, 503, "Service Unavailable", b);
    }
    evbuffer_free(b);
}

static void *metrics_thread(void *arg)
{
    comp_metrics_t *m = arg;
    event_base_dispatch(m->base);
    return NULL;
}

int comp_metrics_start(comp_metrics_t **out, const comp_config_t *cfg, char *err, size_t errlen)
{
    *out = NULL;
    comp_metrics_t *m = calloc(1, sizeof *m);
    if (m == NULL)
        abort();
    m->cfg = cfg;
    m->base = event_base_new();
    m->http = m->base != NULL ? evhttp_new(m->base) : NULL;
    if (m->http == NULL) {
        snprintf(err, errlen, "metrics-port: cannot create the HTTP server");
        goto fail;
    }
    evhttp_set_cb(m->http, "/metrics", metrics_cb, m);
    evhttp_set_cb(m->http, "/healthz", healthz_cb, m);
    if (evhttp_bind_socket_with_handle(m->http, cfg->metrics_bind, (ev_uint16_t)cfg->metrics_port) == NULL) {
        snprintf(err, errlen, "metrics-port: cannot listen on %s:%llu: %s", cfg->metrics_bind, cfg->metrics_port,
                 strerror(errno));
        goto fail;
    }
    int rc = pthread_create(&m->thread, NULL, metrics_thread, m);
    if (rc != 0) {
        snprintf(err, errlen, "metrics: cannot start a thread: %s", strerror(rc));
        goto fail;
    }
    *out = m;
    return 0;

fail:
    if (m->http != NULL)
        evhttp_free(m->http);
    if (m->base != NULL)
        event_base_free(m->base);
    free(m);
    return -1;
}

void comp_metrics_stop(comp_metrics_t *m)
{
    if (m == NULL)
        return;
    event_base_loopbreak(m->base);
    pthread_join(m->thread, NULL);
    evhttp_free(m->http);
    event_base_free(m->base);
    free(m);
}
