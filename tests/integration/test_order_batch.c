/*
 * tests/integration/test_order_batch.c — batched cancels and the stuck
 * holder (docs/order-cancel.md), against a private MariaDB, the real hourglass-broker,
 * the real ./hourglass-consumer and ./hourglass-compensator --once.
 *
 *   library    hg_order_cancel_batch on the reference schema (set-based):
 *              one order locked by another transaction → the others
 *              cancelled at once (well under the lock wait), that one
 *              HG_ORDER_LOCKED, cancelled by the next batch once released;
 *              a paid, an unknown, a zero and a duplicate id → each its own
 *              outcome; a row whose stock return breaks the CHECK constraint
 *              → only that order PERMANENT, its neighbours cancelled (the
 *              batch halved down to it); configured SQL (per order) with a
 *              lock held → the others cancelled, the locked one TRANSIENT
 *              after the lock wait; stock exact after each; a text sku_id
 *              (long, quoted, SQL-looking) in one set-based transaction; a
 *              CALL side effect whose procedure SELECTs, alone and batched;
 *              a revoked GRANT (1142) and a read-only server (1290):
 *              transient, the read-only connection replaced, healed after.
 *   consumer   hourglass-consumer --batch-size 100: one PULL holding a paid
 *              order, an unknown order, a malformed payload and orders to
 *              cancel → CANCELLED / NOT_PENDING / NOT_FOUND ACKed, the
 *              payload NACKed to the DLQ with its reason; one order locked
 *              by another transaction → the rest cancelled at once, the
 *              locked one after the lock is released (local retries).
 *   frozen     a consumer SIGSTOPped between its claim and its COMMIT (a
 *              configured side effect DO SLEEP(2) for one order widens the
 *              window): hourglass-compensator --once --layers inspection
 *              cancels every other overdue order within seconds (the frozen
 *              row skipped, never waited for), the frozen transaction is
 *              gone after mysql-idle-transaction-timeout, the next round
 *              cancels the last order, stock exact.
 */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include "include/hourglass/hourglass.h"
#include "tests/helpers/order_env.h"

#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <CUnit/CUnit.h>

#define COMPENSATOR_BIN HG_BUILDDIR "/hourglass-compensator"

static oe_env_t env;

static int batch_init(void)
{
    return oe_suite_start(&env, CU_get_number_of_failures);
}

static int batch_cleanup(void)
{
    oe_stop(&env);
    return 0;
}

static void sleep_ms(unsigned ms)
{
    struct timespec ts = { ms / 1000, (long)(ms % 1000) * 1000000L };
    nanosleep(&ts, NULL);
}

/* A handle on database name with the given lock wait and SQL (NULL: the reference). */
static hg_order_db *open_db(const char *name, unsigned lock_wait_s, const hg_order_sql_t *sql)
{
    hg_order_db_params_t p = {
        .socket = env.server.socket, .user = "root", .database = name, .lock_wait_timeout_s = lock_wait_s, .sql = sql
    };
    hg_order_error_t err;
    hg_order_db *db = hg_order_db_open(&p, &err);
    if (db == NULL)
        fprintf(stderr, "\n  open %s: %s\n", name, err.message);
    return db;
}

/* The invariant of database name, every defect counted (grace: 1 h). */
static void check_invariant(const char *name, of_report_t *r)
{
    hg_order_error_t err;
    CU_ASSERT_EQUAL_FATAL(oe_check(&env, name, 3600, r, &err), 0);
    if (!r->ok)
        fprintf(stderr, "\n  %s: first defect: %s\n", name, r->first_defect);
    CU_ASSERT_TRUE(r->ok);
    CU_ASSERT_EQUAL(r->skus_unbalanced, 0);
    CU_ASSERT_EQUAL(r->skus_reserved_wrong, 0);
    CU_ASSERT_EQUAL(r->paid_and_cancelled, 0);
}

/* A second connection that holds order id's row locked (FOR UPDATE) until
 * release_lock. */
static MYSQL *hold_lock(const char *name, uint64_t id)
{
    MYSQL *m = oe_connect(&env, name);
    CU_ASSERT_PTR_NOT_NULL_FATAL(m);
    char sql[128];
    snprintf(sql, sizeof sql, "SELECT id FROM orders WHERE id = %" PRIu64 " FOR UPDATE", id);
    CU_ASSERT_EQUAL_FATAL(mysql_query(m, "START TRANSACTION"), 0);
    CU_ASSERT_EQUAL_FATAL(mysql_query(m, sql), 0);
    MYSQL_RES *res = mysql_store_result(m);
    CU_ASSERT_PTR_NOT_NULL_FATAL(res);
    CU_ASSERT_EQUAL(mysql_num_rows(res), 1);
    mysql_free_result(res);
    return m;
}

static void release_lock(MYSQL *m)
{
    CU_ASSERT_EQUAL(mysql_query(m, "ROLLBACK"), 0);
    mysql_close(m);
}

static void fill(hg_order_batch_item_t *items, size_t n, uint64_t first)
{
    memset(items, 0, n * sizeof *items);
    for (size_t i = 0; i < n; i++)
        items[i].order_id = first + i;
}

/* ---------------------------------------------------------------- library */

