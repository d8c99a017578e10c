/*
 * levels/lease.c — a lease's keys (see store.h): written, deleted and
 * tracked, for the files that lease, settle and expire leases
 * (lease_take.c, lease_pend.c, lease_ack.c, lease_expiry.c); and the fold
 * of format 2's lease index at open. (GROUP DEL's walk of the lease range is
 * group_delete.c's.)
 *
 * A lease is two keys written in one batch (keys.h): the message under
 * 'I' deadline group id, so expiry reads the range in deadline order, and the
 * group copy's index entry 'Y' id group gen, whose place ('I', the deadline,
 * the topic-log seq) names that key, so ACK, TOUCH and fail find a lease from
 * its id with one Get (or a few iterator steps for a sorted batch of ACKs).
 * Every group copy has that entry anyway; a separate lease index (format 2's
 * 'J', folded into 'Y' at open: lease_index_fold) cost a put and a delete
 * per message. The topic-log seq is handed to idx_copy_gone when the lease
 * goes (ACK): while the log's GC has not reached that entry the message's own
 * copy is still there, so only the copy index entry goes, without reading
 * the message index (that read was 15 % of the storage thread with producers
 * and consumers at full speed). A group also keeps
 * the ids of its leases in memory (store_lease_track, bounded), so that the GC
 * knows without a read that it holds no copy of an entry it collects
 * (store_group_holds_none).
 * Deleted leases leave tombstones at the front of 'I': a lease floor (every
 * deadline >= it) and a remembered next deadline keep reads from walking them.
 * Invariant kept here: every written lease is counted in its group's
 * inflight and its deadline is at or above s->lease_floor (store_lease_write
 * lowers the floor, store_lease_delete forgets the next deadline).
 *
 * Threading: one thread at a time (the broker's storage thread).
 */
#include "levels/store_internal.h"
#include "base/err.h"

#include <string.h>

void store_lease_track(group_state_t *g, uint64_t id)
{
    if (idmap_count(&g->lease_ids) < STORE_LEASE_IDS_MAX) {
        idmap_put(&g->lease_ids, id, g);
    } else {
        g->leases_untracked++;
    }
}

void store_lease_untrack(group_state_t *g, uint64_t id)
{
    if (idmap_del(&g->lease_ids, id) == NULL && g->leases_untracked > 0) {
        g->leases_untracked--;
    }
}

void store_lease_stamp(const group_state_t *g, msg_t *m)
{
    m->dest = MSG_DEST_GROUP;
    m->group.ptr = g->name;
    m->group.len = (uint32_t)g->len;
    m->group_gen = g->gen;
}

void store_lease_write(store_t *s, group_state_t *g, msg_t *m, uint64_t deadline, uint64_t log_seq)
{
    key_buf_t k;
    store_lease_stamp(g, m);
    key_lease(&k, deadline, g->name, g->len, m->id);
    store_put_msg(s, &k, m);
    idx_place_t p = { 'I', 0, deadline, log_seq };
    idx_copy_put(s, m->id, g->name, g->len, g->gen, &p);
    if (deadline < s->lease_floor) {
        s->lease_floor = deadline;
    }
    if (deadline > s->lease_ceiling) {
        s->lease_ceiling = deadline;
    }
    if (s->lease_next_valid && deadline < s->lease_next) {
        s->lease_next = deadline;
    }
}

void store_lease_put(store_t *s, group_state_t *g, msg_t *m, uint64_t deadline, uint64_t log_seq)
{
    store_lease_write(s, g, m, deadline, log_seq);
    store_lease_track(g, m->id);
    g->inflight++;
    store_mark_group(s, g);
}

void store_lease_delete(store_t *s, group_state_t *g, uint64_t id, uint64_t deadline)
{
    key_buf_t k;
    key_lease(&k, deadline, g->name, g->len, id);
    store_del(s, &k);
    store_lease_untrack(g, id);
    g->inflight--;
    store_mark_group(s, g);
    if (s->lease_next_valid && deadline <= s->lease_next) {
        s->lease_next_valid = 0;
    }
    s->lease_pops_since_compact++;
}

