/*
 * levels/keys.c — the store's small records and the keys only the records
 * and the checker use (the layout and its invariants: keys.h; the hot key
 * builders and parsers are inline there).
 *
 * Nothing here touches LevelDB: keys are built into caller buffers and parsed
 * as views, and every parser checks lengths first, so a corrupt key or record
 * is reported by the caller, never read past. Pure; any thread.
 */
#include "levels/keys.h"

#include <stdio.h>

void key_meta(key_buf_t *k, const char *name)
{
    key_start(k, KEY_META);
    key_bytes(k, name, strlen(name));
}

void key_level_record(key_buf_t *k, int level)
{
    key_start(k, KEY_LEVEL_RECORD);
    key_u8(k, (uint8_t)level);
}

void key_record(key_buf_t *k, enum key_tag tag, const char *name, size_t len)
{
    key_start(k, tag);
    key_bytes(k, name, len);
}

int key_queue_entry_parse(const char *key, size_t klen, const char **name, size_t *len, uint64_t *n)
{
    if (klen < 1 + 2 + 8 || key[klen - 9] != '\0' || !key_name_ok(key + 1, klen - 1 - 1 - 8)) {
        return -1;
    }
    *name = key + 1;
    *len = klen - 1 - 1 - 8;
    *n = be64_get(key + klen - 8);
    return 0;
}

int key_lease_index_parse(const char *key, size_t klen, const char **group, size_t *glen, uint64_t *id)
{
    return key_queue_entry_parse(key, klen, group, glen, id);
}

int key_copy_index_parse(const char *key, size_t klen, uint64_t *id, const char **group, size_t *glen, uint64_t *gen)
{
    return key_lease_parse(key, klen, id, group, glen, gen); /* the same shape: tag u64 name 0x00 u64 */
}

int key_record_parse(const char *key, size_t klen, const char **name, size_t *len)
{
    if (klen < 2 || !key_name_ok(key + 1, klen - 1)) {
        return -1;
    }
    *name = key + 1;
    *len = klen - 1;
    return 0;
}

int key_index_parse(const char *key, size_t klen, key_index_parsed_t *out)
{
    /* the topic ends at the first 0x00: a longer scan than MSG_MAX_NAME + 1 finds a damaged one */
    size_t scan = klen - 1 < MSG_MAX_NAME + 1 ? klen - 1 : MSG_MAX_NAME + 1;
    const char *zero = klen > 1 ? memchr(key + 1, 0, scan) : NULL;
    if (zero == NULL || !key_name_ok(key + 1, (size_t)(zero - key - 1)) || (size_t)(zero - key) + 3 > klen) {
        return -1;
    }
    size_t key_len = be16_get(zero + 1);
    size_t prefix_len = (size_t)(zero - key) + 3 + key_len;
    if (key_len == 0 || key_len > MSG_MAX_KEY || (klen != prefix_len && klen != prefix_len + 8)) {
        return -1;
    }
    out->topic = key + 1;
    out->topic_len = (size_t)(zero - key - 1);
    out->key = zero + 3;
    out->key_len = key_len;
    out->prefix_len = prefix_len;
    out->is_entry = klen != prefix_len;
    out->id = out->is_entry ? be64_get(key + prefix_len) : 0;
    return 0;
}

const char *key_describe(const char *key, size_t klen, char *out, size_t outlen)
{
    static const char hex[] = "0123456789abcdef";
    size_t shown = klen < 64 ? klen : 64, n = 0;
    if (outlen < KEY_DESCRIBE_BYTES) {
        out[0] = '\0'; /* too small to hold a description: say nothing rather than cut one */
        return out;
    }
    out[n++] = '"';
    for (size_t i = 0; i < shown; i++) {
        unsigned char c = (unsigned char)key[i];
        if (c >= 0x20 && c < 0x7f && c != '"' && c != '\\') {
            out[n++] = (char)c;
        } else {
            out[n++] = '\\';
            out[n++] = 'x';
            out[n++] = hex[c >> 4];
            out[n++] = hex[c & 15];
        }
    }
    out[n++] = '"';
    snprintf(out + n, outlen - n, "%s (%zu bytes)", shown < klen ? "..." : "", klen);
    return out;
}

void record_level_encode(const record_level_t *r, char *out)
{
    be64_put(out, r->depth);
    be64_put(out + 8, r->head_due);
    be64_put(out + 16, r->head_seq);
    be64_put(out + 24, r->last_enqueue_ms);
    be64_put(out + 32, r->cq_head);
    be64_put(out + 40, r->cq_tail);
    be64_put(out + 48, r->retries);
    be64_put(out + 56, r->flags);
}

