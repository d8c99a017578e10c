/*
 * tests/unit/test_store_groups.c — CUnit suite "groups" of the store package
 * behind levels/store.h (DESIGN §1–3), through its public calls: consumer
 * groups: from the first message or from now, counters, deletion (GROUP DEL in
 * the background, in steps) and creation meanwhile, the longest names.
 *
 * The fixture (tests/helpers/store_fixture.h): every test gets a fresh temp
 * directory and drives the store with an injected clock, every now_ms passed
 * explicitly from T0; after every step that mutates, store_check() must
 * return 0. Run alone: ./tests/unit/test_store_groups [suite [test]].
 */
#include "base/alloc.h"
#include "levels/store.h"
#include "tests/helpers/store_fixture.h"
#include "tests/helpers/store_probe.h"
#include "tests/helpers/testutil.h"

#include <CUnit/CUnit.h>
#include <inttypes.h>
#include <stdlib.h>
#include <signal.h>
#include <string.h>
#include <sys/resource.h>

static void test_group_from_first_vs_now(void)
{
    store_t *s = OPEN_DEFAULT();
    uint64_t early[3], late[2];
    for (int i = 0; i < 3; i++)
        early[i] = SEND(s, "orders", "e", 0, 0, T0, NULL);
    GROUP_CREATE(s, "first", "orders", 1, T0);
    GROUP_CREATE(s, "now", "orders", 0, T0);
    CHECK_COUNTS(s, "first", 3, 3, 0, 0, 0, 0);
    CHECK_COUNTS(s, "now", 0, 0, 0, 0, 0, 0);
    store_group_info_t gi = GINFO(s, "now");
    TU_CHECK(strcmp(gi.topic, "orders") == 0 && gi.created_ms == T0 && gi.max_reconsume == 16,
             "now: topic %s created %" PRIu64 " max_reconsume %u", gi.topic, gi.created_ms, gi.max_reconsume);
    for (int i = 0; i < 2; i++)
        late[i] = SEND(s, "orders", "l", 0, 0, T0 + 1, NULL);
    CHECK_COUNTS(s, "first", 5, 5, 0, 0, 0, 0);
    CHECK_COUNTS(s, "now", 2, 2, 0, 0, 0, 0);
    msg_owned_t m[8];
    int n = LEASE_N(s, "now", "orders", 8, LEASE, T0 + 2, m);
    TU_REQUIRE(n == 2, "from-now leased %d", n);
    TU_CHECK(m[0].m.id == late[0] && m[1].m.id == late[1], "from-now got earlier messages");
    free_msgs(m, n);
    n = LEASE_N(s, "first", "orders", 8, LEASE, T0 + 2, m);
    TU_REQUIRE(n == 5, "from-first leased %d", n);
    TU_CHECK(m[0].m.id == early[0] && m[2].m.id == early[2] && m[4].m.id == late[1], "from-first order");
    free_msgs(m, n);
    CHECK_STORE(s);

    /* A group with its own max-reconsume. */
    char err[512] = "";
    REQUIRE_OK(store_group_create(s, "mr", 2, "orders", 6, 0, 3, T0, err, sizeof err), err);
    CHECK_EQ_U64(GINFO(s, "mr").max_reconsume, 3);
    err[0] = '\0';
    CHECK_REFUSAL(store_group_create(s, "mr2", 3, "orders", 6, 0, STORE_MAX_MAX_RECONSUME + 1, T0, err, sizeof err),
                  err, "max-reconsume", NULL);
    err[0] = '\0';
    CHECK_REFUSAL(store_group_create(s, "bad group", 9, "orders", 6, 0, -1, T0, err, sizeof err), err, "group", NULL);
    err[0] = '\0';
    CHECK_REFUSAL(store_group_create(s, "g", 1, "", 0, 0, -1, T0, err, sizeof err), err, "topic", "empty");
    store_group_info_t dummy;
    TU_CHECK(store_group_info(s, "mr2", 3, &dummy) == 0 && store_group_info(s, "g", 1, &dummy) == 0,
             "refused groups exist");
    CHECK_STORE(s);
}

