/*
 * tests/integration/test_msg_lookup.c — GET, FIND, REVOKE and SEND … DEDUP
 * through the real broker, driven by libhourglass (hg_msg_*, hg_send_dedup),
 * with the consistency checker (--check-data, which verifies the indexes)
 * run on the data directory afterwards.
 *
 *  - lookup in every state: delayed (level, hop due, hops left), ready per
 *    group, leased (deadline), retry on a level and retry-ready, DLQ (reason),
 *    done for one group while ready for another, gone (unknown id, revoked);
 *    FIND lists a key's messages in id order with their states;
 *  - revoke before due: the message is never delivered and the level empties;
 *    revoke by key across a level and the topic log, atomically counted;
 *    revoke after delivery is refused and says to which group and why;
 *  - DEDUP: a second SEND of a live key answers the first id; a leased one is
 *    still live; after ACK or in the DLQ only, a new message is stored;
 *    resends over a kill -9 mid-stream leave exactly one live message per
 *    key, and the indexes are exact after the restart (--check-data);
 *  - a read that shows a message whose SEND is not yet synced (every
 *    fdatasync held 400 ms by strace attached to the broker) waits for that
 *    fsync: FIND and PEEK answer after it, never before the SEND is.
 *
 * Run one: ./tests/integration/test_msg_lookup
 */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <sys/wait.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <CUnit/CUnit.h>

#include "include/hourglass/hourglass.h"
#include "tests/helpers/broker_test.h"
#include "tests/helpers/testutil.h"

static hg_client_t *C;

/* Start the broker with extra flags and open a library client to it. */
static void start(const char *const *extra)
{
    bt_start(extra);
    char uri[64];
    snprintf(uri, sizeof uri, "hourglass://127.0.0.1:%d", bt_broker.port);
    hg_error_t err;
    hg_client_opts_t o;
    hg_client_opts_init(&o);
    o.read_timeout_ms = 20000;
    BP_REQUIRE(hg_client_open(uri, &o, &C, &err) == HG_OK, "open %s: %s", uri, err.message);
}

static void close_client(void)
{
    hg_client_close(C);
    C = NULL;
}

static void send1(const char *topic, const char *key, const char *payload, hg_delay_t d, char *id)
{
    hg_err_t e = hg_send(C, topic, key, payload, strlen(payload), d, id);
    BP_REQUIRE(e == HG_OK, "SEND %s %s: %s", topic, payload, hg_client_errmsg(C));
}

static hg_msg_info_t *get(const char *id)
{
    hg_msg_info_t *m = NULL;
    hg_err_t e = hg_msg_get(C, id, &m);
    BP_REQUIRE(e == HG_OK && m != NULL, "GET %s: %s", id, hg_client_errmsg(C));
    BP_CHECK(strcmp(m->id, id) == 0, "GET %s answered id %s", id, m->id);
    return m;
}

static const hg_msg_group_t *group_of(const hg_msg_info_t *m, const char *g)
{
    for (size_t i = 0; i < m->ngroups; i++)
        if (strcmp(m->groups[i].group, g) == 0)
            return &m->groups[i];
    return NULL;
}

static void expect_state(const char *id, hg_msg_state_t want)
{
    hg_msg_info_t *m = get(id);
    BP_CHECK(m->state == want, "GET %s: state %s, want %s", id, hg_msg_state_name(m->state), hg_msg_state_name(want));
    hg_msg_info_free(m);
}

/* PULL one message of group g (BLOCK 5 s); its id into id. */
static void pull1(const char *g, const char *topic, const char *lease, char *id, size_t idlen)
{
    resp_reply_t *r;
    rc_msg_t m;
    bt_pull_one(g, topic, "5000", lease, &r, &m);
    snprintf(id, idlen, "%s", m.id);
    resp_reply_free(r);
}

static void ok_cmd(const char *a0, const char *a1, const char *a2, const char *a3, const char *a4, const char *a5)
{
    char e[512];
    long long n;
    BP_REQUIRE(bp_int_cmd(&bt_conn, &n, e, sizeof e, a0, a1, a2, a3, a4, a5, NULL) == 0, "%s %s: %s", a0, a1, e);
}

/* --check-data on the stopped broker's directory: exit 0 ("ok: ..."). */
static void check_data(void)
{
    char e[512], out[2048];
    BP_REQUIRE(bp_stop(&bt_broker, e, sizeof e) == 0, "stop: %s", e);
    int rc = bp_check_data(&bt_broker, out, sizeof out);
    BP_CHECK(rc == 0 && strncmp(out, "ok:", 3) == 0, "--check-data: exit %d: %s", rc, out);
}

/* ---- lookup in every state ------------------------------------------------------------- */

