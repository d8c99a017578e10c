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
 * This file opens and closes the log under the store. The commit path is
 * store_log_commit.c, checkpoints and what follows one store_checkpoint.c,
 * messages in the log (their room, ids and where-slots) store_log_message.c.
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
            return store_log_failed(s, err, errlen, "the where-slots of the commit log's last segment in ", "", why);
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
        return store_log_failed(s, err, errlen, "cannot open the commit log of ", "", why);
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
        return store_log_failed(s, err, errlen, "deleting the where-slots of recycled segments of ", "", why);
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
        return store_log_failed(s, err, errlen, "checkpoint of the commit log of ", " after a failed append", why);
    }
    return store_log_close(s, err, errlen);
}

int store_log_sync_failed(store_t *s, char *err, size_t errlen)
{
    redo_failure_t f;
    char why[512];
    if (redo_sync_failed(s->redo, &f, why, sizeof why) != 0) {
        return store_log_failed(s, err, errlen, "commit log of ", " after a failed sync", why);
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
        return store_log_failed(s, err, errlen, "closing the commit log of ", "", why);
    }
    /* Its checkpoint at the log's end covers every segment recycled and every topic deleted: their files go now
       (closed with the redo), so a clean close leaves none for the next open to find. */
    store_deferred_sweep_closed(s);
    return 0;
}
