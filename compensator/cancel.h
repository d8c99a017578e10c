/*
 * compensator/cancel.h — the one way the compensator cancels an order.
 *
 * Every cancel of the overdue-outbox layer and of the inspection goes
 * through libhourglass: hg_order_cancel_batch (cancel-batch orders per
 * transaction, each claimed on its own row, a row another transaction holds
 * skipped rather than waited for — HG_ORDER_LOCKED, retried next round), or
 * hg_order_cancel when cancel-batch is 1. Either way the claim says WHERE
 * status='pending' and the side effects (stock return, outbox row 'done')
 * commit with it, so a paid order is never cancelled and a duplicate cancel
 * changes nothing.
 * This module adds what both layers need around it: a lazily opened
 * hg_order_db (one per layer thread), the counters by layer and outcome,
 * and the log lines.
 */
#ifndef HG_COMPENSATOR_CANCEL_H
#define HG_COMPENSATOR_CANCEL_H

#include <stdint.h>

#include <hourglass/order.h>

#include "common/passwd.h"

#define COMP_REASON_OVERDUE    "outbox-overdue"
#define COMP_REASON_INSPECTION "inspection"

typedef struct comp_canceller {
    hg_order_db_params_t params;        /* borrowed: the strings outlive the canceller */
    hg_order_db *db;                    /* NULL until the first cancel (and after a failed open) */
    int which;                          /* COMP_CANCELLER_OVERDUE or COMP_CANCELLER_INSPECTION */
    const char *reason;                 /* COMP_REASON_* */
    size_t batch_size;                  /* orders per transaction (cancel-batch) */
    char password[PASSWD_FILE_MAX + 1]; /* mysql-password-file's, when set (params.password then points here) */
    unsigned long password_generation;  /* comp_db_password's when db was opened */
} comp_canceller_t;

/* Set up (nothing connects yet). batch_size: cancel-batch (1..
 * HG_ORDER_BATCH_MAX); idle_s: the cancel connection's
 * idle_transaction_timeout (mysql-idle-transaction-timeout, 0: none). */
void comp_canceller_init(comp_canceller_t *c, const hg_order_db_params_t *params, int which, const char *reason,
                         size_t batch_size, unsigned idle_s);

/* Close the handle. */
void comp_canceller_close(comp_canceller_t *c);

/* Cancel order_id with the canceller's reason. Returns the outcome
 * (HG_ORDER_CANCELLED, NOT_PENDING, NOT_FOUND, TRANSIENT or PERMANENT; a
 * handle that cannot be opened is TRANSIENT) and counts it in comp_stats;
 * err (may be NULL) holds the cause of a failure. */
hg_order_outcome_t comp_cancel(comp_canceller_t *c, uint64_t order_id, hg_order_error_t *err);

/* Cancel items[0..n) (any n; batch_size at a time) with the canceller's
 * reason and fill each outcome (CANCELLED, NOT_PENDING, NOT_FOUND, LOCKED,
 * TRANSIENT, PERMANENT — a handle that cannot be opened makes every one
 * TRANSIENT, or PERMANENT for a parameter problem), counted in comp_stats
 * and logged. Once the compensator is stopping (comp_stopping, looked at
 * before each transaction) the items not yet tried are LOCKED: nothing
 * changed, the next start tries them. An order still in its pause after a
 * permanent failure (stuck.h, permanent-failure-backoff) is not tried: it
 * is PERMANENT with its last error, "(not tried for N s more)" in front,
 * neither counted nor logged again. The items may be reordered. */
void comp_cancel_many(comp_canceller_t *c, hg_order_batch_item_t *items, size_t n);

/* 1 when a cancel came to a lock conflict: HG_ORDER_TRANSIENT with 1205
 * (lock wait timeout) or 1213 (deadlock) — another transaction held a row
 * the cancel needed (stock, an outbox row) past mysql-lock-wait-timeout,
 * as HG_ORDER_LOCKED is one holding the order's own row. A round passes
 * such an order over like a locked one (retried next round), rather than
 * ending failed: under a flash sale's contention every round would fail
 * and /healthz answer 503 for orders that only wait their turn. Pure. */
int comp_cancel_lock_conflict(hg_order_outcome_t outcome, const hg_order_error_t *err);

/* A layer's round met a failed cancel (or row update) of order_id: keep the
 * first failure's text in first[firstlen] ("order 17: <message>", unless
 * first already holds one) and return 1 when err says MariaDB is unreachable
 * (a client error, db/conn.h): the round should end rather than try the next
 * order. Else 0. */
int comp_cancel_failure(uint64_t order_id, const hg_order_error_t *err, char *first, size_t firstlen);

#endif
