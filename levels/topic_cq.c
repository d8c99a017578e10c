/*
 * levels/topic_cq.c — the topic log on topic consume queues
 * (design-commitlog.md 4b): a topic's arrivals (a SEND without delay, a
 * journey's last hop) are an entry (log offset, arrival stamp) of its topic
 * CQ and a where-slot naming it, not a 'T' copy of the message and its 'X'.
 *
 * Seqs: entry i of topic t is topic-log seq STORE_TOPIC_CQ_SEQ | (base + i),
 * above every 'T' key (format 6's, or a copy's), so a group cursor walks the
 * 'T' range first and then the CQ, and every seq the store keeps (cursors,
 * positions, held leases, 'Y' lease seqs, the GC's head hint) means what it
 * did. The CQ is made with the topic (an older one's at its first append): its queue number drawn
 * from 'M' "topic-queue-next" (from STORE_TOPIC_QUEUE_GROWING up, whose files
 * grow; a format-7 store's topics keep their lower numbers and small files:
 * levels/cq.h's layouts), 'M' "topicq-<queue>" naming the topic (the
 * redo's bounds of a queue it replays are read through it), its seq base
 * past what the topic's log held (log_next_min).
 *
 * An entry is live when the record at its offset has a where-slot naming
 * (queue, index) back and not revoked. A message with no record in the log
 * (a format-5 journey on a level walked by `L`) is appended with its id as
 * the entry's offset — no record of the log lies there — and its 'T' key at
 * the entry's seq holds it (the caller writes it): such an entry is live
 * while that key is. So is one whose message has a record but no journey
 * (dropped by an index rebuild): its slot names its old place. An entry whose
 * slot does not vouch for it is judged by its 'T' key (one point read: a
 * revoked entry's).
 *
 * Threading: the store's owner thread.
 */
#include "levels/store_internal.h"
#include "base/err.h"
#include "levels/cq.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* 'M' "topicq-<queue>". */
static void key_topic_queue(key_buf_t *k, uint32_t queue)
{
    char name[32];
    snprintf(name, sizeof name, "topicq-%08" PRIx32, queue);
    key_meta(k, name);
}

topic_state_t *topic_cq_topic(store_t *s, uint32_t q)
{
    if (q < STORE_TOPIC_QUEUE_FIRST) {
        return NULL;
    }
    return map_get(&s->topic_queues, (const char *)&q, sizeof q);
}

void topic_cq_make(store_t *s, topic_state_t *t)
{
    /* The layout the directory's marker promises: growing files from format 8, past a format-7 store's
       numbers; a check that reads a format-7 directory as it is (opt.no_upgrade) keeps to format 7's. */
    uint32_t floor = s->format_marked >= STORE_FORMAT_GROWING_CQ ? STORE_TOPIC_QUEUE_GROWING : STORE_TOPIC_QUEUE_FIRST;
    if (s->topic_queue_next < floor) {
        s->topic_queue_next = floor;
    }
    t->queue = s->topic_queue_next++;
    uint64_t past = t->log_next_min > STORE_TOPIC_CQ_SEQ ? t->log_next_min & ~STORE_TOPIC_CQ_SEQ : 0; /* a copy's */
    t->cq_seq_base = past;
    t->cq_head = t->cq_tail = 0;
    map_put(&s->topic_queues, (const char *)&t->queue, sizeof t->queue, t);
    key_buf_t k;
    char v[4];
    key_meta(&k, STORE_META_TOPIC_QUEUE_NEXT);
    be32_put(v, s->topic_queue_next);
    store_put(s, &k, v, sizeof v);
    key_topic_queue(&k, t->queue);
    store_put(s, &k, t->name, t->len);
    /* Its first file now, in the job that makes the topic, not in the apply of its batch, where every topic a
       batch made cost two syncs before any later job ran (design-commitlog.md 4b, open item 9). A failure loses
       nothing: the first append makes the file and reports it. */
    char why[256];
    (void)cq_make_first_file(s->path, t->queue, why, sizeof why);
}

uint64_t topic_cq_append(store_t *s, topic_state_t *t, uint64_t offset, uint64_t stamp_ms)
{
    if (t->queue == 0) {
        topic_cq_make(s, t);
    }
    uint64_t index = t->cq_tail++;
    store_log_cq_append(s, t->queue, index, offset, stamp_ms);
    uint64_t seq = store_topic_cq_seq(t, index);
    t->log_next_min = seq + 1;
    return seq;
}

/* m, read from its record, as the topic log holds it: arrived at stamp_ms, no group's. */
static void stamp_arrival(msg_t *m, uint64_t stamp_ms)
{
    m->stamp_ms = stamp_ms;
    m->dest = MSG_DEST_TOPIC;
    m->group.ptr = NULL;
    m->group.len = 0;
    m->group_gen = 0;
}