static void test_lib_locked_row(void)
{
    hg_order_db *seed = oe_fresh_database(&env, "blocked", 40, NULL);
    CU_ASSERT_PTR_NOT_NULL_FATAL(seed);
    hg_order_db_close(seed);
    hg_order_db *db = open_db("blocked", 10, NULL);
    CU_ASSERT_PTR_NOT_NULL_FATAL(db);

    MYSQL *holder = hold_lock("blocked", 7);
    hg_order_batch_item_t items[40];
    fill(items, 40, 1);
    hg_order_batch_stats_t st = { 0 };
    uint64_t t0 = tu_now_mono_ms();
    int left = hg_order_cancel_batch(db, items, 40, "manual", &st);
    uint64_t ms = tu_now_mono_ms() - t0;
    CU_ASSERT_EQUAL(left, 1);
    TU_CHECK(ms < 5000, "the batch waited %" PRIu64 " ms for a locked row (lock wait 10 s): it must skip it", ms);
    for (size_t i = 0; i < 40; i++)
        TU_CHECK(items[i].outcome == (i == 6 ? HG_ORDER_LOCKED : HG_ORDER_CANCELLED), "order %zu: %s", i + 1,
                 hg_order_outcome_name(items[i].outcome));
    CU_ASSERT_EQUAL(st.locked, 1);
    CU_ASSERT_EQUAL(st.committed, 1);
    CU_ASSERT_EQUAL(oe_scalar(&env, "SELECT COUNT(*) FROM blocked.orders WHERE status='cancelled'"), 39);
    CU_ASSERT_EQUAL(oe_scalar(&env, "SELECT status='pending' FROM blocked.orders WHERE id=7"), 1);

    /* Released: the next batch cancels it; a repeat finds everything not pending. */
    release_lock(holder);
    fill(items, 1, 7);
    CU_ASSERT_EQUAL(hg_order_cancel_batch(db, items, 1, "manual", NULL), 0);
    CU_ASSERT_EQUAL(items[0].outcome, HG_ORDER_CANCELLED);
    fill(items, 40, 1);
    CU_ASSERT_EQUAL(hg_order_cancel_batch(db, items, 40, "manual", NULL), 0);
    for (size_t i = 0; i < 40; i++)
        CU_ASSERT_EQUAL(items[i].outcome, HG_ORDER_NOT_PENDING);
    CU_ASSERT_EQUAL(oe_scalar(&env, "SELECT COUNT(*) FROM blocked.order_timeout_msg WHERE status<>'done'"), 0);
    CU_ASSERT_EQUAL(oe_scalar(&env, "SELECT COUNT(*) FROM blocked.orders WHERE cancel_reason='manual'"), 40);
    of_report_t r;
    check_invariant("blocked", &r);
    CU_ASSERT_EQUAL(r.cancelled, 40);
    CU_ASSERT_EQUAL(r.reserved, 0);
    CU_ASSERT_EQUAL(r.received, r.available);
    hg_order_db_close(db);
}

static void test_lib_outcomes(void)
{
    hg_order_db *db = oe_fresh_database(&env, "outcomes", 10, NULL);
    CU_ASSERT_PTR_NOT_NULL_FATAL(db);
    hg_order_outcome_t out;
    CU_ASSERT_EQUAL(hg_order_pay(db, 3, &out, NULL), 0);
    CU_ASSERT_EQUAL(out, HG_ORDER_PAID);

    /* In the caller's order: 5, paid 3, unknown, 0, 5 again, 1, 1 again. */
    uint64_t ids[] = { 5, 3, 999999, 0, 5, 1, 1 };
    hg_order_outcome_t want[] = { HG_ORDER_CANCELLED,   HG_ORDER_NOT_PENDING, HG_ORDER_NOT_FOUND,  HG_ORDER_PERMANENT,
                                  HG_ORDER_NOT_PENDING, HG_ORDER_CANCELLED,   HG_ORDER_NOT_PENDING };
    hg_order_batch_item_t items[7];
    memset(items, 0, sizeof items);
    for (size_t i = 0; i < 7; i++)
        items[i].order_id = ids[i];
    CU_ASSERT_EQUAL(hg_order_cancel_batch(db, items, 7, "manual", NULL), 1);
    for (size_t i = 0; i < 7; i++)
        TU_CHECK(items[i].outcome == want[i], "item %zu (order %" PRIu64 "): %s, want %s", i, ids[i],
                 hg_order_outcome_name(items[i].outcome), hg_order_outcome_name(want[i]));
    CU_ASSERT_PTR_NOT_NULL(strstr(items[3].error.message, "order id 0"));
    CU_ASSERT_EQUAL(hg_order_cancel_batch(db, items, 0, NULL, NULL), -1);
    CU_ASSERT_EQUAL(hg_order_cancel_batch(NULL, items, 1, NULL, NULL), -1);
    of_report_t r;
    check_invariant("outcomes", &r);
    CU_ASSERT_EQUAL(r.cancelled, 2);
    CU_ASSERT_EQUAL(r.paid, 1);
    hg_order_db_close(db);
}

