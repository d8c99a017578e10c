/*
 * levels/clog.c — the commit log's segments, batches, syncs and reads
 * (contracts in levels/clog.h; design in docs/design-commitlog.md §2–3).
 *
 * Layout. Segment header (32 bytes, big-endian): "HGCLOGS1", base u64, life
 * u64, size in KiB u32, CRC-32C of the 28 bytes before it u32. Record header
 * (32 bytes): CRC-32C u32 of everything after it up to the payload's end,
 * type u8, three zero bytes, payload length u32, distance from the batch's
 * first record u32, offset u64, life u64; the payload follows, padded with
 * zeros to 8 bytes. COMMIT payload: D u64, previous batch's end u64, data
 * records u32, batch CRC u32 = the CRC-32Cs of the data records' CRCs in
 * runs of 256, XORed (each byte is checksummed once; the batch CRC binds the
 * set; order is bound by each record naming its offset).
 *
 * Why a life and not only the offset: a recycled segment's old records carry
 * old offsets, but a payload can hold a well-formed record at a guessable
 * offset; the life is random and never leaves the file, so a forged record
 * fails it (the where-slots of step 2 stay the rule for ids, design §2).
 *
 * This file is the log's segments: made (pre-written) and recycled, their
 * headers, the write helpers the log's files share, the close. Batches
 * appended and synced are clog_append.c, records read and walked
 * clog_read.c, the open and its end rule clog_open.c; what they share is
 * clog_internal.h.
 */
#define _GNU_SOURCE
#include "levels/clog_internal.h"
#include "base/alloc.h"
#include "base/err.h"
#include "levels/keys.h"
#include "levels/store.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>


void clog_seg_path(const clog_t *c, uint64_t base, char *p, size_t n)
{
    snprintf(p, n, "%s/clog-%016" PRIx64 ".seg", c->dir, base);
}

/* The index of the first segment whose base is at or above `base` (nsegs: none). */
static size_t seg_index_at_or_above(const clog_t *c, uint64_t base)
{
    size_t lo = 0, hi = c->nsegs;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (c->segs[mid].base < base) {
            lo = mid + 1;
        } else {
            hi = mid;
        }
    }
    return lo;
}

seg_t *clog_seg_find(clog_t *c, uint64_t base)
{
    size_t i = seg_index_at_or_above(c, base);
    return i < c->nsegs && c->segs[i].base == base ? &c->segs[i] : NULL;
}

seg_t *clog_next_spare(const clog_t *c)
{
    for (size_t i = 0; i < c->nsegs; i++) {
        if (c->segs[i].spare) {
            return &c->segs[i];
        }
    }
    return NULL;
}

int clog_seg_cmp(const void *a, const void *b)
{
    uint64_t x = ((const seg_t *)a)->base, y = ((const seg_t *)b)->base;
    return x < y ? -1 : x > y;
}

/* Owner thread: add or re-sort under the lock (the syncer reads the array). */
void clog_seg_insert(clog_t *c, seg_t s)
{
    pthread_mutex_lock(&c->lock);
    if (c->nsegs == c->cap) {
        c->cap = c->cap ? c->cap * 2 : 8;
        c->segs = xrealloc(c->segs, c->cap * sizeof *c->segs);
    }
    c->segs[c->nsegs++] = s;
    qsort(c->segs, c->nsegs, sizeof *c->segs, clog_seg_cmp);
    pthread_mutex_unlock(&c->lock);
}

/* A write system call of the owner failed (errno says why): its errno kept
 * for clog_write_errno and the message "<what>: <strerror>" in err. -1. */
int clog_write_failed(clog_t *c, char *err, size_t errlen, const char *fmt, ...)
{
    int e = errno;
    char what[2 * PATH_MAX + 128];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    c->write_errno = e;
    return err_set(err, errlen, "%s: %s", what, strerror(e));
}

int clog_write_errno(const clog_t *c)
{
    return c->write_errno;
}

int clog_pwrite_all(int fd, const void *p, size_t n, uint64_t at)
{
    const char *q = p;
    while (n > 0) {
        ssize_t k = pwrite(fd, q, n, (off_t)at);
        if (k < 0 && errno == EINTR) {
            continue;
        }
        if (k <= 0) {
            if (k == 0) {
                errno = EIO; /* no progress and no error: not a stale errno */
            }
            return -1;
        }
        q += k;
        n -= (size_t)k;
        at += (uint64_t)k;
    }
    return 0;
}

