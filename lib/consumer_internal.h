/*
 * lib/consumer_internal.h — the insides of a consumer, shared by its files
 * only: lib/consumer.c (helpers, creation), consumer_worker.c,
 * consumer_watchdog.c and consumer_run.c. The rest of the library and the tests use
 * lib/consumer.h; applications see an opaque hg_consumer_t.
 *
 * Threads and what guards what are described at the top of lib/consumer.c:
 * a worker's inflight[] is guarded by its lock, the counters are atomics,
 * last_error is guarded by err_lock, and everything else is set before the
 * threads start and only read while they run.
 */
#ifndef HG_LIB_CONSUMER_INTERNAL_H
#define HG_LIB_CONSUMER_INTERNAL_H

#include "include/hourglass/hourglass.h"
#include "lib/transport.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

typedef struct inflight {
    char id[HG_ID_MAX];
    uint64_t renewed_ms; /* monotonic ms of the last lease renewal */
    int active;          /* 1 while the worker holds it */
} inflight_t;

typedef struct worker {
    hg_consumer_t *owner;
    int index;
    pthread_t thread;
    int started;
    hg_client_t *client;
    unsigned connects;      /* client_connect_count seen last (reconnect stat) */
    pthread_mutex_t lock;   /* guards inflight[] */
    inflight_t *inflight;   /* opts.count slots */
    hg_batch_item_t *batch; /* opts.count items, with a batch handler */
} worker_t;

struct hg_consumer {
    hg_consumer_opts_t opts;      /* strings point to the copies below */
    hg_client_opts_t client_opts; /* user and password point to the copies below */
    char *uri, *group, *topic;
    char *user, *password; /* copies of opts.client's (NULL when unset); the password wiped at free */
    uint32_t touch_ms;     /* effective touch interval, 0 = never */
    char lease_text[16];   /* lease_ms as decimal, for PULL and TOUCH */

    atomic_int stop;
    atomic_int fatal;            /* an hg_err_t that stopped the consumer for good (AUTH refused, NOPERM), else 0 */
    int wake_pipe[2];            /* stop: readable once written */
    int watchdog_pipe[2];        /* stops the watchdog after the workers */
    int stop_fd;                 /* hg_consumer_set_stop_fd: -1, or the stop fd of every client */
    hg_conn_event_fn conn_event; /* hg_consumer_set_conn_event_fn: NULL, or told of every
                                    (re)connect, PULL refusal and end of one */
    void *conn_event_arg;
    int ran;

    worker_t *workers;
    pthread_t watchdog;
    int watchdog_started;
    hg_client_t *watchdog_client;

    atomic_uint_fast64_t delivered, done, retried, nacked, failed, touched, lease_lost, errors, reconnects;

    /* PULL health (hg_consumer_pull_failing_ms): how many workers' last PULL
     * failed, and since when (monotonic ms, 0: not all) every one's has. */
    atomic_int pulls_failing;
    atomic_uint_fast64_t all_failing_since_ms;

    pthread_mutex_t err_lock; /* guards last_error */
    hg_error_t last_error;

    const transport_ops_t *tops; /* NULL: RESP; else the URI's transport */
    void *helper;                /* its helper while running (lib/transport.h) */
};

/* Add 1 to a stats counter (relaxed). Any thread. */
void consumer_count(atomic_uint_fast64_t *counter);

/* 1 once hg_consumer_stop was called (acquire). Any thread. */
int consumer_stopping(const hg_consumer_t *c);

/* Log a printf line at level (0 error, 1 warning, 2 info) through
 * opts.log, when set. Any thread. */
void consumer_log(hg_consumer_t *c, int level, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* Count an error, keep it as the last error and log it. who: "worker 2".
 * Any thread. */
void consumer_record_error(hg_consumer_t *c, const char *who, hg_err_t code, const char *what, const char *msg);

/* Count the connections client made since *seen (the first one is not a
 * reconnect), tell c->conn_event and log it. Called by the thread that owns
 * the client. */
void consumer_note_connects(hg_consumer_t *c, hg_client_t *client, unsigned *seen, const char *who);

/* The broker refused a worker's PULL with an error reply, the first since
 * that worker's last answered PULL (or its start): tell c->conn_event
 * (HG_CONN_REFUSED), before the refusal is logged. Called by the worker, once
 * per such start of refusals. */
void consumer_note_refused(hg_consumer_t *c, hg_client_t *client, const char *who);

/* A worker's PULL was answered after the broker refused its PULLs with an
 * error reply: tell c->conn_event (HG_CONN_ANSWERED) and log it at info.
 * Called by the worker, once per such end of refusals. */
void consumer_note_answered(hg_consumer_t *c, hg_client_t *client, const char *who);

/* Forget id in w's inflight[] (the watchdog stops renewing it). Takes
 * w->lock: the worker or the watchdog. */
void consumer_inflight_remove(worker_t *w, const char *id);

/* 1 when w still holds id in its inflight[]. Takes w->lock. */
int consumer_inflight_holds(worker_t *w, const char *id);

/* The thread of worker arg (a worker_t *): PULL, handle, settle, until a
 * stop (lib/consumer_worker.c). Returns NULL. */
void *consumer_worker_main(void *arg);

/* The watchdog thread (arg: the hg_consumer_t *): renews the leases the
 * workers hold until watchdog_pipe is written (lib/consumer_watchdog.c).
 * Returns NULL. */
void *consumer_watchdog_main(void *arg);

#endif
