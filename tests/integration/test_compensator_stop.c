/*
 * tests/integration/test_compensator_stop.c — hourglass-compensator's
 * bounded stop (stop-grace) against a hung MariaDB and a hung broker: the
 * real ./hourglass-broker, a private MariaDB, the real
 * ./hourglass-compensator and ./hourglass-consumer.
 *
 *   hung server  Orders 1-20 overdue (outbox 'sent'), orders 101-110 overdue
 *                with their outbox rows 'new' and due. The test's own
 *                transaction locks orders 1-20, so the overdue layer and the
 *                inspection (cancel-batch 1) each wait inside a cancel
 *                transaction for order 1's row. The broker is frozen while
 *                the relay claims (leases) 101-110; the test then locks their
 *                outbox rows and thaws the broker: the sends succeed and the
 *                relay waits inside its record transaction. Every layer with
 *                rows is thus inside a MariaDB call (checked in PROCESSLIST),
 *                and the MariaDB server is SIGSTOPped. SIGTERM: the
 *                compensator exits with status 0 within STOP_BOUND (stop-grace
 *                left at its 2 s default; before stop-grace it waited out
 *                mysql-read-timeout, 60 s here, and again for the inspection
 *                lock's release), logging the cut. SIGCONT: the server
 *                releases the inspection lock; the test releases its row
 *                locks, and the cut statements that waited on them end with
 *                their connections: none left, no transaction, every order
 *                still pending (the cut cancels rolled back), the relay's rows
 *                still 'new' with no attempt counted — sent, never marked
 *                sent. A fresh compensator and a consumer then finish the
 *                work: 30 orders cancelled exactly once, stock exact, every
 *                outbox row 'done'.
 *   hung broker  Orders 201-210 overdue, their outbox rows 'new' and due.
 *                The broker is SIGSTOPped, then a compensator (relay and
 *                monitor, broker-timeout 20 s) starts: the relay leases the
 *                batch and its SENDs, like the monitor's DLQ LEN, wait unread
 *                in the broker's sockets (/proc/net/tcp), so both are inside
 *                a broker call. SIGTERM: exit 0 within STOP_BOUND (before the
 *                cut: broker-timeout), "the stop cut the send" logged, the
 *                rows still 'new', leased, no attempt counted. SIGCONT, the
 *                lease ended by hand: a fresh relay marks the 10 rows 'sent'
 *                and a consumer cancels each once (none found not pending:
 *                DEDUP kept one message per order), stock exact.
 *   hung alert   An overdue order, the monitor alone, an alert command that
 *                hangs (alert-command-timeout 1h). SIGTERM while it runs:
 *                exit 0 within STOP_BOUND, the command killed at the cut
 *                (before: the stop waited for the command, up to
 *                alert-command-timeout).
 */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include "include/hourglass/order.h"
#include "tests/helpers/order_env.h"
#include "tests/helpers/sql_client.h"
#include "base/clock.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <CUnit/CUnit.h>

#define COMPENSATOR_BIN HG_BUILDDIR "/hourglass-compensator"
#define LOCKED_ORDERS   20  /* ids 1..20: the overdue layer and the inspection wait on their rows */
#define RELAY_FIRST     101 /* ids 101..110: outbox rows 'new', the relay's batch */
#define RELAY_ORDERS    10
#define ALL_ORDERS      (LOCKED_ORDERS + RELAY_ORDERS)
#define LOCK_NAME       "hung_stop_test"
#define STOP_BOUND      10000 /* ms: what a stop may take here (stop-grace 2 s), far below the read timeout */
#define READ_TIMEOUT    "60s"
#define ALL_LAYERS      "relay,overdue,inspection,monitor"
#define BROKER_DB       "hbroker" /* the hung-broker test's database and consumer group */
#define BROKER_FIRST    201
#define BROKER_ORDERS   10
#define BROKER_TIMEOUT  "20s"
#define ALERT_DB        "halert" /* the hung alert command's database */

static oe_env_t env;

static int stop_init(void)
{
    return oe_suite_start(&env, CU_get_number_of_failures);
}

static int stop_cleanup(void)
{
    return oe_suite_stop(&env);
}

