/*
 * tests/helpers/order_env.c — see order_env.h.
 */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include "tests/helpers/order_env.h"
#include "tests/helpers/sql_client.h"

#include "base/alloc.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <CUnit/CUnit.h>

int oe_start(oe_env_t *env, const char *const *broker_extra, char *err, size_t errlen)
{
    const char *const *server_extra = env->server.extra_args;
    const char *server_tmpfs = env->server.tmpfs_size;
    memset(env, 0, sizeof *env);
    env->server.extra_args = server_extra;
    env->server.tmpfs_size = server_tmpfs;
    if (tu_mariadb_start(&env->server, err, errlen) != 0) {
        char cause[4096];
        snprintf(cause, sizeof cause, "%s", err);
        snprintf(err, errlen, "cannot start a private MariaDB: %s", cause);
        return -1;
    }
    char berr[2048];
    if (bp_start(&env->broker, broker_extra, berr, sizeof berr) != 0) {
        snprintf(err, errlen, "cannot start hourglass-broker: %s", berr);
        tu_mariadb_stop(&env->server);
        return -1;
    }
    env->admin = sql_connect_root(&env->server, NULL);
    if (env->admin == NULL) {
        snprintf(err, errlen, "admin connection to %s failed (the error is printed above)", env->server.socket);
        oe_stop(env);
        return -1;
    }
    return 0;
}

int oe_suite_start(oe_env_t *env, unsigned (*failures)(void))
{
    char err[4096];
    bp_set_failure_counter(failures);
    if (oe_start(env, NULL, err, sizeof err) != 0) {
        fprintf(stderr, "\nFAIL: %s\n", err);
        return -1;
    }
    return 0;
}

int oe_suite_start_binlog(oe_env_t *env, unsigned (*failures)(void))
{
    static const char *const binlog[] = { "--log-bin", NULL };
    env->server.extra_args = binlog;
    return oe_suite_start(env, failures);
}

/* sql on env's admin connection: 0, or -1 (printed). */
static int admin_exec(oe_env_t *env, const char *sql)
{
    if (mysql_query(env->admin, sql) == 0)
        return 0;
    fprintf(stderr, "SQL failed: %s: %s\n", sql, mysql_error(env->admin));
    return -1;
}

int oe_hold_commits(oe_env_t *env, unsigned wait_ms)
{
    char sql[96];
    snprintf(sql, sizeof sql, "SET GLOBAL binlog_commit_wait_usec = %u", wait_ms * 1000);
    if (admin_exec(env, sql) != 0)
        return -1;
    return admin_exec(env, "SET GLOBAL binlog_commit_wait_count = 2"); /* waits for a second COMMIT to join */
}

long long oe_newest_connection_id(oe_env_t *env)
{
    return oe_scalar(env, "SELECT MAX(id) FROM information_schema.processlist");
}

typedef struct commit_search {
    oe_env_t *env;
    long long after_id;
    long long id;
} commit_search_t;

/* tu_poll_until's check: 1 once a connection newer than ->after_id is running
 * a COMMIT (its id in ->id). An older one showing COMMIT is no COMMIT in flight
 * of the program under test: its server thread can still show the statement
 * for a moment after its client got the answer and hung up. */
static int commit_in_flight(void *arg)
{
    commit_search_t *s = arg;
    char sql[160];
    snprintf(sql, sizeof sql,
             "SELECT id FROM information_schema.processlist WHERE info = 'COMMIT' AND id > %lld LIMIT 1", s->after_id);
    s->id = oe_scalar(s->env, sql);
    return s->id > 0;
}

