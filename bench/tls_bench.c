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
 *   flood      (--flood N, instead of the two above) the event loop's latency
 *              under a handshake flood: a plaintext client PINGs in a loop
 *              (one at a time), first on a quiet broker (the baseline), then
 *              while an attacker opens N TLS connections at once from
 *              127.0.0.2.. (spread over 250 loopback addresses, so a
 *              per-address cap alone does not stop it) and sends each the
 *              same ClientHello (made once: replaying it costs the attacker
 *              nothing, the broker a full handshake each), for --flood-secs
 *              seconds, round after round: PING p50 / p99 / max, and the
 *              handshakes the broker answered.
 * The broker runs with --fsync no by default so that the transport's cost is
 * not hidden behind the disk (--fsync always measures the default set-up).
 *
 * Usage: hourglass-tls-bench [-n N] [--clients C] [--pipeline P]
 *        [--connects K] [--fsync always|no] [--quick]
 *        [--flood N [--flood-secs S]]
 * Ends with a "RESULT key=value ..." line for scripts.
 */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include <hourglass/hourglass.h>

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <sys/socket.h>

#include <openssl/ssl.h>
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
static int opt_flood = 0, opt_flood_secs = 5;

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

/* ---- flood: the loop's latency while handshakes are started ---------------------------------- */

/* One ClientHello, made by an OpenSSL client on memory BIOs; its bytes in *out (malloc'd), its length returned. */
static size_t make_client_hello(unsigned char **out)
{
    SSL_CTX *ctx = SSL_CTX_new(TLS_client_method());
    SSL *ssl = ctx ? SSL_new(ctx) : NULL;
    BIO *rb = BIO_new(BIO_s_mem()), *wb = BIO_new(BIO_s_mem());
    if (ssl == NULL || rb == NULL || wb == NULL) {
        tu_die(PROGRAM, "OpenSSL: cannot make a client");
    }
    SSL_set_bio(ssl, rb, wb);
    SSL_set_connect_state(ssl);
    (void)SSL_do_handshake(ssl); /* wants to read: the ClientHello is in wb */
    char *p;
    long n = BIO_get_mem_data(wb, &p);
    if (n <= 0) {
        tu_die(PROGRAM, "OpenSSL: no ClientHello");
    }
    *out = malloc((size_t)n);
    memcpy(*out, p, (size_t)n);
    SSL_free(ssl);
    SSL_CTX_free(ctx);
    return (size_t)n;
}

typedef struct pinger {
    int port;
    atomic_int stop;
    double *lat_ms; /* each PING's round trip */
    size_t n, cap;
} pinger_t;

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static void *ping_thread(void *arg)
{
    pinger_t *p = arg;
    int fd = tu_tcp_connect(p->port);
    if (fd < 0) {
        tu_die(PROGRAM, "PING client: cannot connect to %d", p->port);
    }
    char buf[64];
    while (!atomic_load(&p->stop) && p->n < p->cap) {
        uint64_t t0 = tu_now_mono_us();
        if (write(fd, "PING\r\n", 6) != 6) {
            tu_die(PROGRAM, "PING client: write: %s", strerror(errno));
        }
        size_t got = 0;
        while (got < 7) { /* "+PONG\r\n" */
            ssize_t r = read(fd, buf + got, sizeof buf - got);
            if (r <= 0) {
                tu_die(PROGRAM, "PING client: the broker closed the connection");
            }
            got += (size_t)r;
        }
        p->lat_ms[p->n++] = (double)(tu_now_mono_us() - t0) / 1000.0;
        struct timespec ts = { 0, 1000000 }; /* 1 ms between PINGs: a client's cadence, not a busy loop */
        nanosleep(&ts, NULL);
    }
    close(fd);
    return NULL;
}

/* PINGs for secs seconds; while flood > 0, rounds of flood connections to tls_port from 127.0.0.2.. each sent the
 * ClientHello, then closed once answered (or after 2 s). Prints p50 / p99 / max; returns p99 in *p99. */
