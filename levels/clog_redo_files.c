/*
 * levels/clog_redo_files.c — the CQ and slot files the redo holds open
 * (contracts in levels/clog_redo.h): a batch's derived-writes record applied
 * to them by position (and its LevelDB writes with the applied mark), their
 * reads with the held writes laid over them (4a.4), and the files of a
 * recycled segment or a deleted queue closed and removed. A file is opened at
 * the first write or read that names it and stays open until the redo closes
 * or the file is removed. Owner thread.
 */
#define _GNU_SOURCE
#include "levels/clog_redo_internal.h"
#include "base/alloc.h"
#include "base/err.h"
#include "levels/clog_derived.h"
#include "levels/clog_overlay.h"

#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* ---- the derived files --------------------------------------------------------------- */

static open_queue_t *queue_get(redo_t *r, uint32_t queue, char *err, size_t errlen)
{
    for (size_t i = 0; i < r->nqueues; i++) {
        if (r->queues[i].queue == queue) {
            return &r->queues[i];
        }
    }
    uint64_t head = 0, tail = 0;
    if (r->bounds == NULL) {
        err_set(err, errlen, "commit log redo: CQ %" PRIu32 " is written but no bounds callback was given", queue);
        return NULL;
    }
    if (r->bounds(r->bounds_ctx, queue, &head, &tail, err, errlen) != 0) {
        return NULL;
    }
    cq_t *q;
    if (cq_open(r->dir, queue, head, tail, &q, err, errlen) != 0) {
        return NULL;
    }
    if (r->nqueues == r->qcap) {
        r->qcap = r->qcap ? r->qcap * 2 : 16;
        r->queues = xrealloc(r->queues, r->qcap * sizeof *r->queues);
    }
    r->queues[r->nqueues] = (open_queue_t){ queue, q, 0, 0 };
    return &r->queues[r->nqueues++];
}

/* The slot file of segment base: the one held open, else opened when it
 * exists, else made (make) or, not make, NULL with *missing set. A last slot
 * torn by a power cut was written after the last checkpoint (which syncs
 * every slot file), so by a batch the redo rewrites: it is cut off before
 * the open. NULL with err on a failed cut or open. */
static open_slots_t *slots_at(redo_t *r, uint64_t base, int make, int *missing, char *err, size_t errlen)
{
    *missing = 0;
    for (size_t i = 0; i < r->nslots; i++) {
        if (r->slots[i].base == base) {
            return &r->slots[i];
        }
    }
    char name[64], path[PATH_MAX];
    slot_file_name(base, name, sizeof name);
    snprintf(path, sizeof path, "%s/%s", r->dir, name);
    struct stat st;
    int exists = stat(path, &st) == 0;
    if (!exists && !make) {
        *missing = 1;
        return NULL;
    }
    if (exists && st.st_size % SLOT_BYTES != 0 && truncate(path, st.st_size - st.st_size % SLOT_BYTES) != 0) {
        err_set(err, errlen, "%s: cannot cut its torn last slot: %s", path, strerror(errno));
        return NULL;
    }
    slot_file_t *f;
    if (slot_file_open(r->dir, base, !exists, &f, err, errlen) != 0) {
        return NULL;
    }
    if (r->nslots == r->scap) {
        r->scap = r->scap ? r->scap * 2 : 16;
        r->slots = xrealloc(r->slots, r->scap * sizeof *r->slots);
    }
    r->slots[r->nslots] = (open_slots_t){ base, f, 0 };
    return &r->slots[r->nslots++];
}

/* The slot file of segment base, opened or made (slots_at). */
static open_slots_t *slots_get(redo_t *r, uint64_t base, char *err, size_t errlen)
{
    int missing;
    return slots_at(r, base, 1, &missing, err, errlen);
}

