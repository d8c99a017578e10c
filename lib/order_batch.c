/*
 * lib/order_batch.c — hg_order_cancel_batch: many orders cancelled in one
 * transaction, each claimed on its own row (contract and the statements:
 * include/hourglass/order.h, "batch cancel"; the why: docs/order-cancel.md).
 *
 * Two forms of one transaction:
 *   set-based   the handle runs the reference schema's SQL: a claim read
 *               FOR UPDATE SKIP LOCKED over the whole batch, then one
 *               statement per table (orders, stock summed per SKU in SKU
 *               order, outbox), one COMMIT. The ids are integers written
 *               into the text (the IN list varies in length, so these are
 *               text-protocol statements); the reason is escaped by the
 *               client library. Runs READ COMMITTED (SET TRANSACTION, this
 *               transaction only) so the claim read of an absent id takes no
 *               gap lock that would hold up the order service's INSERTs.
 *   per order   configured SQL: the handle's own prepared claim, side
 *               effects and lookup for each order (order_cancel.c's steps),
 *               one COMMIT.
 * A failed transaction is rolled back and retried as two halves, down to
 * single orders (run_batch): whatever fails alone is that order's outcome.
 *
 * Invariant: between calls the handle is disconnected or connected with no
 * open transaction (every path ends in COMMIT, ROLLBACK or order_db_abort).
 * The caller's item order is kept; the work runs on an index sorted by
 * order id (rows are locked in id order, duplicates are adjacent).
 *
 * One thread per handle, as every hg_order_* call.
 */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include "lib/order_sql.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <mysqld_error.h>

#include "base/alloc.h"
#include "base/buf.h"

#define ID_TEXT 24 /* "18446744073709551615," and a NUL */

typedef struct batch {
    hg_order_db *db;
    db_conn_t *conn;
    hg_order_batch_item_t *items;
    const char *reason;
    hg_order_batch_stats_t *stats;
    char *text; /* statement buffer, text_size bytes */
    size_t text_size;
} batch_t;

/* ---------------------------------------------------------------- helpers */

static void set_outcome(hg_order_batch_item_t *it, hg_order_outcome_t outcome)
{
    it->outcome = outcome;
    memset(&it->error, 0, sizeof it->error);
}

/* The index sorted by order id, stable by position. */
typedef struct sort_key {
    uint64_t id;
    size_t pos;
} sort_key_t;

static int by_order_id(const void *a, const void *b)
{
    const sort_key_t *x = a, *y = b;
    if (x->id != y->id)
        return x->id < y->id ? -1 : 1;
    return x->pos < y->pos ? -1 : x->pos > y->pos;
}

/* Append "id,id,…" of the selected items (sel[i] != 0 or sel NULL) with
 * distinct ids to b->text after prefix, then suffix. Returns the number of
 * ids written. */
static size_t build_in(batch_t *b, const char *prefix, const size_t *idx, size_t n, const unsigned char *sel,
                       const char *suffix)
{
    size_t o = (size_t)snprintf(b->text, b->text_size, "%s", prefix), count = 0;
    uint64_t last = 0;
    for (size_t k = 0; k < n; k++) {
        if (sel != NULL && !sel[k])
            continue;
        uint64_t id = b->items[idx[k]].order_id;
        if (count > 0 && id == last)
            continue;
        o += (size_t)snprintf(b->text + o, b->text_size - o, "%s%" PRIu64, count > 0 ? "," : "", id);
        last = id;
        count++;
    }
    snprintf(b->text + o, b->text_size - o, "%s", suffix);
    return count;
}

/* Run b->text as a query and buffer its result. NULL with err on failure
 * (db_fail ran). */
static MYSQL_RES *query_rows(batch_t *b, const char *what, hg_order_error_t *err)
{
    MYSQL *m = db_mysql(b->conn);
    if (m == NULL || mysql_query(m, b->text) != 0) {
        db_fail(b->conn, what, NULL, err);
        return NULL;
    }
    MYSQL_RES *res = mysql_store_result(m);
    if (res == NULL)
        db_fail(b->conn, what, NULL, err);
    else
        db_progress(b->conn);
    return res;
}

