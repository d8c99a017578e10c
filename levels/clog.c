/*
 * levels/clog.c — the commit log's segments, batches, reads and end rule
 * (contracts in levels/clog.h; design in docs/design-commitlog.md §2–3).
 *
 * Layout. Segment header (32 bytes, big-endian): "HGCLOGS1", base u64, life
 * u64, size in KiB u32, CRC-32C of the 28 bytes before it u32. Record header
 * (32 bytes): CRC-32C u32 of everything after it up to the payload's end,
 * type u8, three zero bytes, payload length u32, distance from the batch's
 * first record u32, offset u64, life u64; the payload follows, padded with
 * zeros to 8 bytes. COMMIT payload: D u64, previous batch's end u64, data
 * records u32, batch CRC u32 = CRC-32C of the data records' CRCs in order
 * (each byte is checksummed once; the batch CRC binds the set).
 *
 * Why a life and not only the offset: a recycled segment's old records carry
 * old offsets, but a payload can hold a well-formed record at a guessable
 * offset; the life is random and never leaves the file, so a forged record
 * fails it (the where-slots of step 2 stay the rule for ids, design §2).
 *
 * Recovery (clog_open) follows the chain of whole batches; past a torn place
 * it scans the rest of that segment and every later segment in use for whole
 * batches, only to read their D: one pass over those bytes at an open after a
 * crash (step 3 bounds it with the checkpoint).
 */
#define _GNU_SOURCE
#include "levels/clog.h"
#include "base/alloc.h"
#include "base/err.h"
#include "levels/keys.h"
#include "levels/store.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#define SEG_MAGIC        "HGCLOGS1"
#define PREWRITE_CHUNK   (1u << 20)
#define SCAN_CHUNK       (4u << 20)
#define COMMIT_FOOTPRINT (CLOG_RECORD_HEADER + CLOG_COMMIT_PAYLOAD)
#define RECORD_DAMAGED   2 /* record_read: a record of this life that fails its CRC (err says where) */

typedef struct seg {
    uint64_t base, life;
    int fd;
    int spare; /* 1: holds no batch of this log (pre-written, recycled, or cut) */
} seg_t;

struct clog {
    char *dir;
    uint64_t size;
    seg_t *segs; /* sorted by base; mutated by the owner under lock, read by the syncer under lock */
    size_t nsegs, cap;
    pthread_mutex_t lock;
    uint64_t end;  /* where the next batch goes (its segment may not exist yet) */
    uint64_t tail; /* the end of the last whole batch: the next COMMIT's "previous end" */
    _Atomic uint64_t written, durable;
};

typedef struct hdr {
    uint32_t crc, len, delta;
    int type;
    uint64_t offset, life;
} hdr_t;

typedef struct commit_info {
    uint64_t d, prev;
    uint32_t records, crc;
} commit_info_t;

static uint64_t pad8(uint64_t n)
{
    return (n + 7) & ~UINT64_C(7);
}

static uint64_t seg_base_of(const clog_t *c, uint64_t off)
{
    return off - off % c->size;
}

static uint64_t first_pos(uint64_t base)
{
    return base + CLOG_SEGMENT_HEADER;
}

static void seg_path(const clog_t *c, uint64_t base, char *p, size_t n)
{
    snprintf(p, n, "%s/clog-%016" PRIx64 ".seg", c->dir, base);
}

static seg_t *seg_find(clog_t *c, uint64_t base)
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
static void seg_insert(clog_t *c, seg_t s)
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

static int full_pwrite(int fd, const void *p, size_t n, uint64_t at)
{
    const char *q = p;
    while (n > 0) {
        ssize_t k = pwrite(fd, q, n, (off_t)at);
        if (k < 0 && errno == EINTR) {
            continue;
        }
        if (k <= 0) {
            return -1;
        }
        q += k;
        n -= (size_t)k;
        at += (uint64_t)k;
    }
    return 0;
}

/* 0, 1 when the file ends first, -1 with errno. */
static int full_pread(int fd, void *p, size_t n, uint64_t at)
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

static int sync_dir(const clog_t *c, char *err, size_t errlen)
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

