/*
 * bench/hourglass_bench.c — hourglass-bench: what the real broker does over the
 * wire, in the style of redis-benchmark. It prints figures and never fails on
 * slowness (CONTRIBUTING.md, "A benchmark"): the exit status is non-zero only when something
 * is broken (the broker does not start, answers an error, loses a message).
 *
 * Parts (each starts its own hourglass-broker in a fresh temp dir, via
 * tests/helpers/broker_proc):
 *   send      durable SEND throughput: C connections, pipeline P (P SENDs
 *             written, then their P replies read, like redis-benchmark -P),
 *             64-byte payloads, LEVEL 2; once with fsync always (the default)
 *             and once with fsync no. The id comes back only after the group
 *             commit holding the message was written (and fsynced).
 *   zadd      (with --zadd-port PORT) the same client loop doing ZADD against a
 *             redis-server already listening there — the comparison without
 *             redis-benchmark's client in between. scripts/hourglass-bench
 *             starts that redis-server and also runs redis-benchmark itself.
 *   delivery  N messages (200 000) with a 5 s delay (LEVEL 2) sent as fast as
 *             possible by C connections; 2 consumers PULL COUNT 100 BLOCK and
 *             ACK (the ACK pipelined with the next PULL). Lateness = the wall
 *             clock when the PULL reply arrived − the message's due_ms:
 *             p50 / p99 / p100 (goal p100 <= 2 s).
 *   steady    a steady R msg/s (10 000) of LEVEL 1 messages for S seconds (10),
 *             paced in 10 ms ticks, with the same 2 consumers: lateness p99
 *             (goal <= 5 ms).
 *   sendkey   (--only sendkey) the key index's cost on SEND: plain SEND, SEND KEY,
 *             SEND KEY DEDUP (new keys; live keys), each on a fresh broker,
 *             fsync always and no; with --baseline-broker PATH plain SEND and
 *             DEDUP SEND of new keys on another build too (an older broker):
 *             % against plain SEND on this build.
 *   mixed     8 producers (SEND DELAY 5s) and 2 consumers at once, the flood;
 *             with --zadd-port, --ceiling-port, --floor-port the same against
 *             Redis, Redis without persistence, hourglass-floor, taking turns;
 *             --mixed-warm-log SECS starts each hourglass run on a warmed log.
 *   capacity  (--capacity, long) 10^7 messages pending at LEVEL 18: broker RSS
 *             (VmRSS / VmHWM from /proc/PID/status) after the fill; kill -9;
 *             restart to the first answered PING and LEVELS; LEVELS depth.
 *
 * Usage: hourglass-bench [--quick] [--only PART[,PART…]] [--capacity] [--zadd-port PORT]
 *        [--clients C] [--pipeline P] [-n N] [--broker PATH] [--capacity-n N]
 *        [--pull-count N] [--broker-flag ARG]... (hourglass-bench --help)
 * Every part ends with a "RESULT key=value ..." line for scripts.
 *
 * Threads: one per connection; they only record, the main thread computes.
 */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <dirent.h>
#include <ftw.h>

#include "tests/helpers/broker_proc.h"
#include "tests/helpers/testutil.h"

#define PROGRAM       "hourglass-bench" /* tu_die's prefix */
#define PAYLOAD_BYTES 64
#define MAX_CLIENTS   64
#define CONSUMERS     2

typedef struct options {
    int quick;
    const char *only; /* NULL: every part but capacity */
    int capacity;
    int zadd_port;
    int ceiling_port; /* --ceiling-port: a redis-server without persistence, the mixed part's ceiling */
    int floor_port;   /* --floor-port: hourglass-floor (bench/floor_server.c), the least a durable broker does */
    int clients;
    int pipeline;
    long send_n; /* messages per send run */
    long delivery_n;
    int steady_rate;
    int steady_secs;
    long capacity_n;
    const char *capacity_fsync;
    const char *pull_count;       /* PULL COUNT of the consumers */
    const char *sustain_rates;    /* the sustain part's producer rates, msg/s, comma-separated */
    int mixed_runs;               /* the mixed part's flood runs, each server's interleaved with the other's */
    int mixed_warm_secs;          /* --mixed-warm-log SECS: each hourglass run's log warmed first (0: not) */
    const char *broker_flags[16]; /* --broker-flag: added to every broker started */
    int nbroker_flags;
} options_t;

static options_t opt = {
    .clients = 8,
    .pipeline = 128,
    .send_n = 1000000,
    .delivery_n = 200000,
    .steady_rate = 10000,
    .steady_secs = 10,
    .capacity_n = 10000000,
    .capacity_fsync = "always",
    .pull_count = "100",
    .sustain_rates = "40000,60000,80000,100000,120000,140000,160000,180000,200000",
    .mixed_runs = 3,
};

static int broken; /* something failed: the exit status */

static uint64_t wall_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (uint64_t)ts.tv_sec * 1000000u + (uint64_t)ts.tv_nsec / 1000u;
}

static void sleep_us(uint64_t us)
{
    struct timespec ts = { .tv_sec = (time_t)(us / 1000000), .tv_nsec = (long)(us % 1000000) * 1000L };
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
        ;
}

static int cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return x < y ? -1 : x > y;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* q-quantile of a sorted array (nearest rank). */
static int64_t quantile(const int64_t *v, size_t n, double q)
{
    if (n == 0)
        return 0;
    size_t i = (size_t)(q * (double)n);
    if (i >= n)
        i = n - 1;
    return v[i];
}

/* Start a broker with flags (NULL-terminated, may be NULL) plus every --broker-flag. */
static void start_broker(bp_broker_t *b, const char *const *flags)
{
    const char *all[BP_MAX_EXTRA + 1];
    int n = 0;
    for (int i = 0; flags != NULL && flags[i] != NULL && n < BP_MAX_EXTRA; i++)
        all[n++] = flags[i];
    for (int i = 0; i < opt.nbroker_flags && n < BP_MAX_EXTRA; i++)
        all[n++] = opt.broker_flags[i];
    all[n] = NULL;
    char err[8192];
    if (bp_start(b, all, err, sizeof err) != 0)
        tu_die(PROGRAM, "cannot start the broker: %s", err);
    printf("(broker pid %d, port %d, dir %s)\n", (int)b->pid, b->port, b->dir);
    fflush(stdout);
}

/* ---- send throughput ------------------------------------------------------------ */

typedef enum {
    CMD_SEND,
    CMD_ZADD,
    CMD_SEND_KEY,   /* SEND … KEY k (a new key each) */
    CMD_SEND_DEDUP, /* SEND … KEY k DEDUP (a new key each: every one stored) */
    CMD_SEND_DUP    /* SEND … KEY k DEDUP of keys already live (every one a duplicate) */
} cmd_kind_t;

typedef struct send_worker {
    int index, port;
    cmd_kind_t kind;
    long n; /* messages to send */
    const char *topic;
    const char *level; /* "LEVEL" value, e.g. "2" */
    pthread_barrier_t *go;
    int64_t *batch_us; /* round trip of each pipeline batch */
    long nbatch;
    long done;
    char err[300];
} send_worker_t;

static void *send_main(void *arg)
{
    send_worker_t *w = arg;
    rc_conn_t c;
    int connected = rc_connect(&c, "127.0.0.1", w->port, 30000) == 0;
    if (!connected)
        snprintf(w->err, sizeof w->err, "connect: %s", c.err);
    pthread_barrier_wait(w->go);
    if (!connected)
        return NULL;
    char payload[PAYLOAD_BYTES + 1];
    memset(payload, 'x', PAYLOAD_BYTES);
    payload[PAYLOAD_BYTES] = '\0';
    long seq = 0;
    while (w->done < w->n) {
        long k = w->n - w->done < opt.pipeline ? w->n - w->done : opt.pipeline;
        for (long i = 0; i < k; i++, seq++) {
            if (w->kind == CMD_SEND) {
                rc_appendl(&c, "SEND", w->topic, payload, "LEVEL", w->level, NULL);
            } else if (w->kind != CMD_ZADD) {
                char key[48];
                snprintf(key, sizeof key, "order:%d:%ld", w->index, w->kind == CMD_SEND_DUP ? seq % 1000 : seq);
                if (w->kind == CMD_SEND_KEY)
                    rc_appendl(&c, "SEND", w->topic, payload, "KEY", key, "LEVEL", w->level, NULL);
                else
                    rc_appendl(&c, "SEND", w->topic, payload, "KEY", key, "DEDUP", "LEVEL", w->level, NULL);
            } else {
                char score[24], member[PAYLOAD_BYTES + 1];
                snprintf(score, sizeof score, "%ld", seq);
                int m = snprintf(member, sizeof member, "m:%d:%ld:", w->index, seq);
                memset(member + m, 'x', (size_t)(PAYLOAD_BYTES - m));
                member[PAYLOAD_BYTES] = '\0';
                rc_appendl(&c, "ZADD", w->topic, score, member, NULL);
            }
        }
        uint64_t t0 = tu_now_mono_us();
        if (rc_flush(&c, 60000) != 0) {
            snprintf(w->err, sizeof w->err, "write: %s", c.err);
            break;
        }
        for (long i = 0; i < k; i++) {
            resp_reply_t *r = rc_read(&c, 60000);
            if (r == NULL || r->type == RESP_REPLY_ERROR) {
                char d[300];
                snprintf(w->err, sizeof w->err, "reply: %s", r == NULL ? c.err : rc_describe(r, d, sizeof d));
                resp_reply_free(r);
                rc_close(&c);
                return NULL;
            }
            resp_reply_free(r);
        }
        w->batch_us[w->nbatch++] = (int64_t)(tu_now_mono_us() - t0);
        w->done += k;
    }
    rc_close(&c);
    return NULL;
}

typedef struct send_result {
    double secs, rate;
    int64_t p50_us, p99_us, max_us;
    long done;
} send_result_t;

