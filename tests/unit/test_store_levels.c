/*
 * tests/unit/test_store_levels.c — CUnit suite "levels" of the store package
 * behind levels/store.h (DESIGN §1–3), through its public calls: due times,
 * FIFO, chained delays, monotone enqueue, the catch-up chain, custom tables
 * and their remainders, clock jumps, exact to the ms.
 *
 * The fixture (tests/helpers/store_fixture.h): every test gets a fresh temp
 * directory and drives the store with an injected clock, every now_ms passed
 * explicitly from T0; after every step that mutates, store_check() must
 * return 0. Run alone: ./tests/unit/test_store_levels [suite [test]].
 */
#include "levels/clog.h"
#include "levels/cq.h"
#include "levels/keys.h"
#include "levels/store.h"
#include "levels/store_internal.h"
#include "tests/helpers/store_fixture.h"
#include "tests/helpers/testutil.h"

#include <CUnit/CUnit.h>
#include <fcntl.h>
#include <inttypes.h>
#include <leveldb/c.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void test_level_due_times(void)
{
    store_t *s = OPEN_DEFAULT();
    const lvl_table_t *t = store_levels(s);
    TU_REQUIRE(t->count == 18, "default table has %d levels", t->count);
    CHECK_EQ_U64(store_next_due(s), UINT64_MAX);
    for (int l = 18; l >= 1; l--) {
        uint64_t due;
        SEND(s, "t", "x", l, 0, T0 + 100, &due);
        TU_CHECK(due == T0 + 100 + t->delay_ms[l], "level %d: due %" PRIu64 ", want now + %" PRIu64, l, due,
                 t->delay_ms[l]);
        store_level_info_t li;
        TU_REQUIRE(store_level_info(s, l, &li) == 0, "level info %d", l);
        TU_CHECK(li.level == l && li.depth == 1 && li.head_due_ms == due && li.delay_ms == t->delay_ms[l],
                 "level %d info: depth %" PRIu64 " head %" PRIu64, l, li.depth, li.head_due_ms);
    }
    store_level_info_t li;
    TU_CHECK(store_level_info(s, 0, &li) == -1 && store_level_info(s, 19, &li) == -1, "bad level info");
    CHECK_EQ_U64(store_next_due(s), T0 + 100 + SEC);
    TU_CHECK(MOVE(s, T0 + 100 + SEC - 1, 100, NULL) == 0, "nothing is due 1 ms early");
    int ready = -1;
    TU_CHECK(MOVE(s, T0 + 100 + SEC, 100, &ready) == 1 && ready == 1, "level 1 due at +1s");
    CHECK_EQ_U64(store_next_due(s), T0 + 100 + 5 * SEC);
    CHECK_EQ_U64(level_head(s, 1), 0);
    CHECK_STORE(s);
}

static void test_level_fifo_and_bounded_move(void)
{
    store_t *s = OPEN_DEFAULT();
    uint64_t ids[10], dues[10];
    for (int i = 0; i < 10; i++)
        ids[i] = SEND(s, "t", "x", 2, 0, T0 + (uint64_t)i, &dues[i]);
    for (int i = 1; i < 10; i++)
        TU_CHECK(ids[i] > ids[i - 1] && dues[i] == dues[i - 1] + 1, "send %d: id/due not increasing", i);
    CHECK_EQ_U64(store_next_due(s), T0 + 5 * SEC);
    /* at +5s+4 five are due; max 3 moves 3 */
    int ready = -1;
    TU_CHECK(MOVE(s, T0 + 5 * SEC + 4, 3, &ready) == 3 && ready == 3, "bounded move");
    CHECK_EQ_U64(level_depth(s, 2), 7);
    CHECK_EQ_U64(store_next_due(s), T0 + 5 * SEC + 3);
    CHECK_STORE(s);
    /* max 10 moves only the 2 that are due */
    TU_CHECK(MOVE(s, T0 + 5 * SEC + 4, 10, &ready) == 2 && ready == 2, "only due ones move");
    CHECK_EQ_U64(level_depth(s, 2), 5);
    CHECK_EQ_U64(level_head(s, 2), T0 + 5 * SEC + 5);
    TU_CHECK(MOVE(s, T0 + 5 * SEC + 4, 10, NULL) == 0, "nothing more is due");
    TU_CHECK(MOVE(s, T0 + HOUR, 0, NULL) == 0, "max 0 moves nothing");
    TU_CHECK(MOVE(s, T0 + HOUR, 100, NULL) == 5, "the rest");
    CHECK_EQ_U64(store_next_due(s), UINT64_MAX);
    msg_owned_t m[16];
    int n = LEASE_N(s, "g", "t", 16, LEASE, T0 + HOUR, m);
    TU_REQUIRE(n == 10, "leased %d", n);
    for (int i = 0; i < n; i++) {
        TU_CHECK(m[i].m.id == ids[i], "topic log position %d holds id %" PRIu64 ", want %" PRIu64, i, m[i].m.id,
                 ids[i]);
        CHECK_EQ_U64(m[i].m.due_ms, dues[i]);
    }
    free_msgs(m, n);
    CHECK_STORE(s);
}

static void test_level_chained_delay(void)
{
    store_t *s = OPEN_DEFAULT();
    uint64_t due;
    uint64_t id = SEND(s, "t", "x", 0, 25 * MIN, T0, &due);
    CHECK_EQ_U64(due, T0 + 25 * MIN);
    CHECK_EQ_U64(level_depth(s, 15), 1); /* 20m */
    CHECK_EQ_U64(level_head(s, 15), T0 + 20 * MIN);
    CHECK_EQ_U64(store_next_due(s), T0 + 20 * MIN);
    store_topic_info_t ti;
    TU_CHECK(store_topic_info(s, "t", 1, &ti) == 1 && ti.appended == 0 && ti.delayed == 1,
             "before the journey ends the topic's log is empty and its message delayed");
    TU_CHECK(MOVE(s, T0 + 20 * MIN - 1, 10, NULL) == 0, "first hop is not due early");
    int ready = -1;
    TU_CHECK(MOVE(s, T0 + 20 * MIN, 10, &ready) == 1 && ready == 0, "first hop moves, not ready");
    CHECK_EQ_U64(level_depth(s, 15), 0);
    CHECK_EQ_U64(level_depth(s, 9), 1); /* the 5m level */
    CHECK_EQ_U64(store_levels(s)->delay_ms[9], 5 * MIN);
    CHECK_EQ_U64(level_head(s, 9), T0 + 25 * MIN);
    CHECK_EQ_U64(store_next_due(s), T0 + 25 * MIN);
    CHECK_STORE(s);
    TU_CHECK(MOVE(s, T0 + 25 * MIN - 1, 10, NULL) == 0, "second hop not due early");
    TU_CHECK(MOVE(s, T0 + 25 * MIN, 10, &ready) == 1 && ready == 1, "second hop: ready");
    TU_CHECK(store_topic_info(s, "t", 1, &ti) == 1 && ti.appended == 1, "in the topic log");
    msg_owned_t m[2];
    int n = LEASE_N(s, "g", "t", 2, LEASE, T0 + 25 * MIN, m);
    TU_REQUIRE(n == 1, "leased %d", n);
    CHECK_EQ_U64(m[0].m.id, id);
    CHECK_EQ_U64(m[0].m.due_ms, T0 + 25 * MIN);
    CHECK_EQ_U64(m[0].m.created_ms, T0);
    CHECK_EQ_U64(m[0].m.reconsume, 0);
    free_msgs(m, n);

    /* Exact to the millisecond: 1500 ms is 1s + the 500 ms remainder, both on level 1. */
    SEND(s, "t", "y", 0, 1500, T0 + HOUR, &due);
    CHECK_EQ_U64(due, T0 + HOUR + 1500);
    TU_CHECK(MOVE(s, T0 + HOUR + SEC, 10, &ready) == 1 && ready == 0, "1500ms: first 1s hop");
    TU_CHECK(level_depth(s, 1) == 1, "1500ms: the 500 ms remainder waits on level 1");
    TU_CHECK(MOVE(s, T0 + HOUR + 1499, 10, &ready) == 0, "1500ms: not ready at +1499");
    TU_CHECK(MOVE(s, T0 + HOUR + 1500, 10, &ready) == 1 && ready == 1, "1500ms: ready at +1500");
    /* 6h = 2h + 2h + 2h, hopping on the same level */
    SEND(s, "t", "z", 0, 6 * HOUR, T0 + 2 * HOUR, &due);
    CHECK_EQ_U64(due, T0 + 8 * HOUR);
    int hops = 0;
    for (uint64_t now = T0 + 2 * HOUR; now <= T0 + 8 * HOUR; now += 2 * HOUR) {
        hops += MOVE(s, now, 10, &ready);
        if (now < T0 + 8 * HOUR)
            TU_CHECK(ready == 0, "6h delay ready early at %" PRIu64, now - T0);
    }
    TU_CHECK(hops == 3 && ready == 1, "6h: %d hops, ready %d", hops, ready);
    CHECK_STORE(s);
}

