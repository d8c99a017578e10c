/*
 * compensator/overdue.c — the overdue-outbox layer (contract: overdue.h).
 *
 * Connections, both used by the layer's one thread: a db_conn_t for the
 * pages and the closing of rows (autocommit), and an hg_order_db through
 * comp_canceller_t for the cancels.
 */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include "compensator/overdue.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "common/log.h"
#include "compensator/cancel.h"
#include "compensator/page.h"
#include "compensator/stats.h"
#include "compensator/stop.h"
#include "db/conn.h"
#include "db/keys.h"

struct comp_overdue {
    db_conn_t *db;
    comp_canceller_t canceller;
    comp_pager_t pager;
    db_stmt_t close_stmt;
    hg_order_batch_item_t *items; /* one page of them */
};

static const char page_sql[] = "SELECT order_id, expire_at FROM order_timeout_msg"
                               " WHERE status IN ('new', 'sent') AND expire_at < ? AND expire_at >= ?"
                               " AND (expire_at > ? OR order_id > ?)"
                               " ORDER BY expire_at, order_id LIMIT ?";

/* Only after hg_order_cancel found the order not pending (final) or absent. */
static const char close_sql[] =
    "UPDATE order_timeout_msg SET status = 'done', last_error = ? WHERE order_id = ? AND status <> 'done'";

comp_overdue_t *comp_overdue_new(const comp_config_t *cfg, const hg_order_db_params_t *params)
{
    comp_overdue_t *o = xcalloc(1, sizeof *o);
    o->db = db_conn_new(params, "overdue", DB_AUTOCOMMIT | DB_READ_COMMITTED);
    comp_stop_watch_conn(o->db);
    comp_canceller_init(&o->canceller, params, COMP_CANCELLER_OVERDUE, COMP_REASON_OVERDUE, cfg->cancel_batch,
                        db_keys_seconds(cfg->mysql_idle_transaction_timeout_ms));
    o->items = xcalloc(cfg->overdue_batch, sizeof *o->items);
    comp_pager_init(&o->pager, o->db, "overdue", page_sql, cfg->overdue_grace_ms * 1000u, cfg->overdue_batch);
    o->close_stmt = (db_stmt_t){ "overdue-close", close_sql, 0, NULL };
    return o;
}

void comp_overdue_free(comp_overdue_t *o)
{
    if (o == NULL)
        return;
    comp_canceller_close(&o->canceller);
    comp_stop_unwatch(o->db);
    db_conn_free(o->db);
    comp_pager_free(&o->pager);
    free(o->items);
    free(o);
}

/* Mark the row of an order that is no longer pending (or absent) 'done'.
 * Returns 1 when it closed it, 0 when it was 'done' already (the transaction
 * that settled the order closed it after the page was read), -1 on error. */
static int close_row(comp_overdue_t *o, uint64_t order_id, const char *note, hg_order_error_t *err)
{
    MYSQL_BIND params[2];
    unsigned long len;
    db_bind_str(&params[0], note, &len);
    db_bind_u64(&params[1], &order_id);
    MYSQL_STMT *st = db_exec(o->db, &o->close_stmt, params, 2, NULL, err);
    comp_progress(); /* a step, for /healthz's stuck check */
    if (st == NULL)
        return -1;
    if (mysql_stmt_affected_rows(st) != 1)
        return 0;
    comp_count(&comp_stats.outbox_closed, 1);
    return 1;
}

comp_run_outcome_t comp_overdue_run(comp_overdue_t *o, char *errbuf, size_t errlen)
{
    hg_order_error_t err;
    memset(&err, 0, sizeof err);
    errbuf[0] = '\0';
    if (comp_pager_start(&o->pager, &err) != 0) {
        snprintf(errbuf, errlen, "%s", err.message);
        log_msg(LOG_LEVEL_WARN, "overdue outbox: failed: %s", errbuf);
        return COMP_RUN_FAILED;
    }
    uint64_t rows = 0, cancelled = 0, closed = 0, failed = 0, skipped = 0;
    char first_failure[400] = "";
    comp_run_outcome_t outcome = COMP_RUN_OK;

    while (outcome == COMP_RUN_OK && !comp_stopping()) {
        long n = comp_pager_next(&o->pager, &err);
        if (n < 0) {
            snprintf(errbuf, errlen, "%s", err.message);
            outcome = COMP_RUN_FAILED;
            break;
        }
        rows += (uint64_t)n;
        if (n == 0 || comp_stopping())
            break;
        /* The whole page at once; the scan goes on past whatever was locked
         * or failed (the next round starts at the oldest again and retries it). */
        for (long i = 0; i < n; i++)
            o->items[i] = (hg_order_batch_item_t){ .order_id = o->pager.rows[i].id };
        comp_pager_advance(&o->pager, n - 1);
        comp_cancel_many(&o->canceller, o->items, (size_t)n);
        for (long i = 0; i < n; i++) {
            uint64_t id = o->items[i].order_id;
            hg_order_error_t cerr = o->items[i].error;
            hg_order_outcome_t r = o->items[i].outcome;
            if (r == HG_ORDER_CANCELLED) {
                cancelled++;
            } else if (r == HG_ORDER_NOT_PENDING || r == HG_ORDER_NOT_FOUND) {
                const char *note = r == HG_ORDER_NOT_FOUND ? "closed by hourglass-compensator: no such order"
                                                           : "closed by hourglass-compensator: order not pending";
                int rc = close_row(o, id, note, &cerr);
                if (rc >= 0) {
                    closed += (uint64_t)rc; /* as outbox_closed_total: rows this layer closed */
                    continue;
                }
                r = hg_order_classify(cerr.code);
            }
            if (r == HG_ORDER_LOCKED || comp_cancel_lock_conflict(r, &cerr)) {
                skipped++; /* another transaction holds what it needs: next round */
                continue;
            }
            if (r == HG_ORDER_TRANSIENT || r == HG_ORDER_PERMANENT) {
                failed++;
                if (comp_cancel_failure(id, &cerr, first_failure, sizeof first_failure)) {
                    snprintf(errbuf, errlen, "%s", first_failure);
                    outcome = COMP_RUN_FAILED;
                    break;
                }
            }
        }
        if ((uint64_t)n < o->pager.page_size)
            break;
    }
    if (outcome == COMP_RUN_OK && failed > 0) {
        snprintf(errbuf, errlen, "%" PRIu64 " of %" PRIu64 " overdue rows failed, first: %s", failed, rows,
                 first_failure);
        outcome = COMP_RUN_FAILED;
    }
    log_msg(outcome != COMP_RUN_OK   ? LOG_LEVEL_WARN
            : cancelled + closed > 0 ? LOG_LEVEL_INFO
                                     : LOG_LEVEL_DEBUG,
            "overdue outbox: %s; %" PRIu64 " rows past expire_at + grace, %" PRIu64 " cancelled, %" PRIu64
            " closed (order not pending), %" PRIu64 " skipped (locked), %" PRIu64 " failed%s%s",
            comp_run_outcome_name(outcome), rows, cancelled, closed, skipped, failed, errbuf[0] ? ": " : "", errbuf);
    return outcome;
}