static void test_lookup_states(void)
{
    const char *flags[] = { "--levels", "1s 2s 3s 10s 1h", NULL };
    start(flags);
    char e[512];
    BP_REQUIRE(bp_ok_cmd(&bt_conn, e, sizeof e, "GROUP", "CREATE", "g1", "t", NULL) == 0, "%s", e);
    BP_REQUIRE(bp_ok_cmd(&bt_conn, e, sizeof e, "GROUP", "CREATE", "g2", "t", NULL) == 0, "%s", e);

    /* delayed: 1h + 10s + 3s = a chain of three hops, waiting on level 5 (1h) first */
    char delayed[HG_ID_MAX];
    uint64_t before = tu_now_wall_ms();
    send1("t", "k-delayed", "D", hg_delay_ms(3600000 + 13000), delayed);
    hg_msg_info_t *m = get(delayed);
    BP_CHECK(m->state == HG_MSG_DELAYED, "delayed: %s", hg_msg_state_name(m->state));
    BP_CHECK(m->level == 5 && m->hops_left == 2, "delayed: level %d, %d hops left; want 5, 2", m->level, m->hops_left);
    BP_CHECK(m->hop_due_ms >= before + 3600000 && m->hop_due_ms <= tu_now_wall_ms() + 3600000,
             "hop due %" PRIu64 " is not ~now+1h", m->hop_due_ms);
    BP_CHECK(m->due_ms == m->hop_due_ms + 13000, "final due %" PRIu64 ", hop due %" PRIu64, m->due_ms, m->hop_due_ms);
    BP_CHECK(strcmp(m->topic, "t") == 0 && strcmp(m->key, "k-delayed") == 0 && m->payload_len == 1 &&
                 memcmp(m->payload, "D", 1) == 0,
             "delayed: topic %s key %s payload %zu bytes", m->topic, m->key, m->payload_len);
    hg_msg_info_free(m);
    /* PEEK LEVEL 5: the same message, read only (it stays delayed) */
    resp_reply_t *pk = rc_cmd(&bt_conn, "PEEK", "LEVEL", "5", "COUNT", "10", NULL);
    BP_CHECK(pk != NULL && pk->type == RESP_REPLY_ARRAY && pk->count == 1 && pk->elements[0].count == 7 &&
                 strcmp(pk->elements[0].elements[0].str, delayed) == 0,
             "PEEK LEVEL 5: %s", pk ? rc_describe(pk, e, sizeof e) : "no reply");
    resp_reply_free(pk);
    expect_state(delayed, HG_MSG_DELAYED);
    pk = rc_cmd(&bt_conn, "PEEK", "LEVEL", "6", NULL);
    BP_CHECK(pk != NULL && pk->type == RESP_REPLY_ERROR && strstr(pk->str, "LEVEL must be 1..5") != NULL,
             "PEEK LEVEL 6: %s", pk ? rc_describe(pk, e, sizeof e) : "no reply");
    resp_reply_free(pk);

    /* ready for both groups, then leased by g1 (ready for g2), then done by g1 */
    char ready[HG_ID_MAX], got[HG_ID_MAX];
    send1("t", "k-ready", "R", hg_delay_none(), ready);
    pk = rc_cmd(&bt_conn, "PEEK", "TOPIC", "t", NULL);
    BP_CHECK(pk != NULL && pk->type == RESP_REPLY_ARRAY && pk->count == 1 &&
                 strcmp(pk->elements[0].elements[0].str, ready) == 0,
             "PEEK TOPIC t: %s", pk ? rc_describe(pk, e, sizeof e) : "no reply");
    resp_reply_free(pk);
    m = get(ready);
    BP_CHECK(m->state == HG_MSG_READY && m->ngroups == 2, "ready: %s with %zu groups", hg_msg_state_name(m->state),
             m->ngroups);
    BP_CHECK(group_of(m, "g1") && group_of(m, "g1")->state == HG_MSG_READY && group_of(m, "g2") &&
                 group_of(m, "g2")->state == HG_MSG_READY,
             "ready: per-group states wrong");
    hg_msg_info_free(m);

    uint64_t lease_at = tu_now_wall_ms();
    pull1("g1", "t", "60000", got, sizeof got);
    BP_REQUIRE(strcmp(got, ready) == 0, "g1 pulled %s, want %s", got, ready);
    m = get(ready);
    const hg_msg_group_t *g1 = group_of(m, "g1"), *g2 = group_of(m, "g2");
    BP_CHECK(m->state == HG_MSG_READY, "leased by g1, ready for g2: overall %s (ready first)",
             hg_msg_state_name(m->state));
    BP_CHECK(g1 && g1->state == HG_MSG_LEASED && g1->deadline_ms >= lease_at + 60000, "g1: %s deadline %" PRIu64,
             g1 ? hg_msg_state_name(g1->state) : "missing", g1 ? g1->deadline_ms : 0);
    BP_CHECK(g2 && g2->state == HG_MSG_READY, "g2: %s", g2 ? hg_msg_state_name(g2->state) : "missing");
    hg_msg_info_free(m);

    ok_cmd("ACK", "g1", ready, NULL, NULL, NULL);
    m = get(ready);
    g1 = group_of(m, "g1");
    BP_CHECK(m->state == HG_MSG_READY && g1 && g1->state == HG_MSG_DONE, "after g1's ACK: %s, g1 %s",
             hg_msg_state_name(m->state), g1 ? hg_msg_state_name(g1->state) : "missing");
    hg_msg_info_free(m);

    /* g2 leases it: leased overall; NACK LEVEL 3 (10 s): retry on level 3 */
    pull1("g2", "t", NULL, got, sizeof got);
    expect_state(ready, HG_MSG_LEASED);
    ok_cmd("NACK", "g2", ready, "LEVEL", "3", NULL);
    m = get(ready);
    g2 = group_of(m, "g2");
    BP_CHECK(m->state == HG_MSG_RETRY && g2 && g2->state == HG_MSG_RETRY && g2->level == 3 && g2->reconsume == 1 &&
                 g2->due_ms > tu_now_wall_ms(),
             "after NACK LEVEL 3: %s, g2 %s level %d r%u", hg_msg_state_name(m->state),
             g2 ? hg_msg_state_name(g2->state) : "missing", g2 ? g2->level : -1, g2 ? g2->reconsume : 0);
    hg_msg_info_free(m);

    /* another message: NACK LEVEL 1 (1 s) → retry-ready (level 0) once due, not pulled */
    char rr[HG_ID_MAX];
    send1("t", "k-rr", "RR", hg_delay_none(), rr);
    pull1("g2", "t", NULL, got, sizeof got);
    BP_REQUIRE(strcmp(got, rr) == 0, "g2 pulled %s, want %s", got, rr);
    ok_cmd("NACK", "g2", rr, "LEVEL", "1", NULL);
    bt_wait_field("g2", "retry-ready", 1, 10000);
    m = get(rr);
    g2 = group_of(m, "g2");
    BP_CHECK(g2 && g2->state == HG_MSG_RETRY && g2->level == 0, "retry-ready: g2 %s level %d",
             g2 ? hg_msg_state_name(g2->state) : "missing", g2 ? g2->level : -1);
    hg_msg_info_free(m);

    /* the DLQ, with its reason */
    pull1("g2", "t", NULL, got, sizeof got);
    BP_REQUIRE(strcmp(got, rr) == 0, "g2 pulled %s, want the retry %s", got, rr);
    ok_cmd("NACK", "g2", rr, "DLQ", "REASON", "no such order");
    m = get(rr);
    g2 = group_of(m, "g2");
    /* g1 still has it ready: overall ready; g2 parked it */
    BP_CHECK(g2 && g2->state == HG_MSG_DLQ && strcmp(g2->reason, "no such order") == 0 && g2->parked_ms > 0,
             "DLQ: g2 %s reason '%s'", g2 ? hg_msg_state_name(g2->state) : "missing", g2 ? g2->reason : "");
    hg_msg_info_free(m);
    pull1("g1", "t", NULL, got, sizeof got);
    BP_REQUIRE(strcmp(got, rr) == 0, "g1 pulled %s, want %s", got, rr);
    ok_cmd("ACK", "g1", rr, NULL, NULL, NULL);
    expect_state(rr, HG_MSG_DLQ);

    /* FIND: by key, in id order, states as GET */
    char second[HG_ID_MAX];
    send1("t", "k-delayed", "D2", hg_delay_ms(5000), second);
    hg_msg_info_t *found;
    size_t n;
    BP_REQUIRE(hg_msg_find(C, "t", "k-delayed", &found, &n) == HG_OK, "FIND: %s", hg_client_errmsg(C));
    BP_CHECK(n == 2 && strcmp(found[0].id, delayed) == 0 && strcmp(found[1].id, second) == 0 &&
                 found[0].state == HG_MSG_DELAYED && found[0].payload == NULL,
             "FIND t k-delayed: %zu messages", n);
    hg_msg_infos_free(found, n);
    BP_REQUIRE(hg_msg_find(C, "t", "no-such-key", &found, &n) == HG_OK && n == 0, "FIND of an unknown key: %zu", n);

    /* gone: an id never used; bad ids are refused before the wire */
    expect_state("00000000000fffff", HG_MSG_GONE);
    BP_CHECK(hg_msg_get(C, "12", &m) == HG_ERR_ARG, "a short id is HG_ERR_ARG");
    close_client();
    check_data();
}

