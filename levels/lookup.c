/*
 * levels/lookup.c — finding messages (see store.h): GET, FIND, SEND …
 * DEDUP and PEEK, read from the indexes of levels/index.c (REVOKE, which
 * builds on the same views, is levels/revoke.c).
 *
 * A message has its own copy (its SEND journey on a level, then the topic
 * log) and one copy per group that took it (a lease, a retry, the DLQ). A
 * view collects them: the own copy on its journey by its where-slot and its
 * record in the commit log (journey.c; design-commitlog.md 4a.5), else from
 * 'X' (the topic log, a level still walked by `L`), the group copies from the 'Y'
 * entries of the id; and, while the message is in the topic log, every group
 * of the topic is READY (its cursor is at or before the message) or DONE
 * (past it, holding no copy). The overall state is the first that applies of
 * DELAYED, READY, LEASED, RETRY, DLQ; else GONE.
 *
 * Threading: one thread at a time (the broker's storage thread).
 */
#include "levels/store_internal.h"
#include "base/alloc.h"
#include "base/err.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char *store_msg_state_name(store_msg_state_t st)
{
    static const char *names[] = { "gone", "delayed", "ready", "leased", "retry", "dlq", "done" };
    return (unsigned)st < sizeof names / sizeof names[0] ? names[st] : "unknown";
}

void store_msg_view_free(store_msg_view_t *v)
{
    if (v == NULL) {
        return;
    }
    msg_owned_free(&v->msg);
    for (int i = 0; i < v->ncopies; i++) {
        free(v->copies[i].reason);
    }
    free(v->copies);
    memset(v, 0, sizeof *v);
}

/* ---- building a view --------------------------------------------------------------- */

/* Read the message under k into *m (views into *buf, free with leveldb_free):
 * 1, 0 when missing, -1 on error. */
static int read_msg(store_t *s, const key_buf_t *k, char **buf, msg_t *m, const char *where, char *err, size_t errlen)
{
    size_t vlen;
    int found = store_get(s, k, buf, &vlen, err, errlen);
    if (found <= 0) {
        return found;
    }
    if (store_decode(*buf, vlen, m, where, err, errlen) != 0) {
        leveldb_free(*buf);
        return -1;
    }
    return 1;
}

static store_copy_view_t *view_add_copy(store_msg_view_t *v, const char *group, size_t glen)
{
    v->copies = xrealloc(v->copies, (size_t)(v->ncopies + 1) * sizeof *v->copies);
    store_copy_view_t *c = &v->copies[v->ncopies++];
    memset(c, 0, sizeof *c);
    memcpy(c->group, group, glen);
    c->group[glen] = '\0';
    return c;
}

/* Keep the message's bytes in the view (the first copy read wins: the own
 * copy is read first). */
static void view_keep_msg(store_msg_view_t *v, const msg_t *m, int with_payload)
{
    if (v->msg.buf != NULL) {
        return;
    }
    msg_t c = *m;
    if (!with_payload) {
        c.payload.ptr = NULL;
        c.payload.len = 0;
    }
    c.reason.ptr = NULL;
    c.reason.len = 0;
    msg_owned_copy(&v->msg, &c);
}

/* Hops still to come after the level hop that is due at hop_due, for a
 * journey ending at due (the greedy chain of level_move.c's store_route_due). */
static int hops_after(const lvl_table_t *t, uint64_t hop_due, uint64_t due)
{
    int n = 0;
    while (due > hop_due && n < 1000) {
        hop_due += t->delay_ms[lvl_next_hop(t, due - hop_due)];
        n++;
    }
    return n;
}

/* The own copy at h->place: fills the DELAYED fields and keeps the message. */
static int view_home(store_t *s, store_msg_view_t *v, const idx_home_t *h, int with_payload, char *err, size_t errlen)
{
    key_buf_t k;
    if (h->place.tag == 'L') {
        key_level(&k, h->place.level, h->place.due, h->place.seq);
    } else {
        key_queue(&k, KEY_TOPIC_LOG, h->topic, h->topic_len, h->place.seq);
    }
    char *buf;
    msg_t m;
    int found = read_msg(s, &k, &buf, &m, "the message index's place", err, errlen);
    if (found <= 0) {
        return found < 0 ? -1
                         : err_set(err, errlen, "message index of %016llx names a missing '%c' entry in %s",
                                   (unsigned long long)v->id, h->place.tag, s->path);
    }
    view_keep_msg(v, &m, with_payload);
    if (h->place.tag == 'L') {
        v->level = h->place.level;
        v->hop_due_ms = h->place.due;
        v->hops_left = hops_after(&s->opt.levels, h->place.due, m.due_ms);
    }
    leveldb_free(buf);
    return 0;
}

