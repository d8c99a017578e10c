/*
 * tests/unit/test_clog_overlay.c — the readers' view of held writes
 * (levels/clog_overlay.h; docs/design-commitlog.md §3 rule 2): records are
 * built with the batch encoders of levels/clog_redo.h and fed to the overlay
 * as redo_commit, redo_apply_durable and redo_sync_failed feed it; every
 * lookup is checked against the value the last held writer gave the place.
 */
#include "levels/clog_overlay.h"
#include "levels/clog_redo.h"
#include "levels/keys.h"
#include "tests/helpers/testutil.h"

#include <CUnit/CUnit.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The derived-writes record of b, its head filled as redo_commit fills it. */
static const char *record_of(redo_batch_t *b)
{
    memcpy(b->derived, "HGRD", 4);
    be32_put(b->derived + 4, b->ops);
    return b->derived;
}

/* overlay_add (to: overlay_move from `from` to `to`) of b's record[0..len)
 * decoded as the redo decodes a held batch's; the ops array is freed at once
 * (the overlay keeps none of it). */
static void add_record(clog_overlay_t *o, uint64_t from, uint64_t to, redo_batch_t *b, size_t len)
{
    derived_op_t *ops;
    int whole;
    size_t n = derived_decode(record_of(b), len, &ops, &whole);
    if (from != 0) {
        overlay_move(o, from, to, ops, n);
    } else {
        overlay_add(o, to, ops, n);
    }
    if (ops != NULL) {
        memset(ops, 0xee, n * sizeof *ops);
    }
    free(ops);
}

static int held_value(const clog_overlay_t *o, const char *key, const char *want)
{
    const char *v = NULL;
    size_t n = 0;
    int k = overlay_get(o, key, strlen(key), &v, &n);
    return k == OVERLAY_HELD && n == strlen(want) && memcmp(v, want, n) == 0;
}

static void test_lookups(void)
{
    clog_overlay_t *o = overlay_new();
    redo_batch_t b = { 0 };
    redo_cq_write(&b, 3, 10, &(cq_entry_t){ 4096, 77 });
    redo_cq_head(&b, 3, 9);
    redo_slot_write(&b, 65536, 2, &(slot_t){ 4096, 3, 0, 10 });
    redo_db_put(&b, "Yk", 2, "lease", 5);
    redo_db_delete(&b, "Kc", 2);
    add_record(o, 0, 1000, &b, b.len);
    CU_ASSERT_EQUAL(overlay_count(o), 4); /* the head move is not kept */
    cq_entry_t e;
    TU_CHECK(overlay_cq(o, 3, 10, &e) == OVERLAY_HELD && e.log_offset == 4096 && e.due == 77, "the held CQ entry");
    TU_CHECK(overlay_cq(o, 3, 11, &e) == OVERLAY_NONE && overlay_cq(o, 4, 10, &e) == OVERLAY_NONE,
             "another index or queue is not held");
    slot_t s;
    TU_CHECK(overlay_slot(o, 65536, 2, &s) == OVERLAY_HELD && s.id == 4096 && s.queue == 3 && s.cq_index == 10,
             "the held slot");
    TU_CHECK(overlay_slot(o, 0, 2, &s) == OVERLAY_NONE, "another segment's slot is not held");
    TU_CHECK(held_value(o, "Yk", "lease"), "the held put");
    const char *v;
    size_t n;
    TU_CHECK(overlay_get(o, "Kc", 2, &v, &n) == OVERLAY_DELETED, "the held delete");
    TU_CHECK(overlay_get(o, "Y", 1, &v, &n) == OVERLAY_NONE, "a prefix of a held key is not held");
    overlay_drop(o, 1000);
    TU_CHECK(overlay_count(o) == 0 && overlay_cq(o, 3, 10, &e) == OVERLAY_NONE, "made: nothing held");
    redo_batch_free(&b);
    overlay_free(o);
}

/* Two held batches write the same places: the later wins, and making the
 * earlier one keeps it. */
