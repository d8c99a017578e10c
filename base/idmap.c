/*
 * base/idmap.c — the id-keyed hash map (contract: idmap.h).
 *
 * Invariants: cap is 0 or a power of two >= IDMAP_MIN_CAP; used * 2 <= cap
 * after every put, so a probe always reaches a free slot and ends; every
 * live entry lies on the probe run from its home slot with no free slot in
 * between (a delete keeps this by moving later entries of the run back).
 */
#include "base/idmap.h"

#include <stdlib.h>

#include "base/alloc.h"

#define IDMAP_MIN_CAP 16

/* The home slot of id: Fibonacci hashing, the product's high bits (the ids
 * are mostly consecutive; the multiplication spreads them). */
static size_t home_of(const idmap_t *m, uint64_t id)
{
    uint64_t h = id * UINT64_C(0x9e3779b97f4a7c15);
    return (size_t)(h ^ (h >> 32)) & (m->cap - 1);
}

/* The slot holding id, or the free slot where it would go (cap > 0). */
static idmap_slot_t *find(const idmap_t *m, uint64_t id)
{
    size_t mask = m->cap - 1, i = home_of(m, id);
    for (;;) {
        idmap_slot_t *s = &m->slots[i];
        if (s->val == NULL || s->id == id) {
            return s;
        }
        i = (i + 1) & mask;
    }
}

static void resize(idmap_t *m, size_t cap)
{
    idmap_t bigger = { xcalloc(cap, sizeof(idmap_slot_t)), cap, m->used };
    for (size_t i = 0; i < m->cap; i++) {
        if (m->slots[i].val != NULL) {
            *find(&bigger, m->slots[i].id) = m->slots[i];
        }
    }
    free(m->slots);
    *m = bigger;
}

void idmap_free(idmap_t *m)
{
    free(m->slots);
    m->slots = NULL;
    m->cap = 0;
    m->used = 0;
}

void *idmap_get(const idmap_t *m, uint64_t id)
{
    return m->cap == 0 ? NULL : find(m, id)->val;
}

void *idmap_put(idmap_t *m, uint64_t id, void *val)
{
    if ((m->used + 1) * 2 > m->cap) {
        resize(m, m->cap == 0 ? IDMAP_MIN_CAP : m->cap * 2);
    }
    idmap_slot_t *s = find(m, id);
    void *old = s->val;
    if (old == NULL) {
        m->used++;
    }
    s->id = id;
    s->val = val;
    return old;
}

void *idmap_del(idmap_t *m, uint64_t id)
{
    if (m->cap == 0) {
        return NULL;
    }
    size_t mask = m->cap - 1;
    idmap_slot_t *hole = find(m, id);
    void *old = hole->val;
    if (old == NULL) {
        return NULL;
    }
    /* Backward shift: each later entry of the run whose home does not lie
     * strictly between the hole and it (cyclically) moves into the hole. */
    size_t h = (size_t)(hole - m->slots);
    for (size_t j = (h + 1) & mask; m->slots[j].val != NULL; j = (j + 1) & mask) {
        size_t home = home_of(m, m->slots[j].id);
        if (((j - home) & mask) >= ((j - h) & mask)) {
            m->slots[h] = m->slots[j];
            h = j;
        }
    }
    m->slots[h].val = NULL;
    m->used--;
    if (m->cap > IDMAP_KEEP_CAP && m->used * 8 < m->cap) {
        resize(m, m->cap / 2);
    }
    return old;
}

size_t idmap_count(const idmap_t *m)
{
    return m->used;
}
