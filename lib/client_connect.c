/*
 * lib/client_connect.c — connecting a client: client_ensure.
 *
 * client_ensure gives a live connection: it reuses the socket when it is
 * still usable (an idle socket the broker closed — restart, idle timeout —
 * is seen by poll + MSG_PEEK before anything is written, so it is replaced
 * without doubt about a half-sent command), else runs connection rounds:
 * getaddrinfo, each address with connect_timeout_ms (wire_connect), the TLS
 * handshake within the same timeout, then AUTH when the URI has
 * credentials. A failed round is retried after
 * hg_backoff_delay(reconnect_backoff, k); an AUTH refusal, a stop or a
 * certificate that fails verification end it at once (retrying cannot
 * help). Other transports (amqp://) connect through their transport_ops.
 *
 * client_attempt_bound_ms and client_connect_bound_ms say the longest one
 * connection round and client_ensure can take (hg_client_send_bound_ms);
 * kept here, next to the waits they count.
 *
 * Invariant: a round that fails leaves fd == -1 with the client's error set;
 * one that succeeds counts in connects, with `in` empty.
 * Thread: the client's one thread; the wake and stop fds cut the backoff
 * sleeps short; the stop fd also cuts the TCP connect, the TLS handshake
 * and AUTH's wait (a broker that accepts but never answers, or is
 * SIGSTOPped), and a connect that has not begun.
 */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include "lib/client.h"
#include "lib/backoff.h"
#include "lib/client_internal.h"
#include "lib/tlsconn.h"
#include "lib/wire.h"

#include <errno.h>
#include <netdb.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>

/* ------------------------------------------------------------------------
 * Connecting
 * ------------------------------------------------------------------------ */

/* One connection round: resolve, try each address, AUTH. Returns HG_OK or
 * HG_ERR_CONNECT / HG_ERR_AUTH with the error set. */
static hg_err_t connect_round(hg_client_t *c)
{
    struct addrinfo hints, *res = NULL;
    char port[8];
    int rc, why = 0;

    memset(&hints, 0, sizeof(hints));
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    /* No AI_ADDRCONFIG: with only a loopback interface (a container, a CI
     * namespace) glibc would then refuse even "localhost". */
    snprintf(port, sizeof(port), "%d", c->uri.port);
    rc = getaddrinfo(c->uri.host, port, &hints, &res);
    if (rc != 0)
        return client_fail(c, HG_ERR_CONNECT, "cannot resolve host '%s': %s", c->uri.host,
                           rc == EAI_SYSTEM ? strerror(errno) : gai_strerror(rc));
    for (struct addrinfo *ai = res; ai != NULL && why != ECANCELED; ai = ai->ai_next) {
        c->fd = wire_connect(ai->ai_addr, ai->ai_addrlen, c->opts.connect_timeout_ms, c->stop_fd, &why);
        if (c->fd >= 0)
            break;
    }
    freeaddrinfo(res);
    if (c->fd < 0 && why == ECANCELED)
        return client_fail(c, HG_ERR_STOPPED, "stopped while connecting to %s", c->address);
    if (c->fd < 0)
        return client_fail(c, HG_ERR_CONNECT, "cannot connect to %s: %s", c->address,
                           why == ETIMEDOUT ? "connection timed out" : strerror(why));
    buf_clear(&c->in);
    c->in_off = 0;
    c->verify_failed = 0;
    if (c->tls_ctx != NULL) {
        char msg[HG_ERRMSG_MAX - 64];
        if (tlsconn_open(c->tls_ctx, c->fd, c->tls_name, wire_now_ms() + c->opts.connect_timeout_ms, c->stop_fd,
                         &c->tls, &c->verify_failed, msg, sizeof(msg)) < 0) {
            int stopped = errno == ECANCELED;
            client_disconnect(c);
            if (stopped)
                return client_fail(c, HG_ERR_STOPPED, "stopped during the TLS handshake with %s", c->address);
            return client_fail(c, HG_ERR_CONNECT, "cannot connect to %s: %s", c->address, msg);
        }
    }

    if (c->uri.has_auth) {
        const char *argv[3] = { "AUTH", c->uri.user, c->uri.password };
        buf_t req = BUF_INIT; /* not c->out: it may hold the caller's request */
        resp_reply_t *reply = NULL;
        size_t got = 0;
        hg_err_t e;

        resp_add_command(&req, 3, argv, NULL);
        e = client_exchange(c, req.data, req.len, 1, &reply, &got, 0, 0);
        memset(req.data, 0, req.len); /* the password */
        buf_free(&req);
        if (e == HG_ERR_STOPPED)
            return client_fail(c, HG_ERR_STOPPED, "stopped during AUTH with %s", c->address);
        if (e != HG_OK)
            return client_fail(c, HG_ERR_CONNECT, "cannot connect to %s: during AUTH: %s", c->address, c->errmsg);
        if (reply->type == RESP_REPLY_ERROR) {
            client_fail(c, HG_ERR_AUTH, "authentication as '%s' failed: %.*s", c->uri.user,
                        (int)(reply->len > 200 ? 200 : reply->len), reply->str);
            resp_reply_free(reply);
            client_disconnect(c);
            return HG_ERR_AUTH;
        }
        resp_reply_free(reply);
    }
    c->connects++;
    return HG_OK;
}

