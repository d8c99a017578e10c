/*
 * tests/unit/test_store_model.c — a model-based delivery test of the store
 * behind levels/store.h (DESIGN §2–3): a seeded PRNG drives a random mix of
 * operations on one store, and a small model in the test says, per group and
 * per message, what the store must answer.
 *
 * The store: topic "t1" shared by groups "ga" and "gb", topic "t2" with group
 * "gc"; max-reconsume 2. The clock is injected (every call takes now_ms) and
 * only moves forward, by the test's own steps: no sleeps.
 *
 * Operations: SEND (ready now, a chained DELAY, or a LEVEL n; to either
 * topic), PULL (1..8 messages, leases of 1 s to 30 s), ACK of a random subset
 * of a group's leases out of order (with ids it does not hold and duplicates
 * mixed in), NACK (a fixed level, the DLQ, or the retry policy), TOUCH, the
 * due moves (store_move_due), the expiry scan (store_expired_leases +
 * store_fail by the retry policy), store_collect / store_maintain, GROUP DEL
 * followed by GROUP CREATE (FROM FIRST or not), DLQ REQUEUE / DROP (one id or
 * ALL), REVOKE of an id, and every so many steps a clean close and reopen
 * followed by store_check. Each test runs it twice: leases written at once,
 * and leases held in memory for 3 s (lease_write_delay_ms, DESIGN §3 "Leases
 * written late").
 *
 * The model, per (group, message): OWED (the group must get it: sent after
 * the group was created, and not out, acknowledged or parked), OPTIONAL
 * (sent before this incarnation of the group was created: it may or may not
 * come, FROM FIRST and the topic-log GC decide), OUT (leased, with its
 * deadline), ACKED, DLQ, DROPPED (from the DLQ), REVOKED; and the failures so
 * far (reconsume, reset by DLQ REQUEUE). What is asserted at every step:
 *   - a PULL returns only messages of the group's topic that the model says
 *     are OWED or OPTIONAL (never one out or acknowledged in that group, nor
 *     revoked), with the model's reconsume and a due time not in the future;
 *   - ACK releases exactly the ids of the subset the model holds out; TOUCH,
 *     NACK of a lease the model holds out find it, of one it does not, not;
 *   - the expiry scan reports exactly the model's leases whose deadline has
 *     passed, each with the model's deadline and reconsume;
 *   - DLQ REQUEUE / DROP take exactly the model's DLQ entries; a REVOKE that
 *     succeeds names a message no group got, and one the model says every
 *     group still owes and never got is revoked;
 *   - each group's in-flight and DLQ counters equal the model's;
 *   - at every reopen and at the end, store_check passes;
 *   - at the end everything is drained (time jumps past every level, due
 *     moves, expiries, PULL and ACK until nothing comes): no message the
 *     model says is OWED is left, so every sent message was acknowledged
 *     exactly once per group, is in its DLQ, was dropped, or was revoked.
 *
 * STORE_LEASE_IDS_MAX and STORE_LEASES_UNWRITTEN_MAX (65 536) are plain
 * #defines compiled into liblevels; a smaller test-only value would need a
 * change in levels/ (an #ifndef guard and a build of the package for this
 * test), so the test runs with the production bounds only.
 *
 * Seeds are fixed and printed; a failure names the seed and the step.
 * Environment: HG_STORE_MODEL_STEPS (default MODEL_STEPS) runs longer,
 * HG_STORE_MODEL_SEED replaces the seeds.
 */
#include "levels/sched.h"
#include "levels/store.h"
#include "tests/helpers/testutil.h"

#include <CUnit/CUnit.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SEC           UINT64_C(1000)
#define T0            UINT64_C(1700000000000)
#define MODEL_STEPS   8000 /* per run; HG_STORE_MODEL_STEPS overrides */
#define REOPEN_EVERY  200
#define MAX_MSGS      (1 << 16)
#define NGROUPS       3
#define NTOPICS       2
#define MAX_RECONSUME 2

