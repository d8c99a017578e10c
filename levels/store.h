/*
 * levels/store.h — the level engine's storage: one LevelDB per data directory.
 *
 * Every queue is a key range (DESIGN §2); every move between queues is one
 * LevelDB WriteBatch that also carries the counters it changes, so at any crash
 * point each message is in exactly one place and the counters equal the
 * contents. Reopening needs no scan: counters and group records are read, queue
 * heads are found with one seek each.
 *
 * Threading: a store_t is used by one thread at a time (the broker's storage
 * thread). Nothing here locks.
 *
 * Writes are grouped. Every operation adds its writes to the store's pending
 * batch and returns; store_commit() writes the batch (synced when the store was
 * opened with sync = 1). Operations that read queues (everything but
 * store_send and group creation) first commit whatever is pending (unsynced:
 * the caller's own commit decides durability), so a read never misses a write
 * that came before it. When a commit fails the store is
 * broken: every later operation fails with the original error and the caller
 * must close and reopen it (the in-memory state is rebuilt from disk; nothing
 * acknowledged is lost, since nothing is acknowledged before its commit). So
 * is it when an operation that says so fails half-way (store_move_due,
 * store_revoke_*: damage or a read error met after it took a message): what
 * it added to the pending batch is half of it and is never written.
 *
 * The storage layout (key ranges, values, invariants) is described in
 * levels/keys.h; the package's files are listed in levels/store_internal.h.
 *
 * Errors: 0 / -1, with the cause in err[errlen] (err may be NULL when errlen is 0).
 * Times are wall-clock milliseconds, always passed in (the clock is injected).
 */
#ifndef HG_LEVELS_STORE_H
#define HG_LEVELS_STORE_H

#include <limits.h>
#include <stddef.h>
#include <stdint.h>

#include "levels/msg.h"
#include "levels/table.h"

/* The format this build writes, and the oldest it opens (upgrading the
 * directory at open: an older build then refuses it). 2: a lease index value
 * may hold the topic-log seq (keys.h 'J'), which version 1's readers take for
 * corruption. 3: no lease index; a lease's copy index entry ('Y') holds its
 * deadline and topic-log seq, and 'J' is folded into it at open. 4: a message
 * that entered its topic's log under its level entry's seq keeps an 'X' that
 * names the level entry (keys.h), which version 3's readers take for
 * corruption; version 3's records are version 4's as they are, so the
 * upgrade writes the marker only and a check reads version 3 without it. 5:
 * each (topic, key) of the key index has a count record (keys.h 'K'),
 * which version 4's writers would not keep; the upgrade writes the marker,
 * then the counts (one walk of 'K', marked by 'M' "keycounts"), and a check
 * reads versions 3 and 4 without them. 6: a SEND journey on a level served
 * from its consume queue has no `L` entry and no 'X' record until it
 * arrives: its CQ entry and where-slot in the commit log's files are its only
 * record (design-commitlog.md 4a.5), which version 5's readers would lose; a
 * level of version 5 that holds journeys in `L` is walked by `L` until it
 * empties (found at every open), so the upgrade writes the marker only and a
 * check reads version 5 as it is. 7: a message that arrives at its topic
 * from the commit log has no 'T' entry and no 'X' record: its topic CQ entry
 * and where-slot are its record, its topic-log seq STORE_TOPIC_CQ_SEQ | its
 * index, and a topic record ('P') is 56 bytes (design-commitlog.md 4b), which
 * version 6's readers would lose or refuse; a version-6 topic's 'T' entries
 * are walked before its CQ until its GC empties them, so the upgrade writes
 * the marker only and a check reads version 6 as it is. 8: a topic made now
 * gets a CQ numbered from CQ_GROWING_QUEUE_FIRST, whose files grow from 2^12
 * to 2^18 entries (levels/cq.h), which version 7's readers would look for
 * in files of 2^12 entries and find missing or short; a version-7 topic keeps
 * its number and its files of 2^12 entries (the layout is a function of the
 * queue number), so the upgrade writes the marker only and a check reads
 * version 7 as it is. */
#define STORE_FORMAT_VERSION          8
#define STORE_FORMAT_OLDEST           1
#define STORE_FORMAT_SAME_RECORDS     3 /* the oldest format whose records this build reads unchanged */
#define STORE_FORMAT_GROWING_CQ       8 /* the first format whose new topics get growing CQ files (levels/cq.h) */
#define STORE_DEFAULT_RETENTION_MS    (UINT64_C(72) * 3600 * 1000)
#define STORE_CHECKPOINT_BYTES        (UINT64_C(64) << 20)  /* default store_options_t.checkpoint_bytes */
#define STORE_CHECKPOINT_MIN_BYTES    (UINT64_C(1) << 20)   /* the least store_options_t.checkpoint_bytes */
#define STORE_HELD_MAX_BYTES          (UINT64_C(16) << 20)  /* log appended unsynced before a commit syncs it */
#define STORE_DEFAULT_SEGMENT_BYTES   (UINT64_C(128) << 20) /* commit-log segments (design-commitlog.md §2) */
#define STORE_DEFAULT_MAX_DELAY_MS    (UINT64_C(3) * 86400 * 1000)
#define STORE_DEFAULT_MAX_RECONSUME   16
#define STORE_MAX_MAX_RECONSUME       1000
#define STORE_DEFAULT_MAX_LEASE_BYTES (UINT64_C(16) << 20)

/* The most a batch holds before its owner commits it and starts the next one
 * (store_pending_bytes): the broker's storage thread commits a turn's jobs in
 * batches of about this much, and the scheduler's due moves and lease expiries
 * and DLQ REQUEUE/DROP ALL stop (or commit) there. A batch exceeds it by at
 * most one operation's writes (one message of at most max-payload and its
 * records). 4 MiB: well past the size where grouping stops paying — 4096
 * SENDs of 1 KiB, and LevelDB itself groups concurrent writers only up to
 * 1 MiB; what it bounds is the copy of a burst the store holds at once (1 024
 * pipelined SENDs of 4 MiB would otherwise be one 4 GiB batch). */
#define STORE_BATCH_MAX_BYTES (UINT64_C(4) << 20)

typedef struct store store_t;

typedef struct store_options {
    const char *path;          /* the data directory (created if missing when create_if_missing) */
    lvl_table_t levels;        /* must equal the table the directory was created with */
    int create_if_missing;     /* 1: create a new data directory */
    int no_upgrade;            /* 1 (a check): never mark an older format as this build's; refuse one older
                                  than STORE_FORMAT_SAME_RECORDS, read the others as they are */
    int sync;                  /* 1: fsync every commit (default); 0: write only */
    uint64_t retention_ms;     /* how long a topic with no group keeps due messages */
    uint64_t max_delay_ms;     /* longest DELAY accepted */
    uint32_t max_payload;      /* largest payload accepted, <= MSG_HARD_MAX_PAYLOAD */
    uint32_t max_reconsume;    /* default for groups created without MAXRETRY */
    uint64_t max_lease_bytes;  /* store_lease and store_dlq_list stop once their messages reach this (msg_budget_t) */
    size_t cache_bytes;        /* LevelDB block cache */
    size_t write_buffer_bytes; /* LevelDB memtable size */
    int max_open_files;        /* LevelDB table cache */
    uint64_t max_topics;       /* a SEND, PULL or GROUP CREATE naming a new topic beyond this many fails; 0: no limit */
    uint64_t max_groups;       /* a PULL or GROUP CREATE naming a new group beyond this many fails; 0: no limit. Like
                                  max_topics it is checked only when a group is created: a directory holding more
                                  groups than it opens, and serves them */
    /* A lease taken from a topic log is held in memory this long before it
     * is written (0: written at once); an ACK within it writes nothing. The
     * group's persisted cursor stays at its oldest lease not written, so a
     * crash delivers those messages again at once; an ACK is as durable as
     * ever (lease_pend.c). */
    uint64_t lease_write_delay_ms;
    /* The commit log's segment size (docs/design-commitlog.md §2): a multiple of 4096 in
     * [CLOG_SEGMENT_MIN, CLOG_SEGMENT_MAX], for a log that has no segment yet; a directory whose log has
     * segments keeps their size (store_open takes it from them). */
    uint64_t segment_bytes;
    /* A level whose due move failed at its head, or a group's queue whose
     * PULL did, is skipped this long (the store's clock) after it last
     * failed, then tried again: STORE_MIN_DAMAGE_RETRY_MS ..
     * STORE_MAX_DAMAGE_RETRY_MS (store_open refuses others). */
    uint64_t damage_retry_ms;
    /* Log applied to LevelDB between two checkpoints (and a second at most), in [STORE_CHECKPOINT_MIN_BYTES,
     * STORE_CHECKPOINT_BYTES]; 0 is STORE_CHECKPOINT_BYTES. What an open redoes after a crash or a broken store is the log since the last
     * checkpoint, so this (plus the one apply that crossed it) bounds the room such an open needs — the broker
     * keeps it within its disk reserve (docs/operations.md, "Disk full runbook"). */
    uint64_t checkpoint_bytes;
    /* The entries the remainder lane (design-commitlog.md §4) may hold, 1 .. STORE_LANE_MAX_ENTRIES; 0 is
     * STORE_LANE_MAX_ENTRIES. A SEND whose first hop would wait a remainder on a full lane is refused ("the
     * remainder lane holds N entries, its limit ..."), nothing written; a due move whose next hop would puts the
     * message back on its level for another of the level's delay instead (late, never lost; the level's head is
     * not held back, so the remainders behind it keep leaving the lane). Set below the default by tests only. */
    uint64_t lane_max_entries;
    /* 1: a checkpoint's syncs (an fdatasync of every CQ and slot file written since the last, LevelDB's logs,
     * the directory, the mark) run on a thread of the commit log's own (levels/clog_redo.h
     * redo_checkpoint_async) while the owner goes on; the owner takes the outcome and recycles the segments
     * below it at its next apply or store_log_checkpoint_step. 0: on the owner, inside the apply that made it
     * due. The broker sets 1. */
    int checkpoint_on_thread;
} store_options_t;

