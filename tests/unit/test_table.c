/*
 * tests/unit/test_table.c — CUnit suites for levels/table.c (DESIGN §1).
 *
 * Pure logic, no temp directories or processes: level tables (parse, format, diff), the one-level mapping
 * (lvl_level_for), and chain plans. The chain suite plans every delay from 1 s
 * to 3 d in 1-second steps with the default table and checks each plan hop by
 * hop against lvl_next_hop, so the greedy rule and the hop bound of DESIGN §1
 * (<= 12 below 2h in whole seconds, 13 with a millisecond remainder, +1
 * per 2h above) are checked exhaustively, not sampled.
 *
 * Sweeps count their own failures and report the first failing value through
 * one assertion with a formatted message (TU_CHECK), instead of millions of
 * CU_ASSERTs that would all say the same thing.
 */
#include "levels/table.h"
#include "tests/helpers/testutil.h"

#include <CUnit/CUnit.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#define SEC  UINT64_C(1000)
#define MIN  (60 * SEC)
#define HOUR (60 * MIN)
#define DAY  (24 * HOUR)

/* One CUnit assertion whose failure message is formatted (CUnit copies it). */

/* ------------------------------------------------------------------- tables */

static int parse_ok(const char *spec, lvl_table_t *t, int line)
{
    char err[256] = "";
    int rc = lvl_table_parse(spec, t, err, sizeof(err));

    TU_CHECK_AT(rc == 0, line, "table \"%s\" should parse: %s", spec, err);
    return rc == 0;
}
#define PARSE_OK(spec, t) parse_ok((spec), (t), __LINE__)

static void expect_table_error(const char *spec, const char *want_exact, const char *frag, int line)
{
    char err[512] = "";
    lvl_table_t t;
    int rc = lvl_table_parse(spec, &t, err, sizeof(err));

    TU_CHECK_AT(rc == -1, line, "table \"%s\" should fail", spec);
    if (want_exact != NULL)
        TU_CHECK_AT(strcmp(err, want_exact) == 0, line, "table \"%s\": message \"%s\", want \"%s\"", spec, err,
                    want_exact);
    if (frag != NULL)
        TU_CHECK_AT(strstr(err, frag) != NULL, line, "table \"%s\": message \"%s\" lacks \"%s\"", spec, err, frag);
}
#define EXPECT_TABLE_ERROR(spec, exact, frag) expect_table_error((spec), (exact), (frag), __LINE__)

static void test_table_default(void)
{
    lvl_table_t def, parsed;
    static const uint64_t want[19] = {
        0,       1 * SEC, 5 * SEC, 10 * SEC, 30 * SEC, 1 * MIN,  2 * MIN,  3 * MIN,  4 * MIN,  5 * MIN,
        6 * MIN, 7 * MIN, 8 * MIN, 9 * MIN,  10 * MIN, 20 * MIN, 30 * MIN, 1 * HOUR, 2 * HOUR,
    };

    memset(&def, 0xA5, sizeof(def));
    lvl_table_default(&def);
    CU_ASSERT_EQUAL_FATAL(def.count, 18);
    for (int i = 0; i <= 18; i++)
        TU_CHECK(def.delay_ms[i] == want[i], "default level %d is %" PRIu64 ", want %" PRIu64, i, def.delay_ms[i],
                 want[i]);

    CU_ASSERT_FATAL(PARSE_OK(LVL_DEFAULT_SPEC, &parsed));
    CU_ASSERT_EQUAL(parsed.count, def.count);
    CU_ASSERT_EQUAL(memcmp(parsed.delay_ms, def.delay_ms, sizeof(def.delay_ms)), 0);
    CU_ASSERT_EQUAL(lvl_table_diff(&def, "default", &parsed, "spec", NULL, 0), 0);
}

static void test_table_separators(void)
{
    lvl_table_t t;

    CU_ASSERT_FATAL(PARSE_OK("1s,5s,10s", &t));
    CU_ASSERT_EQUAL(t.count, 3);
    CU_ASSERT_EQUAL(t.delay_ms[0], 0);
    CU_ASSERT_EQUAL(t.delay_ms[1], 1 * SEC);
    CU_ASSERT_EQUAL(t.delay_ms[2], 5 * SEC);
    CU_ASSERT_EQUAL(t.delay_ms[3], 10 * SEC);

    CU_ASSERT_FATAL(PARSE_OK("  1s, 5s ,10s\t30s\n1m ,\t 2m  ", &t));
    CU_ASSERT_EQUAL(t.count, 6);
    CU_ASSERT_EQUAL(t.delay_ms[4], 30 * SEC);
    CU_ASSERT_EQUAL(t.delay_ms[6], 2 * MIN);

    CU_ASSERT_FATAL(PARSE_OK("2h", &t));
    CU_ASSERT_EQUAL(t.count, 1);
    CU_ASSERT_EQUAL(t.delay_ms[1], 2 * HOUR);

    /* different spellings of one delay are one delay */
    CU_ASSERT_FATAL(PARSE_OK("1500ms 120s 1h", &t));
    CU_ASSERT_EQUAL(t.delay_ms[1], 1500);
    CU_ASSERT_EQUAL(t.delay_ms[2], 2 * MIN);
    CU_ASSERT_EQUAL(t.delay_ms[3], HOUR);

    /* a level may be as long as the duration cap */
    CU_ASSERT_FATAL(PARSE_OK("1s 36500d", &t));
    CU_ASSERT_EQUAL(t.delay_ms[2], LVL_MAX_DURATION_MS);
}

