/*
 * levels/level_open.c — the level queues at store_open: a level served from
 * its CQ whose `L` range holds journeys too (format 5) walked by `L` from
 * then on, and each level CQ's head settled past the dead entries at it with
 * its dues read (store_level_cq_open); the CQ heads of the levels walked by
 * `L` left behind when the index is rebuilt without journeys
 * (store_journeys_abandon); the topics' delayed counts counted once for a
 * directory written before the topic records kept them
 * (store_topic_delayed_open). It relies on level.c for the levels' state and
 * on journey.c for the CQs' messages.
 *
 * Threading: one thread at a time (store_open's).
 */
#include "levels/store_internal.h"
#include "base/err.h"

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
                store_level_journeys_on_l(s, l);
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
