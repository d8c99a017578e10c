/*
 * broker/logrepeat.c — the rule of what to log of a repeating failure (see
 * logrepeat.h): a cause is compared by its whole text, so a failure whose
 * text changes (another key, another file) is logged as a new cause.
 * log_repeat_report is the rule with its lines, for the callers whose
 * lines differ only in level and words (the storage thread's reopen,
 * scheduler run and spare segment). Thread: the caller's (one per state).
 */
#include "broker/logrepeat.h"

#include <stdio.h>
#include <string.h>

log_repeat_say_t log_repeat_fail(log_repeat_t *r, const char *cause, uint64_t now_mono, uint64_t *repeats)
{
    r->failures++;
    char cut[sizeof r->cause];
    snprintf(cut, sizeof cut, "%s", cause);
    if (r->cause[0] == '\0' || strcmp(cut, r->cause) != 0) {
        memcpy(r->cause, cut, sizeof cut);
        r->unlogged = 0;
        r->next_mono = now_mono + LOG_REPEAT_PERIOD_MS;
        return LOG_REPEAT_FIRST;
    }
    r->unlogged++;
    if (now_mono < r->next_mono) {
        return LOG_REPEAT_QUIET;
    }
    *repeats = r->unlogged;
    r->unlogged = 0;
    r->next_mono = now_mono + LOG_REPEAT_PERIOD_MS;
    return LOG_REPEAT_SUMMARY;
}

log_repeat_say_t log_repeat_report(log_repeat_t *r, log_level_t level, uint64_t now_mono, const char *cause,
                                   log_repeat_count_t count, const char *first_fmt, const char *again_fmt)
{
    uint64_t repeats = 0;
    log_repeat_say_t say = log_repeat_fail(r, cause, now_mono, &repeats);
    if (say == LOG_REPEAT_FIRST) {
        log_msg(level, first_fmt, cause);
    } else if (say == LOG_REPEAT_SUMMARY) {
        uint64_t named = count == LOG_REPEAT_COUNT_ATTEMPTS ? r->failures : repeats;
        log_msg(level, again_fmt, (unsigned long long)named, cause);
    }
    return say;
}

uint64_t log_repeat_ok(log_repeat_t *r)
{
    uint64_t failures = r->failures;
    memset(r, 0, sizeof *r);
    return failures;
}
