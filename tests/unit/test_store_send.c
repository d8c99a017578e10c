/*
 * tests/unit/test_store_send.c — CUnit suite "send" of the store package
 * behind levels/store.h (DESIGN §1–3), through its public calls: the
 * validation of store_send (topic names, key and payload limits, levels, max
 * delay, the hop bound), a run of SENDs checked before any is stored
 * (store_send_check; MULTI/EXEC), and store_break.
 *
 * The fixture (tests/helpers/store_fixture.h): every test gets a fresh temp
 * directory and drives the store with an injected clock, every now_ms passed
 * explicitly from T0; after every step that mutates, store_check() must
 * return 0. Run alone: ./tests/unit/test_store_send [suite [test]].
 */
#include "levels/clog.h"
#include "levels/clog_derived.h"
#include "levels/msg.h"
#include "levels/store.h"
#include "tests/helpers/store_fixture.h"
#include "tests/helpers/store_probe.h"
#include "tests/helpers/testutil.h"

#include <CUnit/CUnit.h>
#include <errno.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static void test_send_topic_names(void)
{
    store_t *s = OPEN_DEFAULT();
    char err[512], name[300];
    uint64_t id, due;
    SEND(s, "warmup", "x", 0, 0, T0, NULL);
    int pending = store_pending(s);

    err[0] = '\0';
    CHECK_REFUSAL(send_raw(s, "", 0, "", 0, "p", 1, 0, 0, T0, &id, &due, err, sizeof err), err, "topic", "empty");
    memset(name, 'a', sizeof name);
    err[0] = '\0';
    CHECK_REFUSAL(send_raw(s, name, 256, "", 0, "p", 1, 0, 0, T0, &id, &due, err, sizeof err), err, "topic", "255");
    err[0] = '\0';
    CHECK_REFUSAL(send_raw(s, "a b", 3, "", 0, "p", 1, 0, 0, T0, &id, &due, err, sizeof err), err, "topic", "0x20");
    err[0] = '\0';
    CHECK_REFUSAL(send_raw(s, "a\001b", 3, "", 0, "p", 1, 0, 0, T0, &id, &due, err, sizeof err), err, "topic", "0x01");
    err[0] = '\0';
    CHECK_REFUSAL(send_raw(s, "a\0b", 3, "", 0, "p", 1, 0, 0, T0, &id, &due, err, sizeof err), err, "topic", "0x00");
    err[0] = '\0';
    CHECK_REFUSAL(send_raw(s, "caf\xc3\xa9", 5, "", 0, "p", 1, 0, 0, T0, &id, &due, err, sizeof err), err, "topic",
                  "0xc3");
    TU_CHECK(store_pending(s) == pending, "a refused send changed pending from %d to %d", pending, store_pending(s));

    /* 255 bytes is fine and comes back intact. */
    err[0] = '\0';
    REQUIRE_OK(send_raw(s, name, 255, "", 0, "p", 1, 0, 0, T0, &id, &due, err, sizeof err), err);
    TU_CHECK(store_pending(s) > pending, "a send adds to the pending batch");
    store_topic_info_t ti;
    TU_CHECK(store_topic_info(s, name, 255, &ti) == 1 && ti.appended == 1, "255-byte topic log");
    msg_owned_t m[2];
    int n = -1;
    REQUIRE_OK(store_lease(s, "g", 1, name, 255, 2, LEASE, T0, m, &n, err, sizeof err), err);
    TU_REQUIRE(n == 1, "leased %d from the 255-byte topic", n);
    TU_CHECK(m[0].m.topic.len == 255 && memcmp(m[0].m.topic.ptr, name, 255) == 0, "topic name round trip");
    free_msgs(m, n);
    TU_CHECK(store_topic_info(s, "a b", 3, &ti) == 0, "a refused topic must not exist");
    CHECK_STORE(s);
}

static void test_send_key_limit(void)
{
    store_t *s = OPEN_DEFAULT();
    char key[MSG_MAX_KEY + 1], err[512] = "";
    uint64_t id, due;
    memset(key, 'k', sizeof key);
    REQUIRE_OK(send_raw(s, "t", 1, key, MSG_MAX_KEY, "p", 1, 0, 0, T0, &id, &due, err, sizeof err), err);
    int pending = store_pending(s);
    err[0] = '\0';
    CHECK_REFUSAL(send_raw(s, "t", 1, key, MSG_MAX_KEY + 1, "p", 1, 0, 0, T0, &id, &due, err, sizeof err), err, "key",
                  "1024");
    TU_CHECK(store_pending(s) == pending, "refused send changed pending");
    msg_owned_t m[2];
    int n = LEASE_N(s, "g", "t", 2, LEASE, T0, m);
    TU_REQUIRE(n == 1, "leased %d", n);
    TU_CHECK(m[0].m.key.len == MSG_MAX_KEY && memcmp(m[0].m.key.ptr, key, MSG_MAX_KEY) == 0, "key round trip");
    free_msgs(m, n);
    CHECK_STORE(s);
}

