/*
 * tests/unit/test_store_leases.c — CUnit suites "leases", "dlq" of the store
 * package behind levels/store.h (DESIGN §1–3), through its public calls:
 * leases (retry first, byte budget, ACK, GET/TOUCH, FAIL and the decision from
 * the lease), leases written late (lease_write_delay_ms) and crashes; the
 * dead-letter queue (list, requeue, drop, in steps).
 *
 * The fixture (tests/helpers/store_fixture.h): every test gets a fresh temp
 * directory and drives the store with an injected clock, every now_ms passed
 * explicitly from T0; after every step that mutates, store_check() must
 * return 0. Run alone: ./tests/unit/test_store_leases [suite [test]].
 */
#include "base/alloc.h"
#include "base/err.h"
#include "levels/store.h"
#include "levels/store_internal.h" /* lease_pend.c's spare records */
#include "tests/helpers/store_fixture.h"
#include "tests/helpers/store_probe.h"
#include "tests/helpers/testutil.h"

#include <CUnit/CUnit.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define FAIL_DELAY(s, g, id, delay, reason, now, due) \
    fail_at((s), (g), (id), 0, 0, (delay), (reason), (now), 1, (due), __LINE__)

/* count messages ("x") sent to topic t at T0, their ids into ids; group g
 * leases all of them, and then so does also_group when it is not NULL: each
 * lease must take count ("<group> leased <n> of <count>"), failing the test
 * at line. The leased copies are freed. */
static void send_and_lease_all_at(store_t *s, uint64_t *ids, int count, const char *also_group, int line)
{
    for (int i = 0; i < count; i++)
        ids[i] = send_at(s, "t", "x", 0, 0, T0, NULL, line);
    msg_owned_t *m = xcalloc((size_t)count, sizeof *m);
    const char *groups[] = { "g", also_group };
    for (int k = 0; k < 2 && groups[k] != NULL; k++) {
        int n = lease_at(s, groups[k], "t", count, LEASE, T0, m, line);
        free_msgs(m, n);
        TU_REQUIRE_AT(n == count, line, "%s leased %d of %d", groups[k], n, count);
    }
    free(m);
}
#define SEND_AND_LEASE_ALL(s, ids, count, also_group) send_and_lease_all_at((s), (ids), (count), (also_group), __LINE__)

/* store_dlq_requeue of group's DLQ entry id (all: every entry, from the
 * start) at now: it must succeed and requeue want entries. A failure names
 * the call's values and fails the test at line. */
static void dlq_requeue_expect_at(store_t *s, const char *group, uint64_t id, int all, uint64_t now, uint64_t want,
                                  int line)
{
    char err[512] = "";
    uint64_t cnt = 99;
    TU_REQUIRE_AT(store_dlq_requeue(s, group, strlen(group), id, all, now, &cnt, err, sizeof err) == 0, line,
                  "store_dlq_requeue of %s id %" PRIu64 " all %d failed: %s", group, id, all, err);
    TU_CHECK_AT(cnt == want, line, "store_dlq_requeue of %s id %" PRIu64 " all %d: %" PRIu64 " requeued, want %" PRIu64,
                group, id, all, cnt, want);
}
#define DLQ_REQUEUE_EXPECT(s, g, id, all, now, want) \
    dlq_requeue_expect_at((s), (g), (id), (all), (now), (want), __LINE__)

/* store_dlq_drop of group's DLQ entry id (all: every entry): it must succeed
 * and drop want entries. A failure names the call's values and fails the
 * test at line. */
static void dlq_drop_expect_at(store_t *s, const char *group, uint64_t id, int all, uint64_t want, int line)
{
    char err[512] = "";
    uint64_t cnt = 99;
    TU_REQUIRE_AT(store_dlq_drop(s, group, strlen(group), id, all, &cnt, err, sizeof err) == 0, line,
                  "store_dlq_drop of %s id %" PRIu64 " all %d failed: %s", group, id, all, err);
    TU_CHECK_AT(cnt == want, line, "store_dlq_drop of %s id %" PRIu64 " all %d: %" PRIu64 " dropped, want %" PRIu64,
                group, id, all, cnt, want);
}
#define DLQ_DROP_EXPECT(s, g, id, all, want) dlq_drop_expect_at((s), (g), (id), (all), (want), __LINE__)

/* store_dlq_list of group's DLQ after id after, up to count entries, into
 * m (the caller frees them): required to succeed, the failure naming the
 * call's values at line. Returns how many were listed. */
static int dlq_list_at(store_t *s, const char *group, uint64_t after, int count, msg_owned_t *m, int line)
{
    char err[512] = "";
    int n = -1;
    TU_REQUIRE_AT(store_dlq_list(s, group, strlen(group), after, count, m, &n, err, sizeof err) == 0, line,
                  "store_dlq_list of %s after %" PRIu64 " count %d failed: %s", group, after, count, err);
    return n;
}
#define DLQ_LIST(s, g, after, count, m) dlq_list_at((s), (g), (after), (count), (m), __LINE__)

/* ============================================================ suite: leases */

static void test_lease_retry_first(void)
{
    store_t *s = OPEN_DEFAULT();
    uint64_t a = SEND(s, "t", "a", 0, 0, T0, NULL);
    msg_owned_t m[8];
    int n = LEASE_N(s, "g", "t", 1, LEASE, T0, m);
    TU_REQUIRE(n == 1 && m[0].m.id == a, "lease a");
    free_msgs(m, n);
    uint64_t due = 0;
    FAIL_LEVEL(s, "g", a, 1, "nope", T0, &due);
    CHECK_EQ_U64(due, T0 + SEC);
    uint64_t b = SEND(s, "t", "b", 0, 0, T0 + 10, NULL);
    uint64_t c = SEND(s, "t", "c", 0, 0, T0 + 20, NULL);
    MOVE(s, T0 + SEC, 10, NULL);
    n = LEASE_N(s, "g", "t", 2, LEASE, T0 + SEC, m);
    TU_REQUIRE(n == 2, "leased %d", n);
    TU_CHECK(m[0].m.id == a && m[0].m.reconsume == 1, "retry first: id %" PRIu64 " reconsume %u", m[0].m.id,
             m[0].m.reconsume);
    TU_CHECK(msg_str_is(&m[0].m.reason, "nope"), "reason kept");
    CHECK_EQ_U64(m[0].m.due_ms, T0 + SEC);
    CHECK_EQ_U64(m[1].m.id, b);
    CHECK_EQ_U64(m[1].m.reconsume, 0);
    free_msgs(m, n);
    n = LEASE_N(s, "g", "t", 8, LEASE, T0 + SEC, m);
    TU_REQUIRE(n == 1, "leased %d", n);
    CHECK_EQ_U64(m[0].m.id, c);
    free_msgs(m, n);
    char err[512] = "";
    n = -1;
    CHECK_REFUSAL(store_lease(s, "g", 1, "t", 1, 0, LEASE, T0, m, &n, err, sizeof err), err, "count", NULL);
    CHECK_STORE(s);
}

/* A lease call stops once its payloads reach max_lease_bytes, but always
 * hands out at least one message (a payload larger than the budget too). */
static void test_lease_byte_budget(void)
{
    store_options_t o;
    opts_default(&o);
    o.max_lease_bytes = 100;
    store_t *s = OPEN(&o);
    char big[150], small[40];
    memset(big, 'b', sizeof big - 1);
    big[sizeof big - 1] = '\0';
    memset(small, 's', sizeof small - 1);
    small[sizeof small - 1] = '\0';
    uint64_t a = SEND(s, "t", big, 0, 0, T0, NULL);
    uint64_t b = SEND(s, "t", small, 0, 0, T0, NULL);
    uint64_t c = SEND(s, "t", small, 0, 0, T0, NULL);
    uint64_t d = SEND(s, "t", small, 0, 0, T0, NULL);
    msg_owned_t m[8];
    int n = LEASE_N(s, "g", "t", 8, LEASE, T0, m);
    TU_REQUIRE(n == 1 && m[0].m.id == a, "one oversized message alone, got %d", n);
    free_msgs(m, n);
    n = LEASE_N(s, "g", "t", 8, LEASE, T0, m); /* 39 + 39 < 100, the third reaches it */
    TU_REQUIRE(n == 3, "leased %d", n);
    TU_CHECK(m[0].m.id == b && m[1].m.id == c && m[2].m.id == d, "order");
    free_msgs(m, n);
    CHECK_STORE(s);
}

static void test_lease_ack(void)
{
    store_t *s = OPEN_DEFAULT();
    uint64_t ids[3];
    SEND_AND_LEASE_ALL(s, ids, 3, NULL);
    uint64_t dup[4] = { ids[0], ids[0], ids[1], ids[0] };
    TU_CHECK(ACK(s, "g", dup, 4) == 2, "duplicates count once");
    CHECK_COUNTS(s, "g", 0, 0, 0, 0, 1, 0);
    CHECK_STORE(s);
    TU_CHECK(ACK(s, "g", dup, 4) == 0, "second ack releases nothing");
    uint64_t unknown = ids[2] + 1000;
    TU_CHECK(ACK(s, "g", &unknown, 1) == 0, "unknown id");
    TU_CHECK(ACK(s, "nosuch", &ids[2], 1) == 0, "unknown group");
    TU_CHECK(ACK(s, "g", ids, 0) == 0, "empty ack");
    CHECK_COUNTS(s, "g", 0, 0, 0, 0, 1, 0);
    TU_CHECK(ACK(s, "g", &ids[2], 1) == 1, "last one");
    CHECK_COUNTS(s, "g", 0, 0, 0, 0, 0, 0);
    CHECK_EQ_U64(store_next_lease_deadline(s), UINT64_MAX);
    CHECK_STORE(s);
}

/* ACK of many ids in any order, sparse and dense, some unknown, with a group
 * whose name extends this one's holding the same ids: exactly the named
 * leases of this group go. */
static void test_lease_ack_many(void)
{
    enum {
        N = 60
    };
    store_t *s = OPEN_DEFAULT();
    uint64_t ids[N];
    SEND_AND_LEASE_ALL(s, ids, N, "gg");
    /* acked: 59 (last), 0, 1, 2, 30, 45 (far from 30), 46, 58; unknown ids between */
    int pick[] = { 59, 0, 1, 2, 30, 45, 46, 58 };
    uint64_t ack[16];
    int na = 0;
    for (size_t i = 0; i < sizeof pick / sizeof pick[0]; i++)
        ack[na++] = ids[pick[i]];
    ack[na++] = ids[N - 1] + 100; /* past every lease */
    ack[na++] = 0;                /* before every lease */
    ack[na++] = ids[30] + 1;      /* between leases (ids are not contiguous) */
    ack[na++] = ids[2];           /* duplicate */
    TU_CHECK(ACK(s, "g", ack, na) == 8, "released count");
    char acked[N] = { 0 };
    for (size_t i = 0; i < sizeof pick / sizeof pick[0]; i++)
        acked[pick[i]] = 1;
    int wrong = 0;
    for (int i = 0; i < N; i++) {
        int has = probe_lease_get(s, "g", 1, ids[i], NULL, NULL, NULL, 0);
        int other = probe_lease_get(s, "gg", 2, ids[i], NULL, NULL, NULL, 0);
        if (has != !acked[i] || other != 1)
            wrong++;
    }
    TU_CHECK(wrong == 0, "%d leases in the wrong state after the ACK", wrong);
    CHECK_COUNTS(s, "g", 0, 0, 0, 0, N - 8, 0);
    CHECK_COUNTS(s, "gg", 0, 0, 0, 0, N, 0);
    CHECK_STORE(s);
    /* everything at once, every other id first */
    na = 0;
    uint64_t all[N];
    for (int i = 1; i < N; i += 2)
        all[na++] = ids[i];
    for (int i = 0; i < N; i += 2)
        all[na++] = ids[i];
    TU_CHECK(ACK(s, "g", all, na) == N - 8, "second ack released the rest");
    CHECK_COUNTS(s, "g", 0, 0, 0, 0, 0, 0);
    CHECK_COUNTS(s, "gg", 0, 0, 0, 0, N, 0);
    CHECK_STORE(s);
}

/* ACKs as random delays make them: each ACK's ids spread over a range where
 * most leases were ACKed already (their index entries deleted), so store_ack
 * looks them up one by one instead of walking the range; a dense ACK after
 * that walks again. Every lease released once, the other group untouched. */
static void test_lease_ack_spread(void)
{
    enum {
        N = 400,
        STRIDE = 37 /* coprime with N: visits every index once */
    };
    store_t *s = OPEN_DEFAULT();
    static uint64_t ids[N];
    SEND_AND_LEASE_ALL(s, ids, N, "gg");
    /* 390 in ACKs of 10 ids spread over the whole range, committed one by one */
    int acked = 0, released = 0;
    for (int k = 0; k < 39; k++) {
        uint64_t ack[10];
        for (int j = 0; j < 10; j++)
            ack[j] = ids[((k * 10 + j) * STRIDE) % N];
        released += ACK(s, "g", ack, 10);
        acked += 10;
        COMMIT(s);
    }
    TU_CHECK(released == acked, "spread ACKs released %d of %d", released, acked);
    CHECK_COUNTS(s, "g", 0, 0, 0, 0, N - acked, 0);
    /* the last 10, dense in the order they were leased, and all of them again */
    uint64_t rest[10];
    int nr = 0;
    for (int i = 0; i < N; i++)
        if (probe_lease_get(s, "g", 1, ids[i], NULL, NULL, NULL, 0) == 1 && nr < 10)
            rest[nr++] = ids[i];
    TU_REQUIRE(nr == 10, "%d leases left, want 10", nr);
    TU_CHECK(ACK(s, "g", rest, nr) == 10, "the last 10 released");
    COMMIT(s);
    TU_CHECK(ACK(s, "g", ids, N) == 0, "a second ACK of everything releases nothing");
    CHECK_COUNTS(s, "g", 0, 0, 0, 0, 0, 0);
    CHECK_COUNTS(s, "gg", 0, 0, 0, 0, N, 0);
    CHECK_STORE(s);
}

