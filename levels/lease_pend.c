/*
 * levels/lease_pend.c — leases written late (opt.lease_write_delay_ms): a
 * lease of a topic-log entry held in memory until its write_at, so that an
 * ACK within the delay writes nothing.
 *
 * A lease held (lease_pend_t) is counted and tracked like a written one
 * (inflight, lease_ids) and sits on two lists: its group's, in seq order, and
 * the store's, in the order taken (so the store's first is its group's
 * first). Invariants: a group's held leases are exactly the topic-log entries
 * from its persisted cursor (the oldest held one's seq) to its cursor, so a
 * crash delivers them again and the GC keeps the entries to read them back;
 * the persisted cursor only ever passes a lease that is written or
 * acknowledged. So a lease is written (read back from the topic log) when it
 * falls due, when an older one must be (store_pend_write_through), when one
 * is written at once after it (store_pend_keep_order), and before anything
 * reads the store as stored (store_read_begin_whole).
 *
 * Threading: one thread at a time (the broker's storage thread).
 */
#include "levels/store_internal.h"
#include "base/alloc.h"
#include "base/err.h"

#include <stdlib.h>
#include <string.h>

uint64_t store_leases_unwritten(const store_t *s)
{
    return s->npend;
}

uint64_t store_group_persisted_cursor(const group_state_t *g)
{
    return g->pend_head != NULL ? g->pend_head->log_seq : g->cursor;
}

/* A zeroed lease_pend_t: a spare, or a new one. */
static lease_pend_t *pend_alloc(store_t *s)
{
    lease_pend_t *p = s->pend_spare;
    if (p == NULL) {
        return xcalloc(1, sizeof *p);
    }
    s->pend_spare = p->next;
    s->npend_spare--;
    memset(p, 0, sizeof *p);
    return p;
}

/* p is no longer in use: kept as a spare, or freed when there are enough. */
static void pend_free(store_t *s, lease_pend_t *p)
{
    if (s->npend_spare >= STORE_PEND_SPARE_MAX) {
        free(p);
        return;
    }
    p->next = s->pend_spare;
    s->pend_spare = p;
    s->npend_spare++;
}

void store_pend_spares_free(store_t *s)
{
    while (s->pend_spare != NULL) {
        lease_pend_t *next = s->pend_spare->next;
        free(s->pend_spare);
        s->pend_spare = next;
    }
    s->npend_spare = 0;
}

void store_pend_add(store_t *s, group_state_t *g, uint64_t id, uint64_t log_seq, uint64_t deadline, uint64_t write_at)
{
    store_lease_track(g, id);
    g->inflight++;
    lease_pend_t *p = pend_alloc(s);
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
    idmap_put(&g->pend_ids, p->id, p);
}

/* Take p off g's list and free it (a spare: pend_free). */
static void pend_unlink(store_t *s, group_state_t *g, lease_pend_t *p)
{
    *(p->prev != NULL ? &p->prev->next : &g->pend_head) = p->next;
    *(p->next != NULL ? &p->next->prev : &g->pend_tail) = p->prev;
    *(p->all_prev != NULL ? &p->all_prev->all_next : &s->pend_first) = p->all_next;
    *(p->all_next != NULL ? &p->all_next->all_prev : &s->pend_last) = p->all_prev;
    idmap_del(&g->pend_ids, p->id);
    g->npend--;
    s->npend--;
    pend_free(s, p);
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
    store_lease_untrack(g, p->id);
    g->inflight--;
}

/* Write p as a lease (the message read back from the topic log, which the
 * GC keeps while p is not written: store_group_persisted_cursor) and drop
 * it from the list. */
static int pend_write(store_t *s, group_state_t *g, lease_pend_t *p, char *err, size_t errlen)
{
    clog_reader_t rd = { 0 };
    char *held;
    msg_t m; /* read where it lies, encoded once: into the lease's value */
    int found = topic_log_get(s, g->topic, p->log_seq, &rd, &held, &m, err, errlen); /* a 'T' key or a CQ entry */
    if (found > 0) {
        store_lease_write(s, g, &m, p->deadline, p->log_seq);
        pend_remove(s, g, p);
    }
    free(held);
    clog_reader_free(&rd);
    if (found == 0) {
        return err_set(err, errlen,
                       "a lease of %016llx not written yet names topic-log seq %llu of %s, "
                       "which is gone",
                       (unsigned long long)p->id, (unsigned long long)p->log_seq, g->topic->name);
    }
    return found < 0 ? -1 : 0;
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
    idmap_free(&g->pend_ids);
}

uint64_t store_pend_next_write(const store_t *s)
{
    return s->pend_first != NULL ? s->pend_first->write_at : UINT64_MAX;
}

int store_pend_write_through(store_t *s, group_state_t *g, const lease_pend_t *p, char *err, size_t errlen)
{
    for (int last = 0; !last;) {
        last = g->pend_head == p;
        if (pend_write(s, g, g->pend_head, err, errlen) != 0) {
            return -1;
        }
    }
    return 0;
}

int store_pend_keep_order(store_t *s, group_state_t *g, int hold, char *err, size_t errlen)
{
    const lease_pend_t *through = !hold ? g->pend_tail : g->npend >= STORE_LEASES_UNWRITTEN_MAX ? g->pend_head : NULL;
    return through != NULL ? store_pend_write_through(s, g, through, err, errlen) : 0;
}

int store_pend_ack(store_t *s, group_state_t *g, uint64_t *sorted, int *n, int *released, char *err, size_t errlen)
{
    lease_pend_t *last = NULL;
    int kept = 0;
    for (int i = 0; i < *n; i++) {
        lease_pend_t *p = idmap_get(&g->pend_ids, sorted[i]);
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
