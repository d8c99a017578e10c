/*
 * levels/level_move.c — the due move (store_move_due) and what it answers
 * about the levels (store_next_due, store_level_info). The level whose head
 * is due first is served up to where another level's head comes first, so
 * catching up after downtime keeps global due order, not level order; each
 * due message leaves its level for its next hop, its topic's log or its
 * group's retry-ready queue (store_route_due). A level served from its CQ
 * (design-commitlog.md 4a.4) is read from its CQ head (serve_level_cq), each
 * message from its record in the log, trusted when its where-slot names the
 * entry back, beside the remainder lane's tops (level 1) and the level's
 * retries, earliest first; a level walked by `L` (on_l) and the retries are
 * level_walk.c's. A level that fails at its head before taking anything is
 * damaged: skipped, while the others go on, until it is tried again
 * (opt.damage_retry_ms).
 *
 * Threading: one thread at a time (the broker's storage thread).
 */
#include "levels/store_internal.h"
#include "base/err.h"

#include <inttypes.h>
#include <stdio.h>

/* The earliest due of level l's heads (store_level_first_key): UINT64_MAX
 * when it holds nothing. A lower bound: a dead CQ head or lane top, a head
 * moved by a note, a walk's stop. */
static uint64_t level_head_due(const store_t *s, int l)
{
    uint64_t due, seq;
    return store_level_first_key(s, l, &due, &seq) ? due : UINT64_MAX;
}

/* When level l's head may be served: its due time, or for a damaged level
 * the time it is tried again (UINT64_MAX: no head). */
static uint64_t level_serve_at(const store_t *s, int l)
{
    const level_state_t *ls = &s->levels[l];
    uint64_t due = level_head_due(s, l);
    if (due == UINT64_MAX) {
        return UINT64_MAX;
    }
    return ls->damaged && ls->damaged_until > due ? ls->damaged_until : due;
}

uint64_t store_next_due(const store_t *s)
{
    uint64_t best = UINT64_MAX;
    for (int l = 1; l <= s->opt.levels.count; l++) {
        uint64_t at = level_serve_at(s, l);
        if (at < best) {
            best = at;
        }
    }
    return best;
}

uint64_t store_level_damage_events(const store_t *s)
{
    return s->level_damage_events;
}

uint64_t store_lane_full_hops(const store_t *s)
{
    return s->lane_full_hops;
}

int store_level_info(const store_t *s, int level, store_level_info_t *out)
{
    if (level < 1 || level > s->opt.levels.count) {
        return -1;
    }
    const level_state_t *ls = &s->levels[level];
    out->level = level;
    out->delay_ms = s->opt.levels.delay_ms[level];
    out->depth = ls->depth;
    uint64_t head = level_head_due(s, level);
    out->head_due_ms = head != UINT64_MAX ? head : 0;
    out->damaged = ls->damaged;
    out->damage = ls->damaged ? ls->damage : "";
    return 0;
}

/* Where m, leaving its level at hop_due, goes next: 1 when it hops, onto
 * level *next at *next_due (after now_ms), *remainder when that hop waits a
 * remainder (the lane's); 0 when it arrives (its journey's end). */
static int next_hop(const lvl_table_t *t, const msg_t *m, uint64_t hop_due, uint64_t now_ms, int *next,
                    uint64_t *next_due, int *remainder)
{
    while (m->due_ms > hop_due) {
        *next = lvl_next_hop(t, m->due_ms - hop_due);
        *next_due = hop_due + lvl_hop_ms(t, *next, m->due_ms - hop_due);
        if (*next_due > now_ms) {
            *remainder = *next_due - hop_due < t->delay_ms[*next];
            return 1;
        }
        hop_due = *next_due; /* catching up (clock jump, downtime): that hop is due too */
    }
    return 0;
}

/* One due level-head message m (at hop_due, seq) leaves its level: next hop, topic
 * log or retry-ready. topic: store_msg_topic(m). Returns 1 when it became ready, 0 when it
 * hopped or was dropped, -1 on a read error (the index's, dropping a retry).
 * A next hop that waits a remainder on a full lane (j: a SEND journey) is not
 * made: m goes back on its level for another of the level's delay (its
 * entry in the level's due order, as a fresh enqueue), late but never lost,
 * and tries again then; a level's head is never held back, so the lane's own
 * remainders, which may lie behind it on the same level, keep leaving. */
