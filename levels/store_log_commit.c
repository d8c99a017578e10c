/*
 * levels/store_log_commit.c — the commit path through the log under the store
 * (docs/design-commitlog.md, 4a.2; contracts in levels/store_internal.h):
 * s->log_batch appended (its writes held, or synced and applied at once), a
 * batch no segment can hold written beside the log, the log's syncs and its
 * spare's pre-write; a failure of the log breaks the store with its cause
 * kept (a full disk's errno or text, levels/store_failure.c).
 *
 * Threading: the store's owner thread.
 */
#include "levels/store_internal.h"
#include "levels/clog_derived.h"
#include "base/clock.h"
#include "base/err.h"

#include <errno.h>
#include <stdint.h>

/* ---- the commit path (4a.2) ------------------------------------------------------------ */

/* A batch whose derived-writes record no segment can hold (an EXEC's batch:
 * up to max-inflight-bytes of SENDs, whose LevelDB writes can be several
 * times its request bytes) goes to LevelDB directly, synced — after every
 * earlier commit was synced, applied and checkpointed, so that B is the log's
 * end and no redo ever replays an earlier batch over its writes (redo from B
 * applies only later batches, which come after it). Atomic as any LevelDB
 * write; costs two checkpoints (the second marks the write as below B). 0,
 * or -1 with err (the store is then broken). */
static int write_beside_log(store_t *s, char *err, size_t errlen)
{
    char why[512];
    if (store_log_make_durable(s, err, errlen) != 0) {
        return -1;
    }
    if (redo_checkpoint(s->redo, why, sizeof why) != 0) {
        store_log_break(s, why);
        return store_log_failed(s, err, errlen, "checkpoint of the commit log of ", "", why);
    }
    s->checkpoint_mono_ms = clock_mono_ms();
    redo_batch_t *b = &s->log_batch;
    leveldb_writebatch_t *wb = leveldb_writebatch_create();
    size_t at = DERIVED_HEAD;
    derived_op_t op;
    while (at < b->len && derived_next(b->derived, b->len, &at, &op) == 1) {
        if (op.tag == 'P') {
            leveldb_writebatch_put(wb, op.key, op.klen, op.val, op.vlen);
        } else if (op.tag == 'D') {
            leveldb_writebatch_delete(wb, op.key, op.klen);
        }
    }
    int whole = at == b->len;
    char *e = NULL;
    if (whole) {
        leveldb_write(s->db, s->wopt_sync, wb, &e);
    }
    leveldb_writebatch_destroy(wb);
    redo_batch_free(b);
    if (!whole || e != NULL) {
        err_set(err, errlen, "%s", whole ? e : "a batch's LevelDB writes do not decode");
        leveldb_free(e);
        return -1;
    }
    if (s->key_it != NULL) { /* it would not see this write */
        leveldb_iter_destroy(s->key_it);
        s->key_it = NULL;
    }
    /* A checkpoint mark after it (B unchanged): the write is in no commit-log batch, so a hole in it must read as
       damage below a checkpoint (store_open_past_hole), never as unsynced writes the redo would rewrite. */
    if (redo_checkpoint(s->redo, why, sizeof why) != 0) {
        store_log_break(s, why);
        return store_log_failed(s, err, errlen, "checkpoint of the commit log of ", "", why);
    }
    s->checkpoint_mono_ms = clock_mono_ms();
    return 0;
}

/* The log refused an append (a commit's batch, or the segment a message
 * record needs) and wrote nothing: noted for the close
 * (s->log_append_failed) with the errno of the write that failed, for
 * store_log_write_errno. */
void store_log_note_refused_append(store_t *s)
{
    s->log_append_failed = 1;
    s->log_write_errno = clog_write_errno(redo_log(s->redo));
}

int store_log_write_errno(const store_t *s)
{
    return s->broken && s->log_append_failed ? s->log_write_errno : 0;
}

int store_log_failure_full(const store_t *s, const char *why)
{
    return (s->log_append_failed && store_failure_errno_full(s->log_write_errno)) || store_failure_text_full(why);
}

/* The store breaks at a failure of its log (why): a full disk's when the
 * refused write's errno, or the failure's text, says no room
 * (store_last_failure_full, which the writer asks). */
void store_log_break(store_t *s, const char *why)
{
    char shown[512];
    store_failure_text(why, s->path, shown, sizeof shown); /* a long directory shortened: the cause kept */
    store_break_as(s, store_log_failure_full(s, why), shown);
}

