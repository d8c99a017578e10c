/*
 * compensator/cancel.c — hg_order_cancel with counters and logs
 * (contract: cancel.h). Runs on the calling layer's thread.
 *
 * A transient failure of MariaDB itself (its disk full, the connection lost)
 * fails every order of a page the same way, every round: those lines go
 * through one common/log_limit.h shared by the layers (the first at once, the
 * same again at most once per 10 s with a count, one line when MariaDB
 * answers again).
 */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include "compensator/cancel.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include <errmsg.h>
#include <mysqld_error.h>

#include "base/clock.h"
#include "common/log.h"
#include "common/log_limit.h"
#include "compensator/comp_config.h"
#include "compensator/stats.h"
#include "compensator/stop.h"
#include "compensator/stuck.h"
#include "db/conn.h"

/* MariaDB's transient failures, shared by the layers; lives as long as the process */
static log_limit_t db_log = LOG_LIMIT_INITIALIZER("MariaDB answers the cancels", LOG_LIMIT_INTERVAL_MS);

void comp_canceller_init(comp_canceller_t *c, const hg_order_db_params_t *params, int which, const char *reason,
                         size_t batch_size, unsigned idle_s)
{
    memset(c, 0, sizeof *c);
    c->params = *params;
    c->params.sql = NULL; /* the reference schema's statements (order.h) */
    c->params.idle_transaction_timeout_s = idle_s;
    c->batch_size = batch_size < 1 ? 1 : batch_size > HG_ORDER_BATCH_MAX ? HG_ORDER_BATCH_MAX : batch_size;
    c->which = which;
    c->reason = reason;
}

void comp_canceller_close(comp_canceller_t *c)
{
    comp_stop_unwatch(c->db);
    hg_order_db_close(c->db);
    c->db = NULL;
}

static void count_outcome(comp_canceller_t *c, int outcome)
{
    comp_count(&comp_stats.cancels[c->which][outcome], 1);
}

/* The COMMITs with an unknown outcome on the canceller's handle since
 * hg_order_db_commits_unknown read before (just before a cancel call on the
 * same handle), counted for its layer: one per transaction, a batch's once. */
static void count_unknown_commits(comp_canceller_t *c, uint64_t before)
{
    comp_count(&comp_stats.commit_unknown[c->which], hg_order_db_commits_unknown(c->db) - before);
}

/* hg_order_db_set_progress's callback: a round trip of the layer's cancel
 * handle returned (a row, an error, a lock wait timeout, a deadlock), so
 * /healthz's stuck clock restarts — a batch that meets lock waits is split
 * and retried down to single orders inside hg_order_cancel_batch, waiting
 * up to mysql-lock-wait-timeout each time, and is not stuck for that. */
static void answered(void *arg)
{
    (void)arg;
    comp_progress();
}

/* Open the handle when there is none, registered with the stop. 0, or -1
 * with err filled; once the stop has cut the connections nothing is opened
 * (2002, a client error: the round ends). */
static int ensure_db(comp_canceller_t *c, hg_order_error_t *err)
{
    memset(err, 0, sizeof *err);
    if (c->db == NULL && comp_stop_cut()) {
        err->code = CR_CONNECTION_ERROR;
        snprintf(err->message, sizeof err->message, "not connecting: the compensator is stopping");
        return -1;
    }
    /* mysql-password-file: the handle keeps the password it was opened with
     * (libhourglass), so it is opened again when the file held another one
     * (comp_db_password_refresh after a failure, or a reconnect of another
     * connection, read it). */
    char fresh[PASSWD_FILE_MAX + 1];
    unsigned long generation = comp_db_password(fresh, sizeof fresh);
    if (generation != 0 && c->db != NULL && generation != c->password_generation) {
        log_msg(LOG_LEVEL_INFO, "%s cancels: MariaDB password changed: reconnecting with it", c->reason);
        comp_canceller_close(c);
    }
    if (c->db == NULL && generation != 0) { /* a connect: the file is read again */
        comp_db_password_refresh();
        c->password_generation = comp_db_password(c->password, sizeof c->password);
        c->params.password = c->password;
    }
    memset(fresh, 0, sizeof fresh);
    if (c->db == NULL && (c->db = hg_order_db_open(&c->params, err)) != NULL) {
        hg_order_db_set_progress(c->db, answered, NULL);
        comp_stop_watch_order_db(c->db);
    }
    return c->db != NULL ? 0 : -1;
}