static void test_table_errors(void)
{
    EXPECT_TABLE_ERROR("", NULL, "empty level table");
    EXPECT_TABLE_ERROR(" \t\n ", NULL, "empty level table");
    EXPECT_TABLE_ERROR(",", "level 1 is empty: the spec starts with a comma", NULL);
    EXPECT_TABLE_ERROR(", 1s", "level 1 is empty: the spec starts with a comma", NULL);
    EXPECT_TABLE_ERROR("1s,,5s", "level 2 is empty: two commas in a row", NULL);
    EXPECT_TABLE_ERROR("1s, ,5s", "level 2 is empty: two commas in a row", NULL);
    EXPECT_TABLE_ERROR("1s,5s,", "level 3 is empty: the spec ends with a comma", NULL);

    EXPECT_TABLE_ERROR("1s 5s 10s 2s",
                       "level 4 (2s) is not greater than level 3 (10s): "
                       "levels must be strictly increasing",
                       NULL);
    EXPECT_TABLE_ERROR("10s 5s",
                       "level 2 (5s) is not greater than level 1 (10s): "
                       "levels must be strictly increasing",
                       NULL);
    EXPECT_TABLE_ERROR("1s 5s 5s",
                       "level 3 (5s) is not greater than level 2 (5s): "
                       "levels must be strictly increasing",
                       NULL);
    /* a duplicate spelled differently is named as written */
    EXPECT_TABLE_ERROR("1s,1000ms",
                       "level 2 (1000ms) is not greater than level 1 (1s): "
                       "levels must be strictly increasing",
                       NULL);

    EXPECT_TABLE_ERROR("0s 1s", "level 1 (0s) is zero: every level must be a delay above 0", NULL);
    EXPECT_TABLE_ERROR("0ms", NULL, "level 1 (0ms) is zero");

    /* a bad duration names its level and the text */
    EXPECT_TABLE_ERROR("1s 5s 5x 10s", "level 3: unknown unit \"x\" in duration \"5x\" (use ms, s, m, h or d)", NULL);
    EXPECT_TABLE_ERROR("1s,5s,-5s", NULL, "level 3: sign not allowed in duration \"-5s\"");
    EXPECT_TABLE_ERROR("1s 30", NULL, "level 2: missing unit in duration \"30\"");
    EXPECT_TABLE_ERROR("1s 5s5", NULL, "level 2: unexpected \"5\" after \"5s\"");
    EXPECT_TABLE_ERROR("1s 36501d", NULL, "level 2: duration \"36501d\" is above the maximum");
    /* "5 s" in a spec is two items: "5" and "s" */
    EXPECT_TABLE_ERROR("1s 5 s", NULL, "level 2: missing unit in duration \"5\"");
}

static void test_table_too_many(void)
{
    char spec[1024];
    size_t used = 0;
    lvl_table_t t;

    for (int i = 1; i <= LVL_MAX_LEVELS; i++)
        used += (size_t)snprintf(spec + used, sizeof(spec) - used, "%s%ds", i > 1 ? " " : "", i);
    CU_ASSERT_FATAL(PARSE_OK(spec, &t));
    CU_ASSERT_EQUAL(t.count, LVL_MAX_LEVELS);
    CU_ASSERT_EQUAL(t.delay_ms[LVL_MAX_LEVELS], (uint64_t)LVL_MAX_LEVELS * SEC);

    snprintf(spec + used, sizeof(spec) - used, " %ds", LVL_MAX_LEVELS + 1);
    EXPECT_TABLE_ERROR(spec, "too many levels: level 65 (65s) is past the limit of 64", NULL);
}

static void expect_table_format(const char *spec, const char *want, int line)
{
    lvl_table_t t, back;
    char buf[1024] = "";

    if (!parse_ok(spec, &t, line))
        return;
    int n = lvl_table_format(&t, buf, sizeof(buf));
    TU_CHECK_AT(strcmp(buf, want) == 0 && n == (int)strlen(want), line,
                "table \"%s\" formats as \"%s\" (%d), want \"%s\"", spec, buf, n, want);
    if (!parse_ok(buf, &back, line))
        return;
    TU_CHECK_AT(back.count == t.count && memcmp(back.delay_ms, t.delay_ms, sizeof(t.delay_ms)) == 0, line,
                "table \"%s\" does not read back equal from \"%s\"", spec, buf);
}
#define EXPECT_TABLE_FORMAT(spec, want) expect_table_format((spec), (want), __LINE__)

static void test_table_format(void)
{
    lvl_table_t def;
    char buf[256];

    lvl_table_default(&def);
    CU_ASSERT_EQUAL(lvl_table_format(&def, buf, sizeof(buf)), (int)strlen(LVL_DEFAULT_SPEC));
    CU_ASSERT_STRING_EQUAL(buf, LVL_DEFAULT_SPEC);

    EXPECT_TABLE_FORMAT(LVL_DEFAULT_SPEC, LVL_DEFAULT_SPEC);
    EXPECT_TABLE_FORMAT("1s,5s,10s", "1s 5s 10s");
    EXPECT_TABLE_FORMAT("  1500ms ,90s 120s\t3600s 3d ", "1500ms 90s 2m 1h 3d");
    EXPECT_TABLE_FORMAT("1ms 36500d", "1ms 36500d");

    /* snprintf semantics: truncated output, full length returned */
    char small[6];
    CU_ASSERT_EQUAL(lvl_table_format(&def, small, sizeof(small)), (int)strlen(LVL_DEFAULT_SPEC));
    CU_ASSERT_STRING_EQUAL(small, "1s 5s");
    CU_ASSERT_EQUAL(lvl_table_format(&def, NULL, 0), (int)strlen(LVL_DEFAULT_SPEC));

    /* the longest table: 64 levels round-trip */
    char spec[2048];
    size_t used = 0;
    for (int i = 1; i <= LVL_MAX_LEVELS; i++)
        used += (size_t)snprintf(spec + used, sizeof(spec) - used, "%s%dm", i > 1 ? "," : "", i * 7);
    lvl_table_t t, back;
    char text[2048];
    CU_ASSERT_FATAL(PARSE_OK(spec, &t));
    lvl_table_format(&t, text, sizeof(text));
    CU_ASSERT_FATAL(PARSE_OK(text, &back));
    CU_ASSERT_EQUAL(lvl_table_diff(&t, "a", &back, "b", NULL, 0), 0);
}