/* One 'Y' entry (group copy): the copy's state, read from where it sits. */
static int view_copy(store_t *s, store_msg_view_t *v, const char *group, size_t glen, const idx_place_t *p,
                     int with_payload, char *err, size_t errlen)
{
    key_buf_t k;
    store_copy_view_t c = { 0 };
    if (p->tag == 'I') {
        c.deadline_ms = p->due;
        key_lease(&k, c.deadline_ms, group, glen, v->id);
        c.state = STORE_MSG_LEASED;
    } else if (p->tag == 'L') {
        key_level(&k, p->level, p->due, p->seq);
        c.state = STORE_MSG_RETRY;
        c.level = p->level;
    } else if (p->tag == 'R') {
        key_queue(&k, KEY_RETRY, group, glen, p->seq);
        c.state = STORE_MSG_RETRY;
    } else if (p->tag == 'D') {
        key_queue(&k, KEY_DLQ, group, glen, v->id);
        c.state = STORE_MSG_DLQ;
    } else {
        return err_set(err, errlen, "corrupt copy index entry of %016llx (place '%c')", (unsigned long long)v->id,
                       p->tag);
    }
    char *buf;
    msg_t m;
    int found = read_msg(s, &k, &buf, &m, "a group copy", err, errlen);
    if (found <= 0) {
        return found < 0 ? -1
                         : err_set(err, errlen, "copy index of %016llx names a missing '%c' entry in %s",
                                   (unsigned long long)v->id, p->tag, s->path);
    }
    view_keep_msg(v, &m, with_payload);
    c.reconsume = m.reconsume;
    if (c.state == STORE_MSG_RETRY && c.level > 0) {
        c.due_ms = m.due_ms;
    }
    if (c.state == STORE_MSG_DLQ) {
        c.parked_ms = m.stamp_ms;
    }
    if (m.reason.len > 0) {
        c.reason = xmemdup(m.reason.ptr, m.reason.len);
        c.reason_len = m.reason.len;
    }
    leveldb_free(buf);
    store_copy_view_t *slot = view_add_copy(v, group, glen);
    memcpy(c.group, slot->group, sizeof c.group);
    *slot = c;
    if (m.reconsume > v->reconsume) {
        v->reconsume = m.reconsume;
    }
    return 0;
}

/* The group copies of v->id (current incarnations only). */
static int view_copies(store_t *s, store_msg_view_t *v, int with_payload, char *err, size_t errlen)
{
    key_buf_t k;
    key_msg_index(&k, v->id);
    k.b[0] = (char)KEY_COPY_INDEX;
    leveldb_iterator_t *it = store_iter_at(s, &k);
    const char *key;
    size_t klen;
    int rc = 0;
    for (; rc == 0 && store_iter_in(it, k.b, k.n, &key, &klen); leveldb_iter_next(it)) {
        uint64_t id, gen;
        const char *group;
        size_t glen;
        if (key_copy_index_parse(key, klen, &id, &group, &glen, &gen) != 0) {
            char d[KEY_DESCRIBE_BYTES];
            rc = err_set(err, errlen, "corrupt copy index key %s in %s", key_describe(key, klen, d, sizeof d), s->path);
            break;
        }
        const group_state_t *g = store_group_get(s, group, glen);
        if (g == NULL || g->gen != gen) {
            continue; /* a deleted group's delayed retry: dropped when due */
        }
        size_t vlen;
        const char *val = leveldb_iter_value(it, &vlen);
        idx_place_t p;
        if (idx_place_decode(val, vlen, &p) != 0) {
            rc = err_set(err, errlen, "corrupt copy index entry in %s", s->path);
            break;
        }
        char gname[MSG_MAX_NAME + 1];
        memcpy(gname, group, glen); /* the key is the iterator's: copy before other reads */
        rc = view_copy(s, v, gname, glen, &p, with_payload, err, errlen);
    }
    if (rc == 0) {
        rc = store_iter_error(it, "the copy index", err, errlen);
    }
    leveldb_iter_destroy(it);
    return rc;
}

static int has_copy(const store_msg_view_t *v, const char *group, size_t glen)
{
    for (int i = 0; i < v->ncopies; i++) {
        if (strlen(v->copies[i].group) == glen && memcmp(v->copies[i].group, group, glen) == 0) {
            return 1;
        }
    }
    return 0;
}

