/*
 * tests/integration/test_transport.c — the library's client and consumer
 * suites that matter, run against BOTH transports with the same test code:
 * the real hourglass-broker (hourglass://) and a private single RabbitMQ node
 * (amqp://, tests/helpers/rabbit_proc). Each test body takes a target_t and
 * runs once per transport; every assertion names the transport.
 *
 *   round trip        hg_send + hg_send_many (pipelined / confirmed), a
 *                     consumer with 3 workers: every id delivered, payload,
 *                     key and topic intact; hg_client_address, the start-up
 *                     line and each worker's "connected to" name the node
 *   delays            LEVEL 1, DELAY 6s (a chain: 5s + 1s), DELAY 0: never
 *                     early, due_ms as promised, late by less than 3 s
 *   exact ms          DELAY 300ms, 1500ms, 2500ms (remainders below the
 *                     smallest level): never early, late by < 800 ms
 *                     (a whole smallest level would be 1 s)
 *   custom levels     amqp://…/vhost?levels=200ms,1s,5s: LEVELS, LEVEL 1 and
 *                     DELAY on time; the default table refused on that vhost
 *   retry             HG_RETRY: local backoff, then NACK; the message comes
 *                     back after level 3 (10 s) with reconsume 1
 *   DLQ               HG_FAIL: DLQ LEN / LIST (id, reason) / REQUEUE (comes
 *                     back, reconsume 0) / DROP; hourglass-cli levels, groups,
 *                     dlq list through the same URI
 *   send bound        hg_client_send_bound_ms on amqp:// and amqps://: the
 *                     transport's waits (hosts, login, channels, topology,
 *                     writes, confirms, pauses after refusals)
 *   frozen node       amqp://, amqps://: a node that stops reading (SIGSTOP)
 *                     while a send has 32 MiB to write: the writes end with
 *                     an error naming them and the read timeout (2 s) after
 *                     2 s, within hg_client_send_bound_ms, and at once when
 *                     the stop fd becomes readable; the client sends again
 *                     once the node is back (librabbitmq writes with no
 *                     deadline: such a send waited for ever)
 *   frozen waits      amqp://, amqps://: on a SIGSTOPped node an RPC (DLQ
 *                     LEN) ends after the read timeout naming the queue, a
 *                     new connection's login (TLS handshake) after the
 *                     connect timeout; with 60 s timeouts the stop fd cuts
 *                     each at once, and the close of a consuming client too
 *                     (they waited their timeouts before)
 *   refusals          SEND … KEY "" is refused on every transport; amqp://
 *                     answers TOUCH/INFO and GROUP CREATE … FROM
 *                     FIRST with HG_ERR_UNSUPPORTED
 *                     naming amqp://; a level queue declared with another
 *                     TTL is an error naming x-message-ttl and both values
 *
 * The RabbitMQ node and the broker start once for the program (a node takes
 * a minute on a loaded machine); each test uses its own topic and group.
 */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include <hourglass/hourglass.h>

#include <amqp.h>
#include <amqp_tcp_socket.h>
#include <dirent.h>
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <CUnit/CUnit.h>

#include "tests/helpers/broker_proc.h"
#include "tests/helpers/rabbit_proc.h"
#include "tests/helpers/testutil.h"
#include "tests/helpers/tls_certs.h"

#define CLI_PATH HG_BUILDDIR "/hourglass-cli"
#define MAX_SEEN 1000

typedef struct target {
    const char *name; /* "hourglass://", "amqp://" or "amqps://" */
    char uri[4096];
    int amqp;
} target_t;

static bp_broker_t broker;
static rq_cluster_t rabbit;
static char pki_dir[512];
static tc_certs_t pki; /* the RabbitMQ node's TLS listener and the amqps:// client */
static target_t targets[3];
static int ntargets;
static int test_seq; /* unique topic/group names */

static int suite_init(void)
{
    char err[8192];

    bp_set_failure_counter(CU_get_number_of_failures);
    if (bp_startl(&broker, err, sizeof err, "--fsync", "no", NULL) != 0) {
        fprintf(stderr, "start the broker: %s\n", err);
        return -1;
    }
    if (tu_mkdtemp("hg-transport-pki", pki_dir, sizeof pki_dir) != 0 || tc_make(pki_dir, &pki, err, sizeof err) != 0) {
        fprintf(stderr, "make the test CA: %s\n", err);
        bp_destroy(&broker);
        return -1;
    }
    if (rq_start_tls(&rabbit, 1, pki.ca, pki.server, pki.server_key, err, sizeof err) != 0) {
        fprintf(stderr, "start RabbitMQ: %s\n", err);
        bp_destroy(&broker);
        return -1;
    }
    targets[0].name = "hourglass://";
    snprintf(targets[0].uri, sizeof targets[0].uri, "hourglass://127.0.0.1:%d", broker.port);
    targets[1].name = "amqp://";
    snprintf(targets[1].uri, sizeof targets[1].uri, "%s", rabbit.uri);
    targets[1].amqp = 1;
    targets[2].name = "amqps://";
    snprintf(targets[2].uri, sizeof targets[2].uri, "%s?ca=%s&cert=%s&key=%s", rabbit.uri_tls, pki.ca, pki.client,
             pki.client_key);
    targets[2].amqp = 1;
    ntargets = 3;
    return 0;
}

static int suite_cleanup(void)
{
    rq_destroy(&rabbit, CU_get_number_of_failures() > 0);
    bp_destroy(&broker);
    tu_rmtree(pki_dir);
    return 0;
}

static hg_client_t *open_client(const target_t *t)
{
    hg_client_t *c = NULL;
    hg_error_t err;
    hg_err_t e = hg_client_open(t->uri, NULL, &c, &err);
    TU_CHECK(e == HG_OK, "%s: hg_client_open(%s): %s", t->name, t->uri, err.message);
    return c;
}

/* A command whose reply is an integer; -999 on failure (reported). */
static long long int_cmd(const target_t *t, hg_client_t *c, int argc, const char *const *argv)
{
    hg_reply_t *r = NULL;
    hg_err_t e = hg_client_command(c, argc, argv, NULL, &r);
    long long v = -999;
    TU_CHECK(e == HG_OK, "%s: %s %s: %s", t->name, argv[0], argc > 1 ? argv[1] : "", hg_client_errmsg(c));
    if (e == HG_OK) {
        TU_CHECK(hg_reply_type(r) == HG_REPLY_INTEGER, "%s: %s answered type %d, want an integer", t->name, argv[0],
                 (int)hg_reply_type(r));
        v = hg_reply_integer(r);
    }
    hg_reply_free(r);
    return v;
}

static void names(char *topic, char *group, size_t len, const char *what)
{
    test_seq++;
    snprintf(topic, len, "%s-t%d-%d", what, test_seq, (int)getpid());
    snprintf(group, len, "%s-g%d-%d", what, test_seq, (int)getpid());
}

/* Create the group (so messages sent before the consumer starts are kept on
 * both transports). */
static void create_group(const target_t *t, hg_client_t *c, const char *group, const char *topic)
{
    const char *argv[] = { "GROUP", "CREATE", group, topic, "FROM", "NOW" };
    hg_reply_t *r = NULL;
    hg_err_t e = hg_client_command(c, 6, argv, NULL, &r);
    TU_CHECK(e == HG_OK, "%s: GROUP CREATE %s %s: %s", t->name, group, topic, hg_client_errmsg(c));
    hg_reply_free(r);
}

/* ------------------------------------------------------------------------
 * A consumer in a thread, recording what it saw
 * ------------------------------------------------------------------------ */

typedef struct seen {
    char id[HG_ID_MAX];
    char payload[64];
    char key[64];
    char topic[128];
    unsigned reconsume;
    uint64_t due_ms, at_ms;
    unsigned attempt;
} seen_t;

typedef struct runner {
    hg_consumer_t *consumer;
    pthread_t thread;
    pthread_mutex_t lock;
    seen_t seen[MAX_SEEN];
    int nseen;
    hg_outcome_t (*decide)(const hg_message_t *m, struct runner *r); /* NULL: HG_DONE */
    int handled;
    char log[8192]; /* the consumer's log lines (under lock) */
    size_t loglen;
} runner_t;

static void runner_log(int level, const char *message, void *arg)
{
    runner_t *r = arg;
    (void)level;
    pthread_mutex_lock(&r->lock);
    int n = snprintf(r->log + r->loglen, sizeof r->log - r->loglen, "%s\n", message);
    if (n > 0 && (size_t)n < sizeof r->log - r->loglen)
        r->loglen += (size_t)n;
    pthread_mutex_unlock(&r->lock);
}

static hg_outcome_t record(const hg_message_t *m, char *reason, size_t rlen, void *arg)
{
    runner_t *r = arg;
    hg_outcome_t out = HG_DONE;

    pthread_mutex_lock(&r->lock);
    if (r->nseen < MAX_SEEN) {
        seen_t *s = &r->seen[r->nseen++];
        snprintf(s->id, sizeof s->id, "%s", m->id);
        snprintf(s->payload, sizeof s->payload, "%.*s", (int)m->payload_len, (const char *)m->payload);
        snprintf(s->key, sizeof s->key, "%.*s", (int)m->key_len, m->key);
        snprintf(s->topic, sizeof s->topic, "%s", m->topic);
        s->reconsume = m->reconsume;
        s->due_ms = m->due_ms;
        s->at_ms = tu_now_wall_ms();
        s->attempt = m->attempt;
    }
    if (r->decide != NULL)
        out = r->decide(m, r);
    r->handled++;
    pthread_mutex_unlock(&r->lock);
    if (out != HG_DONE)
        snprintf(reason, rlen, "test says %s", out == HG_RETRY ? "retry" : "fail");
    return out;
}

static void *run_consumer(void *arg)
{
    runner_t *r = arg;
    hg_consumer_run(r->consumer);
    return NULL;
}

