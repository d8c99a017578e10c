/*
 * compensator/monitor.h — layer 4: the gauges and the thresholds.
 *
 * Every monitor-interval:
 *   overdue pending orders   COUNT and age of the oldest pending order past
 *                            expire_at + inspect-grace (the invariant's
 *                            defect: every one is an order the layers
 *                            before missed), on the (status, expire_at) index
 *   outbox unsent            order_timeout_msg rows still 'new'
 *   DLQ depth                DLQ LEN of every group in dlq-groups, from the
 *                            broker (a group the broker does not know yet
 *                            counts 0)
 * then the thresholds (alert-overdue-pending, alert-dlq-depth,
 * alert-layer-failures over every enabled layer) go to alerts.c.
 * The values are published in comp_stats (-1 when a read failed).
 *
 * Threads: the monitor thread only (or main with --once).
 */
#ifndef HG_COMPENSATOR_MONITOR_H
#define HG_COMPENSATOR_MONITOR_H

#include <stddef.h>

#include <hourglass/order.h>

#include "compensator/comp_config.h"
#include "compensator/stats.h"

typedef struct comp_monitor comp_monitor_t;

/* cfg and params' strings must outlive the layer. Nothing connects yet. */
comp_monitor_t *comp_monitor_new(const comp_config_t *cfg, const hg_order_db_params_t *params);
void comp_monitor_free(comp_monitor_t *m);

/* One round: read the gauges, check the thresholds. Returns COMP_RUN_OK, or
 * COMP_RUN_FAILED when a read failed (the others still ran; err says which). */
comp_run_outcome_t comp_monitor_run(comp_monitor_t *m, char *err, size_t errlen);

#endif
