/*
 * tests/helpers/order_fixture.c — seeding and checking orders on the
 * reference schema, for the order, consumer and compensator tests and the
 * benches (contract: order_fixture.h). Not part of libhourglass.
 *
 * Everything runs plain queries on the caller's connection. of_seed opens
 * its own transaction (START TRANSACTION … COMMIT, ROLLBACK on any failure),
 * so it is one transaction whether the connection autocommits or not;
 * of_check reads in one consistent snapshot and rolls it back. The SQL is
 * built in base/buf.h buffers; out of memory aborts.
 *
 * Thread: the caller's; one connection is used by one thread at a time.
 */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include "tests/helpers/order_fixture.h"

#include <inttypes.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/buf.h"
#include "db/conn.h"

/* ---------------------------------------------------------------- small tools */

/* Run one statement; on failure fill err with what and the server's error. */
static int run(MYSQL *m, const char *what, const char *sql, size_t len, hg_order_error_t *err)
{
    if (mysql_real_query(m, sql, (unsigned long)len) != 0) {
        db_error_mysql(err, what, m, NULL);
        return -1;
    }
    MYSQL_RES *res = mysql_store_result(m); /* statements with a result are discarded */
    if (res != NULL)
        mysql_free_result(res);
    return 0;
}

/* Run a query that returns one row of integers (NULL reads as 0) into v[n]. */
static int query_ints(MYSQL *m, const char *what, const char *sql, int64_t *v, unsigned n, hg_order_error_t *err)
{
    if (mysql_query(m, sql) != 0) {
        db_error_mysql(err, what, m, NULL);
        return -1;
    }
    MYSQL_RES *res = mysql_store_result(m);
    if (res == NULL) {
        db_error_mysql(err, what, m, NULL);
        return -1;
    }
    MYSQL_ROW row = mysql_fetch_row(res);
    if (row == NULL || mysql_num_fields(res) < n) {
        mysql_free_result(res);
        db_error_set(err, "%s: expected one row of %u columns", what, n);
        return -1;
    }
    for (unsigned i = 0; i < n; i++)
        v[i] = row[i] != NULL ? strtoll(row[i], NULL, 10) : 0;
    mysql_free_result(res);
    return 0;
}

/* Run a query and write its first row as "col=value, …" into buf ("" if none). */
static int query_example(MYSQL *m, const char *sql, char *buf, size_t buflen)
{
    buf[0] = '\0';
    if (mysql_query(m, sql) != 0)
        return -1;
    MYSQL_RES *res = mysql_store_result(m);
    if (res == NULL)
        return -1;
    MYSQL_ROW row = mysql_fetch_row(res);
    if (row != NULL) {
        MYSQL_FIELD *fields = mysql_fetch_fields(res);
        size_t o = 0;
        for (unsigned i = 0; i < mysql_num_fields(res) && o < buflen; i++) {
            int w = snprintf(buf + o, buflen - o, "%s%s=%s", i ? ", " : "", fields[i].name,
                             row[i] != NULL ? row[i] : "NULL");
            if (w < 0)
                break;
            o += (size_t)w;
        }
    }
    mysql_free_result(res);
    return 0;
}

/* ---------------------------------------------------------------- seed */

/* splitmix64: a small, good, reproducible generator. */
static uint64_t next_random(uint64_t *state)
{
    uint64_t z = (*state += UINT64_C(0x9E3779B97F4A7C15));
    z = (z ^ (z >> 30)) * UINT64_C(0xBF58476D1CE4E5B9);
    z = (z ^ (z >> 27)) * UINT64_C(0x94D049BB133111EB);
    return z ^ (z >> 31);
}

#define SEED_BATCH 500 /* orders per INSERT */

