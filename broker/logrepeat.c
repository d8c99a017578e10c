/*
 * broker/logrepeat.c — the rule of what to log of a repeating failure (see
 * logrepeat.h): a cause is compared by its whole text, so a failure whose
 * text changes (another key, another file) is logged as a new cause.
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

uint64_t log_repeat_ok(log_repeat_t *r)
{
    uint64_t failures = r->failures;
    memset(r, 0, sizeof *r);
    return failures;
}
