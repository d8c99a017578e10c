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
 * This file is the running log: segments made and recycled, batches
 * appended, syncs, reads and walks. The open and its end rule are
 * clog_open.c; what the two share is clog_internal.h.
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

seg_t *clog_seg_find(clog_t *c, uint64_t base)
{
    size_t lo = 0, hi = c->nsegs;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (c->segs[mid].base == base) {
            return &c->segs[mid];
        }
        if (c->segs[mid].base < base) {
            lo = mid + 1;
        } else {
            hi = mid;
        }
    }
    return NULL;
}

static int seg_cmp(const void *a, const void *b)
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
    qsort(c->segs, c->nsegs, sizeof *c->segs, seg_cmp);
    pthread_mutex_unlock(&c->lock);
}

/* A write system call of the owner failed (errno says why): its errno kept
 * for clog_write_errno and the message "<what>: <strerror>" in err. -1. */
static int write_failed(clog_t *c, char *err, size_t errlen, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static int write_failed(clog_t *c, char *err, size_t errlen, const char *fmt, ...)
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
        return write_failed(c, err, errlen, "cannot write the header of %s", path);
    }
    return 0;
}

/* Write zeros into fd over [from, to) of a segment being pre-written (tmp:
 * its path, for the error). */
static int prewrite_zeros(clog_t *c, int fd, uint64_t from, uint64_t to, const char *tmp, char *err, size_t errlen)
{
    uint64_t at = 0;
    if (clog_zeros_write(fd, from, to, 0, &at) != 0) {
        return write_failed(c, err, errlen, "cannot pre-write %s at byte %" PRIu64, tmp, at);
    }
    return 0;
}

/* The wholly pre-written file fd at tmp becomes the spare at base: a header
 * with a new life, the file synced, renamed into place, the directory synced,
 * added as a spare. On failure fd is closed and tmp removed; -1 with err. */
static int seg_finish(clog_t *c, int fd, const char *tmp, uint64_t base, char *err, size_t errlen)
{
    char path[PATH_MAX];
    clog_seg_path(c, base, path, sizeof path);
    uint64_t life = clog_new_life();
    int rc = clog_header_write(c, fd, base, life, tmp, err, errlen);
    if (rc == 0 && rename(tmp, path) != 0) {
        rc = write_failed(c, err, errlen, "cannot rename %s to %s", tmp, path);
    }
    if (rc == 0) {
        rc = clog_sync_dir(c, err, errlen);
    }
    if (rc != 0) {
        close(fd);
        unlink(tmp);
        return -1;
    }
    clog_seg_insert(c, (seg_t){ base, life, fd, 1, 0 });
    return 0;
}

/* Pre-write a segment at base (zeros, header, synced, renamed into place) and
 * add it as a spare. */
static int seg_create(clog_t *c, uint64_t base, char *err, size_t errlen)
{
    char path[PATH_MAX], tmp[PATH_MAX + 8];
    clog_seg_path(c, base, path, sizeof path);
    snprintf(tmp, sizeof tmp, "%s.new", path);
    int fd = open(tmp, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0) {
        return write_failed(c, err, errlen, "cannot create %s", tmp);
    }
    if (prewrite_zeros(c, fd, 0, c->size, tmp, err, errlen) != 0) {
        close(fd);
        unlink(tmp);
        return -1;
    }
    return seg_finish(c, fd, tmp, base, err, errlen);
}

/* ---- records ------------------------------------------------------------------ */

static void clog_hdr_decode(const char *p, hdr_t *h)
{
    h->crc = be32_get(p);
    h->type = (unsigned char)p[4];
    h->len = be32_get(p + 8);
    h->delta = be32_get(p + 12);
    h->offset = be64_get(p + 16);
    h->life = be64_get(p + 24);
}

/* The header at p could be the record at off of segment s: its offset, life,
 * type, zero bytes and length agree (the CRC is checked with the payload). */
int clog_hdr_plausible(const clog_t *c, const seg_t *s, const char *p, uint64_t off, hdr_t *h)
{
    clog_hdr_decode(p, h);
    return h->offset == off && h->life == s->life && (h->type == CLOG_DATA || h->type == CLOG_COMMIT) && p[5] == 0 &&
           p[6] == 0 && p[7] == 0 && h->delta <= off - first_pos(s->base) &&
           (uint64_t)h->len <= s->base + c->size - off - CLOG_RECORD_HEADER;
}