static void test_table_diff(void)
{
    lvl_table_t def, same, shorter, changed, inserted;
    char msg[512];

    lvl_table_default(&def);
    CU_ASSERT_FATAL(PARSE_OK(LVL_DEFAULT_SPEC, &same));
    CU_ASSERT_FATAL(PARSE_OK("1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h", &shorter));
    CU_ASSERT_FATAL(PARSE_OK("1s 5s 15s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h", &changed));
    CU_ASSERT_FATAL(PARSE_OK("1s 2s 5s 10s", &inserted));

    strcpy(msg, "stale");
    CU_ASSERT_EQUAL(lvl_table_diff(&def, "the data directory", &same, "the configuration", msg, sizeof(msg)), 0);
    CU_ASSERT_STRING_EQUAL(msg, "");

    CU_ASSERT_EQUAL(lvl_table_diff(&def, "the data directory", &shorter, "the configuration", msg, sizeof(msg)), 1);
    CU_ASSERT_STRING_EQUAL(msg, "the data directory has 18 levels but the configuration has 17");

    CU_ASSERT_EQUAL(lvl_table_diff(&shorter, "A", &def, "B", msg, sizeof(msg)), 1);
    CU_ASSERT_STRING_EQUAL(msg, "A has 17 levels but B has 18");

    CU_ASSERT_EQUAL(lvl_table_diff(&def, "the data directory", &changed, "the configuration", msg, sizeof(msg)), 1);
    CU_ASSERT_STRING_EQUAL(msg, "level 3 is 10s in the data directory but 15s in the configuration");

    /* a level inserted in the middle: the count first, then the first difference */
    CU_ASSERT_EQUAL(lvl_table_diff(&def, "the data directory", &inserted, "the configuration", msg, sizeof(msg)), 1);
    CU_ASSERT_STRING_EQUAL(msg, "the data directory has 18 levels but the configuration has 4 "
                                "(first difference: level 2 is 5s in the data directory but 2s in "
                                "the configuration)");

    /* msg may be NULL */
    CU_ASSERT_EQUAL(lvl_table_diff(&def, "a", &changed, "b", NULL, 0), 1);
    CU_ASSERT_EQUAL(lvl_table_diff(&def, "a", &same, "b", NULL, 0), 0);
}

/* ---------------------------------------------------- one level per timeout */

static void test_level_for_up(void)
{
    lvl_table_t t;
    lvl_table_default(&t);

    CU_ASSERT_EQUAL(lvl_level_for(&t, 0, LVL_ROUND_UP), 1);
    CU_ASSERT_EQUAL(lvl_level_for(&t, 1, LVL_ROUND_UP), 1);
    CU_ASSERT_EQUAL(lvl_level_for(&t, 1000, LVL_ROUND_UP), 1);
    CU_ASSERT_EQUAL(lvl_level_for(&t, 1001, LVL_ROUND_UP), 2);
    CU_ASSERT_EQUAL(lvl_level_for(&t, 25 * MIN, LVL_ROUND_UP), 16); /* 30m, never early */
    CU_ASSERT_EQUAL(lvl_level_for(&t, 2 * HOUR, LVL_ROUND_UP), 18);
    CU_ASSERT_EQUAL(lvl_level_for(&t, 2 * HOUR + 1, LVL_ROUND_UP), 18); /* above max: the last */
    CU_ASSERT_EQUAL(lvl_level_for(&t, 3 * DAY, LVL_ROUND_UP), 18);
    CU_ASSERT_EQUAL(lvl_level_for(&t, UINT64_MAX, LVL_ROUND_UP), 18);

    for (int level = 1; level <= t.count; level++) {
        uint64_t d = t.delay_ms[level];
        TU_CHECK(lvl_level_for(&t, d, LVL_ROUND_UP) == level, "exact hit on level %d", level);
        TU_CHECK(lvl_level_for(&t, d - 1, LVL_ROUND_UP) == level, "just below level %d", level);
        if (level < t.count)
            TU_CHECK(lvl_level_for(&t, d + 1, LVL_ROUND_UP) == level + 1, "just above level %d", level);
    }

    /* property over every 250 ms up to 2h + 10 s: the smallest level >= timeout */
    uint64_t first_bad = UINT64_MAX;
    for (uint64_t ms = 0; ms <= 2 * HOUR + 10 * SEC; ms += 250) {
        int l = lvl_level_for(&t, ms, LVL_ROUND_UP);
        int ok = l >= 1 && l <= t.count;
        if (ok && ms <= t.delay_ms[t.count])
            ok = t.delay_ms[l] >= ms && (l == 1 || t.delay_ms[l - 1] < ms);
        else if (ok)
            ok = l == t.count;
        if (!ok && first_bad == UINT64_MAX)
            first_bad = ms;
    }
    TU_CHECK(first_bad == UINT64_MAX, "ROUND_UP wrong for %" PRIu64 " ms", first_bad);
}

