/*
 * broker/writer_thread.c — the storage thread and group commit (see
 * writer.h): writer_main's iterations, serving the fair-share queues, the
 * commit and its failure (reopen), the scheduler and maintenance steps,
 * the disk-full checks. The loop side is writer.c; struct writer is shared
 * through writer_internal.h; the fair-share queues' data structure is
 * fairq.c, the parked jobs' service writer_wake.c. Thread: the storage
 * thread only (the accessors, writer_store etc., are called by the jobs'
 * exec, on this thread).
 *
 * Invariants:
 *  - Only this thread touches store/sched/stats/parked/fair. The loop touches
 *    only the submit queue (under mu) and the done queue (under done_mu).
 *  - A job's reply leaves this thread only after the commit that follows its
 *    exec succeeded; when that commit fails every job of the group is
 *    answered with the storage error instead (an id is never announced for a
 *    write that may be lost), and the store is closed and reopened.
 *  - Fair share: submitted jobs are sorted into one queue per connection,
 *    served round-robin, one job of each connection per turn, in each
 *    connection's own order. Jobs that build no listing (SEND, ACK, PING's
 *    kin) all run in the iteration that finds them; listings (a job with a
 *    reply_estimate: PULL, DLQ LIST, GET, FIND, PEEK) stop for the
 *    iteration once those run in it built FAIR_LISTING_BYTES of replies,
 *    and the rest wait for the next one (which follows at once). So a
 *    SEND waits behind at most about that much listing work, however many
 *    listings other clients queued (it waited behind all of them: 3.1 s at
 *    worst under hourglass-limits-bench's pressure part, 0.5 s now). A
 *    connection's cancel (it closed) also drops its queued read-only jobs
 *    and PULL … BLOCKs not run yet: nobody reads them, and a blocked client
 *    that leaves gets nothing leased.
 *  - A job that steps (JOB_AGAIN: DLQ REQUEUE/DROP ALL) goes back to the
 *    head of its connection's queue and runs once per iteration, so the
 *    other connections' jobs, the commit, the scheduler and the parked
 *    jobs run between its steps and its connection's later jobs wait
 *    behind it; it is not answered, and makes no promise, until its last
 *    step. writer_stopping tells it to finish.
 *  - One iteration = take every queued job, run them as above, commit them
 *    (one synced write; one per STORE_BATCH_MAX_BYTES of writes when a burst
 *    holds more, so the batch never holds a whole burst), post their
 *    replies; run one bounded chunk (in moves and in bytes) of due
 *    scheduler work, expire and retry parked jobs, commit those writes (if
 *    any), post those replies. A failure of the second commit answers only
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
#include "broker/diskguard.h"
#include "broker/fairq.h"
#include "broker/joblist.h"
#include "broker/parked.h"
#include "broker/syncer.h"
#include "common/log.h"
#include "base/clock.h"

#define SCHED_CHUNK        4096  /* most due moves / expiries per iteration */
#define CHECKPOINT_POLL_US 5000  /* a checkpoint on the commit log's thread is looked at this often when idle */
#define MAINTAIN_BUDGET    512   /* store_maintain deletes per idle step */
#define MAINTAIN_IDLE_MS   1000  /* idle time before maintenance runs */
#define MAINTAIN_PERIOD_MS 60000 /* maintenance check when nothing else happens (retention) */
#define COLLECT_PERIOD_MS  10    /* while busy: store_collect at most this often */
#define COLLECT_BEHIND_MS  5     /* ...and this often, busy or not, while its steps come back full */
#define COLLECT_BUDGET_MAX 1024  /* ...doubled per full step up to this (~1.5 ms), so a backlog drains */
#define COLLECT_GRACE_MS   1000  /* a consumed topic-log entry stays readable at least this long (store_collect) */
#define REOPEN_RETRY_MS    1000  /* a failed reopen is retried this often (its log: broker/logrepeat.h) */
#define SCHED_RETRY_MS     1000  /* a failed scheduler run is retried this often */
#define DISK_CHECK_MS      1000  /* free space is checked this often while the disk is full */
#define TRIM_FIRST_GAP_MS  2000  /* idle after work: memory given back again this long after the first time... */
#define TRIM_LAST_GAP_MS   32000 /* ...then after twice as long, up to this (LevelDB frees its compactions' late) */
/* the pre-writer thread's gap between a spare segment's 1 MiB chunks (~100 MiB/s of zeros, not a burst the log's
   syncs wait behind) while the log's end is in the first half of its segment; in the second half none */
