/*
 * tests/unit/test_store_snapshot.c — CUnit suite "snapshot" of the store
 * package behind levels/store.h (DESIGN §1–3), through its public calls (and
 * raw LevelDB writes where a test corrupts a directory on purpose): copies of
 * a live store (store_snapshot_copy): made while the owner writes, refused,
 * cut short, whole copies and their marks, CRC-32C.
 *
 * The fixture (tests/helpers/store_fixture.h): every test gets a fresh temp
 * directory and drives the store with an injected clock, every now_ms passed
 * explicitly from T0; after every step that mutates, store_check() must
 * return 0. Run alone: ./tests/unit/test_store_snapshot [suite [test]].
 */
#include "base/alloc.h"
#include "base/err.h"
#include "levels/logsync.h"
#include "levels/store.h"
#include "tests/helpers/store_fixture.h"
#include "tests/helpers/testutil.h"

#include <CUnit/CUnit.h>
#include <errno.h>
#include <inttypes.h>
#include <leveldb/c.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <dirent.h>
#include <signal.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

/* An order-sensitive digest of every stored message and where it is. */
typedef struct scan_digest {
    uint64_t n, h;
} scan_digest_t;

static int digest_entry(void *ctx, const store_entry_t *e)
{
    scan_digest_t *d = ctx;
    uint64_t parts[6] = { (uint64_t)e->range, (uint64_t)e->level, e->seq, e->due_ms, e->deadline_ms, e->m->id };
    for (int i = 0; i < 6; i++)
        d->h = (d->h ^ parts[i]) * UINT64_C(1099511628211);
    d->h = (d->h ^ e->m->payload.len) * UINT64_C(1099511628211);
    d->n++;
    return 0;
}

static scan_digest_t digest_at(store_t *s, int line)
{
    char err[512] = "";
    scan_digest_t d = { 0, UINT64_C(14695981039346656037) };
    TU_REQUIRE_AT(store_scan(s, digest_entry, &d, err, sizeof err) == 0, line, "store_scan: %s", err);
    return d;
}
#define DIGEST(s) digest_at((s), __LINE__)

typedef struct copy_run {
    store_snapshot_t *sn;
    char dir[700];
    int rc;
    char err[512];
    store_copy_progress_t progress;
} copy_run_t;

static void *copy_thread(void *arg)
{
    copy_run_t *c = arg;
    c->rc = store_snapshot_copy(c->sn, c->dir, NULL, NULL, &c->progress, c->err, sizeof c->err);
    return NULL;
}

/* The copy at dir opened as a store (never made: create_if_missing off); a
 * failed open fails the test at line. dir must outlive the store. */
static store_t *open_copy_at(const char *dir, int line)
{
    store_options_t o;
    opts_default(&o);
    o.path = dir;
    o.create_if_missing = 0;
    return open_at(&o, T0, line);
}
#define OPEN_COPY(dir) open_copy_at((dir), __LINE__)

/* The copy is the store as of the snapshot, while the owner goes on. */
static void test_snapshot_copy_while_writing(void)
{
    store_t *s = OPEN_DEFAULT();
    fill_mixed(s);
    scan_digest_t before = DIGEST(s);
    char err[512] = "";
    copy_run_t c = { 0 };
    c.sn = store_snapshot_take(s, err, sizeof err);
    TU_REQUIRE(c.sn != NULL, "store_snapshot_take: %s", err);
    snprintf(c.dir, sizeof c.dir, "%s/copy", g_dir);
    pthread_t th;
    TU_REQUIRE(pthread_create(&th, NULL, copy_thread, &c) == 0, "pthread_create");
    /* the owner writes on meanwhile: none of it may show in the copy */
    for (int i = 0; i < 2000; i++) {
        SEND(s, "t", "after", i % 3, 0, T0 + 1, NULL);
        if (i % 100 == 99)
            COMMIT(s);
    }
    msg_owned_t m[10];
    int n = LEASE_N(s, "g", "t", 10, LEASE, T0 + 1, m);
    free_msgs(m, n);
    COMMIT(s);
    pthread_join(th, NULL);
    store_snapshot_release(c.sn);
    TU_REQUIRE(c.rc == 0, "store_snapshot_copy: %d %s", c.rc, c.err);
    TU_CHECK(atomic_load(&c.progress.keys) > 70 && atomic_load(&c.progress.bytes) > 0,
             "progress: %" PRIu64 " records, %" PRIu64 " bytes", (uint64_t)atomic_load(&c.progress.keys),
             (uint64_t)atomic_load(&c.progress.bytes));
    scan_digest_t after = DIGEST(s);
    TU_CHECK(after.n > before.n, "the owner's writes: %" PRIu64 " -> %" PRIu64, before.n, after.n);
    CHECK_STORE(s);
    CLOSE(&s);

    store_t *copy = OPEN_COPY(c.dir);
    CHECK_STORE(copy);
    scan_digest_t got = DIGEST(copy);
    CHECK_EQ_U64(got.n, before.n);
    CHECK_EQ_U64(got.h, before.h);
    /* it works as a store: the group goes on where it was */
    n = LEASE_N(copy, "g", "t", 10, LEASE, T0 + 2, m);
    TU_CHECK(n == 10, "leased %d from the copy", n);
    for (int i = 0; i < n; i++)
        TU_CHECK(m[i].m.payload.len == 5 && memcmp(m[i].m.payload.ptr, "ready", 5) == 0,
                 "the copy delivered a message sent after its snapshot");
    free_msgs(m, n);
    CHECK_STORE(copy);
    CLOSE(&copy);
}

/* A lease held only in memory is not in the copy: its message comes again at
 * once, as after a crash. */