/* Run C workers against port; returns the figures. */
static send_result_t run_send(int port, cmd_kind_t kind, long n, const char *topic, const char *level)
{
    send_worker_t w[MAX_CLIENTS];
    pthread_t th[MAX_CLIENTS];
    pthread_barrier_t go;
    pthread_barrier_init(&go, NULL, (unsigned)opt.clients + 1);
    for (int i = 0; i < opt.clients; i++) {
        memset(&w[i], 0, sizeof w[i]);
        w[i].index = i;
        w[i].port = port;
        w[i].kind = kind;
        w[i].n = n / opt.clients + (i < n % opt.clients ? 1 : 0);
        w[i].topic = topic;
        w[i].level = level;
        w[i].go = &go;
        w[i].batch_us = malloc(sizeof(int64_t) * (size_t)(w[i].n / opt.pipeline + 2));
        if (w[i].batch_us == NULL)
            tu_die(PROGRAM, "out of memory");
        pthread_create(&th[i], NULL, send_main, &w[i]);
    }
    pthread_barrier_wait(&go);
    uint64_t t0 = tu_now_mono_us();
    for (int i = 0; i < opt.clients; i++)
        pthread_join(th[i], NULL);
    send_result_t res = { 0 };
    res.secs = (double)(tu_now_mono_us() - t0) / 1e6;
    pthread_barrier_destroy(&go);
    long nb = 0;
    for (int i = 0; i < opt.clients; i++) {
        nb += w[i].nbatch;
        res.done += w[i].done;
        if (w[i].err[0]) {
            fprintf(stderr, "hourglass-bench: client %d: %s\n", i, w[i].err);
            broken = 1;
        }
    }
    int64_t *all = malloc(sizeof(int64_t) * (size_t)(nb > 0 ? nb : 1));
    long k = 0;
    for (int i = 0; i < opt.clients; i++) {
        memcpy(all + k, w[i].batch_us, sizeof(int64_t) * (size_t)w[i].nbatch);
        k += w[i].nbatch;
        free(w[i].batch_us);
    }
    qsort(all, (size_t)nb, sizeof *all, cmp_i64);
    res.p50_us = quantile(all, (size_t)nb, 0.5);
    res.p99_us = quantile(all, (size_t)nb, 0.99);
    res.max_us = nb > 0 ? all[nb - 1] : 0;
    free(all);
    res.rate = res.secs > 0 ? (double)res.done / res.secs : 0;
    return res;
}

static void print_send(const char *title, const send_result_t *r)
{
    printf("====== %s ======\n", title);
    printf("  %ld requests completed in %.2f seconds\n", r->done, r->secs);
    printf("  %d parallel clients, pipeline %d, %d bytes payload\n", opt.clients, opt.pipeline, PAYLOAD_BYTES);
    printf("  pipeline round trip (%d requests): p50 %.2f ms, p99 %.2f ms, max %.2f ms\n", opt.pipeline,
           (double)r->p50_us / 1000, (double)r->p99_us / 1000, (double)r->max_us / 1000);
    printf("  %.0f requests per second\n\n", r->rate);
}

/* The broker's INFO storage line "key:value" as text ("" when missing). */
static void info_value(int port, const char *key, char *buf, size_t len)
{
    rc_conn_t c;
    buf[0] = '\0';
    if (rc_connect(&c, "127.0.0.1", port, 10000) == 0) {
        char e[300];
        bp_info_field(&c, key, buf, len, e, sizeof e);
    }
    rc_close(&c);
}

static void part_send(void)
{
    static const char *const fs[] = { "always", "no" };
    double rate[2] = { 0, 0 };
    for (int i = 0; i < 2; i++) {
        const char *flags[] = { "--fsync", fs[i], NULL };
        bp_broker_t b;
        start_broker(&b, flags);
        double cpu0 = tu_proc_cpu_secs(b.pid);
        send_result_t r = run_send(b.port, CMD_SEND, opt.send_n, "bench", "2");
        double cpu1 = tu_proc_cpu_secs(b.pid);
        char title[128];
        snprintf(title, sizeof title, "SEND LEVEL 2, fsync %s", fs[i]);
        print_send(title, &r);
        printf("  broker CPU %.2f s in %.2f s (%.0f%% of one core)\n", cpu1 - cpu0, r.secs,
               r.secs > 0 ? 100.0 * (cpu1 - cpu0) / r.secs : 0);
        char batches[64], avg[64], p99[64];
        info_value(b.port, "group_commits", batches, sizeof batches);
        info_value(b.port, "avg_batch", avg, sizeof avg);
        info_value(b.port, "commit_p99_ms", p99, sizeof p99);
        if (batches[0] || avg[0])
            printf("  broker INFO: group_commits %s, avg_batch %s jobs, commit_p99_ms %s\n\n",
                   batches[0] ? batches : "?", avg[0] ? avg : "?", p99[0] ? p99 : "?");
        rate[i] = r.rate;
        bp_destroy(&b);
    }
    printf("RESULT send_fsync_always_rps=%.0f send_fsync_no_rps=%.0f clients=%d pipeline=%d n=%ld\n\n", rate[0],
           rate[1], opt.clients, opt.pipeline, opt.send_n);
}

/* The key index's cost on SEND (DESIGN §2): plain SEND, SEND KEY, SEND KEY
 * DEDUP of new keys and of live keys, each on a fresh broker with the same
 * flags, and with --baseline-broker PATH plain SEND and DEDUP SEND of new
 * keys on another build (an older broker) as the baseline. */
static const char *baseline_broker;

static void part_sendkey(void)
{
    static const struct {
        cmd_kind_t kind;
        const char *title;
        const char *key;
        int baseline;
    } runs[] = {
        { CMD_SEND, "SEND LEVEL 2 (baseline broker)", "baseline", 1 },
        { CMD_SEND, "SEND LEVEL 2", "plain", 0 },
        { CMD_SEND_KEY, "SEND KEY k LEVEL 2 (new keys)", "key", 0 },
        { CMD_SEND_DEDUP, "SEND KEY k DEDUP LEVEL 2 (new keys: all stored)", "dedup", 0 },
        { CMD_SEND_DUP, "SEND KEY k DEDUP LEVEL 2 (live keys: all duplicates)", "dup", 0 },
        { CMD_SEND_DEDUP, "SEND KEY k DEDUP LEVEL 2 (new keys; baseline broker)", "baseline_dedup", 1 },
    };
    enum {
        NRUNS = sizeof runs / sizeof runs[0]
    };
    static const char *const fs[] = { "always", "no" };
    for (int f = 0; f < 2; f++) {
        double rate[NRUNS] = { 0 };
        for (size_t i = 0; i < NRUNS; i++) {
            if (runs[i].baseline && baseline_broker == NULL)
                continue;
            const char *saved = getenv("HG_BROKER");
            char keep[512] = "";
            if (saved != NULL)
                snprintf(keep, sizeof keep, "%s", saved);
            if (runs[i].baseline)
                setenv("HG_BROKER", baseline_broker, 1);
            const char *flags[] = { "--fsync", fs[f], NULL };
            bp_broker_t b;
            start_broker(&b, flags);
            if (runs[i].kind == CMD_SEND_DUP) /* make 1000 keys per client live first */
                run_send(b.port, CMD_SEND_DEDUP, 1000L * opt.clients, "bench", "2");
            send_result_t r = run_send(b.port, runs[i].kind, opt.send_n, "bench", "2");
            char title[160];
            snprintf(title, sizeof title, "%s, fsync %s", runs[i].title, fs[f]);
            print_send(title, &r);
            rate[i] = r.rate;
            bp_destroy(&b);
            if (runs[i].baseline) {
                if (keep[0])
                    setenv("HG_BROKER", keep, 1);
                else
                    unsetenv("HG_BROKER");
            }
        }
        double base = rate[1];
        printf("  fsync %s, against plain SEND on this build (%.0f/s):", fs[f], base);
        for (size_t i = 0; i < NRUNS; i++)
            if (rate[i] > 0 && i != 1)
                printf(" %s %+.1f%%", runs[i].key, base > 0 ? 100.0 * (rate[i] - base) / base : 0.0);
        printf("\nRESULT sendkey_fsync_%s baseline_rps=%.0f plain_rps=%.0f key_rps=%.0f dedup_rps=%.0f dup_rps=%.0f "
               "baseline_dedup_rps=%.0f clients=%d pipeline=%d n=%ld\n\n",
               fs[f], rate[0], rate[1], rate[2], rate[3], rate[4], rate[5], opt.clients, opt.pipeline, opt.send_n);
        fflush(stdout);
    }
}

static void part_zadd(void)
{
    send_result_t r = run_send(opt.zadd_port, CMD_ZADD, opt.send_n, "hgbench", NULL);
    print_send("ZADD against redis-server (same client loop)", &r);
    printf("RESULT zadd_same_client_rps=%.0f\n\n", r.rate);
}

/* ---- delivery lateness --------------------------------------------------------- */

typedef struct consumer {
    int port;
    long target;      /* stop when the shared count reaches it */
    long *shared;     /* delivered so far, all consumers (atomic) */
    int *stop;        /* atomic */
    int64_t *late_us; /* lateness of each message received */
    long n, cap;
    uint64_t due_limit_ms; /* with shared_due: count the messages received that were due by then */
    long *shared_due;      /* those, all consumers (atomic); NULL: not counted */
    long pulls;
    char err[300];
} consumer_t;

/* Add what a consumer counted as due by cs->due_limit_ms to the shared count. */
static void count_due(consumer_t *cs, long *due_by_limit)
{
    if (cs->shared_due != NULL && *due_by_limit > 0)
        __atomic_add_fetch(cs->shared_due, *due_by_limit, __ATOMIC_SEQ_CST);
    *due_by_limit = 0;
}

