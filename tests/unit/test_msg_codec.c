/*
 * tests/unit/test_msg_codec.c — CUnit suite "codec" of levels/keys.h's
 * big-endian integers and levels/msg.c's message record: the exact bytes
 * written for known values (the stored format: a record or key written by
 * one build is read by the next), the values read back, and a record cut
 * short refused. Pure logic: no store, no temp directory.
 * Run alone: ./tests/unit/test_msg_codec [suite [test]].
 */
#include "levels/keys.h"
#include "levels/msg.h"
#include "tests/helpers/testutil.h"

#include <CUnit/CUnit.h>
#include <inttypes.h>
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
}

static const tu_test_t codec_tests[] = {
    { "be64 bytes", test_be64_bytes },
    { "be32 bytes", test_be32_bytes },
    { "record bytes", test_record_bytes },
    { "record round trip", test_record_round_trip },
    { NULL, NULL },
};

static const tu_suite_t suites[] = {
    { "codec", codec_tests },
};

int main(int argc, char **argv)
{
    return tu_suites_main(argc, argv, suites, sizeof suites / sizeof suites[0], NULL, NULL);
}
