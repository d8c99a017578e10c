/*
 * tests/integration/test_mariadb.c — a real, private MariaDB works for tests.
 *
 * Suite "mariadb" starts one private server (tu_mariadb_start) in its init
 * function and stops it in cleanup; its tests connect over the unix socket,
 * create a database and a table, write rows and read them back, and check the
 * claim semantics the order cancel relies on (UPDATE … WHERE status='pending'
 * changes 1 row, then 0). If the server cannot start, the suite init fails
 * with the server's own error on stderr, and the program fails — it never
 * reports a skip to automake, because a missing MariaDB must be visible in CI.
 *
 * Suite "testutil" checks the helpers the other tests stand on: temp dirs
 * and the rmtree guard, free ports, polling with a deadline.
 *
 * Run one suite: ./tests/integration/test_mariadb mariadb
 */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include "tests/helpers/sql_client.h"
#include "tests/helpers/testutil.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <CUnit/CUnit.h>
#include <mysql.h>

static tu_mariadb_t server;

/* ---------------------------------------------------------------- suite "mariadb" */

static int mariadb_suite_init(void)
{
    char err[4096];
    uint64_t t0 = tu_now_mono_ms();
    if (tu_mariadb_start(&server, err, sizeof err) != 0) {
        fprintf(stderr, "\nFAIL: cannot start a private MariaDB: %s\n", err);
        return -1;
    }
    printf("\n%s (install + start: %llu ms)\n", err, (unsigned long long)(tu_now_mono_ms() - t0));
    return 0;
}

static int mariadb_suite_cleanup(void)
{
    uint64_t t0 = tu_now_mono_ms();
    tu_mariadb_stop(&server);
    printf("\nmariadbd stopped and its dir removed in %llu ms\n", (unsigned long long)(tu_now_mono_ms() - t0));
    return 0;
}

static MYSQL *connect_root(const char *db)
{
    return sql_connect_root(&server, db);
}

/* The server we talk to is ours: its datadir is inside our temp dir. */
static void test_server_is_private(void)
{
    MYSQL *m = connect_root(NULL);
    CU_ASSERT_PTR_NOT_NULL_FATAL(m);
    CU_ASSERT_EQUAL_FATAL(sql_query(m, "SELECT @@datadir, @@skip_networking"), 0);
    MYSQL_RES *res = mysql_store_result(m);
    CU_ASSERT_PTR_NOT_NULL_FATAL(res);
    MYSQL_ROW row = mysql_fetch_row(res);
    CU_ASSERT_PTR_NOT_NULL_FATAL(row);
    CU_ASSERT_PTR_NOT_NULL(strstr(row[0], server.dir));
    CU_ASSERT_STRING_EQUAL(row[1], "1");
    mysql_free_result(res);
    mysql_close(m);
}