/* ---- revoke -------------------------------------------------------------------------------- */

static void test_revoke_before_due(void)
{
    const char *flags[] = { "--levels", "1s 2s", NULL };
    start(flags);
    char e[512], id[HG_ID_MAX], keep[HG_ID_MAX];
    BP_REQUIRE(bp_ok_cmd(&bt_conn, e, sizeof e, "GROUP", "CREATE", "g", "t", NULL) == 0, "%s", e);
    send1("t", "o1", "1", hg_delay_ms(2000), id);
    send1("t", "o2", "2", hg_delay_ms(2000), keep);
    hg_revoke_result_t r;
    BP_REQUIRE(hg_msg_revoke_id(C, id, &r) == HG_OK, "REVOKE: %s", hg_client_errmsg(C));
    BP_CHECK(r.revoked == 1 && r.from_delayed == 1 && r.from_ready == 0 && r.nrefused == 0,
             "REVOKE %s: revoked %" PRIu64 " (delayed %" PRIu64 ", ready %" PRIu64 "), %zu refused", id, r.revoked,
             r.from_delayed, r.from_ready, r.nrefused);
    expect_state(id, HG_MSG_GONE);
    /* the other one arrives; the revoked one never does */
    char got[HG_ID_MAX];
    pull1("g", "t", NULL, got, sizeof got);
    BP_CHECK(strcmp(got, keep) == 0, "pulled %s, want %s (the one not revoked)", got, keep);
    ok_cmd("ACK", "g", got, NULL, NULL, NULL);
    resp_reply_t *rep = bp_pull(&bt_conn, e, sizeof e, "g", "t", "BLOCK", "3000", NULL);
    BP_REQUIRE(rep != NULL, "%s", e);
    BP_CHECK(rep->count == 0, "the revoked message was delivered (%zu messages)", rep->count);
    resp_reply_free(rep);
    uint64_t depth = 1;
    for (int l = 1; l <= 2; l++) {
        uint64_t delay, d, next;
        BP_REQUIRE(bp_level(&bt_conn, l, &delay, &d, &next, e, sizeof e) == 0, "%s", e);
        depth = l == 1 ? d : depth + d;
    }
    BP_CHECK(depth == 0, "levels still hold %" PRIu64 " messages", depth);
    /* a second revoke of the same id: refused, gone */
    BP_REQUIRE(hg_msg_revoke_id(C, id, &r) == HG_OK, "REVOKE again: %s", hg_client_errmsg(C));
    BP_CHECK(r.revoked == 0 && r.nrefused == 1 && strcmp(r.refused[0].reason, "gone") == 0,
             "second REVOKE: revoked %" PRIu64 ", reason '%s'", r.revoked, r.nrefused ? r.refused[0].reason : "");
    close_client();
    check_data();
}

