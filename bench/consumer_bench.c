/*
 * bench/consumer_bench.c — hourglass-consumer cancel throughput and where its
 * time goes: the broker round trip versus MariaDB (figures in
 * docs/order-cancel.md). Prints; never fails on slowness.
 *
 * For each worker count W (--workers, default 1,4,8), --reps times (default 3,
 * the median is reported), on --orders N (default 2 000) fresh orders or
 * messages:
 *
 *   (a) broker only   libhourglass's hg_consumer (the loop inside
 *                     hourglass-consumer: PULL BLOCK → handler → ACK, COUNT 1,
 *                     BLOCK 200 ms, LEASE 3 s) with W workers and a handler
 *                     that returns HG_DONE at once; N messages sent to a topic
 *                     of its own (hg_send_many, pipelined) once it is idle;
 *                     clock: first SEND → N done.
 *   (b) MariaDB only  hg_order_cancel on N pending orders (fresh database,
 *                     reference schema, 30 SKUs) from W threads, each with
 *                     its own hg_order_db opened and prepared beforehand, ids
 *                     handed out by an atomic counter; no broker.
 *                     clock: first cancel → last cancel.
 *   (c) the whole     the real ./hourglass-consumer --workers W --batch-size 1
 *                     (one order per transaction, as in (b); flash-sale-bench
 *                     measures batches) on N fresh
 *                     orders, idle on its own topic and group, then the N ids
 *                     sent as in (a); clock: first SEND → its /metrics say N
 *                     cancelled. Its handler histogram (hourglass_consumer_
 *                     handler_seconds: parse + the cancel transaction) gives
 *                     the time inside MariaDB as the daemon itself saw it.
 *
 * µs/message below is wall time per message at that worker count (1 / the
 * throughput); with W workers each message occupies a worker W times that.
 * Shares: broker = a / (a + b), MariaDB = b / (a + b) from the separate runs;
 * "in the daemon" = mean handler time × N / (W × clock of c), the share of
 * worker time the daemon spent in the cancel transaction (the rest is PULL,
 * ACK and waiting for them).
 *
 * A private MariaDB (tu_mariadb_start: innodb_flush_log_at_trx_commit=1) and
 * a private broker (broker_proc, fsync always) on this machine; both are
 * removed at the end.
 * Run: make consumer-bench && ./consumer-bench [--orders N] [--workers 1,4,8] [--reps R]
 */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include "include/hourglass/hourglass.h"
#include "tests/helpers/order_env.h"
#include "tests/helpers/testutil.h"

#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define MAX_WORKER_COUNTS 8
#define MAX_REPS          15
#define DEADLINE_MS       120000

static oe_env_t env;
static size_t orders = 2000;
static unsigned run_seq; /* makes topic, group and database names unique */

static void die(const char *what, const char *detail)
{
    fprintf(stderr, "consumer-bench: %s: %s\n", what, detail);
    oe_stop(&env);
    exit(1);
}

static void sleep_ms(unsigned ms)
{
    struct timespec ts = { ms / 1000, (long)(ms % 1000) * 1000000L };
    nanosleep(&ts, NULL);
}

/* Send ids 1..n to topic, pipelined. Dies on failure. */
static void send_ids(const char *topic, size_t n)
{
    char err[512];
    if (oe_send_ids_pipelined(&env, topic, n, hg_delay_none(), 0, err, sizeof err) != 0)
        die("send", err);
}

static void create_group(const char *group, const char *topic)
{
    rc_conn_t c;
    char err[512];
    if (bp_connect(&env.broker, &c, err, sizeof err) != 0 ||
        bp_ok_cmd(&c, err, sizeof err, "GROUP", "CREATE", group, topic, "FROM", "FIRST", NULL) != 0)
        die("GROUP CREATE", err);
    rc_close(&c);
}

/* ---------------------------------------------------------------- (a) broker only */

static hg_outcome_t noop_handler(const hg_message_t *m, char *reason, size_t n, void *arg)
{
    (void)m, (void)reason, (void)n, (void)arg;
    return HG_DONE;
}

static void *run_consumer(void *arg)
{
    hg_consumer_run(arg);
    return NULL;
}

