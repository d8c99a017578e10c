/*
 * tests/unit/test_store_batching.c — CUnit suites "batching", "ids", "scale"
 * of the store package behind levels/store.h (DESIGN §1–3), through its public
 * calls (and raw LevelDB writes where a test corrupts a directory on purpose):
 * batching (and the memory a large batch returns, batches bounded in bytes,
 * range compactions on their own thread, woken topics), message ids, and
 * scale: 10^6 messages on one level, timed and printed, never asserted on time
 * (CONTRIBUTING.md, "Benchmarks").
 *
 * The fixture (tests/helpers/store_fixture.h): every test gets a fresh temp
 * directory and drives the store with an injected clock, every now_ms passed
 * explicitly from T0; after every step that mutates, store_check() must
 * return 0. Run alone: ./tests/unit/test_store_batching [suite [test]].
 */
#include "levels/compactor.h"
#include "levels/store.h"
#include "tests/helpers/store_fixture.h"
#include "tests/helpers/testutil.h"

#include <CUnit/CUnit.h>
#include <errno.h>
#include <inttypes.h>
#include <leveldb/c.h>
#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define OPEN_AT(o, now) open_at((o), (now), __LINE__)

/* ========================================================== suite: batching */

static void test_batching(void)
{
    store_t *s = OPEN_DEFAULT();
    TU_CHECK(store_pending(s) == 0, "fresh store has %d pending", store_pending(s));
    uint64_t first = 0, last = 0;
    int ids_increasing = 1;
    for (int i = 0; i < 500; i++) {
        uint64_t id = SEND(s, "t", "x", i % 2 ? 2 : 0, 0, T0, NULL);
        if (i == 0)
            first = id;
        if (i > 0 && id <= last)
            ids_increasing = 0;
        last = id;
    }
    /* each SEND: its CQ entry and slot (a level's, design-commitlog.md 4a.5, or its topic's, 4b: no 'T' entry,
       no message index record), its key index entry and that key's count; and the topic CQ's two meta records */
    TU_CHECK(store_pending(s) == 1502, "500 sends, %d pending operations", store_pending(s));
    TU_CHECK(!store_broken(s), "broken");
    COMMIT(s);
    TU_CHECK(store_pending(s) == 0, "after commit %d pending", store_pending(s));
    COMMIT(s); /* no-op */
    CHECK_EQ_U64(level_depth(s, 2), 250);
    CHECK_STORE(s);

    /* pending sends are seen by a read: store_lease commits first */
    for (int i = 0; i < 10; i++)
        SEND(s, "t", "y", 0, 0, T0 + 1, NULL);
    int pending = store_pending(s);
    TU_CHECK(pending >= 10, "pending %d", pending);
    static msg_owned_t m[300];
    int n = LEASE_N(s, "g", "t", 300, LEASE, T0 + 1, m);
    TU_CHECK(n == 260, "lease saw %d (250 + 10 pending)", n);
    TU_CHECK(n > 0 && m[0].m.id == first, "first leased is the first sent");
    free_msgs(m, n);
    TU_CHECK(ids_increasing, "ids of batched sends are not increasing");

    /* close commits what is pending: reopen sees it */
    uint64_t tail = SEND(s, "t", "z", 0, 0, T0 + 2, NULL);
    TU_CHECK(store_pending(s) > 0, "send is pending");
    CLOSE(&s);
    s = OPEN_DEFAULT();
    n = LEASE_N(s, "g", "t", 300, LEASE, T0 + 3, m);
    TU_CHECK(n == 1 && m[0].m.id == tail, "after close + reopen leased %d", n);
    free_msgs(m, n);
    CHECK_STORE(s);
}

/* Heap bytes in use (glibc's statistics), or 0 when they are not available or
 * do not see this process's allocations (a sanitizer's or valgrind's
 * allocator): an 8 MiB allocation must show. */
static size_t heap_in_use(void)
{
#if defined(__GLIBC__) && (__GLIBC__ > 2 || (__GLIBC__ == 2 && __GLIBC_MINOR__ >= 33))
    struct mallinfo2 mi = mallinfo2();
    return mi.uordblks + mi.hblkhd;
#else
    return 0;
#endif
}