int of_seed(MYSQL *m, const of_seed_spec_t *spec, hg_order_error_t *err)
{
    if (spec == NULL || spec->max_items < 1 || spec->max_qty < 1 || spec->skus < spec->max_items ||
        spec->max_items > 64 || spec->first_id == 0 || spec->stock_per_sku < 0) {
        db_error_set(err, "seed: bad spec (need first_id >= 1, 1 <= max_items <= 64, "
                          "skus >= max_items, max_qty >= 1, stock_per_sku >= 0)");
        return -1;
    }
    buf_t sql = BUF_INIT, items = BUF_INIT, outbox = BUF_INIT;
    uint64_t rng = spec->random_seed;
    int rc = -1;
    static const char begin[] = "START TRANSACTION"; /* one transaction, whatever the autocommit mode */
    if (run(m, "seed: start transaction", begin, sizeof begin - 1, err) != 0)
        return -1;

    /* Stock rows that do not exist yet. */
    for (unsigned k = 0; k < spec->skus; k += 1000) {
        buf_clear(&sql);
        buf_printf(&sql, "INSERT INTO stock (sku_id, received, available, reserved, sold) VALUES ");
        for (unsigned j = k; j < spec->skus && j < k + 1000; j++)
            buf_printf(&sql, "%s(%" PRIu64 ", %" PRId64 ", %" PRId64 ", 0, 0)", j > k ? "," : "", spec->first_sku + j,
                       spec->stock_per_sku, spec->stock_per_sku);
        buf_printf(&sql, " ON DUPLICATE KEY UPDATE sku_id = sku_id");
        if (run(m, "seed: stock rows", sql.data, sql.len, err) != 0)
            goto out;
    }

    for (size_t first = 0; first < spec->orders; first += SEED_BATCH) {
        size_t last = first + SEED_BATCH < spec->orders ? first + SEED_BATCH : spec->orders;
        buf_clear(&sql);
        buf_clear(&items);
        buf_clear(&outbox);
        buf_printf(&sql, "INSERT INTO orders (id, user_id, status, created_at, expire_at) VALUES ");
        buf_printf(&items, "INSERT INTO order_items (order_id, sku_id, qty) VALUES ");
        buf_printf(&outbox, "INSERT INTO order_timeout_msg (order_id, expire_at, status, attempts, "
                            "next_attempt_at) VALUES ");
        for (size_t i = first; i < last; i++) {
            uint64_t id = spec->first_id + i;
            char expire[96];
            snprintf(expire, sizeof expire, "NOW(6) + INTERVAL %" PRId64 " MICROSECOND", spec->expire_in_ms * 1000);
            buf_printf(&sql, "%s(%" PRIu64 ", %" PRIu64 ", 'pending', NOW(6), %s)", i > first ? "," : "", id,
                       1000 + next_random(&rng) % 100000, expire);
            if (spec->with_outbox)
                buf_printf(&outbox, "%s(%" PRIu64 ", %s, 'sent', 1, %s)", i > first ? "," : "", id, expire, expire);
            unsigned count = 1 + (unsigned)(next_random(&rng) % spec->max_items);
            uint64_t chosen[64];
            for (unsigned c = 0; c < count; c++) {
                uint64_t sku;
                int dup;
                do { /* distinct SKUs per order: order_items' key is (order_id, sku_id) */
                    sku = spec->first_sku + next_random(&rng) % spec->skus;
                    dup = 0;
                    for (unsigned d = 0; d < c; d++)
                        dup |= chosen[d] == sku;
                } while (dup);
                chosen[c] = sku;
                unsigned qty = 1 + (unsigned)(next_random(&rng) % spec->max_qty);
                buf_printf(&items, "%s(%" PRIu64 ", %" PRIu64 ", %u)", i > first || c > 0 ? "," : "", id, sku, qty);
            }
        }
        if (run(m, "seed: orders", sql.data, sql.len, err) != 0 ||
            run(m, "seed: order_items", items.data, items.len, err) != 0 ||
            (spec->with_outbox && run(m, "seed: order_timeout_msg", outbox.data, outbox.len, err) != 0))
            goto out;
    }

    /* Each order reserves its quantities: available → reserved. */
    if (spec->orders > 0) {
        buf_clear(&sql);
        buf_printf(&sql,
                   "UPDATE stock s JOIN (SELECT sku_id, SUM(qty) AS q FROM order_items"
                   " WHERE order_id BETWEEN %" PRIu64 " AND %" PRIu64 " GROUP BY sku_id) t ON t.sku_id = s.sku_id"
                   " SET s.available = s.available - t.q, s.reserved = s.reserved + t.q",
                   spec->first_id, spec->first_id + spec->orders - 1);
        if (run(m, "seed: reserve stock (is stock_per_sku large enough?)", sql.data, sql.len, err) != 0)
            goto out;
    }
    if (mysql_commit(m) != 0) {
        db_error_mysql(err, "seed: commit", m, NULL);
        goto out;
    }
    rc = 0;

out:
    if (rc != 0)
        mysql_rollback(m);
    buf_free(&sql);
    buf_free(&items);
    buf_free(&outbox);
    return rc;
}

