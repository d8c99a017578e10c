/*
 * console/metrics_get.c — read another daemon's plain-http endpoint (the
 * broker's /metrics, the compensator's /metrics and /healthz) for the
 * overview (contract: console.h, "metrics_get.c").
 *
 * One HTTP/1.0 GET on a fresh connection, every step under one deadline
 * (connect, send, each read: SO_SNDTIMEO / SO_RCVTIMEO set to what is left),
 * the reply at most METRICS_GET_MAX bytes. These endpoints are plain http
 * and unauthenticated by design (docs/security.md), so there is no TLS here.
 *
 * Threads: whichever thread calls; no shared state.
 */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include "console/console.h"
#include "base/clock.h"

#include <errno.h>
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define METRICS_GET_MAX (8 * 1024 * 1024)

int metrics_url_parse(const char *url, metrics_url_t *u, char *err, size_t errlen)
{
    memset(u, 0, sizeof *u);
    if (url == NULL || strncmp(url, "http://", 7) != 0) {
        snprintf(err, errlen, "'%s' is not an http:// URL (the metrics endpoints speak plain http)",
                 url != NULL ? url : "");
        return -1;
    }
    const char *p = url + 7, *end;
    if (*p == '[') {
        end = strchr(p, ']');
        if (end == NULL || end == p + 1) {
            snprintf(err, errlen, "'%s': an IPv6 address needs its closing ']'", url);
            return -1;
        }
        snprintf(u->host, sizeof u->host, "%.*s", (int)(end - p - 1), p + 1);
        p = end + 1;
    } else {
        size_t n = strcspn(p, ":/");
        if (n == 0 || n >= sizeof u->host) {
            snprintf(err, errlen, "'%s': no host, or a host longer than %zu bytes", url, sizeof u->host - 1);
            return -1;
        }
        snprintf(u->host, sizeof u->host, "%.*s", (int)n, p);
        p += n;
    }
    if (*p != ':') {
        snprintf(err, errlen, "'%s' has no port (http://HOST:PORT/metrics)", url);
        return -1;
    }
    p++;
    size_t n = strspn(p, "0123456789");
    long port = n > 0 && n < 6 ? strtol(p, NULL, 10) : 0;
    if (port < 1 || port > 65535 || (p[n] != '\0' && p[n] != '/')) {
        snprintf(err, errlen, "'%s': the port is not 1..65535", url);
        return -1;
    }
    snprintf(u->port, sizeof u->port, "%ld", port);
    p += n;
    if (strlen(p) >= sizeof u->path) {
        snprintf(err, errlen, "'%s': a path longer than %zu bytes", url, sizeof u->path - 1);
        return -1;
    }
    snprintf(u->path, sizeof u->path, "%s", *p != '\0' ? p : "/metrics");
    return 0;
}

static long long now_ms(void)
{
    return (long long)clock_mono_ms();
}

/* Set fd's send and receive timeouts to what is left until deadline; 0, or
 * -1 when nothing is left. */
static int left_until(int fd, long long deadline)
{
    long long left = deadline - now_ms();
    if (left <= 0)
        return -1;
    struct timeval tv = { (time_t)(left / 1000), (suseconds_t)(left % 1000) * 1000 };
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    return 0;
}

int metrics_get(const metrics_url_t *u, const char *path, int timeout_ms, int *status, buf_t *body, char *err,
                size_t errlen)
{
    struct addrinfo hints = { .ai_socktype = SOCK_STREAM }, *ai = NULL;
    long long deadline = now_ms() + timeout_ms;
    char req[1024];
    int fd = -1;

    *status = 0;
    buf_clear(body);
    int gai = getaddrinfo(u->host, u->port, &hints, &ai);
    if (gai != 0 || ai == NULL) {
        snprintf(err, errlen, "%s: %s", u->host, gai_strerror(gai));
        return -1;
    }
    fd = socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0 || left_until(fd, deadline) != 0 || connect(fd, ai->ai_addr, ai->ai_addrlen) != 0) {
        if (errno == EINPROGRESS || errno == EAGAIN)
            snprintf(err, errlen, "connect to %s:%s: not within %d ms", u->host, u->port, timeout_ms);
        else
            snprintf(err, errlen, "connect to %s:%s: %s", u->host, u->port, strerror(errno));
        goto fail;
    }
    snprintf(req, sizeof req, "GET %s HTTP/1.0\r\nHost: %s\r\nAccept: text/plain\r\n\r\n", path, u->host);
    if (left_until(fd, deadline) != 0 || write(fd, req, strlen(req)) != (ssize_t)strlen(req)) {
        snprintf(err, errlen, "send to %s:%s: %s", u->host, u->port, strerror(errno));
        goto fail;
    }
    for (;;) {
        if (left_until(fd, deadline) != 0) {
            snprintf(err, errlen, "%s:%s%s: no whole reply within %d ms", u->host, u->port, path, timeout_ms);
            goto fail;
        }
        char *p = buf_reserve(body, 65536);
        ssize_t n = read(fd, p, 65536);
        if (n == 0)
            break;
        if (n < 0) {
            if (errno == EAGAIN || errno == EWOULDBLOCK)
                snprintf(err, errlen, "%s:%s%s: no whole reply within %d ms", u->host, u->port, path, timeout_ms);
            else
                snprintf(err, errlen, "%s:%s%s: %s", u->host, u->port, path, strerror(errno));
            goto fail;
        }
        body->len += (size_t)n;
        if (body->len > METRICS_GET_MAX) {
            snprintf(err, errlen, "%s:%s%s: a reply over %d bytes", u->host, u->port, path, METRICS_GET_MAX);
            goto fail;
        }
    }
    close(fd);
    freeaddrinfo(ai);
    const char *text = buf_cstr(body), *head_end = strstr(text, "\r\n\r\n");
    if (strncmp(text, "HTTP/1.", 7) != 0 || head_end == NULL) {
        snprintf(err, errlen, "%s:%s%s: not an HTTP reply", u->host, u->port, path);
        buf_clear(body);
        return -1;
    }
    *status = (int)strtol(text + 9, NULL, 10);
    buf_consume(body, (size_t)(head_end + 4 - text));
    return 0;
fail:
    if (fd >= 0)
        close(fd);
    freeaddrinfo(ai);
    buf_clear(body);
    return -1;
}
