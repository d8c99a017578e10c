/*
 * tests/integration/test_client.c — libhourglass and hourglass-cli against
 * the real hourglass-broker.
 *
 * Each test starts its own broker (tests/helpers/broker_proc) in a fresh temp
 * dir and drives it through the public API only (<hourglass/hourglass.h>),
 * as an application would; hourglass-cli is run as a child process. Checks:
 *  - send + consumer loop round trip (N workers, every message exactly once,
 *    ACKed: nothing left), and a DELAY honoured;
 *  - HG_RETRY: local retries with the configured backoff, then NACK with the
 *    reason (group MAXRETRY 0 makes it land in the DLQ at once);
 *  - HG_FAIL: NACK … DLQ with the reason: listed in the DLQ at once, even with
 *    the default MAXRETRY;
 *  - slow handler: the watchdog TOUCHes the lease so the message is not
 *    delivered twice; without TOUCH it is (the control);
 *  - the broker killed (-9) and restarted mid-consumption: workers reconnect
 *    and every message is handled (at least once: nothing lost);
 *  - hg_send_many pipelined, one broker error among 1000 not stopping the
 *    others; hg_levels_fetch / hg_level_for;
 *  - stop from a signal handler ends a long blocking PULL at once;
 *  - hourglass-cli: dlq list/show/requeue/drop round trip, --json, levels,
 *    groups, send, and every exit code (0, 1, 2, 3); dlq drop|requeue --all
 *    refused to a viewer says NOPERM without announcing the move first, and
 *    an admin's drop of a DLQ that takes a while is announced;
 *    hg_client_command_notice calls its notice only for a slow reply;
 *    passwd refuses a bad
 *    --cost before it reads or asks for the password (a closed stdin, a
 *    pseudo-terminal);
 *  - bad URIs and options: the error names the bad part (no broker needed);
 *  - credentials against a broker with users: a producer by URI, a consumer
 *    loop by hg_client_opts user/password; a wrong password stops the
 *    consumer with HG_ERR_AUTH at once, and so do no credentials at all
 *    (NOAUTH), a user without the consumer role with HG_ERR_SERVER (NOPERM),
 *    none retried forever.
 *
 * Waiting is polling with a deadline (tu_poll_until), never sleep-and-hope;
 * the sleeps below are the handlers' simulated work.
 *
 * Run one suite: ./tests/integration/test_client SUITE (client, consumer,
 * restart, cli, errors).
 */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include <hourglass/hourglass.h>

#include "tests/helpers/users_file.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <poll.h>
#include <pthread.h>
#include <pty.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <CUnit/CUnit.h>

#include "tests/helpers/broker_proc.h"
#include "tests/helpers/testutil.h"

#define MAX_MSGS 1000
#define CLI_PATH HG_BUILDDIR "/hourglass-cli"

static bp_broker_t B;
static hg_client_t *C; /* a client for the test's own commands */
static char URI[128];

/* ------------------------------------------------------------------------
 * Setup, broker, client helpers
 * ------------------------------------------------------------------------ */

typedef struct runner runner_t;
static runner_t *active_runner; /* a consumer still running when a test aborts */
static void runner_abort(runner_t *r);

static void setup(void)
{
    memset(&B, 0, sizeof B);
    C = NULL;
    URI[0] = '\0';
}

static void teardown(void)
{
    if (active_runner != NULL)
        runner_abort(active_runner);
    hg_client_close(C);
    C = NULL;
    bp_destroy(&B);
}

/* Start a broker (extra flags NULL-terminated, may be NULL) and open C. */
static void start(const char *const *extra)
{
    char e[8192];
    hg_error_t err;
    hg_err_t rc;

    BP_REQUIRE(bp_start(&B, extra, e, sizeof e) == 0, "start the broker: %s", e);
    snprintf(URI, sizeof URI, "hourglass://127.0.0.1:%d", B.port);
    rc = hg_client_open(URI, NULL, &C, &err);
    BP_REQUIRE(rc == HG_OK, "hg_client_open(%s): %s: %s", URI, hg_strerror(rc), err.message);
}

static const char *const FAST[] = { "--fsync", "no", NULL };

/* Run a command on C; returns the reply (caller frees) or NULL after a
 * recorded failure. */
static hg_reply_t *cmd(int argc, const char *const *argv)
{
    hg_reply_t *r = NULL;
    hg_err_t e = hg_client_command(C, argc, argv, NULL, &r);
    BP_CHECK(e == HG_OK, "%s: %s: %s", argv[0], hg_strerror(e), hg_client_errmsg(C));
    return r;
}

#define CMD(...) \
    cmd((int)(sizeof((const char *[]){ __VA_ARGS__ }) / sizeof(const char *)), (const char *const[]){ __VA_ARGS__ })

/* The integer reply of a command, or -999 after a recorded failure. */
static long long cmd_int(int argc, const char *const *argv)
{
    hg_reply_t *r = cmd(argc, argv);
    long long v = -999;
    if (r != NULL) {
        BP_CHECK(hg_reply_type(r) == HG_REPLY_INTEGER, "%s: reply type %d, want integer", argv[0],
                 (int)hg_reply_type(r));
        v = hg_reply_integer(r);
    }
    hg_reply_free(r);
    return v;
}

#define CMD_INT(...) \
    cmd_int((int)(sizeof((const char *[]){ __VA_ARGS__ }) / sizeof(const char *)), (const char *const[]){ __VA_ARGS__ })

static void send_one(const char *topic, const char *key, const char *payload, hg_delay_t d, char *id)
{
    hg_err_t e = hg_send(C, topic, key, payload, strlen(payload), d, id);
    BP_REQUIRE(e == HG_OK, "hg_send: %s: %s", hg_strerror(e), hg_client_errmsg(C));
}

