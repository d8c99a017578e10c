/*
 * broker/conn.c — client connections: parsing, dispatch, the reply FIFO,
 * writing, draining, lingering and freeing (contract: conn.h).
 *
 * Thread: everything here runs on the event-loop thread. The only entry
 * from the storage thread is conn_job_done, which the writer calls on this
 * thread (through its completion event).
 *
 * Memory safety rules:
 *  - a connection is never freed inside a callback chain: conn_close detaches
 *    it (out of the id map, callbacks cleared) and queues it; the reaper
 *    event frees it on a later loop turn;
 *  - a storage completion finds its connection by id; a closed connection is
 *    not in the map, so its late completions are simply freed;
 *  - every reply goes through conn_write, which enforces max-reply-buffer.
 *
 * Cross-protocol guard (docs/protocol.md): a browser or any HTTP client can
 * be made to send a request to this port, and its body would run as inline
 * commands. A command that can only be HTTP is not answered, the rest of the
 * input is discarded unparsed and the connection is closed as soon as the
 * replies to earlier commands are written: POST or Host: anywhere
 * (as Redis does), and as the first inline command also GET /..., PUT, HEAD,
 * DELETE, OPTIONS or CONNECT.
 *
 * TLS: a connection from tls-port has an OpenSSL bufferevent (accepting
 * state); everything above the bufferevent is the same. Until the handshake
 * completes (BEV_EVENT_CONNECTED) the read timeout is the handshake
 * deadline; a failed handshake is logged with OpenSSL's reason (and a hint
 * when it looks like plaintext on the TLS port). On the plaintext port a
 * first byte 0x16 (a TLS handshake record) is logged and the connection
 * closed unanswered. Closing a TLS connection sends close_notify first.
 * With tls-auth-clients-user cn a completed handshake with a verified
 * client certificate logs the connection in as the user its CN names.
 */
#include "broker/conn.h"

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

#include <event2/buffer.h>
#include <event2/bufferevent_ssl.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>

#include "base/alloc.h"
#include "base/map.h"
#include "broker/auth.h"
#include "broker/cmd_shared.h"
#include "broker/commands.h"
#include "broker/server.h"
#include "broker/users.h"
#include "common/tls_server.h"
#include "common/log.h"
#include "base/clock.h"

#define READ_HIGH_WATERMARK      (1u << 20)  /* input held while blocked/paused */
#define DRAIN_TIMEOUT_MS         10000       /* a draining client must read its last replies by then */
#define LINGER_MS                1000        /* discard input this long after a last reply */
#define CONN_SWEEP_NOW_BYTES     (1u << 20)  /* a reply this large runs the memory sweep at once */
#define SCRATCH_KEEP_BYTES       (64u << 10) /* the immediate-reply buffer keeps this much between bursts */
#define TLS_RECORD_HANDSHAKE     0x16        /* the first byte of a TLS ClientHello */
#define REPLY_BY_REFERENCE_BYTES (64u << 10) /* storage replies this large are not copied (conn_write_reply) */

struct reply_slot {
    reply_slot_t *next;
    uint64_t seq; /* storage slots: the job's seq */
    int filled;
    int blocking; /* the blocking PULL of this connection */
    int holds;    /* an AUTH: parsing waits until it is written */
    job_t *job;   /* storage reply */
    char *data;   /* loop reply (copied) */
    size_t len;
    size_t charge;   /* bytes counted in the connection's inflight_bytes for this slot */
    size_t reserved; /* of which not held by the loop until the reply exists (reserved_bytes): a PULL BLOCK's
                        reply estimate, an EXEC's queued SENDs (the storage thread's batch now) */
};

struct conn_set {
    const config_t *cfg;
    struct event_base *base;
    server_t *srv; /* for the commands (cmd_call_t) */
    writer_t *writer;
    int writer_running;
    int reading;      /* 0 once shutdown began: parse nothing more */
    int draining_all; /* shutdown: break the loop when the last one is freed */
    struct event *reaper;
    struct event *sweep; /* header-timeout and max-client-memory (CONN_SWEEP_MS) */
    map_t by_id;         /* open connections by the 8 bytes of their id */
    conn_t *all;         /* open connections */
    conn_t *dead;        /* closed, to free */
    uint64_t next_id;
    uint64_t nconns, nblocked;
    uint64_t ntls, tls_total; /* connections from tls-port: open now, accepted since start */
    resp_buf_t scratch;       /* immediate replies */
    /* counters */
    uint64_t connections_total, protocol_errors, reply_kills, idle_kills, commands;
    uint64_t client_memory, memory_kills, header_kills;
    uint64_t woken_delivered; /* bytes of PULL BLOCK replies received from the writer (writer_note_client_memory) */
};

