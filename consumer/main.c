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
 * This file: the handler, the start-up check of the database, the
 * credentials rotated without a restart, signals and main(). The counters
 * and their /metrics text are consumer/metrics.c; the configuration (key
 * table, checks, --help) is consumer/consumer_config.c; the bounded stop (the thread that
 * cuts the workers' handles after stop-grace) is common/stop_grace.h.
 * Logging is common/log.h; MariaDB's failures go through common/log_limit.h
 * (a repeated one at most once per 10 s with a count, the recovery once).
 * /metrics and /healthz are common/prom.h's endpoint.
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
 * it never stops the consumer. Credentials rotated without a restart:
 * mysql-password-file is read again at each worker's (re)connect to MariaDB
 * (a handle is opened again when it changed); a new broker password in
 * password-file (found by a SIGHUP, or after the broker refused the running
 * one: hg_consumer_run returned HG_ERR_AUTH) makes main build the library
 * consumer again with it, between batches (renew_consumer). The metrics
 * thread reads the running consumer under app.consumer_lock.
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
#include "common/argv_secret.h"
#include "common/cfg.h"
#include "common/log.h"
#include "common/log_limit.h"
#include "common/passwd.h"
#include "common/prom.h"
#include "common/reload.h"
#include "common/stop_grace.h"
#include "common/service_notify.h"
#include "consumer/consumer_config.h"
#include "consumer/health.h"
#include "consumer/metrics.h"
#include "base/clock.h"

/* ------------------------------------------------------------------ the handler */

typedef struct app {
    consumer_config_t cfg;
    hg_order_sql_t sql;
    hg_order_db_params_t db_params;
    hg_order_db **dbs;  /* one per worker, opened by that worker; freed once the workers are joined */
    stop_grace_t *stop; /* cuts the handles in use after stop-grace */
    /* mysql-password-file, read again at every (re)connect: a handle keeps
     * the password it was opened with (libhourglass), so a worker opens its
     * handle again when the file holds another one. */
    passwd_source_t db_password;  /* no file (passwd_source_has_file 0): mysql-password, nothing re-read */
    unsigned long *db_generation; /* per worker: db_password's generation when its handle was opened */
    /* The library consumer, made again with password-file's new password
     * after a broker password rotation (main); the metrics thread reads its
     * counters under the lock. */
    pthread_mutex_t consumer_lock;
    hg_consumer_t *consumer;
    hg_consumer_stats_t stats_before; /* the totals of the consumers it replaced */
    atomic_int renew;                 /* a SIGHUP found a rotated password-file: make the consumer again */
} app_t;

static app_t *running_app; /* for the SIGHUP reload: re-reads mysql-password-file */

/* MariaDB's failures (unreachable, lost, disk full, read-only, set-up …) in
 * the log: the first at once, the same again at most once per
 * LOG_LIMIT_INTERVAL_MS with a count, and one line when it answers again
 * (common/log_limit.h). Every worker fails every order the same way while
 * MariaDB is down: one line each was a thousand lines in twelve seconds. */
static log_limit_t db_log = LOG_LIMIT_INITIALIZER("MariaDB answers", LOG_LIMIT_INTERVAL_MS);

/* The library consumer's counters plus those of the ones it replaced. */
static void consumer_totals(app_t *app, hg_consumer_stats_t *st)
{
    pthread_mutex_lock(&app->consumer_lock);
    hg_consumer_stats(app->consumer, st);
    metrics_stats_add(st, &app->stats_before);
    pthread_mutex_unlock(&app->consumer_lock);
}

/* /metrics: this program's counters, the handler histogram and the loop's
 * statistics. arg: the app_t. */
static void render_metrics(buf_t *b, void *arg)
{
    hg_consumer_stats_t st;
    metrics_render_counters(b);
    consumer_totals(arg, &st);
    metrics_render_loop(b, &st);
}

/* /healthz: health_render on the running library consumer. arg: the app_t. */
static int render_health(buf_t *b, void *arg)
{
    app_t *app = arg;
    pthread_mutex_lock(&app->consumer_lock);
    int rc = health_render(b, app->consumer);
    pthread_mutex_unlock(&app->consumer_lock);
    return rc;
}

/* Read mysql-password-file again (when set): a new password is logged and
 * used from each worker's next cancel; a file that cannot be read keeps the
 * last good password, warned about once per error. Any thread. */
static void refresh_db_password(app_t *app)
{
    passwd_source_refresh_logged(&app->db_password, "mysql-password-file", "the workers reconnect to MariaDB with it",
                                 PASSWD_DB_KEPT_NOTE);
}

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
    metrics_count(&consumer_counters.bad_payload);
    metrics_count(&consumer_counters.permanent);
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
    char password[PASSWD_FILE_MAX + 1] = "";
    if (passwd_source_has_file(&app->db_password) && db != NULL &&
        passwd_source_generation(&app->db_password) != app->db_generation[worker]) {
        log_msg(LOG_LEVEL_INFO, "worker %d: the MariaDB password changed: reconnecting with it", worker);
        stop_grace_unwatch(app->stop, db);
        hg_order_db_close(db);
        app->dbs[worker] = db = NULL;
    }
    if (db != NULL)
        return db;
    if (stop_grace_cut(app->stop)) {
        memset(err, 0, sizeof *err);
        snprintf(err->message, sizeof err->message, "not connecting: the consumer is stopping");
        return NULL;
    }
    hg_order_db_params_t params = app->db_params;
    if (passwd_source_has_file(&app->db_password)) { /* a connect: the file is read again */
        refresh_db_password(app);
        app->db_generation[worker] = passwd_source_get(&app->db_password, password, sizeof password);
        params.password = password;
    }
    db = hg_order_db_open(&params, err);
    memset(password, 0, sizeof password);
    if (db == NULL) {
        char why[600];
        snprintf(why, sizeof why, "MariaDB unavailable: %s", err->message);
        metrics_count(&consumer_counters.db_unavailable);
        metrics_count(&consumer_counters.transient);
        report_database_failure(err, why); /* no handle: whatever the code, the database is the cause */
        log_limit_fail(&db_log, LOG_LEVEL_WARN, why, "worker %d: %s", worker, why);
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
        metrics_count(&consumer_counters.cancelled);
        log_msg(LOG_LEVEL_DEBUG, "order %" PRIu64 ": cancelled (message %s)", order_id, msg->id);
        return HG_DONE;
    case HG_ORDER_NOT_PENDING:
        metrics_count(&consumer_counters.not_pending);
        log_msg(LOG_LEVEL_DEBUG, "order %" PRIu64 ": not pending, nothing to do (message %s)", order_id, msg->id);
        return HG_DONE;
    case HG_ORDER_NOT_FOUND:
        metrics_count(&consumer_counters.not_found);
        log_msg(LOG_LEVEL_WARN, "order %" PRIu64 ": no such order, message %s acknowledged", order_id, msg->id);
        return HG_DONE;
    case HG_ORDER_LOCKED: /* only batches skip */
        metrics_count(&consumer_counters.locked);
        metrics_count(&consumer_counters.transient);
        snprintf(reason, reason_size, "order %" PRIu64 ": locked by another transaction, skipped", order_id);
        log_msg(LOG_LEVEL_INFO, "%s (attempt %u)", reason, msg->attempt);
        return HG_RETRY;
    case HG_ORDER_TRANSIENT:
        metrics_count(&consumer_counters.transient);
        snprintf(reason, reason_size, "order %" PRIu64 ": transient: %.200s", order_id, err->message);
        if (hg_order_error_is_database(err->code)) /* MariaDB itself: the same for every order */
            log_limit_fail(&db_log, LOG_LEVEL_WARN, err->message, "%s (attempt %u)", reason, msg->attempt);
        else /* one order's bad luck (a deadlock, a lock wait) */
            log_msg(LOG_LEVEL_INFO, "%s (attempt %u)", reason, msg->attempt);
        return HG_RETRY;
    case HG_ORDER_PAID: /* not an outcome of a cancel */
    case HG_ORDER_PERMANENT:
        break;
    }
    metrics_count(&consumer_counters.permanent);
    snprintf(reason, reason_size, "order %" PRIu64 ": %.200s", order_id, err->message);
    if (hg_order_error_is_database(err->code)) /* a set-up error (a GRANT, a table) fails every order alike */
        log_limit_fail(&db_log, LOG_LEVEL_ERROR, err->message, "%s", reason);
    else
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
        hg_order_db_set_progress(db, health_step_answered, (void *)(intptr_t)msg->worker); /* each answer */
        uint64_t unknown = hg_order_db_commits_unknown(db);
        hg_order_cancel(db, order_id, app->cfg.cancel_reason, &outcome, &err);
        metrics_count_unknown_commits(db, unknown);
        r = settle(msg, order_id, outcome, &err, reason, reason_size);
        if (reached_database(outcome)) {
            health_cancel_ok();
            log_limit_ok(&db_log);
        } else {
            note_database_failure(&err, reason);
            if (hg_order_error_is_database(err.code)) /* a rotated password refused (1045), a lost connection … */
                refresh_db_password(app);
        }
    }
    health_step_end(msg->worker);
    metrics_observe_latency(clock_mono_us() - t0);
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
    /* Each answer restarts the stuck clock: a batch that meets lock waits
     * is split and retried inside hg_order_cancel_batch, down to single
     * orders, each wait bounded by mysql-lock-wait-timeout. */
    if (m > 0)
        hg_order_db_set_progress(db, health_step_answered, (void *)(intptr_t)worker);
    size_t size = (size_t)app->cfg.batch_size;
    for (size_t off = 0; off < m; off += size) {
        size_t len = m - off < size ? m - off : size;
        hg_order_batch_stats_t st = { 0 };
        uint64_t unknown = hg_order_db_commits_unknown(db);
        if (hg_order_cancel_batch(db, orders + off, len, app->cfg.cancel_reason, &st) < 0)
            log_msg(LOG_LEVEL_ERROR, "worker %d: a batch of %zu orders was refused: it is retried", worker, len);
        metrics_count_unknown_commits(db, unknown);
        atomic_fetch_add_explicit(&consumer_counters.transactions, st.transactions, memory_order_relaxed);
        atomic_fetch_add_explicit(&consumer_counters.splits, st.splits, memory_order_relaxed);
        health_step_begin(worker);
    }
    health_step_end(worker);
    uint64_t elapsed = clock_mono_us() - t0;
    for (size_t i = 0; i < n; i++) /* every message waited for the whole batch */
        metrics_observe_latency(elapsed);
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
        log_limit_ok(&db_log);
    } else if (failed != NULL) {
        char why_db[600];
        snprintf(why_db, sizeof why_db, "order %" PRIu64 ": %s", failed->order_id, failed->error.message);
        note_database_failure(&failed->error, why_db);
        refresh_db_password(app); /* a rotated password refused (1045), a lost connection … */
    }
    free(orders);
    free(of);
}