/* What the remainder lane holds at most (24 bytes an entry in memory: far
 * past the ~440 000 remainders of the smallest level's delay at the target
 * rate). */
#define STORE_LANE_MAX_ENTRIES (UINT64_C(1) << 26)

/* damage_retry_ms: the default, and the bounds store_open accepts (not 0:
 * a damaged head read again at every call is what the skip exists to stop;
 * at most an hour: a repaired queue waits no longer than that to be served). */
#define STORE_DEFAULT_DAMAGE_RETRY_MS 60000
#define STORE_MIN_DAMAGE_RETRY_MS     100
#define STORE_MAX_DAMAGE_RETRY_MS     3600000

/* Defaults: RocketMQ levels, sync on, retention 72h, max-delay 3d, 4 MiB
 * payloads, max-reconsume 16, 16 MiB of payload per lease call, no topic or group limit, 8 MiB cache,
 * 64 MiB write buffer (the broker's write-buffer-size), 500 files, 128 MiB log segments, damaged heads
 * retried every 60 s, a checkpoint every 64 MiB of log. */
void store_options_default(store_options_t *o);

/* Whether bytes is a segment size the commit log can use (a multiple of 4096 in
 * [CLOG_SEGMENT_MIN, CLOG_SEGMENT_MAX]): 0, or -1 with err saying why
 * ("commit-log segment size N bytes is not a multiple of 4096 between MIN and MAX").
 * store_open checks store_options_t.segment_bytes with it; the broker checks its
 * commitlog-segment-size row with it before any store is opened. */
int store_check_segment_bytes(uint64_t bytes, char *err, size_t errlen);

/* Whether segments of segment_bytes take a SEND of a max_payload-byte payload
 * (with the longest topic and key): a message asks for room for its record,
 * its derived writes (until reads come from the log, its level entry holds the
 * message again) and the rest of a batch of STORE_BATCH_MAX_BYTES, at most a
 * quarter segment: about 2 * max_payload + min(4 MiB + 64 KiB, segment / 4) +
 * 6 KiB. 0, or -1 with err naming both sizes and the segment size to set (the
 * broker's configuration check: commitlog-segment-size against max-payload). */
int store_check_payload_room(uint64_t segment_bytes, uint32_t max_payload, char *err, size_t errlen);

/* The sequence counter (keys.h 'M' "seq": ids, queue positions, group
 * generations) is raised at every open to the wall clock's floor,
 * now_ms << STORE_SEQ_CLOCK_BITS, and never lowered. A directory carries its
 * counter in its files, so one put back from a copy (BACKUP, tar, a file-system
 * snapshot), or one whose log lost its last unsynced commits in a power cut,
 * comes back with a counter below numbers already handed out. The floor
 * starts above all of them, with no need to know that anything was restored,
 * as long as
 *  (1) the counter never runs ahead of the clock: on average since each open,
 *      fewer than 2^20 numbers per millisecond (10^9 a second; a message takes
 *      one for its id and one for each queue it enters: a level per hop, the
 *      topic log, a retry's level and retry-ready queue), and
 *  (2) the clock at this open reads later than it did when any of those
 *      numbers was taken (after the copy, by the broker it was taken from):
 *      a clock set back by more than the time since then can repeat ids.
 * A clock set back only stops raising the counter. 2^20 per ms fits 64 bits
 * until the year 2527 (STORE_SEQ_CLOCK_MAX_MS) and keeps ids below 2^63 (for
 * a client that holds them as signed 64-bit numbers) until 2248. */
#define STORE_SEQ_CLOCK_BITS   20
#define STORE_SEQ_CLOCK_MAX_MS (UINT64_MAX >> STORE_SEQ_CLOCK_BITS)

/* The counter's floor at wall-clock time now_ms: now_ms << STORE_SEQ_CLOCK_BITS
 * (pure, any thread); now_ms must be at most STORE_SEQ_CLOCK_MAX_MS. */
uint64_t store_seq_floor(uint64_t now_ms);

/* Open (or create) a data directory at wall-clock time now_ms, which raises
 * the sequence counter to store_seq_floor(now_ms) when it is below (written
 * with the next commit). Refuses, naming the path and the problem: a
 * directory that is not a Hourglass data directory (foreign files, a LevelDB
 * without our format marker), a format version it does not read (a newer
 * one; an older one it reads is upgraded: keys.h), a level table that
 * differs from o->levels (naming the first difference), a directory locked by
 * another open store (in this or another process), corruption reported by
 * LevelDB, and a now_ms past STORE_SEQ_CLOCK_MAX_MS (a clock no id can be
 * drawn from; nothing is opened). Nothing is ever repaired or truncated but
 * a torn write at the end of the newest write-ahead log, which a power cut
 * leaves in the middle of a write that was never fsynced (levels/logtail.h):
 * it is cut off, its bytes kept beside the log, and store_open_note says so;
 * damage with whole records after it is refused as damage. A directory
 * holding STORE_COPY_WHOLE (a whole BACKUP copy) is first checked: a file
 * its list names missing or not of the listed size, a file it does not
 * name, a garbled marker, or a torn or damaged log end (which a whole copy
 * never has) is STORE_OPEN_DAMAGED, nothing written, err naming the damage
 * and the two ways on (restore another copy, or delete STORE_COPY_WHOLE to
 * accept the loss); a whole one loses that file, fsynced, before LevelDB
 * opens it: from then on it is a live data directory.
 * Returns 0; STORE_OPEN_DAMAGED when the data itself is damaged (a checksum
 * LevelDB or a record decoder refused, a file the manifest lists missing or
 * truncated, LevelDB files without CURRENT): what only a backup restores;
 * STORE_OPEN_IN_USE when another store (a running broker) holds the
 * directory's LOCK; -1 for every other refusal (the directory cannot be used
 * as it stands: missing, not accessible, read-only, not ours). */
#define STORE_OPEN_DAMAGED (-2)
#define STORE_OPEN_IN_USE  (-3)
int store_open(const store_options_t *o, uint64_t now_ms, store_t **out, char *err, size_t errlen);

/* 1 when another process holds the LevelDB lock of the data directory at
 * path (a broker runs on it), 0 otherwise (also when it has no LOCK file or
 * it cannot be read). A test only: it takes no lock, so a process may take it
 * right after. For what must not touch a directory another broker runs on
 * before store_open can say so (the broker's disk reserve). Any thread. */
int store_dir_in_use(const char *path);

/* What store_open repaired on its way, for the owner to log ("" when
 * nothing): today only a torn write cut off the end of the write-ahead log.
 * Valid while the store is open. */
const char *store_open_note(const store_t *s);

/* What store_open did to an existing directory that its owner should log
 * at info ("" when nothing), so that an operator sees a restore or an
 * upgrade happen: a whole BACKUP copy checked and opened (its
 * STORE_COPY_WHOLE removed: a live data directory from now on), an older
 * format upgraded (the build that wrote it refuses it from now on). Valid
 * while the store is open. */
const char *store_open_info(const store_t *s);

/* 1 when store_open made a new, empty store (the directory was missing,
 * empty, or held only what an interrupted creation leaves), 0 when it opened
 * an existing one. */
int store_created(const store_t *s);

/* Commit what is pending and close. Returns the commit's result; the store is
 * freed either way. NULL is a no-op. After a failed fdatasync of the commit
 * log (store_log_sync, or the owner's own sync: a read barrier's, a synced
 * commit's) it closes as store_close_unsynced does, whether the store is
 * broken by it or not (a broken one's pending batch is lost, -1 reports the
 * break): the log is never synced again past that failure. */
int store_close(store_t *s, char *err, size_t errlen);

