/*
 * tests/unit/test_cq.c — CUnit suites for the consume queues (levels/cq.h) and
 * the where-slot files (levels/slot.h), over their shared positional file
 * layer (levels/fixfile.h). docs/design-commitlog.md §2, step 2 of §10.
 *
 * Every test gets a fresh temp directory. Entries and slots are made from
 * their index by a formula (entry_at, slot_at), so a read checks every field
 * of every entry against what was written, wherever it came from: the append
 * buffer, the file, a file made by the switch, or a reopened file. Bad inputs
 * are checked for the error's words (the file, the index, the problem).
 */
#include "levels/cq.h"
#include "levels/slot.h"
#include "tests/helpers/testutil.h"

#include <CUnit/CUnit.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define QUEUE UINT32_C(7)

static char dir[4096];

static void setup(void)
{
    if (tu_mkdtemp("cq", dir, sizeof dir) != 0) {
        tu_die("test_cq", "mkdtemp failed");
    }
}

static void teardown(void)
{
    tu_rmtree(dir);
}

static cq_entry_t entry_at(uint64_t i)
{
    cq_entry_t e = { .log_offset = UINT64_C(0x100000) + i * 131, .due = UINT64_C(1700000000000) + i };
    return e;
}

static slot_t slot_at(uint64_t ordinal)
{
    slot_t s = {
        .id = UINT64_C(0x200000) + ordinal * 97, .queue = (uint32_t)(ordinal % 19), .flags = 0, .cq_index = ordinal * 3
    };
    return s;
}

static void file_path(uint64_t index, char *path, size_t len)
{
    char name[64];
    cq_file_name(QUEUE, index, name, sizeof name);
    snprintf(path, len, "%s/%s", dir, name);
}

static int file_exists(uint64_t index)
{
    char path[4200];
    struct stat st;
    file_path(index, path, sizeof path);
    return stat(path, &st) == 0;
}

static void append_n(cq_t *q, uint64_t from, uint64_t n, int line)
{
    char err[512] = "";
    for (uint64_t i = from; i < from + n; i++) {
        cq_entry_t e = entry_at(i);
        uint64_t index = UINT64_MAX;
        int rc = cq_append(q, &e, &index, err, sizeof err);
        TU_REQUIRE_AT(rc == 0 && index == i, line, "append %" PRIu64 ": rc %d index %" PRIu64 ": %s", i, rc, index,
                      err);
    }
}
#define APPEND_N(q, from, n) append_n((q), (from), (n), __LINE__)

/* Entries [from, from + n) read in runs of `run` equal entry_at. */
static void expect_entries(cq_t *q, uint64_t from, uint64_t n, size_t run, int line)
{
    char err[512] = "";
    cq_entry_t *got = calloc(run, sizeof *got);
    for (uint64_t i = from; i < from + n; i += run) {
        size_t k = from + n - i < run ? (size_t)(from + n - i) : run;
        int rc = cq_read(q, i, k, got, err, sizeof err);
        TU_REQUIRE_AT(rc == 0, line, "read [%" PRIu64 ", +%zu): %s", i, k, err);
        for (size_t j = 0; j < k; j++) {
            cq_entry_t want = entry_at(i + j);
            TU_REQUIRE_AT(got[j].log_offset == want.log_offset && got[j].due == want.due, line,
                          "entry %" PRIu64 ": (%" PRIu64 ", %" PRIu64 "), want (%" PRIu64 ", %" PRIu64 ")", i + j,
                          got[j].log_offset, got[j].due, want.log_offset, want.due);
        }
    }
    free(got);
}
#define EXPECT_ENTRIES(q, from, n, run) expect_entries((q), (from), (n), (run), __LINE__)

static void expect_error(int rc, const char *err, const char *frag1, const char *frag2, int line)
{
    TU_CHECK_AT(rc == -1, line, "want an error, got rc %d", rc);
    TU_CHECK_AT(strstr(err, frag1) != NULL, line, "error \"%s\" lacks \"%s\"", err, frag1);
    if (frag2 != NULL) {
        TU_CHECK_AT(strstr(err, frag2) != NULL, line, "error \"%s\" lacks \"%s\"", err, frag2);
    }
}
#define EXPECT_ERROR(rc, err, f1, f2) expect_error((rc), (err), (f1), (f2), __LINE__)

static cq_t *open_queue(uint32_t queue, uint64_t head, uint64_t tail, int line)
{
    char err[512] = "";
    cq_t *q = NULL;
    int rc = cq_open(dir, queue, head, tail, &q, err, sizeof err);
    TU_REQUIRE_AT(rc == 0 && q != NULL, line, "cq_open %08" PRIx32 " [%" PRIu64 ", %" PRIu64 "): %s", queue, head, tail,
                  err);
    return q;
}
#define OPEN_Q(head, tail) open_queue(QUEUE, (head), (tail), __LINE__)

static void close_q(cq_t *q, int line)
{
    char err[512] = "";
    int rc = cq_close(q, err, sizeof err);
    TU_REQUIRE_AT(rc == 0, line, "cq_close: %s", err);
}
#define CLOSE_Q(q) close_q((q), __LINE__)

/* ----------------------------------------------------------------------- cq */

/* 3000 appends: the first 2048 went to the file by the buffer's own flushes
 * (1024 a run), the rest are still buffered; reads cross that line. */
static void test_append_read(void)
{
    cq_t *q = OPEN_Q(0, 0);
    TU_CHECK(!file_exists(0), "a new queue makes no file before its first append");
    APPEND_N(q, 0, 3000);
    TU_CHECK(cq_head(q) == 0 && cq_tail(q) == 3000, "head %" PRIu64 " tail %" PRIu64, cq_head(q), cq_tail(q));
    EXPECT_ENTRIES(q, 0, 3000, 1);
    EXPECT_ENTRIES(q, 0, 3000, 100); /* runs across the flushed/buffered line at 2048 */
    char path[4200];
    struct stat st;
    file_path(0, path, sizeof path);
    TU_CHECK(stat(path, &st) == 0 && (uint64_t)st.st_size == CQ_FILE_BYTES, "%s: want %" PRIu64 " bytes pre-written",
             path, (uint64_t)CQ_FILE_BYTES);
    CLOSE_Q(q);
}

