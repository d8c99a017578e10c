/*
 * broker/conn_accept.c — accepting a client: an accepted socket becomes a
 * connection (TCP_NODELAY, the parser with the configured limits, the idle
 * timeout), and its bufferevent's callbacks: input to parse, output
 * written, and events (the TLS handshake's outcome, the drain and idle
 * timeouts, EOF and errors).
 *
 * TLS: a connection from tls-port has an OpenSSL bufferevent (accepting
 * state); everything above the bufferevent is the same. The handshake must
 * complete (BEV_EVENT_CONNECTED) within CONN_TLS_HANDSHAKE_MS of the accept:
 * the sweep (conn_sweep.c) closes it otherwise — a read timeout would not
 * do, since every byte read pushes it back and a client trickling its
 * ClientHello would hold the connection (and a max-clients slot) for ever.
 * Handshakes cost the loop CPU (a key exchange and a signature each), so
 * they are bounded twice: per address, at most tls-max-handshakes-per-
 * address of them in progress (conn_tls_admit, before the SSL is even
 * made: one address cannot hold the CPU or max-clients with handshakes);
 * and in time, their events run at CONN_PRIO_HANDSHAKE, after every other
 * ready event, CONN_HANDSHAKES_PER_PASS at a time (conn.h), so many
 * addresses starting handshakes together delay a logged-in client's
 * command by a few handshakes at most, not by all of them.
 * A failed handshake is logged with OpenSSL's reason (and a hint
 * when it looks like plaintext on the TLS port). With
 * tls-auth-clients-user cn a completed handshake with a verified client
 * certificate logs the connection in as the user its CN names (its only
 * CN: a subject with several names no user).
 *
 * Invariants: a connection is linked into the set (conn_link) before any of
 * its callbacks can run; a callback that ends it calls conn_close, never
 * frees it.
 *
 * Thread: everything here runs on the event-loop thread.
 */
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
#include "base/clock.h"
#include "broker/authfail.h"
#include "broker/conn_internal.h"
#include "broker/server.h"
#include "broker/users.h"
#include "common/log.h"
#include "common/tls_server.h"

#define READ_HIGH_WATERMARK (1u << 20) /* input held while blocked/paused */

void conn_format_addr(const struct sockaddr *sa, char *out, size_t outlen)
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

/* ---- handshakes: per address, and their priority ------------------------------------------ */

struct event_base *conn_event_base_new(void)
{
    struct event_config *cfg = event_config_new();
    if (cfg == NULL) {
        return NULL;
    }
    /* After CONN_HANDSHAKES_PER_PASS callbacks of priority CONN_PRIO_HANDSHAKE, look for other events again. */
    event_config_set_max_dispatch_interval(cfg, NULL, CONN_HANDSHAKES_PER_PASS, CONN_PRIO_HANDSHAKE);
    struct event_base *base = event_base_new_with_config(cfg);
    event_config_free(cfg);
    if (base != NULL && event_base_priority_init(base, CONN_PRIORITIES) != 0) {
        event_base_free(base);
        return NULL;
    }
    return base;
}

static uintptr_t hs_count(const conn_set_t *s, const char *key)
{
    return (uintptr_t)map_get(&s->hs_by_addr, key, strlen(key));
}

static void hs_set(conn_set_t *s, const char *key, uintptr_t n)
{
    if (n == 0) {
        map_del(&s->hs_by_addr, key, strlen(key));
    } else {
        map_put(&s->hs_by_addr, key, strlen(key), (void *)n);
    }
}

_Static_assert(CONN_ADDR_KEY_SIZE >= AUTHFAIL_ADDR_MAX + 1, "an address key holds authfail_key's longest");
_Static_assert(sizeof((conn_t *)0)->hs_key == CONN_ADDR_KEY_SIZE, "conn_t.hs_key holds an address key");

int conn_tls_admit(conn_set_t *s, const struct sockaddr *sa, char key[CONN_ADDR_KEY_SIZE])
{
    long long max = s->cfg->tls_max_handshakes_per_address;
    char addr[64];
    conn_format_addr(sa, addr, sizeof addr);
    authfail_key(addr, key, CONN_ADDR_KEY_SIZE); /* computed once: conn_accept counts the handshake under it */
    if (max <= 0) {
        return 0;
    }
    uintptr_t n = hs_count(s, key);
    if (n < (uintptr_t)max) {
        return 0;
    }
    s->hs_refused++;
    log_limit_count(&s->refusal_log, LOG_LEVEL_WARN, "handshakes per address",
                    "closed a client from %s on tls-port before its handshake: %llu handshakes from that address are "
                    "in progress (tls-max-handshakes-per-address %lld; %llu closed so far)",
                    key, (unsigned long long)n, max, (unsigned long long)s->hs_refused);
    return -1;
}

/* c (from tls-port, just accepted) starts its handshake: count it under its address's key (conn_tls_admit's), and
 * run its events after everything else (conn.h). */
