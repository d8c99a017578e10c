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
 * truncated record, a length past the end, trailing bytes, bad dest). */
int msg_decode(const char *buf, size_t len, msg_t *m, char *err, size_t errlen);

/* A decoded message that owns its bytes (used to hand messages out of the
 * store). Free with msg_owned_free; a zeroed msg_owned_t is empty. */
typedef struct msg_owned {
    msg_t m;
    char *buf;
} msg_owned_t;

/* Copy src into *dst (one allocation). Aborts on out-of-memory. */
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
