/*
 * levels/index.c — the message indexes (keys.h 'X', 'K', 'Y'): written in the
 * same batch as every move, so they are exact after any crash; built once on
 * a directory written before they existed (index_build.c); checked by
 * store_check (index_check.c). The key index's count records are
 * index_keycount.c's.
 *
 *   'X' id                       the message: where its own copy is — its SEND
 *                                journey on a level walked by `L` ('L' level
 *                                due seq) or the topic log ('T' seq), or
 *                                nowhere (0) once only groups hold it — with
 *                                its topic and key. It exists while the
 *                                message's own copy or a copy of a live group
 *                                incarnation exists, except on a journey of a
 *                                level served from its CQ (format 6,
 *                                design-commitlog.md 4a.5): there its CQ entry
 *                                and where-slot are its record (journey.c),
 *                                and its first 'X' is written at its arrival.
 *                                An 'L' place whose entry is gone is the log
 *                                entry of the same seq (idx_home_read reads it
 *                                so).
 *   'K' topic 0 klen key id      (empty) one per 'X' whose key is not empty:
 *                                FIND and DEDUP walk one (topic, key) prefix.
 *   'Y' id group 0 gen           where group incarnation gen holds a copy: a
 *                                lease ('I' deadline, and the topic-log seq it
 *                                was taken from or 0), a delayed retry ('L'
 *                                level due seq), retry-ready ('R' seq), the
 *                                DLQ ('D'). ACK finds a lease by it.
 *
 * Lifetimes. A message's own copy moves (hops, enters the log) by rewriting
 * 'X' — except when it enters the log under its level entry's seq, which the
 * arrival keeps whenever that comes after the log's tail (levels/level.c
 * store_topic_append): one record less per delivered message, and in due order,
 * the order the levels are served in, that is most arrivals; leaving the store (topic-log GC, REVOKE) drops 'X' and 'K' unless a
 * live group of its topic still holds a copy. A group copy moves by rewriting
 * its 'Y'; leaving (ACK, DLQ DROP, a retry of a deleted group dropped when
 * due, GROUP DEL) drops it, and 'X' / 'K' with it when nothing else holds the
 * message. "Nothing else" counts the live groups only: a deleted group's
 * delayed retries stay on their level (and keep their 'Y') until they fall due
 * and are dropped, but they are never delivered, so they keep no 'X' (GET
 * shows no deleted group either). Deciding "was that the last copy" is one Get
 * of the 'Y' key of each other group bound to the topic (the store links a
 * topic's groups in memory), then one of 'X' — never a walk of the 'Y' id
 * range, which would step over every copy deleted after it. A lease taken
 * from the topic log at a seq the GC has not reached needs neither when it
 * goes (idx_copy_gone's log_seq): the message's own copy is still in the log,
 * so 'X' stays whoever else holds a copy. A group with no retries, no DLQ
 * entries and no lease of the message (store_group_holds_none: lease.c keeps
 * its lease ids in memory) is not asked either. The Gets read
 * committed data; a 'Y' deleted earlier in the same pending batch is still
 * visible there, so those deletes are remembered (idx_dropped) until the
 * batch is written.
 *
 * SEND … DEDUP without a commit: a DEDUP SEND is a read of the key index,
 * and committing the pending batch before each one broke group commit (one
 * LevelDB write per DEDUP SEND). While the pending batch holds only SENDs
 * (store_t.pending_sends), committed data is every message but those, and
 * the keys sent in the batch are remembered in memory (sent_keys, cleared
 * with each written batch), so the DEDUP SEND reads the committed index and
 * that set and joins the batch. Any other operation in the batch (a move, an
 * ACK, a REVOKE: something committed data does not show yet) makes the next
 * DEDUP SEND commit first, as before.
 *
 * Cost: SEND writes 'K' with a key, and 'X' only on a level walked by `L`
 * (then each hop rewrites it); the arrival writes 'X'; each group move writes
 * its 'Y'. bench/hourglass_bench.c
 * measures it on SEND.
 *
 * Threading: one thread at a time (the broker's storage thread).
 */
#include "levels/store_internal.h"
#include "base/alloc.h"
#include "base/err.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define PLACE_BYTES   18 /* u8 tag, u8 level, u64 due, u64 seq */
#define JOURNEY_BYTES 16 /* u32 ordinal, u32 queue, u64 CQ index: idx_journey_t, after the key */

