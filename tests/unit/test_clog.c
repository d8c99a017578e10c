/*
 * tests/unit/test_clog.c — CUnit suite for levels/clog.h, the commit log
 * (docs/design-commitlog.md §2–3, step 1).
 *
 * Each test works in its own temporary directory with 64 KiB segments, so a
 * segment switch takes tens of records. Damage is made by writing into the
 * segment files directly; "torn" batches are batches appended after the last
 * clog_sync and then damaged, which is what a power cut can leave.
 */
#define _GNU_SOURCE /* RTLD_NEXT */
#include "levels/clog.h"
#include "tests/helpers/testutil.h"

#include <CUnit/CUnit.h>
#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#define SEG UINT64_C(65536)

static char dir[512];
static char err[1024];

static void setup(void)
{
    TU_REQUIRE(tu_mkdtemp("clog", dir, sizeof dir) == 0, "mkdtemp");
    err[0] = '\0';
}

static void teardown(void)
{
    tu_rmtree(dir);
}

static clog_t *open_log(uint64_t floor, clog_open_report_t *rep)
{
    clog_options_t o = { dir, SEG, floor, 0, 0, 0 };
    clog_t *c = NULL;
    int rc = clog_open(&o, &c, rep, err, sizeof err);
    TU_CHECK(rc == 0, "clog_open: %d %s", rc, err);
    return c;
}

static void payload(char *p, size_t n, uint64_t seed)
{
    for (size_t i = 0; i < n; i++) {
        p[i] = (char)('a' + (seed * 31 + i) % 26);
    }
}

/* Append one batch of n records of `len` bytes; their offsets into ids. */
static void append_batch(clog_t *c, int n, size_t len, uint64_t seed, uint64_t *ids)
{
    clog_batch_t b = { 0 };
    char *p = malloc(len + 1);
    for (int i = 0; i < n; i++) {
        payload(p, len, seed + (uint64_t)i);
        int rc = clog_batch_add(c, &b, p, len, &ids[i], err, sizeof err);
        TU_REQUIRE(rc == 0, "batch_add %d: %d %s", i, rc, err);
    }
    TU_REQUIRE(clog_append(c, &b, err, sizeof err) == 0, "append: %s", err);
    clog_batch_free(&b);
    free(p);
}

static void check_record(clog_t *c, uint64_t id, size_t len, uint64_t seed)
{
    clog_reader_t rd = { 0 };
    clog_record_t r;
    char want[4096];
    payload(want, len, seed);
    int rc = clog_read(c, id, &rd, &r, err, sizeof err);
    TU_CHECK(rc == 0, "read %" PRIu64 ": %d %s", id, rc, err);
    if (rc == 0) {
        TU_CHECK(r.type == CLOG_DATA && r.len == len && memcmp(r.data, want, len) == 0 && r.offset == id,
                 "record %" PRIu64 " reads back as written", id);
    }
    clog_reader_free(&rd);
}

static int read_rc(clog_t *c, uint64_t off)
{
    clog_reader_t rd = { 0 };
    clog_record_t r;
    int rc = clog_read(c, off, &rd, &r, err, sizeof err);
    clog_reader_free(&rd);
    return rc;
}

static void seg_file(uint64_t base, char *p, size_t n)
{
    snprintf(p, n, "%s/clog-%016" PRIx64 ".seg", dir, base);
}

static void poke(uint64_t off, const void *bytes, size_t n)
{
    char path[600];
    seg_file(off - off % SEG, path, sizeof path);
    int fd = open(path, O_WRONLY);
    TU_REQUIRE(fd >= 0, "open %s", path);
    TU_REQUIRE(pwrite(fd, bytes, n, (off_t)(off % SEG)) == (ssize_t)n, "pwrite");
    close(fd);
}

typedef struct walk_count {
    int data, commits;
    uint64_t last;
    int ordered;
} walk_count_t;

static int count_cb(const clog_record_t *r, void *ctx)
{
    walk_count_t *w = ctx;
    if (r->offset <= w->last && w->data + w->commits > 0) {
        w->ordered = 0;
    }
    w->last = r->offset;
    if (r->type == CLOG_DATA) {
        w->data++;
    } else {
        w->commits++;
    }
    return 0;
}

static walk_count_t walk_all(clog_t *c)
{
    walk_count_t w = { 0, 0, 0, 1 };
    int rc = clog_walk(c, 0, count_cb, &w, err, sizeof err);
    TU_CHECK(rc == 0, "walk: %d %s", rc, err);
    TU_CHECK(w.ordered, "walk goes up in offsets");
    return w;
}

/* ----------------------------------------------------------------------------- */

static void test_append_read_reopen(void)
{
    clog_t *c = open_log(0, NULL);
    TU_REQUIRE(c != NULL, "open");
    uint64_t a[3], b[2];
    append_batch(c, 3, 100, 1, a);
    TU_CHECK(a[0] == 32 && a[1] == 32 + 32 + 104 && a[2] == a[1] + 136, "ids are offsets: %" PRIu64 " %" PRIu64, a[0],
             a[1]);
    TU_CHECK(clog_sync(c, err, sizeof err) == 0 && clog_durable(c) == clog_end(c), "sync makes the end durable");
    append_batch(c, 2, 7, 10, b);
    check_record(c, a[0], 100, 1);
    check_record(c, a[2], 100, 3);
    check_record(c, b[1], 7, 11);
    TU_CHECK(read_rc(c, a[1] + 8) == CLOG_NOT_RECORD, "inside a record is not a record");
    TU_CHECK(read_rc(c, clog_end(c)) == CLOG_NOT_RECORD, "the end is not a record");
    TU_CHECK(read_rc(c, 5 * SEG) == CLOG_NOT_RECORD, "no segment there");
    /* the COMMIT after a[2] */
    clog_reader_t rd = { 0 };
    clog_record_t r;
    TU_CHECK(clog_read(c, a[2] + 136, &rd, &r, err, sizeof err) == 0 && r.type == CLOG_COMMIT && r.batch == a[0],
             "a COMMIT ends the batch and names its first offset");
    clog_reader_free(&rd);
    uint64_t end = clog_end(c);
    TU_CHECK(clog_sync(c, err, sizeof err) == 0, "sync: %s", err);
    clog_close(c);

    clog_open_report_t rep;
    c = open_log(0, &rep);
    TU_REQUIRE(c != NULL, "reopen");
    TU_CHECK(rep.end == end && rep.batches == 2 && rep.cut_at == 0,
             "reopen finds 2 batches ending at %" PRIu64 " (got %" PRIu64 ", %" PRIu64 ")", end, rep.end, rep.batches);
    check_record(c, a[1], 100, 2);
    check_record(c, b[0], 7, 10);
    uint64_t d[1];
    append_batch(c, 1, 50, 20, d);
    TU_CHECK(d[0] == end + 0 + 0 || d[0] == end, "with floor 0 the log goes on at its end");
    walk_count_t w = walk_all(c);
    TU_CHECK(w.data == 6 && w.commits == 3, "walk sees 6 records and 3 COMMITs (got %d, %d)", w.data, w.commits);
    walk_count_t from_b = { 0, 0, 0, 1 };
    int rc = clog_walk(c, b[0], count_cb, &from_b, err, sizeof err);
    TU_CHECK(rc == 0 && from_b.data == 3 && from_b.commits == 2, "a walk from b[0] sees b and d (got %d, %d)",
             from_b.data, from_b.commits);
    walk_count_t inside = { 0, 0, 0, 1 };
    rc = clog_walk(c, b[0] + 8, count_cb, &inside, err, sizeof err);
    TU_CHECK(rc == CLOG_NOT_RECORD && inside.data == 0, "a walk from inside a record is refused (%d)", rc);
    clog_close(c);
}

static void test_floor_raises_offsets(void)
{
    clog_t *c = open_log(0, NULL);
    uint64_t a[2];
    append_batch(c, 2, 40, 1, a);
    clog_close(c);
    uint64_t floor = 10 * SEG + 5;
    c = open_log(floor, NULL);
    TU_REQUIRE(c != NULL, "open at a floor");
    uint64_t b[1];
    append_batch(c, 1, 40, 7, b);
    TU_CHECK(b[0] == 11 * SEG + 32, "first id at the first segment boundary above the floor (got %" PRIu64 ")", b[0]);
    clog_close(c);
    clog_open_report_t rep;
    c = open_log(0, &rep);
    TU_CHECK(rep.batches == 2 && rep.cut_at == 0, "the chain crosses the gap (%" PRIu64 " batches)", rep.batches);
    check_record(c, a[1], 40, 2);
    check_record(c, b[0], 40, 7);
    walk_count_t w = walk_all(c);
    TU_CHECK(w.data == 3, "walk crosses the gap (%d records)", w.data);
    TU_CHECK(read_rc(c, floor) == CLOG_NOT_RECORD, "nothing in the gap");
    clog_close(c);
}

static void test_segment_switch(void)
{
    clog_t *c = open_log(0, NULL);
    clog_batch_t b = { 0 };
    char p[1000];
    uint64_t ids[200];
    int n = 0, batches = 0, full = 0;
    while (n < 150) {
        payload(p, sizeof p, (uint64_t)n);
        int rc = clog_batch_add(c, &b, p, sizeof p, &ids[n], err, sizeof err);
        if (rc == CLOG_BATCH_FULL) {
            full++;
            TU_REQUIRE(clog_append(c, &b, err, sizeof err) == 0, "append: %s", err);
            batches++;
            continue;
        }
        TU_REQUIRE(rc == 0, "add: %s", err);
        if (++n % 20 == 0) {
            TU_REQUIRE(clog_append(c, &b, err, sizeof err) == 0, "append: %s", err);
            batches++;
        }
    }
    TU_REQUIRE(clog_append(c, &b, err, sizeof err) == 0, "append: %s", err);
    batches++;
    clog_batch_free(&b);
    TU_CHECK(full >= 2, "batches filled their segment (%d)", full);
    int in_second = 0;
    for (int i = 0; i < n; i++) {
        TU_CHECK(ids[i] % SEG >= 32 && ids[i] % SEG + 32 + 1000 <= SEG, "record %d lies inside one segment", i);
        in_second += ids[i] / SEG == 1;
        if (i > 0 && ids[i] / SEG != ids[i - 1] / SEG) {
            TU_CHECK(ids[i] % SEG == 32, "a switch starts at the segment's first record");
        }
    }
    TU_CHECK(in_second > 0 && ids[n - 1] / SEG >= 2, "three segments used");
    TU_CHECK(clog_sync(c, err, sizeof err) == 0, "sync: %s", err);
    clog_close(c);
    clog_open_report_t rep;
    c = open_log(0, &rep);
    TU_CHECK(rep.batches == (uint64_t)batches && rep.cut_at == 0, "reopen walks %d batches (got %" PRIu64 ")", batches,
             rep.batches);
    for (int i = 0; i < n; i += 7) {
        check_record(c, ids[i], 1000, (uint64_t)i);
    }
    walk_count_t w = walk_all(c);
    TU_CHECK(w.data == n, "walk sees all %d records (got %d)", n, w.data);
    clog_close(c);
}

