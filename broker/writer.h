/*
 * broker/writer.h — the storage thread: owns the store and the scheduler,
 * runs storage jobs in groups and commits each group once (group commit).
 *
 * The event loop turns every command that touches the store into a job_t and
 * submits it. The storage thread takes ALL queued jobs at once, runs them
 * (their writes join the store's pending batch) — each connection's in its
 * order, round-robin between connections, listings (jobs with a
 * reply_estimate) limited to a few MiB of replies per iteration so that a
 * SEND never waits behind every listing other clients queued — runs due scheduler
 * work, retries parked jobs that may now succeed, then commits once — synced
 * under `fsync always` — and only then posts the jobs back to the loop, whose
 * callback sends the replies. While one group syncs, the loop keeps reading
 * and queueing the next one. So a SEND's id reaches the client only after the
 * message is durable, and N pipelined SENDs cost one fsync. A group whose
 * writes reach STORE_BATCH_MAX_BYTES (a burst of large SENDs) is committed
 * and answered in several batches of about that size.
 *
 * Under `fsync always` the fsync itself runs on a second thread (syncer.h):
 * the storage thread writes each group unsynced and goes on with due moves
 * and the next group while the disk syncs; the replies that need durability
 * are posted by the syncer once the fsync that covers them returned.
 *
 * Timers, not polling: between groups the thread sleeps on a condition
 * variable until min(next level head / lease deadline, the earliest parked
 * job's deadline, maintenance), or until a job arrives.
 *
 * A job may PARK (PULL BLOCK with nothing ready): the writer keeps it, asks
 * its wake() whether trying again is worthwhile (an in-memory check) after a
 * group that marked its wake_topic (store_take_woken), re-runs exec() then,
 * and calls expire() at its deadline. Parked jobs are indexed by wake_topic,
 * by connection and by deadline, so an iteration costs nothing per parked job
 * whose topic got nothing (10 000 blocked PULLs used to add ~0.3 ms to every
 * SEND). writer_cancel() drops the parked jobs of a closed connection and
 * its queued jobs that change nothing (no reply; INFO closed_jobs_dropped).
 *
 * Threads: writer_new/start/submit/cancel/stop/free and the done callback run
 * on the loop thread; exec/wake/expire and the accessors marked "storage
 * thread" run on the storage thread. complete() runs on the loop thread.
 */
#ifndef HG_BROKER_WRITER_H
#define HG_BROKER_WRITER_H

#include <stddef.h>
#include <stdint.h>

#include <event2/event.h>

#include "broker/backup.h"
#include "broker/metrics.h"
#include "levels/sched.h"
#include "levels/store.h"
#include "proto/reply.h"

typedef struct writer writer_t;
typedef struct job job_t;

typedef enum job_result {
    JOB_DONE = 0, /* reply written: post it */
    JOB_PARK = 1, /* nothing to do yet: keep it (see wake/expire) */
    JOB_AGAIN = 2 /* one bounded step of a long command done (DLQ REQUEUE/DROP ALL), its writes committed or
                     pending: run it again in the next iteration, after the other connections' jobs, the
                     commit, the scheduler and the parked jobs (its connection's later jobs wait behind it).
                     It must finish (JOB_DONE) once writer_stopping says so. */
} job_result_t;

#define JOB_CANCEL_KIND 1 /* internal: drop parked jobs of conn_id */