/* 0, 1 when the file ends first, -1 with errno. */
int clog_pread_all(int fd, void *p, size_t n, uint64_t at)
{
    char *q = p;
    while (n > 0) {
        ssize_t k = pread(fd, q, n, (off_t)at);
        if (k < 0 && errno == EINTR) {
            continue;
        }
        if (k < 0) {
            return -1;
        }
        if (k == 0) {
            return 1;
        }
        q += k;
        n -= (size_t)k;
        at += (uint64_t)k;
    }
    return 0;
}

int clog_sync_dir(const clog_t *c, char *err, size_t errlen)
{
    int fd = open(c->dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0 || fsync(fd) != 0) {
        int e = errno;
        if (fd >= 0) {
            close(fd);
        }
        return err_set(err, errlen, "cannot sync directory %s: %s", c->dir, strerror(e));
    }
    close(fd);
    return 0;
}

uint64_t clog_new_life(void)
{
    uint64_t life = 0;
    while (getrandom(&life, sizeof life, 0) != (ssize_t)sizeof life) {
    }
    return life;
}

void clog_header_encode(char *h, uint64_t base, uint64_t life, uint64_t size)
{
    memcpy(h, SEG_MAGIC, 8);
    be64_put(h + 8, base);
    be64_put(h + 16, life);
    be32_put(h + 24, (uint32_t)(size >> 10));
    be32_put(h + 28, store_crc32c(h, 28));
}

/* Write a new header (a new life) into fd and sync it. */
int clog_header_write(clog_t *c, int fd, uint64_t base, uint64_t life, const char *path, char *err, size_t errlen)
{
    char h[CLOG_SEGMENT_HEADER];
    clog_header_encode(h, base, life, c->size);
    if (clog_pwrite_all(fd, h, sizeof h, 0) != 0 || fdatasync(fd) != 0) {
        return clog_write_failed(c, err, errlen, "cannot write the header of %s", path);
    }
    return 0;
}

/* Write zeros into fd over [from, to) of a segment being pre-written (tmp:
 * its path, for the error). */
static int prewrite_zeros(clog_t *c, int fd, uint64_t from, uint64_t to, const char *tmp, char *err, size_t errlen)
{
    uint64_t at = 0;
    if (clog_zeros_write(fd, from, to, 0, &at) != 0) {
        return clog_write_failed(c, err, errlen, "cannot pre-write %s at byte %" PRIu64, tmp, at);
    }
    return 0;
}

/* The wholly pre-written file fd at tmp becomes the spare at base: a header
 * with a new life, the file synced, renamed into place, the directory synced,
 * added as a spare. On failure fd is closed and tmp removed; -1 with err. */
int clog_seg_finish(clog_t *c, int fd, const char *tmp, uint64_t base, char *err, size_t errlen)
{
    char path[PATH_MAX];
    clog_seg_path(c, base, path, sizeof path);
    uint64_t life = clog_new_life();
    int rc = clog_header_write(c, fd, base, life, tmp, err, errlen);
    if (rc == 0 && rename(tmp, path) != 0) {
        rc = clog_write_failed(c, err, errlen, "cannot rename %s to %s", tmp, path);
    }
    if (rc == 0) {
        rc = clog_sync_dir(c, err, errlen);
    }
    if (rc != 0) {
        close(fd);
        unlink(tmp);
        return -1;
    }
    /* not resident: the pre-writer's zeros bypass the page cache where O_DIRECT is taken; where they did not,
       the read-back finds every chunk cached and reads nothing (a few mincore calls) */
    clog_seg_insert(c, (seg_t){ base, life, fd, 1, 0, 0 });
    return 0;
}

/* Pre-write a segment at base (zeros, header, synced, renamed into place) and
 * add it as a spare. */
