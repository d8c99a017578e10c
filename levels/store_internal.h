/*
 * levels/store_internal.h — the store package's private header: the state
 * behind store_t and the functions its files share. Not installed; only the
 * package's own files (below) include it. The public contract is store.h;
 * the storage layout is keys.h.
 *
 * The files of the package (each opens with its own design comment):
 *   keys.c      the records' codec (the hot key builders are inline in keys.h)
 *   store.c     options, store_open's steps in order, close, ids
 *   store_dir.c   the directory around LevelDB's open: prepared, a whole
 *               copy's marker, open errors mapped, a torn log end cut
 *   store_meta.c  the format and meta records at open, the seq floor
 *   store_load.c  the in-memory state read from the records at open
 *   store_log.c   the commit log and its redo under LevelDB: opened, closed
 *   store_log_commit.c  every commit a log batch: appended, synced, applied;
 *               a failure of the log breaks the store
 *   store_checkpoint.c  what follows an apply (a due checkpoint) and what
 *               follows a checkpoint (sweeps, segment recycling)
 *   store_deferred.c  files deleted once a checkpoint covers them: slot files
 *               of recycled segments, CQ files of deleted topics
 *   store_log_message.c  a SEND's message record and id, the consume-queue
 *               and where-slot writes of its journey
 *   store_lane.c  the remainder lane: its heap, loaded at open, and its CQ head
 *   segcount.c  the live count of each log segment, which gates its recycling
 *   db.c        every LevelDB access: the pending batch and its commit, reads
 *   send.c      SEND: its one check, a message accepted
 *   level.c     a message entering a level queue or its topic's log; the
 *               level heads
 *   level_move.c  the due move, next due time, level info
 *   level_walk.c  the due move's walks of a level's `L` range
 *   level_open.c  the level queues at open: CQ heads settled, delayed counts
 *   group.c     topics and groups (create, info, foreach)
 *   group_delete.c  GROUP DEL: a group deleted in the background, a step at a time
 *   lease.c     a lease's keys: written, deleted, tracked; a GROUP DEL step
 *               through the lease range; format 2's lease index folded
 *   lease_take.c  leasing (store_lease): retries first, then the topic log
 *   lease_pend.c  leases written late (opt.lease_write_delay_ms)
 *   lease_ack.c   a lease found by id: ACK, TOUCH, a failure (retry or DLQ)
 *   lease_expiry.c  the next lease deadline and the expired leases
 *   dlq.c       the DLQ: list, requeue, drop
 *   maintain.c  topic-log GC and compaction of consumed ranges
 *   check.c     store_scan and the consistency checker store_check
 *   check_cq.c  store_check's comparison of the consume queues with `L`
 *   index.c     the message, key and group-copy indexes ('X', 'K', 'Y'): kept
 *               in the batches of every move
 *   index_keycount.c  the key index's count records: kept, built once
 *   index_build.c  the indexes built once on an older directory
 *   index_check.c  store_check's part for the indexes
 *   lookup.c    GET / FIND / DEDUP / PEEK on those indexes
 *   revoke.c    REVOKE, on lookup.c's views
 *   snapshot.c  online copies: a snapshot copied into a new database
 *   copymark.c  STORE_COPY_WHOLE: a whole copy's list of files, written and checked
 *
 * In-memory state mirrors the records (keys.h) and is changed as operations
 * add their writes to the pending batch; the changed records are marked dirty
 * and written once per commit (a batch of 1024 sends writes one level record,
 * not 1024). Queue heads live here too (exact level heads, topic/retry head
 * hints, a lease floor), so reads seek straight to them and never walk the
 * tombstones popped heads leave. If a commit fails the store is broken and
 * must be reopened (store.h).
 *
 * Threading: one thread at a time, like store_t itself.
 */
#ifndef HG_LEVELS_STORE_INTERNAL_H
#define HG_LEVELS_STORE_INTERNAL_H

#include <leveldb/c.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "base/idmap.h"
#include "base/map.h"
#include "levels/clog_redo.h"
#include "levels/compactor.h"
#include "levels/keys.h"
#include "levels/lane.h"
#include "levels/logtail.h"
#include "levels/store.h"

/* A queue that popped this many heads since its last compaction has its
 * consumed range compacted by store_maintain. */
#define STORE_COMPACT_AFTER_POPS 50000

/* A checkpoint that finds LevelDB's write-ahead log longer than this has the
 * memtable written out on the compactor's thread (store_checkpoint.c): what an open
 * after a crash replays and writes out before it answers (~6 ms of the
 * capacity bench's restart, where the whole fill's log took ~150 ms:
 * docs/BENCH-broker.md, s47). */
#define STORE_LEVELDB_LOG_FLUSH_BYTES (UINT64_C(2) << 20)

/* After a commit, a batch that held more than this is destroyed and created
 * again instead of cleared: LevelDB's WriteBatch keeps the capacity of its
 * largest contents, so one burst (a 4 MiB payload, 10^5 moves) would pin
 * that memory for the life of the store. Below it the allocation is reused:
 * twice STORE_BATCH_MAX_BYTES, so the batches of a sustained burst (the bound
 * plus one operation) reuse one allocation, and what stays pinned is a few
 * MiB whatever the burst was. */
#define STORE_BATCH_KEEP_BYTES (2 * STORE_BATCH_MAX_BYTES)

typedef struct level_state {
    uint64_t depth;
    /* The `L` head: with on_l, the smallest key of the level, including
     * pending writes; without, the smallest key of a retry (its entries of
     * SEND journeys are served from its CQ: design-commitlog.md 4a.4). A
     * lower bound where it was not known (after a switch to on_l, after a
     * walk stopped at its bound): a walk from it corrects it. */
    int has_head;
    uint64_t head_due, head_seq;
    uint64_t last_enqueue_ms; /* monotone enqueue clock of SENDs on this level */
    uint64_t pops_since_compact;
    uint64_t inserted_due, inserted_seq; /* smallest key inserted during a move_due call */
    uint64_t cq_head, cq_tail;           /* its consume queue (queue = the level): entries [cq_head, cq_tail) */
    map_t cq_done;                       /* indexes above cq_head whose entries are dead (store_level_cq_done) */
    int on_l;                            /* RECORD_LEVEL_ON_L: served by walking `L` (keys.h) */
    uint64_t retries;                    /* its `L` entries bound for a group's retry (kept without on_l) */
    uint64_t cq_last_due;                /* the due of the last entry appended to its CQ: the next is not earlier */
    uint64_t cq_head_due;                /* the due of the entry at cq_head (a lower bound once it moved by a note) */
    uint64_t cq_move_tail;               /* during a due move: entries below were committed before it */
    uint64_t cq_move_first_due;          /* the due of the entry a due move appended at cq_move_tail */
    int dirty;
    /* Its due move failed at its head before it took anything (damage, a
     * read error): store_move_due skips it, and it bounds no other level,
     * until damaged_until (the store's clock), then tries it again. */
    int damaged;
    uint64_t damaged_until;
    char damage[256]; /* why, as the due move said it */
} level_state_t;

typedef struct group_state group_state_t;

/* lease.c keeps the ids of at most this many leases per group in memory
 * (store_group_holds_none); past it, a group's copies are read from 'Y'. */
#define STORE_LEASE_IDS_MAX 65536

/* lease_pend.c keeps up to this many lease_pend_t no longer in use for the
 * next leases (about 80 bytes each): a calloc and a free per message were
 * some 330 Ir of it. */
#define STORE_PEND_SPARE_MAX 4096

/* store_collect keeps this many samples of a topic's smallest cursor per
 * grace period: a topic's consumed entries become collectable in slices of
 * grace / STORE_GC_MARKS, not all at once. */
#define STORE_GC_MARKS 16

/* A topic's log entries ('T' puts) made in batches whose LevelDB writes are
 * held (design-commitlog.md §3 rule 2), oldest first: each with the log's end
 * when it was put into the pending batch (its batch ends past it), so it is in
 * LevelDB once redo_applied passes that mark (topic_held.c). Every entry of
 * the topic LevelDB holds at or above applied_below is in the list. */
typedef struct topic_held {
    struct topic_held_put {
        uint64_t seq, mark;
    } * puts;
    size_t n, cap;
    uint64_t applied_below; /* log_next_min when the topic is made or loaded; raised as entries apply */
} topic_held_t;

typedef struct topic_state {
    char *name;
    size_t len;
    topic_held_t held; /* its appends not yet in LevelDB (topic_held.c), read by its log's walks (topic_walk.c) */
    /* its topic CQ (topic_cq.c; design-commitlog.md 4b): queue 0 until its
     * first append in format 7; entries [cq_head, cq_tail), entry i's seq
     * STORE_TOPIC_CQ_SEQ | (cq_seq_base + i): the CQ starts at index 0 and its
     * seqs above every 'T' key the topic held then */
    uint32_t queue;
    uint64_t cq_seq_base, cq_head, cq_tail;
    uint64_t appended, removed;
    uint64_t delayed;            /* its messages on their SEND journey in the level queues (keys.h 'P') */
    uint64_t sent;               /* SENDs accepted since open (not persisted: /metrics' counter) */
    uint64_t head_hint;          /* every retained entry has seq >= head_hint */
    uint64_t log_next_min;       /* every entry has seq < log_next_min, and the next append takes one >= it */
    int head_is_gc_floor;        /* and the GC has not gone past it (set by the first pass since open) */
    int groups;                  /* groups bound to it */
    group_state_t *first_group;  /* those groups, linked by next_in_topic */
    uint64_t pops_since_compact; /* GC deletions since the last compaction */
    /* store_collect's samples of the smallest cursor of its groups, oldest
     * first; emptied when a group is bound to it (it may read below them) */
    struct gc_mark {
        uint64_t ms, seq;
    } gc_marks[STORE_GC_MARKS];
    int gc_nmarks;
    int dirty;
    int woken; /* in store.woken: may have gained messages ready for a group (store_take_woken) */
} topic_state_t;

/* A lease of a topic-log entry not written yet: in its group's list, in seq
 * order (leases are taken in seq order, and leave it from the front or when
 * acknowledged: see store_ack), and in the store's list of all of them, in
 * the order taken: write_at order while the clock goes forward, and its
 * first is its group's first too. */
typedef struct lease_pend {
    struct lease_pend *next, *prev;         /* its group's list */
    struct lease_pend *all_next, *all_prev; /* the store's */
    struct group_state *group;
    uint64_t id, log_seq, deadline;
    uint64_t write_at; /* written then at the latest (the delay after it was taken) */
    int acked;         /* store_ack's mark */
} lease_pend_t;

struct group_state {
    char *name;
    size_t len;
    topic_state_t *topic;
    group_state_t *next_in_topic; /* the next group bound to topic (topic_state_t.first_group) */
    uint64_t gen;                 /* incarnation: the seq at creation */
    uint64_t cursor;              /* next topic-log seq to read */
    uint64_t position;            /* topic-log entries passed (appended - position = backlog) */
    uint64_t retry_ready, retry_delayed, inflight, dlq;
    uint64_t created_ms;
    uint32_t max_reconsume;
    uint64_t retry_head_hint; /* every retry-ready entry has seq >= this */
    uint64_t pops_since_compact;
    /* lease.c: the ids of its leases taken since open (keys only, at most
     * STORE_LEASE_IDS_MAX), and how many of its leases are not among them
     * (taken before the open, or past the bound): store_group_holds_none */
    idmap_t lease_ids;
    uint64_t leases_untracked;
    /* lease_pend.c: its leases taken from the topic log and not written yet
     * (opt.lease_write_delay_ms), in seq order: the topic-log entries from
     * the oldest one's seq to cursor are exactly these (the persisted cursor
     * is the oldest one's seq); pend_ids maps an id to its entry */
    struct lease_pend *pend_head, *pend_tail;
    uint64_t npend;
    idmap_t pend_ids;
    int dirty;
    /* group_delete.c: being deleted (GROUP DEL): out of the groups map and
     * its topic's list, in store_t.deleting, its leases, retries and DLQ
     * deleted a step at a time; where the next step goes on */
    int deleting;
    key_buf_t del_lease_at;                /* the last lease key a step went through (n 0: none yet) */
    uint64_t del_retry_from, del_dlq_from; /* the seq the next step seeks in each range */
    /* lease_take.c: its retry-ready queue and its topic log at its cursor,
     * when a PULL failed at their head (damage, a read error): skipped until
     * damaged_until (the store's clock), then tried again */
    struct queue_damage {
        int damaged;
        int wake_pending; /* its skip's end not yet told to the PULLs parked on the topic */
        uint64_t damaged_until;
    } retry_damage, log_damage;
};

