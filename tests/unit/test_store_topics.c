/*
 * tests/unit/test_store_topics.c — CUnit suite "topics" of the store package
 * behind levels/store.h (DESIGN §1–3), through its public calls (and raw
 * LevelDB writes where a test corrupts a directory on purpose): topic info and
 * the delayed counter, the topic logs' GC (by cursor, by retention, the
 * collection steps and their grace), deleting and purging a topic, the
 * name-ordered pages of topics and groups (TOPICS, GROUP LIST, INFO); and
 * the topic walk's contract from levels/store_internal.h (queue_walk_next,
 * topic_log_get: each message decoded where it lies, valid until the next
 * step) on a 'T' range below a CQ, CQ records and a CQ entry its 'T' key holds.
 *
 * The fixture (tests/helpers/store_fixture.h): every test gets a fresh temp
 * directory and drives the store with an injected clock, every now_ms passed
 * explicitly from T0; after every step that mutates, store_check() must
 * return 0. Run alone: ./tests/unit/test_store_topics [suite [test]].
 */
#include "levels/keys.h"
#include "levels/store.h"
#include "levels/store_internal.h"
#include "tests/helpers/store_fixture.h"
#include "tests/helpers/testutil.h"

#include <CUnit/CUnit.h>
#include <dirent.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void test_topic_info(void)
{
    store_t *s = OPEN_DEFAULT();
    store_topic_info_t ti;
    TU_CHECK(store_topic_info(s, "t", 1, &ti) == 0, "no topic yet");
    SEND(s, "t", "x", 0, 0, T0, NULL);
    SEND(s, "t", "y", 1, 0, T0, NULL);
    TU_CHECK(store_topic_info(s, "t", 1, &ti) == 1 && ti.appended == 1 && ti.retained == 1 && ti.groups == 0,
             "after sends: appended %" PRIu64 " retained %" PRIu64 " groups %d", ti.appended, ti.retained, ti.groups);
    MOVE(s, T0 + SEC, 10, NULL);
    GROUP_CREATE(s, "a", "t", 1, T0);
    GROUP_CREATE(s, "b", "t", 0, T0);
    GROUP_CREATE(s, "c", "u", 0, T0);
    TU_CHECK(store_topic_info(s, "t", 1, &ti) == 1 && ti.appended == 2 && ti.retained == 2 && ti.groups == 2,
             "after groups: appended %" PRIu64 " retained %" PRIu64 " groups %d", ti.appended, ti.retained, ti.groups);
    TU_CHECK(store_topic_info(s, "u", 1, &ti) == 1 && ti.appended == 0 && ti.groups == 1, "u exists via its group");
    TU_CHECK(store_topic_info(s, "tt", 2, &ti) == 0, "prefix of nothing");
    CHECK_STORE(s);
    CLOSE(&s);
    s = OPEN_DEFAULT();
    TU_CHECK(store_topic_info(s, "t", 1, &ti) == 1 && ti.appended == 2 && ti.retained == 2 && ti.groups == 2,
             "after reopen");
    TU_CHECK(store_topic_info(s, "u", 1, &ti) == 1 && ti.groups == 1, "u after reopen");
    CHECK_STORE(s);
}

static void test_topic_gc_by_cursor(void)
{
    store_t *s = OPEN_DEFAULT();
    GROUP_CREATE(s, "g1", "t", 1, T0);
    GROUP_CREATE(s, "g2", "t", 1, T0);
    uint64_t ids[10];
    for (int i = 0; i < 10; i++)
        ids[i] = SEND(s, "t", "x", 0, 0, T0, NULL);
    msg_owned_t m[16];
    int n = LEASE_N(s, "g1", "t", 7, LEASE, T0, m);
    free_msgs(m, n);
    n = LEASE_N(s, "g2", "t", 3, LEASE, T0, m);
    free_msgs(m, n);
    /* retention does not apply to a topic with groups: even far in the future
     * only what every group passed (3) is collected */
    int work = MAINTAIN(s, T0 + 365 * DAY, 2);
    TU_CHECK(work == 3, "maintain did %d", work);
    store_topic_info_t ti;
    TU_REQUIRE(store_topic_info(s, "t", 1, &ti) == 1, "topic");
    TU_CHECK(ti.appended == 10 && ti.retained == 7, "appended %" PRIu64 " retained %" PRIu64, ti.appended, ti.retained);
    CHECK_COUNTS(s, "g1", 3, 3, 0, 0, 7, 0);
    CHECK_COUNTS(s, "g2", 7, 7, 0, 0, 3, 0);
    CHECK_STORE(s);
    /* a group created from first now starts at the oldest retained (ids[3]) */
    GROUP_CREATE(s, "g3", "t", 1, T0);
    CHECK_COUNTS(s, "g3", 7, 7, 0, 0, 0, 0);
    n = LEASE_N(s, "g3", "t", 1, LEASE, T0, m);
    TU_REQUIRE(n == 1, "g3 leased %d", n);
    TU_CHECK(m[0].m.id == ids[3], "g3 starts at %" PRIu64 ", want %" PRIu64, m[0].m.id, ids[3]);
    free_msgs(m, n);
    CHECK_STORE(s);
    /* g2 catches up: now g3's cursor (4) is the minimum */
    n = LEASE_N(s, "g2", "t", 16, LEASE, T0, m);
    free_msgs(m, n);
    work = MAINTAIN(s, T0, 100);
    TU_CHECK(work == 1, "maintain did %d, want 1 (g3 holds the rest)", work);
    TU_CHECK(store_topic_info(s, "t", 1, &ti) == 1 && ti.retained == 6, "retained %" PRIu64, ti.retained);
    CHECK_STORE(s);
    /* after a reopen, a from-first group still starts at the oldest retained */
    CLOSE(&s);
    s = OPEN_DEFAULT();
    GROUP_CREATE(s, "g4", "t", 1, T0);
    CHECK_COUNTS(s, "g4", 6, 6, 0, 0, 0, 0);
    n = LEASE_N(s, "g4", "t", 1, LEASE, T0, m);
    TU_REQUIRE(n == 1, "g4 leased %d", n);
    TU_CHECK(m[0].m.id == ids[4], "g4 starts at %" PRIu64 ", want %" PRIu64, m[0].m.id, ids[4]);
    free_msgs(m, n);
    CHECK_STORE(s);
}

static int collect_at(store_t *s, uint64_t now, uint64_t grace, int max, int line)
{
    char err[512] = "";
    int work = -1;
    TU_REQUIRE_AT(store_collect(s, now, grace, max, &work, err, sizeof err) == 0, line, "store_collect: %s", err);
    return work;
}
#define COLLECT(s, now, grace, max) collect_at((s), (now), (grace), (max), __LINE__)

/* The busy broker's GC step: only below the smallest cursor sampled at least
 * a grace period ago (a consumed entry stays readable that long), never below
 * a group bound since, in budgeted steps; a topic without a group by
 * retention. */