static void test_lib_constraint_isolated(void)
{
    hg_order_db *db = oe_fresh_database(&env, "isolate", 64, NULL);
    CU_ASSERT_PTR_NOT_NULL_FATAL(db);
    /* Order 1000: 5 units of SKU 900, whose stock says none are reserved: its
     * stock return breaks stock_not_negative (reserved >= 0). */
    MYSQL *m = oe_connect(&env, "isolate");
    CU_ASSERT_PTR_NOT_NULL_FATAL(m);
    CU_ASSERT_EQUAL(mysql_query(m, "INSERT INTO orders (id, user_id, created_at, expire_at)"
                                   " VALUES (1000, 1, NOW(6), NOW(6))"),
                    0);
    CU_ASSERT_EQUAL(mysql_query(m, "INSERT INTO order_items VALUES (1000, 900, 5)"), 0);
    CU_ASSERT_EQUAL(mysql_query(m, "INSERT INTO stock (sku_id, received, available) VALUES (900, 10, 10)"), 0);
    CU_ASSERT_EQUAL(mysql_query(m, "COMMIT"), 0);
    mysql_close(m);

    hg_order_batch_item_t items[65];
    fill(items, 64, 1);
    items[64].order_id = 1000;
    memset(&items[64].error, 0, sizeof items[64].error);
    hg_order_batch_stats_t st = { 0 };
    CU_ASSERT_EQUAL(hg_order_cancel_batch(db, items, 65, "manual", &st), 1);
    for (size_t i = 0; i < 64; i++)
        TU_CHECK(items[i].outcome == HG_ORDER_CANCELLED, "order %zu: %s (%s)", i + 1,
                 hg_order_outcome_name(items[i].outcome), items[i].error.message);
    CU_ASSERT_EQUAL(items[64].outcome, HG_ORDER_PERMANENT);
    TU_CHECK(items[64].error.code == 4025, "the failing order's error: %u %s", items[64].error.code,
             items[64].error.message);
    TU_CHECK(st.splits >= 7, "a batch of 65 halved down to the one order: %" PRIu64 " splits", st.splits);
    CU_ASSERT_EQUAL(oe_scalar(&env, "SELECT status='pending' FROM isolate.orders WHERE id=1000"), 1);
    CU_ASSERT_EQUAL(oe_scalar(&env, "SELECT COUNT(*) FROM isolate.orders WHERE status='cancelled'"), 64);
    CU_ASSERT_EQUAL(oe_scalar(&env, "SELECT reserved FROM isolate.stock WHERE sku_id=900"), 0);
    CU_ASSERT_EQUAL(oe_scalar(&env, "SELECT SUM(reserved) FROM isolate.stock WHERE sku_id<>900"), 0);
    CU_ASSERT_EQUAL(oe_scalar(&env, "SELECT SUM(received) - SUM(available) FROM isolate.stock WHERE sku_id<>900"), 0);
    hg_order_db_close(db);
}

static void test_lib_configured_sql(void)
{
    hg_order_db *seed = oe_fresh_database(&env, "custom", 30, NULL);
    CU_ASSERT_PTR_NOT_NULL_FATAL(seed);
    hg_order_db_close(seed);
    /* The reference statements in another spelling: the per-order form. */
    hg_order_sql_t sql;
    hg_order_sql_default(&sql);
    sql.claim = "UPDATE orders SET status = 'cancelled', cancelled_at = NOW(6), cancel_reason = :reason"
                " WHERE id = ? AND status = 'pending'";
    hg_order_db *db = open_db("custom", 1, &sql);
    CU_ASSERT_PTR_NOT_NULL_FATAL(db);

    MYSQL *holder = hold_lock("custom", 12);
    hg_order_batch_item_t items[30];
    fill(items, 30, 1);
    hg_order_batch_stats_t st = { 0 };
    CU_ASSERT_EQUAL(hg_order_cancel_batch(db, items, 30, "custom", &st), 1);
    release_lock(holder);
    for (size_t i = 0; i < 30; i++)
        TU_CHECK(items[i].outcome == (i == 11 ? HG_ORDER_TRANSIENT : HG_ORDER_CANCELLED), "order %zu: %s", i + 1,
                 hg_order_outcome_name(items[i].outcome));
    TU_CHECK(items[11].error.code == 1205, "the locked order's error: %u %s", items[11].error.code,
             items[11].error.message);
    CU_ASSERT_TRUE(st.splits > 0);
    fill(items, 30, 1);
    CU_ASSERT_EQUAL(hg_order_cancel_batch(db, items, 30, "custom", NULL), 0);
    CU_ASSERT_EQUAL(items[11].outcome, HG_ORDER_CANCELLED);
    CU_ASSERT_EQUAL(items[0].outcome, HG_ORDER_NOT_PENDING);
    of_report_t r;
    check_invariant("custom", &r);
    CU_ASSERT_EQUAL(r.cancelled, 30);
    CU_ASSERT_EQUAL(r.reserved, 0);
    hg_order_db_close(db);
}

/* The reference statements on a schema whose sku_id is text (VARCHAR): the
 * set-based form writes the SKUs into its stock UPDATE quoted and escaped.
 * A 90-byte SKU overflowed the buffer sized for numbers, and a short one
 * ('SKU-A') was read as SQL, failing every order of the batch. */