static void *consumer_main(void *arg)
{
    consumer_t *cs = arg;
    rc_conn_t c;
    if (rc_connect(&c, "127.0.0.1", cs->port, 30000) != 0) {
        snprintf(cs->err, sizeof cs->err, "connect: %s", c.err);
        return NULL;
    }
    enum {
        MAXC = 1000
    };
    static __thread char ids[MAXC][17];
    int nids = 0;
    long due_by_limit = 0;
    for (;;) {
        if (__atomic_load_n(cs->stop, __ATOMIC_SEQ_CST) || __atomic_load_n(cs->shared, __ATOMIC_SEQ_CST) >= cs->target)
            break;
        /* ACK the previous batch and PULL the next in one write. */
        int acking = nids > 0;
        if (acking) {
            static __thread const char *argv[2 + MAXC];
            argv[0] = "ACK";
            argv[1] = "bench";
            for (int i = 0; i < nids; i++)
                argv[2 + i] = ids[i];
            rc_append(&c, 2 + nids, argv, NULL);
        }
        rc_appendl(&c, "PULL", "bench", "lat", "COUNT", opt.pull_count, "BLOCK", "200", NULL);
        if (rc_flush(&c, 30000) != 0) {
            snprintf(cs->err, sizeof cs->err, "write: %s", c.err);
            break;
        }
        if (acking) {
            resp_reply_t *a = rc_read(&c, 30000);
            long long rel = -1;
            if (rc_int(a, &rel) != 0 || rel != nids) {
                snprintf(cs->err, sizeof cs->err, "ACK released %lld of %d (%s)", rel, nids,
                         a == NULL ? c.err : "reply");
                resp_reply_free(a);
                break;
            }
            resp_reply_free(a);
            nids = 0;
        }
        resp_reply_t *r = rc_read(&c, 30000);
        uint64_t recv = wall_us();
        if (r == NULL || r->type != RESP_REPLY_ARRAY) {
            char d[300];
            snprintf(cs->err, sizeof cs->err, "PULL: %s", r == NULL ? c.err : rc_describe(r, d, sizeof d));
            resp_reply_free(r);
            break;
        }
        cs->pulls++;
        for (size_t i = 0; i < r->count && i < MAXC; i++) {
            rc_msg_t m;
            char e[300];
            if (rc_msg_at(r, i, &m, e, sizeof e) != 0) {
                snprintf(cs->err, sizeof cs->err, "%s", e);
                break;
            }
            if (cs->n < cs->cap)
                cs->late_us[cs->n++] = (int64_t)recv - (int64_t)(m.due_ms * 1000);
            due_by_limit += m.due_ms <= cs->due_limit_ms;
            snprintf(ids[nids++], sizeof ids[0], "%.16s", m.id);
        }
        __atomic_add_fetch(cs->shared, (long)r->count, __ATOMIC_SEQ_CST);
        count_due(cs, &due_by_limit);
        resp_reply_free(r);
    }
    rc_close(&c);
    return NULL;
}

typedef struct consumers {
    consumer_t cs[CONSUMERS];
    pthread_t th[CONSUMERS];
    long shared;
    long shared_due; /* run_mixed: delivered of what came due by the end */
    int stop;
} consumers_t;

static void consumers_start(consumers_t *g, int port, long target)
{
    memset(g, 0, sizeof *g);
    for (int i = 0; i < CONSUMERS; i++) {
        consumer_t *c = &g->cs[i];
        c->port = port;
        c->target = target;
        c->shared = &g->shared;
        c->stop = &g->stop;
        c->cap = target + 1000;
        c->late_us = malloc(sizeof(int64_t) * (size_t)c->cap);
        if (c->late_us == NULL)
            tu_die(PROGRAM, "out of memory");
        pthread_create(&g->th[i], NULL, consumer_main, c);
    }
}

/* Wait until target delivered or deadline; stop and join; print lateness.
 * When broker_pid > 0, also the broker's CPU use from drain_start_us
 * (monotonic; the first due time) to the last delivery. */
static void consumers_finish(consumers_t *g, long target, int deadline_ms, const char *title, const char *result_key,
                             pid_t broker_pid, uint64_t drain_start_us)
{
    uint64_t end = tu_now_mono_us() + (uint64_t)deadline_ms * 1000;
    double cpu0 = -1;
    uint64_t t0 = 0;
    if (broker_pid > 0) {
        while (tu_now_mono_us() < drain_start_us)
            sleep_us(1000);
        cpu0 = tu_proc_cpu_secs(broker_pid);
        t0 = tu_now_mono_us();
    }
    while (__atomic_load_n(&g->shared, __ATOMIC_SEQ_CST) < target && tu_now_mono_us() < end)
        sleep_us(broker_pid > 0 ? 2000 : 10000);
    if (cpu0 >= 0) {
        double cpu1 = tu_proc_cpu_secs(broker_pid), wall = (double)(tu_now_mono_us() - t0) / 1e6;
        printf("  drain from the first due time: %.2f s wall, broker CPU %.2f s (%.0f%% of one core)\n", wall,
               cpu1 - cpu0, wall > 0 ? 100.0 * (cpu1 - cpu0) / wall : 0);
    }
    __atomic_store_n(&g->stop, 1, __ATOMIC_SEQ_CST);
    long n = 0, pulls = 0;
    for (int i = 0; i < CONSUMERS; i++) {
        pthread_join(g->th[i], NULL);
        n += g->cs[i].n;
        pulls += g->cs[i].pulls;
        if (g->cs[i].err[0]) {
            fprintf(stderr, "hourglass-bench: consumer %d: %s\n", i, g->cs[i].err);
            broken = 1;
        }
    }
    int64_t *all = malloc(sizeof(int64_t) * (size_t)(n > 0 ? n : 1));
    long k = 0;
    for (int i = 0; i < CONSUMERS; i++) {
        memcpy(all + k, g->cs[i].late_us, sizeof(int64_t) * (size_t)g->cs[i].n);
        k += g->cs[i].n;
        free(g->cs[i].late_us);
    }
    qsort(all, (size_t)n, sizeof *all, cmp_i64);
    long early = 0;
    for (long i = 0; i < n && all[i] < -1000; i++) /* more than 1 ms early (due_ms is truncated) */
        early++;
    printf("  delivered %ld of %ld (%ld PULLs by %d consumers)\n", n, target, pulls, CONSUMERS);
    printf("  lateness (PULL reply received - due_ms): min %.1f ms, p50 %.1f ms, p99 %.1f ms, p99.9 %.1f ms, "
           "p100 %.1f ms\n",
           n ? (double)all[0] / 1000 : 0, (double)quantile(all, (size_t)n, 0.5) / 1000,
           (double)quantile(all, (size_t)n, 0.99) / 1000, (double)quantile(all, (size_t)n, 0.999) / 1000,
           n ? (double)all[n - 1] / 1000 : 0);
    if (early > 0)
        printf("  WARNING: %ld messages arrived more than 1 ms before due_ms\n", early);
    if (n < target) {
        printf("  WARNING: %ld messages not delivered within the deadline\n", target - n);
        broken = 1;
    }
    printf("RESULT %s_n=%ld %s_p50_ms=%.1f %s_p99_ms=%.1f %s_p100_ms=%.1f\n\n", result_key, n, result_key,
           (double)quantile(all, (size_t)n, 0.5) / 1000, result_key, (double)quantile(all, (size_t)n, 0.99) / 1000,
           result_key, n ? (double)all[n - 1] / 1000 : 0);
    (void)title;
    free(all);
}

static void part_delivery(void)
{
    bp_broker_t b;
    start_broker(&b, NULL);
    printf("====== delivery: %ld messages, 5 s delay (LEVEL 2), %d consumers PULL COUNT %s + ACK ======\n",
           opt.delivery_n, CONSUMERS, opt.pull_count);
    consumers_t g;
    consumers_start(&g, b.port, opt.delivery_n);
    uint64_t sent_at = tu_now_mono_us();
    send_result_t s = run_send(b.port, CMD_SEND, opt.delivery_n, "lat", "2");
    printf("  sent in %.2f s (%.0f msg/s, %d clients, pipeline %d)\n", s.secs, s.rate, opt.clients, opt.pipeline);
    consumers_finish(&g, opt.delivery_n, (int)(s.secs * 1000) + 5000 + 120000, "delivery", "delivery", b.pid,
                     sent_at + 5000000);
    char p99[32];
    info_value(b.port, "lateness_p99_ms", p99, sizeof p99);
    if (p99[0])
        printf("  broker INFO lateness_p99_ms:%s (due -> leased, broker side)\n\n", p99);
    bp_destroy(&b);
}

/* ---- steady rate ----------------------------------------------------------------- */

#define STEADY_PRODUCERS 2
#define TICK_US          10000

typedef struct pacer {
    int port;
    int random_ms; /* 1: SEND DELAY <1..9999>ms instead of LEVEL 1 */
    unsigned seed;
    long per_tick; /* messages per 10 ms tick for this producer */
    long ticks;
    long sent;
    uint64_t t0;
    int64_t max_behind_us;
    char err[300];
} pacer_t;

static void *pacer_main(void *arg)
{
    pacer_t *p = arg;
    rc_conn_t c;
    if (rc_connect(&c, "127.0.0.1", p->port, 30000) != 0) {
        snprintf(p->err, sizeof p->err, "connect: %s", c.err);
        return NULL;
    }
    char payload[PAYLOAD_BYTES + 1];
    memset(payload, 's', PAYLOAD_BYTES);
    payload[PAYLOAD_BYTES] = '\0';
    for (long t = 0; t < p->ticks; t++) {
        uint64_t at = p->t0 + (uint64_t)t * TICK_US;
        uint64_t now = tu_now_mono_us();
        if (now < at)
            sleep_us(at - now);
        else if ((int64_t)(now - at) > p->max_behind_us)
            p->max_behind_us = (int64_t)(now - at);
        for (long i = 0; i < p->per_tick; i++) {
            if (p->random_ms) {
                char d[24];
                snprintf(d, sizeof d, "%dms", 1 + (int)(rand_r(&p->seed) % 9999));
                rc_appendl(&c, "SEND", "lat", payload, "DELAY", d, NULL);
            } else {
                rc_appendl(&c, "SEND", "lat", payload, "LEVEL", "1", NULL);
            }
        }
        if (rc_flush(&c, 30000) != 0) {
            snprintf(p->err, sizeof p->err, "write: %s", c.err);
            break;
        }
        for (long i = 0; i < p->per_tick; i++) {
            resp_reply_t *r = rc_read(&c, 30000);
            if (r == NULL || r->type != RESP_REPLY_BULK) {
                char d[300];
                snprintf(p->err, sizeof p->err, "SEND: %s", r == NULL ? c.err : rc_describe(r, d, sizeof d));
                resp_reply_free(r);
                rc_close(&c);
                return NULL;
            }
            resp_reply_free(r);
            p->sent++;
        }
    }
    rc_close(&c);
    return NULL;
}

/* random_ms 0: LEVEL 1 (the "steady" part); 1: DELAY of a random 1..9999 ms
 * ("steady-ms": exact due times, most of them a level chain ending in a
 * remainder hop; lateness is measured against the exact due time). */
