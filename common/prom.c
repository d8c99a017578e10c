/*
 * common/prom.c — Prometheus text, histograms and the /metrics endpoint
 * (contract: prom.h).
 *
 * The text helpers are pure. The endpoint is an evhttp server on its own
 * event base and thread: the thread only runs event_base_dispatch; the
 * caller stops it with event_base_loopbreak (thread-safe after
 * evthread_use_pthreads) and joins it. It follows the rules of every
 * metrics port (common/http_guard.h): GET and HEAD, bounded headers and
 * body, at most 64 connections each with a deadline on its request's head,
 * the Host check on a loopback bind.
 */
#include "common/prom.h"

#include "base/alloc.h"
#include "base/err.h"
#include "common/http_guard.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <netdb.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

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
    http_guard_t *guard; /* the Host check on a loopback bind */
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
    if (!http_guard_admit(h->guard, req))
        return;
    buf_t text;
    buf_init(&text);
    h->render(&text, h->arg);
    send_text(req, HTTP_OK, "OK", &text, "text/plain; version=0.0.4");
    buf_free(&text);
}

static void healthz_cb(struct evhttp_request *req, void *arg)
{
    prom_http_t *h = arg;
    if (!http_guard_admit(h->guard, req))
        return;
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

int prom_check_bind(const char *key, const char *value, char *err, size_t errlen)
{
    /* libevent hands the address to getaddrinfo too, but its failure leaves
     * errno as it was: the start said "cannot listen on 300.1.1.1:9102:
     * Resource temporarily unavailable", and --check-config said nothing. */
    unsigned char addr[sizeof(struct in6_addr)];
    if (value == NULL || value[0] == '\0')
        return err_set(err, errlen, "%s: empty value", key);
    if (inet_pton(AF_INET, value, addr) == 1 || inet_pton(AF_INET6, value, addr) == 1)
        return 0;
    /* Only digits and dots, or a colon: meant as an address, not a name. */
    if (strspn(value, "0123456789.") == strlen(value) || strchr(value, ':') != NULL)
        return err_set(err, errlen, "%s '%s' is not an IP address (a dotted quad of 0..255, or IPv6)", key, value);
    struct addrinfo hints = { .ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM, .ai_flags = AI_PASSIVE };
    struct addrinfo *res = NULL;
    int rc = getaddrinfo(value, NULL, &hints, &res);
    if (rc != 0)
        return err_set(err, errlen, "%s '%s' is not an IP address and does not resolve: %s", key, value,
                       rc == EAI_SYSTEM ? strerror(errno) : gai_strerror(rc));
    freeaddrinfo(res);
    return 0;
}

int prom_http_start(prom_http_t **out, const char *bind, const char *allowed_hosts, unsigned port,
                    prom_render_fn render, prom_health_fn health, void *arg, char *err, size_t errlen)
{
    *out = NULL;
    if (prom_check_bind("metrics-bind", bind, err, errlen) != 0)
        return -1;
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
    /* GET and HEAD; 8 KiB of request line and headers, 1 KiB of body; 64 connections, a head within 10 s */
    h->guard = http_guard_new(h->http, h->base, bind, "metrics-bind", allowed_hosts, "this process's metrics listener");
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
    http_guard_free(h->guard); /* its events before their base */
    if (h->base != NULL)
        event_base_free(h->base);
    free(h);
    return -1;
}

void prom_http_set_allowed_hosts(prom_http_t *h, const char *allowed_hosts)
{
    if (h != NULL)
        http_guard_set_allowed(h->guard, allowed_hosts);
}

void prom_http_stop(prom_http_t *h)
{
    if (h == NULL)
        return;
    event_base_loopbreak(h->base);
    pthread_join(h->thread, NULL);
    evhttp_free(h->http);
    http_guard_free(h->guard); /* after evhttp_free (its connections leave the set), before the base */
    event_base_free(h->base);
    free(h);
}

/* ---- the process ----------------------------------------------------------------- */

/* The value of "key:" in /proc/self/status, in kB; 0 when absent. */
static uint64_t status_kb(const char *key)
{
    FILE *f = fopen("/proc/self/status", "r");
    if (f == NULL) {
        return 0;
    }
    char line[256];
    size_t klen = strlen(key);
    uint64_t v = 0;
    while (fgets(line, sizeof line, f) != NULL) {
        if (strncmp(line, key, klen) == 0 && line[klen] == ':') {
            v = strtoull(line + klen + 1, NULL, 10);
            break;
        }
    }
    fclose(f);
    return v;
}

void prom_process_memory(uint64_t *rss, uint64_t *peak)
{
    *rss = status_kb("VmRSS") * 1024;
    *peak = status_kb("VmHWM") * 1024;
}

void prom_process_metrics(buf_t *b, const char *prefix, const char *version)
{
    buf_printf(b,
               "# HELP %s_build_info The version of this build.\n# TYPE %s_build_info gauge\n"
               "%s_build_info{version=\"%s\"} 1\n",
               prefix, prefix, prefix, version);
    struct rusage ru;
    if (getrusage(RUSAGE_SELF, &ru) == 0) {
        double cpu = (double)ru.ru_utime.tv_sec + (double)ru.ru_utime.tv_usec / 1e6 + (double)ru.ru_stime.tv_sec +
                     (double)ru.ru_stime.tv_usec / 1e6;
        buf_printf(b,
                   "# HELP process_cpu_seconds_total Total user and system CPU time spent in seconds.\n"
                   "# TYPE process_cpu_seconds_total counter\nprocess_cpu_seconds_total %.3f\n",
                   cpu);
    }
    uint64_t rss, peak;
    prom_process_memory(&rss, &peak);
    uint64_t vm = status_kb("VmSize") * 1024;
    if (rss > 0) {
        prom_metric_u64(b, "process_resident_memory_bytes", "gauge", "Resident memory size in bytes.", rss);
    }
    if (vm > 0) {
        prom_metric_u64(b, "process_virtual_memory_bytes", "gauge", "Virtual memory size in bytes.", vm);
    }
    DIR *d = opendir("/proc/self/fd");
    if (d != NULL) {
        uint64_t n = 0;
        struct dirent *e;
        while ((e = readdir(d)) != NULL) {
            n += e->d_name[0] != '.';
        }
        closedir(d);
        prom_metric_u64(b, "process_open_fds", "gauge", "Number of open file descriptors.", n > 0 ? n - 1 : 0);
    }
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY) {
        prom_metric_u64(b, "process_max_fds", "gauge", "Maximum number of open file descriptors.",
                        (uint64_t)rl.rlim_cur);
    }
    /* start time: field 22 of /proc/self/stat (clock ticks since boot) + the boot time */
    FILE *f = fopen("/proc/self/stat", "r");
    char stat[1024];
    size_t n = f ? fread(stat, 1, sizeof stat - 1, f) : 0;
    if (f) {
        fclose(f);
    }
    stat[n] = '\0';
    const char *p = strrchr(stat, ')');
    unsigned long long start_ticks = 0;
    for (int field = 2; p != NULL && *p && field < 22; p++) {
        if (*p == ' ') {
            field++;
        }
        if (field == 22 && *p == ' ') {
            start_ticks = strtoull(p + 1, NULL, 10);
            break;
        }
    }
    FILE *sf = fopen("/proc/stat", "r");
    unsigned long long btime = 0;
    char line[256];
    while (sf != NULL && fgets(line, sizeof line, sf) != NULL) {
        if (sscanf(line, "btime %llu", &btime) == 1) {
            break;
        }
    }
    if (sf) {
        fclose(sf);
    }
    long hz = sysconf(_SC_CLK_TCK);
    if (btime > 0 && start_ticks > 0 && hz > 0) {
        buf_printf(b,
                   "# HELP process_start_time_seconds Start time of the process since unix epoch in seconds.\n"
                   "# TYPE process_start_time_seconds gauge\nprocess_start_time_seconds %.2f\n",
                   (double)btime + (double)start_ticks / (double)hz);
    }
}