/* A damaged entry of t's topic log was revoked (revoke.c): each group whose
 * topic log is skipped for damage tries it again at its next PULL, and the
 * PULLs parked on t are woken (lease_take.c). */
void store_topic_log_damage_retry(store_t *s, topic_state_t *t);

/* g leaves sight (GROUP DEL): its damaged queues are no longer counted in
 * store_group_queues_damaged (lease_take.c). */
void store_group_damage_forget(store_t *s, group_state_t *g);

/* A keyed message sent in the pending batch (index.c's sent_keys). */
typedef struct idx_sent {
    uint64_t id, due_ms;
} idx_sent_t;

/* What a deferred delete deletes (store_deferred.c). */
typedef enum store_deferred_kind {
    STORE_DEFERRED_SLOTS,    /* the where-slot file of a recycled segment; what: its base */
    STORE_DEFERRED_TOPIC_CQ, /* every CQ file of a deleted topic's queue; what: the queue */
} store_deferred_kind_t;

/* A file (or a queue's files) deleted once a finished checkpoint's B reaches due. */
typedef struct store_deferred {
    store_deferred_kind_t kind;
    uint64_t what;
    uint64_t due; /* the least B that covers the event: no batch an open's redo replays from there writes it */
} store_deferred_t;

struct store {
    store_options_t opt;
    char *path;
    leveldb_t *db;
    redo_t *redo;           /* the commit log and its redo (store_log.c); NULL before it opens and after close */
    compactor_t *compactor; /* store_maintain's range compactions, off the owner's thread */
    leveldb_options_t *dbopt;
    leveldb_cache_t *cache;
    leveldb_readoptions_t *ropt;
    leveldb_writeoptions_t *wopt_sync; /* sync = 1 when the store syncs */
    leveldb_writeoptions_t *wopt_nosync;
    int unsynced;                /* a commit since the last synced one was not synced */
    leveldb_writebatch_t *batch; /* the pending batch before the redo opens (a new directory's meta records) */
    redo_batch_t log_batch;      /* the pending batch once it is open (store_log_commit.c) */
    uint64_t topic_del_mark;     /* the log's end when a 'T' key was last deleted (topic_held.c); 0: none */
    uint64_t read_barriers;      /* times a read waited for the log's sync and apply (store_read_barriers) */
    uint64_t checkpoint_mono_ms; /* when the last checkpoint was taken (clock_mono_ms) */
    uint64_t log_floor;          /* the floor the log opened with: its next batch starts at or above it */
    store_deferred_t *deferred;  /* files deleted once a checkpoint covers them (store_deferred.c) */
    size_t ndeferred, deferred_cap;
    uint64_t msg_segment;       /* the segment (base) msg_ordinal counts in; UINT64_MAX: none yet */
    uint32_t msg_ordinal;       /* the next message record's ordinal in it (store_log_add_message) */
    lane_t *lane;               /* the remainder lane's order (store_lane.c); NULL before the open loads it */
    map_t lane_left;            /* ids whose lane entry is dead and not yet dropped from its top */
    uint64_t lane_head_written; /* the lane CQ's head as the batches say it */
    int lane_dirty;             /* its record is written with the next commit */
    int lane_live_known;        /* the top at lane_live_index was found live (store_lane.c) */
    uint64_t lane_live_index;
    uint64_t lane_loaded_tail; /* the lane's tail at open: entries below it were loaded, not pushed */
    uint64_t lane_move_tail;   /* during a due move: the lane's tail when it began (entries below are committed) */
    struct seg_count *seg;     /* segcount.c: by base, ascending */
    size_t n_seg, cap_seg;
    uint64_t *seg_dirty; /* segcount.c: the bases whose counts changed since the last flush, each once */
    size_t n_seg_dirty, cap_seg_dirty;
    int log_append_failed;         /* the store broke at a refused log append: log and LevelDB as they were */
    int log_write_errno;           /* that append's failed system call's errno (clog_write_errno; 0: none) */
    int pending;                   /* operations in the batch */
    uint64_t level_damage_events;  /* levels found damaged by the due move (store_level_damage_events) */
    uint64_t lane_full_hops;       /* due hops put back on their level by a full lane (store_lane_full_hops) */
    uint64_t group_damage_events;  /* group queues found damaged by a PULL (store_group_damage_events) */
    uint64_t group_queues_damaged; /* of those, damaged now (store_group_queues_damaged) */
    char group_damage_last[512];   /* the latest finding (store_group_damage_last) */
    uint64_t group_recoveries;     /* damaged group queues that passed again (store_group_recoveries) */
    char group_recovery_last[640]; /* the latest of those (store_group_recovery_last) */
    uint64_t group_damage_wake_at; /* the earliest skip end with wake_pending (0: none; store_group_damage_wake) */
    uint64_t npend;                /* leases not written yet, over all groups (lease_pend.c) */
    uint64_t batch_bytes;          /* about what the batch holds (keys, values, framing) */
    int broken;
    int broken_full; /* the break was a full disk's (store_last_failure_full); set where the cause was whole */
    char broken_err[512];
    char path_shown[STORE_PATH_SHOWN_MAX + 1]; /* path as error texts show it (store_path_shown) */
    char open_note[1280]; /* what store_open repaired on its way ("" when nothing): store_open_note */
    int created;          /* store_open made a new store (store_created) */
    char open_info[768];  /* a whole copy opened, a format upgraded ("" when neither): store_open_info */
    /* 1 when store_open cut the torn log end log_cut describes (store_check_dir reports it) */
    int log_was_cut;
    logtail_t log_cut;
    /* the leases not written yet, in the order taken (lease_pend_t); it owns them */
    struct lease_pend *pend_first, *pend_last;
    /* lease_pend_t no longer in use, kept for the next (linked by next): at most STORE_PEND_SPARE_MAX */
    struct lease_pend *pend_spare;
    size_t npend_spare;

    uint64_t next_seq, persisted_seq;
    level_state_t levels[LVL_MAX_LEVELS + 1];
    map_t topics;              /* name → topic_state_t* */
    topic_state_t *topic_last; /* the topic store_topic_get found last (NULL: none); cleared when it is freed */
    map_t topic_queues;        /* topic CQ queue number (4 bytes) → topic_state_t* (topic_cq.c) */
    uint32_t topic_queue_next; /* the next topic CQ's queue number ('M' "topic-queue-next") */
    /* the format the directory is marked with once open: STORE_FORMAT_VERSION, or an older one a check
       (opt.no_upgrade) left as it is; a topic made gets the CQ layout of that format (topic_cq_make) */
    uint32_t format_marked;
    map_t groups;   /* name → group_state_t* */
    map_t deleting; /* name → group_state_t* being deleted (group_delete.c) */
    topic_state_t **dirty_topics;
    size_t n_dirty_topics, cap_dirty_topics;
    group_state_t **dirty_groups;
    size_t n_dirty_groups, cap_dirty_groups;

    uint64_t lease_floor;   /* every lease deadline is >= this */
    uint64_t lease_ceiling; /* the highest deadline leased since open */
    int lease_next_valid;
    uint64_t lease_next; /* lower bound of the earliest deadline when valid */
    uint64_t lease_pops_since_compact;

    map_t idx_dropped; /* index.c: 'Y' keys deleted in the pending batch */

    map_iter_t collect_next; /* maintain.c: the topic the next collection step starts at */

    topic_state_t **woken; /* group.c: topics marked since the last store_take_woken */
    size_t n_woken, cap_woken;
    topic_state_t **taking; /* store_take_woken's copy (its fn may mark again) */
    size_t cap_taking;

    /* The pending batch as SEND … DEDUP sees it (index.c): while it holds
     * nothing but SENDs (pending == pending_sends), committed data plus the
     * keys sent in it are the whole truth, so a DEDUP SEND joins the batch
     * instead of committing it first. */
    int pending_sends;          /* operations in the batch added by store_send */
    leveldb_iterator_t *key_it; /* db.c: an iterator over what is committed, kept until the next write */
    map_t sent_keys;            /* 'K' prefix (topic, key) sent in the batch → 1 + its index in sent */
    /* index_keycount.c: 1 when each (topic, key) with 'K' entries has its count record
     * (format 5, 'M' "keycounts"); 0 while a check reads an older format */
    int key_counts;
    map_t key_count_batch; /* 'K' prefix → 1 + its count as the pending batch leaves it, or as last read */
    idx_sent_t *sent;      /* the first message sent with each of those keys */
    size_t nsent, capsent;
};

/* 1 when t's log still holds the entry at seq that a group took (leased):
 * only the GC removes an entry a group took, in seq order, and it has not
 * reached seq. 0 when it may be gone, or nothing is known yet since open. */
static inline int store_topic_log_holds(const topic_state_t *t, uint64_t seq)
{
    return t->head_is_gc_floor && seq >= t->head_hint;
}

/* ---- store_dir.c, store_meta.c, store_load.c: store_open's steps ------------------ */

/* store_dir.c: check o->path before LevelDB opens it, creating it when
 * missing and allowed: 0 with *is_new (1: nothing of ours there yet),
 * STORE_OPEN_DAMAGED or -1 with err. */
int store_prepare_dir(const store_options_t *o, int *is_new, char *err, size_t errlen);

/* store_dir.c: after LevelDB created a new database in path, before
 * anything is written to it: fsync the directory, so that its CURRENT file
 * (LevelDB renames it into place and syncs no directory after) is durable
 * before the first synced write is. Until then a power cut leaves creation
 * leftovers (and an empty log), which the next open creates over; after it,
 * a synced write can never be lost with the CURRENT that names its log. 0,
 * or -1 with err. */
int store_sync_new_dir(const char *path, char *err, size_t errlen);

/* store_dir.c: a whole BACKUP copy (STORE_COPY_WHOLE) at path about to be
 * opened: checked, then its marker removed and fsynced (*unmarked 1); 0
 * (also when there is none: *unmarked 0), STORE_OPEN_DAMAGED, or -1 with
 * err. */
int store_unmark_whole_copy(const char *path, int *unmarked, char *err, size_t errlen);

/* store_dir.c: 1 when the error e about the directory at path says its data
 * is damaged (the path itself is not searched), else 0. */
int store_error_is_damage(const char *e, const char *path);

/* db.c: break s (see store_break) as a failure whose kind is full
 * (store_last_failure_full: 1 for no room, decided where the cause was whole
 * — LevelDB's error as received, an errno — by store_failure_text_full or
 * store_failure_errno_full). A store already broken keeps its first cause. */
void store_break_as(store_t *s, int full, const char *why);

/* store_dir.c: leveldb_open's error dberr as store_open's: -1,
 * STORE_OPEN_DAMAGED or STORE_OPEN_IN_USE, with err (log_cut: a torn log end
 * was cut before this open). */
int store_map_open_error(const char *path, const char *dberr, int log_cut, char *err, size_t errlen);

/* store_dir.c: 1 when dberr is an error LevelDB's log reader reports (the
 * only kind a torn log end can cause), else 0. */
int store_log_reader_error(const char *dberr);

/* store_dir.c: cut a torn write off the end of s's newest write-ahead log,
 * saying so (or why not) in s->open_note: 1 when cut (open again), else 0. */
int store_cut_torn_log(store_t *s);

/* store_dir.c: LevelDB refused the directory for a hole in a write-ahead log
 * (damage with whole records after it, levels/logtail.h): when the directory
 * has a commit log and no record after the hole writes its checkpoint mark
 * (`M "checkpoint"`), everything the hole lost lies past B: a power cut's
 * loss of unsynced writes, which the redo from B rewrites. Then the hole's
 * bytes are kept beside the log, LevelDB is opened once without paranoid
 * checks (it replays the log, skipping the damaged records, and writes it
 * out) and closed, and the checkpoint mark must be readable. 1 when so (open
 * again, paranoid: the damaged log is gone), 0 when the refusal stands;
 * either way s->open_note says what was found. Design-commitlog.md 4a.2. */
int store_open_past_hole(store_t *s);

/* store_log.c: 1 when dir holds a commit-log segment. */
int store_log_present(const char *dir);

/* store_meta.c: what store_check_meta found, for store_settle_meta. */
typedef struct store_meta_state {
    int fresh;        /* 1: a new directory, its records written by store_check_meta */
    uint32_t version; /* the directory's format version */
} store_meta_state_t;

