/*
 * tests/integration/test_topics.c — TOPICS through the real broker: each
 * topic's ready, delayed, retained and sends counts and its groups, as
 * messages are sent, hop between levels, arrive, are revoked and leased,
 * and across a kill -9 (the delayed counter is kept in the batches of the
 * moves, so it is exact after the restart; --check-data verifies it); the
 * dedup-topics setting (keyed SENDs deduplicate without DEDUP, in MULTI too,
 * changed by SIGHUP); the per-topic /metrics series and their bound;
 * max-topics (a new topic beyond it refused by SEND, PULL and GROUP CREATE,
 * also after a restart); TOPICS and GROUP LIST paged by COUNT and AFTER;
 * MULTI's byte bound, and EXEC's all or nothing under max-topics; the
 * consumed log collected while the broker is busy;
 * TOPIC DEL of an empty topic, and its refusals.
 *
 * Run one: ./tests/integration/test_topics
 */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include <dirent.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <CUnit/CUnit.h>

#include "tests/helpers/broker_test.h"
#include "tests/helpers/testutil.h"

/* The value of field in a RESP2 map (a flat [k1, v1, ...] array), or NULL. */
static const resp_reply_t *field_of(const resp_reply_t *map, const char *field)
{
    if (map == NULL || map->type != RESP_REPLY_ARRAY)
        return NULL;
    for (size_t i = 0; i + 1 < map->count; i += 2)
        if (rc_str_eq(&map->elements[i], field))
            return &map->elements[i + 1];
    return NULL;
}

/* The entry of TOPICS reply r whose "topic" (or "group") is name, or NULL. */
static const resp_reply_t *entry_named(const resp_reply_t *r, const char *key, const char *name)
{
    if (r == NULL || r->type != RESP_REPLY_ARRAY)
        return NULL;
    for (size_t i = 0; i < r->count; i++)
        if (rc_str_eq(field_of(&r->elements[i], key), name))
            return &r->elements[i];
    return NULL;
}

/* An integer field, or -1 when it is missing. */
static long long int_of(const resp_reply_t *map, const char *field)
{
    long long v;
    const resp_reply_t *f = field_of(map, field);
    return f != NULL && rc_int(f, &v) == 0 ? v : -1;
}

typedef struct want_topic {
    long long ready, delayed, retained, sends;
} want_topic_t;

/* 1 when TOPICS shows topic with exactly these counts (sends -1: any). */
static int topic_is(const char *topic, want_topic_t w, char *why, size_t whylen)
{
    resp_reply_t *r = rc_cmd(&bt_conn, "TOPICS", NULL);
    const resp_reply_t *t = entry_named(r, "topic", topic);
    int ok = t != NULL && int_of(t, "ready") == w.ready && int_of(t, "delayed") == w.delayed &&
             int_of(t, "retained") == w.retained && (w.sends < 0 || int_of(t, "sends") == w.sends);
    if (t == NULL) {
        char d[256];
        snprintf(why, whylen, "TOPICS has no topic %s: %s", topic, r ? rc_describe(r, d, sizeof d) : "no reply");
    } else {
        snprintf(why, whylen, "TOPICS shows ready %lld delayed %lld retained %lld sends %lld", int_of(t, "ready"),
                 int_of(t, "delayed"), int_of(t, "retained"), int_of(t, "sends"));
    }
    resp_reply_free(r);
    return ok;
}

static void expect_topic_at(const char *topic, want_topic_t w, int line)
{
    char why[1200];
    TU_CHECK_AT(topic_is(topic, w, why, sizeof why), line,
                "topic %s: want ready %lld delayed %lld retained %lld sends %lld; %s", topic, w.ready, w.delayed,
                w.retained, w.sends, why);
}
#define EXPECT_TOPIC(t, ...) expect_topic_at((t), (want_topic_t){ __VA_ARGS__ }, __LINE__)

typedef struct wait_topic {
    const char *topic;
    want_topic_t w;
    char why[1200];
} wait_topic_t;

static int topic_reached(void *ctx)
{
    wait_topic_t *c = ctx;
    return topic_is(c->topic, c->w, c->why, sizeof c->why);
}

static void send_ok(const char *topic, const char *payload, const char *opt, const char *val, char *id)
{
    char e[512];
    BP_REQUIRE(bp_send(&bt_conn, id, 32, e, sizeof e, topic, payload, opt, val, NULL) == 0, "SEND %s %s: %s", topic,
               payload, e);
}