/* Seconds for N messages through the broker with a no-op handler. */
static double broker_only(int workers)
{
    char topic[64], group[64], uri[64];
    unsigned seq = ++run_seq;
    snprintf(topic, sizeof topic, "bench-a-%u", seq);
    snprintf(group, sizeof group, "bench-a-%u", seq);
    snprintf(uri, sizeof uri, "hourglass://127.0.0.1:%d", env.broker.port);
    create_group(group, topic);

    hg_consumer_opts_t o;
    hg_consumer_opts_init(&o);
    o.uri = uri;
    o.group = group;
    o.topic = topic;
    o.workers = workers;
    o.count = 1; /* hourglass-consumer's defaults and oe_start_consumer's flags */
    o.block_ms = 200;
    o.lease_ms = 3000;
    o.handler = noop_handler;
    hg_consumer_t *cons;
    hg_error_t err;
    if (hg_consumer_new(&o, &cons, &err) != HG_OK)
        die("hg_consumer_new", err.message);
    pthread_t t;
    if (pthread_create(&t, NULL, run_consumer, cons) != 0)
        die("pthread_create", "consumer");
    sleep_ms(300); /* every worker connected and blocked in PULL */

    uint64_t t0 = tu_now_mono_us();
    send_ids(topic, orders);
    hg_consumer_stats_t s;
    for (;;) {
        hg_consumer_stats(cons, &s);
        if (s.done >= orders || tu_now_mono_us() - t0 > DEADLINE_MS * 1000ull)
            break;
        sleep_ms(1);
    }
    uint64_t us = tu_now_mono_us() - t0;
    hg_consumer_stop(cons);
    pthread_join(t, NULL);
    hg_consumer_free(cons);
    if (s.done < orders)
        die("broker only", "the no-op consumer did not drain the messages in time");
    return (double)us / 1e6;
}

/* ---------------------------------------------------------------- (b) MariaDB only */

typedef struct db_run {
    const char *name;
    pthread_barrier_t ready;
    atomic_size_t next;
    atomic_uint_fast64_t cancelled, retries, failed;
    uint64_t t0, t1;
    pthread_mutex_t lock;
} db_run_t;

static void *db_worker(void *arg)
{
    db_run_t *r = arg;
    hg_order_error_t err;
    hg_order_db *db = oe_open_db(&env, r->name, &err);
    if (db == NULL || hg_order_db_prepare(db, &err) != 0)
        die("MariaDB only: open", err.message);
    pthread_barrier_wait(&r->ready);
    for (;;) {
        size_t k = atomic_fetch_add(&r->next, 1);
        if (k >= orders)
            break;
        hg_order_outcome_t out;
        for (unsigned attempt = 0;; attempt++) {
            if (hg_order_cancel(db, 1 + k, "timeout-message", &out, &err) == 0 || out != HG_ORDER_TRANSIENT)
                break;
            atomic_fetch_add(&r->retries, 1);
            if (attempt == 20)
                break;
            sleep_ms(1u << (attempt < 5 ? attempt : 5));
        }
        if (out == HG_ORDER_CANCELLED)
            atomic_fetch_add(&r->cancelled, 1);
        else
            atomic_fetch_add(&r->failed, 1);
    }
    uint64_t t = tu_now_mono_us();
    pthread_mutex_lock(&r->lock);
    if (t > r->t1)
        r->t1 = t;
    pthread_mutex_unlock(&r->lock);
    hg_order_db_close(db);
    return NULL;
}

static double mariadb_only(int workers)
{
    char name[64];
    snprintf(name, sizeof name, "bench_b_%u", ++run_seq);
    hg_order_db *db = oe_fresh_database(&env, name, orders, NULL);
    if (db == NULL)
        die("MariaDB only", "cannot create the database");
    db_run_t r = { .name = name };
    pthread_mutex_init(&r.lock, NULL);
    pthread_barrier_init(&r.ready, NULL, (unsigned)workers + 1);
    pthread_t t[256];
    for (int i = 0; i < workers; i++)
        if (pthread_create(&t[i], NULL, db_worker, &r) != 0)
            die("pthread_create", "MariaDB worker");
    pthread_barrier_wait(&r.ready);
    r.t0 = tu_now_mono_us();
    for (int i = 0; i < workers; i++)
        pthread_join(t[i], NULL);
    pthread_barrier_destroy(&r.ready);
    pthread_mutex_destroy(&r.lock);
    of_report_t rep;
    hg_order_error_t err;
    if (r.cancelled != orders || r.failed != 0 || oe_check(&env, name, 3600, &rep, &err) != 0 || !rep.ok ||
        rep.cancelled != orders)
        die("MariaDB only", "not every order was cancelled exactly once");
    hg_order_db_close(db);
    return (double)(r.t1 - r.t0) / 1e6;
}

