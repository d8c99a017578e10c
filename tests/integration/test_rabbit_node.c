/*
 * tests/integration/test_rabbit_node.c — the RabbitMQ transport (amqp://,
 * lib/rmq_*.c) on one private node (tests/helpers/rabbit_proc), through the
 * public client API: what a caller can get wrong, and what must survive it.
 * The node starts once for the program (nodes are slow to start here).
 *
 *   nack refused   a NACK the transport refuses (DELAY above the max-delay,
 *                  a LEVEL beyond the table) answers an error and leaves the
 *                  delivery held, as the broker does: an ACK after it
 *                  settles it (1), and nothing comes again.
 *   bad names      group and topic names RabbitMQ cannot take (a byte that
 *                  is not UTF-8: RabbitMQ closes the whole connection; above
 *                  what a shortstr holds: rabbitmq-c fails as if the link
 *                  were lost) and names the broker refuses (blanks) are
 *                  refused naming the byte or the length; a delivery held
 *                  before them is still acknowledged (1) afterwards.
 *   nack's max     a NACK in group g (max-reconsume 16) after GROUP CREATE
 *                  of another group with MAXRETRY 0 on the same client is
 *                  a retry, not a DLQ record: the limit is g's own (and
 *                  the other group's first failure goes to its DLQ).
 *   switching      PULL switch-a with COUNT 1000 (some deliveries still on
 *                  their way), then PULL switch-b on the same client: none
 *                  of switch-a's messages is handed out as switch-b's.
 *   poison         a consumer PULLs a message and its client is closed
 *                  without ACK or NACK, again and again (MAXRETRY 2, a vhost
 *                  with 100..400 ms levels): each redelivery counts as one
 *                  failure, as an expired lease does on the broker — the
 *                  message comes back with reconsume 0, 1, 2 and then lies
 *                  in the group's DLQ with reconsume 2 (RabbitMQ alone
 *                  redelivered it with reconsume 0 forever).
 *   read ahead     a consumer that ACKed its PULL while RabbitMQ already
 *                  sent it more (prefetch), then closes cleanly: what it
 *                  read ahead and never handed out is not a failure — the
 *                  next consumer gets every message at once with
 *                  reconsume 0 (they came back counted, so each was
 *                  settled as a failure: 10 s later, with reconsume 1).
 *   upgrade        the queues an earlier version declared without
 *                  x-delivery-limit (hg.groups, hg.hops, hg.unrouted, a
 *                  group's queue and DLQ: only x-queue-type) are declared
 *                  by hand first; GROUP CREATE, SEND, PULL, NACK to the
 *                  DLQ and ACK then work on them, and they stay as they
 *                  were (existing deployments keep working).
 *   dedup         SEND … KEY k DEDUP, hg_send_dedup, hg_send_many's dedup
 *                 and hg_order_timeout_send (the order service's fast path,
 *                 which sends with DEDUP) all send on amqp://, answering
 *                 duplicate 0: RabbitMQ keeps no index by key, so nothing is
 *                 deduplicated — every send is delivered — and DEDUP without
 *                 a KEY is refused as the broker refuses it. (Before, a DEDUP
 *                 command failed with a syntax error, so the order service's
 *                 every fast-path send failed, and hg_send_many ignored it.)
 *   login         a user and password in the client's options (the daemons'
 *                 user / password-file keys, the CLI's flags) log in as that
 *                 user, over the URI's or amqp's default guest (they were
 *                 ignored: every such client logged in as guest); a wrong
 *                 password is refused naming the user; a user without a
 *                 password anywhere is refused before the wire.
 *   address       hg_client_address and the consumer's log name the node
 *                 really connected: with a URI whose first host is down
 *                 (nothing listens) the client and each consumer worker are
 *                 on the second, and say so; through a first host that is a
 *                 TCP relay to the node, cut after the first connection,
 *                 the client and the consumer fail over to the second host
 *                 and name it ("reconnected to" it). (They named the URI's
 *                 first host, the dead one, whatever they were on.) The
 *                 consumer's start-up line names every host.
 *   clean close   hg_client_close ends the connection with AMQP's close
 *                 handshake, of a plain client and of a consumer: the node
 *                 logs each as closed, none as "client unexpectedly closed
 *                 TCP connection" (a warning it logged for every CLI call
 *                 and every daemon stop).
 *   SYN drop      amqps:// to a port whose accept queue is full (it drops
 *                 SYNs, as a blackholed address does), 20 s connect
 *                 timeout: a readable stop fd ends hg_client_open with
 *                 HG_ERR_STOPPED "stopped while connecting" within 2 s
 *                 (it waited the connect timeout: librabbitmq made that
 *                 connect, which nothing cut).
 *   nack resent   a consumer worker's NACK whose retry level queue was
 *                 unbound by hand fails (the retry comes back unrouted)
 *                 and leaves the delivery held on the live connection: the
 *                 worker sends it again after the retry backoff, that NACK
 *                 binds the topology first, and the message comes again
 *                 with reconsume 1 (it stayed held for ever before).
 *   nack refused by RabbitMQ
 *                 a NACK whose retry RabbitMQ refuses (basic.nack: a
 *                 max-length 0 reject-publish policy on hg.level.3) fails
 *                 saying the delivery is still held; no other consumer gets
 *                 it, and a NACK again once the policy is gone settles it:
 *                 it comes once with reconsume 1 (before, the second NACK
 *                 answered -1: the delivery had been forgotten unsettled).
 *   nack given up a consumer worker whose NACK DLQ and its resend both
 *                 fail (the group's DLQ deleted by hand: unroutable, and
 *                 the NACK's sweep does not declare it) drops its
 *                 connection: the message comes back once, with reconsume
 *                 1 (a retry), handled twice in all; nothing left over.
 *   group list    GROUP LIST's ready and dlq: 2 for a group holding two
 *                 messages, 0 and 0 for an empty one (each 0 checked by a
 *                 get that finds the queue empty); both messages then
 *                 handed out with reconsume 0.
 *   group list copy
 *                 GROUP LIST while a group queue's ra server is suspended
 *                 (sys:suspend: the passive declare answers 0 after 250 ms)
 *                 and resumed once the check's get waits in its mailbox:
 *                 it fails naming the queue, not empty; the message the get
 *                 took goes back as an uncounted copy at the tail — both
 *                 messages come once, the other first, reconsume 0.
 *   ciphers       amqps:// to a listener of the test's own that reads the
 *                 ClientHello: the TLS 1.2 suites offered are exactly
 *                 base/tls_policy.h's (OpenSSL's default list, CBC and
 *                 static RSA included, before).
 *   remainder     a remainder queue's binding deleted by hand: on the
 *                 send's path (hg.remainder.256 for DELAY 1500ms) the
 *                 send fails and the next one rebinds; further down
 *                 (hg.remainder.128) RabbitMQ's dead-lettering holds the
 *                 message until a send meets the gap and rebinds. Every
 *                 message comes at or after its due, once (the chain of
 *                 alternate exchanges skipped the wait: 93..226 ms early).
 *
 * Every test uses topic and group names of its own.
 */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include "include/hourglass/hourglass.h"
#include "include/hourglass/order.h"
#include "tests/helpers/rabbit_proc.h"
#include "tests/helpers/testutil.h"

#include <arpa/inet.h>
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <stdatomic.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <CUnit/CUnit.h>
#include <amqp.h>
#include <amqp_tcp_socket.h>

static rq_cluster_t rabbit;

static int suite_init(void)
{
    char err[8192];
    if (rq_start(&rabbit, 1, err, sizeof err) != 0) {
        fprintf(stderr, "start RabbitMQ: %s\n", err);
        return -1;
    }
    return 0;
}

static int suite_cleanup(void)
{
    rq_destroy(&rabbit, CU_get_number_of_failures() > 0);
    return 0;
}

static hg_client_t *open_client(void)
{
    hg_client_t *c = NULL;
    hg_error_t err;
    hg_err_t e = hg_client_open(rabbit.uri, NULL, &c, &err);
    TU_REQUIRE(e == HG_OK, "hg_client_open(%s): %s", rabbit.uri, err.message);
    return c;
}

/* A new vhost name on node 1 that guest may use fully. 0, or -1 with
 * rabbitmqctl's output in out. */
static int guest_vhost(const char *name, char *out, size_t outlen)
{
    if (rq_ctl(&rabbit, 0, out, outlen, "add_vhost", name, NULL) != 0)
        return -1;
    return rq_ctl(&rabbit, 0, out, outlen, "set_permissions", "-p", name, "guest", ".*", ".*", ".*", NULL);
}

/* Run a command; its reply in *out (NULL on failure), the code returned. */
static hg_err_t cmd(hg_client_t *c, hg_reply_t **out, int argc, const char *const *argv)
{
    *out = NULL;
    return hg_client_command(c, argc, argv, NULL, out);
}

/* A command whose reply is an integer; -999 when it failed (reported). */
static long long int_cmd(hg_client_t *c, int argc, const char *const *argv, int line)
{
    hg_reply_t *r = NULL;
    hg_err_t e = cmd(c, &r, argc, argv);
    long long v = -999;
    TU_CHECK_AT(e == HG_OK, line, "%s %s: %s", argv[0], argc > 1 ? argv[1] : "", hg_client_errmsg(c));
    if (e == HG_OK && hg_reply_type(r) == HG_REPLY_INTEGER)
        v = hg_reply_integer(r);
    else if (e == HG_OK)
        TU_CHECK_AT(0, line, "%s answered type %d, want an integer", argv[0], (int)hg_reply_type(r));
    hg_reply_free(r);
    return v;
}

/* Create group on topic (FROM NOW), send one message, PULL it: its id into
 * id[HG_ID_MAX]. 0, or -1 (reported). */
static int one_held(hg_client_t *c, const char *group, const char *topic, char *id, int line)
{
    hg_reply_t *r = NULL;
    hg_err_t e = cmd(c, &r, 6, (const char *const[]){ "GROUP", "CREATE", group, topic, "FROM", "NOW" });
    const hg_reply_t *msg;

    hg_reply_free(r);
    TU_CHECK_AT(e == HG_OK, line, "GROUP CREATE %s %s: %s", group, topic, hg_client_errmsg(c));
    e = hg_send(c, topic, NULL, "payload", 7, hg_delay_none(), NULL);
    TU_CHECK_AT(e == HG_OK, line, "hg_send to %s: %s", topic, hg_client_errmsg(c));
    e = cmd(c, &r, 5, (const char *const[]){ "PULL", group, topic, "BLOCK", "10000" });
    TU_CHECK_AT(e == HG_OK, line, "PULL %s: %s", group, hg_client_errmsg(c));
    if (e != HG_OK || hg_reply_count(r) != 1) {
        TU_CHECK_AT(e != HG_OK, line, "PULL %s gave %zu messages, want 1", group, r != NULL ? hg_reply_count(r) : 0);
        hg_reply_free(r);
        return -1;
    }
    msg = hg_reply_element(r, 0);
    snprintf(id, HG_ID_MAX, "%s", hg_reply_str(hg_reply_element(msg, 0), NULL));
    hg_reply_free(r);
    return 0;
}

static void test_nack_refused_keeps_hold(void)
{
    static const char *const bad[][2] = { { "DELAY", "4d" }, { "LEVEL", "99" } };
    hg_client_t *c = open_client();
    char id[HG_ID_MAX];
    hg_reply_t *r = NULL;
    hg_err_t e;

    if (one_held(c, "nackbad-g", "nackbad-t", id, __LINE__) != 0) {
        hg_client_close(c);
        return;
    }
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        e = cmd(c, &r, 5, (const char *const[]){ "NACK", "nackbad-g", id, bad[i][0], bad[i][1] });
        TU_CHECK(e == HG_ERR_SERVER, "NACK %s %s answered %d (%s), want an error reply", bad[i][0], bad[i][1], (int)e,
                 e == HG_OK && hg_reply_type(r) == HG_REPLY_INTEGER ? "an integer" : hg_client_errmsg(c));
        hg_reply_free(r);
    }
    TU_CHECK(int_cmd(c, 3, (const char *const[]){ "ACK", "nackbad-g", id }, __LINE__) == 1,
             "ACK after the refused NACKs did not settle the held message %s", id);
    e = cmd(c, &r, 5, (const char *const[]){ "PULL", "nackbad-g", "nackbad-t", "BLOCK", "500" });
    TU_CHECK(e == HG_OK && hg_reply_count(r) == 0, "PULL after the ACK: %s, %zu messages (want none)",
             e == HG_OK ? "ok" : hg_client_errmsg(c), r != NULL ? hg_reply_count(r) : 0);
    hg_reply_free(r);
    hg_client_close(c);
}

/* Run argv, which must fail with want (a code) and a message containing
 * `says`. */
static void refused(hg_client_t *c, int argc, const char *const *argv, hg_err_t want, const char *says, int line)
{
    hg_reply_t *r = NULL;
    hg_err_t e = cmd(c, &r, argc, argv);
    TU_CHECK_AT(e == want && strstr(hg_client_errmsg(c), says) != NULL, line,
                "%s %.20s %.20s: code %d (%s), want %d naming \"%s\"", argv[0], argc > 1 ? argv[1] : "",
                argc > 2 ? argv[2] : "", (int)e, e == HG_OK ? "answered" : hg_client_errmsg(c), (int)want, says);
    hg_reply_free(r);
}

static void test_bad_names_keep_connection(void)
{
    hg_client_t *c = open_client();
    char id[HG_ID_MAX], long_name[301];
    const char *bad_utf8 = "bad\xff", *blank = "a b";
    hg_err_t e;

    memset(long_name, 'g', sizeof long_name - 1);
    long_name[sizeof long_name - 1] = '\0';
    if (one_held(c, "names-g", "names-t", id, __LINE__) != 0) {
        hg_client_close(c);
        return;
    }
    /* RabbitMQ closed the whole connection on this one (501 FRAME_ERROR) */
    refused(c, 4, (const char *const[]){ "GROUP", "CREATE", bad_utf8, "names-t" }, HG_ERR_SERVER,
            "group name has an invalid byte 0xff at offset 3", __LINE__);
    refused(c, 4, (const char *const[]){ "GROUP", "CREATE", "names-g2", bad_utf8 }, HG_ERR_SERVER,
            "topic name has an invalid byte 0xff", __LINE__);
    refused(c, 4, (const char *const[]){ "GROUP", "CREATE", blank, "names-t" }, HG_ERR_SERVER,
            "group name has an invalid byte 0x20", __LINE__);
    /* these were "connection lost" (rabbitmq-c cannot encode the queue name) */
    refused(c, 3, (const char *const[]){ "DLQ", "LEN", long_name }, HG_ERR_SERVER,
            "group name is 300 bytes, longer than the limit of 245", __LINE__);
    refused(c, 3, (const char *const[]){ "GROUP", "DEL", long_name }, HG_ERR_SERVER,
            "group name is 300 bytes, longer than the limit of 245", __LINE__);
    refused(c, 3, (const char *const[]){ "PULL", bad_utf8, "names-t" }, HG_ERR_ARG, "invalid byte 0xff", __LINE__);
    e = hg_send(c, bad_utf8, NULL, "x", 1, hg_delay_none(), NULL);
    TU_CHECK(e == HG_ERR_SERVER && strstr(hg_client_errmsg(c), "topic name has an invalid byte 0xff") != NULL,
             "hg_send to a topic that is not ASCII: code %d (%s)", (int)e, hg_client_errmsg(c));
    TU_CHECK(int_cmd(c, 3, (const char *const[]){ "ACK", "names-g", id }, __LINE__) == 1,
             "the message held before the bad names could not be acknowledged: its connection was lost");
    hg_client_close(c);
}