static void test_lib_text_skus(void)
{
    hg_order_db *seed = oe_fresh_database(&env, "textsku", 12, NULL);
    CU_ASSERT_PTR_NOT_NULL_FATAL(seed);
    hg_order_db_close(seed);
    MYSQL *m = oe_connect(&env, "textsku");
    CU_ASSERT_PTR_NOT_NULL_FATAL(m);
    static const char *const setup[] = {
        "ALTER TABLE order_items MODIFY sku_id VARCHAR(100) NOT NULL",
        "ALTER TABLE stock MODIFY sku_id VARCHAR(100) NOT NULL",
        "INSERT INTO stock (sku_id, received, available, reserved) VALUES"
        " (REPEAT('A', 90), 100, 97, 3), ('SKU-A', 100, 98, 2), ('O''Brien\\\\x', 100, 99, 1),"
        " ('x); DROP TABLE orders; --', 100, 99, 1)",
        "INSERT INTO orders (id, user_id, created_at, expire_at) VALUES"
        " (101, 1, NOW(6), NOW(6)), (102, 1, NOW(6), NOW(6)), (103, 1, NOW(6), NOW(6))",
        "INSERT INTO order_timeout_msg (order_id, expire_at, status, next_attempt_at) VALUES"
        " (101, NOW(6), 'sent', NOW(6)), (102, NOW(6), 'sent', NOW(6)), (103, NOW(6), 'sent', NOW(6))",
        "INSERT INTO order_items VALUES (101, REPEAT('A', 90), 3), (101, 'SKU-A', 1), (102, 'SKU-A', 1),"
        " (102, 'O''Brien\\\\x', 1), (103, 'x); DROP TABLE orders; --', 1)",
        "COMMIT",
    };
    for (size_t i = 0; i < sizeof setup / sizeof setup[0]; i++)
        TU_CHECK(mysql_query(m, setup[i]) == 0, "%s: %s", setup[i], mysql_error(m));
    mysql_close(m);

    hg_order_db *db = open_db("textsku", 5, NULL);
    CU_ASSERT_PTR_NOT_NULL_FATAL(db);
    hg_order_batch_item_t items[15];
    fill(items, 12, 1);
    fill(items + 12, 3, 101);
    hg_order_batch_stats_t st = { 0 };
    CU_ASSERT_EQUAL(hg_order_cancel_batch(db, items, 15, "manual", &st), 0);
    for (size_t i = 0; i < 15; i++)
        TU_CHECK(items[i].outcome == HG_ORDER_CANCELLED, "order %" PRIu64 ": %s (%s)", items[i].order_id,
                 hg_order_outcome_name(items[i].outcome), items[i].error.message);
    TU_CHECK(st.splits == 0 && st.transactions == 1, "one transaction, no split: %" PRIu64 " tx, %" PRIu64 " splits",
             st.transactions, st.splits);
    CU_ASSERT_EQUAL(oe_scalar(&env, "SELECT COUNT(*) FROM textsku.orders WHERE status='cancelled'"), 15);
    CU_ASSERT_EQUAL(oe_scalar(&env, "SELECT SUM(reserved) FROM textsku.stock"), 0);
    CU_ASSERT_EQUAL(oe_scalar(&env, "SELECT SUM(received) - SUM(available) FROM textsku.stock"), 0);
    hg_order_db_close(db);
}

/* A side effect that CALLs a procedure returning a result set: every result
 * is read, so the COMMIT is not out of sync (it was 2014, retried as
 * transient for ever), alone and in a batch. */
static void test_lib_call_with_results(void)
{
    hg_order_db *seed = oe_fresh_database(&env, "callsql", 6, NULL);
    CU_ASSERT_PTR_NOT_NULL_FATAL(seed);
    hg_order_db_close(seed);
    MYSQL *m = oe_connect(&env, "callsql");
    CU_ASSERT_PTR_NOT_NULL_FATAL(m);
    static const char *const setup[] = {
        "CREATE TABLE audit (order_id BIGINT UNSIGNED PRIMARY KEY)",
        "CREATE PROCEDURE p_audit(IN o BIGINT UNSIGNED) BEGIN INSERT INTO audit VALUES (o);"
        " SELECT COUNT(*) FROM audit; SELECT o; END",
    };
    for (size_t i = 0; i < sizeof setup / sizeof setup[0]; i++)
        TU_CHECK(mysql_query(m, setup[i]) == 0, "%s: %s", setup[i], mysql_error(m));
    mysql_close(m);
    hg_order_sql_t sql;
    hg_order_sql_default(&sql);
    size_t n = sql.side_effect_count;
    CU_ASSERT_FATAL(n < HG_ORDER_SQL_MAX_SIDE_EFFECTS);
    sql.side_effects[n] = "CALL p_audit(?)";
    sql.side_effect_count = n + 1;
    hg_order_db *db = open_db("callsql", 5, &sql);
    CU_ASSERT_PTR_NOT_NULL_FATAL(db);
    hg_order_outcome_t out;
    hg_order_error_t err;
    TU_CHECK(hg_order_cancel(db, 1, "call", &out, &err) == 0 && out == HG_ORDER_CANCELLED, "alone: %s (%s)",
             hg_order_outcome_name(out), err.message);
    hg_order_batch_item_t items[5];
    fill(items, 5, 2);
    hg_order_batch_stats_t st = { 0 };
    CU_ASSERT_EQUAL(hg_order_cancel_batch(db, items, 5, "call", &st), 0);
    for (size_t i = 0; i < 5; i++)
        TU_CHECK(items[i].outcome == HG_ORDER_CANCELLED, "order %" PRIu64 ": %s (%s)", items[i].order_id,
                 hg_order_outcome_name(items[i].outcome), items[i].error.message);
    CU_ASSERT_EQUAL(st.transactions, 1);
    CU_ASSERT_EQUAL(oe_scalar(&env, "SELECT COUNT(*) FROM callsql.audit"), 6);
    of_report_t r;
    check_invariant("callsql", &r);
    CU_ASSERT_EQUAL(r.cancelled, 6);
    hg_order_db_close(db);
}

