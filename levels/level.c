/*
 * levels/level.c — a message entering a level queue (store_level_enqueue, a
 * hop's store_level_insert) or, at its journey's end, its topic's log
 * (store_topic_append); the level heads that the due move and store_next_due
 * read (store_level_first_key).
 *
 * A level is one key range ordered by (due, seq) (keys.h 'L'), and since
 * the commit log (design-commitlog.md 4a.4) a consume queue of its SEND
 * journeys' entries in due order: the due move (level_move.c) reads a
 * level's CQ from its head, each message from its record in the log,
 * trusted when its where-slot names the entry back; since 4a.5 a journey on
 * such a level has no `L` entry and no 'X' record (the entry and the slot
 * are the only record of the hop; 'X' is written at its arrival); the
 * remainder lane's tops (level 1's remainders) and the level's retries (`L`
 * entries bound for a group) are served beside it in due order. A level
 * that may hold journeys its CQ does not (a directory of 4a.3 or format 5, a
 * copy, an index rebuilt: on_l) is served by walking `L` (level_walk.c)
 * until it empties. The heads are kept in memory, so the next due time is a
 * comparison. A delay that no level matches is a chain of hops (greedy,
 * lvl_next_hop): the message carries its journey's end (due_ms) and each due
 * hop either moves it to the next level or, at the end, to the topic log (a
 * new message) or its group's retry-ready queue (a retry). A remainder no
 * level matches (the 500 ms of 1500ms) is one hop that waits exactly that
 * long on the smallest level (lvl_hop_ms): the level is ordered by due time,
 * so it leaves from the head at its millisecond — exact delays without a
 * second kind of queue. Enqueue time per level is monotone, so a clock step
 * back never lets a later message overtake an earlier one of the same delay
 * on its level.
 *
 * SEND, which starts a journey here, is send.c; the level CQs at open are
 * level_open.c.
 *
 * Threading: one thread at a time (the broker's storage thread).
 */
#include "levels/store_internal.h"

/* store_topic_delayed_add with m's topic state in hand (t: NULL when m is
 * bound for a group's retry). */
void store_topic_state_delayed_add(store_t *s, topic_state_t *t, int delta)
{
    if (t == NULL) {
        return;
    }
    t->delayed += (uint64_t)(int64_t)delta;
    store_mark_topic(s, t);
}

/* The topic state of a message bound for its topic's log (created when new),
 * or NULL for one bound for a group's retry. The hot paths look it up once
 * per message with this and pass it down: a topic is only ever deleted by
 * its own command, never in the middle of another's. */
topic_state_t *store_msg_topic(store_t *s, const msg_t *m)
{
    return m->dest == MSG_DEST_TOPIC ? store_topic_get_or_create(s, m->topic.ptr, m->topic.len) : NULL;
}

void store_topic_delayed_add(store_t *s, const msg_t *m, int delta)
{
    store_topic_state_delayed_add(s, store_msg_topic(s, m), delta);
}

/* The due of a SEND journey's entry appended to level l's CQ: its hop's
 * exact due, or the last due appended there when that is later
 * (design-commitlog.md §4, 4a.4: append order is due order, so the due move
 * reads heads only; a hop behind a lagging due move is delivered at most
 * that lag late, never early, and a remainder on the lane keeps its exact
 * millisecond). */
static uint64_t level_cq_due(const level_state_t *ls, uint64_t due)
{
    return due > ls->cq_last_due ? due : ls->cq_last_due;
}

/* m's entry (due) appended to level l's CQ and its slot rewritten to name it
 * (j's queue and index set). */
static void level_cq_append(store_t *s, int l, const msg_t *m, uint64_t due, idx_journey_t *j)
{
    level_state_t *ls = &s->levels[l];
    if (ls->cq_head == ls->cq_tail) {
        ls->cq_head_due = due;
    }
    if (ls->cq_tail == ls->cq_move_tail) {
        ls->cq_move_first_due = due; /* the first a due move appends: past what it reads */
    }
    ls->cq_last_due = due;
    j->queue = (uint32_t)l;
    j->cq_index = ls->cq_tail++;
    store_log_cq_append(s, j->queue, j->cq_index, m->id, due);
    store_log_slot(s, m->id, j, 0);
    s->pending++; /* the entry and the slot are writes: a commit must follow, also without any LevelDB one */
}

/* Level l's `L` range from now on holds a SEND journey that no CQ does: it is
 * served by walking `L` (on_l) from a head that is at or below every key it
 * holds — its retry head, its CQ head's due and the lane's top. */
void store_level_journeys_on_l(store_t *s, int l)
{
    level_state_t *ls = &s->levels[l];
    if (ls->on_l) {
        return;
    }
    uint64_t due, seq;
    if (store_level_first_key(s, l, &due, &seq)) {
        ls->has_head = 1;
        ls->head_due = due;
        ls->head_seq = seq;
    }
    ls->on_l = 1;
    ls->retries = 0;
    store_mark_level(s, l);
}

