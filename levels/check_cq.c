/*
 * levels/check_cq.c — store_check's comparison of the consume queues with
 * the journeys on the levels (design-commitlog.md 4a.3; 4a.5: on a level
 * served from its CQ a journey has no `L` entry, and store_check hands it
 * over as its CQ gave it, journey.c). Every SEND journey sits in the CQ
 * window [head, tail) of its level, or of the
 * remainder lane, at the index its 'X' journey (or its CQ) names, with the same id and
 * due; its record in the log holds the message its `L` entry holds; its
 * where-slot names the entry back (id, queue, index, no flag). Every other
 * entry of a window is dead: its slot is revoked or names another place, or
 * its record is gone with a recycled segment (entries leave a level CQ out
 * of append order: store_level_cq_done). Every where-slot naming a place on
 * a level or the lane names an entry of the window that names it back
 * (compare_slots). Each segment's live count ('S',
 * segcount.c) is the number of its messages on their journey. Messages
 * whose 'X' record keeps no journey (sent before 4a.3, or restored from a
 * copy without the log) are not compared. Errors name the level (or the
 * lane), the CQ index and the id.
 *
 * The CQ and slot files are read directly, so the redo's buffers must be in
 * them: the caller has passed the read barrier, and this takes a checkpoint
 * first (it writes the buffers). Not for hot paths: one read per entry.
 *
 * Threading: the store's owner thread.
 */
#include "levels/store_internal.h"
#include "base/alloc.h"
#include "base/err.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct check_cq {
    store_t *s;
    check_cq_entry_t *e[LVL_MAX_LEVELS + 2]; /* per queue: the L entries whose journey names it, in scan order */
    size_t n[LVL_MAX_LEVELS + 2], cap[LVL_MAX_LEVELS + 2];
    clog_reader_t rd;    /* the records read (check_cq_add) */
    uint64_t *topic_ids; /* the messages of the topic CQs (check_cq_add_topic) */
    size_t n_topic, cap_topic;
};

void check_cq_add_topic(check_cq_t *c, uint64_t id)
{
    if (c->n_topic == c->cap_topic) {
        c->cap_topic = c->cap_topic ? c->cap_topic * 2 : 256;
        c->topic_ids = xrealloc(c->topic_ids, c->cap_topic * sizeof *c->topic_ids);
    }
    c->topic_ids[c->n_topic++] = id;
}

check_cq_t *check_cq_new(store_t *s)
{
    check_cq_t *c = xcalloc(1, sizeof *c);
    c->s = s;
    return c;
}

void check_cq_free(check_cq_t *c)
{
    if (c == NULL) {
        return;
    }
    for (size_t q = 0; q < LVL_MAX_LEVELS + 2; q++) {
        free(c->e[q]);
    }
    clog_reader_free(&c->rd);
    free(c->topic_ids);
    free(c);
}

static int same_str(msg_str_t a, msg_str_t b)
{
    return a.len == b.len && (a.len == 0 || memcmp(a.ptr, b.ptr, a.len) == 0);
}

/* The message's record in the log against its `L` copy m: the record at
 * m's id, at the ordinal its journey names, holding the same message (what
 * 4a.4 will deliver from). 0, or -1 with err naming the level and the id. */
static int compare_record(check_cq_t *c, int level, const msg_t *m, uint32_t ordinal, char *err, size_t errlen)
{
    clog_record_t r;
    msg_t rm;
    char why[512];
    int rc = clog_read(redo_log(c->s->redo), m->id, &c->rd, &r, why, sizeof why);
    if (rc != 0 || msg_decode_record(r.data, r.len, m->id, ordinal, &rm, why, sizeof why) != 0) {
        return err_set(err, errlen, "message %016" PRIx64 " on level %d: its commit-log record: %s", m->id, level,
                       rc == CLOG_NOT_RECORD ? "not in the log" : why);
    }
    if (!same_str(rm.topic, m->topic) || !same_str(rm.key, m->key) || !same_str(rm.payload, m->payload) ||
        rm.created_ms != m->created_ms || rm.due_ms != m->due_ms || rm.dest != m->dest) {
        return err_set(err, errlen,
                       "message %016" PRIx64 " on level %d: its commit-log record differs from its level entry "
                       "(topic, key, payload, created or due)",
                       m->id, level);
    }
    return 0;
}

