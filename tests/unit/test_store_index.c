/*
 * tests/unit/test_store_index.c — CUnit suite "index" of the store package
 * behind levels/store.h (DESIGN §1–3), through its public calls (and raw
 * LevelDB writes where a test corrupts a directory on purpose): the indexes
 * (levels/index.c, lookup.c): they follow every move, ACK and GC, revoke, the
 * arrival seq, DEDUP, rebuilt on an older directory.
 *
 * The fixture (tests/helpers/store_fixture.h): every test gets a fresh temp
 * directory and drives the store with an injected clock, every now_ms passed
 * explicitly from T0; after every step that mutates, store_check() must
 * return 0. Run alone: ./tests/unit/test_store_index [suite [test]].
 */
#include "levels/cq.h"
#include "levels/slot.h"
#include "levels/store.h"
#include "tests/helpers/store_fixture.h"
#include "tests/helpers/testutil.h"

#include <CUnit/CUnit.h>
#include <inttypes.h>
#include <leveldb/c.h>
#include <stdlib.h>
#include <string.h>

/* Delete every key of one range tag from a closed data directory. */
static void raw_delete_range(char tag, int line)
{
    char *dberr = NULL;
    leveldb_t *db = raw_open(line);
    leveldb_readoptions_t *ro = leveldb_readoptions_create();
    leveldb_writeoptions_t *wo = leveldb_writeoptions_create();
    leveldb_writebatch_t *b = leveldb_writebatch_create();
    leveldb_iterator_t *it = leveldb_create_iterator(db, ro);
    for (leveldb_iter_seek(it, &tag, 1); leveldb_iter_valid(it); leveldb_iter_next(it)) {
        size_t klen;
        const char *k = leveldb_iter_key(it, &klen);
        if (k[0] != tag)
            break;
        leveldb_writebatch_delete(b, k, klen);
    }
    leveldb_iter_destroy(it);
    leveldb_write(db, wo, b, &dberr);
    leveldb_writebatch_destroy(b);
    leveldb_writeoptions_destroy(wo);
    leveldb_readoptions_destroy(ro);
    leveldb_close(db);
    TU_REQUIRE_AT(dberr == NULL, line, "leveldb_write: %s", dberr ? dberr : "");
}

/* Every move keeps the indexes exact (store_check verifies them after each). */
static void test_index_follows_moves(void)
{
    store_t *s = OPEN_DEFAULT();
    GROUP_CREATE(s, "g", "t", 1, T0);
    GROUP_CREATE(s, "h", "t", 1, T0);
    uint64_t a = send_key(s, "t", "ka", 25 * MIN, T0); /* 20m + 5m */
    uint64_t b = send_key(s, "t", "kb", 0, T0);
    store_msg_state_t gs;
    CHECK_STORE(s);
    TU_CHECK(state_of(s, a, NULL, &gs) == STORE_MSG_DELAYED, "a is not delayed");
    TU_CHECK(state_of(s, b, "g", &gs) == STORE_MSG_READY && gs == STORE_MSG_READY, "b is not ready for g");
    MOVE(s, T0 + 20 * MIN, 100, NULL); /* a hops to the 5m level */
    CHECK_STORE(s);
    TU_CHECK(state_of(s, a, NULL, &gs) == STORE_MSG_DELAYED, "a is not delayed after its first hop");
    MOVE(s, T0 + 25 * MIN, 100, NULL);
    CHECK_STORE(s);
    msg_owned_t m[4];
    int n = LEASE_N(s, "g", "t", 4, LEASE, T0 + 25 * MIN, m);
    CHECK_EQ_U64(n, 2);
    free_msgs(m, n);
    CHECK_STORE(s);
    TU_CHECK(state_of(s, a, "g", &gs) == STORE_MSG_READY && gs == STORE_MSG_LEASED, "a: g's copy is not leased");
    ACK(s, "g", &b, 1);
    FAIL_LEVEL(s, "g", a, 1, "again", T0 + 25 * MIN, NULL);
    CHECK_STORE(s);
    TU_CHECK(state_of(s, a, "g", &gs) == STORE_MSG_READY && gs == STORE_MSG_RETRY, "a: g's copy is not a retry");
    TU_CHECK(state_of(s, b, "g", &gs) == STORE_MSG_READY && gs == STORE_MSG_DONE, "b: g is not done");
    n = LEASE_N(s, "h", "t", 4, LEASE, T0 + 25 * MIN, m);
    free_msgs(m, n);
    ACK(s, "h", &b, 1);
    FAIL_DLQ(s, "h", a, "bad", T0 + 25 * MIN);
    int work = 0;
    char err[512] = "";
    REQUIRE_OK(store_maintain(s, T0 + 26 * MIN, 1000, &work, err, sizeof err), err); /* the log is collected */
    CHECK_STORE(s);
    TU_CHECK(state_of(s, b, NULL, &gs) == STORE_MSG_GONE, "b acknowledged by both groups and collected is not gone");
    TU_CHECK(state_of(s, a, "h", &gs) == STORE_MSG_RETRY && gs == STORE_MSG_DLQ, "a: retry for g, dlq for h");
    uint64_t count = 0;
    REQUIRE_OK(store_dlq_requeue(s, "h", 1, a, 0, T0 + 26 * MIN, &count, err, sizeof err), err);
    CHECK_STORE(s);
    REQUIRE_OK(store_dlq_drop(s, "h", 1, a, 0, &count, err, sizeof err), err);
    CHECK_EQ_U64(count, 0); /* it was requeued, not in the DLQ */
    int found = 0;
    REQUIRE_OK(store_group_delete(s, "h", 1, &found, err, sizeof err), err);
    CHECK_STORE(s);
    /* its delayed retry stays, dropped when due */
    REQUIRE_OK(store_group_delete(s, "g", 1, &found, err, sizeof err), err);
    CHECK_STORE(s);
    TU_CHECK(state_of(s, a, NULL, &gs) == STORE_MSG_GONE, "a's only copy is a deleted group's retry: gone");
    MOVE(s, T0 + 30 * MIN, 100, NULL);
    CHECK_STORE(s);
    CLOSE(&s);
}

