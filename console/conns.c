/*
 * console/conns.c — the console's open connections (contract: console.h,
 * "conns.c"): max-connections and header-timeout, which evhttp 2.1 has
 * neither of (its timeout bounds only the gap between two reads, so a
 * client sending a header line every 20 s holds its connection forever,
 * and enough of them take every file descriptor: slowloris).
 *
 * How a connection is seen: evhttp calls the bevcb (server.c) for each
 * accepted connection before it makes the evhttp_connection; conns_accept
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
 * already open is closed at once, unanswered.
 *
 * header-timeout: a connection's request must be whole (its head and its
 * body, at most 64 KiB) within header-timeout of its first byte — of the
 * accept, for a connection's first request. The first byte is seen by a
 * callback on the bufferevent's input buffer (evhttp takes each head line
 * out as soon as it is whole, so the buffer is usually empty between the
 * lines of a trickling client); the request is whole when it reaches
 * on_request (conns_request_in). Between requests a kept-alive connection
 * has no deadline here: evhttp's timeout (30 s without a byte) ends it.
 * Every CONNS_SWEEP_MS the sweep closes the overdue ones, unanswered. A
 * sweep late by more than CONNS_SWEEP_MS moves every deadline by the delay:
 * the loop was busy (a request waiting on MariaDB or the broker, up to
 * their timeouts) and read nobody's bytes meanwhile, which is no client's
 * fault.
 *
 * Both refusals are logged at most once per CONNS_LOG_MS each, the next
 * line counting those left out.
 *
 * Every entry leaves the list in the connection's close callback, which
 * evhttp calls whenever it frees a connection (and closing one here is
 * evhttp_connection_free too). Threads: the event loop's only.
 */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include "console/console.h"

#include <stdio.h>
#include <stdlib.h>

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/http.h>

#include "base/alloc.h"
#include "base/clock.h"
#include "common/log.h"

#define CONNS_SWEEP_MS 200   /* the deadline holds to within this */
#define CONNS_LOG_MS   10000 /* at most one log line per this long for each kind of refusal */

typedef struct conn_entry conn_entry_t;

struct conn_entry {
    conn_entry_t *prev, *next;
    console_conns_t *set;
    struct bufferevent *bev;            /* pending: referenced until resolved */
    struct evhttp_connection *evcon;    /* NULL while pending */
    struct evbuffer_cb_entry *input_cb; /* on bev's input buffer: the first byte of a request */
    uint64_t accepted_mono;
    uint64_t request_started_mono; /* first byte of the request being read; 0 between requests */
};

/* A log line at most once per CONNS_LOG_MS; the ones in between are counted. */
typedef struct rate_log {
    int logged_once;
    uint64_t logged_mono;
    unsigned long left_out;
} rate_log_t;

struct console_conns {
    console_t *c;
    conn_entry_t *open;    /* resolved connections */
    conn_entry_t *pending; /* accepted this loop turn, the evhttp_connection not known yet */
    size_t nopen;
    struct event *resolve, *sweep;
    uint64_t last_sweep_mono;
    unsigned long long refused, timed_out; /* since the start */
    rate_log_t refused_log, timed_out_log;
};

static void list_insert(conn_entry_t **head, conn_entry_t *e)
{
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

/* Bytes came into the connection's input: the first of a request starts its deadline. */
static void on_input(struct evbuffer *buf, const struct evbuffer_cb_info *info, void *arg)
{
    (void)buf;
    conn_entry_t *e = arg;
    if (info->n_added > 0 && e->request_started_mono == 0)
        e->request_started_mono = clock_mono_ms();
}

/* evhttp frees the connection (or resets it): forget it. */
static void on_close(struct evhttp_connection *evcon, void *arg)
{
    conn_entry_t *e = arg;
    console_conns_t *t = e->set;
    evhttp_connection_set_closecb(evcon, NULL, NULL); /* once: evhttp may reset a connection, then free it */
    evbuffer_remove_cb_entry(bufferevent_get_input(e->bev), e->input_cb);
    list_remove(&t->open, e);
    t->nopen--;
    free(e);
}

/* After the accepts of this loop turn: learn each new connection's
 * evhttp_connection, close it at once over max-connections, else track it. */
static void on_resolve(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    console_conns_t *t = arg;
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
        if (t->nopen >= (size_t)t->c->cfg->max_connections) {
            unsigned long more = 0;
            t->refused++;
            if (rate_log_may(&t->refused_log, &more))
                log_warn("closed a new connection from %s at once: %zu connections are open (max-connections "
                         "%lld); %lu more closed since the last such line, %llu since the start",
                         peer_of(evcon), t->nopen, t->c->cfg->max_connections, more, t->refused);
            free(e);
            evhttp_connection_free(evcon);
            continue;
        }
        e->evcon = evcon;
        e->request_started_mono = e->accepted_mono;
        e->input_cb = evbuffer_add_cb(bufferevent_get_input(e->bev), on_input, e);
        if (e->input_cb == NULL)
            abort(); /* out of memory (CONTRIBUTING.md) */
        list_insert(&t->open, e);
        t->nopen++;
        evhttp_connection_set_closecb(evcon, on_close, e);
    }
}

