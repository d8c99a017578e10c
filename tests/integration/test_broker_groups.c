/*
 * tests/integration/test_broker_groups.c — consumer groups through the real broker.
 *
 * Each test starts its own hourglass-broker and checks, over the protocol:
 *  - two groups on one topic both get every message (DESIGN §3);
 *  - within one group, two consumers pulling concurrently on two connections
 *    never get the same message, and together get all of them;
 *  - GROUP CREATE … FROM NOW / FROM FIRST, MAXRETRY; GROUP LIST fields;
 *    GROUP DEL; a group bound to another topic is an error naming both;
 *  - max-groups: a new group beyond it (GROUP CREATE, a first PULL) is refused
 *    naming the group and the limit; a restart with a lower limit than the
 *    groups on disk opens and serves them;
 *  - waiting PULLs of one group are served in arrival order;
 *  - leases written late (lease-write-delay): INFO inflight_unwritten and the
 *    /metrics gauge count them until they are written, in-flight throughout.
 *
 * The concurrent consumers are threads, each with its own connection; they
 * only record what they got, and the main thread asserts afterwards (CUnit is
 * not thread-safe).
 *
 * Run one suite: ./tests/integration/test_broker_groups groups
 */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include <inttypes.h>
#include <stdarg.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <CUnit/CUnit.h>

#include "tests/helpers/broker_test.h"
#include "tests/helpers/testutil.h"

/* SEND n undelayed messages (pipelined) to topic; ids into ids[n][32]. */
static void send_many(const char *topic, int n, char (*ids)[32], const char *tag)
{
    char e[300];
    for (int i = 0; i < n; i++) {
        char p[64];
        snprintf(p, sizeof p, "%s-%d", tag, i);
        rc_appendl(&bt_conn, "SEND", topic, p, NULL);
    }
    BP_REQUIRE(rc_flush(&bt_conn, 0) == 0, "%s", bt_conn.err);
    for (int i = 0; i < n; i++) {
        resp_reply_t *r = rc_read(&bt_conn, 0);
        BP_REQUIRE(r != NULL && r->type == RESP_REPLY_BULK && r->len < 32, "SEND %d: %s", i,
                   r == NULL ? bt_conn.err : rc_describe(r, e, sizeof e));
        memcpy(ids[i], r->str, r->len);
        ids[i][r->len] = '\0';
        resp_reply_free(r);
    }
}

/* Pull everything ready for group (COUNT 100, no BLOCK) until an empty reply,
 * acking as it goes; ids into out[max]; returns how many. */
static int drain(const char *group, const char *topic, char (*out)[32], int max)
{
    char e[1024];
    int n = 0;
    for (;;) {
        resp_reply_t *r = bp_pull(&bt_conn, e, sizeof e, group, topic, "COUNT", "100", NULL);
        BP_REQUIRE(r != NULL, "%s", e);
        if (r->count == 0) {
            resp_reply_free(r);
            return n;
        }
        for (size_t i = 0; i < r->count; i++) {
            rc_msg_t m;
            BP_REQUIRE(rc_msg_at(r, i, &m, e, sizeof e) == 0, "%s", e);
            BP_REQUIRE(n < max, "group %s got more than %d messages", group, max);
            snprintf(out[n++], 32, "%.31s", m.id);
            long long acked = 0;
            BP_CHECK(bp_int_cmd(&bt_conn, &acked, e, sizeof e, "ACK", group, m.id, NULL) == 0 && acked == 1,
                     "ACK %s %s: %lld %s", group, m.id, acked, e);
        }
        resp_reply_free(r);
    }
}

static int cmp_id(const void *a, const void *b)
{
    return strcmp((const char *)a, (const char *)b);
}

/* Both lists hold the same ids, each once. */
static void check_same_set(char (*want)[32], int nwant, char (*got)[32], int ngot, const char *what)
{
    BP_CHECK(ngot == nwant, "%s: got %d messages, want %d", what, ngot, nwant);
    qsort(want, (size_t)nwant, 32, cmp_id);
    qsort(got, (size_t)ngot, 32, cmp_id);
    for (int i = 1; i < ngot; i++)
        BP_CHECK(strcmp(got[i], got[i - 1]) != 0, "%s: id %s delivered twice", what, got[i]);
    int n = ngot < nwant ? ngot : nwant;
    for (int i = 0; i < n; i++)
        if (strcmp(want[i], got[i]) != 0) {
            BP_CHECK(0, "%s: sets differ at %d: sent %s, got %s", what, i, want[i], got[i]);
            break;
        }
}