/* store_close after an fdatasync of the commit log failed (store_log_sync,
 * the broker's syncer): a retried sync would report success over pages the
 * kernel may have dropped (fsyncgate), so the segments written past the last
 * good sync are abandoned — never synced, appended to or read again — and the
 * batches they hold are carried into a fresh, synced segment before their
 * LevelDB writes are made (design-commitlog.md §3, "A failed fdatasync of the
 * log"); then the close of store_close. The messages of the abandoned batches
 * may be lost (their SENDs were answered with the error), their derived writes
 * are kept. Returns the first failure; the store is freed either way. */
int store_close_unsynced(store_t *s, char *err, size_t errlen);

/* Write the pending batch (synced when the store syncs). A no-op when nothing is
 * pending and nothing written earlier awaits its sync. On failure the store is
 * broken (see above). Same as store_commit_durable(s, 1, …). */
int store_commit(store_t *s, char *err, size_t errlen);

/* durable = 0: write the pending batch without fsync even in a syncing store —
 * for writes whose loss in a power cut only repeats work (leases, ACKs, due
 * moves: delivery is at least once). durable = 1: fsync, which also makes every
 * earlier unsynced write durable (LevelDB's log is one file). The implicit
 * commit before a read is an unsynced one. */
int store_commit_durable(store_t *s, int durable, char *err, size_t errlen);

/* Make every batch committed so far durable: the commit log's fdatasync
 * (design-commitlog.md §3). The one store call allowed on a thread other
 * than the owner's, at the same time as the owner's calls (the broker's
 * syncer, broker/syncer.h); the store must stay open meanwhile. After it, the
 * owner's store_apply_durable writes those batches to LevelDB. 0, or -1 with
 * err naming the segment and errno the failed fdatasync's (ENOSPC, EDQUOT,
 * EFBIG: a full disk, store_failure_errno_full; the store must then be
 * closed with store_close_unsynced). The failure sticks: every later sync of
 * the log, this call's or the owner's, fails with it and calls no fdatasync
 * until the close abandons the segments (levels/clog.h clog_sync). */
int store_log_sync(store_t *s, char *err, size_t errlen);

/* The commit log's next spare segment, pre-written by its pre-writer thread
 * (levels/clog.h clog_prepare_step: asked for when no spare waits, its 1 MiB
 * chunks `pace_ms` apart, taken once whole), so that a segment switch takes a
 * spare instead of writing and syncing a whole segment inside a commit. For
 * an owner that calls it between its commits (the broker's storage thread,
 * after each iteration's replies); a store without a log does nothing. 1 when
 * a spare was finished, 0 when there was nothing to take, -1 with err when
 * the pre-write failed: the store is unchanged and usable (the file removed;
 * the next switch pre-writes as before). Owner thread. */
int store_log_prepare_step(store_t *s, unsigned pace_ms, char *err, size_t errlen);
/* The pace that holds the pre-writer (levels/clog.h CLOG_PREPARE_HOLD: no
 * spare begun, none written on; a finished one is still taken). */
#define STORE_PREPARE_HOLD UINT_MAX

/* A checkpoint finished on the commit log's thread (checkpoint_on_thread):
 * its outcome taken, and what follows it made — the segments wholly below it
 * recycled, their where-slot files deleted, a long LevelDB log written out.
 * For an owner that calls it between its commits, also when idle (a busy
 * store's next apply does the same). 0 (also while it runs, and for a store
 * without a log or a broken one), or -1 with err: the checkpoint failed and
 * the store is broken (reopen it, as after a failed commit). Owner thread. */
int store_log_checkpoint_step(store_t *s, char *err, size_t errlen);

/* hook(arg) is called on the commit log's checkpoint thread each time a
 * checkpoint finishes there (checkpoint_on_thread), its outcome waiting for
 * store_log_checkpoint_step: an owner that sleeps when idle wakes on it
 * instead of polling. It runs on that thread: it may only tell the owner
 * (set a flag, signal a condition), never call the store. NULL: none. A
 * store without a log ignores it. Owner thread. */
void store_log_on_checkpoint_finished(store_t *s, void (*hook)(void *arg), void *arg);

/* Bytes of commit log applied since the last finished checkpoint: what an
 * open after a crash would redo (and write into LevelDB again), the room the
 * disk reserve is sized for — about checkpoint_bytes at most (store_options_t).
 * 0 for a store without a log. Owner thread. */
uint64_t store_log_since_checkpoint(const store_t *s);

/* 1 while a checkpoint runs on the commit log's thread or its outcome waits
 * for store_log_checkpoint_step (the owner looks again soon). Owner thread. */
int store_log_checkpoint_running(const store_t *s);

/* Bytes the commit log's pre-writer still has to write before a spare
 * segment waits (clog_prepare_left): 0 when it has nothing to do, and for a store
 * without a log or a broken one. Owner thread. */
uint64_t store_log_prepare_left(const store_t *s);

/* The commit log's read-backs of its next spare into the page cache
 * (levels/clog.h clog_read_back_counts): read-backs run through, bytes read,
 * read-backs that failed. All 0 for a store without a log. Owner thread. */
void store_log_read_back_counts(const store_t *s, uint64_t *spares, uint64_t *bytes, uint64_t *failures);

/* The commit log's spare segments (clog_spare_count): pre-written or
 * recycled files waiting for a segment switch, which takes one instead of
 * writing a new segment's zeros. 0 for a store without a log. Owner thread. */
uint64_t store_log_spare_segments(const store_t *s);

/* Bytes left in the commit log's segment that its end lies in (a caller
 * paces store_log_prepare_step by it); UINT64_MAX for a store without a log. */
uint64_t store_log_segment_room(const store_t *s);

/* How many times since open a read waited for the commit log: synced it and
 * wrote every held batch to LevelDB before a range walk (the read barrier,
 * docs/design-commitlog.md §3 rule 2). A lease walk of a topic's log and the
 * topic-log GC do not wait; the `I` expiry scan, a DLQ list, GROUP DEL's
 * steps, retries and the check do. */
uint64_t store_read_barriers(const store_t *s);

/* Owner thread: write to LevelDB (unsynced) the commits the log's last sync
 * covered, and take a checkpoint when one is due (64 MiB of log or a second).
 * Cheap when there is nothing to do. 0, or -1 with err: the store is broken. */
int store_apply_durable(store_t *s, char *err, size_t errlen);

/* Operations waiting in the pending batch. */
int store_pending(const store_t *s);

/* About how many bytes the pending batch holds (keys, values, framing; the
 * dirty records a commit adds are not counted). Compared with
 * STORE_BATCH_MAX_BYTES by the batch's owner. */
uint64_t store_pending_bytes(const store_t *s);

/* The next message id: every message id assigned by an operation so far is
 * below it (and, once nothing is pending, in the commit log). Ids are log
 * offsets, so this is the log's end (the pending batch's when it holds
 * messages), at least the floor the open raised the log to (store_open). It
 * only grows while the store is open. A syncing thread beside the store's
 * (broker/syncer.h) uses it as its durability mark: a message whose id is
 * below a mark taken after its commit is durable once the log's sync that
 * began after the mark succeeded. */
uint64_t store_next_seq(const store_t *s);

/* 1 when a commit failed (or an operation half-way, or store_break was
 * called) and the store must be reopened. */
int store_broken(const store_t *s);

/* When the store broke because the commit log refused a write (the batch's
 * append, or the segment a SEND's record needs, could not be made) and a
 * system call failed there: its errno — ENOSPC, EDQUOT, EFBIG on a full
 * disk, a quota or a file-size limit — so the caller tells a full disk by
 * its number; else 0 (not broken, broken otherwise, or LevelDB's failure,
 * whose C API reports a message only). */
int store_log_write_errno(const store_t *s);

/* Does LevelDB still accept writes? It keeps the error of a background write
 * (a memtable flush or a compaction) that failed, on a full disk for one, and
 * refuses every later write with it for as long as it is open, though nothing
 * of ours failed. An empty write asks it (pending operations are committed,
 * unsynced). 0, or -1 with LevelDB's error: the store is then broken and must
 * be reopened. */
int store_check_writable(store_t *s, char *err, size_t errlen);

/* Break the store as a failed commit does, for an owner whose pending writes
 * must not be written (a run of SENDs one of which failed after its check
 * passed, store_send_check): the pending batch is never written, every later
 * operation fails naming why, and the store must be reopened (the in-memory
 * state is rebuilt from disk). A store already broken keeps its first cause. */
void store_break(store_t *s, const char *why);

/* ---- Storage failures (store_failure.c) ---------------------------------------------
 *
 * A full disk is told from other failures where the failure's whole evidence
 * is at hand — LevelDB's error string as it is received, an errno as a system
 * call set it — and kept as a fact, because the texts built from it (which
 * name the data directory, up to 4 KiB long, before the cause) may be cut by
 * the buffers they pass through. The broker's writer asks the fact
 * (store_last_failure_full) to release its disk reserve and refuse writes
 * until space returns (broker/diskguard.h). A later source of write failures
 * (a commit log reporting an errno) feeds the same fact through
 * store_failure_errno_full. */