/* Read and check the record at off of s into rd. 0 with *r; CLOG_NOT_RECORD;
 * RECORD_DAMAGED with err for a record of this life that fails its CRC; -1
 * with err on I/O. */
/* The n bytes at off of s: into rd->buf at `into` (no window), or a pointer
 * into rd's read-ahead window. 0 and *p; 1 when the file ends first; -1 with
 * errno. */
static int reader_get(const clog_t *c, const seg_t *s, clog_reader_t *rd, uint64_t off, size_t n, size_t into,
                      const char **p)
{
    if (rd->window == 0) {
        if (rd->cap < into + n) {
            rd->cap = into + n > 4096 ? into + n : 4096;
            rd->buf = xrealloc(rd->buf, rd->cap);
        }
        *p = rd->buf + into;
        return n ? clog_pread_all(s->fd, rd->buf + into, n, off - s->base) : 0;
    }
    if (rd->win_len == 0 || rd->win_base != s->base || off < rd->win_at || off + n > rd->win_at + rd->win_len) {
        uint64_t left = s->base + c->size - off;
        size_t want = n > rd->window ? n : rd->window;
        if (want > left) {
            want = (size_t)left;
        }
        if (rd->cap < want) {
            rd->cap = want;
            rd->buf = xrealloc(rd->buf, rd->cap);
        }
        rd->win_len = 0;
        int k = clog_pread_all(s->fd, rd->buf, want, off - s->base);
        if (k != 0) {
            return k;
        }
        rd->win = rd->buf;
        rd->win_len = want;
        rd->win_at = off;
        rd->win_base = s->base;
    }
    *p = rd->win + (off - rd->win_at);
    return 0;
}

/* Read and check the record at off of s into rd. 0 with *r; CLOG_NOT_RECORD;
 * RECORD_DAMAGED with err for a record of this life that fails its CRC; -1
 * with err on I/O. */
