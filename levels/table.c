/*
 * levels/table.c — durations and the delay-level table (DESIGN §1).
 *
 * What it does
 *   - Durations themselves are base/units.h's one grammar ("500ms", "2.5s").
 *   - Parses, formats and compares level tables ("1s 5s ... 2h").
 *   - Maps a timeout to one level (RocketMQ style) and plans level chains for an
 *     exact delay (greedy: the largest level <= what remains, 25m = 20m + 5m).
 *
 * Invariants
 *   - A valid table has 1 <= count <= LVL_MAX_LEVELS, delay_ms[0] == 0 and
 *     0 < delay_ms[1] < delay_ms[2] < ... < delay_ms[count] <= LVL_MAX_DURATION_MS.
 *     lvl_table_parse and lvl_table_default only ever produce valid tables; the
 *     other functions assume one (a table read from disk goes through
 *     lvl_table_parse first). lvl_chain_plan still refuses an empty table rather
 *     than loop, because an empty table would make every hop 0.
 *   - A chain plan is exact to the millisecond, never early and never late:
 *     whole levels (greedy), then, when something is left that no level
 *     matches, one hop that waits exactly that remainder on the smallest level
 *     (lvl_hop_ms). Level queues are ordered by due time, not by enqueue time,
 *     so the short hop is served from the head like any other.
 *
 * Threads: pure functions on caller-owned values; no I/O, no allocation, no
 * global state. Safe from any thread.
 */
#include "levels/table.h"

#include "base/err.h"
#include "base/units.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#define MS_PER_SECOND UINT64_C(1000)
#define MS_PER_MINUTE (60 * MS_PER_SECOND)
#define MS_PER_HOUR   (60 * MS_PER_MINUTE)
#define MS_PER_DAY    (24 * MS_PER_HOUR)

/* Blanks are ASCII whitespace; locale-independent on purpose (isspace is not). */
static int is_blank(char c)
{
    return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f';
}

/* A span length as a printf precision (%.*s takes an int). */
static int span_width(size_t len)
{
    return len > 4096 ? 4096 : (int)len;
}

void lvl_table_default(lvl_table_t *t)
{
    static const uint64_t rocketmq_levels[] = {
        1 * MS_PER_SECOND,  5 * MS_PER_SECOND, 10 * MS_PER_SECOND, 30 * MS_PER_SECOND, 1 * MS_PER_MINUTE,
        2 * MS_PER_MINUTE,  3 * MS_PER_MINUTE, 4 * MS_PER_MINUTE,  5 * MS_PER_MINUTE,  6 * MS_PER_MINUTE,
        7 * MS_PER_MINUTE,  8 * MS_PER_MINUTE, 9 * MS_PER_MINUTE,  10 * MS_PER_MINUTE, 20 * MS_PER_MINUTE,
        30 * MS_PER_MINUTE, 1 * MS_PER_HOUR,   2 * MS_PER_HOUR,
    };
    int count = (int)(sizeof(rocketmq_levels) / sizeof(rocketmq_levels[0]));

    memset(t, 0, sizeof(*t));
    t->count = count;
    for (int i = 0; i < count; i++)
        t->delay_ms[i + 1] = rocketmq_levels[i];
}

