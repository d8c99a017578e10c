/*
 * tests/unit/test_rmq_route.c — CUnit suite for lib/rmq_route.c: where a
 * delayed message goes first on RabbitMQ (docs/rabbitmq.md).
 *
 * The default table (1s 5s 10s … 2h): no delay and LEVEL n; a DELAY the
 * levels add up to (one level, a chain); a remainder below the smallest
 * level alone (300ms, 999ms), after one level (1500ms) and before a chain
 * (2500ms); AT in the past and the future; the limits. A table whose
 * smallest level is 200 ms gets remainders below 128 ms + 64 + …; one whose
 * smallest level is 1 ms has none. Every plan adds up to the delay exactly.
 */
#include "lib/rmq.h"
#include "tests/helpers/testutil.h"

#include <CUnit/CUnit.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NOW UINT64_C(1700000000000)

typedef struct routed {
    rmq_out_t out;
    char plan[LVL_MAX_HOPS * 4];
    char why[256];
    int rc;
} routed_t;

/* Route d into *r (out.plan points into r->plan). */
static void route(routed_t *r, const lvl_table_t *t, hg_delay_t d)
{
    memset(r, 0, sizeof(*r));
    r->rc = rmq_route_delay(t, d, "t.orders", NOW, &r->out, r->plan, sizeof(r->plan), r->why, sizeof(r->why));
}

/* What the route waits in all: the remainder, the first level, the plan's. */
static uint64_t waits(const lvl_table_t *t, const routed_t *r)
{
    uint64_t sum = r->out.remainder_ms + (r->out.level > 0 ? t->delay_ms[r->out.level] : 0);
    for (const char *p = r->out.plan; p != NULL && *p != '\0';) {
        sum += t->delay_ms[atoi(p)];
        p = strchr(p, ',');
        if (p != NULL)
            p++;
    }
    return sum;
}

static void test_none_and_levels(void)
{
    lvl_table_t t;
    lvl_table_default(&t);
    routed_t r;
    route(&r, &t, hg_delay_none());
    CU_ASSERT_EQUAL(r.rc, 0);
    CU_ASSERT_STRING_EQUAL(r.out.exchange, RMQ_EX_DUE);
    CU_ASSERT_STRING_EQUAL(r.out.routing_key, "t.orders");
    CU_ASSERT_EQUAL(r.out.due_ms, NOW);
    CU_ASSERT_EQUAL(r.out.remainder_ms, 0);
    route(&r, &t, hg_delay_level(2));
    CU_ASSERT_EQUAL(r.rc, 0);
    CU_ASSERT_STRING_EQUAL(r.out.exchange, RMQ_EX_LEVELS);
    CU_ASSERT_EQUAL(r.out.level, 2);
    CU_ASSERT_STRING_EQUAL(r.out.routing_key, "t.orders");
    CU_ASSERT_EQUAL(r.out.due_ms, NOW + 5000);
    CU_ASSERT_EQUAL(r.out.remainder_ms, 0);
    route(&r, &t, hg_delay_level(19));
    CU_ASSERT_EQUAL(r.rc, -1);
    TU_CHECK(strstr(r.why, "LEVEL must be 0..18") != NULL, "LEVEL 19: %s", r.why);
}

static void test_whole_levels(void)
{
    lvl_table_t t;
    lvl_table_default(&t);
    routed_t r;
    route(&r, &t, hg_delay_ms(5000)); /* one level: straight to the topic after it */
    CU_ASSERT_EQUAL(r.out.level, 2);
    CU_ASSERT_STRING_EQUAL(r.out.routing_key, "t.orders");
    CU_ASSERT_PTR_NULL(r.out.plan);
    CU_ASSERT_EQUAL(r.out.remainder_ms, 0);
    route(&r, &t, hg_delay_ms(25 * 60000)); /* 20m + 5m: the router takes the second hop */
    CU_ASSERT_EQUAL(r.out.level, 15);
    CU_ASSERT_STRING_EQUAL(r.out.routing_key, RMQ_RK_HOP);
    TU_CHECK(r.out.plan != NULL && strcmp(r.out.plan, "9") == 0, "plan '%s', want '9'", r.out.plan);
    CU_ASSERT_STRING_EQUAL(r.out.dest, "t.orders");
    CU_ASSERT_EQUAL(r.out.remainder_ms, 0);
    CU_ASSERT_EQUAL(r.out.due_ms, NOW + 25 * 60000);
}

