/*
 * levels/clog_overlay.c — the readers' view of held writes (contract in
 * levels/clog_overlay.h).
 *
 * Every written place (a CQ entry, a where-slot, a LevelDB key) is one
 * place_t in an open-addressing table of its own (linear probing, deletion
 * by backward shift, so no tombstones), keyed by its tag and fields — a
 * LevelDB key by the bytes of the record that wrote it last. A place
 * remembers the end of that batch and points into its record for the key
 * and a put's value, so nothing is copied and the place is updated where it
 * stands when a later held batch writes it again.
 *
 * Each added batch keeps the list of places it wrote (a FIFO in add order),
 * so overlay_drop walks that list — the record is decoded once, at add —
 * and removes a place only when its end is still the dropped batch's (a
 * later held batch's write stays). Places come from a pool of slabs: a
 * place dropped twice by one batch's list (the batch wrote it twice) is
 * seen free (end 0) the second time, never reused meanwhile; batch ends are
 * never 0 and grow in add order (they are log offsets), which is what makes
 * "end still mine" sound.
 */
#include "levels/clog_overlay.h"
#include "base/alloc.h"
#include "levels/clog_derived.h"

#include <stdlib.h>
#include <string.h>

#define PLACE_FREE  0    /* a place's end while it waits in the pool */
#define SLAB_PLACES 256  /* places allocated at a time */
#define TABLE_MIN   1024 /* the table's first size (a power of two) */

typedef struct place {
    uint64_t end;  /* the held batch that wrote it last; PLACE_FREE: in the pool */
    uint64_t hash; /* of its tag and fields, kept for growing and deleting */
    char tag;      /* 'Q' a CQ entry, 'S' a where-slot, 'K' a LevelDB key */
    char deleted;  /* 'K': the last write was a delete */
    uint32_t klen, vlen;
    uint64_t a, b;   /* 'Q': queue, index; 'S': segment base, ordinal */
    const char *key; /* 'K': inside the record of batch `end` */
    const char *val; /* a put's value, likewise */
    cq_entry_t entry;
    slot_t slot;
    struct place *next_free;
} place_t;

typedef struct slab {
    struct slab *next;
    place_t places[SLAB_PLACES];
} slab_t;

/* The places one added batch wrote, in its record's order (repeats kept). */
typedef struct batch_places {
    uint64_t end;
    place_t **p;
    size_t n;
} batch_places_t;

struct clog_overlay {
    place_t **table;
    size_t cap, used; /* cap a power of two, used at most half of it */
    slab_t *slabs;
    place_t *free_places;
    batch_places_t *batches; /* a FIFO: [bfirst, nbatches) */
    size_t bfirst, nbatches, bcap;
};

/* ---- hashing ------------------------------------------------------------------------ */

static uint64_t mix(uint64_t h)
{
    h ^= h >> 33;
    h *= UINT64_C(0xff51afd7ed558ccd);
    h ^= h >> 33;
    h *= UINT64_C(0xc4ceb9fe1a85ec53);
    h ^= h >> 33;
    return h;
}

static uint64_t hash_fields(char tag, uint64_t a, uint64_t b)
{
    return mix((a * UINT64_C(0x9e3779b97f4a7c15)) ^ b ^ ((uint64_t)(unsigned char)tag << 56));
}

static uint64_t hash_key(const char *k, size_t n)
{
    uint64_t h = UINT64_C(0x9e3779b97f4a7c15) ^ n;
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        uint64_t w;
        memcpy(&w, k + i, 8);
        h = (h ^ w) * UINT64_C(0x100000001b3);
        h ^= h >> 29;
    }
    uint64_t w = 0;
    memcpy(&w, k + i, n - i);
    return mix(h ^ w);
}

/* ---- the table ---------------------------------------------------------------------- */

static int place_is(const place_t *p, char tag, uint64_t a, uint64_t b, const char *key, size_t klen)
{
    if (p->tag != tag) {
        return 0;
    }
    if (tag == 'K') {
        return p->klen == klen && memcmp(p->key, key, klen) == 0;
    }
    return p->a == a && p->b == b;
}