static void test_nack_uses_its_groups_max(void)
{
    hg_client_t *c = open_client();
    char id[HG_ID_MAX];
    hg_reply_t *r = NULL;
    hg_err_t e;

    if (one_held(c, "maxof-g", "maxof-t", id, __LINE__) != 0) { /* max-reconsume 16 */
        hg_client_close(c);
        return;
    }
    e = cmd(c, &r, 6, (const char *const[]){ "GROUP", "CREATE", "maxof-other", "maxof-t2", "MAXRETRY", "0" });
    TU_CHECK(e == HG_OK, "GROUP CREATE maxof-other MAXRETRY 0: %s", hg_client_errmsg(c));
    hg_reply_free(r);
    TU_CHECK(int_cmd(c, 3, (const char *const[]){ "NACK", "maxof-g", id }, __LINE__) > 0,
             "NACK of a first failure in maxof-g (max-reconsume 16) was not a retry (0: parked in its DLQ)");
    TU_CHECK(int_cmd(c, 3, (const char *const[]){ "DLQ", "LEN", "maxof-g" }, __LINE__) == 0,
             "maxof-g's DLQ holds its first failure: NACK used maxof-other's MAXRETRY 0");
    /* and maxof-other's own limit: its first failure is parked */
    e = hg_send(c, "maxof-t2", NULL, "x", 1, hg_delay_none(), NULL);
    TU_CHECK(e == HG_OK, "hg_send to maxof-t2: %s", hg_client_errmsg(c));
    e = cmd(c, &r, 5, (const char *const[]){ "PULL", "maxof-other", "maxof-t2", "BLOCK", "10000" });
    TU_REQUIRE(e == HG_OK && hg_reply_count(r) == 1, "PULL maxof-other: %s",
               e == HG_OK ? "no message" : hg_client_errmsg(c));
    snprintf(id, sizeof id, "%s", hg_reply_str(hg_reply_element(hg_reply_element(r, 0), 0), NULL));
    hg_reply_free(r);
    TU_CHECK(int_cmd(c, 3, (const char *const[]){ "NACK", "maxof-other", id }, __LINE__) == 0,
             "NACK of a first failure in maxof-other (MAXRETRY 0) was not parked in its DLQ");
    TU_CHECK(int_cmd(c, 3, (const char *const[]){ "DLQ", "LEN", "maxof-other" }, __LINE__) == 1,
             "maxof-other's DLQ does not hold its first failure");
    hg_client_close(c);
}

static void test_switching_groups(void)
{
    enum {
        N = 1000
    };
    hg_client_t *c = open_client();
    hg_send_item_t *items = calloc(N, sizeof(*items));
    hg_reply_t *r = NULL;
    size_t ok = 0, first = 0, second = 0, foreign = 0;
    hg_err_t e;

    for (int i = 0; i < 2; i++) {
        e = cmd(c, &r, 6,
                (const char *const[]){ "GROUP", "CREATE", i == 0 ? "switch-a" : "switch-b",
                                       i == 0 ? "switch-ta" : "switch-tb", "FROM", "NOW" });
        TU_CHECK(e == HG_OK, "GROUP CREATE: %s", hg_client_errmsg(c));
        hg_reply_free(r);
    }
    for (size_t i = 0; i < N; i++) {
        items[i].topic = "switch-ta";
        items[i].payload = "a";
        items[i].payload_len = 1;
        items[i].delay = hg_delay_none();
    }
    e = hg_send_many(c, items, N, &ok);
    TU_REQUIRE(e == HG_OK && ok == N, "hg_send_many: %zu of %d sent (%s)", ok, N, hg_client_errmsg(c));
    /* a large COUNT: the PULL answers with what arrived first, more are on their way */
    e = cmd(c, &r, 7, (const char *const[]){ "PULL", "switch-a", "switch-ta", "COUNT", "1000", "BLOCK", "10000" });
    TU_CHECK(e == HG_OK, "PULL switch-a: %s", hg_client_errmsg(c));
    first = r != NULL ? hg_reply_count(r) : 0;
    hg_reply_free(r);
    e = cmd(c, &r, 7, (const char *const[]){ "PULL", "switch-b", "switch-tb", "COUNT", "1000", "BLOCK", "1000" });
    TU_CHECK(e == HG_OK, "PULL switch-b: %s", hg_client_errmsg(c));
    second = r != NULL ? hg_reply_count(r) : 0;
    for (size_t i = 0; i < second; i++)
        foreign += strcmp(hg_reply_str(hg_reply_element(hg_reply_element(r, i), 1), NULL), "switch-tb") != 0;
    hg_reply_free(r);
    printf("\n    PULL switch-a took %zu of %d; PULL switch-b then answered %zu, %zu of them switch-a's", first, N,
           second, foreign);
    TU_CHECK(foreign == 0, "PULL switch-b handed out %zu messages of switch-a's topic", foreign);
    free(items);
    hg_client_close(c);
}

/* A notice of hg_client_command_notice: counts its calls. */
static void count_notice(void *arg)
{
    (*(int *)arg)++;
}

static void test_poison_reaches_dlq(void)
{
    char out[4096], uri[512];
    int seen[8], pulls = 0;
    hg_client_t *c = NULL;
    hg_reply_t *r = NULL;
    hg_error_t err;
    hg_err_t e;

    TU_REQUIRE(guest_vhost("poison", out, sizeof out) == 0, "vhost poison for guest: %s", out);
    snprintf(uri, sizeof uri, "amqp://guest:guest@127.0.0.1:%d/poison?levels=100ms,200ms,300ms,400ms",
             rabbit.nodes[0].amqp_port);
    e = hg_client_open(uri, NULL, &c, &err);
    TU_REQUIRE(e == HG_OK, "hg_client_open(%s): %s", uri, err.message);
    e = cmd(c, &r, 6, (const char *const[]){ "GROUP", "CREATE", "poison-g", "poison-t", "MAXRETRY", "2" });
    TU_REQUIRE(e == HG_OK, "GROUP CREATE poison-g MAXRETRY 2: %s", hg_client_errmsg(c));
    hg_reply_free(r);
    e = hg_send(c, "poison-t", NULL, "crash", 5, hg_delay_none(), NULL);
    TU_REQUIRE(e == HG_OK, "hg_send: %s", hg_client_errmsg(c));
    hg_client_close(c);
    /* a consumer that dies on the message: PULL, then its connection ends
     * without ACK or NACK; until a PULL finds nothing (or 8 rounds) */
    while (pulls < 8) {
        size_t got;
        e = hg_client_open(uri, NULL, &c, &err);
        TU_REQUIRE(e == HG_OK, "hg_client_open: %s", err.message);
        e = cmd(c, &r, 5, (const char *const[]){ "PULL", "poison-g", "poison-t", "BLOCK", "3000" });
        TU_CHECK(e == HG_OK, "PULL poison-g: %s", hg_client_errmsg(c));
        got = e == HG_OK ? hg_reply_count(r) : 0;
        if (got == 1)
            seen[pulls++] = (int)hg_reply_integer(hg_reply_element(hg_reply_element(r, 0), 4));
        hg_reply_free(r);
        hg_client_close(c); /* no ACK, no NACK */
        if (got == 0)
            break;
    }
    printf("\n    handed out %d times, reconsume:", pulls);
    for (int i = 0; i < pulls; i++)
        printf(" %d", seen[i]);
    TU_CHECK(pulls == 3, "the message was handed out %d times, want 3 (reconsume 0, 1, 2, then the DLQ)", pulls);
    for (int i = 0; i < pulls && i < 3; i++)
        TU_CHECK(seen[i] == i, "hand-out %d had reconsume %d, want %d", i + 1, seen[i], i);
    e = hg_client_open(uri, NULL, &c, &err);
    TU_REQUIRE(e == HG_OK, "hg_client_open: %s", err.message);
    e = cmd(c, &r, 3, (const char *const[]){ "DLQ", "LIST", "poison-g" });
    TU_CHECK(e == HG_OK, "DLQ LIST poison-g: %s", hg_client_errmsg(c));
    TU_CHECK(e == HG_OK && hg_reply_count(r) == 1, "poison-g's DLQ holds %zu messages, want 1",
             e == HG_OK ? hg_reply_count(r) : 0);
    if (e == HG_OK && hg_reply_count(r) == 1) {
        const hg_reply_t *m = hg_reply_element(r, 0);
        const char *reason = hg_reply_str(hg_reply_element(m, 4), NULL);
        TU_CHECK(hg_reply_integer(hg_reply_element(m, 3)) == 2, "the DLQ record has reconsume %lld, want 2",
                 hg_reply_integer(hg_reply_element(m, 3)));
        TU_CHECK(reason != NULL && strstr(reason, "redelivered") != NULL, "the DLQ record's reason is '%s'",
                 reason != NULL ? reason : "(none)");
    }
    hg_reply_free(r);
    /* hg_client_command_notice runs on amqp:// too: the library runs the
     * command itself and cannot time it, so the notice comes first (it was
     * refused, HG_ERR_UNSUPPORTED, and hourglass-cli dlq requeue|drop --all
     * with it); then hourglass-cli's requeue --all as an operator types it
     * (after this connection's close: its DLQ LIST browse holds the message
     * until then) */
    int notices = 0;
    e = hg_client_command_notice(c, 1, (const char *const[]){ "PING" }, NULL, 300, count_notice, &notices, &r);
    TU_CHECK(e == HG_OK && notices == 1, "hg_client_command_notice PING on amqp://: %s %s, %d notices", hg_strerror(e),
             hg_client_errmsg(c), notices);
    hg_reply_free(r);
    hg_client_close(c);
    const char *requeue[] = { HG_BUILDDIR "/hourglass-cli", "--uri", uri, "dlq", "requeue", "poison-g", "--all", NULL };
    int rc = tu_run_capture(requeue, out, sizeof out);
    TU_CHECK(rc == 0 && strstr(out, "requeued 1 message") != NULL,
             "hourglass-cli dlq requeue poison-g --all on amqp://: exit %d:\n%s", rc, out);
    /* the queues whose messages come back (consumed, browsed) carry an
     * explicit x-delivery-limit: RabbitMQ 4.0+ would drop a message
     * returned 20 times (a registry record or DLQ message browsed 20 times) */
    TU_CHECK(rq_ctl(&rabbit, 0, out, sizeof out, "list_queues", "-q", "-p", "poison", "name", "arguments", NULL) == 0,
             "list_queues: %s", out);
    for (const char *const *q = (const char *const[]){ "hg.groups", "hg.group.poison-g", "hg.dlq.poison-g", NULL };
         *q != NULL; q++) {
        const char *line = strstr(out, *q), *end = line != NULL ? strchr(line, '\n') : NULL;
        const char *limit = line != NULL ? strstr(line, "x-delivery-limit") : NULL;
        TU_CHECK(line != NULL && limit != NULL && (end == NULL || limit < end),
                 "queue %s has no x-delivery-limit argument:\n%s", *q, out);
    }
}

/* Column (list_queues' name for it: messages, messages_ready,
 * messages_unacknowledged) of queue on vhost; -1 unknown. */
static long queue_column(const char *vhost, const char *queue, const char *column)
{
    char out[65536];
    size_t len = strlen(queue);

    if (rq_ctl(&rabbit, 0, out, sizeof out, "list_queues", "-q", "-p", vhost, "name", column, NULL) != 0)
        return -1;
    for (char *line = out; line != NULL && *line != '\0';) {
        char *nl = strchr(line, '\n');
        if (strncmp(line, queue, len) == 0 && (line[len] == '\t' || line[len] == ' '))
            return strtol(line + len + 1, NULL, 10);
        line = nl != NULL ? nl + 1 : NULL;
    }
    return -1;
}

/* Unacknowledged messages of queue on vhost "/", or -1. */
static long unacked(const char *queue)
{
    return queue_column("/", queue, "messages_unacknowledged");
}

static int read_ahead_arrived(void *arg)
{
    (void)arg;
    return unacked("hg.group.ra-g") > 0;
}

static void test_read_ahead_at_close(void)
{
    char uri[256];
    hg_client_t *a = NULL, *b = NULL;
    hg_reply_t *r = NULL;
    hg_error_t err;
    hg_err_t e;
    int got = 0, retried = 0;
    uint64_t until;

    snprintf(uri, sizeof uri, "amqp://guest:guest@127.0.0.1:%d/", rabbit.nodes[0].amqp_port);
    TU_REQUIRE(hg_client_open(uri, NULL, &a, &err) == HG_OK, "hg_client_open: %s", err.message);
    e = cmd(a, &r, 4, (const char *const[]){ "GROUP", "CREATE", "ra-g", "ra-t" });
    TU_REQUIRE(e == HG_OK, "GROUP CREATE ra-g: %s", hg_client_errmsg(a));
    hg_reply_free(r);
    for (int i = 0; i < 30; i++)
        TU_REQUIRE(hg_send(a, "ra-t", NULL, "x", 1, hg_delay_none(), NULL) == HG_OK, "hg_send: %s",
                   hg_client_errmsg(a));
    /* take 10 (prefetch 10) and ACK them: RabbitMQ then sends 10 more */
    for (until = tu_now_mono_ms() + 20000; got < 10 && tu_now_mono_ms() < until;) {
        char want[4]; /* what is left of the 10: a PULL may answer fewer than it asked for */
        snprintf(want, sizeof want, "%d", 10 - got);
        e = cmd(a, &r, 7, (const char *const[]){ "PULL", "ra-g", "ra-t", "COUNT", want, "BLOCK", "2000" });
        TU_REQUIRE(e == HG_OK, "PULL ra-g: %s", hg_client_errmsg(a));
        for (size_t i = 0; i < hg_reply_count(r); i++, got++) {
            const char *id = hg_reply_str(hg_reply_element(hg_reply_element(r, i), 0), NULL);
            TU_CHECK(int_cmd(a, 3, (const char *const[]){ "ACK", "ra-g", id }, __LINE__) == 1, "ACK ra-g %s", id);
        }
        hg_reply_free(r);
    }
    TU_REQUIRE(got == 10, "took %d of the first 10", got);
    TU_REQUIRE(tu_poll_until(read_ahead_arrived, NULL, 20000, 50) == 0,
               "RabbitMQ sent nothing ahead after the ACKs (hg.group.ra-g unacknowledged: %ld)",
               unacked("hg.group.ra-g"));
    printf("\n    read ahead at the close: %ld", unacked("hg.group.ra-g"));
    hg_client_close(a);

    /* the other 20 at once, none counted as a failure */
    TU_REQUIRE(hg_client_open(uri, NULL, &b, &err) == HG_OK, "hg_client_open: %s", err.message);
    got = 0;
    for (until = tu_now_mono_ms() + 6000; got < 20 && tu_now_mono_ms() < until;) {
        e = cmd(b, &r, 7, (const char *const[]){ "PULL", "ra-g", "ra-t", "COUNT", "20", "BLOCK", "1000" });
        TU_CHECK(e == HG_OK, "PULL ra-g (second consumer): %s", hg_client_errmsg(b));
        if (e != HG_OK)
            break;
        for (size_t i = 0; i < hg_reply_count(r); i++, got++) {
            const hg_reply_t *m = hg_reply_element(r, i);
            retried += hg_reply_integer(hg_reply_element(m, 4)) != 0;
            (void)int_cmd(b, 3, (const char *const[]){ "ACK", "ra-g", hg_reply_str(hg_reply_element(m, 0), NULL) },
                          __LINE__);
        }
        hg_reply_free(r);
    }
    TU_CHECK(got == 20 && retried == 0,
             "the second consumer got %d of the other 20 within 6 s, %d with reconsume > 0: what the first read ahead "
             "counted as its failures",
             got, retried);
    hg_client_close(b);
}

/* Declare durable quorum queues with x-queue-type alone, as the library
 * did before it added x-delivery-limit, on vhost of port. */
static int declare_old_queues(int port, const char *vhost, const char *const *names)
{
    amqp_connection_state_t st = amqp_new_connection();
    amqp_socket_t *sock = amqp_tcp_socket_new(st);
    amqp_rpc_reply_t x;
    int rc = -1;

    if (sock == NULL || amqp_socket_open(sock, "127.0.0.1", port) != AMQP_STATUS_OK) {
        fprintf(stderr, "cannot connect to 127.0.0.1:%d\n", port);
        amqp_destroy_connection(st);
        return -1;
    }
    x = amqp_login(st, vhost, 0, 131072, 0, AMQP_SASL_METHOD_PLAIN, "guest", "guest");
    if (x.reply_type != AMQP_RESPONSE_NORMAL || amqp_channel_open(st, 1) == NULL) {
        fprintf(stderr, "login or channel.open on vhost %s failed\n", vhost);
        goto out;
    }
    for (; *names != NULL; names++) {
        amqp_table_entry_t e = { .key = amqp_cstring_bytes("x-queue-type"),
                                 .value = { .kind = AMQP_FIELD_KIND_UTF8,
                                            .value = { .bytes = amqp_cstring_bytes("quorum") } } };
        amqp_table_t args = { .num_entries = 1, .entries = &e };
        amqp_queue_declare(st, 1, amqp_cstring_bytes(*names), 0, 1, 0, 0, args);
        x = amqp_get_rpc_reply(st);
        if (x.reply_type != AMQP_RESPONSE_NORMAL) {
            fprintf(stderr, "queue.declare %s failed\n", *names);
            goto out;
        }
    }
    rc = 0;
out:
    amqp_connection_close(st, AMQP_REPLY_SUCCESS);
    amqp_destroy_connection(st);
    return rc;
}

