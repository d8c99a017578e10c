/*
 * levels/clog_redo.h — the commit log's batch protocol and recovery
 * (docs/design-commitlog.md §3; step 3 of its landing plan): a batch carries,
 * inside the log, the writes derived from it (CQ entries, CQ head moves and
 * where-slots as positional writes; a LevelDB batch's puts and deletes); those
 * writes are held until the log's sync covers their batch and only then made;
 * each LevelDB batch carries the mark `M "applied"` = its log batch's end;
 * checkpoints make the derived files and LevelDB durable up to `B` =
 * `M "checkpoint"`; the open redoes every batch from `B` to the log's end.
 * Not wired into the store yet.
 *
 * One batch on the log: the caller's data records (messages, moves; added
 * with redo_add_message), then one data record holding the derived writes
 * (the last data record before the COMMIT, starting with the magic "HGRD"),
 * then the COMMIT. The derived record's layout is atop clog_redo.c.
 *
 * The rules this module keeps (§3):
 *  - nothing but the log is ever ahead of the durable log: redo_commit
 *    appends and holds the derived writes; redo_apply_durable makes the held
 *    writes of every batch that clog_durable covers, in log order (CQ and
 *    slot writes, then the LevelDB batch with its mark, unsynced); readers
 *    see held writes through redo_overlay;
 *  - a checkpoint takes B = the end of the last applied batch, fdatasyncs
 *    every CQ and slot file written, LevelDB's write-ahead logs
 *    (levels/logsync.c) and the directory, then writes `M "checkpoint"` = B
 *    with a LevelDB write made durable by syncing LevelDB's logs again, and
 *    only then lets clog_recycle past the previous B (clog_keep_from). It is
 *    split in two (redo_checkpoint_begin on the owner thread, then
 *    redo_checkpoint_finish on any thread) so the owner is not held by the
 *    syncs; redo_checkpoint is the two in a row, redo_checkpoint_async the
 *    two with the finish on the redo's own thread;
 *  - a clean close (redo_close) writes `M "clean"` = its end in its
 *    checkpoint's write, and the open's checkpoint deletes it before anything
 *    is appended: an open that finds the log ending exactly there skips the
 *    scan past the end for whole batches (step 1's D rule), which after a
 *    crash reads the rest of the last segment;
 *  - the open (redo_open) syncs the log to its end, refuses a log that ends
 *    below `M "applied"` (a batch whose derived writes were made was durable,
 *    so the log lost durable bytes: limit 1 of step 1), then redoes every
 *    batch from B to the end in order — CQ, head and slot writes by position,
 *    and the LevelDB batch too — and takes a checkpoint.
 *
 * Why the open redoes the LevelDB batches between B and `M "applied"` rather
 * than skipping them (the design's "idempotent by the mark"): LevelDB is not
 * synced between checkpoints, and after a power cut its recovered state need
 * not be a prefix of its writes — its log reader skips a lost write's zeros
 * and applies the whole records behind them, so `M "applied"` can name batch
 * k+1 while batch k's records are gone. Redoing every batch from B in order
 * yields the state at the log's end from any mix of later batches' writes
 * (each key ends with the last value the sequence gives it), also when the
 * redo itself is cut and run again. The mark stays the damage check above.
 *
 * Queue bounds: a queue's head and tail are the caller's records (the
 * store's `C`/`P`); the first write naming a queue asks the caller through
 * redo_bounds_fn. A CQ write below the head is skipped (consumed), at the
 * tail appended, inside [head, tail) rewritten, past the tail refused.
 *
 * Threads: one owner thread calls everything but redo_checkpoint_finish;
 * another thread (the syncer) may call clog_sync(redo_log(r)) at the same
 * time, and redo_checkpoint_finish after a redo_checkpoint_begin (the
 * contract is at those two). Errors: one line in
 * err[errlen] naming the file, queue, or log offset concerned.
 */
#ifndef HG_LEVELS_CLOG_REDO_H
#define HG_LEVELS_CLOG_REDO_H

#include "levels/clog.h"
#include "levels/clog_overlay.h"
#include "levels/cq.h"
#include "levels/slot.h"

#include <leveldb/c.h>
#include <stddef.h>
#include <stdint.h>

enum {
    REDO_DAMAGED = -2,   /* open: the log lost a durable batch, or a derived-writes record is damaged */
    REDO_BATCH_FULL = 1, /* add_message: commit this batch, then add the message to a new one */
};

