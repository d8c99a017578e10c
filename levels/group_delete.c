/*
 * levels/group_delete.c — GROUP DEL (see store.h): a group deleted in the
 * background, a bounded step at a time.
 *
 * A group may hold millions of leases, retries and DLQ entries, and deleting
 * them all at once would stop the storage thread for seconds (about 8 µs an
 * entry). So GROUP DEL only takes the group out of sight: out of the groups
 * map (every command then finds no such group) and out of its topic's list
 * (its cursor no longer holds the topic log back), into store_t.deleting,
 * with RECORD_GROUP_DELETING in its record. The writer's maintenance steps
 * (store_collect, store_maintain) then delete its entries, a budget of keys
 * at a time: its leases (the whole lease range in deadline order, from where
 * the last step stopped), then its retry-ready queue, then its DLQ; the
 * record goes with the last entry. An expired lease of such a group is
 * deleted by the expiry scan itself and reported to nobody.
 *
 * What stays true meanwhile:
 * - Its counters (in-flight, retry-ready, DLQ) count what is left, and every
 *   commit writes them with its record, so store_check verifies them and a
 *   restart (which finds the flag) goes on where the deletes stopped.
 * - Its copies are a deleted group's to the indexes: they keep no 'X' alive
 *   (idx_copy_gone finds it gone or not, both fine), its delayed retries are
 *   dropped when they come due, as a deleted group's always were.
 * - A group of the same name cannot be created while the old one's entries
 *   are left (their keys are by name): creating it (GROUP CREATE, a PULL)
 *   deletes the rest first, in batches of a bounded size; only that command
 *   waits for it.
 *
 * Threading: one thread at a time (the broker's storage thread).
 */
#include "levels/store_internal.h"
#include "base/err.h"

#include <string.h>

static int delete_done(store_t *s, group_state_t *g, char *err, size_t errlen);

int store_group_delete(store_t *s, const char *group, size_t group_len, int *found, char *err, size_t errlen)
{
    *found = 0;
    if (store_read_begin(s, err, errlen) != 0) {
        return -1;
    }
    group_state_t *g = store_group_get(s, group, group_len);
    if (g == NULL) {
        return 0;
    }
    *found = 1;
    store_leases_forget(s, g);
    store_group_damage_forget(s, g);
    store_topic_remove_group(g);
    store_mark_woken(s, g->topic); /* a PULL waiting on it now waits on the topic */
    map_del(&s->groups, group, group_len);
    group_delete_resume(s, g);
    if (g->inflight == 0 && g->retry_ready == 0 && g->dlq == 0) {
        return delete_done(s, g, err, errlen); /* nothing to delete: at once */
    }
    store_mark_group(s, g); /* its record is written with the flag */
    return 0;
}

void group_delete_resume(store_t *s, group_state_t *g)
{
    g->deleting = 1; /* its step positions are 0: from the start of each range */
    map_put(&s->deleting, g->name, g->len, g);
}

/* Delete entries of g's range tag ('R' or 'D') from seq *from on, with
 * their copy index entries, counting each off *count, until *work_done
 * reaches budget. An entry goes whole or not at all: a failure after its
 * copy index entry's delete is in the batch (idx_copy_gone reads the
 * message index record after it) breaks the store (store_fail_half_way),
 * so that half is never written; the entries deleted before it are whole. */
static int delete_queue_some(store_t *s, group_state_t *g, enum key_tag tag, uint64_t *from, uint64_t *count,
                             int budget, int *work_done, char *err, size_t errlen)
{
    const char *what = tag == KEY_DLQ ? "the DLQ" : "a retry queue";
    key_buf_t k;
    key_queue_prefix(&k, tag, g->name, g->len);
    size_t plen = k.n;
    key_u64(&k, *from);
    leveldb_iterator_t *it = store_iter_at(s, &k);
    const char *key;
    size_t klen;
    int rc = 0;
    for (; *count > 0 && *work_done < budget && store_iter_in(it, k.b, plen, &key, &klen); leveldb_iter_next(it)) {
        if (klen != plen + 8) {
            rc = err_set(err, errlen, "corrupt key in group %s's range in %s", g->name, s->path);
            break;
        }
        msg_t m;
        if (store_iter_msg(it, &m, what, err, errlen) != 0) {
            rc = -1;
            break;
        }
        int pending_before = s->pending;
        if (idx_copy_gone(s, g->topic, m.id, g->name, g->len, g->gen, 0, err, errlen) != 0) {
            /* after its copy index entry's delete: the entry's delete would be half of it */
            rc = store_fail_half_way(s, pending_before, "group delete", err, errlen);
            break;
        }
        *from = be64_get(key + plen) + 1;
        store_del_raw(s, key, klen);
        (*count)--;
        *work_done += STORE_DELETE_ENTRY_WORK;
        store_mark_group(s, g);
    }
    if (rc == 0) {
        rc = store_iter_error(it, what, err, errlen);
    }
    leveldb_iter_destroy(it);
    return rc;
}

/* A step of GROUP DEL (g being deleted): go through the lease range from
 * where the last step stopped (g->del_lease_at; the floor at first: every
 * group's leases share the range, in deadline order) until *work reaches
 * budget, and delete g's leases on the way ('I', and 'Y' through
 * idx_copy_gone), counting each off g->inflight. Read begun by the caller;
 * the deletes are left pending. */