static void test_level_delay_zero(void)
{
    store_t *s = OPEN_DEFAULT();
    uint64_t due = 0;
    uint64_t id = SEND(s, "t", "x", 0, 0, T0 + 7, &due);
    CHECK_EQ_U64(due, T0 + 7);
    CHECK_EQ_U64(store_next_due(s), UINT64_MAX);
    for (int l = 1; l <= 18; l++)
        TU_CHECK(level_depth(s, l) == 0, "level %d not empty", l);
    store_topic_info_t ti;
    TU_CHECK(store_topic_info(s, "t", 1, &ti) == 1 && ti.appended == 1 && ti.retained == 1, "topic log");
    msg_owned_t m[2];
    int n = LEASE_N(s, "g", "t", 2, LEASE, T0 + 7, m);
    TU_REQUIRE(n == 1, "leased %d", n);
    CHECK_EQ_U64(m[0].m.id, id);
    CHECK_EQ_U64(m[0].m.due_ms, T0 + 7);
    free_msgs(m, n);
    CHECK_STORE(s);
}

static void test_level_monotone_enqueue(void)
{
    store_t *s = OPEN_DEFAULT();
    uint64_t d1, d2;
    uint64_t id1 = SEND(s, "t", "first", 4, 0, 10000, &d1);
    uint64_t id2 = SEND(s, "t", "second", 4, 0, 5000, &d2); /* clock stepped back */
    CHECK_EQ_U64(d1, 10000 + 30 * SEC);
    TU_CHECK(d2 >= d1, "second due %" PRIu64 " is before the first %" PRIu64, d2, d1);
    CHECK_EQ_U64(level_head(s, 4), d1);
    TU_CHECK(MOVE(s, d2, 10, NULL) == 2, "both move at %" PRIu64, d2);
    msg_owned_t m[4];
    int n = LEASE_N(s, "g", "t", 4, LEASE, d2, m);
    TU_REQUIRE(n == 2, "leased %d", n);
    TU_CHECK(m[0].m.id == id1 && m[1].m.id == id2, "order %" PRIu64 ", %" PRIu64, m[0].m.id, m[1].m.id);
    free_msgs(m, n);
    /* Still monotone after a reopen (the level's clock comes from its tail). */
    SEND(s, "t", "third", 4, 0, 100000, NULL);
    CLOSE(&s);
    s = OPEN_DEFAULT();
    uint64_t d4;
    SEND(s, "t", "fourth", 4, 0, 50000, &d4);
    TU_CHECK(d4 >= 100000 + 30 * SEC, "after reopen, a clock step back gives due %" PRIu64, d4);
    CHECK_STORE(s);
}

/* Catching up (a clock jump or downtime): a chain whose next hops are due
 * too goes straight through them in one move, no write to the levels between;
 * one that is only partly due waits on its next level for exactly the rest. */
static void test_level_catchup_chain(void)
{
    store_t *s = OPEN_DEFAULT();
    uint64_t dp, dk, dz;
    uint64_t p = SEND(s, "t", "P", 0, 25 * MIN, T0, &dp);            /* 20m, then 5m (level 9) */
    uint64_t k = SEND(s, "t", "K", 9, 0, T0 + 21 * MIN, &dk);        /* level 9, due +26m */
    uint64_t z = SEND(s, "t", "Z", 0, 6 * HOUR + 25 * MIN, T0, &dz); /* 2h 2h 2h 20m 5m */
    CHECK_EQ_U64(dp, T0 + 25 * MIN);
    CHECK_EQ_U64(dk, T0 + 26 * MIN);
    CHECK_EQ_U64(dz, T0 + 6 * HOUR + 25 * MIN);
    /* at +1h: P goes through both hops in one move; Z has only one hop due */
    int ready = -1;
    TU_CHECK(MOVE(s, T0 + HOUR, 100, &ready) == 2 && ready == 2, "P and K in one call: ready %d", ready);
    CHECK_EQ_U64(level_depth(s, 9), 0);
    CHECK_EQ_U64(level_depth(s, 15), 0);
    CHECK_EQ_U64(level_depth(s, 18), 1); /* Z waits */
    CHECK_EQ_U64(level_head(s, 18), T0 + 2 * HOUR);
    CHECK_STORE(s);
    msg_owned_t m[4];
    int n = LEASE_N(s, "g", "t", 4, LEASE, T0 + HOUR, m);
    TU_REQUIRE(n == 2, "leased %d", n);
    for (int i = 0; i < n; i++) {
        if (m[i].m.id == p)
            CHECK_EQ_U64(m[i].m.due_ms, dp);
        else
            TU_CHECK(m[i].m.id == k && m[i].m.due_ms == dk, "unexpected id %" PRIu64, m[i].m.id);
    }
    free_msgs(m, n);
    /* Z at +5h30m: its 2h hops at +2h, +4h, +6h — only the +2h and +4h ones are
     * due, so it moves once and waits on the 2h level until +6h */
    TU_CHECK(MOVE(s, T0 + 5 * HOUR + 30 * MIN, 100, &ready) == 1 && ready == 0, "Z partly due: ready %d", ready);
    CHECK_EQ_U64(level_depth(s, 18), 1);
    CHECK_EQ_U64(level_head(s, 18), T0 + 6 * HOUR);
    /* at +7h its last hops (+6h20m, +6h25m) are all due: ready, due exactly as asked */
    TU_CHECK(MOVE(s, T0 + 7 * HOUR, 100, &ready) == 1 && ready == 1, "Z done: ready %d", ready);
    for (int l = 1; l <= 18; l++)
        TU_CHECK(level_depth(s, l) == 0, "level %d holds %" PRIu64, l, level_depth(s, l));
    n = LEASE_N(s, "g", "t", 4, LEASE, T0 + 7 * HOUR, m);
    TU_REQUIRE(n == 1, "leased %d", n);
    TU_CHECK(m[0].m.id == z && m[0].m.due_ms == dz, "Z: id %" PRIu64 " due %" PRIu64, m[0].m.id, m[0].m.due_ms);
    free_msgs(m, n);
    CHECK_STORE(s);
}

/* A hop written behind a lagging due move (design-commitlog.md §4, 4a.4): a
 * level's CQ is read at its head only, so its entries are appended in due
 * order — a hop's entry takes the last due appended on its level when its
 * own is earlier, and waits for it: late by at most the lag, never early. A
 * remainder waits on the lane, whose order is a heap: exact to the
 * millisecond. Without the rule, A's entry sits behind B's with an earlier
 * due: the level's head (B's) is not at or below A's `L` key, and a peek
 * from it misses A. */
static void test_level_hop_behind_lag(void)
{
    store_t *s = OPEN_DEFAULT();
    uint64_t da, db, dc;
    uint64_t a = SEND(s, "t", "A", 0, 6 * SEC, T0, &da);       /* 5 s on level 2, then 1 s on level 1 */
    uint64_t c = SEND(s, "t", "C", 0, 5 * SEC + 800, T0, &dc); /* 5 s on level 2, then 800 ms on the lane */
    uint64_t b = SEND(s, "t", "B", 1, 0, T0 + 5400, &db);      /* level 1 */
    CHECK_EQ_U64(db, T0 + 6400);
    int ready = -1;
    /* the due move comes 500 ms late: A's next hop (exactly T0 + 6 s) is appended after B's T0 + 6.4 s */
    TU_CHECK(MOVE(s, T0 + 5500, 100, &ready) == 2 && ready == 0, "A and C hop: ready %d", ready);
    CHECK_EQ_U64(store_next_due(s), T0 + 5800);
    TU_CHECK(MOVE(s, T0 + 5799, 100, NULL) == 0, "C is not early");
    TU_CHECK(MOVE(s, T0 + 5800, 100, &ready) == 1 && ready == 1, "C at its millisecond: ready %d", ready);
    CHECK_EQ_U64(store_next_due(s), T0 + 6400);
    msg_owned_t m[4];
    uint64_t hop[4];
    int n = 0;
    char err[512] = "";
    TU_REQUIRE(store_peek(s, 1, NULL, 0, 4, UINT64_MAX, m, hop, &n, err, sizeof err) == 0, "peek: %s", err);
    TU_CHECK(n == 2 && m[0].m.id == b && m[1].m.id == a && hop[0] == T0 + 6400 && hop[1] == T0 + 6400,
             "level 1 holds %d: B and A (its CQ's order, the order they leave in), both at B's due (%" PRIu64
             ", %" PRIu64 ")",
             n, n > 0 ? hop[0] : 0, n > 1 ? hop[1] : 0);
    free_msgs(m, n);
    CHECK_STORE(s);
    TU_CHECK(MOVE(s, T0 + 6399, 100, NULL) == 0, "A is not early");
    TU_CHECK(MOVE(s, T0 + 6400, 100, &ready) == 2 && ready == 2, "B and A: ready %d", ready);
    n = LEASE_N(s, "g", "t", 4, LEASE, T0 + 6400, m);
    TU_CHECK(n == 3 && m[0].m.id == c && m[1].m.id == b && m[2].m.id == a && m[2].m.due_ms == da,
             "leased %d: C, B, then A (its due as asked, %" PRIu64 ")", n, da);
    free_msgs(m, n);
    CHECK_STORE(s);
    CLOSE(&s);
}

