/*
 * tests/unit/test_lane.c — the CUnit suite of the remainder lane's heap and
 * its load at open (levels/lane.h). docs/design-commitlog.md §4, §6.
 *
 * The order is checked against a model: a plain array searched for its
 * minimum by (due, id, CQ index) after every call, or sorted with qsort for
 * the large loads, so every pop, peek, size and head is compared with what a
 * lane must answer. Random cases use a fixed seed (printed in failures) and
 * few distinct dues, so ties are common. Loads read real CQ files made with
 * levels/cq.h in the test's temp directory, damaged by hand where a case needs
 * it; errors are checked for the words that name the problem.
 */
#include "levels/cq.h"
#include "levels/lane.h"
#include "tests/helpers/testutil.h"

#include <CUnit/CUnit.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define QUEUE UINT32_C(19) /* the lane's queue number in 4a.3: LVL_MAX_LEVELS + 1 */
#define T0    UINT64_C(1700000000000)

static char dir[4096];

static void setup(void)
{
    if (tu_mkdtemp("lane", dir, sizeof dir) != 0) {
        tu_die("test_lane", "mkdtemp failed");
    }
}

static void teardown(void)
{
    tu_rmtree(dir);
}

static uint64_t next_random(uint64_t *state)
{
    uint64_t x = *state; /* xorshift64 */
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    return *state = x;
}

static int entry_cmp(const void *pa, const void *pb)
{
    const lane_entry_t *a = pa, *b = pb;
    if (a->due != b->due) {
        return a->due < b->due ? -1 : 1;
    }
    if (a->id != b->id) {
        return a->id < b->id ? -1 : 1;
    }
    return a->cq_index < b->cq_index ? -1 : a->cq_index > b->cq_index;
}

static int same_entry(const lane_entry_t *a, const lane_entry_t *b)
{
    return a->due == b->due && a->id == b->id && a->cq_index == b->cq_index;
}

static void expect_error(int rc, const char *err, const char *frag1, const char *frag2, int line)
{
    TU_CHECK_AT(rc == -1, line, "want an error, got rc %d", rc);
    TU_CHECK_AT(strstr(err, frag1) != NULL, line, "error \"%s\" lacks \"%s\"", err, frag1);
    if (frag2 != NULL) {
        TU_CHECK_AT(strstr(err, frag2) != NULL, line, "error \"%s\" lacks \"%s\"", err, frag2);
    }
}
#define EXPECT_ERROR(rc, err, f1, f2) expect_error((rc), (err), (f1), (f2), __LINE__)

static void push_at(lane_t *l, uint64_t due, uint64_t id, int line)
{
    char err[256] = "";
    uint64_t index = lane_tail(l);
    int rc = lane_push(l, due, id, index, err, sizeof err);
    TU_REQUIRE_AT(rc == 0, line, "push (due %" PRIu64 ", id %" PRIu64 ") at %" PRIu64 ": %s", due, id, index, err);
}
#define PUSH(l, due, id) push_at((l), (due), (id), __LINE__)

/* Pop every entry and compare with want[0..n) in order; the lane ends empty
 * with its head at its tail. */
static void expect_pops(lane_t *l, const lane_entry_t *want, size_t n, int line)
{
    for (size_t i = 0; i < n; i++) {
        lane_entry_t got;
        TU_REQUIRE_AT(lane_pop(l, &got) == 1, line, "pop %zu of %zu: lane empty", i, n);
        TU_REQUIRE_AT(same_entry(&got, &want[i]), line,
                      "pop %zu: (due %" PRIu64 ", id %" PRIu64 ", index %" PRIu64 "), want (%" PRIu64 ", %" PRIu64
                      ", %" PRIu64 ")",
                      i, got.due, got.id, got.cq_index, want[i].due, want[i].id, want[i].cq_index);
    }
    TU_CHECK_AT(lane_size(l) == 0 && lane_pop(l, NULL) == 0, line, "lane not empty after %zu pops", n);
    TU_CHECK_AT(lane_head(l) == lane_tail(l), line, "head %" PRIu64 " != tail %" PRIu64 " when empty", lane_head(l),
                lane_tail(l));
}
#define EXPECT_POPS(l, want, n) expect_pops((l), (want), (n), __LINE__)

