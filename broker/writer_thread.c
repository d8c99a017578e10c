/*
 * broker/writer_thread.c — the storage thread (see writer.h): writer_main's
 * iterations, its sleep until the next thing to do, the idle maintenance
 * and memory trims, and the accessors a job's exec uses. The iteration's
 * steps live in their own files (writer_internal.h lists them): the fair
 * serving of queued jobs writer_serve.c, the commit, its failure (reopen)
 * and the replies' hand-off writer_commit.c, the disk-full checks and the
 * spare segment writer_disk.c, the scheduler's failures and the damage
 * reports writer_report.c, the parked jobs writer_wake.c. The loop side is
 * writer.c; struct writer is shared through writer_internal.h; the
 * fair-share queues' data structure is fairq.c. Thread: the storage
 * thread only (the accessors, writer_store etc., are called by the jobs'
 * exec, on this thread).
 *
 * Invariants:
 *  - Only this thread touches store/sched/stats/parked/fair. The loop touches
 *    only the submit queue (under mu) and the done queue (under done_mu).
 *  - A job's reply leaves this thread only after the commit that follows its
 *    exec succeeded; when that commit fails every job of the group is
 *    answered with the storage error instead (an id is never announced for a
 *    write that may be lost), and the store is closed and reopened
 *    (writer_commit.c).
 *  - Fair share (writer_serve.c): one queue per connection, served
 *    round-robin, listings bounded per iteration.
 *  - A job that steps (JOB_AGAIN: DLQ REQUEUE/DROP ALL) goes back to the
 *    head of its connection's queue and runs once per iteration, so the
 *    other connections' jobs, the commit, the scheduler and the parked
 *    jobs run between its steps and its connection's later jobs wait
 *    behind it; it is not answered, and makes no promise, until its last
 *    step. writer_stopping tells it to finish.
 *  - One iteration = take every queued job, run them as above, commit them
 *    (one synced write; one per STORE_BATCH_MAX_BYTES of writes when a burst
 *    holds more, so the batch never holds a whole burst), writer_post their
 *    replies; run one bounded chunk (in moves and in bytes) of due
 *    scheduler work, expire and retry parked jobs, commit those writes (if
 *    any), writer_post those replies. A failure of the second commit answers only
 *    the parked jobs it carried with the error.
 *    Sleeping happens only between iterations, never while work is due.
 */
#include "broker/writer.h"
#include "broker/writer_internal.h"
#include "base/alloc.h"
#include "base/map.h"
#include "base/units.h"

#include <errno.h>
#ifdef __GLIBC__
#include <malloc.h>
#endif
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "broker/backup.h"
#include "broker/parked.h"
#include "broker/syncer.h"
#include "common/log.h"
#include "base/clock.h"

#define SCHED_CHUNK        4096  /* most due moves / expiries per iteration */
#define MAINTAIN_BUDGET    512   /* store_maintain deletes per idle step */
#define MAINTAIN_IDLE_MS   1000  /* idle time before maintenance runs */
#define MAINTAIN_PERIOD_MS 60000 /* maintenance check when nothing else happens (retention) */
#define COLLECT_PERIOD_MS  10    /* while busy: store_collect at most this often */
#define COLLECT_BEHIND_MS  5     /* ...and this often, busy or not, while its steps come back full */
#define COLLECT_STEP_US    1500  /* ...a full step doubled while it took under half this, halved past it */
#define COLLECT_BUDGET_MAX 65536 /* ...and never past this many entries */
#define COLLECT_GRACE_MS   1000  /* a consumed topic-log entry stays readable at least this long (store_collect) */
#define TRIM_FIRST_GAP_MS  2000  /* idle after work: memory given back again this long after the first time... */
#define TRIM_LAST_GAP_MS   32000 /* ...then after twice as long, up to this (LevelDB frees its compactions' late) */

/* ---- storage thread --------------------------------------------------------- */

/* Give the memory the process freed back to the kernel, while the storage
 * thread is idle after work. glibc keeps freed blocks in its heaps (one per
 * thread that allocates: the loop's query buffers and replies, this thread's
 * batches, LevelDB's compactions): after 1 000 pipelined SENDs of 4 MiB the
 * broker held 317 MB, of which malloc_trim gave back 155 MB; after 200 of them
 * (write-buffer-size 4mb) 163 MB, of which 138 MB. It runs when the idle
 * maintenance is done, then again after 2, 4, … 32 s of idleness, because
 * LevelDB's background compactions free their buffers seconds later (one trim
 * at 1 s left 84 MB of those 163). It walks every heap once (4.4 ms over
 * 68 MB of free heap), holding each heap's lock meanwhile, which only an idle
 * broker can spend (the loop waits on those locks). Since broker/heap_policy.h
 * fixed the mmap threshold those blocks are unmapped as they are freed, and a
 * trim after the burst walks 0.5 MB (65 us): it is left with what small blocks
 * leave. Elsewhere (no glibc) the allocator's own policy stands. */
