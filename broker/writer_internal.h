/*
 * broker/writer_internal.h — what the writer's two halves share: struct
 * writer, the tunables both use, and the storage thread's entry point.
 * writer.c is the loop side (the public calls of writer.h, the done
 * queue's event); the storage thread is writer_thread.c (writer_main: its
 * iterations and sleep, the idle maintenance), writer_serve.c (the fair
 * serving of queued jobs), writer_commit.c (the group commit, its failure
 * and reopen, the replies posted), writer_disk.c (disk full, the spare
 * segment), writer_report.c (scheduler failures, damage reports) and
 * writer_wake.c (its parked jobs). Each field says which thread may touch
 * it (the comments in the struct); nothing outside these files includes
 * this header.
 */
#ifndef HG_BROKER_WRITER_INTERNAL_H
#define HG_BROKER_WRITER_INTERNAL_H

#include "base/map.h"
#include "broker/backup.h"
#include "broker/fairq.h"
#include "broker/joblist.h"
#include "broker/logrepeat.h"
#include "broker/parked.h"
#include "broker/syncer.h"
#include "broker/writer.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

#define COLLECT_BUDGET_MIN 128                  /* store_collect deletes per step (~0.2 ms: the delivery tail)... */
#define DISK_MIN_FREE      (UINT64_C(16) << 20) /* without a reserve, writes resume above this much free */

struct writer {
    pthread_t thread;
    int started;

    /* submit side (loop -> storage) */
    pthread_mutex_t mu;
    pthread_cond_t cond;
    job_t *q_head, *q_tail;
    size_t q_len;
    int stop_requested;
    int checkpoint_finished; /* a checkpoint on the commit log's thread finished: settle it (writer_watch_checkpoints) */

    /* done side (storage -> loop) */
    pthread_mutex_t done_mu;
    job_t *done_head, *done_tail;
    int stopped;
    struct event *done_ev;
    writer_done_fn on_done;
    writer_stopped_fn on_stopped;
    void *ctx;

    /* published for the loop */
    _Atomic uint64_t heartbeat_mono;
    _Atomic int broken;
    _Atomic size_t nparked;
    _Atomic size_t nqueued; /* submitted, or in the connections' queues */
    char broken_msg[512];   /* under done_mu */
    /* the budget of woken replies (writer_set_wake_budget) */
    uint64_t wake_budget, wake_one_message;     /* set before start */
    uint64_t sweep_held, sweep_woken_delivered; /* under done_mu: the loop's last figures */

    /* the store the syncer syncs (store_log_sync): w->store while it is open, NULL while it is closed or
       being closed; set by the storage thread, read by the syncer's sync function, under store_mu */
    pthread_mutex_t store_mu;
    store_t *synced_store;
    int closed_synced; /* synced_store is NULL after a close whose log was synced first: every batch appended
                          before it is durable (the syncer's jobs from before the close succeed) */