static void test_head_advance(void)
{
    char err[512] = "";
    cq_entry_t e;
    cq_t *q = OPEN_Q(0, 0);
    APPEND_N(q, 0, CQ_FILE_ENTRIES + 10);
    TU_REQUIRE(cq_advance_head(q, 100, err, sizeof err) == 0, "advance to 100: %s", err);
    TU_CHECK(file_exists(0), "the first file still holds entries at or past the head");
    EXPECT_ERROR(cq_read(q, 99, 1, &e, err, sizeof err), err, "outside", "[99, 100)");
    EXPECT_ENTRIES(q, 100, 10, 1);
    TU_REQUIRE(cq_advance_head(q, CQ_FILE_ENTRIES + 5, err, sizeof err) == 0, "advance: %s", err);
    TU_CHECK(file_exists(0), "the first file went at the head move (an open may read back an older head)");
    TU_REQUIRE(cq_release_below(q, 100, err, sizeof err) == 0, "release below 100: %s", err);
    TU_CHECK(file_exists(0), "the first file went below a durable head inside it");
    TU_REQUIRE(cq_release_below(q, UINT64_MAX, err, sizeof err) == 0, "release below the head: %s", err);
    TU_CHECK(!file_exists(0), "the first file, all below the durable head, is deleted");
    TU_CHECK(file_exists(CQ_FILE_ENTRIES), "the second file stays");
    EXPECT_ENTRIES(q, CQ_FILE_ENTRIES + 5, 5, 5);
    EXPECT_ERROR(cq_advance_head(q, 10, err, sizeof err), err, "outside", "only moves forward");
    EXPECT_ERROR(cq_advance_head(q, CQ_FILE_ENTRIES + 11, err, sizeof err), err, "outside", "up to the tail");
    TU_REQUIRE(cq_advance_head(q, CQ_FILE_ENTRIES + 10, err, sizeof err) == 0, "advance to the tail: %s", err);
    APPEND_N(q, CQ_FILE_ENTRIES + 10, 3); /* an empty queue appends on */
    EXPECT_ENTRIES(q, CQ_FILE_ENTRIES + 10, 3, 3);
    CLOSE_Q(q);
}

static void test_rewrite(void)
{
    char err[512] = "";
    cq_t *q = OPEN_Q(0, 0);
    APPEND_N(q, 0, 10);
    TU_REQUIRE(cq_flush(q, err, sizeof err) == 0, "flush: %s", err);
    APPEND_N(q, 10, 10); /* [10, 20) buffered */
    cq_entry_t in_file = { 0xAAAA, 1 }, in_buffer = { 0xBBBB, 2 }, got[20];
    TU_REQUIRE(cq_rewrite(q, 2, &in_file, err, sizeof err) == 0, "rewrite 2: %s", err);
    TU_REQUIRE(cq_rewrite(q, 15, &in_buffer, err, sizeof err) == 0, "rewrite 15: %s", err);
    TU_REQUIRE(cq_read(q, 0, 20, got, err, sizeof err) == 0, "read: %s", err);
    for (uint64_t i = 0; i < 20; i++) {
        cq_entry_t want = i == 2 ? in_file : i == 15 ? in_buffer : entry_at(i);
        TU_CHECK(got[i].log_offset == want.log_offset && got[i].due == want.due, "entry %" PRIu64 ": %" PRIx64, i,
                 got[i].log_offset);
    }
    EXPECT_ERROR(cq_rewrite(q, 20, &in_file, err, sizeof err), err, "rewrite of [20, 21)", "outside");
    cq_entry_t zero = { 0, 5 };
    EXPECT_ERROR(cq_rewrite(q, 3, &zero, err, sizeof err), err, "log offset 0", "rewrite at 3");
    CLOSE_Q(q);
    /* Both rewrites reached the file. */
    q = OPEN_Q(0, 20);
    TU_REQUIRE(cq_read(q, 0, 20, got, err, sizeof err) == 0, "read after reopen: %s", err);
    TU_CHECK(got[2].log_offset == 0xAAAA && got[15].log_offset == 0xBBBB, "after reopen: %" PRIx64 " %" PRIx64,
             got[2].log_offset, got[15].log_offset);
    CLOSE_Q(q);
}

/* Rewrites below the buffer are held and written at the next flush (a run
 * of consecutive entries by one pwrite): 3 000 rewrites, more than the 1 024
 * held at a time, each of 500 entries rewritten six times in a scattered
 * order, read back after every round with the last write of each entry, and
 * found in the file after a close and a reopen. */
static void test_rewrite_held(void)
{
    char err[512] = "";
    cq_t *q = OPEN_Q(0, 0);
    APPEND_N(q, 0, 600);
    TU_REQUIRE(cq_flush(q, err, sizeof err) == 0, "flush: %s", err);
    static uint64_t last[600];
    for (int round = 0; round < 6; round++) {
        for (uint64_t k = 0; k < 500; k++) {
            uint64_t i = 50 + (k * 7 + (uint64_t)round * 13) % 500;
            cq_entry_t e = { 0x100000 + (uint64_t)round * 1000 + i, i };
            TU_REQUIRE(cq_rewrite(q, i, &e, err, sizeof err) == 0, "rewrite %" PRIu64 ": %s", i, err);
            last[i] = e.log_offset;
        }
        cq_entry_t got[600];
        TU_REQUIRE(cq_read(q, 0, 600, got, err, sizeof err) == 0, "read: %s", err);
        int wrong = 0;
        for (uint64_t i = 0; i < 600; i++)
            wrong += got[i].log_offset != (last[i] != 0 ? last[i] : entry_at(i).log_offset);
        TU_CHECK(wrong == 0, "round %d: %d entries not their last write", round, wrong);
    }
    CLOSE_Q(q);
    q = OPEN_Q(0, 600);
    cq_entry_t got[600];
    TU_REQUIRE(cq_read(q, 0, 600, got, err, sizeof err) == 0, "read after reopen: %s", err);
    int wrong = 0;
    for (uint64_t i = 0; i < 600; i++)
        wrong += got[i].log_offset != (last[i] != 0 ? last[i] : entry_at(i).log_offset);
    TU_CHECK(wrong == 0, "after reopen: %d entries not their last write", wrong);
    CLOSE_Q(q);
}

