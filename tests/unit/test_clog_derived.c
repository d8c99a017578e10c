/*
 * tests/unit/test_clog_derived.c — a batch's derived-writes record and its
 * ops (levels/clog_derived.h, levels/clog_redo.h): the encoders build each op
 * beside the bytes they write, and a held batch is applied and laid over by
 * those ops without decoding the record (the redo at open decodes it with
 * derived_next), so the ops must be what derived_next decodes from the
 * record — field for field, keys and values pointing into the record, also
 * after the record was reallocated as it grew.
 */
#include "levels/clog_derived.h"
#include "levels/clog_redo.h"
#include "levels/keys.h"
#include "tests/helpers/testutil.h"

#include <CUnit/CUnit.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int same_op(const derived_op_t *x, const derived_op_t *y)
{
    if (x->tag != y->tag) {
        return 0;
    }
    switch (x->tag) {
    case 'Q':
        return x->queue == y->queue && x->index == y->index && x->entry.log_offset == y->entry.log_offset &&
               x->entry.due == y->entry.due;
    case 'H':
        return x->queue == y->queue && x->index == y->index;
    case 'S':
        return x->base == y->base && x->ordinal == y->ordinal && x->slot.id == y->slot.id &&
               x->slot.queue == y->slot.queue && x->slot.flags == y->slot.flags && x->slot.cq_index == y->slot.cq_index;
    case 'P':
        return x->key == y->key && x->klen == y->klen && x->val == y->val && x->vlen == y->vlen;
    default:
        return x->key == y->key && x->klen == y->klen && x->val == NULL && y->val == NULL && x->vlen == 0;
    }
}

/* How many of b's ops are what derived_next decodes from its record, which
 * must decode to exactly b->ops ops. */
static uint32_t ops_as_decoded(const redo_batch_t *b)
{
    size_t at = DERIVED_HEAD;
    uint32_t same = 0;
    for (uint32_t i = 0; i < b->ops; i++) {
        derived_op_t op;
        same += derived_next(b->derived, b->len, &at, &op) == 1 && same_op(&b->native[i], &op);
    }
    return at == b->len ? same : 0;
}

static void test_every_kind(void)
{
    redo_batch_t b = { 0 };
    redo_cq_write(&b, 3, 10, &(cq_entry_t){ 4096, 77 });
    redo_cq_head(&b, 3, 9);
    redo_slot_write(&b, 65536, 2, &(slot_t){ 4096, 3, 1, 10 });
    redo_db_put(&b, "Yk", 2, "lease", 5);
    redo_db_put(&b, "Kz", 2, "", 0);
    redo_db_delete(&b, "Kc", 2);
    TU_CHECK(b.ops == 6 && ops_as_decoded(&b) == 6, "%" PRIu32 " of 6 ops as derived_next decodes them",
             ops_as_decoded(&b));
    TU_CHECK(b.native[0].entry.log_offset == 4096 && b.native[2].slot.flags == 1 && b.native[3].vlen == 5 &&
                 memcmp(b.native[3].val, "lease", 5) == 0 && memcmp(b.native[5].key, "Kc", 2) == 0,
             "the fields, keys and values");
    redo_batch_free(&b);
}

/* Many puts and deletes between the other kinds: the record is reallocated
 * (and moves) many times, and every key and value made before follows it. */
static void test_keys_follow_the_record(void)
{
    redo_batch_t b = { 0 };
    char key[40], val[80];
    int moved = 0;
    for (uint32_t i = 0; i < 3000; i++) {
        uintptr_t before = (uintptr_t)b.derived;
        snprintf(key, sizeof key, "K%08" PRIu32, i);
        snprintf(val, sizeof val, "value of %" PRIu32 " %*s", i, (int)(i % 40), "");
        if (i % 3 == 0) {
            redo_db_delete(&b, key, strlen(key));
        } else if (i % 3 == 1) {
            redo_db_put(&b, key, strlen(key), val, strlen(val));
        } else {
            redo_slot_write(&b, 0, i, &(slot_t){ i, 1, 0, i });
        }
        moved += before != 0 && (uintptr_t)b.derived != before;
    }
    TU_CHECK(moved > 0, "the record moved as it grew (%d times)", moved);
    TU_CHECK(ops_as_decoded(&b) == 3000, "%" PRIu32 " of 3000 ops as derived_next decodes them", ops_as_decoded(&b));
    redo_batch_free(&b);
}

static const tu_test_t derived_tests[] = {
    { "the encoders' ops are what derived_next decodes from their record", test_every_kind },
    { "keys and values follow the record when it moves as it grows", test_keys_follow_the_record },
    { NULL, NULL },
};

int main(int argc, char **argv)
{
    static const tu_suite_t suites[] = {
        { "clog_derived", derived_tests },
    };
    return tu_suites_main(argc, argv, suites, 1, NULL, NULL);
}
