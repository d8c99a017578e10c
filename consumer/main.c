/*
 * consumer/main.c — hourglass-consumer, the order-cancel worker.
 *
 * Reads order ids from a Hourglass topic (the delayed "order timeout"
 * messages) through libhourglass's consumer loop and cancels them: with
 * batch-size > 1 (the default) each PULL's orders together with
 * hg_order_cancel_batch (one transaction per batch-size orders, each order
 * claimed on its own row, a failing one isolated by halving), with
 * batch-size 1 each order with hg_order_cancel — one transaction, the claim
 * WHERE status='pending', the side effects only when the claim won
 * (DESIGN.md §5; docs/order-cancel.md).
 *
 *   message payload      the order id in decimal; anything else is a
 *                        permanent failure with the reason (NACK → DLQ)
 *   CANCELLED / NOT_PENDING / NOT_FOUND          → done (ACK)
 *   TRANSIENT (deadlock, lock wait, lost or killed connection …)
 *                        → retry: local backoff, then NACK (broker schedule)
 *   PERMANENT (SQL refused, constraint …)        → fail: NACK with the reason
 *
 * This file: the handler, its counters and /metrics, the start-up check of
 * the database, signals and main(). The configuration (key table, checks,
 * --help) is consumer/consumer_config.c; the bounded stop (the thread that
 * cuts the workers' handles after stop-grace) is common/stop_grace.h.
 * Logging is common/log.h; /metrics and /healthz are common/prom.h's
 * endpoint.
 *
 * Threads: the caller of hg_consumer_run (main) waits; the library's N
 * workers call handle_message, each with its own hg_order_db (slot
 * msg->worker, opened lazily on that worker's first message — one handle
 * per thread — and registered with the stop); the metrics thread
 * (common/prom.c) runs an evhttp server on its own event base; the stop
 * thread (common/stop_grace.c) waits for a stop.
 * Counters are relaxed atomics. SIGINT / SIGTERM call hg_consumer_stop and
 * stop_grace_request, both async-signal-safe; the workers finish the
 * messages in hand, and after stop-grace a worker still inside MariaDB has
 * its connection cut (its message never ACKed) and every call to the broker
 * ends at once — an ACK, a NACK, the watchdog's TOUCH, which a broker that
 * stopped answering would hold for the read timeout (the consumer's stop fd
 * is the stop's cut fd): what was not settled comes back after its lease.
 * SIGHUP is
 * blocked in every thread (before the first one starts) and taken with
 * sigwait by the reload thread, which re-reads the configuration
 * (reload_config: log-level, log-file and log-format are applied, other
 * changes wait for a restart);
 * it never stops the consumer.
 */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include <hourglass/hourglass.h>
#include <hourglass/order.h>

#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <event2/thread.h>

#include "base/alloc.h"
#include "common/cfg.h"
#include "common/log.h"
#include "common/passwd.h"
#include "common/prom.h"
#include "common/reload.h"
#include "common/stop_grace.h"
#include "consumer/consumer_config.h"
#include "consumer/health.h"
#include "base/clock.h"

/* ------------------------------------------------------------------ metrics */

static const double latency_bounds[] = {
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10
};
#define LATENCY_BUCKETS (sizeof latency_bounds / sizeof latency_bounds[0])

static struct counters {
    atomic_uint_fast64_t cancelled, not_pending, not_found, transient, permanent, bad_payload, db_unavailable;
    atomic_uint_fast64_t locked, transactions, splits;        /* batch cancels */
    atomic_uint_fast64_t latency_bucket[LATENCY_BUCKETS + 1]; /* last: +Inf */
    atomic_uint_fast64_t latency_count, latency_sum_us;
} counters;

static void count(atomic_uint_fast64_t *c)
{
    atomic_fetch_add_explicit(c, 1, memory_order_relaxed);
}

static void observe_latency(uint64_t us)
{
    size_t b = 0;
    while (b < LATENCY_BUCKETS && (double)us / 1e6 > latency_bounds[b])
        b++;
    count(&counters.latency_bucket[b]);
    count(&counters.latency_count);
    atomic_fetch_add_explicit(&counters.latency_sum_us, us, memory_order_relaxed);
}

static uint64_t load(atomic_uint_fast64_t *c)
{
    return atomic_load_explicit(c, memory_order_relaxed);
}