static void test_reopen(void)
{
    char err[512] = "";
    cq_entry_t e;
    cq_t *q = OPEN_Q(0, 0);
    APPEND_N(q, 0, 2000);
    CLOSE_Q(q); /* closes flush the buffer */
    q = OPEN_Q(40, 2000);
    EXPECT_ENTRIES(q, 40, 1960, 64);
    APPEND_N(q, 2000, 5);
    EXPECT_ENTRIES(q, 1990, 15, 15);
    CLOSE_Q(q);
    /* A tail the caller claims past what was written: the zeros are refused. */
    q = OPEN_Q(0, 2500);
    EXPECT_ERROR(cq_read(q, 2100, 1, &e, err, sizeof err), err, "entry 2100", "is zero: never written");
    EXPECT_ENTRIES(q, 0, 2005, 500);
    CLOSE_Q(q);
}

static void test_file_switch(void)
{
    char err[512] = "";
    uint64_t n = CQ_FILE_ENTRIES + 3;
    cq_t *q = OPEN_Q(0, 0);
    APPEND_N(q, 0, CQ_FILE_ENTRIES);
    TU_CHECK(!file_exists(CQ_FILE_ENTRIES), "the next file is made by its first append, not before");
    APPEND_N(q, CQ_FILE_ENTRIES, 3);
    TU_CHECK(file_exists(CQ_FILE_ENTRIES), "the switch made the second file");
    char name[64];
    cq_file_name(QUEUE, CQ_FILE_ENTRIES + 1, name, sizeof name);
    TU_CHECK(strcmp(name, "cq-00000007-0000000000040000.q") == 0, "second file named %s", name);
    EXPECT_ENTRIES(q, CQ_FILE_ENTRIES - 4, 7, 7); /* one read across the two files */
    CLOSE_Q(q);
    q = OPEN_Q(0, n);
    EXPECT_ENTRIES(q, 0, n, 4096);
    CLOSE_Q(q);
    /* Reopened empty on the boundary: no file open; the append opens the file
     * a previous life left, and its old bytes are not entries. */
    q = OPEN_Q(CQ_FILE_ENTRIES, CQ_FILE_ENTRIES);
    cq_entry_t e = entry_at(CQ_FILE_ENTRIES), got;
    TU_REQUIRE(cq_append(q, &e, NULL, err, sizeof err) == 0, "append: %s", err);
    TU_REQUIRE(cq_read(q, CQ_FILE_ENTRIES, 1, &got, err, sizeof err) == 0, "read: %s", err);
    TU_CHECK(got.log_offset == e.log_offset, "entry %" PRIx64, got.log_offset);
    EXPECT_ERROR(cq_read(q, CQ_FILE_ENTRIES + 1, 1, &got, err, sizeof err), err, "outside", "read of");
    CLOSE_Q(q);
    /* The first file, below the head, was deleted at that open. */
    TU_CHECK(!file_exists(0), "a file wholly below the head is swept at open");
}

/* A topic's queue (from CQ_SMALL_QUEUE_FIRST: design-commitlog.md 4b) uses
 * files of 2^12 entries, 64 KiB: the switch, a read across it, a reopen and
 * the head's deletes go by that size. */
static void test_small_files(void)
{
    const uint32_t queue = CQ_SMALL_QUEUE_FIRST + 3;
    const uint64_t per = cq_layout_file_entries(cq_layout_of(queue), 0);
    TU_REQUIRE(per == 4096 && cq_layout_file_entries(cq_layout_of(queue), 9) == 4096 &&
                   cq_layout_file_entries(cq_layout_of(QUEUE), 0) == CQ_FILE_ENTRIES,
               "files of %" PRIu64 " entries", per);
    char err[512] = "", name[64], path[4200];
    cq_t *q = NULL;
    TU_REQUIRE(cq_open(dir, queue, 0, 0, &q, err, sizeof err) == 0, "open: %s", err);
    APPEND_N(q, 0, per + 5);
    cq_file_name(queue, per + 1, name, sizeof name);
    TU_CHECK(strcmp(name, "cq-00010003-0000000000001000.q") == 0, "second file named %s", name);
    snprintf(path, sizeof path, "%s/%s", dir, name);
    struct stat st;
    TU_CHECK(stat(path, &st) == 0 && (uint64_t)st.st_size == per * CQ_ENTRY_BYTES, "%s: want %" PRIu64 " bytes", path,
             per * CQ_ENTRY_BYTES);
    EXPECT_ENTRIES(q, per - 3, 6, 6); /* one read across the two files */
    TU_REQUIRE(cq_close(q, err, sizeof err) == 0, "close: %s", err);
    TU_REQUIRE(cq_open(dir, queue, 2, per + 5, &q, err, sizeof err) == 0, "reopen: %s", err);
    EXPECT_ENTRIES(q, 2, per + 3, 64);
    TU_REQUIRE(cq_advance_head(q, per + 1, err, sizeof err) == 0, "advance: %s", err);
    TU_REQUIRE(cq_release_below(q, per + 1, err, sizeof err) == 0, "release: %s", err);
    cq_file_name(queue, 0, name, sizeof name);
    snprintf(path, sizeof path, "%s/%s", dir, name);
    TU_CHECK(stat(path, &st) != 0, "the first 64 KiB file stays below the head");
    TU_REQUIRE(cq_close(q, err, sizeof err) == 0, "close: %s", err);
}

/* A queue with no file (new, its first append not made yet) at a
 * checkpoint's release: nothing to delete, and it appends on. (The release
 * used to memmove its NULL file array, undefined even for 0 bytes: UBSan
 * ended test_clog_redo's power cuts and the broker of test_bench_smoke.) */
