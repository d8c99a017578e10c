/*
 * levels/store_log.c — the commit log beside LevelDB (docs/design-commitlog.md,
 * "Step 4a: the wiring plan", sub-step 4a.1): store_open opens the log and its
 * redo (levels/clog_redo.h) in the data directory once LevelDB is open and
 * its meta records are checked, and store_close closes them with a clean
 * checkpoint. Nothing is appended to the log yet (4a.2 routes the commits
 * through it), so the redo at open finds nothing to redo; what this step
 * fixes is where the log lives, the order of the open, and how the redo's
 * refusals become store_open's.
 *
 * Order: the redo opens after store_check_meta (a directory of another
 * format or level table is refused before the redo writes into it; a new
 * one has its format marker first, since the redo's checkpoint is a LevelDB
 * write) and before store_settle_meta reads the sequence counter and
 * store_load_* the records (from 4a.2 on the redo rewrites them). The log's
 * floor is the clock's (store_seq_floor: ids and log offsets share it). LevelDB's CURRENT exists before any file of the log
 * can be made, so a crash in between never leaves a directory that
 * store_prepare_dir cannot tell from a foreign one.
 *
 * Queues: the redo asks for a queue's bounds when a logged write names it. No
 * format this build writes has consume queues yet, so such a log is refused,
 * naming the queue.
 *
 * Threading: the store's owner thread.
 */
#include "levels/store_internal.h"
#include "levels/clog_derived.h"
#include "base/clock.h"
#include "base/err.h"

#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

static int no_queue_bounds(void *ctx, uint32_t queue, uint64_t *head, uint64_t *tail, char *err, size_t errlen)
{
    const store_t *s = ctx;
    *head = *tail = 0;
    return err_set(err, errlen,
                   "the commit log in %s names consume queue %" PRIu32
                   ", but this format of the store keeps no consume queues",
                   s->path, queue);
}

int store_check_segment_bytes(uint64_t n, char *err, size_t errlen)
{
    if (n % 4096 != 0 || n < CLOG_SEGMENT_MIN || n > CLOG_SEGMENT_MAX) {
        return err_set(err, errlen,
                       "commit-log segment size %" PRIu64 " bytes is not a multiple of 4096 between %" PRIu64
                       " and %" PRIu64,
                       n, (uint64_t)CLOG_SEGMENT_MIN, (uint64_t)CLOG_SEGMENT_MAX);
    }
    return 0;
}

/* Recycle every segment wholly below the checkpoint B (design-commitlog.md
 * §5: nothing but LevelDB batches lies in them until 4a.3, and those are in
 * LevelDB, synced by the checkpoint): each becomes a spare the log takes again
 * (clog_recycle), so the log keeps about (log since B) / segment + spares
 * files. Names are read from the directory (a segment's base is in its name;
 * spares lie past the log's end, so never below B). 0, or -1 with err (a
 * rename or a header write failed). */
static int recycle_below_checkpoint(store_t *s, char *err, size_t errlen)
{
    uint64_t b = redo_checkpointed(s->redo), size = s->opt.segment_bytes;
    DIR *d = opendir(s->path);
    if (d == NULL) {
        return err_set(err, errlen, "cannot list %s: %s", s->path, strerror(errno));
    }
    uint64_t below[64];
    size_t n = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL && n < sizeof below / sizeof below[0]) {
        uint64_t base;
        char tail;
        if (sscanf(e->d_name, "clog-%16" SCNx64 ".se%c", &base, &tail) == 2 && tail == 'g' && strlen(e->d_name) == 25 &&
            base + size <= b) {
            below[n++] = base;
        }
    }
    closedir(d);
    char why[512];
    for (size_t i = 0; i < n; i++) { /* a later checkpoint takes any beyond the first 64 */
        if (clog_recycle(redo_log(s->redo), below[i], why, sizeof why) != 0) {
            return err_set(err, errlen, "recycling a commit-log segment of %s: %s", s->path, why);
        }
    }
    return 0;
}

/* The size of dir's first clog-*.seg file that has a segment's size, or 0
 * when it has none (or cannot be listed). */