int check_cq_add(check_cq_t *c, int level, uint64_t due, const msg_t *m, const idx_journey_t *given, char *err,
                 size_t errlen)
{
    uint64_t id = m->id;
    idx_journey_t j;
    if (given != NULL) {
        j = *given;
    } else {
        int has = idx_journey_read(c->s, id, &j, err, errlen);
        if (has <= 0) {
            return has;
        }
    }
    if (j.queue != (uint32_t)level && j.queue != STORE_LANE_QUEUE) {
        return err_set(err, errlen, "message %016" PRIx64 " on level %d: its index names CQ %" PRIu32 " index %" PRIu64,
                       id, level, j.queue, j.cq_index);
    }
    if (compare_record(c, level, m, j.ordinal, err, errlen) != 0) {
        return -1;
    }
    uint32_t q = j.queue;
    if (c->n[q] == c->cap[q]) {
        c->cap[q] = c->cap[q] ? 2 * c->cap[q] : 64;
        c->e[q] = xrealloc(c->e[q], c->cap[q] * sizeof *c->e[q]);
    }
    c->e[q][c->n[q]++] = (check_cq_entry_t){ id, due, j.cq_index, j.ordinal, level };
    return 0;
}

static const char *queue_name(uint32_t q, char *buf, size_t len)
{
    if (q == STORE_LANE_QUEUE) {
        return "the remainder lane";
    }
    snprintf(buf, len, "level %" PRIu32, q);
    return buf;
}

static int by_index(const void *a, const void *b)
{
    const check_cq_entry_t *x = a, *y = b;
    return x->cq_index < y->cq_index ? -1 : x->cq_index > y->cq_index;
}

/* Queue q's window [head, tail) against its L entries (see atop), taken in
 * index order: entries are appended in journey order, which is neither the
 * lane's due order nor quite a level's (store_level_cq_done). */
static int compare_queue(check_cq_t *c, uint32_t q, uint64_t head, uint64_t tail, char *err, size_t errlen)
{
    store_t *s = c->s;
    char qn[32], why[512];
    check_cq_entry_t *want = c->e[q];
    size_t n = c->n[q];
    if (n > 0) {
        qsort(want, n, sizeof *want, by_index);
    }
    if (tail - head < n) {
        return err_set(err, errlen, "%s: its CQ holds %" PRIu64 " entries for %zu messages",
                       queue_name(q, qn, sizeof qn), tail - head, n);
    }
    if (tail == head) {
        return 0;
    }
    cq_t *cq = NULL;
    if (cq_open(s->path, q, head, tail, &cq, why, sizeof why) != 0) {
        return err_set(err, errlen, "%s: %s", queue_name(q, qn, sizeof qn), why);
    }
    int rc = 0;
    size_t at = 0;
    for (uint64_t i = head; i < tail && rc == 0; i++) {
        cq_entry_t e;
        slot_t sl;
        if (cq_read(cq, i, 1, &e, why, sizeof why) != 0) {
            rc = err_set(err, errlen, "%s: %s", queue_name(q, qn, sizeof qn), why);
            break;
        }
        const check_cq_entry_t *w = at < n && want[at].cq_index == i ? &want[at] : NULL;
        if (w != NULL) {
            if (e.log_offset != w->id || e.due != w->due) {
                rc = err_set(err, errlen,
                             "%s, CQ index %" PRIu64 ": entry (id %016" PRIx64 ", due %" PRIu64
                             ") but its L entry on level %d is id %016" PRIx64 " due %" PRIu64,
                             queue_name(q, qn, sizeof qn), i, e.log_offset, e.due, w->level, w->id, w->due);
            } else if (store_log_slot_get(s, w->id, w->ordinal, &sl, NULL, why, sizeof why) != 0) {
                rc = err_set(err, errlen, "%s, CQ index %" PRIu64 ": %s", queue_name(q, qn, sizeof qn), i, why);
            } else if (sl.id != w->id || sl.queue != q || sl.cq_index != i || sl.flags != 0) {
                rc = err_set(err, errlen,
                             "%s, CQ index %" PRIu64 ", id %016" PRIx64 ": its where-slot names id %016" PRIx64
                             ", queue %" PRIu32 ", index %" PRIu64 ", flags %" PRIu32,
                             queue_name(q, qn, sizeof qn), i, w->id, sl.id, sl.queue, sl.cq_index, sl.flags);
            }
            at++;
            continue;
        }
        /* no L entry: the message must have left this entry (revoked, or moved on: a lane entry, a level entry
           above the head); when its record is gone too, its segment was recycled at a live count of 0 */
        int gone = 0;
        if (store_log_slot_get(s, e.log_offset, UINT32_MAX, &sl, &gone, why, sizeof why) != 0) {
            rc = err_set(err, errlen, "%s, CQ index %" PRIu64 ", id %016" PRIx64 ", no L entry: %s",
                         queue_name(q, qn, sizeof qn), i, e.log_offset, why);
        } else if (!gone &&
                   (sl.id != e.log_offset || (sl.queue == q && sl.cq_index == i && !(sl.flags & SLOT_REVOKED)))) {
            rc = err_set(err, errlen,
                         "%s, CQ index %" PRIu64 ": entry names id %016" PRIx64
                         ", which has no L entry there and is not revoked (its where-slot: id %016" PRIx64
                         ", queue %" PRIu32 ", index %" PRIu64 ")",
                         queue_name(q, qn, sizeof qn), i, e.log_offset, sl.id, sl.queue, sl.cq_index);
        }
    }
    if (rc == 0 && at != n) {
        rc = err_set(err, errlen,
                     "%s: %zu of its %zu L entries are in its CQ window [%" PRIu64 ", %" PRIu64
                     "); the first missing is id %016" PRIx64 " at index %" PRIu64,
                     queue_name(q, qn, sizeof qn), at, n, head, tail, want[at].id, want[at].cq_index);
    }
    (void)cq_close(cq, NULL, 0);
    return rc;
}