static int delete_leases_some(store_t *s, group_state_t *g, int budget, int *work, char *err, size_t errlen)
{
    *work = 0;
    if (g->inflight == 0) { /* store_leases_forget first: the rest are written */
        return 0;
    }
    leveldb_iterator_t *it =
        g->del_lease_at.n > 0 ? store_iter_at(s, &g->del_lease_at) : store_lease_iter_from_floor(s);
    const char *key;
    size_t klen;
    int rc = 0, ended = 1;
    for (; g->inflight > 0 && store_iter_in_range(it, KEY_LEASE, &key, &klen); leveldb_iter_next(it)) {
        if (g->del_lease_at.n == klen && memcmp(g->del_lease_at.b, key, klen) == 0) {
            continue; /* where the last step stopped: looked at already */
        }
        if (*work >= budget) {
            ended = 0;
            break;
        }
        (*work)++;
        store_lease_key_t lk;
        if (store_lease_key_read(s, key, klen, &lk, err, errlen) != 0) {
            rc = -1;
            break;
        }
        memcpy(g->del_lease_at.b, key, klen); /* parsed first: a lease key fits a key_buf_t */
        g->del_lease_at.n = klen;
        if (lk.glen != g->len || memcmp(lk.group, g->name, lk.glen) != 0) {
            continue;
        }
        *work += STORE_DELETE_ENTRY_WORK - 1;
        if (store_lease_drop(s, g, lk.id, lk.deadline, err, errlen) != 0) {
            rc = -1;
            break;
        }
    }
    if (rc == 0) {
        rc = store_iter_error(it, "the lease range", err, errlen);
    }
    leveldb_iter_destroy(it);
    if (rc == 0 && ended && g->inflight > 0) {
        g->del_lease_at.n = 0; /* should the count and the range disagree: the next step walks from the floor */
    }
    return rc;
}

/* A step of g's deletion, until *work_done reaches budget (in the unit of
 * STORE_DELETE_ENTRY_WORK); *left gets whether entries are left. */
static int delete_some(store_t *s, group_state_t *g, int budget, int *work_done, int *left, char *err, size_t errlen)
{
    int n = 0;
    if (delete_leases_some(s, g, budget, &n, err, errlen) != 0) {
        return -1;
    }
    *work_done += n;
    if (g->inflight == 0 &&
        delete_queue_some(s, g, KEY_RETRY, &g->del_retry_from, &g->retry_ready, budget, work_done, err, errlen) != 0) {
        return -1;
    }
    if (g->inflight == 0 && g->retry_ready == 0 &&
        delete_queue_some(s, g, KEY_DLQ, &g->del_dlq_from, &g->dlq, budget, work_done, err, errlen) != 0) {
        return -1;
    }
    *left = g->inflight > 0 || g->retry_ready > 0 || g->dlq > 0;
    return 0;
}

/* g has nothing left: its record goes (after a commit of what is pending,
 * which may write it once more), and g with it. */
static int delete_done(store_t *s, group_state_t *g, char *err, size_t errlen)
{
    if (g->dirty && store_commit_durable(s, 0, err, errlen) != 0) {
        return -1;
    }
    key_buf_t k;
    key_record(&k, KEY_GROUP_RECORD, g->name, g->len);
    store_del(s, &k);
    map_del(&s->deleting, g->name, g->len);
    store_group_free(g);
    s->lease_next_valid = 0;
    return 0;
}

int group_delete_steps(store_t *s, int max_work, int *work, char *err, size_t errlen)
{
    while (*work < max_work && map_count(&s->deleting) > 0) {
        map_iter_t it = { 0 };
        void *v;
        if (!map_next(&s->deleting, &it, NULL, NULL, &v)) {
            break;
        }
        group_state_t *g = v;
        int left = 1, work_done = 0;
        if (delete_some(s, g, max_work - *work, &work_done, &left, err, errlen) != 0) {
            return -1;
        }
        *work += work_done;
        if (left) {
            /* out of budget (or, should the counters be wrong, to walk the
             * leases again): the next call, which reads what this one
             * deleted as committed — a walk now would meet it again */
            break;
        }
        if (delete_done(s, g, err, errlen) != 0) {
            return -1;
        }
    }
    return 0;
}

int group_delete_finish(store_t *s, const char *name, size_t len, char *err, size_t errlen)
{
    group_state_t *g = map_get(&s->deleting, name, len);
    if (g == NULL) {
        return 0;
    }
    if (store_read_begin(s, err, errlen) != 0) {
        return -1;
    }
    for (int left = 1; left;) {
        int work_done = 0;
        if (delete_some(s, g, STORE_BATCH_MAX_OPS, &work_done, &left, err, errlen) != 0 ||
            store_commit_durable(s, 0, err, errlen) != 0) {
            return -1;
        }
        if (left && work_done == 0) {
            return err_set(err, errlen,
                           "group %.*s is being deleted, but its counters name entries the store does not hold",
                           (int)len, name);
        }
    }
    return delete_done(s, g, err, errlen);
}

void store_groups_deleting(const store_t *s, uint64_t *groups, uint64_t *entries)
{
    *groups = map_count(&s->deleting);
    *entries = 0;
    map_iter_t it = { 0 };
    void *v;
    while (map_next(&s->deleting, &it, NULL, NULL, &v)) {
        const group_state_t *g = v;
        *entries += g->inflight + g->retry_ready + g->dlq;
    }
}