static void part_steady(int random_ms)
{
    bp_broker_t b;
    start_broker(&b, NULL);
    long ticks = (long)opt.steady_secs * 1000000 / TICK_US;
    long per_tick = opt.steady_rate / (1000000 / TICK_US) / STEADY_PRODUCERS;
    if (per_tick < 1)
        per_tick = 1;
    long total = per_tick * STEADY_PRODUCERS * ticks;
    printf("====== %s: %ld msg/s of %s for %d s, %d producers, %d consumers ======\n",
           random_ms ? "steady-ms" : "steady", per_tick * STEADY_PRODUCERS * (1000000 / TICK_US),
           random_ms ? "DELAY <random 1..9999>ms" : "LEVEL 1 (1 s)", opt.steady_secs, STEADY_PRODUCERS, CONSUMERS);
    consumers_t g;
    consumers_start(&g, b.port, total);
    pacer_t p[STEADY_PRODUCERS];
    pthread_t th[STEADY_PRODUCERS];
    uint64_t t0 = tu_now_mono_us() + 20000;
    for (int i = 0; i < STEADY_PRODUCERS; i++) {
        memset(&p[i], 0, sizeof p[i]);
        p[i].port = b.port;
        p[i].random_ms = random_ms;
        p[i].seed = 12345u + (unsigned)i;
        p[i].per_tick = per_tick;
        p[i].ticks = ticks;
        p[i].t0 = t0 + (uint64_t)i * (TICK_US / STEADY_PRODUCERS); /* interleave the producers */
        pthread_create(&th[i], NULL, pacer_main, &p[i]);
    }
    long sent = 0;
    int64_t behind = 0;
    for (int i = 0; i < STEADY_PRODUCERS; i++) {
        pthread_join(th[i], NULL);
        sent += p[i].sent;
        if (p[i].max_behind_us > behind)
            behind = p[i].max_behind_us;
        if (p[i].err[0]) {
            fprintf(stderr, "hourglass-bench: producer %d: %s\n", i, p[i].err);
            broken = 1;
        }
    }
    double secs = (double)(tu_now_mono_us() - t0) / 1e6;
    printf("  sent %ld in %.2f s (%.0f msg/s achieved; the pacer fell behind its schedule by at most %.1f ms)\n", sent,
           secs, (double)sent / secs, (double)behind / 1000);
    consumers_finish(&g, sent, 60000, random_ms ? "steady-ms" : "steady", random_ms ? "steady_ms" : "steady", 0, 0);
    char p99[32];
    info_value(b.port, "lateness_p99_ms", p99, sizeof p99);
    if (p99[0])
        printf("  broker INFO lateness_p99_ms:%s\n\n", p99);
    bp_destroy(&b);
}

/* ---- send and deliver at once ---------------------------------------------------- */

#define MIXED_DELAY_MS      5000
#define MIXED_LATE_CAP      4000000 /* lateness samples kept per consumer */
#define MIXED_RUNS_MAX      15      /* --mixed-runs */
#define MIXED_WARM_SECS_MAX 300     /* --mixed-warm-log */

typedef struct mixed_producer {
    int port, index;
    cmd_kind_t kind;       /* CMD_SEND: SEND ... DELAY 5s; CMD_ZADD: ZADD hgmixed <due ms> <member> */
    uint64_t start_us;     /* when producing starts */
    uint64_t mark_us;      /* the first due time: deliveries start here */
    uint64_t due_limit_ms; /* wall ms when producing stops: what is due by then "came due" */
    uint64_t end_us;       /* stop producing */
    uint64_t batch_us;     /* 0: as fast as replies come; else one pipeline batch per batch_us (paced) */
    long sent, sent_at_mark;
    /* sent with a due time by due_limit_ms, taking the wall clock before the
     * batch went + the delay (the broker's is that or later): every message
     * a consumer counts as due by then is among them */
    long sent_due;
    uint64_t max_behind_us; /* paced: how far the batches fell behind their schedule */
    pthread_barrier_t *go;
    char err[300];
} mixed_producer_t;

static void *mixed_producer_main(void *arg)
{
    mixed_producer_t *p = arg;
    rc_conn_t c;
    int connected = rc_connect(&c, "127.0.0.1", p->port, 30000) == 0;
    if (!connected)
        snprintf(p->err, sizeof p->err, "connect: %s", c.err);
    pthread_barrier_wait(p->go);
    if (!connected)
        return NULL;
    char payload[PAYLOAD_BYTES + 1];
    memset(payload, 'm', PAYLOAD_BYTES);
    payload[PAYLOAD_BYTES] = '\0';
    int marked = 0;
    long seq = 0;
    for (uint64_t batch = 0; tu_now_mono_us() < p->end_us; batch++) {
        if (p->batch_us > 0) { /* paced: batch k at start + k batch_us */
            uint64_t at = p->start_us + batch * p->batch_us, now = tu_now_mono_us();
            if (at > now)
                sleep_us(at - now);
            else if (now - at > p->max_behind_us)
                p->max_behind_us = now - at;
            if (at >= p->end_us)
                break;
        }
        uint64_t due_ms = wall_us() / 1000 + MIXED_DELAY_MS; /* the broker's: this or a little later */
        for (int i = 0; i < opt.pipeline; i++, seq++) {
            if (p->kind == CMD_SEND) {
                rc_appendl(&c, "SEND", "lat", payload, "DELAY", "5s", NULL);
            } else {
                char score[24], member[PAYLOAD_BYTES + 1];
                snprintf(score, sizeof score, "%" PRIu64, due_ms);
                int m = snprintf(member, sizeof member, "m:%d:%ld:", p->index, seq);
                memset(member + m, 'x', (size_t)(PAYLOAD_BYTES - m));
                member[PAYLOAD_BYTES] = '\0';
                rc_appendl(&c, "ZADD", "hgmixed", score, member, NULL);
            }
        }
        if (rc_flush(&c, 60000) != 0) {
            snprintf(p->err, sizeof p->err, "write: %s", c.err);
            break;
        }
        for (int i = 0; i < opt.pipeline; i++) {
            resp_reply_t *r = rc_read(&c, 60000);
            if (r == NULL || r->type == RESP_REPLY_ERROR) {
                char d[300];
                snprintf(p->err, sizeof p->err, "reply: %s", r == NULL ? c.err : rc_describe(r, d, sizeof d));
                resp_reply_free(r);
                rc_close(&c);
                return NULL;
            }
            resp_reply_free(r);
        }
        p->sent += opt.pipeline;
        if (due_ms <= p->due_limit_ms)
            p->sent_due += opt.pipeline;
        if (!marked && tu_now_mono_us() >= p->mark_us) {
            p->sent_at_mark = p->sent;
            marked = 1;
        }
    }
    rc_close(&c);
    return NULL;
}

/* Redis's consumer loop: ZRANGEBYSCORE hgmixed -inf <now> WITHSCORES LIMIT 0
 * COUNT, then ZREM of what it got (what ZREM removed is delivered: with two
 * consumers the same member can be read twice, only one removes it); a short
 * sleep when nothing is due (a sorted set has no blocking read by score). */
static void *redis_consumer_main(void *arg)
{
    consumer_t *cs = arg;
    rc_conn_t c;
    if (rc_connect(&c, "127.0.0.1", cs->port, 30000) != 0) {
        snprintf(cs->err, sizeof cs->err, "connect: %s", c.err);
        return NULL;
    }
    static __thread const char *argv[2 + 1000];
    static __thread char members[1000][PAYLOAD_BYTES + 1];
    long due_by_limit = 0;
    while (!__atomic_load_n(cs->stop, __ATOMIC_SEQ_CST)) {
        char now[24];
        snprintf(now, sizeof now, "%" PRIu64, wall_us() / 1000);
        rc_appendl(&c, "ZRANGEBYSCORE", "hgmixed", "-inf", now, "WITHSCORES", "LIMIT", "0", opt.pull_count, NULL);
        resp_reply_t *r = rc_flush(&c, 30000) == 0 ? rc_read(&c, 30000) : NULL;
        uint64_t recv = wall_us();
        if (r == NULL || r->type != RESP_REPLY_ARRAY) {
            char d[300];
            snprintf(cs->err, sizeof cs->err, "ZRANGEBYSCORE: %s", r == NULL ? c.err : rc_describe(r, d, sizeof d));
            resp_reply_free(r);
            break;
        }
        cs->pulls++;
        size_t k = r->count / 2;
        if (k == 0) {
            resp_reply_free(r);
            sleep_us(2000);
            continue;
        }
        argv[0] = "ZREM";
        argv[1] = "hgmixed";
        for (size_t i = 0; i < k && i < 1000; i++) {
            const resp_reply_t *m = &r->elements[2 * i], *score = &r->elements[2 * i + 1];
            snprintf(members[i], sizeof members[i], "%.*s", (int)m->len, m->str);
            argv[2 + i] = members[i];
            uint64_t due_ms = strtoull(score->str, NULL, 10);
            if (cs->n < cs->cap)
                cs->late_us[cs->n++] = (int64_t)recv - (int64_t)(due_ms * 1000);
            due_by_limit += due_ms <= cs->due_limit_ms;
        }
        resp_reply_free(r);
        rc_append(&c, 2 + (int)k, argv, NULL);
        resp_reply_t *z = rc_flush(&c, 30000) == 0 ? rc_read(&c, 30000) : NULL;
        long long removed = 0;
        if (rc_int(z, &removed) != 0) {
            snprintf(cs->err, sizeof cs->err, "ZREM: %s", z == NULL ? c.err : "not an integer");
            resp_reply_free(z);
            break;
        }
        resp_reply_free(z);
        __atomic_add_fetch(cs->shared, (long)removed, __ATOMIC_SEQ_CST);
        /* members the other consumer removed first are counted there: of
         * what this one removed, at least this many were due by the limit */
        due_by_limit -= (long)k - (long)removed;
        if (due_by_limit < 0)
            due_by_limit = 0;
        count_due(cs, &due_by_limit);
    }
    rc_close(&c);
    return NULL;
}

#define SUSTAIN_LATE_MS   1000.0 /* a kept-up rate's p99 lateness, and how long the producers may fall behind */
#define SUSTAIN_DELIVERED 0.99   /* a kept-up rate's share of what came due delivered */