static int seed(const char *db, uint64_t first_id, size_t n, int64_t expire_in_ms)
{
    of_seed_spec_t spec = { .first_id = first_id,
                            .orders = n,
                            .first_sku = 1,
                            .skus = 20,
                            .max_items = 3,
                            .max_qty = 2,
                            .stock_per_sku = 1000000,
                            .expire_in_ms = expire_in_ms,
                            .with_outbox = 1,
                            .random_seed = (uint32_t)first_id };
    hg_order_error_t err;
    if (oe_seed(&env, db, &spec, &err) != 0) {
        fprintf(stderr, "\n  seed: %s\n", err.message);
        return -1;
    }
    return 0;
}

/* Start hourglass-compensator on database db with layers (a --layers
 * list), each every 200 ms, then the extra flags (NULL-terminated, may be
 * NULL). Returns the pid. */
static pid_t start_compensator(const char *db, const char *layers, int metrics_port, const char *log,
                               const char *const *extra)
{
    char uri[64], mport[16];
    snprintf(uri, sizeof uri, "hourglass://127.0.0.1:%d", env.broker.port);
    snprintf(mport, sizeof mport, "%d", metrics_port);
    const char *argv[64] = { COMPENSATOR_BIN,
                             "--uri",
                             uri,
                             "--topic",
                             OE_TOPIC,
                             "--mysql-socket",
                             env.server.socket,
                             "--mysql-user",
                             "root",
                             "--mysql-database",
                             db,
                             "--metrics-port",
                             mport,
                             "--log-level",
                             "info",
                             "--dlq-groups",
                             "none",
                             "--layers",
                             layers,
                             "--relay-interval",
                             "200ms",
                             "--overdue-interval",
                             "200ms",
                             "--overdue-grace",
                             "0ms",
                             "--inspect-interval",
                             "200ms",
                             "--inspect-grace",
                             "1s",
                             "--monitor-interval",
                             "200ms",
                             "--lock-name",
                             LOCK_NAME,
                             NULL };
    size_t n = 0;
    while (argv[n] != NULL)
        n++;
    for (size_t i = 0; extra != NULL && extra[i] != NULL && n < 63; i++)
        argv[n++] = extra[i];
    argv[n] = NULL;
    return oe_spawn(argv, log);
}

/* The relay's batch is leased: next_attempt_at moved past the sends
 * (committed), the rows still 'new'. */
static int relay_leased(void *arg)
{
    (void)arg;
    return oe_scalarf(&env,
                      "SELECT COUNT(*) FROM hung.order_timeout_msg WHERE order_id >= %d AND status = 'new'"
                      " AND next_attempt_at > NOW(6) + INTERVAL 10 SECOND",
                      RELAY_FIRST) == RELAY_ORDERS;
}

/* The three layers wait inside MariaDB on the test's row locks: two cancel
 * claims of order 1 (overdue, inspection) and the relay's record. Not while
 * a statement is being prepared: PROCESSLIST shows its text then too. */
static int layers_waiting(void *arg)
{
    long long *holder = arg;
    long long claims =
        oe_scalarf(&env,
                   "SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE DB = 'hung'"
                   " AND ID <> %lld AND COMMAND <> 'Prepare' AND INFO LIKE 'UPDATE orders SET status=''cancelled''%%'",
                   *holder);
    long long records =
        oe_scalarf(&env,
                   "SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE DB = 'hung'"
                   " AND ID <> %lld AND COMMAND <> 'Prepare' AND INFO LIKE 'UPDATE order_timeout_msg%%'",
                   *holder);
    return claims == 2 && records == 1;
}

/* The server released the inspection lock with its (idle) connection. */
static int lock_released(void *arg)
{
    (void)arg;
    return oe_scalar(&env, "SELECT IS_USED_LOCK('" LOCK_NAME "')") == -1;
}

/* Nothing of the stopped compensator is left on the server: no connection
 * on database hung, no InnoDB transaction. Polled every 250 ms: InnoDB
 * refreshes INNODB_TRX only when it was not read for 100 ms. */
static int compensator_gone(void *arg)
{
    (void)arg;
    return oe_scalar(&env, "SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE DB = 'hung'") == 0 &&
           oe_scalar(&env, "SELECT COUNT(*) FROM information_schema.INNODB_TRX") == 0;
}

