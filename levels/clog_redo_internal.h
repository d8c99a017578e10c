/*
 * levels/clog_redo_internal.h — what the redo's files share (clog_redo.c: the
 * batch protocol while running; clog_redo_files.c: the CQ and slot files a
 * batch is applied to by position; clog_checkpoint.c: checkpoints;
 * clog_redo_open.c: the open, its redo and the close). Private to levels/;
 * contracts of the functions named here are in levels/clog_redo.h. Owner
 * thread unless a function says otherwise.
 */
#ifndef HG_LEVELS_CLOG_REDO_INTERNAL_H
#define HG_LEVELS_CLOG_REDO_INTERNAL_H

#include "levels/clog_derived.h"
#include "levels/clog_finisher.h"
#include "levels/clog_redo.h"
#include "levels/fixfile.h"
#include "levels/keys.h"
#include "levels/logsync.h"

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

typedef struct open_queue {
    uint32_t queue;
    cq_t *q;
    int dirty;           /* written since the last checkpoint */
    uint64_t release_to; /* its head when the last checkpoint began: the files below go once it is finished */
} open_queue_t;

typedef struct open_slots {
    uint64_t base;
    slot_file_t *f;
    int dirty;
} open_slots_t;

typedef struct held {
    uint64_t start, end; /* the batch's first offset and its end in the log */
    char *rec;           /* its derived-writes record */
    size_t len;
    derived_op_t *ops; /* rec decoded once, for the overlay and the apply (keys and values point into rec) */
    size_t nops, ops_cap;
    int ops_whole;  /* rec decoded whole: the apply makes ops; else it applies rec, which reports the damage */
    int in_overlay; /* 0 only inside redo_commit_applied, until its sync and apply succeed */
} held_t;

#define REDO_SPARE_OPS 8 /* applied batches' op arrays kept for the next batches held */

typedef struct spare_ops {
    derived_op_t *ops;
    size_t cap;
} spare_ops_t;

struct redo {
    char *dir;
    clog_t *log;
    leveldb_t *db;
    logsync_t *dbsync;
    leveldb_writeoptions_t *wo_nosync; /* every LevelDB write: the checkpoint's are made durable by logsync */
    leveldb_readoptions_t *ro;
    redo_bounds_fn bounds;
    void *bounds_ctx;
    open_queue_t *queues;
    size_t nqueues, qcap;
    open_slots_t *slots;
    size_t nslots, scap;
    held_t *held;            /* a FIFO: [hfirst, nheld) */
    clog_overlay_t *overlay; /* what the held batches write, for point reads */
    size_t hfirst, nheld, hcap;
    spare_ops_t spare[REDO_SPARE_OPS]; /* applied batches' op arrays, a stack [0, nspare) hold() takes from */
    size_t nspare;
    uint64_t applied;
    uint64_t applied_since;      /* bytes of the held batches applied since the last checkpoint began */
    _Atomic uint64_t checkpoint; /* the last finished checkpoint's B (read by the owner, set by the finish) */
    redo_open_report_t *counts;  /* the open's report while redoing, else NULL */
    /* the checkpoint begun and not finished: written by redo_checkpoint_begin before `open` is set, read by
       the finish, which clears `open` last; the owner leaves them alone meanwhile */
    struct {
        _Atomic int open;
        uint64_t b;
        uint64_t covered; /* bytes applied between the last begun B and this one (applied_since at the begin) */
        int clean, raise_applied;
        fixfile_syncset_t files; /* the CQ and slot files written since the last checkpoint, duplicated */
    } ckpt;
    _Atomic int resync_all;    /* a checkpoint failed after its files were handed over: the next one syncs every file */
    clog_finisher_t *finisher; /* redo_checkpoint_async's thread, made at its first call */
    clog_finisher_done_fn finished_hook; /* redo_on_checkpoint_finished's, handed to the finisher */
    void *finished_arg;
};

/* The LevelDB key of the redo's mark `M "name"` (applied, checkpoint, clean). */
static inline key_buf_t redo_mark_key(const char *name)
{
    key_buf_t k;
    key_meta(&k, name);
    return k;
}

/* clog_redo_files.c: make the derived writes of the batch ending at `end`:
 * CQ, head and slot writes by position in order, then one LevelDB write of
 * its puts and deletes with `M "applied"` = end, unsynced. 0, REDO_DAMAGED,
 * or -1 with err. */
int redo_apply_record(redo_t *r, uint64_t end, const char *p, size_t n, char *err, size_t errlen);

/* clog_redo_files.c: redo_apply_record of a record decoded whole into
 * ops[0..n) (derived_decode): the same writes, made the same way, without
 * decoding it again. 0, or -1 with err. */
int redo_apply_ops(redo_t *r, uint64_t end, const derived_op_t *ops, size_t n, char *err, size_t errlen);

/* clog_checkpoint.c: a checkpoint being finished on the finisher's thread is
 * waited for, one begun and not finished is finished here; the CQ files
 * below the heads it covers go. 0, or -1 with err when that finish failed. */
int redo_finish_open_checkpoint(redo_t *r, char *err, size_t errlen);

/* clog_checkpoint.c: a whole checkpoint on the owner thread at B = b (begin,
 * then finish and release); with clean, `M "clean"` = B. 0, or -1 with err. */
int redo_checkpoint_at(redo_t *r, uint64_t b, int clean, char *err, size_t errlen);

#endif
