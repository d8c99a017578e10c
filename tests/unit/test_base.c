/*
 * tests/unit/test_base.c — CUnit suites for base/: the allocator and its
 * out-of-memory path, the error buffer, the byte buffer, the duration and
 * size grammar (every error, fractions, formatting and round trips), and the
 * hash map (binary keys, growth, tombstones, iteration with deletion), and the
 * id map (a seeded random mix against a plain array, through growth and shrinking), and
 * OpenSSL's error queue as text (which error, the queue left empty, the text of an empty one).
 *
 * Pure logic; the out-of-memory test runs in a forked child, so the abort
 * (or the hook's _exit) happens there.
 */
#include "base/alloc.h"
#include "base/buf.h"
#include "base/err.h"
#include "base/idmap.h"
#include "base/map.h"
#include "base/openssl_error.h"
#include "base/units.h"
#include "tests/helpers/testutil.h"

#include <CUnit/CUnit.h>
#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <errno.h>
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define SEC  UINT64_C(1000)
#define MIN  (60 * SEC)
#define HOUR (60 * MIN)
#define DAY  (24 * HOUR)

/* ---------------------------------------------------------------- alloc */

/* Under AddressSanitizer a huge malloc aborts inside ASan unless it may
 * return NULL; this lets the out-of-memory test reach our own path there
 * too (the function is only read by the sanitizer runtime). */
const char *__asan_default_options(void);
const char *__asan_default_options(void)
{
    return "allocator_may_return_null=1";
}

static void test_alloc_basics(void)
{
    char *p = xmalloc(0);
    CU_ASSERT_PTR_NOT_NULL(p);
    free(p);
    int *z = xcalloc(16, sizeof *z);
    int sum = 0;
    for (int i = 0; i < 16; i++)
        sum += z[i];
    CU_ASSERT_EQUAL(sum, 0);
    z = xrealloc(z, 1024 * sizeof *z);
    z[1023] = 7;
    CU_ASSERT_EQUAL(z[1023], 7);
    free(z);
    char *s = xstrdup("hourglass");
    CU_ASSERT_STRING_EQUAL(s, "hourglass");
    free(s);
    static const char bin[] = { 'a', '\0', 'b' };
    char *n = xstrndup(bin, 3);
    CU_ASSERT(memcmp(n, bin, 3) == 0 && n[3] == '\0');
    free(n);
    char *m = xmemdup(bin, 3);
    CU_ASSERT(memcmp(m, bin, 3) == 0);
    free(m);
    free(xmemdup(NULL, 0));
}

static void oom_hook_exit(size_t n)
{
    _exit(n > ((size_t)1 << 40) ? 42 : 43);
}

static void test_alloc_oom(void)
{
    /* The hook runs with the size asked for; without it the process aborts
     * with a message naming the size. Both in children. */
    pid_t pid = fork();
    TU_REQUIRE(pid >= 0, "fork failed");
    if (pid == 0) {
        xalloc_set_oom_hook(oom_hook_exit);
        volatile size_t huge = (size_t)-1 / 2;
        free(xmalloc(huge));
        _exit(0);
    }
    int status = 0;
    waitpid(pid, &status, 0);
    TU_CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 42, "hook child: status %d", status);

    int fds[2];
    TU_REQUIRE(pipe(fds) == 0, "pipe failed");
    pid = fork();
    TU_REQUIRE(pid >= 0, "fork failed");
    if (pid == 0) {
        dup2(fds[1], 2);
        close(fds[0]);
        volatile size_t huge = (size_t)-1 / 2;
        free(xrealloc(NULL, huge));
        _exit(0);
    }
    close(fds[1]);
    char out[4096] = "";
    size_t have = 0;
    for (;;) { /* everything the child wrote (a sanitizer may warn first) */
        ssize_t got = read(fds[0], out + have, sizeof out - 1 - have);
        if (got <= 0)
            break;
        have += (size_t)got;
        if (have == sizeof out - 1)
            break;
    }
    out[have] = '\0';
    close(fds[0]);
    waitpid(pid, &status, 0);
    TU_CHECK(WIFSIGNALED(status) && WTERMSIG(status) == SIGABRT, "default child: status %d", status);
    TU_CHECK(strstr(out, "out of memory allocating") != NULL, "default child said \"%s\"", out);
}

/* ---------------------------------------------------------------- err */

static int fails_with(char *err, size_t errlen, int v)
{
    return err_set(err, errlen, "no group '%s' (%d)", "g", v);
}

static void test_err(void)
{
    char err[64] = "";
    CU_ASSERT_EQUAL(fails_with(err, sizeof err, 3), -1);
    CU_ASSERT_STRING_EQUAL(err, "no group 'g' (3)");
    CU_ASSERT_EQUAL(fails_with(NULL, 0, 3), -1);
    char small[6];
    fails_with(small, sizeof small, 3);
    CU_ASSERT_STRING_EQUAL(small, "no gr");
    CU_ASSERT_EQUAL(err_prefix(err, sizeof err, "PULL %s", "orders"), -1);
    CU_ASSERT_STRING_EQUAL(err, "PULL orders: no group 'g' (3)");
    CU_ASSERT_EQUAL(err_prefix(NULL, 0, "x"), -1);
}

/* ---------------------------------------------------------------- buf */

static void test_buf(void)
{
    buf_t b = BUF_INIT;
    CU_ASSERT_STRING_EQUAL(buf_cstr(&b), "");
    buf_append(&b, "ab", 2);
    buf_append_str(&b, "cd");
    buf_printf(&b, "-%d-", 42);
    CU_ASSERT_EQUAL(b.len, 8);
    CU_ASSERT_STRING_EQUAL(buf_cstr(&b), "abcd-42-");
    CU_ASSERT_EQUAL(b.len, 8);
    buf_consume(&b, 2);
    CU_ASSERT_STRING_EQUAL(buf_cstr(&b), "cd-42-");
    buf_consume(&b, 100);
    CU_ASSERT_EQUAL(b.len, 0);

    /* a printf longer than the stack buffer */
    char big[3000];
    memset(big, 'x', sizeof big - 1);
    big[sizeof big - 1] = '\0';
    buf_printf(&b, "<%s>", big);
    CU_ASSERT_EQUAL(b.len, sizeof big + 1);
    CU_ASSERT(b.data[0] == '<' && b.data[b.len - 1] == '>');

    /* binary bytes and reserve */
    buf_clear(&b);
    char *w = buf_reserve(&b, 3);
    w[0] = 0;
    w[1] = 1;
    w[2] = 0;
    b.len += 3;
    CU_ASSERT_EQUAL(b.len, 3);
    CU_ASSERT(b.data[1] == 1);

    /* trim gives memory back after a burst */
    buf_clear(&b);
    buf_reserve(&b, 1 << 20);
    CU_ASSERT(b.cap >= (1u << 20));
    buf_append(&b, "keep", 4);
    size_t back = buf_trim(&b, 4096);
    CU_ASSERT(back > 0);
    CU_ASSERT_EQUAL(b.cap, 4096);
    CU_ASSERT(b.len == 4 && memcmp(b.data, "keep", 4) == 0);
    CU_ASSERT_EQUAL(buf_trim(&b, 4096), 0);
    buf_clear(&b);
    buf_trim(&b, 0);
    CU_ASSERT_PTR_NULL(b.data);
    CU_ASSERT_EQUAL(b.cap, 0);
    buf_free(&b);
    buf_free(&b);
}

