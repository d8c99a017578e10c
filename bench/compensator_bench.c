/*
 * bench/compensator_bench.c — figures for hourglass-compensator
 * (docs/compensator.md). Prints; never fails on slowness.
 *
 *   inspection   --orders N (default 10^6) orders on the reference schema,
 *                --overdue-pct P % of them (default 1) pending and overdue,
 *                1 % pending and not due, the rest paid or cancelled with
 *                expiries spread over 30 days. Loaded with INSERT … SELECT
 *                from MariaDB's sequence engine (seq_1_to_N), 100 000 rows
 *                per statement. Then:
 *                  scan only   the inspection's page query walked over the
 *                              whole overdue range (no cancels): time, pages,
 *                              Handler_read_* of that session
 *                  one round   comp_inspect_run (lock, pages, cancels) once
 *                              per --cancel-batch value (default "1,100": one
 *                              hg_order_cancel per order, the baseline, then
 *                              hg_order_cancel_batch of 100), the cancelled
 *                              orders put back to pending between rounds:
 *                              time, cancels/s, Handler_read_* of the scan
 *                              session and of the whole server (cancels
 *                              included), stock checked exact
 *   relay        --relay-rows R (default 10^5) outbox rows 'new', relayed by
 *                comp_relay_run into a real hourglass-broker (fsync always)
 *                for each --relay-batch size (default "100,500,2000"): rows/s.
 *
 * A private MariaDB (tu_mariadb_start; buffer pool raised to 1 GiB and the
 * redo log to --log-file-size MiB, default 512, at run time — the test
 * helper's 16 MiB redo log makes checkpoint flushing the bound of any write
 * burst) and a private broker (broker_proc); both are removed at the end.
 * Run: make hourglass-compensator-bench && ./hourglass-compensator-bench [--orders N] …
 */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include <hourglass/hourglass.h>
#include <hourglass/order.h>

#include <inttypes.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <mysql.h>

#include "compensator/comp_config.h"
#include "compensator/inspect.h"
#include "common/log.h"
#include "compensator/relay.h"
#include "compensator/stats.h"
#include "tests/helpers/broker_proc.h"
#include "tests/helpers/sql_client.h"
#include "tests/helpers/testutil.h"

#define CHUNK 100000

static MYSQL *admin;

static void die(const char *what, const char *detail)
{
    fprintf(stderr, "hourglass-compensator-bench: %s: %s\n", what, detail);
    exit(1);
}

/* Dies when a statement run by sql_execf failed (it printed the statement and the error). */
static void must(int rc)
{
    if (rc != 0)
        die("SQL", "failed (the statement and the server's error are above)");
}

/* sql_scalar, dying on a failed query. */
static long long scalar(MYSQL *m, const char *text)
{
    long long v = sql_scalar(m, text);
    if (v == -2)
        die(text, "query failed");
    return v;
}

/* Handler_read_* counters of a connection ("SESSION") or the server ("GLOBAL"). */
typedef struct reads {
    long long key, next, prev, first, rnd, rnd_next, total;
} reads_t;

static reads_t handler_reads(MYSQL *m, const char *scope)
{
    char text[96];
    snprintf(text, sizeof text, "SHOW %s STATUS LIKE 'Handler_read%%'", scope);
    if (mysql_query(m, text) != 0)
        die(text, mysql_error(m));
    MYSQL_RES *res = mysql_store_result(m);
    reads_t r = { 0 };
    MYSQL_ROW row;
    while (res != NULL && (row = mysql_fetch_row(res)) != NULL) {
        long long v = strtoll(row[1], NULL, 10);
        if (strcmp(row[0], "Handler_read_key") == 0)
            r.key = v;
        else if (strcmp(row[0], "Handler_read_next") == 0)
            r.next = v;
        else if (strcmp(row[0], "Handler_read_prev") == 0)
            r.prev = v;
        else if (strcmp(row[0], "Handler_read_first") == 0)
            r.first = v;
        else if (strcmp(row[0], "Handler_read_rnd") == 0)
            r.rnd = v;
        else if (strcmp(row[0], "Handler_read_rnd_next") == 0)
            r.rnd_next = v;
    }
    if (res != NULL)
        mysql_free_result(res);
    r.total = r.key + r.next + r.prev + r.first + r.rnd + r.rnd_next;
    return r;
}

