/*
 * levels/keys.h — the storage layout of a data directory and its codec: the
 * key ranges, the small records, big-endian integers. Private to levels/ (not
 * installed); the message value itself is levels/msg.h's codec.
 *
 * Storage layout (authoritative; STORE_FORMAT_VERSION 8, which opens 1 to 7:
 * 1 and 2 had the lease index 'J' below, folded into 'Y' at open; 3 lacks the
 * 'X' that names a level entry gone to the log; 4 lacks the key index's count
 * records, built at open; 5 may hold SEND journeys in 'L' and 'X' on a level
 * served from its consume queue, walked by 'L' until it empties; 6 may hold
 * a topic's messages in 'T', walked before its topic CQ; 7's topic CQs are
 * numbered from 65536 (CQ_SMALL_QUEUE_FIRST) and keep files of 2^12 entries,
 * while a topic made by 8 gets a CQ numbered from CQ_GROWING_QUEUE_FIRST,
 * whose files grow from 2^12 to 2^18 entries: levels/cq.h's layouts, a pure
 * function of the queue number, so no record holds a file's size). Integers are
 * fixed-width big-endian, so LevelDB's byte order is queue order. "name" is a
 * topic or group name: 1..MSG_MAX_NAME bytes that never contain 0x00
 * (msg_check_name), so "name 0x00" is a clean prefix of one queue.
 *
 *   key                                     value
 *   'M' "format"                            u32 STORE_FORMAT_VERSION: the marker that makes a directory ours
 *   'M' "levels"                            the level table as text (lvl_table_format); must equal the config's
 *   'M' "seq"                               u64 the next sequence number (ids, queue positions, group gens);
 *                                           raised at every open to the wall clock's floor, ms << 20
 *                                           (store.h, STORE_SEQ_CLOCK_BITS), so numbers are sparse across opens
 *   'M' "topic-delayed"                     "1": the topic records count their delayed messages (absent in a
 *                                           directory written before they did: counted once at open)
 *   'M' "keycounts"                         "1": the key index's count records are built (absent in a directory
 *                                           written before them: built once at open, index_keycount.c)
 *   'M' "topic-queue-next"                  u32 the next topic CQ's queue number (from CQ_GROWING_QUEUE_FIRST
 *                                           in format 8; a format-7 store's is below it: raised at the next
 *                                           topic made, topic_cq.c)
 *   'M' "topicq-<queue, 8 hex>"             the name of the topic whose CQ that queue is
 *   'M' "copy-unfinished"                   "1": only in a BACKUP copy still being made (snapshot.c): written
 *                                           with its first batch, deleted with its last; store_open refuses
 *                                           a directory that holds it (a copy cut short)
 *   'C' level(u8)                           level record, 64 bytes: depth, head due, head seq, last enqueue,
 *                                           CQ head, CQ tail, retries, flags (8 × u64; head due and seq are 0
 *                                           when the level is empty; the head is `L`'s first retry, or its
 *                                           first entry with RECORD_LEVEL_ON_L; 32 and 48-byte records are
 *                                           older: decoded with that flag)
 *   'P' topic                               topic record, 24 bytes: appended, removed, delayed (u64 each;
 *                                           delayed: its messages on their SEND journey in the level queues.
 *                                           A 16-byte record is an older one without it: counted once at open)
 *   'G' group                               group record: u8 version (1), u32 max-reconsume, 9 × u64 (gen,
 *                                           cursor, position, retry-ready, retry-delayed, in-flight, DLQ,
 *                                           created ms, flags), u16 topic length, the topic's bytes. Flags:
 *                                           RECORD_GROUP_DELETING, the group is being deleted (GROUP DEL:
 *                                           levels/group_delete.c); 0 in a record written before it
 *   'L' level(u8) due(u64) seq(u64)         level queue: a message on its way (msg.h; due_ms the journey's
 *                                           end, dest where it goes then: the topic log or a group's retries).
 *                                           A SEND journey on a level served from its consume queue (not
 *                                           RECORD_LEVEL_ON_L) has none: its CQ entry and where-slot in the
 *                                           commit log's files are its record (design-commitlog.md 4a.5)
 *   'T' topic 0x00 seq(u64)                 topic log: a message (stamp_ms: when it entered the log)
 *   'R' group 0x00 seq(u64)                 the group's retry-ready queue: a message (group and gen set)
 *   'I' deadline(u64) group 0x00 id(u64)    a lease, ordered by deadline: the leased message
 *   'J' group 0x00 id(u64)                  formats 1 and 2 only, folded into the lease's 'Y' at open: the lease
 *                                           index, u64 the deadline, then u64 the topic-log seq it was leased
 *                                           from (absent: leased from the retries, or written by format 1)
 *   'D' group 0x00 id(u64)                  the group's DLQ: the message with its reason, stamp_ms = parked time
 *   'X' id(u64)                             the message index (levels/index.c): where the message's own copy is
 *                                           (its SEND journey on a level, or the topic log; or none once only
 *                                           groups hold it), its topic and key — present while its own
 *                                           copy or a copy of a live group incarnation exists, but for a
 *                                           journey without 'L' (above): written at its arrival. Naming a level
 *                                           entry that is gone, it means the log entry of the same seq: an
 *                                           arrival keeps its level seq when that comes after the log's tail,
 *                                           and then leaves 'X' as it was (levels/level.c store_topic_append)
 *   'K' topic 0x00 klen(u16) key id(u64)    the key index: (empty) one per message with a non-empty key, with 'X'
 *   'K' topic 0x00 klen(u16) key            u64 how many entries above the key has (> 0; none without one): a
 *                                           DEDUP SEND or FIND of a key no message has is one Get, and a walk
 *                                           of its entries stops at its count, so it never steps over the
 *                                           deleted entries of the keys after it (LevelDB's seek walks every
 *                                           tombstone up to the next live key). Written with every entry's
 *                                           put and delete, in the same batch; 'M' "keycounts" marks them built
 *   'Y' id(u64) group 0x00 gen(u64)         the group-copy index: where that group incarnation holds the message
 *                                           (a lease: its deadline, naming its 'I' key, and the topic-log seq it
 *                                           was leased from or 0; a delayed retry on a level, retry-ready, the
 *                                           DLQ). ACK, NACK and TOUCH find a lease by it.
 *   'S' base(u64)                           u64 the live count of the commit-log segment at base: its messages
 *                                           still on their SEND journey (levels/segcount.c); none when 0
 *
 * Invariants (store_check verifies them all):
 * - Every move between ranges is one WriteBatch with the records it changes,
 *   so after any crash each message is in exactly one place: for a group, one
 *   of its backlog (topic log at or past its cursor), retry-ready, a level queue
 *   (a delayed retry of its current gen), a lease or its DLQ — never two.
 * - The records equal the contents: a level's depth is the keys it holds and
 *   its head the first of them; a topic's appended - removed is its log; a
 *   group's counters are its ranges; a topic's delayed counter is the level
 *   entries bound for its log (the levels are shared by all topics, so only
 *   this counter, kept in the batch of every move on or off a level, says
 *   how many are whose); every copy has its 'Y' entry and back, a lease's
 *   naming its 'I' key; a lease's topic-log seq is where the message's 'X'
 *   says its own copy is, or 'X' says it has none (the GC collected it).
 * - Sequence numbers come from the one 'M' "seq" counter (persisted in every
 *   commit that used it), so an append lands after a queue's tail and an id is
 *   never reused, across reopens too. Open raises the counter to the wall
 *   clock's floor, so a directory put back from an older copy (whose counter
 *   is behind the numbers its broker took after the copy) starts above them:
 *   store.h says under which bound. Nothing depends on the numbers being
 *   small or dense: they are compared, ordered and stored as u64 only.
 *
 * Pure functions on caller buffers; thread-safe.
 */
