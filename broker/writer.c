/*
 * broker/writer.c — the storage thread and group commit (see writer.h).
 *
 * Invariants:
 *  - Only this thread touches store/sched/stats/parked. The loop touches only
 *    the submit queue (under mu) and the done queue (under done_mu).
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
#include "base/alloc.h"
#include "base/map.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "broker/backup.h"
#include "broker/diskguard.h"
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
#define COLLECT_BUDGET_MIN 128   /* store_collect deletes per step (~0.2 ms: the delivery tail)... */
#define COLLECT_BUDGET_MAX 1024  /* ...doubled per full step up to this (~1.5 ms), so a backlog drains */
#define COLLECT_GRACE_MS   1000  /* a consumed topic-log entry stays readable at least this long (store_collect) */
#define REOPEN_RETRY_MS    1000  /* a failed reopen is retried this often */
#define STALL_MS           10000 /* /healthz: queued work and no progress this long */
#define DISK_CHECK_MS      1000  /* free space is checked this often while the disk is full */
#define DISK_MIN_FREE      (UINT64_C(16) << 20)  /* without a reserve, writes resume above this much free */
#define FAIR_LISTING_BYTES STORE_BATCH_MAX_BYTES /* listing replies built per iteration (at least one listing) */
#define WAKE_RETRY_MS      10 /* woken PULLs left parked for want of client memory are tried again this often */

typedef struct job_list {
    job_t *head, *tail;
    size_t n;
} job_list_t;

/* The queued jobs of one connection (fair share, see above). */
typedef struct conn_queue {
    uint64_t conn_id;
    job_list_t jobs;
    struct conn_queue *ring_next, *ring_prev; /* the ring of connections with queued jobs */
} conn_queue_t;

struct writer {
    pthread_t thread;
    int started;

    /* submit side (loop -> storage) */
    pthread_mutex_t mu;
    pthread_cond_t cond;
    job_t *q_head, *q_tail;
    size_t q_len;
    int stop_requested;

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