/* Each segment's live count against the journeys added (all queues). */
static int compare_counts(check_cq_t *c, char *err, size_t errlen)
{
    store_t *s = c->s;
    for (size_t i = 0; i < s->n_seg; i++) {
        uint64_t base = s->seg[i].base, seen = 0;
        for (size_t q = 0; q < LVL_MAX_LEVELS + 2; q++) {
            for (size_t k = 0; k < c->n[q]; k++) {
                seen += c->e[q][k].id - c->e[q][k].id % s->opt.segment_bytes == base;
            }
        }
        for (size_t k = 0; k < c->n_topic; k++) {
            seen += c->topic_ids[k] - c->topic_ids[k] % s->opt.segment_bytes == base;
        }
        if (seen != s->seg[i].live) {
            return err_set(err, errlen,
                           "commit-log segment %016" PRIx64 ": its live count says %" PRIu64 " but %" PRIu64
                           " of its messages are on their journey or in a topic CQ",
                           base, s->seg[i].live, seen);
        }
    }
    for (size_t q = 0; q < LVL_MAX_LEVELS + 2; q++) {
        for (size_t k = 0; k < c->n[q]; k++) {
            uint64_t id = c->e[q][k].id;
            if (segcount_live(s, id - id % s->opt.segment_bytes) == 0) {
                return err_set(err, errlen,
                               "message %016" PRIx64 " is on its journey but its commit-log segment %016" PRIx64
                               " has no live count",
                               id, id - id % s->opt.segment_bytes);
            }
        }
    }
    return 0;
}

/* The window [*head, *tail) of queue q (a level or the lane); 0 when q is
 * neither. */
static int queue_window(store_t *s, uint32_t q, uint64_t *head, uint64_t *tail)
{
    const topic_state_t *t = topic_cq_topic(s, q);
    if (t != NULL) {
        *head = t->cq_head;
        *tail = t->cq_tail;
        return 1;
    }
    if (q == STORE_LANE_QUEUE) {
        *head = s->lane_head_written;
        *tail = s->lane != NULL ? lane_tail(s->lane) : 0;
        return 1;
    }
    if (q < 1 || q > (uint32_t)s->opt.levels.count) {
        return 0;
    }
    *head = s->levels[q].cq_head;
    *tail = s->levels[q].cq_tail;
    return 1;
}

/* Whether the where-slot sl, naming a level's or the lane's index below
 * its head, is what a journey dropped by an index rebuild left: the message
 * left that place without its journey (as a format-5 journey off a level
 * walked by `L`) and its 'X' record says where its own copy is now, with no
 * journey (topic_cq.c: such a slot keeps naming its old place). A journey
 * that lost its place has no such record: its slot was its home. 1, 0, or
 * -1 with err. */