static void test_release_without_files(void)
{
    char err[512] = "";
    cq_t *q = OPEN_Q(0, 0);
    TU_REQUIRE(cq_release_below(q, UINT64_MAX, err, sizeof err) == 0, "release on a queue without files: %s", err);
    TU_CHECK(!file_exists(0), "a release made a file");
    APPEND_N(q, 0, 3);
    EXPECT_ENTRIES(q, 0, 3, 3);
    CLOSE_Q(q);
}

/* A topic's first file made ahead (when the topic is made): the queue's
 * first append opens it instead of making it, a second make leaves it (and
 * its entries) alone, and a make that cannot write names the queue. */
static void test_first_file_ahead(void)
{
    const uint32_t queue = CQ_SMALL_QUEUE_FIRST + 7;
    char err[512] = "", name[64], path[4200];
    cq_file_name(queue, 0, name, sizeof name);
    snprintf(path, sizeof path, "%s/%s", dir, name);
    TU_REQUIRE(cq_make_first_file(dir, queue, err, sizeof err) == 0, "make: %s", err);
    struct stat made, st;
    TU_REQUIRE(stat(path, &made) == 0, "%s made", path);
    TU_CHECK((uint64_t)made.st_size == 4096 * CQ_ENTRY_BYTES, "%s: %lld bytes", path, (long long)made.st_size);
    cq_t *q = NULL;
    TU_REQUIRE(cq_open(dir, queue, 0, 0, &q, err, sizeof err) == 0, "open: %s", err);
    APPEND_N(q, 0, 3);
    TU_REQUIRE(cq_close(q, err, sizeof err) == 0, "close: %s", err);
    TU_CHECK(cq_make_first_file(dir, queue, err, sizeof err) == 0, "a second make: %s", err);
    TU_CHECK(stat(path, &st) == 0 && st.st_ino == made.st_ino, "the appends and a second make kept the file made");
    TU_REQUIRE(cq_open(dir, queue, 0, 3, &q, err, sizeof err) == 0, "reopen: %s", err);
    EXPECT_ENTRIES(q, 0, 3, 3);
    TU_REQUIRE(cq_close(q, err, sizeof err) == 0, "close: %s", err);
    char missing[4200];
    snprintf(missing, sizeof missing, "%s/no-such-dir", dir);
    EXPECT_ERROR(cq_make_first_file(missing, queue, err, sizeof err), err, "cq 00010007: its first file made ahead",
                 "cannot create");
}

static void test_bad_inputs(void)
{
    char err[512] = "";
    char path[4200];
    cq_t *q = NULL;
    cq_entry_t e = { 0, 1 };
    EXPECT_ERROR(cq_open(dir, QUEUE, 5, 4, &q, err, sizeof err), err, "head 5", "past the tail 4");
    q = OPEN_Q(0, 0);
    EXPECT_ERROR(cq_append(q, &e, NULL, err, sizeof err), err, "log offset 0", "append at 0");
    APPEND_N(q, 0, 4);
    EXPECT_ERROR(cq_read(q, 4, 1, &e, err, sizeof err), err, "read of [4, 5)", "[0, 4)");
    EXPECT_ERROR(cq_read(q, 2, 3, &e, err, sizeof err), err, "read of [2, 5)", "outside");
    CLOSE_Q(q);
    /* A missing file. */
    EXPECT_ERROR(cq_open(dir, QUEUE + 1, 0, 3, &q, err, sizeof err), err, "cq-00000008-0000000000000000.q",
                 "cannot open");
    /* A short (damaged) file. */
    file_path(0, path, sizeof path);
    TU_REQUIRE(truncate(path, 1000) == 0, "truncate %s", path);
    EXPECT_ERROR(cq_open(dir, QUEUE, 0, 4, &q, err, sizeof err), err, "cq-00000007-0000000000000000.q",
                 "short or damaged");
    TU_CHECK(strstr(err, "1000 bytes") != NULL, "error \"%s\" names the size", err);
    TU_CHECK(q == NULL, "no queue on error");
}

/* --------------------------------------------------------------------- slot */

static slot_file_t *open_slots(uint64_t base, int create, int line)
{
    char err[512] = "";
    slot_file_t *f = NULL;
    int rc = slot_file_open(dir, base, create, &f, err, sizeof err);
    TU_REQUIRE_AT(rc == 0 && f != NULL, line, "slot_file_open: %s", err);
    return f;
}
#define OPEN_SLOTS(base, create) open_slots((base), (create), __LINE__)

static void expect_slot(slot_file_t *f, uint64_t ordinal, slot_t want, int line)
{
    char err[512] = "";
    slot_t got;
    int rc = slot_get(f, ordinal, &got, err, sizeof err);
    TU_REQUIRE_AT(rc == 0, line, "slot_get %" PRIu64 ": %s", ordinal, err);
    TU_CHECK_AT(
        got.id == want.id && got.queue == want.queue && got.flags == want.flags && got.cq_index == want.cq_index, line,
        "slot %" PRIu64 ": (%" PRIx64 ", %u, %u, %" PRIu64 ")", ordinal, got.id, got.queue, got.flags, got.cq_index);
}
#define EXPECT_SLOT(f, ordinal, want) expect_slot((f), (ordinal), (want), __LINE__)