static void test_revoke_by_key_and_refusal(void)
{
    start(NULL);
    char e[512], a[HG_ID_MAX], b[HG_ID_MAX], c[HG_ID_MAX], other[HG_ID_MAX], got[HG_ID_MAX];
    /* no group yet: a ready message in the log is revocable too */
    send1("t", "42", "a", hg_delay_ms(600000), a);
    send1("t", "42", "b", hg_delay_ms(1200000), b);
    send1("t", "42", "c", hg_delay_none(), c);
    send1("t", "43", "x", hg_delay_none(), other);
    hg_revoke_result_t r;
    BP_REQUIRE(hg_msg_revoke_key(C, "t", "42", &r) == HG_OK, "REVOKE t KEY 42: %s", hg_client_errmsg(C));
    BP_CHECK(r.revoked == 3 && r.from_delayed == 2 && r.from_ready == 1 && r.refused_total == 0,
             "REVOKE t KEY 42: revoked %" PRIu64 " (delayed %" PRIu64 ", ready %" PRIu64 ")", r.revoked, r.from_delayed,
             r.from_ready);
    expect_state(a, HG_MSG_GONE);
    expect_state(c, HG_MSG_GONE);
    /* audited: who, what was asked, what it changed */
    BP_CHECK(tu_wait_file_contains(bt_broker.log_path,
                                   "user=default REVOKE t KEY 42: revoked 3 (delayed 2, ready 1), refused 0",
                                   10000) == 0,
             "no audit line for REVOKE t KEY 42 in %s", bt_broker.log_path);
    BP_CHECK(bp_log_contains(&bt_broker, "[info] audit: client id="), "the audit line names no client");
    /* the topic's other message is still there, and is the only one a group gets */
    BP_REQUIRE(bp_ok_cmd(&bt_conn, e, sizeof e, "GROUP", "CREATE", "g", "t", NULL) == 0, "%s", e);
    long long backlog = -1;
    BP_REQUIRE(bp_group_field(&bt_conn, "g", "backlog", &backlog, e, sizeof e) == 1, "%s", e);
    BP_CHECK(backlog == 1, "backlog after the revoke %lld, want 1", backlog);
    pull1("g", "t", NULL, got, sizeof got);
    BP_CHECK(strcmp(got, other) == 0, "pulled %s, want %s", got, other);

    /* after delivery: refused, naming the group and the state */
    BP_REQUIRE(hg_msg_revoke_id(C, other, &r) == HG_OK, "REVOKE: %s", hg_client_errmsg(C));
    BP_CHECK(r.revoked == 0 && r.nrefused == 1 && strcmp(r.refused[0].id, other) == 0 &&
                 strstr(r.refused[0].reason, "already delivered to group g") != NULL &&
                 strstr(r.refused[0].reason, "leased") != NULL,
             "REVOKE after delivery: revoked %" PRIu64 ", reason '%s'", r.revoked,
             r.nrefused ? r.refused[0].reason : "");
    expect_state(other, HG_MSG_LEASED);
    /* a ready message another group already took is refused too */
    BP_REQUIRE(bp_ok_cmd(&bt_conn, e, sizeof e, "GROUP", "CREATE", "h", "t", "FROM", "NOW", NULL) == 0, "%s", e);
    char d[HG_ID_MAX];
    send1("t", "44", "d", hg_delay_none(), d);
    pull1("h", "t", NULL, got, sizeof got);
    BP_REQUIRE(hg_msg_revoke_key(C, "t", "44", &r) == HG_OK, "REVOKE t KEY 44: %s", hg_client_errmsg(C));
    BP_CHECK(r.revoked == 0 && r.nrefused == 1 && strstr(r.refused[0].reason, "group h") != NULL,
             "REVOKE of a message group h took: revoked %" PRIu64 ", '%s'", r.revoked,
             r.nrefused ? r.refused[0].reason : "");
    ok_cmd("GROUP", "DEL", "h", NULL, NULL, NULL);
    BP_CHECK(tu_wait_file_contains(bt_broker.log_path, "user=default GROUP DEL h: 1", 10000) == 0,
             "no audit line for GROUP DEL h");
    /* bad arguments are refused by the library and by the broker */
    BP_CHECK(hg_msg_revoke_key(C, "t", "", &r) == HG_ERR_ARG, "an empty key is HG_ERR_ARG");
    long long n;
    BP_CHECK(bp_int_cmd(&bt_conn, &n, e, sizeof e, "REVOKE", "t", "KEYS", "42", NULL) != 0 &&
                 strstr(e, "syntax error") != NULL,
             "REVOKE t KEYS 42: %s", e);
    close_client();
    check_data();
}