/* The outcome when the handle cannot be opened: a parameter problem (no
 * server error code) stays, anything else may pass. Counted as transient. */
static hg_order_outcome_t open_failed(comp_canceller_t *c, const hg_order_error_t *err)
{
    count_outcome(c, COMP_CANCEL_TRANSIENT);
    if (hg_order_error_is_database(err->code))
        comp_db_password_refresh();
    return err->code == 0 ? HG_ORDER_PERMANENT : HG_ORDER_TRANSIENT;
}

/* Count and log one order's outcome; the outcome as the layers see it (PAID,
 * which a cancel never gives, counts as PERMANENT). */
static hg_order_outcome_t record(comp_canceller_t *c, uint64_t id, hg_order_outcome_t outcome,
                                 const hg_order_error_t *err)
{
    switch (outcome) {
    case HG_ORDER_CANCELLED:
        count_outcome(c, COMP_CANCEL_DONE);
        log_msg(LOG_LEVEL_INFO, "order %" PRIu64 ": cancelled (%s)", id, c->reason);
        break;
    case HG_ORDER_NOT_PENDING:
        count_outcome(c, COMP_CANCEL_NOT_PENDING);
        log_msg(LOG_LEVEL_DEBUG, "order %" PRIu64 ": not pending, nothing to do (%s)", id, c->reason);
        break;
    case HG_ORDER_NOT_FOUND:
        count_outcome(c, COMP_CANCEL_NOT_FOUND);
        log_msg(LOG_LEVEL_WARN, "order %" PRIu64 ": no such order (%s)", id, c->reason);
        break;
    case HG_ORDER_LOCKED: /* only batches skip */
        count_outcome(c, COMP_CANCEL_LOCKED);
        log_msg(LOG_LEVEL_INFO, "order %" PRIu64 ": locked by another transaction, skipped until next round (%s)", id,
                c->reason);
        break;
    case HG_ORDER_TRANSIENT:
        if (hg_order_error_is_database(err->code)) /* a rotated password refused (1045), a lost connection … */
            comp_db_password_refresh();
        count_outcome(c, COMP_CANCEL_TRANSIENT);
        if (hg_order_error_is_database(err->code)) /* the same for every order: at most once per 10 s */
            log_limit_fail(&db_log, LOG_LEVEL_WARN, err->message,
                           "order %" PRIu64 ": transient failure, retried next round (%s): %s", id, c->reason,
                           err->message);
        else
            log_msg(LOG_LEVEL_WARN, "order %" PRIu64 ": transient failure, retried next round (%s): %s", id, c->reason,
                    err->message);
        break;
    case HG_ORDER_PAID: /* not an outcome of a cancel */
    case HG_ORDER_PERMANENT:
        /* Once at error (again when its error changes, or an hour on): the
         * same failure every round of two layers buried the log. */
        outcome = HG_ORDER_PERMANENT;
        count_outcome(c, COMP_CANCEL_PERMANENT);
        if (comp_stuck_failed(id, err, clock_mono_ms()))
            log_msg(LOG_LEVEL_ERROR,
                    "order %" PRIu64 ": cancel failed permanently (%s): %s — tried again after "
                    "permanent-failure-backoff (doubled), logged again when "
                    "its error changes or in an hour (hourglass_compensator_orders_failing_permanently)",
                    id, c->reason, err->message);
        else
            log_msg(LOG_LEVEL_DEBUG, "order %" PRIu64 ": cancel failed permanently again (%s): %s", id, c->reason,
                    err->message);
        break;
    }
    if (outcome == HG_ORDER_CANCELLED || outcome == HG_ORDER_NOT_PENDING || outcome == HG_ORDER_NOT_FOUND) {
        comp_stuck_settled(id);
        log_limit_ok(&db_log);
    }
    return outcome;
}