static void test_torn_past_d_cut(void)
{
    clog_t *c = open_log(0, NULL);
    uint64_t a[2], b[2], d[2];
    append_batch(c, 2, 64, 1, a);
    TU_REQUIRE(clog_sync(c, err, sizeof err) == 0, "sync");
    uint64_t durable = clog_end(c);
    append_batch(c, 2, 64, 3, b); /* D = durable: never synced */
    append_batch(c, 2, 64, 5, d); /* D = durable too: a whole batch past the torn one */
    clog_close(c);
    poke(b[1] + 40, "XX", 2); /* the power cut kept only part of batch b */

    clog_open_report_t rep;
    c = open_log(0, &rep);
    TU_REQUIRE(c != NULL, "a torn batch past D opens");
    TU_CHECK(rep.end == durable && rep.cut_at == b[0] && rep.batches == 1,
             "cut at %" PRIu64 " (got %" PRIu64 ", end %" PRIu64 ")", b[0], rep.cut_at, rep.end);
    struct stat st;
    TU_CHECK(stat(rep.cut_file, &st) == 0 && (uint64_t)st.st_size == rep.cut_bytes && rep.cut_bytes > 0,
             "the cut bytes are kept in %s", rep.cut_file);
    check_record(c, a[1], 64, 2);
    TU_CHECK(read_rc(c, d[0]) == CLOG_NOT_RECORD, "the whole batch past the cut is gone");
    uint64_t e[1];
    append_batch(c, 1, 64, 9, e);
    TU_CHECK(e[0] == durable, "the log goes on at the cut");
    clog_close(c);
    c = open_log(0, &rep);
    TU_CHECK(rep.batches == 2 && rep.cut_at == 0, "after the cut the log reopens clean");
    check_record(c, e[0], 64, 9);
    clog_close(c);
}

static void test_torn_below_d_refused(void)
{
    clog_t *c = open_log(0, NULL);
    uint64_t a[2], b[2], d[1];
    append_batch(c, 2, 64, 1, a);
    append_batch(c, 2, 64, 3, b);
    TU_REQUIRE(clog_sync(c, err, sizeof err) == 0, "sync");
    append_batch(c, 1, 64, 5, d); /* D = the end of b: a and b were durable */
    clog_close(c);
    poke(b[0] + 40, "XX", 2);

    clog_options_t o = { dir, SEG, 0, 0, 0, 0 };
    clog_t *c2 = NULL;
    int rc = clog_open(&o, &c2, NULL, err, sizeof err);
    TU_CHECK(rc == CLOG_DAMAGED && c2 == NULL, "damage below D is refused (rc %d)", rc);
    char want[64];
    snprintf(want, sizeof want, "offset %" PRIu64 ":", b[0]);
    TU_CHECK(strstr(err, "clog-0000000000000000.seg") != NULL && strstr(err, want) != NULL,
             "the error names the file and offset: %s", err);
    char torn[700];
    snprintf(torn, sizeof torn, "%s/clog-0000000000000000.seg.torn-%016" PRIx64, dir, b[0]);
    TU_CHECK(access(torn, F_OK) != 0, "nothing was cut");
    /* still refused: nothing was changed */
    TU_CHECK(clog_open(&o, &c2, NULL, err, sizeof err) == CLOG_DAMAGED, "refused again");
}

static void test_recycled_segment(void)
{
    clog_t *c = open_log(0, NULL);
    uint64_t ids[120];
    for (int i = 0; i < 120; i++) {
        append_batch(c, 1, 1000, (uint64_t)i, &ids[i]);
    }
    TU_REQUIRE(ids[119] / SEG >= 1, "two segments used");
    TU_CHECK(clog_recycle(c, 0, err, sizeof err) == -1 && strstr(err, "not wholly durable") != NULL,
             "an unsynced segment is not recycled: %s", err);
    TU_REQUIRE(clog_sync(c, err, sizeof err) == 0, "sync");
    TU_CHECK(clog_recycle(c, ids[119] - ids[119] % SEG, err, sizeof err) == -1, "the segment in use is not recycled");
    /* the redo's checkpoint keeps its segment and every one after it; 0 keeps them all */
    clog_keep_from(c, 0);
    TU_CHECK(clog_recycle(c, 0, err, sizeof err) == -1 && strstr(err, "checkpoint 0") != NULL,
             "nothing is recycled while the checkpoint is 0: %s", err);
    clog_keep_from(c, ids[1]);
    TU_CHECK(clog_recycle(c, 0, err, sizeof err) == -1 && strstr(err, "at or past the log's checkpoint") != NULL,
             "the checkpoint's segment is not recycled: %s", err);
    clog_keep_from(c, ids[119]);
    TU_REQUIRE(clog_recycle(c, 0, err, sizeof err) == 0, "recycle: %s", err);
    TU_CHECK(read_rc(c, ids[0]) == CLOG_NOT_RECORD, "a recycled segment's ids are gone");
    uint64_t newbase = (ids[119] / SEG + 1) * SEG;
    char path[600];
    seg_file(newbase, path, sizeof path);
    TU_CHECK(access(path, F_OK) == 0, "the recycled segment is the next spare, %s", path);
    /* fill until the recycled segment is in use: its stale records must read as nothing */
    uint64_t id = 0;
    int k = 0;
    while (id < newbase) {
        append_batch(c, 1, 1000, 500 + (uint64_t)k++, &id);
    }
    TU_CHECK(id == newbase + 32, "the recycled segment takes the next batch (%" PRIu64 ")", id);
    TU_REQUIRE(clog_sync(c, err, sizeof err) == 0, "sync");
    clog_close(c);
    clog_open_report_t rep;
    c = open_log(0, &rep);
    TU_REQUIRE(c != NULL, "reopen after recycling");
    TU_CHECK(rep.end == id + 32 + 1000 + 56 && rep.cut_at == 0, "the end is after the new batch (%" PRIu64 ")",
             rep.end);
    check_record(c, id, 1000, 500 + (uint64_t)(k - 1));
    /* the stale record a few positions on: the old record of ids[3] sits at the same file position */
    TU_CHECK(read_rc(c, newbase + ids[3] % SEG) == CLOG_NOT_RECORD, "a stale record of an earlier life is no record");
    check_record(c, ids[119], 1000, 119);
    clog_close(c);
}

/* A record header of the layout in clog.c, forged into a payload: right
 * offset, a guessed life, a valid CRC. */
static uint32_t crc32c_sw(const unsigned char *p, size_t n)
{
    uint32_t c = 0xffffffffu;
    while (n--) {
        c ^= *p++;
        for (int k = 0; k < 8; k++) {
            c = c & 1 ? (c >> 1) ^ 0x82f63b78u : c >> 1;
        }
    }
    return ~c;
}

static void put_be(unsigned char *p, uint64_t v, int n)
{
    for (int i = 0; i < n; i++) {
        p[i] = (unsigned char)(v >> (8 * (n - 1 - i)));
    }
}

static void test_forged_record_in_payload(void)
{
    clog_t *c = open_log(0, NULL);
    uint64_t a[1];
    append_batch(c, 1, 10, 1, a);
    uint64_t id = clog_end(c);   /* a producer can predict the next id */
    uint64_t fake = id + 32 + 8; /* inside the next payload, 8-aligned */
    unsigned char p[200] = { 0 };
    unsigned char *h = p + 8;
    const char *body = "forged!!";
    for (int guess = 0; guess < 2; guess++) {
        uint64_t life = guess == 0 ? 0 : UINT64_C(0x0123456789abcdef);
        h[4] = CLOG_DATA;
        put_be(h + 8, 8, 4);
        put_be(h + 12, 0, 4);
        put_be(h + 16, fake, 8);
        put_be(h + 24, life, 8);
        memcpy(h + 32, body, 8);
        put_be(h, crc32c_sw(h + 4, 28 + 8), 4);
        clog_batch_t b = { 0 };
        uint64_t got;
        TU_REQUIRE(clog_batch_add(c, &b, p, sizeof p, &got, err, sizeof err) == 0, "add");
        TU_REQUIRE(clog_append(c, &b, err, sizeof err) == 0, "append");
        clog_batch_free(&b);
        TU_CHECK(got == id, "the producer guessed its id");
        TU_CHECK(read_rc(c, fake) == CLOG_NOT_RECORD, "a forged record in a payload is no record (guess %d)", guess);
        id = clog_end(c);
        fake = id + 32 + 8;
    }
    walk_count_t w = walk_all(c);
    TU_CHECK(w.data == 3, "the walk sees the 3 real records only (%d)", w.data);
    clog_close(c);
}

/* A header's type byte and its three zero bytes are part of its
 * plausibility: a record whose type is unknown or whose zero bytes are not
 * is no record (CLOG_NOT_RECORD, never a CRC failure), through a reader with
 * no window and through one with a window alike. */
static void test_header_type_and_zero_bytes(void)
{
    clog_t *c = open_log(0, NULL);
    uint64_t a[4];
    append_batch(c, 4, 40, 1, a);
    const unsigned char pokes[4][2] = { { 4, 3 }, { 5, 1 }, { 6, 0x80 }, { 7, 1 } };
    for (int i = 0; i < 4; i++) {
        poke(a[i] + pokes[i][0], &pokes[i][1], 1);
        clog_reader_t rd = { .window = 4096 };
        clog_record_t r;
        int windowed = clog_read(c, a[i], &rd, &r, err, sizeof err);
        clog_reader_free(&rd);
        TU_CHECK(read_rc(c, a[i]) == CLOG_NOT_RECORD && windowed == CLOG_NOT_RECORD,
                 "byte %d of the header set to %d: no record (%d with a window)", pokes[i][0], pokes[i][1], windowed);
    }
    clog_close(c);
}

