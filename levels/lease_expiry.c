/*
 * levels/lease_expiry.c — when leases run out (see store.h): the next
 * deadline (store_next_lease_deadline) and the expired leases
 * (store_expired_leases), read from the lease range in deadline order.
 *
 * Released leases leave tombstones at the front of 'I': reads seek from the
 * lease floor (every deadline >= it), which they raise to the first live
 * key, and never step past the last lease held (leases_total), so neither
 * walks tombstones that lie beyond. A held lease not written yet counts by
 * its write_at. An expired lease of a group being deleted goes at once and is
 * reported to nobody.
 *
 * Threading: one thread at a time (the broker's storage thread).
 */
#include "levels/store_internal.h"

#include <string.h>

/* Leases written (committed or pending), over all groups, those being
 * deleted too. */
static uint64_t leases_total(const store_t *s)
{
    uint64_t n = 0;
    const map_t *maps[] = { &s->groups, &s->deleting };
    for (size_t i = 0; i < sizeof maps / sizeof maps[0]; i++) {
        map_iter_t it = { 0 };
        void *v;
        while (map_next(maps[i], &it, NULL, NULL, &v)) {
            const group_state_t *g = v;
            n += g->inflight - g->npend;
        }
    }
    return n;
}

/* The earliest deadline of a written lease (store_next_lease_deadline's
 * part). */
static uint64_t next_written_deadline(store_t *s)
{
    /* A read like any other: commit first. Reading past a pending batch both
     * misses its leases (a TOUCH to an earlier deadline, a new shorter lease) and
     * sees leases it already released (ACK), and raising lease_floor past a
     * pending lease would make store_expired_leases skip it for good. A broken
     * store answers 0 ("now"), so the caller's next real call reports it. */
    if (s->pending > 0 && store_commit_durable(s, 0, NULL, 0) != 0) {
        return 0;
    }
    if (s->lease_next_valid) {
        return s->lease_next;
    }
    uint64_t next = UINT64_MAX;
    /* With no lease held, no seek: it would walk every released lease's deleted
     * key from the floor on, and then the next range's, to reach a live key. */
    if (leases_total(s) > 0) {
        leveldb_iterator_t *it = store_lease_iter_from_floor(s);
        const char *key;
        size_t klen;
        if (store_iter_in_range(it, KEY_LEASE, &key, &klen) && klen >= 9) {
            next = be64_get(key + 1);
        }
        leveldb_iter_destroy(it);
    }
    /* No lease left (and none pending: committed above): every key from the
     * floor on is the tombstone of a released lease, none above the highest
     * deadline leased since open. Seek from there next time, or every seek
     * walks all the leases released since the floor last moved (store_lease_put
     * lowers the floor again for an earlier deadline). */
    if (next != UINT64_MAX) {
        s->lease_floor = next;
    } else if (s->lease_ceiling > s->lease_floor) {
        s->lease_floor = s->lease_ceiling;
    }
    s->lease_next = next;
    s->lease_next_valid = 1;
    return next;
}

uint64_t store_next_lease_deadline(store_t *s)
{
    uint64_t written = next_written_deadline(s), pend = store_pend_next_write(s);
    return written < pend ? written : pend;
}

int store_expired_leases(store_t *s, uint64_t now_ms, store_lease_ref_t *out, int max, int *n, char *err, size_t errlen)
{
    *n = 0;
    if (store_read_begin(s, err, errlen) != 0 || store_leases_write(s, NULL, now_ms, err, errlen) != 0) {
        return -1;
    }
    uint64_t total = leases_total(s); /* never step past the last lease (see store_next_lease_deadline) */
    if (total == 0) {
        return 0;
    }
    leveldb_iterator_t *it = store_lease_iter_from_floor(s);
    const char *key;
    size_t klen;
    int rc = 0, first = 1, seen = 0;
    for (; seen < max && store_iter_in_range(it, KEY_LEASE, &key, &klen); leveldb_iter_next(it)) {
        store_lease_key_t lk;
        if (store_lease_key_read(s, key, klen, &lk, err, errlen) != 0) {
            rc = -1;
            break;
        }
        if (first) {
            s->lease_floor = lk.deadline;
            first = 0;
        }
        if (lk.deadline > now_ms) {
            break;
        }
        seen++;
        group_state_t *dg = map_count(&s->deleting) > 0 ? map_get(&s->deleting, lk.group, lk.glen) : NULL;
        if (dg != NULL) { /* its group is being deleted: the lease goes now */
            if (store_lease_drop(s, dg, lk.id, lk.deadline, err, errlen) != 0) {
                rc = -1;
                break;
            }
            if ((uint64_t)seen == total) {
                break;
            }
            continue;
        }
        msg_t m;
        if (store_iter_msg(it, &m, "a lease", err, errlen) != 0) {
            rc = -1;
            break;
        }
        store_lease_ref_t *r = &out[(*n)++];
        memcpy(r->group, lk.group, lk.glen);
        r->group[lk.glen] = '\0';
        r->id = lk.id;
        r->reconsume = m.reconsume;
        r->deadline_ms = lk.deadline;
        if ((uint64_t)seen == total) {
            break;
        }
    }
    if (rc == 0) {
        rc = store_iter_error(it, "the lease range", err, errlen);
    }
    leveldb_iter_destroy(it);
    return rc;
}
