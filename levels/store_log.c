/*
 * levels/store_log.c — the commit log under the store (docs/design-commitlog.md,
 * "Step 4a: the wiring plan"): store_open opens the log and its redo
 * (levels/clog_redo.h) in the data directory once LevelDB is open and its
 * meta records are checked, and store_close closes them with a clean
 * checkpoint (4a.1). Every commit is a log batch whose LevelDB writes are
 * held until the log's sync covers it, then applied unsynced with the
 * applied mark; checkpoints every STORE_CHECKPOINT_BYTES of applied batches
 * or second, and the segments wholly below one recycled (4a.2); a checkpoint
 * that finds LevelDB's log past STORE_LEVELDB_LOG_FLUSH_BYTES has the memtable
 * written out on the compactor's thread, so an open after a crash replays
 * little of it (s47). A SEND's message is a record of
 * the batch (levels/msg.h's record form, its ordinal counted here per
 * segment) and its id is the record's offset (4a.3).
 *
 * Order: the redo opens after store_check_meta (a directory of another
 * format or level table is refused before the redo writes into it; a new
 * one has its format marker first, since the redo's checkpoint is a LevelDB
 * write) and before store_settle_meta reads the sequence counter and
 * store_load_* the records (the redo rewrites them). The log's floor is the
 * clock's (store_seq_floor: ids are log offsets) or the sequence counter as
 * read before the redo, whichever is higher (every id of a format-5
 * directory is below it). LevelDB's CURRENT exists before any file of the log
 * can be made, so a crash in between never leaves a directory that
 * store_prepare_dir cannot tell from a foreign one.
 *
 * Queues: the redo asks for a queue's bounds when a logged write names it:
 * a level's CQ (queue = the level) has them in its `C` record.
 *
 * Threading: the store's owner thread.
 */
#include "levels/store_internal.h"
#include "levels/clog_derived.h"
#include "base/alloc.h"
#include "base/clock.h"
#include "base/err.h"

#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static void break_log(store_t *s, const char *why);
static int log_failed(const store_t *s, char *err, size_t errlen, const char *before, const char *after,
                      const char *why);

/* The lane CQ's head and tail from its `M` record in LevelDB (the applied state). */
static int lane_bounds(store_t *s, uint64_t *head, uint64_t *tail, char *err, size_t errlen)
{
    key_buf_t k;
    key_meta(&k, STORE_META_LANE);
    char *v, why[512];
    size_t n = 0;
    if (store_get_applied(s, &k, &v, &n, why, sizeof why) < 0) {
        return err_set(err, errlen, "reading the remainder lane's record in %s: %s", s->path, why);
    }
    int bad = store_lane_record_decode(v, n, head, tail);
    leveldb_free(v);
    return bad ? err_set(err, errlen, "corrupt remainder lane record in %s (%zu bytes)", s->path, n) : 0;
}

/* The redo's bounds of a queue (clog_redo.h): a level's CQ head and tail as
 * its `C` record in LevelDB holds them — the state of the batches applied so
 * far, the overlay not asked (at open, before the store's records are
 * loaded; while running, at the apply of the first batch naming the queue,
 * whose writes come after that record's). No record: a new queue, 0 and 0.
 * Queues are the levels 1..count, the remainder lane (its `M` "lane"
 * record) and the topic CQs (their `P` records: topic_cq_bounds). */
