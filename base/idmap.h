/*
 * base/idmap.h — a hash map from 64-bit ids to pointers, for the maps that
 * every message passes through (a group's leases and its leases not written
 * yet: levels/store_internal.h; the broker's connections by id, looked up for
 * every reply: broker/conn_internal.h).
 *
 * base/map.h's byte-string map copies each key (an allocation per put, a
 * free per delete) and hashes it byte by byte; keyed by an id, this map
 * stores the id itself in the slot and hashes it with one multiplication.
 * Open addressing with linear probing, grown (doubled) at half load; a
 * delete shifts the entries after it back (no tombstones), and the table
 * halves when it falls below 1/8 load, so a burst of entries does not keep
 * its memory — but not below IDMAP_KEEP_CAP slots: a map filled and drained
 * by every batch (a group's leases, taken and ACKed 1 024 at a time) halved
 * and doubled its table seven times each way per batch, some 400 Ir a
 * message; 32 KiB kept is cheaper. Values must not be NULL (a NULL value
 * marks a free slot).
 *
 * Never fails (out of memory aborts, base/alloc.h). Not thread-safe: a map
 * belongs to one thread at a time. A zeroed idmap_t is an empty map.
 */
#ifndef HG_BASE_IDMAP_H
#define HG_BASE_IDMAP_H

#include <stddef.h>
#include <stdint.h>

/* A table shrinks no further than this many slots (32 KiB) once grown past
 * it; idmap_free releases it. */
#define IDMAP_KEEP_CAP 2048

typedef struct idmap_slot {
    uint64_t id;
    void *val; /* NULL: free */
} idmap_slot_t;

typedef struct idmap {
    idmap_slot_t *slots;
    size_t cap;  /* 0 or a power of two (>= 16) */
    size_t used; /* live entries */
} idmap_t;

/* Free the slots; the values are the caller's. The map is then empty. */
void idmap_free(idmap_t *m);

/* The value stored under id, or NULL. */
void *idmap_get(const idmap_t *m, uint64_t id);

/* Store val (not NULL) under id, replacing an existing value (not freed).
 * Returns the previous value or NULL. */
void *idmap_put(idmap_t *m, uint64_t id, void *val);

/* Remove id; returns its value, or NULL when it was not there. */
void *idmap_del(idmap_t *m, uint64_t id);

/* Live entries. */
size_t idmap_count(const idmap_t *m);

#endif