static void test_snapshot_unwritten_leases(void)
{
    store_t *s = open_write_late();
    for (int i = 0; i < 5; i++)
        SEND(s, "t", "x", 0, 0, T0, NULL);
    GROUP_CREATE(s, "g", "t", 1, T0);
    msg_owned_t m[5];
    int n = LEASE_N(s, "g", "t", 5, LEASE, T0, m);
    TU_REQUIRE(n == 5, "leased %d", n);
    free_msgs(m, n);
    char dir[700];
    snprintf(dir, sizeof dir, "%s/copy", g_dir);
    SNAPSHOT_COPY_TO(s, dir);
    store_t *copy = OPEN_COPY(dir);
    n = LEASE_N(copy, "g", "t", 5, LEASE, T0 + 1, m);
    TU_CHECK(n == 5, "the copy delivered %d of the 5 leased in memory", n);
    free_msgs(m, n);
    CHECK_STORE(copy);
}

/* The commit-log segments (clog-*.seg) in dir. */
static int count_segments(const char *dir)
{
    DIR *d = opendir(dir);
    TU_REQUIRE(d != NULL, "opendir %s: %s", dir, strerror(errno));
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        size_t len = strlen(e->d_name);
        if (strncmp(e->d_name, "clog-", 5) == 0 && len > 4 && strcmp(e->d_name + len - 4, ".seg") == 0)
            n++;
    }
    closedir(d);
    return n;
}

/* A copy holds LevelDB's records and no commit log: it opens as a store with
 * an empty log, which then grows as the live store's does (a copy made while
 * nothing was appended to the log, and from 4a.2 on one whose records came
 * through the log: the copy must carry no mark naming the live log). */
static void test_snapshot_copy_without_log_opens(void)
{
    store_t *s = OPEN_DEFAULT();
    fill_mixed(s);
    COMMIT(s);
    scan_digest_t before = DIGEST(s);
    char dir[700];
    snprintf(dir, sizeof dir, "%s/copy", g_dir);
    SNAPSHOT_COPY_TO(s, dir);
    CLOSE(&s);
    TU_CHECK(count_segments(dir) == 0, "the copy holds %d commit-log segments", count_segments(dir));

    store_t *copy = OPEN_COPY(dir);
    CHECK_STORE(copy);
    scan_digest_t got = DIGEST(copy);
    CHECK_EQ_U64(got.n, before.n);
    CHECK_EQ_U64(got.h, before.h);
    /* the copy's log takes new commits, and they survive its reopen */
    for (int i = 0; i < 10; i++)
        SEND(copy, "t2", "new", 0, 0, T0 + 1, NULL);
    COMMIT(copy);
    CLOSE(&copy);
    copy = OPEN_COPY(dir);
    CHECK_STORE(copy);
    CHECK_EQ_U64(DIGEST(copy).n, before.n + 10);
    CLOSE(&copy);
}

static int g_checks;
static int check_stop(void *ctx, char *err, size_t errlen)
{
    (void)err;
    (void)errlen;
    g_checks++;
    return *(int *)ctx;
}
static int check_fail(void *ctx, char *err, size_t errlen)
{
    (void)ctx;
    g_checks++;
    err_set(err, errlen, "the disk runs low");
    return -1;
}

/* A copy that is stopped, fails, or would overwrite leaves nothing of its own. */
static void test_snapshot_copy_refusals(void)
{
    store_t *s = OPEN_DEFAULT();
    static char big[32 * 1024];
    memset(big, 'b', sizeof big - 1);
    for (int i = 0; i < 400; i++) /* 12.5 MiB: more than one batch of the copy */
        SEND(s, "t", big, 1, 0, T0, NULL);
    COMMIT(s);
    char err[512] = "", dir[700], partial[720];
    snprintf(dir, sizeof dir, "%s/copy", g_dir);
    snprintf(partial, sizeof partial, "%s" STORE_COPY_PARTIAL, dir);
    store_snapshot_t *sn = store_snapshot_take(s, err, sizeof err);
    TU_REQUIRE(sn != NULL, "store_snapshot_take: %s", err);
    struct stat st;

    int go_on = 0, stop = 1;
    g_checks = 0;
    int rc = store_snapshot_copy(sn, dir, check_stop, &stop, NULL, err, sizeof err);
    TU_CHECK(rc == 1 && g_checks == 1, "stopped: rc %d after %d checks (%s)", rc, g_checks, err);
    TU_CHECK(stat(dir, &st) != 0 && errno == ENOENT, "a stopped copy left %s", dir);
    TU_CHECK(stat(partial, &st) != 0 && errno == ENOENT, "a stopped copy left %s", partial);

    g_checks = 0;
    rc = store_snapshot_copy(sn, dir, check_fail, NULL, NULL, err, sizeof err);
    TU_CHECK(rc == -1 && strstr(err, "the disk runs low") != NULL, "failed: rc %d, '%s'", rc, err);
    TU_CHECK(stat(dir, &st) != 0 && errno == ENOENT, "a failed copy left %s", dir);
    TU_CHECK(stat(partial, &st) != 0 && errno == ENOENT, "a failed copy left %s", partial);

    TU_REQUIRE(mkdir(partial, 0700) == 0, "mkdir %s", partial); /* a copy a crash cut short */
    rc = store_snapshot_copy(sn, dir, NULL, NULL, NULL, err, sizeof err);
    TU_CHECK(rc == -1 && strstr(err, partial) != NULL && strstr(err, "already exists") != NULL,
             "beside a .partial: rc %d, '%s'", rc, err);
    TU_REQUIRE(rmdir(partial) == 0, "rmdir %s", partial);

    g_checks = 0;
    rc = store_snapshot_copy(sn, dir, check_stop, &go_on, NULL, err, sizeof err);
    TU_CHECK(rc == 0 && g_checks >= 2, "whole: rc %d after %d checks (%s)", rc, g_checks, err);
    TU_CHECK(stat(dir, &st) == 0 && stat(partial, &st) != 0, "a whole copy is in %s, and nothing in %s", dir, partial);
    rc = store_snapshot_copy(sn, dir, NULL, NULL, NULL, err, sizeof err);
    TU_CHECK(rc == -1 && strstr(err, "already exists") != NULL, "over a copy: rc %d, '%s'", rc, err);

    char file[800];
    snprintf(dir, sizeof dir, "%s/other", g_dir);
    TU_REQUIRE(mkdir(dir, 0700) == 0, "mkdir %s", dir);
    snprintf(file, sizeof file, "%s/keep", dir);
    FILE *f = fopen(file, "w");
    TU_REQUIRE(f != NULL, "fopen %s", file);
    fclose(f);
    rc = store_snapshot_copy(sn, dir, NULL, NULL, NULL, err, sizeof err);
    TU_CHECK(rc == -1 && strstr(err, "already exists") != NULL, "over a directory: rc %d, '%s'", rc, err);
    TU_CHECK(stat(file, &st) == 0, "the copy removed what was in %s", dir);
    snprintf(dir, sizeof dir, "%s/no/such/parent", g_dir);
    rc = store_snapshot_copy(sn, dir, NULL, NULL, NULL, err, sizeof err);
    TU_CHECK(rc == -1 && strstr(err, dir) != NULL, "under a missing parent: rc %d, '%s'", rc, err);
    store_snapshot_release(sn);
    store_snapshot_release(NULL);
}