/* An ACK drops the message index with the message's last copy. A lease taken
 * from the topic log remembers its seq there, so while the GC has not reached
 * that entry the ACK knows the message's own copy is left without reading the
 * index; once the GC has, or when nothing is known (since a reopen, or a lease
 * index entry written before it kept the seq), the ACK reads it. */
static void test_index_ack_and_gc(void)
{
    store_t *s = OPEN_DEFAULT();
    GROUP_CREATE(s, "g", "t", 1, T0);
    uint64_t a = send_key(s, "t", "ka", 0, T0);
    uint64_t b = send_key(s, "t", "kb", 0, T0);
    uint64_t c = send_key(s, "t", "kc", 0, T0);
    uint64_t d = send_key(s, "t", "kd", 0, T0);
    msg_owned_t m[4];
    int n = LEASE_N(s, "g", "t", 3, LEASE, T0, m); /* a, b, c */
    CHECK_EQ_U64(n, 3);
    free_msgs(m, n);
    store_msg_state_t gs;
    ACK(s, "g", &a, 1); /* no collection since the open: nothing known of the GC */
    TU_CHECK(state_of(s, a, "g", &gs) == STORE_MSG_GONE && gs == STORE_MSG_DONE, "a: not retained after its ACK");
    char err[512] = "";
    int work = 0;
    REQUIRE_OK(store_maintain(s, T0 + 1, 1000, &work, err, sizeof err), err); /* a, b, c: below g's cursor */
    CHECK_STORE(s);
    TU_CHECK(state_of(s, a, NULL, &gs) == STORE_MSG_GONE, "a: acked and collected, not gone");
    TU_CHECK(state_of(s, b, "g", &gs) == STORE_MSG_LEASED && gs == STORE_MSG_LEASED, "b: the lease is its last copy");
    ACK(s, "g", &b, 1); /* its log entry is collected: the index goes with the lease */
    TU_CHECK(state_of(s, b, NULL, &gs) == STORE_MSG_GONE, "b: acked after its log entry was collected, not gone");
    CHECK_STORE(s);
    n = LEASE_N(s, "g", "t", 1, LEASE, T0 + 1, m); /* d: the GC stopped at it */
    CHECK_EQ_U64(n, 1);
    free_msgs(m, n);
    ACK(s, "g", &d, 1);
    TU_CHECK(state_of(s, d, "g", &gs) == STORE_MSG_GONE && gs == STORE_MSG_DONE, "d: not retained after its ACK");
    CHECK_STORE(s);
    REQUIRE_OK(store_maintain(s, T0 + 2, 1000, &work, err, sizeof err), err);
    TU_CHECK(state_of(s, d, NULL, &gs) == STORE_MSG_GONE, "d: acked and collected, not gone");
    /* after a reopen: c's lease names its seq, but what the GC did is not known */
    CLOSE(&s);
    s = OPEN_DEFAULT();
    ACK(s, "g", &c, 1);
    TU_CHECK(state_of(s, c, NULL, &gs) == STORE_MSG_GONE, "c: acked after a reopen, its log entry collected before");
    CHECK_STORE(s);
    /* a lease of format 1: the deadline alone, no topic-log seq */
    uint64_t e = send_key(s, "t", "ke", 0, T0 + 3);
    REQUIRE_OK(store_maintain(s, T0 + 3, 1000, &work, err, sizeof err), err); /* the GC's floor is known again */
    n = LEASE_N(s, "g", "t", 1, LEASE, T0 + 3, m);
    CHECK_EQ_U64(n, 1);
    free_msgs(m, n);
    CLOSE(&s);
    raw_downgrade_lease(e, 1, __LINE__);
    s = OPEN_DEFAULT();
    CHECK_STORE(s);
    TU_CHECK(state_of(s, e, "g", &gs) == STORE_MSG_LEASED && gs == STORE_MSG_LEASED, "e: not leased");
    ACK(s, "g", &e, 1);
    TU_CHECK(state_of(s, e, "g", &gs) == STORE_MSG_GONE && gs == STORE_MSG_DONE, "e: not retained after its ACK");
    REQUIRE_OK(store_maintain(s, T0 + 4, 1000, &work, err, sizeof err), err);
    TU_CHECK(state_of(s, e, NULL, &gs) == STORE_MSG_GONE, "e: acked and collected, not gone");
    CHECK_STORE(s);
    CLOSE(&s);
}

/* The GC drops a collected message's index only when no group holds a copy,
 * and knows a group's leases without reading them only for the leases it saw
 * taken: those from before a reopen, or past the in-memory bound, are read. */
static void gc_of_leased(const char *g, const char *t, int reopen, int n)
{
    store_t *s = OPEN_DEFAULT();
    GROUP_CREATE(s, g, t, 1, T0);
    uint64_t *ids = malloc(sizeof *ids * (size_t)n);
    msg_owned_t *m = malloc(sizeof *m * (size_t)n);
    TU_REQUIRE(ids != NULL && m != NULL, "out of memory");
    for (int i = 0; i < n; i++)
        ids[i] = SEND(s, t, "x", 0, 0, T0, NULL);
    for (int got = 0; got < n;) {
        int k = LEASE_N(s, g, t, n - got < 1000 ? n - got : 1000, LEASE, T0, m + got);
        TU_REQUIRE(k > 0, "leased %d of %d", got, n);
        got += k;
    }
    if (reopen) {
        CLOSE(&s);
        s = OPEN_DEFAULT();
    }
    char err[512] = "";
    int work = 0;
    REQUIRE_OK(store_maintain(s, T0 + 1, n + 10, &work, err, sizeof err), err); /* every entry: below the cursor */
    CHECK_EQ_U64(retained_of(s, t), 0);
    store_msg_state_t gs;
    TU_CHECK(state_of(s, ids[0], g, &gs) == STORE_MSG_LEASED && gs == STORE_MSG_LEASED, "first: lease lost");
    TU_CHECK(state_of(s, ids[n - 1], g, &gs) == STORE_MSG_LEASED && gs == STORE_MSG_LEASED, "last: lease lost");
    CHECK_STORE(s);
    ACK_LEASED(s, g, m, n);
    TU_CHECK(state_of(s, ids[0], NULL, &gs) == STORE_MSG_GONE, "first: acked and collected, not gone");
    TU_CHECK(state_of(s, ids[n - 1], NULL, &gs) == STORE_MSG_GONE, "last: acked and collected, not gone");
    CHECK_STORE(s);
    CLOSE(&s);
    free(ids);
    free(m);
}

