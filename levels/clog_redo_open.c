/*
 * levels/clog_redo_open.c — the redo's open and close (contracts in
 * levels/clog_redo.h; design in docs/design-commitlog.md §3): the open reads
 * the marks from LevelDB, opens the log (levels/clog_open.c), redoes every
 * batch from B to the log's end through the same apply the running log uses
 * (clog_redo_files.c) and takes a checkpoint; the close finishes what is
 * held with a clean checkpoint, or (redo_free) closes the files without one.
 * Owner thread.
 */
#define _GNU_SOURCE
#include "levels/clog_redo_internal.h"
#include "base/alloc.h"
#include "base/err.h"
#include "levels/clog_derived.h"
#include "levels/clog_overlay.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static uint64_t now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000 + (uint64_t)ts.tv_nsec / 1000;
}

/* Close every file and free r; the first failure is kept in err. */
static int redo_close_files(redo_t *r, char *err, size_t errlen)
{
    clog_finisher_free(r->finisher); /* a finish running there (redo_free drops it) ends first: it uses the files */
    int rc = 0;
    char e2[512];
    for (size_t i = 0; i < r->nqueues; i++) {
        if (cq_close(r->queues[i].q, e2, sizeof e2) != 0 && rc == 0) {
            rc = err_set(err, errlen, "%s", e2);
        }
    }
    for (size_t i = 0; i < r->nslots; i++) {
        if (slot_file_close(r->slots[i].f, e2, sizeof e2) != 0 && rc == 0) {
            rc = err_set(err, errlen, "%s", e2);
        }
    }
    for (size_t i = r->hfirst; i < r->nheld; i++) {
        free(r->held[i].ops);
        free(r->held[i].rec);
    }
    for (size_t i = 0; i < r->nspare; i++) {
        free(r->spare[i].ops);
    }
    clog_close(r->log);
    overlay_free(r->overlay);
    logsync_free(r->dbsync);
    leveldb_writeoptions_destroy(r->wo_nosync);
    leveldb_readoptions_destroy(r->ro);
    free(r->queues);
    free(r->slots);
    free(r->held);
    free(r->dir);
    fixfile_syncset_clear(&r->ckpt.files);
    free(r);
    return rc;
}

int redo_close(redo_t *r, char *err, size_t errlen)
{
    if (r == NULL) {
        return 0;
    }
    int rc = redo_finish_open_checkpoint(r, err, errlen);
    if (rc == 0) {
        rc = clog_sync(r->log, err, errlen);
    }
    if (rc == 0) {
        rc = redo_apply_durable(r, err, errlen);
    }
    if (rc == 0) {
        rc = redo_checkpoint_at(r, r->applied, 1, err, errlen);
    }
    char e2[512];
    if (redo_close_files(r, e2, sizeof e2) != 0 && rc == 0) {
        rc = err_set(err, errlen, "%s", e2);
    }
    return rc;
}

int redo_free(redo_t *r, char *err, size_t errlen)
{
    if (r == NULL) {
        return 0;
    }
    return redo_close_files(r, err, errlen);
}

/* ---- open and close ------------------------------------------------------------------ */

/* The mark `name` from LevelDB into *v (0 when absent). */
static int read_mark(redo_t *r, const char *name, uint64_t *v, char *err, size_t errlen)
{
    key_buf_t k = redo_mark_key(name);
    size_t n = 0;
    char *dberr = NULL;
    char *val = leveldb_get(r->db, r->ro, k.b, k.n, &n, &dberr);
    *v = 0;
    if (dberr != NULL) {
        err_set(err, errlen, "cannot read the commit log's mark M \"%s\": %s", name, dberr);
        leveldb_free(dberr);
        return -1;
    }
    int rc = 0;
    if (val != NULL && n != 8) {
        rc = err_set(err, errlen, "the commit log's mark M \"%s\" holds %zu bytes, not 8", name, n);
    } else if (val != NULL) {
        *v = be64_get(val);
    }
    leveldb_free(val);
    return rc;
}

/* The redo walk: keeps the batch's last data record when it is a derived-writes
 * record; at its COMMIT, applies it (none kept: the batch is refused). */
typedef struct redo_walk {
    redo_t *r;
    char *last;
    size_t len, cap;
    char *err;
    size_t errlen;
} redo_walk_t;

