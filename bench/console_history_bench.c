/*
 * bench/console_history_bench.c — what the console's overview history costs
 * (docs/console.md "Memory"): for each history / sample-interval, the ring's
 * bytes, the "history" reply's bytes and the time to render it, one point
 * per sample (what the console kept before console/history.c bounded it,
 * the same-run baseline) against at most HISTORY_POINTS_MAX points. Prints
 * figures; never fails on a slow machine.
 *
 *   ./console-history-bench       (chrt -f 10 for steadier times)
 */
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "console/history.h"

#define BENCH_RENDERS 5 /* the best of this many renders is shown */

static double mono_ms(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e3 + (double)t.tv_nsec / 1e6;
}

/* Fill a history of samples samples (200 ms apart, a few more than it keeps) kept in max_points points, then
 * render it BENCH_RENDERS times. */
static void run(const char *name, size_t samples, size_t max_points)
{
    history_t h;
    buf_t out;
    buf_init(&out);
    history_init(&h, samples, max_points);
    for (size_t i = 0; i < samples + 10; i++) {
        history_sample_t x;
        memset(&x, 0, sizeof x);
        x.t_ms = 1780000000000ULL + (uint64_t)i * 200;
        x.broker_ok = 1;
        x.sends = i * 37;
        x.deliveries = i * 35;
        x.acks = i * 33;
        x.lateness_p50_ms = 12.5 + (double)(i % 7);
        x.lateness_p99_ms = 48.25 + (double)(i % 13);
        x.overdue = (long long)(i % 5);
        history_push(&h, &x);
    }
    double best = 0;
    for (int r = 0; r < BENCH_RENDERS; r++) {
        json_t j;
        buf_clear(&out);
        json_init(&j, &out);
        double t0 = mono_ms();
        history_json(&h, &j);
        double took = mono_ms() - t0;
        if (r == 0 || took < best)
            best = took;
    }
    printf("%-22s samples %8zu  %-17s points %8zu  ring %10zu B  reply %11zu B  render %9.3f ms\n", name, samples,
           max_points == samples ? "point per sample" : "bounded", h.count, h.cap * sizeof *h.ring, out.len, best);
    history_free(&h);
    buf_free(&out);
}

int main(void)
{
    static const struct {
        const char *name;
        size_t samples; /* history / sample-interval + 1 */
    } cases[] = {
        { "1h @ 5s (default)", 721 },
        { "1h @ 1s (scripts/soak)", 3601 },
        { "1d @ 1s", 86401 },
        { "7d @ 200ms (largest)", 3024001 },
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        run(cases[i].name, cases[i].samples, cases[i].samples);
        run(cases[i].name, cases[i].samples, HISTORY_POINTS_MAX);
    }
    return 0;
}
