/*
 * levels/clog_overlay.c — the readers' view of held writes (contract in
 * levels/clog_overlay.h).
 *
 * Every written place (a CQ entry, a where-slot, a LevelDB key) is one
 * place_t (64 bytes, one cache line) in a growing array, found through an
 * open-addressing table of 8-byte cells (linear probing, deletion by
 * backward shift, so no tombstones): a cell holds the low 32 bits of the
 * place's hash and its index in the array. A probe compares those bits in
 * the cell and opens the place only when they match, so a lookup of a place
 * not held (nearly every read in a flood) reads one or two cells and no
 * place; the cell's bits are also its home for the backward shift. A LevelDB
 * key is kept by the bytes of the record that wrote it last. A place
 * remembers the end of that batch and points into its record for the key and
 * a put's value, so nothing is copied and the place is updated where it
 * stands when a later held batch writes it again.
 *
 * The table is sized before an add for every place the batch could bring
 * (at most 3/8 full after it: probe runs and the backward shift stay short),
 * so one probe finds a place or the cell a new one goes in, and the table
 * grows only when more is held than ever before. An add hashes a few ops
 * ahead of the one it writes and prefetches their cells; a drop prefetches
 * the places of its list further ahead and their cells nearer, so the cache
 * misses of a batch's places overlap instead of coming one after another.
 *
 * Each added batch keeps the indices of the places it wrote (a FIFO in add
 * order), so overlay_drop walks that list — the record is not read again —
 * and removes a place only when its end is still the dropped batch's
 * (a later held batch's write stays). A place dropped twice by one batch's
 * list (the batch wrote it twice) is seen free (end 0) the second time,
 * never reused meanwhile; batch ends are never 0 and grow in add order (they
 * are log offsets), which is what makes "end still mine" sound.
 */
#include "levels/clog_overlay.h"
#include "base/alloc.h"

#include <stdlib.h>
#include <string.h>

#define PLACE_FREE     0    /* a place's end while it waits in the pool */
#define NO_PLACE       0    /* a cell's place while the cell is empty (cells hold index + 1) */
#define PLACES_MIN     1024 /* the place array's first size */
#define TABLE_MIN      1024 /* the table's first size (a power of two) */
#define ADD_LOOKAHEAD  8    /* an add hashes ops this far ahead of the one it writes */
#define DROP_LOOKAHEAD 8    /* a drop reads cells this far ahead of the place it removes, places twice as far */

typedef struct place {
    uint64_t end;  /* the held batch that wrote it last; PLACE_FREE: in the pool */
    uint64_t a, b; /* 'Q': queue, index; 'S': segment base, ordinal; in the pool: a is the next free index + 1 */
    union {
        cq_entry_t entry; /* 'Q' */
        slot_t slot;      /* 'S' */
        struct {
            const char *key; /* inside the record of batch `end` */
            const char *val; /* a put's value, likewise */
        } kv;                /* 'K' */
    } u;
    uint32_t hash; /* the low 32 bits of its hash: what its cell holds */
    uint32_t klen, vlen;
    char tag;     /* 'Q' a CQ entry, 'S' a where-slot, 'K' a LevelDB key */
    char deleted; /* 'K': the last write was a delete */
} place_t;
_Static_assert(sizeof(place_t) <= 64, "a place fills at most one cache line");

typedef struct cell {
    uint32_t hash;  /* the low 32 bits of the place's hash (its home is hash & mask) */
    uint32_t place; /* its index + 1; NO_PLACE: empty */
} cell_t;

/* The places one added batch wrote, in its record's order (repeats kept). */
typedef struct batch_places {
    uint64_t end;
    uint32_t *p; /* place indices, then 2 * DROP_LOOKAHEAD zeros */
    size_t n;
} batch_places_t;