int lvl_table_parse(const char *spec, lvl_table_t *t, char *err, size_t errlen)
{
    const char *p = spec != NULL ? spec : "";
    const char *prev_text = NULL; /* the previous level as written */
    size_t prev_len = 0;
    int after_comma = 0; /* a comma was seen since the last level */
    int count = 0;

    memset(t, 0, sizeof(*t));
    for (;;) {
        while (is_blank(*p))
            p++;
        if (*p == '\0') {
            if (after_comma) {
                err_set(err, errlen, "level %d is empty: the spec ends with a comma", count + 1);
                return -1;
            }
            break;
        }
        if (*p == ',') {
            if (count == 0 || after_comma) {
                err_set(err, errlen, "level %d is empty: %s", count + 1,
                        count == 0 ? "the spec starts with a comma" : "two commas in a row");
                return -1;
            }
            after_comma = 1;
            p++;
            continue;
        }

        const char *text = p;
        while (*p != '\0' && *p != ',' && !is_blank(*p))
            p++;
        size_t len = (size_t)(p - text);
        int level = count + 1;
        char why[256];
        uint64_t ms;

        after_comma = 0;
        if (level > LVL_MAX_LEVELS) {
            err_set(err, errlen, "too many levels: level %d (%.*s) is past the limit of %d", level, span_width(len),
                    text, LVL_MAX_LEVELS);
            return -1;
        }
        if (units_parse_duration(text, len, 0, &ms, why, sizeof(why)) != 0) {
            err_set(err, errlen, "level %d: %s", level, why);
            return -1;
        }
        if (ms == 0) {
            err_set(err, errlen, "level %d (%.*s) is zero: every level must be a delay above 0", level, span_width(len),
                    text);
            return -1;
        }
        if (count > 0 && ms <= t->delay_ms[count]) {
            err_set(err, errlen,
                    "level %d (%.*s) is not greater than level %d (%.*s): "
                    "levels must be strictly increasing",
                    level, span_width(len), text, count, span_width(prev_len), prev_text);
            return -1;
        }
        t->delay_ms[level] = ms;
        t->count = level;
        count = level;
        prev_text = text;
        prev_len = len;
    }
    if (count == 0) {
        err_set(err, errlen, "empty level table (expected delays such as \"1s 5s 10s\")");
        return -1;
    }
    return 0;
}

int lvl_table_format(const lvl_table_t *t, char *buf, size_t buflen)
{
    size_t total = 0;

    if (buf != NULL && buflen > 0)
        buf[0] = '\0';
    for (int level = 1; level <= t->count; level++) {
        char one[UNITS_TEXT_MAX];
        int n = units_format_duration(t->delay_ms[level], one, sizeof(one));
        /* Append " one" (no blank before the first) and count what would be
         * written, so the return value follows snprintf even when truncated. */
        const char *sep = level > 1 ? " " : "";
        if (buf != NULL && total < buflen)
            snprintf(buf + total, buflen - total, "%s%s", sep, one);
        total += strlen(sep) + (size_t)n;
    }
    return (int)total;
}

int lvl_table_diff(const lvl_table_t *a, const char *a_name, const lvl_table_t *b, const char *b_name, char *msg,
                   size_t msglen)
{
    int common = a->count < b->count ? a->count : b->count;
    int first_diff = 0;
    char a_text[UNITS_TEXT_MAX];
    char b_text[UNITS_TEXT_MAX];

    for (int level = 1; level <= common; level++) {
        if (a->delay_ms[level] != b->delay_ms[level]) {
            first_diff = level;
            break;
        }
    }
    if (first_diff == 0 && a->count == b->count) {
        if (msg != NULL && msglen > 0)
            msg[0] = '\0';
        return 0;
    }
    if (first_diff != 0) {
        units_format_duration(a->delay_ms[first_diff], a_text, sizeof(a_text));
        units_format_duration(b->delay_ms[first_diff], b_text, sizeof(b_text));
    }
    if (a->count != b->count && first_diff != 0) {
        /* A level inserted or removed in the middle shifts every later level:
         * the count is the headline, the first differing level the hint. */
        err_set(msg, msglen,
                "%s has %d levels but %s has %d "
                "(first difference: level %d is %s in %s but %s in %s)",
                a_name, a->count, b_name, b->count, first_diff, a_text, a_name, b_text, b_name);
    } else if (a->count != b->count) {
        err_set(msg, msglen, "%s has %d levels but %s has %d", a_name, a->count, b_name, b->count);
    } else {
        err_set(msg, msglen, "level %d is %s in %s but %s in %s", first_diff, a_text, a_name, b_text, b_name);
    }
    return 1;
}

int lvl_level_for(const lvl_table_t *t, uint64_t timeout_ms, lvl_round_t mode)
{
    if (t->count < 1)
        return 0;
    if (mode == LVL_ROUND_NEAREST) {
        int best = 1;
        uint64_t best_distance = UINT64_MAX;
        for (int level = 1; level <= t->count; level++) {
            uint64_t d = t->delay_ms[level];
            uint64_t distance = d >= timeout_ms ? d - timeout_ms : timeout_ms - d;
            /* <= so that a tie goes to the later, larger level */
            if (distance <= best_distance) {
                best = level;
                best_distance = distance;
            }
        }
        return best;
    }
    for (int level = 1; level <= t->count; level++) {
        if (t->delay_ms[level] >= timeout_ms)
            return level;
    }
    return t->count;
}