static inline __attribute__((always_inline)) int apply_cq(redo_t *r, uint32_t queue, uint64_t index,
                                                          const cq_entry_t *e, char *err, size_t errlen)
{
    open_queue_t *oq = queue_get(r, queue, err, errlen);
    if (oq == NULL) {
        return -1;
    }
    oq->dirty = 1;
    if (index < cq_head(oq->q)) {
        return 0; /* consumed since: a later batch moved the head past it */
    }
    if (index < cq_tail(oq->q)) {
        return cq_rewrite(oq->q, index, e, err, errlen);
    }
    if (index == cq_tail(oq->q)) {
        return cq_append(oq->q, e, NULL, err, errlen);
    }
    return err_set(err, errlen, "commit log redo: CQ %" PRIu32 " index %" PRIu64 " lies past its tail %" PRIu64, queue,
                   index, cq_tail(oq->q));
}

static inline __attribute__((always_inline)) int apply_head(redo_t *r, uint32_t queue, uint64_t head, char *err,
                                                            size_t errlen)
{
    open_queue_t *oq = queue_get(r, queue, err, errlen);
    if (oq == NULL) {
        return -1;
    }
    if (head <= cq_head(oq->q)) {
        return 0;
    }
    if (head > cq_tail(oq->q)) {
        return err_set(err, errlen, "commit log redo: CQ %" PRIu32 " head %" PRIu64 " lies past its tail %" PRIu64,
                       queue, head, cq_tail(oq->q));
    }
    oq->dirty = 1;
    return cq_advance_head(oq->q, head, err, errlen);
}

static inline __attribute__((always_inline)) int apply_slot(redo_t *r, uint64_t base, uint64_t ordinal, const slot_t *s,
                                                            char *err, size_t errlen)
{
    open_slots_t *os = slots_get(r, base, err, errlen);
    if (os == NULL) {
        return -1;
    }
    os->dirty = 1;
    return slot_put(os->f, ordinal, s, err, errlen);
}

/* ---- applying one batch's record --------------------------------------------------- */

static int bad_record(uint64_t end, const char *what, size_t at, char *err, size_t errlen)
{
    err_set(err, errlen, "commit log batch ending at offset %" PRIu64 ": derived-writes record damaged: %s at byte %zu",
            end, what, at);
    return REDO_DAMAGED;
}

/* What one batch's apply made, for the open's report. */
typedef struct op_counts {
    uint64_t cq, head, slot, db;
} op_counts_t;

/* Make one op of the batch: a CQ, head or slot write by position now, a
 * LevelDB put or delete into wb. 0, or -1 with err. Inlined, with the
 * three writes by position, in both applies (the calls an op cost about as
 * much as the second decode saved). */
static inline __attribute__((always_inline)) int apply_op(redo_t *r, const derived_op_t *op, leveldb_writebatch_t *wb,
                                                          op_counts_t *c, char *err, size_t errlen)
{
    if (op->tag == 'Q') {
        c->cq++;
        return apply_cq(r, op->queue, op->index, &op->entry, err, errlen);
    }
    if (op->tag == 'H') {
        c->head++;
        return apply_head(r, op->queue, op->index, err, errlen);
    }
    if (op->tag == 'S') {
        c->slot++;
        return apply_slot(r, op->base, op->ordinal, &op->slot, err, errlen);
    }
    if (op->tag == 'P') {
        leveldb_writebatch_put(wb, op->key, op->klen, op->val, op->vlen);
    } else {
        leveldb_writebatch_delete(wb, op->key, op->klen);
    }
    c->db++;
    return 0;
}

/* The end of a batch's apply (rc: its ops' outcome): unless they failed, wb
 * with `M "applied"` = end written to LevelDB, unsynced, and the batch
 * counted; wb destroyed either way. rc, or -1 with err. */
static int apply_finish(redo_t *r, uint64_t end, leveldb_writebatch_t *wb, const op_counts_t *c, int rc, char *err,
                        size_t errlen)
{
    if (rc == 0) {
        key_buf_t k = redo_mark_key("applied");
        char v[8];
        be64_put(v, end);
        leveldb_writebatch_put(wb, k.b, k.n, v, sizeof v);
        char *dberr = NULL;
        leveldb_write(r->db, r->wo_nosync, wb, &dberr);
        if (dberr != NULL) {
            rc = err_set(err, errlen, "commit log batch ending at offset %" PRIu64 ": LevelDB write: %s", end, dberr);
            leveldb_free(dberr);
        }
    }
    leveldb_writebatch_destroy(wb);
    if (rc == 0) {
        r->applied = end;
        if (r->counts != NULL) {
            r->counts->batches++;
            r->counts->cq_writes += c->cq;
            r->counts->head_moves += c->head;
            r->counts->slot_writes += c->slot;
            r->counts->db_ops += c->db;
        }
    }
    return rc;
}

