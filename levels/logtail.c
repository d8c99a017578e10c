/*
 * levels/logtail.c — find and cut a torn write at the end of the newest
 * LevelDB write-ahead log of a data directory (see logtail.h).
 *
 * The walk mirrors LevelDB's log reader (db/log_reader.cc) with checksums
 * on: records are read block by block; what that reader accepts silently
 * (padding, a header or a record cut by the end of the file, a record in
 * fragments whose last fragment never came) is not damage; what it reports
 * as corruption (a checksum mismatch, a length past its block, a fragment
 * out of sequence, an unknown type) is. The first such record is the
 * damage; it is a torn end only when no whole record (a FULL or FIRST
 * fragment that passes its checksum) starts after it: within its block every
 * byte offset is tried (a record after damage can start anywhere there),
 * in each later block the records from its start (a block always starts
 * with a record header).
 *
 * logtail_find_hole walks every log in number order with the same rules to
 * its first damage, then searches the records that pass their checksum after
 * it (the same resync as above, then every later log's records) for a byte
 * string.
 *
 * Threading: any thread; reads and writes only the files it is given.
 */
#define _GNU_SOURCE /* memmem */
#include "levels/logtail.h"
#include "levels/logsync.h"
#include "levels/store.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/alloc.h"
#include "base/err.h"

#define LOG_BLOCK    32768u
#define LOG_HEADER   7u
#define LOG_FULL     1
#define LOG_FIRST    2
#define LOG_MIDDLE   3
#define LOG_LAST     4
#define LOG_CRC_MASK 0xa282ead8u

typedef struct walk {
    const unsigned char *b;
    uint64_t size;
} walk_t;

static uint64_t block_end(const walk_t *w, uint64_t p)
{
    uint64_t end = (p / LOG_BLOCK + 1) * LOG_BLOCK;
    return end < w->size ? end : w->size;
}

/* The type of the record at p when its header fits before its block's end,
 * its type is known, its data fits in the block and its checksum matches;
 * else 0. *len: its data length. */
static int record_at(const walk_t *w, uint64_t p, uint32_t *len)
{
    uint64_t end = block_end(w, p);
    if (end - p < LOG_HEADER) {
        return 0;
    }
    const unsigned char *h = w->b + p;
    uint32_t n = (uint32_t)h[4] | (uint32_t)h[5] << 8;
    int type = h[6];
    if (type < LOG_FULL || type > LOG_LAST || p + LOG_HEADER + n > end) {
        return 0;
    }
    uint32_t stored = (uint32_t)h[0] | (uint32_t)h[1] << 8 | (uint32_t)h[2] << 16 | (uint32_t)h[3] << 24;
    uint32_t rot = stored - LOG_CRC_MASK;
    uint32_t expected = (rot >> 17) | (rot << 15);
    if (store_crc32c(h + 6, 1 + (size_t)n) != expected) {
        return 0;
    }
    *len = n;
    return type;
}

/* Calls visit(ctx, type, data, len) for each record that passes its
 * checksum at or after the damage at d (visit returns 1 to stop; then 1 is
 * returned): within d's block every byte offset is tried (a record after
 * damage can start anywhere there), in each later block the records from its
 * start (a block always starts with a record header) until one fails. */
typedef int (*record_visit_fn)(void *ctx, int type, const unsigned char *data, uint32_t len);

static int visit_blocks_from(const walk_t *w, uint64_t first_block, record_visit_fn visit, void *ctx)
{
    uint32_t len;
    for (uint64_t blk = first_block; blk < w->size; blk += LOG_BLOCK) {
        for (uint64_t q = blk;;) {
            int type = record_at(w, q, &len);
            if (type == 0) {
                break;
            }
            if (visit(ctx, type, w->b + q + LOG_HEADER, len)) {
                return 1;
            }
            q += LOG_HEADER + len;
        }
    }
    return 0;
}

static int visit_records_after(const walk_t *w, uint64_t d, record_visit_fn visit, void *ctx)
{
    uint32_t len;
    for (uint64_t q = d, end = block_end(w, d); q + LOG_HEADER <= end; q++) {
        int type = record_at(w, q, &len);
        if (type != 0 && visit(ctx, type, w->b + q + LOG_HEADER, len)) {
            return 1;
        }
    }
    return visit_blocks_from(w, (d / LOG_BLOCK + 1) * LOG_BLOCK, visit, ctx);
}

