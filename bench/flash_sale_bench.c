/*
 * bench/flash_sale_bench.c — the flash sale: N orders on the
 * reference schema, all expiring in the same second, cancelled by the real
 * ./hourglass-consumer through the real broker, once per --batch-sizes value
 * (default "1,100": batch size 1 — one transaction per message, the
 * baseline — and the default batch size) in one run. Prints; never fails on
 * slowness (docs/BENCHMARKS.md has the figures and the command).
 *
 * For each batch size B, on a fresh database:
 *   load      --orders N (default 100 000) pending orders, one item each on
 *             --skus S flash-sale SKUs (default 20), stock reserved for them,
 *             outbox rows 'sent'; all with expire_at = T (loaded with
 *             INSERT … SELECT from MariaDB's sequence engine)
 *   consumer  ./hourglass-consumer --workers W (default 4) --batch-size B,
 *             group of its own, idle before anything is sent
 *   send      the N ids, SEND … AT T (hg_send_many, pipelined), T chosen so
 *             the sends end before it: every message falls due in the same
 *             second
 *   clock     T → the last cancel (MAX(cancelled_at), the server's clock,
 *             the same clock as expire_at); first → last cancel; cancels/s
 *             = N / (last − first); CPU seconds of MariaDB, the consumer and
 *             the broker over the run (/proc/PID/stat), as a share of one core
 *   check     of_check: every order cancelled, stock exact to the unit
 *             (available = received, reserved 0), outbox rows 'done'
 * Then the ratio to the first batch size, and the ceilings: the server's
 * single-order commit rate with W connections (UPDATE one row + COMMIT, the
 * fsync bound: innodb_flush_log_at_trx_commit=1) for 3 s.
 *
 * A private MariaDB (tu_mariadb_start; buffer pool raised to 512 MiB) and a
 * private broker (fsync always); both removed at the end.
 * Run: make flash-sale-bench && ./flash-sale-bench [--orders N] [--batch-sizes 1,100] [--workers W] [--skus S]
 *      [--count N (PULL COUNT, default batch-size)] [--log-file-size MiB (the redo log, default 512)]
 *      [--log-bin (binary log with sync_binlog=1, as on a replicated primary)]
 */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include "include/hourglass/hourglass.h"
#include "tests/helpers/order_env.h"
#include "tests/helpers/sql_client.h"

#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

#define MAX_SIZES      8
#define DEADLINE_MS    600000
#define COMMIT_TEST_MS 3000

static oe_env_t env;
static long long orders = 100000;
static int workers = 4, skus = 20, count = 0; /* count 0: the consumer's default (batch-size) */
static long long log_file_size = 512LL << 20;
static int log_bin; /* --log-bin: the server writes a binary log, sync_binlog=1, as a replicated primary does */

static void die(const char *what, const char *detail)
{
    fprintf(stderr, "flash-sale-bench: %s: %s\n", what, detail);
    oe_stop(&env);
    exit(1);
}

/* Dies when a statement run by sql_execf failed (it printed the statement and the error). */
static void must(int rc)
{
    if (rc != 0)
        die("SQL", "failed (the statement and the server's error are above)");
}

static void sleep_ms(unsigned ms)
{
    struct timespec ts = { ms / 1000, (long)(ms % 1000) * 1000000L };
    nanosleep(&ts, NULL);
}

/* ---------------------------------------------------------------- the server's counters */

/* SHOW GLOBAL STATUS counters whose change over a run says where MariaDB's
 * time went: statements, commits, redo log writes (each a group commit's write and sync: the durability bound), all
 * fsyncs, row-lock waits and their time, pages flushed (checkpoints). */
static const char *const status_names[] = {
    "Questions",
    "Handler_commit",
    "Innodb_log_writes",
    "Innodb_data_fsyncs",
    "Innodb_row_lock_waits",
    "Innodb_row_lock_time",
    "Innodb_buffer_pool_pages_flushed",
    "Innodb_log_waits",
};
enum {
    STATUS_COUNT = sizeof status_names / sizeof status_names[0]
};