static void test_lease_get_touch_expired(void)
{
    store_t *s = OPEN_DEFAULT();
    uint64_t a = SEND(s, "t", "a", 0, 0, T0, NULL);
    uint64_t b = SEND(s, "t", "b", 0, 0, T0, NULL);
    uint64_t c = SEND(s, "t", "c", 0, 0, T0, NULL);
    msg_owned_t m[4];
    int n = LEASE_N(s, "g", "t", 1, 10 * SEC, T0, m); /* a: deadline +10s */
    free_msgs(m, n);
    n = LEASE_N(s, "g", "t", 1, 5 * SEC, T0, m); /* b: +5s */
    free_msgs(m, n);
    n = LEASE_N(s, "g", "t", 1, 20 * SEC, T0, m); /* c: +20s */
    free_msgs(m, n);
    CHECK_STORE(s);
    char err[512] = "";
    msg_owned_t lm = { 0 };
    uint64_t dl = 0;
    TU_REQUIRE(probe_lease_get(s, "g", 1, a, &lm, &dl, err, sizeof err) == 1, "lease_get a: %s", err);
    CHECK_EQ_U64(dl, T0 + 10 * SEC);
    TU_CHECK(lm.m.id == a && msg_str_is(&lm.m.payload, "a") && msg_str_is(&lm.m.group, "g"), "lease content");
    msg_owned_free(&lm);
    TU_CHECK(probe_lease_get(s, "g", 1, a + 1000, NULL, &dl, err, sizeof err) == 0, "missing id");
    TU_CHECK(probe_lease_get(s, "nosuch", 6, a, NULL, &dl, err, sizeof err) == 0, "missing group");
    CHECK_EQ_U64(store_next_lease_deadline(s), T0 + 5 * SEC);

    store_lease_ref_t r[8];
    int ne = -1;
    REQUIRE_OK(store_expired_leases(s, T0 + 5 * SEC - 1, r, 8, &ne, err, sizeof err), err);
    TU_CHECK(ne == 0, "expired before any deadline: %d", ne);
    REQUIRE_OK(store_expired_leases(s, T0 + 10 * SEC, r, 8, &ne, err, sizeof err), err);
    TU_REQUIRE(ne == 2, "expired at +10s: %d", ne);
    TU_CHECK(r[0].id == b && r[0].deadline_ms == T0 + 5 * SEC && r[1].id == a && r[1].deadline_ms == T0 + 10 * SEC,
             "earliest first: %" PRIu64 "@%" PRIu64 ", %" PRIu64 "@%" PRIu64, r[0].id, r[0].deadline_ms, r[1].id,
             r[1].deadline_ms);
    TU_CHECK(strcmp(r[0].group, "g") == 0 && r[0].reconsume == 0, "ref group %s", r[0].group);
    REQUIRE_OK(store_expired_leases(s, T0 + DAY, r, 1, &ne, err, sizeof err), err);
    TU_CHECK(ne == 1 && r[0].id == b, "max 1: %d", ne);
    CHECK_STORE(s); /* expired_leases is read only */
    CHECK_COUNTS(s, "g", 0, 0, 0, 0, 3, 0);

    /* TOUCH b to +30s: b is no longer expired at +10s, a is; next deadline is a's */
    int found = -1;
    REQUIRE_OK(store_touch(s, "g", 1, b, T0 + 30 * SEC, &found, err, sizeof err), err);
    TU_CHECK(found == 1, "touch found %d", found);
    CHECK_STORE(s);
    TU_REQUIRE(probe_lease_get(s, "g", 1, b, NULL, &dl, err, sizeof err) == 1, "lease_get b");
    CHECK_EQ_U64(dl, T0 + 30 * SEC);
    CHECK_EQ_U64(store_next_lease_deadline(s), T0 + 10 * SEC);
    REQUIRE_OK(store_expired_leases(s, T0 + 20 * SEC, r, 8, &ne, err, sizeof err), err);
    TU_CHECK(ne == 2 && r[0].id == a && r[1].id == c, "after touch at +20s: %d (%" PRIu64 ")", ne, ne ? r[0].id : 0);
    REQUIRE_OK(store_expired_leases(s, T0 + 30 * SEC, r, 8, &ne, err, sizeof err), err);
    TU_CHECK(ne == 3 && r[2].id == b, "at +30s: %d", ne);
    /* TOUCH a earlier than everything */
    REQUIRE_OK(store_touch(s, "g", 1, a, T0 + SEC, &found, err, sizeof err), err);
    CHECK_EQ_U64(store_next_lease_deadline(s), T0 + SEC);
    REQUIRE_OK(store_expired_leases(s, T0 + SEC, r, 8, &ne, err, sizeof err), err);
    TU_CHECK(ne == 1 && r[0].id == a, "a touched to +1s: %d", ne);
    /* TOUCH to the same deadline keeps the lease */
    REQUIRE_OK(store_touch(s, "g", 1, a, T0 + SEC, &found, err, sizeof err), err);
    TU_CHECK(found == 1 && probe_lease_get(s, "g", 1, a, NULL, &dl, err, sizeof err) == 1 && dl == T0 + SEC,
             "touch to the same deadline: found %d deadline %" PRIu64, found, dl - T0);
    REQUIRE_OK(store_touch(s, "g", 1, a + 1000, T0, &found, err, sizeof err), err);
    TU_CHECK(found == 0, "touch of a missing lease found %d", found);
    REQUIRE_OK(store_touch(s, "nosuch", 6, a, T0, &found, err, sizeof err), err);
    TU_CHECK(found == 0, "touch in a missing group found %d", found);
    CHECK_COUNTS(s, "g", 0, 0, 0, 0, 3, 0);
    CHECK_STORE(s);
}

/* A lease still in the pending batch with a deadline before every committed
 * lease: the next deadline and the expired list must both see it. */
static void test_lease_pending_earlier_deadline(void)
{
    store_t *s = OPEN_DEFAULT();
    uint64_t a = SEND(s, "t", "a", 0, 0, T0, NULL);
    uint64_t b = SEND(s, "t", "b", 0, 0, T0, NULL);
    msg_owned_t m[2];
    int n = LEASE_N(s, "g", "t", 1, 60 * SEC, T0, m); /* a: +60s, committed below */
    TU_REQUIRE(n == 1 && m[0].m.id == a, "lease a");
    free_msgs(m, n);
    COMMIT(s);
    n = LEASE_N(s, "g", "t", 1, 5 * SEC, T0, m); /* b: +5s, still pending */
    TU_REQUIRE(n == 1 && m[0].m.id == b, "lease b");
    free_msgs(m, n);
    TU_CHECK(store_pending(s) > 0, "the lease should be pending (batched)");
    uint64_t next = store_next_lease_deadline(s);
    TU_CHECK(next == T0 + 5 * SEC, "next lease deadline %" PRIu64 ", want +5s (b, pending)", next - T0);
    store_lease_ref_t r[4];
    int ne = -1;
    char err[512] = "";
    REQUIRE_OK(store_expired_leases(s, T0 + 6 * SEC, r, 4, &ne, err, sizeof err), err);
    TU_CHECK(ne == 1 && r[0].id == b, "b's lease must expire at +6s: %d expired", ne);
    REQUIRE_OK(store_expired_leases(s, T0 + 60 * SEC, r, 4, &ne, err, sizeof err), err);
    TU_CHECK(ne == 2, "both expired at +60s: %d", ne);
    CHECK_STORE(s);

    /* everything released, then a lease earlier than any seen before */
    uint64_t both[2] = { a, b };
    TU_CHECK(ACK(s, "g", both, 2) == 2, "ack both");
    CHECK_EQ_U64(store_next_lease_deadline(s), UINT64_MAX);
    uint64_t c = SEND(s, "t", "c", 0, 0, T0, NULL);
    n = LEASE_N(s, "g", "t", 1, SEC, T0, m); /* c: +1s */
    TU_REQUIRE(n == 1 && m[0].m.id == c, "lease c");
    free_msgs(m, n);
    CHECK_EQ_U64(store_next_lease_deadline(s), T0 + SEC);
    REQUIRE_OK(store_expired_leases(s, T0 + SEC, r, 4, &ne, err, sizeof err), err);
    TU_CHECK(ne == 1 && r[0].id == c, "c expires at +1s: %d", ne);

    /* a lease from before a reopen is found by both */
    CLOSE(&s);
    s = OPEN_DEFAULT();
    CHECK_EQ_U64(store_next_lease_deadline(s), T0 + SEC);
    REQUIRE_OK(store_expired_leases(s, T0 + SEC, r, 4, &ne, err, sizeof err), err);
    TU_CHECK(ne == 1 && r[0].id == c, "after reopen c expires at +1s: %d", ne);
    CHECK_STORE(s);
}

static void test_lease_fail(void)
{
    store_t *s = OPEN_DEFAULT();
    uint64_t ids[4];
    SEND_AND_LEASE_ALL(s, ids, 4, NULL);
    msg_owned_t m[8];
    int n;

    /* to a level */
    uint64_t due = 0;
    FAIL_LEVEL(s, "g", ids[0], 3, "level three", T0 + 100, &due);
    CHECK_EQ_U64(due, T0 + 100 + 10 * SEC);
    CHECK_EQ_U64(level_depth(s, 3), 1);
    TU_CHECK(probe_lease_get(s, "g", 1, ids[0], NULL, NULL, NULL, 0) == 0, "lease deleted by fail");
    CHECK_COUNTS(s, "g", 0, 0, 0, 1, 3, 0);
    CHECK_STORE(s);
    int ready = -1;
    TU_CHECK(MOVE(s, due - 1, 10, &ready) == 0, "retry not due early");
    TU_CHECK(MOVE(s, due, 10, &ready) == 1 && ready == 1, "retry due");
    CHECK_COUNTS(s, "g", 1, 0, 1, 0, 3, 0);
    CHECK_STORE(s);
    store_topic_info_t ti;
    TU_CHECK(store_topic_info(s, "t", 1, &ti) == 1 && ti.appended == 4, "a retry does not re-enter the topic log");
    n = LEASE_N(s, "g", "t", 8, LEASE, due, m);
    TU_REQUIRE(n == 1, "leased %d", n);
    TU_CHECK(m[0].m.id == ids[0] && m[0].m.reconsume == 1 && msg_str_is(&m[0].m.reason, "level three"),
             "retry: id %" PRIu64 " reconsume %u", m[0].m.id, m[0].m.reconsume);
    free_msgs(m, n);
    /* second failure: reconsume 2 */
    FAIL_LEVEL(s, "g", ids[0], 1, "again", due, &due);
    MOVE(s, due, 10, NULL);
    n = LEASE_N(s, "g", "t", 8, LEASE, due, m);
    TU_REQUIRE(n == 1, "leased %d", n);
    TU_CHECK(m[0].m.reconsume == 2 && msg_str_is(&m[0].m.reason, "again"), "reconsume %u", m[0].m.reconsume);
    free_msgs(m, n);

    /* with a delay: 90s = 1m + 30s */
    FAIL_DELAY(s, "g", ids[1], 90 * SEC, "delayed", T0 + 200, &due);
    CHECK_EQ_U64(due, T0 + 200 + 90 * SEC);
    CHECK_EQ_U64(level_depth(s, 5), 1);
    TU_CHECK(MOVE(s, T0 + 200 + MIN, 10, &ready) == 1 && ready == 0, "first hop of the retry");
    CHECK_EQ_U64(level_depth(s, 4), 1);
    TU_CHECK(MOVE(s, due, 10, &ready) == 1 && ready == 1, "retry ready at +90s");
    CHECK_STORE(s);

    /* to the DLQ */
    uint64_t d = 999;
    fail_at(s, "g", ids[2], 1, 0, 0, "poison", T0 + 300, 1, &d, __LINE__);
    CHECK_EQ_U64(d, 0);
    CHECK_COUNTS(s, "g", 1, 0, 1, 0, 2, 1);
    CHECK_STORE(s);

    /* a missing lease: found 0, nothing changes */
    fail_at(s, "g", ids[2], 0, 1, 0, "again", T0 + 300, 0, NULL, __LINE__);
    fail_at(s, "g", ids[3] + 1000, 1, 0, 0, "x", T0 + 300, 0, NULL, __LINE__);
    fail_at(s, "nosuch", ids[3], 1, 0, 0, "x", T0 + 300, 0, NULL, __LINE__);
    CHECK_COUNTS(s, "g", 1, 0, 1, 0, 2, 1);

    /* bad requests are refused and the lease stays */
    char err[512] = "", big[MSG_MAX_REASON + 2];
    int found = -1;
    memset(big, 'r', sizeof big);
    store_fail_req_t bad[] = {
        { .level = 19 },
        { .level = -1 },
        { .level = 0, .delay_ms = 0 },
        { .level = 0, .delay_ms = 4 * DAY },
        { .level = 1, .reason = big, .reason_len = MSG_MAX_REASON + 1 },
    };
    const char *frag[] = { "1..18", "1..18", "positive", "max-delay 3d", "1024" };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        err[0] = '\0';
        int rc = store_fail(s, "g", 1, ids[3], &bad[i], T0, &found, NULL, err, sizeof err);
        CHECK_REFUSAL(rc, err, frag[i], NULL);
    }
    TU_CHECK(probe_lease_get(s, "g", 1, ids[3], NULL, NULL, NULL, 0) == 1, "refused fail removed the lease");
    /* a reason of exactly the limit is fine */
    store_fail_req_t ok = { .level = 1, .reason = big, .reason_len = MSG_MAX_REASON };
    REQUIRE_OK(store_fail(s, "g", 1, ids[3], &ok, T0, &found, NULL, err, sizeof err), err);
    TU_CHECK(found == 1, "found %d", found);
    CHECK_STORE(s);
}