static void test_index_gc_of_leased(void)
{
    gc_of_leased("g1", "t1", 0, 10);
    gc_of_leased("g2", "t2", 1, 10);    /* leases taken before a reopen */
    gc_of_leased("g3", "t3", 0, 65546); /* more leases than the group keeps ids of in memory */
}

/* Two deleted groups' retries of one message dropped in one move: the second
 * drop must see that the first one's copy is gone (a delete pending in the
 * batch), or the message index would outlive every copy. */
static void test_index_two_drops_in_one_batch(void)
{
    store_t *s = OPEN_DEFAULT();
    GROUP_CREATE(s, "g", "t", 1, T0);
    GROUP_CREATE(s, "h", "t", 1, T0);
    uint64_t a = send_key(s, "t", "ka", 0, T0);
    msg_owned_t m[2];
    int n = LEASE_N(s, "g", "t", 2, LEASE, T0, m);
    free_msgs(m, n);
    n = LEASE_N(s, "h", "t", 2, LEASE, T0, m);
    free_msgs(m, n);
    FAIL_LEVEL(s, "g", a, 1, "x", T0, NULL);
    FAIL_LEVEL(s, "h", a, 1, "x", T0, NULL);
    char err[512] = "";
    int found = 0, work = 0;
    REQUIRE_OK(store_maintain(s, T0 + 1, 1000, &work, err, sizeof err), err); /* the log entry: both passed it */
    REQUIRE_OK(store_group_delete(s, "g", 1, &found, err, sizeof err), err);
    REQUIRE_OK(store_group_delete(s, "h", 1, &found, err, sizeof err), err);
    CHECK_STORE(s);
    CHECK_EQ_U64(MOVE(s, T0 + MIN, 100, NULL), 2); /* both dropped in one call */
    CHECK_STORE(s);
    store_msg_state_t gs;
    TU_CHECK(state_of(s, a, NULL, &gs) == STORE_MSG_GONE, "a is not gone");
    CLOSE(&s);
}

/* A deleted group's delayed retry is never delivered, so it keeps no message
 * index: the last live group's ACK drops 'X' and 'K' (GET says gone, a DEDUP
 * SEND of the key is new), the retry keeps its 'Y' until it falls due and is
 * dropped, and store_check accepts both states. */
static void test_index_deleted_group_retry(void)
{
    store_t *s = OPEN_DEFAULT();
    GROUP_CREATE(s, "g", "t", 1, T0);
    GROUP_CREATE(s, "h", "t", 1, T0);
    uint64_t a = send_key(s, "t", "k", 0, T0);
    msg_owned_t m[2];
    int n = LEASE_N(s, "g", "t", 2, LEASE, T0, m);
    free_msgs(m, n);
    n = LEASE_N(s, "h", "t", 2, LEASE, T0, m);
    free_msgs(m, n);
    FAIL_LEVEL(s, "g", a, 1, "x", T0, NULL);
    char err[512] = "";
    int found = 0, work = 0;
    REQUIRE_OK(store_maintain(s, T0 + 1, 1000, &work, err, sizeof err), err); /* the log entry: both passed it */
    REQUIRE_OK(store_group_delete(s, "g", 1, &found, err, sizeof err), err);
    CHECK_STORE(s);
    store_msg_state_t gs;
    store_msg_state_t st = state_of(s, a, "h", &gs);
    TU_CHECK(gs == STORE_MSG_LEASED, "a: h's copy is not leased (state %d, h's %d)", (int)st, (int)gs);
    ACK(s, "h", &a, 1);
    CHECK_STORE(s);
    CLOSE(&s);
    int x = (int)RAW_COUNT('X'), k = (int)RAW_COUNT('K'), y = (int)RAW_COUNT('Y');
    TU_CHECK(x == 0 && k == 0 && y == 1, "after the last live copy's ACK: %d 'X', %d 'K', %d 'Y'; want 0, 0, 1", x, k,
             y);
    s = OPEN_DEFAULT();
    TU_CHECK(state_of(s, a, NULL, &gs) == STORE_MSG_GONE, "a's only copy is a deleted group's retry: not gone");
    store_send_req_t r = { .topic = "t", .topic_len = 1, .key = "k", .key_len = 1, .payload = "p", .payload_len = 1 };
    uint64_t id = 0, due;
    int dup = -1;
    REQUIRE_OK(store_send_dedup(s, &r, T0 + 2, &id, &due, &dup, err, sizeof err), err);
    TU_CHECK(dup == 0 && id != a, "DEDUP of a's key: dup %d id %" PRIu64 ", want a new message", dup, id);
    CHECK_EQ_U64(MOVE(s, T0 + MIN, 100, NULL), 1); /* the retry falls due and is dropped */
    CHECK_STORE(s);
    CLOSE(&s);
}

/* REVOKE: by key across levels and the log in one batch, the level heads
 * found again, the groups' backlogs, refusals. */
static void test_index_revoke(void)
{
    store_t *s = OPEN_DEFAULT();
    uint64_t a = send_key(s, "t", "k", 10 * SEC, T0);
    uint64_t b = send_key(s, "t", "k", 10 * SEC, T0 + 1);
    uint64_t keep = send_key(s, "t", "other", 10 * SEC, T0 + 2);
    uint64_t c = send_key(s, "t", "k", 0, T0);
    GROUP_CREATE(s, "g", "t", 1, T0);
    store_revoke_result_t r;
    char err[512] = "";
    REQUIRE_OK(store_revoke_key(s, "t", 1, "k", 1, &r, err, sizeof err), err);
    CHECK_EQ_U64(r.revoked, 3);
    CHECK_EQ_U64(r.from_delayed, 2);
    CHECK_EQ_U64(r.from_ready, 1);
    CHECK_STORE(s); /* level 3's head is now keep's */
    CHECK_COUNTS(s, "g", 0, 0, 0, 0, 0, 0);
    MOVE(s, T0 + 20 * SEC, 100, NULL);
    msg_owned_t m[4];
    int n = LEASE_N(s, "g", "t", 4, LEASE, T0 + 20 * SEC, m);
    TU_CHECK(n == 1 && m[0].m.id == keep, "leased %d messages, want only the one not revoked", n);
    free_msgs(m, n);
    REQUIRE_OK(store_revoke_id(s, keep, &r, err, sizeof err), err);
    TU_CHECK(r.revoked == 0 && r.nrefused == 1 && strstr(r.refused[0].reason, "group g (leased)") != NULL,
             "revoking a leased message: revoked %" PRIu64 ", reason '%s'", r.revoked,
             r.nrefused ? r.refused[0].reason : "");
    REQUIRE_OK(store_revoke_id(s, a, &r, err, sizeof err), err);
    TU_CHECK(r.revoked == 0 && r.nrefused == 1 && strcmp(r.refused[0].reason, "gone") == 0, "revoking twice");
    (void)b;
    (void)c;
    CHECK_STORE(s);
    CLOSE(&s);
}

