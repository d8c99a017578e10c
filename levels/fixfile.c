/*
 * levels/fixfile.c — a file of fixed-size records by position, with an append
 * buffer (contract in fixfile.h).
 *
 * State: the file's descriptor, `end` (records that exist), `flushed` (records
 * [0, flushed) are in the file; [flushed, end) only in `buf`), `capacity` (0
 * for a growing file). The buffer is allocated at the first append, so the
 * files a queue only reads (all but its tail file) cost no memory beyond the
 * struct. A pre-written file is zero-filled in 256 KiB writes under a `.new`
 * name, fsynced, renamed and its directory fsynced: a crash never leaves a
 * half-made file under the real name.
 *
 * An overwrite below the buffer is held too (up to FIXFILE_HELD records, in
 * the order made) and written at the next flush, each run of consecutive
 * records by one pwrite, the last write of a record winning: a where-slot is
 * rewritten at every move of its message (design-commitlog.md §2), and one
 * pwrite per move was one system call per message (4a.3 done (s43)). Reads
 * lay the held records over what they read.
 */
#include "levels/fixfile.h"
#include "base/alloc.h"
#include "base/err.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <libgen.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define FIXFILE_ZERO_CHUNK (256 * 1024)
#define FIXFILE_HELD       1024 /* overwrites below the buffer held until a flush */

/* A held overwrite: its record index and its place in the order made. */
typedef struct held {
    uint64_t index;
    uint32_t order;
} held_t;

struct fixfile {
    int fd;
    int dirty; /* written since the last fdatasync */
    size_t rec;
    uint64_t capacity; /* 0: growing */
    uint64_t end, flushed;
    size_t buf_records;
    char *buf;       /* buf_records records: [flushed, end); NULL until the first append */
    held_t *held;    /* overwrites of records below `flushed`, nheld of them; NULL until the first */
    char *held_recs; /* their records, by order */
    size_t nheld;
    int held_unsorted; /* held[] is not in index order (a write below the one before it): sort before writing */
    char path[PATH_MAX];
};

static int fixfile_fsync_dir(const char *path, char *err, size_t errlen)
{
    char dir[PATH_MAX];
    snprintf(dir, sizeof dir, "%s", path);
    const char *d = dirname(dir);
    int fd = open(d, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0 || fsync(fd) != 0) {
        int e = errno;
        if (fd >= 0) {
            close(fd);
        }
        return err_set(err, errlen, "%s: cannot fsync the directory: %s", d, strerror(e));
    }
    close(fd);
    return 0;
}

static int fixfile_pwrite(fixfile_t *f, const char *p, size_t n, uint64_t index, char *err, size_t errlen)
{
    off_t off = (off_t)(index * f->rec);
    while (n > 0) {
        ssize_t k = pwrite(f->fd, p, n, off);
        if (k < 0 && errno == EINTR) {
            continue;
        }
        if (k <= 0) {
            return err_set(err, errlen, "%s: cannot write record %" PRIu64 ": %s", f->path, index,
                           k < 0 ? strerror(errno) : "no progress");
        }
        p += k;
        n -= (size_t)k;
        off += k;
    }
    f->dirty = 1;
    return 0;
}

static fixfile_t *fixfile_new(int fd, const char *path, size_t rec, uint64_t capacity, uint64_t end, size_t buf_records)
{
    fixfile_t *f = xcalloc(1, sizeof *f);
    f->fd = fd;
    f->rec = rec;
    f->capacity = capacity;
    f->end = f->flushed = end;
    f->buf_records = buf_records > 0 ? buf_records : 1;
    snprintf(f->path, sizeof f->path, "%s", path);
    return f;
}