static int stop_at_whole(void *ctx, int type, const unsigned char *data, uint32_t len)
{
    (void)ctx, (void)data, (void)len;
    return type == LOG_FULL || type == LOG_FIRST;
}

/* 1 when a whole record (FULL or FIRST) starts at the damage at d (a record
 * that passes its checksum but is out of sequence: LevelDB reports it and
 * still reads it) or after it. */
static int whole_record_after(const walk_t *w, uint64_t d)
{
    return visit_records_after(w, d, stop_at_whole, NULL);
}

/* Walk the records from the start: t->good_end, t->damage, t->torn. */
static void walk_log(const walk_t *w, logtail_t *t)
{
    uint64_t p = 0, good_end = 0;
    int in_fragments = 0, damaged = 0;
    while (p < w->size) {
        uint64_t end = block_end(w, p);
        if (end - p < LOG_HEADER) {
            p = end; /* a block's trailer, or a header cut by the end of the file */
            continue;
        }
        const unsigned char *h = w->b + p;
        uint32_t n = (uint32_t)h[4] | (uint32_t)h[5] << 8;
        if (h[6] == 0 && n == 0) {
            p = end; /* padding: the rest of the block */
            continue;
        }
        if (p + LOG_HEADER + n > end && end == w->size) {
            break; /* a record cut by the end of the file: the writer died in it */
        }
        uint32_t len;
        int type = record_at(w, p, &len);
        if (type == 0 || (in_fragments && (type == LOG_FULL || type == LOG_FIRST)) ||
            (!in_fragments && (type == LOG_MIDDLE || type == LOG_LAST))) {
            damaged = 1;
            break;
        }
        in_fragments = type == LOG_FIRST || type == LOG_MIDDLE;
        p += LOG_HEADER + len;
        if (!in_fragments) {
            good_end = p;
        }
    }
    t->good_end = damaged ? good_end : w->size;
    t->damage = damaged ? p : w->size;
    t->torn = damaged && !whole_record_after(w, p);
}

/* 1 when dir/name is a file of 0 bytes. */
static int empty_file(const char *dir, const char *name)
{
    char path[4096];
    struct stat st;
    snprintf(path, sizeof path, "%s/%s", dir, name);
    return stat(path, &st) == 0 && st.st_size == 0;
}

/* Open path read-only and learn its size: 0 with *fd (the caller closes
 * it) and *size, or -1 with err ("cannot read <path>: <why>") and nothing
 * left open. */
static int open_to_read(const char *path, int *fd, uint64_t *size, char *err, size_t errlen)
{
    *fd = open(path, O_RDONLY | O_CLOEXEC);
    struct stat st;
    if (*fd < 0 || fstat(*fd, &st) != 0) {
        err_set(err, errlen, "cannot read %s: %s", path, strerror(errno));
        if (*fd >= 0) {
            close(*fd);
        }
        return -1;
    }
    *size = (uint64_t)st.st_size;
    return 0;
}

/* Map dir/name read-only into *w (w->b NULL for an empty file). 0, or -1
 * with err naming the file. */
static int map_log(const char *dir, const char *name, walk_t *w, char *err, size_t errlen)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    w->b = NULL;
    w->size = 0;
    int fd;
    uint64_t size;
    if (open_to_read(path, &fd, &size, err, errlen) != 0) {
        return -1;
    }
    if (size == 0) {
        close(fd);
        return 0;
    }
    void *map = mmap(NULL, (size_t)size, PROT_READ, MAP_PRIVATE, fd, 0);
    int saved = errno;
    close(fd);
    if (map == MAP_FAILED) {
        return err_set(err, errlen, "cannot read %s: %s", path, strerror(saved));
    }
    w->b = map;
    w->size = size;
    return 0;
}

static void unmap_log(walk_t *w)
{
    if (w->b != NULL) {
        munmap((void *)w->b, (size_t)w->size);
    }
}