/* A LevelDB database at path with a record in it, left open (*db) or
 * closed (db NULL): the files a copy writes. */
static void make_copy_files(const char *path, leveldb_t **db)
{
    leveldb_options_t *lo = leveldb_options_create();
    leveldb_options_set_create_if_missing(lo, 1);
    char *dberr = NULL;
    leveldb_t *d = leveldb_open(lo, path, &dberr);
    TU_REQUIRE(dberr == NULL && d != NULL, "leveldb_open %s: %s", path, dberr ? dberr : "?");
    leveldb_writeoptions_t *wo = leveldb_writeoptions_create();
    leveldb_put(d, wo, "k", 1, "v", 1, &dberr);
    TU_REQUIRE(dberr == NULL, "leveldb_put: %s", dberr ? dberr : "?");
    leveldb_writeoptions_destroy(wo);
    leveldb_options_destroy(lo);
    if (db != NULL)
        *db = d;
    else
        leveldb_close(d);
}

/* A copy cut short (its database closed, as a killed process's is) is
 * removed; one still open (its lock held) and one with a foreign file stay,
 * every file in them kept. */
static void test_snapshot_discard_partial(void)
{
    char err[1024] = "", dir[700], partial[720], file[800];
    struct stat st;
    snprintf(dir, sizeof dir, "%s/cut", g_dir);
    snprintf(partial, sizeof partial, "%s" STORE_COPY_PARTIAL, dir);
    snprintf(file, sizeof file, "%s/CURRENT", partial);
    TU_CHECK(store_copy_discard_partial(dir, err, sizeof err) == 0, "none there: %s", err);

    make_copy_files(partial, NULL);
    int rc = store_copy_discard_partial(dir, err, sizeof err);
    TU_CHECK(rc == 1, "a copy cut short: rc %d (%s)", rc, err);
    TU_CHECK(stat(partial, &st) != 0 && errno == ENOENT, "%s is still there", partial);

    leveldb_t *held = NULL;
    make_copy_files(partial, &held);
    rc = store_copy_discard_partial(dir, err, sizeof err);
    TU_CHECK(rc == -1 && strstr(err, partial) != NULL && strstr(err, "still making") != NULL,
             "a copy being made: rc %d, '%s'", rc, err);
    TU_CHECK(stat(file, &st) == 0, "a copy being made lost its files");
    leveldb_close(held);

    char foreign[800];
    snprintf(foreign, sizeof foreign, "%s/notes.txt", partial);
    FILE *f = fopen(foreign, "w");
    TU_REQUIRE(f != NULL, "fopen %s", foreign);
    fclose(f);
    rc = store_copy_discard_partial(dir, err, sizeof err);
    TU_CHECK(rc == -1 && strstr(err, "'notes.txt'") != NULL && strstr(err, "by hand") != NULL,
             "with a foreign file: rc %d, '%s'", rc, err);
    TU_CHECK(stat(file, &st) == 0 && stat(foreign, &st) == 0, "a directory with a foreign file lost files");
    TU_REQUIRE(unlink(foreign) == 0, "unlink %s", foreign);
    rc = store_copy_discard_partial(dir, err, sizeof err);
    TU_CHECK(rc == 1 && stat(partial, &st) != 0, "once closed and only a copy's: rc %d (%s)", rc, err);
}

/* The copy's check between its batches: the process dies there, as a
 * broker killed mid-copy (the first batch is written, unsynced). */
static int die_mid_copy(void *ctx, char *err, size_t errlen)
{
    kill(getpid(), SIGKILL);
    return -1;
}

/* A copy cut after its first batch and put in place anyway (its ".partial"
 * renamed by hand): the format record and the topic's counter are in it, most
 * of the topic log is not. Before, it opened and was served with the
 * messages missing under a counter that counted them; now store_open refuses
 * it as damaged. A whole copy opens (test_snapshot_copy_while_writing). */
