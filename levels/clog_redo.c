/*
 * levels/clog_redo.c — the batch protocol and recovery of levels/clog_redo.h
 * (design: docs/design-commitlog.md §3): derived writes encoded into the
 * batch, held until the log's sync covers it, applied by position; the
 * LevelDB mark; checkpoints; the redo from the checkpoint at open.
 *
 * The derived-writes record (the last data record of a batch), big-endian:
 * "HGRD", op count u32, then the ops, each a tag byte and its fields:
 *   'Q' queue u32, index u64, log offset u64, due u64    a CQ entry at index
 *   'H' queue u32, head u64                              a CQ head move
 *   'S' segment base u64, ordinal u64, id u64, queue u32, flags u32, CQ index u64
 *                                                        a where-slot
 *   'P' key length u32, value length u32, key, value    a LevelDB put
 *   'D' key length u32, key                              a LevelDB delete
 * Running and redo share one path: a held batch is kept as its encoded
 * record and made by the same code the redo uses (apply_record, over
 * levels/clog_derived.h's decoder, which the readers' overlay uses too), so
 * what the redo does is what running did.
 */
#define _GNU_SOURCE
#include "levels/clog_redo.h"
#include "base/alloc.h"
#include "base/err.h"
#include "levels/clog_derived.h"
#include "levels/clog_finisher.h"
#include "levels/clog_internal.h"
#include "levels/clog_overlay.h"
#include "levels/keys.h"
#include "levels/logsync.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

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
    int in_overlay; /* 0 only inside redo_commit_applied, until its sync and apply succeed */
} held_t;

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
};

static uint64_t now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000 + (uint64_t)ts.tv_nsec / 1000;
}

static key_buf_t mark_key(const char *name)
{
    key_buf_t k;
    key_meta(&k, name);
    return k;
}

/* ---- encoding ---------------------------------------------------------------------- */

static char *grow(redo_batch_t *b, size_t n)
{
    if (b->len == 0) {
        b->len = DERIVED_HEAD;
    }
    if (b->len + n > b->cap) {
        b->cap = (b->len + n) * 2 > 256 ? (b->len + n) * 2 : 256;
        b->derived = xrealloc(b->derived, b->cap);
    }
    char *p = b->derived + b->len;
    b->len += n;
    b->ops++;
    return p;
}

void redo_cq_write(redo_batch_t *b, uint32_t queue, uint64_t index, const cq_entry_t *e)
{
    char *p = grow(b, 29);
    p[0] = 'Q';
    be32_put(p + 1, queue);
    be64_put(p + 5, index);
    be64_put(p + 13, e->log_offset);
    be64_put(p + 21, e->due);
}

void redo_cq_head(redo_batch_t *b, uint32_t queue, uint64_t head)
{
    char *p = grow(b, 13);
    p[0] = 'H';
    be32_put(p + 1, queue);
    be64_put(p + 5, head);
}

void redo_slot_write(redo_batch_t *b, uint64_t segment_base, uint64_t ordinal, const slot_t *s)
{
    char *p = grow(b, 41);
    p[0] = 'S';
    be64_put(p + 1, segment_base);
    be64_put(p + 9, ordinal);
    be64_put(p + 17, s->id);
    be32_put(p + 25, s->queue);
    be32_put(p + 29, s->flags);
    be64_put(p + 33, s->cq_index);
}

void redo_db_put(redo_batch_t *b, const void *key, size_t klen, const void *val, size_t vlen)
{
    char *p = grow(b, 9 + klen + vlen);
    p[0] = 'P';
    be32_put(p + 1, (uint32_t)klen);
    be32_put(p + 5, (uint32_t)vlen);
    memcpy(p + 9, key, klen);
    if (vlen > 0) {
        memcpy(p + 9 + klen, val, vlen);
    }
}

void redo_db_delete(redo_batch_t *b, const void *key, size_t klen)
{
    char *p = grow(b, 5 + klen);
    p[0] = 'D';
    be32_put(p + 1, (uint32_t)klen);
    memcpy(p + 5, key, klen);
}

void redo_batch_free(redo_batch_t *b)
{
    clog_batch_free(&b->log);
    free(b->derived);
    memset(b, 0, sizeof *b);
}

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

static int apply_cq(redo_t *r, uint32_t queue, uint64_t index, const cq_entry_t *e, char *err, size_t errlen)
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

