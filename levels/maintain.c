/*
 * levels/maintain.c — background upkeep (see store_maintain in store.h):
 * garbage-collecting topic logs, the steps of GROUP DEL (group_delete.c)
 * and compacting consumed key ranges.
 *
 * A topic log entry is garbage once every group bound to the topic has read
 * past it (its seq is below the smallest cursor), or, for a topic with no
 * group, once it is older than retention. store_maintain collects up to the
 * smallest cursor of now (the broker calls it when idle); store_collect, the
 * busy storage thread's step, only up to the smallest cursor it saw at least
 * a grace period ago, so a consumed entry stays readable (GROUP CREATE … FROM
 * FIRST) for that long however busy the broker is. Popped queue heads leave
 * LevelDB tombstones that a seek from the range start would walk; the store never
 * seeks there (it remembers heads), but the tombstones still cost disk and
 * compaction time, so a queue that popped STORE_COMPACT_AFTER_POPS heads has
 * the range below its head compacted (by the store's compaction thread,
 * levels/compactor.c). Work per call is bounded by its budget.
 *
 * Threading: one thread at a time (the broker's storage thread).
 */
#include "levels/store_internal.h"
#include "base/err.h"

/* Smallest cursor of the groups bound to t; UINT64_MAX when none. */
static uint64_t topic_min_cursor(const topic_state_t *t)
{
    uint64_t min = UINT64_MAX;
    for (const group_state_t *g = t->first_group; g != NULL; g = g->next_in_topic) {
        uint64_t cursor = store_group_persisted_cursor(g); /* keeps what its unwritten leases name */
        if (cursor < min) {
            min = cursor;
        }
    }
    return min;
}

/* Collect up to budget topic-log entries of t below seq `below` (with no group
 * and keep_retained: only those past retention; below is then UINT64_MAX).
 * A 'T' entry is deleted; a topic CQ entry (design-commitlog.md 4b) is passed
 * by the CQ's head, which also passes the dead entries (revoked) before the
 * first one kept. Returns the count, -1 on error. */
static int topic_gc(store_t *s, topic_state_t *t, uint64_t below, uint64_t now_ms, int keep_retained, int budget,
                    char *err, size_t errlen)
{
    if (t->appended == t->removed) {
        return 0;
    }
    uint64_t head_hint_was = t->head_hint;
    queue_walk_t w;
    queue_walk_topic(&w, s, t, head_hint_was); /* arrivals still held are read through the overlay: no barrier */
    const char *key;
    size_t klen;
    uint64_t seq;
    msg_t *m; /* what it needs of an entry (id, stamp, topic, key), the walk's: nothing copied */
    int n = 0, rc = 0, got = 1;
    uint64_t cq_head = t->cq_head; /* past what it collects and the dead entries before */
    while (n < budget && (got = queue_walk_next(&w, &key, &klen, &seq, "a topic log", err, errlen)) != 0) {
        if (got < 0) {
            rc = -1;
            break;
        }
        if (seq >= below) {
            t->head_hint = seq; /* the first entry it keeps */
            cq_head = w.given_cq ? w.given_index : cq_head;
            break;
        }
        if ((m = queue_walk_msg(&w, err, errlen)) == NULL) {
            rc = -1;
            break;
        }
        if (t->groups == 0 && keep_retained && m->stamp_ms + s->opt.retention_ms > now_ms) {
            t->head_hint = seq;
            cq_head = w.given_cq ? w.given_index : cq_head;
            break;
        }
        if (w.given_cq && !w.given_in_t) { /* a CQ entry: its head moves past it (below), no delete */
            if (idx_home_gone_unindexed(s, t, m, err, errlen) != 0) {
                rc = -1;
                break;
            }
            segcount_add(s, m->id, -1); /* its record is no longer read */
        } else {
            if (idx_home_gone(s, t, m, err, errlen) != 0) { /* the message index (levels/index.c) */
                rc = -1;
                break;
            }
            store_del_raw(s, key, klen);
        }
        if (w.given_cq) {
            cq_head = w.given_index + 1;
        }
        t->removed++;
        t->head_hint = seq + 1;
        t->pops_since_compact += !w.given_cq || w.given_in_t; /* tombstones of 'T' deletes only */
        n++;
    }
    if (rc == 0 && got == 0 && w.has_cq) {
        cq_head = t->cq_tail; /* the walk ended: what is left of the window is dead */
    }
    queue_walk_end(&w);
    if (cq_head > t->cq_head) {
        t->cq_head = cq_head;
        store_log_cq_head(s, t->queue, cq_head);
        s->pending++; /* a write even with no LevelDB one */
        store_mark_topic(s, t);
    }
    if (n > 0) {
        store_mark_topic(s, t);
    }
    if (rc == 0 && head_hint_was != t->head_hint) {
        /* it read on from the first retained entry (head_hint: 0 after
         * open) past what it collected, in seq order: no entry at or above
         * head_hint has been collected (store_topic_log_holds) */
        t->head_is_gc_floor = 1;
    }
    return rc != 0 ? -1 : n;
}

