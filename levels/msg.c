/*
 * levels/msg.c — the message record codec (see msg.h).
 *
 * Layout (all integers big-endian):
 *   u8  version (MSG_FORMAT_VERSION)
 *   u8  dest
 *   u32 reconsume
 *   u64 id, created_ms, due_ms, stamp_ms, group_gen
 *   5 × (u32 length + bytes): topic, group, key, payload, reason
 * The decoder checks every length against what is left, and that nothing
 * trails, so a truncated or foreign value is an error, never a misread.
 *
 * The record form (the payload of a message record in the commit log) is
 * u32 ordinal, then the layout above with id 0: the id is the record's log
 * offset, known to the reader and not to the encoder (msg.h).
 */
#include "levels/msg.h"
#include "base/alloc.h"
#include "base/err.h"
#include "levels/keys.h"

#include <inttypes.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#define MSG_FORMAT_VERSION 1
#define MSG_FIXED_BYTES    (1 + 1 + 4 + 8 * 5)
#define MSG_STRING_COUNT   5

/* Write v big-endian at p (keys.h's integer codec) and return p past it. */
static char *put_u32(char *p, uint32_t v)
{
    be32_put(p, v);
    return p + 4;
}

static char *put_u64(char *p, uint64_t v)
{
    be64_put(p, v);
    return p + 8;
}

/* Where each string view sits in msg_t, in layout order. The loops over
 * the strings are unrolled (#pragma GCC unroll 5: MSG_STRING_COUNT), so
 * these offsets become constants: a loop over the table was a fifth of a
 * decode. */
static const size_t string_offsets[MSG_STRING_COUNT] = { offsetof(msg_t, topic), offsetof(msg_t, group),
                                                         offsetof(msg_t, key), offsetof(msg_t, payload),
                                                         offsetof(msg_t, reason) };

/* m's i-th string (layout order), read-only and writable (a decoder or a copy sets it). */
static const msg_str_t *string_at(const msg_t *m, int i)
{
    return (const msg_str_t *)((const char *)m + string_offsets[i]);
}

static msg_str_t *view_at(msg_t *m, int i)
{
    return (msg_str_t *)((char *)m + string_offsets[i]);
}

/* Summed field by field, not through string_at: it is asked three times a
 * message (a loop over the offsets was some 40 Ir of it each time). */
_Static_assert(MSG_STRING_COUNT == 5, "msg_encoded_size sums every string");
size_t msg_encoded_size(const msg_t *m)
{
    return MSG_FIXED_BYTES + 4 * MSG_STRING_COUNT + (size_t)m->topic.len + m->group.len + m->key.len + m->payload.len +
           m->reason.len;
}

/* Write m's layout with `id` in its id field at out (msg_encoded_size(m) bytes). */
static size_t encode_with_id(const msg_t *m, uint64_t id, char *out)
{
    char *p = out;
    *p++ = MSG_FORMAT_VERSION;
    *p++ = (char)m->dest;
    p = put_u32(p, m->reconsume);
    p = put_u64(p, id);
    p = put_u64(p, m->created_ms);
    p = put_u64(p, m->due_ms);
    p = put_u64(p, m->stamp_ms);
    p = put_u64(p, m->group_gen);
#pragma GCC unroll 5
    for (int i = 0; i < MSG_STRING_COUNT; i++) {
        const msg_str_t *str = string_at(m, i);
        p = put_u32(p, str->len);
        if (str->len) {
            memcpy(p, str->ptr, str->len);
        }
        p += str->len;
    }
    return (size_t)(p - out);
}

size_t msg_encode(const msg_t *m, char *out, size_t outlen)
{
    if (outlen < msg_encoded_size(m)) {
        return 0;
    }
    return encode_with_id(m, m->id, out);
}

/* msg_decode's work: every field of m set when it returns 0, some when -1. */
static int decode_fields(const char *buf, size_t len, msg_t *m, char *err, size_t errlen)
{
    static const char *const names[MSG_STRING_COUNT] = { "topic", "group", "key", "payload", "reason" };
    if (len < MSG_FIXED_BYTES) {
        return err_set(err, errlen, "message record truncated: %zu bytes, at least %d expected", len, MSG_FIXED_BYTES);
    }
    if ((unsigned char)buf[0] != MSG_FORMAT_VERSION) {
        return err_set(err, errlen, "message record has unknown format version %u (expected %u)", (unsigned char)buf[0],
                       MSG_FORMAT_VERSION);
    }
    m->dest = (uint8_t)buf[1];
    if (m->dest != MSG_DEST_TOPIC && m->dest != MSG_DEST_GROUP) {
        return err_set(err, errlen, "message record has an invalid destination %u", m->dest);
    }
    const char *p = buf + 2;
    m->reconsume = be32_get(p);
    p += 4;
    m->id = be64_get(p);
    p += 8;
    m->created_ms = be64_get(p);
    p += 8;
    m->due_ms = be64_get(p);
    p += 8;
    m->stamp_ms = be64_get(p);
    p += 8;
    m->group_gen = be64_get(p);
    p += 8;
    const char *end = buf + len;
#pragma GCC unroll 5
    for (int i = 0; i < MSG_STRING_COUNT; i++) {
        if (end - p < 4) {
            return err_set(err, errlen, "message record truncated before the %s length", names[i]);
        }
        uint32_t n = be32_get(p);
        p += 4;
        if ((size_t)(end - p) < n) {
            return err_set(err, errlen, "message record: %s length %u runs past the end of the record", names[i], n);
        }
        view_at(m, i)->ptr = p;
        view_at(m, i)->len = n;
        p += n;
    }
    if (p != end) {
        return err_set(err, errlen, "message record has %zu trailing bytes", (size_t)(end - p));
    }
    return 0;
}