static int apply_head(redo_t *r, uint32_t queue, uint64_t head, char *err, size_t errlen)
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

static int apply_slot(redo_t *r, uint64_t base, uint64_t ordinal, const slot_t *s, char *err, size_t errlen)
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

/* Make the derived writes of the batch ending at `end`: CQ, head and slot
 * writes by position in order, then one LevelDB write of its puts and
 * deletes with `M "applied"` = end, unsynced. 0, REDO_DAMAGED, or -1. */
static int apply_record(redo_t *r, uint64_t end, const char *p, size_t n, char *err, size_t errlen)
{
    int64_t ops = derived_ops(p, n);
    if (ops < 0) {
        return bad_record(end, "no derived-writes record (the batch was not written by clog_redo)", 0, err, errlen);
    }
    leveldb_writebatch_t *wb = leveldb_writebatch_create();
    size_t at = DERIVED_HEAD;
    int rc = 0;
    uint64_t nq = 0, nh = 0, ns = 0, ndb = 0;
    for (int64_t i = 0; i < ops && rc == 0; i++) {
        derived_op_t op;
        if (!derived_next(p, n, &at, &op)) {
            rc = bad_record(end, "an unknown or cut operation", at, err, errlen);
        } else if (op.tag == 'Q') {
            rc = apply_cq(r, op.queue, op.index, &op.entry, err, errlen);
            nq++;
        } else if (op.tag == 'H') {
            rc = apply_head(r, op.queue, op.index, err, errlen);
            nh++;
        } else if (op.tag == 'S') {
            rc = apply_slot(r, op.base, op.ordinal, &op.slot, err, errlen);
            ns++;
        } else if (op.tag == 'P') {
            leveldb_writebatch_put(wb, op.key, op.klen, op.val, op.vlen);
            ndb++;
        } else {
            leveldb_writebatch_delete(wb, op.key, op.klen);
            ndb++;
        }
    }
    if (rc == 0 && at != n) {
        rc = bad_record(end, "bytes after its last operation", at, err, errlen);
    }
    if (rc == 0) {
        key_buf_t k = mark_key("applied");
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
            r->counts->cq_writes += nq;
            r->counts->head_moves += nh;
            r->counts->slot_writes += ns;
            r->counts->db_ops += ndb;
        }
    }
    return rc;
}

/* ---- running ------------------------------------------------------------------------- */

/* The derived-writes record's size to keep room for: what b holds, `more`
 * bytes, REDO_MESSAGE_RESERVE for each of `messages` and REDO_BATCH_RESERVE. */
static uint64_t derived_bound(const redo_batch_t *b, uint32_t messages, uint64_t more)
{
    return (b->len ? b->len : DERIVED_HEAD) + more + (uint64_t)messages * REDO_MESSAGE_RESERVE + REDO_BATCH_RESERVE;
}

int redo_batch_room(redo_t *r, redo_batch_t *b, uint64_t bytes, char *err, size_t errlen)
{
    uint64_t derived = derived_bound(b, b->messages, bytes);
    int rc = clog_batch_room(r->log, &b->log, CLOG_RECORD_HEADER + pad8(derived));
    if (rc == CLOG_BATCH_FULL) {
        return REDO_BATCH_FULL;
    }
    if (rc != 0) {
        return err_set(err, errlen,
                       "commit log batch: %" PRIu64 " more bytes of derived writes (%" PRIu64
                       " with what the batch holds and its reserves) cannot fit in a segment",
                       bytes, derived);
    }
    return 0;
}

uint64_t redo_batch_segment_bytes(uint64_t bytes)
{
    redo_batch_t empty = { 0 };
    return CLOG_SEGMENT_HEADER + CLOG_RECORD_HEADER + pad8(derived_bound(&empty, 0, bytes)) + COMMIT_FOOTPRINT;
}

int redo_message_room(redo_t *r, redo_batch_t *b, size_t n, char *err, size_t errlen)
{
    uint64_t derived = derived_bound(b, b->messages + 1, 0);
    int rc = clog_batch_room(r->log, &b->log, 2 * CLOG_RECORD_HEADER + pad8(n) + pad8(derived));
    if (rc == CLOG_BATCH_FULL) {
        return REDO_BATCH_FULL;
    }
    if (rc != 0) {
        return err_set(err, errlen,
                       "commit log message of %zu bytes with its derived writes (%" PRIu64
                       " bytes) cannot fit in a segment",
                       n, derived);
    }
    return 0;
}

