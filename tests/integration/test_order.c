/*
 * tests/integration/test_order.c — the order cancel against a real MariaDB.
 *
 * Suites (run one with ./tests/integration/test_order SUITE):
 *   sql      no database: the configured-SQL checks (placeholders counted
 *            outside strings and comments, errors naming the field), the
 *            payload parser, error classification, the compiled-in schema
 *            equal to sql/schema.sql.
 *   cancel   outcomes one by one: cancel pending → CANCELLED with stock back,
 *            again → NOT_PENDING, unknown → NOT_FOUND, pay vs cancel both
 *            ways, a custom schema through configured SQL, a claim that
 *            changes several rows refused and rolled back.
 *   race     2 000 orders; for each, one payment and three duplicate cancels
 *            from 8 threads at once (one handle each). Afterwards every order
 *            is exactly one of paid / cancelled, none both, stock conserved
 *            to the unit. Prints orders/s.
 *   faults   a second session KILLs the worker's connection or query while
 *            its transaction waits on a row lock the test holds, a lock held
 *            past innodb_lock_wait_timeout (1 s), a connection killed while
 *            idle: each attempt fails TRANSIENT, a retry with backoff reaches
 *            the exact end state (status, stock, outbox).
 *   explain  the overdue query uses the (status, expire_at) index.
 *
 * Every database suite starts its own private server (tu_mariadb_start) in
 * its init; if it cannot start, the init fails with the server's error and
 * the program fails — never a skip.
 */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include "include/hourglass/order.h"
#include "lib/order_sql.h"
#include "tests/helpers/order_fixture.h"
#include "tests/helpers/sql_client.h"
#include "tests/helpers/testutil.h"

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <CUnit/CUnit.h>
#include <mysql.h>

/* ---------------------------------------------------------------- shared tools */

static tu_mariadb_t server;
static MYSQL *admin; /* root, autocommit on, the suite's database */
static char database[64];

