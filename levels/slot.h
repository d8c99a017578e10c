/*
 * levels/slot.h — a where-slot file: slot-<base>.w (base: the log segment's
 * first offset, 16 hex digits), one 24-byte slot per message record of that
 * segment, at the record's ordinal (0, 1, 2, … in the segment's order). A slot
 * says where the message is now: (id u64, queue u32, flags u32, CQ index u64),
 * big-endian; flags: SLOT_REVOKED. docs/design-commitlog.md §2.
 *
 * The file grows with the segment's messages: slot_put at ordinal == count
 * appends (into an in-memory buffer, written by slot_flush with one pwrite, or
 * when the buffer is full); at an ordinal below count it overwrites in place
 * (a move, a REVOKE). Slots past count cannot be written: ordinals are dense.
 *
 * What the module guarantees: a read returns the bytes last put at that
 * ordinal; at open the file must be a whole number of slots (a torn last slot
 * is refused, naming the size: the caller's replay decides). A slot carries
 * no checksum: it is trusted only together with the log record it names back
 * (§2), which is the caller's check. An all-zero slot (id 0: ids are log
 * offsets, never 0) is refused by slot_get as never written. Durability:
 * only slot_sync syncs (the caller's checkpoints, §3).
 *
 * Threads: a slot_file_t belongs to one thread; no locks. Ownership: the
 * caller's from slot_file_open to slot_file_close. Errors: 0 / -1 with one
 * line in err[errlen] naming the file and the ordinal.
 */
#ifndef HG_LEVELS_SLOT_H
#define HG_LEVELS_SLOT_H

#include "levels/fixfile.h"

#include <stddef.h>
#include <stdint.h>

#define SLOT_BYTES        24
#define SLOT_REVOKED      UINT32_C(1)
#define SLOT_BUFFER_SLOTS 1024 /* appended slots written by one pwrite, at most */

typedef struct slot {
    uint64_t id;       /* the message's id (its record's log offset); never 0 */
    uint32_t queue;    /* the CQ holding its one live entry */
    uint32_t flags;    /* SLOT_REVOKED */
    uint64_t cq_index; /* that entry's index */
} slot_t;

typedef struct slot_file slot_file_t;

/* Open slot-<base>.w in dir; create 1 makes a new empty file (refusing an
 * existing one), 0 opens an existing one. */
int slot_file_open(const char *dir, uint64_t base, int create, slot_file_t **out, char *err, size_t errlen);

/* Put s at ordinal (<= slot_count: == appends, < overwrites); s->id != 0. */
int slot_put(slot_file_t *f, uint64_t ordinal, const slot_t *s, char *err, size_t errlen);

/* The slot at ordinal (< slot_count). */
int slot_get(slot_file_t *f, uint64_t ordinal, slot_t *out, char *err, size_t errlen);

/* The slots [ordinal, ordinal + n) (inside slot_count) into out, in one read
 * of the file (a run: the caller's due move reads slots in ordinal order).
 * A slot that was never written (id 0) is returned as it is, for the caller
 * to judge: slot_get refuses it, a run does not. */
int slot_read_run(slot_file_t *f, uint64_t ordinal, size_t n, slot_t *out, char *err, size_t errlen);

/* Write the buffer; slot_sync also fdatasyncs. */
int slot_flush(slot_file_t *f, char *err, size_t errlen);
int slot_sync(slot_file_t *f, char *err, size_t errlen);

/* slot_sync split for another thread: fixfile_sync_handoff's contract. */
int slot_sync_handoff(slot_file_t *f, int all, fixfile_syncset_t *s, char *err, size_t errlen);

/* Flush and free (also when the flush fails: then -1). f may be NULL. */
int slot_file_close(slot_file_t *f, char *err, size_t errlen);

uint64_t slot_count(const slot_file_t *f);

/* slot-<base>.w into name[len]. */
void slot_file_name(uint64_t base, char *name, size_t len);

/* Delete slot-<base>.w in dir (not open: close it first); gone already is
 * not a failure. 0, or -1 with err naming the file. */
int slot_file_remove(const char *dir, uint64_t base, char *err, size_t errlen);

#endif
