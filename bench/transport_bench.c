/*
 * bench/transport_bench.c — the two transports side by side in one run:
 * hourglass:// (the broker, fsync always) against amqp:// on one RabbitMQ node
 * and on a 3-node cluster (quorum queues: a confirm means a majority wrote it).
 * Prints; never fails on slowness (docs/rabbitmq.md has the figures).
 *
 * Per target:
 *   send      durable sends/s: N messages (--sends, default 5000) with
 *             hg_send_many in batches of 100 on one client (the broker's
 *             group commit / RabbitMQ's confirms), and 300 single hg_send
 *             calls (a round trip each: mean ms per send)
 *   lateness  300 messages with LEVEL 1 (1 s) and 300 with DELAY 3s (a chain
 *             1s × 3: on amqp:// through the hop router), sent in 10 bursts
 *             100 ms apart while an hg_consumer (4 workers) reads them:
 *             delivery − due, p50 / p99 / max; and apart, 300 with DELAY
 *             1500ms (1 s + a 500 ms remainder: on amqp:// through the
 *             remainder queues), min (negative: early) / p50 / p99 / max
 *   cancels   the real ./hourglass-consumer --workers 4 on --orders fresh
 *             orders (default 2000, private MariaDB): first send → all
 *             cancelled, cancels/s
 *
 * Run: make transport-bench && ./transport-bench [--sends N] [--orders N] [--skip-cluster]
 */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include "include/hourglass/hourglass.h"
#include "tests/helpers/order_env.h"
#include "tests/helpers/rabbit_proc.h"

#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define LATE_N 300

typedef struct target {
    const char *name;
    char uri[600];
} target_t;

static oe_env_t env;

static int cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return x < y ? -1 : x > y;
}

static void send_rate(const target_t *t, int n)
{
    hg_client_t *c = NULL;
    hg_error_t err;
    hg_send_item_t items[100];
    uint64_t t0, ms;
    int ok_total = 0;

    if (hg_client_open(t->uri, NULL, &c, &err) != HG_OK) {
        printf("  %-28s cannot connect: %s\n", t->name, err.message);
        return;
    }
    memset(items, 0, sizeof items);
    for (int k = 0; k < 100; k++) {
        items[k].topic = "bench-send";
        items[k].payload = "0123456789012345678901234567890123456789012345678901234567890123";
        items[k].payload_len = 64;
        items[k].delay = hg_delay_level(2);
    }
    t0 = tu_now_mono_ms();
    for (int i = 0; i < n; i += 100) {
        size_t ok = 0;
        hg_send_many(c, items, 100, &ok);
        ok_total += (int)ok;
    }
    ms = tu_now_mono_ms() - t0;
    printf("  %-28s send_many x100: %6.0f msg/s (%d ok of %d in %" PRIu64 " ms)", t->name,
           ok_total * 1000.0 / (double)(ms ? ms : 1), ok_total, n, ms);
    t0 = tu_now_mono_ms();
    for (int i = 0; i < 300; i++)
        hg_send(c, "bench-send", NULL, "x", 1, hg_delay_level(2), NULL);
    ms = tu_now_mono_ms() - t0;
    printf("; hg_send: %.2f ms each\n", ms / 300.0);
    hg_client_close(c);
}

typedef struct late {
    pthread_mutex_t lock;
    int64_t late[2 * LATE_N]; /* whole levels: LEVEL 1, DELAY 3s */
    int n;
    int64_t rem[LATE_N]; /* DELAY 1500ms: 1 s + a 500 ms remainder (payload "z") */
    int nrem;
} late_t;

static hg_outcome_t on_late(const hg_message_t *m, char *reason, size_t rlen, void *arg)
{
    late_t *l = arg;
    int64_t late = (int64_t)tu_now_wall_ms() - (int64_t)m->due_ms;
    (void)reason;
    (void)rlen;
    pthread_mutex_lock(&l->lock);
    if (m->payload_len == 1 && ((const char *)m->payload)[0] == 'z') {
        if (l->nrem < LATE_N)
            l->rem[l->nrem++] = late;
    } else if (l->n < 2 * LATE_N) {
        l->late[l->n++] = late;
    }
    pthread_mutex_unlock(&l->lock);
    return HG_DONE;
}