static runner_t *runner_start(const target_t *t, const char *group, const char *topic, int workers,
                              hg_outcome_t (*decide)(const hg_message_t *, runner_t *))
{
    runner_t *r = calloc(1, sizeof *r);
    hg_consumer_opts_t o;
    hg_error_t err;
    hg_err_t e;

    pthread_mutex_init(&r->lock, NULL);
    r->decide = decide;
    hg_consumer_opts_init(&o);
    o.uri = t->uri;
    o.group = group;
    o.topic = topic;
    o.workers = workers;
    o.count = 10;
    o.block_ms = 200;
    o.lease_ms = 30000;
    o.retry.base_ms = 20;
    o.retry.cap_ms = 50;
    o.retry.attempts = 2;
    o.handler = record;
    o.handler_arg = r;
    o.log = runner_log;
    o.log_arg = r;
    e = hg_consumer_new(&o, &r->consumer, &err);
    TU_REQUIRE(e == HG_OK, "%s: hg_consumer_new: %s", t->name, err.message);
    pthread_create(&r->thread, NULL, run_consumer, r);
    return r;
}

static void runner_stop(runner_t *r)
{
    if (r == NULL)
        return;
    hg_consumer_stop(r->consumer);
    pthread_join(r->thread, NULL);
    hg_consumer_free(r->consumer);
    r->consumer = NULL;
}

static void runner_free(runner_t *r)
{
    if (r == NULL)
        return;
    pthread_mutex_destroy(&r->lock);
    free(r);
}

typedef struct wait_ctx {
    runner_t *r;
    int want;
} wait_ctx_t;

static int enough(void *arg)
{
    wait_ctx_t *w = arg;
    int n;
    pthread_mutex_lock(&w->r->lock);
    n = w->r->handled;
    pthread_mutex_unlock(&w->r->lock);
    return n >= w->want;
}

static int wait_handled(runner_t *r, int want, int deadline_ms)
{
    wait_ctx_t w = { r, want };
    return tu_poll_until(enough, &w, deadline_ms, 20);
}

/* ------------------------------------------------------------------------
 * Tests, each run per target
 * ------------------------------------------------------------------------ */

static void round_trip(const target_t *t)
{
    char topic[64], group[64];
    hg_send_item_t items[200];
    char ids[300][HG_ID_MAX], payloads[300][16];
    hg_client_t *c = open_client(t);
    runner_t *r;
    size_t ok = 0;

    if (c == NULL)
        return;
    names(topic, group, sizeof topic, "rt");
    create_group(t, c, group, topic);
    for (int i = 0; i < 200; i++) {
        memset(&items[i], 0, sizeof items[i]);
        snprintf(payloads[i], sizeof payloads[i], "m%d", i);
        items[i].topic = topic;
        items[i].key = payloads[i];
        items[i].payload = payloads[i];
        items[i].payload_len = strlen(payloads[i]);
        items[i].delay = hg_delay_none();
    }
    TU_CHECK(hg_send_many(c, items, 200, &ok) == HG_OK && ok == 200, "%s: hg_send_many: %zu ok: %s", t->name, ok,
             hg_client_errmsg(c));
    for (int i = 0; i < 200; i++)
        snprintf(ids[i], HG_ID_MAX, "%s", items[i].id);
    for (int i = 200; i < 300; i++) {
        snprintf(payloads[i], sizeof payloads[i], "m%d", i);
        TU_CHECK(hg_send(c, topic, payloads[i], payloads[i], strlen(payloads[i]), hg_delay_none(), ids[i]) == HG_OK,
                 "%s: hg_send %d: %s", t->name, i, hg_client_errmsg(c));
    }
    r = runner_start(t, group, topic, 3, NULL);
    TU_CHECK(wait_handled(r, 300, 60000) == 0, "%s: %d of 300 handled in 60 s", t->name, r->handled);
    runner_stop(r);
    /* the client and every worker name the node connected, on each transport */
    {
        char node[64], want[160];
        snprintf(node, sizeof node, "127.0.0.1:%d",
                 !t->amqp                           ? broker.port
                 : strcmp(t->name, "amqps://") == 0 ? rabbit.nodes[0].amqps_port
                                                    : rabbit.nodes[0].amqp_port);
        TU_CHECK(strcmp(hg_client_address(c), node) == 0, "%s: hg_client_address %s, want %s", t->name,
                 hg_client_address(c), node);
        for (int i = 0; i < 3; i++) {
            snprintf(want, sizeof want, "worker %d: connected to %s\n", i, node);
            TU_CHECK(strstr(r->log, want) != NULL, "%s: the consumer did not log \"%s\"; its log:\n%s", t->name, want,
                     r->log);
        }
        snprintf(want, sizeof want, "topic %s at %s\n", topic, node);
        TU_CHECK(strstr(r->log, want) != NULL, "%s: no start-up line \"%s\"; the log:\n%s", t->name, want, r->log);
    }
    /* every id exactly once (no failure, no redelivery), payload/key/topic intact */
    for (int i = 0; i < 300; i++) {
        int found = 0;
        for (int k = 0; k < r->nseen; k++)
            if (strcmp(r->seen[k].id, ids[i]) == 0) {
                found++;
                TU_CHECK(strcmp(r->seen[k].payload, payloads[i]) == 0 && strcmp(r->seen[k].key, payloads[i]) == 0 &&
                             strcmp(r->seen[k].topic, topic) == 0,
                         "%s: message %s: payload '%s' key '%s' topic '%s', want '%s' '%s' '%s'", t->name, ids[i],
                         r->seen[k].payload, r->seen[k].key, r->seen[k].topic, payloads[i], payloads[i], topic);
            }
        TU_CHECK(found == 1, "%s: message %d (%s) delivered %d times, want 1", t->name, i, ids[i], found);
    }
    runner_free(r);
    hg_client_close(c);
}

static void delays(const target_t *t)
{
    char topic[64], group[64], id[3][HG_ID_MAX];
    hg_delay_t d[3] = { hg_delay_level(1), hg_delay_ms(6000), hg_delay_ms(0) };
    uint64_t want[3] = { 1000, 6000, 0 }, sent;
    hg_client_t *c = open_client(t);
    runner_t *r;

    if (c == NULL)
        return;
    names(topic, group, sizeof topic, "delay");
    create_group(t, c, group, topic);
    r = runner_start(t, group, topic, 1, NULL);
    sent = tu_now_wall_ms();
    for (int i = 0; i < 3; i++)
        TU_CHECK(hg_send(c, topic, NULL, "x", 1, d[i], id[i]) == HG_OK, "%s: send %d: %s", t->name, i,
                 hg_client_errmsg(c));
    TU_CHECK(wait_handled(r, 3, 30000) == 0, "%s: %d of 3 delayed messages in 30 s", t->name, r->handled);
    runner_stop(r);
    for (int i = 0; i < 3; i++)
        for (int k = 0; k < r->nseen; k++) {
            seen_t *s = &r->seen[k];
            if (strcmp(s->id, id[i]) != 0)
                continue;
            TU_CHECK(s->at_ms + 50 >= sent + want[i],
                     "%s: message %d delivered %" PRId64 " ms after send, want >= %" PRIu64, t->name, i,
                     (int64_t)(s->at_ms - sent), want[i]);
            TU_CHECK(s->at_ms <= sent + want[i] + 3000,
                     "%s: message %d delivered %" PRId64 " ms after send, want < %" PRIu64, t->name, i,
                     (int64_t)(s->at_ms - sent), want[i] + 3000);
            TU_CHECK(s->due_ms + 1500 >= sent + want[i] && s->due_ms <= sent + want[i] + 1500,
                     "%s: message %d due_ms is %" PRId64 " ms after send, want about %" PRIu64, t->name, i,
                     (int64_t)(s->due_ms - sent), want[i]);
        }
    runner_free(r);
    hg_client_close(c);
}

/* Send each delay (one worker consumes), then check every delivery: never
 * before its send + want_ms[i], late by less than EXACT_LATE_MS, due_ms as
 * promised (within EXACT_DUE_SLACK_MS of the send call). Prints the figures.
 * The bound is what the remainder queues must prove — no remainder waits a
 * whole smallest level (1 s) — with room for a busy machine (make -j2 check
 * runs this beside a 3-node cluster; sanitizers): here the lateness is 20-100
 * ms. */
#define EXACT_LATE_MS      800
#define EXACT_DUE_SLACK_MS 250

static void on_time(const target_t *t, const char *what, int n, const hg_delay_t *delay, const uint64_t *want_ms)
{
    char topic[64], group[64], id[8][HG_ID_MAX];
    uint64_t sent[8];
    hg_client_t *c = open_client(t);
    runner_t *r;

    if (c == NULL)
        return;
    TU_REQUIRE(n <= 8, "at most 8 delays");
    names(topic, group, sizeof topic, what);
    create_group(t, c, group, topic);
    r = runner_start(t, group, topic, 1, NULL);
    for (int i = 0; i < n; i++) {
        sent[i] = tu_now_wall_ms();
        TU_CHECK(hg_send(c, topic, NULL, "x", 1, delay[i], id[i]) == HG_OK, "%s: send %d (%" PRIu64 " ms): %s", t->name,
                 i, want_ms[i], hg_client_errmsg(c));
    }
    TU_CHECK(wait_handled(r, n, 30000) == 0, "%s: %d of %d delayed messages in 30 s", t->name, r->handled, n);
    runner_stop(r);
    printf("\n    %s:", t->name);
    for (int i = 0; i < n; i++)
        for (int k = 0; k < r->nseen; k++) {
            seen_t *s = &r->seen[k];
            int64_t after = (int64_t)(s->at_ms - sent[i]);
            if (strcmp(s->id, id[i]) != 0)
                continue;
            printf(" %" PRIu64 " ms at +%" PRId64 ";", want_ms[i], after);
            TU_CHECK(after >= (int64_t)want_ms[i],
                     "%s: the %" PRIu64 " ms delay delivered early, %" PRId64 " ms after its send", t->name, want_ms[i],
                     after);
            TU_CHECK(after < (int64_t)(want_ms[i] + EXACT_LATE_MS),
                     "%s: the %" PRIu64 " ms delay delivered %" PRId64 " ms after its send, want < %" PRIu64, t->name,
                     want_ms[i], after, want_ms[i] + EXACT_LATE_MS);
            TU_CHECK(s->due_ms >= sent[i] + want_ms[i] && s->due_ms <= sent[i] + want_ms[i] + EXACT_DUE_SLACK_MS,
                     "%s: the %" PRIu64 " ms delay: due_ms is %" PRId64 " ms after send", t->name, want_ms[i],
                     (int64_t)(s->due_ms - sent[i]));
        }
    runner_free(r);
    hg_client_close(c);
}