    /* storage thread only */
    store_t *store;    /* NULL while a reopen fails */
    int batch_durable; /* a job since the last commit made a promise: fsync it */
    syncer_t *syncer;  /* fsync always: the fsync thread (NULL: commits sync themselves) */
    backup_t *backup;  /* BACKUP's copy thread: stopped before the store is closed */
    sched_t *sched;
    /* fair share: the queued jobs per connection, served round-robin */
    map_t fair_queues;           /* conn id (8 bytes) -> conn_queue_t */
    conn_queue_t *ring;          /* the queue served next; NULL: nothing queued */
    size_t fair_queued;          /* jobs in those queues */
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
    int maintain_needed;
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

void job_free(job_t *j)
{
    if (j == NULL) {
        return;
    }
    resp_buf_free(&j->reply);
    free(j->audit);
    free(j);
}

/* ---- lists ------------------------------------------------------------------ */

static void list_push_front(job_list_t *l, job_t *j)
{
    j->prev = NULL;
    j->next = l->head;
    if (l->head) {
        l->head->prev = j;
    } else {
        l->tail = j;
    }
    l->head = j;
    l->n++;
}

static void list_push(job_list_t *l, job_t *j)
{
    j->next = NULL;
    j->prev = l->tail;
    if (l->tail) {
        l->tail->next = j;
    } else {
        l->head = j;
    }
    l->tail = j;
    l->n++;
}

static job_t *list_pop(job_list_t *l)
{
    job_t *j = l->head;
    l->head = j->next;
    if (l->head == NULL) {
        l->tail = NULL;
    }
    l->n--;
    j->next = NULL;
    return j;
}

/* Park j, and publish the count for the loop. */
static void park(writer_t *w, job_t *j, uint64_t now_mono)
{
    parked_add(&w->parked, j, now_mono);
    atomic_store(&w->nparked, w->parked.count);
}

/* Take j out of the parked set, and publish the count. */
static void unpark(writer_t *w, job_t *j)
{
    parked_remove(&w->parked, j);
    atomic_store(&w->nparked, w->parked.count);
}

/* ---- public, loop side ----------------------------------------------------- */

static void done_cb(evutil_socket_t fd, short what, void *arg);

writer_t *writer_new(store_t *store, const store_options_t *opts, struct event_base *base, writer_done_fn done,
                     writer_stopped_fn stopped, void *ctx)
{
    writer_t *w = xmalloc(sizeof *w);
    memset(w, 0, sizeof *w);
    pthread_mutex_init(&w->mu, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&w->cond, &ca);
    pthread_condattr_destroy(&ca);
    pthread_mutex_init(&w->done_mu, NULL);
    w->done_ev = event_new(base, -1, 0, done_cb, w);
    if (w->done_ev == NULL) {
        log_error("cannot create the storage completion event (out of memory)");
        abort();
    }
    w->on_done = done;
    w->on_stopped = stopped;
    w->ctx = ctx;
    w->store = store;
    w->opts = opts;
    w->sched = sched_new(store, NULL, NULL);
    w->backup = backup_new();
    storage_stats_init(&w->stats, sched_now(w->sched));
    w->stats.backup = w->backup;
    w->maintain_needed = 1;
    w->collect_budget = COLLECT_BUDGET_MIN;
    parked_init(&w->parked);
    map_init(&w->fair_queues);
    map_init(&w->deferred_topics);
    atomic_store(&w->heartbeat_mono, clock_mono_ms());
    return w;
}

static void *writer_main(void *arg);

/* The syncer's post: jobs whose fsync returned go to the loop (syncer thread). */
static void post_synced(void *ctx, job_t *head, job_t *tail, size_t n)
{
    writer_t *w = ctx;
    (void)n;
    pthread_mutex_lock(&w->done_mu);
    if (w->done_tail) {
        w->done_tail->next = head;
    } else {
        w->done_head = head;
    }
    w->done_tail = tail;
    pthread_mutex_unlock(&w->done_mu);
    event_active(w->done_ev, EV_READ, 0);
}

int writer_start(writer_t *w, char *err, size_t errlen)
{
    if (w->opts->sync) {
        w->syncer = syncer_new(w->opts->path, post_synced, w);
        if (syncer_start(w->syncer, err, errlen) != 0) {
            syncer_stop(w->syncer);
            w->syncer = NULL;
            return -1;
        }
    }
    int rc = pthread_create(&w->thread, NULL, writer_main, w);
    if (rc != 0) {
        snprintf(err, errlen, "cannot start the storage thread: %s", strerror(rc));
        return -1;
    }
    w->started = 1;
    return 0;
}

void writer_set_wake_budget(writer_t *w, uint64_t budget, uint64_t one_message)
{
    w->wake_budget = budget;
    w->wake_one_message = one_message;
}

void writer_note_client_memory(writer_t *w, uint64_t held, uint64_t woken_delivered)
{
    pthread_mutex_lock(&w->done_mu);
    w->sweep_held = held;
    w->sweep_woken_delivered = woken_delivered;
    pthread_mutex_unlock(&w->done_mu);
}

/* Free space needed before writes resume (and the reserve is written again). */
static uint64_t disk_resume_bytes(const writer_t *w)
{
    return w->disk_reserve ? 2 * w->disk_reserve : DISK_MIN_FREE;
}

void writer_set_disk_reserve(writer_t *w, uint64_t bytes)
{
    char err[512];
    w->disk_reserve = bytes;
    uint64_t free_bytes = diskguard_free_bytes(w->opts->path);
    w->stats.disk_free_bytes = free_bytes;
    if (bytes == 0) {
        diskguard_ballast_create(w->opts->path, 0, NULL, 0);
        return;
    }
    if (free_bytes != UINT64_MAX && free_bytes < disk_resume_bytes(w)) {
        w->disk_full = 1;
        w->stats.disk_full = 1;
        w->stats.disk_full_events++;
        log_error("disk full: %llu bytes free on %s, less than twice disk-reserve (%llu); writes are refused "
                  "until space returns",
                  (unsigned long long)free_bytes, w->opts->path, (unsigned long long)bytes);
        return;
    }
    if (diskguard_ballast_create(w->opts->path, bytes, err, sizeof err) != 0) {
        log_warn("%s; running without a disk reserve", err);
    }
}

void writer_submit(writer_t *w, job_t *j)
{
    j->next = NULL;
    pthread_mutex_lock(&w->mu);
    if (w->q_tail) {
        w->q_tail->next = j;
    } else {
        w->q_head = j;
    }
    w->q_tail = j;
    int was_empty = w->q_len++ == 0;
    atomic_fetch_add(&w->nqueued, 1);
    pthread_mutex_unlock(&w->mu);
    if (was_empty) {
        pthread_cond_signal(&w->cond);
    }
}

void writer_cancel(writer_t *w, uint64_t conn_id)
{
    job_t *j = xmalloc(sizeof *j);
    memset(j, 0, sizeof *j);
    resp_buf_init(&j->reply);
    j->kind = JOB_CANCEL_KIND;
    j->conn_id = conn_id;
    writer_submit(w, j);
}

void writer_stop(writer_t *w)
{
    pthread_mutex_lock(&w->mu);
    w->stop_requested = 1;
    pthread_mutex_unlock(&w->mu);
    pthread_cond_signal(&w->cond);
}

void writer_free(writer_t *w)
{
    if (w == NULL) {
        return;
    }
    if (w->started) {
        pthread_join(w->thread, NULL);
    }
    syncer_stop(w->syncer); /* when the thread never ran: nothing queued */
    w->syncer = NULL;
    job_t *j = w->done_head;
    while (j) {
        job_t *n = j->next;
        job_free(j);
        j = n;
    }
    j = w->q_head;
    while (j) {
        job_t *n = j->next;
        job_free(j);
        j = n;
    }
    if (w->sched) {
        sched_free(w->sched);
    }
    backup_free(w->backup); /* its snapshot belongs to the store */
    if (w->store) {
        store_close(w->store, NULL, 0);
    }
    parked_free(&w->parked);         /* empty once the thread ran: stopping expires every parked job */
    map_free(&w->fair_queues, free); /* empty too: stopping runs every queued job */
    map_free(&w->deferred_topics, NULL);
    event_free(w->done_ev);
    pthread_mutex_destroy(&w->mu);
    pthread_cond_destroy(&w->cond);
    pthread_mutex_destroy(&w->done_mu);
    free(w);
}

int writer_healthy(writer_t *w, char *why, size_t whylen)
{
    if (atomic_load(&w->broken)) {
        pthread_mutex_lock(&w->done_mu);
        snprintf(why, whylen, "storage broken: %s", w->broken_msg);
        pthread_mutex_unlock(&w->done_mu);
        return 0;
    }
    size_t queued = atomic_load(&w->nqueued);
    uint64_t hb = atomic_load(&w->heartbeat_mono), now = clock_mono_ms();
    if (queued > 0 && now > hb + STALL_MS) {
        snprintf(why, whylen, "storage thread made no progress for %llu ms with %zu jobs queued",
                 (unsigned long long)(now - hb), queued);
        return 0;
    }
    snprintf(why, whylen, "ok");
    return 1;
}

size_t writer_queued(writer_t *w)
{
    return atomic_load(&w->nqueued);
}

size_t writer_parked(writer_t *w)
{
    return atomic_load(&w->nparked);
}

static void done_cb(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    writer_t *w = arg;
    pthread_mutex_lock(&w->done_mu);
    job_t *j = w->done_head;
    w->done_head = w->done_tail = NULL;
    int stopped = w->stopped;
    pthread_mutex_unlock(&w->done_mu);
    while (j) {
        job_t *n = j->next;
        j->next = NULL;
        w->on_done(j, w->ctx);
        j = n;
    }
    if (stopped == 1) {
        pthread_mutex_lock(&w->done_mu);
        w->stopped = 2; /* report once */
        pthread_mutex_unlock(&w->done_mu);
        w->on_stopped(w->ctx);
    }
}

/* ---- storage thread --------------------------------------------------------- */

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
    return disk_resume_bytes(w);
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
 * is rebuilt from disk). On failure the store stays NULL and jobs are
 * answered with the error until a later attempt succeeds. */
