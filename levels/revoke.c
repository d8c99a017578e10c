/*
 * levels/revoke.c — REVOKE (see store.h store_revoke_id / store_revoke_key):
 * a message taken back before any group took it, found through the views of
 * levels/lookup.c.
 *
 * REVOKE takes only the own copy, and only before any group took it, so a
 * revoke never races a consumer: a DELAYED message leaves its level (the
 * level's head is found again when it was the head), a READY one leaves the
 * topic log (the topic's retained count and every group's backlog drop by
 * one). All revokes of one call are one batch. A READY message whose record
 * is damaged is found by its where-slot and CQ entry without the record, its
 * key through the key index (revoke_damaged), so an operator can remove the
 * entry that stalls its topic log's groups.
 *
 * Threading: one thread at a time (the broker's storage thread).
 */
#include "levels/store_internal.h"
#include "base/alloc.h"
#include "base/err.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct revoke_ctx {
    store_revoke_result_t *r;
    idx_place_t *taken; /* level keys deleted in this call (head search skips them) */
    size_t ntaken, captaken;
} revoke_ctx_t;

static void refuse(store_revoke_result_t *r, uint64_t id, const char *fmt, const char *a, const char *b)
{
    r->refused_total++;
    if (r->nrefused < STORE_REVOKE_REFUSED_MAX) {
        r->refused[r->nrefused].id = id;
        snprintf(r->refused[r->nrefused].reason, sizeof r->refused[0].reason, fmt, a, b);
        r->nrefused++;
    }
}

static int taken_has(const revoke_ctx_t *c, int level, uint64_t due, uint64_t seq)
{
    for (size_t i = 0; i < c->ntaken; i++) {
        if (c->taken[i].level == level && c->taken[i].due == due && c->taken[i].seq == seq) {
            return 1;
        }
    }
    return 0;
}

/* The level's head was revoked: its new head is the first key after it that
 * this call did not take (committed data still holds them). */
static int level_rehead(store_t *s, revoke_ctx_t *c, int level, char *err, size_t errlen)
{
    level_state_t *ls = &s->levels[level];
    if (ls->depth == 0) {
        ls->has_head = 0;
        return 0;
    }
    key_buf_t k;
    key_level(&k, level, ls->head_due, ls->head_seq);
    leveldb_iterator_t *it = store_iter_at(s, &k);
    const char *key;
    size_t klen;
    int found = 0, rc = 0;
    for (; store_iter_in(it, k.b, 2, &key, &klen); leveldb_iter_next(it)) {
        int l;
        uint64_t due, seq;
        if (key_level_parse(key, klen, &l, &due, &seq) != 0) {
            char d[KEY_DESCRIBE_BYTES];
            rc = err_set(err, errlen, "corrupt level key %s on level %d in %s", key_describe(key, klen, d, sizeof d),
                         level, s->path);
            break;
        }
        if (taken_has(c, level, due, seq)) {
            continue;
        }
        ls->head_due = due;
        ls->head_seq = seq;
        found = 1;
        break;
    }
    if (rc == 0) {
        rc = store_iter_error(it, "a level queue", err, errlen);
    }
    leveldb_iter_destroy(it);
    if (rc == 0 && !found) {
        rc = err_set(err, errlen, "level %d counts %llu messages but none is left after its head", level,
                     (unsigned long long)ls->depth);
    }
    return rc;
}

/* The first group of topic t past seq (it took the message), or NULL. */
static const group_state_t *group_past(const topic_state_t *t, uint64_t seq)
{
    for (const group_state_t *g = t->first_group; g != NULL; g = g->next_in_topic) {
        if (g->cursor > seq) {
            return g;
        }
    }
    return NULL;
}

/* Revoke m, on the CQ journey at (journey.c): its slot flagged revoked (its
 * CQ entry stays, dropped when it reaches the head), its level's depth and
 * its topic's delayed count down, its segment's live count down, the CQ
 * head (or the lane's) moved past it when it was there, its 'X' and 'K'
 * dropped. */
static int revoke_journey(store_t *s, store_revoke_result_t *r, msg_t *m, const store_journey_t *at, char *err,
                          size_t errlen)
{
    level_state_t *ls = &s->levels[at->level];
    ls->depth--;
    store_mark_level(s, at->level);
    store_topic_delayed_add(s, m, -1);
    store_log_slot(s, m->id, &at->j, SLOT_REVOKED);
    s->pending++; /* the slot is a write even with no LevelDB one */
    segcount_add(s, m->id, -1);
    int rc = 0;
    if (at->j.queue == STORE_LANE_QUEUE) {
        rc = store_lane_left(s, m->id, err, errlen);
    } else if (store_level_cq_done(s, at->level, at->j.cq_index)) {
        store_log_cq_head(s, at->j.queue, ls->cq_head);
    }
    if (rc == 0) {
        rc = idx_home_gone(s, map_get(&s->topics, m->topic.ptr, m->topic.len), m, err, errlen);
    }
    if (rc == 0) {
        r->from_delayed++;
        r->revoked++;
    }
    return rc;
}

