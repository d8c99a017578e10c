/*
 * tests/integration/test_broker_retry.c — leases, retries and the DLQ through the real broker.
 *
 * Each test starts its own hourglass-broker and checks, over the protocol:
 *  - the default schedule's first step for real: a NACK and a lease expiry of
 *    a message with reconsume 0 bring it back 10 s later (level 3) with
 *    reconsume 1; ACK / TOUCH after the expiry answer 0, NACK -1;
 *  - the whole policy of DESIGN §3 (level 3 + r, clamped to the last level,
 *    DLQ at MAXRETRY) on a short level table (--levels), so it takes seconds;
 *  - DLQ after max, with the reason in DLQ LIST (NACK REASON, "lease expired");
 *    NACK … DLQ parks a permanent failure at once;
 *    DLQ REQUEUE one and ALL (and a requeue wakes a blocked PULL), DROP one and ALL,
 *    ALL also of a DLQ big enough to take several steps;
 *  - TOUCH extends a lease; ACK counting rules; NACK LEVEL / DELAY overrides.
 *
 * Times are checked two ways: the NACK reply (the retry's due time) must lie
 * within [before + delay, after + delay] of the NACK round trip, which is
 * exact; deliveries are "never before due, late by less than LATE_BOUND_MS".
 *
 * Run one suite: ./tests/integration/test_broker_retry retry
 */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <CUnit/CUnit.h>

#include "tests/helpers/broker_test.h"
#include "tests/helpers/testutil.h"

#define LATE_BOUND_MS 1500

/* NACK with optional extra args; returns the reply integer; checks the due
 * time lies within the round trip + delay_ms when delay_ms > 0. */
static long long nack(const char *group, const char *id, uint64_t delay_ms, const char *a1, const char *a2,
                      const char *a3, const char *a4)
{
    char e[1024];
    long long due = -2;
    uint64_t before = tu_now_wall_ms();
    int rc = bp_int_cmd(&bt_conn, &due, e, sizeof e, "NACK", group, id, a1, a2, a3, a4, NULL);
    uint64_t after = tu_now_wall_ms();
    BP_REQUIRE(rc == 0, "%s", e);
    if (delay_ms > 0)
        BP_CHECK(due >= (long long)(before + delay_ms) && due <= (long long)(after + delay_ms),
                 "NACK %s: next due %lld is now%+lld ms, want now+%" PRIu64, id, due, due - (long long)before,
                 delay_ms);
    return due;
}