/* err = "<before><the directory, shortened><after>: <why, its paths
 * shortened>": a failure of the log named so that its cause survives a long
 * data directory (levels/store_failure.c). -1. */
int store_log_failed(const store_t *s, char *err, size_t errlen, const char *before, const char *after, const char *why)
{
    char shown[512];
    store_failure_text(why, s->path, shown, sizeof shown);
    return err_set(err, errlen, "%s%s%s: %s", before, s->path_shown, after, shown);
}

int store_log_append(store_t *s, int durable, char *err, size_t errlen)
{
    char why[512];
    if (s->log_batch.messages == 0 && redo_batch_room(s->redo, &s->log_batch, 0, why, sizeof why) < 0) {
        return write_beside_log(s, err, errlen);
    }
    if (!durable) {
        if (redo_commit(s->redo, &s->log_batch, NULL, why, sizeof why) != 0) {
            store_log_note_refused_append(
                s); /* nothing appended, nothing held (a segment not pre-written: a full disk) */
            return store_log_failed(s, err, errlen, "commit log of ", "", why);
        }
        return 0;
    }
    /* Appended, synced and applied in one call: the batch never enters the overlay (design-commitlog.md,
       "Overlay cost"). A failed sync or apply leaves it held, as store_log_make_durable's would. */
    uint64_t before = redo_applied(s->redo), end = 0;
    if (redo_commit_applied(s->redo, &s->log_batch, &end, why, sizeof why) != 0) {
        if (end == 0) { /* end is set once the batch is appended */
            store_log_note_refused_append(s);
        }
        store_log_break(s, why);
        return store_log_failed(s, err, errlen, "commit log of ", "", why);
    }
    return store_log_after_apply(s, before, err, errlen);
}

uint64_t store_log_unsynced_bytes(const store_t *s)
{
    if (s->redo == NULL) {
        return 0;
    }
    clog_t *c = redo_log(s->redo);
    return clog_end(c) - clog_durable(c);
}

int store_log_sync(store_t *s, char *err, size_t errlen)
{
    char why[512];
    if (clog_sync(redo_log(s->redo), why, sizeof why) != 0) {
        int e = errno; /* the fdatasync's: the contract passes it on */
        store_log_failed(s, err, errlen, "commit log of ", "", why);
        errno = e;
        return -1;
    }
    return 0;
}

int store_log_prepare_step(store_t *s, unsigned pace_ms, char *err, size_t errlen)
{
    if (s->redo == NULL || s->broken) {
        return 0;
    }
    char why[512];
    int rc = clog_prepare_step(redo_log(s->redo), pace_ms, why, sizeof why);
    if (rc < 0) {
        return store_log_failed(s, err, errlen, "pre-writing a spare segment of the commit log of ", "", why);
    }
    return rc;
}

_Static_assert(STORE_PREPARE_HOLD == CLOG_PREPARE_HOLD, "the store's hold is the log's");

uint64_t store_log_prepare_left(const store_t *s)
{
    return s->redo == NULL || s->broken ? 0 : clog_prepare_left(redo_log(s->redo));
}

void store_log_read_back_counts(const store_t *s, uint64_t *spares, uint64_t *bytes, uint64_t *failures)
{
    *spares = *bytes = *failures = 0;
    if (s->redo != NULL) {
        clog_read_back_counts(redo_log(s->redo), spares, bytes, failures);
    }
}

uint64_t store_log_spare_segments(const store_t *s)
{
    return s->redo == NULL ? 0 : (uint64_t)clog_spare_count(redo_log(s->redo));
}

uint64_t store_log_segment_room(const store_t *s)
{
    if (s->redo == NULL) {
        return UINT64_MAX;
    }
    uint64_t end = clog_end(redo_log(s->redo)), size = s->opt.segment_bytes;
    return size - end % size;
}

int store_log_make_durable(store_t *s, char *err, size_t errlen)
{
    if (s->redo == NULL) {
        return 0;
    }
    if (store_log_unsynced_bytes(s) > 0) {
        char why[512];
        if (store_log_sync(s, why, sizeof why) != 0) {
            store_log_break(s, why);
            return err_set(err, errlen, "%s", why);
        }
    }
    return store_apply_durable(s, err, errlen);
}