int redo_add_message(redo_t *r, redo_batch_t *b, const void *p, size_t n, uint64_t *offset, char *err, size_t errlen)
{
    int rc = redo_message_room(r, b, n, err, errlen);
    if (rc != 0) {
        return rc;
    }
    rc = clog_batch_add(r->log, &b->log, p, n, offset, err, errlen);
    if (rc == 0) {
        b->messages++;
    }
    return rc == CLOG_BATCH_FULL ? REDO_BATCH_FULL : rc;
}

/* Hold the derived-writes record rec (owned from now on) of the batch
 * [start, end); with in_overlay, readers see it through the overlay. */
static void hold(redo_t *r, uint64_t start, uint64_t end, char *rec, size_t len, int in_overlay)
{
    if (r->nheld == r->hcap) {
        if (r->hfirst > 0) {
            memmove(r->held, r->held + r->hfirst, (r->nheld - r->hfirst) * sizeof *r->held);
            r->nheld -= r->hfirst;
            r->hfirst = 0;
        } else {
            r->hcap = r->hcap ? r->hcap * 2 : 64;
            r->held = xrealloc(r->held, r->hcap * sizeof *r->held);
        }
    }
    if (in_overlay) {
        overlay_add(r->overlay, end, rec, len);
    }
    r->held[r->nheld++] = (held_t){ start, end, rec, len, in_overlay };
}

/* Add the derived-writes record to lb (the batch's last data record) and
 * append the batch; *start gets its first offset (an empty batch moves to
 * the next segment when the record does not fit in this one). 0, or -1 with
 * err. */
static int append_with_record(redo_t *r, clog_batch_t *lb, const char *rec, size_t len, uint64_t *start, char *err,
                              size_t errlen)
{
    uint64_t at;
    int rc = clog_batch_add(r->log, lb, rec, len, &at, err, errlen);
    *start = lb->first;
    if (rc == CLOG_BATCH_FULL) {
        return err_set(err, errlen,
                       "commit log batch at offset %" PRIu64 ": its %zu bytes of derived writes do not fit in the "
                       "rest of its segment (cut the batch earlier)",
                       lb->first, len);
    }
    if (rc != 0 || clog_append(r->log, lb, err, errlen) != 0) {
        return -1;
    }
    return 0;
}

/* redo_commit's append and hold; the batch enters the overlay when
 * in_overlay. 0, or -1 with err (nothing held). */
static int commit_held(redo_t *r, redo_batch_t *b, uint64_t *end, int in_overlay, char *err, size_t errlen)
{
    if (b->len == 0) {
        b->len = DERIVED_HEAD;
        b->derived = xrealloc(b->derived, b->cap = 256);
    }
    memcpy(b->derived, DERIVED_MAGIC, 4);
    be32_put(b->derived + 4, b->ops);
    uint64_t start;
    if (append_with_record(r, &b->log, b->derived, b->len, &start, err, errlen) != 0) {
        return -1;
    }
    uint64_t e = clog_end(r->log);
    hold(r, start, e, b->derived, b->len, in_overlay);
    b->derived = NULL;
    b->len = b->cap = 0;
    b->ops = b->messages = 0;
    if (end != NULL) {
        *end = e;
    }
    return 0;
}

int redo_commit(redo_t *r, redo_batch_t *b, uint64_t *end, char *err, size_t errlen)
{
    if (b->ops == 0 && b->messages == 0) {
        return 0;
    }
    return commit_held(r, b, end, 1, err, errlen);
}

/* Put every held batch that is not in the overlay into it (only the last
 * can be: redo_commit_applied's, after its sync or apply failed). */
static void expose_held(redo_t *r)
{
    for (size_t i = r->hfirst; i < r->nheld; i++) {
        if (!r->held[i].in_overlay) {
            overlay_add(r->overlay, r->held[i].end, r->held[i].rec, r->held[i].len);
            r->held[i].in_overlay = 1;
        }
    }
}

int redo_commit_applied(redo_t *r, redo_batch_t *b, uint64_t *end, char *err, size_t errlen)
{
    if ((b->ops > 0 || b->messages > 0) && commit_held(r, b, end, 0, err, errlen) != 0) {
        return -1;
    }
    if (clog_sync(r->log, err, errlen) != 0 || redo_apply_durable(r, err, errlen) != 0) {
        expose_held(r); /* held after all: readers must see it, redo_sync_failed carries it */
        return -1;
    }
    return 0;
}

