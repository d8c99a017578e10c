/*
 * tests/unit/test_msg_codec.c — CUnit suite "codec" of levels/keys.h's
 * big-endian integers and levels/msg.c's message record: the exact bytes
 * written for known values (the stored format: a record or key written by
 * one build is read by the next), the values read back, and a record cut
 * short refused; and the commit log's record form (ordinal + record, id
 * taken from the log offset): random round trips, every truncation, a wrong
 * ordinal, id field or version refused, the where-slot cross-check; an
 * owned copy (msg_owned_copy) that keeps nothing of its source. Pure
 * logic: no store, no temp directory.
 * Run alone: ./tests/unit/test_msg_codec [suite [test]].
 */
#include "levels/keys.h"
#include "levels/msg.h"
#include "tests/helpers/testutil.h"

#include <CUnit/CUnit.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

static void test_be64_bytes(void)
{
    static const struct {
        uint64_t v;
        unsigned char bytes[8];
    } cases[] = {
        { 0, { 0, 0, 0, 0, 0, 0, 0, 0 } },
        { UINT64_C(0x0102030405060708), { 1, 2, 3, 4, 5, 6, 7, 8 } },
        { UINT64_C(0x8000000000000001), { 0x80, 0, 0, 0, 0, 0, 0, 1 } },
        { UINT64_MAX, { 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff } },
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char out[10] = { 0x55, 0x55, 0x55, 0x55, 0x55, 0x55, 0x55, 0x55, 0x55, 0x55 };
        be64_put(out + 1, cases[i].v);
        TU_CHECK(memcmp(out + 1, cases[i].bytes, 8) == 0, "be64_put(%#" PRIx64 ") wrote other bytes", cases[i].v);
        TU_CHECK(out[0] == 0x55 && out[9] == 0x55, "be64_put(%#" PRIx64 ") wrote outside its 8 bytes", cases[i].v);
        TU_CHECK(be64_get((const char *)cases[i].bytes) == cases[i].v, "be64_get read %#" PRIx64 ", want %#" PRIx64,
                 be64_get((const char *)cases[i].bytes), cases[i].v);
    }
}

static void test_be32_bytes(void)
{
    char out[4];
    be32_put(out, UINT32_C(0xa1b2c3d4));
    TU_CHECK(memcmp(out, "\xa1\xb2\xc3\xd4", 4) == 0, "be32_put wrote other bytes");
    TU_CHECK(be32_get(out) == UINT32_C(0xa1b2c3d4), "be32_get read %#" PRIx32, be32_get(out));
}

static msg_t sample(void)
{
    msg_t m = { 0 };
    m.id = UINT64_C(0x0102030405060708);
    m.created_ms = 1;
    m.due_ms = UINT64_C(0xfedcba9876543210);
    m.stamp_ms = 2;
    m.group_gen = 3;
    m.reconsume = 4;
    m.dest = MSG_DEST_GROUP;
    m.topic = (msg_str_t){ "tp", 2 };
    m.group = (msg_str_t){ "g", 1 };
    m.payload = (msg_str_t){ "xyz", 3 };
    return m;
}

static void test_record_bytes(void)
{
    msg_t m = sample();
    char buf[256];
    size_t n = msg_encode(&m, buf, sizeof buf);
    static const unsigned char want[] = {
        1,    MSG_DEST_GROUP,
        0,    0,
        0,    4, /* version, dest, reconsume */
        1,    2,
        3,    4,
        5,    6,
        7,    8, /* id */
        0,    0,
        0,    0,
        0,    0,
        0,    1, /* created_ms */
        0xfe, 0xdc,
        0xba, 0x98,
        0x76, 0x54,
        0x32, 0x10, /* due_ms */
        0,    0,
        0,    0,
        0,    0,
        0,    2, /* stamp_ms */
        0,    0,
        0,    0,
        0,    0,
        0,    3, /* group_gen */
        0,    0,
        0,    2,
        't',  'p',
        0,    0,
        0,    1,
        'g',  0,
        0,    0,
        0,    0,
        0,    0,
        3,    'x',
        'y',  'z',
        0,    0,
        0,    0,
    };
    TU_REQUIRE(n == sizeof want, "msg_encode wrote %zu bytes, want %zu", n, sizeof want);
    TU_CHECK(n == msg_encoded_size(&m), "msg_encoded_size says %zu, msg_encode wrote %zu", msg_encoded_size(&m), n);
    for (size_t i = 0; i < n; i++) {
        TU_CHECK((unsigned char)buf[i] == want[i], "byte %zu is %#x, want %#x", i, (unsigned char)buf[i], want[i]);
    }
}