/* ---- DEDUP ---------------------------------------------------------------------------------- */

static void dedup(const char *key, hg_delay_t d, char *id, int want_dup, const char *first)
{
    int dup = -1;
    hg_err_t e = hg_send_dedup(C, "t", key, key, strlen(key), d, id, &dup);
    BP_REQUIRE(e == HG_OK, "SEND %s DEDUP: %s", key, hg_client_errmsg(C));
    BP_CHECK(dup == want_dup, "SEND %s DEDUP: duplicate %d, want %d", key, dup, want_dup);
    if (first != NULL)
        BP_CHECK((strcmp(id, first) == 0) == want_dup, "SEND %s DEDUP: id %s vs first %s (duplicate %d)", key, id,
                 first, want_dup);
}

static void test_dedup(void)
{
    start(NULL);
    char e[512], first[HG_ID_MAX], id[HG_ID_MAX], got[HG_ID_MAX];
    BP_REQUIRE(bp_ok_cmd(&bt_conn, e, sizeof e, "GROUP", "CREATE", "g", "t", NULL) == 0, "%s", e);
    dedup("7", hg_delay_ms(600000), first, 0, NULL);
    dedup("7", hg_delay_ms(600000), id, 1, first); /* delayed: live */
    dedup("8", hg_delay_none(), first, 0, NULL);
    dedup("8", hg_delay_none(), id, 1, first); /* ready: live */
    pull1("g", "t", NULL, got, sizeof got);
    dedup("8", hg_delay_none(), id, 1, first); /* leased: live */
    ok_cmd("ACK", "g", got, NULL, NULL, NULL);
    dedup("8", hg_delay_none(), id, 0, first); /* done everywhere: a new one */
    pull1("g", "t", NULL, got, sizeof got);
    BP_REQUIRE(strcmp(got, id) == 0, "pulled %s, want %s", got, id);
    ok_cmd("NACK", "g", got, "DLQ", NULL, NULL);
    char third[HG_ID_MAX];
    dedup("8", hg_delay_none(), third, 0, id); /* only in the DLQ: not live */
    char info[64];
    BP_REQUIRE(bp_info_field(&bt_conn, "dedup_hits", info, sizeof info, e, sizeof e) == 0, "%s", e);
    BP_CHECK(strcmp(info, "3") == 0, "INFO dedup_hits %s, want 3", info);
    /* INFO memory and the process series */
    BP_REQUIRE(bp_info_field(&bt_conn, "used_memory", info, sizeof info, e, sizeof e) == 0, "%s", e);
    BP_CHECK(atoll(info) > 1000000, "INFO used_memory %s", info);
    static char body[1 << 17];
    BP_REQUIRE(tu_http_get(bt_broker.metrics_port, "/metrics", body, sizeof body) == 200, "GET /metrics");
    BP_CHECK(strstr(body, "hourglass_build_info{version=\"") != NULL &&
                 strstr(body, "process_resident_memory_bytes ") && strstr(body, "process_cpu_seconds_total ") &&
                 strstr(body, "process_open_fds ") && strstr(body, "hourglass_dedup_hits_total 3"),
             "/metrics lacks build_info, process_* or the dedup counter");
    /* DEDUP without KEY is an error that says so; so is an empty KEY, which
     * FIND, REVOKE and DEDUP could never name */
    char rid[64];
    BP_CHECK(bp_send(&bt_conn, rid, sizeof rid, e, sizeof e, "t", "p", "KEY", "", NULL) != 0 &&
                 strstr(e, "key is empty (omit KEY for a message without one)") != NULL,
             "SEND t p KEY \"\": %s", e);
    BP_CHECK(bp_send(&bt_conn, rid, sizeof rid, e, sizeof e, "t", "p", "DEDUP", NULL) != 0 &&
                 strstr(e, "DEDUP needs") != NULL,
             "SEND t p DEDUP: %s", e);
    close_client();
    check_data();
}