typedef struct mixed_result {
    double rate, overlap_rate; /* producer msg/s: whole run, while deliveries ran */
    long sent, delivered;
    long came_due; /* sent with a due time by the time the producers stopped */
    long
        delivered_due; /* of those, delivered before the consumers stopped (at a fixed rate: up to SUSTAIN_LATE_MS after the producers) */
    double late_p50_ms, late_p99_ms;
    uint64_t max_behind_us; /* paced producers: the most a batch fell behind its schedule */
} mixed_result_t;

/* 8 producers (opt.clients, pipeline opt.pipeline) for secs seconds beside 2
 * consumers, against the broker (CMD_SEND) or redis-server (CMD_ZADD); rate 0:
 * each producer as fast as replies come, else all of them together at rate
 * msg/s (paced in pipeline batches). */
static mixed_result_t run_mixed(int port, cmd_kind_t kind, int secs, long rate)
{
    uint64_t t0 = tu_now_mono_us(), wall0_ms = wall_us() / 1000;
    consumers_t g;
    memset(&g, 0, sizeof g);
    for (int i = 0; i < CONSUMERS; i++) {
        consumer_t *c = &g.cs[i];
        c->port = port;
        c->target = LONG_MAX;
        c->shared = &g.shared;
        c->due_limit_ms = wall0_ms + (uint64_t)secs * 1000;
        c->shared_due = &g.shared_due;
        c->stop = &g.stop;
        c->cap = MIXED_LATE_CAP;
        c->late_us = malloc(sizeof(int64_t) * (size_t)c->cap);
        if (c->late_us == NULL)
            tu_die(PROGRAM, "out of memory");
        pthread_create(&g.th[i], NULL, kind == CMD_SEND ? consumer_main : redis_consumer_main, c);
    }
    mixed_producer_t p[MAX_CLIENTS];
    pthread_t th[MAX_CLIENTS];
    pthread_barrier_t go;
    pthread_barrier_init(&go, NULL, (unsigned)opt.clients + 1);
    for (int i = 0; i < opt.clients; i++) {
        memset(&p[i], 0, sizeof p[i]);
        p[i].port = port;
        p[i].index = i;
        p[i].kind = kind;
        p[i].start_us = t0;
        p[i].mark_us = t0 + MIXED_DELAY_MS * 1000;
        p[i].end_us = t0 + (uint64_t)secs * 1000000;
        p[i].due_limit_ms = wall0_ms + (uint64_t)secs * 1000;
        p[i].batch_us = rate > 0 ? (uint64_t)((double)opt.pipeline * opt.clients * 1e6 / (double)rate) : 0;
        p[i].go = &go;
        pthread_create(&th[i], NULL, mixed_producer_main, &p[i]);
    }
    pthread_barrier_wait(&go);
    mixed_result_t res = { 0 };
    long at_mark = 0;
    for (int i = 0; i < opt.clients; i++) {
        pthread_join(th[i], NULL);
        res.sent += p[i].sent;
        at_mark += p[i].sent_at_mark;
        res.came_due += p[i].sent_due;
        if (p[i].max_behind_us > res.max_behind_us)
            res.max_behind_us = p[i].max_behind_us;
        if (p[i].err[0]) {
            fprintf(stderr, "hourglass-bench: producer %d: %s\n", i, p[i].err);
            broken = 1;
        }
    }
    uint64_t t1 = tu_now_mono_us();
    /* At a fixed rate, what came due in the run's last moments gets the
     * lateness a kept-up rate allows to be delivered (both servers alike):
     * stopping the consumers at once made a 100 ms hiccup at the very end
     * count as a rate not kept up, where the bound is 1 s. */
    if (rate > 0) {
        uint64_t grace_end = t1 + (uint64_t)(SUSTAIN_LATE_MS * 1000);
        while (__atomic_load_n(&g.shared_due, __ATOMIC_SEQ_CST) < res.came_due && tu_now_mono_us() < grace_end)
            sleep_us(1000);
    }
    res.delivered = __atomic_load_n(&g.shared, __ATOMIC_SEQ_CST);
    __atomic_store_n(&g.stop, 1, __ATOMIC_SEQ_CST);
    long n = 0;
    for (int i = 0; i < CONSUMERS; i++) {
        pthread_join(g.th[i], NULL);
        n += g.cs[i].n;
        if (g.cs[i].err[0]) {
            fprintf(stderr, "hourglass-bench: consumer %d: %s\n", i, g.cs[i].err);
            broken = 1;
        }
    }
    res.delivered_due = __atomic_load_n(&g.shared_due, __ATOMIC_SEQ_CST);
    pthread_barrier_destroy(&go);
    int64_t *all = malloc(sizeof(int64_t) * (size_t)(n > 0 ? n : 1));
    long k = 0;
    for (int i = 0; i < CONSUMERS; i++) {
        memcpy(all + k, g.cs[i].late_us, sizeof(int64_t) * (size_t)g.cs[i].n);
        k += g.cs[i].n;
        free(g.cs[i].late_us);
    }
    qsort(all, (size_t)n, sizeof *all, cmp_i64);
    res.late_p50_ms = (double)quantile(all, (size_t)n, 0.5) / 1000;
    res.late_p99_ms = (double)quantile(all, (size_t)n, 0.99) / 1000;
    free(all);
    double secs_all = (double)(t1 - t0) / 1e6, secs_overlap = (double)(t1 - (t0 + MIXED_DELAY_MS * 1000)) / 1e6;
    res.rate = (double)res.sent / secs_all;
    res.overlap_rate = secs_overlap > 0 ? (double)(res.sent - at_mark) / secs_overlap : 0;
    return res;
}

static void print_mixed(const char *title, const mixed_result_t *r)
{
    printf("  %-44s producers %8.0f msg/s (%8.0f msg/s while delivering), %ld sent, %ld delivered,"
           " lateness p50 %.1f ms p99 %.1f ms\n",
           title, r->rate, r->overlap_rate, r->sent, r->delivered, r->late_p50_ms, r->late_p99_ms);
}

/* Empty the server at port (--zadd-port, --ceiling-port, --floor-port) of the
 * last mixed run's messages: FLUSHALL, which hourglass-floor serves too. */
static void mixed_reset(int port)
{
    rc_conn_t c;
    if (rc_connect(&c, "127.0.0.1", port, 30000) != 0)
        tu_die(PROGRAM, "the server on port %d: %s", port, c.err);
    resp_reply_t *d = rc_cmd(&c, "FLUSHALL", NULL);
    resp_reply_free(d);
    rc_close(&c);
}

/* hourglass-floor's INFO counters (bench/floor_server.c). */
typedef struct floor_stats {
    double records, fsyncs, fsync_ms, cpu_secs;
} floor_stats_t;

static floor_stats_t floor_stats(int port)
{
    const char *keys[] = { "records", "fsyncs", "fsync_total_ms", "used_cpu_secs" };
    double v[4];
    for (int i = 0; i < 4; i++) {
        char buf[64];
        info_value(port, keys[i], buf, sizeof buf);
        if (buf[0] == '\0')
            tu_die(PROGRAM, "hourglass-floor on port %d: INFO has no '%s'", port, keys[i]);
        v[i] = strtod(buf, NULL);
    }
    return (floor_stats_t){ v[0], v[1], v[2], v[3] };
}

/* The broker's log-fsync histogram at one moment (GET /metrics,
 * hourglass_fsync_seconds): the syncs, their seconds, and each bucket's upper
 * bound (INFINITY for +Inf) with its cumulative count. */
#define FSYNC_BUCKETS_MAX 32
#define FSYNC_LONG_SECS   0.005 /* a log fsync "over 5 ms": the tail s51 attributed (docs/BENCH-broker.md) */
typedef struct fsync_hist {
    int buckets;
    double le[FSYNC_BUCKETS_MAX], cumulative[FSYNC_BUCKETS_MAX];
    double count, secs;
} fsync_hist_t;

static fsync_hist_t fsync_hist(int metrics_port)
{
    enum {
        PAGE_BYTES = 1 << 18
    };
    fsync_hist_t h = { 0 };
    char *page = malloc(PAGE_BYTES);
    if (page == NULL)
        abort();
    if (tu_http_get(metrics_port, "/metrics", page, PAGE_BYTES) != 200)
        tu_die(PROGRAM, "the broker's /metrics on port %d did not answer", metrics_port);
    for (char *line = page, *next; line != NULL; line = next) {
        next = strchr(line, '\n');
        if (next != NULL)
            *next++ = '\0';
        char le[32];
        double v;
        if (sscanf(line, "hourglass_fsync_seconds_bucket{le=\"%31[^\"]\"} %lf", le, &v) == 2) {
            if (h.buckets < FSYNC_BUCKETS_MAX) {
                h.le[h.buckets] = strcmp(le, "+Inf") == 0 ? INFINITY : strtod(le, NULL);
                h.cumulative[h.buckets++] = v;
            }
        } else if (sscanf(line, "hourglass_fsync_seconds_sum %lf", &v) == 1) {
            h.secs = v;
        } else if (sscanf(line, "hourglass_fsync_seconds_count %lf", &v) == 1) {
            h.count = v;
        }
    }
    free(page);
    return h;
}

/* The log fsyncs over FSYNC_LONG_SECS between two readings of one broker,
 * and the share of the fsync time they held. The histogram only bounds that
 * share: at least each long sync at its bucket's lower bound; at most each at
 * its upper bound, and at most the time the shorter syncs leave (each of them
 * at its bucket's lower bound). */
static void print_fsync_tail(const fsync_hist_t *before, const fsync_hist_t *after)
{
    double syncs = after->count - before->count, secs = after->secs - before->secs;
    double long_syncs = 0, long_min = 0, long_max = 0, short_min = 0, lower = 0, below = 0;
    for (int i = 0; i < after->buckets && i < before->buckets; i++) {
        double upto = after->cumulative[i] - before->cumulative[i], in = upto - below;
        if (lower >= FSYNC_LONG_SECS) {
            long_syncs += in;
            long_min += in * lower;
            if (in > 0)
                long_max += in * after->le[i]; /* INFINITY once a sync is in +Inf's bucket */
        } else {
            short_min += in * lower;
        }
        below = upto;
        lower = after->le[i];
    }
    printf("  log fsyncs over %.0f ms: %.0f of %.0f (%.1f%%), holding %.0f-%.0f%% of the %.2f s in fsync\n",
           FSYNC_LONG_SECS * 1000, long_syncs, syncs, syncs > 0 ? 100 * long_syncs / syncs : 0,
           secs > 0 ? 100 * long_min / secs : 0,
           secs > 0 ? 100 * (long_max < secs - short_min ? long_max : secs - short_min) / secs : 0, secs);
}

