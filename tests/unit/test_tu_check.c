/*
 * tests/unit/test_tu_check.c — CUnit suite for the tests' own assertions
 * (tests/helpers/testutil.h: TU_CHECK, TU_REQUIRE, TU_CHECK_AT,
 * TU_REQUIRE_AT; broker_proc.h's BP_CHECK, BP_REQUIRE): the message's
 * arguments are evaluated only when the condition is false, and then after
 * it.
 *
 * Suite "tu_check":
 *   passing   a passing check of each macro never evaluates its message (a
 *             counting call in it stays at 0)
 *   failing   a failing check evaluates its message once, after the
 *             condition (it prints what the condition's call wrote); run in
 *             a child, whose exit status and stderr the suite reads, so the
 *             failure it records stays in the child
 *
 * Run it: ./tests/unit/test_tu_check
 */
#include <CUnit/CUnit.h>

#include "tests/helpers/broker_proc.h"
#include "tests/helpers/testutil.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static int g_message_evals; /* how many times message_arg ran */

/* A message argument that counts its evaluations. */
static int message_arg(void)
{
    return ++g_message_evals;
}

/* A condition's call that writes what a message may print. */
static int write_seven(int *out)
{
    *out = 7;
    return -1;
}

static void test_pass_leaves_message(void)
{
    g_message_evals = 0;
    TU_CHECK(1, "evaluated %d", message_arg());
    TU_REQUIRE(1, "evaluated %d", message_arg());
    TU_CHECK_AT(1, __LINE__, "evaluated %d", message_arg());
    TU_REQUIRE_AT(1, __LINE__, "evaluated %d", message_arg());
    BP_CHECK(1, "evaluated %d", message_arg());
    BP_REQUIRE(1, "evaluated %d", message_arg());
    TU_CHECK(g_message_evals == 0, "six passing checks evaluated their message %d times, want 0", g_message_evals);
}

static void test_fail_formats_message(void)
{
    char dir[512], path[600], out[4096] = "";
    TU_REQUIRE(tu_mkdtemp("tucheck", dir, sizeof dir) == 0, "mkdtemp failed");
    snprintf(path, sizeof path, "%s/stderr", dir);
    fflush(NULL);
    pid_t pid = fork();
    TU_REQUIRE(pid >= 0, "fork failed");
    if (pid == 0) {
        /* The child's failure stays in its copy of the registry; its exit
         * status says how often the message ran. */
        if (freopen(path, "w", stderr) == NULL)
            _exit(2);
        int seven = 0;
        g_message_evals = 0;
        TU_CHECK(write_seven(&seven) == 0, "the condition wrote %d, message evaluated %d", seven, message_arg());
        fflush(stderr);
        _exit(g_message_evals == 1 ? 0 : 3);
    }
    int status = -1;
    TU_REQUIRE(waitpid(pid, &status, 0) == pid, "waitpid failed");
    FILE *f = fopen(path, "r");
    if (f != NULL) {
        size_t n = fread(out, 1, sizeof out - 1, f);
        out[n] = '\0';
        fclose(f);
    }
    TU_CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0,
             "the failing check's child exited with status %d (3: message not evaluated exactly once)", status);
    TU_CHECK(strstr(out, "test_tu_check.c:") != NULL &&
                 strstr(out, "the condition wrote 7, message evaluated 1") != NULL,
             "the failing check printed '%s'", out);
    tu_rmtree(dir);
}

static const tu_test_t tests[] = {
    { "a passing check of each macro never evaluates its message", test_pass_leaves_message },
    { "a failing check evaluates its message once, after its condition", test_fail_formats_message },
    { NULL, NULL },
};
static const tu_suite_t suites[] = {
    { "tu_check", tests },
};

int main(int argc, char **argv)
{
    return tu_suites_main(argc, argv, suites, sizeof suites / sizeof suites[0], NULL, NULL);
}
