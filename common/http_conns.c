/*
 * common/http_conns.c — an evhttp server's open connections (contract:
 * http_conns.h): a cap on them and a deadline on each request's head
 * (the console's max-connections and header-timeout; fixed values on the
 * metrics ports), which evhttp 2.1 has neither of (its timeout bounds only
 * the gap between two reads, so a client sending a header line every 20 s
 * holds its connection forever, and enough of them take every file
 * descriptor: slowloris).
 *
 * How a connection is seen: evhttp calls the bevcb (the program's, or
 * http_conns_plain_bev) for each accepted connection before it makes the
 * evhttp_connection; http_conns_accept
 * takes a reference on that bufferevent and wakes `resolve`, which runs
 * once evhttp has finished with the accept. By then evhttp has set its own
 * callbacks on the bufferevent with the evhttp_connection as their
 * argument: that argument is the connection (checked against
 * evhttp_connection_get_bufferevent). Had evhttp given the connection up in
 * between, bufferevent_free has cleared the callbacks (our reference kept
 * the memory): the argument is NULL and the entry is dropped. The
 * reference goes at once. libevent 2.2 has evhttp_set_newreqcb and
 * evhttp_set_max_connections for this; 2.1.12 (Debian 12) does not.
 *
 * max-connections: a connection resolved while max-connections are
 * already open is answered 503 Service Unavailable (Retry-After) and
 * closed; over https it is closed at once, unanswered (a TLS handshake
 * only to refuse would spend the CPU the limit is there to save).
 *
 * header-timeout: a connection's request must be whole (its head and its
 * body, at most 64 KiB) within header-timeout of its first byte — of the
 * accept, for a connection's first request. The first byte is seen by a
 * callback on the bufferevent's input buffer (evhttp takes each head line
 * out as soon as it is whole, so the buffer is usually empty between the
 * lines of a trickling client); the request is whole when it reaches
 * on_request (http_conns_request_in). Between requests a kept-alive connection
 * has no deadline here: evhttp's timeout (30 s without a byte) ends it.
 * Every CONNS_SWEEP_MS the sweep closes the overdue ones: answered 408
 * Request Timeout when the client sent a byte of the request (a connection
 * that sent nothing — a browser's preconnect — is closed unanswered, as
 * nginx and Apache do) and evhttp is not writing a reply on it. A sweep
 * late by more than CONNS_SWEEP_MS moves every deadline by the delay: the
 * loop was busy (a request waiting on MariaDB or the broker, up to their
 * timeouts) and read nobody's bytes meanwhile, which is no client's fault.
 *
 * Answering a refusal (answer_and_close): evhttp 2.1 has no call for it,
 * so the connection is taken from evhttp — only while evhttp is reading a
 * request, never while it writes one (http_conns_request_in to the reply's
 * on_complete): its input is drained and read no more (a deferred read
 * evhttp may have scheduled then finds nothing and does nothing), the
 * bufferevent's callbacks become ours, the reply goes out with
 * Connection: close. Once written, the socket is shut for writing and what
 * the client still sends is read and dropped until its EOF (a close with
 * unread input would be a reset, which can destroy the reply before the
 * client reads it: a lingering close), at most CONNS_LINGER_MS; then
 * evhttp_connection_free. A closing connection counts no more against
 * max-connections; at most CONNS_CLOSING_MAX are closing at once (a flood
 * past max-connections must not hold descriptors for CONNS_LINGER_MS
 * each): past that a refusal is closed at once, unanswered.
 *
 * SIGHUP (the console's .reload): the cap is read at each accept, so a lower
 * value refuses new connections and leaves the open ones be; a request's
 * deadline is the one in force when its first byte came.
 *
 * Both refusals are logged at most once per CONNS_LOG_MS each, the next
 * line counting those left out.
 *
 * A request answered later (the console's login, whose broker check runs
 * on a thread of its own) is held (http_conns_hold) until its reply is made
 * (http_conns_release): when its connection closes first, the close callback
 * tells the holder, which never touches the request again — evhttp frees
 * a request still attached to the connection it frees; one it detached
 * (the client's EOF while the request was held) is the holder's to free.
 * evhttp 2.1 reads nothing from a connection whose request waits for its
 * reply, so it would not see the client close it: while a request is
 * held, an event of ours watches the socket for the client's end
 * (EV_CLOSED: the peer's FIN, without reading a byte evhttp would miss),
 * and frees the connection then (on_held_closed), which tells the holder
 * as above. A client that only shuts its sending half (shutdown(SHUT_WR))
 * and waits for the answer is taken to have left too, as nginx does; an
 * event backend without EV_CLOSED (epoll has it) watches nothing.
 *
 * Every entry leaves its list in the connection's close callback, which
 * evhttp calls whenever it frees a connection (and closing one here is
 * evhttp_connection_free too). Threads: the event loop's only.
 */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include "common/http_conns.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>