static void test_topic_collect_grace(void)
{
    store_t *s = OPEN_DEFAULT();
    GROUP_CREATE(s, "g1", "t", 1, T0);
    uint64_t ids[10];
    for (int i = 0; i < 10; i++)
        ids[i] = SEND(s, "t", "x", 0, 0, T0, NULL);
    msg_owned_t m[16];
    int n = LEASE_N(s, "g1", "t", 6, LEASE, T0, m);
    free_msgs(m, n);
    TU_CHECK(COLLECT(s, T0, SEC, 100) == 0, "the first step only samples the cursor (6)");
    n = LEASE_N(s, "g1", "t", 2, LEASE, T0, m); /* g1 passes 8 now */
    free_msgs(m, n);
    TU_CHECK(COLLECT(s, T0 + SEC - 1, SEC, 100) == 0, "collected within the grace period");
    CHECK_EQ_U64(retained_of(s, "t"), 10);
    /* a group created from first reads every retained entry, and drops the samples */
    GROUP_CREATE(s, "g2", "t", 1, T0 + SEC - 1);
    n = LEASE_N(s, "g2", "t", 1, LEASE, T0 + SEC - 1, m);
    TU_REQUIRE(n == 1, "g2 leased %d", n);
    TU_CHECK(m[0].m.id == ids[0], "g2 starts at %" PRIu64 ", want %" PRIu64, m[0].m.id, ids[0]);
    free_msgs(m, n);
    TU_CHECK(COLLECT(s, T0 + SEC, SEC, 100) == 0, "collected by a sample taken before g2 (its cursor is 1)");
    TU_CHECK(COLLECT(s, T0 + 2 * SEC - 1, SEC, 100) == 0, "collected within g2's grace period");
    n = LEASE_N(s, "g2", "t", 7, LEASE, T0 + 2 * SEC - 1, m); /* g2 passes 8 too */
    free_msgs(m, n);
    TU_CHECK(COLLECT(s, T0 + 2 * SEC, SEC, 100) == 1, "only below 1: the smallest cursor a second ago");
    CHECK_EQ_U64(retained_of(s, "t"), 9);
    CHECK_STORE(s);
    TU_CHECK(COLLECT(s, T0 + 2 * SEC + 100, SEC, 100) == 0, "8 was sampled only now");
    TU_CHECK(COLLECT(s, T0 + 3 * SEC - 1, SEC, 100) == 0, "nothing below the sample of T0 + 2 s - 1 (1)");
    /* 8, sampled at T0 + 2 s + 100: collected from T0 + 3 s + 100, in steps of the budget */
    TU_CHECK(COLLECT(s, T0 + 3 * SEC + 100, SEC, 4) == 4, "a step is bounded by its budget");
    TU_CHECK(COLLECT(s, T0 + 3 * SEC + 101, SEC, 4) == 3, "the rest below 8");
    TU_CHECK(COLLECT(s, T0 + 3 * SEC + 102, SEC, 4) == 0, "nothing below 8 is left");
    CHECK_EQ_U64(retained_of(s, "t"), 2);
    CHECK_COUNTS(s, "g1", 2, 2, 0, 0, 8, 0);
    CHECK_STORE(s);
    /* a topic without a group: retention, as store_maintain */
    SEND(s, "u", "x", 0, 0, T0, NULL);
    TU_CHECK(COLLECT(s, T0 + 3 * SEC + 103, SEC, 100) == 0, "a groupless topic's entry collected inside retention");
    TU_CHECK(COLLECT(s, T0 + STORE_DEFAULT_RETENTION_MS + 1, SEC, 100) == 1, "past retention");
    CHECK_EQ_U64(retained_of(s, "u"), 0);
    CHECK_STORE(s);
    CLOSE(&s);
}

/* Collection steps take the topics in turn: topics with a long consumed
 * backlog do not take every step's budget while the others wait. Three
 * topics with 300 consumed entries each and three with 5, steps of 10: in
 * six steps every topic had its turn (taking the topics from the first one
 * each step, the short ones wait 90 steps behind any long one before them). */
static void test_topic_collect_in_turn(void)
{
    store_t *s = OPEN_DEFAULT();
    const char *topics[] = { "long1", "short1", "long2", "short2", "long3", "short3" };
    for (int t = 0; t < 6; t++) {
        char group[16];
        snprintf(group, sizeof group, "g%d", t);
        GROUP_CREATE(s, group, topics[t], 1, T0);
        int n = topics[t][0] == 'l' ? 300 : 5;
        for (int i = 0; i < n; i++)
            SEND(s, topics[t], "x", 0, 0, T0, NULL);
        msg_owned_t m[100];
        for (int got = 0; got < n;) {
            int k = LEASE_N(s, group, topics[t], 100, LEASE, T0, m);
            TU_REQUIRE(k > 0, "%s: leased %d of %d", topics[t], got, n);
            ACK_LEASED(s, group, m, k);
            got += k;
        }
    }
    char err[512] = "";
    for (int step = 0; step < 6; step++) {
        int work = 0;
        REQUIRE_OK(store_maintain(s, T0 + 1, 10, &work, err, sizeof err), err);
        CHECK_EQ_U64(work, 10);
    }
    for (int t = 1; t < 6; t += 2)
        TU_CHECK(retained_of(s, topics[t]) == 0, "%s: %" PRIu64 " consumed entries left after every topic's turn",
                 topics[t], retained_of(s, topics[t]));
    uint64_t left = 0;
    for (int t = 0; t < 6; t += 2)
        left += retained_of(s, topics[t]);
    CHECK_EQ_U64(left, 900 - (60 - 15));
    CHECK_STORE(s);
    CLOSE(&s);
}

/* A collection step looks at STORE_COLLECT_TOPICS topics at most, whatever
 * its budget, and the next step goes on from there: 600 topics, one
 * consumed entry each, are sampled and then collected in steps of at most
 * that many. */
static void test_topic_collect_topics_per_step(void)
{
    enum {
        NTOPICS = 600
    };
    store_t *s = OPEN_DEFAULT();
    msg_owned_t m[1];
    for (int t = 0; t < NTOPICS; t++) {
        char topic[16];
        snprintf(topic, sizeof topic, "t%d", t);
        GROUP_CREATE(s, topic, topic, 1, T0); /* group named as its topic */
        SEND(s, topic, "x", 0, 0, T0, NULL);
        int k = LEASE_N(s, topic, topic, 1, LEASE, T0, m);
        TU_REQUIRE(k == 1, "%s: leased %d", topic, k);
        ACK_LEASED(s, topic, m, k);
    }
    int steps = (NTOPICS + STORE_COLLECT_TOPICS - 1) / STORE_COLLECT_TOPICS;
    for (int i = 0; i < steps; i++) /* each topic's cursor sampled once */
        TU_CHECK(COLLECT(s, T0 + 1, SEC, 100000) == 0, "collected inside the grace");
    int total = 0;
    for (int i = 0; i < steps; i++) {
        int work = COLLECT(s, T0 + 1 + SEC, SEC, 100000);
        int want = NTOPICS - total < STORE_COLLECT_TOPICS ? NTOPICS - total : STORE_COLLECT_TOPICS;
        TU_CHECK(work == want, "step %d collected %d, want %d (one entry per topic looked at)", i, work, want);
        total += work;
    }
    CHECK_EQ_U64(total, NTOPICS);
    TU_CHECK(retained_of(s, "t0") == 0 && retained_of(s, "t599") == 0, "a consumed entry left");
    CHECK_STORE(s);
    CLOSE(&s);
}