/* Every count through the moves that change it; the groups of each topic. */
static void test_topics_counts(void)
{
    const char *flags[] = { "--levels", "1s 2s 10s 1h", NULL };
    bt_start(flags);
    char e[512], hour[32], sec[32], now[32], other[32];
    BP_REQUIRE(bp_ok_cmd(&bt_conn, e, sizeof e, "GROUP", "CREATE", "g", "t", NULL) == 0, "%s", e);
    BP_REQUIRE(bp_ok_cmd(&bt_conn, e, sizeof e, "GROUP", "CREATE", "h", "t", "FROM", "NOW", NULL) == 0, "%s", e);
    send_ok("t", "in-an-hour", "DELAY", "3602s", hour); /* 1h + 2s: two hops */
    send_ok("t", "in-a-second", "LEVEL", "1", sec);
    send_ok("t", "now", NULL, NULL, now);
    send_ok("u", "later", "DELAY", "1h", other);
    EXPECT_TOPIC("t", .ready = 1, .delayed = 2, .retained = 1, .sends = 3);
    EXPECT_TOPIC("u", .ready = 0, .delayed = 1, .retained = 0, .sends = 1);

    /* the groups of t, in name order, with their counts; u has none */
    resp_reply_t *r = rc_cmd(&bt_conn, "TOPICS", NULL);
    const resp_reply_t *groups = field_of(entry_named(r, "topic", "t"), "groups");
    BP_CHECK(groups != NULL && groups->type == RESP_REPLY_ARRAY && groups->count == 2 &&
                 rc_str_eq(field_of(&groups->elements[0], "group"), "g") &&
                 rc_str_eq(field_of(&groups->elements[1], "group"), "h") &&
                 int_of(&groups->elements[0], "ready") == 1 && int_of(&groups->elements[0], "dlq") == 0,
             "t's groups: %s", rc_describe(r, e, sizeof e));
    groups = field_of(entry_named(r, "topic", "u"), "groups");
    BP_CHECK(groups != NULL && groups->type == RESP_REPLY_ARRAY && groups->count == 0, "u's groups: %s",
             rc_describe(r, e, sizeof e));
    BP_CHECK(r != NULL && r->count == 2 && rc_str_eq(field_of(&r->elements[0], "topic"), "t"),
             "two topics in name order: %s", rc_describe(r, e, sizeof e));
    resp_reply_free(r);

    /* the level-1 message arrives: one less delayed, one more ready */
    wait_topic_t w = { "t", { .ready = 2, .delayed = 1, .retained = 2, .sends = 3 }, "" };
    BP_CHECK(tu_poll_until(topic_reached, &w, 15000, 50) == 0, "level 1 never arrived: %s", w.why);

    /* REVOKE the hour one: nothing delayed for t */
    long long revoked;
    resp_reply_t *rv = rc_cmd(&bt_conn, "REVOKE", hour, NULL);
    revoked = int_of(rv, "revoked");
    BP_CHECK(revoked == 1, "REVOKE %s: %s", hour, rc_describe(rv, e, sizeof e));
    resp_reply_free(rv);
    EXPECT_TOPIC("t", .ready = 2, .delayed = 0, .retained = 2, .sends = 3);

    /* t's ready is its largest group backlog: g leases one (h still has two),
     * then h leases one */
    resp_reply_t *p;
    rc_msg_t m;
    bt_pull_one("g", "t", "5000", NULL, &p, &m);
    resp_reply_free(p);
    EXPECT_TOPIC("t", .ready = 2, .delayed = 0, .retained = 2, .sends = 3);
    bt_pull_one("h", "t", "5000", NULL, &p, &m);
    resp_reply_free(p);
    EXPECT_TOPIC("t", .ready = 1, .delayed = 0, .retained = 2, .sends = 3);
    /* both groups passed the first entry: maintenance collects it once the
     * broker has been idle a second (so poll slower than that) */
    wait_topic_t gc = { "t", { .ready = 1, .delayed = 0, .retained = 1, .sends = 3 }, "" };
    BP_CHECK(tu_poll_until(topic_reached, &gc, 30000, 1500) == 0, "the log was never collected: %s", gc.why);

    /* kill -9 mid-life: the counters come back exact (sends counts since the start) */
    BP_REQUIRE(bp_kill9(&bt_broker) == 0, "kill -9");
    rc_close(&bt_conn);
    BP_REQUIRE(bp_restart(&bt_broker, e, sizeof e) == 0, "restart: %s", e);
    BP_REQUIRE(bp_connect(&bt_broker, &bt_conn, e, sizeof e) == 0, "connect: %s", e);
    EXPECT_TOPIC("u", .ready = 0, .delayed = 1, .retained = 0, .sends = 0);
    EXPECT_TOPIC("t", .ready = 1, .delayed = 0, .retained = 1, .sends = 0);
    char out[2048];
    BP_REQUIRE(bp_stop(&bt_broker, e, sizeof e) == 0, "stop: %s", e);
    int rc = bp_check_data(&bt_broker, out, sizeof out);
    BP_CHECK(rc == 0 && strncmp(out, "ok:", 3) == 0, "--check-data: exit %d: %s", rc, out);
    (void)sec;
    (void)now;
    (void)other;
}

/* SEND topic p KEY key [DEDUP]: the reply (the caller frees it). */
static resp_reply_t *send_key(const char *topic, const char *key, int dedup)
{
    return dedup ? rc_cmd(&bt_conn, "SEND", topic, "p", "KEY", key, "DEDUP", NULL)
                 : rc_cmd(&bt_conn, "SEND", topic, "p", "KEY", key, NULL);
}

/* A plain SEND's bulk id into id (required). */
static void bulk_id(resp_reply_t *r, char *id, const char *what)
{
    char e[512];
    BP_REQUIRE(r != NULL && r->type == RESP_REPLY_BULK && r->len == 16, "%s: %s", what,
               r ? rc_describe(r, e, sizeof e) : "no reply");
    snprintf(id, 17, "%s", r->str);
    resp_reply_free(r);
}

/* dedup-topics: keyed SENDs to a listed topic deduplicate without DEDUP
 * (reply: the id); SENDs without KEY and other topics are unaffected; TOPICS
 * says which topics deduplicate; MULTI may hold (implicit and explicit)
 * DEDUP SENDs, a duplicate within the transaction included; SIGHUP changes
 * the list. */
