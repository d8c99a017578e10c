/*
 * levels/lease_ack.c — a consumer's answers on a lease it holds, found by
 * id: ACK, TOUCH, and a failure's move to a retry or the DLQ.
 *
 * A lease is found from its group copy's index entry ('Y' id group gen: its
 * deadline and topic-log seq) with one Get, or, for a sorted batch of ACKs
 * close together, with one iterator walking the copy index. A lease still
 * held in memory (lease_pend.c) is released by ACK without a write and gets
 * a new deadline by TOUCH in place; anything else first writes it.
 *
 * A failure (store_fail) looks its lease up once: the retry decision's inputs
 * (the message's reconsume, the group's max-reconsume) are read there and
 * handed to the caller's decide function, so a NACK never reads the lease
 * twice nor copies its payload out of the store. A failure is checked before
 * the lease is touched.
 *
 * Threading: one thread at a time (the broker's storage thread).
 */
#include "levels/store_internal.h"
#include "base/alloc.h"
#include "base/err.h"

#include <stdlib.h>
#include <string.h>

/* ---- finding a lease ------------------------------------------------------------------ */

/* A copy index value of g's copy of id: 1 when it is a lease (*deadline,
 * *log_seq: 0 when unknown), 0 when the copy is elsewhere, -1 corrupt. */
static int lease_place(store_t *s, const char *v, size_t vlen, uint64_t id, uint64_t *deadline, uint64_t *log_seq,
                       char *err, size_t errlen)
{
    idx_place_t p;
    if (idx_place_decode(v, vlen, &p) != 0) {
        return err_set(err, errlen, "corrupt copy index entry of %016llx in %s", (unsigned long long)id, s->path);
    }
    if (p.tag != 'I') {
        return 0;
    }
    *deadline = p.due;
    *log_seq = p.seq;
    return 1;
}

/* Read g's lease of id from its copy index entry with a Get: 1 found
 * (*deadline, *log_seq), 0 not, -1 error. */
static int lease_lookup(store_t *s, const group_state_t *g, uint64_t id, uint64_t *deadline, uint64_t *log_seq,
                        char *err, size_t errlen)
{
    key_buf_t k;
    key_copy_index(&k, id, g->name, g->len, g->gen);
    char *v;
    size_t vlen;
    int found = store_get(s, &k, &v, &vlen, err, errlen);
    if (found <= 0) {
        return found;
    }
    found = lease_place(s, v, vlen, id, deadline, log_seq, err, errlen);
    leveldb_free(v);
    return found;
}

/* Find g's lease of id with an iterator that walks the copy index forward
 * (so ids must come in increasing order): a few Next steps when the entry is
 * close ahead, as in the usual ACK of a batch just leased, else one Seek.
 * 1 found (*deadline, *log_seq), 0 not there, -1 on a corrupt entry. */
static int lease_index_find(store_t *s, leveldb_iterator_t *it, const group_state_t *g, uint64_t id, uint64_t *deadline,
                            uint64_t *log_seq, char *err, size_t errlen)
{
    key_buf_t want;
    key_copy_index(&want, id, g->name, g->len, g->gen);
    const char *key;
    size_t klen;
    for (int steps = 0; store_iter_in_range(it, KEY_COPY_INDEX, &key, &klen); steps++) {
        int c = memcmp(key, want.b, klen < want.n ? klen : want.n);
        if (c == 0) {
            c = klen < want.n ? -1 : klen > want.n;
        }
        if (c > 0) {
            return 0;
        }
        if (c == 0) {
            size_t vlen;
            const char *v = leveldb_iter_value(it, &vlen);
            return lease_place(s, v, vlen, id, deadline, log_seq, err, errlen);
        }
        if (steps < 8) {
            leveldb_iter_next(it);
        } else { /* far ahead: after the seek the entry is at or past id */
            leveldb_iter_seek(it, want.b, want.n);
        }
    }
    return 0; /* past the copy index: not there */
}

/* A lease found by lease_find. */
typedef struct lease_found {
    group_state_t *g;
    uint64_t deadline;
    uint64_t log_seq; /* the topic-log seq it was leased from, 0 when unknown */
    msg_t m;          /* views into buf */
    char *buf;        /* the value as LevelDB returned it: free with leveldb_free */
} lease_found_t;

/* Find a lease and read its message, leaving it in place: 1 with *l filled;
 * 0 when there is no such lease or group; -1 on error. Commits what is
 * pending first. */