static void test_create_insert_select(void)
{
    MYSQL *m = connect_root(NULL);
    CU_ASSERT_PTR_NOT_NULL_FATAL(m);
    CU_ASSERT_EQUAL_FATAL(sql_query(m, "CREATE DATABASE hg_test CHARACTER SET utf8mb4"), 0);
    CU_ASSERT_EQUAL_FATAL(mysql_select_db(m, "hg_test"), 0);
    CU_ASSERT_EQUAL_FATAL(sql_query(m, "CREATE TABLE orders ("
                                       "  id BIGINT UNSIGNED PRIMARY KEY,"
                                       "  status ENUM('pending','paid','cancelled') NOT NULL DEFAULT 'pending',"
                                       "  amount_cents INT NOT NULL,"
                                       "  note VARCHAR(64) NULL"
                                       ") ENGINE=InnoDB"),
                          0);
    CU_ASSERT_EQUAL_FATAL(sql_query(m, "INSERT INTO orders (id, amount_cents, note) VALUES"
                                       " (1, 1999, 'first'),"
                                       " (2, 0, NULL),"
                                       " (18446744073709551615, -5, 'caf\xc3\xa9')"),
                          0);
    CU_ASSERT_EQUAL(mysql_affected_rows(m), 3);

    CU_ASSERT_EQUAL_FATAL(sql_query(m, "SELECT id, status, amount_cents, note FROM orders ORDER BY id"), 0);
    MYSQL_RES *res = mysql_store_result(m);
    CU_ASSERT_PTR_NOT_NULL_FATAL(res);
    CU_ASSERT_EQUAL(mysql_num_rows(res), 3);

    static const struct {
        const char *id, *status, *amount, *note; /* note NULL = SQL NULL */
    } want[] = {
        { "1", "pending", "1999", "first" },
        { "2", "pending", "0", NULL },
        { "18446744073709551615", "pending", "-5", "caf\xc3\xa9" },
    };
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        MYSQL_ROW row = mysql_fetch_row(res);
        CU_ASSERT_PTR_NOT_NULL_FATAL(row);
        CU_ASSERT_STRING_EQUAL(row[0], want[i].id);
        CU_ASSERT_STRING_EQUAL(row[1], want[i].status);
        CU_ASSERT_STRING_EQUAL(row[2], want[i].amount);
        if (want[i].note == NULL) { /* CUnit's asserts are blocks: keep the braces */
            CU_ASSERT_PTR_NULL(row[3]);
        } else {
            CU_ASSERT_PTR_NOT_NULL_FATAL(row[3]);
            CU_ASSERT_STRING_EQUAL(row[3], want[i].note);
        }
    }
    CU_ASSERT_PTR_NULL(mysql_fetch_row(res));
    mysql_free_result(res);
    mysql_close(m);
}

/* The claim the order cancel is built on: the first UPDATE … WHERE
 * status='pending' changes one row, the second (the loser) changes none. */
static void test_claim_changes_one_row_once(void)
{
    MYSQL *m = connect_root("hg_test");
    CU_ASSERT_PTR_NOT_NULL_FATAL(m);
    const char *claim = "UPDATE orders SET status='cancelled' WHERE id=1 AND status='pending'";
    CU_ASSERT_EQUAL_FATAL(sql_query(m, "START TRANSACTION"), 0);
    CU_ASSERT_EQUAL_FATAL(sql_query(m, claim), 0);
    CU_ASSERT_EQUAL(mysql_affected_rows(m), 1);
    CU_ASSERT_EQUAL_FATAL(sql_query(m, "COMMIT"), 0);

    CU_ASSERT_EQUAL_FATAL(sql_query(m, claim), 0);
    CU_ASSERT_EQUAL(mysql_affected_rows(m), 0);
    CU_ASSERT_EQUAL_FATAL(sql_query(m, "UPDATE orders SET status='paid' WHERE id=1 AND status='pending'"), 0);
    CU_ASSERT_EQUAL(mysql_affected_rows(m), 0);

    CU_ASSERT_EQUAL_FATAL(sql_query(m, "SELECT status FROM orders WHERE id=1"), 0);
    MYSQL_RES *res = mysql_store_result(m);
    CU_ASSERT_PTR_NOT_NULL_FATAL(res);
    MYSQL_ROW row = mysql_fetch_row(res);
    CU_ASSERT_PTR_NOT_NULL_FATAL(row);
    CU_ASSERT_STRING_EQUAL(row[0], "cancelled");
    mysql_free_result(res);
    mysql_close(m);
}

/* ---------------------------------------------------------------- suite "testutil" */