#define SPARE_STEP_GAP_MS  10
#define FAIR_LISTING_BYTES STORE_BATCH_MAX_BYTES /* listing replies built per iteration (at least one listing) */

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

static void post(writer_t *w, job_list_t *done, int stopped)
{
    if (done->head == NULL && !stopped) {
        return;
    }
    pthread_mutex_lock(&w->done_mu);
    if (done->head) {
        if (w->done_tail) {
            w->done_tail->next = done->head;
        } else {
            w->done_head = done->head;
        }
        w->done_tail = done->tail;
    }
    if (stopped) {
        w->stopped = 1;
    }
    pthread_mutex_unlock(&w->done_mu);
    event_active(w->done_ev, EV_READ, 0);
    done->head = done->tail = NULL;
    done->n = 0;
}

const char *writer_steps_suffix(const job_t *j, char *buf, size_t len)
{
    char done[256] = "";
    if (j->so_far != NULL) {
        j->so_far(j, done, sizeof done);
    }
    snprintf(buf, len, done[0] ? " (%s before it, the rest are still there)" : "%s", done);
    return buf;
}

/* Answer j with an error the writer decided (prefix, then what), saying what
 * its steps did before when it stepped. */
static void answer_error(job_t *j, const char *prefix, const char *what)
{
    char steps[320];
    resp_buf_clear(&j->reply);
    resp_add_errorf(&j->reply, "ERR %s%s%s", prefix, what, writer_steps_suffix(j, steps, sizeof steps));
    j->failed = 1;
}

static void fail_job(job_t *j, const char *msg)
{
    answer_error(j, "storage failure: ", msg);
}

static void set_broken(writer_t *w, const char *msg)
{
    pthread_mutex_lock(&w->done_mu);
    snprintf(w->broken_msg, sizeof w->broken_msg, "%s", msg);
    pthread_mutex_unlock(&w->done_mu);
    atomic_store(&w->broken, 1);
}

/* The store failed a commit: close it and open it again (its in-memory state
 * is rebuilt from disk). sync_failed: an fsync of the log failed, so the
 * close must not sync it (store_close_unsynced says why). On failure the
 * store stays NULL and jobs are answered with the error until a later
 * attempt succeeds. */