static void test_later_batch_wins(void)
{
    clog_overlay_t *o = overlay_new();
    redo_batch_t b1 = { 0 }, b2 = { 0 };
    redo_db_put(&b1, "Yk", 2, "one", 3);
    redo_db_put(&b1, "Oa", 2, "copy", 4);
    redo_slot_write(&b1, 0, 5, &(slot_t){ 100, 1, 0, 0 });
    redo_db_delete(&b2, "Yk", 2);
    redo_slot_write(&b2, 0, 5, &(slot_t){ 100, 1, SLOT_REVOKED, 0 });
    redo_db_put(&b2, "Oa", 2, "copy2", 5);
    add_record(o, 0, 200, &b1, b1.len);
    add_record(o, 0, 300, &b2, b2.len);
    const char *v;
    size_t n;
    slot_t s;
    TU_CHECK(overlay_get(o, "Yk", 2, &v, &n) == OVERLAY_DELETED, "the later delete hides the earlier put");
    TU_CHECK(overlay_slot(o, 0, 5, &s) == OVERLAY_HELD && s.flags == SLOT_REVOKED, "the later slot write");
    overlay_drop(o, 200);
    TU_CHECK(overlay_get(o, "Yk", 2, &v, &n) == OVERLAY_DELETED && held_value(o, "Oa", "copy2") &&
                 overlay_count(o) == 3,
             "making the earlier batch keeps what the later one wrote");
    overlay_drop(o, 300);
    CU_ASSERT_EQUAL(overlay_count(o), 0);
    redo_batch_free(&b1);
    redo_batch_free(&b2);
    overlay_free(o);
}

/* Batches carried after a failed sync (moved to new ends in log order) keep
 * the last writer's values and are forgotten at their new ends. */
static void test_moved(void)
{
    clog_overlay_t *o = overlay_new();
    redo_batch_t b1 = { 0 }, b2 = { 0 };
    redo_cq_write(&b1, 1, 0, &(cq_entry_t){ 10, 1 });
    redo_db_put(&b1, "Kx", 2, "1", 1);
    redo_cq_write(&b2, 1, 0, &(cq_entry_t){ 20, 2 });
    add_record(o, 0, 500, &b1, b1.len);
    add_record(o, 0, 600, &b2, b2.len);
    add_record(o, 500, 9000, &b1, b1.len);
    add_record(o, 600, 9100, &b2, b2.len);
    cq_entry_t e;
    TU_CHECK(overlay_cq(o, 1, 0, &e) == OVERLAY_HELD && e.log_offset == 20, "the later carried batch's entry");
    overlay_drop(o, 500);
    CU_ASSERT_EQUAL(overlay_count(o), 2); /* the old ends name nothing any more */
    overlay_drop(o, 9000);
    TU_CHECK(overlay_count(o) == 1 && overlay_cq(o, 1, 0, &e) == OVERLAY_HELD && e.log_offset == 20,
             "the first carried batch made: its key gone, the entry the second wrote kept");
    overlay_drop(o, 9100);
    CU_ASSERT_EQUAL(overlay_count(o), 0);
    redo_batch_free(&b1);
    redo_batch_free(&b2);
    overlay_free(o);
}

/* A record cut inside an operation: what decodes before the cut is held,
 * and a long key (past the lookups' stack buffer) works like a short one. */
static void test_cut_record_and_long_key(void)
{
    clog_overlay_t *o = overlay_new();
    redo_batch_t b = { 0 };
    char key[600];
    memset(key, 'k', sizeof key);
    redo_db_put(&b, key, sizeof key, "v", 1);
    redo_cq_write(&b, 2, 0, &(cq_entry_t){ 8, 8 });
    add_record(o, 0, 100, &b, b.len - 5);
    const char *v;
    size_t n;
    cq_entry_t e;
    TU_CHECK(overlay_get(o, key, sizeof key, &v, &n) == OVERLAY_HELD && n == 1 && v[0] == 'v',
             "the long key before the cut is held");
    TU_CHECK(overlay_cq(o, 2, 0, &e) == OVERLAY_NONE, "the cut CQ write is not");
    overlay_drop(o, 100);
    CU_ASSERT_EQUAL(overlay_count(o), 0);
    redo_batch_free(&b);
    overlay_free(o);
}

/* One batch writes a place twice: the second write is held, and making the
 * batch forgets the place once (the list the add kept names it twice). A
 * later batch's write of a place survives the earlier record's end: the
 * earlier record is overwritten after its drop and the value read is the
 * later batch's. */
