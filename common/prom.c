/*
 * common/prom.c — Prometheus text, histograms and the /metrics endpoint
 * (contract: prom.h).
 *
 * The text helpers are pure. The endpoint is an evhttp server on its own
 * event base and thread: the thread only runs event_base_dispatch; the
 * caller stops it with event_base_loopbreak (thread-safe after
 * evthread_use_pthreads) and joins it.
 */
#include "common/prom.h"

#include "base/alloc.h"

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

void prom_header(buf_t *b, const char *name, const char *type, const char *help)
{
    buf_printf(b, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

void prom_sample_u64(buf_t *b, const char *name, const char *labels, uint64_t v)
{
    buf_printf(b, "%s%s %" PRIu64 "\n", name, labels, v);
}

void prom_sample_i64(buf_t *b, const char *name, const char *labels, int64_t v)
{
    buf_printf(b, "%s%s %" PRId64 "\n", name, labels, v);
}

void prom_metric_u64(buf_t *b, const char *name, const char *type, const char *help, uint64_t v)
{
    prom_header(b, name, type, help);
    prom_sample_u64(b, name, "", v);
}

void prom_label_escape(const char *in, char *out, size_t outlen)
{
    size_t n = 0;
    for (; *in != '\0' && n + 3 < outlen; in++) {
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

void prom_hist_init(prom_hist_t *h, const double *bounds, int nb)
{
    memset(h, 0, sizeof *h);
    h->bounds = bounds;
    h->nb = nb > PROM_HIST_MAX_BUCKETS ? PROM_HIST_MAX_BUCKETS : nb;
}

void prom_hist_add(prom_hist_t *h, double v)
{
    int i = 0;
    while (i < h->nb && v > h->bounds[i]) {
        i++;
    }
    h->buckets[i]++;
    h->count++;
    h->sum += v;
}

double prom_hist_quantile(const prom_hist_t *h, double q)
{
    if (h->count == 0) {
        return 0;
    }
    uint64_t want = (uint64_t)(q * (double)h->count);
    if (want == 0) {
        want = 1;
    }
    uint64_t acc = 0;
    for (int i = 0; i <= h->nb; i++) {
        acc += h->buckets[i];
        if (acc >= want) {
            return i < h->nb ? h->bounds[i] : h->bounds[h->nb - 1];
        }
    }
    return h->bounds[h->nb - 1];
}

void prom_hist_write(buf_t *b, const char *name, const char *help, const prom_hist_t *h)
{
    prom_header(b, name, "histogram", help);
    uint64_t acc = 0;
    for (int i = 0; i < h->nb; i++) {
        acc += h->buckets[i];
        buf_printf(b, "%s_bucket{le=\"%g\"} %" PRIu64 "\n", name, h->bounds[i], acc);
    }
    acc += h->buckets[h->nb];
    buf_printf(b, "%s_bucket{le=\"+Inf\"} %" PRIu64 "\n%s_sum %.6f\n%s_count %" PRIu64 "\n", name, acc, name, h->sum,
               name, h->count);
}

/* ---- the HTTP endpoint ---------------------------------------------------------- */

struct prom_http {
    struct event_base *base;
    struct evhttp *http;
    pthread_t thread;
    prom_render_fn render;
    prom_health_fn health;
    void *arg;
};

/* Send text with code; frees nothing of the caller's. */
static void send_text(struct evhttp_request *req, int code, const char *reason, const buf_t *text,
                      const char *content_type)
{
    struct evbuffer *b = evbuffer_new();
    if (b == NULL) {
        evhttp_send_error(req, HTTP_INTERNAL, "out of memory");
        return;
    }
    evbuffer_add(b, text->data, text->len);
    if (content_type != NULL)
        evhttp_add_header(evhttp_request_get_output_headers(req), "Content-Type", content_type);
    evhttp_send_reply(req, code, reason, b);
    evbuffer_free(b);
}

static void metrics_cb(struct evhttp_request *req, void *arg)
{
    prom_http_t *h = arg;
    buf_t text;
    buf_init(&text);
    h->render(&text, h->arg);
    send_text(req, HTTP_OK, "OK", &text, "text/plain; version=0.0.4");
    buf_free(&text);
}

static void healthz_cb(struct evhttp_request *req, void *arg)
{
    prom_http_t *h = arg;
    buf_t text;
    buf_init(&text);
    if (h->health == NULL || h->health(&text, h->arg) == 0) {
        buf_clear(&text);
        buf_append(&text, "ok\n", 3);
        send_text(req, HTTP_OK, "OK", &text, "text/plain; charset=utf-8");
    } else {
        send_text(req, 503, "Service Unavailable", &text, "text/plain; charset=utf-8");
    }
    buf_free(&text);
}

static void *http_thread(void *arg)
{
    prom_http_t *h = arg;
    event_base_dispatch(h->base);
    return NULL;
}

int prom_http_start(prom_http_t **out, const char *bind, unsigned port, prom_render_fn render, prom_health_fn health,
                    void *arg, char *err, size_t errlen)
{
    *out = NULL;
    prom_http_t *h = xcalloc(1, sizeof *h);
    h->render = render;
    h->health = health;
    h->arg = arg;
    h->base = event_base_new();
    h->http = h->base != NULL ? evhttp_new(h->base) : NULL;
    if (h->http == NULL) {
        snprintf(err, errlen, "metrics-port: cannot create the HTTP server");
        goto fail;
    }
    evhttp_set_cb(h->http, "/metrics", metrics_cb, h);
    evhttp_set_cb(h->http, "/healthz", healthz_cb, h);
    if (evhttp_bind_socket_with_handle(h->http, bind, (ev_uint16_t)port) == NULL) {
        snprintf(err, errlen, "metrics-port: cannot listen on %s:%u: %s", bind, port, strerror(errno));
        goto fail;
    }
    int rc = pthread_create(&h->thread, NULL, http_thread, h);
    if (rc != 0) {
        snprintf(err, errlen, "metrics: cannot start a thread: %s", strerror(rc));
        goto fail;
    }
    *out = h;
    return 0;

fail:
    if (h->http != NULL)
        evhttp_free(h->http);
    if (h->base != NULL)
        event_base_free(h->base);
    free(h);
    return -1;
}

void prom_http_stop(prom_http_t *h)
{
    if (h == NULL)
        return;
    event_base_loopbreak(h->base);
    pthread_join(h->thread, NULL);
    evhttp_free(h->http);
    event_base_free(h->base);
    free(h);
}