/* The index of id in ids[0..n) (ids grow in send order: ids are log
 * offsets), or -1 when it is not there. */
static int index_of_id(const uint64_t *ids, int n, uint64_t id)
{
    for (int lo = 0, hi = n - 1; lo <= hi;) {
        int mid = (lo + hi) / 2;
        if (ids[mid] == id)
            return mid;
        if (ids[mid] < id)
            lo = mid + 1;
        else
            hi = mid - 1;
    }
    return -1;
}

/* A steady stream like hourglass-bench's steady-ms: STREAM_PER_MS SENDs of a
 * random DELAY 1 ms .. 9999 ms every millisecond for STREAM_SEND_MS, the due
 * move at every millisecond except the first pause_ms of every
 * STREAM_PERIOD_MS (a storage thread held up), each ready message leased as
 * soon as the move made it ready. A message may be late by the pause that
 * held its last move back, never more: a lagging move's hops must not carry
 * its lag on (design-commitlog.md "steady-ms tail (s45)"). Returns the
 * largest lateness seen; every message is checked to arrive, never early,
 * with its journey's due. */
enum {
    STREAM_PER_MS = 3,
    STREAM_SEND_MS = 3000,
    STREAM_PERIOD_MS = 170,
    STREAM_N = STREAM_PER_MS * STREAM_SEND_MS
};

static uint64_t steady_stream_max_late(uint64_t pause_ms, int *late_over_pause)
{
    store_t *s = OPEN_DEFAULT();
    static uint64_t due_of[STREAM_N], id_of[STREAM_N];
    static msg_owned_t m[STREAM_N];
    uint32_t seed = 12345u;
    int sent = 0, done = 0, early = 0, wrong_due = 0;
    uint64_t max_late = 0, max_late_delay = 0;
    *late_over_pause = 0;
    for (uint64_t now = T0; done < STREAM_N; now++) {
        TU_REQUIRE(now < T0 + STREAM_SEND_MS + 20 * SEC, "%d of %d delivered by +%" PRIu64 " ms", done, STREAM_N,
                   now - T0);
        for (int k = 0; k < STREAM_PER_MS && now < T0 + STREAM_SEND_MS; k++, sent++) {
            seed = seed * 1103515245u + 12345u;
            uint64_t delay = 1 + (seed >> 8) % 9999;
            id_of[sent] = SEND(s, "t", "x", 0, delay, now, &due_of[sent]);
            TU_REQUIRE(due_of[sent] == now + delay, "due +%" PRIu64 " for a delay of %" PRIu64, due_of[sent] - now,
                       delay);
        }
        if (now == T0) {
            GROUP_CREATE(s, "g", "t", 1, T0);
        }
        if ((now - T0) % STREAM_PERIOD_MS < pause_ms) {
            continue; /* the move held up */
        }
        MOVE(s, now, 1000000, NULL);
        int n = LEASE_N(s, "g", "t", STREAM_N, LEASE, now, m);
        for (int j = 0; j < n; j++) {
            int i = index_of_id(id_of, sent, m[j].m.id);
            TU_REQUIRE(i >= 0, "leased an id %" PRIu64 " never sent", m[j].m.id);
            wrong_due += m[j].m.due_ms != due_of[i];
            early += now < due_of[i];
            uint64_t late = now > due_of[i] ? now - due_of[i] : 0;
            *late_over_pause += late > pause_ms;
            if (late > max_late) {
                max_late = late;
                max_late_delay = due_of[i] - (T0 + (uint64_t)(i / STREAM_PER_MS));
            }
        }
        ACK_LEASED(s, "g", m, n);
        done += n;
    }
    TU_CHECK(early == 0 && wrong_due == 0, "%d early, %d with another due", early, wrong_due);
    if (*late_over_pause > 0) {
        fprintf(stderr,
                "pause %" PRIu64 " ms: %d messages late by more, up to %" PRIu64 " ms (a delay of %" PRIu64 " ms)\n",
                pause_ms, *late_over_pause, max_late, max_late_delay);
    }
    CHECK_STORE(s);
    CLOSE(&s);
    return max_late;
}

static void test_level_steady_stream_exact(void)
{
    int over = 0;
    uint64_t late = steady_stream_max_late(0, &over);
    TU_CHECK(late == 0, "with a due move every millisecond, a message came %" PRIu64 " ms late", late);
}

static void test_level_steady_stream_lag_not_carried(void)
{
    int over = 0;
    uint64_t late = steady_stream_max_late(50, &over);
    TU_CHECK(late <= 50 && over == 0,
             "with the move held up 50 ms every 170 ms, %d messages came later than that, up to %" PRIu64 " ms", over,
             late);
}

/* A table whose smallest level does not divide the delay: the message is
 * never early and late by less than the smallest level (table.h). */
static void test_level_custom_table_remainder(void)
{
    store_options_t o;
    opts_default(&o);
    char err[512] = "";
    REQUIRE_OK(lvl_table_parse("5s 10s", &o.levels, err, sizeof err), err);
    store_t *s = OPEN(&o);
    uint64_t due;
    uint64_t id = SEND(s, "t", "x", 0, 7 * SEC, T0, &due);
    CHECK_EQ_U64(due, T0 + 7 * SEC);
    uint64_t ready_at = 0;
    for (uint64_t now = T0; now <= T0 + 20 * SEC && ready_at == 0; now += 1) {
        int ready = 0;
        MOVE(s, now, 10, &ready);
        if (ready)
            ready_at = now;
    }
    /* 5s, then the 2 s remainder waits on level 1 (5s) for exactly 2 s */
    TU_CHECK(ready_at == T0 + 7 * SEC, "ready at +%" PRIu64 " ms, want exactly +7000", ready_at - T0);
    msg_owned_t m[2];
    int n = LEASE_N(s, "g", "t", 2, LEASE, ready_at, m);
    TU_REQUIRE(n == 1 && m[0].m.id == id, "leased %d", n);
    TU_CHECK(m[0].m.due_ms <= ready_at, "due_ms %" PRIu64 " after it became ready", m[0].m.due_ms - T0);
    free_msgs(m, n);
    CHECK_STORE(s);
}

/* Exact delays: every delay from 1 ms to 12 s in 1 ms steps, then in prime
 * steps to 3 h, all sent in one store; the clock steps to each next due time
 * (store_next_due, as the broker's timer does). Each message becomes ready at
 * exactly send time + delay: never a millisecond early or late. A reopen in the
 * middle (the no-scan restart) changes nothing. */