/* DELAY in milliseconds below and between the levels: 300ms (below the
 * smallest level), 1500ms (1 s + a 500 ms remainder), 2500ms (1 s × 2 + 500
 * ms, a chain with a remainder). On amqp:// the remainders wait in the
 * remainder queues (docs/rabbitmq.md), none a whole extra smallest level. */
static void exact_ms(const target_t *t)
{
    const hg_delay_t d[3] = { hg_delay_ms(300), hg_delay_ms(1500), hg_delay_ms(2500) };
    const uint64_t want[3] = { 300, 1500, 2500 };
    on_time(t, "exact", 3, d, want);
}

static hg_outcome_t retry_first(const hg_message_t *m, runner_t *r)
{
    (void)r;
    return m->reconsume == 0 ? HG_RETRY : HG_DONE;
}

static void retry(const target_t *t)
{
    char topic[64], group[64], id[HG_ID_MAX];
    hg_client_t *c = open_client(t);
    runner_t *r;
    int first = -1, back = -1;

    if (c == NULL)
        return;
    names(topic, group, sizeof topic, "retry");
    create_group(t, c, group, topic);
    TU_CHECK(hg_send(c, topic, "k", "again", 5, hg_delay_none(), id) == HG_OK, "%s: send: %s", t->name,
             hg_client_errmsg(c));
    r = runner_start(t, group, topic, 1, retry_first);
    /* 3 local attempts (2 retries), NACK → level 3 (10 s) → 1 more delivery */
    TU_CHECK(wait_handled(r, 4, 40000) == 0, "%s: %d handler calls in 40 s, want 4", t->name, r->handled);
    runner_stop(r);
    for (int k = 0; k < r->nseen; k++) {
        if (r->seen[k].reconsume == 0 && first < 0)
            first = k;
        if (r->seen[k].reconsume == 1 && back < 0)
            back = k;
    }
    TU_CHECK(first >= 0 && back >= 0, "%s: no delivery with reconsume 0 and then 1", t->name);
    if (first >= 0 && back >= 0) {
        uint64_t gap = r->seen[back].at_ms - r->seen[first].at_ms;
        TU_CHECK(strcmp(r->seen[back].id, id) == 0, "%s: the retry has id %s, want %s", t->name, r->seen[back].id, id);
        TU_CHECK(gap >= 9500 && gap < 25000, "%s: the retry came %" PRIu64 " ms after the first delivery, want ~10 s",
                 t->name, gap);
        TU_CHECK(r->seen[back].attempt == 0, "%s: the retry is local attempt %u, want 0", t->name,
                 r->seen[back].attempt);
    }
    runner_free(r);
    hg_client_close(c);
}

static hg_outcome_t fail_once(const hg_message_t *m, runner_t *r)
{
    (void)r;
    return strcmp((const char *)m->payload, "bad") == 0 && m->reconsume == 0 && r->handled == 0 ? HG_FAIL : HG_DONE;
}

/* Run hourglass-cli with the target's URI; exit status, output in out. */
static int cli(const target_t *t, char *out, size_t outlen, const char *a, const char *b, const char *c3, const char *d)
{
    const char *argv[] = { CLI_PATH, "--uri", t->uri, a, b, c3, d, NULL };
    return tu_run_capture(argv, out, outlen);
}

static void dlq(const target_t *t)
{
    char topic[64], group[64], id[HG_ID_MAX], out[8192];
    hg_client_t *c = open_client(t);
    hg_reply_t *r = NULL;
    runner_t *run;
    hg_err_t e;

    if (c == NULL)
        return;
    names(topic, group, sizeof topic, "dlq");
    create_group(t, c, group, topic);
    TU_CHECK(hg_send(c, topic, "k1", "bad", 3, hg_delay_none(), id) == HG_OK, "%s: send: %s", t->name,
             hg_client_errmsg(c));
    run = runner_start(t, group, topic, 1, fail_once);
    TU_CHECK(wait_handled(run, 1, 20000) == 0, "%s: not delivered in 20 s", t->name);
    {
        /* polled: on amqp:// the DLQ move is RabbitMQ's own, and while its
         * count lags the message DLQ LEN answers "ask again" (lib/rmq_admin.c) */
        const char *argv[] = { "DLQ", "LEN", group };
        uint64_t end = tu_now_mono_ms() + 10000;
        long long n = 0;
        char last[HG_ERRMSG_MAX] = "";
        do {
            hg_reply_t *lr = NULL;
            e = hg_client_command(c, 3, argv, NULL, &lr);
            n = e == HG_OK && hg_reply_type(lr) == HG_REPLY_INTEGER ? hg_reply_integer(lr) : -999;
            snprintf(last, sizeof last, "%s", e == HG_OK ? "" : hg_client_errmsg(c));
            hg_reply_free(lr);
            if (e != HG_OK && strstr(last, "ask again") == NULL)
                break;
        } while (n != 1 && tu_now_mono_ms() < end && usleep(50000) == 0);
        TU_CHECK(n == 1, "%s: DLQ LEN %lld, want 1 (%s)", t->name, n, last);
    }
    {
        const char *argv[] = { "DLQ", "LIST", group };
        e = hg_client_command(c, 3, argv, NULL, &r);
        TU_CHECK(e == HG_OK && hg_reply_count(r) == 1, "%s: DLQ LIST: %s", t->name, hg_client_errmsg(c));
        if (e == HG_OK && hg_reply_count(r) == 1) {
            const hg_reply_t *m = hg_reply_element(r, 0);
            const char *got_id = hg_reply_str(hg_reply_element(m, 0), NULL);
            const char *reason = hg_reply_str(hg_reply_element(m, 4), NULL);
            TU_CHECK(got_id != NULL && strcmp(got_id, id) == 0, "%s: DLQ LIST id %s, want %s", t->name,
                     got_id ? got_id : "(none)", id);
            TU_CHECK(reason != NULL && strstr(reason, "test says fail") != NULL, "%s: DLQ reason '%s'", t->name,
                     reason ? reason : "(none)");
        }
        hg_reply_free(r);
    }
    /* the CLI through the same URI */
    TU_CHECK(cli(t, out, sizeof out, "dlq", "list", group, NULL) == 0 && strstr(out, id) != NULL,
             "%s: hourglass-cli dlq list: %s", t->name, out);
    TU_CHECK(cli(t, out, sizeof out, "groups", NULL, NULL, NULL) == 0 && strstr(out, group) != NULL,
             "%s: hourglass-cli groups: %s", t->name, out);
    TU_CHECK(cli(t, out, sizeof out, "levels", NULL, NULL, NULL) == 0 && strstr(out, "2h") != NULL,
             "%s: hourglass-cli levels: %s", t->name, out);
    /* requeue: delivered again with reconsume 0; then the DLQ is empty */
    TU_CHECK(cli(t, out, sizeof out, "dlq", "requeue", group, id) == 0, "%s: hourglass-cli dlq requeue: %s", t->name,
             out);
    TU_CHECK(wait_handled(run, 2, 20000) == 0, "%s: the requeued message did not come back in 20 s", t->name);
    runner_stop(run);
    if (run->nseen >= 2)
        TU_CHECK(strcmp(run->seen[1].id, id) == 0 && run->seen[1].reconsume == 0,
                 "%s: requeued delivery id %s reconsume %u, want %s and 0", t->name, run->seen[1].id,
                 run->seen[1].reconsume, id);
    {
        const char *argv[] = { "DLQ", "LEN", group };
        TU_CHECK(int_cmd(t, c, 3, argv) == 0, "%s: DLQ not empty after requeue", t->name);
    }
    /* drop: park one by hand through a consumer that fails everything, drop it */
    {
        const char *drop[] = { "DLQ", "DROP", group, "ALL" };
        const char *len[] = { "DLQ", "LEN", "no-such-group-xyz" };
        TU_CHECK(int_cmd(t, c, 4, drop) == 0, "%s: DLQ DROP ALL on an empty DLQ", t->name);
        e = hg_client_command(c, 3, len, NULL, &r);
        TU_CHECK(e == HG_ERR_SERVER && strstr(hg_client_errmsg(c), "no such group") != NULL,
                 "%s: DLQ LEN of an unknown group: %s (%s)", t->name, hg_strerror(e), hg_client_errmsg(c));
        hg_reply_free(r);
    }
    runner_free(run);
    hg_client_close(c);
}

