/*
 * tests/integration/test_broker_backup.c — BACKUP against the real broker.
 *
 *  - refusals: no backup-dir configured; names that are not one plain
 *    directory name; a name that exists, and one whose ".partial" holds
 *    a file that is not a copy's; a backup-dir whose parent is gone — each with a message naming
 *    it, and the broker goes on; a missing backup-dir is made; a refused BACKUP
 *    is a failed one in INFO and /metrics (the alert's series);
 *  - under load: SENDs on another connection while BACKUP runs; the copy
 *    passes --check-data, and restored (the broker stopped, the copy put in
 *    place of its data directory, started again) it holds every message
 *    acknowledged before the command (the start logs that it opened a whole
 *    copy), the group's cursor and DLQ as they
 *    were, and nothing sent after the copy finished; INFO and /metrics say
 *    how it went, and hourglass-cli backup waits for it;
 *  - ids after a restore: the ids of messages sent after the copy (and
 *    after a restart) are never handed out again by the restored broker,
 *    and GET / REVOKE of them say "gone", never act on another message;
 *  - a disk that runs low: backup-dir on a small tmpfs (the test mounts it,
 *    as root); the copy fails before the file system drops under the floor,
 *    says so in INFO, and leaves nothing there;
 *  - backup-rate: a copy of 16 MiB at 4 MiB/s takes at least 3 s;
 *  - SIGTERM while a copy runs: the broker exits 0 at once and backup-dir
 *    holds the whole copy or nothing, never a ".partial";
 *  - kill -9 while a copy runs: its ".partial" stays, the broker restarts
 *    and removes it, saying so, and the same name makes a whole copy;
 *  - two brokers on one backup-dir: the second's start and its BACKUP of
 *    the same name leave the first's copy in the making alone;
 *  - a whole copy is marked (BACKUP-WHOLE, kept by tar and cp -r): its log
 *    torn after it was made is damage to --check-data (exit 1), for the copy
 *    and its tar and cp; restored, the mark is gone, and a kill -9 with a
 *    torn end is ok again ("would cut");
 *  - the mark lists the copy's files: a log cut on a record boundary is
 *    damage to --check-data, and a broker started on it refuses (exit 1),
 *    saying how to go on; with BACKUP-WHOLE deleted it starts; a garbled
 *    mark is damage, one without a list (older copies) is checked as then.
 *
 * Run one: ./tests/integration/test_broker_backup backup
 */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include <CUnit/CUnit.h>

#include "tests/helpers/broker_test.h"
#include "tests/helpers/testutil.h"

#define DONE_DEADLINE_MS 60000
#define PAYLOAD_FILL     'p'

static char g_bk[600];  /* the backup-dir of the running test */
static char g_mnt[512]; /* a tmpfs the test mounted (unmounted by unmount_tmpfs) */

static void unmount_tmpfs(void)
{
    if (g_mnt[0] != '\0') {
        umount2(g_mnt, MNT_DETACH);
        rmdir(g_mnt);
        g_mnt[0] = '\0';
    }
}

/* Forget the last test's backup-dir: remove its temp dir (a tmpfs is
 * unmounted instead). Every test starts with it, and it runs at exit. */
static void reset_backup_dir(void)
{
    if (g_bk[0] != '\0' && g_mnt[0] == '\0') {
        char *slash = strrchr(g_bk, '/');
        if (slash != NULL)
            *slash = '\0';
        tu_rmtree(g_bk);
    }
    g_bk[0] = '\0';
    unmount_tmpfs();
}

/* Start the broker with backup-dir g_bk (made in a temp dir of its own) and
 * the extra flags (NULL-terminated, at most 8). */
static void start_with_backup_dir(const char *const *more)
{
    if (g_bk[0] == '\0') {
        char d[512];
        BP_REQUIRE(tu_mkdtemp("backup", d, sizeof d) == 0, "mkdtemp: %s", strerror(errno));
        snprintf(g_bk, sizeof g_bk, "%s/bk", d);
        BP_REQUIRE(mkdir(g_bk, 0700) == 0, "mkdir %s: %s", g_bk, strerror(errno));
    }
    const char *extra[12] = { "--backup-dir", g_bk };
    int n = 2;
    for (int i = 0; more != NULL && more[i] != NULL && n < 11; i++)
        extra[n++] = more[i];
    extra[n] = NULL;
    bt_start(extra);
}

/* The reply to BACKUP name on bt_conn, described into out. */
static void backup_reply(const char *name, char *out, size_t outlen)
{
    resp_reply_t *r = rc_cmd(&bt_conn, "BACKUP", name, NULL);
    BP_REQUIRE(r != NULL, "BACKUP %s: no reply (%s)", name, bt_conn.err);
    rc_describe(r, out, outlen);
    resp_reply_free(r);
}

/* BACKUP name, which must start. */
static void start_backup(const char *name)
{
    char d[1024];
    backup_reply(name, d, sizeof d);
    BP_CHECK(strstr(d, "Backup started") != NULL && strstr(d, name) != NULL, "BACKUP %s: %s", name, d);
}

/* n SENDs of bytes (at most 64 KiB) each to topic "big", due in an hour. */
static void send_big(int n, size_t bytes)
{
    static char payload[64 * 1024 + 1];
    char e[1024], id[32];
    memset(payload, PAYLOAD_FILL, bytes);
    payload[bytes] = '\0';
    for (int i = 0; i < n; i++)
        BP_REQUIRE(bp_send(&bt_conn, id, sizeof id, e, sizeof e, "big", payload, "DELAY", "1h", NULL) == 0,
                   "SEND %d: %s", i, e);
}

#define CHECK_REFUSED(name, want)                                                                                    \
    do {                                                                                                             \
        char d_[1024];                                                                                               \
        backup_reply((name), d_, sizeof d_);                                                                         \
        BP_CHECK(strstr(d_, "ERR") != NULL && strstr(d_, (want)) != NULL, "BACKUP '%s': %s (want '%s')", (name), d_, \
                 (want));                                                                                            \
    } while (0)

struct backup_done {
    char status[32];
    char error[512];
};

static int backup_finished(void *ctx)
{
    struct backup_done *d = ctx;
    char e[512], running[16];
    if (bp_info_field(&bt_conn, "backup_in_progress", running, sizeof running, e, sizeof e) != 0)
        return 0;
    if (strcmp(running, "0") != 0)
        return 0;
    bp_info_field(&bt_conn, "backup_last_status", d->status, sizeof d->status, e, sizeof e);
    bp_info_field(&bt_conn, "backup_last_error", d->error, sizeof d->error, e, sizeof e);
    return 1;
}