/* The overall state, from the own copy's place and the copies. */
static store_msg_state_t view_state(const store_msg_view_t *v, char home_tag, int topic_has_groups)
{
    if (home_tag == 'L') {
        return STORE_MSG_DELAYED;
    }
    static const store_msg_state_t order[] = { STORE_MSG_READY, STORE_MSG_LEASED, STORE_MSG_RETRY, STORE_MSG_DLQ };
    if (home_tag == 'T' && !topic_has_groups) {
        return STORE_MSG_READY;
    }
    for (size_t o = 0; o < sizeof order / sizeof order[0]; o++) {
        for (int i = 0; i < v->ncopies; i++) {
            if (v->copies[i].state == order[o]) {
                return order[o];
            }
        }
    }
    return STORE_MSG_GONE;
}

/* The view of id when it is on a SEND journey served from its CQ, found by
 * its where-slot (journey.c): DELAYED on its level, the message read from its
 * record (a journey has no group copy: groups take from the topic log). 1
 * when it is, 0 when not (then 'X' says where), -1 with err. */
static int view_journey(store_t *s, store_msg_view_t *v, int with_payload, char *err, size_t errlen)
{
    clog_reader_t rd = { 0 };
    msg_t m;
    store_journey_t at;
    int found = store_journey_find(s, v->id, &rd, &m, &at, err, errlen);
    if (found > 0 && !at.on_l) {
        view_keep_msg(v, &m, with_payload);
        v->level = at.level;
        v->hop_due_ms = at.hop_due;
        v->hops_left = hops_after(&s->opt.levels, at.hop_due, m.due_ms);
        v->state = STORE_MSG_DELAYED;
    }
    clog_reader_free(&rd);
    return found < 0 ? -1 : found > 0 && !at.on_l;
}

/* The own copy of v->id when it is in its topic's CQ (topic_cq.c;
 * design-commitlog.md 4b): *h as an 'X' record would say it (place 'T' at
 * its CQ seq; topic and key views into rd's window), the message kept. 1
 * when it is, 0 when not (then 'X' says where), -1 with err. */
static int view_topic_cq(store_t *s, store_msg_view_t *v, clog_reader_t *rd, idx_home_t *h, int with_payload, char *err,
                         size_t errlen)
{
    msg_t m;
    topic_state_t *t;
    idx_journey_t j;
    int found = topic_cq_find(s, v->id, rd, &m, &t, &j, err, errlen);
    if (found <= 0) {
        return found;
    }
    memset(h, 0, sizeof *h);
    h->place = (idx_place_t){ 'T', 0, 0, store_topic_cq_seq(t, j.cq_index) };
    h->topic = m.topic.ptr;
    h->topic_len = m.topic.len;
    h->key = m.key.ptr;
    h->key_len = m.key.len;
    view_keep_msg(v, &m, with_payload);
    return 1;
}

int store_msg_view_build(store_t *s, uint64_t id, int with_payload, store_msg_view_t *v, char *err, size_t errlen)
{
    memset(v, 0, sizeof *v);
    v->id = id;
    int on_journey = view_journey(s, v, with_payload, err, errlen);
    if (on_journey != 0) {
        if (on_journey < 0) {
            store_msg_view_free(v);
        }
        return on_journey < 0 ? -1 : 0;
    }
    char *hbuf = NULL;
    idx_home_t h;
    clog_reader_t rd = { 0 };
    int found = view_topic_cq(s, v, &rd, &h, with_payload, err, errlen); /* in its topic's CQ: no 'X' */
    int in_cq = found > 0;
    if (found == 0) {
        found = idx_home_read(s, id, &hbuf, &h, err, errlen);
    }
    if (found <= 0) {
        clog_reader_free(&rd);
        return found; /* 0: GONE */
    }
    int rc = 0;
    if (h.place.tag != 0 && !in_cq) {
        rc = view_home(s, v, &h, with_payload, err, errlen);
    }
    if (rc == 0) {
        rc = view_copies(s, v, with_payload, err, errlen);
    }
    const topic_state_t *t = map_get(&s->topics, h.topic, h.topic_len);
    int groups = 0;
    if (rc == 0 && t != NULL) {
        for (const group_state_t *g = t->first_group; g != NULL; g = g->next_in_topic) {
            groups++;
            if (h.place.tag != 'T' || has_copy(v, g->name, g->len)) {
                continue;
            }
            store_copy_view_t *c = view_add_copy(v, g->name, g->len);
            const lease_pend_t *p = idmap_get(&g->pend_ids, v->id); /* DEDUP does not write them */
            c->state = h.place.seq >= g->cursor ? STORE_MSG_READY : p != NULL ? STORE_MSG_LEASED : STORE_MSG_DONE;
            if (p != NULL) {
                c->deadline_ms = p->deadline;
            }
        }
    }
    if (rc == 0) {
        v->state = view_state(v, h.place.tag, groups > 0);
        if (v->state == STORE_MSG_GONE) {
            msg_owned_free(&v->msg);
        }
    }
    leveldb_free(hbuf);
    clog_reader_free(&rd);
    if (rc != 0) {
        store_msg_view_free(v);
        return -1;
    }
    return 0;
}