static void test_group_create_twice(void)
{
    store_t *s = OPEN_DEFAULT();
    GROUP_CREATE(s, "g", "orders", 1, T0);
    char err[512] = "";
    int rc = store_group_create(s, "g", 1, "orders", 6, 1, -1, T0, err, sizeof err);
    CHECK_REFUSAL(rc, err, "already exists", "orders");
    err[0] = '\0';
    rc = store_group_create(s, "g", 1, "payments", 8, 1, -1, T0, err, sizeof err);
    CHECK_REFUSAL(rc, err, "already exists", "orders");
    TU_CHECK(strcmp(GINFO(s, "g").topic, "orders") == 0, "still bound to orders");
    CHECK_STORE(s);
}

static void test_group_topic_mismatch(void)
{
    store_t *s = OPEN_DEFAULT();
    SEND(s, "A", "x", 0, 0, T0, NULL);
    SEND(s, "B", "y", 0, 0, T0, NULL);
    GROUP_CREATE(s, "g", "A", 1, T0);
    msg_owned_t m[4];
    char err[512] = "";
    int n = -1;
    int rc = store_lease(s, "g", 1, "B", 1, 4, LEASE, T0, m, &n, err, sizeof err);
    CHECK_REFUSAL(rc, err, "bound to topic A", "B");
    TU_CHECK(n == 0, "refused lease returned %d messages", n);
    err[0] = '\0';
    CHECK_REFUSAL(store_lease(s, "", 0, "A", 1, 4, LEASE, T0, m, &n, err, sizeof err), err, "group", "empty");
    err[0] = '\0';
    CHECK_REFUSAL(store_lease(s, "h", 1, "A B", 3, 4, LEASE, T0, m, &n, err, sizeof err), err, "topic", NULL);
    store_group_info_t gi;
    TU_CHECK(store_group_info(s, "h", 1, &gi) == 0, "a refused lease created its group");
    CHECK_COUNTS(s, "g", 1, 1, 0, 0, 0, 0);
    CHECK_STORE(s);
}

static void test_group_auto_create(void)
{
    store_t *s = OPEN_DEFAULT();
    uint64_t a = SEND(s, "orders", "a", 0, 0, T0, NULL);
    SEND(s, "orders", "b", 0, 0, T0, NULL);
    store_group_info_t gi;
    TU_CHECK(store_group_info(s, "auto", 4, &gi) == 0, "group exists before its first lease");
    msg_owned_t m[4];
    int n = LEASE_N(s, "auto", "orders", 1, LEASE, T0 + 5, m);
    TU_REQUIRE(n == 1, "leased %d", n);
    CHECK_EQ_U64(m[0].m.id, a); /* from the first retained message */
    TU_CHECK(msg_str_is(&m[0].m.group, "auto"), "leased message names its group");
    free_msgs(m, n);
    gi = GINFO(s, "auto");
    TU_CHECK(strcmp(gi.topic, "orders") == 0 && gi.created_ms == T0 + 5 && gi.max_reconsume == 16,
             "auto group: topic %s created %" PRIu64, gi.topic, gi.created_ms);
    CHECK_COUNTS(s, "auto", 1, 1, 0, 0, 1, 0);
    /* auto-create on an empty topic, then the group sees later messages */
    n = LEASE_N(s, "late", "fresh", 4, LEASE, T0, m);
    TU_CHECK(n == 0, "empty topic leased %d", n);
    TU_CHECK(strcmp(GINFO(s, "late").topic, "fresh") == 0, "late bound to fresh");
    uint64_t f = SEND(s, "fresh", "f", 0, 0, T0 + 1, NULL);
    n = LEASE_N(s, "late", "fresh", 4, LEASE, T0 + 1, m);
    TU_REQUIRE(n == 1, "leased %d", n);
    CHECK_EQ_U64(m[0].m.id, f);
    free_msgs(m, n);
    CHECK_STORE(s);
    CLOSE(&s);
    s = OPEN_DEFAULT();
    TU_CHECK(strcmp(GINFO(s, "late").topic, "fresh") == 0, "auto group persisted");
    CHECK_COUNTS(s, "late", 0, 0, 0, 0, 1, 0);
    CHECK_STORE(s);
}