/* ---------------------------------------------------------------- (c) hourglass-consumer */

typedef struct whole {
    double seconds;
    double handler_mean_s; /* the daemon's handler time (parse + cancel) per cancelled order */
    double retries;
} whole_t;

static whole_t whole_daemon(int workers)
{
    char name[64], log_path[700], dir[512];
    unsigned seq = ++run_seq;
    snprintf(name, sizeof name, "bench_c_%u", seq);
    hg_order_db *db = oe_fresh_database(&env, name, orders, NULL);
    if (db == NULL)
        die("hourglass-consumer", "cannot create the database");
    create_group(name, name); /* topic and group named like the database */
    if (tu_mkdtemp("consumer-bench", dir, sizeof dir) != 0)
        die("mkdtemp", dir);
    snprintf(log_path, sizeof log_path, "%s/consumer.log", dir);
    int port = tu_free_port();
    /* One order per transaction, the shape (a) and (b) measure; flash-sale-bench measures batches. */
    const char *extra[] = { "--topic", name, "--batch-size", "1", NULL };
    pid_t pid = oe_start_consumer(&env, name, name, workers, port, log_path, extra);
    if (pid < 0)
        die("hourglass-consumer", "cannot start it");
    uint64_t up = tu_now_mono_us();
    while (oe_metric(port, "hourglass_consumer_cancelled_total") != 0) {
        if (tu_now_mono_us() - up > 20000000ull) {
            oe_print_file(log_path);
            die("hourglass-consumer", "no /metrics after 20 s");
        }
        sleep_ms(5);
    }
    sleep_ms(300); /* every worker connected and blocked in PULL */

    static const char *const names[] = { "hourglass_consumer_cancelled_total", "hourglass_consumer_handler_seconds_sum",
                                         "hourglass_consumer_handler_seconds_count",
                                         "hourglass_consumer_retries_total" };
    double v[4];
    uint64_t t0 = tu_now_mono_us();
    send_ids(name, orders);
    for (;;) {
        oe_metrics(port, 4, names, v);
        if (v[0] >= (double)orders || tu_now_mono_us() - t0 > DEADLINE_MS * 1000ull)
            break;
        sleep_ms(2);
    }
    uint64_t us = tu_now_mono_us() - t0;
    oe_metrics(port, 4, names, v);
    if (oe_stop_consumer(pid) != 0)
        fprintf(stderr, "consumer-bench: hourglass-consumer did not stop cleanly\n");
    of_report_t rep;
    hg_order_error_t err;
    if (v[0] < (double)orders || oe_check(&env, name, 3600, &rep, &err) != 0 || !rep.ok || rep.cancelled != orders) {
        oe_print_file(log_path);
        die("hourglass-consumer", "not every order was cancelled exactly once");
    }
    hg_order_db_close(db);
    tu_rmtree(dir);
    whole_t w = { (double)us / 1e6, v[0] > 0 ? v[1] / v[0] : 0, v[3] };
    return w;
}

/* ---------------------------------------------------------------- main */

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

static void loadavg(char *buf, size_t len)
{
    FILE *f = fopen("/proc/loadavg", "r");
    buf[0] = '\0';
    if (f != NULL) {
        if (fgets(buf, (int)len, f) != NULL)
            buf[strcspn(buf, " ")] = '\0';
        fclose(f);
    }
}