/* store_fail with a decide callback: called once the lease is found, with
 * the lease's reconsume, the group's max-reconsume and the store's table; its
 * decision is carried out; a decision out of range is refused after the
 * lookup and the lease stays; no lease, no call. */
typedef struct decide_probe {
    int calls;
    uint32_t reconsume, max_reconsume;
    const lvl_table_t *levels;
    store_fail_req_t answer; /* copied into *req (reason kept) */
} decide_probe_t;

static void decide_record(void *ctx, const lvl_table_t *levels, uint32_t reconsume, uint32_t max_reconsume,
                          store_fail_req_t *req)
{
    decide_probe_t *p = ctx;
    p->calls++;
    p->reconsume = reconsume;
    p->max_reconsume = max_reconsume;
    p->levels = levels;
    req->to_dlq = p->answer.to_dlq;
    req->level = p->answer.level;
    req->delay_ms = p->answer.delay_ms;
}

static void test_lease_fail_decided(void)
{
    store_t *s = OPEN_DEFAULT();
    char err[512] = "";
    REQUIRE_OK(store_group_create(s, "g", 1, "t", 1, 1, 5, T0, err, sizeof err), err);
    uint64_t a = SEND(s, "t", "a", 0, 0, T0, NULL);
    uint64_t b = SEND(s, "t", "b", 0, 0, T0, NULL);
    msg_owned_t m[2];
    int n = LEASE_N(s, "g", "t", 2, LEASE, T0, m);
    TU_REQUIRE(n == 2, "leased %d", n);
    free_msgs(m, n);

    /* a: decided to level 2, then (reconsume 1 now) decided to the DLQ */
    decide_probe_t p = { .answer = { .level = 2 } };
    store_fail_req_t req = { .reason = "why", .reason_len = 3, .decide = decide_record, .decide_ctx = &p };
    int found = -1;
    uint64_t due = 0;
    REQUIRE_OK(store_fail(s, "g", 1, a, &req, T0, &found, &due, err, sizeof err), err);
    TU_CHECK(found == 1 && p.calls == 1, "found %d, decide called %d times", found, p.calls);
    TU_CHECK(p.reconsume == 0 && p.max_reconsume == 5 && p.levels == store_levels(s), "decide saw reconsume %u max %u",
             p.reconsume, p.max_reconsume);
    CHECK_EQ_U64(due, T0 + 5 * SEC);
    CHECK_EQ_U64(level_depth(s, 2), 1);
    MOVE(s, due, 10, NULL);
    n = LEASE_N(s, "g", "t", 1, LEASE, due, m);
    TU_REQUIRE(n == 1 && m[0].m.id == a && m[0].m.reconsume == 1 && msg_str_is(&m[0].m.reason, "why"),
               "the retry of a");
    free_msgs(m, n);
    p = (decide_probe_t){ .answer = { .to_dlq = 1 } };
    REQUIRE_OK(store_fail(s, "g", 1, a, &req, due, &found, &due, err, sizeof err), err);
    TU_CHECK(found == 1 && p.calls == 1 && p.reconsume == 1 && due == 0,
             "a to the DLQ: found %d calls %d "
             "reconsume %u due %" PRIu64,
             found, p.calls, p.reconsume, due);
    CHECK_COUNTS(s, "g", 0, 0, 0, 0, 1, 1);
    CHECK_STORE(s);

    /* b: a decision out of range is refused once the lease is read; the lease stays */
    const store_fail_req_t bad[] = { { .level = 19 }, { .delay_ms = 0 }, { .delay_ms = 4 * DAY } };
    const char *frag[] = { "1..18", "positive", "max-delay 3d" };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        p = (decide_probe_t){ .answer = bad[i] };
        err[0] = '\0';
        int rc = store_fail(s, "g", 1, b, &req, T0, &found, NULL, err, sizeof err);
        CHECK_REFUSAL(rc, err, frag[i], NULL);
        TU_CHECK(p.calls == 1, "decide called %d times", p.calls);
    }
    TU_CHECK(probe_lease_get(s, "g", 1, b, NULL, NULL, NULL, 0) == 1, "a refused decision removed the lease");
    CHECK_COUNTS(s, "g", 0, 0, 0, 0, 1, 1);

    /* no lease (or no group): found 0 and decide is not called */
    p = (decide_probe_t){ .answer = { .level = 1 } };
    REQUIRE_OK(store_fail(s, "g", 1, a, &req, T0, &found, NULL, err, sizeof err), err);
    TU_CHECK(found == 0 && p.calls == 0, "no lease: found %d, decide called %d times", found, p.calls);
    REQUIRE_OK(store_fail(s, "nosuch", 6, b, &req, T0, &found, NULL, err, sizeof err), err);
    TU_CHECK(found == 0 && p.calls == 0, "no group: found %d, decide called %d times", found, p.calls);
    CHECK_STORE(s);
}

/* =============================================================== suite: dlq */

/* Lease n messages on topic t and fail each to the DLQ of g, parked at
 * T0 + i; returns the ids in ids[]. */
static void fill_dlq(store_t *s, int count, uint64_t *ids)
{
    msg_owned_t m[16];
    for (int i = 0; i < count; i++)
        SEND(s, "t", "x", 0, 0, T0, NULL);
    int n = LEASE_N(s, "g", "t", count, LEASE, T0, m);
    TU_REQUIRE(n == count, "leased %d", n);
    for (int i = 0; i < n; i++) {
        char reason[32];
        snprintf(reason, sizeof reason, "reason %d", i);
        ids[i] = m[i].m.id;
        FAIL_DLQ(s, "g", ids[i], reason, T0 + (uint64_t)i);
    }
    free_msgs(m, n);
}

/* DLQ LIST has the same byte budget as a lease (msg_budget_t): each entry is
 * charged payload + key + reason, the one that reaches max_lease_bytes is the
 * last, and AFTER pages on; a 1-byte budget still lists one entry. */
static void test_dlq_list_byte_budget(void)
{
    store_options_t o;
    opts_default(&o);
    store_t *s = OPEN(&o);
    uint64_t ids[6];
    fill_dlq(s, 6, ids);
    CLOSE(&s);
    o.max_lease_bytes = 1;
    s = OPEN(&o);
    msg_owned_t m[8];
    int n = DLQ_LIST(s, "g", 0, 8, m);
    TU_REQUIRE(n == 1 && m[0].m.id == ids[0], "one entry under a 1-byte budget, got %d", n);
    uint64_t each = m[0].m.payload.len + m[0].m.key.len + m[0].m.reason.len;
    free_msgs(m, n);
    CLOSE(&s);
    o.max_lease_bytes = 2 * each + 1; /* two fit, the third reaches it */
    s = OPEN(&o);
    n = DLQ_LIST(s, "g", 0, 8, m);
    TU_REQUIRE(n == 3, "listed %d within %" PRIu64 " bytes (%" PRIu64 " each), want 3", n, o.max_lease_bytes, each);
    TU_CHECK(m[0].m.id == ids[0] && m[2].m.id == ids[2], "first page order");
    free_msgs(m, n);
    n = DLQ_LIST(s, "g", ids[2], 8, m);
    TU_REQUIRE(n == 3 && m[0].m.id == ids[3] && m[2].m.id == ids[5], "second page: %d", n);
    free_msgs(m, n);
    CHECK_STORE(s);
}

static void test_dlq_list(void)
{
    store_t *s = OPEN_DEFAULT();
    uint64_t ids[6];
    fill_dlq(s, 6, ids);
    CHECK_COUNTS(s, "g", 0, 0, 0, 0, 0, 6);
    CHECK_STORE(s);
    msg_owned_t m[8];
    int n = DLQ_LIST(s, "g", 0, 8, m);
    TU_REQUIRE(n == 6, "listed %d", n);
    for (int i = 0; i < n; i++) {
        char reason[32];
        snprintf(reason, sizeof reason, "reason %d", i);
        TU_CHECK(m[i].m.id == ids[i], "position %d id %" PRIu64, i, m[i].m.id);
        TU_CHECK(msg_str_is(&m[i].m.reason, reason), "position %d reason \"%.*s\"", i, (int)m[i].m.reason.len,
                 m[i].m.reason.ptr);
        TU_CHECK(m[i].m.stamp_ms == T0 + (uint64_t)i, "position %d parked at %" PRIu64, i, m[i].m.stamp_ms);
        TU_CHECK(m[i].m.reconsume == 1 && msg_str_is(&m[i].m.payload, "x") && msg_str_is(&m[i].m.topic, "t"),
                 "position %d content", i);
    }
    free_msgs(m, n);
    /* COUNT and AFTER page through it */
    n = DLQ_LIST(s, "g", 0, 2, m);
    TU_CHECK(n == 2 && m[0].m.id == ids[0] && m[1].m.id == ids[1], "first page");
    free_msgs(m, n);
    n = DLQ_LIST(s, "g", ids[1], 2, m);
    TU_CHECK(n == 2 && m[0].m.id == ids[2] && m[1].m.id == ids[3], "second page");
    free_msgs(m, n);
    n = DLQ_LIST(s, "g", ids[3], 10, m);
    TU_CHECK(n == 2 && m[0].m.id == ids[4] && m[1].m.id == ids[5], "last page");
    free_msgs(m, n);
    n = DLQ_LIST(s, "g", ids[2] - 1, 1, m);
    TU_CHECK(n == 1 && m[0].m.id == ids[2], "AFTER id-1 includes id");
    free_msgs(m, n);
    n = DLQ_LIST(s, "g", ids[5], 10, m);
    TU_CHECK(n == 0, "after the last: %d", n);
    n = DLQ_LIST(s, "g", UINT64_MAX, 10, m);
    TU_CHECK(n == 0, "after UINT64_MAX: %d", n);
    n = DLQ_LIST(s, "nosuch", 0, 10, m);
    TU_CHECK(n == 0, "unknown group: %d", n);
    /* another group's DLQ whose name extends this one's is not mixed in */
    SEND(s, "t", "y", 0, 0, T0, NULL);
    n = LEASE_N(s, "gg", "t", 1, LEASE, T0, m);
    TU_REQUIRE(n == 1, "gg leased %d", n);
    uint64_t other = m[0].m.id;
    free_msgs(m, n);
    FAIL_DLQ(s, "gg", other, "other", T0);
    n = DLQ_LIST(s, "g", 0, 10, m);
    TU_CHECK(n == 6, "g's DLQ lists %d after gg parked one", n);
    free_msgs(m, n);
    CHECK_STORE(s);
}

static void test_dlq_requeue(void)
{
    store_t *s = OPEN_DEFAULT();
    uint64_t ids[4];
    fill_dlq(s, 4, ids);
    DLQ_REQUEUE_EXPECT(s, "g", ids[1], 0, T0 + 10, 1);
    CHECK_COUNTS(s, "g", 1, 0, 1, 0, 0, 3);
    CHECK_STORE(s);
    DLQ_REQUEUE_EXPECT(s, "g", ids[1], 0, T0 + 10, 0); /* no longer there */
    DLQ_REQUEUE_EXPECT(s, "g", ids[3] + 1000, 0, T0 + 10, 0);
    DLQ_REQUEUE_EXPECT(s, "nosuch", ids[0], 1, T0 + 10, 0);
    msg_owned_t m[8];
    int n = LEASE_N(s, "g", "t", 8, LEASE, T0 + 20, m);
    TU_REQUIRE(n == 1, "leased %d", n);
    TU_CHECK(m[0].m.id == ids[1] && m[0].m.reconsume == 0, "requeued: id %" PRIu64 " reconsume %u", m[0].m.id,
             m[0].m.reconsume);
    free_msgs(m, n);
    DLQ_REQUEUE_EXPECT(s, "g", 0, 1, T0 + 30, 3);
    CHECK_COUNTS(s, "g", 3, 0, 3, 0, 1, 0);
    CHECK_STORE(s);
    n = LEASE_N(s, "g", "t", 8, LEASE, T0 + 40, m);
    TU_REQUIRE(n == 3, "leased %d", n);
    TU_CHECK(m[0].m.id == ids[0] && m[1].m.id == ids[2] && m[2].m.id == ids[3], "requeue-all order");
    for (int i = 0; i < n; i++)
        TU_CHECK(m[i].m.reconsume == 0, "reconsume %u", m[i].m.reconsume);
    free_msgs(m, n);
    CHECK_COUNTS(s, "g", 0, 0, 0, 0, 4, 0);
    CHECK_STORE(s);
}