/* /metrics: this program's counters, the handler histogram and the loop's
 * statistics. arg: the hg_consumer_t. */
static void render_metrics(buf_t *b, void *arg)
{
    hg_consumer_t *consumer = arg;
    prom_metric_u64(b, "hourglass_consumer_cancelled_total", "counter",
                    "Orders this consumer cancelled. A lower bound: an order whose COMMIT's outcome was unknown (the "
                    "connection lost during it) and landed counts as not pending on the retry.",
                    load(&counters.cancelled));
    prom_metric_u64(b, "hourglass_consumer_not_pending_total", "counter",
                    "Messages for orders already paid or cancelled (nothing changed; also a retry after a COMMIT whose "
                    "outcome was unknown and which landed).",
                    load(&counters.not_pending));
    prom_metric_u64(b, "hourglass_consumer_not_found_total", "counter",
                    "Messages for unknown orders (nothing changed).", load(&counters.not_found));
    prom_metric_u64(b, "hourglass_consumer_retries_total", "counter",
                    "Transient failures (deadlock, lock wait, lost connection …) handed to the retry schedule.",
                    load(&counters.transient));
    prom_metric_u64(b, "hourglass_consumer_permanent_failures_total", "counter",
                    "Permanent failures (bad payload, SQL refused …) NACKed with their reason.",
                    load(&counters.permanent));
    prom_metric_u64(b, "hourglass_consumer_bad_payload_total", "counter",
                    "Payloads that are not an order id (part of the permanent failures).", load(&counters.bad_payload));
    prom_metric_u64(b, "hourglass_consumer_db_unavailable_total", "counter",
                    "Messages retried because MariaDB could not be reached.", load(&counters.db_unavailable));

    prom_metric_u64(b, "hourglass_consumer_locked_skipped_total", "counter",
                    "Orders skipped because another transaction held their row (retried later).",
                    load(&counters.locked));
    prom_metric_u64(b, "hourglass_consumer_batch_transactions_total", "counter",
                    "Batch cancel transactions attempted (batch-size > 1), halves of failed batches included.",
                    load(&counters.transactions));
    prom_metric_u64(b, "hourglass_consumer_batch_splits_total", "counter",
                    "Failed batch transactions retried as two halves.", load(&counters.splits));

    prom_hist_t h; /* a snapshot of the atomic buckets */
    prom_hist_init(&h, latency_bounds, (int)LATENCY_BUCKETS);
    for (size_t i = 0; i <= LATENCY_BUCKETS; i++)
        h.buckets[i] = load(&counters.latency_bucket[i]);
    h.count = load(&counters.latency_count);
    h.sum = (double)load(&counters.latency_sum_us) / 1e6;
    prom_hist_write(b, "hourglass_consumer_handler_seconds",
                    "Time to handle one message (parse + its cancel transaction: the batch's, with batch-size > 1).",
                    &h);

    hg_consumer_stats_t st;
    hg_consumer_stats(consumer, &st);
    prom_metric_u64(b, "hourglass_consumer_delivered_total", "counter", "Messages received from PULL.", st.delivered);
    prom_metric_u64(b, "hourglass_consumer_acked_total", "counter", "Messages ACKed.", st.done);
    prom_metric_u64(b, "hourglass_consumer_local_retries_total", "counter",
                    "Handler calls repeated after a local backoff.", st.retried);
    prom_metric_u64(b, "hourglass_consumer_nacked_total", "counter", "NACKs after the local retries ran out.",
                    st.nacked);
    prom_metric_u64(b, "hourglass_consumer_failed_total", "counter", "NACKs of permanent failures.", st.failed);
    prom_metric_u64(b, "hourglass_consumer_lease_lost_total", "counter", "ACK/NACK/TOUCH that found the lease expired.",
                    st.lease_lost);
    prom_metric_u64(b, "hourglass_consumer_broker_errors_total", "counter",
                    "Connection and broker errors met by the workers.", st.errors);
}

/* ------------------------------------------------------------------ the handler */

typedef struct app {
    consumer_config_t cfg;
    hg_order_sql_t sql;
    hg_order_db_params_t db_params;
    hg_order_db **dbs;  /* one per worker, opened by that worker; freed once the workers are joined */
    stop_grace_t *stop; /* cuts the handles in use after stop-grace */
} app_t;