typedef struct status {
    long long v[STATUS_COUNT];
} status_t;

static status_t status_read(void)
{
    status_t st = { { 0 } };
    if (mysql_query(env.admin, "SHOW GLOBAL STATUS") != 0)
        die("SHOW GLOBAL STATUS", mysql_error(env.admin));
    MYSQL_RES *res = mysql_store_result(env.admin);
    MYSQL_ROW row;
    while (res != NULL && (row = mysql_fetch_row(res)) != NULL)
        for (int i = 0; i < STATUS_COUNT; i++)
            if (row[0] != NULL && row[1] != NULL && strcasecmp(row[0], status_names[i]) == 0)
                st.v[i] = atoll(row[1]);
    if (res != NULL)
        mysql_free_result(res);
    return st;
}

/* One server variable as text ("?" when unreadable). */
static void variable_text(const char *name, char *out, size_t outlen)
{
    char q[128];
    snprintf(q, sizeof q, "SELECT @@GLOBAL.%s", name);
    snprintf(out, outlen, "?");
    if (mysql_query(env.admin, q) != 0)
        return;
    MYSQL_RES *res = mysql_store_result(env.admin);
    MYSQL_ROW row = res != NULL ? mysql_fetch_row(res) : NULL;
    if (row != NULL && row[0] != NULL)
        snprintf(out, outlen, "%s", row[0]);
    if (res != NULL)
        mysql_free_result(res);
}

/* ---------------------------------------------------------------- load */

/* A fresh database name with N orders expiring at expire_ms (Unix ms). */
static void load(const char *name, uint64_t expire_ms)
{
    char create[96];
    snprintf(create, sizeof create, "CREATE DATABASE %s", name);
    must(sql_execf(env.admin, "%s", create));
    hg_order_error_t err;
    hg_order_db *db = oe_open_db(&env, name, &err);
    if (db == NULL || hg_order_schema_create(db, &err) != 0)
        die("schema", err.message);
    hg_order_db_close(db);
    MYSQL *m = oe_connect(&env, name);
    if (m == NULL)
        die("connect", name);
    char expire[64];
    snprintf(expire, sizeof expire, "FROM_UNIXTIME(%" PRIu64 ".%03u)", expire_ms / 1000, (unsigned)(expire_ms % 1000));
    for (long long first = 1; first <= orders; first += 100000) {
        long long last = first + 99999 < orders ? first + 99999 : orders;
        must(sql_execf(m,
                       "INSERT INTO orders (id, user_id, status, created_at, expire_at)"
                       " SELECT seq, seq %% 100003, 'pending', NOW(6), %s FROM seq_%lld_to_%lld",
                       expire, first, last));
        must(sql_execf(m,
                       "INSERT INTO order_items (order_id, sku_id, qty) SELECT seq, 1 + seq %% %d, 1 + seq %% 3"
                       " FROM seq_%lld_to_%lld",
                       skus, first, last));
        must(sql_execf(m,
                       "INSERT INTO order_timeout_msg (order_id, expire_at, status, attempts, next_attempt_at)"
                       " SELECT seq, %s, 'sent', 1, %s FROM seq_%lld_to_%lld",
                       expire, expire, first, last));
    }
    must(sql_execf(m, "INSERT INTO stock (sku_id, received, available, reserved, sold)"
                      " SELECT sku_id, 1000000 + SUM(qty), 1000000, SUM(qty), 0 FROM order_items GROUP BY sku_id"));
    must(sql_execf(m, "COMMIT"));
    mysql_close(m);
}

/* SEND the ids 1..N AT expire_ms, each keyed by its id. */
static void send_all(uint64_t expire_ms)
{
    char err[512];
    if (oe_send_ids_pipelined(&env, OE_TOPIC, (uint64_t)orders, hg_delay_at(expire_ms), 1, err, sizeof err) != 0)
        die("send", err);
}