/* A temp dir for a case, and the paths of its logs in it: two
 * compensators' and a consumer's (dir 512 bytes, each log 600). 0 / -1. */
static int log_dir(const char *tag, char *dir, char *log1, char *log2, char *log3)
{
    if (tu_mkdtemp(tag, dir, 512) != 0)
        return -1;
    snprintf(log1, 600, "%s/compensator1.log", dir);
    snprintf(log2, 600, "%s/compensator2.log", dir);
    snprintf(log3, 600, "%s/consumer.log", dir);
    return 0;
}

static void test_hung_server(void)
{
    /* Only the compensator's connections and the holder use database hung. */
    CU_ASSERT_EQUAL_FATAL(oe_fresh_daemon_database(&env, "hung", 0, NULL), 0);
    CU_ASSERT_EQUAL_FATAL(seed("hung", 1, LOCKED_ORDERS, -1200000), 0);
    CU_ASSERT_EQUAL_FATAL(seed("hung", RELAY_FIRST, RELAY_ORDERS, -600000), 0);
    CU_ASSERT_EQUAL_FATAL(sql_execf(env.admin,
                                    "UPDATE hung.order_timeout_msg SET status = 'new', attempts = 0,"
                                    " next_attempt_at = NOW(6) - INTERVAL 1 SECOND WHERE order_id >= %d",
                                    RELAY_FIRST),
                          0);

    /* The holder: orders 1-20 locked, so both cancelling layers wait on order 1. */
    MYSQL *holder = oe_connect(&env, "hung");
    CU_ASSERT_PTR_NOT_NULL_FATAL(holder);
    long long holder_id = (long long)mysql_thread_id(holder);
    CU_ASSERT_EQUAL_FATAL(sql_execf(holder, "START TRANSACTION"), 0);
    CU_ASSERT_EQUAL_FATAL(sql_execf(holder, "SELECT id FROM orders WHERE id <= %d FOR UPDATE", LOCKED_ORDERS), 0);

    char dir[512], log1[600], log2[600], log3[600];
    CU_ASSERT_EQUAL_FATAL(log_dir("compensator-stop", dir, log1, log2, log3), 0);

    /* The broker frozen: the relay claims its batch and waits for the replies. */
    CU_ASSERT_EQUAL_FATAL(kill(env.broker.pid, SIGSTOP), 0);
    const char *extra1[] = { "--cancel-batch",
                             "1",
                             "--mysql-read-timeout",
                             READ_TIMEOUT,
                             "--mysql-lock-wait-timeout",
                             "50s",
                             "--broker-timeout",
                             "20s",
                             NULL };
    int mport1 = tu_free_port();
    pid_t pid = start_compensator("hung", ALL_LAYERS, mport1, log1, extra1);
    int leased = pid > 0 && tu_poll_until(relay_leased, NULL, 15000, 20) == 0;
    /* Its rows locked by the holder, then the broker thawed: the sends
     * succeed and the record waits on the holder. */
    int locked = leased && sql_execf(holder, "SELECT order_id FROM order_timeout_msg WHERE order_id >= %d FOR UPDATE",
                                     RELAY_FIRST) == 0;
    CU_ASSERT_EQUAL(kill(env.broker.pid, SIGCONT), 0);
    if (!leased || !locked)
        oe_print_file(log1);
    TU_REQUIRE(leased && locked, "the relay never leased its %d rows (pid %d)", RELAY_ORDERS, (int)pid);
    if (tu_poll_until(layers_waiting, &holder_id, 30000, 20) != 0) {
        oe_print_file(log1);
        CU_FAIL_FATAL("the relay, overdue and inspection layers never all waited inside MariaDB");
    }

    /* The server hangs. No query of ours until SIGCONT: it would hang too. */
    CU_ASSERT_EQUAL_FATAL(kill(env.server.pid, SIGSTOP), 0);
    oe_assert_bounded_stop(pid, 200000, STOP_BOUND, log1, "MariaDB connections cut",
                           "three layers inside a SIGSTOPped MariaDB (mysql-read-timeout " READ_TIMEOUT ")");

    CU_ASSERT_EQUAL(kill(env.server.pid, SIGCONT), 0);
    /* The server finds the idle lock connection gone at once: the lock is
     * released. A session waiting on a row lock notices its dead client only
     * when the wait ends: the holder rolls back, their statements run, and
     * then the server finds the connections gone and rolls the cut
     * transactions back — nothing of them commits. */
    CU_ASSERT_EQUAL(tu_poll_until(lock_released, NULL, 30000, 50), 0);
    CU_ASSERT_EQUAL(sql_execf(holder, "ROLLBACK"), 0);
    mysql_close(holder);
    CU_ASSERT_EQUAL(tu_poll_until(compensator_gone, NULL, 30000, 250), 0);
    long long pending = oe_scalarf(&env, "SELECT COUNT(*) FROM hung.orders WHERE status = 'pending'");
    long long relay_new = oe_scalarf(&env,
                                     "SELECT COUNT(*) FROM hung.order_timeout_msg WHERE order_id >= %d"
                                     " AND status = 'new' AND attempts = 0",
                                     RELAY_FIRST);
    printf("    after SIGCONT: %lld of %d orders pending, %lld of the relay's %d rows 'new' with no attempt\n", pending,
           ALL_ORDERS, relay_new, RELAY_ORDERS);
    CU_ASSERT_EQUAL(pending, ALL_ORDERS);
    CU_ASSERT_EQUAL(relay_new, RELAY_ORDERS);

    /* A fresh compensator and a consumer (the relayed messages are in the
     * broker, due now) finish the work. */
    int mport2 = tu_free_port(), mport3 = tu_free_port();
    pid_t pid2 = start_compensator("hung", ALL_LAYERS, mport2, log2, NULL);
    pid_t pid3 = oe_start_consumer(&env, "hung", "hung", 2, mport3, log3, NULL);
    CU_ASSERT_TRUE(pid2 > 0 && pid3 > 0);
    long long left = oe_wait_scalar(&env, 0, 60000, "SELECT COUNT(*) FROM hung.orders WHERE status <> 'cancelled'");
    CU_ASSERT_EQUAL(left, 0);
    CU_ASSERT_EQUAL(oe_stop_consumer(pid2), 0);
    CU_ASSERT_EQUAL(oe_stop_consumer(pid3), 0);

    oe_assert_all_cancelled(&env, "hung", ALL_ORDERS);
    CU_ASSERT_EQUAL(oe_scalar(&env, "SELECT COUNT(*) FROM hung.order_timeout_msg WHERE status = 'done'"), ALL_ORDERS);
    if (CU_get_number_of_failures() > 0) {
        oe_print_file(log1);
        oe_print_file(log2);
        oe_print_file(log3);
    }
    tu_rmtree(dir);
}