int store_route_due(store_t *s, topic_state_t *topic, msg_t *m, int level, uint64_t hop_due, uint64_t seq,
                    uint64_t now_ms, idx_journey_t *j, char *err, size_t errlen)
{
    int next, remainder;
    uint64_t next_due;
    char why[256];
    if (next_hop(&s->opt.levels, m, hop_due, now_ms, &next, &next_due, &remainder)) {
        if (j != NULL && remainder && store_lane_room(s, 1, why, sizeof why) != 0) {
            level_state_t *ls = &s->levels[level];
            uint64_t enq = now_ms > ls->last_enqueue_ms ? now_ms : ls->last_enqueue_ms;
            ls->last_enqueue_ms = enq;
            s->lane_full_hops++;
            store_level_insert(s, topic, level, enq + s->opt.levels.delay_ms[level], m, j, 0);
            return 0;
        }
        store_level_insert(s, topic, next, next_due, m, j, remainder);
        return 0;
    }
    if (m->dest == MSG_DEST_TOPIC) {
        store_topic_append(s, topic, m, seq, now_ms, j); /* its record stays counted: the topic CQ reads it */
        return 1;
    }
    group_state_t *g = store_group_get(s, m->group.ptr, m->group.len);
    if (g == NULL || g->gen != m->group_gen) { /* its group was deleted: drop */
        return idx_copy_gone(s, map_get(&s->topics, m->topic.ptr, m->topic.len), m->id, m->group.ptr, m->group.len,
                             m->group_gen, 0, err, errlen);
    }
    g->retry_delayed--;
    store_retry_append(s, g, m, now_ms);
    return 1;
}

/* The due level whose head comes first (0: none is due), and the bound up to
 * which it may be served: another level's head, or now. A damaged level
 * (level_state_t) is neither served nor a bound until it is tried again. */
static int first_due_level(const store_t *s, uint64_t now_ms, uint64_t *bound)
{
    const lvl_table_t *t = &s->opt.levels;
    int l = 0;
    uint64_t head[LVL_MAX_LEVELS + 1];
    for (int i = 1; i <= t->count; i++) {
        head[i] = level_head_due(s, i);
        if (level_serve_at(s, i) <= now_ms && (l == 0 || head[i] < head[l])) {
            l = i;
        }
    }
    *bound = now_ms;
    for (int i = 1; l != 0 && i <= t->count; i++) {
        if (i != l && level_serve_at(s, i) <= now_ms && head[i] < *bound) {
            *bound = head[i];
        }
    }
    return l;
}

/* Level l's due move failed at its head, before it took anything (err says
 * why): skipped until opt.damage_retry_ms from now; counted once
 * until it moves again. */
static void level_mark_damaged(store_t *s, int l, uint64_t now_ms, const char *err)
{
    level_state_t *ls = &s->levels[l];
    if (!ls->damaged) {
        ls->damaged = 1;
        s->level_damage_events++;
    }
    ls->damaged_until = now_ms + s->opt.damage_retry_ms;
    snprintf(ls->damage, sizeof ls->damage, "%s", err);
}

/* An entry of the due move routed on (ready: store_route_due's 1 when it became
 * ready, 0 when it hopped, -1 when it failed): counted in *moved, and in
 * *ready_out (when not NULL) when ready. -1 for a failed one (nothing
 * counted), else 0. */
int store_count_moved(int ready, int *moved, int *ready_out)
{
    if (ready < 0) {
        return -1;
    }
    if (ready && ready_out) {
        (*ready_out)++;
    }
    (*moved)++;
    return 0;
}

/* ---- the due move from the CQs (design-commitlog.md 4a.4) --------------------------- */

#define MOVE_RUN 64 /* CQ entries read in one run */

/* The log's read-ahead window of a due move. Small: level 1's CQ and the
 * lane hold hops of messages sent seconds apart beside new SENDs, so the
 * next record is seldom in the window, and each refill copies the whole
 * window (a 64 KiB one was ~1 refill a record in steady-ms: the storage
 * thread's CPU +45 % over main's, design-commitlog.md "steady-ms tail
 * (s45)"); records in append order still share a refill. A record longer
 * than the window is read whole (clog_read). */