/* Payload limits at max_payload: 0 and max accepted (and intact), max + 1 refused. */
static void payload_limits(uint32_t max_payload)
{
    store_options_t o;
    opts_default(&o);
    o.max_payload = max_payload;
    store_t *s = OPEN(&o);
    char *payload = malloc((size_t)max_payload + 1), err[512] = "";
    TU_REQUIRE(payload != NULL, "malloc");
    for (uint32_t i = 0; i <= max_payload; i++)
        payload[i] = (char)(i * 131 + 7);
    uint64_t id0, idmax, due;
    REQUIRE_OK(send_raw(s, "t", 1, "", 0, "", 0, 0, 0, T0, &id0, &due, err, sizeof err), err);
    REQUIRE_OK(send_raw(s, "t", 1, "", 0, payload, max_payload, 2, 0, T0, &idmax, &due, err, sizeof err), err);
    int pending = store_pending(s);
    uint64_t depth = level_depth(s, 2);
    uint64_t id;
    err[0] = '\0';
    int rc = send_raw(s, "t", 1, "", 0, payload, (size_t)max_payload + 1, 0, 0, T0, &id, &due, err, sizeof err);
    char want[32];
    snprintf(want, sizeof want, "%u", max_payload);
    CHECK_REFUSAL(rc, err, "max-payload", want);
    err[0] = '\0';
    rc = send_raw(s, "t", 1, "", 0, payload, (size_t)max_payload + 1, 2, 0, T0, &id, &due, err, sizeof err);
    CHECK_REFUSAL(rc, err, "payload", want);
    TU_CHECK(store_pending(s) == pending, "refused send changed pending");
    CHECK_EQ_U64(level_depth(s, 2), depth);

    TU_CHECK(MOVE(s, T0 + 5 * SEC, 10, NULL) == 1, "the max payload message moves");
    msg_owned_t m[4];
    int n = LEASE_N(s, "g", "t", 4, LEASE, T0 + 5 * SEC, m);
    TU_REQUIRE(n == 2, "leased %d, want 2", n);
    TU_CHECK(m[0].m.id == id0 && m[0].m.payload.len == 0, "empty payload: id %" PRIu64 " len %u", m[0].m.id,
             m[0].m.payload.len);
    TU_CHECK(m[1].m.id == idmax && m[1].m.payload.len == max_payload &&
                 memcmp(m[1].m.payload.ptr, payload, max_payload) == 0,
             "max payload did not round trip");
    free_msgs(m, n);
    free(payload);
    CHECK_STORE(s);
}

static void test_send_payload_small_max(void)
{
    payload_limits(64u << 10);
}
static void test_send_payload_default_max(void)
{
    payload_limits(MSG_DEFAULT_MAX_PAYLOAD);
}

static void test_send_levels(void)
{
    store_t *s = OPEN_DEFAULT();
    char err[512];
    uint64_t id, due;
    SEND(s, "t", "warm", 1, 0, T0, NULL);
    int pending = store_pending(s);
    int bad[] = { 19, -1, 64, 1000 };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        err[0] = '\0';
        int rc = send_raw(s, "t", 1, "", 0, "p", 1, bad[i], 0, T0, &id, &due, err, sizeof err);
        CHECK_REFUSAL(rc, err, "1..18", NULL);
        char lv[16];
        snprintf(lv, sizeof lv, "%d", bad[i]);
        TU_CHECK(strstr(err, lv) != NULL, "message \"%s\" does not name level %d", err, bad[i]);
    }
    TU_CHECK(store_pending(s) == pending, "refused sends changed pending");
    for (int l = 1; l <= 18; l++)
        TU_CHECK(level_depth(s, l) == (l == 1), "level %d depth %" PRIu64, l, level_depth(s, l));
    /* Level 0 with no delay is "ready now"; level 18 is fine. */
    uint64_t d0, d18;
    SEND(s, "t", "now", 0, 0, T0, &d0);
    SEND(s, "t", "2h", 18, 0, T0, &d18);
    CHECK_EQ_U64(d0, T0);
    CHECK_EQ_U64(d18, T0 + 2 * HOUR);
    store_topic_info_t ti;
    TU_CHECK(store_topic_info(s, "t", 1, &ti) == 1 && ti.appended == 1, "level 0 went to the topic log");
    CHECK_STORE(s);
}