static reads_t reads_diff(reads_t a, reads_t b)
{
    reads_t d = { b.key - a.key, b.next - a.next,         b.prev - a.prev,  b.first - a.first,
                  b.rnd - a.rnd, b.rnd_next - a.rnd_next, b.total - a.total };
    return d;
}

static void print_reads(const char *label, reads_t d)
{
    printf("    %-34s %lld (read_key %lld, read_next %lld, read_first %lld, read_rnd_next %lld)\n", label, d.total,
           d.key, d.next, d.first, d.rnd_next);
}

static double seconds_since(uint64_t t0)
{
    return (double)(tu_now_mono_ms() - t0) / 1000.0;
}

/* ------------------------------------------------------------------ load */

static void load_orders(long long n, int overdue_pct)
{
    uint64_t t0 = tu_now_mono_ms();
    must(sql_execf(admin, "SET SESSION unique_checks = 0"));
    for (long long first = 1; first <= n; first += CHUNK) {
        long long last = first + CHUNK - 1 < n ? first + CHUNK - 1 : n;
        /* seq % 100 < overdue_pct: pending, expired 1 min .. 1 day ago;
         * seq % 100 = 99: pending, due in the next hour; else paid / cancelled,
         * expired up to 30 days ago. */
        must(sql_execf(
            admin,
            "INSERT INTO orders (id, user_id, status, created_at, expire_at, paid_at, cancelled_at, cancel_reason)"
            " SELECT seq, seq %% 100003,"
            "  CASE WHEN seq %% 100 < %d OR seq %% 100 = 99 THEN 'pending' WHEN seq %% 2 = 0 THEN 'paid' ELSE "
            "'cancelled' END,"
            "  NOW(6) - INTERVAL 31 DAY,"
            "  CASE WHEN seq %% 100 < %d THEN NOW(6) - INTERVAL 60 + seq %% 86400 SECOND"
            "       WHEN seq %% 100 = 99 THEN NOW(6) + INTERVAL seq %% 3600 SECOND"
            "       ELSE NOW(6) - INTERVAL seq %% 2592000 SECOND END,"
            "  IF(seq %% 100 >= %d AND seq %% 100 <> 99 AND seq %% 2 = 0, NOW(6) - INTERVAL 1 DAY, NULL),"
            "  IF(seq %% 100 >= %d AND seq %% 100 <> 99 AND seq %% 2 = 1, NOW(6) - INTERVAL 1 DAY, NULL),"
            "  IF(seq %% 100 >= %d AND seq %% 100 <> 99 AND seq %% 2 = 1, 'timeout-message', NULL)"
            " FROM seq_%lld_to_%lld",
            overdue_pct, overdue_pct, overdue_pct, overdue_pct, overdue_pct, first, last));
        /* One item per pending order (the stock a cancel returns). */
        must(sql_execf(admin,
                       "INSERT INTO order_items (order_id, sku_id, qty) SELECT seq, 1 + seq %% 1000, 1 + seq %% 3"
                       " FROM seq_%lld_to_%lld WHERE seq %% 100 < %d OR seq %% 100 = 99",
                       first, last, overdue_pct));
    }
    must(sql_execf(
        admin, "INSERT INTO stock (sku_id, received, available, reserved, sold)"
               " SELECT i.sku_id, 1000000 + SUM(i.qty), 1000000, SUM(i.qty), 0 FROM order_items i GROUP BY i.sku_id"));
    must(sql_execf(admin, "ANALYZE TABLE orders, order_items, stock"));
    printf("  loaded %lld orders in %.1f s\n", n, seconds_since(t0));
}