static void test_dedup_topics(void)
{
    char conf[700], e[512];
    tu_mkdtemp("dedupconf", conf, sizeof conf - 20);
    strcat(conf, "/broker.conf");
    BP_REQUIRE(tu_write_file(conf, "dedup-topics = order-timeout  other\n") == 0, "write %s", conf);
    const char *flags[] = { "--config", conf, NULL };
    bt_start(flags);
    char a[17], b[17], c[17], d[17];
    bulk_id(send_key("order-timeout", "42", 0), a, "first keyed SEND");
    bulk_id(send_key("order-timeout", "42", 0), b, "second keyed SEND");
    BP_CHECK(strcmp(a, b) == 0, "a second keyed SEND to a dedup topic stored another message: %s, %s", a, b);
    resp_reply_t *r = send_key("order-timeout", "42", 1);
    BP_CHECK(r && r->type == RESP_REPLY_ARRAY && r->count == 2 && rc_str_eq(&r->elements[0], a) &&
                 r->elements[1].integer == 1,
             "explicit DEDUP: %s", r ? rc_describe(r, e, sizeof e) : "no reply");
    resp_reply_free(r);
    send_ok("order-timeout", "no-key", NULL, NULL, c);
    send_ok("order-timeout", "no-key", NULL, NULL, d);
    BP_CHECK(strcmp(c, d) != 0 && strcmp(c, a) != 0, "SENDs without KEY must be unaffected: %s %s", c, d);
    bulk_id(send_key("plain", "42", 0), c, "keyed SEND to a topic not listed");
    bulk_id(send_key("plain", "42", 0), d, "again");
    BP_CHECK(strcmp(c, d) != 0, "a topic not listed deduplicated: %s %s", c, d);
    char hits[32];
    BP_REQUIRE(bp_info_field(&bt_conn, "dedup_hits", hits, sizeof hits, e, sizeof e) == 0, "%s", e);
    BP_CHECK(strcmp(hits, "2") == 0, "INFO dedup_hits %s, want 2", hits);
    resp_reply_t *t = rc_cmd(&bt_conn, "TOPICS", NULL);
    BP_CHECK(int_of(entry_named(t, "topic", "order-timeout"), "dedup") == 1 &&
                 int_of(entry_named(t, "topic", "plain"), "dedup") == 0 &&
                 int_of(entry_named(t, "topic", "order-timeout"), "sends") == 3,
             "TOPICS dedup/sends fields: %s", rc_describe(t, e, sizeof e));
    resp_reply_free(t);

    /* MULTI: a key twice in one transaction is one message; explicit DEDUP inside too */
    BP_REQUIRE(bp_ok_cmd(&bt_conn, e, sizeof e, "MULTI", NULL) == 0, "%s", e);
    const char *queued[][8] = {
        { "SEND", "order-timeout", "p", "KEY", "43", NULL },
        { "SEND", "order-timeout", "p", "KEY", "43", NULL },
        { "SEND", "plain", "p", "KEY", "z", "DEDUP", NULL },
        { "SEND", "plain", "p", "KEY", "z", "DEDUP", NULL },
    };
    for (size_t i = 0; i < 4; i++) {
        r = rc_cmdv(&bt_conn, queued[i][5] ? 6 : 5, queued[i], NULL);
        BP_CHECK(r && r->type == RESP_REPLY_STATUS && strcmp(r->str, "QUEUED") == 0, "queue %zu: %s", i,
                 r ? rc_describe(r, e, sizeof e) : "no reply");
        resp_reply_free(r);
    }
    r = rc_cmd(&bt_conn, "EXEC", NULL);
    BP_CHECK(r && r->type == RESP_REPLY_ARRAY && r->count == 4 && r->elements[0].type == RESP_REPLY_BULK &&
                 strcmp(r->elements[0].str, r->elements[1].str) == 0 && r->elements[2].count == 2 &&
                 r->elements[2].elements[1].integer == 0 && r->elements[3].elements[1].integer == 1 &&
                 strcmp(r->elements[2].elements[0].str, r->elements[3].elements[0].str) == 0,
             "EXEC: %s", r ? rc_describe(r, e, sizeof e) : "no reply");
    resp_reply_free(r);

    /* SIGHUP: the list changes at run time (plain is listed, order-timeout not) */
    BP_REQUIRE(tu_write_file(conf, "dedup-topics = plain\n") == 0, "rewrite %s", conf);
    kill(bt_broker.pid, SIGHUP);
    BP_CHECK(tu_wait_file_contains(bt_broker.log_path, "SIGHUP: dedup-topics", 10000) == 0,
             "the reload of dedup-topics was not logged");
    bulk_id(send_key("plain", "q", 0), c, "keyed SEND after the reload");
    bulk_id(send_key("plain", "q", 0), d, "again");
    BP_CHECK(strcmp(c, d) == 0, "plain is listed after SIGHUP but stored two: %s %s", c, d);
    bulk_id(send_key("order-timeout", "42", 0), b, "order-timeout after the reload");
    BP_CHECK(strcmp(a, b) != 0, "order-timeout still deduplicates after it left the list");
    char out[2048];
    BP_REQUIRE(bp_stop(&bt_broker, e, sizeof e) == 0, "stop: %s", e);
    int rc = bp_check_data(&bt_broker, out, sizeof out);
    BP_CHECK(rc == 0 && strncmp(out, "ok:", 3) == 0, "--check-data: exit %d: %s", rc, out);
    *strrchr(conf, '/') = '\0';
    tu_rmtree(conf);
}

/* 1 when the /metrics page holds the line (a whole line). */
static int has_line(const char *page, const char *line)
{
    size_t n = strlen(line);
    for (const char *p = strstr(page, line); p != NULL; p = strstr(p + 1, line))
        if ((p == page || p[-1] == '\n') && (p[n] == '\n' || p[n] == '\0'))
            return 1;
    return 0;
}

/* Per-topic series (ready, delayed, retained, sends) and the groups' (DLQ
 * depth among them) with topic and group labels; metrics-max-topics bounds
 * them to the first topics in name order and counts the rest. */
static void test_metrics_per_topic(void)
{
    const char *flags[] = { "--metrics-max-topics", "2", NULL };
    bt_start(flags);
    char e[512], id[32];
    BP_REQUIRE(bp_ok_cmd(&bt_conn, e, sizeof e, "GROUP", "CREATE", "ga", "a", "MAXRETRY", "0", NULL) == 0, "%s", e);
    BP_REQUIRE(bp_ok_cmd(&bt_conn, e, sizeof e, "GROUP", "CREATE", "gc", "c", NULL) == 0, "%s", e);
    send_ok("a", "x", NULL, NULL, id);
    send_ok("a", "y", "DELAY", "1h", id);
    send_ok("b", "z", "DELAY", "1h", id);
    send_ok("c", "w", NULL, NULL, id);
    resp_reply_t *p;
    rc_msg_t m;
    bt_pull_one("ga", "a", "5000", NULL, &p, &m);
    long long n;
    BP_REQUIRE(bp_int_cmd(&bt_conn, &n, e, sizeof e, "NACK", "ga", m.id, "DLQ", NULL) == 0, "NACK: %s", e);
    resp_reply_free(p);
    static char page[1 << 17];
    BP_REQUIRE(tu_http_get(bt_broker.metrics_port, "/metrics", page, sizeof page) == 200, "GET /metrics");
    const char *want[] = {
        "hourglass_topic_ready{topic=\"a\"} 0",
        "hourglass_topic_delayed{topic=\"a\"} 1",
        "hourglass_topic_retained{topic=\"a\"} 1",
        "hourglass_topic_sends_total{topic=\"a\"} 2",
        "hourglass_topic_delayed{topic=\"b\"} 1",
        "hourglass_topic_ready{topic=\"b\"} 0",
        "hourglass_group_dlq{group=\"ga\",topic=\"a\"} 1",
        "hourglass_group_ready{group=\"ga\",topic=\"a\"} 0",
        "hourglass_metrics_topics_omitted 1",
    };
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++)
        BP_CHECK(has_line(page, want[i]), "/metrics lacks the line %s", want[i]);
    BP_CHECK(strstr(page, "topic=\"c\"") == NULL, "/metrics shows topic c (and its group) beyond metrics-max-topics 2");
    BP_CHECK(strstr(page, "# TYPE hourglass_topic_sends_total counter") != NULL, "sends_total is not a counter");
}