static int heap_stats_work(void)
{
    enum {
        PROBE = 8 << 20
    };
    size_t before = heap_in_use();
    char *p = malloc(PROBE);
    if (p == NULL)
        return 0;
    memset(p, 1, PROBE);
    size_t during = heap_in_use();
    free(p);
    return before > 0 && during >= before + PROBE;
}

/* A large batch does not pin its memory after its commit: LevelDB's cleared
 * WriteBatch keeps the capacity of its largest contents (an earlier burst held
 * 710 MB), so the store replaces a batch that held more than a few MiB. 48 MiB
 * of payloads in one batch (64 MiB commit-log segments: a batch fits in one); after the commit and a compaction that takes the
 * memtable's copy out of the picture, the heap in use is back within 16 MiB of
 * where it was. Not measured (printed) where glibc's statistics do not see
 * the allocations (sanitizers, valgrind). */
static void test_large_batch_memory_returned(void)
{
    enum {
        PAYLOAD = 4 << 20,
        COUNT = 12,
        SLACK = 16 << 20
    };
    if (!heap_stats_work()) {
        printf("\n    heap statistics unavailable under this allocator: not measured ");
        return;
    }
    store_options_t o;
    opts_default(&o);
    o.segment_bytes = UINT64_C(64) << 20; /* a commit-log batch fits in one segment */
    store_t *s = OPEN(&o);
    SEND(s, "t", "x", 1, 0, T0, NULL); /* a level record, so the reopen owes a compaction of level 1 */
    CLOSE(&s);
    s = OPEN(&o);
    char *payload = malloc(PAYLOAD);
    TU_REQUIRE(payload != NULL, "malloc");
    memset(payload, 'p', PAYLOAD);
    size_t before = heap_in_use();
    char err[512] = "";
    for (int i = 0; i < COUNT; i++) {
        uint64_t id, due;
        REQUIRE_OK(send_raw(s, "t", 1, "", 0, payload, PAYLOAD, 0, 0, T0, &id, &due, err, sizeof err), err);
    }
    size_t batched = heap_in_use();
    COMMIT(s);
    int work = -1;
    /* max_deletes 0: no topic GC, only the owed compaction, which flushes the memtable first */
    REQUIRE_OK(store_maintain(s, T0, 0, &work, err, sizeof err), err);
    TU_CHECK(work >= 1, "store_maintain compacted nothing (work %d): the memtable still holds the batch", work);
    store_compact_wait(s);
    size_t after = heap_in_use();
    free(payload);
    printf("\n    heap in use: %.1f MiB before, %.1f MiB batched, %.1f MiB after the commit ",
           (double)before / (1 << 20), (double)batched / (1 << 20), (double)after / (1 << 20));
    TU_CHECK(batched >= before + (size_t)COUNT * PAYLOAD, "the batch did not show in the heap statistics");
    TU_CHECK(after < before + SLACK,
             "after the commit %.1f MiB more are in use than before: the batch kept its "
             "capacity",
             (double)(after - before) / (1 << 20));
    store_topic_info_t ti;
    TU_CHECK(store_topic_info(s, "t", 1, &ti) == 1 && ti.appended == COUNT, "topic holds %" PRIu64, ti.appended);
    CHECK_STORE(s);
}

/* A batch is bounded in bytes (STORE_BATCH_MAX_BYTES): 12 due messages of
 * 1 MiB are moved leaving at most the bound plus one message pending (their
 * arrivals copy nothing since 4b: one call), and a step of DLQ REQUEUE ALL of 12 such messages stops
 * there too (and commits), so it never holds more either; every counter stays
 * right (CHECK_STORE). */
