/*
 * levels/topic_walk.c — a walk of a queue range (a topic's log 'T', a
 * group's retry queue 'R') in seq order, for the lease walk (lease_take.c)
 * and the topic-log GC (maintain.c); the contract is in store_internal.h.
 *
 * A topic's log is walked without the read barrier (design-commitlog.md,
 * "Lease walk without the barrier"): the arrivals of the last due move sit in
 * held batches, so LevelDB's range (an iterator over what it holds now) is
 * merged with the topic's held appends (topic_held.c), each read by a point
 * read that asks the overlay first (store_get). The two are merged by seq;
 * a seq in both is given once, as the point read finds it (a held write is
 * the key's current value). While a held batch may delete 'T' keys, each key
 * LevelDB gives is asked about in the overlay too, and one a held batch
 * deleted is left out. Any other range passes the barrier (store_iter_at).
 *
 * Each entry's message is decoded where it lies: a 'T' or 'R' value in the
 * iterator's value or a point read's copy (val), when the caller asks for it
 * (queue_walk_msg: the GC does not at its bound), a CQ entry's in the log
 * reader's window (rd) or its 'T' key's value (val), by the step that judges
 * it; none is encoded to be decoded again (design-commitlog.md 4b). The
 * next step moves those buffers, which is the validity the contract gives
 * the caller.
 *
 * Threading: one thread at a time (the broker's storage thread).
 */
#include "levels/store_internal.h"
#include "base/alloc.h"
#include "base/err.h"
#include "levels/clog_overlay.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

/* The first of t's held appends (pruned) at or after seq `from`. */
static size_t held_from(const topic_held_t *h, uint64_t from)
{
    size_t lo = 0, hi = h->n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (h->puts[mid].seq < from) {
            lo = mid + 1;
        } else {
            hi = mid;
        }
    }
    return lo;
}

static void walk_begin(queue_walk_t *w, store_t *s, enum key_tag tag, const char *name, size_t len)
{
    memset(w, 0, sizeof *w);
    w->s = s;
    w->failed_seq = UINT64_MAX;
    key_queue_prefix(&w->prefix, tag, name, len);
}

void queue_walk_topic(queue_walk_t *w, store_t *s, topic_state_t *t, uint64_t from)
{
    walk_begin(w, s, KEY_TOPIC_LOG, t->name, t->len);
    key_buf_t at = w->prefix;
    key_u64(&at, from);
    if (s->redo == NULL) {
        w->it = store_iter_at(s, &at); /* no held batches: LevelDB is all */
        return;
    }
    w->t = t;
    if (t->queue != 0) {
        w->has_cq = 1;
        key_copy(&w->cq_key, &w->prefix);
        key_u64(&w->cq_key, 0); /* each entry's seq goes here (cq_range_next) */
        w->rd.window = STORE_WALK_LOG_WINDOW;
        w->slots.base = UINT64_MAX;
        w->t_end = STORE_TOPIC_CQ_SEQ | t->cq_seq_base;
        w->cq_next = from >= w->t_end ? store_topic_cq_index(t, from) : 0;
        if (w->cq_next < t->cq_head) {
            w->cq_next = t->cq_head;
        }
        if (from >= w->t_end) {
            w->iter_done = 1; /* nothing of the 'T' range: no seek */
            return;
        }
    }
    topic_held_prune(s, t);
    w->held_next = held_from(&t->held, from);
    w->check_deletes = topic_held_deletes(s);
    w->iter_done = from >= t->held.applied_below; /* LevelDB holds none of it: no seek */
    if (!w->iter_done) {
        w->it = store_iter_applied_at(s, &at);
    }
}

/* Step the iterator past its entry of seq `seq` (parsed: its key parsed) —
 * or not, when LevelDB holds nothing of the topic past it
 * (topic_held_t.applied_below). */
static void iter_step(queue_walk_t *w, uint64_t seq, int parsed)
{
    if (w->t != NULL && parsed && seq + 1 >= w->t->held.applied_below) {
        w->iter_done = 1;
        return;
    }
    leveldb_iter_next(w->it);
}

/* The iterator's entry in the range: 1 with *key, *klen, *seq and *parsed
 * (its key is prefix + 8 bytes), or 0 past the range. */
static int iter_entry(queue_walk_t *w, const char **key, size_t *klen, uint64_t *seq, int *parsed)
{
    *seq = 0;
    *parsed = 0;
    if (w->iter_done || !store_iter_in(w->it, w->prefix.b, w->prefix.n, key, klen)) {
        return 0;
    }
    *parsed = key_queue_parse(*key, *klen, w->prefix.n, seq) == 0;
    if (w->has_cq && *parsed && *seq >= w->t_end) {
        w->iter_done = 1; /* the CQ's seqs: its entries give them ('T' keys there are its entries') */
        return 0;
    }
    return 1;
}

void queue_walk_range(queue_walk_t *w, store_t *s, enum key_tag tag, const char *name, size_t len, uint64_t from)
{
    walk_begin(w, s, tag, name, len);
    key_buf_t at = w->prefix;
    key_u64(&at, from);
    w->it = store_iter_at(s, &at);
}

/* The iterator's entry at key ik: given (1), or 0 when a held batch deleted it. */
static int give_applied(queue_walk_t *w, const char *ik, size_t iklen, const char **key, size_t *klen, const char **val,
                        size_t *vlen)
{
    if (w->check_deletes) {
        const char *held;
        size_t hlen;
        int o = overlay_get(redo_overlay(w->s->redo), ik, iklen, &held, &hlen);
        if (o == OVERLAY_DELETED) {
            return 0;
        }
        if (o == OVERLAY_HELD) { /* not an append of this topic's (none rewrites a 'T' key), but its value stands */
            w->val = xmemdup(held, hlen);
            *val = w->val;
            *vlen = hlen;
        }
    }
    if (w->val == NULL) {
        *val = leveldb_iter_value(w->it, vlen);
    }
    *key = ik;
    *klen = iklen;
    w->at_iter = 1;
    return 1;
}