static void *run(void *arg)
{
    hg_consumer_run(arg);
    return NULL;
}

static void lateness(const target_t *t, int seq)
{
    char topic[64], group[64];
    hg_consumer_opts_t o;
    hg_consumer_t *cons = NULL;
    hg_client_t *c = NULL;
    hg_error_t err;
    late_t l;
    pthread_t th;
    hg_reply_t *r = NULL;
    uint64_t end;

    snprintf(topic, sizeof topic, "bench-late-%d", seq);
    snprintf(group, sizeof group, "bench-late-%d", seq);
    memset(&l, 0, sizeof l);
    pthread_mutex_init(&l.lock, NULL);
    if (hg_client_open(t->uri, NULL, &c, &err) != HG_OK)
        return;
    {
        const char *argv[] = { "GROUP", "CREATE", group, topic, "FROM", "NOW" };
        hg_client_command(c, 6, argv, NULL, &r);
        hg_reply_free(r);
    }
    hg_consumer_opts_init(&o);
    o.uri = t->uri;
    o.group = group;
    o.topic = topic;
    o.workers = 4;
    o.count = 10;
    o.block_ms = 200;
    o.handler = on_late;
    o.handler_arg = &l;
    if (hg_consumer_new(&o, &cons, &err) != HG_OK) {
        printf("  %-28s consumer: %s\n", t->name, err.message);
        hg_client_close(c);
        return;
    }
    pthread_create(&th, NULL, run, cons);
    for (int burst = 0; burst < 10; burst++) {
        for (int i = 0; i < LATE_N / 10; i++) {
            hg_send(c, topic, NULL, "x", 1, hg_delay_level(1), NULL);
            hg_send(c, topic, NULL, "y", 1, hg_delay_ms(3000), NULL);
            hg_send(c, topic, NULL, "z", 1, hg_delay_ms(1500), NULL);
        }
        usleep(100000);
    }
    end = tu_now_mono_ms() + 60000;
    while (tu_now_mono_ms() < end) {
        int n;
        pthread_mutex_lock(&l.lock);
        n = l.n + l.nrem;
        pthread_mutex_unlock(&l.lock);
        if (n >= 3 * LATE_N)
            break;
        usleep(50000);
    }
    hg_consumer_stop(cons);
    pthread_join(th, NULL);
    hg_consumer_free(cons);
    hg_client_close(c);
    qsort(l.late, (size_t)l.n, sizeof l.late[0], cmp_i64);
    if (l.n == 0) {
        printf("  %-28s lateness: nothing delivered in 60 s\n", t->name);
        return;
    }
    printf("  %-28s lateness (1s and 3s delays, %d msgs): p50 %" PRId64 " ms, p99 %" PRId64 " ms, max %" PRId64 " ms\n",
           t->name, l.n, l.late[l.n / 2], l.late[(l.n * 99) / 100], l.late[l.n - 1]);
    qsort(l.rem, (size_t)l.nrem, sizeof l.rem[0], cmp_i64);
    if (l.nrem > 0)
        printf("  %-28s lateness (DELAY 1500ms, %d msgs): min %" PRId64 " ms, p50 %" PRId64 " ms, p99 %" PRId64
               " ms, max %" PRId64 " ms\n",
               "", l.nrem, l.rem[0], l.rem[l.nrem / 2], l.rem[(l.nrem * 99) / 100], l.rem[l.nrem - 1]);
}

