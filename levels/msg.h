/*
 * levels/msg.h — a message as the level engine stores it, and its codec.
 *
 * A message keeps its id for life. Its value in LevelDB is a compact, versioned
 * binary record; msg_decode validates every length against the record so a
 * corrupt value is reported, never read past. Strings are (pointer, length)
 * views: binary-safe, not NUL-terminated.
 *
 * Pure logic, no I/O; thread-safe.
 */
#ifndef HG_LEVELS_MSG_H
#define HG_LEVELS_MSG_H

#include "levels/slot.h"

#include <stddef.h>
#include <stdint.h>

#define MSG_MAX_NAME            255         /* topic and group names, bytes */
#define MSG_MAX_KEY             1024        /* message key, bytes */
#define MSG_MAX_REASON          1024        /* failure reason, bytes */
#define MSG_HARD_MAX_PAYLOAD    (64u << 20) /* no configuration may exceed this */
#define MSG_DEFAULT_MAX_PAYLOAD (4u << 20)

/* Where a message goes when its (last) delay hop is due. */
typedef enum msg_dest {
    MSG_DEST_TOPIC = 0, /* the topic log: a new message, every group gets it */
    MSG_DEST_GROUP = 1  /* one group's retry-ready queue: a retry */
} msg_dest_t;

typedef struct msg_str {
    const char *ptr;
    uint32_t len;
} msg_str_t;

typedef struct msg {
    uint64_t id;         /* assigned at SEND, never changes */
    uint64_t created_ms; /* when SEND accepted it */
    uint64_t due_ms;     /* when the current journey (send or retry) ends */
    uint64_t stamp_ms;   /* range-specific: entered the topic log / DLQ */
    uint64_t group_gen;  /* for MSG_DEST_GROUP: the group incarnation it belongs to */
    uint32_t reconsume;  /* failures so far (DESIGN §3) */
    uint8_t dest;        /* msg_dest_t */
    msg_str_t topic;
    msg_str_t group; /* set once a group took it (retry, lease, DLQ) */
    msg_str_t key;
    msg_str_t payload;
    msg_str_t reason; /* the last failure reason (NACK REASON / lease expired) */
} msg_t;

/* Bytes msg_encode will write for m. */
size_t msg_encoded_size(const msg_t *m);

/* Encode m into out[outlen] (outlen >= msg_encoded_size(m)). Returns the bytes
 * written, or 0 if out is too small. */
size_t msg_encode(const msg_t *m, char *out, size_t outlen);

/* Decode a stored value. The string views in *m point into buf, which must
 * outlive them. Returns 0, or -1 with the problem in err (unknown version,
 * truncated record, a length past the end, trailing bytes, bad dest) and *m
 * zeroed. */
int msg_decode(const char *buf, size_t len, msg_t *m, char *err, size_t errlen);

/* The record form: the payload of a message record in the commit log
 * (docs/design-commitlog.md §2, §10 "Message record form (s42)"). It is
 * u32 ordinal (big-endian: the record's position among its segment's message
 * records, its where-slot's index) followed by msg_encode's bytes with the id
 * field 0: a message's id is its record's log offset, which clog hands out
 * only when it copies the payload (redo_add_message), so the record does not
 * repeat it; the decoder takes it from the caller's read. */
#define MSG_RECORD_ORDINAL_BYTES 4

/* Bytes msg_encode_record will write for m. */
size_t msg_record_size(const msg_t *m);

/* Encode m as the record at ordinal into out[outlen] (m->id is not written).
 * Returns the bytes written, or 0 if out is smaller than msg_record_size(m). */
size_t msg_encode_record(const msg_t *m, uint32_t ordinal, char *out, size_t outlen);

/* The ordinal a record claims, read before its slot is fetched. 0, or -1 with
 * err when the record is shorter than the ordinal. */
int msg_record_ordinal(const char *buf, size_t len, uint32_t *ordinal, char *err, size_t errlen);

/* Decode a record read at log offset `offset` (its id, never 0) that must sit
 * at `ordinal` (the where-slot the caller looked up, or the count of message
 * records before it in a walk of its segment). m->id = offset; the string
 * views point into buf. Returns 0, or -1 with err naming the problem (and
 * *m undefined): a
 * record shorter than its ordinal, an ordinal other than the one expected, an
 * id field that is not 0, offset 0, or msg_decode's (unknown version,
 * truncation, a length past the end, trailing bytes, bad dest). */
int msg_decode_record(const char *buf, size_t len, uint64_t offset, uint32_t ordinal, msg_t *m, char *err,
                      size_t errlen);

/* The where-slot cross-check (§2: a record at an offset is trusted only when
 * its slot names it back): slot is the one read at the ordinal the record at
 * offset claims. 0 when slot->id == offset; else -1 with err naming the
 * offset, the ordinal and the id the slot names. The slot's flags
 * (SLOT_REVOKED) are the caller's to judge. */
int msg_record_slot_check(uint64_t offset, uint32_t ordinal, const slot_t *slot, char *err, size_t errlen);

/* A decoded message that owns its bytes (used to hand messages out of the
 * store). Free with msg_owned_free; a zeroed msg_owned_t is empty. */
typedef struct msg_owned {
    msg_t m;
    char *buf;
} msg_owned_t;

/* Copy src into *dst: its strings back to back in one allocation (dst->buf),
 * every view of dst->m into it; src's views may point anywhere (a reader's
 * window, a LevelDB value), nothing is encoded. Aborts on out-of-memory. */
void msg_owned_copy(msg_owned_t *dst, const msg_t *src);
void msg_owned_free(msg_owned_t *o);

/* The byte budget of a reply that carries several messages (PULL, DLQ LIST,
 * and any later listing): messages are taken while budget is left, each is
 * charged its payload, key and reason bytes, and the first always fits — so
 * a reply holds at most max_bytes plus one message, and never nothing when
 * something is there. Pure; no allocation. */
typedef struct msg_budget {
    uint64_t left;
} msg_budget_t;

/* A budget of max_bytes (0 is taken as 1: one message per reply). */
void msg_budget_init(msg_budget_t *b, uint64_t max_bytes);

/* 1 while another message may be taken. */
int msg_budget_open(const msg_budget_t *b);

/* Charge m's bytes (payload + key + reason) to b. */
void msg_budget_charge(msg_budget_t *b, const msg_t *m);

/* 0 when name is a valid topic or group name: 1..MSG_MAX_NAME bytes of
 * printable ASCII without blanks (0x21..0x7e). Otherwise -1 and err says why,
 * using `what` ("topic", "group") in the message. */
int msg_check_name(const char *what, const char *name, size_t len, char *err, size_t errlen);

#endif