int logtail_inspect(const char *dir, logtail_t *t, char *err, size_t errlen)
{
    memset(t, 0, sizeof *t);
    DIR *d = opendir(dir);
    if (d == NULL) {
        return err_set(err, errlen, "cannot list %s: %s", dir, strerror(errno));
    }
    unsigned long long newest = 0;
    int found = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        unsigned long long number;
        if (logsync_log_number(e->d_name, &number) && (!found || number > newest) && !empty_file(dir, e->d_name)) {
            newest = number;
            found = 1;
        }
    }
    closedir(d);
    if (!found) {
        return 0;
    }
    snprintf(t->file, sizeof t->file, "%06llu.log", newest);
    walk_t w;
    if (map_log(dir, t->file, &w, err, errlen) != 0) {
        return -1;
    }
    t->size = t->good_end = t->damage = w.size;
    if (w.size > 0) {
        walk_log(&w, t);
    }
    unmap_log(&w);
    return 0;
}

/* ---- a hole in the logs ------------------------------------------------------------- */

static int cmp_number(const void *a, const void *b)
{
    unsigned long long x = *(const unsigned long long *)a, y = *(const unsigned long long *)b;
    return x < y ? -1 : x > y;
}

/* The numbers of dir's write-ahead logs, ascending, into a new array. -1
 * with err when dir cannot be listed. */
static int list_logs(const char *dir, unsigned long long **out, size_t *n, char *err, size_t errlen)
{
    *out = NULL;
    *n = 0;
    DIR *d = opendir(dir);
    if (d == NULL) {
        return err_set(err, errlen, "cannot list %s: %s", dir, strerror(errno));
    }
    size_t cap = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        unsigned long long number;
        if (!logsync_log_number(e->d_name, &number)) {
            continue;
        }
        if (*n == cap) {
            cap = cap ? 2 * cap : 8;
            *out = xrealloc(*out, cap * sizeof **out);
        }
        (*out)[(*n)++] = number;
    }
    closedir(d);
    if (*n > 0) {
        qsort(*out, *n, sizeof **out, cmp_number);
    }
    return 0;
}

/* The needle search over the records after a hole: each fragment's data,
 * and the join of a fragment's end with the next one's start (a needle may
 * be split by the record's fragments). */
typedef struct needle_search {
    const unsigned char *needle;
    size_t n;
    unsigned char tail[LOGTAIL_NEEDLE_MAX]; /* the last bytes (n - 1 at most) of an unfinished record's fragment */
    size_t tail_len;
} needle_search_t;

static int find_needle(void *ctx, int type, const unsigned char *data, uint32_t len)
{
    needle_search_t *ns = ctx;
    if (memmem(data, len, ns->needle, ns->n) != NULL) {
        return 1;
    }
    if ((type == LOG_MIDDLE || type == LOG_LAST) && ns->tail_len > 0) {
        unsigned char join[2 * LOGTAIL_NEEDLE_MAX];
        size_t head = len < ns->n - 1 ? len : ns->n - 1;
        memcpy(join, ns->tail, ns->tail_len);
        memcpy(join + ns->tail_len, data, head);
        if (memmem(join, ns->tail_len + head, ns->needle, ns->n) != NULL) {
            return 1;
        }
    }
    ns->tail_len = 0;
    if (type == LOG_FIRST || type == LOG_MIDDLE) {
        ns->tail_len = len < ns->n - 1 ? len : ns->n - 1;
        memcpy(ns->tail, data + len - ns->tail_len, ns->tail_len);
    }
    return 0;
}

int logtail_find_hole(const char *dir, const void *needle, size_t needle_len, loghole_t *h, char *err, size_t errlen)
{
    memset(h, 0, sizeof *h);
    if (needle_len == 0 || needle_len > LOGTAIL_NEEDLE_MAX) {
        return err_set(err, errlen, "a needle of %zu bytes: 1 to %d are searched for", needle_len, LOGTAIL_NEEDLE_MAX);
    }
    unsigned long long *logs;
    size_t n;
    if (list_logs(dir, &logs, &n, err, errlen) != 0) {
        return -1;
    }
    needle_search_t ns = { .needle = needle, .n = needle_len };
    int rc = 0;
    for (size_t i = 0; i < n && rc == 0 && !h->needle_after; i++) {
        char name[64];
        snprintf(name, sizeof name, "%06llu.log", logs[i]);
        walk_t w;
        if (map_log(dir, name, &w, err, errlen) != 0) {
            rc = -1;
            break;
        }
        if (h->file[0] != '\0') { /* a log after the damaged one: every record of it */
            h->needle_after = visit_blocks_from(&w, 0, find_needle, &ns);
        } else if (w.size > 0) {
            logtail_t t;
            memset(&t, 0, sizeof t);
            t.size = w.size;
            walk_log(&w, &t);
            if (t.damage < t.size) {
                snprintf(h->file, sizeof h->file, "%s", name);
                h->at = t.damage;
                h->size = t.size;
                h->needle_after = visit_records_after(&w, t.damage, find_needle, &ns);
            }
        }
        unmap_log(&w);
    }
    free(logs);
    return rc;
}