/* ---------------------------------------------------------------- one run */

typedef struct result {
    int batch;
    double expiry_to_last_s, first_to_last_s, rate, send_s;
    double cpu_db, cpu_consumer, cpu_broker, wall_s;
    double handler_mean_s; /* a message's wait for its cancel transaction (the batch's), mean */
    long long transactions, splits, retries;
    status_t status; /* the server's counters' change over the run */
    int stock_ok;
} result_t;

static result_t run(int batch, unsigned seq)
{
    result_t r = { .batch = batch };
    char name[32], group[32], dir[512], log_path[600], bs[16], ws[16];
    snprintf(name, sizeof name, "flash%u", seq);
    snprintf(group, sizeof group, "flash-%u", seq);
    snprintf(bs, sizeof bs, "%d", batch);
    snprintf(ws, sizeof ws, "%d", workers);
    char cs[16];
    snprintf(cs, sizeof cs, "%d", count > batch ? count : batch);

    /* T: the sends must end before it (measured ~100 000 SENDs/s here; 3x margin + 3 s). */
    uint64_t send_budget_ms = (uint64_t)(orders / 30) + 3000;
    uint64_t t_load = tu_now_mono_ms();
    uint64_t expire_ms = tu_now_wall_ms() + send_budget_ms + 60000; /* provisional: the load takes a while */
    load(name, expire_ms);
    double load_s = (double)(tu_now_mono_ms() - t_load) / 1000;
    expire_ms = tu_now_wall_ms() + send_budget_ms;
    expire_ms = (expire_ms / 1000 + 1) * 1000 + 500; /* mid-second: the broker rounds AT up to the next second */
    MYSQL *m = oe_connect(&env, name);
    if (m == NULL)
        die("connect", name);
    must(sql_execf(m, "UPDATE orders SET expire_at = FROM_UNIXTIME(%" PRIu64 ".%03u)", expire_ms / 1000,
                   (unsigned)(expire_ms % 1000)));
    must(sql_execf(m, "UPDATE order_timeout_msg SET expire_at = FROM_UNIXTIME(%" PRIu64 ".%03u)", expire_ms / 1000,
                   (unsigned)(expire_ms % 1000)));
    must(sql_execf(m, "COMMIT"));

    /* The consumer, idle on its own group. */
    rc_conn_t c;
    char err[512];
    if (bp_connect(&env.broker, &c, err, sizeof err) != 0 ||
        bp_ok_cmd(&c, err, sizeof err, "GROUP", "CREATE", group, OE_TOPIC, "FROM", "NOW", NULL) != 0)
        die("GROUP CREATE", err);
    rc_close(&c);
    if (tu_mkdtemp("flash", dir, sizeof dir) != 0)
        die("mkdtemp", "flash");
    snprintf(log_path, sizeof log_path, "%s/consumer.log", dir);
    int mport = tu_free_port();
    const char *extra[] = { "--batch-size", bs,   "--count",     cs,      "--lease", "60s",
                            "--block",      "1s", "--log-level", "error", NULL };
    pid_t pid = oe_start_consumer(&env, name, group, workers, mport, log_path, extra);
    if (pid < 0)
        die("consumer", "did not start");
    for (int i = 0; i < 1000 && oe_metric(mport, "hourglass_consumer_cancelled_total") != 0; i++)
        sleep_ms(10);

    uint64_t t0 = tu_now_mono_ms();
    send_all(expire_ms);
    r.send_s = (double)(tu_now_mono_ms() - t0) / 1000;
    if (tu_now_wall_ms() >= expire_ms)
        fprintf(stderr, "  warning: the sends ended %" PRIu64 " ms after the expiry\n", tu_now_wall_ms() - expire_ms);
    while (tu_now_wall_ms() + 200 < expire_ms)
        sleep_ms(50);
    status_t st0 = status_read();
    double db0 = tu_proc_cpu_secs(env.server.pid), co0 = tu_proc_cpu_secs(pid), br0 = tu_proc_cpu_secs(env.broker.pid);
    uint64_t w0 = tu_now_mono_ms();
    long long done = 0;
    while (tu_now_mono_ms() - w0 < DEADLINE_MS) {
        done = oe_metric(mport, "hourglass_consumer_cancelled_total");
        if (done >= orders)
            break;
        sleep_ms(20);
    }
    r.wall_s = (double)(tu_now_mono_ms() - w0) / 1000;
    r.cpu_db = tu_proc_cpu_secs(env.server.pid) - db0;
    r.cpu_consumer = tu_proc_cpu_secs(pid) - co0;
    r.cpu_broker = tu_proc_cpu_secs(env.broker.pid) - br0;
    status_t st1 = status_read();
    for (int i = 0; i < STATUS_COUNT; i++)
        r.status.v[i] = st1.v[i] - st0.v[i];
    r.transactions = oe_metric(mport, "hourglass_consumer_batch_transactions_total");
    r.splits = oe_metric(mport, "hourglass_consumer_batch_splits_total");
    r.retries = oe_metric(mport, "hourglass_consumer_retries_total");
    const char *handler[] = { "hourglass_consumer_handler_seconds_sum", "hourglass_consumer_handler_seconds_count" };
    double hv[2] = { 0, 0 };
    oe_metrics(mport, 2, handler, hv);
    r.handler_mean_s = hv[1] > 0 ? hv[0] / hv[1] : 0;
    if (done < orders) {
        oe_print_file(log_path);
        fprintf(stderr, "  batch size %d: only %lld of %lld cancelled after %d s\n", batch, done, orders,
                DEADLINE_MS / 1000);
    }
    oe_stop_consumer(pid);
    tu_rmtree(dir);

    char q[256];
    snprintf(q, sizeof q,
             "SELECT TIMESTAMPDIFF(MICROSECOND, FROM_UNIXTIME(%" PRIu64 ".%03u), MAX(cancelled_at)),"
             " TIMESTAMPDIFF(MICROSECOND, MIN(cancelled_at), MAX(cancelled_at)) FROM orders",
             expire_ms / 1000, (unsigned)(expire_ms % 1000));
    if (mysql_query(m, q) != 0)
        die(q, mysql_error(m));
    MYSQL_RES *res = mysql_store_result(m);
    MYSQL_ROW row = res != NULL ? mysql_fetch_row(res) : NULL;
    if (row != NULL && row[0] != NULL && row[1] != NULL) {
        r.expiry_to_last_s = strtod(row[0], NULL) / 1e6;
        r.first_to_last_s = strtod(row[1], NULL) / 1e6;
    }
    if (res != NULL)
        mysql_free_result(res);
    r.rate = r.first_to_last_s > 0 ? (double)orders / r.first_to_last_s : 0;

    of_report_t rep;
    hg_order_error_t e;
    if (of_check(m, 0, &rep, &e) != 0)
        die("of_check", e.message);
    r.stock_ok = rep.ok && rep.cancelled == (uint64_t)orders && rep.reserved == 0 && rep.available == rep.received;
    if (!r.stock_ok)
        fprintf(stderr, "  batch size %d: check failed: cancelled %" PRIu64 ", reserved %" PRId64 ", %s\n", batch,
                rep.cancelled, rep.reserved, rep.first_defect);
    mysql_close(m);
    must(sql_execf(env.admin, "DROP DATABASE %s", name));
    printf("  batch size %-4d load %.1f s, send %.2f s; expiry → last cancel %.2f s; first → last %.2f s = %.0f "
           "cancels/s; stock %s\n",
           batch, load_s, r.send_s, r.expiry_to_last_s, r.first_to_last_s, r.rate, r.stock_ok ? "exact" : "WRONG");
    /* hourglass_consumer_batch_transactions_total counts batch-size > 1 only */
    char txns[96];
    if (batch > 1)
        snprintf(txns, sizeof txns, "%lld transactions, %lld splits", r.transactions, r.splits);
    else
        snprintf(txns, sizeof txns, "one transaction per order");
    printf("                 CPU over %.1f s: MariaDB %.0f %%, consumer %.0f %%, broker %.0f %% of one core;"
           " %s, %lld retries\n",
           r.wall_s, 100 * r.cpu_db / r.wall_s, 100 * r.cpu_consumer / r.wall_s, 100 * r.cpu_broker / r.wall_s, txns,
           r.retries);
    /* Each worker alternates PULL, the cancel transaction, ACK: the share of
     * its time spent in the transaction says whether MariaDB or the broker
     * round trips bound the cycle. */
    int pull = count > batch ? count : batch; /* full PULLs assumed: the burst is all due at once */
    double in_handler_s = r.handler_mean_s * (double)orders / pull;
    printf("                 consumer: a PULL's cancel transactions take %.1f ms (mean); workers spend %.0f %% of"
           " first → last in them, the rest in PULL/ACK\n",
           1000 * r.handler_mean_s, r.first_to_last_s > 0 ? 100 * in_handler_s / (workers * r.first_to_last_s) : 0);
    const long long *v = r.status.v;
    printf("                 MariaDB per order: %.2f statements, %.3f commits, %.3f redo writes, %.3f fsyncs; row-lock "
           "waits %lld"
           " (%lld ms), pages flushed %lld, log waits %lld\n",
           (double)v[0] / (double)orders, (double)v[1] / (double)orders, (double)v[2] / (double)orders,
           (double)v[3] / (double)orders, v[4], v[5], v[6], v[7]);
    fflush(stdout);
    return r;
}