static void test_bad_inputs(void)
{
    clog_t *c = open_log(0, NULL);
    clog_batch_t b = { 0 };
    uint64_t id;
    char *big = calloc(1, SEG);
    TU_CHECK(clog_batch_add(c, &b, big, SEG - 100, &id, err, sizeof err) == -1 && strstr(err, "cannot fit") != NULL &&
                 strstr(err, "65436 bytes") != NULL,
             "a record larger than a segment: %s", err);
    free(big);
    clog_batch_free(&b);
    uint64_t a[2];
    append_batch(c, 2, 64, 1, a);
    clog_close(c);

    /* a damaged record header below the end: the read says so, naming file and offset */
    poke(a[1] + 8 + 3, "\x01", 1); /* its length */
    c = open_log(0, NULL);
    /* the batch is torn now (nothing was synced past it): the open cut it */
    TU_CHECK(c != NULL && read_rc(c, a[0]) == CLOG_NOT_RECORD, "an unsynced damaged batch is cut");
    uint64_t e[2];
    append_batch(c, 2, 64, 3, e);
    poke(e[1] + 40, "Z", 1); /* payload byte: the header stays plausible, the CRC fails */
    clog_reader_t rd = { 0 };
    clog_record_t r;
    int rc = clog_read(c, e[1], &rd, &r, err, sizeof err);
    char want[64];
    snprintf(want, sizeof want, "offset %" PRIu64 ": record CRC mismatch", e[1]);
    TU_CHECK(rc == -1 && strstr(err, want) != NULL && strstr(err, "clog-0000000000000000.seg") != NULL,
             "a damaged record names file and offset: %s", err);
    clog_reader_free(&rd);
    clog_close(c);

    /* a damaged segment header */
    poke(0, "X", 1);
    clog_options_t o = { dir, SEG, 0, 0, 0, 0 };
    clog_t *c2 = NULL;
    rc = clog_open(&o, &c2, NULL, err, sizeof err);
    TU_CHECK(rc == CLOG_DAMAGED && strstr(err, "clog-0000000000000000.seg: offset 0: damaged segment header") != NULL,
             "a damaged segment header: %s", err);
    poke(0, "H", 1);

    /* a segment of another size */
    o.segment_bytes = 2 * SEG;
    rc = clog_open(&o, &c2, NULL, err, sizeof err);
    TU_CHECK(rc == -1 && strstr(err, "65536 bytes, not the segment size 131072") != NULL, "size mismatch: %s", err);
    o.segment_bytes = 1000;
    rc = clog_open(&o, &c2, NULL, err, sizeof err);
    TU_CHECK(rc == -1 && strstr(err, "segment size 1000 must be") != NULL, "bad option: %s", err);
    o.segment_bytes = SEG;

    /* a foreign file named like ours */
    char path[600];
    snprintf(path, sizeof path, "%s/clog-notours.seg", dir);
    TU_REQUIRE(tu_write_file(path, "x") == 0, "write");
    rc = clog_open(&o, &c2, NULL, err, sizeof err);
    TU_CHECK(rc == -1 && strstr(err, "clog-notours.seg: not a commit log file") != NULL, "foreign file: %s", err);
    unlink(path);
    rc = clog_open(&o, &c2, NULL, err, sizeof err);
    TU_CHECK(rc == 0, "opens again once repaired: %s", err);
    clog_close(c2);
}

static void test_torn_last_batch_cut(void)
{
    clog_t *c = open_log(0, NULL);
    uint64_t a[1], b[3];
    append_batch(c, 1, 64, 1, a);
    uint64_t end1 = clog_end(c);
    append_batch(c, 3, 64, 2, b);
    uint64_t commit = clog_end(c) - 56;
    clog_close(c);
    char zeros[56] = { 0 };
    poke(commit, zeros, sizeof zeros); /* the COMMIT never reached the disk */
    clog_open_report_t rep;
    c = open_log(0, &rep);
    TU_REQUIRE(c != NULL, "open");
    TU_CHECK(rep.end == end1 && rep.cut_at == b[0] && rep.cut_bytes == commit - b[0],
             "a batch without its COMMIT does not exist: end %" PRIu64 ", cut %" PRIu64 " bytes", rep.end,
             rep.cut_bytes);
    TU_CHECK(read_rc(c, b[0]) == CLOG_NOT_RECORD, "its records are gone");
    clog_close(c);
}

static void test_leading_spare_with_damaged_start(void)
{
    clog_t *c = open_log(0, NULL);
    uint64_t ids[80], d[1];
    for (int i = 0; i < 80; i++) {
        append_batch(c, 1, 1000, (uint64_t)i, &ids[i]);
    }
    TU_REQUIRE(ids[79] / SEG == 1, "the log goes on in a second segment");
    TU_REQUIRE(clog_sync(c, err, sizeof err) == 0, "sync");
    append_batch(c, 1, 64, 100, d); /* says all of it was durable */
    clog_close(c);
    /* the first record's offset field: the first segment's start now looks unused, as a spare's does,
       and the second segment begins with a whole batch */
    poke(ids[0] + 20, "\x7f", 1);
    clog_options_t o = { dir, SEG, 0, 0, 0, 0 };
    clog_t *c2 = NULL;
    int rc = clog_open(&o, &c2, NULL, err, sizeof err);
    TU_CHECK(rc == CLOG_DAMAGED && strstr(err, "clog-0000000000000000.seg: offset 32:") != NULL,
             "a damaged first record is not taken for an unused segment: %d %s", rc, err);
    clog_close(c2);
}

typedef struct syncer {
    clog_t *c;
    atomic_int stop;
    int failures, syncs;
    uint64_t last;
} syncer_t;

static void *syncer_main(void *arg)
{
    syncer_t *y = arg;
    char e[512];
    while (!atomic_load(&y->stop)) {
        if (clog_sync(y->c, e, sizeof e) != 0) {
            y->failures++;
        }
        uint64_t d = clog_durable(y->c);
        if (d < y->last) {
            y->failures++;
        }
        y->last = d;
        y->syncs++;
    }
    return NULL;
}

static void test_syncer_thread(void)
{
    clog_t *c = open_log(0, NULL);
    syncer_t y = { c, 0, 0, 0, 0 };
    pthread_t t;
    TU_REQUIRE(pthread_create(&t, NULL, syncer_main, &y) == 0, "thread");
    uint64_t id = 0;
    for (int i = 0; i < 300; i++) {
        append_batch(c, 1, 700, (uint64_t)i, &id);
    }
    atomic_store(&y.stop, 1);
    pthread_join(t, NULL);
    TU_CHECK(y.failures == 0 && y.syncs > 0, "the syncer's syncs succeed and D never goes back (%d syncs)", y.syncs);
    TU_CHECK(id / SEG >= 2, "the appends switched segments under the syncer");
    TU_CHECK(clog_sync(c, err, sizeof err) == 0 && clog_durable(c) == clog_end(c), "a last sync covers the end");
    clog_close(c);
    clog_open_report_t rep;
    c = open_log(0, &rep);
    TU_CHECK(rep.batches == 300 && rep.cut_at == 0, "all 300 batches reopen (%" PRIu64 ")", rep.batches);
    clog_close(c);
}

/* clog_abandon after a failed sync: the range past the durable end is
 * reported, a batch begun before it is refused (nothing written), the next
 * batch starts a fresh segment whose chain an open from the abandoned tail
 * follows. */
static void test_abandon(void)
{
    clog_t *c = open_log(0, NULL);
    TU_REQUIRE(c != NULL, "open");
    uint64_t ids[4];
    append_batch(c, 2, 100, 1, ids);
    TU_REQUIRE(clog_sync(c, err, sizeof err) == 0, "%s", err);
    uint64_t synced = clog_end(c);
    append_batch(c, 1, 100, 3, ids + 2);
    uint64_t tail = clog_end(c);
    clog_batch_t late = { 0 };
    uint64_t late_id;
    TU_REQUIRE(clog_batch_add(c, &late, "late", 4, &late_id, err, sizeof err) == 0, "%s", err);
    uint64_t from, to;
    clog_abandon(c, &from, &to);
    TU_CHECK(from == synced && to == tail, "abandoned [%" PRIu64 ", %" PRIu64 "), want [%" PRIu64 ", %" PRIu64 ")",
             from, to, synced, tail);
    TU_CHECK(clog_append(c, &late, err, sizeof err) == -1 && strstr(err, "abandoned") != NULL && clog_end(c) == tail,
             "a batch begun before the abandon is refused, nothing written: %s", err);
    TU_REQUIRE(clog_batch_add(c, &late, "late", 4, &late_id, err, sizeof err) == 0 &&
                   clog_append(c, &late, err, sizeof err) == 0,
               "added again: %s", err);
    clog_batch_free(&late);
    TU_CHECK(late_id == SEG + CLOG_SEGMENT_HEADER, "the next batch starts the fresh segment (%" PRIu64 ")", late_id);
    TU_REQUIRE(clog_sync(c, err, sizeof err) == 0 && clog_durable(c) == clog_end(c), "sync: %s", err);
    uint64_t end = clog_end(c);
    clog_close(c);
    clog_options_t o = { dir, SEG, 0, 0, to, 0 };
    clog_open_report_t rep;
    TU_REQUIRE(clog_open(&o, &c, &rep, err, sizeof err) == 0, "reopen from the abandoned tail: %s", err);
    TU_CHECK(rep.end == end && rep.batches == 1,
             "the chain carries on into the fresh segment (end %" PRIu64 ", %" PRIu64 " batches)", rep.end,
             rep.batches);
    clog_reader_t rd = { 0 };
    clog_record_t r;
    TU_CHECK(clog_read(c, late_id, &rd, &r, err, sizeof err) == 0 && r.len == 4 && memcmp(r.data, "late", 4) == 0,
             "the fresh segment's record reads back");
    clog_reader_free(&rd);
    clog_close(c);
}

static int base_order(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

/* The answer the recycle used to read from the directory: every clog-<16 hex>.seg name wholly below `below`
 * that is no spare, ascending. Returns the count (at most max). */
static size_t listed_below(const clog_t *c, uint64_t below, uint64_t *out, size_t max)
{
    DIR *d = opendir(dir);
    TU_REQUIRE(d != NULL, "opendir %s", dir);
    size_t n = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL && n < max) {
        uint64_t base;
        char tail;
        if (sscanf(e->d_name, "clog-%16" SCNx64 ".se%c", &base, &tail) == 2 && tail == 'g' && strlen(e->d_name) == 25 &&
            base + SEG <= below && !clog_is_spare(c, base)) {
            out[n++] = base;
        }
    }
    closedir(d);
    qsort(out, n, sizeof *out, base_order);
    return n;
}

/* clog_segments_below(c, 0, below) agrees with the directory's listing, and a walk a page of one at a time
 * (from the last + 1) gives the same bases. Returns the count. */
static size_t check_below_at(const clog_t *c, uint64_t below, int line)
{
    uint64_t got[64], want[64], paged[64];
    size_t n = clog_segments_below(c, 0, below, got, 64), w = listed_below(c, below, want, 64), p = 0;
    for (uint64_t from = 0; p < 64 && clog_segments_below(c, from, below, &paged[p], 1) == 1; p++) {
        from = paged[p] + 1;
    }
    int same = n == w && p == w && memcmp(got, want, n * sizeof *got) == 0 && memcmp(paged, want, p * sizeof *got) == 0;
    TU_CHECK_AT(same, line,
                "below %" PRIu64 ": %zu segments (first %" PRIx64 ", last %" PRIx64 "), %zu paged; the directory lists "
                "%zu (first %" PRIx64 ", last %" PRIx64 ")",
                below, n, n > 0 ? got[0] : 0, n > 0 ? got[n - 1] : 0, p, w, w > 0 ? want[0] : 0,
                w > 0 ? want[w - 1] : 0);
    return n;
}
#define check_below(c, below) check_below_at((c), (below), __LINE__)