static void test_default_first_step(void)
{
    bt_start(NULL);
    char e[1024], ida[32], idb[32];
    BP_REQUIRE(bp_send(&bt_conn, ida, sizeof ida, e, sizeof e, "orders", "A", "KEY", "ka", NULL) == 0, "%s", e);
    BP_REQUIRE(bp_send(&bt_conn, idb, sizeof idb, e, sizeof e, "orders", "B", "KEY", "kb", NULL) == 0, "%s", e);

    resp_reply_t *ra, *rb;
    rc_msg_t ma, mb;
    uint64_t lease_before = tu_now_wall_ms();
    bt_pull_one("g", "orders", "1000", "400", &ra, &ma); /* A: a 400 ms lease, let it expire */
    BP_CHECK(strcmp(ma.id, ida) == 0 && ma.reconsume == 0, "first PULL: %s r%lld, want %s r0", ma.id, ma.reconsume,
             ida);
    bt_pull_one("g", "orders", "1000", NULL, &rb, &mb); /* B: the default 30 s lease, NACK it */
    BP_CHECK(strcmp(mb.id, idb) == 0, "second PULL: %s, want %s", mb.id, idb);
    resp_reply_free(ra);
    resp_reply_free(rb);

    /* NACK with reconsume 0 → level 3 (10 s), DESIGN §3. */
    long long due_b = nack("g", idb, 10000, NULL, NULL, NULL, NULL);

    /* Lease of A expires at lease_before + 400: the broker reschedules it the same way. */
    bt_wait_field("g", "inflight", 0, 5000);
    uint64_t expired_seen = tu_now_wall_ms();
    BP_CHECK(expired_seen >= lease_before + 400, "lease of 400 ms gone after %" PRIu64 " ms",
             expired_seen - lease_before);
    bt_wait_field("g", "retry-delayed", 2, 2000);
    long long v = -2;
    BP_REQUIRE(bp_int_cmd(&bt_conn, &v, e, sizeof e, "ACK", "g", ida, NULL) == 0, "%s", e);
    BP_CHECK(v == 0, "ACK after the lease expired answered %lld, want 0", v);
    BP_REQUIRE(bp_int_cmd(&bt_conn, &v, e, sizeof e, "TOUCH", "g", ida, NULL) == 0, "%s", e);
    BP_CHECK(v == 0, "TOUCH after the lease expired answered %lld, want 0", v);
    BP_REQUIRE(bp_int_cmd(&bt_conn, &v, e, sizeof e, "NACK", "g", ida, NULL) == 0, "%s", e);
    BP_CHECK(v == -1, "NACK after the lease expired answered %lld, want -1", v);
    uint64_t depth = 0;
    BP_REQUIRE(bp_level(&bt_conn, 3, NULL, &depth, NULL, e, sizeof e) == 0, "%s", e);
    BP_CHECK(depth == 2, "level 3 (10 s) holds %" PRIu64 " retries, want 2", depth);
    bt_expect_nothing_ready("g", "orders");

    /* Both come back with reconsume 1: B at due_b, A 10 s after its expiry. */
    int got_a = 0, got_b = 0;
    uint64_t end = tu_now_mono_ms() + 25000;
    while ((!got_a || !got_b) && tu_now_mono_ms() < end) {
        resp_reply_t *r = bp_pull(&bt_conn, e, sizeof e, "g", "orders", "COUNT", "10", "BLOCK", "15000", NULL);
        uint64_t recv_ms = tu_now_wall_ms();
        BP_REQUIRE(r != NULL, "%s", e);
        for (size_t i = 0; i < r->count; i++) {
            rc_msg_t m;
            BP_REQUIRE(rc_msg_at(r, i, &m, e, sizeof e) == 0, "%s", e);
            BP_CHECK(m.reconsume == 1, "%s redelivered with reconsume %lld, want 1", m.id, m.reconsume);
            BP_CHECK(recv_ms >= m.due_ms, "%s delivered %" PRIu64 " ms before its due_ms", m.id, m.due_ms - recv_ms);
            BP_CHECK(recv_ms < m.due_ms + LATE_BOUND_MS, "%s delivered %" PRIu64 " ms late", m.id, recv_ms - m.due_ms);
            if (strcmp(m.id, idb) == 0) {
                got_b++;
                BP_CHECK(m.payload_len == 1 && m.payload[0] == 'B' && m.key_len == 2 && memcmp(m.key, "kb", 2) == 0,
                         "B came back with other payload/key");
                BP_CHECK(recv_ms >= (uint64_t)due_b, "B delivered %lld ms before the NACK's due time",
                         due_b - (long long)recv_ms);
                BP_CHECK(m.due_ms + 1000 > (uint64_t)due_b && m.due_ms < (uint64_t)due_b + 1000,
                         "B's due_ms %" PRIu64 " differs from the NACK reply %lld", m.due_ms, due_b);
            } else if (strcmp(m.id, ida) == 0) {
                got_a++;
                BP_CHECK(m.payload_len == 1 && m.payload[0] == 'A', "A came back with another payload");
                BP_CHECK(recv_ms >= lease_before + 400 + 10000,
                         "A redelivered %" PRIu64 " ms after its PULL, want >= 10400", recv_ms - lease_before);
                BP_CHECK(recv_ms < expired_seen + 10000 + LATE_BOUND_MS,
                         "A redelivered %" PRIu64 " ms after its lease expired, want about 10000",
                         recv_ms - expired_seen);
            } else {
                BP_CHECK(0, "unexpected id %s", m.id);
            }
        }
        resp_reply_free(r);
    }
    BP_CHECK(got_a == 1 && got_b == 1, "redelivered A %d times, B %d times, want once each", got_a, got_b);
    BP_REQUIRE(bp_int_cmd(&bt_conn, &v, e, sizeof e, "ACK", "g", ida, idb, NULL) == 0, "%s", e);
    BP_CHECK(v == 2, "ACK of both redelivered leases released %lld, want 2", v);
}

