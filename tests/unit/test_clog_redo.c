/*
 * tests/unit/test_clog_redo.c — the commit log's batch protocol and recovery
 * (levels/clog_redo.h; docs/design-commitlog.md §3, §10 step 3).
 *
 * One workload drives every test: batches of 1–4 messages, each message
 * appended to one of three CQs with its where-slot, now and then a CQ head
 * move, a slot rewritten (revoked), LevelDB puts and deletes, and the queues'
 * head and tail records (the bounds the redo asks for) in the same LevelDB
 * batch. Every operation is applied to an in-memory model as it is planned
 * and recorded in a ledger, so the expected state after any prefix of the
 * batches is the model rebuilt from the ledger's first batches, and a check
 * compares every CQ entry, slot, LevelDB key and both marks with it.
 *
 * Suite "clog_redo": held writes wait for the sync, apply, redo after a kill
 * (the page cache kept: fork, no close), redo twice over the same range, redo
 * after a redo killed at each of its file calls, a checkpoint leaves nothing
 * to redo, a LevelDB batch applied once while running and redone in order
 * over a LevelDB that kept a later batch but lost an earlier one, damage
 * (the log ending below the applied mark; a batch without its derived
 * record), and the replay time of 64 MiB of log. A failed sync of the log
 * (powercut_fail_sync: EIO, the writes lost): the segment abandoned, the
 * held batches carried, the open never reading the abandoned range (preads
 * watched) after a kill -9 and after a power cut; the abandoned segment
 * recycled and used again; a second failed sync, of the fresh segment. The
 * checkpoint's segment kept from recycling; redo_free leaving the next open
 * to redo what the log kept; redo_batch_room's answer as redo_commit sees
 * it. The checkpoint split: redo_checkpoint_finish on a second pthread while
 * the owner commits and applies, a second begin refused, recycling kept at
 * and above a begun B. A case that ends early has what it opened closed by
 * teardown.
 *
 * Suite "clog_redo_powercut": tests/helpers/powercut.c (linked in: it
 * interposes pwrite/write/rename/fsync/fdatasync, which LevelDB's own
 * write-ahead log, tables and manifest use too — libleveldb is a shared
 * library, so its calls reach these definitions) cuts the power in a writer
 * and, sometimes, again in a redo, and in half the writer rounds fails one
 * sync of the log (redo_sync_failed handles it; the ledger keeps the
 * abandoned range so a cut inside the handling is judged right); the
 * recovered state must equal the model
 * after a prefix of the batches holding every batch whose sync returned, and
 * nothing (CQ tail, slot, LevelDB key) may name anything past the log's end;
 * the writer splits half its checkpoints (begin, a batch, finish). Also: a
 * cut between a checkpoint's begin and finish (the open redoes from the
 * previous B) and a cut at each file call of the finish.
 * LevelDB's own open runs before the layer is armed: LevelDB 1.23 renames its
 * CURRENT over the old one without a directory fsync, a loss the layer
 * cannot undo (powercut.h); from the arm on every LevelDB file call goes
 * through it. HG_POWERCUT_SEED=<n> replays one seed, HG_POWERCUT_SEEDS=<n>
 * sets how many run.
 */
#include "levels/clog_redo.h"
#include "levels/keys.h"
#include "tests/helpers/powercut.h"
#include "tests/helpers/testutil.h"

#include <CUnit/CUnit.h>
#include <dirent.h>
#include <fcntl.h>
#include <inttypes.h>
#include <leveldb/c.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#define SEG         UINT64_C(65536)
#define NQUEUES     3
#define MAX_ENTRIES 2048
#define MAX_SEGS    16
#define MAX_SLOTS   1024
#define NKEYS       40
#define MAX_OPS     24
#define MAX_BATCHES 400

/* One derived write as the ledger keeps it. */
typedef struct op {
    char tag;   /* 'Q' CQ entry, 'H' head, 'S' slot, 'P' put, 'D' delete, 'T' a queue's bounds records */
    uint32_t q; /* queue ('Q', 'H', 'T') */
    uint64_t x; /* index, head, segment base, key number */
    uint64_t y; /* 'Q' log offset, 'S' ordinal, 'P' value */
    uint64_t z; /* 'Q' due */
    slot_t s;   /* 'S' */
} op_t;

enum {
    APPENDED = 1,
    SYNCED = 2
};

typedef struct ledger_batch {
    uint64_t end;
    int state;
    uint32_t nops;
    op_t ops[MAX_OPS];
} ledger_batch_t;

/* Shared between a writer child and the parent that checks. */
typedef struct ledger {
    size_t n;
    /* a failed sync being handled (redo_sync_failed called, not returned): the batches ending in
       (ab_from, ab_to] are kept, carried past ab_to, when the log ends past ab_to */
    int ab_pending;
    uint64_t ab_from, ab_to;
    uint64_t failures; /* failed syncs handled */
    ledger_batch_t b[MAX_BATCHES];
} ledger_t;

typedef struct model {
    uint64_t head[NQUEUES + 1], tail[NQUEUES + 1];
    cq_entry_t ent[NQUEUES + 1][MAX_ENTRIES];
    size_t nsegs;
    struct {
        uint64_t base, count;
        slot_t s[MAX_SLOTS];
    } seg[MAX_SEGS];
    int present[NKEYS];
    uint64_t val[NKEYS];
} model_t;

static char dir[512];
static char err[2048];
static ledger_t *g_ledger;
static model_t g_model;
static int g_fail_next_sync; /* set by a test: the next sync of the log with something to sync fails */
static int g_commit_applied; /* set by a test: write_batch commits with redo_commit_applied (append, sync, apply) */

/* What a case holds open in this process, released by teardown when the
 * case ends early (a failed TU_REQUIRE): LevelDB's lock on the directory is
 * per process, so a handle left open would fail every later case's open
 * ("LOCK: already held by process"), in the forked children too. */
#define MAX_HELD 8
static leveldb_t *g_dbs[MAX_HELD];
static redo_t *g_redos[MAX_HELD];

static void hold_ptr(void **slots, void *p)
{
    for (size_t i = 0; p != NULL && i < MAX_HELD; i++) {
        if (slots[i] == NULL) {
            slots[i] = p;
            return;
        }
    }
    TU_REQUIRE(p == NULL, "more than %d handles held open", MAX_HELD);
}

static void release_ptr(void **slots, void *p)
{
    for (size_t i = 0; i < MAX_HELD; i++) {
        if (slots[i] == p) {
            slots[i] = NULL;
        }
    }
}

static void db_close(leveldb_t *db)
{
    release_ptr((void **)g_dbs, db);
    leveldb_close(db);
}

/* redo_close of an r opened by redo_open_on. */
static int redo_close_held(redo_t *r, char *e, size_t elen)
{
    release_ptr((void **)g_redos, r);
    return redo_close(r, e, elen);
}

static void release_held(void)
{
    char ignored[256];
    for (size_t i = 0; i < MAX_HELD; i++) {
        if (g_redos[i] != NULL) {
            redo_free(g_redos[i], ignored, sizeof ignored);
            g_redos[i] = NULL;
        }
    }
    for (size_t i = 0; i < MAX_HELD; i++) {
        if (g_dbs[i] != NULL) {
            leveldb_close(g_dbs[i]);
            g_dbs[i] = NULL;
        }
    }
}

