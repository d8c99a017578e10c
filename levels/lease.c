/*
 * levels/lease.c — leases (see store.h): leasing to a group, ACK, TOUCH, the
 * next deadline, expired leases, and a failure's move to a retry or the DLQ.
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
 * the ids of its leases in memory (lease_track, bounded), so that the GC
 * knows without a read that it holds no copy of an entry it collects
 * (store_group_holds_none).
 * Deleted leases leave tombstones at the front of 'I': a lease floor (every
 * deadline >= it) and a remembered next deadline keep reads from walking them.
 *
 * A failure (store_fail) looks its lease up once: the retry decision's inputs
 * (the message's reconsume, the group's max-reconsume) are read there and
 * handed to the caller's decide function, so a NACK never reads the lease
 * twice nor copies its payload out of the store.
 *
 * Threading: one thread at a time (the broker's storage thread).
 */
#include "levels/store_internal.h"
#include "base/alloc.h"
#include "base/err.h"

#include <stdlib.h>
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

/* Keep id among g's lease ids (store_group_holds_none), or count it as
 * untracked past the bound. */
static void lease_track(group_state_t *g, uint64_t id)
{
    if (map_count(&g->lease_ids) < STORE_LEASE_IDS_MAX) {
        map_put(&g->lease_ids, &id, sizeof id, g);
    } else {
        g->leases_untracked++;
    }
}

static void lease_untrack(group_state_t *g, uint64_t id)
{
    if (map_del(&g->lease_ids, &id, sizeof id) == NULL && g->leases_untracked > 0) {
        g->leases_untracked--;
    }
}

/* m as g's copy: the value of its lease. */
static void lease_stamp(const group_state_t *g, msg_t *m)
{
    m->dest = MSG_DEST_GROUP;
    m->group.ptr = g->name;
    m->group.len = (uint32_t)g->len;
    m->group_gen = g->gen;
}

/* Write g's lease of m: its 'I' key and its copy index entry (log_seq: the
 * topic-log seq m was leased from, 0 when it was not: a retry). */
