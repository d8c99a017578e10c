/*
 * lib/order_view.c — the order view's reads on MariaDB (contract:
 * include/hourglass/order_view.h): overdue orders in keyset pages, the
 * pending / overdue counts, one order with its items, the manual cancel;
 * and hg_order_age_text, the view's durations in words, which
 * order_view_broker.c (a message's times) and order_view_explain.c (the
 * verdicts) both use: here, below both, neither of them needs the other's.
 *
 * Text queries with only integers and a validated cursor formatted in (no
 * caller string reaches the SQL), one round trip each, on the handle's
 * connection (db/conn.h). The handle runs with autocommit off, so every read
 * ends with a ROLLBACK: a REPEATABLE READ snapshot left open would hide the
 * next cancel from the next read.
 *
 * The overdue page reads `orders` by (status, expire_at) — the status_expire
 * index of the reference schema — from the keyset position on; the outbox
 * row comes by primary key through the LEFT JOIN.
 *
 * Threads: the handle's (one thread at a time); hg_order_age_text is pure.
 */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include "include/hourglass/order_view.h"

#include <ctype.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/buf.h"
#include "db/conn.h"
#include "lib/order_sql.h"

/* The columns of an order row, in the order row_parse reads them. A printf
 * format (its %% are doubled): every query is built with one. */
#define VIEW_COLUMNS                                                                                                \
    "o.id, o.user_id, o.status, FLOOR(UNIX_TIMESTAMP(o.created_at) * 1000), "                                       \
    "FLOOR(UNIX_TIMESTAMP(o.expire_at) * 1000), FLOOR(UNIX_TIMESTAMP(o.paid_at) * 1000), "                          \
    "FLOOR(UNIX_TIMESTAMP(o.cancelled_at) * 1000), o.cancel_reason, "                                               \
    "TIMESTAMPDIFF(MICROSECOND, o.expire_at, NOW(6)) DIV 1000, DATE_FORMAT(o.expire_at, '%%Y%%m%%d%%H%%i%%s%%f'), " \
    "m.status, m.attempts, FLOOR(UNIX_TIMESTAMP(m.next_attempt_at) * 1000), m.last_error "                          \
    "FROM orders o LEFT JOIN order_timeout_msg m ON m.order_id = o.id "
#define VIEW_NCOLUMNS 14

static uint64_t col_u64(MYSQL_ROW row, int i)
{
    return row[i] != NULL ? strtoull(row[i], NULL, 10) : 0;
}

static void col_str(MYSQL_ROW row, int i, char *out, size_t len)
{
    snprintf(out, len, "%s", row[i] != NULL ? row[i] : "");
}

static void row_parse(MYSQL_ROW row, hg_order_info_t *o)
{
    memset(o, 0, sizeof *o);
    o->id = col_u64(row, 0);
    o->user_id = col_u64(row, 1);
    col_str(row, 2, o->status, sizeof o->status);
    o->created_ms = col_u64(row, 3);
    o->expire_ms = col_u64(row, 4);
    o->paid_ms = col_u64(row, 5);
    o->cancelled_ms = col_u64(row, 6);
    col_str(row, 7, o->cancel_reason, sizeof o->cancel_reason);
    o->overdue_ms = row[8] != NULL ? strtoll(row[8], NULL, 10) : 0;
    snprintf(o->cursor, sizeof o->cursor, "%s-%" PRIu64, row[9] != NULL ? row[9] : "", o->id);
    o->has_outbox = row[10] != NULL;
    col_str(row, 10, o->outbox_status, sizeof o->outbox_status);
    o->outbox_attempts = (unsigned)col_u64(row, 11);
    o->outbox_next_attempt_ms = col_u64(row, 12);
    col_str(row, 13, o->outbox_last_error, sizeof o->outbox_last_error);
}

/* Run a query on the handle's connection and buffer its result. NULL with
 * err (the connection closed when lost). */