int clog_seg_create(clog_t *c, uint64_t base, char *err, size_t errlen)
{
    char path[PATH_MAX], tmp[PATH_MAX + 8];
    clog_seg_path(c, base, path, sizeof path);
    snprintf(tmp, sizeof tmp, "%s.new", path);
    int fd = open(tmp, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0) {
        return clog_write_failed(c, err, errlen, "cannot create %s", tmp);
    }
    if (prewrite_zeros(c, fd, 0, c->size, tmp, err, errlen) != 0) {
        close(fd);
        unlink(tmp);
        return -1;
    }
    return clog_seg_finish(c, fd, tmp, base, err, errlen);
}


void clog_close(clog_t *c)
{
    if (c == NULL) {
        return;
    }
    clog_prewriter_stop(&c->pre); /* a spare half pre-written, or never taken: not one */
    for (size_t i = 0; i < c->nsegs; i++) {
        close(c->segs[i].fd);
    }
    free(c->segs);
    pthread_mutex_destroy(&c->lock);
    pthread_mutex_destroy(&c->sync_lock);
    free(c->dir);
    free(c);
}

uint64_t clog_end(const clog_t *c)
{
    return c->tail;
}

uint64_t clog_durable(const clog_t *c)
{
    return atomic_load(&((clog_t *)c)->durable);
}

/* ---- spares and recycling ---------------------------------------------------------- */

static uint64_t past_every_segment(const clog_t *c)
{
    uint64_t b = seg_base_of(c, c->end);
    if (c->nsegs > 0 && c->segs[c->nsegs - 1].base + c->size > b) {
        b = c->segs[c->nsegs - 1].base + c->size;
    }
    return b;
}

size_t clog_spare_count(const clog_t *c)
{
    size_t n = 0;
    for (size_t i = 0; i < c->nsegs; i++) {
        n += c->segs[i].spare;
    }
    return n;
}

int clog_prepare(clog_t *c, unsigned spares, char *err, size_t errlen)
{
    c->write_errno = 0;
    size_t have = clog_spare_count(c); /* wherever they lie: a switch takes any spare */
    while (have < spares) {
        uint64_t b = seg_base_of(c, c->end);
        while (clog_seg_find(c, b) != NULL) {
            b += c->size;
        }
        if (clog_seg_create(c, b, err, errlen) != 0) {
            return -1;
        }
        have++;
    }
    return 0;
}

/* Does a spare wait, or was the pre-write refused in the log end's segment?
 * Then no spare is asked for. */
static int step_needless(const clog_t *c)
{
    return seg_base_of(c, c->end) == c->step_refused_seg || clog_next_spare(c) != NULL;
}

uint64_t clog_prepare_left(const clog_t *c)
{
    uint64_t left = clog_prewriter_left((clog_prewriter_t *)&c->pre); /* its mutex: not a change of the log */
    if (left != UINT64_MAX) {
        return left;
    }
    return step_needless(c) ? 0 : c->size;
}

/* The spare the next switch takes (the lowest: clog_append.c's seg_ready),
 * handed to the pre-writer thread to read back once it is free — on that
 * thread, not this one: at 1 MiB a chunk a cold read is ~1–5 ms, which the
 * storage thread's jobs would wait out. The thread reads through a duplicate
 * of the spare's descriptor, so the log's list and the spare stay the owner's.
 * Asked when its pages may be evicted (recycled, or found by the open), and
 * once more when the log's end enters its segment's second half: on a quiet
 * log a spare read back right after the last switch waits many minutes for
 * the next, and may leave the page cache again meanwhile (the thread skips
 * the chunks still cached, so a spare still whole costs a few system calls). */
static void warm_next_spare(clog_t *c)
{
    seg_t *next = clog_next_spare(c);
    uint64_t seg = seg_base_of(c, c->end);
    int second_half = c->end - seg >= c->size / 2;
    if (next == NULL || (next->resident && (!second_half || c->spare_rechecked_seg == seg)) ||
        !clog_prewriter_warm(&c->pre, next->fd)) {
        return;
    }
    if (!next->resident) {
        pthread_mutex_lock(&c->lock); /* the syncer reads the array under it */
        next->resident = 1;
        pthread_mutex_unlock(&c->lock);
    }
    c->spare_rechecked_seg = second_half ? seg : UINT64_MAX; /* read in this half: none again before the next */
}

void clog_read_back_counts(clog_t *c, uint64_t *spares, uint64_t *bytes, uint64_t *failures)
{
    clog_prewriter_warm_counts(&c->pre, spares, bytes, failures);
}

