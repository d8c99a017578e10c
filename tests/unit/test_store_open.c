/*
 * tests/unit/test_store_open.c — CUnit suite "open" of the store package
 * behind levels/store.h (DESIGN §1–3), through its public calls (and raw
 * LevelDB writes where a test corrupts a directory on purpose): creating and
 * reopening a store directory, every refusal (a second open, a foreign,
 * missing or damaged directory, another format version, a changed level
 * table), the format upgrades, what store_check and store_check_dir find
 * in a damaged directory, and the reopen after a crash whose power cut lost
 * LevelDB's writes past the commit log's checkpoint (a hole in its log; a CQ
 * head move made again by the redo, the file below it still there).
 *
 * The fixture (tests/helpers/store_fixture.h): every test gets a fresh temp
 * directory and drives the store with an injected clock, every now_ms passed
 * explicitly from T0; after every step that mutates, store_check() must
 * return 0. Run alone: ./tests/unit/test_store_open [suite [test]].
 */
#include "levels/cq.h"
#include "levels/keys.h"
#include "levels/logsync.h"
#include "levels/slot.h"
#include "levels/store.h"
#include "tests/helpers/store_fixture.h"
#include "tests/helpers/store_probe.h"
#include "tests/helpers/testutil.h"

#include <CUnit/CUnit.h>
#include <errno.h>
#include <inttypes.h>
#include <leveldb/c.h>
#include <stdio.h>
#include <stdlib.h>
#include <dirent.h>
#include <signal.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

/* Everything a store holds survives close + reopen (sync = 1 here: the one
 * test that fsyncs). */
static void test_reopen_keeps_everything(void)
{
    store_options_t o;
    opts_default(&o);
    o.sync = 1;
    store_t *s = OPEN(&o);
    uint64_t now = T0;
    msg_owned_t m[16];

    GROUP_CREATE(s, "g1", "orders", 1, now);
    uint64_t a = SEND(s, "orders", "A", 0, 0, now, NULL);
    uint64_t b = SEND(s, "orders", "B", 0, 0, now, NULL);
    uint64_t c = SEND(s, "orders", "C", 0, 0, now, NULL);
    uint64_t d = SEND(s, "orders", "D", 0, 0, now, NULL);
    GROUP_CREATE(s, "g2", "orders", 0, now); /* from now: sees none of A..D */
    uint64_t e_due, f_due, g_due;
    uint64_t e = SEND(s, "orders", "E", 3, 0, now, &e_due);
    uint64_t f = SEND(s, "orders", "F", 3, 0, now + 1, &f_due);
    uint64_t g = SEND(s, "orders", "G", 0, 25 * MIN, now, &g_due);
    CHECK_EQ_U64(e_due, now + 10 * SEC);
    CHECK_EQ_U64(g_due, now + 25 * MIN);

    /* g1: A fails to level 1 and becomes retry-ready, B goes to the DLQ, C stays
     * leased, D fails to level 18 (a delayed retry). */
    TU_REQUIRE(LEASE_N(s, "g1", "orders", 2, LEASE, now, m) == 2, "lease A, B");
    TU_CHECK(m[0].m.id == a && m[1].m.id == b, "leased %" PRIu64 ", %" PRIu64, m[0].m.id, m[1].m.id);
    free_msgs(m, 2);
    FAIL_LEVEL(s, "g1", a, 1, "try again", now, NULL);
    FAIL_DLQ(s, "g1", b, "boom", now);
    TU_REQUIRE(LEASE_N(s, "g1", "orders", 1, LEASE, now, m) == 1, "lease C");
    CHECK_EQ_U64(m[0].m.id, c);
    free_msgs(m, 1);
    TU_REQUIRE(LEASE_N(s, "g1", "orders", 1, LEASE, now, m) == 1, "lease D");
    CHECK_EQ_U64(m[0].m.id, d);
    free_msgs(m, 1);
    FAIL_LEVEL(s, "g1", d, 18, "later", now, NULL);
    TU_CHECK(MOVE(s, now + SEC, 100, NULL) == 1, "A's retry should move at +1s");
    CHECK_STORE(s);
    CHECK_COUNTS(s, "g1", 1, 0, 1, 1, 1, 1);
    CHECK_COUNTS(s, "g2", 0, 0, 0, 0, 0, 0);

    uint64_t c_deadline = 0;
    char err[512] = "";
    TU_REQUIRE(probe_lease_get(s, "g1", 2, c, NULL, &c_deadline, err, sizeof err) == 1, "lease C: %s", err);
    store_level_info_t before[LVL_MAX_LEVELS + 1];
    for (int l = 1; l <= 18; l++)
        store_level_info(s, l, &before[l]);
    uint64_t next_due = store_next_due(s);
    store_group_info_t g1_before = GINFO(s, "g1"), g2_before = GINFO(s, "g2");
    store_topic_info_t ti_before;
    TU_REQUIRE(store_topic_info(s, "orders", 6, &ti_before) == 1, "topic orders exists");
    uint64_t max_id = g;
    REQUIRE_OK(store_group_create(s, "mr", 2, "orders", 6, 0, 3, now, err, sizeof err), err);
    CLOSE(&s);

    o.create_if_missing = 0; /* an existing store opens without it */
    s = OPEN(&o);
    o.create_if_missing = 1;
    CHECK_EQ_U64(GINFO(s, "mr").max_reconsume, 3);
    CHECK_EQ_U64(GINFO(s, "g1").max_reconsume, STORE_DEFAULT_MAX_RECONSUME);
    CHECK_STORE(s);
    for (int l = 1; l <= 18; l++) {
        store_level_info_t li;
        store_level_info(s, l, &li);
        TU_CHECK(li.depth == before[l].depth && li.head_due_ms == before[l].head_due_ms,
                 "level %d after reopen: depth %" PRIu64 " head %" PRIu64 ", before %" PRIu64 " %" PRIu64, l, li.depth,
                 li.head_due_ms, before[l].depth, before[l].head_due_ms);
    }
    CHECK_EQ_U64(level_depth(s, 3), 2);
    CHECK_EQ_U64(level_head(s, 3), e_due);
    CHECK_EQ_U64(level_depth(s, 15), 1);
    CHECK_EQ_U64(level_depth(s, 18), 1);
    CHECK_EQ_U64(store_next_due(s), next_due);
    store_group_info_t g1_after = GINFO(s, "g1"), g2_after = GINFO(s, "g2");
    TU_CHECK(memcmp(&g1_after, &g1_before, sizeof g1_after) == 0, "g1's info changed across reopen");
    TU_CHECK(memcmp(&g2_after, &g2_before, sizeof g2_after) == 0, "g2's info changed across reopen");
    TU_CHECK(strcmp(g1_after.topic, "orders") == 0, "g1 topic %s", g1_after.topic);
    store_topic_info_t ti;
    TU_REQUIRE(store_topic_info(s, "orders", 6, &ti) == 1, "topic orders after reopen");
    TU_CHECK(ti.appended == ti_before.appended && ti.retained == ti_before.retained && ti.groups == 3,
             "topic: appended %" PRIu64 " retained %" PRIu64 " groups %d", ti.appended, ti.retained, ti.groups);
    CHECK_EQ_U64(ti.appended, 4);

    /* The lease survives with its deadline and content. */
    msg_owned_t lm = { 0 };
    uint64_t dl = 0;
    TU_REQUIRE(probe_lease_get(s, "g1", 2, c, &lm, &dl, err, sizeof err) == 1, "lease C after reopen: %s", err);
    CHECK_EQ_U64(dl, c_deadline);
    TU_CHECK(msg_str_is(&lm.m.payload, "C") && msg_str_is(&lm.m.topic, "orders"), "lease C content");
    msg_owned_free(&lm);

    /* The DLQ keeps B with its reason. */
    int n = -1;
    REQUIRE_OK(store_dlq_list(s, "g1", 2, 0, 10, m, &n, err, sizeof err), err);
    TU_REQUIRE(n == 1, "DLQ after reopen holds %d", n);
    CHECK_EQ_U64(m[0].m.id, b);
    TU_CHECK(msg_str_is(&m[0].m.reason, "boom"), "DLQ reason \"%.*s\"", (int)m[0].m.reason.len, m[0].m.reason.ptr);
    CHECK_EQ_U64(m[0].m.stamp_ms, now);
    free_msgs(m, n);

    /* The retry-ready A comes first, then nothing (the cursor is past D). */
    n = LEASE_N(s, "g1", "orders", 10, LEASE, now + 2 * SEC, m);
    TU_REQUIRE(n == 1, "g1 leased %d after reopen, want 1 (A's retry)", n);
    CHECK_EQ_U64(m[0].m.id, a);
    CHECK_EQ_U64(m[0].m.reconsume, 1);
    TU_CHECK(msg_str_is(&m[0].m.reason, "try again"), "A's reason kept");
    free_msgs(m, n);
    CHECK_STORE(s);

    /* Ids continue: never reused after reopen. */
    uint64_t h = SEND(s, "orders", "H", 0, 0, now + 3 * SEC, NULL);
    TU_CHECK(h > max_id && h > e && h > f, "id %" PRIu64 " after reopen is not above %" PRIu64, h, max_id);
    n = LEASE_N(s, "g2", "orders", 10, LEASE, now + 3 * SEC, m);
    TU_REQUIRE(n == 1, "g2 (from now) leased %d, want only H", n);
    CHECK_EQ_U64(m[0].m.id, h);
    free_msgs(m, n);

    /* E and F come due at +10s; the chained G arrives exactly at send + 25m,
     * across another reopen between its hops. */
    CHECK_EQ_U64(store_next_due(s), now + 10 * SEC);
    int ready = -1;
    TU_CHECK(MOVE(s, now + 20 * MIN, 100, &ready) == 3 && ready == 2, "E, F and G's first hop (ready %d)", ready);
    CHECK_EQ_U64(level_head(s, 9), now + 25 * MIN);
    CLOSE(&s);
    s = OPEN(&o);
    CHECK_EQ_U64(level_depth(s, 9), 1);
    CHECK_EQ_U64(level_depth(s, 3), 0);
    CHECK_EQ_U64(store_next_due(s), now + 25 * MIN);
    TU_CHECK(MOVE(s, now + 25 * MIN - 1, 100, &ready) == 0, "G is not due before +25m");
    TU_CHECK(MOVE(s, now + 25 * MIN, 100, &ready) == 1 && ready == 1, "G ready at +25m (ready %d)", ready);
    n = LEASE_N(s, "g2", "orders", 10, LEASE, now + 25 * MIN, m);
    TU_CHECK(n == 3, "g2 leased %d", n);
    int seen_g = 0;
    for (int i = 0; i < n; i++)
        if (m[i].m.id == g) {
            seen_g = 1;
            CHECK_EQ_U64(m[i].m.due_ms, now + 25 * MIN);
        }
    TU_CHECK(seen_g, "G was not delivered after reopen");
    free_msgs(m, n);
    CHECK_STORE(s);
    uint64_t i2 = SEND(s, "orders", "I", 0, 0, now + 26 * MIN, NULL);
    CLOSE(&s);
    s = OPEN(&o);
    uint64_t j = SEND(s, "orders", "J", 0, 0, now + 27 * MIN, NULL);
    TU_CHECK(j > i2, "id %" PRIu64 " after the second reopen is not above %" PRIu64, j, i2);
    CHECK_STORE(s);
}

static void test_refuse_second_open(void)
{
    store_t *s = OPEN_DEFAULT();
    store_options_t o;
    opts_default(&o);
    store_t *s2 = NULL;
    char err[512] = "";
    int rc = store_open(&o, T0, &s2, err, sizeof err);
    TU_CHECK(rc == STORE_OPEN_IN_USE, "a second open: rc %d, want STORE_OPEN_IN_USE (err \"%s\")", rc, err);
    CHECK_REFUSAL(-1, err, "in use", g_data);
    TU_CHECK(s2 == NULL, "a refused open must leave *out NULL");
    if (s2 != NULL)
        store_close(s2, NULL, 0);
    /* The first store still works, and after it closes the directory opens. */
    SEND(s, "t", "x", 0, 0, T0, NULL);
    CHECK_STORE(s);
    CLOSE(&s);
    s = OPEN(&o);
    store_topic_info_t ti;
    TU_CHECK(store_topic_info(s, "t", 1, &ti) == 1 && ti.appended == 1, "the message survived");
}

static void test_refuse_foreign_dir(void)
{
    char file[700], err[512] = "";
    TU_REQUIRE(mkdir(g_data, 0700) == 0, "mkdir %s: %s", g_data, strerror(errno));
    snprintf(file, sizeof file, "%s/notes.txt", g_data);
    TU_REQUIRE(write_file(file, "mine\n") == 0, "write %s", file);
    store_options_t o;
    opts_default(&o);
    store_t *s = NULL;
    int rc = store_open(&o, T0, &s, err, sizeof err);
    CHECK_REFUSAL(rc, err, "not a Hourglass data directory", g_data);
    TU_CHECK(s == NULL, "*out must stay NULL");
    /* Nothing was touched: still exactly one file, no LevelDB files. */
    char cur[700];
    snprintf(cur, sizeof cur, "%s/CURRENT", g_data);
    struct stat st;
    TU_CHECK(stat(cur, &st) != 0, "a CURRENT file was created in a foreign directory");
    TU_CHECK(stat(file, &st) == 0 && st.st_size == 5, "the foreign file was changed");
}

/* A crash while LevelDB created the database (LOCK, LOG and a MANIFEST
 * written, no CURRENT yet) leaves a directory that is created again. */
static void test_interrupted_creation(void)
{
    TU_REQUIRE(mkdir(g_data, 0700) == 0, "mkdir %s: %s", g_data, strerror(errno));
    static const char *const leftovers[] = { "LOCK", "LOG", "MANIFEST-000001", "000002.dbtmp" };
    for (size_t i = 0; i < sizeof leftovers / sizeof leftovers[0]; i++) {
        char file[700];
        snprintf(file, sizeof file, "%s/%s", g_data, leftovers[i]);
        TU_REQUIRE(write_file(file, "") == 0, "write %s", file);
    }
    store_options_t o;
    opts_default(&o);
    store_t *s = NULL;
    char err[512] = "";
    TU_REQUIRE(store_open(&o, T0, &s, err, sizeof err) == 0, "open after an interrupted creation: %s", err);
    TU_CHECK(store_created(s), "an interrupted creation is created again: store_created 0");
    TU_CHECK(store_close(s, err, sizeof err) == 0, "close: %s", err);
    s = NULL;
    TU_CHECK(store_open(&o, T0, &s, err, sizeof err) == 0, "reopen: %s", err);
    TU_CHECK(s == NULL || !store_created(s), "a reopen says it created the store");
    if (s != NULL)
        store_close(s, err, sizeof err);
}

static void test_refuse_foreign_leveldb(void)
{
    char *dberr = NULL, err[512] = "";
    leveldb_options_t *lo = leveldb_options_create();
    leveldb_options_set_create_if_missing(lo, 1);
    leveldb_t *db = leveldb_open(lo, g_data, &dberr);
    TU_REQUIRE(dberr == NULL && db != NULL, "leveldb_open: %s", dberr ? dberr : "?");
    leveldb_writeoptions_t *wo = leveldb_writeoptions_create();
    leveldb_put(db, wo, "hello", 5, "world", 5, &dberr);
    TU_REQUIRE(dberr == NULL, "leveldb_put: %s", dberr);
    leveldb_close(db);

    store_options_t o;
    opts_default(&o);
    store_t *s = NULL;
    int rc = store_open(&o, T0, &s, err, sizeof err);
    CHECK_REFUSAL(rc, err, "not a Hourglass data directory", "format marker");
    TU_CHECK(s == NULL, "*out must stay NULL");

    /* The foreign database holds exactly what it held. */
    db = leveldb_open(lo, g_data, &dberr);
    TU_REQUIRE(dberr == NULL && db != NULL, "reopen foreign leveldb: %s", dberr ? dberr : "?");
    leveldb_readoptions_t *ro = leveldb_readoptions_create();
    leveldb_iterator_t *it = leveldb_create_iterator(db, ro);
    int keys = 0;
    for (leveldb_iter_seek_to_first(it); leveldb_iter_valid(it); leveldb_iter_next(it))
        keys++;
    leveldb_iter_destroy(it);
    size_t vlen = 0;
    char *v = leveldb_get(db, ro, "hello", 5, &vlen, &dberr);
    TU_CHECK(keys == 1, "the foreign LevelDB now has %d keys, want 1", keys);
    TU_CHECK(v != NULL && vlen == 5 && memcmp(v, "world", 5) == 0, "the foreign value changed");
    if (v)
        leveldb_free(v);
    leveldb_readoptions_destroy(ro);
    leveldb_writeoptions_destroy(wo);
    leveldb_close(db);
    leveldb_options_destroy(lo);
}

static void test_refuse_level_table_change(void)
{
    store_t *s = OPEN_DEFAULT();
    SEND(s, "t", "x", 5, 0, T0, NULL);
    CLOSE(&s);

    store_options_t o;
    opts_default(&o);
    char err[512] = "", perr[256] = "";
    REQUIRE_OK(lvl_table_parse("1s 5s 10s", &o.levels, perr, sizeof perr), perr);
    int rc = store_open(&o, T0, &s, err, sizeof err);
    CHECK_REFUSAL(rc, err, "18 levels", "3");
    TU_CHECK(strstr(err, "level table") != NULL, "message \"%s\" does not say it is the level table", err);
    TU_CHECK(s == NULL, "*out must stay NULL");

    /* Same count, one delay different: the message names that level. */
    REQUIRE_OK(
        lvl_table_parse("1s 5s 15s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h", &o.levels, perr, sizeof perr),
        perr);
    err[0] = '\0';
    rc = store_open(&o, T0, &s, err, sizeof err);
    CHECK_REFUSAL(rc, err, "level 3", "15s");
    TU_CHECK(strstr(err, "10s") != NULL, "message \"%s\" lacks the stored delay 10s", err);

    /* The default still opens and the message is still on level 5. */
    s = OPEN_DEFAULT();
    CHECK_EQ_U64(level_depth(s, 5), 1);
    CHECK_STORE(s);
}

static void test_refuse_missing_and_file(void)
{
    store_options_t o;
    opts_default(&o);
    o.create_if_missing = 0;
    store_t *s = NULL;
    char err[512] = "";
    int rc = store_open(&o, T0, &s, err, sizeof err);
    CHECK_REFUSAL(rc, err, "does not exist", g_data);
    struct stat st;
    TU_CHECK(stat(g_data, &st) != 0, "store_open created %s with create_if_missing = 0", g_data);

    /* Created only when its parent exists, and the refusal says so. */
    char deep[700];
    snprintf(deep, sizeof deep, "%s/no/such/data", g_dir);
    store_options_t d;
    opts_default(&d);
    d.path = deep;
    err[0] = '\0';
    rc = store_open(&d, T0, &s, err, sizeof err);
    CHECK_REFUSAL(rc, err, "cannot create data directory", "its parent directory does not exist");

    /* An empty existing directory without create_if_missing is not a store either. */
    TU_REQUIRE(mkdir(g_data, 0700) == 0, "mkdir: %s", strerror(errno));
    err[0] = '\0';
    rc = store_open(&o, T0, &s, err, sizeof err);
    TU_CHECK(rc == -1 && strstr(err, g_data) != NULL, "empty dir without create: rc %d err \"%s\"", rc, err);

    /* A path that is a file. */
    char file[700];
    snprintf(file, sizeof file, "%s/plain", g_dir);
    TU_REQUIRE(write_file(file, "x") == 0, "write %s", file);
    opts_default(&o);
    o.path = file;
    err[0] = '\0';
    rc = store_open(&o, T0, &s, err, sizeof err);
    CHECK_REFUSAL(rc, err, "not a directory", file);
    TU_CHECK(s == NULL, "*out must stay NULL");
}

