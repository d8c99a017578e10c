/*
 * compensator/metrics.h — /metrics (Prometheus text) and /healthz over HTTP.
 *
 * common/prom.h's endpoint (its own thread and event base), reading comp_stats.
 * Every name starts with hourglass_compensator_; docs/compensator.md lists
 * them. /healthz answers 200 "ok" while no enabled layer is stuck
 * (comp_stats_stuck: busy, its last step ended longer ago than its bound)
 * and none's last run failed, else 503 with one line per such layer.
 *
 * evthread_use_pthreads must have run before comp_metrics_start (the stop
 * breaks the loop from another thread).
 */
#ifndef HG_COMPENSATOR_METRICS_H
#define HG_COMPENSATOR_METRICS_H

#include <stddef.h>

#include "common/prom.h"
#include "compensator/comp_config.h"

typedef prom_http_t comp_metrics_t;

/* Listen on metrics-bind:metrics-port and serve from a new thread. cfg must
 * outlive the server. Returns 0 with *out, or -1 with err naming the key. */
int comp_metrics_start(comp_metrics_t **out, const comp_config_t *cfg, char *err, size_t errlen);

/* Stop the thread and free the server. NULL is fine. */
void comp_metrics_stop(comp_metrics_t *m);

#endif
