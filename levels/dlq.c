/*
 * levels/dlq.c — a group's dead-letter queue (see store.h): list, requeue,
 * drop.
 *
 * The DLQ is the range 'D' group id (keys.h), so it lists in id order and one
 * message is found by its id with one seek. A message reaches it from
 * store_fail (lease_ack.c) with its reason and parked time; a requeue moves it to
 * the group's retry-ready queue with reconsume 0, so it gets the whole retry
 * schedule again. One id is one move in the pending batch. ALL is a walk
 * (store_dlq_walk_t) in steps, each committed on its own: the broker runs one
 * step per turn of its storage thread, so a DLQ of millions never holds the
 * other commands for longer than a step (each move stays whole; a crash
 * between two steps leaves the rest in the DLQ).
 *
 * Threading: one thread at a time (the broker's storage thread).
 */
#include "levels/store_internal.h"
#include "base/err.h"

int store_dlq_list(store_t *s, const char *group, size_t group_len, uint64_t after_id, int count, msg_owned_t *out,
                   int *n, char *err, size_t errlen)
{
    *n = 0;
    if (store_read_begin(s, err, errlen) != 0) {
        return -1;
    }
    if (store_group_get(s, group, group_len) == NULL || count <= 0 || after_id == UINT64_MAX) {
        return 0;
    }
    key_buf_t k;
    key_queue_prefix(&k, KEY_DLQ, group, group_len);
    size_t plen = k.n;
    key_u64(&k, after_id + 1);
    leveldb_iterator_t *it = store_iter_at(s, &k);
    const char *key;
    size_t klen;
    int rc = 0;
    msg_budget_t budget;
    msg_budget_init(&budget, s->opt.max_lease_bytes);
    for (; *n < count && msg_budget_open(&budget) && store_iter_in(it, k.b, plen, &key, &klen); leveldb_iter_next(it)) {
        msg_t m;
        if (store_iter_msg(it, &m, "the DLQ", err, errlen) != 0) {
            rc = -1;
            break;
        }
        msg_owned_copy(&out[(*n)++], &m);
        msg_budget_charge(&budget, &m);
    }
    if (rc == 0) {
        rc = store_iter_error(it, "the DLQ", err, errlen);
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

/* Requeue (requeue = 1) or drop g's DLQ entries: the one with id `from`
 * (one = 1), or those from id `from` on until max are taken or the pending
 * batch is full (STORE_BATCH_MAX_BYTES). Adds them to *count; *next is the
 * id of the first entry left (where a next step starts), *end 1 once the
 * DLQ's end was reached. The moves are left in the pending batch. Each
 * move is whole: on -1 (a read error, damage) *count has the moves made
 * before it, and a drop whose index update failed after its first write
 * breaks the store (store_fail_half_way, "DLQ drop"). */
static int dlq_take(store_t *s, group_state_t *g, uint64_t from, int one, int requeue, uint64_t now_ms, uint64_t max,
                    uint64_t *count, uint64_t *next, int *end, char *err, size_t errlen)
{
    key_buf_t k;
    key_queue_prefix(&k, KEY_DLQ, g->name, g->len);
    size_t plen = k.n;
    key_u64(&k, from);
    leveldb_iterator_t *it = store_iter_at(s, &k);
    const char *key;
    size_t klen;
    int rc = 0;
    uint64_t taken = 0;
    *next = from;
    *end = 1;
    for (; store_iter_in(it, k.b, plen, &key, &klen); leveldb_iter_next(it)) {
        uint64_t at;
        if (key_queue_parse(key, klen, plen, &at) != 0) {
            rc = err_set(err, errlen, "corrupt DLQ key in %s", s->path);
            break;
        }
        if (one && at != from) {
            break;
        }
        if (!one && (taken >= max || store_pending_bytes(s) >= STORE_BATCH_MAX_BYTES)) {
            *next = at; /* the next step starts here */
            *end = 0;
            break;
        }
        if (requeue) {
            msg_t m;
            if (store_iter_msg(it, &m, "the DLQ", err, errlen) != 0) {
                rc = -1;
                break;
            }
            m.reconsume = 0;
            store_retry_append(s, g, &m, now_ms);
        } else {
            int pending_before = s->pending;
            if (idx_copy_gone(s, g->topic, at, g->name, g->len, g->gen, 0, err, errlen) != 0) {
                rc = store_fail_half_way(s, pending_before, "DLQ drop", err, errlen);
                break;
            }
        }
        store_del_raw(s, key, klen);
        g->dlq--;
        taken++;
        if (one) {
            break;
        }
    }
    if (rc == 0) {
        rc = store_iter_error(it, "the DLQ", err, errlen);
    }
    leveldb_iter_destroy(it);
    if (taken) {
        store_mark_group(s, g);
    }
    *count += taken;
    return rc;
}

int store_dlq_walk_step(store_t *s, const char *group, size_t group_len, store_dlq_walk_t *walk, uint64_t max,
                        uint64_t now_ms, char *err, size_t errlen)
{
    if (walk->done) {
        return 0;
    }
    if (store_read_begin(s, err, errlen) != 0) {
        return -1;
    }
    group_state_t *g = store_group_get(s, group, group_len);
    if (g == NULL || (walk->started && g->gen != walk->gen)) { /* deleted (and perhaps created again) meanwhile */
        walk->done = 1;
        return 0;
    }
    walk->started = 1;
    walk->gen = g->gen;
    uint64_t taken = 0, next;
    int end;
    if (dlq_take(s, g, walk->next_id, 0, walk->requeue, now_ms, max, &taken, &next, &end, err, errlen) != 0) {
        /* the whole moves before the failure are committed and counted, not
         * left in the batch for another command's commit to write uncounted */
        char commit_err[256];
        if (taken > 0 && !store_broken(s) && store_commit(s, commit_err, sizeof commit_err) == 0) {
            walk->count += taken;
        }
        return -1;
    }
    if (taken > 0 && store_commit(s, err, errlen) != 0) {
        return -1;
    }
    walk->count += taken;
    walk->next_id = next;
    walk->done = end;
    return 0;
}

/* One id, or the whole DLQ in steps of STORE_BATCH_MAX_OPS entries. */
static int dlq_take_named(store_t *s, const char *group, size_t group_len, uint64_t id, int all, int requeue,
                          uint64_t now_ms, uint64_t *count, char *err, size_t errlen)
{
    *count = 0;
    if (all) {
        store_dlq_walk_t walk = { .requeue = requeue };
        int rc = 0;
        while (!walk.done &&
               (rc = store_dlq_walk_step(s, group, group_len, &walk, STORE_BATCH_MAX_OPS, now_ms, err, errlen)) == 0) {
        }
        *count = walk.count;
        return rc;
    }
    if (store_read_begin(s, err, errlen) != 0) {
        return -1;
    }
    group_state_t *g = store_group_get(s, group, group_len);
    uint64_t next;
    int end;
    return g == NULL ? 0 : dlq_take(s, g, id, 1, requeue, now_ms, 1, count, &next, &end, err, errlen);
}

int store_dlq_requeue(store_t *s, const char *group, size_t group_len, uint64_t id, int all, uint64_t now_ms,
                      uint64_t *count, char *err, size_t errlen)
{
    return dlq_take_named(s, group, group_len, id, all, 1, now_ms, count, err, errlen);
}

int store_dlq_drop(store_t *s, const char *group, size_t group_len, uint64_t id, int all, uint64_t *count, char *err,
                   size_t errlen)
{
    return dlq_take_named(s, group, group_len, id, all, 0, 0, count, err, errlen);
}