long long oe_kill_commit_in_flight(oe_env_t *env, long long after_id, int deadline_ms)
{
    commit_search_t search = { env, after_id, -1 };
    int found = tu_poll_until(commit_in_flight, &search, deadline_ms, 5) == 0;
    char sql[64];
    snprintf(sql, sizeof sql, "KILL CONNECTION %lld", search.id);
    int killed = found && admin_exec(env, sql) == 0;
    if (!found)
        fprintf(stderr, "no COMMIT in flight on a connection after %lld within %d ms\n", after_id, deadline_ms);
    if (admin_exec(env, "SET GLOBAL binlog_commit_wait_count = 0") != 0)
        return -1;
    return killed ? search.id : -1;
}

/* The program's own add_suites, called by add_selected_suites. */
static int (*program_add_suites)(void);

/* Whether name holds one of the '|'-separated parts of wanted. */
static int case_wanted(const char *name, const char *wanted)
{
    for (const char *part = wanted; *part != '\0';) {
        size_t len = strcspn(part, "|");
        char needle[256];
        if (len > 0 && len < sizeof needle) {
            memcpy(needle, part, len);
            needle[len] = '\0';
            if (strstr(name, needle) != NULL)
                return 1;
        }
        part += len + (part[len] == '|');
    }
    return 0;
}

/* The program's suites, then every case whose name holds none of
 * $HG_TEST_CASES's parts made inactive (and not counted as a failure). */
static int add_selected_suites(void)
{
    const char *wanted = getenv("HG_TEST_CASES");
    unsigned active = 0;

    if (program_add_suites() != 0)
        return -1;
    if (wanted == NULL || wanted[0] == '\0')
        return 0;
    CU_set_fail_on_inactive(CU_FALSE);
    for (CU_pSuite s = CU_get_registry()->pSuite; s != NULL; s = s->pNext)
        for (CU_pTest t = s->pTest; t != NULL; t = t->pNext) {
            int on = case_wanted(t->pName, wanted);
            CU_set_test_active(t, on ? CU_TRUE : CU_FALSE);
            active += (unsigned)on;
        }
    printf("HG_TEST_CASES='%s': %u case(s) selected\n", wanted, active);
    return 0;
}

int oe_cunit_main(int argc, char **argv, int (*add_suites)(void))
{
    signal(SIGPIPE, SIG_IGN);
    hg_order_library_init();
    program_add_suites = add_suites;
    return tu_cunit_main(argc, argv, add_selected_suites);
}

int oe_stop(oe_env_t *env)
{
    if (env->admin != NULL)
        mysql_close(env->admin);
    env->admin = NULL;
    int rc = bp_destroy(&env->broker);
    tu_mariadb_stop(&env->server);
    return rc;
}

int oe_suite_stop(oe_env_t *env)
{
    if (env->server.pid > 0)
        kill(env->server.pid, SIGCONT);
    if (env->broker.pid > 0)
        kill(env->broker.pid, SIGCONT);
    oe_stop(env);
    return 0;
}

long long oe_scalar(oe_env_t *env, const char *sql)
{
    return sql_scalar(env->admin, sql);
}

int oe_kill_user_connections(oe_env_t *env, const char *user)
{
    char sql[160];
    MYSQL_RES *res = NULL;
    snprintf(sql, sizeof sql, "SELECT id FROM information_schema.processlist WHERE user='%s'", user);
    if (mysql_query(env->admin, sql) != 0 || (res = mysql_store_result(env->admin)) == NULL) {
        fprintf(stderr, "%s: %s\n", sql, mysql_error(env->admin));
        return -1;
    }
    int killed = 0;
    MYSQL_ROW row;
    while ((row = mysql_fetch_row(res)) != NULL) {
        snprintf(sql, sizeof sql, "KILL CONNECTION %s", row[0]);
        killed += mysql_query(env->admin, sql) == 0;
    }
    mysql_free_result(res);
    return killed;
}

long long oe_scalarf(oe_env_t *env, const char *fmt, ...)
{
    char sql[4096];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(sql, sizeof sql, fmt, ap);
    va_end(ap);
    return oe_scalar(env, sql);
}