static place_t *table_find(const clog_overlay_t *o, uint64_t hash, char tag, uint64_t a, uint64_t b, const char *key,
                           size_t klen)
{
    if (o->cap == 0) {
        return NULL;
    }
    size_t mask = o->cap - 1;
    for (size_t i = hash & mask; o->table[i] != NULL; i = (i + 1) & mask) {
        if (o->table[i]->hash == hash && place_is(o->table[i], tag, a, b, key, klen)) {
            return o->table[i];
        }
    }
    return NULL;
}

static void table_insert_known_absent(place_t **table, size_t cap, place_t *p)
{
    size_t mask = cap - 1, i = p->hash & mask;
    while (table[i] != NULL) {
        i = (i + 1) & mask;
    }
    table[i] = p;
}

static void table_insert(clog_overlay_t *o, place_t *p)
{
    if ((o->used + 1) * 2 > o->cap) {
        size_t cap = o->cap ? o->cap * 2 : TABLE_MIN;
        place_t **t = xcalloc(cap, sizeof *t);
        for (size_t i = 0; i < o->cap; i++) {
            if (o->table[i] != NULL) {
                table_insert_known_absent(t, cap, o->table[i]);
            }
        }
        free(o->table);
        o->table = t;
        o->cap = cap;
    }
    table_insert_known_absent(o->table, o->cap, p);
    o->used++;
}

/* Remove p (in the table) and close the gap by shifting its run back. */
static void table_remove(clog_overlay_t *o, const place_t *p)
{
    size_t mask = o->cap - 1, i = p->hash & mask;
    while (o->table[i] != p) {
        i = (i + 1) & mask;
    }
    o->table[i] = NULL;
    for (size_t j = (i + 1) & mask; o->table[j] != NULL; j = (j + 1) & mask) {
        size_t home = o->table[j]->hash & mask;
        /* the entry at j stays when its home lies cyclically in (i, j] */
        int stays = i <= j ? (home > i && home <= j) : (home > i || home <= j);
        if (!stays) {
            o->table[i] = o->table[j];
            o->table[j] = NULL;
            i = j;
        }
    }
    o->used--;
}

/* ---- the pool ----------------------------------------------------------------------- */

static place_t *place_take(clog_overlay_t *o)
{
    if (o->free_places == NULL) {
        slab_t *s = xmalloc(sizeof *s);
        s->next = o->slabs;
        o->slabs = s;
        for (size_t i = 0; i < SLAB_PLACES; i++) {
            s->places[i].end = PLACE_FREE;
            s->places[i].next_free = i + 1 < SLAB_PLACES ? &s->places[i + 1] : NULL;
        }
        o->free_places = s->places;
    }
    place_t *p = o->free_places;
    o->free_places = p->next_free;
    return p;
}

static void place_give_back(clog_overlay_t *o, place_t *p)
{
    p->end = PLACE_FREE;
    p->next_free = o->free_places;
    o->free_places = p;
}

/* ---- the interface ------------------------------------------------------------------ */

clog_overlay_t *overlay_new(void)
{
    return xcalloc(1, sizeof(clog_overlay_t));
}

void overlay_free(clog_overlay_t *o)
{
    if (o == NULL) {
        return;
    }
    for (size_t i = o->bfirst; i < o->nbatches; i++) {
        free(o->batches[i].p);
    }
    while (o->slabs != NULL) {
        slab_t *next = o->slabs->next;
        free(o->slabs);
        o->slabs = next;
    }
    free(o->batches);
    free(o->table);
    free(o);
}

static batch_places_t *batch_push(clog_overlay_t *o, uint64_t end, size_t places)
{
    if (o->nbatches == o->bcap) {
        if (o->bfirst > 0) {
            memmove(o->batches, o->batches + o->bfirst, (o->nbatches - o->bfirst) * sizeof *o->batches);
            o->nbatches -= o->bfirst;
            o->bfirst = 0;
        } else {
            o->bcap = o->bcap ? o->bcap * 2 : 16;
            o->batches = xrealloc(o->batches, o->bcap * sizeof *o->batches);
        }
    }
    batch_places_t *bp = &o->batches[o->nbatches++];
    *bp = (batch_places_t){ end, places ? xmalloc(places * sizeof *bp->p) : NULL, 0 };
    return bp;
}

