/*
 * tests/integration/test_order_outbox.c — the order service's half of the
 * fast path (hg_order_timeout_*, hg_order_db_commit / _rollback /
 * _mysql) against a private MariaDB (tu_mariadb_start; a server that cannot
 * start FAILS the suite), the real ./hourglass-broker, the real
 * ./hourglass-consumer and, for the relay, ./hourglass-compensator --once.
 *
 * One database "shop" and one consumer (group order-cancel, topic
 * order-timeout) for the suite; each test uses its own range of order ids.
 * A spy group (created FROM NOW before any send) sees every message of the
 * topic, so a test can check what the fast path sent: payload and KEY the
 * order id, due time no earlier than expire_at. Orders expire in 1-2 s;
 * every wait polls with a deadline.
 *
 * Suite "outbox", one test per failure case of docs/order-service.md:
 *   fast path     create + commit + publish: row 'sent', the message's
 *                 payload, KEY and due time, the cancel at expiry
 *   rollback      no order and no outbox row after a rollback; a second
 *                 outbox row for an order is 1062 (permanent); bad arguments
 *   commit lost   KILL CONNECTION before COMMIT: -1, transient, nothing
 *                 written, the handle reconnects for the next order
 *   send fails    broker unreachable: SEND_FAILED, row stays 'new', the relay
 *                 sends it, the consumer cancels on time
 *   dies          a child process commits and _exit()s before the SEND: the
 *                 relay sends, the consumer cancels
 *   paid between  the payment lands between COMMIT and "mark sent": the guard
 *                 keeps the row 'done', the order stays paid when the message
 *                 arrives
 *   mark fails    the connection dies before "mark sent": the row stays 'new',
 *                 the relay sends it again — DEDUP answers the first id, one
 *                 message — and the order is cancelled once
 *   refund        a payment after the cancel answers NOT_PENDING on a
 *                 cancelled order (the refund the shop owes); stock returned
 *                 once
 *   pay revokes   hg_order_pay_revoke takes the paid order's message back:
 *                 it never reaches a group (without a client it is not tried)
 *
 * The relay sends with DEDUP, so "mark fails" ends with one message, not two.
 */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include <CUnit/CUnit.h>

#include "include/hourglass/hourglass.h"
#include "include/hourglass/order.h"
#include "tests/helpers/broker_proc.h"
#include "tests/helpers/order_env.h"
#include "tests/helpers/testutil.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <mysql.h>

#define COMPENSATOR_BIN HG_BUILDDIR "/hourglass-compensator"
#define DB              "shop"
#define GROUP           "order-cancel"
#define SPY             "spy"
#define SKUS            5
#define QTY             2 /* every test order: one item of QTY units of SKU 1 + id % SKUS */

static oe_env_t env;
static char workdir[512];
static pid_t consumer_pid;
static int consumer_metrics;
static char consumer_log[600];
static char uri[64];
static rc_conn_t spy;
static hg_order_db *db;  /* the order service's handle */
static hg_order_db *pay; /* the payment path's handle */
static hg_client_t *client;

static void sleep_ms(int ms)
{
    struct timespec ts = { ms / 1000, (long)(ms % 1000) * 1000000L };
    nanosleep(&ts, NULL);
}

static uint64_t now_ms(void)
{
    return tu_now_wall_ms();
}


static long long wait_metric(const char *name, long long want, int deadline_ms)
{
    uint64_t end = tu_now_mono_ms() + (uint64_t)deadline_ms;
    for (;;) {
        long long v = oe_metric(consumer_metrics, name);
        if (v >= want || tu_now_mono_ms() >= end)
            return v;
        sleep_ms(20);
    }
}

/* The order service's transaction for order id: the order, one item, the
 * stock reservation and the outbox row, then COMMIT. stop_before (1..4)
 * stops after that many steps without committing (the transaction is left
 * open for the caller). Returns 0, or -1 with err filled (rolled back). */
