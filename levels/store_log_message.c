/*
 * levels/store_log_message.c — messages in the log under the store
 * (docs/design-commitlog.md, 4a.3; contracts in levels/store_internal.h): a
 * SEND's message is a record of the batch (levels/msg.h's record form, its
 * ordinal counted here per segment) and its id is the record's offset; a
 * batch holding messages keeps room in its segment for the rest of a batch,
 * which bounds the largest payload a segment size allows; a SEND journey's
 * CQ and where-slot writes go into the batch, and a message's where-slot is
 * read back from its segment's slot file.
 *
 * Threading: the store's owner thread.
 */
#include "levels/store_internal.h"
#include "base/alloc.h"
#include "base/err.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- messages in the log (4a.3) -------------------------------------------------------- */

/* What a batch holding a message keeps free in its segment besides that
 * message: the dirty records a commit writes and one operation's overshoot of
 * STORE_BATCH_MAX_BYTES. */
#define STORE_LOG_BATCH_MARGIN (UINT64_C(64) << 10)

/* What a batch that holds messages keeps free in its segment besides them,
 * with batch_bytes already in the batch, in segments of segment_bytes: the
 * rest of a batch of STORE_BATCH_MAX_BYTES (the writer and the long
 * operations cut their batches there, store.h; once the batch holds a message
 * it cannot move to another segment, and what later operations add to it asks
 * for no room) and STORE_LOG_BATCH_MARGIN, at most a quarter of a segment. */
static uint64_t batch_rest(uint64_t segment_bytes, uint64_t batch_bytes)
{
    uint64_t rest = STORE_BATCH_MAX_BYTES > batch_bytes ? STORE_BATCH_MAX_BYTES - batch_bytes : 0;
    rest += STORE_LOG_BATCH_MARGIN;
    return rest > segment_bytes / 4 ? segment_bytes / 4 : rest;
}

/* The bytes a message record of `record` bytes and its derived writes take
 * in a batch (without the batch's rest). */
static uint64_t message_bytes(size_t record, uint64_t derived_bytes)
{
    return CLOG_RECORD_HEADER + record + 8 + REDO_MESSAGE_RESERVE + derived_bytes;
}

static uint64_t message_room(const store_t *s, size_t record, uint64_t derived_bytes)
{
    return message_bytes(record, derived_bytes) + batch_rest(s->opt.segment_bytes, s->batch_bytes);
}

/* The bytes of a segment of segment_bytes that `bytes` of messages ask for in
 * an empty batch: theirs and the batch's rest, with the batch's reserves. */
static uint64_t segment_need(uint64_t segment_bytes, uint64_t bytes)
{
    return redo_batch_segment_bytes(bytes + batch_rest(segment_bytes, 0));
}

/* The message bytes (message_bytes) of a SEND of a payload of `payload` bytes
 * with the longest topic and key. */
static uint64_t largest_send_bytes(uint64_t payload)
{
    msg_t m;
    memset(&m, 0, sizeof m);
    m.topic.len = MSG_MAX_NAME;
    m.key.len = MSG_MAX_KEY;
    m.payload.len = (uint32_t)payload;
    return message_bytes(msg_record_size(&m), store_send_derived_bytes(&m));
}

/* The largest payload a SEND (longest topic and key) can have in segments of
 * segment_bytes: 0 when none fits. */
