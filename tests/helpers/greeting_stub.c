/*
 * tests/helpers/greeting_stub.c — a fake MariaDB server that sends a
 * greeting without CLIENT_SSL and records the client's answer (contract:
 * greeting_stub.h).
 */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include "tests/helpers/greeting_stub.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#define GS_WAIT_MS 20000 /* for the client to connect, then to answer or close */

/* The capabilities of a MariaDB 10.11 server run with --skip-ssl: protocol
 * 4.1, secure connection, plugin auth … and no CLIENT_SSL (0x800); bit 0
 * (CLIENT_MYSQL) clear: a MariaDB server. */
#define GS_CAPS_LOW  0xA20Eu /* FOUND_ROWS LONG_FLAG CONNECT_WITH_DB PROTOCOL_41 TRANSACTIONS SECURE_CONNECTION */
#define GS_CAPS_HIGH 0x003Fu /* MULTI_STATEMENTS MULTI_RESULTS PS_MULTI_RESULTS PLUGIN_AUTH CONNECT_ATTRS LENENC */

/* The initial handshake packet (header included) into out (GS_GREETING_MAX
 * bytes); its length. */
#define GS_GREETING_MAX 256
static size_t greeting(unsigned char *out)
{
    static const char version[] = "5.5.5-10.11.6-MariaDB-greeting-stub";
    static const char plugin[] = "mysql_native_password";
    unsigned char *p = out + 4;
    *p++ = 10; /* protocol */
    memcpy(p, version, sizeof version);
    p += sizeof version;
    memcpy(p, "\x07\x00\x00\x00", 4); /* connection id */
    p += 4;
    memcpy(p, "abcdefgh", 8); /* scramble, first 8 */
    p += 8;
    *p++ = 0;
    *p++ = GS_CAPS_LOW & 0xff;
    *p++ = GS_CAPS_LOW >> 8;
    *p++ = 45; /* utf8mb4_general_ci */
    *p++ = 2;  /* SERVER_STATUS_AUTOCOMMIT */
    *p++ = 0;
    *p++ = GS_CAPS_HIGH & 0xff;
    *p++ = GS_CAPS_HIGH >> 8;
    *p++ = 21;        /* scramble length, its NUL included */
    memset(p, 0, 10); /* 6 reserved, 4 MariaDB extended capabilities: none */
    p += 10;
    memcpy(p, "ijklmnopqrst", 13); /* scramble, last 12, and its NUL */
    p += 13;
    memcpy(p, plugin, sizeof plugin);
    p += sizeof plugin;
    size_t body = (size_t)(p - out) - 4;
    out[0] = body & 0xff;
    out[1] = (body >> 8) & 0xff;
    out[2] = (body >> 16) & 0xff;
    out[3] = 0; /* sequence */
    return (size_t)(p - out);
}

static void *serve(void *arg)
{
    gs_t *s = arg;
    struct pollfd pl = { .fd = s->listen_fd, .events = POLLIN };
    if (poll(&pl, 1, GS_WAIT_MS) != 1)
        return NULL;
    int fd = accept(s->listen_fd, NULL, NULL);
    if (fd < 0)
        return NULL;
    s->accepted = 1;
    unsigned char hello[GS_GREETING_MAX];
    size_t n = greeting(hello);
    if (write(fd, hello, n) != (ssize_t)n) {
        close(fd);
        return NULL;
    }
    struct pollfd pc = { .fd = fd, .events = POLLIN };
    if (poll(&pc, 1, GS_WAIT_MS) == 1) {
        /* Whatever arrived first: a login is one packet, sent in one write. */
        ssize_t got = read(fd, s->record, sizeof s->record);
        s->recorded = got > 0 ? (size_t)got : 0;
    }
    close(fd);
    return NULL;
}

int gs_start(gs_t *s, const char *path, char *err, size_t errlen)
{
    memset(s, 0, sizeof *s);
    s->listen_fd = -1;
    int fd;
    if (path == NULL) {
        struct sockaddr_in a = { .sin_family = AF_INET };
        a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        socklen_t alen = sizeof a;
        fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (fd < 0 || bind(fd, (struct sockaddr *)&a, sizeof a) != 0 || listen(fd, 4) != 0 ||
            getsockname(fd, (struct sockaddr *)&a, &alen) != 0) {
            snprintf(err, errlen, "greeting stub: listen on 127.0.0.1: %s", strerror(errno));
            if (fd >= 0)
                close(fd);
            return -1;
        }
        s->port = ntohs(a.sin_port);
    } else {
        struct sockaddr_un a = { .sun_family = AF_UNIX };
        if (strlen(path) >= sizeof a.sun_path) {
            snprintf(err, errlen, "greeting stub: socket path too long: %s", path);
            return -1;
        }
        snprintf(a.sun_path, sizeof a.sun_path, "%s", path);
        fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (fd < 0 || bind(fd, (struct sockaddr *)&a, sizeof a) != 0 || listen(fd, 4) != 0) {
            snprintf(err, errlen, "greeting stub: listen on %s: %s", path, strerror(errno));
            if (fd >= 0)
                close(fd);
            return -1;
        }
    }
    s->listen_fd = fd;
    if (pthread_create(&s->thread, NULL, serve, s) != 0) {
        snprintf(err, errlen, "greeting stub: cannot start its thread");
        close(fd);
        s->listen_fd = -1;
        return -1;
    }
    return 0;
}

void gs_finish(gs_t *s)
{
    if (s->listen_fd < 0)
        return;
    pthread_join(s->thread, NULL);
    close(s->listen_fd);
    s->listen_fd = -1;
}

int gs_recorded_contains(const gs_t *s, const char *text)
{
    size_t n = strlen(text);
    for (size_t i = 0; n > 0 && i + n <= s->recorded; i++)
        if (memcmp(s->record + i, text, n) == 0)
            return 1;
    return 0;
}
