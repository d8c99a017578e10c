/*
 * base/map.h — the hash map of byte-string keys to pointers (ids as keys:
 * base/idmap.h, which neither copies nor allocates per key).
 *
 * Open addressing with linear probing and tombstones, FNV-1a hashing, grown
 * (doubled) at half load. The map copies each key (binary safe: keys may hold
 * NULs; a NUL is kept after the copy) and stores the value pointer as given;
 * values are the caller's. Used where the key is a name or an address (the
 * store's topics and groups, the broker's handshakes by address, ...).
 *
 * Iteration visits every live entry once in slot order. During an iteration
 * the entry just returned may be deleted (map_del leaves a tombstone, nothing
 * moves); inserting during an iteration is not allowed (it may grow the map).
 *
 * Never fails (out of memory aborts, base/alloc.h). Not thread-safe: a map
 * belongs to one thread at a time.
 */
#ifndef HG_BASE_MAP_H
#define HG_BASE_MAP_H

#include <stddef.h>

typedef struct map_slot {
    char *key; /* NULL: never used; map.c's tombstone marker: deleted */
    size_t len;
    void *val;
} map_slot_t;

typedef struct map {
    map_slot_t *slots;
    size_t cap;  /* 0 or a power of two */
    size_t used; /* live entries */
    size_t tomb; /* deleted slots not yet reused */
} map_t;

#define MAP_INIT      \
    {                 \
        NULL, 0, 0, 0 \
    }

typedef struct map_iter {
    size_t next; /* the slot to look at next; zero it to start */
} map_iter_t;

void map_init(map_t *m);

/* Free the slots and key copies; free_val (may be NULL) is called on every
 * value first. The map is then empty and reusable. */
void map_free(map_t *m, void (*free_val)(void *val));

/* The value stored under key, or NULL when there is none. */
void *map_get(const map_t *m, const void *key, size_t len);

/* Store val under key (replacing an existing value, which is not freed).
 * Returns the previous value or NULL. */
void *map_put(map_t *m, const void *key, size_t len, void *val);

/* Remove key; returns its value, or NULL when it was not there. */
void *map_del(map_t *m, const void *key, size_t len);

/* Live entries. */
size_t map_count(const map_t *m);

/* The next live entry: 1 with *key (the map's NUL-terminated copy), *len and
 * *val (any may be NULL), or 0 when the iteration is over. */
int map_next(const map_t *m, map_iter_t *it, const char **key, size_t *len, void **val);

#endif