/* Tell /healthz that cancels fail because of MariaDB, with the fix when
 * the code has one. */
static void report_database_failure(const hg_order_error_t *err, const char *reason)
{
    const char *hint = hg_order_setup_hint(err->code);
    if (hint != NULL) {
        char text[700];
        snprintf(text, sizeof text, "%s — %s", reason, hint);
        health_cancel_failed(text);
    } else {
        health_cancel_failed(reason);
    }
}

/* A cancel failed: tell /healthz when the cause is MariaDB itself (it cannot
 * be reached, the connection broke, or the set-up is wrong: access denied, a
 * missing GRANT or table — with the fix), not one order's bad luck (a
 * deadlock, a lock wait, a statement error about the data) nor a data error
 * the library found (code 0: a claim that changed 2 rows), which settle
 * reports as the order's permanent failure (logged, counted, to the DLQ). */
static void note_database_failure(const hg_order_error_t *err, const char *reason)
{
    if (hg_order_error_is_database(err->code)) /* unreachable, lost, read-only, shutting down, set-up … */
        report_database_failure(err, reason);
}

/* The order id in msg's payload: 0, or -1 for a malformed payload, counted,
 * logged and its reason set (the message goes the HG_FAIL way). */
static int parse_order(const hg_message_t *msg, uint64_t *order_id, char *reason, size_t reason_size)
{
    char why[160];
    if (hg_order_parse_id(msg->payload, msg->payload_len, order_id, why, sizeof why) == 0)
        return 0;
    count(&counters.bad_payload);
    count(&counters.permanent);
    snprintf(reason, reason_size, "%s", why);
    log_msg(LOG_LEVEL_WARN, "message %s: %s", msg->id, why);
    return -1;
}

/* The stop's cut of a worker's handle (stop_grace_watch). The stop thread. */
static void cut_db(void *db)
{
    hg_order_db_interrupt(db);
}

/* The worker's MariaDB handle, opened on first use. NULL when it cannot be
 * opened: counted (db_unavailable, transient), /healthz told, logged, and
 * err filled; or, quietly, when the stop has cut the handles (nothing new
 * connects then). */
static hg_order_db *worker_db(app_t *app, int worker, hg_order_error_t *err)
{
    hg_order_db *db = app->dbs[worker]; /* only this worker writes its slot */
    if (db != NULL)
        return db;
    if (stop_grace_cut(app->stop)) {
        memset(err, 0, sizeof *err);
        snprintf(err->message, sizeof err->message, "not connecting: the consumer is stopping");
        return NULL;
    }
    if ((db = hg_order_db_open(&app->db_params, err)) == NULL) {
        char why[600];
        snprintf(why, sizeof why, "MariaDB unavailable: %s", err->message);
        count(&counters.db_unavailable);
        count(&counters.transient);
        report_database_failure(err, why); /* no handle: whatever the code, the database is the cause */
        log_msg(LOG_LEVEL_WARN, "worker %d: %s", worker, why);
        return NULL;
    }
    app->dbs[worker] = db;
    stop_grace_watch(app->stop, cut_db, db); /* cut at once when the stop has cut already */
    return db;
}

/* 1 when outcome shows MariaDB answered (for /healthz). */
static int reached_database(hg_order_outcome_t outcome)
{
    return outcome == HG_ORDER_CANCELLED || outcome == HG_ORDER_NOT_PENDING || outcome == HG_ORDER_NOT_FOUND ||
           outcome == HG_ORDER_LOCKED;
}

/* Count and log one order's cancel outcome; the handler's outcome for its
 * message, with reason set for HG_RETRY and HG_FAIL. */