/* FIND stays inside the reply byte budget (max-pull-bytes, as PULL): maps
 * are taken while their keys and reasons fit, at least one. */
static void test_find_byte_budget(void)
{
    const char *flags[] = { "--max-pull-bytes", "2000", NULL };
    start(flags);
    char key[1025], id[HG_ID_MAX];
    memset(key, 'k', 1024);
    key[1024] = '\0';
    for (int i = 0; i < 3; i++)
        send1("t", key, "p", hg_delay_ms(600000), id); /* 1 KiB keys: two fit in 2000 bytes, not three */
    hg_msg_info_t *found = NULL;
    size_t n = 0;
    BP_REQUIRE(hg_msg_find(C, "t", key, &found, &n) == HG_OK, "FIND: %s", hg_client_errmsg(C));
    BP_CHECK(n == 2, "FIND of three 1 KiB-key messages under max-pull-bytes 2000 answered %zu, want 2", n);
    hg_msg_infos_free(found, n);
    hg_msg_info_t *m = get(id); /* GET: one message always fits */
    BP_CHECK(m->state == HG_MSG_DELAYED && strlen(m->key) == 1024, "GET under a small budget: %s",
             hg_msg_state_name(m->state));
    hg_msg_info_free(m);
    close_client();
}

/* Keys k0..k(KEYS-1), sent with DEDUP in pipelined rounds while the broker
 * is killed; after the restart every key is sent again. Each key must end
 * with exactly one live message, and every id answered for it must be that
 * one (a resend after a lost reply finds the durable first). */
#define KEYS 300

static void send_round(hg_send_item_t *items, char keys[][16], size_t *ok)
{
    for (int i = 0; i < KEYS; i++) {
        memset(&items[i], 0, sizeof items[i]);
        items[i].topic = "t";
        items[i].key = keys[i];
        items[i].payload = keys[i];
        items[i].payload_len = strlen(keys[i]);
        items[i].delay = hg_delay_ms(3600000);
        items[i].dedup = 1;
    }
    hg_send_many(C, items, KEYS, ok);
}

static volatile int rounds_done;

/* The killer: once two rounds went through, kill -9 the broker while the
 * next rounds are in flight. */
static void *killer(void *arg)
{
    (void)arg;
    while (rounds_done < 2)
        usleep(1000);
    usleep(3000);
    bp_kill9(&bt_broker);
    return NULL;
}

