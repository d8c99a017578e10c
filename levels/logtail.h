/*
 * levels/logtail.h — a torn write at the end of a data directory's newest
 * LevelDB write-ahead log (the NNNNNN.log with the highest number): found,
 * and cut off so that the directory opens. The newest log is the newest that
 * is not empty: a power cut right after LevelDB switched to a new log can
 * leave that one empty and the torn write at the end of the one before.
 * Also: a hole (damage with whole records after it) in any log located, and
 * whether a given byte string (a key) is written after it.
 *
 * Why: the store opens LevelDB with paranoid checks, so any log record that
 * fails its checksum stops the open ("Corruption: checksum mismatch"). A
 * power cut in the middle of a write leaves exactly that at the log's end:
 * the header of the last record written and only part of its body (zeros or
 * stale bytes where the rest should be). That record's batch was never
 * fsynced, so under `fsync always` none of its replies went out (the syncer
 * posts them only after fdatasync); under `fsync no` losing it is the
 * documented price. Such a tail is cut at the end of the last whole record,
 * and its bytes are kept beside the log, in NNNNNN.log.torn-OFFSET, for a
 * post-mortem. Damage followed by whole records (a record of some later
 * write intact after it) is not a torn end: it is left alone, and the open
 * fails as before, naming it.
 *
 * The log format (LevelDB's doc/log_format.md): 32 KiB blocks of records,
 * each a 7-byte header (masked CRC-32C of type and data, little-endian; a
 * 16-bit length; a type: FULL 1, FIRST 2, MIDDLE 3, LAST 4; 0 is padding)
 * and its data; a block's last 6 bytes or fewer are zeros.
 *
 * Threading: any thread, on a directory no open store holds.
 * Errors: 0 / -1 with the cause in err[errlen], naming the file.
 */
#ifndef HG_LEVELS_LOGTAIL_H
#define HG_LEVELS_LOGTAIL_H

#include <stddef.h>
#include <stdint.h>

typedef struct logtail {
    char file[64];     /* the newest non-empty log's name ("000003.log"); "" when there is none */
    uint64_t size;     /* its size in bytes */
    uint64_t good_end; /* where its last whole record ends (size when nothing is wrong) */
    uint64_t damage;   /* where the first damaged record starts (size when none) */
    int torn;          /* 1: damaged from `damage` on, nothing whole after it: a torn end */
} logtail_t;

/* Read the newest non-empty log of dir and say what its end holds: 0 with *t filled
 * (t->torn 0 also when the damage is followed by whole records), -1 when the
 * directory or the log cannot be read. */
int logtail_inspect(const char *dir, logtail_t *t, char *err, size_t errlen);

/* A hole: damage in a log, torn or with whole records after it, anywhere in
 * the logs LevelDB would replay (every NNNNNN.log, oldest first). Store use
 * (levels/store.c): a hole after the commit log's last checkpoint mark is a
 * power cut's loss of unsynced writes, which the redo from B rewrites; a
 * hole below it is damage. */
#define LOGTAIL_NEEDLE_MAX 32
typedef struct loghole {
    char file[64];    /* the first damaged log ("" when no log is damaged) */
    uint64_t at;      /* where its damage starts */
    uint64_t size;    /* its size */
    int needle_after; /* 1: a record after the damage (in that log or a later one) holds the needle */
} loghole_t;

/* Find the first damaged record of dir's logs (walked as logtail_inspect
 * walks one) and whether any record after it that passes its checksum holds
 * needle[0, needle_len) (1 to LOGTAIL_NEEDLE_MAX bytes; also found across
 * two fragments of one record). 0 with *h filled, -1 with err naming the
 * file that cannot be read. */
int logtail_find_hole(const char *dir, const void *needle, size_t needle_len, loghole_t *h, char *err, size_t errlen);

/* Copy bytes [from, end) of dir/file into dir/file.hole-<from> (its path
 * into kept), fsynced with the directory: what a replay past a hole drops,
 * kept for a post-mortem. 0, or -1 with err. */
int logtail_keep_from(const char *dir, const char *file, uint64_t from, char *kept, size_t keptlen, char *err,
                      size_t errlen);

/* Cut a torn end that logtail_inspect found (t->torn): its bytes from
 * t->good_end on are written to <file>.torn-<good_end> and fsynced, then the
 * log is truncated to t->good_end and fsynced. 0, or -1 with nothing cut. */
int logtail_cut(const char *dir, const logtail_t *t, char *err, size_t errlen);

#endif
