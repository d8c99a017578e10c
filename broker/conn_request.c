/*
 * broker/conn_request.c — requests on a client connection: the input is
 * parsed into commands (proto/request.h, limits from the config) and each
 * is executed (broker/commands.h): its reply goes into the FIFO now, or a
 * storage job (or an AUTH for the auth thread) is submitted with its slot.
 *
 * Invariants: parsing waits while the connection is blocked (PULL BLOCK),
 * an AUTH is being verified, CONN_MAX_PENDING replies are outstanding or
 * max-inflight-bytes are held for it; nothing is parsed once it drains.
 * header-timeout counts from the first byte of a command the parser holds
 * (cmd_started_mono, read by the sweep). The clock is read per pass, not per
 * command: at its first command and once at its end (for the commands run
 * after the first, and for a command left unfinished).
 * At a stop, once the storage thread finished, what was received but never
 * parsed (what the socket still holds too, decrypted on TLS) is parsed only
 * to be refused (conn_refuse_unread).
 *
 * Cross-protocol guard (docs/protocol.md): a browser or any HTTP client can
 * be made to send a request to this port, and its body would run as inline
 * commands. A command that can only be HTTP is not answered, the rest of the
 * input is discarded unparsed and the connection is closed as soon as the
 * replies to earlier commands are written: POST or Host: anywhere
 * (as Redis does), and as the first inline command also GET /..., PUT, HEAD,
 * DELETE, OPTIONS or CONNECT. On the plaintext port a first byte 0x16 (a TLS
 * handshake record) is logged and the connection closed unanswered.
 *
 * Thread: everything here runs on the event-loop thread.
 */
#include <event2/buffer.h>
#include <event2/bufferevent_ssl.h>
#include <openssl/err.h>
#include <openssl/ssl.h>

#include "base/clock.h"
#include "broker/auth.h"
#include "broker/cmd_shared.h"
#include "broker/commands.h"
#include "broker/conn_internal.h"
#include "broker/server.h"
#include "common/log.h"

#define TLS_RECORD_HANDSHAKE 0x16          /* the first byte of a TLS ClientHello */
#define REFUSE_MAX_BYTES     (1024 * 1024) /* a stop reads at most this much unread input of one connection */
#define REFUSE_READ_CHUNK    16384
#define REFUSED_AT_STOP      "ERR shutting down: the command was not run"

/* 1 when name is word (lowercase ASCII) in any case, as cmd_arg_is; the
 * first letter is compared inline before the call: looks_like_http asks
 * for every command, and a name that is not HTTP's (SEND, ACK) differs
 * there, so most commands cost one byte's test instead of two calls. */
static int name_is(const resp_arg_t *name, const char *word)
{
    return name->len > 0 && (name->ptr[0] | 0x20) == word[0] && cmd_arg_is(name, word);
}

/* 1 when cmd can only be part of an HTTP request (see the file comment). */
static int looks_like_http(const conn_t *c, const resp_command_t *cmd)
{
    const resp_arg_t *name = &cmd->argv[0];
    if (name_is(name, "post") || name_is(name, "host:")) {
        return 1;
    }
    if (c->ncommands > 0 || !cmd->is_inline) {
        return 0;
    }
    if (name_is(name, "get")) {
        return cmd->argc >= 2 && cmd->argv[1].len > 0 && cmd->argv[1].ptr[0] == '/';
    }
    return name_is(name, "put") || name_is(name, "head") || name_is(name, "delete") || name_is(name, "options") ||
           name_is(name, "connect");
}

/* Execute one parsed command; first: the first command c runs in this pass
 * of conn_process_input, which stamps c's activity (last_active_mono) here
 * and once more at the end of a pass that ran more (one clock read a pass,
 * not one a command: a pipeline of 128 SENDs is one pass). */