static void place_encode(const idx_place_t *p, char *out)
{
    out[0] = p->tag;
    out[1] = (char)p->level;
    be64_put(out + 2, p->due);
    be64_put(out + 10, p->seq);
}

int idx_place_decode(const char *v, size_t vlen, idx_place_t *p)
{
    if (vlen < PLACE_BYTES) {
        return -1;
    }
    p->tag = v[0];
    p->level = (unsigned char)v[1];
    p->due = be64_get(v + 2);
    p->seq = be64_get(v + 10);
    return 0;
}

/* ---- 'X' and 'K' --------------------------------------------------------------------- */

#define HOME_SMALL (PLACE_BYTES + 4 + MSG_MAX_NAME + 64 + JOURNEY_BYTES)

/* An 'X' value into small (or a new allocation when it is longer): its length. */
static size_t home_value(const idx_place_t *p, const char *topic, size_t tlen, const char *key, size_t klen,
                         const idx_journey_t *j, char *small, char **out)
{
    size_t n = PLACE_BYTES + 2 + tlen + 2 + klen + (j != NULL ? JOURNEY_BYTES : 0);
    char *v = n <= HOME_SMALL ? small : xmalloc(n);
    *out = v;
    place_encode(p, v);
    be16_put(v + PLACE_BYTES, (uint16_t)tlen);
    if (tlen > 0)
        memcpy(v + PLACE_BYTES + 2, topic, tlen);
    be16_put(v + PLACE_BYTES + 2 + tlen, (uint16_t)klen);
    if (klen > 0) /* a message without a key has key NULL */
        memcpy(v + PLACE_BYTES + 4 + tlen, key, klen);
    if (j != NULL) {
        char *at = v + PLACE_BYTES + 4 + tlen + klen;
        be32_put(at, j->ordinal);
        be32_put(at + 4, j->queue);
        be64_put(at + 8, j->cq_index);
    }
    return n;
}

static void home_write(store_t *s, uint64_t id, const idx_place_t *p, const char *topic, size_t tlen, const char *key,
                       size_t klen, const idx_journey_t *j)
{
    char small[HOME_SMALL], *v;
    size_t n = home_value(p, topic, tlen, key, klen, j, small, &v);
    key_buf_t k;
    key_msg_index(&k, id);
    store_put(s, &k, v, n);
    if (v != small) {
        free(v);
    }
}

void idx_home_batch_put(leveldb_writebatch_t *b, const msg_t *m, const idx_place_t *p)
{
    char small[HOME_SMALL], *v;
    size_t n = home_value(p, m->topic.ptr, m->topic.len, m->key.ptr, m->key.len, NULL, small, &v);
    key_buf_t k;
    key_msg_index(&k, m->id);
    leveldb_writebatch_put(b, k.b, k.n, v, n);
    if (v != small) {
        free(v);
    }
}

void idx_key_entry(key_buf_t *k, const char *topic, size_t tlen, const char *key, size_t klen, uint64_t id)
{
    key_key_prefix(k, topic, tlen, key, klen);
    key_u64(k, id);
}

void idx_home_put(store_t *s, const msg_t *m, const idx_place_t *p, int with_key, const idx_journey_t *j)
{
    home_write(s, m->id, p, m->topic.ptr, m->topic.len, m->key.ptr, m->key.len, j);
    if (with_key) {
        idx_key_put(s, m);
    }
}

void idx_key_put(store_t *s, const msg_t *m)
{
    if (m->key.len > 0) {
        key_buf_t k;
        idx_key_entry(&k, m->topic.ptr, m->topic.len, m->key.ptr, m->key.len, m->id);
        store_put(s, &k, "", 0);
        idx_key_count_add(s, m->topic.ptr, m->topic.len, m->key.ptr, m->key.len, +1);
    }
}