/* The median of n rates (sorts them). */
static double median_of(double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

/* One row of the flood summary: the median, then the range, of n runs' figures. */
static void print_flood_row(const char *who, const char *what, const char *unit, double *v, int n, double *median)
{
    *median = median_of(v, n);
    printf("  %-10s %-26s median %8.0f %s, range %8.0f .. %8.0f over %d runs\n", who, what, *median, unit, v[0],
           v[n - 1], n);
}

/* ---- the flood on a warmed log (--mixed-warm-log) ----------------------------------- */

#define WARM_DRAIN_MS 120000 /* the warm-up's messages consumed and its segments recycled: generous */
#define WARM_SETTLED_MS \
    10000 /* the spares' count unchanged this long, checkpoints running: recycled (a sanitizer build is slower) */
#define WARM_POLL_US 100000

/* The commit log's segment files in the broker's data directory
 * (clog-<base>.seg): the log only adds or renames them, so a file more after
 * a run is a segment whose zeros were written during it. */
static long log_segment_files(const bp_broker_t *b)
{
    DIR *d = opendir(b->data_dir);
    if (d == NULL)
        tu_die(PROGRAM, "%s: %s", b->data_dir, strerror(errno));
    long n = 0;
    for (struct dirent *e; (e = readdir(d)) != NULL;) {
        size_t len = strlen(e->d_name);
        n += strncmp(e->d_name, "clog-", 5) == 0 && len > 9 && strcmp(e->d_name + len - 4, ".seg") == 0;
    }
    closedir(d);
    return n;
}

/* An INFO field of the broker c is connected to, as a number (dies when it
 * has none). */
static long long info_number(rc_conn_t *c, const char *key)
{
    char buf[64], err[256];
    if (bp_info_field(c, key, buf, sizeof buf, err, sizeof err) != 0)
        tu_die(PROGRAM, "INFO %s: %s", key, err);
    return atoll(buf);
}

/* The steady state of a broker that ran the flood before: the same flood for
 * opt.mixed_warm_secs; then its consumers go on until nothing is delayed or
 * ready, and the log's recycling turns the consumed segments into spares
 * (INFO log_spare_segments) until every segment file but the one in use is a
 * spare or the count has not moved for WARM_SETTLED_MS. Recycling follows a
 * checkpoint, and a checkpoint follows applied writes: an idle broker takes
 * none, so one SEND a poll (no delay, to the flood's topic, consumed with the
 * rest) keeps them coming, as any traffic would. Nothing of this is in the
 * measured figures. Returns the spares waiting when it ends. */
static long long warm_log(const bp_broker_t *b)
{
    printf("  warming the log: the same flood for %d s, then drained and its segments recycled (not measured)\n",
           opt.mixed_warm_secs);
    fflush(stdout);
    uint64_t t0 = tu_now_mono_us();
    mixed_result_t w = run_mixed(b->port, CMD_SEND, opt.mixed_warm_secs, 0);
    uint64_t t1 = tu_now_mono_us(), drained = 0, changed = t1, end = t1 + (uint64_t)WARM_DRAIN_MS * 1000;
    consumers_t g;
    consumers_start(&g, b->port, w.sent + WARM_DRAIN_MS * 1000 / WARM_POLL_US); /* more than is left: stopped below */
    rc_conn_t c;
    if (rc_connect(&c, "127.0.0.1", b->port, 30000) != 0)
        tu_die(PROGRAM, "warming the log: connect: %s", c.err);
    long long spares = -1, files = 0;
    while (tu_now_mono_us() < end) {
        resp_reply_t *r = rc_cmd(&c, "SEND", "lat", "warm", NULL);
        if (r == NULL || r->type != RESP_REPLY_BULK)
            tu_die(PROGRAM, "warming the log: SEND: %s", r == NULL ? c.err : "not an id");
        resp_reply_free(r);
        sleep_us(WARM_POLL_US);
        long long now = info_number(&c, "log_spare_segments");
        files = log_segment_files(b);
        if (now != spares)
            spares = now, changed = tu_now_mono_us();
        if (drained == 0 && info_number(&c, "delayed_messages") + info_number(&c, "ready") == 0)
            drained = tu_now_mono_us();
        if (drained != 0 && (spares >= files - 1 || tu_now_mono_us() - changed >= (uint64_t)WARM_SETTLED_MS * 1000))
            break;
    }
    rc_close(&c);
    __atomic_store_n(&g.stop, 1, __ATOMIC_SEQ_CST);
    for (int i = 0; i < CONSUMERS; i++) {
        pthread_join(g.th[i], NULL);
        free(g.cs[i].late_us);
        if (g.cs[i].err[0]) {
            fprintf(stderr, "hourglass-bench: warm-up consumer %d: %s\n", i, g.cs[i].err);
            broken = 1;
        }
    }
    if (drained == 0)
        tu_die(PROGRAM, "warming the log: messages still delayed or ready after %d s", WARM_DRAIN_MS / 1000);
    printf("  warm-up: %ld sent in %.1f s (%ld delivered meanwhile), the rest consumed in %.1f s, the last spare "
           "%.1f s after the flood: %lld segment files, %lld spare\n",
           w.sent, (double)(t1 - t0) / 1e6, w.delivered, (double)(drained - t1) / 1e6, (double)(changed - t1) / 1e6,
           files, spares);
    fflush(stdout);
    return spares;
}

/* Producers and consumers together, as in production: opt.clients producer
 * connections (pipeline opt.pipeline, 64-byte payloads, DELAY 5s) for
 * mixed_secs while 2 consumers PULL COUNT 100 + ACK; with --zadd-port the
 * same against that redis-server (ZADD with the due time as score, a
 * ZRANGEBYSCORE/ZREM consumer loop). The flood's figures swing by 2-3x
 * from one run to the next on the same code (when LevelDB's compactions
 * fall, what else the 2 cores run), so it runs opt.mixed_runs times, the
 * two servers taking turns, and the RESULT line carries the medians.
 * With --ceiling-port a redis-server without persistence takes a third
 * turn: what one RESP thread does with this workload and these clients on
 * the same cores when nothing is written to disk, the ceiling the durable
 * figures are read against. With --floor-port hourglass-floor takes a fourth:
 * append + fdatasync per loop pass and nothing else, the least any durable
 * single-loop design must do here, so a bound on its rate with these clients
 * and cores (bench/floor_server.c). Each hourglass run also prints its log's
 * fsyncs: count and p99 (INFO), and how many took over 5 ms and the share of
 * the fsync time they held (/metrics, read before and after the run), and its
 * log's segment files. With --mixed-warm-log the broker's log is warmed first
 * (warm_log): the run starts on recycled spares, as after this load ran before. */
static void part_mixed(void)
{
    int secs = opt.quick ? 8 : 15, runs = opt.quick ? 1 : opt.mixed_runs;
    printf("====== mixed: send and deliver at once: %d producers (pipeline %d, %d-byte payloads, DELAY 5s) for %d s,"
           " %d consumers; %d run%s each, taking turns ======\n",
           opt.clients, opt.pipeline, PAYLOAD_BYTES, secs, CONSUMERS, runs, runs == 1 ? "" : "s");
    double h_rate[MIXED_RUNS_MAX], h_overlap[MIXED_RUNS_MAX], r_rate[MIXED_RUNS_MAX], r_overlap[MIXED_RUNS_MAX];
    double h_delivered[MIXED_RUNS_MAX], r_delivered[MIXED_RUNS_MAX];
    double c_overlap[MIXED_RUNS_MAX], c_delivered[MIXED_RUNS_MAX];
    double f_overlap[MIXED_RUNS_MAX], f_delivered[MIXED_RUNS_MAX];
    for (int run = 0; run < runs; run++) {
        printf(" run %d of %d\n", run + 1, runs);
        bp_broker_t b;
        start_broker(&b, NULL);
        long long spares = opt.mixed_warm_secs > 0 ? warm_log(&b) : -1;
        long files0 = log_segment_files(&b);
        double cpu0 = tu_proc_cpu_secs(b.pid);
        fsync_hist_t fsync0 = fsync_hist(b.metrics_port);
        mixed_result_t h = run_mixed(b.port, CMD_SEND, secs, 0);
        fsync_hist_t fsync1 = fsync_hist(b.metrics_port);
        double cpu1 = tu_proc_cpu_secs(b.pid);
        print_mixed(spares >= 0 ? "hourglass on a warmed log:" : "hourglass SEND DELAY 5s, PULL COUNT + ACK:", &h);
        long files1 = log_segment_files(&b);
        if (spares >= 0)
            printf("  log warmed: %lld spare segments when the flood began, %ld segment files; %ld new during the "
                   "flood (each a new segment's zeros)\n",
                   spares, files0, files1 - files0);
        else
            printf("  log cold: %ld segment files after the flood, all made since the broker started\n", files1);
        char fsyncs[32], fsync_p99[32];
        info_value(b.port, "fsyncs", fsyncs, sizeof fsyncs);
        info_value(b.port, "fsync_p99_ms", fsync_p99, sizeof fsync_p99);
        /* every SEND reply waits for an fdatasync of the log: with 8 x 128 SENDs in flight, the producers'
         * rate is at most 1024 per fsync */
        printf("  broker CPU %.0f%% of one core; %s fsyncs of its log, p99 %s ms%s\n",
               100.0 * (cpu1 - cpu0) / (double)secs, fsyncs, fsync_p99,
               spares >= 0 ? " (INFO: the warm-up's included)" : "");
        print_fsync_tail(&fsync0, &fsync1);
        bp_destroy(&b);
        h_rate[run] = h.rate, h_overlap[run] = h.overlap_rate, h_delivered[run] = (double)h.delivered;
        if (opt.zadd_port > 0) {
            mixed_reset(opt.zadd_port);
            mixed_result_t r = run_mixed(opt.zadd_port, CMD_ZADD, secs, 0);
            print_mixed("redis ZADD, ZRANGEBYSCORE + ZREM:", &r);
            r_rate[run] = r.rate, r_overlap[run] = r.overlap_rate, r_delivered[run] = (double)r.delivered;
        }
        if (opt.ceiling_port > 0) {
            mixed_reset(opt.ceiling_port);
            mixed_result_t c = run_mixed(opt.ceiling_port, CMD_ZADD, secs, 0);
            print_mixed("redis, no persistence (the ceiling):", &c);
            c_overlap[run] = c.overlap_rate, c_delivered[run] = (double)c.delivered;
        }
        if (opt.floor_port > 0) {
            mixed_reset(opt.floor_port);
            floor_stats_t s0 = floor_stats(opt.floor_port);
            mixed_result_t f = run_mixed(opt.floor_port, CMD_SEND, secs, 0);
            floor_stats_t s1 = floor_stats(opt.floor_port);
            print_mixed("floor: append + fdatasync per pass:", &f);
            double syncs = s1.fsyncs - s0.fsyncs;
            printf("  floor CPU %.0f%% of one core; %.0f fdatasyncs of its log, %.0f records each, %.2f ms each\n",
                   100.0 * (s1.cpu_secs - s0.cpu_secs) / (double)secs, syncs,
                   syncs > 0 ? (s1.records - s0.records) / syncs : 0,
                   syncs > 0 ? (s1.fsync_ms - s0.fsync_ms) / syncs : 0);
            f_overlap[run] = f.overlap_rate, f_delivered[run] = (double)f.delivered;
        }
        fflush(stdout);
    }
    double hm, hom, hdm, rm = 0, rom = 0, rdm = 0, com = 0, cdm = 0, fom = 0, fdm = 0;
    printf(" the %d run%s:\n", runs, runs == 1 ? "" : "s");
    print_flood_row("hourglass", "producers, whole run", "msg/s", h_rate, runs, &hm);
    print_flood_row("hourglass", "producers while delivering", "msg/s", h_overlap, runs, &hom);
    print_flood_row("hourglass", "delivered", "messages", h_delivered, runs, &hdm);
    if (opt.zadd_port > 0) {
        print_flood_row("redis", "producers, whole run", "msg/s", r_rate, runs, &rm);
        print_flood_row("redis", "producers while delivering", "msg/s", r_overlap, runs, &rom);
        print_flood_row("redis", "delivered", "messages", r_delivered, runs, &rdm);
        printf("  durable producer rate while delivering, medians: %.2f x Redis (whole run %.2f x);"
               " delivered %.1f x Redis\n",
               rom > 0 ? hom / rom : 0, rm > 0 ? hm / rm : 0, rdm > 0 ? hdm / rdm : 0);
    }
    if (opt.ceiling_port > 0) {
        print_flood_row("ceiling", "producers while delivering", "msg/s", c_overlap, runs, &com);
        print_flood_row("ceiling", "delivered", "messages", c_delivered, runs, &cdm);
        printf("  producer rate while delivering, medians: hourglass %.2f x the ceiling", com > 0 ? hom / com : 0);
        if (rom > 0)
            printf(", Redis appendfsync always %.2f x; 2 x Redis is %.2f x the ceiling", rom / com, 2 * rom / com);
        printf("\n");
    }
    if (opt.floor_port > 0) {
        print_flood_row("floor", "producers while delivering", "msg/s", f_overlap, runs, &fom);
        print_flood_row("floor", "delivered", "messages", f_delivered, runs, &fdm);
        printf("  producer rate while delivering, medians: hourglass %.2f x the floor", fom > 0 ? hom / fom : 0);
        if (rom > 0)
            printf(", the floor %.2f x Redis appendfsync always (goal 2 x)", fom / rom);
        printf("\n");
    }
    printf("RESULT mixed_hourglass_rps=%.0f mixed_hourglass_overlap_rps=%.0f mixed_redis_rps=%.0f "
           "mixed_redis_overlap_rps=%.0f mixed_ceiling_overlap_rps=%.0f mixed_floor_overlap_rps=%.0f\n\n",
           hm, hom, rm, rom, com, fom);
}

/* Kept up at a rate: (nearly) everything that came due during the run was
 * delivered (by SUSTAIN_LATE_MS after the producers stopped, run_mixed), with
 * lateness p99 within SUSTAIN_LATE_MS, and the producers held their schedule. */
static int kept_up(const mixed_result_t *r)
{
    return r->came_due > 0 && (double)r->delivered_due >= SUSTAIN_DELIVERED * (double)r->came_due &&
           r->late_p99_ms <= SUSTAIN_LATE_MS && r->max_behind_us <= SUSTAIN_LATE_MS * 1000;
}

static void print_sustain_row(const char *who, long rate, const mixed_result_t *r)
{
    printf("  %-9s %7ld msg/s: %8ld came due, %8ld delivered (%5.1f%%), lateness p50 %7.1f ms p99 %7.1f ms,"
           " producers behind by %6.1f ms at most: %s\n",
           who, rate, r->came_due, r->delivered_due,
           r->came_due > 0 ? 100.0 * (double)r->delivered_due / (double)r->came_due : 0, r->late_p50_ms, r->late_p99_ms,
           (double)r->max_behind_us / 1000, kept_up(r) ? "kept up" : "fell behind");
}

/* The mixed run at fixed producer rates (--sustain-rates), against the broker
 * and (--zadd-port) Redis in turn: the highest rate each one keeps up with —
 * what a shop sizing for a flash sale needs to know, where the mixed part
 * measures how much a flood of producers gets in. */
static void part_sustain(void)
{
    int secs = opt.quick ? 8 : 15;
    printf("====== sustain: the mixed run at fixed producer rates for %d s each (DELAY 5s, %d producers, %d consumers"
           " PULL COUNT %s); kept up = %.0f%% of what came due delivered, p99 lateness <= %.0f ms ======\n",
           secs, opt.clients, CONSUMERS, opt.pull_count, 100 * SUSTAIN_DELIVERED, SUSTAIN_LATE_MS);
    long best_h = 0, best_r = 0;
    for (const char *p = opt.sustain_rates; *p != '\0';) {
        long rate = atol(p);
        p += strcspn(p, ",");
        p += *p == ',';
        if (rate <= 0)
            tu_die(PROGRAM, "--sustain-rates: '%s' holds a rate that is not a positive number", opt.sustain_rates);
        bp_broker_t b;
        start_broker(&b, NULL);
        mixed_result_t h = run_mixed(b.port, CMD_SEND, secs, rate);
        bp_destroy(&b);
        print_sustain_row("hourglass", rate, &h);
        if (kept_up(&h) && rate > best_h)
            best_h = rate;
        if (opt.zadd_port > 0) {
            mixed_reset(opt.zadd_port);
            mixed_result_t r = run_mixed(opt.zadd_port, CMD_ZADD, secs, rate);
            print_sustain_row("redis", rate, &r);
            if (kept_up(&r) && rate > best_r)
                best_r = rate;
        }
        fflush(stdout);
    }
    printf("  highest rate kept up with: hourglass %ld msg/s", best_h);
    if (opt.zadd_port > 0)
        printf(", redis %ld msg/s", best_r);
    printf("\nRESULT sustain_hourglass_rps=%ld sustain_redis_rps=%ld\n\n", best_h, best_r);
}

/* ---- capacity ---------------------------------------------------------------------- */

static long long dir_bytes;
static int du_entry(const char *path, const struct stat *st, int flag, struct FTW *f)
{
    (void)path;
    (void)f;
    if (flag == FTW_F)
        dir_bytes += (long long)st->st_blocks * 512;
    return 0;
}

static long long du(const char *dir)
{
    dir_bytes = 0;
    nftw(dir, du_entry, 16, FTW_PHYS);
    return dir_bytes;
}

static long status_kib(pid_t pid, const char *key)
{
    char path[64], line[256];
    snprintf(path, sizeof path, "/proc/%d/status", (int)pid);
    FILE *f = fopen(path, "r");
    if (f == NULL)
        return -1;
    long v = -1;
    size_t kl = strlen(key);
    while (fgets(line, sizeof line, f) != NULL)
        if (strncmp(line, key, kl) == 0 && line[kl] == ':') {
            v = strtol(line + kl + 1, NULL, 10);
            break;
        }
    fclose(f);
    return v;
}

static int level_depth(int port, int level, uint64_t *depth, uint64_t *took_us)
{
    rc_conn_t c;
    char e[300];
    if (rc_connect(&c, "127.0.0.1", port, 30000) != 0)
        return -1;
    uint64_t t0 = tu_now_mono_us();
    int rc = bp_level(&c, level, NULL, depth, NULL, e, sizeof e);
    if (took_us != NULL)
        *took_us = tu_now_mono_us() - t0;
    rc_close(&c);
    return rc;
}

/* Poll PING every 1 ms from just after spawn: first answered request time. */
static int64_t restart_to_ping_us(bp_broker_t *b)
{
    char err[8192];
    uint64_t t0 = tu_now_mono_us();
    if (bp_spawn(b, err, sizeof err) != 0)
        tu_die(PROGRAM, "restart: %s", err);
    for (;;) {
        rc_conn_t c;
        if (rc_connect(&c, "127.0.0.1", b->port, 1000) == 0) {
            resp_reply_t *r = rc_cmd(&c, "PING", NULL);
            int ok = r != NULL && rc_str_eq(r, "PONG");
            resp_reply_free(r);
            rc_close(&c);
            if (ok)
                return (int64_t)(tu_now_mono_us() - t0);
        } else {
            rc_close(&c);
        }
        if (!bp_alive(b))
            tu_die(PROGRAM, "the broker exited during restart; see %s", b->log_path);
        if (tu_now_mono_us() - t0 > 300u * 1000000u)
            tu_die(PROGRAM, "the broker did not answer within 300 s of the restart");
        sleep_us(1000);
    }
}

static void part_capacity(void)
{
    const char *flags[] = { "--fsync", opt.capacity_fsync, NULL };
    bp_broker_t b;
    start_broker(&b, flags);
    printf("====== capacity: %ld messages pending at LEVEL 18 (2 h), fsync %s ======\n", opt.capacity_n,
           opt.capacity_fsync);
    long rss0 = status_kib(b.pid, "VmRSS");
    send_result_t s = run_send(b.port, CMD_SEND, opt.capacity_n, "cap", "18");
    printf("  filled in %.1f s (%.0f msg/s)\n", s.secs, s.rate);
    uint64_t depth = 0, took = 0;
    if (level_depth(b.port, 18, &depth, &took) != 0)
        tu_die(PROGRAM, "LEVELS failed after the fill");
    long rss = status_kib(b.pid, "VmRSS"), hwm = status_kib(b.pid, "VmHWM");
    printf("  LEVELS level 18 depth %" PRIu64 " (want %ld)\n", depth, opt.capacity_n);
    printf("  broker RSS: %.1f MiB at start, %.1f MiB after the fill, peak %.1f MiB (goal <= 100 MiB)\n",
           (double)rss0 / 1024, (double)rss / 1024, (double)hwm / 1024);
    printf("  data directory: %.1f MiB\n", (double)du(b.data_dir) / (1024 * 1024));
    if (depth != (uint64_t)opt.capacity_n)
        broken = 1;

    bp_kill9(&b);
    int64_t ping_us = restart_to_ping_us(&b);
    uint64_t depth2 = 0, took2 = 0;
    if (level_depth(b.port, 18, &depth2, &took2) != 0)
        tu_die(PROGRAM, "LEVELS failed after the restart");
    long rss2 = status_kib(b.pid, "VmRSS");
    printf("  kill -9, restart: first PING answered %.0f ms after exec (goal <= 1000 ms); "
           "LEVELS answered in %.1f ms: depth %" PRIu64 "\n",
           (double)ping_us / 1000, (double)took2 / 1000, depth2);
    printf("  broker RSS after the restart: %.1f MiB\n", (double)rss2 / 1024);
    if (depth2 != (uint64_t)opt.capacity_n)
        broken = 1;
    printf("RESULT capacity_n=%ld capacity_fill_rps=%.0f capacity_rss_mib=%.1f capacity_peak_rss_mib=%.1f "
           "capacity_restart_ms=%.0f capacity_depth_after_restart=%" PRIu64 " capacity_rss_after_restart_mib=%.1f\n\n",
           opt.capacity_n, s.rate, (double)rss / 1024, (double)hwm / 1024, (double)ping_us / 1000, depth2,
           (double)rss2 / 1024);
    bp_destroy(&b);
}

/* ---- main ------------------------------------------------------------------------------ */

static void usage(FILE *f)
{
    fprintf(f, "usage: hourglass-bench [--quick] [--only PART[,PART...]]\n"
               "                       (PART: send sendkey zadd delivery steady steady-ms mixed sustain capacity)\n"
               "                       [--capacity]\n"
               "                       [--zadd-port PORT] [--ceiling-port PORT] [--floor-port PORT]\n"
               "                       [--clients C] [--pipeline P] [-n N]\n"
               "                       [--delivery-n N] [--steady-rate R] [--steady-secs S]\n"
               "                       [--capacity-n N] [--capacity-fsync always|no] [--broker PATH]\n"
               "                       [--pull-count N] [--broker-flag ARG]... [--baseline-broker PATH]\n"
               "                       [--sustain-rates R,R,...] [--mixed-runs N] [--mixed-warm-log SECS]\n"
               "Prints figures; fails only when something is broken. Default broker: $HG_BROKER or\n"
               "the build dir's hourglass-broker. --capacity adds the long 10^7-message part.\n"
               "--broker-flag ARG adds ARG to every broker command line (repeat it: --broker-flag --fsync\n"
               "--broker-flag no); --pull-count sets the consumers' PULL COUNT (default 100).\n"
               "--sustain-rates: the producer rates (msg/s) of the sustain part (default\n"
               "40000,…,200000 in steps of 20000). --mixed-runs: the flood of the mixed part runs N times\n"
               "(1..15, default 3; 1 with --quick), hourglass and Redis taking turns; it prints each run,\n"
               "then the medians and ranges. --ceiling-port: a redis-server without persistence that takes\n"
               "a turn in each flood run, as the ceiling of one RESP thread on this workload. --floor-port:\n"
               "hourglass-floor (append + fdatasync per loop pass, nothing else) takes a turn too.\n"
               "--mixed-warm-log SECS: before each hourglass run of the mixed part, the same flood for SECS\n"
               "(1..300), its messages all consumed and its log segments recycled into spares, not measured:\n"
               "the run then starts on the log of a broker that ran the load before, whose segment switches\n"
               "take recycled spares instead of writing a new segment's zeros; it prints the spares at the\n"
               "start and the segment files made during the flood.\n");
}

/* 1 when the part runs: named in --only (a comma-separated list), or, without
 * --only, every part but the long or opt-in ones. */
static int want(const char *part)
{
    if (opt.only != NULL) {
        size_t len = strlen(part);
        for (const char *p = opt.only; *p != '\0';) {
            size_t n = strcspn(p, ",");
            if (n == len && strncmp(p, part, len) == 0)
                return 1;
            p += n + (p[n] == ',');
        }
        return 0;
    }
    if (strcmp(part, "capacity") == 0)
        return opt.capacity;
    if (strcmp(part, "zadd") == 0)
        return opt.zadd_port > 0;
    if (strcmp(part, "sendkey") == 0)
        return 0; /* --only sendkey */
    return 1;
}

int main(int argc, char **argv)
{
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (strcmp(a, "--quick") == 0) {
            opt.quick = 1;
        } else if (strcmp(a, "--capacity") == 0) {
            opt.capacity = 1;
        } else if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
            usage(stdout);
            return 0;
        } else if (v == NULL) {
            usage(stderr);
            tu_die(PROGRAM, "unknown or incomplete argument '%s'", a);
        } else if (strcmp(a, "--only") == 0) {
            opt.only = v, i++;
        } else if (strcmp(a, "--zadd-port") == 0) {
            opt.zadd_port = atoi(v), i++;
        } else if (strcmp(a, "--ceiling-port") == 0) {
            opt.ceiling_port = atoi(v), i++;
        } else if (strcmp(a, "--floor-port") == 0) {
            opt.floor_port = atoi(v), i++;
        } else if (strcmp(a, "--clients") == 0) {
            opt.clients = atoi(v), i++;
        } else if (strcmp(a, "--pipeline") == 0) {
            opt.pipeline = atoi(v), i++;
        } else if (strcmp(a, "-n") == 0) {
            opt.send_n = atol(v), i++;
        } else if (strcmp(a, "--delivery-n") == 0) {
            opt.delivery_n = atol(v), i++;
        } else if (strcmp(a, "--steady-rate") == 0) {
            opt.steady_rate = atoi(v), i++;
        } else if (strcmp(a, "--steady-secs") == 0) {
            opt.steady_secs = atoi(v), i++;
        } else if (strcmp(a, "--capacity-n") == 0) {
            opt.capacity_n = atol(v), i++;
        } else if (strcmp(a, "--capacity-fsync") == 0) {
            opt.capacity_fsync = v, i++;
        } else if (strcmp(a, "--pull-count") == 0) {
            opt.pull_count = v, i++;
        } else if (strcmp(a, "--mixed-runs") == 0) {
            char *end = NULL;
            long r = strtol(v, &end, 10);
            if (*v == '\0' || *end != '\0' || r < 1 || r > MIXED_RUNS_MAX)
                tu_die(PROGRAM, "--mixed-runs: '%s' is not a number of runs from 1 to %d", v, MIXED_RUNS_MAX);
            opt.mixed_runs = (int)r, i++;
        } else if (strcmp(a, "--mixed-warm-log") == 0) {
            char *end = NULL;
            long w = strtol(v, &end, 10);
            if (*v == '\0' || *end != '\0' || w < 1 || w > MIXED_WARM_SECS_MAX)
                tu_die(PROGRAM, "--mixed-warm-log: '%s' is not a number of seconds from 1 to %d", v,
                       MIXED_WARM_SECS_MAX);
            opt.mixed_warm_secs = (int)w, i++;
        } else if (strcmp(a, "--sustain-rates") == 0) {
            opt.sustain_rates = v, i++;
        } else if (strcmp(a, "--broker-flag") == 0) {
            if (opt.nbroker_flags < 16)
                opt.broker_flags[opt.nbroker_flags++] = v;
            i++;
        } else if (strcmp(a, "--baseline-broker") == 0) {
            baseline_broker = v, i++;
        } else if (strcmp(a, "--broker") == 0) {
            setenv("HG_BROKER", v, 1), i++;
        } else {
            usage(stderr);
            tu_die(PROGRAM, "unknown argument '%s'", a);
        }
    }
    if (opt.clients < 1 || opt.clients > MAX_CLIENTS || opt.pipeline < 1 || opt.send_n < 1)
        tu_die(PROGRAM, "bad --clients / --pipeline / -n");
    if (opt.quick) {
        opt.send_n = opt.send_n > 100000 ? 100000 : opt.send_n;
        opt.delivery_n = opt.delivery_n > 20000 ? 20000 : opt.delivery_n;
        opt.steady_secs = opt.steady_secs > 3 ? 3 : opt.steady_secs;
        opt.capacity_n = opt.capacity_n > 200000 ? 200000 : opt.capacity_n;
    }
    const char *bin = getenv("HG_BROKER");
    printf("hourglass-bench: broker %s, %ld cores online%s\n\n", bin != NULL ? bin : HG_BUILDDIR "/hourglass-broker",
           sysconf(_SC_NPROCESSORS_ONLN), opt.quick ? ", --quick" : "");
    fflush(stdout);
    if (want("send"))
        part_send();
    fflush(stdout);
    if (want("sendkey"))
        part_sendkey();
    fflush(stdout);
    if (want("zadd"))
        part_zadd();
    fflush(stdout);
    if (want("delivery"))
        part_delivery();
    fflush(stdout);
    if (want("steady"))
        part_steady(0);
    fflush(stdout);
    if (want("steady-ms"))
        part_steady(1);
    fflush(stdout);
    if (want("mixed"))
        part_mixed();
    fflush(stdout);
    if (want("sustain"))
        part_sustain();
    fflush(stdout);
    if (want("capacity"))
        part_capacity();
    return broken ? 1 : 0;
}
