/*
 * levels/clog.h — the commit log (docs/design-commitlog.md §2, §3; step 1 of
 * its landing plan): pre-written segments, batches appended whole with a
 * COMMIT record, fdatasync, a record read back by its offset, a walk, the
 * log's end found at open by the D rule, segments recycled, offsets raised to
 * a floor. Not wired into the store yet.
 *
 * Files, in one directory: clog-<base>.seg, <base> the absolute log offset of
 * the segment's first byte as 16 lowercase hex digits, a multiple of the
 * segment size; every segment is exactly segment_bytes long, written whole
 * (zeros) before it is used, so an fdatasync never has metadata to write.
 * A segment starts with a 32-byte header (magic, base, size, its life: a
 * random 64-bit number drawn each time the segment is (re)made). Records
 * follow, 8-byte aligned, each naming its own offset and its segment's life,
 * covered by a CRC-32C: a record of an earlier life (a recycled segment), a
 * well-formed record forged inside a payload (whose writer cannot know the
 * life) and zeros all read as "not a record here" (CLOG_NOT_RECORD).
 *
 * A batch is records added with clog_batch_add and then written by
 * clog_append in one pwrite, ending in a COMMIT record that holds D (the
 * durable end when the batch was made), the end of the batch before it, the
 * record count and a CRC-32C of the batch's bytes. A batch lies in one
 * segment; ids (offsets) are handed out by clog_batch_add, before the write.
 *
 * The end rule at open: the log is the chain of whole batches from the first
 * segment; the first place that is not one (zeros, a torn batch, a stale
 * record) ends it, unless the next segment in use begins with a batch that
 * names that place as its predecessor (a segment switch or a raised floor).
 * Whole batches past a torn place are legitimate only if every one's D is at
 * or below the torn place (nothing there had been durable): the bytes from
 * the torn place on are then saved beside the segment
 * (clog-<base>.seg.torn-<offset>) and cleared, and the open reports it.
 * Otherwise the open refuses with CLOG_DAMAGED, naming the file and offset.
 *
 * Threads: one owner thread calls everything but clog_sync and clog_durable,
 * which one other thread (the syncer) may call at the same time as the
 * owner's calls, and clog_keep_from (below). Errors: every function that fails writes one line into
 * err[errlen] (base/err.h) naming the file and offset concerned.
 */
#ifndef HG_LEVELS_CLOG_H
#define HG_LEVELS_CLOG_H

#include <limits.h>
#include <stddef.h>
#include <stdint.h>

#define CLOG_SEGMENT_HEADER 32 /* bytes at the start of every segment */
#define CLOG_RECORD_HEADER  32 /* bytes before every record's payload */
#define CLOG_COMMIT_PAYLOAD 24 /* D u64, previous end u64, records u32, batch CRC u32 */
#define CLOG_SEGMENT_MIN    UINT64_C(65536)
#define CLOG_SEGMENT_MAX    (UINT64_C(1) << 32) /* record positions inside a segment fit 32 bits */

enum {
    CLOG_DAMAGED = -2,   /* open: durable log damaged (err names file and offset) */
    CLOG_NOT_RECORD = 1, /* read: no record of this log at that offset */
    CLOG_BATCH_FULL = 1, /* batch_add: append this batch, then add the record again */
};

enum {
    CLOG_DATA = 1,   /* a record added by the caller */
    CLOG_COMMIT = 2, /* the record that ends every batch */
};

typedef struct clog clog_t;

typedef struct clog_options {
    const char *dir;        /* existing directory; segments are created in it */
    uint64_t segment_bytes; /* multiple of 4096 in [CLOG_SEGMENT_MIN, CLOG_SEGMENT_MAX]; equal to every
                               existing segment's */
    uint64_t floor;         /* the next batch starts at or above this offset (the clock floor and the
                               highest id handed out elsewhere, design §2): a new segment at the first
                               boundary at or above it when the log's end is below */
    uint64_t must_reach;    /* the log must hold whole batches up to at least this offset (0: no bound):
                               something outside the log (the redo's applied mark) shows it was durable,
                               so a chain ending below it is damage, refused before anything is cut */
    uint64_t chain_from;    /* the end of a batch known durable and whole (the redo's checkpoint), or 0: the
                               open follows the chain from there, not from the first segment, and trusts
                               what lies below (its records are still checked when read): the segments
                               wholly below it were synced before it was named and are not synced again */
    uint64_t clean_end;     /* where the log was closed cleanly (nothing appended past it since), or 0: a
                               chain ending exactly there skips the scan past its end for whole batches */
} clog_options_t;