/* ------------------------------------------------------------------ inspection */

static void scan_only(MYSQL *m, long long page_size, long long *rows_out, long long *pages_out)
{
    /* The same page query, walked with literal keys on its own connection. */
    char cutoff[40] = "", last_exp[40] = "1000-01-01 00:00:00.000000";
    unsigned long long last_id = 0;
    if (mysql_query(m, "SELECT NOW(6) - INTERVAL 1 SECOND") != 0)
        die("cutoff", mysql_error(m));
    MYSQL_RES *res = mysql_store_result(m);
    snprintf(cutoff, sizeof cutoff, "%s", mysql_fetch_row(res)[0]);
    mysql_free_result(res);
    long long rows = 0, pages = 0;
    for (;;) {
        char text[1024];
        const char *p = COMP_INSPECT_PAGE_SQL;
        size_t n = 0;
        int arg = 0;
        for (; *p != '\0'; p++) {
            if (*p != '?') {
                text[n++] = *p;
                continue;
            }
            switch (arg++) {
            case 0:
                n += (size_t)snprintf(text + n, sizeof text - n, "'%s'", cutoff);
                break;
            case 1:
            case 2:
                n += (size_t)snprintf(text + n, sizeof text - n, "'%s'", last_exp);
                break;
            case 3:
                n += (size_t)snprintf(text + n, sizeof text - n, "%llu", last_id);
                break;
            default:
                n += (size_t)snprintf(text + n, sizeof text - n, "%lld", page_size);
                break;
            }
        }
        text[n] = '\0';
        if (mysql_query(m, text) != 0)
            die("page", mysql_error(m));
        res = mysql_store_result(m);
        long long got = 0;
        MYSQL_ROW row;
        while ((row = mysql_fetch_row(res)) != NULL) {
            last_id = strtoull(row[0], NULL, 10);
            snprintf(last_exp, sizeof last_exp, "%s", row[1]);
            got++;
        }
        mysql_free_result(res);
        rows += got;
        pages++;
        if (got < page_size)
            break;
    }
    *rows_out = rows;
    *pages_out = pages;
}

static void reset_inspected(void);
static void inspection_round(tu_mariadb_t *server, long long page_size, const char *cancel_batch, long long orders,
                             double *first_rate);

static void bench_inspection(tu_mariadb_t *server, long long orders, int overdue_pct, long long page_size,
                             const char *cancel_batches)
{
    printf("\ninspection: %lld orders, %d %% pending and overdue, page size %lld\n", orders, overdue_pct, page_size);
    load_orders(orders, overdue_pct);
    long long overdue = scalar(admin, "SELECT COUNT(*) FROM orders WHERE status = 'pending' AND expire_at <"
                                      " NOW(6) - INTERVAL 1 SECOND");
    printf("  overdue pending orders: %lld\n", overdue);

    /* Scan only: the page queries over the whole overdue range, no cancels. */
    MYSQL *m = mysql_init(NULL);
    if (mysql_real_connect(m, NULL, "root", "", "bench", 0, server->socket, 0) == NULL)
        die("connect", mysql_error(m));
    scalar(m, "SELECT 1"); /* warm the connection */
    reads_t s0 = handler_reads(m, "SESSION"), s1 = handler_reads(m, "SESSION");
    reads_t show_cost = reads_diff(s0, s1);
    uint64_t t0 = tu_now_mono_ms();
    long long rows = 0, pages = 0;
    scan_only(m, page_size, &rows, &pages);
    double secs = seconds_since(t0);
    reads_t s2 = handler_reads(m, "SESSION");
    reads_t d = reads_diff(s1, s2);
    d.total -= show_cost.total;
    d.rnd_next -= show_cost.rnd_next;
    printf("  scan only (the page query over the overdue range, no cancels):\n");
    printf("    %lld rows in %lld pages, %.3f s\n", rows, pages, secs);
    print_reads("Handler_read_* of the session:", d);
    mysql_close(m);

    /* One real round per cancel-batch value, the overdue orders reset to
     * pending (and their stock to reserved) between rounds. */
    char list[128];
    snprintf(list, sizeof list, "%s", cancel_batches);
    double first_rate = 0;
    for (char *tok = strtok(list, ","); tok != NULL; tok = strtok(NULL, ",")) {
        reset_inspected();
        inspection_round(server, page_size, tok, orders, &first_rate);
    }
}

