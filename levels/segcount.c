/*
 * levels/segcount.c — the live count of each commit-log segment
 * (docs/design-commitlog.md §5, "Step 4a: the wiring plan" 4a.3): how many
 * messages of the segment are on their SEND journey (a live level or lane
 * entry). It rises at a SEND that waits, falls when the message arrives in
 * its topic log (which holds its own copy in 4a) or is revoked; a segment is
 * recycled only at 0 (store_checkpoint.c), so a delayed message's record stays
 * readable until it arrives. One 'S' record per segment with a count above
 * 0 (keys.h), written with the batch that changes it; loaded at open.
 *
 * The counts live in an array sorted by base (one entry per segment holding
 * waiting messages: a delay queue keeps days of segments, thousands). The
 * checkpoint's recycle asks for the count of every segment below it
 * (store_checkpoint.c), once a second: a linear search from the start made
 * that walk quadratic in the log's length. Its bases ascend, so it reads the
 * counts with a cursor beside them (segcount_live_ascending: linear in the
 * segments below the checkpoint); any other lookup is a binary search.
 * Entries are added where they sort (the current segment's base only grows,
 * so a SEND appends; the open's load reads the 'S' records in key order,
 * which is base order; an index rebuild adds in any order and inserts) and
 * removed by closing the gap (segcount_flush), so the order holds at every
 * step. A one-entry memo (seg_last) of the entry the last segcount_add moved
 * keeps the hot path, a SEND into the current segment, one compare.
 *
 * Threading: the store's owner thread.
 */
#include "levels/store_internal.h"
#include "base/alloc.h"
#include "base/err.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

static int compare_base(const void *key, const void *entry)
{
    uint64_t a = *(const uint64_t *)key, b = ((const seg_count_t *)entry)->base;
    return (a > b) - (a < b);
}

/* The entry of segment base, or NULL: a binary search. */
static seg_count_t *find(store_t *s, uint64_t base)
{
    return s->n_seg > 0 ? bsearch(&base, s->seg, s->n_seg, sizeof *s->seg, compare_base) : NULL;
}

/* The entry of segment base, made at 0 where its base sorts when there is
 * none; it becomes the memo. The place is looked for from the end, where a
 * SEND's new segment sorts: one compare then, and no more than the memmove
 * otherwise. */
static seg_count_t *find_or_make(store_t *s, uint64_t base)
{
    if (s->seg_last < s->n_seg && s->seg[s->seg_last].base == base) {
        return &s->seg[s->seg_last];
    }
    seg_count_t *c = find(s, base);
    if (c == NULL) {
        size_t i = s->n_seg;
        while (i > 0 && s->seg[i - 1].base > base) {
            i--;
        }
        if (s->n_seg == s->cap_seg) {
            s->cap_seg = s->cap_seg ? 2 * s->cap_seg : 16;
            s->seg = xrealloc(s->seg, s->cap_seg * sizeof *s->seg);
        }
        memmove(&s->seg[i + 1], &s->seg[i], (s->n_seg - i) * sizeof *s->seg); /* nothing when it appends */
        s->seg[i] = (seg_count_t){ base, 0, 0 };
        s->n_seg++;
        c = &s->seg[i];
    }
    s->seg_last = (size_t)(c - s->seg);
    return c;
}

void segcount_add(store_t *s, uint64_t id, int delta)
{
    seg_count_t *c = find_or_make(s, id - id % s->opt.segment_bytes);
    c->live += (uint64_t)(int64_t)delta;
    c->dirty = 1;
}

uint64_t segcount_live(store_t *s, uint64_t base)
{
    const seg_count_t *c = find(s, base);
    return c != NULL ? c->live : 0;
}

uint64_t segcount_live_ascending(const store_t *s, size_t *at, uint64_t base)
{
    size_t i = *at;
    while (i < s->n_seg && s->seg[i].base < base) {
        i++;
    }
    *at = i;
    return i < s->n_seg && s->seg[i].base == base ? s->seg[i].live : 0;
}

void segcount_drop_all(store_t *s)
{
    for (size_t i = 0; i < s->n_seg; i++) {
        s->seg[i].live = 0;
        s->seg[i].dirty = 1;
    }
}

void segcount_flush(store_t *s)
{
    size_t kept = 0, memo = s->n_seg;
    for (size_t i = 0; i < s->n_seg; i++) {
        seg_count_t *c = &s->seg[i];
        if (c->dirty) {
            key_buf_t k;
            key_start(&k, KEY_SEGMENT);
            key_u64(&k, c->base);
            c->dirty = 0;
            if (c->live != 0) {
                char v[8];
                be64_put(v, c->live);
                store_put(s, &k, v, sizeof v);
            } else {
                store_del(s, &k);
                continue; /* dropped: the entries after it close the gap, in order */
            }
        }
        memo = i == s->seg_last ? kept : memo;
        if (kept != i) {
            s->seg[kept] = *c;
        }
        kept++;
    }
    s->n_seg = kept;
    s->seg_last = memo < kept ? memo : (kept > 0 ? kept - 1 : 0); /* else the newest: the current segment */
}

int segcount_load(store_t *s, char *err, size_t errlen)
{
    leveldb_iterator_t *it = store_iter_range(s, KEY_SEGMENT);
    const char *key;
    size_t klen;
    int rc = 0;
    for (; store_iter_in_range(it, KEY_SEGMENT, &key, &klen); leveldb_iter_next(it)) {
        size_t vlen;
        const char *v = leveldb_iter_value(it, &vlen);
        if (klen != 9 || vlen != 8) {
            char d[KEY_DESCRIBE_BYTES];
            rc = err_set(err, errlen, "corrupt segment count record %s in %s (%zu bytes)",
                         key_describe(key, klen, d, sizeof d), s->path, vlen);
            break;
        }
        seg_count_t *c = find_or_make(s, be64_get(key + 1));
        c->live = be64_get(v);
    }
    if (rc == 0) {
        rc = store_iter_error(it, "the segment counts", err, errlen);
    }
    leveldb_iter_destroy(it);
    return rc;
}

void segcount_free(store_t *s)
{
    free(s->seg);
    s->seg = NULL;
    s->n_seg = s->cap_seg = 0;
}