#ifndef HG_LEVELS_KEYS_H
#define HG_LEVELS_KEYS_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "levels/msg.h"

/* The first byte of every key: which range it belongs to (table above). */
enum key_tag {
    KEY_META = 'M',
    KEY_LEVEL_RECORD = 'C',
    KEY_TOPIC_RECORD = 'P',
    KEY_GROUP_RECORD = 'G',
    KEY_LEVEL = 'L',
    KEY_TOPIC_LOG = 'T',
    KEY_RETRY = 'R',
    KEY_LEASE = 'I',
    KEY_LEASE_INDEX = 'J',
    KEY_DLQ = 'D',
    KEY_MSG_INDEX = 'X',  /* levels/index.c */
    KEY_KEY_INDEX = 'K',  /* levels/index.c */
    KEY_COPY_INDEX = 'Y', /* levels/index.c */
    KEY_SEGMENT = 'S',    /* levels/segcount.c */
};

#define KEY_MAX              (1 + MSG_MAX_NAME + 1 + 2 + MSG_MAX_KEY + 8) /* the longest key above: 'K' */
#define KEY_LEVEL_BYTES      18                                           /* 'L' level due seq */
#define RECORD_LEVEL_BYTES   64 /* with retries and flags (design-commitlog.md 4a.4) */
#define RECORD_LEVEL_CQ      48 /* with the level CQ's head and tail (4a.3): decoded as RECORD_LEVEL_ON_L */
#define RECORD_LEVEL_OLD     32 /* before them: decoded with both 0, as RECORD_LEVEL_ON_L */
#define RECORD_TOPIC_BYTES   56 /* with its topic CQ (design-commitlog.md 4b) */
#define RECORD_TOPIC_DELAYED 24 /* before it: decoded with no queue */
#define RECORD_TOPIC_OLD     16 /* before the delayed counter */
#define RECORD_GROUP_VERSION 1
#define RECORD_GROUP_FIXED   (1 + 4 + 8 * 9 + 2) /* a group record without its topic name */
#define RECORD_GROUP_MAX     (RECORD_GROUP_FIXED + MSG_MAX_NAME)