/* The policy on a short table: level 3 + r, clamped to the last level, DLQ at MAXRETRY. */
static void test_schedule_short_table(void)
{
    static const char *const flags[] = { "--levels", "100ms 200ms 500ms 1s 2s", NULL };
    bt_start(flags);
    char e[1024], id[32];
    BP_REQUIRE(bp_ok_cmd(&bt_conn, e, sizeof e, "GROUP", "CREATE", "g", "orders", "MAXRETRY", "4", NULL) == 0, "%s", e);
    BP_REQUIRE(bp_send(&bt_conn, id, sizeof id, e, sizeof e, "orders", "pay", NULL) == 0, "%s", e);
    /* failure r → level 3 + r: 500ms, 1s, 2s, then clamped to level 5 (2s); r = 4 = MAXRETRY → DLQ */
    static const uint64_t delays[] = { 500, 1000, 2000, 2000 };
    for (int r = 0; r <= 4; r++) {
        resp_reply_t *rep;
        rc_msg_t m;
        bt_pull_one("g", "orders", "10000", NULL, &rep, &m);
        uint64_t recv_ms = tu_now_wall_ms();
        BP_CHECK(strcmp(m.id, id) == 0, "delivery %d: id %s, want %s", r, m.id, id);
        BP_CHECK(m.reconsume == r, "delivery %d: reconsume %lld, want %d", r, m.reconsume, r);
        BP_CHECK(recv_ms >= m.due_ms && recv_ms < m.due_ms + LATE_BOUND_MS, "delivery %d: %+" PRId64 " ms from due", r,
                 (int64_t)(recv_ms - m.due_ms));
        resp_reply_free(rep);
        char reason[64];
        snprintf(reason, sizeof reason, "failure %d", r);
        if (r < 4) {
            long long due = nack("g", id, delays[r], "REASON", reason, NULL, NULL);
            BP_CHECK(due > 0, "NACK %d answered %lld", r, due);
            bt_expect_nothing_ready("g", "orders");
        } else {
            long long due = nack("g", id, 0, "REASON", reason, NULL, NULL);
            BP_CHECK(due == 0, "NACK at reconsume %d = MAXRETRY answered %lld, want 0 (DLQ)", r, due);
        }
    }
    long long n = -1;
    BP_REQUIRE(bp_int_cmd(&bt_conn, &n, e, sizeof e, "DLQ", "LEN", "g", NULL) == 0, "%s", e);
    BP_CHECK(n == 1, "DLQ LEN %lld, want 1", n);
    bt_expect_nothing_ready("g", "orders");

    /* A lease expiry follows the same policy: reconsume 0 → level 3 (500 ms). */
    BP_REQUIRE(bp_send(&bt_conn, id, sizeof id, e, sizeof e, "orders", "slow", NULL) == 0, "%s", e);
    resp_reply_t *rep;
    rc_msg_t m;
    uint64_t t0 = tu_now_wall_ms();
    bt_pull_one("g", "orders", "1000", "300", &rep, &m);
    resp_reply_free(rep);
    bt_pull_one("g", "orders", "10000", NULL, &rep, &m);
    uint64_t t1 = tu_now_wall_ms();
    BP_CHECK(strcmp(m.id, id) == 0 && m.reconsume == 1, "after lease expiry: %s reconsume %lld, want %s r1", m.id,
             m.reconsume, id);
    BP_CHECK(t1 >= t0 + 300 + 500, "redelivered %" PRIu64 " ms after PULL LEASE 300, want >= 800", t1 - t0);
    BP_CHECK(t1 < t0 + 800 + 2 * LATE_BOUND_MS, "redelivered %" PRIu64 " ms after PULL LEASE 300", t1 - t0);
    resp_reply_free(rep);
}

/* One DLQ LIST entry: [id, key, payload, reconsume, reason, parked_ms]. */
typedef struct dlq_entry {
    char id[32];
    char key[64], payload[64], reason[256];
    long long reconsume;
    uint64_t parked_ms;
} dlq_entry_t;

/* DLQ LIST group [COUNT n] [AFTER id]; returns the number of entries (<= max). */
static int dlq_list(const char *group, const char *count, const char *after, dlq_entry_t *out, int max)
{
    char e[1024];
    const char *argv[8] = { "DLQ", "LIST", group };
    int argc = 3;
    if (count != NULL) {
        argv[argc++] = "COUNT";
        argv[argc++] = count;
    }
    if (after != NULL) {
        argv[argc++] = "AFTER";
        argv[argc++] = after;
    }
    resp_reply_t *r = rc_cmdv(&bt_conn, argc, argv, NULL);
    BP_REQUIRE(r != NULL && r->type == RESP_REPLY_ARRAY, "DLQ LIST %s: %s", group,
               r == NULL ? bt_conn.err : rc_describe(r, e, sizeof e));
    int n = 0;
    for (size_t i = 0; i < r->count && n < max; i++) {
        const resp_reply_t *x = &r->elements[i];
        BP_REQUIRE(x->type == RESP_REPLY_ARRAY && x->count == 6, "DLQ LIST entry %zu is %s, want 6 fields", i,
                   rc_describe(x, e, sizeof e));
        dlq_entry_t *d = &out[n++];
        memset(d, 0, sizeof *d);
        const resp_reply_t *f = x->elements;
        BP_REQUIRE(f[0].type == RESP_REPLY_BULK && f[1].type == RESP_REPLY_BULK && f[2].type == RESP_REPLY_BULK &&
                       f[4].type == RESP_REPLY_BULK,
                   "DLQ LIST entry %zu: id/key/payload/reason are not bulk strings", i);
        snprintf(d->id, sizeof d->id, "%.*s", (int)f[0].len, f[0].str);
        snprintf(d->key, sizeof d->key, "%.*s", (int)f[1].len, f[1].str);
        snprintf(d->payload, sizeof d->payload, "%.*s", (int)f[2].len, f[2].str);
        snprintf(d->reason, sizeof d->reason, "%.*s", (int)f[4].len, f[4].str);
        BP_REQUIRE(rc_int(&f[3], &d->reconsume) == 0 && rc_u64(&f[5], &d->parked_ms) == 0,
                   "DLQ LIST entry %zu: reconsume/parked_ms are not integers", i);
    }
    resp_reply_free(r);
    return n;
}