static void test_two_groups_each_get_all(void)
{
    bt_start(NULL);
    enum {
        N = 50
    };
    static char sent[N][32], g1[N + 10][32], g2[N + 10][32];
    char e[1024];
    BP_REQUIRE(bp_ok_cmd(&bt_conn, e, sizeof e, "GROUP", "CREATE", "billing", "orders", NULL) == 0, "%s", e);
    send_many("orders", N, sent, "m");
    int n1 = drain("billing", "orders", g1, N + 10);
    /* "stock" does not exist yet: its first PULL creates it from the oldest message. */
    int n2 = drain("stock", "orders", g2, N + 10);
    check_same_set(sent, N, g1, n1, "group billing");
    check_same_set(sent, N, g2, n2, "group stock");
}

/* ---- two consumers in one group ---- */

#define CONC_N 600
typedef struct consumer {
    int port;
    int stop;   /* set by main (atomic) */
    int *total; /* shared count of received (atomic) */
    char ids[CONC_N + 50][32];
    int n;
    int pulls;
    char err[300];
} consumer_t;

static void *consumer_main(void *arg)
{
    consumer_t *cs = arg;
    rc_conn_t c;
    if (rc_connect(&c, "127.0.0.1", cs->port, 10000) != 0) {
        snprintf(cs->err, sizeof cs->err, "connect: %s", c.err);
        return NULL;
    }
    char e[300];
    while (!__atomic_load_n(&cs->stop, __ATOMIC_SEQ_CST)) {
        resp_reply_t *r = bp_pull(&c, e, sizeof e, "workers", "jobs", "COUNT", "7", "BLOCK", "300", NULL);
        if (r == NULL) {
            snprintf(cs->err, sizeof cs->err, "%s", e);
            break;
        }
        cs->pulls++;
        for (size_t i = 0; i < r->count; i++) {
            rc_msg_t m;
            if (rc_msg_at(r, i, &m, e, sizeof e) != 0) {
                snprintf(cs->err, sizeof cs->err, "%s", e);
                break;
            }
            if (cs->n < CONC_N + 50)
                snprintf(cs->ids[cs->n++], 32, "%.31s", m.id);
        }
        size_t got = r->count;
        long long rel = -1;
        if (got > 0 && (bt_ack_reply(&c, "workers", r, &rel, e, sizeof e) != 0 || rel != (long long)got))
            snprintf(cs->err, sizeof cs->err, "ACK released %lld of %zu %.200s", rel, got, e);
        resp_reply_free(r);
        if (got > 0)
            __atomic_add_fetch(cs->total, (int)got, __ATOMIC_SEQ_CST);
    }
    rc_close(&c);
    return NULL;
}

struct total_ctx {
    int *total;
    int want;
};
static int total_reached(void *ctx)
{
    struct total_ctx *t = ctx;
    return __atomic_load_n(t->total, __ATOMIC_SEQ_CST) >= t->want;
}

static void test_one_group_two_consumers(void)
{
    bt_start(NULL);
    static consumer_t cs[2];
    static char sent[CONC_N][32], got[2 * (CONC_N + 50)][32];
    int total = 0;
    pthread_t th[2];
    memset(cs, 0, sizeof cs);
    char e[1024];
    BP_REQUIRE(bp_ok_cmd(&bt_conn, e, sizeof e, "GROUP", "CREATE", "workers", "jobs", NULL) == 0, "%s", e);
    for (int i = 0; i < 2; i++) {
        cs[i].port = bt_broker.port;
        cs[i].total = &total;
        BP_REQUIRE(pthread_create(&th[i], NULL, consumer_main, &cs[i]) == 0, "pthread_create");
    }
    /* Send while both pull: in bursts, so both blocked and non-blocked PULLs are served. */
    for (int b = 0; b < CONC_N / 100; b++)
        send_many("jobs", 100, sent + b * 100, "job");
    struct total_ctx tc = { &total, CONC_N };
    int reached = tu_poll_until(total_reached, &tc, 30000, 20);
    /* Let them run a little longer so a duplicate delivery would show up. */
    struct total_ctx more = { &total, CONC_N + 1 };
    tu_poll_until(total_reached, &more, 700, 50);
    for (int i = 0; i < 2; i++)
        __atomic_store_n(&cs[i].stop, 1, __ATOMIC_SEQ_CST);
    for (int i = 0; i < 2; i++)
        pthread_join(th[i], NULL);
    BP_CHECK(reached == 0, "consumers received %d of %d within 30 s", total, CONC_N);
    for (int i = 0; i < 2; i++)
        BP_CHECK(cs[i].err[0] == '\0', "consumer %d: %s", i, cs[i].err);
    printf("\n    consumer 0 got %d (%d pulls), consumer 1 got %d (%d pulls)\n", cs[0].n, cs[0].pulls, cs[1].n,
           cs[1].pulls);
    BP_CHECK(cs[0].n > 0 && cs[1].n > 0, "one consumer got nothing (%d / %d): not a real concurrency test", cs[0].n,
             cs[1].n);
    int n = 0;
    for (int i = 0; i < 2; i++)
        for (int k = 0; k < cs[i].n; k++)
            memcpy(got[n++], cs[i].ids[k], 32);
    check_same_set(sent, CONC_N, got, n, "group workers (two consumers)");
}