/* The relay's batch (BROKER_FIRST…) is leased and its SENDs, like the
 * monitor's DLQ LEN, wait unread in the frozen broker's sockets: the relay
 * is inside hg_send_many, the monitor inside hg_client_command. */
static int relay_and_monitor_waiting(void *arg)
{
    (void)arg;
    return oe_scalarf(&env, "SELECT COUNT(*) FROM " BROKER_DB ".order_timeout_msg WHERE status = 'new' AND attempts = 0"
                            " AND next_attempt_at > NOW(6) + INTERVAL 10 SECOND") == BROKER_ORDERS &&
           oe_broker_unread_requests(&env) == 2;
}

static int consumer_cancelled_all(void *arg)
{
    return oe_metric(*(int *)arg, "hourglass_consumer_cancelled_total") == BROKER_ORDERS;
}

static void test_hung_broker(void)
{
    CU_ASSERT_EQUAL_FATAL(oe_fresh_daemon_database(&env, BROKER_DB, 0, NULL), 0);
    CU_ASSERT_EQUAL_FATAL(seed(BROKER_DB, BROKER_FIRST, BROKER_ORDERS, -600000), 0);
    CU_ASSERT_EQUAL_FATAL(sql_execf(env.admin,
                                    "UPDATE " BROKER_DB ".order_timeout_msg SET status = 'new', attempts = 0,"
                                    " next_attempt_at = NOW(6) - INTERVAL 1 SECOND"),
                          0);

    char dir[512], log1[600], log2[600], log3[600];
    CU_ASSERT_EQUAL_FATAL(log_dir("compensator-stop-broker", dir, log1, log2, log3), 0);

    /* The broker frozen before the compensator starts: its clients connect
     * (the kernel completes the handshake), write their commands and wait. */
    CU_ASSERT_EQUAL_FATAL(kill(env.broker.pid, SIGSTOP), 0);
    const char *extra1[] = { "--dlq-groups", BROKER_DB, "--broker-timeout", BROKER_TIMEOUT, NULL };
    int mport1 = tu_free_port();
    pid_t pid = start_compensator(BROKER_DB, "relay,monitor", mport1, log1, extra1);
    if (pid <= 0 || tu_poll_until(relay_and_monitor_waiting, NULL, 30000, 20) != 0) {
        printf("\n    unread requests in the broker's sockets: %d\n", oe_broker_unread_requests(&env));
        oe_print_file(log1);
        if (pid > 0) {
            kill(pid, SIGKILL);
            waitpid(pid, NULL, 0);
        }
        kill(env.broker.pid, SIGCONT);
        CU_FAIL_FATAL("the relay and the monitor never both waited on the frozen broker");
    }

    oe_assert_bounded_stop(
        pid, 200000, STOP_BOUND, log1, "the stop cut the send of 10 outbox rows",
        "the relay and the monitor inside calls to a SIGSTOPped broker (broker-timeout " BROKER_TIMEOUT ")");

    /* MariaDB answers (only the broker hangs): the batch is as the claim left
     * it — 'new', no attempt counted, no error recorded, still leased. */
    long long left = oe_scalarf(&env, "SELECT COUNT(*) FROM " BROKER_DB ".order_timeout_msg WHERE status = 'new'"
                                      " AND attempts = 0 AND last_error IS NULL AND next_attempt_at > NOW(6)");
    printf("    %lld of the relay's %d rows 'new', leased, no attempt counted\n", left, BROKER_ORDERS);
    CU_ASSERT_EQUAL(left, BROKER_ORDERS);
    CU_ASSERT_EQUAL(kill(env.broker.pid, SIGCONT), 0);

    /* The lease (hg_client_send_bound_ms + 1 s: about 90 s with a 20 s
     * broker-timeout) ends: moved to now rather than waited for. A fresh
     * relay sends the rows again, with DEDUP: whether or not the broker took
     * in the cut SENDs it read after SIGCONT, one message per order. */
    CU_ASSERT_EQUAL(sql_execf(env.admin, "UPDATE " BROKER_DB ".order_timeout_msg SET next_attempt_at = NOW(6)"), 0);
    int mport2 = tu_free_port(), mport3 = tu_free_port();
    pid_t pid2 = start_compensator(BROKER_DB, "relay", mport2, log2, NULL);
    CU_ASSERT_TRUE(pid2 > 0);
    CU_ASSERT_EQUAL(oe_wait_scalar(&env, BROKER_ORDERS, 30000,
                                   "SELECT COUNT(*) FROM " BROKER_DB
                                   ".order_timeout_msg WHERE status = 'sent' AND attempts = 1"),
                    BROKER_ORDERS);
    CU_ASSERT_EQUAL(oe_stop_consumer(pid2), 0);

    pid_t pid3 = oe_start_consumer(&env, BROKER_DB, BROKER_DB, 2, mport3, log3, NULL);
    CU_ASSERT_TRUE(pid3 > 0);
    CU_ASSERT_EQUAL(
        oe_wait_scalar(&env, 0, 60000, "SELECT COUNT(*) FROM " BROKER_DB ".orders WHERE status <> 'cancelled'"), 0);
    CU_ASSERT_EQUAL(tu_poll_until(consumer_cancelled_all, &mport3, 10000, 50), 0);
    long long not_pending = oe_metric(mport3, "hourglass_consumer_not_pending_total");
    printf("    the consumer cancelled %lld orders, found %lld not pending\n",
           oe_metric(mport3, "hourglass_consumer_cancelled_total"), not_pending);
    CU_ASSERT_EQUAL(not_pending, 0); /* one message per order: DEDUP */
    CU_ASSERT_EQUAL(oe_stop_consumer(pid3), 0);

    oe_assert_all_cancelled(&env, BROKER_DB, BROKER_ORDERS);
    if (CU_get_number_of_failures() > 0) {
        oe_print_file(log1);
        oe_print_file(log2);
        oe_print_file(log3);
    }
    tu_rmtree(dir);
}

