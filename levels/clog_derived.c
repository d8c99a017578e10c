/*
 * levels/clog_derived.c — the decoder of the derived-writes record (contract
 * in levels/clog_derived.h; layout atop levels/clog_redo.c).
 */
#include "levels/clog_derived.h"
#include "levels/keys.h"

#include "base/alloc.h"

#include <stdlib.h>
#include <string.h>

int64_t derived_ops(const char *p, size_t n)
{
    if (n < DERIVED_HEAD || memcmp(p, DERIVED_MAGIC, 4) != 0) {
        return -1;
    }
    return be32_get(p + 4);
}

/* derived_next's body, inlined in derived_decode's loop too. */
static inline __attribute__((always_inline)) int decode_op(const char *p, size_t n, size_t *at, derived_op_t *op)
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

int derived_next(const char *p, size_t n, size_t *at, derived_op_t *op)
{
    return decode_op(p, n, at, op);
}

size_t derived_decode_into(const char *p, size_t n, derived_op_t **ops, size_t *cap, int *whole)
{
    *whole = 0;
    int64_t count = derived_ops(p, n);
    if (count <= 0) {
        *whole = count == 0 && n == DERIVED_HEAD;
        return 0;
    }
    /* every op takes at least 5 bytes: the array is bounded by the record, whatever its head claims */
    size_t most = (uint64_t)count < n / 5 ? (size_t)count : n / 5, done = 0, at = DERIVED_HEAD;
    if (most > *cap) {
        free(*ops); /* its ops are not kept: no copy */
        *ops = xmalloc(most * sizeof **ops);
        *cap = most;
    }
    derived_op_t *out = *ops;
    while (done < most && decode_op(p, n, &at, &out[done])) {
        done++;
    }
    *whole = done == (uint64_t)count && at == n;
    return done;
}

size_t derived_decode(const char *p, size_t n, derived_op_t **ops, int *whole)
{
    size_t cap = 0;
    *ops = NULL;
    size_t done = derived_decode_into(p, n, ops, &cap, whole);
    if (done == 0) {
        free(*ops);
        *ops = NULL;
    }
    return done;
}
