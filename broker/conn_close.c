/*
 * broker/conn_close.c — closing a client connection: detaching it
 * (conn_close), freeing it at a safe point (the reaper), and the orderly end
 * of a draining one: once every reply is written the write side is shut
 * (close_notify first on TLS), input is discarded until the client has
 * acknowledged every reply with nothing unread (or its EOF, or a 1 s linger),
 * then it is closed, so a close never resets a client (conn_maybe_finish).
 *
 * Invariants: a connection is never freed inside a callback chain — it is
 * detached (out of the id map and list, callbacks cleared, its unanswered
 * jobs cancelled in the writer) and queued on the dead list, which the
 * reaper event frees on a later loop turn. A draining connection parses
 * nothing more and is closed if it does not read its last replies within
 * CONN_DRAIN_TIMEOUT_MS.
 *
 * Thread: everything here runs on the event-loop thread.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>

#include <linux/sockios.h>

#include <event2/buffer.h>
#include <event2/bufferevent_ssl.h>
#include <openssl/ssl.h>

#include "base/clock.h"
#include "broker/cmd_shared.h"
#include "broker/conn_internal.h"

#define LINGER_MS          1000 /* at most this long discarding input after a last reply */
#define LINGER_POLL_MS     5    /* a lingering connection first checks conn_linger_done this long after... */
#define LINGER_POLL_MAX_MS 100  /* ...then after as long as it has lingered, up to this: ~14 checks in LINGER_MS */

/* 1 when c has a reply slot not filled yet: a job the storage thread (or the
 * auth thread) has not answered. */
static int conn_awaits_jobs(const conn_t *c)
{
    for (const reply_slot_t *sl = c->slots_head; sl != NULL; sl = sl->next) {
        if (!sl->filled) {
            return 1;
        }
    }
    return 0;
}

/* Detach c now; free it at the next safe point (the reaper). Idempotent.
 * When it has jobs the storage thread has not answered, the writer is told
 * (writer_cancel): its parked PULL BLOCK and its queued read-only jobs are
 * dropped unrun (nobody reads their replies; a client that pipelined
 * listings and left costs no more storage work), its writes still run. */
void conn_close(conn_t *c)
{
    if (c->closing) {
        return;
    }
    conn_set_t *s = c->set;
    c->closing = 1;
    conn_unlink(s, c);
    if (s->writer_running && (c->blocked || conn_awaits_jobs(c))) {
        writer_cancel(s->writer, c->id);
    }
    conn_mark_blocked(c, 0);
    bufferevent_disable(c->bev, EV_READ | EV_WRITE);
    bufferevent_setcb(c->bev, NULL, NULL, NULL, NULL);
    c->dead_next = s->dead;
    s->dead = c;
    event_active(s->reaper, 0, 0);
}

void conn_free(conn_t *c)
{
    reply_slot_t *sl = c->slots_head;
    while (sl) {
        reply_slot_t *n = sl->next;
        job_free(sl->job);
        free(sl->data);
        conn_slot_release(c->set, sl);
        sl = n;
    }
    resp_parser_free(&c->parser);
    cmd_multi_free(c->multi);
    bufferevent_free(c->bev);
    free(c);
}

void conn_free_dead(conn_set_t *s)
{
    conn_t *c = s->dead;
    s->dead = NULL;
    while (c) {
        conn_t *n = c->dead_next;
        conn_free(c);
        c = n;
    }
}

void conn_reaper_cb(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    conn_set_t *s = arg;
    conn_free_dead(s);
    if (s->draining_all && s->nconns == 0) {
        event_base_loopbreak(s->base);
    }
}

/* 1 when closing c (its write side shut) now cannot reset its client: every
 * byte the broker sent is acknowledged (SIOCOUTQ at most 1, the sequence
 * number the FIN takes: the client's kernel holds every reply, and the FIN,
 * sent right after them, is on its way; waiting for its ACK would cost a
 * delayed ACK, 40 ms, per stop), so what the client writes later
 * meets a reset only after that EOF) and nothing it sent is unread (close(2)
 * with unread input sends RST instead of the FIN, and drops replies not yet
 * acknowledged). */
static int conn_linger_done(const conn_t *c)
{
    evutil_socket_t fd = bufferevent_getfd(c->bev);
    if (fd < 0) {
        return 1;
    }
    int unacked = 0;
    int unread = 0;
    return evbuffer_get_length(bufferevent_get_input(c->bev)) == 0 && ioctl(fd, SIOCOUTQ, &unacked) == 0 &&
           unacked <= 1 && ioctl(fd, FIONREAD, &unread) == 0 && unread == 0;
}

/* Input while lingering: the client is still writing (the rest of a
 * request past a bound, a pipeline, a request sent as the broker stopped).
 * It is discarded, and from now on only the client's EOF or the deadline
 * closes: an empty receive queue between two of its segments says nothing
 * about the next one, and closing then would reset it mid-write. Every read
 * re-arms the read timeout, so a client that keeps writing never lets
 * linger_event_cb run: the deadline is checked here too, or such a client
 * would hold the connection (and a stop) for as long as it writes. */