int store_msg_get(store_t *s, uint64_t id, int with_payload, store_msg_view_t *out, char *err, size_t errlen)
{
    memset(out, 0, sizeof *out);
    if (store_read_begin(s, err, errlen) != 0) {
        return -1;
    }
    return store_msg_view_build(s, id, with_payload, out, err, errlen) < 0 ? -1 : 0;
}

/* ---- FIND ----------------------------------------------------------------------------- */

int store_find_args_check(const char *topic, size_t tlen, size_t klen, char *err, size_t errlen)
{
    if (msg_check_name("topic", topic, tlen, err, errlen) != 0) {
        return -1;
    }
    if (klen == 0 || klen > MSG_MAX_KEY) {
        return err_set(err, errlen, "key must be 1..%d bytes, got %zu", MSG_MAX_KEY, klen);
    }
    return 0;
}

int store_msg_find(store_t *s, const char *topic, size_t topic_len, const char *key, size_t key_len, int max,
                   store_msg_view_t **out, int *n, char *err, size_t errlen)
{
    *out = NULL;
    *n = 0;
    if (store_find_args_check(topic, topic_len, key_len, err, errlen) != 0 || store_read_begin(s, err, errlen) != 0) {
        return -1;
    }
    uint64_t *ids;
    int nids;
    if (idx_key_ids(s, topic, topic_len, key, key_len, max, &ids, &nids, err, errlen) != 0) {
        return -1;
    }
    store_msg_view_t *views = nids ? xcalloc((size_t)nids, sizeof *views) : NULL;
    int rc = 0;
    for (int i = 0; i < nids && rc == 0; i++) {
        rc = store_msg_view_build(s, ids[i], 0, &views[*n], err, errlen);
        if (rc == 0 && views[*n].state != STORE_MSG_GONE) {
            (*n)++;
        } else if (rc == 0) {
            store_msg_view_free(&views[*n]);
        }
    }
    free(ids);
    if (rc != 0) {
        for (int i = 0; i < *n; i++) {
            store_msg_view_free(&views[i]);
        }
        free(views);
        *n = 0;
        return -1;
    }
    *out = views;
    return 0;
}

/* ---- SEND … DEDUP ------------------------------------------------------------------------ */

int store_dedup_find(store_t *s, const store_send_req_t *req, uint64_t *id, uint64_t *due_ms, char *err, size_t errlen)
{
    /* A batch of SENDs only: committed data and the keys sent in the batch
     * are the whole truth (index.c), no commit needed. */
    if (idx_sent_key_find(s, req->topic, req->topic_len, req->key, req->key_len, id, due_ms)) {
        return 1; /* a SEND of the same key earlier in this batch: live until something else runs */
    }
    uint64_t *ids;
    int n;
    if (idx_key_ids(s, req->topic, req->topic_len, req->key, req->key_len, 1 << 20, &ids, &n, err, errlen) != 0) {
        return -1;
    }
    int rc = 0, found = 0;
    for (int i = 0; i < n && rc == 0 && !found; i++) {
        store_msg_view_t v;
        rc = store_msg_view_build(s, ids[i], 0, &v, err, errlen);
        if (rc == 0 && store_msg_state_live(v.state)) {
            found = 1;
            *id = v.id;
            *due_ms = v.msg.m.due_ms;
        }
        if (rc == 0) {
            store_msg_view_free(&v);
        }
    }
    free(ids);
    return rc != 0 ? -1 : found;
}

