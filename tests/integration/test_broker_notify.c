/*
 * tests/integration/test_broker_notify.c — the real broker tells systemd
 * where it stands, on a NOTIFY_SOCKET of the test's own (a datagram socket
 * in the test's temp dir, as systemd's Type=notify gives one):
 *  - READY=1 once it listens, and a PING made the moment it arrives is
 *    answered (what `systemctl start` returning promises the units after
 *    it); STATUS= names the address;
 *  - SIGHUP: RELOADING=1, then READY=1 again;
 *  - SIGTERM: STOPPING=1, and the broker still exits 0;
 *  - without NOTIFY_SOCKET (every other test) nothing changes: bt_start;
 *  - a slow store open (its first log sync held 11 s by the fsync shim,
 *    tests/helpers/failsync.c): EXTEND_TIMEOUT_USEC= with STATUS=recovering
 *    the store … at once and again 10 s later, then READY=1.
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
#include <sys/stat.h>
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
    while (strncmp(next_state(fd, state, sizeof state), "EXTEND_TIMEOUT_USEC=", 20) == 0) {
        /* the store open's requests for time (test_slow_open) */
    }
    BP_CHECK(strcmp(state, want) == 0, "first state after the open '%s', want '%s'", state, want);
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

/* The n s of "EXTEND_TIMEOUT_USEC=30000000\nSTATUS=recovering the store DIR: n
 * s so far", or -1 when state is not that request for data_dir. */
static int extend_seconds(const char *state, const char *data_dir)
{
    char want[700];
    snprintf(want, sizeof want, "EXTEND_TIMEOUT_USEC=30000000\nSTATUS=recovering the store %s: ", data_dir);
    int s = -1;
    if (strncmp(state, want, strlen(want)) != 0 || sscanf(state + strlen(want), "%d s so far", &s) != 1) {
        return -1;
    }
    return s;
}

static void test_slow_open(void)
{
    char shimdir[512], trigger[600], path[600], state[1100], want[128], err[1024];
    bt_start(NULL); /* the temp dir and ports; then a new store, whose open syncs its log */
    BP_REQUIRE(bp_stop(&bt_broker, err, sizeof err) == 0, "stop: %s", err);
    tu_rmtree(bt_broker.data_dir);
    bt_preload_failsync(shimdir, sizeof shimdir, trigger, sizeof trigger);
    setenv("HG_FAILSYNC_DELAY_MS", "11000", 1); /* past one tick of 10 s */
    BP_REQUIRE(tu_write_file(trigger, "") == 0, "write %s", trigger);
    int fd = notify_listener(bt_broker.dir, path, sizeof path);
    setenv("NOTIFY_SOCKET", path, 1);
    int spawned = bp_spawn(&bt_broker, err, sizeof err);
    unsetenv("NOTIFY_SOCKET");
    unsetenv("LD_PRELOAD");
    unsetenv("HG_FAILSYNC_DELAY_MS");
    BP_REQUIRE(spawned == 0, "spawn: %s", err);

    next_state(fd, state, sizeof state);
    BP_CHECK(extend_seconds(state, bt_broker.data_dir) == 0, "first state '%s', want a request for 30 s at 0 s", state);
    next_state(fd, state, sizeof state);
    int s = extend_seconds(state, bt_broker.data_dir);
    BP_CHECK(s >= 10 && s <= 11, "second state '%s', want a request for 30 s at 10 s", state);
    snprintf(want, sizeof want, "READY=1\nSTATUS=listening on 127.0.0.1:%d", bt_broker.port);
    BP_CHECK(strcmp(next_state(fd, state, sizeof state), want) == 0, "third state '%s', want '%s'", state, want);
    struct stat st;
    BP_CHECK(stat(trigger, &st) != 0, "the held sync was not the open's: the trigger %s is still there", trigger);
    BP_CHECK(bp_stop(&bt_broker, err, sizeof err) == 0, "stop: %s", err);
    close(fd);
    tu_rmtree(shimdir);
}

static const tu_test_t notify_tests[] = {
    { "NOTIFY_SOCKET: READY=1 once PING answers, RELOADING=1/READY=1 on SIGHUP, STOPPING=1 on SIGTERM", test_notify },
    { "a slow store open: EXTEND_TIMEOUT_USEC= with STATUS= at once and each 10 s, then READY=1", test_slow_open },
    { NULL, NULL },
};

int main(int argc, char **argv)
{
    return bt_main(argc, argv, "notify", notify_tests);
}