/* What clog_open found. */
typedef struct clog_open_report {
    uint64_t end;                 /* the offset after the last whole batch (where the next batch goes) */
    uint64_t batches;             /* whole batches walked (from chain_from) */
    int scanned;                  /* 1: the rest of the log past the chain's end was scanned (the D rule) */
    uint64_t cut_at;              /* a torn tail cut at this offset (0: nothing cut) */
    uint64_t cut_bytes;           /* its bytes, saved in cut_file */
    char cut_file[PATH_MAX + 32]; /* the segment's path + ".torn-<offset>" */
} clog_open_report_t;

/* A record read back: data points into the reader's buffer, valid until the
 * next read with it. */
typedef struct clog_record {
    uint64_t offset; /* this record's */
    uint64_t batch;  /* the first offset of its batch */
    uint64_t next;   /* the offset after it */
    int type;        /* CLOG_DATA or CLOG_COMMIT */
    const char *data;
    uint32_t len;
} clog_record_t;

/* A growable read buffer (zero-initialise; clog_reader_free releases it).
 * With `window` set, reads go through a read-ahead window of that many bytes
 * (clog_walk's: one pread per window instead of two per record); the window
 * is not refreshed by appends, so a reader with one must not read past an
 * append made after its last read. */
typedef struct clog_reader {
    char *buf;
    size_t cap;
    size_t window; /* 0: no read-ahead */
    char *win;     /* [win_at, win_at + win_len) of segment win_base, when win_len > 0 */
    size_t win_len;
    uint64_t win_at, win_base;
} clog_reader_t;

/* A batch being built (zero-initialise; clog_batch_free releases it). */
typedef struct clog_batch {
    char *buf;
    size_t len, cap;
    uint64_t first;   /* offset of buf[0] */
    uint64_t limit;   /* the segment's end: the batch and its COMMIT end at or before it */
    uint32_t records; /* data records so far */
    uint64_t life;    /* the batch's segment's life (once life_known) */
    int begun, life_known;
} clog_batch_t;

/* Open the log in o->dir (no segment: an empty log), find its end by the end
 * rule above, cutting a torn tail. Returns 0 and *out (rep filled when not
 * NULL); CLOG_DAMAGED with err naming the segment file and offset (damage
 * below a later batch's D, a segment header that does not match its name or
 * size); -1 with err on a bad option, a foreign file named clog-*, or an I/O
 * error. */
int clog_open(const clog_options_t *o, clog_t **out, clog_open_report_t *rep, char *err, size_t errlen);

/* Close the files and free c (NULL: nothing). Syncs nothing. */
void clog_close(clog_t *c);

/* The offset after the last batch appended (owner thread). */
uint64_t clog_end(const clog_t *c);

/* The offset up to which clog_sync has made the log durable (any thread). */
uint64_t clog_durable(const clog_t *c);

/* Start a batch at the log's end. Records added get consecutive offsets. */
void clog_batch_begin(clog_t *c, clog_batch_t *b);

/* Add a data record of n bytes (copied); *offset gets its offset (its id).
 * Returns 0; CLOG_BATCH_FULL when it does not fit in the rest of the batch's
 * segment and the batch holds records (append it, begin again, add again; an
 * empty batch moves to the next segment instead); -1 with err when it could
 * never fit in a segment. */
int clog_batch_add(clog_t *c, clog_batch_t *b, const void *p, size_t n, uint64_t *offset, char *err, size_t errlen);

/* Make room for `bytes` more bytes of records (headers included) in the
 * batch: 0 when they fit (an empty batch moves to the next segment when they
 * do not fit in the rest of this one); CLOG_BATCH_FULL when the batch holds
 * records and they do not fit; -1 when they could not fit in any segment.
 * clog_batch_add calls it for its record. */
int clog_batch_room(clog_t *c, clog_batch_t *b, uint64_t bytes);

/* Append the batch with its COMMIT (one pwrite; the segment is made or taken
 * from the spares first when the batch starts one) and reset it. Not durable
 * until clog_sync. An empty batch writes nothing. Returns 0, or -1 with err
 * naming the file and offset; after -1 the log is unusable (close it) —
 * except for a batch begun before clog_abandon took its segment: -1 naming
 * it, nothing written, the batch reset (add its records again: their
 * offsets change), the log usable. */
int clog_append(clog_t *c, clog_batch_t *b, char *err, size_t errlen);

/* Why the owner's last clog_batch_add, clog_append or clog_prepare failed,
 * when a system call of its writes did (a segment's create, pre-write,
 * header, rename; the batch's pwrite): that call's errno — ENOSPC, EDQUOT or
 * EFBIG for a full disk, a quota or a file-size limit, EIO... — so a caller
 * tells a full disk without reading the message; 0 when the last such call
 * succeeded or failed for another reason. Owner thread. */
int clog_write_errno(const clog_t *c);