/* ----------------------------------------------------------------- the heap */

/* The model: the entries in the lane, unordered. Its minimum is the top; the
 * lowest CQ index in it is the head. */
typedef struct model {
    lane_entry_t e[4096];
    size_t n;
} model_t;

static size_t model_min(const model_t *m)
{
    size_t best = 0;
    for (size_t i = 1; i < m->n; i++) {
        if (entry_cmp(&m->e[i], &m->e[best]) < 0) {
            best = i;
        }
    }
    return best;
}

static uint64_t model_head(const model_t *m, uint64_t tail)
{
    uint64_t head = tail;
    for (size_t i = 0; i < m->n; i++) {
        head = m->e[i].cq_index < head ? m->e[i].cq_index : head;
    }
    return head;
}

static void test_random_against_model(void)
{
    static model_t m;
    for (uint64_t seed = 1; seed <= 40; seed++) {
        uint64_t rng = seed * UINT64_C(0x9E3779B97F4A7C15);
        uint64_t first = seed * 1000; /* a lane whose CQ head is not 0 */
        lane_t *l = lane_new(first, 4096);
        m.n = 0;
        for (int op = 0; op < 3000; op++) {
            /* Pushes outnumber pops early and pops win later: the lane fills past
             * the initial capacity (1024) and empties again. */
            int push = (int)(next_random(&rng) % 100) < (op < 1500 ? 70 : 35);
            if (push && m.n < 4096) {
                lane_entry_t e = { T0 + next_random(&rng) % 40, 1 + next_random(&rng) % 500, lane_tail(l) };
                PUSH(l, e.due, e.id);
                m.e[m.n++] = e;
            } else if (m.n > 0) {
                size_t k = model_min(&m);
                lane_entry_t got;
                TU_REQUIRE(lane_pop(l, &got) == 1, "seed %" PRIu64 " op %d: pop of a lane of %zu said empty", seed, op,
                           m.n);
                TU_REQUIRE(same_entry(&got, &m.e[k]),
                           "seed %" PRIu64 " op %d: popped (%" PRIu64 ", %" PRIu64 ", %" PRIu64 "), model (%" PRIu64
                           ", %" PRIu64 ", %" PRIu64 ")",
                           seed, op, got.due, got.id, got.cq_index, m.e[k].due, m.e[k].id, m.e[k].cq_index);
                m.e[k] = m.e[--m.n];
            } else {
                TU_REQUIRE(lane_pop(l, NULL) == 0, "seed %" PRIu64 " op %d: pop of an empty lane", seed, op);
            }
            TU_REQUIRE(lane_size(l) == m.n, "seed %" PRIu64 " op %d: size %zu, model %zu", seed, op, lane_size(l), m.n);
            TU_REQUIRE(lane_head(l) == model_head(&m, lane_tail(l)),
                       "seed %" PRIu64 " op %d: head %" PRIu64 ", model %" PRIu64, seed, op, lane_head(l),
                       model_head(&m, lane_tail(l)));
            lane_entry_t top;
            int has = lane_peek(l, &top);
            TU_REQUIRE(has == (m.n > 0), "seed %" PRIu64 " op %d: peek says %d with %zu entries", seed, op, has, m.n);
            if (has) {
                TU_REQUIRE(same_entry(&top, &m.e[model_min(&m)]), "seed %" PRIu64 " op %d: peek is not the model's min",
                           seed, op);
            }
        }
        qsort(m.e, m.n, sizeof m.e[0], entry_cmp);
        EXPECT_POPS(l, m.e, m.n);
        lane_free(l);
    }
}

static void test_ties(void)
{
    lane_t *l = lane_new(0, 16);
    PUSH(l, T0 + 5, 900); /* index 0 */
    PUSH(l, T0 + 5, 300); /* 1: same due, lower id: first */
    PUSH(l, T0 + 4, 999); /* 2: earlier due beats any id */
    PUSH(l, T0 + 5, 300); /* 3: same due and id as 1: by CQ index, after it */
    PUSH(l, T0 + 5, 600); /* 4 */
    const lane_entry_t want[] = {
        { T0 + 4, 999, 2 }, { T0 + 5, 300, 1 }, { T0 + 5, 300, 3 }, { T0 + 5, 600, 4 }, { T0 + 5, 900, 0 },
    };
    EXPECT_POPS(l, want, 5);
    lane_free(l);
}