/* max-topics: a command that would create one topic more is refused naming the topic and the limit; existing
 * topics keep working, also after a restart (the limit counts the topics found on disk). */
static void expect_refused(const char *what, const char *const *argv, int argc, const char *want)
{
    char e[512];
    size_t lens[16];
    for (int i = 0; i < argc; i++)
        lens[i] = strlen(argv[i]);
    resp_reply_t *r = rc_cmdv(&bt_conn, argc, argv, lens);
    BP_REQUIRE(r != NULL, "%s: %s", what, bt_conn.err);
    BP_CHECK(r->type == RESP_REPLY_ERROR && strstr(r->str, want) != NULL, "%s: got %s, want an error with '%s'", what,
             rc_describe(r, e, sizeof e), want);
    resp_reply_free(r);
}

static void test_max_topics(void)
{
    const char *flags[] = { "--max-topics", "3", NULL };
    bt_start(flags);
    char e[512], id[32];
    send_ok("a", "x", NULL, NULL, id);
    BP_REQUIRE(bp_ok_cmd(&bt_conn, e, sizeof e, "GROUP", "CREATE", "gb", "b", NULL) == 0, "GROUP CREATE: %s", e);
    resp_reply_t *r = bp_pull(&bt_conn, e, sizeof e, "gc", "c", NULL);
    BP_REQUIRE(r != NULL, "PULL creating topic c: %s", e);
    resp_reply_free(r);
    const char *send[] = { "SEND", "d", "x" };
    expect_refused("SEND to a 4th topic", send, 3, "topic d would be topic 4, over max-topics 3");
    const char *dedup[] = { "SEND", "d", "x", "KEY", "k", "DEDUP" };
    expect_refused("SEND DEDUP to a 4th topic", dedup, 6, "over max-topics 3");
    const char *create[] = { "GROUP", "CREATE", "gd", "d" };
    expect_refused("GROUP CREATE on a 4th topic", create, 4, "over max-topics 3");
    const char *pull[] = { "PULL", "gd", "d" };
    expect_refused("PULL creating a 4th topic", pull, 3, "over max-topics 3");
    send_ok("a", "y", NULL, NULL, id);
    send_ok("c", "z", NULL, NULL, id);
    rc_close(&bt_conn);
    BP_REQUIRE(bp_stop(&bt_broker, e, sizeof e) == 0, "stop: %s", e);
    BP_REQUIRE(bp_restart(&bt_broker, e, sizeof e) == 0, "restart: %s", e);
    BP_REQUIRE(bp_connect(&bt_broker, &bt_conn, e, sizeof e) == 0, "reconnect: %s", e);
    expect_refused("SEND to a 4th topic after a restart", send, 3, "topic d would be topic 4, over max-topics 3");
    send_ok("b", "w", NULL, NULL, id);
}

/* The names (field) of a listing reply of maps, joined by blanks, into out. */
static void names_of(const resp_reply_t *r, const char *field, char *out, size_t outlen)
{
    out[0] = '\0';
    for (size_t i = 0; r != NULL && r->type == RESP_REPLY_ARRAY && i < r->count; i++) {
        const resp_reply_t *v = field_of(&r->elements[i], field);
        size_t len = strlen(out);
        snprintf(out + len, outlen - len, "%s%s", len ? " " : "", v && v->str ? v->str : "?");
    }
}

/* TOPICS names want (blank-separated, name order) after what, and again
 * after the broker restarted (bt_conn reconnected). */
static void topics_across_restart(const char *want, const char *what)
{
    char e[512], names[256];
    for (int round = 0; round < 2; round++) {
        if (round == 1) {
            rc_close(&bt_conn);
            BP_REQUIRE(bp_stop(&bt_broker, e, sizeof e) == 0, "stop: %s", e);
            BP_REQUIRE(bp_restart(&bt_broker, e, sizeof e) == 0, "restart: %s", e);
            BP_REQUIRE(bp_connect(&bt_broker, &bt_conn, e, sizeof e) == 0, "reconnect: %s", e);
        }
        resp_reply_t *r = rc_cmd(&bt_conn, "TOPICS", NULL);
        names_of(r, "topic", names, sizeof names);
        resp_reply_free(r);
        BP_CHECK(strcmp(names, want) == 0, "TOPICS after %s%s: %s, want %s", what, round ? " and a restart" : "", names,
                 want);
    }
}

/* Files of topic CQs (cq-<queue>-<first>.q, queue from 0x00010000) in the
 * broker's data directory. */
static int topic_cq_files(void)
{
    DIR *d = opendir(bt_broker.data_dir);
    BP_REQUIRE(d != NULL, "opendir %s", bt_broker.data_dir);
    struct dirent *e;
    int n = 0;
    while ((e = readdir(d)) != NULL) {
        unsigned queue = 0;
        n += strlen(e->d_name) == 30 && sscanf(e->d_name, "cq-%8x-", &queue) == 1 && queue >= 0x10000;
    }
    closedir(d);
    return n;
}

/* tu_poll_until's condition: the topic CQ files are down to *ctx, with a
 * SEND to topic "kept" each time (a checkpoint is taken after writes). */
static int topic_cq_files_down_to(void *ctx)
{
    char id[32];
    send_ok("kept", "traffic", NULL, NULL, id);
    return topic_cq_files() <= *(int *)ctx;
}

/* TOPIC DEL: an empty topic is deleted (1), an unknown one is 0, a topic
 * with a group, a retained or a delayed message is refused naming each
 * reason; the deleted topic frees its place under max-topics, is gone from
 * TOPICS, and stays gone after a restart; its CQ file goes from the data
 * directory while the broker runs (at the first checkpoint past the
 * delete). */