/* Put the orders the inspection cancelled back: stock reserved again, pending. */
static void reset_inspected(void)
{
    must(sql_execf(
        admin,
        "UPDATE stock s JOIN (SELECT i.sku_id, SUM(i.qty) q FROM order_items i JOIN orders o ON o.id = i.order_id"
        " WHERE o.cancel_reason = 'inspection' GROUP BY i.sku_id) t ON t.sku_id = s.sku_id"
        " SET s.available = s.available - t.q, s.reserved = s.reserved + t.q"));
    must(sql_execf(admin, "UPDATE orders SET status = 'pending', cancelled_at = NULL, cancel_reason = NULL"
                          " WHERE cancel_reason = 'inspection'"));
}

static void inspection_round(tu_mariadb_t *server, long long page_size, const char *cancel_batch, long long orders,
                             double *first_rate)
{
    comp_config_t cfg;
    comp_config_init(&cfg);
    char err[600], pagesz[32];
    snprintf(pagesz, sizeof pagesz, "%lld", page_size);
    if (comp_config_set(&cfg, "mysql-database", "bench", err, sizeof err) != 0 ||
        comp_config_set(&cfg, "mysql-socket", server->socket, err, sizeof err) != 0 ||
        comp_config_set(&cfg, "mysql-user", "root", err, sizeof err) != 0 ||
        comp_config_set(&cfg, "inspect-grace", "1s", err, sizeof err) != 0 ||
        comp_config_set(&cfg, "inspect-page-size", pagesz, err, sizeof err) != 0 ||
        comp_config_set(&cfg, "cancel-batch", cancel_batch, err, sizeof err) != 0 ||
        comp_config_validate(&cfg, err, sizeof err) != 0)
        die("config", err);
    hg_order_db_params_t params = { .socket = cfg.mysql_socket,
                                    .user = cfg.mysql_user,
                                    .database = cfg.mysql_database };
    comp_inspect_t *in = comp_inspect_new(&cfg, &params);
    uint64_t before = comp_load(&comp_stats.cancels[COMP_CANCELLER_INSPECTION][COMP_CANCEL_DONE]);
    reads_t g0 = handler_reads(admin, "GLOBAL");
    uint64_t t0 = tu_now_mono_ms();
    comp_run_outcome_t o = comp_inspect_run(in, err, sizeof err);
    double secs = seconds_since(t0);
    reads_t g1 = handler_reads(admin, "GLOBAL");
    reads_t scan = handler_reads(comp_inspect_mysql(in), "SESSION"); /* since its connect: this round */
    uint64_t cancelled = comp_load(&comp_stats.cancels[COMP_CANCELLER_INSPECTION][COMP_CANCEL_DONE]) - before;
    double rate = (double)cancelled / secs;
    if (*first_rate == 0)
        *first_rate = rate;
    printf("  one inspection round, cancel-batch %s (lock, pages, %s):\n", cancel_batch,
           strcmp(cancel_batch, "1") == 0 ? "one hg_order_cancel transaction per order"
                                          : "hg_order_cancel_batch: that many orders per transaction");
    printf("    outcome %s%s%s: %llu rows read, %" PRIu64 " cancelled in %.2f s = %.0f cancels/s (%.1fx the first)\n",
           comp_run_outcome_name(o), err[0] ? ": " : "", err, comp_inspect_last_rows(in), cancelled, secs, rate,
           rate / *first_rate);
    print_reads("Handler_read_* of the scan session:", scan);
    print_reads("Handler_read_* of the server:", reads_diff(g0, g1));
    printf("    (table: %lld orders; the server figure includes each cancel's claim, stock return and outbox update)\n",
           orders);
    comp_inspect_free(in);
    comp_config_free(&cfg);
    long long left = scalar(admin, "SELECT COUNT(*) FROM orders WHERE status = 'pending' AND expire_at <"
                                   " NOW(6) - INTERVAL 1 SECOND");
    long long unbalanced = scalar(admin, "SELECT COUNT(*) FROM stock WHERE received <> available + reserved + sold"),
              reserved_wrong =
                  scalar(admin, "SELECT COUNT(*) FROM stock s WHERE reserved <> (SELECT IFNULL(SUM(i.qty), 0)"
                                " FROM order_items i JOIN orders o ON o.id = i.order_id"
                                " WHERE i.sku_id = s.sku_id AND o.status = 'pending')");
    printf("    overdue pending orders left: %lld; stock %s (%lld SKUs unbalanced, %lld with reserved wrong)\n", left,
           unbalanced == 0 && reserved_wrong == 0 ? "exact" : "WRONG", unbalanced, reserved_wrong);
}