/* ---------------------------------------------------------------- the commit ceiling */

typedef struct committer {
    int index;
    atomic_llong *commits;
    atomic_int *stop;
} committer_t;

static void *commit_loop(void *arg)
{
    committer_t *k = arg;
    MYSQL *m = oe_connect(&env, "flashcommit");
    if (m == NULL)
        return NULL;
    char q[96];
    snprintf(q, sizeof q, "UPDATE t SET v = v + 1 WHERE id = %d", k->index + 1);
    mysql_autocommit(m, 0);
    while (!atomic_load(k->stop)) {
        if (mysql_query(m, q) != 0 || mysql_commit(m) != 0)
            break;
        atomic_fetch_add(k->commits, 1);
    }
    mysql_close(m);
    return NULL;
}

/* Commits/s of W connections each updating its own row: the fsync bound. */
static double commit_ceiling(void)
{
    must(sql_execf(env.admin, "CREATE DATABASE flashcommit"));
    must(sql_execf(env.admin, "CREATE TABLE flashcommit.t (id INT PRIMARY KEY, v BIGINT) ENGINE=InnoDB"));
    for (int i = 0; i < workers; i++)
        must(sql_execf(env.admin, "INSERT INTO flashcommit.t VALUES (%d, 0)", i + 1));
    atomic_llong commits = 0;
    atomic_int stop = 0;
    pthread_t th[64];
    committer_t ks[64];
    int n = workers < 64 ? workers : 64;
    for (int i = 0; i < n; i++) {
        ks[i] = (committer_t){ i, &commits, &stop };
        pthread_create(&th[i], NULL, commit_loop, &ks[i]);
    }
    sleep_ms(COMMIT_TEST_MS);
    atomic_store(&stop, 1);
    for (int i = 0; i < n; i++)
        pthread_join(th[i], NULL);
    must(sql_execf(env.admin, "DROP DATABASE flashcommit"));
    return (double)atomic_load(&commits) * 1000.0 / COMMIT_TEST_MS;
}

