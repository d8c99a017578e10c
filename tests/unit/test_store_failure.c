/*
 * tests/unit/test_store_failure.c — CUnit suites "failure", "logsync" of the
 * store package behind levels/store.h (DESIGN §1–3), through its public calls:
 * a commit that fails (the store refuses all after; a full disk's failure
 * known as such, however long the directory's path), torn writes at the log's
 * end cut on open and damage inside it refused; a failed fdatasync of the
 * commit log (a local fdatasync interposer fails a segment's once, as Linux
 * reports a writeback error); spares left below the next checkpoint by a
 * reopen at a later clock, after a failed sync's carry or a clean close (the
 * checkpoint's recycling skips them); the log-sync thread (levels/logsync.h).
 *
 * The fixture (tests/helpers/store_fixture.h): every test gets a fresh temp
 * directory and drives the store with an injected clock, every now_ms passed
 * explicitly from T0; after every step that mutates, store_check() must
 * return 0. Run alone: ./tests/unit/test_store_failure [suite [test]].
 */
#define _GNU_SOURCE /* RTLD_NEXT */
#include "levels/logsync.h"
#include "levels/store.h"
#include "tests/helpers/store_fixture.h"
#include "tests/helpers/testutil.h"

#include <CUnit/CUnit.h>
#include <dlfcn.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <dirent.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* =========================================================== suite: failure */

/* A commit that fails (the disk is "full": RLIMIT_FSIZE) breaks the store:
 * every later operation fails naming the cause, close reports it, and a
 * reopen finds exactly what was committed before. */
static void test_commit_failure_breaks_store(void)
{
    store_t *s = OPEN_DEFAULT();
    uint64_t a = SEND(s, "t", "committed", 0, 0, T0, NULL);
    GROUP_CREATE(s, "g", "t", 1, T0);
    COMMIT(s);

    long long biggest = tu_store_bytes_used(g_data);
    TU_REQUIRE(biggest >= 0, "cannot list %s", g_data);
    disk_full_at((rlim_t)biggest + 4096);

    static char big[1 << 20];
    memset(big, 'b', sizeof big);
    char err[512] = "";
    uint64_t id, due;
    REQUIRE_OK(send_raw(s, "t", 1, "", 0, big, sizeof big, 0, 0, T0 + 1, &id, &due, err, sizeof err), err);
    TU_CHECK(!store_broken(s), "broken before any commit");
    int rc = store_commit(s, err, sizeof err);
    TU_CHECK(rc == -1 && store_broken(s), "commit past the file size limit: rc %d broken %d", rc, store_broken(s));
    TU_CHECK(strstr(err, g_data) != NULL, "commit error \"%s\" does not name the directory", err);
    char first_err[512];
    snprintf(first_err, sizeof first_err, "%s", err);

    disk_room_again(); /* the disk has room again: still broken */
    err[0] = '\0';
    CHECK_REFUSAL(send_raw(s, "t", 1, "", 0, "x", 1, 0, 0, T0 + 2, &id, &due, err, sizeof err), err, "reopen", NULL);
    msg_owned_t m[4];
    int n = -1;
    err[0] = '\0';
    CHECK_REFUSAL(store_lease(s, "g", 1, "t", 1, 4, LEASE, T0 + 2, m, &n, err, sizeof err), err, "reopen", NULL);
    TU_CHECK(n == 0, "a broken store leased %d", n);
    int moved = -1;
    err[0] = '\0';
    CHECK_REFUSAL(store_move_due(s, T0 + 2, 10, &moved, NULL, err, sizeof err), err, "reopen", NULL);
    err[0] = '\0';
    CHECK_REFUSAL(store_commit(s, err, sizeof err), err, "reopen", NULL);
    TU_CHECK(strstr(err, first_err) != NULL || strstr(first_err, "write") != NULL,
             "later errors should carry the original cause \"%s\": \"%s\"", first_err, err);
    TU_CHECK(store_next_lease_deadline(s) == 0, "a broken store's next lease deadline should be 0 (now)");

    CLOSE_BROKEN(&s, "reopen"); /* close reports the lost batch */

    s = OPEN_DEFAULT();
    CHECK_STORE(s);
    store_topic_info_t ti;
    TU_CHECK(store_topic_info(s, "t", 1, &ti) == 1 && ti.appended == 1, "after reopen the topic holds %" PRIu64,
             ti.appended);
    n = LEASE_N(s, "g", "t", 4, LEASE, T0 + 3, m);
    TU_CHECK(n == 1 && m[0].m.id == a && msg_str_is(&m[0].m.payload, "committed"), "after reopen leased %d", n);
    free_msgs(m, n);
    uint64_t b = SEND(s, "t", "after", 0, 0, T0 + 4, NULL);
    TU_CHECK(b > a, "id %" PRIu64 " after reopen is not above %" PRIu64, b, a);
    CHECK_STORE(s);
}

/* A message record the commit log refuses for want of room (the segment it
 * needs cannot be written out: the disk is "full") breaks the store as any
 * failed commit, but nothing was appended: the SEND is refused naming the
 * disk's error and the store's close still closes the log cleanly (the held
 * batches applied, a checkpoint at the log's end, the memtable written out),
 * so the reopen — which on a full disk has only the released disk reserve's
 * room — writes next to nothing: here it opens with no file allowed past
 * 64 KiB and finds the SENDs held at the failure. Without the clean close the
 * reopen redid every batch since the open's checkpoint into a new LevelDB log
 * and failed there. (Since messages are log records, the SEND's own record is
 * what meets the full disk: a segment holds a message's record, its level
 * entry's copy and the rest of its batch, store_check_payload_room.) */