int idx_key_ids(store_t *s, const char *topic, size_t tlen, const char *key, size_t klen, int max, uint64_t **ids,
                int *n, char *err, size_t errlen)
{
    *ids = NULL;
    *n = 0;
    key_buf_t k;
    key_key_prefix(&k, topic, tlen, key, klen);
    uint64_t want = UINT64_MAX;
    if (s->key_counts) {
        /* committed data, as the walk below reads it (not key_count_batch) */
        if (idx_key_count_committed(s, &k, &want, err, errlen) != 0) {
            return -1;
        }
        if (map_get(&s->key_count_batch, k.b, k.n) == NULL) {
            /* the pending batch has not changed it: the SEND that follows a DEDUP lookup (idx_key_count_add) reads it
             * here instead of a second Get of the same record */
            map_put(&s->key_count_batch, k.b, k.n, (void *)(uintptr_t)(want + 1));
        }
        if (want == 0) {
            return 0; /* no message has the key: no seek at all */
        }
    }
    leveldb_iterator_t *it = store_iter_committed(s); /* many DEDUP SENDs between two commits share it */
    leveldb_iter_seek(it, k.b, k.n);
    const char *ik;
    size_t iklen;
    int cap = 0;
    while (*n < max && (uint64_t)*n < want && store_iter_in(it, k.b, k.n, &ik, &iklen)) {
        if (iklen == k.n + 8) { /* not the count record, nor a longer key that shares this prefix (the length
                                   comes first, so none can) */
            if (*n == cap) {
                cap = cap ? cap * 2 : 4;
                *ids = xrealloc(*ids, (size_t)cap * sizeof **ids);
            }
            (*ids)[(*n)++] = be64_get(ik + k.n);
        }
        if (*n < max && (uint64_t)*n < want) {
            leveldb_iter_next(it); /* not past the last entry: the next key's deleted entries would be walked */
        }
    }
    int rc = store_iter_error(it, "the key index", err, errlen);
    if (rc != 0) { /* a failed iterator is not kept */
        leveldb_iter_destroy(it);
        s->key_it = NULL;
        free(*ids);
        *ids = NULL;
        *n = 0;
    }
    return rc;
}

int idx_key_of(store_t *s, const char *topic, size_t tlen, uint64_t id, char **key, size_t *klen, char *err,
               size_t errlen)
{
    *key = NULL;
    *klen = 0;
    key_buf_t k;
    key_queue_prefix(&k, KEY_KEY_INDEX, topic, tlen);
    leveldb_iterator_t *it = store_iter_at(s, &k);
    const char *ik;
    size_t iklen;
    int rc = 0;
    for (; store_iter_in(it, k.b, k.n, &ik, &iklen); leveldb_iter_next(it)) {
        key_index_parsed_t kp;
        if (key_index_parse(ik, iklen, &kp) == 0 && kp.is_entry && kp.id == id) {
            *key = xmemdup(kp.key, kp.key_len);
            *klen = kp.key_len;
            break;
        }
    }
    rc = store_iter_error(it, "the key index", err, errlen);
    leveldb_iter_destroy(it);
    if (rc != 0) {
        free(*key);
        *key = NULL;
        *klen = 0;
        return -1;
    }
    return *key != NULL;
}

int idx_home_decode(const char *v, size_t vlen, idx_home_t *h)
{
    if (idx_place_decode(v, vlen, &h->place) != 0 || vlen < PLACE_BYTES + 4) {
        return -1;
    }
    h->topic_len = be16_get(v + PLACE_BYTES);
    if (vlen < PLACE_BYTES + 4 + h->topic_len) {
        return -1;
    }
    h->topic = v + PLACE_BYTES + 2;
    h->key_len = be16_get(v + PLACE_BYTES + 2 + h->topic_len);
    size_t base = PLACE_BYTES + 4 + h->topic_len + h->key_len;
    if (vlen != base && vlen != base + JOURNEY_BYTES) {
        return -1;
    }
    h->key = v + PLACE_BYTES + 4 + h->topic_len;
    h->has_journey = vlen == base + JOURNEY_BYTES;
    if (h->has_journey) {
        h->journey.ordinal = be32_get(v + base);
        h->journey.queue = be32_get(v + base + 4);
        h->journey.cq_index = be64_get(v + base + 8);
    }
    /* keys are built from both (a key_buf_t holds no longer ones) */
    return key_name_ok(h->topic, h->topic_len) && h->key_len <= MSG_MAX_KEY ? 0 : -1;
}

/* id's 'X' record as written: an 'L' place may be a level entry gone to the
 * log (idx_home_read resolves it). For the readers here that need no place
 * (whether there is one, its topic and key) or know it already (the check
 * walking that very entry): the Get of the level key would be wasted. */
int idx_home_read_raw(store_t *s, uint64_t id, char **buf, idx_home_t *h, char *err, size_t errlen)
{
    key_buf_t k;
    key_msg_index(&k, id);
    size_t vlen;
    int found = store_get(s, &k, buf, &vlen, err, errlen);
    if (found <= 0) {
        return found;
    }
    if (idx_home_decode(*buf, vlen, h) != 0) {
        leveldb_free(*buf);
        return err_set(err, errlen, "corrupt message index record of id %016llx in %s", (unsigned long long)id,
                       s->path);
    }
    return 1;
}