static uint64_t new_life(void)
{
    uint64_t life = 0;
    while (getrandom(&life, sizeof life, 0) != (ssize_t)sizeof life) {
    }
    return life;
}

static void header_encode(char *h, uint64_t base, uint64_t life, uint64_t size)
{
    memcpy(h, SEG_MAGIC, 8);
    be64_put(h + 8, base);
    be64_put(h + 16, life);
    be32_put(h + 24, (uint32_t)(size >> 10));
    be32_put(h + 28, store_crc32c(h, 28));
}

/* Write a new header (a new life) into fd and sync it. */
static int header_write(clog_t *c, int fd, uint64_t base, uint64_t life, const char *path, char *err, size_t errlen)
{
    char h[CLOG_SEGMENT_HEADER];
    header_encode(h, base, life, c->size);
    if (full_pwrite(fd, h, sizeof h, 0) != 0 || fdatasync(fd) != 0) {
        return err_set(err, errlen, "cannot write the header of %s: %s", path, strerror(errno));
    }
    return 0;
}

/* Pre-write a segment at base (zeros, header, synced, renamed into place) and
 * add it as a spare. */
static int seg_create(clog_t *c, uint64_t base, char *err, size_t errlen)
{
    char path[PATH_MAX], tmp[PATH_MAX + 8];
    seg_path(c, base, path, sizeof path);
    snprintf(tmp, sizeof tmp, "%s.new", path);
    int fd = open(tmp, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0) {
        return err_set(err, errlen, "cannot create %s: %s", tmp, strerror(errno));
    }
    char *zeros = xcalloc(1, PREWRITE_CHUNK);
    int rc = 0;
    for (uint64_t at = 0; at < c->size && rc == 0; at += PREWRITE_CHUNK) {
        size_t n = c->size - at < PREWRITE_CHUNK ? (size_t)(c->size - at) : PREWRITE_CHUNK;
        if (full_pwrite(fd, zeros, n, at) != 0) {
            rc = err_set(err, errlen, "cannot pre-write %s at byte %" PRIu64 ": %s", tmp, at, strerror(errno));
        }
    }
    free(zeros);
    uint64_t life = new_life();
    if (rc == 0) {
        rc = header_write(c, fd, base, life, tmp, err, errlen);
    }
    if (rc == 0 && rename(tmp, path) != 0) {
        rc = err_set(err, errlen, "cannot rename %s to %s: %s", tmp, path, strerror(errno));
    }
    if (rc == 0) {
        rc = sync_dir(c, err, errlen);
    }
    if (rc != 0) {
        close(fd);
        unlink(tmp);
        return -1;
    }
    seg_insert(c, (seg_t){ base, life, fd, 1 });
    return 0;
}

/* ---- records ------------------------------------------------------------------ */

static void hdr_decode(const char *p, hdr_t *h)
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
static int hdr_plausible(const clog_t *c, const seg_t *s, const char *p, uint64_t off, hdr_t *h)
{
    hdr_decode(p, h);
    return h->offset == off && h->life == s->life && (h->type == CLOG_DATA || h->type == CLOG_COMMIT) && p[5] == 0 &&
           p[6] == 0 && p[7] == 0 && h->delta <= off - first_pos(s->base) &&
           (uint64_t)h->len <= s->base + c->size - off - CLOG_RECORD_HEADER;
}

/* Read and check the record at off of s into rd. 0 with *r; CLOG_NOT_RECORD;
 * RECORD_DAMAGED with err for a record of this life that fails its CRC; -1
 * with err on I/O. */