static void test_snapshot_cut_copy_refused(void)
{
    store_t *s = OPEN_DEFAULT();
    static char payload[2048];
    memset(payload, 'p', sizeof payload - 1);
    for (int i = 0; i < 3000; i++) /* 6 MB in the topic log: more than one batch of the copy */
        SEND(s, "t", payload, 0, 0, T0, NULL);
    CLOSE(&s);
    char copy[700], partial[800], err[1024] = "";
    snprintf(copy, sizeof copy, "%s/copy", g_dir);
    snprintf(partial, sizeof partial, "%s.partial", copy);
    fflush(NULL);
    pid_t pid = fork();
    TU_REQUIRE(pid >= 0, "fork: %s", strerror(errno));
    if (pid == 0) {
        store_options_t o;
        opts_default(&o);
        store_t *c = NULL;
        if (store_open(&o, T0, &c, err, sizeof err) != 0)
            _exit(2);
        store_snapshot_t *sn = store_snapshot_take(c, err, sizeof err);
        if (sn == NULL)
            _exit(3);
        store_snapshot_copy(sn, copy, die_mid_copy, NULL, NULL, err, sizeof err);
        _exit(4);
    }
    int status = 0;
    TU_REQUIRE(waitpid(pid, &status, 0) == pid, "waitpid: %s", strerror(errno));
    TU_REQUIRE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL, "the copying child ended with status %d", status);
    TU_REQUIRE(rename(partial, copy) == 0, "rename %s: %s", partial, strerror(errno));
    store_options_t o;
    opts_default(&o);
    o.path = copy;
    o.create_if_missing = 0;
    int rc = store_open(&o, T0, &s, err, sizeof err);
    TU_CHECK(rc == STORE_OPEN_DAMAGED && strstr(err, "cut before it was whole") != NULL,
             "a copy cut after its first batch: rc %d \"%s\"", rc, err);
    if (rc == 0)
        store_close(s, NULL, 0);
}

/* Zero the last 30 bytes of the newest non-empty log of dir, as a cut or
 * overwritten end would: its name into log; its size. */
static long tear_newest_log(const char *dir, char *log, size_t loglen, int line)
{
    DIR *d = opendir(dir);
    TU_REQUIRE_AT(d != NULL, line, "opendir %s", dir);
    unsigned long long best = 0, number;
    long size = -1;
    char path[1200];
    struct stat st;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        if (logsync_log_number(e->d_name, &number) && (size < 0 || number > best) && stat(path, &st) == 0 &&
            st.st_size > 0) {
            best = number;
            size = (long)st.st_size;
            snprintf(log, loglen, "%.60s", e->d_name);
        }
    }
    closedir(d);
    TU_REQUIRE_AT(size > 40, line, "no log with records in %s", dir);
    snprintf(path, sizeof path, "%s/%s", dir, log);
    FILE *f = fopen(path, "r+b");
    TU_REQUIRE_AT(f != NULL && fseek(f, size - 30, SEEK_SET) == 0, line, "open %s", path);
    for (int i = 0; i < 30; i++)
        fputc(0, f);
    TU_REQUIRE_AT(fclose(f) == 0, line, "close %s", path);
    return size;
}

/* A copy of the default store (5 messages) at g_dir/name, into path. */
static void copy_of_five(const char *name, char *path, size_t pathlen)
{
    store_t *s = OPEN_DEFAULT();
    for (int i = 0; i < 5; i++)
        SEND(s, "t", "x", 0, 0, T0, NULL);
    snprintf(path, pathlen, "%s/%s", g_dir, name);
    SNAPSHOT_COPY_TO(s, path);
    CLOSE(&s);
}

/* The marker text of copies made before the list (version 1). */
static const char v1_mark[] =
    "A whole copy made by hourglass-broker's BACKUP: every file of it was written and fsynced before it was\n"
    "named, so its write-ahead log has no torn end; hourglass-broker --check-data calls one damage.\n"
    "A broker started on this directory removes this file (the directory is then live).\n";

/* Replace dir's STORE_COPY_WHOLE with text. */
static void write_mark(const char *dir, const char *text, int line)
{
    char mark[800];
    snprintf(mark, sizeof mark, "%s/" STORE_COPY_WHOLE, dir);
    FILE *f = fopen(mark, "w");
    TU_REQUIRE_AT(f != NULL && fputs(text, f) >= 0 && fclose(f) == 0, line, "write %s", mark);
}

/* store_check_dir of the copy at path (err, r): its return. */
static int check_copy(const char *path, store_dir_check_t *r, char *err, size_t errlen)
{
    store_options_t o;
    opts_default(&o);
    o.path = path;
    o.create_if_missing = 0;
    return store_check_dir(&o, T0, r, err, errlen);
}

/* A whole copy holds STORE_COPY_WHOLE, which lists its files. Its log cut or
 * overwritten at the end (a torn end, which a whole copy never has) was "ok"
 * before, as a power cut's torn end is in a live directory (here: the one
 * batch of a small copy torn, nothing left, "ok: 0 messages"); now
 * store_check_dir calls it damage, and writes nothing: the list names the
 * log and its CRC-32C; with a marker of version 1 (no list) the torn end
 * is, naming the log, the offset and the bytes. */
