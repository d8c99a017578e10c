/*
 * broker/server.c — listener, connections, limits, reply ordering, the
 * shutdown sequence and the metrics HTTP listener (see server.h).
 *
 * Thread: everything here runs on the event-loop thread. The only entry
 * from the storage thread is server_job_done, which the writer calls on this
 * thread (through its completion event).
 *
 * Memory safety rules:
 *  - a connection is never freed inside a callback chain: conn_close detaches
 *    it (out of the id hash, callbacks cleared) and queues it; the reaper
 *    event frees it on a later loop turn;
 *  - a storage completion finds its connection by id; a closed connection is
 *    not in the hash, so its late completions are simply freed;
 *  - every reply goes through conn_write, which enforces max-reply-buffer.
 *
 * Shutdown: RUNNING -> STOPPING (listener off, no more parsing, writer asked
 * to finish its queue and close the store) -> CLOSING (writer done: every
 * connection drains its replies and closes; a 2 s guard timer) -> loop exit.
 */
#include <config.h>   /* autoconf: PACKAGE_VERSION */
#include "base/alloc.h"
#include "broker/server.h"

#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <event2/buffer.h>
#include <event2/http.h>
#include <event2/keyvalq_struct.h>
#include <event2/listener.h>
#include <event2/util.h>

#include "broker/commands.h"
#include "common/log.h"
#include "levels/msg.h"

#define HASH_BUCKETS 4096
#define READ_HIGH_WATERMARK (1u << 20)   /* input held while blocked/paused */
#define ACCEPT_RETRY_MS 100
#define CLOSE_GRACE_MS 2000
#define DRAIN_TIMEOUT_MS 10000          /* a draining client must read its last replies by then */
#define LINGER_MS 1000                   /* discard input this long after a last reply */

enum { SRV_RUNNING = 0, SRV_STOPPING, SRV_CLOSING };

struct reply_slot {
    reply_slot_t *next;
    uint64_t seq;            /* storage slots: the job's seq */
    int filled;
    int blocking;            /* the blocking PULL of this connection */
    job_t *job;              /* storage reply */
    char *data;              /* loop reply (copied) */
    size_t len;
};

struct server {
    const config_t *cfg;
    struct event_base *base;
    struct evconnlistener *listener;
    int port;
    struct event *accept_timer, *reaper, *close_timer, *sig_term, *sig_int;
    struct evhttp *http;
    writer_t *writer;
    int writer_running;
    int state;
    conn_t *all;                     /* open connections */
    conn_t *buckets[HASH_BUCKETS];   /* by id */
    conn_t *dead;                    /* closed, to free */
    uint64_t next_id;
    uint64_t nconns, nblocked;
    uint64_t started_mono;
    uint64_t last_emfile_log;
    resp_buf_t scratch;              /* immediate replies */
    /* counters */
    uint64_t connections_total, rejected, protocol_errors, reply_kills, idle_kills, commands;
};

typedef struct http_job {
    job_t job;
    server_t *srv;
    struct evhttp_request *req;
} http_job_t;

static uint64_t mono_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

/* ---- the id hash and the list of open connections ------------------------------- */

static void conn_link(server_t *s, conn_t *c)
{
    size_t b = c->id % HASH_BUCKETS;
    c->hash_next = s->buckets[b];
    s->buckets[b] = c;
    c->all_prev = NULL;
    c->all_next = s->all;
    if (s->all) { s->all->all_prev = c; }
    s->all = c;
    s->nconns++;
}

static void conn_unlink(server_t *s, conn_t *c)
{
    conn_t **pp = &s->buckets[c->id % HASH_BUCKETS];
    while (*pp && *pp != c) { pp = &(*pp)->hash_next; }
    if (*pp) { *pp = c->hash_next; }
    if (c->all_prev) { c->all_prev->all_next = c->all_next; } else { s->all = c->all_next; }
    if (c->all_next) { c->all_next->all_prev = c->all_prev; }
    c->all_next = c->all_prev = c->hash_next = NULL;
    s->nconns--;
}

static conn_t *conn_find(server_t *s, uint64_t id)
{
    for (conn_t *c = s->buckets[id % HASH_BUCKETS]; c; c = c->hash_next) {
        if (c->id == id) { return c; }
    }
    return NULL;
}

