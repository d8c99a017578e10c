/*
 * consumer/order_schema.c — the reference schema compiled in, and the helpers
 * tests, benchmarks and the demo build on it: create the tables, seed orders
 * with items, stock and outbox rows, and check the invariant (DESIGN.md §8).
 *
 * The schema text is a copy of sql/schema.sql; tests/integration/test_order.c
 * fails when the two differ, so an edit to one without the other is caught
 * by `make check`. (A generated header would need a build rule in the
 * library's own include.am; one copy plus a test keeps the build simple.)
 *
 * These helpers run plain queries on the handle's connection (autocommit
 * off) and always end the transaction they start. Same thread rules as the
 * handle: one thread at a time.
 */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include "consumer/order_sql.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char schema_sql[] =
    "-- sql/schema.sql — the Hourglass reference schema (DESIGN.md §8).\n"
    "--\n"
    "-- The order cancel (hg_order_cancel), the payment claim (hg_order_pay), the\n"
    "-- compensator and the demo are written against these four tables. A shop with\n"
    "-- another schema keeps its tables and configures hourglass-consumer's\n"
    "-- claim-sql / side-effect-sql / lookup-sql instead (docs/order-cancel.md).\n"
    "--\n"
    "-- Stock accounting, per SKU:\n"
    "--   received  units ever put into stock (initial stock plus restocks)\n"
    "--   available free to sell: an order creation moves qty available -> reserved\n"
    "--   reserved  held by pending orders\n"
    "--   sold      taken by paid orders: the payment moves qty reserved -> sold\n"
    "-- A cancel moves qty reserved -> available. Every move keeps\n"
    "--   received = available + reserved + sold                         (conservation)\n"
    "-- and, in a quiet database, reserved = SUM(qty) over pending orders' items and\n"
    "-- sold = SUM(qty) over paid orders' items; the second pair is what catches a\n"
    "-- stock return done twice (a double return still conserves the sum).\n"
    "-- The CHECK constraints turn a negative count into an error instead of data.\n"
    "-- Quantities and counts are signed on purpose: with an UNSIGNED operand,\n"
    "-- `reserved - qty` is computed unsigned and fails with 1690 before the CHECK\n"
    "-- can name the problem.\n"
    "--\n"
    "-- Orders: status moves pending -> paid or pending -> cancelled, never back and\n"
    "-- never both: both transitions are claims guarded by WHERE status='pending'.\n"
    "-- paid_at is set exactly when status='paid', cancelled_at exactly when\n"
    "-- status='cancelled'. The (status, expire_at) index serves the overdue query\n"
    "--   SELECT id FROM orders WHERE status='pending' AND expire_at < ? ORDER BY expire_at LIMIT ?\n"
    "-- of the compensator's inspection without a scan or a filesort.\n"
    "--\n"
    "-- order_timeout_msg is the outbox: written in the order's own transaction,\n"
    "-- sent to the broker by the order service (status 'sent') or resent by the\n"
    "-- compensator, and marked 'done' in the transaction that cancels or pays the\n"
    "-- order. (status, next_attempt_at) serves the compensator's resend scan,\n"
    "-- (status, expire_at) its overdue-outbox scan.\n"
    "--\n"
    "-- Statements end with ';' at the end of a line; comments never contain one\n"
    "-- (the library splits this file on top-level semicolons). The library carries\n"
    "-- a copy of this text (consumer/order_schema.c, hg_order_schema_sql); a test\n"
    "-- checks that the two are identical.\n"
    "\n"
    "CREATE TABLE IF NOT EXISTS orders (\n"
    "  id            BIGINT UNSIGNED NOT NULL,\n"
    "  user_id       BIGINT UNSIGNED NOT NULL,\n"
    "  status        ENUM('pending','paid','cancelled') NOT NULL DEFAULT 'pending',\n"
    "  created_at    DATETIME(6) NOT NULL,\n"
    "  expire_at     DATETIME(6) NOT NULL,\n"
    "  paid_at       DATETIME(6) NULL,\n"
    "  cancelled_at  DATETIME(6) NULL,\n"
    "  cancel_reason VARCHAR(64) NULL,\n"
    "  PRIMARY KEY (id),\n"
    "  KEY status_expire (status, expire_at),\n"
    "  KEY user_created (user_id, created_at)\n"
    ") ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_unicode_ci;\n"
    "\n"
    "CREATE TABLE IF NOT EXISTS order_items (\n"
    "  order_id  BIGINT UNSIGNED NOT NULL,\n"
    "  sku_id    BIGINT UNSIGNED NOT NULL,\n"
    "  qty       INT NOT NULL,\n"
    "  PRIMARY KEY (order_id, sku_id),\n"
    "  KEY sku (sku_id),\n"
    "  CONSTRAINT qty_positive CHECK (qty > 0)\n"
    ") ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_unicode_ci;\n"
    "\n"
    "CREATE TABLE IF NOT EXISTS stock (\n"
    "  sku_id    BIGINT UNSIGNED NOT NULL,\n"
    "  received  BIGINT NOT NULL DEFAULT 0,\n"
    "  available BIGINT NOT NULL DEFAULT 0,\n"
    "  reserved  BIGINT NOT NULL DEFAULT 0,\n"
    "  sold      BIGINT NOT NULL DEFAULT 0,\n"
    "  PRIMARY KEY (sku_id),\n"
    "  CONSTRAINT stock_not_negative CHECK (available >= 0 AND reserved >= 0 AND sold >= 0)\n"
    ") ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_unicode_ci;\n"
    "\n"
    "CREATE TABLE IF NOT EXISTS order_timeout_msg (\n"
    "  order_id        BIGINT UNSIGNED NOT NULL,\n"
    "  expire_at       DATETIME(6) NOT NULL,\n"
    "  status          ENUM('new','sent','done') NOT NULL DEFAULT 'new',\n"
    "  attempts        INT UNSIGNED NOT NULL DEFAULT 0,\n"
    "  next_attempt_at DATETIME(6) NOT NULL,\n"
    "  last_error      VARCHAR(255) NULL,\n"
    "  PRIMARY KEY (order_id),\n"
    "  KEY status_next_attempt (status, next_attempt_at),\n"
    "  KEY status_expire (status, expire_at)\n"
    ") ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_unicode_ci;\n"
    ;

