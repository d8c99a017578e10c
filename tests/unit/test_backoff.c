/*
 * tests/unit/test_backoff.c — CUnit suite for lib/backoff.c.
 *
 * The delay function is pure once the random source is injected, so every
 * check here is exact: jitter 0 gives base * factor^k capped; a source that
 * returns fixed bits pins u (0 → the full delay, all ones → the shortest);
 * a seeded generator sweeps the range bounds. Overflow (huge attempts,
 * factors), out-of-range fields and option checking are covered too, and
 * backoff_total_ms, the most a run of pauses can add up to.
 */
#include "lib/backoff.h"
#include "tests/helpers/testutil.h"

#include <CUnit/CUnit.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <string.h>


/* A random source that returns the bits it points to. */
static uint64_t fixed_bits(void *arg)
{
    return *(const uint64_t *)arg;
}

/* A seeded generator (xorshift64*), deterministic across runs. */
static uint64_t seeded(void *arg)
{
    uint64_t *s = arg;
    *s ^= *s >> 12;
    *s ^= *s << 25;
    *s ^= *s >> 27;
    return *s * UINT64_C(2685821657736338717);
}

static hg_backoff_t make(uint32_t base, double factor, uint32_t cap, double jitter)
{
    hg_backoff_t b;
    hg_backoff_default(&b);
    b.base_ms = base;
    b.factor = factor;
    b.cap_ms = cap;
    b.jitter = jitter;
    return b;
}

static void test_defaults(void)
{
    hg_backoff_t b;
    char err[128] = "";

    hg_backoff_default(&b);
    CU_ASSERT_EQUAL(b.base_ms, 100);
    CU_ASSERT_DOUBLE_EQUAL(b.factor, 2.0, 1e-12);
    CU_ASSERT_EQUAL(b.cap_ms, 10000);
    CU_ASSERT_EQUAL(b.attempts, 5);
    CU_ASSERT_DOUBLE_EQUAL(b.jitter, 0.2, 1e-12);
    TU_CHECK(backoff_check(&b, "retry", err, sizeof(err)) == 0, "defaults refused: %s", err);
}

static void test_no_jitter_exact(void)
{
    hg_backoff_t b = make(100, 2.0, 5000, 0.0);
    static const uint64_t want[] = { 100, 200, 400, 800, 1600, 3200, 5000, 5000, 5000 };

    for (unsigned k = 0; k < sizeof(want) / sizeof(want[0]); k++) {
        uint64_t got = hg_backoff_delay(&b, k, NULL, NULL);
        TU_CHECK(got == want[k], "attempt %u: got %llu, want %llu", k, (unsigned long long)got,
                 (unsigned long long)want[k]);
    }
    b = make(250, 1.5, 100000, 0.0);
    CU_ASSERT_EQUAL(hg_backoff_delay(&b, 0, NULL, NULL), 250);
    CU_ASSERT_EQUAL(hg_backoff_delay(&b, 1, NULL, NULL), 375);
    CU_ASSERT_EQUAL(hg_backoff_delay(&b, 2, NULL, NULL), 562); /* 562.5 truncated */
    b = make(300, 1.0, 300, 0.0);                              /* constant */
    CU_ASSERT_EQUAL(hg_backoff_delay(&b, 0, NULL, NULL), 300);
    CU_ASSERT_EQUAL(hg_backoff_delay(&b, 50, NULL, NULL), 300);
}

static void test_injected_random_pins_jitter(void)
{
    hg_backoff_t b = make(1000, 2.0, 60000, 0.5);
    uint64_t zero = 0, ones = UINT64_MAX, half = UINT64_C(1) << 63;

    /* u = 0: the full delay */
    CU_ASSERT_EQUAL(hg_backoff_delay(&b, 0, fixed_bits, &zero), 1000);
    CU_ASSERT_EQUAL(hg_backoff_delay(&b, 3, fixed_bits, &zero), 8000);
    /* u = 0.5: raw * (1 - 0.5 * 0.5) */
    CU_ASSERT_EQUAL(hg_backoff_delay(&b, 0, fixed_bits, &half), 750);
    CU_ASSERT_EQUAL(hg_backoff_delay(&b, 2, fixed_bits, &half), 3000);
    /* u just below 1: just above raw * (1 - jitter) */
    CU_ASSERT_EQUAL(hg_backoff_delay(&b, 0, fixed_bits, &ones), 500);
    /* the same bits give the same delay every time */
    for (int i = 0; i < 10; i++)
        CU_ASSERT_EQUAL(hg_backoff_delay(&b, 1, fixed_bits, &half), 1500);
    /* full jitter: anything in [0, raw] */
    b.jitter = 1.0;
    CU_ASSERT_EQUAL(hg_backoff_delay(&b, 0, fixed_bits, &ones), 0);
    CU_ASSERT_EQUAL(hg_backoff_delay(&b, 0, fixed_bits, &zero), 1000);
}