/* Wait until no copy runs; the last one's status and error. */
static struct backup_done wait_backup_done(void)
{
    struct backup_done d = { "", "" };
    BP_REQUIRE(tu_poll_until(backup_finished, &d, DONE_DEADLINE_MS, 20) == 0, "BACKUP still running after %d ms",
               DONE_DEADLINE_MS);
    return d;
}

static int exists(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0;
}

static int path_there(void *ctx)
{
    return exists(ctx);
}

/* `hourglass-broker --check-data dir`: its exit code, its output in out. */
static int check_data(const char *dir, char *out, size_t outlen)
{
    const char *argv[] = { bt_broker.binary, "--check-data", dir, NULL };
    return tu_run_capture(argv, out, outlen);
}

static void test_refusals(void)
{
    reset_backup_dir();
    bt_start(NULL);
    CHECK_REFUSED("b", "BACKUP needs backup-dir in the configuration");
    bt_teardown();
    bt_setup();

    start_with_backup_dir(NULL);
    CHECK_REFUSED("", "the backup name is empty");
    CHECK_REFUSED("a/b", "may hold only letters, digits, '.', '_' and '-', got 'a/b'");
    CHECK_REFUSED("../b", "must not start with '.', got '../b'");
    CHECK_REFUSED(".hidden", "must not start with '.', got '.hidden'");
    char long_name[200];
    memset(long_name, 'n', 129);
    long_name[129] = '\0';
    CHECK_REFUSED(long_name, "longer than 128 characters, got 'nnnnnnnn");

    char path[800];
    snprintf(path, sizeof path, "%s/taken", g_bk);
    BP_REQUIRE(mkdir(path, 0700) == 0, "mkdir %s", path);
    CHECK_REFUSED("taken", "backup 'taken' already exists");
    snprintf(path, sizeof path, "%s/left.partial", g_bk);
    BP_REQUIRE(mkdir(path, 0700) == 0, "mkdir %s", path);
    snprintf(path, sizeof path, "%s/left.partial/notes.txt", g_bk); /* not a copy's file */
    FILE *f = fopen(path, "w");
    BP_REQUIRE(f != NULL, "fopen %s: %s", path, strerror(errno));
    fclose(f);
    CHECK_REFUSED("left", "left.partial holds 'notes.txt', which is not a file of a copy");
    BP_CHECK(exists(path), "BACKUP removed %s", path);

    /* one that works, then a backup-dir that went away */
    start_backup("fine");
    struct backup_done done = wait_backup_done();
    BP_CHECK(strcmp(done.status, "ok") == 0, "BACKUP fine: %s %s", done.status, done.error);
    snprintf(path, sizeof path, "%s/fine", g_bk);
    BP_CHECK(exists(path), "no %s", path);
    /* a backup-dir that is missing is made (a systemd unit's state directory), but not its parent */
    tu_rmtree(g_bk);
    start_backup("made");
    done = wait_backup_done();
    snprintf(path, sizeof path, "%s/made", g_bk);
    BP_CHECK(strcmp(done.status, "ok") == 0 && exists(path), "BACKUP made into a missing backup-dir: %s %s",
             done.status, done.error);
    char parent[600];
    snprintf(parent, sizeof parent, "%s", g_bk);
    *strrchr(parent, '/') = '\0';
    tu_rmtree(parent);
    CHECK_REFUSED("gone", "cannot create backup-dir");
    /* A refused BACKUP is a failed one for INFO and the alert on /metrics: a
     * nightly job refused every night (an unwritable or full backup disk)
     * used to leave backup_last_status at the last success. */
    done = wait_backup_done();
    BP_CHECK(strcmp(done.status, "failed") == 0 && strstr(done.error, "cannot create backup-dir") != NULL &&
                 strstr(done.error, "No such file or directory") != NULL,
             "INFO after a refused BACKUP: backup_last_status %s, backup_last_error '%s'", done.status, done.error);
    char body[65536];
    BP_CHECK(tu_http_get(bt_broker.metrics_port, "/metrics", body, sizeof body) == 200 &&
                 strstr(body, "\nhourglass_backup_last_failed 1\n") != NULL,
             "/metrics does not say hourglass_backup_last_failed 1 after a refused BACKUP");
    resp_reply_t *r = rc_cmd(&bt_conn, "PING", NULL);
    BP_CHECK(r != NULL && rc_str_eq(r, "PONG"), "PING after the refusals");
    resp_reply_free(r);
}

/* A producer on a connection of its own, until told to stop. */
typedef struct producer {
    atomic_int stop;
    atomic_int sent;
    char err[512];
} producer_t;

static void *producer_main(void *arg)
{
    producer_t *p = arg;
    rc_conn_t c;
    if (bp_connect(&bt_broker, &c, p->err, sizeof p->err) != 0)
        return NULL;
    while (!atomic_load(&p->stop)) {
        for (int i = 0; i < 64; i++)
            rc_appendl(&c, "SEND", "during", "payload-during-the-backup", "DELAY", "1h", NULL);
        if (rc_flush(&c, 10000) != 0) {
            snprintf(p->err, sizeof p->err, "write: %s", c.err);
            break;
        }
        for (int i = 0; i < 64; i++) {
            resp_reply_t *r = rc_read(&c, 10000);
            if (r == NULL || r->type != RESP_REPLY_BULK) {
                snprintf(p->err, sizeof p->err, "SEND during the backup: %s", r == NULL ? c.err : "an error");
                resp_reply_free(r);
                rc_close(&c);
                return NULL;
            }
            resp_reply_free(r);
            atomic_fetch_add(&p->sent, 1);
        }
    }
    rc_close(&c);
    return NULL;
}

#define BEFORE_N 3000

static int sent_some(void *ctx)
{
    producer_t *p = ctx;
    return atomic_load(&p->sent) >= 640 || p->err[0] != '\0';
}

/* GET id's state ("delayed", "ready", … "gone"), into out. */
static void get_state(const char *id, char *out, size_t outlen)
{
    snprintf(out, outlen, "(no reply)");
    resp_reply_t *r = rc_cmd(&bt_conn, "GET", id, NULL);
    for (size_t i = 0; r != NULL && r->type == RESP_REPLY_ARRAY && i + 1 < r->count; i += 2)
        if (r->elements[i].str != NULL && strcmp(r->elements[i].str, "state") == 0)
            snprintf(out, outlen, "%s", r->elements[i + 1].str ? r->elements[i + 1].str : "?");
    resp_reply_free(r);
}

