/*
 * levels/cq.c — a consume queue: 16-byte entries in pre-written files of
 * CQ_FILE_ENTRIES, or fewer for the topics' queues (contract in cq.h).
 *
 * The queue keeps one fixfile (levels/fixfile.h) per file from the head's file
 * to the tail's, in files[0..nfiles) for file numbers first_file.. (file k
 * holds indexes [k * entries, (k + 1) * entries), entries = 2^shift). Only the
 * tail file is appended to, so only it ever allocates an append buffer; an
 * index maps to (file, position) by a shift and a mask. The file switch: the
 * append whose index is the first of a file flushes the file before it, then
 * makes the new file (pre-written), or opens it with no entries when a
 * previous life left it there (a crash after the file was made, before the
 * caller stored a tail inside it: its bytes past the tail are not entries).
 * Entries are encoded big-endian (levels/keys.h's helpers), like every
 * integer the store writes.
 */
#include "levels/cq.h"
#include "base/alloc.h"
#include "base/err.h"
#include "levels/fixfile.h"
#include "levels/keys.h"

#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

struct cq {
    uint32_t queue;
    unsigned shift;   /* a file holds 2^shift entries (cq_file_entries) */
    uint64_t entries; /* 2^shift */
    uint64_t head, tail;
    uint64_t first_file; /* the file number of files[0] */
    size_t nfiles, cap;
    fixfile_t **files;
    char dir[PATH_MAX - 64]; /* room for "/" and a file name in a PATH_MAX path */
};

void cq_file_name(uint32_t queue, uint64_t index, char *name, size_t len)
{
    snprintf(name, len, "cq-%08" PRIx32 "-%016" PRIx64 ".q", queue, index & ~(cq_file_entries(queue) - 1));
}

static void cq_file_path(const cq_t *q, uint64_t file_no, char *path, size_t len)
{
    char name[64];
    cq_file_name(q->queue, file_no << q->shift, name, sizeof name);
    snprintf(path, len, "%s/%s", q->dir, name);
}

static void cq_encode(char *p, const cq_entry_t *e)
{
    be64_put(p, e->log_offset);
    be64_put(p + 8, e->due);
}

static void cq_push_file(cq_t *q, fixfile_t *f)
{
    if (q->nfiles == q->cap) {
        q->cap = q->cap ? q->cap * 2 : 4;
        q->files = xrealloc(q->files, q->cap * sizeof *q->files);
    }
    q->files[q->nfiles++] = f;
}

/* Delete this queue's files wholly below the head: left by a crash between a
 * head advance and the checkpoint that releases its files (cq_release_below),
 * the head here being the one that checkpoint made durable. A head inside the queue's first file has no
 * file below it, and the directory (one file per topic and more) is not read:
 * a batch making n topics opens n new queues (design-commitlog.md 4b). */
static void cq_sweep_below_head(cq_t *q)
{
    if (q->head < q->entries) {
        return;
    }
    DIR *d = opendir(q->dir);
    if (d == NULL) {
        return; /* cq_open's file checks report an unreadable directory */
    }
    char prefix[32];
    snprintf(prefix, sizeof prefix, "cq-%08" PRIx32 "-", q->queue);
    struct dirent *de;
    while ((de = readdir(d)) != NULL) {
        uint64_t first;
        char tail[4];
        if (strncmp(de->d_name, prefix, strlen(prefix)) != 0 ||
            sscanf(de->d_name + strlen(prefix), "%16" SCNx64 "%3s", &first, tail) != 2 || strcmp(tail, ".q") != 0) {
            continue;
        }
        if (first + q->entries <= q->head) {
            char path[PATH_MAX + 256];
            snprintf(path, sizeof path, "%s/%s", q->dir, de->d_name);
            unlink(path);
        }
    }
    closedir(d);
}

int cq_open(const char *dir, uint32_t queue, uint64_t head, uint64_t tail, cq_t **out, char *err, size_t errlen)
{
    *out = NULL;
    if (head > tail) {
        return err_set(err, errlen, "cq %08" PRIx32 ": head %" PRIu64 " is past the tail %" PRIu64, queue, head, tail);
    }
    if (strlen(dir) >= sizeof((cq_t *)NULL)->dir) {
        return err_set(err, errlen, "cq %08" PRIx32 ": directory path too long", queue);
    }
    cq_t *q = xcalloc(1, sizeof *q);
    q->queue = queue;
    q->shift = cq_file_shift(queue);
    q->entries = UINT64_C(1) << q->shift;
    q->head = head;
    q->tail = tail;
    snprintf(q->dir, sizeof q->dir, "%s", dir);
    q->first_file = head >> q->shift;
    uint64_t end_file = (tail + q->entries - 1) >> q->shift; /* past the tail's file */
    for (uint64_t k = q->first_file; k < end_file; k++) {
        char path[PATH_MAX];
        cq_file_path(q, k, path, sizeof path);
        uint64_t file_tail = tail - (k << q->shift);
        fixfile_t *f;
        if (fixfile_open(path, CQ_ENTRY_BYTES, q->entries, file_tail < q->entries ? file_tail : q->entries,
                         CQ_BUFFER_ENTRIES, &f, err, errlen) != 0) {
            err_prefix(err, errlen, "cq %08" PRIx32 " [%" PRIu64 ", %" PRIu64 ")", queue, head, tail);
            cq_close(q, NULL, 0);
            return -1;
        }
        cq_push_file(q, f);
    }
    cq_sweep_below_head(q);
    *out = q;
    return 0;
}