/* The tag of message id's raw 'X' record in the closed data directory (0
 * when it has none). */
static char raw_home_tag(uint64_t id, int line)
{
    leveldb_t *db = raw_open(line);
    leveldb_readoptions_t *ro = leveldb_readoptions_create();
    char key[9] = { 'X' }, *dberr = NULL;
    for (int i = 0; i < 8; i++)
        key[1 + i] = (char)(id >> (56 - 8 * i));
    size_t vlen = 0;
    char *v = leveldb_get(db, ro, key, sizeof key, &vlen, &dberr);
    TU_CHECK_AT(dberr == NULL, line, "leveldb_get: %s", dberr ? dberr : "");
    char tag = v != NULL && vlen > 0 ? v[0] : 0;
    leveldb_free(v);
    leveldb_readoptions_destroy(ro);
    leveldb_close(db);
    return tag;
}

/* A message on its SEND journey is found by its where-slot and its record in
 * the commit log (levels/journey.c), not by 'X': with every 'X' record
 * deleted, GET still says DELAYED with the level, hop due and payload — on a
 * level's CQ and on the remainder lane — FIND finds it by key, REVOKE takes
 * it, and the message left is delivered at its due. */
static void test_index_journey_by_slot(void)
{
    store_t *s = OPEN_DEFAULT();
    GROUP_CREATE(s, "g", "t", 1, T0);
    uint64_t on_level = send_key(s, "t", "ka", 5 * SEC, T0); /* level 2, due +5 s */
    uint64_t on_lane = send_key(s, "t", "kb", 1500, T0);     /* level 1, then its 500 ms on the lane */
    uint64_t keep = send_key(s, "t", "kc", 5 * SEC, T0 + 1);
    MOVE(s, T0 + 1 * SEC, 100, NULL);
    COMMIT(s);
    CLOSE(&s);
    raw_delete_range('X', __LINE__);
    s = OPEN_DEFAULT();
    char err[512] = "";
    store_msg_view_t v;
    REQUIRE_OK(store_msg_get(s, on_level, 1, &v, err, sizeof err), err);
    TU_CHECK(v.state == STORE_MSG_DELAYED && v.level == 2 && v.hop_due_ms == T0 + 5 * SEC && v.msg.m.payload.len == 1 &&
                 v.msg.m.payload.ptr[0] == 'p' && v.msg.m.topic.len == 1,
             "GET on a level without 'X': state %s, level %d, hop due %" PRIu64, store_msg_state_name(v.state), v.level,
             v.hop_due_ms);
    store_msg_view_free(&v);
    REQUIRE_OK(store_msg_get(s, on_lane, 0, &v, err, sizeof err), err);
    TU_CHECK(v.state == STORE_MSG_DELAYED && v.level == 1 && v.hop_due_ms == T0 + 1500 && v.hops_left == 0,
             "GET on the lane without 'X': state %s, level %d, hop due %" PRIu64, store_msg_state_name(v.state),
             v.level, v.hop_due_ms);
    store_msg_view_free(&v);
    store_msg_view_t *found = NULL;
    int n = 0;
    REQUIRE_OK(store_msg_find(s, "t", 1, "kb", 2, 10, &found, &n, err, sizeof err), err);
    TU_CHECK(n == 1 && found[0].id == on_lane && found[0].state == STORE_MSG_DELAYED, "FIND by key: %d views", n);
    for (int i = 0; i < n; i++)
        store_msg_view_free(&found[i]);
    free(found);
    store_revoke_result_t r;
    REQUIRE_OK(store_revoke_id(s, on_level, &r, err, sizeof err), err);
    TU_CHECK(r.revoked == 1 && r.from_delayed == 1, "REVOKE on a level: revoked %" PRIu64, r.revoked);
    REQUIRE_OK(store_revoke_id(s, on_lane, &r, err, sizeof err), err);
    TU_CHECK(r.revoked == 1 && r.from_delayed == 1, "REVOKE on the lane: revoked %" PRIu64, r.revoked);
    REQUIRE_OK(store_revoke_id(s, on_lane, &r, err, sizeof err), err);
    TU_CHECK(r.revoked == 0 && r.nrefused == 1 && strcmp(r.refused[0].reason, "gone") == 0, "revoking twice");
    COMMIT(s);
    store_msg_state_t gs;
    TU_CHECK(state_of(s, on_level, NULL, &gs) == STORE_MSG_GONE, "revoked from its level, GET still finds it");
    TU_CHECK(state_of(s, on_lane, NULL, &gs) == STORE_MSG_GONE, "revoked from the lane, GET still finds it");
    MOVE(s, T0 + 6 * SEC, 100, NULL);
    msg_owned_t m[4];
    n = LEASE_N(s, "g", "t", 4, LEASE, T0 + 6 * SEC, m);
    TU_CHECK(n == 1 && m[0].m.id == keep, "leased %d messages, want only the one not revoked", n);
    free_msgs(m, n);
    CLOSE(&s);
}

/* A message coming off a level served from its CQ enters the topic log as
 * its topic CQ's entry, with no 'X' at all (design-commitlog.md 4b; 4a.5 wrote
 * its first 'X' at the arrival, 4a.4 kept its level entry's seq): its
 * where-slot names the entry. GET, FIND, REVOKE, the lease's order (the order
 * of arrival), the GC and store_check read both places alike, across a
 * reopen. */