/* ------------------------------------------------------------------ relay */

static void bench_relay(tu_mariadb_t *server, long long rows, const char *batches)
{
    bp_broker_t broker;
    char err[4096];
    memset(&broker, 0, sizeof broker);
    if (bp_start(&broker, NULL, err, sizeof err) != 0)
        die("broker", err);
    printf("\nrelay: %lld outbox rows 'new' → hourglass-broker (fsync always), due in 30 min\n", rows);
    char list[256];
    snprintf(list, sizeof list, "%s", batches);
    long long base = 10000000;
    for (char *tok = strtok(list, ","); tok != NULL; tok = strtok(NULL, ",")) {
        must(sql_execf(admin, "DELETE FROM order_timeout_msg WHERE order_id >= %lld", base));
        for (long long first = 1; first <= rows; first += CHUNK) {
            long long last = first + CHUNK - 1 < rows ? first + CHUNK - 1 : rows;
            must(sql_execf(admin,
                           "INSERT INTO order_timeout_msg (order_id, expire_at, status, attempts, next_attempt_at)"
                           " SELECT %lld + seq, NOW(6) + INTERVAL 30 MINUTE, 'new', 0, NOW(6) - INTERVAL 1 SECOND"
                           " FROM seq_%lld_to_%lld",
                           base, first, last));
        }
        comp_config_t cfg;
        comp_config_init(&cfg);
        char uri[64];
        snprintf(uri, sizeof uri, "hourglass://127.0.0.1:%d", broker.port);
        if (comp_config_set(&cfg, "mysql-database", "bench", err, sizeof err) != 0 ||
            comp_config_set(&cfg, "mysql-socket", server->socket, err, sizeof err) != 0 ||
            comp_config_set(&cfg, "mysql-user", "root", err, sizeof err) != 0 ||
            comp_config_set(&cfg, "uri", uri, err, sizeof err) != 0 ||
            comp_config_set(&cfg, "topic", "bench", err, sizeof err) != 0 ||
            comp_config_set(&cfg, "relay-batch", tok, err, sizeof err) != 0 ||
            comp_config_validate(&cfg, err, sizeof err) != 0)
            die("config", err);
        hg_order_db_params_t params = { .socket = cfg.mysql_socket,
                                        .user = cfg.mysql_user,
                                        .database = cfg.mysql_database };
        comp_relay_t *r = comp_relay_new(&cfg, &params);
        uint64_t t0 = tu_now_mono_ms(), sent = 0;
        comp_run_outcome_t o = comp_relay_run(r, &sent, err, sizeof err);
        double secs = seconds_since(t0);
        printf("  batch %5s: %" PRIu64 " rows sent and marked in %.2f s = %.0f rows/s (%s%s%s)\n", tok, sent, secs,
               (double)sent / secs, comp_run_outcome_name(o), err[0] ? ": " : "", err);
        comp_relay_free(r);
        comp_config_free(&cfg);
        base += 10000000;
    }
    bp_destroy(&broker);
}

