/*
 * levels/journey.c — a message found on its SEND journey by its where-slot
 * (design-commitlog.md §2, 4a.5), for GET, FIND, REVOKE and the lane's
 * check: id → its segment (id − id mod segment size) → its record at id (its
 * ordinal) → the slot of that ordinal, which must name the id back → the
 * queue and CQ index it names, whose entry must name the id too. A payload
 * that holds a well-formed fake record at a guessable offset is refused by
 * the slot: the fake's ordinal holds another id. A damaged record's slot is
 * found by a search of the segment's slots for the id
 * (store_where_slot_search): revoked, the message is gone.
 *
 * A message in its topic's log (slot queue 0), a revoked one, one sent
 * before the log (its id below the log) is "not on a CQ journey" and the
 * caller reads 'X'; so is, for GET and REVOKE, one on a level still walked
 * by `L` (on_l, said in the answer: its `L` entry and 'X' are its truth).
 *
 * Reads go through the redo (held batches over the files): the caller has
 * committed what is pending (store_read_begin), or knows that the pending
 * batch holds nothing of the id.
 *
 * Threading: the store's owner thread.
 */
#include "levels/store_internal.h"
#include "base/err.h"

#include <inttypes.h>
#include <stdio.h>

int store_where_slot_search(store_t *s, uint64_t id, uint32_t *ordinal, slot_t *out)
{
    if (s->redo == NULL || id == 0) {
        return 0;
    }
    uint64_t base = id - id % s->opt.segment_bytes;
    uint64_t low = 0, high = id - base + 1; /* a record takes at least a byte: its ordinal is below its offset + 1 */
    while (low < high) {                    /* the lowest ordinal whose slot's id is not below id */
        uint64_t mid = low + (high - low) / 2;
        slot_t sl;
        size_t got = 0;
        char why[256];
        if (redo_slot_read(s->redo, base, mid, 1, &sl, &got, why, sizeof why) != 0 || got == 0) {
            high = mid; /* past the segment's slots (or unreadable: then not found) */
        } else if (sl.id != 0 && sl.id < id) {
            low = mid + 1;
        } else if (sl.id == id) {
            *ordinal = (uint32_t)mid;
            *out = sl;
            return 1;
        } else {
            high = mid; /* a later record's, or never written (0): the search ends without it */
        }
    }
    return 0;
}

int store_where_slot_revoked(store_t *s, uint64_t id)
{
    slot_t sl;
    uint32_t ordinal;
    return store_where_slot_search(s, id, &ordinal, &sl) && (sl.flags & SLOT_REVOKED);
}

int store_where_slot_find(store_t *s, uint64_t id, clog_reader_t *rd, store_where_t *w, char *err, size_t errlen)
{
    if (s->redo == NULL || id == 0) {
        return 0;
    }
    char why[512];
    int rc = clog_read(redo_log(s->redo), id, rd, &w->rec, why, sizeof why);
    if (rc == CLOG_NOT_RECORD) {
        return 0;
    }
    if (rc != 0 || msg_record_ordinal(w->rec.data, w->rec.len, &w->ordinal, why, sizeof why) != 0) {
        if (store_where_slot_revoked(s, id)) {
            return 0; /* a damaged record revoked (design-commitlog.md, "REVOKE of a damaged record"): gone */
        }
        return err_set(err, errlen, "the commit-log record of %016" PRIx64 " in %s: %s", id, s->path, why);
    }
    size_t got = 0;
    if (redo_slot_read(s->redo, id - id % s->opt.segment_bytes, w->ordinal, 1, &w->sl, &got, why, sizeof why) != 0) {
        return err_set(err, errlen, "the where-slot of %016" PRIx64 " in %s: %s", id, s->path, why);
    }
    if (got == 0 || w->sl.id != id || (w->sl.flags & SLOT_REVOKED)) {
        return 0; /* not this message's record (a payload's fake, a recycled life), or revoked */
    }
    return 1;
}