#define REDO_MESSAGE_RESERVE \
    72 /* derived-record bytes kept free per message: its CQ write (29) and slot (41), rounded up */
#define REDO_BATCH_RESERVE 1024 /* and per batch (head moves, rewrites, the caller's LevelDB records) */

typedef struct redo redo_t;

/* The head and tail of queue (the caller's records), asked once per queue
 * per open. 0, or -1 with err. */
typedef int (*redo_bounds_fn)(void *ctx, uint32_t queue, uint64_t *head, uint64_t *tail, char *err, size_t errlen);

typedef struct redo_options {
    const char *dir;        /* the log, CQ and slot files (LevelDB may live here too) */
    uint64_t segment_bytes; /* clog_options_t's */
    uint64_t floor;         /* clog_options_t's */
    leveldb_t *db;          /* the caller's, open for the whole life of the redo_t */
    const char *db_dir;     /* LevelDB's directory (its write-ahead logs are synced at checkpoints) */
    redo_bounds_fn bounds;
    void *bounds_ctx;
} redo_options_t;

typedef struct redo_open_report {
    clog_open_report_t log; /* what clog_open found */
    uint64_t checkpoint;    /* B read from LevelDB (0: none) */
    uint64_t applied;       /* `M "applied"` read from LevelDB (0: none) */
    uint64_t batches;       /* batches redone */
    uint64_t bytes;         /* log bytes walked by the redo (end − B) */
    uint64_t cq_writes, head_moves, slot_writes, db_ops;
    uint64_t log_open_us, redo_us, checkpoint_us; /* where the open's time went (monotonic clock) */
} redo_open_report_t;

/* A batch being built (zero-initialise; redo_batch_free releases it). */
typedef struct redo_batch {
    clog_batch_t log;
    char *derived; /* the derived-writes record, after its 8-byte head */
    size_t len, cap;
    uint32_t ops;
    uint32_t messages;
} redo_batch_t;

/* Open the log in o->dir and recover (above). Returns 0 with *out (and rep
 * when not NULL); REDO_DAMAGED or CLOG's damage with err naming the file or
 * offset and nothing changed but what the redo rewrote by position; -1 with
 * err on I/O or a bad option. */
int redo_open(const redo_options_t *o, redo_t **out, redo_open_report_t *rep, char *err, size_t errlen);

/* Sync the log, apply every held batch, checkpoint, close every file (the LevelDB handle
 * stays the caller's), so the next open redoes nothing. -1 with err when a
 * step fails; r is freed either way. NULL: nothing. */
int redo_close(redo_t *r, char *err, size_t errlen);

/* Close every file and free r without syncing the log, applying held
 * writes or taking a checkpoint — for a caller that must stop (its own open
 * failed after redo_open, a sync of the log failed, redo_sync_failed
 * failed): the held batches' derived writes are dropped, the files stay as
 * they are, and the next redo_open redoes every batch the log kept from the
 * last checkpoint. -1 with err when closing a CQ or slot file failed (it may
 * have flushed writes of applied batches); r is freed either way. NULL:
 * nothing. */
int redo_free(redo_t *r, char *err, size_t errlen);

clog_t *redo_log(redo_t *r);
uint64_t redo_applied(const redo_t *r);      /* the end of the last batch whose derived writes were made */
uint64_t redo_checkpointed(const redo_t *r); /* the last finished checkpoint's B (any thread) */
/* The bytes in the log of the batches applied since the last checkpoint
 * began: their own, not the offsets the log skipped between them (a floor
 * raised at open, a segment's unused tail), which a checkpoint's interval must
 * not count. Owner thread. */
uint64_t redo_applied_since_checkpoint(const redo_t *r);

/* Bytes of the batches applied since the last FINISHED checkpoint's B: those
 * since the last begin, and, while a begun one is not finished, those
 * between the finished B and its B — what an open after a crash would redo
 * (their batches' own bytes, as redo_applied_since_checkpoint). Owner thread. */
uint64_t redo_applied_since_finished(const redo_t *r);
/* The size of LevelDB's newest write-ahead log as the last checkpoint's sync
 * found it (levels/logsync.h: logsync_newest_bytes); 0 before one. The thread
 * that finished that checkpoint. */