static int level_queue_bounds(void *ctx, uint32_t queue, uint64_t *head, uint64_t *tail, char *err, size_t errlen)
{
    store_t *s = ctx;
    *head = *tail = 0;
    if (queue == STORE_LANE_QUEUE) {
        return lane_bounds(s, head, tail, err, errlen);
    }
    if (queue >= STORE_TOPIC_QUEUE_FIRST) {
        return topic_cq_bounds(s, queue, head, tail, err, errlen); /* a topic's CQ (topic_cq.c) */
    }
    if (queue < 1 || queue > (uint32_t)s->opt.levels.count) {
        return err_set(err, errlen, "the commit log in %s names consume queue %" PRIu32 ", which is no level of its %d",
                       s->path, queue, s->opt.levels.count);
    }
    key_buf_t k;
    key_level_record(&k, (int)queue);
    char *v, why[512];
    size_t n = 0;
    if (store_get_applied(s, &k, &v, &n, why, sizeof why) < 0) {
        return err_set(err, errlen, "reading the record of level %" PRIu32 " in %s: %s", queue, s->path, why);
    }
    record_level_t r;
    int bad = v != NULL && record_level_decode(v, n, &r) != 0;
    leveldb_free(v);
    if (bad) {
        return err_set(err, errlen, "corrupt record of level %" PRIu32 " in %s (%zu bytes)", queue, s->path, n);
    }
    if (v != NULL) {
        *head = r.cq_head;
        *tail = r.cq_tail;
    }
    return 0;
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

/* Recycle every segment wholly below the checkpoint B whose live count is 0
 * (design-commitlog.md §5: its LevelDB batches are in LevelDB, synced by the
 * checkpoint; its messages have arrived, whose copies the topic log holds, or
 * were revoked — segcount.c): each becomes a spare the log takes again
 * (clog_recycle), so the log keeps about (log since B) / segment + spares
 * files. Names are read from the directory (a segment's base is in its name);
 * spares are skipped — they lie past the log's end, or below B after a failed
 * sync's carry started the log past them (clog_is_spare). 0, or -1 with err (a
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
            base + size <= b && segcount_live(s, base) == 0 && !clog_is_spare(redo_log(s->redo), base)) {
            below[n++] = base;
        }
    }
    closedir(d);
    char why[512];
    for (size_t i = 0; i < n; i++) { /* a later checkpoint takes any beyond the first 64 */
        if (clog_recycle(redo_log(s->redo), below[i], why, sizeof why) != 0) {
            return log_failed(s, err, errlen, "recycling a commit-log segment of ", "", why);
        }
        if (s->nslot_sweep == s->slot_sweep_cap) {
            s->slot_sweep_cap = s->slot_sweep_cap ? s->slot_sweep_cap * 2 : 64;
            s->slot_sweep = xrealloc(s->slot_sweep, s->slot_sweep_cap * sizeof *s->slot_sweep);
        }
        s->slot_sweep[s->nslot_sweep++] = below[i];
        s->slot_sweep_after = clog_end(redo_log(s->redo));
    }
    return 0;
}

/* The where-slot files of the segments recycled before the checkpoint just
 * finished began (slot_sweep_after at or below its B): closed and deleted
 * (redo_slots_sweep). They were kept until then because the open's redo
 * from an older checkpoint rewrites slots of such a segment (a move before
 * its last message died); nothing writes them after it. They used to stay
 * for good — one file per segment ever filled (24 bytes a message), each
 * held open by the redo. A failed delete is tried again at the next
 * checkpoint, and at the next open (store_log_open sweeps every such file). */
static void sweep_recycled_slots(store_t *s)
{
    if (s->nslot_sweep == 0 || redo_checkpointed(s->redo) < s->slot_sweep_after) {
        return;
    }
    char why[512];
    if (redo_slots_sweep(s->redo, s->slot_sweep, s->nslot_sweep, NULL, why, sizeof why) == 0) {
        s->nslot_sweep = 0;
    }
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
        char *v, why[512];
        size_t n = 0;
        int rc = store_get_applied(s, &k, &v, &n, why, sizeof why);
        if (rc < 0) {
            err_set(err, errlen,
                    "data directory %s is damaged: reading the commit log's %s mark: %s; restore it from a backup "
                    "(docs/operations.md, \"A damaged data directory\")",
                    s->path, marks[i], why);
            return STORE_OPEN_DAMAGED;
        }
        leveldb_free(v);
    }
    return 0;
}

/* The sequence counter as LevelDB holds it before the redo (0: none, or
 * unreadable: the open reads it again after the redo and reports a damaged
 * record there). Every id a format-5 directory handed out is below it. */
static uint64_t counter_before_redo(store_t *s)
{
    key_buf_t k;
    key_meta(&k, "seq");
    char *v, why[512];
    size_t n = 0;
    if (store_get_applied(s, &k, &v, &n, why, sizeof why) <= 0) {
        return 0;
    }
    uint64_t seq = n == 8 ? be64_get(v) : 0;
    leveldb_free(v);
    return seq;
}

/* Where the next message record's ordinal counts from: the log's end lies
 * inside a segment that holds batches (an open within the clock floor's
 * reach of the last one: the floor starts a new segment otherwise), whose
 * messages each have their where-slot, in ordinal order, in its slot file —
 * the redo has just made every batch's slot writes — so the file's length is
 * the count; else a fresh segment, from 0. 0, or -1 with err. */
static int settle_ordinals(store_t *s, char *err, size_t errlen)
{
    clog_t *c = redo_log(s->redo);
    uint64_t end = clog_end(c), size = s->opt.segment_bytes, base = end - end % size;
    s->msg_segment = UINT64_MAX;
    s->msg_ordinal = 0;
    if (end == 0 || end - base <= CLOG_SEGMENT_HEADER) {
        return 0;
    }
    char name[64], path[4200], why[512];
    slot_file_name(base, name, sizeof name);
    snprintf(path, sizeof path, "%s/%s", s->path, name);
    uint64_t n = 0;
    if (access(path, F_OK) == 0) {
        slot_file_t *f = NULL;
        if (slot_file_open(s->path, base, 0, &f, why, sizeof why) != 0) {
            return log_failed(s, err, errlen, "the where-slots of the commit log's last segment in ", "", why);
        }
        n = slot_count(f);
        (void)slot_file_close(f, NULL, 0);
    }
    s->msg_segment = base;
    s->msg_ordinal = (uint32_t)n;
    return 0;
}