long long oe_sleeping_connection(oe_env_t *env, const char *db)
{
    return oe_scalarf(env,
                      "SELECT ID FROM information_schema.PROCESSLIST WHERE DB = '%s' AND INFO LIKE 'DO SLEEP%%'"
                      " AND STATE = 'User sleep'",
                      db);
}

long long oe_wait_scalar(oe_env_t *env, long long want, int deadline_ms, const char *fmt, ...)
{
    char sql[4096];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(sql, sizeof sql, fmt, ap);
    va_end(ap);
    uint64_t end = tu_now_mono_ms() + (uint64_t)deadline_ms;
    for (;;) {
        long long v = oe_scalar(env, sql);
        if (v == want || tu_now_mono_ms() >= end)
            return v;
        struct timespec ts = { 0, 20 * 1000 * 1000 };
        nanosleep(&ts, NULL);
    }
}

hg_order_db *oe_open_db(const oe_env_t *env, const char *name, hg_order_error_t *err)
{
    hg_order_db_params_t p = { .socket = env->server.socket, .user = "root", .database = name };
    return hg_order_db_open(&p, err);
}

MYSQL *oe_connect(const oe_env_t *env, const char *name)
{
    return sql_connect_root(&env->server, name);
}

int oe_seed(const oe_env_t *env, const char *name, const of_seed_spec_t *spec, hg_order_error_t *err)
{
    MYSQL *m = oe_connect(env, name);
    if (m == NULL) {
        snprintf(err->message, sizeof err->message, "cannot connect to database %s (printed above)", name);
        return -1;
    }
    int rc = of_seed(m, spec, err);
    mysql_close(m);
    return rc;
}

int oe_check(const oe_env_t *env, const char *name, unsigned grace_s, of_report_t *report, hg_order_error_t *err)
{
    memset(report, 0, sizeof *report);
    MYSQL *m = oe_connect(env, name);
    if (m == NULL) {
        snprintf(err->message, sizeof err->message, "cannot connect to database %s (printed above)", name);
        return -1;
    }
    int rc = of_check(m, grace_s, report, err);
    mysql_close(m);
    return rc;
}

void oe_assert_all_cancelled(const oe_env_t *env, const char *name, long long n)
{
    of_report_t rep;
    hg_order_error_t e;

    CU_ASSERT_EQUAL_FATAL(oe_check(env, name, 3600, &rep, &e), 0);
    if (!rep.ok)
        fprintf(stderr, "\n  first defect: %s\n", rep.first_defect);
    CU_ASSERT_TRUE(rep.ok);
    CU_ASSERT_EQUAL(rep.cancelled, n);
    CU_ASSERT_EQUAL(rep.reserved, 0);
    CU_ASSERT_EQUAL(rep.available, rep.received); /* every unit back exactly once */
    CU_ASSERT_EQUAL(rep.skus_unbalanced, 0);
    CU_ASSERT_EQUAL(rep.paid_and_cancelled, 0);
}

int oe_fresh_daemon_database(oe_env_t *env, const char *name, size_t n, rc_conn_t *c)
{
    hg_order_db *db = oe_fresh_database(env, name, n, NULL);
    if (db == NULL)
        return -1;
    hg_order_db_close(db);
    rc_conn_t own, *conn = c != NULL ? c : &own;
    char err[512];
    if (bp_connect(&env->broker, conn, err, sizeof err) != 0 ||
        bp_ok_cmd(conn, err, sizeof err, "GROUP", "CREATE", name, OE_TOPIC, "FROM", "NOW", NULL) != 0) {
        fprintf(stderr, "\nFAIL: group %s: %s\n", name, err);
        rc_close(conn);
        return -1;
    }
    if (conn == &own)
        rc_close(&own);
    return 0;
}