static void sleep_ms(unsigned ms)
{
    struct timespec ts = { ms / 1000, (long)(ms % 1000) * 1000000L };
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

static MYSQL *connect_root(const char *db)
{
    return sql_connect_root(&server, db);
}

/* The first column of the first row as a string into buf ("" when none). */
static void text_of(MYSQL *m, char *buf, size_t buflen, const char *fmt, ...) __attribute__((format(printf, 4, 5)));
static void text_of(MYSQL *m, char *buf, size_t buflen, const char *fmt, ...)
{
    char sql[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(sql, sizeof sql, fmt, ap);
    va_end(ap);
    buf[0] = '\0';
    if (sql_query(m, sql) != 0)
        return;
    MYSQL_RES *res = mysql_store_result(m);
    if (res == NULL)
        return;
    MYSQL_ROW row = mysql_fetch_row(res);
    if (row != NULL)
        snprintf(buf, buflen, "%s", row[0] != NULL ? row[0] : "NULL");
    mysql_free_result(res);
}

/* A handle on the suite's database; lock_wait 0 = server default. */
static hg_order_db *open_db(const hg_order_sql_t *sql, unsigned lock_wait_s)
{
    hg_order_db_params_t p = { 0 };
    p.socket = server.socket;
    p.user = "root";
    p.database = database;
    p.lock_wait_timeout_s = lock_wait_s;
    p.sql = sql;
    hg_order_error_t err;
    hg_order_db *db = hg_order_db_open(&p, &err);
    if (db == NULL)
        fprintf(stderr, "hg_order_db_open: %s\n", err.message);
    return db;
}

/* Start a private server, create database name with the reference schema. */
static int db_suite_init(const char *name)
{
    char err[4096];
    if (tu_mariadb_start(&server, err, sizeof err) != 0) {
        fprintf(stderr, "\nFAIL: cannot start a private MariaDB: %s\n", err);
        return -1;
    }
    snprintf(database, sizeof database, "%s", name);
    admin = connect_root(NULL);
    if (admin == NULL)
        return -1;
    if (sql_execf(admin, "CREATE DATABASE %s CHARACTER SET utf8mb4", name) != 0 || mysql_select_db(admin, name) != 0)
        return -1;
    hg_order_db *db = open_db(NULL, 0);
    if (db == NULL)
        return -1;
    hg_order_error_t e;
    int rc = hg_order_schema_create(db, &e);
    if (rc != 0)
        fprintf(stderr, "schema: %s\n", e.message);
    hg_order_db_close(db);
    return rc;
}

static int db_suite_cleanup(void)
{
    if (admin != NULL)
        mysql_close(admin);
    admin = NULL;
    tu_mariadb_stop(&server);
    return 0;
}

/* Seed the suite's database over the admin connection (order_fixture.h). */
static void seed(uint64_t first_id, size_t orders, unsigned skus, int64_t expire_in_ms)
{
    of_seed_spec_t spec = {
        .first_id = first_id,
        .orders = orders,
        .first_sku = 1,
        .skus = skus,
        .max_items = 3,
        .max_qty = 4,
        .stock_per_sku = 1000000,
        .expire_in_ms = expire_in_ms,
        .with_outbox = 1,
        .random_seed = (uint32_t)first_id,
    };
    hg_order_error_t err;
    int rc = of_seed(admin, &spec, &err);
    if (rc != 0)
        fprintf(stderr, "seed: %s\n", err.message);
    CU_ASSERT_EQUAL_FATAL(rc, 0);
}

/* The invariant of the suite's database, read over the admin connection. */
static void assert_invariant(of_report_t *out)
{
    of_report_t r;
    hg_order_error_t err;
    int rc = of_check(admin, 3600, &r, &err);
    if (rc != 0)
        fprintf(stderr, "check: %s\n", err.message);
    CU_ASSERT_EQUAL_FATAL(rc, 0);
    char text[1024];
    of_report_format(&r, text, sizeof text);
    if (!r.ok)
        fprintf(stderr, "\n%s", text);
    CU_ASSERT_TRUE(r.ok);
    CU_ASSERT_EQUAL(r.received, r.available + r.reserved + r.sold);
    if (out != NULL)
        *out = r;
}

/* The stock of one order's SKUs, in sku order: what a cancel or payment of
 * exactly that order must move. */
#define MAX_ITEMS 8
typedef struct order_stock {
    int n;
    long long sku[MAX_ITEMS], qty[MAX_ITEMS], available[MAX_ITEMS], reserved[MAX_ITEMS], sold[MAX_ITEMS];
} order_stock_t;

static void stock_of(uint64_t order_id, order_stock_t *s)
{
    memset(s, 0, sizeof *s);
    char sql[512];
    snprintf(sql, sizeof sql,
             "SELECT i.sku_id, i.qty, s.available, s.reserved, s.sold FROM order_items i"
             " JOIN stock s ON s.sku_id = i.sku_id WHERE i.order_id = %" PRIu64 " ORDER BY i.sku_id",
             order_id);
    CU_ASSERT_EQUAL_FATAL(mysql_query(admin, sql), 0);
    MYSQL_RES *res = mysql_store_result(admin);
    CU_ASSERT_PTR_NOT_NULL_FATAL(res);
    MYSQL_ROW row;
    while ((row = mysql_fetch_row(res)) != NULL && s->n < MAX_ITEMS) {
        s->sku[s->n] = strtoll(row[0], NULL, 10);
        s->qty[s->n] = strtoll(row[1], NULL, 10);
        s->available[s->n] = strtoll(row[2], NULL, 10);
        s->reserved[s->n] = strtoll(row[3], NULL, 10);
        s->sold[s->n] = strtoll(row[4], NULL, 10);
        s->n++;
    }
    mysql_free_result(res);
    CU_ASSERT_TRUE(s->n > 0);
}

/* Compare after with before moved by one cancel (qty reserved → available),
 * one payment (reserved → sold), or nothing. */
enum move {
    MOVE_NONE,
    MOVE_CANCEL,
    MOVE_PAY
};
static void assert_stock_moved(const order_stock_t *before, const order_stock_t *after, enum move how)
{
    CU_ASSERT_EQUAL_FATAL(before->n, after->n);
    for (int i = 0; i < before->n; i++) {
        long long q = before->qty[i];
        CU_ASSERT_EQUAL(after->sku[i], before->sku[i]);
        CU_ASSERT_EQUAL(after->available[i], before->available[i] + (how == MOVE_CANCEL ? q : 0));
        CU_ASSERT_EQUAL(after->reserved[i], before->reserved[i] - (how == MOVE_NONE ? 0 : q));
        CU_ASSERT_EQUAL(after->sold[i], before->sold[i] + (how == MOVE_PAY ? q : 0));
    }
}

static void order_status(uint64_t id, char *buf, size_t buflen)
{
    text_of(admin, buf, buflen, "SELECT status FROM orders WHERE id = %" PRIu64, id);
}

static void lock_stock_of(MYSQL *m, uint64_t order_id)
{
    CU_ASSERT_EQUAL_FATAL(sql_execf(m, "START TRANSACTION"), 0);
    CU_ASSERT_EQUAL_FATAL(sql_execf(m,
                                    "SELECT s.* FROM stock s JOIN order_items i ON i.sku_id = s.sku_id"
                                    " WHERE i.order_id = %" PRIu64 " FOR UPDATE",
                                    order_id),
                          0);
}

/* ---------------------------------------------------------------- suite "sql" */

static void expect_sql_error(const char *field, const char *text, const char *want)
{
    char err[512] = "";
    int rc = hg_order_sql_check(field, text, err, sizeof err);
    CU_ASSERT_EQUAL(rc, -1);
    if (strstr(err, want) == NULL || strncmp(err, field, strlen(field)) != 0) {
        fprintf(stderr, "\n  for %s: got \"%s\", want it to start with the field and contain \"%s\"\n",
                text != NULL ? text : "(null)", err, want);
        CU_FAIL("error message");
    }
}

static void test_sql_defaults_valid(void)
{
    hg_order_sql_t sql;
    char err[512] = "";
    hg_order_sql_default(&sql);
    CU_ASSERT_EQUAL(hg_order_sql_validate(&sql, err, sizeof err), 0);
    CU_ASSERT_EQUAL(sql.side_effect_count, 2);
    CU_ASSERT_PTR_NOT_NULL(strstr(sql.claim, "status='pending'"));
}

static void test_sql_placeholders(void)
{
    /* Placeholders inside strings, quoted identifiers and comments do not count. */
    CU_ASSERT_EQUAL(hg_order_sql_check("claim-sql", "UPDATE o SET note='?' WHERE id=? AND s='pending'", NULL, 0), 0);
    CU_ASSERT_EQUAL(hg_order_sql_check("claim-sql", "UPDATE o SET note=\"it''s ? \\\" ?\" WHERE id=?", NULL, 0), 0);
    CU_ASSERT_EQUAL(hg_order_sql_check("claim-sql", "UPDATE `we?ird` SET a=1 WHERE id=? -- and ?\n", NULL, 0), 0);
    CU_ASSERT_EQUAL(hg_order_sql_check("claim-sql", "UPDATE o /* ? */ SET a=1 WHERE id=? # ?", NULL, 0), 0);
    CU_ASSERT_EQUAL(hg_order_sql_check("claim-sql", "UPDATE o SET a=1 WHERE id=?;  ", NULL, 0), 0);
    CU_ASSERT_EQUAL(hg_order_sql_check("claim-sql", "UPDATE o SET a=1, r=:reason WHERE id=?", NULL, 0), 0);
    CU_ASSERT_EQUAL(hg_order_sql_check("side-effect-sql", "SET @x := 1 + ?", NULL, 0), 0);
    CU_ASSERT_EQUAL(hg_order_sql_check("claim-sql", "UPDATE o SET a=a--1 WHERE id=?", NULL, 0), 0); /* a - (-1) */

    expect_sql_error("claim-sql", "UPDATE o SET r=? WHERE id=? AND s='pending'",
                     "claim-sql: expected exactly one '?' (the order id), found 2");
    expect_sql_error("claim-sql", "UPDATE o SET s='cancelled' WHERE s='pending'", "found 0");
    expect_sql_error("lookup-sql", "SELECT 1 FROM o WHERE id=? AND r=:reason", "':reason' is not available");
    expect_sql_error("side-effect-sql", "UPDATE x SET y=:order WHERE id=?", "unknown placeholder ':order'");
    expect_sql_error("claim-sql", "UPDATE o SET a=1 WHERE id=?; DELETE FROM o", "more than one statement");
    expect_sql_error("claim-sql", "UPDATE o SET a='oops WHERE id=?", "unterminated string");
    expect_sql_error("claim-sql", "UPDATE o /* SET a=1 WHERE id=?", "unterminated comment");
    expect_sql_error("claim-sql", "   ", "empty statement");
    expect_sql_error("claim-sql", NULL, "empty statement");
    char big[HG_ORDER_SQL_MAX_LEN + 64];
    memset(big, ' ', sizeof big);
    memcpy(big, "SELECT ?", 8);
    big[sizeof big - 1] = '\0';
    expect_sql_error("lookup-sql", big, "more than the limit");
}

static void test_sql_translate(void)
{
    order_sql_text_t t;
    char err[256];
    CU_ASSERT_EQUAL_FATAL(
        order_sql_translate("claim-sql", "UPDATE o SET r=:reason, n=':reason' WHERE id=? ;", 1, &t, err, sizeof err),
        0);
    CU_ASSERT_STRING_EQUAL(t.sql, "UPDATE o SET r=?, n=':reason' WHERE id=? ");
    CU_ASSERT_EQUAL(t.nparams, 2);
    CU_ASSERT_EQUAL(t.kinds[0], ORDER_SQL_PARAM_REASON);
    CU_ASSERT_EQUAL(t.kinds[1], ORDER_SQL_PARAM_ORDER_ID);
    order_sql_text_free(&t);
}

static void test_sql_validate_names_field(void)
{
    hg_order_sql_t sql;
    char err[512] = "";
    hg_order_sql_default(&sql);
    sql.side_effects[1] = "UPDATE outbox SET done=1 WHERE id=? OR id=?";
    CU_ASSERT_EQUAL(hg_order_sql_validate(&sql, err, sizeof err), -1);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "side-effect-sql[2]: expected exactly one '?'"));

    hg_order_sql_default(&sql);
    sql.side_effect_count = HG_ORDER_SQL_MAX_SIDE_EFFECTS + 1;
    CU_ASSERT_EQUAL(hg_order_sql_validate(&sql, err, sizeof err), -1);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "side-effect-sql:"));

    hg_order_sql_default(&sql);
    sql.lookup = NULL;
    CU_ASSERT_EQUAL(hg_order_sql_validate(&sql, err, sizeof err), -1);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "lookup-sql: empty"));

    /* open refuses bad SQL before it connects, naming the field. */
    hg_order_sql_default(&sql);
    sql.claim = "UPDATE orders SET status='cancelled' WHERE status='pending'";
    hg_order_db_params_t p = { .socket = "/nonexistent/socket", .sql = &sql };
    hg_order_error_t e;
    CU_ASSERT_PTR_NULL(hg_order_db_open(&p, &e));
    CU_ASSERT_PTR_NOT_NULL(strstr(e.message, "claim-sql: expected exactly one '?'"));
    CU_ASSERT_EQUAL(e.code, 0);
}

