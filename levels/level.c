/*
 * levels/level.c — SEND and the level queues (see store.h): the one SEND
 * check, accepting a message, due moves, level info.
 *
 * A level is one key range ordered by (due, seq) (keys.h 'L'), and since
 * the commit log (design-commitlog.md 4a.4) a consume queue of its SEND
 * journeys' entries in due order: the due move reads a level's CQ from its
 * head (store_move_due, serve_level_cq), each message from its record in
 * the log, trusted when its where-slot names the entry back; since 4a.5 a
 * journey on such a level has no `L` entry and no 'X' record (the entry and
 * the slot are the only record of the hop; 'X' is written at its arrival);
 * the remainder lane's tops (level 1's remainders) and the level's retries
 * (`L` entries bound for a group, walked only while it counts any) are served
 * beside it in due order. A level that may hold journeys its CQ does not (a
 * directory of 4a.3 or format 5, a copy, an index rebuilt: on_l) is served by
 * walking `L` as before (serve_level_walk) until it empties. The heads are
 * kept in memory, so the next due time is a comparison. A delay that
 * no level matches is a chain of hops (greedy, lvl_next_hop): the message
 * carries its journey's end (due_ms) and each due hop either moves it to the
 * next level or, at the end, to the topic log (a new message) or its group's
 * retry-ready queue (a retry). A remainder no level matches (the 500 ms of
 * 1500ms) is one hop that waits exactly that long on the smallest level
 * (lvl_hop_ms): the level is ordered by due time, so it leaves from the head
 * at its millisecond — exact delays without a second kind of queue. Enqueue
 * time per level is monotone, so a clock step back never lets a later message
 * overtake an earlier one of the same delay on its level.
 *
 * The checks of a SEND live once, in store_send_refusal: store_send,
 * store_send_dedup (lookup.c) and store_send_check call it. store_send_check
 * answers, writing nothing, whether a SEND would be refused as the next of a
 * run whose earlier SENDs are not stored yet (MULTI/EXEC checks all before
 * storing any): it carries what those SENDs will create — new topics, which
 * count against max-topics, and keys, which make a later DEDUP SEND of the
 * run a duplicate without a read.
 *
 * Threading: one thread at a time (the broker's storage thread).
 */
#include "levels/store_internal.h"
#include "base/alloc.h"
#include "base/err.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- SEND ------------------------------------------------------------------------ */

/* A chained delay must fit max-delay and the hop bound (DESIGN §1: hops are
 * bounded; LVL_MAX_HOPS): lvl_chain_plan decides both and names the problem
 * ("delay 4d exceeds max-delay 3d", "... needs 3600 hops ..."). Without the
 * bound, a custom table with a small last level makes one message hop (one
 * write) per level delay for the whole journey. */
int store_send_validate(const store_options_t *o, const store_send_req_t *req, char *err, size_t errlen)
{
    if (msg_check_name("topic", req->topic, req->topic_len, err, errlen) != 0) {
        return -1;
    }
    if (req->key_len > MSG_MAX_KEY) {
        return err_set(err, errlen, "key is %zu bytes, longer than the limit of %d", req->key_len, MSG_MAX_KEY);
    }
    if (req->payload_len > o->max_payload) {
        return err_set(err, errlen, "payload is %zu bytes, larger than max-payload %u", req->payload_len,
                       o->max_payload);
    }
    const lvl_table_t *t = &o->levels;
    if (req->level < 0 || req->level > t->count) {
        return err_set(err, errlen, "LEVEL must be 0..%d (levels are 1..%d; 0: no delay), got %d", t->count, t->count,
                       req->level);
    }
    if (req->level == 0 && req->delay_ms > 0) {
        uint8_t plan[LVL_MAX_HOPS];
        int hops;
        return lvl_chain_plan(t, req->delay_ms, o->max_delay_ms, plan, LVL_MAX_HOPS, &hops, err, errlen);
    }
    return 0;
}

int store_send_waits_on_lane(const store_t *s, const store_send_req_t *req)
{
    const lvl_table_t *t = &s->opt.levels;
    if (s->redo == NULL || s->lane == NULL || req->level != 0 || req->delay_ms == 0) {
        return 0;
    }
    int first = lvl_next_hop(t, req->delay_ms);
    return lvl_hop_ms(t, first, req->delay_ms) < t->delay_ms[first]; /* level_enqueue's remainder */
}