/* ---------------------------------------------------------------- invariant */

/* Per SKU: what pending and paid orders hold, next to what stock says. */
#define SKU_VIEW                                                                                         \
    "SELECT s.sku_id, s.received, s.available, s.reserved, s.sold,"                                      \
    " COALESCE(p.q, 0) AS pending_qty, COALESCE(d.q, 0) AS paid_qty FROM stock s"                        \
    " LEFT JOIN (SELECT i.sku_id, SUM(i.qty) AS q FROM order_items i JOIN orders o ON o.id = i.order_id" \
    "   WHERE o.status = 'pending' GROUP BY i.sku_id) p ON p.sku_id = s.sku_id"                          \
    " LEFT JOIN (SELECT i.sku_id, SUM(i.qty) AS q FROM order_items i JOIN orders o ON o.id = i.order_id" \
    "   WHERE o.status = 'paid' GROUP BY i.sku_id) d ON d.sku_id = s.sku_id"

#define STATUS_OK                                                            \
    "((status = 'pending' AND paid_at IS NULL AND cancelled_at IS NULL)"     \
    " OR (status = 'paid' AND paid_at IS NOT NULL AND cancelled_at IS NULL)" \
    " OR (status = 'cancelled' AND cancelled_at IS NOT NULL AND paid_at IS NULL))"