/* ---- the id map and the list of open connections ------------------------------- */

static void conn_link(conn_set_t *s, conn_t *c)
{
    map_put(&s->by_id, &c->id, sizeof c->id, c);
    c->all_prev = NULL;
    c->all_next = s->all;
    if (s->all) {
        s->all->all_prev = c;
    }
    s->all = c;
    s->nconns++;
    s->ntls += c->tls != 0;
    s->tls_total += c->tls != 0;
}

static void conn_unlink(conn_set_t *s, conn_t *c)
{
    map_del(&s->by_id, &c->id, sizeof c->id);
    if (c->all_prev) {
        c->all_prev->all_next = c->all_next;
    } else {
        s->all = c->all_next;
    }
    if (c->all_next) {
        c->all_next->all_prev = c->all_prev;
    }
    c->all_next = c->all_prev = NULL;
    s->nconns--;
    s->ntls -= c->tls != 0;
}

static conn_t *conn_find(conn_set_t *s, uint64_t id)
{
    return map_get(&s->by_id, &id, sizeof id);
}

/* ---- closing ----------------------------------------------------------------------- */

static void set_blocked(conn_t *c, int blocked)
{
    if (c->blocked == blocked) {
        return;
    }
    c->blocked = blocked;
    if (blocked) {
        c->set->nblocked++;
    } else {
        c->set->nblocked--;
    }
}

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
static void conn_close(conn_t *c)
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
    set_blocked(c, 0);
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
    cmd_multi_free(c->multi);
    bufferevent_free(c->bev);
    free(c);
}

static void reaper_cb(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    conn_set_t *s = arg;
    conn_t *c = s->dead;
    s->dead = NULL;
    while (c) {
        conn_t *n = c->dead_next;
        conn_free(c);
        c = n;
    }
    if (s->draining_all && s->nconns == 0) {
        event_base_loopbreak(s->base);
    }
}

static void linger_read_cb(struct bufferevent *bev, void *arg)
{
    (void)arg;
    struct evbuffer *in = bufferevent_get_input(bev);
    evbuffer_drain(in, evbuffer_get_length(in));
}

static void linger_event_cb(struct bufferevent *bev, short what, void *arg)
{
    (void)bev;
    (void)what;
    conn_close(arg); /* EOF, error or the linger timeout: done */
}

/* Close once every reply is written. Closing a socket with unread input
 * makes the kernel send RST, which can destroy the error reply before the
 * client reads it; so the write side is shut first (FIN after the reply) and
 * input is read and discarded until EOF or LINGER_MS, then closed. */
static void conn_maybe_finish(conn_t *c)
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
    evbuffer_drain(in, evbuffer_get_length(in));
    bufferevent_setcb(c->bev, linger_read_cb, NULL, linger_event_cb, c);
    bufferevent_setwatermark(c->bev, EV_READ, 0, 0);
    struct timeval tv = { LINGER_MS / 1000, (LINGER_MS % 1000) * 1000 };
    bufferevent_set_timeouts(c->bev, &tv, NULL);
    bufferevent_enable(c->bev, EV_READ);
}

static void conn_start_draining(conn_t *c)
{
    if (c->draining) {
        return;
    }
    c->draining = 1;
    bufferevent_disable(c->bev, EV_READ);
    /* A client that stops reading must not hold a draining connection forever. */
    struct timeval tv = { DRAIN_TIMEOUT_MS / 1000, (DRAIN_TIMEOUT_MS % 1000) * 1000 };
    bufferevent_set_timeouts(c->bev, NULL, &tv);
    conn_maybe_finish(c);
}

/* ---- replies ------------------------------------------------------------------------ */

/* Called by the output buffer once a reply added by reference is written (or the connection freed). */
static void job_reply_written(const void *data, size_t len, void *arg)
{
    (void)data;
    (void)len;
    job_free(arg);
}