#include <event2/http.h>

#include "base/alloc.h"
#include "base/clock.h"
#include "common/log.h"

#define CONNS_SWEEP_MS      200   /* the deadline holds to within this */
#define CONNS_LOG_MS        10000 /* at most one log line per this long for each kind of refusal */
#define CONNS_LINGER_MS     2000  /* a refused connection's reply and lingering close take this long at most */
#define CONNS_RETRY_AFTER_S 5     /* a 503's Retry-After */
#define CONNS_CLOSING_MAX   64    /* refused connections answered and lingering at once; more are closed unanswered */

typedef struct conn_entry conn_entry_t;

struct conn_entry {
    conn_entry_t *prev, *next;
    conn_entry_t **list; /* the list it is on: the set's pending, open or closing */
    http_conns_t *set;
    struct bufferevent *bev;            /* pending: referenced until resolved */
    struct evhttp_connection *evcon;    /* NULL while pending */
    struct evbuffer_cb_entry *input_cb; /* on bev's input buffer: the first byte of a request; NULL when closing */
    uint64_t accepted_mono;
    uint64_t request_started_mono; /* first byte of the request being read; 0 between requests */
    long long limit_ms;            /* the header-timeout in force when that request started (0: none) */
    int request_bytes;             /* the client sent a byte of that request (a refusal may be answered) */
    int replying;                  /* evhttp writes a reply: from on_request to its on_complete */
    uint64_t closing_mono;         /* when answer_and_close took it (on the closing list) */
    struct evhttp_request *held;   /* a request answered later (http_conns_hold), until http_conns_release */
    http_conns_gone_fn held_gone;  /* told when the connection closes first */
    void *held_arg;
    struct event *held_watch; /* EV_CLOSED on the socket while held (the client's end); NULL when none */
};

/* A log line at most once per CONNS_LOG_MS; the ones in between are counted. */
typedef struct rate_log {
    int logged_once;
    uint64_t logged_mono;
    unsigned long left_out;
} rate_log_t;

struct http_conns {
    struct event_base *base;
    http_conns_config_t cfg;
    conn_entry_t *open;    /* resolved connections */
    conn_entry_t *pending; /* accepted this loop turn, the evhttp_connection not known yet */
    conn_entry_t *closing; /* refused: their answer being written, then a lingering close */
    size_t nopen;          /* on open */
    size_t nclosing;       /* on closing */
    struct event *resolve, *sweep;
    uint64_t last_sweep_mono;
    unsigned long long refused, timed_out; /* since the start */
    rate_log_t refused_log, timed_out_log;
};

static void list_insert(conn_entry_t **head, conn_entry_t *e)
{
    e->list = head;
    e->prev = NULL;
    e->next = *head;
    if (*head != NULL)
        (*head)->prev = e;
    *head = e;
}

static void list_remove(conn_entry_t **head, conn_entry_t *e)
{
    if (e->prev != NULL)
        e->prev->next = e->next;
    else
        *head = e->next;
    if (e->next != NULL)
        e->next->prev = e->prev;
    e->prev = e->next = NULL;
    e->list = NULL;
}