static void test_index_arrival_keeps_seq(void)
{
    store_t *s = OPEN_DEFAULT();
    GROUP_CREATE(s, "g", "t", 1, T0);
    uint64_t a = send_key(s, "t", "ka", 5 * SEC, T0);           /* level 2: due +5 s */
    uint64_t b = send_key(s, "t", "kb", 1 * SEC, T0 + 3 * SEC); /* level 1: due +4 s */
    uint64_t c = send_key(s, "t", "kc", 1 * SEC, T0 + 3500);    /* level 1: due +4.5 s */
    uint64_t d = send_key(s, "t", "kd", 5 * SEC, T0 + 3600);    /* level 2: due +8.6 s */
    MOVE(s, T0 + 4 * SEC, 100, NULL);                           /* b: after the log's tail, keeps its seq */
    MOVE(s, T0 + 4500, 100, NULL);                              /* c: after b's, keeps it */
    MOVE(s, T0 + 5 * SEC, 100, NULL);                           /* a: sent before b and c, a fresh seq */
    CHECK_STORE(s);
    store_msg_state_t gs;
    for (int i = 0; i < 3; i++) {
        uint64_t id = i == 0 ? a : i == 1 ? b : c;
        TU_CHECK(state_of(s, id, "g", &gs) == STORE_MSG_READY && gs == STORE_MSG_READY, "message %d not ready", i);
    }
    TU_CHECK(state_of(s, d, NULL, &gs) == STORE_MSG_DELAYED, "d is not delayed");
    CLOSE(&s);
    /* a journey on a level served from its CQ has no 'X' (design-commitlog.md 4a.5), nor has a message in its
       topic CQ (4b) */
    TU_CHECK(raw_home_tag(b, __LINE__) == 0, "b is in its topic CQ: no 'X'");
    TU_CHECK(raw_home_tag(c, __LINE__) == 0, "c is in its topic CQ: no 'X'");
    TU_CHECK(raw_home_tag(a, __LINE__) == 0, "a is in its topic CQ: no 'X'");
    TU_CHECK(raw_home_tag(d, __LINE__) == 0, "d is on its level: no 'X' yet");
    s = OPEN_DEFAULT();
    CHECK_STORE(s);
    TU_CHECK(state_of(s, b, "g", &gs) == STORE_MSG_READY && gs == STORE_MSG_READY, "b not ready after a reopen");
    store_revoke_result_t r;
    char err[512] = "";
    REQUIRE_OK(store_revoke_key(s, "t", 1, "kc", 2, &r, err, sizeof err), err); /* FIND's way, from the log */
    TU_CHECK(r.revoked == 1 && r.from_ready == 1, "revoking c: revoked %" PRIu64 ", from ready %" PRIu64, r.revoked,
             r.from_ready);
    CHECK_STORE(s);
    MOVE(s, T0 + 9 * SEC, 100, NULL); /* d: seqs taken since the reopen are above it, a fresh one */
    CHECK_STORE(s);
    msg_owned_t m[4];
    int n = LEASE_N(s, "g", "t", 4, LEASE, T0 + 9 * SEC, m);
    TU_CHECK(n == 3 && m[0].m.id == b && m[1].m.id == a && m[2].m.id == d,
             "leased %d, want b, a, d in the order they entered the log", n);
    uint64_t ids[3];
    for (int i = 0; i < n && i < 3; i++)
        ids[i] = m[i].m.id;
    free_msgs(m, n);
    ACK(s, "g", ids, n);
    int work = 0;
    REQUIRE_OK(store_maintain(s, T0 + 20 * SEC, 1000, &work, err, sizeof err), err);
    CHECK_STORE(s);
    for (int i = 0; i < 3; i++)
        TU_CHECK(state_of(s, ids[i], NULL, &gs) == STORE_MSG_GONE, "message %d acknowledged and collected lives on", i);
    CLOSE(&s);
}

/* An arrival that keeps its level seq still comes after every place a
 * cursor was promised: a group created FROM LAST while the message was on
 * its level gets it, and a log the GC found empty (its head hint set) finds
 * and collects it. */
static void test_index_arrival_after_promises(void)
{
    store_t *s = OPEN_DEFAULT();
    GROUP_CREATE(s, "g", "t", 1, T0);
    uint64_t a = send_key(s, "t", "ka", 1 * SEC, T0);
    uint64_t b = send_key(s, "t", "kb", 1 * SEC, T0 + 500);
    MOVE(s, T0 + 1 * SEC, 100, NULL);
    msg_owned_t m[4];
    int n = LEASE_N(s, "g", "t", 4, LEASE, T0 + 1 * SEC, m);
    TU_CHECK(n == 1 && m[0].m.id == a, "leased %d, want a", n);
    free_msgs(m, n);
    ACK(s, "g", &a, 1);
    char err[512] = "";
    int work = 0;
    REQUIRE_OK(store_maintain(s, T0 + 1200, 1000, &work, err, sizeof err), err); /* the log is empty now */
    GROUP_CREATE(s, "late", "t", 0, T0 + 1300); /* FROM LAST, while b is on its level */
    MOVE(s, T0 + 1500, 100, NULL);              /* b keeps its seq, sent before both */
    CHECK_STORE(s);
    n = LEASE_N(s, "late", "t", 4, LEASE, T0 + 1500, m);
    TU_CHECK(n == 1 && m[0].m.id == b, "the group created FROM LAST leased %d, want b", n);
    free_msgs(m, n);
    n = LEASE_N(s, "g", "t", 4, LEASE, T0 + 1500, m);
    TU_CHECK(n == 1 && m[0].m.id == b, "g leased %d, want b", n);
    free_msgs(m, n);
    ACK(s, "g", &b, 1);
    ACK(s, "late", &b, 1);
    REQUIRE_OK(store_maintain(s, T0 + 10 * SEC, 1000, &work, err, sizeof err), err);
    CHECK_STORE(s);
    store_msg_state_t gs;
    TU_CHECK(state_of(s, b, NULL, &gs) == STORE_MSG_GONE, "b acknowledged by both groups and collected lives on");
    CLOSE(&s);
}

