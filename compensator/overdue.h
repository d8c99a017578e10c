/*
 * compensator/overdue.h — layer 2: the overdue outbox.
 *
 * Outbox rows (order_timeout_msg) not 'done' whose expire_at is before the
 * round's cutoff (NOW(6) - overdue-grace) mean that the message was never
 * sent (the relay could not reach the broker the whole time) or was sent and
 * never handled (lost, parked in a DLQ). Each such order is cancelled
 * directly through hg_order_cancel with reason "outbox-overdue", whose side
 * effects mark the row 'done' in the same transaction.
 *
 * A row whose order is no longer pending (paid or cancelled by a path that
 * left the row open) or does not exist is closed here — status 'done' only,
 * after hg_order_cancel said so — so it is not read again every round.
 *
 * Rows are read in keyset pages on (expire_at, order_id) of overdue-batch
 * rows; the query uses the outbox's (status, next_attempt_at) index for the
 * status and filters expire_at (the reference schema has no index on the
 * outbox's expire_at; the rows not 'done' are the pending orders, a bounded
 * set).
 *
 * Threads: the overdue thread only (or main with --once).
 */
#ifndef HG_COMPENSATOR_OVERDUE_H
#define HG_COMPENSATOR_OVERDUE_H

#include <stddef.h>

#include <hourglass/order.h>

#include "compensator/comp_config.h"
#include "compensator/stats.h"

typedef struct comp_overdue comp_overdue_t;

/* Set up (nothing connects yet). params' strings must outlive the layer. */
comp_overdue_t *comp_overdue_new(const comp_config_t *cfg, const hg_order_db_params_t *params);

/* Close the connections, free. NULL is fine. */
void comp_overdue_free(comp_overdue_t *o);

/* One round. Returns COMP_RUN_OK or COMP_RUN_FAILED (err says why). */
comp_run_outcome_t comp_overdue_run(comp_overdue_t *o, char *err, size_t errlen);

#endif
