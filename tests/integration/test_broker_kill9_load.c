/*
 * tests/integration/test_broker_kill9_load.c — kill -9 under load loses nothing acknowledged.
 *
 * "producers": several connections (threads) pipeline SENDs (128 in flight
 * each, a mix of undelayed and LEVEL 1) and record every id the broker
 * acknowledged. The broker is SIGKILLed mid-stream, restarted on the same dir
 * and port, and one group pulls everything (acking as it goes, so no lease
 * redelivery happens). Every acknowledged id must be delivered, with its own
 * payload, and no id twice. Ids delivered that no producer saw acknowledged
 * (the batch in flight at the kill) are allowed and counted.
 *
 * "consumer": the broker is SIGKILLed while a consumer pulls and acks. After
 * the restart the same group drains the topic: every message is delivered at
 * least once over both runs; a message whose ACK was answered before the kill
 * never comes back; one delivered but never acknowledged (the consumer holds
 * every other batch) comes back — the documented lease redelivery (lease
 * expiry → retry, reconsume 1) — and nothing is delivered twice after the
 * restart. A short level table (--levels) keeps the
 * retry wait short.
 *
 * Threads only record; the main thread asserts (CUnit is not thread-safe).
 *
 * Run one suite: ./tests/integration/test_broker_kill9_load kill9
 */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <CUnit/CUnit.h>

#include "tests/helpers/broker_test.h"
#include "tests/helpers/testutil.h"

#define PRODUCERS        4
#define WINDOW           128   /* SENDs in flight per connection */
#define KILL_AFTER_ACKED 60000 /* kill once this many SENDs were acknowledged ... */
#define KILL_MIN_MS      300   /* ... and the load ran at least this long, */
#define KILL_AFTER_MS    8000  /* or after this long, whichever comes first */
#define MAX_PER_PRODUCER 2000000

/* An acknowledged message: its id and the payload sequence it carried. */
typedef struct acked {
    uint64_t id;
    uint32_t producer, seq;
} acked_t;

typedef struct producer {
    int index, port;
    int *total; /* shared acknowledged count (atomic) */
    acked_t *acked;
    int n;
    int sent;
    char why_stopped[300];
} producer_t;

static void *producer_main(void *arg)
{
    producer_t *p = arg;
    rc_conn_t c;
    if (rc_connect(&c, "127.0.0.1", p->port, 10000) != 0) {
        snprintf(p->why_stopped, sizeof p->why_stopped, "connect: %s", c.err);
        return NULL;
    }
    /* seq of each SEND in flight, in order (a ring) */
    uint32_t ring[WINDOW];
    int head = 0, inflight = 0;
    uint32_t seq = 0;
    for (;;) {
        while (inflight < WINDOW && seq < MAX_PER_PRODUCER) {
            char payload[48];
            snprintf(payload, sizeof payload, "p%d-%u", p->index, seq);
            if (seq % 3 == 0)
                rc_appendl(&c, "SEND", "load", payload, "LEVEL", "1", NULL);
            else
                rc_appendl(&c, "SEND", "load", payload, NULL);
            ring[(head + inflight) % WINDOW] = seq++;
            inflight++;
            p->sent++;
        }
        if (rc_flush(&c, 30000) != 0) {
            snprintf(p->why_stopped, sizeof p->why_stopped, "flush: %s", c.err);
            break;
        }
        /* Read at least half the window before topping it up. */
        int stop = 0;
        while (inflight > WINDOW / 2 || (seq >= MAX_PER_PRODUCER && inflight > 0)) {
            resp_reply_t *r = rc_read(&c, 30000);
            if (r == NULL) {
                snprintf(p->why_stopped, sizeof p->why_stopped, "read: %s", c.err);
                stop = 1;
                break;
            }
            if (r->type == RESP_REPLY_BULK && r->len == 16) {
                char id[17];
                memcpy(id, r->str, 16);
                id[16] = '\0';
                p->acked[p->n].id = rc_id_num(id);
                p->acked[p->n].producer = (uint32_t)p->index;
                p->acked[p->n].seq = ring[head];
                p->n++;
                __atomic_add_fetch(p->total, 1, __ATOMIC_SEQ_CST);
            } else {
                char d[300];
                snprintf(p->why_stopped, sizeof p->why_stopped, "SEND reply %s", rc_describe(r, d, sizeof d));
                resp_reply_free(r);
                stop = 1;
                break;
            }
            resp_reply_free(r);
            head = (head + 1) % WINDOW;
            inflight--;
        }
        if (stop || (seq >= MAX_PER_PRODUCER && inflight == 0))
            break;
    }
    rc_close(&c);
    return NULL;
}