static void test_record_round_trip(void)
{
    msg_t m = sample(), back;
    char buf[256], err[200];
    size_t n = msg_encode(&m, buf, sizeof buf);
    TU_REQUIRE(msg_decode(buf, n, &back, err, sizeof err) == 0, "msg_decode: %s", err);
    TU_CHECK(back.id == m.id && back.created_ms == m.created_ms && back.due_ms == m.due_ms &&
                 back.stamp_ms == m.stamp_ms && back.group_gen == m.group_gen && back.reconsume == m.reconsume &&
                 back.dest == m.dest,
             "the fixed fields differ after a round trip (id %#" PRIx64 ", due %#" PRIx64 ")", back.id, back.due_ms);
    TU_CHECK(back.payload.len == 3 && memcmp(back.payload.ptr, "xyz", 3) == 0, "payload differs");
    TU_CHECK(back.topic.len == 2 && back.group.len == 1 && back.key.len == 0 && back.reason.len == 0,
             "string lengths differ: %u %u %u %u", back.topic.len, back.group.len, back.key.len, back.reason.len);
    TU_CHECK(msg_decode(buf, n - 1, &back, err, sizeof err) != 0 &&
                 strstr(err, "truncated before the reason length") != NULL,
             "a record one byte short: '%s'", err);
    static const msg_t zero;
    TU_CHECK(memcmp(&back, &zero, sizeof back) == 0,
             "a failed decode leaves id %#" PRIx64 " and a payload of %u behind", back.id, back.payload.len);
}

/* ---- the record form ---- */

#define RECORD_OFFSET UINT64_C(0x0000000100000040) /* a log offset: segment 1 GiB's, past its header */

/* xorshift64: the random messages are the same on every run. */
static uint64_t next_random(uint64_t *state)
{
    uint64_t x = *state;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    return *state = x;
}

/* A string of len bytes from pool (which holds at least len), or absent (len 0). */
static msg_str_t random_string(uint64_t *rng, const char *pool, uint32_t max)
{
    if (next_random(rng) % 2 == 0) {
        return (msg_str_t){ NULL, 0 };
    }
    return (msg_str_t){ pool, (uint32_t)(1 + next_random(rng) % max) };
}

static msg_t random_message(uint64_t *rng, const char *pool, uint32_t payload_len)
{
    msg_t m = { 0 };
    m.id = next_random(rng); /* not written by the record form */
    m.created_ms = next_random(rng);
    m.due_ms = next_random(rng);
    m.stamp_ms = next_random(rng) % 3 ? next_random(rng) : 0;
    m.group_gen = next_random(rng) % 2 ? next_random(rng) : 0;
    m.reconsume = (uint32_t)next_random(rng);
    m.dest = (uint8_t)(next_random(rng) % 2);
    m.topic = (msg_str_t){ pool, (uint32_t)(1 + next_random(rng) % MSG_MAX_NAME) };
    m.group = random_string(rng, pool + 1, MSG_MAX_NAME);
    m.key = random_string(rng, pool + 2, MSG_MAX_KEY);
    m.reason = random_string(rng, pool + 3, MSG_MAX_REASON);
    m.payload = (msg_str_t){ payload_len ? pool + 4 : NULL, payload_len };
    return m;
}