/* ---- big-endian integers (inline: every key and message goes through them) -- */

/* The integers are stored big-endian: on a little-endian host each is one
 * byte swap and one unaligned load or store (memcpy of the swapped value),
 * whatever the code it is inlined into. Written byte by byte, gcc 12 -O2
 * merged the eight stores into a swap and a store in most callers but not
 * all: inlined beside other stores (idx_copy_put, home_write, clog_append,
 * slot_put) it left eight shifts and byte stores (~80 instructions a slot,
 * callgrind); a loop cost ~50 per integer. */
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
#define KEYS_BE16(v) __builtin_bswap16(v)
#define KEYS_BE32(v) __builtin_bswap32(v)
#define KEYS_BE64(v) __builtin_bswap64(v)
#elif defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
#define KEYS_BE16(v) (v)
#define KEYS_BE32(v) (v)
#define KEYS_BE64(v) (v)
#else
#error "levels/keys.h needs the compiler's __BYTE_ORDER__ (gcc or clang)"
#endif

static inline void be16_put(char *p, uint16_t v)
{
    uint16_t b = KEYS_BE16(v);
    memcpy(p, &b, sizeof b);
}

static inline void be32_put(char *p, uint32_t v)
{
    uint32_t b = KEYS_BE32(v);
    memcpy(p, &b, sizeof b);
}

static inline void be64_put(char *p, uint64_t v)
{
    uint64_t b = KEYS_BE64(v);
    memcpy(p, &b, sizeof b);
}

static inline uint16_t be16_get(const char *p)
{
    uint16_t b;
    memcpy(&b, p, sizeof b);
    return KEYS_BE16(b);
}

static inline uint32_t be32_get(const char *p)
{
    uint32_t b;
    memcpy(&b, p, sizeof b);
    return KEYS_BE32(b);
}

static inline uint64_t be64_get(const char *p)
{
    uint64_t b;
    memcpy(&b, p, sizeof b);
    return KEYS_BE64(b);
}

/* ---- building keys ----------------------------------------------------------- */

/* A key being built: b[0..n). Appending never overflows for the keys above
 * (names are at most MSG_MAX_NAME bytes, checked before any key is built). */