static void test_topic_gc_retention(void)
{
    store_options_t o;
    opts_default(&o);
    o.retention_ms = 10 * SEC;
    store_t *s = OPEN(&o);
    uint64_t ids[6];
    for (int i = 0; i < 6; i++)
        ids[i] = SEND(s, "lonely", "x", 0, 0, T0 + (uint64_t)i * SEC, NULL);
    SEND(s, "later", "x", 1, 0, T0, NULL); /* enters its log at +1s */
    TU_CHECK(MAINTAIN(s, T0 + 10 * SEC - 1, 100) == 0, "nothing is past retention yet");
    MOVE(s, T0 + SEC, 10, NULL);
    /* at +12.5s the ones stamped at +0, +1s, +2s are past 10s retention */
    int work = MAINTAIN(s, T0 + 12 * SEC + 500, 100);
    TU_CHECK(work == 3 + 1, "maintain did %d, want 4 (3 of lonely, 1 of later)", work);
    store_topic_info_t ti;
    TU_REQUIRE(store_topic_info(s, "lonely", 6, &ti) == 1, "topic");
    TU_CHECK(ti.appended == 6 && ti.retained == 3, "appended %" PRIu64 " retained %" PRIu64, ti.appended, ti.retained);
    TU_CHECK(store_topic_info(s, "later", 5, &ti) == 1 && ti.retained == 0, "later retained %" PRIu64, ti.retained);
    CHECK_STORE(s);
    GROUP_CREATE(s, "g", "lonely", 1, T0 + 13 * SEC);
    CHECK_COUNTS(s, "g", 3, 3, 0, 0, 0, 0);
    msg_owned_t m[8];
    int n = LEASE_N(s, "g", "lonely", 8, LEASE, T0 + 13 * SEC, m);
    TU_REQUIRE(n == 3, "leased %d", n);
    TU_CHECK(m[0].m.id == ids[3] && m[2].m.id == ids[5], "from first after GC starts at %" PRIu64, m[0].m.id);
    free_msgs(m, n);
    /* once a group is bound, retention no longer collects what it has not read */
    uint64_t keep = SEND(s, "lonely", "y", 0, 0, T0 + 14 * SEC, NULL);
    MAINTAIN(s, T0 + DAY, 100);
    TU_CHECK(store_topic_info(s, "lonely", 6, &ti) == 1 && ti.retained == 1, "retained %" PRIu64, ti.retained);
    n = LEASE_N(s, "g", "lonely", 8, LEASE, T0 + DAY, m);
    TU_CHECK(n == 1 && m[0].m.id == keep, "unread message collected");
    free_msgs(m, n);
    CHECK_STORE(s);
}

static void check_topic_at(store_t *s, const char *topic, uint64_t delayed, uint64_t ready, uint64_t retained, int line)
{
    store_topic_info_t ti;
    TU_REQUIRE_AT(store_topic_info(s, topic, strlen(topic), &ti) == 1, line, "topic %s does not exist", topic);
    TU_CHECK_AT(ti.delayed == delayed && ti.ready == ready && ti.retained == retained, line,
                "topic %s: delayed %" PRIu64 " ready %" PRIu64 " retained %" PRIu64 ", want %" PRIu64 " %" PRIu64
                " %" PRIu64,
                topic, ti.delayed, ti.ready, ti.retained, delayed, ready, retained);
    check_store_at(s, line);
}
#define CHECK_TOPIC(s, t, delayed, ready, retained) check_topic_at((s), (t), (delayed), (ready), (retained), __LINE__)

/* A topic's delayed counter follows every move on and off the levels (SEND,
 * hops, arrival, REVOKE; a group's retry on a level is not the topic's),
 * survives a reopen, is counted once on a directory written before it, and
 * the checker names a wrong one. */
static void test_topic_delayed(void)
{
    store_t *s = OPEN_DEFAULT();
    SEND(s, "t", "a", 0, 25 * MIN, T0, NULL); /* 20m + 5m: hops once */
    SEND(s, "t", "b", 1, 0, T0, NULL);        /* level 1: 1s */
    uint64_t c = SEND(s, "t", "c", 0, 10 * SEC, T0, NULL);
    SEND(s, "t", "now", 0, 0, T0, NULL);
    SEND(s, "u", "x", 0, 10 * SEC, T0, NULL);
    SEND(s, "u", "y", 0, 10 * SEC, T0, NULL);
    CHECK_TOPIC(s, "t", 3, 1, 1); /* no group: every retained message is ready */
    CHECK_TOPIC(s, "u", 2, 0, 0); /* a topic named only by delayed SENDs exists */
    MOVE(s, T0 + SEC, 100, NULL);
    CHECK_TOPIC(s, "t", 2, 2, 2);
    GROUP_CREATE(s, "g", "t", 1, T0 + SEC);
    msg_owned_t m[4];
    int n = LEASE_N(s, "g", "t", 1, LEASE, T0 + SEC, m);
    TU_REQUIRE(n == 1, "leased %d", n);
    FAIL_LEVEL(s, "g", m[0].m.id, 3, "again", T0 + SEC, NULL); /* a retry on a level: g's, not t's */
    free_msgs(m, n);
    CHECK_TOPIC(s, "t", 2, 1, 2);
    store_revoke_result_t r;
    char err[512] = "";
    REQUIRE_OK(store_revoke_id(s, c, &r, err, sizeof err), err);
    CHECK_EQ_U64(r.from_delayed, 1);
    CHECK_TOPIC(s, "t", 1, 1, 2);
    MOVE(s, T0 + 20 * MIN, 100, NULL); /* a hops to the 5m level; u's arrive */
    CHECK_TOPIC(s, "t", 1, 1, 2);
    CHECK_TOPIC(s, "u", 0, 2, 2);
    CLOSE(&s);
    s = OPEN_DEFAULT();
    CHECK_TOPIC(s, "t", 1, 1, 2);
    CLOSE(&s);

    /* An older directory: topic records whose delayed counter is 0, no
     * marker; the counters are counted once at open. (The records keep the
     * rest of their bytes, their topic CQs: a directory old enough to have
     * 16-byte records has no topic CQ, design-commitlog.md 4b.) */
    char rec[RECORD_TOPIC_BYTES] = { 0 };
    size_t tlen, ulen;
    char *tv = RAW_REPLACE("Pt", 2, "", 0, &tlen);
    char *uv = RAW_REPLACE("Pu", 2, "", 0, &ulen);
    TU_REQUIRE(tlen == RECORD_TOPIC_BYTES && ulen == RECORD_TOPIC_BYTES, "topic records of %zu and %zu bytes", tlen,
               ulen);
    memcpy(rec, tv, tlen);
    memset(rec + 16, 0, 8);
    raw_put("Pt", 2, rec, tlen, __LINE__);
    memcpy(rec, uv, ulen);
    memset(rec + 16, 0, 8);
    raw_put("Pu", 2, rec, ulen, __LINE__);
    leveldb_free(tv);
    leveldb_free(uv);
    raw_put("Mtopic-delayed", 14, NULL, 0, __LINE__);
    s = OPEN_DEFAULT();
    CHECK_TOPIC(s, "t", 1, 1, 2);
    CHECK_TOPIC(s, "u", 0, 2, 2);
    CLOSE(&s);
    s = OPEN_DEFAULT(); /* marked: not counted again, the records are the new length */
    CHECK_TOPIC(s, "t", 1, 1, 2);
    CLOSE(&s);

    /* A wrong counter is named by the checker. */
    tv = RAW_REPLACE("Pt", 2, "", 0, &tlen);
    memcpy(rec, tv, tlen);
    leveldb_free(tv);
    rec[23] = 5;
    raw_put("Pt", 2, rec, tlen, __LINE__);
    s = OPEN_DEFAULT();
    CHECK_REFUSAL(store_check(s, err, sizeof err), err, "topic t delayed counter says 5", "levels hold 1");
    CLOSE(&s);
}