static void test_dlq_after_max_with_reason(void)
{
    bt_start(NULL);
    char e[1024], id[32];
    BP_REQUIRE(bp_ok_cmd(&bt_conn, e, sizeof e, "GROUP", "CREATE", "g", "orders", "MAXRETRY", "1", NULL) == 0, "%s", e);
    BP_REQUIRE(bp_send(&bt_conn, id, sizeof id, e, sizeof e, "orders", "order-7", "KEY", "o7", NULL) == 0, "%s", e);
    resp_reply_t *rep;
    rc_msg_t m;
    bt_pull_one("g", "orders", "1000", NULL, &rep, &m);
    resp_reply_free(rep);
    /* NACK LEVEL 1 overrides the schedule (1 s instead of 10 s). */
    long long due = nack("g", id, 1000, "LEVEL", "1", "REASON", "try again");
    BP_CHECK(due > 0, "first NACK with MAXRETRY 1 answered %lld", due);
    bt_pull_one("g", "orders", "5000", NULL, &rep, &m);
    uint64_t recv_ms = tu_now_wall_ms();
    BP_CHECK(m.reconsume == 1 && recv_ms >= (uint64_t)due && recv_ms < (uint64_t)due + LATE_BOUND_MS,
             "after NACK LEVEL 1: reconsume %lld, %+lld ms from due", m.reconsume, (long long)recv_ms - due);
    resp_reply_free(rep);
    uint64_t before = tu_now_wall_ms();
    due = nack("g", id, 0, "REASON", "boom: card declined", NULL, NULL);
    uint64_t after = tu_now_wall_ms();
    BP_CHECK(due == 0, "NACK at reconsume 1 = MAXRETRY answered %lld, want 0 (DLQ)", due);
    long long n = -1;
    BP_REQUIRE(bp_int_cmd(&bt_conn, &n, e, sizeof e, "DLQ", "LEN", "g", NULL) == 0, "%s", e);
    BP_CHECK(n == 1, "DLQ LEN %lld, want 1", n);
    dlq_entry_t d[4];
    int k = dlq_list("g", NULL, NULL, d, 4);
    BP_REQUIRE(k == 1, "DLQ LIST has %d entries, want 1", k);
    BP_CHECK(strcmp(d[0].id, id) == 0, "DLQ LIST id %s, want %s", d[0].id, id);
    BP_CHECK(strcmp(d[0].key, "o7") == 0 && strcmp(d[0].payload, "order-7") == 0, "DLQ LIST key '%s' payload '%s'",
             d[0].key, d[0].payload);
    BP_CHECK(strstr(d[0].reason, "boom: card declined") != NULL, "DLQ LIST reason '%s', want the NACK REASON",
             d[0].reason);
    BP_CHECK(d[0].reconsume >= 1, "DLQ LIST reconsume %lld", d[0].reconsume);
    BP_CHECK(d[0].parked_ms >= before && d[0].parked_ms <= after,
             "parked_ms %" PRIu64 " outside the NACK [%" PRIu64 ", %" PRIu64 "]", d[0].parked_ms, before, after);
    long long dv = -1;
    BP_CHECK(bp_group_field(&bt_conn, "g", "dlq", &dv, e, sizeof e) == 1 && dv == 1, "GROUP LIST dlq %lld", dv);

    /* MAXRETRY 0: the first failure (here a lease expiry) goes to the DLQ, reason "lease expired". */
    BP_REQUIRE(bp_ok_cmd(&bt_conn, e, sizeof e, "GROUP", "CREATE", "g0", "jobs", "MAXRETRY", "0", NULL) == 0, "%s", e);
    BP_REQUIRE(bp_send(&bt_conn, id, sizeof id, e, sizeof e, "jobs", "j", NULL) == 0, "%s", e);
    bt_pull_one("g0", "jobs", "1000", "200", &rep, &m);
    resp_reply_free(rep);
    bt_wait_field("g0", "dlq", 1, 5000);
    k = dlq_list("g0", NULL, NULL, d, 4);
    BP_REQUIRE(k == 1, "DLQ LIST g0 has %d entries", k);
    BP_CHECK(strcmp(d[0].reason, "lease expired") == 0, "reason after a lease expiry '%s', want 'lease expired'",
             d[0].reason);

    /* NACK DELAY overrides too. */
    BP_REQUIRE(bp_send(&bt_conn, id, sizeof id, e, sizeof e, "orders", "d", NULL) == 0, "%s", e);
    bt_pull_one("g", "orders", "1000", NULL, &rep, &m);
    resp_reply_free(rep);
    nack("g", id, 2000, "DELAY", "2s", NULL, NULL);
    resp_reply_t *r = rc_cmd(&bt_conn, "NACK", "g", id, "DELAY", "0", NULL);
    BP_CHECK(rc_is_error(r, "ERR"), "NACK DELAY 0: %s", rc_describe(r, e, sizeof e));
    resp_reply_free(r);
    /* NACK … DLQ: a permanent failure goes straight to the DLQ with its reason,
     * whatever the reconsume count (default MAXRETRY 16 here). */
    BP_REQUIRE(bp_send(&bt_conn, id, sizeof id, e, sizeof e, "perm", "bad", NULL) == 0, "%s", e);
    bt_pull_one("gp", "perm", "1000", NULL, &rep, &m);
    BP_CHECK(m.reconsume == 0, "fresh message with reconsume %lld", m.reconsume);
    resp_reply_free(rep);
    due = nack("gp", id, 0, "DLQ", "REASON", "order 9 does not exist", NULL);
    BP_CHECK(due == 0, "NACK DLQ answered %lld, want 0", due);
    k = dlq_list("gp", NULL, NULL, d, 4);
    BP_CHECK(k == 1 && strcmp(d[0].id, id) == 0 && strcmp(d[0].reason, "order 9 does not exist") == 0,
             "after NACK DLQ: %d entries, reason '%s'", k, k > 0 ? d[0].reason : "");
    r = rc_cmd(&bt_conn, "NACK", "gp", id, "LEVEL", "1", "DLQ", NULL);
    BP_CHECK(rc_is_error(r, "ERR"), "NACK LEVEL 1 DLQ: %s", rc_describe(r, e, sizeof e));
    resp_reply_free(r);

    r = rc_cmd(&bt_conn, "DLQ", "LEN", "nosuch", NULL);
    BP_CHECK(rc_is_error(r, "ERR no such group"), "DLQ LEN of an unknown group: %s", rc_describe(r, e, sizeof e));
    resp_reply_free(r);
}