static void test_batch_bounded_in_bytes(void)
{
    enum {
        PAYLOAD = 1 << 20,
        COUNT = 12
    };
    const uint64_t most = STORE_BATCH_MAX_BYTES + PAYLOAD + 4096; /* one message over the bound, and its records */
    store_t *s = OPEN_DEFAULT();
    char *payload = malloc(PAYLOAD);
    TU_REQUIRE(payload != NULL, "malloc");
    memset(payload, 'p', PAYLOAD);
    char err[512] = "";
    for (int i = 0; i < COUNT; i++) {
        uint64_t id, due;
        REQUIRE_OK(send_raw(s, "t", 1, "", 0, payload, PAYLOAD, 1, 0, T0, &id, &due, err, sizeof err), err);
    }
    COMMIT(s);
    GROUP_CREATE(s, "g", "t", 1, T0);
    int moved_total = 0, calls = 0;
    while (moved_total < COUNT && calls < 2 * COUNT) {
        int moved = MOVE(s, T0 + 2 * SEC, 1000, NULL);
        calls++;
        TU_CHECK(moved >= 1, "call %d moved nothing with due heads left", calls);
        TU_CHECK(store_pending_bytes(s) <= most, "call %d left %" PRIu64 " bytes pending (bound %" PRIu64 ")", calls,
                 store_pending_bytes(s), (uint64_t)STORE_BATCH_MAX_BYTES);
        moved_total += moved;
        COMMIT(s);
    }
    /* an arrival copies nothing into the batch (design-commitlog.md 4b: a topic CQ entry), so the moves need
       not split; what bounds them is each call's pending bytes, checked above */
    TU_CHECK(moved_total == COUNT, "%d of %d moved in %d calls", moved_total, COUNT, calls);
    CHECK_COUNTS(s, "g", COUNT, COUNT, 0, 0, 0, 0);

    msg_owned_t m[COUNT];
    int n = LEASE_N(s, "g", "t", COUNT, LEASE, T0 + 3 * SEC, m);
    TU_REQUIRE(n == COUNT, "leased %d of %d", n, COUNT);
    for (int i = 0; i < n; i++)
        FAIL_DLQ(s, "g", m[i].m.id, "bad", T0 + 3 * SEC);
    free_msgs(m, n);
    COMMIT(s);
    CHECK_COUNTS(s, "g", 0, 0, 0, 0, 0, COUNT);
    store_dlq_walk_t walk = { .requeue = 1 };
    int steps = 0;
    while (!walk.done && steps < 2 * COUNT) {
        uint64_t before = walk.count;
        REQUIRE_OK(store_dlq_walk_step(s, "g", 1, &walk, 1000, T0 + 4 * SEC, err, sizeof err), err);
        steps++;
        uint64_t took = walk.count - before;
        TU_CHECK(walk.done || (took >= 1 && took * PAYLOAD <= most), "DLQ REQUEUE ALL step %d took %" PRIu64, steps,
                 took);
        CHECK_EQ_U64(store_pending_bytes(s), 0); /* each step commits its own */
    }
    CHECK_EQ_U64(walk.count, COUNT);
    TU_CHECK(walk.done && steps >= 3, "DLQ REQUEUE ALL in %d steps (want several)", steps);
    CHECK_COUNTS(s, "g", COUNT, 0, COUNT, 0, 0, 0);
    CHECK_STORE(s);
    CLOSE(&s);
    s = OPEN_DEFAULT(); /* what the intermediate commits wrote adds up */
    CHECK_COUNTS(s, "g", COUNT, 0, COUNT, 0, 0, 0);
    CHECK_STORE(s);
    free(payload);
}

/* store_take_woken names each topic that may have gained messages ready for
 * a group once: appends (at once and when due), a retry made ready (NACK,
 * DLQ REQUEUE), a group created or deleted; a lease, an ACK or a delayed SEND
 * not yet due mark nothing. */
typedef struct woken_names {
    char names[8][16];
    int n;
} woken_names_t;

static void note_woken(void *ctx, const char *topic, size_t len)
{
    woken_names_t *w = ctx;
    if (w->n < 8)
        snprintf(w->names[w->n], sizeof w->names[0], "%.*s", (int)len, topic);
    w->n++;
}

static const char *take_woken(store_t *s, char *out, size_t outlen)
{
    woken_names_t w = { .n = 0 };
    store_take_woken(s, note_woken, &w);
    out[0] = '\0';
    for (int i = 0; i < w.n && i < 8; i++)
        snprintf(out + strlen(out), outlen - strlen(out), "%s%s", i ? "," : "", w.names[i]);
    return out;
}