static void test_twice_in_a_batch_and_record_lifetime(void)
{
    clog_overlay_t *o = overlay_new();
    redo_batch_t b1 = { 0 }, b2 = { 0 }, b3 = { 0 };
    redo_db_put(&b1, "Yk", 2, "one", 3);
    redo_db_put(&b1, "Yk", 2, "two", 3);
    redo_cq_write(&b1, 1, 4, &(cq_entry_t){ 1, 1 });
    redo_cq_write(&b1, 1, 4, &(cq_entry_t){ 2, 2 });
    redo_db_put(&b2, "Oa", 2, "a1", 2);
    redo_db_put(&b3, "Oa", 2, "a2", 2);
    add_record(o, 0, 10, &b1, b1.len);
    cq_entry_t e;
    TU_CHECK(held_value(o, "Yk", "two") && overlay_cq(o, 1, 4, &e) == OVERLAY_HELD && e.log_offset == 2 &&
                 overlay_count(o) == 2,
             "the second write of a place in one batch is held, once");
    overlay_drop(o, 10);
    TU_CHECK(overlay_count(o) == 0, "made: both places forgotten (%zu held)", overlay_count(o));
    add_record(o, 0, 20, &b2, b2.len);
    add_record(o, 0, 30, &b3, b3.len);
    overlay_drop(o, 20);
    memset(b2.derived, 0xee, b2.len); /* the made batch's record is freed by the redo: nothing may point into it */
    TU_CHECK(held_value(o, "Oa", "a2") && overlay_count(o) == 1, "the later batch's value, from its own record");
    overlay_drop(o, 30);
    CU_ASSERT_EQUAL(overlay_count(o), 0);
    redo_batch_free(&b1);
    redo_batch_free(&b2);
    redo_batch_free(&b3);
    overlay_free(o);
}

/* An add decodes a few ops ahead of the one it writes: a place written
 * again within that window keeps one place and the later value, head moves
 * in between hold nothing, and a record cut after more ops than the window
 * still holds every op before the cut. */
static void test_repeats_within_the_lookahead_and_a_long_cut(void)
{
    clog_overlay_t *o = overlay_new();
    redo_batch_t b = { 0 };
    for (uint64_t i = 0; i < 20; i++) {
        redo_cq_write(&b, 1, i % 3, &(cq_entry_t){ 100 + i, i });
        redo_cq_head(&b, 1, i);
        redo_db_put(&b, "Yk", 2, i % 2 ? "odd" : "even", i % 2 ? 3 : 4);
    }
    redo_slot_write(&b, 0, 7, &(slot_t){ 9, 1, 0, 0 });
    redo_db_delete(&b, "Ka", 2);
    add_record(o, 0, 10, &b, b.len - 1); /* the delete cut: 61 ops before it */
    cq_entry_t e;
    slot_t s;
    const char *v;
    size_t n;
    TU_CHECK(overlay_count(o) == 5, "3 CQ places, one key, one slot (%zu held)", overlay_count(o));
    TU_CHECK(overlay_cq(o, 1, 0, &e) == OVERLAY_HELD && e.log_offset == 118 &&
                 overlay_cq(o, 1, 1, &e) == OVERLAY_HELD && e.log_offset == 119 &&
                 overlay_cq(o, 1, 2, &e) == OVERLAY_HELD && e.log_offset == 117,
             "each CQ place holds its last write");
    TU_CHECK(held_value(o, "Yk", "odd"), "the key holds its last put");
    TU_CHECK(overlay_slot(o, 0, 7, &s) == OVERLAY_HELD && s.id == 9, "the last op before the cut is held");
    TU_CHECK(overlay_get(o, "Ka", 2, &v, &n) == OVERLAY_NONE, "the cut delete is not");
    overlay_drop(o, 10);
    CU_ASSERT_EQUAL(overlay_count(o), 0);
    redo_batch_free(&b);
    overlay_free(o);
}

/* A run lookup lays every held value of the run over what out held and
 * counts the held places from its start up to the first not held; an empty
 * overlay lays nothing. */