static void setup(void)
{
    if (dir[0] == '\0') {
        TU_REQUIRE(tu_mkdtemp("clogredo", dir, sizeof dir) == 0, "mkdtemp");
        TU_REQUIRE(powercut_init(dir, 64u << 20, err, sizeof err) == 0, "%s", err);
        g_ledger = mmap(NULL, sizeof *g_ledger, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
        TU_REQUIRE(g_ledger != MAP_FAILED, "mmap ledger");
    } else {
        TU_REQUIRE(mkdir(dir, 0700) == 0, "mkdir %s", dir);
    }
    powercut_reset();
    g_ledger->n = 0;
    g_ledger->ab_pending = 0;
    g_ledger->failures = 0;
    g_fail_next_sync = 0;
    memset(&g_model, 0, sizeof g_model);
    err[0] = '\0';
}

static void teardown(void)
{
    release_held();
    tu_rmtree(dir);
}

/* ---- LevelDB and the bounds the redo asks for ------------------------------------- */

static leveldb_t *db_open_at(const char *path)
{
    leveldb_options_t *o = leveldb_options_create();
    leveldb_options_set_create_if_missing(o, 1);
    char *dberr = NULL;
    leveldb_t *db = leveldb_open(o, path, &dberr);
    leveldb_options_destroy(o);
    if (dberr != NULL) {
        snprintf(err, sizeof err, "leveldb_open %s: %s", path, dberr);
        leveldb_free(dberr);
    }
    hold_ptr((void **)g_dbs, db);
    return db;
}

static leveldb_t *db_open(void)
{
    return db_open_at(dir);
}

static void key_of(char tag, uint64_t n, char *k, size_t len)
{
    snprintf(k, len, "%c%02" PRIu64, tag, n);
}

/* The bytes after the u64 of a workload value v ('P'). */
static size_t filler_len(uint64_t v)
{
    return (size_t)(v % 7) * 1500;
}

/* The u64 under key (0 and *found 0 when absent; *len its length). */
static uint64_t db_u64_len(leveldb_t *db, const char *key, size_t klen, int *found, size_t *len)
{
    leveldb_readoptions_t *ro = leveldb_readoptions_create();
    size_t n = 0;
    char *dberr = NULL;
    char *v = leveldb_get(db, ro, key, klen, &n, &dberr);
    leveldb_readoptions_destroy(ro);
    leveldb_free(dberr);
    uint64_t x = v != NULL && n >= 8 ? be64_get(v) : 0;
    if (found != NULL) {
        *found = v != NULL;
    }
    if (len != NULL) {
        *len = n;
    }
    leveldb_free(v);
    return x;
}

static uint64_t db_u64(leveldb_t *db, const char *key, size_t klen, int *found)
{
    return db_u64_len(db, key, klen, found, NULL);
}

static int bounds_from_db(void *ctx, uint32_t queue, uint64_t *head, uint64_t *tail, char *e, size_t elen)
{
    (void)e;
    (void)elen;
    char k[24];
    key_of('h', queue, k, sizeof k);
    *head = db_u64(ctx, k, strlen(k), NULL);
    key_of('t', queue, k, sizeof k);
    *tail = db_u64(ctx, k, strlen(k), NULL);
    return 0;
}

static uint64_t mark(leveldb_t *db, const char *name)
{
    key_buf_t k;
    key_meta(&k, name);
    return db_u64(db, k.b, k.n, NULL);
}

static int redo_open_on(leveldb_t *db, uint64_t floor, redo_t **r, redo_open_report_t *rep)
{
    redo_options_t o = { dir, SEG, floor, db, dir, bounds_from_db, db };
    int rc = redo_open(&o, r, rep, err, sizeof err);
    hold_ptr((void **)g_redos, *r);
    return rc;
}

/* In the test process: LevelDB opened on dir and the redo on it (floor 0, no
 * report), both held for teardown. Requires each open to succeed, naming the
 * one that failed; *db gets the LevelDB handle. */
static redo_t *open_db_and_redo(leveldb_t **db)
{
    *db = db_open();
    TU_REQUIRE(*db != NULL, "LevelDB open: %s", err);
    redo_t *r = NULL;
    TU_REQUIRE(redo_open_on(*db, 0, &r, NULL) == 0, "redo open: %s", err);
    return r;
}

/* In a forked writer: the same opens as open_db_and_redo; a failure is
 * printed ("child: ...") and ends the child with exit status 2, which the
 * parent's status check reports. */
static redo_t *child_open_db_and_redo(leveldb_t **db)
{
    *db = db_open();
    redo_t *r = NULL;
    if (*db == NULL || redo_open_on(*db, 0, &r, NULL) != 0) {
        fprintf(stderr, "child: %s\n", err);
        _exit(2);
    }
    return r;
}

/* child_open_db_and_redo, then the power-cut layer armed (no cut planned):
 * every file call of the writer from here on is journaled. */
static redo_t *child_open_armed(leveldb_t **db)
{
    redo_t *r = child_open_db_and_redo(db);
    powercut_arm(0);
    return r;
}

/* ---- the model and the workload ------------------------------------------------------ */

static size_t seg_index(model_t *m, uint64_t base)
{
    for (size_t i = 0; i < m->nsegs; i++) {
        if (m->seg[i].base == base) {
            return i;
        }
    }
    m->seg[m->nsegs].base = base;
    m->seg[m->nsegs].count = 0;
    return m->nsegs++;
}

static void model_apply(model_t *m, const op_t *o)
{
    if (o->tag == 'Q' && o->x >= m->head[o->q]) {
        m->ent[o->q][o->x] = (cq_entry_t){ o->y, o->z };
        if (o->x == m->tail[o->q]) {
            m->tail[o->q]++;
        }
    } else if (o->tag == 'H' && o->x > m->head[o->q]) {
        m->head[o->q] = o->x;
    } else if (o->tag == 'S') {
        size_t i = seg_index(m, o->x);
        m->seg[i].s[o->y] = o->s;
        if (o->y == m->seg[i].count) {
            m->seg[i].count++;
        }
    } else if (o->tag == 'P') {
        m->present[o->x] = 1;
        m->val[o->x] = o->y;
    } else if (o->tag == 'D') {
        m->present[o->x] = 0;
    }
}

/* The model after the ledger's first p batches. */
static void model_rebuild(model_t *m, size_t p)
{
    memset(m, 0, sizeof *m);
    for (size_t i = 0; i < p; i++) {
        for (uint32_t j = 0; j < g_ledger->b[i].nops; j++) {
            model_apply(m, &g_ledger->b[i].ops[j]);
        }
    }
}

/* Plan one op: into the model, the ledger batch, and the redo batch. */
static void emit(model_t *m, ledger_batch_t *lb, redo_batch_t *b, op_t o)
{
    model_apply(m, &o);
    lb->ops[lb->nops++] = o;
    char k[24], v[8];
    switch (o.tag) {
    case 'Q':
        redo_cq_write(b, o.q, o.x, &(cq_entry_t){ o.y, o.z });
        break;
    case 'H':
        redo_cq_head(b, o.q, o.x);
        break;
    case 'S':
        redo_slot_write(b, o.x, o.y, &o.s);
        break;
    case 'P': {
        /* values of up to 9 KiB, so LevelDB's log crosses its 32 KiB blocks between checkpoints: a lost
           write then leaves a hole its reader skips, keeping the records behind it */
        static char val[8 + 6 * 1500];
        key_of('k', o.x, k, sizeof k);
        be64_put(val, o.y);
        memset(val + 8, (int)(o.y & 0xff), filler_len(o.y));
        redo_db_put(b, k, strlen(k), val, 8 + filler_len(o.y));
        break;
    }
    case 'D':
        key_of('k', o.x, k, sizeof k);
        redo_db_delete(b, k, strlen(k));
        break;
    case 'T':
        key_of('h', o.q, k, sizeof k);
        be64_put(v, m->head[o.q]);
        redo_db_put(b, k, strlen(k), v, sizeof v);
        key_of('t', o.q, k, sizeof k);
        be64_put(v, m->tail[o.q]);
        redo_db_put(b, k, strlen(k), v, sizeof v);
        break;
    }
}

static int handle_sync_failure(redo_t *r);
static void ledger_synced(redo_t *r);

/* write_batch's commit by redo_commit_applied. The ledger counts the batch
 * before the call, its end past any log's end until the append sets it (the
 * ledger is shared: a cut before the append loses the batch harmlessly, a
 * cut in its sync or apply is judged with its end). On success nothing may
 * be held or in the overlay; after a failed sync the batch must be held and
 * its put seen through the overlay, then the failure is handled as
 * sync_and_apply handles one. 0, or -1 with err. */
static int commit_applied(redo_t *r, ledger_batch_t *lb, redo_batch_t *b)
{
    if (g_fail_next_sync) {
        g_fail_next_sync = 0;
        powercut_fail_sync(1, "clog-");
    }
    const op_t put = lb->ops[0]; /* write_batch emits its put first */
    lb->end = UINT64_MAX;
    lb->state = APPENDED;
    g_ledger->n++;
    if (redo_commit_applied(r, b, &lb->end, err, sizeof err) == 0) {
        ledger_synced(r);
        if (redo_held(r) != 0 || overlay_count(redo_overlay(r)) != 0) {
            snprintf(err, sizeof err, "redo_commit_applied left %zu batches and %zu places held", redo_held(r),
                     overlay_count(redo_overlay(r)));
            return -1;
        }
        return 0;
    }
    if (lb->end == UINT64_MAX) {
        g_ledger->n--; /* the append failed: nothing written */
        return -1;
    }
    if (strstr(err, "must be abandoned") == NULL) {
        return -1;
    }
    char k[24];
    key_of('k', put.x, k, sizeof k);
    const char *v = NULL;
    size_t vn = 0;
    if (put.tag != 'P' || redo_held(r) == 0 || overlay_get(redo_overlay(r), k, strlen(k), &v, &vn) == OVERLAY_NONE) {
        snprintf(err, sizeof err, "after redo_commit_applied's failed sync the batch is not held in the overlay");
        return -1;
    }
    return handle_sync_failure(r);
}

/* Build and commit batch number k of the workload (seeded by *s) into the
 * ledger's next place. 0, or -1 with err. */
static int write_batch(redo_t *r, model_t *m, uint64_t *s, uint64_t k)
{
    ledger_batch_t *lb = &g_ledger->b[g_ledger->n];
    memset(lb, 0, sizeof *lb);
    redo_batch_t b = { 0 };
    int touched[NQUEUES + 1] = { 0 };
    /* the LevelDB writes first: derived bytes made before a message count in redo_add_message's room */
    emit(m, lb, &b, (op_t){ .tag = 'P', .x = k % NKEYS, .y = k * 1000 + 1 + powercut_next_rand(s) % 7 });
    if (powercut_next_rand(s) % 3 == 0) {
        emit(m, lb, &b, (op_t){ .tag = 'D', .x = powercut_next_rand(s) % NKEYS });
    }
    uint32_t nmsg = 1 + (uint32_t)(powercut_next_rand(s) % 4);
    for (uint32_t i = 0; i < nmsg; i++) {
        char payload[256];
        size_t n = 8 + powercut_next_rand(s) % 200;
        memset(payload, (int)(k + i), n);
        uint64_t id;
        int rc = redo_add_message(r, &b, payload, n, &id, err, sizeof err);
        if (rc == REDO_BATCH_FULL) {
            break;
        }
        if (rc != 0) {
            redo_batch_free(&b);
            return -1;
        }
        uint32_t q = 1 + (uint32_t)(powercut_next_rand(s) % NQUEUES);
        uint64_t index = m->tail[q];
        emit(m, lb, &b, (op_t){ .tag = 'Q', .q = q, .x = index, .y = id, .z = k * 16 + i });
        uint64_t base = id - id % SEG;
        uint64_t ordinal = m->seg[seg_index(m, base)].count;
        emit(m, lb, &b, (op_t){ .tag = 'S', .x = base, .y = ordinal, .s = { id, q, 0, index } });
        touched[q] = 1;
    }
    if (powercut_next_rand(s) % 4 == 0) {
        uint32_t q = 1 + (uint32_t)(powercut_next_rand(s) % NQUEUES);
        uint64_t head = m->head[q] + powercut_next_rand(s) % (m->tail[q] - m->head[q] + 1);
        emit(m, lb, &b, (op_t){ .tag = 'H', .q = q, .x = head });
        touched[q] = 1;
    }
    if (powercut_next_rand(s) % 3 == 0 && m->nsegs > 0) {
        size_t i = powercut_next_rand(s) % m->nsegs;
        if (m->seg[i].count > 0) {
            uint64_t ord = powercut_next_rand(s) % m->seg[i].count;
            slot_t sl = m->seg[i].s[ord];
            sl.flags = SLOT_REVOKED;
            emit(m, lb, &b, (op_t){ .tag = 'S', .x = m->seg[i].base, .y = ord, .s = sl });
        }
    }
    for (uint32_t q = 1; q <= NQUEUES; q++) {
        if (touched[q]) {
            emit(m, lb, &b, (op_t){ .tag = 'T', .q = q });
        }
    }
    if (g_commit_applied) {
        int rc = commit_applied(r, lb, &b);
        redo_batch_free(&b);
        return rc;
    }
    int rc = redo_commit(r, &b, &lb->end, err, sizeof err);
    redo_batch_free(&b);
    if (rc == 0) {
        lb->state = APPENDED;
        g_ledger->n++;
    }
    return rc;
}

/* The ledger's batches ending in (from, to] now end at `end` (carried) and
 * are kept. */
static void ledger_carried(uint64_t from, uint64_t to, uint64_t end)
{
    for (size_t j = 0; j < g_ledger->n; j++) {
        if (g_ledger->b[j].end > from && g_ledger->b[j].end <= to) {
            g_ledger->b[j].end = end;
            g_ledger->b[j].state = SYNCED;
        }
    }
    g_ledger->ab_pending = 0;
}

/* A failed sync of the log, handled: the ledger notes the range first (a
 * cut inside redo_sync_failed is judged by check_after_cut), then the
 * carried batches' new ends. 0, or -1 with err. */
static int handle_sync_failure(redo_t *r)
{
    g_ledger->ab_from = clog_durable(redo_log(r));
    g_ledger->ab_to = clog_end(redo_log(r));
    g_ledger->ab_pending = 1;
    redo_failure_t f;
    if (redo_sync_failed(r, &f, err, sizeof err) != 0) {
        return -1;
    }
    if (f.from != g_ledger->ab_from || f.to != g_ledger->ab_to) {
        snprintf(err, sizeof err,
                 "redo_sync_failed abandoned [%" PRIu64 ", %" PRIu64 "), want [%" PRIu64 ", %" PRIu64 ")", f.from, f.to,
                 g_ledger->ab_from, g_ledger->ab_to);
        return -1;
    }
    ledger_carried(f.from, f.to, f.end);
    g_ledger->failures++;
    return 0;
}

/* clog_sync, then the ledger's batches it covers are SYNCED, then the held
 * writes are made; a failed sync is handled (redo_sync_failed). */
static int sync_and_apply(redo_t *r)
{
    if (g_fail_next_sync && clog_end(redo_log(r)) > clog_durable(redo_log(r))) {
        g_fail_next_sync = 0;
        powercut_fail_sync(1, "clog-");
    }
    if (clog_sync(redo_log(r), err, sizeof err) != 0) {
        if (strstr(err, "must be abandoned") == NULL) {
            return -1;
        }
        return handle_sync_failure(r);
    }
    ledger_synced(r);
    return redo_apply_durable(r, err, sizeof err);
}

/* The ledger's batches below the log's durable end are SYNCED. */
static void ledger_synced(redo_t *r)
{
    uint64_t d = clog_durable(redo_log(r));
    for (size_t j = 0; j < g_ledger->n; j++) {
        if (g_ledger->b[j].state == APPENDED && g_ledger->b[j].end <= d) {
            g_ledger->b[j].state = SYNCED;
        }
    }
}

/* ---- the check --------------------------------------------------------------------- */

/* Compare the directory (files closed, LevelDB open as db) with m; the log
 * ends at end. 0, or -1 with why. */
static int check_state(leveldb_t *db, const model_t *m, uint64_t end, char *why, size_t wlen)
{
    for (uint64_t i = 0; i < NKEYS; i++) {
        char k[24];
        key_of('k', i, k, sizeof k);
        int found;
        size_t len = 0;
        uint64_t v = db_u64_len(db, k, strlen(k), &found, &len);
        if (found != m->present[i] || (found && (v != m->val[i] || len != 8 + filler_len(v)))) {
            snprintf(why, wlen, "LevelDB key %s: %s %" PRIu64 ", want %s %" PRIu64, k, found ? "holds" : "absent", v,
                     m->present[i] ? "value" : "absent", m->val[i]);
            return -1;
        }
    }
    if (mark(db, "applied") != end || mark(db, "checkpoint") != end) {
        snprintf(why, wlen, "marks applied %" PRIu64 " checkpoint %" PRIu64 ", want both at the log's end %" PRIu64,
                 mark(db, "applied"), mark(db, "checkpoint"), end);
        return -1;
    }
    for (uint32_t q = 1; q <= NQUEUES; q++) {
        uint64_t head, tail;
        bounds_from_db(db, q, &head, &tail, NULL, 0);
        if (head != m->head[q] || tail != m->tail[q]) {
            snprintf(why, wlen, "CQ %u: records say [%" PRIu64 ", %" PRIu64 "), want [%" PRIu64 ", %" PRIu64 ")", q,
                     head, tail, m->head[q], m->tail[q]);
            return -1;
        }
        if (tail == 0) {
            continue;
        }
        cq_t *cq;
        char e2[256];
        if (cq_open(dir, q, head, tail, &cq, e2, sizeof e2) != 0) {
            snprintf(why, wlen, "CQ %u: %s", q, e2);
            return -1;
        }
        for (uint64_t i = head; i < tail; i++) {
            cq_entry_t e;
            if (cq_read(cq, i, 1, &e, e2, sizeof e2) != 0 || e.log_offset != m->ent[q][i].log_offset ||
                e.due != m->ent[q][i].due) {
                snprintf(why, wlen, "CQ %u index %" PRIu64 ": %s", q, i, e2);
                cq_close(cq, e2, sizeof e2);
                return -1;
            }
        }
        cq_close(cq, e2, sizeof e2);
    }
    size_t files = 0;
    DIR *d = opendir(dir);
    struct dirent *de;
    while (d != NULL && (de = readdir(d)) != NULL) {
        files += strncmp(de->d_name, "slot-", 5) == 0;
    }
    closedir(d);
    if (files != m->nsegs) {
        snprintf(why, wlen, "%zu slot files, want %zu", files, m->nsegs);
        return -1;
    }
    for (size_t i = 0; i < m->nsegs; i++) {
        slot_file_t *f;
        char e2[256];
        if (slot_file_open(dir, m->seg[i].base, 0, &f, e2, sizeof e2) != 0) {
            snprintf(why, wlen, "%s", e2);
            return -1;
        }
        int rc = slot_count(f) == m->seg[i].count ? 0 : -1;
        if (rc != 0) {
            snprintf(why, wlen, "slot file of %" PRIu64 ": %" PRIu64 " slots, want %" PRIu64, m->seg[i].base,
                     slot_count(f), m->seg[i].count);
        }
        for (uint64_t o = 0; rc == 0 && o < m->seg[i].count; o++) {
            slot_t s;
            const slot_t *w = &m->seg[i].s[o];
            if (slot_get(f, o, &s, e2, sizeof e2) != 0 || s.id != w->id || s.queue != w->queue || s.flags != w->flags ||
                s.cq_index != w->cq_index) {
                snprintf(why, wlen, "slot %" PRIu64 " of segment %" PRIu64 " differs: %s", o, m->seg[i].base, e2);
                rc = -1;
            }
        }
        slot_file_close(f, e2, sizeof e2);
        if (rc != 0) {
            return -1;
        }
    }
    return 0;
}

/* Open, redo, close, and check against the ledger's first p batches, for
 * the p in [least, most] whose last batch ends where the log does (a power
 * cut may keep unsynced batches). Returns p (0 after a failed check). */
static size_t expect_prefix(size_t least, size_t most, redo_open_report_t *rep)
{
    leveldb_t *db = db_open();
    TU_REQUIRE(db != NULL, "%s", err);
    redo_t *r = NULL;
    TU_REQUIRE(redo_open_on(db, 0, &r, rep) == 0, "redo_open: %s", err);
    TU_CHECK(redo_close_held(r, err, sizeof err) == 0, "redo_close: %s", err);
    size_t p = least;
    while (p < most && g_ledger->b[p].end <= rep->log.end) {
        p++;
    }
    uint64_t end = p > 0 ? g_ledger->b[p - 1].end : 0;
    TU_CHECK(rep->log.end == end, "the log ends at %" PRIu64 ", want the end of batch %zu..%zu (%" PRIu64 ")",
             rep->log.end, least, most, end);
    model_rebuild(&g_model, p);
    char why[1024] = "";
    int ok = check_state(db, &g_model, end, why, sizeof why) == 0;
    TU_CHECK(ok, "after %zu batches: %s", p, why);
    db_close(db);
    return rep->log.end == end && ok ? p : 0;
}

static void expect_recovered(size_t p, redo_open_report_t *rep)
{
    expect_prefix(p, p, rep);
}

/* A child writes n batches (synced and applied every `sync_every`, a
 * checkpoint every `cp_every`; 0: never) and dies without closing (kill -9:
 * the page cache keeps every write). */
static void write_and_die(size_t n, int sync_every, int cp_every, int sync_last)
{
    pid_t pid = fork();
    TU_REQUIRE(pid >= 0, "fork");
    if (pid == 0) {
        leveldb_t *db = NULL;
        redo_t *r = child_open_db_and_redo(&db);
        uint64_t s = 42 + g_ledger->n;
        model_rebuild(&g_model, g_ledger->n);
        for (size_t k = 0; k < n; k++) {
            if (write_batch(r, &g_model, &s, g_ledger->n) != 0 ||
                (sync_every && (k + 1) % (size_t)sync_every == 0 && sync_and_apply(r) != 0) ||
                (cp_every && (k + 1) % (size_t)cp_every == 0 && redo_checkpoint(r, err, sizeof err) != 0)) {
                fprintf(stderr, "child: %s\n", err);
                _exit(3);
            }
        }
        if (sync_last && sync_and_apply(r) != 0) {
            _exit(4);
        }
        raise(SIGKILL);
    }
    int status;
    TU_REQUIRE(waitpid(pid, &status, 0) == pid, "waitpid");
    TU_REQUIRE(WIFSIGNALED(status), "the writer failed: status %#x", status);
}

/* ---- suite clog_redo ----------------------------------------------------------------- */

static void test_held_until_sync(void)
{
    leveldb_t *db = NULL;
    redo_t *r = open_db_and_redo(&db);
    uint64_t s = 7;
    for (int k = 0; k < 5; k++) {
        TU_REQUIRE(write_batch(r, &g_model, &s, (uint64_t)k) == 0, "%s", err);
    }
    CU_ASSERT_EQUAL(redo_held(r), 5);
    CU_ASSERT_EQUAL(redo_applied(r), 0);
    TU_CHECK(redo_apply_durable(r, err, sizeof err) == 0 && redo_held(r) == 5, "nothing is applied before the sync");
    char k0[24];
    key_of('k', 0, k0, sizeof k0);
    int found;
    db_u64(db, k0, strlen(k0), &found);
    TU_CHECK(!found && mark(db, "applied") == 0, "LevelDB holds nothing of a batch the log has not synced");
    char name[64];
    slot_file_name(g_ledger->b[0].ops[1].x, name, sizeof name);
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    TU_CHECK(access(path, F_OK) != 0, "no slot file before the sync (%s)", path);
    /* readers see the held writes through the overlay */
    const op_t *q0 = &g_ledger->b[0].ops[0];
    for (uint32_t j = 0; j < g_ledger->b[0].nops && q0->tag != 'Q'; j++) {
        q0 = &g_ledger->b[0].ops[j];
    }
    cq_entry_t e;
    slot_t sl;
    const char *v;
    size_t vn;
    TU_CHECK(q0->tag == 'Q' && overlay_cq(redo_overlay(r), q0->q, q0->x, &e) == OVERLAY_HELD &&
                 e.log_offset == g_model.ent[q0->q][q0->x].log_offset,
             "the overlay holds the first batch's CQ entry");
    TU_CHECK(overlay_slot(redo_overlay(r), g_model.seg[0].base, 0, &sl) == OVERLAY_HELD &&
                 sl.id == g_model.seg[0].s[0].id && sl.flags == g_model.seg[0].s[0].flags,
             "the overlay holds the first slot (%d: id %" PRIu64 " flags %u, want %" PRIu64 " %u, base %" PRIu64 ")",
             overlay_slot(redo_overlay(r), g_model.seg[0].base, 0, &sl), sl.id, sl.flags, g_model.seg[0].s[0].id,
             g_model.seg[0].s[0].flags, g_model.seg[0].base);
    char kl[24];
    key_of('k', 4, kl, sizeof kl);
    TU_CHECK(overlay_get(redo_overlay(r), kl, strlen(kl), &v, &vn) ==
                     (g_model.present[4] ? OVERLAY_HELD : OVERLAY_DELETED) &&
                 (!g_model.present[4] || be64_get(v) == g_model.val[4]),
             "the overlay holds the last batch's put");

    TU_REQUIRE(sync_and_apply(r) == 0, "%s", err);
    CU_ASSERT_EQUAL(redo_held(r), 0);
    TU_CHECK(overlay_count(redo_overlay(r)) == 0, "made: the overlay holds nothing (%zu)",
             overlay_count(redo_overlay(r)));
    CU_ASSERT_EQUAL(redo_applied(r), g_ledger->b[4].end);
    TU_CHECK(mark(db, "applied") == g_ledger->b[4].end, "the mark names the last batch applied");
    db_u64(db, k0, strlen(k0), &found);
    TU_CHECK(found, "the first batch's put is made after the sync");
    TU_REQUIRE(redo_close_held(r, err, sizeof err) == 0, "%s", err);
    char why[1024] = "";
    TU_CHECK(check_state(db, &g_model, g_ledger->b[4].end, why, sizeof why) == 0, "%s", why);
    db_close(db);
}

/* A failed sync of the log (design §3 "fsyncgate"): 3 batches synced, 3 more
 * whose sync fails (powercut_fail_sync: EIO, their writes lost at a power
 * cut), then 4 in the fresh segment. The writer dies by kill -9 (the page
 * cache still holds the abandoned batches) or, with power_off, the power
 * goes too (they are gone). Either way the open never reads the abandoned
 * range (preads watched) and keeps every batch, the failed ones' derived
 * writes carried. */
static void sync_failure_then(int power_off, int fast)
{
    pid_t pid = fork();
    TU_REQUIRE(pid >= 0, "fork");
    if (pid == 0) {
        leveldb_t *db = NULL;
        redo_t *r = child_open_armed(&db);
        uint64_t s = 5;
        for (int k = 0; k < 10; k++) {
            g_fail_next_sync = k == 5;
            /* fast: the synced batches by redo_commit_applied, 3 and 4 held by redo_commit before it */
            g_commit_applied = fast && (k <= 2 || k >= 5);
            if (write_batch(r, &g_model, &s, (uint64_t)k) != 0 ||
                (!g_commit_applied && (k == 2 || k >= 5) && sync_and_apply(r) != 0)) {
                fprintf(stderr, "child: batch %d: %s\n", k, err);
                _exit(3);
            }
        }
        raise(SIGKILL);
    }
    int status;
    TU_REQUIRE(waitpid(pid, &status, 0) == pid && WIFSIGNALED(status), "the writer failed: status %#x", status);
    TU_REQUIRE(g_ledger->failures == 1 && powercut_failed_syncs() == 1, "one failed sync, handled (%" PRIu64 ")",
               powercut_failed_syncs());
    TU_CHECK(g_ledger->ab_from == g_ledger->b[2].end && g_ledger->ab_to > g_ledger->ab_from,
             "the abandoned range [%" PRIu64 ", %" PRIu64 ") starts at the last synced batch's end %" PRIu64,
             g_ledger->ab_from, g_ledger->ab_to, g_ledger->b[2].end);
    TU_CHECK(g_ledger->b[3].end == g_ledger->b[5].end && g_ledger->b[5].end > g_ledger->ab_to &&
                 g_ledger->b[5].end < g_ledger->b[6].end,
             "the three failed batches carried past the range, before the next batch");
    if (power_off) {
        powercut_stats_t st;
        TU_REQUIRE(powercut_power_off(77, &st, err, sizeof err) == 0, "%s", err);
        TU_CHECK(st.lost >= 3, "the failed sync lost the abandoned batches' writes (%" PRIu64 ")", st.lost);
    }
    uint64_t base = g_ledger->ab_from - g_ledger->ab_from % SEG;
    uint64_t to = g_ledger->ab_to < base + SEG ? g_ledger->ab_to : base + SEG;
    char path[1024];
    snprintf(path, sizeof path, "%s/clog-%016" PRIx64 ".seg", dir, base);
    TU_REQUIRE(powercut_watch_reads(path, g_ledger->ab_from - base, to - base, err, sizeof err) == 0, "%s", err);
    redo_open_report_t rep;
    expect_recovered(g_ledger->n, &rep);
    TU_CHECK(powercut_range_reads() == 0, "the open read the abandoned range %" PRIu64 " times",
             powercut_range_reads());
    TU_CHECK(rep.checkpoint >= g_ledger->ab_to && rep.batches == 4 + (rep.checkpoint < g_ledger->b[5].end ? 3 : 0),
             "the open started past the range (checkpoint %" PRIu64 ", %" PRIu64 " batches redone)", rep.checkpoint,
             rep.batches);
}

/* A second failed sync, of the fresh segment redo_sync_failed carries the
 * held batches into, at each of its syncs in turn (the nth sync of a
 * segment after the first failure; n runs until redo_sync_failed makes
 * fewer): redo_sync_failed fails naming it, the writer stops (redo_free), and
 * after the power cut the open keeps the 3 batches synced before the first
 * failure and nothing of the 3 whose syncs failed. */
static void test_second_sync_failure(void)
{
    unsigned failures = CU_get_number_of_failures();
    uint64_t tested = 0;
    for (uint64_t n = 1;; n++) {
        powercut_reset();
        g_ledger->n = 0;
        pid_t pid = fork();
        TU_REQUIRE(pid >= 0, "fork");
        if (pid == 0) {
            leveldb_t *db = NULL;
            redo_t *r = child_open_armed(&db);
            uint64_t s = 21;
            memset(&g_model, 0, sizeof g_model);
            for (int k = 0; k < 6; k++) {
                if (write_batch(r, &g_model, &s, (uint64_t)k) != 0 || (k == 2 && sync_and_apply(r) != 0)) {
                    fprintf(stderr, "child: batch %d: %s\n", k, err);
                    _exit(3);
                }
            }
            powercut_fail_sync(1, "clog-");
            if (clog_sync(redo_log(r), err, sizeof err) == 0) {
                _exit(4);
            }
            powercut_fail_sync(n, "clog-");
            redo_failure_t f;
            if (redo_sync_failed(r, &f, err, sizeof err) == 0) {
                _exit(99); /* n lies past the syncs it makes */
            }
            fprintf(stderr, "  sync %" PRIu64 " of the fresh segment failed: %s\n", n, err);
            int named = strstr(err, "clog-") != NULL;
            redo_free(r, err, sizeof err);
            leveldb_close(db);
            _exit(named ? 0 : 5);
        }
        int status;
        TU_REQUIRE(waitpid(pid, &status, 0) == pid && WIFEXITED(status), "the writer failed: status %#x", status);
        if (WEXITSTATUS(status) == 99) {
            TU_CHECK(powercut_failed_syncs() == 1,
                     "redo_sync_failed succeeded over the fresh segment's failed sync %" PRIu64, n);
            break;
        }
        TU_REQUIRE(WEXITSTATUS(status) == 0, "sync %" PRIu64 ": the writer exited %d", n, WEXITSTATUS(status));
        TU_CHECK(powercut_failed_syncs() == 2, "sync %" PRIu64 ": two failed syncs (%" PRIu64 ")", n,
                 powercut_failed_syncs());
        powercut_stats_t st;
        TU_REQUIRE(powercut_power_off(n, &st, err, sizeof err) == 0, "%s", err);
        redo_open_report_t rep;
        expect_recovered(3, &rep);
        if (CU_get_number_of_failures() > failures) {
            fprintf(stderr, "failed after the fresh segment's sync %" PRIu64 " failed\n", n);
            return;
        }
        tested++;
        tu_rmtree(dir);
        TU_REQUIRE(mkdir(dir, 0700) == 0, "mkdir");
    }
    TU_CHECK(tested >= 1, "%" PRIu64 " syncs of the fresh segment failed in turn", tested);
}

static void test_sync_failure_kill(void)
{
    sync_failure_then(0, 0);
}

static void test_sync_failure_power_cut(void)
{
    sync_failure_then(1, 0);
}

/* redo_commit_applied: batches appended, synced and applied in one call
 * never enter the overlay and leave nothing held (commit_applied checks it
 * after each); the ones held by redo_commit before are made with them; its
 * failed sync leaves the batch held and seen through the overlay, and
 * redo_sync_failed carries it with the two held before — after a kill -9
 * and after a power cut, the open keeps every batch (sync_failure_then's
 * checks). */
static void test_commit_applied_sync_failure_kill(void)
{
    sync_failure_then(0, 1);
}

static void test_commit_applied_sync_failure_power_cut(void)
{
    sync_failure_then(1, 1);
}

/* redo_commit_applied in process: two batches held by redo_commit (in the
 * overlay), then one committed applied — all three made, nothing held, the
 * overlay empty, the mark at its end; an empty batch still syncs and makes
 * what is held; the state after close equals the model. */
static void test_commit_applied(void)
{
    leveldb_t *db = NULL;
    redo_t *r = open_db_and_redo(&db);
    uint64_t s = 11;
    for (int k = 0; k < 2; k++) {
        TU_REQUIRE(write_batch(r, &g_model, &s, (uint64_t)k) == 0, "%s", err);
    }
    TU_CHECK(redo_held(r) == 2 && overlay_count(redo_overlay(r)) > 0, "two batches held, in the overlay");
    g_commit_applied = 1;
    int rc = write_batch(r, &g_model, &s, 2);
    g_commit_applied = 0;
    TU_REQUIRE(rc == 0, "%s", err);
    TU_CHECK(redo_held(r) == 0 && overlay_count(redo_overlay(r)) == 0 && redo_applied(r) == g_ledger->b[2].end &&
                 mark(db, "applied") == g_ledger->b[2].end && g_ledger->b[2].end == clog_end(redo_log(r)),
             "all three made, nothing held (%zu), the mark at the last end", redo_held(r));
    TU_REQUIRE(write_batch(r, &g_model, &s, 3) == 0, "%s", err);
    redo_batch_t empty = { 0 };
    uint64_t end = 0;
    TU_CHECK(redo_commit_applied(r, &empty, &end, err, sizeof err) == 0 && end == 0 && redo_held(r) == 0 &&
                 redo_applied(r) == g_ledger->b[3].end,
             "an empty batch appends nothing and makes what is held: %s", err);
    g_ledger->b[3].state = SYNCED;
    TU_REQUIRE(redo_close_held(r, err, sizeof err) == 0, "%s", err);
    char why[1024] = "";
    TU_CHECK(check_state(db, &g_model, g_ledger->b[3].end, why, sizeof why) == 0, "%s", why);
    db_close(db);
}

/* redo_cq_read and redo_slot_read see every committed batch: applied ones
 * from the files (through their append buffers), held ones from the overlay
 * (appends past the file's tail, rewrites inside it); a run stops at the
 * first slot that is neither, and a read past everything is refused. */
static void expect_reads(redo_t *r, uint64_t base, const cq_entry_t *want_cq, size_t ncq, const slot_t *want_slot,
                         size_t nslot, const char *when)
{
    cq_entry_t got_cq[200];
    TU_REQUIRE(redo_cq_read(r, 3, 0, ncq, got_cq, err, sizeof err) == 0, "%s: cq read: %s", when, err);
    for (size_t i = 0; i < ncq; i++) {
        TU_CHECK(got_cq[i].log_offset == want_cq[i].log_offset && got_cq[i].due == want_cq[i].due,
                 "%s: cq entry %zu is (%" PRIu64 ", %" PRIu64 "), want (%" PRIu64 ", %" PRIu64 ")", when, i,
                 got_cq[i].log_offset, got_cq[i].due, want_cq[i].log_offset, want_cq[i].due);
    }
    TU_CHECK(redo_cq_read(r, 3, ncq - 2, 3, got_cq, err, sizeof err) == -1 && strstr(err, "neither held") != NULL,
             "%s: a read past the tail is refused: %s", when, err);
    slot_t got_slot[200];
    size_t got = 0;
    TU_REQUIRE(redo_slot_read(r, base, 0, 200, got_slot, &got, err, sizeof err) == 0, "%s: slot read: %s", when, err);
    TU_CHECK(got == nslot, "%s: %zu slots read, want %zu", when, got, nslot);
    for (size_t i = 0; i < nslot && i < got; i++) {
        TU_CHECK(memcmp(&got_slot[i], &want_slot[i], sizeof got_slot[i]) == 0,
                 "%s: slot %zu names %" PRIu64 " at %" PRIu64 ", want %" PRIu64 " at %" PRIu64, when, i, got_slot[i].id,
                 got_slot[i].cq_index, want_slot[i].id, want_slot[i].cq_index);
    }
    TU_CHECK(redo_slot_read(r, base, nslot, 1, got_slot, &got, err, sizeof err) == -1 && got == 0 &&
                 strstr(err, "neither held") != NULL,
             "%s: a slot past the file is refused: %s", when, err);
    TU_CHECK(redo_slot_read(r, base + SEG, 0, 1, got_slot, &got, err, sizeof err) == -1 &&
                 strstr(err, "no such file") != NULL,
             "%s: a slot file never made is refused, not made: %s", when, err);
}

static void test_reads_through_held(void)
{
    leveldb_t *db = NULL;
    redo_t *r = open_db_and_redo(&db);
    const uint64_t base = 7 * SEG;
    cq_entry_t want_cq[150];
    slot_t want_slot[130];
    redo_batch_t b = { 0 };
    for (uint64_t i = 0; i < 100; i++) {
        want_cq[i] = (cq_entry_t){ 1000 + i, 5000 + i };
        redo_cq_write(&b, 3, i, &want_cq[i]);
        want_slot[i] = (slot_t){ 1000 + i, 3, 0, i };
        redo_slot_write(&b, base, i, &want_slot[i]);
    }
    TU_REQUIRE(redo_commit_applied(r, &b, NULL, err, sizeof err) == 0, "%s", err);
    redo_batch_free(&b);
    TU_REQUIRE(redo_held(r) == 0, "the first batch is made");
    expect_reads(r, base, want_cq, 100, want_slot, 100, "applied");
    for (uint64_t i = 100; i < 150; i++) {
        want_cq[i] = (cq_entry_t){ 1000 + i, 5000 + i };
        redo_cq_write(&b, 3, i, &want_cq[i]);
    }
    for (uint64_t i = 100; i < 130; i++) {
        want_slot[i] = (slot_t){ 1000 + i, 3, 0, i };
        redo_slot_write(&b, base, i, &want_slot[i]);
    }
    want_cq[10] = (cq_entry_t){ 777, 5010 };
    redo_cq_write(&b, 3, 10, &want_cq[10]);
    want_slot[5] = (slot_t){ 1005, 3, SLOT_REVOKED, 5 };
    redo_slot_write(&b, base, 5, &want_slot[5]);
    TU_REQUIRE(redo_commit(r, &b, NULL, err, sizeof err) == 0, "%s", err);
    redo_batch_free(&b);
    TU_REQUIRE(redo_held(r) == 1, "the second batch is held");
    expect_reads(r, base, want_cq, 150, want_slot, 130, "held");
    TU_REQUIRE(clog_sync(redo_log(r), err, sizeof err) == 0 && redo_apply_durable(r, err, sizeof err) == 0, "%s", err);
    TU_REQUIRE(redo_held(r) == 0, "the second batch is made");
    expect_reads(r, base, want_cq, 150, want_slot, 130, "made");
    TU_REQUIRE(redo_close_held(r, err, sizeof err) == 0, "%s", err);
    db_close(db);
}

/* An abandoned segment recycled (once the log's durable end is past it) and
 * then used again is synced like any other: a power cut after the log has
 * gone on into it keeps every synced batch. */
static void test_abandoned_segment_recycled(void)
{
    pid_t pid = fork();
    TU_REQUIRE(pid >= 0, "fork");
    if (pid == 0) {
        leveldb_t *db = NULL;
        redo_t *r = child_open_armed(&db);
        uint64_t s = 9;
        int recycled = 0;
        for (uint64_t k = 0; clog_end(redo_log(r)) < 2 * SEG + SEG / 4; k++) {
            g_fail_next_sync = k == 3;
            if (write_batch(r, &g_model, &s, k) != 0 || sync_and_apply(r) != 0) {
                fprintf(stderr, "child: batch %" PRIu64 ": %s\n", k, err);
                _exit(3);
            }
            if (!recycled && g_ledger->failures == 1 && clog_durable(redo_log(r)) > SEG) {
                /* the checkpoint first: B (at the abandoned range's end) lies in segment 0 until then */
                if (redo_checkpoint(r, err, sizeof err) != 0 || clog_recycle(redo_log(r), 0, err, sizeof err) != 0) {
                    fprintf(stderr, "child: recycle: %s\n", err);
                    _exit(4);
                }
                recycled = 1;
            }
        }
        _exit(recycled ? 99 : 5);
    }
    int status;
    TU_REQUIRE(waitpid(pid, &status, 0) == pid && WIFEXITED(status) && WEXITSTATUS(status) == 99,
               "the writer failed: status %#x", status);
    TU_REQUIRE(g_ledger->failures == 1 && g_ledger->ab_to < SEG, "one failed sync, in the first segment");
    powercut_stats_t st;
    TU_REQUIRE(powercut_power_off(5, &st, err, sizeof err) == 0, "%s", err);
    redo_open_report_t rep;
    expect_recovered(g_ledger->n, &rep);
}

/* redo_free after 6 batches synced and applied, 3 synced and held, 3 only
 * appended: it makes nothing (no apply, no checkpoint, no clean mark), and
 * the next open redoes every batch the log kept — all 12 when the page
 * cache keeps the writes (power_off 0), the 9 synced and those of the rest
 * the cut kept after a power cut — and nothing more. */
static void free_then(int power_off)
{
    pid_t pid = fork();
    TU_REQUIRE(pid >= 0, "fork");
    if (pid == 0) {
        leveldb_t *db = NULL;
        redo_t *r = child_open_armed(&db);
        uint64_t s = 11;
        for (int k = 0; k < 12; k++) {
            if (write_batch(r, &g_model, &s, (uint64_t)k) != 0 || ((k == 2 || k == 5) && sync_and_apply(r) != 0)) {
                fprintf(stderr, "child: batch %d: %s\n", k, err);
                _exit(3);
            }
            if (k == 8) { /* synced, not applied */
                if (clog_sync(redo_log(r), err, sizeof err) != 0) {
                    _exit(4);
                }
                for (int j = 6; j <= 8; j++) {
                    g_ledger->b[j].state = SYNCED;
                }
            }
        }
        if (redo_held(r) != 6 || redo_free(r, err, sizeof err) != 0) {
            fprintf(stderr, "child: redo_free: %s\n", err);
            _exit(5);
        }
        db_close(db);
        _exit(0);
    }
    int status;
    TU_REQUIRE(waitpid(pid, &status, 0) == pid && WIFEXITED(status) && WEXITSTATUS(status) == 0,
               "the writer failed: status %#x", status);
    if (power_off) {
        powercut_stats_t st;
        TU_REQUIRE(powercut_power_off(31, &st, err, sizeof err) == 0, "%s", err);
    }
    /* (after the power-off: LevelDB's open renames CURRENT, which the armed journal would record) */
    leveldb_t *db = db_open();
    TU_REQUIRE(db != NULL, "%s", err);
    uint64_t applied = mark(db, "applied"), checkpoint = mark(db, "checkpoint"), clean = mark(db, "clean");
    db_close(db);
    TU_CHECK(checkpoint == 0 && clean == 0 && (power_off || applied == g_ledger->b[5].end),
             "redo_free applied, checkpointed and marked nothing (applied %" PRIu64 ", want %" PRIu64
             " unless a power cut lost it; checkpoint %" PRIu64 ", clean %" PRIu64 ", want 0)",
             applied, g_ledger->b[5].end, checkpoint, clean);
    redo_open_report_t rep;
    size_t p = expect_prefix(power_off ? 9 : 12, 12, &rep);
    TU_CHECK(p > 0 && rep.checkpoint == 0 && rep.batches == p,
             "redone from the open's checkpoint: %" PRIu64 " batches of the %zu the log kept", rep.batches, p);
}

static void test_free_kill(void)
{
    free_then(0);
}

static void test_free_power_cut(void)
{
    free_then(1);
}

/* Write synced and applied batches until the log's end passes `to`. 0, or -1 with err. */
static int write_synced_until(redo_t *r, uint64_t *s, uint64_t to)
{
    while (clog_end(redo_log(r)) < to) {
        if (write_batch(r, &g_model, s, g_ledger->n) != 0 || sync_and_apply(r) != 0) {
            return -1;
        }
    }
    return 0;
}

/* clog_recycle refuses the checkpoint's segment and every one after it (the
 * next open follows the chain from B): before any checkpoint past the first
 * segment (B = 0: the open walks from the first segment), and the segment B
 * lies in once the log has moved on; each is recycled once a checkpoint
 * lies past it, and the next open keeps every batch. */
static void test_recycle_keeps_checkpoint(void)
{
    leveldb_t *db = NULL;
    redo_t *r = open_db_and_redo(&db);
    uint64_t s = 3;
    TU_REQUIRE(write_synced_until(r, &s, SEG + SEG / 4) == 0, "%s", err);
    TU_CHECK(clog_recycle(redo_log(r), 0, err, sizeof err) == -1 && strstr(err, "checkpoint 0") != NULL,
             "the first segment, durable and applied, is kept while B = 0: %s", err);
    TU_REQUIRE(redo_checkpoint(r, err, sizeof err) == 0, "%s", err);
    uint64_t b = redo_checkpointed(r);
    TU_REQUIRE(b > SEG && b < 2 * SEG, "B %" PRIu64 " in the second segment", b);
    TU_REQUIRE(write_synced_until(r, &s, 2 * SEG + SEG / 4) == 0, "%s", err);
    TU_CHECK(clog_recycle(redo_log(r), 0, err, sizeof err) == 0, "below B's segment: recycled (%s)", err);
    TU_CHECK(clog_recycle(redo_log(r), SEG, err, sizeof err) == -1 && strstr(err, "checkpoint") != NULL,
             "B's segment, durable and not in use, is kept: %s", err);
    TU_REQUIRE(redo_checkpoint(r, err, sizeof err) == 0, "%s", err);
    TU_CHECK(clog_recycle(redo_log(r), SEG, err, sizeof err) == 0, "recycled once B moved past it (%s)", err);
    TU_CHECK(redo_close_held(r, err, sizeof err) == 0, "%s", err);
    db_close(db);
    redo_open_report_t rep;
    expect_recovered(g_ledger->n, &rep);
}

static void test_redo_after_kill(void)
{
    write_and_die(30, 4, 0, 0); /* 28 synced and applied, 2 only appended: kill -9 keeps them */
    redo_open_report_t rep;
    expect_recovered(30, &rep);
    TU_CHECK(rep.checkpoint == 0 && rep.applied == g_ledger->b[27].end && rep.batches == 30,
             "redone from the writer's open's checkpoint (0) over its applied mark: %" PRIu64 " batches", rep.batches);
    TU_CHECK(rep.cq_writes > 0 && rep.slot_writes > 0 && rep.db_ops > 0 && rep.head_moves > 0,
             "every kind of write redone (%" PRIu64 " CQ, %" PRIu64 " heads, %" PRIu64 " slots, %" PRIu64 " LevelDB)",
             rep.cq_writes, rep.head_moves, rep.slot_writes, rep.db_ops);
    TU_CHECK(rep.log.scanned, "after a kill the open scans past the log's end (step 1's D rule)");
    expect_recovered(30, &rep);
    TU_CHECK(rep.batches == 0 && rep.bytes == 0, "an open after a clean close redoes nothing (%" PRIu64 ")",
             rep.batches);
    TU_CHECK(!rep.log.scanned, "nor scans past the end it closed at");
    leveldb_t *db = db_open();
    TU_REQUIRE(db != NULL, "%s", err);
    TU_CHECK(mark(db, "clean") == g_ledger->b[29].end, "the clean close's mark names its end");
    db_close(db);
    /* the next life: its open deletes the mark before it appends; killed after one more batch */
    pid_t pid = fork();
    TU_REQUIRE(pid >= 0, "fork");
    if (pid == 0) {
        redo_t *r = child_open_db_and_redo(&db);
        if (mark(db, "clean") != 0) {
            _exit(10);
        }
        uint64_t s = 99;
        model_rebuild(&g_model, g_ledger->n);
        if (write_batch(r, &g_model, &s, g_ledger->n) != 0 || sync_and_apply(r) != 0) {
            _exit(3);
        }
        raise(SIGKILL);
    }
    int status;
    TU_REQUIRE(waitpid(pid, &status, 0) == pid, "waitpid");
    TU_CHECK(WIFSIGNALED(status), "the open deleted the clean mark and appended (status %#x; 10: mark kept)", status);
    expect_recovered(31, &rep);
    TU_CHECK(rep.log.scanned, "a log that grew past its clean end is scanned again");
}

static void test_redo_twice(void)
{
    write_and_die(20, 3, 0, 1);
    redo_open_report_t rep;
    expect_recovered(20, &rep);
    /* the same range again, over the state it made: put the old checkpoint back */
    leveldb_t *db = db_open();
    TU_REQUIRE(db != NULL, "%s", err);
    key_buf_t k;
    key_meta(&k, "checkpoint");
    char v[8], *dberr = NULL;
    be64_put(v, rep.checkpoint);
    leveldb_writeoptions_t *wo = leveldb_writeoptions_create();
    leveldb_put(db, wo, k.b, k.n, v, sizeof v, &dberr);
    leveldb_writeoptions_destroy(wo);
    TU_REQUIRE(dberr == NULL, "%s", dberr);
    db_close(db);
    redo_open_report_t again;
    expect_recovered(20, &again);
    TU_CHECK(again.batches == rep.batches && again.batches == 20,
             "the second redo walked the same %" PRIu64 " batches (%" PRIu64 ")", rep.batches, again.batches);
}

/* A redo killed at its c-th file call (kill -9: nothing lost), for every c. */
static void test_redo_after_killed_redo(void)
{
    write_and_die(24, 5, 10, 1);
    uint64_t calls = 0;
    unsigned failures = CU_get_number_of_failures();
    for (uint64_t c = 1;; c++) {
        powercut_reset();
        pid_t pid = fork();
        TU_REQUIRE(pid >= 0, "fork");
        if (pid == 0) {
            leveldb_t *db = db_open();
            powercut_arm(c);
            redo_t *r = NULL;
            _exit(db != NULL && redo_open_on(db, 0, &r, NULL) == 0 ? 0 : 2);
        }
        int status;
        TU_REQUIRE(waitpid(pid, &status, 0) == pid, "waitpid");
        if (WIFEXITED(status)) {
            TU_REQUIRE(WEXITSTATUS(status) == 0, "the redo child failed at kill point %" PRIu64, c);
            calls = c - 1;
            break;
        }
        powercut_reset(); /* kill -9: every write stays */
        redo_open_report_t rep;
        expect_recovered(24, &rep);
        if (CU_get_number_of_failures() > failures) {
            fprintf(stderr, "failed after a redo killed at call %" PRIu64 "\n", c);
            return;
        }
        /* the next kill point needs the directory as the kill left it: write it again */
        tu_rmtree(dir);
        TU_REQUIRE(mkdir(dir, 0700) == 0, "mkdir");
        g_ledger->n = 0;
        write_and_die(24, 5, 10, 1);
    }
    TU_CHECK(calls >= 5, "the redo made %" PRIu64 " file calls, each one a kill point tested", calls);
}

static void test_checkpoint_then_nothing(void)
{
    write_and_die(12, 12, 12, 0); /* synced, applied and checkpointed after the 12th */
    redo_open_report_t rep;
    expect_recovered(12, &rep);
    TU_CHECK(rep.log.batches == 0,
             "the log's open followed the chain from the checkpoint, not from its start (%" PRIu64 " batches walked)",
             rep.log.batches);
    TU_CHECK(rep.batches == 0 && rep.bytes == 0 && rep.checkpoint == g_ledger->b[11].end,
             "nothing past the checkpoint to redo (%" PRIu64 " batches, %" PRIu64 " bytes)", rep.batches, rep.bytes);
}

/* Running: a batch's LevelDB writes are made once, when the sync covers it. */
static void test_db_batch_once(void)
{
    leveldb_t *db = NULL;
    redo_t *r = open_db_and_redo(&db);
    redo_batch_t b = { 0 };
    redo_db_put(&b, "once", 4, "1", 1);
    TU_REQUIRE(redo_commit(r, &b, NULL, err, sizeof err) == 0, "%s", err);
    redo_batch_free(&b);
    int found;
    db_u64(db, "once", 4, &found);
    TU_CHECK(!found, "not made before the sync");
    TU_REQUIRE(sync_and_apply(r) == 0, "%s", err);
    db_u64(db, "once", 4, &found);
    TU_CHECK(found, "made after the sync");
    char *dberr = NULL;
    leveldb_writeoptions_t *wo = leveldb_writeoptions_create();
    leveldb_delete(db, wo, "once", 4, &dberr);
    leveldb_writeoptions_destroy(wo);
    TU_REQUIRE(redo_apply_durable(r, err, sizeof err) == 0 && redo_close_held(r, err, sizeof err) == 0, "%s", err);
    db_u64(db, "once", 4, &found);
    TU_CHECK(!found, "neither a second apply nor the close makes the batch again");
    db_close(db);
}

/* The open: LevelDB kept a later batch's writes and its mark but lost an
 * earlier batch's (its log reader skips a lost write's zeros and applies the
 * whole records behind them): the redo from B makes both, in log order. */
static void test_db_hole_redone_in_order(void)
{
    pid_t pid = fork();
    TU_REQUIRE(pid >= 0, "fork");
    if (pid == 0) {
        leveldb_t *db = NULL;
        redo_t *r = child_open_db_and_redo(&db);
        redo_batch_t b = { 0 };
        redo_db_put(&b, "x", 1, "from-1", 6);
        redo_db_put(&b, "y", 1, "from-1", 6);
        int rc = redo_commit(r, &b, &g_ledger->b[0].end, err, sizeof err);
        redo_db_put(&b, "y", 1, "from-2", 6);
        rc |= redo_commit(r, &b, &g_ledger->b[1].end, err, sizeof err);
        rc |= clog_sync(redo_log(r), err, sizeof err);
        _exit(rc == 0 ? 0 : 3); /* dies before applying: the log holds both batches */
    }
    int status;
    TU_REQUIRE(waitpid(pid, &status, 0) == pid && WIFEXITED(status) && WEXITSTATUS(status) == 0, "writer");
    uint64_t b2_end = g_ledger->b[1].end;
    leveldb_t *db = db_open();
    TU_REQUIRE(db != NULL, "%s", err);
    leveldb_writebatch_t *wb = leveldb_writebatch_create();
    key_buf_t k;
    key_meta(&k, "applied");
    char v[8], *dberr = NULL;
    be64_put(v, b2_end);
    leveldb_writebatch_put(wb, "y", 1, "from-2", 6);
    leveldb_writebatch_put(wb, k.b, k.n, v, sizeof v);
    leveldb_writeoptions_t *wo = leveldb_writeoptions_create();
    leveldb_write(db, wo, wb, &dberr);
    leveldb_writeoptions_destroy(wo);
    leveldb_writebatch_destroy(wb);
    TU_REQUIRE(dberr == NULL, "%s", dberr);
    redo_open_report_t rep;
    redo_t *r = NULL;
    TU_REQUIRE(redo_open_on(db, 0, &r, &rep) == 0, "%s", err);
    TU_CHECK(rep.applied == b2_end && rep.batches == 2,
             "redone from B %" PRIu64 " over A %" PRIu64 ": %" PRIu64 " batches", rep.checkpoint, rep.applied,
             rep.batches);
    leveldb_readoptions_t *ro = leveldb_readoptions_create();
    size_t n = 0;
    char *x = leveldb_get(db, ro, "x", 1, &n, &dberr);
    TU_CHECK(x != NULL && n == 6 && memcmp(x, "from-1", 6) == 0, "the earlier batch LevelDB lost is made");
    leveldb_free(x);
    char *y = leveldb_get(db, ro, "y", 1, &n, &dberr);
    TU_CHECK(y != NULL && n == 6 && memcmp(y, "from-2", 6) == 0, "the later batch's value wins, in log order");
    leveldb_free(y);
    leveldb_readoptions_destroy(ro);
    TU_CHECK(redo_close_held(r, err, sizeof err) == 0, "%s", err);
    db_close(db);
}

static void test_damage(void)
{
    write_and_die(10, 10, 0, 0);              /* all synced and applied: A = the last batch's end */
    uint64_t last_first = g_ledger->b[8].end; /* the last batch starts where the one before it ends */
    char seg[1024];
    snprintf(seg, sizeof seg, "%s/clog-%016" PRIx64 ".seg", dir, last_first - last_first % SEG);
    int fd = open(seg, O_WRONLY);
    TU_REQUIRE(fd >= 0, "open %s", seg);
    char zero[64] = { 0 };
    TU_REQUIRE(pwrite(fd, zero, sizeof zero, (off_t)(last_first % SEG)) == (ssize_t)sizeof zero, "pwrite");
    close(fd);
    leveldb_t *db = db_open();
    TU_REQUIRE(db != NULL, "%s", err);
    redo_t *r = NULL;
    int rc = redo_open_on(db, 0, &r, NULL);
    TU_CHECK(rc == REDO_DAMAGED && strstr(err, "applied mark") != NULL && strstr(err, "nothing cut") != NULL,
             "the last synced batch damaged: refused by the applied mark (%d: %s)", rc, err);
    DIR *d = opendir(dir);
    struct dirent *de;
    int torn = 0;
    while ((de = readdir(d)) != NULL) {
        torn += strstr(de->d_name, ".torn-") != NULL;
    }
    closedir(d);
    TU_CHECK(torn == 0, "nothing was cut aside");

    /* a batch written past the redo (no derived-writes record) is refused by name */
    clog_options_t co = { dir, SEG, 0, 0, 0, 0 };
    clog_t *c = NULL;
    db_close(db);
    tu_rmtree(dir);
    TU_REQUIRE(mkdir(dir, 0700) == 0, "mkdir");
    db = db_open();
    TU_REQUIRE(clog_open(&co, &c, NULL, err, sizeof err) == 0, "%s", err);
    clog_batch_t cb = { 0 };
    uint64_t id;
    TU_REQUIRE(clog_batch_add(c, &cb, "plain", 5, &id, err, sizeof err) == 0, "%s", err);
    TU_REQUIRE(clog_append(c, &cb, err, sizeof err) == 0 && clog_sync(c, err, sizeof err) == 0, "%s", err);
    clog_batch_free(&cb);
    clog_close(c);
    rc = redo_open_on(db, 0, &r, NULL);
    TU_CHECK(rc == REDO_DAMAGED && strstr(err, "no derived-writes record") != NULL, "%d: %s", rc, err);
    db_close(db);
}

static void test_bad_inputs(void)
{
    leveldb_t *db = db_open();
    TU_REQUIRE(db != NULL, "%s", err);
    redo_t *r = NULL;
    redo_options_t none = { dir, SEG, 0, NULL, dir, bounds_from_db, NULL };
    TU_CHECK(redo_open(&none, &r, NULL, err, sizeof err) == -1 && strstr(err, "LevelDB handle") != NULL, "%s", err);
    TU_REQUIRE(redo_open_on(db, 0, &r, NULL) == 0, "%s", err);
    redo_batch_t b = { 0 };
    /* a CQ write past the queue's tail (the caller's records say the queue is empty) */
    redo_cq_write(&b, 2, 5, &(cq_entry_t){ 64, 1 });
    TU_REQUIRE(redo_commit(r, &b, NULL, err, sizeof err) == 0, "%s", err);
    TU_REQUIRE(clog_sync(redo_log(r), err, sizeof err) == 0, "%s", err);
    TU_CHECK(redo_apply_durable(r, err, sizeof err) == -1 && strstr(err, "CQ 2 index 5 lies past its tail 0") != NULL,
             "%s", err);
    TU_CHECK(redo_held(r) == 1, "the batch stays held");
    /* derived writes larger than a segment */
    static char big[SEG];
    redo_db_put(&b, "big", 3, big, sizeof big);
    TU_CHECK(redo_commit(r, &b, NULL, err, sizeof err) == -1 && strstr(err, "cannot fit in a segment") != NULL, "%s",
             err);
    /* a message too large to leave room for its derived writes */
    redo_batch_free(&b);
    uint64_t id;
    TU_CHECK(redo_add_message(r, &b, big, SEG - 200, &id, err, sizeof err) == -1 &&
                 strstr(err, "with its derived writes") != NULL,
             "%s", err);
    redo_batch_free(&b);
    char e2[256];
    TU_CHECK(redo_close_held(r, e2, sizeof e2) == -1 && strstr(e2, "lies past its tail") != NULL,
             "the close reports the batch it cannot apply: %s", e2);
    db_close(db);
}

/* redo_batch_room answers for the derived-writes record as redo_commit
 * will: a batch filled with messages takes a put exactly as large as the
 * room it reports, and refuses 8 bytes more; an empty batch moves to the
 * next segment; more than a segment is refused by name. */
static void test_batch_room(void)
{
    leveldb_t *db = NULL;
    redo_t *r = open_db_and_redo(&db);
    redo_batch_t b = { 0 };
    static char payload[1000];
    uint64_t id, ordinal = 0;
    int rc;
    while ((rc = redo_add_message(r, &b, payload, sizeof payload, &id, err, sizeof err)) == 0) {
        redo_slot_write(&b, 0, ordinal, &(slot_t){ id, 1, 0, ordinal });
        ordinal++;
    }
    TU_REQUIRE(rc == REDO_BATCH_FULL && ordinal > 10, "a segment's worth of messages (%d, %" PRIu64 ")", rc, ordinal);
    uint64_t fit = 0;
    while (redo_batch_room(r, &b, fit + 8, err, sizeof err) == 0) {
        fit += 8;
    }
    TU_CHECK(fit > 0, "some room is left for derived writes (%" PRIu64 " bytes)", fit);
    TU_CHECK(redo_batch_room(r, &b, fit + 8, err, sizeof err) == REDO_BATCH_FULL, "8 bytes more: the batch is full");
    static char val[SEG];
    redo_db_put(&b, "roomy", 5, val, fit - 9 - 5);
    uint64_t end = 0;
    TU_CHECK(redo_commit(r, &b, &end, err, sizeof err) == 0, "a put of the room reported is committed: %s", err);
    TU_CHECK(end > 0 && end < SEG, "in the first segment (end %" PRIu64 ")", end);
    /* an empty batch: a put nearly a segment long fits in the next one */
    TU_CHECK(redo_batch_room(r, &b, SEG / 2, err, sizeof err) == 0, "%s", err);
    redo_db_put(&b, "half", 4, val, SEG / 2 - 9 - 4);
    TU_CHECK(redo_commit(r, &b, &end, err, sizeof err) == 0 && end > SEG, "moved to the next segment: %s", err);
    TU_CHECK(redo_batch_room(r, &b, SEG, err, sizeof err) == -1 && strstr(err, "cannot fit in a segment") != NULL, "%s",
             err);
    redo_batch_free(&b);
    TU_CHECK(redo_close_held(r, err, sizeof err) == 0, "%s", err);
    int found;
    size_t len = 0;
    db_u64_len(db, "roomy", 5, &found, &len);
    TU_CHECK(found && len == fit - 14, "the put was made at the close (%zu bytes)", len);
    db_close(db);
}

/* The per-message reserve covers a message's CQ write and slot whole: a
 * batch filled with one-byte messages before any of their derived writes is
 * made (up to REDO_BATCH_FULL), then given a CQ write and a slot for each,
 * is committed. With a reserve below their 70 bytes the shortfall grows with
 * the count and outruns REDO_BATCH_RESERVE. */
static void test_message_reserve(void)
{
    leveldb_t *db = NULL;
    redo_t *r = open_db_and_redo(&db);
    redo_batch_t b = { 0 };
    static uint64_t ids[SEG];
    uint64_t n = 0;
    int rc;
    while ((rc = redo_add_message(r, &b, "m", 1, &ids[n], err, sizeof err)) == 0) {
        n++;
    }
    TU_REQUIRE(rc == REDO_BATCH_FULL && n > 200, "a segment's worth of one-byte messages (%d, %" PRIu64 ")", rc, n);
    for (uint64_t i = 0; i < n; i++) {
        redo_cq_write(&b, 1, i, &(cq_entry_t){ ids[i], i });
        redo_slot_write(&b, 0, i, &(slot_t){ ids[i], 1, 0, i });
    }
    uint64_t end = 0;
    TU_CHECK(redo_commit(r, &b, &end, err, sizeof err) == 0, "%" PRIu64 " messages with their writes: %s", n, err);
    redo_batch_free(&b);
    release_ptr((void **)g_redos, r);
    TU_CHECK(redo_free(r, err, sizeof err) == 0, "%s", err);
    db_close(db);
}

/* redo_message_room settles the batch's segment before the record is
 * made: a message whose position in its segment is written into it (the
 * record form) lands in the segment the room call left the batch in, also
 * when an empty batch had to move to the next segment. */
static void test_message_room(void)
{
    leveldb_t *db = NULL;
    redo_t *r = open_db_and_redo(&db);
    redo_batch_t b = { 0 };
    static char payload[900];
    int moved = 0, wrong = 0;
    for (int i = 0; i < 300; i++) {
        uint64_t before = b.log.first / SEG;
        TU_REQUIRE(redo_message_room(r, &b, sizeof payload, err, sizeof err) == 0, "message %d: %s", i, err);
        uint64_t seg = b.log.first / SEG, id;
        moved += seg != before;
        TU_REQUIRE(redo_add_message(r, &b, payload, sizeof payload, &id, err, sizeof err) == 0, "message %d: %s", i,
                   err);
        wrong += id / SEG != seg;
        if (i % 3 == 2) {
            TU_REQUIRE(redo_commit(r, &b, NULL, err, sizeof err) == 0, "%s", err);
        }
    }
    TU_CHECK(moved >= 3, "the batch moved to a next segment %d times", moved);
    TU_CHECK(wrong == 0, "%d messages landed outside the segment the room call settled", wrong);
    /* a batch holding messages is not moved: full, as the add would say */
    int rc = 0;
    while ((rc = redo_message_room(r, &b, sizeof payload, err, sizeof err)) == 0) {
        uint64_t id;
        TU_REQUIRE(redo_add_message(r, &b, payload, sizeof payload, &id, err, sizeof err) == 0, "%s", err);
    }
    TU_CHECK(rc == REDO_BATCH_FULL, "a full batch: %d", rc);
    uint64_t id;
    TU_CHECK(redo_add_message(r, &b, payload, sizeof payload, &id, err, sizeof err) == REDO_BATCH_FULL,
             "the add agrees");
    TU_REQUIRE(redo_commit(r, &b, NULL, err, sizeof err) == 0, "%s", err);
    TU_CHECK(redo_message_room(r, &b, 2 * SEG, err, sizeof err) == -1 && strstr(err, "cannot fit in a segment"),
             "a message larger than a segment: %s", err);
    redo_batch_free(&b);
    release_ptr((void **)g_redos, r);
    TU_CHECK(redo_free(r, err, sizeof err) == 0, "%s", err);
    db_close(db);
}

/* The redo's marks are read with verified checksums: a flipped byte in the
 * table block holding M "checkpoint" is refused at open as damage (naming
 * the mark), not read as another checkpoint — and not left in LevelDB's
 * block cache for later readers to take unverified. */
static void test_marks_verified(void)
{
    leveldb_options_t *o = leveldb_options_create();
    leveldb_options_set_create_if_missing(o, 1);
    leveldb_options_set_compression(o, leveldb_no_compression); /* the mark's bytes findable in the table */
    char *dberr = NULL;
    leveldb_t *db = leveldb_open(o, dir, &dberr);
    TU_REQUIRE(db != NULL, "leveldb_open: %s", dberr != NULL ? dberr : "?");
    hold_ptr((void **)g_dbs, db);
    redo_t *r = NULL;
    TU_REQUIRE(redo_open_on(db, 0, &r, NULL) == 0, "%s", err);
    redo_batch_t b = { 0 };
    for (int i = 0; i < 3; i++) {
        redo_db_put(&b, "k", 1, "v", 1);
        TU_REQUIRE(redo_commit(r, &b, NULL, err, sizeof err) == 0, "%s", err);
    }
    redo_batch_free(&b);
    TU_REQUIRE(clog_sync(redo_log(r), err, sizeof err) == 0 && redo_apply_durable(r, err, sizeof err) == 0, "%s", err);
    TU_REQUIRE(redo_checkpoint(r, err, sizeof err) == 0, "%s", err);
    uint64_t b_mark = redo_checkpointed(r);
    TU_REQUIRE(b_mark > 0, "a checkpoint past 0");
    TU_REQUIRE(redo_close_held(r, err, sizeof err) == 0, "%s", err);
    leveldb_compact_range(db, NULL, 0, NULL, 0); /* the marks into a table */
    db_close(db);

    /* the table holding the marks: flip the last byte of M "checkpoint"'s value */
    DIR *d = opendir(dir);
    TU_REQUIRE(d != NULL, "opendir %s", dir);
    struct dirent *de;
    int flipped = 0;
    while (!flipped && (de = readdir(d)) != NULL) {
        size_t nl = strlen(de->d_name);
        if (nl < 4 || strcmp(de->d_name + nl - 4, ".ldb") != 0) {
            continue;
        }
        char path[PATH_MAX];
        snprintf(path, sizeof path, "%s/%s", dir, de->d_name);
        struct stat st;
        TU_REQUIRE(stat(path, &st) == 0 && st.st_size > 0, "stat %s", path);
        size_t len = (size_t)st.st_size;
        char *t = malloc(len);
        FILE *in = fopen(path, "rb");
        TU_REQUIRE(t != NULL && in != NULL && fread(t, 1, len, in) == len && fclose(in) == 0, "read %s", path);
        char *at = NULL;
        for (size_t i = 0; at == NULL && i + 10 <= len; i++) {
            at = memcmp(t + i, "checkpoint", 10) == 0 ? t + i : NULL;
        }
        /* the internal key's 8-byte sequence and type, then the 8-byte value */
        if (at != NULL && (size_t)(at - t) + 10 + 8 + 8 <= len) {
            size_t off = (size_t)(at - t) + 10 + 8 + 7;
            TU_REQUIRE((unsigned char)t[off] == (b_mark & 0xff), "the mark's last byte at %zu", off);
            t[off] ^= 1;
            FILE *f = fopen(path, "r+b");
            TU_REQUIRE(f != NULL && fseek(f, (long)off, SEEK_SET) == 0 && fputc(t[off], f) != EOF && fclose(f) == 0,
                       "write %s", path);
            flipped = 1;
        }
        free(t);
    }
    closedir(d);
    TU_REQUIRE(flipped, "no table holds the checkpoint mark");

    db = leveldb_open(o, dir, &dberr);
    leveldb_options_destroy(o);
    TU_REQUIRE(db != NULL, "leveldb_open after the flip: %s", dberr != NULL ? dberr : "?");
    hold_ptr((void **)g_dbs, db);
    redo_open_report_t rep;
    memset(&rep, 0, sizeof rep);
    int rc = redo_open_on(db, 0, &r, &rep);
    TU_CHECK(rc != 0 && strstr(err, "checkpoint") != NULL && strstr(err, "checksum") != NULL,
             "the open with a flipped mark: rc %d, checkpoint read %" PRIu64 " (written %" PRIu64 "): %s", rc,
             rep.checkpoint, b_mark, err);
    db_close(db);
}

/* The replay time of 64 MiB of log (design §6: target <= 300 ms). */
static void test_replay_time(void)
{
    const char *mb = getenv("HG_REDO_BENCH_MIB");
    uint64_t want = (mb ? strtoull(mb, NULL, 10) : 64) << 20;
    /* its own directory on the temp root, outside the watched one: a disk's files, real syncs */
    char bdir[sizeof dir];
    TU_REQUIRE(tu_mkdtemp("clogredo-time", bdir, sizeof bdir) == 0, "mkdtemp");
    redo_options_t o = { bdir, UINT64_C(128) << 20, 0, NULL, bdir, bounds_from_db, NULL };
    pid_t pid = fork();
    TU_REQUIRE(pid >= 0, "fork");
    if (pid == 0) {
        /* the flood's shape: 118-byte message records, each with a CQ entry and a slot, batches of 512 with a
           LevelDB put; synced, never applied: the child dies and the open redoes it all */
        leveldb_t *db = db_open_at(bdir);
        o.db = o.bounds_ctx = db;
        redo_t *r = NULL;
        if (db == NULL || redo_open(&o, &r, NULL, err, sizeof err) != 0) {
            _exit(2);
        }
        uint64_t tail = 0;
        char payload[118];
        memset(payload, 'm', sizeof payload);
        redo_batch_t b = { 0 };
        while (clog_end(redo_log(r)) < want) {
            for (int i = 0; i < 512; i++) {
                uint64_t id;
                if (redo_add_message(r, &b, payload, sizeof payload, &id, err, sizeof err) != 0) {
                    _exit(3);
                }
                redo_cq_write(&b, 1, tail, &(cq_entry_t){ id, tail });
                redo_slot_write(&b, 0, tail, &(slot_t){ id, 1, 0, tail });
                tail++;
            }
            char v[8];
            be64_put(v, tail);
            redo_db_put(&b, "t01", 3, v, 8);
            if (redo_commit(r, &b, NULL, err, sizeof err) != 0) {
                _exit(4);
            }
        }
        g_ledger->b[0].end = tail;
        _exit(clog_sync(redo_log(r), err, sizeof err) == 0 ? 0 : 5);
    }
    int status;
    TU_REQUIRE(waitpid(pid, &status, 0) == pid && WIFEXITED(status) && WEXITSTATUS(status) == 0,
               "the writer failed: %#x", status);
    /* measured after a kill -9: the log in the page cache; the open still syncs it and the derived files */
    uint64_t msgs = g_ledger->b[0].end;
    leveldb_t *db = db_open_at(bdir);
    TU_REQUIRE(db != NULL, "%s", err);
    o.db = o.bounds_ctx = db;
    redo_open_report_t rep;
    redo_t *r = NULL;
    uint64_t t0 = tu_now_mono_us();
    TU_REQUIRE(redo_open(&o, &r, &rep, err, sizeof err) == 0, "%s", err);
    hold_ptr((void **)g_redos, r);
    uint64_t us = tu_now_mono_us() - t0;
    fprintf(stderr,
            "  redo at open of %" PRIu64 " bytes of log (%" PRIu64 " batches, %" PRIu64 " CQ writes, %" PRIu64
            " slot writes): %" PRIu64 " ms: log open %" PRIu64 ", redo %" PRIu64 ", checkpoint %" PRIu64 " ms\n",
            rep.bytes, rep.batches, rep.cq_writes, rep.slot_writes, us / 1000, rep.log_open_us / 1000,
            rep.redo_us / 1000, rep.checkpoint_us / 1000);
    TU_CHECK(rep.bytes >= want && rep.cq_writes == msgs && rep.slot_writes == msgs, "every write redone");
    TU_CHECK(redo_close_held(r, err, sizeof err) == 0, "%s", err);
    db_close(db);
    tu_rmtree(bdir);
}

/* ---- the checkpoint split (redo_checkpoint_begin / redo_checkpoint_finish) ------------ */

typedef struct finisher {
    redo_t *r;
    int rc;
    char err[512];
} finisher_t;

static void *finish_on_thread(void *p)
{
    finisher_t *f = p;
    f->rc = redo_checkpoint_finish(f->r, f->err, sizeof f->err);
    return NULL;
}

/* The finish on a second thread while the owner commits, syncs and applies
 * a batch: 100 rounds, each B published once its finish returns; the next
 * open finds the whole workload. */
static void test_finish_on_thread(void)
{
    leveldb_t *db = NULL;
    redo_t *r = open_db_and_redo(&db);
    uint64_t s = 17;
    int rounds = 100;
    /* a batch per round (the log's ~5 KiB a batch stays inside the model's MAX_SEGS segments) */
    TU_REQUIRE(write_batch(r, &g_model, &s, g_ledger->n) == 0 && sync_and_apply(r) == 0, "%s", err);
    for (int round = 0; round < rounds; round++) {
        uint64_t b = 0, before = redo_checkpointed(r);
        TU_REQUIRE(redo_checkpoint_begin(r, &b, err, sizeof err) == 0, "round %d: begin: %s", round, err);
        TU_REQUIRE(b == redo_applied(r), "B is what is applied");
        finisher_t f = { r, -1, "" };
        pthread_t t;
        TU_REQUIRE(pthread_create(&t, NULL, finish_on_thread, &f) == 0, "pthread_create");
        TU_REQUIRE(write_batch(r, &g_model, &s, g_ledger->n) == 0 && sync_and_apply(r) == 0, "%s", err);
        uint64_t seen = redo_checkpointed(r);
        TU_CHECK(seen == before || seen == b, "round %d: B read during the finish is the old or the new one", round);
        TU_REQUIRE(pthread_join(t, NULL) == 0, "pthread_join");
        TU_REQUIRE(f.rc == 0, "round %d: finish: %s", round, f.err);
        TU_CHECK(redo_checkpointed(r) == b, "round %d: B %" PRIu64 " published by the finish (%" PRIu64 ")", round, b,
                 redo_checkpointed(r));
    }
    uint64_t last_b = redo_checkpointed(r);
    TU_CHECK(last_b == g_ledger->b[g_ledger->n - 2].end, "the last B is the end of the batch before its round's");
    TU_CHECK(redo_close_held(r, err, sizeof err) == 0, "%s", err);
    db_close(db);
    redo_open_report_t rep;
    expect_recovered(g_ledger->n, &rep);
    TU_CHECK(rep.batches == 0, "nothing to redo after the close");
}

/* A second begin while one is open is refused, naming the open B; so is
 * redo_checkpoint; a finish without a begin is refused. */
static void test_begin_twice(void)
{
    leveldb_t *db = NULL;
    redo_t *r = open_db_and_redo(&db);
    uint64_t s = 5, b = 0, b2 = 0;
    TU_REQUIRE(write_synced_until(r, &s, 4096) == 0, "%s", err);
    TU_REQUIRE(redo_checkpoint_begin(r, &b, err, sizeof err) == 0, "%s", err);
    char want[64];
    snprintf(want, sizeof want, "begun at offset %" PRIu64 " is not finished", b);
    TU_REQUIRE(write_synced_until(r, &s, 8192) == 0, "%s", err);
    TU_CHECK(redo_checkpoint_begin(r, &b2, err, sizeof err) == -1 && strstr(err, want) != NULL,
             "a second begin refused, naming the open one: %s", err);
    TU_CHECK(redo_checkpoint(r, err, sizeof err) == -1 && strstr(err, want) != NULL, "redo_checkpoint refused too: %s",
             err);
    TU_CHECK(redo_checkpointed(r) == 0, "B not moved before the finish");
    TU_CHECK(redo_checkpoint_finish(r, err, sizeof err) == 0, "%s", err);
    TU_CHECK(redo_checkpointed(r) == b, "B moved by the finish");
    TU_CHECK(redo_checkpoint_finish(r, err, sizeof err) == -1 && strstr(err, "no checkpoint begun") != NULL,
             "a finish without a begin refused: %s", err);
    TU_CHECK(redo_checkpoint_begin(r, &b2, err, sizeof err) == 0 && b2 > b, "a begin after the finish: %s", err);
    TU_CHECK(redo_close_held(r, err, sizeof err) == 0, "the close finishes the begun checkpoint: %s", err);
    db_close(db);
    redo_open_report_t rep;
    expect_recovered(g_ledger->n, &rep);
}

/* clog_recycle refuses every segment not wholly below the last FINISHED B:
 * the segment of a begun B too, until its finish. */
static void test_recycle_keeps_begun_checkpoint(void)
{
    leveldb_t *db = NULL;
    redo_t *r = open_db_and_redo(&db);
    uint64_t s = 3, b1 = 0, b2 = 0;
    TU_REQUIRE(write_synced_until(r, &s, SEG + SEG / 4) == 0, "%s", err);
    TU_REQUIRE(redo_checkpoint(r, err, sizeof err) == 0, "%s", err);
    b1 = redo_checkpointed(r);
    TU_REQUIRE(b1 > SEG && b1 < 2 * SEG, "B %" PRIu64 " in the second segment", b1);
    TU_REQUIRE(write_synced_until(r, &s, 2 * SEG + SEG / 4) == 0, "%s", err);
    TU_REQUIRE(redo_checkpoint_begin(r, &b2, err, sizeof err) == 0, "%s", err);
    TU_REQUIRE(b2 > 2 * SEG && b2 < 3 * SEG, "begun B %" PRIu64 " in the third segment", b2);
    TU_REQUIRE(write_synced_until(r, &s, 3 * SEG + SEG / 4) == 0, "%s", err); /* the third segment not in use */
    char want[64];
    snprintf(want, sizeof want, "checkpoint %" PRIu64, b1);
    TU_CHECK(clog_recycle(redo_log(r), 2 * SEG, err, sizeof err) == -1 && strstr(err, want) != NULL,
             "the begun B's segment refused while unfinished: %s", err);
    TU_CHECK(clog_recycle(redo_log(r), SEG, err, sizeof err) == -1 && strstr(err, want) != NULL,
             "the finished B's segment refused: %s", err);
    TU_CHECK(clog_recycle(redo_log(r), 0, err, sizeof err) == 0, "below the finished B: recycled (%s)", err);
    TU_REQUIRE(redo_checkpoint_finish(r, err, sizeof err) == 0, "%s", err);
    TU_CHECK(clog_recycle(redo_log(r), SEG, err, sizeof err) == 0, "recycled once the finish moved B (%s)", err);
    TU_CHECK(clog_recycle(redo_log(r), 2 * SEG, err, sizeof err) == -1 && strstr(err, "checkpoint") != NULL,
             "the finished B's own segment stays: %s", err);
    TU_CHECK(redo_close_held(r, err, sizeof err) == 0, "%s", err);
    db_close(db);
    redo_open_report_t rep;
    expect_recovered(g_ledger->n, &rep);
}

/* The finish on the redo's own thread (redo_checkpoint_async): the owner
 * commits and applies meanwhile; a second one is refused while it runs or
 * its outcome waits; settle publishes B (1 once, then 0); redo_checkpoint
 * waits for it, and so does the close; the next open finds everything. */
static void test_checkpoint_async(void)
{
    leveldb_t *db = NULL;
    redo_t *r = open_db_and_redo(&db);
    uint64_t s = 23;
    TU_REQUIRE(write_batch(r, &g_model, &s, g_ledger->n) == 0 && sync_and_apply(r) == 0, "%s", err);
    TU_CHECK(redo_checkpoint_settle(r, 1, err, sizeof err) == 0, "nothing to settle before the first: %s", err);
    for (int round = 0; round < 20; round++) {
        uint64_t b = redo_applied(r);
        TU_REQUIRE(redo_checkpoint_async(r, err, sizeof err) == 0, "round %d: %s", round, err);
        TU_CHECK(redo_checkpoint_running(r), "round %d: running until settled", round);
        TU_REQUIRE(write_batch(r, &g_model, &s, g_ledger->n) == 0 && sync_and_apply(r) == 0, "%s", err);
        char want[96];
        snprintf(want, sizeof want, "begun at offset %" PRIu64 " is still being finished", b);
        TU_CHECK(redo_checkpoint_async(r, err, sizeof err) == -1 && strstr(err, want) != NULL,
                 "round %d: a second one refused, naming the first: %s", round, err);
        TU_CHECK(redo_checkpoint_settle(r, 1, err, sizeof err) == 1, "round %d: settled: %s", round, err);
        TU_CHECK(redo_checkpointed(r) == b, "round %d: B %" PRIu64 " published (%" PRIu64 ")", round, b,
                 redo_checkpointed(r));
        TU_CHECK(!redo_checkpoint_running(r) && redo_checkpoint_settle(r, 1, err, sizeof err) == 0,
                 "round %d: taken once", round);
    }
    /* redo_checkpoint waits for one running there, then makes its own */
    TU_REQUIRE(redo_checkpoint_async(r, err, sizeof err) == 0, "%s", err);
    TU_REQUIRE(write_batch(r, &g_model, &s, g_ledger->n) == 0 && sync_and_apply(r) == 0, "%s", err);
    TU_CHECK(redo_checkpoint(r, err, sizeof err) == 0, "redo_checkpoint after the thread's: %s", err);
    TU_CHECK(redo_checkpointed(r) == redo_applied(r) && !redo_checkpoint_running(r),
             "its B is the applied end, nothing left running");
    /* the close waits for one running there */
    TU_REQUIRE(write_batch(r, &g_model, &s, g_ledger->n) == 0 && sync_and_apply(r) == 0, "%s", err);
    TU_REQUIRE(redo_checkpoint_async(r, err, sizeof err) == 0, "%s", err);
    TU_CHECK(redo_close_held(r, err, sizeof err) == 0, "the close after the thread's finish: %s", err);
    db_close(db);
    redo_open_report_t rep;
    expect_recovered(g_ledger->n, &rep);
    TU_CHECK(rep.batches == 0, "nothing to redo after the close");
}

/* The owner's hook (redo_on_checkpoint_finished): called on the finisher's
 * thread once a finish ends, its outcome waiting — with no settle or other
 * call of the owner to make it end — set before the thread exists and after;
 * once per finish; NULL calls nothing. */
static atomic_int g_finished_calls;

static void count_finished(void *arg)
{
    atomic_fetch_add((atomic_int *)arg, 1);
}

static int finished_calls_reach(void *arg)
{
    return atomic_load(&g_finished_calls) >= *(int *)arg;
}

static void test_checkpoint_async_hook(void)
{
    leveldb_t *db = db_open();
    TU_REQUIRE(db != NULL, "%s", err);
    redo_t *r = NULL;
    TU_REQUIRE(redo_open_on(db, 0, &r, NULL) == 0, "%s", err);
    uint64_t s = 31;
    atomic_store(&g_finished_calls, 0);
    redo_on_checkpoint_finished(r, count_finished, &g_finished_calls); /* no thread yet: kept for it */
    for (int round = 1; round <= 3; round++) {
        TU_REQUIRE(write_batch(r, &g_model, &s, g_ledger->n) == 0 && sync_and_apply(r) == 0, "%s", err);
        if (round == 2) {
            redo_on_checkpoint_finished(r, count_finished, &g_finished_calls); /* the thread exists now */
        }
        TU_REQUIRE(redo_checkpoint_async(r, err, sizeof err) == 0, "round %d: %s", round, err);
        TU_CHECK(tu_poll_until(finished_calls_reach, &round, 30000, 1) == 0,
                 "round %d: the hook called %d times 30 s after the finish began, want %d", round,
                 atomic_load(&g_finished_calls), round);
        TU_CHECK(redo_checkpoint_running(r), "round %d: its outcome waits for the settle after the hook", round);
        TU_CHECK(redo_checkpoint_settle(r, 0, err, sizeof err) == 1, "round %d: settled at once: %s", round, err);
    }
    TU_CHECK(atomic_load(&g_finished_calls) == 3, "the hook called %d times for 3 finishes",
             atomic_load(&g_finished_calls));
    redo_on_checkpoint_finished(r, NULL, NULL);
    TU_REQUIRE(write_batch(r, &g_model, &s, g_ledger->n) == 0 && sync_and_apply(r) == 0, "%s", err);
    TU_REQUIRE(redo_checkpoint_async(r, err, sizeof err) == 0, "%s", err);
    TU_CHECK(redo_checkpoint_settle(r, 1, err, sizeof err) == 1, "settled: %s", err);
    TU_CHECK(atomic_load(&g_finished_calls) == 3, "a NULL hook: %d calls, want still 3",
             atomic_load(&g_finished_calls));
    TU_CHECK(redo_close_held(r, err, sizeof err) == 0, "%s", err);
    db_close(db);
    redo_open_report_t rep;
    expect_recovered(g_ledger->n, &rep);
}

/* redo_free while the thread finishes: it waits for the finish, which uses
 * the files it frees (ASan or valgrind see a use after free otherwise); the
 * next open redoes from whichever B stands. */
static void test_checkpoint_async_free(void)
{
    leveldb_t *db = NULL;
    redo_t *r = open_db_and_redo(&db);
    uint64_t s = 29;
    for (int i = 0; i < 4; i++) {
        TU_REQUIRE(write_batch(r, &g_model, &s, g_ledger->n) == 0 && sync_and_apply(r) == 0, "%s", err);
    }
    TU_REQUIRE(redo_checkpoint_async(r, err, sizeof err) == 0, "%s", err);
    release_ptr((void **)g_redos, r);
    TU_CHECK(redo_free(r, err, sizeof err) == 0, "%s", err);
    db_close(db);
    redo_open_report_t rep;
    expect_recovered(g_ledger->n, &rep);
}

/* A child: open (armed, never killed), 12 batches synced and applied, a
 * checkpoint (B1), 10 more, a begin (B2), 6 more; then, with finish_kill
 * set, re-armed to die at the finish_kill-th file call of the finish (0:
 * dies before the finish). Exits 0 when the finish returned. */
static void __attribute__((noreturn)) split_child(uint64_t finish_kill)
{
    leveldb_t *db = db_open();
    if (db == NULL) {
        _exit(2);
    }
    powercut_arm(0);
    redo_t *r = NULL;
    if (redo_open_on(db, 0, &r, NULL) != 0) {
        _exit(3);
    }
    uint64_t s = 11;
    for (int k = 0; k < 28; k++) {
        if (write_batch(r, &g_model, &s, g_ledger->n) != 0 || sync_and_apply(r) != 0 ||
            (k == 11 && redo_checkpoint(r, err, sizeof err) != 0) ||
            (k == 21 && redo_checkpoint_begin(r, NULL, err, sizeof err) != 0)) {
            fprintf(stderr, "child: %s\n", err);
            _exit(4);
        }
    }
    if (finish_kill == 0) {
        raise(SIGKILL);
    }
    powercut_arm(powercut_calls() + finish_kill);
    if (redo_checkpoint_finish(r, err, sizeof err) != 0) {
        fprintf(stderr, "child: finish: %s\n", err);
        _exit(5);
    }
    _exit(0);
}

/* A fresh round for split_child: the power-cut journal, the ledger and the
 * model emptied, then split_child(finish_kill) forked. Requires the fork;
 * returns the child's pid. */
static pid_t fork_split_child(uint64_t finish_kill)
{
    powercut_reset();
    g_ledger->n = 0;
    memset(&g_model, 0, sizeof g_model);
    pid_t pid = fork();
    TU_REQUIRE(pid >= 0, "fork");
    if (pid == 0) {
        split_child(finish_kill);
    }
    return pid;
}

/* Power cuts between begin and finish: the open redoes from the previous
 * B and keeps every synced batch. */
static void test_cut_between_begin_and_finish(void)
{
    for (uint64_t seed = 1; seed <= 8; seed++) {
        pid_t pid = fork_split_child(0);
        int status;
        TU_REQUIRE(waitpid(pid, &status, 0) == pid && WIFSIGNALED(status), "the child failed: %#x", status);
        powercut_stats_t st;
        TU_REQUIRE(powercut_power_off(seed, &st, err, sizeof err) == 0, "%s", err);
        redo_open_report_t rep;
        expect_recovered(28, &rep);
        TU_CHECK(rep.checkpoint == g_ledger->b[11].end && rep.batches == 16,
                 "seed %" PRIu64 ": redone from the previous B %" PRIu64 " (B %" PRIu64 ", %" PRIu64 " batches)", seed,
                 g_ledger->b[11].end, rep.checkpoint, rep.batches);
        tu_rmtree(dir);
        TU_REQUIRE(mkdir(dir, 0700) == 0, "mkdir");
    }
}

/* A power cut at each file call of the finish (the files' syncs, LevelDB's
 * logs, the directory, the mark's write and its sync): the open starts at
 * the previous B or the new one, and either way finds every synced batch. */
static void test_cut_inside_finish(void)
{
    uint64_t calls = 0, at_old = 0, at_new = 0;
    for (uint64_t c = 1;; c++) {
        pid_t pid = fork_split_child(c);
        int status;
        TU_REQUIRE(waitpid(pid, &status, 0) == pid, "waitpid");
        if (WIFEXITED(status)) {
            TU_REQUIRE(WEXITSTATUS(status) == 0, "the child failed at kill point %" PRIu64 ": %#x", c, status);
            calls = c - 1;
            break;
        }
        powercut_stats_t st;
        TU_REQUIRE(powercut_power_off(c * 31, &st, err, sizeof err) == 0, "%s", err);
        redo_open_report_t rep;
        unsigned failures = CU_get_number_of_failures();
        expect_recovered(28, &rep);
        at_old += rep.checkpoint == g_ledger->b[11].end;
        at_new += rep.checkpoint == g_ledger->b[21].end;
        TU_CHECK(rep.checkpoint == g_ledger->b[11].end || rep.checkpoint == g_ledger->b[21].end,
                 "cut at the finish's call %" PRIu64 ": B %" PRIu64 " is the previous or the begun one", c,
                 rep.checkpoint);
        if (CU_get_number_of_failures() > failures) {
            fprintf(stderr, "failed after a power cut at the finish's file call %" PRIu64 "\n", c);
            return;
        }
        tu_rmtree(dir);
        TU_REQUIRE(mkdir(dir, 0700) == 0, "mkdir");
    }
    fprintf(stderr,
            "  the finish made %" PRIu64 " file calls; cuts left B at the previous one %" PRIu64
            " times, at the begun one %" PRIu64 " times\n",
            calls, at_old, at_new);
    TU_CHECK(calls >= 4 && at_old > 0, "the finish's file calls (%" PRIu64 ") each cut, most before the mark", calls);
}

/* ---- suite clog_redo_powercut -------------------------------------------------------- */

#define ROUNDS  3
#define BATCHES 20

typedef struct totals {
    powercut_stats_t cut;
    uint64_t rounds, redo_cuts, calls, synced_kept, appended_lost;
    uint64_t cut_midway;   /* children killed at their kill point, not after their last step */
    uint64_t carried_cuts; /* cuts inside redo_sync_failed after its checkpoint */
} totals_t;


/* The writer: open (LevelDB before the arm), batches, syncs, applies and
 * checkpoints at random (half of them split: begun, then finished after the
 * next batch is committed), until the cut. */
static void __attribute__((noreturn)) writer(uint64_t seed, uint64_t floor, uint64_t kill_at)
{
    uint64_t s = seed;
    leveldb_t *db = db_open();
    if (db == NULL) {
        fprintf(stderr, "writer: %s\n", err);
        _exit(2);
    }
    powercut_arm(kill_at);
    redo_t *r = NULL;
    if (redo_open_on(db, floor, &r, NULL) != 0) {
        fprintf(stderr, "writer: redo_open: %s\n", err);
        _exit(3);
    }
    model_rebuild(&g_model, g_ledger->n);
    int fail_at = powercut_next_rand(&s) % 2 ? (int)(powercut_next_rand(&s) % BATCHES)
                                             : -1; /* a failed log sync, half the rounds */
    int begun = 0; /* a checkpoint begun after the last batch: finished after the next one is committed */
    uint64_t fast = seed * 31 + 7; /* its own sequence: the other draws stay as they were */
    for (int k = 0; k < BATCHES && g_ledger->n < MAX_BATCHES; k++) {
        g_fail_next_sync = k == fail_at;
        g_commit_applied = powercut_next_rand(&fast) % 3 == 0; /* append, sync and apply in one call */
        uint64_t failures = g_ledger->failures;
        if (write_batch(r, &g_model, &s, g_ledger->n) != 0) {
            fprintf(stderr, "writer: batch: %s\n", err);
            _exit(4);
        }
        /* a failed sync handled inside the batch's commit: redo_sync_failed finished the begun checkpoint */
        begun = begun && g_ledger->failures == failures;
        if (begun && redo_checkpoint_finish(r, err, sizeof err) != 0) {
            fprintf(stderr, "writer: checkpoint finish: %s\n", err);
            _exit(6);
        }
        begun = 0;
        if (powercut_next_rand(&s) % 3 != 0 && sync_and_apply(r) != 0) {
            fprintf(stderr, "writer: sync: %s\n", err);
            _exit(5);
        }
        if (powercut_next_rand(&s) % 8 == 0) {
            begun = powercut_next_rand(&s) % 2 == 0;
            if ((begun ? redo_checkpoint_begin(r, NULL, err, sizeof err) : redo_checkpoint(r, err, sizeof err)) != 0) {
                fprintf(stderr, "writer: checkpoint: %s\n", err);
                _exit(6);
            }
        }
    }
    raise(SIGKILL);
    _exit(7);
}

/* Fork fn's child armed to die at kill_at, wait, power off. 0, or -1. */
static int cut_child(int is_writer, uint64_t seed, uint64_t floor, uint64_t kill_at, uint64_t cut_seed, totals_t *t)
{
    powercut_reset();
    pid_t pid = fork();
    TU_REQUIRE(pid >= 0, "fork");
    if (pid == 0) {
        if (is_writer) {
            writer(seed, floor, kill_at);
        }
        leveldb_t *db = db_open();
        powercut_arm(kill_at);
        redo_t *r = NULL;
        if (db == NULL || redo_open_on(db, 0, &r, NULL) != 0) {
            fprintf(stderr, "redo child: %s\n", err);
            _exit(2);
        }
        raise(SIGKILL); /* the cut right after a whole redo */
    }
    int status;
    TU_REQUIRE(waitpid(pid, &status, 0) == pid, "waitpid");
    TU_CHECK(WIFSIGNALED(status), "seed %" PRIu64 ": the %s ended by status %#x, not by the cut", seed,
             is_writer ? "writer" : "redo", status);
    if (!WIFSIGNALED(status)) {
        return -1;
    }
    t->calls += powercut_calls();
    t->cut_midway += powercut_calls() == kill_at; /* the kill_at-th call is counted, never made */
    powercut_stats_t st;
    int rc = powercut_power_off(cut_seed, &st, err, sizeof err);
    TU_CHECK(rc == 0, "seed %" PRIu64 ": power off: %s", seed, err);
    powercut_stats_add(&t->cut, &st);
    return rc;
}

/* After the cut: the open succeeds, the log is a prefix holding every synced
 * batch, and the state equals the model after that prefix. The prefix's
 * length, or -1. */
static long check_after_cut(uint64_t seed, int round, totals_t *t)
{
    leveldb_t *db = db_open();
    TU_CHECK(db != NULL, "seed %" PRIu64 " round %d: %s", seed, round, err);
    if (db == NULL) {
        return -1;
    }
    redo_t *r = NULL;
    redo_open_report_t rep;
    int rc = redo_open_on(db, 0, &r, &rep);
    TU_CHECK(rc == 0, "seed %" PRIu64 " round %d: redo_open after the cut: %s", seed, round, err);
    if (rc != 0) {
        db_close(db);
        return -1;
    }
    rc = redo_close_held(r, err, sizeof err);
    TU_CHECK(rc == 0, "seed %" PRIu64 " round %d: redo_close: %s", seed, round, err);
    if (g_ledger->ab_pending && rep.log.end > g_ledger->ab_to) {
        /* cut inside redo_sync_failed after its checkpoint: the carried batches are the log's last */
        ledger_carried(g_ledger->ab_from, g_ledger->ab_to, rep.log.end);
        t->carried_cuts++;
    }
    g_ledger->ab_pending = 0;
    size_t p = 0;
    while (p < g_ledger->n && g_ledger->b[p].end <= rep.log.end) {
        p++;
    }
    uint64_t pend = p > 0 ? g_ledger->b[p - 1].end : 0;
    char why[1024] = "";
    if (rc == 0 && pend != rep.log.end) {
        snprintf(why, sizeof why, "the log ends at %" PRIu64 ", which no batch ends at", rep.log.end);
        rc = -1;
    }
    for (size_t j = p; rc == 0 && j < g_ledger->n; j++) {
        if (g_ledger->b[j].state == SYNCED) {
            snprintf(why, sizeof why, "batch %zu (end %" PRIu64 ") was synced and is lost: the log ends at %" PRIu64, j,
                     g_ledger->b[j].end, rep.log.end);
            rc = -1;
        }
        t->appended_lost++;
    }
    for (size_t j = 0; j < p; j++) {
        t->synced_kept += g_ledger->b[j].state == SYNCED;
    }
    if (rc == 0) {
        model_rebuild(&g_model, p);
        rc = check_state(db, &g_model, rep.log.end, why, sizeof why);
    }
    TU_CHECK(rc == 0, "seed %" PRIu64 " round %d, prefix of %zu of %zu batches: %s", seed, round, p, g_ledger->n, why);
    db_close(db);
    return rc == 0 ? (long)p : -1;
}

static int run_seed(uint64_t seed, void *totals)
{
    totals_t *t = totals;
    uint64_t s = seed * 7919;
    uint64_t floor = 0;
    g_ledger->n = 0;
    for (int round = 0; round < ROUNDS; round++) {
        /* the writer makes ~70-110 file calls; past its last one the cut comes after its last batch */
        uint64_t kill_at = 1 + powercut_next_rand(&s) % 120;
        if (cut_child(1, seed * 100 + (uint64_t)round, floor, kill_at, powercut_next_rand(&s), t) != 0) {
            return -1;
        }
        t->rounds++;
        if (powercut_next_rand(&s) % 2 == 0) { /* and a cut inside the redo that follows */
            if (cut_child(0, seed, 0, 1 + powercut_next_rand(&s) % 60, powercut_next_rand(&s), t) != 0) {
                return -1;
            }
            t->redo_cuts++;
        }
        long p = check_after_cut(seed, round, t);
        if (p < 0) {
            return -1;
        }
        g_ledger->n = (size_t)p;
        uint64_t end = p > 0 ? g_ledger->b[p - 1].end : 0;
        floor = powercut_next_rand(&s) % 4 == 0 ? end + powercut_next_rand(&s) % (2 * SEG) : 0;
    }
    return 0;
}

static void test_power_cuts(void)
{
    totals_t t = { 0 };
    powercut_seed_run_t seeds = powercut_run_seeds(dir, 100, run_seed, &t);
    fprintf(stderr,
            "  %" PRIu64 " seeds, %" PRIu64 " writer cuts and %" PRIu64 " redo cuts (%" PRIu64
            " file calls) in %" PRIu64 " ms: %" PRIu64 " unsynced writes (%" PRIu64 " kept, %" PRIu64
            " dropped, %" PRIu64 " torn), %" PRIu64 " renames lost; %" PRIu64 " synced batches checked, %" PRIu64
            " appended batches lost; %" PRIu64 " of the cuts midway; %" PRIu64 " failed log syncs handled (%" PRIu64
            " writes they lost), %" PRIu64 " cuts inside the handling kept the carried batches\n",
            seeds.ran, t.rounds, t.redo_cuts, t.calls, seeds.wall_ms, t.cut.unsynced, t.cut.kept, t.cut.dropped,
            t.cut.torn, t.cut.renames_lost, t.synced_kept, t.appended_lost, t.cut_midway, g_ledger->failures,
            t.cut.lost, t.carried_cuts);
    if (!seeds.failed && seeds.ran >= 50) {
        TU_CHECK(t.cut.torn > 0 && t.cut.dropped > 0 && t.appended_lost > 0 && t.redo_cuts > 0 && t.synced_kept > 0 &&
                     g_ledger->failures > 0 && t.cut.lost > 0 && t.cut_midway * 2 > t.rounds + t.redo_cuts,
                 "the cuts tore and dropped writes, lost appended batches, cut redos, kept synced batches, failed "
                 "syncs were handled and lost writes, and most landed midway (%" PRIu64 " of %" PRIu64 ")",
                 t.cut_midway, t.rounds + t.redo_cuts);
    }
}

static const tu_test_t redo_tests[] = {
    { "derived writes held until the log's sync, then applied", test_held_until_sync },
    { "redo after a kill, and nothing after a clean close", test_redo_after_kill },
    { "a failed log sync: abandoned, carried, never read again (kill -9)", test_sync_failure_kill },
    { "a failed log sync: abandoned, carried, never read again (power cut)", test_sync_failure_power_cut },
    { "redo_commit_applied: made in one call, never in the overlay; held ones made with it", test_commit_applied },
    { "redo_commit_applied's failed sync: held, in the overlay, carried (kill -9)",
      test_commit_applied_sync_failure_kill },
    { "redo_commit_applied's failed sync: held, in the overlay, carried (power cut)",
      test_commit_applied_sync_failure_power_cut },
    { "redo_cq_read and redo_slot_read see held batches over the files", test_reads_through_held },
    { "an abandoned segment, recycled and used again, is synced", test_abandoned_segment_recycled },
    { "a second failed sync, of the fresh segment: stop; the open keeps the synced prefix", test_second_sync_failure },
    { "redo_free: nothing made; the next open redoes what the log kept (kill -9)", test_free_kill },
    { "redo_free: nothing made; the next open redoes what the log kept (power cut)", test_free_power_cut },
    { "clog_recycle keeps the checkpoint's segment and those after it", test_recycle_keeps_checkpoint },
    { "redo twice over the same range", test_redo_twice },
    { "redo after a redo killed at each of its file calls", test_redo_after_killed_redo },
    { "a checkpoint leaves nothing to redo", test_checkpoint_then_nothing },
    { "a LevelDB batch made once, when its sync returns", test_db_batch_once },
    { "LevelDB kept a later batch and lost an earlier one: redone in order", test_db_hole_redone_in_order },
    { "damage: the log below the applied mark; a batch without its record", test_damage },
    { "bad inputs: a CQ write past its tail, writes too big for a segment", test_bad_inputs },
    { "redo_batch_room: the derived record's room as redo_commit sees it", test_batch_room },
    { "the per-message reserve holds a CQ write and a slot", test_message_reserve },
    { "redo_message_room settles the segment before the record is made", test_message_room },
    { "the marks are read with verified checksums: a damaged block holding one is refused", test_marks_verified },
    { "replay time of 64 MiB of log", test_replay_time },
    { "checkpoint finish on a second thread while the owner commits and applies", test_finish_on_thread },
    { "a second checkpoint begin is refused while one is open", test_begin_twice },
    { "clog_recycle keeps a begun checkpoint's segment until its finish", test_recycle_keeps_begun_checkpoint },
    { "checkpoint finish on the redo's own thread (redo_checkpoint_async)", test_checkpoint_async },
    { "redo_free waits for a finish on the redo's own thread", test_checkpoint_async_free },
    { "the owner's hook is called when a finish on the redo's thread ends", test_checkpoint_async_hook },
    { NULL, NULL },
};

static const tu_test_t powercut_tests[] = {
    { "power cuts in writes and redos keep a prefix with every synced batch", test_power_cuts },
    { "a power cut between checkpoint begin and finish: redo from the previous B", test_cut_between_begin_and_finish },
    { "a power cut at each file call of the checkpoint finish", test_cut_inside_finish },
    { NULL, NULL },
};

int main(int argc, char **argv)
{
    static const tu_suite_t suites[] = {
        { "clog_redo", redo_tests },
        { "clog_redo_powercut", powercut_tests },
    };
    return tu_suites_main(argc, argv, suites, sizeof suites / sizeof suites[0], setup, teardown);
}