int main(int argc, char **argv)
{
    int sizes[MAX_SIZES] = { 1, 100 }, nsizes = 2;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--orders") == 0 && i + 1 < argc) {
            orders = atoll(argv[++i]);
        } else if (strcmp(argv[i], "--workers") == 0 && i + 1 < argc) {
            workers = atoi(argv[++i]);
        } else if (strcmp(argv[i], "--count") == 0 && i + 1 < argc) {
            count = atoi(argv[++i]);
        } else if (strcmp(argv[i], "--log-file-size") == 0 && i + 1 < argc) {
            log_file_size = atoll(argv[++i]) << 20;
        } else if (strcmp(argv[i], "--log-bin") == 0) {
            log_bin = 1;
        } else if (strcmp(argv[i], "--skus") == 0 && i + 1 < argc) {
            skus = atoi(argv[++i]);
        } else if (strcmp(argv[i], "--batch-sizes") == 0 && i + 1 < argc) {
            nsizes = 0;
            for (char *p = argv[++i]; *p != '\0' && nsizes < MAX_SIZES;) {
                sizes[nsizes++] = (int)strtol(p, &p, 10);
                if (*p == ',')
                    p++;
                else if (*p != '\0')
                    die("--batch-sizes", "want a list like 1,100");
            }
        } else {
            fprintf(stderr, "usage: flash-sale-bench [--orders N] [--batch-sizes 1,100] [--workers W] [--skus S]"
                            " [--count N] [--log-file-size MiB] [--log-bin]\n");
            return 2;
        }
    }
    if (orders < 1 || workers < 1 || workers > 256 || skus < 1 || nsizes == 0 || count < 0 || count > 1000 ||
        log_file_size < (4LL << 20))
        die("arguments", "out of range");
    signal(SIGPIPE, SIG_IGN);
    hg_order_library_init();
    char err[1024];
    static const char *const binlog_flags[] = { "--log-bin=flash-bin", "--sync-binlog=1", "--server-id=1", NULL };
    env.server.extra_args = log_bin ? binlog_flags : NULL;
    if (oe_start(&env, NULL, err, sizeof err) != 0)
        die("start", err);
    must(sql_execf(env.admin, "SET GLOBAL innodb_buffer_pool_size = 536870912"));
    must(sql_execf(env.admin, "SET GLOBAL innodb_log_file_size = %lld", log_file_size));

    char binlog[16], syncbin[16], doublewrite[16], logsize[32], flush[8];
    variable_text("log_bin", binlog, sizeof binlog);
    variable_text("sync_binlog", syncbin, sizeof syncbin);
    variable_text("innodb_doublewrite", doublewrite, sizeof doublewrite);
    variable_text("innodb_log_file_size", logsize, sizeof logsize);
    variable_text("innodb_flush_log_at_trx_commit", flush, sizeof flush);
    printf("flash sale: %lld orders on %d SKUs, all expiring in the same second, hourglass-consumer --workers %d"
           " through the broker (fsync always; MariaDB innodb_flush_log_at_trx_commit=1), %ld CPUs\n",
           orders, skus, workers, sysconf(_SC_NPROCESSORS_ONLN));
    printf(
        "  the private MariaDB: innodb_flush_log_at_trx_commit=%s, log_bin=%s, sync_binlog=%s, innodb_doublewrite=%s,"
        " innodb_log_file_size=%s\n",
        flush, binlog, syncbin, doublewrite, logsize);
    result_t res[MAX_SIZES];
    for (int i = 0; i < nsizes; i++)
        res[i] = run(sizes[i], (unsigned)i + 1);
    double ceiling = commit_ceiling();
    printf("\n  summary (baseline: batch size %d)\n", res[0].batch);
    for (int i = 0; i < nsizes; i++)
        printf("    batch size %-4d %8.0f cancels/s  %6.2f s expiry → last cancel  %5.1fx  stock %s\n", res[i].batch,
               res[i].rate, res[i].expiry_to_last_s, res[0].rate > 0 ? res[i].rate / res[0].rate : 0,
               res[i].stock_ok ? "exact" : "WRONG");
    printf("  ceiling: %.0f single-row commits/s with %d connections (the bound of one transaction per order)\n",
           ceiling, workers);
    oe_stop(&env);
    return 0;
}