static void test_under_load_and_restore(void)
{
    reset_backup_dir();
    start_with_backup_dir(NULL);
    char e[1024], out[4096];
    static char ids[BEFORE_N][32];
    char payload[200];
    memset(payload, PAYLOAD_FILL, sizeof payload - 1);
    payload[sizeof payload - 1] = '\0';
    for (int i = 0; i < BEFORE_N; i++)
        BP_REQUIRE(bp_send(&bt_conn, ids[i], sizeof ids[i], e, sizeof e, "t", payload, i % 3 ? "DELAY" : NULL, "1h",
                           NULL) == 0,
                   "SEND %d: %s", i, e);
    /* a group with a cursor, an acknowledged message and a DLQ entry */
    BP_REQUIRE(bp_ok_cmd(&bt_conn, e, sizeof e, "GROUP", "CREATE", "g", "t", "FROM", "FIRST", NULL) == 0, "%s", e);
    resp_reply_t *r = bp_pull(&bt_conn, e, sizeof e, "g", "t", "COUNT", "2", NULL);
    BP_REQUIRE(r != NULL && r->count == 2, "PULL: %s", e);
    char first[17], second[17];
    snprintf(first, sizeof first, "%.16s", r->elements[0].elements[0].str);
    snprintf(second, sizeof second, "%.16s", r->elements[1].elements[0].str);
    resp_reply_free(r);
    long long n = 0;
    BP_REQUIRE(bp_int_cmd(&bt_conn, &n, e, sizeof e, "ACK", "g", first, NULL) == 0 && n == 1, "ACK: %s", e);
    BP_REQUIRE(bp_int_cmd(&bt_conn, &n, e, sizeof e, "NACK", "g", second, "DLQ", "REASON", "bad", NULL) == 0,
               "NACK: %s", e);

    producer_t p = { 0 };
    pthread_t th;
    BP_REQUIRE(pthread_create(&th, NULL, producer_main, &p) == 0, "pthread_create");
    BP_REQUIRE(tu_poll_until(sent_some, &p, DONE_DEADLINE_MS, 5) == 0, "the producer sent nothing: %s", p.err);
    int sent_before = atomic_load(&p.sent); /* acknowledged: committed before the BACKUP job runs */
    start_backup("b1");
    int sent_by_end = atomic_load(&p.sent);
    struct backup_done done = wait_backup_done();
    atomic_store(&p.stop, 1);
    pthread_join(th, NULL);
    int sent_total = atomic_load(&p.sent);
    BP_CHECK(p.err[0] == '\0' && sent_total > sent_by_end, "the producer: %d sent, %s", sent_total, p.err);
    BP_CHECK(strcmp(done.status, "ok") == 0 && done.error[0] == '\0', "BACKUP b1: %s %s", done.status, done.error);
    char v[64];
    BP_REQUIRE(bp_info_field(&bt_conn, "backup_records", v, sizeof v, e, sizeof e) == 0, "%s", e);
    BP_CHECK(strtoull(v, NULL, 10) >= BEFORE_N, "backup_records:%s", v);
    BP_REQUIRE(bp_info_field(&bt_conn, "backup_last_ok_ms", v, sizeof v, e, sizeof e) == 0, "%s", e);
    BP_CHECK(strtoull(v, NULL, 10) > 0, "backup_last_ok_ms:%s", v);
    static char metrics[1 << 20];
    BP_REQUIRE(tu_http_get(bt_broker.metrics_port, "/metrics", metrics, sizeof metrics) >= 0, "GET /metrics");
    BP_CHECK(strstr(metrics, "\nhourglass_backup_in_progress 0") != NULL &&
                 strstr(metrics, "\nhourglass_backup_last_failed 0") != NULL &&
                 strstr(metrics, "\nhourglass_backup_last_success_timestamp_seconds 1") != NULL,
             "/metrics has no backup series");

    /* the CLI waits for a copy and reports it */
    char cli[700], uri[64];
    snprintf(cli, sizeof cli, "%s/hourglass-cli", HG_BUILDDIR);
    snprintf(uri, sizeof uri, "hourglass://127.0.0.1:%d", bt_broker.port);
    const char *argv[] = { cli, "-u", uri, "backup", "b2", NULL };
    int rc = tu_run_capture(argv, out, sizeof out);
    BP_CHECK(rc == 0 && strstr(out, "backup b2: whole,") != NULL, "hourglass-cli backup b2: exit %d: %s", rc, out);
    const char *again[] = { cli, "-u", uri, "backup", "b2", NULL };
    rc = tu_run_capture(again, out, sizeof out);
    BP_CHECK(rc == 1 && strstr(out, "already exists") != NULL, "hourglass-cli backup b2 again: exit %d: %s", rc, out);

    char after[32];
    BP_REQUIRE(bp_send(&bt_conn, after, sizeof after, e, sizeof e, "t", "after", NULL) == 0, "%s", e);

    char copy[800];
    snprintf(copy, sizeof copy, "%s/b1", g_bk);
    rc = check_data(copy, out, sizeof out);
    BP_CHECK(rc == 0 && strncmp(out, "ok: ", 4) == 0, "--check-data %s: exit %d: %s", copy, rc, out);
    printf("\n    the copy: %s    the producer: %d before BACKUP, %d by its reply, %d in all\n", out, sent_before,
           sent_by_end, sent_total);
    /* the copies: BEFORE_N (one acknowledged, maybe collected) + the DLQ's + the producer's up to the command:
     * every one acknowledged before it, and at most the pipeline in flight (64) whose replies it had not read */
    long long copies = strtoll(out + 4, NULL, 10);
    BP_CHECK(copies >= BEFORE_N + sent_before && copies <= BEFORE_N + 1 + sent_by_end + 64,
             "the copy holds %lld messages: not %d..%d", copies, BEFORE_N + sent_before,
             BEFORE_N + 1 + sent_by_end + 64);

    /* restore: stop, the copy in place of the data directory, start */
    BP_REQUIRE(bp_stop(&bt_broker, e, sizeof e) == 0, "stop: %s", e);
    char old[700];
    snprintf(old, sizeof old, "%s.before-restore", bt_broker.data_dir);
    BP_REQUIRE(rename(bt_broker.data_dir, old) == 0, "rename: %s", strerror(errno));
    BP_REQUIRE(rename(copy, bt_broker.data_dir) == 0, "rename: %s", strerror(errno));
    BP_REQUIRE(bp_restart(&bt_broker, e, sizeof e) == 0, "restart on the copy: %s", e);
    /* the restore is said at info: an operator sees that the copy was taken as one */
    BP_CHECK(bp_log_contains(&bt_broker, "a whole copy made by BACKUP, checked") &&
                 bp_log_contains(&bt_broker, "is removed: a live data directory from now on"),
             "the start on the copy did not log that it opened a whole copy");
    rc_close(&bt_conn);
    BP_REQUIRE(bp_connect(&bt_broker, &bt_conn, e, sizeof e) == 0, "connect: %s", e);
    int missing = 0;
    char state[64];
    for (int i = 0; i < BEFORE_N; i++) {
        if (strncmp(ids[i], first, 16) == 0)
            continue; /* acknowledged: gone once collected */
        get_state(ids[i], state, sizeof state);
        if (strcmp(state, "gone") == 0 || strcmp(state, "(no reply)") == 0) {
            if (missing++ == 0)
                printf("\n    the first missing: %s: %s", ids[i], state);
        }
    }
    BP_CHECK(missing == 0, "%d of the %d messages sent before BACKUP are not in the copy", missing, BEFORE_N);
    get_state(after, state, sizeof state);
    BP_CHECK(strcmp(state, "gone") == 0, "a message sent after the copy is in it: %s", state);
    BP_REQUIRE(bp_int_cmd(&bt_conn, &n, e, sizeof e, "DLQ", "LEN", "g", NULL) == 0, "%s", e);
    BP_CHECK(n == 1, "DLQ LEN g in the copy: %lld", n);
    r = bp_pull(&bt_conn, e, sizeof e, "g", "t", "COUNT", "1", NULL);
    BP_REQUIRE(r != NULL && r->count == 1, "PULL from the copy: %s", e);
    BP_CHECK(strncmp(r->elements[0].elements[0].str, first, 16) != 0 &&
                 strncmp(r->elements[0].elements[0].str, second, 16),
             "the copy delivered a message acknowledged or parked before BACKUP");
    resp_reply_free(r);
}