int store_log_open(store_t *s, uint64_t floor, char *err, size_t errlen)
{
    int damaged = verify_marks(s, err, errlen);
    if (damaged != 0) {
        return damaged;
    }
    uint64_t counter = counter_before_redo(s); /* a clock set back must not let a new offset meet an old id */
    if (counter > floor) {
        floor = counter;
    }
    s->log_floor = floor;
    s->opt.segment_bytes = segment_bytes_of(s->path, s->opt.segment_bytes);
    redo_options_t o = { .dir = s->path,
                         .segment_bytes = s->opt.segment_bytes,
                         .floor = floor,
                         .db = s->db,
                         .db_dir = s->path,
                         .bounds = level_queue_bounds,
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
        return log_failed(s, err, errlen, "cannot open the commit log of ", "", why);
    }
    s->checkpoint_mono_ms = clock_mono_ms(); /* the open took one */
    if (settle_ordinals(s, why, sizeof why) != 0) {
        return err_set(err, errlen, "%s", why);
    }
    /* The open's checkpoint lies at the log's end: no batch writes the slots of a segment the log no longer has.
       Those recycled since the last checkpoint go here, and the files an older broker left behind (one per
       segment it ever filled: nothing deleted them). */
    uint64_t swept = 0;
    if (redo_slots_sweep(s->redo, NULL, 0, &swept, why, sizeof why) != 0) {
        return log_failed(s, err, errlen, "deleting the where-slots of recycled segments of ", "", why);
    }
    if (swept > 0) {
        size_t n = strlen(s->open_note);
        snprintf(s->open_note + n, sizeof s->open_note - n,
                 "%sdeleted %" PRIu64 " where-slot file%s of recycled commit-log segments", n > 0 ? "; " : "", swept,
                 swept == 1 ? "" : "s");
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
        return log_failed(s, err, errlen, "checkpoint of the commit log of ", " after a failed append", why);
    }
    return store_log_close(s, err, errlen);
}

int store_log_sync_failed(store_t *s, char *err, size_t errlen)
{
    redo_failure_t f;
    char why[512];
    if (redo_sync_failed(s->redo, &f, why, sizeof why) != 0) {
        return log_failed(s, err, errlen, "commit log of ", " after a failed sync", why);
    }
    return 0;
}

int store_log_sync_has_failed(store_t *s)
{
    return s->redo != NULL && clog_sync_failed(redo_log(s->redo));
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
        return log_failed(s, err, errlen, "closing the commit log of ", "", why);
    }
    /* Its checkpoint at the log's end covers every segment recycled: their slot files go now (closed with the
       redo), so a clean close leaves none for the next open to find. A failed delete is the next open's. */
    for (size_t i = 0; i < s->nslot_sweep; i++) {
        (void)slot_file_remove(s->path, s->slot_sweep[i], NULL, 0);
    }
    s->nslot_sweep = 0;
    topic_cq_sweep_closed(s);
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
        break_log(s, why);
        return log_failed(s, err, errlen, "checkpoint of the commit log of ", "", why);
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
        break_log(s, why);
        return log_failed(s, err, errlen, "checkpoint of the commit log of ", "", why);
    }
    s->checkpoint_mono_ms = clock_mono_ms();
    return 0;
}

static int after_apply(store_t *s, uint64_t applied_before, char *err, size_t errlen);

/* The log refused an append (a commit's batch, or the segment a message
 * record needs) and wrote nothing: noted for the close
 * (s->log_append_failed) with the errno of the write that failed, for
 * store_log_write_errno. */
static void note_refused_append(store_t *s)
{
    s->log_append_failed = 1;
    s->log_write_errno = clog_write_errno(redo_log(s->redo));
}

int store_log_write_errno(const store_t *s)
{
    return s->broken && s->log_append_failed ? s->log_write_errno : 0;
}

int store_log_failure_full(const store_t *s, const char *why)
{
    return (s->log_append_failed && store_failure_errno_full(s->log_write_errno)) || store_failure_text_full(why);
}

/* The store breaks at a failure of its log (why): a full disk's when the
 * refused write's errno, or the failure's text, says no room
 * (store_last_failure_full, which the writer asks). */
static void break_log(store_t *s, const char *why)
{
    char shown[512];
    store_failure_text(why, s->path, shown, sizeof shown); /* a long directory shortened: the cause kept */
    store_break_as(s, store_log_failure_full(s, why), shown);
}

/* err = "<before><the directory, shortened><after>: <why, its paths
 * shortened>": a failure of the log named so that its cause survives a long
 * data directory (levels/store_failure.c). -1. */