/* The alert command's pid, from the file it wrote (0 before it ran). */
static pid_t alert_pid(const char *path)
{
    FILE *f = fopen(path, "r");
    long pid = 0;
    if (f != NULL) {
        if (fscanf(f, "%ld", &pid) != 1)
            pid = 0;
        fclose(f);
    }
    return (pid_t)pid;
}

static int alert_running(void *arg)
{
    return alert_pid(arg) > 0;
}

static int process_gone(void *arg)
{
    return kill(*(pid_t *)arg, 0) != 0;
}

static void test_hung_alert_command(void)
{
    CU_ASSERT_EQUAL_FATAL(oe_fresh_daemon_database(&env, ALERT_DB, 0, NULL), 0);
    CU_ASSERT_EQUAL_FATAL(seed(ALERT_DB, 1, 1, -600000), 0); /* one order overdue: the alert fires */

    char dir[512], log1[600], log2[600], log3[600], pidfile[600], command[2048];
    CU_ASSERT_EQUAL_FATAL(log_dir("compensator-stop-alert", dir, log1, log2, log3), 0);
    snprintf(pidfile, sizeof pidfile, "%s/alert.pid", dir);
    /* A pager that hangs: exec keeps the shell's pid, written first. */
    snprintf(command, sizeof command, "echo $$ > %s.tmp && mv %s.tmp %s && exec sleep 60", pidfile, pidfile, pidfile);
    const char *extra[] = {
        "--alert-overdue-pending", "1", "--alert-command", command, "--alert-command-timeout", "1h", NULL
    };
    pid_t pid = start_compensator(ALERT_DB, "monitor", tu_free_port(), log1, extra);
    CU_ASSERT_TRUE_FATAL(pid > 0);
    if (tu_poll_until(alert_running, pidfile, 30000, 20) != 0) {
        oe_print_file(log1);
        kill(pid, SIGKILL);
        waitpid(pid, NULL, 0);
        CU_FAIL_FATAL("the alert command never ran");
    }
    pid_t command_pid = alert_pid(pidfile);
    oe_assert_bounded_stop(pid, 200000, STOP_BOUND, log1, "alert-command: still running when the stop cut",
                           "the monitor waiting for an alert command that hangs (alert-command-timeout 1h)");
    /* Killed with its process group, not left behind. */
    int gone = tu_poll_until(process_gone, &command_pid, 10000, 20) == 0;
    TU_CHECK(gone, "the alert command (pid %d) outlived the compensator", (int)command_pid);
    if (!gone)
        kill(command_pid, SIGKILL);
    if (CU_get_number_of_failures() > 0)
        oe_print_file(log1);
    tu_rmtree(dir);
}