static void test_snapshot_whole_copy_torn_is_damage(void)
{
    char copy[700], mark[800], log[64], err[2048] = "";
    copy_of_five("copy", copy, sizeof copy);
    snprintf(mark, sizeof mark, "%s/" STORE_COPY_WHOLE, copy);
    struct stat st;
    TU_CHECK(stat(mark, &st) == 0 && S_ISREG(st.st_mode) && st.st_size > 0, "the copy has no %s", mark);

    store_dir_check_t r;
    int rc = check_copy(copy, &r, err, sizeof err);
    TU_CHECK(rc == 0 && r.whole_copy && r.whole_listed && r.whole_files >= 4 && !r.torn,
             "a whole copy: rc %d, whole_copy %d, listed %d (%u files), torn %d: %s", rc, r.whole_copy, r.whole_listed,
             r.whole_files, r.torn, err);
    CHECK_EQ_U64(r.counts.messages, 5);

    long size = tear_newest_log(copy, log, sizeof log, __LINE__);
    uint64_t before = dir_digest(copy);
    rc = check_copy(copy, &r, err, sizeof err);
    TU_CHECK(rc == STORE_OPEN_DAMAGED && r.whole_copy && r.whole_listed && !r.torn,
             "a torn whole copy: rc %d, whole_copy %d, torn %d: %s", rc, r.whole_copy, r.torn, err);
    TU_CHECK(strstr(err, "CRC-32C") != NULL && strstr(err, log) != NULL && strstr(err, copy) != NULL &&
                 strstr(err, ".check-") == NULL,
             "the error does not name the copy, its log and its checksum: \"%s\"", err);
    CHECK_EQ_U64(dir_digest(copy), before);

    write_mark(copy, v1_mark, __LINE__); /* a copy made before the list */
    rc = check_copy(copy, &r, err, sizeof err);
    TU_CHECK(rc == STORE_OPEN_DAMAGED && r.whole_copy && !r.whole_listed && r.torn,
             "a torn whole copy, version 1 mark: rc %d, whole_copy %d, listed %d, torn %d: %s", rc, r.whole_copy,
             r.whole_listed, r.torn, err);
    TU_CHECK(strstr(err, "never has a torn end") != NULL && strstr(err, log) != NULL && strstr(err, copy) != NULL &&
                 strstr(err, ".check-") == NULL,
             "the error does not name the copy, its log and why: \"%s\"", err);
    char at[96];
    snprintf(at, sizeof at, "%llu bytes at offset %llu", (unsigned long long)r.torn_bytes,
             (unsigned long long)r.torn_offset);
    TU_CHECK(strstr(err, at) != NULL && r.torn_offset + r.torn_bytes == (uint64_t)size, "want \"%s\" in \"%s\"", at,
             err);
    TU_CHECK(stat(mark, &st) == 0, "the check removed %s", mark);
}

/* Truncate the newest log of dir (its name into log) to 0 bytes: a record
 * boundary, which LevelDB cannot tell from a log that never had a record. */
static void cut_log_to_zero(const char *dir, char *log, size_t loglen, int line)
{
    DIR *d = opendir(dir);
    TU_REQUIRE_AT(d != NULL, line, "opendir %s", dir);
    unsigned long long best = 0, number;
    struct dirent *e;
    log[0] = '\0';
    while ((e = readdir(d)) != NULL)
        if (logsync_log_number(e->d_name, &number) && (log[0] == '\0' || number > best)) {
            best = number;
            snprintf(log, loglen, "%.60s", e->d_name);
        }
    closedir(d);
    char path[1200];
    snprintf(path, sizeof path, "%s/%s", dir, log);
    TU_REQUIRE_AT(log[0] != '\0' && truncate(path, 0) == 0, line, "truncate %s: %s", path, strerror(errno));
}

/* A whole copy whose log is cut on a record boundary (here: before its only
 * record, the copy's one batch), or lost whole (LevelDB does not list its
 * logs), was "ok: 0 messages" before: nothing in LevelDB's files says a
 * record is missing. Its list says how long the log was: damage, naming the
 * log, the size listed and the size found. */
static void test_snapshot_whole_copy_cut_on_boundary(void)
{
    char copy[700], log[64], err[2048] = "", want[256];
    store_dir_check_t r;
    copy_of_five("boundary", copy, sizeof copy);
    cut_log_to_zero(copy, log, sizeof log, __LINE__);
    uint64_t before = dir_digest(copy);
    int rc = check_copy(copy, &r, err, sizeof err);
    snprintf(want, sizeof want, "lists %s with ", log);
    TU_CHECK(rc == STORE_OPEN_DAMAGED && strstr(err, want) != NULL && strstr(err, "but it has 0: truncated") != NULL &&
                 strstr(err, copy) != NULL,
             "a copy whose log was cut on a record boundary: rc %d (messages %llu): \"%s\"", rc,
             (unsigned long long)r.counts.messages, err);
    CHECK_EQ_U64(dir_digest(copy), before);

    copy_of_five("lost-log", copy, sizeof copy);
    cut_log_to_zero(copy, log, sizeof log, __LINE__);
    char path[1200];
    snprintf(path, sizeof path, "%s/%s", copy, log);
    TU_REQUIRE(unlink(path) == 0, "unlink %s", path);
    rc = check_copy(copy, &r, err, sizeof err);
    TU_CHECK(rc == STORE_OPEN_DAMAGED && strstr(err, want) != NULL && strstr(err, "but it is missing") != NULL,
             "a copy that lost its log: rc %d (messages %llu): \"%s\"", rc, (unsigned long long)r.counts.messages, err);

    copy_of_five("lost-current", copy, sizeof copy); /* checked before the check looks for CURRENT */
    snprintf(path, sizeof path, "%s/CURRENT", copy);
    TU_REQUIRE(unlink(path) == 0, "unlink %s", path);
    rc = check_copy(copy, &r, err, sizeof err);
    TU_CHECK(rc == STORE_OPEN_DAMAGED && strstr(err, "lists CURRENT with 16 bytes, but it is missing") != NULL,
             "a copy that lost its CURRENT: rc %d \"%s\"", rc, err);
}