/* DEDUP sees a SEND of the same key earlier in the pending batch; a key
 * holding 0x00 bytes is one key. */
static void test_index_dedup(void)
{
    store_t *s = OPEN_DEFAULT();
    store_send_req_t r = {
        .topic = "t", .topic_len = 1, .key = "a\0b", .key_len = 3, .payload = "p", .payload_len = 1
    };
    uint64_t id1 = 0, id2 = 0, id3 = 0, due;
    int dup = -1;
    char err[512] = "";
    REQUIRE_OK(store_send_dedup(s, &r, T0, &id1, &due, &dup, err, sizeof err), err);
    CHECK_EQ_U64(dup, 0);
    REQUIRE_OK(store_send(s, &r, T0, &id3, &due, err, sizeof err), err); /* pending: no DEDUP */
    REQUIRE_OK(store_send_dedup(s, &r, T0, &id2, &due, &dup, err, sizeof err), err);
    TU_CHECK(dup == 1 && id2 == id1, "second DEDUP: dup %d id %" PRIu64 ", want 1 and %" PRIu64, dup, id2, id1);
    store_send_req_t other = r;
    other.key_len = 1; /* "a": another key, though a prefix */
    REQUIRE_OK(store_send_dedup(s, &other, T0, &id2, &due, &dup, err, sizeof err), err);
    TU_CHECK(dup == 0 && id2 != id1, "key \"a\" is not key \"a\\0b\"");
    store_msg_view_t *v;
    int n;
    REQUIRE_OK(store_msg_find(s, "t", 1, "a\0b", 3, 100, &v, &n, err, sizeof err), err);
    TU_CHECK(n == 2 && v[0].id == id1 && v[1].id == id3, "FIND a\\0b: %d messages", n);
    for (int i = 0; i < n; i++)
        store_msg_view_free(&v[i]);
    free(v);
    r.key_len = 0;
    CHECK_REFUSAL(store_send_dedup(s, &r, T0, &id2, &due, &dup, err, sizeof err), err, "DEDUP needs a KEY", NULL);
    CHECK_STORE(s);
    CLOSE(&s);
}

/* DEDUP SENDs join a batch of SENDs (no commit per DEDUP SEND): a key sent
 * earlier in the batch is found in memory, a committed live one in the index;
 * after any other operation (a REVOKE's deletes, not committed yet) the next
 * DEDUP SEND commits first and sees it. */
static void test_index_dedup_joins_batch(void)
{
    store_t *s = OPEN_DEFAULT();
    char err[512] = "";
    uint64_t id[4], due, first_due = 0;
    int dup = -1;
    store_send_req_t r = { .topic = "t", .topic_len = 1, .payload = "p", .payload_len = 1, .delay_ms = 10 * SEC };
    const char *keys[] = { "a", "b", "c" };
    for (int i = 0; i < 3; i++) {
        r.key = keys[i];
        r.key_len = 1;
        REQUIRE_OK(store_send_dedup(s, &r, T0, &id[i], i == 0 ? &first_due : &due, &dup, err, sizeof err), err);
        CHECK_EQ_U64(dup, 0);
    }
    /* each: its level CQ entry and slot (no `L`, no 'X': design-commitlog.md 4a.5), 'K' and the key's count;
       and the new topic's CQ meta records (4b) — all still pending: no DEDUP SEND committed */
    CHECK_EQ_U64(store_pending(s), 11);
    r.key = "a";
    REQUIRE_OK(store_send_dedup(s, &r, T0 + 5, &id[3], &due, &dup, err, sizeof err), err);
    TU_CHECK(dup == 1 && id[3] == id[0] && due == first_due,
             "a again in the same batch: dup %d id %" PRIu64 " due %" PRIu64 ", want 1, %" PRIu64 ", %" PRIu64, dup,
             id[3], due, id[0], first_due);
    CHECK_EQ_U64(store_pending(s), 11);
    COMMIT(s);
    REQUIRE_OK(store_send_dedup(s, &r, T0 + 6, &id[3], &due, &dup, err, sizeof err), err);
    TU_CHECK(dup == 1 && id[3] == id[0], "a after the commit: dup %d", dup); /* from the committed index */
    CHECK_EQ_U64(store_pending(s), 0);
    store_revoke_result_t rv;
    REQUIRE_OK(store_revoke_id(s, id[0], &rv, err, sizeof err), err); /* its deletes are pending */
    CHECK_EQ_U64(rv.revoked, 1);
    TU_CHECK(store_pending(s) > 0, "the revoke is pending");
    REQUIRE_OK(store_send_dedup(s, &r, T0 + 7, &id[3], &due, &dup, err, sizeof err), err);
    TU_CHECK(dup == 0 && id[3] != id[0], "a after its revoke: dup %d id %" PRIu64 " (revoked %" PRIu64 ")", dup, id[3],
             id[0]);
    CHECK_STORE(s);
    CLOSE(&s);
}

/* A directory without the indexes (written before they existed) has them
 * built on open; the checker names a missing entry. */
static void test_index_rebuild_and_check(void)
{
    store_t *s = OPEN_DEFAULT();
    GROUP_CREATE(s, "g", "t", 1, T0);
    uint64_t a = send_key(s, "t", "ka", 0, T0);
    uint64_t b = send_key(s, "t", "kb", 0, T0);
    send_key(s, "t", "kc", 10 * MIN, T0);
    msg_owned_t m[2];
    int n = LEASE_N(s, "g", "t", 1, LEASE, T0, m);
    free_msgs(m, n);
    FAIL_DLQ(s, "g", a, "bad", T0);
    CLOSE(&s);
    raw_delete_range('X', __LINE__);
    raw_delete_range('K', __LINE__);
    raw_delete_range('Y', __LINE__);
    char *dberr = NULL;
    leveldb_options_t *lo = leveldb_options_create();
    leveldb_t *db = leveldb_open(lo, g_data, &dberr);
    TU_REQUIRE(dberr == NULL, "leveldb_open: %s", dberr);
    leveldb_writeoptions_t *wo = leveldb_writeoptions_create();
    leveldb_delete(db, wo, "Mindex", 6, &dberr);
    leveldb_delete(db, wo, "Mkeycounts", 10, &dberr); /* written after the indexes: absent before them */
    leveldb_writeoptions_destroy(wo);
    leveldb_close(db);
    leveldb_options_destroy(lo);
    s = OPEN_DEFAULT(); /* rebuilds */
    CHECK_STORE(s);
    store_msg_state_t gs;
    TU_CHECK(state_of(s, a, "g", &gs) == STORE_MSG_DLQ && gs == STORE_MSG_DLQ, "a after the rebuild");
    TU_CHECK(state_of(s, b, "g", &gs) == STORE_MSG_READY && gs == STORE_MSG_READY, "b after the rebuild");
    CLOSE(&s);
    raw_delete_range('K', __LINE__); /* now break it */
    s = OPEN_DEFAULT();
    char err[512] = "";
    CHECK_REFUSAL(store_check(s, err, sizeof err), err, "no key index entry", NULL);
    CLOSE(&s);
}