/* /healthz while MariaDB hangs (SIGSTOP): every layer sits in a statement
 * that would fail only at mysql-read-timeout (60 s here); /healthz must
 * answer 503 naming a stuck layer within comp_stats_stuck_after_ms (8 s
 * with these timeouts: broker-connect-timeout 1 s + 2 x broker-timeout 1 s
 * + 5 s; 6 s for the layers without a broker), and 200 again once SIGCONT
 * lets the statements finish. Before the stuck check it answered 200 until
 * the read timeout. */
#define HEALTH_DB    "hhealth"
#define HEALTH_BOUND 8000 /* ms: the largest layer bound with the flags below */

static void test_hung_server_health(void)
{
    CU_ASSERT_EQUAL_FATAL(oe_fresh_daemon_database(&env, HEALTH_DB, 0, NULL), 0);
    CU_ASSERT_EQUAL_FATAL(seed(HEALTH_DB, 1, 5, 3600000), 0); /* nothing due: the layers only read */
    char dir[512], log1[600], log2[600], log3[600];
    CU_ASSERT_EQUAL_FATAL(log_dir("compensator-health", dir, log1, log2, log3), 0);
    const char *extra[] = { "--mysql-read-timeout",
                            READ_TIMEOUT,
                            "--mysql-lock-wait-timeout",
                            "1s",
                            "--broker-connect-timeout",
                            "1s",
                            "--broker-timeout",
                            "1s",
                            NULL };
    int health_port = tu_free_port();
    char health[4096];
    pid_t pid = start_compensator(HEALTH_DB, ALL_LAYERS, health_port, log1, extra);
    CU_ASSERT_TRUE_FATAL(pid > 0);
    CU_ASSERT_EQUAL(tu_poll_http_status(health_port, "/healthz", 200, 30000, 50, health, sizeof health), 0);

    CU_ASSERT_EQUAL_FATAL(kill(env.server.pid, SIGSTOP), 0);
    uint64_t t0 = clock_mono_ms();
    int turned = tu_poll_http_status(health_port, "/healthz", 503, HEALTH_BOUND + 20000, 100, health, sizeof health);
    uint64_t took = clock_mono_ms() - t0;
    CU_ASSERT_EQUAL(kill(env.server.pid, SIGCONT), 0);
    printf("\n    SIGSTOPped MariaDB: /healthz %s after %.1f s (bound %.1f s): %s", turned == 0 ? "503" : "still 200",
           (double)took / 1000, HEALTH_BOUND / 1000.0, health);
    CU_ASSERT_EQUAL(turned, 0);
    CU_ASSERT_TRUE(took <= HEALTH_BOUND + 3000);
    CU_ASSERT_PTR_NOT_NULL(strstr(health, ": stuck: no step ended for "));
    CU_ASSERT_PTR_NOT_NULL(strstr(health, "MariaDB or the broker does not answer"));

    CU_ASSERT_EQUAL(tu_poll_http_status(health_port, "/healthz", 200, 30000, 100, health, sizeof health), 0);
    printf("    after SIGCONT: /healthz %s", health);
    CU_ASSERT_EQUAL(kill(pid, SIGTERM), 0);
    int status = -1;
    CU_ASSERT_EQUAL(waitpid(pid, &status, 0), pid);
    CU_ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    if (CU_get_number_of_failures() > 0)
        oe_print_file(log1);
    tu_rmtree(dir);
}

