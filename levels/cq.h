/*
 * levels/cq.h — a consume queue (CQ): fixed 16-byte entries (log offset u64,
 * due u64: a level's hop due, the remainder lane's due, or a topic's arrival
 * stamp), big-endian, in append order, in pre-written files named
 * cq-<queue>-<first>.q (queue: 8 hex digits; first: the index of the file's
 * first entry, 16 hex digits) in one directory. How many entries each file
 * holds is the queue's layout (cq_layout_of, below): a pure function of the
 * queue number, so nothing about it is stored.
 * docs/design-commitlog.md §2 (the layout), §3 (who holds head and tail),
 * "Growing topic CQ files (s48)".
 *
 * A queue holds entries [head, tail). Appends take index tail and go into the
 * tail file's in-memory buffer; cq_flush writes the buffer with one pwrite
 * (a run), and cq_append flushes by itself when the buffer is full or the
 * tail crosses into the next file (the file switch: the next file is made,
 * pre-written, when its first entry is appended). cq_rewrite overwrites an
 * entry in place. cq_advance_head moves the head; cq_release_below deletes
 * the files whose entries are all below a head an open would read back;
 * cq_remove_queues deletes every file of queues no one writes any more.
 *
 * What the module trusts and guarantees. Head and tail are the caller's
 * (LevelDB's `C`/`P` records, advanced by the log's replay): cq_open takes
 * them and does not search the files for a tail. At open it checks that every
 * file covering [head, tail) is there and exactly its size long (else
 * an error naming the file: missing, short or damaged). Entries carry no
 * checksum: a read returns the bytes last written at that index, and refuses
 * an entry whose log offset is 0 (log offsets start above 0), which is a
 * file's pre-written zeros — an entry that was never written or was lost
 * (written back after the last checkpoint and not yet replayed). Whether a
 * non-zero entry is right is the caller's to check against the log record it
 * names and that record's where-slot (§2); the module cannot know.
 * Durability: nothing here is synced but by cq_sync; files already below the
 * head when a crash interrupted their deletion are deleted at the next open.
 *
 * Threads: a cq_t belongs to one thread (the storage thread); no locks.
 * Ownership: the caller owns the cq_t from cq_open to cq_close.
 * Errors: 0 / -1 with one line in err[errlen] naming the queue, the index and,
 * where a file is involved, the file.
 */
#ifndef HG_LEVELS_CQ_H
#define HG_LEVELS_CQ_H

#include "levels/fixfile.h"

#include <stddef.h>
#include <stdint.h>

#define CQ_ENTRY_BYTES    16
#define CQ_FILE_SHIFT     18
#define CQ_FILE_ENTRIES   (UINT64_C(1) << CQ_FILE_SHIFT) /* the most a file holds (4 MiB) */
#define CQ_FILE_BYTES     (CQ_FILE_ENTRIES * CQ_ENTRY_BYTES)
#define CQ_BUFFER_ENTRIES 1024 /* a run: entries flushed by one pwrite, at most */

/* The file layout. A queue's files are numbered 0, 1, 2, … in index order and
 * cover the indexes without gaps. Its layout is (first_shift, steady_shift),
 * first_shift <= steady_shift: file 0 holds [0, 2^first_shift), files 1 to
 * ramp = steady_shift - first_shift double (file j holds
 * [2^(first_shift + j - 1), 2^(first_shift + j))), and from there every file
 * holds 2^steady_shift entries (file ramp + k: [k * 2^steady_shift,
 * (k + 1) * 2^steady_shift), k >= 1). Equivalently, a file whose first index
 * is s holds min(2^steady_shift, lowbit(s)) entries (s = 0: 2^first_shift).
 * With first_shift == steady_shift there is no ramp: file k holds
 * [k * 2^shift, (k + 1) * 2^shift).
 *
 * Which queue has which (cq_layout_of):
 * - below CQ_SMALL_QUEUE_FIRST (the levels, the remainder lane): (18, 18),
 *   files of 4 MiB;
 * - CQ_SMALL_QUEUE_FIRST to CQ_GROWING_QUEUE_FIRST - 1 (topic CQs made by a
 *   format-7 store, design-commitlog.md 4b): (12, 12), files of 64 KiB, so
 *   that a topic costs 64 KiB of pre-written file, not 4 MiB;
 * - from CQ_GROWING_QUEUE_FIRST (topic CQs made by format 8): (12, 18), so a
 *   quiet topic still costs 64 KiB and a hot one makes a 4 MiB file every
 *   2^18 entries, not a 64 KiB one every 2^12 (design-commitlog.md "Growing
 *   topic CQ files (s48)").
 * The three functions below are the only place an index is mapped to a file;
 * past the ramp each is a shift, an add or a mask. */
#define CQ_SMALL_QUEUE_FIRST   ((uint32_t)65536)
#define CQ_GROWING_QUEUE_FIRST ((uint32_t)0x01000000)
#define CQ_SMALL_FILE_SHIFT    12

typedef struct cq_layout {
    unsigned first_shift;  /* file 0 holds 2^first_shift entries */
    unsigned steady_shift; /* files past the ramp hold 2^steady_shift entries */
} cq_layout_t;

static inline cq_layout_t cq_layout_of(uint32_t queue)
{
    if (queue >= CQ_GROWING_QUEUE_FIRST) {
        return (cq_layout_t){ CQ_SMALL_FILE_SHIFT, CQ_FILE_SHIFT };
    }
    if (queue >= CQ_SMALL_QUEUE_FIRST) {
        return (cq_layout_t){ CQ_SMALL_FILE_SHIFT, CQ_SMALL_FILE_SHIFT };
    }
    return (cq_layout_t){ CQ_FILE_SHIFT, CQ_FILE_SHIFT };
}