static void test_sql_split(void)
{
    const char *script = "-- head; not a statement\nCREATE TABLE a (x INT); /* ; */\n"
                         "INSERT INTO a VALUES (';')  ;\n# tail;\n";
    size_t pos = 0, len;
    const char *st;
    char err[128];
    CU_ASSERT_EQUAL_FATAL(order_sql_next_statement(script, &pos, &st, &len, err, sizeof err), 1);
    CU_ASSERT_EQUAL(len, strlen("CREATE TABLE a (x INT)"));
    CU_ASSERT_EQUAL(strncmp(st, "CREATE TABLE a (x INT)", len), 0);
    CU_ASSERT_EQUAL_FATAL(order_sql_next_statement(script, &pos, &st, &len, err, sizeof err), 1);
    CU_ASSERT_EQUAL(strncmp(st, "INSERT INTO a VALUES (';')", len), 0);
    CU_ASSERT_EQUAL(len, strlen("INSERT INTO a VALUES (';')"));
    CU_ASSERT_EQUAL(order_sql_next_statement(script, &pos, &st, &len, err, sizeof err), 0);

    int count = 0;
    pos = 0;
    while (order_sql_next_statement(hg_order_schema_sql(), &pos, &st, &len, err, sizeof err) == 1) {
        CU_ASSERT_EQUAL(strncmp(st, "CREATE TABLE IF NOT EXISTS ", 27), 0);
        count++;
    }
    CU_ASSERT_EQUAL(count, 4);
}

static void test_schema_matches_file(void)
{
    const char *path = HG_SRCDIR "/sql/schema.sql";
    FILE *f = fopen(path, "rb");
    if (f == NULL)
        fprintf(stderr, "\n%s: %s\n", path, strerror(errno));
    CU_ASSERT_PTR_NOT_NULL_FATAL(f);
    static char text[65536];
    size_t n = fread(text, 1, sizeof text - 1, f);
    fclose(f);
    text[n] = '\0';
    const char *compiled = hg_order_schema_sql();
    if (strcmp(text, compiled) != 0) {
        size_t i = 0;
        while (text[i] != '\0' && text[i] == compiled[i])
            i++;
        fprintf(stderr,
                "\nsql/schema.sql and lib/order_schema.c differ at byte %zu: file \"%.40s\" vs "
                "compiled \"%.40s\" — update the copy in lib/order_schema.c\n",
                i, text + i, compiled + i);
        CU_FAIL("schema copy out of date");
    }
}

static void test_parse_id(void)
{
    uint64_t id = 0;
    char err[128];
    CU_ASSERT_EQUAL(hg_order_parse_id("12345", 5, &id, err, sizeof err), 0);
    CU_ASSERT_EQUAL(id, 12345);
    CU_ASSERT_EQUAL(hg_order_parse_id("18446744073709551615", 20, &id, err, sizeof err), 0);
    CU_ASSERT_EQUAL(id, UINT64_MAX);
    CU_ASSERT_EQUAL(hg_order_parse_id("123xyz", 3, &id, err, sizeof err), 0); /* len bounds it */
    CU_ASSERT_EQUAL(id, 123);

    static const struct {
        const char *text;
        const char *want;
    } bad[] = {
        { "", "empty" },
        { "18446744073709551616", "larger than" },
        { "99999999999999999999", "larger than" },
        { "123456789012345678901", "at most 20 digits" },
        { "12a", "byte 3 is 'a'" },
        { "-5", "byte 1 is '-'" },
        { " 5", "byte 1 is 0x20" },
        { "5\n", "byte 2 is 0x0a" },
        { "007", "leading zero" },
        { "0", "0 is not an order id" },
        { "{\"order_id\":5}", "byte 1 is '{'" },
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        err[0] = '\0';
        CU_ASSERT_EQUAL(hg_order_parse_id(bad[i].text, strlen(bad[i].text), &id, err, sizeof err), -1);
        if (strstr(err, bad[i].want) == NULL || strncmp(err, "payload is not an order id", 26) != 0) {
            fprintf(stderr, "\n  payload \"%s\": got \"%s\", want \"%s\"\n", bad[i].text, err, bad[i].want);
            CU_FAIL("parse error message");
        }
    }
    CU_ASSERT_EQUAL(hg_order_parse_id("1\0002", 3, &id, err, sizeof err), -1); /* an embedded NUL */
    CU_ASSERT_EQUAL(hg_order_parse_id(NULL, 0, &id, err, sizeof err), -1);
}

static void test_classify(void)
{
    /* the set-up errors (1044, 1045, 1049, 1142, 1143, 1146) are transient:
     * a GRANT revoked at run time is not the order's fault; so is a full
     * disk (1021, 1114 "The table … is full") */
    static const unsigned transient[] = { 1213, 1205, 1317, 1927, 4031, 2006, 2013, 2002, 2003, 2055, 1040,
                                          1053, 1969, 1290, 1044, 1045, 1049, 1142, 1143, 1146, 1021, 1114 };
    static const unsigned permanent[] = { 1064, 1054, 1062, 4025, 1406, 1048, 0 };
    for (size_t i = 0; i < sizeof transient / sizeof transient[0]; i++)
        CU_ASSERT_EQUAL(hg_order_classify(transient[i]), HG_ORDER_TRANSIENT);
    for (size_t i = 0; i < sizeof permanent / sizeof permanent[0]; i++)
        CU_ASSERT_EQUAL(hg_order_classify(permanent[i]), HG_ORDER_PERMANENT);
    /* MariaDB itself failing (for /healthz), not one order's bad luck */
    static const unsigned database_codes[] = { 2006, 2013, 2002, 2003, 1927, 4031, 1053,
                                               1290, 1040, 1045, 1142, 1146, 1021, 1114 };
    /* 0: a failure the library found without a server error (a claim that
     * changed 2 rows) is about the data, not the database */
    static const unsigned order[] = { 0, 1213, 1205, 1317, 1969, 1064, 1062, 4025 };
    for (size_t i = 0; i < sizeof database_codes / sizeof database_codes[0]; i++)
        CU_ASSERT_TRUE(hg_order_error_is_database(database_codes[i]));
    for (size_t i = 0; i < sizeof order / sizeof order[0]; i++)
        CU_ASSERT_FALSE(hg_order_error_is_database(order[i]));
    CU_ASSERT_STRING_EQUAL(hg_order_outcome_name(HG_ORDER_NOT_PENDING), "not-pending");
    CU_ASSERT_STRING_EQUAL(hg_order_outcome_name((hg_order_outcome_t)42), "unknown");
}

/* ---------------------------------------------------------------- suite "cancel" */

static int cancel_init(void)
{
    return db_suite_init("shop");
}

