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
 * The rule is pure (log_repeat_fail, log_repeat_ok: the caller passes the
 * monotonic time and does the logging), so that it is tested without a
 * broker; log_repeat_report applies it and writes the line through
 * common/log.h, in the caller's words. Threading: one thread per state.
 */
#ifndef HG_BROKER_LOGREPEAT_H
#define HG_BROKER_LOGREPEAT_H

#include "common/log.h"

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

/* Which count a summary line names. */
typedef enum log_repeat_count {
    LOG_REPEAT_COUNT_ATTEMPTS,  /* the failures in a row since the last success, this one included */
    LOG_REPEAT_COUNT_SINCE_LINE /* the failures of the cause since its last line, this one included */
} log_repeat_count_t;

/* A failure with cause at now_mono, logged at level by log_repeat_fail's
 * rule: a new cause as first_fmt with the cause (one %s), a summary as
 * again_fmt with the count (unsigned long long) and the cause, in that
 * order — "still failing (%llu attempts): %s"; a wording that names the
 * cause first takes them by position ("%2$s (%1$llu times)"). Nothing is
 * logged while the same cause repeats within its period. Returns what was
 * logged (LOG_REPEAT_QUIET: nothing). */
log_repeat_say_t log_repeat_report(log_repeat_t *r, log_level_t level, uint64_t now_mono, const char *cause,
                                   log_repeat_count_t count, const char *first_fmt, const char *again_fmt)
    __attribute__((format(printf, 6, 0), format(printf, 7, 0)));

/* A success: the count of failures in a row before it (0: none, nothing to
 * log), and the state is cleared. */
uint64_t log_repeat_ok(log_repeat_t *r);

#endif