/* A damage_retry_ms outside STORE_MIN_DAMAGE_RETRY_MS ..
 * STORE_MAX_DAMAGE_RETRY_MS (0: a damaged head read at every call; past an
 * hour) is refused naming the option and the bounds, and nothing is
 * created; the bounds themselves open. */
static void test_refuse_damage_retry_out_of_range(void)
{
    static const uint64_t refused[] = { 0, STORE_MIN_DAMAGE_RETRY_MS - 1, STORE_MAX_DAMAGE_RETRY_MS + 1 };
    for (size_t i = 0; i < sizeof refused / sizeof refused[0]; i++) {
        store_options_t o;
        opts_default(&o);
        o.damage_retry_ms = refused[i];
        store_t *s = NULL;
        char err[512] = "";
        int rc = store_open(&o, T0, &s, err, sizeof err);
        CHECK_REFUSAL(rc, err, "damage-retry", "is outside 100..3600000 ms");
        TU_CHECK(s == NULL, "*out must stay NULL");
        struct stat st;
        TU_CHECK(stat(g_data, &st) != 0, "a refused damage_retry_ms %llu created %s", (unsigned long long)refused[i],
                 g_data);
    }
    static const uint64_t accepted[] = { STORE_MIN_DAMAGE_RETRY_MS, STORE_MAX_DAMAGE_RETRY_MS };
    for (size_t i = 0; i < sizeof accepted / sizeof accepted[0]; i++) {
        store_options_t o;
        opts_default(&o);
        o.damage_retry_ms = accepted[i];
        store_t *s = OPEN(&o);
        CHECK_EQ_U64(store_options(s)->damage_retry_ms, accepted[i]);
        CLOSE(&s);
    }
}

/* A LOCK file LevelDB cannot open (here a directory in its place; as a
 * non-root user also a directory it may not write, or a read-only mount) is
 * a problem of the directory, not "in use by another process": the refusal
 * names the cause, and only a LOCK another store holds is STORE_OPEN_IN_USE. */
static void test_refuse_unusable_lock(void)
{
    /* a path with "corrupt" in it says nothing about the data in it */
    char path[700], lock[800], err[512] = "";
    snprintf(path, sizeof path, "%s/corrupt-named", g_dir);
    store_options_t o;
    opts_default(&o);
    o.path = path;
    store_t *s = OPEN(&o);
    CLOSE(&s);
    snprintf(lock, sizeof lock, "%s/LOCK", path);
    TU_REQUIRE(unlink(lock) == 0 && mkdir(lock, 0700) == 0, "replace %s by a directory: %s", lock, strerror(errno));
    int rc = store_open(&o, T0, &s, err, sizeof err);
    TU_CHECK(rc == -1, "rc %d, want -1 (err \"%s\")", rc, err);
    CHECK_REFUSAL(-1, err, "cannot open data directory", "LOCK: Is a directory");
    TU_CHECK(strstr(err, "in use") == NULL && strstr(err, "another") == NULL,
             "an unusable LOCK file is reported as another process's: \"%s\"", err);
    TU_CHECK(s == NULL, "*out must stay NULL");
}

/* A whole BACKUP copy the broker's user cannot read (restored by root for a
 * broker that runs as another user) is refused with what to do, as an
 * unreadable LOCK is: it said only "cannot read …/BACKUP-WHOLE: Permission
 * denied". As root the open runs in a child that drops to nobody (root reads
 * every file); otherwise the file is made unreadable. */
static void test_whole_copy_unreadable(void)
{
    store_t *s = OPEN_DEFAULT();
    CLOSE(&s);
    char mark[800], err[512] = "";
    snprintf(mark, sizeof mark, "%s/BACKUP-WHOLE", g_data);
    TU_REQUIRE(tu_write_file(mark, "hourglass-broker BACKUP-WHOLE 2\n") == 0, "write %s", mark);
    TU_REQUIRE(chmod(mark, 0600) == 0 && chmod(g_dir, 0755) == 0 && chmod(g_data, 0755) == 0, "chmod: %s",
               strerror(errno));
    store_options_t o;
    opts_default(&o);
    o.create_if_missing = 0;
    if (geteuid() != 0) {
        TU_REQUIRE(chmod(mark, 0) == 0, "chmod %s: %s", mark, strerror(errno));
        TU_CHECK(store_open(&o, T0, &s, err, sizeof err) == -1, "the open did not fail");
    } else {
        int fds[2];
        TU_REQUIRE(pipe(fds) == 0, "pipe");
        pid_t pid = fork();
        TU_REQUIRE(pid >= 0, "fork");
        if (pid == 0) {
            close(fds[0]);
            int rc = setgid(65534) == 0 && setuid(65534) == 0 ? store_open(&o, T0, &s, err, sizeof err) : 0;
            ssize_t w = write(fds[1], err, rc == -1 ? strlen(err) : 0);
            _exit(w < 0);
        }
        close(fds[1]);
        ssize_t n = read(fds[0], err, sizeof err - 1);
        err[n > 0 ? n : 0] = '\0';
        close(fds[0]);
        waitpid(pid, NULL, 0);
    }
    TU_CHECK(strstr(err, "BACKUP-WHOLE: Permission denied") != NULL &&
                 strstr(err, "the broker must read and write every file in its data directory") != NULL,
             "an unreadable whole copy: \"%s\"", err);
    TU_REQUIRE(chmod(mark, 0600) == 0 && unlink(mark) == 0, "remove %s", mark);
}

/* The table of a closed store holding 3000 keyed messages on level 17, each
 * sent and committed alone (as a broker's is after 3000 SENDs with DELAY 1h
 * one after the other and a clean stop): its name in table[tablelen], its
 * size returned. A memtable is written out with every version of a record,
 * so the table starts with the level record's 3000 versions. */
static long damaged_fixture(char *table, size_t tablelen)
{
    store_t *s = OPEN_DEFAULT();
    char err[512] = "", key[32], payload[32];
    for (int i = 0; i < 3000; i++) {
        uint64_t id, due;
        snprintf(key, sizeof key, "k%d", i);
        snprintf(payload, sizeof payload, "payload-%d", i);
        int rc = send_raw(s, "t", 1, key, strlen(key), payload, strlen(payload), 17, 0, T0, &id, &due, err, sizeof err);
        TU_REQUIRE(rc == 0, "send %d: %s", i, err);
        REQUIRE_OK(store_commit(s, err, sizeof err), err); /* a commit each, as the broker's SENDs one at a time */
    }
    CLOSE(&s); /* the memtable is written out: one table, its first blocks the level record's older versions */
    DIR *d = opendir(g_data);
    TU_REQUIRE(d != NULL, "opendir %s", g_data);
    struct dirent *e;
    table[0] = '\0';
    while ((e = readdir(d)) != NULL) {
        size_t n = strlen(e->d_name);
        if (n > 4 && strcmp(e->d_name + n - 4, ".ldb") == 0)
            snprintf(table, tablelen, "%s", e->d_name);
    }
    closedir(d);
    TU_REQUIRE(table[0] != '\0', "no table in %s after a close", g_data);
    char path[800];
    snprintf(path, sizeof path, "%s/%s", g_data, table);
    struct stat st;
    TU_REQUIRE(stat(path, &st) == 0, "stat %s", path);
    return (long)st.st_size;
}

/* A bit flipped anywhere in a table is found: the open refuses the directory
 * as damaged, or store_check (--check-data) fails naming it. Before,
 * store_check read only the ranges it knows, from seeks, and passed a flip
 * in the blocks of older versions its seeks step over: "ok" on a directory
 * where a compaction that merges that table fails (paranoid checks), after which
 * every write fails. */
static void test_check_finds_damaged_blocks(void)
{
    char table[256];
    long size = damaged_fixture(table, sizeof table);
    char pristine[700];
    snprintf(pristine, sizeof pristine, "%s/pristine", g_dir);
    TU_REQUIRE(rename(g_data, pristine) == 0, "rename: %s", strerror(errno));
    int tried = 0, missed = 0;
    for (long off = 1000; off < size - 64; off += 2048) {
        char out[256], path[1000];
        const char *cp[] = { "/bin/cp", "-a", pristine, g_data, NULL };
        TU_REQUIRE(tu_run_capture(cp, out, sizeof out) == 0, "cp: %s", out);
        snprintf(path, sizeof path, "%s/%s", g_data, table);
        FILE *f = fopen(path, "r+b");
        TU_REQUIRE(f != NULL, "open %s", path);
        int c = (fseek(f, off, SEEK_SET), fgetc(f));
        TU_REQUIRE(c != EOF && fseek(f, off, SEEK_SET) == 0 && fputc(c ^ 0x40, f) != EOF && fclose(f) == 0, "flip");
        store_options_t o;
        opts_default(&o);
        o.create_if_missing = 0;
        store_t *s = NULL;
        char err[768] = "";
        int rc = store_open(&o, T0, &s, err, sizeof err);
        if (rc == 0) {
            rc = store_check(s, err, sizeof err);
            store_close(s, NULL, 0);
            if (rc == 0) {
                missed++;
                printf("\n    a flip at offset %ld of %s passed the check", off, table);
            } else {
                TU_CHECK(strstr(err, "damaged") != NULL || strstr(err, "orrupt") != NULL, "offset %ld: \"%s\"", off,
                         err);
            }
        } else {
            TU_CHECK(rc == STORE_OPEN_DAMAGED && strstr(err, "damaged") != NULL && strstr(err, "backup") != NULL,
                     "offset %ld: open rc %d, want STORE_OPEN_DAMAGED naming it: \"%s\"", off, rc, err);
        }
        tried++;
        tu_rmtree(g_data);
    }
    TU_CHECK(tried >= 40 && missed == 0, "%d of %d flipped bytes went unnoticed", missed, tried);
}

/* Damage LevelDB reports at open is STORE_OPEN_DAMAGED, naming what to do:
 * a table the manifest lists is gone or truncated, CURRENT is gone. */
static void test_refuse_damaged(void)
{
    char table[256], path[1000], err[768];
    long size = damaged_fixture(table, sizeof table);
    snprintf(path, sizeof path, "%s/%s", g_data, table);
    store_options_t o;
    opts_default(&o);
    o.create_if_missing = 0;
    store_t *s = NULL;

    TU_REQUIRE(truncate(path, size / 2) == 0, "truncate: %s", strerror(errno));
    int rc = store_open(&o, T0, &s, err, sizeof err);
    TU_CHECK(rc == STORE_OPEN_DAMAGED && strstr(err, "damaged") != NULL && strstr(err, table) != NULL,
             "a truncated table: rc %d \"%s\"", rc, err);

    TU_REQUIRE(unlink(path) == 0, "unlink: %s", strerror(errno));
    rc = store_open(&o, T0, &s, err, sizeof err);
    TU_CHECK(rc == STORE_OPEN_DAMAGED && strstr(err, "missing files") != NULL && strstr(err, "backup") != NULL,
             "a missing table: rc %d \"%s\"", rc, err);

    snprintf(path, sizeof path, "%s/CURRENT", g_data);
    TU_REQUIRE(unlink(path) == 0, "unlink: %s", strerror(errno));
    rc = store_open(&o, T0, &s, err, sizeof err);
    TU_CHECK(rc == STORE_OPEN_DAMAGED && strstr(err, "no CURRENT file") != NULL, "no CURRENT: rc %d \"%s\"", rc, err);
    TU_CHECK(s == NULL, "*out must stay NULL");
}

static void test_refuse_other_format(void)
{
    store_t *s = OPEN_DEFAULT();
    CLOSE(&s);
    raw_put("Mformat", 7, "\0\0\0\11", 4, __LINE__);
    store_options_t o;
    opts_default(&o);
    char err[512] = "";
    int rc = store_open(&o, T0, &s, err, sizeof err);
    CHECK_REFUSAL(rc, err, "format version 9; this build reads versions 1 to 8", g_data);
    TU_CHECK(s == NULL, "*out must stay NULL");
    raw_put("Mformat", 7, "\0\0\0\0", 4, __LINE__);
    rc = store_open(&o, T0, &s, err, sizeof err);
    CHECK_REFUSAL(rc, err, "format version 0", g_data);
}

/* Make the lease of message id name topic-log seq log_seq (a closed data
 * directory). */
static void raw_set_lease_seq(uint64_t id, uint64_t log_seq, int line)
{
    leveldb_t *db = raw_open(line);
    char yk[64], place[18];
    size_t klen;
    raw_lease_place(db, id, yk, &klen, place, line);
    be64_to(place + 10, log_seq);
    leveldb_writebatch_t *wb = leveldb_writebatch_create();
    leveldb_writebatch_put(wb, yk, klen, place, 18);
    raw_write_close(db, wb, line);
}

/* A directory of format 1 or 2 (a lease index 'J' beside the copy index; its
 * values hold only the deadline in format 1) opens, keeps its messages and
 * leases, and is marked as this build's format at once, so that an older build refuses it
 * instead of misreading it; the lease index is folded into the copy index. */
static void upgrade_from(int format)
{
    store_t *s = OPEN_DEFAULT();
    GROUP_CREATE(s, "g", "t", 1, T0);
    GROUP_CREATE(s, "h", "t", 1, T0);
    uint64_t a = SEND(s, "t", "x", 0, 0, T0, NULL);
    uint64_t b = SEND(s, "t", "x", 0, 0, T0, NULL);
    SEND(s, "t", "x", 0, 0, T0, NULL);
    msg_owned_t m[2];
    int n = LEASE_N(s, "g", "t", 2, LEASE, T0, m); /* a, b */
    CHECK_EQ_U64(n, 2);
    free_msgs(m, n);
    n = LEASE_N(s, "h", "t", 1, 2 * LEASE, T0, m); /* a, with its own deadline */
    CHECK_EQ_U64(n, 1);
    free_msgs(m, n);
    CLOSE(&s);
    CHECK_EQ_U64(raw_format(), STORE_FORMAT_VERSION);
    raw_downgrade_lease(a, format, __LINE__); /* g's lease of a: the first 'Y' of a */
    raw_downgrade_lease(b, format, __LINE__);
    char marker[4] = { 0, 0, 0, (char)format };
    raw_put("Mformat", 7, marker, 4, __LINE__);
    /* A check (--check-data: no_upgrade) refuses it and leaves it as it is:
     * before, a newer build's --check-data upgraded the directory, and the
     * build that wrote it refused it afterwards. */
    store_options_t check;
    opts_default(&check);
    check.create_if_missing = 0;
    check.no_upgrade = 1;
    char cerr[512] = "";
    int crc = store_open(&check, T0, &s, cerr, sizeof cerr);
    TU_CHECK(crc == -1 && strstr(cerr, "only by upgrading it") != NULL, "a check of format %d: rc %d \"%s\"", format,
             crc, cerr);
    CHECK_EQ_U64(raw_format(), (uint64_t)format);
    s = OPEN_DEFAULT();
    /* the upgrade is said, for the broker's log: an operator sees it happen */
    char want[64];
    snprintf(want, sizeof want, "upgraded from format version %d to %d", format, STORE_FORMAT_VERSION);
    TU_CHECK(strstr(store_open_info(s), want) != NULL, "the open of format %d says \"%s\", not \"%s\"", format,
             store_open_info(s), want);
    CHECK_STORE(s); /* no lease index left, each lease's deadline in its copy index entry */
    store_msg_state_t gs;
    TU_CHECK(state_of(s, a, "g", &gs) == STORE_MSG_LEASED && gs == STORE_MSG_LEASED, "a: g's lease lost");
    TU_CHECK(state_of(s, a, "h", &gs) == STORE_MSG_LEASED && gs == STORE_MSG_LEASED, "a: h's lease lost");
    CLOSE(&s);
    CHECK_EQ_U64(raw_format(), STORE_FORMAT_VERSION);
    s = OPEN_DEFAULT();
    TU_CHECK(store_open_info(s)[0] == '\0', "the open after the upgrade says \"%s\"", store_open_info(s));
    uint64_t ids[2] = { a, b };
    ACK(s, "g", ids, 2);
    char err[512] = "";
    int found = 0;
    REQUIRE_OK(store_touch(s, "h", 1, a, T0 + 3 * LEASE, &found, err, sizeof err), err);
    TU_CHECK(found, "h's lease of a was not found for TOUCH");
    n = LEASE_N(s, "g", "t", 1, LEASE, T0, m);
    CHECK_EQ_U64(n, 1);
    free_msgs(m, n);
    CHECK_COUNTS(s, "g", 0, 0, 0, 0, 1, 0);
    CHECK_STORE(s);
    CLOSE(&s);
}

/* store_check finds a lease whose topic-log seq is not where the message
 * index says its own copy is (ACK trusts that seq). */
static void test_lease_seq_checked(void)
{
    uint64_t a;
    store_t *s = open_with_one_lease(&a);
    CLOSE(&s);
    raw_set_lease_seq(a, 999999, __LINE__);
    s = OPEN_DEFAULT();
    char err[512] = "";
    TU_CHECK(store_check(s, err, sizeof err) == -1 && strstr(err, "topic-log seq") != NULL,
             "store_check of a lease naming another seq: \"%s\"", err);
    CLOSE(&s);
}

static void test_upgrade_format1(void)
{
    upgrade_from(1);
}

static void test_upgrade_format2(void)
{
    upgrade_from(2);
}

/* A fold cut short (a crash after the marker was written) is finished at the
 * next open; a lease index entry of a group the directory does not have is
 * refused by name, and the directory left as it was. */
static void test_upgrade_interrupted(void)
{
    uint64_t a;
    store_t *s = open_with_one_lease(&a);
    CLOSE(&s);
    raw_downgrade_lease(a, 2, __LINE__); /* the marker says 3 */
    s = OPEN_DEFAULT();
    CHECK_STORE(s);
    ACK(s, "g", &a, 1);
    CHECK_COUNTS(s, "g", 0, 0, 0, 0, 0, 0);
    CLOSE(&s);
    char jk[3 + 8], jv[8];
    memcpy(jk, "Jq", 3);
    be64_to(jk + 3, 42);
    be64_to(jv, T0 + LEASE);
    raw_put(jk, sizeof jk, jv, sizeof jv, __LINE__);
    store_options_t o;
    opts_default(&o);
    char err[512] = "";
    int rc = store_open(&o, T0, &s, err, sizeof err);
    CHECK_REFUSAL(rc, err, "names group q, which", g_data);
    TU_CHECK(s == NULL, "*out must stay NULL");
}