static void test_cancel_outcomes(void)
{
    hg_order_db *db = open_db(NULL, 0);
    CU_ASSERT_PTR_NOT_NULL_FATAL(db);
    seed(1, 10, 5, 30 * 60 * 1000);
    hg_order_outcome_t out;
    hg_order_error_t err;
    order_stock_t before, after;
    char status[32];

    /* cancel pending → CANCELLED, stock back, outbox done, reason recorded */
    stock_of(1, &before);
    CU_ASSERT_EQUAL(hg_order_cancel(db, 1, "timeout-message", &out, &err), 0);
    CU_ASSERT_EQUAL(out, HG_ORDER_CANCELLED);
    stock_of(1, &after);
    assert_stock_moved(&before, &after, MOVE_CANCEL);
    order_status(1, status, sizeof status);
    CU_ASSERT_STRING_EQUAL(status, "cancelled");
    text_of(admin, status, sizeof status, "SELECT cancel_reason FROM orders WHERE id = 1");
    CU_ASSERT_STRING_EQUAL(status, "timeout-message");
    text_of(admin, status, sizeof status, "SELECT status FROM order_timeout_msg WHERE order_id = 1");
    CU_ASSERT_STRING_EQUAL(status, "done");
    CU_ASSERT_EQUAL(sql_scalarf(admin, "SELECT cancelled_at IS NOT NULL AND paid_at IS NULL FROM orders WHERE id = 1"),
                    1);

    /* again (a duplicate message) → NOT_PENDING, nothing moves */
    before = after;
    CU_ASSERT_EQUAL(hg_order_cancel(db, 1, "timeout-message", &out, &err), 0);
    CU_ASSERT_EQUAL(out, HG_ORDER_NOT_PENDING);
    stock_of(1, &after);
    assert_stock_moved(&before, &after, MOVE_NONE);

    /* unknown id → NOT_FOUND */
    CU_ASSERT_EQUAL(hg_order_cancel(db, 999999, "timeout-message", &out, &err), 0);
    CU_ASSERT_EQUAL(out, HG_ORDER_NOT_FOUND);
    CU_ASSERT_EQUAL(hg_order_pay(db, 999999, &out, &err), 0);
    CU_ASSERT_EQUAL(out, HG_ORDER_NOT_FOUND);

    /* pay then cancel → the cancel finds it not pending; stock reserved → sold once */
    stock_of(2, &before);
    CU_ASSERT_EQUAL(hg_order_pay(db, 2, &out, &err), 0);
    CU_ASSERT_EQUAL(out, HG_ORDER_PAID);
    CU_ASSERT_EQUAL(hg_order_cancel(db, 2, "timeout-message", &out, &err), 0);
    CU_ASSERT_EQUAL(out, HG_ORDER_NOT_PENDING);
    CU_ASSERT_EQUAL(hg_order_pay(db, 2, &out, &err), 0);
    CU_ASSERT_EQUAL(out, HG_ORDER_NOT_PENDING);
    stock_of(2, &after);
    assert_stock_moved(&before, &after, MOVE_PAY);
    order_status(2, status, sizeof status);
    CU_ASSERT_STRING_EQUAL(status, "paid");

    /* cancel then pay → the payment loses */
    stock_of(3, &before);
    CU_ASSERT_EQUAL(hg_order_cancel(db, 3, "manual", &out, &err), 0);
    CU_ASSERT_EQUAL(out, HG_ORDER_CANCELLED);
    CU_ASSERT_EQUAL(hg_order_pay(db, 3, &out, &err), 0);
    CU_ASSERT_EQUAL(out, HG_ORDER_NOT_PENDING);
    stock_of(3, &after);
    assert_stock_moved(&before, &after, MOVE_CANCEL);

    /* no reason → NULL */
    CU_ASSERT_EQUAL(hg_order_cancel(db, 4, NULL, &out, &err), 0);
    CU_ASSERT_EQUAL(out, HG_ORDER_CANCELLED);
    CU_ASSERT_EQUAL(sql_scalarf(admin, "SELECT cancel_reason IS NULL FROM orders WHERE id = 4"), 1);

    /* a reason too long for VARCHAR(64) in strict mode: permanent, rolled back */
    char longreason[100];
    memset(longreason, 'r', sizeof longreason - 1);
    longreason[sizeof longreason - 1] = '\0';
    stock_of(5, &before);
    CU_ASSERT_EQUAL(hg_order_cancel(db, 5, longreason, &out, &err), -1);
    CU_ASSERT_EQUAL(out, HG_ORDER_PERMANENT);
    CU_ASSERT_EQUAL(err.code, 1406);
    CU_ASSERT_PTR_NOT_NULL(strstr(err.message, "claim-sql: 1406"));
    order_status(5, status, sizeof status);
    CU_ASSERT_STRING_EQUAL(status, "pending");
    stock_of(5, &after);
    assert_stock_moved(&before, &after, MOVE_NONE);
    /* … and the handle is clean for the next call */
    CU_ASSERT_EQUAL(hg_order_cancel(db, 5, "inspection", &out, &err), 0);
    CU_ASSERT_EQUAL(out, HG_ORDER_CANCELLED);

    CU_ASSERT_EQUAL(hg_order_db_connects(db), 1);
    CU_ASSERT_EQUAL(hg_order_db_prepare(db, &err), 0);
    of_report_t r;
    assert_invariant(&r);
    CU_ASSERT_EQUAL(r.orders, 10);
    CU_ASSERT_EQUAL(r.paid, 1);
    CU_ASSERT_EQUAL(r.cancelled, 4);
    CU_ASSERT_EQUAL(r.pending, 5);
    hg_order_db_close(db);
}

/* A shop with its own schema configures the statements. */
static void test_custom_sql(void)
{
    CU_ASSERT_EQUAL_FATAL(sql_execf(admin, "CREATE TABLE shop_orders (order_no BIGINT UNSIGNED PRIMARY KEY,"
                                           " state VARCHAR(16) NOT NULL, coupon_id INT NULL) ENGINE=InnoDB"),
                          0);
    CU_ASSERT_EQUAL_FATAL(sql_execf(admin, "CREATE TABLE coupons (id INT PRIMARY KEY, used_by BIGINT UNSIGNED NULL)"
                                           " ENGINE=InnoDB"),
                          0);
    CU_ASSERT_EQUAL_FATAL(sql_execf(admin, "CREATE TABLE cancel_audit (order_no BIGINT UNSIGNED,"
                                           " why VARCHAR(64), at DATETIME(6)) ENGINE=InnoDB"),
                          0);
    CU_ASSERT_EQUAL_FATAL(sql_execf(admin, "INSERT INTO shop_orders VALUES (100, 'UNPAID', 7), (101, 'UNPAID', NULL),"
                                           " (102, 'PAID', NULL)"),
                          0);
    CU_ASSERT_EQUAL_FATAL(sql_execf(admin, "INSERT INTO coupons VALUES (7, 100)"), 0);

    hg_order_sql_t sql = {
        .claim = "UPDATE shop_orders SET state = 'CANCELLED' -- the claim\n"
                 "WHERE order_no = ? AND state = 'UNPAID';",
        .side_effects = { "UPDATE coupons c JOIN shop_orders o ON o.coupon_id = c.id SET c.used_by = NULL"
                          " WHERE o.order_no = ?",
                          "INSERT INTO cancel_audit (order_no, why, at) VALUES (?, :reason, NOW(6))" },
        .side_effect_count = 2,
        .lookup = "SELECT 1 FROM shop_orders WHERE order_no = ?",
    };
    hg_order_db *db = open_db(&sql, 0);
    CU_ASSERT_PTR_NOT_NULL_FATAL(db);
    hg_order_outcome_t out;
    hg_order_error_t err;
    CU_ASSERT_EQUAL(hg_order_db_prepare(db, &err), 0);
    CU_ASSERT_EQUAL(hg_order_cancel(db, 100, "outbox-overdue", &out, &err), 0);
    CU_ASSERT_EQUAL(out, HG_ORDER_CANCELLED);
    CU_ASSERT_EQUAL(sql_scalarf(admin, "SELECT used_by IS NULL FROM coupons WHERE id = 7"), 1);
    char why[64];
    text_of(admin, why, sizeof why, "SELECT why FROM cancel_audit WHERE order_no = 100");
    CU_ASSERT_STRING_EQUAL(why, "outbox-overdue");
    CU_ASSERT_EQUAL(hg_order_cancel(db, 100, "outbox-overdue", &out, &err), 0);
    CU_ASSERT_EQUAL(out, HG_ORDER_NOT_PENDING);
    CU_ASSERT_EQUAL(hg_order_cancel(db, 102, "outbox-overdue", &out, &err), 0);
    CU_ASSERT_EQUAL(out, HG_ORDER_NOT_PENDING);
    CU_ASSERT_EQUAL(hg_order_cancel(db, 5, "outbox-overdue", &out, &err), 0);
    CU_ASSERT_EQUAL(out, HG_ORDER_NOT_FOUND);
    CU_ASSERT_EQUAL(sql_scalarf(admin, "SELECT COUNT(*) FROM cancel_audit"), 1);
    hg_order_db_close(db);

    /* A claim whose WHERE selects several orders is refused and rolled back. */
    sql.claim = "UPDATE shop_orders SET state = 'CANCELLED' WHERE order_no >= ? AND state <> 'CANCELLED'";
    db = open_db(&sql, 0);
    CU_ASSERT_PTR_NOT_NULL_FATAL(db);
    CU_ASSERT_EQUAL(hg_order_cancel(db, 100, "x", &out, &err), -1);
    CU_ASSERT_EQUAL(out, HG_ORDER_PERMANENT);
    CU_ASSERT_PTR_NOT_NULL(strstr(err.message, "changed 2 rows"));
    CU_ASSERT_EQUAL(sql_scalarf(admin, "SELECT COUNT(*) FROM shop_orders WHERE state = 'CANCELLED'"), 1);
    hg_order_db_close(db);

    /* A table the server does not have: prepare names the field; a cancel
     * is transient (a set-up error: the consumer refuses to start on it, and
     * at run time, a table renamed by a migration, it waits for the fix). */
    sql.claim = "UPDATE shop_orders SET state = 'CANCELLED' WHERE order_no = ? AND state = 'UNPAID'";
    sql.side_effects[1] = "INSERT INTO no_such_table (order_no) VALUES (?)";
    db = open_db(&sql, 0);
    CU_ASSERT_PTR_NOT_NULL_FATAL(db);
    CU_ASSERT_EQUAL(hg_order_db_prepare(db, &err), -1);
    CU_ASSERT_PTR_NOT_NULL(strstr(err.message, "side-effect-sql[2]: prepare: 1146"));
    CU_ASSERT_EQUAL(hg_order_cancel(db, 101, "x", &out, &err), -1);
    CU_ASSERT_EQUAL(out, HG_ORDER_TRANSIENT);
    CU_ASSERT_EQUAL(err.code, 1146);
    CU_ASSERT_PTR_NOT_NULL(hg_order_setup_hint(err.code));
    CU_ASSERT_EQUAL(sql_scalarf(admin, "SELECT state = 'UNPAID' FROM shop_orders WHERE order_no = 101"), 1);
    hg_order_db_close(db);
}

