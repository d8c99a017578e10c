/*
 * tests/unit/test_log_limit.c — CUnit suites for common/log_limit.c: the
 * first failure logged at once, the same failure again counted and logged
 * once per interval with the count, a different failure logged at once, the
 * least recently used key replaced when more keys fail than are tracked, the
 * recovery line (duration and count) once, and nothing for a success without
 * failures; counts (log_limit_count) limited alike without a recovery line;
 * a limiter set up by LOG_LIMIT_INITIALIZER alone. Deterministic: the clock and the writer are injected.
 */
#include "common/log_limit.h"
#include "tests/helpers/testutil.h"

#include <CUnit/CUnit.h>
#include <stdio.h>
#include <string.h>

/* The injected clock and a record of what was written. */
typedef struct capture {
    uint64_t now;
    int lines;
    log_level_t level;
    char last[2100];
} capture_t;

static uint64_t fake_clock(void *arg)
{
    return ((capture_t *)arg)->now;
}

static void capture_line(log_level_t level, const char *line, void *arg)
{
    capture_t *c = arg;
    c->lines++;
    c->level = level;
    snprintf(c->last, sizeof c->last, "%s", line);
}

static void start(log_limit_t *l, capture_t *c)
{
    memset(c, 0, sizeof *c);
    c->now = 1000;
    log_limit_init(l, "MariaDB answers", 10000);
    log_limit_set_hooks(l, fake_clock, capture_line, c);
}

static void test_first_then_interval(void)
{
    log_limit_t l;
    capture_t c;
    start(&l, &c);
    TU_CHECK(log_limit_fail(&l, LOG_LEVEL_WARN, "disk full", "order %d: disk full", 1) == 1, "first not logged");
    TU_CHECK(c.lines == 1 && strcmp(c.last, "order 1: disk full") == 0, "first line: %d '%s'", c.lines, c.last);
    CU_ASSERT_EQUAL(c.level, LOG_LEVEL_WARN);
    /* 1000 more within the interval: counted, not logged */
    for (int i = 2; i <= 1001; i++) {
        c.now += 9; /* 9 s in all */
        CU_ASSERT_EQUAL(log_limit_fail(&l, LOG_LEVEL_WARN, "disk full", "order %d: disk full", i), 0);
    }
    TU_CHECK(c.lines == 1, "%d lines within the interval", c.lines);
    c.now = 1000 + 10000; /* the interval is over: the next one is logged with the count */
    CU_ASSERT_EQUAL(log_limit_fail(&l, LOG_LEVEL_WARN, "disk full", "order %d: disk full", 1002), 1);
    TU_CHECK(c.lines == 2 && strcmp(c.last, "order 1002: disk full (repeated 1000 times in the last 10.0 s)") == 0,
             "second line: %d '%s'", c.lines, c.last);
    /* and the count starts again */
    c.now += 10000;
    CU_ASSERT_EQUAL(log_limit_fail(&l, LOG_LEVEL_WARN, "disk full", "order %d: disk full", 1003), 1);
    TU_CHECK(strcmp(c.last, "order 1003: disk full") == 0, "third line '%s'", c.last);
    log_limit_destroy(&l);
}

static void test_other_key_at_once(void)
{
    log_limit_t l;
    capture_t c;
    start(&l, &c);
    for (int i = 0; i < 100; i++) { /* two failures alternating: each logged once */
        c.now += 10;
        log_limit_fail(&l, LOG_LEVEL_WARN, "lost", "worker 0: lost connection");
        log_limit_fail(&l, LOG_LEVEL_WARN, "refused", "worker 1: connection refused");
    }
    TU_CHECK(c.lines == 2, "%d lines for two alternating failures", c.lines);
    /* NULL key: the text is the key */
    CU_ASSERT_EQUAL(log_limit_fail(&l, LOG_LEVEL_ERROR, NULL, "read-only"), 1);
    CU_ASSERT_EQUAL(log_limit_fail(&l, LOG_LEVEL_ERROR, NULL, "read-only"), 0);
    CU_ASSERT_EQUAL(log_limit_fail(&l, LOG_LEVEL_ERROR, "", "read-only!"), 1);
    CU_ASSERT_EQUAL(c.level, LOG_LEVEL_ERROR);
    log_limit_destroy(&l);
}

