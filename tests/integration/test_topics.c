/*
 * tests/integration/test_topics.c — TOPICS through the real broker: each
 * topic's ready, delayed, retained and sends counts and its groups, as
 * messages are sent, hop between levels, arrive, are revoked and leased,
 * and across a kill -9 (the delayed counter is kept in the batches of the
 * moves, so it is exact after the restart; --check-data verifies it).
 *
 * Run one: ./tests/integration/test_topics
 */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include <inttypes.h>
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

static const tu_test_t tests[] = {
    { "TOPICS: counts through every move, groups, kill -9", test_topics_counts },
    { NULL, NULL },
};

int main(int argc, char **argv)
{
    return bt_main(argc, argv, "topics", tests);
}
