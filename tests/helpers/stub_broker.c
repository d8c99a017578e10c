/*
 * tests/helpers/stub_broker.c — the loopback stub of stub_broker.h: one
 * thread polls the listening socket, the accepted connections and a stop
 * pipe; a connection that writes anything gets "+OK\r\n" per read, one that
 * closes is closed. Connections beyond SB_MAX_CONNS stay in the backlog
 * (their TCP connect still succeeds, which is all a client without
 * credentials waits for).
 */
#include "tests/helpers/stub_broker.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

static void *serve(void *arg)
{
    sb_t *s = arg;
    for (;;) {
        struct pollfd p[SB_MAX_CONNS + 2];
        size_t n = 0;
        p[n++] = (struct pollfd){ s->stop[0], POLLIN, 0 };
        p[n++] = (struct pollfd){ s->listen_fd, s->nconns < SB_MAX_CONNS ? POLLIN : 0, 0 };
        for (size_t i = 0; i < s->nconns; i++)
            p[n++] = (struct pollfd){ s->conns[i], POLLIN, 0 };
        if (poll(p, n, -1) < 0) {
            if (errno == EINTR)
                continue;
            return NULL;
        }
        if (p[0].revents != 0)
            return NULL;
        for (size_t k = 2; k < n; k++) { /* p[k] is conns[k - 2] */
            char buf[4096];
            int *fd = &s->conns[k - 2];
            if (p[k].revents == 0)
                continue;
            ssize_t got = read(*fd, buf, sizeof buf);
            if (got <= 0 || send(*fd, "+OK\r\n", 5, MSG_NOSIGNAL) != 5) {
                close(*fd);
                *fd = -1;
            }
        }
        size_t kept = 0;
        for (size_t i = 0; i < s->nconns; i++)
            if (s->conns[i] >= 0)
                s->conns[kept++] = s->conns[i];
        s->nconns = kept;
        if ((p[1].revents & POLLIN) && s->nconns < SB_MAX_CONNS) {
            int fd = accept(s->listen_fd, NULL, NULL);
            if (fd >= 0)
                s->conns[s->nconns++] = fd;
        }
    }
}

int sb_start(sb_t *s, char *err, size_t errlen)
{
    struct sockaddr_in a = { .sin_family = AF_INET };
    socklen_t alen = sizeof a;

    memset(s, 0, sizeof *s);
    s->listen_fd = -1;
    s->stop[0] = s->stop[1] = -1;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    s->listen_fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (s->listen_fd < 0 || bind(s->listen_fd, (struct sockaddr *)&a, sizeof a) != 0 || listen(s->listen_fd, 64) != 0 ||
        getsockname(s->listen_fd, (struct sockaddr *)&a, &alen) != 0 || pipe(s->stop) != 0) {
        snprintf(err, errlen, "stub broker: %s", strerror(errno));
        sb_stop(s);
        return -1;
    }
    s->port = ntohs(a.sin_port);
    if ((errno = pthread_create(&s->thread, NULL, serve, s)) != 0) {
        snprintf(err, errlen, "stub broker: pthread_create: %s", strerror(errno));
        close(s->stop[1]);
        s->stop[1] = -1;
        sb_stop(s);
        return -1;
    }
    return 0;
}

void sb_stop(sb_t *s)
{
    if (s->stop[1] >= 0) {
        if (write(s->stop[1], "x", 1) == 1)
            pthread_join(s->thread, NULL);
        close(s->stop[1]);
    }
    if (s->stop[0] >= 0)
        close(s->stop[0]);
    for (size_t i = 0; i < s->nconns; i++)
        close(s->conns[i]);
    if (s->listen_fd >= 0)
        close(s->listen_fd);
    s->listen_fd = -1;
    s->stop[0] = s->stop[1] = -1;
    s->nconns = 0;
}
