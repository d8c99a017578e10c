-- examples/order-service/refunds.sql — the refunds the example order service owes.
--
-- A payment that arrives after the timeout cancelled its order loses the
-- claim (hg_order_pay answers not-pending on a cancelled order): the money
-- came in for an order that no longer exists. The example records it here,
-- once per order (INSERT IGNORE on the primary key, so a retried payment
-- records nothing twice); a real shop's refund job would work through it.
-- Load it after sql/schema.sql, into the same database.

CREATE TABLE IF NOT EXISTS order_refunds (
  order_id  BIGINT UNSIGNED NOT NULL,
  paid_at   DATETIME(6) NOT NULL,
  reason    VARCHAR(64) NOT NULL,
  PRIMARY KEY (order_id)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_unicode_ci;
