/*
 * levels/index_keycount.c — the key index's count records (keys.h 'K' topic
 * 0 klen key: a u64): how many 'K' entries each (topic, key) has, written in
 * the batch that adds or drops an entry (idx_key_count_add), so FIND and
 * DEDUP answer a key with none by one Get and stop a walk after its count,
 * never stepping over other keys' deleted entries. Reads see committed data,
 * so the counts the pending batch writes are remembered in memory
 * (key_count_batch) until it is written. Built once, by one walk of 'K', for
 * a directory written before them (idx_key_counts_open); without them
 * (key_counts 0) nothing is counted.
 *
 * Threading: one thread at a time (the broker's storage thread).
 */
#include "levels/store_internal.h"
#include "base/err.h"

#include <stdint.h>
#include <string.h>

/* ---- the key index's count records ---------------------------------------------------- */

/* The committed count record of prefix ('K' topic 0 klen key: keys.h) into
 * *n (0 when there is none): 0, or -1 on a read error (err set). */
int idx_key_count_committed(store_t *s, const key_buf_t *prefix, uint64_t *n, char *err, size_t errlen)
{
    char *v;
    size_t vlen;
    int found = store_get(s, prefix, &v, &vlen, err, errlen);
    if (found < 0) {
        return -1;
    }
    *n = found && vlen == 8 ? be64_get(v) : 0;
    if (found) {
        leveldb_free(v);
    }
    return 0;
}

/* prefix's count as the pending batch leaves it: key_count_batch, else
 * committed data. 0 when there is none (or a read failed: then the store is
 * broken, so the batch holding the count written next is never committed). */
static uint64_t key_count_get(store_t *s, const key_buf_t *prefix)
{
    uintptr_t at = (uintptr_t)map_get(&s->key_count_batch, prefix->b, prefix->n);
    if (at != 0) {
        return (uint64_t)(at - 1);
    }
    char err[300];
    uint64_t n;
    if (idx_key_count_committed(s, prefix, &n, err, sizeof err) != 0) {
        store_break(s, err);
        return 0;
    }
    return n;
}

/* Write prefix's count n (0: delete the record) into the pending batch. */
static void key_count_put(store_t *s, const key_buf_t *prefix, uint64_t n)
{
    if (n == 0) {
        store_del(s, prefix);
    } else {
        char v[8];
        be64_put(v, n);
        store_put(s, prefix, v, sizeof v);
    }
    map_put(&s->key_count_batch, prefix->b, prefix->n, (void *)(uintptr_t)(n + 1));
}

/* One 'K' entry more (delta +1) or less (-1) under (topic, key). */
void idx_key_count_add(store_t *s, const char *topic, size_t tlen, const char *key, size_t klen, int delta)
{
    if (!s->key_counts) {
        return;
    }
    key_buf_t prefix;
    key_key_prefix(&prefix, topic, tlen, key, klen);
    uint64_t n = key_count_get(s, &prefix);
    key_count_put(s, &prefix, delta > 0 ? n + 1 : n > 0 ? n - 1 : 0);
}

int idx_key_counts_open(store_t *s, char *err, size_t errlen)
{
    key_buf_t k;
    key_meta(&k, "keycounts");
    int found = store_has(s, &k, err, errlen);
    if (found != 0) {
        s->key_counts = found > 0;
        return found < 0 ? -1 : 0;
    }
    if (s->opt.no_upgrade) {
        return 0; /* a check of an older format reads it without them */
    }
    /* One walk of 'K' (committed: idx_open committed what it built), each
     * prefix's entries counted and its count written; a count record left by
     * an interrupted walk is written again. */
    leveldb_iterator_t *it = store_iter_range(s, KEY_KEY_INDEX);
    const char *key;
    size_t klen;
    key_buf_t cur;
    uint64_t n = 0;
    int rc = 0;
    cur.n = 0;
    for (; store_iter_in_range(it, KEY_KEY_INDEX, &key, &klen); leveldb_iter_next(it)) {
        key_index_parsed_t kp;
        if (key_index_parse(key, klen, &kp) != 0) {
            char d[KEY_DESCRIBE_BYTES];
            rc =
                err_set(err, errlen, "corrupt key index entry %s in %s", key_describe(key, klen, d, sizeof d), s->path);
            break;
        }
        if (!kp.is_entry) {
            continue; /* a count record */
        }
        size_t plen = kp.prefix_len;
        if (cur.n != plen || memcmp(cur.b, key, plen) != 0) {
            if (n > 0) {
                key_count_put(s, &cur, n);
            }
            memcpy(cur.b, key, plen);
            cur.n = plen;
            n = 0;
        }
        n++;
        if (s->pending >= 10000 && store_commit_durable(s, 0, err, errlen) != 0) {
            rc = -1;
            break;
        }
    }
    if (rc == 0) {
        rc = store_iter_error(it, "the key index", err, errlen);
    }
    leveldb_iter_destroy(it);
    if (rc != 0) {
        return -1;
    }
    if (n > 0) {
        key_count_put(s, &cur, n);
    }
    key_meta(&k, "keycounts");
    store_put(s, &k, "1", 1);
    if (store_commit_durable(s, 1, err, errlen) != 0) {
        return -1;
    }
    s->key_counts = 1;
    return 0;
}