/* ---- closing ----------------------------------------------------------------------- */

static void set_blocked(conn_t *c, int blocked)
{
    if (c->blocked == blocked) { return; }
    c->blocked = blocked;
    if (blocked) { c->srv->nblocked++; } else { c->srv->nblocked--; }
}

/* Detach c now; free it at the next safe point (the reaper). Idempotent. */
static void conn_close(conn_t *c)
{
    if (c->closing) { return; }
    server_t *s = c->srv;
    c->closing = 1;
    conn_unlink(s, c);
    if (c->blocked) {
        if (s->writer_running) { writer_cancel(s->writer, c->id); }
        set_blocked(c, 0);
    }
    bufferevent_disable(c->bev, EV_READ | EV_WRITE);
    bufferevent_setcb(c->bev, NULL, NULL, NULL, NULL);
    c->dead_next = s->dead;
    s->dead = c;
    event_active(s->reaper, 0, 0);
}

static void conn_free(conn_t *c)
{
    reply_slot_t *sl = c->slots_head;
    while (sl) {
        reply_slot_t *n = sl->next;
        job_free(sl->job);
        free(sl->data);
        free(sl);
        sl = n;
    }
    resp_parser_free(&c->parser);
    bufferevent_free(c->bev);
    free(c);
}

static void reaper_cb(evutil_socket_t fd, short what, void *arg)
{
    (void)fd; (void)what;
    server_t *s = arg;
    conn_t *c = s->dead;
    s->dead = NULL;
    while (c) {
        conn_t *n = c->dead_next;
        conn_free(c);
        c = n;
    }
    if (s->state == SRV_CLOSING && s->nconns == 0) { event_base_loopbreak(s->base); }
}

static void linger_read_cb(struct bufferevent *bev, void *arg)
{
    (void)arg;
    struct evbuffer *in = bufferevent_get_input(bev);
    evbuffer_drain(in, evbuffer_get_length(in));
}

static void linger_event_cb(struct bufferevent *bev, short what, void *arg)
{
    (void)bev; (void)what;
    conn_close(arg);   /* EOF, error or the linger timeout: done */
}

/* Close once every reply is written. Closing a socket with unread input
 * makes the kernel send RST, which can destroy the error reply before the
 * client reads it; so the write side is shut first (FIN after the reply) and
 * input is read and discarded until EOF or LINGER_MS, then closed. */
static void conn_maybe_finish(conn_t *c)
{
    if (c->closing || !c->draining || c->nslots > 0 || c->lingering) { return; }
    if (evbuffer_get_length(bufferevent_get_output(c->bev)) != 0) { return; }
    c->lingering = 1;
    evutil_socket_t fd = bufferevent_getfd(c->bev);
    if (fd < 0 || shutdown(fd, SHUT_WR) != 0) {
        conn_close(c);
        return;
    }
    struct evbuffer *in = bufferevent_get_input(c->bev);
    evbuffer_drain(in, evbuffer_get_length(in));
    bufferevent_setcb(c->bev, linger_read_cb, NULL, linger_event_cb, c);
    bufferevent_setwatermark(c->bev, EV_READ, 0, 0);
    struct timeval tv = { LINGER_MS / 1000, (LINGER_MS % 1000) * 1000 };
    bufferevent_set_timeouts(c->bev, &tv, NULL);
    bufferevent_enable(c->bev, EV_READ);
}

static void conn_start_draining(conn_t *c)
{
    if (c->draining) { return; }
    c->draining = 1;
    bufferevent_disable(c->bev, EV_READ);
    /* A client that stops reading must not hold a draining connection forever. */
    struct timeval tv = { DRAIN_TIMEOUT_MS / 1000, (DRAIN_TIMEOUT_MS % 1000) * 1000 };
    bufferevent_set_timeouts(c->bev, NULL, &tv);
    conn_maybe_finish(c);
}

/* ---- replies ------------------------------------------------------------------------ */

/* Append bytes to the socket's output, unless the client already has more
 * than max-reply-buffer unread: then it is disconnected. -1 when closed. */