static int fixfile_zero_fill(int fd, const char *tmp, uint64_t bytes, char *err, size_t errlen)
{
    char *zeros = xcalloc(1, FIXFILE_ZERO_CHUNK);
    uint64_t at = 0;
    int rc = 0;
    while (at < bytes && rc == 0) {
        size_t n = bytes - at < FIXFILE_ZERO_CHUNK ? (size_t)(bytes - at) : FIXFILE_ZERO_CHUNK;
        ssize_t k = pwrite(fd, zeros, n, (off_t)at);
        if (k < 0 && errno == EINTR) {
            continue;
        }
        if (k <= 0) {
            rc = err_set(err, errlen, "%s: cannot pre-write at byte %" PRIu64 ": %s", tmp, at,
                         k < 0 ? strerror(errno) : "no progress");
        }
        at += k > 0 ? (uint64_t)k : 0;
    }
    free(zeros);
    return rc;
}

int fixfile_create(const char *path, size_t record_bytes, uint64_t capacity, size_t buf_records, fixfile_t **out,
                   char *err, size_t errlen)
{
    *out = NULL;
    struct stat st;
    if (stat(path, &st) == 0) {
        return err_set(err, errlen, "%s: already exists (refusing to make it again)", path);
    }
    char tmp[PATH_MAX];
    int n = snprintf(tmp, sizeof tmp, "%s.new", path);
    if (n < 0 || (size_t)n >= sizeof tmp) {
        return err_set(err, errlen, "%s: path too long", path);
    }
    const char *made = capacity > 0 ? tmp : path;
    int fd = open(made, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC | (capacity > 0 ? 0 : O_EXCL), 0600);
    if (fd < 0) {
        return err_set(err, errlen, "%s: cannot create: %s", made, strerror(errno));
    }
    if (capacity > 0 && fixfile_zero_fill(fd, tmp, capacity * record_bytes, err, errlen) != 0) {
        close(fd);
        unlink(tmp);
        return -1;
    }
    if (fdatasync(fd) != 0) {
        int e = errno;
        close(fd);
        unlink(made);
        return err_set(err, errlen, "%s: cannot fdatasync: %s", made, strerror(e));
    }
    if (capacity > 0 && rename(tmp, path) != 0) {
        int e = errno;
        close(fd);
        unlink(tmp);
        return err_set(err, errlen, "%s: cannot rename %s into place: %s", path, tmp, strerror(e));
    }
    if (fixfile_fsync_dir(path, err, errlen) != 0) {
        close(fd);
        return -1;
    }
    *out = fixfile_new(fd, path, record_bytes, capacity, 0, buf_records);
    return 0;
}

int fixfile_open(const char *path, size_t record_bytes, uint64_t capacity, uint64_t end, size_t buf_records,
                 fixfile_t **out, char *err, size_t errlen)
{
    *out = NULL;
    int fd = open(path, O_RDWR | O_CLOEXEC);
    if (fd < 0) {
        return err_set(err, errlen, "%s: cannot open: %s", path, strerror(errno));
    }
    struct stat st;
    if (fstat(fd, &st) != 0) {
        int e = errno;
        close(fd);
        return err_set(err, errlen, "%s: cannot stat: %s", path, strerror(e));
    }
    uint64_t size = (uint64_t)st.st_size;
    if (capacity > 0 && size != capacity * record_bytes) {
        close(fd);
        return err_set(err, errlen,
                       "%s: %" PRIu64 " bytes, want %" PRIu64 " (%" PRIu64 " records of %zu): short or damaged file",
                       path, size, capacity * record_bytes, capacity, record_bytes);
    }
    if (capacity > 0 && end > capacity) {
        close(fd);
        return err_set(err, errlen, "%s: end %" PRIu64 " is past the file's %" PRIu64 " records", path, end, capacity);
    }
    if (capacity == 0 && size % record_bytes != 0) {
        close(fd);
        return err_set(err, errlen,
                       "%s: %" PRIu64
                       " bytes is not a whole number of %zu-byte records (a torn or damaged last record at %" PRIu64
                       ")",
                       path, size, record_bytes, size / record_bytes);
    }
    *out = fixfile_new(fd, path, record_bytes, capacity, capacity > 0 ? end : size / record_bytes, buf_records);
    return 0;
}

static int by_index_then_order(const void *a, const void *b)
{
    const held_t *x = a, *y = b;
    if (x->index != y->index) {
        return x->index < y->index ? -1 : 1;
    }
    return x->order < y->order ? -1 : x->order > y->order;
}

