/*
 * levels/level_walk.c — the due move's walks of a level's `L` range, in key
 * (due, seq) order from the head kept in memory, so a walk seeks straight to
 * it and never steps over the keys taken before: store_serve_level_walk
 * serves a level that may hold journeys its CQ does not (on_l: a directory
 * of 4a.3 or format 5, a copy, an index rebuilt) by its `L` entries alone,
 * as 4a.3 did, until it empties; store_serve_retries serves a level served
 * from its CQ (level_move.c) its retries (entries bound for a group),
 * stepping over its journeys' keys, while it counts any. Each entry taken is
 * routed on by level_move.c's store_route_due.
 *
 * Threading: one thread at a time (the broker's storage thread).
 */
#include "levels/store_internal.h"
#include "base/err.h"

/* ---- the walks of `L` (store_serve_level_walk, store_serve_retries) --------------------------- */

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
 * state (store_msg_topic) for its route on. */
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
    topic_state_t *topic = store_msg_topic(s, m);
    store_topic_state_delayed_add(s, topic, -1);
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
        (!ls->has_head || store_level_key_less(ls->inserted_due, ls->inserted_seq, ls->head_due, ls->head_seq))) {
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
int store_serve_level_walk(store_t *s, int l, uint64_t bound, uint64_t now_ms, int max, uint64_t *committed, int *moved,
                           int *ready_out, char *err, size_t errlen)
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
            key_buf_t x;   /* level (store_level_insert), or at arrival under a fresh seq */
            key_msg_index(&x, m.id);
            store_del(s, &x);
        }
        int ready = store_route_due(s, topic, &m, l, w.due, has_journey ? 0 : w.seq, now_ms,
                                    has_journey ? &journey : NULL, err, errlen);
        if (ready >= 0 && left_queue == STORE_LANE_QUEUE && store_lane_left(s, m.id, err, errlen) != 0) {
            ready = -1;
        }
        if (store_count_moved(ready, moved, ready_out) != 0) {
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
    store_level_took(s, l);
    return 0;
}

/* Level l's retries (without on_l): walk `L` from the retry head up to bound,
 * taking each retry due and stepping over the journeys' keys (their CQ
 * serves them), until the level counts no retry left. The new head is the
 * first key past bound (a lower bound of the next retry), or a retry
 * inserted meanwhile. */
int store_serve_retries(store_t *s, int l, uint64_t bound, uint64_t now_ms, int max, int *moved, int *ready_out,
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
        int ready = store_route_due(s, topic, &m, l, w.due, w.seq, now_ms, NULL, err, errlen);
        if (store_count_moved(ready, moved, ready_out) != 0) {
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