static void sleep_ms(unsigned ms)
{
    struct timespec ts = { ms / 1000, (long)(ms % 1000) * 1000000L };
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

/* ------------------------------------------------------------------------
 * A consumer on a thread, and what its handler saw
 * ------------------------------------------------------------------------ */

typedef struct seen {
    pthread_mutex_t lock;
    int mode;             /* what the handler does, see handler() */
    unsigned sleep_ms;    /* work per call */
    int count[MAX_MSGS];  /* deliveries per payload index */
    int distinct;         /* indexes seen at least once */
    int calls;            /* handler calls */
    uint64_t call_ms[16]; /* monotonic time of the first calls */
    unsigned attempt[16]; /* msg->attempt of the first calls */
    char last_key[64];
    uint64_t delayed_recv_ms; /* wall ms the "delayed" payload arrived */
    uint64_t delayed_due_ms;
    int bad; /* a message the test did not send */
} seen_t;

enum {
    MODE_DONE,
    MODE_RETRY,
    MODE_FAIL_BAD,
    MODE_SLOW_FIRST
};

static seen_t S;

static void seen_reset(int mode, unsigned sleep)
{
    pthread_mutex_destroy(&S.lock);
    memset(&S, 0, sizeof S);
    pthread_mutex_init(&S.lock, NULL);
    S.mode = mode;
    S.sleep_ms = sleep;
}

/* Payloads are "m<index>" (or "delayed", or anything for MODE_FAIL_BAD). */
static hg_outcome_t handler(const hg_message_t *m, char *reason, size_t reason_size, void *arg)
{
    seen_t *s = arg;
    const char *p = m->payload;
    int first = 0, idx = -1;
    hg_outcome_t out = HG_DONE;

    pthread_mutex_lock(&s->lock);
    if (s->calls < 16) {
        s->call_ms[s->calls] = tu_now_mono_ms();
        s->attempt[s->calls] = m->attempt;
    }
    s->calls++;
    snprintf(s->last_key, sizeof s->last_key, "%.*s", (int)m->key_len, m->key);
    if (m->payload_len > 1 && p[0] == 'm') {
        idx = atoi(p + 1);
        if (idx < 0 || idx >= MAX_MSGS) {
            s->bad++;
            idx = -1;
        } else if (m->attempt == 0) {
            first = s->count[idx]++ == 0;
            s->distinct += first;
        }
    } else if (m->payload_len == 7 && memcmp(p, "delayed", 7) == 0) {
        s->delayed_recv_ms = tu_now_wall_ms();
        s->delayed_due_ms = m->due_ms;
    }
    pthread_mutex_unlock(&s->lock);

    switch (s->mode) {
    case MODE_RETRY:
        snprintf(reason, reason_size, "db locked");
        out = HG_RETRY;
        break;
    case MODE_FAIL_BAD:
        if (idx < 0) {
            snprintf(reason, reason_size, "payload '%.*s' is not an order id", (int)m->payload_len, p);
            out = HG_FAIL;
        }
        break;
    case MODE_SLOW_FIRST:
        if (first)
            sleep_ms(s->sleep_ms);
        break;
    default:
        if (s->sleep_ms > 0)
            sleep_ms(s->sleep_ms);
        break;
    }
    return out;
}

struct runner {
    hg_consumer_t *consumer;
    pthread_t thread;
    hg_err_t result;
    int running;
    atomic_int returned; /* 1 once hg_consumer_run returned */
};

/* Stop and free a consumer left running by a failed BP_REQUIRE. */
static void runner_abort(runner_t *r)
{
    if (r->running) {
        hg_consumer_stop(r->consumer);
        pthread_join(r->thread, NULL);
        r->running = 0;
    }
    hg_consumer_free(r->consumer);
    r->consumer = NULL;
    active_runner = NULL;
}

static void *run_thread(void *arg)
{
    runner_t *r = arg;
    r->result = hg_consumer_run(r->consumer);
    atomic_store(&r->returned, 1);
    return NULL;
}

static int runner_returned(void *arg)
{
    return atomic_load(&((runner_t *)arg)->returned);
}

/* Options with test-friendly defaults: fast blocking, the handler above. */
static void consumer_opts(hg_consumer_opts_t *o, hg_client_opts_t *co, const char *group, const char *topic)
{
    hg_consumer_opts_init(o);
    hg_client_opts_init(co);
    co->reconnect_backoff.base_ms = 50;
    co->reconnect_backoff.cap_ms = 400;
    o->uri = URI;
    o->client = co;
    o->group = group;
    o->topic = topic;
    o->block_ms = 300;
    o->handler = handler;
    o->handler_arg = &S;
}

/* consumer_start with a connection-event hook (hg_consumer_set_conn_event_fn; fn NULL: none). */
static void consumer_start_events(runner_t *r, const hg_consumer_opts_t *o, hg_conn_event_fn fn, void *arg)
{
    hg_error_t err;
    hg_err_t e;

    memset(r, 0, sizeof *r);
    e = hg_consumer_new(o, &r->consumer, &err);
    BP_REQUIRE(e == HG_OK, "hg_consumer_new: %s", err.message);
    hg_consumer_set_conn_event_fn(r->consumer, fn, arg);
    BP_REQUIRE(pthread_create(&r->thread, NULL, run_thread, r) == 0, "pthread_create");
    r->running = 1;
    active_runner = r;
}

static void consumer_start(runner_t *r, const hg_consumer_opts_t *o)
{
    consumer_start_events(r, o, NULL, NULL);
}

/* Stop, join (checking it returns promptly), keep the stats. */
static void consumer_finish(runner_t *r, hg_consumer_stats_t *stats)
{
    uint64_t t0;

    if (!r->running)
        return;
    active_runner = NULL;
    t0 = tu_now_mono_ms();
    hg_consumer_stop(r->consumer);
    pthread_join(r->thread, NULL);
    r->running = 0;
    BP_CHECK(tu_now_mono_ms() - t0 < 5000, "hg_consumer_run took %" PRIu64 " ms to return after stop",
             tu_now_mono_ms() - t0);
    BP_CHECK(r->result == HG_OK, "hg_consumer_run returned %s", hg_strerror(r->result));
    hg_consumer_stats(r->consumer, stats);
    hg_consumer_free(r->consumer);
    r->consumer = NULL;
}

static int cond_distinct;
static int distinct_reached(void *ctx)
{
    int done;
    (void)ctx;
    pthread_mutex_lock(&S.lock);
    done = S.distinct >= cond_distinct;
    pthread_mutex_unlock(&S.lock);
    return done;
}

static int wait_distinct(int n, int deadline_ms)
{
    cond_distinct = n;
    return tu_poll_until(distinct_reached, NULL, deadline_ms, 10);
}

static const char *dlq_group;
static long long dlq_want;
static int dlq_len_reached(void *ctx)
{
    hg_reply_t *r = NULL;
    const char *argv[3] = { "DLQ", "LEN", dlq_group };
    int ok = 0;
    (void)ctx;
    if (hg_client_command(C, 3, argv, NULL, &r) == HG_OK)
        ok = hg_reply_integer(r) >= dlq_want;
    hg_reply_free(r);
    return ok;
}

static int wait_dlq(const char *group, long long n, int deadline_ms)
{
    dlq_group = group;
    dlq_want = n;
    return tu_poll_until(dlq_len_reached, NULL, deadline_ms, 20);
}

/* The reason of DLQ LIST group entry i into buf; -1 when absent. */
static int dlq_reason(const char *group, size_t i, char *buf, size_t len)
{
    hg_reply_t *r = CMD("DLQ", "LIST", group);
    const hg_reply_t *e;
    const char *s;
    size_t n;
    int rc = -1;

    if (r != NULL && (e = hg_reply_element(r, i)) != NULL && hg_reply_count(e) >= 6 &&
        (s = hg_reply_str(hg_reply_element(e, 4), &n)) != NULL) {
        snprintf(buf, len, "%.*s", (int)n, s);
        rc = 0;
    }
    hg_reply_free(r);
    return rc;
}

/* A call made while the broker is frozen (SIGSTOP: the kernel still takes the
 * bytes), then the broker is killed (the socket resets) and restarted. */
typedef struct frozen_call {
    hg_client_t *client;
    hg_send_item_t *items;
    size_t n, ok;
    hg_err_t result;
    int generic; /* 1: hg_client_command(PING) instead of hg_send_many */
} frozen_call_t;

static void *frozen_call_main(void *arg)
{
    frozen_call_t *f = arg;
    if (f->generic) {
        hg_reply_t *r = NULL;
        f->result = hg_client_command(f->client, 1, (const char *const[]){ "PING" }, NULL, &r);
        hg_reply_free(r);
    } else {
        f->result = hg_send_many(f->client, f->items, f->n, &f->ok);
    }
    return NULL;
}

static void freeze_kill_restart(frozen_call_t *f)
{
    char e[8192];
    pthread_t t;

    BP_REQUIRE(kill(B.pid, SIGSTOP) == 0, "SIGSTOP the broker");
    BP_REQUIRE(pthread_create(&t, NULL, frozen_call_main, f) == 0, "pthread_create");
    sleep_ms(300); /* the request sits unread in the broker's socket */
    BP_REQUIRE(bp_kill9(&B) == 0, "kill -9");
    BP_REQUIRE(bp_restart(&B, e, sizeof e) == 0, "restart: %s", e);
    pthread_join(t, NULL);
}

static void test_resend_after_connection_loss(void)
{
    enum {
        N = 200
    };
    static hg_send_item_t items[N];
    static char payloads[N][16];
    hg_client_opts_t o;
    hg_error_t err;
    frozen_call_t f;
    size_t got = 0;

    start(NULL);
    hg_client_opts_init(&o);
    o.reconnect_backoff.base_ms = 50;
    o.reconnect_backoff.attempts = 0; /* until the broker is back */
    memset(&f, 0, sizeof f);
    BP_REQUIRE(hg_client_open(URI, &o, &f.client, &err) == HG_OK, "open: %s", err.message);

    /* hg_send_many: the broken pipeline is sent again, every item succeeds once. */
    for (int i = 0; i < N; i++) {
        snprintf(payloads[i], sizeof payloads[i], "m%d", i);
        memset(&items[i], 0, sizeof items[i]);
        items[i].topic = "orders";
        items[i].payload = payloads[i];
        items[i].payload_len = strlen(payloads[i]);
    }
    f.items = items;
    f.n = N;
    freeze_kill_restart(&f);
    BP_CHECK(f.result == HG_OK && f.ok == N, "hg_send_many across the kill: %s, %zu ok (%s)", hg_strerror(f.result),
             f.ok, hg_client_errmsg(f.client));
    while (got < 2 * N) {
        hg_reply_t *r = CMD("PULL", "g", "orders", "COUNT", "1000", "BLOCK", "1000");
        if (r == NULL || hg_reply_count(r) == 0) {
            hg_reply_free(r);
            break;
        }
        for (size_t i = 0; i < hg_reply_count(r); i++, got++) {
            size_t len;
            const char *p = hg_reply_str(hg_reply_element(hg_reply_element(r, i), 3), &len);
            size_t want = got;
            BP_CHECK(want < N && len == strlen(payloads[want]) && memcmp(p, payloads[want], len) == 0,
                     "delivery %zu: '%.*s'", got, (int)len, p);
        }
        hg_reply_free(r);
    }
    BP_CHECK(got == N, "%zu messages stored, want %d (the frozen broker stored none)", got, N);

    /* The generic command is not sent again: HG_ERR_IO, and the next call works. */
    f.generic = 1;
    freeze_kill_restart(&f);
    BP_CHECK(f.result == HG_ERR_IO, "PING across the kill: %s (%s), want HG_ERR_IO", hg_strerror(f.result),
             hg_client_errmsg(f.client));
    {
        hg_reply_t *r = NULL;
        BP_CHECK(hg_client_command(f.client, 1, (const char *const[]){ "PING" }, NULL, &r) == HG_OK,
                 "PING after the restart: %s", hg_client_errmsg(f.client));
        hg_reply_free(r);
    }
    hg_client_close(f.client);
}

/* ------------------------------------------------------------------------
 * Suite client: send, pipelining, levels, generic commands
 * ------------------------------------------------------------------------ */

static void test_send_many_pipelined(void)
{
    static hg_send_item_t items[MAX_MSGS];
    static char payloads[MAX_MSGS][16];
    size_t ok = 0, got = 0;
    uint64_t t0;
    hg_err_t e;

    start(FAST);
    for (int i = 0; i < MAX_MSGS; i++) {
        snprintf(payloads[i], sizeof payloads[i], "m%d", i);
        memset(&items[i], 0, sizeof items[i]);
        items[i].topic = "orders";
        items[i].key = i % 2 ? "odd" : NULL;
        items[i].payload = payloads[i];
        items[i].payload_len = strlen(payloads[i]);
        items[i].delay = i == 500 ? hg_delay_level(19) : hg_delay_none();
    }
    t0 = tu_now_mono_ms();
    e = hg_send_many(C, items, MAX_MSGS, &ok);
    fprintf(stderr, "\n  hg_send_many: %d SENDs in %" PRIu64 " ms (fsync no)\n", MAX_MSGS, tu_now_mono_ms() - t0);
    BP_CHECK(e == HG_ERR_SERVER, "hg_send_many returned %s, want the broker error of item 500", hg_strerror(e));
    BP_CHECK(ok == MAX_MSGS - 1, "%zu items succeeded, want %d", ok, MAX_MSGS - 1);
    BP_CHECK(items[500].err == HG_ERR_SERVER && strstr(items[500].error, "LEVEL") != NULL,
             "item 500: %s '%s', want the broker's LEVEL error", hg_strerror(items[500].err), items[500].error);
    BP_CHECK(strstr(hg_client_errmsg(C), "item 500") != NULL, "client message '%s'", hg_client_errmsg(C));
    for (int i = 0; i < MAX_MSGS; i++) {
        if (i == 500)
            continue;
        BP_CHECK(items[i].err == HG_OK && strlen(items[i].id) == 16, "item %d: %s id '%s' (%s)", i,
                 hg_strerror(items[i].err), items[i].id, items[i].error);
        if (i > 0 && i != 501)
            BP_CHECK(strcmp(items[i - 1].id, items[i].id) < 0, "ids not increasing at %d: %s then %s", i,
                     items[i - 1].id, items[i].id);
    }
    /* All 999 are deliverable, in order. */
    while (got < MAX_MSGS - 1) {
        hg_reply_t *r = CMD("PULL", "g", "orders", "COUNT", "1000", "BLOCK", "2000");
        BP_REQUIRE(r != NULL && hg_reply_count(r) > 0, "PULL ended after %zu of %d", got, MAX_MSGS - 1);
        for (size_t i = 0; i < hg_reply_count(r); i++, got++) {
            size_t n;
            const char *p = hg_reply_str(hg_reply_element(hg_reply_element(r, i), 3), &n);
            size_t want = got < 500 ? got : got + 1;
            BP_CHECK(p != NULL && n == strlen(payloads[want]) && memcmp(p, payloads[want], n) == 0,
                     "delivery %zu: payload '%.*s', want '%s'", got, (int)n, p ? p : "", payloads[want]);
        }
        hg_reply_free(r);
    }
    /* An empty batch and a batch of argument errors. */
    BP_CHECK(hg_send_many(C, items, 0, &ok) == HG_OK && ok == 0, "empty batch");
    items[0].topic = "";
    BP_CHECK(hg_send_many(C, items, 1, &ok) == HG_ERR_ARG && ok == 0 &&
                 strstr(items[0].error, "topic is empty") != NULL,
             "empty topic: '%s'", items[0].error);
}

static void test_send_delays_and_levels(void)
{
    hg_levels_t *levels = NULL, *parsed = NULL;
    hg_error_t err;
    char id[HG_ID_MAX], id2[HG_ID_MAX];
    hg_reply_t *r;
    hg_err_t e;

    start(FAST);
    /* LEVEL, DELAY, AT and binary payloads reach the broker as given. */
    send_one("t", "k1", "lvl", hg_delay_level(1), id);
    BP_CHECK(strlen(id) == 16, "id '%s'", id);
    send_one("t", NULL, "dly", hg_delay_ms(1500), id2);
    BP_CHECK(strcmp(id, id2) < 0, "ids %s then %s", id, id2);
    send_one("t", NULL, "at", hg_delay_at(tu_now_wall_ms() + 1000), NULL);
    e = hg_send(C, "t", "k", "a\0b\r\n", 5, hg_delay_none(), id);
    BP_CHECK(e == HG_OK, "binary payload: %s", hg_client_errmsg(C));
    r = CMD("PULL", "g", "t", "COUNT", "10");
    BP_CHECK(r != NULL && hg_reply_count(r) == 1, "only the undelayed message is ready at once");
    if (r != NULL && hg_reply_count(r) == 1) {
        size_t n;
        const char *p = hg_reply_str(hg_reply_element(hg_reply_element(r, 0), 3), &n);
        BP_CHECK(n == 5 && memcmp(p, "a\0b\r\n", 5) == 0, "binary payload changed");
    }
    hg_reply_free(r);

    /* Errors name the cause. */
    e = hg_send(C, "t", NULL, "x", 1, hg_delay_ms(4ULL * 86400000), id);
    BP_CHECK(e == HG_ERR_SERVER && strstr(hg_client_errmsg(C), "exceeds max-delay") != NULL, "DELAY 4d: %s '%s'",
             hg_strerror(e), hg_client_errmsg(C));
    BP_CHECK(id[0] == '\0', "id_out not cleared on failure");
    e = hg_send(C, "", NULL, "x", 1, hg_delay_none(), NULL);
    BP_CHECK(e == HG_ERR_ARG && strstr(hg_client_errmsg(C), "topic is empty") != NULL, "empty topic: %s",
             hg_client_errmsg(C));
    e = hg_send(C, "t", NULL, NULL, 3, hg_delay_none(), NULL);
    BP_CHECK(e == HG_ERR_ARG, "NULL payload with a length");
    e = hg_send(C, "bad topic", NULL, "x", 1, hg_delay_none(), NULL);
    BP_CHECK(e == HG_ERR_SERVER, "topic with a blank: %s", hg_strerror(e));
    /* The client works after errors, and clears its error on success. */
    send_one("t", NULL, "after", hg_delay_none(), NULL);
    BP_CHECK(hg_client_errcode(C) == HG_OK && hg_client_errmsg(C)[0] == '\0', "error not cleared");

    /* Generic command: a broker error is HG_ERR_SERVER with its text. */
    e = hg_client_command(C, 1, (const char *const[]){ "NOSUCH" }, NULL, &r);
    BP_CHECK(e == HG_ERR_SERVER && r == NULL && strstr(hg_client_errmsg(C), "unknown command") != NULL,
             "NOSUCH: %s '%s'", hg_strerror(e), hg_client_errmsg(C));
    r = CMD("ECHO", "hello");
    BP_CHECK(r != NULL && hg_reply_type(r) == HG_REPLY_STRING && strcmp(hg_reply_str(r, NULL), "hello") == 0, "ECHO");
    hg_reply_free(r);

    /* Levels: the broker's table, and the RocketMQ-style mapping. */
    e = hg_levels_fetch(C, &levels);
    BP_REQUIRE(e == HG_OK, "hg_levels_fetch: %s", hg_client_errmsg(C));
    BP_CHECK(hg_levels_count(levels) == 18, "%d levels", hg_levels_count(levels));
    BP_CHECK(hg_levels_delay_ms(levels, 1) == 1000 && hg_levels_delay_ms(levels, 18) == 7200000,
             "level 1 %" PRIu64 ", level 18 %" PRIu64, hg_levels_delay_ms(levels, 1), hg_levels_delay_ms(levels, 18));
    BP_CHECK(hg_levels_delay_ms(levels, 19) == 0 && hg_levels_delay_ms(levels, 0) == 0, "out of range");
    BP_CHECK(hg_level_for(levels, 22 * 60000, HG_ROUND_UP) == 16, "22m up");
    BP_CHECK(hg_level_for(levels, 22 * 60000, HG_ROUND_NEAREST) == 15, "22m nearest");
    BP_CHECK(hg_level_for(NULL, 25 * 60000, HG_ROUND_NEAREST) == 16, "25m nearest (tie → larger)");
    BP_CHECK(hg_level_for(NULL, 0, HG_ROUND_UP) == 1, "0 → level 1");
    BP_CHECK(hg_level_for(NULL, 3 * 3600000, HG_ROUND_UP) == 18, "3h → the last level");
    BP_CHECK(hg_level_for(NULL, 1001, HG_ROUND_UP) == 2 && hg_level_for(NULL, 1001, HG_ROUND_NEAREST) == 1, "1001 ms");
    hg_levels_free(levels);
    BP_CHECK(hg_levels_parse("1s 5s, 1m", &parsed, &err) == HG_OK && hg_levels_count(parsed) == 3, "parse");
    BP_CHECK(hg_level_for(parsed, 10000, HG_ROUND_UP) == 3, "custom table");
    hg_levels_free(parsed);
    BP_CHECK(hg_levels_parse("5s 1s", &parsed, &err) == HG_ERR_ARG && parsed == NULL &&
                 strstr(err.message, "bad level table") != NULL,
             "unsorted table: '%s'", err.message);
}

static void test_auth_refused(void)
{
    char uri[160];
    hg_client_t *c = NULL;
    hg_error_t err;
    hg_err_t e;

    start(FAST);
    snprintf(uri, sizeof uri, "hourglass://alice:s3cret@127.0.0.1:%d", B.port);
    e = hg_client_open(uri, NULL, &c, &err);
    BP_CHECK(e == HG_ERR_AUTH && c == NULL, "open with credentials: %s '%s'", hg_strerror(e), err.message);
    BP_CHECK(strstr(err.message, "authentication as 'alice' failed") != NULL && strstr(err.message, "s3cret") == NULL,
             "message '%s'", err.message);
}

/* hg_client_set_read_timeout: a call to a frozen broker fails with
 * HG_ERR_TIMEOUT after the timeout set (not the 10 s it was opened with);
 * set back, the next call reconnects and succeeds. */
static void test_read_timeout_set(void)
{
    hg_reply_t *r = NULL;
    start(FAST);
    BP_CHECK(hg_client_read_timeout(C) == 10000, "opened with %u ms", hg_client_read_timeout(C));
    hg_client_set_read_timeout(C, 300);
    BP_CHECK(hg_client_read_timeout(C) == 300, "set to %u ms", hg_client_read_timeout(C));
    BP_REQUIRE(kill(B.pid, SIGSTOP) == 0, "SIGSTOP the broker");
    uint64_t t0 = tu_now_mono_ms();
    hg_err_t e = hg_client_command(C, 1, (const char *const[]){ "PING" }, NULL, &r);
    uint64_t took = tu_now_mono_ms() - t0;
    BP_REQUIRE(kill(B.pid, SIGCONT) == 0, "SIGCONT the broker");
    hg_reply_free(r);
    r = NULL;
    BP_CHECK(e == HG_ERR_TIMEOUT && took >= 300 && took < 5000, "PING to a frozen broker: %s after %llu ms",
             hg_strerror(e), (unsigned long long)took);
    hg_client_set_read_timeout(C, 10000);
    e = hg_client_command(C, 1, (const char *const[]){ "PING" }, NULL, &r);
    /* the timeout for DLQ … ALL: 50 µs more an entry, at most a day, forever stays forever */
    BP_CHECK(hg_dlq_all_read_timeout(5000, 1000000) == 55000 && hg_dlq_all_read_timeout(5000, 0) == 5000 &&
                 hg_dlq_all_read_timeout(0, 1000000) == 0 && hg_dlq_all_read_timeout(5000, 1LL << 40) == 86400000,
             "hg_dlq_all_read_timeout: %u %u %u %u", hg_dlq_all_read_timeout(5000, 1000000),
             hg_dlq_all_read_timeout(5000, 0), hg_dlq_all_read_timeout(0, 1000000),
             hg_dlq_all_read_timeout(5000, 1LL << 40));
    const char info[] = "# Storage\r\nbackup_name:nightly\r\nbackup:x\r\nbackup_last_error:\r\nlast:7";
    size_t vlen = 0;
    const char *v = hg_info_value(info, sizeof info - 1, "backup_name", &vlen);
    BP_CHECK(v != NULL && vlen == 7 && memcmp(v, "nightly", 7) == 0, "hg_info_value backup_name: %.*s", (int)vlen,
             v ? v : "");
    v = hg_info_value(info, sizeof info - 1, "backup_last_error", &vlen);
    BP_CHECK(v != NULL && vlen == 0, "hg_info_value of an empty value: %zu", vlen);
    v = hg_info_value(info, sizeof info - 1, "last", &vlen);
    BP_CHECK(v != NULL && vlen == 1 && *v == '7', "hg_info_value of the last line, without a line end");
    BP_CHECK(hg_info_value(info, sizeof info - 1, "back", &vlen) == NULL &&
                 hg_info_value(info, sizeof info - 1, "Storage", &vlen) == NULL,
             "hg_info_value matched a key prefix or a section");
    BP_CHECK(hg_topic_purge_read_timeout(5000) == 600000 && hg_topic_purge_read_timeout(0) == 0 &&
                 hg_topic_purge_read_timeout(900000) == 900000,
             "hg_topic_purge_read_timeout: %u %u %u", hg_topic_purge_read_timeout(5000), hg_topic_purge_read_timeout(0),
             hg_topic_purge_read_timeout(900000));
    BP_CHECK(e == HG_OK, "PING after SIGCONT: %s %s", hg_strerror(e), hg_client_errmsg(C));
    hg_reply_free(r);
}

/* A payload past the broker's max-bulk: the broker answers "-ERR Protocol
 * error: … (max-bulk)" and closes before it read the rest. The caller gets
 * that answer (HG_ERR_SERVER), not a lost connection, and the SEND is not
 * sent again; the next call reconnects. In a pipeline only that item fails
 * with it. One past max-payload is refused with the connection kept. */
static void test_send_past_max_bulk(void)
{
    static const char *const small[] = { "--fsync", "no", "--max-bulk", "64kb", "--max-payload", "32kb", NULL };
    size_t big = 32u << 20; /* more than the loopback socket buffers take in before the broker closes */
    char *payload = calloc(1, big), id[HG_ID_MAX];
    hg_err_t e;

    BP_REQUIRE(payload != NULL, "calloc");
    start(small);
    e = hg_send(C, "t", NULL, payload, 32 * 1024 + 1, hg_delay_none(), id);
    BP_CHECK(e == HG_ERR_SERVER && strstr(hg_client_errmsg(C), "max-payload") != NULL,
             "a payload 1 byte past max-payload: %s '%s'", hg_strerror(e), hg_client_errmsg(C));
    uint64_t t0 = tu_now_mono_ms();
    e = hg_send(C, "t", NULL, payload, big, hg_delay_none(), id);
    BP_CHECK(e == HG_ERR_SERVER && strstr(hg_client_errmsg(C), "max-bulk") != NULL && id[0] == '\0',
             "a 32 MiB payload past max-bulk 64kb: %s '%s' (want the broker's answer)", hg_strerror(e),
             hg_client_errmsg(C));
    BP_CHECK(tu_now_mono_ms() - t0 < 5000, "the refused SEND took %" PRIu64 " ms", tu_now_mono_ms() - t0);
    e = hg_send(C, "t", NULL, "after", 5, hg_delay_none(), id);
    BP_CHECK(e == HG_OK && strlen(id) == 16, "the next SEND reconnects: %s '%s'", hg_strerror(e), hg_client_errmsg(C));

    hg_send_item_t items[3] = {
        { .topic = "t", .payload = "one", .payload_len = 3 },
        { .topic = "t", .payload = payload, .payload_len = big },
        { .topic = "t", .payload = "three", .payload_len = 5 },
    };
    size_t ok = 0;
    e = hg_send_many(C, items, 3, &ok);
    BP_CHECK(items[0].err == HG_OK && items[1].err == HG_ERR_SERVER && strstr(items[1].error, "max-bulk") != NULL,
             "pipelined: item 0 %s, item 1 %s '%s'", hg_strerror(items[0].err), hg_strerror(items[1].err),
             items[1].error);
    BP_CHECK(items[2].err == HG_OK && ok == 2 && e == HG_ERR_SERVER,
             "pipelined: item 2 sent again after the broker closed: %s '%s', ok %zu, returned %s",
             hg_strerror(items[2].err), items[2].error, ok, hg_strerror(e));
    hg_reply_t *r = CMD("PULL", "g", "t", "COUNT", "100");
    BP_CHECK(r != NULL && hg_reply_count(r) == 3, "the topic holds %zu messages, want 3 (after, one, three)",
             r != NULL ? hg_reply_count(r) : 0);
    hg_reply_free(r);
    free(payload);
}

/* A broker whose users file has shop (producer) and canceller (consumer),
 * passwords "pw-<name>"; URI without credentials; C logged in as shop. */
static void start_with_users(char *dir, size_t dirlen)
{
    char path[600], e[8192];
    const tu_user_t users[] = { { "shop", "producer", "pw-shop" }, { "canceller", "consumer", "pw-canceller" } };
    hg_error_t err;

    BP_REQUIRE(tu_mkdtemp("hg-client-users", dir, dirlen) == 0, "temp dir");
    snprintf(path, sizeof path, "%s/users", dir);
    BP_REQUIRE(tu_write_users_file(path, users, 2, e, sizeof e) == 0, "%s", e);
    const char *extra[] = { "--fsync", "no", "--users-file", path, NULL };
    BP_REQUIRE(bp_start(&B, extra, e, sizeof e) == 0, "start the broker: %s", e);
    snprintf(URI, sizeof URI, "hourglass://127.0.0.1:%d", B.port);
    char uri[200];
    snprintf(uri, sizeof uri, "hourglass://shop:pw-shop@127.0.0.1:%d", B.port);
    BP_REQUIRE(hg_client_open(uri, NULL, &C, &err) == HG_OK, "open as shop: %s", err.message);
}

/* A thread that makes the stop fd readable after a pause. */
typedef struct stopper {
    int fd;
    unsigned after_ms;
} stopper_t;

static void *stop_later(void *arg)
{
    const stopper_t *s = arg;
    usleep(s->after_ms * 1000u);
    if (write(s->fd, "x", 1) != 1)
        perror("stop_later: write");
    return NULL;
}

/* One command on client k: its code, with the reply dropped. */
static hg_err_t run_on(hg_client_t *k, const char *const *argv, int argc)
{
    hg_reply_t *r = NULL;
    hg_err_t e = hg_client_command(k, argc, argv, NULL, &r);
    hg_reply_free(r);
    return e;
}


/* What a notice of hg_client_command_notice saw: how often it ran, and when
 * (ms after the call began). */
typedef struct notice_seen {
    int calls;
    uint64_t t0, at_ms;
} notice_seen_t;

static void notice_note(void *arg)
{
    notice_seen_t *n = arg;
    n->calls++;
    n->at_ms = tu_now_mono_ms() - n->t0;
}

/* hg_client_command_notice: a reply before notice_ms — PING, and an error
 * reply (the broker's refusal is a reply too) — returns without the notice;
 * a reply after it (PULL BLOCK 4000) calls the notice once, at about
 * notice_ms, and the call still returns the reply. A NULL notice is
 * HG_ERR_ARG, named. */
static void test_command_notice(void)
{
    hg_reply_t *r = NULL;
    notice_seen_t n = { 0, 0, 0 };
    hg_err_t e;
    uint64_t took;

    start(FAST);
    n.t0 = tu_now_mono_ms();
    e = hg_client_command_notice(C, 1, (const char *const[]){ "PING" }, NULL, 2000, notice_note, &n, &r);
    BP_CHECK(e == HG_OK && r != NULL && n.calls == 0, "PING before the bound: %s %s, %d notices", hg_strerror(e),
             hg_client_errmsg(C), n.calls);
    hg_reply_free(r);
    r = NULL;
    e = hg_client_command_notice(C, 2, (const char *const[]){ "NOSUCHCOMMAND", "x" }, NULL, 2000, notice_note, &n, &r);
    BP_CHECK(e == HG_ERR_SERVER && r == NULL && n.calls == 0 && strstr(hg_client_errmsg(C), "unknown command") != NULL,
             "an error reply before the bound: %s %s, %d notices", hg_strerror(e), hg_client_errmsg(C), n.calls);

    hg_reply_free(CMD("GROUP", "CREATE", "g", "t"));
    n.t0 = tu_now_mono_ms();
    e = hg_client_command_notice(C, 5, (const char *const[]){ "PULL", "g", "t", "BLOCK", "4000" }, NULL, 200,
                                 notice_note, &n, &r);
    took = tu_now_mono_ms() - n.t0;
    BP_CHECK(e == HG_OK && r != NULL && hg_reply_type(r) == HG_REPLY_ARRAY && hg_reply_count(r) == 0,
             "PULL BLOCK 4000 after the bound: %s %s", hg_strerror(e), hg_client_errmsg(C));
    /* "At about notice_ms" with room for a loaded machine (10x the 200 ms),
     * and well before the reply, which cannot come before 4 s. */
    BP_CHECK(n.calls == 1 && n.at_ms >= 200 && n.at_ms < 2000 && took >= 4000,
             "the notice of a slow reply: %d calls, at %llu ms, reply after %llu ms", n.calls,
             (unsigned long long)n.at_ms, (unsigned long long)took);
    hg_reply_free(r);
    r = NULL;

    e = hg_client_command_notice(C, 1, (const char *const[]){ "PING" }, NULL, 100, NULL, NULL, &r);
    BP_CHECK(e == HG_ERR_ARG && r == NULL && strstr(hg_client_errmsg(C), "notice is NULL") != NULL,
             "a NULL notice: %s %s", hg_strerror(e), hg_client_errmsg(C));
}

/* hg_client_clone: a second connection as the same user, independent of
 * the first; hg_client_set_stop_fd: another thread stops a call waiting on
 * a frozen broker (an open connection, then AUTH while connecting), and a
 * readable fd stops the next call before it connects. */
static void test_clone_and_stop_fd(void)
{
    char dir[512];
    hg_client_t *clone = NULL, *fresh = NULL;
    hg_error_t err;
    int pfd[2];
    pthread_t th;
    const char *send[] = { "SEND", "orders", "from-the-clone" };

    start_with_users(dir, sizeof dir);
    BP_REQUIRE(hg_client_clone(C, &clone, &err) == HG_OK, "clone: %s", err.message);
    hg_client_close(C); /* the clone owns its own copy of everything */
    C = NULL;
    hg_err_t e = run_on(clone, send, 3);
    BP_CHECK(e == HG_OK, "SEND on the clone, logged in as shop (producer): %s %s", hg_strerror(e),
             hg_client_errmsg(clone));
    e = run_on(clone, (const char *const[]){ "PULL", "g", "orders" }, 3);
    BP_CHECK(e == HG_ERR_SERVER && strstr(hg_client_errmsg(clone), "NOPERM User shop") != NULL,
             "and with shop's roles only: PULL refused (%s)", hg_client_errmsg(clone));
    BP_CHECK(hg_client_clone(NULL, &fresh, &err) == HG_ERR_ARG && fresh == NULL && strstr(err.message, "NULL"),
             "clone of NULL: HG_ERR_ARG (%s)", err.message);

    BP_REQUIRE(pipe(pfd) == 0, "pipe");
    hg_client_set_stop_fd(clone, pfd[0]);
    BP_REQUIRE(kill(B.pid, SIGSTOP) == 0, "SIGSTOP the broker");
    stopper_t st = { pfd[1], 300 };
    BP_REQUIRE(pthread_create(&th, NULL, stop_later, &st) == 0, "stopper thread");
    uint64_t t0 = tu_now_mono_ms();
    e = run_on(clone, send, 3);
    uint64_t took = tu_now_mono_ms() - t0;
    pthread_join(th, NULL);
    BP_CHECK(e == HG_ERR_STOPPED && took >= 250 && took < 5000,
             "a SEND waiting on the frozen broker, stopped by another thread: %s after %llu ms (read timeout 10 s)",
             hg_strerror(e), (unsigned long long)took);
    e = run_on(clone, send, 3);
    BP_CHECK(e == HG_ERR_STOPPED && strstr(hg_client_errmsg(clone), "stopped before connecting") != NULL,
             "while the fd stays readable, the next call stops before it connects: %s", hg_client_errmsg(clone));

    /* A new connection: stopped while it waits for AUTH's answer. */
    char drain;
    BP_REQUIRE(read(pfd[0], &drain, 1) == 1, "drain the stop fd");
    BP_REQUIRE(hg_client_clone(clone, &fresh, &err) == HG_OK, "clone of the clone: %s", err.message);
    hg_client_set_stop_fd(fresh, pfd[0]);
    BP_REQUIRE(pthread_create(&th, NULL, stop_later, &st) == 0, "stopper thread");
    t0 = tu_now_mono_ms();
    e = run_on(fresh, send, 3);
    took = tu_now_mono_ms() - t0;
    pthread_join(th, NULL);
    BP_CHECK(e == HG_ERR_STOPPED && took >= 250 && took < 5000 && strstr(hg_client_errmsg(fresh), "during AUTH"),
             "connecting to the frozen broker, stopped during AUTH: %s after %llu ms (%s)", hg_strerror(e),
             (unsigned long long)took, hg_client_errmsg(fresh));
    BP_REQUIRE(kill(B.pid, SIGCONT) == 0, "SIGCONT the broker");

    BP_REQUIRE(read(pfd[0], &drain, 1) == 1, "drain the stop fd");
    e = run_on(fresh, send, 3);
    BP_CHECK(e == HG_OK, "the fd drained: the next call connects, logs in and is answered: %s %s", hg_strerror(e),
             hg_client_errmsg(fresh));
    hg_client_set_stop_fd(clone, -1);
    e = run_on(clone, send, 3);
    BP_CHECK(e == HG_OK, "stop fd -1: the clone works again: %s", hg_client_errmsg(clone));
    hg_client_close(fresh);
    hg_client_close(clone);
    close(pfd[0]);
    close(pfd[1]);
    tu_rmtree(dir);
}

static void test_credentials(void)
{
    char dir[512];
    hg_consumer_opts_t o;
    hg_client_opts_t co;
    hg_consumer_stats_t st;
    runner_t run;
    hg_error_t err;
    hg_client_t *anon = NULL;
    hg_reply_t *r = NULL;

    start_with_users(dir, sizeof dir);
    seen_reset(MODE_DONE, 0);
    send_one("orders", "k", "m0", hg_delay_none(), NULL);
    send_one("orders", "k", "m1", hg_delay_none(), NULL);

    /* Without credentials: connected, but every command is refused. */
    BP_REQUIRE(hg_client_open(URI, NULL, &anon, &err) == HG_OK, "open: %s", err.message);
    BP_CHECK(hg_client_command(anon, 1, (const char *const[]){ "LEVELS" }, NULL, &r) == HG_ERR_SERVER &&
                 strncmp(hg_client_errmsg(anon), "NOAUTH", 6) == 0,
             "LEVELS without AUTH: '%s'", hg_client_errmsg(anon));
    hg_reply_free(r);
    hg_client_close(anon);

    /* The user in the URI, the password apart (opts.password: a daemon's password-file): logged in as
     * that user; without a password anywhere, HG_ERR_ARG naming the user, before any connection. */
    {
        char uri[160];
        hg_client_opts_t po;
        hg_client_t *c = NULL;
        snprintf(uri, sizeof uri, "hourglass://canceller@127.0.0.1:%d", B.port);
        hg_client_opts_init(&po);
        po.password = "pw-canceller";
        BP_REQUIRE(hg_client_open(uri, &po, &c, &err) == HG_OK, "open %s with opts.password: %s", uri, err.message);
        BP_CHECK(hg_client_command(c, 1, (const char *const[]){ "LEVELS" }, NULL, &r) == HG_OK,
                 "LEVELS as the URI's user with opts.password: %s", hg_client_errmsg(c));
        hg_reply_free(r);
        r = NULL;
        hg_client_close(c);
        c = NULL;
        po.password = "wrong"; /* hg_client_open logs in: the refusal is its answer */
        hg_err_t e = hg_client_open(uri, &po, &c, &err);
        BP_CHECK(e == HG_ERR_AUTH && c == NULL && strstr(err.message, "'canceller'") != NULL,
                 "a wrong opts.password for the URI's user: %s '%s'", hg_strerror(e), err.message);
        hg_client_close(c);
        c = NULL;
        e = hg_client_open(uri, NULL, &c, &err);
        BP_CHECK(e == HG_ERR_ARG && c == NULL && strstr(err.message, "no password given for user 'canceller'") != NULL,
                 "the URI's user with no password anywhere: %s '%s'", hg_strerror(e), err.message);
        /* the library cannot know its caller: its message names no option of any program */
        BP_CHECK(strstr(err.message, "password-file") == NULL && strstr(err.message, "opts.") == NULL &&
                     strstr(err.message, "--") == NULL,
                 "the library's message names a program's option: '%s'", err.message);
        po.password = NULL;
        po.user = "canceller"; /* a user in the options, no password anywhere: the same words */
        snprintf(uri, sizeof uri, "hourglass://127.0.0.1:%d", B.port);
        e = hg_client_open(uri, &po, &c, &err);
        BP_CHECK(e == HG_ERR_ARG && c == NULL &&
                     strstr(err.message, "no password given for user 'canceller'") != NULL &&
                     strstr(err.message, "opts.") == NULL,
                 "opts.user with no password anywhere: %s '%s'", hg_strerror(e), err.message);
    }

    /* The consumer loop logs in with opts.user / opts.password on every connection. hg_consumer_new
     * copies them: a caller that wipes its own copies right after (what hg_client_opts_t.password
     * allows, e.g. a password read from a file) still logs in, on every worker's connection. */
    char user[32], password[32];
    snprintf(user, sizeof user, "canceller");
    snprintf(password, sizeof password, "pw-canceller");
    consumer_opts(&o, &co, "cancel", "orders");
    co.user = user;
    co.password = password;
    o.workers = 2;
    memset(&run, 0, sizeof run);
    BP_REQUIRE(hg_consumer_new(&o, &run.consumer, &err) == HG_OK, "hg_consumer_new: %s", err.message);
    snprintf(user, sizeof user, "wiped");
    memset(password, 0, sizeof password);
    BP_REQUIRE(pthread_create(&run.thread, NULL, run_thread, &run) == 0, "pthread_create");
    run.running = 1;
    active_runner = &run;
    BP_CHECK(wait_distinct(2, 15000) == 0, "only %d of 2 messages handled with credentials", S.distinct);
    consumer_finish(&run, &st);
    BP_CHECK(st.done == 2 && st.errors == 0, "stats: done %" PRIu64 " errors %" PRIu64, st.done, st.errors);

    /* A wrong password: HG_ERR_AUTH, at once (not retried forever); no credentials at all (every PULL
     * answered NOAUTH) the same. Each runs on a thread: one that never gives up is stopped after 10 s. */
    struct {
        const char *user, *password;
        hg_err_t want;
        const char *text;
    } bad[] = {
        { "canceller", "wrong", HG_ERR_AUTH, "WRONGPASS" },
        { "shop", "pw-shop", HG_ERR_SERVER, "NOPERM User shop (roles: producer)" },
        { NULL, NULL, HG_ERR_AUTH, "NOAUTH" },
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        consumer_opts(&o, &co, "cancel", "orders");
        co.user = bad[i].user;
        co.password = bad[i].password;
        consumer_start(&run, &o);
        int gave_up = tu_poll_until(runner_returned, &run, 10000, 20) == 0;
        BP_CHECK(gave_up, "the consumer as %s kept trying for 10 s", bad[i].user ? bad[i].user : "nobody");
        hg_consumer_stop(run.consumer);
        pthread_join(run.thread, NULL);
        run.running = 0;
        active_runner = NULL;
        hg_consumer_last_error(run.consumer, &err);
        BP_CHECK(run.result == bad[i].want, "consumer as %s/%s returned %s, want %s (%s)",
                 bad[i].user ? bad[i].user : "(none)", bad[i].password ? bad[i].password : "(none)",
                 hg_strerror(run.result), hg_strerror(bad[i].want), err.message);
        BP_CHECK(strstr(err.message, bad[i].text) != NULL, "last error '%s' lacks '%s'", err.message, bad[i].text);
        hg_consumer_free(run.consumer);
        run.consumer = NULL;
    }
    tu_rmtree(dir);
}

/* ------------------------------------------------------------------------
 * Suite consumer
 * ------------------------------------------------------------------------ */

static void test_round_trip(void)
{
    hg_consumer_opts_t o;
    hg_client_opts_t co;
    hg_consumer_stats_t st;
    runner_t run;
    uint64_t sent_ms;
    hg_reply_t *r;
    char payload[16];
    const int n = 60;

    start(FAST);
    seen_reset(MODE_DONE, 1);
    for (int i = 0; i < n; i++) {
        snprintf(payload, sizeof payload, "m%d", i);
        send_one("orders", "k", payload, hg_delay_none(), NULL);
    }
    sent_ms = tu_now_wall_ms();
    send_one("orders", "dk", "delayed", hg_delay_ms(1200), NULL);

    consumer_opts(&o, &co, "cancel", "orders");
    o.workers = 3;
    o.count = 4;
    consumer_start(&run, &o);
    BP_CHECK(wait_distinct(n, 15000) == 0, "only %d of %d messages handled", S.distinct, n);
    {
        uint64_t end = tu_now_mono_ms() + 10000;
        while (tu_now_mono_ms() < end) {
            pthread_mutex_lock(&S.lock);
            int got = S.delayed_recv_ms != 0;
            pthread_mutex_unlock(&S.lock);
            if (got)
                break;
            sleep_ms(20);
        }
    }
    consumer_finish(&run, &st);

    for (int i = 0; i < n; i++)
        BP_CHECK(S.count[i] == 1, "message m%d handled %d times, want exactly once", i, S.count[i]);
    BP_CHECK(S.bad == 0, "%d unknown messages", S.bad);
    BP_CHECK(S.delayed_recv_ms >= sent_ms + 1000, "the DELAY 1200 message arrived %" PRId64 " ms after SEND",
             (int64_t)(S.delayed_recv_ms - sent_ms));
    BP_CHECK(S.delayed_due_ms >= sent_ms + 1000, "due_ms %" PRIu64 " too early", S.delayed_due_ms);
    BP_CHECK(st.delivered == (uint64_t)n + 1 && st.done == (uint64_t)n + 1,
             "stats: delivered %" PRIu64 ", done %" PRIu64 ", want %d", st.delivered, st.done, n + 1);
    BP_CHECK(st.reconnects == 0, "%" PRIu64 " reconnects", st.reconnects);
    BP_CHECK(st.retried == 0 && st.nacked == 0 && st.failed == 0 && st.lease_lost == 0 && st.errors == 0,
             "stats: retried %" PRIu64 " nacked %" PRIu64 " failed %" PRIu64 " lease_lost %" PRIu64 " errors %" PRIu64,
             st.retried, st.nacked, st.failed, st.lease_lost, st.errors);
    /* Everything was ACKed: nothing comes back. */
    r = CMD("PULL", "cancel", "orders", "COUNT", "100");
    BP_CHECK(r != NULL && hg_reply_count(r) == 0, "%zu messages left after the round trip", r ? hg_reply_count(r) : 0);
    hg_reply_free(r);
}

/* The batch handler: "ok…" done, "bad…" failed, "again…" retried once,
 * "forget…" left alone (HG_RETRY on entry) until the attempts run out. */
static struct {
    int calls;
    size_t largest;
} BH;

static void batch_handler(hg_batch_item_t *items, size_t n, void *arg)
{
    (void)arg;
    pthread_mutex_lock(&S.lock);
    BH.calls++;
    if (n > BH.largest)
        BH.largest = n;
    pthread_mutex_unlock(&S.lock);
    for (size_t i = 0; i < n; i++) {
        const char *p = items[i].msg.payload;
        if (strncmp(p, "ok", 2) == 0) {
            items[i].outcome = HG_DONE;
        } else if (strncmp(p, "bad", 3) == 0) {
            items[i].outcome = HG_FAIL;
            snprintf(items[i].reason, sizeof items[i].reason, "bad payload %s", p);
        } else if (strncmp(p, "again", 5) == 0) {
            items[i].outcome = items[i].msg.attempt == 0 ? HG_RETRY : HG_DONE;
        }
    }
}

static void test_batch_handler(void)
{
    hg_consumer_opts_t o;
    hg_client_opts_t co;
    hg_consumer_stats_t st;
    runner_t run;
    char payload[16];

    start(FAST);
    hg_reply_free(CMD("GROUP", "CREATE", "gb", "tb", "MAXRETRY", "0"));
    for (int i = 0; i < 20; i++) {
        snprintf(payload, sizeof payload, "ok%d", i);
        send_one("tb", "k", payload, hg_delay_none(), NULL);
    }
    send_one("tb", "k", "bad1", hg_delay_none(), NULL);
    send_one("tb", "k", "bad2", hg_delay_none(), NULL);
    for (int i = 0; i < 3; i++) {
        snprintf(payload, sizeof payload, "again%d", i);
        send_one("tb", "k", payload, hg_delay_none(), NULL);
    }
    send_one("tb", "k", "forget", hg_delay_none(), NULL);

    memset(&BH, 0, sizeof BH);
    consumer_opts(&o, &co, "gb", "tb");
    o.handler = NULL;
    o.batch_handler = batch_handler;
    o.count = 50;
    o.retry = (hg_backoff_t){ .base_ms = 50, .factor = 2, .cap_ms = 200, .attempts = 2, .jitter = 0 };
    consumer_start(&run, &o);
    BP_CHECK(wait_dlq("gb", 3, 10000) == 0, "bad1, bad2 and forget did not reach the DLQ");
    consumer_finish(&run, &st);

    BP_CHECK(BH.largest == 26, "the largest call had %zu messages, want the whole PULL of 26", BH.largest);
    BP_CHECK(BH.calls == 3, "handler called %d times, want 3 (all, then again+forget, then forget)", BH.calls);
    BP_CHECK(st.delivered == 26 && st.done == 23 && st.failed == 2 && st.nacked == 1 && st.retried == 5,
             "stats: delivered %" PRIu64 " done %" PRIu64 " failed %" PRIu64 " nacked %" PRIu64 " retried %" PRIu64,
             st.delivered, st.done, st.failed, st.nacked, st.retried);
    BP_CHECK(st.lease_lost == 0 && st.errors == 0, "lease_lost %" PRIu64 ", errors %" PRIu64, st.lease_lost, st.errors);
    hg_reply_t *r = CMD("PULL", "gb", "tb", "COUNT", "100");
    BP_CHECK(r != NULL && hg_reply_count(r) == 0, "%zu messages left", r ? hg_reply_count(r) : 0);
    hg_reply_free(r);
}

static void test_retry_backoff_then_nack(void)
{
    hg_consumer_opts_t o;
    hg_client_opts_t co;
    hg_consumer_stats_t st;
    runner_t run;
    char reason[512] = "";

    start(FAST);
    hg_reply_free(CMD("GROUP", "CREATE", "g", "t", "MAXRETRY", "0"));
    seen_reset(MODE_RETRY, 0);
    send_one("t", "order-7", "m7", hg_delay_none(), NULL);

    consumer_opts(&o, &co, "g", "t");
    o.retry.base_ms = 100;
    o.retry.factor = 2.0;
    o.retry.cap_ms = 1000;
    o.retry.attempts = 2;
    o.retry.jitter = 0.0;
    consumer_start(&run, &o);
    BP_CHECK(wait_dlq("g", 1, 10000) == 0, "the message did not reach the DLQ");
    consumer_finish(&run, &st);

    BP_CHECK(S.calls == 3, "handler called %d times, want 3 (1 + 2 local retries)", S.calls);
    for (int i = 0; i < 3 && i < S.calls; i++)
        BP_CHECK(S.attempt[i] == (unsigned)i, "call %d had attempt %u", i, S.attempt[i]);
    if (S.calls >= 3) {
        uint64_t gap1 = S.call_ms[1] - S.call_ms[0], gap2 = S.call_ms[2] - S.call_ms[1];
        BP_CHECK(gap1 >= 100 && gap1 < 1000, "first backoff %" PRIu64 " ms, want 100", gap1);
        BP_CHECK(gap2 >= 200 && gap2 < 1500, "second backoff %" PRIu64 " ms, want 200", gap2);
    }
    BP_CHECK(st.retried == 2 && st.nacked == 1 && st.done == 0 && st.failed == 0,
             "stats: retried %" PRIu64 " nacked %" PRIu64 " done %" PRIu64 " failed %" PRIu64, st.retried, st.nacked,
             st.done, st.failed);
    BP_CHECK(dlq_reason("g", 0, reason, sizeof reason) == 0 &&
                 strcmp(reason, "db locked (gave up after 3 local attempts)") == 0,
             "DLQ reason '%s'", reason);
}

static void test_fail_goes_to_dlq(void)
{
    hg_consumer_opts_t o;
    hg_client_opts_t co;
    hg_consumer_stats_t st;
    runner_t run;
    char reason[512] = "";
    hg_reply_t *r;

    start(FAST);
    /* The default MAXRETRY (16): HG_FAIL must still park it at once (NACK … DLQ). */
    hg_reply_free(CMD("GROUP", "CREATE", "g", "t"));
    seen_reset(MODE_FAIL_BAD, 0);
    send_one("t", "k-bad", "not-an-order", hg_delay_none(), NULL);
    send_one("t", "k-good", "m1", hg_delay_none(), NULL);

    consumer_opts(&o, &co, "g", "t");
    consumer_start(&run, &o);
    BP_CHECK(wait_dlq("g", 1, 10000) == 0, "the failed message did not reach the DLQ");
    BP_CHECK(wait_distinct(1, 10000) == 0, "the good message was not handled");
    consumer_finish(&run, &st);

    BP_CHECK(st.failed == 1 && st.done == 1 && st.retried == 0 && st.nacked == 0,
             "stats: failed %" PRIu64 " done %" PRIu64 " retried %" PRIu64 " nacked %" PRIu64, st.failed, st.done,
             st.retried, st.nacked);
    BP_CHECK(dlq_reason("g", 0, reason, sizeof reason) == 0 &&
                 strcmp(reason, "payload 'not-an-order' is not an order id") == 0,
             "DLQ reason '%s'", reason);
    r = CMD("DLQ", "LIST", "g");
    if (r != NULL && hg_reply_count(r) == 1) {
        const hg_reply_t *e = hg_reply_element(r, 0);
        BP_CHECK(strcmp(hg_reply_str(hg_reply_element(e, 1), NULL), "k-bad") == 0, "DLQ key");
        BP_CHECK(strcmp(hg_reply_str(hg_reply_element(e, 2), NULL), "not-an-order") == 0, "DLQ payload");
    } else {
        BP_CHECK(0, "DLQ LIST has %zu entries, want 1", r ? hg_reply_count(r) : 0);
    }
    hg_reply_free(r);
}

static hg_consumer_t *stats_target;
static uint64_t stats_want_done;
static int done_reached(void *ctx)
{
    hg_consumer_stats_t st;
    (void)ctx;
    hg_consumer_stats(stats_target, &st);
    return st.done + st.failed + st.nacked >= stats_want_done;
}

/* Both groups park a message in the DLQ at its first failure (MAXRETRY 0),
 * so an expired lease is visible at once as a DLQ entry (a plain group would
 * redeliver it only after level 3, 10 s). */
static void test_touch_keeps_slow_handler_lease(void)
{
    hg_consumer_opts_t o;
    hg_client_opts_t co;
    hg_consumer_stats_t st;
    runner_t run;

    start(FAST);
    hg_reply_free(CMD("GROUP", "CREATE", "touched", "t1", "MAXRETRY", "0"));
    hg_reply_free(CMD("GROUP", "CREATE", "untouched", "t2", "MAXRETRY", "0"));

    /* With TOUCH: a 3.5 s handler on a 1.5 s lease keeps its lease. */
    seen_reset(MODE_SLOW_FIRST, 3500);
    send_one("t1", NULL, "m1", hg_delay_none(), NULL);
    consumer_opts(&o, &co, "touched", "t1");
    o.workers = 2;
    o.lease_ms = 1500; /* touch every 750 ms: 750 ms of slack for a loaded machine */
    consumer_start(&run, &o);
    stats_target = run.consumer;
    stats_want_done = 1;
    BP_CHECK(tu_poll_until(done_reached, NULL, 12000, 20) == 0, "the slow handler did not finish");
    consumer_finish(&run, &st);
    BP_CHECK(S.count[1] == 1 && st.delivered == 1, "delivered %" PRIu64 " times, want once", st.delivered);
    BP_CHECK(st.touched >= 3, "touched %" PRIu64 " times, want >= 3 in 3.5 s at 750 ms", st.touched);
    BP_CHECK(st.lease_lost == 0 && st.done == 1, "lease_lost %" PRIu64 " done %" PRIu64, st.lease_lost, st.done);
    BP_CHECK(CMD_INT("DLQ", "LEN", "touched") == 0, "the touched message expired into the DLQ");

    /* The control, without TOUCH: the lease expires under the slow handler
     * (the message is parked in the DLQ) and the late ACK finds nothing. */
    seen_reset(MODE_SLOW_FIRST, 3500);
    send_one("t2", NULL, "m2", hg_delay_none(), NULL);
    consumer_opts(&o, &co, "untouched", "t2");
    o.lease_ms = 1500;
    o.touch_interval_ms = HG_TOUCH_NEVER;
    consumer_start(&run, &o);
    stats_target = run.consumer;
    stats_want_done = 1;
    BP_CHECK(tu_poll_until(done_reached, NULL, 12000, 20) == 0, "the slow handler did not finish");
    consumer_finish(&run, &st);
    BP_CHECK(st.touched == 0 && st.lease_lost == 1, "touched %" PRIu64 " lease_lost %" PRIu64 ", want 0 and 1",
             st.touched, st.lease_lost);
    BP_CHECK(CMD_INT("DLQ", "LEN", "untouched") == 1, "without TOUCH the lease did not expire");
}

static hg_consumer_t *signal_target;
static void on_sigusr1(int sig)
{
    (void)sig;
    hg_consumer_stop(signal_target);
}

static void test_stop_from_signal_handler(void)
{
    hg_consumer_opts_t o;
    hg_client_opts_t co;
    hg_consumer_stats_t st;
    struct sigaction sa, old;
    runner_t run;
    uint64_t t0;

    start(FAST);
    seen_reset(MODE_DONE, 0);
    consumer_opts(&o, &co, "g", "t");
    o.workers = 4;
    o.block_ms = 60000; /* a PULL that would wait a minute */
    consumer_start(&run, &o);
    sleep_ms(300); /* let the workers block in PULL */
    signal_target = run.consumer;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_sigusr1;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGUSR1, &sa, &old);
    t0 = tu_now_mono_ms();
    kill(getpid(), SIGUSR1);
    pthread_join(run.thread, NULL);
    run.running = 0;
    active_runner = NULL;
    BP_CHECK(tu_now_mono_ms() - t0 < 2000, "run returned %" PRIu64 " ms after the signal", tu_now_mono_ms() - t0);
    BP_CHECK(run.result == HG_OK, "run: %s", hg_strerror(run.result));
    sigaction(SIGUSR1, &old, NULL);
    hg_consumer_stats(run.consumer, &st);
    BP_CHECK(st.errors == 0, "errors %" PRIu64, st.errors);
    /* A consumer runs once. */
    BP_CHECK(hg_consumer_run(run.consumer) == HG_ERR_ARG, "second run");
    hg_consumer_free(run.consumer);

    /* Stop before run: run returns at once. */
    {
        hg_consumer_t *c = NULL;
        hg_error_t err;
        BP_REQUIRE(hg_consumer_new(&o, &c, &err) == HG_OK, "%s", err.message);
        hg_consumer_stop(c);
        t0 = tu_now_mono_ms();
        BP_CHECK(hg_consumer_run(c) == HG_OK && tu_now_mono_ms() - t0 < 1000, "run after stop");
        hg_consumer_free(c);
    }
}

