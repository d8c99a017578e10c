/*
 * tests/unit/test_sched.c — CUnit suite for levels/sched.c (DESIGN §3).
 *
 * The clock is injected (a variable the test moves), so every due time, lease
 * expiry and retry step is checked to the millisecond without sleeping: the
 * RocketMQ retry rule (level 3 + r, DLQ at max-reconsume), a whole message life
 * of 17 deliveries ending in the DLQ, per-group max-reconsume, NACK with an
 * explicit level or delay, wake-up times, bounded runs, and clock steps.
 */
#include "levels/sched.h"
#include "levels/store.h"
#include "tests/helpers/store_probe.h"
#include "tests/helpers/testutil.h"

#include <CUnit/CUnit.h>
#include <stdio.h>
#include <string.h>

#define SEC  UINT64_C(1000)
#define MIN  (60 * SEC)
#define HOUR (60 * MIN)
#define T0   UINT64_C(1700000000000)

static char dir[512];
static store_t *st;
static sched_t *sc;
static uint64_t now;
static char err[512];

static uint64_t test_clock(void *ctx)
{
    (void)ctx;
    return now;
}

static void open_fresh(void)
{
    CU_ASSERT_FATAL(tu_mkdtemp("sched", dir, sizeof dir) == 0);
    store_options_t o;
    store_options_default(&o);
    char path[600];
    snprintf(path, sizeof path, "%s/data", dir);
    o.path = path;
    o.sync = 0;
    o.segment_bytes = TU_SEGMENT_BYTES;
    err[0] = '\0';
    int rc = store_open(&o, T0, &st, err, sizeof err);
    if (rc != 0) {
        fprintf(stderr, "store_open: %s\n", err);
    }
    CU_ASSERT_FATAL(rc == 0);
    now = T0;
    sc = sched_new(st, test_clock, NULL);
}

static void close_all(void)
{
    err[0] = '\0';
    int rc = store_check(st, err, sizeof err);
    if (rc != 0) {
        fprintf(stderr, "store_check: %s\n", err);
    }
    CU_ASSERT(rc == 0);
    sched_free(sc);
    CU_ASSERT(store_close(st, err, sizeof err) == 0);
    tu_rmtree(dir);
}

static uint64_t send_level(const char *topic, int level, const char *payload)
{
    store_send_req_t r = {
        .topic = topic, .topic_len = strlen(topic), .payload = payload, .payload_len = strlen(payload), .level = level
    };
    uint64_t id = 0, due = 0;
    CU_ASSERT_FATAL(store_send(st, &r, now, &id, &due, err, sizeof err) == 0);
    CU_ASSERT(store_commit(st, err, sizeof err) == 0);
    return id;
}

static int run_all(sched_stats_t *stats)
{
    int more = 1, rounds = 0;
    while (more) {
        CU_ASSERT_FATAL(sched_run(sc, 1000, stats, &more, err, sizeof err) == 0);
        CU_ASSERT_FATAL(store_commit(st, err, sizeof err) == 0);
        rounds++;
    }
    return rounds;
}

/* Lease at most one message of group g on topic; returns its id or 0. */
static uint64_t lease_one(const char *g, const char *topic, uint64_t lease_ms, uint32_t *reconsume)
{
    msg_owned_t m[1];
    int n = 0;
    CU_ASSERT_FATAL(store_lease(st, g, strlen(g), topic, strlen(topic), 1, lease_ms, now, m, &n, err, sizeof err) == 0);
    CU_ASSERT(store_commit(st, err, sizeof err) == 0);
    if (n == 0) {
        return 0;
    }
    uint64_t id = m[0].m.id;
    if (reconsume) {
        *reconsume = m[0].m.reconsume;
    }
    msg_owned_free(&m[0]);
    return id;
}