static int create_order(hg_order_db *h, uint64_t id, uint64_t expire_ms, uint32_t relay_after_ms, int stop_before,
                        hg_order_error_t *err)
{
    MYSQL *m = hg_order_db_mysql(h, err);
    if (m == NULL)
        return -1;
    char sql[512];
    const char *steps[3];
    char s0[512], s1[256], s2[256];
    snprintf(s0, sizeof s0,
             "INSERT INTO orders (id, user_id, status, created_at, expire_at)"
             " VALUES (%" PRIu64 ", 7, 'pending', NOW(6), FROM_UNIXTIME(%" PRIu64 ".%03u))",
             id, expire_ms / 1000, (unsigned)(expire_ms % 1000));
    snprintf(s1, sizeof s1, "INSERT INTO order_items (order_id, sku_id, qty) VALUES (%" PRIu64 ", %" PRIu64 ", %d)", id,
             1 + id % SKUS, QTY);
    snprintf(s2, sizeof s2,
             "UPDATE stock SET available = available - %d, reserved = reserved + %d"
             " WHERE sku_id = %" PRIu64 " AND available >= %d",
             QTY, QTY, 1 + id % SKUS, QTY);
    steps[0] = s0;
    steps[1] = s1;
    steps[2] = s2;
    for (int i = 0; i < 3; i++) {
        if (stop_before == i + 1)
            return 0;
        snprintf(sql, sizeof sql, "%s", steps[i]);
        if (mysql_query(m, sql) != 0) {
            snprintf(err->message, sizeof err->message, "%.200s: %.250s", sql, mysql_error(m));
            err->code = mysql_errno(m);
            hg_order_db_rollback(h);
            return -1;
        }
    }
    if (hg_order_timeout_create(h, id, expire_ms, relay_after_ms, err) != 0) {
        hg_order_db_rollback(h);
        return -1;
    }
    if (stop_before == 4)
        return 0;
    return hg_order_db_commit(h, err);
}

/* Orders first..last created (committed) with expiry expire_ms. */
static int create_orders(uint64_t first, uint64_t last, uint64_t expire_ms, uint32_t relay_after_ms)
{
    hg_order_error_t err = { 0 };
    for (uint64_t id = first; id <= last; id++)
        if (create_order(db, id, expire_ms, relay_after_ms, 0, &err) != 0) {
            fprintf(stderr, "\n  create order %" PRIu64 ": %s\n", id, err.message);
            return -1;
        }
    return 0;
}

/* Run the relay once (hourglass-compensator --once --layers relay) until
 * no outbox row of first..last is 'new' any more: sent (the consumer may
 * already have marked it 'done' when the order expired meanwhile on a slow
 * machine). The rows become due at their next_attempt_at. Returns the number
 * still 'new'. */
static long long relay_until_sent(uint64_t first, uint64_t last, int deadline_ms)
{
    char out[4096];
    const char *argv[] = { COMPENSATOR_BIN,
                           "--once",
                           "--layers",
                           "relay",
                           "--uri",
                           uri,
                           "--topic",
                           "order-timeout",
                           "--mysql-socket",
                           env.server.socket,
                           "--mysql-user",
                           "root",
                           "--mysql-database",
                           DB,
                           "--log-level",
                           "warn",
                           "--dlq-groups",
                           "none",
                           NULL };
    uint64_t end = tu_now_mono_ms() + (uint64_t)deadline_ms;
    long long left;
    for (;;) {
        int rc = tu_run_capture(argv, out, sizeof out);
        TU_CHECK(rc == 0, "hourglass-compensator --once --layers relay exited %d:\n%s", rc, out);
        left = oe_scalarf(&env,
                          "SELECT COUNT(*) FROM order_timeout_msg WHERE order_id BETWEEN %" PRIu64 " AND %" PRIu64
                          " AND status = 'new'", /* sent; the consumer may have marked it done already */
                          first, last);
        if (left == 0 || rc != 0 || tu_now_mono_ms() >= end)
            return left;
        sleep_ms(50);
    }
}

/* Read the spy group until n messages of ids first..last arrived (or the
 * deadline); checks payload = KEY = the id and the due time against
 * expire_ms (never early, at most 1.1 s late: a relay run after expiry sends at once).
 * Returns the number seen. */
static int spy_expect(uint64_t first, uint64_t last, uint64_t expire_ms, int n, int deadline_ms)
{
    int seen = 0;
    uint64_t end = tu_now_mono_ms() + (uint64_t)deadline_ms;
    char err[512];
    while (seen < n && tu_now_mono_ms() < end) {
        resp_reply_t *r = bp_pull(&spy, err, sizeof err, SPY, "order-timeout", "COUNT", "100", "BLOCK", "200", NULL);
        TU_REQUIRE(r != NULL, "spy PULL: %s", err);
        for (size_t i = 0; i < r->count; i++) {
            rc_msg_t msg;
            TU_REQUIRE(rc_msg_at(r, i, &msg, err, sizeof err) == 0, "spy message: %s", err);
            char payload[32], key[32];
            snprintf(payload, sizeof payload, "%.*s", (int)msg.payload_len, msg.payload);
            snprintf(key, sizeof key, "%.*s", (int)msg.key_len, msg.key);
            uint64_t id = strtoull(payload, NULL, 10);
            TU_CHECK(strcmp(payload, key) == 0, "message payload '%s', KEY '%s': want the same order id", payload, key);
            if (id < first || id > last)
                continue; /* another test's message (a relayed duplicate) */
            TU_CHECK(msg.due_ms + 5 >= expire_ms, "order %" PRIu64 ": due %" PRIu64 " before expire_at %" PRIu64, id,
                     msg.due_ms, expire_ms);
            TU_CHECK(msg.due_ms <= expire_ms + 1100, "order %" PRIu64 ": due %" PRIu64 " ms after expire_at", id,
                     msg.due_ms - expire_ms);
            seen++;
        }
        resp_reply_free(r);
    }
    return seen;
}