/* ---------------------------------------------------------------- durations */

static void expect_duration(const char *text, uint64_t want, int line)
{
    char err[256] = "";
    uint64_t got = UINT64_C(12345);
    int rc = units_parse_duration_str(text, 0, &got, err, sizeof(err));

    TU_CHECK_AT(rc == 0 && got == want, line, "parse \"%s\": rc %d, got %" PRIu64 ", want %" PRIu64 " (err: %s)", text,
                rc, got, want, err);
}
#define EXPECT_DURATION(text, want) expect_duration((text), (want), __LINE__)

/* The parse must fail and the message must contain every given fragment. */
static void expect_duration_error(const char *text, const char *frag1, const char *frag2, int line)
{
    char err[256] = "";
    uint64_t got = 0;
    int rc = units_parse_duration_str(text, 0, &got, err, sizeof(err));
    size_t len = strlen(err);

    TU_CHECK_AT(rc == -1, line, "parse \"%s\" should fail, got rc %d value %" PRIu64, text, rc, got);
    TU_CHECK_AT(len > 0 && err[len - 1] != '\n', line,
                "parse \"%s\": message \"%s\" is empty or "
                "ends with a newline",
                text, err);
    TU_CHECK_AT(strstr(err, frag1) != NULL, line, "parse \"%s\": message \"%s\" lacks \"%s\"", text, err, frag1);
    if (frag2 != NULL)
        TU_CHECK_AT(strstr(err, frag2) != NULL, line, "parse \"%s\": message \"%s\" lacks \"%s\"", text, err, frag2);
}
#define EXPECT_DURATION_ERROR(text, frag1, frag2) expect_duration_error((text), (frag1), (frag2), __LINE__)

static void test_duration_units(void)
{
    EXPECT_DURATION("500ms", 500);
    EXPECT_DURATION("5s", 5 * SEC);
    EXPECT_DURATION("30m", 30 * MIN);
    EXPECT_DURATION("2h", 2 * HOUR);
    EXPECT_DURATION("3d", 3 * DAY);
    EXPECT_DURATION("1ms", 1);
    EXPECT_DURATION("1d", 86400000);
    EXPECT_DURATION("90s", 90000);
    /* "m" is minutes and "ms" milliseconds: the longest unit name wins */
    EXPECT_DURATION("2m", 120000);
    EXPECT_DURATION("2ms", 2);
}

static void test_duration_zero_and_blanks(void)
{
    EXPECT_DURATION("0s", 0);
    EXPECT_DURATION("0ms", 0);
    EXPECT_DURATION("0d", 0);
    EXPECT_DURATION("  5s", 5 * SEC);
    EXPECT_DURATION("5s  ", 5 * SEC);
    EXPECT_DURATION("\t 5s \r\n", 5 * SEC);
    /* leading zeros are harmless: still decimal, never octal */
    EXPECT_DURATION("010s", 10 * SEC);
    EXPECT_DURATION("000ms", 0);
}

static void test_duration_limits(void)
{
    EXPECT_DURATION("36500d", UNITS_MAX_DURATION_MS);
    EXPECT_DURATION("3153600000000ms", UNITS_MAX_DURATION_MS);
    EXPECT_DURATION("876000h", UNITS_MAX_DURATION_MS);
    EXPECT_DURATION_ERROR("36501d", "above the maximum of 36500d", "\"36501d\"");
    EXPECT_DURATION_ERROR("3153600000001ms", "above the maximum", "\"3153600000001ms\"");
    EXPECT_DURATION_ERROR("3153600000001s", "above the maximum", NULL);
    /* more digits than a uint64_t holds */
    EXPECT_DURATION_ERROR("99999999999999999999d", "above the maximum", "\"99999999999999999999d\"");
    EXPECT_DURATION_ERROR("18446744073709551616ms", "above the maximum", NULL);
    EXPECT_DURATION_ERROR("18446744073709551615ms", "above the maximum", NULL);
    /* fits in uint64_t but value * unit wraps to 34448384 ms if unchecked */
    EXPECT_DURATION_ERROR("213503982335d", "above the maximum", NULL);
    /* a syntax error is reported before the range */
    EXPECT_DURATION_ERROR("99999999999999999999x", "unknown unit \"x\"", NULL);
}

static void test_duration_bad_input(void)
{
    EXPECT_DURATION_ERROR("", "empty duration", NULL);
    EXPECT_DURATION_ERROR("   \t ", "empty duration", NULL);
    EXPECT_DURATION_ERROR("-5s", "sign not allowed", "\"-5s\"");
    EXPECT_DURATION_ERROR("+5s", "sign not allowed", "\"+5s\"");
    EXPECT_DURATION_ERROR("s", "does not start with a number", "\"s\"");
    EXPECT_DURATION_ERROR("x5s", "does not start with a number", "\"x5s\"");
    EXPECT_DURATION_ERROR("5x", "unknown unit \"x\" in duration \"5x\" (use ms, s, m, h or d)", NULL);
    /* units are lower case: "M" could mean minutes or months */
    EXPECT_DURATION_ERROR("5S", "unknown unit \"S\"", NULL);
    EXPECT_DURATION_ERROR("5M", "unknown unit \"M\"", NULL);
    EXPECT_DURATION_ERROR("5sec", "unknown unit \"sec\"", NULL);
    EXPECT_DURATION_ERROR("5mss", "unknown unit \"mss\"", NULL);
    EXPECT_DURATION_ERROR("30", "missing unit in duration \"30\"", "use ms, s, m, h or d");
    EXPECT_DURATION_ERROR("5s5", "unexpected \"5\" after \"5s\" in duration \"5s5\"", NULL);
    EXPECT_DURATION_ERROR("5s 5s", "unexpected \" 5s\" after \"5s\"", NULL);
    EXPECT_DURATION_ERROR("5s,", "unexpected \",\"", NULL);
    /* decided: the number and the unit are written together ("5 s" is refused,
     * as it would be two items in a level table spec) */
    EXPECT_DURATION_ERROR("5 s", "blank between number and unit", "\"5 s\"");
    EXPECT_DURATION_ERROR("1_000ms", "unexpected \"_\"", NULL);
}