/* The number of the file holding index. */
static inline uint64_t cq_layout_file_of(cq_layout_t l, uint64_t index)
{
    unsigned ramp = l.steady_shift - l.first_shift;
    if (index >> l.steady_shift != 0) {
        return ramp + (index >> l.steady_shift); /* a steady file */
    }
    if (index >> l.first_shift == 0) {
        return 0;
    }
    return (uint64_t)(64 - __builtin_clzll(index)) - l.first_shift; /* ramp file j holds [2^(f+j-1), 2^(f+j)) */
}

/* The first index of file file_no. */
static inline uint64_t cq_layout_file_first(cq_layout_t l, uint64_t file_no)
{
    unsigned ramp = l.steady_shift - l.first_shift;
    if (file_no > ramp) {
        return (file_no - ramp) << l.steady_shift;
    }
    return file_no == 0 ? 0 : UINT64_C(1) << (l.first_shift + file_no - 1);
}

/* How many entries file file_no holds. */
static inline uint64_t cq_layout_file_entries(cq_layout_t l, uint64_t file_no)
{
    unsigned ramp = l.steady_shift - l.first_shift;
    if (file_no > ramp) {
        return UINT64_C(1) << l.steady_shift;
    }
    return UINT64_C(1) << (file_no == 0 ? l.first_shift : l.first_shift + file_no - 1);
}

typedef struct cq_entry {
    uint64_t log_offset; /* the record's offset in the commit log; never 0 */
    uint64_t due;        /* hop due or arrival stamp, ms */
} cq_entry_t;

typedef struct cq cq_t;

/* Open queue `queue` in dir holding [head, tail) (head <= tail; both 0 for a
 * new queue: no file is made until the first append). */
int cq_open(const char *dir, uint32_t queue, uint64_t head, uint64_t tail, cq_t **out, char *err, size_t errlen);

/* Make queue `queue`'s first file (the one holding index 0) in dir ahead of
 * the queue's first append, pre-written and synced as cq_append would make it,
 * so that the append — in the redo's apply, after its batch is durable — only
 * opens it. A file already there is left as it is. For a queue made on the
 * storage thread before anything is appended to it (a topic's, when the topic
 * is made). 0, or -1 with err: nothing is lost, the first append makes the
 * file then (and reports its own failure). */
int cq_make_first_file(const char *dir, uint32_t queue, char *err, size_t errlen);

/* Append e at index tail (returned in *index, may be NULL); e->log_offset != 0. */
int cq_append(cq_t *q, const cq_entry_t *e, uint64_t *index, char *err, size_t errlen);

/* Entries [index, index + n) into out; the range must lie inside [head, tail). */
int cq_read(cq_t *q, uint64_t index, size_t n, cq_entry_t *out, char *err, size_t errlen);

/* Overwrite the entry at index (inside [head, tail)); e->log_offset != 0. */
int cq_rewrite(cq_t *q, uint64_t index, const cq_entry_t *e, char *err, size_t errlen);

/* Move the head to new_head (head <= new_head <= tail). Its files stay:
 * the head an open reads back (LevelDB's, the redo's) may lag this one until
 * a checkpoint covers the move, and the open needs the file its head lies in
 * (cq_release_below deletes them then). */
int cq_advance_head(cq_t *q, uint64_t new_head, char *err, size_t errlen);

/* Delete the files whose entries all lie below both durable_head (a head an
 * open reads back: the one a finished checkpoint covers) and the head. A
 * failed delete is reported; the next open deletes the file. */
int cq_release_below(cq_t *q, uint64_t durable_head, char *err, size_t errlen);

/* Write buffered entries (cq_flush); and fdatasync the files written since the
 * last cq_sync (cq_sync). */
int cq_flush(cq_t *q, char *err, size_t errlen);
int cq_sync(cq_t *q, char *err, size_t errlen);

/* cq_sync split for another thread (levels/fixfile.h's handoff): write the
 * buffer and add each file written since the last sync (every file: `all`)
 * to s, to be fdatasynced by fixfile_syncset_run. 0, or -1 with err. */
int cq_sync_handoff(cq_t *q, int all, fixfile_syncset_t *s, char *err, size_t errlen);

/* Flush and free (also when the flush fails: then -1). q may be NULL. */
int cq_close(cq_t *q, char *err, size_t errlen);

uint64_t cq_head(const cq_t *q);
uint64_t cq_tail(const cq_t *q);

/* 1 when name is a CQ file's (cq-<queue>-<first>.q), with *queue and
 * *first; else 0. */
int cq_file_parse(const char *name, uint32_t *queue, uint64_t *first);

/* Delete every CQ file in dir for which doomed(ctx, queue, first) is
 * non-zero (first: the index of the file's first entry), with one read of
 * the directory: files nothing opens or writes any more (the caller's to
 * know; a queue open in a cq_t is closed first). *removed counts the files
 * deleted. 0, or -1 with err naming the first file not deleted (the others
 * are still tried). */
typedef int (*cq_doomed_fn)(void *ctx, uint32_t queue, uint64_t first);
int cq_remove_queues(const char *dir, cq_doomed_fn doomed, void *ctx, uint64_t *removed, char *err, size_t errlen);

/* The file name of the file holding index (cq-<queue>-<first>.q) into
 * name[len]; for messages and tests. */
void cq_file_name(uint32_t queue, uint64_t index, char *name, size_t len);

#endif