static uint64_t first_segment_size(const char *dir)
{
    DIR *d = opendir(dir);
    if (d == NULL) {
        return 0;
    }
    uint64_t size = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        size_t n = strlen(e->d_name);
        char path[4200];
        struct stat st;
        if (n > 9 && strncmp(e->d_name, "clog-", 5) == 0 && strcmp(e->d_name + n - 4, ".seg") == 0 &&
            snprintf(path, sizeof path, "%s/%s", dir, e->d_name) < (int)sizeof path && stat(path, &st) == 0 &&
            S_ISREG(st.st_mode) && store_check_segment_bytes((uint64_t)st.st_size, NULL, 0) == 0) {
            size = (uint64_t)st.st_size;
            break;
        }
    }
    closedir(d);
    return size;
}

/* The size of the segments the log in dir was made with (the size of its
 * first clog-*.seg file), or `configured` when it has none: a directory keeps
 * its size whatever the configuration says now (a check, a restore on another
 * host), and clog_open checks every segment against it (and says why when
 * the directory cannot be read). */
static uint64_t segment_bytes_of(const char *dir, uint64_t configured)
{
    uint64_t size = first_segment_size(dir);
    return size != 0 ? size : configured;
}

int store_log_present(const char *dir)
{
    return first_segment_size(dir) != 0;
}

/* The redo reads its marks (`M` "checkpoint", "applied", "clean") with read
 * options that verify no checksum, and LevelDB keeps a block read that way
 * in its block cache, where every later read finds it unverified: a bit
 * flipped in the block holding a mark was then read by every walk, with
 * checksums on, as a block of fewer entries and no error (test_store_open, "a
 * damaged table block is found": 2 972 of 3 000 level entries, status OK).
 * Read each mark first with the store's options (checksums verified): a
 * damaged block is reported here and is not cached, and the redo's reads
 * take the same path through the same, now verified and cached, blocks. 0,
 * or STORE_OPEN_DAMAGED with err. */
static int verify_marks(store_t *s, char *err, size_t errlen)
{
    static const char *const marks[] = { "checkpoint", "applied", "clean" };
    for (size_t i = 0; i < sizeof marks / sizeof marks[0]; i++) {
        key_buf_t k;
        key_meta(&k, marks[i]);
        char *dberr = NULL;
        size_t n = 0;
        char *v = leveldb_get(s->db, s->ropt, k.b, k.n, &n, &dberr);
        leveldb_free(v);
        if (dberr != NULL) {
            err_set(err, errlen,
                    "data directory %s is damaged: reading the commit log's %s mark: %s; restore it from a backup "
                    "(docs/operations.md, \"A damaged data directory\")",
                    s->path, marks[i], dberr);
            leveldb_free(dberr);
            return STORE_OPEN_DAMAGED;
        }
    }
    return 0;
}

int store_log_open(store_t *s, uint64_t floor, char *err, size_t errlen)
{
    int damaged = verify_marks(s, err, errlen);
    if (damaged != 0) {
        return damaged;
    }
    s->opt.segment_bytes = segment_bytes_of(s->path, s->opt.segment_bytes);
    redo_options_t o = { .dir = s->path,
                         .segment_bytes = s->opt.segment_bytes,
                         .floor = floor,
                         .db = s->db,
                         .db_dir = s->path,
                         .bounds = no_queue_bounds,
                         .bounds_ctx = s };
    redo_open_report_t rep;
    char why[768];
    int rc = redo_open(&o, &s->redo, &rep, why, sizeof why);
    if (rc == REDO_DAMAGED) {
        err_set(err, errlen,
                "data directory %s is damaged: %s; restore it from a backup (docs/operations.md, \"A damaged data "
                "directory\")",
                s->path, why);
        return STORE_OPEN_DAMAGED;
    }
    if (rc != 0) {
        return err_set(err, errlen, "cannot open the commit log of %s: %s", s->path, why);
    }
    s->checkpoint_mono_ms = clock_mono_ms(); /* the open took one */
    if (recycle_below_checkpoint(s, why, sizeof why) != 0) {
        return err_set(err, errlen, "%s", why);
    }
    if (rep.log.cut_at != 0) {
        size_t n = strlen(s->open_note);
        snprintf(s->open_note + n, sizeof s->open_note - n,
                 "%sthe commit log ended in a torn write at offset %" PRIu64 " (a power cut): cut off, its %" PRIu64
                 " bytes kept in %s",
                 n > 0 ? "; " : "", rep.log.cut_at, rep.log.cut_bytes, rep.log.cut_file);
    }
    return 0;
}