/* Make everything appended so far durable (fdatasync of every segment
 * written since the last sync); the syncer thread may call it while the
 * owner appends. Returns 0, or -1 with err naming the file and errno the
 * failed fdatasync's (ENOSPC, EDQUOT: a full disk; after a failed fdatasync
 * the segment must be abandoned, design §3). A failure sticks: every later
 * call fails at once with its errno and its text (saying so) and calls no
 * fdatasync, until clog_abandon — a retry through the same descriptor would
 * report success over the pages the failure lost. Calls are serialized (the
 * owner's and the syncer's), so none takes that success meanwhile. */
int clog_sync(clog_t *c, char *err, size_t errlen);

/* After a failed clog_sync (design §3 "fsyncgate": the kernel may have
 * dropped the unsynced pages and a retry would report success): every
 * segment holding bytes appended past clog_durable is abandoned — never
 * synced or appended to again — and the next batch starts a fresh segment.
 * Its COMMIT names the abandoned tail as its predecessor, so a chain from
 * there carries on into it: an open with chain_from = *to never reads the
 * abandoned range. *from, *to get that range [clog_durable, clog_end) (empty
 * when nothing waited for the sync). Ends the failure clog_sync keeps (the
 * fresh segment syncs). Owner thread, with the syncer stopped. */
void clog_abandon(clog_t *c, uint64_t *from, uint64_t *to);

/* 1 while a clog_sync failure is kept (a clog_sync failed and clog_abandon
 * has not run since): the log must be abandoned before it syncs again. Any
 * thread. */
int clog_sync_failed(clog_t *c);

/* Read the record at offset. Returns 0 with *r; CLOG_NOT_RECORD when there
 * is no record of this log there (past the end, in no segment, not a record
 * boundary of the segment's current life); -1 with err naming the file and
 * offset when a record of this life fails its CRC (damage) or on I/O error. */
int clog_read(clog_t *c, uint64_t offset, clog_reader_t *rd, clog_record_t *r, char *err, size_t errlen);

/* Call fn for every record (data and COMMIT) from the batch starting at
 * `from` (0: the log's first) to the end, in order, across segments. fn
 * returning non-zero stops the walk with that value. Returns 0, fn's value,
 * CLOG_NOT_RECORD when from is not a record, or -1 with err. */
typedef int (*clog_walk_fn)(const clog_record_t *r, void *ctx); /* must not append to c */
int clog_walk(clog_t *c, uint64_t from, clog_walk_fn fn, void *ctx, char *err, size_t errlen);

/* clog_walk of the batches after the one that ends at `end` (a batch's end,
 * or 0: the whole log): the next batch may start in a later segment (the rest
 * of end's segment unused). Nothing to walk when end is the log's end. */
int clog_walk_after(clog_t *c, uint64_t end, clog_walk_fn fn, void *ctx, char *err, size_t errlen);

/* Pre-write segments until `spares` spares wait (off the hot path: a segment
 * switch otherwise writes one; it takes any spare, lowest first, wherever it
 * lies). 0, or -1 with err. */
int clog_prepare(clog_t *c, unsigned spares, char *err, size_t errlen);

/* clog_prepare off the owner's thread, for an owner that cannot stop for a
 * whole segment's pre-write and sync (the broker's storage thread: a segment
 * switch without a spare held every job for ~40 ms at 16 MiB, and the
 * pre-write in steps on that thread took 42 % of it at a flood's peak). When
 * no spare waits, the call asks the log's pre-writer thread for one: it
 * writes the segment's zeros into "clog-ffffffffffffffff.seg.new" (a name an
 * open ignores), in 1 MiB chunks `pace_ms` apart (0: back to back; each call
 * sets the pace of the file being written), starting each chunk's writeback,
 * and syncs it. The first call after the file is whole gives it a header and
 * a new life, renames it past every segment and syncs the directory: a spare,
 * which the next segment switch takes (a header, a rename). 1 when this call
 * finished a spare, 0 when there was nothing to take (the file is being
 * written, or a spare waits), -1 with err when the pre-write, a sync or the
 * rename failed: the file is removed, the log is as before (a switch
 * pre-writes as without the thread) and no file is asked for again until the
 * log's end enters another segment. -1 also when a segment switch since the
 * last call met the pre-writer's failure (err says so; the switch wrote its
 * segment itself and nothing else changed: the next call asks again). clog_write_errno is not changed.
 * When a spare waits and the one the next switch takes is not known to be in
 * the page cache (a recycled segment, or a spare the open found), a call
 * (not held) has the same thread read it through, 1 MiB a chunk at the same
 * pace: a switch then appends into cached pages instead of reading each
 * batch's last page from disk (~130 µs a batch on an evicted file). Any
 * next spare is read back once more when the log's end enters its segment's
 * second half (a quiet log's spare may leave the cache while it waits). That
 * read-back answers 0, changes no byte, fails silently (the appends read
 * their pages themselves, and clog_read_back_counts counts it), skips the
 * chunks whose pages are all cached, and ends early when a spare is to be
 * written. clog_close stops the thread and removes its file. Owner thread. */