/* REVOKE id: how many it revoked, and the first refusal's reason (or ""). */
static long long revoke_one(const char *id, char *reason, size_t reasonlen)
{
    long long revoked = -1;
    snprintf(reason, reasonlen, "%s", "");
    resp_reply_t *r = rc_cmd(&bt_conn, "REVOKE", id, NULL);
    BP_REQUIRE(r != NULL && r->type == RESP_REPLY_ARRAY, "REVOKE %s: no array (%s)", id, bt_conn.err);
    for (size_t i = 0; i + 1 < r->count; i += 2) {
        const resp_reply_t *k = &r->elements[i], *v = &r->elements[i + 1];
        if (k->str != NULL && strcmp(k->str, "revoked") == 0)
            revoked = v->integer;
        if (k->str != NULL && strcmp(k->str, "refused") == 0 && v->count > 0 && v->elements[0].count == 2 &&
            v->elements[0].elements[1].str != NULL)
            snprintf(reason, reasonlen, "%s", v->elements[0].elements[1].str);
    }
    resp_reply_free(r);
    return revoked;
}

#define AFTER_N 400

/* The ids of messages sent after a BACKUP are never handed out again once
 * the copy is restored: the copy carries the id counter as it was, and the
 * broker raises it to the wall clock's floor when it opens the directory
 * (levels/store.h). Sent after the copy: AFTER_N, half of them delayed, then
 * the broker restarted (as a broker restarts between a nightly copy and a
 * restore) and AFTER_N more. Restored, the broker hands out 2 × AFTER_N new
 * ids: none is one of those, and GET and REVOKE of those say "gone" — never
 * another message. */
static void test_ids_after_restore(void)
{
    reset_backup_dir();
    start_with_backup_dir(NULL);
    char e[1024], id[32];
    for (int i = 0; i < 50; i++)
        BP_REQUIRE(bp_send(&bt_conn, id, sizeof id, e, sizeof e, "t", "before", NULL) == 0, "SEND before: %s", e);
    start_backup("b");
    struct backup_done done = wait_backup_done();
    BP_REQUIRE(strcmp(done.status, "ok") == 0, "BACKUP b: %s %s", done.status, done.error);

    static char after[2 * AFTER_N][32];
    for (int i = 0; i < 2 * AFTER_N; i++) {
        if (i == AFTER_N) {
            BP_REQUIRE(bp_stop(&bt_broker, e, sizeof e) == 0, "stop: %s", e);
            BP_REQUIRE(bp_restart(&bt_broker, e, sizeof e) == 0, "restart: %s", e);
            rc_close(&bt_conn);
            BP_REQUIRE(bp_connect(&bt_broker, &bt_conn, e, sizeof e) == 0, "connect: %s", e);
        }
        BP_REQUIRE(bp_send(&bt_conn, after[i], sizeof after[i], e, sizeof e, "t", "after the backup",
                           i % 2 ? "DELAY" : NULL, "1h", NULL) == 0,
                   "SEND after the backup %d: %s", i, e);
    }

    /* restore: stop, the copy in place of the data directory, start */
    BP_REQUIRE(bp_stop(&bt_broker, e, sizeof e) == 0, "stop: %s", e);
    char old[700], copy[800];
    snprintf(old, sizeof old, "%s.before-restore", bt_broker.data_dir);
    snprintf(copy, sizeof copy, "%s/b", g_bk);
    BP_REQUIRE(rename(bt_broker.data_dir, old) == 0, "rename: %s", strerror(errno));
    BP_REQUIRE(rename(copy, bt_broker.data_dir) == 0, "rename: %s", strerror(errno));
    BP_REQUIRE(bp_restart(&bt_broker, e, sizeof e) == 0, "restart on the copy: %s", e);
    rc_close(&bt_conn);
    BP_REQUIRE(bp_connect(&bt_broker, &bt_conn, e, sizeof e) == 0, "connect: %s", e);

    static char fresh[2 * AFTER_N][32];
    int reused = 0;
    for (int i = 0; i < 2 * AFTER_N; i++) {
        BP_REQUIRE(bp_send(&bt_conn, fresh[i], sizeof fresh[i], e, sizeof e, "t", "after the restore",
                           i % 2 ? NULL : "DELAY", "1h", NULL) == 0,
                   "SEND after the restore %d: %s", i, e);
        for (int j = 0; j < 2 * AFTER_N; j++) {
            if (strcmp(fresh[i], after[j]) == 0 && reused++ < 3)
                printf("\n    %s: sent after the backup, and handed out again after the restore", fresh[i]);
        }
    }
    BP_CHECK(reused == 0, "%d ids sent after the backup were handed out again after the restore", reused);
    printf("\n    after the backup %s .. %s, after the restore %s .. %s", after[0], after[2 * AFTER_N - 1], fresh[0],
           fresh[2 * AFTER_N - 1]);

    /* what the client remembers names no message now: GET says gone, REVOKE revokes nothing */
    int named = 0;
    char state[64], reason[256];
    for (int i = 0; i < 2 * AFTER_N; i++) {
        get_state(after[i], state, sizeof state);
        if (strcmp(state, "gone") != 0 && named++ < 3)
            printf("\n    GET %s: %s", after[i], state);
    }
    BP_CHECK(named == 0, "GET of %d ids sent after the backup shows a message after the restore", named);
    for (int i = 0; i < 2 * AFTER_N; i += AFTER_N / 4) {
        long long revoked = revoke_one(after[i], reason, sizeof reason);
        BP_CHECK(revoked == 0 && strcmp(reason, "gone") == 0,
                 "REVOKE %s (sent after the backup): revoked %lld, refused '%s'", after[i], revoked, reason);
    }
    /* the messages sent after the restore are all there, none revoked */
    for (int i = 0; i < 2 * AFTER_N; i += 97) {
        get_state(fresh[i], state, sizeof state);
        BP_CHECK(strcmp(state, i % 2 ? "ready" : "delayed") == 0, "GET %s after the restore: %s", fresh[i], state);
    }
}