/* 1 when a line may be logged now; *more: how many were left out before it. */
static int rate_log_may(rate_log_t *r, unsigned long *more)
{
    uint64_t now = clock_mono_ms();
    if (r->logged_once && now - r->logged_mono < CONNS_LOG_MS) {
        r->left_out++;
        return 0;
    }
    *more = r->left_out;
    r->logged_once = 1;
    r->logged_mono = now;
    r->left_out = 0;
    return 1;
}

static const char *peer_of(struct evhttp_connection *evcon)
{
    char *addr = NULL;
    ev_uint16_t port = 0;
    evhttp_connection_get_peer(evcon, &addr, &port);
    return addr != NULL ? addr : "?";
}

/* A request's deadline starts now, under the header-timeout in force now. */
static void request_starts(conn_entry_t *e, uint64_t now)
{
    e->request_started_mono = now;
    e->limit_ms = *e->set->cfg.header_timeout_ms;
}

/* Bytes came into the connection's input: the first of a request starts its deadline. */
static void on_input(struct evbuffer *buf, const struct evbuffer_cb_info *info, void *arg)
{
    (void)buf;
    conn_entry_t *e = arg;
    if (info->n_added == 0)
        return;
    if (e->request_started_mono == 0)
        request_starts(e, clock_mono_ms());
    e->request_bytes = 1;
}

/* Move e off the list it is on (open counts in nopen, closing in nclosing). */
static void unlist(conn_entry_t *e)
{
    if (e->list == &e->set->open)
        e->set->nopen--;
    else if (e->list == &e->set->closing)
        e->set->nclosing--;
    list_remove(e->list, e);
}

/* Stop watching e's socket for the client's end. */
static void unwatch(conn_entry_t *e)
{
    if (e->held_watch != NULL)
        event_free(e->held_watch);
    e->held_watch = NULL;
}

/* evhttp frees the connection (or resets it): forget it. A request held for
 * a later reply is gone with it: its owner is told (before evhttp frees an
 * attached request; a request evhttp detached, on the client's EOF while we
 * held it, is the owner's to free). */
static void on_close(struct evhttp_connection *evcon, void *arg)
{
    conn_entry_t *e = arg;
    evhttp_connection_set_closecb(evcon, NULL, NULL); /* once: evhttp may reset a connection, then free it */
    unwatch(e);
    if (e->held != NULL) {
        struct evhttp_request *req = e->held;
        e->held = NULL;
        e->held_gone(e->held_arg, evhttp_request_get_connection(req) == NULL);
    }
    if (e->input_cb != NULL)
        evbuffer_remove_cb_entry(bufferevent_get_input(e->bev), e->input_cb);
    unlist(e);
    free(e);
}

/* ---- a refusal answered: the connection taken from evhttp (see the top) */

/* The refused connection's end: its close callback frees e. */
static void end_refused(conn_entry_t *e)
{
    evhttp_connection_free(e->evcon);
}

/* The lingering close: what the client still sends is dropped. */
static void on_linger_read(struct bufferevent *bev, void *arg)
{
    (void)arg;
    struct evbuffer *in = bufferevent_get_input(bev);
    evbuffer_drain(in, evbuffer_get_length(in));
}

/* EOF, an error or evhttp's timeout while answering or lingering: the end. */
static void on_refused_event(struct bufferevent *bev, short what, void *arg)
{
    (void)bev;
    (void)what;
    end_refused(arg);
}

/* The answer is written: shut the socket for writing (plain http), then
 * read until the client's EOF; over TLS end at once. */
static void on_answered(struct bufferevent *bev, void *arg)
{
    conn_entry_t *e = arg;
    if (e->set->cfg.tls || shutdown(bufferevent_getfd(bev), SHUT_WR) != 0) {
        end_refused(e);
        return;
    }
    bufferevent_setcb(bev, on_linger_read, NULL, on_refused_event, e);
    bufferevent_disable(bev, EV_WRITE);
    bufferevent_enable(bev, EV_READ);
}