static void test_dedup_kill9(void)
{
    bt_start(NULL);
    char uri[64];
    snprintf(uri, sizeof uri, "hourglass://127.0.0.1:%d", bt_broker.port);
    hg_error_t herr;
    hg_client_opts_t o;
    hg_client_opts_init(&o);
    o.reconnect = 0; /* a dead broker fails the round at once */
    BP_REQUIRE(hg_client_open(uri, &o, &C, &herr) == HG_OK, "open %s: %s", uri, herr.message);
    static char keys[KEYS][16];
    static hg_send_item_t items[KEYS];
    static char first_ids[KEYS][HG_ID_MAX];
    for (int i = 0; i < KEYS; i++)
        snprintf(keys[i], sizeof keys[i], "k%d", i);
    rounds_done = 0;
    pthread_t t;
    BP_REQUIRE(pthread_create(&t, NULL, killer, NULL) == 0, "pthread_create");
    size_t ok = 0;
    for (int round = 0; round < 100000; round++) {
        send_round(items, keys, &ok);
        if (ok < KEYS)
            break;
        rounds_done = round + 1;
    }
    pthread_join(t, NULL);
    BP_CHECK(rounds_done >= 2 && ok < KEYS, "rounds %d, last round %zu of %d sent", rounds_done, ok, KEYS);
    char e[512];
    BP_REQUIRE(bp_restart(&bt_broker, e, sizeof e) == 0, "restart: %s", e);
    /* after the restart: every key again, twice */
    for (int pass = 0; pass < 2; pass++) {
        send_round(items, keys, &ok);
        BP_REQUIRE(ok == KEYS, "after the restart, pass %d: %zu of %d sends succeeded: %s", pass, ok, KEYS,
                   hg_client_errmsg(C));
        for (int i = 0; i < KEYS; i++) {
            if (pass == 0)
                snprintf(first_ids[i], HG_ID_MAX, "%s", items[i].id);
            else
                BP_CHECK(items[i].duplicate && strcmp(items[i].id, first_ids[i]) == 0,
                         "key %s: second pass got %s (duplicate %d), first %s", keys[i], items[i].id,
                         items[i].duplicate, first_ids[i]);
        }
    }
    /* exactly one live message per key */
    int bad = 0;
    for (int i = 0; i < KEYS && bad < 5; i++) {
        hg_msg_info_t *found;
        size_t n;
        BP_REQUIRE(hg_msg_find(C, "t", keys[i], &found, &n) == HG_OK, "FIND: %s", hg_client_errmsg(C));
        size_t live = 0;
        for (size_t j = 0; j < n; j++)
            live += hg_msg_state_live(found[j].state);
        if (live != 1 || strcmp(found[0].id, first_ids[i]) != 0) {
            BP_CHECK(0, "key %s: %zu live messages (%zu found), first %s, answered %s", keys[i], live, n,
                     n ? found[0].id : "-", first_ids[i]);
            bad++;
        }
        hg_msg_infos_free(found, n);
    }
    close_client();
    check_data();
}

/* strace attached to the broker, every fdatasync held DELAY_US on its way
 * back (a slow disk, for real: the broker's own syscalls wait). Its pid,
 * once it has attached to every thread; 0 (with the cause printed) when it
 * cannot run. */
#define FSYNC_DELAY_US 400000
static pid_t slow_fsync_start(pid_t broker)
{
    char pid[24], inject[64];
    snprintf(pid, sizeof pid, "%d", (int)broker);
    snprintf(inject, sizeof inject, "inject=fdatasync:delay_exit=%d", FSYNC_DELAY_US);
    pid_t s = fork();
    if (s == 0) {
        int null = open("/dev/null", O_WRONLY);
        if (null >= 0)
            dup2(null, 1);
        execlp("strace", "strace", "-f", "-qq", "-o", "/dev/null", "-e", "trace=fdatasync", "-e", inject, "-p", pid,
               (char *)NULL);
        fprintf(stderr, "cannot run strace: %s\n", strerror(errno));
        _exit(127);
    }
    /* attached when every thread of the broker has a tracer */
    uint64_t end = tu_now_mono_ms() + 20000;
    while (s > 0 && tu_now_mono_ms() < end) {
        char path[64], line[256];
        snprintf(path, sizeof path, "/proc/%d/task", (int)broker);
        DIR *d = opendir(path);
        int threads = 0, traced = 0;
        struct dirent *de;
        while (d != NULL && (de = readdir(d)) != NULL) {
            if (de->d_name[0] == '.')
                continue;
            threads++;
            char status[400];
            snprintf(status, sizeof status, "/proc/%d/task/%s/status", (int)broker, de->d_name);
            FILE *f = fopen(status, "r");
            while (f != NULL && fgets(line, sizeof line, f) != NULL)
                if (strncmp(line, "TracerPid:", 10) == 0 && atoi(line + 10) != 0)
                    traced++;
            if (f != NULL)
                fclose(f);
        }
        if (d != NULL)
            closedir(d);
        if (threads > 0 && traced == threads)
            return s;
        int st;
        if (waitpid(s, &st, WNOHANG) == s) {
            fprintf(stderr, "\n    strace exited before it attached\n");
            return 0;
        }
        usleep(20000);
    }
    return s;
}

