/*
 * common/service_notify.c — the sd_notify datagram (common/service_notify.h).
 *
 * The state is formatted into a stack buffer, the address is built from
 * $NOTIFY_SOCKET ('@' becomes the abstract namespace's leading NUL, and the
 * address length then counts the name exactly: an abstract name is not
 * NUL-terminated), and one sendto(2) on a fresh SOCK_DGRAM|SOCK_CLOEXEC
 * socket carries it. systemd reads the sender's credentials from the
 * socket itself, so nothing else is passed.
 */
#include "common/service_notify.h"
#include "common/log.h"

#include <errno.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#define NOTIFY_STATE_MAX 1024

static int vnotify(char *err, size_t errlen, const char *fmt, va_list ap)
{
    const char *name = getenv("NOTIFY_SOCKET");
    if (name == NULL || name[0] == '\0') {
        return 0;
    }
    struct sockaddr_un addr = { .sun_family = AF_UNIX };
    size_t len = strlen(name);
    if ((name[0] != '/' && name[0] != '@') || len >= sizeof addr.sun_path) {
        snprintf(err, errlen,
                 "NOTIFY_SOCKET '%s' is neither an absolute path nor an @abstract name of at most %zu bytes", name,
                 sizeof addr.sun_path - 1);
        return -1;
    }
    memcpy(addr.sun_path, name, len);
    if (name[0] == '@') {
        addr.sun_path[0] = '\0';
    }
    char state[NOTIFY_STATE_MAX];
    int n = vsnprintf(state, sizeof state, fmt, ap);
    if (n < 0 || (size_t)n >= sizeof state) {
        snprintf(err, errlen, "the state for NOTIFY_SOCKET is longer than %d bytes: not sent", NOTIFY_STATE_MAX - 1);
        return -1;
    }
    int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        snprintf(err, errlen, "NOTIFY_SOCKET %s: socket: %s", name, strerror(errno));
        return -1;
    }
    socklen_t alen = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + len + (name[0] == '/' ? 1 : 0));
    ssize_t sent = sendto(fd, state, (size_t)n, MSG_NOSIGNAL, (const struct sockaddr *)&addr, alen);
    int e = errno;
    close(fd);
    if (sent != n) {
        snprintf(err, errlen, "NOTIFY_SOCKET %s: send: %s", name, sent < 0 ? strerror(e) : "short write");
        return -1;
    }
    return 0;
}

int service_notify(char *err, size_t errlen, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int rc = vnotify(err, errlen, fmt, ap);
    va_end(ap);
    return rc;
}

void service_notify_or_warn(const char *fmt, ...)
{
    char err[512];
    va_list ap;
    va_start(ap, fmt);
    int rc = vnotify(err, sizeof err, fmt, ap);
    va_end(ap);
    if (rc != 0) {
        log_warn("systemd notification: %s", err);
    }
}