static hg_outcome_t settle(const hg_message_t *msg, uint64_t order_id, hg_order_outcome_t outcome,
                           const hg_order_error_t *err, char *reason, size_t reason_size)
{
    switch (outcome) {
    case HG_ORDER_CANCELLED:
        count(&counters.cancelled);
        log_msg(LOG_LEVEL_DEBUG, "order %" PRIu64 ": cancelled (message %s)", order_id, msg->id);
        return HG_DONE;
    case HG_ORDER_NOT_PENDING:
        count(&counters.not_pending);
        log_msg(LOG_LEVEL_DEBUG, "order %" PRIu64 ": not pending, nothing to do (message %s)", order_id, msg->id);
        return HG_DONE;
    case HG_ORDER_NOT_FOUND:
        count(&counters.not_found);
        log_msg(LOG_LEVEL_WARN, "order %" PRIu64 ": no such order, message %s acknowledged", order_id, msg->id);
        return HG_DONE;
    case HG_ORDER_LOCKED: /* only batches skip */
        count(&counters.locked);
        count(&counters.transient);
        snprintf(reason, reason_size, "order %" PRIu64 ": locked by another transaction, skipped", order_id);
        log_msg(LOG_LEVEL_INFO, "%s (attempt %u)", reason, msg->attempt);
        return HG_RETRY;
    case HG_ORDER_TRANSIENT:
        count(&counters.transient);
        snprintf(reason, reason_size, "order %" PRIu64 ": transient: %.200s", order_id, err->message);
        log_msg(LOG_LEVEL_INFO, "%s (attempt %u)", reason, msg->attempt);
        return HG_RETRY;
    case HG_ORDER_PAID: /* not an outcome of a cancel */
    case HG_ORDER_PERMANENT:
        break;
    }
    count(&counters.permanent);
    snprintf(reason, reason_size, "order %" PRIu64 ": %.200s", order_id, err->message);
    log_msg(LOG_LEVEL_ERROR, "%s", reason);
    return HG_FAIL;
}

/* The handler (batch-size 1): one message, one transaction. */
static hg_outcome_t handle_message(const hg_message_t *msg, char *reason, size_t reason_size, void *arg)
{
    app_t *app = arg;
    uint64_t t0 = clock_mono_us(), order_id;
    hg_order_error_t err;
    hg_order_outcome_t outcome;
    hg_order_db *db;
    hg_outcome_t r;

    health_step_begin(msg->worker); /* the open and the cancel: /healthz's stuck check */
    if (parse_order(msg, &order_id, reason, reason_size) != 0) {
        r = HG_FAIL;
    } else if ((db = worker_db(app, msg->worker, &err)) == NULL) {
        snprintf(reason, reason_size, "order %" PRIu64 ": MariaDB unavailable: %.200s", order_id, err.message);
        r = HG_RETRY;
    } else {
        health_step_begin(msg->worker);
        hg_order_cancel(db, order_id, app->cfg.cancel_reason, &outcome, &err);
        r = settle(msg, order_id, outcome, &err, reason, reason_size);
        if (reached_database(outcome))
            health_cancel_ok();
        else
            note_database_failure(&err, reason);
    }
    health_step_end(msg->worker);
    observe_latency(clock_mono_us() - t0);
    return r;
}

/* The batch handler (batch-size > 1): the PULL's payloads parsed, the
 * orders cancelled batch-size at a time with hg_order_cancel_batch. */