/* Park n messages of topic in group's DLQ (group has MAXRETRY 0); ids into ids. */
static void park(const char *group, const char *topic, int n, char (*ids)[32])
{
    char e[1024];
    for (int i = 0; i < n; i++) {
        char p[32];
        snprintf(p, sizeof p, "p%d", i);
        BP_REQUIRE(bp_send(&bt_conn, ids[i], 32, e, sizeof e, topic, p, NULL) == 0, "%s", e);
    }
    resp_reply_t *r = bp_pull(&bt_conn, e, sizeof e, group, topic, "COUNT", "100", NULL);
    BP_REQUIRE(r != NULL && r->count == (size_t)n, "PULL to park: %s", r == NULL ? e : "wrong count");
    for (size_t i = 0; i < r->count; i++) {
        rc_msg_t m;
        BP_REQUIRE(rc_msg_at(r, i, &m, e, sizeof e) == 0, "%s", e);
        long long due = nack(group, m.id, 0, "REASON", "parked", NULL, NULL);
        BP_CHECK(due == 0, "NACK with MAXRETRY 0 answered %lld", due);
    }
    resp_reply_free(r);
}

static long long dlq_len(const char *group)
{
    char e[1024];
    long long n = -1;
    BP_REQUIRE(bp_int_cmd(&bt_conn, &n, e, sizeof e, "DLQ", "LEN", group, NULL) == 0, "%s", e);
    return n;
}