/* /healthz under lock contention (a flash sale): another connection holds
 * every stock row, so each cancel transaction of the layer (cancel-batch 8)
 * waits mysql-lock-wait-timeout (1 s) on its stock UPDATE, fails with 1205
 * and is split, down to single orders: 15 waits inside one
 * hg_order_cancel_batch, far past the 6 s bound, yet MariaDB answers every
 * statement. /healthz must stay 200 all along (before: "<layer>: stuck: no
 * step ended for 6.x s" after 6 s, so a liveness probe would restart a
 * compensator that only waits on locks). The contention outlasts the whole
 * batch (about 16 s): its call returns with every order failed on 1205 and
 * the next round meets the same locks; that round is not failed for it —
 * a lock conflict is retried next round like a row SKIP LOCKED passed over
 * (before: 503 "<layer>: 8 … failed, first: … 1205 Lock wait timeout" for
 * the whole next round). Once the locks are released every order is
 * cancelled. One layer at a time: two would skip each other's claimed
 * orders (SKIP LOCKED) and keep their batches small. */
#define CONTENDED_ORDERS 8
#define CONTENDED_BOUND  6000                      /* ms: mysql-lock-wait-timeout 1 s + 5 s */
#define CONTENDED_SPAN   (CONTENDED_BOUND + 16000) /* ms of contention watched: past the bound and the batch */