/* The segments wholly below an offset that hold batches (the recycle's candidates, read from the log's list, not
 * the directory): spares are not among them — past the end after clog_prepare, a recycled one, and those an open
 * at a later floor leaves below the log's end (as a failed sync's carry does) — and an abandoned one is. */
static void test_segments_below(void)
{
    clog_t *c = open_log(0, NULL);
    TU_REQUIRE(c != NULL, "open");
    uint64_t id;
    for (int i = 0; i < 160; i++) { /* 1 056 bytes a batch: into the third segment */
        append_batch(c, 1, 1000, (uint64_t)i, &id);
    }
    TU_REQUIRE(id / SEG == 2, "three segments used (the last record at %" PRIu64 ")", id);
    TU_CHECK(clog_spare_count(c) == 0, "no spare before clog_prepare (%zu)", clog_spare_count(c));
    TU_REQUIRE(clog_sync(c, err, sizeof err) == 0 && clog_prepare(c, 2, err, sizeof err) == 0, "%s", err);
    TU_CHECK(clog_spare_count(c) == 2, "the two spares pre-written are counted (%zu)", clog_spare_count(c));
    uint64_t out[8];
    TU_CHECK(check_below(c, 0) == 0 && check_below(c, SEG - 1) == 0 && check_below(c, SEG) == 1 &&
                 check_below(c, 2 * SEG + 1) == 2,
             "the first segments by the offsets they end below");
    TU_CHECK(check_below(c, UINT64_MAX) == 3 && clog_segments_below(c, 0, UINT64_MAX, out, 8) == 3 && out[0] == 0 &&
                 out[1] == SEG && out[2] == 2 * SEG,
             "every segment holding batches, the one in use too; not the two spares past it");
    TU_CHECK(clog_segments_below(c, SEG, UINT64_MAX, out, 1) == 1 && out[0] == SEG,
             "from an offset, at most max of them");

    clog_keep_from(c, clog_end(c));
    TU_REQUIRE(clog_recycle(c, 0, err, sizeof err) == 0, "recycle: %s", err);
    TU_CHECK(check_below(c, UINT64_MAX) == 2 && clog_segments_below(c, 0, UINT64_MAX, out, 8) == 2 && out[0] == SEG,
             "a recycled segment is a spare: no longer listed");
    TU_CHECK(clog_spare_count(c) == 3, "a recycled segment is counted as a spare (%zu)", clog_spare_count(c));

    uint64_t from, to;
    append_batch(c, 1, 1000, 200, &id); /* never synced: abandoned */
    clog_abandon(c, &from, &to);
    append_batch(c, 1, 1000, 201, &id); /* the fresh segment, a spare taken */
    TU_REQUIRE(id == 3 * SEG + CLOG_SEGMENT_HEADER && clog_sync(c, err, sizeof err) == 0,
               "the batch after the abandon starts the next segment (%" PRIu64 "): %s", id, err);
    TU_CHECK(clog_spare_count(c) == 2, "the spare the segment switch took is no longer counted (%zu)",
             clog_spare_count(c));
    TU_CHECK(check_below(c, UINT64_MAX) == 3 && clog_segments_below(c, 0, 3 * SEG, out, 8) == 2 && out[1] == 2 * SEG,
             "the abandoned segment holds batches: listed");
    clog_close(c);

    /* reopened at a floor past every file (a later clock; a failed sync's carry starts the log past them too): the
       spares lie below where its next batch goes and are not listed; its next segment takes the lowest of them */
    c = open_log(12 * SEG, NULL);
    TU_REQUIRE(c != NULL, "reopen");
    TU_CHECK(check_below(c, UINT64_MAX) == 3 && check_below(c, 12 * SEG) == 3,
             "after the reopen the same three segments");
    append_batch(c, 1, 1000, 202, &id);
    TU_REQUIRE(id == 12 * SEG + CLOG_SEGMENT_HEADER && clog_sync(c, err, sizeof err) == 0, "at the floor (%" PRIu64 ")",
               id);
    TU_CHECK(check_below(c, UINT64_MAX) == 4 && check_below(c, 12 * SEG) == 3,
             "the segment the floor started holds a batch: listed");
    clog_close(c);
}

/* fdatasync as Linux reports a writeback error (fsyncgate): while g_fail_syncs_left > 0 a call fails with EIO
 * (and counts down); every other call syncs — also a later one through the descriptor that saw the error, which
 * then "succeeds" over pages the kernel may have dropped. g_syncs counts the calls. */
static atomic_int g_fail_syncs_left, g_syncs;

int fdatasync(int fd)
{
    int (*real)(int) = (int (*)(int))dlsym(RTLD_NEXT, "fdatasync");
    atomic_fetch_add(&g_syncs, 1);
    int left = atomic_load(&g_fail_syncs_left);
    while (left > 0 && !atomic_compare_exchange_weak(&g_fail_syncs_left, &left, left - 1)) {
    }
    if (left > 0) {
        errno = EIO;
        return -1;
    }
    return real(fd);
}

/* A failed clog_sync sticks until clog_abandon: a second call (the storage thread's read barrier after the
 * syncer's failure, before anyone abandoned the segment) fails with the same errno and calls no fdatasync, so the
 * durable end stays below the range the failure lost; after the abandon the fresh segment syncs. Before, the second
 * call's fdatasync "succeeded" and moved the durable end over that range, and clog_abandon then found nothing to
 * abandon. */
static void test_failed_sync_sticks(void)
{
    clog_t *c = open_log(0, NULL);
    TU_REQUIRE(c != NULL, "open");
    uint64_t ids[4];
    append_batch(c, 2, 100, 1, ids);
    TU_REQUIRE(clog_sync(c, err, sizeof err) == 0, "%s", err);
    uint64_t synced = clog_durable(c);
    append_batch(c, 1, 100, 3, ids + 2);
    uint64_t tail = clog_end(c);
    atomic_store(&g_fail_syncs_left, 1);
    errno = 0;
    int rc = clog_sync(c, err, sizeof err);
    int e = errno;
    TU_CHECK(rc == -1 && e == EIO && strstr(err, "cannot fdatasync") != NULL, "the failed sync: %d, errno %d: %s", rc,
             e, err);
    atomic_store(&g_syncs, 0);
    errno = 0;
    rc = clog_sync(c, err, sizeof err);
    e = errno;
    TU_CHECK(rc == -1 && e == EIO && strstr(err, "an earlier fdatasync of the log failed") != NULL &&
                 strstr(err, "Input/output error") != NULL,
             "the sync after it fails too, naming the first failure: %d, errno %d: %s", rc, e, err);
    TU_CHECK(atomic_load(&g_syncs) == 0 && clog_durable(c) == synced,
             "the sync after a failure made %d fdatasync calls, durable end %" PRIu64 " (want 0 calls, %" PRIu64 ")",
             atomic_load(&g_syncs), clog_durable(c), synced);
    uint64_t from, to;
    clog_abandon(c, &from, &to);
    TU_CHECK(from == synced && to == tail, "abandoned [%" PRIu64 ", %" PRIu64 "), want [%" PRIu64 ", %" PRIu64 ")",
             from, to, synced, tail);
    append_batch(c, 1, 100, 4, ids + 3);
    err[0] = '\0';
    TU_CHECK(clog_sync(c, err, sizeof err) == 0 && clog_durable(c) == clog_end(c) && atomic_load(&g_syncs) > 0,
             "after the abandon the fresh segment syncs (%d fdatasync calls, its header's included): %s",
             atomic_load(&g_syncs), err);
    clog_close(c);
}

/* Lower this process's file-size limit to `bytes` (SIGXFSZ ignored, so a
 * write past it fails with EFBIG, as a write on a full disk fails with
 * ENOSPC), or restore *saved when bytes is 0. */
static void file_size_limit(rlim_t bytes, struct rlimit *saved)
{
    fflush(NULL);
    if (bytes == 0) {
        TU_REQUIRE(setrlimit(RLIMIT_FSIZE, saved) == 0, "setrlimit back: %s", strerror(errno));
        signal(SIGXFSZ, SIG_DFL);
        return;
    }
    TU_REQUIRE(getrlimit(RLIMIT_FSIZE, saved) == 0, "getrlimit: %s", strerror(errno));
    struct rlimit low = *saved;
    low.rlim_cur = bytes;
    signal(SIGXFSZ, SIG_IGN);
    TU_REQUIRE(setrlimit(RLIMIT_FSIZE, &low) == 0, "setrlimit: %s", strerror(errno));
}

/* A write the file system refuses keeps its errno (clog_write_errno), so a
 * caller tells a full disk (ENOSPC, EDQUOT, EFBIG) without reading the
 * message: a segment that cannot be pre-written under a 16 KiB file-size
 * limit fails the add with EFBIG; once the limit is lifted the add and its
 * append succeed and the errno is 0 again; a batch whose pwrite lies past the
 * limit fails its append with EFBIG too. */
static void test_write_errno(void)
{
    clog_t *c = open_log(0, NULL);
    clog_batch_t b = { 0 };
    uint64_t id;
    struct rlimit saved;
    file_size_limit(16 << 10, &saved);
    int rc = clog_batch_add(c, &b, "abc", 3, &id, err, sizeof err);
    file_size_limit(0, &saved);
    TU_CHECK(rc == -1 && clog_write_errno(c) == EFBIG && strstr(err, "cannot pre-write") != NULL &&
                 strstr(err, strerror(EFBIG)) != NULL,
             "a segment past the file-size limit: rc %d, errno %d (%s), \"%s\" (want EFBIG)", rc, clog_write_errno(c),
             strerror(clog_write_errno(c)), err);
    clog_batch_free(&b);
    clog_batch_t ok = { 0 };
    rc = clog_batch_add(c, &ok, "abc", 3, &id, err, sizeof err);
    TU_CHECK(rc == 0 && clog_write_errno(c) == 0, "the add without the limit: rc %d, errno %d: %s", rc,
             clog_write_errno(c), err);
    TU_CHECK(clog_append(c, &ok, err, sizeof err) == 0, "append: %s", err);
    clog_batch_free(&ok);
    clog_batch_t late = { 0 };
    TU_REQUIRE(clog_batch_add(c, &late, "def", 3, &id, err, sizeof err) == 0, "add: %s", err);
    file_size_limit(16, &saved); /* the batch lies past byte 16 of its segment */
    rc = clog_append(c, &late, err, sizeof err);
    file_size_limit(0, &saved);
    TU_CHECK(rc == -1 && clog_write_errno(c) == EFBIG && strstr(err, "cannot append") != NULL,
             "an append past the file-size limit: rc %d, errno %d, \"%s\" (want EFBIG)", rc, clog_write_errno(c), err);
    clog_batch_free(&late);
    clog_close(c);
}