/* Answer e's connection "status" (a status line's code and phrase) with
 * headers (each ending in CRLF, or "") and body, Connection: close, and
 * close it (the top of this file). Only while evhttp is not writing on it
 * (the caller checks). */
static void answer_and_close(conn_entry_t *e, const char *status, const char *headers, const char *body)
{
    http_conns_t *t = e->set;
    struct bufferevent *bev = e->bev;
    struct evbuffer *in = bufferevent_get_input(bev);
    char date[64];
    time_t now = time(NULL);
    struct tm tm;
    strftime(date, sizeof date, "%a, %d %b %Y %H:%M:%S GMT", gmtime_r(&now, &tm));
    if (e->input_cb != NULL) {
        evbuffer_remove_cb_entry(in, e->input_cb);
        e->input_cb = NULL;
    }
    bufferevent_disable(bev, EV_READ);
    evbuffer_drain(in, evbuffer_get_length(in));
    bufferevent_setcb(bev, NULL, on_answered, on_refused_event, e);
    evbuffer_add_printf(bufferevent_get_output(bev),
                        "HTTP/1.1 %s\r\nDate: %s\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: "
                        "%zu\r\nConnection: close\r\nCache-Control: no-store\r\nX-Content-Type-Options: "
                        "nosniff\r\n%s\r\n%s",
                        status, date, strlen(body), headers, body);
    bufferevent_enable(bev, EV_WRITE);
    if (e->list != NULL)
        unlist(e);
    e->closing_mono = clock_mono_ms();
    list_insert(&t->closing, e);
    t->nclosing++;
}

/* The reply to the request on_request took is written: evhttp reads the next one. */
static void on_replied(struct evhttp_request *req, void *arg)
{
    (void)req;
    conn_entry_t *e = arg;
    e->replying = 0;
}

/* After the accepts of this loop turn: learn each new connection's
 * evhttp_connection, close it at once over max-connections, else track it. */
static void on_resolve(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    http_conns_t *t = arg;
    while (t->pending != NULL) {
        conn_entry_t *e = t->pending; /* the oldest first: those accepted earlier get the last places */
        while (e->next != NULL)
            e = e->next;
        list_remove(&t->pending, e);
        void *cbarg = NULL;
        bufferevent_getcb(e->bev, NULL, NULL, NULL, &cbarg);
        struct evhttp_connection *evcon = cbarg;
        if (evcon == NULL || evhttp_connection_get_bufferevent(evcon) != e->bev) {
            bufferevent_decref(e->bev); /* evhttp gave it up already (or is not done with it): nothing to track */
            free(e);
            continue;
        }
        bufferevent_decref(e->bev); /* evhttp's own reference keeps it now */
        e->evcon = evcon;
        long long max = *t->cfg.max_connections; /* read at each accept: SIGHUP may lower it */
        if (t->nopen >= (size_t)max) {
            unsigned long more = 0;
            /* unanswered over https (a handshake only to refuse: the CPU the limit saves) and in a flood */
            int unanswered = t->cfg.tls || t->nclosing >= CONNS_CLOSING_MAX;
            t->refused++;
            if (rate_log_may(&t->refused_log, &more))
                log_warn("%sclosed a new connection from %s at once%s: %zu connections are open (%s %lld); %lu more "
                         "closed since the last such line, %llu since the start",
                         t->cfg.log_prefix, peer_of(evcon), unanswered ? ", unanswered" : " with 503", t->nopen,
                         t->cfg.max_name, max, more, t->refused);
            if (unanswered) {
                free(e);
                evhttp_connection_free(evcon);
                continue;
            }
            char body[200], retry[64];
            snprintf(body, sizeof body, "%s has %zu connections open (%s %lld): try again in a few seconds\n",
                     t->cfg.what, t->nopen, t->cfg.max_name, max);
            snprintf(retry, sizeof retry, "Retry-After: %d\r\n", CONNS_RETRY_AFTER_S);
            evhttp_connection_set_closecb(evcon, on_close, e);
            answer_and_close(e, "503 Service Unavailable", retry, body);
            continue;
        }
        request_starts(e, e->accepted_mono);
        e->input_cb = evbuffer_add_cb(bufferevent_get_input(e->bev), on_input, e);
        if (e->input_cb == NULL)
            abort(); /* out of memory (CONTRIBUTING.md) */
        list_insert(&t->open, e);
        t->nopen++;
        evhttp_connection_set_closecb(evcon, on_close, e);
    }
}