/* A value that does not decode is reported (by store_check and by the
 * operation that reads it), never read past. */
static int remember_level_key(void *ctx, const store_entry_t *e)
{
    if (e->range != STORE_LEVEL) {
        return 0;
    }
    char *key = ctx;
    key[0] = 'L';
    key[1] = (char)e->level;
    for (int i = 0; i < 8; i++) {
        key[2 + i] = (char)((e->due_ms >> (56 - 8 * i)) & 0xff);
        key[10 + i] = (char)((e->seq >> (56 - 8 * i)) & 0xff);
    }
    return 1;
}

/* After a due move at now that failed at level l's head: the call moved
 * nothing there, the level is damaged naming says and says2 (either may be
 * NULL) and skipped until the store's damage_retry_ms after now. */
static void check_level_damaged_at(store_t *s, int l, uint64_t now, const char *says, const char *says2, int line)
{
    store_level_info_t li;
    TU_REQUIRE_AT(store_level_info(s, l, &li) == 0, line, "no level %d", l);
    TU_CHECK_AT(li.damaged && (says == NULL || strstr(li.damage, says) != NULL) &&
                    (says2 == NULL || strstr(li.damage, says2) != NULL),
                line, "level %d: damaged %d \"%s\", not naming %s, %s", l, li.damaged, li.damage, says ? says : "-",
                says2 ? says2 : "-");
    TU_CHECK_AT(store_next_due(s) == now + store_options(s)->damage_retry_ms, line,
                "the damaged level is due again at %llu, not a retry delay after %llu",
                (unsigned long long)store_next_due(s), (unsigned long long)now);
    TU_CHECK_AT(!store_broken(s), line, "a due move that failed before it took anything broke the store");
}
#define CHECK_LEVEL_DAMAGED(s, l, now, says, says2) check_level_damaged_at((s), (l), (now), (says), (says2), __LINE__)

/* Make the level of the `L` key head[18] one written before 4a.4 (its `C`
 * record in the 48-byte form, its head that key): it is served by walking
 * `L`, as a directory of 4a.3 or format 5 is (design-commitlog.md 4a.4),
 * which is where a damaged level key or value is met. A level served from
 * its CQ reads its messages from the commit log instead: a damaged record
 * there is test_store_levels' "a damaged level is skipped". */
static void level_walked_from(const char *head, int line)
{
    key_buf_t k;
    key_level_record(&k, (unsigned char)head[1]);
    leveldb_t *db = raw_open(line);
    leveldb_readoptions_t *ro = leveldb_readoptions_create();
    char *dberr = NULL;
    size_t vlen = 0;
    char *v = leveldb_get(db, ro, k.b, k.n, &vlen, &dberr);
    leveldb_readoptions_destroy(ro);
    leveldb_close(db);
    TU_REQUIRE_AT(dberr == NULL && v != NULL && vlen == RECORD_LEVEL_BYTES, line, "the level record: %s",
                  dberr ? dberr : "absent or not 64 bytes");
    memcpy(v + 8, head + 2, 16); /* head due, head seq */
    raw_put(k.b, k.n, v, RECORD_LEVEL_CQ, line);
    leveldb_free(v);
}
#define LEVEL_WALKED_FROM(head) level_walked_from((head), __LINE__)

/* A store whose levels are all walked by `L` before anything is sent (their
 * `C` records empty, flagged RECORD_LEVEL_ON_L): a SEND then writes its
 * `L` entry and 'X' beside its CQ entry, as format 5's commit log did (4a.4),
 * which the damage cases below need; a level served from its CQ has no `L`
 * entry to damage (design-commitlog.md 4a.5). */
static store_t *open_levels_walked(int line)
{
    store_t *s = open_default_at(line);
    CLOSE(&s);
    store_options_t o;
    opts_default(&o);
    for (int l = 1; l <= o.levels.count; l++) {
        record_level_t r;
        memset(&r, 0, sizeof r);
        r.flags = RECORD_LEVEL_ON_L;
        char v[RECORD_LEVEL_BYTES];
        record_level_encode(&r, v);
        key_buf_t k;
        key_level_record(&k, l);
        raw_put(k.b, k.n, v, RECORD_LEVEL_BYTES, line);
    }
    return open_default_at(line);
}
#define OPEN_LEVELS_WALKED() open_levels_walked(__LINE__)

static void test_corrupt_value_reported(void)
{
    store_t *s = OPEN_LEVELS_WALKED();
    SEND(s, "t", "ok", 1, 0, T0, NULL);
    char key[18] = "";
    char err[512] = "";
    TU_CHECK(store_scan(s, remember_level_key, key, err, sizeof err) == 0, "scan: %s", err);
    TU_CHECK(key[0] == 'L' && key[1] == 1, "the message is not on level 1");
    CLOSE(&s);
    LEVEL_WALKED_FROM(key);
    /* overwrite the message's value with a truncated record */
    raw_put(key, sizeof key, "\1\0\0\0", 4, __LINE__);
    s = OPEN_DEFAULT();
    int rc = store_check(s, err, sizeof err);
    CHECK_REFUSAL(rc, err, "corrupt", NULL);
    int moved = -1;
    err[0] = '\0';
    rc = store_move_due(s, T0 + HOUR, 10, &moved, NULL, err, sizeof err);
    TU_CHECK(rc == 0 && moved == 0, "the due move at a corrupt value: rc %d, moved %d \"%s\"", rc, moved, err);
    CHECK_LEVEL_DAMAGED(s, 1, T0 + HOUR, "corrupt", "level");
}

/* A message value whose topic, group or key is longer than any key holds,
 * or whose topic holds a 0x00, is refused as corrupt when read (a due move,
 * store_check): the due move built its next keys from it (a topic or key
 * past KEY_MAX overran a key_buf_t) and created a topic of that name (cut at
 * the 0x00 by its copy, its length not). Put back, the message moves. */
static void test_message_names_checked(void)
{
    store_t *s = OPEN_LEVELS_WALKED();
    SEND(s, "t", "x", 1, 0, T0, NULL);
    char key[18] = "";
    char err[1024] = "";
    TU_REQUIRE(store_scan(s, remember_level_key, key, err, sizeof err) == 0 && key[0] == 'L', "scan: %s", err);
    CLOSE(&s);
    LEVEL_WALKED_FROM(key);
    leveldb_t *db = raw_open(__LINE__);
    leveldb_readoptions_t *ro = leveldb_readoptions_create();
    char *dberr = NULL;
    size_t vlen = 0;
    char *good = leveldb_get(db, ro, key, sizeof key, &vlen, &dberr);
    leveldb_readoptions_destroy(ro);
    leveldb_close(db);
    TU_REQUIRE(dberr == NULL && good != NULL, "the level message: %s", dberr ? dberr : "absent");
    msg_t m;
    TU_REQUIRE(msg_decode(good, vlen, &m, err, sizeof err) == 0, "decode: %s", err);
    static char long_name[2000];
    memset(long_name, 'n', sizeof long_name);
    const struct {
        msg_str_t topic, group, key;
        const char *says;
    } bad[] = {
        { { long_name, sizeof long_name }, m.group, m.key, "topic name" },
        { { "t\0u", 3 }, m.group, m.key, "topic name" },
        { { "", 0 }, m.group, m.key, "topic name" },
        { m.topic, { long_name, MSG_MAX_NAME + 1 }, m.key, "group name" },
        { m.topic, m.group, { long_name, MSG_MAX_KEY + 1 }, "key" },
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        msg_t d = m;
        d.topic = bad[i].topic;
        d.group = bad[i].group;
        d.key = bad[i].key;
        static char v[4096];
        size_t n = msg_encode(&d, v, sizeof v);
        TU_REQUIRE(n > 0, "encode case %zu", i);
        raw_put(key, sizeof key, v, n, __LINE__);
        s = OPEN_DEFAULT();
        int rc = store_check(s, err, sizeof err);
        TU_CHECK(rc == -1 && strstr(err, "corrupt message") != NULL && strstr(err, bad[i].says) != NULL,
                 "store_check of damaged message %zu: rc %d \"%s\"", i, rc, err);
        int moved = -1;
        err[0] = '\0';
        rc = store_move_due(s, T0 + HOUR, 10, &moved, NULL, err, sizeof err);
        TU_CHECK(rc == 0 && moved == 0, "due move of damaged message %zu: rc %d, moved %d, \"%s\"", i, rc, moved, err);
        CHECK_LEVEL_DAMAGED(s, 1, T0 + HOUR, "corrupt message", bad[i].says);
        CLOSE(&s);
    }
    raw_put(key, sizeof key, good, vlen, __LINE__);
    leveldb_free(good);
    s = OPEN_DEFAULT();
    CHECK_STORE(s);
    int moved = 0;
    TU_CHECK(store_move_due(s, T0 + HOUR, 10, &moved, NULL, err, sizeof err) == 0 && moved == 1,
             "the message put back does not move: %d, \"%s\"", moved, err);
    CLOSE(&s);
}

/* A message index record ('X') whose topic is longer than any key holds or
 * holds a 0x00, or whose key is past MSG_MAX_KEY, is refused as corrupt by
 * store_check and REVOKE: both built a key from it (a 2000-byte topic
 * overran a key_buf_t). Put back, the message is revoked. */
static void test_index_record_names_checked(void)
{
    store_t *s = OPEN_LEVELS_WALKED(); /* its `L` entry and 'X' hold it (no topic CQ, no CQ journey: no 'X') */
    uint64_t id = SEND(s, "t", "x", 1, 0, T0, NULL);
    CLOSE(&s);
    char xk[9];
    xk[0] = 'X';
    be64_to(xk + 1, id);
    leveldb_t *db = raw_open(__LINE__);
    leveldb_readoptions_t *ro = leveldb_readoptions_create();
    char *dberr = NULL;
    size_t vlen = 0;
    char *good = leveldb_get(db, ro, xk, sizeof xk, &vlen, &dberr);
    leveldb_readoptions_destroy(ro);
    leveldb_close(db);
    TU_REQUIRE(dberr == NULL && good != NULL && vlen > 5, "the message index record: %s", dberr ? dberr : "absent");
    const size_t place = 18; /* u8 tag, u8 level, u64 due, u64 seq; then u16 1, "t", u16 klen, the key */
    TU_REQUIRE(vlen >= place + 5 && good[place] == 0 && good[place + 1] == 1 && good[place + 2] == 't',
               "record layout not as expected");
    static char v[4096];
    const struct {
        size_t topic_len;
        char fill;
        size_t key_len; /* 0: the record's own key */
    } bad[] = {
        { 2000, 'n', 0 },
        { 3, '\0', 0 },
        { 0, 'n', 0 },
        { 1, 't', MSG_MAX_KEY + 1 },
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        memcpy(v, good, place);
        size_t n = place;
        v[n++] = (char)(bad[i].topic_len >> 8);
        v[n++] = (char)bad[i].topic_len;
        memset(v + n, bad[i].fill, bad[i].topic_len);
        n += bad[i].topic_len;
        if (bad[i].key_len == 0) {
            memcpy(v + n, good + place + 3, vlen - place - 3);
            n += vlen - place - 3;
        } else {
            v[n++] = (char)(bad[i].key_len >> 8);
            v[n++] = (char)bad[i].key_len;
            memset(v + n, 'k', bad[i].key_len);
            n += bad[i].key_len;
        }
        raw_put(xk, sizeof xk, v, n, __LINE__);
        s = OPEN_DEFAULT();
        char err[1024] = "";
        int rc = store_check(s, err, sizeof err);
        TU_CHECK(rc == -1 && strstr(err, "corrupt message index record") != NULL,
                 "store_check of damaged index record %zu: rc %d \"%s\"", i, rc, err);
        store_revoke_result_t r;
        err[0] = '\0';
        rc = store_revoke_id(s, id, &r, err, sizeof err);
        TU_CHECK(rc == -1 && strstr(err, "corrupt message index record") != NULL,
                 "REVOKE over damaged index record %zu: rc %d \"%s\"", i, rc, err);
        CLOSE(&s);
    }
    raw_put(xk, sizeof xk, good, vlen, __LINE__);
    leveldb_free(good);
    s = OPEN_DEFAULT();
    CHECK_STORE(s);
    store_revoke_result_t r;
    char err[512] = "";
    TU_CHECK(store_revoke_id(s, id, &r, err, sizeof err) == 0 && r.revoked == 1, "revoke put back: %s", err);
    CLOSE(&s);
}

/* ---- damaged keys: names the layout forbids (empty, past MSG_MAX_NAME, a 0x00 inside) ---- */

/* Move the value of key from to key to (a closed data directory): the
 * record is then under a damaged key, or back under its own. */
static void raw_move(const char *from, size_t flen, const char *to, size_t tlen, int line)
{
    leveldb_t *db = raw_open(line);
    leveldb_readoptions_t *ro = leveldb_readoptions_create();
    char *dberr = NULL;
    size_t vlen = 0;
    char *v = leveldb_get(db, ro, from, flen, &vlen, &dberr);
    leveldb_readoptions_destroy(ro);
    TU_REQUIRE_AT(dberr == NULL && v != NULL, line, "no record under the key to move (%s)", dberr ? dberr : "absent");
    leveldb_writebatch_t *wb = leveldb_writebatch_create();
    leveldb_writebatch_delete(wb, from, flen);
    leveldb_writebatch_put(wb, to, tlen, v, vlen);
    leveldb_free(v);
    raw_write_close(db, wb, line);
}

/* Every level key, in order, into the level_keys_t of ctx. */
typedef struct level_keys {
    char key[2][18];
    int n;
} level_keys_t;

static int collect_level_keys(void *ctx, const store_entry_t *e)
{
    level_keys_t *lk = ctx;
    if (e->range != STORE_LEVEL || lk->n == 2) {
        return 0;
    }
    remember_level_key(lk->key[lk->n++], e);
    return 0;
}

/* After an operation that failed half-way (it took the head of a level,
 * then met the damaged key behind it): the store must be broken, naming the
 * operation and the damage, so that nothing of it reaches the disk; closing
 * it then fails and forgets it (*sp = NULL). */
static void close_after_half_way(store_t **sp, const char *what)
{
    char err[1024] = "";
    TU_CHECK(store_broken(*sp), "%s failed half-way but the store is usable: its half-done batch would be written",
             what);
    int rc = store_commit(*sp, err, sizeof err);
    TU_CHECK(rc == -1 && strstr(err, what) != NULL && strstr(err, "failed half-way") != NULL &&
                 strstr(err, "corrupt level key") != NULL,
             "a commit after %s failed half-way: rc %d \"%s\"", what, rc, err);
    for (int i = 0; i < MAX_OPEN; i++) {
        if (g_open[i] == *sp) {
            g_open[i] = NULL;
        }
    }
    rc = store_close(*sp, err, sizeof err);
    TU_CHECK(rc == -1 && strstr(err, "failed half-way") != NULL, "closing the broken store: rc %d \"%s\"", rc, err);
    *sp = NULL;
}

/* The level key at good, damaged at bad, is put back; the store must then be
 * as it was before the failed operation (store_check: a level head not moved
 * with the messages taken fails it); then it is damaged again. */
static void check_nothing_written(const char *good, const char *bad, size_t badlen)
{
    raw_move(bad, badlen, good, 18, __LINE__);
    store_t *s = OPEN_DEFAULT();
    CHECK_STORE(s);
    CLOSE(&s);
    raw_move(good, 18, bad, badlen, __LINE__);
}

/* A level key of the wrong length (a byte past its 18) is reported with the
 * key shown (key_describe), as every other reader reports one, by the due
 * move and by REVOKE's search for the level's next head. Both meet it after
 * they took the head before it: the store is then broken (nothing half-done
 * is written: a commit would have written the head taken with the level's
 * remembered head not moved). Met at the head itself, before anything was
 * taken, the due move fails and the store stays usable. */
static void test_damaged_level_key_shown(void)
{
    store_t *s = OPEN_LEVELS_WALKED();
    uint64_t first = SEND(s, "t", "a", 1, 0, T0, NULL);
    SEND(s, "t", "b", 1, 0, T0 + 1, NULL);
    level_keys_t lk = { .n = 0 };
    char err[1024] = "";
    TU_CHECK(store_scan(s, collect_level_keys, &lk, err, sizeof err) == 0, "scan: %s", err);
    TU_REQUIRE(lk.n == 2 && lk.key[1][0] == 'L' && lk.key[1][1] == 1, "the messages are not on level 1");
    CLOSE(&s);
    LEVEL_WALKED_FROM(lk.key[0]);
    char damaged[19];
    memcpy(damaged, lk.key[1], 18);
    damaged[18] = 'Z';
    raw_move(lk.key[1], 18, damaged, sizeof damaged, __LINE__);

    s = OPEN_DEFAULT();
    store_revoke_result_t r;
    int rc = store_revoke_id(s, first, &r, err, sizeof err);
    TU_CHECK(rc == -1 && strstr(err, "corrupt level key \"L\\x01") != NULL && strstr(err, "Z\" (19 bytes)") != NULL,
             "REVOKE of the head before a damaged level key: rc %d \"%s\"", rc, err);
    close_after_half_way(&s, "REVOKE");
    check_nothing_written(lk.key[1], damaged, sizeof damaged);

    s = OPEN_DEFAULT();
    int moved = -1;
    err[0] = '\0';
    rc = store_move_due(s, T0 + HOUR, 10, &moved, NULL, err, sizeof err);
    TU_CHECK(rc == -1 && strstr(err, "corrupt level key \"L\\x01") != NULL && strstr(err, "Z\" (19 bytes)") != NULL,
             "due move over a damaged level key: rc %d \"%s\"", rc, err);
    close_after_half_way(&s, "due move");
    check_nothing_written(lk.key[1], damaged, sizeof damaged);
    raw_move(damaged, sizeof damaged, lk.key[1], 18, __LINE__);

    /* the head's own key damaged: nothing taken, nothing to break */
    char damaged_head[19];
    memcpy(damaged_head, lk.key[0], 18);
    damaged_head[18] = 'Z';
    raw_move(lk.key[0], 18, damaged_head, sizeof damaged_head, __LINE__);
    s = OPEN_DEFAULT();
    err[0] = '\0';
    rc = store_move_due(s, T0 + HOUR, 10, &moved, NULL, err, sizeof err);
    TU_CHECK(rc == 0 && moved == 0, "due move from a damaged head key: rc %d, moved %d \"%s\"", rc, moved, err);
    CHECK_LEVEL_DAMAGED(s, 1, T0 + HOUR, "corrupt level key \"L\\x01", NULL);
    SEND(s, "u", "c", 0, 0, T0 + 2, NULL); /* the store still takes writes */
    REQUIRE_OK(store_commit(s, err, sizeof err), err);
    CLOSE(&s);
    raw_move(damaged_head, sizeof damaged_head, lk.key[0], 18, __LINE__);
    s = OPEN_DEFAULT();
    CHECK_STORE(s);
    CLOSE(&s);
}

