/*
 * tests/unit/test_console_history.c — console/history.c: the overview's
 * history keeps one point per sample while history / sample-interval fits
 * in HISTORY_POINTS_MAX (the array the page always drew), and past that
 * consolidates neighbouring samples so the reply stays bounded however long
 * the history is.
 */
#include "console/history.h"
#include "tests/helpers/testutil.h"

#include <CUnit/CUnit.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>

/* A sample at t_ms, the broker up, counters rising by rate per second. */
static history_sample_t at_rate(uint64_t t_ms, double rate)
{
    history_sample_t x;
    memset(&x, 0, sizeof x);
    x.t_ms = t_ms;
    x.broker_ok = 1;
    x.sends = (uint64_t)(rate * (double)t_ms / 1000.0);
    x.deliveries = x.sends / 2;
    x.acks = x.sends / 5;
    x.lateness_p50_ms = 5;
    x.lateness_p99_ms = 20;
    x.pending = 3;
    x.overdue = 1;
    return x;
}

static char *render(const history_t *h, buf_t *out)
{
    json_t j;
    buf_clear(out);
    json_init(&j, out);
    history_json(h, &j);
    buf_append(out, "", 1);
    return out->data;
}

/* Few samples: one point each, as the array always was — the first without rates, a broker outage without
 * rates or lateness, a counter that went down (a restart) without that rate; the newest `samples` kept. */
static void test_one_point_per_sample(void)
{
    history_t h;
    buf_t out;
    buf_init(&out);
    history_init(&h, 4, HISTORY_POINTS_MAX);
    CU_ASSERT_PTR_NULL(history_last(&h));
    CU_ASSERT_STRING_EQUAL(render(&h, &out), "[]");
    history_sample_t a = at_rate(1000, 10), b = at_rate(2000, 10), down = at_rate(3000, 10), c = at_rate(4000, 10),
                     restarted = at_rate(5000, 10);
    down.broker_ok = 0;
    down.overdue = -1;
    restarted.sends = 1; /* went down: no sends rate; the others rose */
    history_push(&h, &a);
    const char *first = render(&h, &out);
    TU_CHECK(strcmp(first, "[{\"t_ms\":1000,\"sends_per_s\":null,\"deliveries_per_s\":null,\"acks_per_s\":null,"
                           "\"lateness_p50_ms\":5,\"lateness_p99_ms\":20,\"overdue\":1}]") == 0,
             "first: %s", first);
    history_push(&h, &b);
    history_push(&h, &down);
    history_push(&h, &c);
    history_push(&h, &restarted);
    CU_ASSERT_EQUAL(history_last(&h)->t_ms, 5000);
    const char *all = render(&h, &out);
    const char *want = "[{\"t_ms\":2000,\"sends_per_s\":10,\"deliveries_per_s\":5,\"acks_per_s\":2,"
                       "\"lateness_p50_ms\":5,\"lateness_p99_ms\":20,\"overdue\":1},"
                       "{\"t_ms\":3000,\"sends_per_s\":null,\"deliveries_per_s\":null,\"acks_per_s\":null,"
                       "\"lateness_p50_ms\":null,\"lateness_p99_ms\":null,\"overdue\":null},"
                       "{\"t_ms\":4000,\"sends_per_s\":null,\"deliveries_per_s\":null,\"acks_per_s\":null,"
                       "\"lateness_p50_ms\":5,\"lateness_p99_ms\":20,\"overdue\":1},"
                       "{\"t_ms\":5000,\"sends_per_s\":null,\"deliveries_per_s\":5,\"acks_per_s\":2,"
                       "\"lateness_p50_ms\":5,\"lateness_p99_ms\":20,\"overdue\":1}]";
    TU_CHECK(strcmp(all, want) == 0, "history:\n%s\nwant\n%s", all, want);
    history_free(&h);
    buf_free(&out);
}