/* Write the held overwrites: sorted by record (unless made in that order),
 * the last of each record kept, runs of consecutive records one pwrite each (gathered in a scratch
 * buffer). 0, or -1 with err: the records stay held. */
static int write_held(fixfile_t *f, char *err, size_t errlen)
{
    if (f->nheld == 0) {
        return 0;
    }
    if (f->held_unsorted) { /* where-slots are mostly rewritten in id order: then already sorted */
        qsort(f->held, f->nheld, sizeof *f->held, by_index_then_order);
        f->held_unsorted = 0;
    }
    char *run = xmalloc(f->nheld * f->rec);
    size_t n = 0;
    uint64_t first = 0;
    int rc = 0;
    for (size_t i = 0; i < f->nheld && rc == 0; i++) {
        if (i + 1 < f->nheld && f->held[i + 1].index == f->held[i].index) {
            continue; /* a later write of the same record follows */
        }
        if (n > 0 && f->held[i].index != first + n) {
            rc = fixfile_pwrite(f, run, n * f->rec, first, err, errlen);
            n = 0;
        }
        if (n == 0) {
            first = f->held[i].index;
        }
        memcpy(run + n * f->rec, f->held_recs + (size_t)f->held[i].order * f->rec, f->rec);
        n++;
    }
    if (rc == 0 && n > 0) {
        rc = fixfile_pwrite(f, run, n * f->rec, first, err, errlen);
    }
    free(run);
    if (rc == 0) {
        f->nheld = 0;
    }
    return rc;
}

int fixfile_flush(fixfile_t *f, char *err, size_t errlen)
{
    if (write_held(f, err, errlen) != 0) {
        return -1;
    }
    if (f->end == f->flushed) {
        return 0;
    }
    if (fixfile_pwrite(f, f->buf, (size_t)(f->end - f->flushed) * f->rec, f->flushed, err, errlen) != 0) {
        return -1;
    }
    f->flushed = f->end;
    return 0;
}

int fixfile_sync(fixfile_t *f, char *err, size_t errlen)
{
    if (fixfile_flush(f, err, errlen) != 0) {
        return -1;
    }
    if (f->dirty && fdatasync(f->fd) != 0) {
        return err_set(err, errlen, "%s: cannot fdatasync: %s", f->path, strerror(errno));
    }
    f->dirty = 0;
    return 0;
}

int fixfile_sync_handoff(fixfile_t *f, int all, fixfile_syncset_t *s, char *err, size_t errlen)
{
    if (fixfile_flush(f, err, errlen) != 0) {
        return -1;
    }
    if (!f->dirty && !all) {
        return 0;
    }
    int fd = fcntl(f->fd, F_DUPFD_CLOEXEC, 0);
    if (fd < 0) {
        return err_set(err, errlen, "%s: cannot duplicate its descriptor for a sync: %s", f->path, strerror(errno));
    }
    if (s->n == s->cap) {
        s->cap = s->cap ? s->cap * 2 : 16;
        s->v = xrealloc(s->v, s->cap * sizeof *s->v);
    }
    s->v[s->n++] = (struct fixfile_syncfd){ fd, xstrdup(f->path) };
    f->dirty = 0;
    return 0;
}

int fixfile_syncset_run(const fixfile_syncset_t *s, char *err, size_t errlen)
{
    int rc = 0;
    for (size_t i = 0; i < s->n; i++) {
        if (fdatasync(s->v[i].fd) != 0 && rc == 0) {
            rc = err_set(err, errlen, "%s: cannot fdatasync: %s", s->v[i].path, strerror(errno));
        }
    }
    return rc;
}

void fixfile_syncset_clear(fixfile_syncset_t *s)
{
    for (size_t i = 0; i < s->n; i++) {
        close(s->v[i].fd);
        free(s->v[i].path);
    }
    free(s->v);
    memset(s, 0, sizeof *s);
}

