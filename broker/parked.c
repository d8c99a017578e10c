/*
 * broker/parked.c — the parked jobs' three indexes (contract: parked.h):
 * doubly linked lists per wake topic and per connection, threaded through
 * the jobs themselves (two pairs of links, so one job is in both), and a
 * binary min-heap of the jobs with a deadline, each job knowing its slot
 * (heap_pos) so that removing any one is O(log n). Storage thread only.
 */
#include "broker/parked.h"
#include "base/alloc.h"

#include <stdlib.h>

enum park_link {
    BY_TOPIC,
    BY_CONN
};

/* ---- lists threaded through the jobs ------------------------------------------ */

static job_t **link_next(job_t *j, enum park_link k)
{
    return k == BY_TOPIC ? &j->topic_next : &j->conn_next;
}

static job_t **link_prev(job_t *j, enum park_link k)
{
    return k == BY_TOPIC ? &j->topic_prev : &j->conn_prev;
}

static void plist_push(parked_list_t *l, job_t *j, enum park_link k)
{
    *link_next(j, k) = NULL;
    *link_prev(j, k) = l->tail;
    if (l->tail) {
        *link_next(l->tail, k) = j;
    } else {
        l->head = j;
    }
    l->tail = j;
}

static void plist_remove(parked_list_t *l, job_t *j, enum park_link k)
{
    job_t *n = *link_next(j, k), *p = *link_prev(j, k);
    if (p) {
        *link_next(p, k) = n;
    } else {
        l->head = n;
    }
    if (n) {
        *link_prev(n, k) = p;
    } else {
        l->tail = p;
    }
    *link_next(j, k) = *link_prev(j, k) = NULL;
}

/* The list of key in m, created when missing and create is set (else NULL). */
static parked_list_t *plist_of(map_t *m, const void *key, size_t len, int create)
{
    parked_list_t *l = map_get(m, key, len);
    if (l == NULL && create) {
        l = xcalloc(1, sizeof *l);
        map_put(m, key, len, l);
    }
    return l;
}

/* Remove j from the list of key in m (the list is freed when it empties). */
static void plist_leave(map_t *m, const void *key, size_t len, job_t *j, enum park_link k)
{
    parked_list_t *l = plist_of(m, key, len, 0);
    plist_remove(l, j, k);
    if (l->head == NULL) {
        map_del(m, key, len);
        free(l);
    }
}

/* ---- the deadline heap ----------------------------------------------------------- */

static int deadline_before(const parked_set_t *p, size_t a, size_t b)
{
    return p->deadlines[a]->deadline_mono < p->deadlines[b]->deadline_mono;
}

static void heap_set(parked_set_t *p, size_t i, job_t *j)
{
    p->deadlines[i] = j;
    j->heap_pos = i + 1;
}

static void heap_swap(parked_set_t *p, size_t a, size_t b)
{
    job_t *t = p->deadlines[a];
    heap_set(p, a, p->deadlines[b]);
    heap_set(p, b, t);
}

/* Restore the heap order around slot i (after an insert or a removal). */
static void heap_fix(parked_set_t *p, size_t i)
{
    while (i > 0 && deadline_before(p, i, (i - 1) / 2)) {
        heap_swap(p, i, (i - 1) / 2);
        i = (i - 1) / 2;
    }
    for (;;) {
        size_t l = 2 * i + 1, r = l + 1, best = i;
        if (l < p->n_deadlines && deadline_before(p, l, best)) {
            best = l;
        }
        if (r < p->n_deadlines && deadline_before(p, r, best)) {
            best = r;
        }
        if (best == i) {
            return;
        }
        heap_swap(p, i, best);
        i = best;
    }
}

static void heap_push(parked_set_t *p, job_t *j)
{
    if (p->n_deadlines == p->cap_deadlines) {
        p->cap_deadlines = p->cap_deadlines ? 2 * p->cap_deadlines : 64;
        p->deadlines = xrealloc(p->deadlines, p->cap_deadlines * sizeof *p->deadlines);
    }
    heap_set(p, p->n_deadlines++, j);
    heap_fix(p, p->n_deadlines - 1);
}

static void heap_remove(parked_set_t *p, job_t *j)
{
    size_t i = j->heap_pos - 1;
    j->heap_pos = 0;
    if (i != --p->n_deadlines) {
        heap_set(p, i, p->deadlines[p->n_deadlines]);
        heap_fix(p, i);
    }
}

/* ---- the set ---------------------------------------------------------------------- */

void parked_init(parked_set_t *p)
{
    map_init(&p->topics);
    map_init(&p->conns);
    p->any.head = p->any.tail = NULL;
    p->deadlines = NULL;
    p->n_deadlines = p->cap_deadlines = 0;
    p->count = 0;
}

void parked_free(parked_set_t *p)
{
    map_free(&p->topics, free);
    map_free(&p->conns, free);
    free(p->deadlines);
    p->deadlines = NULL;
    p->n_deadlines = p->cap_deadlines = 0;
}

void parked_add(parked_set_t *p, job_t *j, uint64_t now_mono)
{
    j->parked = 1;
    j->deadline_mono = j->block_ms ? now_mono + j->block_ms : 0;
    j->next = j->prev = NULL;
    plist_push(j->wake_topic != NULL ? plist_of(&p->topics, j->wake_topic, j->wake_topic_len, 1) : &p->any, j,
               BY_TOPIC);
    plist_push(plist_of(&p->conns, &j->conn_id, sizeof j->conn_id, 1), j, BY_CONN);
    if (j->deadline_mono != 0) {
        heap_push(p, j);
    }
    p->count++;
}

void parked_remove(parked_set_t *p, job_t *j)
{
    if (j->wake_topic != NULL) {
        plist_leave(&p->topics, j->wake_topic, j->wake_topic_len, j, BY_TOPIC);
    } else {
        plist_remove(&p->any, j, BY_TOPIC);
    }
    plist_leave(&p->conns, &j->conn_id, sizeof j->conn_id, j, BY_CONN);
    if (j->heap_pos != 0) {
        heap_remove(p, j);
    }
    j->parked = 0;
    p->count--;
}

parked_list_t *parked_of_topic(parked_set_t *p, const char *topic, size_t len)
{
    return plist_of(&p->topics, topic, len, 0);
}

parked_list_t *parked_of_conn(parked_set_t *p, uint64_t conn_id)
{
    return plist_of(&p->conns, &conn_id, sizeof conn_id, 0);
}

job_t *parked_next_deadline(const parked_set_t *p)
{
    return p->n_deadlines > 0 ? p->deadlines[0] : NULL;
}
