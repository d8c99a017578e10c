/*
 * bench/tls_bench.c — hourglass-tls-bench: what TLS costs, measured against
 * plaintext on the same broker in the same run. Prints figures; never fails
 * on slowness (exit non-zero only when something is broken: the broker does
 * not start, a SEND fails).
 *
 * One hourglass-broker (fresh temp dir, free ports) with a plaintext port and
 * a tls-port (a throwaway CA and an EC P-256 certificate made with the
 * openssl command, tests/helpers/tls_certs.h). Then, for each transport,
 * plaintext (the baseline) and TLS, through libhourglass as an application
 * uses it (the send part alternating over two rounds):
 *   send       C client threads, each hg_send_many batches of P SENDs of a
 *              64-byte payload (LEVEL 18: nothing comes due during the run)
 *              until N messages are acknowledged:
 *              SEND/s, and the broker's CPU seconds per 100 000 SENDs (from
 *              /proc, so the broker's share of the cost shows even when the
 *              clients are the bottleneck);
 *   connect    K clients opened (client context, TCP connect, TLS handshake,
 *              one PING) and closed one after the other: connections/s, and
 *              the CPU milliseconds per connection of this process (the
 *              client) and of the broker — CPU time, unlike the rate, hardly
 *              depends on how busy the machine is.
 * The broker runs with --fsync no by default so that the transport's cost is
 * not hidden behind the disk (--fsync always measures the default set-up).
 *
 * Usage: hourglass-tls-bench [-n N] [--clients C] [--pipeline P]
 *        [--connects K] [--fsync always|no] [--quick]
 * Ends with a "RESULT key=value ..." line for scripts.
 */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include <hourglass/hourglass.h>

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tests/helpers/broker_proc.h"
#include "tests/helpers/testutil.h"
#include "tests/helpers/tls_certs.h"

#define PROGRAM       "hourglass-tls-bench" /* tu_die's prefix */
#define PAYLOAD_BYTES 64
#define MAX_CLIENTS   64

static long opt_n = 400000;
static int opt_clients = 8, opt_pipeline = 128, opt_connects = 500;
static const char *opt_fsync = "no";

typedef struct transport {
    const char *name;
    char uri[1024];
    hg_client_opts_t opts;
} transport_t;

typedef struct worker {
    const transport_t *t;
    long n; /* messages this thread sends */
    char error[HG_ERRMSG_MAX + 16];
} worker_t;

static void *send_thread(void *arg)
{
    worker_t *w = arg;
    hg_client_t *c = NULL;
    hg_error_t e;
    if (hg_client_open(w->t->uri, &w->t->opts, &c, &e) != HG_OK) {
        snprintf(w->error, sizeof w->error, "open: %s", e.message);
        return NULL;
    }
    static const char payload[PAYLOAD_BYTES] = "0123456789012345678901234567890123456789012345678901234567890123";
    hg_send_item_t *items = calloc((size_t)opt_pipeline, sizeof *items);
    for (long done = 0; done < w->n && items != NULL;) {
        size_t batch = (size_t)(w->n - done < opt_pipeline ? w->n - done : opt_pipeline), ok = 0;
        for (size_t i = 0; i < batch; i++) {
            memset(&items[i], 0, sizeof items[i]);
            items[i].topic = "bench";
            items[i].payload = payload;
            items[i].payload_len = sizeof payload;
            items[i].delay = hg_delay_level(18); /* 2 h: nothing comes due (and costs a move) during the run */
        }
        if (hg_send_many(c, items, batch, &ok) != HG_OK || ok != batch) {
            snprintf(w->error, sizeof w->error, "send: %s", hg_client_errmsg(c));
            break;
        }
        done += (long)batch;
    }
    free(items);
    hg_client_close(c);
    return NULL;
}