static void test_upgraded_queues(void)
{
    static const char *const old[] = { "hg.groups", "hg.hops", "hg.unrouted", "hg.group.up-g", "hg.dlq.up-g", NULL };
    char out[32768], uri[512], id[HG_ID_MAX];
    hg_client_t *c = NULL;
    hg_reply_t *r = NULL;
    hg_error_t err;
    hg_err_t e;

    TU_REQUIRE(guest_vhost("upgrade", out, sizeof out) == 0, "vhost upgrade for guest: %s", out);
    TU_REQUIRE(declare_old_queues(rabbit.nodes[0].amqp_port, "upgrade", old) == 0, "declaring the old queues");
    snprintf(uri, sizeof uri, "amqp://guest:guest@127.0.0.1:%d/upgrade", rabbit.nodes[0].amqp_port);
    e = hg_client_open(uri, NULL, &c, &err);
    TU_REQUIRE(e == HG_OK, "hg_client_open(%s): %s", uri, err.message);
    e = cmd(c, &r, 6, (const char *const[]){ "GROUP", "CREATE", "up-g", "up-t", "MAXRETRY", "0" });
    TU_CHECK(e == HG_OK, "GROUP CREATE up-g on the old queues: %s", hg_client_errmsg(c));
    hg_reply_free(r);
    for (int i = 0; i < 2; i++) {
        e = hg_send(c, "up-t", NULL, i == 0 ? "first" : "second", i == 0 ? 5 : 6, hg_delay_none(), NULL);
        TU_CHECK(e == HG_OK, "SEND on the old queues: %s", hg_client_errmsg(c));
    }
    /* one NACKed into the DLQ (MAXRETRY 0), one ACKed */
    e = cmd(c, &r, 7, (const char *const[]){ "PULL", "up-g", "up-t", "COUNT", "2", "BLOCK", "10000" });
    TU_CHECK(e == HG_OK && hg_reply_count(r) == 2, "PULL up-g COUNT 2: %s, %zu messages",
             e == HG_OK ? "ok" : hg_client_errmsg(c), e == HG_OK ? hg_reply_count(r) : 0);
    for (size_t i = 0; e == HG_OK && i < hg_reply_count(r) && i < 2; i++) {
        snprintf(id, sizeof id, "%s", hg_reply_str(hg_reply_element(hg_reply_element(r, i), 0), NULL));
        /* NACK answers 0: parked in the DLQ (MAXRETRY 0); ACK answers 1 */
        TU_CHECK(int_cmd(c, 3, (const char *const[]){ i == 0 ? "NACK" : "ACK", "up-g", id }, __LINE__) ==
                     (i == 0 ? 0 : 1),
                 "%s up-g %s", i == 0 ? "NACK" : "ACK", id);
    }
    hg_reply_free(r);
    TU_CHECK(int_cmd(c, 3, (const char *const[]){ "DLQ", "LEN", "up-g" }, __LINE__) == 1, "DLQ LEN up-g");
    hg_client_close(c);
    TU_CHECK(rq_ctl(&rabbit, 0, out, sizeof out, "list_queues", "-q", "-p", "upgrade", "name", "arguments", NULL) == 0,
             "list_queues: %s", out);
    for (const char *const *q = old; *q != NULL; q++) {
        const char *line = strstr(out, *q), *end = line != NULL ? strchr(line, '\n') : NULL;
        const char *limit = line != NULL ? strstr(line, "x-delivery-limit") : NULL;
        TU_CHECK(line != NULL && (limit == NULL || (end != NULL && limit > end)),
                 "queue %s is not as it was declared (x-queue-type alone):\n%s", *q, out);
    }
}

static void test_dedup_sends_everything(void)
{
    hg_client_t *c = open_client();
    hg_reply_t *r = NULL;
    char ids[5][HG_ID_MAX];
    int dup = -1;
    hg_err_t e = cmd(c, &r, 6, (const char *const[]){ "GROUP", "CREATE", "dedup-g", "dedup-t", "FROM", "NOW" });

    hg_reply_free(r);
    TU_CHECK(e == HG_OK, "GROUP CREATE: %s", hg_client_errmsg(c));
    /* the command: [id, 0], as the broker answers a new message */
    e = cmd(c, &r, 6, (const char *const[]){ "SEND", "dedup-t", "one", "KEY", "42", "DEDUP" });
    TU_CHECK(e == HG_OK, "SEND … KEY 42 DEDUP: %s", hg_client_errmsg(c));
    if (e == HG_OK) {
        TU_CHECK(hg_reply_type(r) == HG_REPLY_ARRAY && hg_reply_count(r) == 2, "SEND … DEDUP answered type %d",
                 (int)hg_reply_type(r));
        if (hg_reply_type(r) == HG_REPLY_ARRAY && hg_reply_count(r) == 2) {
            snprintf(ids[0], HG_ID_MAX, "%s", hg_reply_str(hg_reply_element(r, 0), NULL));
            TU_CHECK(hg_reply_integer(hg_reply_element(r, 1)) == 0, "duplicate %lld, want 0",
                     hg_reply_integer(hg_reply_element(r, 1)));
        }
    }
    hg_reply_free(r);
    /* DEDUP first, with a delay after it: the broker's grammar takes both orders */
    e = cmd(c, &r, 8, (const char *const[]){ "SEND", "dedup-t", "two", "KEY", "42", "DEDUP", "DELAY", "0" });
    TU_CHECK(e == HG_OK && hg_reply_type(r) == HG_REPLY_ARRAY, "SEND … DEDUP DELAY 0: %s", hg_client_errmsg(c));
    hg_reply_free(r);
    /* the library's calls */
    e = hg_send_dedup(c, "dedup-t", "42", "three", 5, hg_delay_none(), ids[1], &dup);
    TU_CHECK(e == HG_OK && dup == 0 && ids[1][0] != '\0', "hg_send_dedup: %d dup %d: %s", (int)e, dup,
             hg_client_errmsg(c));
    TU_CHECK(strcmp(ids[0], ids[1]) != 0, "two sends of key 42 got one id %s", ids[1]);
    hg_send_item_t item = { .topic = "dedup-t", .key = "42", .payload = "four", .payload_len = 4, .dedup = 1 };
    e = hg_send_many(c, &item, 1, NULL);
    TU_CHECK(e == HG_OK && item.err == HG_OK && item.duplicate == 0, "hg_send_many dedup: %d / %d: %s", (int)e,
             (int)item.err, item.error);
    TU_CHECK(hg_order_timeout_send(c, "dedup-t", 42, 0, ids[2]) == HG_OK, "hg_order_timeout_send: %s",
             hg_client_errmsg(c));
    /* refused as the broker refuses it, before the wire */
    e = cmd(c, &r, 4, (const char *const[]){ "SEND", "dedup-t", "five", "DEDUP" });
    TU_CHECK(e == HG_ERR_SERVER && strstr(hg_client_errmsg(c), "DEDUP needs a non-empty KEY") != NULL,
             "SEND … DEDUP without KEY: %d: %s", (int)e, hg_client_errmsg(c));
    hg_reply_free(r);
    e = cmd(c, &r, 7, (const char *const[]){ "SEND", "dedup-t", "five", "KEY", "42", "DEDUP", "DEDUP" });
    TU_CHECK(e == HG_ERR_SERVER && strstr(hg_client_errmsg(c), "DEDUP") != NULL, "DEDUP twice: %d: %s", (int)e,
             hg_client_errmsg(c));
    hg_reply_free(r);
    /* every one of the five was sent: nothing deduplicated */
    size_t got = 0;
    for (int round = 0; round < 20 && got < 5; round++) {
        e = cmd(c, &r, 7, (const char *const[]){ "PULL", "dedup-g", "dedup-t", "COUNT", "10", "BLOCK", "1000" });
        TU_CHECK(e == HG_OK, "PULL: %s", hg_client_errmsg(c));
        if (e != HG_OK)
            break;
        for (size_t i = 0; i < hg_reply_count(r); i++) {
            const char *id = hg_reply_str(hg_reply_element(hg_reply_element(r, i), 0), NULL);
            TU_CHECK(int_cmd(c, 3, (const char *const[]){ "ACK", "dedup-g", id }, __LINE__) == 1, "ACK %s", id);
            got++;
        }
        hg_reply_free(r);
        r = NULL;
    }
    TU_CHECK(got == 5, "delivered %zu of the 5 sends of key 42, want all 5", got);
    hg_client_close(c);
}

/* Remove queue's binding to the headers exchange on vhost that matches header = value (x-match all: the
 * library's arguments), as an operator's mistake would. 0, or -1 (reported). */
static int unbind_headers(int port, const char *vhost, const char *queue, const char *exchange, const char *header,
                          const char *value)
{
    amqp_connection_state_t st = amqp_new_connection();
    amqp_socket_t *sock = amqp_tcp_socket_new(st);
    amqp_rpc_reply_t x;
    int rc = -1;

    if (sock == NULL || amqp_socket_open(sock, "127.0.0.1", port) != AMQP_STATUS_OK) {
        TU_CHECK(0, "connect to 127.0.0.1:%d", port);
        amqp_destroy_connection(st);
        return -1;
    }
    x = amqp_login(st, vhost, 0, 131072, 0, AMQP_SASL_METHOD_PLAIN, "guest", "guest");
    if (x.reply_type == AMQP_RESPONSE_NORMAL && amqp_channel_open(st, 1) != NULL) {
        amqp_table_entry_t e[2] = {
            { .key = amqp_cstring_bytes("x-match"),
              .value = { .kind = AMQP_FIELD_KIND_UTF8, .value = { .bytes = amqp_cstring_bytes("all") } } },
            { .key = amqp_cstring_bytes(header),
              .value = { .kind = AMQP_FIELD_KIND_UTF8, .value = { .bytes = amqp_cstring_bytes(value) } } },
        };
        amqp_table_t args = { .num_entries = 2, .entries = e };
        amqp_queue_unbind(st, 1, amqp_cstring_bytes(queue), amqp_cstring_bytes(exchange), amqp_empty_bytes, args);
        x = amqp_get_rpc_reply(st);
        rc = x.reply_type == AMQP_RESPONSE_NORMAL ? 0 : -1;
        TU_CHECK(rc == 0, "queue.unbind %s from %s refused (reply type %d)", queue, exchange, (int)x.reply_type);
    } else {
        TU_CHECK(0, "login to vhost %s or channel.open failed", vhost);
    }
    amqp_connection_close(st, AMQP_REPLY_SUCCESS);
    amqp_destroy_connection(st);
    return rc;
}

/* Remove hg.level.<level>'s binding to hg.levels on vhost. 0, or -1 (reported). */
static int unbind_level(int port, const char *vhost, int level)
{
    char queue[32], value[16];
    snprintf(queue, sizeof queue, "hg.level.%d", level);
    snprintf(value, sizeof value, "%d", level);
    return unbind_headers(port, vhost, queue, "hg.levels", "hg-level", value);
}

/* Whether vhost holds a binding of exchange to queue (list_bindings); -1 when rabbitmqctl failed (reported). */
static int bound(const char *vhost, const char *exchange, const char *queue)
{
    char out[65536], line[512];
    const char *p = out;
    int n;

    if (rq_ctl(&rabbit, 0, out, sizeof out, "list_bindings", "-q", "-p", vhost, "source_name", "destination_name",
               NULL) != 0) {
        TU_CHECK(0, "list_bindings: %s", out);
        return -1;
    }
    while (sscanf(p, "%511[^\n]%n", line, &n) == 1) {
        char src[256], dst[256];
        if (sscanf(line, "%255s %255s", src, dst) == 2 && strcmp(src, exchange) == 0 && strcmp(dst, queue) == 0)
            return 1;
        p += n;
        while (*p == '\n')
            p++;
    }
    return 0;
}

/* Whether vhost holds a binding of hg.levels to queue; -1 unknown (reported). */
static int level_bound(const char *vhost, const char *queue)
{
    return bound(vhost, "hg.levels", queue);
}

/* Messages in queue of vhost (list_queues' messages); -1 unknown. */
static long queue_messages(const char *vhost, const char *queue)
{
    return queue_column(vhost, queue, "messages");
}

/* A level queue whose binding an operator deleted: a send to it fails naming the exchange and level (RabbitMQ
 * would confirm it and drop it without mandatory), nothing lands anywhere; the next send of the same client
 * binds the topology again and is delivered. A fresh client is used for the failing send: a client's first
 * connection binds nothing when hg.probe exists, so restarting clients repairs nothing. */
static void test_unbound_level_fails_the_send(void)
{
    const int port = rabbit.nodes[0].amqp_port;
    char out[4096], uri[256], id[HG_ID_MAX] = "", sent[HG_ID_MAX] = "";
    hg_client_t *c, *fresh;
    hg_reply_t *r = NULL;
    hg_error_t err;
    hg_err_t e;

    TU_REQUIRE(guest_vhost("mandatory", out, sizeof out) == 0, "vhost mandatory for guest: %s", out);
    snprintf(uri, sizeof uri, "amqp://guest:guest@127.0.0.1:%d/mandatory", port);
    TU_REQUIRE(hg_client_open(uri, NULL, &c, &err) == HG_OK, "hg_client_open(%s): %s", uri, err.message);
    e = cmd(c, &r, 6, (const char *const[]){ "GROUP", "CREATE", "mand-g", "mand-t", "FROM", "NOW" });
    hg_reply_free(r);
    TU_REQUIRE(e == HG_OK, "GROUP CREATE: %s", hg_client_errmsg(c));
    hg_client_close(c);
    TU_REQUIRE(level_bound("mandatory", "hg.level.2") == 1, "the sweep did not bind hg.level.2");

    TU_REQUIRE(unbind_level(port, "mandatory", 2) == 0, "unbinding hg.level.2");
    TU_REQUIRE(level_bound("mandatory", "hg.level.2") == 0, "hg.level.2 is still bound after queue.unbind");

    TU_REQUIRE(hg_client_open(uri, NULL, &fresh, &err) == HG_OK, "hg_client_open(%s): %s", uri, err.message);
    e = hg_send(fresh, "mand-t", NULL, "lost?", 5, hg_delay_level(2), id);
    TU_CHECK(e == HG_ERR_SERVER, "a LEVEL 2 send with hg.level.2 unbound: %d (%s), want HG_ERR_SERVER (id '%s')",
             (int)e, hg_client_errmsg(fresh), id);
    TU_CHECK(strstr(hg_client_errmsg(fresh), "no queue is bound for exchange hg.levels") != NULL &&
                 strstr(hg_client_errmsg(fresh), "hg-level 2") != NULL &&
                 strstr(hg_client_errmsg(fresh), "send again") != NULL,
             "the error does not name the exchange, level and repair: %s", hg_client_errmsg(fresh));
    TU_CHECK(queue_messages("mandatory", "hg.level.2") == 0 && queue_messages("mandatory", "hg.unrouted") == 0,
             "the refused send landed somewhere: hg.level.2 %ld, hg.unrouted %ld",
             queue_messages("mandatory", "hg.level.2"), queue_messages("mandatory", "hg.unrouted"));
    /* a batch: the routable message is sent, the other fails alone */
    hg_send_item_t items[2] = {
        { .topic = "mand-t", .payload = "now", .payload_len = 3, .delay = hg_delay_none() },
        { .topic = "mand-t", .payload = "later", .payload_len = 5, .delay = hg_delay_level(2) },
    };
    TU_REQUIRE(level_bound("mandatory", "hg.level.2") == 0, "something bound hg.level.2 before the batch");
    /* the failed send made this client rebind on its next publish: use another fresh one for the batch */
    hg_client_t *batcher;
    TU_REQUIRE(hg_client_open(uri, NULL, &batcher, &err) == HG_OK, "hg_client_open(%s): %s", uri, err.message);
    e = hg_send_many(batcher, items, 2, NULL);
    TU_CHECK(items[0].err == HG_OK && items[0].id[0] != '\0', "the routable message of the batch: %d (%s)",
             (int)items[0].err, items[0].error);
    TU_CHECK(items[1].err == HG_ERR_SERVER &&
                 strstr(items[1].error, "no queue is bound for exchange hg.levels") != NULL,
             "the unroutable message of the batch: %d (%s)", (int)items[1].err, items[1].error);
    hg_client_close(batcher);

    /* the repair: the client that saw the return binds everything before its next publish */
    e = hg_send(fresh, "mand-t", NULL, "delivered", 9, hg_delay_level(2), sent);
    TU_CHECK(e == HG_OK && sent[0] != '\0', "the send after the failure: %d (%s)", (int)e, hg_client_errmsg(fresh));
    TU_CHECK(level_bound("mandatory", "hg.level.2") == 1, "hg.level.2 is not bound again after the next send");
    hg_client_close(fresh);

    /* every confirmed message arrives: the batch's "now" at once, "delivered" after level 2 */
    TU_REQUIRE(hg_client_open(uri, NULL, &c, &err) == HG_OK, "hg_client_open(%s): %s", uri, err.message);
    int got_now = 0, got_later = 0, other = 0;
    for (int round = 0; round < 30 && !(got_now && got_later); round++) {
        e = cmd(c, &r, 7, (const char *const[]){ "PULL", "mand-g", "mand-t", "COUNT", "10", "BLOCK", "1000" });
        TU_CHECK(e == HG_OK, "PULL: %s", hg_client_errmsg(c));
        if (e != HG_OK)
            break;
        for (size_t i = 0; i < hg_reply_count(r); i++) {
            const char *mid = hg_reply_str(hg_reply_element(hg_reply_element(r, i), 0), NULL);
            if (strcmp(mid, items[0].id) == 0)
                got_now++;
            else if (strcmp(mid, sent) == 0)
                got_later++;
            else
                other++;
            TU_CHECK(int_cmd(c, 3, (const char *const[]){ "ACK", "mand-g", mid }, __LINE__) == 1, "ACK %s", mid);
        }
        hg_reply_free(r);
        r = NULL;
    }
    TU_CHECK(got_now == 1 && got_later == 1 && other == 0,
             "delivered: the batch's routable message %d time(s), the send after the repair %d, others %d "
             "(want 1, 1, 0)",
             got_now, got_later, other);
    hg_client_close(c);
}

