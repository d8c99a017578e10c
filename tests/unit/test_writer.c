/*
 * tests/unit/test_writer.c — CUnit suite for broker/writer.c, the storage
 * thread, driven in-process: a real store in a temp directory, a real event
 * base for the completions, jobs made by the test.
 *
 * second_commit_failure: one iteration of the storage thread runs the
 * queued jobs and commits them (fsynced), then retries parked jobs and
 * commits their writes. When only that second commit fails (the disk is
 * "full": RLIMIT_FSIZE lets the small SEND's write through, not the parked
 * job's 1 MiB), the SEND of the first commit must still be answered with its
 * result — it is durable, and an error would make a retrying client send it
 * twice — while the parked job gets the storage error; after a reopen the
 * SEND is there.
 *
 * burst_in_bounded_batches: 24 SENDs of 1 MiB queued for one iteration are
 * committed (and answered) in batches of about STORE_BATCH_MAX_BYTES, not as
 * one 24 MiB batch: no job starts with the bound already pending.
 *
 * parked_by_topic: 1 000 parked jobs wait on a topic that gets nothing, one
 * on a topic that gets a SEND; the SEND wakes that one, and not one wake()
 * of the 1 000 is asked (each iteration used to ask every parked job).
 * Deadlines expire in their order whatever the parking order, and
 * writer_cancel drops exactly the jobs of its connection.
 *
 * steps_between_others: a job that steps (JOB_AGAIN) runs once per
 * iteration, other connections' jobs between its steps, its own
 * connection's next job after it; writer_stop makes it finish.
 */
#include "broker/writer.h"
#include "base/alloc.h"
#include "tests/helpers/testutil.h"

#include <CUnit/CUnit.h>
#include <dirent.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <stdatomic.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>

#include <event2/thread.h>

static _Atomic int g_wake; /* set by the small job: the parked one may run */
static job_t *g_done[4];
static int g_ndone;
static int g_stopped;

static job_t *job_make(job_result_t (*exec)(job_t *, writer_t *))
{
    job_t *j = xcalloc(1, sizeof *j);
    resp_buf_init(&j->reply);
    j->exec = exec;
    j->conn_id = 1;
    return j;
}

/* SEND payload[0..len) to topic "t" from job j: 0 and *id, or -1 with j's
 * reply the error. */
static int send_payload(job_t *j, writer_t *w, const char *payload, size_t len, uint64_t *id)
{
    store_send_req_t r = { .topic = "t", .topic_len = 1, .payload = payload, .payload_len = len };
    uint64_t due;
    char err[256];
    if (store_send(writer_store(w), &r, writer_now(w), id, &due, err, sizeof err) != 0) {
        resp_add_errorf(&j->reply, "ERR %s", err);
        return -1;
    }
    return 0;
}

static job_result_t small_exec(job_t *j, writer_t *w)
{
    uint64_t id;
    if (send_payload(j, w, "small", 5, &id) == 0) {
        resp_add_int(&j->reply, (long long)id);
    }
    j->durable = 1;
    g_wake = 1;
    return JOB_DONE;
}

static job_result_t big_exec(job_t *j, writer_t *w)
{
    static char big[1 << 20];
    if (!g_wake) {
        return JOB_PARK;
    }
    memset(big, 'b', sizeof big);
    uint64_t id;
    if (send_payload(j, w, big, sizeof big, &id) == 0) {
        resp_add_simple(&j->reply, "BIG");
    }
    return JOB_DONE;
}

static int big_wake(job_t *j, writer_t *w)
{
    (void)j;
    (void)w;
    return g_wake;
}

static void big_expire(job_t *j, writer_t *w)
{
    (void)w;
    resp_add_simple(&j->reply, "EXPIRED");
}

enum {
    BURST_JOBS = 24,
    BURST_PAYLOAD = 1 << 20
};
static uint64_t g_most_pending; /* the most a burst job found pending before its SEND */
static int g_burst_done, g_burst_ok;

