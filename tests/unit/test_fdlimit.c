/*
 * tests/unit/test_fdlimit.c — CUnit suite for broker/fdlimit.c's plan: how a
 * soft open-files limit is split between client connections and LevelDB's
 * table-file cache, and in which order the settings give way.
 */
#include "broker/fdlimit.h"
#include "tests/helpers/testutil.h"

#include <CUnit/CUnit.h>
#include <string.h>

static void test_enough(void)
{
    fdlimit_plan_t p;
    char err[256] = "";
    TU_REQUIRE(fdlimit_plan(65536, 10000, 500, &p, err, sizeof err) == 0, "refused: %s", err);
    CU_ASSERT_EQUAL(p.want_soft, 10000 + 500 + FDLIMIT_FIXED_RESERVE);
    CU_ASSERT_EQUAL(p.max_clients, 10000);
    CU_ASSERT_EQUAL(p.max_open_files, 500);
    /* exactly enough */
    TU_REQUIRE(fdlimit_plan(p.want_soft, 10000, 500, &p, err, sizeof err) == 0, "refused: %s", err);
    CU_ASSERT_EQUAL(p.max_clients, 10000);
}

static void test_clients_give_way(void)
{
    fdlimit_plan_t p;
    char err[256] = "";
    TU_REQUIRE(fdlimit_plan(1024, 10000, 500, &p, err, sizeof err) == 0, "refused: %s", err);
    TU_CHECK(p.max_clients == 1024 - 500 - FDLIMIT_FIXED_RESERVE, "max_clients %lld", p.max_clients);
    CU_ASSERT_EQUAL(p.max_open_files, 500);
    CU_ASSERT(p.max_clients + p.max_open_files + FDLIMIT_FIXED_RESERVE <= 1024);
}

static void test_open_files_give_way(void)
{
    fdlimit_plan_t p;
    char err[256] = "";
    /* 256: 500 table files would leave no room at all; the cache shrinks so FDLIMIT_MIN_CLIENTS fit */
    TU_REQUIRE(fdlimit_plan(256, 10000, 500, &p, err, sizeof err) == 0, "refused: %s", err);
    CU_ASSERT_EQUAL(p.max_clients, FDLIMIT_MIN_CLIENTS);
    CU_ASSERT_EQUAL(p.max_open_files, 256 - FDLIMIT_FIXED_RESERVE - FDLIMIT_MIN_CLIENTS);
    /* tighter: the cache stops at its floor and fewer clients fit */
    TU_REQUIRE(fdlimit_plan(FDLIMIT_FIXED_RESERVE + FDLIMIT_MIN_OPEN_FILES + 3, 10000, 500, &p, err, sizeof err) == 0,
               "refused: %s", err);
    CU_ASSERT_EQUAL(p.max_open_files, FDLIMIT_MIN_OPEN_FILES);
    CU_ASSERT_EQUAL(p.max_clients, 3);
    /* a configured max-clients below the floor is kept */
    TU_REQUIRE(fdlimit_plan(200, 4, 500, &p, err, sizeof err) == 0, "refused: %s", err);
    CU_ASSERT_EQUAL(p.max_clients, 4);
    CU_ASSERT_EQUAL(p.max_open_files, 200 - FDLIMIT_FIXED_RESERVE - 4);
}

static void test_too_low(void)
{
    fdlimit_plan_t p;
    char err[256] = "";
    CU_ASSERT_EQUAL(fdlimit_plan(FDLIMIT_FIXED_RESERVE + FDLIMIT_MIN_OPEN_FILES, 10000, 500, &p, err, sizeof err), -1);
    TU_CHECK(strstr(err, "ulimit -n") != NULL && strstr(err, "112") != NULL, "error names the limit: %s", err);
}

static const tu_test_t fdlimit_tests[] = {
    { "enough descriptors", test_enough },
    { "clients give way", test_clients_give_way },
    { "open files give way", test_open_files_give_way },
    { "too low to start", test_too_low },
    { NULL, NULL },
};

static const tu_suite_t suites[] = {
    { "fdlimit", fdlimit_tests },
};

int main(int argc, char **argv)
{
    return tu_suites_main(argc, argv, suites, sizeof suites / sizeof suites[0], NULL, NULL);
}