int store_log_close_after_failed_append(store_t *s, char *err, size_t errlen)
{
    if (s->redo == NULL) {
        return 0;
    }
    /* First B = what LevelDB has (its logs synced, a mark written: no room beyond the mark's), so that should
       the close's apply find no room, the next open redoes the held batches only. */
    char why[512];
    if (redo_checkpoint(s->redo, why, sizeof why) != 0) {
        store_log_free(s);
        return err_set(err, errlen, "checkpoint of the commit log of %s after a failed append: %s", s->path, why);
    }
    return store_log_close(s, err, errlen);
}

int store_log_sync_failed(store_t *s, char *err, size_t errlen)
{
    redo_failure_t f;
    char why[512];
    if (redo_sync_failed(s->redo, &f, why, sizeof why) != 0) {
        return err_set(err, errlen, "commit log of %s after a failed sync: %s", s->path, why);
    }
    return 0;
}

void store_log_free(store_t *s)
{
    redo_t *r = s->redo;
    s->redo = NULL;
    (void)redo_free(r, NULL, 0); /* a CQ or slot file's close: none exists in this format */
}

int store_log_close(store_t *s, char *err, size_t errlen)
{
    redo_t *r = s->redo;
    s->redo = NULL;
    if (r == NULL) {
        return 0;
    }
    char why[512];
    if (redo_close(r, why, sizeof why) != 0) {
        return err_set(err, errlen, "closing the commit log of %s: %s", s->path, why);
    }
    return 0;
}

/* ---- the commit path (4a.2) ------------------------------------------------------------ */

/* A batch whose derived-writes record no segment can hold (an EXEC's batch:
 * up to max-inflight-bytes of SENDs, whose LevelDB writes can be several
 * times its request bytes) goes to LevelDB directly, synced — after every
 * earlier commit was synced, applied and checkpointed, so that B is the log's
 * end and no redo ever replays an earlier batch over its writes (redo from B
 * applies only later batches, which come after it). Atomic as any LevelDB
 * write; costs two checkpoints (the second marks the write as below B). 0,
 * or -1 with err (the store is then broken). */
static int write_beside_log(store_t *s, char *err, size_t errlen)
{
    char why[512];
    if (store_log_make_durable(s, err, errlen) != 0) {
        return -1;
    }
    if (redo_checkpoint(s->redo, why, sizeof why) != 0) {
        store_break(s, why);
        return err_set(err, errlen, "checkpoint of the commit log of %s: %s", s->path, why);
    }
    s->checkpoint_mono_ms = clock_mono_ms();
    redo_batch_t *b = &s->log_batch;
    leveldb_writebatch_t *wb = leveldb_writebatch_create();
    size_t at = DERIVED_HEAD;
    derived_op_t op;
    while (at < b->len && derived_next(b->derived, b->len, &at, &op) == 1) {
        if (op.tag == 'P') {
            leveldb_writebatch_put(wb, op.key, op.klen, op.val, op.vlen);
        } else if (op.tag == 'D') {
            leveldb_writebatch_delete(wb, op.key, op.klen);
        }
    }
    int whole = at == b->len;
    char *e = NULL;
    if (whole) {
        leveldb_write(s->db, s->wopt_sync, wb, &e);
    }
    leveldb_writebatch_destroy(wb);
    redo_batch_free(b);
    if (!whole || e != NULL) {
        err_set(err, errlen, "%s", whole ? e : "a batch's LevelDB writes do not decode");
        leveldb_free(e);
        return -1;
    }
    if (s->key_it != NULL) { /* it would not see this write */
        leveldb_iter_destroy(s->key_it);
        s->key_it = NULL;
    }
    /* A checkpoint mark after it (B unchanged): the write is in no commit-log batch, so a hole in it must read as
       damage below a checkpoint (store_open_past_hole), never as unsynced writes the redo would rewrite. */
    if (redo_checkpoint(s->redo, why, sizeof why) != 0) {
        store_break(s, why);
        return err_set(err, errlen, "checkpoint of the commit log of %s: %s", s->path, why);
    }
    s->checkpoint_mono_ms = clock_mono_ms();
    return 0;
}