static void test_create_from_now_and_first(void)
{
    bt_start(NULL);
    char e[1024];
    char old[1][32], new1[1][32], got[10][32];
    send_many("orders", 1, old, "old");
    BP_REQUIRE(bp_ok_cmd(&bt_conn, e, sizeof e, "GROUP", "CREATE", "late", "orders", "FROM", "NOW", NULL) == 0, "%s",
               e);
    BP_REQUIRE(bp_ok_cmd(&bt_conn, e, sizeof e, "GROUP", "CREATE", "early", "orders", "FROM", "FIRST", NULL) == 0, "%s",
               e);
    BP_REQUIRE(bp_ok_cmd(&bt_conn, e, sizeof e, "group", "create", "dflt", "orders", NULL) == 0, "%s", e);
    send_many("orders", 1, new1, "new");
    int n = drain("late", "orders", got, 10);
    BP_CHECK(n == 1 && strcmp(got[0], new1[0]) == 0, "FROM NOW group got %d messages (%s), want only the new one %s", n,
             n > 0 ? got[0] : "-", new1[0]);
    n = drain("early", "orders", got, 10);
    BP_CHECK(n == 2 && strcmp(got[0], old[0]) == 0 && strcmp(got[1], new1[0]) == 0,
             "FROM FIRST group got %d messages, want old %s then new %s", n, old[0], new1[0]);
    n = drain("dflt", "orders", got, 10);
    BP_CHECK(n == 2, "default (FROM FIRST) group got %d messages, want 2", n);

    /* Creating an existing group is an error naming its topic. */
    resp_reply_t *r = rc_cmd(&bt_conn, "GROUP", "CREATE", "late", "orders", NULL);
    BP_CHECK(rc_is_error(r, "ERR group late already exists"), "GROUP CREATE twice: %s", rc_describe(r, e, sizeof e));
    resp_reply_free(r);
    r = rc_cmd(&bt_conn, "GROUP", "CREATE", "x", "orders", "FROM", "MIDDLE", NULL);
    BP_CHECK(rc_is_error(r, "ERR"), "FROM MIDDLE: %s", rc_describe(r, e, sizeof e));
    resp_reply_free(r);
    r = rc_cmd(&bt_conn, "GROUP", "CREATE", "x", "orders", "MAXRETRY", "1001", NULL);
    BP_CHECK(rc_is_error(r, "ERR"), "MAXRETRY 1001: %s", rc_describe(r, e, sizeof e));
    resp_reply_free(r);
}