#define MOVE_LOG_WINDOW (4 << 10)

/* What a due move reads the level CQs, the lane, the slots and the log
 * through: a run of one CQ, a run of one slot file (slot_run_t), and a read-ahead window
 * of the log (MOVE_LOG_WINDOW). Valid for one store_move_due: it commits the pending batch
 * first, so everything read is in the log, the overlay or the files, and
 * nothing it reads is appended to meanwhile. */
typedef struct move_reads {
    store_t *s;
    clog_reader_t rd;
    uint32_t cq_queue;
    uint64_t cq_at;
    size_t cq_n;
    cq_entry_t cq[MOVE_RUN];
    slot_run_t slots;
} move_reads_t;

/* The entry at index of queue (index < end: what the move may read). */
static int move_cq_entry(move_reads_t *r, uint32_t queue, uint64_t index, uint64_t end, cq_entry_t *e, char *err,
                         size_t errlen)
{
    if (r->cq_queue != queue || index < r->cq_at || index >= r->cq_at + r->cq_n) {
        size_t n = end - index < MOVE_RUN ? (size_t)(end - index) : MOVE_RUN;
        char why[512];
        if (redo_cq_read(r->s->redo, queue, index, n, r->cq, why, sizeof why) != 0) {
            r->cq_n = 0;
            return err_set(err, errlen, "the consume queue of level %" PRIu32 " in %s: %s", queue, r->s->path, why);
        }
        r->cq_queue = queue;
        r->cq_at = index;
        r->cq_n = n;
    }
    *e = r->cq[index - r->cq_at];
    return 0;
}

/* The message the entry e at index of queue names, when it is live there
 * (store_entry_record: its record read from the log and its where-slot naming
 * the entry back, not revoked). 1 with *m (views into r's buffer, valid until
 * the next read) and *j, 0 when it is dead (its segment recycled, its slot
 * naming another place: moved on or revoked), -1 with err (a read failed, a
 * damaged record). */
static int move_journey(move_reads_t *r, uint32_t queue, uint64_t index, const cq_entry_t *e, msg_t *m,
                        idx_journey_t *j, char *err, size_t errlen)
{
    uint32_t ordinal;
    char why[512];
    switch (store_entry_record(r->s, &r->rd, &r->slots, queue, index, e->log_offset, m, &ordinal, why, sizeof why)) {
    case STORE_ENTRY_RECORD_LIVE:
        j->ordinal = ordinal;
        j->queue = queue;
        j->cq_index = index;
        return 1;
    case STORE_ENTRY_RECORD_NO_RECORD:
    case STORE_ENTRY_RECORD_NOT_NAMED:
        return 0;
    case STORE_ENTRY_RECORD_SLOT_FAILED:
        return err_set(err, errlen, "%s", why); /* store_slot_run_get's words: they name the segment */
    case STORE_ENTRY_RECORD_UNREADABLE:
    case STORE_ENTRY_RECORD_UNDECODABLE:
        break;
    }
    return err_set(err, errlen, "the record of %016" PRIx64 " (consume queue %" PRIu32 ", entry %" PRIu64 ") in %s: %s",
                   e->log_offset, queue, index, r->s->path, why);
}

/* lane_next_live's check for the due move: an entry the move's own hops
 * pushed (at or past lane_move_tail: its slot is in the pending batch) is
 * live; one noted gone is dead; any other is judged by move_journey. */
static int lane_top_by_slot(void *ctx, const lane_entry_t *e, char *err, size_t errlen)
{
    move_reads_t *r = ctx;
    store_t *s = r->s;
    if (map_count(&s->lane_left) > 0 && map_del(&s->lane_left, &e->id, sizeof e->id) != NULL) {
        return LANE_DEAD;
    }
    if (e->cq_index >= s->lane_move_tail) {
        return LANE_LIVE;
    }
    cq_entry_t ce = { e->id, e->due };
    msg_t m;
    idx_journey_t j;
    int live = move_journey(r, STORE_LANE_QUEUE, e->cq_index, &ce, &m, &j, err, errlen);
    return live < 0 ? -1 : live ? LANE_LIVE : LANE_DEAD;
}

