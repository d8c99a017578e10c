/*
 * tests/unit/test_logrepeat.c — CUnit suite for broker/logrepeat.c, the rule
 * of what the storage thread logs of a failure it retries once a second: a
 * store broken again after each reopen (damage a due move meets half-way)
 * logged "storage failure ...; reopening" and "store ... reopened" every
 * second. Here: an hour of one failure a second gives the first line and one
 * summary a minute (60 lines, not 3 600), a new cause a line at once, and the
 * end of the run its count; and log_repeat_report's lines, read back from a
 * log file in each test's own temp dir: the first in its words, a repeat
 * within the period none, one after it the summary with the count asked
 * for, at the level asked for.
 */
#include "broker/logrepeat.h"
#include "common/log.h"
#include "tests/helpers/testutil.h"

#include <CUnit/CUnit.h>
#include <stdio.h>
#include <string.h>

#define T0 UINT64_C(5000000)

/* Lines a rate-limited failure of cause once every step_ms from *now for
 * count times would log; *summed gets the repeats the summaries name. */
static int lines_of(log_repeat_t *r, const char *cause, uint64_t *now, uint64_t step_ms, int count, uint64_t *summed)
{
    int lines = 0;
    for (int i = 0; i < count; i++, *now += step_ms) {
        uint64_t repeats = 0;
        log_repeat_say_t say = log_repeat_fail(r, cause, *now, &repeats);
        if (say != LOG_REPEAT_QUIET) {
            lines++;
        }
        if (say == LOG_REPEAT_SUMMARY && summed != NULL) {
            *summed += repeats;
        }
    }
    return lines;
}

static void test_first_then_once_a_period(void)
{
    log_repeat_t r = { 0 };
    uint64_t repeats = 0, now = T0;
    TU_CHECK(log_repeat_fail(&r, "corrupt level key", now, &repeats) == LOG_REPEAT_FIRST, "the first failure");
    TU_CHECK(log_repeat_fail(&r, "corrupt level key", now + 1000, &repeats) == LOG_REPEAT_QUIET,
             "the same a second later is logged");
    TU_CHECK(log_repeat_fail(&r, "corrupt level key", now + LOG_REPEAT_PERIOD_MS - 1, &repeats) == LOG_REPEAT_QUIET,
             "the same within the period is logged");
    TU_CHECK(log_repeat_fail(&r, "corrupt level key", now + LOG_REPEAT_PERIOD_MS, &repeats) == LOG_REPEAT_SUMMARY &&
                 repeats == 3,
             "a period after the first line: a summary of 3, got %llu", (unsigned long long)repeats);
    CU_ASSERT_EQUAL(r.failures, 4);

    /* an hour, one a second: the summaries, one a minute, count every failure after the first line */
    log_repeat_t h = { 0 };
    now = T0;
    uint64_t summed = 0;
    int lines = lines_of(&h, "broken", &now, 1000, 3600, &summed);
    TU_CHECK(lines == 60, "an hour of one failure a second: %d lines (want 60: the first, then one a minute)", lines);
    TU_CHECK(summed == 3600 - 1 - (3600 - 1) % 60, "the summaries name %llu repeats", (unsigned long long)summed);
    CU_ASSERT_EQUAL(h.failures, 3600);
}

static void test_new_cause_at_once(void)
{
    log_repeat_t r = { 0 };
    uint64_t now = T0, repeats = 0;
    CU_ASSERT_EQUAL(lines_of(&r, "cause A", &now, 1000, 5, NULL), 1);
    TU_CHECK(log_repeat_fail(&r, "cause B", now, &repeats) == LOG_REPEAT_FIRST, "another cause waits");
    TU_CHECK(log_repeat_fail(&r, "cause A", now + 1, &repeats) == LOG_REPEAT_FIRST, "the first cause back waits");
    CU_ASSERT_EQUAL(r.failures, 7);
    /* a cause past the kept text compares by what is kept */
    char long_cause[2000];
    memset(long_cause, 'x', sizeof long_cause - 1);
    long_cause[sizeof long_cause - 1] = '\0';
    CU_ASSERT_EQUAL(log_repeat_fail(&r, long_cause, now + 2, &repeats), LOG_REPEAT_FIRST);
    CU_ASSERT_EQUAL(log_repeat_fail(&r, long_cause, now + 3, &repeats), LOG_REPEAT_QUIET);
}