/* Revoke m, READY in its topic t's CQ at j (topic_cq.c) unless a group took
 * it: its slot flagged revoked (its entry stays: the walks and the GC pass
 * it), its topic's retained count and every group's backlog down by one, its
 * segment's live count down, its 'K' dropped (it has no 'X'). */
static int revoke_topic_cq(store_t *s, store_revoke_result_t *r, msg_t *m, topic_state_t *t, const idx_journey_t *j,
                           char *err, size_t errlen)
{
    const group_state_t *past = group_past(t, store_topic_cq_seq(t, j->cq_index));
    if (past != NULL) {
        store_msg_view_t v;
        if (store_msg_view_build(s, m->id, 0, &v, err, errlen) != 0) {
            return -1;
        }
        const char *st = store_msg_state_name(v.state == STORE_MSG_GONE ? STORE_MSG_DONE : v.state);
        refuse(r, m->id, "already delivered to group %s (%s)", past->name, st);
        store_msg_view_free(&v);
        return 0;
    }
    store_log_slot(s, m->id, j, SLOT_REVOKED);
    s->pending++; /* the slot is a write even with no LevelDB one */
    segcount_add(s, m->id, -1);
    t->removed++;
    store_mark_topic(s, t);
    for (group_state_t *g = t->first_group; g != NULL; g = g->next_in_topic) {
        g->position++; /* its backlog (appended - position) loses the message */
        store_mark_group(s, g);
    }
    if (idx_home_gone_unindexed(s, t, m, err, errlen) != 0) {
        return -1;
    }
    r->from_ready++;
    r->revoked++;
    return 0;
}

/* Revoke id, whose record is damaged (store_journey_find failed on it, err
 * saying so), as revoke_topic_cq does — found READY in its topic's CQ by its
 * where-slot without the record (topic_cq_find_damaged), its key from the key
 * index — and let its topic's groups skipped for the damage try the log again
 * now. Anything else (on a level, a slot not found) keeps err: -1. A group
 * past it refuses it (no view: that reads the record). design-commitlog.md,
 * "REVOKE of a damaged record (s49)". */
static int revoke_damaged(store_t *s, store_revoke_result_t *r, uint64_t id, char *err, size_t errlen)
{
    topic_state_t *t;
    idx_journey_t j;
    if (!topic_cq_find_damaged(s, id, &t, &j)) {
        return -1;
    }
    const group_state_t *past = group_past(t, store_topic_cq_seq(t, j.cq_index));
    if (past != NULL) {
        refuse(r, id, "already delivered to group %s (%s)", past->name, "its record is damaged");
        return 0;
    }
    char *key;
    size_t klen;
    if (idx_key_of(s, t->name, t->len, id, &key, &klen, err, errlen) < 0) {
        return -1;
    }
    msg_t m = { 0 };
    m.id = id;
    m.topic.ptr = t->name;
    m.topic.len = (uint32_t)t->len;
    m.key.ptr = key;
    m.key.len = (uint32_t)klen;
    int rc = revoke_topic_cq(s, r, &m, t, &j, err, errlen);
    free(key);
    if (rc == 0) {
        store_topic_log_damage_retry(s, t);
    }
    return rc;
}

