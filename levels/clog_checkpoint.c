/*
 * levels/clog_checkpoint.c — the redo's checkpoints (contracts in
 * levels/clog_redo.h; design in docs/design-commitlog.md §3 and "Checkpoints
 * on the log's own thread"): the begin on the owner thread takes B and hands
 * the CQ and slot files written since the last one to the finish as duplicate
 * descriptors; the finish (on any thread, or on the finisher's,
 * levels/clog_finisher.h) syncs them, LevelDB's logs and the directory, then
 * writes `M "checkpoint"` = B; the settle, back on the owner thread, deletes
 * the CQ files wholly below the heads it covers.
 */
#define _GNU_SOURCE
#include "levels/clog_redo_internal.h"
#include "base/alloc.h"
#include "base/err.h"
#include "levels/clog_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <string.h>
#include <unistd.h>

static int sync_dir(const char *dir, char *err, size_t errlen)
{
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0 || fsync(fd) != 0) {
        err_set(err, errlen, "cannot sync directory %s: %s", dir, strerror(errno));
        if (fd >= 0) {
            close(fd);
        }
        return -1;
    }
    close(fd);
    return 0;
}

/* Begin the checkpoint at B = b (r->applied, or past it: the end of a range
 * whose held writes are carried in the log past b, redo_sync_failed), with
 * `M "applied"` raised to B when below; with `clean`, also M "clean" = B (the
 * log closes here), else M "clean" deleted (the log may grow past B from now
 * on), in the mark's write. Owner thread: the buffers of the CQ and slot
 * files are written (no sync) and the files written since the last
 * checkpoint handed to the finish as duplicate descriptors. */
static int checkpoint_begin_at(redo_t *r, uint64_t b, int clean, char *err, size_t errlen)
{
    if (atomic_load(&r->ckpt.open)) {
        return err_set(err, errlen,
                       "commit log checkpoint: the checkpoint begun at offset %" PRIu64
                       " is not finished (redo_checkpoint_finish first); a second one is refused",
                       r->ckpt.b);
    }
    int all = atomic_exchange(&r->resync_all, 0);
    int rc = 0;
    for (size_t i = 0; rc == 0 && i < r->nqueues; i++) {
        if (r->queues[i].dirty || all) {
            rc = cq_sync_handoff(r->queues[i].q, all, &r->ckpt.files, err, errlen);
            r->queues[i].dirty = rc != 0;
        }
    }
    for (size_t i = 0; rc == 0 && i < r->nslots; i++) {
        if (r->slots[i].dirty || all) {
            rc = slot_sync_handoff(r->slots[i].f, all, &r->ckpt.files, err, errlen);
            r->slots[i].dirty = rc != 0;
        }
    }
    if (rc != 0) {
        /* files handed over count as synced in their fixfile: the next checkpoint hands every one again */
        fixfile_syncset_clear(&r->ckpt.files);
        atomic_store(&r->resync_all, 1);
        return -1;
    }
    for (size_t i = 0; i < r->nqueues; i++) {
        r->queues[i].release_to = cq_head(r->queues[i].q); /* the head as of B: the checkpoint makes it durable */
    }
    r->ckpt.b = b;
    r->ckpt.covered = r->applied_since;
    r->applied_since = 0; /* what was applied lies below B */
    r->ckpt.clean = clean;
    r->ckpt.raise_applied = b > r->applied;
    atomic_store(&r->ckpt.open, 1);
    return 0;
}

int redo_checkpoint_begin(redo_t *r, uint64_t *b, char *err, size_t errlen)
{
    if (checkpoint_begin_at(r, r->applied, 0, err, errlen) != 0) {
        return -1;
    }
    if (b != NULL) {
        *b = r->ckpt.b;
    }
    return 0;
}

/* The mark's write: `M "checkpoint"` = B (and `applied`, `clean` as begun),
 * unsynced — a synced leveldb_write would hold the owner's writes behind its
 * fsync — then made durable by syncing LevelDB's logs. */
static int write_mark(redo_t *r, char *err, size_t errlen)
{
    uint64_t b = r->ckpt.b;
    key_buf_t k = redo_mark_key("checkpoint"), kc = redo_mark_key("clean"), ka = redo_mark_key("applied");
    char v[8], *dberr = NULL;
    be64_put(v, b);
    leveldb_writebatch_t *wb = leveldb_writebatch_create();
    leveldb_writebatch_put(wb, k.b, k.n, v, sizeof v);
    if (r->ckpt.raise_applied) {
        leveldb_writebatch_put(wb, ka.b, ka.n, v, sizeof v);
    }
    if (r->ckpt.clean) {
        leveldb_writebatch_put(wb, kc.b, kc.n, v, sizeof v);
    } else {
        leveldb_writebatch_delete(wb, kc.b, kc.n);
    }
    leveldb_write(r->db, r->wo_nosync, wb, &dberr);
    leveldb_writebatch_destroy(wb);
    if (dberr != NULL) {
        err_set(err, errlen, "commit log checkpoint at offset %" PRIu64 ": LevelDB write: %s", b, dberr);
        leveldb_free(dberr);
        return -1;
    }
    return logsync_run(r->dbsync, err, errlen);
}

