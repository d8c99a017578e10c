/*
 * tests/integration/test_rabbit_partition.c — a producer on the minority
 * side of a network partition of a 3-node RabbitMQ cluster (amqp://,
 * docs/rabbitmq.md "Faults"), on nodes whose cluster_partition_handling is
 * ignore: the cut-off node keeps serving its clients, logins and
 * declarations included (its Mnesia goes on alone), but its quorum queue
 * members cannot commit, so nothing published to it is confirmed. The
 * cluster starts once for the program (nodes are slow to start here).
 *
 *   minority    a client whose URI lists node 3 first sends one message,
 *               then node 3 is cut off from the others (rq_partition:
 *               nftables; the others drop their links at once, so both
 *               sides see the partition now). For 40 s the client sends
 *               one message after another (read timeout 3 s): every failed
 *               send ends within its bound naming the node, and sends
 *               succeed again — on a majority node. (A dropped connection
 *               reconnected to the node that worked last, the cut-off one,
 *               which takes the login: every send failed for the whole
 *               partition.)
 *
 *   consumer    (runs first, on the whole cluster; at its end heals the cut
 *               and restarts node 3, the recovery from a partition with
 *               ignore: rq_heal_restart) a client whose URI lists node 3 first consumes a
 *               group (PULL, BLOCK 500) and a producer on node 1 sends
 *               MESSAGES messages right after node 3 is cut off: the
 *               consumer gets every one within CONSUMER_BOUND_S of the cut
 *               (read timeout 3 s). Until 2026-12-05 it got empty pulls on
 *               node 3 for the whole cut while its messages waited on the
 *               majority: nothing showed the node could not serve it
 *               (rmq_probe_idle now checks an idle consumer's node).
 */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include "include/hourglass/hourglass.h"
#include "tests/helpers/rabbit_proc.h"
#include "tests/helpers/testutil.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <CUnit/CUnit.h>

#define CUT_S            40
#define MESSAGES         5
#define CONSUMER_BOUND_S 30

static rq_cluster_t rabbit;
static int rabbit_up;

static int suite_init(void)
{
    char err[8192];

    setenv("HG_RABBIT_PARTITION_HANDLING", "ignore", 1);
    if (rq_start(&rabbit, 3, err, sizeof err) != 0) {
        fprintf(stderr, "start a 3-node RabbitMQ cluster: %s\n", err);
        return -1;
    }
    rabbit_up = 1;
    return 0;
}

static int suite_cleanup(void)
{
    if (rabbit_up)
        rq_destroy(&rabbit, CU_get_number_of_failures() > 0);
    return 0;
}

/* PULL group topic BLOCK 500 on c: the ids received appended to ids (n of
 * them, up to MESSAGES; repeats skipped), each ACKed. The PULL's code. */
static hg_err_t pull_some(hg_client_t *c, const char *group, const char *topic, char ids[][HG_ID_MAX], int *n)
{
    hg_reply_t *r = NULL;
    hg_err_t e = hg_client_command(c, 5, (const char *const[]){ "PULL", group, topic, "BLOCK", "500" }, NULL, &r);

    if (e != HG_OK)
        return e;
    for (size_t i = 0; i < hg_reply_count(r); i++) {
        const char *id = hg_reply_str(hg_reply_element(hg_reply_element(r, i), 0), NULL);
        hg_reply_t *ack = NULL;
        int seen = 0;
        for (int k = 0; k < *n; k++)
            seen |= strcmp(ids[k], id) == 0;
        if (!seen && *n < MESSAGES)
            snprintf(ids[(*n)++], HG_ID_MAX, "%s", id);
        (void)hg_client_command(c, 3, (const char *const[]){ "ACK", group, id }, NULL, &ack);
        hg_reply_free(ack);
    }
    hg_reply_free(r);
    return HG_OK;
}