static void test_group_list(void)
{
    bt_start(NULL);
    char e[1024];
    char ids[10][32];
    BP_REQUIRE(bp_ok_cmd(&bt_conn, e, sizeof e, "GROUP", "CREATE", "zeta", "orders", "MAXRETRY", "3", NULL) == 0, "%s",
               e);
    BP_REQUIRE(bp_ok_cmd(&bt_conn, e, sizeof e, "GROUP", "CREATE", "alpha", "payments", NULL) == 0, "%s", e);
    send_many("orders", 10, ids, "o");
    /* zeta leases 4 of 10 and does not ack. */
    resp_reply_t *r = bp_pull(&bt_conn, e, sizeof e, "zeta", "orders", "COUNT", "4", NULL);
    BP_REQUIRE(r != NULL && r->count == 4, "PULL COUNT 4: %s", r == NULL ? e : "wrong count");
    resp_reply_free(r);

    long long v = -1;
    char topic[64];
    BP_CHECK(bp_group_topic(&bt_conn, "zeta", topic, sizeof topic, e, sizeof e) == 1 && strcmp(topic, "orders") == 0,
             "zeta topic: '%s' %s", topic, e);
    BP_CHECK(bp_group_topic(&bt_conn, "alpha", topic, sizeof topic, e, sizeof e) == 1 && strcmp(topic, "payments") == 0,
             "alpha topic: '%s' %s", topic, e);
    static const struct {
        const char *group, *field;
        long long want;
    } want[] = {
        { "zeta", "inflight", 4 },      { "zeta", "backlog", 6 },         { "zeta", "ready", 6 },
        { "zeta", "dlq", 0 },           { "zeta", "retry-ready", 0 },     { "zeta", "retry-delayed", 0 },
        { "zeta", "max-reconsume", 3 }, { "zeta", "retry", 0 },           { "alpha", "inflight", 0 },
        { "alpha", "backlog", 0 },      { "alpha", "max-reconsume", 16 },
    };
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        int f = bp_group_field(&bt_conn, want[i].group, want[i].field, &v, e, sizeof e);
        BP_CHECK(f == 1 && v == want[i].want, "GROUP LIST %s %s = %lld (found %d: %s), want %lld", want[i].group,
                 want[i].field, v, f, f < 0 ? e : "", want[i].want);
    }
    uint64_t now = tu_now_wall_ms();
    int f = bp_group_field(&bt_conn, "zeta", "created-ms", &v, e, sizeof e);
    BP_CHECK(f == 1 && (uint64_t)v <= now && (uint64_t)v + 60000 > now, "created-ms %lld (now %" PRIu64 ")", v, now);

    /* INFO groups has a line per group. */
    char line[256];
    BP_CHECK(bp_info_field(&bt_conn, "group_zeta", line, sizeof line, e, sizeof e) == 0 &&
                 strstr(line, "topic=orders") != NULL && strstr(line, "inflight=4") != NULL,
             "INFO group_zeta: '%s'", line);

    /* Sorted by name: alpha before zeta. */
    r = rc_cmd(&bt_conn, "GROUP", "LIST", NULL);
    BP_REQUIRE(r != NULL && r->type == RESP_REPLY_ARRAY && r->count == 2, "GROUP LIST: %s",
               rc_describe(r, e, sizeof e));
    BP_CHECK(r->elements[0].count >= 2 && rc_str_eq(&r->elements[0].elements[1], "alpha") &&
                 rc_str_eq(&r->elements[1].elements[1], "zeta"),
             "GROUP LIST is not sorted by name (or 'group' is not the first pair)");
    resp_reply_free(r);
}

static void test_group_del(void)
{
    bt_start(NULL);
    char e[1024];
    char ids[3][32];
    send_many("orders", 3, ids, "d");
    resp_reply_t *r = bp_pull(&bt_conn, e, sizeof e, "gone", "orders", "COUNT", "2", NULL);
    BP_REQUIRE(r != NULL && r->count == 2, "PULL: %s", r == NULL ? e : "wrong count");
    resp_reply_free(r);
    long long n = -1;
    BP_REQUIRE(bp_int_cmd(&bt_conn, &n, e, sizeof e, "GROUP", "DEL", "gone", NULL) == 0, "%s", e);
    BP_CHECK(n == 1, "GROUP DEL of an existing group answered %lld, want 1", n);
    BP_REQUIRE(bp_int_cmd(&bt_conn, &n, e, sizeof e, "GROUP", "DEL", "gone", NULL) == 0, "%s", e);
    BP_CHECK(n == 0, "GROUP DEL of a deleted group answered %lld, want 0", n);
    long long v;
    BP_CHECK(bp_group_field(&bt_conn, "gone", "inflight", &v, e, sizeof e) == 0, "deleted group still listed");
    /* Its leases went with it: an ACK releases nothing. */
    BP_REQUIRE(bp_int_cmd(&bt_conn, &n, e, sizeof e, "ACK", "gone", ids[0], NULL) == 0, "%s", e);
    BP_CHECK(n == 0, "ACK on a deleted group released %lld", n);
    /* The name is free again, for another topic even. */
    BP_CHECK(bp_ok_cmd(&bt_conn, e, sizeof e, "GROUP", "CREATE", "gone", "other", NULL) == 0, "re-create: %s", e);
    /* Other groups of the topic are untouched. */
    static char got[10][32];
    int k = drain("stays", "orders", got, 10);
    BP_CHECK(k == 3, "another group got %d of 3 after a GROUP DEL", k);
}

/* INFO field of a broker, as a number (-1 when missing). */
static long long info_number(const char *field)
{
    char v[32] = "", e[512];
    if (bp_info_field(&bt_conn, field, v, sizeof v, e, sizeof e) != 0)
        return -1;
    return atoll(v);
}

/* GROUP DEL of a group holding 3 000 leases: the answer comes at once and
 * the group is gone for every command, INFO counts its entries down to 0
 * while they are deleted in the background (/metrics too), and the name
 * can be taken by a new PULL, which starts from the oldest message. */