/* store_meta.c: check the meta records of the just opened s before the
 * commit log's redo writes anything into it (format version, an unfinished
 * copy, no_upgrade, the level table), writing only a new directory's records
 * (its marker must precede every other write: the redo's checkpoint is one).
 * 0 with *m, or -1 with err. */
int store_check_meta(store_t *s, store_meta_state_t *m, char *err, size_t errlen);

/* store_meta.c: after the redo: upgrade an older format unless
 * opt.no_upgrade, set format_marked, and read the sequence counter into
 * next_seq and persisted_seq (the redo may have rewritten it). 0, or -1 with
 * err. */
int store_settle_meta(store_t *s, const store_meta_state_t *m, char *err, size_t errlen);

/* store_meta.c: raise s->next_seq to store_seq_floor(now_ms), never lower it
 * (after store_settle_meta). */
void store_raise_seq(store_t *s, uint64_t now_ms);

/* store_load.c: read the level, topic and group records into s's in-memory
 * state (in that order, after store_raise_seq). 0, or -1 with err naming a
 * corrupt record or the read error. */
int store_load_levels(store_t *s, char *err, size_t errlen);
int store_load_topics(store_t *s, char *err, size_t errlen);
int store_load_groups(store_t *s, char *err, size_t errlen);

typedef struct idx_journey idx_journey_t; /* index.c, below */

/* segcount.c: the live count of each commit-log segment (design-commitlog.md
 * §5, 4a.3): messages of the segment on their SEND journey. The entries
 * (store_t.seg) are sorted by base, strictly ascending, at every step, and
 * only segments with an entry can have a count above 0. segcount_add moves
 * the count of id's segment by delta (written with the next commit:
 * segcount_flush, which drops the entries at 0 and keeps the order; it
 * costs the segments changed since the last flush, plus one pass over the
 * entries when a count reached 0); one compare when it is the newest
 * segment (a SEND into the current one), a binary search otherwise. segcount_live reads a
 * segment's (0: none) by a binary search, O(log entries), and changes
 * nothing. segcount_live_ascending reads the same for bases asked in
 * ascending order, *at a cursor (0 before the first) it moves past the
 * entries below base: a walk costs O(bases + entries below the last), as the
 * checkpoint's recycle asks for every segment below the checkpoint; no
 * segcount_add or segcount_flush between the calls of a walk. segcount_load
 * reads the 'S' records at open (0, or -1 with err naming a corrupt record);
 * segcount_free drops them. */
typedef struct seg_count {
    uint64_t base, live;
    int dirty;
} seg_count_t;
void segcount_add(store_t *s, uint64_t id, int delta);
uint64_t segcount_live(store_t *s, uint64_t base);
uint64_t segcount_live_ascending(const store_t *s, size_t *at, uint64_t base);
void segcount_flush(store_t *s);
void segcount_drop_all(store_t *s); /* every count to 0 (an index rebuilt without journeys) */
int segcount_load(store_t *s, char *err, size_t errlen);
void segcount_free(store_t *s);

/* The `L` seq of a SEND journey's entry that its level's CQ or the lane
 * also holds (design-commitlog.md 4a.4): this bit | the message's id, so the
 * due move that reads the CQ entry (id, due) knows the `L` key to delete
 * without reading it, and a retry's seq (the counter's, below the bit) never
 * meets it. The message keeps its id as its topic-log seq at arrival when
 * that comes after the log's tail (level.c store_topic_append). */
#define STORE_JOURNEY_SEQ (UINT64_C(1) << 63)

/* The remainder lane's consume queue number (the levels are 1..LVL_MAX_LEVELS). */
#define STORE_LANE_QUEUE ((uint32_t)LVL_MAX_LEVELS + 1)

/* Where-slots read in runs (the due move's, a topic walk's): a miss reads
 * the STORE_SLOT_RUN slots from the ordinal asked on (redo_slot_read: held
 * slots from the overlay), so entries in append order cost one read a run.
 * A run is valid while no slot it holds is written: one due move or one
 * walk (the caller's contract). Set base to UINT64_MAX before the first use. */
#define STORE_SLOT_RUN 64
/* The log's read-ahead window of a walk of a topic CQ (topic_walk.c,
 * topic_cqs_each): its arrivals' records lie in about append order, so a
 * refill serves the next ones; small, as a refill copies it whole (the due
 * move's window: level_move.c). A record longer is read whole. */
#define STORE_WALK_LOG_WINDOW (4 << 10)
typedef struct slot_run {
    uint64_t base, at;
    size_t n;
    slot_t slots[STORE_SLOT_RUN];
} slot_run_t;

/* ---- topic_cq.c: the topic log's consume queues (design-commitlog.md 4b) --------- */

/* A topic CQ's queue numbers start here (above the levels and the lane):
 * those a format-7 store drew keep its files of 2^12 entries; a topic made by
 * this build draws one from STORE_TOPIC_QUEUE_GROWING, whose files grow
 * (levels/cq.h's layouts). */
#define STORE_TOPIC_QUEUE_FIRST   CQ_SMALL_QUEUE_FIRST
#define STORE_TOPIC_QUEUE_GROWING CQ_GROWING_QUEUE_FIRST

/* The topic-log seq of a topic CQ entry is this bit | its index: above every
 * 'T' seq (the counter's, an arrival's id: both below 2^62), so cursors,
 * positions and leases' seqs order the two as one log. */
#define STORE_TOPIC_CQ_SEQ (UINT64_C(1) << 62)

/* The meta keys: the next queue number, and "topicq-<queue, 8 hex>" → the
 * topic's name (for the redo's bounds of a queue it replays). */
#define STORE_META_TOPIC_QUEUE_NEXT "topic-queue-next"

/* 1 when seq is a topic CQ entry's of t (not a 'T' key below its start). */
static inline int store_topic_seq_on_cq(const topic_state_t *t, uint64_t seq)
{
    return t->queue != 0 && seq >= (STORE_TOPIC_CQ_SEQ | t->cq_seq_base);
}

/* The seq of t's CQ entry at index, and the index of a seq on its CQ. */
static inline uint64_t store_topic_cq_seq(const topic_state_t *t, uint64_t index)
{
    return STORE_TOPIC_CQ_SEQ | (t->cq_seq_base + index);
}
static inline uint64_t store_topic_cq_index(const topic_state_t *t, uint64_t seq)
{
    return (seq & ~STORE_TOPIC_CQ_SEQ) - t->cq_seq_base;
}

/* Make t's CQ (t->queue 0): its number drawn, its meta records into the
 * pending batch, its seq base past what t's log holds. Done when a topic is
 * made with the log open, and for an older topic at its first append. */
void topic_cq_make(store_t *s, topic_state_t *t);

/* Append to t's log the message at log offset `offset` (its id; a message
 * with no record in the log passes its id too: its 'T' key at the returned
 * seq holds it, the caller writes it), arrived at stamp_ms: its CQ entry
 * (the queue made on the first append: its number drawn, its meta records
 * written), t's tail and log_next_min moved. Returns its seq. Needs the
 * redo. */
uint64_t topic_cq_append(store_t *s, topic_state_t *t, uint64_t offset, uint64_t stamp_ms);

/* One entry of t's CQ read as the topic log's walk gives it: 1 with *m, the
 * message decoded (not copied) as its 'T' value would hold it (stamped with
 * the entry's arrival stamp; store_decode's limits checked) — TOPIC_CQ_IN_T
 * instead of 1 when its 'T' key holds it; 0 when the entry is dead (its slot
 * names another place or is revoked; a 'T'-held message's key gone); -1 with
 * err naming the topic, the index and the record's offset (a damaged record,
 * an unreadable entry or slot). *m's views point into rd's window (valid
 * until rd's next read) or, for a 'T'-held message, into *held: the value
 * read (free(3) it, even after -1); *held is NULL after 1 and 0. rd: a
 * reader kept across calls (clog_reader_free); slots: a run kept across
 * calls (store_slot_run_get's contract). e: the entry when the caller read it
 * (NULL: read here). */
int topic_cq_entry_msg(store_t *s, topic_state_t *t, uint64_t index, const cq_entry_t *e, clog_reader_t *rd,
                       slot_run_t *slots, char **held, msg_t *m, char *err, size_t errlen);
/* topic_cq_entry_msg's answer for a live entry whose message its 'T' key holds. */
#define TOPIC_CQ_IN_T 2

/* The topic-log entry of t at seq, 'T' key or CQ entry, decoded: 1 with *m,
 * 0 when gone, -1 with err. *m's views point into rd's window or *held
 * (topic_cq_entry_msg's contract: free(3) *held, clog_reader_free(rd)); a
 * caller that keeps the message copies or encodes it before either goes. */
int topic_log_get(store_t *s, topic_state_t *t, uint64_t seq, clog_reader_t *rd, char **held, msg_t *m, char *err,
                  size_t errlen);

/* The topic whose CQ is queue q, or NULL. */
topic_state_t *topic_cq_topic(store_t *s, uint32_t q);

/* topic_cq_find for a message whose record is damaged (store_journey_find
 * failed on it): its where-slot found without the record
 * (store_where_slot_search), not revoked, naming a topic CQ entry at or past
 * its head that names id. 1 with *t and *j, 0 when not (the caller reports
 * the damage). design-commitlog.md, "REVOKE of a damaged record (s49)". */
int topic_cq_find_damaged(store_t *s, uint64_t id, topic_state_t **t, idx_journey_t *j);

/* A message found in its topic's CQ by its where-slot (as store_journey_find
 * finds one on a level): 1 with *m (views into rd's window, stamped), *t and
 * *j (ordinal, queue, CQ index) when id's slot names a topic CQ entry at or
 * past its head that names id; 0 when not; -1 with err. */
int topic_cq_find(store_t *s, uint64_t id, clog_reader_t *rd, msg_t *m, topic_state_t **t, idx_journey_t *j, char *err,
                  size_t errlen);

/* The redo's bounds of topic CQ queue (store_log.c's callback for queues from
 * STORE_TOPIC_QUEUE_FIRST): its topic's 'P' record as LevelDB holds it (in a
 * replay: as the batches replayed so far, or later ones, left it); 0 and 0
 * for a queue made in the batch being applied or later (no name yet, or a
 * record without a queue); for a deleted topic's (no record, or one naming
 * another queue), a window past every index (its writes skipped, its files
 * swept). */
int topic_cq_bounds(store_t *s, uint32_t queue, uint64_t *head, uint64_t *tail, char *err, size_t errlen);

/* Every live entry of every topic CQ whose message is in the log (an entry
 * held by a 'T' key is that key's: the 'T' range gives it) in index order,
 * topic by topic: fn(ctx, t, index, m) with m read from its record (views
 * valid during the call); fn's non-zero stops the walk and is returned. One
 * entry, record and slot read each: store_scan, store_check, not hot paths. */
typedef int (*topic_cq_fn)(void *ctx, topic_state_t *t, uint64_t index, const msg_t *m, char *err, size_t errlen);
int topic_cqs_each(store_t *s, topic_cq_fn fn, void *ctx, char *err, size_t errlen);

/* Load: t's CQ from its record (after store_load_topics read it) and the
 * queue counter. 0, or -1 with err. */
int topic_cq_load(store_t *s, char *err, size_t errlen);

/* topic_cq_retire.c: a deleted topic's CQ files (design-commitlog.md "A
 * deleted topic's CQ files (s49)"). topic_cq_retire: t (being deleted, its
 * record's delete in the pending batch) no longer owns its queue, whose
 * files go at the first checkpoint past the batch of the delete. */
void topic_cq_retire(store_t *s, topic_state_t *t);
/* At open, after topic_cq_load (the redo and its checkpoint done): every
 * file of a topic queue drawn and named by no topic deleted, and said in
 * the open's note. 0, or -1 with err. */
int topic_cq_sweep_dead(store_t *s, char *err, size_t errlen);
#define STORE_META_LANE "lane" /* 'M' record: the lane CQ's head and tail, u64 each */

