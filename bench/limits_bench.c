/*
 * bench/limits_bench.c — what hostile or merely numerous clients cost the
 * well-behaved ones (docs/BENCHMARKS.md "Limits"). Prints figures beside a
 * baseline measured in the same run; never fails on a slow machine.
 *
 *   ./hourglass-limits-bench [--only parked|pressure] [--parked N] [-n N]
 *                            [--baseline-broker PATH]
 *
 *   parked    SEND round trips (one client, 64-byte payloads, fsync no) on a
 *             fresh broker, then with N PULL BLOCK 0 connections (default
 *             10 000) waiting on another topic: what each blocked PULL adds
 *             to the storage thread's iteration. With --baseline-broker PATH
 *             the same on another build (the broker before the parked index).
 *   pressure  one well-behaved client's PING and SEND round trips (fsync no)
 *             and the broker's RSS, first alone (the baseline), then while
 *             --conns idle connections (default 10 000) are open, 8 clients
 *             pipeline DLQ LISTs of 4 MiB payloads and never read, 200
 *             clients trickle a byte every 100 ms, and one client lists the
 *             DLQ (COUNT 100 of 4 MiB payloads); max-client-memory 256mb.
 *             With --baseline-broker PATH the same on that build first.
 *
 * The open-files limit of this process and of the broker is raised as needed
 * (root may raise the hard limit).
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>
#include <time.h>

#include "tests/helpers/broker_proc.h"
#include "tests/helpers/testutil.h"

#define PROGRAM "hourglass-limits-bench" /* tu_die's prefix */

static struct {
    const char *only;
    int parked;
    long n;
    const char *baseline_broker;
    int conns;
} opt = { NULL, 10000, 3000, NULL, 10000 };

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

typedef struct latency {
    double p50_us, p99_us, max_us;
} latency_t;

/* Sorts v (n > 0 samples in microseconds). */
static latency_t latency_of(uint64_t *v, size_t n)
{
    qsort(v, n, sizeof *v, cmp_u64);
    return (latency_t){ (double)v[n / 2], (double)v[(n * 99) / 100], (double)v[n - 1] };
}

/* Let this process hold at least want descriptors: the soft limit is raised,
 * and the hard one when allowed (root with CAP_SYS_RESOURCE). */
static void need_fds(long want)
{
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) != 0)
        tu_die(PROGRAM, "getrlimit: %s", strerror(errno));
    if (rl.rlim_cur != RLIM_INFINITY && rl.rlim_cur >= (rlim_t)want)
        return;
    struct rlimit up = rl;
    up.rlim_cur = (rlim_t)want;
    if (up.rlim_max != RLIM_INFINITY && up.rlim_max < (rlim_t)want)
        up.rlim_max = (rlim_t)want;
    if (setrlimit(RLIMIT_NOFILE, &up) == 0)
        return;
    if (rl.rlim_max != RLIM_INFINITY && rl.rlim_max < (rlim_t)want)
        tu_die(PROGRAM, "this run needs %ld descriptors and the hard open-files limit is %llu (raising it: %s)", want,
               (unsigned long long)rl.rlim_max, strerror(errno));
    rl.rlim_cur = (rlim_t)want;
    if (setrlimit(RLIMIT_NOFILE, &rl) != 0)
        tu_die(PROGRAM, "cannot raise the open-files limit to %ld: %s", want, strerror(errno));
}

/* Start a broker (binary: PATH, or NULL for this build) with flags; nofile
 * descriptors for it. */
static void start_broker(bp_broker_t *b, const char *binary, long nofile, const char *const *flags)
{
    const char *saved = getenv("HG_BROKER");
    char keep[512] = "";
    if (saved != NULL)
        snprintf(keep, sizeof keep, "%s", saved);
    if (binary != NULL)
        setenv("HG_BROKER", binary, 1);
    char err[8192];
    int rc = bp_start_limited(b, nofile, flags, err, sizeof err);
    if (binary != NULL) {
        if (keep[0])
            setenv("HG_BROKER", keep, 1);
        else
            unsetenv("HG_BROKER");
    }
    if (rc != 0)
        tu_die(PROGRAM, "cannot start the broker: %s", err);
    printf("(broker %s, pid %d, port %d)\n", b->binary, (int)b->pid, b->port);
    fflush(stdout);
}

static long long info_ll(rc_conn_t *c, const char *field)
{
    resp_reply_t *r = rc_cmd(c, "INFO", NULL);
    char v[64] = "";
    long long n = -1;
    if (r != NULL && rc_info_field(r, field, v, sizeof v) == 0)
        n = atoll(v);
    resp_reply_free(r);
    return n;
}