static void test_success_ends_the_run(void)
{
    log_repeat_t r = { 0 };
    CU_ASSERT_EQUAL(log_repeat_ok(&r), 0); /* a success with no failure before: nothing to say */
    uint64_t now = T0, repeats = 0;
    CU_ASSERT_EQUAL(lines_of(&r, "cannot open", &now, 1000, 3, NULL), 1);
    CU_ASSERT_EQUAL(log_repeat_ok(&r), 3);
    CU_ASSERT_EQUAL(log_repeat_ok(&r), 0);
    TU_CHECK(log_repeat_fail(&r, "cannot open", now, &repeats) == LOG_REPEAT_FIRST,
             "the same cause after a success is not a first line");
}

/* ------------------------------------------------------ log_repeat_report */

static char dir[512];
static char log_path[700];

static void setup(void)
{
    TU_REQUIRE(tu_mkdtemp("logrepeat", dir, sizeof dir) == 0, "mkdtemp");
    snprintf(log_path, sizeof log_path, "%s/broker.log", dir);
    char err[256];
    TU_REQUIRE(log_open_file(log_path, err, sizeof err) == 0, "open %s: %s", log_path, err);
    log_set_format(LOG_FORMAT_TEXT);
    log_set_level(LOG_LEVEL_INFO);
}

static void teardown(void)
{
    log_open_file(NULL, NULL, 0);
    tu_rmtree(dir);
}

/* The log's records so far, each without its time stamp ("[error] words"),
 * one a line, into out[len]; how many. */
static int records(char *out, size_t len)
{
    out[0] = '\0';
    FILE *f = fopen(log_path, "r");
    TU_REQUIRE(f != NULL, "no log file %s", log_path);
    char line[4096];
    int n = 0;
    size_t used = 0;
    while (fgets(line, sizeof line, f) != NULL) {
        const char *record = strchr(line, ' '); /* past "2026-12-07T13:40:00.123Z" */
        TU_REQUIRE(record != NULL, "a record without its time stamp: %s", line);
        used += (size_t)snprintf(out + used, len - used, "%s", record + 1);
        TU_REQUIRE(used < len, "the log outgrew %zu bytes", len);
        n++;
    }
    fclose(f);
    return n;
}

#define SCHED_FIRST "scheduler: %s"
#define SCHED_AGAIN "scheduler: still failing (%llu attempts, one a second): %s"

static void test_report_first_line(void)
{
    log_repeat_t r = { 0 };
    char got[8192];
    TU_CHECK(log_repeat_report(&r, LOG_LEVEL_ERROR, T0, "cannot open /d/LOCK", LOG_REPEAT_COUNT_ATTEMPTS, SCHED_FIRST,
                               SCHED_AGAIN) == LOG_REPEAT_FIRST,
             "the first failure is reported as a first line");
    int n = records(got, sizeof got);
    TU_CHECK(n == 1 && strcmp(got, "[error] scheduler: cannot open /d/LOCK\n") == 0,
             "the first failure: want its line in the first words at error, got %d:\n%s", n, got);
    TU_CHECK(log_repeat_report(&r, LOG_LEVEL_WARN, T0 + 1, "another cause", LOG_REPEAT_COUNT_ATTEMPTS,
                               "%s; until a spare is ready", "%2$s (%1$llu times)") == LOG_REPEAT_FIRST,
             "another cause is a first line");
    n = records(got, sizeof got);
    TU_CHECK(n == 2 && strstr(got, "\n[warn] another cause; until a spare is ready\n") != NULL,
             "another cause at once, at warn: got %d:\n%s", n, got);
}