/* 1 when the failure that broke s (its first: store_broken) was the disk's,
 * or a file size or quota limit's: ENOSPC, EFBIG, EDQUOT, however long the
 * data directory's path. 0 when s is not broken or broke for another reason. */
int store_last_failure_full(const store_t *s);

/* 1 when errno value e means no room: ENOSPC, EFBIG, EDQUOT. */
int store_failure_errno_full(int e);

/* 1 when an error text holds the wording of ENOSPC, EFBIG or EDQUOT (as
 * LevelDB words them: strerror). Reliable on a whole text only: for one that
 * a buffer may have cut, ask store_last_failure_full. */
int store_failure_text_full(const char *text);

/* The longest path a store's error text shows whole; a longer one is shown
 * as its first and last (STORE_PATH_SHOWN_MAX - 3) / 2 bytes around "...". */
#define STORE_PATH_SHOWN_MAX 96

/* path as error texts show it (see STORE_PATH_SHOWN_MAX; blanks and quotes
 * of a shortened one become '_', so it stays one word), into buf[len];
 * returns buf. */
const char *store_path_shown(const char *path, char *buf, size_t len);

/* text (LevelDB's error, say) into out[outlen] with every occurrence of path
 * shown as store_path_shown shows it: the cause after a long directory
 * survives a small buffer. */
void store_failure_text(const char *text, const char *path, char *out, size_t outlen);

/* The topics that may have gained messages ready for a group since the last
 * call — an append, a retry made ready (due, NACK, DLQ REQUEUE), a group
 * created or deleted — each passed once to fn; the set is then empty. What a
 * blocked PULL waits for (the broker's
 * storage thread wakes only the PULLs of these topics). fn may run store
 * operations; what they mark is kept for the next call. */
void store_take_woken(store_t *s, void (*fn)(void *ctx, const char *topic, size_t topic_len), void *ctx);

const lvl_table_t *store_levels(const store_t *s);
const store_options_t *store_options(const store_t *s);

/* ---- producing ---------------------------------------------------------- */

typedef struct store_send_req {
    const char *topic;
    size_t topic_len;
    const char *key;
    size_t key_len; /* may be empty */
    const char *payload;
    size_t payload_len; /* may be empty */
    int level;          /* > 0: exactly this level (LEVEL n); 0: use delay_ms */
    uint64_t delay_ms;  /* with level 0: chained over levels (DELAY d); 0 = ready now */
} store_send_req_t;

/* The checks store_send makes, as a pure function of the options (no store
 * needed, any thread): topic name, key and payload sizes, the level range,
 * and for a delay its chain plan against max-delay. 0, or -1 with the one
 * wording of each problem in err ("payload is 5000000 bytes, larger than
 * max-payload 4194304", "delay 4d exceeds max-delay 3d"). The broker runs it
 * while parsing SEND, so a bad request is refused before it is queued;
 * store_send runs it again. */
int store_send_validate(const store_options_t *o, const store_send_req_t *req, char *err, size_t errlen);

/* Accept a message: into the first hop's level queue, or straight into the topic
 * log when there is no delay. Enqueue time within a level is monotone:
 * max(now, last enqueue on that level), so a clock step back never reorders a
 * level. *id_out gets the new id — the offset of the message's record in the
 * commit log (design-commitlog.md §2): ids grow but are not dense — *due_out
 * the due time asked for: now + delay_ms to the millisecond (the chain's last
 * hop waits only the remainder no level matches), or now + level n's delay
 * for LEVEL n. No read: many sends join one batch, but a batch whose log
 * segment has no room left for the message (and the rest of a batch of
 * STORE_BATCH_MAX_BYTES) is committed first, unsynced. Fails (nothing
 * written) on a bad topic name, a key or payload over its limit, a level
 * outside 1..count, or a delay over max-delay. */
int store_send(store_t *s, const store_send_req_t *req, uint64_t now_ms, uint64_t *id_out, uint64_t *due_out, char *err,
               size_t errlen);

/* ---- the level queues ---------------------------------------------------- */

/* Earliest due time over all level heads; UINT64_MAX when every level is empty. */
uint64_t store_next_due(const store_t *s);

/* Move up to max due level heads (due_ms <= now): to the next hop of a chain,
 * to the topic log, or to a group's retry-ready queue (a retry whose group was
 * deleted is dropped). Each level is served in due order. A chain whose next
 * hops are already due too (after a clock jump or downtime) goes straight
 * through them, so catching up costs no extra writes. Stops early, with due
 * heads left, once the pending batch holds STORE_BATCH_MAX_BYTES (it starts
 * with a commit of what was pending, so at least one head moves). *moved gets
 * the number moved, *ready_out (may be NULL) how many became ready for
 * consumers. A level whose due move fails at its head before it takes
 * anything (a read error, damage: a level key or message that does not
 * decode) is marked damaged and skipped, and the other levels keep moving,
 * no longer bounded by its head: it is tried again opt.damage_retry_ms
 * later (store_next_due says when), and store_level_info names it and why
 * (store_level_damage_events counts such findings). A damaged message met
 * behind heads the call moved ends that level's turn there (its head is then
 * the damaged message). -1 (the store is broken, naming "due move failed
 * half-way" and the cause, and must be reopened) when it fails after it took
 * a message of that turn in a way it cannot stop at cleanly: a level key
 * that does not parse behind a head it moved, or a failed index update; a
 * commit would write the heads taken with the level's head not moved past
 * them. */
int store_move_due(store_t *s, uint64_t now_ms, int max, int *moved, int *ready_out, char *err, size_t errlen);

typedef struct store_level_info {
    int level;
    uint64_t delay_ms;
    uint64_t depth;       /* messages waiting on this level */
    uint64_t head_due_ms; /* 0 when empty */
    int damaged;          /* 1: its due move fails at its head and is skipped (damage names why) */
    const char *damage;   /* "" unless damaged; valid until the next store call */
} store_level_info_t;

/* Info on level 1..count; -1 for a bad level. */
int store_level_info(const store_t *s, int level, store_level_info_t *out);

/* How many times a level was found damaged by store_move_due since open (a
 * level that recovers and fails again counts again): the owner compares it
 * with what it saw last to report a damaged level once (store_level_info). */
uint64_t store_level_damage_events(const store_t *s);

/* How many due hops since open found the remainder lane full and were put
 * back on their level for another of its delay (store_options_t's
 * lane_max_entries): each such message arrives that much late. */
uint64_t store_lane_full_hops(const store_t *s);

/* ---- groups and leases -------------------------------------------------- */

typedef struct store_group_info {
    char topic[MSG_MAX_NAME + 1];
    uint64_t ready;         /* deliverable now: topic log past the cursor + retry-ready */
    uint64_t backlog;       /* topic log messages past the cursor */
    uint64_t retry_ready;   /* retries due and waiting */
    uint64_t retry_delayed; /* retries waiting on a level */
    uint64_t inflight;      /* leased */
    uint64_t dlq;           /* parked in the DLQ */
    uint32_t max_reconsume;
    uint64_t created_ms;
} store_group_info_t;

/* Create group bound to topic. from_first: start at the oldest retained message;
 * otherwise only messages that arrive later. max_reconsume < 0: the store's
 * default. Fails when the group exists (naming its topic), a name is bad, or
 * a new topic or group would pass max_topics or max_groups (naming it and the limit). */
int store_group_create(store_t *s, const char *group, size_t group_len, const char *topic, size_t topic_len,
                       int from_first, int max_reconsume, uint64_t now_ms, char *err, size_t errlen);

/* 1 and fill *out when the group exists, 0 when not. */
int store_group_info(const store_t *s, const char *group, size_t group_len, store_group_info_t *out);

/* 1 when the group exists, 0 when not: store_group_info without the copy
 * (a PULL asks it each time, to audit a group the lease creates). */
int store_group_exists(const store_t *s, const char *group, size_t group_len);

/* Call fn for every group (order unspecified); stops early when fn returns nonzero. */
void store_group_foreach(const store_t *s, int (*fn)(void *ctx, const char *group, const store_group_info_t *info),
                         void *ctx);

/* A group with its info: a row of store_group_page and store_topic_group_rows. */
typedef struct store_group_row {
    char name[MSG_MAX_NAME + 1];
    store_group_info_t info;
} store_group_row_t;

/* A page of groups in name order: those named after `after` (NULL or "":
 * from the first), at most count of them (0: every one): *rows (free it;
 * NULL when none) and *n. Picks them without sorting every group
 * (O(groups · log count)): GROUP LIST COUNT 10 and INFO's capped group lines
 * at 10 000 groups. */