static void handle_batch(hg_batch_item_t *items, size_t n, void *arg)
{
    app_t *app = arg;
    uint64_t t0 = clock_mono_us();
    int worker = items[0].msg.worker;
    hg_order_batch_item_t *orders = xcalloc(n, sizeof *orders);
    size_t *of = xmalloc(n * sizeof *of), m = 0;
    hg_order_error_t err;
    hg_order_db *db = NULL;

    for (size_t i = 0; i < n; i++) {
        if (parse_order(&items[i].msg, &orders[m].order_id, items[i].reason, sizeof items[i].reason) != 0) {
            items[i].outcome = HG_FAIL;
        } else {
            /* until hg_order_cancel_batch says otherwise: never ACKed unseen */
            orders[m].outcome = HG_ORDER_TRANSIENT;
            snprintf(orders[m].error.message, sizeof orders[m].error.message, "not attempted");
            of[m++] = i;
        }
    }
    health_step_begin(worker); /* the open, then each transaction: /healthz's stuck check */
    if (m > 0 && (db = worker_db(app, worker, &err)) == NULL) {
        for (size_t k = 0; k < m; k++) /* every order stays HG_RETRY */
            snprintf(items[of[k]].reason, sizeof items[of[k]].reason, "order %" PRIu64 ": MariaDB unavailable: %.200s",
                     orders[k].order_id, err.message);
        m = 0;
    }
    size_t size = (size_t)app->cfg.batch_size;
    for (size_t off = 0; off < m; off += size) {
        size_t len = m - off < size ? m - off : size;
        hg_order_batch_stats_t st = { 0 };
        if (hg_order_cancel_batch(db, orders + off, len, app->cfg.cancel_reason, &st) < 0)
            log_msg(LOG_LEVEL_ERROR, "worker %d: a batch of %zu orders was refused: it is retried", worker, len);
        atomic_fetch_add_explicit(&counters.transactions, st.transactions, memory_order_relaxed);
        atomic_fetch_add_explicit(&counters.splits, st.splits, memory_order_relaxed);
        health_step_begin(worker);
    }
    health_step_end(worker);
    uint64_t elapsed = clock_mono_us() - t0;
    for (size_t i = 0; i < n; i++) /* every message waited for the whole batch */
        observe_latency(elapsed);
    /* /healthz: one definite outcome means MariaDB works; else the first
     * failure that is about MariaDB itself counts (hg_order_error_is_database:
     * not a deadlock, nor a data error of one order). */
    int reached = 0;
    const hg_order_batch_item_t *failed = NULL;
    for (size_t k = 0; k < m; k++) {
        hg_batch_item_t *it = &items[of[k]];
        const hg_order_batch_item_t *o = &orders[k];
        it->outcome = settle(&it->msg, o->order_id, o->outcome, &o->error, it->reason, sizeof it->reason);
        if (reached_database(o->outcome))
            reached = 1;
        else if (failed == NULL && hg_order_error_is_database(o->error.code))
            failed = o;
    }
    if (reached) {
        health_cancel_ok();
    } else if (failed != NULL) {
        char why_db[600];
        snprintf(why_db, sizeof why_db, "order %" PRIu64 ": %s", failed->order_id, failed->error.message);
        note_database_failure(&failed->error, why_db);
    }
    free(orders);
    free(of);
}

/* ------------------------------------------------------------------ main */

static hg_consumer_t *volatile running_consumer;
static stop_grace_t *volatile running_stop;

static void on_signal(int sig)
{
    (void)sig;
    hg_consumer_t *c = running_consumer;
    stop_grace_t *s = running_stop;
    if (c != NULL)
        hg_consumer_stop(c);
    if (s != NULL)
        stop_grace_request(s);
}

/* ---- SIGHUP: the same start-up parse into a fresh struct (common/reload.h) */

typedef struct reloader {
    consumer_config_t *cfg;
    int argc;
    char **argv;
    atomic_int quit; /* set before the SIGHUP that wakes the thread to end it */
    pthread_t thread;
} reloader_t;

static const consumer_config_t *running_config; /* main's: reload_load compares what password-file holds */

static int reload_load(void *conf, int argc, char **argv, char *err, size_t errlen)
{
    cfg_args_t args;
    consumer_config_init(conf);
    if (cfg_parse_args(consumer_config_table(), conf, argc, argv, &args, err, errlen) != 0 ||
        consumer_config_credentials(conf, err, errlen) != 0 || consumer_config_validate(conf, err, errlen) != 0)
        return -1;
    /* The password is read from its file, not a key: a rotated one was
     * reloaded without a word ("nothing changed") while the workers' broker
     * clients kept the old one. (A changed password-file path is a key:
     * cfg_reload names it.) */
    const consumer_config_t *fresh = conf;
    if (running_config != NULL && passwd_file_rotated(running_config->password_file, running_config->password,
                                                      fresh->password_file, fresh->password))
        log_msg(LOG_LEVEL_WARN, "SIGHUP: password-file %s " PASSWD_ROTATED_NOTE, fresh->password_file);
    return 0;
}

static void reload_release(void *conf)
{
    consumer_config_free(conf);
}

static const reload_program_t reload_program = { sizeof(consumer_config_t), reload_load, reload_release };

static void *reload_thread(void *arg)
{
    reloader_t *r = arg;
    sigset_t hup;
    sigemptyset(&hup);
    sigaddset(&hup, SIGHUP);
    for (;;) {
        int sig = 0;
        if (sigwait(&hup, &sig) != 0 || atomic_load(&r->quit))
            return NULL;
        reload_config(consumer_config_table(), r->cfg, &reload_program, r->argc, r->argv);
    }
}

/* Start-up check of the SQL against the database: a statement the server
 * refuses stops the start with the field named; an unreachable server only
 * warns (the workers keep trying). Returns 0 / -1. */