static void test_retry_rule(void)
{
    lvl_table_t t;
    lvl_table_default(&t);
    int level = -1;
    /* r = 0 → level 3 (10s), r = 1 → 4 (30s), ... r = 15 → 18 (2h). */
    for (uint32_t r = 0; r < 16; r++) {
        CU_ASSERT(sched_retry_level(&t, r, 16, &level) == 1);
        CU_ASSERT_EQUAL(level, (int)(3 + r));
    }
    CU_ASSERT_EQUAL(t.delay_ms[3], 10 * SEC);
    CU_ASSERT_EQUAL(t.delay_ms[4], 30 * SEC);
    CU_ASSERT_EQUAL(t.delay_ms[5], 1 * MIN);
    CU_ASSERT(sched_retry_level(&t, 16, 16, &level) == 0); /* the failure at r = max → DLQ */
    CU_ASSERT(sched_retry_level(&t, 17, 16, &level) == 0);
    /* Past the table's end: clamp to the last level. */
    CU_ASSERT(sched_retry_level(&t, 40, 100, &level) == 1);
    CU_ASSERT_EQUAL(level, 18);
    /* max 0: the first failure goes to the DLQ. */
    CU_ASSERT(sched_retry_level(&t, 0, 0, &level) == 0);
    /* A short table clamps too. */
    lvl_table_t small;
    CU_ASSERT_FATAL(lvl_table_parse("1s 2s", &small, err, sizeof err) == 0);
    CU_ASSERT(sched_retry_level(&small, 0, 16, &level) == 1);
    CU_ASSERT_EQUAL(level, 2);
}

/* The retry decision as a pure function: the rule, the NACK's overrides, and
 * the limit over both. */
static void test_retry_decide(void)
{
    lvl_table_t t;
    lvl_table_default(&t);
    const char *why = "why";
    sched_nack_req_t none = { .reason = why, .reason_len = 3 };
    store_fail_req_t d;
    /* the rule alone: level 3 + r, clamped; the DLQ at r >= max */
    for (uint32_t r = 0; r < 16; r++) {
        d = sched_retry_decide(&t, r, 16, &none);
        CU_ASSERT(!d.to_dlq && d.level == (int)(r + 3 > 18 ? 18 : r + 3) && d.delay_ms == 0);
    }
    d = sched_retry_decide(&t, 40, 100, &none);
    CU_ASSERT(!d.to_dlq && d.level == 18);
    d = sched_retry_decide(&t, 16, 16, &none);
    CU_ASSERT(d.to_dlq && d.level == 0 && d.delay_ms == 0);
    d = sched_retry_decide(&t, 0, 0, &none); /* max 0: the first failure is the last */
    CU_ASSERT(d.to_dlq);
    CU_ASSERT(d.reason == why && d.reason_len == 3 && d.decide == NULL && d.decide_ctx == NULL);
    /* NACK LEVEL / DELAY override the rule below the limit; LEVEL wins over DELAY */
    sched_nack_req_t lvl = { .level = 1 }, dly = { .delay_ms = 25 * SEC }, both = { .level = 2, .delay_ms = SEC };
    d = sched_retry_decide(&t, 0, 16, &lvl);
    CU_ASSERT(!d.to_dlq && d.level == 1 && d.delay_ms == 0);
    d = sched_retry_decide(&t, 5, 16, &dly);
    CU_ASSERT(!d.to_dlq && d.level == 0 && d.delay_ms == 25 * SEC);
    d = sched_retry_decide(&t, 0, 16, &both);
    CU_ASSERT(!d.to_dlq && d.level == 2 && d.delay_ms == 0);
    /* ... but not at the limit: the DLQ */
    d = sched_retry_decide(&t, 16, 16, &lvl);
    CU_ASSERT(d.to_dlq);
    d = sched_retry_decide(&t, 2, 2, &dly);
    CU_ASSERT(d.to_dlq);
    /* NACK ... DLQ: straight there, whatever the reconsume */
    sched_nack_req_t dlq = { .to_dlq = 1, .level = 1, .reason = why, .reason_len = 3 };
    d = sched_retry_decide(&t, 0, 16, &dlq);
    CU_ASSERT(d.to_dlq && d.reason == why);
    /* out-of-range overrides pass through, for store_fail to refuse; a negative level is no override */
    sched_nack_req_t big = { .level = 19 }, neg = { .level = -1 };
    d = sched_retry_decide(&t, 0, 16, &big);
    CU_ASSERT(!d.to_dlq && d.level == 19);
    d = sched_retry_decide(&t, 1, 16, &neg);
    CU_ASSERT(!d.to_dlq && d.level == 4);
    /* a short table clamps the rule's level */
    lvl_table_t small;
    CU_ASSERT_FATAL(lvl_table_parse("1s 2s", &small, err, sizeof err) == 0);
    d = sched_retry_decide(&small, 0, 16, &none);
    CU_ASSERT(!d.to_dlq && d.level == 2);
}