static void test_level_for_nearest(void)
{
    lvl_table_t t;
    lvl_table_default(&t);

    CU_ASSERT_EQUAL(lvl_level_for(&t, 0, LVL_ROUND_NEAREST), 1);
    CU_ASSERT_EQUAL(lvl_level_for(&t, 2999, LVL_ROUND_NEAREST), 1);
    CU_ASSERT_EQUAL(lvl_level_for(&t, 3000, LVL_ROUND_NEAREST), 2); /* tie 1s/5s: larger */
    CU_ASSERT_EQUAL(lvl_level_for(&t, 3001, LVL_ROUND_NEAREST), 2);
    CU_ASSERT_EQUAL(lvl_level_for(&t, 24 * MIN + 59 * SEC, LVL_ROUND_NEAREST), 15); /* 20m */
    CU_ASSERT_EQUAL(lvl_level_for(&t, 25 * MIN, LVL_ROUND_NEAREST), 16);            /* tie 20m/30m */
    CU_ASSERT_EQUAL(lvl_level_for(&t, 90 * MIN, LVL_ROUND_NEAREST), 18);            /* tie 1h/2h */
    CU_ASSERT_EQUAL(lvl_level_for(&t, 90 * MIN - 1, LVL_ROUND_NEAREST), 17);
    CU_ASSERT_EQUAL(lvl_level_for(&t, 3 * DAY, LVL_ROUND_NEAREST), 18);
    CU_ASSERT_EQUAL(lvl_level_for(&t, UINT64_MAX, LVL_ROUND_NEAREST), 18);

    for (int level = 1; level <= t.count; level++)
        TU_CHECK(lvl_level_for(&t, t.delay_ms[level], LVL_ROUND_NEAREST) == level, "exact hit on level %d", level);

    /* property: no level is strictly nearer, and no larger level is as near */
    uint64_t first_bad = UINT64_MAX;
    for (uint64_t ms = 0; ms <= 2 * HOUR + 10 * SEC; ms += 250) {
        int l = lvl_level_for(&t, ms, LVL_ROUND_NEAREST);
        if (l < 1 || l > t.count) {
            first_bad = ms;
            break;
        }
        uint64_t best = t.delay_ms[l] > ms ? t.delay_ms[l] - ms : ms - t.delay_ms[l];
        for (int other = 1; other <= t.count; other++) {
            uint64_t d = t.delay_ms[other] > ms ? t.delay_ms[other] - ms : ms - t.delay_ms[other];
            if (d < best || (d == best && other > l))
                first_bad = first_bad == UINT64_MAX ? ms : first_bad;
        }
    }
    TU_CHECK(first_bad == UINT64_MAX, "ROUND_NEAREST wrong for %" PRIu64 " ms", first_bad);
}

/* ------------------------------------------------------------- chain plans */

static void test_hop_ms(void)
{
    lvl_table_t t, custom;
    lvl_table_default(&t);

    CU_ASSERT_EQUAL(lvl_hop_ms(&t, 1, 1), 1); /* a remainder waits only itself */
    CU_ASSERT_EQUAL(lvl_hop_ms(&t, 1, 999), 999);
    CU_ASSERT_EQUAL(lvl_hop_ms(&t, 1, 1000), 1000);
    CU_ASSERT_EQUAL(lvl_hop_ms(&t, 1, 1500), 1000); /* a whole level: its delay */
    CU_ASSERT_EQUAL(lvl_hop_ms(&t, 18, 5 * HOUR), 2 * HOUR);
    CU_ASSERT_EQUAL(lvl_hop_ms(&t, 0, 5000), 0); /* outside the table: no wait */
    CU_ASSERT_EQUAL(lvl_hop_ms(&t, 19, 5000), 0);
    CU_ASSERT_FATAL(PARSE_OK("5s 1m", &custom));
    CU_ASSERT_EQUAL(lvl_hop_ms(&custom, 1, 3 * SEC), 3 * SEC);
    CU_ASSERT_EQUAL(lvl_hop_ms(&custom, lvl_next_hop(&custom, 59999), 59999), 5 * SEC);
}

static void test_next_hop(void)
{
    lvl_table_t t, custom;
    lvl_table_default(&t);

    CU_ASSERT_EQUAL(lvl_next_hop(&t, 0), 0);
    CU_ASSERT_EQUAL(lvl_next_hop(&t, 1), 1); /* below the smallest: the smallest */
    CU_ASSERT_EQUAL(lvl_next_hop(&t, 999), 1);
    CU_ASSERT_EQUAL(lvl_next_hop(&t, 1000), 1);
    CU_ASSERT_EQUAL(lvl_next_hop(&t, 4999), 1);
    CU_ASSERT_EQUAL(lvl_next_hop(&t, 5000), 2);
    CU_ASSERT_EQUAL(lvl_next_hop(&t, 25 * MIN), 15); /* 20m */
    CU_ASSERT_EQUAL(lvl_next_hop(&t, 2 * HOUR - 1), 17);
    CU_ASSERT_EQUAL(lvl_next_hop(&t, 2 * HOUR), 18);
    CU_ASSERT_EQUAL(lvl_next_hop(&t, 5 * HOUR), 18);
    CU_ASSERT_EQUAL(lvl_next_hop(&t, UINT64_MAX), 18);

    CU_ASSERT_FATAL(PARSE_OK("5s 1m", &custom));
    CU_ASSERT_EQUAL(lvl_next_hop(&custom, 1), 1);
    CU_ASSERT_EQUAL(lvl_next_hop(&custom, 4999), 1);
    CU_ASSERT_EQUAL(lvl_next_hop(&custom, 59999), 1);
    CU_ASSERT_EQUAL(lvl_next_hop(&custom, 60000), 2);

    /* property: the largest level <= remaining, for every 100 ms up to 2h + 1m */
    uint64_t first_bad = UINT64_MAX;
    for (uint64_t ms = 1000; ms <= 2 * HOUR + MIN; ms += 100) {
        int l = lvl_next_hop(&t, ms);
        int ok = l >= 1 && l <= t.count && t.delay_ms[l] <= ms && (l == t.count || t.delay_ms[l + 1] > ms);
        if (!ok && first_bad == UINT64_MAX)
            first_bad = ms;
    }
    TU_CHECK(first_bad == UINT64_MAX, "next hop wrong for %" PRIu64 " ms", first_bad);
}