int store_send_dedup(store_t *s, const store_send_req_t *req, uint64_t now_ms, uint64_t *id_out, uint64_t *due_out,
                     int *dup, char *err, size_t errlen)
{
    *dup = 0;
    if (store_send_refusal(s, req, 1, NULL, 0, err, errlen) != 0 || store_send_run_begin(s, 0, err, errlen) != 0) {
        return -1;
    }
    uint64_t due;
    int found = store_dedup_find(s, req, id_out, &due, err, errlen);
    if (found < 0) {
        return -1;
    }
    if (found) {
        *dup = 1;
        if (due_out) {
            *due_out = due;
        }
        return 0;
    }
    return store_send(s, req, now_ms, id_out, due_out, err, errlen);
}

int store_send_run_begin(store_t *s, uint64_t run_bytes, char *err, size_t errlen)
{
    int rc = s->pending == s->pending_sends ? store_usable(s, err, errlen) : store_read_begin(s, err, errlen);
    return rc != 0 ? rc : store_log_run_room(s, run_bytes, err, errlen);
}

/* ---- PEEK ---------------------------------------------------------------------------------- */

/* What a PEEK of a level served from its CQ collects: its journeys (from
 * its CQ and, for level 1, the lane) and its retries, each source in its own
 * order, merged by due at the end. */
typedef struct peek_level {
    msg_owned_t *m;
    uint64_t *due;
    int n, cap, want; /* want: stop a source after that many (0: the lane, collected whole) */
} peek_level_t;

static int peek_add(void *ctx, const msg_t *m, const store_journey_t *at, char *err, size_t errlen)
{
    (void)err;
    (void)errlen;
    peek_level_t *p = ctx;
    if (p->n == p->cap) {
        p->cap = p->cap ? 2 * p->cap : 16;
        p->m = xrealloc(p->m, (size_t)p->cap * sizeof *p->m);
        p->due = xrealloc(p->due, (size_t)p->cap * sizeof *p->due);
    }
    msg_owned_copy(&p->m[p->n], m);
    p->due[p->n++] = at->hop_due;
    return p->want > 0 && p->n >= p->want ? 1 : 0; /* enough from this source */
}

/* Level l's retries (`L` keys without STORE_JOURNEY_SEQ) from its start, at
 * most want of them. */
static int peek_retries(store_t *s, int l, peek_level_t *p, int want, char *err, size_t errlen)
{
    if (s->levels[l].retries == 0) {
        return 0;
    }
    key_buf_t k;
    key_level(&k, l, 0, 0);
    leveldb_iterator_t *it = store_iter_at(s, &k);
    const char *key;
    size_t klen;
    int rc = 0, got = 0;
    for (; got < want && store_iter_in(it, k.b, 2, &key, &klen); leveldb_iter_next(it)) {
        int level;
        uint64_t due, seq;
        msg_t m;
        if (key_level_parse(key, klen, &level, &due, &seq) != 0 || (seq & STORE_JOURNEY_SEQ)) {
            continue;
        }
        if (store_iter_msg(it, &m, "a level queue", err, errlen) != 0) {
            rc = -1;
            break;
        }
        store_journey_t at = { .hop_due = due };
        (void)peek_add(p, &m, &at, err, errlen);
        got++;
    }
    if (rc == 0) {
        rc = store_iter_error(it, "a level queue", err, errlen);
    }
    leveldb_iter_destroy(it);
    return rc;
}

/* store_peek of level l served from its CQ (design-commitlog.md 4a.5: its
 * journeys have no `L` entry): the first count by due of its CQ, its lane
 * (level 1) and its retries, the CQ's first among equal dues. */
static int peek_level_cq(store_t *s, int l, int count, uint64_t max_bytes, msg_owned_t *out, uint64_t *hop_due, int *n,
                         char *err, size_t errlen)
{
    peek_level_t p = { .want = count };
    int rc = store_journeys_queue(s, (uint32_t)l, peek_add, &p, err, errlen) < 0 ? -1 : 0;
    if (rc == 0 && l == 1) {
        p.want = 0;
        rc = store_journeys_queue(s, STORE_LANE_QUEUE, peek_add, &p, err, errlen) < 0 ? -1 : 0;
    }
    if (rc == 0) {
        rc = peek_retries(s, l, &p, count, err, errlen);
    }
    int *taken = p.n ? xcalloc((size_t)p.n, sizeof *taken) : NULL;
    uint64_t bytes = 0;
    while (rc == 0 && *n < count && bytes < max_bytes) {
        int best = -1;
        for (int i = 0; i < p.n; i++) {
            if (!taken[i] && (best < 0 || p.due[i] < p.due[best])) {
                best = i;
            }
        }
        if (best < 0) {
            break;
        }
        taken[best] = 1;
        hop_due[*n] = p.due[best];
        out[(*n)++] = p.m[best];
        bytes += p.m[best].m.payload.len;
    }
    for (int i = 0; i < p.n; i++) {
        if (!taken[i] || rc != 0) {
            msg_owned_free(&p.m[i]);
        }
    }
    if (rc != 0) {
        *n = 0;
    }
    free(taken);
    free(p.m);
    free(p.due);
    return rc;
}

