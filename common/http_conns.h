/*
 * common/http_conns.h — the open connections of an evhttp server: a cap on
 * how many are open and a deadline on each request's head, against
 * slowloris (evhttp 2.1's own timeout measures only silence, so a client
 * sending a byte a second keeps its connection for hours, and enough of
 * them take every file descriptor). Used by hourglass-console (its
 * max-connections and header-timeout keys) and by every metrics port (the
 * broker's, hourglass-consumer's, hourglass-compensator's: fixed values).
 *
 * What happens at each limit is described at the top of http_conns.c: a
 * connection past the cap is answered 503 with Retry-After (closed
 * unanswered over TLS), a request not whole within the deadline of its
 * first byte (of the accept, for a connection's first request) is answered
 * 408 (closed unanswered when it sent nothing), both with Connection: close
 * and a lingering close, both logged at most once per 10 s.
 *
 * Everything here runs on the thread of the event base the set was made
 * on (the console's loop, the broker's loop, the metrics thread of the
 * consumer or the compensator).
 */
#ifndef HG_COMMON_HTTP_CONNS_H
#define HG_COMMON_HTTP_CONNS_H

#include <stddef.h>

struct bufferevent;
struct event_base;
struct evhttp_request;

typedef struct http_conns_config {
    /* Read at each accept and at each request's first byte, so a SIGHUP
     * that changes them acts on new connections and new requests. */
    const long long *max_connections;   /* the cap (>= 1) */
    const long long *header_timeout_ms; /* a request's deadline; 0: none */
    int tls;                            /* 1: the connections speak TLS (refusals are closed unanswered) */
    const char *what;                   /* names the server in a 503's body: "the console" */
    const char *max_name;               /* names the cap in the 503 and the log: "max-connections" */
    const char *timeout_name;           /* names the deadline in the 408 and the log: "header-timeout" */
    const char *log_prefix;             /* before each log line: "" or "metrics port: " */
} http_conns_config_t;

typedef struct http_conns http_conns_t;

/* The connections of one evhttp on base; cfg is copied (the strings and
 * the values it points to must outlive the set). Free with http_conns_free
 * after evhttp_free (whose close callbacks leave the set empty). Aborts
 * when out of memory. */
http_conns_t *http_conns_new(struct event_base *base, const http_conns_config_t *cfg);
void http_conns_free(http_conns_t *t);

/* A connection was accepted: bev is the bufferevent the evhttp's bevcb made
 * for it, before evhttp makes its evhttp_connection. Later in the same loop
 * turn the connection is refused when *max_connections are open already,
 * else tracked until evhttp closes it; the deadline counts from now. */
void http_conns_accept(http_conns_t *t, struct bufferevent *bev);

/* An evhttp bevcb (evhttp_set_bevcb(http, http_conns_plain_bev, t)) for a
 * plain-HTTP server: a socket bufferevent, as evhttp makes by default,
 * handed to http_conns_accept. */
struct bufferevent *http_conns_plain_bev(struct event_base *base, void *t);

/* A whole request req (head and body) arrived (the request callback, before
 * any reply): its deadline ends; the next starts with the next request's
 * first byte. Until req's reply is written (its on_complete callback, which
 * this sets) its connection is never answered 408: evhttp writes on it. */
void http_conns_request_in(http_conns_t *t, struct evhttp_request *req);

/* A request answered later (the console's login): until
 * http_conns_release(req), when req's connection closes first, gone(arg,
 * detached) runs from its close callback, and req must never be touched
 * again — unless detached is 1: evhttp let go of the request (the client
 * left while it was held), and the holder frees it with
 * evhttp_request_free, outside evhttp's callbacks. Returns 0, or -1 when
 * req's connection is not tracked or holds one already. */
typedef void (*http_conns_gone_fn)(void *arg, int detached);
int http_conns_hold(http_conns_t *t, struct evhttp_request *req, http_conns_gone_fn gone, void *arg);
void http_conns_release(http_conns_t *t, struct evhttp_request *req);

/* How many connections are open (tracked). */
size_t http_conns_open(const http_conns_t *t);

#endif