/* n SEND round trips on c to topic: their latency. */
static latency_t send_latency(rc_conn_t *c, const char *topic, long n)
{
    uint64_t *v = malloc((size_t)n * sizeof *v);
    if (v == NULL)
        tu_die(PROGRAM, "out of memory");
    static const char payload[] = "0123456789012345678901234567890123456789012345678901234567890123";
    for (long i = 0; i < n; i++) {
        uint64_t t = tu_now_mono_us();
        resp_reply_t *r = rc_cmd(c, "SEND", topic, payload, NULL);
        if (r == NULL || r->type == RESP_REPLY_ERROR) {
            char e[300];
            tu_die(PROGRAM, "SEND: %s", r == NULL ? c->err : rc_describe(r, e, sizeof e));
        }
        resp_reply_free(r);
        v[i] = tu_now_mono_us() - t;
    }
    latency_t l = latency_of(v, (size_t)n);
    free(v);
    return l;
}

/* ---- parked: blocked PULLs and the storage thread's iteration --------------------- */

typedef struct parked_result {
    latency_t alone, blocked;
    int parked;
} parked_result_t;

static parked_result_t parked_run(const char *binary)
{
    parked_result_t res = { .parked = 0 };
    char maxc[32];
    snprintf(maxc, sizeof maxc, "%d", opt.parked + 100);
    /* max-client-memory 0: a broker before the reply-estimate fix counted each blocked PULL as max-pull-bytes
     * held and closed all but 127 of them; the same flags for both builds */
    const char *flags[] = { "--fsync", "no", "--max-clients", maxc, "--max-client-memory", "0", NULL };
    bp_broker_t b;
    start_broker(&b, binary, opt.parked + 1024, flags);
    rc_conn_t c;
    char e[512];
    if (bp_connect(&b, &c, e, sizeof e) != 0)
        tu_die(PROGRAM, "connect: %s", e);
    send_latency(&c, "busy", opt.n / 10 + 1); /* warm up */
    res.alone = send_latency(&c, "busy", opt.n);

    rc_conn_t *waiters = calloc((size_t)opt.parked, sizeof *waiters);
    if (waiters == NULL)
        tu_die(PROGRAM, "out of memory");
    for (int i = 0; i < opt.parked; i++) {
        if (bp_connect(&b, &waiters[i], e, sizeof e) != 0)
            tu_die(PROGRAM, "connection %d of %d: %s", i + 1, opt.parked, e);
        rc_appendl(&waiters[i], "PULL", "waiters", "idle", "BLOCK", "0", NULL);
        if (rc_flush(&waiters[i], 0) != 0)
            tu_die(PROGRAM, "PULL %d: %s", i + 1, waiters[i].err);
    }
    uint64_t end = tu_now_mono_ms() + 120000;
    while ((res.parked = (int)info_ll(&c, "storage_jobs_parked")) < opt.parked && tu_now_mono_ms() < end) {
        struct timespec ts = { 0, 50 * 1000000 };
        nanosleep(&ts, NULL);
    }
    send_latency(&c, "busy", opt.n / 10 + 1);
    res.blocked = send_latency(&c, "busy", opt.n);
    for (int i = 0; i < opt.parked; i++)
        rc_close(&waiters[i]);
    free(waiters);
    rc_close(&c);
    bp_destroy(&b);
    return res;
}

static void print_parked(const char *title, const parked_result_t *r)
{
    printf("%s\n", title);
    printf("  SEND, nothing blocked (baseline):  p50 %7.0f us  p99 %7.0f us  max %7.0f us\n", r->alone.p50_us,
           r->alone.p99_us, r->alone.max_us);
    printf("  SEND, %5d PULL BLOCK on another topic: p50 %7.0f us  p99 %7.0f us  max %7.0f us  (p50 %+.0f us)\n",
           r->parked, r->blocked.p50_us, r->blocked.p99_us, r->blocked.max_us, r->blocked.p50_us - r->alone.p50_us);
}

