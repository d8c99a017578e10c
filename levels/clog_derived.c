/*
 * levels/clog_derived.c — the decoder of the derived-writes record (contract
 * in levels/clog_derived.h; layout atop levels/clog_redo.c).
 */
#include "levels/clog_derived.h"
#include "levels/keys.h"

#include <string.h>

int64_t derived_ops(const char *p, size_t n)
{
    if (n < DERIVED_HEAD || memcmp(p, DERIVED_MAGIC, 4) != 0) {
        return -1;
    }
    return be32_get(p + 4);
}

int derived_next(const char *p, size_t n, size_t *at, derived_op_t *op)
{
    size_t left = n - *at;
    if (left == 0) {
        return 0;
    }
    const char *f = p + *at + 1;
    op->tag = p[*at]; /* only its tag's fields follow (no clearing of the rest) */
    size_t len = 0;
    if (op->tag == 'Q' && left >= 29) {
        op->queue = be32_get(f);
        op->index = be64_get(f + 4);
        op->entry = (cq_entry_t){ be64_get(f + 12), be64_get(f + 20) };
        len = 29;
    } else if (op->tag == 'H' && left >= 13) {
        op->queue = be32_get(f);
        op->index = be64_get(f + 4);
        len = 13;
    } else if (op->tag == 'S' && left >= 41) {
        op->base = be64_get(f);
        op->ordinal = be64_get(f + 8);
        op->slot = (slot_t){ be64_get(f + 16), be32_get(f + 24), be32_get(f + 28), be64_get(f + 32) };
        len = 41;
    } else if (op->tag == 'P' && left >= 9 && left - 9 >= (uint64_t)be32_get(f) + be32_get(f + 4)) {
        op->klen = be32_get(f);
        op->vlen = be32_get(f + 4);
        op->key = f + 8;
        op->val = f + 8 + op->klen;
        len = 9 + (size_t)op->klen + op->vlen;
    } else if (op->tag == 'D' && left >= 5 && left - 5 >= be32_get(f)) {
        op->klen = be32_get(f);
        op->key = f + 4;
        op->val = NULL;
        op->vlen = 0;
        len = 5 + (size_t)op->klen;
    } else {
        return 0;
    }
    *at += len;
    return 1;
}
