/*
 * broker/writer_commit.c — the storage thread's group commit and its
 * failure (see writer_internal.h): the commit of what the iteration's jobs
 * wrote, the jobs whose replies wait for the syncer handed to it, the
 * replies posted to the loop, the error answers the writer decides, and
 * the store closed and reopened after a failed commit or checkpoint.
 *
 * Invariants:
 *  - A job's reply leaves this thread only after the commit that follows its
 *    exec succeeded; when that commit fails every job of the group is
 *    answered with the storage error instead (an id is never announced for a
 *    write that may be lost), and the store is closed and reopened.
 *  - While the store is closed (a reopen failed) it is tried again at most
 *    once a REOPEN_RETRY_MS, and w->broken says so to the loop.
 * Thread: the storage thread only (writer_post hands the replies to the
 * loop through the done queue, under done_mu).
 */
#include "broker/writer_internal.h"
#include "broker/diskguard.h"
#include "broker/joblist.h"
#include "broker/syncer.h"
#include "common/log.h"
#include "base/clock.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

#define REOPEN_RETRY_MS 1000 /* a failed reopen is retried this often (its log: broker/logrepeat.h) */

void writer_post(writer_t *w, job_list_t *done, int stopped)
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
void writer_answer_error(job_t *j, const char *prefix, const char *what)
{
    char steps[320];
    resp_buf_clear(&j->reply);
    resp_add_errorf(&j->reply, "ERR %s%s%s", prefix, what, writer_steps_suffix(j, steps, sizeof steps));
    j->failed = 1;
}

void writer_fail_job(job_t *j, const char *msg)
{
    writer_answer_error(j, "storage failure: ", msg);
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
void writer_reopen_store(writer_t *w, const char *why, int sync_failed)
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
        /* Retried every second, for as long as it takes (a damaged directory:
         * until someone restores it): one line per new cause, then one a
         * minute, not 86 400 a day. */
        log_repeat_report(&w->reopen_log, LOG_LEVEL_ERROR, now, err, LOG_REPEAT_COUNT_ATTEMPTS,
                          "cannot reopen the store: %s",
                          "still cannot reopen the store (%llu attempts, one a second): %s");
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
    writer_watch_checkpoints(w);
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

/* Commit what is pending (timed) — fsynced when a job of this batch made a
 * promise (CMD_DURABLE), else written without fsync; with a syncer always
 * written without fsync here, the syncer syncs; on failure answer every
 * job of this iteration with the error and reopen the store. */
void writer_commit_pending(writer_t *w, job_list_t *done)
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
            writer_fail_job(j, err);
        }
        /* the store's fact, decided on LevelDB's whole error: this text may be cut */
        if (store_last_failure_full(w->store)) {
            writer_disk_full_begin(w, err);
        }
        writer_reopen_store(w, err, 0);
    }
    hand_to_syncer(w, done);
}

/* A checkpoint finished on the commit log's thread (store_log_checkpoint_step):
 * a busy store's next apply takes it too, this takes it when idle. Its
 * failure (a CQ file's fdatasync, LevelDB's) breaks the store: reopened as
 * after a failed commit, whose replies were already sent (the log's sync
 * covered them). */
void writer_settle_checkpoint(writer_t *w)
{
    char err[640];
    if (store_log_checkpoint_step(w->store, err, sizeof err) == 0) {
        return;
    }
    w->stats.commit_failures++;
    if (store_last_failure_full(w->store)) {
        writer_disk_full_begin(w, err);
    }
    writer_reopen_store(w, err, 0);
}