static void test_due_and_wakeup(void)
{
    open_fresh();
    CU_ASSERT_EQUAL(sched_next_wakeup(sc), UINT64_MAX);
    send_level("orders", 2, "a"); /* 5s */
    send_level("orders", 1, "b"); /* 1s */
    CU_ASSERT_EQUAL(sched_next_wakeup(sc), T0 + 1 * SEC);
    sched_stats_t s = { 0 };
    now = T0 + 999;
    run_all(&s);
    CU_ASSERT_EQUAL(s.moved, 0); /* never before due */
    now = T0 + 1 * SEC;
    run_all(&s);
    CU_ASSERT_EQUAL(s.moved, 1);
    CU_ASSERT_EQUAL(s.ready, 1);
    CU_ASSERT_EQUAL(sched_next_wakeup(sc), T0 + 5 * SEC);
    uint32_t r = 99;
    uint64_t id = lease_one("g", "orders", 30 * SEC, &r);
    CU_ASSERT(id != 0);
    CU_ASSERT_EQUAL(r, 0);
    /* The lease deadline (T0+31s) is later than level 2's head (T0+5s). */
    CU_ASSERT_EQUAL(sched_next_wakeup(sc), T0 + 5 * SEC);
    now = T0 + 5 * SEC;
    run_all(&s);
    CU_ASSERT_EQUAL(s.ready, 2);
    CU_ASSERT_EQUAL(sched_next_wakeup(sc), T0 + 31 * SEC);
    close_all();
}

/* One message failing by lease expiry every time: 17 deliveries, each retry on
 * level 3 + r, then the DLQ with the reason "lease expired". */
static void test_full_life_to_dlq(void)
{
    open_fresh();
    const lvl_table_t *t = store_levels(st);
    uint64_t id = send_level("orders", 1, "order-42");
    now += 1 * SEC;
    sched_stats_t s = { 0 };
    run_all(&s);
    const uint64_t lease = 30 * SEC;
    for (uint32_t r = 0; r <= 16; r++) {
        uint32_t got_r = 99;
        uint64_t got = lease_one("cancel", "orders", lease, &got_r);
        CU_ASSERT_EQUAL_FATAL(got, id); /* same id for life */
        CU_ASSERT_EQUAL(got_r, r);
        CU_ASSERT_EQUAL(lease_one("cancel", "orders", lease, NULL), 0); /* nothing else */
        now += lease;                                                   /* the lease expires */
        CU_ASSERT_EQUAL(sched_next_wakeup(sc), now);
        run_all(&s);
        store_group_info_t gi;
        CU_ASSERT_FATAL(store_group_info(st, "cancel", 6, &gi) == 1);
        CU_ASSERT_EQUAL(gi.inflight, 0);
        if (r < 16) {
            CU_ASSERT_EQUAL(gi.retry_delayed, 1);
            CU_ASSERT_EQUAL(gi.dlq, 0);
            int level = 3 + (int)r;
            store_level_info_t li;
            CU_ASSERT(store_level_info(st, level, &li) == 0);
            CU_ASSERT_EQUAL(li.depth, 1);
            CU_ASSERT_EQUAL(li.head_due_ms, now + t->delay_ms[level]);
            /* One ms before it is due: still waiting. */
            now += t->delay_ms[level] - 1;
            run_all(&s);
            CU_ASSERT_FATAL(store_group_info(st, "cancel", 6, &gi) == 1);
            CU_ASSERT_EQUAL(gi.retry_ready, 0);
            now += 1;
            run_all(&s);
            CU_ASSERT_FATAL(store_group_info(st, "cancel", 6, &gi) == 1);
            CU_ASSERT_EQUAL(gi.retry_ready, 1);
            CU_ASSERT_EQUAL(gi.retry_delayed, 0);
        } else {
            CU_ASSERT_EQUAL(gi.dlq, 1);
            CU_ASSERT_EQUAL(gi.retry_delayed, 0);
        }
    }
    CU_ASSERT_EQUAL(s.expired, 17);
    CU_ASSERT_EQUAL(s.retried, 16);
    CU_ASSERT_EQUAL(s.dead, 1);
    msg_owned_t d[2];
    int n = 0;
    CU_ASSERT_FATAL(store_dlq_list(st, "cancel", 6, 0, 2, d, &n, err, sizeof err) == 0);
    CU_ASSERT_EQUAL_FATAL(n, 1);
    CU_ASSERT_EQUAL(d[0].m.id, id);
    CU_ASSERT_EQUAL(d[0].m.reconsume, 17);
    CU_ASSERT(d[0].m.reason.len == strlen(SCHED_LEASE_EXPIRED_REASON) &&
              memcmp(d[0].m.reason.ptr, SCHED_LEASE_EXPIRED_REASON, d[0].m.reason.len) == 0);
    CU_ASSERT(d[0].m.payload.len == 8 && memcmp(d[0].m.payload.ptr, "order-42", 8) == 0);
    CU_ASSERT_EQUAL(d[0].m.stamp_ms, now);
    msg_owned_free(&d[0]);
    close_all();
}