/* 'I' deadline group 0x00 id into k: its length. */
static size_t lease_key_of(char *k, uint64_t deadline, const char *group, size_t glen, uint64_t id)
{
    k[0] = 'I';
    be64_to(k + 1, deadline);
    memcpy(k + 9, group, glen);
    k[9 + glen] = '\0';
    be64_to(k + 10 + glen, id);
    return 1 + 8 + glen + 1 + 8;
}

/* A lease key whose group is one byte past MSG_MAX_NAME, holds a 0x00, or is
 * a lone 0x00 is reported by store_check with the key, and refused by lease
 * expiry (which copied a long group into its MSG_MAX_NAME + 1 buffer);
 * moved back, the lease is as it was. */
static void test_damaged_lease_keys(void)
{
    uint64_t a;
    store_t *s = open_with_one_lease(&a);
    CLOSE(&s);
    char long_group[MSG_MAX_NAME + 1];
    memset(long_group, 'g', sizeof long_group);
    const struct {
        const char *group;
        size_t glen;
        const char *shows; /* in the described key */
    } bad[] = {
        { long_group, sizeof long_group, "(274 bytes)" },
        { "g\0g", 3, "g\\x00g\\x00" },
        { "\0", 1, "\\x00\\x00" },
    };
    char good[64], damaged[1 + 8 + MSG_MAX_NAME + 1 + 1 + 8];
    size_t good_len = lease_key_of(good, T0 + LEASE, "g", 1, a);
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        size_t dlen = lease_key_of(damaged, T0 + LEASE, bad[i].group, bad[i].glen, a);
        raw_move(good, good_len, damaged, dlen, __LINE__);
        s = OPEN_DEFAULT();
        char err[1024] = "";
        int rc = store_check(s, err, sizeof err);
        TU_CHECK(rc == -1 && strstr(err, "corrupt lease key \"I") != NULL && strstr(err, bad[i].shows) != NULL,
                 "store_check of damaged lease key %zu: rc %d \"%s\"", i, rc, err);
        store_lease_ref_t out[4];
        int n = -1;
        err[0] = '\0';
        rc = store_expired_leases(s, T0 + 2 * LEASE, out, 4, &n, err, sizeof err);
        TU_CHECK(rc == -1 && n == 0 && strstr(err, "corrupt lease key") != NULL,
                 "lease expiry of damaged lease key %zu: rc %d, %d leases, \"%s\"", i, rc, n, err);
        CLOSE(&s);
        raw_move(damaged, dlen, good, good_len, __LINE__);
        s = OPEN_DEFAULT();
        CHECK_STORE(s);
        CHECK_COUNTS(s, "g", 0, 0, 0, 0, 1, 0);
        CLOSE(&s);
    }
}

/* GROUP DEL's walk of the leases meets a lease key longer than any a
 * key_buf_t holds (a 2000-byte group): refused with the key, never copied
 * (it was copied into the group's key_buf_t before it was parsed). */
static void test_group_delete_damaged_lease_key(void)
{
    uint64_t a;
    store_t *s = open_with_one_lease(&a);
    CLOSE(&s);
    static char damaged[1 + 8 + 2000 + 1 + 8];
    char group[2000];
    memset(group, 'g', sizeof group);
    size_t dlen = lease_key_of(damaged, T0 + 1, group, sizeof group, a); /* before g's own lease */
    raw_put(damaged, dlen, "x", 1, __LINE__);
    s = OPEN_DEFAULT();
    char err[1024] = "";
    int found = -1;
    REQUIRE_OK(store_group_delete(s, "g", 1, &found, err, sizeof err), err);
    int rc = 0, work = 0;
    for (int step = 0; step < 100 && rc == 0; step++) {
        rc = store_maintain(s, T0, 100, &work, err, sizeof err);
    }
    TU_CHECK(rc == -1 && strstr(err, "corrupt lease key \"I") != NULL && strstr(err, "(2018 bytes)") != NULL,
             "GROUP DEL over a 2000-byte lease key: rc %d \"%s\"", rc, err);
    CLOSE(&s);
}

/* A topic or group record under a name with a 0x00 inside is refused at
 * open with the key (the group's name was cut at the 0x00 before). */
static void test_damaged_record_keys(void)
{
    uint64_t a;
    store_t *s = open_with_one_lease(&a);
    CLOSE(&s);
    const struct {
        const char *good, *damaged;
        size_t good_len, damaged_len;
        const char *says;
    } bad[] = {
        { "Gg", "Gg\0x", 2, 4, "corrupt group record \"Gg\\x00x\" (4 bytes)" },
        { "Pt", "Pt\0u", 2, 4, "corrupt topic record \"Pt\\x00u\" (4 bytes)" },
    };
    store_options_t o;
    opts_default(&o);
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        raw_move(bad[i].good, bad[i].good_len, bad[i].damaged, bad[i].damaged_len, __LINE__);
        char err[1024] = "";
        int rc = store_open(&o, T0, &s, err, sizeof err);
        TU_CHECK(rc == STORE_OPEN_DAMAGED && strstr(err, bad[i].says) != NULL && strstr(err, g_data) != NULL,
                 "open with damaged record key %zu: rc %d \"%s\"", i, rc, err);
        TU_CHECK(s == NULL, "*out must stay NULL");
        if (s != NULL) {
            store_close(s, NULL, 0);
            s = NULL;
        }
        raw_move(bad[i].damaged, bad[i].damaged_len, bad[i].good, bad[i].good_len, __LINE__);
    }
    s = OPEN_DEFAULT();
    CHECK_STORE(s);
    CHECK_COUNTS(s, "g", 0, 0, 0, 0, 1, 0);
    CLOSE(&s);
}

/* A level key one byte short (9 bytes: the due time ran past its end) or
 * one byte long is reported by store_check and store_scan with the key, as
 * the level's reader refuses it; store_check read its due time and seq from
 * wherever they fell (past the key's end for 9 bytes) and blamed the level's
 * head. Moved back, the message is as it was. */
static void test_damaged_level_keys(void)
{
    store_t *s = OPEN_LEVELS_WALKED();
    SEND(s, "t", "x", 1, 0, T0, NULL);
    char good[18] = "";
    char err[1024] = "";
    TU_REQUIRE(store_scan(s, remember_level_key, good, err, sizeof err) == 0 && good[0] == 'L', "scan: %s", err);
    CLOSE(&s);
    char longer[19];
    memcpy(longer, good, sizeof good);
    longer[18] = 'z';
    const struct {
        const char *key;
        size_t klen;
        const char *shows;
    } bad[] = {
        { good, 9, "(9 bytes)" },
        { good, 17, "(17 bytes)" },
        { longer, 19, "(19 bytes)" },
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        raw_move(good, sizeof good, bad[i].key, bad[i].klen, __LINE__);
        s = OPEN_DEFAULT();
        int rc = store_check(s, err, sizeof err);
        TU_CHECK(rc == -1 && strstr(err, "corrupt key \"L\\x01") != NULL && strstr(err, bad[i].shows) != NULL,
                 "store_check of a %zu-byte level key: rc %d \"%s\"", bad[i].klen, rc, err);
        char seen[18] = "";
        err[0] = '\0';
        rc = store_scan(s, remember_level_key, seen, err, sizeof err);
        TU_CHECK(rc == -1 && strstr(err, "corrupt key \"L\\x01") != NULL && strstr(err, bad[i].shows) != NULL,
                 "store_scan of a %zu-byte level key: rc %d \"%s\"", bad[i].klen, rc, err);
        CLOSE(&s);
        raw_move(bad[i].key, bad[i].klen, good, sizeof good, __LINE__);
    }
    s = OPEN_DEFAULT();
    CHECK_STORE(s);
    CLOSE(&s);
}

/* A group record whose topic name (in its value) holds a 0x00 is refused at
 * open with the key, as one whose name is empty or too long is: it named a
 * topic no key may hold, which the next commit wrote as a topic record that
 * the open after refused ("corrupt topic record"), blaming the wrong record. */
static void test_group_record_topic_with_zero(void)
{
    uint64_t a;
    store_t *s = open_with_one_lease(&a);
    CLOSE(&s);
    leveldb_t *db = raw_open(__LINE__);
    leveldb_readoptions_t *ro = leveldb_readoptions_create();
    char *dberr = NULL;
    size_t vlen = 0;
    char *v = leveldb_get(db, ro, "Gg", 2, &vlen, &dberr);
    leveldb_readoptions_destroy(ro);
    TU_REQUIRE(dberr == NULL && v != NULL && vlen == RECORD_GROUP_FIXED + 1, "group record of g: %s",
               dberr ? dberr : "absent or of another length");
    char damaged[RECORD_GROUP_FIXED + 3], good[RECORD_GROUP_FIXED + 1];
    memcpy(good, v, vlen);
    leveldb_free(v);
    memcpy(damaged, good, RECORD_GROUP_FIXED - 2);
    memcpy(damaged + RECORD_GROUP_FIXED - 2, "\0\3t\0u", 5); /* topic "t\0u" */
    leveldb_writebatch_t *wb = leveldb_writebatch_create();
    leveldb_writebatch_put(wb, "Gg", 2, damaged, sizeof damaged);
    raw_write_close(db, wb, __LINE__);
    store_options_t o;
    opts_default(&o);
    char err[1024] = "";
    int rc = store_open(&o, T0, &s, err, sizeof err);
    TU_CHECK(rc == STORE_OPEN_DAMAGED && strstr(err, "corrupt group record \"Gg\" (2 bytes)") != NULL &&
                 strstr(err, "(topic name)") != NULL,
             "open with a group record on topic \"t\\0u\": rc %d \"%s\"", rc, err);
    TU_CHECK(s == NULL, "*out must stay NULL");
    if (s != NULL) {
        store_close(s, NULL, 0);
        s = NULL;
    }
    raw_put("Gg", 2, good, sizeof good, __LINE__);
    s = OPEN_DEFAULT();
    CHECK_STORE(s);
    CHECK_COUNTS(s, "g", 0, 0, 0, 0, 1, 0);
    CLOSE(&s);
}

/* A store whose topic t holds a topic-log entry held by a 'T' key
 * (design-commitlog.md 4b: a message arriving without its journey): a SEND
 * on a level walked by `L`, its journey dropped by an index rebuild, then
 * due. Left open. */
static store_t *open_with_arrival_in_t(int line)
{
    store_t *s = open_levels_walked(line);
    SEND(s, "t", "x", 1, 0, T0, NULL);
    CLOSE(&s);
    raw_put("Mindex", 6, NULL, 0, line);
    s = open_default_at(line);
    TU_REQUIRE_AT(move_at(s, T0 + SEC, 10, NULL, line) == 1, line, "the message does not arrive");
    return s;
}
#define OPEN_WITH_ARRIVAL_IN_T() open_with_arrival_in_t(__LINE__)

static int remember_log_seq(void *ctx, const store_entry_t *e)
{
    if (e->range != STORE_TOPIC) {
        return 0;
    }
    *(uint64_t *)ctx = e->seq;
    return 1;
}

/* A topic-log entry under a 256-byte topic, or under another topic than its
 * message's (found by no read of its topic, yet counted for it before), is
 * reported by store_check with the key; moved back, all is as it was. */
static void test_damaged_queue_keys(void)
{
    store_t *s = OPEN_WITH_ARRIVAL_IN_T();
    CHECK_STORE(s);
    uint64_t seq = 0;
    char err[1024] = "";
    TU_REQUIRE(store_scan(s, remember_log_seq, &seq, err, sizeof err) == 0 && seq != 0, "scan: %s", err);
    CLOSE(&s);
    char good[1 + 1 + 1 + 8], long_topic[1 + MSG_MAX_NAME + 1 + 1 + 8], other[1 + 1 + 1 + 8];
    memcpy(good, "Tt", 3);
    be64_to(good + 3, seq);
    long_topic[0] = 'T';
    memset(long_topic + 1, 't', MSG_MAX_NAME + 1);
    long_topic[MSG_MAX_NAME + 2] = '\0';
    be64_to(long_topic + MSG_MAX_NAME + 3, seq);
    memcpy(other, "Tu", 3);
    be64_to(other + 3, seq);
    const struct {
        const char *key;
        size_t klen;
        const char *says;
    } bad[] = {
        { long_topic, sizeof long_topic, "corrupt key \"Tttt" },
        { other, sizeof other, "key \"Tu\\x00" },
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        raw_move(good, sizeof good, bad[i].key, bad[i].klen, __LINE__);
        s = OPEN_DEFAULT();
        int rc = store_check(s, err, sizeof err);
        TU_CHECK(rc == -1 && strstr(err, bad[i].says) != NULL, "store_check of damaged topic-log key %zu: rc %d \"%s\"",
                 i, rc, err);
        CLOSE(&s);
        raw_move(bad[i].key, bad[i].klen, good, sizeof good, __LINE__);
    }
    s = OPEN_DEFAULT();
    CHECK_STORE(s);
    CLOSE(&s);
}

/* A message whose journey an index rebuild dropped, on a level walked by
 * `L` (format 5's), arrives held by its 'T' key, its where-slot still
 * naming its old place on the level (topic_cq.c); with another message of
 * its segment live beside it (so that store_check reads the segment's
 * slots), the store checks clean, before and after the level moves on. */
static void test_rebuilt_journey_slot_checks_clean(void)
{
    store_t *s = OPEN_WITH_ARRIVAL_IN_T();
    SEND(s, "t", "beside", 0, 0, T0 + SEC, NULL); /* live in the same segment */
    CHECK_STORE(s);
    SEND(s, "t", "later", 1, 0, T0 + SEC, NULL);
    TU_REQUIRE(MOVE(s, T0 + 2 * SEC, 10, NULL) == 1, "the later message does not arrive");
    CHECK_STORE(s);
    CLOSE(&s);
    s = OPEN_DEFAULT();
    CHECK_STORE(s);
    CLOSE(&s);
}

/* The other side of the case above: a journey on a level served from its
 * CQ (no 'X' record: its slot is its home) whose slot names an index below
 * the level's head has lost its place, and store_check says so. */
static void test_slot_below_level_head_reported(void)
{
    store_t *s = OPEN_DEFAULT();
    SEND(s, "t", "first", 1, 0, T0, NULL);
    uint64_t id = SEND(s, "t", "second", 1, 0, T0 + 10, NULL);
    TU_REQUIRE(MOVE(s, T0 + SEC, 1, NULL) == 1, "the first message does not arrive");
    CHECK_STORE(s);
    CLOSE(&s);
    DIR *d = opendir(g_data);
    TU_REQUIRE(d != NULL, "opendir");
    struct dirent *e;
    uint64_t base = UINT64_MAX;
    while ((e = readdir(d)) != NULL)
        if (sscanf(e->d_name, "slot-%16" SCNx64 ".w", &base) == 1)
            break;
    closedir(d);
    TU_REQUIRE(e != NULL, "no where-slot file");
    char err[1024] = "";
    slot_file_t *f;
    REQUIRE_OK(slot_file_open(g_data, base, 0, &f, err, sizeof err), err);
    slot_t sl = { 0 };
    uint64_t k = 0;
    for (; k < slot_count(f); k++) {
        REQUIRE_OK(slot_get(f, k, &sl, err, sizeof err), err);
        if (sl.id == id)
            break;
    }
    TU_REQUIRE(k < slot_count(f) && sl.queue == 1 && sl.cq_index == 1,
               "the second message's slot: queue %" PRIu32 ", index %" PRIu64, sl.queue, sl.cq_index);
    sl.cq_index = 0; /* the first's place, below the head */
    REQUIRE_OK(slot_put(f, k, &sl, err, sizeof err), err);
    REQUIRE_OK(slot_file_close(f, err, sizeof err), err);
    s = OPEN_DEFAULT();
    CHECK_REFUSAL(store_check(s, err, sizeof err), err, "names level 1, CQ index 0, outside its window", NULL);
    CLOSE(&s);
}

/* Index keys with a name past MSG_MAX_NAME: a key count record with a
 * 256-byte topic and a 1024-byte key (longer than any key a key_buf_t holds,
 * and store_check copied it into one) and a copy index entry of a 256-byte
 * group are reported by store_check with the key; a format-2 lease index
 * entry of a 256-byte group is refused at open as corrupt. */
static void test_damaged_index_keys(void)
{
    uint64_t a;
    store_t *s = open_with_one_lease(&a);
    CLOSE(&s);
    static char kk[1 + MSG_MAX_NAME + 1 + 1 + 2 + MSG_MAX_KEY];
    kk[0] = 'K';
    memset(kk + 1, 't', MSG_MAX_NAME + 1);
    kk[MSG_MAX_NAME + 2] = '\0';
    kk[MSG_MAX_NAME + 3] = (char)(MSG_MAX_KEY >> 8);
    kk[MSG_MAX_NAME + 4] = (char)(MSG_MAX_KEY & 0xff);
    memset(kk + MSG_MAX_NAME + 5, 'k', MSG_MAX_KEY);
    char count[8];
    be64_to(count, 1);
    raw_put(kk, sizeof kk, count, sizeof count, __LINE__);
    s = OPEN_DEFAULT();
    char err[1024] = "";
    int rc = store_check(s, err, sizeof err);
    TU_CHECK(rc == -1 && strstr(err, "corrupt key index entry \"Ktttt") != NULL && strstr(err, "(1284 bytes)") != NULL,
             "store_check of a key count record of a 256-byte topic: rc %d \"%s\"", rc, err);
    CLOSE(&s);
    leveldb_t *db = raw_open(__LINE__);
    leveldb_writebatch_t *wb = leveldb_writebatch_create();
    leveldb_writebatch_delete(wb, kk, sizeof kk);
    raw_write_close(db, wb, __LINE__);

    db = raw_open(__LINE__);
    char yk[64], place[18];
    size_t yklen;
    raw_lease_place(db, a, yk, &yklen, place, __LINE__);
    leveldb_close(db);
    char yd[1 + 8 + MSG_MAX_NAME + 1 + 1 + 8];
    memcpy(yd, yk, 9);
    memset(yd + 9, 'g', MSG_MAX_NAME + 1);
    memcpy(yd + 9 + MSG_MAX_NAME + 1, yk + yklen - 9, 9);  /* 0x00 gen */
    raw_put(yd, sizeof yd, place, sizeof place, __LINE__); /* beside the lease's own */
    s = OPEN_DEFAULT();
    rc = store_check(s, err, sizeof err);
    TU_CHECK(rc == -1 && strstr(err, "corrupt copy index key \"Y") != NULL && strstr(err, "(274 bytes)") != NULL,
             "store_check of a copy index entry of a 256-byte group: rc %d \"%s\"", rc, err);
    CLOSE(&s);
    db = raw_open(__LINE__);
    wb = leveldb_writebatch_create();
    leveldb_writebatch_delete(wb, yd, sizeof yd);
    raw_write_close(db, wb, __LINE__);
    s = OPEN_DEFAULT();
    CHECK_STORE(s);
    CLOSE(&s);

    char jk[1 + MSG_MAX_NAME + 1 + 1 + 8], jv[8];
    jk[0] = 'J';
    memset(jk + 1, 'g', MSG_MAX_NAME + 1);
    jk[MSG_MAX_NAME + 2] = '\0';
    be64_to(jk + MSG_MAX_NAME + 3, a);
    be64_to(jv, T0 + LEASE);
    raw_put(jk, sizeof jk, jv, sizeof jv, __LINE__);
    store_options_t o;
    opts_default(&o);
    rc = store_open(&o, T0, &s, err, sizeof err);
    TU_CHECK(rc == STORE_OPEN_DAMAGED && strstr(err, "corrupt lease index entry (format 2) \"Jggg") != NULL &&
                 strstr(err, "(266 bytes)") != NULL,
             "open with a lease index entry of a 256-byte group: rc %d \"%s\"", rc, err);
    TU_CHECK(s == NULL, "*out must stay NULL");
    if (s != NULL) {
        store_close(s, NULL, 0);
    }
}