/* ------------------------------------------------------------------------
 * Suite restart: the broker dies under the consumers
 * ------------------------------------------------------------------------ */

#define EVENT_WORKERS 8 /* the workers whose refusals the hook follows ("worker 0" .. "worker 7") */

/* What the connection-event hook was told (any worker thread). */
typedef struct conn_events {
    atomic_int connected, reconnected, answered, refused;
    atomic_int bad;                     /* an unknown event, an empty who, another address, a worker's
                                           REFUSED / ANSWERED out of turn */
    atomic_int refusing[EVENT_WORKERS]; /* 1 between a worker's HG_CONN_REFUSED and its HG_CONN_ANSWERED */
    char want_address[64];
} conn_events_t;

/* The refusal state of the worker named who, or NULL (the watchdog, a worker
 * past EVENT_WORKERS). */
static atomic_int *worker_refusing(conn_events_t *ev, const char *who)
{
    unsigned index;
    if (who == NULL || sscanf(who, "worker %u", &index) != 1 || index >= EVENT_WORKERS)
        return NULL;
    return &ev->refusing[index];
}

/* Counts each event; a worker's REFUSED and ANSWERED must alternate,
 * starting with REFUSED (hg_consumer_set_conn_event_fn's contract). */
static void record_conn_event(hg_conn_event_t event, const char *who, const char *address, void *arg)
{
    conn_events_t *ev = arg;
    atomic_int *refusing = worker_refusing(ev, who);
    if (event == HG_CONN_CONNECTED)
        atomic_fetch_add(&ev->connected, 1);
    else if (event == HG_CONN_RECONNECTED)
        atomic_fetch_add(&ev->reconnected, 1);
    else if (event == HG_CONN_ANSWERED || event == HG_CONN_REFUSED) {
        atomic_fetch_add(event == HG_CONN_ANSWERED ? &ev->answered : &ev->refused, 1);
        int want_before = event == HG_CONN_ANSWERED; /* ANSWERED ends a refusal, REFUSED starts one */
        if (refusing == NULL || atomic_exchange(refusing, !want_before) != want_before)
            atomic_fetch_add(&ev->bad, 1);
    } else
        atomic_fetch_add(&ev->bad, 1);
    if (who == NULL || who[0] == '\0' || address == NULL || strcmp(address, ev->want_address) != 0)
        atomic_fetch_add(&ev->bad, 1);
}