void oe_assert_bounded_stop(pid_t pid, int deadline_ms, int bound_ms, const char *log_path, const char *logged,
                            const char *what)
{
    uint64_t stop_ms = 0;
    CU_ASSERT_EQUAL(kill(pid, SIGTERM), 0);
    int status = tu_wait_exit(pid, deadline_ms, &stop_ms);
    printf("\n    SIGTERM with %s: exited %d after %" PRIu64 " ms\n", what, status, stop_ms);
    CU_ASSERT_EQUAL(status, 0);
    TU_CHECK(stop_ms < (uint64_t)bound_ms, "the stop took %" PRIu64 " ms (bound %d ms)", stop_ms, bound_ms);
    CU_ASSERT_EQUAL(tu_wait_file_contains(log_path, logged, 1000), 0);
}

int oe_seed_order(const oe_env_t *env, const char *name, uint64_t id, int64_t expire_in_ms, unsigned max_items,
                  unsigned max_qty)
{
    of_seed_spec_t spec = { .first_id = id,
                            .orders = 1,
                            .first_sku = 1,
                            .skus = 5,
                            .max_items = max_items,
                            .max_qty = max_qty,
                            .stock_per_sku = 1000000,
                            .expire_in_ms = expire_in_ms,
                            .with_outbox = 1,
                            .random_seed = (uint32_t)id };
    hg_order_error_t err = { 0 };
    if (oe_seed(env, name, &spec, &err) != 0) {
        fprintf(stderr, "seed %" PRIu64 ": %s\n", id, err.message);
        return -1;
    }
    return 0;
}

int oe_outbox_unsent(oe_env_t *env, const char *name, uint64_t id)
{
    char sql[160];
    snprintf(sql, sizeof sql, "UPDATE %s.order_timeout_msg SET status='new', attempts=0 WHERE order_id=%" PRIu64, name,
             id);
    if (mysql_query(env->admin, sql) != 0) {
        fprintf(stderr, "\nFAIL: outbox row of %" PRIu64 " back to new: %s\n", id, mysql_error(env->admin));
        return -1;
    }
    return 0;
}

int oe_pay(hg_order_db *db, uint64_t id)
{
    hg_order_outcome_t outcome;
    hg_order_error_t err = { 0 };
    if (hg_order_pay(db, id, &outcome, &err) != 0 || outcome != HG_ORDER_PAID) {
        fprintf(stderr, "\nFAIL: pay %" PRIu64 ": %s\n", id, err.message);
        return -1;
    }
    return 0;
}

hg_order_db *oe_fresh_database(oe_env_t *env, const char *name, size_t n, const of_seed_spec_t *spec)
{
    char sql[128];
    snprintf(sql, sizeof sql, "CREATE DATABASE %s", name);
    if (mysql_query(env->admin, sql) != 0) {
        fprintf(stderr, "%s: %s\n", sql, mysql_error(env->admin));
        return NULL;
    }
    of_seed_spec_t dflt = { .first_id = 1,
                            .orders = n,
                            .first_sku = 1,
                            .skus = 30,
                            .max_items = 3,
                            .max_qty = 3,
                            .stock_per_sku = 1000000,
                            .expire_in_ms = 1800000,
                            .with_outbox = 1,
                            .random_seed = 3 };
    hg_order_error_t err = { 0 };
    hg_order_db *db = oe_open_db(env, name, &err);
    if (db == NULL || hg_order_schema_create(db, &err) != 0 || oe_seed(env, name, spec ? spec : &dflt, &err) != 0) {
        fprintf(stderr, "fresh database %s: %s\n", name, err.message);
        hg_order_db_close(db);
        return NULL;
    }
    return db;
}