/* n DEDUP SENDs to topic t of keys fmt % i (i from first), each its own
 * key: how long they took (µs). */
static uint64_t dedup_sends(store_t *s, const char *fmt, int first, int n, uint64_t now)
{
    char key[32], err[512] = "";
    uint64_t t0 = tu_now_mono_us();
    for (int i = first; i < first + n; i++) {
        snprintf(key, sizeof key, fmt, i);
        store_send_req_t r = {
            .topic = "t", .topic_len = 1, .key = key, .key_len = strlen(key), .payload = "p", .payload_len = 1
        };
        uint64_t id, due;
        int dup = -1;
        REQUIRE_OK(store_send_dedup(s, &r, now, &id, &due, &dup, err, sizeof err), err);
        TU_REQUIRE(dup == 0, "key %s: a duplicate", key);
        if (store_pending(s) >= 1000)
            COMMIT(s);
    }
    COMMIT(s);
    return tu_now_mono_us() - t0;
}

/* A DEDUP SEND of a key no message has reads its count record (absent), not
 * the key index after it: with 50 000 collected messages whose keys sort
 * after it (longer keys: the length comes first), a seek from it stepped
 * over all their deleted entries (LevelDB walks tombstones up to the next
 * live key): 2 000 such SENDs took 17 s in a soak, against 0.1 s before the
 * collection. Timed against the same SENDs before the collection. */
static void test_index_dedup_after_collection(void)
{
    store_options_t o;
    opts_default(&o);
    o.retention_ms = SEC;
    store_t *s = OPEN(&o);
    uint64_t before = dedup_sends(s, "%07d", 1000000, 2000, T0);
    dedup_sends(s, "%010d", 1000000000, 50000, T0);
    int work = 0;
    char err[512] = "";
    do {
        REQUIRE_OK(store_maintain(s, T0 + 10 * SEC, 10000, &work, err, sizeof err), err);
    } while (work > 0); /* every message past retention collected: 'X' and 'K' deleted */
    store_topic_info_t ti;
    TU_REQUIRE(store_topic_info(s, "t", 1, &ti) == 1 && ti.retained == 0, "retained %" PRIu64, ti.retained);
    uint64_t after = dedup_sends(s, "%07d", 2000000, 2000, T0 + 11 * SEC);
    printf("\n    2 000 DEDUP SENDs: %" PRIu64 " us before, %" PRIu64 " us after 52 000 keys were collected ", before,
           after);
    TU_CHECK(after < 10 * before + 200000,
             "2 000 DEDUP SENDs took %" PRIu64 " us after the collection, %" PRIu64 " us before (a seek walks the "
             "deleted key index)",
             after, before);
    CHECK_STORE(s);
    CLOSE(&s);
}

/* FIND key in topic t answers exactly the two ids a, b (in that order). */
static int find_ids_are(store_t *s, const char *key, uint64_t a, uint64_t b)
{
    char err[512] = "";
    store_msg_view_t *views = NULL;
    int n = 0;
    REQUIRE_OK(store_msg_find(s, "t", 1, key, strlen(key), 10, &views, &n, err, sizeof err), err);
    int ok = n == 2 && views[0].id == a && views[1].id == b;
    for (int i = 0; i < n; i++)
        store_msg_view_free(&views[i]);
    free(views);
    return ok;
}

/* Format 4 had no count records: the first open of this build marks the
 * directory 5 and counts the key index once; a check (no_upgrade) of a
 * format-4 directory reads it as it is. */
static void test_index_key_counts_from_format4(void)
{
    store_t *s = OPEN_DEFAULT();
    uint64_t a1 = send_key(s, "t", "a", 0, T0);
    uint64_t a2 = send_key(s, "t", "a", 10 * MIN, T0);
    uint64_t b = send_key(s, "t", "b", 0, T0);
    SEND(s, "t", "x", 0, 0, T0, NULL); /* key k */
    COMMIT(s);
    CLOSE(&s);
    CHECK_EQ_U64(raw_format(), STORE_FORMAT_VERSION);
    leveldb_t *db = raw_open(__LINE__);
    leveldb_writebatch_t *wb = leveldb_writebatch_create();
    leveldb_writebatch_delete(wb, "Kt\0\0\1a", 6);
    leveldb_writebatch_delete(wb, "Kt\0\0\1b", 6);
    leveldb_writebatch_delete(wb, "Kt\0\0\1k", 6);
    leveldb_writebatch_delete(wb, "Mkeycounts", 10);
    leveldb_writebatch_put(wb, "Mformat", 7, "\0\0\0\4", 4);
    raw_write_close(db, wb, __LINE__);
    /* a check reads format 4 without marking it or writing counts */
    store_options_t check;
    opts_default(&check);
    check.create_if_missing = 0;
    check.no_upgrade = 1;
    char err[512] = "";
    REQUIRE_OK(store_open(&check, T0, &s, err, sizeof err), err);
    CHECK_STORE(s);
    TU_CHECK(find_ids_are(s, "a", a1, a2), "FIND a in format 4");
    CLOSE(&s);
    CHECK_EQ_U64(raw_format(), 4);
    s = OPEN_DEFAULT(); /* upgrades: marker 5, counts built */
    CHECK_STORE(s);
    TU_CHECK(find_ids_are(s, "a", a1, a2), "FIND a after the upgrade");
    store_send_req_t r = { .topic = "t", .topic_len = 1, .key = "b", .key_len = 1, .payload = "p", .payload_len = 1 };
    uint64_t id, due;
    int dup = -1;
    REQUIRE_OK(store_send_dedup(s, &r, T0 + 1, &id, &due, &dup, err, sizeof err), err);
    TU_CHECK(dup == 1 && id == b, "DEDUP b after the upgrade: dup %d", dup);
    r.key = "c";
    REQUIRE_OK(store_send_dedup(s, &r, T0 + 1, &id, &due, &dup, err, sizeof err), err);
    TU_CHECK(dup == 0, "DEDUP c after the upgrade: dup %d", dup);
    COMMIT(s);
    CHECK_STORE(s);
    CLOSE(&s);
    CHECK_EQ_U64(raw_format(), STORE_FORMAT_VERSION);
    /* a count that disagrees with its entries is found */
    db = raw_open(__LINE__);
    wb = leveldb_writebatch_create();
    leveldb_writebatch_put(wb, "Kt\0\0\1a", 6, "\0\0\0\0\0\0\0\3", 8);
    raw_write_close(db, wb, __LINE__);
    s = OPEN_DEFAULT();
    TU_CHECK(store_check(s, err, sizeof err) == -1 && strstr(err, "says 3 messages, the key index holds 2") != NULL,
             "store_check of a wrong count: \"%s\"", err);
    CLOSE(&s);
}

