/*
 * tests/unit/test_logrepeat.c — CUnit suite for broker/logrepeat.c, the rule
 * of what the storage thread logs of a failure it retries once a second: a
 * store broken again after each reopen (damage a due move meets half-way)
 * logged "storage failure ...; reopening" and "store ... reopened" every
 * second. Here: an hour of one failure a second gives the first line and one
 * summary a minute (60 lines, not 3 600), a new cause a line at once, and the
 * end of the run its count.
 */
#include "broker/logrepeat.h"
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

static const tu_test_t logrepeat_tests[] = {
    { "the first failure, then a summary once a period", test_first_then_once_a_period },
    { "a new cause is logged at once", test_new_cause_at_once },
    { "a success ends the run with its count", test_success_ends_the_run },
    { NULL, NULL },
};

static const tu_suite_t suites[] = {
    { "logrepeat", logrepeat_tests },
};

int main(int argc, char **argv)
{
    return tu_suites_main(argc, argv, suites, sizeof suites / sizeof suites[0], NULL, NULL);
}
