/*
 * levels/send.c — SEND (see store.h): the one SEND check, and a message
 * accepted — its id drawn (its record's offset in the commit log), its
 * journey started on a level (level.c) or, without a delay, appended to its
 * topic's log — with its key index entry.
 *
 * The checks of a SEND live once, in store_send_refusal: store_send,
 * store_send_dedup (lookup.c) and store_send_check call it. store_send_check
 * answers, writing nothing, whether a SEND would be refused as the next of a
 * run whose earlier SENDs are not stored yet (MULTI/EXEC checks all before
 * storing any): it carries what those SENDs will create — new topics, which
 * count against max-topics, and keys, which make a later DEDUP SEND of the
 * run a duplicate without a read.
 *
 * Threading: one thread at a time (the broker's storage thread).
 */
#include "levels/store_internal.h"
#include "base/alloc.h"
#include "base/err.h"

#include <stdlib.h>
#include <string.h>

/* ---- SEND ------------------------------------------------------------------------ */

/* A chained delay must fit max-delay and the hop bound (DESIGN §1: hops are
 * bounded; LVL_MAX_HOPS): lvl_chain_plan decides both and names the problem
 * ("delay 4d exceeds max-delay 3d", "... needs 3600 hops ..."). Without the
 * bound, a custom table with a small last level makes one message hop (one
 * write) per level delay for the whole journey. */
int store_send_validate(const store_options_t *o, const store_send_req_t *req, char *err, size_t errlen)
{
    if (msg_check_name("topic", req->topic, req->topic_len, err, errlen) != 0) {
        return -1;
    }
    if (req->key_len > MSG_MAX_KEY) {
        return err_set(err, errlen, "key is %zu bytes, longer than the limit of %d", req->key_len, MSG_MAX_KEY);
    }
    if (req->payload_len > o->max_payload) {
        return err_set(err, errlen, "payload is %zu bytes, larger than max-payload %u", req->payload_len,
                       o->max_payload);
    }
    const lvl_table_t *t = &o->levels;
    if (req->level < 0 || req->level > t->count) {
        return err_set(err, errlen, "LEVEL must be 0..%d (levels are 1..%d; 0: no delay), got %d", t->count, t->count,
                       req->level);
    }
    if (req->level == 0 && req->delay_ms > 0) {
        uint8_t plan[LVL_MAX_HOPS];
        int hops;
        return lvl_chain_plan(t, req->delay_ms, o->max_delay_ms, plan, LVL_MAX_HOPS, &hops, err, errlen);
    }
    return 0;
}

int store_send_waits_on_lane(const store_t *s, const store_send_req_t *req)
{
    const lvl_table_t *t = &s->opt.levels;
    if (s->redo == NULL || s->lane == NULL || req->level != 0 || req->delay_ms == 0) {
        return 0;
    }
    int first = lvl_next_hop(t, req->delay_ms);
    return lvl_hop_ms(t, first, req->delay_ms) < t->delay_ms[first]; /* store_level_enqueue_journey's remainder */
}

int store_send_refusal(const store_t *s, const store_send_req_t *req, int dedup, const map_t *planned_topics,
                       uint64_t planned_lane, char *err, size_t errlen)
{
    if (store_usable(s, err, errlen) != 0 || store_send_validate(&s->opt, req, err, errlen) != 0 ||
        store_topic_room_planned(s, planned_topics, req->topic, req->topic_len, err, errlen) != 0) {
        return -1;
    }
    if (dedup && req->key_len == 0) {
        return err_set(err, errlen, "DEDUP needs a KEY");
    }
    char why[256];
    if (store_send_waits_on_lane(s, req) && store_lane_room(s, planned_lane + 1, why, sizeof why) != 0) {
        return err_set(
            err, errlen, "a delay of %llu ms waits its last %llu ms on the remainder lane, and %s: retry later",
            (unsigned long long)req->delay_ms,
            (unsigned long long)lvl_hop_ms(&s->opt.levels, lvl_next_hop(&s->opt.levels, req->delay_ms), req->delay_ms),
            why);
    }
    return 0;
}

/* What the SENDs of a run checked so far will have created when they are
 * stored: the only state a SEND's refusal depends on that its predecessors
 * in the run change (store_send_refusal's topic count; a DEDUP SEND's reads,
 * which a key sent earlier in the run spares). */
struct store_send_check {
    map_t topics;  /* new topics (none exists in the store) */
    map_t keys;    /* 'K' prefixes (topic, key) of the keyed SENDs that will store a message */
    uint64_t lane; /* remainder lane entries their first hops will push */
};

store_send_check_t *store_send_check_new(void)
{
    return xcalloc(1, sizeof(store_send_check_t));
}

void store_send_check_free(store_send_check_t *c)
{
    if (c == NULL) {
        return;
    }
    map_free(&c->topics, NULL);
    map_free(&c->keys, NULL);
    free(c);
}

