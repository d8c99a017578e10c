/*
 * tests/unit/test_clog_derived.c — the decoder of the derived-writes record
 * (levels/clog_derived.h): derived_decode, which decodes a held batch's
 * record once for the readers' overlay and the apply, gives the ops
 * derived_next gives one at a time, and calls a record whole exactly when
 * the apply of the record (levels/clog_redo_files.c) would accept it —
 * otherwise the held batch is applied from its record, which reports the
 * damage; derived_decode_into does the same in an array it reuses. Records
 * are built with the batch encoders of levels/clog_redo.h.
 */
#include "levels/clog_derived.h"
#include "levels/clog_redo.h"
#include "levels/keys.h"
#include "tests/helpers/testutil.h"

#include <CUnit/CUnit.h>
#include <stdlib.h>
#include <string.h>

/* A batch of every kind of op; its record's head filled as redo_commit fills it. */
static void every_kind(redo_batch_t *b)
{
    *b = (redo_batch_t){ 0 };
    redo_cq_write(b, 3, 10, &(cq_entry_t){ 4096, 77 });
    redo_cq_head(b, 3, 9);
    redo_slot_write(b, 65536, 2, &(slot_t){ 4096, 3, 1, 10 });
    redo_db_put(b, "Yk", 2, "lease", 5);
    redo_db_delete(b, "Kc", 2);
    memcpy(b->derived, DERIVED_MAGIC, 4);
    be32_put(b->derived + 4, b->ops);
}

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

static void test_whole_record(void)
{
    redo_batch_t b;
    every_kind(&b);
    derived_op_t *ops;
    int whole = 0;
    size_t n = derived_decode(b.derived, b.len, &ops, &whole);
    TU_REQUIRE(n == 5 && whole == 1 && ops != NULL, "%zu ops, whole %d", n, whole);
    size_t at = DERIVED_HEAD, same = 0;
    for (size_t i = 0; i < n; i++) {
        derived_op_t op;
        same += derived_next(b.derived, b.len, &at, &op) == 1 && same_op(&ops[i], &op);
    }
    TU_CHECK(same == n && at == b.len, "%zu of %zu ops as derived_next gives them", same, n);
    TU_CHECK(ops[0].tag == 'Q' && ops[0].entry.log_offset == 4096 && ops[2].slot.flags == 1 && ops[3].vlen == 5 &&
                 memcmp(ops[3].val, "lease", 5) == 0 && ops[3].key > b.derived && ops[3].key < b.derived + b.len,
             "the fields, keys and values inside the record");
    free(ops);
    redo_batch_free(&b);
}

/* What the apply of the record refuses is not whole; the ops before the
 * damage are given (the overlay holds them, as before). */
static void test_damage_is_not_whole(void)
{
    redo_batch_t b;
    every_kind(&b);
    derived_op_t *ops;
    int whole = 1;
    size_t n = derived_decode(b.derived, DERIVED_HEAD - 1, &ops, &whole);
    TU_CHECK(n == 0 && ops == NULL && whole == 0, "a cut head: %zu ops, whole %d", n, whole);
    b.derived[0] = 'X';
    n = derived_decode(b.derived, b.len, &ops, &whole);
    TU_CHECK(n == 0 && ops == NULL && whole == 0, "no magic: %zu ops, whole %d", n, whole);
    b.derived[0] = 'H';

    n = derived_decode(b.derived, b.len - 1, &ops, &whole);
    TU_CHECK(n == 4 && whole == 0 && ops[3].tag == 'P', "the last op cut: %zu ops, whole %d", n, whole);
    free(ops);

    be32_put(b.derived + 4, 6);
    n = derived_decode(b.derived, b.len, &ops, &whole);
    TU_CHECK(n == 5 && whole == 0, "a count past the ops: %zu ops, whole %d", n, whole);
    free(ops);

    be32_put(b.derived + 4, 4);
    n = derived_decode(b.derived, b.len, &ops, &whole);
    TU_CHECK(n == 4 && whole == 0, "bytes after the counted ops: %zu ops, whole %d", n, whole);
    free(ops);

    be32_put(b.derived + 4, 0);
    n = derived_decode(b.derived, DERIVED_HEAD, &ops, &whole);
    TU_CHECK(n == 0 && ops == NULL && whole == 1, "an empty record is whole: %zu ops, whole %d", n, whole);
    n = derived_decode(b.derived, b.len, &ops, &whole);
    TU_CHECK(n == 0 && ops == NULL && whole == 0, "no ops counted, bytes after: %zu ops, whole %d", n, whole);

    be32_put(b.derived + 4, 0xffffffffu);
    n = derived_decode(b.derived, b.len, &ops, &whole);
    TU_CHECK(n == 5 && whole == 0, "a count far past the record: %zu ops, whole %d", n, whole);
    free(ops);
    redo_batch_free(&b);
}