/* A file the list does not name, a list garbled or cut short: damage, named;
 * a version-1 marker (no list) on a whole copy: ok, as before the list. */
static void test_snapshot_whole_copy_list_problems(void)
{
    char copy[700], path[1200], err[2048] = "";
    store_dir_check_t r;
    copy_of_five("extra", copy, sizeof copy);
    snprintf(path, sizeof path, "%s/000999.log", copy);
    FILE *f = fopen(path, "w");
    TU_REQUIRE(f != NULL && fclose(f) == 0, "create %s", path);
    int rc = check_copy(copy, &r, err, sizeof err);
    TU_CHECK(rc == STORE_OPEN_DAMAGED && strstr(err, "does not list 000999.log") != NULL,
             "a file the list does not name: rc %d \"%s\"", rc, err);
    TU_REQUIRE(unlink(path) == 0, "unlink %s", path);
    rc = check_copy(copy, &r, err, sizeof err);
    TU_CHECK(rc == 0 && r.whole_listed, "the same copy without the extra file: rc %d \"%s\"", rc, err);

    char mark[800], text[8192];
    snprintf(mark, sizeof mark, "%s/" STORE_COPY_WHOLE, copy);
    f = fopen(mark, "r");
    TU_REQUIRE(f != NULL, "open %s", mark);
    size_t n = fread(text, 1, sizeof text - 1, f);
    fclose(f);
    text[n] = '\0';
    TU_CHECK(strncmp(text, "hourglass-broker BACKUP-WHOLE 2\n", 32) == 0 && strstr(text, "\nfile CURRENT ") != NULL &&
                 strstr(text, "\nend ") != NULL,
             "the marker is not a version line, a list and an end: \"%s\"", text);

    char moved[8192]; /* the first file line moved to the end: still the same list */
    const char *first = strstr(text, "\nfile "), *after = first != NULL ? strchr(first + 1, '\n') : NULL;
    const char *end_line = strstr(text, "\nend ");
    TU_REQUIRE(first != NULL && after != NULL && end_line != NULL && after < end_line, "no file lines in \"%s\"", text);
    snprintf(moved, sizeof moved, "%.*s%.*s%.*s%s", (int)(first - text), text, (int)(end_line - after), after,
             (int)(after - first), first, end_line);
    write_mark(copy, moved, __LINE__);
    rc = check_copy(copy, &r, err, sizeof err);
    TU_CHECK(rc == 0 && r.whole_listed, "a list out of order: rc %d \"%s\" for \"%s\"", rc, err, moved);

    write_mark(copy, "hourglass-broker BACKUP-WHOLE 2\nfile CURRENT sixteen 0\n", __LINE__);
    rc = check_copy(copy, &r, err, sizeof err);
    TU_CHECK(rc == STORE_OPEN_DAMAGED && strstr(err, "garbled: line 2") != NULL &&
                 strstr(err, STORE_COPY_WHOLE) != NULL,
             "a garbled marker: rc %d \"%s\"", rc, err);
    char *end = strstr(text, "\nend ");
    end[1] = '\0';
    write_mark(copy, text, __LINE__);
    rc = check_copy(copy, &r, err, sizeof err);
    TU_CHECK(rc == STORE_OPEN_DAMAGED && strstr(err, "cut short") != NULL, "a marker without its end: rc %d \"%s\"", rc,
             err);
    write_mark(copy, "\x01\x02 not a marker\n", __LINE__);
    rc = check_copy(copy, &r, err, sizeof err);
    TU_CHECK(rc == STORE_OPEN_DAMAGED && strstr(err, "garbled: its first line") != NULL,
             "a marker of other bytes: rc %d \"%s\"", rc, err);
    write_mark(copy, v1_mark, __LINE__);
    rc = check_copy(copy, &r, err, sizeof err);
    TU_CHECK(rc == 0 && r.whole_copy && !r.whole_listed && r.counts.messages == 5,
             "a whole copy with a version-1 marker: rc %d, whole_copy %d, listed %d: \"%s\"", rc, r.whole_copy,
             r.whole_listed, err);
}

/* A store big enough that its copy holds a table (the copy's write buffer
 * is 32 MiB): a copy whose table is removed is damage, named by the list. */
static void test_snapshot_whole_copy_table_removed(void)
{
    store_t *s = OPEN_DEFAULT();
    size_t len = 200 * 1024;
    char *payload = xmalloc(len), err[2048] = "";
    uint64_t id, due, x = 88172645463325252ULL;
    for (int i = 0; i < 200; i++) {
        for (size_t j = 0; j < len; j++) { /* incompressible: the copy's table must be a real one */
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            payload[j] = (char)x;
        }
        REQUIRE_OK(send_raw(s, "t", 1, "k", 1, payload, len, 0, 0, T0, &id, &due, err, sizeof err), err);
        REQUIRE_OK(store_commit(s, err, sizeof err), err);
    }
    free(payload);
    char copy[700];
    snprintf(copy, sizeof copy, "%s/big", g_dir);
    SNAPSHOT_COPY_TO(s, copy);
    CLOSE(&s);
    DIR *d = opendir(copy);
    TU_REQUIRE(d != NULL, "opendir %s", copy);
    char table[300] = "";
    struct dirent *e;
    while ((e = readdir(d)) != NULL)
        if (strlen(e->d_name) > 4 && strcmp(e->d_name + strlen(e->d_name) - 4, ".ldb") == 0)
            snprintf(table, sizeof table, "%s", e->d_name);
    closedir(d);
    TU_REQUIRE(table[0] != '\0', "the copy %s holds no table", copy);
    char path[1200], want[400];
    snprintf(path, sizeof path, "%s/%s", copy, table);
    TU_REQUIRE(unlink(path) == 0, "unlink %s", path);
    store_dir_check_t r;
    int rc = check_copy(copy, &r, err, sizeof err);
    snprintf(want, sizeof want, "lists %s with ", table);
    TU_CHECK(rc == STORE_OPEN_DAMAGED && strstr(err, want) != NULL && strstr(err, "but it is missing") != NULL,
             "a copy that lost its table %s: rc %d \"%s\"", table, rc, err);
}

