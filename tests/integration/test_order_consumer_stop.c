/*
 * tests/integration/test_order_consumer_stop.c — hourglass-consumer's
 * bounded stop (stop-grace, common/stop_grace.h) against a hung MariaDB:
 * the real ./hourglass-broker, a private MariaDB, the real
 * ./hourglass-consumer.
 *
 *   hung server  400 orders. The consumer (2 workers, batch-size 20,
 *                mysql-read-timeout 60 s, stop-grace left at its default)
 *                runs a configured side effect that sleeps 10 s for order
 *                150, sent alone first: one worker claims it (row locked,
 *                transaction open) and sleeps; the other cancels the rest
 *                of the first half and goes idle. The MariaDB server is
 *                SIGSTOPped, the second half sent: the idle worker PULLs
 *                and blocks on MariaDB too. SIGTERM: the consumer exits
 *                with status 0 well within 10 s (not the 60 s read
 *                timeout), logging the cut. SIGCONT: the server rolls the
 *                interrupted transaction back (order 150 pending again, no
 *                transaction and no connection of the consumer left). A
 *                second consumer then cancels everything: 400 cancelled
 *                exactly once — the interrupted messages were never ACKed
 *                (nor NACKed: the cut ends the broker calls too) and came
 *                back after their lease — stock exact, the invariant holds.
 *   hung broker  One worker, a 60 s lease (no TOUCH due). Order 1's cancel
 *                sleeps 1 s in MariaDB; meanwhile the broker is SIGSTOPped,
 *                so the worker's ACK waits (order 1 cancelled, its message
 *                held, the ACK's bytes unread in the broker's socket).
 *                SIGTERM: exit 0 within BROKER_STOP_BOUND (before the cut:
 *                the client's 10 s read timeout). SIGCONT: a second
 *                consumer cancels the other 9, each order once, stock exact.
 */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include "include/hourglass/order.h"
#include "tests/helpers/order_env.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <CUnit/CUnit.h>
#include <mysql.h>

#define ORDERS            400
#define SLEEPY            150   /* the order whose side effect sleeps: its worker is inside a transaction */
#define STOP_BOUND        10000 /* ms: what a stop may take here (stop-grace 2 s), far below the read timeout */
#define READ_TIMEOUT      "60s"
#define BROKER_DB         "hbroker" /* the hung-broker test's database and group */
#define BROKER_ORDERS     10
#define BROKER_SLEEPY     1    /* its cancel sleeps 1 s: the broker is frozen meanwhile */
#define BROKER_STOP_BOUND 7000 /* ms: stop-grace 2 s; the ACK alone waited the 10 s read timeout before the cut */

static oe_env_t env;

static int stop_init(void)
{
    return oe_suite_start(&env, CU_get_number_of_failures);
}

static int stop_cleanup(void)
{
    return oe_suite_stop(&env);
}

/* The consumer's connection is inside the DO SLEEP of order SLEEPY: its
 * claim is done, its transaction open. */
static int in_sleep(void *arg)
{
    long long *conn = arg;
    *conn = oe_sleeping_connection(&env, "hung");
    return *conn > 0;
}

/* The same on database BROKER_DB. */
static int in_sleep_on(void *arg)
{
    long long *conn = arg;
    *conn = oe_sleeping_connection(&env, BROKER_DB);
    return *conn > 0;
}

/* No InnoDB transaction and no connection on database hung is left. Polled
 * every 250 ms: InnoDB refreshes INNODB_TRX only when it was not read for
 * 100 ms. */
static int consumer_gone(void *arg)
{
    (void)arg;
    return oe_scalar(&env, "SELECT COUNT(*) FROM information_schema.INNODB_TRX") == 0 &&
           oe_scalar(&env, "SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE DB = 'hung'") == 0;
}

/* Every order cancelled and nothing in the group's DLQ. */
static int all_cancelled(void *arg)
{
    (void)arg;
    if (oe_scalar(&env, "SELECT COUNT(*) FROM hung.orders WHERE status = 'cancelled'") != ORDERS)
        return 0;
    rc_conn_t c;
    char err[256];
    long long len = -1;
    if (bp_connect(&env.broker, &c, err, sizeof err) != 0)
        return 0;
    bp_int_cmd(&c, &len, err, sizeof err, "DLQ", "LEN", "hung", NULL);
    rc_close(&c);
    return len == 0;
}

