/*
 * base/map.c — open-addressing hash map (contract: map.h).
 *
 * Invariants: cap is 0 or a power of two; (used + tomb) * 2 <= cap after
 * every insert, so a probe always reaches an empty slot and ends.
 */
#include "base/map.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"

static char tombstone[1];

static uint64_t hash_bytes(const void *p, size_t len)
{
    const unsigned char *s = p;
    uint64_t h = UINT64_C(1469598103934665603); /* FNV-1a */
    for (size_t i = 0; i < len; i++)
        h = (h ^ s[i]) * UINT64_C(1099511628211);
    return h;
}

static int live(const map_slot_t *s)
{
    return s->key != NULL && s->key != tombstone;
}

/* The slot holding key, or (for_insert) the slot where it would go; NULL
 * when looking up in an empty map or the key is absent. */
static map_slot_t *find_slot(const map_t *m, const void *key, size_t len, int for_insert)
{
    if (m->cap == 0)
        return NULL;
    size_t mask = m->cap - 1, i = (size_t)hash_bytes(key, len) & mask;
    map_slot_t *first_tomb = NULL;
    for (;;) {
        map_slot_t *s = &m->slots[i];
        if (s->key == NULL)
            return for_insert ? (first_tomb != NULL ? first_tomb : s) : NULL;
        if (s->key == tombstone) {
            if (first_tomb == NULL)
                first_tomb = s;
        } else if (s->len == len && memcmp(s->key, key, len) == 0) {
            return s;
        }
        i = (i + 1) & mask;
    }
}

static void grow(map_t *m)
{
    map_t bigger = MAP_INIT;
    /* Sized for the live entries only (load <= 1/4 after the rehash), so a
     * map full of tombstones is cleaned without growing. */
    bigger.cap = 16;
    while ((m->used + 1) * 4 > bigger.cap)
        bigger.cap *= 2;
    bigger.slots = xcalloc(bigger.cap, sizeof *bigger.slots);
    for (size_t i = 0; i < m->cap; i++) {
        map_slot_t *s = &m->slots[i];
        if (!live(s))
            continue;
        map_slot_t *d = find_slot(&bigger, s->key, s->len, 1);
        *d = *s;
        bigger.used++;
    }
    free(m->slots);
    *m = bigger;
}

void map_init(map_t *m)
{
    memset(m, 0, sizeof *m);
}

void map_free(map_t *m, void (*free_val)(void *val))
{
    for (size_t i = 0; i < m->cap; i++) {
        if (!live(&m->slots[i]))
            continue;
        if (free_val != NULL)
            free_val(m->slots[i].val);
        free(m->slots[i].key);
    }
    free(m->slots);
    map_init(m);
}

void *map_get(const map_t *m, const void *key, size_t len)
{
    map_slot_t *s = find_slot(m, key, len, 0);
    return s != NULL ? s->val : NULL;
}

void *map_put(map_t *m, const void *key, size_t len, void *val)
{
    map_slot_t *s = find_slot(m, key, len, 0);
    if (s != NULL) {
        void *old = s->val;
        s->val = val;
        return old;
    }
    if ((m->used + m->tomb + 1) * 2 > m->cap)
        grow(m);
    s = find_slot(m, key, len, 1);
    if (s->key == tombstone)
        m->tomb--;
    s->key = xstrndup(key, len);
    s->len = len;
    s->val = val;
    m->used++;
    return NULL;
}

void *map_del(map_t *m, const void *key, size_t len)
{
    map_slot_t *s = find_slot(m, key, len, 0);
    if (s == NULL)
        return NULL;
    void *old = s->val;
    free(s->key);
    s->key = tombstone;
    s->val = NULL;
    m->used--;
    m->tomb++;
    return old;
}

size_t map_count(const map_t *m)
{
    return m->used;
}

int map_next(const map_t *m, map_iter_t *it, const char **key, size_t *len, void **val)
{
    while (it->next < m->cap) {
        const map_slot_t *s = &m->slots[it->next++];
        if (!live(s))
            continue;
        if (key != NULL)
            *key = s->key;
        if (len != NULL)
            *len = s->len;
        if (val != NULL)
            *val = s->val;
        return 1;
    }
    return 0;
}
