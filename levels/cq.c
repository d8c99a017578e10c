/*
 * levels/cq.c — a consume queue: 16-byte entries in pre-written files whose
 * sizes the queue's layout gives (contract in cq.h).
 *
 * The queue keeps one fixfile (levels/fixfile.h) per file from the head's file
 * to the tail's, in files[0..nfiles) for file numbers first_file.. . Only the
 * tail file is appended to, so only it ever allocates an append buffer; an
 * index maps to (file, position) through cq.h's three layout functions only
 * (cq_layout_file_of, _first, _entries): nothing here knows a file's size
 * otherwise. The append keeps the index where the tail file ends
 * (tail_file_end), so it compares instead of mapping. The file switch: the
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
    cq_layout_t layout; /* cq_layout_of(queue) */
    uint64_t head, tail;
    uint64_t first_file;    /* the file number of files[0] */
    uint64_t tail_file_end; /* past the last index of files[nfiles - 1] (0 with no file) */
    size_t nfiles, cap;
    fixfile_t **files;
    char dir[PATH_MAX - 64]; /* room for "/" and a file name in a PATH_MAX path */
};

void cq_file_name(uint32_t queue, uint64_t index, char *name, size_t len)
{
    cq_layout_t l = cq_layout_of(queue);
    uint64_t first = cq_layout_file_first(l, cq_layout_file_of(l, index));
    snprintf(name, len, "cq-%08" PRIx32 "-%016" PRIx64 ".q", queue, first);
}

int cq_file_parse(const char *name, uint32_t *queue, uint64_t *first)
{
    char tail[4];
    return strlen(name) == 30 && sscanf(name, "cq-%8" SCNx32 "-%16" SCNx64 "%3s", queue, first, tail) == 3 &&
           strcmp(tail, ".q") == 0;
}

int cq_remove_queues(const char *dir, cq_doomed_fn doomed, void *ctx, uint64_t *removed, char *err, size_t errlen)
{
    *removed = 0;
    DIR *d = opendir(dir);
    if (d == NULL) {
        return err_set(err, errlen, "cannot list %s: %s", dir, strerror(errno));
    }
    int rc = 0;
    struct dirent *de;
    while ((de = readdir(d)) != NULL) {
        uint32_t queue;
        uint64_t first;
        if (!cq_file_parse(de->d_name, &queue, &first) || !doomed(ctx, queue, first)) {
            continue;
        }
        char path[PATH_MAX + 256];
        snprintf(path, sizeof path, "%s/%s", dir, de->d_name);
        if (unlink(path) == 0) {
            (*removed)++;
        } else if (rc == 0) {
            rc = err_set(err, errlen, "cq %08" PRIx32 ": %s: cannot delete: %s", queue, path, strerror(errno));
        }
    }
    closedir(d);
    return rc;
}

static void cq_file_path(const cq_t *q, uint64_t file_no, char *path, size_t len)
{
    char name[64];
    cq_file_name(q->queue, cq_layout_file_first(q->layout, file_no), name, sizeof name);
    snprintf(path, len, "%s/%s", q->dir, name);
}

static void cq_encode(char *p, const cq_entry_t *e)
{
    be64_put(p, e->log_offset);
    be64_put(p + 8, e->due);
}

/* Add f as the file after the last open one (or as file first_file). */
static void cq_push_file(cq_t *q, fixfile_t *f)
{
    if (q->nfiles == q->cap) {
        q->cap = q->cap ? q->cap * 2 : 4;
        q->files = xrealloc(q->files, q->cap * sizeof *q->files);
    }
    q->files[q->nfiles++] = f;
    q->tail_file_end = cq_layout_file_first(q->layout, q->first_file + q->nfiles);
}

/* cq_remove_queues' test for cq_sweep_below_head: a file of queue q
 * (ctx) wholly below its head. */
static int cq_file_below_head(void *ctx, uint32_t queue, uint64_t first)
{
    const cq_t *q = ctx;
    return queue == q->queue && cq_layout_file_of(q->layout, first) < cq_layout_file_of(q->layout, q->head);
}

