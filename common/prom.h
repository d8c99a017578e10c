/*
 * common/prom.h — Prometheus text format helpers, the histogram type, and a
 * small /metrics + /healthz HTTP endpoint on its own thread.
 *
 * Text goes into a buf_t (base/buf.h), so the broker (which answers
 * /metrics from its storage thread) and the consumer / compensator (which
 * render on their HTTP thread) share one writer; free-form lines use
 * buf_printf. Metric names are passed whole (with the program's prefix).
 * None of the text helpers fail: out-of-memory aborts (base/alloc.h).
 */
#ifndef HG_COMMON_PROM_H
#define HG_COMMON_PROM_H

#include <stddef.h>
#include <stdint.h>

#include "base/buf.h"

/* "# HELP name help\n# TYPE name type\n". */
void prom_header(buf_t *b, const char *name, const char *type, const char *help);

/* One sample line "name{labels} v\n"; labels is "" or "{k=\"v\",...}". */
void prom_sample_u64(buf_t *b, const char *name, const char *labels, uint64_t v);
void prom_sample_i64(buf_t *b, const char *name, const char *labels, int64_t v);

/* Header and one unlabelled sample: a whole counter or gauge. */
void prom_metric_u64(buf_t *b, const char *name, const char *type, const char *help, uint64_t v);

/* This process, read from /proc/self (Prometheus's standard process_*
 * series: process_cpu_seconds_total, process_resident_memory_bytes,
 * process_virtual_memory_bytes, process_open_fds, process_max_fds,
 * process_start_time_seconds) and `<prefix>_build_info{version="…"} 1`.
 * A figure /proc cannot give is left out. */
void prom_process_metrics(buf_t *b, const char *prefix, const char *version);

/* Resident and peak resident bytes of this process (VmRSS, VmHWM), 0 when
 * /proc cannot tell. */
void prom_process_memory(uint64_t *rss, uint64_t *peak);

/* Copy in to out[outlen] as a label value: \ " and newline escaped; cut
 * short (never mid-escape) when out is too small. */
void prom_label_escape(const char *in, char *out, size_t outlen);

#define PROM_HIST_MAX_BUCKETS 24

/* A Prometheus-style cumulative histogram over fixed upper bounds. Not
 * thread-safe: one owner adds, or a multi-threaded owner keeps its own
 * atomic counters and fills a prom_hist_t snapshot to render it. */
typedef struct prom_hist {
    int nb;                                      /* bounds in use */
    const double *bounds;                        /* strictly increasing upper bounds */
    uint64_t buckets[PROM_HIST_MAX_BUCKETS + 1]; /* [nb] is +Inf; not cumulative here */
    uint64_t count;
    double sum;
} prom_hist_t;

/* Zero h over bounds[nb] (at most PROM_HIST_MAX_BUCKETS are used; bounds
 * must outlive h). */
void prom_hist_init(prom_hist_t *h, const double *bounds, int nb);

/* Count v in the first bucket whose bound is >= v. */
void prom_hist_add(prom_hist_t *h, double v);

/* Upper bound of the bucket holding quantile q (0..1); 0 when empty; the last
 * finite bound when it falls in +Inf. */
double prom_hist_quantile(const prom_hist_t *h, double q);

/* The histogram's HELP/TYPE, cumulative _bucket lines, _sum and _count. */
void prom_hist_write(buf_t *b, const char *name, const char *help, const prom_hist_t *h);

/* ---- the HTTP endpoint --------------------------------------------------
 * GET /metrics answers 200 with render()'s text (Content-Type
 * text/plain; version=0.0.4); GET /healthz answers 200 "ok\n" when health
 * is NULL or returns 0, else 503 with the text health wrote. Both callbacks
 * run on the endpoint's thread. evthread_use_pthreads must have run before
 * prom_http_start (the stop breaks the loop from another thread). The port
 * follows common/http_guard.h: GET and HEAD only, 8 KiB of request line and
 * headers (400 and closed past it), 1 KiB of body, and on a loopback bind a
 * Host other than an IP address, localhost, the bind, this machine's host
 * name or a name of allowed_hosts (metrics-allowed-hosts) is refused 421. */
typedef void (*prom_render_fn)(buf_t *out, void *arg);
typedef int (*prom_health_fn)(buf_t *out, void *arg);

typedef struct prom_http prom_http_t;

/* Check the address a metrics server would listen on, as --check-config and
 * the start both do: an IPv4 or IPv6 literal, or a host name that resolves
 * (getaddrinfo, AI_PASSIVE — a lookup, no socket). Returns 0, or -1 with err
 * naming key and value: "metrics-bind '300.1.1.1' is not an IP address (a
 * dotted quad of 0..255, or IPv6)" or "metrics-bind 'x.invalid' does not
 * resolve: <resolver's reason>". */
int prom_check_bind(const char *key, const char *value, char *err, size_t errlen);

/* Listen on bind:port and serve from a new thread (allowed_hosts:
 * metrics-allowed-hosts, or NULL). Returns 0 with *out, or
 * -1 with err naming the cause (a bind prom_check_bind refuses: its message,
 * naming metrics-bind; else metrics-port and the system's error). */
int prom_http_start(prom_http_t **out, const char *bind, const char *allowed_hosts, unsigned port,
                    prom_render_fn render, prom_health_fn health, void *arg, char *err, size_t errlen);

/* Serve the names of allowed_hosts (metrics-allowed-hosts, reloaded on
 * SIGHUP; NULL: none) from now on: http_guard_set_allowed. Any thread; NULL
 * h (no metrics port) is fine. */
void prom_http_set_allowed_hosts(prom_http_t *h, const char *allowed_hosts);

/* Stop the thread and free the endpoint. NULL is fine. */
void prom_http_stop(prom_http_t *h);

#endif