static void refusals(const target_t *t)
{
    hg_client_t *c = open_client(t);
    const char *touch[] = { "TOUCH", "g", "0000000000000001" };
    hg_reply_t *r = NULL;
    hg_err_t e;

    if (c == NULL)
        return;
    e = hg_client_command(c, 3, touch, NULL, &r);
    if (t->amqp)
        TU_CHECK(e == HG_ERR_UNSUPPORTED && strstr(hg_client_errmsg(c), "TOUCH is not supported on amqp://") != NULL,
                 "%s: TOUCH: %s: %s", t->name, hg_strerror(e), hg_client_errmsg(c));
    else
        TU_CHECK(e == HG_OK && hg_reply_integer(r) == 0, "%s: TOUCH of no lease: %s", t->name, hg_client_errmsg(c));
    hg_reply_free(r);
    r = NULL;
    e = hg_client_command(c, 1, (const char *const[]){ "INFO" }, NULL, &r);
    if (t->amqp)
        TU_CHECK(e == HG_ERR_UNSUPPORTED && strstr(hg_client_errmsg(c), "not supported on amqp://") != NULL,
                 "%s: INFO: %s: %s", t->name, hg_strerror(e), hg_client_errmsg(c));
    else
        TU_CHECK(e == HG_OK, "%s: INFO: %s", t->name, hg_client_errmsg(c));
    hg_reply_free(r);
    r = NULL;
    /* an empty KEY: refused the same on every transport (nothing could name it) */
    e = hg_client_command(c, 5, (const char *const[]){ "SEND", "empty-key-t", "p", "KEY", "" }, NULL, &r);
    TU_CHECK(e == HG_ERR_SERVER && strstr(hg_client_errmsg(c), "key is empty (omit KEY for a message without one)"),
             "%s: SEND … KEY \"\": %s: %s", t->name, hg_strerror(e), hg_client_errmsg(c));
    hg_reply_free(r);
    r = NULL;
    /* FROM FIRST: the broker reads what the topic holds; RabbitMQ cannot, and says so. */
    e = hg_client_command(c, 6, (const char *const[]){ "GROUP", "CREATE", "first-g", "first-t", "FROM", "FIRST" }, NULL,
                          &r);
    if (t->amqp)
        TU_CHECK(e == HG_ERR_UNSUPPORTED &&
                     strstr(hg_client_errmsg(c), "GROUP CREATE ... FROM FIRST is not supported on amqp://") != NULL,
                 "%s: GROUP CREATE FROM FIRST: %s: %s", t->name, hg_strerror(e), hg_client_errmsg(c));
    else
        TU_CHECK(e == HG_OK, "%s: GROUP CREATE FROM FIRST: %s", t->name, hg_client_errmsg(c));
    hg_reply_free(r);
    r = NULL;
    e = hg_client_command(c, 6, (const char *const[]){ "GROUP", "CREATE", "first-g", "first-t", "FROM", "LATER" }, NULL,
                          &r);
    TU_CHECK(e == HG_ERR_SERVER && strstr(hg_client_errmsg(c), "FROM must be FIRST or NOW") != NULL,
             "%s: GROUP CREATE FROM LATER: %s: %s", t->name, hg_strerror(e), hg_client_errmsg(c));
    hg_reply_free(r);
    {
        char id[HG_ID_MAX];
        e = hg_send(c, "t", NULL, "x", 1, hg_delay_ms(4ull * 86400 * 1000), id);
        TU_CHECK(e == HG_ERR_SERVER && strstr(hg_client_errmsg(c), "exceeds max-delay") != NULL, "%s: DELAY 4d: %s: %s",
                 t->name, hg_strerror(e), hg_client_errmsg(c));
        e = hg_send(c, "t", NULL, "x", 1, hg_delay_level(19), id);
        TU_CHECK(e == HG_ERR_SERVER && strstr(hg_client_errmsg(c), "LEVEL must be 0..18") != NULL,
                 "%s: LEVEL 19: %s: %s", t->name, hg_strerror(e), hg_client_errmsg(c));
    }
    hg_client_close(c);
}

static void for_each(void (*fn)(const target_t *))
{
    TU_REQUIRE(ntargets == 3, "the broker and RabbitMQ are not running");
    for (int i = 0; i < ntargets; i++)
        fn(&targets[i]);
}

static void test_round_trip(void)
{
    for_each(round_trip);
}
static void test_delays(void)
{
    for_each(delays);
}

static void test_exact_ms(void)
{
    for_each(exact_ms);
}
static void test_retry(void)
{
    for_each(retry);
}
static void test_dlq(void)
{
    for_each(dlq);
}
static void test_refusals(void)
{
    for_each(refusals);
}

/* amqp:// only: a level queue that exists with another TTL (another level
 * table) is refused with a message naming the argument and both values. */
static void test_declaration_checked(void)
{
    char out[4096], uri[700];
    amqp_connection_state_t st = amqp_new_connection();
    amqp_socket_t *s = amqp_tcp_socket_new(st);
    amqp_table_entry_t e[5];
    amqp_table_t args = { 5, e };
    hg_client_t *c;
    hg_reply_t *r = NULL;
    hg_error_t err;
    hg_err_t rc;

    TU_REQUIRE(ntargets == 3, "RabbitMQ is not running");
    TU_REQUIRE(rq_ctl(&rabbit, 0, out, sizeof out, "add_vhost", "other", NULL) == 0, "add_vhost: %s", out);
    TU_REQUIRE(rq_ctl(&rabbit, 0, out, sizeof out, "set_permissions", "-p", "other", "guest", ".*", ".*", ".*", NULL) ==
                   0,
               "set_permissions: %s", out);
    TU_REQUIRE(amqp_socket_open(s, "127.0.0.1", rabbit.nodes[0].amqp_port) == AMQP_STATUS_OK, "connect");
    TU_REQUIRE(
        amqp_login(st, "other", 0, AMQP_DEFAULT_FRAME_SIZE, 0, AMQP_SASL_METHOD_PLAIN, "guest", "guest").reply_type ==
            AMQP_RESPONSE_NORMAL,
        "login");
    amqp_channel_open(st, 1);
    e[0].key = amqp_cstring_bytes("x-queue-type");
    e[0].value.kind = AMQP_FIELD_KIND_UTF8;
    e[0].value.value.bytes = amqp_cstring_bytes("quorum");
    e[1].key = amqp_cstring_bytes("x-message-ttl");
    e[1].value.kind = AMQP_FIELD_KIND_I64;
    e[1].value.value.i64 = 7000;
    e[2].key = amqp_cstring_bytes("x-dead-letter-exchange");
    e[2].value.kind = AMQP_FIELD_KIND_UTF8;
    e[2].value.value.bytes = amqp_cstring_bytes("hg.due");
    e[3].key = amqp_cstring_bytes("x-dead-letter-strategy");
    e[3].value.kind = AMQP_FIELD_KIND_UTF8;
    e[3].value.value.bytes = amqp_cstring_bytes("at-least-once");
    e[4].key = amqp_cstring_bytes("x-overflow");
    e[4].value.kind = AMQP_FIELD_KIND_UTF8;
    e[4].value.value.bytes = amqp_cstring_bytes("reject-publish");
    amqp_queue_declare(st, 1, amqp_cstring_bytes("hg.level.2"), 0, 1, 0, 0, args);
    TU_CHECK(amqp_get_rpc_reply(st).reply_type == AMQP_RESPONSE_NORMAL, "declare hg.level.2 with TTL 7000");
    amqp_destroy_connection(st);

    snprintf(uri, sizeof uri, "amqp://guest:guest@127.0.0.1:%d/other", rabbit.nodes[0].amqp_port);
    rc = hg_client_open(uri, NULL, &c, &err);
    TU_REQUIRE(rc == HG_OK, "open %s: %s", uri, err.message);
    rc = hg_client_command(c, 1, (const char *const[]){ "LEVELS" }, NULL, &r);
    TU_CHECK(rc == HG_ERR_SERVER && strstr(hg_client_errmsg(c), "hg.level.2") != NULL &&
                 strstr(hg_client_errmsg(c), "x-message-ttl") != NULL && strstr(hg_client_errmsg(c), "7000") != NULL &&
                 strstr(hg_client_errmsg(c), "5000") != NULL,
             "LEVELS on a vhost whose hg.level.2 has TTL 7000: %s: %s", hg_strerror(rc), hg_client_errmsg(c));
    hg_reply_free(r);
    /* the client stays usable: the next call reopens the refused channel */
    rc = hg_client_command(c, 1, (const char *const[]){ "PING" }, NULL, &r);
    TU_CHECK(rc == HG_OK, "PING after the refusal: %s", hg_client_errmsg(c));
    hg_reply_free(r);
    hg_client_close(c);
}

static void test_bad_uris(void)
{
    static const char *const bad[] = { "amqp://",        "amqp://h:99999/",      "amqp://h1,,h2/",
                                       "amqp://h/v?x=1", "amqps://h/?ca=a&ca=b", "amqps://h/?port=1",
                                       "amqps://h/?ca=" };
    hg_client_t *c = NULL;
    hg_error_t err;

    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        hg_err_t e = hg_client_open(bad[i], NULL, &c, &err);
        TU_CHECK(e == HG_ERR_URI && strstr(err.message, "bad URI") != NULL, "%s: %s: %s", bad[i], hg_strerror(e),
                 err.message);
    }
}

/* Open uri, with reconnect rounds or without; the code, with the message
 * in why and the time it took in *took_ms (a refusal that retrying cannot
 * mend must come at once even with reconnect on). */
static hg_err_t open_refused(const char *uri, int reconnect, char *why, size_t whylen, uint64_t *took_ms)
{
    hg_client_opts_t o;
    hg_client_t *c = NULL;
    hg_error_t err;
    uint64_t t0 = tu_now_mono_ms();
    hg_err_t e;

    hg_client_opts_init(&o);
    o.reconnect = reconnect;
    o.connect_timeout_ms = 5000;
    e = hg_client_open(uri, &o, &c, &err);
    *took_ms = tu_now_mono_ms() - t0;
    snprintf(why, whylen, "%s", e == HG_OK ? "(opened)" : err.message);
    hg_client_close(c);
    return e;
}