typedef struct key_buf {
    char b[KEY_MAX];
    size_t n;
} key_buf_t;

/* Start a key with its range tag. */
static inline void key_start(key_buf_t *k, enum key_tag tag)
{
    k->b[0] = (char)tag;
    k->n = 1;
}

/* dst = src, copying the bytes in use only (a whole key_buf_t is KEY_MAX
 * bytes; a topic walk's prefix is a few dozen). */
static inline void key_copy(key_buf_t *dst, const key_buf_t *src)
{
    memcpy(dst->b, src->b, src->n);
    dst->n = src->n;
}

/* Append one byte, a big-endian u64, raw bytes, or a name and its 0x00. */
static inline void key_u8(key_buf_t *k, uint8_t v)
{
    k->b[k->n++] = (char)v;
}

static inline void key_u64(key_buf_t *k, uint64_t v)
{
    be64_put(k->b + k->n, v);
    k->n += 8;
}

static inline void key_bytes(key_buf_t *k, const char *p, size_t len)
{
    memcpy(k->b + k->n, p, len);
    k->n += len;
}

static inline void key_name(key_buf_t *k, const char *name, size_t len)
{
    key_bytes(k, name, len);
    k->b[k->n++] = '\0';
}

/* 'M' name: a meta key ("format", "levels", "seq"). */
void key_meta(key_buf_t *k, const char *name);

/* 'C' level: the level record. */
void key_level_record(key_buf_t *k, int level);

/* tag name (no 0x00): a topic ('P') or group ('G') record. */
void key_record(key_buf_t *k, enum key_tag tag, const char *name, size_t len);

/* The builders and parsers below are inline: every queue operation runs
 * them, several times per message. */

/* 'L' level due seq: a message on a level queue. */
static inline void key_level(key_buf_t *k, int level, uint64_t due, uint64_t seq)
{
    key_start(k, KEY_LEVEL);
    key_u8(k, (uint8_t)level);
    key_u64(k, due);
    key_u64(k, seq);
}

/* tag name 0x00: the prefix of one named queue ('T', 'R', 'D'; 'J' of format 2). */
static inline void key_queue_prefix(key_buf_t *k, enum key_tag tag, const char *name, size_t len)
{
    key_start(k, tag);
    key_name(k, name, len);
}

/* tag name 0x00 n: an entry of a named queue (n a seq for 'T'/'R', an id for 'D' and format 2's 'J'). */
static inline void key_queue(key_buf_t *k, enum key_tag tag, const char *name, size_t len, uint64_t n)
{
    key_queue_prefix(k, tag, name, len);
    key_u64(k, n);
}

/* 'I' deadline group 0x00 id: a lease. */
static inline void key_lease(key_buf_t *k, uint64_t deadline, const char *group, size_t len, uint64_t id)
{
    key_start(k, KEY_LEASE);
    key_u64(k, deadline);
    key_name(k, group, len);
    key_u64(k, id);
}

/* ---- the indexes (levels/index.c) -------------------------------------------- */

/* 'X' id: a message's index record. */
static inline void key_msg_index(key_buf_t *k, uint64_t id)
{
    key_start(k, KEY_MSG_INDEX);
    key_u64(k, id);
}

/* 'K' topic 0x00 klen key: the prefix of one (topic, key)'s entries; the
 * key's length goes first, so a key holding 0x00 bytes is still one prefix. */
static inline void key_key_prefix(key_buf_t *k, const char *topic, size_t tlen, const char *key, size_t klen)
{
    key_queue_prefix(k, KEY_KEY_INDEX, topic, tlen);
    k->b[k->n++] = (char)(klen >> 8);
    k->b[k->n++] = (char)klen;
    key_bytes(k, key, klen);
}

/* 'Y' id group 0x00 gen: a group copy's index entry ('Y' id alone: the prefix
 * of all copies of id). */
static inline void key_copy_index(key_buf_t *k, uint64_t id, const char *group, size_t glen, uint64_t gen)
{
    key_msg_index(k, id);
    k->b[0] = (char)KEY_COPY_INDEX;
    key_name(k, group, glen);
    key_u64(k, gen);
}