const char *hg_order_schema_sql(void)
{
    return schema_sql;
}

/* ---------------------------------------------------------------- small tools */

/* A growable string; out-of-memory aborts (STYLE.md: one wrapper). */
typedef struct sbuf {
    char *p;
    size_t len, cap;
} sbuf_t;

static void sb_printf(sbuf_t *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void sb_printf(sbuf_t *b, const char *fmt, ...)
{
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        int n = vsnprintf(b->p != NULL ? b->p + b->len : NULL, b->p != NULL ? b->cap - b->len : 0, fmt, ap);
        va_end(ap);
        if (n < 0)
            abort();
        if (b->p != NULL && b->len + (size_t)n < b->cap) {
            b->len += (size_t)n;
            return;
        }
        size_t cap = b->cap ? b->cap * 2 : 4096;
        while (cap < b->len + (size_t)n + 1)
            cap *= 2;
        char *p = realloc(b->p, cap);
        if (p == NULL) {
            fputs("hourglass: out of memory\n", stderr);
            abort();
        }
        b->p = p;
        b->cap = cap;
    }
}

static void sb_reset(sbuf_t *b)
{
    b->len = 0;
    if (b->p != NULL)
        b->p[0] = '\0';
}

/* Run one statement; on failure fill err with what and the server's error. */
static int run(MYSQL *m, const char *what, const char *sql, size_t len, hg_order_error_t *err)
{
    if (mysql_real_query(m, sql, (unsigned long)len) != 0) {
        order_error_set_mysql(err, what, m, NULL);
        return -1;
    }
    MYSQL_RES *res = mysql_store_result(m); /* statements with a result are discarded */
    if (res != NULL)
        mysql_free_result(res);
    return 0;
}