/* A user without the GRANT to return stock (revoked at run time), then a
 * server gone read-only (a primary demoted by a fail-over): both transient
 * with the library's own words (never the DLQ at once), told apart from one
 * order's bad luck; the read-only server's connection is closed, so the
 * next call reconnects; and both heal once the server does. */
static void test_lib_setup_and_read_only(void)
{
    hg_order_db *seed = oe_fresh_database(&env, "grants", 4, NULL);
    CU_ASSERT_PTR_NOT_NULL_FATAL(seed);
    hg_order_db_close(seed);
    MYSQL *m = oe_connect(&env, "grants");
    CU_ASSERT_PTR_NOT_NULL_FATAL(m);
    static const char *const setup[] = {
        "CREATE USER IF NOT EXISTS 'hg_ro_test'@'localhost' IDENTIFIED BY 'pw'",
        "GRANT SELECT, UPDATE ON grants.orders TO 'hg_ro_test'@'localhost'",
        "GRANT SELECT ON grants.order_items TO 'hg_ro_test'@'localhost'",
        "GRANT SELECT, UPDATE ON grants.order_timeout_msg TO 'hg_ro_test'@'localhost'",
    };
    for (size_t i = 0; i < sizeof setup / sizeof setup[0]; i++)
        TU_CHECK(mysql_query(m, setup[i]) == 0, "%s: %s", setup[i], mysql_error(m));
    hg_order_db_params_t p = { .socket = env.server.socket,
                               .user = "hg_ro_test",
                               .password = "pw",
                               .database = "grants",
                               .lock_wait_timeout_s = 5 };
    hg_order_error_t err;
    hg_order_db *db = hg_order_db_open(&p, &err);
    /* no UPDATE on stock: refused at the first cancel (the statement is
     * prepared then), not at open */
    if (db == NULL) {
        CU_FAIL("open as hg_ro_test");
        fprintf(stderr, "\n  open: %s\n", err.message);
        mysql_close(m);
        return;
    }
    hg_order_outcome_t out;
    hg_order_cancel(db, 1, "manual", &out, &err);
    TU_CHECK(out == HG_ORDER_TRANSIENT && err.code == 1142, "no GRANT on stock: %s %u %s", hg_order_outcome_name(out),
             err.code, err.message);
    CU_ASSERT_PTR_NOT_NULL(hg_order_setup_hint(err.code));
    CU_ASSERT_TRUE(hg_order_error_is_database(err.code));
    hg_order_batch_item_t items[2];
    fill(items, 2, 1);
    hg_order_cancel_batch(db, items, 2, "manual", NULL);
    for (size_t i = 0; i < 2; i++)
        TU_CHECK(items[i].outcome == HG_ORDER_TRANSIENT && items[i].error.code == 1142, "batch, order %zu: %s %u",
                 i + 1, hg_order_outcome_name(items[i].outcome), items[i].error.code);
    CU_ASSERT_EQUAL(oe_scalar(&env, "SELECT COUNT(*) FROM grants.orders WHERE status='pending'"), 4);

    TU_CHECK(mysql_query(m, "GRANT SELECT, UPDATE ON grants.stock TO 'hg_ro_test'@'localhost'") == 0, "GRANT: %s",
             mysql_error(m));
    TU_CHECK(mysql_query(m, "SET GLOBAL read_only = 1") == 0, "read_only: %s", mysql_error(m));
    uint64_t before = hg_order_db_connects(db);
    hg_order_cancel(db, 1, "manual", &out, &err);
    TU_CHECK(out == HG_ORDER_TRANSIENT && err.code == 1290, "read-only: %s %u %s", hg_order_outcome_name(out), err.code,
             err.message);
    CU_ASSERT_TRUE(hg_order_error_is_database(err.code));
    CU_ASSERT_FALSE(hg_order_error_is_database(1213)); /* a deadlock is one order's bad luck */
    hg_order_cancel(db, 1, "manual", &out, &err);
    TU_CHECK(hg_order_db_connects(db) >= before + 1,
             "still on the read-only connection: %" PRIu64 " connects, %" PRIu64 " before", hg_order_db_connects(db),
             before);
    TU_CHECK(mysql_query(m, "SET GLOBAL read_only = 0") == 0, "read_only off: %s", mysql_error(m));
    TU_CHECK(hg_order_cancel(db, 1, "manual", &out, &err) == 0 && out == HG_ORDER_CANCELLED, "healed: %s %s",
             hg_order_outcome_name(out), err.message);
    fill(items, 2, 2);
    CU_ASSERT_EQUAL(hg_order_cancel_batch(db, items, 2, "manual", NULL), 0);
    hg_order_db_close(db);
    mysql_query(m, "DROP USER 'hg_ro_test'@'localhost'");
    mysql_close(m);
    of_report_t r;
    check_invariant("grants", &r);
    CU_ASSERT_EQUAL(r.cancelled, 3);
}

/* ---------------------------------------------------------------- consumer */

static pid_t start_consumer(const char *db, const char *group, int mport, const char *dir, const char *const *extra)
{
    char log_path[600];
    snprintf(log_path, sizeof log_path, "%s/consumer.log", dir);
    pid_t pid = oe_start_consumer(&env, db, group, 1, mport, log_path, extra);
    CU_ASSERT_TRUE_FATAL(pid > 0);
    return pid;
}

static void print_consumer_log(const char *dir)
{
    char log_path[600];
    snprintf(log_path, sizeof log_path, "%s/consumer.log", dir);
    if (CU_get_number_of_failures() > 0)
        oe_print_file(log_path);
}

