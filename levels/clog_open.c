/*
 * levels/clog_open.c — opening the commit log: its segments checked against
 * their names, then its end found by the chain of whole batches and the D
 * rule (contracts in levels/clog.h; design in docs/design-commitlog.md §3 and
 * "What step 1 decided").
 *
 * The chain: from the first segment's first record, whole batches one after
 * another; at a place that is not one, the chain goes on at the next segment
 * in use only when that segment's first batch names the chain's end as its
 * predecessor (a segment switch, a raised floor). The first place it cannot
 * go on is the torn place t: every whole batch past it (the rest of t's
 * segment scanned at each 8-byte position, and every later segment that
 * begins with a record of its life) is read for its D. D > t: t was durable,
 * the open refuses and changes nothing. Otherwise what lies past t is saved
 * beside its segment, cleared, and the log ends at t.
 *
 * The sync at open: what a kill -9 left in the page cache is fdatasynced
 * before anything is built on it, but only in the segments at or past
 * chain_from (the redo's checkpoint B). Those wholly below it were synced
 * before B was written: a batch is applied only once clog_sync covered it
 * (redo_apply_durable: its end <= clog_durable, and clog_sync syncs every
 * segment holding bytes between the last durable offset and the end), a
 * checkpoint's B is at most what was applied (or the end of a range
 * abandoned after a failed sync, which no open reads again), and every open
 * takes a checkpoint after this sync. Syncing them again cost one fdatasync
 * per segment (up to the whole backlog's) on the way to the first answer.
 */