/* level.c, level_open.c: a level's CQ head (design-commitlog.md 4a.3, 4a.4). Entries
 * enter a level CQ in due order (a hop's entry is not due before the last
 * one appended: level.c level_cq_due), and the due move (without on_l)
 * reads them from the head, passing dead ones (a slot naming another place).
 * A CQ written by 4a.3 was not in due order: its level is walked by `L`
 * (on_l) until it empties. store_level_cq_done: the entry at index left the
 * level by another way (a REVOKE, the `L` walk); the head moves past it when
 * it is the head, and past every dead index above it noted so far; 1 when it
 * moved (the level is marked; the caller writes the head move), else 0.
 * store_level_cq_open (at open, after store_load_levels and idx_open): a
 * level served from its CQ whose `L` range holds a SEND journey's key (format
 * 5's commit log wrote both; format 6 writes the CQ alone: 4a.5) is walked by
 * `L` from now on (on_l) until it empties; the dead indexes noted in memory before a restart are gone, so each level's
 * head moves past the dead entries at it (a CQ entry read and its message's
 * where-slot, one by one, up to the first whose slot names it or cannot be
 * read: the open's checkpoint wrote the redo's buffers), committed when any
 * moved; then the head's due and the last due appended are read. 0, or -1
 * with err. */
int store_level_cq_done(store_t *s, int l, uint64_t index);

/* level.c (design-commitlog.md 4a.4): store_level_first_key — a key at or
 * below every `L` key of level l: its `L` head with on_l, else the least of
 * its retry head, its CQ head's due and (level 1) the lane's top (seq 0
 * for those); 1, or 0 when the level holds nothing. store_level_took — level
 * l's `L` range lost an entry by another way than the due move (a REVOKE):
 * an emptied on_l level is served from its CQ again. */
int store_level_first_key(const store_t *s, int l, uint64_t *due, uint64_t *seq);
void store_level_took(store_t *s, int l);
int store_level_cq_open(store_t *s, char *err, size_t errlen);

/* The CQ head of every level walked by `L` (on_l), and the lane's while
 * level 1 is, moved to its tail (level_open.c, store_lane.c's
 * store_lane_abandon): the messages' journeys were dropped from 'X' (an
 * index rebuilt without them), so they move on by their 'L' entries alone
 * and their CQ entries are left behind. A level served from its CQ keeps
 * it: its journeys have no `L` entry (4a.5). */
void store_journeys_abandon(store_t *s);
void store_lane_abandon(store_t *s);

/* store_lane.c: the remainder lane (design-commitlog.md §4, 4a.3).
 * store_lane_open loads it at open from its record and CQ window (after the
 * redo and store_load_levels); 0, or -1 with err naming the record or the CQ
 * file. store_lane_free drops it. store_lane_push puts a remainder hop of m
 * (due) on it: its CQ entry, its slot, j's queue and index set (a full lane
 * breaks the store). store_lane_left: the remainder id left its `L` entry
 * (taken or revoked): the lane's dead tops are dropped and its CQ head moved
 * with them; 0, or -1 with err (an 'X' read failed). store_lane_flush writes
 * its record into the pending batch when it moved. store_lane_record_decode:
 * the record's value (NULL: none, 0 and 0); 0, or -1 when it is malformed. */
int store_lane_open(store_t *s, char *err, size_t errlen);
void store_lane_free(store_t *s);
void store_lane_push(store_t *s, const msg_t *m, uint64_t due, idx_journey_t *j);
int store_lane_left(store_t *s, uint64_t id, char *err, size_t errlen);
/* The due move's reads of the lane (4a.4): store_lane_next_live is
 * lane_next_live with check, the lane CQ's head moved past the dead tops
 * dropped; store_lane_pop takes the top (its move is in the pending batch)
 * and moves the head likewise. */
int store_lane_next_live(store_t *s, lane_check_fn check, void *ctx, lane_entry_t *top, char *err, size_t errlen);
void store_lane_pop(store_t *s);
void store_lane_flush(store_t *s);
int store_lane_record_decode(const char *v, size_t vlen, uint64_t *head, uint64_t *tail);
/* Whether the lane takes `more` entries within opt.lane_max_entries: 0, or
 * -1 with err ("the remainder lane holds N entries, its limit L ..."). A SEND
 * and a due move ask it before anything is written (send.c, level_move.c). */
int store_lane_room(const store_t *s, uint64_t more, char *err, size_t errlen);

/* store_log.c: open the commit log and redo what it holds past the
 * checkpoint, its next batch at or above floor (after store_check_meta,
 * before store_settle_meta). 0;
 * STORE_OPEN_DAMAGED or -1 with err (s->redo stays NULL). A cut torn tail is
 * told in s->open_note. */
int store_log_open(store_t *s, uint64_t floor, char *err, size_t errlen);

/* store_log.c: sync the log, apply and checkpoint it cleanly, close it
 * (s->redo NULL after, whatever the outcome). 0, or -1 with err. NULL redo:
 * nothing. */
int store_log_close(store_t *s, char *err, size_t errlen);

/* store_log.c: close the log of a store broken by a failed append
 * (s->log_append_failed: the append wrote no batch, so the log and LevelDB
 * are as the last commit left them): a checkpoint at what LevelDB has, then
 * store_log_close's sync, apply and clean checkpoint, so that the next open
 * redoes nothing — on a full disk it needs the room of the held batches'
 * LevelDB writes, not of every batch since the last checkpoint twice over
 * (design-commitlog.md, 4a.2 "A reopen on a full disk"). 0, or -1 with err
 * (s->redo NULL after, whatever the outcome; what failed is redone by the
 * next open from the last checkpoint that succeeded). */
int store_log_close_after_failed_append(store_t *s, char *err, size_t errlen);

/* store_log.c: after the log's fdatasync failed (store_close_unsynced): the
 * segments past the last good sync abandoned, the held batches carried into
 * a fresh, synced segment and applied (redo_sync_failed). 0, or -1 with err
 * (then only store_log_free is left). */
int store_log_sync_failed(store_t *s, char *err, size_t errlen);

/* store_log.c: 1 when an fdatasync of the log failed and its segments are not
 * abandoned yet (clog_sync_failed): a close must go through
 * store_log_sync_failed, whatever its caller asked (store_close after a
 * failed commit whose own sync failed). 0 without a log. */
int store_log_sync_has_failed(store_t *s);

/* store_log.c: close the log's files and free the redo without syncing,
 * applying or checkpointing (redo_free): a failed open, a broken store. s->redo
 * NULL after. */
void store_log_free(store_t *s);

/* store_log_commit.c: the commit path through the log (design-commitlog.md, 4a.2). Once
 * the redo is open every commit is a log batch (s->log_batch, filled by
 * store_put and store_del_raw) whose LevelDB writes are held until the log's
 * sync covers it, then written unsynced with `M "applied"`; point reads see
 * held writes through the overlay (store_get), range walks pass
 * store_read_barrier first. */

/* Append s->log_batch to the log: its writes held (durable 0), or with
 * durable 1 synced and applied in the same call with every batch held before
 * it (redo_commit_applied: the batch never enters the overlay; a due
 * checkpoint follows, as after store_apply_durable). A batch no segment can
 * hold goes beside the log, synced. 0, or -1 with err (after a failed sync or
 * apply the store is broken and the batch stays held; after a failed append
 * nothing is held and s->log_append_failed is set, for the close). */
int store_log_append(store_t *s, int durable, char *err, size_t errlen);

/* Make every batch appended so far durable (clog_sync when the log's durable
 * end lags its end) and apply it (store_apply_durable). 0, or -1 with err. */
int store_log_make_durable(store_t *s, char *err, size_t errlen);
/* 1 when the log's failure (why: its text) was for want of room: the
 * refused write's errno (ENOSPC, EDQUOT, EFBIG), or the text's cause. */
int store_log_failure_full(const store_t *s, const char *why);

/* Bytes appended to the log and not yet synced (0 without a log). */
uint64_t store_log_unsynced_bytes(const store_t *s);

/* The log refused an append (a commit's batch, or the segment a message
 * record needs) and wrote nothing: noted for the close
 * (s->log_append_failed) with the errno of the write that failed, for
 * store_log_write_errno. */
void store_log_note_refused_append(store_t *s);

/* The store breaks at a failure of its log (why): a full disk's when the
 * refused write's errno, or the failure's text, says no room
 * (store_last_failure_full, which the writer asks). */
void store_log_break(store_t *s, const char *why);

/* err = "<before><the directory, shortened><after>: <why, its paths
 * shortened>": a failure of the log named so that its cause survives a long
 * data directory (levels/store_failure.c). -1. */
int store_log_failed(const store_t *s, char *err, size_t errlen, const char *before, const char *after,
                     const char *why);

/* store_checkpoint.c: what follows an apply that moved redo_applied from
 * applied_before: the key iterator dropped and a due checkpoint taken, with
 * what follows it (on the redo's thread with checkpoint_on_thread, the last
 * one settled first). 0, or -1 with err (the store is then broken). */
int store_log_after_apply(store_t *s, uint64_t applied_before, char *err, size_t errlen);

/* store_log_message.c: messages in the log (design-commitlog.md, 4a.3). */

/* Put m into the pending batch as a message record of the log
 * (levels/msg.h's record form) and set m->id to its offset (design-commitlog.md
 * §2: a message id is its log offset). derived_bytes: what the operation will
 * add to the batch's LevelDB writes for m (its level or topic entry, index
 * records); the batch keeps room for them and for the rest of a batch of
 * STORE_BATCH_MAX_BYTES in its segment — when it has not, the pending batch is
 * committed first (unsynced) and m goes into the next one. Call before the
 * operation writes anything. 0, or -1 with err (a message no segment can hold,
 * or that commit's failure). */
int store_log_add_message(store_t *s, msg_t *m, uint64_t derived_bytes, uint32_t *ordinal, char *err, size_t errlen);

/* The room of a run of SENDs that must land in one batch (store_send_run_begin;
 * run_bytes: the sum of store_send_run_bytes over the run): asked for at
 * once in the pending batch's segment, the pending batch committed first
 * (unsynced) when that segment's rest lacks it, so that no SEND of the run
 * commits the batch to make room. A run no segment holds is refused naming
 * the sizes and what to set, nothing written. 0 (also without a log or with
 * run_bytes 0), or -1 with err. */
int store_log_run_room(store_t *s, uint64_t run_bytes, char *err, size_t errlen);

/* send.c: what a SEND of m adds to the batch's LevelDB writes besides its
 * record (its level or topic entry, which holds the message again, its index
 * records and its key's): store_log_add_message's derived_bytes. */
uint64_t store_send_derived_bytes(const msg_t *m);

/* The derived writes of a SEND journey (design-commitlog.md 4a.3), into the
 * pending batch beside the 'L' and 'X' writes they shadow: the entry
 * (offset, due) at index of queue's CQ (a level: its tail); the where-slot of
 * the message at offset (its segment, j->ordinal) naming j's queue and index
 * with flags (SLOT_REVOKED); the CQ head of queue moved to head. */
void store_log_cq_append(store_t *s, uint32_t queue, uint64_t index, uint64_t offset, uint64_t due);
void store_log_slot(store_t *s, uint64_t offset, const idx_journey_t *j, uint32_t flags);
void store_log_cq_head(store_t *s, uint32_t queue, uint64_t head);

/* The where-slot of the message at id as its file holds it (the redo's
 * buffers written: after a checkpoint, and no batch held), for the open's
 * head checks and store_check: 0 with *sl, or -1 with err. ordinal: the
 * message's (its journey's), or UINT32_MAX to read it from its record — then
 * with gone not NULL, a record no longer in the log (its segment recycled)
 * is 0 with *gone = 1 and *sl zeroed (no slot read). */
int store_log_slot_get(store_t *s, uint64_t id, uint32_t ordinal, slot_t *sl, int *gone, char *err, size_t errlen);

/* The where-slot at ordinal of the segment at base, through run: 0 and *sl,
 * or -1 with err (naming the segment). */
int store_slot_run_get(store_t *s, slot_run_t *run, uint64_t base, uint64_t ordinal, slot_t *sl, char *err,
                       size_t errlen);

/* What store_entry_record found at a CQ entry's log offset. The failures
 * leave their reason in why; each caller words them in its own terms. */
typedef enum store_entry_record {
    STORE_ENTRY_RECORD_LIVE,        /* the record, its slot naming the entry back, not revoked: *m, *ordinal */
    STORE_ENTRY_RECORD_NO_RECORD,   /* no record of the log there (its segment recycled; a message without one) */
    STORE_ENTRY_RECORD_NOT_NAMED,   /* its slot names another place (the message moved on) or is revoked */
    STORE_ENTRY_RECORD_UNREADABLE,  /* the record or its ordinal unreadable (damaged): no slot read */
    STORE_ENTRY_RECORD_SLOT_FAILED, /* its where-slot unreadable */
    STORE_ENTRY_RECORD_UNDECODABLE, /* named back, but it does not decode (damaged) */
} store_entry_record_t;