/* ---- reading keys ------------------------------------------------------------- */

/* 1 when name[0..len) is a name the layout above allows in a key: 1..
 * MSG_MAX_NAME bytes without a 0x00. Every parser that returns a name
 * checks it, so a damaged key never hands a caller a name that overflows
 * a MSG_MAX_NAME buffer or is cut short by a 0x00 inside it. */
static inline int key_name_ok(const char *name, size_t len)
{
    return len >= 1 && len <= MSG_MAX_NAME && memchr(name, 0, len) == NULL;
}

/* A level key (tag included): 0 with *level, *due, *seq, or -1 when it is not
 * KEY_LEVEL_BYTES long. */
static inline int key_level_parse(const char *key, size_t klen, int *level, uint64_t *due, uint64_t *seq)
{
    if (klen != KEY_LEVEL_BYTES) {
        return -1;
    }
    *level = (unsigned char)key[1];
    *due = be64_get(key + 2);
    *seq = be64_get(key + 10);
    return 0;
}

/* The u64 after a named queue's prefix of plen bytes: 0 with *n, or -1 when
 * the key is not exactly plen + 8 bytes. */
static inline int key_queue_parse(const char *key, size_t klen, size_t plen, uint64_t *n)
{
    if (klen != plen + 8) {
        return -1;
    }
    *n = be64_get(key + plen);
    return 0;
}

/* A lease key: 0 with *deadline, the group (a view into key) and *id, or -1
 * when it is malformed (too short, no 0x00 before the id, a group that is
 * not key_name_ok: empty, longer than MSG_MAX_NAME, holding a 0x00). */
static inline int key_lease_parse(const char *key, size_t klen, uint64_t *deadline, const char **group, size_t *glen,
                                  uint64_t *id)
{
    if (klen < 1 + 8 + 2 + 8 || key[klen - 9] != '\0' || !key_name_ok(key + 9, klen - 1 - 8 - 1 - 8)) {
        return -1;
    }
    *deadline = be64_get(key + 1);
    *group = key + 9;
    *glen = klen - 1 - 8 - 1 - 8;
    *id = be64_get(key + klen - 8);
    return 0;
}

/* A group-copy index key ('Y' id group 0x00 gen): 0 with *id, the group (a
 * view into key) and *gen, or -1 when malformed (as key_lease_parse). */
int key_copy_index_parse(const char *key, size_t klen, uint64_t *id, const char **group, size_t *glen, uint64_t *gen);

/* An entry of a named queue, tag name 0x00 n ('T', 'R', 'D'; format 2's
 * 'J'): 0 with the name (a view into key) and *n, or -1 when malformed (no
 * 0x00 eight bytes before the end, a name that is not key_name_ok). */
int key_queue_entry_parse(const char *key, size_t klen, const char **name, size_t *len, uint64_t *n);

/* A format-2 lease index key ('J' group 0x00 id): key_queue_entry_parse. */
int key_lease_index_parse(const char *key, size_t klen, const char **group, size_t *glen, uint64_t *id);

/* A topic ('P') or group ('G') record's key: 0 with the name (a view into
 * key), or -1 when the name is not key_name_ok. */
int key_record_parse(const char *key, size_t klen, const char **name, size_t *len);

/* A key index record ('K'), parsed: its topic and message key (views into
 * the record's key) and whether it is an entry (with the id) or the count
 * record of that (topic, key), which is the entries' prefix. */
typedef struct key_index_parsed {
    const char *topic, *key;
    size_t topic_len, key_len;
    size_t prefix_len; /* 'K' topic 0x00 klen key */
    int is_entry;      /* 1: an entry, the id follows the prefix */
    uint64_t id;
} key_index_parsed_t;

/* 0 with *out, or -1 when malformed: no 0x00 after the topic, a topic that
 * is not key_name_ok, a message key empty or longer than MSG_MAX_KEY or not
 * as long as its length says, anything but nothing or an id after it. */
int key_index_parse(const char *key, size_t klen, key_index_parsed_t *out);