static void cancels(const target_t *t, int seq, int n)
{
    char db[32], log_path[600], dir[512];
    const char *extra[] = { "--uri", t->uri, NULL };
    hg_client_t *c = NULL;
    hg_error_t err;
    hg_reply_t *r = NULL;
    hg_send_item_t *items = calloc((size_t)n, sizeof *items);
    char(*payload)[16] = calloc((size_t)n, 16);
    uint64_t t0, ms;
    long long done = 0;
    pid_t pid;

    snprintf(db, sizeof db, "tb%d", seq);
    if (oe_fresh_database(&env, db, (size_t)n, NULL) == NULL || hg_client_open(t->uri, NULL, &c, &err) != HG_OK)
        goto out;
    {
        const char *argv[] = { "GROUP", "CREATE", db, OE_TOPIC, "FROM", "NOW" };
        hg_client_command(c, 6, argv, NULL, &r);
        hg_reply_free(r);
    }
    tu_mkdtemp("tbench", dir, sizeof dir);
    snprintf(log_path, sizeof log_path, "%s/consumer.log", dir);
    pid = oe_start_consumer(&env, db, db, 4, 0, log_path, extra);
    sleep(2); /* idle and consuming */
    for (int i = 0; i < n; i++) {
        snprintf(payload[i], 16, "%d", i + 1);
        items[i].topic = OE_TOPIC;
        items[i].key = payload[i];
        items[i].payload = payload[i];
        items[i].payload_len = strlen(payload[i]);
        items[i].delay = hg_delay_none();
    }
    t0 = tu_now_mono_ms();
    for (int i = 0; i < n; i += 500)
        hg_send_many(c, items + i, (size_t)(n - i < 500 ? n - i : 500), NULL);
    done = oe_wait_scalar(&env, n, 180000, "SELECT COUNT(*) FROM %s.orders WHERE status = 'cancelled'", db);
    ms = tu_now_mono_ms() - t0;
    oe_stop_consumer(pid);
    tu_rmtree(dir);
    printf("  %-28s cancels: %lld of %d in %" PRIu64 " ms = %.0f cancels/s (hourglass-consumer, 4 workers)\n", t->name,
           done, n, ms, done * 1000.0 / (double)(ms ? ms : 1));
out:
    hg_client_close(c);
    free(items);
    free(payload);
}

int main(int argc, char **argv)
{
    rq_cluster_t one, three;
    target_t t[3];
    char err[8192];
    int sends = 5000, orders = 2000, skip_cluster = 0, nt = 0;

    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--sends") == 0 && i + 1 < argc)
            sends = atoi(argv[++i]);
        else if (strcmp(argv[i], "--orders") == 0 && i + 1 < argc)
            orders = atoi(argv[++i]);
        else if (strcmp(argv[i], "--skip-cluster") == 0)
            skip_cluster = 1;
        else {
            fprintf(stderr, "usage: transport-bench [--sends N] [--orders N] [--skip-cluster]\n");
            return 2;
        }
    }
    signal(SIGPIPE, SIG_IGN);
    hg_order_library_init();
    if (oe_start(&env, NULL, err, sizeof err) != 0) {
        fprintf(stderr, "transport-bench: %s\n", err);
        return 1;
    }
    t[nt].name = "hourglass:// (fsync always)";
    snprintf(t[nt++].uri, sizeof t[0].uri, "hourglass://127.0.0.1:%d", env.broker.port);
    printf("starting RabbitMQ (1 node%s) ...\n", skip_cluster ? "" : ", then 3 nodes");
    fflush(stdout);
    if (rq_start(&one, 1, err, sizeof err) != 0) {
        fprintf(stderr, "transport-bench: %s\n", err);
        oe_stop(&env);
        return 1;
    }
    t[nt].name = "amqp:// 1 node";
    snprintf(t[nt++].uri, sizeof t[0].uri, "%s", one.uri);
    if (!skip_cluster) {
        if (rq_start(&three, 3, err, sizeof err) != 0) {
            fprintf(stderr, "transport-bench: 3 nodes: %s\n", err);
            skip_cluster = 1;
        } else {
            t[nt].name = "amqp:// 3 nodes";
            snprintf(t[nt++].uri, sizeof t[0].uri, "%s", three.uri);
        }
    }
    printf("durable sends (64-byte payloads, LEVEL 2):\n");
    for (int i = 0; i < nt; i++)
        send_rate(&t[i], sends);
    printf("delivery lateness:\n");
    for (int i = 0; i < nt; i++)
        lateness(&t[i], i);
    printf("end-to-end cancels:\n");
    for (int i = 0; i < nt; i++)
        cancels(&t[i], i, orders);
    if (!skip_cluster)
        rq_destroy(&three, 0);
    rq_destroy(&one, 0);
    oe_stop(&env);
    return 0;
}