static void test_level_exact_every_ms(void)
{
    store_t *s = OPEN_DEFAULT();
    enum {
        N = 12000 + 1300
    };
    static uint64_t delay_of[N], sent_at[N], id_of[N];
    int n = 0;
    for (uint64_t d = 1; d <= 12 * SEC; d++, n++)
        delay_of[n] = d;
    for (uint64_t d = 12 * SEC + 7; d <= 3 * HOUR && n < N; d += 8311, n++)
        delay_of[n] = d;
    for (int i = 0; i < n; i++) {
        sent_at[i] = T0 + (uint64_t)(i / 10); /* sends spread over 1.3 s, the clock never stepping back */
        uint64_t due = 0;
        id_of[i] = SEND(s, "t", "x", 0, delay_of[i], sent_at[i], &due);
        TU_REQUIRE(due == sent_at[i] + delay_of[i], "delay %" PRIu64 ": due +%" PRIu64, delay_of[i], due - sent_at[i]);
    }
    for (int i = 1; i < n; i++) /* ids are log offsets: not dense, but growing in send order (the search below) */
        TU_REQUIRE(id_of[i] > id_of[i - 1], "id %d (%" PRIx64 ") not above the one before (%" PRIx64 ")", i, id_of[i],
                   id_of[i - 1]);
    GROUP_CREATE(s, "g", "t", 1, T0);
    CHECK_STORE(s);
    int done = 0, wrong = 0, steps = 0, reopened = 0;
    uint64_t first_wrong_id = 0, first_wrong_at = 0, last_now = T0;
    static msg_owned_t m[N];
    while (done < n) {
        uint64_t now = store_next_due(s);
        TU_REQUIRE(now != UINT64_MAX && now >= last_now, "next due %" PRIu64 " after %d of %d", now, done, n);
        last_now = now;
        int moved = MOVE(s, now, 1000000, NULL);
        TU_REQUIRE(moved > 0, "nothing moved at the next due time +%" PRIu64, now - T0);
        int k = LEASE_N(s, "g", "t", N, LEASE, now, m);
        for (int j = 0; j < k; j++) {
            int i = index_of_id(id_of, n, m[j].m.id);
            if ((i < 0 || sent_at[i] + delay_of[i] != now || m[j].m.due_ms != now) && wrong++ == 0) {
                first_wrong_id = m[j].m.id;
                first_wrong_at = now;
            }
        }
        ACK_LEASED(s, "g", m, k);
        done += k;
        if (++steps == 3000 && !reopened) {
            CLOSE(&s);
            s = OPEN_DEFAULT();
            CHECK_STORE(s);
            reopened = 1;
        }
    }
    TU_CHECK(wrong == 0, "%d messages not ready at exactly send + delay (first: id %" PRIu64 " at +%" PRIu64 " ms)",
             wrong, first_wrong_id, first_wrong_at - T0);
    TU_CHECK(reopened, "the reopen in the middle happened (%d steps)", steps);
    CHECK_EQ_U64(store_next_due(s), UINT64_MAX);
    CHECK_STORE(s);
}

/* Order within a level: LEVEL 1 messages and short remainder hops share
 * level 1. The level is served in due order (a 300 ms remainder sent after
 * a LEVEL 1 message comes out first when it is due first), LEVEL 1 messages
 * stay FIFO among themselves and wait exactly 1 s, and the remembered head
 * is always the level's first key (store_check). */
static void test_level_order_with_remainders(void)
{
    store_t *s = OPEN_DEFAULT();
    enum {
        N = 400
    };
    static uint64_t due_of[N], id_of[N];
    static int is_level[N];
    for (int i = 0; i < N; i++) {
        uint64_t now = T0 + (uint64_t)i * 5;
        is_level[i] = i % 3 != 0;
        /* remainders 1..999 ms and 1s + remainder, interleaved with LEVEL 1 */
        uint64_t d = (uint64_t)(i * 37) % 2000 + 1;
        id_of[i] = SEND(s, "t", "x", is_level[i] ? 1 : 0, is_level[i] ? 0 : d, now, &due_of[i]);
        CHECK_EQ_U64(due_of[i], now + (is_level[i] ? SEC : d));
    }
    CHECK_STORE(s);
    GROUP_CREATE(s, "g", "t", 1, T0);
    uint64_t last_due = 0, last_level_id = 0;
    int got = 0, out_of_order = 0, fifo_broken = 0, early = 0;
    msg_owned_t m[N];
    while (got < N) {
        uint64_t now = store_next_due(s);
        TU_REQUIRE(now != UINT64_MAX, "next due after %d of %d", got, N);
        MOVE(s, now, N, NULL);
        CHECK_STORE(s);
        int k = LEASE_N(s, "g", "t", N, LEASE, now, m);
        for (int j = 0; j < k; j++) {
            int i = 0;
            while (i < N && id_of[i] != m[j].m.id)
                i++;
            TU_REQUIRE(i < N, "unknown id %" PRIu64, m[j].m.id);
            early += due_of[i] > now;
            out_of_order += due_of[i] < last_due;
            last_due = due_of[i];
            if (is_level[i]) {
                fifo_broken += id_of[i] < last_level_id;
                last_level_id = id_of[i];
            }
        }
        ACK_LEASED(s, "g", m, k);
        got += k;
    }
    TU_CHECK(early == 0 && out_of_order == 0 && fifo_broken == 0,
             "early %d, out of due order %d, LEVEL 1 FIFO broken %d", early, out_of_order, fifo_broken);
    CHECK_STORE(s);
}

/* The clock jumps forward by hours: many small calls move everything; each
 * level is served in due order and nothing is lost or duplicated. */
static void test_level_clock_jump(void)
{
    store_t *s = OPEN_DEFAULT();
    enum {
        N = 400
    };
    static uint64_t ids[N], dues[N];
    static int last_level[N];
    const lvl_table_t *t = store_levels(s);
    for (int i = 0; i < N; i++) {
        uint64_t now = T0 + (uint64_t)i * 13;
        if (i % 4 == 3) {
            /* chained: 25m, 2h5m, 3h, 65s ... */
            static const uint64_t delays[] = { 25 * MIN, 2 * HOUR + 5 * MIN, 3 * HOUR, 65 * SEC, 11 * MIN };
            uint64_t d = delays[(i / 4) % 5];
            uint8_t plan[64];
            int hops = 0;
            char err[256];
            REQUIRE_OK(lvl_chain_plan(t, d, 3 * DAY, plan, 64, &hops, err, sizeof err), err);
            last_level[i] = plan[hops - 1];
            ids[i] = SEND(s, "t", "c", 0, d, now, &dues[i]);
        } else {
            int l = 1 + (i * 7) % 18;
            last_level[i] = l;
            ids[i] = SEND(s, "t", "l", l, 0, now, &dues[i]);
        }
    }
    CHECK_STORE(s);
    uint64_t jump = T0 + 6 * HOUR;
    int total = 0, calls = 0, moved, ready, ready_total = 0;
    while ((moved = MOVE(s, jump, 7, &ready)) > 0) {
        TU_CHECK(moved <= 7, "call moved %d > max 7", moved);
        total += moved;
        ready_total += ready;
        calls++;
        TU_REQUIRE(calls < 10000, "move_due never finishes");
    }
    TU_CHECK(ready_total == N, "%d became ready, want %d (in %d moves, %d calls)", ready_total, N, total, calls);
    CHECK_EQ_U64(store_next_due(s), UINT64_MAX);
    for (int l = 1; l <= 18; l++)
        TU_CHECK(level_depth(s, l) == 0, "level %d still holds %" PRIu64, l, level_depth(s, l));
    CHECK_STORE(s);

    static msg_owned_t m[N + 1];
    int n = LEASE_N(s, "g", "t", N + 1, LEASE, jump, m);
    TU_REQUIRE(n == N, "leased %d, want %d", n, N);
    /* Each id once; per final level, due order. */
    uint64_t last_due[LVL_MAX_LEVELS + 1] = { 0 };
    int bad_order = 0, first_bad = -1;
    static char seen[N];
    memset(seen, 0, sizeof seen);
    for (int i = 0; i < n; i++) {
        int idx = -1;
        for (int j = 0; j < N; j++)
            if (ids[j] == m[i].m.id)
                idx = j;
        TU_REQUIRE(idx >= 0, "unknown id %" PRIu64, m[i].m.id);
        TU_CHECK(!seen[idx], "id %" PRIu64 " delivered twice", m[i].m.id);
        seen[idx] = 1;
        TU_CHECK(m[i].m.due_ms == dues[idx], "id %" PRIu64 " due %" PRIu64 " want %" PRIu64, m[i].m.id, m[i].m.due_ms,
                 dues[idx]);
        int l = last_level[idx];
        if (m[i].m.due_ms < last_due[l]) {
            bad_order++;
            if (first_bad < 0)
                first_bad = i;
        }
        last_due[l] = m[i].m.due_ms;
    }
    TU_CHECK(bad_order == 0, "%d messages left their last level out of due order (first at topic position %d)",
             bad_order, first_bad);
    free_msgs(m, n);
}