static void conn_execute(conn_t *c, const resp_command_t *cmd, int first)
{
    conn_set_t *s = c->set;
    if (looks_like_http(c, cmd)) {
        s->protocol_errors++;
        log_warn("possible cross-protocol attack (HTTP) from %s; closing", c->addr);
        conn_start_draining(c); /* no reply; earlier replies still go out; nothing after it is parsed */
        return;
    }
    c->ncommands++;
    s->commands++;
    if (first) {
        c->last_active_mono = clock_mono_ms(); /* CLIENT LIST in this pass shows it idle 0 s, as before */
    }
    resp_buf_clear(&s->scratch);
    s->scratch.proto = c->proto;
    cmd_call_t call = { .conn = c, .srv = s->srv, .argc = cmd->argc, .argv = cmd->argv, .out = &s->scratch };
    cmd_dispatch(&call);
    if (call.job) {
        job_t *j = call.job;
        j->conn_id = c->id;
        j->seq = ++c->next_seq;
        j->proto = c->proto;
        j->reply.proto = c->proto;
        reply_slot_t *sl = conn_slot_append(c, j->seq);
        sl->charge = cmd->wire_len + j->reply_estimate + j->carried_bytes;
        c->inflight_bytes += sl->charge;
        sl->reserved = (j->block_set ? j->reply_estimate : 0) + j->carried_bytes; /* see conn_memory */
        c->reserved_bytes += sl->reserved;
        if (j->block_set) {
            sl->blocking = 1;
            conn_mark_blocked(c, 1);
        }
        if (call.auth) {
            sl->holds = 1;
            c->auth_held = 1;
            if (auth_submit(server_auth(s->srv), (auth_req_t *)(void *)j) != 0) {
                auth_refuse_busy((auth_req_t *)(void *)j);
                sl->job = j;
                sl->filled = 1;
                conn_flush(c);
            }
        } else {
            writer_submit(s->writer, j);
        }
    } else if (!call.no_reply) {
        conn_reply(c, s->scratch.raw.data, s->scratch.raw.len);
    }
    if (call.close_after) {
        conn_start_draining(c);
    }
}

/* Bytes of requests and replies held for c: its FIFO (requests awaiting the
 * storage thread, at their reply estimate; replies awaiting their turn) and
 * the replies the socket has not taken. Parsing waits above max-inflight-bytes
 * (a client that does not read stops being served instead of growing). */
static size_t conn_held(const conn_t *c)
{
    return c->inflight_bytes + evbuffer_get_length(bufferevent_get_output(c->bev));
}

void conn_input_settle(conn_t *c)
{
    if (c->input_parsed > 0) {
        evbuffer_drain(bufferevent_get_input(c->bev), c->input_parsed);
        c->input_parsed = 0;
    }
}

void conn_process_input(conn_t *c)
{
    conn_set_t *s = c->set;
    struct evbuffer *in = bufferevent_get_input(c->bev);
    const uint64_t ran_before = c->ncommands;
    while (!c->closing && !c->draining && !c->blocked && !c->auth_held && c->nslots < CONN_MAX_PENDING &&
           conn_held(c) < (size_t)s->cfg->max_inflight_bytes && s->reading) {
        if (evbuffer_get_length(in) <= c->input_parsed) {
            break;
        }
        /* Peeked afresh for every command: a command run may have settled or discarded the input. */
        struct evbuffer_iovec v;
        if (evbuffer_peek(in, -1, NULL, &v, 1) < 1) {
            break;
        }
        if (c->input_parsed > 0 && c->input_parsed >= v.iov_len) {
            conn_input_settle(c); /* the first segment is parsed whole: on to the next */
            continue;
        }
        if (!c->sniffed) {
            c->sniffed = 1;
            if (!c->tls && v.iov_len > 0 && ((const unsigned char *)v.iov_base)[0] == TLS_RECORD_HANDSHAKE) {
                s->protocol_errors++;
                log_warn("client id=%llu addr=%s: a TLS handshake on the plaintext port; closing (TLS clients "
                         "connect to tls-port%s)",
                         (unsigned long long)c->id, c->addr, s->cfg->tls_port ? "" : ", which is off");
                evbuffer_drain(in, evbuffer_get_length(in)); /* the first bytes: nothing parsed yet */
                conn_start_draining(c);
                break;
            }
        }
        size_t consumed = 0;
        resp_command_t cmd;
        resp_status_t st = resp_parser_feed(&c->parser, (const char *)v.iov_base + c->input_parsed,
                                            v.iov_len - c->input_parsed, &consumed, &cmd);
        c->input_parsed += consumed;
        if (st == RESP_OK) {
            c->cmd_started_mono = 0;
            conn_execute(c, &cmd, c->ncommands == ran_before);
        } else if (st != RESP_NEED_MORE) {
            s->protocol_errors++;
            log_info("client id=%llu addr=%s: %s; closing after the reply", (unsigned long long)c->id, c->addr,
                     resp_parser_error(&c->parser));
            conn_input_settle(c);
            conn_error_and_drain(c, "ERR %s", resp_parser_error(&c->parser));
            break;
        }
    }
    conn_input_settle(c);
    /* header-timeout counts from the first byte of a command the parser holds; idle-timeout from the last
     * command run (a pass of several: stamped again after them, never before one of them ran) */
    int ran_several = c->ncommands - ran_before > 1;
    int command_started = resp_parser_in_command(&c->parser) && c->cmd_started_mono == 0;
    if (!resp_parser_in_command(&c->parser)) {
        c->cmd_started_mono = 0;
    }
    if (ran_several || command_started) {
        uint64_t now = clock_mono_ms();
        if (ran_several) {
            c->last_active_mono = now;
        }
        if (command_started) {
            c->cmd_started_mono = now;
        }
    }
}