static void count_woken(void *ctx, const char *topic, size_t len)
{
    (void)topic;
    (void)len;
    (*(int *)ctx)++;
}

/* TOPIC DEL: only an empty topic goes (no group, nothing retained, nothing
 * on the levels; each refusal says which); a group of it being deleted is
 * deleted to the end first; the topic is gone after a reopen and in no
 * list of marked topics, and a SEND creates it again from scratch. */
static void test_topic_delete(void)
{
    store_t *s = OPEN_DEFAULT();
    char err[512] = "";
    store_topic_del_t out;
    store_topic_info_t why;
    REQUIRE_OK(store_topic_delete(s, "none", 4, &out, &why, err, sizeof err), err);
    TU_CHECK(out == STORE_TOPIC_UNKNOWN, "unknown topic: %d", (int)out);

    SEND(s, "kept", "x", 0, 0, T0, NULL); /* retained: no group, retention */
    SEND(s, "later", "y", 0, 5 * SEC, T0, NULL);
    GROUP_CREATE(s, "g", "bound", 1, T0);
    REQUIRE_OK(store_topic_delete(s, "kept", 4, &out, &why, err, sizeof err), err);
    TU_CHECK(out == STORE_TOPIC_IN_USE && why.retained == 1, "retained: %d, %" PRIu64, (int)out, why.retained);
    REQUIRE_OK(store_topic_delete(s, "later", 5, &out, &why, err, sizeof err), err);
    TU_CHECK(out == STORE_TOPIC_IN_USE && why.delayed == 1, "delayed: %d, %" PRIu64, (int)out, why.delayed);
    REQUIRE_OK(store_topic_delete(s, "bound", 5, &out, &why, err, sizeof err), err);
    TU_CHECK(out == STORE_TOPIC_IN_USE && why.groups == 1, "a group: %d, %d", (int)out, why.groups);

    /* a group holding leases of a message, deleted: it goes on being deleted in steps, holding the topic */
    SEND(s, "bound", "z", 0, 0, T0, NULL);
    msg_owned_t m[2];
    int n = LEASE_N(s, "g", "bound", 2, LEASE, T0, m);
    TU_REQUIRE(n == 1, "leased %d", n);
    free_msgs(m, n);
    int found = 0;
    REQUIRE_OK(store_group_delete(s, "g", 1, &found, err, sizeof err), err);
    COMMIT(s);
    REQUIRE_OK(store_topic_delete(s, "bound", 5, &out, &why, err, sizeof err), err);
    TU_CHECK(out == STORE_TOPIC_IN_USE && why.retained == 1 && why.groups == 0, "its message is retained: %d",
             (int)out);
    MAINTAIN(s, T0 + 100 * HOUR, 1000); /* past retention, and g's deletion done: the log is empty */
    CHECK_DELETING(s, 0, 0);

    /* its only group deleted while it holds a DLQ entry: that deletion is finished first */
    GROUP_CREATE(s, "h", "bound", 1, T0 + 100 * HOUR);
    SEND(s, "bound", "v", 0, 0, T0 + 100 * HOUR, NULL);
    n = LEASE_N(s, "h", "bound", 2, LEASE, T0 + 100 * HOUR, m);
    TU_REQUIRE(n == 1, "leased %d", n);
    FAIL_DLQ(s, "h", m[0].m.id, "bad", T0 + 100 * HOUR);
    free_msgs(m, n);
    MAINTAIN(s, T0 + 101 * HOUR, 1000); /* v leaves the log: only h's DLQ holds it */
    REQUIRE_OK(store_group_delete(s, "h", 1, &found, err, sizeof err), err);
    COMMIT(s);
    CHECK_DELETING(s, 1, 1);
    store_topic_info_t ti;
    TU_REQUIRE(store_topic_info(s, "bound", 5, &ti) == 1 && ti.retained == 0 && ti.delayed == 0 && ti.groups == 0,
               "bound is not empty yet: retained %" PRIu64, ti.retained);
    REQUIRE_OK(store_topic_delete(s, "bound", 5, &out, &why, err, sizeof err), err);
    TU_CHECK(out == STORE_TOPIC_DELETED, "the empty topic: %d", (int)out);
    CHECK_DELETING(s, 0, 0);
    TU_CHECK(store_topic_info(s, "bound", 5, &ti) == 0, "bound still there");
    COMMIT(s);
    CHECK_STORE(s);

    /* a topic only a group named, marked for blocked PULLs, deleted before anyone asked */
    GROUP_CREATE(s, "e", "fresh", 1, T0 + 200 * HOUR);
    REQUIRE_OK(store_group_delete(s, "e", 1, &found, err, sizeof err), err);
    REQUIRE_OK(store_topic_delete(s, "fresh", 5, &out, &why, err, sizeof err), err);
    TU_CHECK(out == STORE_TOPIC_DELETED, "fresh: %d", (int)out);
    int woken = 0;
    store_take_woken(s, count_woken, &woken); /* must not name the freed topic (ASan) */
    COMMIT(s);
    CHECK_STORE(s);
    CLOSE(&s);
    s = OPEN_DEFAULT();
    TU_CHECK(store_topic_info(s, "bound", 5, &ti) == 0 && store_topic_info(s, "fresh", 5, &ti) == 0,
             "a deleted topic came back after a reopen");
    TU_CHECK(store_topic_info(s, "kept", 4, &ti) == 1, "kept is gone");
    SEND(s, "bound", "u", 0, 0, T0 + 200 * HOUR, NULL);
    TU_CHECK(store_topic_info(s, "bound", 5, &ti) == 1 && ti.appended == 1 && ti.retained == 1,
             "sent to again: appended %" PRIu64, ti.appended);
    CHECK_STORE(s);
}

/* The number of topic's CQ (fatal when it has none). */
static uint32_t queue_of(store_t *s, const char *topic)
{
    topic_state_t *t = map_get(&s->topics, topic, strlen(topic));
    TU_REQUIRE(t != NULL && t->queue != 0, "topic %s and its CQ", topic);
    return t->queue;
}

/* Files of CQ queue in g_data, and (open 1) this process's descriptors on
 * them, deleted or not. */
static int queue_files(uint32_t queue, int open)
{
    char prefix[32];
    snprintf(prefix, sizeof prefix, "cq-%08" PRIx32 "-", queue);
    DIR *d = opendir(open ? "/proc/self/fd" : g_data);
    TU_REQUIRE(d != NULL, "opendir");
    struct dirent *e;
    int n = 0;
    while ((e = readdir(d)) != NULL) {
        char link[300], target[1200];
        ssize_t len = 0;
        if (open) {
            snprintf(link, sizeof link, "/proc/self/fd/%s", e->d_name);
            len = readlink(link, target, sizeof target - 1);
        }
        if (len >= 0) {
            target[len] = '\0';
            n += strstr(open ? target : e->d_name, prefix) != NULL;
        }
    }
    closedir(d);
    return n;
}