static void test_woken_topics(void)
{
    store_t *s = OPEN_DEFAULT();
    char b[200];
    take_woken(s, b, sizeof b); /* whatever opening marked */
    SEND(s, "a", "x", 0, 0, T0, NULL);
    SEND(s, "a", "y", 0, 0, T0, NULL);
    SEND(s, "b", "z", 1, 0, T0, NULL); /* delayed: nothing ready yet */
    TU_CHECK(strcmp(take_woken(s, b, sizeof b), "a") == 0, "after SENDs: '%s', want 'a'", b);
    TU_CHECK(strcmp(take_woken(s, b, sizeof b), "") == 0, "taken twice: '%s'", b);
    TU_CHECK(MOVE(s, T0 + 2 * SEC, 100, NULL) == 1, "the delayed message did not move");
    TU_CHECK(strcmp(take_woken(s, b, sizeof b), "b") == 0, "after the due move: '%s', want 'b'", b);
    GROUP_CREATE(s, "gc", "c", 1, T0);
    TU_CHECK(strcmp(take_woken(s, b, sizeof b), "c") == 0, "after GROUP CREATE: '%s', want 'c'", b);
    msg_owned_t m[4];
    int n = LEASE_N(s, "g", "a", 4, LEASE, T0 + 3 * SEC, m); /* creates g: marks a */
    TU_REQUIRE(n == 2, "leased %d", n);
    take_woken(s, b, sizeof b);
    ACK(s, "g", &m[0].m.id, 1);
    TU_CHECK(strcmp(take_woken(s, b, sizeof b), "") == 0, "after a lease and an ACK: '%s', want nothing", b);
    FAIL_DLQ(s, "g", m[1].m.id, "bad", T0 + 3 * SEC);
    TU_CHECK(strcmp(take_woken(s, b, sizeof b), "") == 0, "after a failure to the DLQ: '%s', want nothing", b);
    char err[512] = "";
    uint64_t cnt = 0;
    REQUIRE_OK(store_dlq_requeue(s, "g", 1, 0, 1, T0 + 4 * SEC, &cnt, err, sizeof err), err);
    TU_CHECK(cnt == 1 && strcmp(take_woken(s, b, sizeof b), "a") == 0, "after DLQ REQUEUE: '%s', want 'a'", b);
    int found = 0;
    REQUIRE_OK(store_group_delete(s, "g", 1, &found, err, sizeof err), err);
    TU_CHECK(found && strcmp(take_woken(s, b, sizeof b), "a") == 0, "after GROUP DEL: '%s', want 'a'", b);
    free_msgs(m, n);
    CHECK_STORE(s);
}

/* The number of table files at level of db (a LevelDB property). */
static int files_at_level(leveldb_t *db, int level)
{
    char name[64];
    snprintf(name, sizeof name, "leveldb.num-files-at-level%d", level);
    char *v = leveldb_property_value(db, name);
    int n = v != NULL ? atoi(v) : -1;
    leveldb_free(v);
    return n;
}

/* The compaction thread: a queued range is compacted by the time
 * compactor_wait returns (the memtable written out and pushed below level
 * 0), and free with nothing queued, or right after an add, is clean. */
static void test_compactor(void)
{
    char *dberr = NULL;
    leveldb_options_t *lo = leveldb_options_create();
    leveldb_options_set_create_if_missing(lo, 1);
    leveldb_t *db = leveldb_open(lo, g_data, &dberr);
    TU_REQUIRE(dberr == NULL, "leveldb_open: %s", dberr ? dberr : "");
    leveldb_writeoptions_t *wo = leveldb_writeoptions_create();
    char key[16], val[100];
    memset(val, 'v', sizeof val);
    for (int i = 0; i < 10000; i++) {
        int klen = snprintf(key, sizeof key, "k%08d", i);
        leveldb_put(db, wo, key, (size_t)klen, val, sizeof val, &dberr);
        TU_REQUIRE(dberr == NULL, "put: %s", dberr);
        if (i % 2 == 0) {
            leveldb_delete(db, wo, key, (size_t)klen, &dberr);
            TU_REQUIRE(dberr == NULL, "delete: %s", dberr);
        }
    }
    int tables = 0;
    for (int l = 0; l < 7; l++)
        tables += files_at_level(db, l);
    TU_CHECK(tables == 0, "%d tables before the compaction: the memtable should hold everything", tables);
    char err[256] = "";
    compactor_t *c = compactor_new(db, err, sizeof err);
    TU_REQUIRE(c != NULL, "compactor_new: %s", err);
    compactor_wait(c); /* nothing queued: returns at once */
    TU_CHECK(compactor_add(c, "k", 1, "l", 1) == 1, "the range was not queued");
    compactor_wait(c);
    int below = 0;
    for (int l = 1; l < 7; l++)
        below += files_at_level(db, l);
    TU_CHECK(files_at_level(db, 0) == 0 && below > 0, "after the wait: %d tables at level 0, %d below",
             files_at_level(db, 0), below);
    TU_CHECK(compactor_add(c, "k", 1, "l", 1) == 1, "the second range was not queued");
    compactor_free(c); /* waits for a compaction in progress; a queued one is dropped */
    compactor_free(NULL);
    leveldb_writeoptions_destroy(wo);
    leveldb_close(db);
    leveldb_options_destroy(lo);
}