static void test_duration_error_buffers(void)
{
    uint64_t ms = 0;
    char small[8];

    /* err may be NULL */
    CU_ASSERT_EQUAL(units_parse_duration_str("5x", 0, &ms, NULL, 0), -1);
    CU_ASSERT_EQUAL(units_parse_duration_str("5s", 0, &ms, NULL, 0), 0);
    CU_ASSERT_EQUAL(ms, 5 * SEC);
    /* a short buffer is truncated and still terminated */
    memset(small, 'Z', sizeof(small));
    CU_ASSERT_EQUAL(units_parse_duration_str("5x", 0, &ms, small, sizeof(small)), -1);
    CU_ASSERT_EQUAL(strlen(small), sizeof(small) - 1);
    CU_ASSERT_NSTRING_EQUAL(small, "unknown", 7);
}

static void expect_format(uint64_t ms, const char *want, int line)
{
    char buf[64];
    int n = units_format_duration(ms, buf, sizeof(buf));

    TU_CHECK_AT(strcmp(buf, want) == 0 && n == (int)strlen(want), line,
                "format %" PRIu64 ": got \"%s\" (%d), want \"%s\"", ms, buf, n, want);
}
#define EXPECT_FORMAT(ms, want) expect_format((ms), (want), __LINE__)

static void test_duration_format(void)
{
    EXPECT_FORMAT(7200000, "2h");
    EXPECT_FORMAT(90000, "90s");
    EXPECT_FORMAT(1500, "1500ms");
    EXPECT_FORMAT(0, "0s");
    EXPECT_FORMAT(1, "1ms");
    EXPECT_FORMAT(1000, "1s");
    EXPECT_FORMAT(60000, "1m");
    EXPECT_FORMAT(3600000, "1h");
    EXPECT_FORMAT(86400000, "1d");
    EXPECT_FORMAT(3 * DAY, "3d");
    EXPECT_FORMAT(25 * HOUR, "25h");
    EXPECT_FORMAT(DAY + SEC, "86401s");
    EXPECT_FORMAT(UNITS_MAX_DURATION_MS, "36500d");
    EXPECT_FORMAT(UINT64_MAX, "18446744073709551615ms");

    /* snprintf semantics: the full length is returned even when truncated */
    char buf[4];
    CU_ASSERT_EQUAL(units_format_duration(1500, buf, sizeof(buf)), 6);
    CU_ASSERT_STRING_EQUAL(buf, "150");
    CU_ASSERT_EQUAL(units_format_duration(1500, NULL, 0), 6);
}

static int round_trips(uint64_t ms, char *text, size_t textlen)
{
    char err[256];
    uint64_t back = 0;

    units_format_duration(ms, text, textlen);
    return units_parse_duration_str(text, 0, &back, err, sizeof(err)) == 0 && back == ms;
}

static void test_duration_round_trip(void)
{
    static const uint64_t units[] = { 1, SEC, MIN, HOUR, DAY };
    char text[64];
    uint64_t checked = 0;
    uint64_t first_bad = UINT64_MAX;
    uint64_t x = UINT64_C(0x9E3779B97F4A7C15);

    /* every millisecond up to 2 minutes */
    for (uint64_t ms = 0; ms <= 2 * MIN; ms++, checked++)
        if (!round_trips(ms, text, sizeof(text)) && first_bad == UINT64_MAX)
            first_bad = ms;
    /* multiples of every unit, and one off each side */
    for (size_t u = 0; u < sizeof(units) / sizeof(units[0]); u++) {
        for (uint64_t k = 1; k <= 5000; k++) {
            uint64_t base = k * units[u];
            uint64_t cases[3] = { base - 1, base, base + 1 };
            for (int c = 0; c < 3; c++, checked++)
                if (!round_trips(cases[c], text, sizeof(text)) && first_bad == UINT64_MAX)
                    first_bad = cases[c];
        }
    }
    /* pseudo-random values up to the cap (xorshift, fixed seed) */
    for (int i = 0; i < 100000; i++, checked++) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        uint64_t ms = x % (UNITS_MAX_DURATION_MS + 1);
        if (i % 3 == 0)
            ms -= ms % SEC; /* whole seconds often format with a larger unit */
        if (!round_trips(ms, text, sizeof(text)) && first_bad == UINT64_MAX)
            first_bad = ms;
    }
    TU_CHECK(round_trips(UNITS_MAX_DURATION_MS, text, sizeof(text)), "the cap does not round-trip");
    TU_CHECK(first_bad == UINT64_MAX, "%" PRIu64 " ms does not round-trip (formatted \"%s\")", first_bad,
             (units_format_duration(first_bad, text, sizeof(text)), text));
    CU_ASSERT(checked > 200000);

    /* and canonical text round-trips the other way */
    static const char *canonical[] = { "0s",  "1ms", "999ms", "1s",  "59s", "61s", "1m",    "59m",
                                       "61m", "1h",  "23h",   "25h", "1d",  "3d",  "36500d" };
    for (size_t i = 0; i < sizeof(canonical) / sizeof(canonical[0]); i++) {
        uint64_t ms = 0;
        CU_ASSERT_EQUAL_FATAL(units_parse_duration_str(canonical[i], 0, &ms, NULL, 0), 0);
        units_format_duration(ms, text, sizeof(text));
        TU_CHECK(strcmp(text, canonical[i]) == 0, "\"%s\" formats back as \"%s\"", canonical[i], text);
    }
}