static int record_read(clog_t *c, seg_t *s, uint64_t off, clog_reader_t *rd, clog_record_t *r, char *err, size_t errlen)
{
    char path[PATH_MAX];
    if (off < first_pos(s->base) || off % 8 != 0 || off + CLOG_RECORD_HEADER > s->base + c->size) {
        return CLOG_NOT_RECORD;
    }
    if (rd->cap < CLOG_RECORD_HEADER) {
        rd->cap = 4096;
        rd->buf = xrealloc(rd->buf, rd->cap);
    }
    int k = full_pread(s->fd, rd->buf, CLOG_RECORD_HEADER, off - s->base);
    if (k != 0) {
        seg_path(c, s->base, path, sizeof path);
        return err_set(err, errlen, "%s: offset %" PRIu64 ": cannot read: %s", path, off,
                       k < 0 ? strerror(errno) : "file shorter than its segment");
    }
    hdr_t h;
    if (!hdr_plausible(c, s, rd->buf, off, &h)) {
        return CLOG_NOT_RECORD;
    }
    size_t need = CLOG_RECORD_HEADER + (size_t)h.len;
    if (rd->cap < need) {
        rd->cap = need;
        rd->buf = xrealloc(rd->buf, rd->cap);
    }
    k = h.len ? full_pread(s->fd, rd->buf + CLOG_RECORD_HEADER, h.len, off - s->base + CLOG_RECORD_HEADER) : 0;
    if (k != 0) {
        seg_path(c, s->base, path, sizeof path);
        return err_set(err, errlen, "%s: offset %" PRIu64 ": cannot read %" PRIu32 " payload bytes: %s", path, off,
                       h.len, k < 0 ? strerror(errno) : "file shorter than its segment");
    }
    if (store_crc32c(rd->buf + 4, need - 4) != h.crc) {
        seg_path(c, s->base, path, sizeof path);
        err_set(err, errlen, "%s: offset %" PRIu64 ": record CRC mismatch (damaged)", path, off);
        return RECORD_DAMAGED;
    }
    r->offset = off;
    r->batch = off - h.delta;
    r->next = off + CLOG_RECORD_HEADER + pad8(h.len);
    r->type = h.type;
    r->data = rd->buf + CLOG_RECORD_HEADER;
    r->len = h.len;
    return 0;
}

/* Is a whole batch at pos of s? 1 with *end and *ci; 0 when not (torn, not a
 * record, damaged); -1 on I/O error (err). */
static int batch_whole(clog_t *c, seg_t *s, uint64_t pos, clog_reader_t *rd, uint64_t *end, commit_info_t *ci,
                       char *err, size_t errlen)
{
    uint32_t records = 0, crc = 0;
    char crcs[4 * 256];
    size_t ncrcs = 0;
    uint64_t off = pos;
    for (;;) {
        clog_record_t r;
        char e2[256];
        int k = record_read(c, s, off, rd, &r, e2, sizeof e2);
        if (k == CLOG_NOT_RECORD || k == RECORD_DAMAGED) {
            return 0;
        }
        if (k < 0) {
            return err_set(err, errlen, "%s", e2);
        }
        if (r.batch != pos) {
            return 0;
        }
        if (r.type == CLOG_COMMIT) {
            if (r.len != CLOG_COMMIT_PAYLOAD) {
                return 0;
            }
            ci->d = be64_get(r.data);
            ci->prev = be64_get(r.data + 8);
            ci->records = be32_get(r.data + 16);
            ci->crc = be32_get(r.data + 20);
            if (ncrcs > 0) {
                crc = store_crc32c(crcs, ncrcs) ^ crc;
            }
            if (ci->records != records || ci->crc != crc) {
                return 0;
            }
            *end = r.next;
            return 1;
        }
        /* the batch CRC over record CRCs, folded 256 at a time */
        memcpy(crcs + ncrcs, rd->buf, 4);
        ncrcs += 4;
        if (ncrcs == sizeof crcs) {
            crc ^= store_crc32c(crcs, ncrcs);
            ncrcs = 0;
        }
        records++;
        off = r.next;
    }
}

/* ---- open: the end rule --------------------------------------------------------- */

/* What lies at or past `from` in s: the highest end of any record of this
 * life (0: none) and the highest D of any whole batch (0: none), with the
 * first batch offset that has it. */
typedef struct scan_result {
    uint64_t max_end, max_d, max_d_at;
} scan_result_t;