/* Topic "gone" sent n messages at T0, collected by the GC and deleted. */
static int send_collect_delete(store_t *s, int n, store_topic_del_t *out, char *err, size_t errlen)
{
    for (int i = 0; i < n; i++) {
        uint64_t id, due;
        if (send_raw(s, "gone", 4, NULL, 0, "x", 1, 0, 0, T0, &id, &due, err, errlen) != 0)
            return -1;
    }
    int work = 1;
    while (work > 0)
        if (store_commit(s, err, errlen) != 0 || store_maintain(s, T0 + 100 * HOUR, 1000, &work, err, errlen) != 0)
            return -1;
    return store_topic_delete(s, "gone", 4, out, NULL, err, errlen) != 0 ? -1 : store_commit(s, err, errlen);
}

/* A SEND finds its topic by comparing the name with the topic found last
 * (store_topic_get) before it asks the map: a topic deleted after SENDs
 * found it is forgotten there too, and the next SEND makes a new one, which
 * holds its message. */
static void test_topic_delete_then_send(void)
{
    store_t *s = OPEN_DEFAULT();
    char err[512] = "";
    store_topic_del_t out;
    REQUIRE_OK(send_collect_delete(s, 2, &out, err, sizeof err), err); /* the second SEND found it by name */
    TU_REQUIRE(out == STORE_TOPIC_DELETED, "gone: %d", (int)out);
    int held = s->topic_last == NULL; /* the topic remembered is one the map holds: compared as pointers */
    map_iter_t it = { 0 };
    void *v;
    while (!held && map_next(&s->topics, &it, NULL, NULL, &v)) {
        held = v == s->topic_last;
    }
    TU_CHECK(held, "store_topic_get still remembers the deleted topic");
    SEND(s, "gone", "again", 0, 0, T0 + 200 * HOUR, NULL);
    SEND(s, "gone", "and again", 0, 0, T0 + 200 * HOUR, NULL);
    COMMIT(s);
    store_topic_info_t ti;
    TU_REQUIRE(store_topic_info(s, "gone", 4, &ti) == 1, "the topic made again is not there");
    TU_CHECK(ti.appended == 2 && ti.retained == 2 && ti.sent == 2,
             "appended %" PRIu64 ", retained %" PRIu64 ", sent %" PRIu64 " (2 each)", ti.appended, ti.retained,
             ti.sent);
    CHECK_STORE(s);
    CLOSE(&s);
}

/* A deleted topic's CQ files go, closed, at the first checkpoint past its
 * delete's batch (not before: a redo from an older checkpoint writes them);
 * a topic of the same name made again gets a CQ and files of its own. */
static void test_topic_delete_cq_files(void)
{
    store_options_t o;
    opts_default(&o);
    o.checkpoint_bytes = STORE_CHECKPOINT_MIN_BYTES;
    store_t *s = OPEN(&o);
    char err[512] = "";
    SEND(s, "gone", "x", 0, 0, T0, NULL);
    uint32_t dead = queue_of(s, "gone");
    TU_REQUIRE(queue_files(dead, 0) == 1, "topic gone's CQ files: %d", queue_files(dead, 0));
    store_topic_del_t out;
    REQUIRE_OK(send_collect_delete(s, 9, &out, err, sizeof err), err);
    TU_REQUIRE(out == STORE_TOPIC_DELETED, "gone not deleted: %d", (int)out);
    REQUIRE_OK(store_log_make_durable(s, err, sizeof err), err);
    int held = queue_files(dead, 1);
    /* 200 kB commits to another topic, each synced and applied as the broker's syncer has them, until a
       checkpoint (every MiB of log applied) has passed the delete */
    static char big[200000];
    memset(big, 'p', sizeof big);
    int commits = 0;
    for (; commits < 12 && queue_files(dead, 0) > 0; commits++) {
        uint64_t id, due;
        REQUIRE_OK(send_raw(s, "pad", 3, NULL, 0, big, sizeof big, 0, 0, T0, &id, &due, err, sizeof err), err);
        COMMIT(s);
        REQUIRE_OK(store_log_make_durable(s, err, sizeof err), err);
    }
    printf("\n    a deleted topic's CQ: %d descriptors on its files at the delete; %d files, %d descriptors after %d "
           "commits of 200 kB ",
           held, queue_files(dead, 0), queue_files(dead, 1), commits);
    TU_CHECK(queue_files(dead, 0) == 0, "%d files of the deleted topic's CQ after 2.4 MB of log", queue_files(dead, 0));
    TU_CHECK(queue_files(dead, 1) == 0, "%d descriptors on the deleted topic's CQ files", queue_files(dead, 1));
    SEND(s, "gone", "again", 0, 0, T0, NULL);
    uint32_t again = queue_of(s, "gone");
    TU_CHECK(again != dead && queue_files(again, 0) == 1 && queue_files(dead, 0) == 0,
             "made again: CQ %08" PRIx32 " (was %08" PRIx32 "), %d files", again, dead, queue_files(again, 0));
    CHECK_STORE(s);
    CLOSE(&s);
    s = OPEN(&o);
    TU_CHECK(retained_of(s, "gone") == 1 && queue_files(dead, 0) == 0, "after a reopen: %" PRIu64 ", %d files",
             retained_of(s, "gone"), queue_files(dead, 0));
    CHECK_STORE(s);
    CLOSE(&s);
}

/* A clean close deletes the CQ files of a topic deleted since the last
 * checkpoint (the close's checkpoint covers the delete), so the next open
 * finds none to delete. */
static void test_topic_delete_cq_files_at_close(void)
{
    store_t *s = OPEN_DEFAULT();
    char err[512] = "";
    SEND(s, "gone", "x", 0, 0, T0, NULL);
    uint32_t dead = queue_of(s, "gone");
    store_topic_del_t out;
    REQUIRE_OK(send_collect_delete(s, 3, &out, err, sizeof err), err);
    TU_REQUIRE(out == STORE_TOPIC_DELETED, "gone not deleted: %d", (int)out);
    int before = queue_files(dead, 0); /* 1, unless a checkpoint (a second after the last) swept it first */
    CLOSE(&s);
    printf("\n    a topic deleted since the last checkpoint: %d files of its CQ before a clean close, %d after ",
           before, queue_files(dead, 0));
    TU_CHECK(queue_files(dead, 0) == 0, "%d files of the deleted topic's CQ after a clean close (%d before it)",
             queue_files(dead, 0), before);
    s = OPEN_DEFAULT();
    TU_CHECK(strstr(s->open_note, "deleted topics") == NULL, "the open after a clean close deleted files: %s",
             s->open_note);
    CHECK_STORE(s);
    CLOSE(&s);
}

/* crash_after_at's work: topic gone made, emptied, deleted, and a
 * checkpoint past the delete taken without the store's sweep (the crash
 * lands between the two). */
static int delete_then_checkpoint(store_t *c, char *err, size_t errlen)
{
    store_topic_del_t out;
    if (send_collect_delete(c, 3, &out, err, errlen) != 0 || store_log_make_durable(c, err, errlen) != 0)
        return -1;
    return out != STORE_TOPIC_DELETED ? -1 : redo_checkpoint(c->redo, err, errlen);
}

/* crash_after_at's work: topic gone made, emptied and deleted: no
 * checkpoint need cover it (the redo from an older one writes its CQ). */