static void test_amqps_refusals(void)
{
    char uri[4096], why[HG_ERRMSG_MAX];
    uint64_t took;
    hg_err_t e;

    /* another CA: not trusted, at once (reconnecting cannot make it trusted) */
    snprintf(uri, sizeof uri, "%s?ca=%s&cert=%s&key=%s", rabbit.uri_tls, pki.other_ca, pki.client, pki.client_key);
    e = open_refused(uri, 1, why, sizeof why, &took);
    TU_CHECK(e == HG_ERR_CONNECT && strstr(why, "not trusted: RabbitMQ's certificate: ") != NULL && took < 4000,
             "another CA: %s: %s (%llu ms)", hg_strerror(e), why, (unsigned long long)took);
    /* the certificate names 127.0.0.1 and localhost, not this */
    snprintf(uri, sizeof uri, "%s?ca=%s&cert=%s&key=%s&sni=rabbit.example", rabbit.uri_tls, pki.ca, pki.client,
             pki.client_key);
    e = open_refused(uri, 1, why, sizeof why, &took);
    TU_CHECK(e == HG_ERR_CONNECT && strstr(why, "not trusted") != NULL && strstr(why, "hostname mismatch") != NULL,
             "sni=rabbit.example: %s: %s", hg_strerror(e), why);
    /* the node demands a client certificate */
    snprintf(uri, sizeof uri, "%s?ca=%s", rabbit.uri_tls, pki.ca);
    e = open_refused(uri, 0, why, sizeof why, &took);
    TU_CHECK(e == HG_ERR_CONNECT && strstr(why, "TLS refused by the node: ") != NULL, "no client certificate: %s: %s",
             hg_strerror(e), why);
    /* a client certificate from another CA */
    snprintf(uri, sizeof uri, "%s?ca=%s&cert=%s&key=%s", rabbit.uri_tls, pki.ca, pki.other_client,
             pki.other_client_key);
    e = open_refused(uri, 0, why, sizeof why, &took);
    TU_CHECK(e == HG_ERR_CONNECT && strstr(why, "TLS refused by the node: ") != NULL,
             "another CA's client certificate: %s: %s", hg_strerror(e), why);
    printf("\n    refusals: %s\n", why);
    /* files that are not there: named, never retried */
    snprintf(uri, sizeof uri, "%s?ca=%s/no-such-ca.pem", rabbit.uri_tls, pki_dir);
    e = open_refused(uri, 1, why, sizeof why, &took);
    TU_CHECK(e == HG_ERR_URI && strstr(why, "no-such-ca.pem") != NULL && took < 4000, "missing CA file: %s: %s",
             hg_strerror(e), why);
    snprintf(uri, sizeof uri, "%s?ca=%s&cert=%s", rabbit.uri_tls, pki.ca, pki.client);
    e = open_refused(uri, 1, why, sizeof why, &took);
    TU_CHECK(e == HG_ERR_URI && strstr(why, "needs both cert and key") != NULL, "cert without key: %s: %s",
             hg_strerror(e), why);
    /* plaintext AMQP on the TLS port is not mistaken for a broker */
    snprintf(uri, sizeof uri, "amqp://guest:guest@127.0.0.1:%d/", rabbit.nodes[0].amqps_port);
    hg_client_opts_t o;
    hg_client_t *c = NULL;
    hg_error_t err;
    hg_client_opts_init(&o);
    o.reconnect = 0;
    o.connect_timeout_ms = 5000;
    o.read_timeout_ms = 5000;
    e = hg_client_open(uri, &o, &c, &err);
    TU_CHECK(e != HG_OK, "amqp:// on the TLS port opened");
    hg_client_close(c);
    /* the client's options stand in for the URI's parameters */
    hg_client_opts_init(&o);
    o.tls_ca_file = pki.ca;
    o.tls_cert_file = pki.client;
    o.tls_key_file = pki.client_key;
    c = NULL;
    e = hg_client_open(rabbit.uri_tls, &o, &c, &err);
    TU_CHECK(e == HG_OK, "amqps:// with opts.tls_*: %s", err.message);
    if (e == HG_OK) {
        hg_reply_t *r = NULL;
        e = hg_client_command(c, 1, (const char *const[]){ "PING" }, NULL, &r);
        TU_CHECK(e == HG_OK, "PING over amqps:// with opts.tls_*: %s", hg_client_errmsg(c));
        hg_reply_free(r);
    }
    hg_client_close(c);
}

/* amqp:// with its own level table (?levels=): LEVELS answers it, LEVEL 1
 * waits its 200 ms, DELAY 1500ms (1s + 200ms × 2 + a 100 ms remainder) and
 * 150ms (a remainder alone) are on time; the default table on the same vhost
 * is refused naming hg.level.1's two TTLs; a bad table or an unknown
 * parameter is a bad URI naming it. */
static void test_custom_levels(void)
{
    char out[4096], uri[700], plain[700];
    const hg_delay_t d[3] = { hg_delay_level(1), hg_delay_ms(1500), hg_delay_ms(150) };
    const uint64_t want[3] = { 200, 1500, 150 };
    target_t custom;
    hg_client_t *c = NULL;
    hg_reply_t *r = NULL;
    hg_error_t err;
    hg_err_t rc;

    TU_REQUIRE(ntargets == 3, "RabbitMQ is not running");
    TU_REQUIRE(rq_ctl(&rabbit, 0, out, sizeof out, "add_vhost", "custom", NULL) == 0, "add_vhost: %s", out);
    TU_REQUIRE(
        rq_ctl(&rabbit, 0, out, sizeof out, "set_permissions", "-p", "custom", "guest", ".*", ".*", ".*", NULL) == 0,
        "set_permissions: %s", out);
    snprintf(uri, sizeof uri, "amqp://guest:guest@127.0.0.1:%d/custom?levels=200ms,1s,5s", rabbit.nodes[0].amqp_port);
    snprintf(plain, sizeof plain, "amqp://guest:guest@127.0.0.1:%d/custom", rabbit.nodes[0].amqp_port);
    custom.name = "amqp:// levels=200ms,1s,5s";
    snprintf(custom.uri, sizeof custom.uri, "%s", uri);

    rc = hg_client_open(uri, NULL, &c, &err);
    TU_REQUIRE(rc == HG_OK, "open %s: %s", uri, err.message);
    rc = hg_client_command(c, 1, (const char *const[]){ "LEVELS" }, NULL, &r);
    TU_CHECK(rc == HG_OK && r != NULL && hg_reply_count(r) == 3, "LEVELS on %s: %s (%zu levels, want 3)", uri,
             rc == HG_OK ? "ok" : hg_client_errmsg(c), r != NULL ? hg_reply_count(r) : 0);
    if (rc == HG_OK && r != NULL && hg_reply_count(r) == 3) {
        const long long delays[3] = { 200, 1000, 5000 };
        for (size_t i = 0; i < 3; i++) {
            const hg_reply_t *row = hg_reply_element(r, i), *delay = row != NULL ? hg_reply_element(row, 1) : NULL;
            long long got = delay != NULL ? hg_reply_integer(delay) : -1;
            TU_CHECK(got == delays[i], "level %zu: delay %lld, want %lld", i + 1, got, delays[i]);
        }
    }
    hg_reply_free(r);
    r = NULL;
    hg_client_close(c);

    on_time(&custom, "custom", 3, d, want);

    c = NULL;
    rc = hg_client_open(plain, NULL, &c, &err);
    TU_REQUIRE(rc == HG_OK, "open %s: %s", plain, err.message);
    rc = hg_client_command(c, 1, (const char *const[]){ "LEVELS" }, NULL, &r);
    TU_CHECK(rc == HG_ERR_SERVER && strstr(hg_client_errmsg(c), "hg.level.1") != NULL &&
                 strstr(hg_client_errmsg(c), "'200'") != NULL && strstr(hg_client_errmsg(c), "'1000'") != NULL,
             "the default table on a vhost declared with levels=200ms,1s,5s: %s: %s", hg_strerror(rc),
             hg_client_errmsg(c));
    hg_reply_free(r);
    hg_client_close(c);

    snprintf(uri, sizeof uri, "amqp://guest:guest@127.0.0.1:%d/custom?levels=5s,1s", rabbit.nodes[0].amqp_port);
    c = NULL;
    rc = hg_client_open(uri, NULL, &c, &err);
    TU_CHECK(rc == HG_ERR_URI && strstr(err.message, "levels=5s,1s") != NULL, "levels=5s,1s: %s: %s", hg_strerror(rc),
             err.message);
    hg_client_close(c);
    snprintf(uri, sizeof uri, "amqp://guest:guest@127.0.0.1:%d/custom?ca=x.pem", rabbit.nodes[0].amqp_port);
    c = NULL;
    rc = hg_client_open(uri, NULL, &c, &err);
    TU_CHECK(rc == HG_ERR_URI && strstr(err.message, "'ca'") != NULL, "amqp:// with ?ca=: %s: %s", hg_strerror(rc),
             err.message);
    hg_client_close(c);
}

/* The bound of a client opened on uri with o (NULL: the defaults); 0 when
 * it does not open (reported). */
static uint64_t send_bound(const char *uri, const hg_client_opts_t *o)
{
    hg_client_t *c = NULL;
    hg_error_t err;
    uint64_t ms = 0;
    TU_CHECK(hg_client_open(uri, o, &c, &err) == HG_OK, "open %s: %s", uri, err.message);
    if (c != NULL)
        ms = hg_client_send_bound_ms(c);
    hg_client_close(c);
    return ms;
}

/* hg_client_send_bound_ms on amqp:// counts the transport's own waits: per
 * attempt and host the TCP connect (with TLS: one deadline) and the login (a
 * connect timeout each) and three channel replies; per new connection the
 * topology's declarations; the writes; the confirms; the pauses after
 * refused rounds. */