/* The next live entry of the topic's CQ (queue_walk_next's answer). */
static int cq_range_next(queue_walk_t *w, const char **key, size_t *klen, uint64_t *seq, char *err, size_t errlen)
{
    topic_state_t *t = w->t;
    while (w->cq_next < t->cq_tail) {
        uint64_t i = w->cq_next++;
        if (i < w->run_at || i >= w->run_at + w->run_n) {
            char why[512];
            uint64_t left = t->cq_tail - i;
            w->run_at = i;
            w->run_n = left < 64 ? (size_t)left : 64;
            if (redo_cq_read(w->s->redo, t->queue, i, w->run_n, w->run, why, sizeof why) != 0) {
                w->run_n = 0;
                w->failed_seq = store_topic_cq_seq(t, i);
                return err_set(err, errlen, "topic %s, CQ index %" PRIu64 ": %s", t->name, i, why);
            }
        }
        int live = topic_cq_entry_msg(w->s, t, i, &w->run[i - w->run_at], &w->rd, &w->slots, &w->val, &w->given_msg,
                                      err, errlen);
        if (live < 0) {
            w->failed_seq = store_topic_cq_seq(t, i);
            return -1;
        }
        if (live == 0) {
            continue; /* revoked, or its 'T' key gone */
        }
        w->given_cq = 1;
        w->given_in_t = live == TOPIC_CQ_IN_T;
        w->given_index = i;
        *seq = store_topic_cq_seq(t, i);
        be64_put(w->cq_key.b + w->prefix.n, *seq); /* the prefix stays: a copy of it was a tenth of a step */
        *key = w->cq_key.b;
        *klen = w->cq_key.n;
        return 1;
    }
    return 0;
}

static int t_range_next(queue_walk_t *w, const char **key, size_t *klen, const char **val, size_t *vlen,
                        const char *where, char *err, size_t errlen);

int queue_walk_next(queue_walk_t *w, const char **key, size_t *klen, uint64_t *seq, const char *where, char *err,
                    size_t errlen)
{
    free(w->val);
    w->val = NULL;
    w->given_cq = 0;
    w->where = where;
    if (!w->t_done) {
        int rc = t_range_next(w, key, klen, &w->given_val, &w->given_vlen, where, err, errlen);
        if (rc > 0) {
            if (key_queue_parse(*key, *klen, w->prefix.n, seq) != 0) {
                return err_set(err, errlen, "corrupt queue key in %s", w->s->path);
            }
            w->given_seq = *seq;
            return 1;
        }
        if (rc < 0 || !w->has_cq) {
            return rc;
        }
        w->t_done = 1;
    }
    return w->has_cq ? cq_range_next(w, key, klen, seq, err, errlen) : 0;
}

msg_t *queue_walk_msg(queue_walk_t *w, char *err, size_t errlen)
{
    if (w->given_cq) {
        return &w->given_msg; /* read and checked by the step (topic_cq_entry_msg: its liveness needs the record) */
    }
    if (store_decode(w->given_val, w->given_vlen, &w->given_msg, w->where, err, errlen) != 0) {
        w->failed_seq = w->given_seq;
        return NULL;
    }
    return &w->given_msg;
}

/* The next entry of the 'T' range (merged with held appends). */
static int t_range_next(queue_walk_t *w, const char **key, size_t *klen, const char **val, size_t *vlen,
                        const char *where, char *err, size_t errlen)
{
    if (w->at_iter) {
        iter_step(w, w->iter_seq, w->iter_parsed);
        w->at_iter = 0;
    }
    for (;;) {
        const char *ik;
        size_t iklen;
        uint64_t iseq;
        int parsed;
        int in = iter_entry(w, &ik, &iklen, &iseq, &parsed);
        int held = w->t != NULL && w->held_next < w->t->held.n;
        uint64_t hseq = held ? w->t->held.puts[w->held_next].seq : 0;
        if (in && (!held || !parsed || iseq < hseq)) { /* a key that does not parse is the caller's to report */
            if (give_applied(w, ik, iklen, key, klen, val, vlen)) {
                w->iter_seq = iseq;
                w->iter_parsed = parsed;
                return 1;
            }
            iter_step(w, iseq, parsed);
            continue;
        }
        if (!held) {
            return w->it != NULL && store_iter_error(w->it, where, err, errlen) != 0 ? -1 : 0;
        }
        if (in && iseq == hseq) {
            iter_step(w, iseq, parsed); /* applied meanwhile: the point read below gives it */
        }
        w->held_next++;
        key_copy(&w->held_key, &w->prefix);
        key_u64(&w->held_key, hseq);
        int found = store_get(w->s, &w->held_key, &w->val, vlen, err, errlen);
        if (found < 0) {
            return -1;
        }
        if (found == 0) {
            continue; /* deleted by a later batch */
        }
        *key = w->held_key.b;
        *klen = w->held_key.n;
        *val = w->val;
        return 1;
    }
}

void queue_walk_end(queue_walk_t *w)
{
    free(w->val);
    w->val = NULL;
    clog_reader_free(&w->rd);
    if (w->it != NULL) {
        leveldb_iter_destroy(w->it);
        w->it = NULL;
    }
}