int redo_apply_durable(redo_t *r, char *err, size_t errlen)
{
    uint64_t durable = clog_durable(r->log);
    while (r->hfirst < r->nheld && r->held[r->hfirst].end <= durable) {
        held_t *h = &r->held[r->hfirst];
        int rc = apply_record(r, h->end, h->rec, h->len, err, errlen);
        if (rc != 0) {
            return rc;
        }
        if (h->in_overlay) {
            overlay_drop(r->overlay, h->end, h->rec, h->len);
        }
        r->applied_since += h->end - h->start;
        free(h->rec);
        r->hfirst++;
    }
    if (r->hfirst == r->nheld) {
        r->hfirst = r->nheld = 0;
    }
    return 0;
}

static int sync_dir(const char *dir, char *err, size_t errlen)
{
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0 || fsync(fd) != 0) {
        err_set(err, errlen, "cannot sync directory %s: %s", dir, strerror(errno));
        if (fd >= 0) {
            close(fd);
        }
        return -1;
    }
    close(fd);
    return 0;
}

/* Begin the checkpoint at B = b (r->applied, or past it: the end of a range
 * whose held writes are carried in the log past b, redo_sync_failed), with
 * `M "applied"` raised to B when below; with `clean`, also M "clean" = B (the
 * log closes here), else M "clean" deleted (the log may grow past B from now
 * on), in the mark's write. Owner thread: the buffers of the CQ and slot
 * files are written (no sync) and the files written since the last
 * checkpoint handed to the finish as duplicate descriptors. */
static int checkpoint_begin_at(redo_t *r, uint64_t b, int clean, char *err, size_t errlen)
{
    if (atomic_load(&r->ckpt.open)) {
        return err_set(err, errlen,
                       "commit log checkpoint: the checkpoint begun at offset %" PRIu64
                       " is not finished (redo_checkpoint_finish first); a second one is refused",
                       r->ckpt.b);
    }
    int all = atomic_exchange(&r->resync_all, 0);
    int rc = 0;
    for (size_t i = 0; rc == 0 && i < r->nqueues; i++) {
        if (r->queues[i].dirty || all) {
            rc = cq_sync_handoff(r->queues[i].q, all, &r->ckpt.files, err, errlen);
            r->queues[i].dirty = rc != 0;
        }
    }
    for (size_t i = 0; rc == 0 && i < r->nslots; i++) {
        if (r->slots[i].dirty || all) {
            rc = slot_sync_handoff(r->slots[i].f, all, &r->ckpt.files, err, errlen);
            r->slots[i].dirty = rc != 0;
        }
    }
    if (rc != 0) {
        /* files handed over count as synced in their fixfile: the next checkpoint hands every one again */
        fixfile_syncset_clear(&r->ckpt.files);
        atomic_store(&r->resync_all, 1);
        return -1;
    }
    for (size_t i = 0; i < r->nqueues; i++) {
        r->queues[i].release_to = cq_head(r->queues[i].q); /* the head as of B: the checkpoint makes it durable */
    }
    r->ckpt.b = b;
    r->ckpt.covered = r->applied_since;
    r->applied_since = 0; /* what was applied lies below B */
    r->ckpt.clean = clean;
    r->ckpt.raise_applied = b > r->applied;
    atomic_store(&r->ckpt.open, 1);
    return 0;
}

int redo_checkpoint_begin(redo_t *r, uint64_t *b, char *err, size_t errlen)
{
    if (checkpoint_begin_at(r, r->applied, 0, err, errlen) != 0) {
        return -1;
    }
    if (b != NULL) {
        *b = r->ckpt.b;
    }
    return 0;
}

/* The mark's write: `M "checkpoint"` = B (and `applied`, `clean` as begun),
 * unsynced — a synced leveldb_write would hold the owner's writes behind its
 * fsync — then made durable by syncing LevelDB's logs. */