/* Run b->text as a statement without result; *affected (may be NULL) gets
 * the rows it changed. 0, or -1 with err (db_fail ran). */
static int query_exec(batch_t *b, const char *what, uint64_t *affected, hg_order_error_t *err)
{
    MYSQL *m = db_mysql(b->conn);
    if (m == NULL || mysql_query(m, b->text) != 0) {
        db_fail(b->conn, what, NULL, err);
        return -1;
    }
    if (affected != NULL)
        *affected = mysql_affected_rows(m);
    db_progress(b->conn);
    return 0;
}

/* Position of id among idx[0..n) (sorted by id): the first with that id, or n. */
static size_t find_id(const batch_t *b, const size_t *idx, size_t n, uint64_t id)
{
    size_t lo = 0, hi = n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (b->items[idx[mid]].order_id < id)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo < n && b->items[idx[lo]].order_id == id ? lo : n;
}

/* ---------------------------------------------------------------- set-based */

enum row_state {
    ROW_UNSEEN = 0,
    ROW_CLAIMED,
    ROW_NOT_PENDING,
    ROW_LOCKED,
    ROW_ABSENT
};

/* Read (id, pending) rows of the query in b->text into state[] (the first
 * position of each id). lock_read: rows are from the claim read (pending →
 * claimed), else from the plain read of what it skipped (pending → locked). */
static int read_states(batch_t *b, const char *what, const size_t *idx, size_t n, unsigned char *state, int lock_read,
                       hg_order_error_t *err)
{
    MYSQL_RES *res = query_rows(b, what, err);
    if (res == NULL)
        return -1;
    MYSQL_ROW row;
    while ((row = mysql_fetch_row(res)) != NULL) {
        if (row[0] == NULL || row[1] == NULL)
            continue;
        size_t k = find_id(b, idx, n, strtoull(row[0], NULL, 10));
        if (k == n)
            continue;
        int pending = strcmp(row[1], "1") == 0;
        state[k] = pending ? (lock_read ? ROW_CLAIMED : ROW_LOCKED) : ROW_NOT_PENDING;
    }
    mysql_free_result(res);
    return 0;
}

/* Is v[0..len) a plain number (an optional '-', digits, at most one '.')? */
static int is_number(const char *v, size_t len)
{
    size_t k = len > 0 && v[0] == '-' ? 1 : 0, digits = 0, dots = 0;
    for (; k < len; k++) {
        if (v[k] >= '0' && v[k] <= '9')
            digits++;
        else if (v[k] == '.' && dots++ == 0)
            continue;
        else
            return 0;
    }
    return digits > 0;
}

/* Is the column of type t a number (so its values are written as they are)? */
static int numeric_type(enum enum_field_types t)
{
    switch (t) {
    case MYSQL_TYPE_TINY:
    case MYSQL_TYPE_SHORT:
    case MYSQL_TYPE_INT24:
    case MYSQL_TYPE_LONG:
    case MYSQL_TYPE_LONGLONG:
    case MYSQL_TYPE_DECIMAL:
    case MYSQL_TYPE_NEWDECIMAL:
        return 1;
    default:
        return 0;
    }
}

/* Append v[0..len) to q as an SQL literal: as it is when its column is a
 * number and it is one, else quoted and escaped by the client library, so
 * a text sku_id works and no stored value is ever read as SQL. A column's
 * values are all written one way: a CASE mixing 1 and 'A' compares as
 * numbers and fails on 'A' (1292). */
static void append_literal(MYSQL *m, buf_t *q, const char *v, size_t len, int as_number)
{
    if (as_number && is_number(v, len)) {
        buf_append(q, v, len);
        return;
    }
    char *to = buf_reserve(q, 2 * len + 3);
    to[0] = '\'';
    size_t n = mysql_real_escape_string(m, to + 1, v, (unsigned long)len);
    to[1 + n] = '\'';
    q->len += n + 2;
}

