/*
 * common/http_guard.c — the bounds and the Host check of the metrics ports
 * (contract: http_guard.h); the connections' cap and deadline are
 * common/http_conns.c's.
 *
 * Thread: the thread running the guarded evhttp's event base (the broker's
 * loop, the consumer's and compensator's metrics thread); the served names
 * under allowed_lock too, which http_guard_set_allowed takes from a reload's
 * thread (the consumer's and compensator's SIGHUP thread).
 */
#include "common/http_guard.h"

#include "common/cfg.h"

#include <arpa/inet.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include <event2/buffer.h>
#include <event2/http.h>
#include <sys/queue.h>

#include <event2/keyvalq_struct.h>

#include "base/alloc.h"
#include "common/http_conns.h"
#include "common/http_host.h"
#include "common/log.h"
#include "common/log_limit.h"

#define HTTP_GUARD_LOG_MS       1000 /* refusal_log's interval: at most one refusal logged per this long */
#define HTTP_GUARD_IDLE_S       30   /* evhttp's timeout: a connection silent this long is closed */
#define HTTP_GUARD_HOST_SHOWN   64   /* bytes of a refused Host shown in the log and the reply */
#define HTTP_GUARD_HOSTNAME_MAX 255  /* gethostname's longest name */

struct http_guard {
    http_conns_t *conns;
    char *bind;
    char *bind_key;
    pthread_mutex_t allowed_lock; /* allowed: replaced by http_guard_set_allowed from a reload's thread */
    char *allowed;  /* metrics-allowed-hosts, then this machine's host name: "a.example,b.example,myhost" */
    char *hostname; /* this machine's (gethostname; "" when it has none) */
    char *what;
    int loopback;
    uint64_t refused;
    log_limit_t refusal_log; /* the refused Hosts (log_limit_count): the next line says how many were not logged */
};

static const long long guard_max_connections = HTTP_GUARD_MAX_CONNECTIONS;
static const long long guard_header_timeout_ms = HTTP_GUARD_HEADER_TIMEOUT_MS;

/* The names served besides the literals: allowed_hosts (NULL: none), then
 * hostname; a new string (free). */
static char *allowed_names(const char *allowed_hosts, const char *hostname)
{
    size_t len = (allowed_hosts != NULL ? strlen(allowed_hosts) : 0) + strlen(hostname) + 2;
    char *names = xmalloc(len);
    snprintf(names, len, "%s,%s", allowed_hosts != NULL ? allowed_hosts : "", hostname);
    return names;
}

http_guard_t *http_guard_new(struct evhttp *http, struct event_base *base, const char *bind, const char *bind_key,
                             const char *allowed_hosts, const char *what)
{
    http_guard_t *g = xcalloc(1, sizeof *g);
    static const http_conns_config_t limits = {
        .max_connections = &guard_max_connections,
        .header_timeout_ms = &guard_header_timeout_ms,
        .tls = 0,
        .what = "the metrics port",
        .max_name = "at most",
        .timeout_name = "the metrics port's header deadline",
        .log_prefix = "metrics port: ",
    };
    g->conns = http_conns_new(base, &limits);
    evhttp_set_bevcb(http, http_conns_plain_bev, g->conns);
    evhttp_set_allowed_methods(http, EVHTTP_REQ_GET | EVHTTP_REQ_HEAD);
    evhttp_set_timeout(http, HTTP_GUARD_IDLE_S);
    /* Without these bounds evhttp (whose defaults are unlimited) kept every header byte a client sent: 200 MiB of
     * headers, 220 MiB more RSS. */
    evhttp_set_max_headers_size(http, HTTP_GUARD_HEADERS_MAX);
    evhttp_set_max_body_size(http, HTTP_GUARD_BODY_MAX);
    g->bind = xstrdup(bind != NULL ? bind : "");
    g->bind_key = xstrdup(bind_key);
    char hostname[HTTP_GUARD_HOSTNAME_MAX + 1] = "";
    if (gethostname(hostname, sizeof hostname - 1) != 0)
        hostname[0] = '\0'; /* none: only the other names are served */
    g->hostname = xstrdup(hostname);
    pthread_mutex_init(&g->allowed_lock, NULL);
    g->allowed = allowed_names(allowed_hosts, hostname);
    g->what = xstrdup(what);
    g->loopback = cfg_bind_is_loopback(bind);
    log_limit_init(&g->refusal_log, "requests", HTTP_GUARD_LOG_MS); /* only log_limit_count: no recovery line */
    return g;
}