void store_group_page(const store_t *s, const char *after, size_t count, store_group_row_t **rows, size_t *n);

/* How many times store_lease found one of a group's queues damaged at its
 * head since open (a retry that fails again is not counted again; a queue
 * that passed and fails later is): the owner compares it with what it saw
 * last to report each finding once. */
uint64_t store_group_damage_events(const store_t *s);

/* The latest of those findings: "group G: its retry queue (or: its topic
 * log T) fails at seq N, so its entries from there wait (...): why", N the
 * seq of the entry whose read failed ("at its head" when none did: a key
 * that does not parse, the iterator's own error; the topic log's names its
 * cursor then); "" when none since open. Valid until the next store call. */
const char *store_group_damage_last(const store_t *s);

/* How many queues of groups (a retry-ready queue, a topic log at a group's
 * cursor) are damaged now: skipped by the group's PULLs. A deleted group's
 * are not counted. */
uint64_t store_group_queues_damaged(const store_t *s);

/* How many times a damaged group queue passed again since open (a PULL
 * read it whole up to its count, or up to damage behind a head it took):
 * no longer skipped. The owner compares it with what it saw last to report
 * each recovery once. */
uint64_t store_group_recoveries(const store_t *s);

/* The latest of those recoveries: "group G: its retry queue is served
 * again" or "group G: its topic log T is served again"; "" when none since
 * open. Valid until the next store call. */
const char *store_group_recovery_last(const store_t *s);

/* The store's-clock time at which the earliest skip of a damaged group
 * queue ends that store_group_damage_wake has not passed on yet; UINT64_MAX
 * when none. The owner wakes at that time and calls store_group_damage_wake. */
uint64_t store_group_damage_next_end(const store_t *s);

/* The skips of damaged group queues that ended by now_ms (the store's
 * clock): each such group's topic is marked woken (store_take_woken) once,
 * so that PULLs parked on it try the queue again; a queue that fails again
 * is skipped anew and its end passed on again. Nothing is read or written. */
void store_group_damage_wake(store_t *s, uint64_t now_ms);

/* Delete a group with its retry-ready queue, leases and DLQ (its delayed retries
 * are dropped when they come due). *found gets 1 when it existed. The group
 * is gone at once for every command, and its record says so with the next
 * commit; its entries are deleted afterwards by store_collect and
 * store_maintain, a bounded step at a time (levels/group_delete.c), also
 * after a restart. Creating a group of the same name meanwhile deletes the
 * rest first. */
int store_group_delete(store_t *s, const char *group, size_t group_len, int *found, char *err, size_t errlen);

/* The groups GROUP DEL took away whose entries are not all deleted yet, and
 * how many entries (leases, retries, DLQ) they still hold. */
void store_groups_deleting(const store_t *s, uint64_t *groups, uint64_t *entries);

/* Lease up to count messages to group (fewer when their payloads reach
 * max_lease_bytes; at least one): its retry-ready queue first, then the
 * topic log from its cursor. Each one's lease, the dequeue and the cursor advance
 * are one batch. A group that does not exist is created bound to topic, from the
 * first retained message (unless that passes max_topics or max_groups: an error naming the limit); a group
 * bound to another topic is an error naming it.
 * out[] gets *n owned messages (free each with msg_owned_free); their due_ms is
 * the time they became due. A read error or damage met after it took some
 * messages ends the call there and returns 0 with those (each leased whole:
 * nothing is left taken and not handed out). One met at the head of a queue
 * of the group (its retry-ready queue, or its topic log at its cursor), before
 * the call took anything from it, marks that queue damaged (nothing of it is
 * written, taken or dropped: the damaged entry and those behind it wait
 * where they are) and the call goes on with the other queue: 0, with what
 * that one gave (*n may be 0). A damaged queue is skipped by the group's
 * calls until opt.damage_retry_ms after it last failed, then tried
 * again; one that passes is no longer damaged. store_group_damage_events and
 * store_group_damage_last report the findings, store_group_queues_damaged how
 * many queues are damaged now. -1 (*n 0) on a bad argument, a store already
 * broken, or one the call broke. */
int store_lease(store_t *s, const char *group, size_t group_len, const char *topic, size_t topic_len, int count,
                uint64_t lease_ms, uint64_t now_ms, msg_owned_t *out, int *n, char *err, size_t errlen);

/* store_lease with a byte budget of its own instead of max_lease_bytes
 * (the broker's woken PULLs, shrunk to the client memory left; 0 counts as 1:
 * one message). */
int store_lease_within(store_t *s, const char *group, size_t group_len, const char *topic, size_t topic_len, int count,
                       uint64_t max_bytes, uint64_t lease_ms, uint64_t now_ms, msg_owned_t *out, int *n, char *err,
                       size_t errlen);

/* Release leases (ACK). Duplicate ids count once. *released gets how many
 * leases existed. An unknown group releases 0. -1 on a read error or damage:
 * the leases released before it are released whole (*released counts them,
 * an ACK again releases the rest); a release that fails after its lease's
 * delete (its index update) breaks the store ("lease release failed
 * half-way"), so none of the call is written. */
int store_ack(store_t *s, const char *group, size_t group_len, const uint64_t *ids, int n, int *released, char *err,
              size_t errlen);

/* Move a lease's deadline (TOUCH). *found 0 when there is no such lease. */
int store_touch(store_t *s, const char *group, size_t group_len, uint64_t id, uint64_t new_deadline_ms, int *found,
                char *err, size_t errlen);

/* Earliest lease deadline; UINT64_MAX when nothing is leased. A read: commits
 * what is pending first (0 when that commit fails: the caller's next call
 * reports the broken store). */
uint64_t store_next_lease_deadline(store_t *s);

/* Leases held in memory, not written yet (opt.lease_write_delay_ms), over
 * all groups; they are among the groups' in-flight counts. A group holds at
 * most STORE_LEASES_UNWRITTEN_MAX; past that its oldest is written first. */
#define STORE_LEASES_UNWRITTEN_MAX 65536
uint64_t store_leases_unwritten(const store_t *s);

typedef struct store_lease_ref {
    char group[MSG_MAX_NAME + 1];
    uint64_t id;
    uint32_t reconsume;
    uint64_t deadline_ms;
} store_lease_ref_t;

/* Up to max leases whose deadline <= now, earliest first. *n gets the count.
 * Read only: the caller decides each one's fate with store_fail. */
int store_expired_leases(store_t *s, uint64_t now_ms, store_lease_ref_t *out, int max, int *n, char *err,
                         size_t errlen);

typedef struct store_fail_req store_fail_req_t;

/* A retry decision taken once the lease is held (the retry policy in sched.h is
 * one): for a message that failed `reconsume` times so far, in a group whose
 * limit is max_reconsume, on the store's level table, fill *req (to_dlq, level,
 * delay_ms; it may rewrite every field). Called at most once per store_fail,
 * before anything is written; it must not call the store. */
typedef void (*store_fail_decide_fn)(void *ctx, const lvl_table_t *levels, uint32_t reconsume, uint32_t max_reconsume,
                                     store_fail_req_t *req);

/* What happens to a failed delivery: fixed by the caller, or decided from the
 * lease itself when decide is set. */
struct store_fail_req {
    int to_dlq;        /* 1: park in the DLQ */
    int level;         /* > 0: retry on exactly this level */
    uint64_t delay_ms; /* with level 0 and not to_dlq: chained retry delay (> 0) */
    const char *reason;
    size_t reason_len;           /* recorded with the message */
    store_fail_decide_fn decide; /* NULL: the fields above are the decision */
    void *decide_ctx;
};

/* A leased message failed (NACK or lease expiry): delete the lease and either
 * schedule the retry (reconsume + 1, destination the group's retry-ready queue)
 * or park it in the DLQ (reconsume + 1, reason and time recorded). One batch
 * and one lookup of the lease (its index entry, then its value, which is
 * written back without another copy). With req->decide the
 * decision is made from the lease's reconsume and the group's max-reconsume
 * as read there. A decision that is out of range (level outside 1..count, a
 * zero delay, a delay over max-delay or the hop bound, a reason over
 * MSG_MAX_REASON) is refused and the lease stays: a fixed one before the lease
 * is looked up, a decided one after. *found 0 when there was no lease (nothing
 * done); *due_out the retry's due time, 0 for the DLQ. */
int store_fail(store_t *s, const char *group, size_t group_len, uint64_t id, const store_fail_req_t *req,
               uint64_t now_ms, int *found, uint64_t *due_out, char *err, size_t errlen);

/* ---- the DLQ --------------------------------------------------------------- */

/* Up to count DLQ messages of group with id > after_id, in id order, and no
 * more than max_lease_bytes of them (msg_budget_t: at least one). */
int store_dlq_list(store_t *s, const char *group, size_t group_len, uint64_t after_id, int count, msg_owned_t *out,
                   int *n, char *err, size_t errlen);