/* The message of a live entry e of t at index: 1 with *m (views into rd's
 * window), -1 with err; *in_t = 1 instead when the slot does not vouch for it
 * (no record of the log there, a slot naming another place or revoked): its
 * 'T' key holds it when it is live. The record and its slot are read as
 * store_entry_record reads them. Inlined into its callers: every step
 * of a topic walk (the lease walk's, the GC's) comes through here, and the
 * call's frame and ten arguments were over a quarter of the two functions' own cost. */
static inline __attribute__((always_inline)) int entry_record(store_t *s, topic_state_t *t, uint64_t index,
                                                              const cq_entry_t *e, clog_reader_t *rd, slot_run_t *slots,
                                                              msg_t *m, int *in_t, char *err, size_t errlen)
{
    *in_t = 0;
    uint32_t ordinal;
    char why[512];
    switch (store_entry_record(s, rd, slots, t->queue, index, e->log_offset, m, &ordinal, why, sizeof why)) {
    case STORE_ENTRY_RECORD_LIVE:
        stamp_arrival(m, e->due);
        return 1;
    case STORE_ENTRY_RECORD_NO_RECORD: /* a message with no record in the log: its 'T' key holds it */
    case STORE_ENTRY_RECORD_NOT_NAMED: /* revoked, or its slot names another place: live only when its 'T' key */
        *in_t = 1; /* holds it (a message whose journey was dropped, index_build.c's rebuild: appended without one) */
        return 1;
    case STORE_ENTRY_RECORD_UNREADABLE:
        if (store_where_slot_revoked(s, e->log_offset)) {
            *in_t = 1; /* a damaged record revoked: its 'T' key (none) says it is gone */
            return 1;
        }
        break;
    case STORE_ENTRY_RECORD_SLOT_FAILED:
        return err_set(err, errlen, "topic %s, CQ index %" PRIu64 ": the where-slot of %016" PRIx64 ": %s", t->name,
                       index, e->log_offset, why);
    case STORE_ENTRY_RECORD_UNDECODABLE:
        break;
    }
    return err_set(err, errlen, "topic %s, CQ index %" PRIu64 ": the commit-log record of %016" PRIx64 ": %s", t->name,
                   index, e->log_offset, why);
}

/* t's 'T' key at seq (a message with no record in the log), decoded: 1
 * with *m (views into *held, the value store_get read: free(3)), 0 when
 * gone, -1 with err. */
static int t_key_msg(store_t *s, topic_state_t *t, uint64_t seq, char **held, msg_t *m, char *err, size_t errlen)
{
    key_buf_t k;
    key_queue(&k, KEY_TOPIC_LOG, t->name, t->len, seq);
    size_t vlen;
    int found = store_get(s, &k, held, &vlen, err, errlen); /* leveldb_free is free(3) */
    if (found <= 0) {
        return found;
    }
    return store_decode(*held, vlen, m, "a topic log", err, errlen) != 0 ? -1 : 1;
}

int topic_cq_entry_msg(store_t *s, topic_state_t *t, uint64_t index, const cq_entry_t *e, clog_reader_t *rd,
                       slot_run_t *slots, char **held, msg_t *m, char *err, size_t errlen)
{
    *held = NULL;
    cq_entry_t read;
    if (e == NULL) {
        char why[512];
        if (redo_cq_read(s->redo, t->queue, index, 1, &read, why, sizeof why) != 0) {
            return err_set(err, errlen, "topic %s, CQ index %" PRIu64 ": %s", t->name, index, why);
        }
        e = &read;
    }
    int in_t;
    int live = entry_record(s, t, index, e, rd, slots, m, &in_t, err, errlen);
    if (live <= 0) {
        return live;
    }
    if (in_t) {
        int found = t_key_msg(s, t, store_topic_cq_seq(t, index), held, m, err, errlen);
        return found > 0 ? TOPIC_CQ_IN_T : found;
    }
    char why[384];
    if (store_msg_check(m, "a topic log", why, sizeof why) != 0) { /* what store_decode checks of a 'T' value */
        return err_set(err, errlen, "topic %s, CQ index %" PRIu64 ": the commit-log record of %016" PRIx64 ": %s",
                       t->name, index, e->log_offset, why);
    }
    return 1;
}