int redo_checkpoint_finish(redo_t *r, char *err, size_t errlen)
{
    if (!atomic_load(&r->ckpt.open)) {
        return err_set(err, errlen, "commit log checkpoint finish: no checkpoint begun (redo_checkpoint_begin first)");
    }
    /* the files first: every LevelDB log, rotated ones included (a synced write syncs only the newest); the
       directory holds the names made since (slot files, LevelDB's CURRENT after its open); only then the
       mark, which lets the next open start at B */
    int rc = fixfile_syncset_run(&r->ckpt.files, err, errlen);
    if (rc == 0) {
        rc = logsync_run(r->dbsync, err, errlen);
    }
    if (rc == 0) {
        rc = sync_dir(r->dir, err, errlen);
    }
    if (rc == 0) {
        rc = write_mark(r, err, errlen);
    }
    if (rc == 0) {
        atomic_store(&r->checkpoint, r->ckpt.b);
        clog_keep_from(r->log, r->ckpt.b); /* the next open follows the chain from B: its segment must stay */
    } else {
        atomic_store(&r->resync_all, 1);
    }
    fixfile_syncset_clear(&r->ckpt.files);
    atomic_store(&r->ckpt.open, 0);
    return rc;
}

/* Owner thread, after a finished checkpoint: delete the CQ files wholly
 * below the heads that checkpoint covers. Not at the head move itself: an
 * open takes a queue's head from LevelDB, whose writes past the checkpoint
 * may be lost, before it replays the moves, and needs the file that head lies
 * in (test_crash met "cannot open" on a topic queue's first file). */
static int release_cq_files(redo_t *r, char *err, size_t errlen)
{
    int rc = 0;
    for (size_t i = 0; rc == 0 && i < r->nqueues; i++) {
        rc = cq_release_below(r->queues[i].q, r->queues[i].release_to, err, errlen);
    }
    return rc;
}

int redo_checkpoint_settle(redo_t *r, int wait, char *err, size_t errlen)
{
    if (r->finisher == NULL) {
        return 0;
    }
    int had = 0;
    char why[1024];
    if (clog_finisher_take(r->finisher, wait, &had, why, sizeof why) != 0) {
        return err_set(err, errlen, "%s", why);
    }
    if (!had) {
        return 0;
    }
    return release_cq_files(r, err, errlen) != 0 ? -1 : 1;
}

int redo_checkpoint_running(redo_t *r)
{
    return r->finisher != NULL && clog_finisher_state(r->finisher) != CLOG_FINISHER_IDLE;
}

void redo_on_checkpoint_finished(redo_t *r, void (*hook)(void *arg), void *arg)
{
    r->finished_hook = hook;
    r->finished_arg = arg;
    if (r->finisher != NULL) {
        clog_finisher_on_done(r->finisher, hook, arg);
    }
}

static int finish_on_thread(void *arg, char *err, size_t errlen)
{
    return redo_checkpoint_finish(arg, err, errlen);
}

int redo_checkpoint_async(redo_t *r, char *err, size_t errlen)
{
    if (redo_checkpoint_running(r)) {
        return err_set(err, errlen,
                       "commit log checkpoint: the one begun at offset %" PRIu64
                       " is still being finished on its thread (redo_checkpoint_settle first); a second one is refused",
                       r->ckpt.b);
    }
    if (r->finisher == NULL) {
        if ((r->finisher = clog_finisher_new(finish_on_thread, r, err, errlen)) == NULL) {
            return -1;
        }
        clog_finisher_on_done(r->finisher, r->finished_hook, r->finished_arg);
    }
    if (checkpoint_begin_at(r, r->applied, 0, err, errlen) != 0) {
        return -1;
    }
    (void)clog_finisher_start(r->finisher); /* idle: checked above */
    return 0;
}

/* Owner thread: a checkpoint being finished on the finisher's thread is
 * waited for, one begun and not finished is finished here; the CQ files
 * below the heads it covers go. -1 with err when that finish failed. */
int redo_finish_open_checkpoint(redo_t *r, char *err, size_t errlen)
{
    if (redo_checkpoint_settle(r, 1, err, errlen) < 0) {
        return -1;
    }
    if (!atomic_load(&r->ckpt.open)) {
        return 0;
    }
    return redo_checkpoint_finish(r, err, errlen) != 0 ? -1 : release_cq_files(r, err, errlen);
}

/* A whole checkpoint on the owner thread (begin, then finish and release). */
int redo_checkpoint_at(redo_t *r, uint64_t b, int clean, char *err, size_t errlen)
{
    if (redo_checkpoint_settle(r, 1, err, errlen) < 0) { /* one on the finisher's thread first */
        return -1;
    }
    if (checkpoint_begin_at(r, b, clean, err, errlen) != 0 || redo_finish_open_checkpoint(r, err, errlen) != 0) {
        return -1;
    }
    if (b > r->applied) {
        r->applied = b;
    }
    return 0;
}

int redo_checkpoint(redo_t *r, char *err, size_t errlen)
{
    return redo_checkpoint_at(r, r->applied, 0, err, errlen);
}