/* Close every connection whose request is not whole header-timeout after its first byte. */
static void on_sweep(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    console_conns_t *t = arg;
    long long limit = t->c->cfg->header_timeout_ms;
    uint64_t now = clock_mono_ms(), stalled = 0;
    if (t->last_sweep_mono != 0 && now - t->last_sweep_mono > 2 * CONNS_SWEEP_MS)
        stalled = now - t->last_sweep_mono - CONNS_SWEEP_MS;
    t->last_sweep_mono = now;
    if (limit <= 0)
        return;
    for (conn_entry_t *e = t->open, *next; e != NULL; e = next) {
        next = e->next;
        if (e->request_started_mono != 0 && stalled > 0) /* the loop did not read meanwhile: not the client's time */
            e->request_started_mono = e->request_started_mono + stalled < now ? e->request_started_mono + stalled : now;
        if (e->request_started_mono == 0 || now - e->request_started_mono < (uint64_t)limit)
            continue;
        unsigned long more = 0;
        t->timed_out++;
        if (rate_log_may(&t->timed_out_log, &more))
            log_warn("closed the connection of %s: its request is not whole %llu ms after its first byte "
                     "(header-timeout %lld ms; a slow or stuck client, or slowloris); %lu more closed since the "
                     "last such line, %llu since the start",
                     peer_of(e->evcon), (unsigned long long)(now - e->request_started_mono), limit, more, t->timed_out);
        evhttp_connection_free(e->evcon); /* its close callback frees e */
    }
}

console_conns_t *conns_new(console_t *c)
{
    console_conns_t *t = xcalloc(1, sizeof *t);
    t->c = c;
    t->resolve = event_new(c->base, -1, 0, on_resolve, t);
    t->sweep = event_new(c->base, -1, EV_PERSIST, on_sweep, t);
    if (t->resolve == NULL || t->sweep == NULL)
        abort(); /* out of memory (CONTRIBUTING.md) */
    struct timeval every = { 0, CONNS_SWEEP_MS * 1000 };
    event_add(t->sweep, &every);
    return t;
}

void conns_accept(console_conns_t *t, struct bufferevent *bev)
{
    conn_entry_t *e = xcalloc(1, sizeof *e);
    e->set = t;
    e->bev = bev;
    e->accepted_mono = clock_mono_ms();
    bufferevent_incref(bev);
    list_insert(&t->pending, e);
    event_active(t->resolve, EV_TIMEOUT, 0);
}

void conns_request_in(console_conns_t *t, struct evhttp_connection *evcon)
{
    for (conn_entry_t *e = t->open; e != NULL; e = e->next)
        if (e->evcon == evcon) {
            /* what is in the input already is the start of the next request (pipelined) */
            e->request_started_mono = evbuffer_get_length(bufferevent_get_input(e->bev)) > 0 ? clock_mono_ms() : 0;
            return;
        }
}

size_t conns_open(const console_conns_t *t)
{
    return t->nopen;
}

void conns_free(console_conns_t *t)
{
    if (t == NULL)
        return;
    conn_entry_t *e;
    while ((e = t->pending) != NULL) {
        list_remove(&t->pending, e);
        bufferevent_decref(e->bev);
        free(e);
    }
    while ((e = t->open) != NULL) { /* none after evhttp_free: each left in its close callback */
        list_remove(&t->open, e);
        evbuffer_remove_cb_entry(bufferevent_get_input(e->bev), e->input_cb);
        evhttp_connection_set_closecb(e->evcon, NULL, NULL);
        free(e);
    }
    event_free(t->resolve);
    event_free(t->sweep);
    free(t);
}