int topic_log_get(store_t *s, topic_state_t *t, uint64_t seq, clog_reader_t *rd, char **held, msg_t *m, char *err,
                  size_t errlen)
{
    *held = NULL;
    if (!store_topic_seq_on_cq(t, seq)) {
        return t_key_msg(s, t, seq, held, m, err, errlen);
    }
    uint64_t index = store_topic_cq_index(t, seq);
    if (index < t->cq_head || index >= t->cq_tail) {
        return 0;
    }
    slot_run_t slots = { .base = UINT64_MAX };
    int rc = topic_cq_entry_msg(s, t, index, NULL, rd, &slots, held, m, err, errlen);
    return rc > 0 ? 1 : rc;
}

int topic_cq_find(store_t *s, uint64_t id, clog_reader_t *rd, msg_t *m, topic_state_t **t, idx_journey_t *j, char *err,
                  size_t errlen)
{
    if (s->topic_queues.used == 0) {
        return 0;
    }
    store_where_t w;
    int named = store_where_slot_find(s, id, rd, &w, err, errlen);
    if (named <= 0) {
        return named;
    }
    char why[512];
    topic_state_t *at = topic_cq_topic(s, w.sl.queue);
    if (at == NULL || w.sl.cq_index < at->cq_head || w.sl.cq_index >= at->cq_tail) {
        return 0; /* not in a topic CQ, or collected: 'X' says what is left */
    }
    cq_entry_t e;
    if (redo_cq_read(s->redo, w.sl.queue, w.sl.cq_index, 1, &e, why, sizeof why) != 0) {
        return err_set(err, errlen, "the topic CQ entry of %016" PRIx64 " (topic %s, index %" PRIu64 ") in %s: %s", id,
                       at->name, w.sl.cq_index, s->path, why);
    }
    if (e.log_offset != id) {
        return err_set(err, errlen,
                       "the where-slot of %016" PRIx64 " names topic %s's CQ index %" PRIu64
                       ", whose entry names %016" PRIx64 " (corrupt)",
                       id, at->name, w.sl.cq_index, e.log_offset);
    }
    if (msg_decode_record(w.rec.data, w.rec.len, id, w.ordinal, m, why, sizeof why) != 0) {
        return err_set(err, errlen, "the commit-log record of %016" PRIx64 " in %s: %s", id, s->path, why);
    }
    stamp_arrival(m, e.due);
    *t = at;
    j->ordinal = w.ordinal;
    j->queue = w.sl.queue;
    j->cq_index = w.sl.cq_index;
    return 1;
}

int topic_cq_find_damaged(store_t *s, uint64_t id, topic_state_t **t, idx_journey_t *j)
{
    slot_t sl;
    uint32_t ordinal;
    if (s->topic_queues.used == 0 || !store_where_slot_search(s, id, &ordinal, &sl) || (sl.flags & SLOT_REVOKED)) {
        return 0;
    }
    topic_state_t *at = topic_cq_topic(s, sl.queue);
    if (at == NULL || sl.cq_index < at->cq_head || sl.cq_index >= at->cq_tail) {
        return 0; /* on a level (its topic is in the damaged record), or collected */
    }
    cq_entry_t e;
    char why[256];
    if (redo_cq_read(s->redo, sl.queue, sl.cq_index, 1, &e, why, sizeof why) != 0 || e.log_offset != id) {
        return 0; /* the slot is not vouched for by its entry either */
    }
    *t = at;
    j->ordinal = ordinal;
    j->queue = sl.queue;
    j->cq_index = sl.cq_index;
    return 1;
}

/* The name 'M' "topicq-<queue>" gives (*name malloc'd by LevelDB, or NULL
 * when there is none): 0, or -1 with err. */
static int queue_name(store_t *s, uint32_t queue, char **name, size_t *len, char *err, size_t errlen)
{
    key_buf_t k;
    key_topic_queue(&k, queue);
    char why[512];
    if (store_get_applied(s, &k, name, len, why, sizeof why) < 0) {
        return err_set(err, errlen, "reading the name of topic CQ %08" PRIx32 " in %s: %s", queue, s->path, why);
    }
    return 0;
}