static void test_group_both_get_everything(void)
{
    store_t *s = OPEN_DEFAULT();
    GROUP_CREATE(s, "g1", "t", 1, T0);
    GROUP_CREATE(s, "g2", "t", 1, T0);
    uint64_t ids[6];
    for (int i = 0; i < 6; i++)
        ids[i] = SEND(s, "t", "x", i % 2 ? 1 : 0, 0, T0, NULL);
    MOVE(s, T0 + SEC, 100, NULL);
    msg_owned_t m1[8], m2[8];
    int n1 = LEASE_N(s, "g1", "t", 8, LEASE, T0 + SEC, m1);
    int n2 = LEASE_N(s, "g2", "t", 3, LEASE, T0 + SEC, m2);
    n2 += LEASE_N(s, "g2", "t", 8, LEASE, T0 + SEC, m2 + n2);
    TU_REQUIRE(n1 == 6 && n2 == 6, "g1 leased %d, g2 %d", n1, n2);
    for (int i = 0; i < 6; i++) {
        TU_CHECK(m1[i].m.id == m2[i].m.id, "position %d: g1 %" PRIu64 " g2 %" PRIu64, i, m1[i].m.id, m2[i].m.id);
        int known = 0;
        for (int j = 0; j < 6; j++)
            known |= ids[j] == m1[i].m.id;
        TU_CHECK(known, "unknown id");
    }
    /* ACK by one group does not touch the other's lease */
    uint64_t id0 = m1[0].m.id;
    TU_CHECK(ACK(s, "g1", &id0, 1) == 1, "g1 ack");
    TU_CHECK(probe_lease_get(s, "g2", 2, id0, NULL, NULL, NULL, 0) == 1, "g2 lease survives g1's ack");
    free_msgs(m1, n1);
    free_msgs(m2, n2);
    CHECK_COUNTS(s, "g1", 0, 0, 0, 0, 5, 0);
    CHECK_COUNTS(s, "g2", 0, 0, 0, 0, 6, 0);
    CHECK_STORE(s);
}

typedef struct foreach_ctx {
    int count;
    int saw_g;
    uint64_t inflight;
} foreach_ctx_t;

static int foreach_fn(void *c, const char *group, const store_group_info_t *info)
{
    foreach_ctx_t *ctx = c;
    ctx->count++;
    if (strcmp(group, "g") == 0) {
        ctx->saw_g = 1;
        ctx->inflight = info->inflight;
    }
    return 0;
}

static void test_group_counters(void)
{
    store_t *s = OPEN_DEFAULT();
    GROUP_CREATE(s, "g", "t", 1, T0);
    CHECK_COUNTS(s, "g", 0, 0, 0, 0, 0, 0);
    uint64_t ids[4];
    for (int i = 0; i < 4; i++)
        ids[i] = SEND(s, "t", "x", 0, 0, T0, NULL);
    SEND(s, "t", "delayed", 1, 0, T0, NULL);
    CHECK_COUNTS(s, "g", 4, 4, 0, 0, 0, 0); /* level messages are not backlog */
    MOVE(s, T0 + SEC, 10, NULL);
    CHECK_COUNTS(s, "g", 5, 5, 0, 0, 0, 0);
    CHECK_STORE(s);
    msg_owned_t m[8];
    int n = LEASE_N(s, "g", "t", 3, LEASE, T0 + SEC, m);
    TU_REQUIRE(n == 3, "leased %d", n);
    free_msgs(m, n);
    CHECK_COUNTS(s, "g", 2, 2, 0, 0, 3, 0);
    CHECK_STORE(s);
    FAIL_LEVEL(s, "g", ids[0], 1, "r", T0 + SEC, NULL);
    CHECK_COUNTS(s, "g", 2, 2, 0, 1, 2, 0);
    CHECK_STORE(s);
    FAIL_DLQ(s, "g", ids[1], "dead", T0 + SEC);
    CHECK_COUNTS(s, "g", 2, 2, 0, 1, 1, 1);
    CHECK_STORE(s);
    MOVE(s, T0 + 2 * SEC, 10, NULL);
    CHECK_COUNTS(s, "g", 3, 2, 1, 0, 1, 1);
    CHECK_STORE(s);
    TU_CHECK(ACK(s, "g", &ids[2], 1) == 1, "ack");
    CHECK_COUNTS(s, "g", 3, 2, 1, 0, 0, 1);
    CHECK_STORE(s);
    n = LEASE_N(s, "g", "t", 8, LEASE, T0 + 2 * SEC, m);
    TU_CHECK(n == 3, "leased %d", n);
    free_msgs(m, n);
    CHECK_COUNTS(s, "g", 0, 0, 0, 0, 3, 1);
    CHECK_STORE(s);
    uint64_t cnt = 0;
    char err[512] = "";
    REQUIRE_OK(store_dlq_requeue(s, "g", 1, ids[1], 0, T0 + 3 * SEC, &cnt, err, sizeof err), err);
    CHECK_COUNTS(s, "g", 1, 0, 1, 0, 3, 0);
    CHECK_STORE(s);

    /* store_group_foreach sees the same counters */
    foreach_ctx_t ctx = { 0, 0, 0 };
    GROUP_CREATE(s, "other", "t", 0, T0);
    store_group_foreach(s, foreach_fn, &ctx);
    TU_CHECK(ctx.count == 2 && ctx.saw_g && ctx.inflight == 3, "foreach: %d groups, inflight %" PRIu64, ctx.count,
             ctx.inflight);
}

