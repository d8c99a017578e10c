/*
 * compensator/stats.h — the counters and gauges the layers write and
 * /metrics, /healthz and the alert checks read.
 *
 * One process-wide instance (comp_stats). Every number is a relaxed atomic:
 * each is exact on its own, a set read together is not one snapshot. The
 * per-layer last error is a string under a mutex. Writers: the layer
 * threads (or main with --once); readers: the metrics thread and the
 * monitor layer.
 */
#ifndef HG_COMPENSATOR_STATS_H
#define HG_COMPENSATOR_STATS_H

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "compensator/comp_config.h"

/* How one run of a layer ended. */
typedef enum comp_run_outcome {
    COMP_RUN_OK = 0,    /* did its work (perhaps none was due) */
    COMP_RUN_FAILED,    /* stopped by an error (database, broker); see last_error */
    COMP_RUN_SKIPPED,   /* inspection only: another instance holds the lock */
    COMP_RUN_LOCK_LOST, /* inspection only: the lock was lost mid-scan; resumed next round */
    COMP_RUN_OUTCOMES
} comp_run_outcome_t;

/* "ok", "failed", "skipped", "lock-lost". */
const char *comp_run_outcome_name(comp_run_outcome_t o);

/* Outcomes of the cancels a layer asked for (hg_order_cancel). */
enum {
    COMP_CANCEL_DONE,
    COMP_CANCEL_NOT_PENDING,
    COMP_CANCEL_NOT_FOUND,
    COMP_CANCEL_TRANSIENT,
    COMP_CANCEL_PERMANENT,
    COMP_CANCEL_LOCKED, /* skipped: another transaction held the order (batch cancels); retried next round */
    COMP_CANCEL_OUTCOMES
};
/* Layers that cancel: index into cancels[]. */
enum {
    COMP_CANCELLER_OVERDUE,
    COMP_CANCELLER_INSPECTION,
    COMP_CANCELLERS
};

/* Alert kinds (alerts.c, monitor.c). */
enum {
    COMP_ALERT_OVERDUE_PENDING,
    COMP_ALERT_DLQ_DEPTH,
    COMP_ALERT_LAYER_FAILING,
    COMP_ALERT_KINDS
};

typedef struct comp_layer_stats {
    atomic_uint_fast64_t runs[COMP_RUN_OUTCOMES];
    atomic_uint_fast64_t last_end_ms; /* wall-clock ms when the last run ended; 0: never ran */
    atomic_uint_fast64_t last_duration_us;
    atomic_int last_outcome; /* comp_run_outcome_t; -1 before the first run */
    atomic_uint_fast64_t consecutive_failures;
    /* /healthz's stuck check (monotonic ms + 1, so 0 means unset): when the
     * current round (or a keepalive between rounds) began, 0 while the layer
     * waits for its next round; and when its last step (a statement, a
     * transaction, a batch of sends, an alert command) ended. */
    atomic_uint_fast64_t busy_since_ms, progress_ms;
    pthread_mutex_t error_lock;
    char last_error[512]; /* of the last FAILED run ("" otherwise) */
} comp_layer_stats_t;

