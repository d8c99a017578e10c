/*
 * tests/integration/test_order_race.c — the payment / cancel race THROUGH THE
 * BROKER: the real ./hourglass-broker, the real ./hourglass-consumer
 * (--workers 8), a private MariaDB.
 *
 *   2 000 orders are seeded (of_seed, 40 SKUs shared by all: hot stock
 *   rows). For every order three duplicate cancel messages (payload = the
 *   order id, no delay) are SENT to the consumer's topic — the orders in a
 *   shuffled order, the 12 messages of every 4 consecutive orders shuffled
 *   among themselves, so an order's duplicates sit close together and are
 *   often in flight on different workers at once — with hg_send_many in
 *   batches, while the consumer is already consuming and 8 payer threads
 *   (each with its own hg_order_db) pay every order once. The payments are
 *   paced by the consumer's progress, read from its /metrics every 2 ms: the
 *   payment of order X is released when the consumer has settled p − u
 *   messages, p being the stream position of X's first cancel and u uniform
 *   in 0..24 + 2 × the batch size — i.e. about when that cancel is pulled or
 *   handled (the consumer's counters move a batch at a time). So the
 *   payment and the cancels of most orders collide within milliseconds,
 *   whatever the machine's speed, and which claim wins is decided by the
 *   race itself (about half each; the printout says how close they came).
 *   A consumer that makes no progress for 5 s releases the payments.
 *
 *   Once the consumer settled every message (its counters cancelled +
 *   not_pending + not_found + permanent reach 6 000, and the group has
 *   nothing ready, retrying or in flight), it is stopped (SIGTERM → exit 0)
 *   and of_check must find: no order both paid and cancelled, every
 *   order exactly one of paid / cancelled (and the one its payment said),
 *   stock conserved to the unit (received = available + reserved + sold per
 *   SKU; reserved = 0; sold = the paid orders' units; available = the seed's
 *   plus the cancelled orders' units), the consumer's cancelled counter ==
 *   orders in status cancelled == payments that found the order not pending,
 *   no permanent failure, the DLQ empty.
 *
 * The race runs three times, on a fresh database and group each: with
 * hourglass-consumer --batch-size 1 (one transaction per message), 10 and
 * 100 (hg_order_cancel_batch: the messages of one PULL in one transaction,
 * an order's duplicates often in the same batch) — the same checks each time.
 *
 * Prints the figures: elapsed, orders/s, messages/s, paid vs cancelled,
 * retries. Runs in ~3 s on an idle 2-core machine, ~25–40 s with two CPU hogs
 * beside it (deadline 90 s for the consumption).
 */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include "include/hourglass/hourglass.h"
#include "tests/helpers/order_env.h"

#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <CUnit/CUnit.h>

#define RACE_ORDERS     2000
#define RACE_DUPS       3
#define RACE_MESSAGES   (RACE_ORDERS * RACE_DUPS)
#define RACE_PAYERS     8
#define RACE_WORKERS    8
#define RACE_DB         "race"
#define RACE_SEND_BATCH 100
#define RACE_LEAD \
    24 /* a payment is released 0..lead messages before its first cancel, lead = RACE_LEAD + 2 x the batch size */
#define RACE_WINDOW      4     /* orders whose messages are shuffled together */
#define RACE_DEADLINE_MS 90000 /* first send → every message settled (takes ~3 s on an idle machine) */
#define RACE_STALL_MS    5000  /* payers stop waiting for a consumer that made no progress this long */

static oe_env_t env;

static int race_init(void)
{
    return oe_suite_start(&env, CU_get_number_of_failures);
}

static int race_cleanup(void)
{
    oe_stop(&env);
    return 0;
}

static void sleep_ms(unsigned ms)
{
    struct timespec ts = { ms / 1000, (long)(ms % 1000) * 1000000L };
    nanosleep(&ts, NULL);
}

static uint64_t wall_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (uint64_t)ts.tv_sec * 1000000u + (uint64_t)ts.tv_nsec / 1000u;
}