static void test_disk_runs_low(void)
{
    reset_backup_dir();
    TU_REQUIRE(tu_mkdtemp("tmpfs", g_mnt, sizeof g_mnt) == 0, "mkdtemp: %s", strerror(errno));
    if (mount("tmpfs", g_mnt, "tmpfs", 0, "size=24m") != 0) {
        rmdir(g_mnt);
        g_mnt[0] = '\0';
        BP_REQUIRE(0, "mount -t tmpfs (the test needs root, as CI runs it): %s", strerror(errno));
    }
    snprintf(g_bk, sizeof g_bk, "%s", g_mnt);
    /* no disk reserve: the floor is 16 MiB; 40 MiB of messages do not fit above it */
    const char *more[] = { "--disk-reserve", "0", NULL };
    start_with_backup_dir(more);
    send_big(640, 64 * 1024);
    start_backup("big");
    struct backup_done done = wait_backup_done();
    BP_CHECK(strcmp(done.status, "failed") == 0 && strstr(done.error, "bytes free, under the") != NULL,
             "BACKUP on a small disk: %s '%s'", done.status, done.error);
    static char metrics[1 << 20];
    BP_REQUIRE(tu_http_get(bt_broker.metrics_port, "/metrics", metrics, sizeof metrics) >= 0, "GET /metrics");
    BP_CHECK(strstr(metrics, "\nhourglass_backup_last_failed 1") != NULL &&
                 strstr(metrics, "\nhourglass_backup_last_success_timestamp_seconds 0") != NULL,
             "/metrics after a failed copy");
    char path[800];
    snprintf(path, sizeof path, "%s/big.partial", g_mnt);
    BP_CHECK(!exists(path), "%s was left behind", path);
    snprintf(path, sizeof path, "%s/big", g_mnt);
    BP_CHECK(!exists(path), "%s exists after a failed copy", path);
    send_big(1, 1); /* the broker goes on */
    /* less than the floor free from the start: refused at once */
    static char block[1 << 20];
    char filler[700];
    snprintf(filler, sizeof filler, "%s/filler", g_mnt);
    FILE *f = fopen(filler, "w");
    BP_REQUIRE(f != NULL, "fopen %s", filler);
    for (int i = 0; i < 10; i++)
        fwrite(block, 1, sizeof block, f);
    fclose(f);
    CHECK_REFUSED("big", "bytes free, under the");
}

/* backup-rate 4mb and 16 MiB of records: the copy cannot take less than
 * (16 - 4) / 4 = 3 s (the first 4 MiB batch is not held back), however
 * fast the machine. */
static void test_rate(void)
{
    reset_backup_dir();
    const char *more[] = { "--backup-rate", "4mb", NULL };
    start_with_backup_dir(more);
    const size_t size = 32 * 1024;
    send_big(512, size);
    start_backup("paced");
    char e[1024], v[64];
    struct backup_done done = wait_backup_done();
    BP_CHECK(strcmp(done.status, "ok") == 0, "BACKUP paced: %s %s", done.status, done.error);
    BP_REQUIRE(bp_info_field(&bt_conn, "backup_bytes", v, sizeof v, e, sizeof e) == 0, "%s", e);
    uint64_t bytes = strtoull(v, NULL, 10);
    BP_REQUIRE(bp_info_field(&bt_conn, "backup_last_duration_ms", v, sizeof v, e, sizeof e) == 0, "%s", e);
    uint64_t ms = strtoull(v, NULL, 10), rate = 4u << 20, batch = 4u << 20;
    uint64_t least = bytes > batch ? (bytes - batch) * 1000 / rate : 0;
    printf("\n    %" PRIu64 " bytes in %" PRIu64 " ms (at least %" PRIu64 ")", bytes, ms, least);
    BP_CHECK(bytes >= (uint64_t)512 * size && ms >= least,
             "%" PRIu64 " bytes copied in %" PRIu64 " ms: faster than backup-rate 4mb allows", bytes, ms);
}

static void test_sigterm_during_copy(void)
{
    reset_backup_dir();
    start_with_backup_dir(NULL);
    send_big(1500, 32 * 1024);
    start_backup("cut");
    char e[1024];
    BP_REQUIRE(bp_stop(&bt_broker, e, sizeof e) == 0, "SIGTERM during BACKUP: %s", e);
    char path[800], out[4096];
    snprintf(path, sizeof path, "%s/cut.partial", g_bk);
    BP_CHECK(!exists(path), "%s was left behind", path);
    snprintf(path, sizeof path, "%s/cut", g_bk);
    int stopped = bp_log_contains(&bt_broker, "stopped before it was whole");
    if (exists(path)) {
        int rc = check_data(path, out, sizeof out);
        BP_CHECK(rc == 0, "the copy finished before the stop, but --check-data: exit %d: %s", rc, out);
        BP_CHECK(!stopped, "the log says the copy stopped, and it is there");
    } else {
        BP_CHECK(stopped, "no copy and no word of its stop in the log");
    }
    printf("\n    %s", stopped ? "the copy was stopped" : "the copy was done before the stop");
}

/* A broker whose BACKUP name takes seconds (16 MiB at backup-rate 4mb),
 * started, and its copy's database open in name.partial. */