static job_result_t burst_exec(job_t *j, writer_t *w)
{
    static char payload[BURST_PAYLOAD];
    memset(payload, 'm', sizeof payload);
    uint64_t pending = store_pending_bytes(writer_store(w));
    if (pending > g_most_pending) {
        g_most_pending = pending;
    }
    store_send_req_t r = { .topic = "burst", .topic_len = 5, .payload = payload, .payload_len = sizeof payload };
    uint64_t id, due;
    char err[256];
    if (store_send(writer_store(w), &r, writer_now(w), &id, &due, err, sizeof err) != 0) {
        resp_add_errorf(&j->reply, "ERR %s", err);
    } else {
        resp_add_int(&j->reply, (long long)id);
    }
    j->durable = 1;
    return JOB_DONE;
}

enum {
    IDLE_JOBS = 1000
};
static _Atomic int g_idle_wakes, g_busy_wakes, g_busy_sent;
static int g_park_done;     /* parked jobs answered */
static uint64_t g_order[8]; /* their seq, in the order they were answered */

static job_result_t park_exec(job_t *j, writer_t *w)
{
    (void)w;
    if (strcmp(j->wake_topic, "busy") == 0 && g_busy_sent) {
        resp_add_simple(&j->reply, "WOKEN");
        return JOB_DONE;
    }
    return JOB_PARK;
}

static int park_wake(job_t *j, writer_t *w)
{
    (void)w;
    if (strcmp(j->wake_topic, "busy") == 0) {
        g_busy_wakes++;
    } else {
        g_idle_wakes++;
    }
    return 1; /* "worth a try": exec decides */
}

static void park_expire(job_t *j, writer_t *w)
{
    (void)w;
    resp_add_simple(&j->reply, "EXPIRED");
}

static job_t *park_job(const char *topic, uint64_t conn_id, uint64_t seq, uint64_t block_ms)
{
    job_t *j = job_make(park_exec);
    j->block_set = 1;
    j->block_ms = block_ms;
    j->wake = park_wake;
    j->expire = park_expire;
    j->wake_topic = topic;
    j->wake_topic_len = strlen(topic);
    j->conn_id = conn_id;
    j->seq = seq;
    return j;
}

static job_result_t busy_send_exec(job_t *j, writer_t *w)
{
    store_send_req_t r = { .topic = "busy", .topic_len = 4, .payload = "x", .payload_len = 1 };
    uint64_t id, due;
    char err[256];
    if (store_send(writer_store(w), &r, writer_now(w), &id, &due, err, sizeof err) != 0) {
        resp_add_errorf(&j->reply, "ERR %s", err);
    } else {
        resp_add_int(&j->reply, (long long)id);
    }
    g_busy_sent = 1;
    return JOB_DONE;
}

/* Jobs that step (JOB_AGAIN): each exec notes its name in g_steps; a
 * stepping job answers "stopped" when the writer stops before its last step. */
typedef struct step_job {
    job_t job; /* first member */
    char name;
    int steps_left; /* execs until JOB_DONE */
} step_job_t;
static char g_steps[64];
static size_t g_nsteps;
static int g_step_done, g_step_stopped;

static job_result_t step_exec(job_t *j, writer_t *w)
{
    step_job_t *sj = (step_job_t *)j;
    if (g_nsteps < sizeof g_steps - 1) {
        g_steps[g_nsteps++] = sj->name;
    }
    if (--sj->steps_left > 0 && !writer_stopping(w)) {
        return JOB_AGAIN;
    }
    resp_add_simple(&j->reply, sj->steps_left > 0 ? "stopped" : "OK");
    return JOB_DONE;
}

static job_t *step_job(char name, uint64_t conn_id, int steps)
{
    step_job_t *sj = xcalloc(1, sizeof *sj);
    resp_buf_init(&sj->job.reply);
    sj->job.exec = step_exec;
    sj->job.conn_id = conn_id;
    sj->name = name;
    sj->steps_left = steps;
    return &sj->job;
}