/* Messages the consumer holds in its handlers: delivered, not yet settled. */
static long long held(int mport)
{
    return oe_metric(mport, "hourglass_consumer_delivered_total") - oe_metric(mport, "hourglass_consumer_acked_total") -
           oe_metric(mport, "hourglass_consumer_nacked_total") - oe_metric(mport, "hourglass_consumer_failed_total");
}

/* *arg: the metrics port. Every message of the first half was delivered
 * and all but order SLEEPY's are settled (cancelled, committed), so the
 * other worker is idle. */
static int only_sleeper_holds(void *arg)
{
    int mport = *(int *)arg;
    return oe_metric(mport, "hourglass_consumer_delivered_total") == ORDERS / 2 && held(mport) == 1 &&
           oe_scalarf(&env, "SELECT COUNT(*) FROM hung.orders WHERE status = 'pending' AND id <= %d", ORDERS / 2) == 1;
}

/* The reference schema's two side effects, after the test's own sleeping one. */
#define STOCK_RETURN_SQL                                                                                            \
    "UPDATE stock s JOIN order_items i ON i.sku_id = s.sku_id SET s.available = s.available + i.qty, s.reserved = " \
    "s.reserved - i.qty WHERE i.order_id = ?"
#define OUTBOX_DONE_SQL "UPDATE order_timeout_msg SET status='done' WHERE order_id = ?"

/* A temp dir for a case, and the paths of its two consumers' logs in it
 * (dir 512 bytes, each log 600). 0 / -1. */
static int log_dir(const char *tag, char *dir, char *log1, char *log2)
{
    if (tu_mkdtemp(tag, dir, 512) != 0)
        return -1;
    snprintf(log1, 600, "%s/consumer1.log", dir);
    snprintf(log2, 600, "%s/consumer2.log", dir);
    return 0;
}