/* Consolidated points: rates averaged over their steps, lateness and overdue their highest, time their newest. */
static void test_points_consolidate(void)
{
    history_t h;
    buf_t out;
    buf_init(&out);
    history_init(&h, 9, 3); /* 3 samples a point */
    CU_ASSERT_EQUAL(h.step, 3);
    CU_ASSERT_EQUAL(h.cap, 3);
    for (uint64_t t = 1; t <= 7; t++) {
        history_sample_t x = at_rate(t * 1000, t <= 4 ? 10 : 0);
        if (t > 4)
            x.sends = x.deliveries = x.acks = 40; /* flat after 4 s */
        if (t == 5)
            x.lateness_p99_ms = 900; /* a spike */
        if (t == 6)
            x.overdue = 7;
        history_push(&h, &x);
    }
    /* points: {1,2,3} {4,5,6} {7} */
    const char *all = render(&h, &out);
    TU_CHECK(strstr(all, "{\"t_ms\":3000,\"sends_per_s\":10,\"deliveries_per_s\":5,\"acks_per_s\":2,") == all + 1,
             "first point: %s", all);
    TU_CHECK(strstr(all, "{\"t_ms\":6000,\"sends_per_s\":3.333") != NULL, "10 sends over the point's 3 s: %s", all);
    TU_CHECK(strstr(all, "\"lateness_p99_ms\":900,\"overdue\":7}") != NULL, "the spike and the highest overdue: %s",
             all);
    TU_CHECK(strstr(all, "{\"t_ms\":7000,\"sends_per_s\":0,\"deliveries_per_s\":0,\"acks_per_s\":0,") != NULL,
             "last point: %s", all);
    history_free(&h);
    buf_free(&out);
}

/* The largest setting (history 7d at sample-interval 200ms: 3 024 001 samples) kept in 1000 points: after more than
 * a full history the reply is 1000 points, oldest first, the newest sample last, the rate what was sent. Before,
 * the ring held every sample and the reply rendered each (about 385 MB). */
static void test_largest_history_bounded(void)
{
    const size_t samples = (size_t)(7 * 86400000LL / 200) + 1;
    history_t h;
    buf_t out;
    buf_init(&out);
    history_init(&h, samples, HISTORY_POINTS_MAX);
    CU_ASSERT_EQUAL(h.cap, HISTORY_POINTS_MAX);
    uint64_t t = 0;
    for (size_t i = 0; i < samples + samples / 2; i++) {
        t += 200;
        history_sample_t x = at_rate(t, 50);
        history_push(&h, &x);
    }
    CU_ASSERT_EQUAL(h.count, HISTORY_POINTS_MAX);
    const char *all = render(&h, &out);
    size_t points = 0;
    uint64_t prev = 0;
    int increasing = 1;
    for (const char *p = strstr(all, "\"t_ms\":"); p != NULL; p = strstr(p + 1, "\"t_ms\":")) {
        uint64_t tm = strtoull(p + 7, NULL, 10);
        increasing &= tm > prev;
        prev = tm;
        points++;
    }
    TU_CHECK(points == HISTORY_POINTS_MAX && increasing && prev == t, "%zu points, increasing %d, last %llu of %llu",
             points, increasing, (unsigned long long)prev, (unsigned long long)t);
    TU_CHECK(out.len < 200 * 1000, "reply %zu bytes, want under 200 kB", out.len);
    TU_CHECK(strstr(all, "\"sends_per_s\":50,") != NULL, "rate 50/s: %.300s", all);
    printf("\n  history of %zu samples: %zu points, %zu bytes\n", samples, points, out.len);
    history_free(&h);
    buf_free(&out);
}

static const tu_test_t history_tests[] = {
    { "one point per sample while they fit", test_one_point_per_sample },
    { "consolidated points: average rates, highest lateness and overdue", test_points_consolidate },
    { "the largest history: 1000 points", test_largest_history_bounded },
    { NULL, NULL },
};
static const tu_suite_t suites[] = {
    { "history", history_tests },
};

int main(int argc, char **argv)
{
    return tu_suites_main(argc, argv, suites, sizeof suites / sizeof suites[0], NULL, NULL);
}
