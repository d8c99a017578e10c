/*
 * levels/store_load.c — the in-memory state read from the records at open,
 * for store_open (store.c): the level records, the topic records and the
 * group records (a group being deleted goes on being deleted).
 *
 * Invariants: it needs no scan: a few small ranges are read, queue heads come
 * from the level records and are found later with one seek each. A record
 * that does not decode refuses the open (the error names the record and the
 * directory); nothing is written here.
 *
 * Threading: one thread at a time (the broker's storage thread).
 */
#include "levels/store_internal.h"
#include "base/alloc.h"
#include "base/err.h"

/* ---- loading the in-memory state -------------------------------------------------- */

/* Level records carry the exact head key and the monotone enqueue clock, written
 * in every batch that changes them (a head changes only with the depth), so open
 * reads 18 small records and never seeks a level range: a seek from the range
 * start would walk every popped head not yet compacted. */
int store_load_levels(store_t *s, char *err, size_t errlen)
{
    for (int l = 1; l <= s->opt.levels.count; l++) {
        level_state_t *ls = &s->levels[l];
        key_buf_t k;
        char *v;
        size_t vlen;
        key_level_record(&k, l);
        int found = store_get(s, &k, &v, &vlen, err, errlen);
        if (found < 0) {
            return -1;
        }
        if (!found) {
            continue;
        }
        record_level_t r;
        int bad = record_level_decode(v, vlen, &r);
        leveldb_free(v);
        if (bad) {
            return err_set(err, errlen, "corrupt record of level %d in %s (%zu bytes)", l, s->path, vlen);
        }
        ls->depth = r.depth;
        ls->on_l = (r.flags & RECORD_LEVEL_ON_L) != 0;
        ls->retries = ls->on_l ? 0 : r.retries;
        ls->has_head = ls->on_l ? r.depth > 0 : r.retries > 0;
        ls->head_due = r.head_due;
        ls->head_seq = r.head_seq;
        ls->last_enqueue_ms = r.last_enqueue_ms;
        ls->cq_head = r.cq_head;
        ls->cq_tail = r.cq_tail;
        /* Pops since the last compaction are not persisted: assume one is owed,
         * so the first store_maintain after open compacts below the head. */
        ls->pops_since_compact = STORE_COMPACT_AFTER_POPS;
    }
    return 0;
}

int store_load_topics(store_t *s, char *err, size_t errlen)
{
    leveldb_iterator_t *it = store_iter_range(s, KEY_TOPIC_RECORD);
    const char *key;
    size_t klen;
    for (; store_iter_in_range(it, KEY_TOPIC_RECORD, &key, &klen); leveldb_iter_next(it)) {
        size_t vlen;
        const char *v = leveldb_iter_value(it, &vlen);
        record_topic_t r;
        const char *name;
        size_t len;
        if (key_record_parse(key, klen, &name, &len) != 0 || record_topic_decode(v, vlen, &r) != 0) {
            char d[KEY_DESCRIBE_BYTES];
            err_set(err, errlen, "corrupt topic record %s in %s", key_describe(key, klen, d, sizeof d), s->path);
            leveldb_iter_destroy(it);
            return -1;
        }
        topic_state_t *t = store_topic_make(s, name, len); /* its CQ as its record says */
        t->appended = r.appended;
        t->removed = r.removed;
        t->delayed = r.delayed;
        t->queue = r.queue; /* its CQ: topic_cq_load */
        t->cq_seq_base = r.cq_seq_base;
        t->cq_head = r.cq_head;
        t->cq_tail = r.cq_tail;
        t->dirty = 0;
    }
    s->n_dirty_topics = 0;
    int rc = store_iter_error(it, "topic records", err, errlen);
    leveldb_iter_destroy(it);
    return rc;
}

int store_load_groups(store_t *s, char *err, size_t errlen)
{
    leveldb_iterator_t *it = store_iter_range(s, KEY_GROUP_RECORD);
    const char *key;
    size_t klen;
    int rc = 0;
    for (; store_iter_in_range(it, KEY_GROUP_RECORD, &key, &klen); leveldb_iter_next(it)) {
        size_t vlen;
        const char *v = leveldb_iter_value(it, &vlen);
        record_group_t r;
        const char *name;
        size_t len;
        int bad = key_record_parse(key, klen, &name, &len) != 0 ? -1 : record_group_decode(v, vlen, &r);
        if (bad) {
            char d[KEY_DESCRIBE_BYTES];
            rc = err_set(err, errlen,
                         bad == -2 ? "corrupt group record %s in %s (topic name)" : "corrupt group record %s in %s",
                         key_describe(key, klen, d, sizeof d), s->path);
            break;
        }
        group_state_t *g = xcalloc(1, sizeof *g);
        g->max_reconsume = r.max_reconsume;
        g->gen = r.gen;
        g->cursor = r.cursor;
        g->position = r.position;
        g->retry_ready = r.retry_ready;
        g->retry_delayed = r.retry_delayed;
        g->inflight = r.inflight;
        g->leases_untracked = r.inflight; /* which ids they are is not read at open */
        g->dlq = r.dlq;
        g->created_ms = r.created_ms;
        g->topic = store_topic_make(s, r.topic, r.topic_len);
        g->name = xstrndup(name, len);
        g->len = len;
        if (r.flags & RECORD_GROUP_DELETING) {
            group_delete_resume(s, g); /* out of sight, as before the restart */
        } else {
            store_topic_add_group(g);
            map_put(&s->groups, g->name, g->len, g);
        }
    }
    /* A topic created here only in memory (group with an empty topic log) is
     * written with the next commit; keep it dirty. */
    if (rc == 0) {
        rc = store_iter_error(it, "group records", err, errlen);
    }
    leveldb_iter_destroy(it);
    return rc;
}