/* The check of lazy deletion: ids in dead[] are revoked or moved; it counts
 * its calls and can be made to fail. */
typedef struct slots {
    uint64_t dead[8];
    size_t ndead;
    int calls;
    uint64_t fail_id; /* 0: never fails */
} slots_t;

static int slots_check(void *ctx, const lane_entry_t *e, char *err, size_t errlen)
{
    slots_t *s = ctx;
    s->calls++;
    if (e->id == s->fail_id) {
        snprintf(err, errlen, "slot read failed");
        return -1;
    }
    for (size_t i = 0; i < s->ndead; i++) {
        if (s->dead[i] == e->id) {
            return LANE_DEAD;
        }
    }
    return LANE_LIVE;
}

static void test_lazy_drops(void)
{
    char err[256] = "";
    lane_t *l = lane_new(100, 64);
    /* Indexes 100..109, due order = index order except 100, due last. */
    PUSH(l, T0 + 50, 1000);
    for (uint64_t i = 1; i < 10; i++) {
        PUSH(l, T0 + i, 1000 + i);
    }
    slots_t s = { .dead = { 1001, 1002, 1005, 1000 }, .ndead = 4 };
    lane_entry_t top;
    TU_REQUIRE(lane_next_live(l, slots_check, &s, &top, err, sizeof err) == 1, "next_live: %s", err);
    TU_CHECK(top.id == 1003 && top.cq_index == 103, "live top id %" PRIu64 " index %" PRIu64 ", want 1003 at 103",
             top.id, top.cq_index);
    TU_CHECK(s.calls == 3, "check asked %d times, want 3 (two dead tops, one live)", s.calls);
    TU_CHECK(lane_size(l) == 8, "size %zu after two drops, want 8", lane_size(l));
    TU_CHECK(lane_head(l) == 100, "head %" PRIu64 ": index 100 (dead, due last) is still in the lane", lane_head(l));
    /* The live top stays until popped: a second call asks again and answers it. */
    TU_REQUIRE(lane_next_live(l, slots_check, &s, &top, err, sizeof err) == 1 && top.id == 1003, "next_live again");
    TU_REQUIRE(lane_pop(l, &top) == 1 && top.id == 1003, "pop the live top");
    TU_REQUIRE(lane_pop(l, &top) == 1 && top.id == 1004, "pop 1004");
    /* 1005 is dead: dropped on its way to 1006. */
    TU_REQUIRE(lane_next_live(l, slots_check, &s, &top, err, sizeof err) == 1 && top.id == 1006, "next_live to 1006");
    /* A check that fails leaves its entry on top and names it. */
    s.fail_id = 1006;
    EXPECT_ERROR(lane_next_live(l, slots_check, &s, &top, err, sizeof err), err, "slot read failed",
                 "id 1006 at CQ index 106");
    TU_CHECK(lane_peek(l, &top) == 1 && top.id == 1006 && lane_size(l) == 5, "failed check: 1006 still on top");
    s.fail_id = 0;
    for (uint64_t id = 1006; id <= 1009; id++) {
        TU_REQUIRE(lane_next_live(l, slots_check, &s, &top, err, sizeof err) == 1 && top.id == id,
                   "next_live to %" PRIu64, id);
        TU_REQUIRE(lane_pop(l, NULL) == 1, "pop %" PRIu64, id);
        TU_CHECK(lane_head(l) == 100, "head %" PRIu64 " moved past index 100, still in the lane", lane_head(l));
    }
    /* Only 1000 (dead, index 100) is left: dropping it frees the whole window. */
    TU_CHECK(lane_next_live(l, slots_check, &s, &top, err, sizeof err) == 0, "lane of one dead entry not emptied");
    TU_CHECK(lane_size(l) == 0 && lane_head(l) == 110 && lane_tail(l) == 110,
             "after the last drop: size %zu head %" PRIu64 " tail %" PRIu64 ", want 0 110 110", lane_size(l),
             lane_head(l), lane_tail(l));
    lane_free(l);
}