/* Close every connection whose request is not whole header-timeout after
 * its first byte (answered 408 when it can be: the top of this file), and
 * end the refused ones whose answer or lingering close outlasts
 * CONNS_LINGER_MS. */
static void on_sweep(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    http_conns_t *t = arg;
    uint64_t now = clock_mono_ms(), stalled = 0;
    if (t->last_sweep_mono != 0 && now - t->last_sweep_mono > 2 * CONNS_SWEEP_MS)
        stalled = now - t->last_sweep_mono - CONNS_SWEEP_MS;
    t->last_sweep_mono = now;
    for (conn_entry_t *e = t->closing, *next; e != NULL; e = next) {
        next = e->next;
        if (now - e->closing_mono >= CONNS_LINGER_MS)
            end_refused(e); /* its close callback frees e */
    }
    for (conn_entry_t *e = t->open, *next; e != NULL; e = next) {
        next = e->next;
        if (e->request_started_mono != 0 && stalled > 0) /* the loop did not read meanwhile: not the client's time */
            e->request_started_mono = e->request_started_mono + stalled < now ? e->request_started_mono + stalled : now;
        if (e->request_started_mono == 0 || e->limit_ms <= 0 || now - e->request_started_mono < (uint64_t)e->limit_ms)
            continue;
        unsigned long long waited = (unsigned long long)(now - e->request_started_mono);
        int answer = e->request_bytes && !e->replying && evbuffer_get_length(bufferevent_get_output(e->bev)) == 0 &&
                     t->nclosing < CONNS_CLOSING_MAX;
        unsigned long more = 0;
        t->timed_out++;
        if (rate_log_may(&t->timed_out_log, &more))
            log_warn("%sclosed the connection of %s%s: its request is not whole %llu ms after its first byte "
                     "(%s %lld ms; a slow or stuck client, or slowloris); %lu more closed since the last such line, "
                     "%llu since the start",
                     t->cfg.log_prefix, peer_of(e->evcon), answer ? " with 408" : "", waited, t->cfg.timeout_name,
                     e->limit_ms, more, t->timed_out);
        if (!answer) {
            evhttp_connection_free(e->evcon); /* its close callback frees e */
            continue;
        }
        char body[200];
        snprintf(body, sizeof body,
                 "the request was not whole %llu ms after its first byte (%s %lld ms): send it at once\n", waited,
                 t->cfg.timeout_name, e->limit_ms);
        answer_and_close(e, "408 Request Timeout", "", body);
    }
}

http_conns_t *http_conns_new(struct event_base *base, const http_conns_config_t *cfg)
{
    http_conns_t *t = xcalloc(1, sizeof *t);
    t->base = base;
    t->cfg = *cfg;
    t->resolve = event_new(base, -1, 0, on_resolve, t);
    t->sweep = event_new(base, -1, EV_PERSIST, on_sweep, t);
    if (t->resolve == NULL || t->sweep == NULL)
        abort(); /* out of memory (CONTRIBUTING.md) */
    struct timeval every = { 0, CONNS_SWEEP_MS * 1000 };
    event_add(t->sweep, &every);
    return t;
}