static void compact_below(store_t *s, const key_buf_t *start, const key_buf_t *limit)
{
    compactor_add(s->compactor, start->b, start->n, limit->b, limit->n); /* full: asked again after more pops */
}

/* Compact the consumed part of a named queue (tag name 0x00 seq) below head
 * when it popped enough since the last time. Returns 1 when it compacted. */
static int compact_named_range(store_t *s, enum key_tag tag, const char *name, size_t len, uint64_t head,
                               uint64_t *pops_since_compact)
{
    if (*pops_since_compact < STORE_COMPACT_AFTER_POPS) {
        return 0;
    }
    key_buf_t a, b;
    key_queue_prefix(&a, tag, name, len);
    key_queue(&b, tag, name, len, head);
    compact_below(s, &a, &b);
    *pops_since_compact = 0;
    return 1;
}

/* store_collect's bound for t at now_ms: the smallest cursor sampled at least
 * grace_ms ago (and not above the smallest cursor of now), or 0 when none is
 * that old. Samples every grace_ms / STORE_GC_MARKS, and drops the samples
 * older than the one it returns. */
static uint64_t collect_bound(topic_state_t *t, uint64_t now_ms, uint64_t grace_ms)
{
    uint64_t cursor = topic_min_cursor(t);
    struct gc_mark *mk = t->gc_marks;
    if (t->gc_nmarks > 0 && mk[t->gc_nmarks - 1].ms > now_ms) {
        t->gc_nmarks = 0; /* the clock went back: start again */
    }
    if (t->gc_nmarks == 0 || now_ms - mk[t->gc_nmarks - 1].ms >= grace_ms / STORE_GC_MARKS) {
        if (t->gc_nmarks == STORE_GC_MARKS) {
            memmove(mk, mk + 1, (STORE_GC_MARKS - 1) * sizeof *mk);
            t->gc_nmarks--;
        }
        mk[t->gc_nmarks++] = (struct gc_mark){ now_ms, cursor };
    }
    int old = -1; /* the newest sample at least grace_ms old */
    for (int i = 0; i < t->gc_nmarks && now_ms - mk[i].ms >= grace_ms; i++) {
        old = i;
    }
    if (old < 0) {
        return 0;
    }
    uint64_t bound = mk[old].seq < cursor ? mk[old].seq : cursor;
    memmove(mk, mk + old, (size_t)(t->gc_nmarks - old) * sizeof *mk);
    t->gc_nmarks -= old;
    return bound;
}

/* Collect up to max_deletes topic-log entries of every topic: below
 * collect_bound (grace_ms 0: the smallest cursor of now), or past retention
 * for a topic with no group. Round-robin: a call starts at the topic after
 * the last one the previous call reached, so a topic with a long backlog
 * takes at most one call's budget before every other topic had its turn.
 * A call looks at max_topics topics at most. Adds the count to *work; 0, or
 * -1 on error. */
static int collect_topics(store_t *s, uint64_t now_ms, uint64_t grace_ms, int max_deletes, size_t max_topics, int *work,
                          char *err, size_t errlen)
{
    size_t ntopics = map_count(&s->topics);
    if (ntopics > max_topics) {
        ntopics = max_topics;
    }
    map_iter_t it = s->collect_next; /* a slot: a hint only, should the map have grown since */
    size_t seen = 0;
    int wrapped = 0;
    void *v;
    while (seen < ntopics && *work < max_deletes) {
        if (!map_next(&s->topics, &it, NULL, NULL, &v)) {
            if (wrapped) {
                break;
            }
            wrapped = 1; /* on from the first slot */
            it = (map_iter_t){ 0 };
            continue;
        }
        seen++;
        s->collect_next = it;
        topic_state_t *t = v;
        if (t->appended == t->removed) {
            /* an empty log (pending appends counted): whatever a group took
             * is gone, whatever comes next gets a seq from log_next_min on */
            t->head_hint = t->log_next_min;
            t->head_is_gc_floor = 1;
            continue;
        }
        uint64_t below = t->groups > 0 ? collect_bound(t, now_ms, grace_ms) : UINT64_MAX; /* no group: retention */
        if (below <= t->head_hint) {
            continue; /* nothing below it is left: no seek */
        }
        int n = topic_gc(s, t, below, now_ms, 1, max_deletes - *work, err, errlen);
        if (n < 0) {
            return -1;
        }
        *work += n;
    }
    return 0;
}