static void test_open_errors(void)
{
    hg_order_db_params_t p = { .socket = server.socket, .user = "root", .database = "no_such_db" };
    hg_order_error_t err;
    CU_ASSERT_PTR_NULL(hg_order_db_open(&p, &err));
    CU_ASSERT_EQUAL(err.code, 1049);
    CU_ASSERT_PTR_NOT_NULL(strstr(err.message, "Unknown database"));
    p.database = NULL;
    p.socket = "/nonexistent/mysql.sock";
    CU_ASSERT_PTR_NULL(hg_order_db_open(&p, &err));
    CU_ASSERT_EQUAL(err.code, 2002);
    CU_ASSERT_PTR_NOT_NULL(strstr(err.message, "connect to /nonexistent/mysql.sock"));
    hg_order_db_close(NULL);
}

static void test_seed_and_check_detect_defects(void)
{
    hg_order_db *db = open_db(NULL, 0);
    CU_ASSERT_PTR_NOT_NULL_FATAL(db);
    hg_order_error_t err;
    /* Seeding an id that exists fails whole. */
    of_seed_spec_t spec = { .first_id = 5,
                            .orders = 10,
                            .first_sku = 1,
                            .skus = 5,
                            .max_items = 3,
                            .max_qty = 4,
                            .stock_per_sku = 1000000,
                            .expire_in_ms = 60000 };
    long long before = sql_scalarf(admin, "SELECT COUNT(*) FROM orders");
    CU_ASSERT_EQUAL(of_seed(admin, &spec, &err), -1);
    CU_ASSERT_EQUAL(err.code, 1062);
    CU_ASSERT_EQUAL(sql_scalarf(admin, "SELECT COUNT(*) FROM orders"), before);
    /* Stock that would go negative fails whole (the CHECK constraint). */
    spec.first_id = 1000;
    spec.first_sku = 500;
    spec.stock_per_sku = 1;
    CU_ASSERT_EQUAL(of_seed(admin, &spec, &err), -1);
    CU_ASSERT_EQUAL(err.code, 4025);
    CU_ASSERT_EQUAL(sql_scalarf(admin, "SELECT COUNT(*) FROM orders"), before);

    of_report_t r;
    assert_invariant(NULL);
    /* Stock returned without a cancel (what a double return leaves behind)
     * conserves the sum but is caught. Order 6 is pending: its own quantities
     * are reserved, so the CHECK constraint does not stop this. */
    CU_ASSERT_EQUAL_FATAL(sql_execf(admin, "UPDATE stock s JOIN order_items i ON i.sku_id = s.sku_id"
                                           " SET s.available = s.available + i.qty, s.reserved = s.reserved - i.qty"
                                           " WHERE i.order_id = 6"),
                          0);
    CU_ASSERT_EQUAL(of_check(admin, 3600, &r, &err), 0);
    CU_ASSERT_FALSE(r.ok);
    CU_ASSERT_EQUAL(r.skus_unbalanced, 0);
    CU_ASSERT_TRUE(r.skus_reserved_wrong > 0);
    CU_ASSERT_PTR_NOT_NULL(strstr(r.first_defect, "reserved != quantity held by pending orders"));
    CU_ASSERT_EQUAL_FATAL(sql_execf(admin, "UPDATE stock s JOIN order_items i ON i.sku_id = s.sku_id"
                                           " SET s.available = s.available - i.qty, s.reserved = s.reserved + i.qty"
                                           " WHERE i.order_id = 6"),
                          0);
    /* An order both paid and cancelled. */
    CU_ASSERT_EQUAL_FATAL(sql_execf(admin, "UPDATE orders SET paid_at = NOW(6) WHERE id = 1"), 0);
    CU_ASSERT_EQUAL(of_check(admin, 3600, &r, &err), 0);
    CU_ASSERT_FALSE(r.ok);
    CU_ASSERT_EQUAL(r.paid_and_cancelled, 1);
    CU_ASSERT_PTR_NOT_NULL(strstr(r.first_defect, "both paid and cancelled, e.g. id=1"));
    CU_ASSERT_EQUAL_FATAL(sql_execf(admin, "UPDATE orders SET paid_at = NULL WHERE id = 1"), 0);
    /* An overdue pending order. */
    spec = (of_seed_spec_t){ .first_id = 2000,
                             .orders = 1,
                             .first_sku = 1,
                             .skus = 5,
                             .max_items = 1,
                             .max_qty = 1,
                             .stock_per_sku = 1000000,
                             .expire_in_ms = -7200 * 1000 };
    CU_ASSERT_EQUAL_FATAL(of_seed(admin, &spec, &err), 0);
    CU_ASSERT_EQUAL(of_check(admin, 3600, &r, &err), 0);
    CU_ASSERT_EQUAL(r.overdue_pending, 1);
    CU_ASSERT_FALSE(r.ok);
    hg_order_outcome_t out;
    CU_ASSERT_EQUAL(hg_order_cancel(db, 2000, "inspection", &out, &err), 0);
    CU_ASSERT_EQUAL(out, HG_ORDER_CANCELLED);
    assert_invariant(NULL);
    hg_order_db_close(db);
}

/* ---------------------------------------------------------------- suite "race" */

#define RACE_ORDERS   2000
#define RACE_THREADS  8
#define RACE_FIRST_ID 100000

typedef struct race_op {
    uint64_t order_id;
    int pay; /* 1: the payment, 0: a (duplicate) cancel */
} race_op_t;

static race_op_t race_ops[RACE_ORDERS * 4];
static atomic_size_t race_next;
static atomic_int race_winners[RACE_ORDERS];
static atomic_uint_fast64_t race_paid_wins, race_cancel_wins, race_not_pending, race_retries, race_deadlocks,
    race_lock_waits, race_permanent, race_gave_up;
static char race_first_error[512];
static pthread_mutex_t race_error_lock = PTHREAD_MUTEX_INITIALIZER;