static void test_nack_policy_and_overrides(void)
{
    open_fresh();
    CU_ASSERT_FATAL(store_group_create(st, "g", 1, "t", 1, 1, 2, now, err, sizeof err) == 0); /* MAXRETRY 2 */
    CU_ASSERT(store_commit(st, err, sizeof err) == 0);
    uint64_t id = send_level("t", 1, "x");
    now += SEC;
    sched_stats_t s = { 0 };
    run_all(&s);
    CU_ASSERT_EQUAL(lease_one("g", "t", 30 * SEC, NULL), id);

    /* Explicit LEVEL 1. */
    sched_nack_req_t req = { .level = 1, .reason = "busy", .reason_len = 4 };
    int found = 0;
    uint64_t due = 0;
    CU_ASSERT_FATAL(sched_nack(sc, "g", 1, id, &req, &found, &due, &s, err, sizeof err) == 0);
    CU_ASSERT_EQUAL(found, 1);
    CU_ASSERT_EQUAL(due, now + SEC);
    /* NACK again: the lease is gone. */
    CU_ASSERT_FATAL(sched_nack(sc, "g", 1, id, &req, &found, &due, &s, err, sizeof err) == 0);
    CU_ASSERT_EQUAL(found, 0);
    now += SEC;
    run_all(&s);
    uint32_t r = 0;
    CU_ASSERT_EQUAL(lease_one("g", "t", 30 * SEC, &r), id);
    CU_ASSERT_EQUAL(r, 1);

    /* Explicit DELAY 25s: chained 10s+10s+5s, due exactly now + 25s. */
    sched_nack_req_t dreq = { .delay_ms = 25 * SEC };
    CU_ASSERT_FATAL(sched_nack(sc, "g", 1, id, &dreq, &found, &due, &s, err, sizeof err) == 0);
    CU_ASSERT_EQUAL(found, 1);
    CU_ASSERT_EQUAL(due, now + 25 * SEC);
    uint64_t want = now + 25 * SEC;
    now += 25 * SEC - 1;
    run_all(&s);
    CU_ASSERT_EQUAL(lease_one("g", "t", 30 * SEC, NULL), 0);
    now = want;
    run_all(&s);
    CU_ASSERT_EQUAL(lease_one("g", "t", 30 * SEC, &r), id);
    CU_ASSERT_EQUAL(r, 2);

    /* r = 2 = MAXRETRY: an explicit level is overruled, it goes to the DLQ. */
    CU_ASSERT_FATAL(sched_nack(sc, "g", 1, id, &req, &found, &due, &s, err, sizeof err) == 0);
    CU_ASSERT_EQUAL(found, 1);
    CU_ASSERT_EQUAL(due, 0);
    CU_ASSERT(store_commit(st, err, sizeof err) == 0);
    store_group_info_t gi;
    CU_ASSERT_FATAL(store_group_info(st, "g", 1, &gi) == 1);
    CU_ASSERT_EQUAL(gi.dlq, 1);
    CU_ASSERT_EQUAL(gi.max_reconsume, 2);
    msg_owned_t d[1];
    int n = 0;
    CU_ASSERT_FATAL(store_dlq_list(st, "g", 1, 0, 1, d, &n, err, sizeof err) == 0);
    CU_ASSERT_EQUAL_FATAL(n, 1);
    CU_ASSERT(d[0].m.reason.len == 4 && memcmp(d[0].m.reason.ptr, "busy", 4) == 0);
    msg_owned_free(&d[0]);

    /* A permanent failure goes straight to the DLQ whatever its reconsume. */
    uint64_t id3 = send_level("t", 1, "z");
    now += SEC;
    run_all(&s);
    CU_ASSERT_EQUAL(lease_one("g", "t", 30 * SEC, &r), id3);
    CU_ASSERT_EQUAL(r, 0);
    sched_nack_req_t perm = { .to_dlq = 1, .reason = "not an order id", .reason_len = 15 };
    CU_ASSERT_FATAL(sched_nack(sc, "g", 1, id3, &perm, &found, &due, &s, err, sizeof err) == 0);
    CU_ASSERT_EQUAL(found, 1);
    CU_ASSERT_EQUAL(due, 0);
    CU_ASSERT(store_commit(st, err, sizeof err) == 0);
    CU_ASSERT_FATAL(store_group_info(st, "g", 1, &gi) == 1);
    CU_ASSERT_EQUAL(gi.dlq, 2);

    /* A bad explicit level is refused and the lease stays. */
    uint64_t id2 = send_level("t", 1, "y");
    now += SEC;
    run_all(&s);
    CU_ASSERT_EQUAL(lease_one("g", "t", 30 * SEC, NULL), id2);
    sched_nack_req_t bad = { .level = 19 };
    CU_ASSERT(sched_nack(sc, "g", 1, id2, &bad, &found, &due, &s, err, sizeof err) == -1);
    CU_ASSERT(strstr(err, "level 19") != NULL);
    CU_ASSERT(probe_lease_get(st, "g", 1, id2, NULL, NULL, err, sizeof err) == 1);
    close_all();
}

