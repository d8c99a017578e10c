/*
 * levels/lane.h — the remainder lane's in-memory order: a min-heap of the lane
 * CQ's entries by (due, id), and the lane CQ's head that follows from it.
 * docs/design-commitlog.md §4 (the lane), §6 (its load at open), §10 step 4a.3.
 *
 * The lane CQ (levels/cq.h) holds remainders in append order; they leave in
 * due order. The lane keeps one entry per CQ index in [head, tail): pushes take
 * the indexes in append order, with no gap (the lane's tail); pops leave in
 * (due, id, CQ index) order — equal due, lower id first (the order of today's
 * `L` keys, level due seq), and the CQ index only orders entries that share
 * both. lane_head is the lowest CQ index still in the heap (the tail when the
 * heap is empty): the index the lane CQ's head may advance to.
 *
 * Deletion is lazy. A revoked or moved message's entry stays in the heap until
 * it reaches the top, where lane_next_live asks the caller's check (its record
 * and where-slot, which the caller reads anyway to deliver it) and drops it.
 * A removal by id would need an id → heap position map kept through every
 * swap, for a case (REVOKE of a remainder) that is rare and whose entry leaves
 * within the smallest level's delay (< 1 s) anyway: the dead entries a lane
 * holds are bounded by the same window as the live ones.
 *
 * Memory: 24 bytes an entry in one array (no allocation per entry; it doubles
 * when full, up to max_entries) plus one bit per CQ index in [head, tail).
 * max_entries bounds what the lane may hold before anything is allocated: a
 * push or load past it is refused with an error, never a crash (440 000 live
 * entries at the target rate are ~10 MiB). Out of memory aborts (base/alloc.h).
 *
 * Threads: a lane_t belongs to one thread (the storage thread); no locks.
 * Ownership: the caller owns the lane_t from lane_new/lane_load to lane_free;
 * lane_load reads the caller's cq_t and does not keep it.
 * Errors: 0 / -1 with one line in err[errlen] naming the problem and the value
 * (the CQ's file and index for a load); a failed call leaves the lane as it was.
 */
#ifndef HG_LEVELS_LANE_H
#define HG_LEVELS_LANE_H

#include "levels/cq.h"

#include <stddef.h>
#include <stdint.h>

typedef struct lane_entry {
    uint64_t due;      /* the remainder's due, ms: the message's final due */
    uint64_t id;       /* the message's id (its log offset); never 0 */
    uint64_t cq_index; /* where the entry sits in the lane CQ */
} lane_entry_t;

typedef struct lane lane_t;

/* The caller's verdict on the entry at the top (lane_next_live): LANE_LIVE
 * when its slot still names it there, LANE_DEAD when it does not (revoked,
 * moved), or -1 with err set when it cannot tell (a read failed). */
enum {
    LANE_DEAD = 0,
    LANE_LIVE = 1
};
typedef int (*lane_check_fn)(void *ctx, const lane_entry_t *e, char *err, size_t errlen);

/* An empty lane whose first push takes CQ index head. max_entries > 0. */
lane_t *lane_new(uint64_t head, size_t max_entries);

/* A lane holding the entries of q's window [cq_head, cq_tail), read in runs
 * (cq_read) and pushed in index order. On error *out is NULL and nothing is
 * kept: a damaged entry (cq_read's error: the file and the index), a window
 * longer than max_entries (refused before reading). */
int lane_load(cq_t *q, size_t max_entries, lane_t **out, char *err, size_t errlen);

/* Add the entry at CQ index cq_index, which must be the lane's tail; id != 0.
 * Refused when the lane holds max_entries. */
int lane_push(lane_t *l, uint64_t due, uint64_t id, uint64_t cq_index, char *err, size_t errlen);

/* The top entry into *out: 1, or 0 when the lane is empty. It may be dead
 * (deletion is lazy): a due for a timer, early at worst, never late. */
int lane_peek(const lane_t *l, lane_entry_t *out);

/* Remove the top entry (into *out when out is not NULL): 1, or 0 when empty.
 * Its CQ index is done; lane_head moves past the done indexes below it. */
int lane_pop(lane_t *l, lane_entry_t *out);

/* Drop dead entries from the top, asking check about each top in turn, until
 * a live one is on top: 1 with it in *out (still in the lane: lane_pop it when
 * its move is committed), 0 when the lane emptied, -1 when check failed (that
 * entry stays on top; the dead ones before it are gone). */
int lane_next_live(lane_t *l, lane_check_fn check, void *ctx, lane_entry_t *out, char *err, size_t errlen);

size_t lane_size(const lane_t *l);
/* The lowest CQ index still in the lane; lane_tail when it is empty. */
uint64_t lane_head(const lane_t *l);
/* The CQ index the next push takes. */
uint64_t lane_tail(const lane_t *l);
/* Bytes the lane holds (its heap array and its done bits), for metrics and benches. */
size_t lane_bytes(const lane_t *l);

/* Free; l may be NULL. */
void lane_free(lane_t *l);

#endif