static void *race_worker(void *arg)
{
    (void)arg;
    hg_order_db *db = open_db(NULL, 0);
    if (db == NULL) {
        atomic_fetch_add(&race_permanent, 1);
        return NULL;
    }
    for (;;) {
        size_t k = atomic_fetch_add(&race_next, 1);
        if (k >= RACE_ORDERS * 4)
            break;
        race_op_t op = race_ops[k];
        hg_order_outcome_t out = HG_ORDER_TRANSIENT;
        hg_order_error_t err;
        for (unsigned attempt = 0;; attempt++) {
            int rc = op.pay ? hg_order_pay(db, op.order_id, &out, &err)
                            : hg_order_cancel(db, op.order_id, "timeout-message", &out, &err);
            if (rc == 0 || out != HG_ORDER_TRANSIENT)
                break;
            atomic_fetch_add(&race_retries, 1);
            if (err.code == 1213)
                atomic_fetch_add(&race_deadlocks, 1);
            if (err.code == 1205)
                atomic_fetch_add(&race_lock_waits, 1);
            if (attempt == 50) {
                atomic_fetch_add(&race_gave_up, 1);
                break;
            }
            unsigned backoff = 1u << (attempt < 6 ? attempt : 6); /* 1 … 64 ms */
            sleep_ms(backoff + (unsigned)(rand() % 3));
        }
        if (out == HG_ORDER_PERMANENT) {
            atomic_fetch_add(&race_permanent, 1);
            pthread_mutex_lock(&race_error_lock);
            if (race_first_error[0] == '\0')
                snprintf(race_first_error, sizeof race_first_error, "%s", err.message);
            pthread_mutex_unlock(&race_error_lock);
        }
        if (out == HG_ORDER_PAID || out == HG_ORDER_CANCELLED)
            atomic_fetch_add(&race_winners[op.order_id - RACE_FIRST_ID], 1);
        if (out == HG_ORDER_PAID)
            atomic_fetch_add(&race_paid_wins, 1);
        if (out == HG_ORDER_CANCELLED)
            atomic_fetch_add(&race_cancel_wins, 1);
        if (out == HG_ORDER_NOT_PENDING)
            atomic_fetch_add(&race_not_pending, 1);
    }
    hg_order_db_close(db);
    return NULL;
}

static int race_init(void)
{
    return db_suite_init("race");
}

static void test_race_pay_and_duplicate_cancels(void)
{
    hg_order_db *db = open_db(NULL, 0);
    CU_ASSERT_PTR_NOT_NULL_FATAL(db);
    /* 40 SKUs shared by 2 000 orders: plenty of contention on stock rows. */
    of_seed_spec_t spec = { .first_id = RACE_FIRST_ID,
                            .orders = RACE_ORDERS,
                            .first_sku = 1,
                            .skus = 40,
                            .max_items = 3,
                            .max_qty = 3,
                            .stock_per_sku = 100000,
                            .expire_in_ms = 30 * 60 * 1000,
                            .with_outbox = 1,
                            .random_seed = 7 };
    hg_order_error_t err;
    CU_ASSERT_EQUAL_FATAL(of_seed(admin, &spec, &err), 0);
    of_report_t r0;
    assert_invariant(&r0);

    /* The four operations of an order sit next to each other, so 4 of the 8
     * threads take them at the same moment; the payment's place is random. */
    srand(42);
    for (size_t i = 0; i < RACE_ORDERS; i++) {
        int pay_at = rand() % 4;
        for (int k = 0; k < 4; k++)
            race_ops[i * 4 + (size_t)k] = (race_op_t){ RACE_FIRST_ID + i, k == pay_at };
    }
    atomic_store(&race_next, 0);

    pthread_t threads[RACE_THREADS];
    uint64_t t0 = tu_now_mono_ms();
    for (int t = 0; t < RACE_THREADS; t++)
        CU_ASSERT_EQUAL_FATAL(pthread_create(&threads[t], NULL, race_worker, NULL), 0);
    for (int t = 0; t < RACE_THREADS; t++)
        pthread_join(threads[t], NULL);
    uint64_t ms = tu_now_mono_ms() - t0;
    if (ms == 0)
        ms = 1;

    printf("\n  race: %d orders × (1 payment + 3 cancels) on %d threads in %" PRIu64 " ms:"
           " %.0f orders/s, %.0f operations/s\n"
           "  paid %" PRIu64 ", cancelled %" PRIu64 ", not-pending answers %" PRIu64 ", transient retries %" PRIu64
           " (deadlocks %" PRIu64 ", lock waits %" PRIu64 "), permanent %" PRIu64 "\n",
           RACE_ORDERS, RACE_THREADS, ms, RACE_ORDERS * 1000.0 / (double)ms, RACE_ORDERS * 4000.0 / (double)ms,
           (uint64_t)race_paid_wins, (uint64_t)race_cancel_wins, (uint64_t)race_not_pending, (uint64_t)race_retries,
           (uint64_t)race_deadlocks, (uint64_t)race_lock_waits, (uint64_t)race_permanent);
    if (race_first_error[0] != '\0')
        printf("  first permanent error: %s\n", race_first_error);

    CU_ASSERT_EQUAL(race_permanent, 0);
    CU_ASSERT_EQUAL(race_gave_up, 0);
    int bad = 0;
    for (size_t i = 0; i < RACE_ORDERS; i++)
        if (atomic_load(&race_winners[i]) != 1 && bad++ < 5)
            fprintf(stderr, "  order %zu: %d winners\n", RACE_FIRST_ID + i, atomic_load(&race_winners[i]));
    CU_ASSERT_EQUAL(bad, 0);
    CU_ASSERT_EQUAL(race_paid_wins + race_cancel_wins, RACE_ORDERS);
    CU_ASSERT_EQUAL(race_not_pending, RACE_ORDERS * 3);
    CU_ASSERT_TRUE(race_paid_wins > 0 && race_cancel_wins > 0); /* both sides did win sometimes */

    of_report_t r;
    assert_invariant(&r);
    CU_ASSERT_EQUAL(r.orders, RACE_ORDERS);
    CU_ASSERT_EQUAL(r.pending, 0);
    CU_ASSERT_EQUAL(r.paid, race_paid_wins);
    CU_ASSERT_EQUAL(r.cancelled, race_cancel_wins);
    CU_ASSERT_EQUAL(r.paid_and_cancelled, 0);
    CU_ASSERT_EQUAL(r.reserved, 0);
    CU_ASSERT_EQUAL(r.received, r0.received); /* nothing created or lost */
    CU_ASSERT_EQUAL(r.sold + r.available, r0.received);
    CU_ASSERT_EQUAL(r.sold, sql_scalarf(admin, "SELECT SUM(i.qty) FROM order_items i JOIN orders o ON o.id = i.order_id"
                                               " WHERE o.status = 'paid'"));
    CU_ASSERT_EQUAL(r.available,
                    r0.available + sql_scalarf(admin, "SELECT SUM(i.qty) FROM order_items i JOIN orders o"
                                                      " ON o.id = i.order_id WHERE o.status = 'cancelled'"));
    CU_ASSERT_EQUAL(r.outbox_open_final, 0);
    hg_order_db_close(db);
}

/* ---------------------------------------------------------------- suite "faults" */

static int faults_init(void)
{
    return db_suite_init("faults");
}

typedef struct attempt {
    hg_order_db *db;
    uint64_t order_id;
    int rc;
    hg_order_outcome_t outcome;
    hg_order_error_t err;
} attempt_t;

static void *attempt_cancel(void *arg)
{
    attempt_t *a = arg;
    a->rc = hg_order_cancel(a->db, a->order_id, "timeout-message", &a->outcome, &a->err);
    return NULL;
}

/* Poll until connection cid waits for a row lock. InnoDB refreshes the
 * INNODB_TRX snapshot only when it was not read for 100 ms: poll slower. */
typedef struct lock_probe {
    MYSQL *m;
    unsigned long cid;
} lock_probe_t;