/* The send part over t: SEND/s and the broker's CPU ms per 100k SENDs. */
static void run_send(const transport_t *t, pid_t broker, double *rate, double *cpu_per_100k)
{
    pthread_t th[MAX_CLIENTS];
    worker_t w[MAX_CLIENTS];
    double cpu0 = tu_proc_cpu_secs(broker);
    uint64_t t0 = tu_now_mono_ms();
    for (int i = 0; i < opt_clients; i++) {
        memset(&w[i], 0, sizeof w[i]);
        w[i].t = t;
        w[i].n = opt_n / opt_clients + (i < opt_n % opt_clients ? 1 : 0);
        if (pthread_create(&th[i], NULL, send_thread, &w[i]) != 0) {
            tu_die(PROGRAM, "pthread_create failed");
        }
    }
    for (int i = 0; i < opt_clients; i++) {
        pthread_join(th[i], NULL);
    }
    double secs = (double)(tu_now_mono_ms() - t0) / 1000.0;
    double cpu = tu_proc_cpu_secs(broker) - cpu0;
    for (int i = 0; i < opt_clients; i++) {
        if (w[i].error[0] != '\0') {
            tu_die(PROGRAM, "%s client %d: %s", t->name, i, w[i].error);
        }
    }
    *rate = (double)opt_n / (secs > 0 ? secs : 1e-3);
    *cpu_per_100k = cpu * 1000.0 * 100000.0 / (double)opt_n;
    printf("  send     %-9s %9.0f SEND/s   %7.0f ms broker CPU per 100k SENDs   (%ld in %.2f s)\n", t->name, *rate,
           *cpu_per_100k, opt_n, secs);
    fflush(stdout);
}

/* The connect part over t: connections (connect, handshake, PING) per second. */
static double run_connect(const transport_t *t, pid_t broker)
{
    double self0 = tu_proc_cpu_secs(getpid()), broker0 = tu_proc_cpu_secs(broker);
    uint64_t t0 = tu_now_mono_ms();
    for (int i = 0; i < opt_connects; i++) {
        hg_client_t *c = NULL;
        hg_error_t e;
        if (hg_client_open(t->uri, &t->opts, &c, &e) != HG_OK) {
            tu_die(PROGRAM, "%s connect %d: %s", t->name, i, e.message);
        }
        const char *ping[] = { "PING" };
        hg_reply_t *r = NULL;
        if (hg_client_command(c, 1, ping, NULL, &r) != HG_OK) {
            tu_die(PROGRAM, "%s PING: %s", t->name, hg_client_errmsg(c));
        }
        hg_reply_free(r);
        hg_client_close(c);
    }
    double secs = (double)(tu_now_mono_ms() - t0) / 1000.0;
    double rate = opt_connects / (secs > 0 ? secs : 1e-3);
    double self_ms = (tu_proc_cpu_secs(getpid()) - self0) * 1000.0 / opt_connects;
    double broker_ms = (tu_proc_cpu_secs(broker) - broker0) * 1000.0 / opt_connects;
    printf("  connect  %-9s %9.0f conn/s   CPU per connection: client %.2f ms, broker %.2f ms   (%d open + PING + "
           "close, one at a time)\n",
           t->name, rate, self_ms, broker_ms, opt_connects);
    fflush(stdout);
    return rate;
}

static void usage(FILE *f)
{
    fprintf(f, "usage: hourglass-tls-bench [-n N] [--clients C] [--pipeline P] [--connects K]\n"
               "                           [--fsync always|no] [--quick]\n"
               "SEND throughput and connection rate through libhourglass, plaintext (baseline) and TLS,\n"
               "against one hourglass-broker (the build dir's, or $HG_BROKER). Defaults: -n 400000,\n"
               "--clients 8, --pipeline 128, --connects 500, --fsync no.\n");
}