static int write_mark(redo_t *r, char *err, size_t errlen)
{
    uint64_t b = r->ckpt.b;
    key_buf_t k = mark_key("checkpoint"), kc = mark_key("clean"), ka = mark_key("applied");
    char v[8], *dberr = NULL;
    be64_put(v, b);
    leveldb_writebatch_t *wb = leveldb_writebatch_create();
    leveldb_writebatch_put(wb, k.b, k.n, v, sizeof v);
    if (r->ckpt.raise_applied) {
        leveldb_writebatch_put(wb, ka.b, ka.n, v, sizeof v);
    }
    if (r->ckpt.clean) {
        leveldb_writebatch_put(wb, kc.b, kc.n, v, sizeof v);
    } else {
        leveldb_writebatch_delete(wb, kc.b, kc.n);
    }
    leveldb_write(r->db, r->wo_nosync, wb, &dberr);
    leveldb_writebatch_destroy(wb);
    if (dberr != NULL) {
        err_set(err, errlen, "commit log checkpoint at offset %" PRIu64 ": LevelDB write: %s", b, dberr);
        leveldb_free(dberr);
        return -1;
    }
    return logsync_run(r->dbsync, err, errlen);
}

int redo_checkpoint_finish(redo_t *r, char *err, size_t errlen)
{
    if (!atomic_load(&r->ckpt.open)) {
        return err_set(err, errlen, "commit log checkpoint finish: no checkpoint begun (redo_checkpoint_begin first)");
    }
    /* the files first: every LevelDB log, rotated ones included (a synced write syncs only the newest); the
       directory holds the names made since (slot files, LevelDB's CURRENT after its open); only then the
       mark, which lets the next open start at B */
    int rc = fixfile_syncset_run(&r->ckpt.files, err, errlen);
    if (rc == 0) {
        rc = logsync_run(r->dbsync, err, errlen);
    }
    if (rc == 0) {
        rc = sync_dir(r->dir, err, errlen);
    }
    if (rc == 0) {
        rc = write_mark(r, err, errlen);
    }
    if (rc == 0) {
        atomic_store(&r->checkpoint, r->ckpt.b);
        clog_keep_from(r->log, r->ckpt.b); /* the next open follows the chain from B: its segment must stay */
    } else {
        atomic_store(&r->resync_all, 1);
    }
    fixfile_syncset_clear(&r->ckpt.files);
    atomic_store(&r->ckpt.open, 0);
    return rc;
}

/* Owner thread, after a finished checkpoint: delete the CQ files wholly
 * below the heads that checkpoint covers. Not at the head move itself: an
 * open takes a queue's head from LevelDB, whose writes past the checkpoint
 * may be lost, before it replays the moves, and needs the file that head lies
 * in (test_crash met "cannot open" on a topic queue's first file). */
static int release_cq_files(redo_t *r, char *err, size_t errlen)
{
    int rc = 0;
    for (size_t i = 0; rc == 0 && i < r->nqueues; i++) {
        rc = cq_release_below(r->queues[i].q, r->queues[i].release_to, err, errlen);
    }
    return rc;
}

int redo_checkpoint_settle(redo_t *r, int wait, char *err, size_t errlen)
{
    if (r->finisher == NULL) {
        return 0;
    }
    int had = 0;
    char why[1024];
    if (clog_finisher_take(r->finisher, wait, &had, why, sizeof why) != 0) {
        return err_set(err, errlen, "%s", why);
    }
    if (!had) {
        return 0;
    }
    return release_cq_files(r, err, errlen) != 0 ? -1 : 1;
}

int redo_checkpoint_running(redo_t *r)
{
    return r->finisher != NULL && clog_finisher_state(r->finisher) != CLOG_FINISHER_IDLE;
}

static int finish_on_thread(void *arg, char *err, size_t errlen)
{
    return redo_checkpoint_finish(arg, err, errlen);
}

int redo_checkpoint_async(redo_t *r, char *err, size_t errlen)
{
    if (redo_checkpoint_running(r)) {
        return err_set(err, errlen,
                       "commit log checkpoint: the one begun at offset %" PRIu64
                       " is still being finished on its thread (redo_checkpoint_settle first); a second one is refused",
                       r->ckpt.b);
    }
    if (r->finisher == NULL && (r->finisher = clog_finisher_new(finish_on_thread, r, err, errlen)) == NULL) {
        return -1;
    }
    if (checkpoint_begin_at(r, r->applied, 0, err, errlen) != 0) {
        return -1;
    }
    (void)clog_finisher_start(r->finisher); /* idle: checked above */
    return 0;
}

/* Owner thread: a checkpoint being finished on the finisher's thread is
 * waited for, one begun and not finished is finished here; the CQ files
 * below the heads it covers go. -1 with err when that finish failed. */
