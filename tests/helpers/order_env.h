/*
 * tests/helpers/order_env.h — the set-up shared by the hourglass-consumer
 * tests and the consumer bench: a private MariaDB (tu_mariadb_start), the real
 * hourglass-broker (broker_proc), an admin connection, fresh order databases
 * on the reference schema, the real ./hourglass-consumer as a child process
 * and its /metrics; and the orders in the states of the order view (an
 * outbox row never sent, a paid order, a message parked in a DLQ) that the
 * hourglass-cli and console tests seed alike.
 *
 * Functions return 0 / -1 (or a pointer / NULL, a pid / -1) and say why on
 * stderr or in err[errlen]; only the oe_assert_* ones are CUnit checks, for
 * the tests (the benches link them too, and never call them).
 */
#ifndef HG_TESTS_ORDER_ENV_H
#define HG_TESTS_ORDER_ENV_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include <mysql.h>

#include "include/hourglass/hourglass.h"
#include "include/hourglass/order.h"
#include "tests/helpers/broker_proc.h"
#include "tests/helpers/order_fixture.h"
#include "tests/helpers/testutil.h"

#define OE_CONSUMER_BIN HG_BUILDDIR "/hourglass-consumer"
#define OE_TOPIC        "order-timeout" /* the topic every order test and the bench use */

typedef struct oe_env {
    tu_mariadb_t server; /* the private MariaDB (root, no password, unix socket) */
    bp_broker_t broker;  /* the real hourglass-broker on 127.0.0.1:broker.port */
    MYSQL *admin;        /* root on server.socket, no default database */
} oe_env_t;

/* Start the MariaDB (with env->server.extra_args and .tmpfs_size, kept from
 * before the call: more mariadbd flags, a tmpfs for its datadir, or NULL), the broker (extra broker flags:
 * NULL-terminated, may be NULL) and the admin connection. Call bp_set_failure_counter first to have
 * bp's log printed when a test failed. Returns 0, or -1 with the cause in err
 * (whatever was started is stopped again). */
int oe_start(oe_env_t *env, const char *const *broker_extra, char *err, size_t errlen);

/* oe_start for a CUnit suite's init (no CUnit here: the caller passes its
 * failure counter, e.g. CU_get_number_of_failures, to bp_set_failure_counter)
 * with no extra broker flags; a failure is printed to stderr. Returns 0 / -1. */
int oe_suite_start(oe_env_t *env, unsigned (*failures)(void));

/* oe_suite_start with the MariaDB's binary log on (--log-bin: env->server.extra_args
 * is set to it), which oe_hold_commits needs. Returns 0 / -1. */
int oe_suite_start_binlog(oe_env_t *env, unsigned (*failures)(void));

/* Hold every COMMIT on env's MariaDB (started by oe_suite_start_binlog) up to
 * wait_ms in the binary log's group commit wait (binlog_commit_wait_usec,
 * binlog_commit_wait_count 2), so that a test can KILL a connection while its
 * COMMIT is in flight (oe_kill_commit_in_flight). A KILL does not cut that
 * wait short: the COMMIT lands after it, and its client sees the connection
 * lost — an outcome it cannot know. Returns 0, or -1 with the cause printed. */
int oe_hold_commits(oe_env_t *env, unsigned wait_ms);

/* The highest connection id on env's MariaDB now (its connection ids only
 * grow, so every connection opened after the call has a higher one), for
 * oe_kill_commit_in_flight; -1 or -2 when the query failed. */
long long oe_newest_connection_id(oe_env_t *env);

/* Poll (every 5 ms, up to deadline_ms) for a connection with an id above
 * after_id whose statement is COMMIT, KILL CONNECTION it, and stop holding
 * COMMITs (binlog_commit_wait_count 0: later ones go at once; also when none
 * was found). after_id, from oe_newest_connection_id before the program under
 * test starts, leaves out the connections that were there before it: a
 * server thread can still show a COMMIT whose client already has the answer
 * and has hung up, and a KILL then finds no connection. Returns the killed
 * connection's id, or -1 with the cause printed. */
long long oe_kill_commit_in_flight(oe_env_t *env, long long after_id, int deadline_ms);