pid_t oe_start_consumer(const oe_env_t *env, const char *db, const char *group, int workers, int metrics_port,
                        const char *log_path, const char *const *extra)
{
    char uri[64], w[16], mport[16];
    snprintf(uri, sizeof uri, "hourglass://127.0.0.1:%d", env->broker.port);
    snprintf(w, sizeof w, "%d", workers);
    snprintf(mport, sizeof mport, "%d", metrics_port);
    const char *base[] = { OE_CONSUMER_BIN,
                           "--uri",
                           uri,
                           "--group",
                           group,
                           "--topic",
                           OE_TOPIC,
                           "--mysql-socket",
                           env->server.socket,
                           "--mysql-user",
                           "root",
                           "--mysql-database",
                           db,
                           "--workers",
                           w,
                           "--block",
                           "200ms",
                           "--metrics-port",
                           mport,
                           "--log-level",
                           "warn",
                           "--retry-base",
                           "20ms",
                           "--lease",
                           "3s" };
    enum {
        NBASE = sizeof base / sizeof base[0],
        MAX_EXTRA = 32
    };
    const char *argv[NBASE + MAX_EXTRA + 1];
    size_t argc = 0;
    int has_config = 0;
    for (size_t i = 0; extra != NULL && extra[i] != NULL; i++)
        has_config |= strcmp(extra[i], "--config") == 0;
    for (size_t i = 0; i < NBASE; i++) {
        if (has_config && strcmp(base[i], "--log-level") == 0) {
            i++; /* and its value */
            continue;
        }
        argv[argc++] = base[i];
    }
    for (size_t i = 0; extra != NULL && extra[i] != NULL; i++) {
        if (i == MAX_EXTRA) {
            fprintf(stderr, "oe_start_consumer: more than %d extra flags\n", MAX_EXTRA);
            return -1;
        }
        argv[argc++] = extra[i];
    }
    argv[argc] = NULL;
    return oe_spawn(argv, log_path);
}

