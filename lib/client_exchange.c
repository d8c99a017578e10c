/*
 * lib/client_exchange.c — the exchange: write the request while reading
 * the replies.
 *
 * client_exchange writes the request bytes and reads replies in one poll
 * loop, so a big pipeline never deadlocks against the broker's own
 * backpressure, taking each reply out of `in` as soon as it is whole
 * (lib/wire.h) and dropping RESP3 pushes. Through TLS every byte goes
 * through lib/tlsconn.h, whose decrypted bytes poll cannot see. The read
 * timeout is an inactivity timeout: any byte of progress resets it.
 * It needs a connected client and never connects: client_ensure
 * (client_connect.c) runs its AUTH through it, and client_call
 * (client_api.c) puts the two together.
 *
 * client_exchange_notice is the same exchange that also tells its caller,
 * once, when the replies are slow (client_notice_t): the poll wakes at the
 * notice's moment as well as for the socket and the read timeout.
 *
 * Invariant: any failure closes the connection (after a timeout or a
 * malformed reply the stream position is unknown), and so do replies that
 * all arrived before the request was all written (the broker refused it
 * unread, see client_exchange), so when fd >= 0 no reply is outstanding.
 * Thread: the client's one thread; the wake fd cuts waits short when
 * CLIENT_INTERRUPTIBLE asks for it, the stop fd (hg_client_set_stop_fd)
 * every wait.
 */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include "lib/client.h"
#include "lib/client_internal.h"
#include "lib/tlsconn.h"
#include "lib/wire.h"

#include <errno.h>
#include <poll.h>
#include <string.h>
#include <sys/socket.h>

/* ------------------------------------------------------------------------
 * The exchange: write while reading
 * ------------------------------------------------------------------------ */

/* Take as many whole replies as `in` holds into replies[*got..nreplies)
 * (RESP3 pushes are out-of-band data, not replies: dropped). Returns HG_OK
 * (maybe with fewer than wanted), or HG_ERR_PROTOCOL. */
static hg_err_t parse_replies(hg_client_t *c, size_t nreplies, resp_reply_t **replies, size_t *got)
{
    char why[160];

    while (*got < nreplies) {
        resp_reply_t *r = NULL;
        resp_status_t st = wire_take_reply(&c->in, &c->in_off, &r, why, sizeof(why));
        if (st == RESP_NEED_MORE)
            break;
        if (st != RESP_OK)
            return client_fail(c, HG_ERR_PROTOCOL, "bad reply from %s: %s", c->address, why);
        if (r->type == RESP_REPLY_PUSH) {
            resp_reply_free(r);
            continue;
        }
        replies[(*got)++] = r;
    }
    return HG_OK;
}

/* send(2) / recv(2) on the connection, through TLS when it has it. */
static ssize_t conn_send(hg_client_t *c, const char *data, size_t len)
{
    if (c->tls != NULL)
        return tlsconn_send(c->tls, data, len);
    return send(c->fd, data, len, MSG_NOSIGNAL);
}

static ssize_t conn_recv(hg_client_t *c)
{
    if (c->tls != NULL)
        return tlsconn_recv(c->tls, &c->in);
    return wire_recv(c->fd, &c->in);
}

/* What a failed conn_send / conn_recv says (errno, and TLS's reason). */
static const char *conn_error(const hg_client_t *c)
{
    if (c->tls != NULL && tlsconn_error(c->tls)[0] != '\0')
        return tlsconn_error(c->tls);
    return strerror(errno);
}

hg_err_t client_exchange(hg_client_t *c, const char *req, size_t reqlen, size_t nreplies, resp_reply_t **replies,
                         size_t *got, uint32_t extra_wait_ms, int flags)
{
    return client_exchange_notice(c, req, reqlen, nreplies, replies, got, extra_wait_ms, flags, NULL);
}