int store_send_refusal(const store_t *s, const store_send_req_t *req, int dedup, const map_t *planned_topics,
                       uint64_t planned_lane, char *err, size_t errlen)
{
    if (store_usable(s, err, errlen) != 0 || store_send_validate(&s->opt, req, err, errlen) != 0 ||
        store_topic_room_planned(s, planned_topics, req->topic, req->topic_len, err, errlen) != 0) {
        return -1;
    }
    if (dedup && req->key_len == 0) {
        return err_set(err, errlen, "DEDUP needs a KEY");
    }
    char why[256];
    if (store_send_waits_on_lane(s, req) && store_lane_room(s, planned_lane + 1, why, sizeof why) != 0) {
        return err_set(
            err, errlen, "a delay of %llu ms waits its last %llu ms on the remainder lane, and %s: retry later",
            (unsigned long long)req->delay_ms,
            (unsigned long long)lvl_hop_ms(&s->opt.levels, lvl_next_hop(&s->opt.levels, req->delay_ms), req->delay_ms),
            why);
    }
    return 0;
}

/* What the SENDs of a run checked so far will have created when they are
 * stored: the only state a SEND's refusal depends on that its predecessors
 * in the run change (store_send_refusal's topic count; a DEDUP SEND's reads,
 * which a key sent earlier in the run spares). */
struct store_send_check {
    map_t topics;  /* new topics (none exists in the store) */
    map_t keys;    /* 'K' prefixes (topic, key) of the keyed SENDs that will store a message */
    uint64_t lane; /* remainder lane entries their first hops will push */
};

store_send_check_t *store_send_check_new(void)
{
    return xcalloc(1, sizeof(store_send_check_t));
}

void store_send_check_free(store_send_check_t *c)
{
    if (c == NULL) {
        return;
    }
    map_free(&c->topics, NULL);
    map_free(&c->keys, NULL);
    free(c);
}

int store_send_check(store_t *s, store_send_check_t *c, const store_send_req_t *req, int dedup, char *err,
                     size_t errlen)
{
    if (store_send_refusal(s, req, dedup, &c->topics, c->lane, err, errlen) != 0) {
        return -1;
    }
    key_buf_t k;
    int stores = 1; /* a message: not a DEDUP SEND that finds a live one */
    if (req->key_len > 0) {
        key_key_prefix(&k, req->topic, req->topic_len, req->key, req->key_len);
        if (dedup && map_get(&c->keys, k.b, k.n) != NULL) {
            stores = 0; /* a duplicate of the run's own earlier SEND: in the batch by then, no read */
        } else if (dedup) {
            uint64_t id, due;
            int found = store_dedup_find(s, req, &id, &due, err, errlen); /* the reads store_send_dedup makes */
            if (found < 0) {
                return -1;
            }
            stores = !found;
        }
    }
    if (!stores) {
        return 0;
    }
    if (map_get(&s->topics, req->topic, req->topic_len) == NULL) {
        map_put(&c->topics, req->topic, req->topic_len, (void *)1);
    }
    if (req->key_len > 0) {
        map_put(&c->keys, k.b, k.n, (void *)1);
    }
    c->lane += (uint64_t)store_send_waits_on_lane(s, req);
    return 0;
}

static int key_less(uint64_t due_a, uint64_t seq_a, uint64_t due_b, uint64_t seq_b)
{
    return due_a < due_b || (due_a == due_b && seq_a < seq_b);
}

/* store_topic_delayed_add with m's topic state in hand (t: NULL when m is
 * bound for a group's retry). */
static void topic_delayed_add(store_t *s, topic_state_t *t, int delta)
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
static topic_state_t *msg_topic(store_t *s, const msg_t *m)
{
    return m->dest == MSG_DEST_TOPIC ? store_topic_get_or_create(s, m->topic.ptr, m->topic.len) : NULL;
}

void store_topic_delayed_add(store_t *s, const msg_t *m, int delta)
{
    topic_delayed_add(s, msg_topic(s, m), delta);
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
static void level_journeys_on_l(store_t *s, int l)
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
static void level_took(store_t *s, int l)
{
    level_state_t *ls = &s->levels[l];
    if (ls->on_l && ls->depth == 0) {
        ls->on_l = 0;
        ls->retries = 0;
        ls->has_head = 0;
        store_mark_level(s, l);
    }
}

void store_level_took(store_t *s, int l)
{
    level_took(s, l);
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

/* Put m on level at due; keeps the head exact. topic: msg_topic(m), or NULL
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
static void level_insert(store_t *s, topic_state_t *topic, int level, uint64_t due, msg_t *m, idx_journey_t *j,
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
            level_journeys_on_l(s, level);
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
    topic_delayed_add(s, topic != NULL ? topic : msg_topic(s, m), +1);
    if (journey && !ls->on_l) {
        return; /* served from its CQ or the lane: not `L`'s head */
    }
    if (!ls->has_head || key_less(due, seq, ls->head_due, ls->head_seq)) {
        ls->has_head = 1;
        ls->head_due = due;
        ls->head_seq = seq;
    }
    if (key_less(due, seq, ls->inserted_due, ls->inserted_seq)) {
        ls->inserted_due = due;
        ls->inserted_seq = seq;
    }
}