/* 1 when a bulk string anywhere in r contains text. */
static int reply_has(const resp_reply_t *r, const char *text)
{
    if (r->type == RESP_REPLY_ARRAY) {
        for (size_t i = 0; i < r->count; i++)
            if (reply_has(&r->elements[i], text))
                return 1;
        return 0;
    }
    return r->type == RESP_REPLY_BULK && r->str != NULL && strstr(r->str, text) != NULL;
}

static void test_consumer_outcomes(void)
{
    hg_order_db *db = oe_fresh_database(&env, "mixed", 20, NULL);
    CU_ASSERT_PTR_NOT_NULL_FATAL(db);
    hg_order_outcome_t out;
    CU_ASSERT_EQUAL(hg_order_pay(db, 4, &out, NULL), 0);

    /* Everything sent before the consumer starts: its first PULL takes all. */
    rc_conn_t c;
    char err[512], id[64];
    CU_ASSERT_EQUAL_FATAL(bp_connect(&env.broker, &c, err, sizeof err), 0);
    CU_ASSERT_EQUAL_FATAL(bp_ok_cmd(&c, err, sizeof err, "GROUP", "CREATE", "mixed", OE_TOPIC, "FROM", "NOW", NULL), 0);
    const char *payloads[] = { "1", "2", "4", "777777", "12x", "3", "1" };
    for (size_t i = 0; i < 7; i++)
        CU_ASSERT_EQUAL(bp_send(&c, id, sizeof id, err, sizeof err, OE_TOPIC, payloads[i], NULL), 0);

    char dir[512];
    CU_ASSERT_EQUAL_FATAL(tu_mkdtemp("batch-mixed", dir, sizeof dir), 0);
    int mport = tu_free_port();
    const char *extra[] = { "--batch-size", "100", NULL };
    pid_t pid = start_consumer("mixed", "mixed", mport, dir, extra);

    long long dlq = -1;
    uint64_t end = tu_now_mono_ms() + 30000;
    while (tu_now_mono_ms() < end) {
        if (bp_int_cmd(&c, &dlq, err, sizeof err, "DLQ", "LEN", "mixed", NULL) == 0 && dlq == 1 &&
            oe_metric(mport, "hourglass_consumer_acked_total") == 6)
            break;
        sleep_ms(20);
    }
    CU_ASSERT_EQUAL(dlq, 1);
    CU_ASSERT_EQUAL(oe_metric(mport, "hourglass_consumer_acked_total"), 6);
    CU_ASSERT_EQUAL(oe_metric(mport, "hourglass_consumer_cancelled_total"), 3);   /* 1, 2, 3 */
    CU_ASSERT_EQUAL(oe_metric(mport, "hourglass_consumer_not_pending_total"), 2); /* paid 4, the second 1 */
    CU_ASSERT_EQUAL(oe_metric(mport, "hourglass_consumer_not_found_total"), 1);   /* 777777 */
    CU_ASSERT_EQUAL(oe_metric(mport, "hourglass_consumer_bad_payload_total"), 1); /* 12x */
    CU_ASSERT_EQUAL(oe_metric(mport, "hourglass_consumer_failed_total"), 1);
    TU_CHECK(oe_metric(mport, "hourglass_consumer_batch_transactions_total") == 1, "one PULL, one transaction: %lld",
             oe_metric(mport, "hourglass_consumer_batch_transactions_total"));

    /* The DLQ holds the malformed payload with its reason. */
    resp_reply_t *list = rc_cmd(&c, "DLQ", "LIST", "mixed", NULL);
    CU_ASSERT_PTR_NOT_NULL(list);
    if (list != NULL) {
        CU_ASSERT_TRUE(reply_has(list, "12x"));
        CU_ASSERT_TRUE(reply_has(list, "payload is not an order id"));
        resp_reply_free(list);
    }
    CU_ASSERT_EQUAL(oe_stop_consumer(pid), 0);
    rc_close(&c);

    of_report_t r;
    check_invariant("mixed", &r);
    CU_ASSERT_EQUAL(r.cancelled, 3);
    CU_ASSERT_EQUAL(r.paid, 1);
    print_consumer_log(dir);
    tu_rmtree(dir);
    hg_order_db_close(db);
}