static int seg_scan(clog_t *c, seg_t *s, uint64_t from, clog_reader_t *rd, scan_result_t *sr, char *err, size_t errlen)
{
    memset(sr, 0, sizeof *sr);
    char *chunk = xmalloc(SCAN_CHUNK);
    uint64_t seg_end = s->base + c->size, pos = pad8(from);
    int rc = 0;
    while (pos + CLOG_RECORD_HEADER <= seg_end && rc == 0) {
        size_t n = seg_end - pos < SCAN_CHUNK ? (size_t)(seg_end - pos) : SCAN_CHUNK;
        if (full_pread(s->fd, chunk, n, pos - s->base) != 0) {
            char path[PATH_MAX];
            seg_path(c, s->base, path, sizeof path);
            rc = err_set(err, errlen, "%s: offset %" PRIu64 ": cannot read: %s", path, pos, strerror(errno));
            break;
        }
        size_t i;
        for (i = 0; i + CLOG_RECORD_HEADER <= n; i += 8) {
            hdr_t h;
            if (!hdr_plausible(c, s, chunk + i, pos + i, &h)) {
                continue;
            }
            clog_record_t r;
            char e2[256];
            if (record_read(c, s, pos + i, rd, &r, e2, sizeof e2) != 0) {
                continue;
            }
            if (r.next > sr->max_end) {
                sr->max_end = r.next;
            }
            uint64_t bend;
            commit_info_t ci;
            if (h.delta == 0) {
                int w = batch_whole(c, s, pos + i, rd, &bend, &ci, err, errlen);
                if (w < 0) {
                    rc = -1;
                    break;
                }
                if (w == 1 && ci.d > sr->max_d) {
                    sr->max_d = ci.d;
                    sr->max_d_at = pos + i;
                }
            }
        }
        pos += i;
    }
    free(chunk);
    return rc;
}

/* Save [from, to) of s beside it and zero it (synced). */
static int cut_bytes(clog_t *c, seg_t *s, uint64_t from, uint64_t to, clog_open_report_t *rep, char *err, size_t errlen)
{
    char path[PATH_MAX], keep[PATH_MAX + 32];
    seg_path(c, s->base, path, sizeof path);
    snprintf(keep, sizeof keep, "%s.torn-%016" PRIx64, path, from);
    size_t n = (size_t)(to - from);
    char *buf = xmalloc(n);
    int rc = 0;
    int fd = -1;
    if (full_pread(s->fd, buf, n, from - s->base) != 0) {
        rc = err_set(err, errlen, "%s: offset %" PRIu64 ": cannot read the torn tail: %s", path, from, strerror(errno));
    } else if ((fd = open(keep, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600)) < 0 ||
               full_pwrite(fd, buf, n, 0) != 0 || fsync(fd) != 0) {
        rc = err_set(err, errlen, "cannot keep the torn tail of %s in %s: %s", path, keep, strerror(errno));
    } else {
        memset(buf, 0, n);
        if (full_pwrite(s->fd, buf, n, from - s->base) != 0 || fdatasync(s->fd) != 0) {
            rc = err_set(err, errlen, "%s: offset %" PRIu64 ": cannot clear the torn tail: %s", path, from,
                         strerror(errno));
        }
    }
    if (fd >= 0) {
        close(fd);
    }
    free(buf);
    if (rc == 0 && rep != NULL && rep->cut_at == 0) {
        rep->cut_at = from;
        snprintf(rep->cut_file, sizeof rep->cut_file, "%s", keep);
    }
    if (rc == 0 && rep != NULL) {
        rep->cut_bytes += n;
    }
    return rc;
}

/* Is there a record of s's life at its first position? */
static int seg_in_use(clog_t *c, seg_t *s, clog_reader_t *rd)
{
    clog_record_t r;
    char e2[256];
    return record_read(c, s, first_pos(s->base), rd, &r, e2, sizeof e2) != CLOG_NOT_RECORD;
}

/* The log is torn at t (in segment index i): refuse when a later whole
 * batch's D is past t, else cut everything of this life from t on. */
