/*
 * broker/server_http.c — the metrics HTTP endpoint (metrics-bind:
 * metrics-port, plain HTTP, GET and HEAD): /metrics answers the Prometheus
 * text (broker/metrics.h renders it) and /healthz says whether the broker
 * can serve. /metrics reads the store, so it is a read-only storage job
 * whose completion adds what the loop knows (server_loop_info) and sends the
 * reply; during shutdown both answer 503.
 *
 * The port has no authentication, so /healthz says why the store is broken
 * with every file-system path hidden (broker/redact.h), as an error reply
 * reads to a client that is not an admin: whoever reaches the port learns that
 * the store is broken and why, not where the data lives. The broker's log has
 * the whole text (the storage thread logged it when the store broke).
 *
 * The port follows the rules of every metrics port (common/http_guard.h):
 * GET and HEAD only, 8 KiB of request line and headers and 1 KiB of body,
 * at most 64 connections and a request's head whole within 10 s (slowloris),
 * and on a loopback metrics-bind (the default) only a Host that names the
 * listener is answered (421 otherwise: DNS rebinding would let a web page
 * read /metrics — the names of every topic and group, their depths).
 *
 * Thread: everything here runs on the event-loop thread, but for
 * http_metrics_exec, which runs on the storage thread and reads only the
 * store and metrics-max-topics (read-only after start-up).
 */
#include <string.h>

#include <event2/buffer.h>
#include <event2/http.h>
#include <event2/keyvalq_struct.h>

#include "base/alloc.h"
#include "broker/redact.h"
#include "broker/server_internal.h"
#include "common/http_guard.h"

typedef struct http_job {
    job_t job;
    server_t *srv;
    struct evhttp_request *req;
} http_job_t;

static job_result_t http_metrics_exec(job_t *j, writer_t *w)
{
    const http_job_t *hj = (const http_job_t *)j; /* metrics-max-topics: read-only after start-up */
    metrics_prom_storage(&j->reply.raw, writer_store(w), writer_stats(w), writer_now(w),
                         hj->srv->cfg->metrics_max_topics);
    return JOB_DONE;
}

static void http_metrics_complete(job_t *j)
{
    http_job_t *hj = (http_job_t *)j;
    struct evbuffer *body = evbuffer_new();
    if (j->failed) {
        evbuffer_add_printf(body, "storage failure\n");
        evhttp_send_reply(hj->req, 503, "Service Unavailable", body);
    } else {
        loop_info_t li;
        server_loop_info(hj->srv, &li);
        metrics_prom_loop(&j->reply.raw, &li);
        evbuffer_add(body, j->reply.raw.data, j->reply.raw.len);
        evhttp_add_header(evhttp_request_get_output_headers(hj->req), "Content-Type",
                          "text/plain; version=0.0.4; charset=utf-8");
        evhttp_send_reply(hj->req, 200, "OK", body);
    }
    evbuffer_free(body);
    job_free(j);
}

static void http_cb(struct evhttp_request *req, void *arg)
{
    server_t *s = arg;
    const struct evhttp_uri *uri = evhttp_request_get_evhttp_uri(req);
    const char *path = uri ? evhttp_uri_get_path(uri) : NULL;
    if (!http_guard_admit(s->http_guard, req)) {
        return;
    }
    struct evbuffer *body = evbuffer_new();
    if (path && strcmp(path, "/healthz") == 0) {
        char why[600];
        int code = 200;
        if (s->state != SRV_RUNNING) {
            code = 503;
            snprintf(why, sizeof why, "shutting down");
        } else if (!writer_healthy(s->writer, why, sizeof why)) {
            code = 503;
        }
        buf_t shown = BUF_INIT;
        redact_text(why, strlen(why), conn_set_hidden_paths(s->conns), &shown);
        evbuffer_add(body, shown.data, shown.len);
        evbuffer_add(body, "\n", 1);
        buf_free(&shown);
        evhttp_add_header(evhttp_request_get_output_headers(req), "Content-Type", "text/plain");
        evhttp_send_reply(req, code, code == 200 ? "OK" : "Service Unavailable", body);
    } else if (path && strcmp(path, "/metrics") == 0) {
        if (!s->writer_running || s->state != SRV_RUNNING) {
            evbuffer_add_printf(body, "shutting down\n");
            evhttp_send_reply(req, 503, "Service Unavailable", body);
        } else {
            http_job_t *hj = xmalloc(sizeof *hj);
            memset(hj, 0, sizeof *hj);
            resp_buf_init(&hj->job.reply);
            hj->job.exec = http_metrics_exec;
            hj->job.reads_only = 1;
            hj->job.complete = http_metrics_complete;
            hj->srv = s;
            hj->req = req;
            writer_submit(s->writer, &hj->job);
        }
    } else {
        evbuffer_add_printf(body, "not found: try /metrics or /healthz\n");
        evhttp_send_reply(req, 404, "Not Found", body);
    }
    evbuffer_free(body);
}

int server_http_start(server_t *s, char *err, size_t errlen)
{
    const config_t *cfg = s->cfg;
    if (cfg->metrics_port <= 0) {
        return 0;
    }
    s->http = evhttp_new(s->base);
    if (s->http == NULL) {
        snprintf(err, errlen, "cannot create the HTTP server");
        return -1;
    }
    /* GET and HEAD; 8 KiB of request line and headers, 1 KiB of body; 64 connections, a head within 10 s */
    s->http_guard = http_guard_new(s->http, s->base, cfg->metrics_bind, "metrics-bind", cfg->metrics_allowed_hosts,
                                   "this broker's metrics listener");
    evhttp_set_gencb(s->http, http_cb, s);
    if (evhttp_bind_socket_with_handle(s->http, cfg->metrics_bind, (ev_uint16_t)cfg->metrics_port) == NULL) {
        int e = EVUTIL_SOCKET_ERROR();
        snprintf(err, errlen, "cannot listen for metrics on %s:%lld: %s", cfg->metrics_bind, cfg->metrics_port,
                 evutil_socket_error_to_string(e));
        return -1;
    }
    return 0;
}

void server_reload_metrics_hosts(server_t *s)
{
    if (s->http_guard != NULL)
        http_guard_set_allowed(s->http_guard, s->cfg->metrics_allowed_hosts);
}

void server_http_stop(server_t *s)
{
    if (s->http != NULL) {
        evhttp_free(s->http);
    }
    s->http = NULL;
    http_guard_free(s->http_guard);
    s->http_guard = NULL;
}