static void test_group_delete(void)
{
    store_t *s = OPEN_DEFAULT();
    GROUP_CREATE(s, "g", "t", 1, T0);
    GROUP_CREATE(s, "keep", "t", 1, T0);
    GROUP_CREATE(s, "gg", "t", 1, T0); /* "g" is a prefix of its name */
    uint64_t ids[5];
    for (int i = 0; i < 5; i++)
        ids[i] = SEND(s, "t", "x", 0, 0, T0, NULL);
    msg_owned_t m[8];
    int n = LEASE_N(s, "g", "t", 5, LEASE, T0, m);
    TU_REQUIRE(n == 5, "leased %d", n);
    free_msgs(m, n);
    n = LEASE_N(s, "keep", "t", 1, LEASE, T0, m);
    free_msgs(m, n);
    n = LEASE_N(s, "gg", "t", 3, DAY, T0, m); /* gg: 1 DLQ, 1 retry-ready, 1 leased */
    TU_REQUIRE(n == 3, "gg leased %d", n);
    free_msgs(m, n);
    FAIL_DLQ(s, "gg", ids[0], "gg dead", T0);
    FAIL_LEVEL(s, "gg", ids[1], 1, "gg soon", T0, NULL);
    FAIL_LEVEL(s, "g", ids[0], 1, "soon", T0, NULL);  /* becomes retry-ready at +1s */
    FAIL_LEVEL(s, "g", ids[1], 3, "later", T0, NULL); /* still delayed at delete time */
    FAIL_DLQ(s, "g", ids[2], "dead", T0);
    MOVE(s, T0 + SEC, 10, NULL);
    CHECK_COUNTS(s, "g", 1, 0, 1, 1, 2, 1);
    CHECK_STORE(s);

    char err[512] = "";
    int found = -1;
    REQUIRE_OK(store_group_delete(s, "g", 1, &found, err, sizeof err), err);
    TU_CHECK(found == 1, "found %d", found);
    store_group_info_t gi;
    TU_CHECK(store_group_info(s, "g", 1, &gi) == 0, "deleted group still has info");
    CHECK_DELETING(s, 1, 4); /* 2 leases, 1 retry-ready, 1 DLQ: deleted in the background */
    CHECK_STORE(s);
    /* its expired leases go without a word */
    store_lease_ref_t refs[16];
    int ne = -1;
    REQUIRE_OK(store_expired_leases(s, T0 + DAY, refs, 16, &ne, err, sizeof err), err);
    TU_CHECK(ne == 2 && strcmp(refs[0].group, "keep") == 0 && strcmp(refs[1].group, "gg") == 0,
             "expired leases after delete: %d (first %s)", ne, ne > 0 ? refs[0].group : "-");
    CHECK_DELETING(s, 1, 2);
    TU_CHECK(probe_lease_get(s, "g", 1, ids[3], NULL, NULL, err, sizeof err) == 0, "lease of deleted group");
    /* its DLQ is out of sight, then gone */
    n = -1;
    REQUIRE_OK(store_dlq_list(s, "g", 1, 0, 10, m, &n, err, sizeof err), err);
    TU_CHECK(n == 0, "DLQ of a deleted group lists %d", n);
    CHECK_STORE(s);
    DRAIN_DELETES(s);
    CHECK_DELETING(s, 0, 0);
    /* the delayed retry is dropped when due */
    CHECK_EQ_U64(level_depth(s, 3), 1);
    int ready = -1;
    TU_CHECK(MOVE(s, T0 + 10 * SEC, 10, &ready) == 1 && ready == 0, "dropped retry: ready %d", ready);
    CHECK_EQ_U64(level_depth(s, 3), 0);
    CHECK_STORE(s);
    store_topic_info_t ti;
    TU_CHECK(store_topic_info(s, "t", 1, &ti) == 1 && ti.groups == 2, "topic groups %d", ti.groups);
    /* the other groups are untouched */
    CHECK_COUNTS(s, "keep", 4, 4, 0, 0, 1, 0);
    CHECK_COUNTS(s, "gg", 3, 2, 1, 0, 1, 1);
    TU_CHECK(probe_lease_get(s, "gg", 2, ids[2], NULL, NULL, NULL, 0) == 1, "gg's lease survived");
    found = -1;
    REQUIRE_OK(store_group_delete(s, "g", 1, &found, err, sizeof err), err);
    TU_CHECK(found == 0, "second delete found %d", found);
    TU_CHECK(ACK(s, "g", &ids[3], 1) == 0, "ack on a deleted group");
    CHECK_STORE(s);
    CLOSE(&s);
    s = OPEN_DEFAULT();
    TU_CHECK(store_group_info(s, "g", 1, &gi) == 0, "deleted group back after reopen");
    CHECK_STORE(s);
}

