/*
 * levels/clog_overlay.c — the readers' view of held writes (contract in
 * levels/clog_overlay.h). One map (base/map.h) for every kind of place, its
 * key a tag byte and the place: 'Q' queue u32 index u64, 'S' base u64
 * ordinal u64, 'K' and the LevelDB key. Each value remembers the end of the
 * batch that wrote it last, so dropping a made batch leaves what a later
 * held batch wrote.
 */
#include "levels/clog_overlay.h"
#include "base/alloc.h"
#include "base/map.h"
#include "levels/clog_derived.h"
#include "levels/keys.h"

#include <stdlib.h>
#include <string.h>

struct clog_overlay {
    map_t map;
};

typedef struct held_value {
    uint64_t end; /* the batch that wrote it last */
    int deleted;  /* a LevelDB delete */
    cq_entry_t entry;
    slot_t slot;
    size_t vlen;
    char val[]; /* a LevelDB put's value */
} held_value_t;

/* The map key of op's place into k (at least 17 bytes + klen); its length. */
static size_t place_of(const derived_op_t *op, char *k)
{
    if (op->tag == 'Q') {
        k[0] = 'Q';
        be32_put(k + 1, op->queue);
        be64_put(k + 5, op->index);
        return 13;
    }
    if (op->tag == 'S') {
        k[0] = 'S';
        be64_put(k + 1, op->base);
        be64_put(k + 9, op->ordinal);
        return 17;
    }
    k[0] = 'K';
    memcpy(k + 1, op->key, op->klen);
    return 1 + (size_t)op->klen;
}

clog_overlay_t *overlay_new(void)
{
    clog_overlay_t *o = xcalloc(1, sizeof *o);
    map_init(&o->map);
    return o;
}

void overlay_free(clog_overlay_t *o)
{
    if (o == NULL) {
        return;
    }
    map_free(&o->map, free);
    free(o);
}

/* Call fn for every op of rec that writes a place (head moves skipped). */
static void each_place(clog_overlay_t *o, const char *rec, size_t len, uint64_t end,
                       void (*fn)(clog_overlay_t *, const derived_op_t *, const char *, size_t, uint64_t))
{
    int64_t ops = derived_ops(rec, len);
    size_t at = DERIVED_HEAD;
    char small[256];
    for (int64_t i = 0; i < ops; i++) {
        derived_op_t op;
        if (!derived_next(rec, len, &at, &op)) {
            return;
        }
        if (op.tag == 'H') {
            continue;
        }
        char *k = op.klen + 17 <= sizeof small ? small : xmalloc(op.klen + 17);
        fn(o, &op, k, place_of(&op, k), end);
        if (k != small) {
            free(k);
        }
    }
}

static void put_place(clog_overlay_t *o, const derived_op_t *op, const char *k, size_t kn, uint64_t end)
{
    held_value_t *v = xcalloc(1, sizeof *v + (op->tag == 'P' ? op->vlen : 0));
    v->end = end;
    v->deleted = op->tag == 'D';
    v->entry = op->entry;
    v->slot = op->slot;
    if (op->tag == 'P') {
        v->vlen = op->vlen;
        memcpy(v->val, op->val, op->vlen);
    }
    free(map_put(&o->map, k, kn, v));
}

static void drop_place(clog_overlay_t *o, const derived_op_t *op, const char *k, size_t kn, uint64_t end)
{
    (void)op;
    held_value_t *v = map_get(&o->map, k, kn);
    if (v != NULL && v->end == end) {
        free(map_del(&o->map, k, kn));
    }
}

void overlay_add(clog_overlay_t *o, uint64_t end, const char *rec, size_t len)
{
    each_place(o, rec, len, end, put_place);
}

void overlay_drop(clog_overlay_t *o, uint64_t end, const char *rec, size_t len)
{
    each_place(o, rec, len, end, drop_place);
}

void overlay_move(clog_overlay_t *o, uint64_t from, uint64_t to, const char *rec, size_t len)
{
    /* in log order: a place a later carried batch wrote is rewritten by it when its turn comes */
    overlay_drop(o, from, rec, len);
    overlay_add(o, to, rec, len);
}

static const held_value_t *lookup(const clog_overlay_t *o, const char *k, size_t kn)
{
    return map_get(&o->map, k, kn);
}

int overlay_cq(const clog_overlay_t *o, uint32_t queue, uint64_t index, cq_entry_t *e)
{
    char k[13];
    size_t kn = place_of(&(derived_op_t){ .tag = 'Q', .queue = queue, .index = index }, k);
    const held_value_t *v = lookup(o, k, kn);
    if (v == NULL) {
        return OVERLAY_NONE;
    }
    *e = v->entry;
    return OVERLAY_HELD;
}

int overlay_slot(const clog_overlay_t *o, uint64_t base, uint64_t ordinal, slot_t *s)
{
    char k[17];
    size_t kn = place_of(&(derived_op_t){ .tag = 'S', .base = base, .ordinal = ordinal }, k);
    const held_value_t *v = lookup(o, k, kn);
    if (v == NULL) {
        return OVERLAY_NONE;
    }
    *s = v->slot;
    return OVERLAY_HELD;
}

int overlay_get(const clog_overlay_t *o, const void *key, size_t klen, const char **val, size_t *vlen)
{
    char small[256];
    char *k = klen + 1 <= sizeof small ? small : xmalloc(klen + 1);
    k[0] = 'K';
    memcpy(k + 1, key, klen);
    const held_value_t *v = lookup(o, k, klen + 1);
    if (k != small) {
        free(k);
    }
    if (v == NULL) {
        return OVERLAY_NONE;
    }
    if (v->deleted) {
        return OVERLAY_DELETED;
    }
    *val = v->val;
    *vlen = v->vlen;
    return OVERLAY_HELD;
}

size_t overlay_count(const clog_overlay_t *o)
{
    return map_count(&o->map);
}