/* The file the pre-writer writes a spare in, and its size (-1: no such
 * file). */
#define STEP_SEG (UINT64_C(4) << 20)
static long long step_file_size(void)
{
    char path[600];
    snprintf(path, sizeof path, "%s/clog-ffffffffffffffff.seg.new", dir);
    struct stat st;
    return stat(path, &st) == 0 ? (long long)st.st_size : -1;
}

/* What the pre-writer cases poll for (tu_poll_until). */
typedef struct step_poll {
    clog_t *c;
    unsigned pace_ms;
    int rc;         /* step_answered: the step's last answer */
    long long size; /* step_file_is: the size awaited (-1: no file) */
} step_poll_t;

static int step_answered(void *ctx)
{
    step_poll_t *sp = ctx;
    sp->rc = clog_prepare_step(sp->c, sp->pace_ms, err, sizeof err);
    return sp->rc != 0;
}

/* clog_prepare_step(c, pace_ms) until it answers other than 0, for at most
 * 30 s (the pre-writer works on its own thread): its last answer. */
static int step_until_done(clog_t *c, unsigned pace_ms)
{
    step_poll_t sp = { c, pace_ms, 0, 0 };
    (void)tu_poll_until(step_answered, &sp, 30000, 1);
    return sp.rc;
}

static int step_file_is(void *ctx)
{
    return step_file_size() == ((step_poll_t *)ctx)->size;
}

/* Poll the pre-writer's file for ms milliseconds: 1 when its size became
 * `size` (-1: no file). A wait for a change uses generous deadlines; a wait
 * that something does NOT happen (held, nothing asked for) can only pass
 * wrongly, never fail wrongly, so it is short. */
static int step_file_becomes(long long size, uint64_t ms)
{
    step_poll_t sp = { NULL, 0, 0, size };
    return tu_poll_until(step_file_is, &sp, (int)ms, 1) == 0;
}

#define STEP_WAIT_MS  30000 /* for a chunk or a whole spare to be written */
#define STEP_QUIET_MS 200   /* for nothing to be written */

/* A log of STEP_SEG segments in dir with one record of 1000 bytes (*first). */
static clog_t *open_step_log(uint64_t *first)
{
    clog_options_t o = { dir, STEP_SEG, 0, 0, 0, 0 };
    clog_t *c = NULL;
    TU_REQUIRE(clog_open(&o, &c, NULL, err, sizeof err) == 0, "open: %s", err);
    append_batch(c, 1, 1000, 1, first);
    return c;
}

/* Records of 4000 bytes, 50 a batch, appended until one lies in the segment
 * at STEP_SEG: their ids into ids[2000]; the count. */
static int fill_into_second_segment(clog_t *c, uint64_t *ids)
{
    static char p[4000];
    clog_batch_t b = { 0 };
    int n = 0;
    while (n < 2000 && (n == 0 || ids[n - 1] < STEP_SEG)) {
        payload(p, sizeof p, 100 + (uint64_t)n);
        int rc = clog_batch_add(c, &b, p, sizeof p, &ids[n], err, sizeof err);
        if (rc == CLOG_BATCH_FULL || (rc == 0 && ++n % 50 == 0)) {
            TU_REQUIRE(clog_append(c, &b, err, sizeof err) == 0, "append: %s", err);
        } else {
            TU_REQUIRE(rc == 0, "add: %s", err);
        }
    }
    TU_REQUIRE(clog_append(c, &b, err, sizeof err) == 0, "append: %s", err);
    clog_batch_free(&b);
    TU_REQUIRE(ids[n - 1] == STEP_SEG + 32, "the switch starts the second segment (%" PRIu64 ")", ids[n - 1]);
    return n;
}

/* A spare pre-written by the pre-writer (4 MiB segments): the step that
 * takes the whole file makes it the spare past every segment (the file
 * gone); with a spare ahead a step asks for nothing; the segment switch takes
 * that very file (same inode: no segment written at the switch), the records
 * on both sides read back after a reopen; a spare half-written at the close
 * (chunks a minute apart) is removed, and the close does not wait for its
 * pace. */
static void test_prepare_steps(void)
{
    clog_options_t o = { dir, STEP_SEG, 0, 0, 0, 0 };
    uint64_t first;
    clog_t *c = open_step_log(&first);
    char path[600];
    seg_file(STEP_SEG, path, sizeof path);
    TU_CHECK(access(path, F_OK) != 0, "no segment before the spare is taken");
    TU_CHECK(step_until_done(c, 0) == 1, "a step takes the finished spare: %s", err);
    TU_CHECK(step_file_size() == -1, "the pre-writer's file became the segment");
    struct stat spare;
    TU_REQUIRE(stat(path, &spare) == 0 && (uint64_t)spare.st_size == STEP_SEG, "the spare %s, whole", path);
    TU_CHECK(clog_is_spare(c, STEP_SEG), "it is a spare");
    TU_CHECK(clog_prepare_step(c, 0, err, sizeof err) == 0, "with a spare ahead a step takes nothing");
    TU_CHECK(!step_file_becomes(0, STEP_QUIET_MS) && step_file_size() == -1,
             "with a spare ahead nothing is pre-written");
    static uint64_t ids[2000];
    int n = fill_into_second_segment(c, ids);
    struct stat used;
    TU_CHECK(stat(path, &used) == 0 && used.st_ino == spare.st_ino && !clog_is_spare(c, STEP_SEG),
             "the switch took the spare's file, written by the pre-writer");
    TU_REQUIRE(clog_sync(c, err, sizeof err) == 0, "sync: %s", err);
    TU_CHECK(clog_prepare_step(c, 60000, err, sizeof err) == 0, "the next spare is asked for: %s", err);
    TU_CHECK(step_file_becomes(1 << 20, STEP_WAIT_MS),
             "its first chunk is written, the next waits a minute (%lld bytes)", step_file_size());
    uint64_t t0 = tu_now_mono_ms();
    clog_close(c);
    TU_CHECK(tu_now_mono_ms() - t0 < 20000,
             "the close stops the pre-writer without waiting for its pace (%" PRIu64 " ms)", tu_now_mono_ms() - t0);
    TU_CHECK(step_file_size() == -1, "the close removes a half-written spare");
    clog_open_report_t rep;
    TU_REQUIRE(clog_open(&o, &c, &rep, err, sizeof err) == 0, "reopen: %s", err);
    check_record(c, first, 1000, 1);
    for (int i = 0; i < n; i += 7) {
        check_record(c, ids[i], 4000, 100 + (uint64_t)i);
    }
    check_record(c, ids[n - 1], 4000, 100 + (uint64_t)(n - 1));
    TU_CHECK(clog_prepare_step(c, 0, err, sizeof err) == 0, "a spare is asked for: %s", err);
    TU_CHECK(step_file_becomes((long long)STEP_SEG, STEP_WAIT_MS), "the spare is written whole (%lld bytes)",
             step_file_size());
    clog_close(c);
    TU_CHECK(step_file_size() == -1, "the close removes a whole spare that was never taken");
    TU_REQUIRE(clog_open(&o, &c, &rep, err, sizeof err) == 0, "reopen: %s", err);
    check_record(c, ids[n - 1], 4000, 100 + (uint64_t)(n - 1));
    clog_close(c);
}

/* A held pre-writer (CLOG_PREPARE_HOLD, 4 MiB segments) begins no spare;
 * one begun waits before its next chunk while held, clog_prepare_left
 * counting what is left, and goes on once released. */
static void test_prepare_hold(void)
{
    uint64_t first;
    clog_t *c = open_step_log(&first);
    TU_CHECK(clog_prepare_left(c) == STEP_SEG, "a whole spare left to write: %" PRIu64, clog_prepare_left(c));
    TU_CHECK(clog_prepare_step(c, CLOG_PREPARE_HOLD, err, sizeof err) == 0, "a held step: %s", err);
    TU_CHECK(!step_file_becomes(0, STEP_QUIET_MS) && step_file_size() == -1 && clog_prepare_left(c) == STEP_SEG,
             "held, no spare is begun (file %lld bytes, %" PRIu64 " left)", step_file_size(), clog_prepare_left(c));
    TU_CHECK(clog_prepare_step(c, 60000, err, sizeof err) == 0, "a step a minute apart: %s", err);
    uint64_t deadline = tu_now_mono_ms() + 30000;
    while (clog_prepare_left(c) != STEP_SEG - (1 << 20) && tu_now_mono_ms() < deadline) {
        usleep(1000);
    }
    TU_CHECK(clog_prepare_left(c) == STEP_SEG - (1 << 20) && step_file_size() == 1 << 20,
             "its first chunk written: %" PRIu64 " left, file %lld bytes", clog_prepare_left(c), step_file_size());
    TU_CHECK(clog_prepare_step(c, CLOG_PREPARE_HOLD, err, sizeof err) == 0, "held again: %s", err);
    TU_CHECK(clog_prepare_step(c, CLOG_PREPARE_HOLD, err, sizeof err) == 0, "still held: %s", err);
    TU_CHECK(!step_file_becomes(2 << 20, STEP_QUIET_MS) && step_file_size() == 1 << 20 &&
                 clog_prepare_left(c) == STEP_SEG - (1 << 20),
             "held, the spare waits at its chunk (file %lld bytes, %" PRIu64 " left)", step_file_size(),
             clog_prepare_left(c));
    TU_CHECK(step_until_done(c, 0) == 1, "released, it is finished and taken: %s", err);
    TU_CHECK(clog_prepare_left(c) == 0 && clog_is_spare(c, STEP_SEG), "a spare waits: %" PRIu64 " left",
             clog_prepare_left(c));
    clog_close(c);
}

/* A segment switch that finds no spare while the pre-writer is half-way
 * (chunks a minute apart, then held) takes the pre-writer's file, finished
 * at once, instead of writing a second whole segment beside it: the new
 * segment is that inode, no ".seg.new" is left, the records read back. */
static void test_switch_finishes_prewrite(void)
{
    clog_options_t o = { dir, STEP_SEG, 0, 0, 0, 0 };
    uint64_t first;
    clog_t *c = open_step_log(&first);
    TU_CHECK(clog_prepare_step(c, 60000, err, sizeof err) == 0, "a step a minute apart: %s", err);
    TU_REQUIRE(step_file_becomes(1 << 20, STEP_WAIT_MS), "its first chunk written (file %lld bytes)", step_file_size());
    TU_CHECK(clog_prepare_step(c, CLOG_PREPARE_HOLD, err, sizeof err) == 0, "held: %s", err);
    char step[600];
    snprintf(step, sizeof step, "%s/clog-ffffffffffffffff.seg.new", dir);
    struct stat half;
    TU_REQUIRE(stat(step, &half) == 0, "stat %s: %s", step, strerror(errno));
    static uint64_t ids[2000];
    uint64_t t0 = tu_now_mono_ms();
    int n = fill_into_second_segment(c, ids);
    TU_CHECK(tu_now_mono_ms() - t0 < 20000, "the switch did not wait out the pace or the hold (%" PRIu64 " ms)",
             tu_now_mono_ms() - t0);
    char path[600];
    seg_file(STEP_SEG, path, sizeof path);
    struct stat used;
    TU_CHECK(stat(path, &used) == 0 && used.st_ino == half.st_ino && (uint64_t)used.st_size == STEP_SEG,
             "the switch's segment is the pre-writer's file, whole");
    TU_CHECK(step_file_size() == -1, "no pre-writer file is left");
    TU_REQUIRE(clog_sync(c, err, sizeof err) == 0, "sync: %s", err);
    clog_close(c);
    TU_REQUIRE(clog_open(&o, &c, NULL, err, sizeof err) == 0, "reopen: %s", err);
    check_record(c, first, 1000, 1);
    check_record(c, ids[n - 1], 4000, 100 + (uint64_t)(n - 1));
    clog_close(c);
}