/* Where store_level_enqueue will put m, changing nothing: its first level
 * (*first), that hop's due (*hop_due: on the level's CQ for a journey,
 * journey set, not before its last due), whether it waits a remainder
 * (*remainder), its enqueue time (returned) and its journey's due
 * (m->due_ms). */
static uint64_t level_plan(const store_t *s, msg_t *m, int level, uint64_t delay_ms, uint64_t now_ms, int journey,
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
        *hop_due = level_cq_due(ls, *hop_due); /* as level_insert will put it */
    }
    m->due_ms = level > 0 ? *hop_due : enq + delay_ms;
    return enq;
}

/* store_level_enqueue with m's journey (NULL: none). */
static uint64_t level_enqueue(store_t *s, topic_state_t *topic, msg_t *m, int level, uint64_t delay_ms, uint64_t now_ms,
                              idx_journey_t *j)
{
    int first, remainder;
    uint64_t hop_due;
    uint64_t enq =
        level_plan(s, m, level, delay_ms, now_ms, m->dest == MSG_DEST_TOPIC && j != NULL, &first, &hop_due, &remainder);
    s->levels[first].last_enqueue_ms = enq;
    level_insert(s, topic, first, hop_due, m, j, remainder);
    return m->due_ms;
}

uint64_t store_level_enqueue(store_t *s, topic_state_t *topic, msg_t *m, int level, uint64_t delay_ms, uint64_t now_ms)
{
    return level_enqueue(s, topic, m, level, delay_ms, now_ms, NULL);
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
static void topic_append(store_t *s, topic_state_t *t, msg_t *m, uint64_t level_seq, uint64_t now_ms, idx_journey_t *j)
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

uint64_t store_send_derived_bytes(const msg_t *m)
{
    return msg_encoded_size(m) + 2 * ((uint64_t)m->topic.len + m->key.len) + 256;
}

/* m's id: its record's offset in the log once the redo is open (m's
 * record is added to the pending batch with room for what the SEND derives
 * from it: store_send_derived_bytes), the sequence counter's before. 0, or -1
 * with err. */
static int send_take_id(store_t *s, msg_t *m, uint32_t *ordinal, char *err, size_t errlen)
{
    if (s->redo == NULL) {
        m->id = s->next_seq++;
        return 0;
    }
    return store_log_add_message(s, m, store_send_derived_bytes(m), ordinal, err, errlen);
}

int store_send(store_t *s, const store_send_req_t *req, uint64_t now_ms, uint64_t *id_out, uint64_t *due_out, char *err,
               size_t errlen)
{
    if (store_send_refusal(s, req, 0, NULL, 0, err, errlen) != 0) {
        return -1;
    }
    uint64_t delay = req->level == 0 ? req->delay_ms : 0;
    msg_t m;
    memset(&m, 0, sizeof m);
    m.created_ms = now_ms;
    m.dest = MSG_DEST_TOPIC;
    m.topic.ptr = req->topic;
    m.topic.len = (uint32_t)req->topic_len;
    m.key.ptr = req->key;
    m.key.len = (uint32_t)req->key_len;
    m.payload.ptr = req->payload;
    m.payload.len = (uint32_t)req->payload_len;
    if (req->level == 0 && delay == 0) {
        m.due_ms = now_ms;
    } else { /* the record holds the journey's due (a record is never rewritten) */
        int first, remainder;
        uint64_t hop_due;
        (void)level_plan(s, &m, req->level, delay, now_ms, s->redo != NULL, &first, &hop_due, &remainder);
    }
    /* The id is the message record's log offset (design-commitlog.md §2); the
     * batch may be committed first to make room, so count pending after it. */
    idx_journey_t journey = { 0 };
    if (send_take_id(s, &m, &journey.ordinal, err, errlen) != 0) {
        return -1;
    }
    idx_journey_t *j = s->redo != NULL ? &journey : NULL;
    if (j != NULL) {
        s->batch_bytes += msg_record_size(&m); /* its record is in the batch: what bounds a batch's bytes */
    }
    int pending_before = s->pending;
    /* the one lookup; a new topic is created where it always was (its
     * log_next_min is the sequence counter at that point) */
    topic_state_t *topic = map_get(&s->topics, req->topic, req->topic_len);
    if (req->level == 0 && delay == 0) {
        m.due_ms = now_ms;
        if (topic == NULL) {
            topic = store_topic_get_or_create(s, req->topic, req->topic_len);
        }
        topic_append(s, topic, &m, 0, now_ms, j);
        if (j != NULL) {
            segcount_add(s, m.id, +1); /* its record is read until the topic's GC passes it */
        }
    } else {
        level_enqueue(s, topic, &m, req->level, delay, now_ms, j);
        if (j != NULL) {
            segcount_add(s, m.id, +1); /* its record is read until it arrives */
        }
    }
    idx_key_put(s, &m);
    if (m.key.len > 0) {
        idx_sent_key_add(s, &m);
    }
    s->pending_sends += s->pending - pending_before;
    if (topic == NULL) {
        topic = store_topic_get_or_create(s, req->topic, req->topic_len); /* created by the enqueue */
    }
    topic->sent++;
    *id_out = m.id;
    if (due_out) {
        *due_out = m.due_ms;
    }
    return 0;
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

/* Level l's CQ head past the dead entries at it (see store_level_cq_open):
 * 1 when it moved, 0 when not, -1 with err. */
static int level_cq_settle(store_t *s, int l, char *err, size_t errlen)
{
    level_state_t *ls = &s->levels[l];
    if (ls->cq_head == ls->cq_tail) {
        return 0;
    }
    cq_t *q = NULL;
    char why[512];
    if (cq_open(s->path, (uint32_t)l, ls->cq_head, ls->cq_tail, &q, why, sizeof why) != 0) {
        return err_set(err, errlen, "the consume queue of level %d in %s: %s", l, s->path, why);
    }
    uint64_t from = ls->cq_head;
    int rc = 0;
    while (ls->cq_head < ls->cq_tail) {
        cq_entry_t e;
        if (cq_read(q, ls->cq_head, 1, &e, why, sizeof why) != 0) {
            rc = err_set(err, errlen, "the consume queue of level %d in %s: %s", l, s->path, why);
            break;
        }
        slot_t sl;
        int gone = 0;
        if (store_log_slot_get(s, e.log_offset, UINT32_MAX, &sl, &gone, why, sizeof why) != 0) {
            break; /* a record or slot that cannot be read: the due move meets it (a damaged level), not the open */
        }
        if (!gone && sl.id == e.log_offset && sl.queue == (uint32_t)l && sl.cq_index == ls->cq_head &&
            !(sl.flags & SLOT_REVOKED)) {
            break; /* live: its slot names it */
        }
        ls->cq_head++;
    }
    (void)cq_close(q, NULL, 0);
    return rc != 0 ? -1 : ls->cq_head != from;
}

void store_journeys_abandon(store_t *s)
{
    for (int l = 1; l <= s->opt.levels.count; l++) {
        level_state_t *ls = &s->levels[l];
        if (!ls->on_l) {
            continue; /* its journeys are its CQ's alone (4a.5): no `L` entry would move them on */
        }
        if (ls->cq_head != ls->cq_tail) {
            ls->cq_head = ls->cq_tail;
            map_free(&ls->cq_done, NULL);
            store_log_cq_head(s, (uint32_t)l, ls->cq_head);
            store_mark_level(s, l);
        }
    }
    if (s->levels[1].on_l) {
        store_lane_abandon(s);
    }
}

/* Level l's CQ head's due and the last due appended (its tail's entry), read
 * at open (the due move and level_cq_due start from them). */
static int level_cq_dues(store_t *s, int l, char *err, size_t errlen)
{
    level_state_t *ls = &s->levels[l];
    ls->cq_head_due = ls->cq_last_due = 0;
    if (ls->cq_head == ls->cq_tail) {
        return 0;
    }
    cq_entry_t e;
    char why[512];
    if (redo_cq_read(s->redo, (uint32_t)l, ls->cq_head, 1, &e, why, sizeof why) != 0) {
        return err_set(err, errlen, "the consume queue of level %d in %s: %s", l, s->path, why);
    }
    ls->cq_head_due = e.due;
    if (redo_cq_read(s->redo, (uint32_t)l, ls->cq_tail - 1, 1, &e, why, sizeof why) != 0) {
        return err_set(err, errlen, "the consume queue of level %d in %s: %s", l, s->path, why);
    }
    ls->cq_last_due = e.due;
    return 0;
}

/* 1 when level l's `L` range holds a SEND journey's key (STORE_JOURNEY_SEQ):
 * a directory of format 5 whose commit log wrote journeys into `L` too (4a.4),
 * 0 when not, -1 with err. Walks the level's retries' keys before it. */
static int level_holds_journey_keys(store_t *s, int l, char *err, size_t errlen)
{
    key_buf_t k;
    key_level(&k, l, 0, 0);
    leveldb_iterator_t *it = store_iter_at(s, &k);
    const char *key;
    size_t klen;
    int found = 0;
    for (; !found && store_iter_in(it, k.b, 2, &key, &klen); leveldb_iter_next(it)) {
        int level;
        uint64_t due, seq;
        found = key_level_parse(key, klen, &level, &due, &seq) == 0 && (seq & STORE_JOURNEY_SEQ);
    }
    int rc = store_iter_error(it, "a level queue", err, errlen);
    leveldb_iter_destroy(it);
    return rc != 0 ? -1 : found;
}

int store_level_cq_open(store_t *s, char *err, size_t errlen)
{
    int moved = 0;
    for (int l = 1; l <= s->opt.levels.count; l++) {
        level_state_t *ls = &s->levels[l];
        if (!ls->on_l && ls->depth > ls->retries) { /* journeys: in its CQ alone (format 6), or also in `L` */
            int in_l = level_holds_journey_keys(s, l, err, errlen);
            if (in_l < 0) {
                return -1;
            }
            if (in_l) {
                level_journeys_on_l(s, l);
                moved = 1;
            }
        }
    }
    for (int l = 1; l <= s->opt.levels.count; l++) {
        int rc = level_cq_settle(s, l, err, errlen);
        if (rc < 0 || level_cq_dues(s, l, err, errlen) != 0) {
            return -1;
        }
        if (rc > 0) {
            store_log_cq_head(s, (uint32_t)l, s->levels[l].cq_head);
            store_mark_level(s, l);
            moved = 1;
        }
    }
    if (!moved) {
        return 0;
    }
    s->pending++; /* the records and head moves are writes: a commit follows */
    return store_commit(s, err, errlen);
}

/* store_journeys_each's callback for count_topic_delayed: a journey only
 * its CQ holds, counted for its topic. */
static int count_journey_delayed(void *ctx, const msg_t *m, const store_journey_t *at, char *err, size_t errlen)
{
    (void)at;
    (void)err;
    (void)errlen;
    store_topic_delayed_add(ctx, m, +1);
    return 0;
}

/* Count every topic's delayed messages from the level queues (one scan of
 * the 'L' range and of the CQs' journeys that have no `L` entry) and mark
 * the result, for a directory written before the topic records counted
 * them. */
static int count_topic_delayed(store_t *s, char *err, size_t errlen)
{
    map_iter_t mi = { 0 };
    void *v;
    while (map_next(&s->topics, &mi, NULL, NULL, &v)) {
        topic_state_t *t = v;
        t->delayed = 0;
        store_mark_topic(s, t); /* every record rewritten in the new length */
    }
    leveldb_iterator_t *it = store_iter_range(s, KEY_LEVEL);
    const char *key;
    size_t klen;
    int rc = 0;
    for (; store_iter_in_range(it, KEY_LEVEL, &key, &klen); leveldb_iter_next(it)) {
        msg_t m;
        if (store_iter_msg(it, &m, "a level queue", err, errlen) != 0) {
            rc = -1;
            break;
        }
        store_topic_delayed_add(s, &m, +1);
    }
    if (rc == 0) {
        rc = store_iter_error(it, "a level queue", err, errlen);
    }
    leveldb_iter_destroy(it);
    return rc != 0 ? rc : store_journeys_each(s, count_journey_delayed, s, err, errlen);
}

int store_topic_delayed_open(store_t *s, char *err, size_t errlen)
{
    key_buf_t k;
    key_meta(&k, STORE_META_TOPIC_DELAYED);
    int found = store_has(s, &k, err, errlen);
    if (found != 0) {
        return found < 0 ? -1 : 0;
    }
    if (count_topic_delayed(s, err, errlen) != 0) {
        return -1;
    }
    key_meta(&k, STORE_META_TOPIC_DELAYED);
    store_put(s, &k, "1", 1);
    return store_commit(s, err, errlen);
}

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
 * log or retry-ready. topic: msg_topic(m). Returns 1 when it became ready, 0 when it
 * hopped or was dropped, -1 on a read error (the index's, dropping a retry).
 * A next hop that waits a remainder on a full lane (j: a SEND journey) is not
 * made: m goes back on its level for another of the level's delay (its
 * entry in the level's due order, as a fresh enqueue), late but never lost,
 * and tries again then; a level's head is never held back, so the lane's own
 * remainders, which may lie behind it on the same level, keep leaving. */
static int route_due(store_t *s, topic_state_t *topic, msg_t *m, int level, uint64_t hop_due, uint64_t seq,
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
            level_insert(s, topic, level, enq + s->opt.levels.delay_ms[level], m, j, 0);
            return 0;
        }
        level_insert(s, topic, next, next_due, m, j, remainder);
        return 0;
    }
    if (m->dest == MSG_DEST_TOPIC) {
        topic_append(s, topic, m, seq, now_ms, j); /* its record stays counted: the topic CQ reads it */
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

/* An entry of the due move routed on (ready: route_due's 1 when it became
 * ready, 0 when it hopped, -1 when it failed): counted in *moved, and in
 * *ready_out (when not NULL) when ready. -1 for a failed one (nothing
 * counted), else 0. */
static int count_moved(int ready, int *moved, int *ready_out)
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

/* ---- the walks of `L` (serve_level_walk, serve_retries) --------------------------- */

/* A walk of level l's `L` range from its head: the iterator, and the first
 * key the walk did not take (have_next: the head it leaves). */
typedef struct level_walk {
    store_t *s;
    int l;
    key_buf_t k;
    leveldb_iterator_t *it;
    const char *key; /* the entry it is at (walk_entry) */
    size_t klen;
    uint64_t due, seq;
    int have_next;
    uint64_t next_due, next_seq;
} level_walk_t;

/* Start *w at level l's `L` head (ls->head_due, head_seq); walk_end frees
 * its iterator. */
static void walk_begin(level_walk_t *w, store_t *s, int l)
{
    level_state_t *ls = &s->levels[l];
    w->s = s;
    w->l = l;
    key_level(&w->k, l, ls->head_due, ls->head_seq);
    w->it = store_iter_at(s, &w->k);
    w->have_next = 0;
    w->next_due = w->next_seq = 0;
}

/* The walk stops before the entry at (due, seq): the head it leaves. */
static void walk_stop_at(level_walk_t *w, uint64_t due, uint64_t seq)
{
    w->have_next = 1;
    w->next_due = due;
    w->next_seq = seq;
}

/* The entry the walk is at, to take up to bound with moved of max moves
 * done: 1 with its key, due and seq in *w; 0 at the end of the level, or at
 * an entry it stops before (past bound, max moves, a full batch: the head
 * it leaves); -1 with err naming a corrupt key. */
static int walk_entry(level_walk_t *w, uint64_t bound, int max, int moved, char *err, size_t errlen)
{
    if (!store_iter_in(w->it, w->k.b, 2, &w->key, &w->klen)) {
        return 0;
    }
    int level;
    if (key_level_parse(w->key, w->klen, &level, &w->due, &w->seq) != 0) {
        char d[KEY_DESCRIBE_BYTES];
        return err_set(err, errlen, "corrupt level key %s on level %d in %s",
                       key_describe(w->key, w->klen, d, sizeof d), w->l, w->s->path);
    }
    if (w->due > bound || moved >= max || w->s->batch_bytes >= STORE_BATCH_MAX_BYTES) {
        walk_stop_at(w, w->due, w->seq);
        return 0;
    }
    return 1;
}

/* The walk's iterator freed. rc: how the walk ended, -1 with err set, or
 * 0 or 1 when well (1: it stopped at an entry it would take); returns -1
 * with err for rc -1 or a failed iterator, else 0. */
static int walk_end(level_walk_t *w, int rc, char *err, size_t errlen)
{
    if (rc >= 0) {
        rc = store_iter_error(w->it, "a level queue", err, errlen);
    }
    leveldb_iter_destroy(w->it);
    return rc;
}

/* The walk cannot read the entry it is at (err says why): when it took
 * entries before it (took_some) those are whole and the damaged entry is the
 * head it leaves (0); else -1 with that err. */
static int walk_damaged(level_walk_t *w, int took_some)
{
    if (!took_some) {
        return -1;
    }
    walk_stop_at(w, w->due, w->seq);
    return 0;
}

/* Take message m's entry (key, klen) of level l: its key deleted, the
 * level's depth, its compaction count and a retry (m a group's) counted
 * off, the level marked, m's topic's delayed count down. Returns m's topic
 * state (msg_topic) for its route on. */
static topic_state_t *level_entry_take(store_t *s, int l, const char *key, size_t klen, const msg_t *m)
{
    store_del_raw(s, key, klen);
    level_state_t *ls = &s->levels[l];
    ls->depth--;
    ls->pops_since_compact++;
    if (m->dest == MSG_DEST_GROUP && ls->retries > 0) {
        ls->retries--;
    }
    store_mark_level(s, l);
    topic_state_t *topic = msg_topic(s, m);
    topic_delayed_add(s, topic, -1);
    return topic;
}

/* The head a walk of `L` leaves: the first key it did not take (have_next
 * with next_due, next_seq), or an entry inserted meanwhile when that is
 * earlier or there is no such key. */
static void walk_head_set(level_state_t *ls, int have_next, uint64_t next_due, uint64_t next_seq)
{
    ls->has_head = have_next;
    ls->head_due = next_due;
    ls->head_seq = next_seq;
    if (ls->inserted_due != UINT64_MAX &&
        (!ls->has_head || key_less(ls->inserted_due, ls->inserted_seq, ls->head_due, ls->head_seq))) {
        ls->has_head = 1;
        ls->head_due = ls->inserted_due;
        ls->head_seq = ls->inserted_seq;
    }
}

/* Serve level l (on_l: its `L` range may hold journeys its CQ does not) from
 * its `L` head up to bound (or max moves in all), as 4a.3 did: every entry
 * by its `L` key, a journey's CQ entry noted done by its 'X' journey.
 * committed is what the level holds on disk; the new head is the first key
 * not moved, or something inserted meanwhile. */
static int serve_level_walk(store_t *s, int l, uint64_t bound, uint64_t now_ms, int max, uint64_t *committed,
                            int *moved, int *ready_out, char *err, size_t errlen)
{
    level_state_t *ls = &s->levels[l];
    level_walk_t w;
    walk_begin(&w, s, l);
    int rc, moved_before = *moved, cq_head_moved = 0;
    while ((rc = walk_entry(&w, bound, max, *moved, err, errlen)) > 0) {
        msg_t m;
        idx_journey_t journey;
        int has_journey = 0;
        if (store_iter_msg(w.it, &m, "a level queue", err, errlen) != 0 ||
            (m.dest == MSG_DEST_TOPIC && s->redo != NULL &&
             (has_journey = idx_journey_read(s, m.id, &journey, err, errlen)) < 0)) {
            rc = walk_damaged(&w, *moved > moved_before);
            break;
        }
        topic_state_t *topic = level_entry_take(s, l, w.key, w.klen, &m);
        if (has_journey && journey.queue == (uint32_t)l) {
            cq_head_moved |= store_level_cq_done(s, l, journey.cq_index);
        }
        uint32_t left_queue = has_journey ? journey.queue : 0;
        if (has_journey) { /* its 'X' names this `L` entry: rewritten where it goes next, or none on a CQ-served */
            key_buf_t x;   /* level (level_insert), or at arrival under a fresh seq */
            key_msg_index(&x, m.id);
            store_del(s, &x);
        }
        int ready = route_due(s, topic, &m, l, w.due, has_journey ? 0 : w.seq, now_ms, has_journey ? &journey : NULL,
                              err, errlen);
        if (ready >= 0 && left_queue == STORE_LANE_QUEUE && store_lane_left(s, m.id, err, errlen) != 0) {
            ready = -1;
        }
        if (count_moved(ready, moved, ready_out) != 0) {
            rc = -1;
            break;
        }
        /* Past the level's last message the iterator would walk every
         * deleted key after it (the next level's popped heads) to the next
         * live one: the level is empty, there is no next head to read. */
        if (--*committed == 0) {
            break;
        }
        leveldb_iter_next(w.it);
    }
    rc = walk_end(&w, rc, err, errlen);
    if (cq_head_moved) { /* with the entries taken, also when the walk then failed (they are in the batch) */
        store_log_cq_head(s, (uint32_t)l, ls->cq_head);
    }
    if (rc != 0) {
        return -1;
    }
    ls->damaged = 0; /* it moves (again) */
    walk_head_set(ls, w.have_next, w.next_due, w.next_seq);
    level_took(s, l);
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

/* The message the entry e at index of queue names, when it is live there:
 * its record read from the log and its where-slot naming the entry back, not
 * revoked (§2: a record is trusted only when its slot names it). 1 with *m
 * (views into r's buffer, valid until the next read) and *j, 0 when it is
 * dead (its segment recycled, its slot naming another place: moved on or
 * revoked), -1 with err (a read failed, a damaged record). */
static int move_journey(move_reads_t *r, uint32_t queue, uint64_t index, const cq_entry_t *e, msg_t *m,
                        idx_journey_t *j, char *err, size_t errlen)
{
    store_t *s = r->s;
    clog_record_t rec;
    char why[512];
    int rc = clog_read(redo_log(s->redo), e->log_offset, &r->rd, &rec, why, sizeof why);
    if (rc == CLOG_NOT_RECORD) {
        return 0;
    }
    uint32_t ordinal = 0;
    if (rc != 0 || msg_record_ordinal(rec.data, rec.len, &ordinal, why, sizeof why) != 0) {
        return err_set(err, errlen,
                       "the record of %016" PRIx64 " (consume queue %" PRIu32 ", entry %" PRIu64 ") in %s: %s",
                       e->log_offset, queue, index, s->path, why);
    }
    slot_t sl = { 0 };
    if (store_slot_run_get(s, &r->slots, e->log_offset - e->log_offset % s->opt.segment_bytes, ordinal, &sl, err,
                           errlen) != 0) {
        return -1;
    }
    if (sl.id != e->log_offset || sl.queue != queue || sl.cq_index != index || (sl.flags & SLOT_REVOKED)) {
        return 0;
    }
    if (msg_decode_record(rec.data, rec.len, e->log_offset, ordinal, m, why, sizeof why) != 0) {
        return err_set(err, errlen,
                       "the record of %016" PRIx64 " (consume queue %" PRIu32 ", entry %" PRIu64 ") in %s: %s",
                       e->log_offset, queue, index, s->path, why);
    }
    j->ordinal = ordinal;
    j->queue = queue;
    j->cq_index = index;
    return 1;
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
 * (route_due: next hop, or arrival under a fresh topic-log seq, which writes
 * its first 'X'). 1 when it became ready, 0 when it hopped, -1 with err. */
static int move_journey_on(store_t *s, int l, const cq_entry_t *e, msg_t *m, idx_journey_t *j, uint64_t now_ms,
                           char *err, size_t errlen)
{
    level_state_t *ls = &s->levels[l];
    ls->depth--;
    ls->pops_since_compact++;
    store_mark_level(s, l);
    topic_state_t *topic = msg_topic(s, m);
    topic_delayed_add(s, topic, -1);
    return route_due(s, topic, m, l, e->due, 0, now_ms, j, err, errlen); /* no 'X' yet: written at arrival */
}

/* Level l's retries (without on_l): walk `L` from the retry head up to bound,
 * taking each retry due and stepping over the journeys' keys (their CQ
 * serves them), until the level counts no retry left. The new head is the
 * first key past bound (a lower bound of the next retry), or a retry
 * inserted meanwhile. */
static int serve_retries(store_t *s, int l, uint64_t bound, uint64_t now_ms, int max, int *moved, int *ready_out,
                         char *err, size_t errlen)
{
    level_state_t *ls = &s->levels[l];
    level_walk_t w;
    walk_begin(&w, s, l);
    int rc = 0, moved_before = *moved;
    while (ls->retries > 0 && (rc = walk_entry(&w, bound, max, *moved, err, errlen)) > 0) {
        if (w.seq & STORE_JOURNEY_SEQ) {
            leveldb_iter_next(w.it);
            continue;
        }
        msg_t m;
        if (store_iter_msg(w.it, &m, "a level queue", err, errlen) != 0) {
            rc = walk_damaged(&w, *moved > moved_before);
            break;
        }
        topic_state_t *topic = level_entry_take(s, l, w.key, w.klen, &m);
        int ready = route_due(s, topic, &m, l, w.due, w.seq, now_ms, NULL, err, errlen);
        if (count_moved(ready, moved, ready_out) != 0) {
            rc = -1;
            break;
        }
        leveldb_iter_next(w.it);
    }
    if (walk_end(&w, rc, err, errlen) != 0) {
        return -1;
    }
    if (ls->retries > 0) {
        walk_head_set(ls, w.have_next, w.next_due, w.next_seq);
    } else { /* no retry left: no head, whatever was inserted */
        ls->has_head = 0;
        ls->head_due = w.next_due;
        ls->head_seq = w.next_seq;
    }
    if (ls->retries > 0 && !ls->has_head) { /* the count said more than `L` holds: store_check names it */
        ls->retries = 0;
    }
    store_mark_level(s, l);
    return 0;
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
            if (serve_retries(s, l, first < bound ? first : bound, now_ms, max, moved, ready_out, err, errlen) != 0) {
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
        if (count_moved(ready, moved, ready_out) != 0) {
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
        int failed = s->levels[l].on_l
                         ? serve_level_walk(s, l, bound, now_ms, max, &committed[l], moved, ready_out, err, errlen)
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