static int conn_write(conn_t *c, const char *data, size_t len)
{
    if (c->closing) { return -1; }
    struct evbuffer *out = bufferevent_get_output(c->bev);
    size_t waiting = evbuffer_get_length(out);
    if (waiting > (size_t)c->srv->cfg->max_reply_buffer) {
        c->srv->reply_kills++;
        log_warn("closing client id=%llu addr=%s: %zu bytes of replies unread, over max-reply-buffer %lld "
                 "(the client is not reading)", (unsigned long long)c->id, c->addr, waiting,
                 c->srv->cfg->max_reply_buffer);
        conn_close(c);
        return -1;
    }
    if (len > 0 && evbuffer_add(out, data, len) != 0) {
        log_error("client id=%llu: out of memory for a reply; closing", (unsigned long long)c->id);
        conn_close(c);
        return -1;
    }
    return 0;
}

static reply_slot_t *slot_append(conn_t *c, uint64_t seq)
{
    reply_slot_t *sl = xmalloc(sizeof *sl);
    memset(sl, 0, sizeof *sl);
    sl->seq = seq;
    if (c->slots_tail) { c->slots_tail->next = sl; } else { c->slots_head = sl; }
    c->slots_tail = sl;
    c->nslots++;
    return sl;
}

/* A reply computed now: straight out when nothing is ahead of it, else into the FIFO. */
static void conn_reply(conn_t *c, const char *data, size_t len)
{
    if (c->closing) { return; }
    if (c->nslots == 0) {
        conn_write(c, data, len);
        return;
    }
    reply_slot_t *sl = slot_append(c, 0);
    sl->data = xmalloc(len ? len : 1);
    memcpy(sl->data, data, len);
    sl->len = len;
    sl->filled = 1;
}

/* Write filled slots from the head. */
static void conn_flush(conn_t *c)
{
    while (!c->closing && c->slots_head && c->slots_head->filled) {
        reply_slot_t *sl = c->slots_head;
        c->slots_head = sl->next;
        if (c->slots_head == NULL) { c->slots_tail = NULL; }
        c->nslots--;
        if (sl->blocking) { set_blocked(c, 0); }
        c->last_active_mono = mono_ms();
        if (sl->job) {
            conn_write(c, sl->job->reply.raw.data, sl->job->reply.raw.len);
            job_free(sl->job);
        } else {
            conn_write(c, sl->data, sl->len);
            free(sl->data);
        }
        free(sl);
    }
}

/* ---- requests ----------------------------------------------------------------------- */

static void conn_process_input(conn_t *c);

static void conn_execute(conn_t *c, const resp_command_t *cmd)
{
    server_t *s = c->srv;
    s->commands++;
    c->last_active_mono = mono_ms();
    resp_buf_clear(&s->scratch);
    s->scratch.proto = c->proto;
    cmd_call_t call = { .conn = c, .srv = s, .argc = cmd->argc, .argv = cmd->argv, .out = &s->scratch };
    cmd_dispatch(&call);
    if (call.job) {
        job_t *j = call.job;
        j->conn_id = c->id;
        j->seq = ++c->next_seq;
        j->proto = c->proto;
        j->reply.proto = c->proto;
        reply_slot_t *sl = slot_append(c, j->seq);
        if (j->block_set) {
            sl->blocking = 1;
            set_blocked(c, 1);
        }
        writer_submit(s->writer, j);
    } else if (!call.no_reply) {
        conn_reply(c, s->scratch.raw.data, s->scratch.raw.len);
    }
    if (call.close_after) { conn_start_draining(c); }
}

static void conn_process_input(conn_t *c)
{
    server_t *s = c->srv;
    struct evbuffer *in = bufferevent_get_input(c->bev);
    while (!c->closing && !c->draining && !c->blocked && c->nslots < CONN_MAX_PENDING && s->state == SRV_RUNNING) {
        if (evbuffer_get_length(in) == 0) { break; }
        struct evbuffer_iovec v;
        if (evbuffer_peek(in, -1, NULL, &v, 1) < 1) { break; }
        size_t consumed = 0;
        resp_command_t cmd;
        resp_status_t st = resp_parser_feed(&c->parser, v.iov_base, v.iov_len, &consumed, &cmd);
        evbuffer_drain(in, consumed);
        if (st == RESP_OK) {
            conn_execute(c, &cmd);
        } else if (st != RESP_NEED_MORE) {
            s->protocol_errors++;
            log_info("client id=%llu addr=%s: %s; closing after the reply", (unsigned long long)c->id, c->addr,
                     resp_parser_error(&c->parser));
            resp_buf_clear(&s->scratch);
            s->scratch.proto = c->proto;
            resp_add_errorf(&s->scratch, "ERR %s", resp_parser_error(&c->parser));
            conn_reply(c, s->scratch.raw.data, s->scratch.raw.len);
            conn_start_draining(c);
            break;
        }
    }
}