/* The main() of an order test program: SIGPIPE ignored, the order library
 * initialised (before any thread starts), then tu_cunit_main(argc, argv,
 * add_suites). $HG_TEST_CASES, when set, runs only the cases whose names
 * contain one of its '|'-separated parts, in the table's order (the others
 * are inactive and not failures; none selected fails as "no tests ran").
 * Returns the exit code. */
int oe_cunit_main(int argc, char **argv, int (*add_suites)(void));

/* Close the admin connection, stop the broker and the MariaDB (removing
 * their directories). Returns bp_destroy's result. Safe on a zeroed env. */
int oe_stop(oe_env_t *env);

/* The clean-up of a suite whose tests SIGSTOP the MariaDB or the broker:
 * SIGCONT to both (a failed test must not leave them stopped), then
 * oe_stop. Returns 0 (what went wrong is printed). */
int oe_suite_stop(oe_env_t *env);

/* The first column of the first row of sql on the admin connection as an
 * integer; -1 for no row or NULL, -2 when the query failed (printed). */
long long oe_scalar(oe_env_t *env, const char *sql);

/* KILL CONNECTION every connection of the MariaDB user user (the admin's
 * own is another user): how many were killed, -1 when the list failed
 * (printed). */
int oe_kill_user_connections(oe_env_t *env, const char *user);

