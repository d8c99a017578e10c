/*
 * levels/clog_append.c — the commit log's batches (contracts in
 * levels/clog.h; byte layout atop clog.c): a batch built in memory, its room
 * in the segment, appended with its COMMIT at the log's end (a segment
 * switch takes a spare, or the pre-writer's file), synced with fdatasync,
 * and a failed sync's segment abandoned. Owner thread, but clog_sync, which
 * the syncer may call at the same time.
 *
 * A batch is written out with zeros to the end of its last page (not past
 * the segment): a write that covers a page only in part makes the kernel
 * read that page from disk first when it is not cached (ext4's write_begin),
 * synchronously, on the storage thread: 61.8 µs an append into an evicted
 * spare against 6.9 cached (docs/BENCH-broker.md, s52). Padded, every page
 * an append touches is either covered whole or begun by the append before
 * it (cached since), so a spare whose pages are not cached yet — recycled,
 * its zeros written with O_DIRECT, or read back only in part — costs no read.
 * The zeros land past the log's end, where a pre-written segment has zeros
 * and a recycled one a dead life's bytes: the open's end rule sees either as
 * the end.
 */
#define _GNU_SOURCE
#include "levels/clog_internal.h"
#include "base/alloc.h"
#include "base/err.h"
#include "levels/keys.h"
#include "levels/store.h"

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

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

/* Room for n more bytes in b's buffer (grown to twice what it then holds). */
static void batch_room_for(clog_batch_t *b, size_t n)
{
    if (b->len + n > b->cap) {
        b->cap = (b->len + n) * 2;
        b->buf = xrealloc(b->buf, b->cap);
    }
}

static void record_put(clog_batch_t *b, int type, const void *p, size_t n, uint64_t off, uint64_t life)
{
    size_t foot = CLOG_RECORD_HEADER + (size_t)pad8(n);
    batch_room_for(b, foot);
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
        rc = clog_seg_finish(c, fd, c->pre.path, base, why, sizeof why); /* closes fd on failure */
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
    seg_t *spare = clog_next_spare(c); /* any spare will do, the lowest first */
    if (spare == NULL) {
        if (seg_from_prewriter(c, base) != 0 && clog_seg_create(c, base, err, errlen) != 0) {
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
        clog_write_failed(c, err, errlen, "cannot rename %s to %s", from, to);
        return NULL;
    }
    if (clog_sync_dir(c, err, errlen) != 0) {
        return NULL;
    }
    pthread_mutex_lock(&c->lock);
    spare->base = base;
    spare->life = life;
    qsort(c->segs, c->nsegs, sizeof *c->segs, clog_seg_cmp);
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
    uint64_t end = b->first - base + b->len, page_end = (end + c->page - 1) / c->page * c->page;
    size_t pad = (size_t)((page_end < c->size ? page_end : c->size) - end);
    batch_room_for(b, pad);
    memset(b->buf + b->len, 0, pad);
    if (clog_pwrite_all(s->fd, b->buf, b->len + pad, b->first - base) != 0) {
        char path[PATH_MAX];
        clog_seg_path(c, base, path, sizeof path);
        return clog_write_failed(c, err, errlen, "%s: offset %" PRIu64 ": cannot append %zu bytes", path, b->first,
                                 b->len);
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

void clog_batch_free(clog_batch_t *b)
{
    free(b->buf);
    memset(b, 0, sizeof *b);
}