/* Describe a (possibly damaged) key for an error message: its printable
 * bytes as they are, the others as \xNN, cut after its first 64 bytes, and
 * its length; into out[outlen] (KEY_DESCRIBE_BYTES is enough). Returns out. */
#define KEY_DESCRIBE_BYTES (2 + 64 * 4 + 3 + 32 + 1) /* quotes, bytes, "...", " (N bytes)", NUL */
const char *key_describe(const char *key, size_t klen, char *out, size_t outlen);

/* ---- the records ----------------------------------------------------------------- */

typedef struct record_level {
    uint64_t depth;
    uint64_t head_due, head_seq; /* 0 when depth is 0 */
    uint64_t last_enqueue_ms;
    uint64_t cq_head, cq_tail; /* the level's consume queue: entries [cq_head, cq_tail) */
    uint64_t retries;          /* its entries bound for a group's retry (counted only without RECORD_LEVEL_ON_L) */
    uint64_t flags;            /* RECORD_LEVEL_ON_L */
} record_level_t;

/* record_level_t.flags: the level's `L` range may hold SEND journeys that
 * its CQ does not (written before 4a.4, or whose journeys were dropped:
 * a copy without the commit log, an index rebuilt), so the due move serves
 * it by walking `L`, as 4a.3 did, until it is empty (design-commitlog.md
 * 4a.4). A shorter, older record decodes with it set when the level holds
 * anything. */
#define RECORD_LEVEL_ON_L UINT64_C(1)

#define RECORD_GROUP_DELETING UINT64_C(1) /* record_group_t.flags */

typedef struct record_group {
    uint32_t max_reconsume;
    uint64_t gen, cursor, position, retry_ready, retry_delayed, inflight, dlq, created_ms;
    uint64_t flags;    /* RECORD_GROUP_DELETING */
    const char *topic; /* decode: a view into the value */
    size_t topic_len;
} record_group_t;

/* Encode into out[RECORD_LEVEL_BYTES]. */
void record_level_encode(const record_level_t *r, char *out);

/* 0, or -1 when v is neither RECORD_LEVEL_BYTES, RECORD_LEVEL_CQ nor
 * RECORD_LEVEL_OLD long (an old record's CQ head and tail are 0; a shorter
 * record's retries 0 and flags RECORD_LEVEL_ON_L when depth > 0). */
int record_level_decode(const char *v, size_t vlen, record_level_t *r);

typedef struct record_topic {
    uint64_t appended, removed; /* entries that ever entered / left the topic log */
    uint64_t delayed;           /* messages on their SEND journey in the level queues */
    uint32_t queue;             /* its topic CQ's queue number (0: none yet) */
    uint64_t cq_seq_base;       /* entry i's seq is STORE_TOPIC_CQ_SEQ | (base + i); 'T' keys lie below */
    uint64_t cq_head, cq_tail;  /* the CQ's window [cq_head, cq_tail) */
} record_topic_t;

/* Encode into out[RECORD_TOPIC_BYTES]. */
void record_topic_encode(const record_topic_t *r, char *out);

/* 0 (an older RECORD_TOPIC_DELAYED-byte record decodes with no queue, a
 * RECORD_TOPIC_OLD-byte one with delayed 0 too), or -1 when v has none of
 * the lengths. */
int record_topic_decode(const char *v, size_t vlen, record_topic_t *r);

/* Encode into out[RECORD_GROUP_MAX]; returns the length. */
size_t record_group_encode(const record_group_t *r, char *out);

/* 0 with the topic as a view into v; -1 when the fixed part is short or of
 * another version, -2 when the topic name is not exactly the rest of the
 * value or not key_name_ok (empty, too long, a 0x00 inside: the group's
 * topic names keys). */
int record_group_decode(const char *v, size_t vlen, record_group_t *r);

/* Parse a format-1 or -2 lease index value (8 or 16 bytes): 0 with *deadline and *log_seq
 * (0 when the value holds none), -1 when corrupt. */
int record_lease_index_decode(const char *v, size_t vlen, uint64_t *deadline, uint64_t *log_seq);

#endif