/* =============================================================== suite: ids */

static void test_ids(void)
{
    char buf[17];
    uint64_t v = 0;
    const uint64_t samples[] = { 0, 1, 15, 16, 0xdeadbeef, UINT64_C(0x0123456789abcdef), UINT64_MAX };
    for (size_t i = 0; i < sizeof samples / sizeof samples[0]; i++) {
        store_id_format(samples[i], buf);
        TU_CHECK(strlen(buf) == 16, "format %" PRIu64 " -> \"%s\"", samples[i], buf);
        for (int j = 0; j < 16; j++)
            TU_CHECK((buf[j] >= '0' && buf[j] <= '9') || (buf[j] >= 'a' && buf[j] <= 'f'), "not lower hex: %s", buf);
        v = 1;
        TU_CHECK(store_id_parse(buf, 16, &v) == 0 && v == samples[i], "round trip %" PRIu64 " -> %s -> %" PRIu64,
                 samples[i], buf, v);
    }
    /* every digit value in every position, then a sweep of scattered ids:
     * the same text as printf's */
    uint64_t x = UINT64_C(0x9e3779b97f4a7c15);
    char want[17], first_wrong[40] = "";
    int wrong = 0;
    for (int i = 0; i < 16 * 16 + 100000; i++) {
        uint64_t id = i < 256 ? (uint64_t)(i % 16) << (4 * (i / 16)) : (x ^= x << 13, x ^= x >> 7, x ^= x << 17);
        snprintf(want, sizeof want, "%016" PRIx64, id);
        store_id_format(id, buf);
        if (strcmp(buf, want) != 0 && wrong++ == 0)
            snprintf(first_wrong, sizeof first_wrong, "%s -> %s", want, buf);
    }
    TU_CHECK(wrong == 0, "%d ids formatted wrong, the first %s", wrong, first_wrong);
    store_id_format(UINT64_C(0x0123456789abcdef), buf);
    TU_CHECK(strcmp(buf, "0123456789abcdef") == 0, "format: %s", buf);
    store_id_format(42, buf);
    TU_CHECK(strcmp(buf, "000000000000002a") == 0, "format 42: %s", buf);
    TU_CHECK(store_id_parse("000000000000002A", 16, &v) == 0 && v == 42, "upper case");
    v = 7;
    /* exactly 16 digits: the short forms (1..15 digits) are refused too */
    const char *bad[] = { "",
                          "00000000000000000",
                          "xyz",
                          "12 3",
                          "-1",
                          "0x10",
                          "1g",
                          "+1",
                          "2a",
                          "00000000000002a",
                          "0x0000000000002a",
                          "000000000000002g" };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        TU_CHECK(store_id_parse(bad[i], strlen(bad[i]), &v) == -1, "\"%s\" parsed", bad[i]);
    TU_CHECK(store_id_parse("1\0002", 3, &v) == -1, "embedded NUL parsed");
    TU_CHECK(v == 7, "a failed parse changed the output to %" PRIu64, v);
    /* the length given is what is parsed: a 16-digit prefix of a longer text */
    TU_CHECK(store_id_parse("00000000000000ffzz", 16, &v) == 0 && v == 255, "prefix parse");
}

/* Ids are log offsets (design-commitlog.md §2): the log starts at the clock's
 * floor (store_seq_floor), the first segment boundary at or above it, and an
 * id is its record's offset, so ids grow by a record's bytes; a clock set back
 * never takes them down, a clock gone forward raises them to its floor, and a
 * clock past what ids can be drawn from is refused before anything is made. */