/* db: a database of the layer's own (a test stopped by a failure leaves its compensator). */
static void contended_health(const char *layer, const char *db)
{
    CU_ASSERT_EQUAL_FATAL(oe_fresh_daemon_database(&env, db, 0, NULL), 0);
    CU_ASSERT_EQUAL_FATAL(seed(db, 1, CONTENDED_ORDERS, -600000), 0); /* overdue for 10 min */
    char dir[512], log1[600], log2[600], log3[600];
    CU_ASSERT_EQUAL_FATAL(log_dir("compensator-contended", dir, log1, log2, log3), 0);

    /* Every stock row locked by an open transaction of another connection. */
    MYSQL *holder = sql_connect_root(&env.server, db);
    CU_ASSERT_PTR_NOT_NULL_FATAL(holder);
    CU_ASSERT_EQUAL_FATAL(sql_query(holder, "START TRANSACTION"), 0);
    CU_ASSERT_EQUAL_FATAL(sql_query(holder, "SELECT sku_id FROM stock FOR UPDATE"), 0);
    MYSQL_RES *res = mysql_store_result(holder);
    CU_ASSERT_TRUE(res != NULL && mysql_num_rows(res) > 0);
    if (res != NULL)
        mysql_free_result(res);

    const char *extra[] = {
        "--mysql-read-timeout", READ_TIMEOUT, "--mysql-lock-wait-timeout", "1s", "--cancel-batch", "8", NULL
    };
    int health_port = tu_free_port();
    char health[4096];
    pid_t pid = start_compensator(db, layer, health_port, log1, extra);
    CU_ASSERT_TRUE_FATAL(pid > 0);
    CU_ASSERT_EQUAL(tu_poll_http_status(health_port, "/healthz", 200, 30000, 50, health, sizeof health), 0);

    int answered = 0;
    double first_s = 0;
    int unhealthy =
        tu_watch_http_503(health_port, "/healthz", CONTENDED_SPAN, 100, &answered, health, sizeof health, &first_s);
    if (unhealthy > 0)
        printf("\n    lock contention (%s): /healthz 503 after %.1f s: %s", layer, first_s, health);
    long long cancelled = oe_scalarf(&env, "SELECT COUNT(*) FROM %s.orders WHERE status = 'cancelled'", db);
    long long waiting = oe_scalarf(&env,
                                   "SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE DB = '%s'"
                                   " AND INFO LIKE 'UPDATE stock%%'",
                                   db);
    printf("\n    %s, %d s of lock waits (%lld cancelled, %lld stock UPDATE waiting at the end): /healthz 503 %d times "
           "of %d answers\n",
           layer, CONTENDED_SPAN / 1000, cancelled, waiting, unhealthy, answered);
    CU_ASSERT_EQUAL(cancelled, 0);
    CU_ASSERT_EQUAL(waiting, 1); /* the layer still waits on the locks: the contention lasted the whole span */
    CU_ASSERT_TRUE(answered > 0);
    CU_ASSERT_EQUAL(unhealthy, 0);

    /* The locks released: everything is cancelled, /healthz 200. */
    CU_ASSERT_EQUAL(sql_query(holder, "ROLLBACK"), 0);
    CU_ASSERT_EQUAL(
        oe_wait_scalar(&env, CONTENDED_ORDERS, 60000, "SELECT COUNT(*) FROM %s.orders WHERE status = 'cancelled'", db),
        CONTENDED_ORDERS);
    CU_ASSERT_EQUAL(tu_poll_http_status(health_port, "/healthz", 200, 30000, 100, health, sizeof health), 0);
    CU_ASSERT_EQUAL(kill(pid, SIGTERM), 0);
    int status = -1;
    CU_ASSERT_EQUAL(waitpid(pid, &status, 0), pid);
    CU_ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    if (CU_get_number_of_failures() > 0)
        oe_print_file(log1);
    mysql_close(holder);
    tu_rmtree(dir);
}

static void test_lock_contention_health_overdue(void)
{
    contended_health("overdue", "hcontended_overdue");
}

static void test_lock_contention_health_inspection(void)
{
    contended_health("inspection", "hcontended_inspection");
}

static const tu_test_t stop_tests[] = {
    { "SIGTERM on a hung MariaDB: bounded stop, cut work rolled back, all cancelled once after", test_hung_server },
    { "SIGTERM on a hung broker: bounded stop, the cut batch left leased, relayed and cancelled once after",
      test_hung_broker },
    { "SIGTERM while an alert command hangs: bounded stop, the command killed", test_hung_alert_command },
    { "/healthz on a hung MariaDB: 503 naming the stuck layers within the bound, 200 after SIGCONT",
      test_hung_server_health },
    { "/healthz under lock contention, the overdue layer: a batch split down to single orders, stays 200",
      test_lock_contention_health_overdue },
    { "/healthz under lock contention, the inspection: a batch split down to single orders, stays 200",
      test_lock_contention_health_inspection },
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