int store_send_check(store_t *s, store_send_check_t *c, const store_send_req_t *req, int dedup, char *err,
                     size_t errlen)
{
    if (store_send_refusal(s, req, dedup, &c->topics, c->lane, err, errlen) != 0) {
        return -1;
    }
    key_buf_t k;
    int stores = 1; /* a message: not a DEDUP SEND that finds a live one */
    if (req->key_len > 0) {
        key_key_prefix(&k, req->topic, req->topic_len, req->key, req->key_len);
        if (dedup && map_get(&c->keys, k.b, k.n) != NULL) {
            stores = 0; /* a duplicate of the run's own earlier SEND: in the batch by then, no read */
        } else if (dedup) {
            uint64_t id, due;
            int found = store_dedup_find(s, req, &id, &due, err, errlen); /* the reads store_send_dedup makes */
            if (found < 0) {
                return -1;
            }
            stores = !found;
        }
    }
    if (!stores) {
        return 0;
    }
    if (map_get(&s->topics, req->topic, req->topic_len) == NULL) {
        map_put(&c->topics, req->topic, req->topic_len, (void *)1);
    }
    if (req->key_len > 0) {
        map_put(&c->keys, k.b, k.n, (void *)1);
    }
    c->lane += (uint64_t)store_send_waits_on_lane(s, req);
    return 0;
}

uint64_t store_send_derived_bytes(const msg_t *m)
{
    return msg_encoded_size(m) + 2 * ((uint64_t)m->topic.len + m->key.len) + 256;
}

/* m's id: its record's offset in the log once the redo is open (m's
 * record is added to the pending batch with room for what the SEND derives
 * from it: store_send_derived_bytes), the sequence counter's before. 0, or -1
 * with err. */
static int send_take_id(store_t *s, msg_t *m, uint32_t *ordinal, char *err, size_t errlen)
{
    if (s->redo == NULL) {
        m->id = s->next_seq++;
        return 0;
    }
    return store_log_add_message(s, m, store_send_derived_bytes(m), ordinal, err, errlen);
}

int store_send(store_t *s, const store_send_req_t *req, uint64_t now_ms, uint64_t *id_out, uint64_t *due_out, char *err,
               size_t errlen)
{
    if (store_send_refusal(s, req, 0, NULL, 0, err, errlen) != 0) {
        return -1;
    }
    uint64_t delay = req->level == 0 ? req->delay_ms : 0;
    msg_t m;
    memset(&m, 0, sizeof m);
    m.created_ms = now_ms;
    m.dest = MSG_DEST_TOPIC;
    m.topic.ptr = req->topic;
    m.topic.len = (uint32_t)req->topic_len;
    m.key.ptr = req->key;
    m.key.len = (uint32_t)req->key_len;
    m.payload.ptr = req->payload;
    m.payload.len = (uint32_t)req->payload_len;
    if (req->level == 0 && delay == 0) {
        m.due_ms = now_ms;
    } else { /* the record holds the journey's due (a record is never rewritten) */
        int first, remainder;
        uint64_t hop_due;
        (void)store_level_plan(s, &m, req->level, delay, now_ms, s->redo != NULL, &first, &hop_due, &remainder);
    }
    /* The id is the message record's log offset (design-commitlog.md §2); the
     * batch may be committed first to make room, so count pending after it. */
    idx_journey_t journey = { 0 };
    if (send_take_id(s, &m, &journey.ordinal, err, errlen) != 0) {
        return -1;
    }
    idx_journey_t *j = s->redo != NULL ? &journey : NULL;
    if (j != NULL) {
        s->batch_bytes += msg_record_size(&m); /* its record is in the batch: what bounds a batch's bytes */
    }
    int pending_before = s->pending;
    /* the one lookup; a new topic is created where it always was (its
     * log_next_min is the sequence counter at that point) */
    topic_state_t *topic = store_topic_get(s, req->topic, req->topic_len);
    if (req->level == 0 && delay == 0) {
        m.due_ms = now_ms;
        if (topic == NULL) {
            topic = store_topic_get_or_create(s, req->topic, req->topic_len);
        }
        store_topic_append(s, topic, &m, 0, now_ms, j);
        if (j != NULL) {
            segcount_add(s, m.id, +1); /* its record is read until the topic's GC passes it */
        }
    } else {
        store_level_enqueue_journey(s, topic, &m, req->level, delay, now_ms, j);
        if (j != NULL) {
            segcount_add(s, m.id, +1); /* its record is read until it arrives */
        }
    }
    idx_key_put(s, &m);
    if (m.key.len > 0) {
        idx_sent_key_add(s, &m);
    }
    s->pending_sends += s->pending - pending_before;
    if (topic == NULL) {
        topic = store_topic_get_or_create(s, req->topic, req->topic_len); /* created by the enqueue */
    }
    topic->sent++;
    *id_out = m.id;
    if (due_out) {
        *due_out = m.due_ms;
    }
    return 0;
}