static int after_apply(store_t *s, uint64_t applied_before, char *err, size_t errlen);

int store_log_append(store_t *s, int durable, char *err, size_t errlen)
{
    char why[512];
    if (s->log_batch.messages == 0 && redo_batch_room(s->redo, &s->log_batch, 0, why, sizeof why) < 0) {
        return write_beside_log(s, err, errlen);
    }
    if (!durable) {
        if (redo_commit(s->redo, &s->log_batch, NULL, why, sizeof why) != 0) {
            s->log_append_failed = 1; /* nothing appended, nothing held (a segment not pre-written: a full disk) */
            return err_set(err, errlen, "commit log of %s: %s", s->path, why);
        }
        return 0;
    }
    /* Appended, synced and applied in one call: the batch never enters the overlay (design-commitlog.md,
       "Overlay cost"). A failed sync or apply leaves it held, as store_log_make_durable's would. */
    uint64_t before = redo_applied(s->redo), end = 0;
    if (redo_commit_applied(s->redo, &s->log_batch, &end, why, sizeof why) != 0) {
        s->log_append_failed = end == 0; /* end is set once the batch is appended */
        store_break(s, why);
        return err_set(err, errlen, "commit log of %s: %s", s->path, why);
    }
    return after_apply(s, before, err, errlen);
}

uint64_t store_log_unsynced_bytes(const store_t *s)
{
    if (s->redo == NULL) {
        return 0;
    }
    clog_t *c = redo_log(s->redo);
    return clog_end(c) - clog_durable(c);
}

int store_log_sync(store_t *s, char *err, size_t errlen)
{
    char why[512];
    if (clog_sync(redo_log(s->redo), why, sizeof why) != 0) {
        return err_set(err, errlen, "commit log of %s: %s", s->path, why);
    }
    return 0;
}

/* A checkpoint is due once checkpoint_bytes of log were applied since the
 * last one, or a second passed with anything applied since. */
static int checkpoint_due(const store_t *s)
{
    uint64_t since = redo_applied(s->redo) - redo_checkpointed(s->redo);
    uint64_t every = s->opt.checkpoint_bytes != 0 ? s->opt.checkpoint_bytes : STORE_CHECKPOINT_BYTES;
    return since >= every || (since > 0 && clock_mono_ms() - s->checkpoint_mono_ms >= 1000);
}

int store_apply_durable(store_t *s, char *err, size_t errlen)
{
    if (store_usable(s, err, errlen) != 0) {
        return -1;
    }
    if (s->redo == NULL || redo_held(s->redo) == 0) {
        return 0;
    }
    uint64_t before = redo_applied(s->redo);
    char why[512];
    if (redo_apply_durable(s->redo, why, sizeof why) != 0) {
        store_break(s, why);
        return err_set(err, errlen, "applying the commit log of %s: %s", s->path, why);
    }
    return after_apply(s, before, err, errlen);
}

/* What follows an apply that moved redo_applied from applied_before: the
 * key iterator dropped (it would not see the writes) and the checkpoint,
 * with its recycling, when one is due. 0, or -1 with err (the store is then
 * broken). */
static int after_apply(store_t *s, uint64_t applied_before, char *err, size_t errlen)
{
    char why[512];
    if (redo_applied(s->redo) != applied_before && s->key_it != NULL) { /* it would not see what was applied */
        leveldb_iter_destroy(s->key_it);
        s->key_it = NULL;
    }
    if (checkpoint_due(s)) {
        if (redo_checkpoint(s->redo, why, sizeof why) != 0) {
            store_break(s, why);
            return err_set(err, errlen, "checkpoint of the commit log of %s: %s", s->path, why);
        }
        s->checkpoint_mono_ms = clock_mono_ms();
        if (recycle_below_checkpoint(s, why, sizeof why) != 0) {
            store_break(s, why);
            return err_set(err, errlen, "%s", why);
        }
    }
    return 0;
}

int store_log_make_durable(store_t *s, char *err, size_t errlen)
{
    if (s->redo == NULL) {
        return 0;
    }
    if (store_log_unsynced_bytes(s) > 0) {
        char why[512];
        if (store_log_sync(s, why, sizeof why) != 0) {
            store_break(s, why);
            return err_set(err, errlen, "%s", why);
        }
    }
    return store_apply_durable(s, err, errlen);
}