static void test_amqp_send_bound(void)
{
    char uri[700];
    hg_client_opts_t o;
    uint64_t ms;

    TU_REQUIRE(ntargets == 3, "RabbitMQ is not running");
    /* The defaults (connect 5 s, read 10 s, 5 reconnect retries after 100 ..
     * 1600 ms), one host, RocketMQ's 18 levels: an attempt 2 × 5 s + 3 × 10 s
     * = 40 s, connecting 6 × 40 s + 3.1 s = 243.1 s; the topology 2 (the
     * first connection's check of hg.probe and the channel reopened after a
     * 404) + 19 + 2 × 18 + 4 × 10 remainder queues (1 .. 512 ms) = 97
     * replies, the writes and the confirms, 10 s each; four rounds and the
     * pauses 0.25 + 0.5 + 1 s */
    ms = send_bound(targets[1].uri, NULL);
    TU_CHECK(ms == 4 * (243100 + 99 * 10000) + 1750, "amqp://, the defaults: %" PRIu64 " ms", ms);
    /* amqps://: the handshake is within the connect's deadline */
    ms = send_bound(targets[2].uri, NULL);
    TU_CHECK(ms == 4 * (243100 + 99 * 10000) + 1750, "amqps://, the defaults: %" PRIu64 " ms", ms);
    /* Two hosts (the same node twice), levels=200ms,1s,5s, connect 300 ms,
     * read 2 s, one reconnect retry 100 ms later: an attempt 2 × (0.6 s +
     * 6 s) = 13.2 s, connecting 2 × 13.2 s + 0.1 s = 26.5 s; the topology
     * 2 + 19 + 2 × 3 + 4 × 8 (1 .. 128 ms) = 59 replies, the writes and the
     * confirms, 2 s each */
    snprintf(uri, sizeof uri, "amqp://guest:guest@127.0.0.1:%d,127.0.0.1:%d/?levels=200ms,1s,5s",
             rabbit.nodes[0].amqp_port, rabbit.nodes[0].amqp_port);
    hg_client_opts_init(&o);
    o.connect_timeout_ms = 300;
    o.read_timeout_ms = 2000;
    o.reconnect_backoff.base_ms = 100;
    o.reconnect_backoff.cap_ms = 100;
    o.reconnect_backoff.attempts = 1;
    ms = send_bound(uri, &o);
    TU_CHECK(ms == 4 * (26500 + 61 * 2000) + 1750, "%s, 300ms / 2s: %" PRIu64 " ms", uri, ms);
    o.resend_sends = 0; /* one round, no pause */
    ms = send_bound(uri, &o);
    TU_CHECK(ms == 26500 + 61 * 2000, "%s, no resend: %" PRIu64 " ms", uri, ms);
    o.read_timeout_ms = 0; /* rabbitmq-c's rpc waits for ever */
    ms = send_bound(uri, &o);
    TU_CHECK(ms == HG_UNBOUNDED, "%s, read timeout 0: %" PRIu64, uri, ms);
}

/* ------------------------------------------------------------------------
 * A node that stops reading (amqp://, amqps://)
 * ------------------------------------------------------------------------ */

#define FROZEN_BYTES (32u << 20) /* far more than the socket buffers between us and the node hold */

typedef struct frozen_send {
    hg_client_t *client;
    hg_send_item_t items[16];
    size_t n, ok;
    hg_err_t result;
    uint64_t ended_ms; /* monotonic */
    int done;
} frozen_send_t;

static void *frozen_send_main(void *arg)
{
    frozen_send_t *f = arg;
    f->result = hg_send_many(f->client, f->items, f->n, &f->ok);
    f->ended_ms = tu_now_mono_ms();
    __atomic_store_n(&f->done, 1, __ATOMIC_RELEASE);
    return NULL;
}

static int frozen_send_done(void *arg)
{
    return __atomic_load_n(&((frozen_send_t *)arg)->done, __ATOMIC_ACQUIRE);
}

/* The bytes this machine's sockets to 127.0.0.1:port hold unacknowledged
 * (tx_queue of /proc/net/tcp): a publish whose writes wait for the node. */
static long long unsent_to(int port)
{
    FILE *f = fopen("/proc/net/tcp", "r");
    char line[512];
    long long total = 0;

    if (f == NULL)
        return -1;
    while (fgets(line, sizeof line, f) != NULL) {
        unsigned remote_port, tx;
        if (sscanf(line, " %*u: %*x:%*x %*x:%x %*x %x:%*x", &remote_port, &tx) == 2 && (int)remote_port == port)
            total += tx;
    }
    fclose(f);
    return total;
}

typedef struct port_wait {
    int port;
} port_wait_t;

static int writes_wait(void *arg)
{
    return unsent_to(((port_wait_t *)arg)->port) >= 64 * 1024;
}

/* Send f's items from a thread to the frozen node; the send must end within
 * 120 s (else the node is let go, so the thread can be joined). stop_fd >= 0:
 * made readable once the writes wait for the node, *stopped_at then. 1 when
 * the send ended by itself. */
static int run_frozen_send(const target_t *t, frozen_send_t *f, int port, int stop_fd, uint64_t *stopped_at)
{
    port_wait_t pw = { port };
    pthread_t th;
    int ended;

    TU_REQUIRE(rq_signal(&rabbit, 0, SIGSTOP) == 0, "SIGSTOP the node");
    TU_REQUIRE(pthread_create(&th, NULL, frozen_send_main, f) == 0, "pthread_create");
    if (stop_fd >= 0) {
        TU_CHECK(tu_poll_until(writes_wait, &pw, 60000, 10) == 0, "%s: no bytes wait for the frozen node (port %d)",
                 t->name, port);
        *stopped_at = tu_now_mono_ms();
        TU_CHECK(write(stop_fd, "x", 1) == 1, "write the stop fd");
    }
    ended = tu_poll_until(frozen_send_done, f, 120000, 20) == 0;
    TU_CHECK(ended, "%s: hg_send_many of %u MiB to a node that does not read was still blocked after 120 s", t->name,
             FROZEN_BYTES >> 20);
    TU_CHECK(rq_signal(&rabbit, 0, SIGCONT) == 0, "SIGCONT the node");
    pthread_join(th, NULL);
    return ended;
}

/* After the node came back: the same client connects again and sends. */
static void sends_again(const target_t *t, hg_client_t *c, const char *topic)
{
    char err[1024];
    hg_err_t e;

    TU_REQUIRE(rq_wait_ready(&rabbit, 0, 60000, err, sizeof err) == 0, "the node after SIGCONT: %s", err);
    e = hg_send(c, topic, NULL, "after", 5, hg_delay_none(), NULL);
    TU_CHECK(e == HG_OK, "%s: a send after the node came back: %s", t->name, hg_client_errmsg(c));
}

static void frozen_node(const target_t *t)
{
    int port = t == &targets[2] ? rabbit.nodes[0].amqps_port : rabbit.nodes[0].amqp_port;
    char topic[64], group[64];
    char *payload = malloc(FROZEN_BYTES);
    frozen_send_t *f = calloc(1, sizeof *f);
    hg_client_opts_t o;
    hg_client_t *c = NULL;
    hg_error_t err;
    uint64_t bound, started, stopped_at = 0;
    int pfd[2];

    TU_REQUIRE(payload != NULL && f != NULL, "out of memory");
    memset(payload, 'x', FROZEN_BYTES);
    names(topic, group, sizeof topic, "frozen");

    /* The writes of a batch bounded by the read timeout: 16 × 2 MiB. One
     * connection attempt and no resend, so the write's own error is the
     * call's. */
    hg_client_opts_init(&o);
    o.read_timeout_ms = 2000;
    o.connect_timeout_ms =
        5000; /* a TLS handshake on a loaded machine, right after the previous target froze the node */
    o.reconnect = 0;
    o.resend_sends = 0;
    TU_REQUIRE(hg_client_open(t->uri, &o, &c, &err) == HG_OK, "%s: open: %s", t->name, err.message);
    TU_CHECK(hg_send(c, topic, NULL, "first", 5, hg_delay_none(), NULL) == HG_OK, "%s: first send: %s", t->name,
             hg_client_errmsg(c)); /* connected, the topology declared */
    bound = hg_client_send_bound_ms(c);
    f->client = c;
    f->n = 16;
    for (size_t i = 0; i < f->n; i++) {
        f->items[i].topic = topic;
        f->items[i].payload = payload + i * (FROZEN_BYTES / 16);
        f->items[i].payload_len = FROZEN_BYTES / 16;
        f->items[i].delay = hg_delay_none();
    }
    started = tu_now_mono_ms();
    if (run_frozen_send(t, f, port, -1, NULL)) {
        uint64_t took = f->ended_ms - started;
        printf("\n    %s: 16 × 2 MiB to a frozen node: %s after %" PRIu64 " ms (bound %" PRIu64 " ms): %s", t->name,
               hg_strerror(f->result), took, bound, hg_client_errmsg(c));
        TU_CHECK(f->result != HG_OK && f->ok == 0, "%s: %zu of 16 sent to a frozen node", t->name, f->ok);
        TU_CHECK(took >= 1900 && took < 2000 + 8000 && took <= bound,
                 "%s: the send ended after %" PRIu64
                 " ms, want the read timeout (2000 ms) and at most its bound %" PRIu64 " ms",
                 t->name, took, bound);
        TU_CHECK(strstr(hg_client_errmsg(c), "writing") != NULL && strstr(hg_client_errmsg(c), "2000ms") != NULL,
                 "%s: the error does not name the write and its timeout: %s", t->name, hg_client_errmsg(c));
        for (size_t i = 0; i < f->n; i++)
            TU_CHECK(f->items[i].err == HG_ERR_IO || f->items[i].err == HG_ERR_TIMEOUT,
                     "%s: item %zu: %s (%s), want a lost connection's failure", t->name, i,
                     hg_strerror(f->items[i].err), f->items[i].error);
    }
    sends_again(t, c, topic);
    hg_client_close(c);

    /* One 32 MiB message, the read timeout at its default (10 s): the stop
     * fd cuts its writes at once. */
    memset(f, 0, sizeof *f);
    TU_REQUIRE(pipe(pfd) == 0, "pipe");
    TU_REQUIRE(hg_client_open(t->uri, NULL, &c, &err) == HG_OK, "%s: open: %s", t->name, err.message);
    hg_client_set_stop_fd(c, pfd[0]);
    TU_CHECK(hg_send(c, topic, NULL, "first", 5, hg_delay_none(), NULL) == HG_OK, "%s: first send: %s", t->name,
             hg_client_errmsg(c));
    f->client = c;
    f->n = 1;
    f->items[0].topic = topic;
    f->items[0].payload = payload;
    f->items[0].payload_len = FROZEN_BYTES;
    f->items[0].delay = hg_delay_none();
    if (run_frozen_send(t, f, port, pfd[1], &stopped_at)) {
        uint64_t took = f->ended_ms - stopped_at;
        printf("\n    %s: 32 MiB to a frozen node, stop fd readable: %s %" PRIu64 " ms after the stop: %s", t->name,
               hg_strerror(f->result), took, hg_client_errmsg(c));
        TU_CHECK(f->result == HG_ERR_STOPPED && f->items[0].err == HG_ERR_STOPPED,
                 "%s: a send cut by the stop fd: %s, item %s (%s)", t->name, hg_strerror(f->result),
                 hg_strerror(f->items[0].err), f->items[0].error);
        TU_CHECK(took < 3000, "%s: the send ended %" PRIu64 " ms after the stop fd became readable, want at once",
                 t->name, took);
        TU_CHECK(strstr(hg_client_errmsg(c), "writing") != NULL, "%s: the error does not name the write: %s", t->name,
                 hg_client_errmsg(c));
    }
    char drain;
    TU_CHECK(read(pfd[0], &drain, 1) == 1, "drain the stop fd");
    sends_again(t, c, topic);
    hg_client_close(c);
    close(pfd[0]);
    close(pfd[1]);
    free(payload);
    free(f);
}