static void release_free_memory(writer_t *w)
{
#ifdef __GLIBC__
    malloc_trim(0);
    w->stats.memory_trims++;
#else
    (void)w;
#endif
}

store_t *writer_store(writer_t *w)
{
    return w->store;
}
sched_t *writer_sched(writer_t *w)
{
    return w->sched;
}
storage_stats_t *writer_stats(writer_t *w)
{
    return &w->stats;
}
backup_t *writer_backup(writer_t *w)
{
    return w->backup;
}
uint64_t writer_disk_floor(writer_t *w)
{
    return writer_disk_resume_bytes(w);
}
int writer_stopping(writer_t *w)
{
    return w->stopping;
}

uint64_t writer_now(writer_t *w)
{
    return sched_wall_clock(w);
}

static void count_batch(writer_t *w, size_t njobs)
{
    if (njobs == 0) {
        return;
    }
    w->stats.batches++;
    w->stats.jobs += njobs;
    if (njobs > w->stats.max_batch) {
        w->stats.max_batch = njobs;
    }
    prom_hist_add(&w->stats.batch_jobs, (double)njobs);
}

static uint64_t ms_to_us(uint64_t ms)
{
    return ms == UINT64_MAX ? UINT64_MAX : ms * 1000;
}

/* The monotonic time (µs) of wall-clock millisecond wall_ms (a due time, a
 * skip's end: the store's clock), now_us being the monotonic now: the
 * start of that millisecond to the microsecond (not a truncated
 * millisecond of the monotonic clock, which could wake almost 1 ms late or
 * early); now_us when it has passed. */
static uint64_t wall_ms_to_mono_us(uint64_t wall_ms, uint64_t now_us)
{
    uint64_t at_us = wall_ms * 1000, now_wall = clock_wall_us();
    return at_us <= now_wall ? now_us : now_us + (at_us - now_wall);
}

/* Monotonic time (µs) of the next thing to do when no job arrives. */
static uint64_t next_wakeup_us(writer_t *w, uint64_t now_us)
{
    uint64_t best = ms_to_us(writer_earliest_parked_deadline(w));
    if (w->disk_full && ms_to_us(w->next_disk_check_mono) < best) {
        best = ms_to_us(w->next_disk_check_mono);
    }
    if (w->store == NULL) {
        if (ms_to_us(w->next_reopen_mono) < best) {
            best = ms_to_us(w->next_reopen_mono);
        }
        return best;
    }
    if (w->disk_full) {
        return best; /* no scheduler or maintenance work while writes are refused */
    }
    uint64_t wall_next = sched_next_wakeup(w->sched);
    if (wall_next != UINT64_MAX) {
        uint64_t at = wall_ms_to_mono_us(wall_next, now_us);
        if (at < ms_to_us(w->sched_retry_mono)) {
            at = ms_to_us(w->sched_retry_mono); /* it failed: not again before then */
        }
        if (at < best) {
            best = at;
        }
    }
    uint64_t skip_end = store_group_damage_next_end(w->store); /* parked PULLs of its group try again then */
    if (skip_end != UINT64_MAX && wall_ms_to_mono_us(skip_end, now_us) < best) {
        best = wall_ms_to_mono_us(skip_end, now_us);
    }
    uint64_t maint = w->maintain_needed ? w->last_job_mono + MAINTAIN_IDLE_MS : w->next_periodic_mono;
    if (w->next_trim_mono != 0 && w->next_trim_mono < maint) {
        maint = w->next_trim_mono;
    }
    if (w->collect_behind && w->next_collect_mono < maint) {
        maint = w->next_collect_mono;
    }
    if (ms_to_us(maint) < best) {
        best = ms_to_us(maint);
    }
    return best;
}