/* derived_decode_into keeps an array that has room (the redo's spares,
 * levels/clog_redo.c hold), grows one that has not, and decodes as
 * derived_decode does either way. */
static void test_decode_into_reuses(void)
{
    redo_batch_t b;
    every_kind(&b);
    derived_op_t *ops = NULL, *once = NULL;
    size_t cap = 0;
    int whole = 0, whole_once = 0;
    size_t n = derived_decode_into(b.derived, b.len, &ops, &cap, &whole);
    size_t n_once = derived_decode(b.derived, b.len, &once, &whole_once);
    size_t same = 0;
    for (size_t i = 0; i < n && i < n_once; i++) {
        same += same_op(&ops[i], &once[i]);
    }
    TU_REQUIRE(n == 5 && whole == 1 && cap >= 5 && same == n_once && n_once == 5,
               "a new array: %zu ops (cap %zu, whole %d), %zu as derived_decode gives them", n, cap, whole, same);
    free(once);

    /* an array with room is used as it is: one on the stack, which a free() would not survive */
    derived_op_t room[8], *kept = room;
    size_t kept_cap = 8;
    n = derived_decode_into(b.derived, b.len, &kept, &kept_cap, &whole);
    TU_CHECK(n == 5 && whole == 1 && kept == room && kept_cap == 8 && same_op(&room[4], &ops[4]),
             "an array with room: %zu ops in it", n);
    n = derived_decode_into(b.derived, b.len - 1, &kept, &kept_cap, &whole);
    TU_CHECK(n == 4 && whole == 0 && kept == room && kept_cap == 8, "a shorter record in the same array: %zu ops", n);
    be32_put(b.derived + 4, 0);
    n = derived_decode_into(b.derived, DERIVED_HEAD, &kept, &kept_cap, &whole);
    TU_CHECK(n == 0 && whole == 1 && kept == room && kept_cap == 8, "no op: the array is kept (%zu ops)", n);
    redo_batch_free(&b);

    b = (redo_batch_t){ 0 };
    for (uint32_t i = 0; i < 40; i++) {
        redo_cq_head(&b, i, 100 + i);
    }
    memcpy(b.derived, DERIVED_MAGIC, 4);
    be32_put(b.derived + 4, b.ops);
    n = derived_decode_into(b.derived, b.len, &ops, &cap, &whole);
    TU_CHECK(n == 40 && whole == 1 && cap >= 40 && ops[39].tag == 'H' && ops[39].queue == 39 && ops[39].index == 139,
             "a longer record grows the array: %zu ops, cap %zu", n, cap);
    free(ops);
    redo_batch_free(&b);
}

static const tu_test_t derived_tests[] = {
    { "a whole record decodes once into the ops derived_next gives", test_whole_record },
    { "a bad head, a cut op, a count off, bytes after: not whole, the ops before the damage",
      test_damage_is_not_whole },
    { "decoding into a reused array keeps it when it has room, grows it when not", test_decode_into_reuses },
    { NULL, NULL },
};

int main(int argc, char **argv)
{
    static const tu_suite_t suites[] = {
        { "clog_derived", derived_tests },
    };
    return tu_suites_main(argc, argv, suites, 1, NULL, NULL);
}