static int log_failed(const store_t *s, char *err, size_t errlen, const char *before, const char *after,
                      const char *why)
{
    char shown[512];
    store_failure_text(why, s->path, shown, sizeof shown);
    return err_set(err, errlen, "%s%s%s: %s", before, s->path_shown, after, shown);
}

int store_log_append(store_t *s, int durable, char *err, size_t errlen)
{
    char why[512];
    if (s->log_batch.messages == 0 && redo_batch_room(s->redo, &s->log_batch, 0, why, sizeof why) < 0) {
        return write_beside_log(s, err, errlen);
    }
    if (!durable) {
        if (redo_commit(s->redo, &s->log_batch, NULL, why, sizeof why) != 0) {
            note_refused_append(s); /* nothing appended, nothing held (a segment not pre-written: a full disk) */
            return log_failed(s, err, errlen, "commit log of ", "", why);
        }
        return 0;
    }
    /* Appended, synced and applied in one call: the batch never enters the overlay (design-commitlog.md,
       "Overlay cost"). A failed sync or apply leaves it held, as store_log_make_durable's would. */
    uint64_t before = redo_applied(s->redo), end = 0;
    if (redo_commit_applied(s->redo, &s->log_batch, &end, why, sizeof why) != 0) {
        if (end == 0) { /* end is set once the batch is appended */
            note_refused_append(s);
        }
        break_log(s, why);
        return log_failed(s, err, errlen, "commit log of ", "", why);
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
        int e = errno; /* the fdatasync's: the contract passes it on */
        log_failed(s, err, errlen, "commit log of ", "", why);
        errno = e;
        return -1;
    }
    return 0;
}

int store_log_prepare_step(store_t *s, unsigned pace_ms, char *err, size_t errlen)
{
    if (s->redo == NULL || s->broken) {
        return 0;
    }
    char why[512];
    int rc = clog_prepare_step(redo_log(s->redo), pace_ms, why, sizeof why);
    if (rc < 0) {
        return log_failed(s, err, errlen, "pre-writing a spare segment of the commit log of ", "", why);
    }
    return rc;
}

_Static_assert(STORE_PREPARE_HOLD == CLOG_PREPARE_HOLD, "the store's hold is the log's");

uint64_t store_log_prepare_left(const store_t *s)
{
    return s->redo == NULL || s->broken ? 0 : clog_prepare_left(redo_log(s->redo));
}

uint64_t store_log_segment_room(const store_t *s)
{
    if (s->redo == NULL) {
        return UINT64_MAX;
    }
    uint64_t end = clog_end(redo_log(s->redo)), size = s->opt.segment_bytes;
    return size - end % size;
}

/* The applied log that makes a checkpoint due: checkpoint_bytes, half of it
 * when checkpoints run on the log's thread — one begins then, and the owner
 * waits for it before another half has been applied (after_apply), so that
 * the log since the last finished checkpoint, what an open redoes and the
 * disk reserve must hold, stays within checkpoint_bytes and the two applies
 * that crossed the halves (on the owner: checkpoint_bytes and one apply). */
static uint64_t checkpoint_every(const store_t *s)
{
    uint64_t every = s->opt.checkpoint_bytes != 0 ? s->opt.checkpoint_bytes : STORE_CHECKPOINT_BYTES;
    return s->opt.checkpoint_on_thread ? every / 2 : every;
}

/* A checkpoint is due once checkpoint_every of log were applied since the
 * last one began, or a second passed with anything applied since. The bytes are the
 * applied batches' own (redo_applied_since_checkpoint), not the distance from
 * B to redo_applied: an open's floor raises the next batch's offset by the
 * clock's time since the last (1 MiB a millisecond, store.h), and counted as
 * applied that jump made the first apply after every reopen a checkpoint. */
static int checkpoint_due(const store_t *s)
{
    uint64_t since = redo_applied_since_checkpoint(s->redo);
    return since >= checkpoint_every(s) || (since > 0 && clock_mono_ms() - s->checkpoint_mono_ms >= 1000);
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
        break_log(s, why);
        return log_failed(s, err, errlen, "applying the commit log of ", "", why);
    }
    return after_apply(s, before, err, errlen);
}

/* After a checkpoint: when LevelDB's write-ahead log has grown past
 * STORE_LEVELDB_LOG_FLUSH_BYTES, its memtable is written out on the
 * compactor's thread (compactor_flush_memtable), which starts an empty log.
 * The memtable (write-buffer-size, 64 MiB) rarely fills now that LevelDB gets
 * ~0.3 records a message, so its log held everything since the open, and an
 * open after a kill -9 replayed all of it and wrote it out before answering
 * (DESIGN §6, "Restart"). */