static void test_slot_write_read_overwrite(void)
{
    char err[512] = "";
    slot_file_t *f = OPEN_SLOTS(0x8000000, 1);
    for (uint64_t i = 0; i < 3000; i++) {
        slot_t s = slot_at(i);
        TU_REQUIRE(slot_put(f, i, &s, err, sizeof err) == 0, "put %" PRIu64 ": %s", i, err);
    }
    TU_CHECK(slot_count(f) == 3000, "count %" PRIu64, slot_count(f));
    for (uint64_t i = 0; i < 3000; i += 7) {
        EXPECT_SLOT(f, i, slot_at(i));
    }
    slot_t moved = slot_at(5), revoked = slot_at(2990); /* 5 in the file, 2990 buffered */
    moved.queue = 3;
    moved.cq_index = 123456;
    revoked.flags = SLOT_REVOKED;
    TU_REQUIRE(slot_put(f, 5, &moved, err, sizeof err) == 0, "overwrite 5: %s", err);
    TU_REQUIRE(slot_put(f, 2990, &revoked, err, sizeof err) == 0, "overwrite 2990: %s", err);
    EXPECT_SLOT(f, 5, moved);
    EXPECT_SLOT(f, 2990, revoked);
    EXPECT_SLOT(f, 6, slot_at(6));
    slot_t s = slot_at(3001), zero = { 0, 1, 0, 1 };
    slot_t got;
    EXPECT_ERROR(slot_put(f, 3001, &s, err, sizeof err), err, "slot 3001 is past the end", "slot-0000000008000000.w");
    EXPECT_ERROR(slot_put(f, 4, &zero, err, sizeof err), err, "slot 4", "id 0");
    EXPECT_ERROR(slot_get(f, 3000, &got, err, sizeof err), err, "[3000, 3001)", "past the end");
    TU_CHECK(slot_file_close(f, err, sizeof err) == 0, "close: %s", err);

    /* Reopen: everything, overwrites included, came from the file. */
    f = OPEN_SLOTS(0x8000000, 0);
    TU_CHECK(slot_count(f) == 3000, "count after reopen %" PRIu64, slot_count(f));
    EXPECT_SLOT(f, 5, moved);
    EXPECT_SLOT(f, 2990, revoked);
    EXPECT_SLOT(f, 2999, slot_at(2999));
    s = slot_at(3000);
    TU_REQUIRE(slot_put(f, 3000, &s, err, sizeof err) == 0, "append after reopen: %s", err);
    EXPECT_SLOT(f, 3000, s);
    TU_CHECK(slot_file_close(f, err, sizeof err) == 0, "close: %s", err);
    slot_file_t *again = NULL;
    EXPECT_ERROR(slot_file_open(dir, 0x8000000, 1, &again, err, sizeof err), err, "slot-0000000008000000.w",
                 "already exists");
}

static void test_slot_damaged(void)
{
    char err[512] = "", path[4200];
    slot_file_t *f = OPEN_SLOTS(0x10, 1);
    for (uint64_t i = 0; i < 3; i++) {
        slot_t s = slot_at(i);
        TU_REQUIRE(slot_put(f, i, &s, err, sizeof err) == 0, "put: %s", err);
    }
    TU_REQUIRE(slot_sync(f, err, sizeof err) == 0, "sync: %s", err);
    TU_REQUIRE(slot_file_close(f, err, sizeof err) == 0, "close: %s", err);
    snprintf(path, sizeof path, "%s/slot-0000000000000010.w", dir);
    TU_REQUIRE(truncate(path, 3 * SLOT_BYTES - 5) == 0, "truncate");
    f = NULL;
    EXPECT_ERROR(slot_file_open(dir, 0x10, 0, &f, err, sizeof err), err, "slot-0000000000000010.w",
                 "not a whole number of 24-byte records");
    TU_CHECK(f == NULL, "no file on error");
    /* A hole: zeros where a slot should be (a file extended, never written). */
    TU_REQUIRE(truncate(path, 4 * SLOT_BYTES) == 0, "extend");
    f = OPEN_SLOTS(0x10, 0);
    slot_t got;
    EXPECT_ERROR(slot_get(f, 3, &got, err, sizeof err), err, "slot 3 is zero", "slot-0000000000000010.w");
    EXPECT_SLOT(f, 0, slot_at(0));
    TU_CHECK(slot_file_close(f, err, sizeof err) == 0, "close: %s", err);
    EXPECT_ERROR(slot_file_open(dir, 0x20, 0, &f, err, sizeof err), err, "slot-0000000000000020.w", "cannot open");
}

/* A sync handed to another thread (a checkpoint's finish): the buffer is
 * written at once, a file is handed over only when written since (or with
 * `all`), and the duplicate outlives the queue's own descriptor. */
static void test_sync_handoff(void)
{
    char err[512] = "", path[4200];
    cq_t *q = OPEN_Q(0, 0);
    APPEND_N(q, 0, 10); /* in the buffer only */
    fixfile_syncset_t set = { 0 };
    TU_REQUIRE(cq_sync_handoff(q, 0, &set, err, sizeof err) == 0, "%s", err);
    TU_CHECK(set.n == 1 && strstr(set.v[0].path, "cq-00000007-0000000000000000.q") != NULL,
             "the written file handed over (%zu)", set.n);
    file_path(0, path, sizeof path);
    FILE *fp = fopen(path, "rb");
    unsigned char e9[16] = { 0 };
    TU_REQUIRE(fp != NULL && fseek(fp, 9 * 16, SEEK_SET) == 0 && fread(e9, 1, 16, fp) == 16, "read %s", path);
    fclose(fp);
    uint64_t off = 0;
    for (int i = 0; i < 8; i++) {
        off = off << 8 | e9[i];
    }
    TU_CHECK(off == entry_at(9).log_offset, "the buffered entry 9 is in the file (%" PRIu64 ")", off);
    TU_REQUIRE(cq_sync_handoff(q, 0, &set, err, sizeof err) == 0, "%s", err);
    TU_CHECK(set.n == 1, "nothing written since: nothing more handed over (%zu)", set.n);
    TU_REQUIRE(cq_sync_handoff(q, 1, &set, err, sizeof err) == 0, "%s", err);
    TU_CHECK(set.n == 2, "`all` hands over the clean file too (%zu)", set.n);
    CLOSE_Q(q);
    TU_CHECK(fixfile_syncset_run(&set, err, sizeof err) == 0, "the duplicates sync after the queue closed: %s", err);
    fixfile_syncset_clear(&set);
    TU_CHECK(set.n == 0 && set.v == NULL, "cleared");
    slot_file_t *f = OPEN_SLOTS(0x20, 1);
    slot_t sl = slot_at(0);
    TU_REQUIRE(slot_put(f, 0, &sl, err, sizeof err) == 0, "put: %s", err);
    TU_REQUIRE(slot_sync_handoff(f, 0, &set, err, sizeof err) == 0, "%s", err);
    TU_REQUIRE(slot_sync_handoff(f, 0, &set, err, sizeof err) == 0, "%s", err);
    TU_CHECK(set.n == 1 && strstr(set.v[0].path, "slot-0000000000000020.w") != NULL,
             "the slot file handed over once (%zu)", set.n);
    TU_CHECK(fixfile_syncset_run(&set, err, sizeof err) == 0, "%s", err);
    fixfile_syncset_clear(&set);
    TU_CHECK(slot_file_close(f, err, sizeof err) == 0, "close: %s", err);
}