    /* storage thread only */
    store_t *store;    /* NULL while a reopen fails */
    int batch_durable; /* a job since the last commit made a promise: fsync it */
    syncer_t *syncer;  /* fsync always: the fsync thread (NULL: commits sync themselves) */
    backup_t *backup;  /* BACKUP's copy thread: stopped before the store is closed */
    sched_t *sched;
    fairq_t fair;                /* fair share: the queued jobs per connection, served round-robin (fairq.h) */
    const store_options_t *opts; /* the caller's (config_t.store): outlives the writer */
    storage_stats_t stats;
    parked_set_t parked;   /* parked jobs (PULL BLOCK), indexed by topic, connection and deadline (parked.h) */
    int wake_all;          /* after a reopen or the end of a disk-full episode: ask every parked job once */
    uint64_t woken_built;  /* bytes of woken replies built so far (job_t.woken_bytes summed) */
    map_t deferred_topics; /* topics whose woken jobs wait for client memory (values unused) */
    int deferred_any;      /* a job of parked.any waits for client memory */
    uint64_t last_job_mono;
    uint64_t next_periodic_mono;
    uint64_t next_reopen_mono;
    /* Failures the storage thread retries about once a second while their
     * cause lasts, logged by broker/logrepeat.h's rule (a new cause at once,
     * the same again once a LOG_REPEAT_PERIOD_MS with how many times): */
    log_repeat_t reopen_log; /* a reopen that fails */
    log_repeat_t break_log;  /* the store broken again after a reopen (e.g. damage a due move meets half-way) */
    int reopen_quiet;        /* the break that closed the store was not logged: neither is its reopen */
    /* A scheduler run that failed (damage met by a lease expiry, a read
     * error) fails again at once while its work is due: it is retried at
     * most once a SCHED_RETRY_MS. */
    uint64_t sched_retry_mono; /* no scheduler run before this */
    log_repeat_t sched_log;
    uint64_t next_spare_check_mono;               /* the free space against the spare's needs looked at again then */
    int spare_held;                               /* 1: the pre-writer is held (the disk is near full: writer_disk.c) */
    log_repeat_t spare_log;                       /* a spare segment's pre-write that fails (store_log_prepare_step) */
    uint64_t level_damage_seen;                   /* store_level_damage_events already reported */
    uint64_t lane_full_hops_seen;                 /* store_lane_full_hops already counted */
    char level_damage_logged[LVL_MAX_LEVELS + 1]; /* 1: the level's damage is logged, its recovery is not yet */
    int levels_damaged_logged;                    /* how many are 1 */
    uint64_t group_damage_seen;                   /* store_group_damage_events already reported */
    uint64_t group_recoveries_seen;               /* store_group_recoveries already reported */
    int maintain_needed;
    uint64_t next_trim_mono;    /* idle after work: the next release_free_memory (0: none pending) */
    uint64_t trim_gap_ms;       /* ...and the wait before the one after it, doubled each time */
    uint64_t next_collect_mono; /* the next store_collect step */
    int collect_budget;         /* its budget: COLLECT_BUDGET_MIN, doubled per full step */
    int collect_behind;         /* the last step filled its budget: the next one comes without a job */
    uint64_t iteration;         /* iterations of writer_main so far (a JOB_AGAIN job steps once per iteration) */
    int stopping;               /* writer_stop was asked: this iteration's copy (writer_stopping) */
    /* disk full (broker/diskguard.h): writes refused until space returns */
    uint64_t disk_reserve;
    int disk_full;
    uint64_t next_disk_check_mono;
    uint64_t reopen_failed_free; /* free bytes when a reopen failed while full: retry only once it grows */
};

/* Free space needed before writes resume (and the reserve is written
 * again): twice the reserve and at least the reserve plus one commit-log
 * segment, because the first writes after the resume may switch segments
 * and pre-write a whole one (with a 4 MiB reserve and 16 MiB segments the
 * broker resumed at 8 MiB free, failed the pre-write, filled again and
 * reopened, once a second); without a reserve DISK_MIN_FREE or one segment. */
static inline uint64_t writer_disk_resume_bytes(const writer_t *w)
{
    uint64_t segment = w->opts->segment_bytes;
    if (w->disk_reserve) {
        uint64_t twice = 2 * w->disk_reserve, with_segment = w->disk_reserve + segment;
        return twice > with_segment ? twice : with_segment;
    }
    return DISK_MIN_FREE > segment ? DISK_MIN_FREE : segment;
}

/* Free space a spare segment's pre-write leaves to the store's own writes
 * (slots, consume queues, LevelDB): one is begun only while the rest of it
 * and this much are free — the reserve's size, DISK_MIN_FREE without one.
 * A spare is only a head start on the next switch's pre-write; begun with
 * less free it took the last bytes the other writes needed: writes resumed
 * with room for one segment and 1 MiB (writer_disk_resume_bytes), the first
 * SEND's switch made the segment, the spare's first step took the 1 MiB, and
 * that SEND's where-slot write found the disk full, 40 ms after the resume. */
static inline uint64_t writer_spare_margin(const writer_t *w)
{
    return w->disk_reserve ? w->disk_reserve : DISK_MIN_FREE;
}

/* The storage thread (writer_thread.c), started by writer_start. */
void *writer_main(void *arg);

/* ---- fair serving (writer_serve.c; storage thread) ---- */

/* Sort the submitted jobs (batch, in submission order) into their connections' queues; a cancel drops
 * its connection's parked and droppable queued jobs. */