pid_t oe_spawn(const char *const *argv, const char *log_path)
{
    pid_t pid = fork();
    if (pid == 0) {
        int fd = open(log_path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
        if (fd >= 0) {
            dup2(fd, 1);
            dup2(fd, 2);
        }
        execv(argv[0], (char *const *)argv);
        _exit(127);
    }
    return pid;
}

int oe_stop_consumer(pid_t pid)
{
    kill(pid, SIGTERM);
    for (int i = 0; i < 1000; i++) {
        int status;
        pid_t r = waitpid(pid, &status, WNOHANG);
        if (r == pid)
            return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
        struct timespec ts = { 0, 10000000 };
        nanosleep(&ts, NULL);
    }
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
    return -1;
}

void oe_print_file(const char *path)
{
    FILE *f = fopen(path, "r");
    if (f == NULL)
        return;
    char line[512];
    fprintf(stderr, "--- %s\n", path);
    while (fgets(line, sizeof line, f) != NULL)
        fputs(line, stderr);
    fclose(f);
}

int oe_metrics(int port, size_t n, const char *const *names, double *values)
{
    for (size_t i = 0; i < n; i++)
        values[i] = -1;
    rc_conn_t c;
    if (rc_connect(&c, "127.0.0.1", port, 5000) != 0) {
        rc_close(&c);
        return -1;
    }
    static const char req[] = "GET /metrics HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n";
    rc_append_raw(&c, req, sizeof req - 1);
    if (rc_flush(&c, 0) != 0 || !rc_read_to_eof(&c, 10000) || rc_pending_input(&c) == 0) {
        rc_close(&c);
        return -1;
    }
    char *body = xstrndup(rc_input(&c), rc_pending_input(&c));
    rc_close(&c);
    for (size_t i = 0; i < n; i++) {
        char key[160];
        snprintf(key, sizeof key, "\n%s ", names[i]);
        const char *p = strstr(body, key);
        if (p != NULL)
            values[i] = strtod(p + strlen(key), NULL);
    }
    free(body);
    return 0;
}

long long oe_metric(int port, const char *name)
{
    double v;
    oe_metrics(port, 1, &name, &v);
    return (long long)v;
}

int oe_broker_unread_requests(const oe_env_t *env)
{
    static const char *const tables[] = { "/proc/net/tcp", "/proc/net/tcp6" };
    int n = 0;
    for (size_t t = 0; t < sizeof tables / sizeof tables[0]; t++) {
        FILE *f = fopen(tables[t], "r");
        char line[512];
        if (f == NULL)
            continue;
        while (fgets(line, sizeof line, f) != NULL) { /* "sl: local:port remote:port st tx_queue:rx_queue …" */
            unsigned port = 0, state = 0;
            unsigned long txq = 0, rxq = 0;
            if (sscanf(line, " %*u: %*[0-9A-Fa-f]:%x %*[0-9A-Fa-f]:%*x %x %lx:%lx", &port, &state, &txq, &rxq) == 4 &&
                port == (unsigned)env->broker.port && state == 1 && rxq > 0)
                n++;
        }
        fclose(f);
    }
    return n;
}

int oe_send_ids(rc_conn_t *c, uint64_t first, uint64_t last, char *err, size_t errlen)
{
    char id[64], payload[32];
    for (uint64_t i = first; i <= last; i++) {
        snprintf(payload, sizeof payload, "%" PRIu64, i);
        if (bp_send(c, id, sizeof id, err, errlen, OE_TOPIC, payload, NULL) != 0)
            return -1;
    }
    return 0;
}

int oe_park(rc_conn_t *c, const char *group, const char *topic, const char *payload, const char *key,
            const char *reason)
{
    char err[512], id[HG_ID_MAX];
    long long next;
    if (bp_send(c, id, sizeof id, err, sizeof err, topic, payload, "KEY", key, NULL) != 0)
        goto fail;
    resp_reply_t *r = bp_pull(c, err, sizeof err, group, topic, "COUNT", "1", "BLOCK", "5000", NULL);
    if (r == NULL || r->count != 1) {
        if (r != NULL) /* else err says why */
            snprintf(err, sizeof err, "PULL %s: nothing", group);
        resp_reply_free(r);
        goto fail;
    }
    resp_reply_free(r);
    if (bp_int_cmd(c, &next, err, sizeof err, "NACK", group, id, "REASON", reason, NULL) != 0)
        goto fail;
    return 0;
fail:
    fprintf(stderr, "\nFAIL: park %s: %s\n", payload, err);
    return -1;
}

int oe_send_ids_pipelined(const oe_env_t *env, const char *topic, uint64_t n, hg_delay_t delay, int keyed, char *err,
                          size_t errlen)
{
    char uri[64];
    snprintf(uri, sizeof uri, "hourglass://127.0.0.1:%d", env->broker.port);
    hg_client_t *c;
    hg_error_t herr;
    if (hg_client_open(uri, NULL, &c, &herr) != HG_OK) {
        snprintf(err, errlen, "connect to %s: %s", uri, herr.message);
        return -1;
    }
    static hg_send_item_t items[OE_SEND_PIPELINE];
    static char payloads[OE_SEND_PIPELINE][24];
    int rc = 0;
    for (uint64_t i = 0; i < n && rc == 0; i += OE_SEND_PIPELINE) {
        size_t k = (size_t)(n - i < OE_SEND_PIPELINE ? n - i : OE_SEND_PIPELINE);
        for (size_t j = 0; j < k; j++) {
            size_t len = (size_t)snprintf(payloads[j], sizeof payloads[j], "%" PRIu64, i + j + 1);
            items[j] = (hg_send_item_t){ .topic = topic,
                                         .key = keyed ? payloads[j] : NULL,
                                         .payload = payloads[j],
                                         .payload_len = len,
                                         .delay = delay };
        }
        if (hg_send_many(c, items, k, NULL) != HG_OK) {
            snprintf(err, errlen, "hg_send_many of ids %" PRIu64 "..%" PRIu64 ": %s", i + 1, i + k,
                     hg_client_errmsg(c));
            rc = -1;
        }
    }
    hg_client_close(c);
    return rc;
}