/* ------------------------------------------------------- growing topic CQs */

/* A topic CQ made by format 8 (queues from CQ_GROWING_QUEUE_FIRST,
 * design-commitlog.md "Growing topic CQ files (s48)"): its files start at
 * these indexes — 2^12 entries, then 2^12, 2^13, …, 2^17 (the ramp), then
 * 2^18 each. The tests check the files on disk against this table, not
 * against the module's own layout functions. */
#define GROW_QUEUE (UINT32_C(0x01000000) + 5)
#define GROW_FILES 10
static const uint64_t grow_first[GROW_FILES + 1] = {
    0,
    UINT64_C(1) << 12,
    UINT64_C(1) << 13,
    UINT64_C(1) << 14,
    UINT64_C(1) << 15,
    UINT64_C(1) << 16,
    UINT64_C(1) << 17,
    UINT64_C(1) << 18,
    UINT64_C(2) << 18,
    UINT64_C(3) << 18,
    UINT64_C(4) << 18,
};

static void grow_path(uint64_t first, char *path, size_t len)
{
    char name[64];
    cq_file_name(GROW_QUEUE, first, name, sizeof name);
    snprintf(path, len, "%s/%s", dir, name);
}

/* The size of the growing queue's file starting at first; -1 when missing. */
static long long grow_file_size(uint64_t first)
{
    char path[4200];
    struct stat st;
    grow_path(first, path, sizeof path);
    return stat(path, &st) == 0 ? (long long)st.st_size : -1;
}

/* Files [from, to) of the table are there at their sizes; the others not. */
static void expect_grow_files(int from, int to, int line)
{
    for (int k = 0; k < GROW_FILES; k++) {
        long long want = k >= from && k < to ? (long long)((grow_first[k + 1] - grow_first[k]) * CQ_ENTRY_BYTES) : -1;
        long long got = grow_file_size(grow_first[k]);
        TU_CHECK_AT(got == want, line, "the file at %" PRIu64 ": %lld bytes, want %lld", grow_first[k], got, want);
    }
}
#define EXPECT_GROW_FILES(from, to) expect_grow_files((from), (to), __LINE__)

#define OPEN_GROW(head, tail) open_queue(GROW_QUEUE, (head), (tail), __LINE__)

/* A growing queue written up to tail (entry_at), closed. */
static void grow_written(uint64_t tail, int line)
{
    cq_t *q = open_queue(GROW_QUEUE, 0, 0, line);
    append_n(q, 0, tail, line);
    close_q(q, line);
}
#define GROW_WRITTEN(tail) grow_written((tail), __LINE__)

/* The three layout functions, for each layout: a file's first index, its
 * entry count, and the file of its first and last index. */
static void test_layouts(void)
{
    TU_CHECK(CQ_GROWING_QUEUE_FIRST == UINT32_C(0x01000000) && GROW_QUEUE >= CQ_GROWING_QUEUE_FIRST,
             "growing queues from %08" PRIx32, CQ_GROWING_QUEUE_FIRST);
    cq_layout_t grow = cq_layout_of(GROW_QUEUE), level = cq_layout_of(QUEUE),
                small = cq_layout_of(CQ_SMALL_QUEUE_FIRST), last_small = cq_layout_of(CQ_GROWING_QUEUE_FIRST - 1);
    for (uint64_t k = 0; k < GROW_FILES; k++) {
        uint64_t first = grow_first[k], n = grow_first[k + 1] - first;
        TU_CHECK(cq_layout_file_first(grow, k) == first && cq_layout_file_entries(grow, k) == n &&
                     cq_layout_file_of(grow, first) == k && cq_layout_file_of(grow, first + n - 1) == k,
                 "growing file %" PRIu64 ": first %" PRIu64 " entries %" PRIu64 ", file of %" PRIu64 ": %" PRIu64, k,
                 cq_layout_file_first(grow, k), cq_layout_file_entries(grow, k), first, cq_layout_file_of(grow, first));
    }
    TU_CHECK(cq_layout_file_of(grow, UINT64_MAX) == 6 + (UINT64_MAX >> 18), "the last index's file");
    const struct {
        cq_layout_t l;
        uint64_t per;
    } fixed[] = { { level, CQ_FILE_ENTRIES }, { small, 4096 }, { last_small, 4096 } };
    for (size_t i = 0; i < sizeof fixed / sizeof fixed[0]; i++) {
        for (uint64_t k = 0; k < 5; k++) {
            TU_CHECK(cq_layout_file_first(fixed[i].l, k) == k * fixed[i].per &&
                         cq_layout_file_entries(fixed[i].l, k) == fixed[i].per &&
                         cq_layout_file_of(fixed[i].l, k * fixed[i].per) == k &&
                         cq_layout_file_of(fixed[i].l, (k + 1) * fixed[i].per - 1) == k,
                     "layout %zu file %" PRIu64 ": first %" PRIu64 " entries %" PRIu64, i, k,
                     cq_layout_file_first(fixed[i].l, k), cq_layout_file_entries(fixed[i].l, k));
        }
    }
}

/* Appends across every boundary of the ramp and past it: each file is made
 * by its first append, at its size; a read of a run spanning the two files
 * at each boundary; every entry read back after a reopen. The first file
 * made ahead (a topic's, when the topic is made) is 64 KiB. */