int cq_make_first_file(const char *dir, uint32_t queue, char *err, size_t errlen)
{
    char name[64], path[PATH_MAX];
    cq_file_name(queue, 0, name, sizeof name);
    if ((size_t)snprintf(path, sizeof path, "%s/%s", dir, name) >= sizeof path) {
        return err_set(err, errlen, "cq %08" PRIx32 ": directory path too long", queue);
    }
    struct stat st;
    if (stat(path, &st) == 0) {
        return 0; /* a previous life made it: the first append opens it with no entries */
    }
    fixfile_t *f;
    if (fixfile_create(path, CQ_ENTRY_BYTES, cq_file_entries(queue), CQ_BUFFER_ENTRIES, &f, err, errlen) != 0) {
        return err_prefix(err, errlen, "cq %08" PRIx32 ": its first file made ahead", queue);
    }
    return fixfile_close(f, err, errlen);
}

/* The file holding index, which must be inside the open files. */
static fixfile_t *cq_file_of(const cq_t *q, uint64_t index)
{
    return q->files[(index >> q->shift) - q->first_file];
}

/* The append at a file's first index: flush the file before, make or open the new one. */
static int cq_switch_file(cq_t *q, char *err, size_t errlen)
{
    if (q->nfiles > 0 && fixfile_flush(q->files[q->nfiles - 1], err, errlen) != 0) {
        return -1;
    }
    uint64_t k = q->tail >> q->shift;
    if (q->nfiles == 0) {
        q->first_file = k;
    }
    char path[PATH_MAX];
    cq_file_path(q, k, path, sizeof path);
    struct stat st;
    fixfile_t *f;
    int rc = stat(path, &st) == 0
                 ? fixfile_open(path, CQ_ENTRY_BYTES, q->entries, 0, CQ_BUFFER_ENTRIES, &f, err, errlen)
                 : fixfile_create(path, CQ_ENTRY_BYTES, q->entries, CQ_BUFFER_ENTRIES, &f, err, errlen);
    if (rc != 0) {
        return err_prefix(err, errlen, "cq %08" PRIx32 ": append at %" PRIu64, q->queue, q->tail);
    }
    cq_push_file(q, f);
    return 0;
}

int cq_append(cq_t *q, const cq_entry_t *e, uint64_t *index, char *err, size_t errlen)
{
    if (e->log_offset == 0) {
        return err_set(err, errlen, "cq %08" PRIx32 ": append at %" PRIu64 ": log offset 0 is not a record", q->queue,
                       q->tail);
    }
    if (q->tail == UINT64_MAX) {
        return err_set(err, errlen, "cq %08" PRIx32 ": index space exhausted", q->queue);
    }
    uint64_t want_files = (q->tail >> q->shift) - q->first_file + 1;
    if ((q->nfiles == 0 || q->nfiles < want_files) && cq_switch_file(q, err, errlen) != 0) {
        return -1;
    }
    char rec[CQ_ENTRY_BYTES];
    cq_encode(rec, e);
    if (fixfile_append(q->files[q->nfiles - 1], rec, err, errlen) != 0) {
        return err_prefix(err, errlen, "cq %08" PRIx32 ": append at %" PRIu64, q->queue, q->tail);
    }
    if (index != NULL) {
        *index = q->tail;
    }
    q->tail++;
    return 0;
}

static int cq_check_range(const cq_t *q, const char *what, uint64_t index, size_t n, char *err, size_t errlen)
{
    if (index < q->head || index > q->tail || n > q->tail - index) {
        return err_set(err, errlen,
                       "cq %08" PRIx32 ": %s of [%" PRIu64 ", %" PRIu64 ") outside the queue's [%" PRIu64 ", %" PRIu64
                       ")",
                       q->queue, what, index, index + n, q->head, q->tail);
    }
    return 0;
}