static void lease_write(store_t *s, group_state_t *g, msg_t *m, uint64_t deadline, uint64_t log_seq)
{
    key_buf_t k;
    lease_stamp(g, m);
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

/* A new lease of g: counted, its id tracked, written. */
static void lease_put(store_t *s, group_state_t *g, msg_t *m, uint64_t deadline, uint64_t log_seq)
{
    lease_write(s, g, m, deadline, log_seq);
    lease_track(g, m->id);
    g->inflight++;
    store_mark_group(s, g);
}

/* ---- leases written late (opt.lease_write_delay_ms) ------------------------------------ */

uint64_t store_leases_unwritten(const store_t *s)
{
    return s->npend;
}

uint64_t store_group_persisted_cursor(const group_state_t *g)
{
    return g->pend_head != NULL ? g->pend_head->log_seq : g->cursor;
}

/* A new lease of g held in memory: counted and its id tracked, as lease_put
 * does, but not written. */
static void pend_add(store_t *s, group_state_t *g, uint64_t id, uint64_t log_seq, uint64_t deadline, uint64_t write_at)
{
    lease_track(g, id);
    g->inflight++;
    lease_pend_t *p = xcalloc(1, sizeof *p);
    p->id = id;
    p->log_seq = log_seq;
    p->deadline = deadline;
    p->write_at = write_at;
    p->group = g;
    p->prev = g->pend_tail;
    *(g->pend_tail != NULL ? &g->pend_tail->next : &g->pend_head) = p;
    g->pend_tail = p;
    p->all_prev = s->pend_last;
    *(s->pend_last != NULL ? &s->pend_last->all_next : &s->pend_first) = p;
    s->pend_last = p;
    g->npend++;
    s->npend++;
    map_put(&g->pend_ids, &p->id, sizeof p->id, p);
}

/* Take p off g's list and free it. */
static void pend_unlink(store_t *s, group_state_t *g, lease_pend_t *p)
{
    *(p->prev != NULL ? &p->prev->next : &g->pend_head) = p->next;
    *(p->next != NULL ? &p->next->prev : &g->pend_tail) = p->prev;
    *(p->all_prev != NULL ? &p->all_prev->all_next : &s->pend_first) = p->all_next;
    *(p->all_next != NULL ? &p->all_next->all_prev : &s->pend_last) = p->all_prev;
    map_del(&g->pend_ids, &p->id, sizeof p->id);
    g->npend--;
    s->npend--;
    free(p);
}

/* pend_unlink, and g's record is to be written: its persisted cursor may move. */
static void pend_remove(store_t *s, group_state_t *g, lease_pend_t *p)
{
    pend_unlink(s, g, p);
    store_mark_group(s, g);
}

/* A lease held in memory is released (ACK, GROUP DEL): uncounted, untracked. */
static void pend_release(group_state_t *g, const lease_pend_t *p)
{
    lease_untrack(g, p->id);
    g->inflight--;
}

/* Write p as a lease (the message read back from the topic log, which the
 * GC keeps while p is not written: store_group_persisted_cursor) and drop
 * it from the list. */
static int pend_write(store_t *s, group_state_t *g, lease_pend_t *p, char *err, size_t errlen)
{
    key_buf_t k;
    key_queue(&k, KEY_TOPIC_LOG, g->topic->name, g->topic->len, p->log_seq);
    char *v;
    size_t vlen;
    int found = store_get(s, &k, &v, &vlen, err, errlen);
    if (found <= 0) {
        return found < 0 ? -1
                         : err_set(err, errlen,
                                   "a lease of %016llx not written yet names topic-log seq %llu of %s, "
                                   "which is gone",
                                   (unsigned long long)p->id, (unsigned long long)p->log_seq, g->topic->name);
    }
    msg_t m;
    int rc = store_decode(v, vlen, &m, "a topic log", err, errlen);
    if (rc == 0) {
        lease_write(s, g, &m, p->deadline, p->log_seq);
        pend_remove(s, g, p);
    }
    leveldb_free(v);
    return rc;
}

/* Write g's leases not written yet whose write_at is by until (UINT64_MAX:
 * all of them); *wrote counts them. */
static int pend_write_due(store_t *s, group_state_t *g, uint64_t until, int *wrote, char *err, size_t errlen)
{
    while (g->pend_head != NULL && g->pend_head->write_at <= until) {
        if (pend_write(s, g, g->pend_head, err, errlen) != 0) {
            return -1;
        }
        (*wrote)++;
    }
    return 0;
}

int store_leases_write(store_t *s, group_state_t *g, uint64_t until, char *err, size_t errlen)
{
    if (s->npend == 0) {
        return 0;
    }
    int wrote = 0;
    if (g != NULL) {
        if (pend_write_due(s, g, until, &wrote, err, errlen) != 0) {
            return -1;
        }
    } else { /* the store's first is its group's first (lease_pend_t) */
        while (s->pend_first != NULL && s->pend_first->write_at <= until) {
            if (pend_write(s, s->pend_first->group, s->pend_first, err, errlen) != 0) {
                return -1;
            }
            wrote++;
        }
    }
    /* what called reads committed data */
    return wrote > 0 ? store_commit_durable(s, 0, err, errlen) : 0;
}

int store_read_begin_whole(store_t *s, char *err, size_t errlen)
{
    return store_read_begin(s, err, errlen) != 0 ? -1 : store_leases_write(s, NULL, UINT64_MAX, err, errlen);
}

void store_leases_forget(store_t *s, group_state_t *g)
{
    while (g->pend_head != NULL) {
        pend_release(g, g->pend_head);
        pend_remove(s, g, g->pend_head);
    }
    map_free(&g->pend_ids, NULL);
}

/* When the next lease not written yet is due to be; UINT64_MAX when none. */
static uint64_t pend_next_write(const store_t *s)
{
    return s->pend_first != NULL ? s->pend_first->write_at : UINT64_MAX;
}

/* Write g's leases not written yet from its first through p (one of them):
 * those before p first, as the persisted cursor passes only written
 * leases. */
static int pend_write_through(store_t *s, group_state_t *g, const lease_pend_t *p, char *err, size_t errlen)
{
    for (int last = 0; !last;) {
        last = g->pend_head == p;
        if (pend_write(s, g, g->pend_head, err, errlen) != 0) {
            return -1;
        }
    }
    return 0;
}

/* Before g leases its next topic-log entry: the entries from the persisted
 * cursor to the cursor must stay exactly the held leases (a crash puts them
 * all back in the backlog, which the persisted position counts), so a lease
 * written at once (!hold: it would expire before its delay is over, or the
 * delay is off) first writes every lease g holds, and a held one past
 * STORE_LEASES_UNWRITTEN_MAX first writes the oldest. */
static int pend_keep_order(store_t *s, group_state_t *g, int hold, char *err, size_t errlen)
{
    const lease_pend_t *through = !hold ? g->pend_tail : g->npend >= STORE_LEASES_UNWRITTEN_MAX ? g->pend_head : NULL;
    return through != NULL ? pend_write_through(s, g, through, err, errlen) : 0;
}

/* store_ack's part: the ids of sorted[0..*n) that are leases not written
 * yet are released without a write, and taken out of sorted (*n: the ids
 * left, in order). The persisted cursor may only pass a lease that is
 * acknowledged or written, so the leases before the last of them in the
 * list that are still open are written now: an ACK is as durable as the ACK
 * of a written lease. */
static int pend_ack(store_t *s, group_state_t *g, uint64_t *sorted, int *n, int *released, char *err, size_t errlen)
{
    lease_pend_t *last = NULL;
    int kept = 0;
    for (int i = 0; i < *n; i++) {
        lease_pend_t *p = map_get(&g->pend_ids, &sorted[i], sizeof sorted[i]);
        if (p == NULL) {
            sorted[kept++] = sorted[i];
        } else if (!p->acked) {
            p->acked = 1;
            if (last == NULL || p->log_seq > last->log_seq) {
                last = p;
            }
        } /* else: an id given twice */
    }
    *n = kept;
    while (last != NULL) {
        lease_pend_t *p = g->pend_head;
        int at_last = p == last;
        if (p->acked) {
            pend_release(g, p);
            (*released)++;
            pend_remove(s, g, p);
        } else if (pend_write(s, g, p, err, errlen) != 0) {
            return -1;
        }
        if (at_last) {
            break;
        }
    }
    return 0; /* the group record, marked by pend_remove, is the ACK's write: committed before its reply */
}

static void lease_delete(store_t *s, group_state_t *g, uint64_t id, uint64_t deadline)
{
    key_buf_t k;
    key_lease(&k, deadline, g->name, g->len, id);
    store_del(s, &k);
    lease_untrack(g, id);
    g->inflight--;
    store_mark_group(s, g);
    if (s->lease_next_valid && deadline <= s->lease_next) {
        s->lease_next_valid = 0;
    }
    s->lease_pops_since_compact++;
}

/* A lease of g, being deleted (GROUP DEL), goes: lease_delete and its copy
 * index entry. Nobody is told. */
static int lease_drop(store_t *s, group_state_t *g, uint64_t id, uint64_t deadline, char *err, size_t errlen)
{
    lease_delete(s, g, id, deadline);
    return idx_copy_gone(s, g->topic, id, g->name, g->len, g->gen, 0, err, errlen);
}

/* ---- leasing ------------------------------------------------------------------------- */

/* Read the queue range of tag ('R': g's retries, 'T': its topic's log) from
 * seq `from`, leasing up to want messages within *budget (msg.h). Returns
 * the count leased (owned copies in out[]), -1 on error. *last_seq gets the
 * last seq taken; delete_taken deletes each entry (a retry is consumed; the
 * topic log is shared and only the cursor moves). write_at (not 0): a lease
 * of a topic-log entry is held in memory until then, when there is room and
 * it would not expire before. */
static int lease_from_range(store_t *s, group_state_t *g, enum key_tag tag, uint64_t from, int want, uint64_t deadline,
                            uint64_t write_at, msg_budget_t *budget, msg_owned_t *out, uint64_t *last_seq,
                            int delete_taken, char *err, size_t errlen)
{
    const char *src = tag == KEY_RETRY ? g->name : g->topic->name;
    size_t srclen = tag == KEY_RETRY ? g->len : g->topic->len;
    key_buf_t k;
    key_queue_prefix(&k, tag, src, srclen);
    size_t plen = k.n;
    key_u64(&k, from);
    leveldb_iterator_t *it = store_iter_at(s, &k);
    const char *key;
    size_t klen;
    int n = 0, rc = 0;
    for (; n < want && msg_budget_open(budget) && store_iter_in(it, k.b, plen, &key, &klen); leveldb_iter_next(it)) {
        if (key_queue_parse(key, klen, plen, last_seq) != 0) {
            rc = err_set(err, errlen, "corrupt queue key in %s", s->path);
            break;
        }
        msg_t m;
        const char *where = tag == KEY_RETRY ? "a retry queue" : "a topic log";
        if (store_iter_msg(it, &m, where, err, errlen) != 0) {
            rc = -1;
            break;
        }
        if (delete_taken) {
            store_del_raw(s, key, klen);
        }
        int hold = tag == KEY_TOPIC_LOG && write_at != 0 && deadline >= write_at;
        if (tag == KEY_TOPIC_LOG && pend_keep_order(s, g, hold, err, errlen) != 0) {
            rc = -1;
            break;
        }
        if (hold) {
            lease_stamp(g, &m);
            pend_add(s, g, m.id, *last_seq, deadline, write_at);
        } else {
            lease_put(s, g, &m, deadline, tag == KEY_TOPIC_LOG ? *last_seq : 0);
        }
        msg_owned_copy(&out[n], &m);
        n++;
        msg_budget_charge(budget, &m);
        if (n == want || !msg_budget_open(budget)) {
            break;
        } /* no step past it: it could walk the next range's deleted keys */
    }
    if (rc == 0) {
        rc = store_iter_error(it, "a queue", err, errlen);
    }
    leveldb_iter_destroy(it);
    if (rc != 0) {
        for (int i = 0; i < n; i++) {
            msg_owned_free(&out[i]);
        }
        return -1;
    }
    return n;
}

int store_lease(store_t *s, const char *group, size_t group_len, const char *topic, size_t topic_len, int count,
                uint64_t lease_ms, uint64_t now_ms, msg_owned_t *out, int *n, char *err, size_t errlen)
{
    return store_lease_within(s, group, group_len, topic, topic_len, count, s->opt.max_lease_bytes, lease_ms, now_ms,
                              out, n, err, errlen);
}

int store_lease_within(store_t *s, const char *group, size_t group_len, const char *topic, size_t topic_len, int count,
                       uint64_t max_bytes, uint64_t lease_ms, uint64_t now_ms, msg_owned_t *out, int *n, char *err,
                       size_t errlen)
{
    *n = 0;
    if (msg_check_name("group", group, group_len, err, errlen) != 0 ||
        msg_check_name("topic", topic, topic_len, err, errlen) != 0) {
        return -1;
    }
    if (count < 1) {
        return err_set(err, errlen, "count must be at least 1");
    }
    if (store_read_begin(s, err, errlen) != 0) {
        return -1;
    }
    group_state_t *g = store_group_get(s, group, group_len);
    if (g == NULL) {
        if (store_topic_room(s, topic, topic_len, err, errlen) != 0 ||
            store_group_room(s, group, group_len, err, errlen) != 0) {
            return -1;
        }
        g = store_group_new(s, group, group_len, store_topic_get_or_create(s, topic, topic_len), 1,
                            s->opt.max_reconsume, now_ms, err, errlen);
        if (g == NULL) {
            return -1;
        }
    } else if (g->topic->len != topic_len || memcmp(g->topic->name, topic, topic_len) != 0) {
        return err_set(err, errlen, "group %.*s is bound to topic %.*s, not %.*s", (int)group_len, group,
                       (int)g->topic->len, g->topic->name, (int)topic_len, topic);
    }
    uint64_t deadline = now_ms + lease_ms;
    uint64_t write_at = s->opt.lease_write_delay_ms > 0 ? now_ms + s->opt.lease_write_delay_ms : 0;
    uint64_t last = 0;
    msg_budget_t budget;
    msg_budget_init(&budget, max_bytes);
    if (g->retry_ready > 0) {
        int want = count < (int64_t)g->retry_ready ? count : (int)g->retry_ready;
        int got = lease_from_range(s, g, KEY_RETRY, g->retry_head_hint, want, deadline, 0, &budget, out, &last, 1, err,
                                   errlen);
        if (got < 0) {
            return -1;
        }
        if (got > 0) {
            g->retry_ready -= (uint64_t)got;
            g->retry_head_hint = last + 1;
            g->pops_since_compact += (uint64_t)got;
        }
        *n = got;
    }
    uint64_t backlog = g->topic->appended - g->position;
    if (*n < count && backlog > 0 && msg_budget_open(&budget)) {
        int want = count - *n;
        if ((uint64_t)want > backlog) {
            want = (int)backlog;
        }
        int got = lease_from_range(s, g, KEY_TOPIC_LOG, g->cursor, want, deadline, write_at, &budget, out + *n, &last,
                                   0, err, errlen);
        if (got < 0) {
            for (int i = 0; i < *n; i++) {
                msg_owned_free(&out[i]);
            }
            *n = 0;
            return -1;
        }
        if (got > 0) {
            g->cursor = last + 1;
            g->position += (uint64_t)got;
        }
        *n += got;
    }
    /* No mark of g here: a written lease marked it (lease_put), and leases
     * held in memory change nothing the group record persists. */
    return 0;
}

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
    lease_pend_t *p = map_get(&l->g->pend_ids, &id, sizeof id);
    if (p != NULL && (pend_write_through(s, l->g, p, err, errlen) != 0 || /* lease_lookup reads committed data */
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

/* An iterator at the lease floor: every lease's deadline is at or after it. */
static leveldb_iterator_t *lease_iter_from_floor(store_t *s)
{
    key_buf_t k;
    key_start(&k, KEY_LEASE);
    key_u64(&k, s->lease_floor);
    return store_iter_at(s, &k);
}

/* A key of the lease range, parsed (group: a view into the key). */
typedef struct lease_key {
    uint64_t deadline, id;
    const char *group;
    size_t glen;
} lease_key_t;

/* key_lease_parse with the error named: 0, or -1. */
static int lease_key_read(const store_t *s, const char *key, size_t klen, lease_key_t *lk, char *err, size_t errlen)
{
    if (key_lease_parse(key, klen, &lk->deadline, &lk->group, &lk->glen, &lk->id) != 0) {
        return err_set(err, errlen, "corrupt lease key in %s", s->path);
    }
    return 0;
}

/* ---- ACK, TOUCH, expiry ---------------------------------------------------------------- */

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
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
    qsort(sorted, (size_t)n, sizeof *sorted, cmp_u64);
    if (g->npend > 0) { /* leases not written yet: released here, the rest below */
        int rc = pend_ack(s, g, sorted, &n, released, err, errlen);
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
            lease_delete(s, g, sorted[i], deadline);
            (*released)++;
            if (idx_copy_gone(s, g->topic, sorted[i], g->name, g->len, g->gen, log_seq, err, errlen) != 0) {
                rc = -1;
                break;
            }
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
    lease_pend_t *p = g != NULL ? map_get(&g->pend_ids, &id, sizeof id) : NULL;
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
    lease_delete(s, l.g, id, l.deadline);
    lease_put(s, l.g, &l.m, new_deadline_ms, l.log_seq);
    leveldb_free(l.buf);
    *found = 1;
    return 0;
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
        leveldb_iterator_t *it = lease_iter_from_floor(s);
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
     * walks all the leases released since the floor last moved (lease_put
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
    uint64_t written = next_written_deadline(s), pend = pend_next_write(s);
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
    leveldb_iterator_t *it = lease_iter_from_floor(s);
    const char *key;
    size_t klen;
    int rc = 0, first = 1, seen = 0;
    for (; seen < max && store_iter_in_range(it, KEY_LEASE, &key, &klen); leveldb_iter_next(it)) {
        lease_key_t lk;
        if (lease_key_read(s, key, klen, &lk, err, errlen) != 0) {
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
            if (lease_drop(s, dg, lk.id, lk.deadline, err, errlen) != 0) {
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
    lease_delete(s, g, id, l.deadline);
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
        uint64_t due = store_level_enqueue(s, m, r.level, r.level ? 0 : r.delay_ms, now_ms);
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

/* ---- a step of GROUP DEL; the lease index of format 2 ----------------------------------- */

int lease_delete_some(store_t *s, group_state_t *g, int budget, int *work, char *err, size_t errlen)
{
    *work = 0;
    if (g->inflight == 0) { /* store_leases_forget first: the rest are written */
        return 0;
    }
    leveldb_iterator_t *it = g->del_lease_at.n > 0 ? store_iter_at(s, &g->del_lease_at) : lease_iter_from_floor(s);
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
        memcpy(g->del_lease_at.b, key, klen);
        g->del_lease_at.n = klen;
        lease_key_t lk;
        if (lease_key_read(s, key, klen, &lk, err, errlen) != 0) {
            rc = -1;
            break;
        }
        if (lk.glen != g->len || memcmp(lk.group, g->name, lk.glen) != 0) {
            continue;
        }
        *work += STORE_DELETE_ENTRY_WORK - 1;
        if (lease_drop(s, g, lk.id, lk.deadline, err, errlen) != 0) {
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
            rc = err_set(err, errlen, "corrupt lease index entry (format 2) in %s", s->path);
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