static void on_done(job_t *j, void *ctx)
{
    (void)ctx;
    if (j->exec == step_exec) {
        g_step_done++;
        g_step_stopped += j->reply.raw.len > 1 && memcmp(j->reply.raw.data, "+stopped", 8) == 0;
        job_free(j);
    } else if (j->exec == park_exec) {
        if (g_park_done < 8) {
            g_order[g_park_done] = j->seq;
        }
        g_park_done++;
        job_free(j);
    } else if (j->exec == busy_send_exec) {
        job_free(j);
    } else if (j->exec == burst_exec) {
        g_burst_done++;
        g_burst_ok += !j->failed && j->reply.raw.len > 0 && j->reply.raw.data[0] == ':';
        job_free(j);
    } else if (g_ndone < 4) {
        g_done[g_ndone++] = j;
    } else {
        job_free(j);
    }
}

static void on_stopped(void *ctx)
{
    (void)ctx;
    g_stopped = 1;
}

/* Run the loop until *flag reaches want or 20 s pass. */
static int loop_until(struct event_base *base, int *flag, int want)
{
    uint64_t end = tu_now_mono_ms() + 20000;
    while (*flag < want && tu_now_mono_ms() < end) {
        event_base_loop(base, EVLOOP_NONBLOCK);
        struct timespec ts = { 0, 5 * 1000000 };
        nanosleep(&ts, NULL);
    }
    return *flag >= want;
}

/* A "disk" that takes a small write more, not a large one: RLIMIT_FSIZE
 * just past the furthest byte written in dir (tu_store_bytes_used: a write past it fails with EFBIG,
 * which the writer takes for a full disk). *saved is the limit to give back
 * with disk_back. */
/* No write past `bytes` into any file (RLIMIT_FSIZE, SIGXFSZ ignored: the write fails with EFBIG) until disk_back. */
static void file_writes_below(rlim_t bytes, struct rlimit *saved)
{
    TU_REQUIRE(getrlimit(RLIMIT_FSIZE, saved) == 0, "getrlimit: %s", strerror(errno));
    struct rlimit lim = *saved;
    lim.rlim_cur = bytes;
    signal(SIGXFSZ, SIG_IGN);
    TU_REQUIRE(setrlimit(RLIMIT_FSIZE, &lim) == 0, "setrlimit: %s", strerror(errno));
}

static void disk_nearly_full(const char *dir, struct rlimit *saved)
{
    file_writes_below((rlim_t)tu_store_bytes_used(dir) + 65536, saved);
}

static void disk_back(const struct rlimit *saved)
{
    setrlimit(RLIMIT_FSIZE, saved);
    signal(SIGXFSZ, SIG_DFL);
}

static int find_small(void *ctx, const store_entry_t *e)
{
    if (e->m->payload.len == 5 && memcmp(e->m->payload.ptr, "small", 5) == 0) {
        (*(int *)ctx)++;
    }
    return 0;
}

/* What each test runs on: a store in a fresh temp dir, an event base and a
 * writer on them (not started). */
typedef struct rig {
    char dir[512], data[600];
    store_options_t o;
    store_t *s;
    struct event_base *base;
    writer_t *w;
} rig_t;

static void rig_open(rig_t *r)
{
    char err[512] = "";
    memset(r, 0, sizeof *r);
    TU_REQUIRE(tu_mkdtemp("writer", r->dir, sizeof r->dir) == 0, "mkdtemp: %s", strerror(errno));
    snprintf(r->data, sizeof r->data, "%s/data", r->dir);
    store_options_default(&r->o);
    r->o.path = r->data;
    r->o.segment_bytes = TU_SEGMENT_BYTES;
    TU_REQUIRE(store_open(&r->o, tu_now_wall_ms(), &r->s, err, sizeof err) == 0, "store_open: %s", err);
    TU_REQUIRE(evthread_use_pthreads() == 0, "evthread_use_pthreads");
    r->base = event_base_new();
    TU_REQUIRE(r->base != NULL, "event_base_new");
    r->w = writer_new(r->s, &r->o, r->base, on_done, on_stopped, NULL);
}