static int delete_only(store_t *c, char *err, size_t errlen)
{
    store_topic_del_t out;
    return send_collect_delete(c, 3, &out, err, errlen);
}

/* A crash after work deleted topic gone, before its CQ files went (the
 * crash leaves them: files_left): the store opens and checks clean, the
 * dead CQ's files are gone after the open, and the topic made again gets a
 * CQ of its own. */
static void crash_after_topic_delete(crash_work_fn work, int files_left)
{
    CRASH_AFTER(work);
    uint32_t dead = STORE_TOPIC_QUEUE_GROWING; /* the first topic CQ of a new directory */
    TU_REQUIRE(!files_left || queue_files(dead, 0) == 1, "the crash left %d files of the deleted topic's CQ",
               queue_files(dead, 0));
    store_t *s = OPEN_DEFAULT();
    store_topic_info_t ti;
    TU_CHECK(store_topic_info(s, "gone", 4, &ti) == 0, "the deleted topic is back");
    TU_CHECK(queue_files(dead, 0) == 0, "%d files of the dead CQ after the open", queue_files(dead, 0));
    CHECK_STORE(s);
    SEND(s, "gone", "again", 0, 0, T0, NULL);
    TU_CHECK(queue_of(s, "gone") != dead, "made again on the dead CQ");
    CHECK_STORE(s);
    CLOSE(&s);
}

static void test_topic_delete_crash_after_checkpoint(void)
{
    crash_after_topic_delete(delete_then_checkpoint, 1);
}

static void test_topic_delete_crash_before_checkpoint(void)
{
    crash_after_topic_delete(delete_only, 0);
}

/* One purge step (fatal on a storage error); returns what it purged. */
static uint64_t purge_at(store_t *s, const char *topic, uint64_t *until, int max, int *done, store_topic_del_t *out,
                         int line)
{
    char err[512] = "";
    uint64_t purged = UINT64_MAX;
    int rc = store_topic_purge_step(s, topic, strlen(topic), until, max, &purged, done, out, NULL, err, sizeof err);
    TU_REQUIRE_AT(rc == 0, line, "store_topic_purge_step(%s): %s", topic, err);
    return purged;
}
#define PURGE(s, topic, until, max, done, out) purge_at((s), (topic), (until), (max), (done), (out), __LINE__)

/* TOPIC DEL … PURGE: the retained messages of a topic with no group go in
 * steps, with their index entries, up to where the purge started; a topic
 * with a group or with messages on the levels is refused untouched. */
static void test_topic_purge(void)
{
    store_t *s = OPEN_DEFAULT();
    char err[512] = "";
    store_topic_del_t out;
    store_topic_info_t ti;
    int done = 0;
    uint64_t until = 0;
    TU_CHECK(PURGE(s, "none", &until, 10, &done, &out) == 0 && out == STORE_TOPIC_UNKNOWN, "unknown: %d", (int)out);
    GROUP_CREATE(s, "g", "bound", 1, T0);
    SEND(s, "bound", "b", 0, 0, T0, NULL);
    SEND(s, "later", "l", 0, 5 * SEC, T0, NULL);
    until = 0;
    TU_CHECK(PURGE(s, "bound", &until, 10, &done, &out) == 0 && out == STORE_TOPIC_IN_USE, "a group: %d", (int)out);
    until = 0;
    TU_CHECK(PURGE(s, "later", &until, 10, &done, &out) == 0 && out == STORE_TOPIC_IN_USE, "delayed: %d", (int)out);
    TU_CHECK(store_topic_info(s, "bound", 5, &ti) == 1 && ti.retained == 1, "bound lost its message");

    for (int i = 0; i < 250; i++)
        SEND(s, "p", "x", 0, 0, T0, NULL); /* key "k" */
    COMMIT(s);
    until = 0;
    uint64_t total = PURGE(s, "p", &until, 100, &done, &out);
    TU_CHECK(total == 100 && !done && until > 0, "step 1: %" PRIu64 ", done %d", total, done);
    COMMIT(s);
    uint64_t kept = SEND(s, "p", "after the start", 0, 0, T0, NULL); /* past until: kept */
    for (int step = 2; !done && step < 10; step++) {
        total += PURGE(s, "p", &until, 100, &done, &out);
        COMMIT(s);
    }
    TU_CHECK(done && total == 250, "purged %" PRIu64 " of 250, done %d", total, done);
    /* the last step tried to delete the topic: the later message holds it */
    TU_CHECK(out == STORE_TOPIC_IN_USE, "the purge's end with the later message: %d", (int)out);
    TU_CHECK(store_topic_info(s, "p", 1, &ti) == 1 && ti.retained == 1, "retained after the purge: %" PRIu64,
             ti.retained);
    store_msg_view_t *views = NULL;
    int n = -1;
    REQUIRE_OK(store_msg_find(s, "p", 1, "k", 1, 1000, &views, &n, err, sizeof err), err);
    TU_CHECK(n == 1 && views[0].id == kept, "FIND p k after the purge: %d messages", n);
    for (int i = 0; i < n; i++)
        store_msg_view_free(&views[i]);
    free(views);
    CHECK_STORE(s); /* every index entry of a purged message went with it */
    REQUIRE_OK(store_topic_delete(s, "p", 1, &out, &ti, err, sizeof err), err);
    TU_CHECK(out == STORE_TOPIC_IN_USE && ti.retained == 1, "delete with the later message: %d", (int)out);
    until = 0;
    TU_CHECK(PURGE(s, "p", &until, 100, &done, &out) == 1 && done, "the second purge");
    TU_CHECK(out == STORE_TOPIC_DELETED, "the second purge deleted the topic: %d", (int)out);
    REQUIRE_OK(store_topic_delete(s, "p", 1, &out, &ti, err, sizeof err), err);
    TU_CHECK(out == STORE_TOPIC_UNKNOWN, "delete after the purges: %d", (int)out);
    COMMIT(s);
    CHECK_STORE(s);
    CLOSE(&s);
    s = OPEN_DEFAULT();
    TU_CHECK(store_topic_info(s, "p", 1, &ti) == 0, "p came back after a reopen");
    CHECK_STORE(s);
}

static int cmp_by_topic(const void *a, const void *b)
{
    const store_group_row_t *x = a, *y = b;
    int c = strcmp(x->info.topic, y->info.topic);
    return c ? c : strcmp(x->name, y->name);
}

/* store_topic_page, store_group_page and store_topic_group_rows pick what
 * the full sorted listings (a page of COUNT 0: every name, sorted whole,
 * not picked) hold at the same place: every COUNT, every AFTER (a name that
 * exists, one between two, one past the last, ""), groups per topic in name
 * order. */