/* Append the SKU column's CASE over the rows (sku, sum) of res. */
static void append_cases(MYSQL *m, buf_t *q, MYSQL_RES *res, int sku_number)
{
    mysql_data_seek(res, 0);
    buf_append_str(q, "CASE sku_id");
    MYSQL_ROW row;
    while ((row = mysql_fetch_row(res)) != NULL) {
        unsigned long *len = mysql_fetch_lengths(res);
        buf_append_str(q, " WHEN ");
        append_literal(m, q, row[0], len[0], sku_number);
        buf_append_str(q, " THEN ");
        if (row[1] != NULL)
            append_literal(m, q, row[1], len[1], 1);
        else
            buf_append_str(q, "0"); /* no quantity: nothing to return */
    }
    buf_append_str(q, " END");
}

/* Return the claimed orders' stock: quantities summed per SKU, one UPDATE
 * whose rows are visited (and locked) in SKU order. The SKUs are written
 * into the text as the server returned them: as they are when sku_id is a
 * number column, quoted and escaped when it is not (a VARCHAR sku_id). */
static int return_stock(batch_t *b, const size_t *idx, size_t n, const unsigned char *claimed, hg_order_error_t *err)
{
    build_in(b, "SELECT sku_id, SUM(qty) FROM order_items WHERE order_id IN (", idx, n, claimed,
             ") AND sku_id IS NOT NULL GROUP BY sku_id ORDER BY sku_id");
    MYSQL_RES *res = query_rows(b, "batch stock sums", err);
    if (res == NULL)
        return -1;
    if (mysql_num_rows(res) == 0) {
        mysql_free_result(res);
        return 0;
    }
    MYSQL *m = db_mysql(b->conn);
    int sku_number = numeric_type(mysql_fetch_field_direct(res, 0)->type);
    buf_t q = BUF_INIT;
    buf_append_str(&q, "UPDATE stock SET available = available + ");
    append_cases(m, &q, res, sku_number);
    buf_append_str(&q, ", reserved = reserved - ");
    append_cases(m, &q, res, sku_number);
    buf_append_str(&q, " WHERE sku_id IN (");
    mysql_data_seek(res, 0);
    MYSQL_ROW row;
    for (int first = 1; (row = mysql_fetch_row(res)) != NULL; first = 0) {
        if (!first)
            buf_append_str(&q, ",");
        append_literal(m, &q, row[0], mysql_fetch_lengths(res)[0], sku_number);
    }
    buf_append_str(&q, ") ORDER BY sku_id");
    mysql_free_result(res);
    char *saved = b->text;
    size_t saved_size = b->text_size;
    b->text = (char *)buf_cstr(&q);
    b->text_size = q.len + 1;
    int rc = query_exec(b, "batch stock", NULL, err);
    b->text = saved;
    b->text_size = saved_size;
    buf_free(&q);
    return rc;
}

/* One set-based transaction over idx[0..n) (distinct-or-duplicate ids, order
 * id 0 excluded). 0 when it ended (committed, or rolled back with nothing to
 * do) with every item's outcome set; -1 with err when it failed (the handle
 * is clean). */