static void test_ids_clock_floor(void)
{
    store_options_t o;
    opts_default(&o);
    store_t *s = OPEN_AT(&o, T0);
    uint64_t next = store_next_seq(s); /* past the open's own batches, in the floor's segment */
    TU_CHECK(next >= store_seq_floor(T0) && next - store_seq_floor(T0) < o.segment_bytes,
             "next id %" PRIx64 " for floor %" PRIx64, next, store_seq_floor(T0));
    uint64_t first = SEND(s, "t", "x", 0, 0, T0, NULL);
    uint64_t second = SEND(s, "t", "x", 0, 0, T0, NULL);
    TU_CHECK(first >= next && first - next < 256, "first id %" PRIx64 " after next %" PRIx64, first, next);
    TU_CHECK(second > first && second - first < 256, "ids %" PRIx64 ", %" PRIx64 ": not one record apart", first,
             second);
    COMMIT(s);
    CLOSE(&s);

    s = OPEN_AT(&o, T0 - HOUR); /* the clock set back an hour */
    uint64_t third = SEND(s, "t", "x", 0, 0, T0 - HOUR, NULL);
    TU_CHECK(third > second, "after the clock went back an hour: id %" PRIx64 " after %" PRIx64, third, second);
    COMMIT(s);
    CLOSE(&s);

    s = OPEN_AT(&o, T0 + DAY);
    CHECK_EQ_U64(store_next_seq(s), store_seq_floor(T0 + DAY));
    uint64_t fourth = SEND(s, "t", "x", 0, 0, T0 + DAY, NULL);
    TU_CHECK(fourth > store_seq_floor(T0 + DAY) && fourth - store_seq_floor(T0 + DAY) < o.segment_bytes + 256,
             "the first id a day later %" PRIx64 " is not in the segment at its floor %" PRIx64, fourth,
             store_seq_floor(T0 + DAY));
    CHECK_STORE(s);
    CLOSE(&s);

    /* the floor fits 64 bits up to STORE_SEQ_CLOCK_MAX_MS, not past it */
    CHECK_EQ_U64(store_seq_floor(STORE_SEQ_CLOCK_MAX_MS) >> STORE_SEQ_CLOCK_BITS, STORE_SEQ_CLOCK_MAX_MS);
    char fresh[700], err[512] = "";
    snprintf(fresh, sizeof fresh, "%s/never", g_dir);
    o.path = fresh;
    store_t *x = NULL;
    int rc = store_open(&o, STORE_SEQ_CLOCK_MAX_MS + 1, &x, err, sizeof err);
    CHECK_REFUSAL(rc, err, "past the year 2527", fresh);
    struct stat st;
    TU_CHECK(x == NULL && stat(fresh, &st) != 0, "a refused open made %s", fresh);
}

/* A copy of a store taken earlier (BACKUP's snapshot copy) carries the
 * counter as it was then. Put back in place of the data directory and
 * opened later, it hands out ids (and queue positions, group generations)
 * above every number the original took after the copy, across a restart of
 * the original too; and an id the original gave after the copy is gone in
 * it, never another message's. */