static int lease_find(store_t *s, const char *group, size_t group_len, uint64_t id, lease_found_t *l, char *err,
                      size_t errlen)
{
    if (store_read_begin(s, err, errlen) != 0) {
        return -1;
    }
    l->g = store_group_get(s, group, group_len);
    if (l->g == NULL) {
        return 0;
    }
    lease_pend_t *p = idmap_get(&l->g->pend_ids, id);
    if (p != NULL && (store_pend_write_through(s, l->g, p, err, errlen) != 0 || /* lease_lookup reads committed data */
                      store_commit_durable(s, 0, err, errlen) != 0)) {
        return -1;
    }
    int f = lease_lookup(s, l->g, id, &l->deadline, &l->log_seq, err, errlen);
    if (f <= 0) {
        return f;
    }
    key_buf_t k;
    key_lease(&k, l->deadline, group, group_len, id);
    size_t vlen;
    int found = store_get(s, &k, &l->buf, &vlen, err, errlen);
    if (found <= 0) {
        if (found == 0) {
            err_set(err, errlen, "copy index names a missing lease (id %llu) in %s", (unsigned long long)id, s->path);
        }
        return -1;
    }
    if (store_decode(l->buf, vlen, &l->m, "a lease", err, errlen) != 0) {
        leveldb_free(l->buf);
        return -1;
    }
    return 1;
}

/* ---- ACK, TOUCH ----------------------------------------------------------------------- */

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

static int ids_ascending(const uint64_t *ids, int n)
{
    for (int i = 1; i < n; i++) {
        if (ids[i] < ids[i - 1]) {
            return 0;
        }
    }
    return 1;
}

/* The ids are sorted. Ids close together (a batch leased in order and ACKed
 * together: at least ACK_WALK_MIN of them within ACK_WALK_SPAN times their
 * count) are found with one iterator walking the copy index, keyed by id
 * first (lease_index_find; the other groups' copies of those ids are stepped
 * over): creating it costs about two Gets, each step after that a fraction
 * of one. Others are looked up with a Get each: ids spread over a
 * wide range (messages with different delays fall due out of id order) would
 * make the walk step over every entry deleted between them — the index's
 * tombstones, which a Get never visits (measured: 10 000 msg/s of random
 * millisecond delays spent two thirds of the broker's CPU in that walk). */
#define ACK_WALK_MIN  4
#define ACK_WALK_SPAN 4
int store_ack(store_t *s, const char *group, size_t group_len, const uint64_t *ids, int n, int *released, char *err,
              size_t errlen)
{
    *released = 0;
    if (store_read_begin(s, err, errlen) != 0) {
        return -1;
    }
    group_state_t *g = store_group_get(s, group, group_len);
    if (g == NULL || n <= 0) {
        return 0;
    }
    uint64_t *sorted = xmalloc((size_t)n * sizeof *sorted);
    memcpy(sorted, ids, (size_t)n * sizeof *sorted);
    if (!ids_ascending(sorted, n)) { /* a batch is mostly ACKed in the order leased */
        qsort(sorted, (size_t)n, sizeof *sorted, cmp_u64);
    }
    if (g->npend > 0) { /* leases not written yet: released here, the rest below */
        int rc = store_pend_ack(s, g, sorted, &n, released, err, errlen);
        if (rc != 0 || n == 0) {
            free(sorted);
            return rc;
        }
    }
    key_buf_t idx;
    key_copy_index(&idx, sorted[0], g->name, g->len, g->gen);
    int close_together = n >= ACK_WALK_MIN && sorted[n - 1] - sorted[0] < (uint64_t)n * ACK_WALK_SPAN;
    leveldb_iterator_t *it = close_together ? store_iter_at(s, &idx) : NULL;
    int rc = 0;
    for (int i = 0; i < n; i++) {
        if (i > 0 && sorted[i] == sorted[i - 1]) {
            continue;
        }
        uint64_t deadline, log_seq;
        int found = it != NULL ? lease_index_find(s, it, g, sorted[i], &deadline, &log_seq, err, errlen)
                               : lease_lookup(s, g, sorted[i], &deadline, &log_seq, err, errlen);
        if (found < 0) {
            rc = -1;
            break;
        }
        if (found) {
            if (store_lease_release(s, g, sorted[i], deadline, log_seq, err, errlen) != 0) {
                rc = -1;
                break;
            }
            (*released)++;
        }
    }
    if (it != NULL) {
        if (rc == 0) {
            rc = store_iter_error(it, "the copy index", err, errlen);
        }
        leveldb_iter_destroy(it);
    }
    free(sorted);
    return rc;
}