void http_conns_accept(http_conns_t *t, struct bufferevent *bev)
{
    conn_entry_t *e = xcalloc(1, sizeof *e);
    e->set = t;
    e->bev = bev;
    e->accepted_mono = clock_mono_ms();
    bufferevent_incref(bev);
    list_insert(&t->pending, e);
    event_active(t->resolve, EV_TIMEOUT, 0);
}

void http_conns_request_in(http_conns_t *t, struct evhttp_request *req)
{
    struct evhttp_connection *evcon = evhttp_request_get_connection(req);
    for (conn_entry_t *e = t->open; e != NULL; e = e->next)
        if (e->evcon == evcon) {
            /* what is in the input already is the start of the next request (pipelined) */
            int pipelined = evbuffer_get_length(bufferevent_get_input(e->bev)) > 0;
            e->request_started_mono = 0;
            e->request_bytes = pipelined;
            if (pipelined)
                request_starts(e, clock_mono_ms());
            e->replying = 1;
            evhttp_request_set_on_complete_cb(req, on_replied, e);
            return;
        }
}

/* The tracked entry of req's connection, or NULL. */
static conn_entry_t *entry_of(http_conns_t *t, struct evhttp_request *req)
{
    struct evhttp_connection *evcon = evhttp_request_get_connection(req);
    for (conn_entry_t *e = t->open; evcon != NULL && e != NULL; e = e->next)
        if (e->evcon == evcon)
            return e;
    return NULL;
}

/* The client of a held request closed its socket (its FIN): the
 * connection is freed, and its close callback (on_close) tells the holder. */
static void on_held_closed(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    conn_entry_t *e = arg;
    unwatch(e);
    evhttp_connection_free(e->evcon);
}

int http_conns_hold(http_conns_t *t, struct evhttp_request *req, http_conns_gone_fn gone, void *arg)
{
    conn_entry_t *e = entry_of(t, req);
    if (e == NULL || e->held != NULL)
        return -1;
    e->held = req;
    e->held_gone = gone;
    e->held_arg = arg;
    if (event_base_get_features(t->base) & EV_FEATURE_EARLY_CLOSE) {
        e->held_watch = event_new(t->base, bufferevent_getfd(e->bev), EV_CLOSED, on_held_closed, e);
        if (e->held_watch == NULL)
            abort(); /* out of memory (CONTRIBUTING.md) */
        event_add(e->held_watch, NULL);
    }
    return 0;
}

void http_conns_release(http_conns_t *t, struct evhttp_request *req)
{
    conn_entry_t *e = entry_of(t, req);
    if (e != NULL && e->held == req) {
        e->held = NULL;
        unwatch(e);
    }
}

size_t http_conns_open(const http_conns_t *t)
{
    return t->nopen;
}

void http_conns_free(http_conns_t *t)
{
    if (t == NULL)
        return;
    conn_entry_t *e;
    while ((e = t->pending) != NULL) {
        list_remove(&t->pending, e);
        bufferevent_decref(e->bev);
        free(e);
    }
    conn_entry_t **lists[] = { &t->open, &t->closing };
    for (size_t i = 0; i < 2; i++)
        while ((e = *lists[i]) != NULL) { /* none after evhttp_free: each left in its close callback */
            unlist(e);
            unwatch(e);
            if (e->input_cb != NULL)
                evbuffer_remove_cb_entry(bufferevent_get_input(e->bev), e->input_cb);
            evhttp_connection_set_closecb(e->evcon, NULL, NULL);
            free(e);
        }
    event_free(t->resolve);
    event_free(t->sweep);
    free(t);
}

struct bufferevent *http_conns_plain_bev(struct event_base *base, void *arg)
{
    struct bufferevent *bev = bufferevent_socket_new(base, -1, 0);
    if (bev == NULL)
        abort(); /* out of memory (CONTRIBUTING.md): evhttp would make a bufferevent of its own of a NULL */
    http_conns_accept(arg, bev);
    return bev;
}