static void test_dlq_drop(void)
{
    store_t *s = OPEN_DEFAULT();
    uint64_t ids[5];
    fill_dlq(s, 5, ids);
    DLQ_DROP_EXPECT(s, "g", ids[2], 0, 1);
    CHECK_COUNTS(s, "g", 0, 0, 0, 0, 0, 4);
    CHECK_STORE(s);
    DLQ_DROP_EXPECT(s, "g", ids[2], 0, 0);
    msg_owned_t m[8];
    int n = DLQ_LIST(s, "g", 0, 8, m);
    TU_CHECK(n == 4 && m[2].m.id == ids[3], "after dropping one: %d", n);
    free_msgs(m, n);
    DLQ_DROP_EXPECT(s, "g", 0, 1, 4);
    CHECK_COUNTS(s, "g", 0, 0, 0, 0, 0, 0);
    n = DLQ_LIST(s, "g", 0, 8, m);
    TU_CHECK(n == 0, "after drop all: %d", n);
    DLQ_DROP_EXPECT(s, "g", 0, 1, 0);
    n = LEASE_N(s, "g", "t", 8, LEASE, T0, m);
    TU_CHECK(n == 0, "dropped messages came back: %d", n);
    CHECK_STORE(s);
}

/* DLQ REQUEUE/DROP ALL a step at a time (store_dlq_walk_step): each step
 * takes at most its max in id order and commits; what another command does
 * between steps is respected (an entry dropped ahead is not counted); the
 * walk ends at the DLQ's end, and at once when its group was deleted, or
 * deleted and created again (the new group's DLQ is not touched). */
static void test_dlq_walk(void)
{
    store_t *s = OPEN_DEFAULT();
    uint64_t ids[10];
    fill_dlq(s, 10, ids);
    char err[512] = "";
    store_dlq_walk_t walk = { .requeue = 1 };
    REQUIRE_OK(store_dlq_walk_step(s, "g", 1, &walk, 3, T0 + 10, err, sizeof err), err);
    TU_CHECK(walk.count == 3 && !walk.done, "first step: %" PRIu64 " done %d", walk.count, walk.done);
    CHECK_EQ_U64(store_pending_bytes(s), 0);
    CHECK_COUNTS(s, "g", 3, 0, 3, 0, 0, 7);
    CHECK_STORE(s);
    DLQ_DROP_EXPECT(s, "g", ids[5], 0, 1); /* between two steps */
    REQUIRE_OK(store_dlq_walk_step(s, "g", 1, &walk, 3, T0 + 10, err, sizeof err), err);
    TU_CHECK(walk.count == 6 && !walk.done, "second step: %" PRIu64 " done %d", walk.count, walk.done);
    REQUIRE_OK(store_dlq_walk_step(s, "g", 1, &walk, 3, T0 + 10, err, sizeof err), err);
    TU_CHECK(walk.count == 9 && walk.done, "last step: %" PRIu64 " done %d", walk.count, walk.done);
    REQUIRE_OK(store_dlq_walk_step(s, "g", 1, &walk, 3, T0 + 10, err, sizeof err), err);
    CHECK_EQ_U64(walk.count, 9);
    CHECK_COUNTS(s, "g", 9, 0, 9, 0, 0, 0);
    msg_owned_t m[10];
    int n = LEASE_N(s, "g", "t", 10, LEASE, T0 + 20, m);
    TU_REQUIRE(n == 9, "leased %d", n);
    for (int i = 0, k = 0; i < 10; i++) {
        if (i != 5) {
            TU_CHECK(m[k].m.id == ids[i] && m[k].m.reconsume == 0, "requeued #%d: id %" PRIu64, k, m[k].m.id);
            k++;
        }
    }
    free_msgs(m, n);
    CHECK_STORE(s);
    CLOSE(&s);

    /* the group deleted between two steps, then created again */
    s = OPEN_DEFAULT();
    fill_dlq(s, 6, ids);
    store_dlq_walk_t drop = { .requeue = 0 };
    REQUIRE_OK(store_dlq_walk_step(s, "g", 1, &drop, 2, T0 + 10, err, sizeof err), err);
    CHECK_EQ_U64(drop.count, 2);
    int found = 0;
    REQUIRE_OK(store_group_delete(s, "g", 1, &found, err, sizeof err), err);
    TU_REQUIRE(found == 1, "group not found");
    REQUIRE_OK(store_dlq_walk_step(s, "g", 1, &drop, 2, T0 + 10, err, sizeof err), err);
    TU_CHECK(drop.done && drop.count == 2, "after GROUP DEL: %" PRIu64 " done %d", drop.count, drop.done);
    GROUP_CREATE(s, "g", "t", 0, T0); /* the group of that name again, FROM NOW: its DLQ is past the walk's place */
    fill_dlq(s, 3, ids);
    drop.done = 0; /* as if the delete had come between its steps */
    REQUIRE_OK(store_dlq_walk_step(s, "g", 1, &drop, 2, T0 + 10, err, sizeof err), err);
    TU_CHECK(drop.done && drop.count == 2, "after the group was created again: %" PRIu64 " done %d", drop.count,
             drop.done);
    CHECK_COUNTS(s, "g", 0, 0, 0, 0, 0, 3);
    store_dlq_walk_t all = { .requeue = 0 };
    REQUIRE_OK(store_dlq_walk_step(s, "g", 1, &all, 2, T0 + 10, err, sizeof err), err);
    REQUIRE_OK(store_dlq_walk_step(s, "g", 1, &all, 2, T0 + 10, err, sizeof err), err);
    TU_CHECK(all.done && all.count == 3, "the new group's walk: %" PRIu64 " done %d", all.count, all.done);
    CHECK_COUNTS(s, "g", 0, 0, 0, 0, 0, 0);
    CHECK_STORE(s);
}

/* n LEVEL 1 SENDs to "t" at T0 (ids[] in SEND order), moved to its log at T0 + SEC + 10. */
static void send_level1_and_move(store_t *s, uint64_t *ids, int n)
{
    for (int i = 0; i < n; i++)
        ids[i] = SEND(s, "t", "x", 1, 0, T0 + (uint64_t)i, NULL);
    TU_REQUIRE(MOVE(s, T0 + SEC + 10, 100, NULL) == n, "the %d SENDs moved", n);
}

/* The lease walk of a topic's log right after a due move: the arrivals sit in
 * held batches (the move and the lease commit unsynced), and the walk reads
 * them there — no sync of the log, no apply (store_read_barriers stays).
 * The leases' own writes and the group's cursor are seen by the ACK and by
 * the next round's walk the same way, and the GC walks the log without the
 * barrier too. */
static void test_lease_walk_held_arrivals(void)
{
    store_t *s = OPEN_DEFAULT();
    GROUP_CREATE(s, "g", "t", 1, T0);
    uint64_t ids[5];
    send_level1_and_move(s, ids, 3);
    uint64_t barriers = store_read_barriers(s);
    msg_owned_t m[8];
    int n = LEASE_N(s, "g", "t", 8, LEASE, T0 + SEC + 10, m);
    TU_REQUIRE(n == 3, "the 3 arrivals leased before they are applied: leased %d", n);
    for (int i = 0; i < n; i++)
        CHECK_EQ_U64(m[i].m.id, ids[i]);
    free_msgs(m, n);
    CHECK_EQ_U64(store_read_barriers(s), barriers);
    TU_CHECK(ACK(s, "g", ids, 3) == 3, "the held leases are found by the ACK");
    for (int i = 3; i < 5; i++)
        ids[i] = SEND(s, "t", "y", 1, 0, T0 + SEC + 20, NULL);
    TU_REQUIRE(MOVE(s, T0 + 2 * SEC + 30, 100, NULL) == 2, "the next round moved");
    n = LEASE_N(s, "g", "t", 8, LEASE, T0 + 2 * SEC + 30, m);
    TU_REQUIRE(n == 2, "the next round's walk starts at the held cursor: leased %d", n);
    CHECK_EQ_U64(m[0].m.id, ids[3]);
    CHECK_EQ_U64(m[1].m.id, ids[4]);
    free_msgs(m, n);
    char err[512] = "";
    int work = 0;
    TU_REQUIRE(store_collect(s, T0 + 2 * SEC + 30, 0, 100, &work, err, sizeof err) == 0, "store_collect: %s", err);
    CHECK_EQ_U64(work, 5);
    CHECK_EQ_U64(store_read_barriers(s), barriers);
    CHECK_COUNTS(s, "g", 0, 0, 0, 0, 2, 0);
    CHECK_STORE(s);
}

/* REVOKEs of arrivals in the topic log delete their entries in a batch that
 * is still held when the group's next walk runs: one arrival applied to
 * LevelDB before (by the check's barrier), one still held itself. The walk leaves
 * both out — the overlay says deleted — without the barrier. */
static void test_lease_walk_held_revoke(void)
{
    store_t *s = OPEN_DEFAULT();
    GROUP_CREATE(s, "g", "t", 1, T0);
    uint64_t ids[4];
    send_level1_and_move(s, ids, 2);
    CHECK_STORE(s); /* the check passes the barrier: these two are applied to LevelDB */
    char err[512] = "";
    for (int i = 2; i < 4; i++)
        ids[i] = SEND(s, "t", "y", 1, 0, T0 + SEC + 20, NULL);
    TU_REQUIRE(MOVE(s, T0 + 2 * SEC + 30, 100, NULL) == 2, "the next round moved");
    store_revoke_result_t r;
    TU_REQUIRE(store_revoke_id(s, ids[0], &r, err, sizeof err) == 0, "store_revoke_id: %s", err);
    CHECK_EQ_U64(r.from_ready, 1);
    TU_REQUIRE(store_revoke_id(s, ids[3], &r, err, sizeof err) == 0, "store_revoke_id: %s", err);
    CHECK_EQ_U64(r.from_ready, 1);
    uint64_t barriers = store_read_barriers(s);
    msg_owned_t m[4];
    int n = LEASE_N(s, "g", "t", 4, LEASE, T0 + 2 * SEC + 30, m);
    TU_REQUIRE(n == 2, "leased %d, not the revoked ones", n);
    CHECK_EQ_U64(m[0].m.id, ids[1]);
    CHECK_EQ_U64(m[1].m.id, ids[2]);
    free_msgs(m, n);
    CHECK_EQ_U64(store_read_barriers(s), barriers);
    CHECK_STORE(s);
}

/* A group behind: its walk reads the entries LevelDB holds (applied by the
 * check's barrier) and then, in seq order, the arrivals still held — without
 * the barrier — and a second group reads the same. */
static void test_lease_walk_applied_then_held(void)
{
    store_t *s = OPEN_DEFAULT();
    GROUP_CREATE(s, "g", "t", 1, T0);
    GROUP_CREATE(s, "h", "t", 1, T0);
    uint64_t ids[5];
    send_level1_and_move(s, ids, 3);
    CHECK_STORE(s); /* the check passes the barrier: these three are applied to LevelDB */
    for (int i = 3; i < 5; i++)
        ids[i] = SEND(s, "t", "y", 1, 0, T0 + SEC + 20, NULL);
    TU_REQUIRE(MOVE(s, T0 + 2 * SEC + 30, 100, NULL) == 2, "the next round moved");
    uint64_t barriers = store_read_barriers(s);
    const char *groups[] = { "g", "h" };
    for (int g = 0; g < 2; g++) {
        msg_owned_t m[8];
        int n = LEASE_N(s, groups[g], "t", 8, LEASE, T0 + 2 * SEC + 30, m);
        TU_REQUIRE(n == 5, "group %s leased %d of 5", groups[g], n);
        for (int i = 0; i < n; i++)
            CHECK_EQ_U64(m[i].m.id, ids[i]);
        free_msgs(m, n);
    }
    CHECK_EQ_U64(store_read_barriers(s), barriers);
    CHECK_STORE(s);
}

/* ---- suite leases, continued: leases written late (store_options_t.lease_write_delay_ms) ---- */

/* The payload of m as a small number ("0".."9"). */
static int payload_digit(const msg_owned_t *m)
{
    return m->m.payload.len == 1 ? m->m.payload.ptr[0] - '0' : -1;
}

/* Six leased, the first acknowledged in order and the third out of order. */
static int lease_six_ack_two(store_t *c, char *err, size_t errlen)
{
    msg_owned_t m[6];
    int n = 0, released = 0;
    if (store_lease(c, "g", 1, "t", 1, 6, LEASE, T0, m, &n, err, errlen) != 0 || n != 6)
        return -1;
    uint64_t first = m[0].m.id, third = m[2].m.id;
    free_msgs(m, n);
    return store_ack(c, "g", 1, &first, 1, &released, err, errlen) != 0 || released != 1 ||
                   store_ack(c, "g", 1, &third, 1, &released, err, errlen) != 0 || released != 1
               ? -1
               : 0;
}

/* A store of the delay (open_write_late) with group g on topic t and n <= 10
 * messages "0", "1"..., whose ids go to ids[] (when not NULL). */
static store_t *open_late_with_digits(int n, uint64_t *ids)
{
    store_t *s = open_write_late();
    GROUP_CREATE(s, "g", "t", 1, T0);
    for (int i = 0; i < n; i++) {
        char p[2] = { (char)('0' + i), '\0' };
        uint64_t id = SEND(s, "t", p, 0, 0, T0, NULL);
        if (ids != NULL)
            ids[i] = id;
    }
    return s;
}