int clog_prepare_step(clog_t *c, unsigned pace_ms, char *err, size_t errlen);

/* clog_prepare_step's read-backs since the open: read-backs run through
 * whole (a recycled spare's, and each segment's second-half one), the bytes
 * read for them (chunks already cached are skipped, so 0 for a spare whose
 * pages were all still cached), and read-backs that
 * failed (a descriptor not duplicated, a read error: the switch's appends
 * then read their pages themselves). Any thread. */
void clog_read_back_counts(clog_t *c, uint64_t *spares, uint64_t *bytes, uint64_t *failures);

/* clog_prepare_step's pace that holds the pre-writer: no spare is begun, and
 * one being written waits before its next chunk until a step sets another
 * pace (a finished one is still taken). For an owner that must not let a
 * spare take the last free space (clog_prepare_left). */
#define CLOG_PREPARE_HOLD UINT_MAX

/* Bytes the pre-writer still has to write before a spare waits: the segment
 * size when none is begun, the rest of the one it is writing (as of its last
 * chunk), 0 when a spare waits, is whole and not yet taken, or steps are
 * refused while the log's end is in this segment (nothing to do). An owner
 * that must not let a spare take the last free space (a switch can pre-write
 * its own segment instead) holds the pre-writer (CLOG_PREPARE_HOLD) unless
 * this much and its margin are free. Owner thread. */
uint64_t clog_prepare_left(const clog_t *c);

/* 1 when the segment at base is a spare (pre-written, waiting to be taken):
 * one that needs no recycling. A spare lies past the log's end, but after an
 * open at a later clock or a failed sync's carry (clog_abandon) — both start
 * the log past every file — spares made before lie below the new end and
 * below the next checkpoint. The next segment the log starts takes them
 * first, lowest first, so none stays behind. Owner thread. */
int clog_is_spare(const clog_t *c, uint64_t base);

/* How many spares wait (clog_is_spare): segments pre-written or recycled
 * and not yet taken by a segment switch, wherever they lie. The file the
 * pre-writer thread is still writing is not one until the owner takes it
 * (clog_prepare_step). A switch that finds none pre-writes its segment
 * itself, so while this is above 0 no zeros are written for the next
 * segment. Owner thread. */
size_t clog_spare_count(const clog_t *c);

/* 1 when the log has a file at base (a segment, or a spare): a where-slot
 * file of a base the log has no file at is left from a segment recycled or
 * removed (redo_slots_sweep). Owner thread. */
int clog_has_segment(const clog_t *c, uint64_t base);

/* The bases of the log's segments that hold batches (no spares: clog_is_spare)
 * and lie wholly below `below` (base + segment size <= below), from the first
 * at or above `from`, ascending: at most max of them into out, their count
 * returned (max when more follow: call again from the last one + 1). The
 * answer is the log's own list, which holds every clog-*.seg file of its
 * directory (clog_open loads each one; a segment is only ever added or
 * renamed, never removed): no directory is read. A recycled segment is a
 * spare from then on, and so is one an open found unused (after a raised
 * floor or a failed sync's carry, spares lie below the log's end); an
 * abandoned segment (clog_abandon) holds batches and is listed. Owner
 * thread. */
size_t clog_segments_below(const clog_t *c, uint64_t from, uint64_t below, uint64_t *out, size_t max);

/* Recycle the segment whose base is `base`: it must lie wholly below the
 * durable end, not be the segment in use, and lie wholly below the offset
 * clog_keep_from named, if any. It is renamed past every segment as a spare
 * with a new life and header (file and directory synced), so its old records
 * read as CLOG_NOT_RECORD. 0, or -1 with err. */
int clog_recycle(clog_t *c, uint64_t base, char *err, size_t errlen);

/* From now on clog_recycle refuses every segment not wholly below `from`:
 * the redo's checkpoint, from which the next open follows the chain
 * (clog_options_t.chain_from), so the segment holding it must stay — and so
 * must every segment when it is 0 (an open from 0 walks the log from its
 * first segment). The redo raises it when a checkpoint is finished. Any one
 * thread at a time (the redo's checkpoint finish may run beside the owner):
 * the bound is one atomic word, and clog_recycle reads it once; callers only
 * raise it while the owner may be recycling (a recycle that read the old
 * value refuses more, never less). */
void clog_keep_from(clog_t *c, uint64_t from);

void clog_batch_free(clog_batch_t *b);
void clog_reader_free(clog_reader_t *rd);

#endif