static void test_group_del_big(void)
{
    bt_start(NULL);
    char e[1024];
    static char ids[3000][32];
    BP_REQUIRE(bp_ok_cmd(&bt_conn, e, sizeof e, "GROUP", "CREATE", "keep", "orders", NULL) == 0, "%s", e);
    send_many("orders", 3000, ids, "b");
    for (int taken = 0; taken < 3000;) {
        resp_reply_t *r = bp_pull(&bt_conn, e, sizeof e, "big", "orders", "COUNT", "1000", "LEASE", "10m", NULL);
        BP_REQUIRE(r != NULL && r->count > 0, "PULL after %d: %s", taken, r == NULL ? e : "empty");
        taken += (int)r->count;
        resp_reply_free(r);
    }
    BP_CHECK(info_number("groups_deleting") == 0 && info_number("groups_deleting_entries") == 0,
             "before GROUP DEL: groups_deleting %lld, entries %lld", info_number("groups_deleting"),
             info_number("groups_deleting_entries"));
    long long n = -1;
    BP_REQUIRE(bp_int_cmd(&bt_conn, &n, e, sizeof e, "GROUP", "DEL", "big", NULL) == 0 && n == 1, "GROUP DEL: %s", e);
    long long v;
    BP_CHECK(bp_group_field(&bt_conn, "big", "inflight", &v, e, sizeof e) == 0, "deleted group still listed");
    BP_REQUIRE(bp_int_cmd(&bt_conn, &n, e, sizeof e, "ACK", "big", ids[0], NULL) == 0, "%s", e);
    BP_CHECK(n == 0, "ACK on a deleted group released %lld", n);
    uint64_t end = tu_now_mono_ms() + 60000;
    while (info_number("groups_deleting_entries") != 0 && tu_now_mono_ms() < end) {
        struct timespec ts = { 0, 20 * 1000000L };
        nanosleep(&ts, NULL);
    }
    BP_CHECK(info_number("groups_deleting_entries") == 0 && info_number("groups_deleting") == 0,
             "60 s after GROUP DEL: groups_deleting %lld, entries %lld", info_number("groups_deleting"),
             info_number("groups_deleting_entries"));
    static char body[1 << 17];
    BP_REQUIRE(tu_http_get(bt_broker.metrics_port, "/metrics", body, sizeof body) == 200, "GET /metrics");
    BP_CHECK(strstr(body, "\nhourglass_groups_deleting 0\n") != NULL &&
                 strstr(body, "\nhourglass_groups_deleting_entries 0\n") != NULL,
             "/metrics lacks hourglass_groups_deleting{,_entries} 0");
    resp_reply_t *r = bp_pull(&bt_conn, e, sizeof e, "big", "orders", "COUNT", "1", NULL);
    rc_msg_t m;
    BP_REQUIRE(r != NULL && r->count == 1 && rc_msg_at(r, 0, &m, e, sizeof e) == 0, "PULL of the new group: %s", e);
    BP_CHECK(strncmp(m.id, ids[0], strlen(ids[0])) == 0, "the new group starts at %.16s, want %s", m.id, ids[0]);
    resp_reply_free(r);
    BP_CHECK(bp_group_field(&bt_conn, "big", "inflight", &v, e, sizeof e) == 1 && v == 1, "new group in flight %lld",
             v);
}

static void test_bound_to_other_topic(void)
{
    bt_start(NULL);
    char e[1024];
    BP_REQUIRE(bp_ok_cmd(&bt_conn, e, sizeof e, "GROUP", "CREATE", "g", "a", NULL) == 0, "%s", e);
    resp_reply_t *r = rc_cmd(&bt_conn, "PULL", "g", "b", NULL);
    BP_CHECK(rc_is_error(r, "ERR group g is bound to topic a, not b"), "PULL g b: %s", rc_describe(r, e, sizeof e));
    resp_reply_free(r);
    /* Implicit binding by the first PULL too. */
    r = bp_pull(&bt_conn, e, sizeof e, "h", "a", NULL);
    BP_REQUIRE(r != NULL, "%s", e);
    resp_reply_free(r);
    /* ... audited as GROUP CREATE is, with who did it: a swapped group and topic must be found in the log */
    static const char created[] = "[info] audit: client id=";
    static const char created_h[] =
        "user=default PULL h a: created group 'h' bound to topic 'a' (no such group before)";
    BP_CHECK(tu_wait_file_contains(bt_broker.log_path, created_h, 10000) == 0 && bp_log_contains(&bt_broker, created),
             "no audit line for the group PULL h a created in %s", bt_broker.log_path);
    r = bp_pull(&bt_conn, e, sizeof e, "h", "a", NULL); /* the group exists now: no second line */
    BP_REQUIRE(r != NULL, "%s", e);
    resp_reply_free(r);
    BP_CHECK(bt_log_count(created_h) == 1, "%d audit lines for the group h, want 1", bt_log_count(created_h));
    r = rc_cmd(&bt_conn, "PULL", "h", "c", "BLOCK", "100", NULL);
    BP_CHECK(rc_is_error(r, "ERR group h is bound to topic a, not c"), "PULL h c: %s", rc_describe(r, e, sizeof e));
    resp_reply_free(r);
    char topic[64] = "";
    BP_CHECK(bp_group_topic(&bt_conn, "h", topic, sizeof topic, e, sizeof e) == 1 && strcmp(topic, "a") == 0,
             "implicitly created group h: topic '%s' %s", topic, e);
}