/* A client of uri with opts.user / opts.password; PING's outcome, its
 * message in why. */
static hg_err_t ping_as(const char *uri, const char *user, const char *password, char *why, size_t whylen)
{
    hg_client_opts_t o;
    hg_client_t *c = NULL;
    hg_error_t err;
    hg_reply_t *r = NULL;
    hg_err_t e;

    hg_client_opts_init(&o);
    o.user = user;
    o.password = password;
    o.reconnect = 0;
    e = hg_client_open(uri, &o, &c, &err);
    if (e != HG_OK) {
        snprintf(why, whylen, "%s", err.message);
        return e;
    }
    e = hg_client_command(c, 1, (const char *const[]){ "PING" }, NULL, &r);
    snprintf(why, whylen, "%s", e == HG_OK ? "" : hg_client_errmsg(c));
    hg_reply_free(r);
    hg_client_close(c);
    return e;
}

static void test_login_from_options(void)
{
    char out[4096], uri[200], why[HG_ERRMSG_MAX];
    hg_err_t e;

    TU_REQUIRE(rq_ctl(&rabbit, 0, out, sizeof out, "add_vhost", "login", NULL) == 0, "add_vhost: %s", out);
    TU_REQUIRE(rq_ctl(&rabbit, 0, out, sizeof out, "add_user", "hourglass", "s3cret", NULL) == 0, "add_user: %s", out);
    TU_REQUIRE(
        rq_ctl(&rabbit, 0, out, sizeof out, "set_permissions", "-p", "login", "hourglass", ".*", ".*", ".*", NULL) == 0,
        "set_permissions: %s", out);
    /* guest may not use the vhost: a client that logs in as guest is refused */
    snprintf(uri, sizeof uri, "amqp://127.0.0.1:%d/login", rabbit.nodes[0].amqp_port);
    e = ping_as(uri, NULL, NULL, why, sizeof why);
    TU_CHECK(e != HG_OK, "guest on vhost login: PING answered, want a refusal");
    e = ping_as(uri, "hourglass", "s3cret", why, sizeof why);
    TU_CHECK(e == HG_OK, "opts.user/password on %s: %d: %s", uri, (int)e, why);
    /* the options win over the URI's user:pass@ */
    snprintf(uri, sizeof uri, "amqp://guest:guest@127.0.0.1:%d/login", rabbit.nodes[0].amqp_port);
    e = ping_as(uri, "hourglass", "s3cret", why, sizeof why);
    TU_CHECK(e == HG_OK, "opts over guest:guest@: %d: %s", (int)e, why);
    /* a password alone goes with the URI's user */
    snprintf(uri, sizeof uri, "amqp://hourglass:wrong@127.0.0.1:%d/login", rabbit.nodes[0].amqp_port);
    e = ping_as(uri, NULL, "s3cret", why, sizeof why);
    TU_CHECK(e == HG_OK, "opts.password with hourglass:wrong@: %d: %s", (int)e, why);
    /* a wrong password: refused naming the user */
    snprintf(uri, sizeof uri, "amqp://127.0.0.1:%d/login", rabbit.nodes[0].amqp_port);
    e = ping_as(uri, "hourglass", "nope", why, sizeof why);
    TU_CHECK(e == HG_ERR_AUTH && strstr(why, "'hourglass'") != NULL, "wrong password: %d: %s", (int)e, why);
    /* a user and no password anywhere: refused at open */
    e = ping_as(uri, "hourglass", NULL, why, sizeof why);
    TU_CHECK(e == HG_ERR_ARG && strstr(why, "no password given for user 'hourglass'") != NULL,
             "user without password: %d: %s", (int)e, why);
    e = ping_as(uri, "", "s3cret", why, sizeof why);
    TU_CHECK(e == HG_ERR_ARG && strstr(why, "user is empty") != NULL, "empty user: %d: %s", (int)e, why);
    /* the URI's user@ without ":pass" takes opts.password (a daemon's password-file), never amqp's
     * default "guest"; with no password anywhere it is refused at open, naming the user and no option
     * of any program (the library does not know its caller: each program adds its own hint) */
    snprintf(uri, sizeof uri, "amqp://hourglass@127.0.0.1:%d/login", rabbit.nodes[0].amqp_port);
    e = ping_as(uri, NULL, "s3cret", why, sizeof why);
    TU_CHECK(e == HG_OK, "user@ in the URI with opts.password: %d: %s", (int)e, why);
    e = ping_as(uri, NULL, NULL, why, sizeof why);
    TU_CHECK(e == HG_ERR_ARG && strstr(why, "no password given for user 'hourglass'") != NULL,
             "user@ with no password anywhere: %d: %s", (int)e, why);
    TU_CHECK(strstr(why, "password-file") == NULL && strstr(why, "opts.") == NULL && strstr(why, "--") == NULL,
             "the library's message names a program's option: %s", why);
}

/* The node's log lines that close a connection of vhost: *polite those
 * closed with the handshake, *abrupt those that end in a reason on the next
 * line ("client unexpectedly closed TCP connection"). */
static void closes_logged(const char *vhost, int *polite, int *abrupt)
{
    char path[800], line[2048], want[300];
    FILE *f;

    *polite = *abrupt = 0;
    snprintf(path, sizeof path, "%s/log/%s.log", rabbit.nodes[0].dir, rabbit.nodes[0].name);
    snprintf(want, sizeof want, "vhost: '%s'", vhost);
    f = fopen(path, "r");
    if (f == NULL)
        return;
    while (fgets(line, sizeof line, f) != NULL) {
        size_t n = strcspn(line, "\r\n");
        if (strstr(line, "closing AMQP connection") == NULL || strstr(line, want) == NULL)
            continue;
        if (n > 0 && line[n - 1] == ':')
            (*abrupt)++;
        else
            (*polite)++;
    }
    fclose(f);
}

static int three_closes_logged(void *ctx)
{
    int polite, abrupt;
    (void)ctx;
    closes_logged("politeclose", &polite, &abrupt);
    return polite + abrupt >= 3;
}

static void test_clean_close_is_polite(void)
{
    char out[4096], uri[200];
    hg_reply_t *r = NULL;
    int polite = 0, abrupt = 0;

    TU_REQUIRE(guest_vhost("politeclose", out, sizeof out) == 0, "vhost politeclose for guest: %s", out);
    snprintf(uri, sizeof uri, "amqp://guest:guest@127.0.0.1:%d/politeclose", rabbit.nodes[0].amqp_port);
    for (int i = 0; i < 3; i++) {
        hg_client_t *c = NULL;
        hg_error_t err;
        TU_REQUIRE(hg_client_open(uri, NULL, &c, &err) == HG_OK, "open %s: %s", uri, err.message);
        if (i < 2) { /* a plain client */
            TU_CHECK(cmd(c, &r, 1, (const char *const[]){ "PING" }) == HG_OK, "PING: %s", hg_client_errmsg(c));
        } else { /* a consumer, with a delivery read ahead */
            hg_err_t e = cmd(c, &r, 6, (const char *const[]){ "GROUP", "CREATE", "close-g", "close-t", "FROM", "NOW" });
            TU_CHECK(e == HG_OK, "GROUP CREATE: %s", hg_client_errmsg(c));
            hg_reply_free(r);
            for (int k = 0; k < 3; k++)
                TU_CHECK(hg_send(c, "close-t", NULL, "x", 1, hg_delay_none(), NULL) == HG_OK, "send: %s",
                         hg_client_errmsg(c));
            e = cmd(c, &r, 5, (const char *const[]){ "PULL", "close-g", "close-t", "BLOCK", "5000" });
            TU_CHECK(e == HG_OK && hg_reply_count(r) == 1, "PULL: %s", hg_client_errmsg(c));
        }
        hg_reply_free(r);
        r = NULL;
        hg_client_close(c);
    }
    /* the node logs a close when it has handled it: poll, generously */
    tu_poll_until(three_closes_logged, NULL, 30000, 100);
    closes_logged("politeclose", &polite, &abrupt);
    TU_CHECK(polite == 3 && abrupt == 0,
             "closes logged for vhost politeclose: %d with the handshake, %d abrupt; want 3, 0", polite, abrupt);
}

/* ------------------------------------------------------------------------
 * A TCP relay to the node: a "host" of the URI that can be cut (its
 * listener and every connection closed at once), as a node killed -9.
 * ------------------------------------------------------------------------ */

#define RELAY_PAIRS 16

typedef struct relay {
    int listen_fd, port, target_port;
    int stop_pipe[2];
    int pairs[RELAY_PAIRS][2]; /* client side, node side; -1 unused */
    pthread_t thread;
} relay_t;

static void relay_close_pair(relay_t *r, int i)
{
    close(r->pairs[i][0]);
    close(r->pairs[i][1]);
    r->pairs[i][0] = r->pairs[i][1] = -1;
}

static void *relay_main(void *arg)
{
    relay_t *r = arg;
    for (;;) {
        struct pollfd p[2 + 2 * RELAY_PAIRS];
        int n = 0;
        p[n++] = (struct pollfd){ r->stop_pipe[0], POLLIN, 0 };
        p[n++] = (struct pollfd){ r->listen_fd, POLLIN, 0 };
        for (int i = 0; i < RELAY_PAIRS; i++)
            for (int k = 0; k < 2; k++)
                p[n++] = (struct pollfd){ r->pairs[i][k], POLLIN, 0 }; /* -1: ignored by poll */
        if (poll(p, (nfds_t)n, -1) < 0)
            continue;
        if (p[0].revents != 0)
            break;
        if (p[1].revents & POLLIN) {
            int in = accept(r->listen_fd, NULL, NULL), out = in >= 0 ? tu_tcp_connect(r->target_port) : -1;
            int slot = -1;
            for (int i = 0; i < RELAY_PAIRS && slot < 0; i++)
                if (r->pairs[i][0] < 0)
                    slot = i;
            if (in < 0 || out < 0 || slot < 0) {
                if (in >= 0)
                    close(in);
                if (out >= 0)
                    close(out);
            } else {
                r->pairs[slot][0] = in;
                r->pairs[slot][1] = out;
            }
        }
        for (int i = 0; i < RELAY_PAIRS; i++)
            for (int k = 0; k < 2; k++) {
                char buf[16384];
                ssize_t got, put = 0;
                if (r->pairs[i][k] < 0 || p[2 + 2 * i + k].revents == 0)
                    continue;
                got = read(r->pairs[i][k], buf, sizeof buf);
                while (got > 0 && put < got) {
                    ssize_t w = write(r->pairs[i][1 - k], buf + put, (size_t)(got - put));
                    if (w <= 0)
                        break;
                    put += w;
                }
                if (got <= 0 || put < got)
                    relay_close_pair(r, i);
            }
    }
    for (int i = 0; i < RELAY_PAIRS; i++)
        if (r->pairs[i][0] >= 0)
            relay_close_pair(r, i);
    close(r->listen_fd);
    return NULL;
}

/* A relay on a free port of 127.0.0.1 to 127.0.0.1:target_port. 0, or -1. */
static int relay_start(relay_t *r, int target_port)
{
    struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = 0 };
    socklen_t alen = sizeof a;

    memset(r, 0, sizeof *r);
    for (int i = 0; i < RELAY_PAIRS; i++)
        r->pairs[i][0] = r->pairs[i][1] = -1;
    r->target_port = target_port;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    r->listen_fd = socket(AF_INET, SOCK_STREAM, 0);
    if (r->listen_fd < 0 || bind(r->listen_fd, (struct sockaddr *)&a, sizeof a) != 0 || listen(r->listen_fd, 16) != 0 ||
        getsockname(r->listen_fd, (struct sockaddr *)&a, &alen) != 0 || pipe(r->stop_pipe) != 0)
        return -1;
    r->port = ntohs(a.sin_port);
    return pthread_create(&r->thread, NULL, relay_main, r) == 0 ? 0 : -1;
}

/* Cut the relay: nothing listens on its port any more, every connection
 * through it is closed. */
static void relay_cut(relay_t *r)
{
    ssize_t w = write(r->stop_pipe[1], "x", 1);
    (void)w;
    pthread_join(r->thread, NULL);
    close(r->stop_pipe[0]);
    close(r->stop_pipe[1]);
}

/* ------------------------------------------------------------------------
 * address
 * ------------------------------------------------------------------------ */

typedef struct log_lines {
    pthread_mutex_t lock;
    char text[32768];
    size_t len;
} log_lines_t;

static void collect_log(int level, const char *message, void *arg)
{
    log_lines_t *l = arg;
    (void)level;
    pthread_mutex_lock(&l->lock);
    int n = snprintf(l->text + l->len, sizeof l->text - l->len, "%s\n", message);
    if (n > 0 && (size_t)n < sizeof l->text - l->len)
        l->len += (size_t)n;
    pthread_mutex_unlock(&l->lock);
}

typedef struct log_wait {
    log_lines_t *lines;
    const char *want;
} log_wait_t;

static int log_has(void *arg)
{
    log_wait_t *w = arg;
    pthread_mutex_lock(&w->lines->lock);
    int found = strstr(w->lines->text, w->want) != NULL;
    pthread_mutex_unlock(&w->lines->lock);
    return found;
}

static hg_outcome_t address_handler(const hg_message_t *m, char *reason, size_t rlen, void *arg)
{
    (void)m, (void)reason, (void)rlen, (void)arg;
    return HG_DONE;
}

static void *address_consumer_run(void *arg)
{
    (void)hg_consumer_run(arg);
    return NULL;
}

/* A consumer of uri with workers workers, logging into *lines. */
static hg_consumer_t *address_consumer(const char *uri, int workers, log_lines_t *lines, pthread_t *thread)
{
    hg_consumer_opts_t o;
    hg_consumer_t *c = NULL;
    hg_error_t err;

    hg_consumer_opts_init(&o);
    o.uri = uri;
    o.group = "addr-g";
    o.topic = "addr-t";
    o.workers = workers;
    o.block_ms = 200;
    o.handler = address_handler;
    o.log = collect_log;
    o.log_arg = lines;
    TU_REQUIRE(hg_consumer_new(&o, &c, &err) == HG_OK, "hg_consumer_new(%s): %s", uri, err.message);
    TU_REQUIRE(pthread_create(thread, NULL, address_consumer_run, c) == 0, "start the consumer's thread");
    return c;
}