static int attempt_reference(batch_t *b, const size_t *idx, size_t n, hg_order_error_t *err)
{
    unsigned char *state = xcalloc(n, 1);
    int rc = -1;
    if (db_query(b->conn, "SET TRANSACTION ISOLATION LEVEL READ COMMITTED", err) != 0)
        goto out; /* no transaction yet: db_fail closed a lost connection */

    build_in(b, "SELECT id, status = 'pending' FROM orders WHERE id IN (", idx, n, NULL, ") FOR UPDATE SKIP LOCKED");
    if (read_states(b, "batch claim read", idx, n, state, 1, err) != 0)
        goto abort;

    /* What the claim read did not return: locked by another transaction, or absent. */
    unsigned char *unseen = xcalloc(n, 1);
    size_t unseen_count = 0, claimed_count = 0;
    for (size_t k = 0; k < n; k++) {
        int first = k == 0 || b->items[idx[k]].order_id != b->items[idx[k - 1]].order_id;
        if (first && state[k] == ROW_UNSEEN) {
            unseen[k] = 1;
            unseen_count++;
        }
        if (first && state[k] == ROW_CLAIMED)
            claimed_count++;
    }
    if (unseen_count > 0) {
        build_in(b, "SELECT id, status = 'pending' FROM orders WHERE id IN (", idx, n, unseen, ")");
        if (read_states(b, "batch lookup", idx, n, state, 0, err) != 0) {
            free(unseen);
            goto abort;
        }
    }
    free(unseen);

    if (claimed_count > 0) {
        unsigned char *claimed = xcalloc(n, 1);
        for (size_t k = 0; k < n; k++)
            claimed[k] = state[k] == ROW_CLAIMED;
        MYSQL *m = db_mysql(b->conn);
        size_t rlen = b->reason != NULL ? strlen(b->reason) : 0;
        char *prefix = xmalloc(2 * rlen + 128);
        size_t o = (size_t)sprintf(prefix, "UPDATE orders SET status='cancelled', cancelled_at=NOW(6), cancel_reason=");
        if (b->reason != NULL) {
            prefix[o++] = '\'';
            o += mysql_real_escape_string(m, prefix + o, b->reason, (unsigned long)rlen);
            prefix[o++] = '\'';
            prefix[o] = '\0';
        } else {
            o += (size_t)sprintf(prefix + o, "NULL");
        }
        sprintf(prefix + o, " WHERE id IN (");
        build_in(b, prefix, idx, n, claimed, ") AND status='pending'");
        free(prefix);
        uint64_t changed = 0;
        int failed = query_exec(b, "batch claim", &changed, err);
        if (failed == 0 && changed != claimed_count) {
            db_error_set(err, "batch claim: changed %" PRIu64 " rows for %zu claimed orders: rolled back", changed,
                         claimed_count);
            failed = -1;
        }
        if (failed == 0)
            failed = return_stock(b, idx, n, claimed, err);
        if (failed == 0) {
            build_in(b, "UPDATE order_timeout_msg SET status='done' WHERE order_id IN (", idx, n, claimed, ")");
            failed = query_exec(b, "batch outbox", NULL, err);
        }
        free(claimed);
        if (failed != 0)
            goto abort;
        if (db_commit(b->conn, err) != 0) /* outcome unknown when the connection died: the halves tell */
            goto abort;
    } else {
        db_rollback(b->conn); /* only locks on rows that are not pending: nothing to keep */
    }

    for (size_t k = 0; k < n; k++) {
        hg_order_batch_item_t *it = &b->items[idx[k]];
        if (k > 0 && it->order_id == b->items[idx[k - 1]].order_id) { /* a duplicate: as its first */
            hg_order_outcome_t first = b->items[idx[k - 1]].outcome;
            set_outcome(it, first == HG_ORDER_CANCELLED ? HG_ORDER_NOT_PENDING : first);
            continue;
        }
        set_outcome(it, state[k] == ROW_CLAIMED       ? HG_ORDER_CANCELLED
                        : state[k] == ROW_NOT_PENDING ? HG_ORDER_NOT_PENDING
                        : state[k] == ROW_LOCKED      ? HG_ORDER_LOCKED
                                                      : HG_ORDER_NOT_FOUND);
    }
    rc = 0;
    goto out;

abort:
    order_db_abort(b->db, err->code);
out:
    free(state);
    return rc;
}

/* ---------------------------------------------------------------- per order (configured SQL) */

static int attempt_configured(batch_t *b, const size_t *idx, size_t n, hg_order_error_t *err)
{
    size_t sides = order_db_side_count(b->db);
    for (size_t k = 0; k < n; k++) {
        hg_order_batch_item_t *it = &b->items[idx[k]];
        uint64_t rows = 0;
        unsigned code = order_db_execute(b->db, ORDER_STEP_CLAIM, 0, it->order_id, b->reason, &rows, err);
        if (code != 0)
            goto abort;
        if (rows > 1) {
            db_error_set(err,
                         "claim-sql: changed %" PRIu64 " rows for order %" PRIu64
                         ", expected 0 or 1: rolled back (its WHERE must select one order by id and "
                         "status='pending')",
                         rows, it->order_id);
            goto abort;
        }
        if (rows == 1) {
            for (size_t s = 0; s < sides; s++) {
                uint64_t changed;
                if (order_db_execute(b->db, ORDER_STEP_SIDE, s, it->order_id, b->reason, &changed, err) != 0)
                    goto abort;
            }
            set_outcome(it, HG_ORDER_CANCELLED);
            continue;
        }
        uint64_t found = 0;
        if (order_db_execute(b->db, ORDER_STEP_LOOKUP, 0, it->order_id, NULL, &found, err) != 0)
            goto abort;
        set_outcome(it, found > 0 ? HG_ORDER_NOT_PENDING : HG_ORDER_NOT_FOUND);
    }
    if (db_commit(b->conn, err) != 0)
        goto abort;
    return 0;

abort:
    order_db_abort(b->db, err->code);
    return -1;
}