/* max-groups: a GROUP CREATE or a first PULL that would create one group more is refused naming the group and the
 * limit; existing groups keep working. A restart with a lower limit than the groups on disk opens and serves them
 * all (the limit is checked only when a group is created), and refuses a new one. */
static void expect_group_refused(const char *what, const char *want, const char *arg0, ...)
{
    char e[512];
    const char *argv[16];
    size_t lens[16];
    int argc = 0;
    va_list ap;
    va_start(ap, arg0);
    for (const char *a = arg0; a != NULL && argc < 16; a = va_arg(ap, const char *)) {
        argv[argc] = a;
        lens[argc++] = strlen(a);
    }
    va_end(ap);
    resp_reply_t *r = rc_cmdv(&bt_conn, argc, argv, lens);
    BP_REQUIRE(r != NULL, "%s: %s", what, bt_conn.err);
    BP_CHECK(r->type == RESP_REPLY_ERROR && strcmp(r->str, want) == 0, "%s: got %s, want -%s", what,
             rc_describe(r, e, sizeof e), want);
    resp_reply_free(r);
}

static void test_max_groups(void)
{
    const char *flags[] = { "--max-groups", "3", NULL };
    bt_start(flags);
    char e[512], v[64];
    resp_reply_t *r = rc_cmd(&bt_conn, "CONFIG", "GET", "max-groups", NULL);
    BP_CHECK(r != NULL && r->type == RESP_REPLY_ARRAY && r->count == 2 && strcmp(r->elements[1].str, "3") == 0,
             "CONFIG GET max-groups: %s", rc_describe(r, e, sizeof e));
    resp_reply_free(r);
    BP_REQUIRE(bp_ok_cmd(&bt_conn, e, sizeof e, "GROUP", "CREATE", "ga", "t", NULL) == 0, "GROUP CREATE ga: %s", e);
    BP_REQUIRE(bp_ok_cmd(&bt_conn, e, sizeof e, "GROUP", "CREATE", "gb", "t", NULL) == 0, "GROUP CREATE gb: %s", e);
    r = bp_pull(&bt_conn, e, sizeof e, "gc", "u", NULL); /* the third group, created by its first PULL */
    BP_REQUIRE(r != NULL, "PULL creating group gc: %s", e);
    resp_reply_free(r);
    expect_group_refused("GROUP CREATE of a 4th group",
                         "ERR group gd would be group 4, over max-groups 3 (use an existing group, delete one with "
                         "GROUP DEL, or raise max-groups)",
                         "GROUP", "CREATE", "gd", "t", NULL);
    expect_group_refused("PULL creating a 4th group",
                         "ERR group gd would be group 4, over max-groups 3 (use an existing group, delete one with "
                         "GROUP DEL, or raise max-groups)",
                         "PULL", "gd", "t", NULL);
    expect_group_refused("GROUP CREATE of an existing group", "ERR group ga already exists (bound to topic t)", "GROUP",
                         "CREATE", "ga", "t", NULL);
    BP_CHECK(bp_info_field(&bt_conn, "groups", v, sizeof v, e, sizeof e) == 0 && strcmp(v, "3") == 0,
             "INFO groups: %s, want 3 (%s)", v, e);
    char id[32];
    BP_REQUIRE(bp_send(&bt_conn, id, sizeof id, e, sizeof e, "t", "one", NULL) == 0, "SEND: %s", e);
    rc_msg_t m;
    bt_pull_one("ga", "t", "5000", NULL, &r, &m); /* an existing group is served */
    resp_reply_free(r);

    /* The limit lowered below the groups on disk: the directory opens, the three are served, a fourth is refused. */
    rc_close(&bt_conn);
    BP_REQUIRE(bp_stop(&bt_broker, e, sizeof e) == 0, "stop: %s", e);
    for (int i = 0; i + 1 < bt_broker.nextra; i++) {
        if (strcmp(bt_broker.extra[i], "--max-groups") == 0) {
            free(bt_broker.extra[i + 1]);
            bt_broker.extra[i + 1] = strdup("2");
            BP_REQUIRE(bt_broker.extra[i + 1] != NULL, "strdup");
        }
    }
    BP_REQUIRE(bp_restart(&bt_broker, e, sizeof e) == 0, "restart with max-groups 2: %s", e);
    BP_REQUIRE(bp_connect(&bt_broker, &bt_conn, e, sizeof e) == 0, "reconnect: %s", e);
    BP_CHECK(bp_info_field(&bt_conn, "groups", v, sizeof v, e, sizeof e) == 0 && strcmp(v, "3") == 0,
             "INFO groups after the restart: %s, want 3 (%s)", v, e);
    bt_pull_one("gb", "t", "5000", NULL, &r, &m);
    resp_reply_free(r);
    BP_REQUIRE(bp_send(&bt_conn, id, sizeof id, e, sizeof e, "u", "two", NULL) == 0, "SEND: %s", e);
    bt_pull_one("gc", "u", "5000", NULL, &r, &m);
    resp_reply_free(r);
    expect_group_refused("GROUP CREATE over a lowered max-groups",
                         "ERR group gd would be group 4, over max-groups 2 (use an existing group, delete one with "
                         "GROUP DEL, or raise max-groups)",
                         "GROUP", "CREATE", "gd", "t", NULL);
    long long found = 0;
    BP_REQUIRE(bp_int_cmd(&bt_conn, &found, e, sizeof e, "GROUP", "DEL", "ga", NULL) == 0 && found == 1,
               "GROUP DEL ga: %lld %s", found, e);
    BP_REQUIRE(bp_int_cmd(&bt_conn, &found, e, sizeof e, "GROUP", "DEL", "gb", NULL) == 0 && found == 1,
               "GROUP DEL gb: %lld %s", found, e);
    BP_CHECK(bp_ok_cmd(&bt_conn, e, sizeof e, "GROUP", "CREATE", "gd", "t", NULL) == 0,
             "GROUP CREATE once under max-groups 2 again: %s", e);
}