static void read_cb(struct bufferevent *bev, void *arg)
{
    (void)bev;
    conn_process_input(arg);
}

static void write_cb(struct bufferevent *bev, void *arg)
{
    (void)bev;
    conn_maybe_finish(arg);
}

static void event_cb(struct bufferevent *bev, short what, void *arg)
{
    conn_t *c = arg;
    if ((what & BEV_EVENT_TIMEOUT) && (what & BEV_EVENT_WRITING)) {
        log_info("client id=%llu addr=%s read none of its last replies for %d ms; closing",
                 (unsigned long long)c->id, c->addr, DRAIN_TIMEOUT_MS);
        conn_close(c);
        return;
    }
    if (what & BEV_EVENT_TIMEOUT) {
        /* Not idle: waiting on us (blocked PULL, replies to come or still being
         * written), or a reply went out within the idle time (Redis counts
         * writes as activity; the read timeout only sees reads). */
        if (c->blocked || c->nslots > 0 || evbuffer_get_length(bufferevent_get_output(bev)) > 0 ||
            mono_ms() - c->last_active_mono < (uint64_t)c->srv->cfg->idle_timeout_ms) {
            bufferevent_enable(bev, EV_READ);
            return;
        }
        c->srv->idle_kills++;
        log_info("client id=%llu addr=%s idle for %lld ms; closing", (unsigned long long)c->id, c->addr,
                 c->srv->cfg->idle_timeout_ms);
        conn_close(c);
        return;
    }
    if (what & BEV_EVENT_ERROR) {
        int err = EVUTIL_SOCKET_ERROR();
        log_debug("client id=%llu addr=%s: %s; closing", (unsigned long long)c->id, c->addr,
                  evutil_socket_error_to_string(err));
    }
    if (what & (BEV_EVENT_EOF | BEV_EVENT_ERROR)) { conn_close(c); }
}

/* ---- completions from the storage thread ---------------------------------------------- */

void server_job_done(job_t *j, void *ctx)
{
    server_t *s = ctx;
    uint64_t conn_id = j->conn_id;    /* read first: complete() may free an HTTP job */
    if (j->complete) { j->complete(j); }
    if (conn_id == 0) { return; }      /* HTTP: complete() owned and freed it */
    conn_t *c = conn_find(s, conn_id);
    if (c == NULL) { job_free(j); return; }
    reply_slot_t *sl = c->slots_head;
    while (sl && !(sl->seq == j->seq && !sl->filled)) { sl = sl->next; }
    if (sl == NULL) { job_free(j); return; }
    sl->job = j;
    sl->filled = 1;
    conn_flush(c);
    if (c->closing) { return; }
    if (c->draining) { conn_maybe_finish(c); return; }
    conn_process_input(c);
}

static void close_timer_cb(evutil_socket_t fd, short what, void *arg)
{
    (void)fd; (void)what;
    server_t *s = arg;
    if (s->nconns > 0) { log_warn("%llu clients still had replies unwritten at exit", (unsigned long long)s->nconns); }
    event_base_loopbreak(s->base);
}

void server_writer_stopped(void *ctx)
{
    server_t *s = ctx;
    s->writer_running = 0;
    s->state = SRV_CLOSING;
    for (conn_t *c = s->all, *n; c; c = n) {
        n = c->all_next;
        conn_flush(c);
        if (!c->closing) {
            c->draining = 1;
            conn_maybe_finish(c);
        }
    }
    if (s->nconns == 0) {
        event_active(s->reaper, 0, 0);   /* breaks the loop once the dead are freed */
        return;
    }
    struct timeval tv = { CLOSE_GRACE_MS / 1000, (CLOSE_GRACE_MS % 1000) * 1000 };
    evtimer_add(s->close_timer, &tv);
}

