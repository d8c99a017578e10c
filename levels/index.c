/*
 * levels/index.c — the message indexes (keys.h 'X', 'K', 'Y'): written in the
 * same batch as every move, so they are exact after any crash; built once on
 * a directory written before they existed; checked by store_check.
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

static void key_entry(key_buf_t *k, const char *topic, size_t tlen, const char *key, size_t klen, uint64_t id)
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

/* ---- the key index's count records ---------------------------------------------------- */

/* The committed count record of prefix ('K' topic 0 klen key: keys.h) into
 * *n (0 when there is none): 0, or -1 on a read error (err set). */
static int key_count_committed(store_t *s, const key_buf_t *prefix, uint64_t *n, char *err, size_t errlen)
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
    if (key_count_committed(s, prefix, &n, err, sizeof err) != 0) {
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
static void key_count_add(store_t *s, const char *topic, size_t tlen, const char *key, size_t klen, int delta)
{
    if (!s->key_counts) {
        return;
    }
    key_buf_t prefix;
    key_key_prefix(&prefix, topic, tlen, key, klen);
    uint64_t n = key_count_get(s, &prefix);
    key_count_put(s, &prefix, delta > 0 ? n + 1 : n > 0 ? n - 1 : 0);
}

void idx_key_put(store_t *s, const msg_t *m)
{
    if (m->key.len > 0) {
        key_buf_t k;
        key_entry(&k, m->topic.ptr, m->topic.len, m->key.ptr, m->key.len, m->id);
        store_put(s, &k, "", 0);
        key_count_add(s, m->topic.ptr, m->topic.len, m->key.ptr, m->key.len, +1);
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
        if (key_count_committed(s, &k, &want, err, errlen) != 0) {
            return -1;
        }
        if (map_get(&s->key_count_batch, k.b, k.n) == NULL) {
            /* the pending batch has not changed it: the SEND that follows a DEDUP lookup (key_count_add) reads it
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

static int home_decode(const char *v, size_t vlen, idx_home_t *h)
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
static int home_read_raw(store_t *s, uint64_t id, char **buf, idx_home_t *h, char *err, size_t errlen)
{
    key_buf_t k;
    key_msg_index(&k, id);
    size_t vlen;
    int found = store_get(s, &k, buf, &vlen, err, errlen);
    if (found <= 0) {
        return found;
    }
    if (home_decode(*buf, vlen, h) != 0) {
        leveldb_free(*buf);
        return err_set(err, errlen, "corrupt message index record of id %016llx in %s", (unsigned long long)id,
                       s->path);
    }
    return 1;
}

size_t idx_home_len_without_journey(const char *v, size_t vlen)
{
    idx_home_t h;
    return home_decode(v, vlen, &h) == 0 && h.has_journey ? vlen - JOURNEY_BYTES : vlen;
}

int idx_journey_read(store_t *s, uint64_t id, idx_journey_t *j, char *err, size_t errlen)
{
    char *buf;
    idx_home_t h;
    int found = home_read_raw(s, id, &buf, &h, err, errlen);
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
static int home_resolve(store_t *s, idx_home_t *h, char *err, size_t errlen)
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
    int found = home_read_raw(s, id, buf, h, err, errlen);
    if (found > 0 && home_resolve(s, h, err, errlen) != 0) {
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
        key_entry(&k, topic, tlen, key, klen, id);
        store_del(s, &k);
        key_count_add(s, topic, tlen, key, klen, -1);
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

/* 1 when any 'Y' entry of id is in committed data, a deleted group's
 * included (store_check: a placeless 'X' names some copy). */
static int any_copy(store_t *s, uint64_t id, char *err, size_t errlen)
{
    key_buf_t k;
    key_msg_index(&k, id);
    k.b[0] = (char)KEY_COPY_INDEX;
    leveldb_iterator_t *it = store_iter_at(s, &k);
    const char *key;
    size_t klen;
    int found = 0;
    if (store_iter_in(it, k.b, k.n, &key, &klen)) {
        found = 1;
    }
    int rc = store_iter_error(it, "the copy index", err, errlen);
    leveldb_iter_destroy(it);
    return rc != 0 ? -1 : found;
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
    int found = home_read_raw(s, id, &buf, &h, err, errlen); /* whether it has a place, not which */
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

/* ---- building the indexes of an older directory --------------------------------------- */

/* The place of a scanned entry. */
static idx_place_t entry_place(const store_entry_t *e)
{
    idx_place_t p = { (char)e->range, 0, 0, 0 };
    if (e->range == STORE_LEVEL) {
        p.level = e->level;
        p.due = e->due_ms;
    }
    if (e->range == STORE_LEASE) {
        p.due = e->deadline_ms; /* the topic-log seq it was taken from is not in the entry */
    }
    if (e->range == STORE_LEVEL || e->range == STORE_TOPIC || e->range == STORE_RETRY) {
        p.seq = e->seq;
    }
    return p;
}

/* 1 when the entry is a group's copy (a retry on a level, retry-ready, a
 * lease, the DLQ), 0 when it is the message's own copy. */
static int entry_is_copy(const store_entry_t *e)
{
    return e->range == STORE_LEVEL ? e->m->dest == MSG_DEST_GROUP : e->range != STORE_TOPIC;
}

typedef struct build_ctx {
    store_t *s;
    int copies; /* pass 2: group copies */
    char *err;
    size_t errlen;
    int failed;
} build_ctx_t;

/* 1 when the scanned entry e is a message of its topic's CQ whose record is
 * in the log (no 'X': design-commitlog.md 4b), 0 when not (a 'T' key), -1
 * with err. */
static int entry_in_topic_cq(build_ctx_t *b, const store_entry_t *e)
{
    topic_state_t *t = e->range == STORE_TOPIC ? map_get(&b->s->topics, e->m->topic.ptr, e->m->topic.len) : NULL;
    if (t == NULL || !store_topic_seq_on_cq(t, e->seq)) {
        return 0;
    }
    key_buf_t k;
    key_queue(&k, KEY_TOPIC_LOG, t->name, t->len, e->seq);
    int in_t = store_has(b->s, &k, b->err, b->errlen);
    return in_t < 0 ? -1 : !in_t;
}

static int build_entry(void *ctx, const store_entry_t *e)
{
    build_ctx_t *b = ctx;
    const msg_t *m = e->m;
    idx_place_t p = entry_place(e);
    if (!b->copies) {
        int in_cq = entry_in_topic_cq(b, e);
        if (in_cq < 0) {
            b->failed = 1;
            return 1;
        }
        if ((e->range == STORE_LEVEL && (e->seq & STORE_JOURNEY_SEQ) && !b->s->levels[e->level].on_l) || in_cq) {
            idx_key_put(b->s, m); /* a journey only its CQ holds (journey.c), a topic CQ's message: no 'X' */
        } else if (!entry_is_copy(e)) {
            idx_home_put(b->s, m, &p, 1, NULL);
        }
    } else if (entry_is_copy(e)) {
        idx_copy_put(b->s, m->id, m->group.ptr, m->group.len, m->group_gen, &p);
        char *buf;
        idx_home_t h;
        int found = home_read_raw(b->s, m->id, &buf, &h, b->err, b->errlen);
        if (found < 0) {
            b->failed = 1;
            return 1;
        }
        if (found) {
            leveldb_free(buf);
        } else {
            idx_place_t none = { 0 };
            idx_home_put(b->s, m, &none, 1, NULL);
        }
    }
    if (b->s->pending >= 10000 && store_commit_durable(b->s, 0, b->err, b->errlen) != 0) {
        b->failed = 1;
        return 1;
    }
    return 0;
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

/* store_journeys_each's callback for idx_open: the journey counted live in its segment. */
static int count_journey(void *ctx, const msg_t *m, const store_journey_t *at, char *err, size_t errlen)
{
    (void)err;
    (void)errlen;
    (void)at;
    store_t *s = ctx;
    segcount_add(s, m->id, +1);
    return 0;
}

/* topic_cqs_each's callback for idx_open: a topic CQ's message counted live in its segment. */
static int count_topic_cq(void *ctx, topic_state_t *t, uint64_t index, const msg_t *m, char *err, size_t errlen)
{
    (void)t;
    (void)index;
    (void)err;
    (void)errlen;
    segcount_add(ctx, m->id, +1);
    return 0;
}

int idx_open(store_t *s, char *err, size_t errlen)
{
    key_buf_t k;
    key_meta(&k, "index");
    int found = store_has(s, &k, err, errlen);
    if (found != 0) {
        return found < 0 ? -1 : 0;
    }
    /* The index rebuilt keeps no journey in 'X' (design-commitlog.md 4a.3): on a level walked by `L` no message
       counts as live in its log segment any more, and the consume queues' entries are left behind (their 'L'
       entries are what they are read from); a journey only its CQ holds (4a.5) keeps its entry and is counted
       again. */
    segcount_drop_all(s);
    store_journeys_abandon(s);
    if (store_journeys_each(s, count_journey, s, err, errlen) != 0 ||
        topic_cqs_each(s, count_topic_cq, s, err, errlen) != 0) {
        return -1;
    }
    /* Homes first and committed, so pass 2 sees which messages have one. */
    build_ctx_t b = { s, 0, err, errlen, 0 };
    for (b.copies = 0; b.copies <= 1; b.copies++) {
        if (store_scan(s, build_entry, &b, err, errlen) != 0 || b.failed) {
            return -1;
        }
        if (store_commit_durable(s, 0, err, errlen) != 0) {
            return -1;
        }
    }
    key_meta(&k, "index");
    store_put(s, &k, "1", 1);
    return store_commit(s, err, errlen);
}

/* ---- checking ------------------------------------------------------------------------------ */

static int same_place(const idx_place_t *a, const idx_place_t *b)
{
    if (a->tag != b->tag) {
        return 0;
    }
    if (a->tag == 'D') {
        return 1;
    }
    if (a->tag == 'I') { /* the seq is checked against 'X' (store_check) */
        return a->due == b->due;
    }
    return a->level == b->level && a->due == b->due && a->seq == b->seq;
}

static int check_fail(idx_check_t *c, const char *what, const msg_t *m, const store_entry_t *e)
{
    err_set(c->err, c->errlen, "message %016llx in range '%c'%s%.*s: %s", (unsigned long long)m->id, (char)e->range,
            m->group.len ? " of group " : "", (int)m->group.len, m->group.ptr ? m->group.ptr : "", what);
    return -1;
}

/* A group copy m (its copy index place got) of a message with no 'X': 1 when
 * the message is in its topic's CQ (topic_cq.c) and a lease's seq (got 'I'
 * with a seq) names its entry, 2 when it is there but the seq names another,
 * 0 when it is not there, -1 with err. */
static int copy_of_cq_message(idx_check_t *c, const msg_t *m, const idx_place_t *got)
{
    clog_reader_t rd = { 0 };
    msg_t cm;
    topic_state_t *t;
    idx_journey_t j;
    int in = topic_cq_find(c->s, m->id, &rd, &cm, &t, &j, c->err, c->errlen);
    clog_reader_free(&rd);
    if (in <= 0) {
        return in;
    }
    return got->tag != 'I' || got->seq == 0 || got->seq == store_topic_cq_seq(t, j.cq_index) ? 1 : 2;
}

int idx_check_entry(idx_check_t *c, const store_entry_t *e)
{
    const msg_t *m = e->m;
    idx_place_t want = entry_place(e);
    key_buf_t k;
    char *v;
    size_t vlen;
    if (!entry_is_copy(e)) {
        idx_home_t h;
        int found = home_read_raw(c->s, m->id, &v, &h, c->err, c->errlen);
        if (found < 0) {
            return -1;
        }
        if (!found) {
            return check_fail(c, "no message index record", m, e);
        }
        /* an entry on a level is where an 'L' place says as written; only a
         * log entry named by an 'L' place asks whether the level entry is gone */
        if (want.tag == 'T' && home_resolve(c->s, &h, c->err, c->errlen) != 0) {
            leveldb_free(v);
            return -1;
        }
        int ok = same_place(&h.place, &want) && h.topic_len == m->topic.len &&
                 memcmp(h.topic, m->topic.ptr, h.topic_len) == 0 && h.key_len == m->key.len &&
                 memcmp(h.key, m->key.ptr, h.key_len) == 0;
        leveldb_free(v);
        if (!ok) {
            return check_fail(c, "its message index record names another place, topic or key", m, e);
        }
        c->homes++;
        return 0;
    }
    key_copy_index(&k, m->id, m->group.ptr, m->group.len, m->group_gen);
    int found = store_get(c->s, &k, &v, &vlen, c->err, c->errlen);
    if (found < 0) {
        return -1;
    }
    if (!found) {
        return check_fail(c, "no copy index entry", m, e);
    }
    idx_place_t got;
    int ok = idx_place_decode(v, vlen, &got) == 0 && same_place(&got, &want);
    leveldb_free(v);
    if (!ok) {
        return check_fail(c, "its copy index entry names another place", m, e);
    }
    idx_home_t h;
    found = home_read_raw(c->s, m->id, &v, &h, c->err, c->errlen);
    if (found < 0) {
        return -1;
    }
    if (found && got.tag == 'I' && got.seq != 0 && home_resolve(c->s, &h, c->err, c->errlen) != 0) {
        leveldb_free(v);
        return -1;
    }
    /* a lease taken from the topic log at got.seq: the message's own copy is
     * that entry until the GC collects it, then nowhere, so ACK may trust an
     * entry the GC has not reached (store_topic_log_holds) */
    int seq_ok =
        !found || got.tag != 'I' || got.seq == 0 || (h.place.tag == 'T' && h.place.seq == got.seq) || h.place.tag == 0;
    if (found) {
        leveldb_free(v);
    }
    const group_state_t *g = store_group_get(c->s, m->group.ptr, m->group.len);
    if (!found && g != NULL && g->gen == m->group_gen) { /* a deleted group's retry keeps no 'X' */
        int in_cq = copy_of_cq_message(c, m, &got);      /* its own copy in its topic's CQ: no 'X' either */
        if (in_cq < 0) {
            return -1;
        }
        if (in_cq == 0) {
            return check_fail(c, "no message index record", m, e);
        }
        seq_ok = in_cq == 1;
    }
    if (!seq_ok) {
        return check_fail(c, "its lease was taken from a topic-log seq its message index record does not name", m, e);
    }
    c->copies++;
    return 0;
}

/* An 'X' record: one with a place is counted (idx_check_end matches the
 * count against the copies seen), a placeless one needs a 'Y'; one with a
 * key needs its 'K'. */
static int check_home_record(idx_check_t *c, const char *key, size_t klen, const char *v, size_t vlen)
{
    idx_home_t h;
    if (klen != 9 || home_decode(v, vlen, &h) != 0) {
        char d[KEY_DESCRIBE_BYTES];
        return err_set(c->err, c->errlen, "corrupt message index record %s (%zu-byte value)",
                       key_describe(key, klen, d, sizeof d), vlen);
    }
    uint64_t id = be64_get(key + 1);
    if (h.place.tag != 0) {
        c->home_records++;
    } else {
        int other = any_copy(c->s, id, c->err, c->errlen);
        if (other <= 0) {
            return other < 0 ? -1
                             : err_set(c->err, c->errlen, "message index record %016llx names no copy at all",
                                       (unsigned long long)id);
        }
    }
    if (h.key_len == 0) {
        return 0;
    }
    key_buf_t kk;
    key_entry(&kk, h.topic, h.topic_len, h.key, h.key_len, id);
    char *kv;
    size_t kvlen;
    int found = store_get(c->s, &kk, &kv, &kvlen, c->err, c->errlen);
    if (found < 0) {
        return -1;
    }
    if (!found) {
        return err_set(c->err, c->errlen, "message %016llx (key %.*s) has no key index entry", (unsigned long long)id,
                       (int)h.key_len, h.key);
    }
    leveldb_free(kv);
    return 0;
}

/* The count record walked last against the entries seen under it. */
static int key_count_settle(idx_check_t *c)
{
    if (c->kprefix_len > 0 && c->kseen != c->kcount) {
        const char *zero = memchr(c->kprefix + 1, 0, c->kprefix_len - 1);
        return err_set(c->err, c->errlen, "key count record of key %.*s says %llu messages, the key index holds %llu",
                       (int)(c->kprefix_len - (size_t)(zero - c->kprefix) - 3), zero + 3, (unsigned long long)c->kcount,
                       (unsigned long long)c->kseen);
    }
    c->kprefix_len = 0;
    return 0;
}

/* A 'K' record, walked in key order: a count record (with key_counts) and
 * then the entries of its (topic, key), each naming an 'X' of that topic and
 * key, as many as it says. */
static int check_key_record(idx_check_t *c, const char *key, size_t klen, const char *v, size_t vlen)
{
    key_index_parsed_t kp;
    if (key_index_parse(key, klen, &kp) != 0) {
        char d[KEY_DESCRIBE_BYTES];
        return err_set(c->err, c->errlen, "corrupt key index entry %s", key_describe(key, klen, d, sizeof d));
    }
    size_t plen = kp.prefix_len;
    if (!kp.is_entry) {
        if (!c->s->key_counts || vlen != 8 || be64_get(v) == 0) {
            char d[KEY_DESCRIBE_BYTES];
            return err_set(c->err, c->errlen, "corrupt key count record %s (%zu-byte value)",
                           key_describe(key, klen, d, sizeof d), vlen);
        }
        if (key_count_settle(c) != 0) {
            return -1;
        }
        memcpy(c->kprefix, key, plen);
        c->kprefix_len = plen;
        c->kcount = be64_get(v);
        c->kseen = 0;
        return 0;
    }
    uint64_t id = kp.id;
    if (c->s->key_counts) {
        if (c->kprefix_len != plen || memcmp(c->kprefix, key, plen) != 0) {
            if (key_count_settle(c) != 0) {
                return -1;
            }
            return err_set(c->err, c->errlen, "key index entry of %016llx (key %.*s) has no key count record",
                           (unsigned long long)id, (int)kp.key_len, kp.key);
        }
        c->kseen++;
    }
    char *hv;
    idx_home_t h;
    int found = home_read_raw(c->s, id, &hv, &h, c->err, c->errlen);
    if (found < 0) {
        return -1;
    }
    int ok = found && h.topic_len == kp.topic_len && memcmp(h.topic, kp.topic, kp.topic_len) == 0 &&
             h.key_len == kp.key_len && memcmp(h.key, kp.key, kp.key_len) == 0;
    if (found) {
        leveldb_free(hv);
    } else { /* on a journey only its CQ holds, maybe (no 'X' until it arrives): asked at the end */
        map_put(&c->unhomed, key, klen, (void *)1);
        return 0;
    }
    if (!ok) {
        return err_set(c->err, c->errlen, "key index entry of %016llx names no message of that topic and key",
                       (unsigned long long)id);
    }
    return 0;
}

int idx_check_record(idx_check_t *c, const char *key, size_t klen, const char *v, size_t vlen)
{
    switch (key[0]) {
    case KEY_MSG_INDEX:
        return check_home_record(c, key, klen, v, vlen);
    case KEY_COPY_INDEX: {
        uint64_t id, gen;
        const char *group;
        size_t glen;
        if (key_copy_index_parse(key, klen, &id, &group, &glen, &gen) != 0) {
            char d[KEY_DESCRIBE_BYTES];
            return err_set(c->err, c->errlen, "corrupt copy index key %s", key_describe(key, klen, d, sizeof d));
        }
        c->copy_records++;
        return 0;
    }
    case KEY_KEY_INDEX:
        return check_key_record(c, key, klen, v, vlen);
    default:
        return 0;
    }
}

/* A 'K' entry (key) whose id has no 'X': the id must be on a journey only
 * its CQ holds (journey.c), or in its topic's CQ (topic_cq.c), with that
 * topic and key in its record. */
static int check_unhomed_key(idx_check_t *c, const char *key, size_t klen)
{
    key_index_parsed_t kp;
    if (key_index_parse(key, klen, &kp) != 0) {
        return err_set(c->err, c->errlen, "corrupt key index entry");
    }
    clog_reader_t rd = { 0 };
    msg_t m;
    store_journey_t at;
    int on = store_journey_find(c->s, kp.id, &rd, &m, &at, c->err, c->errlen);
    int ok = on > 0 && !at.on_l;
    if (on == 0) { /* in its topic's CQ (topic_cq.c): no 'X' either */
        topic_state_t *t;
        idx_journey_t j;
        on = topic_cq_find(c->s, kp.id, &rd, &m, &t, &j, c->err, c->errlen);
        ok = on > 0;
    }
    ok = ok && m.topic.len == kp.topic_len && memcmp(m.topic.ptr, kp.topic, kp.topic_len) == 0 &&
         m.key.len == kp.key_len && memcmp(m.key.ptr, kp.key, kp.key_len) == 0;
    clog_reader_free(&rd);
    if (on < 0) {
        return err_prefix(c->err, c->errlen, "key index entry of %016llx: ", (unsigned long long)kp.id);
    }
    return ok ? 0
              : err_set(c->err, c->errlen, "key index entry of %016llx names no message of that topic and key",
                        (unsigned long long)kp.id);
}

void idx_check_free(idx_check_t *c)
{
    map_free(&c->unhomed, NULL);
}

int idx_check_end(idx_check_t *c)
{
    if (key_count_settle(c) != 0) {
        return -1;
    }
    map_iter_t it = { 0 };
    const char *key;
    size_t klen;
    void *v;
    while (map_next(&c->unhomed, &it, &key, &klen, &v)) {
        if (check_unhomed_key(c, key, klen) != 0) {
            return -1;
        }
    }
    if (c->home_records != c->homes) {
        return err_set(c->err, c->errlen, "message index holds %llu placed records but the store holds %llu own copies",
                       (unsigned long long)c->home_records, (unsigned long long)c->homes);
    }
    if (c->copy_records != c->copies) {
        return err_set(c->err, c->errlen, "copy index holds %llu entries but the store holds %llu group copies",
                       (unsigned long long)c->copy_records, (unsigned long long)c->copies);
    }
    return 0;
}