/* A clean close writes the memtable out: the next open has no log to replay
 * (with a 64 MiB memtable that replay took 650 ms and 64 MiB of RAM), and
 * finds everything. */
static void test_close_leaves_no_log(void)
{
    store_t *s = OPEN_DEFAULT();
    uint64_t ids[100];
    for (int i = 0; i < 100; i++)
        ids[i] = SEND(s, "t", "x", 0, 0, T0, NULL);
    COMMIT(s);
    TU_CHECK(file_bytes(g_data, ".log", 0) > 0, "the sends are not in the log");
    CLOSE(&s);
    CHECK_EQ_U64((uint64_t)file_bytes(g_data, ".log", 0), 0);
    s = OPEN_DEFAULT();
    GROUP_CREATE(s, "g", "t", 1, T0);
    msg_owned_t m[128];
    int n = LEASE_N(s, "g", "t", 128, LEASE, T0, m);
    TU_CHECK(n == 100 && m[0].m.id == ids[0] && m[99].m.id == ids[99], "after the reopen leased %d", n);
    free_msgs(m, n);
    CHECK_STORE(s);
    CLOSE(&s);
}

/* tu_poll_until's condition: LevelDB's write-ahead logs in g_data hold less
 * than *(long long *)ctx bytes. */
static int leveldb_logs_below(void *ctx)
{
    return file_bytes(g_data, ".log", 0) < *(long long *)ctx;
}

/* A checkpoint that finds LevelDB's write-ahead log past 2 MiB
 * (STORE_LEVELDB_LOG_FLUSH_BYTES, levels/store_internal.h) has the memtable
 * written out on the compactor's thread, so what an open after a kill -9
 * replays stays small: the 64 MiB memtable never fills now, and its log held
 * everything since the open. 4 096 messages with keys of 1 000 bytes (their
 * key-index and index records are LevelDB writes: 8.3 MiB of its log), a
 * checkpoint every MiB of commit log: the logs fall below 4 MiB (2 MiB and
 * what the commits after the last checkpoint wrote), and the store holds
 * every message. */
static void test_checkpoint_writes_out_a_long_leveldb_log(void)
{
    enum {
        MESSAGES = 4096,
        KEY = 1000,
        PER_COMMIT = 32
    };
    store_options_t o;
    opts_default(&o);
    o.sync = 1; /* each commit synced and applied at once: its checkpoint when one is due */
    o.checkpoint_bytes = STORE_CHECKPOINT_MIN_BYTES;
    store_t *s = OPEN(&o);
    char key[KEY + 1], err[512];
    for (int i = 0; i < MESSAGES; i++) {
        uint64_t id, due;
        memset(key, 'a' + i % 26, KEY);
        snprintf(key, sizeof key, "%06d", i); /* distinct keys, each its own index records */
        key[6] = '-';
        REQUIRE_OK(send_raw(s, "t", 1, key, KEY, "p", 1, 0, 0, T0, &id, &due, err, sizeof err), err);
        if (i % PER_COMMIT == PER_COMMIT - 1) {
            COMMIT(s);
        }
    }
    COMMIT(s);
    long long below = 4 << 20;
    int small = tu_poll_until(leveldb_logs_below, &below, 30000, 10) == 0;
    TU_CHECK(small, "LevelDB's logs hold %lld bytes 30 s after %d messages with keys of %d bytes, want < %lld",
             file_bytes(g_data, ".log", 0), MESSAGES, KEY, below);
    store_topic_info_t ti;
    TU_CHECK(store_topic_info(s, "t", 1, &ti) == 1 && ti.appended == MESSAGES, "%" PRIu64 " messages in the topic",
             ti.appended);
    CHECK_STORE(s);
    CLOSE(&s);
}

/* The newest NNNNNN.log of g_data into name; its size, or -1. */
static long newest_log_of_data(char *name, size_t namelen)
{
    DIR *d = opendir(g_data);
    unsigned long long best = 0, number;
    int found = 0;
    struct dirent *e;
    while (d != NULL && (e = readdir(d)) != NULL) {
        if (logsync_log_number(e->d_name, &number) && (!found || number > best)) {
            best = number;
            found = 1;
        }
    }
    if (d != NULL)
        closedir(d);
    snprintf(name, namelen, "%06llu.log", best);
    char path[1200];
    struct stat st;
    snprintf(path, sizeof path, "%s/%s", g_data, name);
    return found && stat(path, &st) == 0 ? (long)st.st_size : -1;
}

/* store_check_dir (--check-data) reads and never writes: after a crash (an
 * unreplayed log) it counts every message and leaves every file as it was;
 * a torn log end is reported (what store_open would cut), not cut, and
 * store_open then cuts it as before; a missing directory is refused. */
static void test_check_dir_reads_only(void)
{
    fflush(NULL);
    pid_t pid = fork();
    TU_REQUIRE(pid >= 0, "fork: %s", strerror(errno));
    if (pid == 0) { /* no CUnit here: the exit status says how far it got */
        store_options_t o;
        opts_default(&o);
        char err[512] = "";
        store_t *c = NULL;
        uint64_t id, due;
        if (store_open(&o, T0, &c, err, sizeof err) != 0)
            _exit(2);
        for (int i = 0; i < 20; i++) {
            if (send_raw(c, "t", 1, NULL, 0, "payload", 7, i % 2 ? 3 : 0, 0, T0, &id, &due, err, sizeof err) != 0 ||
                store_commit(c, err, sizeof err) != 0)
                _exit(3);
        }
        kill(getpid(), SIGKILL);
        _exit(4);
    }
    int status = 0;
    TU_REQUIRE(waitpid(pid, &status, 0) == pid && WIFSIGNALED(status), "the writer failed (status %d)", status);

    store_options_t o;
    opts_default(&o);
    o.create_if_missing = 0;
    store_dir_check_t r;
    char err[1024] = "";
    uint64_t before = dir_digest(g_data);
    int rc = store_check_dir(&o, T0, &r, err, sizeof err);
    TU_REQUIRE(rc == 0, "store_check_dir after a crash: rc %d: %s", rc, err);
    CHECK_EQ_U64(r.counts.messages, 20);
    CHECK_EQ_U64(r.counts.level, 10);
    CHECK_EQ_U64(r.counts.topic, 10);
    /* LevelDB holds no record per message (design-commitlog.md 4a.5 and 4b: the CQs and slots hold them) */
    TU_CHECK(r.counts.records > 0 && r.counts.records < r.counts.messages && !r.torn && r.view[0] != '\0',
             "records %" PRIu64 ", torn %d", r.counts.records, r.torn);
    struct stat st;
    TU_CHECK(stat(r.view, &st) != 0 && errno == ENOENT, "the scratch view %s is left", r.view);
    CHECK_EQ_U64(dir_digest(g_data), before);

    char log[64], path[1200];
    long size = newest_log_of_data(log, sizeof log);
    TU_REQUIRE(size > 40, "no log with records in %s", g_data);
    snprintf(path, sizeof path, "%s/%s", g_data, log);
    FILE *f = fopen(path, "r+b");
    TU_REQUIRE(f != NULL && fseek(f, size - 30, SEEK_SET) == 0, "open %s", path);
    for (int i = 0; i < 30; i++)
        fputc(0, f);
    fclose(f);
    before = dir_digest(g_data);
    rc = store_check_dir(&o, T0, &r, err, sizeof err);
    TU_REQUIRE(rc == 0, "store_check_dir of a torn log end: rc %d: %s", rc, err);
    TU_CHECK(r.torn && strcmp(r.torn_log, log) == 0 && r.torn_offset + r.torn_bytes == (uint64_t)size &&
                 r.torn_bytes >= 30,
             "torn %d in %s at %" PRIu64 " (%" PRIu64 " bytes); want %s of %ld bytes", r.torn, r.torn_log,
             r.torn_offset, r.torn_bytes, log, size);
    CHECK_EQ_U64(r.counts.messages, 20); /* what LevelDB's cut lost, the view's open redid from the commit log */
    CHECK_EQ_U64(dir_digest(g_data), before);
    store_t *s = OPEN(&o);
    TU_CHECK(strstr(store_open_note(s), "ended in a torn write") != NULL, "store_open did not cut: \"%s\"",
             store_open_note(s));
    CLOSE(&s);

    snprintf(path, sizeof path, "%s/missing", g_dir);
    o.path = path;
    rc = store_check_dir(&o, T0, &r, err, sizeof err);
    TU_CHECK(rc == -1 && strstr(err, "does not exist") != NULL && r.view[0] == '\0', "a missing directory: %d \"%s\"",
             rc, err);
}

/* ---- the commit log beside LevelDB (design-commitlog.md, step 4a.1) ------------------ */

/* The value of 'M' name in the closed data directory (*found 0 and 0 when absent). */
static uint64_t raw_meta_u64(const char *name, int *found, int line)
{
    char *dberr = NULL;
    leveldb_options_t *lo = leveldb_options_create();
    leveldb_t *db = leveldb_open(lo, g_data, &dberr);
    TU_CHECK_AT(dberr == NULL && db != NULL, line, "leveldb_open: %s", dberr ? dberr : "?");
    uint64_t v = 0;
    *found = 0;
    if (db != NULL) {
        key_buf_t k;
        key_meta(&k, name);
        leveldb_readoptions_t *ro = leveldb_readoptions_create();
        size_t vlen = 0;
        char *val = leveldb_get(db, ro, k.b, k.n, &vlen, &dberr);
        TU_CHECK_AT(dberr == NULL, line, "leveldb_get M %s: %s", name, dberr ? dberr : "");
        if (val != NULL) {
            *found = 1;
            TU_CHECK_AT(vlen == 8, line, "M %s is %zu bytes, want 8", name, vlen);
            v = vlen == 8 ? be64_get(val) : 0;
            leveldb_free(val);
        }
        leveldb_readoptions_destroy(ro);
        leveldb_close(db);
    }
    leveldb_options_destroy(lo);
    return v;
}

/* Write 'M' name = the bytes b[0..n) into the closed data directory (synced). */
static void raw_meta_put_bytes(const char *name, const char *b, size_t n, int line)
{
    char *dberr = NULL;
    leveldb_options_t *lo = leveldb_options_create();
    leveldb_t *db = leveldb_open(lo, g_data, &dberr);
    TU_REQUIRE_AT(dberr == NULL && db != NULL, line, "leveldb_open: %s", dberr ? dberr : "?");
    key_buf_t k;
    key_meta(&k, name);
    leveldb_writeoptions_t *wo = leveldb_writeoptions_create();
    leveldb_writeoptions_set_sync(wo, 1);
    leveldb_put(db, wo, k.b, k.n, b, n, &dberr);
    TU_CHECK_AT(dberr == NULL, line, "leveldb_put M %s: %s", name, dberr ? dberr : "");
    leveldb_writeoptions_destroy(wo);
    leveldb_close(db);
    leveldb_options_destroy(lo);
}

/* Write 'M' name = v (8 bytes) into the closed data directory. */
static void raw_meta_put(const char *name, uint64_t v, int line)
{
    char b[8];
    be64_put(b, v);
    raw_meta_put_bytes(name, b, sizeof b, line);
}

/* store_close closes the commit log with a clean checkpoint (its marks in
 * LevelDB, `M "clean"` = the checkpoint), and the next open deletes the clean
 * mark before anything could be appended: the redo's protocol is wired into
 * the store's open and close, in that order. */
static void test_log_closed_clean(void)
{
    store_t *s = OPEN_DEFAULT();
    SEND(s, "t", "x", 0, 0, T0, NULL);
    COMMIT(s);
    CLOSE(&s);
    int has_checkpoint = 0, has_clean = 0;
    uint64_t b = raw_meta_u64("checkpoint", &has_checkpoint, __LINE__);
    uint64_t clean = raw_meta_u64("clean", &has_clean, __LINE__);
    TU_CHECK(has_checkpoint && has_clean && clean == b,
             "after a close: checkpoint %d (%" PRIu64 "), clean %d (%" PRIu64 "); want both, equal", has_checkpoint, b,
             has_clean, clean);

    /* an open that is not closed (a crash) leaves no clean mark behind */
    pid_t pid = fork();
    TU_REQUIRE(pid >= 0, "fork: %s", strerror(errno));
    if (pid == 0) {
        store_options_t o;
        opts_default(&o);
        store_t *c = NULL;
        char err[512];
        _exit(store_open(&o, T0, &c, err, sizeof err) == 0 ? 0 : 1);
    }
    int status = 0;
    TU_REQUIRE(waitpid(pid, &status, 0) == pid && WIFEXITED(status) && WEXITSTATUS(status) == 0,
               "the child's open failed (status %d)", status);
    raw_meta_u64("clean", &has_clean, __LINE__);
    TU_CHECK(!has_clean, "an open left the clean mark of the close before it");
    s = OPEN_DEFAULT();
    CHECK_STORE(s);
    CLOSE(&s);
}

/* A directory whose LevelDB says a log batch was applied that the log does
 * not hold lost durable bytes: refused as damaged, naming the commit log and
 * the mark, and nothing lost (LevelDB's own open rewrites its MANIFEST, so
 * the files' bytes are not compared): the mark is still there, and without
 * it the directory opens with its message. */
static void test_log_missing_applied_batch_refused(void)
{
    store_t *s = OPEN_DEFAULT();
    uint64_t id = SEND(s, "t", "x", 0, 0, T0, NULL);
    COMMIT(s);
    CLOSE(&s);
    int found = 0;
    uint64_t applied = raw_meta_u64("applied", &found, __LINE__); /* the end of the SEND's log batch */
    TU_REQUIRE(found && applied > 0, "no applied mark after a commit through the log");
    raw_meta_put("applied", applied + (UINT64_C(1) << 20), __LINE__);
    store_options_t o;
    opts_default(&o);
    char err[1024] = "";
    int rc = store_open(&o, T0, &s, err, sizeof err);
    TU_CHECK(rc == STORE_OPEN_DAMAGED && s == NULL && strstr(err, "commit log") != NULL &&
                 strstr(err, "applied mark") != NULL && strstr(err, "is damaged") != NULL,
             "open: rc %d, want STORE_OPEN_DAMAGED naming the commit log and the applied mark: %s", rc, err);
    CHECK_EQ_U64(raw_meta_u64("applied", &found, __LINE__), applied + (UINT64_C(1) << 20));

    raw_meta_put("applied", applied, __LINE__);
    s = OPEN_DEFAULT();
    GROUP_CREATE(s, "g", "t", 1, T0);
    msg_owned_t m[2];
    int n = LEASE_N(s, "g", "t", 2, LEASE, T0, m);
    TU_CHECK(n == 1 && m[0].m.id == id, "after the refusal leased %d", n);
    free_msgs(m, n);
    CHECK_STORE(s);
    CLOSE(&s);
}

/* The meta records are checked before the commit log's redo may write
 * anything, and an older format is upgraded only after every check passed:
 * an older directory whose level table differs from the configuration is
 * refused as it was, still of its format (it was upgraded, then refused,
 * before the check moved ahead of the redo). */
static void test_older_format_refused_before_upgrade(void)
{
    store_t *s = OPEN_DEFAULT();
    SEND(s, "t", "x", 0, 0, T0, NULL);
    COMMIT(s);
    CLOSE(&s);
    char v4[4];
    be32_put(v4, STORE_FORMAT_SAME_RECORDS + 1);
    raw_meta_put_bytes("format", v4, sizeof v4, __LINE__);
    store_options_t o;
    opts_default(&o);
    char err[512] = "";
    TU_REQUIRE(lvl_table_parse("1s 5s", &o.levels, err, sizeof err) == 0, "%s", err);
    int rc = store_open(&o, T0, &s, err, sizeof err);
    CHECK_REFUSAL(rc, err, "level table mismatch", "");
    char *dberr = NULL;
    leveldb_options_t *lo = leveldb_options_create();
    leveldb_t *db = leveldb_open(lo, g_data, &dberr);
    TU_REQUIRE(dberr == NULL && db != NULL, "leveldb_open: %s", dberr ? dberr : "?");
    key_buf_t k;
    key_meta(&k, "format");
    leveldb_readoptions_t *ro = leveldb_readoptions_create();
    size_t vlen = 0;
    char *v = leveldb_get(db, ro, k.b, k.n, &vlen, &dberr);
    TU_CHECK(v != NULL && vlen == 4 && be32_get(v) == STORE_FORMAT_SAME_RECORDS + 1,
             "after the refusal the format is %u, want %d", v != NULL && vlen == 4 ? be32_get(v) : 0,
             STORE_FORMAT_SAME_RECORDS + 1);
    leveldb_free(v);
    leveldb_readoptions_destroy(ro);
    leveldb_close(db);
    leveldb_options_destroy(lo);
}

/* A segment size the log cannot use is refused before the directory is
 * touched, naming the size and the bounds. */
static void test_log_segment_size_refused(void)
{
    store_options_t o;
    opts_default(&o);
    o.segment_bytes = (UINT64_C(1) << 20) + 100;
    store_t *s = NULL;
    char err[512] = "";
    int rc = store_open(&o, T0, &s, err, sizeof err);
    CHECK_REFUSAL(rc, err, "commit-log segment size 1048676 bytes", "multiple of 4096");
    TU_CHECK(s == NULL && access(g_data, F_OK) != 0, "the refused open made %s", g_data);
}

/* The commit log is checkpointed every checkpoint_bytes of applied log (the
 * broker sets a quarter of its disk reserve: what an open after a crash or a
 * broken store redoes into LevelDB, so the room a reopen on a full disk
 * needs): 3 MiB of synced commits with a 1 MiB interval, then a kill -9,
 * leave at most the interval and one commit past the last checkpoint (at the
 * default 64 MiB, all 3 MiB when the commits take under a second). An
 * interval outside [1 MiB, 64 MiB] is refused naming it. */