/* 80 batches of one 1000-byte record (seeds 10 to 89) from a log in its
 * first SEG segment: the log switches segments. The last record's id. */
static uint64_t append_past_first_segment(clog_t *c)
{
    uint64_t id = 0;
    for (int i = 0; i < 80; i++) {
        append_batch(c, 1, 1000, 10 + (uint64_t)i, &id);
    }
    TU_REQUIRE(id / SEG >= 1, "the log switched segments");
    return id;
}

/* Sync and close c, open the log again: the records first (seed 1) and last
 * (seed 89, append_past_first_segment's) read back. */
static void sync_reopen_check(clog_t *c, uint64_t first, uint64_t last)
{
    TU_REQUIRE(clog_sync(c, err, sizeof err) == 0, "sync: %s", err);
    clog_close(c);
    c = open_log(0, NULL);
    check_record(c, first, 1000, 1);
    check_record(c, last, 1000, 89);
    clog_close(c);
}

/* A pre-write the file system refuses (a 16 KiB file-size limit) fails with
 * the write's error and changes nothing: its file is removed,
 * clog_write_errno still speaks of the appends (0), and nothing is asked for
 * again while the log's end stays in its segment; the log appends as before,
 * and the switch pre-writes its own segment. */
static void test_prepare_step_refused(void)
{
    clog_t *c = open_log(0, NULL);
    uint64_t id;
    append_batch(c, 1, 1000, 1, &id);
    struct rlimit saved;
    file_size_limit(16 << 10, &saved);
    int rc = step_until_done(c, 0);
    file_size_limit(0, &saved);
    TU_CHECK(rc == -1 && strstr(err, "cannot pre-write") != NULL && strstr(err, strerror(EFBIG)) != NULL,
             "the refused pre-write: rc %d, \"%s\"", rc, err);
    TU_CHECK(step_file_size() == -1 && clog_write_errno(c) == 0, "its file removed (%lld), errno of the appends %d",
             step_file_size(), clog_write_errno(c));
    TU_CHECK(clog_prepare_step(c, 0, err, sizeof err) == 0, "a step within the segment: %s", err);
    TU_CHECK(!step_file_becomes(0, STEP_QUIET_MS) && step_file_size() == -1, "not tried again within the segment");
    TU_CHECK(clog_prepare_left(c) == 0, "refused in this segment: %" PRIu64 " left", clog_prepare_left(c));
    uint64_t last = append_past_first_segment(c);
    TU_CHECK(clog_prepare_left(c) == SEG, "in the next segment a whole spare left: %" PRIu64, clog_prepare_left(c));
    TU_CHECK(step_until_done(c, 0) == 1, "in the next segment the pre-writer is asked again: %s", err);
    sync_reopen_check(c, id, last);
}

/* What test_switch_meets_failure polls for: the pre-writer is done with
 * its file (failed: the file removed) and nobody has taken its answer. */
static int prewriter_done(void *ctx)
{
    return clog_prepare_left((clog_t *)ctx) == 0 && step_file_size() == -1;
}

/* A pre-write that failed and is met by a segment switch before any step
 * took its answer (a 16 KiB file-size limit, lifted before the switch): the
 * switch writes its segment itself, as before, and the next step reports the
 * failure (it was dropped before); the step after it asks for a spare again. */
static void test_switch_meets_failure(void)
{
    clog_t *c = open_log(0, NULL);
    uint64_t id;
    append_batch(c, 1, 1000, 1, &id);
    struct rlimit saved;
    file_size_limit(16 << 10, &saved);
    TU_CHECK(clog_prepare_step(c, 0, err, sizeof err) == 0, "the step asks the pre-writer: %s", err);
    int failed = tu_poll_until(prewriter_done, c, 30000, 1) == 0;
    file_size_limit(0, &saved);
    TU_REQUIRE(failed, "the pre-writer failed under the limit (left %" PRIu64 ", file %lld)", clog_prepare_left(c),
               step_file_size());
    uint64_t last = append_past_first_segment(c);
    int rc = clog_prepare_step(c, 0, err, sizeof err);
    TU_CHECK(rc == -1 && strstr(err, "at a segment switch") != NULL && strstr(err, strerror(EFBIG)) != NULL,
             "the next step reports the failure the switch met: rc %d, \"%s\"", rc, err);
    TU_CHECK(clog_write_errno(c) == 0, "errno of the appends %d", clog_write_errno(c));
    TU_CHECK(step_until_done(c, 0) == 1, "the step after it asks for a spare again: %s", err);
    sync_reopen_check(c, id, last);
}

/* Pages of the file at path in the page cache (mincore of a read-only
 * mapping, which itself faults nothing in); their count, *pages the file's. */
static size_t resident_pages(const char *path, size_t *pages)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    TU_REQUIRE(fd >= 0, "open %s", path);
    struct stat st;
    TU_REQUIRE(fstat(fd, &st) == 0 && st.st_size > 0, "fstat %s", path);
    size_t page = (size_t)sysconf(_SC_PAGESIZE), n = ((size_t)st.st_size + page - 1) / page, in = 0;
    void *map = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_SHARED, fd, 0);
    TU_REQUIRE(map != MAP_FAILED, "mmap %s", path);
    unsigned char *vec = malloc(n);
    TU_REQUIRE(mincore(map, (size_t)st.st_size, vec) == 0, "mincore %s: %s", path, strerror(errno));
    for (size_t i = 0; i < n; i++) {
        in += vec[i] & 1;
    }
    free(vec);
    munmap(map, (size_t)st.st_size);
    close(fd);
    *pages = n;
    return in;
}

/* One try at the file at path out of the page cache: synced first, so that
 * every page is clean and can be dropped (no drop_caches); 1 when none is
 * left cached. */
static int evicted(void *ctx)
{
    const char *path = ctx;
    int fd = open(path, O_RDWR | O_CLOEXEC);
    TU_REQUIRE(fd >= 0, "open %s", path);
    TU_REQUIRE(fdatasync(fd) == 0, "fdatasync %s", path);
    TU_REQUIRE(posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED) == 0, "fadvise %s", path);
    close(fd);
    size_t pages;
    return resident_pages(path, &pages) == 0;
}

/* The file at path out of the page cache, tried for up to 5 s: the pages
 * still cached, of *pages. Usually 0 at the first try; under valgrind (even
 * --tool=none) 4 pages of a file stay cached after the same calls, so the
 * cases require most pages gone, not all. */
static size_t evict(const char *path, size_t *pages)
{
    (void)tu_poll_until(evicted, (void *)path, 5000, 10);
    return resident_pages(path, pages);
}

typedef struct warm_poll {
    clog_t *c;
    const char *path;
    size_t in, pages;
} warm_poll_t;

/* A step (not held, back to back), then: is the whole file at path cached? */
static int warm_step_resident(void *ctx)
{
    warm_poll_t *wp = ctx;
    TU_CHECK(clog_prepare_step(wp->c, 0, err, sizeof err) == 0, "a step with a spare waiting: %s", err);
    wp->in = resident_pages(wp->path, &wp->pages);
    return wp->in == wp->pages;
}

/* Steps until the file at path is wholly in the page cache, for at most
 * STEP_WAIT_MS (the read-back is on the pre-writer thread): 1 when it is. */
static int steps_until_resident(clog_t *c, const char *path, size_t *in, size_t *pages)
{
    warm_poll_t wp = { c, path, 0, 0 };
    int ok = tu_poll_until(warm_step_resident, &wp, STEP_WAIT_MS, 5) == 0;
    *in = wp.in;
    *pages = wp.pages;
    return ok;
}

typedef struct read_back_poll {
    clog_t *c;
    uint64_t spares, bytes, failures;
} read_back_poll_t;

/* A step (not held, back to back), then: has a read-back been counted? */
static int read_back_counted(void *ctx)
{
    read_back_poll_t *rp = ctx;
    TU_CHECK(clog_prepare_step(rp->c, 0, err, sizeof err) == 0, "a step with a spare waiting: %s", err);
    clog_read_back_counts(rp->c, &rp->spares, &rp->bytes, &rp->failures);
    return rp->spares + rp->failures > 0;
}

/* Steps until clog_read_back_counts counts a read-back, for at most
 * STEP_WAIT_MS: the counts then. */
static read_back_poll_t steps_until_read_back(clog_t *c)
{
    read_back_poll_t rp = { c, 0, 0, 0 };
    TU_CHECK(tu_poll_until(read_back_counted, &rp, STEP_WAIT_MS, 5) == 0, "a read-back is counted within %d ms",
             STEP_WAIT_MS);
    return rp;
}

/* A step log (open_step_log) filled into its second segment, synced, and
 * its first segment recycled: the spare at 2 * STEP_SEG, whose file is
 * path. *last is the id of the last of the *n records appended (the record
 * of payload 100 + *n - 1). */
static clog_t *log_with_recycled_spare(char *path, size_t pathlen, uint64_t *last, int *n)
{
    uint64_t first;
    clog_t *c = open_step_log(&first);
    static uint64_t ids[2000];
    *n = fill_into_second_segment(c, ids);
    *last = ids[*n - 1];
    TU_REQUIRE(clog_sync(c, err, sizeof err) == 0, "sync: %s", err);
    clog_keep_from(c, *last);
    TU_REQUIRE(clog_recycle(c, 0, err, sizeof err) == 0, "recycle: %s", err);
    seg_file(2 * STEP_SEG, path, pathlen);
    return c;
}

/* log_with_recycled_spare, the spare then evicted (most of its pages: *in
 * of *pages still cached) and a held step taken (nothing read back). */
static clog_t *log_with_evicted_spare(char *path, size_t pathlen, uint64_t *last, int *n, size_t *in, size_t *pages)
{
    clog_t *c = log_with_recycled_spare(path, pathlen, last, n);
    TU_REQUIRE(clog_is_spare(c, 2 * STEP_SEG), "the recycled segment is the spare at %" PRIu64, 2 * STEP_SEG);
    *in = evict(path, pages);
    TU_REQUIRE(*in * 4 < *pages, "evicted, most of the recycled spare is not cached (%zu of %zu)", *in, *pages);
    TU_CHECK(clog_prepare_step(c, CLOG_PREPARE_HOLD, err, sizeof err) == 0, "a held step: %s", err);
    return c;
}