/* The message that entry index of CQ queue names at log offset, read the one
 * way every CQ reader trusts a record (design-commitlog.md §2: a record at an
 * offset is trusted only when its where-slot names it back — a payload may
 * hold a well-formed fake record at a guessable offset, and the slot of the
 * ordinal the fake claims names another place): the record read through rd,
 * its ordinal, the slot of that ordinal read through slots (store_slot_run_get's
 * contract), which must name (offset, queue, index) and not be revoked, then
 * the record decoded. LIVE with *m (views into rd's window, valid until its
 * next read) and *ordinal; otherwise what it met (store_entry_record_t), a
 * failure's reason in why. Inlined into its callers, the due move's heads and
 * every step of a topic walk: the store's hot path, where a call's frame and
 * ten arguments were a measurable part of the cost. */
static inline __attribute__((always_inline)) store_entry_record_t
store_entry_record(store_t *s, clog_reader_t *rd, slot_run_t *slots, uint32_t queue, uint64_t index, uint64_t offset,
                   msg_t *m, uint32_t *ordinal, char *why, size_t whylen)
{
    clog_record_t rec;
    int rc = clog_read(redo_log(s->redo), offset, rd, &rec, why, whylen);
    if (rc == CLOG_NOT_RECORD) {
        return STORE_ENTRY_RECORD_NO_RECORD;
    }
    *ordinal = 0;
    if (rc != 0 || msg_record_ordinal(rec.data, rec.len, ordinal, why, whylen) != 0) {
        return STORE_ENTRY_RECORD_UNREADABLE;
    }
    slot_t sl;
    if (store_slot_run_get(s, slots, offset - offset % s->opt.segment_bytes, *ordinal, &sl, why, whylen) != 0) {
        return STORE_ENTRY_RECORD_SLOT_FAILED;
    }
    if (sl.id != offset || sl.queue != queue || sl.cq_index != index || (sl.flags & SLOT_REVOKED)) {
        return STORE_ENTRY_RECORD_NOT_NAMED;
    }
    if (msg_decode_record(rec.data, rec.len, offset, *ordinal, m, why, whylen) != 0) {
        return STORE_ENTRY_RECORD_UNDECODABLE;
    }
    return STORE_ENTRY_RECORD_LIVE;
}

/* store_checkpoint.c: recycle the log's segments below its checkpoint whose live count is 0
 * (the open's, once the counts are loaded: segcount_load). 0, or -1 with err. */
int store_log_recycle(store_t *s, char *err, size_t errlen);

/* store_deferred.c: files deleted once a checkpoint covers them
 * (design-commitlog.md "Where-slot files of recycled segments (s48)", "A
 * deleted topic's CQ files (s49)"). store_deferred_add: what of kind is
 * deleted at the first finished checkpoint whose B is at least due. */
void store_deferred_add(store_t *s, store_deferred_kind_t kind, uint64_t what, uint64_t due);
/* After a finished checkpoint: every entry it covers closed in the redo and
 * its files deleted (a kind whose delete fails keeps its entries for the
 * next checkpoint). */
void store_deferred_sweep(store_t *s);
/* After redo_close (its checkpoint covers every entry): the files of every
 * entry deleted, the list emptied (a failure is the next open's orphan). */
void store_deferred_sweep_closed(store_t *s);

/* The offset after every message record added so far: the log's end, or the
 * pending batch's end when it holds messages; at least the floor the log
 * opened with (store_next_seq). */
uint64_t store_log_next_id(const store_t *s);

/* ---- topic_held.c: a topic's appends not yet in LevelDB --------------------------- */

/* Every 'T' put goes through store_topic_append (level.c), which tells it here:
 * seq was put into the pending batch (nothing without the commit log). */
void topic_held_note(store_t *s, topic_state_t *t, uint64_t seq);

/* A 'T' key was deleted into the pending batch (db.c store_del_raw): until
 * that batch is applied, a walk of any topic's log asks the overlay about
 * each key LevelDB gives it (topic_held_deletes). */
void topic_held_note_delete(store_t *s);

/* Forget t's appends that are in LevelDB now (their batch applied); returns
 * how many are left, each still held (or written beside the log: then the
 * overlay answers "nothing held" and LevelDB has it). */
size_t topic_held_prune(store_t *s, topic_state_t *t);

/* 1 while a batch that deleted a 'T' key may be held. */
int topic_held_deletes(const store_t *s);

void topic_held_free(topic_held_t *h);

/* ---- topic_walk.c: a queue range in seq order, held writes merged --------------- */

/* A walk of a queue range ('T' topic log or 'R' retry queue: tag name 0x00
 * seq) from a seq, in seq order; a topic with a CQ gives its 'T' keys below
 * the CQ's seqs, then its live CQ entries (topic_cq_entry_msg), each as the
 * key its seq would have (prefix + seq) and the message as a 'T' value would
 * hold it (given_cq, given_in_t and given_index say which entry). Each
 * entry's message (queue_walk_msg) is decoded where it lies, never copied:
 * its views point into a buffer the walker owns (the iterator's value, a
 * point read's value, the log reader's window). A topic's log is walked without the read barrier:
 * LevelDB's entries as applied, merged with the topic's held appends (read
 * through the overlay, store_get) and with held deletes left out. Any other
 * range passes the barrier (store_iter_at). Steps are lazy: an entry is
 * stepped past only by the next queue_walk_next, so a caller that stops
 * after an entry reads nothing beyond it. */
typedef struct queue_walk {
    store_t *s;
    leveldb_iterator_t *it;
    key_buf_t prefix;   /* the range's: tag name 0x00 */
    key_buf_t held_key; /* the key of the held entry given last */
    topic_state_t *t;   /* the topic whose held appends are merged; NULL: a plain range */
    size_t held_next;   /* the next of t->held.puts to give */
    int check_deletes;  /* a held batch may delete keys: the overlay asked about each LevelDB key */
    int at_iter;        /* the entry given last came from the iterator (stepped past next time) */
    int iter_done;      /* LevelDB holds nothing more of the range (never stepped into what follows it) */
    uint64_t iter_seq;  /* the seq of the iterator's entry given last */
    int iter_parsed;    /* and whether its key parsed */
    char *val;          /* the value of the entry given last when a point read read it (free(3)) */
    /* a topic with a CQ (topic_cq.c): its 'T' keys below t_end, then its CQ */
    int has_cq;
    int t_done;       /* the 'T' range is walked */
    uint64_t t_end;   /* STORE_TOPIC_CQ_SEQ | cq_seq_base: the 'T' range's end */
    uint64_t cq_next; /* the next CQ index to judge */
    uint64_t run_at;  /* run[] holds entries [run_at, run_at + run_n) */
    size_t run_n;
    cq_entry_t run[64];
    key_buf_t cq_key;    /* prefix + 8 bytes, made once: a CQ entry's key, its seq written in place per entry */
    clog_reader_t rd;    /* the records, through a read-ahead window (STORE_WALK_LOG_WINDOW) */
    slot_run_t slots;    /* their where-slots */
    uint64_t failed_seq; /* the seq of the entry whose read or decode failed (UINT64_MAX: none, or not known) */
    int given_cq;        /* the entry given last is a CQ entry: at given_index, */
    int given_in_t;      /* held by its 'T' key (a message with no record in the log) */
    uint64_t given_index;
    msg_t given_msg;       /* a CQ entry's message, read to judge it (views into rd's window or val) */
    const char *given_val; /* a 'T' or 'R' entry's value (the iterator's, or val), for queue_walk_msg */
    size_t given_vlen;
    uint64_t given_seq; /* and its seq */
    const char *where;  /* the range's name in errors (queue_walk_next's) */
} queue_walk_t;

void queue_walk_topic(queue_walk_t *w, store_t *s, topic_state_t *t, uint64_t from);
void queue_walk_range(queue_walk_t *w, store_t *s, enum key_tag tag, const char *name, size_t len, uint64_t from);

/* The next entry: 1 with its key (*key, *klen: prefix + 8 bytes) and its
 * seq, valid until the next call or queue_walk_end; 0 at the range's end;
 * -1 with err: a key that is not prefix + 8 bytes ("corrupt queue key in
 * <path>"), a read error (a held entry's point read, the iterator's:
 * "reading <where>: ..."; a CQ entry's record, slot or entry: failed_seq
 * names it). where names the range ("a topic log", "a retry queue"). */
int queue_walk_next(queue_walk_t *w, const char **key, size_t *klen, uint64_t *seq, const char *where, char *err,
                    size_t errlen);

/* The message of the entry queue_walk_next gave last, decoded where it lies
 * (never copied) with store_decode's checks: the walker's msg_t, or NULL
 * with err (a corrupt message; failed_seq names it). It and its views point
 * into what the walker owns, valid until the next queue_walk_next or
 * queue_walk_end: a caller that keeps the message past that copies it
 * (msg_owned_copy) or encodes it where it writes it (store_put_msg); it may
 * change the message's fields (store_lease_stamp) meanwhile. A caller that
 * needs only the seq (the GC at its bound) does not ask: a 'T' value is not
 * decoded then. */
msg_t *queue_walk_msg(queue_walk_t *w, char *err, size_t errlen);
void queue_walk_end(queue_walk_t *w);

/* ---- db.c: the pending batch ---------------------------------------------------- */

/* Add a put / a delete of k to the pending batch (one pending operation). */
void store_put(store_t *s, const key_buf_t *k, const char *v, size_t vlen);
void store_del(store_t *s, const key_buf_t *k);

/* Delete a key as found by an iterator (no copy into a key_buf_t). */
void store_del_raw(store_t *s, const char *key, size_t klen);

/* Encode m (msg.h) and put it under k. */
void store_put_msg(store_t *s, const key_buf_t *k, const msg_t *m);

/* Mark a record changed: it is written once, with the next commit. */
void store_mark_level(store_t *s, int level);
void store_mark_topic(store_t *s, topic_state_t *t);
void store_mark_group(store_t *s, group_state_t *g);

/* group.c: t may have gained messages ready for a group (an append, a retry
 * made ready, a group created or deleted): remember it for store_take_woken. */
void store_mark_woken(store_t *s, topic_state_t *t);

/* Write the batch (with the dirty records and the sequence counter) using
 * sync or not, then empty it (store_commit_durable's core; also the first,
 * always synced write of a new directory). 0, or -1 with LevelDB's message in
 * dberr[dberrlen] (a long data directory shortened: store_failure_text) and
 * *full (when not NULL) 1 when LevelDB's whole error says no room
 * (store_failure_text_full); the store's state is the caller's to mark. */
int store_write_batch(store_t *s, int sync, int *full, char *dberr, size_t dberrlen);

/* A long operation (GROUP DEL, DLQ REQUEUE/DROP ALL, the lease-index fold at
 * open) commits unsynced whenever its batch holds STORE_BATCH_MAX_BYTES or
 * STORE_BATCH_MAX_OPS operations, so it never holds more than one such batch
 * in memory (the batch, and the deletes index.c remembers until it is
 * written). Its caller keeps every such batch a consistent store of its own:
 * a crash between two leaves the work half done, never the store wrong.
 * 0, or -1 when that commit fails. */
#define STORE_BATCH_MAX_OPS 10000
int store_commit_when_full(store_t *s, char *err, size_t errlen);

/* 0, or -1 (naming the original failure) when the store is broken. */
int store_usable(const store_t *s, char *err, size_t errlen);

/* An operation that failed (err holds why) returns through this: when it
 * had added writes of its own to the pending batch (s->pending moved from
 * pending_before, what it was when the operation began: every operation
 * that changes state in memory adds a write first), those are half of it and
 * must never reach the disk, so the store is broken (store_break) naming
 * what (e.g. "REVOKE") and err; the caller must reopen it. A failure before
 * the first write leaves the store as it was. err gets a note of the break.
 * Returns -1. */
int store_fail_half_way(store_t *s, int pending_before, const char *what, char *err, size_t errlen);

/* Before any read: commit what is pending (unsynced; the caller's own commit
 * decides durability), so the read sees every write that came before it.
 * 0, or -1 when the store is broken or that commit fails. */
int store_read_begin(store_t *s, char *err, size_t errlen);

