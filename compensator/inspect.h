/*
 * compensator/inspect.h — layer 3: the order-table inspection.
 *
 * Every inspect-interval, the instance holding the inspection lock (lock.h)
 * reads the pending orders whose expire_at is before the round's cutoff
 * (NOW(6) - inspect-grace, fixed when the round starts) in keyset pages on
 * the (status, expire_at) index — COMP_INSPECT_PAGE_SQL, at most
 * inspect-page-size rows each, ordered by (expire_at, id) — and cancels each
 * through hg_order_cancel with reason "inspection". It is the last layer: it
 * needs no message and no outbox row, only the orders table.
 *
 * The lock is verified before each page (a round trip) and before each
 * cancel (a poll on the lock connection); on loss the scan stops at once
 * (the cancel in flight finishes) and the round ends COMP_RUN_LOCK_LOST; the
 * next round re-acquires. An instance that finds the lock held elsewhere
 * ends its round COMP_RUN_SKIPPED.
 *
 * Threads: the inspection thread only (or main with --once).
 */
#ifndef HG_COMPENSATOR_INSPECT_H
#define HG_COMPENSATOR_INSPECT_H

#include <stddef.h>
#include <stdint.h>

#include <hourglass/order.h>

#include "compensator/comp_config.h"
#include "compensator/stats.h"

/* The page query. Parameters: cutoff, last expire_at, last expire_at,
 * last id, page size. The keyset condition is written as a range on
 * expire_at (expire_at >= last) plus a filter, so the optimizer gets a plain
 * range on (status, expire_at); InnoDB's secondary index carries the primary
 * key, so ORDER BY expire_at, id needs no filesort. Exposed for the EXPLAIN
 * test. */
#define COMP_INSPECT_PAGE_SQL                                        \
    "SELECT id, expire_at FROM orders"                               \
    " WHERE status = 'pending' AND expire_at < ? AND expire_at >= ?" \
    " AND (expire_at > ? OR id > ?)"                                 \
    " ORDER BY expire_at, id LIMIT ?"

typedef struct comp_inspect comp_inspect_t;

/* Set up (nothing connects yet). params' strings must outlive the layer. */
comp_inspect_t *comp_inspect_new(const comp_config_t *cfg, const hg_order_db_params_t *params);

/* Release the lock, close the connections, free. NULL is fine. */
void comp_inspect_free(comp_inspect_t *in);

/* One round. Returns its outcome; err holds the cause of a FAILED or
 * LOCK_LOST round. */
comp_run_outcome_t comp_inspect_run(comp_inspect_t *in, char *err, size_t errlen);

/* Between rounds, every comp_inspect_keepalive_ms: a statement on the
 * lock connection (comp_lock_check), so the server does not close it, and
 * release the lock, while this instance only waits for its next round (the
 * round's own page pauses run it too). */
void comp_inspect_keepalive(comp_inspect_t *in);

/* How often the lock connection is kept alive while the layer waits: a
 * third of inspect-lock-timeout. */
uint64_t comp_inspect_keepalive_ms(const comp_config_t *cfg);

/* Rows read by the page queries of the last round (for the benchmark). */
unsigned long long comp_inspect_last_rows(const comp_inspect_t *in);

/* The query connection (for the benchmark's SHOW SESSION STATUS), NULL while
 * disconnected. */
struct st_mysql *comp_inspect_mysql(comp_inspect_t *in);

#endif