unsigned long long redo_leveldb_log_bytes(const redo_t *r);
size_t redo_held(const redo_t *r); /* batches appended whose derived writes wait for the log's sync */

/* What the held batches write, for point reads to consult before the CQ and
 * slot files and LevelDB (levels/clog_overlay.h; §3 rule 2): kept by
 * redo_commit, redo_apply_durable, redo_sync_failed and (only when its sync
 * or apply fails) redo_commit_applied. Owner thread. */
const clog_overlay_t *redo_overlay(const redo_t *r);

/* Reads of the derived files as every batch committed so far leaves them
 * (design-commitlog.md 4a.4: the due move reads level heads from the CQs):
 * each entry or slot from the held batches (the overlay) when one writes it,
 * else from the file through its append buffer (the state of the batches
 * applied). Owner thread. A queue or slot file no batch named since the
 * open is opened here (a queue's bounds through redo_bounds_fn; a slot file
 * must exist: none is made by a read).
 * redo_cq_read: entries [index, index + n); -1 with err when one is neither
 * held nor inside the file's window, or is zero (cq_read's refusal).
 * redo_slot_read: up to n slots from ordinal, *got of them: the run stops
 * at the first slot neither held nor in the file (-1 with err when that is
 * the first), so a caller may ask for more than the segment holds; a slot
 * of id 0 (never written) is returned as such. */
/* Close and delete the where-slot files of segments the log no longer has
 * (clog_has_segment: recycled into spares, or removed), those of `bases`
 * (n of them) or, with bases NULL, every such file in the directory. A
 * segment's slots are written by batches only while a message of it lives;
 * the caller passes only segments no batch past the last finished
 * checkpoint writes (no message of them lived since that checkpoint began),
 * for the open's redo (from that checkpoint) must find every file it
 * writes. *swept (may be NULL) counts the files deleted. Owner thread.
 * 0, or -1 with err naming the file (the rest are still tried). */
int redo_slots_sweep(redo_t *r, const uint64_t *bases, size_t n, uint64_t *swept, char *err, size_t errlen);

/* Close the queues open here for which doomed(ctx, queue, UINT64_MAX) is
 * non-zero and delete the files of the directory doomed names
 * (cq_remove_queues: one read of it) — doomed judges whole queues. The caller passes only queues no batch past the last
 * finished checkpoint writes (a deleted topic's, once that checkpoint began
 * past its delete), for the open's redo from that checkpoint must find
 * every file it writes; a later write to one opens it again through the
 * bounds callback. *removed counts the files deleted. Owner thread. 0, or
 * -1 with err naming the queue or file (the rest are still tried). */
int redo_queues_remove(redo_t *r, cq_doomed_fn doomed, void *ctx, uint64_t *removed, char *err, size_t errlen);

int redo_cq_read(redo_t *r, uint32_t queue, uint64_t index, size_t n, cq_entry_t *out, char *err, size_t errlen);
int redo_slot_read(redo_t *r, uint64_t base, uint64_t ordinal, size_t n, slot_t *out, size_t *got, char *err,
                   size_t errlen);

/* Add a message record (clog_batch_add's contract; *offset is its id), keeping
 * REDO_MESSAGE_RESERVE bytes per message and REDO_BATCH_RESERVE per batch
 * free in the segment for the derived-writes record (redo_commit refuses a
 * record that outgrew them).
 * REDO_BATCH_FULL: commit, then add it again. */
int redo_add_message(redo_t *r, redo_batch_t *b, const void *p, size_t n, uint64_t *offset, char *err, size_t errlen);

/* The room redo_add_message will ask for a message record of n bytes, asked
 * now: 0 when it fits, after which the batch's segment is settled (an empty
 * batch has moved to the next segment if it had to) and an add of n bytes
 * lands in it — so a caller that writes the record's position in its segment
 * into the record (levels/msg.h's record form) asks this first, reads the
 * segment, encodes, then adds. REDO_BATCH_FULL and -1 as redo_add_message. */
int redo_message_room(redo_t *r, redo_batch_t *b, size_t n, char *err, size_t errlen);

/* Whether `bytes` more bytes of derived writes (a put is 9 + key + value
 * bytes, a delete 5 + key, a CQ write 29, a head move 13, a slot 41) fit the
 * batch's derived-writes record in its segment, keeping redo_add_message's
 * reserves: 0 when they fit (an empty batch moves to the next segment when
 * they do not fit in the rest of this one, as clog_batch_room does), after
 * which redo_commit will not refuse the batch for them (nor for each
 * message's CQ write and slot and REDO_BATCH_RESERVE more); REDO_BATCH_FULL when
 * the batch holds messages and they do not fit (commit it, then make the
 * writes in the next batch); -1 with err when they could not fit in any
 * segment. */