static void test_group_recreate_no_old_retries(void)
{
    uint64_t id;
    store_t *s = open_with_one_lease(&id);
    FAIL_LEVEL(s, "g", id, 2, "retry", T0, NULL); /* due at +5s */
    char err[512] = "";
    int found;
    REQUIRE_OK(store_group_delete(s, "g", 1, &found, err, sizeof err), err);
    GROUP_CREATE(s, "g", "t", 0, T0 + SEC); /* same name, from now */
    CHECK_COUNTS(s, "g", 0, 0, 0, 0, 0, 0);
    CHECK_STORE(s);
    /* across a reopen too: the incarnation is persisted */
    CLOSE(&s);
    s = OPEN_DEFAULT();
    int ready = -1;
    TU_CHECK(MOVE(s, T0 + 5 * SEC, 10, &ready) == 1 && ready == 0, "old retry must be dropped, ready %d", ready);
    CHECK_COUNTS(s, "g", 0, 0, 0, 0, 0, 0);
    msg_owned_t m[4];
    int n = LEASE_N(s, "g", "t", 4, LEASE, T0 + 6 * SEC, m);
    TU_CHECK(n == 0, "recreated group received %d old messages", n);
    free_msgs(m, n);
    CHECK_STORE(s);
}

/* 255-byte group and topic names through every key range and a reopen. */
static void test_group_longest_names(void)
{
    store_t *s = OPEN_DEFAULT();
    char g[MSG_MAX_NAME + 1], t[MSG_MAX_NAME + 1], err[512] = "";
    memset(g, 'g', MSG_MAX_NAME);
    memset(t, 't', MSG_MAX_NAME);
    g[MSG_MAX_NAME] = t[MSG_MAX_NAME] = '\0';
    uint64_t ids[3];
    for (int i = 0; i < 3; i++)
        ids[i] = SEND(s, t, "x", 0, 0, T0, NULL);
    GROUP_CREATE(s, g, t, 1, T0);
    msg_owned_t m[4];
    int n = LEASE_N(s, g, t, 3, 5 * SEC, T0, m);
    TU_REQUIRE(n == 3, "leased %d", n);
    free_msgs(m, n);
    FAIL_LEVEL(s, g, ids[0], 1, "r", T0, NULL);
    FAIL_DLQ(s, g, ids[1], "d", T0);
    CHECK_STORE(s);
    store_lease_ref_t r[4];
    int ne = -1;
    REQUIRE_OK(store_expired_leases(s, T0 + 5 * SEC, r, 4, &ne, err, sizeof err), err);
    TU_REQUIRE(ne == 1, "expired %d", ne);
    TU_CHECK(strcmp(r[0].group, g) == 0 && r[0].id == ids[2], "expired ref names the 255-byte group");
    CLOSE(&s);
    s = OPEN_DEFAULT();
    CHECK_STORE(s);
    CHECK_COUNTS(s, g, 0, 0, 0, 1, 1, 1);
    TU_CHECK(strcmp(GINFO(s, g).topic, t) == 0, "topic name after reopen");
    MOVE(s, T0 + SEC, 10, NULL);
    n = LEASE_N(s, g, t, 3, LEASE, T0 + SEC, m);
    TU_CHECK(n == 1 && m[0].m.id == ids[0] && m[0].m.group.len == MSG_MAX_NAME, "retry leased %d", n);
    free_msgs(m, n);
    int found = -1;
    REQUIRE_OK(store_group_delete(s, g, MSG_MAX_NAME, &found, err, sizeof err), err);
    TU_CHECK(found == 1, "delete found %d", found);
    CHECK_STORE(s);
}