static int finish_open_checkpoint(redo_t *r, char *err, size_t errlen)
{
    if (redo_checkpoint_settle(r, 1, err, errlen) < 0) {
        return -1;
    }
    if (!atomic_load(&r->ckpt.open)) {
        return 0;
    }
    return redo_checkpoint_finish(r, err, errlen) != 0 ? -1 : release_cq_files(r, err, errlen);
}

/* A whole checkpoint on the owner thread (begin, then finish and release). */
static int checkpoint_at(redo_t *r, uint64_t b, int clean, char *err, size_t errlen)
{
    if (redo_checkpoint_settle(r, 1, err, errlen) < 0) { /* one on the finisher's thread first */
        return -1;
    }
    if (checkpoint_begin_at(r, b, clean, err, errlen) != 0 || finish_open_checkpoint(r, err, errlen) != 0) {
        return -1;
    }
    if (b > r->applied) {
        r->applied = b;
    }
    return 0;
}

int redo_checkpoint(redo_t *r, char *err, size_t errlen)
{
    return checkpoint_at(r, r->applied, 0, err, errlen);
}

int redo_sync_failed(redo_t *r, redo_failure_t *f, char *err, size_t errlen)
{
    memset(f, 0, sizeof *f);
    /* what the last good sync covered is made as usual */
    if (finish_open_checkpoint(r, err, errlen) != 0 || redo_apply_durable(r, err, errlen) != 0) {
        return -1;
    }
    clog_abandon(r->log, &f->from, &f->to);
    /* the held batches past it are carried into the fresh segment: each a batch of its derived-writes record
       alone (the messages stay in the abandoned range; their callers get the error) */
    for (size_t i = r->hfirst; i < r->nheld; i++) {
        clog_batch_t lb = { 0 };
        int rc = append_with_record(r, &lb, r->held[i].rec, r->held[i].len, &r->held[i].start, err, errlen);
        clog_batch_free(&lb);
        if (rc != 0) {
            return -1;
        }
        overlay_move(r->overlay, r->held[i].end, clog_end(r->log), r->held[i].rec, r->held[i].len);
        r->held[i].end = clog_end(r->log);
        f->carried++;
    }
    f->end = clog_end(r->log);
    char e2[512];
    if (clog_sync(r->log, e2, sizeof e2) != 0) {
        return err_set(err, errlen, "commit log: the fresh segment after an abandoned one failed too: %s", e2);
    }
    /* B at the abandoned range's end, before the carried writes are made: from here on an open starts past
       the range and redoes the carried batches; before here it ends at the last good sync, where nothing of
       the carried batches was made */
    if (checkpoint_at(r, f->to > r->applied ? f->to : r->applied, 0, err, errlen) != 0) {
        return -1;
    }
    return redo_apply_durable(r, err, errlen);
}

/* Close every file and free r; the first failure is kept in err. */
static int redo_close_files(redo_t *r, char *err, size_t errlen)
{
    clog_finisher_free(r->finisher); /* a finish running there (redo_free drops it) ends first: it uses the files */
    int rc = 0;
    char e2[512];
    for (size_t i = 0; i < r->nqueues; i++) {
        if (cq_close(r->queues[i].q, e2, sizeof e2) != 0 && rc == 0) {
            rc = err_set(err, errlen, "%s", e2);
        }
    }
    for (size_t i = 0; i < r->nslots; i++) {
        if (slot_file_close(r->slots[i].f, e2, sizeof e2) != 0 && rc == 0) {
            rc = err_set(err, errlen, "%s", e2);
        }
    }
    for (size_t i = r->hfirst; i < r->nheld; i++) {
        free(r->held[i].rec);
    }
    clog_close(r->log);
    overlay_free(r->overlay);
    logsync_free(r->dbsync);
    leveldb_writeoptions_destroy(r->wo_nosync);
    leveldb_readoptions_destroy(r->ro);
    free(r->queues);
    free(r->slots);
    free(r->held);
    free(r->dir);
    fixfile_syncset_clear(&r->ckpt.files);
    free(r);
    return rc;
}

int redo_close(redo_t *r, char *err, size_t errlen)
{
    if (r == NULL) {
        return 0;
    }
    int rc = finish_open_checkpoint(r, err, errlen);
    if (rc == 0) {
        rc = clog_sync(r->log, err, errlen);
    }
    if (rc == 0) {
        rc = redo_apply_durable(r, err, errlen);
    }
    if (rc == 0) {
        rc = checkpoint_at(r, r->applied, 1, err, errlen);
    }
    char e2[512];
    if (redo_close_files(r, e2, sizeof e2) != 0 && rc == 0) {
        rc = err_set(err, errlen, "%s", e2);
    }
    return rc;
}