/* A live journey's entry (e at index of queue, level l's) leaves: routed on
 * (store_route_due: next hop, or arrival under a fresh topic-log seq, which writes
 * its first 'X'). 1 when it became ready, 0 when it hopped, -1 with err. */
static int move_journey_on(store_t *s, int l, const cq_entry_t *e, msg_t *m, idx_journey_t *j, uint64_t now_ms,
                           char *err, size_t errlen)
{
    level_state_t *ls = &s->levels[l];
    ls->depth--;
    ls->pops_since_compact++;
    store_mark_level(s, l);
    topic_state_t *topic = store_msg_topic(s, m);
    store_topic_state_delayed_add(s, topic, -1);
    return store_route_due(s, topic, m, l, e->due, 0, now_ms, j, err, errlen); /* no 'X' yet: written at arrival */
}

/* Level l's CQ head moved past index (taken or dead): a note of it dropped,
 * and the head's due known when the next entry is one the move appended. */
static void cq_head_past(level_state_t *ls, uint64_t index)
{
    if (map_count(&ls->cq_done) > 0) {
        (void)map_del(&ls->cq_done, &index, sizeof index);
    }
    ls->cq_head = index + 1;
    if (ls->cq_head == ls->cq_move_tail && ls->cq_head < ls->cq_tail) {
        ls->cq_head_due = ls->cq_move_first_due;
    }
}

/* Serve level l (without on_l) up to bound (or max moves in all): from its
 * CQ head, the lane's top (level 1: the remainders wait on its `L` range)
 * and its retries, the earliest first. A dead CQ head is passed whatever its
 * due (a level CQ written before 4a.4 need not be in due order); a live one
 * past bound stops the CQ with its due known. */
static int serve_level_cq(store_t *s, move_reads_t *r, int l, uint64_t bound, uint64_t now_ms, int max, int *moved,
                          int *ready_out, char *err, size_t errlen)
{
    level_state_t *ls = &s->levels[l];
    uint64_t head_before = ls->cq_head;
    int rc = 0, read_failed = 0, moved_before = *moved;
    while (*moved < max && s->batch_bytes < STORE_BATCH_MAX_BYTES) {
        /* the lane's top judged first: the CQ head's message read below stays in r's buffer */
        lane_entry_t top = { UINT64_MAX, 0, 0 };
        int lane_live = 0;
        if (l == 1 && s->lane != NULL) {
            lane_live = store_lane_next_live(s, lane_top_by_slot, r, &top, err, errlen);
            if (lane_live < 0) {
                rc = read_failed = -1;
                break;
            }
            if (!lane_live || top.cq_index >= s->lane_move_tail) {
                top.due = UINT64_MAX;
            }
        }
        cq_entry_t e = { 0, UINT64_MAX };
        msg_t m;
        idx_journey_t j;
        int cq_live = 0;
        while (ls->cq_head < ls->cq_move_tail) { /* the CQ head: the first live entry, or one due past bound */
            if (move_cq_entry(r, (uint32_t)l, ls->cq_head, ls->cq_move_tail, &e, err, errlen) != 0) {
                rc = read_failed = -1;
                break;
            }
            ls->cq_head_due = e.due;
            cq_live = move_journey(r, (uint32_t)l, ls->cq_head, &e, &m, &j, err, errlen);
            if (cq_live != 0) {
                break;
            }
            cq_head_past(ls, ls->cq_head);
            e.due = UINT64_MAX;
        }
        if (rc != 0 || cq_live < 0) {
            rc = read_failed = -1;
            break;
        }
        uint64_t retry_due = ls->retries > 0 && ls->has_head ? ls->head_due : UINT64_MAX;
        uint64_t first = e.due < top.due ? e.due : top.due;
        if (retry_due <= first && retry_due <= bound) {
            int before = *moved;
            if (store_serve_retries(s, l, first < bound ? first : bound, now_ms, max, moved, ready_out, err, errlen) !=
                0) {
                rc = -1;
                break;
            }
            if (*moved == before && ls->has_head && ls->head_due <= retry_due) {
                break; /* no progress (a full batch): the next call goes on */
            }
            continue;
        }
        if (first > bound) {
            break;
        }
        int ready;
        if (e.due <= top.due) { /* cq_live: m and j read above */
            uint64_t index = ls->cq_head;
            ready = move_journey_on(s, l, &e, &m, &j, now_ms, err, errlen);
            cq_head_past(ls, index);
        } else {
            cq_entry_t le = { top.id, top.due };
            int live = move_journey(r, STORE_LANE_QUEUE, top.cq_index, &le, &m, &j, err, errlen);
            if (live < 0) {
                rc = read_failed = -1;
                break;
            }
            ready = live ? move_journey_on(s, l, &le, &m, &j, now_ms, err, errlen) : 0;
            store_lane_pop(s);
        }
        if (store_count_moved(ready, moved, ready_out) != 0) {
            rc = -1;
            break;
        }
    }
    if (read_failed && *moved > moved_before && !s->broken) {
        rc = 0; /* the heads taken are whole: the damaged one is the head now, and fails the next turn at once */
    }
    cq_entry_t e;
    if (rc == 0 && ls->cq_head < ls->cq_move_tail &&
        move_cq_entry(r, (uint32_t)l, ls->cq_head, ls->cq_move_tail, &e, err, errlen) == 0) {
        ls->cq_head_due = e.due; /* the next one's due known (store_next_due) */
    }
    if (ls->cq_head !=
        head_before) { /* with the entries taken, also when the walk then failed (they are in the batch) */
        store_log_cq_head(s, (uint32_t)l, ls->cq_head);
        store_mark_level(s, l);
    }
    return rc;
}