static void test_duration_fractions(void)
{
    /* one grammar everywhere: fractions are whole milliseconds */
    EXPECT_DURATION("2.5s", 2500);
    EXPECT_DURATION("5.5s", 5500);
    EXPECT_DURATION("1.5h", 90 * MIN);
    EXPECT_DURATION("0.5m", 30 * SEC);
    EXPECT_DURATION("0.001s", 1);
    EXPECT_DURATION("1.000000000s", SEC);
    EXPECT_DURATION("1500ms", 1500);
    EXPECT_DURATION("0.25d", 6 * HOUR);
    EXPECT_DURATION_ERROR("0.5ms", "duration \"0.5ms\" is not a whole number of milliseconds", NULL);
    EXPECT_DURATION_ERROR("1.0001s", "not a whole number of milliseconds", NULL);
    EXPECT_DURATION_ERROR("5.s", "expected digits after the decimal point", "\"5.s\"");
    EXPECT_DURATION_ERROR(".5s", "does not start with a number", NULL);
    EXPECT_DURATION_ERROR("1.2.3s", "unexpected \".\"", NULL);
    EXPECT_DURATION_ERROR("1.0000000001s", "more than 9 decimals", NULL);
    EXPECT_DURATION_ERROR("36500.5d", "above the maximum", NULL);
    EXPECT_DURATION_ERROR("2.5", "missing unit", NULL);
}

static void test_duration_bare_ms(void)
{
    uint64_t ms = 0;
    char err[128] = "";
    /* "0" alone is zero everywhere; other bare numbers only where asked for */
    CU_ASSERT_EQUAL(units_parse_duration_str("0", 0, &ms, err, sizeof err), 0);
    CU_ASSERT_EQUAL(ms, 0);
    CU_ASSERT_EQUAL(units_parse_duration_str("1500", 0, &ms, err, sizeof err), -1);
    CU_ASSERT_EQUAL(units_parse_duration_str("1500", UNITS_BARE_MS, &ms, err, sizeof err), 0);
    CU_ASSERT_EQUAL(ms, 1500);
    CU_ASSERT_EQUAL(units_parse_duration_str("2.5s", UNITS_BARE_MS, &ms, err, sizeof err), 0);
    CU_ASSERT_EQUAL(ms, 2500);
    /* a bare fraction is never milliseconds */
    CU_ASSERT_EQUAL(units_parse_duration_str("2.5", UNITS_BARE_MS, &ms, err, sizeof err), -1);
    /* a span, not a C string */
    CU_ASSERT_EQUAL(units_parse_duration("5sXX", 2, 0, &ms, err, sizeof err), 0);
    CU_ASSERT_EQUAL(ms, 5 * SEC);
    CU_ASSERT_EQUAL(units_parse_duration_str(NULL, 0, &ms, err, sizeof err), -1);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "empty duration"));
}

/* Every unit name of both tables, in every case the grammar allows, and near misses beside each
 * (a byte changed, the case of one letter changed, a letter more), each with the whole error text:
 * the unit lookup compares names in place, and this pins what it accepts and what it says. */
static void test_unit_names(void)
{
    static const struct {
        int is_duration; /* else a size, read with no maximum */
        const char *text;
        uint64_t want; /* when error is NULL */
        const char *error;
    } cases[] = {
        { 1, "3d", 3 * DAY, NULL },
        { 1, "3h", 3 * HOUR, NULL },
        { 1, "3m", 3 * MIN, NULL },
        { 1, "3s", 3 * SEC, NULL },
        { 1, "3ms", 3, NULL },
        { 1, "3D", 0, "unknown unit \"D\" in duration \"3D\" (use ms, s, m, h or d)" },
        { 1, "3H", 0, "unknown unit \"H\" in duration \"3H\" (use ms, s, m, h or d)" },
        { 1, "3mS", 0, "unknown unit \"mS\" in duration \"3mS\" (use ms, s, m, h or d)" },
        { 1, "3Ms", 0, "unknown unit \"Ms\" in duration \"3Ms\" (use ms, s, m, h or d)" },
        { 1, "3md", 0, "unknown unit \"md\" in duration \"3md\" (use ms, s, m, h or d)" },
        { 1, "3ns", 0, "unknown unit \"ns\" in duration \"3ns\" (use ms, s, m, h or d)" },
        { 1, "3sm", 0, "unknown unit \"sm\" in duration \"3sm\" (use ms, s, m, h or d)" },
        { 1, "3dd", 0, "unknown unit \"dd\" in duration \"3dd\" (use ms, s, m, h or d)" },
        { 1, "3hs", 0, "unknown unit \"hs\" in duration \"3hs\" (use ms, s, m, h or d)" },
        { 1, "3b", 0, "unknown unit \"b\" in duration \"3b\" (use ms, s, m, h or d)" },
        { 1, "3msx", 0, "unknown unit \"msx\" in duration \"3msx\" (use ms, s, m, h or d)" },
        { 1, "3ms.", 0, "unexpected \".\" after \"3ms\" in duration \"3ms.\"" },
        { 0, "3bb", 0, "size \"3bb\" has an unknown unit \"bb\" (use b, k, m or g, e.g. 64k)" },
        { 0, "3bk", 0, "size \"3bk\" has an unknown unit \"bk\" (use b, k, m or g, e.g. 64k)" },
        { 0, "3kg", 0, "size \"3kg\" has an unknown unit \"kg\" (use b, k, m or g, e.g. 64k)" },
        { 0, "3gk", 0, "size \"3gk\" has an unknown unit \"gk\" (use b, k, m or g, e.g. 64k)" },
        { 0, "3MM", 0, "size \"3MM\" has an unknown unit \"MM\" (use b, k, m or g, e.g. 64k)" },
        { 0, "3xb", 0, "size \"3xb\" has an unknown unit \"xb\" (use b, k, m or g, e.g. 64k)" },
        { 0, "3s", 0, "size \"3s\" has an unknown unit \"s\" (use b, k, m or g, e.g. 64k)" },
        { 0, "3kbb", 0, "size \"3kbb\" has an unknown unit \"kbb\" (use b, k, m or g, e.g. 64k)" },
        { 0, "3kb.", 0, "unexpected \".\" in size \"3kb.\" (use b, k, m or g, e.g. 64k)" },
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const char *text = cases[i].text;
        char err[256] = "";
        uint64_t got = 12345;
        int rc = cases[i].is_duration ? units_parse_duration_str(text, 0, &got, err, sizeof err)
                                      : units_parse_size(text, strlen(text), UINT64_MAX, &got, err, sizeof err);
        if (cases[i].error == NULL)
            TU_CHECK(rc == 0 && got == cases[i].want, "\"%s\": rc %d, got %" PRIu64 ", want %" PRIu64 " (%s)", text, rc,
                     got, cases[i].want, err);
        else
            TU_CHECK(rc == -1 && strcmp(err, cases[i].error) == 0, "\"%s\": rc %d, \"%s\", want \"%s\"", text, rc, err,
                     cases[i].error);
    }

    /* every size unit in every mix of upper and lower case */
    static const struct {
        const char *name;
        unsigned shift;
    } size_names[] = { { "b", 0 }, { "k", 10 }, { "kb", 10 }, { "m", 20 }, { "mb", 20 }, { "g", 30 }, { "gb", 30 } };
    for (size_t i = 0; i < sizeof size_names / sizeof size_names[0]; i++) {
        size_t len = strlen(size_names[i].name);
        for (unsigned upper = 0; upper < 1u << len; upper++) {
            char text[8] = "3";
            for (size_t k = 0; k < len; k++)
                text[1 + k] = (char)(size_names[i].name[k] - (upper & (1u << k) ? 'a' - 'A' : 0));
            uint64_t got = 12345;
            int rc = units_parse_size(text, len + 1, UINT64_MAX, &got, NULL, 0);
            TU_CHECK(rc == 0 && got == UINT64_C(3) << size_names[i].shift, "\"%s\": rc %d, got %" PRIu64, text, rc,
                     got);
        }
    }
}