static void test_ids_after_restore(void)
{
    store_options_t o;
    opts_default(&o);
    store_t *s = OPEN_AT(&o, T0);
    fill_mixed(s);
    char err[512] = "", copy[700];
    store_snapshot_t *sn = store_snapshot_take(s, err, sizeof err);
    TU_REQUIRE(sn != NULL, "store_snapshot_take: %s", err);
    snprintf(copy, sizeof copy, "%s/copy", g_dir);
    int rc = store_snapshot_copy(sn, copy, NULL, NULL, NULL, err, sizeof err);
    store_snapshot_release(sn);
    TU_REQUIRE(rc == 0, "store_snapshot_copy: %s", err);

    /* the original goes on after the copy: SENDs, a group, a retry, a restart, more SENDs */
    enum {
        AFTER = 300
    };
    static uint64_t after[2 * AFTER];
    int n = 0;
    for (int i = 0; i < AFTER; i++)
        after[n++] = SEND(s, "t", "after the copy", i % 3, 0, T0 + SEC, NULL);
    GROUP_CREATE(s, "g2", "t", 1, T0 + SEC);
    msg_owned_t m[1];
    TU_REQUIRE(LEASE_N(s, "g2", "t", 1, LEASE, T0 + SEC, m) == 1, "lease from g2");
    FAIL_LEVEL(s, "g2", m[0].m.id, 1, "retry", T0 + SEC, NULL);
    free_msgs(m, 1);
    COMMIT(s);
    CLOSE(&s);
    s = OPEN_AT(&o, T0 + MIN);
    for (int i = 0; i < AFTER; i++)
        after[n++] = SEND(s, "t", "after the restart", i % 3, 0, T0 + MIN, NULL);
    COMMIT(s);
    uint64_t high = store_next_seq(s); /* every number the original took is below it */
    CLOSE(&s);

    /* restore: the copy in place of the data directory, started a minute later */
    char old[700];
    snprintf(old, sizeof old, "%s.old", g_data);
    TU_REQUIRE(rename(g_data, old) == 0 && rename(copy, g_data) == 0, "rename: %s", strerror(errno));
    s = OPEN_AT(&o, T0 + 2 * MIN);
    CHECK_STORE(s);
    TU_CHECK(store_next_seq(s) >= high, "the restored counter %" PRIx64 " is below the original's %" PRIx64,
             store_next_seq(s), high);
    /* what the restored store hands out is above all of it */
    uint64_t id = SEND(s, "t", "after the restore", 0, 0, T0 + 2 * MIN, NULL);
    uint64_t delayed = SEND(s, "t", "after the restore", 2, 0, T0 + 2 * MIN, NULL);
    GROUP_CREATE(s, "g3", "t", 0, T0 + 2 * MIN);
    TU_CHECK(id >= high && delayed > id, "ids after the restore %" PRIx64 ", %" PRIx64 " not above %" PRIx64, id,
             delayed, high);
    for (int i = 0; i < n; i++)
        TU_CHECK(after[i] != id && after[i] != delayed, "id %" PRIx64 " handed out twice", after[i]);
    /* and the ids the original gave after the copy name nothing in it: GET says gone, REVOKE refuses */
    int shown = 0;
    for (int i = 0; i < n; i++) {
        store_msg_view_t v;
        TU_REQUIRE(store_msg_get(s, after[i], 0, &v, err, sizeof err) == 0, "store_msg_get: %s", err);
        if (v.state != STORE_MSG_GONE && shown++ < 3)
            TU_CHECK(0, "id %" PRIx64 ", sent after the copy, names a message in it (%s)", after[i],
                     store_msg_state_name(v.state));
        store_msg_view_free(&v);
    }
    store_revoke_result_t r;
    TU_REQUIRE(store_revoke_id(s, after[0], &r, err, sizeof err) == 0, "store_revoke_id: %s", err);
    TU_CHECK(r.revoked == 0 && r.nrefused == 1 && strcmp(r.refused[0].reason, "gone") == 0,
             "REVOKE of an id sent after the copy: revoked %" PRIu64 ", refused %d (%s)", r.revoked, r.nrefused,
             r.nrefused > 0 ? r.refused[0].reason : "");
    COMMIT(s);
    CHECK_STORE(s);
    CLOSE(&s);
    /* the raised counter was written: a reopen with the clock back at the restore's goes on above it */
    s = OPEN_AT(&o, T0 + 2 * MIN);
    uint64_t next = SEND(s, "t", "x", 0, 0, T0 + 2 * MIN, NULL);
    TU_CHECK(next > delayed, "after a reopen: id %" PRIx64 " after %" PRIx64, next, delayed);
    COMMIT(s);
    CHECK_STORE(s);
}

/* ============================================================= suite: scale */

static int scan_topic_order(void *ctx, const store_entry_t *e)
{
    uint64_t *st = ctx; /* [0] count, [1] last id, [2] out of order, [3] last seq */
    if (e->range != STORE_TOPIC)
        return 0;
    if (st[0] > 0 && (e->m->id <= st[1] || e->seq <= st[3]))
        st[2]++;
    st[0]++;
    st[1] = e->m->id;
    st[3] = e->seq;
    return 0;
}