static void reopen_store(writer_t *w, const char *why, int sync_failed)
{
    if (w->store != NULL) {
        uint64_t repeats = 0;
        log_repeat_say_t say = log_repeat_fail(&w->break_log, why, clock_mono_ms(), &repeats);
        if (say == LOG_REPEAT_FIRST) {
            log_error("storage failure: %s; reopening %s", why, w->opts->path);
        } else if (say == LOG_REPEAT_SUMMARY) {
            log_error("storage failure again (%llu times since its last line, the store reopened after each): %s; "
                      "reopening %s",
                      (unsigned long long)repeats, why, w->opts->path);
        }
        w->reopen_quiet = say == LOG_REPEAT_QUIET;
        set_broken(w, why);
        sched_free(w->sched);
        w->sched = NULL;
        backup_stop(w->backup); /* its snapshot belongs to the store */
        /* after a failed commit the log itself is fine: what it holds is made durable before the close (a
           broken store's close syncs nothing), so the syncer's jobs from before it are answered as synced */
        char serr[512];
        writer_set_synced_store(w, NULL, !sync_failed && store_log_sync(w->store, serr, sizeof serr) == 0);
        if (sync_failed) {
            store_close_unsynced(w->store, NULL, 0); /* the memtable to a table from memory, not the log */
        } else {
            store_close(w->store, NULL, 0);
        }
        w->store = NULL;
    }
    uint64_t now = clock_mono_ms();
    if (now < w->next_reopen_mono) {
        return;
    }
    w->next_reopen_mono = now + REOPEN_RETRY_MS;
    uint64_t free_bytes = diskguard_free_bytes(w->opts->path);
    if (w->disk_full && w->reopen_failed_free != 0 && free_bytes <= w->reopen_failed_free + (UINT64_C(1) << 20)) {
        return; /* each failed open leaves a file behind: wait for space */
    }
    char err[512];
    store_options_t o = *w->opts;
    o.create_if_missing = 0;
    if (store_open(&o, writer_now(w), &w->store, err, sizeof err) != 0) {
        w->store = NULL;
        uint64_t repeats = 0;
        /* Retried every second, for as long as it takes (a damaged directory:
         * until someone restores it): one line per new cause, then one a
         * minute, not 86 400 a day. */
        switch (log_repeat_fail(&w->reopen_log, err, now, &repeats)) {
        case LOG_REPEAT_FIRST:
            log_error("cannot reopen the store: %s", err);
            break;
        case LOG_REPEAT_SUMMARY:
            log_error("still cannot reopen the store (%llu attempts, one a second): %s",
                      (unsigned long long)w->reopen_log.failures, err);
            break;
        case LOG_REPEAT_QUIET:
            break;
        }
        w->reopen_quiet = 0; /* the reopen that succeeds after this says so */
        set_broken(w, err);
        /* No store to ask: store_open's text is whole here (a long data
         * directory is shortened in it, so the cause fits this buffer). */
        if (store_failure_text_full(err)) {
            w->reopen_failed_free = free_bytes == UINT64_MAX ? 1 : free_bytes + 1;
        }
        return;
    }
    w->reopen_failed_free = 0;
    w->wake_all = 1; /* a new store: its marks of what changed before are gone */
    writer_set_synced_store(w, w->store, 0);
    w->sched = sched_new(w->store, NULL, NULL);
    w->stats.reopens++;
    atomic_store(&w->broken, 0);
    uint64_t failed = log_repeat_ok(&w->reopen_log);
    if (failed > 0) {
        log_info("store %s reopened after %llu failed attempts", w->opts->path, (unsigned long long)failed);
    } else if (!w->reopen_quiet) { /* a break not logged (the same again within the period): nor its reopen */
        log_info("store %s reopened", w->opts->path);
    }
    w->level_damage_seen = 0; /* a new store: its levels are found damaged again */
    w->lane_full_hops_seen = 0;
    w->group_damage_seen = 0; /* ...and its groups' queues */
    w->group_recoveries_seen = 0;
    memset(w->level_damage_logged, 0, sizeof w->level_damage_logged);
    w->levels_damaged_logged = 0;
    if (store_open_note(w->store)[0] != '\0') {
        log_warn("%s", store_open_note(w->store));
    }
}

static job_result_t run_exec(writer_t *w, job_t *j, job_list_t *done, uint64_t now_mono)
{
    /* A write on a full disk is told so, also while the store cannot reopen: the commit log's open may
       need to write (clearing a torn tail) where the disk has no room. */
    if (w->disk_full && !j->reads_only) {
        answer_error(j, "disk full: writes are refused until space returns on ", w->opts->path);
        w->stats.disk_full_refusals++;
        job_list_push(done, j);
        return JOB_DONE;
    }
    if (w->store == NULL) {
        char msg[600];
        pthread_mutex_lock(&w->done_mu);
        snprintf(msg, sizeof msg, "store unavailable: %s", w->broken_msg);
        pthread_mutex_unlock(&w->done_mu);
        fail_job(j, msg);
        job_list_push(done, j);
        return JOB_DONE;
    }
    if (!writer_wake_reserve(w, j)) { /* no client memory for a PULL BLOCK's reply yet: it waits parked */
        writer_park(w, j, now_mono);
        return JOB_PARK;
    }
    job_result_t r = j->exec(j, w);
    if (r == JOB_AGAIN) {
        return r; /* not answered yet: its promise is made by the step that finishes it */
    }
    w->batch_durable |= j->durable;
    if (r == JOB_PARK && j->block_set) {
        writer_park(w, j, now_mono);
        return JOB_PARK;
    }
    writer_count_budgeted(w, j);
    job_list_push(done, j);
    return JOB_DONE;
}

