/*
 * tests/integration/test_cli_msg.c — hourglass-cli's message commands and its
 * --timeout, run as a child process against the real ./hourglass-broker (in
 * its own temp dir and free port).
 *
 * Suite "msg":
 *   topic key   msg find and msg revoke name a topic's messages the same way,
 *               TOPIC KEY; msg revoke TOPIC --key KEY (the older form) and
 *               msg find TOPIC --key KEY still work
 *   usage       a topic without its key, the key given twice, nothing at all:
 *               exit 2, the message names the problem and the right form
 *   timeout     --timeout takes the duration grammar (2s, 1500 = ms, 0 =
 *               replies without end); a bad unit or more than 1d is exit 2
 *               naming it; 300ms against a frozen broker (SIGSTOP) gives
 *               up in well under the default 5 s
 */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include <CUnit/CUnit.h>

#include "tests/helpers/broker_proc.h"
#include "tests/helpers/testutil.h"

#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#define CLI_PATH HG_BUILDDIR "/hourglass-cli"
#define OUT_MAX  16384

static bp_broker_t broker;
static char uri[64];
static char out[OUT_MAX];

/* hourglass-cli --uri URI ARGS... (NULL-terminated); stdout and stderr into
 * out. Returns the exit status (-1: did not exit normally). */
static int cli(const char *first, ...)
{
    tu_argv_t argv;
    va_list ap;

    tu_argv_init(&argv);
    tu_argv_add_list(&argv, (const char *const[]){ CLI_PATH, "--uri", uri, first, NULL });
    va_start(ap, first);
    tu_argv_add_va(&argv, ap);
    va_end(ap);
    return tu_run_capture_argv(&argv, out, sizeof out);
}

static int msg_init(void)
{
    char err[512];

    bp_set_failure_counter(CU_get_number_of_failures);
    if (bp_start(&broker, NULL, err, sizeof err) != 0) {
        fprintf(stderr, "test_cli_msg: cannot start the broker: %s\n", err);
        return -1;
    }
    snprintf(uri, sizeof uri, "hourglass://127.0.0.1:%d", broker.port);
    return 0;
}

static int msg_cleanup(void)
{
    bp_destroy(&broker);
    return 0;
}

/* send TOPIC PAYLOAD --key KEY --delay 1h through the cli; the id into id[17]. */
static void send_keyed(const char *topic, const char *key, char id[17])
{
    int rc = cli("send", topic, "payload", "--key", key, "--delay", "1h", NULL);
    TU_REQUIRE(rc == 0 && strlen(out) >= 16, "send %s --key %s: exit %d:\n%s", topic, key, rc, out);
    memcpy(id, out, 16);
    id[16] = '\0';
}

static void test_topic_key(void)
{
    char a[17], b[17], c[17];
    int rc;

    send_keyed("mt", "42", a);
    send_keyed("mt", "42", b);
    send_keyed("mt", "43", c);
    rc = cli("msg", "find", "mt", "42", NULL);
    TU_CHECK(rc == 0 && strstr(out, a) != NULL && strstr(out, b) != NULL && strstr(out, c) == NULL,
             "msg find mt 42: exit %d:\n%s", rc, out);
    rc = cli("msg", "find", "mt", "--key", "43", NULL);
    TU_CHECK(rc == 0 && strstr(out, c) != NULL && strstr(out, a) == NULL, "msg find mt --key 43: exit %d:\n%s", rc,
             out);

    /* the same TOPIC KEY as msg find */
    rc = cli("msg", "revoke", "mt", "42", NULL);
    TU_CHECK(rc == 0 && strstr(out, "revoked 2 messages (2 delayed, 0 ready)") != NULL,
             "msg revoke mt 42: exit %d:\n%s", rc, out);
    rc = cli("msg", "find", "mt", "42", NULL);
    TU_CHECK(rc == 0 && strstr(out, "no message of topic mt with key 42") != NULL, "msg find after the revoke:\n%s",
             out);
    /* the older form, which README and scripts use, still works */
    rc = cli("msg", "revoke", "mt", "--key", "43", NULL);
    TU_CHECK(rc == 0 && strstr(out, "revoked 1 message (1 delayed, 0 ready)") != NULL,
             "msg revoke mt --key 43: exit %d:\n%s", rc, out);
    /* and by id */
    send_keyed("mt", "44", a);
    rc = cli("msg", "revoke", a, NULL);
    TU_CHECK(rc == 0 && strstr(out, "revoked 1 message") != NULL, "msg revoke %s: exit %d:\n%s", a, rc, out);
}