static void test_remainders(void)
{
    static const struct {
        uint64_t ms, remainder;
        int level;
        const char *plan, *key;
    } cases[] = {
        { 300, 300, 0, NULL, "t.orders" },            /* below the smallest level: the remainder alone */
        { 999, 999, 0, NULL, "t.orders" },            /* every bit 512 … 1 */
        { 1500, 500, 1, NULL, "t.orders" },           /* 500 ms, then level 1 to the topic */
        { 2500, 500, 1, "1", RMQ_RK_HOP },            /* 500 ms, then 1 s × 2 through the router */
        { 6001, 1, 2, "1", RMQ_RK_HOP },              /* 1 ms, then 5 s + 1 s */
        { 3 * 86400000ull - 1, 999, 18, NULL, NULL }, /* the longest: 2h × 35 + … + 999 ms */
    };
    lvl_table_t t;
    lvl_table_default(&t);
    CU_ASSERT_EQUAL(rmq_remainder_top(&t), 512);
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        routed_t r;
        route(&r, &t, hg_delay_ms(cases[i].ms));
        TU_CHECK(r.rc == 0, "DELAY %" PRIu64 "ms: %s", cases[i].ms, r.why);
        TU_CHECK(r.out.remainder_ms == cases[i].remainder && r.out.remainder_top == 512,
                 "DELAY %" PRIu64 "ms: remainder %" PRIu64 " from %" PRIu64 ", want %" PRIu64 " from 512", cases[i].ms,
                 r.out.remainder_ms, r.out.remainder_top, cases[i].remainder);
        TU_CHECK(r.out.level == cases[i].level, "DELAY %" PRIu64 "ms: first level %d, want %d", cases[i].ms,
                 r.out.level, cases[i].level);
        if (cases[i].key != NULL)
            TU_CHECK(strcmp(r.out.routing_key, cases[i].key) == 0, "DELAY %" PRIu64 "ms: key %s, want %s", cases[i].ms,
                     r.out.routing_key, cases[i].key);
        if (cases[i].plan != NULL)
            TU_CHECK(r.out.plan != NULL && strcmp(r.out.plan, cases[i].plan) == 0,
                     "DELAY %" PRIu64 "ms: plan '%s', want '%s'", cases[i].ms,
                     r.out.plan != NULL ? r.out.plan : "(none)", cases[i].plan);
        TU_CHECK(waits(&t, &r) == cases[i].ms, "DELAY %" PRIu64 "ms waits %" PRIu64 " ms in all", cases[i].ms,
                 waits(&t, &r));
        CU_ASSERT_EQUAL(r.out.due_ms, NOW + cases[i].ms);
    }
}

static void test_every_ms_adds_up(void)
{
    lvl_table_t t;
    lvl_table_default(&t);
    for (uint64_t ms = 1; ms <= 12000; ms++) {
        routed_t r;
        route(&r, &t, hg_delay_ms(ms));
        if (r.rc != 0 || waits(&t, &r) != ms || r.out.remainder_ms >= 1000) {
            TU_CHECK(0, "DELAY %" PRIu64 "ms: rc %d, waits %" PRIu64 ", remainder %" PRIu64, ms, r.rc, waits(&t, &r),
                     r.out.remainder_ms);
            return;
        }
    }
}

static void test_at(void)
{
    lvl_table_t t;
    lvl_table_default(&t);
    routed_t r;
    route(&r, &t, hg_delay_at(NOW - 5));
    CU_ASSERT_STRING_EQUAL(r.out.exchange, RMQ_EX_DUE);
    CU_ASSERT_EQUAL(r.out.remainder_ms, 0);
    route(&r, &t, hg_delay_at(NOW + 1250));
    CU_ASSERT_EQUAL(r.out.level, 1);
    CU_ASSERT_EQUAL(r.out.remainder_ms, 250);
    CU_ASSERT_EQUAL(r.out.due_ms, NOW + 1250);
    route(&r, &t, hg_delay_ms(4 * 86400000ull));
    CU_ASSERT_EQUAL(r.rc, -1);
    TU_CHECK(strstr(r.why, "exceeds max-delay") != NULL, "DELAY 4d: %s", r.why);
}

static void test_other_tables(void)
{
    lvl_table_t t;
    char err[256];
    TU_REQUIRE(lvl_table_parse("200ms,1s,5s", &t, err, sizeof(err)) == 0, "parse: %s", err);
    CU_ASSERT_EQUAL(rmq_remainder_top(&t), 128);
    routed_t r;
    route(&r, &t, hg_delay_ms(1500)); /* 1 s + 200 ms × 2 + 100 ms */
    CU_ASSERT_EQUAL(r.out.remainder_ms, 100);
    CU_ASSERT_EQUAL(r.out.remainder_top, 128);
    CU_ASSERT_EQUAL(r.out.level, 2);
    TU_CHECK(r.out.plan != NULL && strcmp(r.out.plan, "1,1") == 0, "plan '%s', want '1,1'", r.out.plan);
    CU_ASSERT_EQUAL(waits(&t, &r), 1500);
    TU_REQUIRE(lvl_table_parse("1ms,1s", &t, err, sizeof(err)) == 0, "parse: %s", err);
    CU_ASSERT_EQUAL(rmq_remainder_top(&t), 0); /* every delay is whole levels */
    route(&r, &t, hg_delay_ms(1003));
    CU_ASSERT_EQUAL(r.out.remainder_ms, 0);
    CU_ASSERT_EQUAL(waits(&t, &r), 1003);
}

static const tu_test_t route_tests[] = {
    { "no delay and LEVEL n", test_none_and_levels },
    { "delays the levels add up to", test_whole_levels },
    { "remainders below the smallest level", test_remainders },
    { "every delay 1..12000 ms waits exactly that", test_every_ms_adds_up },
    { "AT and the limits", test_at },
    { "another table", test_other_tables },
    { NULL, NULL },
};

static const tu_suite_t suites[] = {
    { "rmq-route", route_tests },
};

int main(int argc, char **argv)
{
    return tu_suites_main(argc, argv, suites, sizeof suites / sizeof suites[0], NULL, NULL);
}