static int three_connected(void *arg)
{
    return atomic_load(&((conn_events_t *)arg)->connected) >= 3;
}

static int two_connected(void *arg)
{
    return atomic_load(&((conn_events_t *)arg)->connected) >= 2;
}

static int two_refused(void *arg)
{
    return atomic_load(&((conn_events_t *)arg)->refused) >= 2;
}

static int two_answered(void *arg)
{
    return atomic_load(&((conn_events_t *)arg)->answered) >= 2;
}

/* A running consumer and its error count at some moment. */
typedef struct errors_after {
    hg_consumer_t *consumer;
    uint64_t errors;
} errors_after_t;

/* arg: an errors_after_t; 1 once its workers logged two more failed PULLs. */
static int two_errors_more(void *arg)
{
    const errors_after_t *a = arg;
    hg_consumer_stats_t st;
    hg_consumer_stats(a->consumer, &st);
    return st.errors >= a->errors + 2;
}

/* arg: a running hg_consumer_t; 1 once its workers logged two failed PULLs. */
static int two_errors(void *arg)
{
    hg_consumer_stats_t st;
    hg_consumer_stats(arg, &st);
    return st.errors >= 2;
}

/* The broker refuses every PULL with an error reply (the group is bound to another topic; a full disk does the
 * same), then answers again (the group deleted: the next PULL creates it on the consumer's topic): each of the two
 * workers tells HG_CONN_REFUSED once at its first refused PULL (not again for the refusals after it), then
 * HG_CONN_ANSWERED once, in that order, and the consumer handles what waited. No ANSWERED before the refusals
 * ended. */