/* Requeue one DLQ message (id) or all (all = 1) into the group's retry-ready
 * queue with reconsume reset to 0, so it gets the whole retry schedule again.
 * *count gets how many moved. One id is one move in the pending batch; ALL is
 * a whole walk (store_dlq_walk_step) in steps of STORE_BATCH_MAX_OPS. The
 * same for DLQ DROP. */
int store_dlq_requeue(store_t *s, const char *group, size_t group_len, uint64_t id, int all, uint64_t now_ms,
                      uint64_t *count, char *err, size_t errlen);

/* Delete one DLQ message (id) or all. *count gets how many. */
int store_dlq_drop(store_t *s, const char *group, size_t group_len, uint64_t id, int all, uint64_t *count, char *err,
                   size_t errlen);

/* DLQ REQUEUE/DROP ALL a step at a time, so that a DLQ of millions does not
 * hold the storage thread for seconds: start with the struct zeroed but for
 * requeue, call store_dlq_walk_step until done. Each step takes at most max
 * entries (and at most STORE_BATCH_MAX_BYTES of them) in id order from where
 * the last one stopped and commits them (unsynced; a crash between two steps
 * leaves the rest in the DLQ, each move whole). Other commands may run
 * between steps: an entry parked meanwhile is taken if its id is past the
 * walk's place, and the walk ends (done) at the DLQ's end or when the group
 * it started on is gone (deleted, or deleted and created again). On -1
 * (err set: a read error, damage; the walk stops there) count says what was
 * taken, the failed step's moves before the failure included (committed);
 * the store is broken if that commit failed or a drop failed half-way
 * ("DLQ drop failed half-way": its index entry gone, its DLQ entry not). */
typedef struct store_dlq_walk {
    int requeue;      /* 1: requeue, 0: drop */
    int started;      /* the first step found the group ... */
    uint64_t gen;     /* ... of this generation */
    uint64_t next_id; /* where the next step starts */
    uint64_t count;   /* entries requeued or dropped by the committed steps */
    int done;
} store_dlq_walk_t;

int store_dlq_walk_step(store_t *s, const char *group, size_t group_len, store_dlq_walk_t *walk, uint64_t max,
                        uint64_t now_ms, char *err, size_t errlen);

/* ---- topics ---------------------------------------------------------------- */

typedef struct store_topic_info {
    uint64_t appended; /* messages that ever entered the topic log */
    uint64_t retained; /* still in the log */
    uint64_t delayed;  /* on their SEND journey in the level queues (exact: counted in the batches of the moves) */
    uint64_t ready;    /* in the log and not yet taken by some group: the largest backlog of its groups;
                          with no group, every retained message */
    uint64_t sent;     /* SENDs accepted since the store was opened (not persisted) */
    int groups;        /* groups bound to it */
} store_topic_info_t;

/* 1 and *out when the topic exists (a SEND or a group named it), 0 when not. */
int store_topic_info(const store_t *s, const char *topic, size_t topic_len, store_topic_info_t *out);

/* A topic with its info: a row of store_topic_page. opt.max_topics bounds
 * how many there can be; an empty topic can be deleted (store_topic_delete). */
typedef struct store_topic_row {
    char name[MSG_MAX_NAME + 1];
    store_topic_info_t info;
} store_topic_row_t;

/* How many topics there are. */
size_t store_topic_count(const store_t *s);

/* A page of topics in name order, as store_group_page: TOPICS COUNT 10 at
 * 10 000 topics sorts 10, not every topic. */
void store_topic_page(const store_t *s, const char *after, size_t count, store_topic_row_t **rows, size_t *n);

/* The groups bound to a topic, by name: *rows (free it; NULL when none) and
 * *n (0 for an unknown topic). O(its groups). */
void store_topic_group_rows(const store_t *s, const char *topic, size_t topic_len, store_group_row_t **rows, size_t *n);

typedef enum store_topic_del {
    STORE_TOPIC_DELETED = 0,
    STORE_TOPIC_UNKNOWN, /* no such topic */
    STORE_TOPIC_IN_USE   /* groups are bound to it, or it holds messages (retained in its log or on the levels) */
} store_topic_del_t;

/* Delete an empty topic: no group bound to it, nothing retained in its log,
 * nothing on its way through the levels. Its record goes in the pending
 * batch; its CQ files are closed and deleted at the first checkpoint past
 * that batch (a crash before: at the next open); groups of it still being deleted (GROUP DEL) are deleted to the end
 * first, a commit per step. *out says what happened; with STORE_TOPIC_IN_USE
 * *info (optional) says why. A later SEND or group naming it creates it
 * again, from scratch. 0, or -1 on a storage error. */
int store_topic_delete(store_t *s, const char *topic, size_t topic_len, store_topic_del_t *out,
                       store_topic_info_t *info, char *err, size_t errlen);

/* One step of TOPIC DEL … PURGE (levels/maintain.c): delete up to max of
 * the messages a topic with no group keeps for retention, whatever their
 * age, oldest first, with their index entries, into the pending batch; once
 * none is left, the topic itself (store_topic_delete). *until is 0 at the
 * first step, which sets it: messages that reach the topic's log after it
 * are kept (and then hold the topic: STORE_TOPIC_IN_USE). *purged is this
 * step's count. *done 0: call again; 1: *out says how it ended —
 * STORE_TOPIC_UNKNOWN (no such topic), STORE_TOPIC_IN_USE with *info
 * (optional), also when a group is bound to it or it has messages on the
 * levels (neither is retention's: nothing is deleted), STORE_TOPIC_DELETED.
 * 0, or -1 on a storage error. */
int store_topic_purge_step(store_t *s, const char *topic, size_t topic_len, uint64_t *until, int max, uint64_t *purged,
                           int *done, store_topic_del_t *out, store_topic_info_t *info, char *err, size_t errlen);

/* ---- finding and revoking messages (levels/lookup.c, on levels/index.c) ---- */

/* Where a message is, overall (store_msg_view_t.state) or for one group
 * (store_copy_view_t.state: READY, LEASED, RETRY, DLQ or DONE). */
typedef enum store_msg_state {
    STORE_MSG_GONE = 0, /* no copy left: never sent, consumed everywhere, revoked, dropped */
    STORE_MSG_DELAYED,  /* on its SEND journey in a level queue */
    STORE_MSG_READY,    /* in the topic log, not yet taken by a group (or the topic has none) */
    STORE_MSG_LEASED,   /* a group holds a lease on it */
    STORE_MSG_RETRY,    /* a group will get it again: a delayed retry on a level, or retry-ready */
    STORE_MSG_DLQ,      /* parked in a group's DLQ */
    STORE_MSG_DONE      /* per group: that group passed it (took and acknowledged it) */
} store_msg_state_t;

/* "gone", "delayed", "ready", "leased", "retry", "dlq", "done". */
const char *store_msg_state_name(store_msg_state_t st);

/* Live: it will still be delivered, or is being delivered (DEDUP's test). */
static inline int store_msg_state_live(store_msg_state_t st)
{
    return st == STORE_MSG_DELAYED || st == STORE_MSG_READY || st == STORE_MSG_LEASED || st == STORE_MSG_RETRY;
}

typedef struct store_copy_view {
    char group[MSG_MAX_NAME + 1];
    store_msg_state_t state;
    uint32_t reconsume;
    uint64_t deadline_ms; /* LEASED */
    int level;            /* RETRY: the level it waits on; 0 = retry-ready now */
    uint64_t due_ms;      /* RETRY on a level: when it is ready again */
    uint64_t parked_ms;   /* DLQ */
    char *reason;         /* the last failure reason (owned; NULL when none) */
    size_t reason_len;
} store_copy_view_t;

typedef struct store_msg_view {
    uint64_t id;
    store_msg_state_t state;
    msg_owned_t msg;     /* not GONE: topic, key, created_ms, due_ms (its current journey's end), payload
                              (empty unless asked for) */
    int level;           /* DELAYED: the level it waits on */
    uint64_t hop_due_ms; /* DELAYED: when it leaves that level */
    int hops_left;       /* DELAYED: hops still to come after that level */
    uint32_t reconsume;  /* the highest over the groups' copies */
    int ncopies;         /* per group: copies held, and with a message still in the log every group of its topic */
    store_copy_view_t *copies;
} store_msg_view_t;

/* GET: where message id is and what it is. 0 with *out filled (state GONE
 * and nothing else when the store holds no copy); -1 on a read error. Free
 * with store_msg_view_free. A copy held by a deleted group's old incarnation
 * (a delayed retry, dropped when due) is not shown. */
int store_msg_get(store_t *s, uint64_t id, int with_payload, store_msg_view_t *out, char *err, size_t errlen);
void store_msg_view_free(store_msg_view_t *v);

/* FIND: the messages of topic with that key that are not GONE, in id order,
 * at most max (payloads empty). *out (free each view, then the array with
 * free) and *n. */