/* n messages "0", "1"... sent (open_late_with_digits), then work run in a
 * process that is killed (crash_after_at): the store reopened, checked. */
static store_t *crashed_with_digits_at(int n, crash_work_fn work, int line)
{
    store_t *s = open_late_with_digits(n, NULL);
    CLOSE(&s);
    crash_after_at(work, line);
    s = open_write_late();
    check_store_at(s, line);
    return s;
}
#define CRASHED_WITH_DIGITS(n, work) crashed_with_digits_at((n), (work), __LINE__)

/* A process that leased six messages with the delay, acknowledged the first
 * in order and the third out of order, committed and was killed (SIGKILL):
 * the first and third never come again, the second (written by the
 * out-of-order ACK, which must pass it) is still leased, and the last three
 * are delivered again at once, in order, by the next PULL. */
static void test_lease_late_crash(void)
{
    store_t *s = CRASHED_WITH_DIGITS(6, lease_six_ack_two);
    CHECK_COUNTS(s, "g", 3, 3, 0, 0, 1, 0); /* 3 back in the backlog, the second still leased */
    msg_owned_t m[8];
    int n = LEASE_N(s, "g", "t", 8, LEASE, T0 + 1, m);
    TU_CHECK(n == 3 && payload_digit(&m[0]) == 3 && payload_digit(&m[1]) == 4 && payload_digit(&m[2]) == 5,
             "delivered again: %d messages, first %d", n, n > 0 ? payload_digit(&m[0]) : -1);
    ACK_LEASED(s, "g", m, n);
    CHECK_COUNTS(s, "g", 0, 0, 0, 0, 1, 0);
    CHECK_STORE(s);
    CLOSE(&s);
}

/* Leases held in memory reuse the records of those released before
 * (lease_pend.c's spares, not an allocation each): ten messages leased
 * held five at a time, each batch ACKed (the second out of order) before
 * the next is taken, every one delivered once, in order, and the store
 * whole after. */
static void test_lease_late_reuses_records(void)
{
    store_t *s = open_late_with_digits(10, NULL);
    for (int batch = 0; batch < 2; batch++) {
        msg_owned_t m[5];
        int n = LEASE_N(s, "g", "t", 5, LEASE, T0, m);
        int in_order = n == 5;
        for (int i = 0; i < n; i++)
            in_order &= payload_digit(&m[i]) == batch * 5 + i;
        TU_CHECK(in_order, "batch %d: %d messages, first %d", batch, n, n > 0 ? payload_digit(&m[0]) : -1);
        TU_CHECK(store_leases_unwritten(s) == (uint64_t)n, "batch %d: %" PRIu64 " leases held", batch,
                 store_leases_unwritten(s));
        if (batch == 1 && n == 5) { /* out of order: the last first */
            msg_owned_t last = m[4];
            memmove(&m[1], &m[0], 4 * sizeof *m);
            m[0] = last;
        }
        ACK_LEASED(s, "g", m, n);
        TU_CHECK(s->npend_spare == 5 && store_leases_unwritten(s) == 0,
                 "batch %d ACKed: %zu spare records, %" PRIu64 " held", batch, s->npend_spare,
                 store_leases_unwritten(s));
    }
    CHECK_COUNTS(s, "g", 0, 0, 0, 0, 0, 0);
    CHECK_STORE(s);
    CLOSE(&s);
}

/* Leased one by one: "0" held, "1" for less than the delay (written at
 * once), "2" held. */
static int lease_held_short_held(store_t *c, char *err, size_t errlen)
{
    const uint64_t lease_ms[3] = { LEASE, WRITE_DELAY - 1, LEASE };
    for (int i = 0; i < 3; i++) {
        msg_owned_t m[1];
        int n = 0;
        if (store_lease(c, "g", 1, "t", 1, 1, lease_ms[i], T0, m, &n, err, errlen) != 0 || n != 1)
            return -1;
        free_msgs(m, n);
    }
    return 0;
}

/* A NACK writes the held lease it fails and those before it, not the ones
 * after; a TOUCH of a held lease moves its deadline in memory, unless the
 * new deadline comes before its delay is over (then it is written). */
static void test_lease_late_nack_touch(void)
{
    uint64_t id[5];
    store_t *s = open_late_with_digits(5, id);
    msg_owned_t m[5];
    TU_REQUIRE(LEASE_N(s, "g", "t", 5, LEASE, T0, m) == 5, "lease 5");
    free_msgs(m, 5);
    int found = 0;
    char err[512] = "";
    REQUIRE_OK(store_touch(s, "g", 1, id[1], T0 + 2 * LEASE, &found, err, sizeof err), err);
    TU_CHECK(found, "TOUCH did not find a lease held in memory");
    CHECK_EQ_U64(store_leases_unwritten(s), 5);
    FAIL_LEVEL(s, "g", id[2], 1, "again", T0 + 10, NULL);
    CHECK_EQ_U64(store_leases_unwritten(s), 2); /* 0 and 1 written before it; 3 and 4 still held */
    REQUIRE_OK(store_touch(s, "g", 1, id[3], T0 + WRITE_DELAY - 1, &found, err, sizeof err), err);
    TU_CHECK(found, "a short TOUCH did not find a lease held in memory");
    CHECK_EQ_U64(store_leases_unwritten(s), 1);
    CHECK_EQ_U64(store_next_lease_deadline(s), T0 + WRITE_DELAY - 1);
    REQUIRE_OK(store_touch(s, "g", 1, id[4] + 100, T0 + LEASE, &found, err, sizeof err), err);
    TU_CHECK(!found, "TOUCH found a lease of an unknown id");
    CLOSE(&s);
    s = open_write_late();
    CHECK_COUNTS(s, "g", 0, 0, 0, 1, 4, 0);
    store_lease_ref_t refs[8];
    int n = -1;
    REQUIRE_OK(store_expired_leases(s, T0 + LEASE, refs, 8, &n, err, sizeof err), err);
    int saw[5] = { 0 };
    for (int i = 0; i < n; i++)
        for (int k = 0; k < 5; k++)
            saw[k] += refs[i].id == id[k];
    TU_CHECK(n == 3 && saw[0] == 1 && saw[3] == 1 && saw[4] == 1, "expired: %d leases (0: %d, 1: %d, 3: %d, 4: %d)", n,
             saw[0], saw[1], saw[3], saw[4]);
    CHECK_STORE(s);
    CLOSE(&s);
}

/* Leases held by several groups are written in the order taken, whatever
 * the group: the next one to write is the store's next lease deadline, and
 * a GROUP DEL takes its group's out of that order. */
static void test_lease_late_groups(void)
{
    store_t *s = open_late_with_digits(4, NULL);
    GROUP_CREATE(s, "h", "t", 1, T0);
    msg_owned_t m[1];
    const struct {
        const char *group;
        uint64_t at;
    } take[] = { { "g", T0 }, { "h", T0 + 10 }, { "g", T0 + 20 }, { "h", T0 + 30 } };
    for (size_t i = 0; i < sizeof take / sizeof take[0]; i++) {
        TU_REQUIRE(LEASE_N(s, take[i].group, "t", 1, LEASE, take[i].at, m) == 1, "lease %zu", i);
        free_msgs(m, 1);
    }
    CHECK_EQ_U64(store_leases_unwritten(s), 4);
    CHECK_EQ_U64(store_next_lease_deadline(s), T0 + WRITE_DELAY);
    store_lease_ref_t refs[4];
    int n = -1, found = 0;
    char err[512] = "";
    REQUIRE_OK(store_expired_leases(s, T0 + WRITE_DELAY + 10, refs, 4, &n, err, sizeof err), err);
    CHECK_EQ_U64(n, 0);
    CHECK_EQ_U64(store_leases_unwritten(s), 2); /* g's first and h's first */
    CHECK_EQ_U64(store_next_lease_deadline(s), T0 + 20 + WRITE_DELAY);
    REQUIRE_OK(store_group_delete(s, "g", 1, &found, err, sizeof err), err);
    CHECK_EQ_U64(store_leases_unwritten(s), 1);
    DRAIN_DELETES(s); /* g's first, written, goes */
    CHECK_EQ_U64(store_next_lease_deadline(s), T0 + 30 + WRITE_DELAY);
    REQUIRE_OK(store_expired_leases(s, T0 + 30 + WRITE_DELAY, refs, 4, &n, err, sizeof err), err);
    CHECK_EQ_U64(store_leases_unwritten(s), 0);
    CHECK_EQ_U64(store_next_lease_deadline(s), T0 + 10 + LEASE); /* h's first, written */
    CHECK_COUNTS(s, "h", 2, 2, 0, 0, 2, 0);
    CHECK_STORE(s);
    CLOSE(&s);
}

/* A lease written at once behind one held in memory (it would expire before
 * its delay is over) writes the held one first: after a crash the held
 * third comes again, the short one only as a lease, never also from the
 * backlog, and every counter agrees with the store. */
static void test_lease_late_short_behind_held(void)
{
    store_t *s = CRASHED_WITH_DIGITS(4, lease_held_short_held);
    CHECK_COUNTS(s, "g", 2, 2, 0, 0, 2, 0); /* "2" and "3" ready; "0" and "1" leased */
    msg_owned_t m[8];
    int n = LEASE_N(s, "g", "t", 8, LEASE, T0 + 1, m);
    TU_CHECK(n == 2 && payload_digit(&m[0]) == 2 && payload_digit(&m[1]) == 3, "delivered again: %d messages, first %d",
             n, n > 0 ? payload_digit(&m[0]) : -1);
    free_msgs(m, n);
    CLOSE(&s);
}

/* A lease held in memory is written when its delay is over (the scheduler's
 * store_expired_leases; store_next_lease_deadline names that time), by a
 * clean close, before a NACK, a short TOUCH or a GET reads it, and never when the
 * lease would expire first. Until written, the topic-log GC keeps the entry
 * it names; GROUP DEL just forgets it. store_check holds at every step. */
static void test_lease_late_written(void)
{
    uint64_t id[5];
    store_t *s = open_late_with_digits(5, id);
    msg_owned_t m[5];
    TU_REQUIRE(LEASE_N(s, "g", "t", 1, LEASE, T0, m) == 1, "lease 0");
    free_msgs(m, 1);
    CHECK_EQ_U64(store_next_lease_deadline(s), T0 + WRITE_DELAY);
    TU_CHECK(MAINTAIN(s, T0 + WRITE_DELAY - 1, 100) == 0, "the GC took the entry of a lease not written");
    store_lease_ref_t refs[4];
    int n = -1;
    char err[512] = "";
    REQUIRE_OK(store_expired_leases(s, T0 + WRITE_DELAY, refs, 4, &n, err, sizeof err), err);
    CHECK_EQ_U64(n, 0);
    CHECK_EQ_U64(store_next_lease_deadline(s), T0 + LEASE); /* written: its deadline is next */
    TU_CHECK(MAINTAIN(s, T0 + WRITE_DELAY, 100) == 1, "the entry of a written lease is not collected");
    /* NACK, TOUCH, GET of a lease not written yet */
    TU_REQUIRE(LEASE_N(s, "g", "t", 3, LEASE, T0 + 1000, m) == 3, "lease 1..3");
    free_msgs(m, 3);
    FAIL_LEVEL(s, "g", id[1], 1, "again", T0 + 1000, NULL);
    int found = 0;
    REQUIRE_OK(store_touch(s, "g", 1, id[2], T0 + 2 * LEASE, &found, err, sizeof err), err);
    TU_CHECK(found, "TOUCH did not find a lease held in memory");
    store_msg_state_t gs;
    TU_CHECK(state_of(s, id[3], "g", &gs) == STORE_MSG_LEASED && gs == STORE_MSG_LEASED, "GET: not leased");
    CHECK_COUNTS(s, "g", 1, 1, 0, 1, 3, 0);
    CHECK_STORE(s);
    /* a lease shorter than the delay is written at once */
    TU_REQUIRE(LEASE_N(s, "g", "t", 1, WRITE_DELAY - 1, T0 + 2000, m) == 1, "lease 4");
    free_msgs(m, 1);
    CHECK_EQ_U64(store_next_lease_deadline(s), T0 + 2000 + WRITE_DELAY - 1);
    /* a clean close writes what is held */
    GROUP_CREATE(s, "h", "t", 1, T0 + 2000);
    TU_REQUIRE(LEASE_N(s, "h", "t", 2, LEASE, T0 + 2000, m) == 2, "h leases 2");
    free_msgs(m, 2);
    CLOSE(&s);
    s = open_write_late();
    CHECK_COUNTS(s, "h", 2, 2, 0, 0, 2, 0);
    CHECK_STORE(s);
    /* GROUP DEL forgets them, and the GC may then take their entries */
    TU_REQUIRE(LEASE_N(s, "h", "t", 2, LEASE, T0 + 3000, m) == 2, "h leases 2 more");
    free_msgs(m, 2);
    REQUIRE_OK(store_group_delete(s, "h", 1, &found, err, sizeof err), err);
    CHECK_STORE(s);
    CLOSE(&s);
}

/* GET, FIND and REVOKE see a lease held in memory as a lease, and write
 * nothing: neither it nor the other held leases (before, every one of them
 * read the store as a whole and wrote every held lease first). */