/* ---------------------------------------------------------------- halving */

/* Cancel idx[0..n) in one transaction; when it fails, the two halves the
 * same way, down to single orders, which then carry the failure. */
static void run_batch(batch_t *b, const size_t *idx, size_t n)
{
    hg_order_error_t err;
    memset(&err, 0, sizeof err);
    int unreachable = db_connect(b->conn, &err) != 0;
    if (!unreachable) {
        b->stats->transactions++;
        int rc = order_db_reference(b->db) ? attempt_reference(b, idx, n, &err) : attempt_configured(b, idx, n, &err);
        if (rc == 0) {
            b->stats->committed++;
            return;
        }
    }
    if (unreachable || n == 1) {
        /* Not reaching the server is never the orders' fault: all transient. */
        hg_order_outcome_t outcome = unreachable ? HG_ORDER_TRANSIENT : hg_order_classify(err.code);
        if (!unreachable && err.code == 0)
            outcome = HG_ORDER_PERMANENT; /* ours: a claim that changed several rows */
        for (size_t k = 0; k < n; k++) {
            b->items[idx[k]].outcome = outcome;
            b->items[idx[k]].error = err;
        }
        return;
    }
    b->stats->splits++;
    run_batch(b, idx, n / 2);
    run_batch(b, idx + n / 2, n - n / 2);
}

int hg_order_cancel_batch(hg_order_db *db, hg_order_batch_item_t *items, size_t n, const char *reason,
                          hg_order_batch_stats_t *stats)
{
    if (db == NULL || items == NULL || n == 0 || n > HG_ORDER_BATCH_MAX)
        return -1;
    hg_order_batch_stats_t local;
    memset(&local, 0, sizeof local);
    batch_t b = {
        .db = db, .conn = order_db_conn(db), .items = items, .reason = reason, .stats = stats != NULL ? stats : &local
    };
    size_t *idx = xmalloc(n * sizeof *idx), m = 0;
    sort_key_t *keys = xmalloc(n * sizeof *keys);
    for (size_t i = 0; i < n; i++) {
        if (items[i].order_id == 0) {
            items[i].outcome = HG_ORDER_PERMANENT;
            db_error_set(&items[i].error, "order id 0 is not an order id");
            continue;
        }
        keys[m++] = (sort_key_t){ items[i].order_id, i };
    }
    qsort(keys, m, sizeof *keys, by_order_id);
    for (size_t k = 0; k < m; k++)
        idx[k] = keys[k].pos;
    free(keys);
    b.text_size = m * ID_TEXT + 2 * (reason != NULL ? strlen(reason) : 0) + 512;
    b.text = xmalloc(b.text_size);
    /* A connection the server closed while idle (idle_transaction_timeout,
     * wait_timeout, KILL) is found out here (a poll of its socket, no round
     * trip) rather than by the batch's first statement: a reconnect now,
     * not a failed batch. */
    if (m > 0)
        db_drop_if_closed(b.conn);
    if (m > 0)
        run_batch(&b, idx, m);
    free(b.text);
    free(idx);

    int indefinite = 0;
    for (size_t i = 0; i < n; i++) {
        hg_order_outcome_t o = items[i].outcome;
        if (o == HG_ORDER_LOCKED)
            b.stats->locked++;
        if (o == HG_ORDER_LOCKED || o == HG_ORDER_TRANSIENT || o == HG_ORDER_PERMANENT)
            indefinite++;
    }
    return indefinite;
}