#define _GNU_SOURCE
#include "base/alloc.h"
#include "base/err.h"
#include "levels/clog_internal.h"
#include "levels/keys.h"
#include "levels/store.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

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
        int k = clog_record_read(c, s, off, rd, &r, e2, sizeof e2);
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
        memcpy(crcs + ncrcs, r.data - CLOG_RECORD_HEADER, 4); /* the record CRC heads its header */
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
        if (clog_pread_all(s->fd, chunk, n, pos - s->base) != 0) {
            char path[PATH_MAX];
            clog_seg_path(c, s->base, path, sizeof path);
            rc = err_set(err, errlen, "%s: offset %" PRIu64 ": cannot read: %s", path, pos, strerror(errno));
            break;
        }
        size_t i;
        for (i = 0; i + CLOG_RECORD_HEADER <= n; i += 8) {
            hdr_t h;
            if ((chunk[i + 4] != CLOG_DATA && chunk[i + 4] != CLOG_COMMIT) ||
                !clog_hdr_plausible(c, s, chunk + i, pos + i, &h)) {
                continue;
            }
            /* a header of this life counts even when its bytes fail the CRC (a write torn inside the
               record): left in place it would read as damage past the end once a raised floor carries
               the chain past this segment */
            uint64_t claimed = pos + i + CLOG_RECORD_HEADER + pad8(h.len);
            if (claimed > sr->max_end) {
                sr->max_end = claimed;
            }
            clog_record_t r;
            char e2[256];
            if (clog_record_read(c, s, pos + i, rd, &r, e2, sizeof e2) != 0) {
                continue;
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
    clog_seg_path(c, s->base, path, sizeof path);
    snprintf(keep, sizeof keep, "%s.torn-%016" PRIx64, path, from);
    size_t n = (size_t)(to - from);
    char *buf = xmalloc(n);
    int rc = 0;
    int fd = -1;
    if (clog_pread_all(s->fd, buf, n, from - s->base) != 0) {
        rc = err_set(err, errlen, "%s: offset %" PRIu64 ": cannot read the torn tail: %s", path, from, strerror(errno));
    } else if ((fd = open(keep, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600)) < 0 ||
               clog_pwrite_all(fd, buf, n, 0) != 0 || fsync(fd) != 0) {
        rc = err_set(err, errlen, "cannot keep the torn tail of %s in %s: %s", path, keep, strerror(errno));
    } else {
        memset(buf, 0, n);
        if (clog_pwrite_all(s->fd, buf, n, from - s->base) != 0 || fdatasync(s->fd) != 0) {
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
    return clog_record_read(c, s, first_pos(s->base), rd, &r, e2, sizeof e2) != CLOG_NOT_RECORD;
}

/* The log is torn at t (in segment index i): refuse when a later whole
 * batch's D is past t, else cut everything of this life from t on. */
static int torn_at(clog_t *c, size_t i, uint64_t t, clog_reader_t *rd, clog_open_report_t *rep, char *err,
                   size_t errlen)
{
    if (t < c->must_reach) {
        char path[PATH_MAX];
        clog_seg_path(c, c->segs[i].base, path, sizeof path);
        err_set(err, errlen,
                "%s: offset %" PRIu64 ": the log ends here, below %" PRIu64
                ", which the applied mark says was durable: damaged log (nothing cut)",
                path, t, c->must_reach);
        return CLOG_DAMAGED;
    }
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
            clog_seg_path(c, c->segs[i].base, path, sizeof path);
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
            clog_seg_path(c, s->base, path, sizeof path);
            s->life = clog_new_life();
            s->spare = 1;
            rc = clog_header_write(c, s->fd, s->base, s->life, path, err, errlen);
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
    if (c->chain_from > 0) {
        /* the chain below chain_from is trusted (durable and whole when it was named): follow it from there;
           a segment below is in use when a record of its life starts it */
        uint64_t base = seg_base_of(c, c->chain_from - 1);
        while (i < c->nsegs && c->segs[i].base < base) {
            c->segs[i].spare = !seg_in_use(c, &c->segs[i], rd);
            i++;
        }
        if (i == c->nsegs || c->segs[i].base != base) {
            char path[PATH_MAX];
            clog_seg_path(c, base, path, sizeof path);
            err_set(err, errlen, "%s: missing, though the log's checkpoint %" PRIu64 " lies in it", path,
                    c->chain_from);
            return CLOG_DAMAGED;
        }
        c->segs[i].spare = 0;
        c->tail = e = c->chain_from;
        any = 1;
    }
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
        if (c->clean_end != 0 && e == c->clean_end) {
            return 0; /* closed cleanly here: nothing of this life was written past it, nothing to scan */
        }
        if (rep != NULL) {
            rep->scanned = 1;
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
    clog_seg_path(c, base, path, sizeof path);
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
    if (clog_pread_all(fd, h, sizeof h, 0) != 0) {
        close(fd);
        return err_set(err, errlen, "%s: offset %" PRIu64 ": cannot read the segment header", path, base);
    }
    uint64_t life = be64_get(h + 16);
    clog_header_encode(want, base, life, c->size);
    char as_named[CLOG_SEGMENT_HEADER];
    clog_header_encode(as_named, be64_get(h + 8), life, c->size);
    if (memcmp(h, want, sizeof h) != 0 && memcmp(h, as_named, sizeof h) == 0) {
        /* a whole header for another base: a spare or recycled segment caught between its new
           header and its rename; it holds nothing of this log (its records name other offsets) */
        life = clog_new_life();
        if (clog_header_write(c, fd, base, life, path, err, errlen) != 0) {
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
    clog_seg_insert(c, (seg_t){ base, life, fd, 1, 0, 0 }); /* not resident: written by an earlier run */
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
    c->page = (uint64_t)sysconf(_SC_PAGESIZE);
    c->must_reach = o->must_reach;
    c->chain_from = o->chain_from;
    c->clean_end = o->clean_end;
    atomic_store(&c->keep_from, UINT64_MAX);
    clog_prewriter_init(&c->pre, c->dir, c->size);
    c->step_refused_seg = UINT64_MAX;
    c->spare_rechecked_seg = UINT64_MAX;
    pthread_mutex_init(&c->lock, NULL);
    pthread_mutex_init(&c->sync_lock, NULL);
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
    clog_reader_t rd = { .window = 1u << 20 }; /* the open writes only after its last read (the cut) */
    if (rc == 0) {
        rc = recover(c, &rd, rep, err, errlen);
    }
    clog_reader_free(&rd);
    if (rc == 0 && c->tail < c->must_reach) {
        rc = err_set(err, errlen,
                     "commit log in %s ends at offset %" PRIu64 ", below %" PRIu64
                     ", which the applied mark says was durable: segments missing",
                     o->dir, c->tail, c->must_reach);
        rc = CLOG_DAMAGED;
    }
    /* what a kill -9 left in the page cache is made durable before anything is built on it (design §3); the
       segments wholly below chain_from were synced before that checkpoint was written (above) */
    for (size_t i = 0; rc == 0 && i < c->nsegs; i++) {
        int below_checkpoint = c->segs[i].base + c->size <= c->chain_from;
        if (!c->segs[i].spare && !below_checkpoint && fdatasync(c->segs[i].fd) != 0) {
            char path[PATH_MAX];
            clog_seg_path(c, c->segs[i].base, path, sizeof path);
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