static MYSQL_RES *view_query(db_conn_t *c, const char *what, const char *sql, hg_order_error_t *err)
{
    if (db_connect(c, err) != 0)
        return NULL;
    MYSQL *m = db_mysql(c);
    if (mysql_query(m, sql) != 0) {
        db_fail(c, what, NULL, err);
        db_rollback(c);
        return NULL;
    }
    MYSQL_RES *res = mysql_store_result(m);
    if (res == NULL) {
        if (mysql_errno(m) != 0)
            db_fail(c, what, NULL, err);
        else
            db_error_set(err, "%s: the query returned no result set", what);
        db_rollback(c);
        return NULL;
    }
    return res;
}

/* "YYYYMMDDHHMMSSffffff-ID" → "YYYY-MM-DD HH:MM:SS.ffffff" and the id.
 * Returns 0 / -1. */
static int cursor_parse(const char *cursor, char *datetime, size_t len, uint64_t *id)
{
    const char *dash = strchr(cursor, '-');
    if (dash == NULL || dash - cursor != 20 || dash[1] == '\0' || strlen(dash + 1) > 20)
        return -1;
    for (const char *p = cursor; *p != '\0'; p++)
        if (p != dash && !isdigit((unsigned char)*p))
            return -1;
    const char *s = cursor;
    snprintf(datetime, len, "%.4s-%.2s-%.2s %.2s:%.2s:%.2s.%.6s", s, s + 4, s + 6, s + 8, s + 10, s + 12, s + 14);
    *id = strtoull(dash + 1, NULL, 10);
    return 0;
}

int hg_order_overdue(hg_order_db *db, uint64_t older_than_ms, const char *after, size_t limit, hg_order_info_t *rows,
                     size_t *n, char *next, hg_order_error_t *err)
{
    char position[64];
    uint64_t after_id = 0;

    *n = 0;
    next[0] = '\0';
    if (db == NULL) {
        db_error_set(err, "overdue orders: no database handle");
        return -1;
    }
    if (limit == 0 || limit > HG_ORDER_PAGE_MAX) {
        db_error_set(err, "overdue orders: limit %zu out of range 1..%d", limit, HG_ORDER_PAGE_MAX);
        return -1;
    }
    if (older_than_ms > UINT64_MAX / 1000) {
        db_error_set(err, "overdue orders: older-than %" PRIu64 " ms is too large", older_than_ms);
        return -1;
    }
    int have_after = after != NULL && after[0] != '\0';
    if (have_after && cursor_parse(after, position, sizeof position, &after_id) < 0) {
        db_error_set(err, "overdue orders: bad cursor '%.60s' (want YYYYMMDDHHMMSSffffff-ID as a page returned it)",
                     after);
        return -1;
    }
    buf_t sql = BUF_INIT;
    buf_printf(&sql,
               "SELECT " VIEW_COLUMNS "WHERE o.status = 'pending' AND o.expire_at < NOW(6) - INTERVAL %" PRIu64
               " MICROSECOND",
               older_than_ms * 1000);
    if (have_after)
        buf_printf(&sql, " AND (o.expire_at > '%s' OR (o.expire_at = '%s' AND o.id > %" PRIu64 "))", position, position,
                   after_id);
    buf_printf(&sql, " ORDER BY o.expire_at, o.id LIMIT %zu", limit + 1);

    db_conn_t *c = order_db_conn(db);
    MYSQL_RES *res = view_query(c, "overdue orders", buf_cstr(&sql), err);
    buf_free(&sql);
    if (res == NULL)
        return -1;
    MYSQL_ROW row;
    size_t got = 0;
    while ((row = mysql_fetch_row(res)) != NULL) {
        if (got < limit)
            row_parse(row, &rows[got]);
        got++;
    }
    mysql_free_result(res);
    db_rollback(c);
    *n = got < limit ? got : limit;
    if (got > limit)
        snprintf(next, HG_ORDER_CURSOR_MAX, "%s", rows[limit - 1].cursor);
    return 0;
}