/* ---- fair share: one queue per connection, served round-robin ------------------ */

static void commit_pending(writer_t *w, job_list_t *done);

/* A connection closed: drop its parked jobs and its queued droppable ones
 * (fairq_cancel: a client closed for not reading its listings costs no
 * more storage work). Its other queued writes still run: their outcome is
 * durable either way. */
static void cancel_conn(writer_t *w, uint64_t conn_id)
{
    writer_cancel_parked(w, conn_id);
    job_list_t dropped = { 0 };
    fairq_cancel(&w->fair, conn_id, &dropped);
    while (dropped.head != NULL) {
        job_t *j = job_list_pop(&dropped);
        atomic_fetch_sub(&w->nqueued, 1);
        job_free(j);
        w->stats.closed_jobs_dropped++;
    }
}

/* Sort the submitted jobs (in submission order) into their connections' queues. */
static void fair_intake(writer_t *w, job_t *batch)
{
    while (batch) {
        job_t *j = batch;
        batch = j->next;
        j->next = NULL;
        if (j->kind == JOB_CANCEL_KIND) {
            cancel_conn(w, j->conn_id);
            atomic_fetch_sub(&w->nqueued, 1);
            job_free(j);
            continue;
        }
        fairq_push(&w->fair, j);
    }
}

/* Run queued jobs round-robin, one per connection per turn, until every
 * queue is empty or holds only listings and this iteration's listings built
 * FAIR_LISTING_BYTES (the file comment). Returns the number run. */