/* Make the derived writes of the batch ending at `end`: CQ, head and slot
 * writes by position in order, then one LevelDB write of its puts and
 * deletes with `M "applied"` = end, unsynced. 0, REDO_DAMAGED, or -1. */
int redo_apply_record(redo_t *r, uint64_t end, const char *p, size_t n, char *err, size_t errlen)
{
    int64_t ops = derived_ops(p, n);
    if (ops < 0) {
        return bad_record(end, "no derived-writes record (the batch was not written by clog_redo)", 0, err, errlen);
    }
    leveldb_writebatch_t *wb = leveldb_writebatch_create();
    size_t at = DERIVED_HEAD;
    int rc = 0;
    op_counts_t c = { 0 };
    for (int64_t i = 0; i < ops && rc == 0; i++) {
        derived_op_t op;
        rc = derived_next(p, n, &at, &op) ? apply_op(r, &op, wb, &c, err, errlen)
                                          : bad_record(end, "an unknown or cut operation", at, err, errlen);
    }
    if (rc == 0 && at != n) {
        rc = bad_record(end, "bytes after its last operation", at, err, errlen);
    }
    return apply_finish(r, end, wb, &c, rc, err, errlen);
}

int redo_apply_ops(redo_t *r, uint64_t end, const derived_op_t *ops, size_t n, char *err, size_t errlen)
{
    leveldb_writebatch_t *wb = leveldb_writebatch_create();
    int rc = 0;
    op_counts_t c = { 0 };
    for (size_t i = 0; i < n && rc == 0; i++) {
        rc = apply_op(r, &ops[i], wb, &c, err, errlen);
    }
    return apply_finish(r, end, wb, &c, rc, err, errlen);
}

/* ---- reads of the derived files (4a.4) ----------------------------------------------- */

int redo_cq_read(redo_t *r, uint32_t queue, uint64_t index, size_t n, cq_entry_t *out, char *err, size_t errlen)
{
    open_queue_t *oq = queue_get(r, queue, err, errlen);
    if (oq == NULL) {
        return -1;
    }
    /* the part inside the file's window [from, to) in one run, then the held entries laid over it; those below and
       above it must all be held */
    uint64_t head = cq_head(oq->q), tail = cq_tail(oq->q), end = index + n;
    uint64_t from = index > head ? index : head, to = end < tail ? end : tail;
    if (from >= to) {
        from = to = end; /* nothing in the file: all below */
    } else if (cq_read(oq->q, from, (size_t)(to - from), out + (from - index), err, errlen) != 0) {
        return -1;
    }
    uint64_t missing = UINT64_MAX;
    size_t held = overlay_cq_run(r->overlay, queue, index, (size_t)(from - index), out);
    if (held < from - index) {
        missing = index + held;
    }
    overlay_cq_run(r->overlay, queue, from, (size_t)(to - from), out + (from - index));
    held = overlay_cq_run(r->overlay, queue, to, (size_t)(end - to), out + (to - index));
    if (missing == UINT64_MAX && held < end - to) {
        missing = to + held;
    }
    if (missing == UINT64_MAX) {
        return 0;
    }
    return err_set(err, errlen,
                   "cq %08" PRIx32 ": entry %" PRIu64 " is neither held nor in the file's window [%" PRIu64 ", %" PRIu64
                   ")",
                   queue, missing, head, tail);
}