/* 1 when a and b hold the same fields and bytes (b's id is offset). */
static int same_message(const msg_t *a, const msg_t *b, uint64_t offset)
{
    const msg_str_t *sa[] = { &a->topic, &a->group, &a->key, &a->payload, &a->reason };
    const msg_str_t *sb[] = { &b->topic, &b->group, &b->key, &b->payload, &b->reason };
    for (int i = 0; i < 5; i++) {
        if (sa[i]->len != sb[i]->len || (sa[i]->len && memcmp(sa[i]->ptr, sb[i]->ptr, sa[i]->len) != 0)) {
            return 0;
        }
    }
    return b->id == offset && a->created_ms == b->created_ms && a->due_ms == b->due_ms && a->stamp_ms == b->stamp_ms &&
           a->group_gen == b->group_gen && a->reconsume == b->reconsume && a->dest == b->dest;
}

/* The record form is the ordinal, big-endian, then msg_encode's bytes with id 0. */
static void test_record_form_bytes(void)
{
    msg_t m = sample(), zero_id = sample();
    zero_id.id = 0;
    char rec[256], plain[256];
    size_t n = msg_encode_record(&m, UINT32_C(0x01020304), rec, sizeof rec);
    size_t p = msg_encode(&zero_id, plain, sizeof plain);
    TU_REQUIRE(n == p + 4 && n == msg_record_size(&m), "record form is %zu bytes, want %zu (size says %zu)", n, p + 4,
               msg_record_size(&m));
    TU_CHECK(memcmp(rec, "\x01\x02\x03\x04", 4) == 0, "the ordinal is not the first 4 bytes, big-endian");
    TU_CHECK(memcmp(rec + 4, plain, p) == 0, "the bytes past the ordinal are not msg_encode's with id 0");
    TU_CHECK(msg_encode_record(&m, 7, rec, n - 1) == 0, "a buffer one byte short was written to");
    uint32_t ordinal = 0;
    char err[200] = "";
    TU_CHECK(msg_record_ordinal(rec, n, &ordinal, err, sizeof err) == 0 && ordinal == UINT32_C(0x01020304),
             "msg_record_ordinal read %#" PRIx32 " (%s)", ordinal, err);
}

/* Random messages, payloads from 0 bytes to the hard maximum, with and
 * without group, key and reason, at random ordinals: decoded back whole. */
static void test_record_form_round_trip(void)
{
    char *pool = malloc(MSG_HARD_MAX_PAYLOAD + 8);
    size_t cap = MSG_HARD_MAX_PAYLOAD + 4 * MSG_MAX_NAME + MSG_MAX_KEY + MSG_MAX_REASON + 128;
    char *buf = malloc(cap);
    TU_REQUIRE(pool != NULL && buf != NULL, "out of memory");
    for (size_t i = 0; i < MSG_HARD_MAX_PAYLOAD + 8; i++) {
        pool[i] = (char)(i * 131 + 7);
    }
    static const uint32_t edge_payloads[] = { 0, 1, 64, MSG_DEFAULT_MAX_PAYLOAD, MSG_HARD_MAX_PAYLOAD };
    uint64_t rng = UINT64_C(0x9e3779b97f4a7c15);
    int rounds = 2000, failures = 0;
    for (int i = 0; i < rounds && failures < 5; i++) {
        uint32_t payload_len = i < 5 ? edge_payloads[i] : (uint32_t)(next_random(&rng) % 4097);
        msg_t m = random_message(&rng, pool, payload_len), back;
        uint32_t ordinal = i == 0 ? 0 : i == 1 ? UINT32_MAX : (uint32_t)next_random(&rng);
        uint64_t offset = 1 + next_random(&rng) % (UINT64_MAX - 1);
        size_t n = msg_encode_record(&m, ordinal, buf, cap);
        char err[300] = "";
        int ok = n == msg_record_size(&m) && msg_decode_record(buf, n, offset, ordinal, &back, err, sizeof err) == 0 &&
                 same_message(&m, &back, offset);
        TU_CHECK(ok, "round %d (payload %" PRIu32 ", key %" PRIu32 ", ordinal %" PRIu32 "): %s", i, payload_len,
                 m.key.len, ordinal, err[0] ? err : "fields differ");
        failures += !ok;
    }
    free(buf);
    free(pool);
}