static void test_bounded_runs(void)
{
    open_fresh();
    for (int i = 0; i < 250; i++) {
        store_send_req_t r = { .topic = "t", .topic_len = 1, .payload = "p", .payload_len = 1, .level = 1 };
        uint64_t id, due;
        CU_ASSERT_FATAL(store_send(st, &r, now, &id, &due, err, sizeof err) == 0);
    }
    CU_ASSERT(store_commit(st, err, sizeof err) == 0);
    now += SEC;
    sched_stats_t s = { 0 };
    int more = 0;
    CU_ASSERT(sched_run(sc, 100, &s, &more, err, sizeof err) == 0);
    CU_ASSERT_EQUAL(s.moved, 100);
    CU_ASSERT_EQUAL(more, 1);
    CU_ASSERT(sched_run(sc, 100, &s, &more, err, sizeof err) == 0);
    CU_ASSERT(sched_run(sc, 100, &s, &more, err, sizeof err) == 0);
    CU_ASSERT_EQUAL(s.moved, 250);
    CU_ASSERT_EQUAL(more, 0);
    CU_ASSERT(store_commit(st, err, sizeof err) == 0);

    /* 250 leases expiring at once, run with max 100. */
    msg_owned_t m[250];
    int n = 0;
    CU_ASSERT_FATAL(store_lease(st, "g", 1, "t", 1, 250, 10 * SEC, now, m, &n, err, sizeof err) == 0);
    CU_ASSERT_EQUAL_FATAL(n, 250);
    for (int i = 1; i < n; i++) {
        CU_ASSERT(m[i].m.id > m[i - 1].m.id);
    } /* FIFO */
    for (int i = 0; i < n; i++) {
        msg_owned_free(&m[i]);
    }
    CU_ASSERT(store_commit(st, err, sizeof err) == 0);
    now += 10 * SEC;
    memset(&s, 0, sizeof s);
    CU_ASSERT(sched_run(sc, 100, &s, &more, err, sizeof err) == 0);
    CU_ASSERT_EQUAL(s.expired, 100);
    CU_ASSERT_EQUAL(more, 1);
    run_all(&s);
    CU_ASSERT_EQUAL(s.expired, 250);
    store_group_info_t gi;
    CU_ASSERT_FATAL(store_group_info(st, "g", 1, &gi) == 1);
    CU_ASSERT_EQUAL(gi.inflight, 0);
    CU_ASSERT_EQUAL(gi.retry_delayed, 250);
    close_all();
}