/* Plan delay_ms and check it: success, every hop being the greedy choice for
 * what remained, and the waits (lvl_hop_ms) adding up to delay_ms exactly —
 * never early, never late. Returns the hop count, or -1 (and fills why[])
 * when the plan is wrong. */
static int plan_and_check(const lvl_table_t *t, uint64_t delay_ms, uint64_t max_delay_ms, char *why, size_t whylen)
{
    uint8_t levels[LVL_MAX_HOPS];
    char err[256] = "";
    int hops = -1;

    if (lvl_chain_plan(t, delay_ms, max_delay_ms, levels, LVL_MAX_HOPS, &hops, err, sizeof(err)) != 0) {
        snprintf(why, whylen, "plan failed: %s", err);
        return -1;
    }
    uint64_t remaining = delay_ms, waited = 0;
    for (int i = 0; i < hops; i++) {
        int greedy = lvl_next_hop(t, remaining);
        if (levels[i] != greedy) {
            snprintf(why, whylen, "hop %d is level %d, greedy is %d", i + 1, levels[i], greedy);
            return -1;
        }
        uint64_t d = lvl_hop_ms(t, levels[i], remaining);
        if (d == 0 || d > t->delay_ms[levels[i]]) {
            snprintf(why, whylen, "hop %d waits %" PRIu64 " ms on level %d", i + 1, d, levels[i]);
            return -1;
        }
        waited += d;
        remaining -= d;
        if (remaining == 0 && i + 1 != hops) {
            snprintf(why, whylen, "%d hops left after the delay is covered", hops - i - 1);
            return -1;
        }
    }
    if (waited != delay_ms) {
        snprintf(why, whylen, "the hops wait %" PRIu64 " ms, asked %" PRIu64, waited, delay_ms);
        return -1;
    }
    return hops;
}

static void test_chain_every_second_to_3d(void)
{
    lvl_table_t t;
    char why[256] = "";
    uint64_t first_bad = 0;
    int max_below_2h = 0, max_overall = 0;
    uint64_t max_overall_at = 0, plans = 0;

    lvl_table_default(&t);
    for (uint64_t delay = SEC; delay <= 3 * DAY; delay += SEC, plans++) {
        int hops = plan_and_check(&t, delay, 3 * DAY, why, sizeof(why));
        if (hops < 0) {
            first_bad = delay;
            break;
        }
        uint64_t bound = delay < 2 * HOUR ? 12 : 12 + delay / (2 * HOUR);
        if ((uint64_t)hops > bound) {
            snprintf(why, sizeof(why), "%d hops, bound %" PRIu64, hops, bound);
            first_bad = delay;
            break;
        }
        if (delay < 2 * HOUR && hops > max_below_2h)
            max_below_2h = hops;
        if (hops > max_overall) {
            max_overall = hops;
            max_overall_at = delay;
        }
    }
    TU_CHECK(first_bad == 0, "delay %" PRIu64 " ms: %s", first_bad, why);
    CU_ASSERT_EQUAL(plans, 3 * 86400);
    /* the bound of DESIGN §1 is tight below 2h: 1h59m59s = 1h 30m 20m 9m 30s 10s 10s 5s 1s*4 */
    CU_ASSERT_EQUAL(max_below_2h, 12);
    /* up to 3d: 35 * 2h + a 12-hop remainder (first reached at 71h41m59s) */
    CU_ASSERT_EQUAL(max_overall, 35 + 12);
    CU_ASSERT_EQUAL(max_overall_at, 35 * 2 * HOUR + HOUR + 41 * MIN + 59 * SEC);
    printf("\n    max hops: %d below 2h, %d up to 3d (first at %" PRIu64 " s) over %" PRIu64 " plans ", max_below_2h,
           max_overall, max_overall_at / SEC, plans);
}

/* A delay with a millisecond remainder takes one hop more at most: the
 * remainder waits on its own (DESIGN §1). Every second below 2h plus 1 ms and
 * plus 999 ms; the bound, 13, is reached (1h41m59.001s). */
static void test_chain_ms_remainder_below_2h(void)
{
    lvl_table_t t;
    char why[256] = "";
    uint64_t first_bad = 0;
    int max_hops = 0;

    lvl_table_default(&t);
    for (uint64_t s = 0; s < 2 * HOUR && first_bad == 0; s += SEC) {
        for (uint64_t rem = 1; rem < SEC; rem += 998) {
            int hops = plan_and_check(&t, s + rem, 3 * DAY, why, sizeof(why));
            if (hops < 0 || hops > 13) {
                if (hops > 13)
                    snprintf(why, sizeof(why), "%d hops, bound 13", hops);
                first_bad = s + rem;
                break;
            }
            if (hops > max_hops)
                max_hops = hops;
        }
    }
    TU_CHECK(first_bad == 0, "delay %" PRIu64 " ms: %s", first_bad, why);
    CU_ASSERT_EQUAL(max_hops, 13);
    CU_ASSERT_EQUAL(plan_and_check(&t, HOUR + 41 * MIN + 59 * SEC + 1, 3 * DAY, why, sizeof(why)), 13);
}