static void handshake_start(conn_t *c, const char *hs_key)
{
    conn_set_t *s = c->set;
    snprintf(c->hs_key, sizeof c->hs_key, "%s", hs_key);
    hs_set(s, c->hs_key, hs_count(s, c->hs_key) + 1);
    c->hs_counted = 1;
    s->hs_in_progress++;
    bufferevent_priority_set(c->bev, CONN_PRIO_HANDSHAKE);
}

void conn_handshake_release(conn_t *c)
{
    if (!c->hs_counted) {
        return;
    }
    conn_set_t *s = c->set;
    uintptr_t n = hs_count(s, c->hs_key);
    hs_set(s, c->hs_key, n > 0 ? n - 1 : 0);
    s->hs_in_progress--;
    c->hs_counted = 0;
}

/* ---- callbacks --------------------------------------------------------------------------------- */

static void read_cb(struct bufferevent *bev, void *arg)
{
    (void)bev;
    conn_process_input(arg);
}

/* Called when the output has been written out whole (its low watermark is
 * 0): a write pass, not a reply. A reply written counts as activity for
 * idle-timeout (as Redis), stamped here once a pass; while replies wait in
 * the output, event_cb sees them there. */
static void write_cb(struct bufferevent *bev, void *arg)
{
    (void)bev;
    conn_t *c = arg;
    c->last_active_mono = clock_mono_ms();
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
    /* Exactly one CN: with several, which one names the user is a guess — OpenSSL's text lookup takes the first,
     * other tools (a CA that checked the request) the last — and a guess is how "CN=ops, CN=grafana" becomes
     * the admin. */
    const X509_NAME *subject = X509_get_subject_name(x);
    int first = X509_NAME_get_index_by_NID(subject, NID_commonName, -1);
    if (first >= 0 && X509_NAME_get_index_by_NID(subject, NID_commonName, first) >= 0) {
        log_warn("client id=%llu addr=%s: its certificate's subject has more than one CN, so none names a user; AUTH "
                 "needed",
                 (unsigned long long)c->id, c->addr);
        return;
    }
    char cn[USERS_NAME_MAX + 2];
    int n = X509_NAME_get_text_by_NID(subject, NID_commonName, cn, (int)sizeof cn);
    if (n <= 0 || n > USERS_NAME_MAX || strlen(cn) != (size_t)n) {
        log_info("client id=%llu addr=%s: its certificate has no CN that can name a user (at most %d bytes); AUTH "
                 "needed",
                 (unsigned long long)c->id, c->addr, USERS_NAME_MAX);
        return;
    }
    const users_entry_t *e = users_find(server_users(s->srv), cn, (size_t)n);
    if (e == NULL || e->disabled) {
        for (char *p = cn; *p; p++) { /* the CA signed it, but a control byte still never reaches the log raw */
            if ((unsigned char)*p < 0x20 || (unsigned char)*p >= 0x7f) {
                *p = '?';
            }
        }
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
        conn_handshake_release(c);
        /* Back to the loop's default priority (libevent's OpenSSL bufferevent re-assigns its events at the end of
         * the handshake, which does so already; said here so as not to depend on it). */
        bufferevent_priority_set(bev, CONN_PRIO_DEFAULT);
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
    if (what & BEV_EVENT_ERROR) {
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

void conn_handshake_expired(conn_t *c)
{
    c->set->protocol_errors++;
    log_warn("client id=%llu addr=%s: no TLS handshake within %d ms; closing", (unsigned long long)c->id, c->addr,
             CONN_TLS_HANDSHAKE_MS);
    conn_close(c);
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
                 c->addr, CONN_DRAIN_TIMEOUT_MS);
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

int conn_accept(conn_set_t *s, evutil_socket_t fd, const struct sockaddr *sa, SSL *ssl, const char *hs_key)
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
    c->unauth_since_mono = c->created_mono; /* read only while not authenticated (auth-timeout) */
    conn_format_addr(sa, c->addr, sizeof c->addr);
    resp_limits_t lim = {
        .max_args = (size_t)s->cfg->max_args,
        .max_bulk = (size_t)s->cfg->max_bulk,
        .max_inline = (size_t)s->cfg->max_inline,
        .max_query = (size_t)s->cfg->max_query,
    };
    resp_parser_init(&c->parser, &lim);
    conn_link(s, c);
    s->connections_total++;
    if (c->tls) {
        handshake_start(c, hs_key);
    }
    bufferevent_setcb(bev, read_cb, write_cb, event_cb, c);
    bufferevent_setwatermark(bev, EV_READ, 0, READ_HIGH_WATERMARK);
    if (!c->tls && s->cfg->idle_timeout_ms > 0) { /* TLS: the sweep bounds the handshake; the idle timeout follows it */
        struct timeval tv = { (time_t)(s->cfg->idle_timeout_ms / 1000),
                              (suseconds_t)(s->cfg->idle_timeout_ms % 1000) * 1000 };
        bufferevent_set_timeouts(bev, &tv, NULL);
    }
    bufferevent_enable(bev, EV_READ | EV_WRITE);
    log_debug("client id=%llu addr=%s connected%s", (unsigned long long)c->id, c->addr, c->tls ? " (TLS)" : "");
    return 0;
}
