/*
 * levels/index_build.c — the indexes ('X', 'K', 'Y': index.c) built once at
 * store_open for a directory written before they existed (idx_open, marked
 * by 'M' "index"): one store_scan for the messages' own copies, committed,
 * then one for the group copies, which asks 'X' whether the message has one;
 * the journeys still live counted again in their log segments. The place of
 * a scanned entry (idx_entry_place, idx_entry_is_copy) is index_check.c's
 * too.
 *
 * Threading: store_open's thread.
 */
#include "levels/store_internal.h"

/* ---- building the indexes of an older directory --------------------------------------- */

/* The place of a scanned entry. */
idx_place_t idx_entry_place(const store_entry_t *e)
{
    idx_place_t p = { (char)e->range, 0, 0, 0 };
    if (e->range == STORE_LEVEL) {
        p.level = e->level;
        p.due = e->due_ms;
    }
    if (e->range == STORE_LEASE) {
        p.due = e->deadline_ms; /* the topic-log seq it was taken from is not in the entry */
    }
    if (e->range == STORE_LEVEL || e->range == STORE_TOPIC || e->range == STORE_RETRY) {
        p.seq = e->seq;
    }
    return p;
}

/* 1 when the entry is a group's copy (a retry on a level, retry-ready, a
 * lease, the DLQ), 0 when it is the message's own copy. */
int idx_entry_is_copy(const store_entry_t *e)
{
    return e->range == STORE_LEVEL ? e->m->dest == MSG_DEST_GROUP : e->range != STORE_TOPIC;
}

typedef struct build_ctx {
    store_t *s;
    int copies; /* pass 2: group copies */
    char *err;
    size_t errlen;
    int failed;
} build_ctx_t;

/* 1 when the scanned entry e is a message of its topic's CQ whose record is
 * in the log (no 'X': design-commitlog.md 4b), 0 when not (a 'T' key), -1
 * with err. */
static int entry_in_topic_cq(build_ctx_t *b, const store_entry_t *e)
{
    topic_state_t *t = e->range == STORE_TOPIC ? map_get(&b->s->topics, e->m->topic.ptr, e->m->topic.len) : NULL;
    if (t == NULL || !store_topic_seq_on_cq(t, e->seq)) {
        return 0;
    }
    key_buf_t k;
    key_queue(&k, KEY_TOPIC_LOG, t->name, t->len, e->seq);
    int in_t = store_has(b->s, &k, b->err, b->errlen);
    return in_t < 0 ? -1 : !in_t;
}

static int build_entry(void *ctx, const store_entry_t *e)
{
    build_ctx_t *b = ctx;
    const msg_t *m = e->m;
    idx_place_t p = idx_entry_place(e);
    if (!b->copies) {
        int in_cq = entry_in_topic_cq(b, e);
        if (in_cq < 0) {
            b->failed = 1;
            return 1;
        }
        if ((e->range == STORE_LEVEL && (e->seq & STORE_JOURNEY_SEQ) && !b->s->levels[e->level].on_l) || in_cq) {
            idx_key_put(b->s, m); /* a journey only its CQ holds (journey.c), a topic CQ's message: no 'X' */
        } else if (!idx_entry_is_copy(e)) {
            idx_home_put(b->s, m, &p, 1, NULL);
        }
    } else if (idx_entry_is_copy(e)) {
        idx_copy_put(b->s, m->id, m->group.ptr, m->group.len, m->group_gen, &p);
        char *buf;
        idx_home_t h;
        int found = idx_home_read_raw(b->s, m->id, &buf, &h, b->err, b->errlen);
        if (found < 0) {
            b->failed = 1;
            return 1;
        }
        if (found) {
            leveldb_free(buf);
        } else {
            idx_place_t none = { 0 };
            idx_home_put(b->s, m, &none, 1, NULL);
        }
    }
    if (b->s->pending >= 10000 && store_commit_durable(b->s, 0, b->err, b->errlen) != 0) {
        b->failed = 1;
        return 1;
    }
    return 0;
}

/* store_journeys_each's callback for idx_open: the journey counted live in its segment. */
static int count_journey(void *ctx, const msg_t *m, const store_journey_t *at, char *err, size_t errlen)
{
    (void)err;
    (void)errlen;
    (void)at;
    store_t *s = ctx;
    segcount_add(s, m->id, +1);
    return 0;
}

/* topic_cqs_each's callback for idx_open: a topic CQ's message counted live in its segment. */
static int count_topic_cq(void *ctx, topic_state_t *t, uint64_t index, const msg_t *m, char *err, size_t errlen)
{
    (void)t;
    (void)index;
    (void)err;
    (void)errlen;
    segcount_add(ctx, m->id, +1);
    return 0;
}

int idx_open(store_t *s, char *err, size_t errlen)
{
    key_buf_t k;
    key_meta(&k, "index");
    int found = store_has(s, &k, err, errlen);
    if (found != 0) {
        return found < 0 ? -1 : 0;
    }
    /* The index rebuilt keeps no journey in 'X' (design-commitlog.md 4a.3): on a level walked by `L` no message
       counts as live in its log segment any more, and the consume queues' entries are left behind (their 'L'
       entries are what they are read from); a journey only its CQ holds (4a.5) keeps its entry and is counted
       again. */
    segcount_drop_all(s);
    store_journeys_abandon(s);
    if (store_journeys_each(s, count_journey, s, err, errlen) != 0 ||
        topic_cqs_each(s, count_topic_cq, s, err, errlen) != 0) {
        return -1;
    }
    /* Homes first and committed, so pass 2 sees which messages have one. */
    build_ctx_t b = { s, 0, err, errlen, 0 };
    for (b.copies = 0; b.copies <= 1; b.copies++) {
        if (store_scan(s, build_entry, &b, err, errlen) != 0 || b.failed) {
            return -1;
        }
        if (store_commit_durable(s, 0, err, errlen) != 0) {
            return -1;
        }
    }
    key_meta(&k, "index");
    store_put(s, &k, "1", 1);
    return store_commit(s, err, errlen);
}