static void test_growth_and_bound(void)
{
    char err[256] = "";
    /* 20 000 entries, due descending, so index 0 is popped last and holds the
     * head at 0: the heap grows past 1024 and the done bits past 4096 indexes. */
    const uint64_t n = 20000;
    lane_t *l = lane_new(0, 1 << 20);
    size_t bytes_before = lane_bytes(l);
    for (uint64_t i = 0; i < n; i++) {
        PUSH(l, T0 + n - i, 7 + i);
    }
    TU_CHECK(lane_size(l) == n && lane_bytes(l) > bytes_before + n * sizeof(lane_entry_t) / 2,
             "size %zu bytes %zu (from %zu)", lane_size(l), lane_bytes(l), bytes_before);
    for (uint64_t i = 0; i < n - 1; i++) {
        lane_entry_t got;
        TU_REQUIRE(lane_pop(l, &got) == 1 && got.cq_index == n - 1 - i, "pop %" PRIu64 ": index %" PRIu64, i,
                   got.cq_index);
        TU_REQUIRE(lane_head(l) == 0, "head %" PRIu64 " moved past index 0, still in the lane", lane_head(l));
    }
    lane_entry_t last = { T0 + n, 7, 0 };
    EXPECT_POPS(l, &last, 1);
    lane_free(l);

    /* The done bits grow while they hold done indexes: one entry due late
     * holds the head at 3 while 20 000 later ones come and go; when it leaves,
     * the head steps over all of them to the tail. */
    l = lane_new(0, 16);
    for (uint64_t i = 0; i < 3; i++) {
        PUSH(l, T0, 1 + i);
        TU_REQUIRE(lane_pop(l, NULL) == 1, "pop %" PRIu64, i);
    }
    PUSH(l, T0 + 1000000, 4);
    for (uint64_t i = 0; i < n; i++) {
        PUSH(l, T0 + i, 100 + i);
        TU_REQUIRE(lane_pop(l, NULL) == 1 && lane_head(l) == 3, "pop %" PRIu64 ": head %" PRIu64 ", want 3", i,
                   lane_head(l));
    }
    TU_CHECK(lane_bytes(l) >= n / 8, "done bits for %" PRIu64 " indexes in %zu bytes", n, lane_bytes(l));
    last = (lane_entry_t){ T0 + 1000000, 4, 3 };
    EXPECT_POPS(l, &last, 1);
    TU_CHECK(lane_head(l) == n + 4, "head %" PRIu64 ", want %" PRIu64, lane_head(l), n + 4);
    lane_free(l);

    /* The bound: a push past max_entries is refused, and the lane is unchanged. */
    l = lane_new(40, 5);
    for (int i = 0; i < 5; i++) {
        PUSH(l, T0 + (uint64_t)i, 1 + (uint64_t)i);
    }
    EXPECT_ERROR(lane_push(l, T0, 99, 45, err, sizeof err), err, "full at 5 entries (max 5)", "CQ index 45");
    TU_CHECK(lane_size(l) == 5 && lane_tail(l) == 45, "refused push changed the lane: size %zu tail %" PRIu64,
             lane_size(l), lane_tail(l));
    TU_REQUIRE(lane_pop(l, NULL) == 1, "pop");
    PUSH(l, T0, 99);
    const lane_entry_t want[] = {
        { T0, 99, 45 }, { T0 + 1, 2, 41 }, { T0 + 2, 3, 42 }, { T0 + 3, 4, 43 }, { T0 + 4, 5, 44 }
    };
    EXPECT_POPS(l, want, 5);
    lane_free(l);
}