static void expect_size(const char *text, uint64_t max, uint64_t want, int line)
{
    char err[256] = "";
    uint64_t got = 12345;
    int rc = units_parse_size(text, strlen(text), max, &got, err, sizeof err);
    TU_CHECK_AT(rc == 0 && got == want, line, "size \"%s\": rc %d got %" PRIu64 " want %" PRIu64 " (%s)", text, rc, got,
                want, err);
}
#define EXPECT_SIZE(text, want) expect_size((text), UINT64_MAX, (want), __LINE__)

static void expect_size_error(const char *text, uint64_t max, const char *frag, int line)
{
    char err[256] = "";
    uint64_t got = 0;
    int rc = units_parse_size(text, strlen(text), max, &got, err, sizeof err);
    TU_CHECK_AT(rc == -1 && strstr(err, frag) != NULL, line, "size \"%s\": rc %d, message \"%s\" lacks \"%s\"", text,
                rc, err, frag);
}
#define EXPECT_SIZE_ERROR(text, max, frag) expect_size_error((text), (max), (frag), __LINE__)

static void test_size(void)
{
    EXPECT_SIZE("0", 0);
    EXPECT_SIZE("1000", 1000);
    EXPECT_SIZE("64k", 65536);
    EXPECT_SIZE("64kb", 65536);
    EXPECT_SIZE("64K", 65536);
    EXPECT_SIZE("4MB", 4u << 20);
    EXPECT_SIZE("4m", 4u << 20);
    EXPECT_SIZE("1g", UINT64_C(1) << 30);
    EXPECT_SIZE("1.5k", 1536);
    EXPECT_SIZE(" 12b ", 12);
    EXPECT_SIZE_ERROR("1.3b", UINT64_MAX, "not a whole number of bytes");
    EXPECT_SIZE_ERROR("4q", UINT64_MAX, "size \"4q\" has an unknown unit \"q\"");
    EXPECT_SIZE_ERROR("4 m", UINT64_MAX, "blank between number and unit");
    EXPECT_SIZE_ERROR("-4m", UINT64_MAX, "sign not allowed");
    EXPECT_SIZE_ERROR("m", UINT64_MAX, "does not start with a number");
    EXPECT_SIZE_ERROR("", UINT64_MAX, "empty size");
    EXPECT_SIZE_ERROR("5g", UINT64_C(4) << 30, "size \"5g\" is above the maximum of 4gb");
    EXPECT_SIZE_ERROR("99999999999999999999999", UINT64_MAX, "above the maximum");
    EXPECT_SIZE_ERROR("4m!", UINT64_MAX, "unexpected \"!\"");
    /* a fraction of a unit larger than the maximum (found by tests/fuzz/fuzz_units: the check's
     * max - fraction wrapped around below zero and let the value through) */
    EXPECT_SIZE_ERROR("0.5k", 0, "size \"0.5k\" is above the maximum of 0");
    EXPECT_SIZE_ERROR("0.5g", 64u << 20, "size \"0.5g\" is above the maximum of 64mb");
    expect_size("0.5k", 512, 512, __LINE__);

    char buf[UNITS_TEXT_MAX];
    static const struct {
        uint64_t v;
        const char *text;
    } formats[] = {
        { 0, "0" },          { 1000, "1000" },
        { 1024, "1kb" },     { 65536, "64kb" },
        { 4u << 20, "4mb" }, { UINT64_C(1) << 30, "1gb" },
        { 1536, "1536" },    { UINT64_C(3) << 30, "3gb" },
    };
    for (size_t i = 0; i < sizeof formats / sizeof formats[0]; i++) {
        units_format_size(formats[i].v, buf, sizeof buf);
        TU_CHECK(strcmp(buf, formats[i].text) == 0, "format %" PRIu64 ": \"%s\", want \"%s\"", formats[i].v, buf,
                 formats[i].text);
        uint64_t back = 1;
        TU_CHECK(units_parse_size(buf, strlen(buf), UINT64_MAX, &back, NULL, 0) == 0 && back == formats[i].v,
                 "\"%s\" does not read back", buf);
    }
}

/* ---------------------------------------------------------------- map */

static void test_map_basics(void)
{
    map_t m = MAP_INIT;
    int a = 1, b = 2, c = 3;
    CU_ASSERT_PTR_NULL(map_get(&m, "x", 1));
    CU_ASSERT_PTR_NULL(map_del(&m, "x", 1));
    CU_ASSERT_PTR_NULL(map_put(&m, "orders", 6, &a));
    CU_ASSERT_PTR_NULL(map_put(&m, "ord\0ers", 7, &b)); /* binary keys */
    CU_ASSERT_PTR_EQUAL(map_get(&m, "orders", 6), &a);
    CU_ASSERT_PTR_EQUAL(map_get(&m, "ord\0ers", 7), &b);
    CU_ASSERT_PTR_NULL(map_get(&m, "ord", 3));
    CU_ASSERT_PTR_EQUAL(map_put(&m, "orders", 6, &c), &a);
    CU_ASSERT_PTR_EQUAL(map_get(&m, "orders", 6), &c);
    CU_ASSERT_EQUAL(map_count(&m), 2);
    CU_ASSERT_PTR_EQUAL(map_del(&m, "orders", 6), &c);
    CU_ASSERT_PTR_NULL(map_get(&m, "orders", 6));
    CU_ASSERT_EQUAL(map_count(&m), 1);
    CU_ASSERT_PTR_NULL(map_put(&m, "", 0, &a)); /* the empty key is a key */
    CU_ASSERT_PTR_EQUAL(map_get(&m, "", 0), &a);
    map_free(&m, NULL);
    CU_ASSERT_EQUAL(map_count(&m), 0);
    map_free(&m, NULL);
}