static void flush_long_leveldb_log(store_t *s)
{
    if (redo_leveldb_log_bytes(s->redo) > STORE_LEVELDB_LOG_FLUSH_BYTES) {
        (void)compactor_flush_memtable(s->compactor); /* 0: one already waits */
    }
}

/* What follows a finished checkpoint, on the owner: the where-slot files of
 * the segments recycled before it deleted, so are the CQ files of topics
 * deleted before it, the segments wholly below it
 * recycled, a long LevelDB log written out. 0, or -1 with err (the store is
 * then broken). */
static int after_checkpoint(store_t *s, char *err, size_t errlen)
{
    char why[512];
    sweep_recycled_slots(s);
    topic_cq_sweep_retired(s);
    if (recycle_below_checkpoint(s, why, sizeof why) != 0) {
        break_log(s, why);
        return err_set(err, errlen, "%s", why);
    }
    flush_long_leveldb_log(s);
    return 0;
}

/* A checkpoint finished on the redo's thread (store_options_t.checkpoint_on_thread):
 * its outcome taken (with wait, after waiting for it) and what follows it
 * made. 0 (also while it runs), or -1 with err (it failed: the store is then
 * broken). */
static int settle_checkpoint(store_t *s, int wait, char *err, size_t errlen)
{
    char why[512];
    int rc = redo_checkpoint_settle(s->redo, wait, why, sizeof why);
    if (rc < 0) {
        break_log(s, why);
        return log_failed(s, err, errlen, "checkpoint of the commit log of ", "", why);
    }
    return rc > 0 ? after_checkpoint(s, err, errlen) : 0;
}

/* What follows an apply that moved redo_applied from applied_before: the
 * key iterator dropped (it would not see the writes) and the checkpoint,
 * with its recycling and a long LevelDB log's write-out, when one is due —
 * on the redo's thread with checkpoint_on_thread, one at a time: a due one
 * begins once the last is settled, and the owner waits for the last when
 * checkpoint_every was applied since it began (the bound above). 0, or -1
 * with err (the store is then broken). */
static int after_apply(store_t *s, uint64_t applied_before, char *err, size_t errlen)
{
    char why[512];
    if (redo_applied(s->redo) != applied_before && s->key_it != NULL) { /* it would not see what was applied */
        leveldb_iter_destroy(s->key_it);
        s->key_it = NULL;
    }
    int behind = redo_applied_since_checkpoint(s->redo) >= checkpoint_every(s);
    if (settle_checkpoint(s, behind, err, errlen) != 0) {
        return -1;
    }
    if (!checkpoint_due(s) || redo_checkpoint_running(s->redo)) { /* running: due by its second */
        return 0;
    }
    int rc = s->opt.checkpoint_on_thread ? redo_checkpoint_async(s->redo, why, sizeof why)
                                         : redo_checkpoint(s->redo, why, sizeof why);
    if (rc != 0) {
        break_log(s, why);
        return log_failed(s, err, errlen, "checkpoint of the commit log of ", "", why);
    }
    s->checkpoint_mono_ms = clock_mono_ms();
    return s->opt.checkpoint_on_thread ? 0 : after_checkpoint(s, err, errlen);
}

int store_log_checkpoint_step(store_t *s, char *err, size_t errlen)
{
    if (s->redo == NULL || s->broken) {
        return 0;
    }
    return settle_checkpoint(s, 0, err, errlen);
}

uint64_t store_log_since_checkpoint(const store_t *s)
{
    return s->redo == NULL ? 0 : redo_applied_since_finished(s->redo);
}

int store_log_checkpoint_running(const store_t *s)
{
    return s->redo != NULL && !s->broken && redo_checkpoint_running(s->redo);
}

int store_log_make_durable(store_t *s, char *err, size_t errlen)
{
    if (s->redo == NULL) {
        return 0;
    }
    if (store_log_unsynced_bytes(s) > 0) {
        char why[512];
        if (store_log_sync(s, why, sizeof why) != 0) {
            break_log(s, why);
            return err_set(err, errlen, "%s", why);
        }
    }
    return store_apply_durable(s, err, errlen);
}

/* ---- messages in the log (4a.3) -------------------------------------------------------- */

/* What a batch holding a message keeps free in its segment besides that
 * message: the dirty records a commit writes and one operation's overshoot of
 * STORE_BATCH_MAX_BYTES. */
#define STORE_LOG_BATCH_MARGIN (UINT64_C(64) << 10)

/* What a batch that holds messages keeps free in its segment besides them,
 * with batch_bytes already in the batch, in segments of segment_bytes: the
 * rest of a batch of STORE_BATCH_MAX_BYTES (the writer and the long
 * operations cut their batches there, store.h; once the batch holds a message
 * it cannot move to another segment, and what later operations add to it asks
 * for no room) and STORE_LOG_BATCH_MARGIN, at most a quarter of a segment. */