void writer_fair_intake(writer_t *w, job_t *batch);

/* Run queued jobs round-robin into done (committing a burst as it goes); returns the number run. */
size_t writer_fair_serve(writer_t *w, job_list_t *done, uint64_t now_mono);

/* ---- commit, failure, replies (writer_commit.c; storage thread) ---- */

/* Hand done's jobs to the loop (done is emptied); stopped: tell the loop the thread has finished. */
void writer_post(writer_t *w, job_list_t *done, int stopped);

/* Replace j's reply with "ERR <prefix><what>" plus what its steps did, and mark it failed. */
void writer_answer_error(job_t *j, const char *prefix, const char *what);

/* writer_answer_error with the prefix "storage failure: ". */
void writer_fail_job(job_t *j, const char *msg);

/* Close a failed store (unsynced when sync_failed) and try to open it again, at most once a second;
 * on failure w->store stays NULL and w->broken is set with the cause. */
void writer_reopen_store(writer_t *w, const char *why, int sync_failed);

/* Commit what is pending; on failure answer every job of done with the error and reopen. The jobs whose
 * replies wait for durability go to the syncer; the rest stay in done. */
void writer_commit_pending(writer_t *w, job_list_t *done);

/* Take a checkpoint the commit log's thread finished; its failure reopens the store. */
void writer_settle_checkpoint(writer_t *w);

/* Have w->store's checkpoint thread wake the storage thread when a checkpoint finishes there
 * (checkpoint_finished), so that an idle writer settles it at once (writer.c). For each store opened. */
void writer_watch_checkpoints(writer_t *w);

/* ---- disk full and the spare segment (writer_disk.c; storage thread) ---- */

/* A write failed for want of space (why): begin a disk-full episode; a no-op while one lasts. */
void writer_disk_full_begin(writer_t *w, const char *why);

/* Note the free space (at most once a second); end the episode when enough is back. */
void writer_check_disk(writer_t *w, uint64_t now_mono);

/* Step the commit log's next spare segment, paced, held while the disk is near full; failures logged. */
void writer_prepare_spare(writer_t *w, uint64_t now_mono);

/* ---- scheduler failures and damage reports (writer_report.c; storage thread) ---- */

/* A scheduler run failed with err: no run again before SCHED_RETRY_MS; the cause logged by logrepeat's rule. */
void writer_sched_failed(writer_t *w, const char *err, uint64_t now_mono);

/* A scheduler run succeeded: after failures, say so once. */
void writer_sched_succeeded(writer_t *w);

/* Log and count the levels the due move found damaged, and their recoveries. */
void writer_report_level_damage(writer_t *w);

/* Log and count the group queues PULLs found damaged, and their recoveries. */
void writer_report_group_damage(writer_t *w);

/* ---- parked jobs (writer_wake.c; storage thread) ---- */

/* Park j, and publish the count for the loop. */
void writer_park(writer_t *w, job_t *j, uint64_t now_mono);

/* Room in the budget of woken replies for j: 1 (j->reply_cap set when its
 * reply must stay smaller), or 0 (j waits parked; asked again later). */
int writer_wake_reserve(writer_t *w, job_t *j);

/* After j ran: a budgeted reply is counted until the loop has it. */
void writer_count_budgeted(writer_t *w, job_t *j);

/* Drop (free, unanswered) the parked jobs of a closed connection. */
void writer_cancel_parked(writer_t *w, uint64_t conn_id);

/* Expire the parked jobs past their deadline (all when expire_all), run
 * those woken whose wake() says so; their replies go to done. */
void writer_service_parked(writer_t *w, job_list_t *done, uint64_t now_mono, int expire_all);

/* Monotonic ms of the next parked deadline or wake retry (UINT64_MAX: none). */
uint64_t writer_earliest_parked_deadline(writer_t *w);

/* Storage thread: w->store (NULL or just opened) is the store the syncer syncs from now on
 * (writer.c). Call with NULL before closing it: log_synced says the storage thread synced its log just
 * before (store_log_sync), so that a sync the syncer asks for meanwhile succeeds. */
void writer_set_synced_store(writer_t *w, store_t *store, int log_synced);

#endif
