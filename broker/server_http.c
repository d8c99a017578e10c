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
 * On a loopback metrics-bind (the default) a request is answered only when
 * its Host names the loopback listener: an IP literal, localhost, or
 * metrics-bind itself (or when it has no Host: HTTP/1.0). Any other name is
 * refused 421: a web page in a browser on this host could otherwise point its
 * own DNS name at 127.0.0.1 (DNS rebinding) and read /metrics — the names of
 * every topic and group, their depths — as a same-origin page. A scraper of a
 * loopback port connects by address or localhost. On a non-loopback bind
 * (allow-remote yes) every Host is served: scrapers there use the host's DNS
 * names, and that network is the scraper's (docs/security.md).
 *
 * Thread: everything here runs on the event-loop thread, but for
 * http_metrics_exec, which runs on the storage thread and reads only the
 * store and metrics-max-topics (read-only after start-up).
 */
#include <arpa/inet.h>
#include <string.h>
#include <strings.h>

#include <event2/buffer.h>
#include <event2/http.h>
#include <event2/keyvalq_struct.h>

#include "base/alloc.h"
#include "base/clock.h"
#include "broker/redact.h"
#include "broker/server_internal.h"
#include "common/log.h"

/* What one request may send: its request line and headers, its body. A
 * longer one is refused by evhttp and its connection closed. */
#define HTTP_HEADERS_MAX 8192
#define HTTP_BODY_MAX    1024

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

/* Does a request's Host (NULL: none) name the loopback listener bound to
 * bind: an IPv4 or [IPv6] literal, localhost or bind itself, with or without
 * a port and a trailing dot? */
static int http_host_is_local(const char *host, const char *bind)
{
    char name[256];
    struct in_addr a4;
    struct in6_addr a6;
    if (host == NULL) {
        return 1;
    }
    if (host[0] == '[') {
        const char *end = strchr(host, ']');
        size_t n = end != NULL ? (size_t)(end - host - 1) : 0;
        if (end == NULL || n >= sizeof name || (end[1] != '\0' && end[1] != ':')) {
            return 0;
        }
        memcpy(name, host + 1, n);
        name[n] = '\0';
        return inet_pton(AF_INET6, name, &a6) == 1;
    }
    size_t n = strcspn(host, ":");
    if (n == 0 || n >= sizeof name) {
        return 0;
    }
    memcpy(name, host, n);
    name[n] = '\0';
    if (name[n - 1] == '.') {
        name[--n] = '\0';
    }
    return n > 0 && (inet_pton(AF_INET, name, &a4) == 1 || strcasecmp(name, "localhost") == 0 ||
                     (bind != NULL && strcasecmp(name, bind) == 0));
}

/* Refuse a request whose Host names another host (DNS rebinding, above):
 * 421, logged at most once a second with how many so far. */
static void http_refuse_host(server_t *s, struct evhttp_request *req, const char *host)
{
    static uint64_t refused, last_log_ms;
    refused++;
    uint64_t now = clock_mono_ms();
    char shown[64];
    size_t i = 0;
    for (; host[i] != '\0' && i + 1 < sizeof shown; i++) {
        shown[i] = host[i] >= 0x20 && host[i] < 0x7f ? host[i] : '?';
    }
    shown[i] = '\0';
    if (now >= last_log_ms + 1000) {
        log_warn("metrics port: refused a request for host '%s' (%llu so far): only an IP address, localhost or "
                 "metrics-bind %s names this loopback listener (DNS rebinding?)",
                 shown, (unsigned long long)refused, s->cfg->metrics_bind);
        last_log_ms = now;
    }
    struct evbuffer *body = evbuffer_new();
    evbuffer_add_printf(body,
                        "host '%s' is not this broker's metrics listener: use its IP address or localhost "
                        "(metrics-bind is loopback)\n",
                        shown);
    evhttp_add_header(evhttp_request_get_output_headers(req), "Content-Type", "text/plain");
    evhttp_send_reply(req, 421, "Misdirected Request", body);
    evbuffer_free(body);
}

static void http_cb(struct evhttp_request *req, void *arg)
{
    server_t *s = arg;
    const struct evhttp_uri *uri = evhttp_request_get_evhttp_uri(req);
    const char *path = uri ? evhttp_uri_get_path(uri) : NULL;
    const char *host = evhttp_find_header(evhttp_request_get_input_headers(req), "Host");
    if (config_is_loopback(s->cfg->metrics_bind) && !http_host_is_local(host, s->cfg->metrics_bind)) {
        http_refuse_host(s, req, host);
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
    evhttp_set_allowed_methods(s->http, EVHTTP_REQ_GET | EVHTTP_REQ_HEAD);
    evhttp_set_gencb(s->http, http_cb, s);
    evhttp_set_timeout(s->http, 30);
    /* A scraper's GET is a request line and a few headers, with no body. Without these bounds evhttp (whose
     * defaults are unlimited) kept every header byte a client sent: 200 MiB of headers, 220 MiB more RSS. */
    evhttp_set_max_headers_size(s->http, HTTP_HEADERS_MAX);
    evhttp_set_max_body_size(s->http, HTTP_BODY_MAX);
    if (evhttp_bind_socket_with_handle(s->http, cfg->metrics_bind, (ev_uint16_t)cfg->metrics_port) == NULL) {
        int e = EVUTIL_SOCKET_ERROR();
        snprintf(err, errlen, "cannot listen for metrics on %s:%lld: %s", cfg->metrics_bind, cfg->metrics_port,
                 evutil_socket_error_to_string(e));
        return -1;
    }
    return 0;
}