static void test_dlq_requeue_drop(void)
{
    bt_start(NULL);
    char e[1024];
    char ids[5][32];
    BP_REQUIRE(bp_ok_cmd(&bt_conn, e, sizeof e, "GROUP", "CREATE", "g", "orders", "MAXRETRY", "0", NULL) == 0, "%s", e);
    park("g", "orders", 5, ids);
    BP_CHECK(dlq_len("g") == 5, "DLQ LEN %lld, want 5", dlq_len("g"));

    /* LIST in id order, paged with COUNT and AFTER. */
    dlq_entry_t d[8];
    int k = dlq_list("g", "2", NULL, d, 8);
    BP_CHECK(k == 2 && strcmp(d[0].id, ids[0]) == 0 && strcmp(d[1].id, ids[1]) == 0, "DLQ LIST COUNT 2: %d entries", k);
    k = dlq_list("g", "10", ids[1], d, 8);
    BP_CHECK(k == 3 && strcmp(d[0].id, ids[2]) == 0, "DLQ LIST AFTER %s: %d entries, first %s", ids[1], k,
             k > 0 ? d[0].id : "-");
    for (int i = 0; i < k; i++)
        BP_CHECK(strcmp(d[i].reason, "parked") == 0, "reason '%s'", d[i].reason);

    /* REQUEUE one → ready again, reconsume 0. */
    long long n = -1;
    BP_REQUIRE(bp_int_cmd(&bt_conn, &n, e, sizeof e, "DLQ", "REQUEUE", "g", ids[2], NULL) == 0, "%s", e);
    BP_CHECK(n == 1, "DLQ REQUEUE one answered %lld", n);
    BP_CHECK(dlq_len("g") == 4, "DLQ LEN after REQUEUE one: %lld, want 4", dlq_len("g"));
    resp_reply_t *rep;
    rc_msg_t m;
    bt_pull_one("g", "orders", "2000", NULL, &rep, &m);
    BP_CHECK(strcmp(m.id, ids[2]) == 0 && m.reconsume == 0, "after REQUEUE: %s r%lld, want %s r0", m.id, m.reconsume,
             ids[2]);
    resp_reply_free(rep);
    BP_CHECK(nack("g", ids[2], 0, NULL, NULL, NULL, NULL) == 0, "NACK back to the DLQ");
    BP_REQUIRE(bp_int_cmd(&bt_conn, &n, e, sizeof e, "DLQ", "REQUEUE", "g", "00000000deadbeef", NULL) == 0, "%s", e);
    BP_CHECK(n == 0, "DLQ REQUEUE of an unknown id answered %lld", n);

    /* A REQUEUE wakes a blocked PULL. */
    rc_conn_t w;
    BP_REQUIRE(bp_connect(&bt_broker, &w, e, sizeof e) == 0, "%s", e);
    rc_appendl(&w, "PULL", "g", "orders", "BLOCK", "20000", NULL);
    BP_REQUIRE(rc_flush(&w, 0) == 0, "%s", w.err);
    bt_wait_blocked("1");
    resp_reply_t *r = rc_read(&w, 1);
    BP_CHECK(r == NULL && rc_timed_out(&w), "PULL BLOCK answered with nothing ready");
    resp_reply_free(r);
    uint64_t t0 = tu_now_mono_ms();
    BP_REQUIRE(bp_int_cmd(&bt_conn, &n, e, sizeof e, "DLQ", "REQUEUE", "g", ids[0], NULL) == 0, "%s", e);
    r = rc_read(&w, 30000);
    BP_CHECK(r != NULL && r->type == RESP_REPLY_ARRAY && r->count == 1, "blocked PULL after REQUEUE: %s",
             r == NULL ? w.err : rc_describe(r, e, sizeof e));
    /* Woken by the REQUEUE (ms), not by its BLOCK 20000: half that tells them
     * apart on a loaded machine (the bound was 1000 ms). */
    BP_CHECK(tu_now_mono_ms() - t0 < 10000, "REQUEUE woke the blocked PULL after %" PRIu64 " ms (want < 10000)",
             tu_now_mono_ms() - t0);
    resp_reply_free(r);
    rc_close(&w);
    BP_CHECK(nack("g", ids[0], 0, NULL, NULL, NULL, NULL) == 0, "NACK back to the DLQ");
    BP_CHECK(dlq_len("g") == 5, "DLQ LEN %lld, want 5", dlq_len("g"));

    /* REQUEUE ALL → all five ready. */
    BP_REQUIRE(bp_int_cmd(&bt_conn, &n, e, sizeof e, "DLQ", "REQUEUE", "g", "ALL", NULL) == 0, "%s", e);
    BP_CHECK(n == 5, "DLQ REQUEUE ALL answered %lld, want 5", n);
    BP_CHECK(dlq_len("g") == 0, "DLQ LEN after REQUEUE ALL: %lld", dlq_len("g"));
    r = bp_pull(&bt_conn, e, sizeof e, "g", "orders", "COUNT", "10", NULL);
    BP_REQUIRE(r != NULL, "%s", e);
    BP_CHECK(r->count == 5, "after REQUEUE ALL PULL got %zu, want 5", r->count);
    for (size_t i = 0; i < r->count; i++) {
        BP_REQUIRE(rc_msg_at(r, i, &m, e, sizeof e) == 0, "%s", e);
        BP_CHECK(m.reconsume == 0, "requeued %s has reconsume %lld", m.id, m.reconsume);
        nack("g", m.id, 0, "REASON", "again", NULL, NULL);
    }
    resp_reply_free(r);
    BP_CHECK(dlq_len("g") == 5, "DLQ LEN %lld, want 5", dlq_len("g"));

    /* DROP one, the same again (0), then ALL. */
    BP_REQUIRE(bp_int_cmd(&bt_conn, &n, e, sizeof e, "DLQ", "DROP", "g", ids[3], NULL) == 0, "%s", e);
    BP_CHECK(n == 1, "DLQ DROP one answered %lld", n);
    BP_REQUIRE(bp_int_cmd(&bt_conn, &n, e, sizeof e, "DLQ", "DROP", "g", ids[3], NULL) == 0, "%s", e);
    BP_CHECK(n == 0, "DLQ DROP of a dropped id answered %lld", n);
    BP_CHECK(dlq_len("g") == 4, "DLQ LEN after DROP one: %lld", dlq_len("g"));
    k = dlq_list("g", NULL, NULL, d, 8);
    for (int i = 0; i < k; i++)
        BP_CHECK(strcmp(d[i].id, ids[3]) != 0, "dropped id still listed");
    BP_REQUIRE(bp_int_cmd(&bt_conn, &n, e, sizeof e, "dlq", "drop", "g", "all", NULL) == 0, "%s", e);
    BP_CHECK(n == 4, "DLQ DROP ALL answered %lld, want 4", n);
    BP_CHECK(dlq_len("g") == 0, "DLQ LEN after DROP ALL: %lld", dlq_len("g"));
    bt_expect_nothing_ready("g", "orders");
    long long dv = -1;
    BP_CHECK(bp_group_field(&bt_conn, "g", "dlq", &dv, e, sizeof e) == 1 && dv == 0, "GROUP LIST dlq %lld", dv);
}

/* Pull n messages of topic for group (MAXRETRY 0) and NACK them all into the
 * DLQ, pipelined. */
