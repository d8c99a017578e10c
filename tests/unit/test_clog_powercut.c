/*
 * tests/unit/test_clog_powercut.c — the commit log under simulated power cuts
 * (docs/design-commitlog.md §3's end rule, §10 step 3's power-cut test,
 * applied to step 1's levels/clog.c).
 *
 * Per seed, rounds of: a forked child opens the log and appends batches of
 * 1–8 records (random sizes), syncing after most of them as the store's
 * syncer will, through tests/helpers/powercut.c, which journals every write
 * not yet covered by a sync and kills the child at a random watched call (or
 * after its last batch). The parent then "powers off" (a random subset of the
 * unsynced writes kept, some torn at 512 or 4096 bytes), opens the log, and
 * checks what the design promises:
 *
 *  - the open succeeds: a power cut loses only unsynced bytes, and CLOG_DAMAGED
 *    is for damage below a later batch's D, which only synced bytes are;
 *  - the log is a prefix of the batches appended, each whole (every record in
 *    order, at its offset, with its bytes, then its COMMIT), holding at least
 *    every batch whose clog_sync had returned;
 *  - every record of that prefix reads back by offset, and the first record of
 *    every batch past it reads as CLOG_NOT_RECORD (nothing readable that the
 *    log does not hold);
 *  - the open reports the end after the prefix.
 *
 * The next round goes on from what survived, sometimes with a raised floor.
 * A failure prints the seed; HG_POWERCUT_SEED=<n> replays that seed alone,
 * HG_POWERCUT_SEEDS=<n> sets how many seeds run (500).
 */
#include "levels/clog.h"
#include "tests/helpers/powercut.h"
#include "tests/helpers/testutil.h"

#include <CUnit/CUnit.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#define SEG         UINT64_C(65536)
#define MAX_RECORDS 8
#define MAX_BATCHES 512
#define ROUNDS      3
#define BATCHES     24 /* per round: two to three segments */

enum {
    APPENDING,
    APPENDED,
    SYNCED
};

/* A batch the child appended, as the parent checks it. */
typedef struct ledger_batch {
    uint64_t first, end;
    uint64_t off[MAX_RECORDS];
    uint32_t len[MAX_RECORDS];
    uint32_t records;
    int state;
    uint64_t tag; /* payloads are made from it */
} ledger_batch_t;

/* Shared between the child that writes and the parent that checks. */
typedef struct ledger {
    size_t n;
    ledger_batch_t b[MAX_BATCHES];
} ledger_t;

/* Totals over every cut, so the test shows the cuts did something. */
typedef struct totals {
    powercut_stats_t cut;
    uint64_t rounds, calls, synced_kept, appended_lost, tails_cut;
} totals_t;

static char dir[512];
static char err[1024];
static ledger_t *g_ledger;

static void setup(void)
{
    TU_REQUIRE(tu_mkdtemp("clogpc", dir, sizeof dir) == 0, "mkdtemp");
    err[0] = '\0';
}

static void teardown(void)
{
    tu_rmtree(dir);
}

static void payload(char *p, size_t n, uint64_t tag, uint32_t i)
{
    uint64_t s = tag * MAX_RECORDS + i;
    for (size_t k = 0; k < n; k += 8) {
        uint64_t v = powercut_next_rand(&s);
        memcpy(p + k, &v, n - k < 8 ? n - k : 8);
    }
}

/* The child: open, append and sync batches, then die (the power cut comes
 * from powercut's kill, or right here after the last batch). */
static void __attribute__((noreturn)) writer(uint64_t seed, uint64_t floor, uint64_t kill_at)
{
    uint64_t s = seed;
    powercut_arm(kill_at);
    clog_options_t o = { dir, SEG, floor, 0, 0, 0 };
    clog_t *c = NULL;
    if (clog_open(&o, &c, NULL, err, sizeof err) != 0) {
        fprintf(stderr, "child: clog_open: %s\n", err);
        _exit(3);
    }
    char p[1200];
    for (int k = 0; k < BATCHES && g_ledger->n < MAX_BATCHES; k++) {
        ledger_batch_t *lb = &g_ledger->b[g_ledger->n];
        memset(lb, 0, sizeof *lb);
        lb->tag = powercut_next_rand(&s);
        uint32_t want = 1 + (uint32_t)(powercut_next_rand(&s) % MAX_RECORDS);
        clog_batch_t b = { 0 };
        clog_batch_begin(c, &b);
        g_ledger->n++;
        for (uint32_t i = 0; i < want; i++) {
            uint32_t len = 1 + (uint32_t)(powercut_next_rand(&s) % sizeof p);
            payload(p, len, lb->tag, i);
            int rc = clog_batch_add(c, &b, p, len, &lb->off[i], err, sizeof err);
            if (rc == CLOG_BATCH_FULL) {
                break; /* the batch ends here; the next one starts the next segment */
            }
            if (rc != 0) {
                fprintf(stderr, "child: clog_batch_add: %s\n", err);
                _exit(4);
            }
            lb->len[i] = len;
            lb->records = i + 1;
        }
        lb->first = lb->off[0];
        if (clog_append(c, &b, err, sizeof err) != 0) {
            fprintf(stderr, "child: clog_append: %s\n", err);
            _exit(5);
        }
        clog_batch_free(&b);
        lb->end = clog_end(c);
        lb->state = APPENDED;
        if (powercut_next_rand(&s) % 2 != 0) {
            if (clog_sync(c, err, sizeof err) != 0) {
                fprintf(stderr, "child: clog_sync: %s\n", err);
                _exit(6);
            }
            for (size_t j = 0; j < g_ledger->n; j++) {
                if (g_ledger->b[j].state == APPENDED && g_ledger->b[j].end <= clog_durable(c)) {
                    g_ledger->b[j].state = SYNCED;
                }
            }
        }
        if (powercut_next_rand(&s) % 8 == 0 && clog_prepare(c, 1, err, sizeof err) != 0) {
            fprintf(stderr, "child: clog_prepare: %s\n", err);
            _exit(7);
        }
    }
    raise(SIGKILL);
    _exit(8);
}