size_t idx_home_len_without_journey(const char *v, size_t vlen)
{
    idx_home_t h;
    return idx_home_decode(v, vlen, &h) == 0 && h.has_journey ? vlen - JOURNEY_BYTES : vlen;
}

int idx_journey_read(store_t *s, uint64_t id, idx_journey_t *j, char *err, size_t errlen)
{
    char *buf;
    idx_home_t h;
    int found = idx_home_read_raw(s, id, &buf, &h, err, errlen);
    if (found <= 0) {
        return found;
    }
    int has = h.has_journey;
    *j = h.journey;
    leveldb_free(buf);
    return has;
}

/* An 'L' place read from 'X' as where the copy is now: on that level, or in
 * its topic's log under the same seq (store_topic_append). 0, or -1 on a read error. */
int idx_home_resolve(store_t *s, idx_home_t *h, char *err, size_t errlen)
{
    if (h->place.tag != 'L') {
        return 0;
    }
    key_buf_t k;
    key_level(&k, h->place.level, h->place.due, h->place.seq);
    int on_level = store_has(s, &k, err, errlen);
    if (on_level < 0) {
        return -1;
    }
    if (!on_level) { /* a journey's entry (STORE_JOURNEY_SEQ | id) arrived as seq id */
        h->place = (idx_place_t){ 'T', 0, 0, h->place.seq & ~STORE_JOURNEY_SEQ };
    }
    return 0;
}

int idx_home_read(store_t *s, uint64_t id, char **buf, idx_home_t *h, char *err, size_t errlen)
{
    int found = idx_home_read_raw(s, id, buf, h, err, errlen);
    if (found > 0 && idx_home_resolve(s, h, err, errlen) != 0) {
        leveldb_free(*buf);
        return -1;
    }
    return found;
}

/* Drop id's 'K' entry, and its 'X' when it has one (with_x). */
static void home_drop_as(store_t *s, uint64_t id, const char *topic, size_t tlen, const char *key, size_t klen,
                         int with_x)
{
    key_buf_t k;
    if (with_x) {
        key_msg_index(&k, id);
        store_del(s, &k);
    }
    if (klen > 0) {
        idx_key_entry(&k, topic, tlen, key, klen, id);
        store_del(s, &k);
        idx_key_count_add(s, topic, tlen, key, klen, -1);
    }
}

/* Drop id's 'X' and its 'K' entry. */
static void home_drop(store_t *s, uint64_t id, const char *topic, size_t tlen, const char *key, size_t klen)
{
    home_drop_as(s, id, topic, tlen, key, klen, 1);
}

/* 1 when a live group of topic t (NULL: none) other than the one of `except`
 * (a 'Y' key, may be NULL) holds a copy of id: one Get of its 'Y' key per
 * group bound to t, in committed data and not deleted in the pending batch.
 * Gets, not a walk of the 'Y' id prefix: past id's own entries such a walk
 * steps over every entry deleted since (the ids acked after it), and with
 * delays that fall due out of id order those are most of the range. A
 * deleted group's delayed retry (its 'Y' stays until it falls due and is
 * dropped) is not asked about: it is never delivered. */
static int live_copy(store_t *s, const topic_state_t *t, uint64_t id, const key_buf_t *except, char *err, size_t errlen)
{
    for (const group_state_t *g = t != NULL ? t->first_group : NULL; g != NULL; g = g->next_in_topic) {
        if (store_group_holds_none(g, id)) {
            continue; /* no read: it has no retry, no DLQ entry and no lease of id */
        }
        key_buf_t k;
        key_copy_index(&k, id, g->name, g->len, g->gen);
        if (except != NULL && k.n == except->n && memcmp(k.b, except->b, k.n) == 0) {
            continue;
        }
        if (s->idx_dropped.used > 0 && map_get(&s->idx_dropped, k.b, k.n) != NULL) {
            continue;
        }
        int found = store_has(s, &k, err, errlen);
        if (found != 0) {
            return found; /* 1, or -1 on a read error */
        }
    }
    return 0;
}