/* PEEK of a topic's log: its walk from the head (topic_walk.c: the 'T' range,
 * then its CQ), each message with its arrival stamp in hop_due. */
static int peek_topic(store_t *s, const char *topic, size_t topic_len, int count, uint64_t max_bytes, msg_owned_t *out,
                      uint64_t *hop_due, int *n, char *err, size_t errlen)
{
    topic_state_t *t = map_get(&s->topics, topic, topic_len);
    if (t == NULL || t->appended == t->removed || count < 1) {
        return 0;
    }
    uint64_t left = t->appended - t->removed;
    uint64_t bytes = 0;
    queue_walk_t w;
    queue_walk_topic(&w, s, t, t->head_hint);
    const char *key;
    size_t klen;
    uint64_t seq;
    msg_t *m; /* the walk's: copied into out[] */
    int rc = 0, got;
    while (*n < count && left > 0 && bytes < max_bytes &&
           (got = queue_walk_next(&w, &key, &klen, &seq, "a topic log", err, errlen)) != 0) {
        if (got < 0 || (m = queue_walk_msg(&w, err, errlen)) == NULL) {
            rc = -1;
            break;
        }
        hop_due[*n] = m->stamp_ms;
        msg_owned_copy(&out[(*n)++], m);
        bytes += m->payload.len;
        left--; /* no step past the last one: it could walk the next range's deleted keys */
    }
    queue_walk_end(&w);
    if (rc != 0) {
        for (int i = 0; i < *n; i++) {
            msg_owned_free(&out[i]);
        }
        *n = 0;
    }
    return rc;
}

int store_peek(store_t *s, int level, const char *topic, size_t topic_len, int count, uint64_t max_bytes,
               msg_owned_t *out, uint64_t *hop_due, int *n, char *err, size_t errlen)
{
    *n = 0;
    if (level < 0 || level > s->opt.levels.count) {
        return err_set(err, errlen, "level %d does not exist (levels are 1..%d)", level, s->opt.levels.count);
    }
    if (level == 0 && msg_check_name("topic", topic, topic_len, err, errlen) != 0) {
        return -1;
    }
    if (store_read_begin(s, err, errlen) != 0) {
        return -1;
    }
    if (level > 0 && !s->levels[level].on_l && s->redo != NULL) {
        return peek_level_cq(s, level, count, max_bytes, out, hop_due, n, err, errlen);
    }
    if (level == 0) {
        return peek_topic(s, topic, topic_len, count, max_bytes, out, hop_due, n, err, errlen);
    }
    key_buf_t k; /* a level walked by `L` */
    size_t plen = 2;
    uint64_t due, seq;
    if (!store_level_first_key(s, level, &due, &seq) || count < 1) {
        return 0;
    }
    key_level(&k, level, due, seq);
    uint64_t left = s->levels[level].depth;
    leveldb_iterator_t *it = store_iter_at(s, &k);
    const char *key;
    size_t klen;
    uint64_t bytes = 0;
    int rc = 0;
    while (*n < count && left > 0 && bytes < max_bytes && store_iter_in(it, k.b, plen, &key, &klen)) {
        msg_t m;
        if (store_iter_msg(it, &m, "a level queue", err, errlen) != 0) {
            rc = -1;
            break;
        }
        hop_due[*n] = be64_get(key + 2);
        msg_owned_copy(&out[(*n)++], &m);
        bytes += m.payload.len;
        if (--left == 0) {
            break; /* no step past the last one: it could walk the next range's deleted keys */
        }
        leveldb_iter_next(it);
    }
    if (rc == 0) {
        rc = store_iter_error(it, "a queue", err, errlen);
    }
    leveldb_iter_destroy(it);
    if (rc != 0) {
        for (int i = 0; i < *n; i++) {
            msg_owned_free(&out[i]);
        }
        *n = 0;
    }
    return rc;
}