/* The walk's check of each record against the ledger. */
typedef struct walk_check {
    size_t batch;    /* the ledger batch expected */
    uint32_t record; /* its record expected (records: its COMMIT) */
    char why[256];
} walk_check_t;

static int check_record(const clog_record_t *r, void *ctx)
{
    walk_check_t *w = ctx;
    if (w->batch >= g_ledger->n) {
        snprintf(w->why, sizeof w->why, "a record at %" PRIu64 " past every batch appended", r->offset);
        return 1;
    }
    const ledger_batch_t *lb = &g_ledger->b[w->batch];
    if (r->batch != lb->first) {
        snprintf(w->why, sizeof w->why, "record at %" PRIu64 " of batch %" PRIu64 ", want batch %zu at %" PRIu64,
                 r->offset, r->batch, w->batch, lb->first);
        return 1;
    }
    if (r->type == CLOG_COMMIT) {
        if (w->record != lb->records) {
            snprintf(w->why, sizeof w->why, "batch %zu at %" PRIu64 ": COMMIT after %u of %u records", w->batch,
                     lb->first, w->record, lb->records);
            return 1;
        }
        w->batch++;
        w->record = 0;
        return 0;
    }
    char want[1200];
    uint32_t i = w->record;
    if (i >= lb->records || r->offset != lb->off[i] || r->len != lb->len[i]) {
        snprintf(w->why, sizeof w->why, "batch %zu: record %u at %" PRIu64 " (%u bytes) is not the one appended",
                 w->batch, i, r->offset, r->len);
        return 1;
    }
    payload(want, r->len, lb->tag, i);
    if (memcmp(r->data, want, r->len) != 0) {
        snprintf(w->why, sizeof w->why, "batch %zu: record %u at %" PRIu64 ": bytes differ", w->batch, i, r->offset);
        return 1;
    }
    w->record++;
    return 0;
}

/* After a cut: open and check the promises (header comment). Returns the
 * batches that survived, or -1 after a failed check (reported). */
static long check_after_cut(uint64_t seed, int round, totals_t *t)
{
    clog_options_t o = { dir, SEG, 0, 0, 0, 0 };
    clog_t *c = NULL;
    clog_open_report_t rep;
    int rc = clog_open(&o, &c, &rep, err, sizeof err);
    TU_CHECK(rc == 0, "seed %" PRIu64 " round %d: clog_open refused a power-cut log (%d): %s", seed, round, rc, err);
    if (rc != 0) {
        return -1;
    }
    walk_check_t w = { 0 };
    rc = clog_walk(c, 0, check_record, &w, err, sizeof err);
    TU_CHECK(rc == 0 && w.record == 0, "seed %" PRIu64 " round %d: walk %d: %s %s", seed, round, rc,
             rc == 1 ? w.why : err, w.record ? "(ends inside a batch)" : "");
    size_t k = w.batch, synced = 0;
    for (size_t j = 0; j < g_ledger->n; j++) {
        synced += g_ledger->b[j].state == SYNCED;
    }
    int ok = rc == 0 && w.record == 0;
    ok = ok && k >= synced;
    TU_CHECK(k >= synced, "seed %" PRIu64 " round %d: %zu batches survive, %zu had been synced", seed, round, k,
             synced);
    uint64_t end = k > 0 ? g_ledger->b[k - 1].end : 0; /* no batch: an empty log ends at 0 */
    TU_CHECK(rep.end == end, "seed %" PRIu64 " round %d: open reports end %" PRIu64 ", the prefix ends at %" PRIu64,
             seed, round, rep.end, end);
    ok = ok && rep.end == end;
    clog_reader_t rd = { 0 };
    clog_record_t r;
    for (size_t j = 0; ok && j < g_ledger->n; j++) {
        const ledger_batch_t *lb = &g_ledger->b[j];
        for (uint32_t i = 0; ok && i < (j < k ? lb->records : (lb->records > 0)); i++) {
            rc = clog_read(c, lb->off[i], &rd, &r, err, sizeof err);
            int want = j < k ? 0 : CLOG_NOT_RECORD;
            char bytes[1200];
            if (want == 0) {
                payload(bytes, lb->len[i], lb->tag, i);
            }
            ok = rc == want &&
                 (want != 0 || (r.len == lb->len[i] && r.offset == lb->off[i] && memcmp(r.data, bytes, r.len) == 0));
            TU_CHECK(ok, "seed %" PRIu64 " round %d: read of batch %zu record %u at %" PRIu64 ": %d (want %d) %s", seed,
                     round, j, i, lb->off[i], rc, want, rc < 0 ? err : "");
        }
    }
    clog_reader_free(&rd);
    clog_close(c);
    t->synced_kept += synced;
    t->appended_lost += g_ledger->n - k;
    t->tails_cut += rep.cut_at != 0;
    return ok ? (long)k : -1;
}