/* splitmix64: a fixed, portable shuffle. */
static uint64_t rnd_next(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

static void shuffle(uint64_t *a, size_t n, uint64_t *seed)
{
    for (size_t i = n - 1; i > 0; i--) {
        size_t j = (size_t)(rnd_next(seed) % (i + 1));
        uint64_t t = a[i];
        a[i] = a[j];
        a[j] = t;
    }
}

/* ---------------------------------------------------------------- the consumer's progress */

static const char *const progress_names[] = { "hourglass_consumer_cancelled_total",
                                              "hourglass_consumer_not_pending_total",
                                              "hourglass_consumer_not_found_total",
                                              "hourglass_consumer_permanent_failures_total" };
#define NPROGRESS (sizeof progress_names / sizeof progress_names[0])

static int metrics_port;
static char race_group[32];              /* "race-b<batch size>": a group per run */
static atomic_llong settled;             /* messages the consumer finished, per its /metrics */
static atomic_uint_fast64_t progress_ms; /* monotonic ms when settled last grew */
static atomic_int pacer_stop;

/* Messages settled: every message ends in exactly one of the four counters
 * (a transient failure counts only in retries until its retry settles it). */
static long long read_settled(double *v)
{
    if (oe_metrics(metrics_port, NPROGRESS, progress_names, v) != 0)
        return -1;
    double sum = 0;
    for (size_t i = 0; i < NPROGRESS; i++)
        sum += v[i] < 0 ? 0 : v[i];
    return (long long)sum;
}

static void *pacer(void *arg)
{
    (void)arg;
    while (!atomic_load(&pacer_stop)) {
        double v[NPROGRESS];
        long long n = read_settled(v);
        if (n > atomic_load(&settled)) {
            atomic_store(&settled, n);
            atomic_store(&progress_ms, tu_now_mono_ms());
        }
        sleep_ms(2);
    }
    return NULL;
}

/* ---------------------------------------------------------------- the payers */

static uint64_t pay_order[RACE_ORDERS]; /* order ids, by release point */
static long long pay_gate[RACE_ORDERS]; /* payment j waits for this many settled messages */
static atomic_size_t pay_next;
static atomic_int pay_result[RACE_ORDERS + 1]; /* by order id: the payment's outcome */
static uint64_t pay_start_us[RACE_ORDERS + 1]; /* by order id: wall clock µs when its payment began */
static atomic_uint_fast64_t paid_wins, pay_not_pending, pay_other, pay_retries, pay_deadlocks, pay_lock_waits,
    pay_gave_up, gate_timeouts;
static uint64_t race_t0;
static char pay_first_error[512];
static pthread_mutex_t pay_error_lock = PTHREAD_MUTEX_INITIALIZER;

static void pay_error(const char *msg)
{
    pthread_mutex_lock(&pay_error_lock);
    if (pay_first_error[0] == '\0')
        snprintf(pay_first_error, sizeof pay_first_error, "%s", msg);
    pthread_mutex_unlock(&pay_error_lock);
}

static void *payer(void *arg)
{
    (void)arg;
    hg_order_error_t err;
    hg_order_db *db = oe_open_db(&env, RACE_DB, &err);
    if (db == NULL) {
        pay_error(err.message);
        atomic_fetch_add(&pay_other, 1);
        return NULL;
    }
    for (;;) {
        size_t j = atomic_fetch_add(&pay_next, 1);
        if (j >= RACE_ORDERS)
            break;
        /* Payment j waits until the consumer settled pay_gate[j] messages. */
        while (atomic_load(&settled) < pay_gate[j]) {
            if (tu_now_mono_ms() - atomic_load(&progress_ms) > RACE_STALL_MS) {
                atomic_fetch_add(&gate_timeouts, 1);
                break;
            }
            sleep_ms(1);
        }
        uint64_t id = pay_order[j];
        pay_start_us[id] = wall_us();
        hg_order_outcome_t out = HG_ORDER_TRANSIENT;
        for (unsigned attempt = 0;; attempt++) {
            if (hg_order_pay(db, id, &out, &err) == 0 || out != HG_ORDER_TRANSIENT)
                break;
            atomic_fetch_add(&pay_retries, 1);
            if (err.code == 1213)
                atomic_fetch_add(&pay_deadlocks, 1);
            if (err.code == 1205)
                atomic_fetch_add(&pay_lock_waits, 1);
            if (attempt == 50) {
                atomic_fetch_add(&pay_gave_up, 1);
                pay_error(err.message);
                break;
            }
            sleep_ms((1u << (attempt < 6 ? attempt : 6)) + (unsigned)(id % 3)); /* 1 … 66 ms */
        }
        atomic_store(&pay_result[id], (int)out);
        if (out == HG_ORDER_PAID)
            atomic_fetch_add(&paid_wins, 1);
        else if (out == HG_ORDER_NOT_PENDING)
            atomic_fetch_add(&pay_not_pending, 1);
        else {
            atomic_fetch_add(&pay_other, 1);
            if (out == HG_ORDER_PERMANENT)
                pay_error(err.message);
        }
    }
    hg_order_db_close(db);
    return NULL;
}

/* ---------------------------------------------------------------- settling */

/* ready + retry (ready and delayed) + in flight of the group; -1 on error. */
static long long group_open(rc_conn_t *c, long long *dlq)
{
    static const char *const fields[] = { "ready", "retry", "inflight" };
    char err[256];
    long long sum = 0, v;
    for (size_t i = 0; i < 3; i++) {
        if (bp_group_field(c, race_group, fields[i], &v, err, sizeof err) != 1)
            return -1;
        sum += v;
    }
    if (bp_group_field(c, race_group, "dlq", dlq, err, sizeof err) != 1)
        return -1;
    return sum;
}

typedef struct settle_ctx {
    rc_conn_t *c;
    long long settled, open, dlq;
} settle_ctx_t;

static int all_settled(void *arg)
{
    settle_ctx_t *s = arg;
    double v[NPROGRESS];
    s->settled = read_settled(v);
    s->open = group_open(s->c, &s->dlq);
    return s->settled >= RACE_MESSAGES && s->open == 0;
}

/* ---------------------------------------------------------------- the test */

/* One race with hourglass-consumer --batch-size batch_size (1: one
 * transaction per message; 10, 100: that many per transaction, the
 * duplicates of an order often in the same batch). */
static void race_at(const char *batch_size)
{
    printf("\n  batch-size %s:", batch_size);
    snprintf(race_group, sizeof race_group, "race-b%s", batch_size);
    CU_ASSERT_EQUAL_FATAL(mysql_query(env.admin, "DROP DATABASE IF EXISTS " RACE_DB), 0);
    atomic_store(&paid_wins, 0);
    atomic_store(&pay_not_pending, 0);
    atomic_store(&pay_other, 0);
    atomic_store(&pay_retries, 0);
    atomic_store(&pay_deadlocks, 0);
    atomic_store(&pay_lock_waits, 0);
    atomic_store(&pay_gave_up, 0);
    atomic_store(&gate_timeouts, 0);
    pay_first_error[0] = '\0';

    /* 40 SKUs shared by 2 000 orders: pay and cancel contend on stock rows. */
    of_seed_spec_t spec = { .first_id = 1,
                            .orders = RACE_ORDERS,
                            .first_sku = 1,
                            .skus = 40,
                            .max_items = 3,
                            .max_qty = 3,
                            .stock_per_sku = 100000,
                            .expire_in_ms = 30 * 60 * 1000,
                            .with_outbox = 1,
                            .random_seed = 7 };
    hg_order_db *db = oe_fresh_database(&env, RACE_DB, RACE_ORDERS, &spec);
    CU_ASSERT_PTR_NOT_NULL_FATAL(db);
    of_report_t r0;
    hg_order_error_t e;
    CU_ASSERT_EQUAL_FATAL(oe_check(&env, RACE_DB, 3600, &r0, &e), 0);
    CU_ASSERT_TRUE_FATAL(r0.ok);
    CU_ASSERT_EQUAL_FATAL(r0.pending, RACE_ORDERS);

    /* The stream: the orders shuffled, every window of RACE_WINDOW orders'
     * 3 × RACE_WINDOW messages shuffled among themselves. The payments: each
     * order's released near the stream position of its first cancel. */
    static uint64_t msg_order[RACE_MESSAGES], by_id[RACE_ORDERS];
    /* The consumer's progress grows a batch at a time (its counters move
     * when a batch's transaction ends): a payment gated inside the batch
     * that holds its order's cancel is released only after that cancel
     * committed, so with a lead below the batch size the cancels won every
     * race at --batch-size 100 on a loaded machine (paid 0 of 2 000). Up
     * to two batches ahead, the payment meets the batch in flight. */
    const long long lead = RACE_LEAD + 5 * atoll(batch_size);
    static long long gate_of[RACE_ORDERS + 1];
    uint64_t seed = 20240501;
    for (size_t i = 0; i < RACE_ORDERS; i++)
        by_id[i] = 1 + i;
    shuffle(by_id, RACE_ORDERS, &seed);
    for (size_t i = 0; i < RACE_MESSAGES; i++)
        msg_order[i] = by_id[i / RACE_DUPS];
    for (size_t w = 0; w < RACE_MESSAGES; w += RACE_WINDOW * RACE_DUPS)
        shuffle(msg_order + w,
                RACE_MESSAGES - w < RACE_WINDOW * RACE_DUPS ? RACE_MESSAGES - w : RACE_WINDOW * RACE_DUPS, &seed);
    for (size_t i = 0; i <= RACE_ORDERS; i++)
        gate_of[i] = -1;
    for (size_t i = 0; i < RACE_MESSAGES; i++)
        if (gate_of[msg_order[i]] < 0)
            gate_of[msg_order[i]] = (long long)i - lead + (long long)(rnd_next(&seed) % (uint64_t)(lead + 1));
    for (size_t i = 0; i < RACE_ORDERS; i++)
        pay_order[i] = 1 + i;
    shuffle(pay_order, RACE_ORDERS, &seed);  /* ties in the gate: a random order */
    for (size_t i = 1; i < RACE_ORDERS; i++) /* insertion sort by gate (nearly sorted: cheap enough) */
        for (size_t k = i; k > 0 && gate_of[pay_order[k - 1]] > gate_of[pay_order[k]]; k--) {
            uint64_t t = pay_order[k];
            pay_order[k] = pay_order[k - 1];
            pay_order[k - 1] = t;
        }
    for (size_t i = 0; i < RACE_ORDERS; i++)
        pay_gate[i] = gate_of[pay_order[i]];
    for (size_t i = 0; i <= RACE_ORDERS; i++)
        atomic_store(&pay_result[i], -1);

    char err[512];
    rc_conn_t c;
    CU_ASSERT_EQUAL_FATAL(bp_connect(&env.broker, &c, err, sizeof err), 0);
    CU_ASSERT_EQUAL_FATAL(bp_ok_cmd(&c, err, sizeof err, "GROUP", "CREATE", race_group, OE_TOPIC, "FROM", "NOW", NULL),
                          0);

    /* The consumer, up and serving /metrics before anything is sent. Local
     * retries (base 20 ms) ride out deadlocks with the payers; 8 attempts so
     * that a NACK to the broker's schedule (level 3 = 10 s) stays rare. The
     * lease is long so that no message is handled twice by a lease expiry. */
    char dir[512], log_path[600];
    CU_ASSERT_EQUAL_FATAL(tu_mkdtemp("race", dir, sizeof dir), 0);
    snprintf(log_path, sizeof log_path, "%s/consumer.log", dir);
    metrics_port = tu_free_port();
    const char *extra[] = { "--lease", "30s", "--retry-attempts", "8", "--batch-size", batch_size, NULL };
    pid_t pid = oe_start_consumer(&env, RACE_DB, race_group, RACE_WORKERS, metrics_port, log_path, extra);
    CU_ASSERT_TRUE_FATAL(pid > 0);
    uint64_t up0 = tu_now_mono_ms();
    while (oe_metric(metrics_port, "hourglass_consumer_cancelled_total") != 0 && tu_now_mono_ms() - up0 < 20000)
        sleep_ms(10);
    if (oe_metric(metrics_port, "hourglass_consumer_cancelled_total") != 0) {
        oe_print_file(log_path);
        CU_FAIL_FATAL("hourglass-consumer did not serve /metrics within 20 s");
    }

    hg_client_t *cl;
    hg_error_t herr;
    char uri[64];
    snprintf(uri, sizeof uri, "hourglass://127.0.0.1:%d", env.broker.port);
    CU_ASSERT_EQUAL_FATAL(hg_client_open(uri, NULL, &cl, &herr), HG_OK);

    /* Go: the pacer, the payers, and the sends from this thread. */
    atomic_store(&settled, 0);
    atomic_store(&pacer_stop, 0);
    atomic_store(&pay_next, 0);
    race_t0 = tu_now_mono_ms();
    atomic_store(&progress_ms, race_t0);
    pthread_t pacer_thread, payers[RACE_PAYERS];
    CU_ASSERT_EQUAL_FATAL(pthread_create(&pacer_thread, NULL, pacer, NULL), 0);
    for (int t = 0; t < RACE_PAYERS; t++)
        CU_ASSERT_EQUAL_FATAL(pthread_create(&payers[t], NULL, payer, NULL), 0);

    static char payloads[RACE_MESSAGES][24];
    static hg_send_item_t items[RACE_SEND_BATCH];
    size_t sent = 0;
    for (size_t i = 0; i < RACE_MESSAGES; i += RACE_SEND_BATCH) {
        size_t n = RACE_MESSAGES - i < RACE_SEND_BATCH ? RACE_MESSAGES - i : RACE_SEND_BATCH;
        for (size_t k = 0; k < n; k++) {
            size_t len = (size_t)snprintf(payloads[i + k], sizeof payloads[i + k], "%" PRIu64, msg_order[i + k]);
            items[k] = (hg_send_item_t){
                .topic = OE_TOPIC, .payload = payloads[i + k], .payload_len = len, .delay = hg_delay_none()
            };
        }
        size_t ok = 0;
        hg_err_t rc = hg_send_many(cl, items, n, &ok);
        if (rc != HG_OK)
            fprintf(stderr, "\n  hg_send_many: %s\n", hg_client_errmsg(cl));
        CU_ASSERT_EQUAL(rc, HG_OK);
        sent += ok;
    }
    uint64_t sent_ms = tu_now_mono_ms() - race_t0;
    hg_client_close(cl);
    CU_ASSERT_EQUAL(sent, RACE_MESSAGES);

    for (int t = 0; t < RACE_PAYERS; t++)
        pthread_join(payers[t], NULL);
    uint64_t paid_ms = tu_now_mono_ms() - race_t0;

    settle_ctx_t s = { &c, -1, -1, -1 };
    int settled_rc = tu_poll_until(all_settled, &s, RACE_DEADLINE_MS, 20);
    uint64_t ms = tu_now_mono_ms() - race_t0;
    atomic_store(&pacer_stop, 1);
    pthread_join(pacer_thread, NULL);
    if (settled_rc != 0)
        fprintf(stderr, "\n  not settled after %d ms: %lld of %d messages settled, group ready+retry+inflight %lld\n",
                RACE_DEADLINE_MS, s.settled, RACE_MESSAGES, s.open);
    CU_ASSERT_EQUAL(settled_rc, 0);

    /* The consumer's final counters, then stop it. */
    static const char *const names[] = {
        "hourglass_consumer_cancelled_total",     "hourglass_consumer_not_pending_total",
        "hourglass_consumer_not_found_total",     "hourglass_consumer_permanent_failures_total",
        "hourglass_consumer_retries_total",       "hourglass_consumer_nacked_total",
        "hourglass_consumer_lease_lost_total",    "hourglass_consumer_delivered_total",
        "hourglass_consumer_handler_seconds_sum", "hourglass_consumer_handler_seconds_count"
    };
    double m[sizeof names / sizeof names[0]];
    CU_ASSERT_EQUAL(oe_metrics(metrics_port, sizeof names / sizeof names[0], names, m), 0);
    long long m_cancelled = (long long)m[0], m_not_pending = (long long)m[1], m_not_found = (long long)m[2],
              m_permanent = (long long)m[3];
    CU_ASSERT_EQUAL(oe_stop_consumer(pid), 0);

    long long dlq_len = -1;
    CU_ASSERT_EQUAL(bp_int_cmd(&c, &dlq_len, err, sizeof err, "DLQ", "LEN", race_group, NULL), 0);
    rc_close(&c);

    of_report_t r;
    CU_ASSERT_EQUAL_FATAL(oe_check(&env, RACE_DB, 3600, &r, &e), 0);
    char text[1024];
    of_report_format(&r, text, sizeof text);

    if (ms == 0)
        ms = 1;
    printf("\n  race through the broker: %d orders, %d cancel messages (3 per order) + %d payments"
           " on %d threads, hourglass-consumer --workers %d\n"
           "  sent in %" PRIu64 " ms, payments done in %" PRIu64 " ms, every message settled in %" PRIu64 " ms:"
           " %.0f orders/s, %.0f messages/s\n"
           "  paid %" PRIu64 " (%.1f %%), cancelled %" PRIu64 " (%.1f %%); payments that found the order cancelled"
           " %" PRIu64 "\n"
           "  consumer /metrics: cancelled %lld, not pending %lld, not found %lld, permanent %lld, transient retries"
           " %.0f, NACKs %.0f, lease lost %.0f, delivered %.0f, mean handler time %.0f µs\n"
           "  payers: transient retries %" PRIu64 " (deadlocks %" PRIu64 ", lock waits %" PRIu64 "), paced by"
           " the consumer's progress (released by a stall: %" PRIu64 ")\n"
           "  broker: DLQ %lld\n  %s\n",
           RACE_ORDERS, RACE_MESSAGES, RACE_ORDERS, RACE_PAYERS, RACE_WORKERS, sent_ms, paid_ms, ms,
           RACE_ORDERS * 1000.0 / (double)ms, RACE_MESSAGES * 1000.0 / (double)ms, r.paid,
           100.0 * (double)r.paid / RACE_ORDERS, r.cancelled, 100.0 * (double)r.cancelled / RACE_ORDERS,
           (uint64_t)pay_not_pending, m_cancelled, m_not_pending, m_not_found, m_permanent, m[4], m[5], m[6], m[7],
           m[9] > 0 ? m[8] * 1e6 / m[9] : 0.0, (uint64_t)pay_retries, (uint64_t)pay_deadlocks, (uint64_t)pay_lock_waits,
           (uint64_t)gate_timeouts, dlq_len, text);
    if (pay_first_error[0] != '\0')
        printf("  first payment error: %s\n", pay_first_error);

    /* The payers: every payment reached a definite answer. */
    CU_ASSERT_EQUAL(pay_other, 0);
    CU_ASSERT_EQUAL(pay_gave_up, 0);
    CU_ASSERT_EQUAL(paid_wins + pay_not_pending, RACE_ORDERS);

    /* The consumer: every message settled once, nothing failed for good. */
    CU_ASSERT_EQUAL(m_cancelled + m_not_pending + m_not_found + m_permanent, RACE_MESSAGES);
    CU_ASSERT_EQUAL(m_not_found, 0);
    CU_ASSERT_EQUAL(m_permanent, 0);
    CU_ASSERT_EQUAL(s.open, 0);
    CU_ASSERT_EQUAL(s.dlq, 0);
    CU_ASSERT_EQUAL(dlq_len, 0);

    /* The orders: exactly one of paid / cancelled, never both. */
    if (!r.ok)
        printf("  first defect: %s\n", r.first_defect);
    CU_ASSERT_TRUE(r.ok);
    CU_ASSERT_EQUAL(r.orders, RACE_ORDERS);
    CU_ASSERT_EQUAL(r.pending, 0);
    CU_ASSERT_EQUAL(r.paid_and_cancelled, 0);
    CU_ASSERT_EQUAL(r.status_mismatch, 0);
    CU_ASSERT_EQUAL(r.paid + r.cancelled, RACE_ORDERS);
    CU_ASSERT_EQUAL(r.paid, paid_wins);
    CU_ASSERT_EQUAL(r.cancelled, pay_not_pending);
    CU_ASSERT_EQUAL((long long)r.cancelled, m_cancelled);
    CU_ASSERT_EQUAL(oe_scalar(&env, "SELECT COUNT(*) FROM " RACE_DB ".orders WHERE status = 'cancelled'"
                                    " AND cancel_reason = 'timeout-message'"),
                    (long long)r.cancelled);
    CU_ASSERT_EQUAL(r.outbox_open_final, 0);

    /* Order by order: the payment said PAID exactly for the orders that are
     * paid. And how close the race was: for the orders a cancel won, the
     * cancel's commit (cancelled_at, same clock) against the start of the
     * payment that lost — "during" means the payment had begun before the
     * cancel committed. */
    int mismatched = 0;
    unsigned during = 0, within5 = 0, within50 = 0;
    CU_ASSERT_EQUAL_FATAL(
        mysql_query(env.admin, "SELECT id, status, UNIX_TIMESTAMP(cancelled_at) FROM " RACE_DB ".orders"), 0);
    MYSQL_RES *res = mysql_store_result(env.admin);
    CU_ASSERT_PTR_NOT_NULL_FATAL(res);
    MYSQL_ROW row;
    while ((row = mysql_fetch_row(res)) != NULL) {
        uint64_t id = strtoull(row[0], NULL, 10);
        int want_paid = id >= 1 && id <= RACE_ORDERS && atomic_load(&pay_result[id]) == HG_ORDER_PAID;
        if (want_paid != (strcmp(row[1], "paid") == 0) && mismatched++ < 5)
            fprintf(stderr, "  order %" PRIu64 ": status %s, its payment answered %s\n", id, row[1],
                    hg_order_outcome_name((hg_order_outcome_t)atomic_load(&pay_result[id])));
        if (row[2] != NULL && id >= 1 && id <= RACE_ORDERS) {
            double lead_ms = ((double)pay_start_us[id] - strtod(row[2], NULL) * 1e6) / 1000;
            during += lead_ms < 0;
            within5 += lead_ms >= 0 && lead_ms < 5;
            within50 += lead_ms >= 5 && lead_ms < 50;
        }
    }
    mysql_free_result(res);
    CU_ASSERT_EQUAL(mismatched, 0);
    printf("  closeness: of the %" PRIu64 " orders a cancel won, the losing payment began before the cancel"
           " committed for %u, < 5 ms after it for %u, 5–50 ms after it for %u\n",
           r.cancelled, during, within5, within50);
    /* It was a race: cancels won, and so did payments or a payment was under
     * way when the cancel that beat it committed. At --batch-size 100 most
     * payments lose whatever their release (a batch holds the 40 stock rows
     * for its one transaction, ~27 ms, and the 8 workers' batches follow
     * each other): 13–195 of 2 000 won here, and 0 once under a loaded CI,
     * with 2 payments under way at the cancel's commit. */
    CU_ASSERT_TRUE(r.cancelled > 0 && (r.paid > 0 || during > 0));

    /* Stock, to the unit. */
    CU_ASSERT_EQUAL(r.skus_unbalanced, 0);
    CU_ASSERT_EQUAL(r.skus_reserved_wrong, 0);
    CU_ASSERT_EQUAL(r.skus_sold_wrong, 0);
    CU_ASSERT_EQUAL(r.received, r0.received); /* nothing created or lost */
    CU_ASSERT_EQUAL(r.received, r.available + r.reserved + r.sold);
    CU_ASSERT_EQUAL(r.reserved, 0);
    CU_ASSERT_EQUAL(r.sold,
                    oe_scalar(&env, "SELECT COALESCE(SUM(i.qty), 0) FROM " RACE_DB ".order_items i JOIN " RACE_DB
                                    ".orders o ON o.id = i.order_id WHERE o.status = 'paid'"));
    CU_ASSERT_EQUAL(r.available,
                    r0.available + oe_scalar(&env, "SELECT COALESCE(SUM(i.qty), 0) FROM " RACE_DB ".order_items i"
                                                   " JOIN " RACE_DB ".orders o ON o.id = i.order_id"
                                                   " WHERE o.status = 'cancelled'"));
    CU_ASSERT_EQUAL(r0.reserved, r.sold + (r.available - r0.available)); /* every reserved unit went one way */

    if (CU_get_number_of_failures() > 0)
        oe_print_file(log_path);
    tu_rmtree(dir);
    hg_order_db_close(db);
}

static void test_race_batch_1(void)
{
    race_at("1");
}

static void test_race_batch_10(void)
{
    race_at("10");
}

static void test_race_batch_100(void)
{
    race_at("100");
}

/* ---------------------------------------------------------------- registry */

static const tu_test_t race_tests[] = {
    { "2 000 orders: payments vs 3 duplicate cancels each, hourglass-consumer --batch-size 1", test_race_batch_1 },
    { "the same race at --batch-size 10", test_race_batch_10 },
    { "the same race at --batch-size 100", test_race_batch_100 },
    { NULL, NULL },
};

static int add_suites(void)
{
    return tu_add_suite("race", race_init, race_cleanup, NULL, NULL, race_tests);
}

int main(int argc, char **argv)
{
    return oe_cunit_main(argc, argv, add_suites);
}
