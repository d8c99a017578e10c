/*
 * tests/fuzz/fuzz_store_codec.c — libFuzzer target: the codecs of what a data
 * directory holds on disk (levels/msg.c's message record, levels/keys.c's
 * small records and key parsers), the bytes --check-data and store_open read
 * from a directory that may be damaged.
 *
 * The first input byte picks the codec, the rest is the stored value or key.
 * Every decoder must refuse or accept without reading past the bytes it was
 * given (AddressSanitizer sees each input in an allocation of its exact size),
 * a refused message record must say why, and what is accepted must encode
 * back to exactly the bytes it came from (the layouts are canonical; an old
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

#define CHECK(cond)                                                                              \
    do {                                                                                         \
        if (!(cond)) {                                                                           \
            fprintf(stderr, "fuzz_store_codec: check failed at line %d: %s\n", __LINE__, #cond); \
            abort();                                                                             \
        }                                                                                        \
    } while (0)

enum codec {
    CODEC_MESSAGE,
    CODEC_LEVEL_RECORD,
    CODEC_TOPIC_RECORD,
    CODEC_GROUP_RECORD,
    CODEC_LEASE_INDEX_VALUE,
    CODEC_LEVEL_KEY,
    CODEC_LEASE_KEY,
    CODEC_LEASE_INDEX_KEY,
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

static void fuzz_level_record(const char *v, size_t n)
{
    record_level_t r;
    char again[RECORD_LEVEL_BYTES];
    if (record_level_decode(v, n, &r) == 0) {
        record_level_encode(&r, again);
        CHECK(n == RECORD_LEVEL_BYTES && memcmp(again, v, n) == 0);
    }
}

static void fuzz_topic_record(const char *v, size_t n)
{
    record_topic_t r;
    char again[RECORD_TOPIC_BYTES];
    if (record_topic_decode(v, n, &r) == 0) {
        record_topic_encode(&r, again);
        CHECK(n == RECORD_TOPIC_BYTES || n == RECORD_TOPIC_OLD);
        CHECK(memcmp(again, v, n) == 0);
        CHECK(n == RECORD_TOPIC_BYTES || r.delayed == 0);
    }
}

static void fuzz_group_record(const char *v, size_t n)
{
    record_group_t r;
    char again[RECORD_GROUP_MAX];
    if (record_group_decode(v, n, &r) == 0) {
        CHECK(r.topic_len >= 1 && r.topic_len <= MSG_MAX_NAME);
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
        CHECK(glen >= 1 && group + glen + 9 == k + n);
        if (glen <= MSG_MAX_NAME) { /* a longer group cannot be a key_buf_t's */
            key_lease(&again, deadline, group, glen, id);
            CHECK(again.n == n && memcmp(again.b + 1, k + 1, n - 1) == 0);
        }
    }
}

static void fuzz_lease_index_key(const char *k, size_t n)
{
    const char *group;
    size_t glen;
    uint64_t id;
    key_buf_t again;
    if (key_lease_index_parse(k, n, &group, &glen, &id) == 0) {
        CHECK(glen >= 1 && group + glen + 9 == k + n);
        if (glen <= MSG_MAX_NAME) {
            key_queue(&again, KEY_LEASE_INDEX, group, glen, id);
            CHECK(again.n == n && memcmp(again.b + 1, k + 1, n - 1) == 0);
        }
    }
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
    case CODEC_COUNT:
        break;
    }
    free(v);
    return 0;
}