int record_level_decode(const char *v, size_t vlen, record_level_t *r)
{
    if (vlen != RECORD_LEVEL_BYTES && vlen != RECORD_LEVEL_CQ && vlen != RECORD_LEVEL_OLD) {
        return -1;
    }
    r->depth = be64_get(v);
    r->head_due = be64_get(v + 8);
    r->head_seq = be64_get(v + 16);
    r->last_enqueue_ms = be64_get(v + 24);
    r->cq_head = vlen >= RECORD_LEVEL_CQ ? be64_get(v + 32) : 0;
    r->cq_tail = vlen >= RECORD_LEVEL_CQ ? be64_get(v + 40) : 0;
    r->retries = vlen == RECORD_LEVEL_BYTES ? be64_get(v + 48) : 0;
    r->flags = vlen == RECORD_LEVEL_BYTES ? be64_get(v + 56) : r->depth > 0 ? RECORD_LEVEL_ON_L : 0;
    return 0;
}

void record_topic_encode(const record_topic_t *r, char *out)
{
    be64_put(out, r->appended);
    be64_put(out + 8, r->removed);
    be64_put(out + 16, r->delayed);
    be64_put(out + 24, r->queue);
    be64_put(out + 32, r->cq_seq_base);
    be64_put(out + 40, r->cq_head);
    be64_put(out + 48, r->cq_tail);
}

int record_topic_decode(const char *v, size_t vlen, record_topic_t *r)
{
    if (vlen != RECORD_TOPIC_BYTES && vlen != RECORD_TOPIC_DELAYED && vlen != RECORD_TOPIC_OLD) {
        return -1;
    }
    memset(r, 0, sizeof *r);
    r->appended = be64_get(v);
    r->removed = be64_get(v + 8);
    r->delayed = vlen >= RECORD_TOPIC_DELAYED ? be64_get(v + 16) : 0;
    if (vlen == RECORD_TOPIC_BYTES) {
        uint64_t q = be64_get(v + 24);
        if (q > UINT32_MAX) {
            return -1;
        }
        r->queue = (uint32_t)q;
        r->cq_seq_base = be64_get(v + 32);
        r->cq_head = be64_get(v + 40);
        r->cq_tail = be64_get(v + 48);
        if (r->cq_tail < r->cq_head || r->cq_seq_base + r->cq_tail < r->cq_seq_base) {
            return -1;
        }
    }
    return 0;
}

size_t record_group_encode(const record_group_t *r, char *out)
{
    char *p = out;
    *p++ = RECORD_GROUP_VERSION;
    be32_put(p, r->max_reconsume);
    p += 4;
    const uint64_t f[9] = { r->gen,      r->cursor, r->position,   r->retry_ready, r->retry_delayed,
                            r->inflight, r->dlq,    r->created_ms, r->flags };
    for (int i = 0; i < 9; i++) {
        be64_put(p, f[i]);
        p += 8;
    }
    be16_put(p, (uint16_t)r->topic_len);
    p += 2;
    memcpy(p, r->topic, r->topic_len);
    return (size_t)(p + r->topic_len - out);
}

int record_group_decode(const char *v, size_t vlen, record_group_t *r)
{
    if (vlen < RECORD_GROUP_FIXED || v[0] != RECORD_GROUP_VERSION) {
        return -1;
    }
    const char *p = v + 1;
    r->max_reconsume = be32_get(p);
    p += 4;
    uint64_t f[9];
    for (int i = 0; i < 9; i++) {
        f[i] = be64_get(p);
        p += 8;
    }
    r->gen = f[0];
    r->cursor = f[1];
    r->position = f[2];
    r->retry_ready = f[3];
    r->retry_delayed = f[4];
    r->inflight = f[5];
    r->dlq = f[6];
    r->created_ms = f[7];
    r->flags = f[8];
    r->topic_len = be16_get(p);
    p += 2;
    if ((size_t)(v + vlen - p) != r->topic_len || !key_name_ok(p, r->topic_len)) {
        return -2;
    }
    r->topic = p;
    return 0;
}

int record_lease_index_decode(const char *v, size_t vlen, uint64_t *deadline, uint64_t *log_seq)
{
    if (vlen != 8 && vlen != 16) {
        return -1;
    }
    *deadline = be64_get(v);
    *log_seq = vlen == 16 ? be64_get(v + 8) : 0;
    return vlen == 16 && *log_seq == 0 ? -1 : 0;
}