/* ---- GROUP DEL in the background ---- */
#define DEL_LEASES 20000
#define DEL_DLQ    1000

/* A store of the delay (open_write_late) where group g on topic t holds
 * DEL_LEASES leases and DEL_DLQ DLQ entries, and group k has them all in
 * its backlog. */
static store_t *open_with_a_big_group(void)
{
    store_t *s = open_write_late();
    GROUP_CREATE(s, "g", "t", 1, T0);
    GROUP_CREATE(s, "k", "t", 1, T0);
    for (int i = 0; i < DEL_LEASES + DEL_DLQ; i++)
        SEND(s, "t", "x", 0, 0, T0, NULL);
    msg_owned_t *m = xmalloc(DEL_DLQ * sizeof *m);
    for (int leased = 0; leased < DEL_LEASES + DEL_DLQ;) {
        int n = LEASE_N(s, "g", "t", DEL_DLQ, DAY, T0, m);
        TU_REQUIRE(n > 0, "leased %d of %d", leased, DEL_LEASES + DEL_DLQ);
        if (leased == 0) { /* the first ones go to the DLQ */
            for (int i = 0; i < n; i++)
                FAIL_DLQ(s, "g", m[i].m.id, "dead", T0);
        }
        leased += n;
        free_msgs(m, n);
    }
    free(m);
    store_lease_ref_t refs[1];
    int n = -1;
    char err[512] = "";
    REQUIRE_OK(store_expired_leases(s, T0 + WRITE_DELAY, refs, 1, &n, err, sizeof err), err); /* writes them */
    TU_REQUIRE(n == 0 && store_leases_unwritten(s) == 0, "expired %d, unwritten %" PRIu64, n,
               store_leases_unwritten(s));
    CHECK_COUNTS(s, "g", 0, 0, 0, 0, DEL_LEASES, DEL_DLQ);
    return s;
}

/* The child of test_group_delete_steps: the disk "fills" (RLIMIT_FSIZE: no
 * file may be written 512 KiB past the furthest byte written so far, the
 * commit log's segment and LevelDB's new log included) while the maintenance
 * steps delete g's leases. 0 when a step's commit failed so and broke the
 * store. */
static int group_delete_steps_on_a_full_disk(store_t *c, char *err, size_t errlen)
{
    signal(SIGXFSZ, SIG_IGN); /* EFBIG instead of the signal */
    rlim_t at = (rlim_t)tu_store_bytes_used(g_data) + (512 << 10);
    struct rlimit lim = { at, at };
    if (setrlimit(RLIMIT_FSIZE, &lim) != 0) {
        return -1;
    }
    for (int i = 0; i < 1000; i++) {
        int work = 0;
        if (store_collect(c, T0, UINT64_MAX, 512, &work, err, errlen) != 0 || store_commit(c, err, errlen) != 0) {
            return store_broken(c) ? 0 : -1;
        }
    }
    return -1;
}