static uint64_t batch_rest(uint64_t segment_bytes, uint64_t batch_bytes)
{
    uint64_t rest = STORE_BATCH_MAX_BYTES > batch_bytes ? STORE_BATCH_MAX_BYTES - batch_bytes : 0;
    rest += STORE_LOG_BATCH_MARGIN;
    return rest > segment_bytes / 4 ? segment_bytes / 4 : rest;
}

/* The bytes a message record of `record` bytes and its derived writes take
 * in a batch (without the batch's rest). */
static uint64_t message_bytes(size_t record, uint64_t derived_bytes)
{
    return CLOG_RECORD_HEADER + record + 8 + REDO_MESSAGE_RESERVE + derived_bytes;
}

static uint64_t message_room(const store_t *s, size_t record, uint64_t derived_bytes)
{
    return message_bytes(record, derived_bytes) + batch_rest(s->opt.segment_bytes, s->batch_bytes);
}

/* The bytes of a segment of segment_bytes that `bytes` of messages ask for in
 * an empty batch: theirs and the batch's rest, with the batch's reserves. */
static uint64_t segment_need(uint64_t segment_bytes, uint64_t bytes)
{
    return redo_batch_segment_bytes(bytes + batch_rest(segment_bytes, 0));
}

/* The message bytes (message_bytes) of a SEND of a payload of `payload` bytes
 * with the longest topic and key. */
static uint64_t largest_send_bytes(uint64_t payload)
{
    msg_t m;
    memset(&m, 0, sizeof m);
    m.topic.len = MSG_MAX_NAME;
    m.key.len = MSG_MAX_KEY;
    m.payload.len = (uint32_t)payload;
    return message_bytes(msg_record_size(&m), store_send_derived_bytes(&m));
}

/* The largest payload a SEND (longest topic and key) can have in segments of
 * segment_bytes: 0 when none fits. */