/* ------------------------------------------------------------------ main */

static hg_consumer_t *volatile running_consumer;
static stop_grace_t *volatile running_stop;

static volatile sig_atomic_t stop_asked; /* SIGINT / SIGTERM came: nothing is made again */

static void on_signal(int sig)
{
    (void)sig;
    stop_asked = 1;
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
    prom_http_t *metrics; /* NULL: no metrics port */
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
    /* The passwords are read from their files, not keys: a rotated one was
     * reloaded without a word ("nothing changed"). mysql-password-file's is
     * taken by the workers at their next cancel; password-file's stops the
     * library consumer, which main makes again with it (renew_consumer).
     * (A changed path is a key: cfg_reload names it.) */
    const consumer_config_t *fresh = conf;
    app_t *app = running_app;
    if (app == NULL || running_config == NULL)
        return 0;
    refresh_db_password(app);
    pthread_mutex_lock(&app->consumer_lock); /* main replaces the password and the consumer under it */
    if (passwd_file_rotated(running_config->password_file, running_config->password, fresh->password_file,
                            fresh->password)) {
        log_msg(LOG_LEVEL_INFO, "SIGHUP: password-file %s " PASSWD_ROTATED_NOTE, fresh->password_file);
        atomic_store(&app->renew, 1);
        hg_consumer_stop(app->consumer); /* the workers finish the messages in hand; main makes it again */
    }
    pthread_mutex_unlock(&app->consumer_lock);
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
        service_notify_or_warn("RELOADING=1");
        reload_config(consumer_config_table(), r->cfg, &reload_program, r->argc, r->argv);
        prom_http_set_allowed_hosts(r->metrics, r->cfg->metrics_allowed_hosts); /* metrics-allowed-hosts */
        service_notify_or_warn("READY=1");
    }
}