int store_journey_find(store_t *s, uint64_t id, clog_reader_t *rd, msg_t *m, store_journey_t *out, char *err,
                       size_t errlen)
{
    store_where_t w;
    int named = store_where_slot_find(s, id, rd, &w, err, errlen);
    if (named <= 0) {
        return named;
    }
    char why[512];
    int level = w.sl.queue == STORE_LANE_QUEUE ? 1 : (int)w.sl.queue;
    if (w.sl.queue == 0 || level > s->opt.levels.count) {
        return 0; /* in the topic log: 'X' says where */
    }
    cq_entry_t e;
    if (redo_cq_read(s->redo, w.sl.queue, w.sl.cq_index, 1, &e, why, sizeof why) != 0) {
        return err_set(err, errlen,
                       "the consume-queue entry of %016" PRIx64 " (queue %" PRIu32 ", index %" PRIu64 ") in %s: %s", id,
                       w.sl.queue, w.sl.cq_index, s->path, why);
    }
    if (e.log_offset != id) {
        return err_set(err, errlen,
                       "the where-slot of %016" PRIx64 " names queue %" PRIu32 " index %" PRIu64
                       ", whose entry names %016" PRIx64 " (corrupt)",
                       id, w.sl.queue, w.sl.cq_index, e.log_offset);
    }
    if (m != NULL && msg_decode_record(w.rec.data, w.rec.len, id, w.ordinal, m, why, sizeof why) != 0) {
        return err_set(err, errlen, "the commit-log record of %016" PRIx64 " in %s: %s", id, s->path, why);
    }
    out->level = level;
    out->on_l = s->levels[level].on_l;
    out->hop_due = e.due;
    out->j.ordinal = w.ordinal;
    out->j.queue = w.sl.queue;
    out->j.cq_index = w.sl.cq_index;
    return 1;
}

int store_journey_at(store_t *s, uint64_t id, uint32_t queue, uint64_t cq_index, char *err, size_t errlen)
{
    clog_reader_t rd = { 0 };
    store_journey_t at;
    int found = store_journey_find(s, id, &rd, NULL, &at, err, errlen);
    clog_reader_free(&rd);
    if (found <= 0) {
        return found;
    }
    return at.j.queue == queue && at.j.cq_index == cq_index;
}

/* Queue q's window [from, to) judged entry by entry: each entry whose
 * message's slot names it back is a journey, passed to fn (on level l). */
static int queue_each(store_t *s, uint32_t q, int l, uint64_t from, uint64_t to, store_journey_fn fn, void *ctx,
                      char *err, size_t errlen)
{
    clog_reader_t rd = { 0 };
    cq_entry_t run[64];
    uint64_t run_at = from;
    size_t run_n = 0;
    int rc = 0;
    for (uint64_t i = from; i < to && rc == 0; i++) {
        if (i >= run_at + run_n) {
            char why[512];
            run_at = i;
            run_n = to - i < 64 ? (size_t)(to - i) : 64;
            if (redo_cq_read(s->redo, q, i, run_n, run, why, sizeof why) != 0) {
                rc = err_set(err, errlen, "%s, CQ index %" PRIu64 ": %s",
                             q == STORE_LANE_QUEUE ? "the lane" : "a level", i, why);
                break;
            }
        }
        msg_t m;
        store_journey_t at;
        int found = store_journey_find(s, run[i - run_at].log_offset, &rd, &m, &at, err, errlen);
        if (found < 0) {
            char inner[512];
            snprintf(inner, sizeof inner, "%s", err);
            rc = q == STORE_LANE_QUEUE ? err_set(err, errlen, "the remainder lane, CQ index %" PRIu64 ": %s", i, inner)
                                       : err_set(err, errlen, "level %d, CQ index %" PRIu64 ": %s", l, i, inner);
            break;
        }
        if (found && at.j.queue == q && at.j.cq_index == i) {
            rc = fn(ctx, &m, &at, err, errlen);
        }
    }
    clog_reader_free(&rd);
    return rc;
}

int store_journeys_queue(store_t *s, uint32_t q, store_journey_fn fn, void *ctx, char *err, size_t errlen)
{
    int l = q == STORE_LANE_QUEUE ? 1 : (int)q;
    if (s->redo == NULL || l < 1 || l > s->opt.levels.count || s->levels[l].on_l) {
        return 0;
    }
    if (q != STORE_LANE_QUEUE) {
        return queue_each(s, q, l, s->levels[l].cq_head, s->levels[l].cq_tail, fn, ctx, err, errlen);
    }
    return s->lane == NULL ? 0 : queue_each(s, q, 1, lane_head(s->lane), lane_tail(s->lane), fn, ctx, err, errlen);
}

int store_journeys_each(store_t *s, store_journey_fn fn, void *ctx, char *err, size_t errlen)
{
    int rc = 0;
    for (int l = 1; l <= s->opt.levels.count && rc == 0; l++) {
        rc = store_journeys_queue(s, (uint32_t)l, fn, ctx, err, errlen);
    }
    return rc != 0 ? rc : store_journeys_queue(s, STORE_LANE_QUEUE, fn, ctx, err, errlen);
}