static void test_chain_examples(void)
{
    lvl_table_t t;
    uint8_t levels[LVL_MAX_HOPS];
    char err[256];
    int hops = -1;

    lvl_table_default(&t);

    /* 25m = 20m + 5m */
    CU_ASSERT_EQUAL_FATAL(lvl_chain_plan(&t, 25 * MIN, 3 * DAY, levels, LVL_MAX_HOPS, &hops, err, sizeof(err)), 0);
    CU_ASSERT_EQUAL_FATAL(hops, 2);
    CU_ASSERT_EQUAL(levels[0], 15);
    CU_ASSERT_EQUAL(levels[1], 9);
    CU_ASSERT_EQUAL(lvl_plan_total(&t, levels, hops), 25 * MIN);

    /* 1h59m59s: the 12-hop worst case below 2h */
    static const uint8_t worst[12] = { 17, 16, 15, 13, 4, 3, 3, 2, 1, 1, 1, 1 };
    CU_ASSERT_EQUAL_FATAL(lvl_chain_plan(&t, 2 * HOUR - SEC, 3 * DAY, levels, LVL_MAX_HOPS, &hops, err, sizeof(err)),
                          0);
    CU_ASSERT_EQUAL_FATAL(hops, 12);
    CU_ASSERT_EQUAL(memcmp(levels, worst, sizeof(worst)), 0);

    /* 3d - 1s = 35 * 2h + 1h59m59s: 47 hops, the last 12 as above */
    CU_ASSERT_EQUAL_FATAL(lvl_chain_plan(&t, 3 * DAY - SEC, 3 * DAY, levels, LVL_MAX_HOPS, &hops, err, sizeof(err)), 0);
    CU_ASSERT_EQUAL_FATAL(hops, 47);
    CU_ASSERT_EQUAL(memcmp(levels + 35, worst, sizeof(worst)), 0);

    /* 3d exactly: 36 hops of 2h (max-delay is inclusive) */
    CU_ASSERT_EQUAL_FATAL(lvl_chain_plan(&t, 3 * DAY, 3 * DAY, levels, LVL_MAX_HOPS, &hops, err, sizeof(err)), 0);
    CU_ASSERT_EQUAL_FATAL(hops, 36);
    int all_2h = 1;
    for (int i = 0; i < hops; i++)
        all_2h &= levels[i] == 18;
    CU_ASSERT(all_2h);

    /* a level's own delay is one hop of that level */
    for (int level = 1; level <= t.count; level++) {
        int ok = lvl_chain_plan(&t, t.delay_ms[level], 3 * DAY, levels, LVL_MAX_HOPS, &hops, err, sizeof(err)) == 0 &&
                 hops == 1 && levels[0] == level;
        TU_CHECK(ok, "delay of level %d is not one hop of it", level);
    }
}

static void test_chain_subsecond_and_zero(void)
{
    lvl_table_t t;
    uint8_t levels[LVL_MAX_HOPS];
    char err[256];
    int hops = -1;

    lvl_table_default(&t);

    CU_ASSERT_EQUAL_FATAL(lvl_chain_plan(&t, 0, 3 * DAY, levels, LVL_MAX_HOPS, &hops, err, sizeof(err)), 0);
    CU_ASSERT_EQUAL(hops, 0);
    CU_ASSERT_EQUAL(lvl_plan_total(&t, levels, hops), 0);
    /* 0 hops needs no room at all */
    hops = -1;
    CU_ASSERT_EQUAL(lvl_chain_plan(&t, 0, 3 * DAY, NULL, 0, &hops, err, sizeof(err)), 0);
    CU_ASSERT_EQUAL(hops, 0);

    /* 1 ms is one hop on level 1 that waits 1 ms */
    CU_ASSERT_EQUAL_FATAL(lvl_chain_plan(&t, 1, 3 * DAY, levels, LVL_MAX_HOPS, &hops, err, sizeof(err)), 0);
    CU_ASSERT_EQUAL_FATAL(hops, 1);
    CU_ASSERT_EQUAL(levels[0], 1);
    CU_ASSERT_EQUAL(lvl_hop_ms(&t, levels[0], 1), 1);

    /* every millisecond up to 12 s is exact */
    char why[256] = "";
    uint64_t first_bad = 0;
    for (uint64_t ms = 1; ms <= 12 * SEC; ms++) {
        if (plan_and_check(&t, ms, 3 * DAY, why, sizeof(why)) < 0) {
            first_bad = ms;
            break;
        }
    }
    TU_CHECK(first_bad == 0, "delay %" PRIu64 " ms: %s", first_bad, why);

    /* 1500 ms = 1s + the 500 ms remainder on level 1; 2500 ms = 1s + 1s + 500 ms */
    CU_ASSERT_EQUAL_FATAL(lvl_chain_plan(&t, 1500, 3 * DAY, levels, LVL_MAX_HOPS, &hops, err, sizeof(err)), 0);
    CU_ASSERT_EQUAL(hops, 2);
    CU_ASSERT(levels[0] == 1 && levels[1] == 1);
    CU_ASSERT_EQUAL_FATAL(lvl_chain_plan(&t, 2500, 3 * DAY, levels, LVL_MAX_HOPS, &hops, err, sizeof(err)), 0);
    CU_ASSERT_EQUAL(hops, 3);

    /* sensible steps up to 3d: every 7 ms to 10 min, then every 997 ms (primes, so
     * the remainders cover every sub-second value and every level boundary) */
    first_bad = 0;
    for (uint64_t ms = 1; ms <= 10 * MIN && first_bad == 0; ms += 7)
        if (plan_and_check(&t, ms, 3 * DAY, why, sizeof(why)) < 0)
            first_bad = ms;
    for (uint64_t ms = 10 * MIN; ms <= 3 * DAY && first_bad == 0; ms += 997)
        if (plan_and_check(&t, ms, 3 * DAY, why, sizeof(why)) < 0)
            first_bad = ms;
    TU_CHECK(first_bad == 0, "delay %" PRIu64 " ms: %s", first_bad, why);
}

