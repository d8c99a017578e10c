/*
 * lib/rmq_record.c — a message's record in the RabbitMQ transport
 * (rmq_msg_t): decoded from an AMQP message (its body, message-id and
 * hg-* headers; an unknown or mistyped header is ignored, counts are
 * capped), freed, counted on a list; and a fresh message id. Pure: no
 * connection, any thread.
 */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include "lib/rmq.h"

#include "base/alloc.h"
#include "base/clock.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

uint64_t rmq_wall_ms(void)
{
    return clock_wall_ms();
}

void rmq_new_id(char id[HG_ID_MAX])
{
    uint64_t v = 0;
    if (getrandom(&v, sizeof(v), 0) != (ssize_t)sizeof(v))
        v = ((uint64_t)rand() << 32) ^ (uint64_t)rand() ^ rmq_wall_ms();
    snprintf(id, HG_ID_MAX, "%016" PRIx64, v);
}

/* ------------------------------------------------------------------------
 * Messages: encoding and decoding
 * ------------------------------------------------------------------------ */

void rmq_msg_free(rmq_msg_t *m)
{
    if (m == NULL)
        return;
    free(m->topic);
    free(m->key);
    free(m->payload);
    free(m->plan);
    free(m->dest);
    free(m->reason);
    free(m->group);
    free(m);
}

size_t rmq_msg_list_count(const rmq_msg_t *m)
{
    size_t n = 0;
    for (; m != NULL; m = m->next)
        n++;
    return n;
}

void rmq_msg_list_free(rmq_msg_t *m)
{
    while (m != NULL) {
        rmq_msg_t *next = m->next;
        rmq_msg_free(m);
        m = next;
    }
}

static char *dup_bytes(amqp_bytes_t b, size_t *len)
{
    char *s = xmalloc(b.len + 1);
    if (b.len > 0)
        memcpy(s, b.bytes, b.len);
    s[b.len] = '\0';
    if (len != NULL)
        *len = b.len;
    return s;
}

static int field_int(const amqp_field_value_t *v, long long *out)
{
    switch (v->kind) {
    case AMQP_FIELD_KIND_I8:
        *out = v->value.i8;
        return 0;
    case AMQP_FIELD_KIND_U8:
        *out = v->value.u8;
        return 0;
    case AMQP_FIELD_KIND_I16:
        *out = v->value.i16;
        return 0;
    case AMQP_FIELD_KIND_U16:
        *out = v->value.u16;
        return 0;
    case AMQP_FIELD_KIND_I32:
        *out = v->value.i32;
        return 0;
    case AMQP_FIELD_KIND_U32:
        *out = v->value.u32;
        return 0;
    case AMQP_FIELD_KIND_I64:
        *out = v->value.i64;
        return 0;
    case AMQP_FIELD_KIND_U64:
        *out = (long long)v->value.u64;
        return 0;
    default:
        return -1;
    }
}

rmq_msg_t *rmq_msg_decode(const amqp_basic_properties_t *p, const amqp_bytes_t *body, uint64_t tag)
{
    rmq_msg_t *m = xcalloc(1, sizeof(*m));

    m->tag = tag;
    m->max_reconsume = -1;
    m->payload = dup_bytes(*body, &m->payload_len);
    if ((p->_flags & AMQP_BASIC_MESSAGE_ID_FLAG) && p->message_id.len < HG_ID_MAX) {
        memcpy(m->id, p->message_id.bytes, p->message_id.len);
        m->id[p->message_id.len] = '\0';
    }
    if (p->_flags & AMQP_BASIC_HEADERS_FLAG) {
        for (int i = 0; i < p->headers.num_entries; i++) {
            const amqp_table_entry_t *e = &p->headers.entries[i];
            int is_str = e->value.kind == AMQP_FIELD_KIND_UTF8 || e->value.kind == AMQP_FIELD_KIND_BYTES;
            char name[32];
            long long n = 0;
            snprintf(name, sizeof(name), "%.*s", (int)e->key.len, (const char *)e->key.bytes);
            if (is_str && strcmp(name, RMQ_H_TOPIC) == 0 && m->topic == NULL)
                m->topic = dup_bytes(e->value.value.bytes, NULL);
            else if (is_str && strcmp(name, RMQ_H_KEY) == 0 && m->key == NULL)
                m->key = dup_bytes(e->value.value.bytes, &m->key_len);
            else if (is_str && strcmp(name, RMQ_H_PLAN) == 0 && m->plan == NULL)
                m->plan = dup_bytes(e->value.value.bytes, NULL);
            else if (is_str && strcmp(name, RMQ_H_DEST) == 0 && m->dest == NULL)
                m->dest = dup_bytes(e->value.value.bytes, NULL);
            else if (is_str && strcmp(name, RMQ_H_REASON) == 0 && m->reason == NULL)
                m->reason = dup_bytes(e->value.value.bytes, NULL);
            else if (is_str && strcmp(name, RMQ_H_GROUP) == 0 && m->group == NULL)
                m->group = dup_bytes(e->value.value.bytes, NULL);
            else if (field_int(&e->value, &n) == 0 && n >= 0) {
                if (strcmp(name, RMQ_H_DUE) == 0)
                    m->due_ms = (uint64_t)n;
                else if (strcmp(name, RMQ_H_RECONSUME) == 0)
                    m->reconsume = n > 1000000 ? 1000000 : (unsigned)n;
                else if (strcmp(name, RMQ_H_PARKED) == 0)
                    m->parked_ms = (uint64_t)n;
                else if (strcmp(name, RMQ_H_CREATED) == 0)
                    m->created_ms = (uint64_t)n;
                else if (strcmp(name, RMQ_H_MAXRETRY) == 0)
                    m->max_reconsume = (long)n;
                else if (strcmp(name, RMQ_H_DELIVERY) == 0)
                    m->delivery_count = n > 1000000 ? 1000000 : (unsigned)n;
            }
        }
    }
    if (m->topic == NULL)
        m->topic = xstrdup("");
    return m;
}
