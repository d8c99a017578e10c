/*
 * levels/index_check.c — store_check's part for the indexes (index.c): every
 * copy of every message is indexed where it is (idx_check_entry), and every
 * index record names a copy (idx_check_record); idx_check_end matches the
 * counts and asks about the 'K' entries of messages without an 'X' (a
 * journey only its CQ holds, a topic CQ's message: journey.c, topic_cq.c).
 * The index is keyed by id, not in queue order, so the entries are matched
 * by lookups, not by a second walk.
 *
 * Threading: one thread at a time (store_check's caller's).
 */
#include "levels/store_internal.h"
#include "base/err.h"

#include <string.h>

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
    idx_place_t want = idx_entry_place(e);
    key_buf_t k;
    char *v;
    size_t vlen;
    if (!idx_entry_is_copy(e)) {
        idx_home_t h;
        int found = idx_home_read_raw(c->s, m->id, &v, &h, c->err, c->errlen);
        if (found < 0) {
            return -1;
        }
        if (!found) {
            return check_fail(c, "no message index record", m, e);
        }
        /* an entry on a level is where an 'L' place says as written; only a
         * log entry named by an 'L' place asks whether the level entry is gone */
        if (want.tag == 'T' && idx_home_resolve(c->s, &h, c->err, c->errlen) != 0) {
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
    found = idx_home_read_raw(c->s, m->id, &v, &h, c->err, c->errlen);
    if (found < 0) {
        return -1;
    }
    if (found && got.tag == 'I' && got.seq != 0 && idx_home_resolve(c->s, &h, c->err, c->errlen) != 0) {
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
    if (klen != 9 || idx_home_decode(v, vlen, &h) != 0) {
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
    idx_key_entry(&kk, h.topic, h.topic_len, h.key, h.key_len, id);
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
    int found = idx_home_read_raw(c->s, id, &hv, &h, c->err, c->errlen);
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