void server_shutdown(server_t *s, const char *why)
{
    if (s->state != SRV_RUNNING) { return; }
    log_info("shutting down (%s): finishing the batch in flight", why);
    s->state = SRV_STOPPING;
    if (s->listener) { evconnlistener_disable(s->listener); }
    for (conn_t *c = s->all; c; c = c->all_next) { bufferevent_disable(c->bev, EV_READ); }
    if (s->writer_running) {
        writer_stop(s->writer);
    } else {
        server_writer_stopped(s);
    }
}

/* ---- accepting ---------------------------------------------------------------------------- */

static void format_addr(const struct sockaddr *sa, char *out, size_t outlen)
{
    char host[INET6_ADDRSTRLEN] = "?";
    int port = 0;
    if (sa->sa_family == AF_INET) {
        const struct sockaddr_in *in = (const struct sockaddr_in *)sa;
        evutil_inet_ntop(AF_INET, &in->sin_addr, host, sizeof host);
        port = ntohs(in->sin_port);
        snprintf(out, outlen, "%s:%d", host, port);
    } else if (sa->sa_family == AF_INET6) {
        const struct sockaddr_in6 *in6 = (const struct sockaddr_in6 *)sa;
        evutil_inet_ntop(AF_INET6, &in6->sin6_addr, host, sizeof host);
        port = ntohs(in6->sin6_port);
        snprintf(out, outlen, "[%s]:%d", host, port);
    } else {
        snprintf(out, outlen, "?");
    }
}

static void accept_cb(struct evconnlistener *l, evutil_socket_t fd, struct sockaddr *sa, int salen, void *arg)
{
    (void)l; (void)salen;
    server_t *s = arg;
    if (s->state != SRV_RUNNING) {
        evutil_closesocket(fd);
        return;
    }
    if (s->nconns >= (uint64_t)s->cfg->max_clients) {
        static const char msg[] = "-ERR max number of clients reached\r\n";
        ssize_t w = send(fd, msg, sizeof msg - 1, MSG_NOSIGNAL | MSG_DONTWAIT);
        (void)w;
        evutil_closesocket(fd);
        s->rejected++;
        return;
    }
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    struct bufferevent *bev = bufferevent_socket_new(s->base, fd, BEV_OPT_CLOSE_ON_FREE);
    if (bev == NULL) {
        log_error("cannot create a bufferevent for a new client; closing it");
        evutil_closesocket(fd);
        return;
    }
    conn_t *c = xmalloc(sizeof *c);
    memset(c, 0, sizeof *c);
    c->id = ++s->next_id;
    c->srv = s;
    c->bev = bev;
    c->proto = RESP_PROTO_2;
    c->authenticated = 1;       /* no users configured (security issue) */
    c->roles = ROLE_ALL;
    c->created_mono = c->last_active_mono = mono_ms();
    format_addr(sa, c->addr, sizeof c->addr);
    resp_limits_t lim = {
        .max_args = (size_t)s->cfg->max_args,
        .max_bulk = (size_t)s->cfg->max_bulk,
        .max_inline = (size_t)s->cfg->max_inline,
        .max_query = (size_t)s->cfg->max_query,
    };
    resp_parser_init(&c->parser, &lim);
    conn_link(s, c);
    s->connections_total++;
    bufferevent_setcb(bev, read_cb, write_cb, event_cb, c);
    bufferevent_setwatermark(bev, EV_READ, 0, READ_HIGH_WATERMARK);
    if (s->cfg->idle_timeout_ms > 0) {
        struct timeval tv = { (time_t)(s->cfg->idle_timeout_ms / 1000), (suseconds_t)(s->cfg->idle_timeout_ms % 1000) * 1000 };
        bufferevent_set_timeouts(bev, &tv, NULL);
    }
    bufferevent_enable(bev, EV_READ | EV_WRITE);
    log_debug("client id=%llu addr=%s connected", (unsigned long long)c->id, c->addr);
}