/* Delete this queue's files wholly below the head: left by a crash between a
 * head advance and the checkpoint that releases its files (cq_release_below),
 * the head here being the one that checkpoint made durable. A head inside the queue's first file has no
 * file below it, and the directory (one file per topic and more) is not read:
 * a batch making n topics opens n new queues (design-commitlog.md 4b). */
static void cq_sweep_below_head(cq_t *q)
{
    if (cq_layout_file_of(q->layout, q->head) == 0) {
        return;
    }
    uint64_t removed;
    (void)cq_remove_queues(q->dir, cq_file_below_head, q, &removed, NULL, 0); /* cq_open's checks report a bad dir */
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
    q->layout = cq_layout_of(queue);
    q->head = head;
    q->tail = tail;
    snprintf(q->dir, sizeof q->dir, "%s", dir);
    q->first_file = cq_layout_file_of(q->layout, head);
    uint64_t end_file = tail == 0 ? 0 : cq_layout_file_of(q->layout, tail - 1) + 1; /* past the tail's file */
    for (uint64_t k = q->first_file; k < end_file; k++) {
        char path[PATH_MAX];
        cq_file_path(q, k, path, sizeof path);
        uint64_t entries = cq_layout_file_entries(q->layout, k);
        uint64_t file_tail = tail - cq_layout_file_first(q->layout, k);
        fixfile_t *f;
        if (fixfile_open(path, CQ_ENTRY_BYTES, entries, file_tail < entries ? file_tail : entries, CQ_BUFFER_ENTRIES,
                         &f, err, errlen) != 0) {
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
    if (fixfile_create(path, CQ_ENTRY_BYTES, cq_layout_file_entries(cq_layout_of(queue), 0), CQ_BUFFER_ENTRIES, &f, err,
                       errlen) != 0) {
        return err_prefix(err, errlen, "cq %08" PRIx32 ": its first file made ahead", queue);
    }
    return fixfile_close(f, err, errlen);
}

/* The place in files[] of the file holding index (which must be inside the
 * open files), and index's position in that file (*at). */
static size_t cq_file_slot(const cq_t *q, uint64_t index, uint64_t *at)
{
    uint64_t k = cq_layout_file_of(q->layout, index);
    *at = index - cq_layout_file_first(q->layout, k);
    return (size_t)(k - q->first_file);
}

/* The append at a file's first index: flush the file before, make or open the new one. */
static int cq_switch_file(cq_t *q, char *err, size_t errlen)
{
    if (q->nfiles > 0 && fixfile_flush(q->files[q->nfiles - 1], err, errlen) != 0) {
        return -1;
    }
    uint64_t k = cq_layout_file_of(q->layout, q->tail);
    if (q->nfiles == 0) {
        q->first_file = k;
    }
    char path[PATH_MAX];
    cq_file_path(q, k, path, sizeof path);
    uint64_t entries = cq_layout_file_entries(q->layout, k);
    struct stat st;
    fixfile_t *f;
    int rc = stat(path, &st) == 0 ? fixfile_open(path, CQ_ENTRY_BYTES, entries, 0, CQ_BUFFER_ENTRIES, &f, err, errlen)
                                  : fixfile_create(path, CQ_ENTRY_BYTES, entries, CQ_BUFFER_ENTRIES, &f, err, errlen);
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
    if ((q->nfiles == 0 || q->tail >= q->tail_file_end) && cq_switch_file(q, err, errlen) != 0) {
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
        uint64_t at;
        size_t slot = cq_file_slot(q, index, &at);
        fixfile_t *f = q->files[slot];
        uint64_t left_in_file = cq_layout_file_entries(q->layout, q->first_file + slot) - at;
        size_t run = n < 64 ? n : 64;
        if (run > left_in_file) {
            run = (size_t)left_in_file;
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
    uint64_t at;
    size_t slot = cq_file_slot(q, index, &at);
    if (fixfile_write(q->files[slot], at, rec, err, errlen) != 0) {
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
    while (drop < q->nfiles && cq_layout_file_first(q->layout, q->first_file + drop + 1) <= below) {
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
    if (q->nfiles == 0) {
        q->tail_file_end = 0; /* the next append makes the tail's file (cq_switch_file) */
    }
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