static void test_lease_late_lookups(void)
{
    store_t *s = open_write_late();
    GROUP_CREATE(s, "g", "t", 1, T0);
    uint64_t id[3];
    for (int i = 0; i < 3; i++)
        id[i] = send_key(s, "t", "k", 0, T0);
    msg_owned_t m[2];
    TU_REQUIRE(LEASE_N(s, "g", "t", 2, LEASE, T0, m) == 2, "lease 2 of 3");
    free_msgs(m, 2);
    CHECK_EQ_U64(store_leases_unwritten(s), 2);
    char err[512] = "";
    store_msg_view_t v;
    REQUIRE_OK(store_msg_get(s, id[0], 1, &v, err, sizeof err), err);
    TU_CHECK(v.state == STORE_MSG_LEASED && v.ncopies == 1 && v.copies[0].state == STORE_MSG_LEASED &&
                 v.copies[0].deadline_ms == T0 + LEASE && v.msg.m.payload.len == 1,
             "GET of a held lease: state %d, %d copies, deadline %" PRIu64, (int)v.state, v.ncopies,
             v.ncopies ? v.copies[0].deadline_ms : 0);
    store_msg_view_free(&v);
    CHECK_EQ_U64(store_leases_unwritten(s), 2);
    store_msg_view_t *views = NULL;
    int n = 0;
    REQUIRE_OK(store_msg_find(s, "t", 1, "k", 1, 100, &views, &n, err, sizeof err), err);
    TU_CHECK(n == 3 && views[0].state == STORE_MSG_LEASED && views[1].state == STORE_MSG_LEASED &&
                 views[2].state == STORE_MSG_READY,
             "FIND: %d views, states %d %d %d", n, n > 0 ? (int)views[0].state : -1, n > 1 ? (int)views[1].state : -1,
             n > 2 ? (int)views[2].state : -1);
    for (int i = 0; i < n; i++)
        store_msg_view_free(&views[i]);
    free(views);
    CHECK_EQ_U64(store_leases_unwritten(s), 2);
    store_revoke_result_t r;
    REQUIRE_OK(store_revoke_id(s, id[1], &r, err, sizeof err), err);
    TU_CHECK(r.revoked == 0 && r.nrefused == 1 && strstr(r.refused[0].reason, "group g (leased)") != NULL,
             "REVOKE of a held lease: revoked %" PRIu64 ", reason '%s'", r.revoked,
             r.nrefused ? r.refused[0].reason : "");
    REQUIRE_OK(store_revoke_key(s, "t", 1, "k", 1, &r, err, sizeof err), err);
    TU_CHECK(r.revoked == 1 && r.from_ready == 1 && r.nrefused == 2, "REVOKE KEY: revoked %" PRIu64 ", refused %d",
             r.revoked, r.nrefused);
    CHECK_EQ_U64(store_leases_unwritten(s), 2);
    CHECK_COUNTS(s, "g", 0, 0, 0, 0, 2, 0);
    CHECK_EQ_U64(ACK(s, "g", id, 2), 2);
    store_msg_state_t gs;
    TU_CHECK(state_of(s, id[0], "g", &gs) == STORE_MSG_GONE, "acknowledged and collected: gone");
    CHECK_STORE(s);
    CLOSE(&s);
}

#define BOUND_PAST 10 /* leased past STORE_LEASES_UNWRITTEN_MAX */

/* Leased STORE_LEASES_UNWRITTEN_MAX + BOUND_PAST, 1000 per call; then as
 * many are held as may be. */
static int lease_past_bound(store_t *c, char *err, size_t errlen)
{
    const int n = STORE_LEASES_UNWRITTEN_MAX + BOUND_PAST;
    msg_owned_t *m = malloc(sizeof *m * 1000);
    if (m == NULL)
        return err_set(err, errlen, "out of memory");
    int rc = 0;
    for (int got = 0; got < n && rc == 0;) {
        int k = 0;
        rc = store_lease(c, "g", 1, "t", 1, n - got < 1000 ? n - got : 1000, LEASE, T0, m, &k, err, errlen);
        if (rc == 0 && k == 0)
            rc = err_set(err, errlen, "leased %d of %d", got, n);
        free_msgs(m, k);
        got += k;
    }
    free(m);
    if (rc == 0 && store_leases_unwritten(c) != STORE_LEASES_UNWRITTEN_MAX)
        rc = err_set(err, errlen, "%llu held", (unsigned long long)store_leases_unwritten(c));
    return rc;
}

/* A group holds at most STORE_LEASES_UNWRITTEN_MAX leases in memory; past
 * that its oldest is written first. A crash then loses the newest ones,
 * which come again, and the oldest stay leased; a clean close writes what
 * is held. */
static void test_lease_late_bound(void)
{
    store_t *s = open_write_late();
    GROUP_CREATE(s, "g", "t", 1, T0);
    const int n = STORE_LEASES_UNWRITTEN_MAX + BOUND_PAST;
    for (int i = 0; i < n; i++)
        SEND(s, "t", "x", 0, 0, T0, NULL);
    CLOSE(&s);
    CRASH_AFTER(lease_past_bound);
    s = open_write_late();
    CHECK_STORE(s);
    CHECK_COUNTS(s, "g", STORE_LEASES_UNWRITTEN_MAX, STORE_LEASES_UNWRITTEN_MAX, 0, 0, BOUND_PAST, 0);
    char err[512] = "";
    int k = 0;
    msg_owned_t *m = malloc(sizeof *m * 1000);
    TU_REQUIRE(m != NULL, "out of memory");
    for (int got = 0; got < STORE_LEASES_UNWRITTEN_MAX; got += k) {
        REQUIRE_OK(store_lease(s, "g", 1, "t", 1, 1000, LEASE, T0 + 1, m, &k, err, sizeof err), err);
        TU_REQUIRE(k > 0, "leased %d again", got);
        free_msgs(m, k);
    }
    free(m);
    CHECK_EQ_U64(store_leases_unwritten(s), STORE_LEASES_UNWRITTEN_MAX);
    CLOSE(&s);
    s = open_write_late();
    CHECK_COUNTS(s, "g", 0, 0, 0, 0, (uint64_t)n, 0);
    CHECK_STORE(s);
    CLOSE(&s);
}

/* The seq of message id in range (STORE_TOPIC: the topic log, STORE_RETRY:
 * a retry queue; committed data), 0 when it is not there. */
typedef struct seq_of {
    store_range_t range;
    uint64_t id, seq;
} seq_of_t;

static int find_seq(void *ctx, const store_entry_t *e)
{
    seq_of_t *f = ctx;
    if (e->range == f->range && e->m->id == f->id) {
        f->seq = e->seq;
        return 1;
    }
    return 0;
}

/* The seq of message id (called name in messages) in queue range of s
 * ('T': topic t's log, 'R': group g's retry queue), found by a store scan.
 * Requires the scan to succeed and the message to be there ("<name> is not
 * in <where>"), failing the test at line. */
static uint64_t seq_of_at(store_t *s, store_range_t range, uint64_t id, const char *name, const char *where, int line)
{
    seq_of_t f = { range, id, 0 };
    char err[1024] = "";
    TU_REQUIRE_AT(store_scan(s, find_seq, &f, err, sizeof err) >= 0, line, "store_scan for %s failed: %s", name, err);
    TU_REQUIRE_AT(f.seq != 0, line, "%s is not in %s", name, where);
    return f.seq;
}
#define SEQ_OF(s, range, id, name, where) seq_of_at((s), (range), (id), (name), (where), __LINE__)

/* Two retries of group g: a and b sent to topic t at T0, both leased by g
 * (required: 2), both failed to level 1, and moved into g's retry queue at
 * T0 + 1 s (required: 2 moved). The failing check names line. */
static void two_retries_at(store_t *s, uint64_t *a, uint64_t *b, int line)
{
    *a = send_at(s, "t", "a", 0, 0, T0, NULL, line);
    *b = send_at(s, "t", "b", 0, 0, T0, NULL, line);
    msg_owned_t m[8];
    int n = lease_at(s, "g", "t", 2, LEASE, T0, m, line);
    TU_REQUIRE_AT(n == 2, line, "lease a and b: %d", n);
    free_msgs(m, n);
    fail_at(s, "g", *a, 0, 1, 0, "again", T0, 1, NULL, line);
    fail_at(s, "g", *b, 0, 1, 0, "again", T0, 1, NULL, line);
    TU_REQUIRE_AT(move_at(s, T0 + SEC, 10, NULL, line) == 2, line, "the retries are not ready");
}
#define TWO_RETRIES(s, a, b) two_retries_at((s), (a), (b), __LINE__)

/* Group g of topic t created by a PULL at T0 that must lease nothing. */
static void create_empty_group_at(store_t *s, const char *group, int line)
{
    msg_owned_t m[1];
    TU_REQUIRE_AT(lease_at(s, group, "t", 1, LEASE, T0, m, line) == 0, line, "%s is created with nothing to lease",
                  group);
}
#define CREATE_EMPTY_GROUP(s, g) create_empty_group_at((s), (g), __LINE__)

/* The end of a case: g ACKs the n ids (each must be released: says names
 * what failed otherwise), the store checks clean and is closed. */
static void ack_all_check_close_at(store_t **sp, const uint64_t *ids, int n, const char *says, int line)
{
    TU_CHECK_AT(ack_at(*sp, "g", ids, n, line) == n, line, "%s", says);
    check_store_at(*sp, line);
    close_at(sp, line);
}
#define ACK_ALL_CHECK_CLOSE(sp, ids, n, says) ack_all_check_close_at((sp), (ids), (n), (says), __LINE__)

/* The key of seq in queue range ('T': topic t's log, 'R': group g's retry
 * queue) into k: its length. */
static size_t queue_key(char k[11], store_range_t range, uint64_t seq)
{
    k[0] = (char)range;
    k[1] = range == STORE_TOPIC ? 't' : 'g';
    k[2] = '\0';
    be64_to(k + 3, seq);
    return 11;
}

/* A PULL that meets damage after it took messages (two retries, then a
 * topic-log entry, then a damaged one) hands out what it took: before, it
 * returned -1 with those leases in the pending batch, so the next commit wrote
 * leases nobody got (redelivered only when they expired) with the cursor not
 * moved past them. The next PULL meets the damage at the topic log's head:
 * it takes nothing there and skips the log (0 messages, the store usable,
 * one finding reported: before, it failed, and so did every PULL of the
 * group), the group's retries are served meanwhile, the log is tried again
 * 60 s later; with the entry put back the store checks clean and the rest
 * is leased once. */
static void test_lease_damage_after_taken(void)
{
    store_t *s = OPEN_DEFAULT();
    uint64_t a, b;
    TWO_RETRIES(s, &a, &b);
    msg_owned_t m[8];
    int n;
    uint64_t c = SEND(s, "t", "c", 0, 0, T0 + SEC, NULL);
    uint64_t d = SEND(s, "t", "d", 0, 0, T0 + SEC, NULL);
    uint64_t e = SEND(s, "t", "e", 0, 0, T0 + SEC, NULL);
    CHECK_COUNTS(s, "g", 5, 3, 2, 0, 0, 0);
    uint64_t seq = SEQ_OF(s, STORE_TOPIC, d, "d", "the topic log");
    char err[1024] = "";
    CLOSE(&s);

    RECORD_FLIP(d); /* its record in the commit log fails its CRC (design-commitlog.md 4b: no 'T' copy) */

    s = OPEN_DEFAULT();
    n = -1;
    int rc = store_lease(s, "g", 1, "t", 1, 8, LEASE, T0 + 2 * SEC, m, &n, err, sizeof err);
    TU_CHECK(rc == 0 && n == 3, "a PULL that met damage after 3 messages: rc %d, n %d \"%s\"", rc, n, err);
    uint64_t got[3];
    for (int i = 0; i < n && i < 3; i++) {
        got[i] = m[i].m.id;
    }
    TU_CHECK(n == 3 && got[0] == a && got[1] == b && got[2] == c, "the messages handed out are not a, b, c");
    free_msgs(m, rc == 0 ? n : 0);
    TU_CHECK(!store_broken(s), "the store broke");
    err[0] = '\0';
    n = -1;
    rc = store_lease(s, "g", 1, "t", 1, 8, LEASE, T0 + 2 * SEC, m, &n, err, sizeof err);
    TU_CHECK(rc == 0 && n == 0, "the PULL at the damage: rc %d, n %d \"%s\"", rc, n, err);
    TU_CHECK(!store_broken(s), "a PULL that failed before it took anything broke the store");
    const char *last = store_group_damage_last(s);
    char at_seq[96];
    snprintf(at_seq, sizeof at_seq, "group g: its topic log t fails at seq %" PRIu64 ",", seq);
    TU_CHECK(store_group_damage_events(s) == 1 && store_group_queues_damaged(s) == 1 && strstr(last, at_seq) != NULL &&
                 strstr(last, "the commit-log record of") != NULL,
             "the damaged topic-log head: %" PRIu64 " findings, %" PRIu64 " queues damaged, \"%s\" (want \"%s\")",
             store_group_damage_events(s), store_group_queues_damaged(s), last, at_seq);
    /* The group's retries are served meanwhile: a's lease failed, its retry is leased. */
    FAIL_LEVEL(s, "g", a, 1, "again", T0 + 2 * SEC, NULL);
    TU_REQUIRE(MOVE(s, T0 + 3 * SEC, 10, NULL) == 1, "a's retry is not ready");
    n = LEASE_N(s, "g", "t", 8, LEASE, T0 + 3 * SEC, m);
    TU_CHECK(n == 1 && m[0].m.id == a, "beside the damaged topic log: %d leased, not a's retry", n);
    free_msgs(m, n);
    /* Tried again 60 s after it failed, damaged still: the same finding. */
    n = -1;
    rc = store_lease(s, "g", 1, "t", 1, 8, LEASE, T0 + 2 * SEC + store_options(s)->damage_retry_ms, m, &n, err,
                     sizeof err);
    TU_CHECK(rc == 0 && n == 0 && store_group_damage_events(s) == 1 && store_group_queues_damaged(s) == 1,
             "the retry of the damaged topic log: rc %d, n %d, %" PRIu64 " findings, %" PRIu64 " damaged", rc, n,
             store_group_damage_events(s), store_group_queues_damaged(s));
    COMMIT(s);
    CLOSE(&s);

    RECORD_FLIP(d); /* repaired */
    s = OPEN_DEFAULT();
    CHECK_STORE(s);
    CHECK_COUNTS(s, "g", 2, 2, 0, 0, 3, 0);
    n = LEASE_N(s, "g", "t", 8, LEASE, T0 + 3 * SEC, m);
    TU_CHECK(n == 2 && m[0].m.id == d && m[1].m.id == e, "after the repair: %d leased, not d and e", n);
    free_msgs(m, n);
    uint64_t taken[] = { a, b, c };
    ACK_ALL_CHECK_CLOSE(&s, taken, 3, "the leases of a, b, c handed out are not held");
}