static int torn_at(clog_t *c, size_t i, uint64_t t, clog_reader_t *rd, clog_open_report_t *rep, char *err,
                   size_t errlen)
{
    size_t n = c->nsegs;
    scan_result_t *sr = xcalloc(n, sizeof *sr);
    int rc = 0;
    for (size_t j = i; j < n && rc == 0; j++) {
        if (j > i && !seg_in_use(c, &c->segs[j], rd)) {
            continue; /* never started in this life: every batch starts a segment at its first position */
        }
        rc = seg_scan(c, &c->segs[j], j == i ? t : first_pos(c->segs[j].base), rd, &sr[j], err, errlen);
        if (rc == 0 && sr[j].max_d > t) {
            char path[PATH_MAX];
            seg_path(c, c->segs[i].base, path, sizeof path);
            rc =
                err_set(err, errlen,
                        "%s: offset %" PRIu64 ": damaged log below the durable mark (the whole batch at offset %" PRIu64
                        " says %" PRIu64 " was durable)",
                        path, t, sr[j].max_d_at, sr[j].max_d);
            rc = CLOG_DAMAGED;
        }
    }
    for (size_t j = i; j < n && rc == 0; j++) {
        seg_t *s = &c->segs[j];
        uint64_t from = j == i ? t : first_pos(s->base);
        if (sr[j].max_end > from) {
            rc = cut_bytes(c, s, from, sr[j].max_end, rep, err, errlen);
        }
        if (rc == 0 && j > i && sr[j].max_end > 0) {
            char path[PATH_MAX];
            seg_path(c, s->base, path, sizeof path);
            s->life = new_life();
            s->spare = 1;
            rc = header_write(c, s->fd, s->base, s->life, path, err, errlen);
        }
    }
    free(sr);
    return rc;
}

/* Follow the chain of whole batches; set c->tail, mark segments in use. */
static int recover(clog_t *c, clog_reader_t *rd, clog_open_report_t *rep, char *err, size_t errlen)
{
    c->tail = 0;
    if (c->nsegs == 0) {
        return 0;
    }
    size_t i = 0;
    uint64_t e = first_pos(c->segs[0].base);
    int any = 0;
    for (;;) {
        uint64_t bend;
        commit_info_t ci;
        int w = batch_whole(c, &c->segs[i], e, rd, &bend, &ci, err, errlen);
        if (w < 0) {
            return -1;
        }
        if (w == 1) {
            c->segs[i].spare = 0;
            c->tail = e = bend;
            any = 1;
            if (rep != NULL) {
                rep->batches++;
            }
            continue;
        }
        /* not a whole batch at e: a later segment may carry on the chain */
        size_t j = i + 1;
        while (j < c->nsegs && !seg_in_use(c, &c->segs[j], rd)) {
            j++;
        }
        int carried = 0;
        if (j < c->nsegs && (any || !seg_in_use(c, &c->segs[i], rd))) {
            uint64_t jend;
            commit_info_t jci;
            w = batch_whole(c, &c->segs[j], first_pos(c->segs[j].base), rd, &jend, &jci, err, errlen);
            if (w < 0) {
                return -1;
            }
            carried = w == 1 && (!any || jci.prev == c->tail);
        }
        if (carried && !any) {
            /* a leading segment with nothing at its start is skipped only when it holds nothing of its
               life at all (a spare left below a raised floor); a record in it makes its start torn */
            scan_result_t sr;
            if (seg_scan(c, &c->segs[i], e, rd, &sr, err, errlen) != 0) {
                return -1;
            }
            carried = sr.max_end == 0;
        }
        if (carried) {
            i = j;
            e = first_pos(c->segs[j].base);
            continue;
        }
        return torn_at(c, i, e, rd, rep, err, errlen);
    }
}

/* Parse "clog-<16 hex>.seg": 1 and *base; 0 for another name of ours to leave
 * (a kept torn tail); -1 for a name clog-* that is none of these. */
static int parse_name(const char *name, uint64_t *base)
{
    if (strncmp(name, "clog-", 5) != 0) {
        return 0;
    }
    const char *h = name + 5;
    uint64_t v = 0;
    for (int k = 0; k < 16; k++) {
        char ch = h[k];
        if (ch >= '0' && ch <= '9') {
            v = v << 4 | (uint64_t)(ch - '0');
        } else if (ch >= 'a' && ch <= 'f') {
            v = v << 4 | (uint64_t)(ch - 'a' + 10);
        } else {
            return -1;
        }
    }
    if (strcmp(h + 16, ".seg") == 0) {
        *base = v;
        return 1;
    }
    if (strncmp(h + 16, ".seg.torn-", 10) == 0 || strcmp(h + 16, ".seg.new") == 0) {
        return 0;
    }
    return -1;
}