static void test_grow_appends(void)
{
    char err[512] = "", name[64];
    TU_REQUIRE(cq_make_first_file(dir, GROW_QUEUE, err, sizeof err) == 0, "make the first file: %s", err);
    EXPECT_GROW_FILES(0, 1);
    cq_t *q = OPEN_GROW(0, 0);
    for (int k = 1; k < GROW_FILES; k++) {
        uint64_t b = grow_first[k];
        APPEND_N(q, cq_tail(q), b - cq_tail(q));
        TU_CHECK(grow_file_size(b) == -1, "the file at %" PRIu64 " is made by its first append, not before", b);
        APPEND_N(q, b, 1);
        EXPECT_GROW_FILES(0, k + 1);
        EXPECT_ENTRIES(q, b - 3, 4, 4); /* one read across the two files */
    }
    cq_file_name(GROW_QUEUE, grow_first[2] + 5000, name, sizeof name);
    TU_CHECK(strcmp(name, "cq-01000005-0000000000002000.q") == 0, "the file holding 13192 is %s", name);
    cq_file_name(GROW_QUEUE, grow_first[8] + 5, name, sizeof name);
    TU_CHECK(strcmp(name, "cq-01000005-0000000000080000.q") == 0, "the file holding 2^19 + 5 is %s", name);
    uint64_t tail = cq_tail(q);
    CLOSE_Q(q);
    q = OPEN_GROW(0, tail);
    EXPECT_ENTRIES(q, 0, tail, 1000); /* runs of 1000 straddle every boundary */
    CLOSE_Q(q);
}

/* Rewrites of the last entry of each file and the first of the next, read
 * back at once and after a reopen. */
static void test_grow_rewrite(void)
{
    char err[512] = "";
    uint64_t tail = grow_first[8] + 10;
    cq_t *q = OPEN_GROW(0, 0);
    APPEND_N(q, 0, tail);
    EXPECT_GROW_FILES(0, 9);
    for (int pass = 0; pass < 2; pass++) {
        for (int k = 1; k <= 8; k++) {
            uint64_t b = grow_first[k];
            cq_entry_t got[2];
            if (pass == 0) {
                for (uint64_t i = b - 1; i <= b; i++) {
                    cq_entry_t e = { 0xE000000 + i, i };
                    TU_REQUIRE(cq_rewrite(q, i, &e, err, sizeof err) == 0, "rewrite %" PRIu64 ": %s", i, err);
                }
            }
            TU_REQUIRE(cq_read(q, b - 1, 2, got, err, sizeof err) == 0, "read at %" PRIu64 ": %s", b - 1, err);
            TU_CHECK(got[0].log_offset == 0xE000000 + b - 1 && got[1].log_offset == 0xE000000 + b,
                     "pass %d, %" PRIu64 " and %" PRIu64 ": %" PRIx64 " %" PRIx64, pass, b - 1, b, got[0].log_offset,
                     got[1].log_offset);
        }
        if (pass == 0) {
            CLOSE_Q(q);
            q = OPEN_GROW(0, tail);
        }
    }
    EXPECT_ENTRIES(q, grow_first[3] + 1, grow_first[4] - grow_first[3] - 2, 500); /* the others untouched */
    CLOSE_Q(q);
}

/* Reopens with head and tail inside the ramp and past it; the open's file
 * checks name a missing and a short file, inside the ramp and past it. */
static void test_grow_reopen(void)
{
    char err[512] = "", path[4200], moved[4300];
    uint64_t tail = grow_first[8] + 100;
    GROW_WRITTEN(tail);
    EXPECT_GROW_FILES(0, 9);
    cq_t *q = OPEN_GROW(0, 12000); /* the tail inside the ramp: files past it are left alone */
    EXPECT_ENTRIES(q, 0, 12000, 777);
    CLOSE_Q(q);
    q = OPEN_GROW(grow_first[7] + 3, tail); /* head and tail past the ramp */
    EXPECT_ENTRIES(q, grow_first[7] + 3, tail - grow_first[7] - 3, 999);
    CLOSE_Q(q);
    EXPECT_GROW_FILES(7, 9); /* the ramp, all below that head, was swept */
    cq_t *none = NULL;
    grow_path(grow_first[7], path, sizeof path);
    snprintf(moved, sizeof moved, "%s.away", path);
    TU_REQUIRE(rename(path, moved) == 0, "move %s", path);
    EXPECT_ERROR(cq_open(dir, GROW_QUEUE, grow_first[7] + 3, tail, &none, err, sizeof err), err,
                 "cq-01000005-0000000000040000.q", "cannot open");
    TU_REQUIRE(rename(moved, path) == 0, "move back %s", path);
    TU_REQUIRE(truncate(path, 1000) == 0, "truncate %s", path);
    EXPECT_ERROR(cq_open(dir, GROW_QUEUE, grow_first[7] + 3, tail, &none, err, sizeof err), err,
                 "cq-01000005-0000000000040000.q", "short or damaged");
    TU_CHECK(strstr(err, "1000 bytes") != NULL, "error \"%s\" names the size", err);
    TU_CHECK(none == NULL, "no queue on error");
    /* inside the ramp: a file of 2^15 entries is 512 KiB long, not 64 KiB */
    tu_rmtree(dir);
    TU_REQUIRE(mkdir(dir, 0700) == 0, "mkdir %s", dir);
    GROW_WRITTEN(grow_first[5] + 1);
    grow_path(grow_first[4], path, sizeof path);
    TU_REQUIRE(truncate(path, 4096 * CQ_ENTRY_BYTES) == 0, "truncate %s", path);
    EXPECT_ERROR(cq_open(dir, GROW_QUEUE, 100, grow_first[5] + 1, &none, err, sizeof err), err,
                 "cq-01000005-0000000000008000.q", "short or damaged");
    TU_REQUIRE(unlink(path) == 0, "unlink %s", path);
    EXPECT_ERROR(cq_open(dir, GROW_QUEUE, 100, grow_first[5] + 1, &none, err, sizeof err), err,
                 "cq-01000005-0000000000008000.q", "cannot open");
    q = OPEN_GROW(grow_first[5], grow_first[5] + 1); /* the missing file is below this head */
    EXPECT_ENTRIES(q, grow_first[5], 1, 1);
    CLOSE_Q(q);
}

/* The files an open sweeps below its head (a crash between a head's advance
 * and its checkpoint's release): exactly those wholly below, inside the ramp
 * (a head inside the file of [2^13, 2^14) keeps it) and past it. */