/* GROUP DEL of a group with 21 000 entries returns at once: the group is
 * gone for every command (and for GROUP CREATE: the name is free), and the
 * maintenance steps delete its entries, 512 keys at a time. The disk fills
 * on the way and the process is killed: the reopened store passes
 * store_check, the group is still out of sight, being deleted, with fewer
 * of its leases left and its DLQ whole (the leases go first); the steps go
 * on and delete the rest. The other group keeps everything. */
static void test_group_delete_steps(void)
{
    store_t *s = open_with_a_big_group();
    char err[512] = "";
    int found = 0;
    REQUIRE_OK(store_group_delete(s, "g", 1, &found, err, sizeof err), err);
    TU_CHECK(found == 1, "found %d", found);
    store_group_info_t gi;
    TU_CHECK(store_group_info(s, "g", 1, &gi) == 0, "the group is there after GROUP DEL");
    CHECK_DELETING(s, 1, DEL_LEASES + DEL_DLQ);
    int n = -1;
    msg_owned_t m[1];
    REQUIRE_OK(store_dlq_list(s, "g", 1, 0, 1, m, &n, err, sizeof err), err);
    TU_CHECK(n == 0, "the DLQ of a deleted group lists %d", n);
    int released = -1;
    uint64_t id = 1;
    REQUIRE_OK(store_ack(s, "g", 1, &id, 1, &released, err, sizeof err), err);
    TU_CHECK(released == 0, "an ACK on a deleted group released %d", released);
    CHECK_STORE(s);
    CLOSE(&s);

    CRASH_AFTER(group_delete_steps_on_a_full_disk);
    s = open_write_late();
    CHECK_STORE(s);
    TU_CHECK(store_group_info(s, "g", 1, &gi) == 0, "the group is back after a restart");
    uint64_t groups = 0, entries = 0;
    store_groups_deleting(s, &groups, &entries);
    TU_CHECK(groups == 1 && entries > DEL_DLQ && entries < DEL_LEASES + DEL_DLQ,
             "after the disk filled: %" PRIu64 " groups being deleted, %" PRIu64 " entries left (of %d)", groups,
             entries, DEL_LEASES + DEL_DLQ);

    DRAIN_DELETES(s);
    CHECK_STORE(s);
    CHECK_COUNTS(s, "k", DEL_LEASES + DEL_DLQ, DEL_LEASES + DEL_DLQ, 0, 0, 0, 0);
    CLOSE(&s);
    s = open_write_late();
    CHECK_DELETING(s, 0, 0);
    CHECK_STORE(s);
}

/* A group created under the name of one still being deleted (GROUP CREATE:
 * pull 0, or the PULL that creates it: pull 1) deletes the rest of the old
 * one first: the new group starts empty, and nothing of the old one comes
 * back, after a restart neither. */
static void group_delete_then_create(int pull)
{
    store_t *s = open_with_a_big_group();
    char err[512] = "";
    int found = 0, work = 0;
    REQUIRE_OK(store_group_delete(s, "g", 1, &found, err, sizeof err), err);
    REQUIRE_OK(store_collect(s, T0, UINT64_MAX, 512, &work, err, sizeof err), err); /* one step */
    uint64_t groups = 0, entries = 0;
    store_groups_deleting(s, &groups, &entries);
    TU_CHECK(groups == 1 && entries > 0 && entries < DEL_LEASES + DEL_DLQ && work >= 512,
             "after a step of work %d: %" PRIu64 " groups being deleted, %" PRIu64 " entries", work, groups, entries);
    msg_owned_t m[1];
    if (pull) {
        TU_CHECK(LEASE_N(s, "g", "t", 1, LEASE, T0 + SEC, m) == 1, "the PULL leased nothing");
        free_msgs(m, 1);
    } else {
        GROUP_CREATE(s, "g", "t", 0, T0 + SEC);
    }
    CHECK_DELETING(s, 0, 0);
    CHECK_STORE(s);
    CLOSE(&s);
    s = open_write_late();
    uint64_t backlog = pull ? DEL_LEASES + DEL_DLQ - 1 : 0; /* a PULL creates it from the first */
    CHECK_COUNTS(s, "g", backlog, backlog, 0, 0, (uint64_t)pull, 0);
    store_lease_ref_t refs[4];
    int ne = -1;
    REQUIRE_OK(store_expired_leases(s, T0 + 2 * DAY, refs, 4, &ne, err, sizeof err), err);
    TU_CHECK(ne == pull, "expired leases: %d", ne);
    CHECK_STORE(s);
}