/* An ACK whose release fails after the lease's delete is in the batch (the
 * message index record, read to drop it with its last copy, is damaged)
 * breaks the store, so that half is never written: before, the ACK returned
 * -1 (not released) with the store usable, and the close wrote the lease and
 * its copy index entry deleted, so the lease was gone after all. With the
 * record put back, the lease is there and ACKed. */
static void test_ack_half_way_breaks_store(void)
{
    store_t *s = OPEN_DEFAULT();
    uint64_t a = SEND(s, "t", "a", 0, 0, T0, NULL);
    msg_owned_t m[4];
    int n = LEASE_N(s, "g", "t", 1, LEASE, T0, m);
    free_msgs(m, n);
    FAIL_LEVEL(s, "g", a, 1, "again", T0, NULL);
    TU_REQUIRE(MOVE(s, T0 + SEC, 10, NULL) == 1, "the retry is not ready");
    n = LEASE_N(s, "g", "t", 1, LEASE, T0 + SEC, m); /* from the retry queue: no topic-log entry keeps it */
    TU_REQUIRE(n == 1 && m[0].m.id == a, "the retry is not leased");
    free_msgs(m, n);
    COMMIT(s);
    CLOSE(&s);

    char key[9];
    key[0] = 'X';
    be64_to(key + 1, a);
    size_t vlen = 0;
    char *good = RAW_REPLACE_OR_ADD(key, sizeof key, "?", 1, &vlen); /* a has none: it is in its topic CQ */

    s = OPEN_DEFAULT();
    int released = -1;
    char err[1024] = "";
    int rc = store_ack(s, "g", 1, &a, 1, &released, err, sizeof err);
    TU_CHECK(rc == -1 && strstr(err, "lease release failed half-way") != NULL &&
                 strstr(err, "corrupt message index record") != NULL,
             "ACK over a damaged message index record: rc %d \"%s\"", rc, err);
    TU_CHECK(store_broken(s), "the ACK failed half-way but the store is usable: its half would be written");
    CLOSE_BROKEN(&s, "failed half-way");

    raw_put(key, sizeof key, good, vlen, __LINE__);
    leveldb_free(good);
    s = OPEN_DEFAULT();
    CHECK_STORE(s);
    CHECK_COUNTS(s, "g", 0, 0, 0, 0, 1, 0);
    TU_CHECK(ACK(s, "g", &a, 1) == 1, "the lease is not there after the repair");
    CHECK_STORE(s);
    CLOSE(&s);
}

/* A DLQ walk that meets damage after it moved entries: the requeue commits
 * and counts the moves before it (before, they stayed in the pending batch,
 * written by the next command's commit while the count said 0); a drop whose
 * index update fails after its first write breaks the store ("DLQ drop failed
 * half-way"), so nothing of it is written. */
static void test_dlq_walk_damage(void)
{
    store_t *s = OPEN_DEFAULT();
    uint64_t ids[3];
    fill_dlq(s, 3, ids);
    COMMIT(s);
    CLOSE(&s);
    char dk[11] = { 'D', 'g', '\0' };
    be64_to(dk + 3, ids[1]);
    size_t vlen = 0;
    char *good = RAW_REPLACE(dk, sizeof dk, "damaged", 7, &vlen);
    s = OPEN_DEFAULT();
    char err[1024] = "";
    store_dlq_walk_t walk = { .requeue = 1 };
    int rc = store_dlq_walk_step(s, "g", 1, &walk, 10, T0 + 10, err, sizeof err);
    TU_CHECK(rc == -1 && walk.count == 1 && strstr(err, "the DLQ") != NULL,
             "requeue over a damaged DLQ entry: rc %d, count %" PRIu64 " \"%s\"", rc, walk.count, err);
    TU_CHECK(!store_broken(s) && store_pending_bytes(s) == 0, "the requeue before the damage is not committed");
    CLOSE(&s);
    raw_put(dk, sizeof dk, good, vlen, __LINE__);
    leveldb_free(good);

    char xk[9] = { 'X' };
    be64_to(xk + 1, ids[2]);
    good = RAW_REPLACE_OR_ADD(xk, sizeof xk, "?", 1, &vlen);
    s = OPEN_DEFAULT();
    CHECK_COUNTS(s, "g", 1, 0, 1, 0, 0, 2);
    store_dlq_walk_t drop = { .requeue = 0 };
    err[0] = '\0';
    rc = store_dlq_walk_step(s, "g", 1, &drop, 10, T0 + 10, err, sizeof err);
    TU_CHECK(rc == -1 && drop.count == 0 && strstr(err, "DLQ drop failed half-way") != NULL &&
                 strstr(err, "corrupt message index record") != NULL,
             "drop over a damaged index record: rc %d, count %" PRIu64 " \"%s\"", rc, drop.count, err);
    TU_CHECK(store_broken(s), "the drop failed half-way but the store is usable: its half would be written");
    CLOSE_BROKEN(&s, "failed half-way");
    raw_put(xk, sizeof xk, good, vlen, __LINE__);
    leveldb_free(good);
    s = OPEN_DEFAULT();
    CHECK_STORE(s);
    CHECK_COUNTS(s, "g", 1, 0, 1, 0, 0, 2);
    DLQ_DROP_EXPECT(s, "g", 0, 1, 2);
    CHECK_STORE(s);
    CLOSE(&s);
}

/* A damaged entry at the head of a group's retry queue: the PULL takes
 * nothing from that queue and serves the topic log (before: every PULL of
 * the group failed at it), the queue is skipped for 60 s and reported once,
 * the retry behind the damaged one waits in order; with the entry put back
 * the store checks clean and both retries are leased once, in order. */
static void test_lease_damaged_retry_head(void)
{
    store_t *s = OPEN_DEFAULT();
    uint64_t a, b;
    TWO_RETRIES(s, &a, &b);
    msg_owned_t m[8];
    int n;
    uint64_t c = SEND(s, "t", "c", 0, 0, T0 + SEC, NULL);
    CHECK_COUNTS(s, "g", 3, 1, 2, 0, 0, 0);
    uint64_t seq = SEQ_OF(s, STORE_RETRY, a, "a", "g's retry queue");
    char err[1024] = "";
    CLOSE(&s);

    char key[11];
    size_t klen = queue_key(key, STORE_RETRY, seq);
    size_t vlen = 0;
    char *good = RAW_REPLACE(key, klen, "damaged", 7, &vlen);

    s = OPEN_DEFAULT();
    n = -1;
    int rc = store_lease(s, "g", 1, "t", 1, 8, LEASE, T0 + 2 * SEC, m, &n, err, sizeof err);
    TU_CHECK(rc == 0 && n == 1 && m[0].m.id == c, "a PULL at the damaged retry-queue head: rc %d, n %d \"%s\"", rc, n,
             err);
    free_msgs(m, rc == 0 ? n : 0);
    TU_CHECK(!store_broken(s), "the store broke");
    const char *last = store_group_damage_last(s);
    char at_seq[96];
    snprintf(at_seq, sizeof at_seq, "group g: its retry queue fails at seq %" PRIu64 ", so its 2 ready retries wait",
             seq);
    TU_CHECK(store_group_damage_events(s) == 1 && store_group_queues_damaged(s) == 1 && strstr(last, at_seq) != NULL &&
                 strstr(last, "corrupt message in a retry queue") != NULL,
             "the damaged retry-queue head: %" PRIu64 " findings, %" PRIu64 " queues damaged, \"%s\" (want \"%s\")",
             store_group_damage_events(s), store_group_queues_damaged(s), last, at_seq);
    /* Skipped until 60 s after the failure, then tried again: damaged still, the same finding. */
    for (uint64_t at = T0 + 3 * SEC; at <= T0 + 2 * SEC + store_options(s)->damage_retry_ms; at += 30 * SEC) {
        n = -1;
        rc = store_lease(s, "g", 1, "t", 1, 8, LEASE, at, m, &n, err, sizeof err);
        TU_CHECK(rc == 0 && n == 0, "a PULL %" PRIu64 " ms after the damage: rc %d, n %d \"%s\"", at - T0 - 2 * SEC, rc,
                 n, err);
    }
    TU_CHECK(store_group_damage_events(s) == 1 && store_group_queues_damaged(s) == 1,
             "after its retries: %" PRIu64 " findings, %" PRIu64 " damaged", store_group_damage_events(s),
             store_group_queues_damaged(s));
    CHECK_COUNTS(s, "g", 2, 0, 2, 0, 1, 0);
    COMMIT(s);
    CLOSE(&s);

    raw_put(key, klen, good, vlen, __LINE__);
    leveldb_free(good);
    s = OPEN_DEFAULT();
    CHECK_STORE(s);
    n = LEASE_N(s, "g", "t", 8, LEASE, T0 + 3 * MIN, m);
    TU_CHECK(n == 2 && m[0].m.id == a && m[1].m.id == b, "after the repair: %d leased, not a and b", n);
    free_msgs(m, n);
    uint64_t taken[] = { a, b, c };
    TU_CHECK(ACK(s, "g", taken, 3) == 3, "a, b and c are not each leased once");
    CHECK_COUNTS(s, "g", 0, 0, 0, 0, 0, 0);
    CHECK_STORE(s);
    CLOSE(&s);
}

/* store_take_woken's callback: counts the topics it names, "t" apart. */
typedef struct woken_count {
    int t, other;
} woken_count_t;

static void count_woken(void *ctx, const char *topic, size_t len)
{
    woken_count_t *w = ctx;
    if (len == 1 && topic[0] == 't') {
        w->t++;
    } else {
        w->other++;
    }
}

static woken_count_t take_woken_count(store_t *s)
{
    woken_count_t w = { 0, 0 };
    store_take_woken(s, count_woken, &w);
    return w;
}

/* The end of a skip is passed on once, as topic t woken, when it comes (not
 * before); a queue that passes again is a recovery, named. g's topic log is
 * damaged at its cursor (a); a PULL skips it, the finding naming a's seq
 * (before, it named g's cursor: seq 0 for a group created before a was
 * sent) and the store's damage_retry_ms (2 s here, not the default); a's
 * record is repaired meanwhile (which wakes nothing: nothing ready was
 * added). At the skip's end store_group_damage_wake marks t (a PULL parked on
 * it would try again), once; the PULL then gets a, b and c and the log is
 * served again. */