struct job {
    job_t *next, *prev; /* owned by whoever holds the job */
    /* Storage thread: do the work, write the reply into reply (protocol
     * `proto`). May return JOB_PARK only when block_ms was set by its owner
     * (block_set). */
    job_result_t (*exec)(job_t *j, writer_t *w);
    /* Storage thread, parked jobs: 1 when exec may now succeed. */
    int (*wake)(job_t *j, writer_t *w);
    /* Storage thread: the parked job's deadline passed: write its timeout reply. */
    void (*expire)(job_t *j, writer_t *w);
    /* Loop thread, optional: runs on completion before the reply is used. */
    void (*complete)(job_t *j);
    /* Storage thread, optional, for a job that steps (JOB_AGAIN): what its
     * steps did so far ("512 of the DLQ of group 'g' were requeued"; "" before
     * any). Every error that ends it early says it (writer_steps_suffix): the
     * writer's refusal of a later step (the disk filled, the store went
     * away), a storage error, the broker stopping. */
    void (*so_far)(const job_t *j, char *buf, size_t len);
    uint64_t conn_id;       /* the connection the reply goes to (0: none) */
    uint64_t seq;           /* its reply slot */
    int proto;              /* RESP_PROTO_2 / RESP_PROTO_3 for the reply */
    int kind;               /* 0, or JOB_CANCEL_KIND */
    int failed;             /* set by the writer: the reply is an error it wrote */
    int durable;            /* 1: its batch is fsynced before the reply (CMD_DURABLE) */
    uint64_t max_id;        /* set by exec: the largest message id its reply shows (PULL), 0: none;
                               the reply waits for the fsync that makes that id durable (syncer.h) */
    int block_set;          /* 1: may park */
    uint64_t block_ms;      /* with block_set: how long; 0 = forever */
    const char *wake_topic; /* with block_set: the topic whose new ready messages may let it run (PULL's);
                               wake() is asked only after the store marked it (store_take_woken).
                               NULL: wake() is asked after every iteration */
    size_t wake_topic_len;
    uint64_t deadline_mono;         /* parked.h's: parked deadline (monotonic ms), 0 = none */
    int parked;                     /* parked.h's: 1 while in the parked set */
    job_t *topic_next, *topic_prev; /* parked.h's: the parked jobs of one wake_topic */
    job_t *conn_next, *conn_prev;   /* parked.h's: the parked jobs of one connection */
    size_t heap_pos;                /* parked.h's: 1 + its place in the deadline heap, 0: none */
    uint64_t again_iteration;       /* writer-private: the iteration in which it last returned JOB_AGAIN */
    resp_buf_t reply;               /* the reply bytes (RESP), or text for complete() */
    char *audit;                    /* loop thread, audited commands (cmd_table.c): who ran what; NULL: not audited */
    char audit_result[192];         /* storage thread, optional: what it changed ("" = summarised from the reply) */
    size_t reply_estimate;          /* set by listing commands: the most its reply may hold (conn_request.c) */
    size_t carried_bytes;           /* request bytes it carries besides its own command's (EXEC: the queued
                                       SENDs'), charged to the connection like them (conn_request.c) */
    uint64_t reply_cap;             /* set by the writer for a PULL BLOCK: the payload bytes its reply may take (the
                               client memory left, writer_set_wake_budget); 0: the configured max-pull-bytes */
    size_t woken_bytes;             /* set by the writer: a PULL BLOCK's reply bytes, counted against the client memory
                               budget until conn_job_done has them (writer_note_client_memory) */
    int reads_only;                 /* 1: changes nothing (served while the disk is full); else refused then */
};

/* exec: j's reply shows message id, so it waits for the fsync that makes
 * id durable (max_id): no reply (PULL, GET, FIND, PEEK) shows a SEND that a
 * crash could still undo, before that SEND's own reply. */
static inline void job_shows(job_t *j, uint64_t id)
{
    if (id > j->max_id) {
        j->max_id = id;
    }
}

/* Called on the loop thread with each finished job; the callee owns it. */
typedef void (*writer_done_fn)(job_t *j, void *ctx);
/* Called on the loop thread once, after writer_stop's work is done. */
typedef void (*writer_stopped_fn)(void *ctx);

/* Free a job: its reply buffer and the job itself (one allocation). */
void job_free(job_t *j);

/* Create a writer for an open store (it takes ownership). opts (the one
 * store_options_t of the process, config_t.store) must outlive the writer;
 * it is used to reopen a store whose commit failed. Completions are delivered on
 * base's thread through done(). Never fails (aborts on out-of-memory). */