/* Orders first..last: all cancelled by the message (reason timeout-message),
 * never before expire_at, outbox rows 'done'. */
static void expect_cancelled(uint64_t first, uint64_t last, int deadline_ms)
{
    long long n = (long long)(last - first + 1);
    long long got = oe_wait_scalar(&env, n, deadline_ms,
                                   "SELECT COUNT(*) FROM orders WHERE id BETWEEN %" PRIu64 " AND %" PRIu64
                                   " AND status = 'cancelled'",
                                   first, last);
    TU_CHECK(got == n, "orders %" PRIu64 "..%" PRIu64 ": %lld cancelled, want %lld", first, last, got, n);
    long long early = oe_scalarf(
        &env, "SELECT COUNT(*) FROM orders WHERE id BETWEEN %" PRIu64 " AND %" PRIu64 " AND cancelled_at < expire_at",
        first, last);
    TU_CHECK(early == 0, "%lld orders cancelled before expire_at", early);
    long long reason = oe_scalarf(&env,
                                  "SELECT COUNT(*) FROM orders WHERE id BETWEEN %" PRIu64 " AND %" PRIu64
                                  " AND cancel_reason = 'timeout-message'",
                                  first, last);
    TU_CHECK(reason == n, "%lld of %lld cancelled by the message (timeout-message)", reason, n);
    long long open_rows = oe_scalarf(&env,
                                     "SELECT COUNT(*) FROM order_timeout_msg WHERE order_id BETWEEN %" PRIu64
                                     " AND %" PRIu64 " AND status <> 'done'",
                                     first, last);
    TU_CHECK(open_rows == 0, "%lld outbox rows not 'done' after the cancel", open_rows);
}

static void expect_invariant(void)
{
    of_report_t rep;
    hg_order_error_t err = { 0 };
    TU_REQUIRE(oe_check(&env, DB, 3600, &rep, &err) == 0, "of_check: %s", err.message);
    char text[1024];
    of_report_format(&rep, text, sizeof text);
    TU_CHECK(rep.ok, "invariant broken: %s\n%s", rep.first_defect, text);
}

/* ---------------------------------------------------------------- suite */

static int outbox_init(void)
{
    if (oe_suite_start(&env, CU_get_number_of_failures) != 0)
        return -1;
    if (tu_mkdtemp("outbox", workdir, sizeof workdir) != 0)
        return -1;
    snprintf(uri, sizeof uri, "hourglass://127.0.0.1:%d", env.broker.port);
    char err[512];
    if (bp_connect(&env.broker, &spy, err, sizeof err) != 0 ||
        bp_ok_cmd(&spy, err, sizeof err, "GROUP", "CREATE", SPY, "order-timeout", "FROM", "NOW", NULL) != 0 ||
        bp_ok_cmd(&spy, err, sizeof err, "GROUP", "CREATE", GROUP, "order-timeout", "FROM", "NOW", NULL) != 0) {
        fprintf(stderr, "\nFAIL: broker set-up: %s\n", err);
        return -1;
    }
    db = oe_fresh_database(&env, DB, 0, NULL);
    if (db == NULL)
        return -1;
    /* oe_fresh_database seeded the stock: SKUs 1..30 with 10^6 units each. */
    if (mysql_select_db(env.admin, DB) != 0) {
        fprintf(stderr, "\nFAIL: USE " DB ": %s\n", mysql_error(env.admin));
        return -1;
    }
    hg_order_error_t oerr = { 0 };
    pay = oe_open_db(&env, DB, &oerr);
    if (pay == NULL) {
        fprintf(stderr, "\nFAIL: payment handle: %s\n", oerr.message);
        return -1;
    }
    hg_client_opts_t o;
    hg_client_opts_init(&o);
    hg_error_t cerr = { 0 };
    if (hg_client_open(uri, &o, &client, &cerr) != HG_OK) {
        fprintf(stderr, "\nFAIL: client: %s\n", cerr.message);
        return -1;
    }
    consumer_metrics = tu_free_port();
    snprintf(consumer_log, sizeof consumer_log, "%s/consumer.log", workdir);
    consumer_pid = oe_start_consumer(&env, DB, GROUP, 2, consumer_metrics, consumer_log, NULL);
    if (consumer_pid < 0 || wait_metric("hourglass_consumer_delivered_total", 0, 10000) < 0) {
        fprintf(stderr, "\nFAIL: hourglass-consumer did not start\n");
        oe_print_file(consumer_log);
        return -1;
    }
    return 0;
}

