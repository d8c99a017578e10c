/*
 * tests/fuzz/fuzz_store_codec.c — libFuzzer target: the codecs of what a data
 * directory holds on disk (levels/msg.c's message record, levels/keys.c's
 * small records and key parsers, which hand back only names the layout
 * allows: 1..MSG_MAX_NAME bytes without 0x00), the bytes --check-data and store_open read
 * from a directory that may be damaged.
 *
 * The first input byte picks the codec, the rest is the stored value or key.
 * Every decoder must refuse or accept without reading past the bytes it was
 * given (AddressSanitizer sees each input in an allocation of its exact size),
 * a refused message record must say why, and what is accepted must encode
 * back to exactly the bytes it came from (the commit log's record form too:
 * accepted exactly when the bytes past its ordinal are a record with id 0,
 * refused at any other ordinal, its id the offset it was read at) (the layouts are canonical; an old
 * 16-byte topic record comes back as the 24-byte one with delayed 0). A
 * failed check calls abort(), which libFuzzer reports as a crash.
 */
#include "levels/keys.h"
#include "levels/msg.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#include "tests/fuzz/fuzz_check.h"

enum codec {
    CODEC_MESSAGE,
    CODEC_LEVEL_RECORD,
    CODEC_TOPIC_RECORD,
    CODEC_GROUP_RECORD,
    CODEC_LEASE_INDEX_VALUE,
    CODEC_LEVEL_KEY,
    CODEC_LEASE_KEY,
    CODEC_LEASE_INDEX_KEY,
    CODEC_RECORD_KEY, /* appended: the seeds' first bytes keep their codecs */
    CODEC_COPY_INDEX_KEY,
    CODEC_KEY_INDEX_KEY,
    CODEC_MESSAGE_RECORD,
    CODEC_COUNT
};

static void fuzz_message(const char *v, size_t n)
{
    msg_t m;
    char err[256] = "";
    if (msg_decode(v, n, &m, err, sizeof err) != 0) {
        CHECK(err[0] != '\0');
        return;
    }
    size_t need = msg_encoded_size(&m);
    CHECK(need == n);
    char *again = malloc(need);
    CHECK(again != NULL);
    CHECK(msg_encode(&m, again, need) == n);
    CHECK(memcmp(again, v, n) == 0);
    msg_owned_t owned = { 0 };
    msg_owned_copy(&owned, &m);
    CHECK(owned.m.id == m.id && owned.m.payload.len == m.payload.len);
    msg_owned_free(&owned);
    free(again);
}

#define FUZZ_RECORD_OFFSET UINT64_C(4096) /* where the record form is "read" */

static void fuzz_message_record(const char *v, size_t n)
{
    msg_t m, plain;
    char err[256] = "";
    uint32_t ordinal;
    if (msg_record_ordinal(v, n, &ordinal, err, sizeof err) != 0) {
        CHECK(n < MSG_RECORD_ORDINAL_BYTES && err[0] != '\0');
        CHECK(msg_decode_record(v, n, FUZZ_RECORD_OFFSET, 0, &m, err, sizeof err) == -1);
        return;
    }
    char plain_err[256];
    int body_ok = msg_decode(v + MSG_RECORD_ORDINAL_BYTES, n - MSG_RECORD_ORDINAL_BYTES, &plain, plain_err,
                             sizeof plain_err) == 0 &&
                  plain.id == 0;
    err[0] = '\0';
    if (msg_decode_record(v, n, FUZZ_RECORD_OFFSET, ordinal, &m, err, sizeof err) != 0) {
        CHECK(!body_ok && err[0] != '\0');
        return;
    }
    CHECK(body_ok && m.id == FUZZ_RECORD_OFFSET && msg_record_size(&m) == n);
    char *again = malloc(n);
    CHECK(again != NULL);
    CHECK(msg_encode_record(&m, ordinal, again, n) == n);
    CHECK(memcmp(again, v, n) == 0);
    free(again);
    err[0] = '\0';
    CHECK(msg_decode_record(v, n, FUZZ_RECORD_OFFSET, ordinal + 1, &m, err, sizeof err) == -1 &&
          strstr(err, "claims ordinal") != NULL);
    slot_t mine = { FUZZ_RECORD_OFFSET, 0, 0, 0 }, other = { FUZZ_RECORD_OFFSET + 8, 0, 0, 0 };
    CHECK(msg_record_slot_check(FUZZ_RECORD_OFFSET, ordinal, &mine, err, sizeof err) == 0);
    CHECK(msg_record_slot_check(FUZZ_RECORD_OFFSET, ordinal, &other, err, sizeof err) == -1);
}

static void fuzz_level_record(const char *v, size_t n)
{
    record_level_t r;
    char again[RECORD_LEVEL_BYTES];
    if (record_level_decode(v, n, &r) == 0) {
        record_level_encode(&r, again);
        CHECK(n == RECORD_LEVEL_BYTES ? memcmp(again, v, n) == 0 : n == RECORD_LEVEL_CQ || n == RECORD_LEVEL_OLD);
    }
}

static void fuzz_topic_record(const char *v, size_t n)
{
    record_topic_t r;
    char again[RECORD_TOPIC_BYTES];
    if (record_topic_decode(v, n, &r) == 0) {
        record_topic_encode(&r, again);
        CHECK(n == RECORD_TOPIC_BYTES || n == RECORD_TOPIC_DELAYED || n == RECORD_TOPIC_OLD);
        CHECK(memcmp(again, v, n) == 0); /* a shorter record is the longer one's prefix */
        CHECK(n >= RECORD_TOPIC_DELAYED || r.delayed == 0);
        CHECK(n == RECORD_TOPIC_BYTES || (r.queue == 0 && r.cq_seq_base == 0 && r.cq_head == 0 && r.cq_tail == 0));
        CHECK(r.cq_head <= r.cq_tail);
    }
}

