/*
 * tests/unit/test_service_notify.c — CUnit suite for common/service_notify.c,
 * the sd_notify datagram: with NOTIFY_SOCKET unset or empty nothing is sent
 * and nothing fails; with a path, and with an @abstract name, the state
 * arrives as one datagram, byte for byte, on a socket of the test's own; a
 * NOTIFY_SOCKET that is neither, or too long, a state too long, and a path
 * nobody listens on, each fail with an error naming the problem.
 * And a second suite for common/service_extend.c, on the same fake
 * NOTIFY_SOCKET with ticks of milliseconds: nothing without NOTIFY_SOCKET;
 * a request at once and one each tick while the step runs, none after the
 * stop, which is immediate; the bound's last request asks only for what is
 * left and says so, and none follows; a failed send is tried again.
 */
#include "common/service_extend.h"
#include "common/service_notify.h"
#include "tests/helpers/testutil.h"

#include <CUnit/CUnit.h>
#include <errno.h>
#include <poll.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

static char dir[512];

static void setup(void)
{
    TU_CHECK(tu_mkdtemp("notify", dir, sizeof dir) == 0, "tu_mkdtemp");
    unsetenv("NOTIFY_SOCKET");
}

static void teardown(void)
{
    unsetenv("NOTIFY_SOCKET");
    tu_rmtree(dir);
}

/* A datagram socket bound to name (a path, or '@' for an abstract one), as
 * systemd binds its own; -1 on a failure (asserted). */
static int bind_listener(const char *name)
{
    int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    CU_ASSERT_FATAL(fd >= 0);
    struct sockaddr_un a = { .sun_family = AF_UNIX };
    size_t len = strlen(name);
    memcpy(a.sun_path, name, len);
    if (name[0] == '@') {
        a.sun_path[0] = '\0';
    }
    socklen_t alen = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + len + (name[0] == '@' ? 0 : 1));
    TU_CHECK(bind(fd, (struct sockaddr *)&a, alen) == 0, "bind %s: %s", name, strerror(errno));
    return fd;
}

/* The next datagram on fd, within a generous deadline, into buf
 * (NUL-terminated); its length or -1. */
static ssize_t receive(int fd, char *buf, size_t len)
{
    struct pollfd p = { fd, POLLIN, 0 };
    if (poll(&p, 1, 10000) != 1) {
        return -1;
    }
    ssize_t n = recv(fd, buf, len - 1, 0);
    buf[n < 0 ? 0 : n] = '\0';
    return n;
}

static int pending(int fd)
{
    struct pollfd p = { fd, POLLIN, 0 };
    return poll(&p, 1, 0) == 1;
}

static void test_unset_is_a_no_op(void)
{
    char err[256] = "";
    CU_ASSERT_EQUAL(service_notify(err, sizeof err, "READY=1"), 0);
    setenv("NOTIFY_SOCKET", "", 1);
    CU_ASSERT_EQUAL(service_notify(err, sizeof err, "READY=1"), 0);
    CU_ASSERT_STRING_EQUAL(err, "");
}

static void check_delivered(const char *name)
{
    int fd = bind_listener(name);
    setenv("NOTIFY_SOCKET", name, 1);
    char err[256] = "";
    int rc = service_notify(err, sizeof err, "READY=1\nSTATUS=listening on %s:%d", "127.0.0.1", 7379);
    TU_CHECK(rc == 0, "service_notify to %s: %s", name, err);
    char got[256];
    const char *want = "READY=1\nSTATUS=listening on 127.0.0.1:7379";
    CU_ASSERT_EQUAL(receive(fd, got, sizeof got), (ssize_t)strlen(want));
    CU_ASSERT_STRING_EQUAL(got, want);
    CU_ASSERT_FALSE(pending(fd)); /* one datagram */
    close(fd);
}

static void test_path(void)
{
    char path[600];
    snprintf(path, sizeof path, "%s/notify", dir);
    check_delivered(path);
}

static void test_abstract(void)
{
    char name[64];
    snprintf(name, sizeof name, "@hg-test-notify-%ld", (long)getpid());
    check_delivered(name);
}

static void check_refused(const char *notify_socket, const char *state, const char *want)
{
    setenv("NOTIFY_SOCKET", notify_socket, 1);
    char err[512] = "";
    CU_ASSERT_EQUAL(service_notify(err, sizeof err, "%s", state), -1);
    TU_CHECK(strstr(err, want) != NULL, "NOTIFY_SOCKET '%.40s': error '%s' lacks '%s'", notify_socket, err, want);
}

static void test_bad_input(void)
{
    check_refused("relative/notify", "READY=1", "neither an absolute path nor an @abstract name");
    char long_name[200];
    memset(long_name, 'x', sizeof long_name - 1);
    long_name[0] = '/';
    long_name[sizeof long_name - 1] = '\0';
    check_refused(long_name, "READY=1", "of at most 107 bytes");
    char path[600];
    snprintf(path, sizeof path, "%s/nobody", dir);
    check_refused(path, "READY=1", "send: No such file or directory");
    char big[2048];
    memset(big, 'y', sizeof big - 1);
    big[sizeof big - 1] = '\0';
    char listener[600];
    snprintf(listener, sizeof listener, "%s/notify", dir);
    int fd = bind_listener(listener);
    check_refused(listener, big, "longer than 1023 bytes");
    CU_ASSERT_FALSE(pending(fd)); /* nothing half sent */
    close(fd);
}

/* The listener for service_extend's tests, bound to DIR/notify and named by
 * NOTIFY_SOCKET. */