int hg_order_counts(hg_order_db *db, uint64_t older_than_ms, uint64_t *pending, uint64_t *overdue,
                    hg_order_error_t *err)
{
    char sql[256];

    if (db == NULL || older_than_ms > UINT64_MAX / 1000) {
        db_error_set(err, "order counts: %s", db == NULL ? "no database handle" : "older-than too large");
        return -1;
    }
    snprintf(sql, sizeof sql,
             "SELECT COUNT(*), COUNT(CASE WHEN expire_at < NOW(6) - INTERVAL %" PRIu64
             " MICROSECOND THEN 1 END) FROM orders WHERE status = 'pending'",
             older_than_ms * 1000);
    db_conn_t *c = order_db_conn(db);
    MYSQL_RES *res = view_query(c, "order counts", sql, err);
    if (res == NULL)
        return -1;
    MYSQL_ROW row = mysql_fetch_row(res);
    *pending = row != NULL ? col_u64(row, 0) : 0;
    *overdue = row != NULL ? col_u64(row, 1) : 0;
    mysql_free_result(res);
    db_rollback(c);
    return 0;
}

int hg_order_lookup(hg_order_db *db, uint64_t id, hg_order_info_t *out, hg_order_item_t *items, size_t max_items,
                    size_t *nitems, hg_order_error_t *err)
{
    char sql[1024];

    if (nitems != NULL)
        *nitems = 0;
    if (db == NULL) {
        db_error_set(err, "order %" PRIu64 ": no database handle", id);
        return -1;
    }
    db_conn_t *c = order_db_conn(db);
    snprintf(sql, sizeof sql, "SELECT " VIEW_COLUMNS "WHERE o.id = %" PRIu64, id);
    MYSQL_RES *res = view_query(c, "order lookup", sql, err);
    if (res == NULL)
        return -1;
    MYSQL_ROW row = mysql_fetch_row(res);
    if (row == NULL) {
        mysql_free_result(res);
        db_rollback(c);
        return 0;
    }
    row_parse(row, out);
    mysql_free_result(res);
    if (max_items > 0) {
        snprintf(sql, sizeof sql, "SELECT sku_id, qty FROM order_items WHERE order_id = %" PRIu64 " ORDER BY sku_id",
                 id);
        if ((res = view_query(c, "order items", sql, err)) == NULL)
            return -1;
        size_t k = 0;
        while ((row = mysql_fetch_row(res)) != NULL && k < max_items) {
            items[k].sku_id = col_u64(row, 0);
            items[k].qty = row[1] != NULL ? strtoll(row[1], NULL, 10) : 0;
            k++;
        }
        mysql_free_result(res);
        if (nitems != NULL)
            *nitems = k;
    }
    db_rollback(c);
    return 1;
}

int hg_order_manual_cancel(hg_order_db *db, uint64_t id, const char *reason, hg_order_outcome_t *outcome,
                           hg_order_error_t *err)
{
    return hg_order_cancel(db, id, reason != NULL && reason[0] != '\0' ? reason : HG_ORDER_REASON_MANUAL, outcome, err);
}

char *hg_order_age_text(int64_t ms, char *buf, size_t len)
{
    /* the magnitude in uint64_t: -INT64_MIN does not fit an int64_t */
    uint64_t s = (ms < 0 ? UINT64_C(0) - (uint64_t)ms : (uint64_t)ms) / 1000;
    const char *sign = ms <= -1000 ? "-" : "";

    if (s < 60)
        snprintf(buf, len, "%s%" PRIu64 "s", sign, s);
    else if (s < 3600)
        snprintf(buf, len, "%s%" PRIu64 "m%02" PRIu64 "s", sign, s / 60, s % 60);
    else if (s < 86400)
        snprintf(buf, len, "%s%" PRIu64 "h%02" PRIu64 "m", sign, s / 3600, s % 3600 / 60);
    else
        snprintf(buf, len, "%s%" PRIu64 "d%02" PRIu64 "h", sign, s / 86400, s % 86400 / 3600);
    return buf;
}