static void test_refused_append_closes_clean(void)
{
    enum {
        SENDS =
            3, /* of PAYLOAD each: what a 256 KiB segment holds with their batches' room (design-commitlog.md 4b: no 'T' copy); the next SEND's record needs a new segment */
        PAYLOAD = 40 << 10,
        SEGMENT = 256 << 10,
        ROOM = 64 << 10
    };
    store_options_t o;
    opts_default(&o); /* sync off: each commit is appended and held until a barrier */
    o.segment_bytes = SEGMENT;
    store_t *s = open_at(&o, T0, __LINE__);
    static char payload[PAYLOAD];
    char err[512] = "";
    uint64_t ids[SENDS], id, due;
    for (int i = 0; i < SENDS; i++) {
        memset(payload, 'a' + i, sizeof payload);
        REQUIRE_OK(send_raw(s, "t", 1, "", 0, payload, sizeof payload, 0, 0, T0, &ids[i], &due, err, sizeof err), err);
        REQUIRE_OK(store_commit(s, err, sizeof err), err);
    }

    disk_full_at(ROOM); /* the next segment cannot be written out */
    memset(payload, 'z', sizeof payload);
    int rc = send_raw(s, "t", 1, "", 0, payload, sizeof payload, 0, 0, T0 + 1, &id, &due, err, sizeof err);
    TU_REQUIRE(
        rc == -1 && store_broken(s) && strstr(err, "cannot pre-write") != NULL && strstr(err, strerror(EFBIG)) != NULL,
        "a SEND whose record's segment cannot be written out: rc %d, broken %d, \"%s\"", rc, store_broken(s), err);
    TU_CHECK(store_log_write_errno(s) == EFBIG,
             "the break's errno: %d (%s), want EFBIG for the writer's full-disk test", store_log_write_errno(s),
             strerror(store_log_write_errno(s)));
    rc = store_commit(s, err, sizeof err);
    TU_CHECK(rc == -1 && strstr(err, "cannot pre-write") != NULL && strstr(err, strerror(EFBIG)) != NULL,
             "the commit after it: rc %d, \"%s\" (want the break, naming the disk's error)", rc, err);
    TU_CHECK(store_log_write_errno(s) == EFBIG, "the errno after the commit: %d", store_log_write_errno(s));
    disk_room_again(); /* the broker releases its disk reserve before the close */
    CLOSE_BROKEN(&s, "reopen");

    disk_full_at(ROOM); /* the reopen on the full disk */
    rc = store_open(&o, T0 + 2, &s, err, sizeof err);
    disk_room_again();
    TU_REQUIRE(rc == 0 && s != NULL, "the reopen with no file growing past %d bytes: %s", ROOM, err);
    for (int i = 0; i < MAX_OPEN; i++) {
        if (g_open[i] == NULL) {
            g_open[i] = s;
            break;
        }
    }
    store_topic_info_t ti;
    TU_CHECK(store_topic_info(s, "t", 1, &ti) == 1 && ti.appended == SENDS,
             "after the reopen the topic holds %" PRIu64 " SENDs, want the %d committed", ti.appended, SENDS);
    GROUP_CREATE(s, "g", "t", 1, T0 + 3);
    msg_owned_t m[SENDS + 1];
    int n = LEASE_N(s, "g", "t", SENDS + 1, LEASE, T0 + 3, m);
    TU_CHECK(n == SENDS, "leased %d after the reopen, want %d", n, SENDS);
    for (int i = 0; i < n && i < SENDS; i++)
        TU_CHECK(m[i].m.id == ids[i] && m[i].m.payload.len == PAYLOAD && m[i].m.payload.ptr[0] == 'a' + i,
                 "message %d after the reopen: id %" PRIu64 " (want %" PRIu64 "), %u bytes", i, m[i].m.id, ids[i],
                 m[i].m.payload.len);
    free_msgs(m, n);
    CHECK_STORE(s);
}

/* Ten SENDs on level 1, each committed alone: ten records in the log. */
static int scan_nothing(void *ctx, const store_entry_t *e)
{
    (void)ctx;
    (void)e;
    return 0;
}

/* fdatasync as Linux reports a writeback error: while g_fail_seg_syncs > 0 a sync of a commit-log segment fails with
 * EIO (and counts down); every other call syncs, also a later one through the descriptor that saw the error. */
static int g_fail_seg_syncs;

int fdatasync(int fd)
{
    int (*real)(int) = (int (*)(int))dlsym(RTLD_NEXT, "fdatasync");
    char link[64], path[4096];
    snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
    ssize_t n = readlink(link, path, sizeof path - 1);
    path[n > 0 ? n : 0] = '\0';
    if (g_fail_seg_syncs > 0 && n > 4 && strcmp(path + n - 4, ".seg") == 0) {
        g_fail_seg_syncs--;
        errno = EIO;
        return -1;
    }
    return real(fd);
}

static int count_segments(void)
{
    DIR *d = opendir(g_data);
    int n = 0;
    struct dirent *e;
    while (d != NULL && (e = readdir(d)) != NULL)
        n += strncmp(e->d_name, "clog-", 5) == 0 && strstr(e->d_name, ".seg") != NULL;
    if (d != NULL)
        closedir(d);
    return n;
}

/* The syncer's sync of the log fails (store_log_sync), and before the broker's storage thread hears of it, its own
 * read barrier syncs the log: that sync fails too, naming the first failure, and calls no fdatasync (on Linux a
 * second fdatasync through the same descriptor reports success over the pages the failure lost); the store breaks.
 * Its store_close then abandons the failed segment and carries the held batch into a fresh one, as
 * store_close_unsynced does, so the reopen never reads the range; the SEND's derived writes are kept. Before, the
 * barrier's sync succeeded, and the close of the broken store dropped the held batch (the reopen read the range). */
static void test_failed_sync_then_barrier(void)
{
    store_t *s = OPEN_DEFAULT();
    SEND(s, "t", "synced", 0, 0, T0, NULL);
    COMMIT(s);
    char err[512] = "";
    REQUIRE_OK(store_log_sync(s, err, sizeof err), err);
    SEND(s, "t", "held", 0, 0, T0, NULL);
    COMMIT(s);
    int segments = count_segments();
    g_fail_seg_syncs = 1;
    errno = 0;
    int rc = store_log_sync(s, err, sizeof err);
    TU_CHECK(rc == -1 && errno == EIO && strstr(err, "cannot fdatasync") != NULL, "the syncer's sync: %d (%s)", rc,
             err);
    TU_CHECK(g_fail_seg_syncs == 0, "no segment sync failed");
    g_fail_seg_syncs = 0;
    rc = store_scan(s, scan_nothing, NULL, err, sizeof err); /* a range walk: the read barrier */
    TU_CHECK(rc == -1 && store_broken(s) && strstr(err, "an earlier fdatasync of the log failed") != NULL,
             "the read barrier after it: %d, broken %d (%s), want the first failure named", rc, store_broken(s), err);
    CLOSE_BROKEN(&s, "reopen");
    TU_CHECK(count_segments() == segments + 1,
             "%d commit-log segments after the close, want %d: the held batch carried into a fresh one",
             count_segments(), segments + 1);
    store_options_t o;
    opts_default(&o);
    s = OPEN(&o);
    store_topic_info_t ti;
    TU_CHECK(store_topic_info(s, "t", 1, &ti) == 1 && ti.appended == 2,
             "after the reopen the topic holds %" PRIu64 " SENDs, want 2 (the held one's derived writes carried)",
             ti.appended);
    CHECK_STORE(s);
}

