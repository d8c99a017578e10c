/*
 * tests/integration/test_broker_notify.c — the real broker tells systemd
 * where it stands, on a NOTIFY_SOCKET of the test's own (a datagram socket
 * in the test's temp dir, as systemd's Type=notify gives one):
 *  - READY=1 once it listens, and a PING made the moment it arrives is
 *    answered (what `systemctl start` returning promises the units after
 *    it); STATUS= names the address;
 *  - SIGHUP: RELOADING=1, then READY=1 again;
 *  - SIGTERM: STOPPING=1, and the broker still exits 0;
 *  - without NOTIFY_SOCKET (every other test) nothing changes: bt_start.
 * Every wait polls with a deadline.
 */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <CUnit/CUnit.h>

#include "tests/helpers/broker_test.h"
#include "tests/helpers/testutil.h"

#define NOTIFY_DEADLINE_MS 30000

/* A datagram socket bound to DIR/notify (path in *path), as NOTIFY_SOCKET. */
static int notify_listener(const char *dir, char *path, size_t pathlen)
{
    snprintf(path, pathlen, "%s/notify", dir);
    int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    BP_REQUIRE(fd >= 0, "socket: %s", strerror(errno));
    struct sockaddr_un a = { .sun_family = AF_UNIX };
    BP_REQUIRE(strlen(path) < sizeof a.sun_path, "%s: too long for a socket address", path);
    memcpy(a.sun_path, path, strlen(path) + 1);
    BP_REQUIRE(bind(fd, (struct sockaddr *)&a, sizeof a) == 0, "bind %s: %s", path, strerror(errno));
    return fd;
}

/* The next datagram on fd within NOTIFY_DEADLINE_MS into buf (NUL-terminated),
 * or "" when none came. */
static const char *next_state(int fd, char *buf, size_t len)
{
    struct pollfd p = { fd, POLLIN, 0 };
    buf[0] = '\0';
    if (poll(&p, 1, NOTIFY_DEADLINE_MS) == 1) {
        ssize_t n = recv(fd, buf, len - 1, 0);
        buf[n < 0 ? 0 : n] = '\0';
    }
    return buf;
}

static void test_notify(void)
{
    bt_start(NULL); /* no NOTIFY_SOCKET: starts as ever */
    char err[1024];
    BP_REQUIRE(bp_stop(&bt_broker, err, sizeof err) == 0, "stop: %s", err);

    char path[600], state[1100], want[128];
    int fd = notify_listener(bt_broker.dir, path, sizeof path);
    setenv("NOTIFY_SOCKET", path, 1);
    int spawned = bp_spawn(&bt_broker, err, sizeof err);
    unsetenv("NOTIFY_SOCKET");
    BP_REQUIRE(spawned == 0, "spawn: %s", err);

    snprintf(want, sizeof want, "READY=1\nSTATUS=listening on 127.0.0.1:%d", bt_broker.port);
    BP_CHECK(strcmp(next_state(fd, state, sizeof state), want) == 0, "first state '%s', want '%s'", state, want);
    rc_conn_t c;
    BP_REQUIRE(bp_connect(&bt_broker, &c, err, sizeof err) == 0, "connect right after READY=1: %s", err);
    resp_reply_t *r = rc_cmd(&c, "PING", NULL);
    BP_CHECK(r != NULL && r->type == RESP_REPLY_STATUS && rc_str_eq(r, "PONG"), "PING right after READY=1: no PONG");
    resp_reply_free(r);
    rc_close(&c);

    BP_REQUIRE(kill(bt_broker.pid, SIGHUP) == 0, "kill -HUP");
    BP_CHECK(strncmp(next_state(fd, state, sizeof state), "RELOADING=1\n", 12) == 0,
             "after SIGHUP: '%s', want RELOADING=1", state);
    BP_CHECK(strcmp(next_state(fd, state, sizeof state), want) == 0, "after the reload: '%s', want '%s'", state, want);

    BP_CHECK(bp_stop(&bt_broker, err, sizeof err) == 0, "stop: %s", err);
    BP_CHECK(strcmp(next_state(fd, state, sizeof state), "STOPPING=1\nSTATUS=shutting down (SIGTERM)") == 0,
             "after SIGTERM: '%s', want STOPPING=1", state);
    close(fd);
}

static const tu_test_t notify_tests[] = {
    { "NOTIFY_SOCKET: READY=1 once PING answers, RELOADING=1/READY=1 on SIGHUP, STOPPING=1 on SIGTERM", test_notify },
    { NULL, NULL },
};

int main(int argc, char **argv)
{
    return bt_main(argc, argv, "notify", notify_tests);
}
