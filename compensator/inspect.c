/*
 * compensator/inspect.c — the order-table inspection (contract: inspect.h).
 *
 * Connections of the layer, all used by its one thread:
 *   query   comp_db_t: the cutoff and the keyset pages (autocommit, so each
 *           page reads fresh committed data and holds no snapshot);
 *   lock    comp_lock_t: GET_LOCK on its own connection (lock.c);
 *   cancel  hg_order_db via comp_canceller_t (cancel.c).
 * A page is read completely (store_result) before its cancels run.
 */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include "compensator/inspect.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "compensator/cancel.h"
#include "compensator/db.h"
#include "compensator/lock.h"
#include "compensator/log.h"
#include "compensator/stop.h"

typedef struct page_row {
    uint64_t id;
    MYSQL_TIME expire_at;
} page_row_t;

struct comp_inspect {
    comp_db_t *db;
    comp_lock_t *lock;
    comp_canceller_t canceller;
    uint64_t grace_us, page_size, page_pause_ms;
    comp_stmt_t cutoff_stmt, page_stmt;
    page_row_t *rows;
    unsigned long long last_rows;
};

comp_inspect_t *comp_inspect_new(const comp_config_t *cfg, const hg_order_db_params_t *params)
{
    comp_inspect_t *in = calloc(1, sizeof *in);
    if (in == NULL)
        abort();
    in->db = comp_db_new(params, "inspection");
    in->lock = comp_lock_new(params, cfg->effective_lock_name);
    comp_canceller_init(&in->canceller, params, COMP_CANCELLER_INSPECTION, COMP_REASON_INSPECTION);
    in->grace_us = cfg->inspect_grace_ms * 1000u;
    in->page_size = cfg->inspect_page_size;
    in->page_pause_ms = cfg->inspect_page_pause_ms;
    in->cutoff_stmt = (comp_stmt_t){"inspection-cutoff", "SELECT NOW(6) - INTERVAL ? MICROSECOND", NULL};
    in->page_stmt = (comp_stmt_t){"inspection-page", COMP_INSPECT_PAGE_SQL, NULL};
    in->rows = calloc(in->page_size, sizeof *in->rows);
    if (in->rows == NULL)
        abort();
    return in;
}

void comp_inspect_free(comp_inspect_t *in)
{
    if (in == NULL)
        return;
    comp_lock_free(in->lock);
    comp_canceller_close(&in->canceller);
    comp_db_free(in->db);
    free(in->rows);
    free(in);
}

unsigned long long comp_inspect_last_rows(const comp_inspect_t *in)
{
    return in->last_rows;
}

struct st_mysql *comp_inspect_mysql(comp_inspect_t *in)
{
    return comp_db_mysql(in->db);
}

/* The round's cutoff, NOW(6) - grace, from the server's clock (the same clock
 * that wrote expire_at). Returns 0 / -1. */
static int read_cutoff(comp_inspect_t *in, MYSQL_TIME *cutoff, hg_order_error_t *err)
{
    MYSQL_BIND param, result;
    uint64_t grace = in->grace_us;
    comp_bind_u64(&param, &grace);
    comp_bind_time(&result, cutoff);
    MYSQL_STMT *st = comp_db_exec(in->db, &in->cutoff_stmt, &param, 1, &result, err);
    if (st == NULL)
        return -1;
    int rc = mysql_stmt_fetch(st);
    mysql_stmt_free_result(st);
    if (rc != 0 && rc != MYSQL_DATA_TRUNCATED) {
        snprintf(err->message, sizeof err->message, "inspection: the cutoff query returned no row");
        return -1;
    }
    return 0;
}

/* Read one page after (last_exp, last_id) into in->rows. Returns the row
 * count, or -1. */
static long read_page(comp_inspect_t *in, MYSQL_TIME *cutoff, MYSQL_TIME *last_exp, uint64_t *last_id,
                      hg_order_error_t *err)
{
    MYSQL_BIND params[5], result[2];
    uint64_t limit = in->page_size;
    comp_bind_time(&params[0], cutoff);
    comp_bind_time(&params[1], last_exp);
    comp_bind_time(&params[2], last_exp);
    comp_bind_u64(&params[3], last_id);
    comp_bind_u64(&params[4], &limit);
    uint64_t id;
    MYSQL_TIME exp;
    comp_bind_u64(&result[0], &id);
    comp_bind_time(&result[1], &exp);
    MYSQL_STMT *st = comp_db_exec(in->db, &in->page_stmt, params, 5, result, err);
    if (st == NULL)
        return -1;
    long n = 0;
    int rc;
    while ((rc = mysql_stmt_fetch(st)) == 0 || rc == MYSQL_DATA_TRUNCATED) {
        if ((uint64_t)n < in->page_size) {
            in->rows[n].id = id;
            in->rows[n].expire_at = exp;
            n++;
        }
    }
    if (rc == 1) {
        comp_db_fail(in->db, "inspection-page: fetch", st, err);
        if (comp_db_mysql(in->db) != NULL)
            mysql_stmt_free_result(st);
        return -1;
    }
    mysql_stmt_free_result(st);
    return n;
}