static void test_address_names_the_live_node(void)
{
    const int live = rabbit.nodes[0].amqp_port, dead = tu_free_port();
    char uri[300], want[200], live_addr[64], dead_addr[64];
    hg_client_t *c = NULL;
    hg_reply_t *r = NULL;
    hg_error_t err;
    hg_err_t e = HG_ERR_IO;
    relay_t relay;

    TU_REQUIRE(dead > 0, "a free port");
    snprintf(live_addr, sizeof live_addr, "127.0.0.1:%d", live);
    snprintf(dead_addr, sizeof dead_addr, "127.0.0.1:%d", dead);

    /* the first host is down: the client is on the second, and says so */
    snprintf(uri, sizeof uri, "amqp://guest:guest@%s,%s/", dead_addr, live_addr);
    TU_REQUIRE(hg_client_open(uri, NULL, &c, &err) == HG_OK, "hg_client_open(%s): %s", uri, err.message);
    TU_CHECK(strcmp(hg_client_address(c), live_addr) == 0, "hg_client_address on %s: %s, want %s (the live node)", uri,
             hg_client_address(c), live_addr);
    e = cmd(c, &r, 6, (const char *const[]){ "GROUP", "CREATE", "addr-g", "addr-t", "FROM", "NOW" });
    TU_CHECK(e == HG_OK, "GROUP CREATE addr-g: %s", hg_client_errmsg(c));
    hg_reply_free(r);
    hg_client_close(c);
    c = NULL;

    /* the same for each consumer worker; the start-up line names every host */
    {
        log_lines_t lines = { .lock = PTHREAD_MUTEX_INITIALIZER };
        pthread_t thread;
        hg_consumer_t *con = address_consumer(uri, 2, &lines, &thread);
        char start[300];
        snprintf(start, sizeof start, "at %s,%s", dead_addr, live_addr);
        for (int i = 0; i < 2; i++) {
            snprintf(want, sizeof want, "worker %d: connected to %s\n", i, live_addr);
            TU_CHECK(tu_poll_until(log_has, &(log_wait_t){ &lines, want }, 60000, 20) == 0,
                     "the consumer never logged \"%s\"; its log:\n%s", want, lines.text);
        }
        TU_CHECK(tu_poll_until(log_has, &(log_wait_t){ &lines, start }, 60000, 20) == 0,
                 "the start-up line does not name every host (\"%s\"); the log:\n%s", start, lines.text);
        hg_consumer_stop(con);
        pthread_join(thread, NULL);
        snprintf(want, sizeof want, "connected to %s", dead_addr);
        TU_CHECK(strstr(lines.text, want) == NULL, "the log names the dead node as connected:\n%s", lines.text);
        hg_consumer_free(con);
    }

    /* connected through the first host, which then dies: the client fails
     * over to the second and names it */
    TU_REQUIRE(relay_start(&relay, live) == 0, "start a TCP relay to the node");
    snprintf(uri, sizeof uri, "amqp://guest:guest@127.0.0.1:%d,%s/", relay.port, live_addr);
    snprintf(want, sizeof want, "127.0.0.1:%d", relay.port);
    TU_REQUIRE(hg_client_open(uri, NULL, &c, &err) == HG_OK, "hg_client_open(%s): %s", uri, err.message);
    TU_CHECK(strcmp(hg_client_address(c), want) == 0, "hg_client_address through the relay: %s, want %s",
             hg_client_address(c), want);
    relay_cut(&relay);
    /* PING is answered without the wire on amqp://: a command RabbitMQ
     * answers finds the connection lost, the next reconnects */
    e = HG_ERR_IO;
    for (int i = 0; i < 3 && e != HG_OK; i++) {
        e = cmd(c, &r, 3, (const char *const[]){ "DLQ", "LEN", "addr-g" });
        hg_reply_free(r);
        r = NULL;
    }
    TU_CHECK(e == HG_OK, "DLQ LEN after the first host died: %s", hg_client_errmsg(c));
    TU_CHECK(strcmp(hg_client_address(c), live_addr) == 0,
             "hg_client_address after the failover: %s, want %s (the live node)", hg_client_address(c), live_addr);
    hg_client_close(c);

    /* the consumer: "reconnected to" names the node it fails over to */
    {
        log_lines_t lines = { .lock = PTHREAD_MUTEX_INITIALIZER };
        pthread_t thread;
        hg_consumer_t *con;
        TU_REQUIRE(relay_start(&relay, live) == 0, "start a TCP relay to the node");
        snprintf(uri, sizeof uri, "amqp://guest:guest@127.0.0.1:%d,%s/", relay.port, live_addr);
        con = address_consumer(uri, 1, &lines, &thread);
        snprintf(want, sizeof want, "worker 0: connected to 127.0.0.1:%d\n", relay.port);
        TU_CHECK(tu_poll_until(log_has, &(log_wait_t){ &lines, want }, 60000, 20) == 0,
                 "the consumer never logged \"%s\"; its log:\n%s", want, lines.text);
        relay_cut(&relay);
        snprintf(want, sizeof want, "worker 0: reconnected to %s\n", live_addr);
        TU_CHECK(tu_poll_until(log_has, &(log_wait_t){ &lines, want }, 60000, 20) == 0,
                 "the consumer never logged \"%s\" after the first host died; its log:\n%s", want, lines.text);
        hg_consumer_stop(con);
        pthread_join(thread, NULL);
        hg_consumer_free(con);
    }
}

/*
 * amqps:// to a host that drops SYNs: a stop cuts the TCP connect. A
 * listening socket with a backlog of 0 whose accept queue is full (one
 * connection nobody accepts) drops every later SYN, as a blackholed address
 * does; the client's TCP connect then waits in SYN_SENT. librabbitmq makes
 * amqps://'s connect in one call that takes no socket of ours, so before
 * 2026-12-05 a stop waited for the connect timeout there.
 */
typedef struct syn_open {
    char uri[120];
    int stop_fd;
    hg_err_t result;
    char message[HG_ERRMSG_MAX];
    int done;
} syn_open_t;

static void *syn_open_main(void *arg)
{
    syn_open_t *s = arg;
    hg_client_opts_t o;
    hg_client_t *c = NULL;
    hg_error_t err;

    hg_client_opts_init(&o);
    o.connect_timeout_ms = 20000;
    o.reconnect = 0;
    o.has_stop_fd = 1;
    o.stop_fd = s->stop_fd;
    s->result = hg_client_open(s->uri, &o, &c, &err);
    snprintf(s->message, sizeof(s->message), "%s", s->result == HG_OK ? "" : err.message);
    if (c != NULL)
        hg_client_close(c);
    __atomic_store_n(&s->done, 1, __ATOMIC_RELEASE);
    return NULL;
}

static int syn_open_done(void *arg)
{
    return __atomic_load_n(&((syn_open_t *)arg)->done, __ATOMIC_ACQUIRE);
}

/* 1 when a socket of this host waits in SYN_SENT for 127.0.0.1:port. */
static int syn_sent_to(void *arg)
{
    char line[512], want[32];
    FILE *f = fopen("/proc/net/tcp", "r");
    int found = 0;

    if (f == NULL)
        return 0;
    snprintf(want, sizeof(want), "0100007F:%04X 02", *(int *)arg);
    while (!found && fgets(line, sizeof(line), f) != NULL)
        found = strstr(line, want) != NULL;
    fclose(f);
    return found;
}

static void test_amqps_connect_stoppable(void)
{
    struct sockaddr_in a = { 0 };
    socklen_t alen = sizeof(a);
    int lfd = socket(AF_INET, SOCK_STREAM, 0), filler = -1, pfd[2], port;
    syn_open_t *s = calloc(1, sizeof(*s));
    uint64_t stopped_at, took;
    pthread_t th;
    ssize_t w;

    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    TU_REQUIRE(s != NULL && lfd >= 0 && bind(lfd, (struct sockaddr *)&a, sizeof(a)) == 0 && listen(lfd, 0) == 0 &&
                   getsockname(lfd, (struct sockaddr *)&a, &alen) == 0 && pipe(pfd) == 0,
               "a listening socket with a backlog of 0");
    port = ntohs(a.sin_port);
    filler = tu_tcp_connect(port);
    TU_REQUIRE(filler >= 0, "the connection that fills the accept queue of port %d: %s", port, strerror(errno));
    snprintf(s->uri, sizeof(s->uri), "amqps://guest:guest@127.0.0.1:%d/", port);
    s->stop_fd = pfd[0];
    TU_REQUIRE(pthread_create(&th, NULL, syn_open_main, s) == 0, "pthread_create");
    TU_CHECK(tu_poll_until(syn_sent_to, &port, 30000, 5) == 0, "no connect to 127.0.0.1:%d waits in SYN_SENT", port);
    stopped_at = tu_now_mono_ms();
    w = write(pfd[1], "x", 1);
    (void)w;
    TU_CHECK(tu_poll_until(syn_open_done, s, 60000, 5) == 0, "the open did not end after the stop");
    took = tu_now_mono_ms() - stopped_at;
    pthread_join(th, NULL);
    printf("\n    amqps:// connect to a host that drops SYNs, stop fd readable: %s %" PRIu64 " ms after the stop: %s",
           hg_strerror(s->result), took, s->message);
    TU_CHECK(s->result == HG_ERR_STOPPED && strstr(s->message, "stopped while connecting") != NULL,
             "the open ended with %s (%s), want HG_ERR_STOPPED \"stopped while connecting ...\"",
             hg_strerror(s->result), s->message);
    TU_CHECK(took < 2000, "the open ended %" PRIu64 " ms after the stop (connect timeout 20000 ms), want < 2000 ms",
             took);
    close(filler);
    close(lfd);
    close(pfd[0]);
    close(pfd[1]);
    free(s);
}

/*
 * amqps:// offers only base/tls_policy.h's TLS 1.2 cipher suites, as
 * hourglass+tls:// does. A listener of the test's own reads the client's
 * ClientHello and closes (so the open fails); its cipher suite list, TLS
 * 1.3's (0x13xx, set apart by OpenSSL) and the renegotiation SCSV (0x00ff)
 * left out, must be the policy's. Before 2026-12-05 librabbitmq's SSL_CTX
 * kept OpenSSL's default list: CBC suites with SHA-1 MACs and static RSA
 * key exchange (AES128-SHA, 0x002f) among them.
 */
typedef struct hello_grab {
    int lfd;
    unsigned char buf[16384];
    size_t len;
} hello_grab_t;

/* Accept connections until one sends bytes (the client's first connect is
 * a probe that closes before its first byte: lib/rmq_conn.c socket_open),
 * and read its first TLS record into g->buf. */
static void *hello_grab_main(void *arg)
{
    hello_grab_t *g = arg;

    for (int conns = 0; conns < 4 && g->len == 0; conns++) {
        struct pollfd p = { g->lfd, POLLIN, 0 };
        int fd;
        if (poll(&p, 1, 20000) != 1 || (fd = accept(g->lfd, NULL, NULL)) < 0)
            return NULL;
        p.fd = fd;
        /* the record header says how long the ClientHello is */
        while (g->len < sizeof(g->buf) && (g->len < 5 || g->len < 5 + (size_t)(g->buf[3] << 8 | g->buf[4])) &&
               poll(&p, 1, 20000) == 1) {
            ssize_t n = read(fd, g->buf + g->len, sizeof(g->buf) - g->len);
            if (n <= 0)
                break;
            g->len += (size_t)n;
        }
        close(fd);
    }
    return NULL;
}

static void test_amqps_offers_policy_ciphers(void)
{
    /* base/tls_policy.h's HG_TLS12_CIPHERS by their IANA numbers */
    static const struct {
        unsigned id;
        const char *name;
    } policy[] = {
        { 0xc02b, "ECDHE-ECDSA-AES128-GCM-SHA256" }, { 0xc02f, "ECDHE-RSA-AES128-GCM-SHA256" },
        { 0xc02c, "ECDHE-ECDSA-AES256-GCM-SHA384" }, { 0xc030, "ECDHE-RSA-AES256-GCM-SHA384" },
        { 0xcca9, "ECDHE-ECDSA-CHACHA20-POLY1305" }, { 0xcca8, "ECDHE-RSA-CHACHA20-POLY1305" },
    };
    struct sockaddr_in a = { 0 };
    socklen_t alen = sizeof(a);
    hello_grab_t *g = calloc(1, sizeof(*g));
    char uri[120], outside[512] = "";
    hg_client_opts_t o;
    hg_client_t *c = NULL;
    hg_error_t err;
    size_t at, suites_len, used = 0;
    int offered = 0, outside_n = 0;
    pthread_t th;

    TU_REQUIRE(g != NULL, "calloc");
    g->lfd = socket(AF_INET, SOCK_STREAM, 0);
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    TU_REQUIRE(g->lfd >= 0 && bind(g->lfd, (struct sockaddr *)&a, sizeof(a)) == 0 && listen(g->lfd, 4) == 0 &&
                   getsockname(g->lfd, (struct sockaddr *)&a, &alen) == 0,
               "a listening socket on 127.0.0.1");
    TU_REQUIRE(pthread_create(&th, NULL, hello_grab_main, g) == 0, "pthread_create");
    snprintf(uri, sizeof(uri), "amqps://guest:guest@127.0.0.1:%d/", ntohs(a.sin_port));
    hg_client_opts_init(&o);
    o.connect_timeout_ms = 5000;
    o.reconnect = 0;
    TU_CHECK(hg_client_open(uri, &o, &c, &err) != HG_OK, "the open of %s succeeded on a listener that closes", uri);
    if (c != NULL)
        hg_client_close(c);
    pthread_join(th, NULL);
    close(g->lfd);
    /* record header (5), handshake header (4), version (2), random (32), session id (1 + n), suites (2 + n) */
    TU_REQUIRE(g->len > 44 && g->buf[0] == 0x16 && g->buf[5] == 0x01, "no ClientHello read (%zu bytes)", g->len);
    at = 44 + g->buf[43];
    TU_REQUIRE(at + 2 <= g->len, "a ClientHello cut short (%zu bytes)", g->len);
    suites_len = (size_t)(g->buf[at] << 8 | g->buf[at + 1]);
    TU_REQUIRE(at + 2 + suites_len <= g->len && suites_len % 2 == 0, "a ClientHello cut short (%zu bytes)", g->len);
    for (size_t i = at + 2; i < at + 2 + suites_len; i += 2) {
        unsigned id = (unsigned)(g->buf[i] << 8 | g->buf[i + 1]);
        int known = 0;
        if ((id >> 8) == 0x13 || id == 0x00ff)
            continue;
        for (size_t k = 0; k < sizeof(policy) / sizeof(policy[0]); k++)
            known |= policy[k].id == id;
        offered += known;
        if (!known && outside_n++ < 12 && used + 8 < sizeof(outside))
            used += (size_t)snprintf(outside + used, sizeof(outside) - used, " 0x%04x", id);
    }
    printf("\n    amqps:// ClientHello: %zu suites offered (TLS 1.3's and the SCSV too), %d of the policy, %d outside "
           "it:%s",
           suites_len / 2, offered, outside_n, outside_n ? outside : " none");
    TU_CHECK(outside_n == 0, "amqps:// offers %d TLS 1.2 cipher suites outside base/tls_policy.h:%s", outside_n,
             outside);
    TU_CHECK(offered == (int)(sizeof(policy) / sizeof(policy[0])), "amqps:// offers %d of the policy's %zu suites",
             offered, sizeof(policy) / sizeof(policy[0]));
    free(g);
}

static atomic_int hops_delivered;

static hg_outcome_t count_hop_handler(const hg_message_t *m, char *reason, size_t rlen, void *arg)
{
    (void)m, (void)reason, (void)rlen, (void)arg;
    atomic_fetch_add(&hops_delivered, 1);
    return HG_DONE;
}

static int hop_delivered(void *arg)
{
    (void)arg;
    return atomic_load(&hops_delivered) > 0;
}

/* The hop router's publish of a chain's next hop to a level queue unbound by hand: it comes back, the hop goes back
 * to hg.hops (never acknowledged with its next hop lost), the router's next round binds the topology again, and the
 * message is delivered, late by the router's backoff only. */
static void test_router_rebinds_unbound_level(void)
{
    const int port = rabbit.nodes[0].amqp_port;
    char out[4096], uri[256], id[HG_ID_MAX] = "";
    hg_consumer_opts_t o;
    hg_consumer_t *consumer = NULL;
    log_lines_t lines = { .lock = PTHREAD_MUTEX_INITIALIZER };
    log_wait_t wait = { &lines, "no queue is bound for exchange hg.levels" };
    pthread_t thread;
    hg_client_t *c;
    hg_reply_t *r = NULL;
    hg_error_t err;
    hg_err_t e;

    TU_REQUIRE(guest_vhost("mandhop", out, sizeof out) == 0, "vhost mandhop for guest: %s", out);
    snprintf(uri, sizeof uri, "amqp://guest:guest@127.0.0.1:%d/mandhop", port);
    TU_REQUIRE(hg_client_open(uri, NULL, &c, &err) == HG_OK, "hg_client_open(%s): %s", uri, err.message);
    e = cmd(c, &r, 6, (const char *const[]){ "GROUP", "CREATE", "hop-g", "hop-t", "FROM", "NOW" });
    hg_reply_free(r);
    TU_REQUIRE(e == HG_OK, "GROUP CREATE: %s", hg_client_errmsg(c));
    /* 6 s = 5 s (level 2, routing key hop) + 1 s (level 1, by the router) */
    e = hg_send(c, "hop-t", NULL, "chained", 7, hg_delay_ms(6000), id);
    TU_REQUIRE(e == HG_OK, "DELAY 6000ms: %s", hg_client_errmsg(c));
    hg_client_close(c);
    TU_REQUIRE(unbind_level(port, "mandhop", 1) == 0, "unbinding hg.level.1");
    TU_REQUIRE(level_bound("mandhop", "hg.level.1") == 0, "hg.level.1 is still bound after queue.unbind");

    atomic_store(&hops_delivered, 0);
    hg_consumer_opts_init(&o);
    o.uri = uri;
    o.group = "hop-g";
    o.topic = "hop-t";
    o.workers = 1;
    o.block_ms = 200;
    o.handler = count_hop_handler;
    o.log = collect_log;
    o.log_arg = &lines;
    TU_REQUIRE(hg_consumer_new(&o, &consumer, &err) == HG_OK, "hg_consumer_new(%s): %s", uri, err.message);
    TU_REQUIRE(pthread_create(&thread, NULL, address_consumer_run, consumer) == 0, "start the consumer's thread");
    TU_CHECK(tu_poll_until(log_has, &wait, 30000, 50) == 0, "the router logged no unroutable hop within 30 s: %s",
             lines.text);
    TU_CHECK(tu_poll_until(hop_delivered, NULL, 60000, 50) == 0, "the chained message %s was not delivered within 60 s",
             id);
    hg_consumer_stop(consumer);
    pthread_join(thread, NULL);
    hg_consumer_free(consumer);
    TU_CHECK(atomic_load(&hops_delivered) == 1, "delivered %d time(s), want 1", atomic_load(&hops_delivered));
    TU_CHECK(level_bound("mandhop", "hg.level.1") == 1, "the router did not bind hg.level.1 again");
    TU_CHECK(queue_messages("mandhop", "hg.hops") == 0 && queue_messages("mandhop", "hg.unrouted") == 0,
             "left behind: hg.hops %ld, hg.unrouted %ld", queue_messages("mandhop", "hg.hops"),
             queue_messages("mandhop", "hg.unrouted"));
}

