/*
 * compensator/stop.h — the process-wide stop request and interruptible waits.
 *
 * A stop is requested once (SIGTERM / SIGINT); every layer checks
 * comp_stopping() between pages, batches and cancels, and sleeps with
 * comp_sleep_ms, which returns early when the stop comes.
 */
#ifndef HG_COMPENSATOR_STOP_H
#define HG_COMPENSATOR_STOP_H

#include <stdint.h>

/* Request the stop and wake every sleeper. Thread-safe; not for signal
 * handlers (main waits for signals with sigwait and calls it). */
void comp_stop_request(void);

/* Set the flag only: async-signal-safe (sleepers notice it within 100 ms). */
void comp_stop_request_from_signal(void);

/* 1 once a stop was requested. */
int comp_stopping(void);

/* Sleep ms milliseconds or until a stop. Returns 1 when stopping, else 0. */
int comp_sleep_ms(uint64_t ms);

#endif