static void test_send_max_delay(void)
{
    store_t *s = OPEN_DEFAULT();
    char err[512] = "";
    uint64_t id, due;
    /* exactly max-delay is accepted */
    REQUIRE_OK(send_raw(s, "t", 1, "", 0, "p", 1, 0, 3 * DAY, T0, &id, &due, err, sizeof err), err);
    CHECK_EQ_U64(due, T0 + 3 * DAY);
    int pending = store_pending(s);
    uint64_t depths[19];
    for (int l = 1; l <= 18; l++)
        depths[l] = level_depth(s, l);
    err[0] = '\0';
    int rc = send_raw(s, "t", 1, "", 0, "p", 1, 0, 3 * DAY + SEC, T0, &id, &due, err, sizeof err);
    CHECK_REFUSAL(rc, err, "max-delay", "3d");
    err[0] = '\0';
    rc = send_raw(s, "t", 1, "", 0, "p", 1, 0, 3 * DAY + 1, T0, &id, &due, err, sizeof err);
    CHECK_REFUSAL(rc, err, "max-delay 3d", NULL);
    TU_CHECK(store_pending(s) == pending, "refused send changed pending");
    for (int l = 1; l <= 18; l++)
        TU_CHECK(level_depth(s, l) == depths[l], "refused send changed level %d", l);
    CLOSE(&s);

    /* A configured limit is the one named. */
    store_options_t o;
    opts_default(&o);
    o.max_delay_ms = HOUR;
    s = OPEN(&o);
    err[0] = '\0';
    rc = send_raw(s, "t", 1, "", 0, "p", 1, 0, 2 * HOUR, T0, &id, &due, err, sizeof err);
    CHECK_REFUSAL(rc, err, "max-delay 1h", "2h");
    /* LEVEL is not a delay request: level 18 (2h) is allowed even with max-delay 1h */
    err[0] = '\0';
    rc = send_raw(s, "t", 1, "", 0, "p", 1, 18, 0, T0, &id, &due, err, sizeof err);
    TU_CHECK(rc == 0 && due == T0 + 2 * HOUR, "LEVEL 18 with max-delay 1h: rc %d due %" PRIu64 " (%s)", rc, due, err);
    CHECK_STORE(s);
}

/* Chains are bounded (DESIGN §1, LVL_MAX_HOPS = 255): with a table whose
 * longest level is 5s, 1h would take 720 hops (720 writes) and is refused;
 * 10m (120 hops) is accepted. Retries with a delay obey the same bound. */
static void test_send_hop_bound(void)
{
    store_options_t o;
    opts_default(&o);
    char err[512] = "";
    REQUIRE_OK(lvl_table_parse("1s 5s", &o.levels, err, sizeof err), err);
    store_t *s = OPEN(&o);
    uint64_t id, due;
    int rc = send_raw(s, "t", 1, "", 0, "p", 1, 0, HOUR, T0, &id, &due, err, sizeof err);
    CHECK_REFUSAL(rc, err, "hops", "255");
    TU_CHECK(store_pending(s) == 0, "refused send left %d pending", store_pending(s));
    err[0] = '\0';
    REQUIRE_OK(send_raw(s, "t", 1, "", 0, "p", 1, 0, 10 * MIN, T0, &id, &due, err, sizeof err), err);
    CHECK_EQ_U64(due, T0 + 10 * MIN);
    uint64_t r = SEND(s, "t", "r", 0, 0, T0, NULL);
    msg_owned_t m[2];
    int n = LEASE_N(s, "g", "t", 1, LEASE, T0, m);
    TU_REQUIRE(n == 1 && m[0].m.id == r, "lease r");
    free_msgs(m, n);
    store_fail_req_t fr = { .delay_ms = HOUR, .reason = "x", .reason_len = 1 };
    int found = -1;
    err[0] = '\0';
    rc = store_fail(s, "g", 1, r, &fr, T0, &found, NULL, err, sizeof err);
    CHECK_REFUSAL(rc, err, "hops", NULL);
    TU_CHECK(probe_lease_get(s, "g", 1, r, NULL, NULL, NULL, 0) == 1, "refused fail removed the lease");
    CHECK_STORE(s);
}

/* ---- a run of SENDs checked before any is stored (store_send_check; MULTI/EXEC) ---- */

/* One SEND through store_send_check (a fresh check: the first of a run) and
 * then store_send or store_send_dedup: the same answer, the same error, and
 * the check alone wrote nothing (nothing pending, no id taken, no topic). */
static void check_matches_send_at(store_t *s, const store_send_req_t *r, int dedup, int line)
{
    char cerr[512] = "", serr[512] = "";
    int pending = store_pending(s);
    uint64_t seq = store_next_seq(s);
    store_topic_info_t ti;
    int had_topic = store_topic_info(s, r->topic, r->topic_len, &ti);
    store_send_check_t *c = store_send_check_new();
    int crc = store_send_check(s, c, r, dedup, cerr, sizeof cerr);
    store_send_check_free(c);
    TU_CHECK_AT(store_pending(s) == pending && store_next_seq(s) == seq &&
                    store_topic_info(s, r->topic, r->topic_len, &ti) == had_topic,
                line, "store_send_check wrote: pending %d → %d, next seq %" PRIu64 " → %" PRIu64, pending,
                store_pending(s), seq, store_next_seq(s));
    uint64_t id, due;
    int dup;
    int src = dedup ? store_send_dedup(s, r, T0, &id, &due, &dup, serr, sizeof serr)
                    : store_send(s, r, T0, &id, &due, serr, sizeof serr);
    TU_CHECK_AT(crc == src && strcmp(cerr, serr) == 0, line, "check: %d \"%s\"; %s: %d \"%s\"", crc, cerr,
                dedup ? "store_send_dedup" : "store_send", src, serr);
}
#define CHECK_MATCHES_SEND(s, r, dedup) check_matches_send_at((s), (r), (dedup), __LINE__)