static void test_hung_server(void)
{
    rc_conn_t c;
    char err[512];
    /* Only the consumers' connections use database hung (consumer_gone). */
    CU_ASSERT_EQUAL_FATAL(oe_fresh_daemon_database(&env, "hung", ORDERS, &c), 0);

    char dir[512], log1[600], log2[600], sleep_sql[64];
    CU_ASSERT_EQUAL_FATAL(log_dir("consumer-stop", dir, log1, log2), 0);
    snprintf(sleep_sql, sizeof sleep_sql, "DO SLEEP(IF(? = %d, 10, 0))", SLEEPY);
    int mport = tu_free_port();
    const char *extra[] = { "--batch-size",
                            "20",
                            "--mysql-read-timeout",
                            READ_TIMEOUT,
                            "--side-effect-sql",
                            sleep_sql,
                            "--side-effect-sql",
                            STOCK_RETURN_SQL,
                            "--side-effect-sql",
                            OUTBOX_DONE_SQL,
                            NULL };
    pid_t pid = oe_start_consumer(&env, "hung", "hung", 2, mport, log1, extra);
    CU_ASSERT_TRUE_FATAL(pid > 0);

    /* Order SLEEPY alone: its worker claims it (the row locked, the
     * transaction open) and sleeps before touching stock. Then the rest of
     * the first half: the other worker cancels them (nothing of theirs is
     * locked) and waits in PULL. */
    CU_ASSERT_EQUAL_FATAL(oe_send_ids(&c, SLEEPY, SLEEPY, err, sizeof err), 0);
    long long conn = -1;
    CU_ASSERT_EQUAL_FATAL(tu_poll_until(in_sleep, &conn, 30000, 5), 0);
    CU_ASSERT_EQUAL_FATAL(oe_send_ids(&c, 1, SLEEPY - 1, err, sizeof err), 0);
    CU_ASSERT_EQUAL_FATAL(oe_send_ids(&c, SLEEPY + 1, ORDERS / 2, err, sizeof err), 0);
    if (tu_poll_until(only_sleeper_holds, &mport, 8000, 20) != 0) {
        fprintf(stderr, "\n  delivered %lld, held %lld\n", oe_metric(mport, "hourglass_consumer_delivered_total"),
                held(mport));
        oe_print_file(log1);
        CU_FAIL_FATAL("the other worker never went idle");
    }

    /* The server hangs. No query of ours until SIGCONT: it would hang too. */
    CU_ASSERT_EQUAL(kill(env.server.pid, SIGSTOP), 0);
    /* The second half: the other worker PULLs some and blocks on MariaDB. */
    CU_ASSERT_EQUAL(oe_send_ids(&c, ORDERS / 2 + 1, ORDERS, err, sizeof err), 0);
    long long in_hand = -1;
    for (uint64_t end = tu_now_mono_ms() + 10000; tu_now_mono_ms() < end && (in_hand = held(mport)) <= 1;) {
        struct timespec ts = { 0, 20000000 };
        nanosleep(&ts, NULL);
    }
    /* More than the sleeper's message: both workers are inside MariaDB. */
    TU_CHECK(in_hand > 1, "messages held in the handlers before SIGTERM: %lld", in_hand);

    char what[128];
    snprintf(what, sizeof what, "%lld messages held on a SIGSTOPped MariaDB (mysql-read-timeout " READ_TIMEOUT ")",
             in_hand);
    oe_assert_bounded_stop(pid, 120000, STOP_BOUND, log1, "MariaDB connections cut", what);

    CU_ASSERT_EQUAL(kill(env.server.pid, SIGCONT), 0);
    /* The server finds the connections gone and rolls the transaction back. */
    CU_ASSERT_EQUAL(tu_poll_until(consumer_gone, NULL, 30000, 250), 0);
    CU_ASSERT_EQUAL(oe_scalarf(&env, "SELECT status = 'pending' FROM hung.orders WHERE id = %d", SLEEPY), 1);
    long long first = oe_scalar(&env, "SELECT COUNT(*) FROM hung.orders WHERE status = 'cancelled'");
    printf("    after SIGCONT: %lld cancelled by the first consumer, order %d pending (rolled back)\n", first, SLEEPY);

    /* A new consumer (the reference SQL): the cut messages come back. */
    int mport2 = tu_free_port();
    const char *extra2[] = { "--batch-size", "20", NULL };
    pid_t pid2 = oe_start_consumer(&env, "hung", "hung", 2, mport2, log2, extra2);
    CU_ASSERT_TRUE_FATAL(pid2 > 0);
    CU_ASSERT_EQUAL(tu_poll_until(all_cancelled, NULL, 90000, 50), 0);
    CU_ASSERT_EQUAL(oe_stop_consumer(pid2), 0);

    oe_assert_all_cancelled(&env, "hung", ORDERS);
    CU_ASSERT_EQUAL(oe_scalar(&env, "SELECT COUNT(*) FROM hung.order_timeout_msg WHERE status = 'done'"), ORDERS);
    if (CU_get_number_of_failures() > 0) {
        oe_print_file(log1);
        oe_print_file(log2);
    }
    rc_close(&c);
    tu_rmtree(dir);
}

/* The worker's ACK waits on the frozen broker: order BROKER_SLEEPY is
 * cancelled (committed), its message not settled, and the worker's
 * connection holds bytes the broker has not read (the consumer's only
 * connection with any: one worker, no TOUCH due with a 60 s lease). */
static int ack_waiting(void *arg)
{
    int mport = *(int *)arg;
    return oe_scalarf(&env, "SELECT status = 'cancelled' FROM " BROKER_DB ".orders WHERE id = %d", BROKER_SLEEPY) ==
               1 &&
           held(mport) == 1 && oe_broker_unread_requests(&env) == 1;
}

