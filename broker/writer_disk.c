/*
 * broker/writer_disk.c — the storage thread's disk-full handling (see
 * broker/diskguard.h): an episode begun when a write fails for want of
 * space (the reserve given back, writes refused), the free space checked
 * until it is back (the store made writable, the reserve written again,
 * writes let through), and the commit log's spare segment, pre-written in
 * paced steps and held while the disk is near full.
 *
 * Invariants:
 *  - While w->disk_full every write is refused (writer_serve.c) and no
 *    scheduler or maintenance work runs; reads and the recycling of
 *    checkpointed segments go on.
 *  - Writes resume only above writer_disk_resume_bytes free, on a store
 *    that takes writes (store_check_writable).
 * Thread: the storage thread only.
 */
#include "broker/writer_internal.h"
#include "broker/diskguard.h"
#include "common/log.h"
#include "base/clock.h"

#include <stdio.h>

#define DISK_CHECK_MS 1000 /* free space is checked this often while the disk is full */
/* the pre-writer thread's gap between a spare segment's 1 MiB chunks (~100 MiB/s of zeros, not a burst the log's
   syncs wait behind) while the log's end is in the first half of its segment; in the second half none */
#define SPARE_STEP_GAP_MS 10

/* A write failed for want of space (why: its error): give the disk reserve
 * back, so that the store can reopen, and refuse writes until writer_check_disk
 * finds the space back. Once per episode: a no-op while the disk is full. */
void writer_disk_full_begin(writer_t *w, const char *why)
{
    if (w->disk_full) {
        return;
    }
    uint64_t released = diskguard_ballast_release(w->opts->path);
    w->disk_full = 1;
    w->stats.disk_full = 1;
    w->stats.disk_full_events++;
    w->next_disk_check_mono = clock_mono_ms() + DISK_CHECK_MS;
    log_error("disk full: %s; writes are refused until %llu bytes are free (released the %llu-byte disk reserve so "
              "that the store can reopen)",
              why, (unsigned long long)writer_disk_resume_bytes(w), (unsigned long long)released);
}

/* At most once per DISK_CHECK_MS: note the free space; while the disk is
 * full and once free space is back above disk_resume_bytes, make sure the
 * store takes writes, write the reserve again and let writes through.
 * The store was opened while the disk was full (reopened after the failed
 * commit, or at start-up): a memtable flush or compaction of LevelDB's that
 * failed since left an error LevelDB refuses every write with until it is
 * reopened, though nothing of ours failed. Letting writes through on such a
 * store failed the first SEND with a stale "No space left" and counted a
 * second disk-full event; so it is asked first (store_check_writable) and
 * reopened, now that there is room, when it refuses. */
void writer_check_disk(writer_t *w, uint64_t now_mono)
{
    if (now_mono < w->next_disk_check_mono) {
        return;
    }
    w->next_disk_check_mono = now_mono + DISK_CHECK_MS;
    uint64_t free_bytes = diskguard_free_bytes(w->opts->path);
    w->stats.disk_free_bytes = free_bytes; /* for INFO and /metrics, also while not full */
    if (!w->disk_full || w->store == NULL || free_bytes == UINT64_MAX || free_bytes < writer_disk_resume_bytes(w)) {
        return;
    }
    char err[512];
    if (store_check_writable(w->store, err, sizeof err) != 0) {
        char why[600];
        snprintf(why, sizeof why, "%s (a background write that failed while the disk was full)", err);
        w->next_reopen_mono = 0; /* space is back: no reason to wait */
        writer_reopen_store(w, why, 0);
        if (w->store == NULL) {
            return; /* retried as any failed reopen; writes stay refused meanwhile */
        }
    }
    if (w->disk_reserve > 0 && diskguard_ballast_create(w->opts->path, w->disk_reserve, err, sizeof err) != 0) {
        log_warn("disk space is back but %s; writes stay refused", err);
        return;
    }
    w->disk_full = 0;
    w->stats.disk_full = 0;
    w->wake_all = 1; /* what the store marked while full was not looked at */
    log_info("disk space is back (%llu bytes free on %s): writes resume%s", (unsigned long long)free_bytes,
             w->opts->path, w->disk_reserve > 0 ? "; the disk reserve is written again" : "");
}

/* The next spare segment (store_log_prepare_step): asked of the commit
 * log's pre-writer thread, taken once whole. Its chunks are paced
 * (SPARE_STEP_GAP_MS) while the log's end is in the first half of its
 * segment: at 120 000 msg/s with 128 MiB segments a spare written in a burst
 * had its writeback ahead of the log's fsyncs (lateness p99 no better than a
 * whole pre-write's stall); in the second half back to back, so that the
 * switch finds it. On this thread, as steps, the pre-write was 42 % of its
 * samples at the flood's peak. A failure changes nothing (the next switch
 * pre-writes its segment itself), so it is logged, once and then once a
 * LOG_REPEAT_PERIOD_MS while it repeats, and not retried before the log
 * enters its next segment. The pre-writer is held (no spare begun, none
 * written on) while the free space is under what the spare still needs plus
 * writer_spare_margin, looked at once a SPARE_STEP_GAP_MS. */
void writer_prepare_spare(writer_t *w, uint64_t now_mono)
{
    if (now_mono >= w->next_spare_check_mono) {
        w->next_spare_check_mono = now_mono + SPARE_STEP_GAP_MS;
        uint64_t left = store_log_prepare_left(w->store);
        uint64_t free_bytes = left > 0 ? diskguard_free_bytes(w->opts->path) : UINT64_MAX;
        w->spare_held = free_bytes != UINT64_MAX && free_bytes < left + writer_spare_margin(w);
    }
    int urgent = store_log_segment_room(w->store) < store_options(w->store)->segment_bytes / 2;
    unsigned pace = w->spare_held ? STORE_PREPARE_HOLD : urgent ? 0 : SPARE_STEP_GAP_MS;
    char err[640];
    if (store_log_prepare_step(w->store, pace, err, sizeof err) >= 0) {
        return;
    }
    log_repeat_report(&w->spare_log, LOG_LEVEL_WARN, now_mono, err, LOG_REPEAT_COUNT_SINCE_LINE,
                      "%s; until a spare is ready, a segment switch pre-writes its segment itself",
                      "%2$s (%1$llu times since its last line); until a spare is ready, a segment switch pre-writes "
                      "its segment itself");
}