/* Waiting PULLs of one group are served in arrival order (docs/broker.md). */
static void test_blocked_pulls_in_order(void)
{
    bt_start(NULL);
    char e[1024], id1[32], id2[32];
    rc_conn_t first, second;
    BP_REQUIRE(bp_connect(&bt_broker, &first, e, sizeof e) == 0, "%s", e);
    BP_REQUIRE(bp_connect(&bt_broker, &second, e, sizeof e) == 0, "%s", e);
    rc_appendl(&first, "PULL", "g", "orders", "BLOCK", "20000", NULL);
    BP_REQUIRE(rc_flush(&first, 0) == 0, "%s", first.err);
    bt_wait_blocked("1");
    rc_appendl(&second, "PULL", "g", "orders", "BLOCK", "20000", NULL);
    BP_REQUIRE(rc_flush(&second, 0) == 0, "%s", second.err);
    bt_wait_blocked("2");
    BP_REQUIRE(bp_send(&bt_conn, id1, sizeof id1, e, sizeof e, "orders", "one", NULL) == 0, "%s", e);
    resp_reply_t *r = rc_read(&first, 10000);
    rc_msg_t m;
    BP_CHECK(r != NULL && r->count == 1 && rc_msg_at(r, 0, &m, e, sizeof e) == 0 && strcmp(m.id, id1) == 0,
             "the first waiting PULL did not get the first message: %s",
             r == NULL ? first.err : rc_describe(r, e, sizeof e));
    resp_reply_free(r);
    bt_wait_blocked("1");
    r = rc_read(&second, 1);
    BP_CHECK(r == NULL, "the second waiting PULL answered too: %s", rc_describe(r, e, sizeof e));
    resp_reply_free(r);
    BP_REQUIRE(bp_send(&bt_conn, id2, sizeof id2, e, sizeof e, "orders", "two", NULL) == 0, "%s", e);
    r = rc_read(&second, 10000);
    BP_CHECK(r != NULL && r->count == 1 && rc_msg_at(r, 0, &m, e, sizeof e) == 0 && strcmp(m.id, id2) == 0,
             "the second waiting PULL did not get the second message: %s",
             r == NULL ? second.err : rc_describe(r, e, sizeof e));
    resp_reply_free(r);
    /* Another group's waiter is woken by the same message as well. */
    rc_appendl(&first, "PULL", "other", "orders", "COUNT", "10", "BLOCK", "20000", NULL);
    BP_REQUIRE(rc_flush(&first, 0) == 0, "%s", first.err);
    r = rc_read(&first, 10000); /* group "other" starts FROM FIRST: both are ready at once */
    BP_CHECK(r != NULL && r->count == 2, "a new group got %s, want both messages",
             r == NULL ? first.err : rc_describe(r, e, sizeof e));
    resp_reply_free(r);
    rc_close(&first);
    rc_close(&second);
}