static void linger_read_cb(struct bufferevent *bev, void *arg)
{
    conn_t *c = arg;
    struct evbuffer *in = bufferevent_get_input(bev);
    evbuffer_drain(in, evbuffer_get_length(in));
    c->linger_input = 1;
    if (clock_mono_ms() >= c->linger_deadline_mono) {
        conn_close(c);
    }
}

/* The read timeout that is the next poll: as long as c has lingered (at
 * least LINGER_POLL_MS, at most LINGER_POLL_MAX_MS and what is left of
 * LINGER_MS). A poll every 5 ms throughout cost a stop with 3 000 lingering
 * connections (clients that read none of their replies) a whole core for its
 * second: each tick checked every one of them. */
static void linger_set_poll(conn_t *c, uint64_t now_mono)
{
    uint64_t left = c->linger_deadline_mono > now_mono ? c->linger_deadline_mono - now_mono : 1;
    uint64_t lingered = LINGER_MS - (left < LINGER_MS ? left : LINGER_MS);
    uint64_t wait = lingered < LINGER_POLL_MS ? LINGER_POLL_MS : lingered;
    wait = wait < LINGER_POLL_MAX_MS ? wait : LINGER_POLL_MAX_MS;
    wait = wait < left ? wait : left;
    struct timeval tv = { 0, (suseconds_t)(wait * 1000) };
    bufferevent_set_timeouts(c->bev, &tv, NULL);
}

/* EOF or an error: done. A read timeout is the poll (linger_set_poll): close
 * once a client that sent nothing since the write side was shut has nothing
 * unacknowledged (conn_linger_done), else LINGER_MS after the linger began. */
static void linger_event_cb(struct bufferevent *bev, short what, void *arg)
{
    conn_t *c = arg;
    uint64_t now_mono = clock_mono_ms();
    if ((what & BEV_EVENT_TIMEOUT) && (c->linger_input || !conn_linger_done(c)) && now_mono < c->linger_deadline_mono) {
        linger_set_poll(c, now_mono);
        bufferevent_enable(bev, EV_READ); /* a timeout disabled reading */
        return;
    }
    conn_close(c);
}

/* Close once every reply is written, without a reset. Closing a socket with
 * unread input makes the kernel send RST instead of a FIN: the client then
 * reads "Connection reset by peer" (and may lose replies it has not read)
 * rather than EOF, even when all it did was write a request in the instant
 * the broker stopped. So the write side is shut first (the FIN follows the
 * last reply), input is read and discarded, and the socket is closed once
 * the client has acknowledged every reply with nothing unread left
 * (conn_linger_done, polled after 5, 10, 20, … 100 ms) — if it sent nothing
 * after the last request the broker read —, at its EOF, or after LINGER_MS.
 * An idle client (a redis-cli at its prompt) has nothing
 * unacknowledged, so a stop is not held for it; one that does not read its replies holds it
 * at most CONN_DRAIN_TIMEOUT_MS + LINGER_MS. */
void conn_maybe_finish(conn_t *c)
{
    if (c->closing || !c->draining || c->nslots > 0 || c->lingering) {
        return;
    }
    if (evbuffer_get_length(bufferevent_get_output(c->bev)) != 0) {
        return;
    }
    c->lingering = 1;
    if (c->tls) {
        SSL *ssl = bufferevent_openssl_get_ssl(c->bev);
        if (ssl != NULL && c->tls_ready) {
            SSL_shutdown(ssl); /* close_notify, written straight to the socket */
        }
    }
    evutil_socket_t fd = bufferevent_getfd(c->bev);
    if (fd < 0 || shutdown(fd, SHUT_WR) != 0) {
        conn_close(c);
        return;
    }
    struct evbuffer *in = bufferevent_get_input(c->bev);
    conn_input_settle(c);                          /* QUIT or the HTTP guard in a pass: what it parsed is not unread */
    c->linger_input = evbuffer_get_length(in) > 0; /* unread request bytes: the client may be writing still */
    evbuffer_drain(in, evbuffer_get_length(in));
    if (!c->linger_input && conn_linger_done(c)) {
        conn_close(c); /* nothing unacknowledged, nothing unread: an idle client */
        return;
    }
    uint64_t now_mono = clock_mono_ms();
    c->linger_deadline_mono = now_mono + LINGER_MS;
    bufferevent_setcb(c->bev, linger_read_cb, NULL, linger_event_cb, c);
    bufferevent_setwatermark(c->bev, EV_READ, 0, 0);
    linger_set_poll(c, now_mono);
    bufferevent_enable(c->bev, EV_READ);
}

void conn_start_draining(conn_t *c)
{
    if (c->draining) {
        return;
    }
    c->draining = 1;
    bufferevent_disable(c->bev, EV_READ);
    /* A client that stops reading must not hold a draining connection forever. */
    struct timeval tv = { CONN_DRAIN_TIMEOUT_MS / 1000, (CONN_DRAIN_TIMEOUT_MS % 1000) * 1000 };
    bufferevent_set_timeouts(c->bev, NULL, &tv);
    conn_maybe_finish(c);
}

void conn_error_and_drain(conn_t *c, const char *fmt, ...)
{
    conn_set_t *s = c->set;
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    resp_buf_clear(&s->scratch);
    s->scratch.proto = c->proto;
    resp_add_error(&s->scratch, msg);
    conn_reply(c, s->scratch.raw.data, s->scratch.raw.len);
    conn_start_draining(c);
}