static void start_slow_copy(const char *name)
{
    reset_backup_dir();
    const char *more[] = { "--backup-rate", "4mb", NULL };
    start_with_backup_dir(more);
    send_big(512, 32 * 1024); /* 16 MiB: 3 s and more at 4 MiB/s */
    start_backup(name);
    char path[800];
    snprintf(path, sizeof path, "%s/%s.partial/CURRENT", g_bk, name);
    BP_REQUIRE(tu_poll_until(path_there, path, DONE_DEADLINE_MS, 10) == 0, "no %s while the copy runs", path);
}

/* kill -9 while a copy runs (paced to take seconds): its ".partial" stays
 * (a crash cleans nothing up); the broker restarts on its data as after any
 * crash, and removes it at start, saying so; the same name then makes a
 * whole copy. */
static void test_kill9_during_copy(void)
{
    start_slow_copy("cut");
    char e[1024], path[800], out[4096];
    snprintf(path, sizeof path, "%s/cut.partial", g_bk);
    BP_REQUIRE(bp_kill9(&bt_broker) == 0, "kill -9");
    BP_CHECK(exists(path), "%s is gone after kill -9: a crash cannot clean up", path);
    BP_REQUIRE(bp_restart(&bt_broker, e, sizeof e) == 0, "restart after kill -9 mid-copy: %s", e);
    rc_close(&bt_conn);
    BP_REQUIRE(bp_connect(&bt_broker, &bt_conn, e, sizeof e) == 0, "connect: %s", e);
    BP_CHECK(!exists(path), "%s is still there after the restart", path);
    BP_CHECK(bp_log_contains(&bt_broker, "cut.partial, a copy that a broker did not finish"),
             "the log does not say that cut.partial was removed");
    start_backup("cut");
    struct backup_done done = wait_backup_done();
    BP_CHECK(strcmp(done.status, "ok") == 0, "BACKUP after the crash: %s %s", done.status, done.error);
    snprintf(path, sizeof path, "%s/cut", g_bk);
    int rc = check_data(path, out, sizeof out);
    BP_CHECK(rc == 0 && strstr(out, "ok: 512 messages") != NULL, "--check-data of the copy after the crash: %d %s", rc,
             out);
}

/* Two brokers share a backup-dir: while the first makes a copy, the second
 * starts (and leaves that .partial alone: its lock is held), and its BACKUP
 * of the same name is refused naming it; the first's copy ends whole. */
static void test_copy_of_another_broker(void)
{
    start_slow_copy("shared");
    char e[1024], path[800];
    snprintf(path, sizeof path, "%s/shared.partial/CURRENT", g_bk);

    bp_broker_t other;
    rc_conn_t oc;
    memset(&other, 0, sizeof other);
    memset(&oc, 0, sizeof oc);
    const char *flags[] = { "--backup-dir", g_bk, NULL };
    BP_REQUIRE(bp_start(&other, flags, e, sizeof e) == 0, "the second broker: %s", e);
    BP_REQUIRE(bp_connect(&other, &oc, e, sizeof e) == 0, "connect to the second broker: %s", e);
    BP_CHECK(exists(path), "the second broker's start removed the first's copy in the making");
    BP_CHECK(bp_log_contains(&other, "shared.partial is a copy another process is still making"),
             "the second broker's log does not say why it left shared.partial");
    resp_reply_t *r = rc_cmd(&oc, "BACKUP", "shared", NULL);
    char d[1024] = "";
    if (r != NULL)
        rc_describe(r, d, sizeof d);
    resp_reply_free(r);
    BP_CHECK(strstr(d, "ERR") != NULL && strstr(d, "shared.partial is a copy another process is still making") != NULL,
             "BACKUP shared on the second broker: %s", d);
    BP_CHECK(exists(path), "the second broker's BACKUP removed the first's copy in the making");
    rc_close(&oc);
    BP_CHECK(bp_destroy(&other) == 0, "the second broker did not end well");

    struct backup_done done = wait_backup_done();
    BP_CHECK(strcmp(done.status, "ok") == 0, "the first broker's copy: %s %s", done.status, done.error);
}

/* Zero the last 30 bytes of the newest non-empty write-ahead log of dir, as
 * a truncated or overwritten end would; its name into log. */
static void tear_log(const char *dir, char *log, size_t loglen)
{
    DIR *d = opendir(dir);
    BP_REQUIRE(d != NULL, "opendir %s: %s", dir, strerror(errno));
    char best[64] = "", path[1200];
    long size = -1;
    struct stat st;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        size_t n = strlen(e->d_name);
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        if (n == 10 && strcmp(e->d_name + 6, ".log") == 0 && strcmp(e->d_name, best) > 0 && stat(path, &st) == 0 &&
            st.st_size > 0) {
            snprintf(best, sizeof best, "%.60s", e->d_name);
            size = (long)st.st_size;
        }
    }
    closedir(d);
    BP_REQUIRE(size > 40, "no write-ahead log with records in %s", dir);
    snprintf(log, loglen, "%s", best);
    snprintf(path, sizeof path, "%s/%s", dir, best);
    FILE *f = fopen(path, "r+b");
    BP_REQUIRE(f != NULL && fseek(f, size - 30, SEEK_SET) == 0, "open %s", path);
    for (int i = 0; i < 30; i++)
        fputc(0, f);
    BP_REQUIRE(fclose(f) == 0, "close %s", path);
}

/* Run argv (a tar or cp of a copy), which must succeed. */
static void run_ok(const char *const *argv)
{
    char out[2048];
    int rc = tu_run_capture(argv, out, sizeof out);
    BP_REQUIRE(rc == 0, "%s %s: exit %d: %s", argv[0], argv[1], rc, out);
}

/* --check-data of dir, a whole copy whose log end was torn after it was
 * made: exit 1, the damage named (the log's checksum is not the one its
 * BACKUP-WHOLE lists), no "would cut". */
static void expect_torn_copy_damaged(const char *dir, const char *log)
{
    char out[8192], want[128];
    int rc = check_data(dir, out, sizeof out);
    snprintf(want, sizeof want, "BACKUP-WHOLE file lists %s with ", log);
    BP_CHECK(rc == 1 && strstr(out, want) != NULL && strstr(out, "have CRC-32C") != NULL &&
                 strstr(out, "would cut") == NULL && strstr(out, "ok: ") == NULL,
             "--check-data of the torn copy %s: exit %d: %s", dir, rc, out);
}

/* A copy BACKUP made is marked whole (BACKUP-WHOLE, which a tar or a cp -r
 * of it keeps). Its log torn after it was made (here its one batch: the
 * small copy's whole content) was "ok" before ("ok: 0 messages", the torn
 * end reported as what a start would cut); now --check-data says damaged,
 * exit 1, for the copy and for its tar and cp. Restored (a broker started on
 * it) the mark is gone: the directory is live, and a kill -9 with a torn end
 * is a power cut's again: ok, "would cut". */