/* A recycled spare keeps its old data, no zeros, and in a delay queue its
 * pages were written long ago: the next switch would read each batch's
 * partial last page from disk. Recycled (4 MiB segments) and evicted
 * (fdatasync + POSIX_FADV_DONTNEED), it has no page cached, and held steps
 * read nothing; steps read it back whole (mincore) on the pre-writer thread;
 * the switch takes it and the records on both sides read back. A spare the
 * open finds (written by an earlier run) is read back too. */
static void test_recycled_spare_read_back(void)
{
    char path[600];
    uint64_t last;
    int n;
    size_t pages, evicted_in, in;
    clog_t *c = log_with_evicted_spare(path, sizeof path, &last, &n, &evicted_in, &pages);
    usleep(STEP_QUIET_MS * 1000); /* a wait that nothing happens: it can only pass wrongly */
    in = resident_pages(path, &pages);
    TU_CHECK(in <= evicted_in, "a held step reads nothing back (%zu of %zu pages cached)", in, pages);
    TU_CHECK(steps_until_resident(c, path, &in, &pages), "the steps read the recycled spare back (%zu of %zu pages)",
             in, pages);
    read_back_poll_t rp = steps_until_read_back(c);
    /* at least one chunk read (most pages were evicted); the kernel's read-ahead of one chunk may bring the next in
       before the thread gets to it (under valgrind it does), and a chunk found cached is skipped */
    TU_CHECK(rp.spares == 1 && rp.failures == 0 && rp.bytes >= 1 << 20,
             "counted: 1 spare read back (%" PRIu64 "), %" PRIu64
             " bytes read (at least a chunk) for %zu pages evicted, %" PRIu64 " failures",
             rp.spares, rp.bytes, pages - evicted_in, rp.failures);
    TU_CHECK(step_file_size() == -1, "with a spare waiting no spare is pre-written");
    /* the switch takes it: the records on both sides read back */
    static char p[4000];
    clog_batch_t b = { 0 };
    uint64_t id = 0;
    int k = 0;
    while (id < 2 * STEP_SEG) {
        payload(p, sizeof p, 5000 + (uint64_t)k);
        TU_REQUIRE(clog_batch_add(c, &b, p, sizeof p, &id, err, sizeof err) == 0, "add: %s", err);
        TU_REQUIRE(clog_append(c, &b, err, sizeof err) == 0, "append: %s", err);
        k++;
    }
    clog_batch_free(&b);
    TU_CHECK(id == 2 * STEP_SEG + 32 && !clog_is_spare(c, 2 * STEP_SEG), "the switch took the read-back spare");
    check_record(c, id, 4000, 5000 + (uint64_t)(k - 1));
    check_record(c, last, 4000, 100 + (uint64_t)(n - 1));
    /* a spare the open finds: the pre-writer's whole file becomes one, then it is evicted over a reopen */
    TU_REQUIRE(step_until_done(c, 0) == 1, "a spare pre-written: %s", err);
    TU_REQUIRE(clog_sync(c, err, sizeof err) == 0, "sync: %s", err);
    clog_close(c);
    seg_file(3 * STEP_SEG, path, sizeof path);
    clog_options_t o = { dir, STEP_SEG, 0, 0, 0, 0 };
    TU_REQUIRE(clog_open(&o, &c, NULL, err, sizeof err) == 0, "reopen: %s", err);
    TU_REQUIRE(clog_is_spare(c, 3 * STEP_SEG), "the open finds the spare");
    in = evict(path, &pages); /* after the open, whose reads of the file would cache pages again */
    TU_REQUIRE(in * 4 < pages, "evicted, most of the found spare is not cached (%zu of %zu)", in, pages);
    TU_CHECK(steps_until_resident(c, path, &in, &pages), "the steps read the found spare back (%zu of %zu pages)", in,
             pages);
    check_record(c, id, 4000, 5000 + (uint64_t)(k - 1));
    clog_close(c);
}

/* A spare recycled while its pages are still cached (a short delay, a
 * segment recycled minutes after it was written) is read back without reading
 * a byte: each 1 MiB chunk's pages are found cached (mincore) and skipped,
 * and the read-back is still counted whole. */
static void test_cached_spare_not_read_again(void)
{
    char path[600];
    uint64_t last;
    int n;
    clog_t *c = log_with_recycled_spare(path, sizeof path, &last, &n);
    size_t pages, in = resident_pages(path, &pages);
    TU_REQUIRE(in == pages, "the segment just written and recycled is cached whole (%zu of %zu pages)", in, pages);
    read_back_poll_t rp = steps_until_read_back(c);
    TU_CHECK(rp.spares == 1 && rp.bytes == 0 && rp.failures == 0,
             "a cached spare is counted read back (%" PRIu64 ") with nothing read (%" PRIu64 " bytes, %" PRIu64
             " failures)",
             rp.spares, rp.bytes, rp.failures);
    check_record(c, last, 4000, 100 + (uint64_t)(n - 1));
    clog_close(c);
}

/* Appends of 4000-byte records (payloads from seed on) until the log's end
 * reaches at. */
static void append_until(clog_t *c, uint64_t at, uint64_t seed)
{
    static char p[4000];
    clog_batch_t b = { 0 };
    uint64_t id = 0;
    while (clog_end(c) < at) {
        payload(p, sizeof p, seed++);
        TU_REQUIRE(clog_batch_add(c, &b, p, sizeof p, &id, err, sizeof err) == 0, "add: %s", err);
        TU_REQUIRE(clog_append(c, &b, err, sizeof err) == 0, "append: %s", err);
    }
    clog_batch_free(&b);
}

/* On a quiet log a spare read back right after a switch waits long for the
 * next one and may leave the page cache again: it is read back once more
 * when the log's end enters its segment's second half, and only once there.
 * The recycled spare read back, then evicted: steps in the first half read
 * nothing; past the half they read it back (a second read-back counted);
 * evicted again in the same half, steps leave it. */
static void test_waiting_spare_read_back_again(void)
{
    char path[600];
    uint64_t last;
    int n;
    clog_t *c = log_with_recycled_spare(path, sizeof path, &last, &n);
    size_t pages, in;
    TU_REQUIRE(clog_end(c) < STEP_SEG + STEP_SEG / 2, "the log's end in its segment's first half (%" PRIu64 ")",
               clog_end(c));
    TU_CHECK(steps_until_resident(c, path, &in, &pages), "the recycled spare read back (%zu of %zu pages)", in, pages);
    read_back_poll_t rp = steps_until_read_back(c);
    TU_CHECK(rp.spares == 1, "one read-back counted (%" PRIu64 ")", rp.spares);
    size_t evicted_in = evict(path, &pages);
    TU_REQUIRE(evicted_in * 4 < pages, "evicted again (%zu of %zu pages cached)", evicted_in, pages);
    for (int i = 0; i < 10; i++) {
        TU_CHECK(clog_prepare_step(c, 0, err, sizeof err) == 0, "a step: %s", err);
        usleep(STEP_QUIET_MS * 100); /* a wait that nothing happens: it can only pass wrongly */
    }
    in = resident_pages(path, &pages);
    TU_CHECK(in <= evicted_in, "steps in the first half read nothing back (%zu of %zu pages cached)", in, pages);
    append_until(c, STEP_SEG + STEP_SEG / 2, 9000);
    TU_REQUIRE(clog_end(c) < 2 * STEP_SEG && clog_is_spare(c, 2 * STEP_SEG), "in the second half, no switch yet");
    TU_CHECK(steps_until_resident(c, path, &in, &pages), "past the half the spare is read back again (%zu of %zu)", in,
             pages);
    uint64_t spares, bytes, failures;
    for (uint64_t t0 = tu_now_mono_ms(); clog_read_back_counts(c, &spares, &bytes, &failures), spares < 2;) {
        TU_REQUIRE(tu_now_mono_ms() - t0 < STEP_WAIT_MS, "the second read-back counted (%" PRIu64 ")", spares);
        TU_REQUIRE(clog_prepare_step(c, 0, err, sizeof err) == 0, "a step: %s", err);
        usleep(5000);
    }
    evicted_in = evict(path, &pages);
    TU_REQUIRE(evicted_in * 4 < pages, "evicted a third time (%zu of %zu pages cached)", evicted_in, pages);
    for (int i = 0; i < 10; i++) {
        TU_CHECK(clog_prepare_step(c, 0, err, sizeof err) == 0, "a step: %s", err);
        usleep(STEP_QUIET_MS * 100);
    }
    in = resident_pages(path, &pages);
    TU_CHECK(in <= evicted_in, "once a segment: no third read-back in the same half (%zu of %zu pages cached)", in,
             pages);
    clog_read_back_counts(c, &spares, &bytes, &failures);
    TU_CHECK(spares == 2 && failures == 0, "two read-backs (%" PRIu64 "), no failure (%" PRIu64 ")", spares, failures);
    check_record(c, last, 4000, 100 + (uint64_t)(n - 1));
    clog_close(c);
}

/* A step a minute apart, then: has the pre-writer's file its first chunk? */
static int slow_step_began_file(void *ctx)
{
    TU_CHECK(clog_prepare_step(ctx, 60000, err, sizeof err) == 0, "a step: %s", err);
    return step_file_size() == 1 << 20;
}

/* A read-back with chunks a minute apart: the close ends it without waiting
 * out its pace; after the reopen (the spare found, read back again) the
 * switch takes the spare, and the step that then wants a spare written cuts
 * the read-back at its next chunk, so the spare's zeros begin at once (they
 * would wait minutes behind it). */