static int check_database(app_t *app)
{
    hg_order_error_t err;
    hg_order_db *db = hg_order_db_open(&app->db_params, &err);
    if (db == NULL) {
        if (err.code == 0) {
            log_msg(LOG_LEVEL_ERROR, "%s", err.message);
            return -1;
        }
        const char *hint = hg_order_setup_hint(err.code);
        if (hint != NULL) { /* waiting will not heal it */
            log_msg(LOG_LEVEL_ERROR, "MariaDB refuses mysql-user '%s' on mysql-database '%s': %s — %s",
                    app->cfg.mysql_user != NULL ? app->cfg.mysql_user : "(the current user)", app->cfg.mysql_database,
                    err.message, hint);
            return -1;
        }
        log_msg(LOG_LEVEL_WARN, "MariaDB not reachable yet (%s); the workers will keep trying", err.message);
        return 0;
    }
    int rc = 0;
    if (hg_order_db_prepare(db, &err) != 0) {
        const char *hint = hg_order_setup_hint(err.code);
        if (hint != NULL) {
            log_msg(LOG_LEVEL_ERROR, "the database refuses the configured SQL: %s — %s", err.message, hint);
            rc = -1;
        } else if (hg_order_classify(err.code) == HG_ORDER_PERMANENT) {
            log_msg(LOG_LEVEL_ERROR, "the database refuses the configured SQL: %s", err.message);
            rc = -1;
        } else {
            log_msg(LOG_LEVEL_WARN, "could not check the SQL yet (%s); the workers will keep trying", err.message);
        }
    }
    hg_order_db_close(db);
    return rc;
}

