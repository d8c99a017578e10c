/*
 * tests/unit/test_tu_argv.c — CUnit suite for the tests' argument-vector
 * builder (tests/helpers/testutil.h: tu_argv_*, tu_run_capture_argv), through
 * which the hourglass-cli tests (test_cli_check, test_cli_msg,
 * test_cli_orders, test_client) build each run from a fixed front, their
 * varargs and trailing flags.
 *
 * Suite "tu_argv":
 *   order      words, a list and varargs land in the order added, the
 *              vector NULL-terminated, and the run sees exactly them
 *   overflow   a word past TU_ARGV_MAX is dropped and remembered: the
 *              vector is refused (-1, nothing run), not run cut short
 *
 * Run it: ./tests/unit/test_tu_argv
 */
#include <CUnit/CUnit.h>

#include "tests/helpers/testutil.h"

#include <stdarg.h>
#include <string.h>

/* tu_argv_add_va's caller: the words of ... (NULL-terminated) after front. */
static void add_words(tu_argv_t *a, const char *front, ...)
{
    va_list ap;
    tu_argv_add(a, front);
    va_start(ap, front);
    tu_argv_add_va(a, ap);
    va_end(ap);
}

static void test_order(void)
{
    tu_argv_t a;
    tu_argv_init(&a);
    TU_CHECK(a.n == 0 && a.word[0] == NULL && tu_argv_check(&a) == 0, "an empty vector: %zu words", a.n);
    add_words(&a, "/bin/echo", "one", "two", (char *)NULL);
    tu_argv_add_list(&a, (const char *const[]){ "three", "four", NULL });
    tu_argv_add_list(&a, NULL);
    tu_argv_add(&a, "five");
    static const char *const want[] = { "/bin/echo", "one", "two", "three", "four", "five" };
    TU_REQUIRE(a.n == 6, "%zu words, want 6", a.n);
    for (size_t i = 0; i < a.n; i++)
        TU_CHECK(strcmp(a.word[i], want[i]) == 0, "word %zu: %s, want %s", i, a.word[i], want[i]);
    CU_ASSERT_PTR_NULL(a.word[a.n]);
    char out[256];
    int rc = tu_run_capture_argv(&a, out, sizeof out);
    TU_CHECK(rc == 0 && strcmp(out, "one two three four five\n") == 0, "echo: exit %d: '%s'", rc, out);
}

static void test_overflow(void)
{
    tu_argv_t a;
    tu_argv_init(&a);
    tu_argv_add(&a, "/bin/echo");
    for (int i = 1; i < TU_ARGV_MAX; i++)
        tu_argv_add(&a, "x");
    TU_CHECK(a.n == TU_ARGV_MAX && !a.overflow && tu_argv_check(&a) == 0, "%zu words, overflow %d", a.n, a.overflow);
    add_words(&a, "past-the-end", (char *)NULL);
    TU_CHECK(a.n == TU_ARGV_MAX && a.overflow && a.word[TU_ARGV_MAX] == NULL, "%zu words, overflow %d", a.n,
             a.overflow);
    CU_ASSERT_EQUAL(tu_argv_check(&a), -1);
    char out[64] = "stale";
    int rc = tu_run_capture_argv(&a, out, sizeof out);
    TU_CHECK(rc == -1 && out[0] == '\0', "an overflowed vector was run: exit %d: '%s'", rc, out);
}

static const tu_test_t tests[] = {
    { "words, lists and varargs in the order added, the run sees exactly them", test_order },
    { "a word past TU_ARGV_MAX: the vector is refused, not run cut short", test_overflow },
    { NULL, NULL },
};
static const tu_suite_t suites[] = {
    { "tu_argv", tests },
};

int main(int argc, char **argv)
{
    return tu_suites_main(argc, argv, suites, sizeof suites / sizeof suites[0], NULL, NULL);
}