/* Level l's `L` range lost an entry (taken, revoked): an emptied level served
 * by walking `L` is served from its CQ again. */
void store_level_took(store_t *s, int l)
{
    level_state_t *ls = &s->levels[l];
    if (ls->on_l && ls->depth == 0) {
        ls->on_l = 0;
        ls->retries = 0;
        ls->has_head = 0;
        store_mark_level(s, l);
    }
}

int store_level_first_key(const store_t *s, int l, uint64_t *due, uint64_t *seq)
{
    const level_state_t *ls = &s->levels[l];
    *due = UINT64_MAX;
    *seq = 0;
    if (ls->has_head) {
        *due = ls->head_due;
        *seq = ls->head_seq;
    }
    if (ls->on_l) {
        return ls->has_head;
    }
    if (ls->cq_head < ls->cq_tail && ls->cq_head_due <= *due) {
        *due = ls->cq_head_due;
        *seq = 0;
    }
    lane_entry_t top;
    if (l == 1 && s->lane != NULL && lane_peek(s->lane, &top) && top.due <= *due) {
        *due = top.due;
        *seq = 0;
    }
    return *due != UINT64_MAX;
}

/* Put m on level at due; keeps the head exact. topic: store_msg_topic(m), or NULL
 * to look it up here (a new topic is created after the seq is taken, as its
 * log_next_min then says). j: m's journey in the log's files (NULL: none —
 * a retry, or a message whose journey was dropped): its entry is appended to
 * the level's CQ (at a due not before the last one there: level_cq_due) — to
 * the remainder lane's when the hop waits a remainder (less than the level's
 * delay: not in the level CQ's due order) — its slot rewritten to name it
 * (j's queue and index set). That entry and slot are the only record of the
 * hop (design-commitlog.md 4a.5: no `L`, no 'X'), unless the level is walked
 * by `L` (on_l): then, as for a retry or a message without a journey, an `L`
 * entry (a journey's key STORE_JOURNEY_SEQ | id, a retry's the next seq) and
 * its 'X' place are written too. */
void store_level_insert(store_t *s, topic_state_t *topic, int level, uint64_t due, msg_t *m, idx_journey_t *j,
                        int remainder)
{
    level_state_t *ls = &s->levels[level];
    int journey = m->dest == MSG_DEST_TOPIC && j != NULL;
    int on_lane = journey && remainder && s->lane != NULL;
    if (journey && !on_lane) {
        due = level_cq_due(ls, due);
    }
    uint64_t seq = journey ? STORE_JOURNEY_SEQ | m->id : s->next_seq++;
    int on_l = !journey || ls->on_l; /* `L` and 'X' hold it; a journey of a CQ-served level: its entry and slot */
    key_buf_t k;
    key_level(&k, level, due, seq);
    if (on_l) {
        store_put_msg(s, &k, m);
    }
    idx_place_t p = { 'L', level, due, seq };
    if (m->dest == MSG_DEST_TOPIC) {
        if (on_lane) {
            store_lane_push(s, m, due, j);
        } else if (journey) {
            level_cq_append(s, level, m, due, j);
        } else {
            store_level_journeys_on_l(s, level);
        }
        if (on_l) {
            idx_home_put(s, m, &p, 0, j);
        }
    } else {
        idx_copy_put(s, m->id, m->group.ptr, m->group.len, m->group_gen, &p);
        ls->retries++;
    }
    ls->depth++;
    store_mark_level(s, level);
    store_topic_state_delayed_add(s, topic != NULL ? topic : store_msg_topic(s, m), +1);
    if (journey && !ls->on_l) {
        return; /* served from its CQ or the lane: not `L`'s head */
    }
    if (!ls->has_head || store_level_key_less(due, seq, ls->head_due, ls->head_seq)) {
        ls->has_head = 1;
        ls->head_due = due;
        ls->head_seq = seq;
    }
    if (store_level_key_less(due, seq, ls->inserted_due, ls->inserted_seq)) {
        ls->inserted_due = due;
        ls->inserted_seq = seq;
    }
}

/* Where store_level_enqueue will put m, changing nothing: its first level
 * (*first), that hop's due (*hop_due: on the level's CQ for a journey,
 * journey set, not before its last due), whether it waits a remainder
 * (*remainder), its enqueue time (returned) and its journey's due
 * (m->due_ms). */