static void test_log_checkpoint_interval(void)
{
    enum {
        COMMITS = 30,
        PAYLOAD = 100 << 10
    };
    store_options_t o;
    opts_default(&o);
    o.checkpoint_bytes = 100;
    store_t *s = NULL;
    char err[512] = "";
    int rc = store_open(&o, T0, &s, err, sizeof err);
    CHECK_REFUSAL(rc, err, "commit-log checkpoint interval 100 bytes", "between 1048576 and 67108864");

    o.checkpoint_bytes = STORE_CHECKPOINT_MIN_BYTES;
    o.sync = 1; /* each commit synced and applied at once */
    pid_t pid = fork();
    TU_REQUIRE(pid >= 0, "fork: %s", strerror(errno));
    if (pid == 0) {
        static char payload[PAYLOAD];
        store_t *c = NULL;
        uint64_t id, due;
        if (store_open(&o, T0, &c, err, sizeof err) != 0)
            _exit(1);
        for (int i = 0; i < COMMITS; i++) {
            memset(payload, 'a' + i % 26, sizeof payload);
            if (send_raw(c, "t", 1, "", 0, payload, sizeof payload, 0, 0, T0, &id, &due, err, sizeof err) != 0 ||
                store_commit(c, err, sizeof err) != 0)
                _exit(2);
        }
        _exit(0); /* a kill -9: no close, no checkpoint of its own */
    }
    int status = 0;
    TU_REQUIRE(waitpid(pid, &status, 0) == pid && WIFEXITED(status) && WEXITSTATUS(status) == 0,
               "the child's commits failed (status %d)", status);
    int has_checkpoint = 0, has_applied = 0;
    uint64_t b = raw_meta_u64("checkpoint", &has_checkpoint, __LINE__);
    uint64_t applied = raw_meta_u64("applied", &has_applied, __LINE__);
    TU_REQUIRE(has_checkpoint && has_applied && applied >= b, "checkpoint %d (%" PRIu64 "), applied %d (%" PRIu64 ")",
               has_checkpoint, b, has_applied, applied);
    TU_CHECK(applied - b <= STORE_CHECKPOINT_MIN_BYTES + 2 * PAYLOAD,
             "%" PRIu64 " bytes of log applied past the last checkpoint after %d commits of %d bytes, with a "
             "checkpoint due every %" PRIu64,
             applied - b, COMMITS, PAYLOAD, (uint64_t)STORE_CHECKPOINT_MIN_BYTES);
    s = OPEN(&o);
    store_topic_info_t ti;
    TU_CHECK(store_topic_info(s, "t", 1, &ti) == 1 && ti.appended == COMMITS, "after the kill -9: %" PRIu64 " SENDs",
             ti.appended);
    CHECK_STORE(s);
    CLOSE(&s);
}

/* The first apply after a reopen at a later clock takes no checkpoint of its
 * own: the open's floor raises the log's next offset by the clock's time
 * since the last batch (1 MiB a millisecond, store.h), and a checkpoint's
 * interval counts the applied batches' own bytes, not that jump. A kill -9
 * after one synced commit an hour later finds the checkpoint mark the open
 * wrote, below the applied mark (it took a checkpoint at that commit). A child
 * slower than the interval's second (a checkpoint due anyway) tries again. */
static void test_log_reopen_later_no_checkpoint(void)
{
    store_t *s = OPEN_DEFAULT();
    SEND(s, "t", "x", 0, 0, T0, NULL);
    COMMIT(s);
    CLOSE(&s);
    store_options_t o;
    opts_default(&o);
    o.sync = 1;
    int attempts = 0, status = 0;
    do {
        attempts++;
        uint64_t now = T0 + (uint64_t)attempts * HOUR;
        pid_t pid = fork();
        TU_REQUIRE(pid >= 0, "fork: %s", strerror(errno));
        if (pid == 0) {
            uint64_t t0 = tu_now_mono_us(), id, due;
            store_t *c = NULL;
            char err[512];
            if (store_open(&o, now, &c, err, sizeof err) != 0)
                _exit(1);
            if (send_raw(c, "t", 1, "", 0, "y", 1, 0, 0, now, &id, &due, err, sizeof err) != 0 ||
                store_commit(c, err, sizeof err) != 0)
                _exit(2);
            _exit(tu_now_mono_us() - t0 < 900000 ? 0 : 3); /* a kill -9: no close, no checkpoint of its own */
        }
        TU_REQUIRE(waitpid(pid, &status, 0) == pid && WIFEXITED(status), "the child died (status %d)", status);
    } while (WEXITSTATUS(status) == 3 && attempts < 5);
    TU_REQUIRE(WEXITSTATUS(status) == 0, "the child's open or commit failed (exit %d, %d attempts)",
               WEXITSTATUS(status), attempts);
    int has_checkpoint = 0, has_applied = 0;
    uint64_t b = raw_meta_u64("checkpoint", &has_checkpoint, __LINE__);
    uint64_t applied = raw_meta_u64("applied", &has_applied, __LINE__);
    TU_CHECK(has_checkpoint && has_applied && applied > b,
             "after a commit at a later clock: checkpoint %" PRIu64 ", applied %" PRIu64
             ": want the open's checkpoint below the commit's end",
             b, applied);
    s = OPEN_DEFAULT();
    store_topic_info_t ti;
    TU_CHECK(store_topic_info(s, "t", 1, &ti) == 1 && ti.appended == 1 + (uint64_t)attempts,
             "after the kill -9: %" PRIu64 " SENDs, want %d", ti.appended, 1 + attempts);
    CHECK_STORE(s);
    CLOSE(&s);
}

/* A directory keeps the segment size its log was made with: opened with
 * another one configured (a check, a restore on a host configured
 * otherwise), it opens with its messages, and new segments take its size. */
static void test_log_keeps_its_segment_size(void)
{
    store_options_t o;
    opts_default(&o);
    o.segment_bytes = UINT64_C(1) << 20;
    store_t *s = OPEN(&o);
    uint64_t id = SEND(s, "t", "x", 0, 0, T0, NULL);
    COMMIT(s);
    CLOSE(&s);
    o.segment_bytes = UINT64_C(2) << 20;
    s = OPEN(&o);
    char big[200000];
    memset(big, 'b', sizeof big);
    char err[512] = "";
    for (int i = 0; i < 8; i++) { /* 1.6 MB: into a second segment */
        uint64_t bid, due;
        REQUIRE_OK(send_raw(s, "big", 3, NULL, 0, big, sizeof big, 0, 0, T0, &bid, &due, err, sizeof err), err);
        COMMIT(s);
    }
    CLOSE(&s);
    s = OPEN(&o);
    GROUP_CREATE(s, "g", "t", 1, T0);
    msg_owned_t m[2];
    int n = LEASE_N(s, "g", "t", 2, LEASE, T0, m);
    TU_CHECK(n == 1 && m[0].m.id == id, "leased %d", n);
    free_msgs(m, n);
    CHECK_STORE(s);
    CLOSE(&s);
    DIR *d = opendir(g_data);
    TU_REQUIRE(d != NULL, "opendir %s", g_data);
    struct dirent *e;
    int segments = 0;
    while ((e = readdir(d)) != NULL) {
        char path[1200];
        struct stat st;
        snprintf(path, sizeof path, "%s/%s", g_data, e->d_name);
        if (strncmp(e->d_name, "clog-", 5) == 0 && stat(path, &st) == 0) {
            segments++;
            TU_CHECK(st.st_size == 1 << 20, "%s holds %lld bytes, not the directory's 1 MiB", e->d_name,
                     (long long)st.st_size);
        }
    }
    closedir(d);
    TU_CHECK(segments >= 2, "%d segments after 1.6 MB of commits", segments);
}

/* The commit-log segments in g_data. */
static int segments_in_data(void)
{
    DIR *d = opendir(g_data);
    TU_REQUIRE(d != NULL, "opendir %s", g_data);
    struct dirent *e;
    int n = 0;
    while ((e = readdir(d)) != NULL)
        n += strncmp(e->d_name, "clog-", 5) == 0 && strlen(e->d_name) == 25;
    closedir(d);
    return n;
}

/* tu_poll_until's condition: store_log_checkpoint_step taken, no checkpoint
 * running on the log's thread any more (a failed step ends the poll too:
 * the caller checks the store). */
static int thread_checkpoint_settled(void *arg)
{
    store_t *s = arg;
    char err[512];
    return store_log_checkpoint_step(s, err, sizeof err) != 0 || !store_log_checkpoint_running(s);
}

static int settle_thread_checkpoint(store_t *s)
{
    return tu_poll_until(thread_checkpoint_settled, s, 30000, 1);
}

/* Thirty 200 kB SENDs, each committed: 6 MB of payload in fifteen 1 MiB
 * segments (a batch holding a message keeps room for twice its payload and a
 * quarter segment, so two fit in one); a checkpoint one of them began on
 * the log's thread (checkpoint_on_thread) is settled before the next, so
 * that its recycling lands where a checkpoint on the owner's would, whatever
 * the machine's speed. How many commits left one running there. */
static int send_six_megabytes(store_t *s, int round)
{
    int running = 0;
    static char big[200000];
    memset(big, 'a' + round, sizeof big);
    char err[512] = "";
    for (int i = 0; i < 30; i++) {
        uint64_t id, due;
        REQUIRE_OK(send_raw(s, "t", 1, NULL, 0, big, sizeof big, 0, 0, T0, &id, &due, err, sizeof err), err);
        COMMIT(s);
        running += store_log_checkpoint_running(s);
        TU_REQUIRE(settle_thread_checkpoint(s) == 0 && !store_broken(s),
                   "a checkpoint on the log's thread still runs after 30 s, or failed");
    }
    return running;
}

/* The topic log's GC past retention (1 s): every message collected. */
static void collect_all(store_t *s)
{
    char err[512] = "";
    int work = 0;
    REQUIRE_OK(store_maintain(s, T0 + 2 * SEC, 1000, &work, err, sizeof err), err);
    store_topic_info_t ti;
    TU_CHECK(store_topic_info(s, "t", 1, &ti) == 1 && ti.retained == 0, "the GC left %" PRIu64, ti.retained);
}

/* Segments wholly below the checkpoint are recycled (taken again by the log
 * as spares) once the topic's GC collected their messages: after six
 * segments' worth of commits, the GC, a close and an open (a checkpoint each)
 * and six more, the directory holds about six segments, not twelve, and
 * counts every message. */
static void test_log_segments_recycled(void)
{
    store_options_t o;
    opts_default(&o);
    o.segment_bytes = UINT64_C(1) << 20;
    o.retention_ms = SEC; /* no group: the GC collects them after it, and their segments may go (design-commitlog.md
                             4b: a topic CQ entry reads its record until then) */
    store_t *s = OPEN(&o);
    send_six_megabytes(s, 0);
    collect_all(s);
    CLOSE(&s);
    int first = segments_in_data();
    TU_CHECK(first >= 6, "%d segments after 6 MB of commits", first);
    s = OPEN(&o);
    send_six_megabytes(s, 1);
    collect_all(s);
    CLOSE(&s);
    int second = segments_in_data();
    TU_CHECK(second <= first + 1, "%d segments after 12 MB of commits, %d after the first 6: none recycled", second,
             first);
    s = OPEN(&o);
    store_topic_info_t ti;
    TU_CHECK(store_topic_info(s, "t", 1, &ti) == 1 && ti.appended == 60, "topic holds %" PRIu64, ti.appended);
    CHECK_STORE(s);
    CLOSE(&s);
}

/* With checkpoint_on_thread the checkpoints run on the commit log's thread
 * and the store goes on meanwhile; their outcome, taken by the next apply or
 * by store_log_checkpoint_step, recycles the segments below them while the
 * store stays open: rounds of send_six_megabytes, each collected, add about
 * one segment a round after the first two (the recycled ones come back as
 * spares), as a checkpoint on the owner does; without the recycling they add
 * fifteen a round (120 segments); everything is counted after a reopen. The
 * one a round is bounded: it levels off at two rounds' segments and one (31
 * from the 16th round on, in a run of 30). The commits are not synced, so a round is
 * applied, and checkpointed, at once at its GC; the GC's own decrements of
 * the last segments' live counts are applied after that checkpoint, and
 * those segments are recycled at the next round's. (Each commit waits for the
 * thread's checkpoint: run free, a checkpoint the commits outrun recycles
 * later, and the pool grows with the lag — 33 segments here against 22 on a
 * quiet machine, 49 on a busy one.) */
static void test_checkpoint_on_thread(void)
{
    store_options_t o;
    opts_default(&o);
    o.segment_bytes = UINT64_C(1) << 20;
    o.retention_ms = SEC;
    o.checkpoint_bytes = STORE_CHECKPOINT_MIN_BYTES;
    o.checkpoint_on_thread = 1;
    store_t *s = OPEN(&o);
    int ran = 0, after[7] = { 0 };
    for (int round = 0; round < 7; round++) {
        ran += send_six_megabytes(s, round);
        collect_all(s);
        after[round] = segments_in_data();
    }
    ran += send_six_megabytes(s, 7); /* its checkpoints cover the last GC's deletes */
    TU_CHECK(ran, "no checkpoint was seen running on the log's thread");
    int n = segments_in_data();
    TU_CHECK(n <= after[1] + 8, /* a checkpoint on the owner leaves the same: 17 after the second round, 23 here */
             "%d segments after 48 MB of commits, %d after the second round of six: not recycled while open", n,
             after[1]);
    CHECK_STORE(s);
    CLOSE(&s);
    s = OPEN(&o);
    store_topic_info_t ti;
    TU_CHECK(store_topic_info(s, "t", 1, &ti) == 1 && ti.appended == 240, "topic holds %" PRIu64, ti.appended);
    CHECK_STORE(s);
    CLOSE(&s);
}

/* Where-slot files in g_data whose segment is not there (left from a
 * segment recycled or removed). */
static int orphan_slot_files(void)
{
    DIR *d = opendir(g_data);
    TU_REQUIRE(d != NULL, "opendir %s", g_data);
    struct dirent *e;
    int n = 0;
    while ((e = readdir(d)) != NULL) {
        char seg[64], path[1100];
        unsigned long long base;
        if (strlen(e->d_name) != 23 || sscanf(e->d_name, "slot-%16llx.w", &base) != 1)
            continue;
        snprintf(seg, sizeof seg, "clog-%016llx.seg", base);
        snprintf(path, sizeof path, "%s/%s", g_data, seg);
        n += access(path, F_OK) != 0;
    }
    closedir(d);
    return n;
}

/* Where-slot files in g_data. */
static int slot_files_in_data(void)
{
    DIR *d = opendir(g_data);
    TU_REQUIRE(d != NULL, "opendir %s", g_data);
    struct dirent *e;
    int n = 0;
    while ((e = readdir(d)) != NULL)
        n += strncmp(e->d_name, "slot-", 5) == 0;
    closedir(d);
    return n;
}

/* Descriptors of this process on deleted where-slot files. */
static int deleted_slot_fds(void)
{
    DIR *d = opendir("/proc/self/fd");
    TU_REQUIRE(d != NULL, "opendir /proc/self/fd");
    struct dirent *e;
    int n = 0;
    while ((e = readdir(d)) != NULL) {
        char link[300], target[1200]; /* "/proc/self/fd/" and a d_name of up to 255 bytes */
        snprintf(link, sizeof link, "/proc/self/fd/%s", e->d_name);
        ssize_t len = readlink(link, target, sizeof target - 1);
        if (len <= 0)
            continue;
        target[len] = '\0';
        n += strstr(target, "/slot-") != NULL && strstr(target, "(deleted)") != NULL;
    }
    closedir(d);
    return n;
}

/* The where-slot files of recycled segments go: while the store is open,
 * at the checkpoint after their recycling (a round of commits with nothing
 * freed leaves none, and no descriptor on a deleted one), at a clean close
 * all of them, and an open deletes one an older broker left (they used to
 * stay for good, one per segment ever filled, each held open) and says so. */
static void test_recycled_segments_slots_deleted(void)
{
    store_options_t o;
    opts_default(&o);
    o.segment_bytes = UINT64_C(1) << 20;
    o.checkpoint_bytes = STORE_CHECKPOINT_MIN_BYTES; /* checkpoints, recycling and sweeps while the commits run */
    o.retention_ms = SEC;
    store_t *s = OPEN(&o);
    for (int round = 0; round < 3; round++) {
        send_six_megabytes(s, round);
        collect_all(s);
    }
    send_six_megabytes(s, 3); /* its checkpoints recycle the segments the last GC freed */
    send_six_megabytes(s, 4); /* and its own sweep their slot files: nothing is freed since */
    int open_orphans = orphan_slot_files(), open_deleted = deleted_slot_fds(), slots = slot_files_in_data();
    printf("\n    30 segments' worth of commits, 18 collected: %d segment files, %d where-slot files, %d without a "
           "segment, %d descriptors on deleted ones ",
           segments_in_data(), slots, open_orphans, open_deleted);
    TU_CHECK(slots < 30, "%d where-slot files after 30 segments' worth of commits: none deleted", slots);
    TU_CHECK(open_orphans == 0, "%d where-slot files of recycled segments while open", open_orphans);
    TU_CHECK(open_deleted == 0, "%d descriptors on deleted where-slot files", open_deleted);
    /* the last two rounds collected, then 11 commits of 200 kB: the checkpoint they reach recycles those segments,
       and the close comes before the next one would sweep them */
    collect_all(s);
    static char big[200000];
    memset(big, 'z', sizeof big);
    char err[512] = "";
    for (int i = 0; i < 11; i++) {
        uint64_t id, due;
        REQUIRE_OK(send_raw(s, "t", 1, NULL, 0, big, sizeof big, 0, 0, T0, &id, &due, err, sizeof err), err);
        COMMIT(s);
    }
    int pending = orphan_slot_files();
    TU_CHECK(pending > 0, "no where-slot file left for the close to delete (%d)", pending);
    CLOSE(&s);
    TU_CHECK(orphan_slot_files() == 0, "%d where-slot files of recycled segments after a clean close",
             orphan_slot_files());

    /* a slot file an older broker left: a segment base below every segment */
    char from[1100], to[1100];
    DIR *d = opendir(g_data);
    TU_REQUIRE(d != NULL, "opendir");
    struct dirent *e;
    from[0] = '\0';
    while ((e = readdir(d)) != NULL)
        if (strncmp(e->d_name, "slot-", 5) == 0 && from[0] == '\0')
            snprintf(from, sizeof from, "%s/%s", g_data, e->d_name);
    closedir(d);
    TU_REQUIRE(from[0] != '\0', "a where-slot file to copy");
    snprintf(to, sizeof to, "%s/slot-%016llx.w", g_data, (unsigned long long)o.segment_bytes);
    char cmd[2400];
    snprintf(cmd, sizeof cmd, "cp '%s' '%s'", from, to);
    TU_REQUIRE(system(cmd) == 0, "%s", cmd);
    TU_REQUIRE(orphan_slot_files() == 1, "the planted file is an orphan");
    s = OPEN(&o);
    TU_CHECK(access(to, F_OK) != 0, "the open left %s", to);
    TU_CHECK(strstr(store_open_note(s), "deleted 1 where-slot file of recycled commit-log segments") != NULL,
             "the open's note: \"%s\"", store_open_note(s));
    store_topic_info_t ti;
    TU_CHECK(store_topic_info(s, "t", 1, &ti) == 1 && ti.appended == 161, "topic holds %" PRIu64, ti.appended);
    CHECK_STORE(s);
    CLOSE(&s);
}

/* A batch whose LevelDB writes no segment can hold (an EXEC of many SENDs)
 * is written beside the log, after a checkpoint at the log's end: the commit
 * succeeds, the commits after it go through the log again, and a crash after
 * them (the redo from the checkpoint) keeps all of them. */