static void test_map_growth_and_churn(void)
{
    enum {
        N = 100000
    };
    map_t m = MAP_INIT;
    char key[32];
    for (uintptr_t i = 1; i <= N; i++) {
        int n = snprintf(key, sizeof key, "group-%" PRIuPTR, i);
        map_put(&m, key, (size_t)n, (void *)i);
    }
    CU_ASSERT_EQUAL(map_count(&m), N);
    uintptr_t bad = 0;
    for (uintptr_t i = 1; i <= N; i++) {
        int n = snprintf(key, sizeof key, "group-%" PRIuPTR, i);
        if ((uintptr_t)map_get(&m, key, (size_t)n) != i && bad == 0)
            bad = i;
    }
    TU_CHECK(bad == 0, "key group-%" PRIuPTR " lost after growth", bad);
    /* create and delete many times: tombstones must not make the table grow
     * without bound or lose entries */
    size_t cap_before = m.cap;
    for (int round = 0; round < 20; round++) {
        for (int i = 0; i < 10000; i++) {
            int n = snprintf(key, sizeof key, "tmp-%d-%d", round, i);
            map_put(&m, key, (size_t)n, key);
        }
        for (int i = 0; i < 10000; i++) {
            int n = snprintf(key, sizeof key, "tmp-%d-%d", round, i);
            CU_ASSERT_PTR_NOT_NULL(map_del(&m, key, (size_t)n));
        }
    }
    CU_ASSERT_EQUAL(map_count(&m), N);
    TU_CHECK(m.cap <= cap_before * 2, "cap grew from %zu to %zu under churn", cap_before, m.cap);
    CU_ASSERT_PTR_EQUAL(map_get(&m, "group-77", 8), (void *)(uintptr_t)77);
    map_free(&m, NULL);
}

/* ---- idmap ---------------------------------------------------------------- */

static void test_idmap_basics(void)
{
    idmap_t m = { 0 };
    int a, b;
    CU_ASSERT_PTR_NULL(idmap_get(&m, 1));
    CU_ASSERT_PTR_NULL(idmap_del(&m, 1));
    CU_ASSERT_PTR_NULL(idmap_put(&m, 0, &a)); /* 0 and the largest id are ids like any other */
    CU_ASSERT_PTR_NULL(idmap_put(&m, UINT64_MAX, &b));
    CU_ASSERT_PTR_EQUAL(idmap_put(&m, 0, &b), &a); /* replacing returns the old value */
    CU_ASSERT_EQUAL(idmap_count(&m), 2);
    CU_ASSERT_PTR_EQUAL(idmap_get(&m, 0), &b);
    CU_ASSERT_PTR_EQUAL(idmap_get(&m, UINT64_MAX), &b);
    CU_ASSERT_PTR_NULL(idmap_get(&m, 2));
    CU_ASSERT_PTR_EQUAL(idmap_del(&m, 0), &b);
    CU_ASSERT_PTR_NULL(idmap_del(&m, 0));
    CU_ASSERT_EQUAL(idmap_count(&m), 1);
    idmap_free(&m);
    CU_ASSERT_EQUAL(idmap_count(&m), 0);
    CU_ASSERT_PTR_NULL(idmap_get(&m, UINT64_MAX));
}

/* A seeded random mix of puts, deletes and gets against a plain array: ids
 * from a small range (long probe runs, deletes in the middle of runs) and
 * from a strided one (the same low bits), through growth and shrinking. */
static void test_idmap_model(void)
{
    enum {
        IDS = 4096,
        STEPS = 400000
    };
    static void *model[IDS];
    static char vals[IDS];
    idmap_t m = { 0 };
    size_t live = 0, max_cap = 0;
    uint64_t rng = 88172645463325252ULL;
    int bad_step = -1;
    memset(model, 0, sizeof model);
    for (int step = 0; step < STEPS && bad_step < 0; step++) {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        size_t k = (size_t)(rng >> 8) % IDS;
        uint64_t id = k % 2 ? (uint64_t)k << 40 : 1000000 + k; /* strided or consecutive */
        int phase = (step / 50000) % 2;                        /* grow for a while, then drain */
        int op = (int)((rng >> 40) % 10);
        if (op < (phase ? 2 : 6)) {
            void *old = idmap_put(&m, id, &vals[k]);
            if (old != model[k]) {
                bad_step = step;
            }
            live += model[k] == NULL;
            model[k] = &vals[k];
        } else if (op < 8) {
            if (idmap_del(&m, id) != model[k]) {
                bad_step = step;
            }
            live -= model[k] != NULL;
            model[k] = NULL;
        } else if (idmap_get(&m, id) != model[k]) {
            bad_step = step;
        }
        if (idmap_count(&m) != live) {
            bad_step = step;
        }
        max_cap = m.cap > max_cap ? m.cap : max_cap;
    }
    TU_CHECK(bad_step < 0, "the map and the model differ at step %d", bad_step);
    for (size_t k = 0; k < IDS; k++) {
        uint64_t id = k % 2 ? (uint64_t)k << 40 : 1000000 + k;
        if (idmap_get(&m, id) != model[k]) {
            TU_CHECK(0, "id %" PRIu64 " differs at the end", id);
            break;
        }
    }
    TU_CHECK(max_cap >= 2 * IDS / 2, "the map never grew past %zu slots", max_cap);
    for (size_t k = 0; k < IDS; k++) {
        idmap_del(&m, k % 2 ? (uint64_t)k << 40 : 1000000 + k);
    }
    TU_CHECK(idmap_count(&m) == 0 && m.cap <= IDMAP_KEEP_CAP, "emptied: %zu entries in %zu slots (it must shrink back)",
             idmap_count(&m), m.cap);
    idmap_free(&m);
}

/* The hot path's pattern, a million operations: ids taken in order (as the
 * store's clock-based sequence numbers are: ms << 20 plus a count) and
 * released in any order — leases acked out of order — while the live count
 * climbs to some 10 000 and falls back, five times over; a tenth of the
 * deletes ask for an id already released. Every step is checked against a
 * plain array (the put's and delete's results, a live and a released id,
 * the count); the table must stay within four slots per live entry at its
 * peak (it grows at half load: churn at a steady size does not grow it) and
 * shrink back when emptied. */