static void test_range_sweep(void)
{
    hg_backoff_t b = make(100, 3.0, 20000, 0.3);
    uint64_t state = UINT64_C(0x9E3779B97F4A7C15);
    int bad = 0;
    uint64_t lo_seen = UINT64_MAX, hi_seen = 0;

    for (unsigned k = 0; k < 12; k++) {
        double raw = fmin(20000.0, 100.0 * pow(3.0, k));
        for (int i = 0; i < 2000; i++) {
            uint64_t d = hg_backoff_delay(&b, k, seeded, &state);
            if ((double)d > raw || (double)d < floor(raw * 0.7) - 1) {
                if (bad++ == 0)
                    TU_CHECK(0, "attempt %u: delay %llu outside [%g, %g]", k, (unsigned long long)d, raw * 0.7, raw);
            }
            if (k == 11) {
                if (d < lo_seen)
                    lo_seen = d;
                if (d > hi_seen)
                    hi_seen = d;
            }
        }
    }
    CU_ASSERT_EQUAL(bad, 0);
    /* At the cap the samples really spread over the jitter range. */
    TU_CHECK(lo_seen < 14500 && hi_seen > 19500, "samples at the cap span [%llu, %llu], want about [14000, 20000]",
             (unsigned long long)lo_seen, (unsigned long long)hi_seen);
}

static void test_default_random_in_range(void)
{
    hg_backoff_t b = make(1000, 2.0, 1000000, 0.5);
    int distinct = 0;
    uint64_t first = hg_backoff_delay(&b, 2, NULL, NULL);

    for (int i = 0; i < 1000; i++) {
        uint64_t d = hg_backoff_delay(&b, 2, NULL, NULL);
        CU_ASSERT(d <= 4000 && d >= 2000);
        distinct += d != first;
    }
    TU_CHECK(distinct > 900, "the default source gave the same delay %d times of 1000", 1000 - distinct);
    CU_ASSERT_DOUBLE_EQUAL(backoff_unit(0), 0.0, 0.0);
    CU_ASSERT(backoff_unit(UINT64_MAX) < 1.0);
    CU_ASSERT(backoff_unit(UINT64_MAX) > 0.999999);
}

static void test_overflow_and_clamps(void)
{
    hg_backoff_t b = make(100, 2.0, 30000, 0.0);
    uint64_t zero = 0;

    /* 2^4000 is inf in double: ends at the cap, never wraps */
    CU_ASSERT_EQUAL(hg_backoff_delay(&b, 4000, NULL, NULL), 30000);
    CU_ASSERT_EQUAL(hg_backoff_delay(&b, UINT32_MAX, NULL, NULL), 30000);
    b = make(UINT32_MAX, 1000.0, UINT32_MAX, 0.0);
    CU_ASSERT_EQUAL(hg_backoff_delay(&b, 100, NULL, NULL), UINT32_MAX);

    /* factor below 1 (or NaN) acts as 1: never shrinking */
    b = make(500, 0.5, 10000, 0.0);
    CU_ASSERT_EQUAL(hg_backoff_delay(&b, 5, NULL, NULL), 500);
    b = make(500, NAN, 10000, 0.0);
    CU_ASSERT_EQUAL(hg_backoff_delay(&b, 5, NULL, NULL), 500);
    /* cap below base: the base is the cap */
    b = make(800, 2.0, 100, 0.0);
    CU_ASSERT_EQUAL(hg_backoff_delay(&b, 0, NULL, NULL), 800);
    CU_ASSERT_EQUAL(hg_backoff_delay(&b, 9, NULL, NULL), 800);
    /* jitter above 1 acts as 1, negative as 0 */
    b = make(1000, 1.0, 1000, 7.0);
    CU_ASSERT_EQUAL(hg_backoff_delay(&b, 0, fixed_bits, &(uint64_t){ UINT64_MAX }), 0);
    b = make(1000, 1.0, 1000, -1.0);
    CU_ASSERT_EQUAL(hg_backoff_delay(&b, 0, fixed_bits, &(uint64_t){ UINT64_MAX }), 1000);
    /* base 0: no delay at all */
    b = make(0, 2.0, 0, 0.5);
    CU_ASSERT_EQUAL(hg_backoff_delay(&b, 3, fixed_bits, &zero), 0);
}