typedef struct comp_stats {
    comp_layer_stats_t layer[COMP_LAYER_COUNT];

    /* relay */
    atomic_uint_fast64_t relay_sent;           /* rows sent and marked 'sent' (committed) */
    atomic_uint_fast64_t relay_superseded;     /* rows sent whose order was paid or cancelled during the send */
    atomic_uint_fast64_t relay_send_failures;  /* rows whose send failed (attempts + 1, backoff) */
    atomic_uint_fast64_t relay_batches;        /* transactions that locked at least one row */
    atomic_uint_fast64_t relay_lease_overruns; /* batches whose sends took longer than their lease */

    /* cancels by layer and outcome */
    atomic_uint_fast64_t cancels[COMP_CANCELLERS][COMP_CANCEL_OUTCOMES];
    /* cancel transactions whose COMMIT's outcome was unknown (hg_order_db_commits_unknown), by layer */
    atomic_uint_fast64_t commit_unknown[COMP_CANCELLERS];
    atomic_uint_fast64_t outbox_closed; /* overdue rows of orders no longer pending, marked 'done' */

    /* inspection and its lock */
    atomic_uint_fast64_t scans_started, scans_completed, pages, rows_read;
    atomic_uint_fast64_t lock_acquired, lock_lost, lock_busy;
    atomic_int lock_held; /* 0 / 1 */
    atomic_int scanning;  /* 1 while a scan runs */

    /* monitor gauges (-1: not read yet or the last read failed) */
    atomic_int_fast64_t overdue_pending, overdue_oldest_seconds, outbox_unsent;
    atomic_int_fast64_t dlq_depth[COMP_MAX_DLQ_GROUPS];
    atomic_uint_fast64_t dlq_read_errors;

    /* alerts */
    atomic_uint_fast64_t alerts_fired[COMP_ALERT_KINDS], alerts_suppressed[COMP_ALERT_KINDS];
    atomic_int_fast64_t alerts_active[COMP_ALERT_KINDS]; /* subjects whose condition held at their last check */
    atomic_uint_fast64_t alert_command_failures;
} comp_stats_t;

extern comp_stats_t comp_stats;

/* Reset everything (gauges to -1). Call once before threads start. */
void comp_stats_init(void);

/* Record the end of one run of layer (0..COMP_LAYER_COUNT-1). error: the
 * cause of a FAILED run (may be NULL otherwise). */
void comp_stats_run_end(int layer, comp_run_outcome_t outcome, uint64_t duration_us, const char *error);

/* The layer (0..COMP_LAYER_COUNT-1) that the calling thread runs begins a
 * round, or a keepalive between rounds: busy from now, its progress now.
 * Remembered for the thread, so comp_progress needs no argument. */
void comp_stats_busy(int layer);

/* The calling thread's layer finished one step of its round (a statement,
 * a round trip of its cancel handle — any answer, a lock wait timeout
 * included —, a batch of sends, an alert command): progress now. Does
 * nothing on a thread that runs no layer (the tests drive layers directly). */
void comp_progress(void);

/* The layer waits for its next round: not busy (comp_stats_run_end does
 * this itself). */
void comp_stats_idle(int layer);

/* /healthz's bound for layer under cfg (ms): a busy layer whose last step
 * ended longer ago than this is stuck — MariaDB or the broker is not
 * answering. 5 s plus the longest one step may legitimately wait:
 * mysql-lock-wait-timeout (the server's 50 s when 0) for every layer; for the
 * relay and the monitor also broker-connect-timeout + 2 x broker-timeout (a
 * call retried once after a reconnect); for the monitor alert-command-timeout;
 * for the inspection inspect-page-pause on top. Pure. */
uint64_t comp_stats_stuck_after_ms(const comp_config_t *cfg, int layer);

/* When layer is stuck under cfg at monotonic time now_ms (clock_mono_ms):
 * 1 with *idle_ms (since the last step) and *round_ms (since the round
 * began), else 0. */
int comp_stats_stuck(const comp_config_t *cfg, int layer, uint64_t now_ms, uint64_t *idle_ms, uint64_t *round_ms);

/* Copy the last error of layer into buf. */
void comp_stats_last_error(int layer, char *buf, size_t len);

/* Relaxed atomic helpers. */
static inline void comp_count(atomic_uint_fast64_t *c, uint64_t n)
{
    atomic_fetch_add_explicit(c, n, memory_order_relaxed);
}
static inline uint64_t comp_load(atomic_uint_fast64_t *c)
{
    return atomic_load_explicit(c, memory_order_relaxed);
}
static inline void comp_gauge_set(atomic_int_fast64_t *g, int64_t v)
{
    atomic_store_explicit(g, v, memory_order_relaxed);
}
static inline int64_t comp_gauge_get(atomic_int_fast64_t *g)
{
    return atomic_load_explicit(g, memory_order_relaxed);
}

#endif