static void fuzz_group_record(const char *v, size_t n)
{
    record_group_t r;
    char again[RECORD_GROUP_MAX];
    if (record_group_decode(v, n, &r) == 0) {
        CHECK(key_name_ok(r.topic, r.topic_len));
        CHECK(record_group_encode(&r, again) == n);
        CHECK(memcmp(again, v, n) == 0);
    }
}

static void fuzz_lease_index_value(const char *v, size_t n)
{
    uint64_t deadline, log_seq;
    if (record_lease_index_decode(v, n, &deadline, &log_seq) == 0) {
        CHECK(n == 8 || (n == 16 && log_seq != 0));
    }
}

static void fuzz_level_key(const char *k, size_t n)
{
    int level;
    uint64_t due, seq;
    key_buf_t again;
    if (key_level_parse(k, n, &level, &due, &seq) == 0) {
        key_level(&again, level, due, seq);
        CHECK(again.n == n && memcmp(again.b + 1, k + 1, n - 1) == 0);
    }
}

static void fuzz_lease_key(const char *k, size_t n)
{
    uint64_t deadline, id;
    const char *group;
    size_t glen;
    key_buf_t again;
    if (key_lease_parse(k, n, &deadline, &group, &glen, &id) == 0) {
        CHECK(key_name_ok(group, glen) && group + glen + 9 == k + n);
        key_lease(&again, deadline, group, glen, id);
        CHECK(again.n == n && memcmp(again.b + 1, k + 1, n - 1) == 0);
    }
}

static void fuzz_lease_index_key(const char *k, size_t n)
{
    const char *group;
    size_t glen;
    uint64_t id;
    key_buf_t again;
    if (key_lease_index_parse(k, n, &group, &glen, &id) == 0) {
        CHECK(key_name_ok(group, glen) && group + glen + 9 == k + n);
        key_queue(&again, KEY_LEASE_INDEX, group, glen, id);
        CHECK(again.n == n && memcmp(again.b + 1, k + 1, n - 1) == 0);
    }
}

/* Every parser below hands back only names key_name_ok allows, so the key
 * they came from builds again in a key_buf_t to exactly its bytes. */
static void fuzz_record_key(const char *k, size_t n)
{
    const char *name;
    size_t len;
    key_buf_t again;
    if (key_record_parse(k, n, &name, &len) == 0) {
        CHECK(key_name_ok(name, len) && name + len == k + n);
        key_record(&again, KEY_GROUP_RECORD, name, len);
        CHECK(again.n == n && memcmp(again.b + 1, k + 1, n - 1) == 0);
    }
}

static void fuzz_copy_index_key(const char *k, size_t n)
{
    uint64_t id, gen;
    const char *group;
    size_t glen;
    key_buf_t again;
    if (key_copy_index_parse(k, n, &id, &group, &glen, &gen) == 0) {
        CHECK(key_name_ok(group, glen) && group + glen + 9 == k + n);
        key_copy_index(&again, id, group, glen, gen);
        CHECK(again.n == n && memcmp(again.b + 1, k + 1, n - 1) == 0);
    }
}

static void fuzz_key_index_key(const char *k, size_t n)
{
    key_index_parsed_t p;
    key_buf_t again;
    if (key_index_parse(k, n, &p) == 0) {
        CHECK(key_name_ok(p.topic, p.topic_len) && p.key_len >= 1 && p.key_len <= MSG_MAX_KEY);
        key_key_prefix(&again, p.topic, p.topic_len, p.key, p.key_len);
        CHECK(again.n == p.prefix_len);
        if (p.is_entry) {
            key_u64(&again, p.id);
        }
        CHECK(again.n == n && memcmp(again.b + 1, k + 1, n - 1) == 0);
    }
    char d[KEY_DESCRIBE_BYTES];
    key_describe(k, n, d, sizeof d);
    CHECK(strlen(d) >= 2 + 8 && strcmp(d + strlen(d) - 7, " bytes)") == 0); /* never cut: it ends with the length */
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1) {
        return 0;
    }
    enum codec codec = (enum codec)(data[0] % CODEC_COUNT);
    size_t n = size - 1;
    /* an allocation of exactly n bytes, so a read past the end is ASan's */
    char *v = malloc(n ? n : 1);
    CHECK(v != NULL);
    memcpy(v, data + 1, n);
    switch (codec) {
    case CODEC_MESSAGE:
        fuzz_message(v, n);
        break;
    case CODEC_LEVEL_RECORD:
        fuzz_level_record(v, n);
        break;
    case CODEC_TOPIC_RECORD:
        fuzz_topic_record(v, n);
        break;
    case CODEC_GROUP_RECORD:
        fuzz_group_record(v, n);
        break;
    case CODEC_LEASE_INDEX_VALUE:
        fuzz_lease_index_value(v, n);
        break;
    case CODEC_LEVEL_KEY:
        fuzz_level_key(v, n);
        break;
    case CODEC_LEASE_KEY:
        fuzz_lease_key(v, n);
        break;
    case CODEC_LEASE_INDEX_KEY:
        fuzz_lease_index_key(v, n);
        break;
    case CODEC_RECORD_KEY:
        fuzz_record_key(v, n);
        break;
    case CODEC_COPY_INDEX_KEY:
        fuzz_copy_index_key(v, n);
        break;
    case CODEC_KEY_INDEX_KEY:
        fuzz_key_index_key(v, n);
        break;
    case CODEC_MESSAGE_RECORD:
        fuzz_message_record(v, n);
        break;
    case CODEC_COUNT:
        break;
    }
    free(v);
    return 0;
}