int fixfile_append(fixfile_t *f, const void *record, char *err, size_t errlen)
{
    if (f->capacity > 0 && f->end >= f->capacity) {
        return err_set(err, errlen, "%s: full at %" PRIu64 " records (append refused)", f->path, f->capacity);
    }
    if (f->buf == NULL) {
        f->buf = xmalloc(f->buf_records * f->rec);
    }
    if (f->end - f->flushed == f->buf_records && fixfile_flush(f, err, errlen) != 0) {
        return -1;
    }
    memcpy(f->buf + (size_t)(f->end - f->flushed) * f->rec, record, f->rec);
    f->end++;
    return 0;
}

int fixfile_write(fixfile_t *f, uint64_t index, const void *record, char *err, size_t errlen)
{
    if (index >= f->end) {
        return err_set(err, errlen, "%s: record %" PRIu64 " is past the end (%" PRIu64 " records)", f->path, index,
                       f->end);
    }
    if (index >= f->flushed) {
        memcpy(f->buf + (size_t)(index - f->flushed) * f->rec, record, f->rec);
        return 0;
    }
    if (f->nheld == FIXFILE_HELD && write_held(f, err, errlen) != 0) {
        return -1;
    }
    if (f->held == NULL) {
        f->held = xmalloc(FIXFILE_HELD * sizeof *f->held);
        f->held_recs = xmalloc(FIXFILE_HELD * f->rec);
    }
    if (f->nheld > 0 && f->held[f->nheld - 1].index == index) { /* the same record again: in place */
        memcpy(f->held_recs + (size_t)f->held[f->nheld - 1].order * f->rec, record, f->rec);
        return 0;
    }
    if (f->nheld > 0 && index < f->held[f->nheld - 1].index) {
        f->held_unsorted = 1;
    }
    f->held[f->nheld] = (held_t){ index, (uint32_t)f->nheld };
    memcpy(f->held_recs + f->nheld * f->rec, record, f->rec);
    f->nheld++;
    return 0;
}

int fixfile_read(fixfile_t *f, uint64_t index, size_t n, void *out, char *err, size_t errlen)
{
    if (index > f->end || n > f->end - index) {
        return err_set(err, errlen, "%s: records [%" PRIu64 ", %" PRIu64 ") are past the end (%" PRIu64 " records)",
                       f->path, index, index + n, f->end);
    }
    uint64_t from = index, count = n;
    char *o = out;
    if (index < f->flushed) {
        size_t from_file = index + n <= f->flushed ? n : (size_t)(f->flushed - index);
        size_t want = from_file * f->rec, got = 0;
        while (got < want) {
            ssize_t k = pread(f->fd, o + got, want - got, (off_t)(index * f->rec + got));
            if (k < 0 && errno == EINTR) {
                continue;
            }
            if (k <= 0) {
                return err_set(err, errlen, "%s: cannot read record %" PRIu64 ": %s", f->path, index + got / f->rec,
                               k < 0 ? strerror(errno) : "the file ends there (cut underneath?)");
            }
            got += (size_t)k;
        }
        o += want;
        index += from_file;
        n -= from_file;
    }
    if (n > 0) {
        memcpy(o, f->buf + (size_t)(index - f->flushed) * f->rec, n * f->rec);
    }
    for (size_t i = 0; i < f->nheld; i++) { /* in the order made: the last write of a record wins */
        uint64_t at = f->held[i].index;
        if (at >= from && at - from < count) {
            memcpy((char *)out + (size_t)(at - from) * f->rec, f->held_recs + (size_t)f->held[i].order * f->rec,
                   f->rec);
        }
    }
    return 0;
}

int fixfile_close(fixfile_t *f, char *err, size_t errlen)
{
    if (f == NULL) {
        return 0;
    }
    uint64_t pending = f->end - f->flushed + f->nheld;
    int rc = fixfile_flush(f, err, errlen);
    if (rc != 0) {
        err_prefix(err, errlen, "%" PRIu64 " buffered records lost", pending);
    }
    close(f->fd);
    free(f->buf);
    free(f->held);
    free(f->held_recs);
    free(f);
    return rc;
}

uint64_t fixfile_end(const fixfile_t *f)
{
    return f->end;
}

const char *fixfile_path(const fixfile_t *f)
{
    return f->path;
}