static void test_answered_after_refusals(void)
{
    static conn_events_t ev;
    hg_consumer_opts_t o;
    hg_client_opts_t co;
    hg_consumer_stats_t st;
    runner_t run;

    start(FAST);
    hg_reply_free(CMD("GROUP", "CREATE", "g", "elsewhere"));
    seen_reset(MODE_DONE, 0);
    send_one("t", "k1", "m1", hg_delay_none(), NULL);
    consumer_opts(&o, &co, "g", "t");
    o.workers = 2;
    memset(&ev, 0, sizeof ev);
    snprintf(ev.want_address, sizeof ev.want_address, "127.0.0.1:%d", B.port);
    consumer_start_events(&run, &o, record_conn_event, &ev);
    BP_CHECK(tu_poll_until(two_connected, &ev, 10000, 20) == 0, "%d connected events, want 2 workers'",
             atomic_load(&ev.connected));
    BP_CHECK(tu_poll_until(two_errors, run.consumer, 10000, 20) == 0, "the PULLs were not refused first");
    BP_CHECK(tu_poll_until(two_refused, &ev, 10000, 20) == 0, "HG_CONN_REFUSED %d times, want once per worker",
             atomic_load(&ev.refused));
    hg_consumer_stats(run.consumer, &st);
    errors_after_t later = { run.consumer, st.errors };
    BP_CHECK(tu_poll_until(two_errors_more, &later, 10000, 20) == 0, "the workers' PULLs were not refused again");
    BP_CHECK(atomic_load(&ev.refused) == 2, "HG_CONN_REFUSED %d times over repeated refusals, want once per worker",
             atomic_load(&ev.refused));
    BP_CHECK(atomic_load(&ev.answered) == 0, "HG_CONN_ANSWERED %d times while every PULL was refused",
             atomic_load(&ev.answered));
    hg_reply_free(CMD("GROUP", "DEL", "g"));
    BP_CHECK(tu_poll_until(two_answered, &ev, 10000, 20) == 0, "HG_CONN_ANSWERED %d times, want once per worker",
             atomic_load(&ev.answered));
    BP_CHECK(wait_distinct(1, 10000) == 0, "the waiting message was not handled once the PULLs were answered");
    consumer_finish(&run, &st);
    BP_CHECK(atomic_load(&ev.answered) == 2 && atomic_load(&ev.refused) == 2 && atomic_load(&ev.bad) == 0,
             "HG_CONN_ANSWERED %d times, HG_CONN_REFUSED %d times (want 2 each), %d bad events or out of turn",
             atomic_load(&ev.answered), atomic_load(&ev.refused), atomic_load(&ev.bad));
}

/* The broker killed and restarted under three workers: nothing lost, and the connection-event hook
 * (hg_consumer_set_conn_event_fn) hears each worker connect, then reconnect to the same address. */
static void test_broker_restart_nothing_lost(void)
{
    static conn_events_t ev;
    hg_consumer_opts_t o;
    hg_client_opts_t co;
    hg_consumer_stats_t st;
    runner_t run;
    char e[8192];
    const int n = 400;
    int dup = 0;
    hg_send_item_t *items = calloc((size_t)n, sizeof *items);
    char(*payloads)[16] = calloc((size_t)n, 16);
    size_t ok = 0;

    start(NULL); /* fsync always: an acknowledged SEND/ACK survives kill -9 */
    seen_reset(MODE_DONE, 3);
    for (int i = 0; i < n; i++) {
        snprintf(payloads[i], 16, "m%d", i);
        items[i].topic = "orders";
        items[i].payload = payloads[i];
        items[i].payload_len = strlen(payloads[i]);
    }
    BP_REQUIRE(hg_send_many(C, items, (size_t)n, &ok) == HG_OK && ok == (size_t)n, "send: %s", hg_client_errmsg(C));
    consumer_opts(&o, &co, "cancel", "orders");
    o.workers = 3;
    o.count = 5;
    o.lease_ms = 2000;
    co.reconnect_backoff.attempts = 0; /* keep trying */
    memset(&ev, 0, sizeof ev);
    snprintf(ev.want_address, sizeof ev.want_address, "127.0.0.1:%d", B.port);
    consumer_start_events(&run, &o, record_conn_event, &ev);
    BP_CHECK(wait_distinct(80, 15000) == 0, "only %d handled before the kill", S.distinct);
    BP_CHECK(tu_poll_until(three_connected, &ev, 10000, 20) == 0 && atomic_load(&ev.reconnected) == 0,
             "before the kill: %d connected events (want one per worker), %d reconnected (want 0)",
             atomic_load(&ev.connected), atomic_load(&ev.reconnected));

    BP_REQUIRE(bp_kill9(&B) == 0, "kill -9");
    fprintf(stderr, "\n  killed the broker after %d messages\n", S.distinct);
    sleep_ms(500); /* the workers find the broker gone and back off */
    BP_REQUIRE(bp_restart(&B, e, sizeof e) == 0, "restart: %s", e);

    BP_CHECK(wait_distinct(n, 30000) == 0, "only %d of %d handled after the restart", S.distinct, n);
    consumer_finish(&run, &st);
    for (int i = 0; i < n; i++) {
        BP_CHECK(S.count[i] >= 1, "message %d lost", i);
        if (S.count[i] > 1)
            dup++;
    }
    fprintf(stderr,
            "  after restart: %d distinct, %d redelivered (at least once), reconnects %" PRIu64 ", errors %" PRIu64
            ", lease_lost %" PRIu64 "\n",
            S.distinct, dup, st.reconnects, st.errors, st.lease_lost);
    BP_CHECK(st.reconnects >= 3,
             "%" PRIu64 " reconnects, want one per worker at least: was the broker "
             "really killed?",
             st.reconnects);
    BP_CHECK(atomic_load(&ev.reconnected) >= 3 && (uint64_t)atomic_load(&ev.reconnected) <= st.reconnects,
             "%d reconnected events, want one per worker at least and at most the %" PRIu64 " reconnects counted",
             atomic_load(&ev.reconnected), st.reconnects);
    BP_CHECK(atomic_load(&ev.bad) == 0, "%d events with an unknown kind, no owner or another address than %s",
             atomic_load(&ev.bad), ev.want_address);
    BP_CHECK(atomic_load(&ev.refused) == 0 && atomic_load(&ev.answered) == 0,
             "a killed broker is no refusal: HG_CONN_REFUSED %d times, HG_CONN_ANSWERED %d times",
             atomic_load(&ev.refused), atomic_load(&ev.answered));
    BP_CHECK(S.bad == 0, "%d unknown messages", S.bad);

    /* The test's own client reconnects transparently too. */
    send_one("orders", NULL, "after-restart", hg_delay_none(), NULL);
    free(items);
    free(payloads);
}

/* ------------------------------------------------------------------------
 * Suite cli
 * ------------------------------------------------------------------------ */

/* What run_cli's child reads on stdin: NULL for /dev/null. */
static const char *cli_stdin;

/* Run hourglass-cli with args (NULL-terminated), stdout into out[outlen],
 * stderr into errout[errlen], cli_stdin on its stdin. Returns the exit
 * status, -1 when it did not exit normally. */
static int run_cli(char *out, size_t outlen, char *errout, size_t errlen, ...)
{
    tu_argv_t argv;
    int outp[2], errp[2], status = 0;
    size_t got = 0, egot = 0;
    pid_t pid;
    va_list ap;

    tu_argv_init(&argv);
    tu_argv_add(&argv, CLI_PATH);
    va_start(ap, errlen);
    tu_argv_add_va(&argv, ap);
    va_end(ap);
    if (tu_argv_check(&argv) != 0)
        return -1;
    int inp[2];
    if (pipe(outp) != 0 || pipe(errp) != 0 || pipe(inp) != 0)
        return -1;
    pid = fork();
    if (pid == 0) {
        dup2(inp[0], 0);
        dup2(outp[1], 1);
        dup2(errp[1], 2);
        close(inp[1]);
        close(outp[0]);
        close(errp[0]);
        unsetenv("HOURGLASS_URI");
        execv(CLI_PATH, (char *const *)argv.word);
        _exit(127);
    }
    close(inp[0]);
    close(outp[1]);
    close(errp[1]);
    /* Inputs are small (within the pipe's buffer): write, close, then read. */
    if (cli_stdin != NULL && write(inp[1], cli_stdin, strlen(cli_stdin)) < 0)
        perror("write to hourglass-cli's stdin");
    close(inp[1]);
    /* Outputs are small: read stdout, then stderr. */
    for (ssize_t r; (r = read(outp[0], out + got, outlen - 1 - got)) > 0;)
        got += (size_t)r;
    for (ssize_t r; (r = read(errp[0], errout + egot, errlen - 1 - egot)) > 0;)
        egot += (size_t)r;
    out[got] = '\0';
    errout[egot] = '\0';
    close(outp[0]);
    close(errp[0]);
    if (waitpid(pid, &status, 0) != pid || !WIFEXITED(status))
        return -1;
    return WEXITSTATUS(status);
}

#define CLI(...) run_cli(out, sizeof out, err, sizeof err, "--uri", URI, __VA_ARGS__, (char *)NULL)