/* Every refusal of store_send and store_send_dedup is store_send_check's, in
 * the same words; what they accept it accepts. */
static void test_send_check_matches(void)
{
    store_options_t o;
    opts_default(&o);
    o.max_payload = 64;
    o.max_delay_ms = HOUR;
    o.max_topics = 2;
    store_t *s = OPEN(&o);
    static char longkey[MSG_MAX_KEY + 2], payload[65];
    memset(longkey, 'k', sizeof longkey - 1);
    memset(payload, 'p', sizeof payload - 1);
    const store_send_req_t ok = {
        .topic = "a", .topic_len = 1, .key = "k", .key_len = 1, .payload = "p", .payload_len = 1
    };
    store_send_req_t r;
    for (int dedup = 0; dedup <= 1; dedup++) {
        r = ok;
        r.topic = "bad topic";
        r.topic_len = 9;
        CHECK_MATCHES_SEND(s, &r, dedup);
        r = ok;
        r.topic_len = 0;
        CHECK_MATCHES_SEND(s, &r, dedup);
        r = ok;
        r.key = longkey;
        r.key_len = sizeof longkey - 1;
        CHECK_MATCHES_SEND(s, &r, dedup);
        r = ok;
        r.payload = payload;
        r.payload_len = sizeof payload - 1;
        CHECK_MATCHES_SEND(s, &r, dedup);
        r = ok;
        r.level = 99;
        CHECK_MATCHES_SEND(s, &r, dedup);
        r = ok;
        r.delay_ms = 2 * HOUR;
        CHECK_MATCHES_SEND(s, &r, dedup);
    }
    r = ok;
    r.key_len = 0;
    CHECK_MATCHES_SEND(s, &r, 1); /* DEDUP needs a KEY */
    r = ok;
    CHECK_MATCHES_SEND(s, &r, 0); /* accepted: topic a */
    CHECK_MATCHES_SEND(s, &r, 1); /* accepted: a duplicate of it */
    r.topic = "b";
    CHECK_MATCHES_SEND(s, &r, 1); /* accepted: topic b, the 2nd */
    r.topic = "c";
    CHECK_MATCHES_SEND(s, &r, 0); /* over max-topics 2 */
    CHECK_MATCHES_SEND(s, &r, 1);
    COMMIT(s);
    r.topic = "a";
    r.delay_ms = 10 * SEC;
    CHECK_MATCHES_SEND(s, &r, 1); /* a duplicate of a committed message */
    CHECK_STORE(s);
    CLOSE(&s);
}

/* A run's check counts its own new topics against max-topics: with one
 * topic left, [a (exists), b (new), a, b, c (new)] is refused at c, naming it
 * as store_send names it once the run's first four are stored; nothing of the
 * run was written by the check. */
static void test_send_check_run_topics(void)
{
    store_options_t o;
    opts_default(&o);
    o.max_topics = 2;
    store_t *s = OPEN(&o);
    SEND(s, "a", "x", 0, 0, T0, NULL);
    COMMIT(s);
    const char *run[] = { "a", "b", "a", "b", "c" };
    store_send_check_t *c = store_send_check_new();
    char err[512] = "", serr[512] = "";
    int refused_at = -1;
    for (int i = 0; i < 5 && refused_at < 0; i++) {
        store_send_req_t r = { .topic = run[i], .topic_len = 1, .payload = "p", .payload_len = 1 };
        if (store_send_check(s, c, &r, 0, err, sizeof err) != 0)
            refused_at = i;
    }
    store_send_check_free(c);
    TU_CHECK(refused_at == 4, "the run was refused at SEND %d (\"%s\"), want 4 (topic c)", refused_at, err);
    CHECK_REFUSAL(-1, err, "topic c would be topic 3, over max-topics 2", NULL);
    TU_CHECK(store_pending(s) == 0, "the check left %d writes pending", store_pending(s));
    store_topic_info_t ti;
    TU_CHECK(store_topic_info(s, "b", 1, &ti) == 0, "the check created topic b");
    for (int i = 0; i < 4; i++)
        SEND(s, run[i], "x", 0, 0, T0, NULL);
    uint64_t id, due;
    int rc = send_raw(s, "c", 1, "", 0, "x", 1, 0, 0, T0, &id, &due, serr, sizeof serr);
    TU_CHECK(rc == -1 && strcmp(err, serr) == 0, "store_send of c after the run: %d \"%s\", the check said \"%s\"", rc,
             serr, err);
    COMMIT(s);
    CHECK_STORE(s);
    CLOSE(&s);
}