static int slot_left_by_dropped_journey(store_t *s, const slot_t *sl, char *err, size_t errlen)
{
    char *buf = NULL;
    idx_home_t h;
    int found = idx_home_read(s, sl->id, &buf, &h, err, errlen);
    if (found <= 0) {
        return found; /* (idx_home_read frees buf when it fails) */
    }
    int left = h.place.tag != 0 && !h.has_journey;
    leveldb_free(buf);
    return left;
}

/* Every where-slot of a segment with messages on their journey, against the
 * entry it names: a slot naming a place on a level or the lane (not revoked)
 * must name an index of that queue's window whose entry names the slot's
 * message back — the other half of compare_queue, which starts from the
 * entries (a journey whose entry was overwritten by another message's is
 * found only here) — unless it names a place below the head its message
 * left without a journey (slot_left_by_dropped_journey). */
static int compare_slots(check_cq_t *c, char *err, size_t errlen)
{
    store_t *s = c->s;
    char why[512], qn[32];
    for (size_t i = 0; i < s->n_seg; i++) {
        if (s->seg[i].live == 0) {
            continue;
        }
        uint64_t base = s->seg[i].base;
        slot_file_t *f = NULL;
        if (slot_file_open(s->path, base, 0, &f, why, sizeof why) != 0) {
            return err_set(err, errlen, "the where-slots of commit-log segment %016" PRIx64 ": %s", base, why);
        }
        int rc = 0;
        for (uint64_t k = 0; k < slot_count(f) && rc == 0; k++) {
            slot_t sl;
            uint64_t head, tail;
            cq_entry_t e;
            int left;
            if (slot_get(f, k, &sl, why, sizeof why) != 0) {
                rc = err_set(err, errlen, "the where-slots of commit-log segment %016" PRIx64 ": %s", base, why);
            } else if (sl.id == 0 || sl.queue == 0 || (sl.flags & SLOT_REVOKED) ||
                       !queue_window(s, sl.queue, &head, &tail) ||
                       (sl.cq_index < head && sl.queue >= STORE_TOPIC_QUEUE_FIRST)) {
                continue; /* (a topic CQ's message below its head: collected, its slot kept) */
            } else if (sl.cq_index < head && (left = slot_left_by_dropped_journey(s, &sl, err, errlen)) != 0) {
                rc = left < 0 ? -1 : 0; /* its 'X' record holds it: the slot names where it was */
            } else if (sl.cq_index < head || sl.cq_index >= tail) {
                rc = err_set(err, errlen,
                             "the where-slot of %016" PRIx64 " names %s, CQ index %" PRIu64
                             ", outside its window [%" PRIu64 ", %" PRIu64 ")",
                             sl.id, queue_name(sl.queue, qn, sizeof qn), sl.cq_index, head, tail);
            } else if (redo_cq_read(s->redo, sl.queue, sl.cq_index, 1, &e, why, sizeof why) != 0) {
                rc = err_set(err, errlen, "%s, CQ index %" PRIu64 ": %s", queue_name(sl.queue, qn, sizeof qn),
                             sl.cq_index, why);
            } else if (e.log_offset != sl.id) {
                rc = err_set(err, errlen,
                             "%s, CQ index %" PRIu64 ": entry (id %016" PRIx64 ") but the where-slot of %016" PRIx64
                             " (ordinal %" PRIu64 ") names that index",
                             queue_name(sl.queue, qn, sizeof qn), sl.cq_index, e.log_offset, sl.id, k);
            }
        }
        (void)slot_file_close(f, NULL, 0);
        if (rc != 0) {
            return -1;
        }
    }
    return 0;
}

int check_cq_end(check_cq_t *c, char *err, size_t errlen)
{
    store_t *s = c->s;
    if (s->redo == NULL) {
        return 0;
    }
    char why[512];
    if (redo_checkpoint(s->redo, why, sizeof why) != 0) { /* the CQ and slot buffers into their files */
        return err_set(err, errlen, "checkpoint of the commit log of %s: %s", s->path, why);
    }
    for (int l = 1; l <= s->opt.levels.count; l++) {
        if (compare_queue(c, (uint32_t)l, s->levels[l].cq_head, s->levels[l].cq_tail, err, errlen) != 0) {
            return -1;
        }
    }
    if (s->lane != NULL &&
        compare_queue(c, STORE_LANE_QUEUE, s->lane_head_written, lane_tail(s->lane), err, errlen) != 0) {
        return -1;
    }
    if (compare_slots(c, err, errlen) != 0) {
        return -1;
    }
    return compare_counts(c, err, errlen);
}