uint64_t client_attempt_bound_ms(const hg_client_t *c)
{
    uint64_t connect = c->opts.connect_timeout_ms;

    if (c->uri.has_auth && c->opts.read_timeout_ms == 0)
        return HG_UNBOUNDED;
    /* connect_round's waits: wire_connect, tlsconn_open's own deadline, AUTH's reply */
    return connect + (c->tls_ctx != NULL ? connect : 0) + (c->uri.has_auth ? c->opts.read_timeout_ms : 0);
}

/* 1 when the idle socket is still usable: no EOF or error pending. */
static int socket_alive(hg_client_t *c)
{
    struct pollfd p = { c->fd, POLLIN, 0 };
    char byte;
    ssize_t n;

    if (c->tls != NULL)
        return tlsconn_alive(c->tls);
    if (poll(&p, 1, 0) <= 0)
        return 1; /* nothing pending: alive */
    if (p.revents & (POLLERR | POLLNVAL))
        return 0;
    n = recv(c->fd, &byte, 1, MSG_PEEK | MSG_DONTWAIT);
    if (n == 0)
        return 0; /* EOF: the broker closed it */
    if (n < 0)
        return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR;
    return 1; /* unsolicited bytes (a RESP3 push): read with the next reply */
}

uint64_t client_connect_bound_ms(const hg_client_opts_t *o, uint64_t attempt_ms)
{
    unsigned retries = o->reconnect ? (unsigned)o->reconnect_backoff.attempts : 0;

    if (attempt_ms == HG_UNBOUNDED || (o->reconnect && retries == 0))
        return HG_UNBOUNDED;
    /* client_ensure: an attempt, then a pause and an attempt per retry. The
     * inputs are bounded (32-bit timeouts, at most 10^6 retries, 8 hosts):
     * no overflow. */
    return (1u + (uint64_t)retries) * attempt_ms + backoff_total_ms(&o->reconnect_backoff, retries);
}

hg_err_t client_ensure(hg_client_t *c)
{
    const hg_backoff_t *b = &c->opts.reconnect_backoff;
    unsigned attempt = 0;
    hg_err_t e;

    if (c->tops != NULL)
        return c->tops->ensure(c, c->tstate);
    if (c->fd >= 0) {
        if (socket_alive(c))
            return HG_OK;
        client_disconnect(c);
    }
    for (;;) {
        if (client_woken(c->stop_fd))
            return client_fail(c, HG_ERR_STOPPED, "stopped before connecting to %s", c->address);
        e = connect_round(c);
        if (e == HG_OK || e == HG_ERR_AUTH || e == HG_ERR_STOPPED || c->verify_failed)
            return e;
        if (!c->opts.reconnect || (b->attempts > 0 && attempt >= (unsigned)b->attempts)) {
            if (attempt > 0) {
                size_t len = strlen(c->errmsg);
                snprintf(c->errmsg + len, sizeof(c->errmsg) - len, " (after %u attempts)", attempt + 1);
            }
            return e;
        }
        if (client_pause(c, hg_backoff_delay(b, attempt, NULL, NULL)) < 0)
            return client_fail(c, HG_ERR_STOPPED, "stopped while reconnecting to %s", c->address);
        attempt++;
    }
}