/* Write all of buf to fd; 0 or -1 (errno set). */
static int write_all(int fd, const unsigned char *buf, size_t n)
{
    while (n > 0) {
        ssize_t k = write(fd, buf, n);
        if (k < 0) {
            if (errno == EINTR) {
                continue;
            }
            return -1;
        }
        buf += k;
        n -= (size_t)k;
    }
    return 0;
}

/* Copy bytes [from, size) of the log open at fd into a new file at path, fsynced. */
static int keep_tail(int fd, uint64_t from, uint64_t size, const char *path, char *err, size_t errlen)
{
    int out = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (out < 0) {
        return err_set(err, errlen, "cannot create %s: %s", path, strerror(errno));
    }
    unsigned char buf[65536];
    uint64_t at = from;
    int rc = 0;
    while (rc == 0 && at < size) {
        size_t want = size - at < sizeof buf ? (size_t)(size - at) : sizeof buf;
        ssize_t k = pread(fd, buf, want, (off_t)at);
        if (k <= 0) {
            rc = err_set(err, errlen, "cannot read the log's end for %s: %s", path, k < 0 ? strerror(errno) : "EOF");
        } else if (write_all(out, buf, (size_t)k) != 0) {
            rc = err_set(err, errlen, "cannot write %s: %s", path, strerror(errno));
        }
        at += k > 0 ? (uint64_t)k : 0;
    }
    if (rc == 0 && fsync(out) != 0) {
        rc = err_set(err, errlen, "cannot fsync %s: %s", path, strerror(errno));
    }
    close(out);
    if (rc != 0) {
        unlink(path);
    }
    return rc;
}

int logtail_cut(const char *dir, const logtail_t *t, char *err, size_t errlen)
{
    if (!t->torn) {
        return err_set(err, errlen, "%s/%s has no torn end to cut", dir, t->file);
    }
    char path[4096], kept[4200];
    snprintf(path, sizeof path, "%s/%s", dir, t->file);
    snprintf(kept, sizeof kept, "%s.torn-%llu", path, (unsigned long long)t->good_end);
    int fd = open(path, O_RDWR | O_CLOEXEC);
    if (fd < 0) {
        return err_set(err, errlen, "cannot open %s: %s", path, strerror(errno));
    }
    int rc = keep_tail(fd, t->good_end, t->size, kept, err, errlen);
    if (rc == 0 && (ftruncate(fd, (off_t)t->good_end) != 0 || fsync(fd) != 0)) {
        rc = err_set(err, errlen, "cannot cut %s at %llu: %s", path, (unsigned long long)t->good_end, strerror(errno));
    }
    close(fd);
    int dfd = rc == 0 ? open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC) : -1;
    if (dfd >= 0) {
        fsync(dfd); /* the new file's name; the cut is the log's own fsync */
        close(dfd);
    }
    return rc;
}

int logtail_keep_from(const char *dir, const char *file, uint64_t from, char *kept, size_t keptlen, char *err,
                      size_t errlen)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, file);
    snprintf(kept, keptlen, "%s.hole-%llu", path, (unsigned long long)from);
    int fd;
    uint64_t size;
    if (open_to_read(path, &fd, &size, err, errlen) != 0) {
        return -1;
    }
    int rc = keep_tail(fd, from, size, kept, err, errlen);
    close(fd);
    int dfd = rc == 0 ? open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC) : -1;
    if (dfd >= 0) {
        fsync(dfd);
        close(dfd);
    }
    return rc;
}
