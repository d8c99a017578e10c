/*
 * compensator/alerts.h — thresholds to alerts: run the configured command.
 *
 * The monitor layer evaluates each condition every round and calls
 * comp_alert_check with whether it holds. An alert is identified by its kind
 * and subject (the DLQ group, the failing layer, "orders"). It fires — the
 * alert-command runs through /bin/sh -c with the alert in the environment —
 * when the condition starts to hold (an episode begins), and again as a
 * reminder while it still holds, but no reminder sooner than
 * alert-min-interval after the last firing of the same alert (an outage is
 * one alert, not a storm; every held-back reminder counts in
 * comp_stats.alerts_suppressed). When the condition stops holding, the
 * command runs once more with HG_ALERT_STATE=resolved, and the episode ends.
 *
 * A new episode always fires at once: after "resolved" the operator must
 * hear of the next incident, however soon it comes (until 2026-12-04 one
 * within alert-min-interval of the last firing was swallowed, with no
 * "resolved" after it either). Flapping is bounded on the resolve instead:
 * an episode that began within alert-min-interval of the firing before is
 * resolved only once its condition stayed clear for alert-min-interval; if
 * it comes back meanwhile, the episode goes on (reminders as above). So a
 * condition that flaps sends two firings and one "resolved", then at most a
 * reminder per alert-min-interval until it settles — and every "firing" is
 * followed by one "resolved".
 *
 * Environment of the command (besides the compensator's own):
 *   HG_ALERT_NAME       overdue-pending | dlq-depth | layer-failing
 *   HG_ALERT_STATE      firing | resolved
 *   HG_ALERT_SUBJECT    orders | <group> | <layer>
 *   HG_ALERT_VALUE      the measured value
 *   HG_ALERT_THRESHOLD  the configured threshold
 *   HG_ALERT_MESSAGE    one human line
 *   HG_ALERT_DATABASE   mysql-database
 *   HG_ALERT_TIME       UTC, ISO 8601
 * A command still running after alert-command-timeout is killed (its whole
 * process group), and so is one still running when a stop cuts the calls in
 * flight (stop-grace after SIGTERM; none is started after that). Without
 * alert-command the alert is only logged.
 *
 * Threads: the monitor thread only (or main with --once).
 */
#ifndef HG_COMPENSATOR_ALERTS_H
#define HG_COMPENSATOR_ALERTS_H

#include <stdint.h>

#include "compensator/comp_config.h"

typedef struct comp_alerts comp_alerts_t;

/* "overdue-pending", "dlq-depth", "layer-failing" for COMP_ALERT_*. */
const char *comp_alert_name(int kind);

/* cfg must outlive the handle. Never NULL. */
comp_alerts_t *comp_alerts_new(const comp_config_t *cfg);
void comp_alerts_free(comp_alerts_t *a);

/* Evaluate one condition (see the top of this file): active says whether it
 * holds now; value and threshold go into the environment; message is the
 * human line. Returns 1 when the command ran (or the alert was logged
 * without a command), else 0. */
int comp_alert_check(comp_alerts_t *a, int kind, const char *subject, int active, int64_t value, uint64_t threshold,
                     const char *message);

/* comp_alert_check at monotonic time now_us (tests drive the clock). */
int comp_alert_check_at(comp_alerts_t *a, int kind, const char *subject, int active, int64_t value, uint64_t threshold,
                        const char *message, uint64_t now_us);

#endif