static void test_whole_copy_torn(void)
{
    reset_backup_dir();
    start_with_backup_dir(NULL);
    char e[1024], out[8192], id[32], log[64];
    for (int i = 0; i < 20; i++)
        BP_REQUIRE(bp_send(&bt_conn, id, sizeof id, e, sizeof e, "t", "whole", NULL) == 0, "SEND %d: %s", i, e);
    for (int i = 0; i < 2; i++) {
        start_backup(i == 0 ? "b1" : "b2");
        struct backup_done done = wait_backup_done();
        BP_REQUIRE(strcmp(done.status, "ok") == 0, "BACKUP: %s %s", done.status, done.error);
    }
    char copy[800], mark[900], untarred[800], copied[800], tarball[800];
    snprintf(copy, sizeof copy, "%s/b1", g_bk);
    snprintf(mark, sizeof mark, "%s/BACKUP-WHOLE", copy);
    BP_CHECK(exists(mark), "the copy has no %s", mark);
    int rc = check_data(copy, out, sizeof out);
    BP_CHECK(rc == 0 && strncmp(out, "ok: 20 messages", 15) == 0 && strstr(out, "a whole copy made by BACKUP") != NULL,
             "--check-data of the whole copy: exit %d: %s", rc, out);

    /* moved elsewhere as an operator would: tar and cp -r keep the mark */
    snprintf(tarball, sizeof tarball, "%s/b1.tar", g_bk);
    snprintf(untarred, sizeof untarred, "%s/untarred", g_bk);
    snprintf(copied, sizeof copied, "%s/copied", g_bk);
    BP_REQUIRE(mkdir(untarred, 0700) == 0, "mkdir %s: %s", untarred, strerror(errno));
    const char *tar_c[] = { "/bin/tar", "-C", g_bk, "-cf", tarball, "b1", NULL };
    const char *tar_x[] = { "/bin/tar", "-C", untarred, "-xf", tarball, NULL };
    const char *cp_r[] = { "/bin/cp", "-r", copy, copied, NULL };
    run_ok(tar_c);
    run_ok(tar_x);
    run_ok(cp_r);
    strncat(untarred, "/b1", sizeof untarred - strlen(untarred) - 1);

    tear_log(copy, log, sizeof log);
    expect_torn_copy_damaged(copy, log);
    tear_log(untarred, log, sizeof log);
    expect_torn_copy_damaged(untarred, log);
    tear_log(copied, log, sizeof log);
    expect_torn_copy_damaged(copied, log);

    /* restored: b2 in place of the data directory, started, killed, torn */
    BP_REQUIRE(bp_stop(&bt_broker, e, sizeof e) == 0, "stop: %s", e);
    char old[700], b2[800];
    snprintf(old, sizeof old, "%s.before-restore", bt_broker.data_dir);
    snprintf(b2, sizeof b2, "%s/b2", g_bk);
    BP_REQUIRE(rename(bt_broker.data_dir, old) == 0, "rename: %s", strerror(errno));
    BP_REQUIRE(rename(b2, bt_broker.data_dir) == 0, "rename: %s", strerror(errno));
    BP_REQUIRE(bp_restart(&bt_broker, e, sizeof e) == 0, "restart on the copy: %s", e);
    snprintf(mark, sizeof mark, "%s/BACKUP-WHOLE", bt_broker.data_dir);
    BP_CHECK(!exists(mark), "the broker started on the copy kept %s", mark);
    rc_close(&bt_conn);
    BP_REQUIRE(bp_connect(&bt_broker, &bt_conn, e, sizeof e) == 0, "connect: %s", e);
    for (int i = 0; i < 5; i++)
        BP_REQUIRE(bp_send(&bt_conn, id, sizeof id, e, sizeof e, "t", "after-restore", NULL) == 0, "SEND: %s", e);
    rc_close(&bt_conn);
    BP_REQUIRE(bp_kill9(&bt_broker) == 0, "kill -9");
    tear_log(bt_broker.data_dir, log, sizeof log);
    rc = check_data(bt_broker.data_dir, out, sizeof out);
    BP_CHECK(rc == 0 && strstr(out, "would cut") != NULL &&
                 strstr(out, "ok: 25 messages") != NULL && /* the torn SEND too: redone from the commit log */
                 strstr(out, "a whole copy") == NULL,
             "--check-data of the restored copy after kill -9 and a torn end: exit %d: %s", rc, out);
}

/* Truncate the newest write-ahead log of dir to 0 bytes (a record boundary:
 * before its first record); its name into log. */
static void cut_log_to_zero(const char *dir, char *log, size_t loglen)
{
    DIR *d = opendir(dir);
    BP_REQUIRE(d != NULL, "opendir %s: %s", dir, strerror(errno));
    char best[64] = "", path[1200];
    struct dirent *e;
    while ((e = readdir(d)) != NULL)
        if (strlen(e->d_name) == 10 && strcmp(e->d_name + 6, ".log") == 0 && strcmp(e->d_name, best) > 0)
            snprintf(best, sizeof best, "%.60s", e->d_name);
    closedir(d);
    BP_REQUIRE(best[0] != '\0', "no write-ahead log in %s", dir);
    snprintf(log, loglen, "%s", best);
    snprintf(path, sizeof path, "%s/%s", dir, best);
    BP_REQUIRE(truncate(path, 0) == 0, "truncate %s: %s", path, strerror(errno));
}

/* Put the copy at from in place of the stopped broker's data directory
 * (the old one kept beside it, named by suffix). */
static void restore_copy(const char *from, const char *suffix)
{
    char old[800];
    snprintf(old, sizeof old, "%s.%s", bt_broker.data_dir, suffix);
    BP_REQUIRE(rename(bt_broker.data_dir, old) == 0, "rename %s: %s", bt_broker.data_dir, strerror(errno));
    BP_REQUIRE(rename(from, bt_broker.data_dir) == 0, "rename %s: %s", from, strerror(errno));
}

/* A whole copy lists its files in BACKUP-WHOLE. Its log cut on a record
 * boundary (here to 0 bytes, before its one batch: the whole content) was
 * "ok: 0 messages" to --check-data before, and a broker started on it
 * served an empty store; now --check-data says damaged (exit 1), naming the
 * log, its listed size and the size found, and the broker refuses to start
 * (exit 1), saying what is damaged and the two ways on; once BACKUP-WHOLE
 * is deleted it starts, as a live directory. A garbled marker is damage; a
 * marker of the kind copies had before the list is checked as then. */