hg_err_t client_exchange_notice(hg_client_t *c, const char *req, size_t reqlen, size_t nreplies, resp_reply_t **replies,
                                size_t *got, uint32_t extra_wait_ms, int flags, const client_notice_t *notice)
{
    size_t written = 0;
    uint64_t wait_ms, deadline, notice_at = 0;
    hg_err_t e = HG_OK;

    *got = 0;
    if (c->tops != NULL)
        return client_fail(c, HG_ERR_UNSUPPORTED, "raw RESP requests are not supported on %s", c->tops->scheme);
    if (c->fd < 0)
        return client_fail(c, HG_ERR_IO, "not connected to %s", c->address);
    wait_ms = c->opts.read_timeout_ms == 0 ? 0 : (uint64_t)c->opts.read_timeout_ms + extra_wait_ms;
    deadline = wait_ms == 0 ? 0 : wire_now_ms() + wait_ms;
    if (notice != NULL)
        notice_at = wire_now_ms() + notice->ms; /* fixed: bytes of a reply do not move it */

    /* Bytes already received (a push before our reply) are parsed first. */
    e = parse_replies(c, nreplies, replies, got);

    /* Every reply in before the request is all written happens when the broker
     * refuses a command it could not read whole (a bulk past max-bulk): it
     * answers "-ERR Protocol error …" and closes. That answer is the outcome;
     * writing on would only meet the close and lose it (HG_ERR_IO). */
    while (e == HG_OK && (*got < nreplies || (nreplies == 0 && written < reqlen))) {
        struct pollfd p[3];
        int n, np = 1, stops = 0, left = wire_poll_ms(deadline);

        if (left == 0) {
            e = client_fail(c, HG_ERR_TIMEOUT, "no reply from %s within %llums", c->address,
                            (unsigned long long)wait_ms);
            break;
        }
        if (notice_at != 0) {
            int until_notice = wire_poll_ms(notice_at);
            if (until_notice == 0) {
                notice_at = 0; /* once */
                notice->fn(notice->arg);
                continue;
            }
            if (left < 0 || until_notice < left)
                left = until_notice;
        }
        p[0].fd = c->fd;
        p[0].events = (short)(POLLIN | (written < reqlen ? POLLOUT : 0));
        p[0].revents = 0;
        if (c->tls != NULL && written < reqlen)
            p[0].events |= tlsconn_wants(c->tls); /* a TLS write may wait for input, too */
        if ((flags & CLIENT_INTERRUPTIBLE) && c->wake_fd >= 0)
            p[np++] = (struct pollfd){ c->wake_fd, POLLIN, 0 };
        if (c->stop_fd >= 0)
            p[np++] = (struct pollfd){ c->stop_fd, POLLIN, 0 };
        if (c->tls != NULL && tlsconn_pending(c->tls)) {
            /* decrypted bytes poll cannot see: read them now */
            n = poll(p, (nfds_t)np, 0);
            if (n >= 0) {
                p[0].revents |= POLLIN;
                n = 1;
            }
        } else
            n = poll(p, (nfds_t)np, left);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            e = client_fail(c, HG_ERR_IO, "poll: %s", strerror(errno));
            break;
        }
        if (n == 0)
            continue; /* the deadline check above reports it */
        for (int i = 1; i < np; i++)
            stops |= (p[i].revents & POLLIN) != 0;
        if (stops) {
            e = client_fail(c, HG_ERR_STOPPED, "stopped while waiting for %s", c->address);
            break;
        }
        if ((p[0].revents & (c->tls != NULL ? POLLIN | POLLOUT : POLLOUT)) && written < reqlen) {
            ssize_t w = conn_send(c, req + written, reqlen - written);
            if (w > 0) {
                written += (size_t)w;
                if (deadline != 0)
                    deadline = wire_now_ms() + wait_ms;
            } else if (w < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
                e = client_fail(c, HG_ERR_IO, "connection to %s lost while sending: %s", c->address, conn_error(c));
                break;
            }
        }
        if (p[0].revents & (POLLIN | POLLHUP | POLLERR)) {
            ssize_t r = conn_recv(c);
            if (r > 0) {
                if (deadline != 0)
                    deadline = wire_now_ms() + wait_ms;
                e = parse_replies(c, nreplies, replies, got);
            } else if (r == 0) {
                e = client_fail(c, HG_ERR_IO, "connection to %s closed by the broker", c->address);
            } else if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
                e = client_fail(c, HG_ERR_IO, "connection to %s lost: %s", c->address, conn_error(c));
            }
        }
    }
    if (e != HG_OK || written < reqlen)
        client_disconnect(c); /* unsent bytes: this stream can carry nothing more */
    return e;
}