static void test_consumer_locked(void)
{
    hg_order_db *db = oe_fresh_database(&env, "clock", 50, NULL);
    CU_ASSERT_PTR_NOT_NULL_FATAL(db);
    rc_conn_t c;
    char err[512];
    CU_ASSERT_EQUAL_FATAL(bp_connect(&env.broker, &c, err, sizeof err), 0);
    CU_ASSERT_EQUAL_FATAL(bp_ok_cmd(&c, err, sizeof err, "GROUP", "CREATE", "clock", OE_TOPIC, "FROM", "NOW", NULL), 0);
    MYSQL *holder = hold_lock("clock", 25);
    CU_ASSERT_EQUAL_FATAL(oe_send_ids(&c, 1, 50, err, sizeof err), 0);

    char dir[512];
    CU_ASSERT_EQUAL_FATAL(tu_mkdtemp("batch-locked", dir, sizeof dir), 0);
    int mport = tu_free_port();
    /* Long local retries, so that the locked order waits in the worker (not
     * 10 s in the broker's schedule); a lock wait far above the deadline. */
    const char *extra[] = { "--batch-size",
                            "100",
                            "--retry-attempts",
                            "100",
                            "--retry-base",
                            "50ms",
                            "--retry-cap",
                            "200ms",
                            "--mysql-lock-wait-timeout",
                            "30s",
                            NULL };
    pid_t pid = start_consumer("clock", "clock", mport, dir, extra);

    uint64_t t0 = tu_now_mono_ms();
    long long cancelled = oe_wait_scalar(&env, 49, 20000, "SELECT COUNT(*) FROM clock.orders WHERE status='cancelled'");
    uint64_t ms = tu_now_mono_ms() - t0;
    CU_ASSERT_EQUAL(cancelled, 49);
    printf("\n  49 of 50 cancelled %" PRIu64 " ms after the consumer started, order 25 locked", ms);
    CU_ASSERT_EQUAL(oe_scalar(&env, "SELECT status='pending' FROM clock.orders WHERE id=25"), 1);
    long long skipped = -1; /* counted just after the COMMIT that the poll above saw */
    for (int i = 0; i < 250 && (skipped = oe_metric(mport, "hourglass_consumer_locked_skipped_total")) < 1; i++)
        sleep_ms(20);
    TU_CHECK(skipped >= 1, "hourglass_consumer_locked_skipped_total %lld, retries %lld", skipped,
             oe_metric(mport, "hourglass_consumer_retries_total"));

    release_lock(holder);
    CU_ASSERT_EQUAL(oe_wait_scalar(&env, 1, 20000, "SELECT status='cancelled' FROM clock.orders WHERE id=25"), 1);
    for (int i = 0; i < 200 && oe_metric(mport, "hourglass_consumer_acked_total") != 50; i++)
        sleep_ms(20);
    CU_ASSERT_EQUAL(oe_metric(mport, "hourglass_consumer_acked_total"), 50);
    CU_ASSERT_EQUAL(oe_metric(mport, "hourglass_consumer_cancelled_total"), 50);
    CU_ASSERT_EQUAL(oe_stop_consumer(pid), 0);
    rc_close(&c);
    of_report_t r;
    check_invariant("clock", &r);
    CU_ASSERT_EQUAL(r.cancelled, 50);
    CU_ASSERT_EQUAL(r.reserved, 0);
    print_consumer_log(dir);
    tu_rmtree(dir);
    hg_order_db_close(db);
}

/* ---------------------------------------------------------------- frozen consumer */

/* The consumer's connection is inside its DO SLEEP: the claim is done.
 * *arg gets that connection's id. */
static int in_sleep(void *arg)
{
    long long *conn = arg;
    *conn = oe_sleeping_connection(&env, "frozen");
    return *conn > 0;
}

/* *arg: a connection id; 1 when it has no InnoDB transaction (*arg then 0). */
static int trx_gone(void *arg)
{
    long long *conn = arg;
    if (oe_scalarf(&env, "SELECT COUNT(*) FROM information_schema.INNODB_TRX WHERE trx_mysql_thread_id = %lld",
                   *conn) != 0)
        return 0;
    *conn = 0;
    return 1;
}

static int run_inspection(char *out, size_t outlen)
{
    char uri[64];
    snprintf(uri, sizeof uri, "hourglass://127.0.0.1:%d", env.broker.port);
    const char *argv[] = { COMPENSATOR_BIN,
                           "--once",
                           "--layers",
                           "inspection",
                           "--inspect-grace",
                           "0s",
                           "--uri",
                           uri,
                           "--mysql-socket",
                           env.server.socket,
                           "--mysql-user",
                           "root",
                           "--mysql-database",
                           "frozen",
                           "--log-level",
                           "warn",
                           "--dlq-groups",
                           "none",
                           "--mysql-lock-wait-timeout",
                           "30s",
                           NULL };
    return tu_run_capture(argv, out, outlen);
}