/* A level whose head is damaged (its due move fails before it takes
 * anything: its message's record in the commit log fails its CRC — the
 * due move reads it there since 4a.4, not the `L` value) does not hold the others: they move past its head's due time,
 * it is reported once (store_level_info, store_level_damage_events) and
 * tried again damage_retry_ms later (a store opened with 7 s, not the
 * default, so the skip is the option's). A damaged message behind a
 * head moved ends its level's turn there, the store usable. Before, the due
 * move returned -1 at the earliest level each time, and no level moved; met
 * behind a head, it broke the store. Repaired, the level moves again. */
static void test_level_damaged_skipped(void)
{
    store_t *s = OPEN_DEFAULT();
    uint64_t a = SEND(s, "t", "a", 1, 0, T0, NULL);     /* level 1: due T0 + 1 s */
    uint64_t c = SEND(s, "t", "c", 1, 0, T0 + 1, NULL); /* behind a, damaged below */
    uint64_t b = SEND(s, "t", "b", 2, 0, T0, NULL);     /* level 2: due T0 + 5 s */
    CLOSE(&s);

    /* the head of level 1 damaged */
    RECORD_FLIP(a);
    store_options_t o;
    opts_default(&o);
    o.damage_retry_ms = 7 * SEC;
    const uint64_t RETRY = o.damage_retry_ms;
    s = OPEN(&o);
    uint64_t now = T0 + 10 * SEC;
    int moved = -1, ready = -1;
    char err[1024] = "";
    int rc = store_move_due(s, now, 100, &moved, &ready, err, sizeof err);
    TU_CHECK(rc == 0 && moved == 1 && ready == 1, "level 2 behind a damaged level 1: rc %d, moved %d, ready %d \"%s\"",
             rc, moved, ready, err);
    store_level_info_t li;
    TU_REQUIRE(store_level_info(s, 1, &li) == 0, "level 1");
    char named[128]; /* the due move's words for a damaged record: its offset and the CQ entry naming it */
    snprintf(named, sizeof named, "the record of %016" PRIx64 " (consume queue 1, entry 0) in ", a);
    TU_CHECK(li.damaged && strncmp(li.damage, named, strlen(named)) == 0 && li.depth == 2,
             "level 1: damaged %d \"%s\" depth %" PRIu64, li.damaged, li.damage, li.depth);
    TU_REQUIRE(store_level_info(s, 2, &li) == 0, "level 2");
    TU_CHECK(!li.damaged && li.depth == 0 && li.damage[0] == '\0', "level 2: damaged %d depth %" PRIu64, li.damaged,
             li.depth);
    CHECK_EQ_U64(store_level_damage_events(s), 1);
    CHECK_EQ_U64(store_next_due(s), now + RETRY);
    TU_CHECK(MOVE(s, now + RETRY - 1, 100, NULL) == 0, "the damaged level was tried again within its delay");
    TU_CHECK(MOVE(s, now + RETRY, 100, NULL) == 0, "the damaged level moved");
    CHECK_EQ_U64(store_level_damage_events(s), 1); /* tried again and failed: not a new finding */
    CHECK_EQ_U64(store_next_due(s), now + 2 * RETRY);
    msg_owned_t m[4];
    int n = LEASE_N(s, "g", "t", 4, LEASE, now, m);
    TU_CHECK(n == 1 && m[0].m.id == b, "leased %d, not b alone", n);
    free_msgs(m, n);
    TU_CHECK(!store_broken(s), "the store broke");
    COMMIT(s);
    CLOSE(&s);
    RECORD_FLIP(a);

    /* a message behind the head damaged: a moves, level 1 stops at c */
    RECORD_FLIP(c);
    s = OPEN_DEFAULT();
    rc = store_move_due(s, now, 100, &moved, &ready, err, sizeof err);
    TU_CHECK(rc == 0 && moved == 1 && !store_broken(s), "a before a damaged c: rc %d, moved %d, broken %d \"%s\"", rc,
             moved, store_broken(s), err);
    TU_REQUIRE(store_level_info(s, 1, &li) == 0, "level 1");
    TU_CHECK(li.damaged && li.depth == 1, "level 1 after a moved: damaged %d depth %" PRIu64, li.damaged, li.depth);
    COMMIT(s);
    CLOSE(&s);
    RECORD_FLIP(c);

    s = OPEN_DEFAULT();
    CHECK_STORE(s);
    TU_CHECK(MOVE(s, now, 100, NULL) == 1, "c put back does not move");
    n = LEASE_N(s, "g", "t", 4, LEASE, now, m);
    TU_CHECK(n == 2 && m[0].m.id == a && m[1].m.id == c, "leased %d, not a and c", n);
    free_msgs(m, n);
    CHECK_STORE(s);
    CLOSE(&s);
}

/* The level entries of SEND journeys, per level in key order (store_scan). */
typedef struct level_walk {
    uint64_t id[LVL_MAX_LEVELS + 1][2048], due[LVL_MAX_LEVELS + 1][2048];
    int n[LVL_MAX_LEVELS + 1];
} level_walk_t;

static int collect_level_entry(void *ctx, const store_entry_t *e)
{
    level_walk_t *w = ctx;
    if (e->range == STORE_LEVEL && e->m->dest == MSG_DEST_TOPIC && w->n[e->level] < 2048) {
        w->id[e->level][w->n[e->level]] = e->m->id;
        w->due[e->level][w->n[e->level]++] = e->due_ms;
    }
    return 0;
}

/* Level l's CQ head and tail from its `C` record in the closed directory. */
static void level_cq_bounds(int l, uint64_t *head, uint64_t *tail)
{
    key_buf_t k;
    key_level_record(&k, l);
    size_t n;
    char *v = RAW_GET(k.b, k.n, &n);
    record_level_t r = { 0 };
    TU_REQUIRE(v == NULL || record_level_decode(v, n, &r) == 0, "level %d's record (%zu bytes)", l, n);
    *head = r.cq_head;
    *tail = r.cq_tail;
    leveldb_free(v);
}

/* Each level's consume queue (design-commitlog.md §4, 4a.3: written beside the
 * `L` entries) holds, from its head to its tail, the level's SEND-journey
 * entries in key order — (id, hop due) each — and besides them only revoked
 * messages' entries, which stay until the head passes them: after SENDs on
 * four levels and 40 s chains (a level-4 hop, then level 3), revokes, and due
 * moves at three times, read from the CQ files of the closed directory. */
static void test_level_cq_equals_l_range(void)
{
    store_options_t o;
    opts_default(&o);
    store_t *s = OPEN(&o);
    enum {
        N = 900
    };
    static uint64_t ids[N];
    static int revoked[N];
    for (int i = 0; i < N; i++) {
        uint64_t now = T0 + (uint64_t)i * 7;
        ids[i] = i % 3 == 0   ? SEND(s, "t", "x", 1 + i % 4, 0, now, NULL)
                 : i % 3 == 1 ? SEND(s, "t", "x", 0, 40 * SEC, now, NULL)
                              : SEND(s, "t", "x", 0, 0, now, NULL);
    }
    for (int i = 0; i < N; i += 11) {
        char err[512] = "";
        store_revoke_result_t r;
        TU_REQUIRE(store_revoke_id(s, ids[i], &r, err, sizeof err) == 0, "store_revoke_id: %s", err);
        revoked[i] = r.revoked == 1 && i % 3 != 2;
    }
    COMMIT(s);
    for (uint64_t at = T0 + 2 * SEC; at <= T0 + 35 * SEC; at += 15 * SEC) {
        MOVE(s, at, 1000000, NULL);
        COMMIT(s);
    }
    static level_walk_t w;
    memset(&w, 0, sizeof w);
    char err[512] = "";
    TU_REQUIRE(store_scan(s, collect_level_entry, &w, err, sizeof err) == 0, "store_scan: %s", err);
    CLOSE(&s);
    int compared = 0;
    for (int l = 1; l <= o.levels.count; l++) {
        uint64_t head, tail;
        level_cq_bounds(l, &head, &tail);
        TU_CHECK(tail - head >= (uint64_t)w.n[l], "level %d: CQ [%" PRIu64 ", %" PRIu64 ") for %d entries", l, head,
                 tail, w.n[l]);
        if (tail == head)
            continue;
        cq_t *q = NULL;
        TU_REQUIRE(cq_open(g_data, (uint32_t)l, head, tail, &q, err, sizeof err) == 0, "cq_open: %s", err);
        cq_entry_t *e = calloc(tail - head, sizeof *e);
        TU_REQUIRE(e != NULL && cq_read(q, head, tail - head, e, err, sizeof err) == 0, "cq_read: %s", err);
        int at = 0;
        for (uint64_t i = 0; i < tail - head; i++) {
            int rev = 0;
            for (int j = 0; j < N; j++)
                rev |= ids[j] == e[i].log_offset && revoked[j];
            if (rev)
                continue;
            TU_CHECK(at < w.n[l] && e[i].log_offset == w.id[l][at] && e[i].due == w.due[l][at],
                     "level %d, CQ index %" PRIu64 ": id %" PRIx64 " due %" PRIu64
                     ", the L range's entry %d is %" PRIx64 " due %" PRIu64,
                     l, head + i, e[i].log_offset, e[i].due, at, at < w.n[l] ? w.id[l][at] : 0,
                     at < w.n[l] ? w.due[l][at] : 0);
            at++;
            compared++;
        }
        TU_CHECK(at == w.n[l], "level %d: %d of %d L entries in its CQ", l, at, w.n[l]);
        free(e);
        TU_REQUIRE(cq_close(q, err, sizeof err) == 0, "cq_close: %s", err);
    }
    TU_CHECK(compared > 200, "only %d entries compared", compared);
}