static void test_bad_pushes(void)
{
    char err[256] = "";
    lane_t *l = lane_new(7, 8);
    EXPECT_ERROR(lane_push(l, T0, 1, 8, err, sizeof err), err, "CQ index 8", "expected the lane's tail 7");
    EXPECT_ERROR(lane_push(l, T0, 1, 6, err, sizeof err), err, "CQ index 6", "tail 7");
    EXPECT_ERROR(lane_push(l, T0, 0, 7, err, sizeof err), err, "id 0 is not a message", "CQ index 7");
    TU_CHECK(lane_size(l) == 0 && lane_tail(l) == 7 && lane_head(l) == 7, "refused pushes changed the lane");
    lane_free(l);
}

/* ------------------------------------------------------------ load at open */

static cq_entry_t lane_cq_entry(uint64_t i, uint64_t *rng)
{
    /* A remainder's shape: appended in time order, due within a second after. */
    cq_entry_t e = { UINT64_C(0x100000) + i * 146, T0 + i / 400 + next_random(rng) % 1000 };
    return e;
}

static cq_t *make_cq(uint64_t n, uint64_t head, uint64_t seed, lane_entry_t *model, int line)
{
    char err[512] = "";
    cq_t *q = NULL;
    TU_REQUIRE_AT(cq_open(dir, QUEUE, 0, 0, &q, err, sizeof err) == 0, line, "cq_open: %s", err);
    uint64_t rng = seed;
    for (uint64_t i = 0; i < n; i++) {
        cq_entry_t e = lane_cq_entry(i, &rng);
        TU_REQUIRE_AT(cq_append(q, &e, NULL, err, sizeof err) == 0, line, "append %" PRIu64 ": %s", i, err);
        if (model != NULL && i >= head) {
            model[i - head] = (lane_entry_t){ e.due, e.log_offset, i };
        }
    }
    TU_REQUIRE_AT(cq_advance_head(q, head, err, sizeof err) == 0, line, "advance head: %s", err);
    TU_REQUIRE_AT(cq_close(q, err, sizeof err) == 0, line, "cq_close: %s", err);
    q = NULL;
    TU_REQUIRE_AT(cq_open(dir, QUEUE, head, n, &q, err, sizeof err) == 0, line, "reopen: %s", err);
    return q;
}
#define MAKE_CQ(n, head, seed, model) make_cq((n), (head), (seed), (model), __LINE__)

static void test_load_equals_model(void)
{
    char err[512] = "";
    /* The window crosses a file boundary with runs not aligned to it. */
    const uint64_t head = 1234, n = CQ_FILE_ENTRIES + 3000;
    lane_entry_t *model = malloc((size_t)(n - head) * sizeof *model);
    TU_REQUIRE(model != NULL, "malloc");
    cq_t *q = MAKE_CQ(n, head, 42, model);
    lane_t *l = NULL;
    TU_REQUIRE(lane_load(q, 1 << 20, &l, err, sizeof err) == 0 && l != NULL, "lane_load: %s", err);
    TU_CHECK(lane_size(l) == n - head && lane_head(l) == head && lane_tail(l) == n,
             "loaded size %zu head %" PRIu64 " tail %" PRIu64 ", want %" PRIu64 " %" PRIu64 " %" PRIu64, lane_size(l),
             lane_head(l), lane_tail(l), n - head, head, n);
    qsort(model, (size_t)(n - head), sizeof *model, entry_cmp);
    EXPECT_POPS(l, model, (size_t)(n - head));
    /* The lane goes on from the CQ's tail. */
    PUSH(l, T0, 5);
    TU_CHECK(lane_head(l) == n && lane_tail(l) == n + 1, "push after load: head %" PRIu64 " tail %" PRIu64,
             lane_head(l), lane_tail(l));
    lane_free(l);
    free(model);
    TU_CHECK(cq_close(q, err, sizeof err) == 0, "cq_close: %s", err);
}

