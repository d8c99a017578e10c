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
 * The counts live in a small array (one entry per segment holding waiting
 * messages: the log's size over the segment size, tens) searched from the
 * last one used, which is the current segment on the hot path.
 *
 * Threading: the store's owner thread.
 */
#include "levels/store_internal.h"
#include "base/alloc.h"
#include "base/err.h"

#include <inttypes.h>
#include <stdlib.h>

/* The entry of segment base, made at 0 when make is set; NULL otherwise. */
static seg_count_t *find(store_t *s, uint64_t base, int make)
{
    if (s->seg_last < s->n_seg && s->seg[s->seg_last].base == base) {
        return &s->seg[s->seg_last];
    }
    for (size_t i = 0; i < s->n_seg; i++) {
        if (s->seg[i].base == base) {
            s->seg_last = i;
            return &s->seg[i];
        }
    }
    if (!make) {
        return NULL;
    }
    if (s->n_seg == s->cap_seg) {
        s->cap_seg = s->cap_seg ? 2 * s->cap_seg : 16;
        s->seg = xrealloc(s->seg, s->cap_seg * sizeof *s->seg);
    }
    s->seg[s->n_seg] = (seg_count_t){ base, 0, 0 };
    s->seg_last = s->n_seg;
    return &s->seg[s->n_seg++];
}

void segcount_add(store_t *s, uint64_t id, int delta)
{
    seg_count_t *c = find(s, id - id % s->opt.segment_bytes, 1);
    c->live += (uint64_t)(int64_t)delta;
    c->dirty = 1;
}

uint64_t segcount_live(store_t *s, uint64_t base)
{
    const seg_count_t *c = find(s, base, 0);
    return c != NULL ? c->live : 0;
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
    for (size_t i = 0; i < s->n_seg;) {
        seg_count_t *c = &s->seg[i];
        if (!c->dirty) {
            i++;
            continue;
        }
        key_buf_t k;
        key_start(&k, KEY_SEGMENT);
        key_u64(&k, c->base);
        c->dirty = 0;
        if (c->live != 0) {
            char v[8];
            be64_put(v, c->live);
            store_put(s, &k, v, sizeof v);
            i++;
            continue;
        }
        store_del(s, &k);
        s->seg[i] = s->seg[--s->n_seg]; /* the last one takes its place */
        s->seg_last = 0;
    }
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
        seg_count_t *c = find(s, be64_get(key + 1), 1);
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