/* One seed: ROUNDS of write, cut, check. 0, or -1 after a failure. */
static int run_seed(uint64_t seed, void *totals)
{
    totals_t *t = totals;
    uint64_t s = seed * UINT64_C(0x100000001b3);
    g_ledger->n = 0;
    uint64_t floor = 0;
    for (int round = 0; round < ROUNDS; round++) {
        powercut_reset();
        uint64_t kill_at = powercut_next_rand(&s) % 5 == 0 ? 0 : 1 + powercut_next_rand(&s) % 60;
        uint64_t child_seed = powercut_next_rand(&s), cut_seed = powercut_next_rand(&s);
        fflush(NULL);
        pid_t pid = fork();
        TU_REQUIRE(pid >= 0, "fork");
        if (pid == 0) {
            writer(child_seed, floor, kill_at);
        }
        int rc = powercut_cut_child(pid, cut_seed, &t->cut, err, sizeof err);
        TU_CHECK(rc == 0, "seed %" PRIu64 " round %d: %s", seed, round, err);
        if (rc != 0) {
            return -1;
        }
        t->calls += powercut_calls();
        t->rounds++;
        long k = check_after_cut(seed, round, t);
        if (k < 0) {
            return -1;
        }
        g_ledger->n = (size_t)k;
        uint64_t end = k > 0 ? g_ledger->b[k - 1].end : 0;
        floor = powercut_next_rand(&s) % 3 == 0 ? end + powercut_next_rand(&s) % (2 * SEG) : 0;
    }
    return 0;
}

static void test_power_cuts(void)
{
    g_ledger = mmap(NULL, sizeof *g_ledger, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    TU_REQUIRE(g_ledger != MAP_FAILED, "mmap ledger");
    TU_REQUIRE(powercut_init(dir, 64u << 20, err, sizeof err) == 0, "%s", err);
    totals_t t = { 0 };
    powercut_seed_run_t seeds = powercut_run_seeds(dir, 500, run_seed, &t);
    fprintf(stderr,
            "  %" PRIu64 " seeds, %" PRIu64 " cuts (%" PRIu64 " file calls) in %" PRIu64 " ms: %" PRIu64
            " unsynced writes (%" PRIu64 " kept, %" PRIu64 " dropped, %" PRIu64 " torn), %" PRIu64
            " renames lost; %" PRIu64 " synced batches checked, %" PRIu64 " appended batches lost, %" PRIu64
            " torn tails cut\n",
            seeds.ran, t.rounds, t.calls, seeds.wall_ms, t.cut.unsynced, t.cut.kept, t.cut.dropped, t.cut.torn,
            t.cut.renames_lost, t.synced_kept, t.appended_lost, t.tails_cut);
    if (!seeds.failed && seeds.ran >= 50) { /* the cuts must have exercised what they are for */
        TU_CHECK(t.cut.torn > 0 && t.cut.dropped > 0 && t.cut.renames_lost > 0 && t.appended_lost > 0 &&
                     t.tails_cut > 0,
                 "the cuts tore, dropped and undid a rename, lost batches, and the open cut a tail");
    }
}

static const tu_test_t powercut_tests[] = {
    { "power cuts keep a whole prefix with every synced batch", test_power_cuts },
    { NULL, NULL },
};

static const tu_suite_t suites[] = {
    { "clog_powercut", powercut_tests },
};

int main(int argc, char **argv)
{
    return tu_suites_main(argc, argv, suites, sizeof suites / sizeof suites[0], setup, teardown);
}