/* Append a reply to the socket's output, unless the client already has
 * more than max-reply-buffer unread: then it is disconnected. With job (its
 * reply is data) and a reply of REPLY_BY_REFERENCE_BYTES or more, the
 * output takes the job's buffer by reference and frees the job once it is
 * written, instead of copying it: copying a listing of several MiB cost
 * the loop tens of milliseconds (a fresh buffer's page faults) while every
 * other client's reply waited behind it. Otherwise the bytes are copied
 * (and job, if any, freed). -1 when the connection was closed. */
static int conn_write_reply(conn_t *c, const char *data, size_t len, job_t *job)
{
    if (c->closing) {
        job_free(job);
        return -1;
    }
    struct evbuffer *out = bufferevent_get_output(c->bev);
    size_t waiting = evbuffer_get_length(out);
    if (waiting > (size_t)c->set->cfg->max_reply_buffer) {
        c->set->reply_kills++;
        log_warn("closing client id=%llu addr=%s: %zu bytes of replies unread, over max-reply-buffer %lld "
                 "(the client is not reading)",
                 (unsigned long long)c->id, c->addr, waiting, c->set->cfg->max_reply_buffer);
        job_free(job);
        conn_close(c);
        return -1;
    }
    int rc = 0;
    if (job != NULL && len >= REPLY_BY_REFERENCE_BYTES) {
        rc = evbuffer_add_reference(out, data, len, job_reply_written, job);
        if (rc != 0) {
            job_free(job);
        }
    } else {
        rc = len > 0 ? evbuffer_add(out, data, len) : 0;
        job_free(job);
    }
    if (rc != 0) {
        log_error("client id=%llu: out of memory for a reply; closing", (unsigned long long)c->id);
        conn_close(c);
        return -1;
    }
    if (len >= CONN_SWEEP_NOW_BYTES && c->set->cfg->max_client_memory > 0) {
        event_active(c->set->sweep, EV_TIMEOUT, 0); /* check the budget before the next turn's reads */
    }
    return 0;
}

static int conn_write(conn_t *c, const char *data, size_t len)
{
    return conn_write_reply(c, data, len, NULL);
}

static reply_slot_t *slot_append(conn_t *c, uint64_t seq)
{
    reply_slot_t *sl = xmalloc(sizeof *sl);
    memset(sl, 0, sizeof *sl);
    sl->seq = seq;
    if (c->slots_tail) {
        c->slots_tail->next = sl;
    } else {
        c->slots_head = sl;
    }
    c->slots_tail = sl;
    c->nslots++;
    return sl;
}

/* A reply computed now: straight out when nothing is ahead of it, else into the FIFO. */
static void conn_reply(conn_t *c, const char *data, size_t len)
{
    if (c->closing) {
        return;
    }
    if (c->nslots == 0) {
        conn_write(c, data, len);
        return;
    }
    reply_slot_t *sl = slot_append(c, 0);
    sl->data = xmalloc(len ? len : 1);
    memcpy(sl->data, data, len);
    sl->len = len;
    sl->filled = 1;
    sl->charge = len;
    c->inflight_bytes += len;
}

/* Write filled slots from the head. */
static void conn_flush(conn_t *c)
{
    while (!c->closing && c->slots_head && c->slots_head->filled) {
        reply_slot_t *sl = c->slots_head;
        c->slots_head = sl->next;
        if (c->slots_head == NULL) {
            c->slots_tail = NULL;
        }
        c->nslots--;
        c->inflight_bytes -= sl->charge;
        if (sl->blocking) {
            set_blocked(c, 0);
        }
        if (sl->holds) {
            c->auth_held = 0;
        }
        c->last_active_mono = clock_mono_ms();
        if (sl->job) {
            conn_write_reply(c, sl->job->reply.raw.data, sl->job->reply.raw.len, sl->job);
        } else {
            conn_write(c, sl->data, sl->len);
            free(sl->data);
        }
        free(sl);
    }
}

/* ---- requests ----------------------------------------------------------------------- */

static void conn_process_input(conn_t *c);

/* 1 when cmd can only be part of an HTTP request (see the file comment). */
static int looks_like_http(const conn_t *c, const resp_command_t *cmd)
{
    const resp_arg_t *name = &cmd->argv[0];
    if (cmd_arg_is(name, "post") || cmd_arg_is(name, "host:")) {
        return 1;
    }
    if (c->ncommands > 0 || !cmd->is_inline) {
        return 0;
    }
    if (cmd_arg_is(name, "get")) {
        return cmd->argc >= 2 && cmd->argv[1].len > 0 && cmd->argv[1].ptr[0] == '/';
    }
    return cmd_arg_is(name, "put") || cmd_arg_is(name, "head") || cmd_arg_is(name, "delete") ||
           cmd_arg_is(name, "options") || cmd_arg_is(name, "connect");
}