static void test_topic_del(void)
{
    const char *flags[] = { "--max-topics", "3", NULL };
    bt_start(flags);
    char e[512], id[32];
    long long n = -1;
    send_ok("kept", "x", NULL, NULL, id);
    send_ok("busy", "y", "DELAY", "1h", id);
    BP_REQUIRE(bp_ok_cmd(&bt_conn, e, sizeof e, "GROUP", "CREATE", "g", "busy", NULL) == 0, "%s", e);
    BP_REQUIRE(bp_ok_cmd(&bt_conn, e, sizeof e, "GROUP", "CREATE", "gone", "empty", NULL) == 0, "%s", e);
    BP_REQUIRE(bp_int_cmd(&bt_conn, &n, e, sizeof e, "GROUP", "DEL", "gone", NULL) == 0 && n == 1, "GROUP DEL: %s", e);
    const char *kept[] = { "TOPIC", "DEL", "kept" };
    expect_refused("TOPIC DEL of a topic holding a message", kept, 3,
                   "topic 'kept' is not empty: 1 message in its log (a topic without groups keeps them for retention: "
                   "TOPIC DEL topic PURGE deletes them)");
    const char *busy[] = { "TOPIC", "DEL", "busy" };
    expect_refused("TOPIC DEL of a topic with a group and a delayed message", busy, 3,
                   "topic 'busy' is not empty: 1 group bound to it (GROUP DEL first), 1 message on the levels, not "
                   "due yet (wait until it comes due, or REVOKE it by key or id)");
    const char *send[] = { "SEND", "new", "x" };
    expect_refused("SEND to a 4th topic", send, 3, "over max-topics 3 (send to an existing topic, delete an empty one");
    int files = topic_cq_files();
    BP_REQUIRE(bp_int_cmd(&bt_conn, &n, e, sizeof e, "TOPIC", "DEL", "empty", NULL) == 0, "TOPIC DEL: %s", e);
    BP_CHECK(n == 1, "TOPIC DEL of the empty topic answered %lld", n);
    int want = files - 1; /* "empty" was made by a group and never sent to: its first CQ file */
    BP_CHECK(tu_poll_until(topic_cq_files_down_to, &want, 20000, 100) == 0,
             "%d topic CQ files 20 s after TOPIC DEL, %d before it", topic_cq_files(), files);
    BP_REQUIRE(bp_int_cmd(&bt_conn, &n, e, sizeof e, "topic", "delete", "empty", NULL) == 0, "TOPIC DEL: %s", e);
    BP_CHECK(n == 0, "TOPIC DEL of a deleted topic answered %lld", n);
    const char *no_name[] = { "TOPIC", "DEL" };
    expect_refused("TOPIC DEL without a topic", no_name, 2, "wrong number of arguments");
    const char *bad_sub[] = { "TOPIC", "LIST" };
    expect_refused("TOPIC LIST", bad_sub, 2, "unknown subcommand 'LIST' for 'topic' (DEL)");
    send_ok("new", "x", NULL, NULL, id); /* its place under max-topics */
    topics_across_restart("busy kept new", "TOPIC DEL");
}

/* TOPIC DEL topic PURGE: the retained messages of a topic without groups
 * go first, in steps (1 500 of them: three steps), with their index
 * entries; then the topic. A topic with a group or a delayed message is
 * refused untouched; a bad option is a syntax error; the audit log counts
 * what was purged; the topic stays gone after a restart. */
static void test_topic_purge(void)
{
    enum {
        N = 1500
    };
    bt_start(NULL);
    char e[512], id[32], first[32], state[64];
    for (int i = 0; i < N; i++)
        rc_appendl(&bt_conn, "SEND", "old", "retained", "KEY", i == 0 ? "k1" : "kx", NULL);
    BP_REQUIRE(rc_flush(&bt_conn, 10000) == 0, "flush");
    for (int i = 0; i < N; i++) {
        resp_reply_t *r = rc_read(&bt_conn, 10000);
        BP_REQUIRE(r != NULL && r->type == RESP_REPLY_BULK, "SEND %d", i);
        if (i == 0)
            snprintf(first, sizeof first, "%s", r->str);
        resp_reply_free(r);
    }
    send_ok("busy", "y", NULL, NULL, id);
    BP_REQUIRE(bp_ok_cmd(&bt_conn, e, sizeof e, "GROUP", "CREATE", "g", "busy", "FROM", "FIRST", NULL) == 0, "%s", e);
    send_ok("later", "z", "DELAY", "1h", id);
    const char *busy[] = { "TOPIC", "DEL", "busy", "PURGE" };
    expect_refused("TOPIC DEL … PURGE of a topic with a group", busy, 4,
                   "topic 'busy' is not empty: 1 group bound to it (GROUP DEL first), 1 message in its log");
    const char *later[] = { "TOPIC", "DEL", "later", "PURGE" };
    expect_refused("TOPIC DEL … PURGE of a topic with a delayed message", later, 4,
                   "topic 'later' is not empty: 1 message on the levels, not due yet (wait until it comes due, or "
                   "REVOKE it by key or id)");
    const char *bad[] = { "TOPIC", "DEL", "old", "FORCE" };
    expect_refused("TOPIC DEL … FORCE", bad, 4, "syntax error: unknown option 'FORCE' for 'topic|del' (PURGE)");
    const char *many[] = { "TOPIC", "DEL", "old", "PURGE", "PURGE" };
    expect_refused("TOPIC DEL with two options", many, 5, "wrong number of arguments");
    EXPECT_TOPIC("old", .ready = N, .delayed = 0, .retained = N, .sends = N);
    EXPECT_TOPIC("busy", .ready = 1, .delayed = 0, .retained = 1, .sends = 1);

    long long n = -1;
    BP_REQUIRE(bp_int_cmd(&bt_conn, &n, e, sizeof e, "TOPIC", "DEL", "old", "purge", NULL) == 0, "PURGE: %s", e);
    BP_CHECK(n == 1, "TOPIC DEL old PURGE answered %lld", n);
    resp_reply_t *r = rc_cmd(&bt_conn, "FIND", "old", "k1", NULL);
    BP_CHECK(r != NULL && r->type == RESP_REPLY_ARRAY && r->count == 0, "FIND old k1 after the purge: %s",
             r ? rc_describe(r, e, sizeof e) : bt_conn.err);
    resp_reply_free(r);
    r = rc_cmd(&bt_conn, "GET", first, NULL);
    state[0] = '\0';
    for (size_t i = 0; r != NULL && r->type == RESP_REPLY_ARRAY && i + 1 < r->count; i += 2)
        if (strcmp(r->elements[i].str, "state") == 0)
            snprintf(state, sizeof state, "%s", r->elements[i + 1].str);
    resp_reply_free(r);
    BP_CHECK(strcmp(state, "gone") == 0, "GET of a purged message: state %s", state);
    BP_CHECK(bp_log_contains(&bt_broker, "TOPIC DEL old purge: purged 1500 retained messages, deleted"),
             "the audit log does not count what was purged");
    topics_across_restart("busy later", "the purge");
    char out[2048];
    BP_REQUIRE(bp_stop(&bt_broker, e, sizeof e) == 0, "stop: %s", e);
    int rc = bp_check_data(&bt_broker, out, sizeof out);
    BP_CHECK(rc == 0, "--check-data after the purge: %d %s", rc, out);
}