static void test_key_table_full(void)
{
    log_limit_t l;
    capture_t c;
    start(&l, &c);
    char key[32];
    for (int i = 0; i < LOG_LIMIT_KEYS; i++) {
        c.now++;
        snprintf(key, sizeof key, "key %d", i);
        CU_ASSERT_EQUAL(log_limit_fail(&l, LOG_LEVEL_WARN, key, "%s", key), 1);
    }
    c.now++;
    CU_ASSERT_EQUAL(log_limit_fail(&l, LOG_LEVEL_WARN, "key 0", "key 0"), 0); /* key 0 used last now; key 1 oldest */
    c.now++;
    CU_ASSERT_EQUAL(log_limit_fail(&l, LOG_LEVEL_WARN, "one more", "one more"), 1); /* replaces key 1 */
    c.now++;
    CU_ASSERT_EQUAL(log_limit_fail(&l, LOG_LEVEL_WARN, "key 0", "key 0"), 0);
    CU_ASSERT_EQUAL(log_limit_fail(&l, LOG_LEVEL_WARN, "key 2", "key 2"), 0);
    CU_ASSERT_EQUAL(log_limit_fail(&l, LOG_LEVEL_WARN, "key 1", "key 1"), 1); /* forgotten: logged again */
    /* a key longer than LOG_LIMIT_KEY_MAX compares by its first bytes */
    char long_a[400], long_b[400];
    memset(long_a, 'a', sizeof long_a - 1);
    long_a[sizeof long_a - 1] = '\0';
    memcpy(long_b, long_a, sizeof long_b);
    long_b[sizeof long_b - 2] = 'b';
    CU_ASSERT_EQUAL(log_limit_fail(&l, LOG_LEVEL_WARN, long_a, "long"), 1);
    CU_ASSERT_EQUAL(log_limit_fail(&l, LOG_LEVEL_WARN, long_b, "long"), 0);
    log_limit_destroy(&l);
}

static void test_recovery(void)
{
    log_limit_t l;
    capture_t c;
    start(&l, &c);
    CU_ASSERT_EQUAL(log_limit_ok(&l), 0); /* no failure: nothing */
    CU_ASSERT_EQUAL(c.lines, 0);
    uint64_t t0 = c.now;
    for (int i = 0; i < 1034; i++) {
        c.now = t0 + (uint64_t)i * 12;
        log_limit_fail(&l, LOG_LEVEL_WARN, "full", "full");
    }
    int before = c.lines;
    c.now = t0 + 12300;
    CU_ASSERT_EQUAL(log_limit_ok(&l), 1);
    TU_CHECK(c.lines == before + 1 && c.level == LOG_LEVEL_WARN &&
                 strcmp(c.last, "MariaDB answers again after 12.3 s; 1034 attempts failed meanwhile") == 0,
             "recovery line: '%s'", c.last);
    CU_ASSERT_EQUAL(log_limit_ok(&l), 0); /* once */
    CU_ASSERT_EQUAL(c.lines, before + 1);
    /* a new outage starts afresh: its first failure is logged at once, without an old count; the recovery at the
     * failures' highest level (info here) */
    c.now += 1;
    CU_ASSERT_EQUAL(log_limit_fail(&l, LOG_LEVEL_INFO, "full", "full"), 1);
    TU_CHECK(strcmp(c.last, "full") == 0, "'%s'", c.last);
    c.now += 500;
    CU_ASSERT_EQUAL(log_limit_ok(&l), 1);
    TU_CHECK(strcmp(c.last, "MariaDB answers again after 0.5 s; 1 attempt failed meanwhile") == 0, "'%s'", c.last);
    CU_ASSERT_EQUAL(c.level, LOG_LEVEL_INFO);
    /* errors: the recovery at warn (it is good news) */
    log_limit_fail(&l, LOG_LEVEL_INFO, "a", "a");
    log_limit_fail(&l, LOG_LEVEL_ERROR, "b", "b");
    log_limit_fail(&l, LOG_LEVEL_DEBUG, "c", "c");
    CU_ASSERT_EQUAL(log_limit_ok(&l), 1);
    CU_ASSERT_EQUAL(c.level, LOG_LEVEL_WARN);
    log_limit_destroy(&l);
}