static void test_runs(void)
{
    clog_overlay_t *o = overlay_new();
    cq_entry_t e[6];
    slot_t sl[6];
    memset(e, 0, sizeof e);
    TU_CHECK(overlay_cq_run(o, 1, 0, 6, e) == 0 && e[0].log_offset == 0, "nothing held: a prefix of 0");
    redo_batch_t b = { 0 };
    for (uint64_t i = 0; i < 6; i++) {
        if (i != 3) {
            redo_cq_write(&b, 1, 10 + i, &(cq_entry_t){ 100 + i, i });
            redo_slot_write(&b, 4096, 20 + i, &(slot_t){ 200 + i, 1, 0, i });
        }
    }
    redo_cq_write(&b, 2, 13, &(cq_entry_t){ 999, 0 }); /* another queue's index 13 */
    add_record(o, 0, 50, &b, b.len);
    for (size_t k = 0; k < 6; k++) {
        e[k] = (cq_entry_t){ 7, 7 };
        sl[k] = (slot_t){ 7, 7, 7, 7 };
    }
    size_t cq = overlay_cq_run(o, 1, 10, 6, e), slots = overlay_slot_run(o, 4096, 20, 6, sl);
    TU_CHECK(cq == 3 && slots == 3, "held up to the first not held: %zu CQ entries, %zu slots", cq, slots);
    int laid = 1;
    for (size_t k = 0; k < 6; k++) {
        laid &= k == 3 ? e[k].log_offset == 7 && sl[k].id == 7 : e[k].log_offset == 100 + k && sl[k].id == 200 + k;
    }
    TU_CHECK(laid, "every held value laid over, also past the first not held; the one not held left as it was");
    TU_CHECK(overlay_cq_run(o, 1, 14, 2, e + 4) == 2 && overlay_cq_run(o, 1, 9, 3, e) == 0 &&
                 overlay_slot_run(o, 4096, 26, 1, sl) == 0 && overlay_cq_run(o, 1, 10, 0, e) == 0,
             "a run all held, one starting before the held, one past them, an empty one");
    overlay_drop(o, 50);
    redo_batch_free(&b);
    overlay_free(o);
}

/* A model check over many places (the table grows and deletes shift runs):
 * random batches of puts, deletes, CQ and slot writes (and head moves, which
 * hold nothing) over a key space of `places`, up to max_held held, made in
 * order; with carries, now and then every held batch is moved to a new end
 * in log order, as redo_sync_failed does. After every step each place's
 * lookup is the last held writer's, or nothing, and the count is the
 * model's. */
typedef struct model_write {
    char kind;    /* 'P', 'D', 'Q', 'S' */
    unsigned val; /* the value written */
} model_write_t;

typedef struct model {
    int places, batches;
    model_write_t *w; /* w[k * places + i]: batch k's last write of place i */
    uint64_t *end;    /* batch k's end now */
} model_t;

static unsigned model_rand(uint64_t *x)
{
    *x ^= *x << 13;
    *x ^= *x >> 7;
    *x ^= *x << 17;
    return (unsigned)(*x >> 11);
}

static void model_key(char *key, size_t size, int i)
{
    snprintf(key, size, "key-%d-padded-to-twenty-bytes", i);
}

/* The lookup of place i as the held batches [first, last) of writes say. */
static void model_check(const clog_overlay_t *o, const model_t *md, int first, int last, int *bad)
{
    size_t held = 0;
    for (int i = 0; i < md->places; i++) {
        const model_write_t *m = NULL;
        for (int k = first; k < last; k++) {
            if (md->w[(size_t)k * md->places + i].kind != 0) {
                m = &md->w[(size_t)k * md->places + i];
            }
        }
        held += m != NULL;
        char key[40];
        model_key(key, sizeof key, i);
        const char *v;
        size_t n;
        cq_entry_t e;
        slot_t s;
        int got, ok;
        if (i % 3 == 0) {
            got = overlay_get(o, key, strlen(key), &v, &n);
            ok = m == NULL        ? got == OVERLAY_NONE
                 : m->kind == 'D' ? got == OVERLAY_DELETED
                                  : got == OVERLAY_HELD && n == sizeof m->val && memcmp(v, &m->val, n) == 0;
        } else if (i % 3 == 1) {
            got = overlay_cq(o, (uint32_t)(i % 7), (uint64_t)i, &e);
            ok = m == NULL ? got == OVERLAY_NONE : got == OVERLAY_HELD && e.log_offset == m->val;
        } else {
            got = overlay_slot(o, (uint64_t)(i % 5) << 20, (uint64_t)i, &s);
            ok = m == NULL ? got == OVERLAY_NONE : got == OVERLAY_HELD && s.id == m->val;
        }
        if (!ok && (*bad)++ == 0) {
            TU_CHECK(0, "place %d: lookup %d, the model's last writer %c", i, got, m ? m->kind : '-');
        }
    }
    if (overlay_count(o) != held && (*bad)++ == 0) {
        TU_CHECK(0, "%zu places held, the model has %zu", overlay_count(o), held);
    }
}