static void test_chain_limits(void)
{
    lvl_table_t t, only_1s;
    uint8_t levels[LVL_MAX_HOPS];
    char err[256];
    int hops = -1;

    lvl_table_default(&t);

    CU_ASSERT_EQUAL(lvl_chain_plan(&t, 4 * DAY, 3 * DAY, levels, LVL_MAX_HOPS, &hops, err, sizeof(err)), -1);
    CU_ASSERT_STRING_EQUAL(err, "delay 4d exceeds max-delay 3d");
    CU_ASSERT_EQUAL(hops, 0);
    CU_ASSERT_EQUAL(lvl_chain_plan(&t, 3 * DAY + 1, 3 * DAY, levels, LVL_MAX_HOPS, &hops, err, sizeof(err)), -1);
    CU_ASSERT_STRING_EQUAL(err, "delay 259200001ms exceeds max-delay 3d");
    CU_ASSERT_EQUAL(lvl_chain_plan(&t, 2 * HOUR + SEC, 2 * HOUR, levels, LVL_MAX_HOPS, &hops, err, sizeof(err)), -1);
    CU_ASSERT_STRING_EQUAL(err, "delay 7201s exceeds max-delay 2h");
    CU_ASSERT_EQUAL(lvl_chain_plan(&t, 4 * DAY, 3 * DAY, levels, LVL_MAX_HOPS, &hops, NULL, 0), -1);

    /* more hops than the caller's array */
    CU_ASSERT_EQUAL(lvl_chain_plan(&t, 25 * MIN, 3 * DAY, levels, 1, &hops, err, sizeof(err)), -1);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "needs 2 hops"));
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "limit of 1"));
    CU_ASSERT_EQUAL(lvl_chain_plan(&t, 25 * MIN, 3 * DAY, levels, 2, &hops, err, sizeof(err)), 0);
    CU_ASSERT_EQUAL(hops, 2);

    /* more hops than LVL_MAX_HOPS, even with a larger array */
    uint8_t big[LVL_MAX_HOPS + 200];
    uint64_t century = 100 * 365 * DAY;
    CU_ASSERT_EQUAL(lvl_chain_plan(&t, 255 * 2 * HOUR, century, big, (int)sizeof(big), &hops, err, sizeof(err)), 0);
    CU_ASSERT_EQUAL(hops, LVL_MAX_HOPS);
    CU_ASSERT_EQUAL(lvl_chain_plan(&t, 255 * 2 * HOUR + SEC, century, big, (int)sizeof(big), &hops, err, sizeof(err)),
                    -1);
    CU_ASSERT_STRING_EQUAL(err, "delay 1836001s needs 256 hops with this level table, more than "
                                "the limit of 255");
    CU_ASSERT_EQUAL(lvl_chain_plan(&t, 30 * DAY, century, big, (int)sizeof(big), &hops, err, sizeof(err)), -1);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "needs 360 hops"));

    /* billions of hops are refused at once, not looped over */
    CU_ASSERT_FATAL(PARSE_OK("1s", &only_1s));
    uint64_t started = tu_now_mono_ms();
    CU_ASSERT_EQUAL(
        lvl_chain_plan(&only_1s, LVL_MAX_DURATION_MS, UINT64_MAX, levels, LVL_MAX_HOPS, &hops, err, sizeof(err)), -1);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "needs 3153600000 hops"));
    CU_ASSERT_EQUAL(lvl_chain_plan(&only_1s, UINT64_MAX, UINT64_MAX, levels, LVL_MAX_HOPS, &hops, err, sizeof(err)),
                    -1);
    printf("\n    refusing 3.1e9 and 1.8e16 hops took %" PRIu64 " ms ", tu_now_mono_ms() - started);

    /* an empty table is refused rather than planned forever */
    lvl_table_t empty;
    memset(&empty, 0, sizeof(empty));
    CU_ASSERT_EQUAL(lvl_chain_plan(&empty, 5 * SEC, 3 * DAY, levels, LVL_MAX_HOPS, &hops, err, sizeof(err)), -1);
    CU_ASSERT_EQUAL(hops, 0);
}

/* The hop count lvl_chain_plan checks the limit against, before it plans,
 * is the plan's own length: for every millisecond to 20 s and every 7th
 * second to 3 d, a limit of exactly that many hops is met and one fewer is
 * refused naming it. */