/* The commit-log segment files in g_data: how many (the return), and the highest base into *highest (0 when none;
 * highest may be NULL). */
static int segment_files(uint64_t *highest)
{
    DIR *d = opendir(g_data);
    int n = 0;
    uint64_t top = 0, base;
    struct dirent *e;
    while (d != NULL && (e = readdir(d)) != NULL) {
        if (sscanf(e->d_name, "clog-%16" SCNx64 ".seg", &base) == 1 && strlen(e->d_name) == 25) {
            n++;
            top = base > top ? base : top;
        }
    }
    if (d != NULL)
        closedir(d);
    if (highest != NULL)
        *highest = top;
    return n;
}

/* The highest base among the commit-log segments in g_data (0 when none). */
static uint64_t highest_segment_base(void)
{
    uint64_t highest;
    segment_files(&highest);
    return highest;
}

/* SENDs of 200 000 bytes, each committed alone at now and then collected (the store's retention is 1 s and "t" has
 * no group: the GC at now + 2 s takes it), so their segments are free for the next checkpoint's recycling — a
 * message in its topic's CQ keeps its segment until the GC passes it. With 1 MiB segments, several segments'
 * worth. */
static void commit_big_sends(store_t *s, int sends, uint64_t now)
{
    static char big[200000];
    memset(big, 'b', sizeof big);
    char err[512] = "";
    for (int i = 0; i < sends; i++) {
        uint64_t id, due;
        int work = 0;
        REQUIRE_OK(send_raw(s, "t", 1, "", 0, big, sizeof big, 0, 0, now, &id, &due, err, sizeof err), err);
        COMMIT(s);
        REQUIRE_OK(store_maintain(s, now + 2 * SEC, 1000, &work, err, sizeof err), err);
        COMMIT(s);
    }
}

/* Two SENDs committed ("synced" then "held"), then the store closed: when failed_sync, as the broker's storage
 * thread meets a failed sync of the log (test_failed_sync_then_barrier: the store breaks, its close abandons the
 * failed segment and carries the held batch into the next one), else cleanly. */
static void close_after_two_sends(store_t *s, int failed_sync)
{
    char err[512] = "";
    SEND(s, "t", "synced", 0, 0, T0, NULL);
    COMMIT(s);
    REQUIRE_OK(store_log_sync(s, err, sizeof err), err);
    SEND(s, "t", "held", 0, 0, T0, NULL);
    COMMIT(s);
    if (!failed_sync) {
        CLOSE(&s);
        return;
    }
    g_fail_seg_syncs = 1;
    int rc = store_log_sync(s, err, sizeof err);
    g_fail_seg_syncs = 0;
    TU_REQUIRE(rc == -1 && strstr(err, "cannot fdatasync") != NULL, "the failed sync: %d (%s)", rc, err);
    rc = store_scan(s, scan_nothing, NULL, err, sizeof err); /* the read barrier meets the failure: broken */
    TU_REQUIRE(rc == -1 && store_broken(s), "the read barrier after the failed sync: %d (%s)", rc, err);
    CLOSE_BROKEN(&s, "reopen");
}

/* Spares below the next checkpoint. A checkpoint's recycling renames the segments wholly below it past every file,
 * as spares the log takes again. A reopen whose clock floor lies past them (the broker's reopen after a failed
 * sync's carry, seconds later; any restart later than the spares' offsets) starts the log past every file, so the
 * spares lie below the log's end and below the next checkpoint: its recycling must skip them (clog_is_spare) —
 * clog_recycle refuses a spare ("cannot recycle a segment in use or not wholly durable"), and the store broke at the
 * first checkpoint after the reopen. Checked: the commits across several checkpoints after the reopen succeed, and
 * the next reopen holds every SEND. */
static void check_spares_below_checkpoint(int failed_sync)
{
    enum {
        SENDS = 30
    }; /* 200 000 bytes each: a segment each, several checkpoints */
    const uint64_t later = T0 + 60000;
    store_options_t o;
    opts_default(&o);
    o.segment_bytes = UINT64_C(1) << 20;
    o.checkpoint_bytes = STORE_CHECKPOINT_MIN_BYTES;
    o.retention_ms = SEC; /* commit_big_sends collects what it sent */
    store_t *s = open_at(&o, T0, __LINE__);
    commit_big_sends(s, SENDS, T0);
    CLOSE(&s);
    uint64_t highest_written = highest_segment_base();
    s = open_at(&o, T0, __LINE__); /* its checkpoint recycles the segments below it: spares past every file */
    TU_REQUIRE(highest_segment_base() > highest_written,
               "no spare past the written segments (highest base %" PRIx64 ", %" PRIx64 " before the reopen)",
               highest_segment_base(), highest_written);
    uint64_t highest_spare = highest_segment_base();
    close_after_two_sends(s, failed_sync);

    s = open_at(&o, later, __LINE__);
    commit_big_sends(s, 1, later);
    TU_REQUIRE(highest_segment_base() > highest_spare,
               "the log after the reopen at a later clock does not start past the spares (%" PRIx64
               ", spares to %" PRIx64 ")",
               highest_segment_base(), highest_spare);
    commit_big_sends(s, SENDS - 1, later); /* several checkpoints past the spares */
    CHECK_STORE(s);
    CLOSE(&s);
    s = open_at(&o, later, __LINE__);
    store_topic_info_t ti;
    TU_CHECK(store_topic_info(s, "t", 1, &ti) == 1 && ti.appended == 2 * SENDS + 2,
             "after the reopen the topic holds %" PRIu64 " SENDs, want %d", ti.appended, 2 * SENDS + 2);
    CHECK_STORE(s);
}