static void part_parked(void)
{
    need_fds(opt.parked + 1024);
    printf("== parked: SEND round trips (%ld, one client, fsync no) with %d blocked PULLs on another topic\n", opt.n,
           opt.parked);
    parked_result_t base = { .parked = 0 }, cur;
    if (opt.baseline_broker != NULL) {
        base = parked_run(opt.baseline_broker);
        print_parked("baseline broker:", &base);
    }
    cur = parked_run(NULL);
    print_parked("this build:", &cur);
    printf("RESULT parked n=%d alone_p50_us=%.0f blocked_p50_us=%.0f", cur.parked, cur.alone.p50_us,
           cur.blocked.p50_us);
    if (opt.baseline_broker != NULL)
        printf(" baseline_alone_p50_us=%.0f baseline_blocked_p50_us=%.0f", base.alone.p50_us, base.blocked.p50_us);
    printf("\n\n");
    fflush(stdout);
}

/* ---- pressure: hostile clients and a well-behaved one ------------------------------ */

/* A non-blocking TCP connection to 127.0.0.1:port, or -1. */
static int raw_connect(int port)
{
    int fd = tu_tcp_connect(port);
    if (fd >= 0)
        fcntl(fd, F_SETFL, O_NONBLOCK);
    return fd;
}

typedef struct sampled {
    uint64_t *ping, *send;
    size_t n, cap;
} sampled_t;

/* One PING and one SEND round trip on c, recorded. */
static void sample_once(rc_conn_t *c, sampled_t *sm)
{
    if (sm->n == sm->cap) {
        sm->cap = sm->cap ? 2 * sm->cap : 1024;
        sm->ping = realloc(sm->ping, sm->cap * sizeof *sm->ping);
        sm->send = realloc(sm->send, sm->cap * sizeof *sm->send);
        if (sm->ping == NULL || sm->send == NULL)
            tu_die(PROGRAM, "out of memory");
    }
    char e[300];
    uint64_t t = tu_now_mono_us();
    resp_reply_t *r = rc_cmd(c, "PING", NULL);
    if (r == NULL || !rc_str_eq(r, "PONG"))
        tu_die(PROGRAM, "PING: %s", r == NULL ? c->err : rc_describe(r, e, sizeof e));
    resp_reply_free(r);
    sm->ping[sm->n] = tu_now_mono_us() - t;
    t = tu_now_mono_us();
    r = rc_cmd(c, "SEND", "calm", "a well-behaved client's message", NULL);
    if (r == NULL || r->type == RESP_REPLY_ERROR)
        tu_die(PROGRAM, "SEND: %s", r == NULL ? c->err : rc_describe(r, e, sizeof e));
    resp_reply_free(r);
    sm->send[sm->n++] = tu_now_mono_us() - t;
}

static void print_sampled(const char *title, sampled_t *sm)
{
    latency_t p = latency_of(sm->ping, sm->n), q = latency_of(sm->send, sm->n);
    printf("  %-34s PING p50 %6.0f us p99 %7.0f us max %8.0f us | SEND p50 %6.0f us p99 %7.0f us max %8.0f us "
           "(%zu each)\n",
           title, p.p50_us, p.p99_us, p.max_us, q.p50_us, q.p99_us, q.max_us, sm->n);
}

