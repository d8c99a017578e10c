/*
 * lib/consumer.h — the consumer loop of libhourglass (internal part).
 *
 * The public API (hg_consumer_new / run / stop / stats / free) is in
 * <hourglass/hourglass.h>. This header holds the pieces consumer.c shares
 * with the rest of the library and the tests: decoding a PULL reply and the
 * name check the broker applies to groups and topics.
 */
#ifndef HG_LIB_CONSUMER_H
#define HG_LIB_CONSUMER_H

#include "include/hourglass/hourglass.h"
#include "proto/client.h"

#include <stddef.h>

/* Decode one element of a PULL reply, [id, topic, key, payload, reconsume,
 * due_ms] (docs/broker.md), into *m. The pointers in *m point into r and
 * live as long as it; attempt and worker are set to 0. Returns 0, or -1 with
 * why[whylen] naming what is wrong ("element 4 (reconsume) is a bulk, want
 * an integer"). */
int consumer_parse_message(const resp_reply_t *r, hg_message_t *m, char *why, size_t whylen);

/* 1 when name is a valid group or topic name: 1..255 bytes of printable
 * ASCII without blanks (0x21..0x7e), as the broker requires. */
int consumer_valid_name(const char *name);

#endif