/* DEDUP within a run: a key the run sends earlier makes a later DEDUP SEND of
 * it a duplicate (no new topic counted for it), as store_send_dedup finds it
 * in the batch; a committed live message too. */
static void test_send_check_run_dedup(void)
{
    store_options_t o;
    opts_default(&o);
    o.max_topics = 2;
    store_t *s = OPEN(&o);
    char err[512] = "";
    store_send_req_t live = {
        .topic = "a", .topic_len = 1, .key = "k", .key_len = 1, .payload = "p", .payload_len = 1
    };
    uint64_t id, due;
    REQUIRE_OK(store_send(s, &live, T0, &id, &due, err, sizeof err), err);
    COMMIT(s);
    REQUIRE_OK(store_send_run_begin(s, 0, err, sizeof err), err);
    store_send_check_t *c = store_send_check_new();
    store_send_req_t b = { .topic = "b", .topic_len = 1, .key = "j", .key_len = 1, .payload = "p", .payload_len = 1 };
    REQUIRE_OK(store_send_check(s, c, &b, 0, err, sizeof err), err);    /* new topic b: the 2nd */
    REQUIRE_OK(store_send_check(s, c, &b, 1, err, sizeof err), err);    /* a duplicate of the run's own SEND */
    REQUIRE_OK(store_send_check(s, c, &live, 1, err, sizeof err), err); /* a duplicate of a's committed message */
    store_send_req_t d = b;
    d.topic = "d";
    CHECK_REFUSAL(store_send_check(s, c, &d, 1, err, sizeof err), err, "topic d would be topic 3, over max-topics 2",
                  NULL);
    store_send_check_free(c);
    TU_CHECK(store_pending(s) == 0, "the checks left %d writes pending", store_pending(s));
    CHECK_STORE(s);
    CLOSE(&s);
}

/* store_break: the pending batch is never written, every later operation and
 * the close fail naming why, and a reopen finds what was committed before. */
static void test_send_break_drops_batch(void)
{
    store_t *s = OPEN_DEFAULT();
    uint64_t a = SEND(s, "t", "committed", 0, 0, T0, NULL);
    COMMIT(s);
    SEND(s, "t", "dropped", 0, 0, T0 + 1, NULL);
    store_break(s, "EXEC dropped the batch: test");
    TU_CHECK(store_broken(s), "store_break did not break the store");
    store_break(s, "a second cause");
    char err[512] = "";
    uint64_t id, due;
    CHECK_REFUSAL(send_raw(s, "t", 1, "", 0, "x", 1, 0, 0, T0 + 2, &id, &due, err, sizeof err), err,
                  "EXEC dropped the batch: test", "reopen");
    err[0] = '\0';
    CHECK_REFUSAL(store_commit(s, err, sizeof err), err, "EXEC dropped the batch: test", NULL);
    for (int i = 0; i < MAX_OPEN; i++)
        if (g_open[i] == s)
            g_open[i] = NULL;
    err[0] = '\0';
    int rc = store_close(s, err, sizeof err);
    TU_CHECK(rc == -1 && strstr(err, "EXEC dropped the batch") != NULL, "store_close: %d \"%s\"", rc, err);
    s = OPEN_DEFAULT();
    CHECK_STORE(s);
    store_topic_info_t ti;
    TU_CHECK(store_topic_info(s, "t", 1, &ti) == 1 && ti.appended == 1,
             "after reopen topic t holds %" PRIu64 ", want 1", ti.appended);
    msg_owned_t m[4];
    int n = LEASE_N(s, "g", "t", 4, LEASE, T0 + 3, m);
    TU_CHECK(n == 1 && m[0].m.id == a, "after reopen leased %d", n);
    free_msgs(m, n);
    CHECK_STORE(s);
}

/* What a walk of the closed log found (test_send_ids_are_records). */
typedef struct record_walk {
    const uint64_t *ids; /* the ids SEND returned, ascending */
    const size_t *lens;  /* their payloads' lengths */
    int n;
    uint64_t segment_bytes, segment; /* the segment being walked */
    uint32_t ordinal;                /* message records before the next in it */
    int found, bad;
    uint64_t first; /* the first message record walked */
    char problem[512];
} record_walk_t;