static void slow_fsync_stop(pid_t s)
{
    if (s > 0) {
        kill(s, SIGTERM); /* strace detaches and leaves the broker running */
        waitpid(s, NULL, 0);
    }
}

/* A read that shows a message waits for the fsync of its SEND: FIND and
 * PEEK of a keyed message whose SEND is written but not yet synced (every
 * fdatasync held 400 ms by strace) answer only after that fsync, not before
 * the SEND itself is answered. Before, they answered in a millisecond, and
 * after a power cut they would have shown a message that no longer
 * existed. */
static void test_reads_wait_for_fsync(void)
{
    bt_start(NULL);
    pid_t tracer = slow_fsync_start(bt_broker.pid);
    BP_REQUIRE(tracer > 0, "strace could not attach to the broker (root and the strace package are needed)");
    char e[512];
    rc_conn_t sender, reader;
    BP_REQUIRE(bp_connect(&bt_broker, &sender, e, sizeof e) == 0, "connect: %s", e);
    BP_REQUIRE(bp_connect(&bt_broker, &reader, e, sizeof e) == 0, "connect: %s", e);
    /* FIND of the key; PEEK of the 1h level (17 of the default table), which then holds both */
    const char *reads[][3] = { { "FIND", "fsync-t", "k1" }, { "PEEK", "LEVEL", "17" } };
    for (size_t i = 0; i < sizeof reads / sizeof reads[0]; i++) {
        char key[8];
        snprintf(key, sizeof key, "k%zu", i + 1);
        uint64_t t0 = tu_now_mono_ms();
        rc_appendl(&sender, "SEND", "fsync-t", "payload", "KEY", key, "DELAY", "1h", NULL);
        BP_REQUIRE(rc_flush(&sender, 5000) == 0, "SEND: %s", sender.err);
        usleep(20000); /* the SEND's batch is written; its fsync waits 400 ms */
        const char *argv[4] = { reads[i][0], reads[i][1], reads[i][2], NULL };
        resp_reply_t *r = rc_cmdv(&reader, 3, argv, NULL);
        uint64_t read_ms = tu_now_mono_ms() - t0;
        BP_REQUIRE(r != NULL, "%s: %s", argv[0], reader.err);
        char d[1024];
        rc_describe(r, d, sizeof d);
        int shows = r->type == RESP_REPLY_ARRAY && r->count == i + 1; /* FIND: k1; PEEK: k1 and k2 */
        resp_reply_free(r);
        resp_reply_t *s = rc_read(&sender, 10000);
        uint64_t send_ms = tu_now_mono_ms() - t0;
        BP_REQUIRE(s != NULL && s->type != RESP_REPLY_ERROR, "SEND: %s", s ? rc_describe(s, e, sizeof e) : sender.err);
        resp_reply_free(s);
        printf("\n    %s showing an unsynced SEND: answered after %llu ms (the SEND after %llu ms; fsync held %d ms)",
               argv[0], (unsigned long long)read_ms, (unsigned long long)send_ms, FSYNC_DELAY_US / 1000);
        BP_CHECK(shows, "%s did not show the message: %s", argv[0], d);
        BP_CHECK(read_ms >= FSYNC_DELAY_US / 1000 / 2,
                 "%s showed a SEND %llu ms after it was written, before its fsync", argv[0],
                 (unsigned long long)read_ms);
    }
    slow_fsync_stop(tracer);
    rc_close(&sender);
    rc_close(&reader);
}

static const tu_test_t tests[] = {
    { "lookup in every state", test_lookup_states },
    { "revoke before due: never delivered", test_revoke_before_due },
    { "revoke by key; after delivery refused", test_revoke_by_key_and_refusal },
    { "SEND ... DEDUP", test_dedup },
    { "DEDUP over a kill -9 mid-stream", test_dedup_kill9 },
    { "FIND inside the reply byte budget", test_find_byte_budget },
    { "FIND and PEEK of an unsynced SEND wait for its fsync", test_reads_wait_for_fsync },
    { NULL, NULL },
};

int main(int argc, char **argv)
{
    return bt_main(argc, argv, "msg_lookup", tests);
}