static void test_spares_below_checkpoint_after_carry(void)
{
    check_spares_below_checkpoint(1);
}

static void test_spares_below_checkpoint_after_close(void)
{
    check_spares_below_checkpoint(0);
}

/* Spares left below the log's end are taken again, not left behind for good. Each reopen at a later clock starts
 * the log past every file, leaving the spares the last checkpoint's recycling made below it; the log's next segments
 * must take those (lowest first) before pre-writing new files. Without it every such restart left as many files
 * behind as it had spares (17 → 20 → 23 … over rounds like these; a broker segment is 128 MiB). Checked: over five
 * rounds, each reopened a minute later, the directory holds no more segment files after the last round than after
 * the second (the first two fill the log and make its first spares). */
static void test_spares_below_end_taken_again(void)
{
    enum {
        SENDS = 30,
        ROUNDS = 5
    };
    store_options_t o;
    opts_default(&o);
    o.segment_bytes = UINT64_C(1) << 20;
    o.checkpoint_bytes = STORE_CHECKPOINT_MIN_BYTES;
    o.retention_ms = SEC; /* commit_big_sends collects what it sent */
    int files[ROUNDS];
    for (int r = 0; r < ROUNDS; r++) {
        uint64_t now = T0 + (uint64_t)r * 60000;
        store_t *s = open_at(&o, now, __LINE__);
        commit_big_sends(s, SENDS, now);
        CHECK_STORE(s);
        CLOSE(&s);
        files[r] = segment_files(NULL);
    }
    TU_CHECK(files[ROUNDS - 1] <= files[1],
             "segment files after each round: %d %d %d %d %d (spares below the end left behind)", files[0], files[1],
             files[2], files[3], files[4]);
    store_t *s = open_at(&o, T0 + ROUNDS * 60000, __LINE__);
    store_topic_info_t ti;
    TU_CHECK(store_topic_info(s, "t", 1, &ti) == 1 && ti.appended == ROUNDS * SENDS,
             "after the rounds the topic holds %" PRIu64 " SENDs, want %d", ti.appended, ROUNDS * SENDS);
    CHECK_STORE(s);
}

/* A commit, then a scan: a range walk passes the read barrier, which writes
 * the commit into LevelDB's log (a commit alone is held until the commit
 * log's sync: the tests below damage LevelDB's log). */
static int commit_into_leveldb(store_t *c, char *err, size_t errlen)
{
    return store_commit(c, err, errlen) != 0 ? -1 : store_scan(c, scan_nothing, NULL, err, errlen);
}

static int send_ten_committed(store_t *c, char *err, size_t errlen)
{
    for (int i = 0; i < 10; i++) {
        char payload[2] = { (char)('0' + i), '\0' };
        uint64_t id, due;
        if (send_raw(c, "t", 1, "", 0, payload, 1, 1, 0, T0, &id, &due, err, errlen) != 0 ||
            commit_into_leveldb(c, err, errlen) != 0)
            return -1;
    }
    return 0;
}

/* The path and size of the newest write-ahead log of g_data. */
static long newest_log_at(char *path, size_t pathlen, int line)
{
    DIR *d = opendir(g_data);
    TU_REQUIRE_AT(d != NULL, line, "opendir %s", g_data);
    struct dirent *e;
    char best[256] = "";
    while ((e = readdir(d)) != NULL) {
        size_t n = strlen(e->d_name);
        if (n == 10 && strcmp(e->d_name + 6, ".log") == 0 && strcmp(e->d_name, best) > 0)
            snprintf(best, sizeof best, "%s", e->d_name);
    }
    closedir(d);
    TU_REQUIRE_AT(best[0] != '\0', line, "no write-ahead log in %s", g_data);
    snprintf(path, pathlen, "%s/%s", g_data, best);
    struct stat st;
    TU_REQUIRE_AT(stat(path, &st) == 0, line, "stat %s", path);
    return (long)st.st_size;
}

/* Overwrite n bytes of the file at off with byte c. */
static void overwrite_at(const char *path, long off, int c, size_t n, int line)
{
    FILE *f = fopen(path, "r+b");
    TU_REQUIRE_AT(f != NULL && fseek(f, off, SEEK_SET) == 0, line, "open %s", path);
    for (size_t i = 0; i < n; i++)
        TU_REQUIRE_AT(fputc(c, f) != EOF, line, "write %s", path);
    TU_REQUIRE_AT(fclose(f) == 0, line, "close %s", path);
}

/* A power cut in the middle of the last write: its record's header is on
 * disk, the rest of its body is zeros. That write was never fsynced (never
 * acknowledged under fsync always). Before, LevelDB's paranoid checks
 * refused the whole directory ("corrupt ... restore it from a backup", all
 * the whole records with it); now the torn end is cut, its bytes kept beside
 * the log, and the nine whole SENDs are there — and the tenth too: every
 * commit goes through the commit log first, and the open redoes it from
 * there (design-commitlog.md §3). */
static void test_open_cuts_torn_log_end(void)
{
    CRASH_AFTER(send_ten_committed);
    char log[1000];
    long size = newest_log_at(log, sizeof log, __LINE__);
    overwrite_at(log, size - 20, 0, 20, __LINE__);
    store_options_t o;
    opts_default(&o);
    store_t *s = NULL;
    char err[1024] = "";
    int rc = store_open(&o, T0, &s, err, sizeof err);
    TU_REQUIRE(rc == 0, "a torn log end refused the directory: rc %d \"%s\"", rc, err);
    for (int i = 0; i < MAX_OPEN; i++)
        if (g_open[i] == NULL) {
            g_open[i] = s;
            break;
        }
    const char *note = store_open_note(s);
    TU_CHECK(strstr(note, "torn write") != NULL && strstr(note, ".torn-") != NULL, "note: \"%s\"", note);
    CHECK_EQ_U64(level_depth(s, 1), 10); /* the tenth: cut from LevelDB's log, redone from the commit log */
    CHECK_STORE(s);
    char kept[1100];
    const char *at = strstr(note, ".torn-");
    snprintf(kept, sizeof kept, "%s.torn-%ld", log, at ? strtol(at + 6, NULL, 10) : -1L);
    struct stat st;
    TU_CHECK(stat(kept, &st) == 0 && st.st_size > 20, "the torn bytes are not kept in %s", kept);
    CLOSE(&s);
    s = OPEN_DEFAULT();
    TU_CHECK(store_open_note(s)[0] == '\0', "a second open cut again: \"%s\"", store_open_note(s));
    CHECK_EQ_U64(level_depth(s, 1), 10); /* the tenth: cut from LevelDB's log, redone from the commit log */
}