/* The remainder queues' names (docs/rabbitmq.md, "Remainders in milliseconds"): queue hg.remainder.<b>, bound to the
 * headers exchange hg.remainder.bit.<b> by header hg-rem-<b> = "1". */
#define REM_QUEUE    "hg.remainder.%d"
#define REM_EXCHANGE "hg.remainder.bit.%d"
#define REM_HEADER   "hg-rem-%d"

/* Remove remainder queue <bit>'s binding on vhost. 0, or -1 (reported). */
static int unbind_remainder(int port, const char *vhost, int bit)
{
    char queue[32], exchange[32], header[32];
    snprintf(queue, sizeof queue, REM_QUEUE, bit);
    snprintf(exchange, sizeof exchange, REM_EXCHANGE, bit);
    snprintf(header, sizeof header, REM_HEADER, bit);
    return unbind_headers(port, vhost, queue, exchange, header, "1");
}

static int remainder_bound(const char *vhost, int bit)
{
    char queue[32], exchange[32];
    snprintf(queue, sizeof queue, REM_QUEUE, bit);
    snprintf(exchange, sizeof exchange, REM_EXCHANGE, bit);
    return bound(vhost, exchange, queue);
}

/* What PULLs of group saw of the n messages ids[] for up to rounds × 1 s (until each came, then one more round
 * for a second copy): counts[i] deliveries of ids[i], late_ms[i] its first one's wall-clock time at the PULL's
 * return minus its due_ms (negative: early); *others, deliveries of other ids (an id "" is a send that failed:
 * not waited for). Everything is ACKed. */
static void pull_ids(hg_client_t *c, const char *group, const char *topic, const char *const *ids, int n, int *counts,
                     int64_t *late_ms, int *others, int rounds)
{
    int extra = 1;

    *others = 0;
    for (int i = 0; i < n; i++)
        counts[i] = 0, late_ms[i] = 0;
    for (int round = 0; round < rounds; round++) {
        hg_reply_t *r = NULL;
        int all = 1;
        hg_err_t e = cmd(c, &r, 7, (const char *const[]){ "PULL", group, topic, "COUNT", "10", "BLOCK", "1000" });
        uint64_t now = tu_now_wall_ms();
        TU_CHECK(e == HG_OK, "PULL %s: %s", group, hg_client_errmsg(c));
        if (e != HG_OK)
            return;
        for (size_t k = 0; k < hg_reply_count(r); k++) {
            const hg_reply_t *m = hg_reply_element(r, k);
            const char *mid = hg_reply_str(hg_reply_element(m, 0), NULL);
            int64_t due = hg_reply_integer(hg_reply_element(m, 5));
            int i = 0;
            while (i < n && strcmp(ids[i], mid) != 0)
                i++;
            if (i == n)
                (*others)++;
            else if (counts[i]++ == 0)
                late_ms[i] = (int64_t)now - due;
            TU_CHECK(int_cmd(c, 3, (const char *const[]){ "ACK", group, mid }, __LINE__) == 1, "ACK %s", mid);
        }
        hg_reply_free(r);
        for (int i = 0; i < n; i++)
            all &= counts[i] > 0 || ids[i][0] == '\0'; /* "": a send that failed */
        if (all && extra-- == 0)
            return;
    }
}

/* A remainder queue's binding deleted by hand, on the publish's own path (the first bit of 500 ms = 256 + 128 + 64
 * + 32 + 16 + 4): the send of DELAY 1500ms fails naming the remainder exchange, never skipping that wait (with the
 * alternate-exchange chain of the hg.rem.* names it was confirmed, skipped the 256 ms queue and came 212..226 ms
 * early); the client's next send
 * binds the topology again and comes at or after its due, once. */
static void test_unbound_remainder_fails_the_send(void)
{
    const int port = rabbit.nodes[0].amqp_port;
    char out[4096], uri[256], first[HG_ID_MAX] = "", again[HG_ID_MAX] = "";
    const char *ids[2] = { first, again };
    int counts[2], others;
    int64_t late[2];
    hg_client_t *c, *fresh;
    hg_reply_t *r = NULL;
    hg_error_t err;
    hg_err_t e;

    TU_REQUIRE(guest_vhost("rempub", out, sizeof out) == 0, "vhost rempub for guest: %s", out);
    snprintf(uri, sizeof uri, "amqp://guest:guest@127.0.0.1:%d/rempub", port);
    TU_REQUIRE(hg_client_open(uri, NULL, &c, &err) == HG_OK, "hg_client_open(%s): %s", uri, err.message);
    e = cmd(c, &r, 6, (const char *const[]){ "GROUP", "CREATE", "rempub-g", "rempub-t", "FROM", "NOW" });
    hg_reply_free(r);
    TU_REQUIRE(e == HG_OK, "GROUP CREATE: %s", hg_client_errmsg(c));
    TU_REQUIRE(remainder_bound("rempub", 256) == 1, "the sweep did not bind the 256 ms remainder queue");
    TU_REQUIRE(unbind_remainder(port, "rempub", 256) == 0, "unbinding the 256 ms remainder queue");
    TU_REQUIRE(remainder_bound("rempub", 256) == 0, "the 256 ms remainder queue is still bound after queue.unbind");

    /* a fresh client: its first connection binds nothing (hg.probe exists) */
    TU_REQUIRE(hg_client_open(uri, NULL, &fresh, &err) == HG_OK, "hg_client_open(%s): %s", uri, err.message);
    e = hg_send(fresh, "rempub-t", NULL, "first", 5, hg_delay_ms(1500), first);
    TU_CHECK(e == HG_ERR_SERVER && first[0] == '\0',
             "DELAY 1500ms with the 256 ms remainder queue unbound: %d (%s), want HG_ERR_SERVER (id '%s')", (int)e,
             hg_client_errmsg(fresh), first);
    TU_CHECK(e == HG_OK ||
                 (strstr(hg_client_errmsg(fresh), "no queue is bound for exchange hg.remainder.bit.512") != NULL &&
                  strstr(hg_client_errmsg(fresh), "remainder 500 ms") != NULL &&
                  strstr(hg_client_errmsg(fresh), "send again") != NULL),
             "the error does not name the remainder exchange and the repair: %s", hg_client_errmsg(fresh));
    e = hg_send(fresh, "rempub-t", NULL, "again", 5, hg_delay_ms(1500), again);
    TU_CHECK(e == HG_OK && again[0] != '\0', "the send after the failure: %d (%s)", (int)e, hg_client_errmsg(fresh));
    TU_CHECK(remainder_bound("rempub", 256) == 1, "the 256 ms remainder queue is not bound again after the next send");
    hg_client_close(fresh);

    pull_ids(c, "rempub-g", "rempub-t", ids, 2, counts, late, &others, 30);
    printf("\n    DELAY 1500ms, 256 ms remainder queue unbound: first send %s%s, late by %" PRId64
           " ms (%d copies); the send after it late by %" PRId64 " ms (%d copies)",
           first[0] != '\0' ? "confirmed " : "refused", first, late[0], counts[0], late[1], counts[1]);
    for (int i = 0; i < 2; i++) {
        if (ids[i][0] == '\0')
            continue;
        TU_CHECK(counts[i] == 1, "message %s delivered %d time(s), want 1", ids[i], counts[i]);
        TU_CHECK(counts[i] == 0 || late[i] >= 0, "message %s delivered %" PRId64 " ms before its due", ids[i],
                 -late[i]);
    }
    TU_CHECK(others == 0, "%d other deliveries", others);
    hg_client_close(c);
}

/* A remainder queue's binding deleted by hand further down the chain (the second bit of 500 ms), where only
 * RabbitMQ's dead-lettering goes: the message waits (at-least-once dead-lettering holds what it cannot route)
 * instead of skipping that wait and coming 128 ms early; a send whose own path meets the missing binding (DELAY
 * 1128ms: its first bit is 128) fails, its client's next send binds the topology again, and both messages come
 * at or after their due, once each. */
static void test_unbound_remainder_holds_dead_letters(void)
{
    const int port = rabbit.nodes[0].amqp_port;
    char out[4096], uri[256], held[HG_ID_MAX] = "", fails[HG_ID_MAX] = "", repaired[HG_ID_MAX] = "";
    const char *ids[3] = { held, repaired, fails };
    int counts[3], others;
    int64_t late[3];
    hg_client_t *c, *fresh;
    hg_reply_t *r = NULL;
    hg_error_t err;
    hg_err_t e;

    TU_REQUIRE(guest_vhost("remdlx", out, sizeof out) == 0, "vhost remdlx for guest: %s", out);
    snprintf(uri, sizeof uri, "amqp://guest:guest@127.0.0.1:%d/remdlx", port);
    TU_REQUIRE(hg_client_open(uri, NULL, &c, &err) == HG_OK, "hg_client_open(%s): %s", uri, err.message);
    e = cmd(c, &r, 6, (const char *const[]){ "GROUP", "CREATE", "remdlx-g", "remdlx-t", "FROM", "NOW" });
    hg_reply_free(r);
    TU_REQUIRE(e == HG_OK, "GROUP CREATE: %s", hg_client_errmsg(c));
    TU_REQUIRE(unbind_remainder(port, "remdlx", 128) == 0, "unbinding the 128 ms remainder queue");
    TU_REQUIRE(remainder_bound("remdlx", 128) == 0, "the 128 ms remainder queue is still bound after queue.unbind");

    TU_REQUIRE(hg_client_open(uri, NULL, &fresh, &err) == HG_OK, "hg_client_open(%s): %s", uri, err.message);
    e = hg_send(fresh, "remdlx-t", NULL, "held", 4, hg_delay_ms(1500), held);
    TU_REQUIRE(e == HG_OK, "DELAY 1500ms (its path to the 256 ms queue is bound): %s", hg_client_errmsg(fresh));
    /* its due passes; it must not come (nor early) while the binding is missing */
    pull_ids(c, "remdlx-g", "remdlx-t", ids, 1, counts, late, &others, 4);
    printf("\n    DELAY 1500ms, 128 ms remainder queue unbound: before the repair %d copies", counts[0]);
    if (counts[0] > 0)
        printf(", %s by %" PRId64 " ms", late[0] < 0 ? "early" : "late", late[0] < 0 ? -late[0] : late[0]);
    TU_CHECK(counts[0] == 0, "delivered %d time(s) with a binding of its path missing, want held", counts[0]);
    TU_CHECK(counts[0] == 0 || late[0] >= 0, "delivered %" PRId64 " ms before its due", -late[0]);

    e = hg_send(fresh, "remdlx-t", NULL, "fails", 5, hg_delay_ms(1128), fails);
    TU_CHECK(e == HG_ERR_SERVER && fails[0] == '\0',
             "DELAY 1128ms with the 128 ms remainder queue unbound: %d (%s), want HG_ERR_SERVER (id '%s')", (int)e,
             hg_client_errmsg(fresh), fails);
    e = hg_send(fresh, "remdlx-t", NULL, "repaired", 8, hg_delay_ms(1128), repaired);
    TU_CHECK(e == HG_OK && repaired[0] != '\0', "the send after the failure: %d (%s)", (int)e, hg_client_errmsg(fresh));
    TU_CHECK(remainder_bound("remdlx", 128) == 1, "the 128 ms remainder queue is not bound again after the next send");
    hg_client_close(fresh);

    /* the held message moves on at RabbitMQ's next try (dead_letter_worker_publisher_confirm_timeout: 10 s here) */
    {
        int held_before = counts[0];
        int64_t early_before = late[0];
        pull_ids(c, "remdlx-g", "remdlx-t", ids, 3, counts, late, &others, 45);
        counts[0] += held_before;
        if (held_before > 0)
            late[0] = early_before;
    }
    printf("; after it: held message late by %" PRId64 " ms (%d copies), the repairing send late by %" PRId64
           " ms (%d copies)",
           late[0], counts[0], late[1], counts[1]);
    for (int i = 0; i < 3; i++) {
        if (ids[i][0] == '\0')
            continue;
        TU_CHECK(counts[i] == 1, "message %s delivered %d time(s), want 1", ids[i], counts[i]);
        TU_CHECK(counts[i] == 0 || late[i] >= 0, "message %s delivered %" PRId64 " ms before its due", ids[i],
                 -late[i]);
    }
    TU_CHECK(others == 0, "%d other deliveries", others);
    hg_client_close(c);
}

/* What nack_once_handler saw: its calls and the reconsume of each. */
typedef struct nack_seen {
    int first_fatal; /* the first delivery fails with HG_FAIL (NACK … DLQ), not HG_RETRY */
    /* when set, the first call deletes this queue of this vhost (after the
     * worker's PULL declared it), drop_rc its rabbitmqctl's exit status */
    const char *drop_vhost, *drop_queue;
    int drop_rc;
    atomic_int calls;
    atomic_int reconsume[4];
} nack_seen_t;

/* The first delivery fails (HG_RETRY: with retry.attempts 0, a NACK at
 * once; or HG_FAIL when seen->first_fatal); any later one is done. */
static hg_outcome_t nack_once_handler(const hg_message_t *m, char *reason, size_t rlen, void *arg)
{
    nack_seen_t *seen = arg;
    int n = atomic_fetch_add(&seen->calls, 1);

    if (n < 4)
        atomic_store(&seen->reconsume[n], (int)m->reconsume);
    if (n > 0)
        return HG_DONE;
    snprintf(reason, rlen, "first delivery fails");
    if (seen->drop_queue != NULL) {
        char out[4096];
        seen->drop_rc =
            rq_ctl(&rabbit, 0, out, sizeof out, "delete_queue", "-p", seen->drop_vhost, seen->drop_queue, NULL);
    }
    return seen->first_fatal ? HG_FAIL : HG_RETRY;
}

static int handled_twice(void *arg)
{
    return atomic_load(&((nack_seen_t *)arg)->calls) >= 2;
}

/* A consumer of group on topic (uri) with one worker running
 * nack_once_handler into seen, retry.attempts 0 (HG_RETRY: NACK at once,
 * one resend), its log into lines, on a thread of its own. */
static hg_consumer_t *start_nack_consumer(const char *uri, const char *group, const char *topic, nack_seen_t *seen,
                                          log_lines_t *lines, pthread_t *thread)
{
    hg_consumer_opts_t o;
    hg_consumer_t *consumer = NULL;
    hg_error_t err;

    hg_consumer_opts_init(&o);
    o.uri = uri;
    o.group = group;
    o.topic = topic;
    o.workers = 1;
    o.block_ms = 200;
    o.retry.attempts = 0;
    o.retry.base_ms = 100;
    o.handler = nack_once_handler;
    o.handler_arg = seen;
    o.log = collect_log;
    o.log_arg = lines;
    TU_REQUIRE(hg_consumer_new(&o, &consumer, &err) == HG_OK, "hg_consumer_new(%s): %s", uri, err.message);
    TU_REQUIRE(pthread_create(thread, NULL, address_consumer_run, consumer) == 0, "start the consumer's thread");
    return consumer;
}

