-- sql/schema.sql — the Hourglass reference schema (DESIGN.md §8).
--
-- The order cancel (hg_order_cancel), the payment claim (hg_order_pay), the
-- compensator and the demo are written against these four tables. A shop with
-- another schema keeps its tables and configures hourglass-consumer's
-- claim-sql / side-effect-sql / lookup-sql instead (docs/order-cancel.md).
--
-- Stock accounting, per SKU:
--   received  units ever put into stock (initial stock plus restocks)
--   available free to sell: an order creation moves qty available -> reserved
--   reserved  held by pending orders
--   sold      taken by paid orders: the payment moves qty reserved -> sold
-- A cancel moves qty reserved -> available. Every move keeps
--   received = available + reserved + sold                         (conservation)
-- and, in a quiet database, reserved = SUM(qty) over pending orders' items and
-- sold = SUM(qty) over paid orders' items; the second pair is what catches a
-- stock return done twice (a double return still conserves the sum).
-- The CHECK constraints turn a negative count into an error instead of data.
-- Quantities and counts are signed on purpose: with an UNSIGNED operand,
-- `reserved - qty` is computed unsigned and fails with 1690 before the CHECK
-- can name the problem.
--
-- Orders: status moves pending -> paid or pending -> cancelled, never back and
-- never both: both transitions are claims guarded by WHERE status='pending'.
-- paid_at is set exactly when status='paid', cancelled_at exactly when
-- status='cancelled'. The (status, expire_at) index serves the overdue query
--   SELECT id FROM orders WHERE status='pending' AND expire_at < ? ORDER BY expire_at LIMIT ?
-- of the compensator's inspection without a scan or a filesort.
--
-- order_timeout_msg is the outbox: written in the order's own transaction,
-- sent to the broker by the order service (status 'sent') or resent by the
-- compensator, and marked 'done' in the transaction that cancels or pays the
-- order. (status, next_attempt_at) serves the compensator's resend scan,
-- (status, expire_at) its overdue-outbox scan.
--
-- Statements end with ';' at the end of a line; comments never contain one
-- (the library splits this file on top-level semicolons). The library carries
-- a copy of this text (lib/order_schema.c, hg_order_schema_sql); a test
-- checks that the two are identical.

CREATE TABLE IF NOT EXISTS orders (
  id            BIGINT UNSIGNED NOT NULL,
  user_id       BIGINT UNSIGNED NOT NULL,
  status        ENUM('pending','paid','cancelled') NOT NULL DEFAULT 'pending',
  created_at    DATETIME(6) NOT NULL,
  expire_at     DATETIME(6) NOT NULL,
  paid_at       DATETIME(6) NULL,
  cancelled_at  DATETIME(6) NULL,
  cancel_reason VARCHAR(64) NULL,
  PRIMARY KEY (id),
  KEY status_expire (status, expire_at),
  KEY user_created (user_id, created_at)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_unicode_ci;

CREATE TABLE IF NOT EXISTS order_items (
  order_id  BIGINT UNSIGNED NOT NULL,
  sku_id    BIGINT UNSIGNED NOT NULL,
  qty       INT NOT NULL,
  PRIMARY KEY (order_id, sku_id),
  KEY sku (sku_id),
  CONSTRAINT qty_positive CHECK (qty > 0)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_unicode_ci;

CREATE TABLE IF NOT EXISTS stock (
  sku_id    BIGINT UNSIGNED NOT NULL,
  received  BIGINT NOT NULL DEFAULT 0,
  available BIGINT NOT NULL DEFAULT 0,
  reserved  BIGINT NOT NULL DEFAULT 0,
  sold      BIGINT NOT NULL DEFAULT 0,
  PRIMARY KEY (sku_id),
  CONSTRAINT stock_not_negative CHECK (available >= 0 AND reserved >= 0 AND sold >= 0)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_unicode_ci;

CREATE TABLE IF NOT EXISTS order_timeout_msg (
  order_id        BIGINT UNSIGNED NOT NULL,
  expire_at       DATETIME(6) NOT NULL,
  status          ENUM('new','sent','done') NOT NULL DEFAULT 'new',
  attempts        INT UNSIGNED NOT NULL DEFAULT 0,
  next_attempt_at DATETIME(6) NOT NULL,
  last_error      VARCHAR(255) NULL,
  PRIMARY KEY (order_id),
  KEY status_next_attempt (status, next_attempt_at),
  KEY status_expire (status, expire_at)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_unicode_ci;