/* Clock steps: backward never makes a level overtake itself nor delivers early;
 * forward by hours delivers everything, in due order. */
static void test_clock_steps(void)
{
    open_fresh();
    uint64_t a = send_level("t", 2, "a"); /* due T0 + 5s */
    now = T0 - HOUR;                      /* the clock steps back an hour */
    uint64_t b = send_level("t", 2, "b"); /* enqueue stays monotone: due T0 + 5s */
    CU_ASSERT_EQUAL(sched_next_wakeup(sc), T0 + 5 * SEC);
    sched_stats_t s = { 0 };
    now = T0 + 4 * SEC;
    run_all(&s);
    CU_ASSERT_EQUAL(s.moved, 0);
    now = T0 + 3 * HOUR;      /* and jumps forward */
    send_level("t", 18, "c"); /* due now + 2h */
    run_all(&s);
    CU_ASSERT_EQUAL(s.ready, 2);
    CU_ASSERT_EQUAL(lease_one("g", "t", SEC, NULL), a);
    CU_ASSERT_EQUAL(lease_one("g", "t", SEC, NULL), b);
    CU_ASSERT_EQUAL(sched_next_wakeup(sc), now + SEC); /* the lease deadline comes first */
    close_all();
}

/* Catching up after downtime keeps global due order across levels, not level order. */
static void test_catch_up_in_due_order(void)
{
    open_fresh();
    uint64_t a = send_level("t", 18, "a"); /* due T0 + 2h */
    uint64_t b = send_level("t", 2, "b");  /* due T0 + 5s */
    now = T0 + 2 * HOUR;
    uint64_t c = send_level("t", 1, "c"); /* due T0 + 2h + 1s */
    now = T0 + 3 * HOUR;                  /* the broker was down until now */
    sched_stats_t s = { 0 };
    int more = 1;
    while (more) { /* one message per run: order is the store's */
        CU_ASSERT_FATAL(sched_run(sc, 1, &s, &more, err, sizeof err) == 0);
    }
    CU_ASSERT_EQUAL(s.ready, 3);
    CU_ASSERT_EQUAL(lease_one("g", "t", SEC, NULL), b);
    CU_ASSERT_EQUAL(lease_one("g", "t", SEC, NULL), a);
    CU_ASSERT_EQUAL(lease_one("g", "t", SEC, NULL), c);
    close_all();
}

/* The index of id among ids[0..n) (growing), or n when it is none of them. */
static uint64_t sent_index(const uint64_t *ids, size_t n, uint64_t id)
{
    size_t lo = 0, hi = n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (ids[mid] < id) {
            lo = mid + 1;
        } else {
            hi = mid;
        }
    }
    return lo < n && ids[lo] == id ? lo : n;
}

/* Millisecond delays through the scheduler, as the broker drives it: sleep
 * until sched_next_wakeup, run, lease. Every DELAY d (1 ms .. 3 s in 1 ms
 * steps, then 7 ms steps to 2 min) is leased at exactly send + d: the wake-up
 * is never early (nothing ready before it) and never late (it is ready at it).
 * Then a NACK DELAY 2500ms retries at exactly +2500. */