static void test_hung_broker(void)
{
    rc_conn_t c;
    char err[512];
    CU_ASSERT_EQUAL_FATAL(oe_fresh_daemon_database(&env, BROKER_DB, BROKER_ORDERS, &c), 0);

    char dir[512], log1[600], log2[600], sleep_sql[64];
    CU_ASSERT_EQUAL_FATAL(log_dir("consumer-stop-broker", dir, log1, log2), 0);
    snprintf(sleep_sql, sizeof sleep_sql, "DO SLEEP(IF(? = %d, 1, 0))", BROKER_SLEEPY);
    int mport = tu_free_port();
    const char *extra[] = { "--lease",
                            "60s",
                            "--side-effect-sql",
                            sleep_sql,
                            "--side-effect-sql",
                            STOCK_RETURN_SQL,
                            "--side-effect-sql",
                            OUTBOX_DONE_SQL,
                            NULL };
    pid_t pid = oe_start_consumer(&env, BROKER_DB, BROKER_DB, 1, mport, log1, extra);
    CU_ASSERT_TRUE_FATAL(pid > 0);

    /* Order BROKER_SLEEPY: while its cancel sleeps in MariaDB (the PULL
     * answered), the broker is frozen; the cancel commits and the ACK waits. */
    CU_ASSERT_EQUAL_FATAL(oe_send_ids(&c, BROKER_SLEEPY, BROKER_SLEEPY, err, sizeof err), 0);
    long long conn = -1;
    CU_ASSERT_EQUAL_FATAL(tu_poll_until(in_sleep_on, &conn, 30000, 5), 0);
    CU_ASSERT_EQUAL_FATAL(kill(env.broker.pid, SIGSTOP), 0);
    if (tu_poll_until(ack_waiting, &mport, 30000, 20) != 0) {
        fprintf(stderr, "\n  held %lld, unread requests %d\n", held(mport), oe_broker_unread_requests(&env));
        oe_print_file(log1);
        kill(pid, SIGKILL);
        waitpid(pid, NULL, 0);
        kill(env.broker.pid, SIGCONT);
        CU_FAIL_FATAL("the worker never waited on its ACK");
    }

    oe_assert_bounded_stop(pid, 120000, BROKER_STOP_BOUND, log1, "MariaDB connections cut",
                           "an ACK waiting on a SIGSTOPped broker (read timeout 10 s)");
    CU_ASSERT_EQUAL(kill(env.broker.pid, SIGCONT), 0);

    /* The rest, to a second consumer: every order cancelled once. The cut
     * ACK's message is acknowledged by the broker if it reads the ACK after
     * SIGCONT, else it comes back after its lease and finds the order
     * cancelled: either way nothing is cancelled twice. */
    CU_ASSERT_EQUAL(oe_send_ids(&c, 1, BROKER_SLEEPY - 1, err, sizeof err), 0);
    CU_ASSERT_EQUAL(oe_send_ids(&c, BROKER_SLEEPY + 1, BROKER_ORDERS, err, sizeof err), 0);
    int mport2 = tu_free_port();
    pid_t pid2 = oe_start_consumer(&env, BROKER_DB, BROKER_DB, 2, mport2, log2, NULL);
    CU_ASSERT_TRUE_FATAL(pid2 > 0);
    CU_ASSERT_EQUAL(
        oe_wait_scalar(&env, 0, 60000, "SELECT COUNT(*) FROM " BROKER_DB ".orders WHERE status <> 'cancelled'"), 0);
    CU_ASSERT_EQUAL(oe_stop_consumer(pid2), 0);

    oe_assert_all_cancelled(&env, BROKER_DB, BROKER_ORDERS);
    if (CU_get_number_of_failures() > 0) {
        oe_print_file(log1);
        oe_print_file(log2);
    }
    rc_close(&c);
    tu_rmtree(dir);
}

/* /healthz while MariaDB hangs (SIGSTOP): the worker sits in a cancel that
 * would fail only at mysql-read-timeout (60 s here); /healthz must answer
 * 503 naming the stuck worker within consumer_stuck_after_ms (6 s with
 * mysql-lock-wait-timeout and mysql-connect-timeout 1 s), and 200 again
 * once SIGCONT lets the cancel finish. Before the stuck check it answered
 * 200 until the read timeout. */
#define HEALTH_DB     "hhealth"
#define HEALTH_ORDERS 10
#define HEALTH_BOUND  6000 /* ms */