static int walk_message_record(const clog_record_t *r, void *ctx)
{
    record_walk_t *w = ctx;
    if (r->type != CLOG_DATA || (r->len >= 4 && memcmp(r->data, DERIVED_MAGIC, 4) == 0)) {
        return 0;
    }
    uint64_t base = r->offset - r->offset % w->segment_bytes;
    if (base != w->segment) {
        w->segment = base;
        w->ordinal = 0;
    }
    w->first = w->first != 0 ? w->first : r->offset;
    msg_t m;
    char err[256];
    int lo = 0, hi = w->n - 1, at = -1;
    while (lo <= hi && at < 0) {
        int mid = (lo + hi) / 2;
        at = w->ids[mid] == r->offset ? mid : -1;
        lo = w->ids[mid] < r->offset ? mid + 1 : lo;
        hi = w->ids[mid] > r->offset ? mid - 1 : hi;
    }
    if (msg_decode_record(r->data, r->len, r->offset, w->ordinal++, &m, err, sizeof err) != 0 || at < 0 ||
        m.id != r->offset || m.payload.len != w->lens[at] || m.topic.len != 1 || m.topic.ptr[0] != 't') {
        if (w->bad++ == 0) {
            snprintf(w->problem, sizeof w->problem, "record at %" PRIu64 " (ordinal %" PRIu32 "): %s", r->offset,
                     w->ordinal - 1, at < 0 ? "no SEND returned this id" : err);
        }
        return 0;
    }
    w->found++;
    return 0;
}

/* Every SEND's message is a record of the commit log at its id
 * (design-commitlog.md §2, "Message record form (s42)"): after SENDs across
 * many 64 KiB segments and two reopens at the same clock time (the log goes
 * on in the segment it ended in, so the open counts that segment's message
 * records), a walk of the closed log finds every message record decoding at
 * its ordinal — the count of message records before it in its segment — with
 * the id and payload SEND took; each id SEND returned past the first record
 * walked (earlier segments are recycled below a checkpoint) is found. */
static void test_send_ids_are_records(void)
{
    enum {
        N = 900
    };
    static uint64_t ids[N];
    static size_t lens[N];
    static char payload[3000];
    memset(payload, 'p', sizeof payload);
    store_options_t o;
    opts_default(&o);
    o.segment_bytes = CLOG_SEGMENT_MIN;
    store_t *s = OPEN(&o);
    for (int i = 0; i < N; i++) {
        if (i == N / 3 || i == 2 * N / 3) {
            CLOSE(&s);
            s = OPEN(&o);
        }
        lens[i] = (size_t)(i * 37) % sizeof payload;
        char err[512] = "";
        uint64_t due;
        TU_REQUIRE(send_raw(s, "t", 1, NULL, 0, payload, lens[i], i % 3, 0, T0, &ids[i], &due, err, sizeof err) == 0,
                   "SEND %d: %s", i, err);
        uint64_t before = i > 0 ? ids[i - 1] : 0;
        TU_REQUIRE(ids[i] > before, "id %d %" PRIu64 " not above %" PRIu64, i, ids[i], before);
        if (i % 7 == 6)
            COMMIT(s);
    }
    COMMIT(s);
    CHECK_STORE(s);
    CLOSE(&s);
    clog_options_t co = { .dir = g_data, .segment_bytes = o.segment_bytes };
    clog_t *c = NULL;
    char err[512] = "";
    TU_REQUIRE(clog_open(&co, &c, NULL, err, sizeof err) == 0, "clog_open: %s", err);
    record_walk_t w = { .ids = ids, .lens = lens, .n = N, .segment_bytes = o.segment_bytes, .segment = UINT64_MAX };
    int rc = clog_walk(c, 0, walk_message_record, &w, err, sizeof err);
    clog_close(c);
    TU_REQUIRE(rc == 0, "clog_walk: %s", err);
    int expected = 0;
    for (int i = 0; i < N; i++)
        expected += ids[i] >= w.first;
    TU_CHECK(w.bad == 0, "%d bad message records, the first: %s", w.bad, w.problem);
    TU_CHECK(w.found == expected && expected >= N / 3, "found %d message records of %d past %" PRIu64, w.found,
             expected, w.first);
}

/* A message no segment holds (its record, its level entry's copy and the
 * rest of its batch: store_check_payload_room) is refused naming the segment
 * size and the sizes to set, with nothing written and the store usable: the
 * next SEND goes in and every message before reads back. */