static void nack_into_dlq(const char *group, const char *topic, int n)
{
    char e[1024];
    for (int taken = 0; taken < n;) {
        resp_reply_t *r = bp_pull(&bt_conn, e, sizeof e, group, topic, "COUNT", "1000", NULL);
        BP_REQUIRE(r != NULL && r->count > 0, "PULL after %d of %d: %s", taken, n, r == NULL ? e : "empty");
        for (size_t i = 0; i < r->count; i++) {
            rc_msg_t m;
            BP_REQUIRE(rc_msg_at(r, i, &m, e, sizeof e) == 0, "%s", e);
            BP_CHECK(m.reconsume == 0, "%s has reconsume %lld", m.id, m.reconsume);
            rc_appendl(&bt_conn, "NACK", group, m.id, "REASON", "parked", NULL);
        }
        BP_REQUIRE(rc_flush(&bt_conn, 0) == 0, "%s", bt_conn.err);
        for (size_t i = 0; i < r->count; i++) {
            resp_reply_t *a = rc_read(&bt_conn, 0);
            BP_REQUIRE(a != NULL && a->type == RESP_REPLY_INTEGER && a->integer == 0, "NACK into the DLQ: %s",
                       a == NULL ? bt_conn.err : rc_describe(a, e, sizeof e));
            resp_reply_free(a);
        }
        taken += (int)r->count;
        resp_reply_free(r);
    }
}

/* Send "DLQ sub group ALL" and "DLQ LEN group" pipelined on one connection:
 * the first answers the whole count (however many steps it took), and the
 * second, queued behind it on the same connection, runs after its last step. */
static void all_then_len(const char *sub, const char *group, long long want)
{
    char e[1024];
    rc_appendl(&bt_conn, "DLQ", sub, group, "ALL", NULL);
    rc_appendl(&bt_conn, "DLQ", "LEN", group, NULL);
    BP_REQUIRE(rc_flush(&bt_conn, 0) == 0, "%s", bt_conn.err);
    resp_reply_t *a = rc_read(&bt_conn, 60000), *len = rc_read(&bt_conn, 60000);
    BP_CHECK(a != NULL && a->type == RESP_REPLY_INTEGER && a->integer == want, "DLQ %s ALL: %s, want %lld", sub,
             a == NULL ? bt_conn.err : rc_describe(a, e, sizeof e), want);
    BP_CHECK(len != NULL && len->type == RESP_REPLY_INTEGER && len->integer == 0, "DLQ LEN right after: %s",
             len == NULL ? bt_conn.err : rc_describe(len, e, sizeof e));
    resp_reply_free(a);
    resp_reply_free(len);
}

/* DLQ REQUEUE/DROP ALL of a DLQ that takes several steps of the storage
 * thread (the steps and what runs between them are test_writer's and
 * test_store_leases'): each answers the whole count, a command behind it on the
 * same connection sees the DLQ empty, the requeued come back with
 * reconsume 0, the dropped never come back. */
static void test_dlq_all_in_steps(void)
{
    enum {
        BIG = 3000
    }; /* several steps of DLQ_STEP_ENTRIES (512) */
    bt_start(NULL);
    char e[1024];
    BP_REQUIRE(bp_ok_cmd(&bt_conn, e, sizeof e, "GROUP", "CREATE", "g", "orders", "MAXRETRY", "0", NULL) == 0, "%s", e);
    for (int i = 0; i < BIG; i++)
        rc_appendl(&bt_conn, "SEND", "orders", "p", NULL);
    BP_REQUIRE(rc_flush(&bt_conn, 0) == 0, "%s", bt_conn.err);
    for (int i = 0; i < BIG; i++) {
        resp_reply_t *a = rc_read(&bt_conn, 0);
        BP_REQUIRE(a != NULL && a->type == RESP_REPLY_BULK, "SEND %d: %s", i,
                   a == NULL ? bt_conn.err : rc_describe(a, e, sizeof e));
        resp_reply_free(a);
    }
    nack_into_dlq("g", "orders", BIG);
    BP_REQUIRE(dlq_len("g") == BIG, "DLQ LEN %lld, want %d", dlq_len("g"), BIG);
    all_then_len("REQUEUE", "g", BIG);
    nack_into_dlq("g", "orders", BIG); /* each comes back once, with reconsume 0 */
    BP_CHECK(dlq_len("g") == BIG, "DLQ LEN %lld after the requeued failed again, want %d", dlq_len("g"), BIG);
    all_then_len("DROP", "g", BIG);
    bt_expect_nothing_ready("g", "orders");
}