int store_msg_find(store_t *s, const char *topic, size_t topic_len, const char *key, size_t key_len, int max,
                   store_msg_view_t **out, int *n, char *err, size_t errlen);

#define STORE_REVOKE_REFUSED_MAX 16

typedef struct store_revoke_result {
    uint64_t revoked, from_delayed, from_ready;
    uint64_t refused_total;
    int nrefused; /* the first STORE_REVOKE_REFUSED_MAX refusals */
    struct {
        uint64_t id;
        char reason[MSG_MAX_NAME + 96];
    } refused[STORE_REVOKE_REFUSED_MAX];
} store_revoke_result_t;

/* REVOKE: remove message id, or every message of topic with key, that has
 * not been delivered: DELAYED (anywhere on its SEND journey), or READY in
 * the topic log with no group of the topic past it (a topic without groups:
 * any retained message). The others are refused with a reason ("already
 * delivered to group g (leased)", "gone"). One batch for the whole call.
 * 0 with *r, -1 on a read error or damage (nothing revoked, nothing of the
 * call written): when it fails after it took a message (the damage behind a
 * level head it took; store_revoke_key: a message after those it revoked),
 * the store is broken, naming "REVOKE failed half-way" and the cause, and
 * must be reopened (store_break): the messages it took stay where they were. */
int store_revoke_id(store_t *s, uint64_t id, store_revoke_result_t *r, char *err, size_t errlen);
int store_revoke_key(store_t *s, const char *topic, size_t topic_len, const char *key, size_t key_len,
                     store_revoke_result_t *r, char *err, size_t errlen);

/* PEEK: up to count messages of a level queue from its head (level > 0;
 * *hop_due per message: when it leaves the level) or of topic's log from its
 * oldest retained entry (level 0; *hop_due: when it entered the log), read
 * only — nothing is leased or moved. Stops once the payloads reach
 * max_bytes (at least one message). out[] gets *n owned messages (free each
 * with msg_owned_free). -1 for a level outside the table or a bad topic name. */
int store_peek(store_t *s, int level, const char *topic, size_t topic_len, int count, uint64_t max_bytes,
               msg_owned_t *out, uint64_t *hop_due, int *n, char *err, size_t errlen);

/* SEND … KEY k DEDUP: when a live message of req's topic with req's key
 * exists, store nothing: *dup = 1 and *id_out / *due_out are that message's.
 * Otherwise store_send (*dup = 0). A read, but one that joins the pending
 * batch while it holds only SENDs (an earlier SEND of the same key in the
 * batch is remembered in memory); after any other operation it commits what
 * is pending first. An empty key is an error. */
int store_send_dedup(store_t *s, const store_send_req_t *req, uint64_t now_ms, uint64_t *id_out, uint64_t *due_out,
                     int *dup, char *err, size_t errlen);

/* The commit-log bytes one SEND of req's topic, key and payload sizes takes
 * in a batch (its record, its derived writes, their reserves): a run's
 * run_bytes for store_send_run_begin is the sum over its SENDs. Pure. */
uint64_t store_send_run_bytes(const store_send_req_t *req);

/* Before a run of SENDs that must land in one batch (MULTI/EXEC) and may
 * hold DEDUP SENDs: commit what is pending unless it holds only SENDs, so
 * no DEDUP SEND of the run commits the run's first half (a read's commit,
 * unsynced); then, when run_bytes > 0 (the sum of store_send_run_bytes over
 * the run's SENDs), ask for the whole run's room in the commit log's segment
 * at once: when the rest of the pending batch's segment lacks it, the
 * pending batch is committed (unsynced) and the run begins the next segment,
 * so no SEND of the run commits the batch to make room and a crash keeps all
 * of the run or none. A run that no segment holds is refused before anything
 * of it is written, naming the bytes it needs, the segment size and what to
 * set (the store stays usable). 0, or -1 with err when the store is broken,
 * the run is refused or a commit fails. */
int store_send_run_begin(store_t *s, uint64_t run_bytes, char *err, size_t errlen);

/* A run of SENDs that must be stored all or none (MULTI/EXEC) is checked
 * first, SEND by SEND in the run's order, into one store_send_check_t, and
 * stored only when every check passed. The check of a SEND answers what
 * store_send (dedup 0) or store_send_dedup (dedup 1) would answer for it
 * with the run's earlier SENDs stored and nothing else in between: the same
 * code refuses it with the same error (the store broken, store_send_validate,
 * a new topic over max_topics counting the run's earlier new topics, DEDUP
 * without a key, a read error of DEDUP's lookup). It writes nothing: the
 * pending batch, the counters and the topics are as before. Call it after
 * store_send_run_begin (a DEDUP SEND's check reads committed data as
 * store_send_dedup does), and store the run before any other operation.
 * A refusal leaves c unchanged; the caller stops there. */
typedef struct store_send_check store_send_check_t;
store_send_check_t *store_send_check_new(void); /* free with store_send_check_free (NULL is fine) */
void store_send_check_free(store_send_check_t *c);
int store_send_check(store_t *s, store_send_check_t *c, const store_send_req_t *req, int dedup, char *err,
                     size_t errlen);

/* ---- maintenance and checking ---------------------------------------------- */

/* Background work, bounded by max_deletes per call: garbage-collect topic logs
 * below the smallest cursor of their groups (or past retention when a topic has
 * no group), and ask for the compaction of consumed key ranges of queues that
 * popped many heads since their last compaction (done by the store's own
 * compaction thread: the call does not wait for it). *work gets the amount
 * done, each range asked for counting one (0: nothing left). */
int store_maintain(store_t *s, uint64_t now_ms, int max_deletes, int *work, char *err, size_t errlen);

/* Wait until the compactions store_maintain asked for so far are done (tests,
 * benchmarks). */
void store_compact_wait(store_t *s);

/* The part of store_maintain a busy owner can afford, bounded by max_deletes:
 * garbage-collect topic logs, but for a topic with groups only below the
 * smallest cursor those groups had at least grace_ms ago (sampled by these
 * calls, every grace_ms / 16 at most; binding a group to the topic drops the
 * samples), so a consumed entry stays readable for at least grace_ms; a topic
 * with no group past retention, as in store_maintain. Call it often with a
 * small budget: the entries become collectable in slices. No compaction (that
 * can take the thread for long). Does not commit: its deletes stay in the
 * pending batch for the owner's next commit (a write of its own is one more
 * chance to wait in the kernel behind an fsync of the same log; it cost the
 * broker's delivery p99 ~1.5 ms at 10 000 msg/s). A call looks at
 * STORE_COLLECT_TOPICS topics at most, taking them in turn across calls: a
 * step's cost does not grow with max-topics (10 000 topics, every one looked
 * at each step of a busy broker, were 0.43 ms per 10 ms step). *work gets the
 * number of entries collected. */
#define STORE_COLLECT_TOPICS 256
int store_collect(store_t *s, uint64_t now_ms, uint64_t grace_ms, int max_deletes, int *work, char *err, size_t errlen);

/* Where a message sits, for store_scan. */
typedef enum store_range {
    STORE_LEVEL = 'L',
    STORE_TOPIC = 'T',
    STORE_RETRY = 'R',
    STORE_LEASE = 'I',
    STORE_DLQ = 'D'
} store_range_t;

typedef struct store_entry {
    store_range_t range;
    int level;            /* STORE_LEVEL */
    uint64_t seq;         /* position key (level, topic log, retry) */
    uint64_t due_ms;      /* STORE_LEVEL: the hop's due time (the key) */
    uint64_t deadline_ms; /* STORE_LEASE */
    const msg_t *m;
} store_entry_t;

/* Call fn for every stored message (committed data only; commits first).
 * Stops early when fn returns nonzero. -1 on a read error or undecodable value. */
int store_scan(store_t *s, int (*fn)(void *ctx, const store_entry_t *e), void *ctx, char *err, size_t errlen);

/* A full consistency check: every table block passes its checksum (one walk of
 * every record, in key order, past the block cache), every value decodes, every counter equals what the
 * ranges hold, every copy's index entry names it, no (group, id) is in two
 * places, each level's remembered head is its first message. 0 when consistent; -1 and the first problem
 * in err otherwise. Needs nothing but an open store, so it also serves an
 * operator's check of a directory after a crash (store_check_dir). Reads everything: not for hot paths. */
int store_check(store_t *s, char *err, size_t errlen);

/* What store_check's walk read: the records, and the messages per range. */
typedef struct store_check_counts {
    uint64_t records;  /* every record of the database */
    uint64_t messages; /* the stored messages (the sum of the five below) */
    uint64_t level, topic, retry, lease, dlq;
} store_check_counts_t;

/* store_check, with what its walk read in *counts (NULL: not wanted; filled
 * as far as the walk got when it fails). */
int store_check_counted(store_t *s, store_check_counts_t *counts, char *err, size_t errlen);