/* While the broker never idles (a command at least every 100 ms, here the
 * poll's own SEND and TOPICS), consumed topic-log entries are still
 * collected, in bounded steps a second or two after every group passed them;
 * idle maintenance alone (after 1 s without a command) would keep them for as
 * long as the load lasts. */
typedef struct busy_gc {
    int polls;
    wait_topic_t w;
} busy_gc_t;

static int collected_while_busy(void *ctx)
{
    busy_gc_t *c = ctx;
    char id[32];
    send_ok("noise", "keeps the storage thread busy", NULL, NULL, id);
    c->polls++;
    return topic_reached(&c->w);
}

static void test_gc_while_busy(void)
{
    enum {
        N = 300
    };
    bt_start(NULL);
    char e[512], id[32];
    BP_REQUIRE(bp_ok_cmd(&bt_conn, e, sizeof e, "GROUP", "CREATE", "g", "busy", NULL) == 0, "%s", e);
    for (int i = 0; i < N; i++)
        send_ok("busy", "consumed at once", NULL, NULL, id);
    resp_reply_t *r = bp_pull(&bt_conn, e, sizeof e, "g", "busy", "COUNT", "1000", NULL);
    BP_REQUIRE(r != NULL && r->count == N, "PULL COUNT 1000 got %zu of %d: %s", r ? r->count : 0, N, e);
    long long released = 0;
    BP_REQUIRE(bt_ack_reply(&bt_conn, "g", r, &released, e, sizeof e) == 0 && released == N, "ACK: %lld of %d: %s",
               released, N, e);
    resp_reply_free(r);
    EXPECT_TOPIC("busy", .ready = 0, .delayed = 0, .retained = N, .sends = N);
    busy_gc_t gc = { 0, { "busy", { .ready = 0, .delayed = 0, .retained = 0, .sends = N }, "" } };
    BP_CHECK(tu_poll_until(collected_while_busy, &gc, 20000, 100) == 0,
             "the consumed log was not collected while commands kept coming (%d polls): %s", gc.polls, gc.w.why);
    BP_REQUIRE(bp_stop(&bt_broker, e, sizeof e) == 0, "stop: %s", e);
    char out[2048];
    int rc = bp_check_data(&bt_broker, out, sizeof out);
    BP_CHECK(rc == 0 && strncmp(out, "ok:", 3) == 0, "--check-data: exit %d: %s", rc, out);
}

static void test_paging(void)
{
    bt_start(NULL);
    char e[512], id[32], names[256];
    const char *topics[] = { "a", "b", "c", "d", "e" };
    for (int i = 0; i < 5; i++) {
        char g[8];
        snprintf(g, sizeof g, "g%s", topics[i]);
        BP_REQUIRE(bp_ok_cmd(&bt_conn, e, sizeof e, "GROUP", "CREATE", g, topics[i], NULL) == 0, "%s", e);
        send_ok(topics[i], "x", NULL, NULL, id);
    }
    static const struct {
        const char *argv[6];
        int argc;
        const char *field, *want;
    } cases[] = {
        { { "TOPICS" }, 1, "topic", "a b c d e" },
        { { "TOPICS", "COUNT", "2" }, 3, "topic", "a b" },
        { { "TOPICS", "COUNT", "2", "AFTER", "b" }, 5, "topic", "c d" },
        { { "TOPICS", "AFTER", "bb" }, 3, "topic", "c d e" },
        { { "TOPICS", "AFTER", "e", "COUNT", "3" }, 5, "topic", "" },
        { { "GROUP", "LIST", "COUNT", "1", "AFTER", "gb" }, 6, "group", "gc" },
        { { "GROUP", "LIST", "AFTER", "gc" }, 4, "group", "gd ge" },
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        size_t lens[6];
        for (int i = 0; i < cases[c].argc; i++)
            lens[i] = strlen(cases[c].argv[i]);
        resp_reply_t *r = rc_cmdv(&bt_conn, cases[c].argc, cases[c].argv, lens);
        BP_REQUIRE(r != NULL, "%s: %s", cases[c].argv[0], bt_conn.err);
        names_of(r, cases[c].field, names, sizeof names);
        BP_CHECK(r->type == RESP_REPLY_ARRAY && strcmp(names, cases[c].want) == 0, "case %zu: '%s', want '%s' (%s)", c,
                 names, cases[c].want, rc_describe(r, e, sizeof e));
        /* the groups of each topic still come with it */
        if (c == 2 && r->count == 2) {
            const resp_reply_t *gs = field_of(&r->elements[0], "groups");
            BP_CHECK(gs != NULL && gs->count == 1 && field_of(&gs->elements[0], "group") != NULL &&
                         strcmp(field_of(&gs->elements[0], "group")->str, "gc") == 0,
                     "TOPICS COUNT 2 AFTER b: topic c lacks its group gc");
        }
        resp_reply_free(r);
    }
    const char *bad[] = { "TOPICS", "COUNT", "0" };
    expect_refused("TOPICS COUNT 0", bad, 3, "COUNT");
    const char *unknown[] = { "GROUP", "LIST", "LIMIT", "3" };
    expect_refused("GROUP LIST LIMIT 3", unknown, 4, "unknown option");
}