static int redo_one(const clog_record_t *rec, void *ctx)
{
    redo_walk_t *w = ctx;
    if (rec->type == CLOG_DATA) {
        /* only a derived-writes record is kept: a message (no magic, or one that happens to start with it and
           is followed by the batch's derived record) need not be copied */
        if (rec->len < DERIVED_HEAD || memcmp(rec->data, DERIVED_MAGIC, 4) != 0) {
            w->len = 0;
            return 0;
        }
        if (rec->len > w->cap) {
            w->cap = rec->len * 2;
            w->last = xrealloc(w->last, w->cap);
        }
        memcpy(w->last, rec->data, rec->len);
        w->len = rec->len;
        return 0;
    }
    int rc = redo_apply_record(w->r, rec->next, w->last, w->len, w->err, w->errlen);
    w->len = 0;
    return rc == 0 ? 0 : rc == REDO_DAMAGED ? REDO_DAMAGED : -1;
}

int redo_open(const redo_options_t *o, redo_t **out, redo_open_report_t *rep, char *err, size_t errlen)
{
    *out = NULL;
    redo_open_report_t local;
    if (rep == NULL) {
        rep = &local;
    }
    memset(rep, 0, sizeof *rep);
    if (o->db == NULL || o->db_dir == NULL || o->dir == NULL) {
        return err_set(err, errlen, "commit log redo: the directory, the LevelDB handle and its directory are needed");
    }
    redo_t *r = xcalloc(1, sizeof *r);
    r->dir = xstrdup(o->dir);
    r->db = o->db;
    r->dbsync = logsync_new(o->db_dir);
    r->overlay = overlay_new();
    r->wo_nosync = leveldb_writeoptions_create();
    r->ro = leveldb_readoptions_create();
    /* a damaged block holding a mark is refused, not read as another mark
     * nor left in the block cache for later readers to take unverified */
    leveldb_readoptions_set_verify_checksums(r->ro, 1);
    r->bounds = o->bounds;
    r->bounds_ctx = o->bounds_ctx;
    int rc = read_mark(r, "checkpoint", &rep->checkpoint, err, errlen);
    if (rc == 0) {
        rc = read_mark(r, "applied", &rep->applied, err, errlen);
    }
    uint64_t clean = 0;
    if (rc == 0) {
        rc = read_mark(r, "clean", &clean, err, errlen);
    }
    if (rc == 0 && rep->applied < rep->checkpoint) {
        rc = err_set(err, errlen,
                     "LevelDB's applied mark %" PRIu64 " lies below its checkpoint %" PRIu64
                     " (a checkpoint is taken of what was applied): damaged",
                     rep->applied, rep->checkpoint);
        rc = REDO_DAMAGED;
    }
    if (rc == 0) {
        /* the open syncs what a kill -9 left in the page cache before the redo builds on it */
        clog_options_t co = { o->dir, o->segment_bytes, o->floor, rep->applied, rep->checkpoint, clean };
        uint64_t t0 = now_us();
        rc = clog_open(&co, &r->log, &rep->log, err, errlen);
        rep->log_open_us = now_us() - t0;
        if (rc == CLOG_DAMAGED) {
            rc = REDO_DAMAGED;
        }
    }
    if (rc == 0) {
        clog_keep_from(r->log, rep->checkpoint);
        rep->bytes = rep->log.end - rep->checkpoint;
        r->applied = rep->checkpoint;
        atomic_store(&r->checkpoint, rep->checkpoint);
        redo_walk_t w = { r, NULL, 0, 0, err, errlen };
        r->counts = rep;
        uint64_t t0 = now_us();
        rc = clog_walk_after(r->log, rep->checkpoint, redo_one, &w, err, errlen);
        rep->redo_us = now_us() - t0;
        r->counts = NULL;
        free(w.last);
        if (rc == CLOG_NOT_RECORD) {
            rc = err_set(err, errlen, "commit log in %s: the checkpoint %" PRIu64 " is not a batch's end", o->dir,
                         rep->checkpoint);
            rc = REDO_DAMAGED;
        }
    }
    if (rc == 0 && r->applied != rep->log.end) {
        rc = err_set(err, errlen, "commit log redo stopped at offset %" PRIu64 " before the log's end %" PRIu64,
                     r->applied, rep->log.end);
    }
    if (rc == 0) {
        uint64_t t0 = now_us();
        rc = redo_checkpoint(r, err, errlen);
        rep->checkpoint_us = now_us() - t0;
    }
    if (rc != 0) {
        char ignored[64];
        r->hfirst = r->nheld = 0;
        redo_close_files(r, ignored, sizeof ignored);
        return rc;
    }
    *out = r;
    return 0;
}