/* ---- Checking a data directory (checkview.c) ------------------------------------ */

/* What store_check_dir did and found. */
typedef struct store_dir_check {
    store_check_counts_t counts; /* what the check read (as far as it got) */
    char view[4200];             /* where the scratch view was made (removed); "" when none was */
    unsigned linked, copied;     /* files hard-linked into it, files copied into it */
    uint64_t copied_bytes;       /* the bytes of the copies */
    int whole_copy;              /* 1: the directory holds STORE_COPY_WHOLE (a whole copy BACKUP made) */
    int whole_listed;            /* 1: its marker lists the files (checked: names, sizes, CRC-32C) */
    unsigned whole_files;        /* the files it lists */
    uint64_t whole_bytes;        /* their bytes */
    int torn;                    /* 1: the newest log ends in a torn write that store_open would cut */
    char torn_log[64];           /* its name ("000012.log") */
    uint64_t torn_offset;        /* where the cut would be (the end of its last whole record) */
    uint64_t torn_bytes;         /* the bytes after it */
    unsigned stale_removed;      /* scratch views killed checks left, removed before this one was made */
    char stale_view[4200];       /* the first of them */
} store_dir_check_t;

/* Any one thread, with no store of the directory open in this process:
 * store_open and store_check_counted of the data directory o->path (never
 * created) without writing a byte to it. A directory with a CURRENT file is
 * opened in a scratch view, a new directory beside it ("<path>.check-XXXXXX")
 * or else under $TMPDIR (or /tmp) holding hard links to its tables (copies
 * where a link fails) and copies of CURRENT, its manifests and logs; the
 * view is removed at the end. The check holds an flock on the view's
 * directory while it exists; before making its own it removes the views
 * killed checks left (beside o->path, and under $TMPDIR): directories of
 * this user with the view's name pattern and mode 0700 whose lock is free and that hold
 * only a view's files (counted in *r); the view of a check running now
 * stays. Other directories are refused by store_open before anything is opened. A
 * torn log end store_open would cut is cut in the view and described in *r;
 * a whole copy BACKUP made (STORE_COPY_WHOLE in o->path: r->whole_copy) is
 * first checked against its list (store_copy_verify with checksums: its
 * damage, STORE_OPEN_DAMAGED, or an unreadable file, -1, before any view),
 * and a torn log end in it is damage instead (STORE_OPEN_DAMAGED, err naming the log, the offset
 * and the bytes): such a copy was fsynced whole before it was named, so its
 * log has no torn end unless it was truncated or overwritten after.
 * Errors name o->path, not the view. Returns 0 when consistent;
 * STORE_OPEN_DAMAGED when the data is damaged or inconsistent;
 * STORE_OPEN_IN_USE when another process holds the directory's lock (before
 * or after the view was made); -1 when it could not be checked (missing,
 * not accessible, not ours, no room for the view). */
int store_check_dir(const store_options_t *o, uint64_t now_ms, store_dir_check_t *r, char *err, size_t errlen);

/* Another thread than store_check_dir's, when the process is about to end
 * (a signal stopped the check): remove the scratch view being made or
 * checked now, and put its path in removed[len] ("" when there was none).
 * store_check_dir, there or later, removes and makes nothing after this
 * (it blocks): the caller must _exit. Never returns an error. */
void store_check_dir_interrupt(char *removed, size_t len);

/* ---- Online copies (snapshot.c) ----------------------------------------------- */

/* A fixed view of the committed store: what a crash at the moment it was
 * taken would leave (every commit is one WriteBatch). */
typedef struct store_snapshot store_snapshot_t;

/* What a copy has done so far: read by other threads while it runs. */
typedef struct store_copy_progress {
    _Atomic uint64_t keys;  /* records copied */
    _Atomic uint64_t bytes; /* their keys and values */
} store_copy_progress_t;

/* The owner's thread: commit what is pending (unsynced) and take a snapshot
 * of the result. NULL with err on a broken store or a failed commit. The
 * snapshot must be released before the store is closed. */
store_snapshot_t *store_snapshot_take(store_t *s, char *err, size_t errlen);

/* Asked by a copy between its batches: 0 go on, 1 stop, -1 fail (with err). */
typedef int (*store_copy_check_fn)(void *ctx, char *err, size_t errlen);

/* Where a copy is made before it is whole: "<dir>.partial". */
#define STORE_COPY_PARTIAL ".partial"

/* The file a copy holds once it is whole: written and fsynced in
 * "<dir>.partial" as the copy's last step, before the rename. A file, not a
 * record in the database: it travels with the directory (tar, rsync, cp -r)
 * and is read without opening the database, and a torn or cut log cannot
 * take it away with the records it cut. Text an operator may read
 * (docs/operations.md, "Backup"): a version line ("hourglass-broker
 * BACKUP-WHOLE 2"), '#' comment lines, "file NAME SIZE CRC32C" for every
 * other file of the copy (sorted by name; CRC-32C of all its bytes, 8 lower-
 * case hex digits) and "end FILES BYTES". Version 1 (no version line, no
 * list: copies made before the list) is still read. store_check_dir checks
 * the list (store_copy_verify, with checksums) and treats a torn log end as
 * damage; store_open checks the sizes and the log end and refuses a damaged
 * copy, else removes the file (a started broker makes the directory live,
 * where a power cut may leave a torn end). */
#define STORE_COPY_WHOLE         "BACKUP-WHOLE"
#define STORE_COPY_WHOLE_VERSION 2

/* What store_copy_verify read. */
typedef struct store_copy_mark {
    int marked;     /* 1: dir holds STORE_COPY_WHOLE */
    int listed;     /* 1: with a list of files (version 2); 0: an older marker, nothing to check */
    int checksums;  /* 1: the files' CRC-32Cs were checked too, not only their sizes */
    unsigned files; /* files listed */
    uint64_t bytes; /* their bytes */
} store_copy_mark_t;

/* Any thread, no store of dir open: check dir against its STORE_COPY_WHOLE
 * list. Every listed file must be there, a regular file of the listed size
 * (and, when checksums, of the listed CRC-32C: every byte is read), and
 * every other file of dir (but STORE_COPY_WHOLE) is damage: nothing adds a
 * file to a whole copy, which is never opened. Returns 0 when it agrees
 * (also without the file, m->marked 0, or with an older marker without a
 * list, m->listed 0); STORE_OPEN_DAMAGED with err naming dir, the file, what
 * the list says and what was found (the first problem, and how many more),
 * also when the marker itself is garbled or cut short; -1 with err when a
 * file cannot be read or the marker is of a newer version. */
int store_copy_verify(const char *dir, int checksums, store_copy_mark_t *m, char *err, size_t errlen);

/* The CRC-32C (Castagnoli, as iSCSI and LevelDB compute it) of p[n]: the
 * copy list's checksums (copymark.c) and the log records' (logtail.c). Any
 * thread. */
uint32_t store_crc32c(const void *p, size_t n);

/* Any one thread, while the store is open (the owner goes on writing): copy
 * the snapshot into a new LevelDB database at dir — a data directory a store
 * opens like any other. Neither dir nor dir.partial may exist; the parent
 * must. The copy is made in dir.partial (reads skip the block cache; 4 MiB
 * batches, the last fsynced, then STORE_COPY_WHOLE written and fsynced, then
 * the directory), renamed to dir without
 * replacing anything, and the parent fsynced: dir exists only whole. check
 * (NULL: never asked) is asked after each batch but the last. Returns 0 when
 * the copy is whole, 1 when check stopped it, -1 with err on an error
 * (naming the path or the store) or check's failure; after 1 or -1 nothing
 * of the copy is left. progress (NULL: none) counts each batch written; its
 * counters are not reset. */
int store_snapshot_copy(store_snapshot_t *sn, const char *dir, store_copy_check_fn check, void *ctx,
                        store_copy_progress_t *progress, char *err, size_t errlen);

/* Any thread, no store needed: remove dir.partial, a copy that was cut
 * short (its broker was killed mid-copy), when it is nothing else: every
 * file in it is one of LevelDB's own (or STORE_COPY_WHOLE, written just
 * before the rename a crash may have stopped), and no process holds its database's
 * lock (a copy another broker is making now holds it). Returns 1 when it
 * was removed, 0 when there was none, -1 with err naming the path and why
 * it stays (a foreign file, the lock held, an I/O error). */
int store_copy_discard_partial(const char *dir, char *err, size_t errlen);

/* Any thread, while the store is open; NULL is a no-op. */
void store_snapshot_release(store_snapshot_t *sn);

/* Format an id for the wire (16 lower-case hex digits) and parse it back
 * (0 / -1): the text must be exactly 16 hex digits, either case; shorter or
 * longer forms are refused (docs/protocol.md). */
void store_id_format(uint64_t id, char out[17]);
int store_id_parse(const char *text, size_t len, uint64_t *id);

#endif