static void accept_timer_cb(evutil_socket_t fd, short what, void *arg)
{
    (void)fd; (void)what;
    server_t *s = arg;
    if (s->state == SRV_RUNNING && s->listener) { evconnlistener_enable(s->listener); }
}

static void accept_error_cb(struct evconnlistener *l, void *arg)
{
    server_t *s = arg;
    int err = EVUTIL_SOCKET_ERROR();
    if (err == EMFILE || err == ENFILE || err == ENOBUFS || err == ENOMEM) {
        uint64_t now = mono_ms();
        if (now >= s->last_emfile_log + 1000) {
            log_warn("accept: %s (%llu clients); pausing accepts for %d ms", evutil_socket_error_to_string(err),
                     (unsigned long long)s->nconns, ACCEPT_RETRY_MS);
            s->last_emfile_log = now;
        }
        evconnlistener_disable(l);
        struct timeval tv = { 0, ACCEPT_RETRY_MS * 1000 };
        evtimer_add(s->accept_timer, &tv);
        return;
    }
    log_warn("accept: %s", evutil_socket_error_to_string(err));
}

/* ---- signals --------------------------------------------------------------------------------- */

static void signal_cb(evutil_socket_t sig, short what, void *arg)
{
    (void)what;
    server_t *s = arg;
    if (s->state != SRV_RUNNING) {
        log_warn("second %s during shutdown: exiting now (the store recovers on the next start)",
                 sig == SIGINT ? "SIGINT" : "SIGTERM");
        _exit(1);
    }
    server_shutdown(s, sig == SIGINT ? "SIGINT" : "SIGTERM");
}

/* ---- HTTP: /metrics and /healthz ------------------------------------------------------------ */