static void test_whole_copy_damaged_refused(void)
{
    reset_backup_dir();
    start_with_backup_dir(NULL);
    char e[4096], out[8192], id[32], log[64], want[256];
    for (int i = 0; i < 20; i++)
        BP_REQUIRE(bp_send(&bt_conn, id, sizeof id, e, sizeof e, "t", "listed", NULL) == 0, "SEND %d: %s", i, e);
    for (int i = 0; i < 3; i++) {
        start_backup(i == 0 ? "c1" : i == 1 ? "c2" : "c3");
        struct backup_done done = wait_backup_done();
        BP_REQUIRE(strcmp(done.status, "ok") == 0, "BACKUP: %s %s", done.status, done.error);
    }
    char c1[800], c2[800], c3[800], mark[900];
    snprintf(c1, sizeof c1, "%s/c1", g_bk);
    snprintf(c2, sizeof c2, "%s/c2", g_bk);
    snprintf(c3, sizeof c3, "%s/c3", g_bk);
    int rc = check_data(c1, out, sizeof out);
    BP_CHECK(rc == 0 && strncmp(out, "ok: 20 messages", 15) == 0 &&
                 strstr(out, "as its BACKUP-WHOLE lists them") != NULL,
             "--check-data of the whole copy: exit %d: %s", rc, out);

    cut_log_to_zero(c1, log, sizeof log);
    rc = check_data(c1, out, sizeof out);
    snprintf(want, sizeof want, "lists %s with ", log);
    BP_CHECK(rc == 1 && strstr(out, want) != NULL && strstr(out, "but it has 0: truncated") != NULL &&
                 strstr(out, "ok: ") == NULL,
             "--check-data of a copy whose log was cut on a record boundary: exit %d: %s", rc, out);

    /* a garbled marker, then one without a list (what copies had before) */
    snprintf(mark, sizeof mark, "%s/BACKUP-WHOLE", c3);
    FILE *f = fopen(mark, "w");
    BP_REQUIRE(f != NULL && fputs("hourglass-broker BACKUP-WHOLE 2\nfile CURRENT x\n", f) >= 0 && fclose(f) == 0,
               "write %s", mark);
    rc = check_data(c3, out, sizeof out);
    BP_CHECK(rc == 1 && strstr(out, "BACKUP-WHOLE file is garbled") != NULL,
             "--check-data of a copy with a garbled marker: exit %d: %s", rc, out);
    f = fopen(mark, "w");
    BP_REQUIRE(f != NULL &&
                   fputs("A whole copy made by hourglass-broker's BACKUP: every file of it was written and fsynced "
                         "before it was\nnamed, so its write-ahead log has no torn end.\n",
                         f) >= 0 &&
                   fclose(f) == 0,
               "write %s", mark);
    rc = check_data(c3, out, sizeof out);
    BP_CHECK(rc == 0 && strncmp(out, "ok: 20 messages", 15) == 0 && strstr(out, "without a list of files") != NULL,
             "--check-data of a copy with a marker of before the list: exit %d: %s", rc, out);

    /* restored: the damaged copy is refused, with what to do */
    BP_REQUIRE(bp_stop(&bt_broker, e, sizeof e) == 0, "stop: %s", e);
    restore_copy(c1, "before-c1");
    rc = bp_restart(&bt_broker, e, sizeof e);
    BP_CHECK(rc != 0, "the broker started on a damaged whole copy");
    if (rc == 0) {
        bp_stop(&bt_broker, e, sizeof e);
    } else {
        BP_CHECK(!bp_alive(&bt_broker) && WIFEXITED(bt_broker.last_status) && WEXITSTATUS(bt_broker.last_status) == 1,
                 "refusing a damaged copy should exit 1");
        BP_CHECK(bp_log_contains(&bt_broker, "is damaged: it is a whole copy made by BACKUP") &&
                     bp_log_contains(&bt_broker, want) && bp_log_contains(&bt_broker, "restore another copy") &&
                     bp_log_contains(&bt_broker, "delete ") &&
                     bp_log_contains(&bt_broker, "/BACKUP-WHOLE and start again"),
                 "the refusal does not say what and how to go on: %s", e);
    }
    snprintf(mark, sizeof mark, "%s/BACKUP-WHOLE", bt_broker.data_dir);
    BP_CHECK(exists(mark), "the refused start removed %s", mark);
    /* the operator accepts the loss */
    BP_REQUIRE(unlink(mark) == 0, "unlink %s: %s", mark, strerror(errno));
    BP_REQUIRE(bp_restart(&bt_broker, e, sizeof e) == 0, "restart after deleting BACKUP-WHOLE: %s", e);

    /* a whole copy starts, and its mark is gone */
    BP_REQUIRE(bp_stop(&bt_broker, e, sizeof e) == 0, "stop: %s", e);
    restore_copy(c2, "before-c2");
    BP_REQUIRE(bp_restart(&bt_broker, e, sizeof e) == 0, "restart on a whole copy: %s", e);
    BP_CHECK(!exists(mark), "the broker started on the whole copy kept %s", mark);
    BP_REQUIRE(bp_stop(&bt_broker, e, sizeof e) == 0, "stop: %s", e);
    rc = check_data(bt_broker.data_dir, out, sizeof out);
    BP_CHECK(rc == 0 && strncmp(out, "ok: 20 messages", 15) == 0 && strstr(out, "a whole copy") == NULL,
             "--check-data of the restored whole copy: exit %d: %s", rc, out);
    BP_REQUIRE(bp_restart(&bt_broker, e, sizeof e) == 0, "restart: %s", e);
}

static const tu_test_t tests[] = {
    { "refusals: no backup-dir, bad names, taken names, a gone directory", test_refusals },
    { "under load, then restored: as of the command, and nothing after", test_under_load_and_restore },
    { "restored: no id sent after the copy is handed out again", test_ids_after_restore },
    { "a disk that runs low: the copy fails and leaves nothing", test_disk_runs_low },
    { "backup-rate holds the copy to its pace", test_rate },
    { "SIGTERM while a copy runs: the whole copy or nothing", test_sigterm_during_copy },
    { "kill -9 while a copy runs: its .partial is removed at the restart", test_kill9_during_copy },
    { "a copy another broker is making is left alone", test_copy_of_another_broker },
    { "a whole copy torn after it was made is damage; restored, it is live", test_whole_copy_torn },
    { "a whole copy cut on a record boundary is damage, and not started", test_whole_copy_damaged_refused },
    { NULL, NULL },
};

int main(int argc, char **argv)
{
    atexit(reset_backup_dir);
    return bt_main(argc, argv, "backup", tests);
}
