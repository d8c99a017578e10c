/*
 * tests/helpers/order_fixture.h — test fixtures on the reference schema
 * (sql/schema.sql): seed orders with items, stock and outbox rows, and check
 * the invariant. Used by the order, consumer and compensator tests and by
 * the benches; linked from tests/helpers/liborderfixture.la, never shipped.
 *
 * Both take a plain MYSQL connection on the database to seed or check (a
 * test's root connection: sql_connect_root, oe_connect); the tables exist
 * already (hg_order_schema_create). Errors: 0 / -1 with err (may be NULL)
 * holding the server's error number and a message naming the step.
 * One thread per connection.
 */
#ifndef HG_TESTS_ORDER_FIXTURE_H
#define HG_TESTS_ORDER_FIXTURE_H

#include <stddef.h>
#include <stdint.h>

#include <mysql.h>

#include "include/hourglass/order.h"

/* Seed orders: `orders` pending orders with ids first_id, first_id+1, …, each
 * with 1..max_items distinct SKUs out of skus SKUs numbered first_sku…,
 * quantities 1..max_qty, expire_at = NOW(6) + expire_in_ms (negative: already
 * overdue), and, when with_outbox, an order_timeout_msg row in status 'sent'.
 * Stock rows missing so far are created with received = available =
 * stock_per_sku; each order moves its quantities available → reserved. The
 * choice of SKUs and quantities is a pure function of random_seed. */
typedef struct of_seed_spec {
    uint64_t first_id;
    size_t orders;
    uint64_t first_sku;
    unsigned skus;      /* >= max_items */
    unsigned max_items; /* >= 1 */
    unsigned max_qty;   /* >= 1 */
    int64_t stock_per_sku;
    int64_t expire_in_ms;
    int with_outbox;
    uint32_t random_seed;
} of_seed_spec_t;

/* One transaction; fails (nothing written) if an id exists (1062) or a
 * SKU's stock would go negative (4025, the CHECK constraint). Returns 0 / -1. */
int of_seed(MYSQL *m, const of_seed_spec_t *spec, hg_order_error_t *err);

/* The invariant report of the reference schema. Defects:
 *   paid_and_cancelled   orders with both paid_at and cancelled_at set
 *   status_mismatch      status disagrees with the timestamps (paid needs
 *                        paid_at only, cancelled needs cancelled_at only,
 *                        pending needs neither)
 *   overdue_pending      pending orders with expire_at + grace < NOW(6)
 *   skus_unbalanced      received != available + reserved + sold
 *   skus_reserved_wrong  reserved != SUM(qty) of pending orders' items
 *   skus_sold_wrong      sold != SUM(qty) of paid orders' items
 *   outbox_open_final    outbox rows not 'done' whose order is paid or cancelled
 * ok is 1 when every defect count is 0. Run it on a quiet database: the
 * per-SKU sums are read in one consistent snapshot, so a concurrent cancel is
 * never half-seen, but a check that races the workers reports their state of
 * the moment. */
typedef struct of_report {
    uint64_t orders, pending, paid, cancelled;
    uint64_t paid_and_cancelled, status_mismatch, overdue_pending;
    uint64_t skus, skus_unbalanced, skus_reserved_wrong, skus_sold_wrong;
    uint64_t outbox_rows, outbox_open_final;
    int64_t received, available, reserved, sold; /* totals over all SKUs */
    int ok;
    char first_defect[256]; /* a description of one defect, "" when ok */
} of_report_t;

/* Fill *report (grace_s: seconds past expire_at before a pending order counts
 * as overdue). Returns 0 / -1 (a failed query; the report is then incomplete). */
int of_check(MYSQL *m, unsigned grace_s, of_report_t *report, hg_order_error_t *err);

/* Write the report as a few human lines ("orders 2000: pending 0, paid 517 …").
 * Returns the length (snprintf semantics). */
int of_report_format(const of_report_t *report, char *buf, size_t buflen);

#endif
