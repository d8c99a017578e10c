/*
 * tests/unit/test_authfail.c — CUnit suite for broker/authfail.c, the
 * per-address failed-AUTH counts behind the failure slow-down: counting
 * within the window, and a full table forgetting the least recently failed
 * address only, and the recent count with the latest failure's time that
 * gates an address's next verification — the table used to be emptied when it reached 4 096
 * addresses, so failing from that many source addresses wiped every
 * address's count.
 */
#include "broker/authfail.h"
#include "tests/helpers/testutil.h"

#include <CUnit/CUnit.h>
#include <stdio.h>
#include <string.h>

#define WINDOW_MS 60000

static unsigned fail(authfail_t *t, const char *addr, uint64_t now)
{
    return authfail_count(t, addr, strlen(addr), now);
}

static unsigned count_of(const authfail_t *t, const char *addr)
{
    return authfail_get(t, addr, strlen(addr));
}

static void addr_n(char *buf, size_t len, unsigned i)
{
    snprintf(buf, len, "10.%u.%u.%u", (i >> 16) & 255, (i >> 8) & 255, i & 255);
}

static void test_counts_within_window(void)
{
    authfail_t *t = authfail_new(16, WINDOW_MS);
    CU_ASSERT_EQUAL(fail(t, "192.0.2.1", 1000), 1);
    CU_ASSERT_EQUAL(fail(t, "192.0.2.1", 2000), 2);
    CU_ASSERT_EQUAL(fail(t, "192.0.2.2", 2000), 1);
    CU_ASSERT_EQUAL(fail(t, "192.0.2.1", 2000 + WINDOW_MS), 3);         /* within the window of the last one */
    CU_ASSERT_EQUAL(fail(t, "192.0.2.1", 2000 + 2 * WINDOW_MS + 1), 1); /* the last one is older: a fresh count */
    CU_ASSERT_EQUAL(count_of(t, "192.0.2.2"), 1);
    CU_ASSERT_EQUAL(count_of(t, "198.51.100.1"), 0);
    CU_ASSERT_EQUAL(authfail_size(t), 2);
    authfail_free(t);
}

/* A full table forgets the least recently failed address, one per new address, and keeps every other count. */
static void test_full_forgets_least_recent(void)
{
    authfail_t *t = authfail_new(4, WINDOW_MS);
    fail(t, "a", 1);
    fail(t, "b", 2);
    fail(t, "c", 3);
    fail(t, "d", 4);
    fail(t, "a", 5); /* a failed again: now b is the least recent */
    fail(t, "c", 6);
    CU_ASSERT_EQUAL(fail(t, "e", 7), 1);
    CU_ASSERT_EQUAL(authfail_size(t), 4);
    TU_CHECK(count_of(t, "b") == 0, "b (least recently failed) still remembered: %u", count_of(t, "b"));
    TU_CHECK(count_of(t, "a") == 2 && count_of(t, "c") == 2 && count_of(t, "d") == 1,
             "the others' counts changed: a %u c %u d %u", count_of(t, "a"), count_of(t, "c"), count_of(t, "d"));
    CU_ASSERT_EQUAL(fail(t, "f", 8), 1); /* next: d */
    CU_ASSERT_EQUAL(count_of(t, "d"), 0);
    CU_ASSERT_EQUAL(fail(t, "a", 9), 3);
    authfail_free(t);
}

/* The attack the old table allowed: an address fails, then failures from 4 096 other addresses — one more than
 * the table holds besides it — would have emptied the table. Now the victim, failing again in between, keeps its
 * count; only addresses that failed less recently are forgotten, and the table never holds more than its bound. */