/* A node that stops reading (SIGSTOP) while a send has more bytes than the
 * socket buffers hold: the writes end with an error within the read timeout
 * (and hg_client_send_bound_ms), and at once when the stop fd becomes
 * readable; the client sends again once the node is back. */
static void test_frozen_node_writes(void)
{
    TU_REQUIRE(ntargets == 3, "RabbitMQ is not running");
    frozen_node(&targets[1]);
    frozen_node(&targets[2]);
}

/* ------------------------------------------------------------------------
 * A frozen node's other waits: RPCs, the login, the close (amqp://, amqps://)
 * ------------------------------------------------------------------------ */

typedef struct frozen_call {
    hg_client_t *client;
    const char *argv[4];
    int argc;
    int close; /* 1: hg_client_close instead of a command */
    hg_err_t result;
    char error[HG_ERRMSG_MAX];
    pid_t tid;
    uint64_t ended_ms; /* monotonic */
    int done;
} frozen_call_t;

static void *frozen_call_main(void *arg)
{
    frozen_call_t *f = arg;
    hg_reply_t *r = NULL;

    __atomic_store_n(&f->tid, gettid(), __ATOMIC_RELEASE);
    if (f->close) {
        hg_client_close(f->client);
        f->result = HG_OK;
    } else {
        f->result = hg_client_command(f->client, f->argc, f->argv, NULL, &r);
        snprintf(f->error, sizeof f->error, "%s", hg_client_errmsg(f->client));
        hg_reply_free(r);
    }
    f->ended_ms = tu_now_mono_ms();
    __atomic_store_n(&f->done, 1, __ATOMIC_RELEASE);
    return NULL;
}

static int frozen_call_done(void *arg)
{
    return __atomic_load_n(&((frozen_call_t *)arg)->done, __ATOMIC_ACQUIRE);
}

/* 1 once the call's thread waits in poll(2) (librabbitmq's wait on the
 * node, or the pump's), per /proc/self/task/TID/syscall. */
static int frozen_call_waits(void *arg)
{
    frozen_call_t *f = arg;
    pid_t tid = __atomic_load_n(&f->tid, __ATOMIC_ACQUIRE);
    char path[64], line[64] = "";
    FILE *in;
    long nr = -1;

    if (tid == 0)
        return 0;
    snprintf(path, sizeof path, "/proc/self/task/%d/syscall", (int)tid);
    if ((in = fopen(path, "r")) == NULL)
        return 0;
    if (fgets(line, sizeof line, in) != NULL)
        nr = strtol(line, NULL, 10);
    fclose(in);
    return nr == 7 /* poll */ || nr == 271 /* ppoll */;
}

/* Run f on a thread against the frozen node. stop_fd >= 0: made readable
 * once the thread waits on the node; *from is then that moment, else when
 * the call started. Returns the call's time in ms from *from, or -1 when it
 * did not end within 120 s (then the node is let go, so the thread ends). */
static long long run_frozen_call(const target_t *t, frozen_call_t *f, int stop_fd, const char *what)
{
    pthread_t th;
    uint64_t from = tu_now_mono_ms();
    int ended;

    TU_REQUIRE(pthread_create(&th, NULL, frozen_call_main, f) == 0, "pthread_create");
    if (stop_fd >= 0) {
        TU_CHECK(tu_poll_until(frozen_call_waits, f, 60000, 5) == 0, "%s: %s never waited on the frozen node", t->name,
                 what);
        from = tu_now_mono_ms();
        TU_CHECK(write(stop_fd, "x", 1) == 1, "write the stop fd");
    }
    ended = tu_poll_until(frozen_call_done, f, 120000, 10) == 0;
    TU_CHECK(ended, "%s: %s on a frozen node was still blocked after 120 s", t->name, what);
    if (!ended)
        TU_CHECK(rq_signal(&rabbit, 0, SIGCONT) == 0, "SIGCONT the node");
    pthread_join(th, NULL);
    printf("\n    %s: %s on a frozen node%s: %s after %llu ms: %s", t->name, what,
           stop_fd >= 0 ? ", stop fd readable" : "", hg_strerror(f->result), (unsigned long long)(f->ended_ms - from),
           f->error);
    return ended ? (long long)(f->ended_ms - from) : -1;
}

typedef struct frozen_consumer {
    hg_consumer_t *consumer;
    int port; /* the node's */
    int done;
} frozen_consumer_t;

static void *frozen_consumer_main(void *arg)
{
    frozen_consumer_t *fc = arg;
    (void)hg_consumer_run(fc->consumer);
    __atomic_store_n(&fc->done, 1, __ATOMIC_RELEASE);
    return NULL;
}

static int frozen_consumer_done(void *arg)
{
    return __atomic_load_n(&((frozen_consumer_t *)arg)->done, __ATOMIC_ACQUIRE);
}

static hg_outcome_t frozen_handler(const hg_message_t *m, char *reason, size_t len, void *arg)
{
    (void)m, (void)reason, (void)len, (void)arg;
    return HG_DONE;
}

/* 1 once this machine holds 3 established TCP connections to the node's
 * port (/proc/net/tcp): the consumer's 2 workers and its hop router. */
static int three_connected(void *arg)
{
    FILE *f = fopen("/proc/net/tcp", "r");
    char line[512];
    int n = 0;

    if (f == NULL)
        return 0;
    while (fgets(line, sizeof line, f) != NULL) {
        unsigned remote_port, state;
        if (sscanf(line, " %*u: %*x:%*x %*x:%x %x", &remote_port, &state) == 2 &&
            (int)remote_port == ((frozen_consumer_t *)arg)->port && state == 0x01)
            n++;
    }
    fclose(f);
    return n >= 3;
}

/* 1 once every thread of every process of node 0's process group is
 * stopped (/proc/PID/task/TID/stat state T): SIGSTOP reaches a busy
 * process's threads a moment later, and until then the node may still
 * answer. */
static int node_frozen(void *arg)
{
    DIR *procs = opendir("/proc");
    struct dirent *p;
    int members = 0, running = 0;

    (void)arg;
    if (procs == NULL)
        return 0;
    while ((p = readdir(procs)) != NULL) {
        char path[600], line[512];
        DIR *tasks;
        struct dirent *t;
        FILE *f;
        int pgrp = -1;
        if (p->d_name[0] < '1' || p->d_name[0] > '9')
            continue;
        snprintf(path, sizeof path, "/proc/%s/stat", p->d_name);
        if ((f = fopen(path, "r")) == NULL)
            continue;
        if (fgets(line, sizeof line, f) != NULL && strrchr(line, ')') != NULL)
            (void)sscanf(strrchr(line, ')') + 2, "%*c %*d %d", &pgrp);
        fclose(f);
        if (pgrp != rabbit.nodes[0].pid)
            continue;
        members++;
        snprintf(path, sizeof path, "/proc/%s/task", p->d_name);
        if ((tasks = opendir(path)) == NULL)
            continue;
        while ((t = readdir(tasks)) != NULL) {
            char state = '?';
            if (t->d_name[0] == '.')
                continue;
            snprintf(path, sizeof path, "/proc/%s/task/%s/stat", p->d_name, t->d_name);
            if ((f = fopen(path, "r")) == NULL)
                continue;
            if (fgets(line, sizeof line, f) != NULL && strrchr(line, ')') != NULL)
                state = strrchr(line, ')')[2];
            fclose(f);
            running += state != 'T' && state != 't';
        }
        closedir(tasks);
    }
    closedir(procs);
    return members > 0 && running == 0;
}

/* SIGSTOP node 0 and wait until it is stopped through and through. */
static void freeze(void)
{
    TU_REQUIRE(rq_signal(&rabbit, 0, SIGSTOP) == 0, "SIGSTOP the node");
    TU_REQUIRE(tu_poll_until(node_frozen, NULL, 30000, 5) == 0, "the node's threads did not all stop within 30 s");
}

/* f: DLQ LEN group on c (an RPC: queue.declare, passive, on channel 2). */
static void frozen_dlq_len(frozen_call_t *f, hg_client_t *c, const char *group)
{
    memset(f, 0, sizeof *f);
    f->client = c;
    f->argc = 3;
    f->argv[0] = "DLQ";
    f->argv[1] = "LEN";
    f->argv[2] = group;
}

static void drain_stop(int fd)
{
    char byte;
    TU_CHECK(read(fd, &byte, 1) == 1, "drain the stop fd");
}

/* What a client of a frozen node waits on besides a publish's writes: an RPC
 * (DLQ LEN: queue.declare on channel 2), the login of a new connection (on
 * amqps:// the TLS handshake first) and the close (basic.cancel of what it
 * consumes, connection.close). Each ends within its timeout with an error
 * naming it, and at once when the stop fd becomes readable. */