int main(int argc, char **argv)
{
    int counts[MAX_WORKER_COUNTS] = { 1, 4, 8 }, ncounts = 3, reps = 3;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "--orders") == 0 && i + 1 < argc) {
            orders = (size_t)atoll(argv[++i]);
        } else if (strcmp(a, "--reps") == 0 && i + 1 < argc) {
            reps = atoi(argv[++i]);
        } else if (strcmp(a, "--workers") == 0 && i + 1 < argc) {
            ncounts = 0;
            for (char *p = argv[++i]; *p != '\0' && ncounts < MAX_WORKER_COUNTS;) {
                counts[ncounts++] = (int)strtol(p, &p, 10);
                if (*p == ',')
                    p++;
                else if (*p != '\0')
                    break;
            }
        } else {
            fprintf(stderr,
                    "usage: %s [--orders N] [--workers W,W,…] [--reps R]\n"
                    "  hourglass-consumer cancel throughput and its time split (docs/order-cancel.md)\n",
                    argv[0]);
            return strcmp(a, "--help") == 0 ? 0 : 2;
        }
    }
    if (orders < 1 || orders > 1000000 || reps < 1 || reps > MAX_REPS || ncounts < 1) {
        fprintf(stderr, "consumer-bench: --orders 1..1000000, --reps 1..%d, --workers 1..256 each\n", MAX_REPS);
        return 2;
    }
    for (int i = 0; i < ncounts; i++)
        if (counts[i] < 1 || counts[i] > 256) {
            fprintf(stderr, "consumer-bench: workers %d out of range 1..256\n", counts[i]);
            return 2;
        }

    signal(SIGPIPE, SIG_IGN);
    setvbuf(stdout, NULL, _IOLBF, 0);
    hg_order_library_init();
    char err[4096], load0[32], load1[32];
    if (oe_start(&env, NULL, err, sizeof err) != 0)
        die("start", err);
    loadavg(load0, sizeof load0);
    printf("consumer-bench: %zu orders/messages per run, median of %d run%s, %ld CPUs, load average %s\n", orders, reps,
           reps > 1 ? "s" : "", sysconf(_SC_NPROCESSORS_ONLN), load0);

    double a[MAX_WORKER_COUNTS], b[MAX_WORKER_COUNTS], c[MAX_WORKER_COUNTS], h[MAX_WORKER_COUNTS];
    for (int i = 0; i < ncounts; i++) {
        double ra[MAX_REPS], rb[MAX_REPS], rcs[MAX_REPS], rh[MAX_REPS];
        for (int k = 0; k < reps; k++) {
            ra[k] = broker_only(counts[i]);
            rb[k] = mariadb_only(counts[i]);
            whole_t w = whole_daemon(counts[i]);
            rcs[k] = w.seconds;
            rh[k] = w.handler_mean_s;
            printf("  workers %d run %d: (a) broker only %.3f s, (b) MariaDB only %.3f s, (c) hourglass-consumer"
                   " %.3f s (mean handler %.0f µs, transient retries %.0f)\n",
                   counts[i], k + 1, ra[k], rb[k], rcs[k], rh[k] * 1e6, w.retries);
        }
        a[i] = median(ra, reps);
        b[i] = median(rb, reps);
        c[i] = median(rcs, reps);
        h[i] = median(rh, reps);
    }
    loadavg(load1, sizeof load1);

    double n = (double)orders;
    printf("\nThroughput: µs per message = wall time / messages (1 / throughput), median of %d;"
           " load average %s → %s\n\n",
           reps, load0, load1);
    printf("| workers | (a) broker only | (b) MariaDB only | a + b | (c) hourglass-consumer | (c) orders/s |\n");
    printf("| ---: | ---: | ---: | ---: | ---: | ---: |\n");
    for (int i = 0; i < ncounts; i++) {
        double ua = a[i] * 1e6 / n, ub = b[i] * 1e6 / n, uc = c[i] * 1e6 / n;
        printf("| %d | %.0f µs | %.0f µs | %.0f µs | %.0f µs | %.0f |\n", counts[i], ua, ub, ua + ub, uc, n / c[i]);
    }
    printf("\nTime split: separate runs a : b, and inside the daemon (c): worker time per message = W × (c) µs,"
           " of it in the handler (parse + cancel transaction = MariaDB) and the rest (PULL, ACK, waiting)\n\n");
    printf("| workers | broker a/(a+b) | MariaDB b/(a+b) | (c) worker µs/message | handler (MariaDB) | rest (broker)"
           " | MariaDB share | broker share |\n");
    printf("| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n");
    for (int i = 0; i < ncounts; i++) {
        double ua = a[i] * 1e6 / n, ub = b[i] * 1e6 / n, uc = c[i] * 1e6 / n;
        double worker = uc * counts[i], hu = h[i] * 1e6;
        printf("| %d | %.0f %% | %.0f %% | %.0f µs | %.0f µs | %.0f µs | %.0f %% | %.0f %% |\n", counts[i],
               100 * ua / (ua + ub), 100 * ub / (ua + ub), worker, hu, worker - hu, 100 * hu / worker,
               100 * (worker - hu) / worker);
    }
    printf("\n(a) hg_consumer with a no-op handler: PULL + ACK only; (b) hg_order_cancel in W threads, no broker;\n"
           "(c) ./hourglass-consumer --workers W --batch-size 1 end to end, clock from the first SEND to N cancelled;\n"
           "handler = its hourglass_consumer_handler_seconds sum / orders cancelled.\n");
    oe_stop(&env);
    return 0;
}