/* idx_home_gone for m with an 'X' record (with_x) or without one. */
static int home_gone(store_t *s, const topic_state_t *t, const msg_t *m, int with_x, char *err, size_t errlen)
{
    int other = live_copy(s, t, m->id, NULL, err, errlen);
    if (other < 0) {
        return -1;
    }
    if (other) {
        idx_place_t none = { 0 };
        home_write(s, m->id, &none, m->topic.ptr, m->topic.len, m->key.ptr, m->key.len, NULL);
    } else {
        home_drop_as(s, m->id, m->topic.ptr, m->topic.len, m->key.ptr, m->key.len, with_x);
    }
    return 0;
}

int idx_home_gone(store_t *s, const topic_state_t *t, const msg_t *m, char *err, size_t errlen)
{
    return home_gone(s, t, m, 1, err, errlen);
}

int idx_home_gone_unindexed(store_t *s, const topic_state_t *t, const msg_t *m, char *err, size_t errlen)
{
    return home_gone(s, t, m, 0, err, errlen);
}

/* ---- 'Y' ---------------------------------------------------------------------------------- */

void idx_copy_put(store_t *s, uint64_t id, const char *group, size_t glen, uint64_t gen, const idx_place_t *p)
{
    key_buf_t k;
    key_copy_index(&k, id, group, glen, gen);
    char v[PLACE_BYTES];
    place_encode(p, v);
    store_put(s, &k, v, PLACE_BYTES);
    if (s->idx_dropped.used > 0) {
        map_del(&s->idx_dropped, k.b, k.n); /* deleted, then written again in this batch */
    }
}

int idx_copy_gone(store_t *s, const topic_state_t *t, uint64_t id, const char *group, size_t glen, uint64_t gen,
                  uint64_t log_seq, char *err, size_t errlen)
{
    key_buf_t y;
    key_copy_index(&y, id, group, glen, gen);
    int kept = log_seq != 0 && t != NULL && store_topic_log_holds(t, log_seq); /* by its own copy: no read */
    int other = kept ? 1 : live_copy(s, t, id, &y, err, errlen);
    if (other < 0) {
        return -1;
    }
    store_del(s, &y);
    map_put(&s->idx_dropped, y.b, y.n, s);
    if (other) {
        return 0;
    }
    char *buf;
    idx_home_t h;
    int found = idx_home_read_raw(s, id, &buf, &h, err, errlen); /* whether it has a place, not which */
    if (found < 0) {
        return -1;
    }
    if (found) {
        if (h.place.tag == 0) { /* nothing else holds it */
            home_drop(s, id, h.topic, h.topic_len, h.key, h.key_len);
        }
        leveldb_free(buf);
    }
    return 0;
}

void idx_sent_key_add(store_t *s, const msg_t *m)
{
    key_buf_t k;
    key_key_prefix(&k, m->topic.ptr, m->topic.len, m->key.ptr, m->key.len);
    if (map_get(&s->sent_keys, k.b, k.n) != NULL) {
        return;
    }
    if (s->nsent == s->capsent) {
        s->capsent = s->capsent ? s->capsent * 2 : 64;
        s->sent = xrealloc(s->sent, s->capsent * sizeof *s->sent);
    }
    s->sent[s->nsent] = (idx_sent_t){ m->id, m->due_ms };
    map_put(&s->sent_keys, k.b, k.n, (void *)(uintptr_t)++s->nsent);
}

int idx_sent_key_find(const store_t *s, const char *topic, size_t tlen, const char *key, size_t klen, uint64_t *id,
                      uint64_t *due_ms)
{
    if (s->nsent == 0) {
        return 0;
    }
    key_buf_t k;
    key_key_prefix(&k, topic, tlen, key, klen);
    uintptr_t at = (uintptr_t)map_get(&s->sent_keys, k.b, k.n);
    if (at == 0) {
        return 0;
    }
    *id = s->sent[at - 1].id;
    *due_ms = s->sent[at - 1].due_ms;
    return 1;
}

void idx_batch_written(store_t *s)
{
    if (s->idx_dropped.used > 0 || s->idx_dropped.tomb > 0) {
        map_free(&s->idx_dropped, NULL);
    }
    if (s->nsent > 0) {
        map_free(&s->sent_keys, NULL);
        s->nsent = 0;
    }
    if (s->key_count_batch.used > 0 || s->key_count_batch.tomb > 0) {
        map_free(&s->key_count_batch, NULL);
    }
    if (s->capsent > 4096) { /* a burst's array goes with its batch */
        free(s->sent);
        s->sent = NULL;
        s->capsent = 0;
    }
    s->pending_sends = 0;
}
