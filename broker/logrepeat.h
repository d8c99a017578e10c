/*
 * broker/logrepeat.h — what to log of a failure that repeats: the storage
 * thread retries a failed reopen, a failed scheduler run and a store that
 * breaks again after each reopen about once a second, for as long as the
 * cause lasts (a damaged directory: until someone repairs it). Logging every
 * attempt is 86 400 lines a day of the same words; logging only the first
 * hides that it goes on. So: the first failure of a cause is logged at once,
 * a failure with another cause at once, the same cause again as a summary
 * ("N more times") at most once per period, and the end of a run of failures
 * once (with how many there were).
 *
 * Pure (the caller passes the monotonic time and does the logging), so that
 * the rule is tested without a broker. Threading: one thread per state.
 */
#ifndef HG_BROKER_LOGREPEAT_H
#define HG_BROKER_LOGREPEAT_H

#include <stdint.h>

#define LOG_REPEAT_PERIOD_MS 60000 /* the same cause is summarized at most this often */

typedef struct log_repeat {
    char cause[512];    /* the cause last logged ("" before any) */
    uint64_t failures;  /* in a row, since the last success */
    uint64_t unlogged;  /* failures of cause since its last line */
    uint64_t next_mono; /* a summary of cause is due from then on */
} log_repeat_t;

typedef enum log_repeat_say {
    LOG_REPEAT_QUIET = 0, /* nothing to log */
    LOG_REPEAT_FIRST,     /* a new cause (the first failure, or another than the last): log it */
    LOG_REPEAT_SUMMARY    /* the same cause a period after its last line: log it with *repeats */
} log_repeat_say_t;

/* A failure with cause (a NUL-terminated text, cut at 511 bytes) at
 * now_mono: what to log. *repeats (LOG_REPEAT_SUMMARY) gets how many
 * failures of the cause came since its last line, this one included. */
log_repeat_say_t log_repeat_fail(log_repeat_t *r, const char *cause, uint64_t now_mono, uint64_t *repeats);

/* A success: the count of failures in a row before it (0: none, nothing to
 * log), and the state is cleared. */
uint64_t log_repeat_ok(log_repeat_t *r);

#endif