/* store_open of a marked copy that is damaged (cut on a record boundary, a
 * torn end under a version-1 marker) removed the mark and opened what was
 * left before (0 messages, or the torn end cut with a warning). Now it
 * refuses, STORE_OPEN_DAMAGED, saying what and how to go on, and changes
 * nothing; once the operator deletes STORE_COPY_WHOLE it opens as a live
 * directory (the torn end cut as after a power cut). */
static void test_snapshot_damaged_copy_not_opened(void)
{
    char copy[700], mark[800], log[64], err[2048] = "";
    store_options_t o;
    opts_default(&o);
    o.create_if_missing = 0;
    store_t *s = NULL;
    copy_of_five("refused", copy, sizeof copy);
    snprintf(mark, sizeof mark, "%s/" STORE_COPY_WHOLE, copy);
    o.path = copy;
    cut_log_to_zero(copy, log, sizeof log, __LINE__);
    uint64_t before = dir_digest(copy);
    int rc = store_open(&o, T0, &s, err, sizeof err);
    TU_CHECK(rc == STORE_OPEN_DAMAGED && strstr(err, log) != NULL && strstr(err, "truncated") != NULL &&
                 strstr(err, "restore another copy") != NULL && strstr(err, "delete") != NULL &&
                 strstr(err, mark) != NULL,
             "a marked copy cut on a boundary opened: rc %d \"%s\"", rc, err);
    if (rc == 0)
        store_close(s, NULL, 0);
    CHECK_EQ_U64(dir_digest(copy), before);
    TU_REQUIRE(unlink(mark) == 0, "unlink %s", mark);
    rc = store_open(&o, T0, &s, err, sizeof err);
    TU_CHECK(rc == 0, "the same copy without its mark: rc %d \"%s\"", rc, err);
    if (rc == 0)
        store_close(s, NULL, 0);

    copy_of_five("refused-v1", copy, sizeof copy);
    snprintf(mark, sizeof mark, "%s/" STORE_COPY_WHOLE, copy);
    o.path = copy;
    write_mark(copy, v1_mark, __LINE__);
    tear_newest_log(copy, log, sizeof log, __LINE__);
    before = dir_digest(copy);
    rc = store_open(&o, T0, &s, err, sizeof err);
    TU_CHECK(rc == STORE_OPEN_DAMAGED && strstr(err, "never has a torn end") != NULL && strstr(err, log) != NULL &&
                 strstr(err, "restore another copy") != NULL,
             "a torn copy with a version-1 mark opened: rc %d \"%s\"", rc, err);
    if (rc == 0)
        store_close(s, NULL, 0);
    CHECK_EQ_U64(dir_digest(copy), before);
    TU_REQUIRE(unlink(mark) == 0, "unlink %s", mark);
    rc = store_open(&o, T0, &s, err, sizeof err);
    TU_CHECK(rc == 0 && strstr(store_open_note(s), "torn write") != NULL,
             "the torn copy without its mark: rc %d \"%s\"", rc, err);
    if (rc == 0)
        store_close(s, NULL, 0);

    /* A marked copy that lost its CURRENT: the list names it, as --check-data says (before: LevelDB's "no
     * CURRENT file" refusal of a live directory, with a live directory's remedy). */
    copy_of_five("refused-current", copy, sizeof copy);
    snprintf(mark, sizeof mark, "%s/" STORE_COPY_WHOLE, copy);
    o.path = copy;
    char current[800];
    snprintf(current, sizeof current, "%s/CURRENT", copy);
    TU_REQUIRE(unlink(current) == 0, "unlink %s", current);
    before = dir_digest(copy);
    rc = store_open(&o, T0, &s, err, sizeof err);
    TU_CHECK(rc == STORE_OPEN_DAMAGED && strstr(err, "lists CURRENT with 16 bytes, but it is missing") != NULL &&
                 strstr(err, "restore another copy (without its CURRENT file") != NULL && strstr(err, mark) != NULL &&
                 strstr(err, "no CURRENT file") == NULL,
             "a marked copy without CURRENT: rc %d \"%s\"", rc, err);
    if (rc == 0)
        store_close(s, NULL, 0);
    CHECK_EQ_U64(dir_digest(copy), before);
}

/* CRC-32C of the standard check string (RFC 3720's test vector family). */
static void test_snapshot_crc32c(void)
{
    TU_CHECK(store_crc32c("123456789", 9) == 0xe3069283u, "crc32c(\"123456789\") = %08x", store_crc32c("123456789", 9));
    char zeros[32] = { 0 };
    TU_CHECK(store_crc32c(zeros, 32) == 0x8a9136aau, "crc32c(32 zeros) = %08x", store_crc32c(zeros, 32));
    TU_CHECK(store_crc32c("", 0) == 0, "crc32c(\"\") = %08x", store_crc32c("", 0));
    /* every length to 300 and every start within a word, against the bit-by-bit definition */
    static unsigned char bytes[320];
    for (size_t i = 0; i < sizeof bytes; i++)
        bytes[i] = (unsigned char)(i * 167 + 13);
    int wrong = 0;
    for (size_t start = 0; start < 8; start++) {
        for (size_t n = 0; n <= 300; n++) {
            uint32_t c = 0xffffffffu;
            for (size_t i = 0; i < n; i++) {
                c ^= bytes[start + i];
                for (int k = 0; k < 8; k++)
                    c = (c >> 1) ^ (0x82f63b78u & (0u - (c & 1u)));
            }
            wrong += store_crc32c(bytes + start, n) != ~c;
        }
    }
    TU_CHECK(wrong == 0, "%d of 2 408 lengths and starts differ from the bitwise CRC-32C", wrong);
}