/* A consumer worker's NACK whose retry comes back unrouted (the level it
 * goes to was unbound by hand): the NACK fails on a live connection, which
 * keeps the delivery held. The worker sends the NACK again after the retry
 * backoff; that NACK binds the topology first, its retry is routed, the
 * delivery settled, and the message comes again after level 3 with
 * reconsume 1. (Before, the failed NACK was only recorded: the delivery
 * stayed held by the worker's connection, never handed out again.) */
static void test_worker_resends_failed_nack(void)
{
    const int port = rabbit.nodes[0].amqp_port;
    char out[4096], uri[256];
    hg_consumer_t *consumer = NULL;
    log_lines_t lines = { .lock = PTHREAD_MUTEX_INITIALIZER };
    log_wait_t resent = { &lines, "failed: sending it again" };
    nack_seen_t seen;
    pthread_t thread;
    hg_client_t *c;
    hg_reply_t *r = NULL;
    hg_error_t err;
    hg_err_t e;

    memset(&seen, 0, sizeof seen);
    TU_REQUIRE(guest_vhost("nackback", out, sizeof out) == 0, "vhost nackback for guest: %s", out);
    snprintf(uri, sizeof uri, "amqp://guest:guest@127.0.0.1:%d/nackback?levels=100ms,200ms,300ms,400ms", port);
    TU_REQUIRE(hg_client_open(uri, NULL, &c, &err) == HG_OK, "hg_client_open(%s): %s", uri, err.message);
    e = cmd(c, &r, 6, (const char *const[]){ "GROUP", "CREATE", "nack-g", "nack-t", "FROM", "NOW" });
    hg_reply_free(r);
    TU_REQUIRE(e == HG_OK, "GROUP CREATE: %s", hg_client_errmsg(c));
    TU_REQUIRE(unbind_level(port, "nackback", 3) == 0, "unbinding hg.level.3");
    TU_REQUIRE(level_bound("nackback", "hg.level.3") == 0, "hg.level.3 is still bound after queue.unbind");

    consumer = start_nack_consumer(uri, "nack-g", "nack-t", &seen, &lines, &thread);
    e = hg_send(c, "nack-t", NULL, "fails once", 10, hg_delay_none(), NULL);
    TU_CHECK(e == HG_OK, "hg_send: %s", hg_client_errmsg(c));
    hg_client_close(c);

    TU_CHECK(tu_poll_until(log_has, &resent, 30000, 50) == 0, "the worker did not send its failed NACK again:\n%s",
             lines.text);
    TU_CHECK(tu_poll_until(handled_twice, &seen, 60000, 50) == 0,
             "the message was handled %d time(s) in 60 s, want 2 (the NACKed delivery still held?):\n%s",
             atomic_load(&seen.calls), lines.text);
    hg_consumer_stop(consumer);
    pthread_join(thread, NULL);
    printf("\n    handled %d times, reconsume %d then %d", atomic_load(&seen.calls), atomic_load(&seen.reconsume[0]),
           atomic_load(&seen.reconsume[1]));
    TU_CHECK(atomic_load(&seen.calls) == 2 && atomic_load(&seen.reconsume[0]) == 0 &&
                 atomic_load(&seen.reconsume[1]) == 1,
             "handled %d times with reconsume %d, %d: want twice, 0 then 1 (one failure counted)",
             atomic_load(&seen.calls), atomic_load(&seen.reconsume[0]), atomic_load(&seen.reconsume[1]));
    hg_consumer_free(consumer);
    TU_CHECK(level_bound("nackback", "hg.level.3") == 1, "the resent NACK did not bind hg.level.3 again");
    TU_CHECK(queue_messages("nackback", "hg.group.nack-g") == 0 && queue_messages("nackback", "hg.unrouted") == 0,
             "left behind: hg.group.nack-g %ld, hg.unrouted %ld", queue_messages("nackback", "hg.group.nack-g"),
             queue_messages("nackback", "hg.unrouted"));
}

/* Where refusal_probe publishes, and what it saw. */
typedef struct refusal_probe {
    int port;
    const char *vhost, *queue;
    int want_refused; /* 1: wait for a basic.nack; 0: for a basic.ack */
} refusal_probe_t;

/* Publish one message to probe's queue (default exchange, publisher
 * confirms) and whether its confirm is what probe wants: 1 yes, 0 no (or
 * no answer). A confirmed probe lies in the queue: use it on a level queue
 * of the test's own vhost. */
static int probe_confirm(void *arg)
{
    const refusal_probe_t *p = arg;
    amqp_connection_state_t st = amqp_new_connection();
    amqp_socket_t *sock = amqp_tcp_socket_new(st);
    amqp_frame_t f;
    struct timeval wait = { 5, 0 };
    int refused = -1;

    if (sock != NULL && amqp_socket_open(sock, "127.0.0.1", p->port) == AMQP_STATUS_OK &&
        amqp_login(st, p->vhost, 0, 131072, 0, AMQP_SASL_METHOD_PLAIN, "guest", "guest").reply_type ==
            AMQP_RESPONSE_NORMAL &&
        amqp_channel_open(st, 1) != NULL && amqp_confirm_select(st, 1) != NULL &&
        amqp_basic_publish(st, 1, amqp_empty_bytes, amqp_cstring_bytes(p->queue), 0, 0, NULL,
                           amqp_cstring_bytes("probe")) == AMQP_STATUS_OK) {
        while (refused < 0 && amqp_simple_wait_frame_noblock(st, &f, &wait) == AMQP_STATUS_OK)
            if (f.frame_type == AMQP_FRAME_METHOD && f.payload.method.id == AMQP_BASIC_NACK_METHOD)
                refused = 1;
            else if (f.frame_type == AMQP_FRAME_METHOD && f.payload.method.id == AMQP_BASIC_ACK_METHOD)
                refused = 0;
        amqp_connection_close(st, AMQP_REPLY_SUCCESS);
    }
    amqp_destroy_connection(st);
    return refused == p->want_refused;
}

/* RabbitMQ refusing (basic.nack) every publish to queue on vhost, as a
 * full queue with x-overflow reject-publish does (on 1: policy max-length
 * 0, reject-publish; on 0: that policy cleared), waiting until a probe
 * publish is refused. 0, or -1 (reported). */
static int refuse_publishes(int port, const char *vhost, const char *queue, int on)
{
    char out[4096], pattern[128];
    refusal_probe_t probe = { port, vhost, queue, on };
    int rc;

    snprintf(pattern, sizeof pattern, "^%s$", queue);
    rc = on ? rq_ctl(&rabbit, 0, out, sizeof out, "set_policy", "-p", vhost, "--apply-to", "queues", "refuse", pattern,
                     "{\"max-length\":0,\"overflow\":\"reject-publish\"}", NULL)
            : rq_ctl(&rabbit, 0, out, sizeof out, "clear_policy", "-p", vhost, "refuse", NULL);
    TU_CHECK(rc == 0, "%s policy on %s: %s", on ? "set" : "clear", queue, out);
    if (rc != 0)
        return -1;
    if (!on)
        return 0;
    rc = tu_poll_until(probe_confirm, &probe, 30000, 200);
    TU_CHECK(rc == 0, "a publish to %s is still confirmed 30 s after its reject-publish policy", queue);
    return rc;
}

/* The NACK of id in group: its integer answer, or LLONG_MIN when it
 * failed (its message in why). */
static long long nack_answer(hg_client_t *c, const char *group, const char *id, char *why, size_t whylen)
{
    hg_reply_t *r = NULL;
    long long v = LLONG_MIN;
    hg_err_t e = cmd(c, &r, 3, (const char *const[]){ "NACK", group, id });

    snprintf(why, whylen, "%s", e == HG_OK ? "" : hg_client_errmsg(c));
    if (e == HG_OK && hg_reply_type(r) == HG_REPLY_INTEGER)
        v = hg_reply_integer(r);
    else if (e == HG_OK)
        snprintf(why, whylen, "answered type %d, want an integer", (int)hg_reply_type(r));
    hg_reply_free(r);
    return v;
}

/* NACK id in group until it is answered (nack_settled). */
typedef struct nack_again {
    hg_client_t *c;
    const char *group, *id;
    long long answer; /* the integer answered; LLONG_MIN while it failed */
    int nacks;
    char why[HG_ERRMSG_MAX];
} nack_again_t;

/* One more NACK: 1 when it was answered, or failed otherwise than keeping
 * the delivery held (nothing to wait for then). */
static int nack_settled(void *arg)
{
    nack_again_t *n = arg;
    n->nacks++;
    n->answer = nack_answer(n->c, n->group, n->id, n->why, sizeof n->why);
    return n->answer != LLONG_MIN || strstr(n->why, "still held") == NULL;
}

/* A NACK whose retry RabbitMQ refuses (basic.nack: hg.level.3 full, with
 * reject-publish): the NACK fails naming the refusal and saying the
 * delivery is still held — another consumer of the group gets nothing —
 * and once the queue takes messages again a NACK of the same id settles
 * that delivery (its retry's due time); the message comes once, with
 * reconsume 1. (Before, the refused NACK forgot the delivery
 * unsettled: a NACK again answered -1 as if it were not held, and it came
 * back only because that NACK replaced the connection.) */
static void test_nack_refused_by_rabbitmq_keeps_hold(void)
{
    const int port = rabbit.nodes[0].amqp_port;
    char out[4096], uri[256], id[HG_ID_MAX], why[HG_ERRMSG_MAX];
    hg_client_t *c, *other;
    hg_reply_t *r = NULL;
    hg_error_t err;
    hg_err_t e;
    nack_again_t again;

    TU_REQUIRE(guest_vhost("nackrefuse", out, sizeof out) == 0, "vhost nackrefuse for guest: %s", out);
    snprintf(uri, sizeof uri, "amqp://guest:guest@127.0.0.1:%d/nackrefuse?levels=100ms,200ms,300ms,400ms", port);
    TU_REQUIRE(hg_client_open(uri, NULL, &c, &err) == HG_OK, "hg_client_open(%s): %s", uri, err.message);
    TU_REQUIRE(one_held(c, "nref-g", "nref-t", id, __LINE__) == 0, "one held delivery");
    TU_REQUIRE(refuse_publishes(port, "nackrefuse", "hg.level.3", 1) == 0, "hg.level.3 refusing publishes");

    TU_CHECK(nack_answer(c, "nref-g", id, why, sizeof why) == LLONG_MIN, "NACK with hg.level.3 refusing: answered");
    printf("\n    refused NACK: %s", why);
    TU_CHECK(strstr(why, "basic.nack") != NULL && strstr(why, "still held") != NULL,
             "the refused NACK's error names neither the refusal nor the held delivery: %s", why);
    /* held by c: another consumer of the group gets nothing */
    TU_REQUIRE(hg_client_open(uri, NULL, &other, &err) == HG_OK, "hg_client_open(%s): %s", uri, err.message);
    e = cmd(other, &r, 5, (const char *const[]){ "PULL", "nref-g", "nref-t", "BLOCK", "1000" });
    TU_CHECK(e == HG_OK && hg_reply_count(r) == 0, "another consumer's PULL after the refused NACK: %s, %zu messages",
             e == HG_OK ? "ok" : hg_client_errmsg(other), e == HG_OK ? hg_reply_count(r) : 0);
    hg_reply_free(r);
    hg_client_close(other);

    TU_REQUIRE(refuse_publishes(port, "nackrefuse", "hg.level.3", 0) == 0, "clearing the policy");
    /* the policy's end reaches the queue a little later: a NACK refused
     * meanwhile keeps the delivery held again */
    again = (nack_again_t){ c, "nref-g", id, LLONG_MIN, 0, "" };
    (void)tu_poll_until(nack_settled, &again, 30000, 100);
    printf("; after the policy: NACK answered %lld (%d NACKs)", again.answer, again.nacks);
    TU_CHECK(again.answer > 0,
             "the NACK after the refusal answered %lld (%s), want its retry's due time (the delivery held)",
             again.answer, again.why);

    e = cmd(c, &r, 5, (const char *const[]){ "PULL", "nref-g", "nref-t", "BLOCK", "10000" });
    TU_CHECK(e == HG_OK && hg_reply_count(r) == 1, "PULL after the NACK: %s, %zu messages, want 1",
             e == HG_OK ? "ok" : hg_client_errmsg(c), e == HG_OK ? hg_reply_count(r) : 0);
    if (e == HG_OK && hg_reply_count(r) == 1) {
        const hg_reply_t *m = hg_reply_element(r, 0);
        const char *got = hg_reply_str(hg_reply_element(m, 0), NULL);
        TU_CHECK(got != NULL && strcmp(got, id) == 0 && hg_reply_integer(hg_reply_element(m, 4)) == 1,
                 "came again as %s with reconsume %lld, want %s with 1", got != NULL ? got : "?",
                 hg_reply_integer(hg_reply_element(m, 4)), id);
        TU_CHECK(int_cmd(c, 3, (const char *const[]){ "ACK", "nref-g", id }, __LINE__) == 1, "ACK %s", id);
    }
    hg_reply_free(r);
    e = cmd(c, &r, 5, (const char *const[]){ "PULL", "nref-g", "nref-t", "BLOCK", "1000" });
    TU_CHECK(e == HG_OK && hg_reply_count(r) == 0, "a second copy: PULL %s, %zu messages",
             e == HG_OK ? "ok" : hg_client_errmsg(c), e == HG_OK ? hg_reply_count(r) : 0);
    hg_reply_free(r);
    hg_client_close(c);
}

/* A consumer worker whose NACK and its resend both fail gives up and drops
 * its connection. Made so: the handler deletes the group's DLQ by hand
 * (the worker's PULL declared it) and fails the first delivery for good
 * (NACK … DLQ), whose DLQ move
 * then comes back unrouted each time (the rebinding sweep a NACK runs does
 * not declare a group's queues; the next PULL's group ensure does). The
 * delivery goes back to the group's queue with the connection, counted by
 * RabbitMQ, and the new connection settles it as one failure: the message
 * comes back once, with reconsume 1 (a retry, not the DLQ: the failure that
 * reaches the queue is the lost connection, not the handler's verdict),
 * and is done; nothing is left in the DLQ or for another PULL. */
static void test_worker_gives_up_nack(void)
{
    const int port = rabbit.nodes[0].amqp_port;
    char out[4096], uri[256];
    hg_consumer_t *consumer;
    log_lines_t lines = { .lock = PTHREAD_MUTEX_INITIALIZER };
    log_wait_t dropped = { &lines, "dropping the connection" };
    nack_seen_t seen;
    pthread_t thread;
    hg_client_t *c;
    hg_reply_t *r = NULL;
    hg_error_t err;
    hg_err_t e;

    memset(&seen, 0, sizeof seen);
    seen.first_fatal = 1;
    seen.drop_vhost = "nackgiveup";
    seen.drop_queue = "hg.dlq.giveup-g"; /* once the worker's PULL declared it */
    TU_REQUIRE(guest_vhost("nackgiveup", out, sizeof out) == 0, "vhost nackgiveup for guest: %s", out);
    snprintf(uri, sizeof uri, "amqp://guest:guest@127.0.0.1:%d/nackgiveup?levels=100ms,200ms,300ms,400ms", port);
    TU_REQUIRE(hg_client_open(uri, NULL, &c, &err) == HG_OK, "hg_client_open(%s): %s", uri, err.message);
    e = cmd(c, &r, 6, (const char *const[]){ "GROUP", "CREATE", "giveup-g", "giveup-t", "FROM", "NOW" });
    hg_reply_free(r);
    TU_REQUIRE(e == HG_OK, "GROUP CREATE: %s", hg_client_errmsg(c));

    consumer = start_nack_consumer(uri, "giveup-g", "giveup-t", &seen, &lines, &thread);
    e = hg_send(c, "giveup-t", NULL, "fails once", 10, hg_delay_none(), NULL);
    TU_CHECK(e == HG_OK, "hg_send: %s", hg_client_errmsg(c));
    hg_client_close(c); /* idle for a while below: its heartbeats would lapse */
    TU_CHECK(tu_poll_until(log_has, &dropped, 30000, 50) == 0,
             "the worker did not give its NACK up (every resend unroutable):\n%s", lines.text);
    TU_CHECK(tu_poll_until(handled_twice, &seen, 60000, 50) == 0,
             "the message was handled %d time(s) in 60 s, want 2 (the given-up delivery did not come back):\n%s",
             atomic_load(&seen.calls), lines.text);
    hg_consumer_stop(consumer);
    pthread_join(thread, NULL);
    hg_consumer_free(consumer);
    printf("\n    handled %d times, reconsume %d then %d", atomic_load(&seen.calls), atomic_load(&seen.reconsume[0]),
           atomic_load(&seen.reconsume[1]));
    TU_CHECK(atomic_load(&seen.calls) == 2 && atomic_load(&seen.reconsume[0]) == 0 &&
                 atomic_load(&seen.reconsume[1]) == 1,
             "handled %d times with reconsume %d, %d: want twice, 0 then 1 (one failure counted once)",
             atomic_load(&seen.calls), atomic_load(&seen.reconsume[0]), atomic_load(&seen.reconsume[1]));
    TU_CHECK(seen.drop_rc == 0, "the handler's delete_queue hg.dlq.giveup-g failed");
    /* a copy left over (a retry published twice, a delivery not settled)
     * would come within level 3's 300 ms */
    TU_REQUIRE(hg_client_open(uri, NULL, &c, &err) == HG_OK, "hg_client_open(%s): %s", uri, err.message);
    e = cmd(c, &r, 7, (const char *const[]){ "PULL", "giveup-g", "giveup-t", "COUNT", "10", "BLOCK", "2000" });
    TU_CHECK(e == HG_OK && hg_reply_count(r) == 0, "left behind: PULL %s, %zu messages",
             e == HG_OK ? "ok" : hg_client_errmsg(c), e == HG_OK ? hg_reply_count(r) : 0);
    hg_reply_free(r);
    TU_CHECK(int_cmd(c, 3, (const char *const[]){ "DLQ", "LEN", "giveup-g" }, __LINE__) == 0, "DLQ LEN giveup-g");
    hg_client_close(c);
}