/* The remainder lane's CQ head and tail from its record in the closed directory. */
static void lane_bounds(uint64_t *head, uint64_t *tail)
{
    key_buf_t k;
    key_meta(&k, "lane");
    size_t n;
    char *v = RAW_GET(k.b, k.n, &n);
    TU_REQUIRE(v == NULL || n == 16, "the lane's record (%zu bytes)", n);
    *head = v != NULL ? be64_get(v) : 0;
    *tail = v != NULL ? be64_get(v + 8) : 0;
    leveldb_free(v);
}

/* A remainder hop (the 500 ms of DELAY 1500ms) goes to the remainder lane's
 * CQ (design-commitlog.md §4), not its level's: the lane holds exactly the
 * remainders waiting, (id, final due) in hop order, across a reopen (its
 * heap loaded from the CQ); each leaves at its millisecond and the lane's
 * head follows them out, past revoked ones too, to its tail. */
static void test_level_remainders_on_the_lane(void)
{
    store_options_t o;
    opts_default(&o);
    store_t *s = OPEN(&o);
    enum {
        N = 50
    };
    uint64_t ids[N], level_ids[N];
    for (int i = 0; i < N; i++) {
        ids[i] = SEND(s, "t", "x", 0, 1500, T0 + (uint64_t)i, NULL);
        level_ids[i] = SEND(s, "t", "x", 1, 0, T0 + (uint64_t)i, NULL);
    }
    COMMIT(s);
    TU_REQUIRE(MOVE(s, T0 + SEC + N, 1000000, NULL) == 2 * N, "the first hops");
    COMMIT(s);
    CLOSE(&s);
    uint64_t head, tail, l1_head, l1_tail;
    lane_bounds(&head, &tail);
    level_cq_bounds(1, &l1_head, &l1_tail);
    CHECK_EQ_U64(tail - head, N);
    CHECK_EQ_U64(l1_tail - l1_head, 0); /* the LEVEL 1 messages left it; no remainder entered it */
    char err[512] = "";
    cq_t *q = NULL;
    cq_entry_t e[N];
    TU_REQUIRE(cq_open(g_data, LVL_MAX_LEVELS + 1, head, tail, &q, err, sizeof err) == 0 &&
                   cq_read(q, head, N, e, err, sizeof err) == 0 && cq_close(q, err, sizeof err) == 0,
               "the lane's CQ: %s", err);
    for (int i = 0; i < N; i++)
        TU_CHECK(e[i].log_offset == ids[i] && e[i].due == T0 + (uint64_t)i + 1500,
                 "lane entry %d: %" PRIx64 " due +%" PRIu64 ", sent %" PRIx64, i, e[i].log_offset, e[i].due - T0,
                 ids[i]);
    (void)level_ids;

    s = OPEN(&o);
    TU_REQUIRE(MOVE(s, T0 + 1500 + N / 2 - 1, 1000000, NULL) == N / 2, "half the remainders due");
    COMMIT(s);
    CLOSE(&s);
    uint64_t head2, tail2;
    lane_bounds(&head2, &tail2);
    CHECK_EQ_U64(tail2, tail);
    CHECK_EQ_U64(head2, head + N / 2);

    s = OPEN(&o);
    store_revoke_result_t r;
    for (int i = N / 2; i < N / 2 + 5; i++)
        TU_REQUIRE(store_revoke_id(s, ids[i], &r, err, sizeof err) == 0 && r.revoked == 1, "revoke %d: %s", i, err);
    COMMIT(s);
    TU_REQUIRE(MOVE(s, T0 + 1500 + N, 1000000, NULL) == N / 2 - 5, "the rest");
    COMMIT(s);
    CHECK_STORE(s);
    CLOSE(&s);
    lane_bounds(&head2, &tail2);
    CHECK_EQ_U64(head2, tail);
    CHECK_EQ_U64(tail2, tail);
}

/* A full remainder lane (lane_max_entries 4 here; 2^26 by default): a SEND
 * whose first hop waits a remainder is refused naming the lane's count and
 * limit, nothing written, and so is such a SEND's check in a run; a delay
 * whose first hop is a whole level is taken. A due move whose next hop would
 * wait on the full lane puts the message back on its level for another of the
 * level's delay (late, never lost) without holding the level's head back: the
 * lane's own remainders behind it on the same level leave at their due, and
 * the message arrives a level's delay after it first came due. */
static void test_level_lane_full(void)
{
    store_options_t o;
    opts_default(&o);
    o.lane_max_entries = 4;
    store_t *s = OPEN(&o);
    uint64_t hop = SEND(s, "t", "hop", 0, 1500, T0, NULL); /* level 1 until +1000, then 500 ms on the lane */
    for (int i = 0; i < 4; i++)
        SEND(s, "t", "fill", 0, 600, T0 + 500, NULL); /* the lane at once, due +1100 */
    int pending = store_pending(s);
    char err[512] = "";
    uint64_t id, due;
    int rc = send_raw(s, "t", 1, "", 0, "late", 4, 0, 700, T0 + 500, &id, &due, err, sizeof err);
    CHECK_REFUSAL(rc, err, "the remainder lane holds 4 entries, its limit 4", "700 ms");
    TU_CHECK(!store_broken(s) && store_pending(s) == pending, "the refusal broke the store (%d) or wrote (%d, was %d)",
             store_broken(s), store_pending(s), pending);
    store_send_req_t req = { .topic = "t", .topic_len = 1, .payload = "run", .payload_len = 3, .delay_ms = 700 };
    store_send_check_t *c = store_send_check_new();
    err[0] = '\0';
    rc = store_send_check(s, c, &req, 0, err, sizeof err);
    store_send_check_free(c);
    CHECK_REFUSAL(rc, err, "the remainder lane holds 4 entries", "limit 4");
    SEND(s, "t", "whole", 0, 1000, T0 + 500, NULL); /* level 1 exactly: no remainder, due +1500 */
    COMMIT(s);
    CHECK_STORE(s);

    int ready = 0;
    TU_CHECK(MOVE(s, T0 + 1000, 100, &ready) == 1 && ready == 0, "the hop at +1000: moved, not ready (%d)", ready);
    COMMIT(s);
    store_msg_view_t v;
    REQUIRE_OK(store_msg_get(s, hop, 0, &v, err, sizeof err), err);
    TU_CHECK(v.state == STORE_MSG_DELAYED && v.level == 1 && v.hop_due_ms == T0 + 2000 && v.msg.m.due_ms == T0 + 1500,
             "the message whose hop found the lane full: state %d, level %d, hop due +%" PRIu64 ", due +%" PRIu64
             " (want back on level 1 until +2000)",
             (int)v.state, v.level, v.hop_due_ms - T0, v.msg.m.due_ms - T0);
    store_msg_view_free(&v);
    CHECK_EQ_U64(store_lane_full_hops(s), 1);
    CHECK_STORE(s);
    TU_CHECK(MOVE(s, T0 + 1100, 100, &ready) == 4 && ready == 4, "the lane's remainders at +1100: %d ready", ready);
    TU_CHECK(MOVE(s, T0 + 1999, 100, &ready) == 1 && ready == 1, "'whole' at +1500: %d ready", ready);
    TU_CHECK(MOVE(s, T0 + 2000, 100, &ready) == 1 && ready == 1, "the put-back message at +2000: %d ready", ready);
    COMMIT(s);
    GROUP_CREATE(s, "g", "t", 1, T0 + 2000);
    msg_owned_t m[8];
    int n = LEASE_N(s, "g", "t", 8, LEASE, T0 + 2000, m);
    TU_CHECK(n == 6 && m[5].m.id == hop, "leased %d, the last %" PRIx64 " (want 6, the put-back one last)", n,
             n > 0 ? m[n - 1].m.id : 0);
    free_msgs(m, n);
    SEND(s, "t", "again", 0, 600, T0 + 2000, NULL); /* the lane has room again */
    COMMIT(s);
    CHECK_STORE(s);
}