static int outbox_cleanup(void)
{
    if (consumer_pid > 0) {
        int rc = oe_stop_consumer(consumer_pid);
        if (rc != 0 || CU_get_number_of_failures() > 0)
            oe_print_file(consumer_log);
    }
    hg_client_close(client);
    hg_order_db_close(db);
    hg_order_db_close(pay);
    rc_close(&spy);
    oe_stop(&env);
    if (workdir[0] != '\0')
        tu_rmtree(workdir);
    return 0;
}

/* ---------------------------------------------------------------- tests */

static void test_fast_path(void)
{
    uint64_t expire = now_ms() + 1500;
    TU_REQUIRE(create_orders(101, 105, expire, 0) == 0, "create");
    TU_CHECK(oe_scalarf(&env,
                        "SELECT COUNT(*) FROM order_timeout_msg WHERE order_id BETWEEN 101 AND 105 AND status='new'"
                        " AND attempts = 0 AND expire_at = (SELECT expire_at FROM orders WHERE id = order_id)") == 5,
             "5 outbox rows 'new' with the order's expire_at");
    TU_CHECK(oe_scalarf(&env, "SELECT COUNT(*) FROM order_timeout_msg WHERE order_id BETWEEN 101 AND 105"
                              " AND next_attempt_at <= expire_at AND next_attempt_at > NOW(6)") == 5,
             "next_attempt_at after now, no later than expire_at");
    for (uint64_t id = 101; id <= 105; id++) {
        char mid[HG_ID_MAX], why[256];
        hg_order_publish_outcome_t o = hg_order_timeout_publish(db, client, NULL, id, expire, mid, why, sizeof why);
        TU_CHECK(o == HG_ORDER_PUBLISH_SENT, "order %" PRIu64 ": publish %s (%s)", id, hg_order_publish_outcome_name(o),
                 why);
        TU_CHECK(strlen(mid) == 16, "message id '%s'", mid);
    }
    TU_CHECK(oe_scalarf(&env,
                        "SELECT COUNT(*) FROM order_timeout_msg WHERE order_id BETWEEN 101 AND 105 AND status='sent'"
                        " AND attempts = 1") == 5,
             "rows marked 'sent'");
    TU_CHECK(spy_expect(101, 105, expire, 5, 10000) == 5, "the 5 messages reached the spy group");
    expect_cancelled(101, 105, 10000);
    TU_CHECK(oe_scalarf(&env, "SELECT SUM(reserved) FROM stock") == 0, "stock reserved back to 0");
    expect_invariant();
}