static void test_idmap_churn(void)
{
    enum {
        OPS = 1000000
    };
    static unsigned char live[OPS]; /* by the id's number n: 1 while in the map */
    static size_t live_list[OPS];   /* the live numbers, in no order */
    static char vals[OPS];
    const uint64_t base = UINT64_C(1764979200000) << 20;
    idmap_t m = { 0 };
    size_t next = 0, count = 0, peak = 0, max_cap = 0;
    uint64_t rng = 0x2545F4914F6CDD1DULL;
    long bad_op = -1;
    memset(live, 0, sizeof live);
    for (long op = 0; op < OPS && bad_op < 0; op++) {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        int filling = (op / 100000) % 2 == 0; /* 100 000 operations filling, then as many draining */
        int put = next < OPS && (count == 0 || (int)(rng % 100) < (filling ? 53 : 40));
        if (put) {
            if (idmap_put(&m, base + next, &vals[next]) != NULL) {
                bad_op = op;
            }
            live[next] = 1;
            live_list[count++] = next++;
        } else if ((rng >> 8) % 10 == 0) { /* an id taken and released, or never taken */
            size_t n = (size_t)((rng >> 20) % (next + 1));
            if (n < OPS && !live[n] && idmap_del(&m, base + n) != NULL) {
                bad_op = op;
            }
        } else {
            size_t i = (size_t)((rng >> 20) % count), n = live_list[i];
            if (idmap_del(&m, base + n) != &vals[n]) {
                bad_op = op;
            }
            live[n] = 0;
            live_list[i] = live_list[--count];
        }
        size_t probe = (size_t)((rng >> 40) % (next + 1)); /* may be next: never taken */
        if (probe < OPS && idmap_get(&m, base + probe) != (live[probe] ? &vals[probe] : NULL)) {
            bad_op = op;
        }
        if (idmap_count(&m) != count) {
            bad_op = op;
        }
        peak = count > peak ? count : peak;
        max_cap = m.cap > max_cap ? m.cap : max_cap;
    }
    TU_CHECK(bad_op < 0, "the map and the model differ at operation %ld", bad_op);
    TU_CHECK(peak > 3000 && peak < 20000 && max_cap <= 4 * peak, "%zu slots at the peak of %zu live ids", max_cap,
             peak);
    while (count > 0) {
        size_t n = live_list[--count];
        if (idmap_del(&m, base + n) != &vals[n]) {
            TU_CHECK(0, "id number %zu lost at the end", n);
            break;
        }
    }
    TU_CHECK(idmap_count(&m) == 0 && m.cap <= IDMAP_KEEP_CAP, "emptied: %zu entries in %zu slots", idmap_count(&m),
             m.cap);
    idmap_free(&m);
}

/* A map filled and drained by batches that fit IDMAP_KEEP_CAP (a group's
 * leases, taken and ACKed a batch at a time) keeps its table: no resize after
 * the first batch, so the slots stay where they are. One grown past it
 * shrinks back to it, no further. */
static void test_idmap_batches_keep_table(void)
{
    enum {
        BATCH = IDMAP_KEEP_CAP / 2,
        ROUNDS = 5
    };
    static char vals[BATCH];
    idmap_t m = { 0 };
    idmap_slot_t *first_slots = NULL;
    int moved_round = -1;
    for (int round = 0; round < ROUNDS; round++) {
        uint64_t base = (uint64_t)round * BATCH;
        for (uint64_t i = 0; i < BATCH; i++) {
            idmap_put(&m, base + i, &vals[i]);
        }
        if (round == 0) {
            first_slots = m.slots;
        } else if (m.slots != first_slots && moved_round < 0) {
            moved_round = round;
        }
        for (uint64_t i = 0; i < BATCH; i++) {
            if (idmap_del(&m, base + i) != &vals[i]) {
                TU_CHECK(0, "round %d: id %" PRIu64 " lost", round, base + i);
                break;
            }
        }
        if (m.slots != first_slots && moved_round < 0) {
            moved_round = round;
        }
    }
    TU_CHECK(moved_round < 0, "the table was reallocated in round %d (batches of %d in %d slots)", moved_round,
             (int)BATCH, (int)IDMAP_KEEP_CAP);
    TU_CHECK(m.cap == IDMAP_KEEP_CAP && idmap_count(&m) == 0, "%zu slots after the batches", m.cap);
    for (uint64_t i = 0; i < 4 * IDMAP_KEEP_CAP; i++) {
        idmap_put(&m, i, &vals[0]);
    }
    TU_CHECK(m.cap > IDMAP_KEEP_CAP, "%zu slots for %d entries", m.cap, 4 * IDMAP_KEEP_CAP);
    for (uint64_t i = 0; i < 4 * IDMAP_KEEP_CAP; i++) {
        idmap_del(&m, i);
    }
    TU_CHECK(m.cap == IDMAP_KEEP_CAP, "emptied after a burst: %zu slots, want %d", m.cap, (int)IDMAP_KEEP_CAP);
    idmap_free(&m);
}

static int freed;
static void count_free(void *v)
{
    (void)v;
    freed++;
}

static void test_map_iteration(void)
{
    map_t m = MAP_INIT;
    char key[16];
    for (uintptr_t i = 0; i < 1000; i++) {
        int n = snprintf(key, sizeof key, "k%" PRIuPTR, i);
        map_put(&m, key, (size_t)n, (void *)(i + 1));
    }
    /* every entry once; deleting the current entry is allowed */
    map_iter_t it = { 0 };
    const char *k;
    size_t len;
    void *v;
    uintptr_t sum = 0;
    int seen = 0;
    while (map_next(&m, &it, &k, &len, &v)) {
        seen++;
        sum += (uintptr_t)v;
        CU_ASSERT_EQUAL(k[len], '\0');
        if (((uintptr_t)v) % 2 == 0)
            map_del(&m, k, len);
    }
    CU_ASSERT_EQUAL(seen, 1000);
    CU_ASSERT_EQUAL(sum, 1000u * 1001u / 2);
    CU_ASSERT_EQUAL(map_count(&m), 500);
    freed = 0;
    map_free(&m, count_free);
    CU_ASSERT_EQUAL(freed, 500);
}

/* ---------------------------------------------------------------- suites */

static const tu_test_t alloc_tests[] = {
    { "basics", test_alloc_basics },
    { "out of memory", test_alloc_oom },
    { NULL, NULL },
};