/* store_check compares each level's consume queue with its `L` entries, each
 * entry's where-slot and each message's record in the log
 * (design-commitlog.md 4a.3): an entry rewritten by hand to name the next
 * message, a slot naming another index and a record with a byte flipped are
 * each reported naming the level, the id and (for the queue) the CQ index; the
 * directory as the store left it checks clean. */
static void test_index_check_finds_cq_damage(void)
{
    store_options_t o;
    opts_default(&o);
    for (int damage = 0; damage < 4; damage++) {
        store_t *s = OPEN(&o);
        uint64_t ids[20];
        for (int i = 0; i < 20; i++)
            ids[i] = SEND(s, "t", "x", 2, 0, T0 + (uint64_t)i, NULL);
        COMMIT(s);
        CHECK_STORE(s);
        CLOSE(&s);
        char err[512] = "", want[160];
        if (damage == 1) { /* entry 5 names message 6 */
            cq_t *q = NULL;
            cq_entry_t e;
            TU_REQUIRE(cq_open(g_data, 2, 0, 20, &q, err, sizeof err) == 0 &&
                           cq_read(q, 6, 1, &e, err, sizeof err) == 0 && cq_rewrite(q, 5, &e, err, sizeof err) == 0 &&
                           cq_close(q, err, sizeof err) == 0,
                       "level 2's CQ: %s", err);
            snprintf(want, sizeof want, "level 2, CQ index 5: entry (id %016" PRIx64, ids[6]);
        } else if (damage == 2) { /* message 3's slot names index 7 */
            slot_file_t *f = NULL;
            slot_t sl = { ids[3], 2, 0, 7 };
            TU_REQUIRE(slot_file_open(g_data, ids[3] - ids[3] % o.segment_bytes, 0, &f, err, sizeof err) == 0 &&
                           slot_put(f, 3, &sl, err, sizeof err) == 0 && slot_file_close(f, err, sizeof err) == 0,
                       "the slot file: %s", err);
            snprintf(want, sizeof want, "level 2, CQ index 3: the where-slot of %016" PRIx64 " names queue 2 index 7",
                     ids[3]);
        }
        if (damage == 3) { /* a byte of message 4's record flipped in its segment */
            uint64_t base = ids[4] - ids[4] % o.segment_bytes;
            char path[800], b;
            snprintf(path, sizeof path, "%s/clog-%016" PRIx64 ".seg", g_data, base);
            FILE *f = fopen(path, "r+b");
            TU_REQUIRE(f != NULL && fseek(f, (long)(ids[4] - base + 40), SEEK_SET) == 0 && fread(&b, 1, 1, f) == 1,
                       "read %s", path);
            b ^= 0x20;
            TU_REQUIRE(fseek(f, (long)(ids[4] - base + 40), SEEK_SET) == 0 && fwrite(&b, 1, 1, f) == 1 &&
                           fclose(f) == 0,
                       "write %s", path);
            snprintf(want, sizeof want, "level 2, CQ index 4: the commit-log record of %016" PRIx64, ids[4]);
        }
        s = OPEN(&o);
        int rc = store_check(s, err, sizeof err);
        if (damage == 0)
            TU_CHECK(rc == 0, "undamaged: %s", err);
        else
            TU_CHECK(rc != 0 && strstr(err, want) != NULL, "damage %d: rc %d, \"%s\", want \"%s\"", damage, rc, err,
                     want);
        CLOSE(&s);
        tu_rmtree(g_data);
    }
}

static const tu_test_t index_tests[] = {
    { "follows every move", test_index_follows_moves },
    { "two drops of one message in one batch", test_index_two_drops_in_one_batch },
    { "an ACK and the log's GC", test_index_ack_and_gc },
    { "the GC and leases", test_index_gc_of_leased },
    { "a deleted group's retry keeps no index", test_index_deleted_group_retry },
    { "revoke", test_index_revoke },
    { "GET, FIND and REVOKE find a journey by its where-slot", test_index_journey_by_slot },
    { "an arrival writes the first 'X'", test_index_arrival_keeps_seq },
    { "an arrival after a cursor's promise", test_index_arrival_after_promises },
    { "dedup", test_index_dedup },
    { "dedup joins a batch of sends", test_index_dedup_joins_batch },
    { "rebuilt on an older directory; checked", test_index_rebuild_and_check },
    { "dedup after many keys were collected", test_index_dedup_after_collection },
    { "key counts built from format 4; checked", test_index_key_counts_from_format4 },
    { "a consume queue's damage is found", test_index_check_finds_cq_damage },
    { NULL, NULL },
};

static const tu_suite_t suites[] = {
    { "index", index_tests },
};

int main(int argc, char **argv)
{
    return tu_suites_main(argc, argv, suites, sizeof suites / sizeof suites[0], store_fixture_setup,
                          store_fixture_teardown);
}