static void test_rollback(void)
{
    hg_order_error_t err = { 0 };
    uint64_t expire = now_ms() + 60000;
    long long available = oe_scalarf(&env, "SELECT SUM(available) FROM stock");
    TU_REQUIRE(create_order(db, 201, expire, 0, 4, &err) == 0, "open transaction: %s", err.message);
    hg_order_db_rollback(db);
    TU_CHECK(oe_scalarf(&env, "SELECT COUNT(*) FROM orders WHERE id = 201") == 0, "order gone after rollback");
    TU_CHECK(oe_scalarf(&env, "SELECT COUNT(*) FROM order_timeout_msg WHERE order_id = 201") == 0, "outbox row gone");
    TU_CHECK(oe_scalarf(&env, "SELECT SUM(available) FROM stock") == available, "stock reservation rolled back");

    /* A second outbox row for an order is a duplicate key: permanent. */
    TU_REQUIRE(create_order(db, 202, expire, 0, 0, &err) == 0, "create 202: %s", err.message);
    TU_CHECK(hg_order_timeout_create(db, 202, expire, 0, &err) == -1, "second outbox row refused");
    TU_CHECK(err.code == 1062, "error %u %s, want 1062", err.code, err.message);
    TU_CHECK(hg_order_classify(err.code) == HG_ORDER_PERMANENT, "1062 is permanent");
    TU_CHECK(strncmp(err.message, "outbox insert: 1062", 19) == 0, "message '%s'", err.message);
    hg_order_db_rollback(db);

    /* Arguments. */
    TU_CHECK(hg_order_timeout_create(db, 0, expire, 0, &err) == -1 && err.code == 0, "order id 0 refused");
    TU_CHECK(strstr(err.message, "order id 0") != NULL, "message '%s'", err.message);
    TU_CHECK(hg_order_timeout_create(db, 203, 0, 0, &err) == -1 && err.code == 0, "expire_at_ms 0 refused");
    TU_CHECK(hg_order_timeout_create(NULL, 203, expire, 0, &err) == -1, "NULL handle refused");
    TU_CHECK(hg_order_timeout_send(NULL, NULL, 203, expire, NULL) == HG_ERR_ARG, "NULL client refused");
    /* The declaration is the documented one: it returns an hg_err_t (an int
     * here would not compile: -Werror=incompatible-pointer-types). */
    hg_err_t (*send_fn)(hg_client_t *, const char *, uint64_t, uint64_t, char *) = hg_order_timeout_send;
    TU_CHECK(send_fn != NULL, "hg_order_timeout_send has the documented type");
    TU_CHECK(hg_order_db_commit(NULL, &err) == -1, "commit of NULL refused");
    hg_order_db_rollback(NULL);
    TU_CHECK(strcmp(hg_order_publish_outcome_name(HG_ORDER_PUBLISH_SENT_KEPT), "sent-kept") == 0, "names");
    TU_CHECK(strcmp(hg_order_publish_outcome_name((hg_order_publish_outcome_t)42), "unknown") == 0, "unknown");

    /* 202 is pending for a minute: cancel it so the suite's invariant holds. */
    hg_order_outcome_t o;
    TU_CHECK(hg_order_cancel(pay, 202, "manual", &o, &err) == 0 && o == HG_ORDER_CANCELLED, "cancel 202: %s",
             err.message);
}

static void test_commit_lost(void)
{
    hg_order_error_t err = { 0 };
    uint64_t expire = now_ms() + 60000;
    uint64_t connects = hg_order_db_connects(db);
    TU_REQUIRE(create_order(db, 301, expire, 0, 4, &err) == 0, "open transaction: %s", err.message);
    unsigned long conn = hg_order_db_connection_id(db);
    char sql[64];
    snprintf(sql, sizeof sql, "KILL CONNECTION %lu", conn);
    TU_REQUIRE(mysql_query(env.admin, sql) == 0, "%s: %s", sql, mysql_error(env.admin));
    TU_CHECK(hg_order_db_commit(db, &err) == -1, "commit on a killed connection fails");
    TU_CHECK(hg_order_classify(err.code) == HG_ORDER_TRANSIENT, "error %u (%s) is transient", err.code, err.message);
    TU_CHECK(strncmp(err.message, "commit: ", 8) == 0, "message '%s'", err.message);
    TU_CHECK(hg_order_db_connection_id(db) == 0, "handle disconnected after the failed commit");
    TU_CHECK(oe_scalarf(&env, "SELECT COUNT(*) FROM orders WHERE id = 301") == 0, "nothing committed: no order");
    TU_CHECK(oe_scalarf(&env, "SELECT COUNT(*) FROM order_timeout_msg WHERE order_id = 301") == 0,
             "nothing committed: no row");
    TU_CHECK(hg_order_db_commit(db, &err) == -1 && err.code == 2006, "commit without a connection: %u", err.code);

    /* The next order reconnects and commits. */
    TU_REQUIRE(create_order(db, 302, expire, 0, 0, &err) == 0, "create after the loss: %s", err.message);
    TU_CHECK(hg_order_db_connects(db) == connects + 1, "reconnected once");
    TU_CHECK(oe_scalarf(&env, "SELECT COUNT(*) FROM order_timeout_msg WHERE order_id = 302 AND status = 'new'") == 1,
             "302 committed");
    hg_order_outcome_t o;
    TU_CHECK(hg_order_cancel(pay, 302, "manual", &o, &err) == 0 && o == HG_ORDER_CANCELLED, "cancel 302");
}