/* After writer_stop: the writer (and its store), the base, the dir. */
static void rig_close(rig_t *r)
{
    writer_free(r->w);
    event_base_free(r->base);
    tu_rmtree(r->dir);
}

static void test_second_commit_failure(void)
{
    char err[512] = "";
    rig_t rig;
    rig_open(&rig);
    writer_t *w = rig.w;
    struct event_base *base = rig.base;
    TU_REQUIRE(writer_start(w, err, sizeof err) == 0, "writer_start: %s", err);

    job_t *big = job_make(big_exec);
    big->block_set = 1;
    big->block_ms = 0; /* forever */
    big->wake = big_wake;
    big->expire = big_expire;
    big->seq = 1;
    writer_submit(w, big);
    uint64_t end = tu_now_mono_ms() + 20000;
    while (writer_parked(w) != 1 && tu_now_mono_ms() < end) {
        struct timespec ts = { 0, 5 * 1000000 };
        nanosleep(&ts, NULL);
    }
    TU_REQUIRE(writer_parked(w) == 1, "the big job did not park");

    /* the "disk" now takes a small write, not a 1 MiB one: the store is new, so its commit log starts at its first
       segment's head and takes the small SEND's record there; the big one's would end past 1 MiB into the file */
    struct rlimit saved;
    file_writes_below(512 * 1024, &saved);

    job_t *small = job_make(small_exec);
    small->seq = 2;
    writer_submit(w, small);
    int ok = loop_until(base, &g_ndone, 2);
    disk_back(&saved);
    TU_CHECK(ok, "%d of 2 jobs completed", g_ndone);
    for (int i = 0; i < g_ndone; i++) {
        job_t *j = g_done[i];
        const char *reply = j->reply.raw.data;
        if (j->seq == 2) {
            TU_CHECK(!j->failed && reply != NULL && reply[0] == ':',
                     "the SEND of the first (successful) commit was answered '%.*s'", (int)j->reply.raw.len,
                     reply ? reply : "");
        } else {
            TU_CHECK(j->failed && reply != NULL && strncmp(reply, "-ERR storage failure", 20) == 0,
                     "the parked job of the failed commit was answered '%.*s'", (int)j->reply.raw.len,
                     reply ? reply : "");
        }
        job_free(j);
    }
    g_ndone = 0;

    writer_stop(w);
    TU_CHECK(loop_until(base, &g_stopped, 1), "the writer did not stop");
    writer_free(w);
    event_base_free(base);

    /* the acknowledged SEND is on disk */
    store_t *s = NULL;
    rig.o.create_if_missing = 0;
    TU_REQUIRE(store_open(&rig.o, tu_now_wall_ms(), &s, err, sizeof err) == 0, "reopen: %s", err);
    int found = 0;
    TU_CHECK(store_scan(s, find_small, &found, err, sizeof err) == 0, "scan: %s", err);
    TU_CHECK(found == 1, "the acknowledged SEND is there %d times after a reopen", found);
    store_close(s, NULL, 0);
    tu_rmtree(rig.dir);
}