int topic_cq_bounds(store_t *s, uint32_t queue, uint64_t *head, uint64_t *tail, char *err, size_t errlen)
{
    *head = *tail = 0;
    char *name;
    size_t len;
    if (queue_name(s, queue, &name, &len, err, errlen) != 0) {
        return -1;
    }
    if (name == NULL) {
        return 0; /* made in the batch being applied: a new queue */
    }
    key_buf_t k;
    int bad_name = len == 0 || len > MSG_MAX_NAME;
    if (!bad_name) {
        key_record(&k, KEY_TOPIC_RECORD, name, len);
    }
    leveldb_free(name);
    if (bad_name) {
        return err_set(err, errlen, "corrupt name of topic CQ %08" PRIx32 " in %s (%zu bytes)", queue, s->path, len);
    }
    char *v, why[512];
    size_t n = 0;
    if (store_get_applied(s, &k, &v, &n, why, sizeof why) < 0) {
        return err_set(err, errlen, "reading the record of topic CQ %08" PRIx32 " in %s: %s", queue, s->path, why);
    }
    record_topic_t r;
    int bad = v != NULL && record_topic_decode(v, n, &r) != 0;
    leveldb_free(v);
    if (bad) {
        return err_set(err, errlen, "corrupt record of the topic of CQ %08" PRIx32 " in %s (%zu bytes)", queue, s->path,
                       n);
    }
    if (v != NULL && r.queue == queue) {
        *head = r.cq_head;
        *tail = r.cq_tail;
    } else if (v == NULL || r.queue != 0) {
        /* the topic was deleted (and maybe made again, with another queue): its queue is dead, every write to it
           skipped — a replay sees records as a later batch left them (design-commitlog.md §3) */
        *head = *tail = STORE_TOPIC_CQ_SEQ;
    }
    return 0; /* a record without a queue: as the batch before the one that made it left it (a replay): 0 and 0 */
}

int topic_cq_load(store_t *s, char *err, size_t errlen)
{
    key_buf_t k;
    key_meta(&k, STORE_META_TOPIC_QUEUE_NEXT);
    char *v;
    size_t vlen;
    int found = store_get(s, &k, &v, &vlen, err, errlen);
    if (found < 0) {
        return -1;
    }
    if (found) {
        int bad = vlen != 4;
        s->topic_queue_next = bad ? 0 : be32_get(v);
        leveldb_free(v);
        if (bad) {
            return err_set(err, errlen, "corrupt meta record %s in %s (%zu bytes)", STORE_META_TOPIC_QUEUE_NEXT,
                           s->path, vlen);
        }
    }
    map_iter_t it = { 0 };
    void *tv;
    while (map_next(&s->topics, &it, NULL, NULL, &tv)) {
        topic_state_t *t = tv;
        if (t->queue == 0) {
            if (t->cq_seq_base > 0 && (STORE_TOPIC_CQ_SEQ | t->cq_seq_base) > t->log_next_min) {
                t->log_next_min = STORE_TOPIC_CQ_SEQ | t->cq_seq_base; /* a copy's: its 'T' keys lie below */
                t->held.applied_below = t->log_next_min;               /* and LevelDB holds them */
            }
            continue;
        }
        if (t->queue < STORE_TOPIC_QUEUE_FIRST || t->queue >= s->topic_queue_next) {
            return err_set(err, errlen, "topic %s names CQ %08" PRIx32 ", not one drawn (next %08" PRIx32 ") in %s",
                           t->name, t->queue, s->topic_queue_next, s->path);
        }
        map_put(&s->topic_queues, (const char *)&t->queue, sizeof t->queue, t);
        uint64_t past = store_topic_cq_seq(t, t->cq_tail);
        if (past > t->log_next_min) {
            t->log_next_min = past;
            t->held.applied_below = past; /* the 'T' keys of entries held by them lie below */
        }
    }
    return 0;
}

int topic_cqs_each(store_t *s, topic_cq_fn fn, void *ctx, char *err, size_t errlen)
{
    if (s->redo == NULL) {
        return 0;
    }
    clog_reader_t rd = { .window = STORE_WALK_LOG_WINDOW };
    slot_run_t slots = { .base = UINT64_MAX };
    map_iter_t it = { 0 };
    void *tv;
    int rc = 0;
    while (rc == 0 && map_next(&s->topics, &it, NULL, NULL, &tv)) {
        topic_state_t *t = tv;
        cq_entry_t run[64];
        uint64_t run_at = t->cq_head;
        size_t run_n = 0;
        for (uint64_t i = t->cq_head; t->queue != 0 && i < t->cq_tail && rc == 0; i++) {
            if (i >= run_at + run_n) {
                char why[512];
                run_at = i;
                run_n = t->cq_tail - i < 64 ? (size_t)(t->cq_tail - i) : 64;
                if (redo_cq_read(s->redo, t->queue, i, run_n, run, why, sizeof why) != 0) {
                    rc = err_set(err, errlen, "topic %s, CQ index %" PRIu64 ": %s", t->name, i, why);
                    break;
                }
            }
            msg_t m;
            int in_t;
            int live = entry_record(s, t, i, &run[i - run_at], &rd, &slots, &m, &in_t, err, errlen);
            if (live < 0) {
                rc = -1;
            } else if (live > 0 && !in_t) {
                rc = fn(ctx, t, i, &m, err, errlen);
            }
        }
    }
    clog_reader_free(&rd);
    return rc;
}