/* Restoring a whole copy: store_open removes STORE_COPY_WHOLE before it
 * writes, so the directory is live, and a torn end a crash leaves in it
 * later is a power cut's: "ok", with what a start would cut. */
static void test_snapshot_restored_copy_is_live(void)
{
    char copy[700], mark[800], log[64], err[2048] = "";
    copy_of_five("restored", copy, sizeof copy);
    snprintf(mark, sizeof mark, "%s/" STORE_COPY_WHOLE, copy);
    fflush(NULL);
    pid_t pid = fork();
    TU_REQUIRE(pid >= 0, "fork: %s", strerror(errno));
    if (pid == 0) { /* a broker started on the copy, killed after more sends */
        store_options_t o;
        opts_default(&o);
        o.path = copy;
        store_t *c = NULL;
        uint64_t id, due;
        struct stat st;
        if (store_open(&o, T0, &c, err, sizeof err) != 0)
            _exit(2);
        if (stat(mark, &st) == 0)
            _exit(3);
        for (int i = 0; i < 5; i++)
            if (send_raw(c, "t", 1, NULL, 0, "after", 5, 0, 0, T0, &id, &due, err, sizeof err) != 0 ||
                store_commit(c, err, sizeof err) != 0)
                _exit(4);
        kill(getpid(), SIGKILL);
        _exit(5);
    }
    int status = 0;
    TU_REQUIRE(waitpid(pid, &status, 0) == pid, "waitpid: %s", strerror(errno));
    TU_REQUIRE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL,
               "the store opened on the copy ended with status %d (3: it kept %s)", WEXITSTATUS(status), mark);
    tear_newest_log(copy, log, sizeof log, __LINE__);
    store_options_t o;
    opts_default(&o);
    o.path = copy;
    o.create_if_missing = 0;
    store_dir_check_t r;
    int rc = store_check_dir(&o, T0, &r, err, sizeof err);
    TU_CHECK(rc == 0 && !r.whole_copy && r.torn && strcmp(r.torn_log, log) == 0,
             "a restored copy with a torn end: rc %d, whole_copy %d, torn %d in %s: %s", rc, r.whole_copy, r.torn,
             r.torn_log, err);
    CHECK_EQ_U64(r.counts.messages, 10); /* what LevelDB's cut lost, the view's open redid from the commit log */
}

/* A copy a crash stopped after STORE_COPY_WHOLE was written but before the
 * rename is still removed as a copy cut short. */
static void test_snapshot_discard_partial_with_mark(void)
{
    char dir[700], partial[720], mark[800], err[1024] = "";
    snprintf(dir, sizeof dir, "%s/marked", g_dir);
    snprintf(partial, sizeof partial, "%s" STORE_COPY_PARTIAL, dir);
    make_copy_files(partial, NULL);
    snprintf(mark, sizeof mark, "%s/" STORE_COPY_WHOLE, partial);
    FILE *f = fopen(mark, "w");
    TU_REQUIRE(f != NULL, "fopen %s", mark);
    fclose(f);
    int rc = store_copy_discard_partial(dir, err, sizeof err);
    struct stat st;
    TU_CHECK(rc == 1 && stat(partial, &st) != 0 && errno == ENOENT, "a marked .partial: rc %d (%s)", rc, err);
}

static const tu_test_t snapshot_tests[] = {
    { "a copy while the owner writes is the store as of the snapshot", test_snapshot_copy_while_writing },
    { "leases held in memory come again from a copy", test_snapshot_unwritten_leases },
    { "a copy holds no commit log and opens with an empty one", test_snapshot_copy_without_log_opens },
    { "a copy stopped, failed or over an existing directory", test_snapshot_copy_refusals },
    { "a copy a crash cut short is removed, one being made is not", test_snapshot_discard_partial },
    { "a copy cut short and put in place is refused", test_snapshot_cut_copy_refused },
    { "a torn log end in a whole copy is damage", test_snapshot_whole_copy_torn_is_damage },
    { "a restored copy is live: its torn end is a power cut's", test_snapshot_restored_copy_is_live },
    { "a marked copy a crash left before its rename is removed", test_snapshot_discard_partial_with_mark },
    { "a whole copy cut on a record boundary or without its log is damage", test_snapshot_whole_copy_cut_on_boundary },
    { "a whole copy's list: a file not named, a garbled marker, version 1", test_snapshot_whole_copy_list_problems },
    { "a whole copy without one of its tables is damage", test_snapshot_whole_copy_table_removed },
    { "a damaged whole copy is not opened until its mark is deleted", test_snapshot_damaged_copy_not_opened },
    { "CRC-32C", test_snapshot_crc32c },
    { NULL, NULL },
};

static const tu_suite_t suites[] = {
    { "snapshot", snapshot_tests },
};

int main(int argc, char **argv)
{
    return tu_suites_main(argc, argv, suites, sizeof suites / sizeof suites[0], store_fixture_setup,
                          store_fixture_teardown);
}