static void test_burst_in_bounded_batches(void)
{
    char err[512] = "";
    rig_t rig;
    rig_open(&rig);
    writer_t *w = rig.w;
    struct event_base *base = rig.base;
    g_stopped = 0;
    for (int i = 0; i < BURST_JOBS; i++) { /* queued before the thread runs: one iteration takes them all */
        job_t *j = job_make(burst_exec);
        j->seq = (uint64_t)i + 1;
        writer_submit(w, j);
    }
    TU_REQUIRE(writer_start(w, err, sizeof err) == 0, "writer_start: %s", err);
    TU_CHECK(loop_until(base, &g_burst_done, BURST_JOBS), "%d of %d SENDs answered", g_burst_done, BURST_JOBS);
    TU_CHECK(g_burst_ok == BURST_JOBS, "%d of %d SENDs answered with an id", g_burst_ok, BURST_JOBS);
    writer_stop(w);
    TU_CHECK(loop_until(base, &g_stopped, 1), "the writer did not stop");
    const storage_stats_t *st = writer_stats(w);
    printf("\n    %d SENDs of 1 MiB in one iteration: %llu commits, at most %.1f MiB pending before a SEND ",
           BURST_JOBS, (unsigned long long)st->commits, (double)g_most_pending / (1 << 20));
    TU_CHECK(g_most_pending < STORE_BATCH_MAX_BYTES,
             "a SEND found %llu bytes pending: the iteration's batch grew past STORE_BATCH_MAX_BYTES (%llu)",
             (unsigned long long)g_most_pending, (unsigned long long)STORE_BATCH_MAX_BYTES);
    TU_CHECK(st->batches == 1 &&
                 st->commits >= BURST_JOBS * (uint64_t)BURST_PAYLOAD / (STORE_BATCH_MAX_BYTES + BURST_PAYLOAD),
             "%llu iterations, %llu commits", (unsigned long long)st->batches, (unsigned long long)st->commits);
    rig_close(&rig);
}

static int wait_parked(writer_t *w, size_t want)
{
    uint64_t end = tu_now_mono_ms() + 20000;
    while (writer_parked(w) != want && tu_now_mono_ms() < end) {
        struct timespec ts = { 0, 5 * 1000000 };
        nanosleep(&ts, NULL);
    }
    return writer_parked(w) == want;
}

static void test_parked_by_topic(void)
{
    char err[512] = "";
    rig_t rig;
    rig_open(&rig);
    writer_t *w = rig.w;
    struct event_base *base = rig.base;
    g_stopped = 0;
    TU_REQUIRE(writer_start(w, err, sizeof err) == 0, "writer_start: %s", err);

    for (int i = 0; i < IDLE_JOBS; i++) {
        writer_submit(w, park_job("idle", 100 + (uint64_t)i, 1000 + (uint64_t)i, 0));
    }
    /* deadlines parked out of order; two of connection 77, cancelled below */
    writer_submit(w, park_job("idle", 5, 3, 600));
    writer_submit(w, park_job("idle", 5, 1, 200));
    writer_submit(w, park_job("idle", 5, 2, 400));
    writer_submit(w, park_job("idle", 77, 77, 0));
    writer_submit(w, park_job("busy", 77, 78, 300));
    writer_submit(w, park_job("busy", 9, 9, 0));
    TU_REQUIRE(wait_parked(w, IDLE_JOBS + 6), "%zu of %d jobs parked", writer_parked(w), IDLE_JOBS + 6);
    writer_cancel(w, 77);
    TU_CHECK(wait_parked(w, IDLE_JOBS + 4), "after writer_cancel(77) %zu parked, want %d", writer_parked(w),
             IDLE_JOBS + 4);
    int idle_before = g_idle_wakes;
    writer_submit(w, job_make(busy_send_exec));
    /* seq 9 has no deadline: only the SEND's wake answers it before the stop. Where it falls among the three
       deadlines (200-600 ms after parking) depends on how fast this machine got here, so the order is checked
       without it. */
    TU_CHECK(loop_until(base, &g_park_done, 4), "%d of 4 parked jobs answered (a wake, 3 deadlines)", g_park_done);
    uint64_t by_deadline[4];
    int woken = 0, expired = 0;
    for (int i = 0; i < 4 && i < g_park_done; i++) {
        if (g_order[i] == 9) {
            woken++;
        } else {
            by_deadline[expired++] = g_order[i];
        }
    }
    TU_CHECK(woken == 1, "the SEND to busy woke its parked job (seq 9) %d times among the first 4 answers", woken);
    TU_CHECK(g_busy_wakes == 1, "the busy topic's parked job was asked %d times, want 1", (int)g_busy_wakes);
    for (int i = 0; i < expired; i++) {
        TU_CHECK(by_deadline[i] == (uint64_t)i + 1, "expiry %d was seq %llu, want %d (deadline order)", i + 1,
                 (unsigned long long)by_deadline[i], i + 1);
    }
    printf("\n    %d parked jobs on an idle topic: wake() asked %d times over the SEND and 3 expiries ", IDLE_JOBS,
           (int)g_idle_wakes - idle_before);
    TU_CHECK(g_idle_wakes == idle_before && g_idle_wakes == 0,
             "the idle topic's parked jobs were asked %d times: the SEND to another topic woke them",
             (int)g_idle_wakes);
    TU_CHECK(writer_parked(w) == IDLE_JOBS, "%zu parked at the end, want %d", writer_parked(w), IDLE_JOBS);
    writer_stop(w); /* answers the 1 000 with their expiry */
    TU_CHECK(loop_until(base, &g_stopped, 1), "the writer did not stop");
    TU_CHECK(g_park_done == 4 + IDLE_JOBS, "%d parked jobs answered at stop, want %d", g_park_done, 4 + IDLE_JOBS);
    rig_close(&rig);
}

