/*
 * broker/conn_sweep.c — the sweep: every CONN_SWEEP_MS (and at once after a
 * large reply, conn_reply.c) it closes TLS clients whose handshake is not
 * complete CONN_TLS_HANDSHAKE_MS after the accept, clients not logged in
 * auth-timeout after the accept (or a reload's logout; users-file only: an
 * AUTH being checked is waited for), clients whose command is older than
 * header-timeout and, while all clients together hold more than
 * max-client-memory, the one that holds most; it tells the writer what the
 * clients hold (writer_note_client_memory) and trims the set's scratch
 * buffer and its spare reply slots.
 *
 * Invariants: what a client holds is conn_memory (below); the total is
 * recomputed at each sweep, never kept incrementally. A deadline is never
 * met early: the stamps (accept, logout, a command's first byte) and the
 * sweep's now are fresh clock_mono_ms readings (never a loop's cached
 * time), and a client is closed only once more than the limit has passed
 * in whole milliseconds (past_ms: both readings are truncated, so
 * now - since == limit may be up to 1 ms short of it). It is met at most
 * CONN_SWEEP_MS late, plus the loop's own delay.
 *
 * Thread: everything here runs on the event-loop thread.
 */
#include <event2/buffer.h>

#include "base/clock.h"
#include "broker/cmd_shared.h"
#include "broker/conn_internal.h"
#include "common/log.h"

#define SCRATCH_KEEP_BYTES (64u << 10)      /* the immediate-reply buffer keeps this much between bursts */
#define SPARE_SLOTS_KEEP   CONN_MAX_PENDING /* spare reply slots kept between bursts: one connection's window */

/* Bytes the broker holds for c: unparsed input, the parser's buffers,
 * requests and replies in its FIFO (a listing at its reply estimate: the
 * storage thread is about to build that reply), replies not yet taken by
 * the socket, and the SENDs queued in an open MULTI (they wait in the loop
 * for EXEC). Once EXEC has handed them to the storage thread they are its
 * batch, written at once: charged to max-inflight-bytes (a client
 * pipelining EXECs pauses) but not here, or the sender of a transaction
 * already being written would be closed for it. A PULL BLOCK's estimate is left out: it waits, usually for a
 * long time, holding nothing (counted, 128 blocked PULLs at the defaults
 * were closed as the largest holders of 512 MiB they did not hold); it
 * still counts against the connection's max-inflight-bytes, and its reply
 * counts once it exists (a reply of 1 MiB or more runs this sweep). */
static size_t conn_memory(const conn_t *c)
{
    return evbuffer_get_length(bufferevent_get_input(c->bev)) + resp_parser_buffered(&c->parser) + c->inflight_bytes -
           c->reserved_bytes + evbuffer_get_length(bufferevent_get_output(c->bev)) + cmd_multi_bytes(c->multi);
}

/* 1 when more than limit_ms has passed from since to now (milliseconds of
 * clock_mono_ms, each truncated: a difference of exactly limit_ms may be
 * up to 1 ms short of it, so it is not enough). */
static int past_ms(uint64_t now, uint64_t since, uint64_t limit_ms)
{
    return now > since && now - since > limit_ms;
}

void conn_sweep_cb(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    conn_set_t *s = arg;
    const config_t *cfg = s->cfg;
    uint64_t now = clock_mono_ms();
    size_t total = 0;
    for (conn_t *c = s->all, *n; c; c = n) {
        n = c->all_next;
        if (c->tls && !c->tls_ready && !c->closing && past_ms(now, c->created_mono, CONN_TLS_HANDSHAKE_MS)) {
            conn_handshake_expired(c);
            continue;
        }
        if (cfg->auth_timeout_ms > 0 && !c->authenticated && !c->auth_held && !c->draining &&
            (!c->tls || c->tls_ready) && past_ms(now, c->unauth_since_mono, (uint64_t)cfg->auth_timeout_ms)) {
            log_info("client id=%llu addr=%s: not logged in %llu ms after it connected (auth-timeout %lld ms); closing",
                     (unsigned long long)c->id, c->addr, (unsigned long long)(now - c->unauth_since_mono),
                     cfg->auth_timeout_ms);
            conn_error_and_drain(c, "ERR not logged in within auth-timeout (%lld ms): AUTH first; closing",
                                 cfg->auth_timeout_ms);
        }
        if (cfg->header_timeout_ms > 0 && c->cmd_started_mono != 0 && !c->draining &&
            past_ms(now, c->cmd_started_mono, (uint64_t)cfg->header_timeout_ms)) {
            s->header_kills++;
            log_info("client id=%llu addr=%s: command not complete %llu ms after its first byte (header-timeout "
                     "%lld ms); closing",
                     (unsigned long long)c->id, c->addr, (unsigned long long)(now - c->cmd_started_mono),
                     cfg->header_timeout_ms);
            c->cmd_started_mono = 0;
            conn_error_and_drain(c, "ERR command not complete within header-timeout (%lld ms); closing",
                                 cfg->header_timeout_ms);
        }
        if (!c->closing) {
            total += conn_memory(c);
        }
    }
    /* Over the budget: close the client holding most, until under it. */
    while (cfg->max_client_memory > 0 && total > (size_t)cfg->max_client_memory) {
        conn_t *worst = NULL;
        size_t worst_bytes = 0;
        for (conn_t *c = s->all; c; c = c->all_next) {
            size_t m = conn_memory(c);
            if (worst == NULL || m > worst_bytes || (m == worst_bytes && c->created_mono < worst->created_mono)) {
                worst = c;
                worst_bytes = m;
            }
        }
        if (worst == NULL) {
            break;
        }
        s->memory_kills++;
        log_warn("closing client id=%llu addr=%s: it holds %zu bytes (input %zu, in flight %zu, unread replies %zu) "
                 "and all clients %zu, over max-client-memory %lld",
                 (unsigned long long)worst->id, worst->addr, worst_bytes,
                 evbuffer_get_length(bufferevent_get_input(worst->bev)) + resp_parser_buffered(&worst->parser),
                 worst->inflight_bytes - worst->reserved_bytes, evbuffer_get_length(bufferevent_get_output(worst->bev)),
                 total, cfg->max_client_memory);
        total -= worst_bytes;
        conn_close(worst);
    }
    s->client_memory = total;
    if (s->writer != NULL) {
        writer_note_client_memory(s->writer, total, s->woken_delivered);
    }
    buf_trim(&s->scratch.raw, SCRATCH_KEEP_BYTES); /* give a burst's memory back (CLIENT LIST of 10^4 clients) */
    conn_spare_slots_trim(s, SPARE_SLOTS_KEEP);    /* and the reply slots of a burst of pipelines */
}