/* A library consumer with the configuration's options and credentials
 * (app->cfg.password: password-file's). NULL when it cannot be made
 * (logged). */
static hg_consumer_t *make_consumer(app_t *app)
{
    hg_consumer_opts_t opts;
    hg_client_opts_t client_opts; /* copied by hg_consumer_new; its strings stay app.cfg's */
    consumer_config_loop_opts(&app->cfg, &opts, &client_opts);
    if (app->cfg.batch_size > 1)
        opts.batch_handler = handle_batch;
    else
        opts.handler = handle_message;
    opts.handler_arg = app;
    hg_error_t e = { 0 };
    hg_consumer_t *c = NULL;
    if (hg_consumer_new(&opts, &c, &e) != HG_OK) {
        log_msg(LOG_LEVEL_ERROR, "consumer: %s", e.message);
        return NULL;
    }
    consumer_config_loop_events(c);
    return c;
}

/* hg_consumer_run returned rc (HG_OK: stopped; HG_ERR_AUTH: the broker
 * refused the password). A rotated broker password needs no restart: when
 * a SIGHUP found another password in password-file (app->renew), or the
 * broker refused the running one and password-file now holds another, the
 * library consumer — which keeps the password it was made with — is made
 * again with the file's, between batches: the workers finished the
 * messages in hand, and what they could not settle (an ACK on a cut
 * connection) comes back after its lease, where the idempotent cancel finds
 * it done. Returns the new consumer, now app->consumer and running_consumer
 * (the old one freed), or NULL to stop: a stop was asked, rc is HG_OK
 * without a rotation, or the refused password is still the file's (then
 * rc stands: exit 1, as before). Main thread. */