int main(int argc, char **argv)
{
    char err[600];
    app_t app;
    memset(&app, 0, sizeof app);
    consumer_config_init(&app.cfg);
    cfg_args_t args;
    if (cfg_parse_args(consumer_config_table(), &app.cfg, argc, argv, &args, err, sizeof err) != 0) {
        fprintf(stderr, PROGRAM ": %s\n", err);
        consumer_config_free(&app.cfg);
        return EXIT_CONFIG;
    }
    if (args.action == CFG_HELP || args.action == CFG_VERSION) {
        if (args.action == CFG_HELP)
            consumer_config_usage(stdout);
        else
            printf(PROGRAM " %s\n", HG_VERSION_STRING);
        consumer_config_free(&app.cfg);
        return 0;
    }
    /* the credentials first: the URI's check builds the consumer with them
     * (a URI naming a user whose password is in password-file) */
    if (consumer_config_credentials(&app.cfg, err, sizeof err) != 0 ||
        consumer_config_validate(&app.cfg, err, sizeof err) != 0) {
        fprintf(stderr, PROGRAM ": %s\n", err);
        consumer_config_free(&app.cfg);
        return EXIT_CONFIG;
    }
    if (args.action == CFG_CHECK) {
        printf("# " PROGRAM " %s: effective configuration\n", HG_VERSION_STRING);
        cfg_print_values(consumer_config_table(), &app.cfg, stdout);
        if (args.config_path != NULL)
            printf(PROGRAM ": configuration OK (%s)\n", args.config_path);
        else
            printf(PROGRAM ": configuration OK\n");
        consumer_config_free(&app.cfg);
        return 0;
    }
    if (log_keys_apply(&app.cfg, err, sizeof err) != 0) {
        fprintf(stderr, PROGRAM ": %s\n", err);
        consumer_config_free(&app.cfg);
        return EXIT_CONFIG;
    }

    /* Process-wide set-up before any thread: SIGHUP blocked in all (inherited). */
    signal(SIGPIPE, SIG_IGN);
    sigset_t hup;
    sigemptyset(&hup);
    sigaddset(&hup, SIGHUP);
    pthread_sigmask(SIG_BLOCK, &hup, NULL);
    reloader_t reloader = { .cfg = &app.cfg, .argc = argc, .argv = argv };
    running_config = &app.cfg;
    int reloading = 0;
    if (hg_order_library_init() != 0) {
        log_msg(LOG_LEVEL_ERROR, "the MariaDB client library failed to initialise");
        consumer_config_free(&app.cfg);
        return 1;
    }
    evthread_use_pthreads();

    consumer_config_sql(&app.cfg, &app.sql);
    consumer_config_db_params(&app.cfg, &app.sql, &app.db_params);
    int status = 1;
    hg_consumer_t *consumer = NULL;
    prom_http_t *metrics = NULL;
    if (check_database(&app) != 0)
        goto out;

    hg_consumer_opts_t opts;
    hg_client_opts_t client_opts; /* copied by hg_consumer_new; its strings stay app.cfg's */
    consumer_config_loop_opts(&app.cfg, &opts, &client_opts);
    if (app.cfg.batch_size > 1)
        opts.batch_handler = handle_batch;
    else
        opts.handler = handle_message;
    opts.handler_arg = &app;
    hg_error_t e = { 0 };
    if (hg_consumer_new(&opts, &consumer, &e) != HG_OK) {
        log_msg(LOG_LEVEL_ERROR, "consumer: %s", e.message);
        goto out;
    }
    health_set_broker_grace(app.cfg.broker_unhealthy_after_ms);
    health_set_stuck_after(consumer_stuck_after_ms(&app.cfg));
    if (app.cfg.metrics_port > 0) {
        if (prom_http_start(&metrics, app.cfg.metrics_bind, (unsigned)app.cfg.metrics_port, render_metrics,
                            health_render, consumer, err, sizeof err) != 0) {
            log_msg(LOG_LEVEL_ERROR, "%s", err);
            goto out;
        }
        log_msg(LOG_LEVEL_INFO, "metrics on http://%s:%llu/metrics", app.cfg.metrics_bind, app.cfg.metrics_port);
    }

    app.dbs = xcalloc(app.cfg.workers, sizeof *app.dbs);
    const stop_grace_opts_t stop_opts = {
        .grace_ms = app.cfg.stop_grace_ms,
        .finishing = "finishing the messages in hand",
        .handles = "MariaDB connections",
        .after_cut = "a cancel still in flight is rolled back; the calls to the broker end too (ACK, NACK, TOUCH): "
                     "what was not settled comes back after its lease",
    };
    if ((app.stop = stop_grace_start(&stop_opts, err, sizeof err)) == NULL) {
        log_msg(LOG_LEVEL_ERROR, "%s", err);
        goto out;
    }
    hg_consumer_set_stop_fd(consumer, stop_grace_cut_fd(app.stop)); /* the broker calls end with the cut */
    running_stop = app.stop;
    running_consumer = consumer;
    stop_grace_handle_signals(on_signal);
    int prc = pthread_create(&reloader.thread, NULL, reload_thread, &reloader);
    if (prc != 0) {
        log_msg(LOG_LEVEL_ERROR, "cannot start the reload thread: %s", strerror(prc));
        goto out;
    }
    reloading = 1;

    log_msg(LOG_LEVEL_INFO, PROGRAM " %s: group %s, topic %s, %llu workers, batch-size %llu, database %s",
            HG_VERSION_STRING, app.cfg.group, app.cfg.topic, app.cfg.workers, app.cfg.batch_size,
            app.cfg.mysql_database);
    hg_err_t rc = hg_consumer_run(consumer);
    /* Stopped: a later signal has nothing to do (and must not reach what
     * is freed below). */
    stop_grace_handle_signals(SIG_IGN);
    running_consumer = NULL;
    running_stop = NULL;
    if (rc != HG_OK) {
        hg_error_t last;
        hg_consumer_last_error(consumer, &last);
        log_msg(LOG_LEVEL_ERROR, "consumer stopped: %s", last.message[0] ? last.message : hg_strerror(rc));
        goto out;
    }
    log_msg(LOG_LEVEL_INFO,
            "stopped: cancelled %" PRIu64 ", not pending %" PRIu64 ", not found %" PRIu64 ", transient %" PRIu64
            ", permanent %" PRIu64,
            load(&counters.cancelled), load(&counters.not_pending), load(&counters.not_found),
            load(&counters.transient), load(&counters.permanent));
    status = 0;

out:
    if (reloading) {
        atomic_store(&reloader.quit, 1);
        pthread_kill(reloader.thread, SIGHUP);
        pthread_join(reloader.thread, NULL);
    }
    prom_http_stop(metrics);
    hg_consumer_free(consumer);
    stop_grace_finish(app.stop); /* the workers are joined: nothing uses a handle any more */
    for (unsigned long long i = 0; app.dbs != NULL && i < app.cfg.workers; i++)
        hg_order_db_close(app.dbs[i]);
    free(app.dbs);
    consumer_config_free(&app.cfg);
    return status;
}