static uint32_t store_segment_max_payload(uint64_t segment_bytes)
{
    uint64_t lo = 0, hi = (uint64_t)MSG_HARD_MAX_PAYLOAD + 1;
    if (segment_need(segment_bytes, largest_send_bytes(0)) > segment_bytes) {
        return 0;
    }
    while (hi - lo > 1) { /* the need grows with the payload: the largest payload that fits */
        uint64_t mid = lo + (hi - lo) / 2;
        if (segment_need(segment_bytes, largest_send_bytes(mid)) <= segment_bytes) {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    return (uint32_t)lo;
}

/* The smallest segment size (a multiple of 4096) whose empty batch holds
 * `bytes` of messages: 0 when no segment size does. */
static uint64_t least_segment_bytes(uint64_t bytes)
{
    uint64_t lo = CLOG_SEGMENT_MIN / 4096, hi = CLOG_SEGMENT_MAX / 4096; /* in 4 KiB pages */
    if (segment_need(hi * 4096, bytes) > hi * 4096) {
        return 0;
    }
    while (lo < hi) { /* the room left grows with the segment: the smallest that fits */
        uint64_t mid = lo + (hi - lo) / 2;
        if (segment_need(mid * 4096, bytes) <= mid * 4096) {
            hi = mid;
        } else {
            lo = mid + 1;
        }
    }
    return lo * 4096;
}

/* The smallest segment size whose segments take a SEND of a payload of
 * `payload` bytes: 0 when no segment size does. */
static uint64_t store_payload_min_segment_bytes(uint32_t payload)
{
    return least_segment_bytes(largest_send_bytes(payload));
}

int store_check_payload_room(uint64_t segment_bytes, uint32_t max_payload, char *err, size_t errlen)
{
    uint64_t need = segment_need(segment_bytes, largest_send_bytes(max_payload));
    if (need <= segment_bytes) {
        return 0;
    }
    return err_set(err, errlen,
                   "a message of %" PRIu32 " bytes needs %" PRIu64 " bytes of one segment (its record, its level "
                   "entry's copy, the rest of its batch: twice the payload and a quarter segment); segments of %" PRIu64
                   " bytes take at most %" PRIu32 ": set commitlog-segment-size to at least %" PRIu64
                   " or max-payload to at most %" PRIu32,
                   max_payload, need, segment_bytes, store_segment_max_payload(segment_bytes),
                   store_payload_min_segment_bytes(max_payload), store_segment_max_payload(segment_bytes));
}

/* Settle the pending batch's segment for a record of `record` bytes: 0, or -1
 * with err. A full batch is committed (unsynced) first, once. A message no
 * segment holds is refused first, naming the segment size and what to set:
 * nothing is written and the store stays usable. */
static int settle_message_segment(store_t *s, size_t record, uint64_t derived_bytes, char *err, size_t errlen)
{
    uint64_t alone = segment_need(s->opt.segment_bytes, message_bytes(record, derived_bytes));
    if (alone > s->opt.segment_bytes) {
        return err_set(err, errlen,
                       "message of %zu bytes refused: it needs %" PRIu64
                       " bytes of one commit-log segment (its record, its level entry's copy and the rest of its "
                       "batch) and the segments of %s are %" PRIu64 " bytes, which take payloads of at most %" PRIu32
                       " bytes (set max-payload to at most that, or commitlog-segment-size to at least %" PRIu64
                       " for a new data directory)",
                       record, alone, s->path, s->opt.segment_bytes, store_segment_max_payload(s->opt.segment_bytes),
                       store_payload_min_segment_bytes(s->opt.max_payload));
    }
    char why[512];
    for (int tries = 0;; tries++) {
        int rc = redo_batch_room(s->redo, &s->log_batch, message_room(s, record, derived_bytes), why, sizeof why);
        if (rc == 0) {
            rc = redo_message_room(s->redo, &s->log_batch, record, why, sizeof why);
        }
        if (rc == 0) {
            return 0;
        }
        if (rc != REDO_BATCH_FULL || tries > 0) {
            return err_set(err, errlen, "message of %zu bytes in the commit log of %s: %s", record, s->path,
                           rc == REDO_BATCH_FULL ? "a batch of its own has no room for it" : why);
        }
        if (store_commit_durable(s, 0, err, errlen) != 0) {
            return -1;
        }
    }
}

uint64_t store_send_run_bytes(const store_send_req_t *req)
{
    msg_t m;
    memset(&m, 0, sizeof m);
    m.dest = MSG_DEST_TOPIC;
    m.topic.len = (uint32_t)req->topic_len;
    m.key.len = (uint32_t)req->key_len;
    m.payload.len = (uint32_t)req->payload_len;
    /* and its CQ write and slot once more: each message already in the batch is kept that reserve again by every
       later room asked (redo_batch_room), so the run's last SEND asks no more than the run's room left for it */
    return message_bytes(msg_record_size(&m), store_send_derived_bytes(&m)) + REDO_MESSAGE_RESERVE;
}

int store_log_run_room(store_t *s, uint64_t run_bytes, char *err, size_t errlen)
{
    if (s->redo == NULL || run_bytes == 0) {
        return 0;
    }
    uint64_t size = s->opt.segment_bytes, alone = segment_need(size, run_bytes);
    if (alone > size) {
        uint64_t least = least_segment_bytes(run_bytes);
        char set[160] = "";
        if (least != 0) {
            snprintf(set, sizeof set,
                     ", or set commitlog-segment-size to at least %" PRIu64 " for a new data directory", least);
        }
        return err_set(err, errlen,
                       "a run of SENDs stored all or none needs %" PRIu64
                       " bytes of one commit-log segment (their records, their level entries' copies and the rest of "
                       "their batch) and the segments of %s are %" PRIu64 " bytes: send it as smaller transactions%s",
                       alone, s->path, size, set);
    }
    char why[512];
    for (int tries = 0;; tries++) {
        int rc = redo_batch_room(s->redo, &s->log_batch, run_bytes + batch_rest(size, s->batch_bytes), why, sizeof why);
        if (rc == 0) {
            return 0;
        }
        if (rc != REDO_BATCH_FULL || tries > 0) {
            return err_set(err, errlen, "a run of SENDs of %" PRIu64 " bytes in the commit log of %s: %s", run_bytes,
                           s->path, rc == REDO_BATCH_FULL ? "a batch of its own has no room for it" : why);
        }
        if (store_commit_durable(s, 0, err, errlen) != 0) { /* the SENDs pending before the run: the run starts anew */
            return -1;
        }
    }
}

int store_log_add_message(store_t *s, msg_t *m, uint64_t derived_bytes, uint32_t *ordinal, char *err, size_t errlen)
{
    size_t n = msg_record_size(m);
    if (settle_message_segment(s, n, derived_bytes, err, errlen) != 0) {
        return -1;
    }
    uint64_t base = s->log_batch.log.limit - s->opt.segment_bytes;
    if (base != s->msg_segment) {
        s->msg_segment = base;
        s->msg_ordinal = 0;
    }
    char small[512];
    char *buf = n <= sizeof small ? small : xmalloc(n);
    msg_encode_record(m, s->msg_ordinal, buf, n);
    uint64_t offset = 0;
    char why[512];
    int rc = redo_add_message(s->redo, &s->log_batch, buf, n, &offset, why, sizeof why);
    if (buf != small) {
        free(buf);
    }
    if (rc != 0 && rc != REDO_BATCH_FULL) {
        /* The segment the record needs could not be made (pre-written, renamed, synced): on a full disk the
           log's first write to fail. Nothing was appended, so the store breaks as at a refused append of a
           commit (store_log_append): its close closes the log clean, and the writer takes the break for a
           full disk as it takes a commit's. */
        char why_shown[512];
        char msg[sizeof why_shown + STORE_PATH_SHOWN_MAX + 96]; /* the cause whole, beside the shown path */
        store_failure_text(why, s->path, why_shown, sizeof why_shown);
        snprintf(msg, sizeof msg, "message of %zu bytes in the commit log of %s: %s", n, s->path_shown, why_shown);
        note_refused_append(s);
        break_log(s, msg);
        return err_set(err, errlen, "%s", msg);
    }
    if (rc != 0 || offset < base || offset >= base + s->opt.segment_bytes) {
        return err_set(err, errlen, "message of %zu bytes in the commit log of %s: %s", n, s->path,
                       rc != 0 ? "the batch's segment had no room after it was settled"
                               : "the record left the segment its ordinal was counted in");
    }
    *ordinal = s->msg_ordinal++;
    m->id = offset;
    return 0;
}

/* Derived-record bytes of a CQ write and of a slot write (clog_redo.h), counted
 * in the batch's size so that the room kept for it covers them. */
#define CQ_WRITE_BYTES   29
#define SLOT_WRITE_BYTES 41
#define CQ_HEAD_BYTES    13

void store_log_cq_append(store_t *s, uint32_t queue, uint64_t index, uint64_t offset, uint64_t due)
{
    cq_entry_t e = { offset, due };
    redo_cq_write(&s->log_batch, queue, index, &e);
    s->batch_bytes += CQ_WRITE_BYTES;
}

void store_log_slot(store_t *s, uint64_t offset, const idx_journey_t *j, uint32_t flags)
{
    slot_t sl = { offset, j->queue, flags, j->cq_index };
    redo_slot_write(&s->log_batch, offset - offset % s->opt.segment_bytes, j->ordinal, &sl);
    s->batch_bytes += SLOT_WRITE_BYTES;
}

void store_log_cq_head(store_t *s, uint32_t queue, uint64_t head)
{
    redo_cq_head(&s->log_batch, queue, head);
    s->batch_bytes += CQ_HEAD_BYTES;
}

int store_log_slot_get(store_t *s, uint64_t id, uint32_t ordinal, slot_t *sl, int *gone, char *err, size_t errlen)
{
    char why[512];
    if (ordinal == UINT32_MAX) {
        clog_reader_t rd = { 0 };
        clog_record_t r;
        int rc = clog_read(redo_log(s->redo), id, &rd, &r, why, sizeof why);
        if (rc == 0) {
            rc = msg_record_ordinal(r.data, r.len, &ordinal, why, sizeof why);
        }
        clog_reader_free(&rd);
        if (rc == CLOG_NOT_RECORD && gone != NULL) {
            *gone = 1;
            return 0;
        }
        if (rc != 0) {
            return err_set(err, errlen, "the record of %016" PRIx64 ": %s", id,
                           rc == CLOG_NOT_RECORD ? "not in the commit log" : why);
        }
    }
    slot_file_t *f = NULL;
    int rc = slot_file_open(s->path, id - id % s->opt.segment_bytes, 0, &f, why, sizeof why);
    if (rc == 0) {
        rc = slot_count(f) > ordinal
                 ? slot_get(f, ordinal, sl, why, sizeof why)
                 : err_set(why, sizeof why, "slot %" PRIu32 " past the file's %" PRIu64, ordinal, slot_count(f));
    }
    (void)slot_file_close(f, NULL, 0);
    return rc != 0 ? err_set(err, errlen, "the where-slot of %016" PRIx64 ": %s", id, why) : 0;
}

int store_slot_run_get(store_t *s, slot_run_t *run, uint64_t base, uint64_t ordinal, slot_t *sl, char *err,
                       size_t errlen)
{
    if (run->base != base || ordinal < run->at || ordinal >= run->at + run->n) {
        char why[512];
        size_t got = 0;
        if (redo_slot_read(s->redo, base, ordinal, STORE_SLOT_RUN, run->slots, &got, why, sizeof why) != 0) {
            run->n = 0;
            return err_set(err, errlen, "the where-slots of commit-log segment %016" PRIx64 " in %s: %s", base, s->path,
                           why);
        }
        run->base = base;
        run->at = ordinal;
        run->n = got;
    }
    *sl = run->slots[ordinal - run->at];
    return 0;
}

int store_log_recycle(store_t *s, char *err, size_t errlen)
{
    return recycle_below_checkpoint(s, err, errlen);
}

uint64_t store_log_next_id(const store_t *s)
{
    const clog_batch_t *b = &s->log_batch.log;
    uint64_t next = s->log_batch.messages > 0 ? b->first + b->len : clog_end(redo_log(s->redo));
    return next > s->log_floor ? next : s->log_floor;
}