/* INFO inflight_unwritten of a broker, as a number (-1 when missing). */
static long long unwritten(void)
{
    char v[32] = "", e[512];
    if (bp_info_field(&bt_conn, "inflight_unwritten", v, sizeof v, e, sizeof e) != 0)
        return -1;
    return atoll(v);
}

/* Start a broker with --lease-write-delay delay, send n messages to topic
 * "late" and PULL them all in group "lg"; first gets the first one's id. */
static void pull_all_with_delay(const char *delay, int n, char first[32])
{
    const char *const flags[] = { "--lease-write-delay", delay, NULL };
    bt_start(flags);
    char e[1024], ids[8][32];
    char count[8];
    snprintf(count, sizeof count, "%d", n);
    send_many("late", n, ids, "w");
    resp_reply_t *r = bp_pull(&bt_conn, e, sizeof e, "lg", "late", "COUNT", count, NULL);
    BP_REQUIRE(r != NULL && r->count == (size_t)n, "PULL: %s", r == NULL ? e : "wrong count");
    rc_msg_t m;
    BP_REQUIRE(rc_msg_at(r, 0, &m, e, sizeof e) == 0, "%s", e);
    snprintf(first, 32, "%.16s", m.id);
    resp_reply_free(r);
}

/* Leases held in memory (here for 2 s) are counted apart until they are
 * written, and among the in-flight ones throughout; an ACK of one releases
 * it. */
static void test_leases_written_late_counted(void)
{
    char e[1024], first[32];
    pull_all_with_delay("2s", 4, first);
    BP_CHECK(unwritten() == 4, "INFO inflight_unwritten %lld right after a PULL of 4, want 4", unwritten());
    long long n = -1;
    BP_REQUIRE(bp_int_cmd(&bt_conn, &n, e, sizeof e, "ACK", "lg", first, NULL) == 0 && n == 1, "ACK: %s", e);
    BP_CHECK(unwritten() == 3, "after the ACK of one: %lld, want 3", unwritten());
    static char body[1 << 17];
    BP_REQUIRE(tu_http_get(bt_broker.metrics_port, "/metrics", body, sizeof body) == 200, "GET /metrics");
    BP_CHECK(strstr(body, "\nhourglass_leases_unwritten 3\n") != NULL, "/metrics lacks hourglass_leases_unwritten 3");
    /* written when the 2 s are over: still in flight */
    uint64_t end = tu_now_mono_ms() + 20000;
    while (unwritten() != 0 && tu_now_mono_ms() < end) {
        struct timespec ts = { 0, 20 * 1000000L };
        nanosleep(&ts, NULL);
    }
    BP_CHECK(unwritten() == 0, "INFO inflight_unwritten %lld 20 s after the PULL, want 0", unwritten());
    long long v = -1;
    BP_CHECK(bp_group_field(&bt_conn, "lg", "inflight", &v, e, sizeof e) == 1 && v == 3, "in flight %lld, want 3", v);
}

/* With lease-write-delay 0 every lease is written at once. */
static void test_leases_written_at_once(void)
{
    char first[32];
    pull_all_with_delay("0", 2, first);
    BP_CHECK(unwritten() == 0, "lease-write-delay 0: INFO inflight_unwritten %lld, want 0", unwritten());
}

static const tu_test_t groups_tests[] = {
    { "two groups on one topic both get every message", test_two_groups_each_get_all },
    { "two consumers of one group never share a message", test_one_group_two_consumers },
    { "GROUP CREATE FROM NOW / FROM FIRST", test_create_from_now_and_first },
    { "GROUP LIST fields and order", test_group_list },
    { "GROUP DEL", test_group_del },
    { "GROUP DEL of a big group: deleted in the background", test_group_del_big },
    { "a group bound to another topic is an error", test_bound_to_other_topic },
    { "max-groups: a new group beyond it is refused, naming it; more on disk still open", test_max_groups },
    { "waiting PULLs of a group are served in arrival order", test_blocked_pulls_in_order },
    { "leases written late are counted apart until written", test_leases_written_late_counted },
    { "lease-write-delay 0: every lease written at once", test_leases_written_at_once },
    { NULL, NULL },
};

int main(int argc, char **argv)
{
    return bt_main(argc, argv, "groups", groups_tests);
}