/* 1 when the data directory holds the commit-log segment at base. */
static int segment_present(uint64_t base)
{
    char path[800];
    snprintf(path, sizeof path, "%s/clog-%016" PRIx64 ".seg", g_data, base);
    return access(path, F_OK) == 0;
}

/* A commit-log segment holding a message on its journey is not recycled
 * (design-commitlog.md §5: its live count, 'S'), however far the checkpoint
 * moved past it, until the message arrives and its topic's GC passes it (4b:
 * its topic CQ entry reads the record until then); a segment of messages sent
 * without delay (in the topic log at once) goes at the first checkpoint after
 * the GC collected them (retention 1 s here: no group). */
static void test_level_segment_kept_while_delayed(void)
{
    store_options_t o;
    opts_default(&o);
    o.segment_bytes = UINT64_C(1) << 20;
    o.retention_ms = SEC;
    static char big[100000];
    memset(big, 'b', sizeof big);
    store_t *s = OPEN(&o);
    uint64_t delayed = SEND(s, "t", "d", 3, 0, T0, NULL), due;
    COMMIT(s);
    uint64_t last = 0;
    char err[512] = "";
    for (int i = 0; i < 40; i++) {
        TU_REQUIRE(send_raw(s, "t", 1, NULL, 0, big, sizeof big, 0, 0, T0, &last, &due, err, sizeof err) == 0 &&
                       store_commit(s, err, sizeof err) == 0,
                   "SEND %d: %s", i, err);
    }
    uint64_t size = o.segment_bytes, first = delayed - delayed % size, second = first + size;
    TU_REQUIRE(last - last % size > second, "4 MB of SENDs stayed in %" PRIx64, last - last % size);
    CLOSE(&s);
    s = OPEN(&o);
    TU_CHECK(segment_present(second), "the segment %016" PRIx64 " of messages in the topic log went before the GC",
             second);
    int work = 0;
    store_topic_info_t ti;
    REQUIRE_OK(store_maintain(s, T0 + 2 * SEC, 1000, &work, err, sizeof err), err);
    TU_CHECK(store_topic_info(s, "t", 1, &ti) == 1 && ti.retained == 0 && ti.appended == 40,
             "the GC left %" PRIu64 " of the 40 messages past retention", ti.retained);
    CLOSE(&s);
    s = OPEN(&o); /* its checkpoint lies past both, and recycles */
    TU_CHECK(segment_present(first), "the segment %016" PRIx64 " of a delayed message was recycled", first);
    TU_CHECK(!segment_present(second), "the segment %016" PRIx64 " of messages in the topic log was kept", second);
    TU_REQUIRE(MOVE(s, T0 + 10 * SEC, 100, NULL) == 1, "the delayed message arrives");
    COMMIT(s);
    CHECK_STORE(s);
    CLOSE(&s);
    s = OPEN(&o);
    TU_CHECK(segment_present(first), "the segment %016" PRIx64 " went while its message is in the topic log", first);
    REQUIRE_OK(store_maintain(s, T0 + 12 * SEC, 1000, &work, err, sizeof err), err);
    TU_CHECK(store_topic_info(s, "t", 1, &ti) == 1 && ti.retained == 0 && ti.appended == 41,
             "the GC left %" PRIu64 " messages, want the arrived one collected", ti.retained);
    CHECK_STORE(s);
    CLOSE(&s);
    s = OPEN(&o);
    TU_CHECK(!segment_present(first), "the segment %016" PRIx64 " was kept after its message was collected", first);
    CHECK_STORE(s);
    CLOSE(&s);
}

/* More segments holding delayed messages below the checkpoint than one
 * checkpoint recycles (64) do not hide the free segments after them: the
 * recycle steps over the live ones a page at a time (store_checkpoint.c), so
 * the segments of messages the GC collected go at the next checkpoint however
 * many delayed ones lie below them. */
static void test_free_segments_after_many_delayed(void)
{
    store_options_t o;
    opts_default(&o);
    o.segment_bytes = CLOG_SEGMENT_MIN;
    o.retention_ms = SEC;
    static char filler[20000];
    memset(filler, 'f', sizeof filler);
    uint64_t size = o.segment_bytes, first_delayed = UINT64_MAX, last_delayed = UINT64_MAX, id, due;
    int delayed_segments = 0;
    char err[512] = "";
    store_t *s = OPEN(&o);
    while (delayed_segments < 70) { /* a delayed message, then a filler that moves the log on */
        uint64_t delayed = SEND(s, "t", "d", 3, 0, T0, NULL);
        COMMIT(s);
        if (delayed - delayed % size != last_delayed) {
            last_delayed = delayed - delayed % size;
            first_delayed = delayed_segments++ == 0 ? last_delayed : first_delayed;
        }
        TU_REQUIRE(send_raw(s, "t", 1, NULL, 0, filler, sizeof filler, 0, 0, T0, &id, &due, err, sizeof err) == 0 &&
                       store_commit(s, err, sizeof err) == 0,
                   "filler: %s", err);
    }
    uint64_t free_from = last_delayed + size, free_to = free_from + 6 * size;
    while (id < free_to + size) { /* six segments of fillers only, then one more: all wholly below the next B */
        TU_REQUIRE(send_raw(s, "t", 1, NULL, 0, filler, sizeof filler, 0, 0, T0, &id, &due, err, sizeof err) == 0 &&
                       store_commit(s, err, sizeof err) == 0,
                   "filler: %s", err);
    }
    CLOSE(&s);
    s = OPEN(&o);
    int work = 0;
    REQUIRE_OK(store_maintain(s, T0 + 2 * SEC, 1000, &work, err, sizeof err), err); /* the fillers collected */
    CLOSE(&s);
    s = OPEN(&o); /* its checkpoint lies past them all, and recycles */
    int kept_free = 0, lost_delayed = 0;
    for (uint64_t base = free_from; base < free_to; base += size) {
        kept_free += segment_present(base);
    }
    for (uint64_t base = first_delayed; base <= last_delayed; base += size) { /* ids start at the clock's floor */
        lost_delayed += !segment_present(base);
    }
    TU_CHECK(kept_free == 0, "%d of the 6 free segments after %d of delayed messages were kept", kept_free,
             delayed_segments);
    TU_CHECK(lost_delayed == 0, "%d segments of delayed messages were recycled", lost_delayed);
    CHECK_STORE(s);
    CLOSE(&s);
}

/* 1 when the store's segment counts are sorted by base, strictly ascending
 * (store_internal.h: segcount_live's binary search needs it). */
static int segment_counts_sorted(const store_t *s)
{
    for (size_t i = 1; i < s->n_seg; i++) {
        if (s->seg[i - 1].base >= s->seg[i].base) {
            return 0;
        }
    }
    return 1;
}

/* Sends fillers (delay 0: in the topic log at once) until one lands at or
 * past the segment after `after`'s; the last filler's id. */
static uint64_t fill_past_segment(store_t *s, uint64_t after, uint64_t size)
{
    static char filler[20000];
    memset(filler, 'f', sizeof filler);
    char err[512] = "";
    uint64_t id = after, due;
    while (id - id % size <= after - after % size) {
        TU_REQUIRE(send_raw(s, "t", 1, NULL, 0, filler, sizeof filler, 0, 0, T0, &id, &due, err, sizeof err) == 0 &&
                       store_commit(s, err, sizeof err) == 0,
                   "filler: %s", err);
    }
    return id;
}

#define MANY_SEGMENTS 300

/* Many segments below the checkpoint, each holding one delayed message, whose
 * counts fall to 0 in a shuffled order (the messages revoked a round at a
 * time): after each round's checkpoints every segment at 0 is recycled and
 * none still counted is — while the store stays open (segcount_flush drops
 * entries between the checkpoints' lookups) and after a reopen (the counts
 * loaded again) — and the counts stay sorted by base, which segcount_live's
 * binary search needs (segcount.c). */
