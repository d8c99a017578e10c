/*
 * levels/fixfile.h — one file of fixed-size records, read and written by
 * position, with an in-memory buffer for the records appended at its end.
 * The layer under the consume queues (levels/cq.h, 16-byte entries in
 * pre-written files) and the where-slot files (levels/slot.h, 24-byte slots
 * in a file that grows): both are arrays of records on disk written mostly at
 * their end and sometimes in place (docs/design-commitlog.md §2).
 *
 * A fixfile holds records [0, end). Records at or past `flushed` are in the
 * buffer only; fixfile_flush writes them with one pwrite. A write below
 * `flushed` is held (up to 1024 records, in the order made) and written by
 * the next flush, one pwrite per run of consecutive records; reads see it.
 *
 * Two shapes:
 *   pre-written: made full of zeros (written, fsynced, renamed into place) so
 *     that appends never grow the file and an fdatasync writes no metadata;
 *     its size is fixed (`capacity` records) and `end` is told by the caller
 *     at open (the file's zeros past it are not records yet).
 *   growing: made empty; `end` at open is the file's size in records.
 *
 * What it checks: at open, the size (a pre-written file must be exactly its
 * capacity; a growing one a whole number of records); on every call, that
 * the positions are inside [0, end) (an append: below the capacity). It
 * does not interpret the bytes (its users do).
 *
 * Threads: a fixfile belongs to one thread (no locks). Ownership: the caller
 * owns the fixfile_t from open/create to fixfile_close. Errors: 0 / -1 with
 * one line in err[errlen] naming the file and the record index.
 */
#ifndef HG_LEVELS_FIXFILE_H
#define HG_LEVELS_FIXFILE_H

#include <stddef.h>
#include <stdint.h>

typedef struct fixfile fixfile_t;

/* Make path: pre-written with `capacity` zero records (capacity > 0), or
 * empty (capacity 0, growing). Refuses an existing file. The file and its
 * directory are fsynced before it is opened, so a crash leaves either no file
 * or the whole zeroed one (a pre-written file is written as path.new and
 * renamed). buf_records: the append buffer's size in records (> 0). */
int fixfile_create(const char *path, size_t record_bytes, uint64_t capacity, size_t buf_records, fixfile_t **out,
                   char *err, size_t errlen);

/* Open an existing file. capacity > 0: a pre-written file that must be
 * exactly capacity records long, holding records [0, end) (end <= capacity).
 * capacity 0: a growing file; end is its size, which must be a whole number
 * of records (a torn last record is refused, naming the size). */
int fixfile_open(const char *path, size_t record_bytes, uint64_t capacity, uint64_t end, size_t buf_records,
                 fixfile_t **out, char *err, size_t errlen);

/* Record `end`, then end + 1: into the buffer (flushed first when full).
 * Refused when a pre-written file is full. */
int fixfile_append(fixfile_t *f, const void *record, char *err, size_t errlen);

/* Overwrite record index (< end) in place: in the buffer, or held (up to
 * 1024 records) and written at the next flush — runs of consecutive records
 * one pwrite each, the last write of a record winning; reads see it at once.
 * 0, or -1 with err (the held records' write failed). */
int fixfile_write(fixfile_t *f, uint64_t index, const void *record, char *err, size_t errlen);

/* Records [index, index + n) (inside [0, end)) into out: from the file (one
 * pread) and the buffer. A file shorter than it was (cut underneath) is an
 * error naming the index. */
int fixfile_read(fixfile_t *f, uint64_t index, size_t n, void *out, char *err, size_t errlen);

/* Write the buffer (one pwrite); fixfile_sync also fdatasyncs when anything
 * was written since the last sync. */
int fixfile_flush(fixfile_t *f, char *err, size_t errlen);
int fixfile_sync(fixfile_t *f, char *err, size_t errlen);

/* Flush and close; frees f even when the flush fails (then -1: the buffered
 * records are lost, the error says how many). f may be NULL. */
int fixfile_close(fixfile_t *f, char *err, size_t errlen);

/* Files to fdatasync on another thread (a checkpoint's second half, levels/
 * clog_redo.h): each a duplicate descriptor and the file's path, so the
 * owner may go on writing, close or delete the file meanwhile. Zero-
 * initialise; fixfile_syncset_clear closes and frees. The set belongs to one
 * thread at a time: the one that filled it hands it over whole. */
typedef struct fixfile_syncset {
    struct fixfile_syncfd {
        int fd;
        char *path;
    } * v;
    size_t n, cap;
} fixfile_syncset_t;

/* Owner thread: write the buffer (one pwrite, no sync) and, when anything
 * was written since the last sync or `all` is set, add a duplicate of the
 * descriptor to s; the file then counts as synced (the caller owes it the
 * fdatasync by fixfile_syncset_run: after that fails, hand every file over
 * again with `all`). 0, or -1 with err (the flush or the dup failed; s
 * unchanged). */
int fixfile_sync_handoff(fixfile_t *f, int all, fixfile_syncset_t *s, char *err, size_t errlen);

/* Any thread: fdatasync every descriptor of s. 0, or -1 with err naming the
 * first file whose sync failed (every one is still tried). */
int fixfile_syncset_run(const fixfile_syncset_t *s, char *err, size_t errlen);

/* Close every descriptor, free the paths; s is empty and reusable. */
void fixfile_syncset_clear(fixfile_syncset_t *s);

uint64_t fixfile_end(const fixfile_t *f);
const char *fixfile_path(const fixfile_t *f);

#endif