int store_move_due(store_t *s, uint64_t now_ms, int max, int *moved, int *ready_out, char *err, size_t errlen)
{
    *moved = 0;
    if (ready_out) {
        *ready_out = 0;
    }
    if (store_read_begin(s, err, errlen) != 0) { /* commits what is pending: the reads below see it */
        return -1;
    }
    int pending_before = s->pending; /* 0: all committed */
    const lvl_table_t *t = &s->opt.levels;
    uint64_t committed[LVL_MAX_LEVELS + 1]; /* what each level holds now: all committed (read_begin) */
    for (int l = 1; l <= t->count; l++) {
        level_state_t *ls = &s->levels[l];
        ls->inserted_due = UINT64_MAX;
        ls->inserted_seq = UINT64_MAX;
        ls->cq_move_tail = ls->cq_tail;
        committed[l] = ls->depth;
    }
    s->lane_move_tail = s->lane != NULL ? lane_tail(s->lane) : 0;
    move_reads_t r = { .s = s, .cq_queue = UINT32_MAX, .slots.base = UINT64_MAX };
    r.rd.window = MOVE_LOG_WINDOW;
    int rc = 0;
    while (*moved < max && s->batch_bytes < STORE_BATCH_MAX_BYTES) {
        /* Serve the level whose head is due first, up to where another level's
         * head comes first: catching up after downtime keeps global due order,
         * not level order. (Hops inserted meanwhile are due after now.) */
        uint64_t bound;
        int l = first_due_level(s, now_ms, &bound);
        if (l == 0) {
            break;
        }
        int pending_at_serve = s->pending, moved_at_serve = *moved;
        uint64_t at_before = level_serve_at(s, l);
        int failed = s->levels[l].on_l ? store_serve_level_walk(s, l, bound, now_ms, max, &committed[l], moved,
                                                                ready_out, err, errlen)
                                       : serve_level_cq(s, &r, l, bound, now_ms, max, moved, ready_out, err, errlen);
        if (failed != 0) {
            if (s->pending == pending_at_serve && !s->broken) { /* failed at its head: the others go on */
                level_mark_damaged(s, l, now_ms, err);
                continue;
            }
            /* the heads taken are in the batch, the level's head not moved */
            rc = store_fail_half_way(s, pending_before, "due move", err, errlen);
            break;
        }
        s->levels[l].damaged = 0; /* it moves (again) */
        if (*moved == moved_at_serve && level_serve_at(s, l) == at_before) {
            break; /* nothing moved and nothing learnt (a full batch): the next call goes on */
        }
    }
    clog_reader_free(&r.rd);
    return rc;
}