/* A power cut right after LevelDB switched to a new log: the new one is
 * empty, the torn write is at the end of the one before. Cut there too. */
static void test_open_cuts_torn_end_before_empty_log(void)
{
    CRASH_AFTER(send_ten_committed);
    char log[1000], empty[1100];
    long size = newest_log_at(log, sizeof log, __LINE__);
    overwrite_at(log, size - 20, 0, 20, __LINE__);
    snprintf(empty, sizeof empty, "%s/999999.log", g_data);
    TU_REQUIRE(write_file(empty, "") == 0, "write %s", empty);
    store_options_t o;
    opts_default(&o);
    store_t *s = NULL;
    char err[1024] = "";
    int rc = store_open(&o, T0, &s, err, sizeof err);
    TU_REQUIRE(rc == 0, "a torn end before an empty newer log: rc %d \"%s\"", rc, err);
    TU_CHECK(strstr(store_open_note(s), "torn write") != NULL, "note: \"%s\"", store_open_note(s));
    CHECK_EQ_U64(level_depth(s, 1), 10); /* the tenth: cut from LevelDB's log, redone from the commit log */
    CHECK_STORE(s);
    store_close(s, NULL, 0);
}

/* Nine small SENDs, then one of 100 000 bytes (its log record in fragments
 * over four 32 KiB blocks: FIRST, MIDDLE, MIDDLE, LAST), each committed
 * alone into LevelDB; with tail_small, one more small SEND after it. The
 * small ones wait on level 1, the big one goes to topic t's log without
 * delay: a journey on a level has no LevelDB record (design-commitlog.md
 * 4a.5), the log entry holds its message. */
static int send_big_last(store_t *c, char *err, size_t errlen, int tail_small)
{
    static char big[100000];
    memset(big, 'b', sizeof big);
    for (int i = 0; i < 10 + tail_small; i++) {
        uint64_t id, due;
        int is_big = i == 9;
        if (send_raw(c, "t", 1, "", 0, is_big ? big : "s", is_big ? sizeof big : 1, is_big ? 0 : 1, 0, T0, &id, &due,
                     err, errlen) != 0 ||
            commit_into_leveldb(c, err, errlen) != 0)
            return -1;
        if (is_big) { /* its large LevelDB record: a written lease's copy (design-commitlog.md 4b: the SEND's message
                         is its commit-log record, no 'T' copy) */
            msg_owned_t m;
            int n = 0;
            if (store_lease(c, "g", 1, "t", 1, 1, 60000, T0, &m, &n, err, errlen) != 0 ||
                commit_into_leveldb(c, err, errlen) != 0)
                return -1;
            if (n == 1)
                msg_owned_free(&m);
        }
    }
    return 0;
}
static int send_big_at_end(store_t *c, char *err, size_t errlen)
{
    return send_big_last(c, err, errlen, 0);
}
static int send_big_then_small(store_t *c, char *err, size_t errlen)
{
    return send_big_last(c, err, errlen, 1);
}

/* Open g_data after damage: the return code, the messages kept (or -1):
 * level 1's and topic t's log's. */
static int open_after_damage(char *err, size_t errlen, long long *depth)
{
    store_options_t o;
    opts_default(&o);
    store_t *s = NULL;
    int rc = store_open(&o, T0, &s, err, errlen);
    *depth = -1;
    if (rc == 0) {
        store_topic_info_t t = { 0 };
        (void)store_topic_info(s, "t", 1, &t);
        *depth = (long long)(level_depth(s, 1) + t.retained);
        char cerr[512];
        if (store_check(s, cerr, sizeof cerr) != 0)
            snprintf(err, errlen, "store_check after the open: %s", cerr);
        store_close(s, NULL, 0);
    }
    return rc;
}

/* A record in fragments torn at its last or at a middle fragment (the write
 * of a large batch cut by a power cut, later pages on disk before earlier
 * ones) is a torn end: cut before its first fragment, the nine small SENDs
 * kept (and the big one redone from the commit log). Damage in it with a whole record after it (a later small SEND),
 * all past the commit log's checkpoint, is a hole replayed past: the redo from the checkpoint restores the big one
 * (test_store_open: a hole below the checkpoint is refused). */
static void test_open_torn_fragments(void)
{
    char log[1000], err[1024];
    long long depth;
    long offs[2] = { 20, 40000 }; /* from the end: the LAST fragment, a MIDDLE one */
    for (int k = 0; k < 2; k++) {
        CRASH_AFTER(send_big_at_end);
        long size = newest_log_at(log, sizeof log, __LINE__);
        overwrite_at(log, size - offs[k], 0, 8, __LINE__);
        err[0] = '\0';
        int rc = open_after_damage(err, sizeof err, &depth);
        TU_CHECK(rc == 0 && depth == 10 && err[0] == '\0',
                 "torn %ld bytes before the end of a fragmented last record: rc %d, depth %lld, \"%s\"", offs[k], rc,
                 depth, err);
        tu_rmtree(g_data);
    }
    CRASH_AFTER(send_big_then_small);
    long size = newest_log_at(log, sizeof log, __LINE__);
    overwrite_at(log, size - 60000, 0, 8, __LINE__); /* inside the big record, a whole small one after it */
    err[0] = '\0';
    int rc = open_after_damage(err, sizeof err, &depth);
    TU_CHECK(rc == 0 && depth == 11 && err[0] == '\0',
             "damage with a whole record after it, past the checkpoint: rc %d, depth %lld \"%s\"", rc, depth, err);
}