int lvl_next_hop(const lvl_table_t *t, uint64_t remaining_ms)
{
    if (remaining_ms == 0 || t->count < 1)
        return 0;
    if (remaining_ms < t->delay_ms[1])
        return 1;
    /* Binary search for the largest level <= remaining_ms: delay_ms[lo] <=
     * remaining_ms always holds, delay_ms[hi + 1] > remaining_ms (or hi == count). */
    int lo = 1;
    int hi = t->count;
    while (lo < hi) {
        int mid = lo + (hi - lo + 1) / 2;
        if (t->delay_ms[mid] <= remaining_ms)
            lo = mid;
        else
            hi = mid - 1;
    }
    return lo;
}

uint64_t lvl_hop_ms(const lvl_table_t *t, int level, uint64_t remaining_ms)
{
    if (level < 1 || level > t->count)
        return 0;
    return t->delay_ms[level] < remaining_ms ? t->delay_ms[level] : remaining_ms;
}

int lvl_chain_plan(const lvl_table_t *t, uint64_t delay_ms, uint64_t max_delay_ms, uint8_t *levels, int max_levels,
                   int *hops, char *err, size_t errlen)
{
    char delay_text[UNITS_TEXT_MAX];
    int limit = max_levels < LVL_MAX_HOPS ? max_levels : LVL_MAX_HOPS;

    *hops = 0;
    if (delay_ms > max_delay_ms) {
        char max_text[UNITS_TEXT_MAX];
        units_format_duration(delay_ms, delay_text, sizeof(delay_text));
        units_format_duration(max_delay_ms, max_text, sizeof(max_text));
        err_set(err, errlen, "delay %s exceeds max-delay %s", delay_text, max_text);
        return -1;
    }
    if (t->count < 1) {
        err_set(err, errlen, "the level table is empty");
        return -1;
    }

    uint64_t remaining = delay_ms;
    if (limit < 0)
        limit = 0;

    /* Repeating lvl_next_hop takes floor(remaining / delay) copies of each level
     * from the largest down, then one hop on the smallest level for a remainder
     * below it (it waits only that remainder).
     * Count the hops that way first (O(levels), even for a delay of years), so an
     * over-long plan is refused without writing or looping over it. A level
     * longer than what is left takes no copy: no division for it (a SEND's
     * plan is made twice, on the loop and on the storage thread, and the
     * divisions by every level were most of its cost). */
    uint64_t needed = 0;
    uint64_t rest = remaining;
    for (int level = t->count; level >= 1 && rest > 0; level--) {
        if (rest >= t->delay_ms[level]) {
            needed += rest / t->delay_ms[level];
            rest %= t->delay_ms[level];
        }
    }
    if (rest > 0)
        needed++;
    if (needed > (uint64_t)limit) {
        units_format_duration(delay_ms, delay_text, sizeof(delay_text));
        err_set(err, errlen,
                "delay %s needs %" PRIu64 " hops with this level table, more than "
                "the limit of %d",
                delay_text, needed, limit);
        return -1;
    }

    int n = 0;
    while (remaining > 0 && n < limit) { /* n < limit holds anyway: n ends at needed */
        int level = lvl_next_hop(t, remaining);
        uint64_t d = t->delay_ms[level];
        levels[n++] = (uint8_t)level;
        remaining = d >= remaining ? 0 : remaining - d; /* the last hop may wait only the rest */
    }
    *hops = n;
    return 0;
}

uint64_t lvl_plan_total(const lvl_table_t *t, const uint8_t *levels, int hops)
{
    uint64_t total = 0;

    for (int i = 0; i < hops; i++) {
        /* A level outside the table has no delay; make the check fail loudly
         * rather than read past the table or return a plausible sum. */
        if (levels[i] < 1 || levels[i] > t->count)
            return UINT64_MAX;
        total += t->delay_ms[levels[i]];
    }
    return total;
}
