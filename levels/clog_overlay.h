/*
 * levels/clog_overlay.h — the readers' view of held writes
 * (docs/design-commitlog.md §3 rule 2): a batch's derived writes (CQ
 * entries, where-slots, LevelDB puts and deletes) are held until the log's
 * sync covers it, so a point read — a CQ entry at an index, a slot, a
 * LevelDB key (a lease's `Y`, a `K` count, an `O` copy) — asks the overlay
 * first and reads the file or LevelDB only when the overlay holds nothing
 * for it. Range walks (the `I` expiry scan, a DLQ list) do not use it: they
 * wait for the sync (§3).
 *
 * Contract: after overlay_add of every held batch's ops in log order, and
 * overlay_drop of each batch once its writes are made (in the same order),
 * a lookup returns the value the last held batch writing that place gave it
 * — the value the file or LevelDB will hold once every held batch is made —
 * or OVERLAY_NONE when no held batch writes it (the file or LevelDB already
 * holds the current value). Head moves are not kept (the caller's records
 * hold the heads). Batch ends are never 0 and grow in add order (they are
 * log offsets; a moved batch's new end lies past every held one).
 *
 * The overlay copies no key or value: a held place points into the record of
 * the batch that wrote it last, so the record that the ops given to
 * overlay_add point into must stay valid and unchanged until overlay_drop (or
 * overlay_move away from) its batch. Values returned point into those records, valid until the next
 * overlay_add or overlay_drop. Owner thread only (the thread that holds and
 * applies the batches). Never fails (out of memory aborts).
 */
#ifndef HG_LEVELS_CLOG_OVERLAY_H
#define HG_LEVELS_CLOG_OVERLAY_H

#include "levels/clog_derived.h"
#include "levels/cq.h"
#include "levels/slot.h"

#include <stddef.h>
#include <stdint.h>

enum {
    OVERLAY_NONE = 0,    /* nothing held: read the file or LevelDB */
    OVERLAY_HELD = 1,    /* the held value is returned */
    OVERLAY_DELETED = 2, /* the LevelDB key is deleted by a held batch */
};

typedef struct clog_overlay clog_overlay_t;

clog_overlay_t *overlay_new(void);
void overlay_free(clog_overlay_t *o); /* NULL: nothing */

/* The held writes of the batch ending at `end`: its derived-writes record's
 * ops[0..n), decoded (levels/clog_derived.h derived_decode; a record that
 * does not decode whole gives what decodes before the damage: the redo
 * refuses it anyway). The array is not kept (the keys and values it points
 * to are: see above). */
void overlay_add(clog_overlay_t *o, uint64_t end, const derived_op_t *ops, size_t n);

/* The batch ending at `end` has been made: forget each of its writes that
 * no later held batch made again (the places the add listed); an end no held
 * batch has is ignored. */
void overlay_drop(clog_overlay_t *o, uint64_t end);

/* The batch that ended at `from` now ends at `to` (carried after a failed
 * sync: levels/clog_redo.h redo_sync_failed); called for the carried batches
 * in log order, with the ops its add was given. */
void overlay_move(clog_overlay_t *o, uint64_t from, uint64_t to, const derived_op_t *ops, size_t n);

int overlay_cq(const clog_overlay_t *o, uint32_t queue, uint64_t index, cq_entry_t *e);
int overlay_slot(const clog_overlay_t *o, uint64_t base, uint64_t ordinal, slot_t *s);

/* The runs of n consecutive places from index (ordinal): each held value is
 * written to out[k] (the others are left as they are); returns how many
 * places from the first are held before the first that is not (n: all). One
 * call a run: a reader lays the held writes over what it read from the file
 * (levels/clog_redo_files.c). */
size_t overlay_cq_run(const clog_overlay_t *o, uint32_t queue, uint64_t index, size_t n, cq_entry_t *out);
size_t overlay_slot_run(const clog_overlay_t *o, uint64_t base, uint64_t ordinal, size_t n, slot_t *out);
int overlay_get(const clog_overlay_t *o, const void *key, size_t klen, const char **val, size_t *vlen);

size_t overlay_count(const clog_overlay_t *o); /* places held */

#endif