static void test_topic_pages(void)
{
    store_t *s = OPEN_DEFAULT();
    unsigned seed = 12345;
    for (int i = 0; i < 240; i++) {
        char g[32], t[32];
        seed = seed * 1103515245u + 12345u;
        snprintf(g, sizeof g, "g%u-%d", (seed >> 8) % 997, i);
        snprintf(t, sizeof t, "t%u", (seed >> 16) % 61);
        GROUP_CREATE(s, g, t, 1, T0);
    }
    SEND(s, "lonely", "x", 0, 0, T0, NULL); /* a topic without groups */
    store_topic_row_t *all_t, *page_t;
    store_group_row_t *all_g, *page_g, *by_topic;
    size_t nt, ng, n, nb;
    store_topic_page(s, NULL, 0, &all_t, &nt);
    store_group_page(s, NULL, 0, &all_g, &ng);
    store_group_page(s, NULL, 0, &by_topic, &nb);
    qsort(by_topic, nb, sizeof *by_topic, cmp_by_topic);
    TU_REQUIRE(nt > 40 && ng == 240 && nb == 240, "%zu topics, %zu groups", nt, ng);
    const char *afters[] = { NULL, "", "g5", "g500-7", "lonely", "t3", "t30", "zz", all_t[nt / 2].name, all_g[7].name };
    const size_t counts[] = { 0, 1, 2, 10, 100, 1000 };
    for (size_t a = 0; a < sizeof afters / sizeof afters[0]; a++) {
        for (size_t c = 0; c < sizeof counts / sizeof counts[0]; c++) {
            const char *after = afters[a] != NULL ? afters[a] : "";
            size_t from = 0;
            while (from < nt && strcmp(all_t[from].name, after) <= 0) {
                from++;
            }
            size_t want = counts[c] == 0 || nt - from < counts[c] ? nt - from : counts[c];
            store_topic_page(s, afters[a], counts[c], &page_t, &n);
            TU_CHECK(n == want, "topics after '%s' count %zu: %zu, want %zu", after, counts[c], n, want);
            for (size_t i = 0; i < n && i < want; i++) {
                TU_CHECK(strcmp(page_t[i].name, all_t[from + i].name) == 0 &&
                             page_t[i].info.groups == all_t[from + i].info.groups &&
                             page_t[i].info.ready == all_t[from + i].info.ready,
                         "topic page after '%s' [%zu]: %s, want %s", after, i, page_t[i].name, all_t[from + i].name);
            }
            free(page_t);
            from = 0;
            while (from < ng && strcmp(all_g[from].name, after) <= 0) {
                from++;
            }
            want = counts[c] == 0 || ng - from < counts[c] ? ng - from : counts[c];
            store_group_page(s, afters[a], counts[c], &page_g, &n);
            TU_CHECK(n == want, "groups after '%s' count %zu: %zu, want %zu", after, counts[c], n, want);
            for (size_t i = 0; i < n && i < want; i++) {
                TU_CHECK(strcmp(page_g[i].name, all_g[from + i].name) == 0 &&
                             strcmp(page_g[i].info.topic, all_g[from + i].info.topic) == 0,
                         "group page after '%s' [%zu]: %s, want %s", after, i, page_g[i].name, all_g[from + i].name);
            }
            free(page_g);
        }
    }
    size_t k = 0;
    for (size_t i = 0; i < nt; i++) {
        store_topic_group_rows(s, all_t[i].name, strlen(all_t[i].name), &page_g, &n);
        TU_CHECK(n == (size_t)all_t[i].info.groups, "topic %s: %zu groups, want %d", all_t[i].name, n,
                 all_t[i].info.groups);
        for (size_t j = 0; j < n && k < nb; j++, k++) {
            TU_CHECK(strcmp(page_g[j].name, by_topic[k].name) == 0, "topic %s group %zu: %s, want %s", all_t[i].name, j,
                     page_g[j].name, by_topic[k].name);
        }
        free(page_g);
    }
    TU_CHECK(k == nb, "%zu groups by topic, want %zu", k, nb);
    store_topic_group_rows(s, "nope", 4, &page_g, &n);
    TU_CHECK(n == 0 && page_g == NULL, "an unknown topic has no groups");
    free(all_t);
    free(all_g);
    free(by_topic);
    CHECK_STORE(s);
}

/* ---- the topic walk's messages (levels/topic_walk.c) ---------------------------- */

/* The payload of walk message i: len bytes of a pattern of i and each
 * byte's place, so a view that slid in its buffer or into another message
 * shows. */
static void walk_payload(char *out, int i, size_t len)
{
    for (size_t j = 0; j < len; j++) {
        out[j] = (char)('a' + ((size_t)i * 7 + j) % 26);
    }
}

/* 1 when p holds walk message i's payload of len bytes. */
static int walk_payload_is(const msg_str_t *p, int i, size_t len)
{
    char want[4000];
    walk_payload(want, i, len);
    return p->len == len && memcmp(p->ptr, want, len) == 0;
}

/* Send walk message i (len bytes) on topic t at level with delay: its id. */
static uint64_t walk_send_at(store_t *s, int i, size_t len, int level, uint64_t delay_ms, uint64_t now, int line)
{
    char payload[4000];
    walk_payload(payload, i, len);
    uint64_t id = 0;
    char err[512] = "";
    int rc = send_raw(s, "t", 1, NULL, 0, payload, len, level, delay_ms, now, &id, NULL, err, sizeof err);
    TU_REQUIRE_AT(rc == 0, line, "send of walk message %d: %s", i, err);
    return id;
}
#define WALK_SEND(s, i, len, level, delay, now) walk_send_at((s), (i), (len), (level), (delay), (now), __LINE__)

/* What a walk of topic t must give, in order: where each message lies. */
enum walk_place {
    WALK_T_RANGE,
    WALK_CQ_RECORD,
    WALK_CQ_HELD_BY_T
};
typedef struct walk_expect {
    uint64_t id;
    size_t len;
    enum walk_place place;
} walk_expect_t;

#define WALK_MSGS 8

/* Topic t of g_data holds, in walk order: 4 messages as 'T' keys below its
 * CQ (a copy's, the format-6 layout: a BACKUP writes its topic CQ's messages
 * so), 2 in its CQ read from their records (3 000 bytes each: past half the
 * walk's 4 KiB log window, so each step refills it), 1 in its CQ held by its
 * 'T' key (on level 1 when copied: no record in the copy's log), 1 more from
 * its record. The store is left open. */
static store_t *walk_layout(walk_expect_t *x)
{
    char src[700];
    snprintf(src, sizeof src, "%s/src", g_dir);
    store_options_t o;
    opts_default(&o);
    o.path = src;
    store_t *s = OPEN(&o);
    for (int i = 0; i < 4; i++) {
        x[i] = (walk_expect_t){ WALK_SEND(s, i, 1000 + (size_t)i, 0, 0, T0), 1000 + (size_t)i, WALK_T_RANGE };
    }
    x[6] = (walk_expect_t){ WALK_SEND(s, 6, 900, 1, 0, T0), 900, WALK_CQ_HELD_BY_T };
    SNAPSHOT_COPY_TO(s, g_data);
    CLOSE(&s);
    s = OPEN_DEFAULT(); /* the copy */
    for (int i = 4; i < 6; i++) {
        x[i] = (walk_expect_t){ WALK_SEND(s, i, 3000, 0, 0, T0), 3000, WALK_CQ_RECORD };
    }
    TU_REQUIRE(MOVE(s, T0 + SEC, 10, NULL) == 1, "the message on level 1 does not arrive");
    x[7] = (walk_expect_t){ WALK_SEND(s, 7, 3000, 0, 0, T0 + SEC), 3000, WALK_CQ_RECORD };
    CHECK_STORE(s);
    return s;
}