static void part_pressure(const char *binary)
{
    enum {
        PAYLOADS = 20,
        PAYLOAD = 4 << 20,
        NONREADERS = 8,
        TRICKLERS = 200,
        RUN_MS = 12000
    };
    const int conns = opt.conns;
    need_fds((long)conns + NONREADERS + TRICKLERS + 1024);
    char maxc[32];
    snprintf(maxc, sizeof maxc, "%d", conns + NONREADERS + TRICKLERS + 100);
    const char *flags[] = {
        "--fsync", "no", "--max-clients", maxc, "--max-client-memory", "256mb", "--header-timeout", "5s", NULL,
    };
    printf("== pressure%s: %d idle connections, %d non-readers (DLQ LIST of %d MiB payloads), %d tricklers, one DLQ "
           "LIST COUNT 100; max-client-memory 256 MiB, header-timeout 5s, fsync no\n",
           binary ? " (baseline broker)" : "", conns, NONREADERS, PAYLOAD >> 20, TRICKLERS);
    bp_broker_t b;
    start_broker(&b, binary, (long)conns + NONREADERS + TRICKLERS + 2048, flags);
    rc_conn_t c;
    char e[512], id[32];
    if (bp_connect(&b, &c, e, sizeof e) != 0)
        tu_die(PROGRAM, "connect: %s", e);
    c.timeout_ms = 120000;

    /* 20 messages of 4 MiB in the DLQ of g */
    char *payload = malloc(PAYLOAD + 1);
    if (payload == NULL)
        tu_die(PROGRAM, "out of memory");
    memset(payload, 'd', PAYLOAD);
    payload[PAYLOAD] = '\0';
    for (int i = 0; i < PAYLOADS; i++)
        if (bp_send(&c, id, sizeof id, e, sizeof e, "big", payload, NULL) != 0)
            tu_die(PROGRAM, "SEND %d: %s", i, e);
    free(payload);
    if (bp_ok_cmd(&c, e, sizeof e, "GROUP", "CREATE", "g", "big", "FROM", "FIRST", "MAXRETRY", "0", NULL) != 0)
        tu_die(PROGRAM, "GROUP CREATE: %s", e);
    for (int parked = 0, round = 0; parked < PAYLOADS && round < 100; round++) {
        resp_reply_t *r = bp_pull(&c, e, sizeof e, "g", "big", "COUNT", "4", NULL);
        if (r == NULL)
            tu_die(PROGRAM, "PULL: %s", e);
        for (size_t i = 0; i < r->count; i++) {
            rc_msg_t m;
            long long next;
            if (rc_msg_at(r, i, &m, e, sizeof e) != 0 ||
                bp_int_cmd(&c, &next, e, sizeof e, "NACK", "g", m.id, NULL) != 0)
                tu_die(PROGRAM, "NACK: %s", e);
            parked++;
        }
        resp_reply_free(r);
    }

    sampled_t alone = { 0 }, attacked = { 0 };
    for (int i = 0; i < 2000; i++)
        sample_once(&c, &alone);
    long base_kib = bp_rss_kib(&b), peak_kib = base_kib;

    int *idle = malloc((size_t)conns * sizeof *idle);
    static int nonreaders[NONREADERS], tricklers[TRICKLERS];
    if (idle == NULL)
        tu_die(PROGRAM, "out of memory");
    uint64_t t_open = tu_now_mono_ms();
    for (int i = 0; i < conns; i++)
        if ((idle[i] = raw_connect(b.port)) < 0)
            tu_die(PROGRAM, "idle connection %d of %d: %s", i + 1, conns, strerror(errno));
    uint64_t open_ms = tu_now_mono_ms() - t_open;
    static const char list[] = "*5\r\n$3\r\nDLQ\r\n$4\r\nLIST\r\n$1\r\ng\r\n$5\r\nCOUNT\r\n$3\r\n100\r\n";
    for (int i = 0; i < NONREADERS; i++) {
        if ((nonreaders[i] = raw_connect(b.port)) < 0)
            tu_die(PROGRAM, "connect: %s", strerror(errno));
        int rcvbuf = 4096;
        setsockopt(nonreaders[i], SOL_SOCKET, SO_RCVBUF, &rcvbuf, sizeof rcvbuf);
        for (int k = 0; k < 400; k++)
            if (send(nonreaders[i], list, sizeof list - 1, MSG_NOSIGNAL) < 0)
                break;
    }
    for (int i = 0; i < TRICKLERS; i++)
        if ((tricklers[i] = raw_connect(b.port)) < 0)
            tu_die(PROGRAM, "connect: %s", strerror(errno));
    rc_conn_t lister;
    if (bp_connect(&b, &lister, e, sizeof e) != 0)
        tu_die(PROGRAM, "connect: %s", e);
    lister.timeout_ms = 120000;
    rc_appendl(&lister, "DLQ", "LIST", "g", "COUNT", "100", NULL);
    if (rc_flush(&lister, 0) != 0)
        tu_die(PROGRAM, "DLQ LIST: %s", lister.err);
    uint64_t t_list = tu_now_mono_us(), list_us = 0;
    size_t list_n = 0, list_bytes = 0;

    static const char slow[] = "*3\r\n$4\r\nSEND\r\n$4\r\nslow\r\n$200\r\n";
    uint64_t t0 = tu_now_mono_ms();
    for (int step = 0; tu_now_mono_ms() - t0 < RUN_MS; step++) {
        for (int i = 0; i < TRICKLERS; i++) {
            char byte = (size_t)step < sizeof slow - 1 ? slow[step] : 'x';
            if (tricklers[i] >= 0 && send(tricklers[i], &byte, 1, MSG_NOSIGNAL) != 1) {
                close(tricklers[i]);
                tricklers[i] = -1;
            }
        }
        if (list_us == 0) {
            resp_reply_t *r = rc_read(&lister, 1);
            if (r != NULL) {
                list_us = tu_now_mono_us() - t_list;
                list_n = r->count;
                for (size_t i = 0; i < r->count; i++)
                    if (r->elements[i].type == RESP_REPLY_ARRAY && r->elements[i].count >= 3)
                        list_bytes += r->elements[i].elements[2].len;
                resp_reply_free(r);
            }
        }
        uint64_t step_end = tu_now_mono_ms() + 100;
        while (tu_now_mono_ms() < step_end)
            sample_once(&c, &attacked);
        long kib = bp_rss_kib(&b);
        if (kib > peak_kib)
            peak_kib = kib;
    }
    long long connected = info_ll(&c, "connected_clients"), mem_kills = info_ll(&c, "client_memory_disconnects");
    long long hdr_kills = info_ll(&c, "header_timeout_disconnects"), held = info_ll(&c, "client_memory");
    printf("  %d idle connections opened in %llu ms; connected_clients %lld at the end\n", conns,
           (unsigned long long)open_ms, connected);
    print_sampled("alone (baseline):", &alone);
    print_sampled("under pressure:", &attacked);
    printf("  RSS %ld KiB alone, peak %ld KiB under pressure (+%ld KiB; max-client-memory 262144 KiB)\n", base_kib,
           peak_kib, peak_kib - base_kib);
    printf(
        "  the well-behaved DLQ LIST COUNT 100: %zu messages, %zu payload bytes, in %.0f ms (max-pull-bytes 16 MiB)\n",
        list_n, list_bytes, (double)list_us / 1000.0);
    printf("  closed: %lld over max-client-memory, %lld at header-timeout; clients hold %lld bytes now\n", mem_kills,
           hdr_kills, held);
    latency_t ap = latency_of(alone.ping, alone.n), bp = latency_of(attacked.ping, attacked.n);
    latency_t as = latency_of(alone.send, alone.n), bs = latency_of(attacked.send, attacked.n);
    printf("RESULT pressure%s conns=%d ping_p50_us=%.0f/%.0f ping_p99_us=%.0f/%.0f send_p50_us=%.0f/%.0f "
           "send_p99_us=%.0f/%.0f send_max_us=%.0f/%.0f rss_kib=%ld/%ld budget_kib=262144 memory_kills=%lld "
           "header_kills=%lld\n\n",
           binary ? "_baseline" : "", conns, ap.p50_us, bp.p50_us, ap.p99_us, bp.p99_us, as.p50_us, bs.p50_us,
           as.p99_us, bs.p99_us, as.max_us, bs.max_us, base_kib, peak_kib, mem_kills, hdr_kills);
    fflush(stdout);
    for (int i = 0; i < conns; i++)
        close(idle[i]);
    free(idle);
    for (int i = 0; i < NONREADERS; i++)
        close(nonreaders[i]);
    for (int i = 0; i < TRICKLERS; i++)
        if (tricklers[i] >= 0)
            close(tricklers[i]);
    free(alone.ping);
    free(alone.send);
    free(attacked.ping);
    free(attacked.send);
    rc_close(&lister);
    rc_close(&c);
    bp_destroy(&b);
}