static void test_usage(void)
{
    int rc = cli("msg", "revoke", "order-timeout", NULL);
    TU_CHECK(rc == 2 && strstr(out, "'order-timeout' is not a message id") != NULL &&
                 strstr(out, "hourglass-cli msg revoke order-timeout KEY") != NULL,
             "msg revoke TOPIC alone: exit %d:\n%s", rc, out);
    rc = cli("msg", "revoke", "order-timeout", "42", "--key", "43", NULL);
    TU_CHECK(rc == 2 && strstr(out, "the key given twice ('42' and --key '43')") != NULL,
             "msg revoke with two keys: exit %d:\n%s", rc, out);
    rc = cli("msg", "find", "order-timeout", NULL);
    TU_CHECK(rc == 2 && strstr(out, "needs a KEY after the topic 'order-timeout'") != NULL &&
                 strstr(out, "hourglass-cli msg find order-timeout KEY") != NULL,
             "msg find TOPIC alone: exit %d:\n%s", rc, out);
    rc = cli("msg", "revoke", NULL);
    TU_CHECK(rc == 2 && strstr(out, "needs a message ID or TOPIC KEY") != NULL, "msg revoke alone: exit %d:\n%s", rc,
             out);
    rc = cli("msg", "revoke", "--help", NULL);
    TU_CHECK(rc == 0 && strstr(out, "msg revoke (ID | TOPIC KEY)") != NULL, "msg revoke --help: exit %d:\n%s", rc, out);
}

static void test_timeout(void)
{
    uint64_t t0, took;
    int rc;

    rc = cli("--timeout", "2s", "ping", NULL);
    TU_CHECK(rc == 0, "--timeout 2s ping: exit %d:\n%s", rc, out);
    rc = cli("--timeout=1500", "ping", NULL);
    TU_CHECK(rc == 0, "--timeout=1500 (ms) ping: exit %d:\n%s", rc, out);
    rc = cli("ping", "--timeout", "0", NULL);
    TU_CHECK(rc == 0, "--timeout 0 ping: exit %d:\n%s", rc, out);
    rc = cli("--timeout", "3x", "ping", NULL);
    TU_CHECK(rc == 2 && strstr(out, "--timeout '3x' is not a duration: unknown unit \"x\"") != NULL,
             "--timeout 3x: exit %d:\n%s", rc, out);
    rc = cli("--timeout", "2d", "ping", NULL);
    TU_CHECK(rc == 2 && strstr(out, "--timeout '2d' is above the maximum of 1d") != NULL, "--timeout 2d: exit %d:\n%s",
             rc, out);

    /* the unit is honoured: 300ms against a broker that never answers */
    TU_REQUIRE(kill(broker.pid, SIGSTOP) == 0, "SIGSTOP the broker");
    t0 = tu_now_mono_ms();
    rc = cli("--timeout", "300ms", "ping", NULL);
    took = tu_now_mono_ms() - t0;
    kill(broker.pid, SIGCONT);
    TU_CHECK(rc == 3 && took < 4000, "--timeout 300ms against a frozen broker: exit %d after %llu ms:\n%s", rc,
             (unsigned long long)took, out);
    rc = cli("ping", NULL);
    TU_CHECK(rc == 0, "ping after SIGCONT: exit %d:\n%s", rc, out);
}

static const tu_test_t msg_tests[] = {
    { "msg find and msg revoke take TOPIC KEY (revoke --key still works)", test_topic_key },
    { "msg usage errors name the problem and the right form", test_usage },
    { "--timeout takes durations; bad ones are named", test_timeout },
    { NULL, NULL },
};

static int add_suites(void)
{
    return tu_add_suite("msg", msg_init, msg_cleanup, NULL, NULL, msg_tests);
}

int main(int argc, char **argv)
{
    return tu_cunit_main(argc, argv, add_suites);
}