static void run_flood(const char *label, int port, int tls_port, int flood, int secs, double *p99, double *pmax)
{
    pinger_t p = { .port = port, .cap = 2000000 };
    p.lat_ms = malloc(p.cap * sizeof *p.lat_ms);
    unsigned char *hello = NULL;
    size_t hello_len = make_client_hello(&hello);
    pthread_t th;
    pthread_create(&th, NULL, ping_thread, &p);
    uint64_t end = tu_now_mono_ms() + (uint64_t)secs * 1000;
    long started = 0, answered = 0, rounds = 0;
    int *fds = calloc((size_t)(flood > 0 ? flood : 1), sizeof *fds);
    while (tu_now_mono_ms() < end) {
        if (flood == 0) {
            struct timespec ts = { 0, 50000000 };
            nanosleep(&ts, NULL);
            continue;
        }
        rounds++;
        for (int i = 0; i < flood; i++) {
            fds[i] = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
            struct sockaddr_in src = { .sin_family = AF_INET }, dst = { .sin_family = AF_INET };
            src.sin_addr.s_addr = htonl(0x7f000002u + (uint32_t)(i % 250));
            dst.sin_addr.s_addr = htonl(0x7f000001u);
            dst.sin_port = htons((uint16_t)tls_port);
            if (fds[i] < 0 || bind(fds[i], (struct sockaddr *)&src, sizeof src) != 0 ||
                (connect(fds[i], (struct sockaddr *)&dst, sizeof dst) != 0 && errno != EINPROGRESS)) {
                tu_die(PROGRAM, "flood: cannot connect: %s", strerror(errno));
            }
        }
        /* Send every ClientHello as soon as its connection is up, then wait for the answers. */
        int pending = flood, sent = 0;
        char *state = calloc((size_t)flood, 1); /* 0 connecting, 1 sent, 2 done */
        struct pollfd *pfd = calloc((size_t)flood, sizeof *pfd);
        uint64_t deadline = tu_now_mono_ms() + 2000;
        while (pending > 0 && tu_now_mono_ms() < deadline) {
            for (int i = 0; i < flood; i++) {
                pfd[i].fd = state[i] == 2 ? -1 : fds[i];
                pfd[i].events = state[i] == 0 ? POLLOUT : POLLIN;
            }
            if (poll(pfd, (nfds_t)flood, 100) <= 0) {
                continue;
            }
            for (int i = 0; i < flood; i++) {
                if (pfd[i].fd < 0 || pfd[i].revents == 0) {
                    continue;
                }
                if (state[i] == 0) {
                    ssize_t w = send(fds[i], hello, hello_len, MSG_NOSIGNAL);
                    state[i] = w == (ssize_t)hello_len ? 1 : 2;
                    sent += state[i] == 1;
                    pending -= state[i] == 2;
                } else {
                    char sink[8192];
                    ssize_t r = recv(fds[i], sink, sizeof sink, 0);
                    answered += r > 0;
                    state[i] = 2;
                    pending--;
                }
            }
        }
        started += sent;
        for (int i = 0; i < flood; i++) {
            close(fds[i]);
        }
        free(state);
        free(pfd);
    }
    atomic_store(&p.stop, 1);
    pthread_join(th, NULL);
    qsort(p.lat_ms, p.n, sizeof *p.lat_ms, cmp_double);
    double p50 = p.n ? p.lat_ms[p.n / 2] : 0;
    *p99 = p.n ? p.lat_ms[(size_t)((double)p.n * 0.99)] : 0;
    *pmax = p.n ? p.lat_ms[p.n - 1] : 0;
    printf("  %-28s PING p50 %7.3f ms  p99 %8.3f ms  max %8.3f ms  (%zu PINGs; %ld ClientHellos sent in %ld rounds, "
           "%ld answered)\n",
           label, p50, *p99, *pmax, p.n, started, rounds, answered);
    free(fds);
    free(hello);
    free(p.lat_ms);
}

static void usage(FILE *f)
{
    fprintf(f, "usage: hourglass-tls-bench [-n N] [--clients C] [--pipeline P] [--connects K]\n"
               "                           [--fsync always|no] [--quick] [--flood N [--flood-secs S]]\n"
               "SEND throughput and connection rate through libhourglass, plaintext (baseline) and TLS,\n"
               "against one hourglass-broker (the build dir's, or $HG_BROKER). Defaults: -n 400000,\n"
               "--clients 8, --pipeline 128, --connects 500, --fsync no.\n"
               "--flood N: instead, a PING client's latency, quiet and while N TLS handshakes a round are\n"
               "started from 250 loopback addresses for S seconds each (default 5).\n");
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
        } else if (v != NULL && strcmp(a, "--flood") == 0) {
            opt_flood = atoi(argv[++i]);
        } else if (v != NULL && strcmp(a, "--flood-secs") == 0) {
            opt_flood_secs = atoi(argv[++i]);
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

    if (opt_flood > 0) {
        double q99, qmax, f99, fmax;
        printf("the event loop's latency under a TLS handshake flood (%d connections a round, %d s):\n", opt_flood,
               opt_flood_secs);
        run_flood("quiet (baseline)", b.port, atoi(tls_port), 0, opt_flood_secs, &q99, &qmax);
        run_flood("handshake flood", b.port, atoi(tls_port), opt_flood, opt_flood_secs, &f99, &fmax);
        printf("RESULT flood=%d quiet_p99_ms=%.3f flood_p99_ms=%.3f quiet_max_ms=%.3f flood_max_ms=%.3f\n", opt_flood,
               q99, f99, qmax, fmax);
        int rc = bp_destroy(&b);
        tu_rmtree(pki_dir);
        return rc == 0 ? 0 : 1;
    }

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