/* A job that steps (JOB_AGAIN, DLQ REQUEUE/DROP ALL) runs one step per
 * iteration: the other connections' jobs run in between, its own
 * connection's later job waits until it is done, and writer_stop makes it
 * finish. Everything is queued before the thread starts, so the order is
 * exact: iteration 1 runs A's first step and all three of B's (A waits for
 * the next iteration, not the next round-robin turn), then A steps alone,
 * then a (A's connection) runs. */
static void test_steps_between_others(void)
{
    char err[512] = "";
    rig_t rig;
    rig_open(&rig);
    writer_t *w = rig.w;
    struct event_base *base = rig.base;
    g_stopped = 0;
    g_nsteps = 0;
    g_step_done = g_step_stopped = 0;
    writer_submit(w, step_job('A', 1, 4));
    writer_submit(w, step_job('a', 1, 1));
    for (int i = 0; i < 3; i++) {
        writer_submit(w, step_job('B', 2, 1));
    }
    TU_REQUIRE(writer_start(w, err, sizeof err) == 0, "writer_start: %s", err);
    TU_CHECK(loop_until(base, &g_step_done, 5), "%d of 5 jobs answered", g_step_done);
    g_steps[g_nsteps] = '\0';
    TU_CHECK(strcmp(g_steps, "ABBBAAAa") == 0, "order of the steps: %s, want ABBBAAAa", g_steps);
    TU_CHECK(g_step_stopped == 0, "%d answered as stopped", g_step_stopped);

    g_nsteps = 0;
    writer_submit(w, step_job('L', 3, 1000000000)); /* would step for hours */
    uint64_t end = tu_now_mono_ms() + 20000;
    while (g_nsteps < 3 && tu_now_mono_ms() < end) {
        struct timespec ts = { 0, 1000000 };
        nanosleep(&ts, NULL);
    }
    TU_CHECK(g_nsteps >= 3, "the long job stepped %zu times", g_nsteps);
    writer_stop(w);
    TU_CHECK(loop_until(base, &g_stopped, 1), "the writer did not stop with a job stepping");
    TU_CHECK(g_step_done == 6 && g_step_stopped == 1, "at stop: %d answered, %d as stopped; want 6, 1", g_step_done,
             g_step_stopped);
    rig_close(&rig);
}

/* A job that steps, each step a SEND of 256 KiB, until the writer stops;
 * its so_far hook says how many steps it did. */
typedef struct fill_job {
    job_t job; /* first member */
    int steps;
} fill_job_t;
static _Atomic int g_fill_steps;

static job_result_t fill_exec(job_t *j, writer_t *w)
{
    fill_job_t *fj = (fill_job_t *)j;
    static char payload[256 * 1024];
    memset(payload, 'f', sizeof payload);
    uint64_t id;
    if (send_payload(j, w, payload, sizeof payload, &id) != 0) {
        return JOB_DONE;
    }
    atomic_store(&g_fill_steps, ++fj->steps);
    if (writer_stopping(w)) {
        resp_add_simple(&j->reply, "stopped");
        return JOB_DONE;
    }
    return JOB_AGAIN;
}