static void test_cli_dlq_round_trip(void)
{
    char out[16384], err[4096], ids[3][HG_ID_MAX], reasons[3][16], badid[] = "00000000000fffff";
    hg_reply_t *r;
    int rc;

    start(FAST);
    /* Three messages parked in the DLQ with reasons r0..r2. */
    hg_reply_free(CMD("GROUP", "CREATE", "g", "t", "MAXRETRY", "0"));
    for (int i = 0; i < 3; i++) {
        char p[8];
        snprintf(p, sizeof p, "m%d", i);
        send_one("t", "key", p, hg_delay_none(), ids[i]);
    }
    r = CMD("PULL", "g", "t", "COUNT", "3");
    BP_REQUIRE(r != NULL && hg_reply_count(r) == 3, "PULL 3");
    hg_reply_free(r);
    for (int i = 0; i < 3; i++) {
        snprintf(reasons[i], sizeof reasons[i], "r%d", i);
        BP_CHECK(CMD_INT("NACK", "g", ids[i], "REASON", reasons[i]) == 0, "NACK %d into the DLQ", i);
    }

    rc = CLI("dlq", "list", "g");
    BP_CHECK(rc == 0, "dlq list: exit %d: %.400s", rc, err);
    for (int i = 0; i < 3; i++)
        BP_CHECK(strstr(out, ids[i]) != NULL && strstr(out, reasons[i]) != NULL, "dlq list lacks %s / %.400s:\n%.400s",
                 ids[i], reasons[i], out);
    BP_CHECK(strncmp(out, "ID ", 3) == 0 && strstr(out, "REASON") != NULL, "no table header:\n%.400s", out);

    rc = CLI("--json", "dlq", "list", "g", "--count", "2");
    BP_CHECK(rc == 0 && out[0] == '[' && strstr(out, "\"reason\":\"r0\"") != NULL &&
                 strstr(out, "\"reason\":\"r2\"") == NULL && strstr(out, "\"payload\":\"m1\"") != NULL,
             "--json dlq list --count 2: exit %d:\n%.400s", rc, out);
    rc = CLI("dlq", "list", "g", "--after", ids[1]);
    BP_CHECK(rc == 0 && strstr(out, ids[2]) != NULL && strstr(out, ids[0]) == NULL, "--after:\n%.400s", out);

    rc = CLI("dlq", "show", "g", ids[1]);
    BP_CHECK(rc == 0 && strstr(out, "reason:    r1") != NULL && strstr(out, "payload:   m1") != NULL,
             "dlq show: exit %d:\n%.400s%.400s", rc, out, err);
    rc = CLI("dlq", "show", "g", badid);
    BP_CHECK(rc == 1 && strstr(err, "no message") != NULL, "dlq show of a missing id: exit %d: %.400s", rc, err);

    /* requeue one: it is consumable again, with reconsume reset */
    rc = CLI("dlq", "requeue", "g", ids[0]);
    BP_CHECK(rc == 0 && strstr(out, "requeued") != NULL, "dlq requeue: exit %d: %.400s%.400s", rc, out, err);
    BP_CHECK(CMD_INT("DLQ", "LEN", "g") == 2, "DLQ LEN after requeue");
    r = CMD("PULL", "g", "t", "COUNT", "10", "BLOCK", "2000");
    BP_CHECK(r != NULL && hg_reply_count(r) == 1, "PULL after requeue: %zu messages", r ? hg_reply_count(r) : 0);
    if (r != NULL && hg_reply_count(r) == 1) {
        const hg_reply_t *m = hg_reply_element(r, 0);
        BP_CHECK(strcmp(hg_reply_str(hg_reply_element(m, 0), NULL), ids[0]) == 0, "requeued id");
        BP_CHECK(hg_reply_integer(hg_reply_element(m, 4)) == 0, "reconsume not reset");
        BP_CHECK(CMD_INT("ACK", "g", ids[0]) == 1, "ACK the requeued message");
    }
    hg_reply_free(r);
    rc = CLI("dlq", "requeue", "g", ids[0]);
    BP_CHECK(rc == 1, "requeue of an id no longer parked: exit %d", rc);

    /* drop --all */
    rc = CLI("--json", "dlq", "drop", "g", "--all");
    BP_CHECK(rc == 0 && strcmp(out, "{\"dropped\":2}\n") == 0, "dlq drop --all: exit %d: %.400s", rc, out);
    BP_CHECK(CMD_INT("DLQ", "LEN", "g") == 0, "DLQ LEN after drop");
    rc = CLI("dlq", "list", "g");
    BP_CHECK(rc == 0 && strstr(out, "is empty") != NULL, "empty list:\n%.400s", out);
    rc = CLI("dlq", "drop", "g", ids[1]);
    BP_CHECK(rc == 1, "drop of a missing id: exit %d", rc);
    rc = CLI("dlq", "list", "nosuchgroup");
    BP_CHECK(rc == 1 && strstr(err, "no such group") != NULL, "unknown group: exit %d: %.400s", rc, err);
}

/* Park n more messages of topic in the DLQ of group (MAXRETRY 0): sent
 * pipelined, PULLed with a 1 ms lease that expires into the DLQ; waits
 * until DLQ LEN is want. The broker needs --max-pull-count ≥ 10000. */
static long long dlq_len_now;

static int dlq_len_is(void *want)
{
    dlq_len_now = CMD_INT("DLQ", "LEN", "g");
    return dlq_len_now == *(long long *)want;
}

static void park_in_dlq(const char *topic, int n, long long want)
{
    enum {
        BATCH = 10000
    };
    static hg_send_item_t items[BATCH];
    size_t ok = 0;

    for (int sent = 0; sent < n; sent += BATCH) {
        size_t k = (size_t)(n - sent < BATCH ? n - sent : BATCH);
        for (size_t i = 0; i < k; i++)
            items[i] = (hg_send_item_t){ .topic = topic, .payload = "p", .payload_len = 1, .delay = hg_delay_none() };
        hg_err_t e = hg_send_many(C, items, k, &ok);
        BP_REQUIRE(e == HG_OK && ok == k, "hg_send_many: %s %s", hg_strerror(e), hg_client_errmsg(C));
    }
    for (int pulled = 0; pulled < n;) {
        hg_reply_t *r = CMD("PULL", "g", topic, "COUNT", "10000", "LEASE", "1");
        BP_REQUIRE(r != NULL && hg_reply_count(r) > 0, "PULL after %d of %d", pulled, n);
        pulled += (int)hg_reply_count(r);
        hg_reply_free(r);
    }
    BP_REQUIRE(tu_poll_until(dlq_len_is, &want, 120000, 50) == 0, "DLQ LEN %lld, want %lld", dlq_len_now, want);
}

/* dlq requeue|drop --all by a user the broker will refuse (a viewer: DLQ
 * REQUEUE and DROP are the admin's) prints the broker's NOPERM and exits 1,
 * without first announcing the move it will not make (the refusal comes
 * before the announcement's moment); an admin's drop of a DLQ big enough to
 * take a while (steps of 512 entries) gets the announcement, and the DLQ is
 * dropped. */
#define BIG_DLQ      300000 /* entries: DLQ DROP ALL takes about a second, past the 300 ms announcement */
#define BIG_DLQ_TEXT "300000"

static void test_cli_dlq_all_refused_first(void)
{
    char out[16384], err[4096], dir[512], path[600], e[4096], id[HG_ID_MAX], viewer[200], admin[200];
    const tu_user_t users[] = { { "boss", "admin", "pw-boss" }, { "ops", "viewer", "pw-ops" } };
    hg_error_t herr;
    hg_reply_t *r;

    BP_REQUIRE(tu_mkdtemp("hg-client-dlq-perm", dir, sizeof dir) == 0, "temp dir");
    snprintf(path, sizeof path, "%s/users", dir);
    BP_REQUIRE(tu_write_users_file(path, users, 2, e, sizeof e) == 0, "%s", e);
    const char *extra[] = { "--fsync", "no", "--users-file", path, "--max-pull-count", "10000", NULL };
    BP_REQUIRE(bp_start(&B, extra, e, sizeof e) == 0, "start the broker: %s", e);
    snprintf(admin, sizeof admin, "hourglass://boss:pw-boss@127.0.0.1:%d", B.port);
    snprintf(viewer, sizeof viewer, "hourglass://ops:pw-ops@127.0.0.1:%d", B.port);
    BP_REQUIRE(hg_client_open(admin, NULL, &C, &herr) == HG_OK, "open as boss: %s", herr.message);
    hg_reply_free(CMD("GROUP", "CREATE", "g", "t", "MAXRETRY", "0"));
    send_one("t", "key", "m0", hg_delay_none(), id);
    r = CMD("PULL", "g", "t", "COUNT", "1");
    BP_REQUIRE(r != NULL && hg_reply_count(r) == 1, "PULL 1");
    hg_reply_free(r);
    BP_REQUIRE(CMD_INT("NACK", "g", id, "REASON", "r0") == 0, "NACK into the DLQ");

    static const char *const verbs[] = { "drop", "requeue" };
    for (size_t i = 0; i < 2; i++) {
        int rc =
            run_cli(out, sizeof out, err, sizeof err, "--uri", viewer, "dlq", verbs[i], "g", "--all", (char *)NULL);
        BP_CHECK(rc == 1 && strstr(err, "NOPERM") != NULL && strstr(err, "waiting until") == NULL &&
                     strstr(err, "in the DLQ") == NULL,
                 "dlq %s --all as a viewer: the refusal only, exit 1: exit %d\nstdout: %.400s\nstderr: %.600s",
                 verbs[i], rc, out, err);
    }
    BP_CHECK(CMD_INT("DLQ", "LEN", "g") == 1, "the refused drop left the DLQ as it was");
    park_in_dlq("t", BIG_DLQ - 1, BIG_DLQ);
    /* what a cli run costs besides its command: start, connect, AUTH, one round trip */
    uint64_t t0 = tu_now_mono_ms();
    BP_CHECK(run_cli(out, sizeof out, err, sizeof err, "--uri", admin, "ping", (char *)NULL) == 0, "cli ping: %s", err);
    uint64_t overhead = tu_now_mono_ms() - t0;
    t0 = tu_now_mono_ms();
    int rc = run_cli(out, sizeof out, err, sizeof err, "--uri", admin, "dlq", "drop", "g", "--all", (char *)NULL);
    uint64_t took = tu_now_mono_ms() - t0;
    int announced = strstr(err, BIG_DLQ_TEXT " messages in the DLQ, waiting until all are dropped") != NULL;
    BP_CHECK(rc == 0 && strstr(out, "dropped " BIG_DLQ_TEXT " messages") != NULL,
             "dlq drop --all as the admin: exit %d\nstdout: %.400s\nstderr: %.600s", rc, out, err);
    /* The announcement depends on how long the drop took, which the machine decides: a drop that took over the
     * 300 ms (the run less what a cli run costs anyway, with 100 ms to spare) must have been announced, a run
     * under 300 ms in all must not; in between either is right. Here the drop takes 0.6-1 s. */
    if (took >= overhead + 400)
        BP_CHECK(announced, "dlq drop --all took %llu ms (a cli run %llu ms) and was not announced: %.600s",
                 (unsigned long long)took, (unsigned long long)overhead, err);
    else if (took < 300)
        BP_CHECK(!announced, "dlq drop --all took %llu ms and was announced: %.600s", (unsigned long long)took, err);
    printf("\n    dlq drop --all of %d: %llu ms (a cli run: %llu ms), %s", BIG_DLQ, (unsigned long long)took,
           (unsigned long long)overhead, announced ? "announced" : "not announced");
    BP_CHECK(CMD_INT("DLQ", "LEN", "g") == 0, "the admin's drop emptied the DLQ");
    tu_rmtree(dir);
}

/* Text for people never carries a terminal control from a payload, key or
 * reason: C0 and DEL, and also the C1 controls (valid UTF-8 that xterm and
 * VTE obey: U+009B is CSI) and the bidi overrides, are shown as \xHH; other
 * UTF-8 is shown as it is. --json keeps the text (escaped as JSON wants). */
static void test_cli_text_escapes_controls(void)
{
    char out[16384], err[4096], id[HG_ID_MAX];
    const char *payload = "a\x1b[31m b\xc2\x9b"
                          "2J c\xe2\x80\xae"
                          "d \xc3\xa9";
    int rc;

    start(FAST);
    hg_reply_free(CMD("GROUP", "CREATE", "g", "t", "MAXRETRY", "0"));
    send_one("t",
             "k\xc2\x9d"
             "0;x",
             payload, hg_delay_none(), id);
    hg_reply_t *r = CMD("PULL", "g", "t", "COUNT", "1");
    BP_REQUIRE(r != NULL && hg_reply_count(r) == 1, "PULL 1");
    hg_reply_free(r);
    BP_CHECK(CMD_INT("NACK", "g", id, "REASON",
                     "why\xc2\x9b"
                     "5m") == 0,
             "NACK into the DLQ");

    rc = CLI("msg", "show", id);
    BP_CHECK(rc == 0, "msg show: exit %d: %.400s", rc, err);
    BP_CHECK(strstr(out, "payload:   a\\x1b[31m b\\xc2\\x9b2J c\\xe2\\x80\\xaed \xc3\xa9\n") != NULL,
             "msg show payload not escaped:\n%.600s", out);
    BP_CHECK(strstr(out, "key:       k\\xc2\\x9d0;x\n") != NULL, "msg show key not escaped:\n%.600s", out);
    rc = CLI("dlq", "show", "g", id);
    BP_CHECK(rc == 0 && strstr(out, "reason:    why\\xc2\\x9b5m\n") != NULL, "dlq show reason: exit %d:\n%.600s", rc,
             out);
    rc = CLI("dlq", "list", "g");
    BP_CHECK(rc == 0, "dlq list: exit %d: %.400s", rc, err);
    for (const char *c = "\x1b\x9b\x9d\xae"; *c != '\0'; c++) /* ESC, and the C1 / U+202E sequences' last bytes */
        BP_CHECK(strchr(out, *c) == NULL, "dlq list prints the raw byte 0x%02x:\n%.600s", (unsigned char)*c, out);
    rc = CLI("--json", "msg", "show", id);
    BP_CHECK(rc == 0 && strstr(out, "b\xc2\x9b"
                                    "2J") != NULL,
             "--json keeps U+009B: exit %d:\n%.600s", rc, out);
}

/* passwd USER ROLES: a line the broker takes (it logs the user in); a user
 * name or roles the broker's users file would refuse — which makes the
 * broker refuse the whole file, and not start — are refused with exit 2 and
 * no line printed. */