/* Read what c's client sent that is still in the socket into its input,
 * non-blocking, until the input holds limit bytes: plaintext as it came, TLS
 * decrypted (SSL_read on the connection's own session: what the bufferevent
 * would have read had it been reading). Returns the bytes added. */
static size_t conn_read_unread(conn_t *c, size_t limit)
{
    struct evbuffer *in = bufferevent_get_input(c->bev);
    evutil_socket_t fd = bufferevent_getfd(c->bev);
    size_t before = evbuffer_get_length(in);
    if (fd < 0 || before >= limit) {
        return 0;
    }
    if (!c->tls) {
        /* A socket bufferevent keeps its input's end frozen (only its own read
         * callback adds, unfreezing around it): evbuffer_read fails then,
         * and nothing queued in the socket was ever refused. */
        evbuffer_unfreeze(in, 0);
        size_t have = before;
        while (have < limit) {
            size_t room = limit - have; /* never past limit: a whole chunk overshot the budget by up to 16 KiB */
            if (evbuffer_read(in, fd, (int)(room < REFUSE_READ_CHUNK ? room : REFUSE_READ_CHUNK)) <= 0) {
                break;
            }
            have = evbuffer_get_length(in);
        }
        evbuffer_freeze(in, 0);
    } else {
        SSL *ssl = bufferevent_openssl_get_ssl(c->bev);
        char chunk[REFUSE_READ_CHUNK];
        size_t room = limit - before;
        int n = 0;
        while (ssl != NULL && c->tls_ready && room > 0 &&
               (n = SSL_read(ssl, chunk, (int)(room < sizeof chunk ? room : sizeof chunk))) > 0 &&
               evbuffer_add(in, chunk, (size_t)n) == 0) {
            room -= (size_t)n;
        }
        ERR_clear_error(); /* a failed read's queue would be read as the cause of the bufferevent's next error */
    }
    return evbuffer_get_length(in) - before;
}

/* At a stop, once the storage thread has finished: answer each complete
 * request c sent that was never parsed (pipelined behind one in flight, or
 * written since the stop began) with REFUSED_AT_STOP, so its client knows it
 * was not run instead of meeting an EOF that leaves it guessing. The socket's
 * unread input is read first (conn_read_unread: non-blocking, at most
 * REFUSE_MAX_BYTES held, and at most what is left of the stop's
 * s->refuse_budget, which every connection's read draws down: a stop with
 * 10 000 such clients reads CONN_REFUSE_BUDGET_BYTES, not 10 GB), decrypted
 * on a TLS connection. Bounded: at most CONN_MAX_PENDING refusals; a
 * malformed request or an unfinished one ends it; what is left is
 * discarded. Returns the number refused. */
size_t conn_refuse_unread(conn_t *c)
{
    conn_set_t *s = c->set;
    struct evbuffer *in = bufferevent_get_input(c->bev);
    if (c->closing || c->draining) {
        return 0; /* it parses nothing more already (QUIT, a protocol error): its input is discarded */
    }
    conn_input_settle(c); /* 0 outside a pass (a stop comes from the writer): the read begins after what was parsed */
    size_t before = evbuffer_get_length(in);
    size_t limit = before + s->refuse_budget < REFUSE_MAX_BYTES ? before + s->refuse_budget : REFUSE_MAX_BYTES;
    size_t taken = conn_read_unread(c, limit);
    s->refuse_budget -= taken < s->refuse_budget ? taken : s->refuse_budget;
    size_t refused = 0;
    while (!c->closing && refused < CONN_MAX_PENDING && evbuffer_get_length(in) > 0) {
        struct evbuffer_iovec v;
        if (evbuffer_peek(in, -1, NULL, &v, 1) < 1) {
            break;
        }
        size_t consumed = 0;
        resp_command_t cmd;
        resp_status_t st = resp_parser_feed(&c->parser, v.iov_base, v.iov_len, &consumed, &cmd);
        evbuffer_drain(in, consumed);
        if (st == RESP_OK) {
            resp_buf_clear(&s->scratch);
            s->scratch.proto = c->proto;
            resp_add_error(&s->scratch, REFUSED_AT_STOP);
            conn_reply(c, s->scratch.raw.data, s->scratch.raw.len);
            refused++;
        } else if (st != RESP_NEED_MORE || consumed == 0) {
            break;
        }
    }
    evbuffer_drain(in, evbuffer_get_length(in)); /* past the bounds: not held while the replies are written */
    return refused;
}