static void test_send_larger_than_segment(void)
{
    enum {
        SEGMENT = 256 << 10,
        FITS = 80 << 10, /* twice it, a quarter segment and the reserves fit in 256 KiB */
        TOO_BIG = 100 << 10
    };
    static char payload[TOO_BIG];
    memset(payload, 'q', sizeof payload);
    store_options_t o;
    opts_default(&o);
    o.segment_bytes = SEGMENT;
    store_t *s = OPEN(&o);
    char err[512] = "";
    uint64_t first, id, due;
    REQUIRE_OK(send_raw(s, "t", 1, "", 0, payload, FITS, 0, 0, T0, &first, &due, err, sizeof err), err);
    int pending = store_pending(s);
    err[0] = '\0';
    int rc = send_raw(s, "t", 1, "", 0, payload, TOO_BIG, 0, 0, T0, &id, &due, err, sizeof err);
    char segment[32];
    snprintf(segment, sizeof segment, "are %d bytes", SEGMENT);
    TU_CHECK(rc == -1 && strstr(err, segment) != NULL && strstr(err, "commitlog-segment-size") != NULL &&
                 strstr(err, "max-payload") != NULL,
             "a SEND of %d bytes into %d-byte segments: rc %d, \"%s\" (want the segment size and what to set)", TOO_BIG,
             SEGMENT, rc, err);
    TU_CHECK(!store_broken(s) && store_pending(s) == pending, "the refusal broke the store (%d) or wrote (%d, was %d)",
             store_broken(s), store_pending(s), pending);
    REQUIRE_OK(send_raw(s, "t", 1, "", 0, payload, FITS, 0, 0, T0, &id, &due, err, sizeof err), err);
    TU_CHECK(id > first, "the SEND after the refusal: id %" PRIu64 " not above %" PRIu64, id, first);
    COMMIT(s);
    GROUP_CREATE(s, "g", "t", 1, T0);
    msg_owned_t m[3];
    int n = LEASE_N(s, "g", "t", 3, LEASE, T0, m);
    TU_CHECK(n == 2 && m[0].m.id == first && m[1].m.id == id && m[1].m.payload.len == FITS,
             "leased %d after the refusal, want the two that fit", n);
    free_msgs(m, n);
    CHECK_STORE(s);
}

/* ---- a run of SENDs lands in one batch (MULTI/EXEC) ---- */

enum {
    RUN_SEGMENT = 1 << 20,
    RUN_PAYLOAD = 32 << 10,
    RUN_SENDS = 8 /* 256 KiB of payload: with the level copies and a quarter segment, ~800 KiB of one segment */
};

static char run_payload[RUN_PAYLOAD];

static void run_options(store_options_t *o)
{
    opts_default(o);
    o->segment_bytes = RUN_SEGMENT;
}

/* Committed SENDs of topic "fill" until the log is past the middle of a
 * segment: less room is left there than the run takes. 0, or -1 with err. */
static int fill_past_half_segment(store_t *s, char *err, size_t errlen)
{
    memset(run_payload, 'r', sizeof run_payload);
    for (int i = 0; i < 64; i++) {
        uint64_t id, due;
        if (send_raw(s, "fill", 4, "", 0, run_payload, RUN_PAYLOAD, 0, 0, T0, &id, &due, err, errlen) != 0 ||
            store_commit(s, err, errlen) != 0) {
            return -1;
        }
        if (id % RUN_SEGMENT >= RUN_SEGMENT / 2) {
            return 0;
        }
    }
    snprintf(err, errlen, "64 SENDs did not pass the middle of a segment");
    return -1;
}

/* The run: store_send_run_begin with its bytes, then RUN_SENDS SENDs of
 * topic "run", ids into ids (may be NULL). 0, or -1 with err. */
static int send_run(store_t *s, uint64_t *ids, char *err, size_t errlen)
{
    store_send_req_t r = {
        .topic = "run", .topic_len = 3, .key = "", .key_len = 0, .payload = run_payload, .payload_len = RUN_PAYLOAD
    };
    uint64_t bytes = 0;
    for (int i = 0; i < RUN_SENDS; i++)
        bytes += store_send_run_bytes(&r);
    if (store_send_run_begin(s, bytes, err, errlen) != 0)
        return -1;
    for (int i = 0; i < RUN_SENDS; i++) {
        uint64_t id, due;
        if (store_send(s, &r, T0, &id, &due, err, errlen) != 0)
            return -1;
        if (ids != NULL)
            ids[i] = id;
    }
    return 0;
}

/* The messages of topic "run" the store holds (its log's appended count). */
static uint64_t run_stored(store_t *s)
{
    store_topic_info_t ti;
    return store_topic_info(s, "run", 3, &ti) == 1 ? ti.appended : 0;
}

/* A run of SENDs that must be stored all or none (MULTI/EXEC), begun past
 * the middle of a 1 MiB segment whose rest cannot hold it, asks for its whole
 * room at store_send_run_begin and lands in the next segment as one batch: a
 * process killed after the run's SENDs and before their commit leaves none of
 * them (with each SEND asking its own room, the first three or four filled
 * the segment's rest, the next committed them to make room, and the kill kept
 * those); a run committed the same way after a reopen keeps all of them, every
 * id in one segment. */