/* MULTI holds at most max-inflight-bytes of SENDs: the one past it is refused naming the limit, and EXEC aborts. */
static void test_multi_bytes(void)
{
    const char *flags[] = { "--max-inflight-bytes", "64kb", "--max-query", "64kb", "--max-bulk", "32kb",
                            "--max-payload",        "32kb", NULL };
    bt_start(flags);
    char e[512], id[32];
    static char payload[20001];
    memset(payload, 'p', sizeof payload - 1);
    BP_REQUIRE(bp_ok_cmd(&bt_conn, e, sizeof e, "MULTI", NULL) == 0, "%s", e);
    for (int i = 0; i < 3; i++) {
        resp_reply_t *r = rc_cmd(&bt_conn, "SEND", "t", payload, NULL);
        BP_REQUIRE(r != NULL && rc_str_eq(r, "QUEUED"), "SEND %d in MULTI: %s", i,
                   r == NULL ? bt_conn.err : rc_describe(r, e, sizeof e));
        resp_reply_free(r);
    }
    const char *fourth[] = { "SEND", "t", payload };
    expect_refused("a 4th SEND of 20 kB in MULTI", fourth, 3,
                   "a transaction holds at most max-inflight-bytes (65536) of SENDs; this one would make it 80020");
    const char *exec[] = { "EXEC" };
    expect_refused("EXEC", exec, 1, "EXECABORT");
    send_ok("t", "after", NULL, NULL, id);
}

/* The number of elements of an array reply to the command (-1: not an array). */
static long long array_count(const char *what, resp_reply_t *r)
{
    char e[512];
    BP_CHECK(r != NULL && r->type == RESP_REPLY_ARRAY, "%s: %s", what, r ? rc_describe(r, e, sizeof e) : bt_conn.err);
    long long n = r != NULL && r->type == RESP_REPLY_ARRAY ? (long long)r->count : -1;
    resp_reply_free(r);
    return n;
}

/* The replies to a pipelined MULTI, `sends` SENDs of payload to topic and EXEC: the EXEC's reply (the caller frees
 * it), every other reply checked (+OK, +QUEUED). */
static resp_reply_t *exec_sends(const char *topic, const char *payload, int sends)
{
    char e[512];
    rc_appendl(&bt_conn, "MULTI", NULL);
    for (int i = 0; i < sends; i++)
        rc_appendl(&bt_conn, "SEND", topic, payload, NULL);
    rc_appendl(&bt_conn, "EXEC", NULL);
    BP_REQUIRE(rc_flush(&bt_conn, 0) == 0, "MULTI: %s", bt_conn.err);
    for (int i = 0; i <= sends; i++) {
        resp_reply_t *r = rc_read(&bt_conn, 0);
        BP_REQUIRE(r != NULL && rc_str_eq(r, i == 0 ? "OK" : "QUEUED"), "MULTI reply %d: %s", i,
                   r == NULL ? bt_conn.err : rc_describe(r, e, sizeof e));
        resp_reply_free(r);
    }
    resp_reply_t *r = rc_read(&bt_conn, 0);
    BP_REQUIRE(r != NULL, "EXEC: %s", bt_conn.err);
    return r;
}

/* An EXEC is one batch of the commit log, so all or none of it survives a crash: with 1 MiB segments, an EXEC of
 * 160 SENDs of 30 kB (no segment holds it) is refused naming the sizes and what to set, storing nothing; an EXEC of
 * 8 such SENDs sent where less than its room is left in the segment lands whole in the next one (a message id is its
 * record's offset: every id of the EXEC in one segment). */
static void test_exec_one_segment(void)
{
    enum {
        SEGMENT = 1 << 20
    };
    const char *flags[] = {
        "--commitlog-segment-size", "1mb", "--max-query", "64kb", "--max-bulk", "32kb", "--max-payload", "32kb", NULL
    };
    bt_start(flags);
    char e[512], id[32];
    static char payload[30001];
    memset(payload, 'p', sizeof payload - 1);
    resp_reply_t *r = exec_sends("big", payload, 160);
    BP_CHECK(r->type == RESP_REPLY_ERROR && strstr(r->str, "ERR EXEC stored nothing: ") == r->str &&
                 strstr(r->str, "are 1048576 bytes") != NULL && strstr(r->str, "smaller transactions") != NULL &&
                 strstr(r->str, "set commitlog-segment-size to at least ") != NULL,
             "an EXEC of 160 SENDs of 30 kB in 1 MiB segments: %s, want a refusal naming the sizes",
             rc_describe(r, e, sizeof e));
    resp_reply_free(r);
    BP_CHECK(array_count("PEEK TOPIC big", rc_cmd(&bt_conn, "PEEK", "TOPIC", "big", NULL)) == 0,
             "the refused EXEC stored messages");
    for (int i = 0; i < 64; i++) { /* past the middle of a segment: less than the EXEC's room is left */
        send_ok("fill", payload, NULL, NULL, id);
        if (strtoull(id, NULL, 16) % SEGMENT >= SEGMENT / 2)
            break;
    }
    r = exec_sends("whole", payload, 8);
    BP_REQUIRE(r->type == RESP_REPLY_ARRAY && r->count == 8, "EXEC of 8 SENDs: %s", rc_describe(r, e, sizeof e));
    uint64_t first = strtoull(r->elements[0].str, NULL, 16);
    for (size_t i = 1; i < r->count; i++) {
        uint64_t at = strtoull(r->elements[i].str, NULL, 16);
        BP_CHECK(at / SEGMENT == first / SEGMENT,
                 "SEND %zu of the EXEC is in segment %" PRIu64 ", its first in %" PRIu64 " (split in two batches)",
                 i + 1, at / SEGMENT, first / SEGMENT);
    }
    resp_reply_free(r);
    BP_CHECK(array_count("PEEK TOPIC whole", rc_cmd(&bt_conn, "PEEK", "TOPIC", "whole", "COUNT", "100", NULL)) == 8,
             "PEEK TOPIC whole");
}

/* EXEC is all or nothing when a SEND is refused as it runs: with max-topics 2 and one topic left, a transaction
 * whose third SEND names a third topic answers one error naming that SEND (place, topic, reason), and none of its
 * SENDs — the keyed, the DEDUP and the delayed ones before it, the one after — is stored: TOPICS, PEEK, FIND and
 * LEVELS show nothing of them, a DEDUP SEND of its key is no duplicate. SENDs pipelined around it (the same storage
 * turn) are stored; a later transaction within the limit is. */