/* Damage with whole records after it is no torn end: LevelDB's paranoid
 * open refuses it. Past the commit log's checkpoint (every commit here came
 * after the open's), it is a hole a power cut left in unsynced writes: the
 * open replays past it, keeping its bytes beside the log, and the redo from
 * the checkpoint restores all ten SENDs (test_store_open: one below the
 * checkpoint is refused). */
static void test_open_replays_past_log_hole(void)
{
    CRASH_AFTER(send_ten_committed);
    char log[1000];
    long size = newest_log_at(log, sizeof log, __LINE__);
    overwrite_at(log, size / 3, 0x5a, 4, __LINE__);
    store_options_t o;
    opts_default(&o);
    store_t *s = NULL;
    char err[1024] = "";
    int rc = store_open(&o, T0, &s, err, sizeof err);
    TU_REQUIRE(rc == 0, "a hole past the checkpoint: rc %d \"%s\"", rc, err);
    const char *note = store_open_note(s);
    TU_CHECK(strstr(note, "whole records after it") != NULL && strstr(note, "replayed past it") != NULL &&
                 strstr(note, ".hole-") != NULL,
             "note: \"%s\"", note);
    CHECK_EQ_U64(level_depth(s, 1), 10);
    CHECK_STORE(s);
    store_close(s, NULL, 0);
}

/* Make dir (inside g_dir) a chain of nested directories at least min bytes
 * long, each created; the last component ("data") is left for the store. */
static void long_data_dir(char *dir, size_t len, size_t min)
{
    size_t n = (size_t)snprintf(dir, len, "%s", g_dir);
    for (int depth = 0; n < min; depth++) {
        n += (size_t)snprintf(dir + n, len - n, "/nested directory to make the path long %02d", depth);
        TU_REQUIRE(n < len && mkdir(dir, 0700) == 0, "mkdir %s: %s", dir, strerror(errno));
    }
    snprintf(dir + n, len - n, "/data");
}

/* A commit past the file size limit (EFBIG: "File too large", the kind of
 * failure a full disk is) in a data directory whose path is over 300 bytes,
 * with blanks in it: the store remembers the failure as a full disk's
 * (store_last_failure_full), and its error keeps the cause, the directory
 * shown shortened (one word, starting as the directory does). Before, the
 * 256-byte buffer that received LevelDB's "IO error: <dir>/000005.log: File
 * too large" cut it inside the path, and the writer, which read the cause
 * from that text, did not see a full disk. */
static void test_full_failure_long_dir(void)
{
    char dir[800];
    long_data_dir(dir, sizeof dir, 300);
    store_options_t o;
    opts_default(&o);
    o.path = dir;
    store_t *s = OPEN(&o);
    SEND(s, "t", "committed", 0, 0, T0, NULL);
    COMMIT(s);
    TU_CHECK(!store_last_failure_full(s), "a store that never failed says its last failure was a full disk's");

    disk_full_at(1 << 20); /* the log holds a few KiB: the next 1 MiB write passes the limit */
    static char big[1 << 20];
    memset(big, 'b', sizeof big);
    char err[512] = "";
    uint64_t id, due;
    REQUIRE_OK(send_raw(s, "t", 1, "", 0, big, sizeof big, 0, 0, T0 + 1, &id, &due, err, sizeof err), err);
    int rc = store_commit(s, err, sizeof err);
    disk_room_again();
    TU_CHECK(rc == -1 && store_broken(s), "commit past the file size limit: rc %d broken %d", rc, store_broken(s));
    TU_CHECK(store_last_failure_full(s), "a commit refused with EFBIG in a %zu-byte directory is not a full disk's: %s",
             strlen(dir), err);
    TU_CHECK(strstr(err, strerror(EFBIG)) != NULL, "the commit's error lost its cause: \"%s\"", err);
    char shown[STORE_PATH_SHOWN_MAX + 1];
    store_path_shown(dir, shown, sizeof shown);
    TU_CHECK(strstr(err, shown) != NULL && strstr(err, dir) == NULL,
             "the commit's error does not show the directory shortened (%s): \"%s\"", shown, err);
    /* later refusals carry the break's text, and the fact stays */
    err[0] = '\0';
    CHECK_REFUSAL(store_commit(s, err, sizeof err), err, "reopen", strerror(EFBIG));
    TU_CHECK(store_last_failure_full(s), "the fact went with a later refusal");
    CLOSE_BROKEN(&s, "reopen");

    /* a break for another reason is not a full disk's */
    s = OPEN(&o);
    store_break(s, "a run of SENDs failed half-way");
    TU_CHECK(store_broken(s) && !store_last_failure_full(s), "store_break is taken for a full disk");
    CLOSE_BROKEN(&s, "half-way");
}