int redo_batch_room(redo_t *r, redo_batch_t *b, uint64_t bytes, char *err, size_t errlen);

/* The smallest segment size in which redo_batch_room(bytes) of an empty batch
 * returns 0 (in a segment of its own): the segment header, the derived-writes
 * record of `bytes` with the batch's reserves, and the commit record. */
uint64_t redo_batch_segment_bytes(uint64_t bytes);

/* Derived writes, in the order they are made at apply and redo time. */
void redo_cq_write(redo_batch_t *b, uint32_t queue, uint64_t index, const cq_entry_t *e);
void redo_cq_head(redo_batch_t *b, uint32_t queue, uint64_t head);
void redo_slot_write(redo_batch_t *b, uint64_t segment_base, uint64_t ordinal, const slot_t *s);
void redo_db_put(redo_batch_t *b, const void *key, size_t klen, const void *val, size_t vlen);
void redo_db_delete(redo_batch_t *b, const void *key, size_t klen);

/* Append the batch (its messages, its derived-writes record, its COMMIT) and
 * hold its derived writes; *end (may be NULL) gets the batch's end. An empty
 * batch writes nothing. -1 with err (the derived writes do not fit in the
 * rest of the segment: the caller cut the batch too late; or clog_append's
 * failure: after a write error the log is unusable, after clog_append's
 * refusal of a batch begun in a segment abandoned since, nothing was written
 * and the batch can be built again). */
int redo_commit(redo_t *r, redo_batch_t *b, uint64_t *end, char *err, size_t errlen);

/* redo_commit, then clog_sync and redo_apply_durable in one call, for a
 * caller that would sync and apply right after the commit anyway (a durable
 * commit): the batch never enters the overlay (no read can come between its
 * append and its apply: the owner thread is inside this call), which saves
 * the overlay's work. Every batch held before it is made too, in log order.
 * *end (may be NULL) gets the batch's end as soon as it is appended, also
 * when the sync or apply then fails. An empty batch appends nothing; the
 * sync and apply still run. Owner thread; the syncer may call clog_sync
 * meanwhile. 0; -1 with err: the append failed (redo_commit's failure,
 * nothing held); or the sync or an apply failed — the batch is then held
 * and in the overlay exactly as after redo_commit, so the caller goes on as
 * after any failed clog_sync or redo_apply_durable (redo_sync_failed carries
 * it; a power cut leaves the open to redo it when the log kept it). */
int redo_commit_applied(redo_t *r, redo_batch_t *b, uint64_t *end, char *err, size_t errlen);

/* Make the held derived writes of every batch below clog_durable, in order.
 * 0, or -1 with err (the held batch stays held). */
int redo_apply_durable(redo_t *r, char *err, size_t errlen);

/* The checkpoint (above) in one call on the owner thread: B = redo_applied;
 * redo_checkpoint_begin then redo_checkpoint_finish. 0, or -1 with err (B
 * not moved; refused while a begun checkpoint is not finished). */
int redo_checkpoint(redo_t *r, char *err, size_t errlen);

/* The checkpoint's first half, owner thread: fixes B = redo_applied (*b,
 * may be NULL), writes the CQ and slot files' buffers (pwrites into the page
 * cache, no sync) and hands the files written since the last checkpoint to
 * the finish as duplicate descriptors. Nothing waits for the disk. -1 with
 * err: a checkpoint begun and not finished yet (the error names its B; at
 * most one is open), or a buffer's write failed (nothing begun; the next
 * checkpoint syncs every file).
 *
 * Between begin and finish the owner may do everything it does otherwise —
 * add, commit, apply (redo_apply_durable), read the overlay, recycle
 * (clog_recycle keeps refusing every segment not wholly below the last
 * FINISHED checkpoint's B, so also those at or above the begun one's), even
 * advance a queue's head (a CQ file deleted meanwhile is synced through its
 * duplicate, harmlessly) — except begin another checkpoint (refused, above),
 * call redo_checkpoint (likewise), or call redo_close, redo_free or
 * redo_sync_failed while a finish may be running on another thread: those
 * three need the finish done or never started (redo_close and
 * redo_sync_failed finish a begun checkpoint themselves first; redo_free
 * drops it). Writes made after begin may or may not be made durable by the
 * finish; they are past B, so the next open redoes them either way. */