/* msg_owned_copy of random messages whose views point into a buffer that is
 * then overwritten (a walk's window refilled): the copy holds the same
 * fields and bytes, each view inside its one buffer (an empty one too), and
 * nothing of the source's buffer. */
static void test_owned_copy(void)
{
    static char pool[8192];
    for (size_t i = 0; i < sizeof pool; i++) {
        pool[i] = (char)(i * 131 + 7);
    }
    char *window = malloc(sizeof pool);
    TU_REQUIRE(window != NULL, "out of memory");
    uint64_t rng = UINT64_C(0x2545f4914f6cdd1d);
    for (int i = 0; i < 500; i++) {
        msg_t want = random_message(&rng, pool, (uint32_t)(next_random(&rng) % 4097)), m = want;
        msg_str_t *views[] = { &m.topic, &m.group, &m.key, &m.payload, &m.reason };
        memcpy(window, pool, sizeof pool);
        for (int v = 0; v < 5; v++) {
            if (views[v]->ptr != NULL) {
                views[v]->ptr = window + (views[v]->ptr - pool);
            }
        }
        msg_owned_t o;
        msg_owned_copy(&o, &m);
        memset(window, 0, sizeof pool);
        const msg_str_t *copied[] = { &o.m.topic, &o.m.group, &o.m.key, &o.m.payload, &o.m.reason };
        size_t total = 0;
        int inside = 1;
        for (int v = 0; v < 5; v++) {
            inside &= copied[v]->ptr >= o.buf && copied[v]->ptr + copied[v]->len <= o.buf + total + copied[v]->len;
            total += copied[v]->len;
        }
        TU_CHECK(same_message(&want, &o.m, want.id) && inside, "copy %d (payload %" PRIu32 ", key %" PRIu32 "): %s", i,
                 want.payload.len, want.key.len, inside ? "fields differ" : "a view outside its buffer");
        msg_owned_free(&o);
        TU_CHECK(o.buf == NULL && o.m.payload.len == 0, "msg_owned_free left copy %d", i);
    }
    free(window);
}

/* A record with every field set, ordinal 5, at RECORD_OFFSET. */
static size_t full_record(char *buf, size_t cap)
{
    msg_t m = sample();
    m.key = (msg_str_t){ "order-17", 8 };
    m.reason = (msg_str_t){ "timeout", 7 };
    return msg_encode_record(&m, 5, buf, cap);
}

/* Every length short of the whole record is refused, naming what is short;
 * a byte more is refused as trailing. */
static void test_record_form_truncations(void)
{
    char buf[300], err[300];
    size_t n = full_record(buf, sizeof buf - 1);
    TU_REQUIRE(n > 4, "full_record wrote nothing");
    msg_t back;
    TU_REQUIRE(msg_decode_record(buf, n, RECORD_OFFSET, 5, &back, err, sizeof err) == 0, "whole record: %s", err);
    for (size_t len = 0; len < n; len++) {
        /* an exact-size copy, so a read past it would be the sanitizer's */
        char *cut = malloc(len ? len : 1);
        TU_REQUIRE(cut != NULL, "out of memory");
        memcpy(cut, buf, len);
        err[0] = '\0';
        int rc = msg_decode_record(cut, len, RECORD_OFFSET, 5, &back, err, sizeof err);
        const char *want = len < 4 ? "shorter than its 4-byte ordinal" : NULL;
        TU_CHECK(rc == -1 && err[0] != '\0' && (want == NULL || strstr(err, want) != NULL) &&
                     (strstr(err, "truncated") != NULL || strstr(err, "runs past the end") != NULL),
                 "a record cut to %zu of %zu bytes: rc %d, '%s'", len, n, rc, err);
        free(cut);
    }
    buf[n] = 0;
    TU_CHECK(msg_decode_record(buf, n + 1, RECORD_OFFSET, 5, &back, err, sizeof err) == -1 &&
                 strstr(err, "1 trailing bytes") != NULL,
             "a record with a byte more: '%s'", err);
}