static int cmp_acked(const void *a, const void *b)
{
    uint64_t x = ((const acked_t *)a)->id, y = ((const acked_t *)b)->id;
    return x < y ? -1 : x > y;
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

struct kill_ctx {
    int *total;
    uint64_t start, end;
};
static int enough_sent(void *ctx)
{
    struct kill_ctx *k = ctx;
    uint64_t now = tu_now_mono_ms();
    return (__atomic_load_n(k->total, __ATOMIC_SEQ_CST) >= KILL_AFTER_ACKED && now >= k->start + KILL_MIN_MS) ||
           now >= k->end;
}

/* Parse "p<producer>-<seq>"; 0 / -1. */
static int parse_payload(const char *p, size_t n, uint32_t *producer, uint32_t *seq)
{
    char buf[48];
    if (n == 0 || n >= sizeof buf)
        return -1;
    memcpy(buf, p, n);
    buf[n] = '\0';
    unsigned a, b;
    if (sscanf(buf, "p%u-%u", &a, &b) != 2)
        return -1;
    *producer = a;
    *seq = b;
    return 0;
}

struct drained_ctx {
    long long last[4];
};
static int group_drained(void *ctx)
{
    struct drained_ctx *d = ctx;
    static const char *const f[] = { "ready", "inflight", "retry-delayed", "retry-ready" };
    char e[300];
    for (int i = 0; i < 4; i++)
        if (bp_group_field(&bt_conn, "g", f[i], &d->last[i], e, sizeof e) != 1 || d->last[i] != 0)
            return 0;
    return 1;
}

static void test_kill9_producers(void)
{
    char e[8192];
    bt_start(NULL);
    BP_REQUIRE(bp_ok_cmd(&bt_conn, e, sizeof e, "GROUP", "CREATE", "g", "load", NULL) == 0, "%s", e);
    rc_close(&bt_conn);

    static producer_t ps[PRODUCERS];
    pthread_t th[PRODUCERS];
    int total = 0;
    for (int i = 0; i < PRODUCERS; i++) {
        memset(&ps[i], 0, sizeof ps[i]);
        ps[i].index = i;
        ps[i].port = bt_broker.port;
        ps[i].total = &total;
        ps[i].acked = malloc(sizeof(acked_t) * MAX_PER_PRODUCER);
        BP_REQUIRE(ps[i].acked != NULL, "malloc");
        BP_REQUIRE(pthread_create(&th[i], NULL, producer_main, &ps[i]) == 0, "pthread_create");
    }
    uint64_t t0 = tu_now_mono_ms();
    struct kill_ctx kc = { &total, t0, t0 + KILL_AFTER_MS };
    tu_poll_until(enough_sent, &kc, KILL_AFTER_MS + 1000, 5);
    int at_kill = __atomic_load_n(&total, __ATOMIC_SEQ_CST);
    BP_REQUIRE(bp_kill9(&bt_broker) == 0, "kill -9");
    uint64_t t_kill = tu_now_mono_ms();
    for (int i = 0; i < PRODUCERS; i++)
        pthread_join(th[i], NULL);

    int nacked = 0, nsent = 0;
    for (int i = 0; i < PRODUCERS; i++) {
        nacked += ps[i].n;
        nsent += ps[i].sent;
    }
    printf("\n    %d SENDs acknowledged in %" PRIu64 " ms (%d at the kill), %d sent; producers stopped by: %s\n",
           nacked, t_kill - t0, at_kill, nsent, ps[0].why_stopped);
    BP_CHECK(nacked > 0, "no SEND was acknowledged before the kill");
    BP_CHECK(nsent > nacked, "every SEND was answered before the kill: nothing was in flight (%d)", nsent);

    acked_t *all = malloc(sizeof(acked_t) * (size_t)(nacked > 0 ? nacked : 1));
    BP_REQUIRE(all != NULL, "malloc");
    int k = 0;
    for (int i = 0; i < PRODUCERS; i++) {
        memcpy(all + k, ps[i].acked, sizeof(acked_t) * (size_t)ps[i].n);
        k += ps[i].n;
        free(ps[i].acked);
        ps[i].acked = NULL;
    }
    qsort(all, (size_t)nacked, sizeof *all, cmp_acked);
    for (int i = 1; i < nacked; i++)
        BP_CHECK(all[i].id != all[i - 1].id, "the broker acknowledged id %016" PRIx64 " twice", all[i].id);

    BP_REQUIRE(bp_restart(&bt_broker, e, sizeof e) == 0, "restart after kill -9: %s", e);
    printf("    restart after kill -9 to first PONG: %" PRIu64 " ms\n", tu_now_mono_ms() - bt_broker.start_ms);
    BP_REQUIRE(bp_connect(&bt_broker, &bt_conn, e, sizeof e) == 0, "%s", e);

    /* Pull everything with one group, acking each batch. */
    size_t cap = (size_t)nsent + 16, nd = 0;
    uint64_t *delivered = malloc(sizeof(uint64_t) * cap);
    BP_REQUIRE(delivered != NULL, "malloc");
    int found_acked = 0, bad_payload = 0, empty_in_a_row = 0;
    uint64_t end = tu_now_mono_ms() + 90000;
    while (tu_now_mono_ms() < end && empty_in_a_row < 1) {
        resp_reply_t *r = bp_pull(&bt_conn, e, sizeof e, "g", "load", "COUNT", "1000", "BLOCK", "1500", NULL);
        BP_REQUIRE(r != NULL, "%s", e);
        if (r->count == 0) {
            /* Done when every acknowledged id came, or when nothing is left anywhere
             * (LEVEL 1 ones need their second first). */
            resp_reply_free(r);
            struct drained_ctx dc;
            uint64_t depth1 = 1;
            if (found_acked >= nacked ||
                (group_drained(&dc) && bp_level(&bt_conn, 1, NULL, &depth1, NULL, e, sizeof e) == 0 && depth1 == 0))
                empty_in_a_row++;
            continue;
        }
        for (size_t i = 0; i < r->count; i++) {
            rc_msg_t m;
            BP_REQUIRE(rc_msg_at(r, i, &m, e, sizeof e) == 0, "%s", e);
            BP_CHECK(m.reconsume == 0, "%s delivered with reconsume %lld", m.id, m.reconsume);
            if (nd < cap)
                delivered[nd++] = m.id_num;
            acked_t key = { .id = m.id_num };
            acked_t *a = bsearch(&key, all, (size_t)nacked, sizeof *all, cmp_acked);
            if (a != NULL) {
                found_acked++;
                uint32_t prod, seq;
                if (parse_payload(m.payload, m.payload_len, &prod, &seq) != 0 || prod != a->producer || seq != a->seq)
                    bad_payload++;
            }
        }
        long long rel = -1;
        BP_CHECK(bt_ack_reply(&bt_conn, "g", r, &rel, e, sizeof e) == 0 && rel == (long long)r->count,
                 "ACK released %lld of %zu %s", rel, r->count, e);
        resp_reply_free(r);
    }
    qsort(delivered, nd, sizeof *delivered, cmp_u64);
    int dups = 0;
    for (size_t i = 1; i < nd; i++)
        if (delivered[i] == delivered[i - 1])
            dups++;
    int missing = 0;
    uint64_t first_missing = 0;
    for (int i = 0; i < nacked; i++)
        if (bsearch(&all[i].id, delivered, nd, sizeof *delivered, cmp_u64) == NULL) {
            if (missing++ == 0)
                first_missing = all[i].id;
        }
    printf("    delivered after restart: %zu (acknowledged %d, of those found %d; %zu not acknowledged "
           "to a producer)\n",
           nd, nacked, nacked - missing, nd - (size_t)(nacked - missing));
    BP_CHECK(missing == 0, "%d acknowledged ids were never delivered (first %016" PRIx64 ")", missing, first_missing);
    BP_CHECK(dups == 0, "%d ids were delivered twice", dups);
    BP_CHECK(bad_payload == 0, "%d messages came back with another producer's payload", bad_payload);
    BP_CHECK(nd <= (size_t)nsent, "delivered %zu, more than the %d ever sent", nd, nsent);
    free(delivered);
    free(all);
}

/* ---- kill -9 while consuming ---- */

#define CONSUME_N       3000
#define CONSUME_KILL_AT 1200

typedef struct consumer_rec {
    int port;
    int *delivered_count; /* atomic */
    uint64_t ids[CONSUME_N * 2];
    int n; /* delivered before the kill */
    uint64_t acked[CONSUME_N * 2];
    int nacked; /* ACK answered with the full count */
    uint64_t held[CONSUME_N * 2];
    int nheld; /* delivered, never ACKed (every other batch) */
    int batches;
    char why[300];
} consumer_rec_t;

static void *consumer_main(void *arg)
{
    consumer_rec_t *cr = arg;
    rc_conn_t c;
    if (rc_connect(&c, "127.0.0.1", cr->port, 10000) != 0) {
        snprintf(cr->why, sizeof cr->why, "connect: %s", c.err);
        return NULL;
    }
    char e[300];
    for (;;) {
        resp_reply_t *r = bp_pull(&c, e, sizeof e, "g", "work", "COUNT", "50", "LEASE", "5000", "BLOCK", "1000", NULL);
        if (r == NULL) {
            snprintf(cr->why, sizeof cr->why, "%s", e);
            break;
        }
        const char *argv[2 + 50];
        static __thread char idt[50][17];
        int argc = 0;
        argv[argc++] = "ACK";
        argv[argc++] = "g";
        uint64_t batch[50];
        int nb = 0;
        for (size_t i = 0; i < r->count && i < 50; i++) {
            rc_msg_t m;
            if (rc_msg_at(r, i, &m, e, sizeof e) != 0)
                continue;
            batch[nb++] = m.id_num;
            cr->ids[cr->n++] = m.id_num;
            snprintf(idt[i], sizeof idt[i], "%.16s", m.id);
            argv[argc++] = idt[i];
        }
        resp_reply_free(r);
        __atomic_add_fetch(cr->delivered_count, nb, __ATOMIC_SEQ_CST);
        if (nb == 0)
            continue;
        if (cr->batches++ % 2 == 1) { /* hold this batch: no ACK, the lease must bring it back */
            memcpy(cr->held + cr->nheld, batch, sizeof(uint64_t) * (size_t)nb);
            cr->nheld += nb;
            continue;
        }
        resp_reply_t *a = rc_cmdv(&c, argc, argv, NULL);
        long long rel = -1;
        if (a == NULL) {
            snprintf(cr->why, sizeof cr->why, "ACK: %s", c.err);
            break;
        }
        if (rc_int(a, &rel) == 0 && rel == nb) {
            memcpy(cr->acked + cr->nacked, batch, sizeof(uint64_t) * (size_t)nb);
            cr->nacked += nb;
        }
        resp_reply_free(a);
    }
    rc_close(&c);
    return NULL;
}

struct count_ctx {
    int *count;
    int want;
};
static int count_reached(void *ctx)
{
    struct count_ctx *c = ctx;
    return __atomic_load_n(c->count, __ATOMIC_SEQ_CST) >= c->want;
}

static void test_kill9_consumer(void)
{
    /* Level 3 (the first retry) is 300 ms here, so a lease redelivery takes lease + 0.3 s. */
    static const char *const flags[] = { "--levels", "100ms 200ms 300ms 1s", NULL };
    char e[8192];
    bt_start(flags);
    static uint64_t sent[CONSUME_N];
    for (int i = 0; i < CONSUME_N; i++)
        rc_appendl(&bt_conn, "SEND", "work", "w", NULL);
    BP_REQUIRE(rc_flush(&bt_conn, 0) == 0, "%s", bt_conn.err);
    for (int i = 0; i < CONSUME_N; i++) {
        resp_reply_t *r = rc_read(&bt_conn, 0);
        BP_REQUIRE(r != NULL && r->type == RESP_REPLY_BULK && r->len == 16, "SEND %d: %s", i,
                   r == NULL ? bt_conn.err : rc_describe(r, e, sizeof e));
        char id[17];
        memcpy(id, r->str, 16);
        id[16] = '\0';
        sent[i] = rc_id_num(id);
        resp_reply_free(r);
    }
    rc_close(&bt_conn);

    static consumer_rec_t cr;
    memset(&cr, 0, sizeof cr);
    int delivered = 0;
    cr.port = bt_broker.port;
    cr.delivered_count = &delivered;
    pthread_t th;
    BP_REQUIRE(pthread_create(&th, NULL, consumer_main, &cr) == 0, "pthread_create");
    struct count_ctx cc = { &delivered, CONSUME_KILL_AT };
    tu_poll_until(count_reached, &cc, 30000, 1);
    BP_REQUIRE(bp_kill9(&bt_broker) == 0, "kill -9");
    pthread_join(th, NULL);
    printf("\n    before the kill: %d delivered, %d acknowledged, %d held without ACK (consumer stopped by: %s)\n",
           cr.n, cr.nacked, cr.nheld, cr.why);
    BP_CHECK(cr.n >= CONSUME_KILL_AT, "only %d delivered before the kill", cr.n);

    BP_REQUIRE(bp_restart(&bt_broker, e, sizeof e) == 0, "restart after kill -9: %s", e);
    BP_REQUIRE(bp_connect(&bt_broker, &bt_conn, e, sizeof e) == 0, "%s", e);
    static uint64_t after[CONSUME_N * 2];
    static long long after_reconsume[CONSUME_N * 2];
    int na = 0;
    uint64_t end = tu_now_mono_ms() + 60000;
    struct drained_ctx dc;
    while (tu_now_mono_ms() < end) {
        resp_reply_t *r = bp_pull(&bt_conn, e, sizeof e, "g", "work", "COUNT", "500", "BLOCK", "500", NULL);
        BP_REQUIRE(r != NULL, "%s", e);
        if (r->count == 0) {
            resp_reply_free(r);
            if (group_drained(&dc))
                break;
            continue;
        }
        for (size_t i = 0; i < r->count; i++) {
            rc_msg_t m;
            BP_REQUIRE(rc_msg_at(r, i, &m, e, sizeof e) == 0, "%s", e);
            BP_REQUIRE(na < CONSUME_N * 2, "far too many deliveries after the restart");
            after_reconsume[na] = m.reconsume;
            after[na++] = m.id_num;
        }
        long long rel = -1;
        BP_CHECK(bt_ack_reply(&bt_conn, "g", r, &rel, e, sizeof e) == 0 && rel == (long long)r->count,
                 "ACK after restart released %lld of %zu %s", rel, r->count, e);
        resp_reply_free(r);
    }
    BP_CHECK(group_drained(&dc),
             "group not drained after 60 s: ready %lld inflight %lld retry-delayed %lld "
             "retry-ready %lld",
             dc.last[0], dc.last[1], dc.last[2], dc.last[3]);

    /* Check the accounting. */
    qsort(cr.acked, (size_t)cr.nacked, sizeof(uint64_t), cmp_u64);
    qsort(cr.ids, (size_t)cr.n, sizeof(uint64_t), cmp_u64);
    int redelivered_acked = 0, redelivered_unacked = 0, fresh = 0, lost = 0, dup_after = 0, dup_before = 0;
    long long bad_reconsume = 0;
    for (int i = 1; i < cr.n; i++)
        if (cr.ids[i] == cr.ids[i - 1])
            dup_before++;
    for (int i = 0; i < na; i++) {
        if (bsearch(&after[i], cr.acked, (size_t)cr.nacked, sizeof(uint64_t), cmp_u64) != NULL)
            redelivered_acked++;
        else if (bsearch(&after[i], cr.ids, (size_t)cr.n, sizeof(uint64_t), cmp_u64) != NULL) {
            redelivered_unacked++;
            if (after_reconsume[i] < 1)
                bad_reconsume++;
        } else
            fresh++;
    }
    uint64_t *sorted_after = malloc(sizeof(uint64_t) * (size_t)(na > 0 ? na : 1));
    BP_REQUIRE(sorted_after != NULL, "malloc");
    memcpy(sorted_after, after, sizeof(uint64_t) * (size_t)na);
    qsort(sorted_after, (size_t)na, sizeof(uint64_t), cmp_u64);
    for (int i = 1; i < na; i++)
        if (sorted_after[i] == sorted_after[i - 1])
            dup_after++;
    for (int i = 0; i < CONSUME_N; i++)
        if (bsearch(&sent[i], cr.ids, (size_t)cr.n, sizeof(uint64_t), cmp_u64) == NULL &&
            bsearch(&sent[i], sorted_after, (size_t)na, sizeof(uint64_t), cmp_u64) == NULL)
            lost++;
    int held_missing = 0;
    for (int i = 0; i < cr.nheld; i++)
        if (bsearch(&cr.held[i], sorted_after, (size_t)na, sizeof(uint64_t), cmp_u64) == NULL)
            held_missing++;
    free(sorted_after);
    BP_CHECK(cr.nheld > 0, "the consumer held no lease at the kill: the redelivery path was not exercised");
    BP_CHECK(held_missing == 0, "%d of %d messages leased but never ACKed before the kill did not come back",
             held_missing, cr.nheld);
    printf("    after the restart: %d delivered: %d never delivered before, %d lease redeliveries of unacked "
           "messages (%lld with reconsume 0)\n",
           na, fresh, redelivered_unacked, bad_reconsume);
    BP_CHECK(lost == 0, "%d messages were never delivered", lost);
    BP_CHECK(redelivered_acked == 0, "%d messages whose ACK was answered before the kill came back", redelivered_acked);
    BP_CHECK(dup_after == 0, "%d messages delivered twice after the restart", dup_after);
    BP_CHECK(dup_before == 0, "%d messages delivered twice before the kill", dup_before);
    BP_CHECK(fresh + cr.n - dup_before >= CONSUME_N, "accounting: %d fresh + %d before < %d", fresh, cr.n, CONSUME_N);
}

static const tu_test_t kill9_tests[] = {
    { "kill -9 under pipelined SENDs loses no acknowledged id", test_kill9_producers },
    { "kill -9 while consuming: acked never again, unacked by lease", test_kill9_consumer },
    { NULL, NULL },
};

int main(int argc, char **argv)
{
    return bt_main(argc, argv, "kill9", kill9_tests);
}