static int waits_for_lock(void *arg)
{
    lock_probe_t *p = arg;
    return sql_scalarf(p->m,
                       "SELECT COUNT(*) FROM information_schema.INNODB_TRX WHERE trx_mysql_thread_id = %lu"
                       " AND trx_state = 'LOCK WAIT'",
                       p->cid) == 1;
}

/* Cancel with a retry and backoff until a definite outcome (or 20 attempts);
 * returns the number of attempts. */
static int cancel_with_retry(hg_order_db *db, uint64_t id, hg_order_outcome_t *out, unsigned *codes, int maxcodes)
{
    hg_order_error_t err;
    for (int attempt = 1; attempt <= 20; attempt++) {
        if (hg_order_cancel(db, id, "timeout-message", out, &err) == 0 || *out != HG_ORDER_TRANSIENT)
            return attempt;
        printf("\n    attempt %d: transient: %s", attempt, err.message);
        if (attempt - 1 < maxcodes)
            codes[attempt - 1] = err.code;
        sleep_ms(50u << (attempt < 4 ? attempt : 4));
    }
    return 21;
}

/* The worker waits on a lock the test holds, then a second session kills it
 * (KILL CONNECTION or KILL QUERY). lock_order: hold the order row (the worker
 * waits in the claim) or the stock rows (the worker holds its claim and waits
 * in the side effect). */
static void kill_mid_transaction(uint64_t id, const char *kill, int lock_order)
{
    hg_order_db *db = open_db(NULL, 0);
    CU_ASSERT_PTR_NOT_NULL_FATAL(db);
    seed(id, 1, 5, 30 * 60 * 1000);
    order_stock_t before, after;
    stock_of(id, &before);

    MYSQL *locker = connect_root(database);
    CU_ASSERT_PTR_NOT_NULL_FATAL(locker);
    if (lock_order) {
        CU_ASSERT_EQUAL_FATAL(sql_execf(locker, "START TRANSACTION"), 0);
        CU_ASSERT_EQUAL_FATAL(sql_execf(locker, "SELECT * FROM orders WHERE id = %" PRIu64 " FOR UPDATE", id), 0);
    } else {
        lock_stock_of(locker, id);
    }

    attempt_t a = { .db = db, .order_id = id };
    unsigned long cid = hg_order_db_connection_id(db);
    CU_ASSERT_TRUE_FATAL(cid != 0);
    pthread_t th;
    CU_ASSERT_EQUAL_FATAL(pthread_create(&th, NULL, attempt_cancel, &a), 0);
    lock_probe_t probe = { admin, cid };
    CU_ASSERT_EQUAL(tu_poll_until(waits_for_lock, &probe, 10000, 150), 0);
    if (!lock_order) /* the worker's claim is in: the order row is locked by it */
        CU_ASSERT_EQUAL(sql_scalarf(admin,
                                    "SELECT COUNT(*) FROM information_schema.INNODB_TRX"
                                    " WHERE trx_mysql_thread_id = %lu AND trx_rows_modified >= 1",
                                    cid),
                        1);
    CU_ASSERT_EQUAL(sql_execf(admin, "%s %lu", kill, cid), 0);
    pthread_join(th, NULL);

    printf("\n    %s while %s: rc %d, %s, %s\n", kill, lock_order ? "waiting in the claim" : "holding the claim", a.rc,
           hg_order_outcome_name(a.outcome), a.err.message);
    CU_ASSERT_EQUAL(a.rc, -1);
    CU_ASSERT_EQUAL(a.outcome, HG_ORDER_TRANSIENT);

    /* Release the lock; the worker's half transaction must be gone: a locking
     * read waits for its rollback and sees the order pending. */
    CU_ASSERT_EQUAL(sql_execf(locker, "ROLLBACK"), 0);
    char status[32];
    text_of(admin, status, sizeof status, "SELECT status FROM orders WHERE id = %" PRIu64 " FOR UPDATE", id);
    CU_ASSERT_STRING_EQUAL(status, "pending");
    stock_of(id, &after);
    assert_stock_moved(&before, &after, MOVE_NONE);

    hg_order_outcome_t out;
    unsigned codes[4] = { 0 };
    int attempts = cancel_with_retry(db, id, &out, codes, 4);
    CU_ASSERT_EQUAL(attempts, 1);
    CU_ASSERT_EQUAL(out, HG_ORDER_CANCELLED);
    if (strcmp(kill, "KILL QUERY") == 0) {
        CU_ASSERT_EQUAL(a.err.code, 1317);
        CU_ASSERT_EQUAL(hg_order_db_connects(db), 1); /* the connection survived */
    } else {
        CU_ASSERT_EQUAL(hg_order_db_connects(db), 2); /* reconnected, re-prepared */
        CU_ASSERT_NOT_EQUAL(hg_order_db_connection_id(db), cid);
    }

    /* exact end state */
    order_status(id, status, sizeof status);
    CU_ASSERT_STRING_EQUAL(status, "cancelled");
    text_of(admin, status, sizeof status, "SELECT status FROM order_timeout_msg WHERE order_id = %" PRIu64, id);
    CU_ASSERT_STRING_EQUAL(status, "done");
    stock_of(id, &after);
    assert_stock_moved(&before, &after, MOVE_CANCEL);
    CU_ASSERT_EQUAL(hg_order_cancel(db, id, "timeout-message", &out, NULL), 0);
    CU_ASSERT_EQUAL(out, HG_ORDER_NOT_PENDING);
    assert_invariant(NULL);
    mysql_close(locker);
    hg_order_db_close(db);
}

static void test_kill_connection_holding_claim(void)
{
    kill_mid_transaction(10, "KILL CONNECTION", 0);
}
static void test_kill_connection_in_claim(void)
{
    kill_mid_transaction(11, "KILL CONNECTION", 1);
}
static void test_kill_query_holding_claim(void)
{
    kill_mid_transaction(12, "KILL QUERY", 0);
}
static void test_kill_query_in_claim(void)
{
    kill_mid_transaction(13, "KILL QUERY", 1);
}

/* A stock row held past innodb_lock_wait_timeout (1 s for the worker's
 * session): attempts fail with 1205 and roll back, the retry with backoff
 * succeeds once the lock is gone. */
typedef struct retry_run {
    hg_order_db *db;
    uint64_t id;
    hg_order_outcome_t out;
    unsigned codes[8];
    int attempts;
} retry_run_t;

static void *retry_thread(void *arg)
{
    retry_run_t *r = arg;
    r->attempts = cancel_with_retry(r->db, r->id, &r->out, r->codes, 8);
    return NULL;
}

static void test_lock_wait_timeout(void)
{
    const uint64_t id = 20;
    hg_order_db *db = open_db(NULL, 1);
    CU_ASSERT_PTR_NOT_NULL_FATAL(db);
    seed(id, 1, 5, 30 * 60 * 1000);
    CU_ASSERT_EQUAL(sql_scalarf(admin, "SELECT VARIABLE_VALUE FROM information_schema.SESSION_VARIABLES"
                                       " WHERE VARIABLE_NAME = 'INNODB_LOCK_WAIT_TIMEOUT'"),
                    50); /* ours only */
    order_stock_t before, after;
    stock_of(id, &before);

    MYSQL *locker = connect_root(database);
    CU_ASSERT_PTR_NOT_NULL_FATAL(locker);
    lock_stock_of(locker, id);
    retry_run_t r = { .db = db, .id = id };
    pthread_t th;
    uint64_t t0 = tu_now_mono_ms();
    CU_ASSERT_EQUAL_FATAL(pthread_create(&th, NULL, retry_thread, &r), 0);
    sleep_ms(2500); /* two or three attempts time out meanwhile */
    CU_ASSERT_EQUAL(sql_execf(locker, "ROLLBACK"), 0);
    pthread_join(th, NULL);
    printf("\n    lock held 2.5 s, innodb_lock_wait_timeout 1 s: %d attempts in %" PRIu64 " ms, then %s\n", r.attempts,
           tu_now_mono_ms() - t0, hg_order_outcome_name(r.out));

    CU_ASSERT_TRUE(r.attempts >= 2 && r.attempts <= 20);
    CU_ASSERT_EQUAL(r.out, HG_ORDER_CANCELLED);
    CU_ASSERT_EQUAL(r.codes[0], 1205);
    CU_ASSERT_EQUAL(hg_order_db_connects(db), 1); /* a lock wait does not cost the connection */
    char status[32];
    order_status(id, status, sizeof status);
    CU_ASSERT_STRING_EQUAL(status, "cancelled");
    stock_of(id, &after);
    assert_stock_moved(&before, &after, MOVE_CANCEL);
    assert_invariant(NULL);
    mysql_close(locker);
    hg_order_db_close(db);
}

