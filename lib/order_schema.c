/*
 * lib/order_schema.c — the reference schema (sql/schema.sql) compiled into
 * libhourglass, and hg_order_schema_create, which runs it.
 *
 * Why in the library: the cancel and the payment claim (hg_order_pay) are
 * written against these tables, and sql/schema.sql is not installed, so a
 * program that adopts the reference schema — the demo, a shop starting from
 * it — creates it through the installed library. (Seeding and the invariant
 * check are test fixtures: tests/helpers/order_fixture.c.)
 *
 * The text is a copy of sql/schema.sql; tests/integration/test_order.c
 * fails when the two differ, so an edit to one without the other is caught
 * by `make check`. (A generated header would need a build rule in the
 * library's own include.am; one copy plus a test keeps the build simple.)
 *
 * Runs on the handle's connection; same thread rules as the handle.
 */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include "lib/order_sql.h"

#include <stdio.h>

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
    "-- a copy of this text (lib/order_schema.c, hg_order_schema_sql); a test\n"
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
    ") ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_unicode_ci;\n";

const char *hg_order_schema_sql(void)
{
    return schema_sql;
}

int hg_order_schema_create(hg_order_db *db, hg_order_error_t *err)
{
    if (db == NULL) {
        db_error_set(err, "schema: no database handle");
        return -1;
    }
    db_conn_t *c = order_db_conn(db);
    if (db_connect(c, err) != 0)
        return -1;
    size_t pos = 0, len;
    const char *stmt;
    int rc, index = 0;
    char msg[256];
    while ((rc = order_sql_next_statement(schema_sql, &pos, &stmt, &len, msg, sizeof msg)) == 1) {
        char what[96];
        index++;
        snprintf(what, sizeof what, "schema statement %d (%.40s…)", index, stmt);
        if (mysql_real_query(db_mysql(c), stmt, (unsigned long)len) != 0) {
            db_fail(c, what, NULL, err);
            db_rollback(c);
            return -1;
        }
        MYSQL_RES *res = mysql_store_result(db_mysql(c)); /* none expected */
        if (res != NULL)
            mysql_free_result(res);
    }
    if (rc < 0) {
        db_error_set(err, "schema: %s", msg);
        return -1;
    }
    if (mysql_commit(db_mysql(c)) != 0) {
        db_fail(c, "schema: commit", NULL, err);
        return -1;
    }
    return 0;
}
