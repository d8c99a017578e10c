/*
 * compensator/stuck.h — the orders whose cancel fails permanently.
 *
 * An order whose cancel fails with a permanent error (a CHECK constraint,
 * MariaDB 4025; a side effect the server rejects) fails again every round
 * of the overdue and inspection layers. Logging each failure at error
 * buried everything else (10 800 lines in 45 s for 210 such orders). This
 * table remembers each such order with its error so that cancel.c logs it
 * at error once, again when its error changes or COMP_STUCK_REMIND_MS later
 * while it keeps failing, and at debug otherwise; and so that the layers
 * skip it for a while (permanent-failure-backoff, doubled per failure up
 * to an hour) instead of spending every round on it; the count is the gauge
 * hourglass_compensator_orders_failing_permanently (alert
 * HourglassCompensatorOrdersFailingPermanently). An order leaves the table
 * when a cancel reaches an end for it (cancelled, not pending, not found).
 *
 * Bounded: at most COMP_STUCK_MAX orders are remembered; a failure beyond
 * them is logged every time, as before (and counted in
 * orders_failing_permanently_unremembered_total), so nothing is hidden. One process-wide table under a
 * mutex: the overdue and inspection threads both use it, so an order that
 * both layers reach is logged once, not once per layer.
 */
#ifndef HG_COMPENSATOR_STUCK_H
#define HG_COMPENSATOR_STUCK_H

#include <stddef.h>
#include <stdint.h>

#include <hourglass/order.h>

#define COMP_STUCK_MAX            10000
#define COMP_STUCK_REMIND_MS      (60u * 60u * 1000u) /* a still-failing order is logged again after an hour */
#define COMP_STUCK_BACKOFF_CAP_MS (60u * 60u * 1000u) /* the longest pause between two tries of such an order */

/* Record that order_id's cancel failed permanently with err, now_ms
 * (clock_mono_ms). Returns 1 when the failure is to be logged at error (the
 * order is new to the table, its error changed, COMP_STUCK_REMIND_MS passed
 * since it was last logged, or the table is full), 0 when it was logged
 * already. Thread-safe. */
int comp_stuck_failed(uint64_t order_id, const hg_order_error_t *err, uint64_t now_ms);

/* The first pause after an order's permanent failure (permanent-failure-
 * backoff; 0: none): it is not tried again for that long, doubled at each
 * further failure up to COMP_STUCK_BACKOFF_CAP_MS, so the rounds are not
 * spent on it. Call before the layers start. */
void comp_stuck_set_backoff(uint64_t first_ms);

/* 1 when order_id failed permanently and its pause has not ended at now_ms:
 * skip it this round; err then holds its last error, "(not tried before
 * <n> s) " in front. 0 otherwise (err untouched). Thread-safe; cheap when
 * the table is empty. */
int comp_stuck_deferred(uint64_t order_id, uint64_t now_ms, hg_order_error_t *err);

/* A cancel of order_id reached an end (cancelled, not pending, not found):
 * forget it. Thread-safe; cheap when the table is empty. */
void comp_stuck_settled(uint64_t order_id);

/* How many orders are remembered as failing permanently. */
size_t comp_stuck_count(void);

/* How many permanent failures were not remembered because the table was
 * full (since start). */
uint64_t comp_stuck_overflows(void);

/* Forget everything (tests; start-up). */
void comp_stuck_reset(void);

#endif
