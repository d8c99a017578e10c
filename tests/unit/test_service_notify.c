/*
 * tests/unit/test_service_notify.c — CUnit suite for common/service_notify.c,
 * the sd_notify datagram: with NOTIFY_SOCKET unset or empty nothing is sent
 * and nothing fails; with a path, and with an @abstract name, the state
 * arrives as one datagram, byte for byte, on a socket of the test's own; a
 * NOTIFY_SOCKET that is neither, or too long, a state too long, and a path
 * nobody listens on, each fail with an error naming the problem.
 */
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

static const tu_test_t notify_tests[] = {
    { "NOTIFY_SOCKET unset or empty: nothing sent, no error", test_unset_is_a_no_op },
    { "a path: the state in one datagram", test_path },
    { "an @abstract name: the state in one datagram", test_abstract },
    { "a bad NOTIFY_SOCKET, nobody listening, a state too long: an error naming it", test_bad_input },
    { NULL, NULL },
};
static const tu_suite_t suites[] = {
    { "service_notify", notify_tests },
};

int main(int argc, char **argv)
{
    return tu_suites_main(argc, argv, suites, sizeof suites / sizeof suites[0], setup, teardown);
}