int redo_slot_read(redo_t *r, uint64_t base, uint64_t ordinal, size_t n, slot_t *out, size_t *got, char *err,
                   size_t errlen)
{
    *got = 0;
    int missing = 0;
    open_slots_t *os = slots_at(r, base, 0, &missing, err, errlen);
    if (os == NULL && !missing) {
        return -1;
    }
    uint64_t count = os != NULL ? slot_count(os->f) : 0;
    size_t in_file = ordinal < count ? (size_t)(count - ordinal < n ? count - ordinal : n) : 0;
    if (in_file > 0 && slot_read_run(os->f, ordinal, in_file, out, err, errlen) != 0) {
        return -1;
    }
    /* the held slots laid over those read; past the file, the run goes on while they are held */
    overlay_slot_run(r->overlay, base, ordinal, in_file, out);
    size_t k = in_file + overlay_slot_run(r->overlay, base, ordinal + in_file, n - in_file, out + in_file);
    if (k == 0) {
        char name[64];
        slot_file_name(base, name, sizeof name);
        return err_set(err, errlen, "%s: slot %" PRIu64 " is neither held nor in the file (%" PRIu64 " slots%s)", name,
                       ordinal, count, missing ? ": no such file" : "");
    }
    *got = k;
    return 0;
}

/* base's slot file closed if it is open, and deleted, when the log has no
 * segment at base: counted in *count, or the first failure kept in err (rc). */
static void sweep_one(redo_t *r, uint64_t base, uint64_t *count, int *rc, char *err, size_t errlen)
{
    if (clog_has_segment(r->log, base)) {
        return;
    }
    char closing[512] = "", removing[PATH_MAX + 128];
    int closed = 0;
    for (size_t i = 0; i < r->nslots; i++) {
        if (r->slots[i].base == base) {
            closed = slot_file_close(r->slots[i].f, closing, sizeof closing); /* a dead segment's slots: nothing lost */
            r->slots[i] = r->slots[--r->nslots];
            break;
        }
    }
    int removed = slot_file_remove(r->dir, base, removing, sizeof removing);
    if (closed == 0 && removed == 0) {
        (*count)++;
    } else if (*rc == 0) {
        *rc = err_set(err, errlen, "the where-slots of a recycled segment: %s", closed != 0 ? closing : removing);
    }
}

int redo_slots_sweep(redo_t *r, const uint64_t *bases, size_t n, uint64_t *swept, char *err, size_t errlen)
{
    uint64_t count = 0;
    int rc = 0;
    if (bases != NULL) {
        for (size_t i = 0; i < n; i++) {
            sweep_one(r, bases[i], &count, &rc, err, errlen);
        }
    } else {
        DIR *d = opendir(r->dir);
        if (d == NULL) {
            return err_set(err, errlen, "cannot list %s: %s", r->dir, strerror(errno));
        }
        struct dirent *de;
        while ((de = readdir(d)) != NULL) {
            uint64_t base;
            char tail;
            if (strlen(de->d_name) == 23 && sscanf(de->d_name, "slot-%16" SCNx64 ".%c", &base, &tail) == 2 &&
                tail == 'w') {
                sweep_one(r, base, &count, &rc, err, errlen);
            }
        }
        closedir(d);
    }
    if (swept != NULL) {
        *swept = count;
    }
    return rc;
}

int redo_queues_remove(redo_t *r, cq_doomed_fn doomed, void *ctx, uint64_t *removed, char *err, size_t errlen)
{
    int rc = 0;
    for (size_t i = 0; i < r->nqueues;) {
        if (!doomed(ctx, r->queues[i].queue, UINT64_MAX)) {
            i++;
            continue;
        }
        char closing[512];
        if (cq_close(r->queues[i].q, closing, sizeof closing) != 0 && rc == 0) {
            rc = err_set(err, errlen, "%s", closing); /* a dead queue's buffer: nothing lost */
        }
        r->queues[i] = r->queues[--r->nqueues];
    }
    char removing[PATH_MAX + 128];
    if (cq_remove_queues(r->dir, doomed, ctx, removed, removing, sizeof removing) != 0 && rc == 0) {
        rc = err_set(err, errlen, "%s", removing);
    }
    return rc;
}