static int seg_load(clog_t *c, uint64_t base, char *err, size_t errlen)
{
    char path[PATH_MAX];
    seg_path(c, base, path, sizeof path);
    if (base % c->size != 0) {
        return err_set(err, errlen, "%s: base %" PRIu64 " is not a multiple of the segment size %" PRIu64, path, base,
                       c->size);
    }
    int fd = open(path, O_RDWR | O_CLOEXEC);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) != 0) {
        int e = errno;
        if (fd >= 0) {
            close(fd);
        }
        return err_set(err, errlen, "cannot open %s: %s", path, strerror(e));
    }
    if ((uint64_t)st.st_size != c->size) {
        close(fd);
        return err_set(err, errlen, "%s: %" PRIu64 " bytes, not the segment size %" PRIu64, path, (uint64_t)st.st_size,
                       c->size);
    }
    char h[CLOG_SEGMENT_HEADER], want[CLOG_SEGMENT_HEADER];
    if (full_pread(fd, h, sizeof h, 0) != 0) {
        close(fd);
        return err_set(err, errlen, "%s: offset %" PRIu64 ": cannot read the segment header", path, base);
    }
    uint64_t life = be64_get(h + 16);
    header_encode(want, base, life, c->size);
    char as_named[CLOG_SEGMENT_HEADER];
    header_encode(as_named, be64_get(h + 8), life, c->size);
    if (memcmp(h, want, sizeof h) != 0 && memcmp(h, as_named, sizeof h) == 0) {
        /* a whole header for another base: a spare or recycled segment caught between its new
           header and its rename; it holds nothing of this log (its records name other offsets) */
        life = new_life();
        if (header_write(c, fd, base, life, path, err, errlen) != 0) {
            close(fd);
            return -1;
        }
    } else if (memcmp(h, want, sizeof h) != 0) {
        close(fd);
        err_set(err, errlen,
                "%s: offset %" PRIu64 ": damaged segment header (not this segment's: magic, base, size or CRC)", path,
                base);
        return CLOG_DAMAGED;
    }
    seg_insert(c, (seg_t){ base, life, fd, 1 });
    return 0;
}

int clog_open(const clog_options_t *o, clog_t **out, clog_open_report_t *rep, char *err, size_t errlen)
{
    *out = NULL;
    if (rep != NULL) {
        memset(rep, 0, sizeof *rep);
    }
    if (o->segment_bytes < CLOG_SEGMENT_MIN || o->segment_bytes > CLOG_SEGMENT_MAX || o->segment_bytes % 4096 != 0) {
        return err_set(err, errlen,
                       "commit log segment size %" PRIu64 " must be a multiple of 4096 in %" PRIu64 "..%" PRIu64,
                       o->segment_bytes, CLOG_SEGMENT_MIN, CLOG_SEGMENT_MAX);
    }
    DIR *d = opendir(o->dir);
    if (d == NULL) {
        return err_set(err, errlen, "cannot open commit log directory %s: %s", o->dir, strerror(errno));
    }
    clog_t *c = xcalloc(1, sizeof *c);
    c->dir = xstrdup(o->dir);
    c->size = o->segment_bytes;
    pthread_mutex_init(&c->lock, NULL);
    int rc = 0;
    struct dirent *de;
    while (rc == 0 && (de = readdir(d)) != NULL) {
        uint64_t base;
        int k = parse_name(de->d_name, &base);
        if (k < 0) {
            rc = err_set(err, errlen, "%s/%s: not a commit log file (want clog-<16 hex digits>.seg)", o->dir,
                         de->d_name);
        } else if (k == 1) {
            rc = seg_load(c, base, err, errlen);
        }
    }
    closedir(d);
    clog_reader_t rd = { 0 };
    if (rc == 0) {
        rc = recover(c, &rd, rep, err, errlen);
    }
    clog_reader_free(&rd);
    /* what a kill -9 left in the page cache is made durable before anything is built on it (design §3) */
    for (size_t i = 0; rc == 0 && i < c->nsegs; i++) {
        if (!c->segs[i].spare && fdatasync(c->segs[i].fd) != 0) {
            char path[PATH_MAX];
            seg_path(c, c->segs[i].base, path, sizeof path);
            rc = err_set(err, errlen, "cannot sync %s: %s", path, strerror(errno));
        }
    }
    if (rc != 0) {
        clog_close(c);
        return rc;
    }
    c->end = c->tail;
    if (o->floor > c->tail || c->nsegs == 0) {
        uint64_t b = o->floor % c->size ? seg_base_of(c, o->floor) + c->size : o->floor;
        c->end = first_pos(b);
    }
    atomic_store(&c->written, c->tail);
    atomic_store(&c->durable, c->tail);
    if (rep != NULL) {
        rep->end = c->tail;
    }
    *out = c;
    return 0;
}