static void test_cli_passwd(void)
{
    char out[16384], err[4096], dir[512], path[600], uri[200];
    static const char *const bad[][3] = {
        { "bad user", "admin", "character other than" },  { "bob", "wizard", "unknown role 'wizard'" },
        { "bob", "admin extra", "unknown role" },         { "bob", "admin,", "unknown role ''" },
        { "", "admin", "must be 1..64 bytes" },           { "b#x", "viewer", "character other than" },
        { "bob", "producer,,viewer", "unknown role ''" },
    };
    int rc;

    cli_stdin = "pw-bob\n";
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        rc = run_cli(out, sizeof out, err, sizeof err, "passwd", "--cost", "10", bad[i][0], bad[i][1], (char *)NULL);
        BP_CHECK(rc == 2 && out[0] == '\0' && strstr(err, bad[i][2]) != NULL,
                 "passwd '%s' '%s': exit %d, stdout '%.200s', stderr '%.300s'", bad[i][0], bad[i][1], rc, out, err);
    }
    rc = run_cli(out, sizeof out, err, sizeof err, "passwd", "--cost", "10", "bob.x@shop-1_a", "producer,viewer",
                 (char *)NULL);
    cli_stdin = NULL;
    BP_REQUIRE(rc == 0 && strncmp(out, "bob.x@shop-1_a producer,viewer $scrypt$ln=10,", 45) == 0,
               "passwd: exit %d: %.300s%.300s", rc, out, err);
    BP_REQUIRE(tu_mkdtemp("hg-client-passwd", dir, sizeof dir) == 0, "temp dir");
    snprintf(path, sizeof path, "%s/users", dir);
    BP_REQUIRE(tu_write_file(path, out) == 0, "write %s", path);
    const char *extra[] = { "--fsync", "no", "--users-file", path, NULL };
    char e[8192];
    BP_REQUIRE(bp_start(&B, extra, e, sizeof e) == 0, "the broker refuses the line: %s", e);
    snprintf(uri, sizeof uri, "hourglass://bob.x%%40shop-1_a:pw-bob@127.0.0.1:%d", B.port);
    rc = run_cli(out, sizeof out, err, sizeof err, "--uri", uri, "ping", (char *)NULL);
    BP_CHECK(rc == 0 && strstr(out, "PONG") != NULL, "ping as the new user: exit %d: %.300s", rc, err);
    /* Without credentials: the broker's NOAUTH, and how hourglass-cli logs in. */
    snprintf(uri, sizeof uri, "hourglass://127.0.0.1:%d", B.port);
    rc = run_cli(out, sizeof out, err, sizeof err, "--uri", uri, "levels", (char *)NULL);
    BP_CHECK(rc == 1 && strstr(err, "NOAUTH") != NULL && strstr(err, "--user U --password-file F") != NULL,
             "levels without credentials: exit %d: %.300s", rc, err);
    tu_rmtree(dir);
}

/* --config FILE with a key of the daemons' files the CLI's does not take
 * (tls-ca-cert-file, user): refused, exit 2, naming the key, the keys the
 * file takes and where the TLS files and the user go; "--help" said once. */
static void test_cli_config_daemon_key(void)
{
    char out[4096], err[4096], dir[512], path[600];
    static const char *const bad[] = { "tls-ca-cert-file = /etc/hourglass/tls/ca.pem", "user = ops" };

    BP_REQUIRE(tu_mkdtemp("hg-client-cliconf", dir, sizeof dir) == 0, "temp dir");
    snprintf(path, sizeof path, "%s/cli.conf", dir);
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char text[256];
        snprintf(text, sizeof text, "[cli]\nuri = hourglass+tls://127.0.0.1:1\n%s\n", bad[i]);
        BP_REQUIRE(tu_write_file(path, text) == 0, "write %s", path);
        int rc = run_cli(out, sizeof out, err, sizeof err, "--config", path, "ping", (char *)NULL);
        BP_CHECK(rc == 2 && strstr(err, "cli.conf:3: unknown key") != NULL &&
                     strstr(err, "takes uri, order-topic and the mysql-* keys") != NULL &&
                     strstr(err, "?ca=FILE") != NULL && strstr(strstr(err, "--help") + 1, "--help") == NULL,
                 "--config with '%s': exit %d, stderr '%.400s'", bad[i], rc, err);
    }
    tu_rmtree(dir);
}

/* Run hourglass-cli with args (NULL-terminated) on a new pseudo-terminal, as
 * its controlling terminal, stdin, stdout and stderr: what a person at a
 * terminal sees, into out[outlen]. Nothing is typed; a child that keeps the
 * terminal open for wait_ms (waiting at a prompt) is killed. Returns the
 * exit status, -1 when it did not exit by itself. */
static int run_cli_tty(char *out, size_t outlen, int wait_ms, ...)
{
    tu_argv_t argv;
    int master = -1, status = 0, closed = 0;
    size_t got = 0;
    va_list ap;

    tu_argv_init(&argv);
    tu_argv_add(&argv, CLI_PATH);
    va_start(ap, wait_ms);
    tu_argv_add_va(&argv, ap);
    va_end(ap);
    if (tu_argv_check(&argv) != 0)
        return -1;
    pid_t pid = forkpty(&master, NULL, NULL, NULL);
    if (pid < 0)
        return -1;
    if (pid == 0) {
        unsetenv("HOURGLASS_URI");
        execv(CLI_PATH, (char *const *)argv.word);
        _exit(127);
    }
    for (uint64_t end = tu_now_mono_ms() + (uint64_t)wait_ms; got + 1 < outlen;) {
        struct pollfd p = { master, POLLIN, 0 };
        uint64_t now = tu_now_mono_ms();
        if (now >= end || poll(&p, 1, (int)(end - now)) <= 0)
            break;
        ssize_t r = read(master, out + got, outlen - 1 - got);
        if (r <= 0) {
            closed = 1; /* EIO: the child closed the terminal's last descriptor */
            break;
        }
        got += (size_t)r;
    }
    out[got] = '\0';
    if (!closed)
        kill(pid, SIGKILL);
    close(master);
    if (waitpid(pid, &status, 0) != pid || !WIFEXITED(status))
        return -1;
    return WEXITSTATUS(status);
}

/* passwd: a bad --cost (out of range, not a number, past what scrypt may
 * use) is a usage error named before the password is read — on a closed
 * stdin the error is about --cost, not "no password", and on a terminal no
 * prompt is written. */
static void test_cli_passwd_cost_before_prompt(void)
{
    static const char *const bad[][3] = {
        /* passwd makes r=8 hashes: 10..18 is its range (ln 19 needs 512 MiB,
         * past the broker's 256), said at once, not the reader's 10..20 */
        { "", "5", "--cost 5 is out of range for scrypt's ln: 10..18" },
        { "", "9", "--cost 9 is out of range for scrypt's ln: 10..18" },
        { "", "19", "--cost 19 is out of range for scrypt's ln: 10..18 (r=8; ln 19 needs 512 MiB" },
        { "", "20", "--cost 20 is out of range for scrypt's ln: 10..18" },
        { "", "21", "--cost 21 is out of range for scrypt's ln: 10..18" },
        { "", "abc", "--cost 'abc' is not a whole number" },
        { "", "-3", "--cost '-3' is not a whole number" },
        { "", "", "is not a whole number" },
        { "", "99999999999", "--cost 99999999999 is out of range" },
        { "--pbkdf2", "999", "pbkdf2 i=999 out of range 1000..10000000" },
        { "--pbkdf2", "10000001", "pbkdf2 i=10000001 out of range" },
        { "--pbkdf2", "1e6", "--cost '1e6' is not a whole number (PBKDF2's iterations)" },
    };
    char out[4096], err[4096];

    cli_stdin = NULL; /* a closed, empty stdin: reading it would fail with "no password on stdin" */
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        int rc = bad[i][0][0] != '\0' ? run_cli(out, sizeof out, err, sizeof err, "passwd", bad[i][0], "--cost",
                                                bad[i][1], "bob", "admin", (char *)NULL)
                                      : run_cli(out, sizeof out, err, sizeof err, "passwd", "--cost", bad[i][1], "bob",
                                                "admin", (char *)NULL);
        BP_CHECK(rc == 2 && out[0] == '\0' && strstr(err, bad[i][2]) != NULL && strstr(err, "--cost") != NULL &&
                     strstr(err, "no password") == NULL,
                 "passwd %s --cost '%s' on a closed stdin: exit %d, stdout '%.200s', stderr '%.300s'", bad[i][0],
                 bad[i][1], rc, out, err);
    }
    /* At a terminal: the error, and no prompt (before, "Password: " came first and the error only after two). */
    int rc = run_cli_tty(out, sizeof out, 10000, "passwd", "--cost", "25", "bob", "admin", (char *)NULL);
    BP_CHECK(rc == 2 && strstr(out, "--cost 25 is out of range for scrypt's ln: 10..18") != NULL &&
                 strstr(out, "Password") == NULL,
             "passwd --cost 25 on a terminal: exit %d, the terminal shows '%.300s'", rc, out);
    rc = run_cli_tty(out, sizeof out, 10000, "passwd", "--pbkdf2", "--cost", "ten", (char *)NULL);
    BP_CHECK(rc == 2 && strstr(out, "not a whole number") != NULL && strstr(out, "Password") == NULL,
             "passwd --pbkdf2 --cost ten on a terminal: exit %d, the terminal shows '%.300s'", rc, out);
    /* a good --cost still asks, on the terminal, and waits for the password (killed after 1 s) */
    rc = run_cli_tty(out, sizeof out, 1000, "passwd", "--cost", "10", (char *)NULL);
    BP_CHECK(rc == -1 && strstr(out, "Password: ") != NULL, "passwd --cost 10 on a terminal: exit %d, '%.300s'", rc,
             out);
}

/* group create / group del: the group exists with its options (GROUP LIST),
 * a second create is refused naming the topic, del removes it, a missing
 * group and bad options have their exit codes; topics shows each topic's
 * counts and groups (table and --json). */
static void test_cli_group_create_del(void)
{
    char out[16384], err[4096], id[HG_ID_MAX];
    int rc;

    start(FAST);
    send_one("t", "k", "before", hg_delay_none(), id);
    rc = CLI("group", "create", "late", "t", "--from", "now", "--max-retry", "3");
    BP_CHECK(rc == 0 && strstr(out, "created group late on topic t") != NULL, "group create: exit %d: %.400s%.400s", rc,
             out, err);
    rc = CLI("--json", "group", "create", "early", "t");
    BP_CHECK(rc == 0 && strcmp(out, "{\"created\":\"early\",\"topic\":\"t\"}\n") == 0,
             "--json group create: exit %d: %.400s%.400s", rc, out, err);
    rc = CLI("--json", "groups");
    BP_CHECK(rc == 0 && strstr(out, "\"group\":\"late\",\"topic\":\"t\",\"ready\":0") != NULL &&
                 strstr(out, "\"max-reconsume\":3") != NULL &&
                 strstr(out, "\"group\":\"early\",\"topic\":\"t\",\"ready\":1"),
             "groups after create (late FROM NOW sees nothing, early FROM FIRST the message):\n%.600s", out);
    rc = CLI("group", "create", "late", "u");
    BP_CHECK(rc == 1 && strstr(err, "already exists (bound to topic t)") != NULL, "create twice: exit %d: %.400s", rc,
             err);
    rc = CLI("group", "del", "late");
    BP_CHECK(rc == 0 && strstr(out, "deleted group late") != NULL, "group del: exit %d: %.400s%.400s", rc, out, err);
    rc = CLI("--json", "group", "del", "late");
    BP_CHECK(rc == 1 && strcmp(out, "{\"deleted\":0}\n") == 0 && strstr(err, "no group late") != NULL,
             "del of a missing group: exit %d: %.400s%.400s", rc, out, err);
    rc = CLI("groups");
    BP_CHECK(rc == 0 && strstr(out, "late") == NULL && strstr(out, "early") != NULL, "groups after del:\n%.400s", out);
    send_one("u", "k", "later", hg_delay_ms(3600000), id);
    rc = CLI("topics");
    BP_CHECK(rc == 0 && strncmp(out, "TOPIC ", 6) == 0 && strstr(out, "DELAYED") != NULL &&
                 strstr(out, "early") != NULL,
             "topics: exit %d:\n%.600s%.400s", rc, out, err);
    rc = CLI("--json", "topics");
    BP_CHECK(rc == 0 &&
                 strstr(out, "{\"topic\":\"t\",\"dedup\":0,\"ready\":1,\"delayed\":0,\"retained\":1,\"appended\":1,"
                             "\"sends\":1,\"groups\":[{\"group\":\"early\",\"ready\":1,") != NULL &&
                 strstr(out, "{\"topic\":\"u\",\"dedup\":0,\"ready\":0,\"delayed\":1,") != NULL,
             "--json topics: exit %d:\n%.600s%.400s", rc, out, err);
    /* one page: --count and --after pass through as TOPICS / GROUP LIST COUNT n AFTER name */
    rc = CLI("--json", "topics", "--count", "1", "--after", "t");
    BP_CHECK(rc == 0 && strstr(out, "\"topic\":\"u\"") != NULL && strstr(out, "\"topic\":\"t\"") == NULL,
             "topics --count 1 --after t: exit %d:\n%.600s%.400s", rc, out, err);
    rc = CLI("--json", "groups", "--count", "1");
    BP_CHECK(rc == 0 && strstr(out, "\"group\":\"early\"") != NULL && strstr(out, "},{") == NULL,
             "groups --count 1: exit %d:\n%.600s%.400s", rc, out, err);
    /* a bad --count is a usage error (2), found before the broker is asked */
    BP_CHECK(CLI("groups", "--count", "0") == 2 && strstr(err, "--count '0'") != NULL, "groups --count 0: %.400s", err);
    BP_CHECK(CLI("group", "create", "g") == 2, "create without TOPIC");
    BP_CHECK(CLI("group", "create", "g", "t", "--from", "yesterday") == 2 && strstr(err, "--from") != NULL,
             "bad --from: %.400s", err);
    BP_CHECK(CLI("group", "create", "g", "t", "--max-retry", "1001") == 2, "--max-retry over 1000");
    BP_CHECK(CLI("group", "del") == 2, "del without GROUP");
    BP_CHECK(CLI("group", "frob") == 2 && strstr(err, "create, del") != NULL, "bad group subcommand: %.400s", err);

    /* topic del: an empty topic goes; one in use is refused with the broker's reason */
    rc = CLI("group", "create", "solo", "empty");
    BP_REQUIRE(rc == 0, "group create solo: exit %d: %.400s", rc, err);
    rc = CLI("topic", "del", "empty");
    BP_CHECK(rc == 1 && strstr(err, "topic 'empty' is not empty: 1 group bound to it") != NULL,
             "topic del of a topic with a group: exit %d: %.400s", rc, err);
    BP_REQUIRE(CLI("group", "del", "solo") == 0, "group del solo: %.400s", err);
    rc = CLI("topic", "del", "empty");
    BP_CHECK(rc == 0 && strcmp(out, "deleted topic empty\n") == 0, "topic del: exit %d: %.400s%.400s", rc, out, err);
    rc = CLI("--json", "topic", "del", "empty");
    BP_CHECK(rc == 1 && strcmp(out, "{\"deleted\":0}\n") == 0 && strstr(err, "no topic empty") != NULL,
             "topic del of a missing topic: exit %d: %.400s%.400s", rc, out, err);
    BP_CHECK(CLI("topic", "del") == 2, "topic del without TOPIC");
    /* --purge: what a topic without groups keeps for retention goes first */
    rc = CLI("send", "kept-topic", "x");
    BP_REQUIRE(rc == 0, "send: exit %d: %.400s", rc, err);
    rc = CLI("topic", "del", "kept-topic");
    BP_CHECK(rc == 1 && strstr(err, "TOPIC DEL topic PURGE deletes them") != NULL,
             "topic del of a topic with a retained message: exit %d: %.400s", rc, err);
    rc = CLI("topic", "del", "kept-topic", "--purge");
    BP_CHECK(rc == 0 && strcmp(out, "deleted topic kept-topic\n") == 0, "topic del --purge: exit %d: %.400s%.400s", rc,
             out, err);
}

