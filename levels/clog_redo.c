/*
 * levels/clog_redo.c — the batch protocol of levels/clog_redo.h while the log
 * runs (design: docs/design-commitlog.md §3): derived writes encoded into the
 * batch, the room a batch keeps for them, the batch appended and its record
 * held until the log's sync covers it, then applied by position
 * (clog_redo_files.c) in log order; a failed sync's held batches carried into
 * a fresh segment. Checkpoints are clog_checkpoint.c, the open with its redo
 * and the close clog_redo_open.c; what they share is clog_redo_internal.h.
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
 * record, decoded once by levels/clog_derived.h's decoder (the redo's) for
 * the readers' overlay and the apply, and made by the same code the redo
 * uses (redo_apply_ops and redo_apply_record make each op alike), so what
 * the redo does is what running did.
 */
#define _GNU_SOURCE
#include "levels/clog_redo_internal.h"
#include "base/alloc.h"
#include "base/err.h"
#include "levels/clog_derived.h"
#include "levels/clog_internal.h"
#include "levels/clog_overlay.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

/* ---- encoding ---------------------------------------------------------------------- */

#define NEXT_RECORD_MAX (256 * 1024) /* the most a committed batch's record sizes its successor's buffer to */

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
    held_t *h = &r->held[r->nheld++];
    *h = (held_t){ .start = start, .end = end, .rec = rec, .len = len, .in_overlay = in_overlay };
    if (r->nspare > 0) {
        spare_ops_t *s = &r->spare[--r->nspare];
        h->ops = s->ops;
        h->ops_cap = s->cap;
    }
    h->nops = derived_decode_into(rec, len, &h->ops, &h->ops_cap, &h->ops_whole);
    if (in_overlay) {
        overlay_add(r->overlay, end, h->ops, h->nops);
    }
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
    /* the next record starts as large as this one (up to NEXT_RECORD_MAX): built up from 256 bytes it was
       reallocated, and copied, about ten times */
    b->cap = b->len < NEXT_RECORD_MAX ? b->len : NEXT_RECORD_MAX;
    b->derived = xmalloc(b->cap);
    b->len = 0;
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
            overlay_add(r->overlay, r->held[i].end, r->held[i].ops, r->held[i].nops);
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
        int rc = h->ops_whole ? redo_apply_ops(r, h->end, h->ops, h->nops, err, errlen)
                              : redo_apply_record(r, h->end, h->rec, h->len, err, errlen);
        if (rc != 0) {
            return rc;
        }
        if (h->in_overlay) {
            overlay_drop(r->overlay, h->end);
        }
        r->applied_since += h->end - h->start;
        if (r->nspare < REDO_SPARE_OPS) {
            r->spare[r->nspare++] = (spare_ops_t){ h->ops, h->ops_cap };
        } else {
            free(h->ops);
        }
        free(h->rec);
        r->hfirst++;
    }
    if (r->hfirst == r->nheld) {
        r->hfirst = r->nheld = 0;
    }
    return 0;
}

int redo_sync_failed(redo_t *r, redo_failure_t *f, char *err, size_t errlen)
{
    memset(f, 0, sizeof *f);
    /* what the last good sync covered is made as usual */
    if (redo_finish_open_checkpoint(r, err, errlen) != 0 || redo_apply_durable(r, err, errlen) != 0) {
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
        overlay_move(r->overlay, r->held[i].end, clog_end(r->log), r->held[i].ops, r->held[i].nops);
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
    if (redo_checkpoint_at(r, f->to > r->applied ? f->to : r->applied, 0, err, errlen) != 0) {
        return -1;
    }
    return redo_apply_durable(r, err, errlen);
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