/* 1 when req has more than one Host header (evhttp_find_header gives the
 * first; a proxy in front may have routed by another). */
static int hosts_repeated(struct evhttp_request *req)
{
    int hosts = 0;
    struct evkeyval *h;
    TAILQ_FOREACH(h, evhttp_request_get_input_headers(req), next)
    {
        if (strcasecmp(h->key, "Host") == 0 && ++hosts > 1)
            return 1;
    }
    return 0;
}

/* Refuse req with status and reason, body the line text. */
static void refuse(struct evhttp_request *req, int status, const char *reason, const char *text)
{
    struct evbuffer *body = evbuffer_new();
    if (body == NULL)
        abort(); /* out of memory (CONTRIBUTING.md) */
    evbuffer_add(body, text, strlen(text));
    evhttp_add_header(evhttp_request_get_output_headers(req), "Content-Type", "text/plain");
    evhttp_send_reply(req, status, reason, body);
    evbuffer_free(body);
}

int http_guard_admit(http_guard_t *g, struct evhttp_request *req)
{
    http_conns_request_in(g->conns, req); /* the head is whole: its deadline ends */
    if (hosts_repeated(req)) {
        g->refused++;
        refuse(req, 400, "Bad Request", "bad request: more than one Host header\n");
        return 0;
    }
    const char *host = evhttp_find_header(evhttp_request_get_input_headers(req), "Host");
    if (!g->loopback)
        return 1;
    pthread_mutex_lock(&g->allowed_lock);
    int allowed = http_host_allowed(host, g->bind, g->allowed);
    pthread_mutex_unlock(&g->allowed_lock);
    if (allowed)
        return 1;
    g->refused++;
    char shown[HTTP_GUARD_HOST_SHOWN];
    size_t i = 0;
    for (; host[i] != '\0' && i + 1 < sizeof shown; i++)
        shown[i] = host[i] >= 0x20 && host[i] < 0x7f ? host[i] : '?';
    shown[i] = '\0';
    /* one key for every Host: a client naming a new one each time must not get a line each */
    log_limit_count(&g->refusal_log, LOG_LEVEL_WARN, "host",
                    "metrics port: refused a request for host '%s' (%llu so far): only an IP address, localhost, "
                    "this machine's name '%s', %s %s or a name of %s names this loopback listener (DNS rebinding?)",
                    shown, (unsigned long long)g->refused, g->hostname, g->bind_key, g->bind, HTTP_GUARD_ALLOWED_KEY);
    char text[HTTP_GUARD_HOST_SHOWN + 2 * HTTP_GUARD_HOSTNAME_MAX + 200];
    snprintf(text, sizeof text,
             "host '%s' is not %s: use its IP address, localhost or '%s', or list the name in %s (%s is loopback)\n",
             shown, g->what, g->hostname, HTTP_GUARD_ALLOWED_KEY, g->bind_key);
    refuse(req, 421, "Misdirected Request", text);
    return 0;
}

void http_guard_set_allowed(http_guard_t *g, const char *allowed_hosts)
{
    char *names = allowed_names(allowed_hosts, g->hostname), *old;
    pthread_mutex_lock(&g->allowed_lock);
    old = g->allowed;
    g->allowed = names;
    pthread_mutex_unlock(&g->allowed_lock);
    free(old);
}

size_t http_guard_connections(const http_guard_t *g)
{
    return http_conns_open(g->conns);
}

uint64_t http_guard_refused(const http_guard_t *g)
{
    return g->refused;
}

void http_guard_free(http_guard_t *g)
{
    if (g == NULL)
        return;
    http_conns_free(g->conns);
    free(g->bind);
    free(g->bind_key);
    free(g->allowed);
    pthread_mutex_destroy(&g->allowed_lock);
    free(g->hostname);
    free(g->what);
    log_limit_destroy(&g->refusal_log);
    free(g);
}