static void test_chain_count_matches_plan(void)
{
    lvl_table_t t;
    uint8_t levels[LVL_MAX_HOPS];
    char err[256], want[64];
    int hops = -1, bad = 0;

    lvl_table_default(&t);
    for (uint64_t d = 1; d <= 3 * DAY && bad < 5; d = d < 20 * SEC ? d + 1 : d + 7 * SEC) {
        if (lvl_chain_plan(&t, d, 3 * DAY, levels, LVL_MAX_HOPS, &hops, err, sizeof(err)) != 0 || hops < 1) {
            printf("\n    %" PRIu64 " ms: %s", d, err);
            bad++;
            continue;
        }
        int n = hops;
        snprintf(want, sizeof want, "needs %d hops", n);
        int at = lvl_chain_plan(&t, d, 3 * DAY, levels, n, &hops, err, sizeof(err));
        int below = lvl_chain_plan(&t, d, 3 * DAY, levels, n - 1, &hops, err, sizeof(err));
        if (at != 0 || below != -1 || strstr(err, want) == NULL) {
            printf("\n    %" PRIu64 " ms (%d hops): limit %d -> %d, limit %d -> %d \"%s\"", d, n, n, at, n - 1, below,
                   err);
            bad++;
        }
    }
    CU_ASSERT_EQUAL(bad, 0);
}

static void test_chain_custom_table_exact(void)
{
    lvl_table_t t;
    char why[256] = "";
    uint64_t first_bad = UINT64_MAX;
    int max_hops = 0;

    CU_ASSERT_FATAL(PARSE_OK("5s 1m", &t));
    /* every ms up to 2 min, then every second up to 2h: exact, whatever the table */
    for (uint64_t ms = 1; ms <= 2 * MIN && first_bad == UINT64_MAX; ms++)
        if (plan_and_check(&t, ms, 3 * DAY, why, sizeof(why)) < 0)
            first_bad = ms;
    for (uint64_t ms = SEC; ms <= 2 * HOUR && first_bad == UINT64_MAX; ms += SEC) {
        int hops = plan_and_check(&t, ms, 3 * DAY, why, sizeof(why));
        if (hops < 0)
            first_bad = ms;
        else if (hops > max_hops)
            max_hops = hops;
    }
    TU_CHECK(first_bad == UINT64_MAX, "delay %" PRIu64 " ms: %s", first_bad, why);
    /* 2h = 120 hops of 1m; 1h59m59s = 119 * 1m + 11 * 5s + a 4 s remainder */
    CU_ASSERT_EQUAL(max_hops, 131);

    /* concrete remainders: they wait on level 1 (5s) for exactly what is left */
    uint8_t levels[LVL_MAX_HOPS];
    char err[256];
    int hops = -1;
    CU_ASSERT_EQUAL_FATAL(lvl_chain_plan(&t, 3 * SEC, 3 * DAY, levels, LVL_MAX_HOPS, &hops, err, sizeof(err)), 0);
    CU_ASSERT_EQUAL(hops, 1);
    CU_ASSERT_EQUAL(lvl_hop_ms(&t, levels[0], 3 * SEC), 3 * SEC);
    CU_ASSERT_EQUAL_FATAL(lvl_chain_plan(&t, 61 * SEC, 3 * DAY, levels, LVL_MAX_HOPS, &hops, err, sizeof(err)), 0);
    CU_ASSERT_EQUAL(hops, 2);
    CU_ASSERT_EQUAL(levels[0], 2);
    CU_ASSERT_EQUAL(levels[1], 1);
    CU_ASSERT_EQUAL(lvl_hop_ms(&t, levels[1], SEC), SEC);
}

static void test_plan_total(void)
{
    lvl_table_t t;
    static const uint8_t plan[] = { 18, 15, 9, 1 };
    static const uint8_t bad[] = { 1, 19 };
    static const uint8_t zero[] = { 0 };

    lvl_table_default(&t);
    CU_ASSERT_EQUAL(lvl_plan_total(&t, plan, 4), 2 * HOUR + 20 * MIN + 5 * MIN + SEC);
    CU_ASSERT_EQUAL(lvl_plan_total(&t, plan, 1), 2 * HOUR);
    CU_ASSERT_EQUAL(lvl_plan_total(&t, plan, 0), 0);
    /* a level outside the table makes the total impossible, not plausible */
    CU_ASSERT_EQUAL(lvl_plan_total(&t, bad, 2), UINT64_MAX);
    CU_ASSERT_EQUAL(lvl_plan_total(&t, zero, 1), UINT64_MAX);
}

/* ------------------------------------------------------------------ suites */

static const tu_test_t table_tests[] = {
    { "default", test_table_default },
    { "separators", test_table_separators },
    { "errors", test_table_errors },
    { "too many levels", test_table_too_many },
    { "format round trip", test_table_format },
    { "diff", test_table_diff },
    { NULL, NULL },
};

static const tu_test_t level_for_tests[] = {
    { "round up", test_level_for_up },
    { "round nearest", test_level_for_nearest },
    { NULL, NULL },
};

static const tu_test_t chain_tests[] = {
    { "hop ms", test_hop_ms },
    { "next hop", test_next_hop },
    { "every second to 3d", test_chain_every_second_to_3d },
    { "every second below 2h with a millisecond remainder", test_chain_ms_remainder_below_2h },
    { "examples", test_chain_examples },
    { "sub-second and zero", test_chain_subsecond_and_zero },
    { "limits", test_chain_limits },
    { "the hop count checked is the plan's", test_chain_count_matches_plan },
    { "custom table exact", test_chain_custom_table_exact },
    { "plan total", test_plan_total },
    { NULL, NULL },
};

static const tu_suite_t suites[] = {
    { "table", table_tests },
    { "level_for", level_for_tests },
    { "chain", chain_tests },
};

int main(int argc, char **argv)
{
    return tu_suites_main(argc, argv, suites, sizeof suites / sizeof suites[0], NULL, NULL);
}