/* ------------------------------------------------------------------ main */

int main(int argc, char **argv)
{
    long long orders = 1000000, relay_rows = 100000, page_size = 500, log_file_mib = 512;
    int overdue_pct = 1, do_inspection = 1, do_relay = 1;
    const char *batches = "100,500,2000", *cancel_batches = "1,100";
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (strcmp(a, "--orders") == 0 && v != NULL)
            orders = atoll(argv[++i]);
        else if (strcmp(a, "--overdue-pct") == 0 && v != NULL)
            overdue_pct = atoi(argv[++i]);
        else if (strcmp(a, "--page-size") == 0 && v != NULL)
            page_size = atoll(argv[++i]);
        else if (strcmp(a, "--relay-rows") == 0 && v != NULL)
            relay_rows = atoll(argv[++i]);
        else if (strcmp(a, "--relay-batch") == 0 && v != NULL)
            batches = argv[++i];
        else if (strcmp(a, "--cancel-batch") == 0 && v != NULL)
            cancel_batches = argv[++i];
        else if (strcmp(a, "--log-file-size") == 0 && v != NULL)
            log_file_mib = atoll(argv[++i]);
        else if (strcmp(a, "--no-relay") == 0)
            do_relay = 0;
        else if (strcmp(a, "--no-inspection") == 0)
            do_inspection = 0;
        else {
            fprintf(
                stderr,
                "usage: %s [--orders N] [--overdue-pct P] [--page-size N] [--relay-rows N]"
                " [--relay-batch B,B…] [--cancel-batch B,B…] [--log-file-size MiB] [--no-relay] [--no-inspection]\n",
                argv[0]);
            return 2;
        }
    }
    if (overdue_pct < 0 || overdue_pct > 98)
        die("--overdue-pct", "want 0..98");
    if (log_file_mib < 4)
        die("--log-file-size", "want 4 MiB or more");
    signal(SIGPIPE, SIG_IGN);
    hg_order_library_init();
    comp_stats_init();
    log_set_level(LOG_LEVEL_WARN);

    tu_mariadb_t server = { .extra_args = NULL };
    char err[4096];
    if (tu_mariadb_start(&server, err, sizeof err) != 0)
        die("MariaDB", err);
    admin = mysql_init(NULL);
    if (mysql_real_connect(admin, NULL, "root", "", NULL, 0, server.socket, 0) == NULL)
        die("connect", mysql_error(admin));
    must(sql_execf(admin, "SET GLOBAL innodb_buffer_pool_size = 1073741824"));
    must(sql_execf(admin, "SET GLOBAL innodb_log_file_size = %lld", log_file_mib << 20));
    printf("MariaDB %s, innodb_flush_log_at_trx_commit = %lld, log_bin = %lld, innodb_doublewrite = %lld,"
           " innodb_log_file_size = %lld MiB\n",
           mysql_get_server_info(admin), scalar(admin, "SELECT @@innodb_flush_log_at_trx_commit"),
           scalar(admin, "SELECT @@log_bin"), scalar(admin, "SELECT @@innodb_doublewrite"),
           scalar(admin, "SELECT @@innodb_log_file_size") >> 20);
    must(sql_execf(admin, "CREATE DATABASE bench"));
    must(sql_execf(admin, "USE bench"));
    hg_order_db_params_t p = { .socket = server.socket, .user = "root", .database = "bench" };
    hg_order_error_t oerr;
    hg_order_db *db = hg_order_db_open(&p, &oerr);
    if (db == NULL || hg_order_schema_create(db, &oerr) != 0)
        die("schema", oerr.message);

    if (do_inspection)
        bench_inspection(&server, orders, overdue_pct, page_size, cancel_batches);
    if (do_relay)
        bench_relay(&server, relay_rows, batches);

    hg_order_db_close(db);
    mysql_close(admin);
    tu_mariadb_stop(&server);
    return 0;
}