static size_t fair_serve(writer_t *w, job_list_t *done, uint64_t now_mono)
{
    size_t njobs = 0, listing_bytes = 0;
    for (int ran = 1; ran && w->fair.ring != NULL;) {
        ran = 0;
        fairq_queue_t *q = w->fair.ring;
        for (size_t k = 0, turns = fairq_conns(&w->fair); k < turns && w->fair.ring != NULL; k++) {
            fairq_queue_t *next = q->ring_next;
            job_t *j = q->jobs.head;
            int stepped = j->again_iteration == w->iteration; /* a step per iteration: see JOB_AGAIN */
            if (!stepped && (!fairq_is_listing(j) || listing_bytes < FAIR_LISTING_BYTES)) {
                fairq_take(&w->fair, q);
                atomic_fetch_sub(&w->nqueued, 1);
                if (run_exec(w, j, done, now_mono) == JOB_AGAIN) {
                    j->again_iteration = w->iteration; /* back at the head of its connection's queue */
                    fairq_put_back(&w->fair, q, j);
                    atomic_fetch_add(&w->nqueued, 1);
                }
                if (fairq_is_listing(j)) {
                    listing_bytes += j->reply.raw.len > 0 ? j->reply.raw.len : 1;
                }
                njobs++;
                ran = 1;
                fairq_advance(&w->fair, q, next); /* the next turn goes to the next connection */
                if (w->store != NULL && store_pending_bytes(w->store) >= STORE_BATCH_MAX_BYTES) {
                    commit_pending(w, done); /* a burst: commit (and answer) what the batch holds so far */
                    post(w, done, 0);
                }
            }
            q = next;
        }
    }
    return njobs;
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
    if (store_log_checkpoint_running(w->store) && now_us + CHECKPOINT_POLL_US < best) {
        best = now_us + CHECKPOINT_POLL_US; /* its outcome and the recycling below it, also while full */
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

/* With a syncer: move the jobs of done whose replies need durability (a
 * promise, or a message id not yet synced) to the syncer, behind what was
 * just written. The rest stay in done and are posted at once. */
static void hand_to_syncer(writer_t *w, job_list_t *done)
{
    if (w->syncer == NULL || w->store == NULL || done->head == NULL) {
        return;
    }
    uint64_t synced = syncer_synced_mark(w->syncer);
    job_list_t keep = { 0 }, wait = { 0 };
    for (job_t *j = done->head, *n; j; j = n) {
        n = j->next;
        int needs = !j->failed && (j->durable || (j->max_id != 0 && j->max_id >= synced));
        job_list_push(needs ? &wait : &keep, j);
    }
    *done = keep;
    if (wait.head) {
        syncer_add(w->syncer, wait.head, wait.tail, wait.n, store_next_seq(w->store));
    }
}

/* A write failed for want of space (why: its error): give the disk reserve
 * back, so that the store can reopen, and refuse writes until check_disk
 * finds the space back. Once per episode: a no-op while the disk is full. */
static void disk_full_begin(writer_t *w, const char *why)
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

/* Commit what is pending (timed) — fsynced when a job of this batch made a
 * promise (CMD_DURABLE), else written without fsync; with a syncer always
 * written without fsync here, the syncer syncs; on failure answer every
 * job of this iteration with the error and reopen the store. */
static void commit_pending(writer_t *w, job_list_t *done)
{
    if (w->store == NULL) {
        return;
    }
    char err[512];
    int pending = store_pending(w->store);
    uint64_t t0 = clock_mono_us();
    int rc = store_commit_durable(w->store, w->syncer ? 0 : w->batch_durable, err, sizeof err);
    if (rc == 0) { /* what the syncer's syncs covered goes to LevelDB (a checkpoint when one is due) */
        rc = store_apply_durable(w->store, err, sizeof err);
    }
    w->batch_durable = 0;
    uint64_t t1 = clock_mono_us();
    if (pending > 0 && rc == 0) {
        w->stats.commits++;
        w->stats.last_commit_us = t1 - t0;
        prom_hist_add(&w->stats.commit_seconds, (double)(t1 - t0) / 1e6);
    }
    if (rc != 0 || store_broken(w->store)) {
        if (rc == 0) {
            snprintf(err, sizeof err, "the store is broken");
        }
        w->stats.commit_failures++;
        for (job_t *j = done->head; j; j = j->next) {
            fail_job(j, err);
        }
        /* the store's fact, decided on LevelDB's whole error: this text may be cut */
        if (store_last_failure_full(w->store)) {
            disk_full_begin(w, err);
        }
        reopen_store(w, err, 0);
    }
    hand_to_syncer(w, done);
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
static void check_disk(writer_t *w, uint64_t now_mono)
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
        reopen_store(w, why, 0);
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

/* A scheduler run failed with err: retry it SCHED_RETRY_MS later (its work
 * is still due, so the loop would run it again at once), and log a cause
 * once, then once a LOG_REPEAT_PERIOD_MS while it repeats. */
static void sched_failed(writer_t *w, const char *err, uint64_t now_mono)
{
    w->sched_retry_mono = now_mono + SCHED_RETRY_MS;
    uint64_t repeats = 0;
    switch (log_repeat_fail(&w->sched_log, err, now_mono, &repeats)) {
    case LOG_REPEAT_FIRST:
        log_error("scheduler: %s", err);
        break;
    case LOG_REPEAT_SUMMARY:
        log_error("scheduler: still failing (%llu attempts, one a second): %s",
                  (unsigned long long)w->sched_log.failures, err);
        break;
    case LOG_REPEAT_QUIET:
        break;
    }
}

/* A scheduler run succeeded: after failures, say so once. */
static void sched_succeeded(writer_t *w)
{
    uint64_t failed = log_repeat_ok(&w->sched_log);
    if (failed > 0) {
        log_info("scheduler: due work runs again after %llu failed attempts", (unsigned long long)failed);
    }
    w->sched_retry_mono = 0;
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
static void prepare_spare(writer_t *w, uint64_t now_mono)
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
    uint64_t repeats = 0;
    switch (log_repeat_fail(&w->spare_log, err, now_mono, &repeats)) {
    case LOG_REPEAT_FIRST:
        log_warn("%s; until a spare is ready, a segment switch pre-writes its segment itself", err);
        break;
    case LOG_REPEAT_SUMMARY:
        log_warn("%s (%llu times since its last line); until a spare is ready, a segment switch pre-writes its "
                 "segment itself",
                 err, (unsigned long long)repeats);
        break;
    case LOG_REPEAT_QUIET:
        break;
    }
}

/* A checkpoint finished on the commit log's thread (store_log_checkpoint_step):
 * a busy store's next apply takes it too, this takes it when idle. Its
 * failure (a CQ file's fdatasync, LevelDB's) breaks the store: reopened as
 * after a failed commit, whose replies were already sent (the log's sync
 * covered them). */
static void settle_checkpoint(writer_t *w)
{
    char err[640];
    if (store_log_checkpoint_step(w->store, err, sizeof err) == 0) {
        return;
    }
    w->stats.commit_failures++;
    if (store_last_failure_full(w->store)) {
        disk_full_begin(w, err);
    }
    reopen_store(w, err, 0);
}

/* Levels the due move found damaged (store_move_due skips them and moves the
 * others): each logged once, and once when it moves again. */
static void report_level_damage(writer_t *w)
{
    uint64_t events = store_level_damage_events(w->store);
    if (events == w->level_damage_seen && w->levels_damaged_logged == 0) {
        return; /* nothing new, and no logged level to watch for its recovery */
    }
    if (events > w->level_damage_seen) {
        w->stats.level_damage_events += events - w->level_damage_seen;
    }
    w->level_damage_seen = events;
    for (int l = 1; l <= store_levels(w->store)->count; l++) {
        store_level_info_t li;
        if (store_level_info(w->store, l, &li) != 0) {
            continue;
        }
        if (li.damaged && !w->level_damage_logged[l]) {
            char every[32];
            units_format_duration(store_options(w->store)->damage_retry_ms, every, sizeof every);
            log_error("level %d: its due move fails at its head, so its %llu messages wait (tried again every %s; "
                      "the other levels move): %s",
                      l, (unsigned long long)li.depth, every, li.damage);
            w->level_damage_logged[l] = 1;
            w->levels_damaged_logged++;
        } else if (!li.damaged && w->level_damage_logged[l]) {
            log_info("level %d: due messages move again", l);
            w->level_damage_logged[l] = 0;
            w->levels_damaged_logged--;
        }
    }
}

/* Group queues a PULL found damaged at their head (store_lease skips them
 * and serves the group's other queue): each finding logged once, and each
 * recovery (a damaged queue served again) once; when the iteration's PULLs
 * made several, the last with how many others. */
static void report_group_damage(writer_t *w)
{
    uint64_t events = store_group_damage_events(w->store);
    if (events != w->group_damage_seen) {
        uint64_t fresh = events > w->group_damage_seen ? events - w->group_damage_seen : events;
        w->stats.group_damage_events += fresh;
        w->group_damage_seen = events;
        if (fresh > 1) {
            log_error("%s (and %llu more group queues found damaged since the last report)",
                      store_group_damage_last(w->store), (unsigned long long)(fresh - 1));
        } else {
            log_error("%s", store_group_damage_last(w->store));
        }
    }
    uint64_t recoveries = store_group_recoveries(w->store);
    if (recoveries != w->group_recoveries_seen) {
        uint64_t fresh = recoveries > w->group_recoveries_seen ? recoveries - w->group_recoveries_seen : recoveries;
        w->group_recoveries_seen = recoveries;
        if (fresh > 1) {
            log_info("%s (and %llu more damaged group queues served again since the last report)",
                     store_group_recovery_last(w->store), (unsigned long long)(fresh - 1));
        } else {
            log_info("%s", store_group_recovery_last(w->store));
        }
    }
}

void *writer_main(void *arg)
{
    writer_t *w = arg;
    job_list_t done = { 0 };
    int more = 0;
    w->next_periodic_mono = clock_mono_ms() + MAINTAIN_PERIOD_MS;
    for (;;) {
        pthread_mutex_lock(&w->mu);
        while (w->q_head == NULL && w->fair.queued == 0 && !w->stop_requested && !more) {
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
                disk_full_begin(w, why);
            }
            reopen_store(w, why, 1); /* an fsync failed: what the kernel holds is suspect */
        }
        if (w->store == NULL) {
            reopen_store(w, "reopen pending", 0);
        }
        if (w->syncer != NULL && w->store != NULL && syncer_failed(w->syncer, why, sizeof why)) {
            syncer_reset(w->syncer);
        }
        check_disk(w, now_mono);

        /* 1. the jobs, each connection's in its order, round-robin between connections */
        fair_intake(w, batch);
        size_t njobs = fair_serve(w, &done, now_mono);
        if (njobs > 0) {
            w->last_job_mono = now_mono;
            w->maintain_needed = 1;
            w->next_trim_mono = 0; /* the idle maintenance after these jobs starts the trims again */
        }
        /* The jobs' group commit. (Scheduler reads below would commit it
         * anyway, untimed: store_next_lease_deadline commits first.) */
        count_batch(w, njobs);
        commit_pending(w, &done);
        /* Their replies go now: a failure of the second commit below must not
         * turn an acknowledged (fsynced) SEND into an error, or a client that
         * retries it makes a duplicate. */
        post(w, &done, 0);

        /* 2. one bounded chunk of due work */
        more = 0;
        if (w->store != NULL && !w->disk_full && now_mono >= w->sched_retry_mono &&
            sched_next_wakeup(w->sched) <= sched_now(w->sched)) {
            sched_stats_t st = { 0 };
            char err[512];
            if (sched_run(w->sched, SCHED_CHUNK, &st, &more, err, sizeof err) != 0) {
                sched_failed(w, err, now_mono);
                more = 0;
            } else {
                sched_succeeded(w);
            }
            report_level_damage(w);
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
        commit_pending(w, &done);
        post(w, &done, 0);
        if (w->store != NULL) {
            report_group_damage(w); /* found by the PULLs of 1. and 3. */
        }

        /* 4b. the commit log's next spare segment, asked of its pre-writer or taken from it, after the replies: a
           segment switch then takes the spare (a header and a rename) instead of pre-writing and syncing a whole
           segment inside the commit of whichever SENDs, moves or PULLs reached it (~40 ms at 16 MiB, every job of
           the iteration held) */
        if (w->store != NULL && !w->disk_full) {
            prepare_spare(w, now_mono);
        }

        /* 4c. a checkpoint the commit log's thread finished: its outcome, and the segments below it recycled
           (also while the disk is full: that gives space back) */
        if (w->store != NULL) {
            settle_checkpoint(w);
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
            if (store_collect(w->store, sched_now(w->sched), COLLECT_GRACE_MS, budget, &work, err, sizeof err) != 0) {
                log_warn("maintenance: %s", err);
                work = 0;
            }
            w->stats.maintain_work += (uint64_t)work;
            /* Its deletes ride with the next commit. Behind, it comes back
             * soon with a larger step, but never spins the loop: every extra
             * iteration is one more write that can wait behind the fsync. */
            w->collect_behind = work >= budget; /* a step of GROUP DEL may pass it by a few */
            w->collect_budget = w->collect_behind ? (budget * 2 < COLLECT_BUDGET_MAX ? budget * 2 : COLLECT_BUDGET_MAX)
                                                  : COLLECT_BUDGET_MIN;
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
    post(w, &done, 1);
    return NULL;
}