int store_collect(store_t *s, uint64_t now_ms, uint64_t grace_ms, int max_deletes, int *work, char *err, size_t errlen)
{
    *work = 0;
    /* No store_leases_write here, unlike store_maintain: writing would
     * commit on its own; the GC keeps what held leases name, and the
     * scheduler writes them when their time comes. */
    if (store_read_begin(s, err, errlen) != 0) {
        return -1;
    }
    /* deletes ride with the next commit; the groups being deleted get what the GC left of the budget */
    if (collect_topics(s, now_ms, grace_ms, max_deletes, STORE_COLLECT_TOPICS, work, err, errlen) != 0) {
        return -1;
    }
    return group_delete_steps(s, max_deletes, work, err, errlen);
}

int store_maintain(store_t *s, uint64_t now_ms, int max_deletes, int *work, char *err, size_t errlen)
{
    *work = 0;
    if (store_read_begin(s, err, errlen) != 0 || store_leases_write(s, NULL, now_ms, err, errlen) != 0 ||
        collect_topics(s, now_ms, 0, max_deletes, SIZE_MAX, work, err, errlen) != 0 ||
        group_delete_steps(s, max_deletes, work, err, errlen) != 0 || store_commit_durable(s, 0, err, errlen) != 0) {
        return -1;
    }
    key_buf_t a, b;
    for (int l = 1; l <= s->opt.levels.count; l++) {
        level_state_t *ls = &s->levels[l];
        if (ls->pops_since_compact < STORE_COMPACT_AFTER_POPS) {
            continue;
        }
        key_start(&a, KEY_LEVEL);
        key_u8(&a, (uint8_t)l);
        uint64_t due, seq;
        if (store_level_first_key(s, l, &due, &seq)) {
            key_level(&b, l, due, seq);
        } else {
            key_start(&b, KEY_LEVEL);
            key_u8(&b, (uint8_t)(l + 1));
        }
        compact_below(s, &a, &b);
        ls->pops_since_compact = 0;
        (*work)++;
    }
    map_iter_t it = { 0 };
    void *v;
    while (map_next(&s->topics, &it, NULL, NULL, &v)) {
        topic_state_t *t = v;
        *work += compact_named_range(s, KEY_TOPIC_LOG, t->name, t->len, t->head_hint, &t->pops_since_compact);
    }
    it = (map_iter_t){ 0 };
    while (map_next(&s->groups, &it, NULL, NULL, &v)) {
        group_state_t *g = v;
        *work += compact_named_range(s, KEY_RETRY, g->name, g->len, g->retry_head_hint, &g->pops_since_compact);
    }
    if (s->lease_pops_since_compact >= STORE_COMPACT_AFTER_POPS) {
        key_start(&a, KEY_LEASE);
        key_start(&b, KEY_LEASE);
        key_u64(&b, s->lease_floor);
        compact_below(s, &a, &b);
        s->lease_pops_since_compact = 0;
        (*work)++;
    }
    return 0;
}

void store_compact_wait(store_t *s)
{
    compactor_wait(s->compactor);
}

int store_topic_purge_step(store_t *s, const char *topic, size_t topic_len, uint64_t *until, int max, uint64_t *purged,
                           int *done, store_topic_del_t *out, store_topic_info_t *info, char *err, size_t errlen)
{
    *purged = 0;
    *done = 1;
    *out = STORE_TOPIC_UNKNOWN;
    if (store_read_begin(s, err, errlen) != 0) {
        return -1;
    }
    topic_state_t *t = map_get(&s->topics, topic, topic_len);
    if (t == NULL) {
        return 0;
    }
    if (t->groups > 0 || t->delayed > 0) { /* not retention's messages: refused, untouched */
        return store_topic_delete(s, topic, topic_len, out, info, err, errlen);
    }
    if (*until == 0) {
        *until = t->log_next_min; /* what is appended from now on gets a seq from here: kept */
    }
    int n = topic_gc(s, t, *until, 0, 0, max, err, errlen);
    if (n < 0) {
        return -1;
    }
    *purged = (uint64_t)n;
    if (n == max) {
        *done = 0; /* more may be left: the next step */
        return 0;
    }
    return store_topic_delete(s, topic, topic_len, out, info, err, errlen);
}