int clog_prepare_step(clog_t *c, unsigned pace_ms, char *err, size_t errlen)
{
    if (c->switch_failure[0] != '\0') {
        err_set(err, errlen, "%s", c->switch_failure);
        c->switch_failure[0] = '\0';
        return -1;
    }
    int write_errno = c->write_errno; /* clog_write_errno speaks of the appends, not of this */
    uint64_t seg = seg_base_of(c, c->end);
    int want = pace_ms != CLOG_PREPARE_HOLD && !step_needless(c);
    int fd = -1;
    int state = clog_prewriter_poll(&c->pre, want, pace_ms, &fd, err, errlen);
    if (state == CLOG_PREWRITE_IDLE) {
        if (!want && pace_ms != CLOG_PREPARE_HOLD) {
            warm_next_spare(c);
        }
        return 0;
    }
    int rc = -1;
    if (state == CLOG_PREWRITE_READY) {
        rc = clog_seg_finish(c, fd, c->pre.path, past_every_segment(c), err, errlen) == 0
                 ? 1
                 : -1; /* closes fd on failure */
    }
    if (rc < 0) {
        c->step_refused_seg = seg;
        c->write_errno = write_errno;
    }
    return rc;
}

int clog_is_spare(const clog_t *c, uint64_t base)
{
    const seg_t *s = clog_seg_find((clog_t *)c, base);
    return s != NULL && s->spare;
}

int clog_has_segment(const clog_t *c, uint64_t base)
{
    return clog_seg_find((clog_t *)c, base) != NULL;
}

size_t clog_segments_below(const clog_t *c, uint64_t from, uint64_t below, uint64_t *out, size_t max)
{
    size_t n = 0;
    for (size_t i = seg_index_at_or_above(c, from); i < c->nsegs && n < max; i++) {
        const seg_t *s = &c->segs[i];
        if (s->base > below || below - s->base < c->size) { /* sorted: every later one reaches `below` too */
            break;
        }
        if (!s->spare) {
            out[n++] = s->base;
        }
    }
    return n;
}

int clog_recycle(clog_t *c, uint64_t base, char *err, size_t errlen)
{
    char from[PATH_MAX], to[PATH_MAX];
    clog_seg_path(c, base, from, sizeof from);
    seg_t *s = clog_seg_find(c, base);
    if (s == NULL) {
        return err_set(err, errlen, "%s: no such commit log segment to recycle", from);
    }
    if (base + c->size > atomic_load(&c->durable) || seg_base_of(c, c->end) == base || s->spare) {
        return err_set(err, errlen,
                       "%s: offset %" PRIu64
                       ": cannot recycle a segment in use or not wholly durable (durable end %" PRIu64 ")",
                       from, base, atomic_load(&c->durable));
    }
    uint64_t keep = atomic_load(&c->keep_from); /* only ever raised while the log runs: a stale value refuses more */
    if (keep != UINT64_MAX && base + c->size >= keep) {
        return err_set(err, errlen,
                       "%s: offset %" PRIu64 ": cannot recycle a segment at or past the log's checkpoint %" PRIu64
                       " (the next open follows the chain from there: take a checkpoint past the segment first)",
                       from, base, keep);
    }
    uint64_t nb = past_every_segment(c);
    clog_seg_path(c, nb, to, sizeof to);
    uint64_t life = clog_new_life();
    if (clog_header_write(c, s->fd, nb, life, from, err, errlen) != 0) {
        return -1;
    }
    if (rename(from, to) != 0) {
        return err_set(err, errlen, "cannot rename %s to %s: %s", from, to, strerror(errno));
    }
    pthread_mutex_lock(&c->lock);
    s->base = nb;
    s->life = life;
    s->spare = 1;
    s->abandoned = 0; /* a new life: synced as any segment once it holds batches again */
    s->resident = 0;  /* its pages were written a segment's lifetime ago: read back before a switch takes it */
    qsort(c->segs, c->nsegs, sizeof *c->segs, clog_seg_cmp);
    pthread_mutex_unlock(&c->lock);
    return clog_sync_dir(c, err, errlen);
}

void clog_keep_from(clog_t *c, uint64_t from)
{
    atomic_store(&c->keep_from, from);
}
