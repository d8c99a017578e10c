/*
 * levels/store_checkpoint.c — the log's checkpoints under the store
 * (docs/design-commitlog.md, 4a.2 and "Checkpoints on the log's own
 * thread"): what follows an apply — a checkpoint when checkpoint_bytes (half
 * of it on the log's thread) were applied since the last began, or a second
 * passed — and what follows a finished checkpoint (after_checkpoint): the
 * where-slot files of segments recycled before it and the CQ files of topics
 * deleted before it deleted (store_deferred.c), the segments wholly below it recycled, a long
 * LevelDB log written out. With checkpoint_on_thread the finish runs on the
 * redo's thread and the owner settles it at its next apply or step.
 *
 * Threading: the store's owner thread.
 */
#include "levels/store_internal.h"
#include "base/clock.h"
#include "base/err.h"


/* Segments recycled by one checkpoint at most: each costs a header write, a
 * rename and two syncs on the owner's thread (a few milliseconds on a disk),
 * and a backlog that empties at once (a GC after consumers caught up) frees
 * hundreds together; a later checkpoint takes the rest, lowest first. */
#define RECYCLE_PER_CHECKPOINT 64

/* Recycle every segment wholly below the checkpoint B whose live count is 0
 * (design-commitlog.md §5: its LevelDB batches are in LevelDB, synced by the
 * checkpoint; its messages have arrived, whose copies the topic log holds, or
 * were revoked — segcount.c): each becomes a spare the log takes again
 * (clog_recycle), so the log keeps about (log since B) / segment + spares
 * files. The segments are the log's own list (clog_segments_below, lowest
 * first: no directory listing, which thousands of topic CQ files made a
 * millisecond or more a checkpoint); spares are not in it — they lie past the
 * log's end, or below B after a failed sync's carry or an open at a later
 * clock started the log past them. Segments with live messages are stepped
 * over a page at a time (a delay queue keeps days of them below B), their
 * counts read beside them (segcount_live_ascending: both lists ascend), so
 * the walk is linear in the segments below B. 0, or -1 with err (a rename or
 * a header write failed). */
static int recycle_below_checkpoint(store_t *s, char *err, size_t errlen)
{
    clog_t *log = redo_log(s->redo);
    uint64_t b = redo_checkpointed(s->redo), page[RECYCLE_PER_CHECKPOINT], from = 0;
    size_t recycled = 0, got, count_at = 0;
    char why[512];
    do {
        got = clog_segments_below(log, from, b, page, RECYCLE_PER_CHECKPOINT);
        for (size_t i = 0; i < got && recycled < RECYCLE_PER_CHECKPOINT; i++) {
            if (segcount_live_ascending(s, &count_at, page[i]) != 0) {
                continue;
            }
            /* renamed past every segment: the bases after it in page keep their files */
            if (clog_recycle(log, page[i], why, sizeof why) != 0) {
                return store_log_failed(s, err, errlen, "recycling a commit-log segment of ", "", why);
            }
            /* its slot file stays until a checkpoint reaches the log's end now: the open's redo from an older one
               rewrites slots of the segment (a move before its last message died); nothing writes them after it */
            store_deferred_add(s, STORE_DEFERRED_SLOTS, page[i], clog_end(log));
            recycled++;
        }
        from = got > 0 ? page[got - 1] + 1 : from;
    } while (got == RECYCLE_PER_CHECKPOINT && recycled < RECYCLE_PER_CHECKPOINT);
    return 0;
}

/* The applied log that makes a checkpoint due: checkpoint_bytes, half of it
 * when checkpoints run on the log's thread — one begins then, and the owner
 * waits for it before another half has been applied (store_log_after_apply), so that
 * the log since the last finished checkpoint, what an open redoes and the
 * disk reserve must hold, stays within checkpoint_bytes and the two applies
 * that crossed the halves (on the owner: checkpoint_bytes and one apply). */
static uint64_t checkpoint_every(const store_t *s)
{
    uint64_t every = s->opt.checkpoint_bytes != 0 ? s->opt.checkpoint_bytes : STORE_CHECKPOINT_BYTES;
    return s->opt.checkpoint_on_thread ? every / 2 : every;
}

/* A checkpoint is due once checkpoint_every of log were applied since the
 * last one began, or a second passed with anything applied since. The bytes are the
 * applied batches' own (redo_applied_since_checkpoint), not the distance from
 * B to redo_applied: an open's floor raises the next batch's offset by the
 * clock's time since the last (1 MiB a millisecond, store.h), and counted as
 * applied that jump made the first apply after every reopen a checkpoint. */
static int checkpoint_due(const store_t *s)
{
    uint64_t since = redo_applied_since_checkpoint(s->redo);
    return since >= checkpoint_every(s) || (since > 0 && clock_mono_ms() - s->checkpoint_mono_ms >= 1000);
}