comp_run_outcome_t comp_inspect_run(comp_inspect_t *in, char *errbuf, size_t errlen)
{
    hg_order_error_t err;
    memset(&err, 0, sizeof err);
    errbuf[0] = '\0';
    in->last_rows = 0;

    switch (comp_lock_acquire(in->lock, &err)) {
    case COMP_LOCK_HELD:
        break;
    case COMP_LOCK_BUSY:
        comp_count(&comp_stats.lock_busy, 1);
        comp_log(COMP_LOG_DEBUG, "inspection: the lock is held by another instance; skipped");
        return COMP_RUN_SKIPPED;
    case COMP_LOCK_ERROR:
        snprintf(errbuf, errlen, "%s", err.message);
        comp_log(COMP_LOG_WARN, "inspection: failed: %s", errbuf);
        return COMP_RUN_FAILED;
    }

    MYSQL_TIME cutoff;
    if (read_cutoff(in, &cutoff, &err) != 0) {
        snprintf(errbuf, errlen, "%s", err.message);
        comp_log(COMP_LOG_WARN, "inspection: failed: %s", errbuf);
        return COMP_RUN_FAILED;
    }

    comp_count(&comp_stats.scans_started, 1);
    atomic_store_explicit(&comp_stats.scanning, 1, memory_order_relaxed);
    MYSQL_TIME last_exp = {.year = 1000, .month = 1, .day = 1, .time_type = MYSQL_TIMESTAMP_DATETIME};
    uint64_t last_id = 0;
    uint64_t cancelled = 0, failed = 0;
    comp_run_outcome_t outcome = COMP_RUN_OK;
    char first_failure[400] = "";

    for (;;) {
        if (comp_stopping())
            break;
        if (!comp_lock_check(in->lock, &err)) {
            snprintf(errbuf, errlen, "lock lost before a page: %s", err.message);
            outcome = COMP_RUN_LOCK_LOST;
            break;
        }
        long n = read_page(in, &cutoff, &last_exp, &last_id, &err);
        if (n < 0) {
            snprintf(errbuf, errlen, "%s", err.message);
            outcome = COMP_RUN_FAILED;
            break;
        }
        in->last_rows += (unsigned long long)n;
        comp_count(&comp_stats.pages, 1);
        comp_count(&comp_stats.rows_read, (uint64_t)n);
        for (long i = 0; i < n && outcome == COMP_RUN_OK; i++) {
            if (comp_stopping())
                break;
            if (!comp_lock_alive(in->lock)) {
                snprintf(errbuf, errlen, "lock lost during a page after %" PRIu64 " cancels", cancelled);
                outcome = COMP_RUN_LOCK_LOST;
                break;
            }
            last_exp = in->rows[i].expire_at;
            last_id = in->rows[i].id;
            hg_order_error_t cerr;
            hg_order_outcome_t o = comp_cancel(&in->canceller, in->rows[i].id, &cerr);
            if (o == HG_ORDER_CANCELLED)
                cancelled++;
            if (o == HG_ORDER_TRANSIENT || o == HG_ORDER_PERMANENT) {
                failed++;
                if (first_failure[0] == '\0')
                    snprintf(first_failure, sizeof first_failure, "order %" PRIu64 ": %.360s", in->rows[i].id, cerr.message);
                if (comp_cancel_db_unreachable(&cerr)) {
                    snprintf(errbuf, errlen, "%s", first_failure);
                    outcome = COMP_RUN_FAILED;
                }
            }
        }
        if (outcome != COMP_RUN_OK || comp_stopping() || (uint64_t)n < in->page_size)
            break;
        if (in->page_pause_ms > 0 && comp_sleep_ms(in->page_pause_ms))
            break;
    }
    atomic_store_explicit(&comp_stats.scanning, 0, memory_order_relaxed);

    if (outcome == COMP_RUN_OK) {
        comp_count(&comp_stats.scans_completed, 1);
        if (failed > 0) { /* every order was tried; a person must look at the ones that failed */
            snprintf(errbuf, errlen, "%" PRIu64 " cancels failed, first: %s", failed, first_failure);
            outcome = COMP_RUN_FAILED;
        }
    }
    char cut[32];
    comp_log(outcome != COMP_RUN_OK ? COMP_LOG_WARN : cancelled > 0 ? COMP_LOG_INFO : COMP_LOG_DEBUG,
             "inspection: %s; %llu overdue orders read (expire_at < %s), %" PRIu64 " cancelled, %" PRIu64 " failed%s%s",
             comp_run_outcome_name(outcome), in->last_rows, comp_time_format(&cutoff, cut, sizeof cut), cancelled, failed,
             errbuf[0] ? ": " : "", errbuf);
    return outcome;
}