static void reopen_store(writer_t *w, const char *why)
{
    if (w->store != NULL) {
        log_error("storage failure: %s; reopening %s", why, w->opts->path);
        set_broken(w, why);
        sched_free(w->sched);
        w->sched = NULL;
        backup_stop(w->backup); /* its snapshot belongs to the store */
        store_close(w->store, NULL, 0);
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
    if (store_open(&o, &w->store, err, sizeof err) != 0) {
        w->store = NULL;
        log_error("cannot reopen the store: %s", err);
        set_broken(w, err);
        if (diskguard_is_full_error(err)) {
            w->reopen_failed_free = free_bytes == UINT64_MAX ? 1 : free_bytes + 1;
        }
        return;
    }
    w->reopen_failed_free = 0;
    w->wake_all = 1; /* a new store: its marks of what changed before are gone */
    w->sched = sched_new(w->store, NULL, NULL);
    w->stats.reopens++;
    atomic_store(&w->broken, 0);
    log_info("store %s reopened", w->opts->path);
}

/* The budget of PULL BLOCK replies (writer_set_wake_budget): conn_sweep.c leaves
 * a PULL BLOCK's reply estimate out of the client memory it counts (it
 * waits holding nothing), so its reply is budgeted here, before it is
 * built, whether it runs at once or woken. Room for j: 1 with
 * j->reply_cap set (0: no budget, or more room than it could use), or 0
 * when less than one message is left (j waits parked; its topic is noted
 * and asked again after WAKE_RETRY_MS). */
static int wake_reserve(writer_t *w, job_t *j)
{
    j->reply_cap = 0;
    if (w->wake_budget == 0 || j->reply_estimate == 0 || !j->block_set) {
        return 1;
    }
    pthread_mutex_lock(&w->done_mu);
    uint64_t held = w->sweep_held, delivered = w->sweep_woken_delivered;
    pthread_mutex_unlock(&w->done_mu);
    uint64_t in_flight = w->woken_built - delivered; /* delivered <= built: counted by the loop after posting */
    uint64_t out = held + in_flight;
    uint64_t room = out < w->wake_budget ? w->wake_budget - out : 0;
    /* Less than one message of room waits while a budgeted reply is on its way to the loop (its memory will be
     * counted, and the sweep may close a holder); with none on its way one reply of a message goes (else a
     * budget below one message, or clients holding it all, would stall every PULL BLOCK). */
    if (room < w->wake_one_message && in_flight > 0) {
        w->stats.wake_deferrals++;
        if (j->wake_topic != NULL) {
            map_put(&w->deferred_topics, j->wake_topic, j->wake_topic_len, w);
        } else {
            w->deferred_any = 1;
        }
        return 0;
    }
    uint64_t cap = room > w->wake_one_message ? room - w->wake_one_message : 1; /* a listing passes its budget
                                                                                  by one message at most */
    if (cap < (uint64_t)j->reply_estimate) {
        j->reply_cap = cap;
    }
    return 1;
}

/* After j ran: a budgeted reply is counted until the loop has it. */
static void count_budgeted(writer_t *w, job_t *j)
{
    if (w->wake_budget != 0 && j->block_set && j->reply_estimate > 0) {
        j->woken_bytes = j->reply.raw.len;
        w->woken_built += j->woken_bytes;
    }
}

/* Run j: it ends in done, parked, or (JOB_AGAIN, returned) with the caller. */
static job_result_t run_exec(writer_t *w, job_t *j, job_list_t *done, uint64_t now_mono)
{
    if (w->store == NULL) {
        char msg[600];
        pthread_mutex_lock(&w->done_mu);
        snprintf(msg, sizeof msg, "store unavailable: %s", w->broken_msg);
        pthread_mutex_unlock(&w->done_mu);
        fail_job(j, msg);
        list_push(done, j);
        return JOB_DONE;
    }
    if (w->disk_full && !j->reads_only) {
        answer_error(j, "disk full: writes are refused until space returns on ", w->opts->path);
        w->stats.disk_full_refusals++;
        list_push(done, j);
        return JOB_DONE;
    }
    if (!wake_reserve(w, j)) { /* no client memory for a PULL BLOCK's reply yet: it waits parked */
        park(w, j, now_mono);
        return JOB_PARK;
    }
    job_result_t r = j->exec(j, w);
    if (r == JOB_AGAIN) {
        return r; /* not answered yet: its promise is made by the step that finishes it */
    }
    w->batch_durable |= j->durable;
    if (r == JOB_PARK && j->block_set) {
        park(w, j, now_mono);
        return JOB_PARK;
    }
    count_budgeted(w, j);
    list_push(done, j);
    return JOB_DONE;
}

static void cancel_parked(writer_t *w, uint64_t conn_id)
{
    parked_list_t *l = parked_of_conn(&w->parked, conn_id);
    while (l != NULL) {
        job_t *j = l->head;
        int last = j->conn_next == NULL; /* unpark frees l with its last job */
        unpark(w, j);
        job_free(j);
        w->stats.closed_jobs_dropped++;
        if (last) {
            break;
        }
    }
}

/* ---- fair share: one queue per connection, served round-robin ------------------ */

static void commit_pending(writer_t *w, job_list_t *done);

static void ring_insert(writer_t *w, conn_queue_t *q)
{
    if (w->ring == NULL) {
        q->ring_next = q->ring_prev = q;
        w->ring = q;
        return;
    }
    q->ring_next = w->ring; /* last in the round that starts at w->ring */
    q->ring_prev = w->ring->ring_prev;
    q->ring_prev->ring_next = q;
    w->ring->ring_prev = q;
}

/* Take an empty q out of the ring and free it. */
static void fair_queue_drop(writer_t *w, conn_queue_t *q)
{
    if (q->ring_next == q) {
        w->ring = NULL;
    } else {
        q->ring_prev->ring_next = q->ring_next;
        q->ring_next->ring_prev = q->ring_prev;
        if (w->ring == q) {
            w->ring = q->ring_next;
        }
    }
    map_del(&w->fair_queues, &q->conn_id, sizeof q->conn_id);
    free(q);
}

/* A listing builds a reply of up to reply_estimate bytes (writer.h). */
static int is_listing(const job_t *j)
{
    return j->reply_estimate > 0;
}

/* Its connection closed and nobody will read its reply: it may be dropped
 * unanswered when running it changes nothing, or when it is a PULL … BLOCK
 * not run yet — a blocked client that leaves gets nothing leased, whether
 * its PULL had parked (cancel_parked) or was still queued behind other work
 * (the loop counts it blocked from the moment it is submitted). */
static int droppable(const job_t *j)
{
    return (j->reads_only || j->block_set) && j->audit == NULL && j->complete == NULL;
}

/* A connection closed: drop its parked jobs and its queued droppable ones
 * (a client closed for not reading its listings costs no more storage
 * work). Its other queued writes still run: their outcome is durable either
 * way. */
static void cancel_conn(writer_t *w, uint64_t conn_id)
{
    cancel_parked(w, conn_id);
    conn_queue_t *q = map_get(&w->fair_queues, &conn_id, sizeof conn_id);
    if (q == NULL) {
        return;
    }
    job_list_t keep = { 0 };
    while (q->jobs.head != NULL) {
        job_t *j = list_pop(&q->jobs);
        if (droppable(j)) {
            w->fair_queued--;
            atomic_fetch_sub(&w->nqueued, 1);
            job_free(j);
            w->stats.closed_jobs_dropped++;
        } else {
            list_push(&keep, j);
        }
    }
    q->jobs = keep;
    if (q->jobs.head == NULL) {
        fair_queue_drop(w, q);
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
        conn_queue_t *q = map_get(&w->fair_queues, &j->conn_id, sizeof j->conn_id);
        if (q == NULL) {
            q = xcalloc(1, sizeof *q);
            q->conn_id = j->conn_id;
            map_put(&w->fair_queues, &q->conn_id, sizeof q->conn_id, q);
            ring_insert(w, q);
        }
        list_push(&q->jobs, j);
        w->fair_queued++;
    }
}

/* Run queued jobs round-robin, one per connection per turn, until every
 * queue is empty or holds only listings and this iteration's listings built
 * FAIR_LISTING_BYTES (the file comment). Returns the number run. */
static size_t fair_serve(writer_t *w, job_list_t *done, uint64_t now_mono)
{
    size_t njobs = 0, listing_bytes = 0;
    for (int ran = 1; ran && w->ring != NULL;) {
        ran = 0;
        conn_queue_t *q = w->ring;
        for (size_t k = 0, turns = map_count(&w->fair_queues); k < turns && w->ring != NULL; k++) {
            conn_queue_t *next = q->ring_next;
            job_t *j = q->jobs.head;
            int stepped = j->again_iteration == w->iteration; /* a step per iteration: see JOB_AGAIN */
            if (!stepped && (!is_listing(j) || listing_bytes < FAIR_LISTING_BYTES)) {
                list_pop(&q->jobs);
                w->fair_queued--;
                atomic_fetch_sub(&w->nqueued, 1);
                if (run_exec(w, j, done, now_mono) == JOB_AGAIN) {
                    j->again_iteration = w->iteration; /* back at the head of its connection's queue */
                    list_push_front(&q->jobs, j);
                    w->fair_queued++;
                    atomic_fetch_add(&w->nqueued, 1);
                }
                if (is_listing(j)) {
                    listing_bytes += j->reply.raw.len > 0 ? j->reply.raw.len : 1;
                }
                njobs++;
                ran = 1;
                w->ring = next; /* the next turn goes to the next connection */
                if (q->jobs.head == NULL) {
                    fair_queue_drop(w, q);
                }
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

/* Ask each job of l whether it may run now; run it and answer it if so,
 * within the budget of woken replies: once that is spent, the rest of l
 * waits (its topic is asked again after WAKE_RETRY_MS). l may be freed when
 * its last job leaves it. */
static void retry_list(writer_t *w, parked_list_t *l, job_list_t *done)
{
    for (job_t *j = l->head, *n; j; j = n) {
        n = j->topic_next;
        if (!j->wake(j, w)) {
            continue;
        }
        if (!wake_reserve(w, j)) {
            return;
        }
        if (j->exec(j, w) == JOB_DONE) {
            count_budgeted(w, j);
            unpark(w, j);
            list_push(done, j);
        }
    }
}

typedef struct woken_ctx {
    writer_t *w;
    job_list_t *done;
} woken_ctx_t;

static void retry_topic(void *arg, const char *topic, size_t topic_len)
{
    woken_ctx_t *c = arg;
    parked_list_t *l = parked_of_topic(&c->w->parked, topic, topic_len);
    if (l != NULL) {
        retry_list(c->w, l, c->done);
    }
}

static void ignore_topic(void *arg, const char *topic, size_t topic_len)
{
    (void)arg;
    (void)topic;
    (void)topic_len;
}

/* Parked jobs: expire those past their deadline (every one when expire_all),
 * retry those of the topics the store marked since the last time (every one
 * after a reopen or a disk-full episode) whose wake() says so. */
static void service_parked(writer_t *w, job_list_t *done, uint64_t now_mono, int expire_all)
{
    if (expire_all) {
        map_iter_t it = { 0 };
        void *val;
        while (map_next(&w->parked.conns, &it, NULL, NULL, &val)) {
            parked_list_t *l = val;
            while (l != NULL) {
                job_t *j = l->head;
                int last = j->conn_next == NULL;
                unpark(w, j);
                j->expire(j, w);
                list_push(done, j);
                if (last) {
                    break;
                }
            }
        }
    }
    for (job_t *j; (j = parked_next_deadline(&w->parked)) != NULL && j->deadline_mono <= now_mono;) {
        unpark(w, j);
        j->expire(j, w);
        list_push(done, j);
    }
    if (w->store == NULL || w->disk_full) {
        return;
    }
    map_t deferred = w->deferred_topics; /* their woken jobs waited for client memory: asked again below */
    map_init(&w->deferred_topics);
    if (w->wake_all) {
        w->wake_all = 0;
        store_take_woken(w->store, ignore_topic, NULL);
        map_iter_t it = { 0 };
        void *val;
        while (map_next(&w->parked.topics, &it, NULL, NULL, &val)) {
            retry_list(w, val, done); /* may delete the entry just returned: allowed */
        }
    } else {
        woken_ctx_t woken = { w, done };
        store_take_woken(w->store, retry_topic, &woken);
    }
    map_iter_t it = { 0 };
    const char *topic;
    size_t len;
    woken_ctx_t c = { w, done };
    while (map_next(&deferred, &it, &topic, &len, NULL)) {
        retry_topic(&c, topic, len);
    }
    map_free(&deferred, NULL);
    w->deferred_any = 0;
    retry_list(w, &w->parked.any, done);
}

static uint64_t earliest_parked_deadline(writer_t *w)
{
    const job_t *first = parked_next_deadline(&w->parked);
    uint64_t at = first != NULL ? first->deadline_mono : UINT64_MAX;
    if ((map_count(&w->deferred_topics) > 0 || w->deferred_any) && w->store != NULL && !w->disk_full) {
        uint64_t retry = clock_mono_ms() + WAKE_RETRY_MS;
        at = retry < at ? retry : at;
    }
    return at;
}

static uint64_t ms_to_us(uint64_t ms)
{
    return ms == UINT64_MAX ? UINT64_MAX : ms * 1000;
}

/* Monotonic time (µs) of the next thing to do when no job arrives. A due
 * time is a wall-clock millisecond: the wake-up is the start of that
 * millisecond to the microsecond (not a truncated millisecond of the
 * monotonic clock, which could wake almost 1 ms late or early). */
static uint64_t next_wakeup_us(writer_t *w, uint64_t now_us)
{
    uint64_t best = ms_to_us(earliest_parked_deadline(w));
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
        uint64_t due_us = wall_next * 1000, now_wall = clock_wall_us();
        uint64_t at = due_us <= now_wall ? now_us : now_us + (due_us - now_wall);
        if (at < best) {
            best = at;
        }
    }
    uint64_t maint = w->maintain_needed ? w->last_job_mono + MAINTAIN_IDLE_MS : w->next_periodic_mono;
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
        list_push(needs ? &wait : &keep, j);
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
static void commit_pending(writer_t *w, job_list_t *done)
{
    if (w->store == NULL) {
        return;
    }
    char err[512];
    int pending = store_pending(w->store);
    uint64_t t0 = clock_mono_us();
    int rc = store_commit_durable(w->store, w->syncer ? 0 : w->batch_durable, err, sizeof err);
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
        if (diskguard_is_full_error(err) && !w->disk_full) {
            uint64_t released = diskguard_ballast_release(w->opts->path);
            w->disk_full = 1;
            w->stats.disk_full = 1;
            w->stats.disk_full_events++;
            w->next_disk_check_mono = clock_mono_ms() + DISK_CHECK_MS;
            log_error("disk full: %s; writes are refused until %llu bytes are free (released the %llu-byte disk "
                      "reserve so that the store can reopen)",
                      err, (unsigned long long)disk_resume_bytes(w), (unsigned long long)released);
        }
        reopen_store(w, err);
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
 * full and once free space is back above disk_resume_bytes, write the
 * reserve again and let writes through. */
static void check_disk(writer_t *w, uint64_t now_mono)
{
    if (now_mono < w->next_disk_check_mono) {
        return;
    }
    w->next_disk_check_mono = now_mono + DISK_CHECK_MS;
    uint64_t free_bytes = diskguard_free_bytes(w->opts->path);
    w->stats.disk_free_bytes = free_bytes; /* for INFO and /metrics, also while not full */
    if (!w->disk_full || w->store == NULL || free_bytes == UINT64_MAX || free_bytes < disk_resume_bytes(w)) {
        return;
    }
    char err[512];
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

static void *writer_main(void *arg)
{
    writer_t *w = arg;
    job_list_t done = { 0 };
    int more = 0;
    w->next_periodic_mono = clock_mono_ms() + MAINTAIN_PERIOD_MS;
    for (;;) {
        pthread_mutex_lock(&w->mu);
        while (w->q_head == NULL && w->fair_queued == 0 && !w->stop_requested && !more) {
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
            reopen_store(w, why); /* an fsync failed: what the kernel holds is suspect */
        }
        if (w->store == NULL) {
            reopen_store(w, "reopen pending");
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
        if (w->store != NULL && !w->disk_full && sched_next_wakeup(w->sched) <= sched_now(w->sched)) {
            sched_stats_t st = { 0 };
            char err[512];
            if (sched_run(w->sched, SCHED_CHUNK, &st, &more, err, sizeof err) != 0) {
                log_error("scheduler: %s", err);
                more = 0;
            }
            w->stats.moved += st.moved;
            w->stats.made_ready += st.ready;
            w->stats.lease_expiries += st.expired;
            w->stats.retries += st.retried;
            w->stats.dlq_moves += st.dead;
        }

        /* 3. parked jobs: deadlines and wake-ups */
        service_parked(w, &done, clock_mono_ms(), stopping);

        /* 4. commit the scheduler's and parked jobs' writes (usually nothing), then the replies */
        commit_pending(w, &done);
        post(w, &done, 0);

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
                    w->maintain_needed = 0;
                    w->next_periodic_mono = now_mono + MAINTAIN_PERIOD_MS;
                }
            }
        }

        if (stopping) {
            pthread_mutex_lock(&w->mu);
            int empty = w->q_head == NULL && w->fair_queued == 0;
            pthread_mutex_unlock(&w->mu);
            if (empty) {
                break;
            }
        }
    }
    /* The last syncs and their replies, then close the store here, on its
     * own thread, before telling the loop. */
    syncer_stop(w->syncer);
    w->syncer = NULL;
    backup_stop(w->backup); /* a copy still running is stopped: its snapshot belongs to the store */
    if (w->store != NULL) {
        char err[512];
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