static void conn_execute(conn_t *c, const resp_command_t *cmd)
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
    c->last_active_mono = clock_mono_ms();
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
        reply_slot_t *sl = slot_append(c, j->seq);
        sl->charge = cmd->wire_len + j->reply_estimate + j->carried_bytes;
        c->inflight_bytes += sl->charge;
        sl->reserved = (j->block_set ? j->reply_estimate : 0) + j->carried_bytes; /* see conn_memory */
        c->reserved_bytes += sl->reserved;
        if (j->block_set) {
            sl->blocking = 1;
            set_blocked(c, 1);
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

static void conn_process_input(conn_t *c)
{
    conn_set_t *s = c->set;
    struct evbuffer *in = bufferevent_get_input(c->bev);
    while (!c->closing && !c->draining && !c->blocked && !c->auth_held && c->nslots < CONN_MAX_PENDING &&
           conn_held(c) < (size_t)s->cfg->max_inflight_bytes && s->reading) {
        if (evbuffer_get_length(in) == 0) {
            break;
        }
        struct evbuffer_iovec v;
        if (evbuffer_peek(in, -1, NULL, &v, 1) < 1) {
            break;
        }
        if (!c->sniffed) {
            c->sniffed = 1;
            if (!c->tls && v.iov_len > 0 && ((const unsigned char *)v.iov_base)[0] == TLS_RECORD_HANDSHAKE) {
                s->protocol_errors++;
                log_warn("client id=%llu addr=%s: a TLS handshake on the plaintext port; closing (TLS clients "
                         "connect to tls-port%s)",
                         (unsigned long long)c->id, c->addr, s->cfg->tls_port ? "" : ", which is off");
                evbuffer_drain(in, evbuffer_get_length(in));
                conn_start_draining(c);
                break;
            }
        }
        size_t consumed = 0;
        resp_command_t cmd;
        resp_status_t st = resp_parser_feed(&c->parser, v.iov_base, v.iov_len, &consumed, &cmd);
        evbuffer_drain(in, consumed);
        if (st == RESP_OK) {
            c->cmd_started_mono = 0;
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
    /* header-timeout counts from the first byte of a command the parser holds */
    if (!resp_parser_in_command(&c->parser)) {
        c->cmd_started_mono = 0;
    } else if (c->cmd_started_mono == 0) {
        c->cmd_started_mono = clock_mono_ms();
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
    conn_t *c = arg;
    if (!c->draining && !c->closing && evbuffer_get_length(bufferevent_get_input(c->bev)) > 0) {
        conn_process_input(c); /* parsing may have waited for the replies to go (max-inflight-bytes) */
    }
    conn_maybe_finish(c);
}

/* A plaintext client on the TLS port: tell it in its own protocol, best
 * effort (its unread input is read first so that closing sends FIN, not a
 * RST that could destroy the message). */
static void tls_refuse_plaintext(evutil_socket_t fd)
{
    static const char msg[] = "-ERR this port speaks TLS only: connect with TLS, or to the plaintext port\r\n";
    char sink[4096];
    if (fd < 0) {
        return;
    }
    while (recv(fd, sink, sizeof sink, MSG_DONTWAIT) > 0) {
    }
    ssize_t w = send(fd, msg, sizeof msg - 1, MSG_NOSIGNAL | MSG_DONTWAIT);
    (void)w;
    shutdown(fd, SHUT_WR);
}

/* tls-auth-clients-user cn: a client certificate that verified logs c in as
 * the user its subject's CN names, when that user exists and is enabled;
 * otherwise c stays as it was (AUTH needed) and the log says why. */
static void log_in_by_certificate(conn_t *c, SSL *ssl)
{
    conn_set_t *s = c->set;
    if (s->cfg->tls_auth_clients_user != TLS_USER_CN || !server_auth_required(s->srv)) {
        return;
    }
    X509 *x = SSL_get0_peer_certificate(ssl);
    if (x == NULL || SSL_get_verify_result(ssl) != X509_V_OK) {
        return; /* tls-auth-clients optional and none sent */
    }
    char cn[USERS_NAME_MAX + 2];
    int n = X509_NAME_get_text_by_NID(X509_get_subject_name(x), NID_commonName, cn, (int)sizeof cn);
    if (n <= 0 || n > USERS_NAME_MAX || strlen(cn) != (size_t)n) {
        log_info("client id=%llu addr=%s: its certificate has no CN that can name a user (at most %d bytes); AUTH "
                 "needed",
                 (unsigned long long)c->id, c->addr, USERS_NAME_MAX);
        return;
    }
    const users_entry_t *e = users_find(server_users(s->srv), cn, (size_t)n);
    if (e == NULL || e->disabled) {
        log_info("client id=%llu addr=%s: its certificate's CN '%s' is %s in the users file; AUTH needed",
                 (unsigned long long)c->id, c->addr, cn, e == NULL ? "no user" : "a disabled user");
        return;
    }
    char roles[USERS_ROLES_TEXT];
    c->authenticated = 1;
    c->roles = e->roles;
    snprintf(c->user, sizeof c->user, "%s", e->name);
    log_info("client id=%llu addr=%s: logged in as '%s' (%s) by its certificate", (unsigned long long)c->id, c->addr,
             e->name, users_roles_text(e->roles, roles, sizeof roles));
}

/* The TLS handshake's outcome (a connection from tls-port before it is
 * ready). Returns 1 when the event was the handshake's. */
static int tls_handshake_event(conn_t *c, struct bufferevent *bev, short what)
{
    char why[512];
    if (what & BEV_EVENT_CONNECTED) {
        c->tls_ready = 1;
        log_in_by_certificate(c, bufferevent_openssl_get_ssl(bev));
        c->last_active_mono = clock_mono_ms();
        if (c->set->cfg->idle_timeout_ms > 0) {
            struct timeval tv = { (time_t)(c->set->cfg->idle_timeout_ms / 1000),
                                  (suseconds_t)(c->set->cfg->idle_timeout_ms % 1000) * 1000 };
            bufferevent_set_timeouts(bev, &tv, NULL);
        } else {
            bufferevent_set_timeouts(bev, NULL, NULL);
        }
        if (log_get_level() <= LOG_LEVEL_DEBUG) {
            tls_describe_session(bufferevent_openssl_get_ssl(bev), why, sizeof why);
            log_debug("client id=%llu addr=%s: TLS established (%s)", (unsigned long long)c->id, c->addr, why);
        }
        return 1;
    }
    c->set->protocol_errors++;
    if (what & BEV_EVENT_TIMEOUT) {
        log_warn("client id=%llu addr=%s: no TLS handshake within %d ms; closing", (unsigned long long)c->id, c->addr,
                 CONN_TLS_HANDSHAKE_MS);
    } else if (what & BEV_EVENT_ERROR) {
        int err = EVUTIL_SOCKET_ERROR();
        tls_bev_error_text(bev, why, sizeof why);
        if (why[0] == '\0') {
            snprintf(why, sizeof why, "%s", err ? evutil_socket_error_to_string(err) : "connection closed");
        }
        const char *peer = tls_peer_verify_failure(bufferevent_openssl_get_ssl(bev));
        if (peer != NULL) {
            size_t n = strlen(why);
            snprintf(why + n, sizeof why - n, " (the client's certificate: %s)", peer);
        }
        const char *hint = tls_error_hint(why);
        log_warn("client id=%llu addr=%s: TLS handshake failed: %s%s; closing", (unsigned long long)c->id, c->addr, why,
                 hint);
        if (strstr(hint, "plaintext") != NULL) {
            tls_refuse_plaintext(bufferevent_getfd(bev));
        }
    } else {
        log_info("client id=%llu addr=%s: closed the connection during the TLS handshake", (unsigned long long)c->id,
                 c->addr);
    }
    conn_close(c);
    return 1;
}

static void event_cb(struct bufferevent *bev, short what, void *arg)
{
    conn_t *c = arg;
    if (c->tls && !c->tls_ready && tls_handshake_event(c, bev, what)) {
        return;
    }
    if (what & BEV_EVENT_CONNECTED) {
        return;
    }
    if ((what & BEV_EVENT_TIMEOUT) && (what & BEV_EVENT_WRITING)) {
        log_info("client id=%llu addr=%s read none of its last replies for %d ms; closing", (unsigned long long)c->id,
                 c->addr, DRAIN_TIMEOUT_MS);
        conn_close(c);
        return;
    }
    if (what & BEV_EVENT_TIMEOUT) {
        /* Not idle: waiting on us (blocked PULL, replies to come or still being
         * written), or a reply went out within the idle time (Redis counts
         * writes as activity; the read timeout only sees reads). */
        if (c->blocked || c->nslots > 0 || evbuffer_get_length(bufferevent_get_output(bev)) > 0 ||
            clock_mono_ms() - c->last_active_mono < (uint64_t)c->set->cfg->idle_timeout_ms) {
            bufferevent_enable(bev, EV_READ);
            return;
        }
        c->set->idle_kills++;
        log_info("client id=%llu addr=%s idle for %lld ms; closing", (unsigned long long)c->id, c->addr,
                 c->set->cfg->idle_timeout_ms);
        conn_close(c);
        return;
    }
    if (what & BEV_EVENT_ERROR) {
        int err = EVUTIL_SOCKET_ERROR();
        char why[512] = "";
        if (c->tls) {
            tls_bev_error_text(bev, why, sizeof why);
        }
        log_debug("client id=%llu addr=%s: %s; closing", (unsigned long long)c->id, c->addr,
                  why[0] ? why : evutil_socket_error_to_string(err));
    }
    if (what & (BEV_EVENT_EOF | BEV_EVENT_ERROR)) {
        conn_close(c);
    }
}

/* ---- completions from the storage thread ---------------------------------------------- */

void conn_job_done(job_t *j, void *ctx)
{
    conn_set_t *s = ctx;
    s->woken_delivered += j->woken_bytes; /* from now on in the connection's memory (or freed), not in flight */
    uint64_t conn_id = j->conn_id;        /* read first: complete() may free an HTTP job */
    if (j->complete) {
        j->complete(j);
    }
    if (conn_id == 0) {
        return;
    } /* HTTP: complete() owned and freed it */
    if (j->audit != NULL) {
        cmd_audit_done(j);
    }
    conn_t *c = conn_find(s, conn_id);
    if (c == NULL) {
        job_free(j);
        return;
    }
    reply_slot_t *sl = c->slots_head;
    while (sl && !(sl->seq == j->seq && !sl->filled)) {
        sl = sl->next;
    }
    if (sl == NULL) {
        job_free(j);
        return;
    }
    sl->job = j;
    sl->filled = 1;
    c->inflight_bytes -= sl->charge; /* the estimate gives way to the real reply */
    c->reserved_bytes -= sl->reserved;
    sl->reserved = 0;
    sl->charge = j->reply.raw.len;
    c->inflight_bytes += sl->charge;
    conn_flush(c);
    if (c->closing) {
        return;
    }
    if (c->draining) {
        conn_maybe_finish(c);
        return;
    }
    conn_process_input(c);
}

/* ---- the sweep: header-timeout and max-client-memory ------------------------------------ */

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

static void sweep_cb(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    conn_set_t *s = arg;
    const config_t *cfg = s->cfg;
    uint64_t now = clock_mono_ms();
    size_t total = 0;
    for (conn_t *c = s->all, *n; c; c = n) {
        n = c->all_next;
        if (cfg->header_timeout_ms > 0 && c->cmd_started_mono != 0 && !c->draining &&
            now - c->cmd_started_mono >= (uint64_t)cfg->header_timeout_ms) {
            s->header_kills++;
            log_info("client id=%llu addr=%s: command not complete %llu ms after its first byte (header-timeout "
                     "%lld ms); closing",
                     (unsigned long long)c->id, c->addr, (unsigned long long)(now - c->cmd_started_mono),
                     cfg->header_timeout_ms);
            resp_buf_clear(&s->scratch);
            s->scratch.proto = c->proto;
            resp_add_errorf(&s->scratch, "ERR command not complete within header-timeout (%lld ms); closing",
                            cfg->header_timeout_ms);
            c->cmd_started_mono = 0;
            conn_reply(c, s->scratch.raw.data, s->scratch.raw.len);
            conn_start_draining(c);
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
}

/* ---- accepting ----------------------------------------------------------------------- */

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

int conn_accept(conn_set_t *s, evutil_socket_t fd, const struct sockaddr *sa, SSL *ssl)
{
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    struct bufferevent *bev =
        ssl != NULL ? bufferevent_openssl_socket_new(s->base, fd, ssl, BUFFEREVENT_SSL_ACCEPTING, BEV_OPT_CLOSE_ON_FREE)
                    : bufferevent_socket_new(s->base, fd, BEV_OPT_CLOSE_ON_FREE);
    if (bev == NULL) {
        log_error("cannot create a bufferevent for a new client; closing it");
        if (ssl != NULL) {
            SSL_free(ssl);
        }
        evutil_closesocket(fd);
        return -1;
    }
    if (ssl != NULL) {
        /* A client that closes without close_notify (redis-cli, a killed
         * process) ends the stream like a plaintext one: EOF, not an error. */
        bufferevent_openssl_set_allow_dirty_shutdown(bev, 1);
    }
    conn_t *c = xmalloc(sizeof *c);
    memset(c, 0, sizeof *c);
    c->id = ++s->next_id;
    c->set = s;
    c->bev = bev;
    c->proto = RESP_PROTO_2;
    c->tls = ssl != NULL;
    c->authenticated = !server_auth_required(s->srv); /* no users: every role, as before users existed */
    c->roles = c->authenticated ? ROLE_ALL : 0;
    c->created_mono = c->last_active_mono = clock_mono_ms();
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
    if (c->tls) {
        struct timeval tv = { CONN_TLS_HANDSHAKE_MS / 1000, (CONN_TLS_HANDSHAKE_MS % 1000) * 1000 };
        bufferevent_set_timeouts(bev, &tv, NULL); /* the idle timeout follows the handshake */
    } else if (s->cfg->idle_timeout_ms > 0) {
        struct timeval tv = { (time_t)(s->cfg->idle_timeout_ms / 1000),
                              (suseconds_t)(s->cfg->idle_timeout_ms % 1000) * 1000 };
        bufferevent_set_timeouts(bev, &tv, NULL);
    }
    bufferevent_enable(bev, EV_READ | EV_WRITE);
    log_debug("client id=%llu addr=%s connected%s", (unsigned long long)c->id, c->addr, c->tls ? " (TLS)" : "");
    return 0;
}

/* ---- the set ----------------------------------------------------------------------- */

conn_set_t *conn_set_new(const config_t *cfg, struct event_base *base, server_t *srv)
{
    conn_set_t *s = xcalloc(1, sizeof *s);
    s->cfg = cfg;
    s->base = base;
    s->srv = srv;
    s->reading = 1;
    map_init(&s->by_id);
    s->reaper = event_new(base, -1, 0, reaper_cb, s);
    s->sweep = event_new(base, -1, EV_PERSIST, sweep_cb, s);
    if (s->reaper == NULL || s->sweep == NULL) {
        log_error("out of memory creating events");
        abort();
    }
    resp_buf_init(&s->scratch);
    struct timeval tv = { 0, CONN_SWEEP_MS * 1000 };
    event_add(s->sweep, &tv);
    return s;
}

void conn_set_free(conn_set_t *s)
{
    if (s == NULL) {
        return;
    }
    for (conn_t *c = s->all, *n; c; c = n) {
        n = c->all_next;
        conn_close(c);
    }
    conn_t *c = s->dead;
    s->dead = NULL;
    while (c) {
        conn_t *n = c->dead_next;
        conn_free(c);
        c = n;
    }
    event_free(s->reaper);
    event_free(s->sweep);
    map_free(&s->by_id, NULL);
    resp_buf_free(&s->scratch);
    free(s);
}

void conn_set_attach_writer(conn_set_t *s, writer_t *w)
{
    s->writer = w;
    s->writer_running = 1;
}

size_t conn_set_count(const conn_set_t *s)
{
    return (size_t)s->nconns;
}

conn_t *conn_by_id(conn_set_t *s, uint64_t id)
{
    return conn_find(s, id);
}

void conn_set_users_changed(conn_set_t *s, const users_t *users)
{
    for (conn_t *c = s->all; c; c = c->all_next) {
        if (c->user[0] == '\0') {
            continue;
        }
        const users_entry_t *e = users_find(users, c->user, strlen(c->user));
        if (e == NULL || e->disabled) {
            log_info("client id=%llu addr=%s: user '%s' is %s in the reloaded users file: logged out",
                     (unsigned long long)c->id, c->addr, c->user, e ? "disabled" : "gone");
            c->authenticated = 0;
            c->roles = 0;
            c->user[0] = '\0';
        } else {
            c->roles = e->roles;
        }
    }
}

void conn_set_stop_reading(conn_set_t *s)
{
    s->reading = 0;
    for (conn_t *c = s->all; c; c = c->all_next) {
        bufferevent_disable(c->bev, EV_READ);
    }
}

size_t conn_set_drain_all(conn_set_t *s)
{
    s->writer_running = 0;
    s->reading = 0;
    s->draining_all = 1;
    for (conn_t *c = s->all, *n; c; c = n) {
        n = c->all_next;
        conn_flush(c);
        if (!c->closing) {
            c->draining = 1;
            conn_maybe_finish(c);
        }
    }
    if (s->nconns == 0) {
        event_active(s->reaper, 0, 0);
    } /* breaks the loop once the dead are freed */
    return (size_t)s->nconns;
}

void conn_set_stats(const conn_set_t *s, loop_info_t *li)
{
    li->connected_clients = s->nconns;
    li->connected_tls_clients = s->ntls;
    li->tls_connections_total = s->tls_total;
    li->blocked_clients = s->nblocked;
    li->connections_total = s->connections_total;
    li->protocol_errors = s->protocol_errors;
    li->reply_buffer_kills = s->reply_kills;
    li->idle_kills = s->idle_kills;
    li->commands_processed = s->commands;
    li->client_memory = s->client_memory;
    li->memory_kills = s->memory_kills;
    li->header_timeout_kills = s->header_kills;
}

const char *conn_user_shown(const conn_t *c)
{
    return c->user[0] ? c->user : (c->authenticated ? "default" : "-");
}

size_t conn_kill(conn_set_t *s, const conn_kill_filter_t *f, conn_t *self, int *self_matched)
{
    size_t n = 0;
    *self_matched = 0;
    conn_t *next;
    for (conn_t *c = s->all; c; c = next) {
        next = c->all_next; /* conn_close unlinks c */
        if ((f->id != 0 && c->id != f->id) || (f->addr != NULL && strcmp(c->addr, f->addr) != 0) ||
            (f->user != NULL && strcmp(conn_user_shown(c), f->user) != 0) || (f->skip_self && c == self)) {
            continue;
        }
        n++;
        log_info("client id=%llu addr=%s user=%s: closed by CLIENT KILL from client id=%llu user=%s",
                 (unsigned long long)c->id, c->addr, conn_user_shown(c), (unsigned long long)self->id,
                 conn_user_shown(self));
        if (c == self) {
            *self_matched = 1;
        } else {
            conn_close(c);
        }
    }
    return n;
}

void conn_list(const conn_set_t *s, buf_t *out, const conn_t *only)
{
    uint64_t now = clock_mono_ms();
    for (const conn_t *c = s->all; c; c = c->all_next) {
        if (only && c != only) {
            continue;
        }
        /* Redis's fields (clients such as redis-py parse id, age, idle, db, sub,
         * psub, multi, qbuf, qbuf-free, argv-mem, obl, oll, omem, tot-mem as
         * integers and fail when one is missing), then ours (replies; tls:
         * yes for a connection from tls-port). */
        size_t qbuf = evbuffer_get_length(bufferevent_get_input(c->bev));
        size_t omem = evbuffer_get_length(bufferevent_get_output(c->bev));
        buf_printf(out,
                   "id=%llu addr=%s laddr=? fd=%d name=%s age=%llu idle=%llu flags=%s db=0 sub=0 psub=0 ssub=0 "
                   "multi=%d qbuf=%zu qbuf-free=0 argv-mem=0 multi-mem=0 rbs=0 rbp=0 obl=0 oll=%zu omem=%zu "
                   "tot-mem=%zu events=r cmd=%s user=%s redir=-1 resp=%d replies=%zu tls=%s\n",
                   (unsigned long long)c->id, c->addr, (int)bufferevent_getfd(c->bev), c->name,
                   (unsigned long long)((now - c->created_mono) / 1000),
                   (unsigned long long)((now - c->last_active_mono) / 1000),
                   c->blocked ? "b"
                   : c->multi ? "x"
                              : "N",
                   c->multi ? 1 : -1, qbuf, c->nslots, omem, qbuf + omem, c->last_cmd[0] ? c->last_cmd : "NULL",
                   conn_user_shown(c), c->proto, c->nslots, c->tls ? "yes" : "no");
    }
}