static void fill_so_far(const job_t *j, char *buf, size_t len)
{
    snprintf(buf, len, "%d steps", ((const fill_job_t *)j)->steps);
}

/* The disk fills between two steps of a job (RLIMIT_FSIZE: a commit fails
 * with EFBIG, which the writer takes for a full disk): its next step is
 * refused (or the step that meets it fails naming the disk's error), and
 * the error says what the steps before did (its so_far hook: DLQ REQUEUE
 * ALL's count). */
static void test_steps_refused_on_full_disk(void)
{
    char err[512] = "";
    rig_t rig;
    rig_open(&rig);
    g_stopped = 0;
    g_ndone = 0;
    atomic_store(&g_fill_steps, 0);
    fill_job_t *fj = xcalloc(1, sizeof *fj);
    resp_buf_init(&fj->job.reply);
    fj->job.exec = fill_exec;
    fj->job.so_far = fill_so_far;
    fj->job.conn_id = 1;
    writer_submit(rig.w, &fj->job);
    TU_REQUIRE(writer_start(rig.w, err, sizeof err) == 0, "writer_start: %s", err);
    uint64_t end = tu_now_mono_ms() + 20000;
    while (atomic_load(&g_fill_steps) < 3 && tu_now_mono_ms() < end) {
        struct timespec ts = { 0, 1000000 };
        nanosleep(&ts, NULL);
    }
    TU_REQUIRE(atomic_load(&g_fill_steps) >= 3, "the job stepped %d times", atomic_load(&g_fill_steps));
    struct rlimit saved;
    disk_nearly_full(rig.data, &saved);
    int ok = loop_until(rig.base, &g_ndone, 1);
    disk_back(&saved);
    TU_REQUIRE(ok, "the stepping job was not answered on the full disk");
    job_t *j = g_done[0];
    char want[64];
    int steps = ((fill_job_t *)j)->steps;
    snprintf(want, sizeof want, " (%d steps before it, the rest are still there)", steps);
    /* Refused before it ran ("disk full": the commit after the step before met the full disk), or, when the
       step's own writes met it (a write that reaches LevelDB inside the step: the commit log's apply once 16 MiB
       are held, or a read barrier), answered as every write that fails there, naming the disk's error (as
       test_second_commit_failure's); either way with what the steps before did. */
    const char *reply = j->reply.raw.data;
    int refused = j->reply.raw.len > 20 && strncmp(reply, "-ERR disk full", 14) == 0;
    int failed_full = j->reply.raw.len > 20 && strncmp(reply, "-ERR storage failure", 20) == 0 &&
                      strstr(reply, strerror(EFBIG)) != NULL;
    TU_CHECK(j->failed && (refused || failed_full) && strstr(reply, want) != NULL && steps >= 3,
             "the refused step was answered '%.*s' (%d steps)", (int)j->reply.raw.len, reply, steps);
    job_free(j);
    g_ndone = 0;
    writer_stop(rig.w);
    TU_CHECK(loop_until(rig.base, &g_stopped, 1), "the writer did not stop");
    rig_close(&rig);
}

static const tu_test_t writer_tests[] = {
    { "second commit failure", test_second_commit_failure },
    { "burst in bounded batches", test_burst_in_bounded_batches },
    { "parked jobs indexed by topic, connection and deadline", test_parked_by_topic },
    { "a job in steps: others run between, its connection waits", test_steps_between_others },
    { "a job in steps refused on a full disk says what its steps did", test_steps_refused_on_full_disk },
    { NULL, NULL },
};

static const tu_suite_t suites[] = {
    { "writer", writer_tests },
};

int main(int argc, char **argv)
{
    return tu_suites_main(argc, argv, suites, sizeof suites / sizeof suites[0], NULL, NULL);
}