void *writer_main(void *arg)
{
    writer_t *w = arg;
    job_list_t done = { 0 };
    int more = 0;
    w->next_periodic_mono = clock_mono_ms() + MAINTAIN_PERIOD_MS;
    for (;;) {
        pthread_mutex_lock(&w->mu);
        while (w->q_head == NULL && w->fair.queued == 0 && !w->stop_requested && !more && !w->checkpoint_finished) {
            uint64_t now = clock_mono_us();
            uint64_t at = next_wakeup_us(w, now);
            if (at <= now) {
                break;
            }
            if (at == UINT64_MAX) {
                pthread_cond_wait(&w->cond, &w->mu);
            } else {
                struct timespec ts = { .tv_sec = (time_t)(at / 1000000), .tv_nsec = (long)(at % 1000000) * 1000 };
                int rc = pthread_cond_timedwait(&w->cond, &w->mu, &ts);
                if (rc == ETIMEDOUT) {
                    break;
                }
            }
        }
        job_t *batch = w->q_head;
        w->q_head = w->q_tail = NULL;
        w->q_len = 0;
        w->checkpoint_finished = 0; /* settled below (writer_settle_checkpoint), also while the disk is full */
        int stopping = w->stop_requested;
        pthread_mutex_unlock(&w->mu);
        w->stopping = stopping;
        w->iteration++;

        uint64_t now_mono = clock_mono_ms();
        atomic_store(&w->heartbeat_mono, now_mono);
        char why[512];
        if (w->syncer != NULL && w->store != NULL && syncer_failed(w->syncer, why, sizeof why)) {
            w->stats.commit_failures++;
            if (syncer_failed_full(w->syncer)) { /* its errno, not its text */
                writer_disk_full_begin(w, why);
            }
            writer_reopen_store(w, why, 1); /* an fsync failed: what the kernel holds is suspect */
        }
        if (w->store == NULL) {
            writer_reopen_store(w, "reopen pending", 0);
        }
        if (w->syncer != NULL && w->store != NULL && syncer_failed(w->syncer, why, sizeof why)) {
            syncer_reset(w->syncer);
        }
        writer_check_disk(w, now_mono);

        /* 1. the jobs, each connection's in its order, round-robin between connections */
        writer_fair_intake(w, batch);
        size_t njobs = writer_fair_serve(w, &done, now_mono);
        if (njobs > 0) {
            w->last_job_mono = now_mono;
            w->maintain_needed = 1;
            w->next_trim_mono = 0; /* the idle maintenance after these jobs starts the trims again */
        }
        /* The jobs' group commit. (Scheduler reads below would commit it
         * anyway, untimed: store_next_lease_deadline commits first.) */
        count_batch(w, njobs);
        writer_commit_pending(w, &done);
        /* Their replies go now: a failure of the second commit below must not
         * turn an acknowledged (fsynced) SEND into an error, or a client that
         * retries it makes a duplicate. */
        writer_post(w, &done, 0);

        /* 2. one bounded chunk of due work */
        more = 0;
        if (w->store != NULL && !w->disk_full && now_mono >= w->sched_retry_mono &&
            sched_next_wakeup(w->sched) <= sched_now(w->sched)) {
            sched_stats_t st = { 0 };
            char err[512];
            if (sched_run(w->sched, SCHED_CHUNK, &st, &more, err, sizeof err) != 0) {
                writer_sched_failed(w, err, now_mono);
                more = 0;
            } else {
                writer_sched_succeeded(w);
            }
            writer_report_level_damage(w);
            if (w->store != NULL) { /* hops put back by a full remainder lane (store_lane_full_hops) */
                uint64_t put_back = store_lane_full_hops(w->store);
                w->stats.lane_full_hops += put_back - w->lane_full_hops_seen;
                w->lane_full_hops_seen = put_back;
            }
            w->stats.moved += st.moved;
            w->stats.made_ready += st.ready;
            w->stats.lease_expiries += st.expired;
            w->stats.retries += st.retried;
            w->stats.dlq_moves += st.dead;
        }

        /* 3. parked jobs: deadlines and wake-ups (those of groups whose
         * damaged queue's skip ended among them) */
        if (w->store != NULL) {
            store_group_damage_wake(w->store, writer_now(w));
        }
        writer_service_parked(w, &done, clock_mono_ms(), stopping);

        /* 4. commit the scheduler's and parked jobs' writes (usually nothing), then the replies */
        writer_commit_pending(w, &done);
        writer_post(w, &done, 0);
        if (w->store != NULL) {
            writer_report_group_damage(w); /* found by the PULLs of 1. and 3. */
        }

        /* 4b. the commit log's next spare segment, asked of its pre-writer or taken from it, after the replies: a
           segment switch then takes the spare (a header and a rename) instead of pre-writing and syncing a whole
           segment inside the commit of whichever SENDs, moves or PULLs reached it (~40 ms at 16 MiB, every job of
           the iteration held) */
        if (w->store != NULL && !w->disk_full) {
            writer_prepare_spare(w, now_mono);
        }

        /* 4c. a checkpoint the commit log's thread finished: its outcome, and the segments below it recycled
           (also while the disk is full: that gives space back) */
        if (w->store != NULL) {
            writer_settle_checkpoint(w);
        }

        /* 5. maintenance, after the replies (a PULL woken by this iteration's
         * arrivals does not wait for it): while busy, only the topic-log GC,
         * in bounded steps (a broker that is never idle for a second must not
         * grow its logs for as long as the load lasts); when idle, all of it */
        int busy = njobs > 0 || more;
        if (w->store != NULL && !w->disk_full && (busy || w->collect_behind) && now_mono >= w->next_collect_mono) {
            int work = 0;
            char err[512];
            int budget = w->collect_budget;
            uint64_t began_us = clock_mono_us();
            if (store_collect(w->store, sched_now(w->sched), COLLECT_GRACE_MS, budget, &work, err, sizeof err) != 0) {
                log_warn("maintenance: %s", err);
                work = 0;
            }
            uint64_t took_us = clock_mono_us() - began_us;
            w->stats.maintain_work += (uint64_t)work;
            /* Its deletes ride with the next commit. Behind, it comes back
             * soon with a step sized by time, not by a count: what an entry
             * costs changed with the store's layout (a LevelDB delete once,
             * a consume-queue head now), and the step's bound is what the
             * delivery tail feels. It never spins the loop: every extra
             * iteration is one more write that can wait behind the fsync. */
            w->collect_behind = work >= budget; /* a step of GROUP DEL may pass it by a few */
            if (!w->collect_behind) {
                w->collect_budget = COLLECT_BUDGET_MIN;
            } else if (took_us > COLLECT_STEP_US) {
                w->collect_budget = budget / 2 > COLLECT_BUDGET_MIN ? budget / 2 : COLLECT_BUDGET_MIN;
            } else if (took_us * 2 < COLLECT_STEP_US) {
                w->collect_budget = budget * 2 < COLLECT_BUDGET_MAX ? budget * 2 : COLLECT_BUDGET_MAX;
            }
            w->next_collect_mono = now_mono + (w->collect_behind ? COLLECT_BEHIND_MS : COLLECT_PERIOD_MS);
        } else if (w->store != NULL && !w->disk_full && !busy) {
            int due = w->maintain_needed ? now_mono >= w->last_job_mono + MAINTAIN_IDLE_MS
                                         : now_mono >= w->next_periodic_mono;
            if (due) {
                int work = 0;
                char err[512];
                int after_work = w->maintain_needed;
                if (store_maintain(w->store, sched_now(w->sched), MAINTAIN_BUDGET, &work, err, sizeof err) != 0) {
                    log_warn("maintenance: %s", err);
                    work = 0;
                }
                w->stats.maintain_work += (uint64_t)work;
                if (work > 0) {
                    more = 1;
                    w->maintain_needed = 1;
                    w->last_job_mono = 0; /* keep going while idle */
                } else {
                    if (after_work) {
                        release_free_memory(w); /* the first idle second after work, maintenance done */
                        w->trim_gap_ms = TRIM_FIRST_GAP_MS;
                        w->next_trim_mono = now_mono + w->trim_gap_ms;
                    }
                    w->maintain_needed = 0;
                    w->next_periodic_mono = now_mono + MAINTAIN_PERIOD_MS;
                }
            } else if (w->next_trim_mono != 0 && now_mono >= w->next_trim_mono) {
                release_free_memory(w);
                w->trim_gap_ms *= 2;
                w->next_trim_mono = w->trim_gap_ms <= TRIM_LAST_GAP_MS ? now_mono + w->trim_gap_ms : 0;
            }
        }

        if (stopping) {
            pthread_mutex_lock(&w->mu);
            int empty = w->q_head == NULL && w->fair.queued == 0;
            pthread_mutex_unlock(&w->mu);
            if (empty) {
                break;
            }
        }
    }
    /* The last syncs and their replies, then close the store here, on its
     * own thread, before telling the loop. */
    w->stats.syncer = NULL;
    syncer_stop(w->syncer);
    w->syncer = NULL;
    backup_stop(w->backup); /* a copy still running is stopped: its snapshot belongs to the store */
    if (w->store != NULL) {
        char err[512];
        writer_set_synced_store(w, NULL, 0); /* the syncer is stopped */
        if (store_close(w->store, err, sizeof err) != 0) {
            log_error("closing the store: %s", err);
        } else {
            log_info("store %s closed", w->opts->path);
        }
        w->store = NULL;
    }
    if (w->sched) {
        sched_free(w->sched);
        w->sched = NULL;
    }
    writer_post(w, &done, 1);
    return NULL;
}