static int commit_big_batch_then_small(store_t *c, char *err, size_t errlen)
{
    static char big[200000];
    memset(big, 'b', sizeof big);
    uint64_t id, due;
    /* 3 MB of LevelDB writes in one batch, 1 MiB segments: a batch of SENDs cannot be it (its messages are log
       records, so it is cut to fit its segment), nor since design-commitlog.md 4b their arrival (a topic CQ
       entry); a due move of 15 large retries (each a level entry moved to its group's retry queue, the message
       copied in LevelDB) is — sent, leased and failed onto level 1 one to a commit, then moved together */
    msg_owned_t m[15];
    int n = 0;
    /* g takes only what is sent from now on (the hole writer's small SENDs are in t's log before) */
    if (store_group_create(c, "g", 1, "t", 1, 0, -1, T0, err, errlen) != 0 || store_commit(c, err, errlen) != 0)
        return -1;
    for (int i = 0; i < 15; i++)
        if (send_raw(c, "t", 1, NULL, 0, big, sizeof big, 0, 0, T0, &id, &due, err, errlen) != 0 ||
            store_commit(c, err, errlen) != 0)
            return -1;
    if (store_lease(c, "g", 1, "t", 1, 15, 60 * SEC, T0, m, &n, err, errlen) != 0 || store_commit(c, err, errlen) != 0)
        return -1;
    uint64_t ids[15];
    for (int i = 0; i < n; i++) {
        ids[i] = m[i].m.id;
        msg_owned_free(&m[i]);
    }
    store_fail_req_t retry = { .level = 1, .reason = "again", .reason_len = 5 };
    for (int i = 0; i < n; i++) {
        int found = 0;
        if (store_fail(c, "g", 1, ids[i], &retry, T0, &found, &due, err, errlen) != 0 || !found ||
            store_commit(c, err, errlen) != 0)
            return -1;
    }
    int moved = 0, ready = 0;
    if (n != 15 || store_move_due(c, due, 100, &moved, &ready, err, errlen) != 0 || store_commit(c, err, errlen) != 0)
        return -1;
    if (moved != 15) {
        snprintf(err, errlen, "leased %d, moved %d of 15", n, moved);
        return -1;
    }
    for (int i = 0; i < 5; i++)
        if (send_raw(c, "t", 1, NULL, 0, "small", 5, 0, 0, T0, &id, &due, err, errlen) != 0 ||
            store_commit(c, err, errlen) != 0)
            return -1;
    return 0;
}

static void test_log_batch_beside_the_log(void)
{
    char err[512] = "";
    pid_t pid = fork();
    TU_REQUIRE(pid >= 0, "fork: %s", strerror(errno));
    if (pid == 0) {
        store_options_t o;
        opts_default(&o);
        o.segment_bytes = UINT64_C(1) << 20;
        store_t *c = NULL;
        if (store_open(&o, T0, &c, err, sizeof err) != 0)
            _exit(2);
        if (commit_big_batch_then_small(c, err, sizeof err) != 0) {
            fprintf(stderr, "child: %s\n", err);
            _exit(3);
        }
        kill(getpid(), SIGKILL);
        _exit(4);
    }
    int status = 0;
    TU_REQUIRE(waitpid(pid, &status, 0) == pid && WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL,
               "the child failed (status %d)", status);
    store_options_t o;
    opts_default(&o);
    o.segment_bytes = UINT64_C(1) << 20;
    store_t *s = OPEN(&o);
    store_topic_info_t ti;
    TU_CHECK(store_topic_info(s, "t", 1, &ti) == 1 && ti.appended == 20, "topic holds %" PRIu64 " of 20", ti.appended);
    CHECK_STORE(s);
    CLOSE(&s);
}

/* The child of the hole cases: ten small SENDs, each committed, its log
 * synced and the batch applied (into LevelDB's log, unsynced), then with big_after one batch no segment of
 * 1 MiB can hold, written beside the log after a checkpoint (its mark in
 * LevelDB's log after the ten); then a kill -9. */
static void __attribute__((noreturn)) hole_writer(int big_after)
{
    store_options_t o;
    opts_default(&o);
    o.segment_bytes = UINT64_C(1) << 20;
    char err[512] = "";
    store_t *c = NULL;
    uint64_t id, due;
    if (store_open(&o, T0, &c, err, sizeof err) != 0)
        _exit(2);
    for (int i = 0; i < 10; i++)
        if (send_raw(c, "t", 1, NULL, 0, "small", 5, 0, 0, T0, &id, &due, err, sizeof err) != 0 ||
            store_commit(c, err, sizeof err) != 0 || store_log_sync(c, err, sizeof err) != 0 ||
            store_apply_durable(c, err, sizeof err) != 0)
            _exit(3);
    if (big_after && commit_big_batch_then_small(c, err, sizeof err) != 0)
        _exit(4);
    kill(getpid(), SIGKILL);
    _exit(5);
}

/* The offsets of the first and last `M "checkpoint"` key in the file at path
 * (-1 when none), and of the last one more than 100 000 bytes before the
 * last (the mark before a batch written beside the log; -1 when none). */
static void checkpoint_keys_in(const char *path, long *first, long *last, long *big_mark)
{
    key_buf_t k;
    key_meta(&k, "checkpoint");
    *first = *last = *big_mark = -1;
    FILE *f = fopen(path, "rb");
    TU_REQUIRE(f != NULL, "open %s", path);
    static char buf[8 << 20];
    size_t n = fread(buf, 1, sizeof buf, f);
    fclose(f);
    for (size_t at = 0; at + k.n <= n; at++)
        if (memcmp(buf + at, k.b, k.n) == 0) {
            *first = *first < 0 ? (long)at : *first;
            *big_mark = *last >= 0 && (long)at - *last > 100000 ? *last : *big_mark;
            *last = (long)at;
        }
}

/* A hole in LevelDB's log (damage with whole records after it: LevelDB's
 * paranoid open refuses it) past the commit log's last checkpoint mark is a
 * power cut's loss of unsynced writes: the open replays past it (its bytes
 * kept beside the log) and the redo from the checkpoint restores every
 * batch. The same damage before a checkpoint mark (writes the checkpoint
 * made durable) is refused as damage, the log left as it was: amid the
 * commits before a batch written beside the log (its checkpoint's mark),
 * and inside that batch's own record (in no commit-log batch: the mark
 * written after it). */
static void test_log_hole_past_checkpoint(void)
{
    char err[1024] = "", log[64], path[1200];
    for (int below = 0; below < 3; below++) {
        fflush(NULL);
        pid_t pid = fork();
        TU_REQUIRE(pid >= 0, "fork: %s", strerror(errno));
        if (pid == 0)
            hole_writer(below > 0);
        int status = 0;
        TU_REQUIRE(waitpid(pid, &status, 0) == pid && WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL,
                   "the child failed (status %d)", status);
        long size = newest_log_of_data(log, sizeof log);
        snprintf(path, sizeof path, "%s/%s", g_data, log);
        long first, last, big_mark;
        checkpoint_keys_in(path, &first, &last, &big_mark);
        TU_REQUIRE(first >= 0 && size > 0, "no checkpoint mark in %s", path);
        /* 0, past: amid the ten commits after the last mark (the open's, unless a second passed: a checkpoint);
           1, below: amid them, before the big batch's mark; 2, below: inside the big batch's record */
        long at = below == 0 ? last + (size - last) / 3 : below == 1 ? (first + big_mark) / 2 : (big_mark + last) / 2;
        TU_REQUIRE(below == 0   ? size - last > 1000
                   : below == 1 ? big_mark - first > 1000
                                : last - big_mark > 100000,
                   "log of %ld bytes, marks at %ld, %ld and %ld", size, first, big_mark, last);
        FILE *f = fopen(path, "r+b");
        TU_REQUIRE(f != NULL && fseek(f, at, SEEK_SET) == 0 && fwrite("\x5a\x5a\x5a\x5a", 1, 4, f) == 4 &&
                       fclose(f) == 0,
                   "damage %s", path);
        store_options_t o;
        opts_default(&o);
        o.segment_bytes = UINT64_C(1) << 20;
        store_t *s = NULL;
        err[0] = '\0';
        int rc = store_open(&o, T0, &s, err, sizeof err);
        if (below) {
            TU_CHECK(rc == STORE_OPEN_DAMAGED && strstr(err, "below the commit log's checkpoint mark") != NULL &&
                         strstr(err, log) != NULL,
                     "damage below the checkpoint: rc %d \"%s\"", rc, err);
            struct stat st;
            TU_CHECK(stat(path, &st) == 0 && st.st_size == size, "the damaged log was changed");
            if (rc == 0)
                CLOSE(&s);
            tu_rmtree(g_data);
            continue;
        }
        TU_REQUIRE(rc == 0, "a hole past the checkpoint: rc %d \"%s\"", rc, err);
        const char *note = store_open_note(s);
        TU_CHECK(strstr(note, "past the commit log's checkpoint mark") != NULL && strstr(note, ".hole-") != NULL,
                 "note: \"%s\"", note);
        const char *hole = strstr(note, ".hole-");
        char kept[1300];
        struct stat st;
        snprintf(kept, sizeof kept, "%s.hole-%ld", path, hole ? strtol(hole + 6, NULL, 10) : -1L);
        TU_CHECK(stat(kept, &st) == 0 && st.st_size > 0 && hole && strtol(hole + 6, NULL, 10) <= at,
                 "the hole's bytes are not kept in %s", kept);
        store_topic_info_t ti;
        TU_CHECK(store_topic_info(s, "t", 1, &ti) == 1 && ti.appended == 10, "topic holds %" PRIu64 " of 10",
                 ti.appended);
        CHECK_STORE(s);
        CLOSE(&s);
        s = OPEN(&o);
        TU_CHECK(store_open_note(s)[0] == '\0', "a second open found the hole again: \"%s\"", store_open_note(s));
        TU_CHECK(store_topic_info(s, "t", 1, &ti) == 1 && ti.appended == 10, "after a second open %" PRIu64,
                 ti.appended);
        CLOSE(&s);
        tu_rmtree(g_data);
    }
}

/* ---- a CQ file below a head LevelDB may lose (design-commitlog.md, "Where the branch stands after s45") ---- */

/* Where the crash cuts LevelDB's newest log: its name and its size right
 * after the child's open (whose checkpoint mark is the last one the cut
 * keeps), written by the child into g_dir/cut. */
static void cut_file_path(char *path, size_t len)
{
    snprintf(path, len, "%s/cut", g_dir);
}

/* Whether g_data holds queue's CQ file starting at index. */
static int cq_file_present(uint32_t queue, uint64_t index)
{
    char name[64], path[1200];
    struct stat st;
    cq_file_name(queue, index, name, sizeof name);
    snprintf(path, sizeof path, "%s/%s", g_data, name);
    return stat(path, &st) == 0;
}

/* Commit, sync the log and apply what it covers to LevelDB (unsynced): the
 * redo's apply, where a CQ's head move is made. 0, or -1 with err. */
static int commit_and_apply(store_t *c, char *err, size_t errlen)
{
    return store_commit(c, err, errlen) != 0 || store_log_sync(c, err, errlen) != 0 ||
                   store_apply_durable(c, err, errlen) != 0
               ? -1
               : 0;
}

/* The child's step after its open: what moves a CQ's head, each commit
 * applied. 0, or -1 with err. */
typedef int (*head_move_fn)(store_t *c, char *err, size_t errlen);

/* The child: open at T0 (the parent's clock: a later one raises the log's
 * floor, and the first apply after that is a checkpoint), record the cut
 * (LevelDB's newest log and its size now, the open's checkpoint mark in it),
 * run move, and die by SIGKILL before the next checkpoint (one a second). */
static void __attribute__((noreturn)) move_head_then_die(head_move_fn move)
{
    store_options_t o;
    opts_default(&o);
    char err[1024] = "", log[64], path[700];
    store_t *c = NULL;
    if (store_open(&o, T0, &c, err, sizeof err) != 0)
        goto fail;
    long size = newest_log_of_data(log, sizeof log);
    cut_file_path(path, sizeof path);
    FILE *f = fopen(path, "w");
    if (size < 0 || f == NULL || fprintf(f, "%s %ld\n", log, size) < 0 || fclose(f) != 0) {
        snprintf(err, sizeof err, "cannot record the cut (log %s, %ld bytes) in %s", log, size, path);
        goto fail;
    }
    if (move(c, err, sizeof err) != 0)
        goto fail;
    kill(getpid(), SIGKILL);
fail:
    fprintf(stderr, "child: %s\n", err);
    _exit(3);
}

/* A crash, then a power cut: move runs in a child killed by SIGKILL (the
 * commit log, the CQ files and the slots keep what it wrote: the page cache
 * kept them), then LevelDB's newest log is cut back to its size at the
 * child's open — every LevelDB write since that checkpoint lost, as a power
 * cut may lose them (never synced). 1 when cut so; 0 when a second
 * checkpoint got in first (the child ran a second or longer: a busy
 * machine), or LevelDB started a new log: the round proves nothing, the
 * caller runs it again. */
static int crash_losing_leveldb_past_checkpoint(head_move_fn move)
{
    fflush(NULL);
    pid_t pid = fork();
    TU_REQUIRE(pid >= 0, "fork: %s", strerror(errno));
    if (pid == 0)
        move_head_then_die(move);
    int status = 0;
    TU_REQUIRE(waitpid(pid, &status, 0) == pid && WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL,
               "the child failed (status %d)", status);
    char path[1200], log[64] = "", now_log[64];
    long at = -1;
    cut_file_path(path, sizeof path);
    FILE *f = fopen(path, "r");
    TU_REQUIRE(f != NULL, "no cut recorded in %s", path);
    int got = fscanf(f, "%63s %ld", log, &at);
    fclose(f);
    TU_REQUIRE(got == 2, "no cut recorded in %s", path);
    long size = newest_log_of_data(now_log, sizeof now_log);
    snprintf(path, sizeof path, "%s/%s", g_data, log);
    long first, last, big_mark;
    checkpoint_keys_in(path, &first, &last, &big_mark);
    if (strcmp(now_log, log) != 0 || last >= at) {
        fprintf(stderr,
                "\n  (LevelDB's newest log %s, %ld bytes, a checkpoint mark at %ld; at the cut %s, %ld bytes: "
                "a checkpoint or a new log past the cut, the round runs again)\n",
                now_log, size, last, log, at);
        return 0;
    }
    TU_REQUIRE(size > at, "the child wrote nothing to LevelDB past the cut at %ld of %s", at, log);
    TU_REQUIRE(truncate(path, at) == 0, "truncate %s to %ld: %s", path, at, strerror(errno));
    return 1;
}

/* Lease the rest of group g's messages of topic t at now: they must be
 * sent[from..to), in order, payloads "m<i>" (nothing consumed comes back,
 * nothing else is missing). Not acknowledged. */
static void expect_rest_leased(store_t *s, const uint64_t *sent, int from, int to, uint64_t now)
{
    static msg_owned_t m[1000];
    char payload[32];
    int at = from, n;
    do {
        n = LEASE_N(s, "g", "t", 1000, LEASE, now, m);
        for (int i = 0; i < n; i++, at++) {
            snprintf(payload, sizeof payload, "m%d", at);
            TU_CHECK(at < to && m[i].m.id == sent[at] && msg_str_is(&m[i].m.payload, payload),
                     "lease %d: id %" PRIu64 ", want message %d (of %d) %" PRIu64, at, m[i].m.id, at, to,
                     at < to ? sent[at] : 0);
        }
        free_msgs(m, n);
    } while (n > 0 && at <= to);
    TU_CHECK(at == to, "leased messages %d..%d after the reopen, want %d..%d", from, at, from, to);
}

/* The topic case: more messages than a topic CQ file holds (2^12 entries),
 * most consumed before the checkpoint the cut goes back to, a few after it,
 * so the GC's head move after it passes the queue's first file. */
#define CUT_TOPIC_MSGS      5000
#define CUT_CONSUMED_BEFORE 4500 /* leased and ACKed before the close: below the child's checkpoint */
#define CUT_CONSUMED_AFTER  100  /* leased and ACKed after it: ACKs whose LevelDB writes the cut loses */
#define CUT_LEASE_CHUNK     500

static uint64_t g_cut_sent[CUT_TOPIC_MSGS];

/* Lease n of group g's messages of topic t and ACK them, each chunk
 * committed and applied; they must be g_cut_sent[from..from+n). 0, or -1
 * with err. */
static int consume(store_t *c, int from, int n, char *err, size_t errlen)
{
    static msg_owned_t m[CUT_LEASE_CHUNK];
    uint64_t ids[CUT_LEASE_CHUNK];
    for (int at = from; at < from + n;) {
        int want = from + n - at < CUT_LEASE_CHUNK ? from + n - at : CUT_LEASE_CHUNK, k = 0, released = 0;
        if (store_lease(c, "g", 1, "t", 1, want, LEASE, T0, m, &k, err, errlen) != 0)
            return -1;
        int in_order = 1;
        for (int i = 0; i < k; i++) {
            ids[i] = m[i].m.id;
            in_order &= ids[i] == g_cut_sent[at + i];
            msg_owned_free(&m[i]);
        }
        if (k != want || !in_order) {
            snprintf(err, errlen, "leased %d of %d from message %d, in order %d", k, want, at, in_order);
            return -1;
        }
        if (store_ack(c, "g", 1, ids, k, &released, err, errlen) != 0 || commit_and_apply(c, err, errlen) != 0)
            return -1;
        if (released != k) {
            snprintf(err, errlen, "ACK released %d of %d", released, k);
            return -1;
        }
        at += k;
    }
    return 0;
}

/* The child's step of the topic case: the GC (the head to the group's
 * cursor, past the first file), then a few more consumed. */
static int collect_then_consume(store_t *c, char *err, size_t errlen)
{
    int work = 0;
    do {
        if (store_maintain(c, T0, 1000, &work, err, errlen) != 0)
            return -1;
    } while (work > 0);
    if (commit_and_apply(c, err, errlen) != 0)
        return -1;
    return consume(c, CUT_CONSUMED_BEFORE, CUT_CONSUMED_AFTER, err, errlen);
}

/* The first part of the two cases below: up to 3 rounds of a fresh store
 * filled by fill (then closed, its queue's first two files there), a child's
 * head move by move, the cut (crash_losing_leveldb_past_checkpoint); then
 * the queue's first file must still be there. */
static void crash_after_head_move(const store_options_t *o, uint32_t queue, uint64_t per_file, void (*fill)(store_t *s),
                                  head_move_fn move)
{
    int cut = 0;
    for (int round = 0; round < 3 && !cut; round++) {
        tu_rmtree(g_data);
        store_t *s = OPEN(o);
        fill(s);
        CLOSE(&s);
        TU_REQUIRE(cq_file_present(queue, 0) && cq_file_present(queue, per_file),
                   "queue %08" PRIx32 " has not its first two files", queue);
        cut = crash_losing_leveldb_past_checkpoint(move);
    }
    TU_REQUIRE(cut, "every round had a checkpoint past the cut");
    TU_CHECK(cq_file_present(queue, 0), "the first CQ file went at the head move, before a checkpoint covered it");
}