static void frozen_node_waits(const target_t *t)
{
    char topic[64], group[64], dlq_what[128], why[1024];
    const char *pull[] = { "PULL", NULL, NULL, "COUNT", "10" };
    hg_client_opts_t o;
    hg_client_t *c = NULL;
    hg_error_t err;
    frozen_call_t f;
    long long took;
    int pfd[2];

    names(topic, group, sizeof topic, "frozen-rpc");
    pull[1] = group;
    pull[2] = topic;
    snprintf(dlq_what, sizeof dlq_what, "checking queue hg.dlq.%s", group);
    TU_REQUIRE(pipe(pfd) == 0, "pipe");

    /* Timeouts of 2 s: an RPC the node never answers ends after the read
     * timeout, naming it; the login of the next connection (amqps://: its
     * TLS handshake) after the connect timeout. The node's kernel accepts
     * the TCP connection; the node never answers. */
    hg_client_opts_init(&o);
    o.read_timeout_ms = 2000;
    o.connect_timeout_ms = 2000;
    o.reconnect = 0;
    TU_REQUIRE(hg_client_open(t->uri, &o, &c, &err) == HG_OK, "%s: open: %s", t->name, err.message);
    create_group(t, c, group, topic); /* connected, the topology declared */
    freeze();
    frozen_dlq_len(&f, c, group);
    took = run_frozen_call(t, &f, -1, "DLQ LEN (an RPC)");
    TU_CHECK(f.result == HG_ERR_TIMEOUT && strstr(f.error, dlq_what) != NULL && strstr(f.error, "2000ms") != NULL,
             "%s: an RPC to a frozen node: %s (%s), want HG_ERR_TIMEOUT naming %s and 2000ms", t->name,
             hg_strerror(f.result), f.error, dlq_what);
    TU_CHECK(took >= 1900 && took < 2000 + 8000, "%s: the RPC ended after %lld ms, want the read timeout (2000 ms)",
             t->name, took);
    frozen_dlq_len(&f, c, group); /* the RPC's connection is gone: this one connects */
    took = run_frozen_call(t, &f, -1, "connecting");
    TU_CHECK(f.result == HG_ERR_CONNECT && strstr(f.error, "RabbitMQ at 127.0.0.1:") != NULL,
             "%s: a login to a frozen node: %s (%s), want HG_ERR_CONNECT naming the node", t->name,
             hg_strerror(f.result), f.error);
    TU_CHECK(took >= 1900 && took < 2000 + 8000,
             "%s: the connect ended after %lld ms, want the connect timeout (2000 ms)", t->name, took);
    hg_client_close(c);
    TU_CHECK(rq_signal(&rabbit, 0, SIGCONT) == 0, "SIGCONT the node");
    TU_REQUIRE(rq_wait_ready(&rabbit, 0, 60000, why, sizeof why) == 0, "the node after SIGCONT: %s", why);

    /* Timeouts of 60 s (the RPC and the login waited them out before): the
     * stop fd cuts each at once. */
    o.read_timeout_ms = 60000;
    o.connect_timeout_ms = 60000;
    TU_REQUIRE(hg_client_open(t->uri, &o, &c, &err) == HG_OK, "%s: open: %s", t->name, err.message);
    hg_client_set_stop_fd(c, pfd[0]);
    TU_CHECK(int_cmd(t, c, 3, (const char *const[]){ "DLQ", "LEN", group }) == 0, "%s: DLQ LEN", t->name);
    freeze();
    frozen_dlq_len(&f, c, group);
    took = run_frozen_call(t, &f, pfd[1], "DLQ LEN (an RPC)");
    TU_CHECK(f.result == HG_ERR_STOPPED && strstr(f.error, dlq_what) != NULL,
             "%s: an RPC cut by the stop fd: %s (%s), want HG_ERR_STOPPED naming %s", t->name, hg_strerror(f.result),
             f.error, dlq_what);
    TU_CHECK(took >= 0 && took < 3000, "%s: the RPC ended %lld ms after the stop fd became readable, want at once",
             t->name, took);
    drain_stop(pfd[0]);
    frozen_dlq_len(&f, c, group);
    took = run_frozen_call(t, &f, pfd[1], "connecting");
    TU_CHECK(f.result == HG_ERR_STOPPED && strstr(f.error, t == &targets[2] ? "TLS handshake" : "logging in") != NULL,
             "%s: a connect cut by the stop fd: %s (%s), want HG_ERR_STOPPED naming the %s", t->name,
             hg_strerror(f.result), f.error, t == &targets[2] ? "TLS handshake" : "login");
    TU_CHECK(took >= 0 && took < 3000, "%s: the connect ended %lld ms after the stop fd became readable, want at once",
             t->name, took);
    drain_stop(pfd[0]);

    /* The close of a client that consumes (basic.cancel, then
     * connection.close): 2 s each for a silent node; at once by the stop
     * fd. */
    TU_CHECK(rq_signal(&rabbit, 0, SIGCONT) == 0, "SIGCONT the node");
    TU_REQUIRE(rq_wait_ready(&rabbit, 0, 60000, why, sizeof why) == 0, "the node after SIGCONT: %s", why);
    {
        hg_reply_t *r = NULL; /* consuming now (nothing there: an empty answer) */
        TU_CHECK(hg_client_command(c, 5, pull, NULL, &r) == HG_OK, "%s: PULL: %s", t->name, hg_client_errmsg(c));
        hg_reply_free(r);
    }
    freeze();
    memset(&f, 0, sizeof f);
    f.client = c;
    f.close = 1;
    took = run_frozen_call(t, &f, pfd[1], "hg_client_close");
    TU_CHECK(took >= 0 && took < 1500,
             "%s: the close ended %lld ms after the stop fd became readable, want at once (2 s per step before)",
             t->name, took);
    drain_stop(pfd[0]);

    /* A consumer started on the frozen node: its workers and its hop router
     * wait in their logins (60 s); stopped with its stop fd, it returns at
     * once (the router's client did not take the stop fd before). */
    {
        hg_consumer_opts_t co;
        frozen_consumer_t fc = { .port = t == &targets[2] ? rabbit.nodes[0].amqps_port : rabbit.nodes[0].amqp_port };
        pthread_t th;
        uint64_t from;

        hg_consumer_opts_init(&co);
        co.uri = t->uri;
        co.client = &o;
        co.group = group;
        co.topic = topic;
        co.workers = 2;
        co.handler = frozen_handler;
        TU_REQUIRE(hg_consumer_new(&co, &fc.consumer, &err) == HG_OK, "%s: hg_consumer_new: %s", t->name, err.message);
        hg_consumer_set_stop_fd(fc.consumer, pfd[0]);
        TU_REQUIRE(pthread_create(&th, NULL, frozen_consumer_main, &fc) == 0, "pthread_create");
        TU_CHECK(tu_poll_until(three_connected, &fc, 60000, 10) == 0,
                 "%s: the consumer's workers and router never connected to the frozen node", t->name);
        from = tu_now_mono_ms();
        hg_consumer_stop(fc.consumer);
        TU_CHECK(write(pfd[1], "x", 1) == 1, "write the stop fd");
        took = tu_poll_until(frozen_consumer_done, &fc, 120000, 10) == 0 ? (long long)(tu_now_mono_ms() - from) : -1;
        pthread_join(th, NULL);
        printf("\n    %s: a consumer logging in to a frozen node, stopped: run returned %lld ms after the stop",
               t->name, took);
        TU_CHECK(took >= 0 && took < 3000,
                 "%s: hg_consumer_run returned %lld ms after the stop, want at once (its logins wait 60 s)", t->name,
                 took);
        hg_consumer_free(fc.consumer);
        drain_stop(pfd[0]);
    }
    TU_CHECK(rq_signal(&rabbit, 0, SIGCONT) == 0, "SIGCONT the node");
    TU_REQUIRE(rq_wait_ready(&rabbit, 0, 60000, why, sizeof why) == 0, "the node after SIGCONT: %s", why);
    close(pfd[0]);
    close(pfd[1]);
}

/* A frozen node's RPCs, logins and closes: within their timeouts, naming
 * what waited, and at once by the stop fd. */
static void test_frozen_node_waits(void)
{
    TU_REQUIRE(ntargets == 3, "RabbitMQ is not running");
    frozen_node_waits(&targets[1]);
    frozen_node_waits(&targets[2]);
}

static const tu_test_t transport_tests[] = {
    { "every transport: send, send_many, 3 workers, every id once", test_round_trip },
    { "every transport: LEVEL 1, DELAY 6s (chained), DELAY 0: on time", test_delays },
    { "every transport: DELAY 300ms, 1500ms, 2500ms: never early, late by less than 800 ms", test_exact_ms },
    { "every transport: HG_RETRY → local backoff → NACK → back after 10 s with reconsume 1", test_retry },
    { "every transport: HG_FAIL → DLQ LEN/LIST/REQUEUE/DROP, hourglass-cli levels/groups/dlq", test_dlq },
    { "every transport: TOUCH/INFO and GROUP CREATE FROM FIRST refused on amqp://, delay and level limits",
      test_refusals },
    { "amqp://: a level queue declared with another TTL is named in the error", test_declaration_checked },
    { "amqp://?levels=: its own level table, on time; the default table refused on that vhost", test_custom_levels },
    { "amqp://, amqps://: bad URIs named", test_bad_uris },
    { "amqp://, amqps://: the send bound counts hosts, login, channels, topology, writes, confirms, pauses",
      test_amqp_send_bound },
    { "amqp://, amqps://: a node that stops reading: a send's writes end within the read timeout, at once by the "
      "stop fd",
      test_frozen_node_writes },
    { "amqp://, amqps://: a frozen node: an RPC, a login, a close end within their timeouts, at once by the stop fd",
      test_frozen_node_waits },
    { "amqps://: another CA, a wrong name, no or a foreign client certificate, missing files: refused, saying why",
      test_amqps_refusals },
    { NULL, NULL },
};

static int add_suites(void)
{
    return tu_add_suite("transport", suite_init, suite_cleanup, NULL, NULL, transport_tests);
}

int main(int argc, char **argv)
{
    return tu_cunit_main(argc, argv, add_suites);
}