static hg_consumer_t *renew_consumer(app_t *app, hg_err_t rc)
{
    int rotated = atomic_exchange(&app->renew, 0);
    if (stop_asked || app->cfg.password_file == NULL || (rc == HG_OK && !rotated))
        return NULL;
    char fresh[PASSWD_FILE_MAX + 1], why[PASSWD_FILE_MAX + 200];
    if (passwd_read_file(app->cfg.password_file, fresh, sizeof fresh, why, sizeof why) != 0) {
        log_msg(LOG_LEVEL_ERROR, "password-file: %s: cannot connect to the broker again", why);
        return NULL;
    }
    pthread_mutex_lock(&app->consumer_lock); /* the reload thread compares with it */
    int same = strcmp(fresh, app->cfg.password) == 0;
    if (!same)
        memcpy(app->cfg.password, fresh, sizeof app->cfg.password);
    pthread_mutex_unlock(&app->consumer_lock);
    memset(fresh, 0, sizeof fresh);
    if (same && rc == HG_ERR_AUTH)
        return NULL; /* a wrong password stays wrong: main reports the refusal */
    log_msg(LOG_LEVEL_INFO, "password-file %s: %s: connecting to the broker again with its password",
            app->cfg.password_file,
            rc == HG_ERR_AUTH ? "the broker refused the running password and the file holds another"
                              : "holds another password (SIGHUP)");
    hg_consumer_t *next = make_consumer(app);
    if (next == NULL)
        return NULL;
    hg_consumer_set_stop_fd(next, stop_grace_cut_fd(app->stop));
    hg_consumer_t *old = app->consumer;
    hg_consumer_stats_t st;
    hg_consumer_stats(old, &st);
    pthread_mutex_lock(&app->consumer_lock);
    metrics_stats_add(&app->stats_before, &st);
    app->consumer = next;
    pthread_mutex_unlock(&app->consumer_lock);
    running_consumer = next;
    hg_consumer_free(old);
    if (stop_asked) /* a signal that reached the old one meanwhile */
        hg_consumer_stop(next);
    return next;
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

int main(int argc, char **argv_shown)
{
    /* The program reads a copy of its arguments: in argv_shown (ps, /proc/PID/cmdline) a password is hidden. */
    char **argv = argv_secret_protect(argc, argv_shown, "password-file and mysql-password-file");
    char err[600];
    app_t app;
    memset(&app, 0, sizeof app);
    pthread_mutex_init(&app.consumer_lock, NULL);
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
    const passwd_key_file_t secrets[] = { DB_KEYS_SECRET_FILE(&app.cfg), { "password-file", app.cfg.password_file } };
    if (args.action == CFG_CHECK) {
        passwd_warn_exposed(secrets, sizeof secrets / sizeof secrets[0], PROGRAM, stderr);
        cfg_print_check(consumer_config_table(), &app.cfg, HG_VERSION_STRING, NULL, args.config_path, stdout, stderr);
        consumer_config_free(&app.cfg);
        return 0;
    }
    if (log_keys_apply(&app.cfg, err, sizeof err) != 0) {
        fprintf(stderr, PROGRAM ": %s\n", err);
        consumer_config_free(&app.cfg);
        return EXIT_CONFIG;
    }
    passwd_warn_exposed(secrets, sizeof secrets / sizeof secrets[0], PROGRAM, NULL);

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
    passwd_source_init(&app.db_password, app.cfg.mysql_password_file,
                       app.cfg.mysql_password_file != NULL ? app.cfg.mysql_password_read : NULL);
    app.db_generation = xcalloc(app.cfg.workers, sizeof *app.db_generation);
    running_app = &app;
    int status = 1;
    hg_consumer_t *consumer = NULL; /* app.consumer, which main alone changes */
    prom_http_t *metrics = NULL;
    if (check_database(&app) != 0)
        goto out;

    if ((consumer = make_consumer(&app)) == NULL)
        goto out;
    app.consumer = consumer;
    health_set_broker_grace(app.cfg.broker_unhealthy_after_ms);
    health_set_stuck_after(consumer_stuck_after_ms(&app.cfg));
    if (app.cfg.metrics_port > 0) {
        if (prom_http_start(&metrics, app.cfg.metrics_bind, app.cfg.metrics_allowed_hosts,
                            (unsigned)app.cfg.metrics_port, render_metrics, render_health, &app, err,
                            sizeof err) != 0) {
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
    reloader.metrics = metrics;
    int prc = pthread_create(&reloader.thread, NULL, reload_thread, &reloader);
    if (prc != 0) {
        log_msg(LOG_LEVEL_ERROR, "cannot start the reload thread: %s", strerror(prc));
        goto out;
    }
    reloading = 1;

    log_msg(LOG_LEVEL_INFO, PROGRAM " %s: group %s, topic %s, %llu workers, batch-size %llu, database %s",
            HG_VERSION_STRING, app.cfg.group, app.cfg.topic, app.cfg.workers, app.cfg.batch_size,
            app.cfg.mysql_database);
    /* Ready for systemd (Type=notify): configured, its database checked; the
     * connection to the broker is the consumer's to make and remake. */
    service_notify_or_warn("READY=1\nSTATUS=group %s, topic %s, %llu workers", app.cfg.group, app.cfg.topic,
                           app.cfg.workers);
    hg_err_t rc;
    while ((rc = hg_consumer_run(consumer)) == HG_OK || rc == HG_ERR_AUTH) {
        hg_consumer_t *next = renew_consumer(&app, rc);
        if (next == NULL)
            break;
        consumer = next;
    }
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
            "stopped: cancelled %" PRIu64 ", commit outcome unknown %" PRIu64 ", not pending %" PRIu64
            ", not found %" PRIu64 ", transient %" PRIu64 ", permanent %" PRIu64,
            metrics_load(&consumer_counters.cancelled), metrics_load(&consumer_counters.commit_unknown),
            metrics_load(&consumer_counters.not_pending), metrics_load(&consumer_counters.not_found),
            metrics_load(&consumer_counters.transient), metrics_load(&consumer_counters.permanent));
    status = 0;

out:
    if (reloading) {
        atomic_store(&reloader.quit, 1);
        pthread_kill(reloader.thread, SIGHUP);
        pthread_join(reloader.thread, NULL);
    }
    prom_http_stop(metrics);
    hg_consumer_free(consumer);
    pthread_mutex_destroy(&app.consumer_lock);
    stop_grace_finish(app.stop); /* the workers are joined: nothing uses a handle any more */
    for (unsigned long long i = 0; app.dbs != NULL && i < app.cfg.workers; i++)
        hg_order_db_close(app.dbs[i]);
    free(app.dbs);
    running_app = NULL; /* the reload thread is joined */
    free(app.db_generation);
    passwd_source_destroy(&app.db_password);
    consumer_config_free(&app.cfg);
    return status;
}