/* store_read_begin, then the barrier for a range walk (an iterator): every
 * batch committed so far is synced and written to LevelDB, so the walk sees
 * it. The iterators (store_iter_at, store_iter_committed, store_iter_range)
 * pass it themselves, breaking the store when it fails; a caller that can
 * report the failure calls it first. 0, or -1 with err. */
int store_read_barrier(store_t *s, char *err, size_t errlen);

/* ---- db.c: reads of committed data -------------------------------------------------- */

/* An iterator seeked to k over what LevelDB holds now, without the barrier:
 * writes of held batches are not in it, so the caller merges them itself
 * (topic_walk.c, through the overlay's point reads). Destroy with
 * leveldb_iter_destroy. */
leveldb_iterator_t *store_iter_applied_at(store_t *s, const key_buf_t *k);

/* A point read of what LevelDB holds now, the held batches not asked (the
 * redo's bounds, the open's marks: the state of the batches applied): 1
 * found (*val, free with leveldb_free), 0 not found, -1 with why =
 * LevelDB's error as it is (the caller says what it read and where). */
int store_get_applied(store_t *s, const key_buf_t *k, char **val, size_t *vlen, char *why, size_t whylen);

/* A point read: 1 found (*val from LevelDB, free with leveldb_free), 0 not
 * found, -1 on a read error (err names the directory). */
int store_get(store_t *s, const key_buf_t *k, char **val, size_t *vlen, char *err, size_t errlen);

/* Whether k is in committed data: 1 yes, 0 no, -1 on a read error (as
 * store_get, the value not kept). */
int store_has(store_t *s, const key_buf_t *k, char *err, size_t errlen);

/* An iterator seeked to k; destroy with leveldb_iter_destroy. */
leveldb_iterator_t *store_iter_at(store_t *s, const key_buf_t *k);

/* 1 when the iterator is valid and its key starts with prefix[0..plen): the
 * key in *key, *klen. 0 at the end of the range (or of the database). Inline:
 * every step of every range walk asks it. */
static inline int store_iter_in(leveldb_iterator_t *it, const char *prefix, size_t plen, const char **key, size_t *klen)
{
    if (!leveldb_iter_valid(it)) {
        return 0;
    }
    *key = leveldb_iter_key(it, klen);
    return *klen >= plen && memcmp(*key, prefix, plen) == 0;
}

/* An iterator over the data committed so far, shared and kept until the
 * next write (which destroys it): for the key index reads of SEND … DEDUP,
 * which may run many times between two commits. Seek it; never destroy it. */
leveldb_iterator_t *store_iter_committed(store_t *s);

/* An iterator at the first key of range tag (keys.h). */
leveldb_iterator_t *store_iter_range(store_t *s, enum key_tag tag);

/* store_iter_in for a whole range: the key starts with tag. */
static inline int store_iter_in_range(leveldb_iterator_t *it, enum key_tag tag, const char **key, size_t *klen)
{
    const char prefix = (char)tag;
    return store_iter_in(it, &prefix, 1, key, klen);
}

/* 0, or -1 with "reading <what>: <LevelDB's error>" when the iterator failed. */
int store_iter_error(leveldb_iterator_t *it, const char *what, char *err, size_t errlen);

/* msg_decode with the range named in the error ("corrupt message in a level
 * queue: ..."), and the layout's limits on what keys are built from (keys.h):
 * a topic, and a group when set, key_name_ok; a key of at most MSG_MAX_KEY
 * bytes ("corrupt message <id> in <where>: its topic name is 2000 bytes
 * (...)"). The views point into v. */
int store_decode(const char *v, size_t vlen, msg_t *m, const char *where, char *err, size_t errlen);

/* store_decode's limits on a message decoded elsewhere (a commit-log record):
 * 0, or -1 with the same error. */
int store_msg_check(const msg_t *m, const char *where, char *err, size_t errlen);

/* store_decode of the value under a valid iterator (views into it, valid
 * until the iterator moves). */
int store_iter_msg(leveldb_iterator_t *it, msg_t *m, const char *where, char *err, size_t errlen);

/* ---- lease.c: a lease's keys --------------------------------------------------------- */

/* A key of the lease range, parsed (group: a view into the key). */
typedef struct store_lease_key {
    uint64_t deadline, id;
    const char *group;
    size_t glen;
} store_lease_key_t;

/* Keep id among g's lease ids (store_group_holds_none), or count it as
 * untracked past the bound. */
void store_lease_track(group_state_t *g, uint64_t id);

/* Take id off g's lease ids, or one off its untracked count when it was
 * not among them. */
void store_lease_untrack(group_state_t *g, uint64_t id);

/* m as g's copy: the value of its lease. */
void store_lease_stamp(const group_state_t *g, msg_t *m);

/* Write g's lease of m: its 'I' key and its copy index entry (log_seq: the
 * topic-log seq m was leased from, 0 when it was not: a retry). */
void store_lease_write(store_t *s, group_state_t *g, msg_t *m, uint64_t deadline, uint64_t log_seq);

/* A new lease of g: counted, its id tracked, written. */
void store_lease_put(store_t *s, group_state_t *g, msg_t *m, uint64_t deadline, uint64_t log_seq);

/* g's lease of id at deadline goes: its 'I' key is deleted, uncounted
 * (inflight) and untracked, g marked dirty, and the next deadline forgotten
 * when this could be it. Its copy index entry is the caller's
 * (idx_copy_gone). */
void store_lease_delete(store_t *s, group_state_t *g, uint64_t id, uint64_t deadline);

/* g's lease of id at deadline (leased from topic-log seq log_seq, 0 when
 * unknown) is released (ACK): store_lease_delete and its copy index entry
 * (idx_copy_gone). Both or neither: when idx_copy_gone fails (a read error,
 * a damaged message index record) after the lease's delete is in the batch,
 * the store is broken (store_fail_half_way, "lease release"), so the half is
 * never written (a copy index entry naming a lease gone, or a message index
 * record nothing holds). 0, or -1. */
int store_lease_release(store_t *s, group_state_t *g, uint64_t id, uint64_t deadline, uint64_t log_seq, char *err,
                        size_t errlen);

/* A lease of g, being deleted (GROUP DEL), goes: store_lease_release with
 * its topic-log seq unknown. Nobody is told. */
int store_lease_drop(store_t *s, group_state_t *g, uint64_t id, uint64_t deadline, char *err, size_t errlen);

/* An iterator at the lease floor: every lease's deadline is at or after it. */
leveldb_iterator_t *store_lease_iter_from_floor(store_t *s);

/* key_lease_parse with the error named: 0, or -1. */
int store_lease_key_read(const store_t *s, const char *key, size_t klen, store_lease_key_t *lk, char *err,
                         size_t errlen);

/* The work of a step of GROUP DEL, in the unit of the maintenance budget
 * (about a topic-log entry collected): a lease key gone through is 1, an
 * entry deleted STORE_DELETE_ENTRY_WORK (its key, its 'Y', the reads of
 * idx_copy_gone). So a step stays about as short as a GC step of the same
 * budget, and the delivery tail with it: at 12, 20 000 SENDs of one
 * connection while a million leases were being deleted had p99 2.1 ms (0.7
 * to 1.5 ms with no deletion, 3.9 ms at 5: docs/BENCH-broker.md). */
#define STORE_DELETE_ENTRY_WORK 12

/* store_open, after the groups and the indexes are loaded: fold a format-2
 * lease index ('J' group id → deadline, topic-log seq) into the copy index
 * entries of those leases and delete it, in committed batches (each entry in
 * one with its 'Y'), so an open interrupted halfway finishes the job the next
 * time. Nothing to do (one seek) on a directory without one. */
int lease_index_fold(store_t *s, char *err, size_t errlen);

/* ---- lease_pend.c: leases written late --------------------------------------------- */

/* Leases written late (opt.lease_write_delay_ms): a lease of a topic-log
 * entry may be held in memory (group_state_t.pend_*) until its write_at. */

/* Where g's next read would start after a restart: the seq of its oldest
 * lease not written yet, else its cursor. The group record persists it, and
 * the topic-log GC keeps everything from it on. */
uint64_t store_group_persisted_cursor(const group_state_t *g);

/* Write the leases not written yet of g (NULL: of every group) whose
 * write_at is by until (UINT64_MAX: all), and commit them when there were
 * any (the callers read committed data next). */
int store_leases_write(store_t *s, group_state_t *g, uint64_t until, char *err, size_t errlen);

/* store_read_begin, and every lease written: for what reads the whole store
 * as stored (store_scan, store_check). GET, FIND and REVOKE need not: they
 * see a lease held in memory through its group's pend_ids (view_build). */
int store_read_begin_whole(store_t *s, char *err, size_t errlen);

/* GROUP DEL: drop g's leases not written yet (nothing of them is stored)
 * and its lease list; g is marked dirty (its persisted cursor moves). */
void store_leases_forget(store_t *s, group_state_t *g);

/* A new lease of g held in memory: counted and its id tracked, as store_lease_put
 * does, but not written. */
void store_pend_add(store_t *s, group_state_t *g, uint64_t id, uint64_t log_seq, uint64_t deadline, uint64_t write_at);

/* Before g leases its next topic-log entry: the entries from the persisted
 * cursor to the cursor must stay exactly the held leases (a crash puts them
 * all back in the backlog, which the persisted position counts), so a lease
 * written at once (!hold: it would expire before its delay is over, or the
 * delay is off) first writes every lease g holds, and a held one past
 * STORE_LEASES_UNWRITTEN_MAX first writes the oldest. */
int store_pend_keep_order(store_t *s, group_state_t *g, int hold, char *err, size_t errlen);

/* Write g's leases not written yet from its first through p (one of them):
 * those before p first, as the persisted cursor passes only written
 * leases. */
int store_pend_write_through(store_t *s, group_state_t *g, const lease_pend_t *p, char *err, size_t errlen);

/* store_ack's part: the ids of sorted[0..*n) that are leases not written
 * yet are released without a write, and taken out of sorted (*n: the ids
 * left, in order). The persisted cursor may only pass a lease that is
 * acknowledged or written, so the leases before the last of them in the
 * list that are still open are written now: an ACK is as durable as the ACK
 * of a written lease. */
int store_pend_ack(store_t *s, group_state_t *g, uint64_t *sorted, int *n, int *released, char *err, size_t errlen);

/* When the next lease not written yet is due to be; UINT64_MAX when none. */
uint64_t store_pend_next_write(const store_t *s);

/* Free the spare lease_pend_t (store_free). */
void store_pend_spares_free(store_t *s);

/* ---- group.c: topics and groups ------------------------------------------------------ */

/* 1 when g is known to hold no copy of message id without a read: no
 * retries, no DLQ entries, and none of its leases is of id (lease.c keeps
 * their ids in memory). 0 when it may hold one: ask its 'Y' entry. */
int store_group_holds_none(const group_state_t *g, uint64_t id);

/* The group of that name, or NULL. */
group_state_t *store_group_get(const store_t *s, const char *name, size_t len);

/* The topic of that name, or NULL: the one the previous call found when the
 * name is its (one comparison), else the map's (s->topics). */
topic_state_t *store_topic_get(store_t *s, const char *name, size_t len);
/* The topic of that name, created (in memory, its record dirty) when new —
 * with its topic CQ once the commit log is open (topic_cq_make). */
topic_state_t *store_topic_get_or_create(store_t *s, const char *name, size_t len);
/* The same without a CQ: a topic loaded from its record (store_load.c). */
topic_state_t *store_topic_make(store_t *s, const char *name, size_t len);
/* 0 when topic exists or one more topic is within opt.max_topics; else -1
 * and err names the topic and the limit (checked before anything that
 * would create it: SEND, a PULL that creates its group, GROUP CREATE). */
int store_topic_room(const store_t *s, const char *topic, size_t topic_len, char *err, size_t errlen);
/* store_topic_room as if the topics named in planned (a set of names none of
 * which exists yet: a SEND run's new topics, store_send_check) existed too;
 * planned may be NULL. store_topic_room is this with NULL. */
int store_topic_room_planned(const store_t *s, const map_t *planned, const char *topic, size_t topic_len, char *err,
                             size_t errlen);

/* 0 when group exists or one more group is within opt.max_groups; else -1
 * and err names the group and the limit (checked before a group is created:
 * GROUP CREATE, a PULL naming a group that does not exist yet). Groups
 * being deleted (GROUP DEL in the background) are out of the count. */
int store_group_room(const store_t *s, const char *group, size_t group_len, char *err, size_t errlen);

