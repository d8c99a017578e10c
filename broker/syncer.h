/*
 * broker/syncer.h — the fsync thread beside the storage thread (`fsync
 * always`): the storage thread writes every batch unsynced and hands the jobs
 * whose replies need durability here; this thread makes them durable through
 * the sync function it was given (the store's commit log: store_log_sync,
 * levels/store.h) and only then posts those replies; the storage thread
 * then writes the synced batches to LevelDB (store_apply_durable).
 *
 * So a SEND batch's fsync no longer holds the storage thread: due moves,
 * leases and ACKs of the next iterations run (and their replies go out)
 * while the disk syncs, and every fsync covers every batch written before it
 * started — group commit across iterations.
 *
 * What waits for a sync (writer_commit.c decides, syncer_needs):
 *  - a job that made a promise (CMD_DURABLE: SEND, GROUP, DLQ changes);
 *  - a reply that shows a message whose SEND may not be durable yet (a PULL
 *    leasing an id at or above syncer_synced_mark): a consumer never sees a
 *    message a power cut could still take back.
 * Everything else (due moves, leases of older messages, ACK, NACK, TOUCH) is
 * answered at once, as before (only promises are fsynced, DESIGN §6).
 *
 * A failed fdatasync answers its jobs with the error and marks the syncer
 * failed: it then fails every job without syncing until the storage thread
 * has reopened the store and called syncer_reset.
 *
 * Threads: syncer_new/start/add/synced_mark/failed/reset/stop on the storage
 * thread; the post callback runs on the syncer thread.
 */
#ifndef HG_BROKER_SYNCER_H
#define HG_BROKER_SYNCER_H

#include <stddef.h>
#include <stdint.h>

#include "broker/writer.h"
#include "common/prom.h"

typedef struct syncer syncer_t;

/* Hand finished jobs (a NULL-terminated list through ->next) to the loop. */
typedef void (*syncer_post_fn)(void *ctx, job_t *head, job_t *tail, size_t n);

/* Make everything written so far durable (the store's commit log:
 * store_log_sync). Runs on the syncer thread. 0, or -1 with err and *full
 * set to 1 when the failure was for want of space (syncer_failed_full). */
typedef int (*syncer_sync_fn)(void *ctx, int *full, char *err, size_t errlen);

/* A syncer that makes writes durable with sync(sync_ctx). Never fails (aborts on OOM). */
syncer_t *syncer_new(syncer_sync_fn sync, void *sync_ctx, syncer_post_fn post, void *ctx);

/* Start the thread: 0, or -1 with the cause in err. */
int syncer_start(syncer_t *sy, char *err, size_t errlen);

/* Queue jobs (a list through ->next, n of them) whose replies go out once
 * everything written so far is durable; mark is the store's next sequence
 * number now (store_next_seq): every id below it has been written. */
void syncer_add(syncer_t *sy, job_t *head, job_t *tail, size_t n, uint64_t mark);

/* Every message id below this is durable (0 before the first sync). */
uint64_t syncer_synced_mark(syncer_t *sy);

/* 1 and the cause when a sync failed since the last reset. */
int syncer_failed(syncer_t *sy, char *why, size_t whylen);

/* 1 when the failed sync (syncer_failed) failed for want of space: ENOSPC,
 * EFBIG or EDQUOT from fdatasync (logsync_failed_full). */
int syncer_failed_full(syncer_t *sy);

/* After the store was reopened: sync normally again. */
void syncer_reset(syncer_t *sy);

/* Sync and post what is queued, stop the thread and free (NULL: no-op). */
void syncer_stop(syncer_t *sy);

/* Statistics (any thread): a copy of the histogram of every fdatasync's
 * duration (its count is the syncs done), and the last one's in µs. NULL sy
 * (fsync no): the same buckets, empty, and 0 — so /metrics carries the
 * family under either fsync setting. */
void syncer_fsync_stats(syncer_t *sy, prom_hist_t *hist, uint64_t *last_us);

#endif
