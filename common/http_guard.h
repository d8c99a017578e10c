/*
 * common/http_guard.h — the rules every unauthenticated metrics port
 * follows (the broker's metrics-port, hourglass-consumer's and
 * hourglass-compensator's): GET and HEAD only, a request's line and
 * headers bounded to HTTP_GUARD_HEADERS_MAX bytes and its body to
 * HTTP_GUARD_BODY_MAX, and on a loopback bind a Host check against DNS
 * rebinding.
 *
 * Slowloris: the port's connections are a common/http_conns.h set, at
 * most HTTP_GUARD_MAX_CONNECTIONS open (503 past it), each request's head
 * whole within HTTP_GUARD_HEADER_TIMEOUT_MS of its first byte (408, or
 * closed when nothing came). A scraper sends its request at once and keeps
 * one connection.
 *
 * The Host check: on a loopback bind a request is answered only when its
 * Host names the loopback listener (common/http_host.h) — an IP literal,
 * localhost, the bind address itself, this machine's host name
 * (gethostname at the guard's start: a Prometheus on this host scraping
 * http://myhost:9121/metrics) or a name of metrics-allowed-hosts (a reverse
 * proxy's own name in Host) — or when it has no Host (HTTP/1.0). Any other
 * name is refused 421 Misdirected Request: a web page in a browser on this
 * host could otherwise point its own DNS name at 127.0.0.1 (DNS rebinding)
 * and read /metrics as a same-origin page. The names served are the
 * operator's and the machine's, which such a page does not control. On a
 * non-loopback bind every Host is served: scrapers there use the host's DNS
 * names (docs/security.md).
 *
 * A guard belongs to one evhttp and is used on that evhttp's event-loop
 * thread only, but for http_guard_set_allowed (any thread: SIGHUP).
 */
#ifndef HG_COMMON_HTTP_GUARD_H
#define HG_COMMON_HTTP_GUARD_H

#include <stddef.h>
#include <stdint.h>

struct event_base;
struct evhttp;
struct evhttp_request;

/* What one request may send: its request line and headers, its body. A
 * longer one is refused by evhttp (400, or 413 for the body) and its
 * connection closed. A scraper's GET is a request line and a few headers. */
#define HTTP_GUARD_HEADERS_MAX 8192
#define HTTP_GUARD_BODY_MAX    1024

/* Connections open at once, and how long a request's head may take. */
#define HTTP_GUARD_MAX_CONNECTIONS   64
#define HTTP_GUARD_HEADER_TIMEOUT_MS 10000

/* The key of the names a loopback metrics port serves besides its own, and
 * its help text: one row of each daemon's table (broker, consumer,
 * compensator). */
#define HTTP_GUARD_ALLOWED_KEY "metrics-allowed-hosts"
#define HTTP_GUARD_ALLOWED_HELP                                                                                     \
    "on a loopback metrics-bind, host names /metrics answers to (Host header), comma-separated, besides IP "        \
    "literals, localhost, metrics-bind and this machine's host name: a reverse proxy's or scraper's own name; any " \
    "other name is refused 421 (DNS rebinding)"
#define HTTP_GUARD_ALLOWED_SHOWN "none: IP literals, localhost, metrics-bind and the host name only"

typedef struct http_guard http_guard_t;

/* Guard http (a plain-HTTP evhttp on base, before it binds): its bounds
 * (above), GET and HEAD only, evhttp's idle timeout, its connections
 * (evhttp_set_bevcb: the cap and the deadline), and the Host check for a
 * listener on bind (copied), serving besides the names of allowed_hosts
 * (metrics-allowed-hosts, comma-separated, checked with http_hosts_check;
 * NULL: none; copied), whose refusals name what ("this broker's metrics
 * listener") and the key of the bind address (bind_key: "metrics-bind").
 * Never NULL (out of memory aborts); free with http_guard_free after
 * evhttp_free(http). */
http_guard_t *http_guard_new(struct evhttp *http, struct event_base *base, const char *bind, const char *bind_key,
                             const char *allowed_hosts, const char *what);

/* Every request callback calls this first. 1 when req may be answered;
 * 0 when it was refused here (more than one Host header, on any bind: 400
 * "more than one Host header" sent; its Host names another host on a
 * loopback bind: 421 sent, a log line at most once a second with how many so far,
 * through common/log_limit.h's log_limit_count, so the next line also says
 * how many were not logged):
 * the caller does nothing more with it. */
int http_guard_admit(http_guard_t *g, struct evhttp_request *req);

/* Serve the names of allowed_hosts (metrics-allowed-hosts reloaded: checked
 * with http_hosts_check; NULL: none; copied) instead of the guard's, besides
 * the IP literals, localhost, the bind and this machine's host name. Any
 * thread: a request is checked against the old list or the new one whole,
 * never a list half replaced. */
void http_guard_set_allowed(http_guard_t *g, const char *allowed_hosts);

/* Connections open on the guarded port now. */
size_t http_guard_connections(const http_guard_t *g);

/* Requests refused by http_guard_admit since the start. */
uint64_t http_guard_refused(const http_guard_t *g);

void http_guard_free(http_guard_t *g);

#endif