static void test_default_writer(void)
{
    /* the default hooks: the real clock, log_msg (below the level here: nothing shows) */
    log_limit_t l;
    log_limit_init(&l, "the broker answers", 0);
    CU_ASSERT_EQUAL(l.interval_ms, LOG_LIMIT_INTERVAL_MS);
    log_set_level(LOG_LEVEL_ERROR);
    CU_ASSERT_EQUAL(log_limit_fail(&l, LOG_LEVEL_DEBUG, "k", "debug line"), 1);
    CU_ASSERT_EQUAL(log_limit_fail(&l, LOG_LEVEL_DEBUG, "k", "debug line"), 0);
    CU_ASSERT_EQUAL(log_limit_ok(&l), 1);
    log_set_level(LOG_LEVEL_INFO);
    log_limit_destroy(&l);
}

static void test_count(void)
{
    log_limit_t l;
    capture_t c;
    start(&l, &c);
    l.interval_ms = 1000;
    TU_CHECK(log_limit_count(&l, LOG_LEVEL_WARN, "plain", "refused a client (%d so far)", 1) == 1, "first not logged");
    TU_CHECK(strcmp(c.last, "refused a client (1 so far)") == 0, "'%s'", c.last);
    for (int i = 2; i <= 41; i++) {
        c.now += 20; /* 0.8 s in all */
        CU_ASSERT_EQUAL(log_limit_count(&l, LOG_LEVEL_WARN, "plain", "refused a client (%d so far)", i), 0);
    }
    CU_ASSERT_EQUAL(c.lines, 1);
    /* another key (the TLS port) at once, its own count */
    CU_ASSERT_EQUAL(log_limit_count(&l, LOG_LEVEL_WARN, "tls", "closed a client on tls-port"), 1);
    c.now = 1000 + 1000;
    CU_ASSERT_EQUAL(log_limit_count(&l, LOG_LEVEL_WARN, "plain", "refused a client (%d so far)", 42), 1);
    TU_CHECK(strcmp(c.last, "refused a client (42 so far) (repeated 40 times in the last 1.0 s)") == 0, "'%s'", c.last);
    CU_ASSERT_EQUAL(c.lines, 3);
    /* no outage: no recovery line, and failures are not mixed in */
    CU_ASSERT_EQUAL(atomic_load(&l.failing), 0);
    CU_ASSERT_EQUAL(log_limit_ok(&l), 0);
    CU_ASSERT_EQUAL(c.lines, 3);
    log_limit_destroy(&l);
}

/* The static way: no call before use, the default interval. */
static log_limit_t static_limit = LOG_LIMIT_INITIALIZER("the broker answers", 0);

static void test_initializer(void)
{
    capture_t c;
    memset(&c, 0, sizeof c);
    c.now = 5000;
    log_limit_set_hooks(&static_limit, fake_clock, capture_line, &c);
    CU_ASSERT_EQUAL(log_limit_ok(&static_limit), 0);
    CU_ASSERT_EQUAL(log_limit_fail(&static_limit, LOG_LEVEL_WARN, "k", "down"), 1);
    c.now += LOG_LIMIT_INTERVAL_MS - 1;
    CU_ASSERT_EQUAL(log_limit_fail(&static_limit, LOG_LEVEL_WARN, "k", "down"), 0); /* the default interval */
    c.now += 1;
    CU_ASSERT_EQUAL(log_limit_fail(&static_limit, LOG_LEVEL_WARN, "k", "down"), 1);
    CU_ASSERT_EQUAL(log_limit_ok(&static_limit), 1);
    TU_CHECK(strcmp(c.last, "the broker answers again after 10.0 s; 3 attempts failed meanwhile") == 0, "'%s'", c.last);
    log_limit_set_hooks(&static_limit, NULL, NULL, NULL);
}

static const tu_test_t limit_tests[] = {
    { "first at once, then once per interval with the count", test_first_then_interval },
    { "a different failure at once, alternating ones once each", test_other_key_at_once },
    { "more keys than slots: the least recently used goes", test_key_table_full },
    { "the recovery line once, a new outage afresh", test_recovery },
    { "the default clock and writer", test_default_writer },
    { "counts: limited alike, no outage", test_count },
    { "LOG_LIMIT_INITIALIZER: ready without a call", test_initializer },
    { NULL, NULL },
};
static const tu_suite_t suites[] = {
    { "log_limit", limit_tests },
};

int main(int argc, char **argv)
{
    return tu_suites_main(argc, argv, suites, sizeof suites / sizeof suites[0], NULL, NULL);
}
