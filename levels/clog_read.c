/*
 * levels/clog_read.c — the commit log's records read back (contracts in
 * levels/clog.h; byte layout atop clog.c): a record checked against its
 * segment's life and its CRC, read by offset through a reader's read-ahead
 * window, and the walks over whole batches from an offset. Owner thread.
 */
#define _GNU_SOURCE
#include "levels/clog_internal.h"
#include "base/alloc.h"
#include "base/err.h"
#include "levels/keys.h"
#include "levels/store.h"

#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ---- records ------------------------------------------------------------------ */

/* The header at p could be the record at off of segment s: its offset, life,
 * type, zero bytes and length agree (the CRC is checked with the payload).
 * Inlined in clog_record_read; the type and its three zero bytes are one
 * big-endian word (type << 24), checked in one compare each. */
static inline __attribute__((always_inline)) int hdr_plausible(const clog_t *c, const seg_t *s, const char *p,
                                                               uint64_t off, hdr_t *h)
{
    uint32_t type_word = be32_get(p + 4);
    h->crc = be32_get(p);
    h->type = (int)(type_word >> 24);
    h->len = be32_get(p + 8);
    h->delta = be32_get(p + 12);
    h->offset = be64_get(p + 16);
    h->life = be64_get(p + 24);
    return h->offset == off && h->life == s->life &&
           (type_word == (uint32_t)CLOG_DATA << 24 || type_word == (uint32_t)CLOG_COMMIT << 24) &&
           h->delta <= off - first_pos(s->base) && (uint64_t)h->len <= s->base + c->size - off - CLOG_RECORD_HEADER;
}

int clog_hdr_plausible(const clog_t *c, const seg_t *s, const char *p, uint64_t off, hdr_t *h)
{
    return hdr_plausible(c, s, p, off, h);
}

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
    if (!hdr_plausible(c, s, hp, off, &h)) {
        return CLOG_NOT_RECORD;
    }
    size_t need = CLOG_RECORD_HEADER + (size_t)h.len;
    const char *rec = hp;
    if (rd->window > 0) {
        /* the header is in the window now: so is the whole record unless it runs past the window's end */
        k = off + need <= rd->win_at + rd->win_len ? 0 : reader_get(c, s, rd, off, need, 0, &rec);
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

void clog_reader_free(clog_reader_t *rd)
{
    free(rd->buf);
    rd->buf = rd->win = NULL;
    rd->cap = rd->win_len = 0;
}