void clog_close(clog_t *c)
{
    if (c == NULL) {
        return;
    }
    for (size_t i = 0; i < c->nsegs; i++) {
        close(c->segs[i].fd);
    }
    free(c->segs);
    pthread_mutex_destroy(&c->lock);
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

int clog_batch_add(clog_t *c, clog_batch_t *b, const void *p, size_t n, uint64_t *offset, char *err, size_t errlen)
{
    uint64_t room = c->size - CLOG_SEGMENT_HEADER - COMMIT_FOOTPRINT - CLOG_RECORD_HEADER;
    if (n > room) {
        return err_set(err, errlen,
                       "commit log record of %zu bytes cannot fit in a segment of %" PRIu64 " bytes (at most %" PRIu64
                       " payload bytes)",
                       n, c->size, room);
    }
    if (!b->begun) {
        clog_batch_begin(c, b);
    }
    uint64_t foot = CLOG_RECORD_HEADER + pad8(n);
    if (b->first + b->len + foot + COMMIT_FOOTPRINT > b->limit) {
        if (b->records > 0) {
            return CLOG_BATCH_FULL;
        }
        b->first = first_pos(b->limit);
        b->limit += c->size;
        b->life_known = 0;
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

/* A segment for base: its own file, a spare renamed to it, or a new one.
 * Its life is fixed here, so records can be encoded before the write. */
static seg_t *seg_ready(clog_t *c, uint64_t base, char *err, size_t errlen)
{
    seg_t *s = seg_find(c, base);
    if (s != NULL) {
        return s;
    }
    seg_t *spare = NULL;
    for (size_t i = 0; i < c->nsegs; i++) {
        if (c->segs[i].spare && c->segs[i].base > seg_base_of(c, c->tail)) {
            spare = &c->segs[i];
            break;
        }
    }
    if (spare == NULL) {
        if (seg_create(c, base, err, errlen) != 0) {
            return NULL;
        }
        return seg_find(c, base);
    }
    char from[PATH_MAX], to[PATH_MAX];
    seg_path(c, spare->base, from, sizeof from);
    seg_path(c, base, to, sizeof to);
    uint64_t life = new_life();
    if (header_write(c, spare->fd, base, life, from, err, errlen) != 0) {
        return NULL;
    }
    if (rename(from, to) != 0) {
        err_set(err, errlen, "cannot rename %s to %s: %s", from, to, strerror(errno));
        return NULL;
    }
    if (sync_dir(c, err, errlen) != 0) {
        return NULL;
    }
    pthread_mutex_lock(&c->lock);
    spare->base = base;
    spare->life = life;
    qsort(c->segs, c->nsegs, sizeof *c->segs, seg_cmp);
    pthread_mutex_unlock(&c->lock);
    return seg_find(c, base);
}

int clog_append(clog_t *c, clog_batch_t *b, char *err, size_t errlen)
{
    if (!b->begun || b->records == 0) {
        b->begun = 0;
        return 0;
    }
    uint64_t base = seg_base_of(c, b->first);
    seg_t *s = seg_ready(c, base, err, errlen);
    if (s == NULL) {
        return -1;
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
    if (full_pwrite(s->fd, b->buf, b->len, b->first - base) != 0) {
        char path[PATH_MAX];
        seg_path(c, base, path, sizeof path);
        return err_set(err, errlen, "%s: offset %" PRIu64 ": cannot append %zu bytes: %s", path, b->first, b->len,
                       strerror(errno));
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
    uint64_t from = atomic_load(&c->durable);
    pthread_mutex_lock(&c->lock);
    uint64_t w = atomic_load(&c->written);
    size_t n = 0;
    int *fds = xmalloc((c->nsegs + 1) * sizeof *fds);
    uint64_t *bases = xmalloc((c->nsegs + 1) * sizeof *bases);
    for (size_t i = 0; i < c->nsegs; i++) {
        seg_t *s = &c->segs[i];
        if (!s->spare && s->base + c->size > from && s->base <= w) {
            fds[n] = s->fd;
            bases[n++] = s->base;
        }
    }
    pthread_mutex_unlock(&c->lock);
    int rc = 0;
    for (size_t i = 0; i < n && rc == 0; i++) {
        if (fdatasync(fds[i]) != 0) {
            char path[PATH_MAX];
            seg_path(c, bases[i], path, sizeof path);
            rc =
                err_set(err, errlen, "%s: cannot fdatasync (the segment must be abandoned): %s", path, strerror(errno));
        }
    }
    free(fds);
    free(bases);
    if (rc == 0) {
        uint64_t cur = atomic_load(&c->durable);
        while (cur < w && !atomic_compare_exchange_weak(&c->durable, &cur, w)) {
        }
    }
    return rc;
}

/* ---- reads ---------------------------------------------------------------------- */

int clog_read(clog_t *c, uint64_t offset, clog_reader_t *rd, clog_record_t *r, char *err, size_t errlen)
{
    if (offset >= c->tail) {
        return CLOG_NOT_RECORD;
    }
    seg_t *s = seg_find(c, seg_base_of(c, offset));
    if (s == NULL || s->spare) {
        return CLOG_NOT_RECORD;
    }
    int rc = record_read(c, s, offset, rd, r, err, errlen);
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
    clog_reader_t rd = { 0 };
    int rc = 0, first = 1;
    while (pos < c->tail) {
        if (pos % c->size < CLOG_SEGMENT_HEADER) {
            pos = first_pos(seg_base_of(c, pos));
        }
        clog_record_t r;
        seg_t *s = seg_find(c, seg_base_of(c, pos));
        rc = s != NULL && !s->spare ? record_read(c, s, pos, &rd, &r, err, errlen) : CLOG_NOT_RECORD;
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
    unsigned have = 0;
    for (size_t i = 0; i < c->nsegs; i++) {
        have += c->segs[i].spare && c->segs[i].base >= seg_base_of(c, c->end);
    }
    while (have < spares) {
        uint64_t b = seg_base_of(c, c->end);
        while (seg_find(c, b) != NULL) {
            b += c->size;
        }
        if (seg_create(c, b, err, errlen) != 0) {
            return -1;
        }
        have++;
    }
    return 0;
}

int clog_recycle(clog_t *c, uint64_t base, char *err, size_t errlen)
{
    char from[PATH_MAX], to[PATH_MAX];
    seg_path(c, base, from, sizeof from);
    seg_t *s = seg_find(c, base);
    if (s == NULL) {
        return err_set(err, errlen, "%s: no such commit log segment to recycle", from);
    }
    if (base + c->size > atomic_load(&c->durable) || seg_base_of(c, c->end) == base || s->spare) {
        return err_set(err, errlen,
                       "%s: offset %" PRIu64
                       ": cannot recycle a segment in use or not wholly durable (durable end %" PRIu64 ")",
                       from, base, atomic_load(&c->durable));
    }
    uint64_t nb = past_every_segment(c);
    seg_path(c, nb, to, sizeof to);
    uint64_t life = new_life();
    if (header_write(c, s->fd, nb, life, from, err, errlen) != 0) {
        return -1;
    }
    if (rename(from, to) != 0) {
        return err_set(err, errlen, "cannot rename %s to %s: %s", from, to, strerror(errno));
    }
    pthread_mutex_lock(&c->lock);
    s->base = nb;
    s->life = life;
    s->spare = 1;
    qsort(c->segs, c->nsegs, sizeof *c->segs, seg_cmp);
    pthread_mutex_unlock(&c->lock);
    return sync_dir(c, err, errlen);
}

void clog_batch_free(clog_batch_t *b)
{
    free(b->buf);
    memset(b, 0, sizeof *b);
}

void clog_reader_free(clog_reader_t *rd)
{
    free(rd->buf);
    rd->buf = NULL;
    rd->cap = 0;
}
