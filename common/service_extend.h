/*
 * common/service_extend.h — more start time from systemd while a long step
 * of the start runs (the broker's store open: a LevelDB recovery of a large
 * log can outlast TimeoutStartSec=, and a start killed at its timeout is
 * restarted and recovers from scratch again).
 *
 * A thread of its own sends, at once and then every tick,
 * "EXTEND_TIMEOUT_USEC=<3 ticks>\nSTATUS=<what>: N s so far" through
 * service_notify: systemd (236 and later) moves the start's deadline to
 * three ticks from each message, so two lost ticks still leave time; it
 * never brings a deadline forward. The requests stop at max_ms after the
 * start of the step: the last one asks only for what is left up to max_ms
 * and its STATUS says no more time is asked, so a step that truly hangs is
 * still ended, at max(TimeoutStartSec=, max_ms) — TimeoutStartSec= in a
 * drop-in is how an operator allows more.
 *
 * Without NOTIFY_SOCKET nothing is asked and no thread runs.
 * Threads: start and stop from one thread (the one running the step).
 */
#ifndef HG_COMMON_SERVICE_EXTEND_H
#define HG_COMMON_SERVICE_EXTEND_H

#include <stdint.h>

typedef struct service_extend service_extend_t;

/* Start asking for time for the step named by what ("recovering the store
 * /var/lib/x": copied), every tick_ms (> 0) up to max_ms after now. NULL when
 * NOTIFY_SOCKET is unset or empty (nothing to ask), or when the thread
 * cannot start (logged as a warning: systemd then times the start out at
 * TimeoutStartSec=, as without this). A send that fails is logged as a
 * warning and the next tick tries again. */
service_extend_t *service_extend_start(const char *what, uint64_t tick_ms, uint64_t max_ms);

/* The step is over: stop asking (at once, not at the next tick), join the
 * thread, free e. NULL is a no-op. Sends nothing: the caller's next state
 * (READY=1 and its STATUS=) replaces the step's. */
void service_extend_stop(service_extend_t *e);

#endif