static void test_grow_sweep_at_open(void)
{
    uint64_t tail = grow_first[8] + 10;
    GROW_WRITTEN(tail);
    cq_t *q = OPEN_GROW(grow_first[2] + 4900, tail); /* 13092: in [8192, 16384), past 12288 */
    CLOSE_Q(q);
    EXPECT_GROW_FILES(2, 9);
    q = OPEN_GROW(grow_first[2] + 4900, tail);
    EXPECT_ENTRIES(q, grow_first[2] + 4900, 100, 100);
    CLOSE_Q(q);
    q = OPEN_GROW(grow_first[8] - 1, tail); /* the last entry of the first 2^18 file */
    CLOSE_Q(q);
    EXPECT_GROW_FILES(7, 9);
    q = OPEN_GROW(grow_first[8], tail);
    CLOSE_Q(q);
    EXPECT_GROW_FILES(8, 9);
}

/* cq_release_below deletes exactly the files wholly below the durable head. */
static void test_grow_release(void)
{
    char err[512] = "";
    uint64_t tail = grow_first[9] + 10;
    cq_t *q = OPEN_GROW(0, 0);
    APPEND_N(q, 0, tail);
    TU_REQUIRE(cq_advance_head(q, tail - 1, err, sizeof err) == 0, "advance: %s", err);
    const struct {
        uint64_t durable;
        int first_kept;
    } steps[] = {
        { 4095, 0 },              /* inside the first file */
        { 4096, 1 },              /* the first file ends there */
        { 12288, 2 },             /* inside [8192, 16384) */
        { grow_first[7] - 1, 6 }, /* the last entry of the ramp */
        { grow_first[7], 7 },     /* the whole ramp below */
        { grow_first[8] + 5, 8 }, /* past the first 2^18 file */
        { UINT64_MAX, 9 },        /* the head's own file stays */
    };
    for (size_t i = 0; i < sizeof steps / sizeof steps[0]; i++) {
        TU_REQUIRE(cq_release_below(q, steps[i].durable, err, sizeof err) == 0, "release below %" PRIu64 ": %s",
                   steps[i].durable, err);
        EXPECT_GROW_FILES(steps[i].first_kept, 10);
    }
    EXPECT_ENTRIES(q, tail - 1, 1, 1);
    APPEND_N(q, tail, 5);
    EXPECT_ENTRIES(q, tail - 1, 6, 6);
    CLOSE_Q(q);
}

/* A file left past the tail by a previous life (made by an append whose tail
 * no checkpoint stored): the next append at its first index opens it, keeps
 * its size, and its old bytes are not entries — at a ramp boundary and past
 * the ramp. */
static void test_grow_file_past_tail(void)
{
    char err[512] = "";
    GROW_WRITTEN(grow_first[7] + 50);
    EXPECT_GROW_FILES(0, 8);
    const int boundary[] = { 7, 2 };
    for (size_t i = 0; i < 2; i++) {
        uint64_t b = grow_first[boundary[i]];
        char path[4200];
        struct stat before, after;
        grow_path(b, path, sizeof path);
        TU_REQUIRE(stat(path, &before) == 0, "%s there", path);
        cq_t *q = OPEN_GROW(0, b);
        for (uint64_t j = 0; j < 3; j++) {
            cq_entry_t e = { 0xF000000 + j, j };
            TU_REQUIRE(cq_append(q, &e, NULL, err, sizeof err) == 0, "append at %" PRIu64 ": %s", b + j, err);
        }
        CLOSE_Q(q);
        TU_CHECK(stat(path, &after) == 0 && after.st_ino == before.st_ino && after.st_size == before.st_size,
                 "%s: opened as it was, not made again", path);
        q = OPEN_GROW(0, b + 3);
        cq_entry_t got[4];
        TU_REQUIRE(cq_read(q, b - 1, 4, got, err, sizeof err) == 0, "read at %" PRIu64 ": %s", b - 1, err);
        TU_CHECK(got[0].log_offset == entry_at(b - 1).log_offset && got[1].log_offset == 0xF000000 &&
                     got[3].log_offset == 0xF000002,
                 "at %" PRIu64 ": %" PRIx64 " %" PRIx64 " %" PRIx64, b, got[0].log_offset, got[1].log_offset,
                 got[3].log_offset);
        CLOSE_Q(q);
    }
}

static const tu_test_t cq_tests[] = {
    { "append and read (buffer and file)", test_append_read },
    { "head advance deletes files below it", test_head_advance },
    { "a release on a queue without files deletes nothing", test_release_without_files },
    { "positional rewrite (file and buffer)", test_rewrite },
    { "rewrites below the buffer are held until a flush", test_rewrite_held },
    { "reopen at the caller's head and tail", test_reopen },
    { "file switch at 2^18 entries", test_file_switch },
    { "a topic's queue: files of 2^12 entries", test_small_files },
    { "a topic's first file made ahead: the first append opens it", test_first_file_ahead },
    { "the layouts: a file's first index, its entries, an index's file", test_layouts },
    { "growing files: appends and reads across every boundary", test_grow_appends },
    { "growing files: rewrites on both sides of every boundary", test_grow_rewrite },
    { "growing files: reopens inside the ramp and past it, missing and short files", test_grow_reopen },
    { "growing files: the sweep below the head at open", test_grow_sweep_at_open },
    { "growing files: a release drops exactly the files wholly below", test_grow_release },
    { "growing files: a file left past the tail by a previous life", test_grow_file_past_tail },
    { "bad inputs: ranges, zero offsets, missing and short files", test_bad_inputs },
    { "a sync handed to another thread: buffer written, dirty files duplicated", test_sync_handoff },
    { NULL, NULL },
};

static const tu_test_t slot_tests[] = {
    { "write, read, overwrite, reopen", test_slot_write_read_overwrite },
    { "torn, zero and missing slot files", test_slot_damaged },
    { NULL, NULL },
};

int main(int argc, char **argv)
{
    static const tu_suite_t suites[] = {
        { "cq", cq_tests },
        { "slot", slot_tests },
    };
    return tu_suites_main(argc, argv, suites, sizeof suites / sizeof suites[0], setup, teardown);
}