int clog_record_read(clog_t *c, seg_t *s, uint64_t off, clog_reader_t *rd, clog_record_t *r, char *err, size_t errlen)
{
    char path[PATH_MAX];
    if (off < first_pos(s->base) || off % 8 != 0 || off + CLOG_RECORD_HEADER > s->base + c->size) {
        return CLOG_NOT_RECORD;
    }
    const char *hp;
    int k = reader_get(c, s, rd, off, CLOG_RECORD_HEADER, 0, &hp);
    if (k != 0) {
        clog_seg_path(c, s->base, path, sizeof path);
        return err_set(err, errlen, "%s: offset %" PRIu64 ": cannot read: %s", path, off,
                       k < 0 ? strerror(errno) : "file shorter than its segment");
    }
    hdr_t h;
    if (!clog_hdr_plausible(c, s, hp, off, &h)) {
        return CLOG_NOT_RECORD;
    }
    size_t need = CLOG_RECORD_HEADER + (size_t)h.len;
    const char *rec = hp;
    if (rd->window > 0) {
        k = reader_get(c, s, rd, off, need, 0, &rec); /* the whole record in the window */
    } else {
        const char *payload;
        k = reader_get(c, s, rd, off + CLOG_RECORD_HEADER, h.len, CLOG_RECORD_HEADER, &payload);
        rec = rd->buf;
    }
    if (k != 0) {
        clog_seg_path(c, s->base, path, sizeof path);
        return err_set(err, errlen, "%s: offset %" PRIu64 ": cannot read %" PRIu32 " payload bytes: %s", path, off,
                       h.len, k < 0 ? strerror(errno) : "file shorter than its segment");
    }
    if (store_crc32c(rec + 4, need - 4) != h.crc) {
        clog_seg_path(c, s->base, path, sizeof path);
        err_set(err, errlen, "%s: offset %" PRIu64 ": record CRC mismatch (damaged)", path, off);
        return RECORD_DAMAGED;
    }
    r->offset = off;
    r->batch = off - h.delta;
    r->next = off + CLOG_RECORD_HEADER + pad8(h.len);
    r->type = h.type;
    r->data = rec + CLOG_RECORD_HEADER;
    r->len = h.len;
    return 0;
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

/* ---- append ------------------------------------------------------------------- */

void clog_batch_begin(clog_t *c, clog_batch_t *b)
{
    uint64_t pos = c->end;
    if (pos % c->size < CLOG_SEGMENT_HEADER) {
        pos = first_pos(seg_base_of(c, pos));
    }
    b->first = pos;
    b->limit = seg_base_of(c, pos) + c->size;
    b->len = 0;
    b->records = 0;
    b->begun = 1;
    b->life_known = 0;
}

static void record_put(clog_batch_t *b, int type, const void *p, size_t n, uint64_t off, uint64_t life)
{
    size_t foot = CLOG_RECORD_HEADER + (size_t)pad8(n);
    if (b->len + foot > b->cap) {
        b->cap = (b->len + foot) * 2;
        b->buf = xrealloc(b->buf, b->cap);
    }
    char *h = b->buf + b->len;
    h[4] = (char)type;
    h[5] = h[6] = h[7] = 0;
    be32_put(h + 8, (uint32_t)n);
    be32_put(h + 12, (uint32_t)(off - b->first));
    be64_put(h + 16, off);
    be64_put(h + 24, life);
    if (n > 0) {
        memcpy(h + CLOG_RECORD_HEADER, p, n);
    }
    memset(h + CLOG_RECORD_HEADER + n, 0, foot - CLOG_RECORD_HEADER - n);
    be32_put(h, store_crc32c(h + 4, CLOG_RECORD_HEADER - 4 + n));
    b->len += foot;
}

static seg_t *seg_ready(clog_t *c, uint64_t base, char *err, size_t errlen);

int clog_batch_room(clog_t *c, clog_batch_t *b, uint64_t bytes)
{
    if (!b->begun) {
        clog_batch_begin(c, b);
    }
    if (b->first + b->len + bytes + COMMIT_FOOTPRINT <= b->limit) {
        return 0;
    }
    if (b->records > 0) {
        return CLOG_BATCH_FULL;
    }
    b->first = first_pos(b->limit);
    b->limit += c->size;
    b->life_known = 0;
    return b->first + bytes + COMMIT_FOOTPRINT <= b->limit ? 0 : -1;
}

int clog_batch_add(clog_t *c, clog_batch_t *b, const void *p, size_t n, uint64_t *offset, char *err, size_t errlen)
{
    c->write_errno = 0;
    uint64_t room = c->size - CLOG_SEGMENT_HEADER - COMMIT_FOOTPRINT - CLOG_RECORD_HEADER;
    if (n > room) {
        return err_set(err, errlen,
                       "commit log record of %zu bytes cannot fit in a segment of %" PRIu64 " bytes (at most %" PRIu64
                       " payload bytes)",
                       n, c->size, room);
    }
    if (clog_batch_room(c, b, CLOG_RECORD_HEADER + pad8(n)) != 0) {
        return CLOG_BATCH_FULL;
    }
    if (!b->life_known) {
        /* the segment is made (or a spare taken) now: its life goes into every record */
        seg_t *s = seg_ready(c, seg_base_of(c, b->first), err, errlen);
        if (s == NULL) {
            return -1;
        }
        b->life = s->life;
        b->life_known = 1;
    }
    uint64_t off = b->first + b->len;
    record_put(b, CLOG_DATA, p, n, off, b->life);
    b->records++;
    *offset = off;
    return 0;
}

/* The pre-writer's file, finished now, becomes the segment at base (a spare
 * there): 0; -1 when none was begun or it failed (its file removed), for the
 * caller to write a whole segment itself as before. A failure is kept for
 * the next clog_prepare_step to report: the switch that met it succeeds
 * without it, and nobody would hear of it. clog_write_errno speaks of the
 * appends, so it is kept. */
static int seg_from_prewriter(clog_t *c, uint64_t base)
{
    int write_errno = c->write_errno, fd = -1;
    char why[PATH_MAX + 128];
    int state = clog_prewriter_finish(&c->pre, &fd, why, sizeof why), rc = -1;
    if (state == CLOG_PREWRITE_READY) {
        rc = seg_finish(c, fd, c->pre.path, base, why, sizeof why); /* closes fd on failure */
    }
    if (state != CLOG_PREWRITE_IDLE && rc != 0) {
        snprintf(c->switch_failure, sizeof c->switch_failure,
                 "the spare segment's pre-write failed at a segment switch, which wrote its segment itself: %s", why);
    }
    c->write_errno = write_errno;
    return rc;
}

/* A segment for base: its own file, a spare renamed to it, the pre-writer's
 * half-written one finished, or a new one.
 * Its life is fixed here, so records can be encoded before the write. */
static seg_t *seg_ready(clog_t *c, uint64_t base, char *err, size_t errlen)
{
    seg_t *s = clog_seg_find(c, base);
    if (s != NULL) {
        return s;
    }
    /* Any spare will do, the lowest first: spares left below the log's end (a reopen at a later clock starts the
       log past every file) are taken before those past it, so none is left behind for good. */
    seg_t *spare = NULL;
    for (size_t i = 0; i < c->nsegs; i++) {
        if (c->segs[i].spare) {
            spare = &c->segs[i];
            break;
        }
    }
    if (spare == NULL) {
        if (seg_from_prewriter(c, base) != 0 && seg_create(c, base, err, errlen) != 0) {
            return NULL;
        }
        return clog_seg_find(c, base);
    }
    char from[PATH_MAX], to[PATH_MAX];
    clog_seg_path(c, spare->base, from, sizeof from);
    clog_seg_path(c, base, to, sizeof to);
    uint64_t life = clog_new_life();
    if (clog_header_write(c, spare->fd, base, life, from, err, errlen) != 0) {
        return NULL;
    }
    if (rename(from, to) != 0) {
        write_failed(c, err, errlen, "cannot rename %s to %s", from, to);
        return NULL;
    }
    if (clog_sync_dir(c, err, errlen) != 0) {
        return NULL;
    }
    pthread_mutex_lock(&c->lock);
    spare->base = base;
    spare->life = life;
    qsort(c->segs, c->nsegs, sizeof *c->segs, seg_cmp);
    pthread_mutex_unlock(&c->lock);
    return clog_seg_find(c, base);
}

int clog_append(clog_t *c, clog_batch_t *b, char *err, size_t errlen)
{
    c->write_errno = 0;
    if (!b->begun || b->records == 0) {
        b->begun = 0;
        return 0;
    }
    uint64_t base = seg_base_of(c, b->first);
    seg_t *s = seg_ready(c, base, err, errlen);
    if (s == NULL) {
        return -1;
    }
    if (s->abandoned) {
        char path[PATH_MAX];
        clog_seg_path(c, base, path, sizeof path);
        b->begun = 0;
        b->len = 0;
        b->records = 0;
        return err_set(err, errlen,
                       "%s: offset %" PRIu64
                       ": the batch was begun in a segment abandoned since (a failed sync): add its records again",
                       path, b->first);
    }
    /* the batch CRC: CRC-32C of the record CRCs, folded as batch_whole reads them */
    char crcs[4 * 256];
    size_t ncrcs = 0;
    uint32_t crc = 0;
    for (size_t at = 0; at < b->len;) {
        memcpy(crcs + ncrcs, b->buf + at, 4);
        ncrcs += 4;
        if (ncrcs == sizeof crcs) {
            crc ^= store_crc32c(crcs, ncrcs);
            ncrcs = 0;
        }
        at += CLOG_RECORD_HEADER + pad8(be32_get(b->buf + at + 8));
    }
    if (ncrcs > 0) {
        crc = store_crc32c(crcs, ncrcs) ^ crc;
    }
    char cp[CLOG_COMMIT_PAYLOAD];
    be64_put(cp, atomic_load(&c->durable));
    be64_put(cp + 8, c->tail);
    be32_put(cp + 16, b->records);
    be32_put(cp + 20, crc);
    record_put(b, CLOG_COMMIT, cp, sizeof cp, b->first + b->len, s->life);
    if (clog_pwrite_all(s->fd, b->buf, b->len, b->first - base) != 0) {
        char path[PATH_MAX];
        clog_seg_path(c, base, path, sizeof path);
        return write_failed(c, err, errlen, "%s: offset %" PRIu64 ": cannot append %zu bytes", path, b->first, b->len);
    }
    if (s->spare) {
        pthread_mutex_lock(&c->lock); /* the syncer reads the flag */
        s->spare = 0;
        pthread_mutex_unlock(&c->lock);
    }
    c->tail = c->end = b->first + b->len;
    atomic_store(&c->written, c->tail);
    b->begun = 0;
    b->len = 0;
    b->records = 0;
    return 0;
}

int clog_sync(clog_t *c, char *err, size_t errlen)
{
    pthread_mutex_lock(&c->sync_lock);
    if (c->sync_failed) { /* not retried: it would report success over the pages the failure lost */
        int e = c->sync_errno;
        err_set(err, errlen, "%s (an earlier fdatasync of the log failed: nothing is synced until clog_abandon)",
                c->sync_error);
        pthread_mutex_unlock(&c->sync_lock);
        errno = e;
        return -1;
    }
    uint64_t from = atomic_load(&c->durable);
    pthread_mutex_lock(&c->lock);
    uint64_t w = atomic_load(&c->written);
    size_t n = 0;
    int *fds = xmalloc((c->nsegs + 1) * sizeof *fds);
    uint64_t *bases = xmalloc((c->nsegs + 1) * sizeof *bases);
    for (size_t i = 0; i < c->nsegs; i++) {
        seg_t *s = &c->segs[i];
        if (!s->spare && !s->abandoned && s->base + c->size > from && s->base <= w) {
            fds[n] = s->fd;
            bases[n++] = s->base;
        }
    }
    pthread_mutex_unlock(&c->lock);
    int rc = 0, e = 0;
    for (size_t i = 0; i < n && rc == 0; i++) {
        if (fdatasync(fds[i]) != 0) {
            e = errno;
            char path[PATH_MAX];
            clog_seg_path(c, bases[i], path, sizeof path);
            rc = err_set(err, errlen, "%s: cannot fdatasync (the segment must be abandoned): %s", path, strerror(e));
        }
    }
    free(fds);
    free(bases);
    if (rc == 0) {
        uint64_t cur = atomic_load(&c->durable);
        while (cur < w && !atomic_compare_exchange_weak(&c->durable, &cur, w)) {
        }
    } else {
        c->sync_failed = 1;
        c->sync_errno = e;
        snprintf(c->sync_error, sizeof c->sync_error, "%s", err != NULL && errlen > 0 ? err : "fdatasync failed");
    }
    pthread_mutex_unlock(&c->sync_lock);
    errno = rc != 0 ? e : errno; /* the failed fdatasync's: ENOSPC tells a full disk (contract) */
    return rc;
}

void clog_abandon(clog_t *c, uint64_t *from, uint64_t *to)
{
    pthread_mutex_lock(&c->sync_lock); /* no sync between the marks and the failure's end */
    uint64_t d = atomic_load(&c->durable);
    *from = d;
    *to = c->tail;
    if (c->tail > d) { /* else nothing was waiting for the failed sync */
        pthread_mutex_lock(&c->lock);
        for (size_t i = 0; i < c->nsegs; i++) {
            seg_t *s = &c->segs[i];
            if (!s->spare && s->base + c->size > d && s->base < c->tail) {
                s->abandoned = 1;
            }
        }
        pthread_mutex_unlock(&c->lock);
        uint64_t fresh = first_pos(seg_base_of(c, c->tail - 1) + c->size);
        if (c->end < fresh) {
            c->end = fresh;
        }
    }
    c->sync_failed = 0; /* the segments the failure touched are skipped from here on: the fresh one syncs */
    pthread_mutex_unlock(&c->sync_lock);
}

int clog_sync_failed(clog_t *c)
{
    pthread_mutex_lock(&c->sync_lock);
    int failed = c->sync_failed;
    pthread_mutex_unlock(&c->sync_lock);
    return failed;
}

/* ---- reads ---------------------------------------------------------------------- */

int clog_read(clog_t *c, uint64_t offset, clog_reader_t *rd, clog_record_t *r, char *err, size_t errlen)
{
    if (offset >= c->tail) {
        return CLOG_NOT_RECORD;
    }
    seg_t *s = clog_seg_find(c, seg_base_of(c, offset));
    if (s == NULL || s->spare) {
        return CLOG_NOT_RECORD;
    }
    int rc = clog_record_read(c, s, offset, rd, r, err, errlen);
    return rc == RECORD_DAMAGED ? -1 : rc;
}

int clog_walk(clog_t *c, uint64_t from, clog_walk_fn fn, void *ctx, char *err, size_t errlen)
{
    size_t i = 0;
    while (i < c->nsegs && c->segs[i].spare) {
        i++;
    }
    if (i == c->nsegs) {
        return from == 0 ? 0 : CLOG_NOT_RECORD;
    }
    uint64_t pos = from == 0 ? first_pos(c->segs[i].base) : from;
    clog_reader_t rd = { .window = 1u << 20 };
    int rc = 0, first = 1;
    while (pos < c->tail) {
        if (pos % c->size < CLOG_SEGMENT_HEADER) {
            pos = first_pos(seg_base_of(c, pos));
        }
        clog_record_t r;
        seg_t *s = clog_seg_find(c, seg_base_of(c, pos));
        rc = s != NULL && !s->spare ? clog_record_read(c, s, pos, &rd, &r, err, errlen) : CLOG_NOT_RECORD;
        if (rc < 0 || rc == RECORD_DAMAGED) {
            rc = -1;
            break;
        }
        if (rc == CLOG_NOT_RECORD) {
            if (first) {
                break;
            }
            /* the rest of this segment is unused: the chain goes on in the next segment in use */
            uint64_t next = UINT64_MAX;
            for (size_t j = 0; j < c->nsegs; j++) {
                if (!c->segs[j].spare && c->segs[j].base > seg_base_of(c, pos)) {
                    next = c->segs[j].base;
                    break;
                }
            }
            rc = 0;
            if (next == UINT64_MAX) {
                break;
            }
            pos = first_pos(next);
            continue;
        }
        first = 0;
        if ((rc = fn(&r, ctx)) != 0) {
            break;
        }
        pos = r.next;
    }
    clog_reader_free(&rd);
    return rc;
}

int clog_walk_after(clog_t *c, uint64_t end, clog_walk_fn fn, void *ctx, char *err, size_t errlen)
{
    if (end == 0) {
        return clog_walk(c, 0, fn, ctx, err, errlen);
    }
    if (end >= c->tail) {
        return 0;
    }
    int rc = clog_walk(c, end, fn, ctx, err, errlen);
    if (rc != CLOG_NOT_RECORD) {
        return rc;
    }
    /* the rest of end's segment is unused: the chain goes on at the next segment in use */
    uint64_t base = seg_base_of(c, end - 1);
    for (size_t j = 0; j < c->nsegs; j++) {
        if (!c->segs[j].spare && c->segs[j].base > base) {
            return clog_walk(c, first_pos(c->segs[j].base), fn, ctx, err, errlen);
        }
    }
    return err_set(err, errlen, "commit log in %s: no batch after offset %" PRIu64 " though the log ends at %" PRIu64,
                   c->dir, end, c->tail);
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

int clog_prepare(clog_t *c, unsigned spares, char *err, size_t errlen)
{
    c->write_errno = 0;
    unsigned have = 0;
    for (size_t i = 0; i < c->nsegs; i++) {
        have += c->segs[i].spare; /* wherever it lies: a switch takes any spare */
    }
    while (have < spares) {
        uint64_t b = seg_base_of(c, c->end);
        while (clog_seg_find(c, b) != NULL) {
            b += c->size;
        }
        if (seg_create(c, b, err, errlen) != 0) {
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
    if (seg_base_of(c, c->end) == c->step_refused_seg) {
        return 1;
    }
    for (size_t i = 0; i < c->nsegs; i++) {
        if (c->segs[i].spare) { /* any spare: the next switch takes it, wherever it lies */
            return 1;
        }
    }
    return 0;
}

uint64_t clog_prepare_left(const clog_t *c)
{
    uint64_t left = clog_prewriter_left((clog_prewriter_t *)&c->pre); /* its mutex: not a change of the log */
    if (left != UINT64_MAX) {
        return left;
    }
    return step_needless(c) ? 0 : c->size;
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
        return 0;
    }
    int rc = -1;
    if (state == CLOG_PREWRITE_READY) {
        rc =
            seg_finish(c, fd, c->pre.path, past_every_segment(c), err, errlen) == 0 ? 1 : -1; /* closes fd on failure */
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
    qsort(c->segs, c->nsegs, sizeof *c->segs, seg_cmp);
    pthread_mutex_unlock(&c->lock);
    return clog_sync_dir(c, err, errlen);
}

void clog_keep_from(clog_t *c, uint64_t from)
{
    atomic_store(&c->keep_from, from);
}

void clog_batch_free(clog_batch_t *b)
{
    free(b->buf);
    memset(b, 0, sizeof *b);
}

void clog_reader_free(clog_reader_t *rd)
{
    free(rd->buf);
    rd->buf = rd->win = NULL;
    rd->cap = rd->win_len = 0;
}