int redo_checkpoint_begin(redo_t *r, uint64_t *b, char *err, size_t errlen);

/* The checkpoint's second half: any one thread at a time (the owner's or
 * another, concurrently with the owner's calls allowed above): fdatasyncs
 * the files begin handed over, LevelDB's write-ahead logs and the directory;
 * then writes `M "checkpoint"` = B (and deletes `M "clean"`) by an unsynced
 * LevelDB write and syncs LevelDB's logs again; then, and only then, publishes
 * B (redo_checkpointed) and raises clog_keep_from to it (clog_keep_from is
 * safe from this thread: clog.h). 0; -1 with err naming the file or LevelDB
 * (B not moved, the checkpoint closed: begin again, and that one syncs every
 * file), or naming the missing begin. A cut anywhere before the mark's sync
 * leaves the open at the previous B. */
int redo_checkpoint_finish(redo_t *r, char *err, size_t errlen);

/* The checkpoint with its finish on a thread of the redo's own
 * (levels/clog_finisher.h, made at the first call), owner thread:
 * redo_checkpoint_begin here, redo_checkpoint_finish there. 0 once begun;
 * -1 with err when one is still being finished there (settle first), when
 * begin fails, or when the thread cannot be made (nothing begun). While it
 * runs the owner may do what it may between begin and finish (above);
 * redo_checkpoint, redo_close and redo_sync_failed wait for it first, and
 * redo_free waits for it and drops its outcome. */
int redo_checkpoint_async(redo_t *r, char *err, size_t errlen);

/* Owner thread: the outcome of redo_checkpoint_async's finish, taken once.
 * 1 when it finished since the last call: B published (redo_checkpointed),
 * and the CQ files wholly below the heads it covers deleted here; 0 when none
 * was started or it still runs (with wait: after waiting for it); -1 with err
 * when it failed (B not moved; the next checkpoint syncs every file) or a CQ
 * file's delete did. */
int redo_checkpoint_settle(redo_t *r, int wait, char *err, size_t errlen);

/* Owner thread: 1 while redo_checkpoint_async's finish runs or its outcome
 * waits for redo_checkpoint_settle. */
int redo_checkpoint_running(redo_t *r);

/* Owner thread: hook(arg) is called on the finisher's thread each time a
 * redo_checkpoint_async finish ends, its outcome waiting for
 * redo_checkpoint_settle — for an owner that sleeps when idle, to wake and
 * settle (levels/clog_finisher.h clog_finisher_on_done: it must not call
 * into the redo). NULL: none. */
void redo_on_checkpoint_finished(redo_t *r, void (*hook)(void *arg), void *arg);

/* What redo_sync_failed did. */
typedef struct redo_failure {
    uint64_t from, to; /* the abandoned range: the batches ending in (from, to] were covered by the failed
                          sync, and their callers get the error */
    uint64_t carried;  /* held batches whose derived writes were carried into the fresh segment */
    uint64_t end;      /* the log's end after the carry */
} redo_failure_t;

/* After clog_sync(redo_log(r)) failed (design §3 "fsyncgate"; owner thread,
 * the syncer stopped, no batch being built): the batches the last good sync
 * covered are applied; the segments holding the rest are abandoned
 * (clog_abandon); each held batch past them is carried — its derived-writes
 * record appended alone, as a batch of its own, in a fresh segment — and
 * that segment is synced; a checkpoint takes B = the abandoned range's end
 * (CQ and slot files, LevelDB's logs, then `M "checkpoint"` and
 * `M "applied"` = B by a synced write); then the carried writes are made.
 * From the checkpoint on, an open starts past the abandoned range and never
 * reads it; a cut before it finds the log ending at f->from with nothing of
 * the carried batches made. The carried batches are kept (their derived
 * writes: the messages in the abandoned range may be lost). 0 with *f; -1
 * with err when a step fails (the fresh segment's sync too: the log is
 * unusable, close it with redo_close's failure expected). */
int redo_sync_failed(redo_t *r, redo_failure_t *f, char *err, size_t errlen);

void redo_batch_free(redo_batch_t *b);

#endif