/* The walk gives each message decoded where it lies (the iterator's value, a
 * point read's, the log reader's window), valid until its next step: a
 * message stays intact while its caller reads another entry of the log
 * through its own reader (lease_pend.c's pend_write does, in a lease walk),
 * copies it and stamps its fields; the copies stay intact after the walk.
 * Then the lease path: every message leased (held in memory), each lease
 * written by a NACK from its entry (topic_log_get), back as a retry with
 * its payload. */
static void test_walk_messages_until_the_next_step(void)
{
    walk_expect_t x[WALK_MSGS];
    store_t *s = walk_layout(x);
    topic_state_t *t = map_get(&s->topics, "t", 1);
    TU_REQUIRE(t != NULL && t->queue != 0, "topic t and its CQ");
    queue_walk_t w;
    queue_walk_topic(&w, s, t, 0);
    msg_owned_t kept[WALK_MSGS];
    memset(kept, 0, sizeof kept);
    uint64_t seqs[WALK_MSGS + 1]; /* one past: the step that gives one too many writes it */
    char err[512] = "";
    int n = 0, got;
    const char *key;
    size_t klen;
    while ((got = queue_walk_next(&w, &key, &klen, &seqs[n], "a topic log", err, sizeof err)) > 0) {
        TU_REQUIRE(n < WALK_MSGS, "the walk gave more than %d messages", WALK_MSGS);
        msg_t *m = queue_walk_msg(&w, err, sizeof err);
        TU_REQUIRE(m != NULL, "entry %d's message: %s", n, err);
        const walk_expect_t *e = &x[n];
        key_buf_t want;
        key_queue(&want, KEY_TOPIC_LOG, "t", 1, seqs[n]);
        TU_CHECK(klen == want.n && memcmp(key, want.b, klen) == 0, "entry %d's key is not t's log key of seq %" PRIx64,
                 n, seqs[n]);
        enum walk_place place = !w.given_cq ? WALK_T_RANGE : w.given_in_t ? WALK_CQ_HELD_BY_T : WALK_CQ_RECORD;
        TU_CHECK(m->id == e->id && place == e->place, "entry %d: id %" PRIu64 " at place %d, want %" PRIu64 " at %d", n,
                 m->id, (int)place, e->id, (int)e->place);
        TU_CHECK(walk_payload_is(&m->payload, n, e->len) && msg_str_is(&m->topic, "t"),
                 "entry %d as given: payload of %u bytes, topic of %u", n, m->payload.len, m->topic.len);
        /* what a caller may do before the next step */
        clog_reader_t rd = { 0 };
        char *held = NULL;
        msg_t other;
        int back = n > 0 ? n - 1 : 0;
        int found = topic_log_get(s, t, seqs[back], &rd, &held, &other, err, sizeof err);
        TU_CHECK(found == 1 && other.id == x[back].id && walk_payload_is(&other.payload, back, x[back].len),
                 "entry %d read again beside the walk: %d %s", back, found, err);
        free(held);
        clog_reader_free(&rd);
        msg_owned_copy(&kept[n], m);
        m->dest = MSG_DEST_GROUP; /* as store_lease_stamp does */
        m->group.ptr = "g";
        m->group.len = 1;
        TU_CHECK(walk_payload_is(&m->payload, n, e->len) && msg_str_is(&m->topic, "t"),
                 "entry %d changed before the next step", n);
        n++;
    }
    queue_walk_end(&w);
    TU_CHECK(got == 0 && n == WALK_MSGS, "the walk gave %d of %d messages (%d: %s)", n, WALK_MSGS, got, err);
    for (int i = 0; i < n; i++) {
        TU_CHECK(kept[i].m.id == x[i].id && walk_payload_is(&kept[i].m.payload, i, x[i].len) &&
                     msg_str_is(&kept[i].m.topic, "t") && kept[i].m.group.len == 0 && kept[i].m.key.len == 0,
                 "the copy of entry %d", i);
    }
    free_msgs(kept, n);
    CLOSE(&s);

    store_options_t o;
    opts_default(&o);
    o.lease_write_delay_ms = WRITE_DELAY;
    s = OPEN(&o);
    GROUP_CREATE(s, "g", "t", 1, T0 + SEC);
    msg_owned_t leased[WALK_MSGS];
    n = LEASE_N(s, "g", "t", WALK_MSGS, LEASE, T0 + SEC, leased);
    TU_REQUIRE(n == WALK_MSGS, "leased %d of %d", n, WALK_MSGS);
    CHECK_EQ_U64(store_leases_unwritten(s), WALK_MSGS);
    for (int i = 0; i < n; i++) {
        TU_CHECK(leased[i].m.id == x[i].id && walk_payload_is(&leased[i].m.payload, i, x[i].len),
                 "leased %d: id %" PRIu64 ", payload of %u bytes", i, leased[i].m.id, leased[i].m.payload.len);
        FAIL_LEVEL(s, "g", leased[i].m.id, 1, "again", T0 + SEC + 1, NULL); /* its held lease written first */
    }
    free_msgs(leased, n);
    CHECK_EQ_U64(store_leases_unwritten(s), 0);
    CHECK_STORE(s);
    MOVE(s, T0 + 2 * HOUR, 100, NULL);
    n = LEASE_N(s, "g", "t", WALK_MSGS, LEASE, T0 + 2 * HOUR, leased);
    TU_CHECK(n == WALK_MSGS, "%d of %d retries leased", n, WALK_MSGS);
    for (int i = 0; i < n; i++) {
        int at = 0;
        while (at < WALK_MSGS && x[at].id != leased[i].m.id) {
            at++;
        }
        TU_CHECK(at < WALK_MSGS && walk_payload_is(&leased[i].m.payload, at, x[at].len) && leased[i].m.reconsume == 1 &&
                     msg_str_is(&leased[i].m.reason, "again"),
                 "retry %d (id %" PRIu64 "): its payload, one failure", i, leased[i].m.id);
    }
    free_msgs(leased, n);
    CHECK_STORE(s);
    CLOSE(&s);
}

static const tu_test_t topic_tests[] = {
    { "info", test_topic_info },
    { "delayed counter", test_topic_delayed },
    { "gc by cursor", test_topic_gc_by_cursor },
    { "collect after a grace period", test_topic_collect_grace },
    { "collection takes the topics in turn", test_topic_collect_in_turn },
    { "a collection step looks at a bounded number of topics", test_topic_collect_topics_per_step },
    { "gc by retention", test_topic_gc_retention },
    { "delete an empty topic", test_topic_delete },
    { "a SEND after its topic's delete makes it again", test_topic_delete_then_send },
    { "a deleted topic's CQ files go at the checkpoint past its delete", test_topic_delete_cq_files },
    { "a deleted topic's CQ files go at a clean close", test_topic_delete_cq_files_at_close },
    { "a crash after a topic's delete and a checkpoint, before its CQ files went",
      test_topic_delete_crash_after_checkpoint },
    { "a crash after a topic's delete, before a checkpoint", test_topic_delete_crash_before_checkpoint },
    { "purge a topic's retained messages in steps", test_topic_purge },
    { "pages of topics and groups", test_topic_pages },
    { "a walk's messages stay intact until its next step", test_walk_messages_until_the_next_step },
    { NULL, NULL },
};

static const tu_suite_t suites[] = {
    { "topics", topic_tests },
};

int main(int argc, char **argv)
{
    return tu_suites_main(argc, argv, suites, sizeof suites / sizeof suites[0], store_fixture_setup,
                          store_fixture_teardown);
}
