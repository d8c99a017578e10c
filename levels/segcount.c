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
 * step. The newest entry is asked first: the hot path, a SEND into the
 * current segment, is one compare. The bases changed since the last commit
 * are listed (seg_dirty, each once), so a commit's flush writes them without
 * a pass over every entry; only a count that reached 0 (a segment's last
 * message gone, once a segment's life) makes it close the gap, a pass over
 * all.
 *
 * Threading: the store's owner thread.
 */
#include "levels/store_internal.h"
#include "base/alloc.h"
#include "base/err.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#define SEG_DROPPED 2 /* seg_count_t.dirty of an entry segcount_flush deleted, until it closes the gap */

/* The index of the first entry whose base is at or above base (n_seg:
 * none). The newest entry, the current segment's, is asked first: a SEND
 * counts there, one compare; the rest is a binary search. */
static size_t lower_bound(const store_t *s, uint64_t base)
{
    size_t lo = 0, hi = s->n_seg;
    if (hi > 0 && s->seg[hi - 1].base <= base) {
        return s->seg[hi - 1].base == base ? hi - 1 : hi;
    }
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (s->seg[mid].base < base) {
            lo = mid + 1;
        } else {
            hi = mid;
        }
    }
    return lo;
}

/* The entry of segment base, or NULL. */
static seg_count_t *find(store_t *s, uint64_t base)
{
    size_t i = lower_bound(s, base);
    return i < s->n_seg && s->seg[i].base == base ? &s->seg[i] : NULL;
}

/* The entry of segment base, made at 0 where its base sorts when there is
 * none (a SEND's new segment: at the end, nothing moved). */
static __attribute__((noinline)) seg_count_t *find_or_make(store_t *s, uint64_t base)
{
    size_t i = lower_bound(s, base);
    if (i < s->n_seg && s->seg[i].base == base) {
        return &s->seg[i];
    }
    if (s->n_seg == s->cap_seg) {
        s->cap_seg = s->cap_seg ? 2 * s->cap_seg : 16;
        s->seg = xrealloc(s->seg, s->cap_seg * sizeof *s->seg);
    }
    memmove(&s->seg[i + 1], &s->seg[i], (s->n_seg - i) * sizeof *s->seg); /* nothing when it appends */
    s->seg[i] = (seg_count_t){ base, 0, 0 };
    s->n_seg++;
    return &s->seg[i];
}

/* c's count changed: it is written at the next segcount_flush (c not yet
 * dirty). */
static __attribute__((noinline)) void mark_dirty(store_t *s, seg_count_t *c)
{
    c->dirty = 1;
    if (s->n_seg_dirty == s->cap_seg_dirty) {
        s->cap_seg_dirty = s->cap_seg_dirty ? 2 * s->cap_seg_dirty : 16;
        s->seg_dirty = xrealloc(s->seg_dirty, s->cap_seg_dirty * sizeof *s->seg_dirty);
    }
    s->seg_dirty[s->n_seg_dirty++] = c->base;
}

void segcount_add(store_t *s, uint64_t id, int delta)
{
    uint64_t base = id - id % s->opt.segment_bytes;
    seg_count_t *c = s->n_seg > 0 && s->seg[s->n_seg - 1].base == base ? &s->seg[s->n_seg - 1] /* the hot path */
                                                                       : find_or_make(s, base);
    c->live += (uint64_t)(int64_t)delta;
    if (!c->dirty) {
        mark_dirty(s, c);
    }
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
        if (!s->seg[i].dirty) {
            mark_dirty(s, &s->seg[i]);
        }
    }
}

void segcount_flush(store_t *s)
{
    size_t dropped = 0;
    for (size_t d = 0; d < s->n_seg_dirty; d++) {
        uint64_t base = s->seg_dirty[d];
        seg_count_t *c = find(s, base);
        key_buf_t k;
        key_start(&k, KEY_SEGMENT);
        key_u64(&k, base);
        if (c->live != 0) {
            char v[8];
            be64_put(v, c->live);
            store_put(s, &k, v, sizeof v);
            c->dirty = 0;
        } else {
            store_del(s, &k);
            c->dirty = SEG_DROPPED;
            dropped++;
        }
    }
    s->n_seg_dirty = 0;
    if (dropped == 0) {
        return; /* the common case: no segment's last message went; nothing moves */
    }
    size_t kept = 0;
    for (size_t i = 0; i < s->n_seg; i++) {
        if (s->seg[i].dirty == SEG_DROPPED) {
            continue; /* the entries after it close the gap, in order */
        }
        if (kept != i) {
            s->seg[kept] = s->seg[i];
        }
        kept++;
    }
    s->n_seg = kept;
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
    free(s->seg_dirty);
    s->seg_dirty = NULL;
    s->n_seg_dirty = s->cap_seg_dirty = 0;
}