static void test_hung_server_health(void)
{
    rc_conn_t c;
    char err[512];
    CU_ASSERT_EQUAL_FATAL(oe_fresh_daemon_database(&env, HEALTH_DB, HEALTH_ORDERS, &c), 0);
    char dir[512], log1[600], log2[600];
    CU_ASSERT_EQUAL_FATAL(log_dir("consumer-health", dir, log1, log2), 0);
    const char *extra[] = {
        "--mysql-read-timeout", READ_TIMEOUT, "--mysql-lock-wait-timeout", "1s", "--mysql-connect-timeout", "1s", NULL
    };
    int health_port = tu_free_port();
    char health[4096];
    pid_t pid = oe_start_consumer(&env, HEALTH_DB, HEALTH_DB, 1, health_port, log1, extra);
    CU_ASSERT_TRUE_FATAL(pid > 0);
    CU_ASSERT_EQUAL(tu_poll_http_status(health_port, "/healthz", 200, 30000, 50, health, sizeof health), 0);
    /* Half cancelled: the worker's connection is open, it waits in PULL. */
    CU_ASSERT_EQUAL_FATAL(oe_send_ids(&c, 1, HEALTH_ORDERS / 2, err, sizeof err), 0);
    CU_ASSERT_EQUAL(oe_wait_scalar(&env, HEALTH_ORDERS / 2, 30000,
                                   "SELECT COUNT(*) FROM " HEALTH_DB ".orders WHERE status = 'cancelled'"),
                    HEALTH_ORDERS / 2);

    /* The server hangs; the other half sent: the worker blocks in a cancel. */
    CU_ASSERT_EQUAL_FATAL(kill(env.server.pid, SIGSTOP), 0);
    CU_ASSERT_EQUAL(oe_send_ids(&c, HEALTH_ORDERS / 2 + 1, HEALTH_ORDERS, err, sizeof err), 0);
    uint64_t t0 = tu_now_mono_ms();
    int turned = tu_poll_http_status(health_port, "/healthz", 503, HEALTH_BOUND + 20000, 100, health, sizeof health);
    uint64_t took = tu_now_mono_ms() - t0;
    CU_ASSERT_EQUAL(kill(env.server.pid, SIGCONT), 0);
    printf("\n    SIGSTOPped MariaDB: /healthz %s after %.1f s (bound %.1f s): %s", turned == 0 ? "503" : "still 200",
           (double)took / 1000, HEALTH_BOUND / 1000.0, health);
    CU_ASSERT_EQUAL(turned, 0);
    CU_ASSERT_TRUE(took <= HEALTH_BOUND + 3000);
    CU_ASSERT_PTR_NOT_NULL(strstr(health, "worker 0: stuck in a MariaDB call for "));

    CU_ASSERT_EQUAL(tu_poll_http_status(health_port, "/healthz", 200, 30000, 100, health, sizeof health), 0);
    printf("    after SIGCONT: /healthz %s", health);
    CU_ASSERT_EQUAL(oe_wait_scalar(&env, HEALTH_ORDERS, 30000,
                                   "SELECT COUNT(*) FROM " HEALTH_DB ".orders WHERE status = 'cancelled'"),
                    HEALTH_ORDERS);
    CU_ASSERT_EQUAL(oe_stop_consumer(pid), 0);
    if (CU_get_number_of_failures() > 0)
        oe_print_file(log1);
    rc_close(&c);
    tu_rmtree(dir);
}

/* /healthz under lock contention (a flash sale): another connection holds
 * every stock row, so each transaction of a batch of CONTENDED_ORDERS waits
 * mysql-lock-wait-timeout (1 s) on its stock UPDATE, fails with 1205 and is
 * split, down to single orders: 2n - 1 waits in one hg_order_cancel_batch,
 * far longer than the 6 s stuck bound, yet MariaDB answers every statement.
 * /healthz must stay 200 all along (before: 503 "stuck" after 6 s, so a
 * liveness probe would restart a consumer that only waits on locks), also
 * past the end of the batch (about 16 s), whose orders all failed on 1205
 * and are retried (a lock conflict is not MariaDB failing); once the locks
 * are released every order is cancelled. */
#define CONTENDED_DB     "hcontended"
#define CONTENDED_ORDERS 8
#define CONTENDED_SPAN   (HEALTH_BOUND + 16000) /* ms of contention watched: past the bound and the batch */