static void test_many_segments_recycled_as_counts_fall(void)
{
    store_options_t o;
    opts_default(&o);
    o.segment_bytes = CLOG_SEGMENT_MIN;
    o.checkpoint_bytes = STORE_CHECKPOINT_MIN_BYTES; /* checkpoints while the rounds' fillers are applied */
    o.checkpoint_on_thread = 0;
    o.retention_ms = SEC; /* the fillers collected at +2 s (no group) */
    uint64_t size = o.segment_bytes, delayed[MANY_SEGMENTS], last = 0;
    int revoked[MANY_SEGMENTS] = { 0 }, order[MANY_SEGMENTS];
    char err[512] = "";
    store_t *s = OPEN(&o);
    for (int i = 0; i < MANY_SEGMENTS; i++) { /* one delayed message a segment, in consecutive segments */
        delayed[i] = SEND(s, "t", "d", 3, 0, T0, NULL);
        COMMIT(s);
        TU_REQUIRE(i == 0 || delayed[i] - delayed[i] % size == delayed[i - 1] - delayed[i - 1] % size + size,
                   "delayed message %d in segment %016" PRIx64 ", not the one after %016" PRIx64, i, delayed[i],
                   delayed[i - 1]);
        last = fill_past_segment(s, delayed[i], size);
    }
    for (int i = 0; i < 4; i++) { /* the last delayed segment wholly below the next checkpoint */
        last = fill_past_segment(s, last, size);
    }
    CLOSE(&s);
    s = OPEN(&o); /* its checkpoint lies past them all */
    int work = 0, lost = 0;
    do {
        REQUIRE_OK(store_maintain(s, T0 + 2 * SEC, 1000, &work, err, sizeof err), err);
    } while (work > 0);
    for (int i = 0; i < MANY_SEGMENTS; i++) {
        lost += !segment_present(delayed[i] - delayed[i] % size);
        order[i] = i;
    }
    TU_REQUIRE(lost == 0, "%d segments of delayed messages were recycled before any count fell", lost);
    uint64_t rand_state = 52;
    for (int i = MANY_SEGMENTS - 1; i > 0; i--) { /* a fixed shuffle (Fisher-Yates on a 64-bit LCG) */
        rand_state = rand_state * UINT64_C(6364136223846793005) + UINT64_C(1442695040888963407);
        int j = (int)((rand_state >> 33) % (uint64_t)(i + 1)), swap = order[i];
        order[i] = order[j];
        order[j] = swap;
    }
    const int per_round = 37; /* not a divisor of MANY_SEGMENTS: the last round is short */
    for (int from = 0, round = 0; from < MANY_SEGMENTS; from += per_round, round++) {
        for (int k = from; k < from + per_round && k < MANY_SEGMENTS; k++) {
            store_revoke_result_t r;
            REQUIRE_OK(store_revoke_id(s, delayed[order[k]], &r, err, sizeof err), err);
            TU_REQUIRE(r.revoked == 1, "message %d (%016" PRIx64 ") not revoked", order[k], delayed[order[k]]);
            revoked[order[k]] = 1;
        }
        COMMIT(s);
        TU_CHECK(segment_counts_sorted(s), "round %d: the segment counts lost their order after the revokes", round);
        if (round % 2 == 1) { /* odd rounds: the open's checkpoint recycles, with the counts loaded */
            CLOSE(&s);
            s = OPEN(&o);
            TU_CHECK(segment_counts_sorted(s), "round %d: the segment counts are out of order after a reopen", round);
        } else { /* even rounds: a checkpoint while open, at an apply of fillers (1 MiB applied, 16 segments) */
            uint64_t checkpointed = redo_checkpointed(s->redo);
            for (int tries = 0; redo_checkpointed(s->redo) == checkpointed; tries++) {
                TU_REQUIRE(tries < 200, "round %d: no checkpoint after %d segments of fillers", round, tries);
                last = fill_past_segment(s, last, size);
                REQUIRE_OK(store_log_sync(s, err, sizeof err), err);
                REQUIRE_OK(store_apply_durable(s, err, sizeof err), err);
            }
        }
        int early = 0, kept = 0;
        for (int i = 0; i < MANY_SEGMENTS; i++) {
            int present = segment_present(delayed[i] - delayed[i] % size);
            early += !revoked[i] && !present;
            kept += revoked[i] && present;
        }
        TU_CHECK(early == 0, "round %d: %d segments still holding a delayed message were recycled", round, early);
        TU_CHECK(kept == 0, "round %d: %d segments whose count fell to 0 were kept", round, kept);
        CHECK_STORE(s);
    }
    CLOSE(&s);
}

/* A SEND journey on a level served from its CQ writes no `L` entry and no
 * 'X' record — at SEND, at a hop, onto the lane (design-commitlog.md 4a.5):
 * its CQ entry and where-slot are its only record; nor at its arrival (4b: a
 * topic CQ entry, no 'T', no 'X'). The messages still move at their dues, GET
 * sees them, and a reopen keeps them. */
static void test_level_journeys_write_no_l(void)
{
    store_t *s = OPEN_DEFAULT();
    uint64_t ids[5];
    ids[0] = SEND(s, "t", "a", 0, 5 * SEC, T0, NULL); /* level 2 */
    ids[1] = SEND(s, "t", "b", 0, 6 * SEC, T0, NULL); /* level 2, then level 1 */
    ids[2] = SEND(s, "t", "c", 0, 5500, T0, NULL);    /* level 2, then 500 ms on the lane */
    ids[3] = SEND(s, "t", "d", 3, 0, T0, NULL);       /* LEVEL 3 */
    ids[4] = send_key(s, "t", "k", 1 * SEC, T0);      /* level 1, with a key */
    TU_CHECK(MOVE(s, T0 + 5 * SEC, 100, NULL) == 4, "at +5 s: a and k arrive, b and c hop");
    CHECK_STORE(s);
    CLOSE(&s);
    CHECK_EQ_U64(RAW_COUNT('L'), 0);
    CHECK_EQ_U64(RAW_COUNT('X'), 0); /* a and k arrived: in their topic CQ */
    CHECK_EQ_U64(RAW_COUNT('T'), 0);
    s = OPEN_DEFAULT();
    store_msg_state_t gs;
    for (int i = 1; i <= 3; i++)
        TU_CHECK(state_of(s, ids[i], NULL, &gs) == STORE_MSG_DELAYED, "message %d is not delayed", i);
    TU_CHECK(MOVE(s, T0 + 10 * SEC, 100, NULL) == 3, "b, c and d arrive");
    CHECK_STORE(s);
    msg_owned_t m[8];
    int n = LEASE_N(s, "g", "t", 8, LEASE, T0 + 10 * SEC, m);
    TU_CHECK(n == 5, "leased %d of the 5", n);
    free_msgs(m, n);
    CLOSE(&s);
    CHECK_EQ_U64(RAW_COUNT('L'), 0);
}

static const tu_test_t level_tests[] = {
    { "a journey on a CQ-served level writes no L and no X", test_level_journeys_write_no_l },
    { "due times", test_level_due_times },
    { "fifo and bounded move", test_level_fifo_and_bounded_move },
    { "chained delay", test_level_chained_delay },
    { "delay zero", test_level_delay_zero },
    { "monotone enqueue", test_level_monotone_enqueue },
    { "catch-up chain", test_level_catchup_chain },
    { "custom table remainder", test_level_custom_table_remainder },
    { "clock jump", test_level_clock_jump },
    { "a hop behind a lagging due move waits for its level's last due; a remainder is exact",
      test_level_hop_behind_lag },
    { "exact to the ms, 1 ms .. 3 h", test_level_exact_every_ms },
    { "a steady stream of random delays is exact to the ms", test_level_steady_stream_exact },
    { "a steady stream with a lagging move: late by that lag at most", test_level_steady_stream_lag_not_carried },
    { "order with remainders", test_level_order_with_remainders },
    { "a damaged level is skipped, the others move", test_level_damaged_skipped },
    { "each level's CQ equals its L range", test_level_cq_equals_l_range },
    { "remainders wait on the lane", test_level_remainders_on_the_lane },
    { "a full remainder lane refuses the SEND and puts a due hop back", test_level_lane_full },
    { "a segment is kept while a message of it is delayed", test_level_segment_kept_while_delayed },
    { "free segments after more than a checkpoint recycles of delayed ones are recycled",
      test_free_segments_after_many_delayed },
    { "many segments below the checkpoint are recycled as their counts fall, in any order",
      test_many_segments_recycled_as_counts_fall },
    { NULL, NULL },
};

static const tu_suite_t suites[] = {
    { "levels", level_tests },
};

int main(int argc, char **argv)
{
    return tu_suites_main(argc, argv, suites, sizeof suites / sizeof suites[0], store_fixture_setup,
                          store_fixture_teardown);
}