static job_result_t http_metrics_exec(job_t *j, writer_t *w)
{
    metrics_prom_storage(&j->reply.raw, writer_store(w), writer_stats(w), writer_now(w));
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
        evbuffer_add_printf(body, "%s\n", why);
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

/* ---- life cycle ------------------------------------------------------------------------------ */

server_t *server_new(const config_t *cfg, struct event_base *base)
{
    server_t *s = xmalloc(sizeof *s);
    memset(s, 0, sizeof *s);
    s->cfg = cfg;
    s->base = base;
    s->accept_timer = evtimer_new(base, accept_timer_cb, s);
    s->reaper = event_new(base, -1, 0, reaper_cb, s);
    s->close_timer = evtimer_new(base, close_timer_cb, s);
    s->sig_term = evsignal_new(base, SIGTERM, signal_cb, s);
    s->sig_int = evsignal_new(base, SIGINT, signal_cb, s);
    if (!s->accept_timer || !s->reaper || !s->close_timer || !s->sig_term || !s->sig_int) {
        log_error("out of memory creating events");
        abort();
    }
    resp_buf_init(&s->scratch);
    s->started_mono = mono_ms();
    return s;
}

static int resolve(const char *host, int port, struct sockaddr_storage *ss, socklen_t *len, char *err, size_t errlen)
{
    struct addrinfo hints, *res = NULL;
    memset(&hints, 0, sizeof hints);
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
    char portstr[16];
    snprintf(portstr, sizeof portstr, "%d", port);
    int rc = getaddrinfo(host, portstr, &hints, &res);
    if (rc != 0 || res == NULL) {
        snprintf(err, errlen, "cannot resolve bind address %s: %s", host, gai_strerror(rc));
        return -1;
    }
    memcpy(ss, res->ai_addr, res->ai_addrlen);
    *len = res->ai_addrlen;
    freeaddrinfo(res);
    return 0;
}

int server_listen(server_t *s, char *err, size_t errlen)
{
    const config_t *cfg = s->cfg;
    struct sockaddr_storage ss;
    socklen_t sl;
    if (resolve(cfg->bind, (int)cfg->port, &ss, &sl, err, errlen) != 0) { return -1; }
    s->listener = evconnlistener_new_bind(s->base, accept_cb, s,
                                          LEV_OPT_CLOSE_ON_FREE | LEV_OPT_REUSEABLE | LEV_OPT_CLOSE_ON_EXEC,
                                          (int)cfg->tcp_backlog, (struct sockaddr *)&ss, (int)sl);
    if (s->listener == NULL) {
        int e = EVUTIL_SOCKET_ERROR();
        snprintf(err, errlen, "cannot listen on %s:%lld: %s", cfg->bind, cfg->port, evutil_socket_error_to_string(e));
        return -1;
    }
    evconnlistener_set_error_cb(s->listener, accept_error_cb);
    struct sockaddr_storage bound;
    socklen_t bl = sizeof bound;
    if (getsockname(evconnlistener_get_fd(s->listener), (struct sockaddr *)&bound, &bl) == 0) {
        s->port = bound.ss_family == AF_INET6 ? ntohs(((struct sockaddr_in6 *)&bound)->sin6_port)
                                              : ntohs(((struct sockaddr_in *)&bound)->sin_port);
    } else {
        s->port = (int)cfg->port;
    }
    if (cfg->metrics_port > 0) {
        s->http = evhttp_new(s->base);
        if (s->http == NULL) { snprintf(err, errlen, "cannot create the HTTP server"); return -1; }
        evhttp_set_allowed_methods(s->http, EVHTTP_REQ_GET | EVHTTP_REQ_HEAD);
        evhttp_set_gencb(s->http, http_cb, s);
        evhttp_set_timeout(s->http, 30);
        if (evhttp_bind_socket_with_handle(s->http, cfg->metrics_bind, (ev_uint16_t)cfg->metrics_port) == NULL) {
            int e = EVUTIL_SOCKET_ERROR();
            snprintf(err, errlen, "cannot listen for metrics on %s:%lld: %s", cfg->metrics_bind, cfg->metrics_port,
                     evutil_socket_error_to_string(e));
            return -1;
        }
    }
    evsignal_add(s->sig_term, NULL);
    evsignal_add(s->sig_int, NULL);
    return 0;
}

int server_port(const server_t *s) { return s->port; }

void server_set_writer(server_t *s, writer_t *w)
{
    s->writer = w;
    s->writer_running = 1;
}

int server_run(server_t *s)
{
    event_base_dispatch(s->base);
    return 0;
}

void server_free(server_t *s)
{
    if (s == NULL) { return; }
    for (conn_t *c = s->all, *n; c; c = n) {
        n = c->all_next;
        conn_close(c);
    }
    conn_t *c = s->dead;
    s->dead = NULL;
    while (c) { conn_t *n = c->dead_next; conn_free(c); c = n; }
    if (s->http) { evhttp_free(s->http); }
    if (s->listener) { evconnlistener_free(s->listener); }
    event_free(s->accept_timer);
    event_free(s->reaper);
    event_free(s->close_timer);
    event_free(s->sig_term);
    event_free(s->sig_int);
    resp_buf_free(&s->scratch);
    free(s);
}

const config_t *server_config(const server_t *s) { return s->cfg; }
writer_t *server_writer(const server_t *s) { return s->writer; }

void server_loop_info(server_t *s, loop_info_t *li)
{
    memset(li, 0, sizeof *li);
    li->cfg = s->cfg;
    li->port = s->port;
    li->uptime_ms = mono_ms() - s->started_mono;
    li->connected_clients = s->nconns;
    li->blocked_clients = s->nblocked;
    li->connections_total = s->connections_total;
    li->rejected_connections = s->rejected;
    li->protocol_errors = s->protocol_errors;
    li->reply_buffer_kills = s->reply_kills;
    li->idle_kills = s->idle_kills;
    li->commands_processed = s->commands;
    if (s->writer_running) {
        li->jobs_queued = writer_queued(s->writer);
        li->jobs_parked = writer_parked(s->writer);
    }
}

void server_client_list(server_t *s, buf_t *out, const conn_t *only)
{
    uint64_t now = mono_ms();
    for (conn_t *c = s->all; c; c = c->all_next) {
        if (only && c != only) { continue; }
        buf_printf(out, "id=%llu addr=%s name=%s age=%llu idle=%llu flags=%s replies=%zu cmd=%s resp=%d\n",
                    (unsigned long long)c->id, c->addr, c->name, (unsigned long long)((now - c->created_mono) / 1000),
                    (unsigned long long)((now - c->last_active_mono) / 1000), c->blocked ? "b" : "N", c->nslots,
                    c->last_cmd[0] ? c->last_cmd : "NULL", c->proto);
    }
}