/* Revoke one message by id (store_read_begin done by the caller). */
static int revoke_one(store_t *s, revoke_ctx_t *c, uint64_t id, char *err, size_t errlen)
{
    store_revoke_result_t *r = c->r;
    clog_reader_t rd = { 0 };
    msg_t jm;
    store_journey_t at;
    int on_journey = store_journey_find(s, id, &rd, &jm, &at, err, errlen);
    if (on_journey != 0 && (on_journey < 0 || !at.on_l)) {
        int jrc = on_journey < 0 ? revoke_damaged(s, r, id, err, errlen) : revoke_journey(s, r, &jm, &at, err, errlen);
        clog_reader_free(&rd);
        return jrc;
    }
    topic_state_t *ct;
    idx_journey_t cj;
    int in_cq = on_journey == 0 ? topic_cq_find(s, id, &rd, &jm, &ct, &cj, err, errlen) : 0;
    if (in_cq != 0) {
        int crc = in_cq < 0 ? -1 : revoke_topic_cq(s, r, &jm, ct, &cj, err, errlen);
        clog_reader_free(&rd);
        return crc;
    }
    clog_reader_free(&rd);
    char *hbuf;
    idx_home_t h;
    int found = idx_home_read(s, id, &hbuf, &h, err, errlen);
    if (found <= 0) {
        if (found == 0) {
            refuse(r, id, "gone%s%s", "", "");
        }
        return found;
    }
    msg_t m = { 0 };
    m.id = id;
    m.topic.ptr = h.topic;
    m.topic.len = (uint32_t)h.topic_len;
    m.key.ptr = h.key;
    m.key.len = (uint32_t)h.key_len;
    int rc = 0;
    topic_state_t *t = map_get(&s->topics, h.topic, h.topic_len);
    const group_state_t *past = h.place.tag == 'T' && t != NULL ? group_past(t, h.place.seq) : NULL;
    if (h.place.tag == 'L') {
        key_buf_t k;
        key_level(&k, h.place.level, h.place.due, h.place.seq);
        store_del(s, &k);
        level_state_t *ls = &s->levels[h.place.level];
        ls->depth--;
        store_mark_level(s, h.place.level);
        if (ls->depth == 0) {
            store_level_took(s, h.place.level);
        }
        m.dest = MSG_DEST_TOPIC; /* an 'X' home on a level is the SEND journey's copy */
        store_topic_delayed_add(s, &m, -1);
        if (c->ntaken == c->captaken) {
            c->captaken = c->captaken ? c->captaken * 2 : 8;
            c->taken = xrealloc(c->taken, c->captaken * sizeof *c->taken);
        }
        c->taken[c->ntaken++] = h.place;
        if (ls->has_head && ls->head_due == h.place.due && ls->head_seq == h.place.seq) {
            rc = level_rehead(s, c, h.place.level, err, errlen);
        }
        r->from_delayed++;
    } else if (h.place.tag == 'T' && past == NULL && t != NULL) {
        key_buf_t k;
        key_queue(&k, KEY_TOPIC_LOG, h.topic, h.topic_len, h.place.seq);
        store_del(s, &k);
        t->removed++;
        store_mark_topic(s, t);
        for (group_state_t *g = t->first_group; g != NULL; g = g->next_in_topic) {
            g->position++; /* its backlog (appended - position) loses the message */
            store_mark_group(s, g);
        }
        r->from_ready++;
    } else {
        store_msg_view_t v;
        rc = store_msg_view_build(s, id, 0, &v, err, errlen);
        if (rc == 0) {
            const char *g = past ? past->name : v.ncopies > 0 ? v.copies[0].group : "?";
            const char *st = store_msg_state_name(v.state == STORE_MSG_GONE ? STORE_MSG_DONE : v.state);
            refuse(r, id, "already delivered to group %s (%s)", g, st);
            store_msg_view_free(&v);
        }
        leveldb_free(hbuf);
        return rc;
    }
    if (h.has_journey && s->redo != NULL) { /* its slot says so (design-commitlog.md §4); its CQ entry stays */
        idx_journey_t j = h.journey;        /* on a level: as its last hop wrote it (a level's CQ or the lane) */
        j.queue = h.place.tag == 'L' ? j.queue : 0;
        j.cq_index = h.place.tag == 'L' ? j.cq_index : 0;
        store_log_slot(s, id, &j, SLOT_REVOKED);
        if (h.place.tag == 'L') {
            segcount_add(s, id, -1);
        }
        if (j.queue == STORE_LANE_QUEUE && rc == 0) {
            rc = store_lane_left(s, id, err, errlen);
        } else if (h.place.tag == 'L' && j.queue == (uint32_t)h.place.level &&
                   store_level_cq_done(s, h.place.level, j.cq_index)) {
            store_log_cq_head(s, j.queue, s->levels[h.place.level].cq_head);
        }
    }
    if (rc == 0) {
        rc = idx_home_gone(s, t, &m, err, errlen);
    }
    if (rc == 0) {
        r->revoked++;
    }
    leveldb_free(hbuf);
    return rc;
}

int store_revoke_id(store_t *s, uint64_t id, store_revoke_result_t *r, char *err, size_t errlen)
{
    memset(r, 0, sizeof *r);
    if (store_read_begin(s, err, errlen) != 0) {
        return -1;
    }
    int pending_before = s->pending; /* 0: all committed */
    revoke_ctx_t c = { r, NULL, 0, 0 };
    int rc = revoke_one(s, &c, id, err, errlen);
    free(c.taken);
    return rc == 0 ? 0 : store_fail_half_way(s, pending_before, "REVOKE", err, errlen);
}

int store_revoke_key(store_t *s, const char *topic, size_t topic_len, const char *key, size_t key_len,
                     store_revoke_result_t *r, char *err, size_t errlen)
{
    memset(r, 0, sizeof *r);
    if (store_find_args_check(topic, topic_len, key_len, err, errlen) != 0 || store_read_begin(s, err, errlen) != 0) {
        return -1;
    }
    int pending_before = s->pending; /* 0: all committed */
    uint64_t *ids;
    int n;
    if (idx_key_ids(s, topic, topic_len, key, key_len, 1 << 20, &ids, &n, err, errlen) != 0) {
        return -1;
    }
    revoke_ctx_t c = { r, NULL, 0, 0 };
    int rc = 0;
    for (int i = 0; i < n && rc == 0; i++) {
        rc = revoke_one(s, &c, ids[i], err, errlen);
    }
    free(ids);
    free(c.taken);
    /* the messages revoked before the failure are whole, but -1 says none was */
    return rc == 0 ? 0 : store_fail_half_way(s, pending_before, "REVOKE", err, errlen);
}