int main(int argc, char **argv)
{
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (strcmp(a, "--quick") == 0) {
            opt_n = 40000;
            opt_connects = 50;
        } else if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
            usage(stdout);
            return 0;
        } else if (v != NULL && strcmp(a, "-n") == 0) {
            opt_n = atol(argv[++i]);
        } else if (v != NULL && strcmp(a, "--clients") == 0) {
            opt_clients = atoi(argv[++i]);
        } else if (v != NULL && strcmp(a, "--pipeline") == 0) {
            opt_pipeline = atoi(argv[++i]);
        } else if (v != NULL && strcmp(a, "--connects") == 0) {
            opt_connects = atoi(argv[++i]);
        } else if (v != NULL && strcmp(a, "--fsync") == 0) {
            opt_fsync = argv[++i];
        } else {
            usage(stderr);
            return 2;
        }
    }
    if (opt_n < 1 || opt_clients < 1 || opt_clients > MAX_CLIENTS || opt_pipeline < 1 || opt_connects < 1) {
        tu_die(PROGRAM, "-n, --clients (1..%d), --pipeline and --connects must be positive", MAX_CLIENTS);
    }

    char pki_dir[512], err[8192], tls_port[16];
    tc_certs_t pki;
    if (tu_mkdtemp("tls-bench", pki_dir, sizeof pki_dir) != 0 || tc_make(pki_dir, &pki, err, sizeof err) != 0) {
        tu_die(PROGRAM, "test PKI: %s", err);
    }
    snprintf(tls_port, sizeof tls_port, "%d", tu_free_port());
    bp_broker_t b;
    memset(&b, 0, sizeof b);
    if (bp_startl(&b, err, sizeof err, "--fsync", opt_fsync, "--tls-port", tls_port, "--tls-cert-file", pki.server,
                  "--tls-key-file", pki.server_key, NULL) != 0) {
        tu_die(PROGRAM, "cannot start the broker: %s", err);
    }
    printf("hourglass-tls-bench: broker pid %d, plaintext port %d, TLS port %s (EC P-256 certificate), fsync %s;\n"
           "%d clients, pipeline %d, %d-byte payloads, %ld SENDs per run\n",
           (int)b.pid, b.port, tls_port, opt_fsync, opt_clients, opt_pipeline, PAYLOAD_BYTES, opt_n);

    transport_t plain = { .name = "plaintext" }, tls = { .name = "TLS" };
    hg_client_opts_init(&plain.opts);
    hg_client_opts_init(&tls.opts);
    snprintf(plain.uri, sizeof plain.uri, "hourglass://127.0.0.1:%d", b.port);
    snprintf(tls.uri, sizeof tls.uri, "hourglass+tls://127.0.0.1:%s?ca=%s", tls_port, pki.ca);

    /* Two rounds, alternating, so that a drift of the machine (other load, the
     * store growing) falls on both transports; the figures are the means. */
    double plain_rate = 0, plain_cpu = 0, tls_rate = 0, tls_cpu = 0;
    for (int round = 0; round < 2; round++) {
        double r, c;
        run_send(&plain, b.pid, &r, &c);
        plain_rate += r / 2, plain_cpu += c / 2;
        run_send(&tls, b.pid, &r, &c);
        tls_rate += r / 2, tls_cpu += c / 2;
    }
    double plain_conn = run_connect(&plain, b.pid), tls_conn = run_connect(&tls, b.pid);

    printf("TLS vs plaintext: SEND throughput %+.1f %%, broker CPU per SEND %+.1f %%; connections/s %+.1f %%\n",
           (tls_rate / plain_rate - 1) * 100, (tls_cpu / plain_cpu - 1) * 100, (tls_conn / plain_conn - 1) * 100);
    printf("RESULT plain_send_per_s=%.0f tls_send_per_s=%.0f plain_cpu_ms_per_100k=%.0f tls_cpu_ms_per_100k=%.0f "
           "plain_conn_per_s=%.0f tls_conn_per_s=%.0f\n",
           plain_rate, tls_rate, plain_cpu, tls_cpu, plain_conn, tls_conn);
    int rc = bp_destroy(&b);
    tu_rmtree(pki_dir);
    return rc == 0 ? 0 : 1;
}