static void test_cli_commands_and_exit_codes(void)
{
    char out[16384], err[4096], closed[160];
    int rc, rows = 0;

    start(FAST);
    rc = CLI("send", "orders", "hello", "--key", "k1", "--delay", "5s");
    BP_CHECK(rc == 0 && strlen(out) == 17, "send: exit %d: '%s' %.400s", rc, out, err);
    rc = CLI("--json", "send", "orders", "now", "--level=0");
    BP_CHECK(rc == 0 && strncmp(out, "{\"id\":\"", 7) == 0, "send --json: exit %d: %.400s", rc, out);
    rc = CLI("levels");
    for (char *p = out; (p = strchr(p, '\n')) != NULL; p++)
        rows++;
    BP_CHECK(rc == 0 && rows == 19 && strstr(out, "LEVEL") != NULL && strstr(out, "2h") != NULL,
             "levels: exit %d, %d lines:\n%.400s", rc, rows, out);
    rc = CLI("--json", "levels");
    BP_CHECK(rc == 0 && strstr(out, "\"level\":18,\"delay_ms\":7200000") != NULL, "--json levels:\n%.400s", out);
    hg_reply_free(CMD("PULL", "cancel", "orders", "COUNT", "1"));
    rc = CLI("groups");
    BP_CHECK(rc == 0 && strstr(out, "cancel") != NULL && strstr(out, "orders") != NULL, "groups:\n%.400s", out);
    rc = CLI("--json", "groups");
    BP_CHECK(rc == 0 && strstr(out, "\"group\":\"cancel\"") != NULL, "--json groups:\n%.400s", out);
    rc = CLI("info", "server");
    BP_CHECK(rc == 0 && strstr(out, "# Server") != NULL, "info server:\n%.400s", out);
    rc = CLI("--json", "info");
    BP_CHECK(rc == 0 && out[0] == '{' && strstr(out, "\"Server\":{") != NULL, "--json info:\n%.300s", out);
    rc = CLI("ping");
    BP_CHECK(rc == 0, "ping: %d", rc);

    /* 1: the broker refuses */
    rc = CLI("send", "orders", "x", "--delay", "4d");
    BP_CHECK(rc == 1 && strstr(err, "max-delay") != NULL, "send 4d: exit %d: %.400s", rc, err);
    /* 2: usage */
    BP_CHECK(CLI("frobnicate") == 2 && strstr(err, "unknown command 'frobnicate'") != NULL, "unknown command");
    BP_CHECK(CLI("dlq", "requeue", "g") == 2, "requeue without ID or --all");
    BP_CHECK(CLI("dlq", "requeue", "g", "0000000000000001", "--all") == 2, "ID and --all");
    BP_CHECK(CLI("dlq", "show", "g", "xyz") == 2, "bad id");
    BP_CHECK(CLI("dlq", "bogus") == 2, "bad dlq subcommand");
    BP_CHECK(CLI("send", "t") == 2, "send without payload");
    BP_CHECK(CLI("send", "t", "p", "--level", "1", "--delay", "1s") == 2, "two delays");
    BP_CHECK(CLI("send", "t", "p", "--delay", "5x") == 2, "bad duration");
    BP_CHECK(CLI("levels", "--bogus") == 2, "unknown option");
    BP_CHECK(CLI("topics", "--count", "0") == 2 && strstr(err, "topics: --count '0' is not a positive number") != NULL,
             "topics --count 0: %.400s", err);
    BP_CHECK(CLI("groups", "--count", "x") == 2 && strstr(err, "groups: --count 'x' is not a positive number") != NULL,
             "groups --count x: %.400s", err);
    rc = CLI("groups", "--count", "1");
    BP_CHECK(rc == 0 && strstr(out, "cancel") != NULL, "groups --count 1: exit %d:\n%.400s", rc, out);
    BP_CHECK(run_cli(out, sizeof out, err, sizeof err, "--uri", "redis://h", "levels", (char *)NULL) == 2 &&
                 strstr(err, "unsupported scheme 'redis'") != NULL,
             "bad URI: %.400s", err);
    BP_CHECK(run_cli(out, sizeof out, err, sizeof err, (char *)NULL) == 2, "no command");
    rc = CLI("info", "nosuch"); /* the broker answers an unknown section with nothing (as Redis) */
    BP_CHECK(rc == 2 && strstr(err, "info: the broker has no INFO section 'nosuch'") != NULL && out[0] == '\0',
             "info nosuch: exit %d: %.400s", rc, err);
    rc = CLI("info", "STATS");
    BP_CHECK(rc == 0 && strstr(out, "# Stats") != NULL, "info STATS: exit %d: %.400s", rc, out);
    rc = CLI("--user", "ops", "ping"); /* the CLI's own words, not the library's opts.password */
    BP_CHECK(rc == 2 && strstr(err, "--user 'ops' needs --password-file F (or the URI's user:pass@)") != NULL,
             "--user without a password: exit %d: %.400s", rc, err);
    /* --user beside the URI's userinfo: a password given is a non-empty one after the ':' (common/uri_password.h,
     * as the URI parser reads it), the same answer for the argv warning and for whether --user needs
     * --password-file ("u:@" said it had one: the library's "empty password" came instead of the hint) */
    static const struct {
        const char *userinfo, *want; /* want: on stderr */
        int rc, warned;              /* warned: the command-line password warning */
    } userinfo_cases[] = {
        { "u@", "--user 'ops' needs --password-file F (or the URI's user:pass@)", 2, 0 },
        { "u:@", "--user 'ops' needs --password-file F (or the URI's user:pass@)", 2, 0 },
        { "u:pw@", "cannot connect", 3, 1 },
        { ":pw@", "bad URI: empty user name before '@'", 2, 1 },
    };
    for (size_t i = 0; i < sizeof userinfo_cases / sizeof userinfo_cases[0]; i++) {
        char user_uri[128];
        snprintf(user_uri, sizeof user_uri, "hourglass://%s127.0.0.1:%d/", userinfo_cases[i].userinfo, tu_free_port());
        rc = run_cli(out, sizeof out, err, sizeof err, "--uri", user_uri, "--user", "ops", "--timeout", "500", "ping",
                     (char *)NULL);
        int warned = strstr(err, "using a password on the command line") != NULL;
        BP_CHECK(rc == userinfo_cases[i].rc && strstr(err, userinfo_cases[i].want) != NULL &&
                     warned == userinfo_cases[i].warned,
                 "--user ops --uri %s: exit %d, want %d with '%s' (warning %s): %.400s", user_uri, rc,
                 userinfo_cases[i].rc, userinfo_cases[i].want, userinfo_cases[i].warned ? "yes" : "no", err);
    }
    /* the URI's user@ without a password, on both transports: the library's words, then the CLI's
     * hint (it said "opts.password (a daemon's password-file)", advice for a C programmer) */
    for (int i = 0; i < 2; i++) {
        char user_uri[128];
        snprintf(user_uri, sizeof user_uri, "%s://hg@127.0.0.1:%d/", i == 0 ? "hourglass" : "amqp", tu_free_port());
        rc = run_cli(out, sizeof out, err, sizeof err, "--uri", user_uri, "ping", (char *)NULL);
        BP_CHECK(rc == 2 && strstr(err, "no password given for user 'hg'") != NULL &&
                     strstr(err, "give it with --password-file F") != NULL && strstr(err, "opts.") == NULL,
                 "%s without a password: exit %d: %.400s", user_uri, rc, err);
    }
    /* 0: help everywhere */
    BP_CHECK(run_cli(out, sizeof out, err, sizeof err, "--help", (char *)NULL) == 0 &&
                 strstr(out, "Exit status") != NULL,
             "--help");
    BP_CHECK(CLI("dlq", "list", "--help") == 0 && strstr(out, "usage:") != NULL, "dlq list --help");
    BP_CHECK(CLI("send", "--help") == 0 && strstr(out, "--delay") != NULL, "send --help");
    BP_CHECK(CLI("dlq", "--help") == 0 && strstr(out, "requeue") != NULL, "dlq --help");
    /* 3: nobody listens */
    snprintf(closed, sizeof closed, "hourglass://127.0.0.1:%d", tu_free_port());
    rc = run_cli(out, sizeof out, err, sizeof err, "--uri", closed, "--timeout", "500", "levels", (char *)NULL);
    BP_CHECK(rc == 3 && strstr(err, "cannot connect") != NULL, "closed port: exit %d: %.400s", rc, err);
}

/* ------------------------------------------------------------------------
 * Suite errors: no broker needed
 * ------------------------------------------------------------------------ */

static void expect_open_error(const char *uri, hg_err_t want, const char *text, int line)
{
    hg_client_t *c = (hg_client_t *)&c; /* must be reset to NULL */
    hg_client_opts_t o;
    hg_error_t err;
    hg_err_t e;

    hg_client_opts_init(&o);
    o.reconnect_backoff.attempts = 1;
    o.reconnect_backoff.base_ms = 10;
    e = hg_client_open(uri, &o, &c, &err);
    if (e != want || c != NULL || err.code != want || strstr(err.message, text) == NULL) {
        char msg[600];
        snprintf(msg, sizeof msg, "hg_client_open(%s): %s '%s', want %s with '%s'", uri, hg_strerror(e), err.message,
                 hg_strerror(want), text);
        CU_assertImplementation(CU_FALSE, (unsigned)line, msg, __FILE__, "", CU_FALSE);
    }
}

#define OPEN_ERROR(uri, want, text) expect_open_error(uri, want, text, __LINE__)

static void test_bad_uris_and_options(void)
{
    char closed[128];
    hg_consumer_opts_t o;
    hg_consumer_t *c = NULL;
    hg_client_opts_t co;
    hg_error_t err;

    OPEN_ERROR("redis://localhost", HG_ERR_URI, "bad URI: unsupported scheme 'redis'");
    OPEN_ERROR("hourglass://", HG_ERR_URI, "missing host");
    OPEN_ERROR("hourglass://h:0", HG_ERR_URI, "bad port '0'");
    OPEN_ERROR("hourglass://h:65536", HG_ERR_URI, "bad port '65536'");
    OPEN_ERROR("hourglass://:pw@h", HG_ERR_URI, "empty user name");
    OPEN_ERROR("hourglass://h/x", HG_ERR_URI, "unexpected path");
    OPEN_ERROR("hourglass+tls://h?bogus=1", HG_ERR_URI, "unknown URI parameter 'bogus'");
    OPEN_ERROR(NULL, HG_ERR_URI, "empty URI");
    snprintf(closed, sizeof closed, "hourglass://127.0.0.1:%d", tu_free_port());
    OPEN_ERROR(closed, HG_ERR_CONNECT, "Connection refused (after 2 attempts)");
    OPEN_ERROR("hourglass://no-such-host.invalid", HG_ERR_CONNECT, "cannot resolve host 'no-such-host.invalid'");
    BP_CHECK(strcmp(hg_strerror(HG_ERR_IO), "connection lost") == 0, "hg_strerror");

    hg_client_opts_init(&co);
    co.reconnect_backoff.factor = 0.5;
    BP_CHECK(hg_client_open("hourglass://h", &co, NULL, &err) == HG_ERR_ARG, "out NULL");
    {
        hg_client_t *cl = NULL;
        BP_CHECK(hg_client_open("hourglass://h", &co, &cl, &err) == HG_ERR_ARG &&
                     strstr(err.message, "reconnect_backoff: factor 0.5") != NULL,
                 "bad backoff: '%s'", err.message);
    }

    consumer_opts(&o, &co, "g", "t");
    hg_client_opts_init(&co);
    o.uri = "hourglass://h:99999";
    BP_CHECK(hg_consumer_new(&o, &c, &err) == HG_ERR_URI && c == NULL && strstr(err.message, "bad port") != NULL,
             "consumer bad URI: '%s'", err.message);
    o.uri = "hourglass://127.0.0.1";
#define CONSUMER_ERROR(field_change, text)                                                                      \
    do {                                                                                                        \
        hg_consumer_opts_t b = o;                                                                               \
        field_change;                                                                                           \
        BP_CHECK(hg_consumer_new(&b, &c, &err) == HG_ERR_ARG && c == NULL && strstr(err.message, text) != NULL, \
                 "%s: got '%s', want '%s'", #field_change, err.message, text);                                  \
    } while (0)
    CONSUMER_ERROR(b.workers = 0, "workers 0 out of range 1..256");
    CONSUMER_ERROR(b.count = 1001, "count 1001 out of range");
    CONSUMER_ERROR(b.group = "a b", "group 'a b' is not a valid name");
    CONSUMER_ERROR(b.topic = NULL, "topic (NULL) is not a valid name");
    CONSUMER_ERROR(b.handler = NULL, "handler is required");
    CONSUMER_ERROR(b.batch_handler = batch_handler, "handler and batch_handler are both set");
    CONSUMER_ERROR(b.block_ms = 0, "block_ms 0 out of range");
    CONSUMER_ERROR((b.lease_ms = 1000, b.touch_interval_ms = 1000), "touch_interval_ms 1000 must be below lease_ms");
    CONSUMER_ERROR(b.retry.jitter = 2, "retry: jitter 2 out of range");
    CONSUMER_ERROR(b.uri = NULL, "uri is required");
    BP_CHECK(hg_consumer_new(&o, &c, &err) == HG_OK && c != NULL, "good options refused: %s", err.message);
    hg_consumer_free(c);
}

/* ------------------------------------------------------------------------ */

static int add_suites(void)
{
    static const struct {
        const char *suite, *name;
        CU_TestFunc fn;
    } tests[] = {
        { "client", "hg_send_many: 1000 pipelined, one error", test_send_many_pipelined },
        { "client", "send delays, errors, generic command, levels", test_send_delays_and_levels },
        { "client", "credentials refused: HG_ERR_AUTH", test_auth_refused },
        { "client", "a payload past max-bulk: the broker's answer, not resent", test_send_past_max_bulk },
        { "client", "hg_client_set_read_timeout applies to the next call", test_read_timeout_set },
        { "client", "hg_client_command_notice: a reply in time, none; a slow one, once", test_command_notice },
        { "client", "hg_client_clone as the same user; hg_client_set_stop_fd stops a waiting call",
          test_clone_and_stop_fd },
        { "consumer", "send + consume round trip, 3 workers", test_round_trip },
        { "consumer", "HG_RETRY: local backoff, then NACK with reason", test_retry_backoff_then_nack },
        { "consumer", "HG_FAIL: NACK with reason lands in the DLQ", test_fail_goes_to_dlq },
        { "consumer", "batch handler: one call per PULL, one ACK, FAIL to the DLQ, RETRY again", test_batch_handler },
        { "consumer", "TOUCH keeps a slow handler's lease", test_touch_keeps_slow_handler_lease },
        { "consumer", "stop from a signal handler", test_stop_from_signal_handler },
        { "consumer", "credentials: URI, opts, refused, NOPERM", test_credentials },
        { "consumer", "refused PULLs, then answered: HG_CONN_REFUSED then HG_CONN_ANSWERED once per worker",
          test_answered_after_refusals },
        { "restart", "broker kill -9 + restart: nothing lost", test_broker_restart_nothing_lost },
        { "restart", "connection lost mid-call: sends resent, commands not", test_resend_after_connection_loss },
        { "cli", "dlq list/show/requeue/drop round trip", test_cli_dlq_round_trip },
        { "cli", "dlq drop|requeue --all refused: NOPERM, no announcement first", test_cli_dlq_all_refused_first },
        { "cli", "commands, --json and exit codes", test_cli_commands_and_exit_codes },
        { "cli", "group create/del, topics, topic del", test_cli_group_create_del },
        { "cli", "table and show output escape C1 and bidi controls", test_cli_text_escapes_controls },
        { "cli", "passwd: a line the broker takes; bad names and roles refused", test_cli_passwd },
        { "cli", "passwd: a bad --cost refused before the password is read or asked",
          test_cli_passwd_cost_before_prompt },
        { "cli", "--config: a daemon's key is refused with the keys the file takes", test_cli_config_daemon_key },
        { "errors", "bad URIs and options", test_bad_uris_and_options },
    };
    CU_pSuite s = NULL;
    const char *current = "";

    bp_set_failure_counter(CU_get_number_of_failures);
    pthread_mutex_init(&S.lock, NULL);
    for (size_t i = 0; i < sizeof tests / sizeof tests[0]; i++) {
        if (strcmp(tests[i].suite, current) != 0) {
            current = tests[i].suite;
            s = CU_add_suite_with_setup_and_teardown(current, NULL, NULL, setup, teardown);
            if (s == NULL)
                return -1;
        }
        if (CU_add_test(s, tests[i].name, tests[i].fn) == NULL)
            return -1;
    }
    return 0;
}

int main(int argc, char **argv)
{
    signal(SIGPIPE, SIG_IGN);
    return tu_cunit_main(argc, argv, add_suites);
}