static const char *const topic_names[NTOPICS] = { "t1", "t2" };
static const char *const group_names[NGROUPS] = { "ga", "gb", "gc" };
static const int group_topic[NGROUPS] = { 0, 0, 1 };

enum {
    OWED = 1,
    OPTIONAL,
    OUT,
    ACKED,
    DLQ,
    DROPPED,
    REVOKED
};
static const char *const state_names[] = {
    "not for this incarnation", "owed", "optional", "out", "acked", "dlq", "dropped", "revoked"
};

typedef struct copy {
    uint8_t state;
    uint8_t delivered; /* this incarnation got it at least once */
    uint32_t reconsume;
    uint64_t deadline;
} copy_t;

typedef struct model {
    uint64_t ids[MAX_MSGS]; /* in send order, so sorted */
    uint8_t topic[MAX_MSGS];
    uint64_t arrives[MAX_MSGS]; /* when it reaches its topic log: a due move at or after this time takes it */
    uint8_t revoked[MAX_MSGS];
    int nmsgs;
    copy_t c[NGROUPS][MAX_MSGS];
} model_t;

static model_t *M;
static store_t *S;
static store_options_t O;
static char g_dir[512], g_data[600];
static uint64_t g_now;
static uint64_t g_moved_until; /* every SEND due by then is in its topic log (store_move_due ran to the end) */
static uint64_t g_seed, g_rng;
static int g_step;
static uint64_t g_acked; /* leases ACK released over the run */
/* What else happened over the run: a run that never got there checked nothing of it. */
static struct {
    uint64_t expired, failed, dlq_taken, revoked, recreated;
} g_did;
static const char *g_op = "";