/* Killed while idle: the next call finds the connection gone (transient),
 * the one after reconnects. */
static void test_killed_while_idle(void)
{
    const uint64_t id = 30;
    hg_order_db *db = open_db(NULL, 0);
    CU_ASSERT_PTR_NOT_NULL_FATAL(db);
    seed(id, 2, 5, 30 * 60 * 1000);
    order_stock_t before, after;
    stock_of(id, &before);
    hg_order_outcome_t out;
    hg_order_error_t err;
    CU_ASSERT_EQUAL(hg_order_cancel(db, id + 1, "x", &out, &err), 0); /* statements prepared */
    CU_ASSERT_EQUAL_FATAL(sql_execf(admin, "KILL CONNECTION %lu", hg_order_db_connection_id(db)), 0);
    sleep_ms(100);
    CU_ASSERT_EQUAL(hg_order_cancel(db, id, "timeout-message", &out, &err), -1);
    printf("\n    killed while idle: %s, %s\n", hg_order_outcome_name(out), err.message);
    CU_ASSERT_EQUAL(out, HG_ORDER_TRANSIENT);
    CU_ASSERT_EQUAL(hg_order_db_connection_id(db), 0);
    CU_ASSERT_EQUAL(hg_order_cancel(db, id, "timeout-message", &out, &err), 0);
    CU_ASSERT_EQUAL(out, HG_ORDER_CANCELLED);
    CU_ASSERT_EQUAL(hg_order_db_connects(db), 2);
    stock_of(id, &after);
    assert_stock_moved(&before, &after, MOVE_CANCEL);
    assert_invariant(NULL);
    hg_order_db_close(db);
}

/* ---------------------------------------------------------------- suite "explain" */

static int explain_init(void)
{
    return db_suite_init("overdue");
}

static void test_overdue_query_uses_index(void)
{
    hg_order_db *db = open_db(NULL, 0);
    CU_ASSERT_PTR_NOT_NULL_FATAL(db);
    /* 6 000 orders: past and future expiry, a third no longer pending. */
    seed(1, 2000, 50, -3600 * 1000);
    seed(10001, 2000, 50, 3600 * 1000);
    seed(20001, 2000, 50, 7200 * 1000);
    hg_order_outcome_t out;
    for (uint64_t id = 10001; id <= 12000; id++)
        CU_ASSERT_EQUAL_FATAL(id % 2 ? hg_order_pay(db, id, &out, NULL) : hg_order_cancel(db, id, "x", &out, NULL), 0);
    CU_ASSERT_EQUAL_FATAL(sql_execf(admin, "ANALYZE TABLE orders"), 0);

    const char *q = "EXPLAIN SELECT id FROM orders WHERE status='pending' AND expire_at < NOW(6)"
                    " ORDER BY expire_at LIMIT 100";
    CU_ASSERT_EQUAL_FATAL(mysql_query(admin, q), 0);
    MYSQL_RES *res = mysql_store_result(admin);
    CU_ASSERT_PTR_NOT_NULL_FATAL(res);
    MYSQL_FIELD *f = mysql_fetch_fields(res);
    int key = -1, extra = -1, type = -1;
    for (unsigned i = 0; i < mysql_num_fields(res); i++) {
        if (strcmp(f[i].name, "key") == 0)
            key = (int)i;
        if (strcmp(f[i].name, "Extra") == 0)
            extra = (int)i;
        if (strcmp(f[i].name, "type") == 0)
            type = (int)i;
    }
    MYSQL_ROW row = mysql_fetch_row(res);
    CU_ASSERT_PTR_NOT_NULL_FATAL(row);
    CU_ASSERT_TRUE_FATAL(key >= 0 && extra >= 0 && type >= 0);
    printf("\n    EXPLAIN: type=%s key=%s Extra=%s\n", row[type], row[key] ? row[key] : "NULL",
           row[extra] ? row[extra] : "");
    CU_ASSERT_PTR_NOT_NULL_FATAL(row[key]);
    CU_ASSERT_STRING_EQUAL(row[key], "status_expire");
    CU_ASSERT_STRING_EQUAL(row[type], "range");
    CU_ASSERT_PTR_NULL(row[extra] != NULL ? strstr(row[extra], "filesort") : NULL);
    mysql_free_result(res);
    hg_order_db_close(db);
}

/* ---------------------------------------------------------------- registry */

static int add_suites(void)
{
    CU_pSuite s = CU_add_suite("sql", NULL, NULL);
    if (s == NULL || CU_add_test(s, "default statements are valid", test_sql_defaults_valid) == NULL ||
        CU_add_test(s, "placeholders counted outside strings and comments", test_sql_placeholders) == NULL ||
        CU_add_test(s, ":reason translated, bind order kept", test_sql_translate) == NULL ||
        CU_add_test(s, "validation names the field", test_sql_validate_names_field) == NULL ||
        CU_add_test(s, "script split on top-level semicolons", test_sql_split) == NULL ||
        CU_add_test(s, "compiled-in schema equals sql/schema.sql", test_schema_matches_file) == NULL ||
        CU_add_test(s, "payload → order id", test_parse_id) == NULL ||
        CU_add_test(s, "error classification", test_classify) == NULL)
        return -1;

    s = CU_add_suite("cancel", cancel_init, db_suite_cleanup);
    if (s == NULL ||
        CU_add_test(s, "cancel, duplicate, unknown, pay vs cancel both ways", test_cancel_outcomes) == NULL ||
        CU_add_test(s, "custom schema through configured SQL", test_custom_sql) == NULL ||
        CU_add_test(s, "open errors name the cause", test_open_errors) == NULL ||
        CU_add_test(s, "seed is atomic; check catches defects", test_seed_and_check_detect_defects) == NULL)
        return -1;

    s = CU_add_suite("race", race_init, db_suite_cleanup);
    if (s == NULL || CU_add_test(s, "2000 orders: 1 payment + 3 cancels each, 8 threads",
                                 test_race_pay_and_duplicate_cancels) == NULL)
        return -1;

    s = CU_add_suite("faults", faults_init, db_suite_cleanup);
    if (s == NULL ||
        CU_add_test(s, "KILL CONNECTION while holding the claim", test_kill_connection_holding_claim) == NULL ||
        CU_add_test(s, "KILL CONNECTION while waiting in the claim", test_kill_connection_in_claim) == NULL ||
        CU_add_test(s, "KILL QUERY while holding the claim", test_kill_query_holding_claim) == NULL ||
        CU_add_test(s, "KILL QUERY while waiting in the claim", test_kill_query_in_claim) == NULL ||
        CU_add_test(s, "row lock held past innodb_lock_wait_timeout", test_lock_wait_timeout) == NULL ||
        CU_add_test(s, "connection killed while idle", test_killed_while_idle) == NULL)
        return -1;

    s = CU_add_suite("explain", explain_init, db_suite_cleanup);
    if (s == NULL || CU_add_test(s, "overdue query uses (status, expire_at)", test_overdue_query_uses_index) == NULL)
        return -1;
    return 0;
}

int main(int argc, char **argv)
{
    hg_order_library_init();
    return tu_cunit_main(argc, argv, add_suites);
}
