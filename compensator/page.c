/*
 * compensator/page.c — keyset pages of overdue rows (contract: page.h).
 *
 * Runs on the owning layer's thread. A page is read completely
 * (store_result in db_exec) before the layer handles its rows.
 */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include "compensator/page.h"

#include <stdio.h>
#include <stdlib.h>

#include "base/alloc.h"
#include "compensator/stats.h"

void comp_pager_init(comp_pager_t *p, db_conn_t *db, const char *layer, const char *page_sql, uint64_t grace_us,
                     uint64_t page_size)
{
    *p = (comp_pager_t){ .db = db, .layer = layer, .grace_us = grace_us, .page_size = page_size };
    snprintf(p->cutoff_name, sizeof p->cutoff_name, "%s-cutoff", layer);
    snprintf(p->page_name, sizeof p->page_name, "%s-page", layer);
    p->cutoff_stmt = (db_stmt_t){ p->cutoff_name, "SELECT NOW(6) - INTERVAL ? MICROSECOND", 0, NULL };
    p->page_stmt = (db_stmt_t){ p->page_name, page_sql, 0, NULL };
    p->rows = xcalloc(page_size, sizeof *p->rows);
}

void comp_pager_free(comp_pager_t *p)
{
    free(p->rows);
    p->rows = NULL;
}

int comp_pager_start(comp_pager_t *p, hg_order_error_t *err)
{
    MYSQL_BIND param, result;
    uint64_t grace = p->grace_us;
    db_drop_if_closed(p->db); /* idle since the last round: the server may have closed it (wait_timeout) */
    db_bind_u64(&param, &grace);
    db_bind_time(&result, &p->cutoff);
    MYSQL_STMT *st = db_exec(p->db, &p->cutoff_stmt, &param, 1, &result, err);
    if (st == NULL)
        return -1;
    int rc = mysql_stmt_fetch(st);
    mysql_stmt_free_result(st);
    if (rc != 0 && rc != MYSQL_DATA_TRUNCATED) {
        snprintf(err->message, sizeof err->message, "%s: the cutoff query returned no row", p->layer);
        return -1;
    }
    p->last_exp = (MYSQL_TIME){ .year = 1000, .month = 1, .day = 1, .time_type = MYSQL_TIMESTAMP_DATETIME };
    p->last_id = 0;
    return 0;
}

long comp_pager_next(comp_pager_t *p, hg_order_error_t *err)
{
    MYSQL_BIND params[5], result[2];
    uint64_t limit = p->page_size;
    db_bind_time(&params[0], &p->cutoff);
    db_bind_time(&params[1], &p->last_exp);
    db_bind_time(&params[2], &p->last_exp);
    db_bind_u64(&params[3], &p->last_id);
    db_bind_u64(&params[4], &limit);
    uint64_t id;
    MYSQL_TIME exp;
    db_bind_u64(&result[0], &id);
    db_bind_time(&result[1], &exp);
    MYSQL_STMT *st = db_exec(p->db, &p->page_stmt, params, 5, result, err);
    if (st == NULL)
        return -1;
    long n = 0;
    int rc;
    while ((rc = mysql_stmt_fetch(st)) == 0 || rc == MYSQL_DATA_TRUNCATED)
        if ((uint64_t)n < p->page_size) {
            p->rows[n].id = id;
            p->rows[n].expire_at = exp;
            n++;
        }
    if (db_fetch_end(p->db, &p->page_stmt, st, rc, err) != 0)
        return -1;
    comp_progress(); /* a step, for /healthz's stuck check */
    return n;
}

void comp_pager_advance(comp_pager_t *p, long i)
{
    p->last_exp = p->rows[i].expire_at;
    p->last_id = p->rows[i].id;
}