int store_apply_durable(store_t *s, char *err, size_t errlen)
{
    if (store_usable(s, err, errlen) != 0) {
        return -1;
    }
    if (s->redo == NULL || redo_held(s->redo) == 0) {
        return 0;
    }
    uint64_t before = redo_applied(s->redo);
    char why[512];
    if (redo_apply_durable(s->redo, why, sizeof why) != 0) {
        store_log_break(s, why);
        return store_log_failed(s, err, errlen, "applying the commit log of ", "", why);
    }
    return store_log_after_apply(s, before, err, errlen);
}

/* After a checkpoint: when LevelDB's write-ahead log has grown past
 * STORE_LEVELDB_LOG_FLUSH_BYTES, its memtable is written out on the
 * compactor's thread (compactor_flush_memtable), which starts an empty log.
 * The memtable (write-buffer-size, 64 MiB) rarely fills now that LevelDB gets
 * ~0.3 records a message, so its log held everything since the open, and an
 * open after a kill -9 replayed all of it and wrote it out before answering
 * (DESIGN §6, "Restart"). */
static void flush_long_leveldb_log(store_t *s)
{
    if (redo_leveldb_log_bytes(s->redo) > STORE_LEVELDB_LOG_FLUSH_BYTES) {
        (void)compactor_flush_memtable(s->compactor); /* 0: one already waits */
    }
}

/* What follows a finished checkpoint, on the owner: the files it lets go
 * deleted (the where-slot files of the segments recycled before it, the CQ
 * files of topics deleted before it: store_deferred.c), the segments wholly below it
 * recycled, a long LevelDB log written out. 0, or -1 with err (the store is
 * then broken). */
static int after_checkpoint(store_t *s, char *err, size_t errlen)
{
    char why[512];
    store_deferred_sweep(s);
    if (recycle_below_checkpoint(s, why, sizeof why) != 0) {
        store_log_break(s, why);
        return err_set(err, errlen, "%s", why);
    }
    flush_long_leveldb_log(s);
    return 0;
}

/* A checkpoint finished on the redo's thread (store_options_t.checkpoint_on_thread):
 * its outcome taken (with wait, after waiting for it) and what follows it
 * made. 0 (also while it runs), or -1 with err (it failed: the store is then
 * broken). */
static int settle_checkpoint(store_t *s, int wait, char *err, size_t errlen)
{
    char why[512];
    int rc = redo_checkpoint_settle(s->redo, wait, why, sizeof why);
    if (rc < 0) {
        store_log_break(s, why);
        return store_log_failed(s, err, errlen, "checkpoint of the commit log of ", "", why);
    }
    return rc > 0 ? after_checkpoint(s, err, errlen) : 0;
}

/* What follows an apply that moved redo_applied from applied_before: the
 * key iterator dropped (it would not see the writes) and the checkpoint,
 * with its recycling and a long LevelDB log's write-out, when one is due —
 * on the redo's thread with checkpoint_on_thread, one at a time: a due one
 * begins once the last is settled, and the owner waits for the last when
 * checkpoint_every was applied since it began (the bound above). 0, or -1
 * with err (the store is then broken). */
int store_log_after_apply(store_t *s, uint64_t applied_before, char *err, size_t errlen)
{
    char why[512];
    if (redo_applied(s->redo) != applied_before && s->key_it != NULL) { /* it would not see what was applied */
        leveldb_iter_destroy(s->key_it);
        s->key_it = NULL;
    }
    int behind = redo_applied_since_checkpoint(s->redo) >= checkpoint_every(s);
    if (settle_checkpoint(s, behind, err, errlen) != 0) {
        return -1;
    }
    if (!checkpoint_due(s) || redo_checkpoint_running(s->redo)) { /* running: due by its second */
        return 0;
    }
    int rc = s->opt.checkpoint_on_thread ? redo_checkpoint_async(s->redo, why, sizeof why)
                                         : redo_checkpoint(s->redo, why, sizeof why);
    if (rc != 0) {
        store_log_break(s, why);
        return store_log_failed(s, err, errlen, "checkpoint of the commit log of ", "", why);
    }
    s->checkpoint_mono_ms = clock_mono_ms();
    return s->opt.checkpoint_on_thread ? 0 : after_checkpoint(s, err, errlen);
}

void store_log_on_checkpoint_finished(store_t *s, void (*hook)(void *arg), void *arg)
{
    if (s->redo != NULL) {
        redo_on_checkpoint_finished(s->redo, hook, arg);
    }
}

int store_log_checkpoint_step(store_t *s, char *err, size_t errlen)
{
    if (s->redo == NULL || s->broken) {
        return 0;
    }
    return settle_checkpoint(s, 0, err, errlen);
}

uint64_t store_log_since_checkpoint(const store_t *s)
{
    return s->redo == NULL ? 0 : redo_applied_since_finished(s->redo);
}

int store_log_checkpoint_running(const store_t *s)
{
    return s->redo != NULL && !s->broken && redo_checkpoint_running(s->redo);
}

int store_log_recycle(store_t *s, char *err, size_t errlen)
{
    return recycle_below_checkpoint(s, err, errlen);
}