static void test_flood_keeps_recent(void)
{
    enum {
        MAX = 4096
    };
    authfail_t *t = authfail_new(MAX, WINDOW_MS);
    char a[32];
    uint64_t now = 1000;
    CU_ASSERT_EQUAL(fail(t, "192.0.2.7", now), 1);
    CU_ASSERT_EQUAL(fail(t, "192.0.2.7", now), 2);
    for (unsigned i = 0; i < MAX - 1; i++) { /* fills the table: the victim and MAX - 1 others */
        addr_n(a, sizeof a, i);
        fail(t, a, ++now);
    }
    CU_ASSERT_EQUAL(authfail_size(t), MAX);
    CU_ASSERT_EQUAL(fail(t, "192.0.2.7", ++now), 3);   /* the victim fails again: the most recent */
    for (unsigned i = MAX - 1; i < 2 * MAX - 2; i++) { /* MAX - 1 new addresses: each forgets the oldest other */
        addr_n(a, sizeof a, i);
        fail(t, a, ++now);
        if (authfail_size(t) != MAX) {
            TU_CHECK(0, "%zu addresses after %u failures, want %d", authfail_size(t), i + 1, MAX);
            break;
        }
    }
    TU_CHECK(count_of(t, "192.0.2.7") == 3, "the victim's count after a flood of other addresses: %u, want 3",
             count_of(t, "192.0.2.7"));
    CU_ASSERT_EQUAL(fail(t, "192.0.2.7", ++now), 4);
    addr_n(a, sizeof a, MAX - 2); /* the last of the first wave: forgotten */
    CU_ASSERT_EQUAL(count_of(t, a), 0);
    addr_n(a, sizeof a, 2 * MAX - 3); /* the last of the second wave: remembered */
    CU_ASSERT_EQUAL(count_of(t, a), 1);
    /* far more addresses than the table holds: bounded */
    for (unsigned i = 0; i < 10 * MAX; i++) {
        addr_n(a, sizeof a, 100000 + i);
        fail(t, a, ++now);
    }
    CU_ASSERT_EQUAL(authfail_size(t), MAX);
    authfail_free(t);
}

/* An address longer than the table keeps is cut, consistently. */
static void test_long_address(void)
{
    authfail_t *t = authfail_new(2, WINDOW_MS);
    char longer[200];
    memset(longer, 'x', sizeof longer - 1);
    longer[sizeof longer - 1] = '\0';
    CU_ASSERT_EQUAL(fail(t, longer, 1), 1);
    CU_ASSERT_EQUAL(fail(t, longer, 2), 2);
    CU_ASSERT_EQUAL(count_of(t, longer), 2);
    authfail_free(t);
    authfail_free(NULL);
}

/* authfail_recent: the count within the window and the latest failure's time (the AUTH thread's gate). */
static void test_recent(void)
{
    authfail_t *t = authfail_new(4, WINDOW_MS);
    uint64_t last = 0;
    CU_ASSERT_EQUAL(authfail_recent(t, "a", 1, 1000, &last), 0);
    fail(t, "a", 1000);
    fail(t, "a", 1500);
    CU_ASSERT_EQUAL(authfail_recent(t, "a", 1, 2000, &last), 2);
    CU_ASSERT_EQUAL(last, 1500);
    CU_ASSERT_EQUAL(authfail_recent(t, "a", 1, 1500 + WINDOW_MS, &last), 2);
    CU_ASSERT_EQUAL(authfail_recent(t, "a", 1, 1500 + WINDOW_MS + 1, &last), 0); /* past the window */
    CU_ASSERT_EQUAL(authfail_recent(t, "b", 1, 2000, &last), 0);
    authfail_free(t);
}

/* authfail_key: IPv4 without the port, IPv6 by its /64 (one host holds a whole /64), IPv4-mapped as IPv4. */
static void test_key(void)
{
    static const char *const cases[][2] = {
        { "192.0.2.1:5000", "192.0.2.1" },
        { "[2001:db8:1:2:aaaa:bbbb:cccc:dddd]:5000", "[2001:db8:1:2::/64]" },
        { "[2001:db8:1:2::7]:1", "[2001:db8:1:2::/64]" },
        { "[::1]:6379", "[::/64]" },
        { "[::ffff:198.51.100.9]:7", "198.51.100.9" },
        { "[not-an-address]:7", "[not-an-address]" },
        { "?", "?" },
    };
    char out[AUTHFAIL_ADDR_MAX + 1];
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        authfail_key(cases[i][0], out, sizeof out);
        TU_CHECK(strcmp(out, cases[i][1]) == 0, "authfail_key(%s) = %s, want %s", cases[i][0], out, cases[i][1]);
    }
}

static const tu_test_t authfail_tests[] = {
    { "the key: IPv4 without the port, IPv6 by its /64", test_key },
    { "the recent failures and the latest's time", test_recent },
    { "failures counted within the window", test_counts_within_window },
    { "a full table forgets the least recently failed only", test_full_forgets_least_recent },
    { "a flood of addresses keeps a recent count; bounded", test_flood_keeps_recent },
    { "long addresses", test_long_address },
    { NULL, NULL },
};

static const tu_suite_t suites[] = {
    { "authfail", authfail_tests },
};

int main(int argc, char **argv)
{
    return tu_suites_main(argc, argv, suites, sizeof suites / sizeof suites[0], NULL, NULL);
}