/* oe_scalar of a printf-formatted statement. */
long long oe_scalarf(oe_env_t *env, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* The id of a connection on database db that is inside a DO SLEEP (a test's
 * side effect holding a consumer between its claim and its COMMIT), or
 * -1/-2 as oe_scalar. By its state, not its text alone: the daemons prepare
 * their statements at start, and PROCESSLIST shows the text while a
 * statement is prepared too, before any claim. */
long long oe_sleeping_connection(oe_env_t *env, const char *db);

/* Poll oe_scalarf(fmt, …) every 20 ms until it equals want or deadline_ms
 * passes; returns the last value. */
long long oe_wait_scalar(oe_env_t *env, long long want, int deadline_ms, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* A handle on database name (root over the socket). NULL with err filled. */
hg_order_db *oe_open_db(const oe_env_t *env, const char *name, hg_order_error_t *err);

/* A root connection on database name (sql_connect_root). NULL with the cause
 * printed. mysql_close it. */
MYSQL *oe_connect(const oe_env_t *env, const char *name);

/* of_seed / of_check (order_fixture.h) on database name, over a connection of
 * their own. Return 0 / -1 with err. */
int oe_seed(const oe_env_t *env, const char *name, const of_seed_spec_t *spec, hg_order_error_t *err);
int oe_check(const oe_env_t *env, const char *name, unsigned grace_s, of_report_t *report, hg_order_error_t *err);

/* CUnit checks that all n orders of database name were cancelled exactly
 * once: oe_check's invariants hold (the first defect printed when not), n
 * cancelled, no stock left reserved, every unit back exactly once, no SKU
 * unbalanced, none paid and cancelled. */
void oe_assert_all_cancelled(const oe_env_t *env, const char *name, long long n);

/* A database for the daemons under test: oe_fresh_database(name, n, NULL)
 * with its handle closed (no idle connection of the test's own on it), and
 * the consumer group name on OE_TOPIC, FROM NOW. c (may be NULL) gets the broker
 * connection that created it, left open for the caller (rc_close). Returns
 * 0, or -1 with the cause printed. */
int oe_fresh_daemon_database(oe_env_t *env, const char *name, size_t n, rc_conn_t *c);

/* SIGTERM pid, a daemon under test, and check its bounded stop: it exits 0
 * in less than bound_ms (waited for up to deadline_ms, so that a stop that
 * is too slow is measured, not cut short) and its log at log_path says
 * logged within a second. Prints "SIGTERM with <what>: exited <status>
 * after <ms> ms". CUnit checks. */
void oe_assert_bounded_stop(pid_t pid, int deadline_ms, int bound_ms, const char *log_path, const char *logged,
                            const char *what);

/* oe_seed of the one order id on database name, as the order-view tests
 * (hourglass-cli's orders, the console) seed theirs: SKUs 1-5 with 10^6
 * units each, 1..max_items items of 1..max_qty units (random seed id),
 * expiring expire_in_ms from now (negative: overdue), its outbox row 'sent'.
 * Returns 0, or -1 with the cause printed. */
int oe_seed_order(const oe_env_t *env, const char *name, uint64_t id, int64_t expire_in_ms, unsigned max_items,
                  unsigned max_qty);

/* Order id's outbox row on database name back to 'new' with no attempt
 * counted: a timeout that was never sent. Returns 0, or -1 with the cause
 * printed. */
int oe_outbox_unsent(oe_env_t *env, const char *name, uint64_t id);

/* hg_order_pay of order id on db; anything but HG_ORDER_PAID is a failure.
 * Returns 0, or -1 with the cause printed. */
int oe_pay(hg_order_db *db, uint64_t id);

/* CREATE DATABASE name, the reference schema, and seed it: spec, or when spec
 * is NULL the default (ids 1..n, 30 SKUs with 10^6 units each, 1–3 items of
 * 1–3 units, expiring in 30 min, with outbox rows, random seed 3). Returns an
 * open handle on it, or NULL (the cause printed). */
hg_order_db *oe_fresh_database(oe_env_t *env, const char *name, size_t n, const of_seed_spec_t *spec);

/* Start ./hourglass-consumer on database db: the broker's URI, group, topic
 * OE_TOPIC, the socket as root, `workers`, --block 200ms, --metrics-port
 * (0: off), --log-level warn (left out when extra has --config, so the
 * file's log-level applies: SIGHUP tests change it), --retry-base 20ms,
 * --lease 3s, then the extra flags (NULL-terminated, may be NULL; a later
 * flag wins). stdout and stderr
 * go to log_path. Returns the pid or -1. */
pid_t oe_start_consumer(const oe_env_t *env, const char *db, const char *group, int workers, int metrics_port,
                        const char *log_path, const char *const *extra);

/* Fork and exec argv[0] (a path; argv NULL-terminated) with stdout and
 * stderr into log_path (truncated). Returns the pid, or -1 when fork failed
 * (an exec failure shows as exit status 127). */
pid_t oe_spawn(const char *const *argv, const char *log_path);

/* SIGTERM and wait (10 s, then SIGKILL); returns the exit status, or -1 when
 * it did not exit normally. */
int oe_stop_consumer(pid_t pid);

/* Copy a file (a consumer's log) to stderr, with a heading. */
void oe_print_file(const char *path);

/* GET /metrics from 127.0.0.1:port once and read n metrics (the value of the
 * line "NAME VALUE"); values[i] = -1 for a metric not found. Returns 0, or
 * -1 when the server did not answer (every value -1). Thread-safe. */
int oe_metrics(int port, size_t n, const char *const *names, double *values);

/* One metric as an integer, -1 when absent or unreachable. */
long long oe_metric(int port, const char *name);

/* How many established connections to env's broker hold request bytes it
 * has not read (a SIGSTOPped broker reads nothing): each is a client that
 * wrote its command and waits for the reply. Read from /proc/net/tcp and
 * tcp6 (the broker's local port, state established, rx_queue > 0). */
int oe_broker_unread_requests(const oe_env_t *env);

/* SEND OE_TOPIC with the payloads first..last (the order ids in decimal), one
 * by one. Returns 0, or -1 with the cause in err. */
int oe_send_ids(rc_conn_t *c, uint64_t first, uint64_t last, char *err, size_t errlen);

/* Park a message in group's DLQ: SEND topic payload KEY key on c, PULL it on
 * group (COUNT 1, BLOCK 5 s) and NACK it with reason; the group has MAXRETRY
 * 0, so the NACK parks it. Returns 0, or -1 with the cause printed. */
int oe_park(rc_conn_t *c, const char *group, const char *topic, const char *payload, const char *key,
            const char *reason);

/* SEND topic the payloads 1..n (the order ids in decimal) through
 * libhourglass, pipelined OE_SEND_PIPELINE at a time, each with delay; keyed:
 * each message's key is its id too. Returns 0, or -1 with the cause in err. */
#define OE_SEND_PIPELINE 1000
int oe_send_ids_pipelined(const oe_env_t *env, const char *topic, uint64_t n, hg_delay_t delay, int keyed, char *err,
                          size_t errlen);

#endif