static void test_load_empty(void)
{
    char err[512] = "";
    cq_t *q = NULL;
    TU_REQUIRE(cq_open(dir, QUEUE, 0, 0, &q, err, sizeof err) == 0, "cq_open: %s", err);
    lane_t *l = NULL;
    TU_REQUIRE(lane_load(q, 16, &l, err, sizeof err) == 0 && l != NULL, "load of a new CQ: %s", err);
    TU_CHECK(lane_size(l) == 0 && lane_head(l) == 0 && lane_tail(l) == 0 && lane_peek(l, &(lane_entry_t){ 0 }) == 0,
             "new CQ: size %zu head %" PRIu64 " tail %" PRIu64, lane_size(l), lane_head(l), lane_tail(l));
    lane_free(l);
    TU_REQUIRE(cq_close(q, err, sizeof err) == 0, "cq_close: %s", err);
    /* Every entry consumed: the window [500, 500). */
    q = MAKE_CQ(500, 500, 3, NULL);
    l = NULL;
    TU_REQUIRE(lane_load(q, 16, &l, err, sizeof err) == 0 && l != NULL, "load of an empty window: %s", err);
    TU_CHECK(lane_size(l) == 0 && lane_head(l) == 500 && lane_tail(l) == 500,
             "empty window: size %zu head %" PRIu64 " tail %" PRIu64, lane_size(l), lane_head(l), lane_tail(l));
    PUSH(l, T0, 9);
    lane_free(l);
    TU_CHECK(cq_close(q, err, sizeof err) == 0, "cq_close: %s", err);
}

static void cq_path(char *path, size_t len)
{
    char name[64];
    cq_file_name(QUEUE, 0, name, sizeof name);
    snprintf(path, len, "%s/%s", dir, name);
}

static void test_load_damaged(void)
{
    char err[512] = "", path[4200];
    cq_path(path, sizeof path);
    const char *file = strrchr(path, '/') + 1;
    /* A zeroed entry in the middle of the window (lost since a checkpoint). */
    cq_t *q = MAKE_CQ(3000, 10, 5, NULL);
    int fd = open(path, O_WRONLY);
    TU_REQUIRE(fd >= 0, "open %s", path);
    static const char zeros[CQ_ENTRY_BYTES];
    TU_REQUIRE(pwrite(fd, zeros, sizeof zeros, 2000 * CQ_ENTRY_BYTES) == (ssize_t)sizeof zeros, "pwrite");
    close(fd);
    lane_t *l = (lane_t *)dir; /* must come back NULL */
    EXPECT_ERROR(lane_load(q, 1 << 20, &l, err, sizeof err), err, "entry 2000", file);
    TU_CHECK(strstr(err, "lane load [10, 3000)") != NULL, "error \"%s\" lacks the lane's window", err);
    TU_CHECK(l == NULL, "a failed load handed out a lane");
    /* The file cut underneath, after the CQ opened it (a short file). */
    TU_REQUIRE(truncate(path, 1500 * CQ_ENTRY_BYTES) == 0, "truncate");
    l = (lane_t *)dir;
    EXPECT_ERROR(lane_load(q, 1 << 20, &l, err, sizeof err), err, "record 1500", file);
    TU_CHECK(strstr(err, "the file ends there") != NULL, "error \"%s\" does not say the file is short", err);
    TU_CHECK(l == NULL, "a failed load handed out a lane");
    /* A window past the lane's bound is refused before anything is read. */
    l = (lane_t *)dir;
    EXPECT_ERROR(lane_load(q, 1000, &l, err, sizeof err), err, "[10, 3000) holds 2990 entries",
                 "more than the lane's max 1000");
    TU_CHECK(l == NULL, "a refused load handed out a lane");
    TU_CHECK(cq_close(q, err, sizeof err) == 0, "cq_close: %s", err);
}

static const tu_test_t lane_tests[] = {
    { "order against a model over random pushes and pops", test_random_against_model },
    { "ties: equal due by lower id, then CQ index", test_ties },
    { "lazy drops at the top; the head steps over done indexes", test_lazy_drops },
    { "growth past the initial capacity; the max_entries bound", test_growth_and_bound },
    { "bad pushes: index out of sequence, id 0", test_bad_pushes },
    { "load from a lane CQ equals the model", test_load_equals_model },
    { "load of a new CQ and of an empty window", test_load_empty },
    { "load of a damaged, short or too long window: an error, no lane", test_load_damaged },
    { NULL, NULL },
};

int main(int argc, char **argv)
{
    static const tu_suite_t suites[] = {
        { "lane", lane_tests },
    };
    return tu_suites_main(argc, argv, suites, sizeof suites / sizeof suites[0], setup, teardown);
}
