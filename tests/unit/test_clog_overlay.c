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
#include <stdlib.h>
#include <string.h>

/* The derived-writes record of b, its head filled as redo_commit fills it. */
static const char *record_of(redo_batch_t *b)
{
    memcpy(b->derived, "HGRD", 4);
    be32_put(b->derived + 4, b->ops);
    return b->derived;
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
    overlay_add(o, 1000, record_of(&b), b.len);
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
    overlay_drop(o, 1000, b.derived, b.len);
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
    overlay_add(o, 200, record_of(&b1), b1.len);
    overlay_add(o, 300, record_of(&b2), b2.len);
    const char *v;
    size_t n;
    slot_t s;
    TU_CHECK(overlay_get(o, "Yk", 2, &v, &n) == OVERLAY_DELETED, "the later delete hides the earlier put");
    TU_CHECK(overlay_slot(o, 0, 5, &s) == OVERLAY_HELD && s.flags == SLOT_REVOKED, "the later slot write");
    overlay_drop(o, 200, b1.derived, b1.len);
    TU_CHECK(overlay_get(o, "Yk", 2, &v, &n) == OVERLAY_DELETED && held_value(o, "Oa", "copy2") &&
                 overlay_count(o) == 3,
             "making the earlier batch keeps what the later one wrote");
    overlay_drop(o, 300, b2.derived, b2.len);
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
    overlay_add(o, 500, record_of(&b1), b1.len);
    overlay_add(o, 600, record_of(&b2), b2.len);
    overlay_move(o, 500, 9000, b1.derived, b1.len);
    overlay_move(o, 600, 9100, b2.derived, b2.len);
    cq_entry_t e;
    TU_CHECK(overlay_cq(o, 1, 0, &e) == OVERLAY_HELD && e.log_offset == 20, "the later carried batch's entry");
    overlay_drop(o, 500, b1.derived, b1.len);
    CU_ASSERT_EQUAL(overlay_count(o), 2); /* the old ends name nothing any more */
    overlay_drop(o, 9000, b1.derived, b1.len);
    TU_CHECK(overlay_count(o) == 1 && overlay_cq(o, 1, 0, &e) == OVERLAY_HELD && e.log_offset == 20,
             "the first carried batch made: its key gone, the entry the second wrote kept");
    overlay_drop(o, 9100, b2.derived, b2.len);
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
    overlay_add(o, 100, record_of(&b), b.len - 5);
    const char *v;
    size_t n;
    cq_entry_t e;
    TU_CHECK(overlay_get(o, key, sizeof key, &v, &n) == OVERLAY_HELD && n == 1 && v[0] == 'v',
             "the long key before the cut is held");
    TU_CHECK(overlay_cq(o, 2, 0, &e) == OVERLAY_NONE, "the cut CQ write is not");
    overlay_drop(o, 100, b.derived, b.len - 5);
    CU_ASSERT_EQUAL(overlay_count(o), 0);
    redo_batch_free(&b);
    overlay_free(o);
}

static const tu_test_t overlay_tests[] = {
    { "held CQ entries, slots, puts and deletes are seen; made ones are not", test_lookups },
    { "the later of two held batches wins, also after the earlier is made", test_later_batch_wins },
    { "batches carried after a failed sync keep the last writer's values", test_moved },
    { "a record cut inside an operation; a long key", test_cut_record_and_long_key },
    { NULL, NULL },
};

int main(int argc, char **argv)
{
    static const tu_suite_t suites[] = {
        { "clog_overlay", overlay_tests },
    };
    return tu_suites_main(argc, argv, suites, 1, NULL, NULL);
}