/* Which errnos and texts mean no room, and how a long path is shown. */
static void test_failure_kind_and_text(void)
{
    TU_CHECK(store_failure_errno_full(ENOSPC) && store_failure_errno_full(EFBIG) && store_failure_errno_full(EDQUOT),
             "ENOSPC, EFBIG or EDQUOT is not a full disk");
    TU_CHECK(!store_failure_errno_full(EIO) && !store_failure_errno_full(EACCES) && !store_failure_errno_full(0),
             "EIO, EACCES or 0 taken for a full disk");
    char text[256];
    snprintf(text, sizeof text, "IO error: /d/000005.log: %s", strerror(ENOSPC));
    TU_CHECK(store_failure_text_full(text), "\"%s\" is not a full disk", text);
    snprintf(text, sizeof text, "IO error: /d/000005.log: %s", strerror(EDQUOT));
    TU_CHECK(store_failure_text_full(text), "\"%s\" is not a full disk", text);
    TU_CHECK(!store_failure_text_full("IO error: /d/000005.log: Input/output error") && !store_failure_text_full(NULL),
             "EIO's text or NULL taken for a full disk");

    /* a short path is shown whole, and a text naming it is unchanged */
    char out[512], shown[STORE_PATH_SHOWN_MAX + 1];
    TU_CHECK(strcmp(store_path_shown("/var/lib/hourglass", shown, sizeof shown), "/var/lib/hourglass") == 0,
             "a short path shown as %s", shown);
    store_failure_text("IO error: /var/lib/hourglass/LOCK: busy", "/var/lib/hourglass", out, sizeof out);
    TU_CHECK(strcmp(out, "IO error: /var/lib/hourglass/LOCK: busy") == 0, "a short path's text became \"%s\"", out);

    /* a 4000-byte path: head and tail around "...", one word, each occurrence replaced, the cause kept */
    static char path[4001], longtext[8200];
    memset(path, 'p', 4000);
    path[0] = '/';
    path[1000] = ' ';
    memcpy(path + 3990, "/last-part", 10);
    path[4000] = '\0';
    store_path_shown(path, shown, sizeof shown);
    TU_CHECK(strlen(shown) <= STORE_PATH_SHOWN_MAX && shown[0] == '/' && strstr(shown, "...") != NULL &&
                 strstr(shown, "/last-part") != NULL && strchr(shown, ' ') == NULL,
             "a 4000-byte path shown as \"%s\"", shown);
    snprintf(longtext, sizeof longtext, "IO error: %s/000005.log and %s/LOCK: %s", path, path, strerror(ENOSPC));
    store_failure_text(longtext, path, out, sizeof out);
    char want[512];
    snprintf(want, sizeof want, "IO error: %s/000005.log and %s/LOCK: %s", shown, shown, strerror(ENOSPC));
    TU_CHECK(strcmp(out, want) == 0, "the text became \"%s\", want \"%s\"", out, want);
    TU_CHECK(store_failure_text_full(out), "the shortened text lost its cause: \"%s\"", out);
    /* a buffer too small for the text still ends it */
    char tiny[16];
    store_failure_text(longtext, path, tiny, sizeof tiny);
    TU_CHECK(strlen(tiny) == sizeof tiny - 1 && strncmp(tiny, "IO error: /", 11) == 0, "a 16-byte cut: \"%s\"", tiny);
}

/* The threads of this process: /proc/self/task's entries, -1 when it cannot be listed. */
static int live_threads(void)
{
    DIR *d = opendir("/proc/self/task");
    if (d == NULL)
        return -1;
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL)
        n += e->d_name[0] != '.';
    closedir(d);
    return n;
}

/* Wait (10 s at most) until the process has at most most threads; how many it has then. */
static int threads_settle_at(int most)
{
    uint64_t end = tu_now_mono_ms() + 10000;
    int n;
    while ((n = live_threads()) > most && tu_now_mono_ms() < end) {
        struct timespec ts = { 0, 2 * 1000000 };
        nanosleep(&ts, NULL);
    }
    return n;
}

/* SENDs of 200 000 bytes as the broker runs the store: each committed, collected, the log synced and applied, the
 * commit log's next spare pre-written on its thread and a checkpoint finished on its own (checkpoint_on_thread), so
 * that every thread a store makes is running. The most threads seen meanwhile into *most. */
static void sends_with_every_thread(store_t *s, int sends, uint64_t now, int *most)
{
    char err[512] = "";
    for (int i = 0; i < sends; i++) {
        commit_big_sends(s, 1, now);
        REQUIRE_OK(store_log_sync(s, err, sizeof err), err); /* as the broker's syncer, then its storage thread */
        REQUIRE_OK(store_apply_durable(s, err, sizeof err), err);
        REQUIRE_OK(store_log_prepare_step(s, 0, err, sizeof err) < 0, err);
        REQUIRE_OK(store_log_checkpoint_step(s, err, sizeof err), err);
        int n = live_threads();
        *most = n > *most ? n : *most;
    }
}

/* After a close (named by `path`, in round `round`): the process has no more than baseline threads again, waited for
 * a little (a joined thread's /proc entry goes just after the join returns). */
static void check_threads_back_at(int baseline, int round, const char *path, int line)
{
    int n = threads_settle_at(baseline);
    TU_CHECK(n <= baseline, "line %d, round %d: %d threads after %s close, %d before the store opened", line, round, n,
             path, baseline);
}
#define CHECK_THREADS_BACK(baseline, round, path) check_threads_back_at((baseline), (round), (path), __LINE__)

/* Every way a store closes joins every thread it made (its compactor, the commit log's pre-writer and checkpoint
 * finisher): a store broken by a failed commit and closed (as the broker reopens it after one), broken by a failed
 * sync of the log, closed cleanly, closed unsynced, and an open refused after its compactor started (another level
 * table). Each close leaves the process the threads it had before, round after round. The baseline is taken after
 * a first open and close: LevelDB starts its background thread at the first compaction and keeps it for the
 * process (its Env is a singleton), so that one is counted in it. That thread, given the stack and TLS block glibc
 * cached from a joined compactor, is valgrind's "288 bytes possibly lost" under compactor_new (levels/compactor.c). */
static void test_every_close_joins_threads(void)
{
    enum {
        ROUNDS = 4
    };
    store_options_t o;
    opts_default(&o);
    o.segment_bytes = UINT64_C(1) << 20;
    o.checkpoint_bytes = STORE_CHECKPOINT_MIN_BYTES;
    o.checkpoint_on_thread = 1;
    o.retention_ms = SEC; /* sends_with_every_thread collects what it sent */
    static char big[300000];
    memset(big, 'b', sizeof big);
    store_t *s = OPEN(&o);
    SEND(s, "t", "first", 0, 0, T0, NULL);
    COMMIT(s);
    CLOSE(&s); /* its memtable written out: LevelDB's background thread runs from here on */
    /* one high while the joined compactor's entry goes: a thread leaked per round still shows */
    int baseline = live_threads(), most = 0;
    for (int round = 1; round <= ROUNDS; round++) {
        uint64_t now = T0 + (uint64_t)round * 10 * SEC;
        char err[512] = "";
        uint64_t id, due;

        s = OPEN(&o);
        sends_with_every_thread(s, 8, now, &most);
        disk_full_at(64 << 10); /* the next segment cannot be written: the commit fails, the store breaks */
        int rc = send_raw(s, "t", 1, "", 0, big, sizeof big, 0, 0, now + 1, &id, &due, err, sizeof err);
        if (rc == 0)
            rc = store_commit(s, err, sizeof err);
        disk_room_again();
        TU_REQUIRE(rc == -1 && store_broken(s), "round %d: a commit past the file size limit: rc %d broken %d (%s)",
                   round, rc, store_broken(s), err);
        CLOSE_BROKEN(&s, "reopen");
        CHECK_THREADS_BACK(baseline, round, "a failed commit's");

        close_after_two_sends(OPEN(&o), 1);
        CHECK_THREADS_BACK(baseline, round, "a failed sync's");

        s = OPEN(&o);
        sends_with_every_thread(s, 8, now + 3 * SEC, &most);
        CLOSE(&s);
        CHECK_THREADS_BACK(baseline, round, "a clean");

        s = OPEN(&o);
        sends_with_every_thread(s, 8, now + 6 * SEC, &most);
        for (int i = 0; i < MAX_OPEN; i++)
            if (g_open[i] == s)
                g_open[i] = NULL;
        REQUIRE_OK(store_close_unsynced(s, err, sizeof err), err);
        CHECK_THREADS_BACK(baseline, round, "an unsynced");

        store_options_t other = o;
        other.levels.count = o.levels.count - 1;
        s = NULL;
        rc = store_open(&other, now + 9 * SEC, &s, err, sizeof err);
        TU_REQUIRE(rc != 0 && s == NULL, "round %d: an open with another level table: rc %d", round, rc);
        CHECK_THREADS_BACK(baseline, round, "a refused open's");
    }
    printf("\n    %d threads at most while open, %d after each close of %d rounds ", most, baseline, ROUNDS);
    TU_CHECK(most >= baseline + 3, "at most %d threads while open, %d closed: the store's threads never ran", most,
             baseline);
}