static void test_lease_damage_skip_end_wakes(void)
{
    store_t *s = OPEN_DEFAULT();
    msg_owned_t m[8];
    CREATE_EMPTY_GROUP(s, "g");
    uint64_t a = SEND(s, "t", "a", 0, 0, T0, NULL);
    uint64_t b = SEND(s, "t", "b", 0, 0, T0, NULL);
    uint64_t c = SEND(s, "t", "c", 0, 0, T0, NULL);
    uint64_t seq = SEQ_OF(s, STORE_TOPIC, a, "a", "the topic log");
    char err[1024] = "";
    CLOSE(&s);
    RECORD_FLIP(a); /* its record in the commit log fails its CRC (design-commitlog.md 4b: no 'T' copy) */

    store_options_t o;
    opts_default(&o);
    o.damage_retry_ms = 2 * SEC;
    s = OPEN(&o);
    TU_CHECK(store_group_damage_next_end(s) == UINT64_MAX, "a skip end before any damage");
    int n = -1;
    int rc = store_lease(s, "g", 1, "t", 1, 8, LEASE, T0 + SEC, m, &n, err, sizeof err);
    TU_REQUIRE(rc == 0 && n == 0 && store_group_queues_damaged(s) == 1,
               "a PULL at the damaged log head: rc %d, n %d, %" PRIu64 " damaged \"%s\"", rc, n,
               store_group_queues_damaged(s), err);
    char said[96];
    snprintf(said, sizeof said, "group g: its topic log t fails at seq %" PRIu64 ",", seq);
    TU_CHECK(strstr(store_group_damage_last(s), said) != NULL &&
                 strstr(store_group_damage_last(s), "tried again every 2s") != NULL,
             "the finding \"%s\" does not say \"%s\" and \"tried again every 2s\"", store_group_damage_last(s), said);
    uint64_t end = T0 + SEC + 2 * SEC;
    TU_CHECK(store_group_damage_next_end(s) == end, "the skip ends at %" PRIu64 ", want %" PRIu64,
             store_group_damage_next_end(s), end);
    RECORD_FLIP(a); /* repaired meanwhile (a REVOKE reads the damaged record to find its slot, and fails) */
    COMMIT(s);
    (void)take_woken_count(s); /* what the open marked */
    store_group_damage_wake(s, end - 1);
    woken_count_t w = take_woken_count(s);
    TU_CHECK(w.t == 0 && w.other == 0, "1 ms before the skip's end: t woken %d times, others %d", w.t, w.other);
    store_group_damage_wake(s, end);
    w = take_woken_count(s);
    TU_CHECK(w.t == 1 && w.other == 0, "at the skip's end: t woken %d times (want 1), others %d", w.t, w.other);
    TU_CHECK(store_group_damage_next_end(s) == UINT64_MAX, "a skip end left after it was passed on: %" PRIu64,
             store_group_damage_next_end(s));
    store_group_damage_wake(s, end + SEC);
    w = take_woken_count(s);
    TU_CHECK(w.t == 0, "the skip's end passed on again (%d)", w.t);
    TU_CHECK(store_group_recoveries(s) == 0 && store_group_recovery_last(s)[0] == '\0',
             "a recovery before the queue passed: %" PRIu64 " \"%s\"", store_group_recoveries(s),
             store_group_recovery_last(s));

    n = LEASE_N(s, "g", "t", 8, LEASE, end, m);
    TU_CHECK(n == 3 && m[0].m.id == a && m[1].m.id == b && m[2].m.id == c, "at the skip's end: %d leased, not a, b, c",
             n);
    free_msgs(m, n);
    TU_CHECK(store_group_queues_damaged(s) == 0 && store_group_recoveries(s) == 1 &&
                 strcmp(store_group_recovery_last(s), "group g: its topic log t is served again") == 0,
             "after the log passed: %" PRIu64 " damaged, %" PRIu64 " recoveries \"%s\"", store_group_queues_damaged(s),
             store_group_recoveries(s), store_group_recovery_last(s));
    uint64_t taken[] = { a, b, c };
    ACK_ALL_CHECK_CLOSE(&s, taken, 3, "a, b and c are not each leased once");
}

/* REVOKE of a damaged record (design-commitlog.md, "REVOKE of a damaged
 * record (s49)"): b, keyed, is damaged at g's cursor (g took a), so a PULL
 * skips g's topic log, naming b's seq and id. A REVOKE of b by id finds its
 * where-slot without the record and revokes it (before, it failed reading the
 * record, and g's log stayed stalled until the directory was restored); g's
 * next PULL, before the skip's end, gets c and d, the log served again; h,
 * which took nothing yet, gets a, c and d. b is gone to GET, FIND and a second
 * REVOKE, its key's index entry dropped (the store checks clean), and after a
 * reopen it is still revoked. REVOKE of a (g is past it) is still refused. */
static void test_lease_damaged_revoked(void)
{
    store_t *s = OPEN_DEFAULT();
    msg_owned_t m[8];
    CREATE_EMPTY_GROUP(s, "g");
    CREATE_EMPTY_GROUP(s, "h");
    uint64_t a = SEND(s, "t", "a", 0, 0, T0, NULL);
    uint64_t b;
    char err[1024] = "";
    REQUIRE_OK(send_raw(s, "t", 1, "kb", 2, "b", 1, 0, 0, T0, &b, NULL, err, sizeof err), err);
    uint64_t c = SEND(s, "t", "c", 0, 0, T0, NULL);
    uint64_t d = SEND(s, "t", "d", 0, 0, T0, NULL);
    TU_REQUIRE(LEASE_N(s, "g", "t", 1, LEASE, T0, m) == 1 && m[0].m.id == a, "g does not take a");
    free_msgs(m, 1);
    uint64_t seq = SEQ_OF(s, STORE_TOPIC, b, "b", "the topic log");
    CLOSE(&s);
    RECORD_FLIP(b); /* its record in the commit log fails its CRC */

    s = OPEN_DEFAULT();
    int n = -1;
    int rc = store_lease(s, "g", 1, "t", 1, 8, LEASE, T0 + SEC, m, &n, err, sizeof err);
    TU_REQUIRE(rc == 0 && n == 0 && store_group_queues_damaged(s) == 1,
               "a PULL at the damaged entry: rc %d, n %d, %" PRIu64 " damaged \"%s\"", rc, n,
               store_group_queues_damaged(s), err);
    char said[96], named[64];
    snprintf(said, sizeof said, "group g: its topic log t fails at seq %" PRIu64 ",", seq);
    snprintf(named, sizeof named, "the commit-log record of %016" PRIx64 ":", b);
    TU_CHECK(strstr(store_group_damage_last(s), said) != NULL && strstr(store_group_damage_last(s), named) != NULL,
             "the finding \"%s\" does not say \"%s\" and \"%s\"", store_group_damage_last(s), said, named);

    store_revoke_result_t r;
    REQUIRE_OK(store_revoke_id(s, a, &r, err, sizeof err), err);
    TU_CHECK(r.revoked == 0 && r.nrefused == 1 && strstr(r.refused[0].reason, "already delivered to group g") != NULL,
             "REVOKE of a, taken by g: revoked %" PRIu64 ", refused \"%s\"", r.revoked,
             r.nrefused ? r.refused[0].reason : "");
    rc = store_revoke_id(s, b, &r, err, sizeof err);
    TU_REQUIRE(rc == 0 && r.revoked == 1 && r.from_ready == 1 && r.nrefused == 0,
               "REVOKE of the damaged b: rc %d, revoked %" PRIu64 ", ready %" PRIu64 " \"%s\"", rc, r.revoked,
               r.from_ready, rc == 0 ? "" : err);
    TU_CHECK(!store_broken(s), "the REVOKE broke the store");
    n = LEASE_N(s, "g", "t", 8, LEASE, T0 + SEC, m); /* before the skip's end: the REVOKE ended it */
    TU_CHECK(n == 2 && m[0].m.id == c && m[1].m.id == d, "g after the REVOKE: %d leased, not c and d", n);
    free_msgs(m, n);
    TU_CHECK(store_group_queues_damaged(s) == 0 && store_group_recoveries(s) == 1 &&
                 strcmp(store_group_recovery_last(s), "group g: its topic log t is served again") == 0,
             "after the REVOKE: %" PRIu64 " damaged, %" PRIu64 " recoveries \"%s\"", store_group_queues_damaged(s),
             store_group_recoveries(s), store_group_recovery_last(s));
    n = LEASE_N(s, "h", "t", 8, LEASE, T0 + SEC, m);
    TU_CHECK(n == 3 && m[0].m.id == a && m[1].m.id == c && m[2].m.id == d, "h: %d leased, not a, c and d", n);
    free_msgs(m, n);
    REQUIRE_OK(store_revoke_id(s, b, &r, err, sizeof err), err);
    TU_CHECK(r.revoked == 0 && r.nrefused == 1 && strcmp(r.refused[0].reason, "gone") == 0,
             "a second REVOKE of b: revoked %" PRIu64 ", refused \"%s\"", r.revoked,
             r.nrefused ? r.refused[0].reason : "");
    store_msg_view_t v;
    REQUIRE_OK(store_msg_get(s, b, 0, &v, err, sizeof err), err);
    TU_CHECK(v.state == STORE_MSG_GONE, "GET b: %s, not gone", store_msg_state_name(v.state));
    store_msg_view_free(&v);
    store_msg_view_t *found;
    int nfound = -1;
    REQUIRE_OK(store_msg_find(s, "t", 1, "kb", 2, 8, &found, &nfound, err, sizeof err), err);
    TU_CHECK(nfound == 0, "FIND kb after the REVOKE: %d messages", nfound);
    for (int i = 0; i < nfound; i++) {
        store_msg_view_free(&found[i]);
    }
    free(found);
    CHECK_STORE(s);
    uint64_t taken[] = { a, c, d };
    TU_CHECK(ACK(s, "g", taken, 3) == 3 && ACK(s, "h", taken, 3) == 3, "a, c and d are not each leased once");
    CLOSE(&s);

    s = OPEN_DEFAULT();
    CHECK_STORE(s);
    CHECK_COUNTS(s, "g", 0, 0, 0, 0, 0, 0);
    REQUIRE_OK(store_revoke_id(s, b, &r, err, sizeof err), err);
    TU_CHECK(r.revoked == 0 && r.nrefused == 1 && strcmp(r.refused[0].reason, "gone") == 0,
             "REVOKE of b after a reopen: revoked %" PRIu64 ", refused \"%s\"", r.revoked,
             r.nrefused ? r.refused[0].reason : "");
    TU_CHECK(LEASE_N(s, "g", "t", 8, LEASE, T0 + 2 * SEC, m) == 0, "g leases again after a reopen");
    CLOSE(&s);
}

/* REVOKE … KEY of a damaged record: its key index entry names its id (the
 * record, which holds the key, cannot be read), so REVOKE t KEY kx finds it
 * and revokes it as by id; g's skipped log is served again past it (y). */
static void test_lease_damaged_revoked_by_key(void)
{
    store_t *s = OPEN_DEFAULT();
    msg_owned_t m[4];
    CREATE_EMPTY_GROUP(s, "g");
    uint64_t x;
    char err[1024] = "";
    REQUIRE_OK(send_raw(s, "t", 1, "kx", 2, "x", 1, 0, 0, T0, &x, NULL, err, sizeof err), err);
    uint64_t y = SEND(s, "t", "y", 0, 0, T0, NULL);
    CLOSE(&s);
    RECORD_FLIP(x);

    s = OPEN_DEFAULT();
    TU_REQUIRE(LEASE_N(s, "g", "t", 4, LEASE, T0 + SEC, m) == 0 && store_group_queues_damaged(s) == 1,
               "g's log is not skipped at the damaged x");
    store_revoke_result_t r;
    int rc = store_revoke_key(s, "t", 1, "kx", 2, &r, err, sizeof err);
    TU_CHECK(rc == 0 && r.revoked == 1 && r.from_ready == 1,
             "REVOKE t KEY kx of the damaged x: rc %d, revoked %" PRIu64 " \"%s\"", rc, r.revoked, rc == 0 ? "" : err);
    int n = LEASE_N(s, "g", "t", 4, LEASE, T0 + SEC, m);
    TU_CHECK(n == 1 && m[0].m.id == y, "g after the REVOKE: %d leased, not y", n);
    free_msgs(m, n);
    CHECK_STORE(s);
    CLOSE(&s);
}

static const tu_test_t lease_tests[] = {
    { "retry first", test_lease_retry_first },
    { "byte budget", test_lease_byte_budget },
    { "ack", test_lease_ack },
    { "ack many", test_lease_ack_many },
    { "ack spread", test_lease_ack_spread },
    { "get, touch, expired", test_lease_get_touch_expired },
    { "pending earlier deadline", test_lease_pending_earlier_deadline },
    { "fail", test_lease_fail },
    { "fail decided from the lease", test_lease_fail_decided },
    { "written late: a crash", test_lease_late_crash },
    { "written late: held leases reuse the records of released ones", test_lease_late_reuses_records },
    { "written late: when and by what", test_lease_late_written },
    { "written late: NACK and TOUCH", test_lease_late_nack_touch },
    { "damage met after some were taken: those handed out", test_lease_damage_after_taken },
    { "a damaged retry-queue head: skipped, the topic log served", test_lease_damaged_retry_head },
    { "a skip's end wakes the group's topic once; the queue served again is a recovery",
      test_lease_damage_skip_end_wakes },
    { "a damaged entry at the cursor revoked by id: the log served again past it", test_lease_damaged_revoked },
    { "a damaged entry at the cursor revoked by its key", test_lease_damaged_revoked_by_key },
    { "an ACK that fails half-way breaks the store", test_ack_half_way_breaks_store },
    { "a walk right after a due move reads the held arrivals and syncs nothing", test_lease_walk_held_arrivals },
    { "a walk leaves out arrivals a held REVOKE deleted", test_lease_walk_held_revoke },
    { "a walk behind reads the applied entries, then the held ones", test_lease_walk_applied_then_held },
    { "written late: over groups", test_lease_late_groups },
    { "written late: a short lease behind a held one", test_lease_late_short_behind_held },
    { "written late: at most so many held", test_lease_late_bound },
    { "written late: GET, FIND and REVOKE write nothing", test_lease_late_lookups },
    { NULL, NULL },
};

static const tu_test_t dlq_tests[] = {
    { "list", test_dlq_list },
    { "list byte budget", test_dlq_list_byte_budget },
    { "requeue", test_dlq_requeue },
    { "drop", test_dlq_drop },
    { "requeue or drop all in steps", test_dlq_walk },
    { "a walk that meets damage", test_dlq_walk_damage },
    { NULL, NULL },
};

static const tu_suite_t suites[] = {
    { "leases", lease_tests },
    { "dlq", dlq_tests },
};

int main(int argc, char **argv)
{
    return tu_suites_main(argc, argv, suites, sizeof suites / sizeof suites[0], store_fixture_setup,
                          store_fixture_teardown);
}