writer_t *writer_new(store_t *store, const store_options_t *opts, struct event_base *base, writer_done_fn done,
                     writer_stopped_fn stopped, void *ctx);

/* The disk reserve (broker/diskguard.h): bytes kept in DIR/BALLAST and given
 * back when the disk fills. Call before writer_start (main thread): it
 * writes the reserve when twice its size, and its size plus one commit-log
 * segment, are free, else the writer starts
 * with the disk full (writes refused until space returns; logged). 0: no
 * reserve (the disk is still watched after a disk-full failure). */
void writer_set_disk_reserve(writer_t *w, uint64_t bytes);

/* The budget of PULL BLOCK replies (call before writer_start). conn_sweep.c
 * does not count a PULL BLOCK's reply estimate as client memory (it waits
 * holding nothing), so a job with block_set and a reply_estimate builds its
 * reply, at once or woken, only within `budget` bytes minus what clients
 * hold (writer_note_client_memory) minus such replies not yet delivered: it
 * is shrunk to the room left (reply_cap), or left parked and tried again
 * shortly when less than one_message (the most one message adds to a
 * reply) is left and another such reply is on its way. So many PULLs woken
 * at once on a topic with gigabytes ready build about the budget between
 * them, instead of each its max-pull-bytes before the memory sweep closes
 * the largest holders. 0: no budget. */
void writer_set_wake_budget(writer_t *w, uint64_t budget, uint64_t one_message);

/* Loop thread (conn_sweep.c): clients hold `held` bytes now, and
 * `woken_delivered` bytes of woken replies (job_t.woken_bytes) reached the
 * loop so far (they are in `held` from now on, not in flight). */
void writer_note_client_memory(writer_t *w, uint64_t held, uint64_t woken_delivered);

/* Start the thread. 0, or -1 with the cause in err. */
int writer_start(writer_t *w, char *err, size_t errlen);

/* Queue a job (loop thread). The writer owns it until done() hands it back. */
void writer_submit(writer_t *w, job_t *j);

/* A connection closed (loop thread): its parked jobs, and its queued jobs
 * that change nothing or are PULL BLOCKs not run yet, are dropped unrun and
 * counted (storage_stats_t.closed_jobs_dropped); its other jobs still run. */
void writer_cancel(writer_t *w, uint64_t conn_id);

/* Ask the thread to finish: run every queued job, answer parked jobs with
 * their timeout reply, commit, close the store; then stopped() is called on
 * the loop thread. Submit nothing after this. */
void writer_stop(writer_t *w);

/* Join the thread (after stopped()) and free everything. */
void writer_free(writer_t *w);

/* Loop thread: 1 when the storage side is healthy, else 0 with the reason. */
int writer_healthy(writer_t *w, char *why, size_t whylen);

/* Loop thread: jobs queued (submitted and not yet run) and parked right now (approximate). */
size_t writer_queued(writer_t *w);
size_t writer_parked(writer_t *w);

/* ---- storage thread only --------------------------------------------------- */
store_t *writer_store(writer_t *w);
sched_t *writer_sched(writer_t *w);
storage_stats_t *writer_stats(writer_t *w);
backup_t *writer_backup(writer_t *w); /* BACKUP (broker/backup.h) */
/* Storage thread: " (<what j's steps did> before it, the rest are still there)"
 * into buf for an error that ends j early, or "" (no so_far hook, or
 * nothing done yet). Returns buf. */
const char *writer_steps_suffix(const job_t *j, char *buf, size_t len);
/* The free space writes stop under (and resume at): 2 x disk-reserve and at
 * least disk-reserve + one commit-log segment; without a reserve 16 MiB or
 * one segment. */
uint64_t writer_disk_floor(writer_t *w);
uint64_t writer_now(writer_t *w); /* wall-clock ms (the scheduler's clock) */
int writer_stopping(writer_t *w); /* 1: the broker is stopping: a job that steps (JOB_AGAIN) finishes now */

#endif