static const tu_test_t failure_tests[] = {
    { "commit failure breaks the store", test_commit_failure_breaks_store },
    { "a refused log append closes the log clean: the reopen writes nothing", test_refused_append_closes_clean },
    { "a failed log sync, then the read barrier's: refused, the close abandons and carries",
      test_failed_sync_then_barrier },
    { "spares below the checkpoint after a failed sync's carry and a later reopen: recycling skips them",
      test_spares_below_checkpoint_after_carry },
    { "spares below the checkpoint after a clean close and a later reopen: recycling skips them",
      test_spares_below_checkpoint_after_close },
    { "spares below the log's end are taken again, not left behind", test_spares_below_end_taken_again },
    { "a torn write at the log's end is cut", test_open_cuts_torn_log_end },
    { "a torn write before an empty newer log is cut", test_open_cuts_torn_end_before_empty_log },
    { "damage inside the log past the checkpoint is replayed past, not cut", test_open_replays_past_log_hole },
    { "a torn record in fragments is cut, one with a whole record after it replayed past", test_open_torn_fragments },
    { "a full disk is a fact, however long the directory's path", test_full_failure_long_dir },
    { "which failures are a full disk's; a long path shown short", test_failure_kind_and_text },
    { "every close path joins the store's threads, round after round", test_every_close_joins_threads },
    { NULL, NULL },
};

/* =========================================================== suite: logsync */

/* levels/logsync: the broker's fsync thread syncs the store's write-ahead
 * logs through its own descriptors. Every run succeeds while the store
 * writes and rotates its log (a small write buffer: several rotations) and
 * notes the newest log's size (logsync_newest_bytes, what a checkpoint
 * compares with STORE_LEVELDB_LOG_FLUSH_BYTES), the ids written stay
 * readable after a reopen, and a directory without a log or that does not
 * exist is an error naming it. */
static void test_logsync_runs(void)
{
    store_options_t o;
    opts_default(&o);
    o.write_buffer_bytes = 64 << 10; /* rotate the log every ~64 KiB */
    store_t *s = OPEN(&o);
    logsync_t *ls = logsync_new(g_data);
    char err[512] = "", payload[1025];
    memset(payload, 'p', 1024);
    payload[1024] = '\0';
    int runs_ok = 0, sizes_ok = 0;
    uint64_t first = 0, last = 0;
    char newest[1200];
    for (int round = 0; round < 40; round++) {
        for (int i = 0; i < 20; i++)
            last = SEND(s, "t", payload, 0, 0, T0 + (uint64_t)round, NULL);
        if (round == 0)
            first = last - 19;
        REQUIRE_OK(store_commit_durable(s, 0, err, sizeof err), err);
        runs_ok += logsync_run(ls, err, sizeof err) == 0;
        long size = newest_log_at(newest, sizeof newest, __LINE__);
        sizes_ok += size > 0 && logsync_newest_bytes(ls) == (unsigned long long)size;
    }
    TU_CHECK(runs_ok == 40, "%d of 40 syncs succeeded (last error: %s)", runs_ok, err);
    TU_CHECK(sizes_ok == 40, "%d of 40 runs noted the newest log's size (last: %llu, %s)", sizes_ok,
             logsync_newest_bytes(ls), newest);
    logsync_free(ls);
    CLOSE(&s);
    s = OPEN(&o);
    store_topic_info_t ti;
    TU_CHECK(store_topic_info(s, "t", 1, &ti) == 1 && ti.appended == 800, "appended %" PRIu64 " of 800", ti.appended);
    TU_CHECK(last - first >= 799, "ids %" PRIu64 "..%" PRIu64, first, last);
    CHECK_STORE(s);

    char empty[700];
    snprintf(empty, sizeof empty, "%s/empty", g_dir);
    TU_REQUIRE(mkdir(empty, 0700) == 0, "mkdir %s", empty);
    ls = logsync_new(empty);
    TU_CHECK(logsync_run(ls, err, sizeof err) == -1 && strstr(err, "no write-ahead log") && strstr(err, empty),
             "empty directory: '%s'", err);
    logsync_free(ls);
    snprintf(empty, sizeof empty, "%s/missing", g_dir);
    ls = logsync_new(empty);
    TU_CHECK(logsync_run(ls, err, sizeof err) == -1 && strstr(err, "cannot list") && strstr(err, empty),
             "missing directory: '%s'", err);
    logsync_free(ls);
}

static const tu_test_t logsync_tests[] = {
    { "syncs through rotations; errors", test_logsync_runs },
    { NULL, NULL },
};

static const tu_suite_t suites[] = {
    { "failure", failure_tests },
    { "logsync", logsync_tests },
};

int main(int argc, char **argv)
{
    return tu_suites_main(argc, argv, suites, sizeof suites / sizeof suites[0], store_fixture_setup,
                          store_fixture_teardown);
}