static void test_million_on_one_level(void)
{
    enum {
        N = 1000000,
        COMMIT_EVERY = 10000,
        CHUNK = 20000
    };
    store_t *s = OPEN_DEFAULT();
    uint64_t t_start = tu_now_mono_ms();
    char payload[16];
    uint64_t prev = 0;
    int id_order_bad = 0;
    for (int i = 0; i < N; i++) {
        snprintf(payload, sizeof payload, "%d", i);
        uint64_t id = SEND(s, "bulk", payload, 1, 0, T0 + (uint64_t)(i / 1000), NULL);
        if (id <= prev)
            id_order_bad++;
        prev = id;
        if ((i + 1) % COMMIT_EVERY == 0)
            COMMIT(s);
    }
    uint64_t t_sent = tu_now_mono_ms();
    TU_CHECK(id_order_bad == 0, "%d ids not increasing at send", id_order_bad);
    CHECK_EQ_U64(level_depth(s, 1), N);
    CHECK_EQ_U64(store_next_due(s), T0 + SEC);
    /* a partial move first: only what is due at +1s+499 (the first 500 000) */
    int total = 0, moved, ready, calls = 0;
    while ((moved = MOVE(s, T0 + SEC + 499, CHUNK, &ready)) > 0) {
        total += moved;
        calls++;
    }
    TU_CHECK(total == 500000, "moved %d due by +1.499s, want 500000", total);
    CHECK_EQ_U64(store_next_due(s), T0 + SEC + 500);
    while ((moved = MOVE(s, T0 + HOUR, CHUNK, &ready)) > 0) {
        TU_CHECK(moved <= CHUNK, "moved %d > chunk", moved);
        total += moved;
        calls++;
    }
    uint64_t t_moved = tu_now_mono_ms();
    TU_CHECK(total == N, "moved %d, want %d", total, N);
    CHECK_EQ_U64(level_depth(s, 1), 0);
    CHECK_EQ_U64(store_next_due(s), UINT64_MAX);
    store_topic_info_t ti;
    TU_CHECK(store_topic_info(s, "bulk", 4, &ti) == 1 && ti.appended == N && ti.retained == N,
             "topic appended %" PRIu64, ti.appended);
    uint64_t st[4] = { 0, 0, 0, 0 };
    char err[512] = "";
    REQUIRE_OK(store_scan(s, scan_topic_order, st, err, sizeof err), err);
    TU_CHECK(st[0] == N, "scan saw %" PRIu64 " topic entries", st[0]);
    TU_CHECK(st[2] == 0, "%" PRIu64 " topic entries out of id order", st[2]);
    uint64_t t_scanned = tu_now_mono_ms();
    CHECK_STORE(s);
    uint64_t t_checked = tu_now_mono_ms();
    int work = MAINTAIN(s, T0 + HOUR, 1000000);
    uint64_t t_end = tu_now_mono_ms();
    printf("\n    10^6 on level 1: send+commit %.2f s, move (%d calls) %.2f s, scan %.2f s, check %.2f s, "
           "maintain (%d) %.2f s ",
           (double)(t_sent - t_start) / 1000, calls, (double)(t_moved - t_sent) / 1000,
           (double)(t_scanned - t_moved) / 1000, (double)(t_checked - t_scanned) / 1000, work,
           (double)(t_end - t_checked) / 1000);
    TU_CHECK(work >= 1, "maintain should compact the consumed level range (work %d)", work);
}

static const tu_test_t batching_tests[] = {
    { "batching", test_batching },
    { "large batch memory returned", test_large_batch_memory_returned },
    { "range compactions on their own thread", test_compactor },
    { "batches bounded in bytes", test_batch_bounded_in_bytes },
    { "woken topics", test_woken_topics },
    { NULL, NULL },
};

static const tu_test_t id_tests[] = {
    { "format and parse", test_ids },
    { "the counter starts at the clock's floor and never goes down", test_ids_clock_floor },
    { "a copy restored later hands out no id twice", test_ids_after_restore },
    { NULL, NULL },
};

static const tu_test_t scale_tests[] = {
    { "10^6 messages on one level", test_million_on_one_level },
    { NULL, NULL },
};

static const tu_suite_t suites[] = {
    { "batching", batching_tests },
    { "ids", id_tests },
    { "scale", scale_tests },
};

int main(int argc, char **argv)
{
    return tu_suites_main(argc, argv, suites, sizeof suites / sizeof suites[0], store_fixture_setup,
                          store_fixture_teardown);
}