uint64_t store_level_plan(const store_t *s, msg_t *m, int level, uint64_t delay_ms, uint64_t now_ms, int journey,
                          int *first, uint64_t *hop_due, int *remainder)
{
    const lvl_table_t *t = &s->opt.levels;
    *first = level > 0 ? level : lvl_next_hop(t, delay_ms);
    const level_state_t *ls = &s->levels[*first];
    uint64_t enq = now_ms > ls->last_enqueue_ms ? now_ms : ls->last_enqueue_ms;
    uint64_t hop = level > 0 ? t->delay_ms[*first] : lvl_hop_ms(t, *first, delay_ms);
    *remainder = hop < t->delay_ms[*first];
    *hop_due = enq + hop;
    if (journey && !(*remainder && s->lane != NULL)) {
        *hop_due = level_cq_due(ls, *hop_due); /* as store_level_insert will put it */
    }
    m->due_ms = level > 0 ? *hop_due : enq + delay_ms;
    return enq;
}

/* store_level_enqueue with m's journey (NULL: none). */
uint64_t store_level_enqueue_journey(store_t *s, topic_state_t *topic, msg_t *m, int level, uint64_t delay_ms,
                                     uint64_t now_ms, idx_journey_t *j)
{
    int first, remainder;
    uint64_t hop_due;
    uint64_t enq = store_level_plan(s, m, level, delay_ms, now_ms, m->dest == MSG_DEST_TOPIC && j != NULL, &first,
                                    &hop_due, &remainder);
    s->levels[first].last_enqueue_ms = enq;
    store_level_insert(s, topic, first, hop_due, m, j, remainder);
    return m->due_ms;
}

uint64_t store_level_enqueue(store_t *s, topic_state_t *topic, msg_t *m, int level, uint64_t delay_ms, uint64_t now_ms)
{
    return store_level_enqueue_journey(s, topic, m, level, delay_ms, now_ms, NULL);
}

/* Append m to t's log (a new message: no group yet; stamped now). With the
 * commit log (design-commitlog.md 4b) the entry goes to t's topic CQ
 * (topic_cq.c): for a message with its record in the log (j: its journey,
 * not NULL) the entry and its slot rewritten to name it are all — no 'T',
 * no 'X'; a message without (a format-5 journey off a level walked by `L`)
 * gets the CQ seq too, its 'T' key and 'X' there. Without the log (before it
 * opens) as format 6 did: a level's message (level_seq: its level entry's
 * seq, whose STORE_JOURNEY_SEQ bit is dropped; 0 for a SEND without delay)
 * keeps that seq when it comes after everything t's log holds, and 'X' is
 * not rewritten (idx_home_read finds it under the same seq); otherwise a
 * fresh seq and 'X' says where. */
void store_topic_append(store_t *s, topic_state_t *t, msg_t *m, uint64_t level_seq, uint64_t now_ms, idx_journey_t *j)
{
    m->stamp_ms = now_ms;
    m->dest = MSG_DEST_TOPIC;
    m->group.ptr = NULL;
    m->group.len = 0;
    m->group_gen = 0;
    uint64_t kept = level_seq & ~STORE_JOURNEY_SEQ; /* a journey's level entry: its id */
    uint64_t seq;
    if (s->redo != NULL) {
        seq = topic_cq_append(s, t, m->id, now_ms);
        kept = 0;
        if (j != NULL) {
            j->queue = t->queue;
            j->cq_index = store_topic_cq_index(t, seq);
            store_log_slot(s, m->id, j, 0);
            s->pending++; /* the entry and the slot are writes even with no LevelDB one */
        }
    } else {
        seq = level_seq != 0 && kept >= t->log_next_min ? kept : s->next_seq++;
        if (seq >= s->next_seq) {
            s->next_seq = seq + 1; /* the counter stays above every seq taken */
        }
        t->log_next_min = seq + 1;
    }
    if (s->redo == NULL || j == NULL) {
        key_buf_t k;
        key_queue(&k, KEY_TOPIC_LOG, t->name, t->len, seq);
        store_put_msg(s, &k, m);
        if (s->redo == NULL) {
            topic_held_note(s, t, seq); /* its log's walks read it through the overlay until it is applied */
        }
        if (seq != kept) {
            idx_place_t p = { 'T', 0, 0, seq };
            idx_home_put(s, m, &p, 0, NULL);
        }
    }
    t->appended++;
    store_mark_topic(s, t);
    store_mark_woken(s, t);
}

/* ---- the level queues ---------------------------------------------------------------- */

int store_level_cq_done(store_t *s, int l, uint64_t index)
{
    level_state_t *ls = &s->levels[l];
    if (index < ls->cq_head) {
        return 0;
    }
    if (index > ls->cq_head) {
        map_put(&ls->cq_done, &index, sizeof index, (void *)1);
        return 0;
    }
    do {
        ls->cq_head++;
    } while (map_del(&ls->cq_done, &ls->cq_head, sizeof ls->cq_head) != NULL);
    store_mark_level(s, l);
    return 1;
}