static void test_exact_ms_delays(void)
{
    open_fresh();
    enum {
        N = 3000 + 17000
    };
    static uint64_t want[N];
    int n = 0;
    for (uint64_t d = 1; d <= 3 * SEC; d++)
        want[n++] = d;
    for (uint64_t d = 3 * SEC + 7; d <= 2 * MIN && n < N; d += 7)
        want[n++] = d;
    static uint64_t ids[N]; /* in send order: ids (log offsets) grow, so a search finds a message's index */
    for (int i = 0; i < n; i++) {
        store_send_req_t r = { .topic = "t", .topic_len = 1, .payload = "p", .payload_len = 1, .delay_ms = want[i] };
        uint64_t id = 0, due = 0;
        CU_ASSERT_FATAL(store_send(st, &r, now, &id, &due, err, sizeof err) == 0);
        CU_ASSERT_FATAL(due == T0 + want[i]);
        CU_ASSERT_FATAL(i == 0 || id > ids[i - 1]); /* ids are log offsets: they grow in send order */
        ids[i] = id;
    }
    CU_ASSERT_FATAL(store_commit(st, err, sizeof err) == 0);
    CU_ASSERT_FATAL(store_group_create(st, "g", 1, "t", 1, 1, -1, now, err, sizeof err) == 0);
    int got = 0, wrong = 0, early = 0;
    uint64_t first_wrong = 0;
    static msg_owned_t m[N];
    while (got < n) {
        uint64_t wake = sched_next_wakeup(sc);
        CU_ASSERT_FATAL(wake != UINT64_MAX && wake > now);
        now = wake - 1; /* one ms before the wake-up: nothing may be ready */
        sched_stats_t s0 = { 0 };
        run_all(&s0);
        early += (int)s0.ready;
        now = wake;
        run_all(&s0);
        int k = 0;
        CU_ASSERT_FATAL(store_lease(st, "g", 1, "t", 1, N, 10 * MIN, now, m, &k, err, sizeof err) == 0);
        for (int j = 0; j < k; j++) { /* k may be 0: a wake-up for an intermediate hop */
            uint64_t i = sent_index(ids, (size_t)n, m[j].m.id);
            if ((i >= (uint64_t)n || T0 + want[i] != now || m[j].m.due_ms != now) && wrong++ == 0)
                first_wrong = m[j].m.id;
            uint64_t id = m[j].m.id;
            int released = 0;
            CU_ASSERT_FATAL(store_ack(st, "g", 1, &id, 1, &released, err, sizeof err) == 0 && released == 1);
            msg_owned_free(&m[j]);
        }
        got += k;
    }
    TU_CHECK(early == 0, "%d messages ready a millisecond before the wake-up", early);
    TU_CHECK(wrong == 0, "%d messages not leased at exactly send + delay (first id %llu)", wrong,
             (unsigned long long)first_wrong);

    /* NACK DELAY 2500ms: the retry is ready at exactly +2500, not at +3000 */
    send_level("r", 0, "x");
    uint64_t id = lease_one("g2", "r", 30 * SEC, NULL);
    CU_ASSERT_FATAL(id != 0);
    sched_nack_req_t req = { .delay_ms = 2500 };
    int found = 0;
    uint64_t due = 0;
    CU_ASSERT_FATAL(sched_nack(sc, "g2", 2, id, &req, &found, &due, NULL, err, sizeof err) == 0);
    CU_ASSERT(found == 1 && due == now + 2500);
    CU_ASSERT_FATAL(store_commit(st, err, sizeof err) == 0);
    uint64_t nacked = now;
    now = nacked + 2499;
    run_all(NULL);
    CU_ASSERT_EQUAL(lease_one("g2", "r", 30 * SEC, NULL), 0);
    now = nacked + 2500;
    run_all(NULL);
    CU_ASSERT_EQUAL(lease_one("g2", "r", 30 * SEC, NULL), id);
    close_all();
}

static int add_suites(void)
{
    CU_pSuite s = CU_add_suite("sched", NULL, NULL);
    if (s == NULL) {
        return -1;
    }
    if (!CU_add_test(s, "retry rule (level 3 + r, DLQ at max)", test_retry_rule) ||
        !CU_add_test(s, "retry decision (rule, overrides, limit)", test_retry_decide) ||
        !CU_add_test(s, "due moves and wake-up times", test_due_and_wakeup) ||
        !CU_add_test(s, "17 deliveries then the DLQ", test_full_life_to_dlq) ||
        !CU_add_test(s, "NACK policy, overrides, MAXRETRY", test_nack_policy_and_overrides) ||
        !CU_add_test(s, "bounded runs", test_bounded_runs) ||
        !CU_add_test(s, "clock steps back and forward", test_clock_steps) ||
        !CU_add_test(s, "catching up keeps due order across levels", test_catch_up_in_due_order) ||
        !CU_add_test(s, "millisecond delays: exact wake-ups, never early", test_exact_ms_delays)) {
        return -1;
    }
    return 0;
}

int main(int argc, char **argv)
{
    return tu_cunit_main(argc, argv, add_suites);
}