static void test_lock_contention_health(void)
{
    rc_conn_t c;
    char err[512];
    hg_order_error_t oerr;
    CU_ASSERT_EQUAL_FATAL(oe_fresh_daemon_database(&env, CONTENDED_DB, CONTENDED_ORDERS, &c), 0);
    char dir[512], log1[600], log2[600];
    CU_ASSERT_EQUAL_FATAL(log_dir("consumer-contended", dir, log1, log2), 0);

    /* Every stock row locked by an open transaction of another connection. */
    hg_order_db *holder = oe_open_db(&env, CONTENDED_DB, &oerr);
    CU_ASSERT_PTR_NOT_NULL_FATAL(holder);
    MYSQL *m = hg_order_db_mysql(holder, &oerr);
    CU_ASSERT_PTR_NOT_NULL_FATAL(m);
    CU_ASSERT_EQUAL_FATAL(mysql_query(m, "SELECT sku_id FROM stock FOR UPDATE"), 0);
    MYSQL_RES *res = mysql_store_result(m);
    CU_ASSERT_PTR_NOT_NULL(res);
    CU_ASSERT_TRUE(res != NULL && mysql_num_rows(res) > 0);
    mysql_free_result(res);

    /* Every message waiting before the consumer starts: one PULL, one batch. */
    CU_ASSERT_EQUAL_FATAL(oe_send_ids(&c, 1, CONTENDED_ORDERS, err, sizeof err), 0);
    const char *extra[] = { "--mysql-read-timeout",
                            READ_TIMEOUT,
                            "--mysql-lock-wait-timeout",
                            "1s",
                            "--mysql-connect-timeout",
                            "1s",
                            "--batch-size",
                            "8",
                            "--lease",
                            "60s",
                            NULL };
    int health_port = tu_free_port();
    char health[4096];
    pid_t pid = oe_start_consumer(&env, CONTENDED_DB, CONTENDED_DB, 1, health_port, log1, extra);
    CU_ASSERT_TRUE_FATAL(pid > 0);
    CU_ASSERT_EQUAL(tu_poll_http_status(health_port, "/healthz", 200, 30000, 50, health, sizeof health), 0);

    /* Watch /healthz through the waits, past the stuck bound. */
    int answered = 0;
    double first_s = 0;
    int seen503 =
        tu_watch_http_503(health_port, "/healthz", CONTENDED_SPAN, 100, &answered, health, sizeof health, &first_s);
    if (seen503 > 0)
        printf("\n    lock contention: /healthz 503 after %.1f s: %s", first_s, health);
    long long cancelled = oe_scalar(&env, "SELECT COUNT(*) FROM " CONTENDED_DB ".orders WHERE status = 'cancelled'");
    printf("\n    %d s of lock waits (%lld cancelled meanwhile): /healthz 503 %d times of %d answers",
           CONTENDED_SPAN / 1000, cancelled, seen503, answered);
    CU_ASSERT_EQUAL(cancelled, 0);
    CU_ASSERT_TRUE(answered > 0);
    CU_ASSERT_EQUAL(seen503, 0);

    /* The locks released: everything is cancelled. */
    CU_ASSERT_EQUAL(mysql_rollback(m), 0);
    CU_ASSERT_EQUAL(oe_wait_scalar(&env, CONTENDED_ORDERS, 60000,
                                   "SELECT COUNT(*) FROM " CONTENDED_DB ".orders WHERE status = 'cancelled'"),
                    CONTENDED_ORDERS);
    /* The batch really waited on locks again and again (counted when its
     * call returned): each split is a transaction that failed. */
    long long splits = oe_metric(health_port, "hourglass_consumer_batch_splits_total");
    printf("; %lld batch splits\n", splits);
    CU_ASSERT_TRUE(splits >= 4);
    CU_ASSERT_EQUAL(tu_poll_http_status(health_port, "/healthz", 200, 30000, 100, health, sizeof health), 0);
    CU_ASSERT_EQUAL(oe_stop_consumer(pid), 0);
    if (CU_get_number_of_failures() > 0)
        oe_print_file(log1);
    hg_order_db_close(holder);
    rc_close(&c);
    tu_rmtree(dir);
}

static const tu_test_t stop_tests[] = {
    { "SIGTERM on a hung MariaDB: bounded stop, nothing ACKed unfinished, all cancelled once after", test_hung_server },
    { "SIGTERM on a hung broker: the waiting ACK cut after stop-grace, all cancelled once after", test_hung_broker },
    { "/healthz on a hung MariaDB: 503 naming the stuck worker within the bound, 200 after SIGCONT",
      test_hung_server_health },
    { "/healthz under lock contention: a batch split down to single orders, every statement answered, stays 200",
      test_lock_contention_health },
    { NULL, NULL },
};

static int add_suites(void)
{
    return tu_add_suite("stop", stop_init, stop_cleanup, NULL, NULL, stop_tests);
}

int main(int argc, char **argv)
{
    return oe_cunit_main(argc, argv, add_suites);
}