void overlay_add(clog_overlay_t *o, uint64_t end, const char *rec, size_t len)
{
    int64_t ops = derived_ops(rec, len);
    if (ops < 0) {
        return;
    }
    /* every op takes at least 5 bytes: the count is bounded by the record, whatever its head claims */
    size_t most = (size_t)ops < len / 5 ? (size_t)ops : len / 5;
    batch_places_t *bp = batch_push(o, end, most);
    size_t at = DERIVED_HEAD;
    for (int64_t i = 0; i < ops; i++) {
        derived_op_t op;
        if (!derived_next(rec, len, &at, &op)) {
            return;
        }
        char tag = op.tag == 'Q' || op.tag == 'S' ? op.tag : 'K';
        uint64_t a = op.tag == 'Q' ? op.queue : op.base, b = op.tag == 'Q' ? op.index : op.ordinal;
        if (op.tag == 'H') {
            continue; /* head moves are the caller's records */
        }
        uint64_t hash = tag == 'K' ? hash_key(op.key, op.klen) : hash_fields(tag, a, b);
        place_t *p = table_find(o, hash, tag, a, b, op.key, op.klen);
        if (p == NULL) {
            p = place_take(o);
            p->hash = hash;
            p->tag = tag;
            p->a = a;
            p->b = b;
            p->klen = op.klen;
            table_insert(o, p);
        }
        p->end = end;
        p->key = op.key; /* this record's copy: the record of batch `end` */
        p->deleted = op.tag == 'D';
        p->val = op.val;
        p->vlen = op.vlen;
        p->entry = op.entry;
        p->slot = op.slot;
        bp->p[bp->n++] = p;
    }
}

void overlay_drop(clog_overlay_t *o, uint64_t end, const char *rec, size_t len)
{
    (void)rec, (void)len; /* the places were listed at add */
    size_t i = o->bfirst;
    while (i < o->nbatches && o->batches[i].end != end) {
        i++;
    }
    if (i == o->nbatches) {
        return; /* no held batch ends there (any more) */
    }
    batch_places_t *bp = &o->batches[i];
    for (size_t k = 0; k < bp->n; k++) {
        place_t *p = bp->p[k];
        if (p->end == end) {
            table_remove(o, p);
            place_give_back(o, p);
        }
    }
    free(bp->p);
    if (i == o->bfirst) {
        o->bfirst++;
    } else {
        memmove(bp, bp + 1, (o->nbatches - i - 1) * sizeof *bp);
        o->nbatches--;
    }
    if (o->bfirst == o->nbatches) {
        o->bfirst = o->nbatches = 0;
    }
}

void overlay_move(clog_overlay_t *o, uint64_t from, uint64_t to, const char *rec, size_t len)
{
    /* in log order: a place a later carried batch wrote is rewritten by it when its turn comes */
    overlay_drop(o, from, rec, len);
    overlay_add(o, to, rec, len);
}

int overlay_cq(const clog_overlay_t *o, uint32_t queue, uint64_t index, cq_entry_t *e)
{
    const place_t *p = table_find(o, hash_fields('Q', queue, index), 'Q', queue, index, NULL, 0);
    if (p == NULL) {
        return OVERLAY_NONE;
    }
    *e = p->entry;
    return OVERLAY_HELD;
}

int overlay_slot(const clog_overlay_t *o, uint64_t base, uint64_t ordinal, slot_t *s)
{
    const place_t *p = table_find(o, hash_fields('S', base, ordinal), 'S', base, ordinal, NULL, 0);
    if (p == NULL) {
        return OVERLAY_NONE;
    }
    *s = p->slot;
    return OVERLAY_HELD;
}

int overlay_get(const clog_overlay_t *o, const void *key, size_t klen, const char **val, size_t *vlen)
{
    const place_t *p = table_find(o, hash_key(key, klen), 'K', 0, 0, key, klen);
    if (p == NULL) {
        return OVERLAY_NONE;
    }
    if (p->deleted) {
        return OVERLAY_DELETED;
    }
    *val = p->val;
    *vlen = p->vlen;
    return OVERLAY_HELD;
}

size_t overlay_count(const clog_overlay_t *o)
{
    return o->used;
}