static void test_touch_extends(void)
{
    bt_start(NULL);
    char e[1024], id[32];
    BP_REQUIRE(bp_send(&bt_conn, id, sizeof id, e, sizeof e, "orders", "t", NULL) == 0, "%s", e);
    resp_reply_t *rep;
    rc_msg_t m;
    uint64_t t0 = tu_now_wall_ms();
    bt_pull_one("g", "orders", "1000", "800", &rep, &m);
    resp_reply_free(rep);
    long long dl = -1;
    uint64_t before = tu_now_wall_ms();
    BP_REQUIRE(bp_int_cmd(&bt_conn, &dl, e, sizeof e, "TOUCH", "g", id, "LEASE", "4000", NULL) == 0, "%s", e);
    uint64_t after = tu_now_wall_ms();
    BP_CHECK(dl >= (long long)(before + 4000) && dl <= (long long)(after + 4000), "TOUCH LEASE 4000 deadline now%+lld",
             dl - (long long)before);
    /* Past the original 800 ms deadline (plus margin) the lease still holds. */
    struct {
        uint64_t until;
    } wait_ctx = { t0 + 800 + 700 };
    while (tu_now_wall_ms() < wait_ctx.until) {
        resp_reply_t *r = bp_pull(&bt_conn, e, sizeof e, "g", "orders", "BLOCK", "200", NULL);
        BP_REQUIRE(r != NULL, "%s", e);
        BP_CHECK(r->count == 0, "a touched message was redelivered");
        resp_reply_free(r);
    }
    long long inflight = -1;
    BP_CHECK(bp_group_field(&bt_conn, "g", "inflight", &inflight, e, sizeof e) == 1 && inflight == 1,
             "inflight %lld after the original deadline, want 1", inflight);
    /* TOUCH without LEASE: the default 30 s. */
    before = tu_now_wall_ms();
    BP_REQUIRE(bp_int_cmd(&bt_conn, &dl, e, sizeof e, "TOUCH", "g", id, NULL) == 0, "%s", e);
    after = tu_now_wall_ms();
    BP_CHECK(dl >= (long long)(before + 30000) && dl <= (long long)(after + 30000),
             "TOUCH deadline now%+lld, want +30000", dl - (long long)before);
    long long n = -1;
    BP_REQUIRE(bp_int_cmd(&bt_conn, &n, e, sizeof e, "ACK", "g", id, NULL) == 0, "%s", e);
    BP_CHECK(n == 1, "ACK of a touched lease released %lld", n);
    BP_REQUIRE(bp_int_cmd(&bt_conn, &n, e, sizeof e, "TOUCH", "g", id, NULL) == 0, "%s", e);
    BP_CHECK(n == 0, "TOUCH after ACK answered %lld, want 0", n);
}

static void test_ack_rules(void)
{
    bt_start(NULL);
    char e[1024], a[32], b[32];
    BP_REQUIRE(bp_send(&bt_conn, a, sizeof a, e, sizeof e, "orders", "a", NULL) == 0, "%s", e);
    BP_REQUIRE(bp_send(&bt_conn, b, sizeof b, e, sizeof e, "orders", "b", NULL) == 0, "%s", e);
    resp_reply_t *r = bp_pull(&bt_conn, e, sizeof e, "g", "orders", "COUNT", "2", NULL);
    BP_REQUIRE(r != NULL && r->count == 2, "PULL COUNT 2: %s", r == NULL ? e : "wrong count");
    resp_reply_free(r);
    long long n = -1;
    BP_REQUIRE(bp_int_cmd(&bt_conn, &n, e, sizeof e, "ACK", "other", a, NULL) == 0, "%s", e);
    BP_CHECK(n == 0, "ACK in an unknown group released %lld", n);
    BP_REQUIRE(bp_int_cmd(&bt_conn, &n, e, sizeof e, "ACK", "g", a, a, "00000000deadbeef", b, NULL) == 0, "%s", e);
    BP_CHECK(n == 2, "ACK a a unknown b released %lld, want 2 (duplicates once, unknown 0)", n);
    BP_REQUIRE(bp_int_cmd(&bt_conn, &n, e, sizeof e, "ACK", "g", a, b, NULL) == 0, "%s", e);
    BP_CHECK(n == 0, "ACK again released %lld, want 0", n);
    /* Upper-case hex ids are accepted. */
    char upper[32];
    snprintf(upper, sizeof upper, "%s", a);
    for (char *p = upper; *p; p++)
        if (*p >= 'a' && *p <= 'f')
            *p = (char)(*p - 'a' + 'A');
    BP_REQUIRE(bp_int_cmd(&bt_conn, &n, e, sizeof e, "ACK", "g", upper, NULL) == 0, "ACK with an upper-case id: %s", e);
    r = rc_cmd(&bt_conn, "ACK", "g", "xyz", NULL);
    BP_CHECK(rc_is_error(r, "ERR invalid message id"), "ACK xyz: %s", rc_describe(r, e, sizeof e));
    resp_reply_free(r);
    r = rc_cmd(&bt_conn, "NACK", "g", a, "LEVEL", "19", NULL);
    BP_CHECK(rc_is_error(r, "ERR"), "NACK LEVEL 19: %s", rc_describe(r, e, sizeof e));
    resp_reply_free(r);
}

static const tu_test_t retry_tests[] = {
    { "default schedule: NACK and lease expiry come back after 10 s", test_default_first_step },
    { "retry policy on a short table, clamp, DLQ at MAXRETRY", test_schedule_short_table },
    { "DLQ after max, LIST shows the reason", test_dlq_after_max_with_reason },
    { "DLQ LIST paging, REQUEUE one/ALL, DROP one/ALL", test_dlq_requeue_drop },
    { "DLQ REQUEUE/DROP ALL of a DLQ that takes several steps", test_dlq_all_in_steps },
    { "TOUCH extends a lease", test_touch_extends },
    { "ACK counts leases released", test_ack_rules },
    { NULL, NULL },
};

int main(int argc, char **argv)
{
    return bt_main(argc, argv, "retry", retry_tests);
}