static void test_frozen_consumer(void)
{
    /* 200 orders past their expiry; order 1 is the frozen consumer's. */
    of_seed_spec_t spec = { .first_id = 1,
                            .orders = 200,
                            .first_sku = 1,
                            .skus = 30,
                            .max_items = 3,
                            .max_qty = 3,
                            .stock_per_sku = 1000000,
                            .expire_in_ms = -60000,
                            .with_outbox = 1,
                            .random_seed = 5 };
    hg_order_db *db = oe_fresh_database(&env, "frozen", 200, &spec);
    CU_ASSERT_PTR_NOT_NULL_FATAL(db);
    rc_conn_t c;
    char err[512], id[64];
    CU_ASSERT_EQUAL_FATAL(bp_connect(&env.broker, &c, err, sizeof err), 0);
    CU_ASSERT_EQUAL_FATAL(bp_ok_cmd(&c, err, sizeof err, "GROUP", "CREATE", "frozen", OE_TOPIC, "FROM", "NOW", NULL),
                          0);

    /* The consumer's side effects: for order 1 only, a 2 s sleep right after
     * the claim (before it touches stock), then the reference ones. */
    char dir[512];
    CU_ASSERT_EQUAL_FATAL(tu_mkdtemp("batch-frozen", dir, sizeof dir), 0);
    int mport = tu_free_port();
    const char *extra[] = { "--batch-size",
                            "1",
                            "--side-effect-sql",
                            "DO SLEEP(IF(? = 1, 2, 0))",
                            "--side-effect-sql",
                            "UPDATE stock s JOIN order_items i ON i.sku_id = s.sku_id SET s.available = s.available "
                            "+ i.qty, s.reserved = s.reserved - i.qty WHERE i.order_id = ?",
                            "--side-effect-sql",
                            "UPDATE order_timeout_msg SET status='done' WHERE order_id = ?",
                            "--mysql-idle-transaction-timeout",
                            "2s",
                            NULL };
    pid_t pid = start_consumer("frozen", "frozen", mport, dir, extra);
    CU_ASSERT_EQUAL(bp_send(&c, id, sizeof id, err, sizeof err, OE_TOPIC, "1", NULL), 0);
    long long conn = -1;
    CU_ASSERT_EQUAL_FATAL(tu_poll_until(in_sleep, &conn, 20000, 5), 0);
    CU_ASSERT_EQUAL(kill(pid, SIGSTOP), 0);
    uint64_t frozen_at = tu_now_mono_ms();
    /* The inspection: every other overdue order cancelled at once. */
    char out[4096];
    int rc = run_inspection(out, sizeof out);
    uint64_t round_ms = tu_now_mono_ms() - frozen_at;
    TU_CHECK(rc == 0, "hourglass-compensator --once exited %d:\n%s", rc, out);
    CU_ASSERT_EQUAL(oe_scalar(&env, "SELECT COUNT(*) FROM frozen.orders WHERE status='cancelled'"), 199);
    CU_ASSERT_EQUAL(oe_scalar(&env, "SELECT status='pending' FROM frozen.orders WHERE id=1"), 1);
    /* A round that waited for the frozen row would take the lock wait, 30 s. */
    TU_CHECK(round_ms < 15000, "the inspection round took %" PRIu64 " ms beside a frozen holder", round_ms);

    /* The frozen transaction: rolled back by the server after its idle bound. */
    /* Polled every 250 ms: InnoDB refreshes what INNODB_TRX shows only when
     * it was not read for 100 ms, so a faster poll would see a stale table. */
    long long trx = conn;
    CU_ASSERT_EQUAL(tu_poll_until(trx_gone, &trx, 20000, 250), 0);
    uint64_t gone_ms = tu_now_mono_ms() - frozen_at;
    CU_ASSERT_EQUAL(trx, 0);
    printf("\n  inspection round beside the frozen consumer: %" PRIu64 " ms (199 cancelled);"
           " frozen transaction gone %" PRIu64 " ms after SIGSTOP (sleep 2 s + idle bound 2 s)",
           round_ms, gone_ms);
    TU_CHECK(gone_ms < 12000, "the frozen transaction lived %" PRIu64 " ms", gone_ms);

    /* The next round cancels order 1; the consumer, thawed, finds it done. */
    rc = run_inspection(out, sizeof out);
    TU_CHECK(rc == 0, "hourglass-compensator --once exited %d:\n%s", rc, out);
    CU_ASSERT_EQUAL(oe_scalar(&env, "SELECT COUNT(*) FROM frozen.orders WHERE status='cancelled'"), 200);
    CU_ASSERT_EQUAL(kill(pid, SIGCONT), 0);
    /* Its lease ran out while frozen: the ACK may find it expired and the
     * broker may deliver it again (then NOT_PENDING); either way it is ACKed. */
    for (int i = 0; i < 500 && oe_metric(mport, "hourglass_consumer_acked_total") < 1; i++)
        sleep_ms(20);
    CU_ASSERT_TRUE(oe_metric(mport, "hourglass_consumer_acked_total") >= 1);
    CU_ASSERT_EQUAL(oe_metric(mport, "hourglass_consumer_cancelled_total"), 0);
    CU_ASSERT_EQUAL(oe_stop_consumer(pid), 0);
    rc_close(&c);

    of_report_t r;
    check_invariant("frozen", &r);
    CU_ASSERT_EQUAL(r.cancelled, 200);
    CU_ASSERT_EQUAL(r.reserved, 0);
    CU_ASSERT_EQUAL(r.received, r.available);
    CU_ASSERT_EQUAL(oe_scalar(&env, "SELECT COUNT(*) FROM frozen.orders WHERE cancel_reason='inspection'"), 200);
    print_consumer_log(dir);
    tu_rmtree(dir);
    hg_order_db_close(db);
}

/* ---------------------------------------------------------------- registry */

static const tu_test_t batch_tests[] = {
    { "library: one order locked → the rest cancelled at once, it later", test_lib_locked_row },
    { "library: paid, unknown, zero, duplicate ids → each its own outcome", test_lib_outcomes },
    { "library: a constraint failure is halved down to its order", test_lib_constraint_isolated },
    { "library: configured SQL, one order locked → only it fails (after the lock wait)", test_lib_configured_sql },
    { "library: text SKUs quoted in the set-based stock return", test_lib_text_skus },
    { "library: a CALL side effect that returns result sets commits", test_lib_call_with_results },
    { "library: a revoked GRANT and a read-only server are transient; read-only reconnects",
      test_lib_setup_and_read_only },
    { "consumer: one PULL with paid, unknown, malformed and cancellable orders", test_consumer_outcomes },
    { "consumer: one order locked → the rest cancelled at once, it after the release", test_consumer_locked },
    { "frozen consumer: the inspection skips its row, the server drops its transaction", test_frozen_consumer },
    { NULL, NULL },
};

static int add_suites(void)
{
    return tu_add_suite("batch", batch_init, batch_cleanup, NULL, NULL, batch_tests);
}

int main(int argc, char **argv)
{
    return oe_cunit_main(argc, argv, add_suites);
}