static void test_send_run_one_segment(void)
{
    store_options_t o;
    run_options(&o);
    fflush(NULL);
    pid_t pid = fork();
    TU_REQUIRE(pid >= 0, "fork: %s", strerror(errno));
    if (pid == 0) {
        char err[512] = "";
        store_t *c = NULL;
        if (store_open(&o, T0, &c, err, sizeof err) != 0 || fill_past_half_segment(c, err, sizeof err) != 0 ||
            send_run(c, NULL, err, sizeof err) != 0) {
            fprintf(stderr, "crash child: %s\n", err);
            _exit(3);
        }
        kill(getpid(), SIGKILL); /* after the run's SENDs, before their commit */
        _exit(4);
    }
    int status = 0;
    TU_REQUIRE(waitpid(pid, &status, 0) == pid, "waitpid: %s", strerror(errno));
    TU_REQUIRE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL, "the child failed (status %d)", status);
    store_t *s = OPEN(&o);
    uint64_t kept = run_stored(s);
    TU_CHECK(kept == 0, "a kill after the run's SENDs kept %" PRIu64 " of its %d messages (all or none)", kept,
             RUN_SENDS);
    char err[512] = "";
    uint64_t ids[RUN_SENDS];
    REQUIRE_OK(fill_past_half_segment(s, err, sizeof err), err);
    REQUIRE_OK(send_run(s, ids, err, sizeof err), err);
    COMMIT(s);
    for (int i = 1; i < RUN_SENDS; i++)
        TU_CHECK(ids[i] / RUN_SEGMENT == ids[0] / RUN_SEGMENT,
                 "SEND %d of the run is in segment %" PRIu64 ", the first in %" PRIu64, i + 1, ids[i] / RUN_SEGMENT,
                 ids[0] / RUN_SEGMENT);
    CHECK_STORE(s);
    CLOSE(&s);
    s = OPEN(&o);
    kept = run_stored(s);
    TU_CHECK(kept == RUN_SENDS, "the committed run: %" PRIu64 " of %d messages stored", kept, RUN_SENDS);
    CHECK_STORE(s);
}

/* A run no segment holds (5 MiB of SENDs, 1 MiB segments) is refused at
 * store_send_run_begin naming the bytes it needs, the segment size and the
 * segment size to set; nothing is written and the store stays usable. */
static void test_send_run_larger_than_segment(void)
{
    store_options_t o;
    run_options(&o);
    store_t *s = OPEN(&o);
    char err[768] = "";
    SEND(s, "before", "x", 0, 0, T0, NULL);
    int pending = store_pending(s);
    store_send_req_t r = {
        .topic = "big", .topic_len = 3, .key = "", .key_len = 0, .payload = run_payload, .payload_len = RUN_PAYLOAD
    };
    uint64_t bytes = 0;
    for (int i = 0; i < 160; i++)
        bytes += store_send_run_bytes(&r);
    int rc = store_send_run_begin(s, bytes, err, sizeof err);
    char size[64];
    snprintf(size, sizeof size, "are %d bytes", RUN_SEGMENT);
    TU_CHECK(rc == -1 && strstr(err, size) != NULL && strstr(err, "commit-log segment") != NULL &&
                 strstr(err, "set commitlog-segment-size to at least ") != NULL,
             "a run of 160 SENDs of %d bytes into %d-byte segments: rc %d, \"%s\" (want the sizes and what to set)",
             RUN_PAYLOAD, RUN_SEGMENT, rc, err);
    TU_CHECK(!store_broken(s) && store_pending(s) == pending, "the refusal broke the store (%d) or wrote (%d, was %d)",
             store_broken(s), store_pending(s), pending);
    COMMIT(s);
    store_topic_info_t ti;
    TU_CHECK(store_topic_info(s, "big", 3, &ti) == 0, "the refused run made its topic");
    TU_CHECK(store_topic_info(s, "before", 6, &ti) == 1 && ti.appended == 1, "the SEND before the run was lost");
    CHECK_STORE(s);
}

static const tu_test_t send_tests[] = {
    { "topic names", test_send_topic_names },
    { "key limit", test_send_key_limit },
    { "payload limit 64KiB", test_send_payload_small_max },
    { "payload limit 4MiB", test_send_payload_default_max },
    { "levels", test_send_levels },
    { "max delay", test_send_max_delay },
    { "hop bound", test_send_hop_bound },
    { "a run's check matches store_send's refusals", test_send_check_matches },
    { "a run's check counts its own new topics", test_send_check_run_topics },
    { "a run's check and DEDUP", test_send_check_run_dedup },
    { "store_break drops the pending batch", test_send_break_drops_batch },
    { "a message's id is its record's offset in the commit log", test_send_ids_are_records },
    { "a message larger than a segment holds is refused naming the sizes", test_send_larger_than_segment },
    { "a run of SENDs near a segment's end lands whole in the next", test_send_run_one_segment },
    { "a run of SENDs no segment holds is refused naming the sizes", test_send_run_larger_than_segment },
    { NULL, NULL },
};

static const tu_suite_t suites[] = {
    { "send", send_tests },
};

int main(int argc, char **argv)
{
    return tu_suites_main(argc, argv, suites, sizeof suites / sizeof suites[0], store_fixture_setup,
                          store_fixture_teardown);
}