static void test_exec_all_or_nothing(void)
{
    const char *flags[] = { "--max-topics", "2", NULL };
    bt_start(flags);
    char e[512], id[32];
    send_ok("a", "before", NULL, NULL, id);
    rc_appendl(&bt_conn, "SEND", "a", "pipelined-before", NULL);
    rc_appendl(&bt_conn, "MULTI", NULL);
    rc_appendl(&bt_conn, "SEND", "a", "one", "KEY", "k1", "DEDUP", NULL);
    rc_appendl(&bt_conn, "SEND", "b", "two", "KEY", "k2", "DELAY", "1h", NULL);
    rc_appendl(&bt_conn, "SEND", "c", "three", NULL);
    rc_appendl(&bt_conn, "SEND", "a", "four", "KEY", "k4", NULL);
    rc_appendl(&bt_conn, "EXEC", NULL);
    rc_appendl(&bt_conn, "SEND", "a", "pipelined-after", NULL);
    BP_REQUIRE(rc_flush(&bt_conn, 0) == 0, "pipeline: %s", bt_conn.err);
    for (int i = 0; i < 8; i++) {
        resp_reply_t *r = rc_read(&bt_conn, 0);
        BP_REQUIRE(r != NULL, "reply %d: %s", i, bt_conn.err);
        if (i == 0 || i == 7)
            BP_CHECK(r->type == RESP_REPLY_BULK && r->len == 16, "SEND pipelined around the EXEC (%d): %s", i,
                     rc_describe(r, e, sizeof e));
        else if (i == 1)
            BP_CHECK(rc_str_eq(r, "OK"), "MULTI: %s", rc_describe(r, e, sizeof e));
        else if (i < 6)
            BP_CHECK(rc_str_eq(r, "QUEUED"), "SEND %d in MULTI: %s", i - 1, rc_describe(r, e, sizeof e));
        else
            BP_CHECK(r->type == RESP_REPLY_ERROR &&
                         strstr(r->str, "ERR EXEC stored nothing: SEND 3 (topic 'c'): topic c "
                                        "would be topic 3, over max-topics 2") == r->str,
                     "EXEC: %s, want one error naming SEND 3", rc_describe(r, e, sizeof e));
        resp_reply_free(r);
    }
    char names[256];
    resp_reply_t *t = rc_cmd(&bt_conn, "TOPICS", NULL);
    names_of(t, "topic", names, sizeof names);
    BP_CHECK(strcmp(names, "a") == 0 && int_of(entry_named(t, "topic", "a"), "sends") == 3,
             "TOPICS after the refused EXEC: %s", rc_describe(t, e, sizeof e));
    resp_reply_free(t);
    BP_CHECK(array_count("PEEK TOPIC a", rc_cmd(&bt_conn, "PEEK", "TOPIC", "a", NULL)) == 3,
             "PEEK TOPIC a shows other than the 3 SENDs outside the transaction");
    BP_CHECK(array_count("PEEK TOPIC b", rc_cmd(&bt_conn, "PEEK", "TOPIC", "b", NULL)) == 0, "PEEK TOPIC b");
    BP_CHECK(array_count("FIND a k1", rc_cmd(&bt_conn, "FIND", "a", "k1", NULL)) == 0, "FIND a k1 found one");
    BP_CHECK(array_count("FIND a k4", rc_cmd(&bt_conn, "FIND", "a", "k4", NULL)) == 0, "FIND a k4 found one");
    resp_reply_t *lv = rc_cmd(&bt_conn, "LEVELS", NULL);
    long long depth = 0;
    for (size_t i = 0; lv != NULL && lv->type == RESP_REPLY_ARRAY && i < lv->count; i++)
        depth += lv->elements[i].count == 4 ? lv->elements[i].elements[2].integer : 0;
    BP_CHECK(lv != NULL && lv->type == RESP_REPLY_ARRAY && depth == 0, "LEVELS: depth %lld, want 0: %s", depth,
             lv ? rc_describe(lv, e, sizeof e) : bt_conn.err);
    resp_reply_free(lv);
    resp_reply_t *r = send_key("a", "k1", 1);
    BP_CHECK(r && r->type == RESP_REPLY_ARRAY && r->count == 2 && r->elements[1].integer == 0,
             "DEDUP of the transaction's key k1 after it: %s, want duplicate 0",
             r ? rc_describe(r, e, sizeof e) : "no reply");
    resp_reply_free(r);

    /* within the limit: stored, one id per SEND */
    BP_REQUIRE(bp_ok_cmd(&bt_conn, e, sizeof e, "MULTI", NULL) == 0, "%s", e);
    const char *queued[][3] = { { "SEND", "a", "five" }, { "SEND", "b", "six" } };
    for (size_t i = 0; i < 2; i++) {
        r = rc_cmdv(&bt_conn, 3, queued[i], NULL);
        BP_CHECK(r && rc_str_eq(r, "QUEUED"), "queue %zu: %s", i, r ? rc_describe(r, e, sizeof e) : "no reply");
        resp_reply_free(r);
    }
    r = rc_cmd(&bt_conn, "EXEC", NULL);
    BP_CHECK(r && r->type == RESP_REPLY_ARRAY && r->count == 2 && r->elements[0].type == RESP_REPLY_BULK &&
                 r->elements[1].type == RESP_REPLY_BULK,
             "EXEC within the limit: %s", r ? rc_describe(r, e, sizeof e) : "no reply");
    resp_reply_free(r);
    topics_across_restart("a b", "EXEC within the limit");
    BP_CHECK(array_count("PEEK TOPIC b", rc_cmd(&bt_conn, "PEEK", "TOPIC", "b", NULL)) == 1, "PEEK TOPIC b");
}

static const tu_test_t tests[] = {
    { "TOPICS: counts through every move, groups, kill -9", test_topics_counts },
    { "dedup-topics: keyed SENDs deduplicate; MULTI; SIGHUP", test_dedup_topics },
    { "/metrics: per-topic and per-group series, bounded", test_metrics_per_topic },
    { "max-topics: a new topic beyond it is refused, naming it", test_max_topics },
    { "TOPICS and GROUP LIST page with COUNT and AFTER", test_paging },
    { "TOPIC DEL deletes an empty topic, refuses one in use naming why", test_topic_del },
    { "TOPIC DEL … PURGE deletes the retained messages first, in steps", test_topic_purge },
    { "the consumed log is collected while the broker never idles", test_gc_while_busy },
    { "MULTI holds at most max-inflight-bytes of SENDs", test_multi_bytes },
    { "EXEC lands in one commit-log segment, or is refused", test_exec_one_segment },
    { "EXEC stores all or nothing: a SEND refused as it runs fails the transaction", test_exec_all_or_nothing },
    { NULL, NULL },
};

int main(int argc, char **argv)
{
    return bt_main(argc, argv, "topics", tests);
}