/* ---- main -------------------------------------------------------------------------- */

static void usage(FILE *f)
{
    fprintf(f, "usage: hourglass-limits-bench [--only parked|pressure] [--parked N] [-n N] [--conns N]\n"
               "                              [--baseline-broker PATH]\n"
               "Prints what blocked PULLs and hostile clients cost a well-behaved client, beside a baseline\n"
               "measured in the same run.\n");
}

int main(int argc, char **argv)
{
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
            usage(stdout);
            return 0;
        } else if (strcmp(a, "--only") == 0 && v != NULL) {
            opt.only = v;
        } else if (strcmp(a, "--parked") == 0 && v != NULL) {
            opt.parked = atoi(v);
        } else if (strcmp(a, "-n") == 0 && v != NULL) {
            opt.n = atol(v);
        } else if (strcmp(a, "--conns") == 0 && v != NULL) {
            opt.conns = atoi(v);
        } else if (strcmp(a, "--baseline-broker") == 0 && v != NULL) {
            opt.baseline_broker = v;
        } else {
            usage(stderr);
            return 2;
        }
        i++;
    }
    if (opt.parked < 1 || opt.n < 10 || opt.conns < 0)
        tu_die(PROGRAM, "--parked must be at least 1, -n at least 10, --conns not negative");
    if (opt.only == NULL || strcmp(opt.only, "parked") == 0)
        part_parked();
    if (opt.only == NULL || strcmp(opt.only, "pressure") == 0) {
        if (opt.baseline_broker != NULL)
            part_pressure(opt.baseline_broker);
        part_pressure(NULL);
    }
    return 0;
}