static void test_send_fails_relay(void)
{
    int dead_port = tu_free_port();
    char dead_uri[64];
    snprintf(dead_uri, sizeof dead_uri, "hourglass://127.0.0.1:%d", dead_port);
    hg_client_opts_t o;
    hg_client_opts_init(&o);
    o.connect_timeout_ms = 300;
    o.reconnect = 0;
    hg_client_t *down = NULL;
    hg_error_t cerr = { 0 };
    /* A broker that is not there at all: the client cannot even open. */
    TU_CHECK(hg_client_open(dead_uri, &o, &down, &cerr) == HG_ERR_CONNECT, "client to a dead port: %s", cerr.message);

    uint64_t expire = now_ms() + 2000;
    TU_REQUIRE(create_orders(401, 404, expire, 100) == 0, "create");
    TU_REQUIRE(hg_client_open(uri, &o, &down, &cerr) == HG_OK, "client: %s", cerr.message);
    /* The broker goes away after the client connected: stop it. */
    char err[512];
    TU_REQUIRE(bp_stop(&env.broker, err, sizeof err) == 0, "stop broker: %s", err);
    for (uint64_t id = 401; id <= 404; id++) {
        char why[256];
        hg_order_publish_outcome_t out = hg_order_timeout_publish(db, down, NULL, id, expire, NULL, why, sizeof why);
        TU_CHECK(out == HG_ORDER_PUBLISH_SEND_FAILED, "order %" PRIu64 ": %s, want send-failed", id,
                 hg_order_publish_outcome_name(out));
        TU_CHECK(strncmp(why, "send: ", 6) == 0, "cause '%s'", why);
    }
    hg_client_close(down);
    TU_CHECK(oe_scalarf(&env, "SELECT COUNT(*) FROM order_timeout_msg WHERE order_id BETWEEN 401 AND 404"
                              " AND status = 'new' AND attempts = 0") == 4,
             "rows stay 'new' for the relay");
    TU_REQUIRE(bp_restart(&env.broker, err, sizeof err) == 0, "restart broker: %s", err);
    rc_close(&spy);
    TU_REQUIRE(bp_connect(&env.broker, &spy, err, sizeof err) == 0, "spy: %s", err);
    TU_CHECK(relay_until_sent(401, 404, 10000) == 0, "the relay sent every row");
    TU_CHECK(spy_expect(401, 404, expire, 4, 10000) == 4, "4 relayed messages, on time");
    expect_cancelled(401, 404, 10000);
    expect_invariant();
}

static void test_dies_before_send(void)
{
    uint64_t expire = now_ms() + 2000;
    pid_t pid = fork();
    if (pid == 0) {
        /* The service: its own handle, three orders committed, then it dies. */
        hg_order_error_t err = { 0 };
        hg_order_db *h = oe_open_db(&env, DB, &err);
        int ok = h != NULL;
        for (uint64_t id = 501; ok && id <= 503; id++)
            ok = create_order(h, id, expire, 100, 0, &err) == 0;
        if (!ok)
            fprintf(stderr, "child: %s\n", err.message);
        _exit(ok ? 0 : 1); /* no SEND, no close: as a crash */
    }
    TU_REQUIRE(pid > 0, "fork");
    int status = 0;
    waitpid(pid, &status, 0);
    TU_REQUIRE(WIFEXITED(status) && WEXITSTATUS(status) == 0, "the child committed its orders");
    TU_CHECK(oe_scalarf(&env,
                        "SELECT COUNT(*) FROM order_timeout_msg WHERE order_id BETWEEN 501 AND 503 AND status='new'") ==
                 3,
             "3 rows 'new', nothing sent");
    TU_CHECK(relay_until_sent(501, 503, 10000) == 0, "the relay sent every row");
    TU_CHECK(spy_expect(501, 503, expire, 3, 10000) == 3, "3 relayed messages, on time");
    expect_cancelled(501, 503, 10000);
    expect_invariant();
}