static void test_mkdtemp_and_rmtree(void)
{
    char dir[512], sub[600], file[700];
    CU_ASSERT_EQUAL_FATAL(tu_mkdtemp("selftest", dir, sizeof dir), 0);
    CU_ASSERT_PTR_NOT_NULL(strstr(dir, "/hg-selftest-"));
    snprintf(sub, sizeof sub, "%s/a", dir);
    CU_ASSERT_EQUAL_FATAL(mkdir(sub, 0700), 0);
    snprintf(file, sizeof file, "%s/a/f", dir);
    FILE *f = fopen(file, "w");
    CU_ASSERT_PTR_NOT_NULL_FATAL(f);
    fclose(f);
    snprintf(file, sizeof file, "%s/link-to-root", dir);
    CU_ASSERT_EQUAL(symlink("/", file), 0); /* must be unlinked, never followed */

    CU_ASSERT_EQUAL(tu_rmtree(dir), 0);
    CU_ASSERT_NOT_EQUAL(access(dir, F_OK), 0);
    CU_ASSERT_EQUAL(tu_rmtree(dir), 0); /* already gone: fine, like rm -rf */

    CU_ASSERT_EQUAL(tu_mkdtemp("bad/tag", dir, sizeof dir), -1);
    CU_ASSERT_EQUAL(tu_mkdtemp("x", dir, 8), -1); /* does not fit */
}

static void test_rmtree_refuses_outside_paths(void)
{
    const char *tmp = getenv("TMPDIR");
    CU_ASSERT_EQUAL(tu_rmtree("/"), -1);
    CU_ASSERT_EQUAL(tu_rmtree("/etc"), -1);
    CU_ASSERT_EQUAL(tu_rmtree(tmp != NULL && tmp[0] != '\0' ? tmp : "/tmp"), -1);
    CU_ASSERT_EQUAL(access("/etc/passwd", F_OK), 0);

    char dir[512], escape[700];
    CU_ASSERT_EQUAL_FATAL(tu_mkdtemp("selftest", dir, sizeof dir), 0);
    snprintf(escape, sizeof escape, "%s/../..", dir);
    CU_ASSERT_EQUAL(tu_rmtree(escape), -1);
    CU_ASSERT_EQUAL(tu_rmtree(dir), 0);
}

static void test_free_port(void)
{
    int port = tu_free_port();
    CU_ASSERT(port > 0 && port < 65536);
}

static int countdown(void *ctx)
{
    int *n = ctx;
    return --*n <= 0;
}

static int never(void *ctx)
{
    (void)ctx;
    return 0;
}

static void test_poll_until(void)
{
    int n = 3;
    CU_ASSERT_EQUAL(tu_poll_until(countdown, &n, 5000, 1), 0);
    CU_ASSERT_EQUAL(n, 0);

    uint64_t t0 = tu_now_mono_ms();
    CU_ASSERT_EQUAL(tu_poll_until(never, NULL, 50, 10), -1);
    CU_ASSERT(tu_now_mono_ms() - t0 >= 50);

    CU_ASSERT(tu_now_wall_ms() > 1600000000000ull); /* after 2020 */
}

/* ---------------------------------------------------------------- registry */

static int add_suites(void)
{
    CU_pSuite s = CU_add_suite("testutil", NULL, NULL);
    if (s == NULL || CU_add_test(s, "mkdtemp and rmtree", test_mkdtemp_and_rmtree) == NULL ||
        CU_add_test(s, "rmtree refuses paths outside the temp root", test_rmtree_refuses_outside_paths) == NULL ||
        CU_add_test(s, "free port", test_free_port) == NULL ||
        CU_add_test(s, "poll until a deadline", test_poll_until) == NULL)
        return -1;

    s = CU_add_suite("mariadb", mariadb_suite_init, mariadb_suite_cleanup);
    if (s == NULL || CU_add_test(s, "the server is private", test_server_is_private) == NULL ||
        CU_add_test(s, "create, insert, select back", test_create_insert_select) == NULL ||
        CU_add_test(s, "claim changes one row, once", test_claim_changes_one_row_once) == NULL)
        return -1;
    return 0;
}

int main(int argc, char **argv)
{
    return tu_cunit_main(argc, argv, add_suites);
}