int redo_free(redo_t *r, char *err, size_t errlen)
{
    if (r == NULL) {
        return 0;
    }
    return redo_close_files(r, err, errlen);
}

clog_t *redo_log(redo_t *r)
{
    return r->log;
}

uint64_t redo_applied(const redo_t *r)
{
    return r->applied;
}

uint64_t redo_applied_since_checkpoint(const redo_t *r)
{
    return r->applied_since;
}

uint64_t redo_applied_since_finished(const redo_t *r)
{
    return r->applied_since + (atomic_load(&((redo_t *)r)->ckpt.open) ? r->ckpt.covered : 0);
}

unsigned long long redo_leveldb_log_bytes(const redo_t *r)
{
    return logsync_newest_bytes(r->dbsync);
}

uint64_t redo_checkpointed(const redo_t *r)
{
    return atomic_load(&((redo_t *)r)->checkpoint);
}

size_t redo_held(const redo_t *r)
{
    return r->nheld - r->hfirst;
}

const clog_overlay_t *redo_overlay(const redo_t *r)
{
    return r->overlay;
}

/* ---- reads of the derived files (4a.4) ----------------------------------------------- */

int redo_cq_read(redo_t *r, uint32_t queue, uint64_t index, size_t n, cq_entry_t *out, char *err, size_t errlen)
{
    open_queue_t *oq = queue_get(r, queue, err, errlen);
    if (oq == NULL) {
        return -1;
    }
    /* the part inside the file's window in one run, then the held entries laid over it */
    uint64_t head = cq_head(oq->q), tail = cq_tail(oq->q), end = index + n;
    uint64_t from = index > head ? index : head, to = end < tail ? end : tail;
    if (from < to && cq_read(oq->q, from, (size_t)(to - from), out + (from - index), err, errlen) != 0) {
        return -1;
    }
    int held = overlay_count(r->overlay) > 0;
    for (uint64_t i = index; i < end; i++) {
        int in_file = i >= from && i < to;
        if ((held && overlay_cq(r->overlay, queue, i, &out[i - index]) == OVERLAY_HELD) || in_file) {
            continue;
        }
        return err_set(err, errlen,
                       "cq %08" PRIx32 ": entry %" PRIu64 " is neither held nor in the file's window [%" PRIu64
                       ", %" PRIu64 ")",
                       queue, i, head, tail);
    }
    return 0;
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
    size_t k = 0;
    int held = overlay_count(r->overlay) > 0;
    for (; k < n; k++) {
        if ((held && overlay_slot(r->overlay, base, ordinal + k, &out[k]) == OVERLAY_HELD) || k < in_file) {
            continue;
        }
        break;
    }
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

/* ---- open and close ------------------------------------------------------------------ */

/* The mark `name` from LevelDB into *v (0 when absent). */
static int read_mark(redo_t *r, const char *name, uint64_t *v, char *err, size_t errlen)
{
    key_buf_t k = mark_key(name);
    size_t n = 0;
    char *dberr = NULL;
    char *val = leveldb_get(r->db, r->ro, k.b, k.n, &n, &dberr);
    *v = 0;
    if (dberr != NULL) {
        err_set(err, errlen, "cannot read the commit log's mark M \"%s\": %s", name, dberr);
        leveldb_free(dberr);
        return -1;
    }
    int rc = 0;
    if (val != NULL && n != 8) {
        rc = err_set(err, errlen, "the commit log's mark M \"%s\" holds %zu bytes, not 8", name, n);
    } else if (val != NULL) {
        *v = be64_get(val);
    }
    leveldb_free(val);
    return rc;
}

/* The redo walk: keeps the batch's last data record when it is a derived-writes
 * record; at its COMMIT, applies it (none kept: the batch is refused). */
typedef struct redo_walk {
    redo_t *r;
    char *last;
    size_t len, cap;
    char *err;
    size_t errlen;
} redo_walk_t;

static int redo_one(const clog_record_t *rec, void *ctx)
{
    redo_walk_t *w = ctx;
    if (rec->type == CLOG_DATA) {
        /* only a derived-writes record is kept: a message (no magic, or one that happens to start with it and
           is followed by the batch's derived record) need not be copied */
        if (rec->len < DERIVED_HEAD || memcmp(rec->data, DERIVED_MAGIC, 4) != 0) {
            w->len = 0;
            return 0;
        }
        if (rec->len > w->cap) {
            w->cap = rec->len * 2;
            w->last = xrealloc(w->last, w->cap);
        }
        memcpy(w->last, rec->data, rec->len);
        w->len = rec->len;
        return 0;
    }
    int rc = apply_record(w->r, rec->next, w->last, w->len, w->err, w->errlen);
    w->len = 0;
    return rc == 0 ? 0 : rc == REDO_DAMAGED ? REDO_DAMAGED : -1;
}

int redo_open(const redo_options_t *o, redo_t **out, redo_open_report_t *rep, char *err, size_t errlen)
{
    *out = NULL;
    redo_open_report_t local;
    if (rep == NULL) {
        rep = &local;
    }
    memset(rep, 0, sizeof *rep);
    if (o->db == NULL || o->db_dir == NULL || o->dir == NULL) {
        return err_set(err, errlen, "commit log redo: the directory, the LevelDB handle and its directory are needed");
    }
    redo_t *r = xcalloc(1, sizeof *r);
    r->dir = xstrdup(o->dir);
    r->db = o->db;
    r->dbsync = logsync_new(o->db_dir);
    r->overlay = overlay_new();
    r->wo_nosync = leveldb_writeoptions_create();
    r->ro = leveldb_readoptions_create();
    /* a damaged block holding a mark is refused, not read as another mark
     * nor left in the block cache for later readers to take unverified */
    leveldb_readoptions_set_verify_checksums(r->ro, 1);
    r->bounds = o->bounds;
    r->bounds_ctx = o->bounds_ctx;
    int rc = read_mark(r, "checkpoint", &rep->checkpoint, err, errlen);
    if (rc == 0) {
        rc = read_mark(r, "applied", &rep->applied, err, errlen);
    }
    uint64_t clean = 0;
    if (rc == 0) {
        rc = read_mark(r, "clean", &clean, err, errlen);
    }
    if (rc == 0 && rep->applied < rep->checkpoint) {
        rc = err_set(err, errlen,
                     "LevelDB's applied mark %" PRIu64 " lies below its checkpoint %" PRIu64
                     " (a checkpoint is taken of what was applied): damaged",
                     rep->applied, rep->checkpoint);
        rc = REDO_DAMAGED;
    }
    if (rc == 0) {
        /* the open syncs what a kill -9 left in the page cache before the redo builds on it */
        clog_options_t co = { o->dir, o->segment_bytes, o->floor, rep->applied, rep->checkpoint, clean };
        uint64_t t0 = now_us();
        rc = clog_open(&co, &r->log, &rep->log, err, errlen);
        rep->log_open_us = now_us() - t0;
        if (rc == CLOG_DAMAGED) {
            rc = REDO_DAMAGED;
        }
    }
    if (rc == 0) {
        clog_keep_from(r->log, rep->checkpoint);
        rep->bytes = rep->log.end - rep->checkpoint;
        r->applied = rep->checkpoint;
        atomic_store(&r->checkpoint, rep->checkpoint);
        redo_walk_t w = { r, NULL, 0, 0, err, errlen };
        r->counts = rep;
        uint64_t t0 = now_us();
        rc = clog_walk_after(r->log, rep->checkpoint, redo_one, &w, err, errlen);
        rep->redo_us = now_us() - t0;
        r->counts = NULL;
        free(w.last);
        if (rc == CLOG_NOT_RECORD) {
            rc = err_set(err, errlen, "commit log in %s: the checkpoint %" PRIu64 " is not a batch's end", o->dir,
                         rep->checkpoint);
            rc = REDO_DAMAGED;
        }
    }
    if (rc == 0 && r->applied != rep->log.end) {
        rc = err_set(err, errlen, "commit log redo stopped at offset %" PRIu64 " before the log's end %" PRIu64,
                     r->applied, rep->log.end);
    }
    if (rc == 0) {
        uint64_t t0 = now_us();
        rc = redo_checkpoint(r, err, errlen);
        rep->checkpoint_us = now_us() - t0;
    }
    if (rc != 0) {
        char ignored[64];
        r->hfirst = r->nheld = 0;
        redo_close_files(r, ignored, sizeof ignored);
        return rc;
    }
    *out = r;
    return 0;
}