int store_lease_release(store_t *s, group_state_t *g, uint64_t id, uint64_t deadline, uint64_t log_seq, char *err,
                        size_t errlen)
{
    int pending_before = s->pending;
    store_lease_delete(s, g, id, deadline);
    if (idx_copy_gone(s, g->topic, id, g->name, g->len, g->gen, log_seq, err, errlen) != 0) {
        return store_fail_half_way(s, pending_before, "lease release", err, errlen);
    }
    return 0;
}

int store_lease_drop(store_t *s, group_state_t *g, uint64_t id, uint64_t deadline, char *err, size_t errlen)
{
    return store_lease_release(s, g, id, deadline, 0, err, errlen);
}

leveldb_iterator_t *store_lease_iter_from_floor(store_t *s)
{
    key_buf_t k;
    key_start(&k, KEY_LEASE);
    key_u64(&k, s->lease_floor);
    return store_iter_at(s, &k);
}

int store_lease_key_read(const store_t *s, const char *key, size_t klen, store_lease_key_t *lk, char *err,
                         size_t errlen)
{
    if (key_lease_parse(key, klen, &lk->deadline, &lk->group, &lk->glen, &lk->id) != 0) {
        char d[KEY_DESCRIBE_BYTES];
        return err_set(err, errlen,
                       "corrupt lease key %s in %s (not 'I' deadline group 0x00 id with a group of 1 to %d bytes "
                       "without 0x00)",
                       key_describe(key, klen, d, sizeof d), s->path, MSG_MAX_NAME);
    }
    return 0;
}

/* ---- the lease index of format 2 ------------------------------------------------------ */

int lease_index_fold(store_t *s, char *err, size_t errlen)
{
    leveldb_iterator_t *it = store_iter_range(s, KEY_LEASE_INDEX);
    const char *key;
    size_t klen;
    int rc = 0;
    uint64_t folded = 0;
    for (; store_iter_in_range(it, KEY_LEASE_INDEX, &key, &klen); leveldb_iter_next(it)) {
        size_t vlen;
        const char *v = leveldb_iter_value(it, &vlen);
        const char *group;
        size_t glen;
        uint64_t id, deadline, log_seq;
        if (record_lease_index_decode(v, vlen, &deadline, &log_seq) != 0 ||
            key_lease_index_parse(key, klen, &group, &glen, &id) != 0) {
            char d[KEY_DESCRIBE_BYTES];
            rc = err_set(err, errlen, "corrupt lease index entry (format 2) %s in %s",
                         key_describe(key, klen, d, sizeof d), s->path);
            break;
        }
        const group_state_t *g = store_group_get(s, group, glen);
        if (g == NULL) {
            rc = err_set(err, errlen,
                         "lease index entry (format 2) of id %016llx names group %.*s, which %s does not have",
                         (unsigned long long)id, (int)glen, group, s->path);
            break;
        }
        idx_place_t p = { 'I', 0, deadline, log_seq };
        idx_copy_put(s, id, g->name, g->len, g->gen, &p);
        store_del_raw(s, key, klen);
        folded++;
        if (store_commit_when_full(s, err, errlen) != 0) {
            rc = -1;
            break;
        }
    }
    if (rc == 0) {
        rc = store_iter_error(it, "the lease index (format 2)", err, errlen);
    }
    leveldb_iter_destroy(it);
    if (rc == 0 && folded > 0) {
        rc = store_commit_durable(s, 1, err, errlen);
        /* The range is all tombstones now: write them out and drop them, so
         * the next open's look at it is one seek past nothing. */
        if (rc == 0) {
            key_buf_t a, b;
            key_start(&a, KEY_LEASE_INDEX);
            key_start(&b, KEY_LEASE_INDEX + 1);
            leveldb_compact_range(s->db, a.b, a.n, b.b, b.n);
        }
    }
    return rc;
}