static void test_read_back_gives_way(void)
{
    char path[600];
    uint64_t last;
    int n;
    clog_t *c = log_with_recycled_spare(path, sizeof path, &last, &n);
    size_t pages;
    (void)evict(path, &pages);
    TU_CHECK(clog_prepare_step(c, 60000, err, sizeof err) == 0, "a step a minute apart: %s", err);
    uint64_t t0 = tu_now_mono_ms();
    clog_close(c);
    TU_CHECK(tu_now_mono_ms() - t0 < 20000, "the close ends a read-back without waiting for its pace (%" PRIu64 " ms)",
             tu_now_mono_ms() - t0);
    clog_options_t o = { dir, STEP_SEG, 0, 0, 0, 0 };
    TU_REQUIRE(clog_open(&o, &c, NULL, err, sizeof err) == 0, "reopen: %s", err);
    (void)evict(path, &pages);
    TU_CHECK(clog_prepare_step(c, 60000, err, sizeof err) == 0, "the found spare's read-back, a minute apart: %s", err);
    static char p[4000];
    clog_batch_t b = { 0 };
    uint64_t id = 0;
    for (int k = 0; id < 2 * STEP_SEG; k++) {
        payload(p, sizeof p, 7000 + (uint64_t)k);
        TU_REQUIRE(clog_batch_add(c, &b, p, sizeof p, &id, err, sizeof err) == 0, "add: %s", err);
        TU_REQUIRE(clog_append(c, &b, err, sizeof err) == 0, "append: %s", err);
    }
    clog_batch_free(&b);
    TU_REQUIRE(!clog_is_spare(c, 2 * STEP_SEG), "the switch took the spare being read back");
    TU_CHECK(tu_poll_until(slow_step_began_file, c, STEP_WAIT_MS, 5) == 0,
             "with no spare left the read-back gives way: the next spare's first chunk is written (%lld bytes)",
             step_file_size());
    t0 = tu_now_mono_ms();
    clog_close(c);
    TU_CHECK(tu_now_mono_ms() - t0 < 20000, "the close stops the pre-write (%" PRIu64 " ms)", tu_now_mono_ms() - t0);
    TU_CHECK(step_file_size() == -1, "the close removes the half-written spare");
}

/* Does the test directory take O_DIRECT (open, and a 4096-byte write of an
 * aligned buffer)? The pre-writer writes its zeros that way where it does. */
static int dir_takes_direct_io(void)
{
    char probe[600];
    snprintf(probe, sizeof probe, "%s/direct-probe", dir);
    static char block[4096] __attribute__((aligned(4096)));
    int fd = open(probe, O_WRONLY | O_CREAT | O_DIRECT | O_CLOEXEC, 0600);
    int ok = fd >= 0 && pwrite(fd, block, sizeof block, 0) == (ssize_t)sizeof block;
    if (fd >= 0) {
        close(fd);
    }
    unlink(probe);
    return ok;
}

/* The pre-writer's zeros bypass the page cache where the filesystem takes
 * O_DIRECT (no page of the new spare cached but its header's), and the spare
 * is then read back before a switch takes it, as a recycled one; where it
 * does not, they go through the page cache (the spare cached whole, and its
 * read-back reads nothing). Either way the file is its header and zeros, and
 * the switch takes it. */
static void test_prewrite_direct_zeros(void)
{
    int direct = dir_takes_direct_io();
    uint64_t first;
    clog_t *c = open_step_log(&first);
    char path[600];
    seg_file(STEP_SEG, path, sizeof path);
    TU_REQUIRE(step_until_done(c, 0) == 1, "a step takes the finished spare: %s", err);
    size_t pages, in = resident_pages(path, &pages);
    if (direct) {
        TU_CHECK(in * 8 < pages, "O_DIRECT taken: the zeros left the page cache alone (%zu of %zu pages cached)", in,
                 pages);
    } else {
        TU_CHECK(in == pages, "no O_DIRECT: the zeros went through the page cache (%zu of %zu pages cached)", in,
                 pages);
    }
    TU_CHECK(steps_until_resident(c, path, &in, &pages), "the steps read the spare back (%zu of %zu pages)", in, pages);
    read_back_poll_t rp = steps_until_read_back(c);
    TU_CHECK(rp.spares == 1 && rp.failures == 0 && (direct ? rp.bytes >= 1 << 20 : rp.bytes == 0),
             "counted: 1 spare read back (%" PRIu64 "), %" PRIu64 " bytes (%s), %" PRIu64 " failures", rp.spares,
             rp.bytes, direct ? "at least a chunk" : "none: all cached", rp.failures);
    static char whole[STEP_SEG];
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    TU_REQUIRE(fd >= 0 && pread(fd, whole, sizeof whole, 0) == (ssize_t)sizeof whole, "read %s", path);
    close(fd);
    size_t nonzero = 0;
    for (size_t i = CLOG_SEGMENT_HEADER; i < sizeof whole; i++) {
        nonzero += whole[i] != 0;
    }
    TU_CHECK(memcmp(whole, "HGCLOGS1", 8) == 0 && nonzero == 0,
             "read back, the spare is a header and zeros (%zu nonzero bytes)", nonzero);
    static uint64_t ids[2000];
    int n = fill_into_second_segment(c, ids);
    TU_CHECK(!clog_is_spare(c, STEP_SEG), "the switch took the spare");
    TU_REQUIRE(clog_sync(c, err, sizeof err) == 0, "sync: %s", err);
    clog_close(c);
    clog_options_t o = { dir, STEP_SEG, 0, 0, 0, 0 };
    TU_REQUIRE(clog_open(&o, &c, NULL, err, sizeof err) == 0, "reopen: %s", err);
    check_record(c, first, 1000, 1);
    check_record(c, ids[n - 1], 4000, 100 + (uint64_t)(n - 1));
    clog_close(c);
}

/* read_bytes of /proc/self/io: what this process (all its threads) read from
 * the disk. */
static uint64_t process_read_bytes(void)
{
    FILE *f = fopen("/proc/self/io", "r");
    TU_REQUIRE(f != NULL, "open /proc/self/io: %s", strerror(errno));
    char line[128];
    unsigned long long v = 0;
    int found = 0;
    while (!found && fgets(line, sizeof line, f) != NULL) {
        found = sscanf(line, "read_bytes: %llu", &v) == 1;
    }
    fclose(f);
    TU_REQUIRE(found, "read_bytes in /proc/self/io");
    return v;
}

/* Appends into a spare none of whose pages is cached (recycled and evicted,
 * the read-back held) read nothing from disk: each batch is written out to
 * its last page's end with zeros, so no write covers an uncached page in
 * part (without the padding each batch read its last page: ~4 KiB a batch).
 * The zeros lie past the log's end, and the records read back after a
 * reopen. */
static void test_appends_read_no_page(void)
{
    char path[600];
    uint64_t last;
    int n;
    size_t pages, in;
    clog_t *c = log_with_evicted_spare(path, sizeof path, &last, &n, &in, &pages);
    static char p[4000];
    clog_batch_t b = { 0 };
    uint64_t id = 0, before = process_read_bytes();
    int batches = 0, k = 0;
    while (id < 2 * STEP_SEG + (1 << 20)) { /* batches of 3 records: 12 KiB and a bit, so a partial last page */
        for (int r = 0; r < 3; r++, k++) {
            payload(p, sizeof p, 9000 + (uint64_t)k);
            int rc = clog_batch_add(c, &b, p, sizeof p, &id, err, sizeof err);
            if (rc == CLOG_BATCH_FULL) { /* at the segment's end: this batch out, the record into the next */
                TU_REQUIRE(clog_append(c, &b, err, sizeof err) == 0, "append: %s", err);
                rc = clog_batch_add(c, &b, p, sizeof p, &id, err, sizeof err);
            }
            TU_REQUIRE(rc == 0, "add: %s", err);
        }
        TU_REQUIRE(clog_append(c, &b, err, sizeof err) == 0, "append: %s", err);
        batches += id >= 2 * STEP_SEG;
    }
    clog_batch_free(&b);
    uint64_t read = process_read_bytes() - before;
    /* the switch's header write may read the segment's first page: one page, not one a batch */
    TU_CHECK(read <= 8192, "%d batches into the evicted spare read %" PRIu64 " bytes from disk", batches, read);
    uint64_t end = clog_end(c) - 2 * STEP_SEG, page = (uint64_t)sysconf(_SC_PAGESIZE);
    size_t pad = (size_t)((end + page - 1) / page * page - end);
    static char tail[1 << 16];
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    TU_REQUIRE(fd >= 0 && pad <= sizeof tail && pread(fd, tail, pad, (off_t)end) == (ssize_t)pad, "read past the end");
    close(fd);
    size_t nonzero = 0;
    for (size_t i = 0; i < pad; i++) {
        nonzero += tail[i] != 0;
    }
    TU_CHECK(pad > 0 && nonzero == 0, "past the end, to the page's end: %zu zero bytes (%zu not zero)", pad, nonzero);
    TU_REQUIRE(clog_sync(c, err, sizeof err) == 0, "sync: %s", err);
    clog_close(c);
    clog_options_t o = { dir, STEP_SEG, 0, 0, 0, 0 };
    TU_REQUIRE(clog_open(&o, &c, NULL, err, sizeof err) == 0, "reopen: %s", err);
    TU_CHECK(clog_end(c) == end + 2 * STEP_SEG, "the reopen ends where the appends did (%" PRIu64 ")", clog_end(c));
    check_record(c, id, 4000, 9000 + (uint64_t)(k - 1));
    check_record(c, last, 4000, 100 + (uint64_t)(n - 1));
    clog_close(c);
}

static const tu_test_t clog_tests[] = {
    { "append, read, reopen", test_append_read_reopen },
    { "offsets raised to the floor", test_floor_raises_offsets },
    { "segment switch", test_segment_switch },
    { "torn batch past D is cut", test_torn_past_d_cut },
    { "torn batch below D is refused", test_torn_below_d_refused },
    { "recycled segment's stale records", test_recycled_segment },
    { "forged record in a payload", test_forged_record_in_payload },
    { "a header with an unknown type or a nonzero zero byte is no record", test_header_type_and_zero_bytes },
    { "torn last batch is cut", test_torn_last_batch_cut },
    { "leading spare with a damaged start", test_leading_spare_with_damaged_start },
    { "syncer thread", test_syncer_thread },
    { "abandon after a failed sync", test_abandon },
    { "the segments below an offset: the log's own, no spares, as the directory lists them", test_segments_below },
    { "a failed sync sticks until the abandon: no fdatasync retried, the durable end kept", test_failed_sync_sticks },
    { "bad inputs", test_bad_inputs },
    { "a refused write keeps its errno", test_write_errno },
    { "a spare pre-written by the pre-writer thread is the one the switch takes", test_prepare_steps },
    { "a held pre-writer begins nothing and writes on only once released", test_prepare_hold },
    { "a switch with no spare finishes the pre-writer's half-written file", test_switch_finishes_prewrite },
    { "a refused pre-write changes nothing", test_prepare_step_refused },
    { "a pre-write failure a switch meets is reported", test_switch_meets_failure },
    { "a recycled spare is read back into the page cache before the switch takes it", test_recycled_spare_read_back },
    { "a read-back gives way to a close and to a spare to write", test_read_back_gives_way },
    { "a recycled spare still cached is not read again", test_cached_spare_not_read_again },
    { "a waiting spare is read back again in the segment's second half", test_waiting_spare_read_back_again },
    { "the pre-writer's zeros bypass the page cache where O_DIRECT is taken, then are read back",
      test_prewrite_direct_zeros },
    { "appends into an uncached spare read no page from disk", test_appends_read_no_page },
    { NULL, NULL },
};

static const tu_suite_t suites[] = {
    { "clog", clog_tests },
};

int main(int argc, char **argv)
{
    return tu_suites_main(argc, argv, suites, sizeof suites / sizeof suites[0], setup, teardown);
}