/* A record read as another ordinal, a foreign version, an id field set, and
 * offset 0 are each refused naming the problem. */
static void test_record_form_refusals(void)
{
    char buf[300], err[300];
    size_t n = full_record(buf, sizeof buf);
    msg_t back;
    TU_CHECK(msg_decode_record(buf, n, RECORD_OFFSET, 6, &back, err, sizeof err) == -1 &&
                 strstr(err, "claims ordinal 5, expected 6") != NULL,
             "ordinal mismatch: '%s'", err);
    TU_CHECK(msg_decode_record(buf, n, 0, 5, &back, err, sizeof err) == -1 && strstr(err, "log offset 0") != NULL,
             "offset 0: '%s'", err);
    buf[4] = 2; /* the version byte, past the ordinal */
    TU_CHECK(msg_decode_record(buf, n, RECORD_OFFSET, 5, &back, err, sizeof err) == -1 &&
                 strstr(err, "unknown format version 2") != NULL,
             "version 2: '%s'", err);
    buf[4] = 1;
    buf[4 + 6 + 7] = 9; /* the id field's last byte */
    TU_CHECK(msg_decode_record(buf, n, RECORD_OFFSET, 5, &back, err, sizeof err) == -1 &&
                 strstr(err, "carries id 9") != NULL,
             "id field 9: '%s'", err);
}

/* The slot at the record's ordinal must name the record's offset back. */
static void test_record_form_slot_check(void)
{
    char err[300] = "";
    slot_t mine = { RECORD_OFFSET, 3, 0, 42 }, other = { RECORD_OFFSET + 256, 3, 0, 43 };
    TU_CHECK(msg_record_slot_check(RECORD_OFFSET, 5, &mine, err, sizeof err) == 0, "its own slot refused: %s", err);
    mine.flags = SLOT_REVOKED;
    TU_CHECK(msg_record_slot_check(RECORD_OFFSET, 5, &mine, err, sizeof err) == 0,
             "a revoked slot naming the record refused (the caller judges flags): %s", err);
    char want[128];
    snprintf(want, sizeof want, "ordinal 5, whose where-slot names id %" PRIu64, RECORD_OFFSET + 256);
    TU_CHECK(msg_record_slot_check(RECORD_OFFSET, 5, &other, err, sizeof err) == -1 && strstr(err, want) != NULL,
             "another record's slot: '%s'", err);
}

static const tu_test_t codec_tests[] = {
    { "be64 bytes", test_be64_bytes },
    { "be32 bytes", test_be32_bytes },
    { "record bytes", test_record_bytes },
    { "record round trip", test_record_round_trip },
    { "record form bytes", test_record_form_bytes },
    { "record form round trip", test_record_form_round_trip },
    { "record form truncations", test_record_form_truncations },
    { "record form refusals", test_record_form_refusals },
    { "record form slot check", test_record_form_slot_check },
    { "an owned copy holds its own bytes", test_owned_copy },
    { NULL, NULL },
};

static const tu_suite_t suites[] = {
    { "codec", codec_tests },
};

int main(int argc, char **argv)
{
    return tu_suites_main(argc, argv, suites, sizeof suites / sizeof suites[0], NULL, NULL);
}