int of_check(MYSQL *m, unsigned grace_s, of_report_t *r, hg_order_error_t *err)
{
    memset(r, 0, sizeof *r);
    if (mysql_query(m, "START TRANSACTION WITH CONSISTENT SNAPSHOT") != 0) {
        db_error_mysql(err, "check: start transaction", m, NULL);
        return -1;
    }
    char sql[1600];
    int64_t v[8];
    snprintf(sql, sizeof sql,
             "SELECT COUNT(*), SUM(status = 'pending'), SUM(status = 'paid'), SUM(status = 'cancelled'),"
             " SUM(paid_at IS NOT NULL AND cancelled_at IS NOT NULL), SUM(NOT " STATUS_OK "),"
             " SUM(status = 'pending' AND expire_at + INTERVAL %u SECOND < NOW(6)) FROM orders",
             grace_s);
    if (query_ints(m, "check: orders", sql, v, 7, err) != 0)
        goto fail;
    r->orders = (uint64_t)v[0];
    r->pending = (uint64_t)v[1];
    r->paid = (uint64_t)v[2];
    r->cancelled = (uint64_t)v[3];
    r->paid_and_cancelled = (uint64_t)v[4];
    r->status_mismatch = (uint64_t)v[5];
    r->overdue_pending = (uint64_t)v[6];

    if (query_ints(m, "check: stock",
                   "SELECT COUNT(*), SUM(received <> available + reserved + sold), SUM(reserved <> pending_qty),"
                   " SUM(sold <> paid_qty), SUM(received), SUM(available), SUM(reserved), SUM(sold)"
                   " FROM (" SKU_VIEW ") k",
                   v, 8, err) != 0)
        goto fail;
    r->skus = (uint64_t)v[0];
    r->skus_unbalanced = (uint64_t)v[1];
    r->skus_reserved_wrong = (uint64_t)v[2];
    r->skus_sold_wrong = (uint64_t)v[3];
    r->received = v[4];
    r->available = v[5];
    r->reserved = v[6];
    r->sold = v[7];

    if (query_ints(m, "check: outbox",
                   "SELECT COUNT(*), SUM(m.status <> 'done' AND o.status IN ('paid', 'cancelled'))"
                   " FROM order_timeout_msg m LEFT JOIN orders o ON o.id = m.order_id",
                   v, 2, err) != 0)
        goto fail;
    r->outbox_rows = (uint64_t)v[0];
    r->outbox_open_final = (uint64_t)v[1];

    /* One example of the first defect, for a message a person can act on. */
    static const struct {
        size_t offset;
        const char *label, *example;
    } defects[] = {
        { offsetof(of_report_t, paid_and_cancelled), "order both paid and cancelled",
          "SELECT id, status, paid_at, cancelled_at FROM orders"
          " WHERE paid_at IS NOT NULL AND cancelled_at IS NOT NULL LIMIT 1" },
        { offsetof(of_report_t, status_mismatch), "status disagrees with its timestamps",
          "SELECT id, status, paid_at, cancelled_at FROM orders WHERE NOT " STATUS_OK " LIMIT 1" },
        { offsetof(of_report_t, skus_unbalanced), "stock not conserved (received != available + reserved + sold)",
          "SELECT * FROM (" SKU_VIEW ") k WHERE received <> available + reserved + sold LIMIT 1" },
        { offsetof(of_report_t, skus_reserved_wrong), "reserved != quantity held by pending orders",
          "SELECT * FROM (" SKU_VIEW ") k WHERE reserved <> pending_qty LIMIT 1" },
        { offsetof(of_report_t, skus_sold_wrong), "sold != quantity of paid orders",
          "SELECT * FROM (" SKU_VIEW ") k WHERE sold <> paid_qty LIMIT 1" },
        { offsetof(of_report_t, outbox_open_final), "outbox row not done for a paid or cancelled order",
          "SELECT m.order_id, m.status, o.status AS order_status FROM order_timeout_msg m"
          " JOIN orders o ON o.id = m.order_id WHERE m.status <> 'done' AND o.status IN ('paid', 'cancelled') LIMIT "
          "1" },
        { offsetof(of_report_t, overdue_pending), "pending order past expire_at + grace", NULL },
    };
    r->ok = 1;
    for (size_t i = 0; i < sizeof defects / sizeof defects[0]; i++) {
        uint64_t count = *(const uint64_t *)((const char *)r + defects[i].offset);
        if (count == 0)
            continue;
        r->ok = 0;
        char example[200] = "";
        if (defects[i].example != NULL)
            query_example(m, defects[i].example, example, sizeof example);
        snprintf(r->first_defect, sizeof r->first_defect, "%" PRIu64 " × %s%s%s", count, defects[i].label,
                 example[0] ? ", e.g. " : "", example);
        break;
    }
    mysql_rollback(m);
    return 0;

fail:
    mysql_rollback(m);
    return -1;
}

int of_report_format(const of_report_t *r, char *buf, size_t buflen)
{
    return snprintf(buf, buflen,
                    "orders %" PRIu64 ": pending %" PRIu64 ", paid %" PRIu64 ", cancelled %" PRIu64 "\n"
                    "defects: paid+cancelled %" PRIu64 ", status/timestamp %" PRIu64 ", overdue pending %" PRIu64
                    ", outbox open for final orders %" PRIu64 " (of %" PRIu64 " rows)\n"
                    "stock over %" PRIu64 " SKUs: received %" PRId64 " = available %" PRId64 " + reserved %" PRId64
                    " + sold %" PRId64 "; unbalanced %" PRIu64 ", reserved wrong %" PRIu64 ", sold wrong %" PRIu64 "\n"
                    "%s%s\n",
                    r->orders, r->pending, r->paid, r->cancelled, r->paid_and_cancelled, r->status_mismatch,
                    r->overdue_pending, r->outbox_open_final, r->outbox_rows, r->skus, r->received, r->available,
                    r->reserved, r->sold, r->skus_unbalanced, r->skus_reserved_wrong, r->skus_sold_wrong,
                    r->ok ? "invariant: OK" : "invariant: VIOLATED — ", r->ok ? "" : r->first_defect);
}