int cq_read(cq_t *q, uint64_t index, size_t n, cq_entry_t *out, char *err, size_t errlen)
{
    if (cq_check_range(q, "read", index, n, err, errlen) != 0) {
        return -1;
    }
    char buf[64 * CQ_ENTRY_BYTES];
    while (n > 0) {
        fixfile_t *f = cq_file_of(q, index);
        uint64_t at = index & (q->entries - 1);
        size_t run = n < 64 ? n : 64;
        if (run > q->entries - at) {
            run = (size_t)(q->entries - at);
        }
        if (fixfile_read(f, at, run, buf, err, errlen) != 0) {
            return err_prefix(err, errlen, "cq %08" PRIx32 ": read at %" PRIu64, q->queue, index);
        }
        for (size_t i = 0; i < run; i++) {
            out[i].log_offset = be64_get(buf + i * CQ_ENTRY_BYTES);
            out[i].due = be64_get(buf + i * CQ_ENTRY_BYTES + 8);
            if (out[i].log_offset == 0) {
                return err_set(err, errlen,
                               "cq %08" PRIx32 ": entry %" PRIu64 " in %s is zero: never written, or lost since the "
                               "last checkpoint",
                               q->queue, index + i, fixfile_path(f));
            }
        }
        out += run;
        index += run;
        n -= run;
    }
    return 0;
}

int cq_rewrite(cq_t *q, uint64_t index, const cq_entry_t *e, char *err, size_t errlen)
{
    if (cq_check_range(q, "rewrite", index, 1, err, errlen) != 0) {
        return -1;
    }
    if (e->log_offset == 0) {
        return err_set(err, errlen, "cq %08" PRIx32 ": rewrite at %" PRIu64 ": log offset 0 is not a record", q->queue,
                       index);
    }
    char rec[CQ_ENTRY_BYTES];
    cq_encode(rec, e);
    if (fixfile_write(cq_file_of(q, index), index & (q->entries - 1), rec, err, errlen) != 0) {
        return err_prefix(err, errlen, "cq %08" PRIx32 ": rewrite at %" PRIu64, q->queue, index);
    }
    return 0;
}

int cq_advance_head(cq_t *q, uint64_t new_head, char *err, size_t errlen)
{
    if (new_head < q->head || new_head > q->tail) {
        return err_set(err, errlen,
                       "cq %08" PRIx32 ": head %" PRIu64 " outside [%" PRIu64 ", %" PRIu64
                       "] (head only moves forward, up to the tail)",
                       q->queue, new_head, q->head, q->tail);
    }
    q->head = new_head;
    return 0;
}

int cq_release_below(cq_t *q, uint64_t durable_head, char *err, size_t errlen)
{
    uint64_t below = durable_head < q->head ? durable_head : q->head;
    /* File k goes when all its entries are below it. When the tail sits on
     * the next file's first index, no file is left: the next append makes
     * that file (cq_switch_file). */
    size_t drop = 0;
    while (drop < q->nfiles && ((q->first_file + drop + 1) << q->shift) <= below) {
        drop++;
    }
    if (drop == 0) {
        return 0; /* a queue without files has files NULL: no memmove of it (undefined, even of 0 bytes) */
    }
    int rc = 0;
    for (size_t i = 0; i < drop; i++) {
        char path[PATH_MAX];
        snprintf(path, sizeof path, "%s", fixfile_path(q->files[i]));
        if (fixfile_close(q->files[i], err, errlen) != 0) {
            rc = -1; /* entries below the head: nothing of value was lost */
        }
        if (unlink(path) != 0 && rc == 0) {
            rc = err_set(err, errlen, "cq %08" PRIx32 ": %s: cannot delete below the head %" PRIu64 ": %s", q->queue,
                         path, below, strerror(errno));
        }
    }
    memmove(q->files, q->files + drop, (q->nfiles - drop) * sizeof *q->files);
    q->nfiles -= drop;
    q->first_file += drop;
    return rc;
}

int cq_flush(cq_t *q, char *err, size_t errlen)
{
    if (q->nfiles > 0 && fixfile_flush(q->files[q->nfiles - 1], err, errlen) != 0) {
        return err_prefix(err, errlen, "cq %08" PRIx32, q->queue);
    }
    return 0;
}

int cq_sync(cq_t *q, char *err, size_t errlen)
{
    for (size_t i = 0; i < q->nfiles; i++) {
        if (fixfile_sync(q->files[i], err, errlen) != 0) {
            return err_prefix(err, errlen, "cq %08" PRIx32, q->queue);
        }
    }
    return 0;
}

int cq_sync_handoff(cq_t *q, int all, fixfile_syncset_t *s, char *err, size_t errlen)
{
    for (size_t i = 0; i < q->nfiles; i++) {
        if (fixfile_sync_handoff(q->files[i], all, s, err, errlen) != 0) {
            return err_prefix(err, errlen, "cq %08" PRIx32, q->queue);
        }
    }
    return 0;
}

int cq_close(cq_t *q, char *err, size_t errlen)
{
    if (q == NULL) {
        return 0;
    }
    int rc = 0;
    for (size_t i = 0; i < q->nfiles; i++) {
        if (fixfile_close(q->files[i], err, errlen) != 0 && rc == 0) {
            rc = err_prefix(err, errlen, "cq %08" PRIx32, q->queue);
        }
    }
    free(q->files);
    free(q);
    return rc;
}

uint64_t cq_head(const cq_t *q)
{
    return q->head;
}

uint64_t cq_tail(const cq_t *q)
{
    return q->tail;
}