static void test_paid_between_commit_and_mark(void)
{
    hg_order_error_t err = { 0 };
    uint64_t expire = now_ms() + 1500;
    long long not_pending = oe_metric(consumer_metrics, "hourglass_consumer_not_pending_total");
    TU_REQUIRE(create_orders(601, 602, expire, 0) == 0, "create");

    /* 601: SEND, the payment, then "mark sent" — the guard keeps 'done'. */
    TU_CHECK(hg_order_timeout_send(client, NULL, 601, expire, NULL) == HG_OK, "send 601: %s", hg_client_errmsg(client));
    hg_order_outcome_t o;
    TU_CHECK(hg_order_pay(pay, 601, &o, &err) == 0 && o == HG_ORDER_PAID, "pay 601: %s", err.message);
    TU_CHECK(oe_scalarf(&env, "SELECT COUNT(*) FROM order_timeout_msg WHERE order_id = 601 AND status='done'") == 1,
             "the payment marked the row 'done'");
    int marked = -1;
    TU_CHECK(hg_order_timeout_mark_sent(db, 601, &marked, &err) == 0, "mark sent: %s", err.message);
    TU_CHECK(marked == 0, "the guard changed nothing (marked %d)", marked);
    TU_CHECK(oe_scalarf(&env, "SELECT COUNT(*) FROM order_timeout_msg WHERE order_id = 601 AND status='done'") == 1,
             "the row stays 'done'");

    /* 602: paid before the whole fast path — publish says sent-kept. */
    TU_CHECK(hg_order_pay(pay, 602, &o, &err) == 0 && o == HG_ORDER_PAID, "pay 602: %s", err.message);
    char why[256];
    hg_order_publish_outcome_t out = hg_order_timeout_publish(db, client, NULL, 602, expire, NULL, why, sizeof why);
    TU_CHECK(out == HG_ORDER_PUBLISH_SENT_KEPT, "602: %s, want sent-kept", hg_order_publish_outcome_name(out));

    /* At expiry both messages reach the consumer, which finds them paid. */
    TU_CHECK(spy_expect(601, 602, expire, 2, 10000) == 2, "both messages delivered");
    long long np = wait_metric("hourglass_consumer_not_pending_total", not_pending + 2, 10000);
    TU_CHECK(np >= not_pending + 2, "the consumer found both not pending (%lld → %lld)", not_pending, np);
    TU_CHECK(oe_scalarf(&env,
                        "SELECT COUNT(*) FROM orders WHERE id IN (601, 602) AND status='paid' AND paid_at IS NOT NULL"
                        " AND cancelled_at IS NULL") == 2,
             "both stay paid");
    TU_CHECK(
        oe_scalarf(&env, "SELECT COUNT(*) FROM order_timeout_msg WHERE order_id IN (601, 602) AND status='done'") == 2,
        "both rows 'done'");
    expect_invariant();
}

static void test_mark_fails(void)
{
    hg_order_error_t err = { 0 };
    uint64_t expire = now_ms() + 2000;
    long long cancelled = oe_metric(consumer_metrics, "hourglass_consumer_cancelled_total");
    long long not_pending = oe_metric(consumer_metrics, "hourglass_consumer_not_pending_total");
    TU_REQUIRE(create_orders(701, 701, expire, 100) == 0, "create");
    TU_CHECK(hg_order_timeout_send(client, NULL, 701, expire, NULL) == HG_OK, "send: %s", hg_client_errmsg(client));
    char sql[64];
    snprintf(sql, sizeof sql, "KILL CONNECTION %lu", hg_order_db_connection_id(db));
    TU_REQUIRE(mysql_query(env.admin, sql) == 0, "%s: %s", sql, mysql_error(env.admin));
    int marked = -1;
    TU_CHECK(hg_order_timeout_mark_sent(db, 701, &marked, &err) == -1, "mark sent on a killed connection fails");
    TU_CHECK(marked == 0, "marked %d", marked);
    TU_CHECK(hg_order_classify(err.code) == HG_ORDER_TRANSIENT, "error %u (%s) transient", err.code, err.message);
    TU_CHECK(oe_scalarf(&env, "SELECT COUNT(*) FROM order_timeout_msg WHERE order_id = 701 AND status='new'") == 1,
             "the row stays 'new'");
    TU_CHECK(relay_until_sent(701, 701, 10000) == 0, "the relay sent it again");
    /* The relay sends with DEDUP: the fast path's message is still live, so
     * the broker answered its id and stored nothing — one message, not two. */
    TU_CHECK(spy_expect(701, 701, expire, 2, expire - now_ms() + 3000) == 1,
             "one message for 701: the relay's resend was deduplicated");
    expect_cancelled(701, 701, 10000);
    long long c = oe_metric(consumer_metrics, "hourglass_consumer_cancelled_total");
    TU_CHECK(c == cancelled + 1, "cancelled once (%lld → %lld)", cancelled, c);
    TU_CHECK(oe_metric(consumer_metrics, "hourglass_consumer_not_pending_total") == not_pending,
             "no duplicate reached the consumer (not-pending %lld → %lld)", not_pending,
             oe_metric(consumer_metrics, "hourglass_consumer_not_pending_total"));
    expect_invariant();
}

/* A payment with a broker client revokes the order's timeout message: it
 * never reaches a group, and the order stays paid. */
