/*
 * lib/wire.c — blocking RESP socket primitives (contract: wire.h).
 *
 * Every wait is a poll() against a monotonic deadline, so nothing here can
 * hang past its caller's timeout. The input buffer keeps the unparsed tail
 * at [*off, len); wire_take_reply drops the parsed prefix when everything is
 * parsed (O(1): lengths reset) or when it exceeds one read chunk (one
 * memmove of the tail), so a pipeline of many small replies is parsed in
 * linear time. Runs on the caller's thread; no state of its own.
 */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include "lib/wire.h"
#include "base/clock.h"

#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <time.h>
#include <unistd.h>

uint64_t wire_now_ms(void)
{
    return clock_mono_ms();
}

int wire_poll_ms(uint64_t deadline)
{
    if (deadline == 0)
        return -1;
    uint64_t now = wire_now_ms();
    if (now >= deadline)
        return 0;
    return deadline - now > 1000000 ? 1000000 : (int)(deadline - now);
}

int wire_wait(int fd, short events, uint64_t deadline)
{
    return wire_wait_stop(fd, events, deadline, -1);
}

int wire_wait_stop(int fd, short events, uint64_t deadline, int stop_fd)
{
    for (;;) {
        struct pollfd p[2] = { { .fd = fd, .events = events }, { .fd = stop_fd, .events = POLLIN } };
        int n = poll(p, stop_fd >= 0 ? 2 : 1, wire_poll_ms(deadline));
        if (n > 0 && stop_fd >= 0 && (p[1].revents & POLLIN))
            return WIRE_STOPPED;
        if (n > 0 && p[0].revents != 0)
            return 1;
        if (n == 0)
            return 0;
        if (n < 0 && errno != EINTR)
            return -1;
        /* EINTR, or only a hang-up on stop_fd (its writer went away: no stop) */
        if (n > 0)
            stop_fd = -1;
    }
}

int wire_connect(const struct sockaddr *sa, socklen_t salen, uint32_t timeout_ms, int stop_fd, int *why)
{
    int one = 1, soerr = 0;
    socklen_t sl = sizeof soerr;
    int fd = socket(sa->sa_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);

    if (fd < 0) {
        *why = errno;
        return -1;
    }
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    if (connect(fd, sa, salen) != 0) {
        if (errno != EINPROGRESS) {
            *why = errno;
            close(fd);
            return -1;
        }
        int w = wire_wait_stop(fd, POLLOUT, wire_now_ms() + timeout_ms, stop_fd);
        if (w != 1) {
            *why = w == 0 ? ETIMEDOUT : w == WIRE_STOPPED ? ECANCELED : errno;
            close(fd);
            return -1;
        }
        if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &soerr, &sl) != 0 || soerr != 0) {
            *why = soerr != 0 ? soerr : errno;
            close(fd);
            return -1;
        }
    }
    return fd;
}

ssize_t wire_recv(int fd, buf_t *in)
{
    char *dst = buf_reserve(in, WIRE_READ_CHUNK);
    ssize_t n = recv(fd, dst, WIRE_READ_CHUNK, MSG_DONTWAIT);
    if (n > 0)
        in->len += (size_t)n;
    return n;
}

resp_status_t wire_take_reply(buf_t *in, size_t *off, resp_reply_t **out, char *why, size_t whylen)
{
    size_t used = 0;

    *out = NULL;
    if (*off >= in->len)
        return RESP_NEED_MORE;
    resp_status_t st = resp_reply_parse(in->data + *off, in->len - *off, NULL, out, &used, why, whylen);
    if (st != RESP_OK)
        return st;
    *off += used;
    if (*off == in->len) {
        in->len = 0;
        *off = 0;
    } else if (*off > WIRE_READ_CHUNK) {
        buf_consume(in, *off);
        *off = 0;
    }
    return RESP_OK;
}
