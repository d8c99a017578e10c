/*
 * tests/helpers/loopback_dial.c — a loopback TCP connect with a deadline per
 * attempt and retries from a new port (contract and the reason:
 * loopback_dial.h). Each attempt is a non-blocking connect(2) waited on
 * with poll(2) for POLLOUT, then SO_ERROR read: 0 is connected, anything
 * else is the kernel's answer and ends the dial.
 */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include "tests/helpers/loopback_dial.h"

#include "base/clock.h"

#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

/* The end of an attempt started now: try_ms on, but never past deadline. */
static uint64_t attempt_end(const loopback_dial_t *how)
{
    uint64_t end = clock_mono_ms() + (uint64_t)how->try_ms;
    return how->deadline != 0 && how->deadline < end ? how->deadline : end;
}

/* Wait for fd's connect to finish until end: 1 done (SO_ERROR into *soerr),
 * 0 stalled, -1 with errno (poll failed). */
static int await_connect(int fd, uint64_t end, const loopback_dial_t *how, int *soerr)
{
    for (;;) {
        uint64_t now = clock_mono_ms();
        if (now >= end)
            return 0;
        if (how->pump != NULL)
            how->pump(how->ctx);
        struct pollfd p = { .fd = fd, .events = POLLOUT };
        int n = poll(&p, 1, how->pump != NULL ? 1 : (int)(end - now));
        if (n < 0 && errno != EINTR)
            return -1;
        if (n > 0) {
            socklen_t sl = sizeof *soerr;
            return getsockopt(fd, SOL_SOCKET, SO_ERROR, soerr, &sl) == 0 ? 1 : -1;
        }
    }
}

int loopback_dial(int port, const loopback_dial_t *how, int *why)
{
    struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port) };
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    for (int attempt = 0; attempt < how->tries; attempt++) {
        if (how->deadline != 0 && clock_mono_ms() >= how->deadline)
            break;
        int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
        if (fd < 0) {
            *why = errno;
            return -1;
        }
        if (how->prepare != NULL && how->prepare(fd, how->prepare_arg) != 0) {
            *why = errno;
            close(fd);
            return -1;
        }
        int soerr = 0, done = 1;
        if (connect(fd, (struct sockaddr *)&sa, sizeof sa) != 0) {
            if (errno != EINPROGRESS)
                soerr = errno;
            else if ((done = await_connect(fd, attempt_end(how), how, &soerr)) < 0)
                soerr = errno;
        }
        if (done != 0 && soerr == 0)
            return fd;
        close(fd);
        if (done != 0) {
            *why = soerr;
            return -1;
        }
    }
    *why = ETIMEDOUT;
    return -1;
}