/* n SENDs to topic t at level (0: none), payloads "m0", "m1", …, at T0, a
 * commit after each `every` and at the end; ids[i] gets the i-th id. */
static void send_numbered(store_t *s, int level, int n, uint64_t *ids, int every)
{
    char payload[32];
    for (int i = 0; i < n; i++) {
        snprintf(payload, sizeof payload, "m%d", i);
        ids[i] = SEND(s, "t", payload, level, 0, T0, NULL);
        if (i % every == every - 1)
            COMMIT(s);
    }
    COMMIT(s);
}

/* The topic case's store: CUT_TOPIC_MSGS sent, CUT_CONSUMED_BEFORE consumed. */
static void fill_topic_consumed(store_t *s)
{
    char err[512] = "";
    GROUP_CREATE(s, "g", "t", 1, T0);
    send_numbered(s, 0, CUT_TOPIC_MSGS, g_cut_sent, 500);
    int rc = consume(s, 0, CUT_CONSUMED_BEFORE, err, sizeof err);
    TU_REQUIRE(rc == 0, "consume %d before the checkpoint: %s", CUT_CONSUMED_BEFORE, err);
}

/* A topic CQ file goes only once a finished checkpoint covers the head move
 * past it (cq_release_below), not at the move: an open takes a queue's head
 * from LevelDB, whose writes past the checkpoint a power cut may lose, and
 * opens the file that head lies in before it replays the moves. Here the GC
 * moves the head past the first file after the open's checkpoint, and the
 * cut loses LevelDB's writes since: the reopen opens, the redo makes the
 * move again, every message not consumed is leased once, in order, and none
 * consumed comes back (their ACKs are in the synced commit log, redone:
 * at-least-once repeats only what the log lost, DESIGN.md); the file
 * goes with the next checkpoint (the close's). */
static void test_log_topic_cq_file_kept_until_checkpoint(void)
{
    store_options_t o;
    opts_default(&o);
    const uint32_t queue = CQ_GROWING_QUEUE_FIRST; /* the first topic's */
    const uint64_t per_file = cq_layout_file_entries(cq_layout_of(queue), 0);
    TU_REQUIRE(per_file < CUT_CONSUMED_BEFORE, "a topic CQ file holds %" PRIu64 " entries", per_file);
    crash_after_head_move(&o, queue, per_file, fill_topic_consumed, collect_then_consume);

    store_t *s = open_at(&o, T0 + HOUR, __LINE__); /* later than every clock before */
    CHECK_STORE(s);
    store_topic_info_t ti;
    TU_CHECK(store_topic_info(s, "t", 1, &ti) == 1 && ti.appended == CUT_TOPIC_MSGS &&
                 ti.retained == CUT_TOPIC_MSGS - CUT_CONSUMED_BEFORE,
             "topic t: appended %" PRIu64 ", retained %" PRIu64 "; want %d, %d (the GC's move redone)", ti.appended,
             ti.retained, CUT_TOPIC_MSGS, CUT_TOPIC_MSGS - CUT_CONSUMED_BEFORE);
    expect_rest_leased(s, g_cut_sent, CUT_CONSUMED_BEFORE + CUT_CONSUMED_AFTER, CUT_TOPIC_MSGS, T0 + HOUR);
    CHECK_STORE(s);
    CLOSE(&s);
    TU_CHECK(!cq_file_present(queue, 0), "the first CQ file is left after a checkpoint covering the head move");
    TU_CHECK(cq_file_present(queue, per_file), "the second CQ file, holding the head, went");
    s = OPEN(&o);
    CHECK_STORE(s);
    CLOSE(&s);
}

/* The level case: level 1's CQ (files of 2^18 entries) takes a file's worth
 * of messages and a few more; the due move before the close takes all but
 * CUT_LEVEL_AFTER of the first file's, the child's after the checkpoint the
 * rest, so its head passes the first file. */
#define CUT_LEVEL_MSGS  ((1 << 18) + 200)
#define CUT_LEVEL_AFTER 300 /* moved by the child: its head move the cut loses */
#define CUT_LEVEL_CHUNK 10000

static uint64_t g_cut_level_sent[CUT_LEVEL_MSGS];

/* The child's step of the level case: the due move of the rest. */
static int move_the_rest(store_t *c, char *err, size_t errlen)
{
    int moved = 0, ready = 0;
    if (store_move_due(c, T0 + SEC, CUT_LEVEL_AFTER, &moved, &ready, err, errlen) != 0 ||
        commit_and_apply(c, err, errlen) != 0)
        return -1;
    if (moved != CUT_LEVEL_AFTER) {
        snprintf(err, errlen, "moved %d of the last %d", moved, CUT_LEVEL_AFTER);
        return -1;
    }
    return 0;
}

/* The level case's store: CUT_LEVEL_MSGS sent at level 1, all but the last
 * CUT_LEVEL_AFTER moved due. */
static void fill_level_moved(store_t *s)
{
    send_numbered(s, 1, CUT_LEVEL_MSGS, g_cut_level_sent, 1000);
    int left = CUT_LEVEL_MSGS - CUT_LEVEL_AFTER;
    while (left > 0) {
        int moved = MOVE(s, T0 + SEC, left < CUT_LEVEL_CHUNK ? left : CUT_LEVEL_CHUNK, NULL);
        TU_REQUIRE(moved > 0, "the due move stopped with %d to move", left);
        left -= moved;
        COMMIT(s);
    }
}

/* test_log_topic_cq_file_kept_until_checkpoint's rule on a level's CQ: the
 * due move's head move past the first file is lost with LevelDB's writes
 * past the checkpoint; the reopen opens, the redo moves the head again, and
 * every message is in the topic once, in order (a group made after the
 * reopen, from the first, leases them all). */
static void test_log_level_cq_file_kept_until_checkpoint(void)
{
    store_options_t o;
    opts_default(&o);
    const uint32_t queue = 1; /* level 1's (1 s) */
    const uint64_t per_file = cq_layout_file_entries(cq_layout_of(queue), 0);
    TU_REQUIRE(per_file < CUT_LEVEL_MSGS && per_file > CUT_LEVEL_AFTER, "a level CQ file holds %" PRIu64 " entries",
               per_file);
    crash_after_head_move(&o, queue, per_file, fill_level_moved, move_the_rest);

    store_t *s = open_at(&o, T0 + HOUR, __LINE__); /* later than every clock before */
    CHECK_STORE(s);
    TU_CHECK(level_depth(s, 1) == 0, "level 1 holds %" PRIu64 " after the redo of its due move", level_depth(s, 1));
    store_topic_info_t ti;
    TU_CHECK(store_topic_info(s, "t", 1, &ti) == 1 && ti.appended == CUT_LEVEL_MSGS && ti.delayed == 0,
             "topic t: appended %" PRIu64 ", delayed %" PRIu64 "; want %d, 0", ti.appended, ti.delayed, CUT_LEVEL_MSGS);
    GROUP_CREATE(s, "g", "t", 1, T0 + HOUR);
    expect_rest_leased(s, g_cut_level_sent, 0, CUT_LEVEL_MSGS, T0 + HOUR);
    CLOSE(&s);
    TU_CHECK(!cq_file_present(queue, 0), "the first CQ file is left after a checkpoint covering the head move");
}

/* A directory of format 5 whose commit log wrote SEND journeys into `L`
 * and 'X' beside their CQ entries (4a.4), its levels served from their CQs:
 * this build (format 6, whose journeys have no `L` entry: design-commitlog.md
 * 4a.5) finds the journey keys at open and walks those levels by `L` until
 * they empty, so each message is delivered once, at its due, and the check
 * holds; the directory is marked 7, which a format-5 build refuses (see
 * "refuse other format"). Without the open's probe the level is served from
 * its CQ beside the `L` entries, and the check finds the level holding each
 * message twice. */
static void test_format5_journeys_in_l(void)
{
    store_t *s = OPEN_LEVELS_WALKED();                    /* its SENDs write `L`, 'X' and the CQ, as 4a.4's did */
    uint64_t a = SEND(s, "t", "a", 0, 5 * SEC, T0, NULL); /* level 2 */
    uint64_t b = SEND(s, "t", "b", 1, 0, T0, NULL);       /* level 1 */
    CLOSE(&s);
    for (int l = 1; l <= 2; l++) { /* 4a.4's level records: served from the CQ (no RECORD_LEVEL_ON_L) */
        key_buf_t k;
        key_level_record(&k, l);
        size_t vlen = 0;
        char *v = RAW_REPLACE(k.b, k.n, "", 0, &vlen);
        TU_REQUIRE(v != NULL && vlen == RECORD_LEVEL_BYTES, "level %d's record", l);
        record_level_t r;
        TU_REQUIRE(record_level_decode(v, vlen, &r) == 0, "level %d's record decodes", l);
        leveldb_free(v);
        r.flags = 0;
        char out[RECORD_LEVEL_BYTES];
        record_level_encode(&r, out);
        raw_put(k.b, k.n, out, sizeof out, __LINE__);
    }
    raw_put("Mformat", 7, "\0\0\0\5", 4, __LINE__);
    s = OPEN_DEFAULT();
    CHECK_STORE(s);
    store_level_info_t li;
    TU_CHECK(store_level_info(s, 2, &li) == 0 && li.depth == 1 && li.head_due_ms <= T0 + 5 * SEC,
             "level 2: depth %" PRIu64 ", head %" PRIu64, li.depth, li.head_due_ms);
    TU_CHECK(MOVE(s, T0 + 5 * SEC - 1, 10, NULL) == 1, "b at its due, a not before");
    TU_CHECK(MOVE(s, T0 + 5 * SEC, 10, NULL) == 1, "a at its due");
    TU_CHECK(MOVE(s, T0 + 60 * SEC, 10, NULL) == 0, "nothing twice");
    CHECK_STORE(s);
    msg_owned_t m[4];
    int n = LEASE_N(s, "g", "t", 4, LEASE, T0 + 60 * SEC, m);
    TU_CHECK(n == 2 && m[0].m.id == b && m[1].m.id == a, "leased %d: b, then a", n);
    free_msgs(m, n);
    CLOSE(&s);
    CHECK_EQ_U64(raw_format(), STORE_FORMAT_VERSION);
}

/* The size of queue's CQ file starting at first in g_data; -1 when missing. */
static long long cq_file_bytes(uint32_t queue, uint64_t first)
{
    char name[64], path[1200];
    struct stat st;
    cq_file_name(queue, first, name, sizeof name);
    snprintf(path, sizeof path, "%s/%s", g_data, name);
    return stat(path, &st) == 0 ? (long long)st.st_size : -1;
}

#define UPGRADE7_MSGS 9000 /* past 2^13: a third CQ file, 2^12 entries in format 7's layout, 2^13 in 8's */

static uint64_t g_upgrade7_sent[UPGRADE7_MSGS];

/* A directory of format 7 whose topic has a CQ numbered from
 * CQ_SMALL_QUEUE_FIRST with files of 2^12 entries (made here by a check's
 * open, which leaves the marker at 7 and keeps to its layout) opens in this
 * build: the marker becomes 8 (a format-7 build refuses it: it would look for
 * a new topic's entries in files of 2^12), the old topic keeps its number and
 * its files and delivers every message in order, and a topic made after the
 * upgrade gets a CQ from CQ_GROWING_QUEUE_FIRST, whose files grow. */
static void test_upgrade_format7_topic_cq_files(void)
{
    store_options_t seven; /* a check's: the marker stays 7, a topic made gets format 7's layout */
    opts_default(&seven);
    seven.no_upgrade = 1;
    store_t *s = OPEN_DEFAULT();
    CLOSE(&s);
    raw_put("Mformat", 7, "\0\0\0\7", 4, __LINE__);
    s = OPEN(&seven);
    GROUP_CREATE(s, "g", "t", 1, T0);
    send_numbered(s, 0, UPGRADE7_MSGS, g_upgrade7_sent, 1000);
    CLOSE(&s);
    CHECK_EQ_U64(raw_format(), 7);
    for (uint64_t first = 0; first <= 8192; first += 4096) {
        TU_CHECK(cq_file_bytes(CQ_SMALL_QUEUE_FIRST, first) == 4096 * CQ_ENTRY_BYTES,
                 "format 7's topic: its file at %" PRIu64 " holds %lld bytes", first,
                 cq_file_bytes(CQ_SMALL_QUEUE_FIRST, first));
    }

    s = OPEN_DEFAULT();
    TU_CHECK(strstr(store_open_info(s), "upgraded from format version 7 to 8") != NULL, "the open says \"%s\"",
             store_open_info(s));
    CHECK_STORE(s);
    GROUP_CREATE(s, "h", "u", 1, T0);
    for (int i = 0; i < UPGRADE7_MSGS; i++) {
        SEND(s, "u", "new", 0, 0, T0, NULL);
        if (i % 1000 == 999)
            COMMIT(s);
    }
    COMMIT(s);
    CHECK_STORE(s);
    CLOSE(&s);
    CHECK_EQ_U64(raw_format(), STORE_FORMAT_VERSION);
    char name[64];
    cq_file_name(CQ_GROWING_QUEUE_FIRST, 12288, name, sizeof name);
    TU_CHECK(cq_file_bytes(CQ_GROWING_QUEUE_FIRST, 8192) == 8192 * CQ_ENTRY_BYTES &&
                 strcmp(name, "cq-01000000-0000000000002000.q") == 0,
             "the new topic's file at 8192 holds %lld bytes (want 2^13 entries), and 12288 is in %s",
             cq_file_bytes(CQ_GROWING_QUEUE_FIRST, 8192), name);
    TU_CHECK(cq_file_bytes(CQ_SMALL_QUEUE_FIRST + 1, 0) == -1, "a new topic drew format 7's next number");

    s = OPEN_DEFAULT();
    expect_rest_leased(s, g_upgrade7_sent, 0, UPGRADE7_MSGS, T0);
    static msg_owned_t m[1000];
    int total = 0, n;
    while ((n = LEASE_N(s, "h", "u", 1000, LEASE, T0, m)) > 0) {
        free_msgs(m, n);
        total += n;
    }
    TU_CHECK(total == UPGRADE7_MSGS, "the new topic delivered %d of %d", total, UPGRADE7_MSGS);
    CHECK_STORE(s);
    CLOSE(&s);
    TU_CHECK(cq_file_bytes(CQ_SMALL_QUEUE_FIRST, 8192) == 4096 * CQ_ENTRY_BYTES,
             "format 7's topic keeps its files of 2^12 entries");
}

static const tu_test_t open_tests[] = {
    { "format 5's journeys in L are walked until their levels empty", test_format5_journeys_in_l },
    { "a journey dropped by an index rebuild on a level walked by L checks clean",
      test_rebuilt_journey_slot_checks_clean },
    { "a where-slot naming a level index below its head is reported", test_slot_below_level_head_reported },
    { "reopen keeps everything (sync on)", test_reopen_keeps_everything },
    { "a clean close leaves no log to replay", test_close_leaves_no_log },
    { "refuse second open", test_refuse_second_open },
    { "refuse foreign directory", test_refuse_foreign_dir },
    { "reopen after an interrupted creation", test_interrupted_creation },
    { "refuse foreign LevelDB", test_refuse_foreign_leveldb },
    { "refuse changed level table", test_refuse_level_table_change },
    { "refuse missing dir and file", test_refuse_missing_and_file },
    { "refuse a damage_retry_ms out of range", test_refuse_damage_retry_out_of_range },
    { "refuse other format version", test_refuse_other_format },
    { "a lease's topic-log seq is checked", test_lease_seq_checked },
    { "upgrade format 1", test_upgrade_format1 },
    { "upgrade format 2", test_upgrade_format2 },
    { "upgrade format 7: its topics keep their CQ files, a new topic's grow", test_upgrade_format7_topic_cq_files },
    { "an upgrade cut short, a lease index of no group", test_upgrade_interrupted },
    { "corrupt value reported", test_corrupt_value_reported },
    { "a damaged level key: shown, and met half-way it breaks the store", test_damaged_level_key_shown },
    { "a message's names and key past their limits are corrupt", test_message_names_checked },
    { "an index record's topic and key past their limits are corrupt", test_index_record_names_checked },
    { "damaged lease keys: long, 0x00 inside, empty", test_damaged_lease_keys },
    { "damaged topic and group record keys refused at open", test_damaged_record_keys },
    { "a group record on a topic with a 0x00 refused at open", test_group_record_topic_with_zero },
    { "damaged level keys: one byte short or long", test_damaged_level_keys },
    { "GROUP DEL meets a lease key past any key_buf_t", test_group_delete_damaged_lease_key },
    { "damaged topic-log keys: long, another topic", test_damaged_queue_keys },
    { "damaged index keys: long names", test_damaged_index_keys },
    { "refuse an unusable LOCK file, not as in use", test_refuse_unusable_lock },
    { "an unreadable whole copy is refused with what to do", test_whole_copy_unreadable },
    { "a damaged table block is found", test_check_finds_damaged_blocks },
    { "refuse a damaged directory as damaged", test_refuse_damaged },
    { "store_check_dir reads only: a crash's log, a torn end", test_check_dir_reads_only },
    { "a close leaves the commit log's clean checkpoint, an open removes it", test_log_closed_clean },
    { "an applied mark past the commit log's end is refused as damaged", test_log_missing_applied_batch_refused },
    { "a commit-log segment size the log cannot use is refused", test_log_segment_size_refused },
    { "a directory keeps the segment size of its commit log", test_log_keeps_its_segment_size },
    { "the commit log is checkpointed every checkpoint_bytes of applied log", test_log_checkpoint_interval },
    { "a reopen at a later clock takes no checkpoint at its first apply", test_log_reopen_later_no_checkpoint },
    { "a checkpoint has a long LevelDB log written out", test_checkpoint_writes_out_a_long_leveldb_log },
    { "commit-log segments below the checkpoint are recycled", test_log_segments_recycled },
    { "the where-slot files of recycled segments are deleted", test_recycled_segments_slots_deleted },
    { "checkpoints on the commit log's thread recycle segments while open", test_checkpoint_on_thread },
    { "a batch no segment can hold is written beside the log", test_log_batch_beside_the_log },
    { "a hole in LevelDB's log past the checkpoint is replayed past, one below it refused",
      test_log_hole_past_checkpoint },
    { "a topic CQ file below a head move stays until a checkpoint covers it: LevelDB lost the move",
      test_log_topic_cq_file_kept_until_checkpoint },
    { "a level CQ file below a head move stays until a checkpoint covers it: LevelDB lost the move",
      test_log_level_cq_file_kept_until_checkpoint },
    { "an older format with another level table is refused before its upgrade",
      test_older_format_refused_before_upgrade },
    { NULL, NULL },
};

static const tu_suite_t suites[] = {
    { "open", open_tests },
};

int main(int argc, char **argv)
{
    return tu_suites_main(argc, argv, suites, sizeof suites / sizeof suites[0], store_fixture_setup,
                          store_fixture_teardown);
}