hg_order_outcome_t comp_cancel(comp_canceller_t *c, uint64_t order_id, hg_order_error_t *err)
{
    hg_order_error_t local;
    hg_order_outcome_t outcome;

    if (err == NULL)
        err = &local;
    if (ensure_db(c, err) < 0)
        return open_failed(c, err);
    uint64_t unknown = hg_order_db_commits_unknown(c->db);
    hg_order_cancel(c->db, order_id, c->reason, &outcome, err);
    count_unknown_commits(c, unknown);
    return record(c, order_id, outcome, err);
}

/* items[0..n) not attempted because the compensator is stopping: left as
 * they are (LOCKED: nothing changed, the next start tries them again). */
static void not_attempted(hg_order_batch_item_t *items, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        items[i].outcome = HG_ORDER_LOCKED;
        memset(&items[i].error, 0, sizeof items[i].error);
        snprintf(items[i].error.message, sizeof items[i].error.message, "not attempted: the compensator is stopping");
    }
}

/* Move the items whose order is in its pause after a permanent failure
 * (stuck.h) to the end of items[0..n), each PERMANENT with its last error,
 * neither counted nor logged again; return how many are left to try. */
static size_t set_aside_deferred(hg_order_batch_item_t *items, size_t n)
{
    uint64_t now = clock_mono_ms();
    size_t keep = n;
    for (size_t i = 0; i < keep;) {
        hg_order_error_t e;
        if (!comp_stuck_deferred(items[i].order_id, now, &e)) {
            i++;
            continue;
        }
        hg_order_batch_item_t t = items[i]; /* the last kept one is looked at next, in its place */
        items[i] = items[keep - 1];
        items[--keep] = t;
        items[keep].outcome = HG_ORDER_PERMANENT;
        items[keep].error = e;
    }
    return keep;
}

void comp_cancel_many(comp_canceller_t *c, hg_order_batch_item_t *items, size_t n)
{
    hg_order_error_t err;

    n = set_aside_deferred(items, n); /* the rest of the array is filled */

    /* A stop is looked for before every transaction: a page of 200 orders,
     * one transaction each, each waiting out a lock (mysql-lock-wait-timeout),
     * held SIGTERM up to 200 waits. */
    if (c->batch_size == 1) { /* one transaction per order, as before batches */
        for (size_t i = 0; i < n; i++) {
            if (comp_stopping()) {
                not_attempted(items + i, n - i);
                return;
            }
            items[i].outcome = comp_cancel(c, items[i].order_id, &items[i].error);
            comp_progress(); /* a transaction: a step for /healthz */
        }
        return;
    }
    int opened = ensure_db(c, &err);
    comp_progress();
    if (opened < 0) {
        for (size_t i = 0; i < n; i++) {
            items[i].outcome = open_failed(c, &err);
            items[i].error = err;
        }
        return;
    }
    size_t done = 0;
    for (; done < n && !comp_stopping(); done += c->batch_size) {
        size_t len = n - done < c->batch_size ? n - done : c->batch_size;
        uint64_t unknown = hg_order_db_commits_unknown(c->db);
        hg_order_cancel_batch(c->db, items + done, len, c->reason, NULL);
        count_unknown_commits(c, unknown);
        comp_progress();
    }
    done = done < n ? done : n;
    not_attempted(items + done, n - done);
    for (size_t i = 0; i < done; i++)
        items[i].outcome = record(c, items[i].order_id, items[i].outcome, &items[i].error);
}

int comp_cancel_lock_conflict(hg_order_outcome_t outcome, const hg_order_error_t *err)
{
    return outcome == HG_ORDER_TRANSIENT && err != NULL &&
           (err->code == ER_LOCK_WAIT_TIMEOUT || err->code == ER_LOCK_DEADLOCK);
}

int comp_cancel_failure(uint64_t order_id, const hg_order_error_t *err, char *first, size_t firstlen)
{
    if (first[0] == '\0')
        snprintf(first, firstlen, "order %" PRIu64 ": %.360s", order_id, err->message);
    return db_is_client_error(err->code);
}