static const tu_test_t err_tests[] = {
    { "set and prefix", test_err },
    { NULL, NULL },
};

static const tu_test_t buf_tests[] = {
    { "append, printf, consume, trim", test_buf },
    { NULL, NULL },
};

static const tu_test_t units_tests[] = {
    { "units", test_duration_units },
    { "zero and blanks", test_duration_zero_and_blanks },
    { "limits and overflow", test_duration_limits },
    { "bad input", test_duration_bad_input },
    { "error buffers", test_duration_error_buffers },
    { "format", test_duration_format },
    { "round trip", test_duration_round_trip },
    { "fractions", test_duration_fractions },
    { "bare milliseconds", test_duration_bare_ms },
    { "sizes", test_size },
    { "unit names and near misses", test_unit_names },
    { NULL, NULL },
};

static const tu_test_t map_tests[] = {
    { "basics", test_map_basics },
    { "growth and churn", test_map_growth_and_churn },
    { "iteration", test_map_iteration },
    { NULL, NULL },
};

static const tu_test_t idmap_tests[] = {
    { "basics", test_idmap_basics },
    { "model", test_idmap_model },
    { "a million operations of in-order puts, any-order deletes", test_idmap_churn },
    { "batches that fit IDMAP_KEEP_CAP keep the table; a burst shrinks back to it", test_idmap_batches_keep_table },
    { NULL, NULL },
};

/* An error reads as its reason; one whose reason has no text as OpenSSL's whole string; none as "". */
static void test_openssl_error_text(void)
{
    char buf[256];
    CU_ASSERT_STRING_EQUAL(openssl_error_text(0, buf, sizeof buf), "");
    ERR_raise(ERR_LIB_PEM, PEM_R_NO_START_LINE);
    CU_ASSERT_STRING_EQUAL(openssl_error_text(ERR_peek_last_error(), buf, sizeof buf), "no start line");
    CU_ASSERT_NOT_EQUAL(ERR_peek_error(), 0); /* the queue is not touched */
    ERR_clear_error();
    ERR_raise(ERR_LIB_USER, 77); /* no reason text registered */
    openssl_error_text(ERR_peek_last_error(), buf, sizeof buf);
    TU_CHECK(strncmp(buf, "error:", 6) == 0, "an error without reason text reads '%s', want OpenSSL's string", buf);
    ERR_clear_error();
    ERR_raise(ERR_LIB_SYS, ENOENT); /* what a failed fopen records */
    CU_ASSERT_STRING_EQUAL(openssl_error_text(ERR_peek_last_error(), buf, sizeof buf), strerror(ENOENT));
    ERR_clear_error();
    char small[4];
    ERR_raise(ERR_LIB_PEM, PEM_R_NO_START_LINE);
    CU_ASSERT_STRING_EQUAL(openssl_error_text(ERR_peek_last_error(), small, sizeof small), "no ");
    ERR_clear_error();
}

/* The newest error of the queue, the queue then empty; an empty queue reads as the caller's word. */
static void test_openssl_last_error(void)
{
    char buf[256];
    ERR_clear_error();
    ERR_raise(ERR_LIB_PEM, PEM_R_NO_START_LINE);
    ERR_raise(ERR_LIB_X509, X509_R_KEY_VALUES_MISMATCH);
    CU_ASSERT_STRING_EQUAL(openssl_last_error(buf, sizeof buf, "unknown"), "key values mismatch");
    CU_ASSERT_EQUAL(ERR_peek_error(), 0);
    CU_ASSERT_STRING_EQUAL(openssl_last_error(buf, sizeof buf, "unknown"), "unknown");
    CU_ASSERT_STRING_EQUAL(openssl_last_error(buf, sizeof buf, ""), "");
}

/* Every error, oldest first, joined by "; "; cut to fit and the queue drained all the same. */
static void test_openssl_errors_join(void)
{
    char buf[256], small[19];
    ERR_clear_error();
    CU_ASSERT_STRING_EQUAL(openssl_errors_join(openssl_thread_error, NULL, buf, sizeof buf), "");
    ERR_raise(ERR_LIB_PEM, PEM_R_NO_START_LINE);
    ERR_raise(ERR_LIB_X509, X509_R_KEY_VALUES_MISMATCH);
    CU_ASSERT_STRING_EQUAL(openssl_errors_join(openssl_thread_error, NULL, buf, sizeof buf),
                           "no start line; key values mismatch");
    CU_ASSERT_EQUAL(ERR_peek_error(), 0);
    ERR_raise(ERR_LIB_PEM, PEM_R_NO_START_LINE);
    ERR_raise(ERR_LIB_X509, X509_R_KEY_VALUES_MISMATCH);
    CU_ASSERT_STRING_EQUAL(openssl_errors_join(openssl_thread_error, NULL, small, sizeof small), "no start line; key");
    CU_ASSERT_EQUAL(ERR_peek_error(), 0);
    ERR_raise(ERR_LIB_PEM, PEM_R_NO_START_LINE);
    ERR_raise(ERR_LIB_X509, X509_R_KEY_VALUES_MISMATCH);
    CU_ASSERT_STRING_EQUAL(openssl_errors_join(openssl_thread_error, NULL, small, 16), "no start line");
    CU_ASSERT_EQUAL(ERR_peek_error(), 0);
    /* openssl_errors: this thread's queue */
    ERR_raise(ERR_LIB_PEM, PEM_R_NO_START_LINE);
    ERR_raise(ERR_LIB_X509, X509_R_KEY_VALUES_MISMATCH);
    CU_ASSERT_STRING_EQUAL(openssl_errors(buf, sizeof buf), "no start line; key values mismatch");
    CU_ASSERT_EQUAL(ERR_peek_error(), 0);
    CU_ASSERT_STRING_EQUAL(openssl_errors(buf, sizeof buf), "");
}

static const tu_test_t openssl_error_tests[] = {
    { "one error's text", test_openssl_error_text },
    { "the last error, the queue cleared", test_openssl_last_error },
    { "every error joined, the queue drained", test_openssl_errors_join },
    { NULL, NULL },
};

static const tu_suite_t suites[] = {
    { "alloc", alloc_tests },
    { "err", err_tests },
    { "buf", buf_tests },
    { "units", units_tests },
    { "map", map_tests },
    { "idmap", idmap_tests },
    { "openssl_error", openssl_error_tests },
};

int main(int argc, char **argv)
{
    return tu_suites_main(argc, argv, suites, sizeof suites / sizeof suites[0], NULL, NULL);
}