/* Bind g to its topic g->topic in memory: counted in groups, linked from
 * first_group (store_group_new, and store_open for the groups it loads). */
void store_topic_add_group(group_state_t *g);

/* A new group bound to t (the name is checked and no live group has it):
 * from_first starts at t's oldest retained entry, else at the next append.
 * Its record is dirty and counts as a pending write. A group of the name
 * still being deleted is deleted to the end first (group_delete_finish);
 * NULL, with err, when that fails. */
group_state_t *store_group_new(store_t *s, const char *name, size_t len, topic_state_t *t, int from_first,
                               uint32_t max_reconsume, uint64_t now_ms, char *err, size_t errlen);

/* Unbind g from its topic (store_topic_add_group's reverse). */
void store_topic_remove_group(group_state_t *g);

/* ---- group_delete.c: GROUP DEL in the background -------------------------------------- */

/* Steps of the deletion of the groups being deleted, one group after the
 * other, until *work reaches max_work (STORE_DELETE_ENTRY_WORK); a group whose last
 * entry goes loses its record. The deletes are left pending, but a group
 * freed commits first (its record must not be written again). 0, or -1. */
int group_delete_steps(store_t *s, int max_work, int *work, char *err, size_t errlen);

/* Before a group of this name is created (store_group_new): a group of the
 * name being deleted is deleted to the end now, a commit per step. 0 (also
 * when none was), or -1. */
int group_delete_finish(store_t *s, const char *name, size_t len, char *err, size_t errlen);

/* store_open: g, loaded with RECORD_GROUP_DELETING, goes on being deleted. */
void group_delete_resume(store_t *s, group_state_t *g);

/* Free a topic_state_t / group_state_t (map_free's free_val shape). */
void store_topic_free(void *t);
void store_group_free(void *g);

/* Append m to g's retry-ready queue (dest, group and gen set; stamped now). */
void store_retry_append(store_t *s, group_state_t *g, msg_t *m, uint64_t now_ms);

/* ---- level.c, send.c, level_move.c, level_walk.c: SEND and the level queues ---------- */

/* (due_a, seq_a) comes before (due_b, seq_b) in a level's key order. */
static inline int store_level_key_less(uint64_t due_a, uint64_t seq_a, uint64_t due_b, uint64_t seq_b)
{
    return due_a < due_b || (due_a == due_b && seq_a < seq_b);
}

/* The topic state of m when it is bound for its topic's log (created when
 * new), NULL when bound for a group's retry: looked up once per message by
 * the hot paths and passed down. */
topic_state_t *store_msg_topic(store_t *s, const msg_t *m);

/* store_topic_delayed_add with m's topic state t in hand (store_msg_topic;
 * NULL: nothing counted). */
void store_topic_state_delayed_add(store_t *s, topic_state_t *t, int delta);

/* Level l's `L` range from now on holds a SEND journey no CQ does: the level
 * is walked by `L` (on_l) from a head at or below every key it holds. */
void store_level_journeys_on_l(store_t *s, int l);

/* Put m on level at due (remainder: the hop waits a remainder, on the lane
 * when there is one), the level's head, depth and m's topic's delayed count
 * kept exact; j: m's journey in the log's files (NULL: none), its queue and
 * index set. topic: store_msg_topic(m), or NULL to look it up. */
void store_level_insert(store_t *s, topic_state_t *topic, int level, uint64_t due, msg_t *m, idx_journey_t *j,
                        int remainder);

/* Where store_level_enqueue will put m, changing nothing: its first level
 * (*first), that hop's due (*hop_due; journey: m is a SEND journey, whose hop
 * on a level's CQ is not due before the last one appended there), whether it
 * waits a remainder (*remainder); sets m->due_ms (its journey's end) and
 * returns the enqueue time. */
uint64_t store_level_plan(const store_t *s, msg_t *m, int level, uint64_t delay_ms, uint64_t now_ms, int journey,
                          int *first, uint64_t *hop_due, int *remainder);

/* store_level_enqueue with m's journey j (NULL: none). */
uint64_t store_level_enqueue_journey(store_t *s, topic_state_t *topic, msg_t *m, int level, uint64_t delay_ms,
                                     uint64_t now_ms, idx_journey_t *j);

/* Append m to t's log, stamped now (a new message, or one at its journey's
 * end; level_seq: its level entry's seq, 0 for none; j: its journey, NULL for
 * none): its topic CQ entry and slot, or its 'T' key and 'X' (level.c). */
void store_topic_append(store_t *s, topic_state_t *t, msg_t *m, uint64_t level_seq, uint64_t now_ms, idx_journey_t *j);

/* The due move (level_move.c): one due level-head message m (at hop_due,
 * seq; topic: store_msg_topic(m)) leaves level for its next hop, its topic's
 * log or its group's retry-ready queue. 1 when it became ready, 0 when it
 * hopped or was dropped, -1 with err. */
int store_route_due(store_t *s, topic_state_t *topic, msg_t *m, int level, uint64_t hop_due, uint64_t seq,
                    uint64_t now_ms, idx_journey_t *j, char *err, size_t errlen);

/* The due move's count of an entry routed on (ready: store_route_due's
 * result): *moved, and *ready_out (may be NULL) when ready. -1 for a failed
 * one, nothing counted; else 0. */
int store_count_moved(int ready, int *moved, int *ready_out);

/* The due move's walks of `L` (level_walk.c), up to bound or max moves in
 * all (*moved, *ready_out as store_count_moved): store_serve_level_walk
 * serves an on_l level by its `L` entries (committed: what it holds on
 * disk); store_serve_retries serves the retries of a level served from its
 * CQ. 0, or -1 with err. */
int store_serve_level_walk(store_t *s, int l, uint64_t bound, uint64_t now_ms, int max, uint64_t *committed, int *moved,
                           int *ready_out, char *err, size_t errlen);
int store_serve_retries(store_t *s, int l, uint64_t bound, uint64_t now_ms, int max, int *moved, int *ready_out,
                        char *err, size_t errlen);


/* A message bound for its topic's log (not a group's retry) enters (+1) or
 * leaves (-1) the level queues: its topic's delayed counter (created when
 * new), written with the same batch (keys.h 'P'). Every insert into and
 * delete from a level goes through it (the level files' own paths through
 * store_topic_state_delayed_add, with the topic they looked up once for the message). */
void store_topic_delayed_add(store_t *s, const msg_t *m, int delta);

/* The meta key that says the topic records count their delayed messages. */
#define STORE_META_TOPIC_DELAYED "topic-delayed"

/* 'M' record a BACKUP copy carries from its first batch until its last one
 * deletes it (snapshot.c): a directory holding it is a copy that was cut
 * before it was whole (its ".partial" put in place by hand, a transfer cut
 * short), which store_open refuses as damaged. */
#define STORE_META_COPY_UNFINISHED "copy-unfinished"

/* store_open: for a directory written before the topic records counted their
 * delayed messages (no 'M' STORE_META_TOPIC_DELAYED), count them once from
 * the level queues and mark the directory. A new directory is marked at
 * creation. */
int store_topic_delayed_open(store_t *s, char *err, size_t errlen);

/* Start m's journey: exactly on level (> 0), or for delay_ms (> 0, exact to the
 * millisecond) on the first hop of its chain. The enqueue time is monotone per level.
 * Sets m->due_ms (the journey's end) and returns it. topic: m's topic state when
 * the caller holds it (a message bound for its topic's log), else NULL (it is
 * looked up by name when needed); held only for this call, never kept. */
uint64_t store_level_enqueue(store_t *s, topic_state_t *topic, msg_t *m, int level, uint64_t delay_ms, uint64_t now_ms);

/* Every refusal of store_send (dedup 0) and store_send_dedup (dedup 1) that
 * does not read: the store broken, store_send_validate, max-topics (counting
 * the names in planned_topics as existing, see store_topic_room_planned; may
 * be NULL), DEDUP's empty key, and a first hop that waits a remainder on a
 * remainder lane with no room (counting planned_lane entries the run's
 * earlier SENDs will push; 0 outside a run). 0, or -1 with the error. The
 * one copy of these checks: the two SENDs and store_send_check all call it. */
int store_send_refusal(const store_t *s, const store_send_req_t *req, int dedup, const map_t *planned_topics,
                       uint64_t planned_lane, char *err, size_t errlen);

/* 1 when a SEND of req would put its first hop on the remainder lane (a
 * delay whose first hop is shorter than its level's delay, with the log
 * open), else 0. */
int store_send_waits_on_lane(const store_t *s, const store_send_req_t *req);

/* ---- index.c and index_*.c: the message, key and group-copy indexes (keys.h 'X' 'K' 'Y') ---- */

/* Where a copy of a message sits: tag 'L' (level, due, seq), 'T' (seq),
 * 'R' (seq), 'I' (a lease), 'D' (the DLQ); 0 = no own copy (an 'X' whose
 * message only groups hold). */
typedef struct idx_place {
    char tag;
    int level;
    uint64_t due, seq;
} idx_place_t;

/* Where a SEND journey's message stands in the commit log's files
 * (design-commitlog.md 4a.3): its where-slot's ordinal in its log segment
 * (fixed for the message's life) and its one live CQ entry — queue = its
 * level, or 0 once it is in the topic log (no CQ entry until step 4b). Kept
 * at the end of the message's 'X' record, rewritten with it at each hop;
 * 'X' records written before 4a.3 have none. */
struct idx_journey {
    uint32_t ordinal;
    uint32_t queue;
    uint64_t cq_index;
};

/* A decoded 'X' record (views into the value). */
typedef struct idx_home {
    idx_place_t place;
    int has_journey; /* journey: as written with the place (see idx_journey_t) */
    idx_journey_t journey;
    const char *topic;
    size_t topic_len;
    const char *key;
    size_t key_len;
} idx_home_t;

/* The message's own copy (its SEND journey, the topic log) is now at p: write
 * its 'X' record, with j (NULL: none, a message from before 4a.3). with_key:
 * also its 'K' entry (at SEND; a key never changes). */
void idx_home_put(store_t *s, const msg_t *m, const idx_place_t *p, int with_key, const idx_journey_t *j);
/* m's 'X' record naming p (no journey) into b: not the store's batch (a
 * BACKUP copy's, snapshot.c). */
void idx_home_batch_put(leveldb_writebatch_t *b, const msg_t *m, const idx_place_t *p);

/* The length of the 'X' value v[vlen] without its journey (vlen when it has
 * none or does not decode): for a copy that holds no commit log (snapshot.c). */
size_t idx_home_len_without_journey(const char *v, size_t vlen);


/* journey.c: a message on its SEND journey found by its where-slot
 * (design-commitlog.md §2): the record at id, the slot of its ordinal naming
 * id back, not revoked, naming a level CQ or the lane (level 1), whose entry
 * names id. */
typedef struct store_journey {
    int level;        /* the level it waits on (the lane: 1) */
    int on_l;         /* that level is walked by `L`: its `L` entry and 'X' are the truth */
    uint64_t hop_due; /* its CQ entry's due: when it leaves that level */
    idx_journey_t j;  /* ordinal, queue, CQ index */
} store_journey_t;

/* The where-slot resolution both finders share (store_journey_find,
 * topic_cq_find): id's record in the log, the ordinal it carries, and the
 * slot of that ordinal in id's segment. 1 with *w when the slot names id
 * back and is not revoked; 0 when not (no commit log, id 0, no record of
 * the log at id, a payload's fake, a recycled life, revoked — also a
 * damaged record whose slot store_where_slot_search finds revoked); -1 with
 * err (a damaged record not revoked, an unreadable slot). Reads committed
 * and held batches. */
typedef struct store_where {
    clog_record_t rec; /* views into the reader's window */
    uint32_t ordinal;
    slot_t sl;
} store_where_t;
int store_where_slot_find(store_t *s, uint64_t id, clog_reader_t *rd, store_where_t *w, char *err, size_t errlen);

/* The slot naming id in id's segment, found without id's record (a damaged
 * one: its ordinal cannot be read): a binary search of the segment's slots,
 * whose ids rise with their ordinals (records are appended in offset order).
 * 1 with *ordinal and *out when a slot names id; 0 when none does — also when
 * a slot read fails or a slot was never written (id 0) on the search's path:
 * the caller then reports the damage it met. design-commitlog.md, "REVOKE of
 * a damaged record (s49)". */
int store_where_slot_search(store_t *s, uint64_t id, uint32_t *ordinal, slot_t *out);