static uint32_t store_segment_max_payload(uint64_t segment_bytes)
{
    uint64_t lo = 0, hi = (uint64_t)MSG_HARD_MAX_PAYLOAD + 1;
    if (segment_need(segment_bytes, largest_send_bytes(0)) > segment_bytes) {
        return 0;
    }
    while (hi - lo > 1) { /* the need grows with the payload: the largest payload that fits */
        uint64_t mid = lo + (hi - lo) / 2;
        if (segment_need(segment_bytes, largest_send_bytes(mid)) <= segment_bytes) {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    return (uint32_t)lo;
}

/* The smallest segment size (a multiple of 4096) whose empty batch holds
 * `bytes` of messages: 0 when no segment size does. */
static uint64_t least_segment_bytes(uint64_t bytes)
{
    uint64_t lo = CLOG_SEGMENT_MIN / 4096, hi = CLOG_SEGMENT_MAX / 4096; /* in 4 KiB pages */
    if (segment_need(hi * 4096, bytes) > hi * 4096) {
        return 0;
    }
    while (lo < hi) { /* the room left grows with the segment: the smallest that fits */
        uint64_t mid = lo + (hi - lo) / 2;
        if (segment_need(mid * 4096, bytes) <= mid * 4096) {
            hi = mid;
        } else {
            lo = mid + 1;
        }
    }
    return lo * 4096;
}

/* The smallest segment size whose segments take a SEND of a payload of
 * `payload` bytes: 0 when no segment size does. */
static uint64_t store_payload_min_segment_bytes(uint32_t payload)
{
    return least_segment_bytes(largest_send_bytes(payload));
}

int store_check_payload_room(uint64_t segment_bytes, uint32_t max_payload, char *err, size_t errlen)
{
    uint64_t need = segment_need(segment_bytes, largest_send_bytes(max_payload));
    if (need <= segment_bytes) {
        return 0;
    }
    return err_set(err, errlen,
                   "a message of %" PRIu32 " bytes needs %" PRIu64 " bytes of one segment (its record, its level "
                   "entry's copy, the rest of its batch: twice the payload and a quarter segment); segments of %" PRIu64
                   " bytes take at most %" PRIu32 ": set commitlog-segment-size to at least %" PRIu64
                   " or max-payload to at most %" PRIu32,
                   max_payload, need, segment_bytes, store_segment_max_payload(segment_bytes),
                   store_payload_min_segment_bytes(max_payload), store_segment_max_payload(segment_bytes));
}

/* Settle the pending batch's segment for a record of `record` bytes: 0, or -1
 * with err. A full batch is committed (unsynced) first, once. A message no
 * segment holds is refused first, naming the segment size and what to set:
 * nothing is written and the store stays usable. */
static int settle_message_segment(store_t *s, size_t record, uint64_t derived_bytes, char *err, size_t errlen)
{
    uint64_t alone = segment_need(s->opt.segment_bytes, message_bytes(record, derived_bytes));
    if (alone > s->opt.segment_bytes) {
        return err_set(err, errlen,
                       "message of %zu bytes refused: it needs %" PRIu64
                       " bytes of one commit-log segment (its record, its level entry's copy and the rest of its "
                       "batch) and the segments of %s are %" PRIu64 " bytes, which take payloads of at most %" PRIu32
                       " bytes (set max-payload to at most that, or commitlog-segment-size to at least %" PRIu64
                       " for a new data directory)",
                       record, alone, s->path, s->opt.segment_bytes, store_segment_max_payload(s->opt.segment_bytes),
                       store_payload_min_segment_bytes(s->opt.max_payload));
    }
    char why[512];
    for (int tries = 0;; tries++) {
        int rc = redo_batch_room(s->redo, &s->log_batch, message_room(s, record, derived_bytes), why, sizeof why);
        if (rc == 0) {
            rc = redo_message_room(s->redo, &s->log_batch, record, why, sizeof why);
        }
        if (rc == 0) {
            return 0;
        }
        if (rc != REDO_BATCH_FULL || tries > 0) {
            return err_set(err, errlen, "message of %zu bytes in the commit log of %s: %s", record, s->path,
                           rc == REDO_BATCH_FULL ? "a batch of its own has no room for it" : why);
        }
        if (store_commit_durable(s, 0, err, errlen) != 0) {
            return -1;
        }
    }
}

uint64_t store_send_run_bytes(const store_send_req_t *req)
{
    msg_t m;
    memset(&m, 0, sizeof m);
    m.dest = MSG_DEST_TOPIC;
    m.topic.len = (uint32_t)req->topic_len;
    m.key.len = (uint32_t)req->key_len;
    m.payload.len = (uint32_t)req->payload_len;
    /* and its CQ write and slot once more: each message already in the batch is kept that reserve again by every
       later room asked (redo_batch_room), so the run's last SEND asks no more than the run's room left for it */
    return message_bytes(msg_record_size(&m), store_send_derived_bytes(&m)) + REDO_MESSAGE_RESERVE;
}

int store_log_run_room(store_t *s, uint64_t run_bytes, char *err, size_t errlen)
{
    if (s->redo == NULL || run_bytes == 0) {
        return 0;
    }
    uint64_t size = s->opt.segment_bytes, alone = segment_need(size, run_bytes);
    if (alone > size) {
        uint64_t least = least_segment_bytes(run_bytes);
        char set[160] = "";
        if (least != 0) {
            snprintf(set, sizeof set,
                     ", or set commitlog-segment-size to at least %" PRIu64 " for a new data directory", least);
        }
        return err_set(err, errlen,
                       "a run of SENDs stored all or none needs %" PRIu64
                       " bytes of one commit-log segment (their records, their level entries' copies and the rest of "
                       "their batch) and the segments of %s are %" PRIu64 " bytes: send it as smaller transactions%s",
                       alone, s->path, size, set);
    }
    char why[512];
    for (int tries = 0;; tries++) {
        int rc = redo_batch_room(s->redo, &s->log_batch, run_bytes + batch_rest(size, s->batch_bytes), why, sizeof why);
        if (rc == 0) {
            return 0;
        }
        if (rc != REDO_BATCH_FULL || tries > 0) {
            return err_set(err, errlen, "a run of SENDs of %" PRIu64 " bytes in the commit log of %s: %s", run_bytes,
                           s->path, rc == REDO_BATCH_FULL ? "a batch of its own has no room for it" : why);
        }
        if (store_commit_durable(s, 0, err, errlen) != 0) { /* the SENDs pending before the run: the run starts anew */
            return -1;
        }
    }
}

int store_log_add_message(store_t *s, msg_t *m, uint64_t derived_bytes, uint32_t *ordinal, char *err, size_t errlen)
{
    size_t n = msg_record_size(m);
    if (settle_message_segment(s, n, derived_bytes, err, errlen) != 0) {
        return -1;
    }
    uint64_t base = s->log_batch.log.limit - s->opt.segment_bytes;
    if (base != s->msg_segment) {
        s->msg_segment = base;
        s->msg_ordinal = 0;
    }
    char small[512];
    char *buf = n <= sizeof small ? small : xmalloc(n);
    msg_encode_record(m, s->msg_ordinal, buf, n);
    uint64_t offset = 0;
    char why[512];
    int rc = redo_add_message(s->redo, &s->log_batch, buf, n, &offset, why, sizeof why);
    if (buf != small) {
        free(buf);
    }
    if (rc != 0 && rc != REDO_BATCH_FULL) {
        /* The segment the record needs could not be made (pre-written, renamed, synced): on a full disk the
           log's first write to fail. Nothing was appended, so the store breaks as at a refused append of a
           commit (store_log_append): its close closes the log clean, and the writer takes the break for a
           full disk as it takes a commit's. */
        char why_shown[512];
        char msg[sizeof why_shown + STORE_PATH_SHOWN_MAX + 96]; /* the cause whole, beside the shown path */
        store_failure_text(why, s->path, why_shown, sizeof why_shown);
        snprintf(msg, sizeof msg, "message of %zu bytes in the commit log of %s: %s", n, s->path_shown, why_shown);
        store_log_note_refused_append(s);
        store_log_break(s, msg);
        return err_set(err, errlen, "%s", msg);
    }
    if (rc != 0 || offset < base || offset >= base + s->opt.segment_bytes) {
        return err_set(err, errlen, "message of %zu bytes in the commit log of %s: %s", n, s->path,
                       rc != 0 ? "the batch's segment had no room after it was settled"
                               : "the record left the segment its ordinal was counted in");
    }
    *ordinal = s->msg_ordinal++;
    m->id = offset;
    return 0;
}

/* Derived-record bytes of a CQ write and of a slot write (clog_redo.h), counted
 * in the batch's size so that the room kept for it covers them. */
#define CQ_WRITE_BYTES   29
#define SLOT_WRITE_BYTES 41
#define CQ_HEAD_BYTES    13

void store_log_cq_append(store_t *s, uint32_t queue, uint64_t index, uint64_t offset, uint64_t due)
{
    cq_entry_t e = { offset, due };
    redo_cq_write(&s->log_batch, queue, index, &e);
    s->batch_bytes += CQ_WRITE_BYTES;
}

void store_log_slot(store_t *s, uint64_t offset, const idx_journey_t *j, uint32_t flags)
{
    slot_t sl = { offset, j->queue, flags, j->cq_index };
    redo_slot_write(&s->log_batch, offset - offset % s->opt.segment_bytes, j->ordinal, &sl);
    s->batch_bytes += SLOT_WRITE_BYTES;
}

void store_log_cq_head(store_t *s, uint32_t queue, uint64_t head)
{
    redo_cq_head(&s->log_batch, queue, head);
    s->batch_bytes += CQ_HEAD_BYTES;
}

int store_log_slot_get(store_t *s, uint64_t id, uint32_t ordinal, slot_t *sl, int *gone, char *err, size_t errlen)
{
    char why[512];
    if (ordinal == UINT32_MAX) {
        clog_reader_t rd = { 0 };
        clog_record_t r;
        int rc = clog_read(redo_log(s->redo), id, &rd, &r, why, sizeof why);
        if (rc == 0) {
            rc = msg_record_ordinal(r.data, r.len, &ordinal, why, sizeof why);
        }
        clog_reader_free(&rd);
        if (rc == CLOG_NOT_RECORD && gone != NULL) {
            *gone = 1;
            *sl = (slot_t){ 0 }; /* no slot read: zeroed, so a caller's test of gone and sl together reads no garbage */
            return 0;
        }
        if (rc != 0) {
            return err_set(err, errlen, "the record of %016" PRIx64 ": %s", id,
                           rc == CLOG_NOT_RECORD ? "not in the commit log" : why);
        }
    }
    slot_file_t *f = NULL;
    int rc = slot_file_open(s->path, id - id % s->opt.segment_bytes, 0, &f, why, sizeof why);
    if (rc == 0) {
        rc = slot_count(f) > ordinal
                 ? slot_get(f, ordinal, sl, why, sizeof why)
                 : err_set(why, sizeof why, "slot %" PRIu32 " past the file's %" PRIu64, ordinal, slot_count(f));
    }
    (void)slot_file_close(f, NULL, 0);
    return rc != 0 ? err_set(err, errlen, "the where-slot of %016" PRIx64 ": %s", id, why) : 0;
}

int store_slot_run_get(store_t *s, slot_run_t *run, uint64_t base, uint64_t ordinal, slot_t *sl, char *err,
                       size_t errlen)
{
    if (run->base != base || ordinal < run->at || ordinal >= run->at + run->n) {
        char why[512];
        size_t got = 0;
        if (redo_slot_read(s->redo, base, ordinal, STORE_SLOT_RUN, run->slots, &got, why, sizeof why) != 0) {
            run->n = 0;
            return err_set(err, errlen, "the where-slots of commit-log segment %016" PRIx64 " in %s: %s", base, s->path,
                           why);
        }
        run->base = base;
        run->at = ordinal;
        run->n = got;
    }
    *sl = run->slots[ordinal - run->at];
    return 0;
}

uint64_t store_log_next_id(const store_t *s)
{
    const clog_batch_t *b = &s->log_batch.log;
    uint64_t next = s->log_batch.messages > 0 ? b->first + b->len : clog_end(redo_log(s->redo));
    return next > s->log_floor ? next : s->log_floor;
}