struct clog_overlay {
    cell_t *table;
    size_t cap, used; /* cap a power of two, used at most 3/8 of it after an add's reserve */
    place_t *places;
    size_t nplaces;          /* places[0..nplaces) handed out at least once */
    size_t places_cap;       /* the array's size */
    uint32_t free_list;      /* the first free place's index + 1; 0: none */
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

static uint64_t load8(const char *p)
{
    uint64_t w;
    memcpy(&w, p, 8);
    return w;
}

static uint64_t load4(const char *p)
{
    uint32_t w;
    memcpy(&w, p, 4);
    return w;
}

/* Eight bytes at a time; the last (partial) word is read as the key's last
 * eight bytes, overlapping the word before, or from 4-byte halves or single
 * bytes for keys shorter than eight — no copy, no call. */
static uint64_t hash_key(const char *k, size_t n)
{
    uint64_t h = UINT64_C(0x9e3779b97f4a7c15) ^ n;
    uint64_t w;
    if (n >= 8) {
        for (size_t i = 0; i + 8 < n; i += 8) {
            h = (h ^ load8(k + i)) * UINT64_C(0x100000001b3);
            h ^= h >> 29;
        }
        w = load8(k + n - 8);
    } else if (n >= 4) {
        w = load4(k) | load4(k + n - 4) << 32;
    } else {
        w = 0;
        for (size_t i = 0; i < n; i++) {
            w = w << 8 | (unsigned char)k[i];
        }
    }
    return mix(h ^ w);
}

/* ---- the table ---------------------------------------------------------------------- */

static int place_is(const place_t *p, char tag, uint64_t a, uint64_t b, const char *key, size_t klen)
{
    if (p->tag != tag) {
        return 0;
    }
    if (tag == 'K') {
        return p->klen == klen && memcmp(p->u.kv.key, key, klen) == 0;
    }
    return p->a == a && p->b == b;
}

/* The cell holding the place (tag, a, b or key) of hash h, or the empty cell
 * ending its probe (where it would go). The table must have an empty cell. */
static inline size_t table_seek(const clog_overlay_t *o, uint64_t h, char tag, uint64_t a, uint64_t b, const char *key,
                                size_t klen)
{
    size_t mask = o->cap - 1;
    uint32_t h32 = (uint32_t)h;
    size_t i = h32 & mask; /* the home the cell's bits give (the backward shift reads it there) */
    for (; o->table[i].place != NO_PLACE; i = (i + 1) & mask) {
        if (o->table[i].hash == h32 && place_is(&o->places[o->table[i].place - 1], tag, a, b, key, klen)) {
            break;
        }
    }
    return i;
}

/* The held place, or NULL (the caller has checked that something is held). */
static inline const place_t *table_find(const clog_overlay_t *o, uint64_t h, char tag, uint64_t a, uint64_t b,
                                        const char *key, size_t klen)
{
    const cell_t *c = &o->table[table_seek(o, h, tag, a, b, key, klen)];
    return c->place == NO_PLACE ? NULL : &o->places[c->place - 1];
}

static void cell_put_known_absent(cell_t *table, size_t cap, cell_t c)
{
    size_t mask = cap - 1, i = c.hash & mask;
    while (table[i].place != NO_PLACE) {
        i = (i + 1) & mask;
    }
    table[i] = c;
}

/* Make room for `more` places beyond those held: the table at most 3/8
 * full after them. */
static void table_reserve(clog_overlay_t *o, size_t more)
{
    size_t cap = o->cap ? o->cap : TABLE_MIN;
    while ((o->used + more) * 8 > cap * 3) {
        cap *= 2;
    }
    if (cap == o->cap) {
        return;
    }
    cell_t *t = xcalloc(cap, sizeof *t);
    for (size_t i = 0; i < o->cap; i++) {
        if (o->table[i].place != NO_PLACE) {
            cell_put_known_absent(t, cap, o->table[i]);
        }
    }
    free(o->table);
    o->table = t;
    o->cap = cap;
}

/* Empty cell i and close the gap by shifting its run back: a cell after
 * the gap moves into it when the gap lies between its home and it (it is at
 * least as far from its home as from the gap). */
static void table_remove_at(clog_overlay_t *o, size_t i)
{
    size_t mask = o->cap - 1;
    cell_t *t = o->table;
    for (size_t j = (i + 1) & mask; t[j].place != NO_PLACE; j = (j + 1) & mask) {
        if (((j - t[j].hash) & mask) >= ((j - i) & mask)) {
            t[i] = t[j];
            i = j;
        }
    }
    t[i].place = NO_PLACE;
    o->used--;
}

/* Remove place index idx (in the table). */
static void table_remove(clog_overlay_t *o, uint32_t idx)
{
    size_t mask = o->cap - 1, i = o->places[idx].hash & mask;
    while (o->table[i].place != idx + 1) {
        i = (i + 1) & mask;
    }
    table_remove_at(o, i);
}

/* ---- the pool ----------------------------------------------------------------------- */

static uint32_t place_take(clog_overlay_t *o)
{
    if (o->free_list != 0) {
        uint32_t idx = o->free_list - 1;
        o->free_list = (uint32_t)o->places[idx].a;
        return idx;
    }
    if (o->nplaces == o->places_cap) {
        if (o->places_cap >= UINT32_MAX / 2) {
            abort(); /* cells name places by a 32-bit index: as out of memory (256 GiB of places) */
        }
        o->places_cap = o->places_cap ? o->places_cap * 2 : PLACES_MIN;
        o->places = xrealloc(o->places, o->places_cap * sizeof *o->places);
    }
    return (uint32_t)o->nplaces++;
}

static void place_give_back(clog_overlay_t *o, uint32_t idx)
{
    o->places[idx].end = PLACE_FREE;
    o->places[idx].a = o->free_list;
    o->free_list = idx + 1;
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
    free(o->batches);
    free(o->places);
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
    /* room past the places for the drop's lookahead (overlay_add fills it) */
    *bp = (batch_places_t){ end, xmalloc((places + 2 * DROP_LOOKAHEAD) * sizeof *bp->p), 0 };
    return bp;
}

/* An op of overlay_add's, its place's cell prefetched, not yet written. */
typedef struct pending {
    const derived_op_t *op;
    char tag; /* the place's: 'Q', 'S' or 'K' */
    uint64_t a, b, hash;
} pending_t;

/* Write w's place (find it or give it a cell) as batch end's, and list it in bp. */
static inline void add_place(clog_overlay_t *o, batch_places_t *bp, uint64_t end, const pending_t *w)
{
    const derived_op_t *op = w->op;
    int keyed = w->tag == 'K'; /* op has a key (an op holds its tag's fields only) */
    size_t c = table_seek(o, w->hash, w->tag, w->a, w->b, keyed ? op->key : NULL, keyed ? op->klen : 0);
    uint32_t idx;
    if (o->table[c].place == NO_PLACE) {
        idx = place_take(o);
        o->table[c] = (cell_t){ (uint32_t)w->hash, idx + 1 };
        o->used++;
        place_t *p = &o->places[idx];
        p->hash = (uint32_t)w->hash;
        p->tag = w->tag;
        p->a = w->a;
        p->b = w->b;
        p->klen = keyed ? op->klen : 0;
    } else {
        idx = o->table[c].place - 1;
    }
    place_t *p = &o->places[idx];
    p->end = end;
    if (w->tag == 'Q') {
        p->u.entry = op->entry;
    } else if (w->tag == 'S') {
        p->u.slot = op->slot;
    } else {
        p->u.kv.key = op->key; /* this record's copy: the record of batch `end` */
        p->u.kv.val = op->val;
        p->vlen = op->vlen;
        p->deleted = op->tag == 'D';
    }
    bp->p[bp->n++] = idx;
}

void overlay_add(clog_overlay_t *o, uint64_t end, const derived_op_t *ops, size_t n)
{
    batch_places_t *bp = batch_push(o, end, n);
    table_reserve(o, n);
    size_t mask = o->cap - 1;
    /* ops are written in order, each ADD_LOOKAHEAD ops after its cell was prefetched */
    pending_t ring[ADD_LOOKAHEAD];
    size_t queued = 0, written = 0;
    for (size_t i = 0; i < n; i++) {
        const derived_op_t *op = &ops[i];
        if (op->tag == 'H') {
            continue; /* head moves are the caller's records */
        }
        if (queued - written == ADD_LOOKAHEAD) {
            add_place(o, bp, end, &ring[written++ % ADD_LOOKAHEAD]);
        }
        pending_t *w = &ring[queued % ADD_LOOKAHEAD];
        w->op = op;
        w->tag = op->tag == 'Q' || op->tag == 'S' ? op->tag : 'K';
        w->a = op->tag == 'Q' ? op->queue : op->tag == 'S' ? op->base : 0;
        w->b = op->tag == 'Q' ? op->index : op->tag == 'S' ? op->ordinal : 0;
        w->hash = w->tag == 'K' ? hash_key(op->key, op->klen) : hash_fields(w->tag, w->a, w->b);
        __builtin_prefetch(&o->table[(uint32_t)w->hash & mask]);
        queued++;
    }
    while (written < queued) {
        add_place(o, bp, end, &ring[written++ % ADD_LOOKAHEAD]);
    }
    for (size_t k = 0; k < 2 * DROP_LOOKAHEAD; k++) {
        bp->p[bp->n + k] = 0; /* the drop reads ahead without a bound: place 0 is there when any place is */
    }
}

void overlay_drop(clog_overlay_t *o, uint64_t end)
{
    size_t i = o->bfirst;
    while (i < o->nbatches && o->batches[i].end != end) {
        i++;
    }
    if (i == o->nbatches) {
        return; /* no held batch ends there (any more) */
    }
    batch_places_t *bp = &o->batches[i];
    size_t mask = o->cap - 1;
    for (size_t k = 0; k < bp->n; k++) {
        /* the place two lookaheads on, the cell of the one a lookahead on (its place read by now) */
        __builtin_prefetch(&o->places[bp->p[k + 2 * DROP_LOOKAHEAD]]);
        __builtin_prefetch(&o->table[o->places[bp->p[k + DROP_LOOKAHEAD]].hash & mask]);
        uint32_t idx = bp->p[k];
        if (o->places[idx].end == end) {
            table_remove(o, idx);
            place_give_back(o, idx);
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

void overlay_move(clog_overlay_t *o, uint64_t from, uint64_t to, const derived_op_t *ops, size_t n)
{
    /* in log order: a place a later carried batch wrote is rewritten by it when its turn comes */
    overlay_drop(o, from);
    overlay_add(o, to, ops, n);
}

int overlay_cq(const clog_overlay_t *o, uint32_t queue, uint64_t index, cq_entry_t *e)
{
    if (o->used == 0) {
        return OVERLAY_NONE;
    }
    const place_t *p = table_find(o, hash_fields('Q', queue, index), 'Q', queue, index, NULL, 0);
    if (p == NULL) {
        return OVERLAY_NONE;
    }
    *e = p->u.entry;
    return OVERLAY_HELD;
}

int overlay_slot(const clog_overlay_t *o, uint64_t base, uint64_t ordinal, slot_t *s)
{
    if (o->used == 0) {
        return OVERLAY_NONE;
    }
    const place_t *p = table_find(o, hash_fields('S', base, ordinal), 'S', base, ordinal, NULL, 0);
    if (p == NULL) {
        return OVERLAY_NONE;
    }
    *s = p->u.slot;
    return OVERLAY_HELD;
}

/* overlay_cq_run and overlay_slot_run: tag 'Q' or 'S', each held value
 * (size bytes: a constant once inlined) copied to out[k]. */
static inline __attribute__((always_inline)) size_t place_run(const clog_overlay_t *o, char tag, uint64_t a, uint64_t b,
                                                              size_t n, void *out, size_t size)
{
    if (o->used == 0) {
        return 0;
    }
    size_t prefix = n;
    for (size_t k = 0; k < n; k++) {
        const place_t *p = table_find(o, hash_fields(tag, a, b + k), tag, a, b + k, NULL, 0);
        if (p != NULL) {
            memcpy((char *)out + k * size, tag == 'Q' ? (const void *)&p->u.entry : (const void *)&p->u.slot, size);
        } else if (prefix == n) {
            prefix = k;
        }
    }
    return prefix;
}

size_t overlay_cq_run(const clog_overlay_t *o, uint32_t queue, uint64_t index, size_t n, cq_entry_t *out)
{
    return place_run(o, 'Q', queue, index, n, out, sizeof *out);
}

size_t overlay_slot_run(const clog_overlay_t *o, uint64_t base, uint64_t ordinal, size_t n, slot_t *out)
{
    return place_run(o, 'S', base, ordinal, n, out, sizeof *out);
}

int overlay_get(const clog_overlay_t *o, const void *key, size_t klen, const char **val, size_t *vlen)
{
    if (o->used == 0) {
        return OVERLAY_NONE;
    }
    const place_t *p = table_find(o, hash_key(key, klen), 'K', 0, 0, key, klen);
    if (p == NULL) {
        return OVERLAY_NONE;
    }
    if (p->deleted) {
        return OVERLAY_DELETED;
    }
    *val = p->u.kv.val;
    *vlen = p->vlen;
    return OVERLAY_HELD;
}

size_t overlay_count(const clog_overlay_t *o)
{
    return o->used;
}