static int extend_listener(void)
{
    char path[600];
    snprintf(path, sizeof path, "%s/notify", dir);
    int fd = bind_listener(path);
    setenv("NOTIFY_SOCKET", path, 1);
    return fd;
}

static uint64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

/* The EXTEND_TIMEOUT_USEC= value of a request, or -1 when got is not one
 * whose STATUS= names the step "opening x". */
static long long extend_usec(const char *got)
{
    long long usec = -1;
    int at = 0;
    if (sscanf(got, "EXTEND_TIMEOUT_USEC=%lld\nSTATUS=opening x: %*d s so far%n", &usec, &at) != 1 || at == 0) {
        return -1;
    }
    return usec;
}

static void test_extend_without_socket(void)
{
    CU_ASSERT_PTR_NULL(service_extend_start("opening x", 10, 1000));
    service_extend_stop(NULL); /* a no-op */
}

static void test_extend_each_tick(void)
{
    int fd = extend_listener();
    uint64_t t0 = now_ms();
    service_extend_t *e = service_extend_start("opening x", 50, 600000);
    CU_ASSERT_PTR_NOT_NULL_FATAL(e);
    char got[512];
    for (int i = 0; i < 4; i++) { /* at once, then one a tick: 3 ticks each */
        TU_CHECK(receive(fd, got, sizeof got) > 0, "request %d: none within 10 s", i);
        TU_CHECK(extend_usec(got) == 150000, "request %d: '%s', want EXTEND_TIMEOUT_USEC=150000 and the step", i, got);
    }
    TU_CHECK(now_ms() - t0 >= 150, "4 requests in %llu ms: faster than one a tick of 50 ms",
             (unsigned long long)(now_ms() - t0));
    service_extend_stop(e);
    while (pending(fd)) { /* what was sent before the stop */
        receive(fd, got, sizeof got);
    }
    struct pollfd p = { fd, POLLIN, 0 };
    CU_ASSERT_EQUAL(poll(&p, 1, 300), 0); /* six ticks: nothing after the stop */
    close(fd);
}

static void test_extend_stop_is_immediate(void)
{
    int fd = extend_listener();
    service_extend_t *e = service_extend_start("opening x", 60000, 600000);
    CU_ASSERT_PTR_NOT_NULL_FATAL(e);
    char got[512];
    TU_CHECK(receive(fd, got, sizeof got) > 0 && extend_usec(got) == 180000000, "first request '%s'", got);
    uint64_t t0 = now_ms();
    service_extend_stop(e);
    TU_CHECK(now_ms() - t0 < 5000, "stop took %llu ms with a tick of 60 s", (unsigned long long)(now_ms() - t0));
    close(fd);
}

static void test_extend_bound(void)
{
    int fd = extend_listener();
    service_extend_t *e = service_extend_start("opening x", 200, 700);
    CU_ASSERT_PTR_NOT_NULL_FATAL(e);
    char got[512];
    TU_CHECK(receive(fd, got, sizeof got) > 0 && extend_usec(got) == 600000, "first request '%s'", got);
    TU_CHECK(receive(fd, got, sizeof got) > 0, "no second request within 10 s");
    long long usec = extend_usec(got);
    TU_CHECK(usec > 0 && usec <= 500000, "second request '%s': want at most the 500 ms left of 700", got);
    TU_CHECK(strstr(got, "no more start time asked after 0 s") != NULL,
             "second request '%s' does not say it is the last", got);
    struct pollfd p = { fd, POLLIN, 0 };
    CU_ASSERT_EQUAL(poll(&p, 1, 1000), 0); /* five ticks: nothing after the last */
    service_extend_stop(e);
    close(fd);
}

static void test_extend_retries_a_failed_send(void)
{
    char path[600];
    snprintf(path, sizeof path, "%s/notify", dir);
    setenv("NOTIFY_SOCKET", path, 1); /* nobody listens yet: the first sends fail (a warning each) */
    service_extend_t *e = service_extend_start("opening x", 50, 600000);
    CU_ASSERT_PTR_NOT_NULL_FATAL(e);
    struct timespec ts = { 0, 120 * 1000000L }; /* a request or two go nowhere meanwhile */
    nanosleep(&ts, NULL);
    int fd = bind_listener(path);
    char got[512];
    TU_CHECK(receive(fd, got, sizeof got) > 0 && extend_usec(got) == 150000, "after a failed send: '%s'", got);
    service_extend_stop(e);
    close(fd);
}

static const tu_test_t extend_tests[] = {
    { "NOTIFY_SOCKET unset: no thread, nothing sent", test_extend_without_socket },
    { "a request at once and each tick, none after the stop", test_extend_each_tick },
    { "the stop does not wait for the next tick", test_extend_stop_is_immediate },
    { "the bound: the last request asks for what is left and says so, none after", test_extend_bound },
    { "a failed send: the next tick sends again", test_extend_retries_a_failed_send },
    { NULL, NULL },
};

static const tu_test_t notify_tests[] = {
    { "NOTIFY_SOCKET unset or empty: nothing sent, no error", test_unset_is_a_no_op },
    { "a path: the state in one datagram", test_path },
    { "an @abstract name: the state in one datagram", test_abstract },
    { "a bad NOTIFY_SOCKET, nobody listening, a state too long: an error naming it", test_bad_input },
    { NULL, NULL },
};
static const tu_suite_t suites[] = {
    { "service_notify", notify_tests },
    { "service_extend", extend_tests },
};

int main(int argc, char **argv)
{
    return tu_suites_main(argc, argv, suites, sizeof suites / sizeof suites[0], setup, teardown);
}