/* Run a query that returns one row of integers (NULL reads as 0) into v[n]. */
static int query_ints(MYSQL *m, const char *what, const char *sql, int64_t *v, unsigned n,
                      hg_order_error_t *err)
{
    if (mysql_query(m, sql) != 0) {
        order_error_set_mysql(err, what, m, NULL);
        return -1;
    }
    MYSQL_RES *res = mysql_store_result(m);
    if (res == NULL) {
        order_error_set_mysql(err, what, m, NULL);
        return -1;
    }
    MYSQL_ROW row = mysql_fetch_row(res);
    if (row == NULL || mysql_num_fields(res) < n) {
        mysql_free_result(res);
        order_error_set(err, "%s: expected one row of %u columns", what, n);
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

/* ---------------------------------------------------------------- schema */

int hg_order_schema_create(hg_order_db *db, hg_order_error_t *err)
{
    MYSQL *m = order_db_mysql(db, err);
    if (m == NULL)
        return -1;
    size_t pos = 0;
    const char *stmt;
    size_t len;
    int rc, index = 0;
    char msg[256];
    while ((rc = order_sql_next_statement(schema_sql, &pos, &stmt, &len, msg, sizeof msg)) == 1) {
        char what[96];
        index++;
        snprintf(what, sizeof what, "schema statement %d (%.40s…)", index, stmt);
        if (run(m, what, stmt, len, err) != 0) {
            mysql_rollback(m);
            return -1;
        }
    }
    if (rc < 0) {
        order_error_set(err, "schema: %s", msg);
        return -1;
    }
    if (mysql_commit(m) != 0) {
        order_error_set_mysql(err, "schema: commit", m, NULL);
        return -1;
    }
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

int hg_order_seed(hg_order_db *db, const hg_order_seed_spec_t *spec, hg_order_error_t *err)
{
    if (spec == NULL || spec->max_items < 1 || spec->max_qty < 1 || spec->skus < spec->max_items
        || spec->max_items > 64 || spec->first_id == 0 || spec->stock_per_sku < 0) {
        order_error_set(err, "seed: bad spec (need first_id >= 1, 1 <= max_items <= 64, "
                                "skus >= max_items, max_qty >= 1, stock_per_sku >= 0)");
        return -1;
    }
    MYSQL *m = order_db_mysql(db, err);
    if (m == NULL)
        return -1;

    sbuf_t sql = {0}, items = {0}, outbox = {0};
    uint64_t rng = spec->random_seed;
    int rc = -1;

    /* Stock rows that do not exist yet. */
    for (unsigned k = 0; k < spec->skus; k += 1000) {
        sb_reset(&sql);
        sb_printf(&sql, "INSERT INTO stock (sku_id, received, available, reserved, sold) VALUES ");
        for (unsigned j = k; j < spec->skus && j < k + 1000; j++)
            sb_printf(&sql, "%s(%" PRIu64 ", %" PRId64 ", %" PRId64 ", 0, 0)", j > k ? "," : "",
                      spec->first_sku + j, spec->stock_per_sku, spec->stock_per_sku);
        sb_printf(&sql, " ON DUPLICATE KEY UPDATE sku_id = sku_id");
        if (run(m, "seed: stock rows", sql.p, sql.len, err) != 0)
            goto out;
    }

    for (size_t first = 0; first < spec->orders; first += SEED_BATCH) {
        size_t last = first + SEED_BATCH < spec->orders ? first + SEED_BATCH : spec->orders;
        sb_reset(&sql);
        sb_reset(&items);
        sb_reset(&outbox);
        sb_printf(&sql, "INSERT INTO orders (id, user_id, status, created_at, expire_at) VALUES ");
        sb_printf(&items, "INSERT INTO order_items (order_id, sku_id, qty) VALUES ");
        sb_printf(&outbox, "INSERT INTO order_timeout_msg (order_id, expire_at, status, attempts, "
                           "next_attempt_at) VALUES ");
        for (size_t i = first; i < last; i++) {
            uint64_t id = spec->first_id + i;
            char expire[96];
            snprintf(expire, sizeof expire, "NOW(6) + INTERVAL %" PRId64 " MICROSECOND",
                     spec->expire_in_ms * 1000);
            sb_printf(&sql, "%s(%" PRIu64 ", %" PRIu64 ", 'pending', NOW(6), %s)", i > first ? "," : "", id,
                      1000 + next_random(&rng) % 100000, expire);
            if (spec->with_outbox)
                sb_printf(&outbox, "%s(%" PRIu64 ", %s, 'sent', 1, %s)", i > first ? "," : "", id, expire,
                          expire);
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
                sb_printf(&items, "%s(%" PRIu64 ", %" PRIu64 ", %u)", i > first || c > 0 ? "," : "", id, sku, qty);
            }
        }
        if (run(m, "seed: orders", sql.p, sql.len, err) != 0
            || run(m, "seed: order_items", items.p, items.len, err) != 0
            || (spec->with_outbox && run(m, "seed: order_timeout_msg", outbox.p, outbox.len, err) != 0))
            goto out;
    }

    /* Each order reserves its quantities: available → reserved. */
    if (spec->orders > 0) {
        sb_reset(&sql);
        sb_printf(&sql,
                  "UPDATE stock s JOIN (SELECT sku_id, SUM(qty) AS q FROM order_items"
                  " WHERE order_id BETWEEN %" PRIu64 " AND %" PRIu64 " GROUP BY sku_id) t ON t.sku_id = s.sku_id"
                  " SET s.available = s.available - t.q, s.reserved = s.reserved + t.q",
                  spec->first_id, spec->first_id + spec->orders - 1);
        if (run(m, "seed: reserve stock (is stock_per_sku large enough?)", sql.p, sql.len, err) != 0)
            goto out;
    }
    if (mysql_commit(m) != 0) {
        order_error_set_mysql(err, "seed: commit", m, NULL);
        goto out;
    }
    rc = 0;

out:
    if (rc != 0)
        mysql_rollback(m);
    free(sql.p);
    free(items.p);
    free(outbox.p);
    return rc;
}

/* ---------------------------------------------------------------- invariant */

/* Per SKU: what pending and paid orders hold, next to what stock says. */
#define SKU_VIEW                                                                                        \
    "SELECT s.sku_id, s.received, s.available, s.reserved, s.sold,"                                     \
    " COALESCE(p.q, 0) AS pending_qty, COALESCE(d.q, 0) AS paid_qty FROM stock s"                       \
    " LEFT JOIN (SELECT i.sku_id, SUM(i.qty) AS q FROM order_items i JOIN orders o ON o.id = i.order_id" \
    "   WHERE o.status = 'pending' GROUP BY i.sku_id) p ON p.sku_id = s.sku_id"                         \
    " LEFT JOIN (SELECT i.sku_id, SUM(i.qty) AS q FROM order_items i JOIN orders o ON o.id = i.order_id" \
    "   WHERE o.status = 'paid' GROUP BY i.sku_id) d ON d.sku_id = s.sku_id"

#define STATUS_OK                                                                     \
    "((status = 'pending' AND paid_at IS NULL AND cancelled_at IS NULL)"              \
    " OR (status = 'paid' AND paid_at IS NOT NULL AND cancelled_at IS NULL)"          \
    " OR (status = 'cancelled' AND cancelled_at IS NOT NULL AND paid_at IS NULL))"

int hg_order_check(hg_order_db *db, unsigned grace_s, hg_order_report_t *r, hg_order_error_t *err)
{
    memset(r, 0, sizeof *r);
    MYSQL *m = order_db_mysql(db, err);
    if (m == NULL)
        return -1;
    if (mysql_query(m, "START TRANSACTION WITH CONSISTENT SNAPSHOT") != 0) {
        order_error_set_mysql(err, "check: start transaction", m, NULL);
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
        {offsetof(hg_order_report_t, paid_and_cancelled), "order both paid and cancelled",
         "SELECT id, status, paid_at, cancelled_at FROM orders"
         " WHERE paid_at IS NOT NULL AND cancelled_at IS NOT NULL LIMIT 1"},
        {offsetof(hg_order_report_t, status_mismatch), "status disagrees with its timestamps",
         "SELECT id, status, paid_at, cancelled_at FROM orders WHERE NOT " STATUS_OK " LIMIT 1"},
        {offsetof(hg_order_report_t, skus_unbalanced), "stock not conserved (received != available + reserved + sold)",
         "SELECT * FROM (" SKU_VIEW ") k WHERE received <> available + reserved + sold LIMIT 1"},
        {offsetof(hg_order_report_t, skus_reserved_wrong), "reserved != quantity held by pending orders",
         "SELECT * FROM (" SKU_VIEW ") k WHERE reserved <> pending_qty LIMIT 1"},
        {offsetof(hg_order_report_t, skus_sold_wrong), "sold != quantity of paid orders",
         "SELECT * FROM (" SKU_VIEW ") k WHERE sold <> paid_qty LIMIT 1"},
        {offsetof(hg_order_report_t, outbox_open_final), "outbox row not done for a paid or cancelled order",
         "SELECT m.order_id, m.status, o.status AS order_status FROM order_timeout_msg m"
         " JOIN orders o ON o.id = m.order_id WHERE m.status <> 'done' AND o.status IN ('paid', 'cancelled') LIMIT 1"},
        {offsetof(hg_order_report_t, overdue_pending), "pending order past expire_at + grace", NULL},
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

int hg_order_report_format(const hg_order_report_t *r, char *buf, size_t buflen)
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