static void test_report_quiet_within_period(void)
{
    log_repeat_t r = { 0 };
    char got[8192];
    log_repeat_report(&r, LOG_LEVEL_ERROR, T0, "broken", LOG_REPEAT_COUNT_ATTEMPTS, SCHED_FIRST, SCHED_AGAIN);
    for (uint64_t at = T0 + 1000; at < T0 + LOG_REPEAT_PERIOD_MS; at += 1000) {
        TU_CHECK(log_repeat_report(&r, LOG_LEVEL_ERROR, at, "broken", LOG_REPEAT_COUNT_ATTEMPTS, SCHED_FIRST,
                                   SCHED_AGAIN) == LOG_REPEAT_QUIET,
                 "the same cause %llu ms after its line is reported", (unsigned long long)(at - T0));
    }
    int n = records(got, sizeof got);
    TU_CHECK(n == 1, "59 repeats within the period: want only the first line, got %d:\n%s", n, got);
}

static void test_report_summary_counts(void)
{
    /* cause A twice, then cause B: its first line, two repeats within the period, one a period later — 6
       failures in a row, 3 of B since its line */
    const char *first = "cannot reopen the store: %s";
    log_repeat_t attempts = { 0 }, since = { 0 };
    log_repeat_say_t last[2] = { LOG_REPEAT_QUIET, LOG_REPEAT_QUIET };
    const uint64_t at[] = { T0, T0 + 1000, T0 + 2000, T0 + 3000, T0 + 4000, T0 + 2000 + LOG_REPEAT_PERIOD_MS };
    for (size_t i = 0; i < sizeof at / sizeof at[0]; i++) {
        const char *cause = i < 2 ? "cause A" : "cause B";
        last[0] = log_repeat_report(&attempts, LOG_LEVEL_ERROR, at[i], cause, LOG_REPEAT_COUNT_ATTEMPTS, first,
                                    "still cannot reopen the store (%llu attempts, one a second): %s");
        last[1] = log_repeat_report(&since, LOG_LEVEL_WARN, at[i], cause, LOG_REPEAT_COUNT_SINCE_LINE, first,
                                    "%2$s (%1$llu times since its last line); a switch pre-writes its segment");
    }
    TU_CHECK(last[0] == LOG_REPEAT_SUMMARY && last[1] == LOG_REPEAT_SUMMARY,
             "a period after its line the cause is summarized (%d, %d)", (int)last[0], (int)last[1]);
    char got[8192];
    int n = records(got, sizeof got);
    const char *want = "[error] cannot reopen the store: cause A\n"
                       "[warn] cannot reopen the store: cause A\n"
                       "[error] cannot reopen the store: cause B\n"
                       "[warn] cannot reopen the store: cause B\n"
                       "[error] still cannot reopen the store (6 attempts, one a second): cause B\n"
                       "[warn] cause B (3 times since its last line); a switch pre-writes its segment\n";
    TU_CHECK(n == 6 && strcmp(got, want) == 0, "want:\n%s\ngot %d:\n%s", want, n, got);
}

static const tu_test_t report_tests[] = {
    { "the first failure of a cause is logged in its words", test_report_first_line },
    { "a repeat within the period is not logged", test_report_quiet_within_period },
    { "a repeat after it is summarized with the count asked for", test_report_summary_counts },
    { NULL, NULL },
};

static const tu_test_t logrepeat_tests[] = {
    { "the first failure, then a summary once a period", test_first_then_once_a_period },
    { "a new cause is logged at once", test_new_cause_at_once },
    { "a success ends the run with its count", test_success_ends_the_run },
    { NULL, NULL },
};

static const tu_suite_t suites[] = {
    { "logrepeat", logrepeat_tests },
    { "report", report_tests },
};

int main(int argc, char **argv)
{
    return tu_suites_main(argc, argv, suites, sizeof suites / sizeof suites[0], setup, teardown);
}