static void test_minority_consumer(void)
{
    char uri_c[512], uri_p[512], id[HG_ID_MAX], ids[MESSAGES][HG_ID_MAX], err[4096], first_error[HG_ERRMSG_MAX] = "";
    hg_client_opts_t o;
    hg_client_t *c = NULL, *p = NULL;
    hg_reply_t *r = NULL;
    hg_error_t herr;
    uint64_t cut_at, last_at = 0;
    int got = 0, sent = 0, failed = 0;

    TU_REQUIRE(rabbit_up, "RabbitMQ is not running");
    snprintf(uri_c, sizeof uri_c, "amqp://guest:guest@127.0.0.1:%d,127.0.0.1:%d,127.0.0.1:%d/",
             rabbit.nodes[2].amqp_port, rabbit.nodes[0].amqp_port, rabbit.nodes[1].amqp_port);
    snprintf(uri_p, sizeof uri_p, "amqp://guest:guest@127.0.0.1:%d,127.0.0.1:%d/", rabbit.nodes[0].amqp_port,
             rabbit.nodes[1].amqp_port);
    hg_client_opts_init(&o);
    o.read_timeout_ms = 3000;
    o.connect_timeout_ms = 3000;
    TU_REQUIRE(hg_client_open(uri_c, &o, &c, &herr) == HG_OK, "open %s: %s", uri_c, herr.message);
    TU_REQUIRE(hg_client_open(uri_p, &o, &p, &herr) == HG_OK, "open %s: %s", uri_p, herr.message);
    TU_REQUIRE(hg_client_command(c, 6, (const char *const[]){ "GROUP", "CREATE", "part.g", "part.c", "FROM", "NOW" },
                                 NULL, &r) == HG_OK,
               "GROUP CREATE part.g part.c: %s", hg_client_errmsg(c));
    hg_reply_free(r);
    TU_REQUIRE(pull_some(c, "part.g", "part.c", ids, &got) == HG_OK && got == 0, "a PULL before the cut: %s",
               hg_client_errmsg(c));
    TU_REQUIRE(strstr(hg_client_address(c), "127.0.0.1:") != NULL, "no address");
    TU_REQUIRE(rq_partition(&rabbit, 2, 1, err, sizeof err) == 0, "partition node 3: %s", err);
    cut_at = tu_now_mono_ms();
    while (sent < MESSAGES && tu_now_mono_ms() - cut_at < CONSUMER_BOUND_S * 1000u)
        if (hg_send(p, "part.c", NULL, "x", 1, hg_delay_none(), id) == HG_OK)
            sent++;
    TU_CHECK(sent == MESSAGES, "the producer on the majority sent %d of %d messages: %s", sent, MESSAGES,
             hg_client_errmsg(p));
    while (got < sent && tu_now_mono_ms() - cut_at < (CONSUMER_BOUND_S + 20) * 1000u) {
        int before = got;
        hg_err_t e = pull_some(c, "part.g", "part.c", ids, &got);
        if (e != HG_OK && failed++ == 0)
            snprintf(first_error, sizeof first_error, "%s: %s", hg_strerror(e), hg_client_errmsg(c));
        if (got > before)
            last_at = tu_now_mono_ms();
    }
    printf("\n    consumer on node 3 (127.0.0.1:%d) cut off: %d of %d messages in %" PRIu64
           " ms after the cut, %d failed PULLs (the first: %s); on %s",
           rabbit.nodes[2].amqp_port, got, sent, last_at ? last_at - cut_at : 0, failed, failed ? first_error : "none",
           hg_client_address(c));
    TU_CHECK(got == sent, "the consumer got %d of %d messages within %d s of the cut (%d failed PULLs; the first: %s)",
             got, sent, CONSUMER_BOUND_S + 20, failed, first_error);
    TU_CHECK(got < sent || last_at - cut_at <= CONSUMER_BOUND_S * 1000u,
             "the last message came %" PRIu64 " ms after the cut, over %d s", last_at - cut_at, CONSUMER_BOUND_S);
    hg_client_close(c);
    hg_client_close(p);
    TU_CHECK(rq_heal_restart(&rabbit, 2, err, sizeof err) == 0, "heal node 3 (and restart it): %s", err);
}

static void test_minority_producer(void)
{
    char uri[512], id[HG_ID_MAX], err[4096], first_error[HG_ERRMSG_MAX] = "", address[256];
    hg_client_opts_t o;
    hg_client_t *c = NULL;
    hg_error_t herr;
    uint64_t cut_at, bound, longest = 0;
    int ok = 0, failed = 0, n = 0;

    TU_REQUIRE(rabbit_up, "RabbitMQ is not running");
    snprintf(uri, sizeof uri, "amqp://guest:guest@127.0.0.1:%d,127.0.0.1:%d,127.0.0.1:%d/", rabbit.nodes[2].amqp_port,
             rabbit.nodes[0].amqp_port, rabbit.nodes[1].amqp_port);
    hg_client_opts_init(&o);
    o.read_timeout_ms = 3000;
    o.connect_timeout_ms = 3000;
    TU_REQUIRE(hg_client_open(uri, &o, &c, &herr) == HG_OK, "open %s: %s", uri, herr.message);
    TU_REQUIRE(hg_send(c, "part.t", NULL, "x", 1, hg_delay_level(1), id) == HG_OK, "a send before the cut: %s",
               hg_client_errmsg(c));
    TU_REQUIRE(rq_partition(&rabbit, 2, 1, err, sizeof err) == 0, "partition node 3: %s", err);
    bound = hg_client_send_bound_ms(c);
    cut_at = tu_now_mono_ms();
    while (tu_now_mono_ms() - cut_at < CUT_S * 1000u) {
        uint64_t began = tu_now_mono_ms(), took;
        hg_err_t e = hg_send(c, "part.t", NULL, "x", 1, hg_delay_level(1), id);
        took = tu_now_mono_ms() - began;
        longest = took > longest ? took : longest;
        n++;
        if (e == HG_OK) {
            ok++;
            continue;
        }
        if (failed++ == 0)
            snprintf(first_error, sizeof first_error, "%s: %s", hg_strerror(e), hg_client_errmsg(c));
        TU_CHECK(strstr(hg_client_errmsg(c), "RabbitMQ at 127.0.0.1:") != NULL, "a failed send names no node: %s",
                 hg_client_errmsg(c));
    }
    snprintf(address, sizeof address, "%s", hg_client_address(c));
    printf("\n    %d sends in %d s with node 3 cut off: %d ok, %d failed (the first: %s); longest %" PRIu64
           " ms (bound %" PRIu64 " ms); on %s (node 3 is 127.0.0.1:%d)",
           n, CUT_S, ok, failed, failed ? first_error : "none", longest, bound, address, rabbit.nodes[2].amqp_port);
    TU_CHECK(ok > 0, "no send succeeded in the %d s node 3 was cut off (%d failed; the first: %s)", CUT_S, failed,
             first_error);
    TU_CHECK(longest <= bound, "a send took %" PRIu64 " ms, over its bound %" PRIu64 " ms", longest, bound);
    hg_client_close(c);
}

static const tu_test_t partition_tests[] = {
    { "a consumer on the minority side of a partition (partition handling ignore) gets its messages from a majority "
      "node",
      test_minority_consumer },
    { "a producer on the minority side of a partition (partition handling ignore) moves to a majority node",
      test_minority_producer },
    { NULL, NULL },
};

static int add_suites(void)
{
    return tu_add_suite("rabbit-partition", suite_init, suite_cleanup, NULL, NULL, partition_tests);
}

int main(int argc, char **argv)
{
    return tu_cunit_main(argc, argv, add_suites);
}