static void test_check(void)
{
    char err[128];
    hg_backoff_t b;

    b = make(100, 0.5, 1000, 0.1);
    CU_ASSERT_EQUAL(backoff_check(&b, "retry", err, sizeof(err)), -1);
    TU_CHECK(strcmp(err, "retry: factor 0.5 out of range 1.0..1000") == 0, "got '%s'", err);
    b = make(100, 2.0, 1000, 1.5);
    CU_ASSERT_EQUAL(backoff_check(&b, "retry", err, sizeof(err)), -1);
    TU_CHECK(strcmp(err, "retry: jitter 1.5 out of range 0..1") == 0, "got '%s'", err);
    b = make(100, 2.0, 50, 0.1);
    CU_ASSERT_EQUAL(backoff_check(&b, "reconnect", err, sizeof(err)), -1);
    TU_CHECK(strcmp(err, "reconnect: cap 50ms is below base 100ms") == 0, "got '%s'", err);
    b = make(100, 2.0, 1000, 0.1);
    b.attempts = -1;
    CU_ASSERT_EQUAL(backoff_check(&b, "retry", err, sizeof(err)), -1);
    TU_CHECK(strstr(err, "attempts -1") != NULL, "got '%s'", err);
    b = make(100, NAN, 1000, 0.1);
    CU_ASSERT_EQUAL(backoff_check(&b, "retry", err, sizeof(err)), -1);
    b = make(0, 1.0, 0, 0.0);
    b.attempts = 0;
    CU_ASSERT_EQUAL(backoff_check(&b, "retry", err, sizeof(err)), 0);
}

/* backoff_total_ms: the sum of the raw delays — what the pauses between
 * reconnect attempts can cost at most (hg_client_send_bound_ms). */
static void test_total(void)
{
    hg_backoff_t b = make(100, 2.0, 5000, 0.2);
    TU_CHECK(backoff_total_ms(&b, 0) == 0, "no pause: %" PRIu64, backoff_total_ms(&b, 0));
    TU_CHECK(backoff_total_ms(&b, 1) == 100, "one: %" PRIu64, backoff_total_ms(&b, 1));
    /* 100 + 200 + 400 + 800 + 1600: jitter never lengthens a delay */
    TU_CHECK(backoff_total_ms(&b, 5) == 3100, "the defaults' five: %" PRIu64, backoff_total_ms(&b, 5));
    /* then at the cap: 3100 + 3200 + 5000 * 3 */
    TU_CHECK(backoff_total_ms(&b, 9) == 21300, "past the cap: %" PRIu64, backoff_total_ms(&b, 9));
    hg_backoff_t flat = make(100, 1.0, 100, 0.0);
    TU_CHECK(backoff_total_ms(&flat, 1000000) == 100000000, "10^6 flat pauses: %" PRIu64,
             backoff_total_ms(&flat, 1000000));
    hg_backoff_t below = make(300, 2.0, 100, 0.0); /* cap < base: clamped to base, as hg_backoff_delay */
    TU_CHECK(backoff_total_ms(&below, 3) == 900, "cap below base: %" PRIu64, backoff_total_ms(&below, 3));
    hg_backoff_t huge = make(UINT32_MAX, 1000.0, UINT32_MAX, 1.0);
    TU_CHECK(backoff_total_ms(&huge, 1000000) == (uint64_t)UINT32_MAX * 1000000, "largest: %" PRIu64,
             backoff_total_ms(&huge, 1000000));
}

static const tu_test_t backoff_tests[] = {
    { "defaults", test_defaults },
    { "no jitter is exact", test_no_jitter_exact },
    { "injected random pins the jitter", test_injected_random_pins_jitter },
    { "range sweep", test_range_sweep },
    { "default random source", test_default_random_in_range },
    { "overflow and clamps", test_overflow_and_clamps },
    { "option check", test_check },
    { "total of the pauses", test_total },
    { NULL, NULL },
};

static const tu_suite_t suites[] = {
    { "backoff", backoff_tests },
};

int main(int argc, char **argv)
{
    return tu_suites_main(argc, argv, suites, sizeof suites / sizeof suites[0], NULL, NULL);
}
