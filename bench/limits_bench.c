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
 *
 * The open-files limit of this process and of the broker is raised as needed
 * (root may raise the hard limit).
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

#include "tests/helpers/broker_proc.h"
#include "tests/helpers/testutil.h"

static struct {
    const char *only;
    int parked;
    long n;
    const char *baseline_broker;
} opt = { NULL, 10000, 3000, NULL };

static void die(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));
static void die(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "hourglass-limits-bench: ");
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\n");
    va_end(ap);
    exit(1);
}

static uint64_t now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000 + (uint64_t)ts.tv_nsec / 1000;
}

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
        die("getrlimit: %s", strerror(errno));
    if (rl.rlim_cur != RLIM_INFINITY && rl.rlim_cur >= (rlim_t)want)
        return;
    struct rlimit up = rl;
    up.rlim_cur = (rlim_t)want;
    if (up.rlim_max != RLIM_INFINITY && up.rlim_max < (rlim_t)want)
        up.rlim_max = (rlim_t)want;
    if (setrlimit(RLIMIT_NOFILE, &up) == 0)
        return;
    if (rl.rlim_max != RLIM_INFINITY && rl.rlim_max < (rlim_t)want)
        die("this run needs %ld descriptors and the hard open-files limit is %llu (raising it: %s)", want,
            (unsigned long long)rl.rlim_max, strerror(errno));
    rl.rlim_cur = (rlim_t)want;
    if (setrlimit(RLIMIT_NOFILE, &rl) != 0)
        die("cannot raise the open-files limit to %ld: %s", want, strerror(errno));
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
    memset(b, 0, sizeof *b);
    b->nofile = nofile;
    char err[8192];
    int rc = bp_start(b, flags, err, sizeof err);
    if (binary != NULL) {
        if (keep[0])
            setenv("HG_BROKER", keep, 1);
        else
            unsetenv("HG_BROKER");
    }
    if (rc != 0)
        die("cannot start the broker: %s", err);
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
        die("out of memory");
    static const char payload[] = "0123456789012345678901234567890123456789012345678901234567890123";
    for (long i = 0; i < n; i++) {
        uint64_t t = now_us();
        resp_reply_t *r = rc_cmd(c, "SEND", topic, payload, NULL);
        if (r == NULL || r->type == RESP_REPLY_ERROR) {
            char e[300];
            die("SEND: %s", r == NULL ? c->err : rc_describe(r, e, sizeof e));
        }
        resp_reply_free(r);
        v[i] = now_us() - t;
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
        die("connect: %s", e);
    send_latency(&c, "busy", opt.n / 10 + 1); /* warm up */
    res.alone = send_latency(&c, "busy", opt.n);

    rc_conn_t *waiters = calloc((size_t)opt.parked, sizeof *waiters);
    if (waiters == NULL)
        die("out of memory");
    for (int i = 0; i < opt.parked; i++) {
        if (bp_connect(&b, &waiters[i], e, sizeof e) != 0)
            die("connection %d of %d: %s", i + 1, opt.parked, e);
        rc_appendl(&waiters[i], "PULL", "waiters", "idle", "BLOCK", "0", NULL);
        if (rc_flush(&waiters[i], 0) != 0)
            die("PULL %d: %s", i + 1, waiters[i].err);
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

/* ---- main -------------------------------------------------------------------------- */

static void usage(FILE *f)
{
    fprintf(f, "usage: hourglass-limits-bench [--only parked] [--parked N] [-n N] [--baseline-broker PATH]\n"
               "Prints what blocked PULLs cost a SEND, beside a baseline measured in the same run.\n");
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
        } else if (strcmp(a, "--baseline-broker") == 0 && v != NULL) {
            opt.baseline_broker = v;
        } else {
            usage(stderr);
            return 2;
        }
        i++;
    }
    if (opt.parked < 1 || opt.n < 10)
        die("--parked must be at least 1 and -n at least 10");
    if (opt.only == NULL || strcmp(opt.only, "parked") == 0)
        part_parked();
    return 0;
}