static void test_pay_revokes(void)
{
    hg_order_error_t err = { 0 };
    uint64_t expire = now_ms() + 1500;
    long long delivered = oe_metric(consumer_metrics, "hourglass_consumer_delivered_total");
    TU_REQUIRE(create_orders(901, 903, expire, 0) == 0, "create");
    for (uint64_t id = 901; id <= 902; id++)
        TU_CHECK(hg_order_timeout_send(client, NULL, id, expire, NULL) == HG_OK, "send %" PRIu64 ": %s", id,
                 hg_client_errmsg(client));
    hg_order_outcome_t o;
    long revoked = -2;
    TU_CHECK(hg_order_pay_revoke(pay, client, NULL, 901, &o, &revoked, &err) == 0 && o == HG_ORDER_PAID, "pay 901: %s",
             err.message);
    TU_CHECK(revoked == 1, "pay 901 revoked %ld messages, want 1", revoked);
    /* paid without a client: nothing revoked, the message comes and finds it paid */
    TU_CHECK(hg_order_pay_revoke(pay, NULL, NULL, 902, &o, &revoked, &err) == 0 && o == HG_ORDER_PAID, "pay 902: %s",
             err.message);
    TU_CHECK(revoked == -1, "no client: revoked %ld, want -1 (not tried)", revoked);
    /* outcome, revoked and err left out (NULL), as hg_order_pay allows: paid, no crash */
    TU_CHECK(hg_order_pay_revoke(pay, client, NULL, 903, NULL, NULL, NULL) == 0, "pay 903 without out-parameters");
    TU_CHECK(oe_scalarf(&env, "SELECT COUNT(*) FROM orders WHERE id = 903 AND status='paid'") == 1, "903 is paid");
    /* a second payment is not pending: no revoke tried */
    TU_CHECK(hg_order_pay_revoke(pay, client, NULL, 901, &o, &revoked, &err) == 0 && o == HG_ORDER_NOT_PENDING,
             "pay 901 again: %s", hg_order_outcome_name(o));
    TU_CHECK(revoked == -1, "not paid by this call: revoked %ld, want -1", revoked);
    /* only 902's message is delivered, past expiry */
    TU_CHECK(spy_expect(901, 902, expire, 2, expire - now_ms() + 3000) == 1, "one message: 901's was revoked");
    TU_CHECK(wait_metric("hourglass_consumer_delivered_total", delivered + 1, 10000) >= delivered + 1,
             "902's message reached the consumer");
    TU_CHECK(oe_scalarf(&env, "SELECT COUNT(*) FROM orders WHERE id IN (901, 902) AND status='paid'") == 2,
             "both stay paid");
    TU_CHECK(oe_metric(consumer_metrics, "hourglass_consumer_delivered_total") == delivered + 1,
             "the consumer got exactly one message (901's was revoked)");
    expect_invariant();
}

static void test_refund(void)
{
    hg_order_error_t err = { 0 };
    long long sold = oe_scalarf(&env, "SELECT SUM(sold) FROM stock");
    uint64_t expire = now_ms() + 1000;
    TU_REQUIRE(create_orders(801, 801, expire, 0) == 0, "create");
    char why[256];
    TU_CHECK(hg_order_timeout_publish(db, client, NULL, 801, expire, NULL, why, sizeof why) == HG_ORDER_PUBLISH_SENT,
             "publish: %s", why);
    expect_cancelled(801, 801, 10000);
    hg_order_outcome_t o;
    TU_CHECK(hg_order_pay(pay, 801, &o, &err) == 0, "pay: %s", err.message);
    TU_CHECK(o == HG_ORDER_NOT_PENDING, "late payment: %s, want not-pending", hg_order_outcome_name(o));
    TU_CHECK(
        oe_scalarf(&env, "SELECT COUNT(*) FROM orders WHERE id = 801 AND status='cancelled' AND paid_at IS NULL") == 1,
        "the order stays cancelled: the payment must be refunded");
    TU_CHECK(oe_scalarf(&env, "SELECT SUM(sold) FROM stock") == sold, "nothing sold");
    expect_invariant();
}

static const tu_test_t outbox_tests[] = {
    { "fast path: create, commit, send with the remaining delay, mark sent", test_fast_path },
    { "rollback leaves nothing; duplicate row is permanent; arguments", test_rollback },
    { "COMMIT on a killed connection: transient, nothing written, reconnect", test_commit_lost },
    { "send fails: the row stays 'new', the relay sends it", test_send_fails_relay },
    { "the service dies between COMMIT and SEND: the relay sends it", test_dies_before_send },
    { "payment between COMMIT and mark sent: the guard keeps 'done'", test_paid_between_commit_and_mark },
    { "mark sent fails: the relay sends again, cancelled once", test_mark_fails },
    { "payment after the cancel: not pending, a refund", test_refund },
    { "a payment revokes the timeout message (hg_order_pay_revoke)", test_pay_revokes },
    { NULL, NULL },
};

static int add_suites(void)
{
    return tu_add_suite("outbox", outbox_init, outbox_cleanup, NULL, NULL, outbox_tests);
}

int main(int argc, char **argv)
{
    return oe_cunit_main(argc, argv, add_suites);
}