/* The value of field name in GROUP LIST's row of group (reply r); -1 when
 * the group or field is absent. */
static long long group_list_field(const hg_reply_t *r, const char *group, const char *name)
{
    for (size_t i = 0; i < hg_reply_count(r); i++) {
        const hg_reply_t *row = hg_reply_element(r, i);
        const char *g = hg_reply_str(hg_reply_element(row, 1), NULL);
        if (g == NULL || strcmp(g, group) != 0)
            continue;
        for (size_t k = 0; k + 1 < hg_reply_count(row); k += 2) {
            const char *field = hg_reply_str(hg_reply_element(row, k), NULL);
            if (field != NULL && strcmp(field, name) == 0)
                return hg_reply_integer(hg_reply_element(row, k + 1));
        }
    }
    return -1;
}

/* GROUP LIST's ready and dlq on amqp:// (each 0 the passive declare gives
 * is checked with one get, which finds the queue empty): a group holding
 * two messages reads ready 2, an empty one 0 and 0, and the messages are
 * untouched — both handed out afterwards with reconsume 0. */
static void test_group_list_counts(void)
{
    char out[4096], uri[256];
    hg_client_t *c;
    hg_reply_t *r = NULL;
    hg_error_t err;
    hg_err_t e;
    size_t got = 0;

    TU_REQUIRE(guest_vhost("grouplist", out, sizeof out) == 0, "vhost grouplist for guest: %s", out);
    snprintf(uri, sizeof uri, "amqp://guest:guest@127.0.0.1:%d/grouplist", rabbit.nodes[0].amqp_port);
    TU_REQUIRE(hg_client_open(uri, NULL, &c, &err) == HG_OK, "hg_client_open(%s): %s", uri, err.message);
    for (int i = 0; i < 2; i++) {
        const char *g = i == 0 ? "list-full" : "list-empty", *t = i == 0 ? "list-t" : "list-other";
        e = cmd(c, &r, 6, (const char *const[]){ "GROUP", "CREATE", g, t, "FROM", "NOW" });
        hg_reply_free(r);
        TU_REQUIRE(e == HG_OK, "GROUP CREATE %s: %s", g, hg_client_errmsg(c));
    }
    for (int i = 0; i < 2; i++)
        TU_CHECK(hg_send(c, "list-t", NULL, "waiting", 7, hg_delay_none(), NULL) == HG_OK, "send: %s",
                 hg_client_errmsg(c));
    e = cmd(c, &r, 2, (const char *const[]){ "GROUP", "LIST" });
    TU_CHECK(e == HG_OK, "GROUP LIST: %s", hg_client_errmsg(c));
    if (e == HG_OK) {
        TU_CHECK(group_list_field(r, "list-full", "ready") == 2 && group_list_field(r, "list-full", "dlq") == 0,
                 "list-full: ready %lld, dlq %lld, want 2 and 0", group_list_field(r, "list-full", "ready"),
                 group_list_field(r, "list-full", "dlq"));
        TU_CHECK(group_list_field(r, "list-empty", "ready") == 0 && group_list_field(r, "list-empty", "dlq") == 0,
                 "list-empty: ready %lld, dlq %lld, want 0 and 0", group_list_field(r, "list-empty", "ready"),
                 group_list_field(r, "list-empty", "dlq"));
    }
    hg_reply_free(r);
    e = cmd(c, &r, 7, (const char *const[]){ "PULL", "list-full", "list-t", "COUNT", "10", "BLOCK", "2000" });
    TU_CHECK(e == HG_OK, "PULL list-full: %s", hg_client_errmsg(c));
    for (size_t i = 0; e == HG_OK && i < hg_reply_count(r); i++) {
        const hg_reply_t *m = hg_reply_element(r, i);
        TU_CHECK(hg_reply_integer(hg_reply_element(m, 4)) == 0, "handed out with reconsume %lld, want 0",
                 hg_reply_integer(hg_reply_element(m, 4)));
        got++;
    }
    TU_CHECK(got == 2, "PULL list-full handed out %zu messages, want 2", got);
    hg_reply_free(r);
    hg_client_close(c);
}

/* The ra server of a quorum queue on node 1: suspend (sys:suspend: it
 * answers nothing, so a passive declare's count times out and answers 0)
 * or resume it. 0, or -1 (reported). */
static int ra_server(const char *vhost, const char *queue, const char *how)
{
    char expr[512], out[4096];
    int rc;

    snprintf(expr, sizeof expr, "sys:%s(whereis(list_to_atom(\"%s_%s\"))).", how, vhost, queue);
    rc = rq_ctl(&rabbit, 0, out, sizeof out, "eval", expr, NULL);
    TU_CHECK(rc == 0, "%s: %s", expr, out);
    return rc == 0 ? 0 : -1;
}

/* The suspended ra server whose mailbox a get must reach. */
typedef struct get_waiting {
    const char *vhost, *queue;
} get_waiting_t;

/* Whether a dequeue (basic.get) waits in the ra server's mailbox. */
static int get_is_waiting(void *arg)
{
    const get_waiting_t *g = arg;
    char expr[512], out[4096];

    snprintf(expr, sizeof expr,
             "{messages, Ms} = process_info(whereis(list_to_atom(\"%s_%s\")), messages), "
             "length([M || M <- Ms, string:find(io_lib:format(\"~p\", [M]), \"dequeue\") =/= nomatch]).",
             g->vhost, g->queue);
    return rq_ctl(&rabbit, 0, out, sizeof out, "eval", expr, NULL) == 0 && atoi(out) > 0;
}

/* GROUP LIST on a client of its own thread: what it answered. */
typedef struct group_list_call {
    hg_client_t *c;
    hg_err_t e;
    char why[HG_ERRMSG_MAX];
} group_list_call_t;

static void *group_list_run(void *arg)
{
    group_list_call_t *g = arg;
    hg_reply_t *r = NULL;

    g->e = cmd(g->c, &r, 2, (const char *const[]){ "GROUP", "LIST" });
    snprintf(g->why, sizeof g->why, "%s", g->e == HG_OK ? "" : hg_client_errmsg(g->c));
    hg_reply_free(r);
    return NULL;
}

/* GROUP LIST's check of a group queue that RabbitMQ declares empty while
 * it holds messages (its ra server suspended: the passive declare's count
 * times out at 250 ms and answers 0; the server is resumed once the check's
 * get waits for it): the get finds the head message, the queue is counted
 * again (the resumed leader answers: GROUP LIST answers; a leader still
 * silent would fail it naming the queue, "ask again"), and the message the
 * get took goes back as an uncounted copy at the queue's tail, the original
 * acknowledged — the group
 * then hands out both messages once each, the other first, both with
 * reconsume 0 (a message returned with basic.nack would come back counted
 * and be settled as a failure). */
static void test_group_list_peek_copies(void)
{
    char out[4096], uri[256], first[HG_ID_MAX], second[HG_ID_MAX];
    get_waiting_t waiting = { "peekcopy", "hg.group.peek-g" };
    group_list_call_t call;
    pthread_t thread;
    hg_client_t *c;
    hg_reply_t *r = NULL;
    hg_error_t err;
    hg_err_t e;
    int waited;

    TU_REQUIRE(guest_vhost("peekcopy", out, sizeof out) == 0, "vhost peekcopy for guest: %s", out);
    snprintf(uri, sizeof uri, "amqp://guest:guest@127.0.0.1:%d/peekcopy", rabbit.nodes[0].amqp_port);
    TU_REQUIRE(hg_client_open(uri, NULL, &c, &err) == HG_OK, "hg_client_open(%s): %s", uri, err.message);
    e = cmd(c, &r, 6, (const char *const[]){ "GROUP", "CREATE", "peek-g", "peek-t", "FROM", "NOW" });
    hg_reply_free(r);
    TU_REQUIRE(e == HG_OK, "GROUP CREATE: %s", hg_client_errmsg(c));
    TU_REQUIRE(hg_send(c, "peek-t", NULL, "first", 5, hg_delay_none(), first) == HG_OK, "send: %s",
               hg_client_errmsg(c));
    TU_REQUIRE(hg_send(c, "peek-t", NULL, "second", 6, hg_delay_none(), second) == HG_OK, "send: %s",
               hg_client_errmsg(c));
    memset(&call, 0, sizeof call);
    TU_REQUIRE(hg_client_open(uri, NULL, &call.c, &err) == HG_OK, "hg_client_open(%s): %s", uri, err.message);
    hg_client_set_read_timeout(call.c, 60000); /* the get waits for the resume below */
    group_list_run(&call);                     /* connected, the topology declared: only the check is left to wait */
    TU_REQUIRE(call.e == HG_OK, "GROUP LIST before: %s", call.why);

    TU_REQUIRE(ra_server("peekcopy", "hg.group.peek-g", "suspend") == 0, "suspending hg.group.peek-g");
    TU_REQUIRE(pthread_create(&thread, NULL, group_list_run, &call) == 0, "start GROUP LIST's thread");
    waited = tu_poll_until(get_is_waiting, &waiting, 30000, 100);
    TU_CHECK(ra_server("peekcopy", "hg.group.peek-g", "resume") == 0, "resuming hg.group.peek-g");
    pthread_join(thread, NULL);
    TU_CHECK(waited == 0, "no get reached the suspended queue in 30 s (GROUP LIST: %s)", call.why);
    printf("\n    GROUP LIST: %s", call.e == HG_OK ? "answered" : call.why);
    TU_CHECK(call.e == HG_OK,
             "GROUP LIST with the count lost, then counted again after the look: %d (%s), want an "
             "answer",
             (int)call.e, call.why);
    hg_client_close(call.c);

    /* both, in order; a PULL may answer fewer than it asked for (the second can reach the client's read-ahead
       after the first PULL's BLOCK returned with one) */
    size_t got = 0;
    e = HG_OK;
    for (uint64_t until = tu_now_mono_ms() + 20000; e == HG_OK && got < 2 && tu_now_mono_ms() < until;) {
        e = cmd(c, &r, 7, (const char *const[]){ "PULL", "peek-g", "peek-t", "COUNT", "10", "BLOCK", "2000" });
        TU_CHECK(e == HG_OK, "PULL after the check: %s", hg_client_errmsg(c));
        for (size_t i = 0; e == HG_OK && i < hg_reply_count(r); i++, got++) {
            const hg_reply_t *m = hg_reply_element(r, i);
            const char *id = hg_reply_str(hg_reply_element(m, 0), NULL), *want = got == 0 ? second : first;
            TU_CHECK(got < 2 && id != NULL && strcmp(id, want) == 0 && hg_reply_integer(hg_reply_element(m, 4)) == 0,
                     "message %zu: %s with reconsume %lld, want %s (the %s) with 0", got, id != NULL ? id : "?",
                     hg_reply_integer(hg_reply_element(m, 4)), want,
                     got == 0 ? "untouched one first" : "copy at the tail");
            if (id != NULL)
                TU_CHECK(int_cmd(c, 3, (const char *const[]){ "ACK", "peek-g", id }, __LINE__) == 1, "ACK %s", id);
        }
        hg_reply_free(r);
        r = NULL;
    }
    TU_CHECK(got == 2, "PULLs after the check: %zu messages in 20 s, want 2", got);
    e = cmd(c, &r, 7, (const char *const[]){ "PULL", "peek-g", "peek-t", "COUNT", "10", "BLOCK", "1000" });
    TU_CHECK(e == HG_OK && hg_reply_count(r) == 0, "a copy too many: PULL %s, %zu messages",
             e == HG_OK ? "ok" : hg_client_errmsg(c), e == HG_OK ? hg_reply_count(r) : 0);
    hg_reply_free(r);
    hg_client_close(c);
}

static const tu_test_t node_tests[] = {
    { "NACK with a delay or level refused: an error, the delivery stays held (ACK settles it)",
      test_nack_refused_keeps_hold },
    { "names RabbitMQ cannot take (not ASCII, too long, blanks): refused naming the byte or length, before the "
      "wire; the connection and its held delivery survive",
      test_bad_names_keep_connection },
    { "NACK counts against the consumed group's max-reconsume, not the last group created on the client",
      test_nack_uses_its_groups_max },
    { "PULL of another group on the same client: no delivery of the first group is handed out as the second's",
      test_switching_groups },
    { "a consumer that ends without ACK or NACK, again and again: each redelivery is a failure (reconsume + 1), "
      "then the DLQ at max-reconsume",
      test_poison_reaches_dlq },
    { "SEND … DEDUP, hg_send_dedup, hg_send_many's dedup, hg_order_timeout_send: sent, duplicate 0, all delivered; "
      "DEDUP without a KEY refused",
      test_dedup_sends_everything },
    { "hg_client_close of a client and of a consumer: closed with the handshake, never logged as an unexpected close",
      test_clean_close_is_polite },
    { "a user and password in the options log in as that user (over the URI's and guest); wrong or missing "
      "password refused",
      test_login_from_options },
    { "a clean close with deliveries read ahead: they are not failures (the next consumer gets them at once, "
      "reconsume 0)",
      test_read_ahead_at_close },
    { "queues an earlier version declared without x-delivery-limit: every command works on them, unchanged",
      test_upgraded_queues },
    { "hg_client_address and the consumer's log name the node connected (a dead first host, a failover), not the "
      "URI's first host",
      test_address_names_the_live_node },
    { "amqps:// to a host that drops SYNs: a stop cuts the TCP connect at once", test_amqps_connect_stoppable },
    { "amqps:// offers only base/tls_policy.h's TLS 1.2 cipher suites", test_amqps_offers_policy_ciphers },
    { "a level queue unbound by hand: a send to it fails naming hg.levels and the level (never confirmed and "
      "dropped); the client's next send binds the topology again and is delivered",
      test_unbound_level_fails_the_send },
    { "the hop router's next hop to a level queue unbound by hand: back to hg.hops, the router binds again, "
      "delivered",
      test_router_rebinds_unbound_level },
    { "a consumer worker's NACK that fails (its retry unroutable): sent again on the retry backoff, binding the "
      "topology first; the message comes again with reconsume 1",
      test_worker_resends_failed_nack },
    { "a NACK whose retry RabbitMQ refuses (basic.nack): an error saying the delivery is still held; it is, and a "
      "NACK again settles it (reconsume 1, once)",
      test_nack_refused_by_rabbitmq_keeps_hold },
    { "a consumer worker whose NACK and its resend fail: it drops its connection, and the message comes back once, "
      "reconsume 1",
      test_worker_gives_up_nack },
    { "GROUP LIST's ready and dlq: the counts, a 0 checked by one get, the messages untouched",
      test_group_list_counts },
    { "GROUP LIST with a group queue's count lost (its ra server suspended): looked into and counted again; the "
      "message its get took goes back as an uncounted copy at the tail",
      test_group_list_peek_copies },
    { "a remainder queue unbound by hand on the send's path: the send fails naming the remainder exchange (never "
      "skips the wait); the next send binds again and comes at or after its due, once",
      test_unbound_remainder_fails_the_send },
    { "a remainder queue unbound by hand past the send's path: the dead-lettered message is held, never early; a "
      "send meeting the gap repairs it and both come at or after their due, once",
      test_unbound_remainder_holds_dead_letters },
    { NULL, NULL },
};

static int add_suites(void)
{
    return tu_add_suite("rabbit-node", suite_init, suite_cleanup, NULL, NULL, node_tests);
}

int main(int argc, char **argv)
{
    return tu_cunit_main(argc, argv, add_suites);
}