/* Batch k's writes: `writes` random places, into b and the model. */
static void model_batch(model_t *md, int k, int writes, redo_batch_t *b, uint64_t *x)
{
    for (int j = 0; j < writes; j++) {
        int i = (int)(model_rand(x) % (unsigned)md->places);
        unsigned val = model_rand(x) | 1;
        char key[40];
        model_key(key, sizeof key, i);
        model_write_t *w = &md->w[(size_t)k * md->places + i];
        if (val % 16 == 3) {
            redo_cq_head(b, (uint32_t)(i % 7), (uint64_t)i); /* holds nothing */
        } else if (i % 3 == 0 && val % 4 == 1) {
            redo_db_delete(b, key, strlen(key));
            *w = (model_write_t){ 'D', 0 };
        } else if (i % 3 == 0) {
            redo_db_put(b, key, strlen(key), &val, sizeof val);
            *w = (model_write_t){ 'P', val };
        } else if (i % 3 == 1) {
            redo_cq_write(b, (uint32_t)(i % 7), (uint64_t)i, &(cq_entry_t){ val, 0 });
            *w = (model_write_t){ 'Q', val };
        } else {
            redo_slot_write(b, (uint64_t)(i % 5) << 20, (uint64_t)i, &(slot_t){ val, 0, 0, 0 });
            *w = (model_write_t){ 'S', val };
        }
    }
}

static void run_model(int places, int batches, int max_writes, int max_held, int carries, uint64_t seed)
{
    model_t md = { places, batches, calloc((size_t)batches * (size_t)places, sizeof(model_write_t)),
                   calloc((size_t)batches, sizeof(uint64_t)) };
    redo_batch_t *b = calloc((size_t)batches, sizeof *b);
    clog_overlay_t *o = overlay_new();
    uint64_t x = seed, next_end = 100;
    int first = 0, bad = 0, moves = 0;
    for (int k = 0; k < batches; k++) {
        model_batch(&md, k, 1 + (int)(model_rand(&x) % (unsigned)max_writes), &b[k], &x);
        md.end[k] = next_end++;
        add_record(o, 0, md.end[k], &b[k], b[k].len);
        model_check(o, &md, first, k + 1, &bad);
        if (carries && model_rand(&x) % 16 == 0) { /* a failed sync: every held batch carried, in log order */
            for (int c = first; c <= k; c++) {
                add_record(o, md.end[c], next_end, &b[c], b[c].len);
                md.end[c] = next_end++;
                moves++;
            }
            model_check(o, &md, first, k + 1, &bad);
        }
        while (k + 1 - first > max_held || (k + 1 - first > 0 && model_rand(&x) % 3 == 0)) {
            overlay_drop(o, md.end[first]);
            redo_batch_free(&b[first]);
            first++;
            model_check(o, &md, first, k + 1, &bad);
        }
    }
    while (first < batches) {
        overlay_drop(o, md.end[first]);
        redo_batch_free(&b[first]);
        first++;
    }
    TU_CHECK(bad == 0 && overlay_count(o) == 0 && (!carries || moves > 0),
             "%d lookups off the model; %zu places left; %d moves", bad, overlay_count(o), moves);
    overlay_free(o);
    free(b);
    free(md.w);
    free(md.end);
}

static void test_model(void)
{
    run_model(300, 200, 120, 8, 0, 88172645463325252ull);
}

/* Many held batches over many places: the table grows several times while
 * batches are held, runs are long enough for an add's lookahead to meet a
 * place written a few ops before in the same batch, and carried batches
 * are moved as a whole. */
static void test_model_many_held_and_carried(void)
{
    run_model(6000, 160, 2000, 40, 1, 0x2545f4914f6cdd1dull);
}

static const tu_test_t overlay_tests[] = {
    { "held CQ entries, slots, puts and deletes are seen; made ones are not", test_lookups },
    { "the later of two held batches wins, also after the earlier is made", test_later_batch_wins },
    { "batches carried after a failed sync keep the last writer's values", test_moved },
    { "a record cut inside an operation; a long key", test_cut_record_and_long_key },
    { "a place written twice by one batch; a later writer outlives the earlier record",
      test_twice_in_a_batch_and_record_lifetime },
    { "repeats within an add's lookahead; a record cut after more ops than it",
      test_repeats_within_the_lookahead_and_a_long_cut },
    { "runs of CQ entries and slots: held values laid over, the held prefix counted", test_runs },
    { "200 random batches over 300 places, up to 8 held: every lookup is the last held writer's", test_model },
    { "160 random batches over 6000 places, up to 40 held, carried now and then: the last held writer's",
      test_model_many_held_and_carried },
    { NULL, NULL },
};

int main(int argc, char **argv)
{
    static const tu_suite_t suites[] = {
        { "clog_overlay", overlay_tests },
    };
    return tu_suites_main(argc, argv, suites, 1, NULL, NULL);
}