int store_touch(store_t *s, const char *group, size_t group_len, uint64_t id, uint64_t new_deadline_ms, int *found,
                char *err, size_t errlen)
{
    *found = 0;
    group_state_t *g = store_group_get(s, group, group_len);
    lease_pend_t *p = g != NULL ? idmap_get(&g->pend_ids, id) : NULL;
    if (p != NULL && new_deadline_ms >= p->write_at) { /* still held until written: a new deadline is all */
        p->deadline = new_deadline_ms;
        *found = 1;
        return 0;
    }
    lease_found_t l;
    int f = lease_find(s, group, group_len, id, &l, err, errlen);
    if (f <= 0) {
        return f;
    }
    store_lease_delete(s, l.g, id, l.deadline);
    store_lease_put(s, l.g, &l.m, new_deadline_ms, l.log_seq);
    leveldb_free(l.buf);
    *found = 1;
    return 0;
}

/* ---- failure: a retry or the DLQ ------------------------------------------------------- */

/* The checks of a decided failure: reason length, level range, a positive
 * delay within max-delay and the hop bound. */
static int fail_check(const store_t *s, const store_fail_req_t *req, char *err, size_t errlen)
{
    if (req->reason_len > MSG_MAX_REASON) {
        return err_set(err, errlen, "reason is %zu bytes, longer than the limit of %d", req->reason_len,
                       MSG_MAX_REASON);
    }
    if (req->to_dlq) {
        return 0;
    }
    const lvl_table_t *t = &s->opt.levels;
    if (req->level < 0 || req->level > t->count) {
        return err_set(err, errlen, "level %d does not exist (levels are 1..%d)", req->level, t->count);
    }
    if (req->level == 0 && req->delay_ms == 0) {
        return err_set(err, errlen, "retry delay must be positive");
    }
    uint8_t plan[LVL_MAX_HOPS];
    int hops;
    if (req->level == 0) {
        return lvl_chain_plan(t, req->delay_ms, s->opt.max_delay_ms, plan, LVL_MAX_HOPS, &hops, err, errlen);
    }
    return 0;
}

int store_fail(store_t *s, const char *group, size_t group_len, uint64_t id, const store_fail_req_t *req,
               uint64_t now_ms, int *found, uint64_t *due_out, char *err, size_t errlen)
{
    *found = 0;
    if (due_out) {
        *due_out = 0;
    }
    /* A fixed decision is refused before the lookup; a decided one once its
     * inputs are read — either way before the lease is touched. */
    if (req->decide == NULL && fail_check(s, req, err, errlen) != 0) {
        return -1;
    }
    lease_found_t l;
    int f = lease_find(s, group, group_len, id, &l, err, errlen);
    if (f <= 0) {
        return f;
    }
    store_fail_req_t r = *req;
    if (req->decide != NULL) {
        req->decide(req->decide_ctx, &s->opt.levels, l.m.reconsume, l.g->max_reconsume, &r);
        if (fail_check(s, &r, err, errlen) != 0) {
            leveldb_free(l.buf);
            return -1;
        }
    }
    group_state_t *g = l.g;
    msg_t *m = &l.m;
    store_lease_delete(s, g, id, l.deadline);
    m->reconsume++;
    m->reason.ptr = r.reason;
    m->reason.len = (uint32_t)r.reason_len;
    if (r.to_dlq) {
        key_buf_t k;
        m->stamp_ms = now_ms;
        key_queue(&k, KEY_DLQ, g->name, g->len, id);
        store_put_msg(s, &k, m);
        idx_place_t p = { 'D', 0, 0, 0 };
        idx_copy_put(s, id, g->name, g->len, g->gen, &p);
        g->dlq++;
    } else {
        m->dest = MSG_DEST_GROUP;
        m->group_gen = g->gen;
        uint64_t due = store_level_enqueue(s, NULL, m, r.level, r.level ? 0 : r.delay_ms, now_ms);
        g->retry_delayed++;
        if (due_out) {
            *due_out = due;
        }
    }
    store_mark_group(s, g);
    leveldb_free(l.buf);
    *found = 1;
    return 0;
}