/* m is cleared on a failure only (before: cleared first, then decoded up to
 * the fault): a success sets every field, and the clearing was a sixth of a
 * decode. */
int msg_decode(const char *buf, size_t len, msg_t *m, char *err, size_t errlen)
{
    if (decode_fields(buf, len, m, err, errlen) != 0) {
        memset(m, 0, sizeof *m);
        return -1;
    }
    return 0;
}

size_t msg_record_size(const msg_t *m)
{
    return MSG_RECORD_ORDINAL_BYTES + msg_encoded_size(m);
}

size_t msg_encode_record(const msg_t *m, uint32_t ordinal, char *out, size_t outlen)
{
    if (outlen < msg_record_size(m)) {
        return 0;
    }
    be32_put(out, ordinal);
    return MSG_RECORD_ORDINAL_BYTES + encode_with_id(m, 0, out + MSG_RECORD_ORDINAL_BYTES);
}

/* The ordinal at the head of a record of len bytes: 0, or -1 when it is shorter. */
static int read_ordinal(const char *buf, size_t len, uint32_t *ordinal)
{
    if (len < MSG_RECORD_ORDINAL_BYTES) {
        return -1;
    }
    *ordinal = be32_get(buf);
    return 0;
}

int msg_record_ordinal(const char *buf, size_t len, uint32_t *ordinal, char *err, size_t errlen)
{
    if (read_ordinal(buf, len, ordinal) != 0) {
        return err_set(err, errlen, "message record truncated: %zu bytes, shorter than its %d-byte ordinal", len,
                       MSG_RECORD_ORDINAL_BYTES);
    }
    return 0;
}

int msg_decode_record(const char *buf, size_t len, uint64_t offset, uint32_t ordinal, msg_t *m, char *err,
                      size_t errlen)
{
    if (offset == 0) {
        return err_set(err, errlen, "message record at log offset 0: no record lies there (ids are never 0)");
    }
    uint32_t claimed;
    if (read_ordinal(buf, len, &claimed) != 0) {
        return err_set(err, errlen,
                       "message record at log offset %" PRIu64
                       " truncated: %zu bytes, shorter than its %d-byte ordinal",
                       offset, len, MSG_RECORD_ORDINAL_BYTES);
    }
    if (claimed != ordinal) {
        return err_set(err, errlen,
                       "message record at log offset %" PRIu64 " claims ordinal %" PRIu32 ", expected %" PRIu32
                       " (not the record its where-slot names)",
                       offset, claimed, ordinal);
    }
    char why[192];
    if (msg_decode(buf + MSG_RECORD_ORDINAL_BYTES, len - MSG_RECORD_ORDINAL_BYTES, m, why, sizeof why) != 0) {
        return err_set(err, errlen, "at log offset %" PRIu64 ", past the ordinal: %s", offset, why);
    }
    if (m->id != 0) {
        return err_set(err, errlen,
                       "message record at log offset %" PRIu64 " carries id %" PRIu64
                       " (the record form's id field is 0: the id is the offset)",
                       offset, m->id);
    }
    m->id = offset;
    return 0;
}

int msg_record_slot_check(uint64_t offset, uint32_t ordinal, const slot_t *slot, char *err, size_t errlen)
{
    if (slot->id != offset) {
        return err_set(err, errlen,
                       "message record at log offset %" PRIu64 " claims ordinal %" PRIu32
                       ", whose where-slot names id %" PRIu64 ": not this record",
                       offset, ordinal, slot->id);
    }
    return 0;
}

void msg_owned_copy(msg_owned_t *dst, const msg_t *src)
{
    size_t n = 1; /* never 0: every view points into buf, an empty one too */
#pragma GCC unroll 5
    for (int i = 0; i < MSG_STRING_COUNT; i++) {
        n += string_at(src, i)->len;
    }
    char *p = xmalloc(n);
    dst->buf = p;
    dst->m = *src;
#pragma GCC unroll 5
    for (int i = 0; i < MSG_STRING_COUNT; i++) {
        const msg_str_t *from = string_at(src, i);
        if (from->len) {
            memcpy(p, from->ptr, from->len);
        }
        view_at(&dst->m, i)->ptr = p;
        p += from->len;
    }
}

void msg_owned_free(msg_owned_t *o)
{
    if (o == NULL) {
        return;
    }
    free(o->buf);
    memset(o, 0, sizeof *o);
}

void msg_budget_init(msg_budget_t *b, uint64_t max_bytes)
{
    b->left = max_bytes ? max_bytes : 1;
}

int msg_budget_open(const msg_budget_t *b)
{
    return b->left > 0;
}

void msg_budget_charge(msg_budget_t *b, const msg_t *m)
{
    uint64_t bytes = (uint64_t)m->payload.len + m->key.len + m->reason.len;
    b->left -= bytes < b->left ? bytes : b->left;
}

int msg_check_name(const char *what, const char *name, size_t len, char *err, size_t errlen)
{
    if (len == 0) {
        return err_set(err, errlen, "%s name is empty", what);
    }
    if (len > MSG_MAX_NAME) {
        return err_set(err, errlen, "%s name is %zu bytes, longer than the limit of %d", what, len, MSG_MAX_NAME);
    }
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)name[i];
        if (c < 0x21 || c > 0x7e) {
            return err_set(err, errlen,
                           "%s name has an invalid byte 0x%02x at offset %zu "
                           "(printable ASCII without blanks only)",
                           what, c, i);
        }
    }
    return 0;
}
