/*
 * bench/auth_bench.c — what AUTH costs, and that it does not stall the event
 * loop (docs/security.md). Prints figures; never fails on a slow machine.
 *
 *   ./auth-bench [ROUNDS]
 *
 * Starts the real broker with a users file whose hashes have the default
 * cost (scrypt ln=15), then measures:
 *   1. the raw cost of one verification in this process (passwd_verify): the
 *      baseline an AUTH cannot beat without the cache;
 *   2. AUTH round trips: the first (verified on the AUTH thread) and repeated
 *      ones (answered from the verified-password cache on the loop);
 *   3. PING round trips of a logged-in client, alone (baseline) and while 4
 *      other clients keep sending AUTH with wrong passwords (the AUTH thread
 *      busy all the time): the loop's latency must not follow the hash's.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/passwd.h"
#include "tests/helpers/broker_proc.h"
#include "tests/helpers/testutil.h"

#define ATTACKERS 4

static bp_broker_t broker;
static atomic_int stop_attack;
static atomic_long attempts;

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

/* p50 and p99 of n samples in microseconds (sorts v). */
static void percentiles(uint64_t *v, size_t n, double *p50, double *p99)
{
    qsort(v, n, sizeof *v, cmp_u64);
    *p50 = (double)v[n / 2];
    *p99 = (double)v[(n * 99) / 100];
}

/* PING round trips on c: p50/p99 in microseconds. */
static int ping_rtts(rc_conn_t *c, size_t n, double *p50, double *p99)
{
    uint64_t *v = malloc(n * sizeof *v);
    for (size_t i = 0; i < n; i++) {
        uint64_t t = tu_now_mono_us();
        resp_reply_t *r = rc_cmd(c, "PING", NULL);
        if (r == NULL) {
            free(v);
            return -1;
        }
        resp_reply_free(r);
        v[i] = tu_now_mono_us() - t;
    }
    percentiles(v, n, p50, p99);
    free(v);
    return 0;
}

static void *attacker(void *arg)
{
    (void)arg;
    char e[256];
    while (!atomic_load(&stop_attack)) {
        rc_conn_t c;
        if (bp_connect(&broker, &c, e, sizeof e) != 0)
            break;
        resp_reply_t *r = rc_cmd(&c, "AUTH", "ops", "not-the-password", NULL);
        resp_reply_free(r);
        atomic_fetch_add(&attempts, 1);
        rc_close(&c);
    }
    return NULL;
}

int main(int argc, char **argv)
{
    size_t rounds = argc > 1 ? (size_t)atol(argv[1]) : 2000;
    char dir[512], path[600], hash[PASSWD_HASH_MAX], err[8192], line[600];
    passwd_params_t p;
    passwd_params_default(&p, PASSWD_SCRYPT);

    /* 1. the raw cost */
    if (passwd_hash("pw-ops", 6, &p, hash, sizeof hash, err, sizeof err) != 0) {
        fprintf(stderr, "auth-bench: %s\n", err);
        return 1;
    }
    uint64_t v[10];
    for (int i = 0; i < 10; i++) {
        uint64_t t = tu_now_mono_us();
        passwd_verify(hash, "pw-ops", 6, err, sizeof err);
        v[i] = tu_now_mono_us() - t;
    }
    double raw50, raw99;
    percentiles(v, 10, &raw50, &raw99);
    printf("passwd_verify scrypt ln=15 r=8 p=1 in-process:  p50 %8.1f ms\n", raw50 / 1000);

    if (tu_mkdtemp("hg-auth-bench", dir, sizeof dir) != 0)
        return 1;
    snprintf(path, sizeof path, "%s/users", dir);
    snprintf(line, sizeof line, "ops admin %s\n", hash);
    tu_write_file(path, line);
    const char *extra[] = { "--users-file", path, NULL };
    if (bp_start(&broker, extra, err, sizeof err) != 0) {
        fprintf(stderr, "auth-bench: %s\n", err);
        return 1;
    }

    /* 2. AUTH: first (AUTH thread) and repeated (cache) */
    rc_conn_t c;
    bp_connect(&broker, &c, err, sizeof err);
    uint64_t t = tu_now_mono_us();
    resp_reply_t *r = rc_cmd(&c, "AUTH", "ops", "pw-ops", NULL);
    uint64_t first = tu_now_mono_us() - t;
    int ok = r != NULL && rc_str_eq(r, "OK");
    resp_reply_free(r);
    uint64_t cached[200];
    for (int i = 0; i < 200; i++) {
        t = tu_now_mono_us();
        r = rc_cmd(&c, "AUTH", "ops", "pw-ops", NULL);
        cached[i] = tu_now_mono_us() - t;
        resp_reply_free(r);
    }
    double c50, c99;
    percentiles(cached, 200, &c50, &c99);
    printf("AUTH, first (verified on the AUTH thread):     %8.1f ms%s\n", (double)first / 1000,
           ok ? "" : "  (REFUSED?)");
    printf("AUTH, again (verified-password cache):          p50 %8.1f us  p99 %8.1f us\n", c50, c99);

    /* 3. PING alone, then while the AUTH thread is kept busy */
    double b50, b99, a50, a99;
    ping_rtts(&c, rounds, &b50, &b99);
    pthread_t th[ATTACKERS];
    for (int i = 0; i < ATTACKERS; i++)
        pthread_create(&th[i], NULL, attacker, NULL);
    /* wait until the attack runs */
    while (atomic_load(&attempts) < ATTACKERS)
        ;
    uint64_t a0 = (uint64_t)atomic_load(&attempts), t0 = tu_now_mono_us();
    ping_rtts(&c, rounds, &a50, &a99);
    uint64_t a1 = (uint64_t)atomic_load(&attempts), t1 = tu_now_mono_us();
    atomic_store(&stop_attack, 1);
    for (int i = 0; i < ATTACKERS; i++)
        pthread_join(th[i], NULL);
    printf("PING, no AUTH load (baseline):                  p50 %8.1f us  p99 %8.1f us\n", b50, b99);
    printf("PING, %d clients failing AUTH meanwhile:         p50 %8.1f us  p99 %8.1f us  (%.1f failed AUTHs/s)\n",
           ATTACKERS, a50, a99, (double)(a1 - a0) * 1e6 / (double)(t1 - t0));
    rc_close(&c);
    bp_destroy(&broker);
    tu_rmtree(dir);
    return 0;
}