static void test_group_delete_then_create(void)
{
    group_delete_then_create(0);
}

static void test_group_delete_then_pull(void)
{
    group_delete_then_create(1);
}

/* A GROUP DEL step whose delete of a retry fails half-way (the message index
 * record, read to drop it with its last copy, is damaged, after the retry's
 * copy index entry was deleted in the batch) breaks the store, so that half
 * is never written: before, the step returned -1 with the store usable and
 * the next commit wrote the copy index entry gone with the retry still
 * there. With the record put back, the steps delete the group whole. */
static void test_group_delete_half_way_breaks_store(void)
{
    store_t *s = OPEN_DEFAULT();
    uint64_t a = SEND(s, "t", "a", 0, 0, T0, NULL);
    msg_owned_t m[4];
    int n = LEASE_N(s, "g", "t", 1, LEASE, T0, m);
    free_msgs(m, n);
    FAIL_LEVEL(s, "g", a, 1, "again", T0, NULL);
    TU_REQUIRE(MOVE(s, T0 + SEC, 10, NULL) == 1, "the retry is not ready");
    CHECK_COUNTS(s, "g", 1, 0, 1, 0, 0, 0);
    COMMIT(s);
    CLOSE(&s);

    char key[9];
    key[0] = 'X';
    be64_to(key + 1, a);
    size_t vlen = 0;
    char *good = RAW_REPLACE_OR_ADD(key, sizeof key, "?", 1, &vlen); /* a has none: it is in its topic CQ */

    s = OPEN_DEFAULT();
    char err[1024] = "";
    int found = 0, work = 0;
    REQUIRE_OK(store_group_delete(s, "g", 1, &found, err, sizeof err), err);
    TU_REQUIRE(found == 1, "GROUP DEL did not find g");
    COMMIT(s); /* the broker answers GROUP DEL after its commit */
    int rc = store_collect(s, T0 + 2 * SEC, UINT64_MAX, 512, &work, err, sizeof err);
    TU_CHECK(rc == -1 && strstr(err, "group delete failed half-way") != NULL &&
                 strstr(err, "corrupt message index record") != NULL,
             "a GROUP DEL step over a damaged message index record: rc %d \"%s\"", rc, err);
    TU_CHECK(store_broken(s), "the step failed half-way but the store is usable: its half would be written");
    CLOSE_BROKEN(&s, "failed half-way");

    raw_put(key, sizeof key, good, vlen, __LINE__);
    leveldb_free(good);
    s = OPEN_DEFAULT();
    CHECK_STORE(s);
    CHECK_DELETING(s, 1, 1);
    DRAIN_DELETES(s);
    CHECK_DELETING(s, 0, 0);
    CHECK_STORE(s);
    CLOSE(&s);
}

static const tu_test_t group_tests[] = {
    { "from first vs now", test_group_from_first_vs_now },
    { "create twice", test_group_create_twice },
    { "topic mismatch", test_group_topic_mismatch },
    { "auto create", test_group_auto_create },
    { "both groups get everything", test_group_both_get_everything },
    { "counters", test_group_counters },
    { "delete", test_group_delete },
    { "recreate gets no old retries", test_group_recreate_no_old_retries },
    { "longest names", test_group_longest_names },
    { "deleted in steps: the disk fills on the way", test_group_delete_steps },
    { "deleted in steps: created again meanwhile", test_group_delete_then_create },
    { "deleted in steps: a PULL creates it again meanwhile", test_group_delete_then_pull },
    { "deleted in steps: a step that fails half-way breaks the store", test_group_delete_half_way_breaks_store },
    { NULL, NULL },
};

static const tu_suite_t suites[] = {
    { "groups", group_tests },
};

int main(int argc, char **argv)
{
    return tu_suites_main(argc, argv, suites, sizeof suites / sizeof suites[0], store_fixture_setup,
                          store_fixture_teardown);
}