/* 1 when id's record is damaged and its slot, found by
 * store_where_slot_search, is revoked: the message is gone, as any revoked
 * one (a REVOKE of a damaged record); 0 otherwise. */
int store_where_slot_revoked(store_t *s, uint64_t id);

/* 1 with *out (and *m decoded from the record, views into rd's buffer, when
 * m is not NULL), 0 when id is not on a CQ journey (no record of the log at
 * id, a slot naming another id, revoked, in the topic log), -1 with err (a
 * damaged record, an unreadable slot or entry, an entry naming another id).
 * Reads committed and held batches: not the pending one. */
int store_journey_find(store_t *s, uint64_t id, clog_reader_t *rd, msg_t *m, store_journey_t *out, char *err,
                       size_t errlen);

/* 1 when id's where-slot names (queue, cq_index) live, 0 when not, -1 with
 * err (store_journey_find's reads). */
int store_journey_at(store_t *s, uint64_t id, uint32_t queue, uint64_t cq_index, char *err, size_t errlen);

/* Every message on a CQ journey of a level served from its CQ (not on_l)
 * and of the lane (while level 1 is not on_l), in queue order (levels, then
 * the lane): fn(ctx, m, at) with m read from its record (valid during the
 * call). Entries whose slot does not name them back are dead and skipped.
 * fn's nonzero return stops the walk and is returned; -1 with err on a read
 * error (naming the queue and the index). For store_scan, store_check, PEEK,
 * a BACKUP copy's take, and at open the index rebuild and the topic-delayed
 * recount: one record, slot and entry read per entry, not for hot paths. */
typedef int (*store_journey_fn)(void *ctx, const msg_t *m, const store_journey_t *at, char *err, size_t errlen);
int store_journeys_each(store_t *s, store_journey_fn fn, void *ctx, char *err, size_t errlen);
/* The same for one queue: level q's CQ, or the lane (STORE_LANE_QUEUE). */
int store_journeys_queue(store_t *s, uint32_t q, store_journey_fn fn, void *ctx, char *err, size_t errlen);

/* check_cq.c: store_check's comparison of the consume queues with the `L`
 * range (design-commitlog.md 4a.3). check_cq_add takes each level entry of a
 * SEND journey in scan order (its journey j as its CQ gave it, or NULL to
 * read the message's 'X' journey; and its record in the log: 0, or -1 with
 * err on a read error, a journey naming another level, or a record that is
 * not the level entry's message);
 * check_cq_end compares every level CQ and the lane CQ with what was added,
 * after a checkpoint of the log (0, or -1 with err naming the queue, the CQ
 * index and the id). */
typedef struct check_cq_entry {
    uint64_t id, due, cq_index;
    uint32_t ordinal;
    int level;
} check_cq_entry_t;
typedef struct check_cq check_cq_t;
check_cq_t *check_cq_new(store_t *s);
void check_cq_free(check_cq_t *c);
int check_cq_add(check_cq_t *c, int level, uint64_t due, const msg_t *m, const idx_journey_t *j, char *err,
                 size_t errlen);
int check_cq_end(check_cq_t *c, char *err, size_t errlen);
/* A message of a topic CQ (its segment's live count counts it). */
void check_cq_add_topic(check_cq_t *c, uint64_t id);

/* The journey kept in id's 'X' record: 1 with *j, 0 when id has no 'X' record
 * or it keeps none, -1 with err on a read error or a damaged record. */
int idx_journey_read(store_t *s, uint64_t id, idx_journey_t *j, char *err, size_t errlen);

/* At SEND: the 'K' entry of a message with a key (a key never changes). */
void idx_key_put(store_t *s, const msg_t *m);

/* The message's own copy left the store (GC, revoke): drop 'X' and 'K' when
 * no live group of its topic t holds a copy, else keep 'X' with no place. A
 * read: one Get per group bound to t. */
int idx_home_gone(store_t *s, const topic_state_t *t, const msg_t *m, char *err, size_t errlen);
/* idx_home_gone for a message in its topic CQ, which has no 'X' (its slot is
 * its record, design-commitlog.md 4b): the 'X' with no place is its first
 * when a live group holds a copy; else only its 'K' entry goes. */
int idx_home_gone_unindexed(store_t *s, const topic_state_t *t, const msg_t *m, char *err, size_t errlen);

/* Group g (incarnation gen) holds message id at p: write its 'Y' entry. */
void idx_copy_put(store_t *s, uint64_t id, const char *group, size_t glen, uint64_t gen, const idx_place_t *p);

/* That group copy left the store (ACK, DLQ DROP, a dropped retry, GROUP DEL):
 * drop its 'Y' entry, and 'X' / 'K' when neither the message's own copy nor a
 * copy of another live group of its topic t (NULL: none) is left. log_seq:
 * the topic-log seq the copy was taken from when known (a lease's index
 * keeps it), else 0; while t's log still holds that entry
 * (store_topic_log_holds) the own copy is there, so nothing is read. Else a
 * read: a Get per other group bound to t that may hold a copy
 * (store_group_holds_none), and one of 'X' when none holds it. */
int idx_copy_gone(store_t *s, const topic_state_t *t, uint64_t id, const char *group, size_t glen, uint64_t gen,
                  uint64_t log_seq, char *err, size_t errlen);

/* store_send, for a message with a key: remember it as sent in the pending
 * batch (the first one per topic and key is kept). */
void idx_sent_key_add(store_t *s, const msg_t *m);

/* The first message sent in the pending batch with topic and key: 1 with
 * *id and *due_ms, 0 when none was. */
int idx_sent_key_find(const store_t *s, const char *topic, size_t tlen, const char *key, size_t klen, uint64_t *id,
                      uint64_t *due_ms);

/* db.c, after a batch was written: forget the pending deletes and the keys
 * sent in it. */
void idx_batch_written(store_t *s);

/* Read message id's 'X' record: 1 with *h (views into *buf, free with
 * leveldb_free), 0 when there is none, -1 on a read error or a corrupt record.
 * h->place is where the own copy is now: a record naming a level entry that
 * is gone means the message entered its topic's log under that seq
 * (store_topic_append), and reads as that 'T' place — one more Get (committed
 * data, like the record's). */
int idx_home_read(store_t *s, uint64_t id, char **buf, idx_home_t *h, char *err, size_t errlen);

/* Decode a 'Y' value: 0, or -1 when malformed. */
int idx_place_decode(const char *v, size_t vlen, idx_place_t *p);

/* The files of the indexes share (index.c): idx_key_entry — the 'K' entry
 * key of id under (topic, key) into k; idx_home_decode — an 'X' value into
 * *h (views into v): 0, or -1 when malformed; idx_home_read_raw — id's 'X'
 * record as written, its place not resolved (idx_home_read's returns and
 * *buf); idx_home_resolve — an 'L' place of *h turned into the 'T' place of
 * the same seq when that level entry is gone: 0, or -1 with err. */
void idx_key_entry(key_buf_t *k, const char *topic, size_t tlen, const char *key, size_t klen, uint64_t id);
int idx_home_decode(const char *v, size_t vlen, idx_home_t *h);
int idx_home_read_raw(store_t *s, uint64_t id, char **buf, idx_home_t *h, char *err, size_t errlen);
int idx_home_resolve(store_t *s, idx_home_t *h, char *err, size_t errlen);

/* index_keycount.c: the committed count record of prefix ('K' topic 0 klen
 * key) into *n (0 when there is none): 0, or -1 with err. */
int idx_key_count_committed(store_t *s, const key_buf_t *prefix, uint64_t *n, char *err, size_t errlen);
/* index_keycount.c: one 'K' entry more (delta +1) or less (-1) under (topic,
 * key), its count record written into the pending batch (nothing without
 * key_counts). */
void idx_key_count_add(store_t *s, const char *topic, size_t tlen, const char *key, size_t klen, int delta);

/* index_build.c, for index_check.c too: the place a scanned entry is at, and
 * 1 when it is a group's copy (a retry on a level, retry-ready, a lease, the
 * DLQ), 0 when it is the message's own copy. */
idx_place_t idx_entry_place(const store_entry_t *e);
int idx_entry_is_copy(const store_entry_t *e);

/* store_open: build the indexes of a directory written before they existed
 * (one scan, once; marked by 'M' "index"; index_build.c). */
int idx_open(store_t *s, char *err, size_t errlen);

/* store_open, after idx_open (index_keycount.c): the key index's count records (keys.h 'K'),
 * built by one scan of 'K' for a directory written before them and marked
 * by 'M' "keycounts"; then s->key_counts is 1. A check of an older format
 * (no_upgrade) reads the directory without them (key_counts 0). */
int idx_key_counts_open(store_t *s, char *err, size_t errlen);

/* The ids of topic's messages with key in committed data, in id order, at
 * most max, into *ids (free(); NULL when none) and *n. With count records
 * (key_counts), a key with none is answered by one Get, and the walk stops
 * after its count: a seek never steps over other keys' deleted entries. */
int idx_key_ids(store_t *s, const char *topic, size_t tlen, const char *key, size_t klen, int max, uint64_t **ids,
                int *n, char *err, size_t errlen);

/* The key of topic's message id as its key index entry names it, for a
 * message whose record (which holds the key) is damaged: one walk of the
 * topic's whole key index in committed data (an operator's REVOKE, not a hot
 * path). 1 with *key (xmalloc'd, free()) and *klen, 0 when no entry names id
 * (a message without a key), -1 with err on a read error. */
int idx_key_of(store_t *s, const char *topic, size_t tlen, uint64_t id, char **key, size_t *klen, char *err,
               size_t errlen);

/* store_check's part (index_check.c; check.c walks the records once and hands them here):
 * every copy of every message is indexed where it is, and every index entry
 * names a copy. Zero the struct and set s, err, errlen; then
 * idx_check_entry for every stored message and idx_check_record for every
 * other record (it looks at 'X', 'Y' and 'K'), in any order but the 'K' records in key order; then
 * idx_check_end. Each returns 0, or -1 with the first problem in err. The
 * index is keyed by id, not in queue order, so the entries are matched by
 * lookups (store_get), not by a second walk. */
typedef struct idx_check {
    store_t *s;
    char *err;
    size_t errlen;
    uint64_t homes, copies;              /* messages whose index entry matched */
    uint64_t home_records, copy_records; /* placed 'X' records and 'Y' entries walked */
    /* the 'K' count record walked last (key_counts): its prefix, its count and the entries seen under it */
    char kprefix[KEY_MAX];
    size_t kprefix_len;
    uint64_t kcount, kseen;
    map_t unhomed; /* 'K' entries whose id has no 'X' (zero-initialised): a journey only its CQ holds, asked at the
                      end, after the CQ checks have named any damage of the queues (journey.c) */
} idx_check_t;
int idx_check_entry(idx_check_t *c, const store_entry_t *e);
int idx_check_record(idx_check_t *c, const char *key, size_t klen, const char *v, size_t vlen);
int idx_check_end(idx_check_t *c);
void idx_check_free(idx_check_t *c); /* after idx_check_end, or instead of it after a failure */

/* ---- lookup.c ------------------------------------------------------------------- */

/* The view of id (store_msg_get's), without store_read_begin (the caller
 * did it): 0 (v->state GONE when nothing of it is live), or -1 with err (v
 * freed). */
int store_msg_view_build(store_t *s, uint64_t id, int with_payload, store_msg_view_t *v, char *err, size_t errlen);

/* FIND's and REVOKE … KEY's arguments: a topic name, a key of 1..MSG_MAX_KEY
 * bytes. 0, or -1 with err naming the problem. */
int store_find_args_check(const char *topic, size_t tlen, size_t klen, char *err, size_t errlen);

/* SEND … DEDUP's lookup, without its checks: 1 with *id / *due_ms when a
 * message of req's topic with req's key is live (sent earlier in the pending
 * batch, or committed and not GONE), 0 when none is, -1 on a read error.
 * Reads committed data: call it where the pending batch holds only SENDs
 * (store_send_run_begin). */
int store_dedup_find(store_t *s, const store_send_req_t *req, uint64_t *id, uint64_t *due_ms, char *err, size_t errlen);

/* copymark.c: write STORE_COPY_WHOLE into dir (a copy, closed and whole),
 * listing every other file of it with its size and CRC-32C (read now), and
 * fsync it; the caller fsyncs dir. 0, or -1 with err naming the file. */
int copy_mark_write(const char *dir, char *err, size_t errlen);

#endif