/* Every assertion names the seed, the step and the operation. */
#define MCHECK(cond, fmt, ...) \
    TU_REQUIRE((cond), "seed %" PRIu64 " step %d (%s): " fmt, g_seed, g_step, g_op, ##__VA_ARGS__)
#define MOK(rc, err) MCHECK((rc) == 0, "%s failed: %s", #rc, (err))

static uint64_t rnd(void) /* xorshift64* */
{
    g_rng ^= g_rng >> 12;
    g_rng ^= g_rng << 25;
    g_rng ^= g_rng >> 27;
    return g_rng * UINT64_C(2685821657736338717);
}
static int rn(int n)
{
    return (int)(rnd() % (uint64_t)n);
}

static int msg_index(uint64_t id)
{
    int lo = 0, hi = M->nmsgs - 1;
    while (lo <= hi) {
        int mid = (lo + hi) / 2;
        if (M->ids[mid] == id)
            return mid;
        if (M->ids[mid] < id)
            lo = mid + 1;
        else
            hi = mid - 1;
    }
    return -1;
}

static int group_index(const char *name, size_t len)
{
    for (int g = 0; g < NGROUPS; g++)
        if (strlen(group_names[g]) == len && memcmp(group_names[g], name, len) == 0)
            return g;
    return -1;
}

static void open_store(void)
{
    char err[512] = "";
    MOK(store_open(&O, g_now, &S, err, sizeof err), err);
}

static void close_store(void)
{
    char err[512] = "";
    int rc = store_close(S, err, sizeof err);
    S = NULL;
    MOK(rc, err);
}

static void check_store(void)
{
    char err[512] = "";
    MOK(store_check(S, err, sizeof err), err);
}

/* A new incarnation of group g. What is still on its way to the topic log
 * (on the levels) will come; what reached the log already comes FROM FIRST
 * if the topic-log GC left it (OPTIONAL: the model does not follow the GC),
 * and otherwise never. */
static void model_group_created(int g, int from_first)
{
    for (int i = 0; i < M->nmsgs; i++) {
        int st = 0;
        if (M->topic[i] == group_topic[g])
            st = M->revoked[i] ? REVOKED : M->arrives[i] > g_moved_until ? OWED : from_first ? OPTIONAL : 0;
        M->c[g][i] = (copy_t){ .state = (uint8_t)st };
    }
}

static void group_create(int g, int from_first)
{
    char err[512] = "";
    const char *gn = group_names[g], *tn = topic_names[group_topic[g]];
    MOK(store_group_create(S, gn, strlen(gn), tn, strlen(tn), from_first, MAX_RECONSUME, g_now, err, sizeof err), err);
    model_group_created(g, from_first);
}

/* ---- operations ---------------------------------------------------------- */

static void op_send(void)
{
    char err[512] = "";
    int n = 1 + rn(5);
    for (int k = 0; k < n && M->nmsgs < MAX_MSGS; k++) {
        int t = rn(NTOPICS);
        char payload[32];
        int plen = snprintf(payload, sizeof payload, "p%d", M->nmsgs);
        static const uint64_t delays[] = { 0, 0, 0, 300, 1500, 7000, 45000 };
        store_send_req_t q = { .topic = topic_names[t],
                               .topic_len = strlen(topic_names[t]),
                               .payload = payload,
                               .payload_len = (size_t)plen };
        if (rn(8) == 0)
            q.level = 1 + rn(3);
        else
            q.delay_ms = delays[rn(7)];
        uint64_t id = 0, due = 0;
        MOK(store_send(S, &q, g_now, &id, &due, err, sizeof err), err);
        MCHECK(M->nmsgs == 0 || id > M->ids[M->nmsgs - 1], "id %" PRIu64 " not above the last one", id);
        int i = M->nmsgs++;
        M->ids[i] = id;
        M->topic[i] = (uint8_t)t;
        M->arrives[i] = q.level == 0 && q.delay_ms == 0 ? 0 : due;
        M->revoked[i] = 0;
        for (int g = 0; g < NGROUPS; g++)
            M->c[g][i] = (copy_t){ .state = group_topic[g] == t ? OWED : 0 };
    }
}

/* PULL for group g; returns how many messages came. */
static int pull(int g, int count, uint64_t lease_ms)
{
    char err[512] = "";
    msg_owned_t out[64];
    int n = 0;
    const char *gn = group_names[g], *tn = topic_names[group_topic[g]];
    MOK(store_lease(S, gn, strlen(gn), tn, strlen(tn), count, lease_ms, g_now, out, &n, err, sizeof err), err);
    MCHECK(n >= 0 && n <= count, "PULL of %d returned %d", count, n);
    for (int k = 0; k < n; k++) {
        const msg_t *m = &out[k].m;
        int i = msg_index(m->id);
        MCHECK(i >= 0, "PULL %s returned id %" PRIu64 ", never sent", gn, m->id);
        copy_t *c = &M->c[g][i];
        MCHECK(M->topic[i] == group_topic[g], "PULL %s returned id %" PRIu64 " of another topic", gn, m->id);
        MCHECK(c->state == OWED || c->state == OPTIONAL, "PULL %s returned id %" PRIu64 ", which the model has %s", gn,
               m->id, state_names[c->state]);
        MCHECK(m->reconsume == c->reconsume, "PULL %s id %" PRIu64 ": reconsume %u, model %u", gn, m->id, m->reconsume,
               c->reconsume);
        MCHECK(m->due_ms <= g_now, "PULL %s id %" PRIu64 ": due %" PRIu64 " is after now %" PRIu64, gn, m->id,
               m->due_ms, g_now);
        c->state = OUT;
        c->delivered = 1;
        c->deadline = g_now + lease_ms;
        msg_owned_free(&out[k]);
    }
    return n;
}

static void op_pull(void)
{
    static const uint64_t leases[] = { 1 * SEC, 4 * SEC, 10 * SEC, 30 * SEC };
    pull(rn(NGROUPS), 1 + rn(16), leases[rn(4)]);
}

/* Up to max indexes of group g's copies in state st, shuffled. */
static int pick(int g, int st, int *out, int max)
{
    int n = 0;
    for (int i = 0; i < M->nmsgs; i++) {
        if (M->c[g][i].state != st)
            continue;
        if (n < max)
            out[n++] = i;
        else {
            int j = rn(i + 1); /* reservoir */
            if (j < max)
                out[j] = i;
        }
    }
    for (int k = n - 1; k > 0; k--) {
        int j = rn(k + 1), t = out[k];
        out[k] = out[j];
        out[j] = t;
    }
    return n;
}

static void ack(int g, const int *idx, int n)
{
    char err[512] = "";
    uint64_t ids[80];
    int want = 0, nids = 0;
    for (int k = 0; k < n; k++) {
        ids[nids++] = M->ids[idx[k]];
        if (M->c[g][idx[k]].state == OUT) {
            M->c[g][idx[k]].state = ACKED;
            want++;
        }
    }
    int released = -1;
    const char *gn = group_names[g];
    MOK(store_ack(S, gn, strlen(gn), ids, nids, &released, err, sizeof err), err);
    MCHECK(released == want, "ACK %s of %d ids released %d, the model holds %d of them out", gn, nids, released, want);
    g_acked += (uint64_t)want;
}

static void op_ack(void)
{
    int g = rn(NGROUPS), idx[80];
    int n = pick(g, OUT, idx, 48);
    if (n == 0)
        return;
    n = 1 + rn(n);
    if (rn(3) == 0) { /* a duplicate */
        int d = idx[rn(n)];
        idx[n++] = d;
    }
    if (rn(3) == 0) { /* any id: one it does not hold, or does (ack() counts what the model holds out) */
        int any = rn(M->nmsgs);
        idx[n++] = any;
    }
    ack(g, idx, n);
}

static void op_touch(void)
{
    char err[512] = "";
    int g = rn(NGROUPS), idx[1];
    const char *gn = group_names[g];
    int held = pick(g, OUT, idx, 1) == 1 && rn(6) != 0;
    int i = held ? idx[0] : M->nmsgs > 0 ? rn(M->nmsgs) : -1;
    if (i < 0)
        return;
    held = M->c[g][i].state == OUT;
    static const uint64_t ext[] = { 500, 2 * SEC, 20 * SEC, 60 * SEC };
    uint64_t deadline = g_now + ext[rn(4)];
    int found = -1;
    MOK(store_touch(S, gn, strlen(gn), M->ids[i], deadline, &found, err, sizeof err), err);
    MCHECK(found == held, "TOUCH %s id %" PRIu64 " found %d, the model has it %s", gn, M->ids[i], found,
           state_names[M->c[g][i].state]);
    if (held)
        M->c[g][i].deadline = deadline;
}

/* The retry policy of the broker (levels/sched.h): 3 + r, the DLQ at max. */
static void policy_decide(void *ctx, const lvl_table_t *levels, uint32_t reconsume, uint32_t max_reconsume,
                          store_fail_req_t *req)
{
    (void)ctx;
    sched_nack_req_t nack = { .reason = "model", .reason_len = 5 };
    *req = sched_retry_decide(levels, reconsume, max_reconsume, &nack);
}

/* Fail group g's lease of message i (NACK, expiry). kind 0: the policy,
 * 1: a fixed level, 2: the DLQ. */
static void fail_lease(int g, int i, int kind)
{
    char err[512] = "";
    const char *gn = group_names[g];
    store_fail_req_t req = { .reason = "model", .reason_len = 5 };
    if (kind == 0)
        req.decide = policy_decide;
    else if (kind == 1)
        req.level = 1 + rn(3);
    else
        req.to_dlq = 1;
    copy_t *c = &M->c[g][i];
    int held = c->state == OUT, found = -1;
    uint64_t due = 0;
    MOK(store_fail(S, gn, strlen(gn), M->ids[i], &req, g_now, &found, &due, err, sizeof err), err);
    MCHECK(found == held, "NACK %s id %" PRIu64 " found %d, the model has it %s", gn, M->ids[i], found,
           state_names[c->state]);
    if (!held)
        return;
    int to_dlq = kind == 2 || (kind == 0 && c->reconsume >= MAX_RECONSUME);
    MCHECK(to_dlq == (due == 0), "NACK %s id %" PRIu64 " (reconsume %u, kind %d): due %" PRIu64, gn, M->ids[i],
           c->reconsume, kind, due);
    c->reconsume++;
    g_did.failed++;
    c->state = to_dlq ? DLQ : OWED;
}

static void op_nack(void)
{
    int g = rn(NGROUPS), idx[1];
    if (pick(g, OUT, idx, 1) == 1 && rn(8) != 0)
        fail_lease(g, idx[0], rn(3));
    else if (M->nmsgs > 0)
        fail_lease(g, rn(M->nmsgs), rn(3));
}

static void move_due(void)
{
    char err[512] = "";
    int moved = 1;
    for (int k = 0; k < 1000 && moved > 0; k++)
        MOK(store_move_due(S, g_now, 4096, &moved, NULL, err, sizeof err), err);
    MCHECK(moved == 0, "due moves never end");
    g_moved_until = g_now;
}

/* The expiry scan: exactly the model's leases past their deadline, each
 * failed by the policy. Returns how many expired. */
static int expire(void)
{
    char err[512] = "";
    static store_lease_ref_t refs[4096];
    int total = 0, n;
    do {
        MOK(store_expired_leases(S, g_now, refs, 4096, &n, err, sizeof err), err);
        for (int k = 0; k < n; k++) {
            int g = group_index(refs[k].group, strlen(refs[k].group));
            int i = msg_index(refs[k].id);
            MCHECK(g >= 0 && i >= 0, "expired lease %s/%" PRIu64 " unknown", refs[k].group, refs[k].id);
            copy_t *c = &M->c[g][i];
            MCHECK(c->state == OUT && c->deadline == refs[k].deadline_ms && c->deadline <= g_now &&
                       c->reconsume == refs[k].reconsume,
                   "expired lease %s/%" PRIu64 " (deadline %" PRIu64
                   ", reconsume %u): the model has it %s, deadline %" PRIu64 ", reconsume %u, now %" PRIu64,
                   refs[k].group, refs[k].id, refs[k].deadline_ms, refs[k].reconsume, state_names[c->state],
                   c->deadline, c->reconsume, g_now);
            fail_lease(g, i, 0);
        }
        total += n;
        g_did.expired += (uint64_t)n;
    } while (n > 0);
    for (int g = 0; g < NGROUPS; g++)
        for (int i = 0; i < M->nmsgs; i++)
            MCHECK(!(M->c[g][i].state == OUT && M->c[g][i].deadline <= g_now),
                   "lease %s/%" PRIu64 " (deadline %" PRIu64 ") not reported expired at %" PRIu64, group_names[g],
                   M->ids[i], M->c[g][i].deadline, g_now);
    return total;
}

static void op_collect(void)
{
    char err[512] = "";
    int work = 0;
    if (rn(2)) {
        static const uint64_t grace[] = { 0, 1000, UINT64_MAX };
        MOK(store_collect(S, g_now, grace[rn(3)], 1 + rn(64), &work, err, sizeof err), err);
    } else {
        MOK(store_maintain(S, g_now, 1 + rn(64), &work, err, sizeof err), err);
    }
}

static void op_group_recreate(void)
{
    char err[512] = "";
    int g = rn(NGROUPS), found = -1;
    const char *gn = group_names[g];
    MOK(store_group_delete(S, gn, strlen(gn), &found, err, sizeof err), err);
    MCHECK(found == 1, "GROUP DEL %s: found %d", gn, found);
    if (rn(2))
        op_collect(); /* some of its entries go before the new incarnation comes */
    group_create(g, rn(2));
    g_did.recreated++;
}

static void op_dlq(void)
{
    char err[512] = "";
    int g = rn(NGROUPS), idx[1];
    const char *gn = group_names[g];
    int requeue = rn(2);
    uint64_t count = UINT64_MAX;
    if (rn(5) == 0) { /* ALL */
        uint64_t want = 0;
        for (int i = 0; i < M->nmsgs; i++) {
            if (M->c[g][i].state == DLQ) {
                want++;
                M->c[g][i].state = requeue ? OWED : DROPPED;
                M->c[g][i].reconsume = requeue ? 0 : M->c[g][i].reconsume;
            }
        }
        if (requeue)
            MOK(store_dlq_requeue(S, gn, strlen(gn), 0, 1, g_now, &count, err, sizeof err), err);
        else
            MOK(store_dlq_drop(S, gn, strlen(gn), 0, 1, &count, err, sizeof err), err);
        MCHECK(count == want, "DLQ %s %s ALL took %" PRIu64 ", the model has %" PRIu64, requeue ? "REQUEUE" : "DROP",
               gn, count, want);
        return;
    }
    if (pick(g, DLQ, idx, 1) != 1)
        return;
    copy_t *c = &M->c[g][idx[0]];
    if (requeue)
        MOK(store_dlq_requeue(S, gn, strlen(gn), M->ids[idx[0]], 0, g_now, &count, err, sizeof err), err);
    else
        MOK(store_dlq_drop(S, gn, strlen(gn), M->ids[idx[0]], 0, &count, err, sizeof err), err);
    MCHECK(count == 1, "DLQ %s %s %" PRIu64 " took %" PRIu64, requeue ? "REQUEUE" : "DROP", gn, M->ids[idx[0]], count);
    g_did.dlq_taken++;
    c->state = requeue ? OWED : DROPPED;
    if (requeue)
        c->reconsume = 0;
}

static void op_revoke(void)
{
    char err[512] = "";
    if (M->nmsgs == 0)
        return;
    int i = M->nmsgs - 1 - rn(M->nmsgs < 40 ? M->nmsgs : 40); /* recent ones: some not delivered yet */
    store_revoke_result_t r;
    MOK(store_revoke_id(S, M->ids[i], &r, err, sizeof err), err);
    int untouched = 1, any = 0; /* every group of its topic owes it and never got it */
    for (int g = 0; g < NGROUPS; g++) {
        if (group_topic[g] != M->topic[i])
            continue;
        any = 1;
        if (M->c[g][i].state != OWED || M->c[g][i].delivered)
            untouched = 0;
    }
    if (r.revoked == 1) {
        for (int g = 0; g < NGROUPS; g++) {
            copy_t *c = &M->c[g][i];
            if (group_topic[g] != M->topic[i])
                continue;
            MCHECK((c->state == OWED || c->state == OPTIONAL) && !c->delivered,
                   "REVOKE %" PRIu64 " succeeded, but group %s has it %s (delivered %d)", M->ids[i], group_names[g],
                   state_names[c->state], c->delivered);
            c->state = REVOKED;
        }
        M->revoked[i] = 1;
        g_did.revoked++;
    } else {
        MCHECK(r.revoked == 0 && r.refused_total == 1, "REVOKE %" PRIu64 ": revoked %" PRIu64 ", refused %" PRIu64,
               M->ids[i], r.revoked, r.refused_total);
        MCHECK(!(untouched && any), "REVOKE %" PRIu64 " refused (%s), but no group got it yet", M->ids[i],
               r.nrefused > 0 ? r.refused[0].reason : "");
    }
}

/* Each group's in-flight and DLQ counters are the model's. */
static void check_counters(void)
{
    for (int g = 0; g < NGROUPS; g++) {
        store_group_info_t info;
        const char *gn = group_names[g];
        MCHECK(store_group_info(S, gn, strlen(gn), &info) == 1, "group %s missing", gn);
        uint64_t out = 0, dlq = 0;
        for (int i = 0; i < M->nmsgs; i++) {
            out += M->c[g][i].state == OUT;
            dlq += M->c[g][i].state == DLQ;
        }
        MCHECK(info.inflight == out && info.dlq == dlq,
               "group %s: inflight %" PRIu64 ", dlq %" PRIu64 "; the model has %" PRIu64 ", %" PRIu64, gn,
               info.inflight, info.dlq, out, dlq);
    }
}

static void reopen(void)
{
    close_store();
    open_store();
    check_store();
}

/* Jump past every level and lease, then PULL and ACK until nothing comes:
 * nothing the model says is owed may be left. */
static void drain(void)
{
    g_op = "drain";
    int quiet = 0;
    for (int round = 0; round < 200 && quiet < 2; round++) {
        g_now += 3 * 3600 * SEC;
        move_due();
        int work = expire();
        move_due();
        for (int g = 0; g < NGROUPS; g++) {
            int n;
            while ((n = pull(g, 64, 3600 * SEC)) > 0) {
                int idx[64];
                int k = pick(g, OUT, idx, 64);
                ack(g, idx, k);
                work += n;
            }
        }
        check_counters();
        quiet = work == 0 && store_next_due(S) == UINT64_MAX ? quiet + 1 : 0;
    }
    MCHECK(quiet >= 2, "the drain never ends");
    for (int g = 0; g < NGROUPS; g++) {
        for (int i = 0; i < M->nmsgs; i++) {
            copy_t *c = &M->c[g][i];
            MCHECK(c->state != OWED && c->state != OUT, "id %" PRIu64 " lost for group %s: the model has it %s",
                   M->ids[i], group_names[g], state_names[c->state]);
        }
        store_group_info_t info;
        store_group_info(S, group_names[g], strlen(group_names[g]), &info);
        MCHECK(info.ready == 0 && info.retry_delayed == 0 && info.inflight == 0,
               "group %s after the drain: ready %" PRIu64 ", delayed retries %" PRIu64 ", inflight %" PRIu64,
               group_names[g], info.ready, info.retry_delayed, info.inflight);
    }
    check_store();
    reopen();
}

static int env_int(const char *name, int dflt)
{
    const char *v = getenv(name);
    return v != NULL && *v != '\0' ? atoi(v) : dflt;
}

static void run_model(uint64_t seed, uint64_t lease_write_delay_ms)
{
    const char *sv = getenv("HG_STORE_MODEL_SEED");
    g_seed = sv != NULL && *sv != '\0' ? strtoull(sv, NULL, 0) : seed;
    g_rng = g_seed * UINT64_C(0x9E3779B97F4A7C15) + 1;
    int steps = env_int("HG_STORE_MODEL_STEPS", MODEL_STEPS);
    printf("\n    seed %" PRIu64 ", %d steps, lease-write-delay %" PRIu64 " ms ", g_seed, steps, lease_write_delay_ms);
    fflush(stdout);

    M = calloc(1, sizeof *M);
    TU_REQUIRE(M != NULL, "no memory for the model");
    store_options_default(&O);
    O.path = g_data;
    O.sync = 0;
    O.segment_bytes = TU_SEGMENT_BYTES;
    O.max_reconsume = MAX_RECONSUME;
    O.lease_write_delay_ms = lease_write_delay_ms;
    g_now = T0;
    g_moved_until = 0;
    g_acked = 0;
    memset(&g_did, 0, sizeof g_did);
    g_step = 0;
    g_op = "setup";
    open_store();
    for (int g = 0; g < NGROUPS; g++)
        group_create(g, 1);

    for (g_step = 1; g_step <= steps; g_step++) {
        int r = rn(100);
        g_now += (uint64_t)rn(1200) + (rn(50) == 0 ? 40 * SEC : 0);
        if (r < 20) {
            g_op = "send";
            op_send();
        } else if (r < 45) {
            g_op = "pull";
            op_pull();
        } else if (r < 61) {
            g_op = "ack";
            op_ack();
        } else if (r < 65) {
            g_op = "touch";
            op_touch();
        } else if (r < 71) {
            g_op = "nack";
            op_nack();
        } else if (r < 80) {
            g_op = "due";
            move_due();
        } else if (r < 87) {
            g_op = "expire";
            expire();
        } else if (r < 91) {
            g_op = "collect";
            op_collect();
        } else if (r < 92) {
            g_op = "group del+create";
            op_group_recreate();
        } else if (r < 97) {
            g_op = "dlq";
            op_dlq();
        } else {
            g_op = "revoke";
            op_revoke();
        }
        check_counters();
        if (g_step % REOPEN_EVERY == REOPEN_EVERY / 2) {
            g_op = "check"; /* with leases held, too: a whole-store read writes them (DESIGN §3) */
            check_store();
        }
        if (g_step % REOPEN_EVERY == 0) {
            g_op = "reopen";
            reopen();
        }
    }
    drain();
    uint64_t by_state[8] = { 0 }, copies = 0;
    for (int g = 0; g < NGROUPS; g++)
        for (int i = 0; i < M->nmsgs; i++)
            if (M->c[g][i].state != 0)
                by_state[M->c[g][i].state]++, copies++;
    printf("(%d sent, %" PRIu64 " acks; at the end of %" PRIu64 " copies %" PRIu64 " acked, %" PRIu64
           " in DLQs, %" PRIu64 " dropped, %" PRIu64 " revoked, %" PRIu64 " optional never sent) ",
           M->nmsgs, g_acked, copies, by_state[ACKED], by_state[DLQ], by_state[DROPPED], by_state[REVOKED],
           by_state[OPTIONAL]);
    /* A run that acknowledged little checked little. */
    TU_CHECK(g_did.expired > 0 && g_did.failed > g_did.expired && g_did.dlq_taken > 0 && g_did.revoked > 0 &&
                 g_did.recreated > 0,
             "seed %" PRIu64 ": a run that missed a kind: %" PRIu64 " expiries, %" PRIu64 " failures, %" PRIu64
             " DLQ requeues/drops, %" PRIu64 " revokes, %" PRIu64 " GROUP DEL+CREATE",
             g_seed, g_did.expired, g_did.failed, g_did.dlq_taken, g_did.revoked, g_did.recreated);
    TU_CHECK(g_acked >= (uint64_t)M->nmsgs / 2, "seed %" PRIu64 ": only %" PRIu64 " acks of %d messages", g_seed,
             g_acked, M->nmsgs);
}

/* ---- tests and fixture ------------------------------------------------------- */

static void test_model_written_at_once(void)
{
    run_model(1, 0);
}

static void test_model_written_late(void)
{
    run_model(2, 3 * SEC);
}

static void test_model_written_late_short(void)
{
    run_model(3, 100);
}

static void setup(void)
{
    if (tu_mkdtemp("store-model", g_dir, sizeof g_dir) != 0) {
        fprintf(stderr, "tu_mkdtemp: %s\n", strerror(errno));
        g_dir[0] = '\0';
    }
    snprintf(g_data, sizeof g_data, "%s/data", g_dir);
}

static void teardown(void)
{
    if (S != NULL)
        store_close(S, NULL, 0);
    S = NULL;
    free(M);
    M = NULL;
    if (g_dir[0] != '\0')
        tu_rmtree(g_dir);
    g_dir[0] = '\0';
}

static const tu_test_t model_tests[] = {
    { "delivery, leases written at once", test_model_written_at_once },
    { "delivery, leases written late", test_model_written_late },
    { "delivery, leases written 100 ms late", test_model_written_late_short },
    { NULL, NULL },
};

static const tu_suite_t suites[] = {
    { "model", model_tests },
};

int main(int argc, char **argv)
{
    return tu_suites_main(argc, argv, suites, sizeof suites / sizeof suites[0], setup, teardown);
}
