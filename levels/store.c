/*
 * levels/store.c — the level engine's storage on one LevelDB (see store.h).
 *
 * Key layout (integers fixed-width big-endian, so byte order is queue order):
 *   'M' name                      meta: "format" u32, "levels" spec, "seq" next seq u64
 *   'C' level(u8)                 level record: depth, head due, head seq, last enqueue (4 × u64)
 *   'P' topic                     topic record: appended u64, removed u64
 *   'G' group                     group record (see group_encode)
 *   'L' level(u8) due(u64) seq(u64)        level queue: message
 *   'T' topic 0x00 seq(u64)                topic log: message
 *   'R' group 0x00 seq(u64)                group retry-ready: message
 *   'I' deadline(u64) group 0x00 id(u64)   lease, ordered by deadline: message
 *   'J' group 0x00 id(u64)                 lease index: deadline u64
 *   'D' group 0x00 id(u64)                 DLQ: message (+ reason, parked time)
 * Names never contain 0x00 (msg_check_name), so "name 0x00" is a clean prefix.
 *
 * Invariants:
 * - Every move is one WriteBatch with the counter and record updates it implies;
 *   records changed by an operation are marked dirty and written once per
 *   commit, so a batch of 1024 sends writes one level counter, not 1024.
 * - Sequence numbers come from one counter (persisted in every commit that
 *   uses it), so appends to a queue always land after its current tail.
 * - Queue heads live in memory (level head keys, topic/retry head hints, a lease
 *   floor); reads seek straight to them and never walk the tombstones that
 *   popped heads leave. store_maintain compacts consumed ranges.
 * - In-memory state is changed as operations are added to the pending batch; if
 *   the commit fails the store is marked broken and must be reopened.
 *
 * Threading: one thread at a time (the broker's storage thread).
 */
#include "levels/store.h"
#include "base/alloc.h"
#include "base/err.h"

#include <dirent.h>
#include <errno.h>
#include <leveldb/c.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define KEY_MAX (2 + MSG_MAX_NAME + 1 + 16 + 8)
#define COMPACT_AFTER_POPS 50000
#define GROUP_RECORD_VERSION 1
#define LEVEL_RECORD_BYTES 32

/* ---- small helpers ---------------------------------------------------------- */

static void put_be64(char *p, uint64_t v)
{
    for (int i = 0; i < 8; i++) { p[i] = (char)(v >> (56 - 8 * i)); }
}

static uint64_t get_be64(const char *p)
{
    const unsigned char *u = (const unsigned char *)p;
    uint64_t v = 0;
    for (int i = 0; i < 8; i++) { v = (v << 8) | u[i]; }
    return v;
}

static void set_err(char *err, size_t errlen, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void set_err(char *err, size_t errlen, const char *fmt, ...)
{
    if (err == NULL || errlen == 0) { return; }
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
}

typedef struct key {
    char b[KEY_MAX];
    size_t n;
} key_t_;

static void key_start(key_t_ *k, char tag) { k->b[0] = tag; k->n = 1; }
static void key_u8(key_t_ *k, uint8_t v) { k->b[k->n++] = (char)v; }
static void key_u64(key_t_ *k, uint64_t v) { put_be64(k->b + k->n, v); k->n += 8; }
static void key_name(key_t_ *k, const char *s, size_t len)
{
    memcpy(k->b + k->n, s, len);
    k->n += len;
    k->b[k->n++] = '\0';
}

/* ---- a string-keyed hash map (topics, groups) ------------------------------- */

typedef struct strmap_slot {
    char *key;
    size_t len;
    void *val;
} strmap_slot_t;

typedef struct strmap {
    strmap_slot_t *slots;
    size_t cap;     /* power of two */
    size_t used;
    size_t tomb;
} strmap_t;

static char STRMAP_TOMBSTONE[1];

static uint64_t strmap_hash(const char *s, size_t len)
{
    uint64_t h = 1469598103934665603ULL;     /* FNV-1a */
    for (size_t i = 0; i < len; i++) { h = (h ^ (unsigned char)s[i]) * 1099511628211ULL; }
    return h;
}

static strmap_slot_t *strmap_find_slot(const strmap_t *m, const char *k, size_t len, int for_insert)
{
    if (m->cap == 0) { return NULL; }
    size_t mask = m->cap - 1, i = strmap_hash(k, len) & mask;
    strmap_slot_t *first_tomb = NULL;
    for (;;) {
        strmap_slot_t *s = &m->slots[i];
        if (s->key == NULL) { return for_insert ? (first_tomb ? first_tomb : s) : NULL; }
        if (s->key == STRMAP_TOMBSTONE) {
            if (first_tomb == NULL) { first_tomb = s; }
        } else if (s->len == len && memcmp(s->key, k, len) == 0) {
            return s;
        }
        i = (i + 1) & mask;
    }
}

static void *strmap_get(const strmap_t *m, const char *k, size_t len)
{
    strmap_slot_t *s = strmap_find_slot(m, k, len, 0);
    return s ? s->val : NULL;
}

static void strmap_put(strmap_t *m, const char *k, size_t len, void *val);

static void strmap_grow(strmap_t *m)
{
    strmap_t bigger = { 0 };
    bigger.cap = m->cap ? m->cap * 2 : 16;
    bigger.slots = calloc(bigger.cap, sizeof *bigger.slots);
    if (bigger.slots == NULL) { bigger.slots = xmalloc(0); abort(); }
    for (size_t i = 0; i < m->cap; i++) {
        strmap_slot_t *s = &m->slots[i];
        if (s->key != NULL && s->key != STRMAP_TOMBSTONE) {
            strmap_put(&bigger, s->key, s->len, s->val);
            free(s->key);
        }
    }
    free(m->slots);
    *m = bigger;
}

static void strmap_put(strmap_t *m, const char *k, size_t len, void *val)
{
    if ((m->used + m->tomb + 1) * 2 > m->cap) { strmap_grow(m); }
    strmap_slot_t *s = strmap_find_slot(m, k, len, 1);
    if (s->key != NULL && s->key != STRMAP_TOMBSTONE) { s->val = val; return; }
    if (s->key == STRMAP_TOMBSTONE) { m->tomb--; }
    s->key = xstrndup(k, len);
    s->len = len;
    s->val = val;
    m->used++;
}

static void strmap_del(strmap_t *m, const char *k, size_t len)
{
    strmap_slot_t *s = strmap_find_slot(m, k, len, 0);
    if (s == NULL) { return; }
    free(s->key);
    s->key = STRMAP_TOMBSTONE;
    s->val = NULL;
    m->used--;
    m->tomb++;
}

static void strmap_free(strmap_t *m)
{
    for (size_t i = 0; i < m->cap; i++) {
        if (m->slots[i].key != NULL && m->slots[i].key != STRMAP_TOMBSTONE) { free(m->slots[i].key); }
    }
    free(m->slots);
    memset(m, 0, sizeof *m);
}

#define STRMAP_FOREACH(m, slot) \
    for (strmap_slot_t *slot = (m)->slots; slot && slot < (m)->slots + (m)->cap; slot++) \
        if (slot->key != NULL && slot->key != STRMAP_TOMBSTONE)

/* ---- in-memory state ------------------------------------------------------- */

typedef struct level_state {
    uint64_t depth;
    int has_head;
    uint64_t head_due, head_seq;   /* exact smallest key, including pending writes */
    uint64_t last_enqueue_ms;      /* monotone enqueue clock of SENDs on this level */
    uint64_t pops_since_compact;
    uint64_t inserted_due, inserted_seq; /* smallest key inserted during a move_due call */
    int dirty;
} level_state_t;

typedef struct topic_state {
    char *name;
    size_t len;
    uint64_t appended, removed;
    uint64_t head_hint;            /* every retained entry has seq >= head_hint */
    int groups;                    /* groups bound to it */
    uint64_t pops_since_compact;   /* GC deletions since the last compaction */
    int dirty;
} topic_state_t;

typedef struct group_state {
    char *name;
    size_t len;
    topic_state_t *topic;
    uint64_t gen;                  /* incarnation: the seq at creation */
    uint64_t cursor;               /* next topic-log seq to read */
    uint64_t position;             /* topic-log entries passed (appended - position = backlog) */
    uint64_t retry_ready, retry_delayed, inflight, dlq;
    uint64_t created_ms;
    uint32_t max_reconsume;
    uint64_t retry_head_hint;      /* every retry-ready entry has seq >= this */
    uint64_t pops_since_compact;
    int dirty;
} group_state_t;

struct store {
    store_options_t opt;
    char *path;
    leveldb_t *db;
    leveldb_options_t *dbopt;
    leveldb_cache_t *cache;
    leveldb_readoptions_t *ropt;
    leveldb_writeoptions_t *wopt_sync;   /* sync = 1 when the store syncs */
    leveldb_writeoptions_t *wopt_nosync;
    int unsynced;                  /* a commit since the last synced one was not synced */
    leveldb_writebatch_t *batch;
    int pending;
    int broken;
    char broken_err[256];

    uint64_t next_seq, persisted_seq;
    level_state_t levels[LVL_MAX_LEVELS + 1];
    strmap_t topics;               /* name → topic_state_t* */
    strmap_t groups;               /* name → group_state_t* */
    topic_state_t **dirty_topics; size_t n_dirty_topics, cap_dirty_topics;
    group_state_t **dirty_groups; size_t n_dirty_groups, cap_dirty_groups;

    uint64_t lease_floor;          /* every lease deadline is >= this */
    uint64_t lease_ceiling;        /* the highest deadline leased since open */
    int lease_next_valid;
    uint64_t lease_next;           /* lower bound of the earliest deadline when valid */
    uint64_t lease_pops_since_compact;
};

/* ---- batch helpers --------------------------------------------------------- */

static void batch_put(store_t *s, const key_t_ *k, const char *v, size_t vlen)
{
    leveldb_writebatch_put(s->batch, k->b, k->n, v, vlen);
    s->pending++;
}

static void batch_del(store_t *s, const key_t_ *k)
{
    leveldb_writebatch_delete(s->batch, k->b, k->n);
    s->pending++;
}

/* Encode m and add it under k. */
static void batch_put_msg(store_t *s, const key_t_ *k, const msg_t *m)
{
    char small[512];
    size_t n = msg_encoded_size(m);
    char *buf = n <= sizeof small ? small : xmalloc(n);
    msg_encode(m, buf, n);
    batch_put(s, k, buf, n);
    if (buf != small) { free(buf); }
}

static void mark_level(store_t *s, int level) { s->levels[level].dirty = 1; }

static void mark_topic(store_t *s, topic_state_t *t)
{
    if (t->dirty) { return; }
    t->dirty = 1;
    if (s->n_dirty_topics == s->cap_dirty_topics) {
        s->cap_dirty_topics = s->cap_dirty_topics ? s->cap_dirty_topics * 2 : 16;
        s->dirty_topics = xrealloc(s->dirty_topics, s->cap_dirty_topics * sizeof *s->dirty_topics);
    }
    s->dirty_topics[s->n_dirty_topics++] = t;
}

static void mark_group(store_t *s, group_state_t *g)
{
    if (g->dirty) { return; }
    g->dirty = 1;
    if (s->n_dirty_groups == s->cap_dirty_groups) {
        s->cap_dirty_groups = s->cap_dirty_groups ? s->cap_dirty_groups * 2 : 16;
        s->dirty_groups = xrealloc(s->dirty_groups, s->cap_dirty_groups * sizeof *s->dirty_groups);
    }
    s->dirty_groups[s->n_dirty_groups++] = g;
}

static int check_usable(const store_t *s, char *err, size_t errlen)
{
    if (s->broken) {
        set_err(err, errlen, "store is unusable after a failed write (%s); reopen it", s->broken_err);
        return -1;
    }
    return 0;
}

/* ---- records ---------------------------------------------------------------- */

#define GROUP_RECORD_FIXED (1 + 4 + 8 * 9 + 2)

static size_t group_encode(const group_state_t *g, char *out)
{
    char *p = out;
    *p++ = GROUP_RECORD_VERSION;
    p[0] = (char)(g->max_reconsume >> 24); p[1] = (char)(g->max_reconsume >> 16);
    p[2] = (char)(g->max_reconsume >> 8); p[3] = (char)g->max_reconsume; p += 4;
    uint64_t f[9] = { g->gen, g->cursor, g->position, g->retry_ready, g->retry_delayed,
                      g->inflight, g->dlq, g->created_ms, 0 };
    for (int i = 0; i < 9; i++) { put_be64(p, f[i]); p += 8; }
    p[0] = (char)(g->topic->len >> 8); p[1] = (char)g->topic->len; p += 2;
    memcpy(p, g->topic->name, g->topic->len);
    p += g->topic->len;
    return (size_t)(p - out);
}

static void level_key(key_t_ *k, int level, uint64_t due, uint64_t seq)
{
    key_start(k, 'L'); key_u8(k, (uint8_t)level); key_u64(k, due); key_u64(k, seq);
}

static void named_key(key_t_ *k, char tag, const char *name, size_t len, uint64_t n)
{
    key_start(k, tag); key_name(k, name, len); key_u64(k, n);
}

static void lease_key(key_t_ *k, uint64_t deadline, const char *group, size_t len, uint64_t id)
{
    key_start(k, 'I'); key_u64(k, deadline); key_name(k, group, len); key_u64(k, id);
}

static void meta_key(key_t_ *k, const char *name)
{
    key_start(k, 'M');
    memcpy(k->b + 1, name, strlen(name));
    k->n = 1 + strlen(name);
}

/* Writes every dirty record into the batch. */
static void flush_records(store_t *s)
{
    key_t_ k;
    char v[GROUP_RECORD_FIXED + MSG_MAX_NAME];
    for (int l = 1; l <= s->opt.levels.count; l++) {
        if (!s->levels[l].dirty) { continue; }
        key_start(&k, 'C'); key_u8(&k, (uint8_t)l);
        level_state_t *ls = &s->levels[l];
        put_be64(v, ls->depth);
        put_be64(v + 8, ls->has_head ? ls->head_due : 0);
        put_be64(v + 16, ls->has_head ? ls->head_seq : 0);
        put_be64(v + 24, ls->last_enqueue_ms);
        batch_put(s, &k, v, LEVEL_RECORD_BYTES);
        s->levels[l].dirty = 0;
    }
    for (size_t i = 0; i < s->n_dirty_topics; i++) {
        topic_state_t *t = s->dirty_topics[i];
        key_start(&k, 'P'); memcpy(k.b + 1, t->name, t->len); k.n = 1 + t->len;
        put_be64(v, t->appended); put_be64(v + 8, t->removed);
        batch_put(s, &k, v, 16);
        t->dirty = 0;
    }
    s->n_dirty_topics = 0;
    for (size_t i = 0; i < s->n_dirty_groups; i++) {
        group_state_t *g = s->dirty_groups[i];
        key_start(&k, 'G'); memcpy(k.b + 1, g->name, g->len); k.n = 1 + g->len;
        batch_put(s, &k, v, group_encode(g, v));
        g->dirty = 0;
    }
    s->n_dirty_groups = 0;
    if (s->next_seq != s->persisted_seq) {
        meta_key(&k, "seq");
        put_be64(v, s->next_seq);
        batch_put(s, &k, v, 8);
    }
}

int store_commit(store_t *s, char *err, size_t errlen)
{
    return store_commit_durable(s, 1, err, errlen);
}

int store_commit_durable(store_t *s, int durable, char *err, size_t errlen)
{
    if (check_usable(s, err, errlen) != 0) { return -1; }
    int sync = durable && s->opt.sync;
    if (s->pending == 0) {
        if (!sync || !s->unsynced) { return 0; }
        /* Nothing pending, but earlier unsynced writes need their fsync: a
         * synced write of one small record syncs the whole log. */
        key_t_ k;
        char v[8];
        meta_key(&k, "seq");
        put_be64(v, s->next_seq);
        batch_put(s, &k, v, 8);
    }
    flush_records(s);
    char *dberr = NULL;
    leveldb_write(s->db, sync ? s->wopt_sync : s->wopt_nosync, s->batch, &dberr);
    if (dberr != NULL) {
        s->broken = 1;
        snprintf(s->broken_err, sizeof s->broken_err, "write to %s failed: %s", s->path, dberr);
        leveldb_free(dberr);
        set_err(err, errlen, "%s", s->broken_err);
        return -1;
    }
    leveldb_writebatch_clear(s->batch);
    s->pending = 0;
    s->persisted_seq = s->next_seq;
    s->unsynced = s->opt.sync && !sync;
    return 0;
}

/* Reads see committed data only: commit first when anything is pending. */
static int prepare_read(store_t *s, char *err, size_t errlen)
{
    if (check_usable(s, err, errlen) != 0) { return -1; }
    return s->pending ? store_commit_durable(s, 0, err, errlen) : 0;
}

int store_pending(const store_t *s) { return s->pending; }
int store_broken(const store_t *s) { return s->broken; }
const lvl_table_t *store_levels(const store_t *s) { return &s->opt.levels; }
const store_options_t *store_options(const store_t *s) { return &s->opt; }

/* ---- lookup and creation of topics and groups ---------------------------------- */

static topic_state_t *topic_get(const store_t *s, const char *name, size_t len)
{
    return strmap_get(&s->topics, name, len);
}

static topic_state_t *topic_get_or_create(store_t *s, const char *name, size_t len)
{
    topic_state_t *t = topic_get(s, name, len);
    if (t != NULL) { return t; }
    t = calloc(1, sizeof *t);
    if (t == NULL) { abort(); }
    t->name = xstrndup(name, len);
    t->len = len;
    strmap_put(&s->topics, name, len, t);
    mark_topic(s, t);
    return t;
}

static group_state_t *group_get(const store_t *s, const char *name, size_t len)
{
    return strmap_get(&s->groups, name, len);
}

static void group_free(group_state_t *g)
{
    free(g->name);
    free(g);
}

/* ---- leveldb reading helpers --------------------------------------------------- */

static leveldb_iterator_t *iter_at(store_t *s, const key_t_ *k)
{
    leveldb_iterator_t *it = leveldb_create_iterator(s->db, s->ropt);
    leveldb_iter_seek(it, k->b, k->n);
    return it;
}

/* 1 when the iterator is valid and its key starts with prefix[plen]. */
static int iter_in(leveldb_iterator_t *it, const char *prefix, size_t plen, const char **key, size_t *klen)
{
    if (!leveldb_iter_valid(it)) { return 0; }
    *key = leveldb_iter_key(it, klen);
    return *klen >= plen && memcmp(*key, prefix, plen) == 0;
}

static int iter_error(leveldb_iterator_t *it, const char *what, char *err, size_t errlen)
{
    char *e = NULL;
    leveldb_iter_get_error(it, &e);
    if (e == NULL) { return 0; }
    set_err(err, errlen, "reading %s: %s", what, e);
    leveldb_free(e);
    return -1;
}

static int decode_value(const char *v, size_t vlen, msg_t *m, const char *where, char *err, size_t errlen)
{
    char e[160];
    if (msg_decode(v, vlen, m, e, sizeof e) != 0) {
        set_err(err, errlen, "corrupt message in %s: %s", where, e);
        return -1;
    }
    return 0;
}

/* Get a value: 1 found (*val malloc'd by leveldb, free with leveldb_free), 0 not found, -1 error. */
static int db_get(store_t *s, const key_t_ *k, char **val, size_t *vlen, char *err, size_t errlen)
{
    char *e = NULL;
    *val = leveldb_get(s->db, s->ropt, k->b, k->n, vlen, &e);
    if (e != NULL) {
        set_err(err, errlen, "read from %s failed: %s", s->path, e);
        leveldb_free(e);
        return -1;
    }
    return *val != NULL;
}

/* ---- options, open, close ----------------------------------------------------- */

void store_options_default(store_options_t *o)
{
    memset(o, 0, sizeof *o);
    lvl_table_default(&o->levels);
    o->create_if_missing = 1;
    o->sync = 1;
    o->retention_ms = STORE_DEFAULT_RETENTION_MS;
    o->max_delay_ms = STORE_DEFAULT_MAX_DELAY_MS;
    o->max_payload = MSG_DEFAULT_MAX_PAYLOAD;
    o->max_reconsume = STORE_DEFAULT_MAX_RECONSUME;
    o->max_lease_bytes = STORE_DEFAULT_MAX_LEASE_BYTES;
    o->cache_bytes = 8u << 20;
    o->write_buffer_bytes = 4u << 20;
    o->max_open_files = 500;
}

static void store_free(store_t *s)
{
    if (s == NULL) { return; }
    if (s->db) { leveldb_close(s->db); }
    if (s->dbopt) { leveldb_options_destroy(s->dbopt); }
    if (s->cache) { leveldb_cache_destroy(s->cache); }
    if (s->ropt) { leveldb_readoptions_destroy(s->ropt); }
    if (s->wopt_sync) { leveldb_writeoptions_destroy(s->wopt_sync); }
    if (s->wopt_nosync) { leveldb_writeoptions_destroy(s->wopt_nosync); }
    if (s->batch) { leveldb_writebatch_destroy(s->batch); }
    STRMAP_FOREACH(&s->groups, slot) { group_free(slot->val); }
    STRMAP_FOREACH(&s->topics, slot) {
        topic_state_t *t = slot->val;
        free(t->name);
        free(t);
    }
    strmap_free(&s->groups);
    strmap_free(&s->topics);
    free(s->dirty_topics);
    free(s->dirty_groups);
    free(s->path);
    free(s);
}

/* Is dir empty (ignoring . and ..)? 1 yes, 0 no; *has_current set when a LevelDB CURRENT file is there. */
static int dir_state(const char *path, int *has_current, char *err, size_t errlen)
{
    DIR *d = opendir(path);
    if (d == NULL) {
        set_err(err, errlen, "cannot open data directory %s: %s", path, strerror(errno));
        return -1;
    }
    int empty = 1;
    *has_current = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) { continue; }
        empty = 0;
        if (strcmp(e->d_name, "CURRENT") == 0) { *has_current = 1; }
    }
    closedir(d);
    return empty;
}

static int prepare_dir(const store_options_t *o, int *is_new, char *err, size_t errlen)
{
    struct stat st;
    if (stat(o->path, &st) != 0) {
        if (errno != ENOENT) {
            set_err(err, errlen, "cannot use data directory %s: %s", o->path, strerror(errno));
            return -1;
        }
        if (!o->create_if_missing) {
            set_err(err, errlen, "data directory %s does not exist", o->path);
            return -1;
        }
        if (mkdir(o->path, 0750) != 0) {
            set_err(err, errlen, "cannot create data directory %s: %s", o->path, strerror(errno));
            return -1;
        }
        *is_new = 1;
        return 0;
    }
    if (!S_ISDIR(st.st_mode)) {
        set_err(err, errlen, "data directory %s is not a directory", o->path);
        return -1;
    }
    int has_current = 0;
    int empty = dir_state(o->path, &has_current, err, errlen);
    if (empty < 0) { return -1; }
    if (empty) {
        if (!o->create_if_missing) {
            set_err(err, errlen, "data directory %s is empty (not created yet)", o->path);
            return -1;
        }
        *is_new = 1;
        return 0;
    }
    if (!has_current) {
        set_err(err, errlen, "%s is not a Hourglass data directory: it holds other files and no "
                "LevelDB CURRENT file; refusing to touch it", o->path);
        return -1;
    }
    *is_new = 0;
    return 0;
}

static int validate_options(const store_options_t *o, char *err, size_t errlen)
{
    if (o->path == NULL || o->path[0] == '\0') {
        set_err(err, errlen, "no data directory given");
        return -1;
    }
    if (o->levels.count < 1 || o->levels.count > LVL_MAX_LEVELS) {
        set_err(err, errlen, "level table has %d levels (1..%d allowed)", o->levels.count, LVL_MAX_LEVELS);
        return -1;
    }
    if (o->max_payload > MSG_HARD_MAX_PAYLOAD) {
        set_err(err, errlen, "max-payload %u exceeds the hard limit of %u bytes", o->max_payload,
                MSG_HARD_MAX_PAYLOAD);
        return -1;
    }
    if (o->max_reconsume > STORE_MAX_MAX_RECONSUME) {
        set_err(err, errlen, "max-reconsume %u exceeds the limit of %d", o->max_reconsume,
                STORE_MAX_MAX_RECONSUME);
        return -1;
    }
    return 0;
}

static int write_new_meta(store_t *s, char *err, size_t errlen)
{
    key_t_ k;
    char v[8], spec[LVL_MAX_LEVELS * 16];
    meta_key(&k, "format");
    v[0] = 0; v[1] = 0; v[2] = 0; v[3] = STORE_FORMAT_VERSION;
    batch_put(s, &k, v, 4);
    lvl_table_format(&s->opt.levels, spec, sizeof spec);
    meta_key(&k, "levels");
    batch_put(s, &k, spec, strlen(spec));
    s->next_seq = 1;
    s->persisted_seq = 0;
    /* Always synced, even in a store that does not sync: the marker decides
     * whether the directory is ours. */
    char *dberr = NULL;
    flush_records(s);
    leveldb_write(s->db, s->wopt_sync, s->batch, &dberr);
    if (dberr != NULL) {
        set_err(err, errlen, "cannot initialise data directory %s: %s", s->path, dberr);
        leveldb_free(dberr);
        return -1;
    }
    leveldb_writebatch_clear(s->batch);
    s->pending = 0;
    s->persisted_seq = s->next_seq;
    return 0;
}

static int check_meta(store_t *s, char *err, size_t errlen)
{
    key_t_ k;
    char *v;
    size_t vlen;
    meta_key(&k, "format");
    int found = db_get(s, &k, &v, &vlen, err, errlen);
    if (found < 0) { return -1; }
    if (!found) {
        /* A LevelDB that is not ours, unless it is completely empty. */
        leveldb_iterator_t *it = leveldb_create_iterator(s->db, s->ropt);
        leveldb_iter_seek_to_first(it);
        int empty = !leveldb_iter_valid(it);
        leveldb_iter_destroy(it);
        if (!empty) {
            set_err(err, errlen, "%s is a LevelDB database but not a Hourglass data directory "
                    "(no format marker); refusing to touch it", s->path);
            return -1;
        }
        return write_new_meta(s, err, errlen);
    }
    uint32_t version = vlen == 4 ? ((uint32_t)(unsigned char)v[0] << 24 | (uint32_t)(unsigned char)v[1] << 16 |
                                    (uint32_t)(unsigned char)v[2] << 8 | (unsigned char)v[3]) : 0;
    leveldb_free(v);
    if (version != STORE_FORMAT_VERSION) {
        set_err(err, errlen, "data directory %s has format version %u; this build reads version %d",
                s->path, version, STORE_FORMAT_VERSION);
        return -1;
    }
    meta_key(&k, "levels");
    found = db_get(s, &k, &v, &vlen, err, errlen);
    if (found <= 0) {
        if (found == 0) { set_err(err, errlen, "data directory %s has no level table record (corrupt)", s->path); }
        return -1;
    }
    char spec[LVL_MAX_LEVELS * 24];
    if (vlen >= sizeof spec) { vlen = sizeof spec - 1; }
    memcpy(spec, v, vlen);
    spec[vlen] = '\0';
    leveldb_free(v);
    lvl_table_t stored;
    char perr[160], diff[256];
    if (lvl_table_parse(spec, &stored, perr, sizeof perr) != 0) {
        set_err(err, errlen, "data directory %s has an unreadable level table \"%s\": %s", s->path, spec, perr);
        return -1;
    }
    if (lvl_table_diff(&stored, "the data directory", &s->opt.levels, "the configuration", diff, sizeof diff)) {
        set_err(err, errlen, "level table mismatch for %s: %s (data directory: \"%s\")", s->path, diff, spec);
        return -1;
    }
    meta_key(&k, "seq");
    found = db_get(s, &k, &v, &vlen, err, errlen);
    if (found < 0) { return -1; }
    s->next_seq = 1;
    if (found) {
        if (vlen != 8) {
            leveldb_free(v);
            set_err(err, errlen, "data directory %s has a corrupt sequence record", s->path);
            return -1;
        }
        s->next_seq = get_be64(v);
        leveldb_free(v);
    }
    s->persisted_seq = s->next_seq;
    return 0;
}

/* Level records carry the exact head key and the monotone enqueue clock, written
 * in every batch that changes them (a head changes only with the depth), so open
 * reads 18 small records and never seeks a level range: a seek from the range
 * start would walk every popped head not yet compacted. */
static int load_levels(store_t *s, char *err, size_t errlen)
{
    for (int l = 1; l <= s->opt.levels.count; l++) {
        level_state_t *ls = &s->levels[l];
        key_t_ k;
        char *v;
        size_t vlen;
        key_start(&k, 'C'); key_u8(&k, (uint8_t)l);
        int found = db_get(s, &k, &v, &vlen, err, errlen);
        if (found < 0) { return -1; }
        if (!found) { continue; }
        if (vlen != LEVEL_RECORD_BYTES) {
            leveldb_free(v);
            set_err(err, errlen, "corrupt record of level %d in %s (%zu bytes)", l, s->path, vlen);
            return -1;
        }
        ls->depth = get_be64(v);
        ls->has_head = ls->depth > 0;
        ls->head_due = get_be64(v + 8);
        ls->head_seq = get_be64(v + 16);
        ls->last_enqueue_ms = get_be64(v + 24);
        /* Pops since the last compaction are not persisted: assume one is owed,
         * so the first store_maintain after open compacts below the head. */
        ls->pops_since_compact = COMPACT_AFTER_POPS;
        leveldb_free(v);
    }
    return 0;
}

static int load_topics(store_t *s, char *err, size_t errlen)
{
    key_t_ k;
    key_start(&k, 'P');
    leveldb_iterator_t *it = iter_at(s, &k);
    const char *key;
    size_t klen;
    for (; iter_in(it, "P", 1, &key, &klen); leveldb_iter_next(it)) {
        size_t vlen;
        const char *v = leveldb_iter_value(it, &vlen);
        if (vlen != 16 || klen < 2 || klen - 1 > MSG_MAX_NAME) {
            set_err(err, errlen, "corrupt topic record in %s", s->path);
            leveldb_iter_destroy(it);
            return -1;
        }
        topic_state_t *t = topic_get_or_create(s, key + 1, klen - 1);
        t->appended = get_be64(v);
        t->removed = get_be64(v + 8);
        t->dirty = 0;
    }
    s->n_dirty_topics = 0;
    int rc = iter_error(it, "topic records", err, errlen);
    leveldb_iter_destroy(it);
    return rc;
}

static int load_groups(store_t *s, char *err, size_t errlen)
{
    key_t_ k;
    key_start(&k, 'G');
    leveldb_iterator_t *it = iter_at(s, &k);
    const char *key;
    size_t klen;
    int rc = 0;
    for (; iter_in(it, "G", 1, &key, &klen); leveldb_iter_next(it)) {
        size_t vlen;
        const char *v = leveldb_iter_value(it, &vlen);
        if (vlen < GROUP_RECORD_FIXED || v[0] != GROUP_RECORD_VERSION || klen < 2 || klen - 1 > MSG_MAX_NAME) {
            set_err(err, errlen, "corrupt group record in %s", s->path);
            rc = -1;
            break;
        }
        const char *p = v + 1;
        group_state_t *g = calloc(1, sizeof *g);
        if (g == NULL) { abort(); }
        g->max_reconsume = (uint32_t)(unsigned char)p[0] << 24 | (uint32_t)(unsigned char)p[1] << 16 |
                           (uint32_t)(unsigned char)p[2] << 8 | (unsigned char)p[3];
        p += 4;
        uint64_t f[9];
        for (int i = 0; i < 9; i++) { f[i] = get_be64(p); p += 8; }
        g->gen = f[0]; g->cursor = f[1]; g->position = f[2]; g->retry_ready = f[3];
        g->retry_delayed = f[4]; g->inflight = f[5]; g->dlq = f[6]; g->created_ms = f[7];
        size_t tlen = (size_t)(unsigned char)p[0] << 8 | (unsigned char)p[1];
        p += 2;
        if (tlen == 0 || tlen > MSG_MAX_NAME || (size_t)(v + vlen - p) != tlen) {
            free(g);
            set_err(err, errlen, "corrupt group record in %s (topic name)", s->path);
            rc = -1;
            break;
        }
        g->topic = topic_get_or_create(s, p, tlen);
        g->topic->groups++;
        g->name = xstrndup(key + 1, klen - 1);
        g->len = klen - 1;
        strmap_put(&s->groups, g->name, g->len, g);
    }
    /* A topic created here only in memory (group with an empty topic log) is
     * written with the next commit; keep it dirty. */
    if (rc == 0) { rc = iter_error(it, "group records", err, errlen); }
    leveldb_iter_destroy(it);
    return rc;
}

static void map_open_error(const char *path, const char *dberr, char *err, size_t errlen)
{
    if (strstr(dberr, "lock") != NULL || strstr(dberr, "LOCK") != NULL) {
        set_err(err, errlen, "data directory %s is in use by another process or store "
                "(its LevelDB LOCK is held): %s", path, dberr);
    } else if (strstr(dberr, "orruption") != NULL) {
        set_err(err, errlen, "data directory %s is corrupt (LevelDB: %s); nothing was changed — "
                "restore it from a backup or inspect it by hand", path, dberr);
    } else {
        set_err(err, errlen, "cannot open data directory %s: %s", path, dberr);
    }
}

int store_open(const store_options_t *o, store_t **out, char *err, size_t errlen)
{
    *out = NULL;
    if (validate_options(o, err, errlen) != 0) { return -1; }
    int is_new = 0;
    if (prepare_dir(o, &is_new, err, errlen) != 0) { return -1; }

    store_t *s = calloc(1, sizeof *s);
    if (s == NULL) { abort(); }
    s->opt = *o;
    s->path = xstrndup(o->path, strlen(o->path));
    s->opt.path = s->path;
    s->dbopt = leveldb_options_create();
    s->cache = leveldb_cache_create_lru(o->cache_bytes);
    leveldb_options_set_cache(s->dbopt, s->cache);
    leveldb_options_set_create_if_missing(s->dbopt, (unsigned char)is_new);
    leveldb_options_set_paranoid_checks(s->dbopt, 1);
    leveldb_options_set_write_buffer_size(s->dbopt, o->write_buffer_bytes);
    leveldb_options_set_max_open_files(s->dbopt, o->max_open_files);
    leveldb_options_set_compression(s->dbopt, leveldb_snappy_compression);
    s->ropt = leveldb_readoptions_create();
    leveldb_readoptions_set_verify_checksums(s->ropt, 1);
    s->wopt_sync = leveldb_writeoptions_create();
    leveldb_writeoptions_set_sync(s->wopt_sync, 1);
    s->wopt_nosync = leveldb_writeoptions_create();
    leveldb_writeoptions_set_sync(s->wopt_nosync, 0);
    s->batch = leveldb_writebatch_create();

    char *dberr = NULL;
    s->db = leveldb_open(s->dbopt, s->path, &dberr);
    if (dberr != NULL) {
        map_open_error(s->path, dberr, err, errlen);
        leveldb_free(dberr);
        s->db = NULL;
        store_free(s);
        return -1;
    }
    if (check_meta(s, err, errlen) != 0 || load_levels(s, err, errlen) != 0 ||
        load_topics(s, err, errlen) != 0 || load_groups(s, err, errlen) != 0) {
        store_free(s);
        return -1;
    }
    /* Topic heads: start at the smallest cursor of their groups (everything
     * below it was collected), else at 0 (one walk on the first read). */
    STRMAP_FOREACH(&s->groups, slot) {
        group_state_t *g = slot->val;
        if (g->topic->head_hint == 0 || g->cursor < g->topic->head_hint) { g->topic->head_hint = 0; }
    }
    s->lease_floor = 0;
    s->lease_next_valid = 0;
    *out = s;
    return 0;
}

int store_close(store_t *s, char *err, size_t errlen)
{
    if (s == NULL) { return 0; }
    /* A broken store cannot commit: report that (its pending batch is lost)
     * rather than a clean close. */
    int rc = store_commit(s, err, errlen);
    store_free(s);
    return rc;
}

/* ---- ids ------------------------------------------------------------------------ */

void store_id_format(uint64_t id, char out[17])
{
    static const char hex[] = "0123456789abcdef";
    for (int i = 15; i >= 0; i--) { out[i] = hex[id & 15]; id >>= 4; }
    out[16] = '\0';
}

int store_id_parse(const char *text, size_t len, uint64_t *id)
{
    if (len == 0 || len > 16) { return -1; }
    uint64_t v = 0;
    for (size_t i = 0; i < len; i++) {
        char c = text[i];
        int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 :
                c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
        if (d < 0) { return -1; }
        v = (v << 4) | (uint64_t)d;
    }
    *id = v;
    return 0;
}

/* ---- level queues --------------------------------------------------------------- */

static int key_less(uint64_t due_a, uint64_t seq_a, uint64_t due_b, uint64_t seq_b)
{
    return due_a < due_b || (due_a == due_b && seq_a < seq_b);
}

/* Put m on level at (due, fresh seq); keeps the head exact. */
static void level_insert(store_t *s, int level, uint64_t due, msg_t *m)
{
    level_state_t *ls = &s->levels[level];
    uint64_t seq = s->next_seq++;
    key_t_ k;
    level_key(&k, level, due, seq);
    batch_put_msg(s, &k, m);
    ls->depth++;
    mark_level(s, level);
    if (!ls->has_head || key_less(due, seq, ls->head_due, ls->head_seq)) {
        ls->has_head = 1;
        ls->head_due = due;
        ls->head_seq = seq;
    }
    if (key_less(due, seq, ls->inserted_due, ls->inserted_seq)) {
        ls->inserted_due = due;
        ls->inserted_seq = seq;
    }
}

/* Start a journey of total (already rounded) delay on its first hop, or exactly
 * on `level`. Monotone enqueue time per level. Sets m->due_ms; returns it. */
static uint64_t level_enqueue(store_t *s, msg_t *m, int level, uint64_t delay_ms, uint64_t now_ms)
{
    const lvl_table_t *t = &s->opt.levels;
    int first = level > 0 ? level : lvl_next_hop(t, delay_ms);
    level_state_t *ls = &s->levels[first];
    uint64_t enq = now_ms > ls->last_enqueue_ms ? now_ms : ls->last_enqueue_ms;
    ls->last_enqueue_ms = enq;
    uint64_t hop_due = enq + t->delay_ms[first];
    m->due_ms = level > 0 ? hop_due : enq + delay_ms;
    level_insert(s, first, hop_due, m);
    return m->due_ms;
}

static void topic_append(store_t *s, topic_state_t *t, msg_t *m, uint64_t now_ms)
{
    key_t_ k;
    m->stamp_ms = now_ms;
    m->dest = MSG_DEST_TOPIC;
    m->group.ptr = NULL; m->group.len = 0;
    m->group_gen = 0;
    named_key(&k, 'T', t->name, t->len, s->next_seq++);
    batch_put_msg(s, &k, m);
    t->appended++;
    mark_topic(s, t);
}

static void retry_ready_append(store_t *s, group_state_t *g, msg_t *m, uint64_t now_ms)
{
    key_t_ k;
    m->dest = MSG_DEST_GROUP;
    m->group.ptr = g->name; m->group.len = (uint32_t)g->len;
    m->group_gen = g->gen;
    m->stamp_ms = now_ms;
    named_key(&k, 'R', g->name, g->len, s->next_seq++);
    batch_put_msg(s, &k, m);
    g->retry_ready++;
    mark_group(s, g);
}

/* A chained delay must fit max-delay and the hop bound (DESIGN §1: hops are
 * bounded; LVL_MAX_HOPS): lvl_chain_plan decides both and names the problem
 * ("delay 4d exceeds max-delay 3d", "... needs 3600 hops ..."). Without the
 * bound, a custom table with a small last level makes one message hop (one
 * write) per level delay for the whole journey. */
int store_send_validate(const store_options_t *o, const store_send_req_t *req, char *err, size_t errlen)
{
    if (msg_check_name("topic", req->topic, req->topic_len, err, errlen) != 0) { return -1; }
    if (req->key_len > MSG_MAX_KEY) {
        return err_set(err, errlen, "key is %zu bytes, longer than the limit of %d", req->key_len, MSG_MAX_KEY);
    }
    if (req->payload_len > o->max_payload) {
        return err_set(err, errlen, "payload is %zu bytes, larger than max-payload %u", req->payload_len,
                       o->max_payload);
    }
    const lvl_table_t *t = &o->levels;
    if (req->level < 0 || req->level > t->count) {
        return err_set(err, errlen, "LEVEL must be 0..%d (levels are 1..%d; 0: no delay), got %d", t->count, t->count,
                       req->level);
    }
    if (req->level == 0 && req->delay_ms > 0) {
        uint8_t plan[LVL_MAX_HOPS];
        int hops;
        return lvl_chain_plan(t, req->delay_ms, o->max_delay_ms, plan, LVL_MAX_HOPS, &hops, err, errlen);
    }
    return 0;
}

int store_send(store_t *s, const store_send_req_t *req, uint64_t now_ms,
               uint64_t *id_out, uint64_t *due_out, char *err, size_t errlen)
{
    if (check_usable(s, err, errlen) != 0) { return -1; }
    if (store_send_validate(&s->opt, req, err, errlen) != 0) { return -1; }
    uint64_t delay = req->level == 0 && req->delay_ms > 0 ? lvl_round_delay(req->delay_ms) : 0;
    msg_t m;
    memset(&m, 0, sizeof m);
    m.id = s->next_seq++;
    m.created_ms = now_ms;
    m.dest = MSG_DEST_TOPIC;
    m.topic.ptr = req->topic; m.topic.len = (uint32_t)req->topic_len;
    m.key.ptr = req->key; m.key.len = (uint32_t)req->key_len;
    m.payload.ptr = req->payload; m.payload.len = (uint32_t)req->payload_len;
    if (req->level == 0 && delay == 0) {
        m.due_ms = now_ms;
        topic_append(s, topic_get_or_create(s, req->topic, req->topic_len), &m, now_ms);
    } else {
        level_enqueue(s, &m, req->level, delay, now_ms);
    }
    *id_out = m.id;
    if (due_out) { *due_out = m.due_ms; }
    return 0;
}

uint64_t store_next_due(const store_t *s)
{
    uint64_t best = UINT64_MAX;
    for (int l = 1; l <= s->opt.levels.count; l++) {
        if (s->levels[l].has_head && s->levels[l].head_due < best) { best = s->levels[l].head_due; }
    }
    return best;
}

int store_level_info(const store_t *s, int level, store_level_info_t *out)
{
    if (level < 1 || level > s->opt.levels.count) { return -1; }
    const level_state_t *ls = &s->levels[level];
    out->level = level;
    out->delay_ms = s->opt.levels.delay_ms[level];
    out->depth = ls->depth;
    out->head_due_ms = ls->has_head ? ls->head_due : 0;
    return 0;
}

/* One due level-head message m (at hop_due) leaves its level: next hop, topic log
 * or retry-ready. Returns 1 when it became ready, 0 when it hopped or was dropped. */
static int route_due(store_t *s, msg_t *m, uint64_t hop_due, uint64_t now_ms)
{
    const lvl_table_t *t = &s->opt.levels;
    while (m->due_ms > hop_due) {
        int next = lvl_next_hop(t, m->due_ms - hop_due);
        uint64_t next_due = hop_due + t->delay_ms[next];
        if (next_due > now_ms) {
            level_insert(s, next, next_due, m);
            return 0;
        }
        hop_due = next_due;   /* catching up (clock jump, downtime): that hop is due too */
    }
    if (m->dest == MSG_DEST_TOPIC) {
        topic_append(s, topic_get_or_create(s, m->topic.ptr, m->topic.len), m, now_ms);
        return 1;
    }
    group_state_t *g = group_get(s, m->group.ptr, m->group.len);
    if (g == NULL || g->gen != m->group_gen) { return 0; }  /* its group was deleted: drop */
    g->retry_delayed--;
    retry_ready_append(s, g, m, now_ms);
    return 1;
}

int store_move_due(store_t *s, uint64_t now_ms, int max, int *moved, int *ready_out,
                   char *err, size_t errlen)
{
    *moved = 0;
    if (ready_out) { *ready_out = 0; }
    if (prepare_read(s, err, errlen) != 0) { return -1; }
    const lvl_table_t *t = &s->opt.levels;
    uint64_t committed[LVL_MAX_LEVELS + 1];   /* what each level holds now: all committed (prepare_read) */
    for (int l = 1; l <= t->count; l++) {
        s->levels[l].inserted_due = UINT64_MAX;
        s->levels[l].inserted_seq = UINT64_MAX;
        committed[l] = s->levels[l].depth;
    }
    int rc = 0;
    while (*moved < max && rc == 0) {
        /* Serve the level whose head is due first, up to where another level's
         * head comes first: catching up after downtime keeps global due order,
         * not level order. (Hops inserted meanwhile are due after now.) */
        int l = 0;
        for (int i = 1; i <= t->count; i++) {
            const level_state_t *x = &s->levels[i];
            if (x->has_head && x->head_due <= now_ms && (l == 0 || x->head_due < s->levels[l].head_due)) { l = i; }
        }
        if (l == 0) { break; }
        uint64_t bound = now_ms;
        for (int i = 1; i <= t->count; i++) {
            if (i != l && s->levels[i].has_head && s->levels[i].head_due < bound) { bound = s->levels[i].head_due; }
        }
        level_state_t *ls = &s->levels[l];
        key_t_ k;
        level_key(&k, l, ls->head_due, ls->head_seq);
        leveldb_iterator_t *it = iter_at(s, &k);
        char prefix[2] = { 'L', (char)l };
        const char *key;
        size_t klen;
        int have_next = 0;
        uint64_t next_due = 0, next_seq = 0;
        while (iter_in(it, prefix, 2, &key, &klen)) {
            if (klen != 18) {
                set_err(err, errlen, "corrupt level key (length %zu) on level %d in %s", klen, l, s->path);
                rc = -1;
                break;
            }
            uint64_t due = get_be64(key + 2), seq = get_be64(key + 10);
            if (due > bound || *moved >= max) {
                have_next = 1; next_due = due; next_seq = seq;
                break;
            }
            size_t vlen;
            const char *v = leveldb_iter_value(it, &vlen);
            msg_t m;
            if (decode_value(v, vlen, &m, "a level queue", err, errlen) != 0) { rc = -1; break; }
            key_t_ dk;
            memcpy(dk.b, key, klen);
            dk.n = klen;
            batch_del(s, &dk);
            ls->depth--;
            ls->pops_since_compact++;
            mark_level(s, l);
            int ready = route_due(s, &m, due, now_ms);
            if (ready && ready_out) { (*ready_out)++; }
            (*moved)++;
            /* Past the level's last message the iterator would walk every
             * deleted key after it (the next level's popped heads) to the next
             * live one: the level is empty, there is no next head to read. */
            if (--committed[l] == 0) { break; }
            leveldb_iter_next(it);
        }
        if (rc == 0) { rc = iter_error(it, "a level queue", err, errlen); }
        leveldb_iter_destroy(it);
        if (rc != 0) { break; }
        /* New head: the first key not moved, or something inserted meanwhile. */
        ls->has_head = have_next;
        ls->head_due = next_due;
        ls->head_seq = next_seq;
        if (ls->inserted_due != UINT64_MAX &&
            (!ls->has_head || key_less(ls->inserted_due, ls->inserted_seq, ls->head_due, ls->head_seq))) {
            ls->has_head = 1;
            ls->head_due = ls->inserted_due;
            ls->head_seq = ls->inserted_seq;
        }
    }
    return rc;
}

/* ---- groups ------------------------------------------------------------------------ */

static void group_fill_info(const group_state_t *g, store_group_info_t *out)
{
    memset(out, 0, sizeof *out);
    memcpy(out->topic, g->topic->name, g->topic->len);
    out->topic[g->topic->len] = '\0';
    out->backlog = g->topic->appended - g->position;
    out->retry_ready = g->retry_ready;
    out->ready = out->backlog + g->retry_ready;
    out->retry_delayed = g->retry_delayed;
    out->inflight = g->inflight;
    out->dlq = g->dlq;
    out->max_reconsume = g->max_reconsume;
    out->created_ms = g->created_ms;
}

static group_state_t *group_create(store_t *s, const char *group, size_t glen, topic_state_t *t,
                                   int from_first, uint32_t max_reconsume, uint64_t now_ms)
{
    group_state_t *g = calloc(1, sizeof *g);
    if (g == NULL) { abort(); }
    g->name = xstrndup(group, glen);
    g->len = glen;
    g->topic = t;
    g->gen = s->next_seq++;
    g->max_reconsume = max_reconsume;
    g->created_ms = now_ms;
    if (from_first) {
        g->cursor = t->head_hint;
        g->position = t->removed;
    } else {
        g->cursor = s->next_seq;
        g->position = t->appended;
    }
    t->groups++;
    strmap_put(&s->groups, g->name, g->len, g);
    mark_group(s, g);
    s->pending++;   /* the group record is a write even with no other put */
    return g;
}

int store_group_create(store_t *s, const char *group, size_t group_len,
                       const char *topic, size_t topic_len, int from_first,
                       int max_reconsume, uint64_t now_ms, char *err, size_t errlen)
{
    if (check_usable(s, err, errlen) != 0) { return -1; }
    if (msg_check_name("group", group, group_len, err, errlen) != 0 ||
        msg_check_name("topic", topic, topic_len, err, errlen) != 0) {
        return -1;
    }
    group_state_t *g = group_get(s, group, group_len);
    if (g != NULL) {
        set_err(err, errlen, "group %.*s already exists (bound to topic %.*s)", (int)group_len, group,
                (int)g->topic->len, g->topic->name);
        return -1;
    }
    if (max_reconsume > STORE_MAX_MAX_RECONSUME) {
        set_err(err, errlen, "max-reconsume %d exceeds the limit of %d", max_reconsume, STORE_MAX_MAX_RECONSUME);
        return -1;
    }
    uint32_t mr = max_reconsume < 0 ? s->opt.max_reconsume : (uint32_t)max_reconsume;
    group_create(s, group, group_len, topic_get_or_create(s, topic, topic_len), from_first, mr, now_ms);
    return 0;
}

int store_group_info(const store_t *s, const char *group, size_t group_len, store_group_info_t *out)
{
    const group_state_t *g = group_get(s, group, group_len);
    if (g == NULL) { return 0; }
    group_fill_info(g, out);
    return 1;
}

void store_group_foreach(const store_t *s,
                         int (*fn)(void *ctx, const char *group, const store_group_info_t *info),
                         void *ctx)
{
    STRMAP_FOREACH(&s->groups, slot) {
        group_state_t *g = slot->val;
        store_group_info_t info;
        group_fill_info(g, &info);
        if (fn(ctx, g->name, &info) != 0) { return; }
    }
}

/* Delete every key with the given prefix; returns the count, or -1. */
static int64_t delete_prefix(store_t *s, const char *prefix, size_t plen, char *err, size_t errlen)
{
    key_t_ k;
    memcpy(k.b, prefix, plen);
    k.n = plen;
    leveldb_iterator_t *it = iter_at(s, &k);
    const char *key;
    size_t klen;
    int64_t n = 0;
    for (; iter_in(it, prefix, plen, &key, &klen); leveldb_iter_next(it)) {
        key_t_ dk;
        memcpy(dk.b, key, klen);
        dk.n = klen;
        batch_del(s, &dk);
        n++;
    }
    int rc = iter_error(it, "a group range", err, errlen);
    leveldb_iter_destroy(it);
    return rc != 0 ? -1 : n;
}

int store_group_delete(store_t *s, const char *group, size_t group_len, int *found,
                       char *err, size_t errlen)
{
    *found = 0;
    if (prepare_read(s, err, errlen) != 0) { return -1; }
    group_state_t *g = group_get(s, group, group_len);
    if (g == NULL) { return 0; }
    *found = 1;
    key_t_ k;
    /* Leases: the index (J) names each lease key (I). */
    key_start(&k, 'J'); key_name(&k, group, group_len);
    leveldb_iterator_t *it = iter_at(s, &k);
    const char *key;
    size_t klen;
    size_t plen = k.n;
    char prefix[KEY_MAX];
    memcpy(prefix, k.b, plen);
    int rc = 0;
    for (; iter_in(it, prefix, plen, &key, &klen); leveldb_iter_next(it)) {
        size_t vlen;
        const char *v = leveldb_iter_value(it, &vlen);
        if (vlen != 8 || klen != plen + 8) { set_err(err, errlen, "corrupt lease index in %s", s->path); rc = -1; break; }
        key_t_ ik;
        lease_key(&ik, get_be64(v), group, group_len, get_be64(key + plen));
        batch_del(s, &ik);
        key_t_ jk;
        memcpy(jk.b, key, klen);
        jk.n = klen;
        batch_del(s, &jk);
    }
    if (rc == 0) { rc = iter_error(it, "the lease index", err, errlen); }
    leveldb_iter_destroy(it);
    if (rc != 0) { return -1; }
    const char tags[2] = { 'R', 'D' };
    for (int i = 0; i < 2; i++) {
        key_start(&k, tags[i]); key_name(&k, group, group_len);
        if (delete_prefix(s, k.b, k.n, err, errlen) < 0) { return -1; }
    }
    key_start(&k, 'G'); memcpy(k.b + 1, group, group_len); k.n = 1 + group_len;
    batch_del(s, &k);
    g->topic->groups--;
    /* It is not dirty: prepare_read committed everything before we started. */
    strmap_del(&s->groups, group, group_len);
    group_free(g);
    s->lease_next_valid = 0;
    return 0;
}

/* ---- leases ---------------------------------------------------------------------------- */

/* Leases held, committed or pending, over all groups. */
static uint64_t leases_total(const store_t *s)
{
    uint64_t n = 0;
    STRMAP_FOREACH(&s->groups, slot) { n += ((const group_state_t *)slot->val)->inflight; }
    return n;
}

static void lease_put(store_t *s, group_state_t *g, msg_t *m, uint64_t deadline)
{
    key_t_ k;
    m->dest = MSG_DEST_GROUP;
    m->group.ptr = g->name; m->group.len = (uint32_t)g->len;
    m->group_gen = g->gen;
    lease_key(&k, deadline, g->name, g->len, m->id);
    batch_put_msg(s, &k, m);
    named_key(&k, 'J', g->name, g->len, m->id);
    char v[8];
    put_be64(v, deadline);
    batch_put(s, &k, v, 8);
    g->inflight++;
    mark_group(s, g);
    if (deadline < s->lease_floor) { s->lease_floor = deadline; }
    if (deadline > s->lease_ceiling) { s->lease_ceiling = deadline; }
    if (s->lease_next_valid && deadline < s->lease_next) { s->lease_next = deadline; }
}

/* Read the queue range prefix from `from`, leasing up to want messages. Returns
 * the count leased, -1 on error. *last_seq gets the last seq taken. */
static int lease_from_range(store_t *s, group_state_t *g, char tag, uint64_t from, int want,
                            uint64_t deadline, uint64_t *budget, msg_owned_t *out, uint64_t *last_seq,
                            int delete_taken, char *err, size_t errlen)
{
    const char *src = tag == 'R' ? g->name : g->topic->name;
    size_t srclen = tag == 'R' ? g->len : g->topic->len;
    key_t_ k;
    key_start(&k, tag); key_name(&k, src, srclen);
    char prefix[KEY_MAX];
    size_t plen = k.n;
    memcpy(prefix, k.b, plen);
    key_u64(&k, from);
    leveldb_iterator_t *it = iter_at(s, &k);
    const char *key;
    size_t klen;
    int n = 0, rc = 0;
    for (; n < want && *budget > 0 && iter_in(it, prefix, plen, &key, &klen); leveldb_iter_next(it)) {
        if (klen != plen + 8) { set_err(err, errlen, "corrupt queue key in %s", s->path); rc = -1; break; }
        size_t vlen;
        const char *v = leveldb_iter_value(it, &vlen);
        msg_t m;
        if (decode_value(v, vlen, &m, tag == 'R' ? "a retry queue" : "a topic log", err, errlen) != 0) {
            rc = -1;
            break;
        }
        *last_seq = get_be64(key + plen);
        if (delete_taken) {
            key_t_ dk;
            memcpy(dk.b, key, klen);
            dk.n = klen;
            batch_del(s, &dk);
        }
        lease_put(s, g, &m, deadline);
        msg_owned_copy(&out[n], &m);
        n++;
        *budget -= m.payload.len < *budget ? m.payload.len : *budget;
        if (n == want || *budget == 0) { break; }   /* no step past it: that could walk a following range's deleted keys */
    }
    if (rc == 0) { rc = iter_error(it, "a queue", err, errlen); }
    leveldb_iter_destroy(it);
    if (rc != 0) {
        for (int i = 0; i < n; i++) { msg_owned_free(&out[i]); }
        return -1;
    }
    return n;
}

int store_lease(store_t *s, const char *group, size_t group_len,
                const char *topic, size_t topic_len, int count, uint64_t lease_ms,
                uint64_t now_ms, msg_owned_t *out, int *n, char *err, size_t errlen)
{
    *n = 0;
    if (msg_check_name("group", group, group_len, err, errlen) != 0 ||
        msg_check_name("topic", topic, topic_len, err, errlen) != 0) {
        return -1;
    }
    if (count < 1) {
        set_err(err, errlen, "count must be at least 1");
        return -1;
    }
    if (prepare_read(s, err, errlen) != 0) { return -1; }
    group_state_t *g = group_get(s, group, group_len);
    if (g == NULL) {
        g = group_create(s, group, group_len, topic_get_or_create(s, topic, topic_len), 1,
                         s->opt.max_reconsume, now_ms);
    } else if (g->topic->len != topic_len || memcmp(g->topic->name, topic, topic_len) != 0) {
        set_err(err, errlen, "group %.*s is bound to topic %.*s, not %.*s", (int)group_len, group,
                (int)g->topic->len, g->topic->name, (int)topic_len, topic);
        return -1;
    }
    uint64_t deadline = now_ms + lease_ms;
    uint64_t last = 0;
    uint64_t budget = s->opt.max_lease_bytes ? s->opt.max_lease_bytes : 1;
    if (g->retry_ready > 0) {
        int want = count < (int64_t)g->retry_ready ? count : (int)g->retry_ready;
        int got = lease_from_range(s, g, 'R', g->retry_head_hint, want, deadline, &budget, out, &last, 1,
                                   err, errlen);
        if (got < 0) { return -1; }
        if (got > 0) {
            g->retry_ready -= (uint64_t)got;
            g->retry_head_hint = last + 1;
            g->pops_since_compact += (uint64_t)got;
        }
        *n = got;
    }
    uint64_t backlog = g->topic->appended - g->position;
    if (*n < count && backlog > 0 && budget > 0) {
        int want = count - *n;
        if ((uint64_t)want > backlog) { want = (int)backlog; }
        int got = lease_from_range(s, g, 'T', g->cursor, want, deadline, &budget, out + *n, &last, 0,
                                   err, errlen);
        if (got < 0) {
            for (int i = 0; i < *n; i++) { msg_owned_free(&out[i]); }
            *n = 0;
            return -1;
        }
        if (got > 0) {
            g->cursor = last + 1;
            g->position += (uint64_t)got;
        }
        *n += got;
    }
    if (*n > 0) { mark_group(s, g); }
    return 0;
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

/* Read a lease's index entry: 1 found (*deadline), 0 not, -1 error. */
static int lease_lookup(store_t *s, const char *group, size_t glen, uint64_t id, uint64_t *deadline,
                        char *err, size_t errlen)
{
    key_t_ k;
    named_key(&k, 'J', group, glen, id);
    char *v;
    size_t vlen;
    int found = db_get(s, &k, &v, &vlen, err, errlen);
    if (found <= 0) { return found; }
    if (vlen != 8) {
        leveldb_free(v);
        set_err(err, errlen, "corrupt lease index entry in %s", s->path);
        return -1;
    }
    *deadline = get_be64(v);
    leveldb_free(v);
    return 1;
}

static void lease_delete(store_t *s, group_state_t *g, uint64_t id, uint64_t deadline)
{
    key_t_ k;
    lease_key(&k, deadline, g->name, g->len, id);
    batch_del(s, &k);
    named_key(&k, 'J', g->name, g->len, id);
    batch_del(s, &k);
    g->inflight--;
    mark_group(s, g);
    if (s->lease_next_valid && deadline <= s->lease_next) { s->lease_next_valid = 0; }
    s->lease_pops_since_compact++;
}

/* Find id's entry in a group's lease index with an iterator that walks the
 * index forward (so ids must come in increasing order): a few Next steps when
 * the entry is close ahead, as in the usual ACK of a batch just leased, else
 * one Seek. idx->b[0..plen) is the index prefix of the group. 1 found
 * (*deadline), 0 not there, -1 on a corrupt entry. */
static int lease_index_find(store_t *s, leveldb_iterator_t *it, key_t_ *idx, size_t plen, uint64_t id,
                            uint64_t *deadline, char *err, size_t errlen)
{
    const char *key;
    size_t klen;
    for (int steps = 0; iter_in(it, idx->b, plen, &key, &klen); steps++) {
        uint64_t at = klen == plen + 8 ? get_be64(key + plen) : 0;
        size_t vlen = 0;
        const char *v = at == id ? leveldb_iter_value(it, &vlen) : NULL;
        if (klen != plen + 8 || (v != NULL && vlen != 8)) {
            set_err(err, errlen, "corrupt lease index entry in %s", s->path);
            return -1;
        }
        if (at > id) { return 0; }
        if (at == id) {
            *deadline = get_be64(v);
            return 1;
        }
        if (steps < 8) {
            leveldb_iter_next(it);
        } else {                 /* far ahead: after the seek the entry is at or past id */
            idx->n = plen;
            key_u64(idx, id);
            leveldb_iter_seek(it, idx->b, idx->n);
        }
    }
    return 0;                    /* past the group's range: not there */
}

/* The ids are sorted. A few are looked up with a Get each; more with one
 * iterator walking the group's lease index (lease_index_find): creating it
 * costs about two Gets, each step after that a fraction of one. */
int store_ack(store_t *s, const char *group, size_t group_len, const uint64_t *ids, int n,
              int *released, char *err, size_t errlen)
{
    *released = 0;
    if (prepare_read(s, err, errlen) != 0) { return -1; }
    group_state_t *g = group_get(s, group, group_len);
    if (g == NULL || n <= 0) { return 0; }
    uint64_t *sorted = xmalloc((size_t)n * sizeof *sorted);
    memcpy(sorted, ids, (size_t)n * sizeof *sorted);
    qsort(sorted, (size_t)n, sizeof *sorted, cmp_u64);
    key_t_ idx;
    key_start(&idx, 'J'); key_name(&idx, group, group_len);
    size_t plen = idx.n;
    key_u64(&idx, sorted[0]);
    leveldb_iterator_t *it = n >= 4 ? iter_at(s, &idx) : NULL;
    int rc = 0;
    for (int i = 0; i < n; i++) {
        if (i > 0 && sorted[i] == sorted[i - 1]) { continue; }
        uint64_t deadline;
        int found = it != NULL ? lease_index_find(s, it, &idx, plen, sorted[i], &deadline, err, errlen)
                               : lease_lookup(s, group, group_len, sorted[i], &deadline, err, errlen);
        if (found < 0) { rc = -1; break; }
        if (found) {
            lease_delete(s, g, sorted[i], deadline);
            (*released)++;
        }
    }
    if (it != NULL) {
        if (rc == 0) { rc = iter_error(it, "the lease index", err, errlen); }
        leveldb_iter_destroy(it);
    }
    free(sorted);
    return rc;
}

/* Fetch the leased message value: 1 found (*m views into *buf, free with leveldb_free), 0, -1. */
static int lease_fetch(store_t *s, const char *group, size_t glen, uint64_t id, uint64_t deadline,
                       msg_t *m, char **buf, char *err, size_t errlen)
{
    key_t_ k;
    lease_key(&k, deadline, group, glen, id);
    size_t vlen;
    int found = db_get(s, &k, buf, &vlen, err, errlen);
    if (found <= 0) {
        if (found == 0) { set_err(err, errlen, "lease index names a missing lease (id %llu) in %s",
                                  (unsigned long long)id, s->path); }
        return -1;
    }
    if (decode_value(*buf, vlen, m, "a lease", err, errlen) != 0) {
        leveldb_free(*buf);
        return -1;
    }
    return 1;
}

/* Remove a lease (TOUCH, NACK, expiry): 1 with *g, *m (views into *buf, free
 * with leveldb_free) and the lease's deletion added to the batch; 0 when there
 * is no such lease or group; -1 on error. Commits what is pending first. */
static int lease_take(store_t *s, const char *group, size_t group_len, uint64_t id, group_state_t **g,
                      msg_t *m, char **buf, char *err, size_t errlen)
{
    if (prepare_read(s, err, errlen) != 0) { return -1; }
    *g = group_get(s, group, group_len);
    if (*g == NULL) { return 0; }
    uint64_t deadline;
    int f = lease_lookup(s, group, group_len, id, &deadline, err, errlen);
    if (f <= 0) { return f; }
    if (lease_fetch(s, group, group_len, id, deadline, m, buf, err, errlen) < 0) { return -1; }
    lease_delete(s, *g, id, deadline);
    return 1;
}

int store_lease_get(store_t *s, const char *group, size_t group_len, uint64_t id,
                    msg_owned_t *out, uint64_t *deadline_ms, char *err, size_t errlen)
{
    if (prepare_read(s, err, errlen) != 0) { return -1; }
    if (group_get(s, group, group_len) == NULL) { return 0; }
    uint64_t deadline;
    int found = lease_lookup(s, group, group_len, id, &deadline, err, errlen);
    if (found <= 0) { return found; }
    if (deadline_ms) { *deadline_ms = deadline; }
    if (out != NULL) {
        msg_t m;
        char *buf;
        if (lease_fetch(s, group, group_len, id, deadline, &m, &buf, err, errlen) < 0) { return -1; }
        msg_owned_copy(out, &m);
        leveldb_free(buf);
    }
    return 1;
}

int store_touch(store_t *s, const char *group, size_t group_len, uint64_t id,
                uint64_t new_deadline_ms, int *found, char *err, size_t errlen)
{
    *found = 0;
    group_state_t *g;
    msg_t m;
    char *buf;
    int f = lease_take(s, group, group_len, id, &g, &m, &buf, err, errlen);
    if (f <= 0) { return f; }
    lease_put(s, g, &m, new_deadline_ms);
    leveldb_free(buf);
    *found = 1;
    return 0;
}

uint64_t store_next_lease_deadline(store_t *s)
{
    /* A read like any other: commit first. Reading past a pending batch both
     * misses its leases (a TOUCH to an earlier deadline, a new shorter lease) and
     * sees leases it already released (ACK), and raising lease_floor past a
     * pending lease would make store_expired_leases skip it for good. A broken
     * store answers 0 ("now"), so the caller's next real call reports it. */
    if (s->pending > 0 && store_commit_durable(s, 0, NULL, 0) != 0) { return 0; }
    if (s->lease_next_valid) { return s->lease_next; }
    uint64_t next = UINT64_MAX;
    /* With no lease held, no seek: it would walk every released lease's deleted
     * key from the floor on, and then the lease index's, to reach a live key. */
    if (leases_total(s) > 0) {
        key_t_ k;
        key_start(&k, 'I'); key_u64(&k, s->lease_floor);
        leveldb_iterator_t *it = iter_at(s, &k);
        const char *key;
        size_t klen;
        if (iter_in(it, "I", 1, &key, &klen) && klen >= 9) { next = get_be64(key + 1); }
        leveldb_iter_destroy(it);
    }
    /* No lease left (and none pending: committed above): every key from the
     * floor on is the tombstone of a released lease, none above the highest
     * deadline leased since open. Seek from there next time, or every seek
     * walks all the leases released since the floor last moved (lease_put
     * lowers the floor again for an earlier deadline). */
    if (next != UINT64_MAX) { s->lease_floor = next; }
    else if (s->lease_ceiling > s->lease_floor) { s->lease_floor = s->lease_ceiling; }
    s->lease_next = next;
    s->lease_next_valid = 1;
    return next;
}

int store_expired_leases(store_t *s, uint64_t now_ms, store_lease_ref_t *out, int max, int *n,
                         char *err, size_t errlen)
{
    *n = 0;
    if (prepare_read(s, err, errlen) != 0) { return -1; }
    uint64_t total = leases_total(s);   /* never step past the last lease (see store_next_lease_deadline) */
    if (total == 0) { return 0; }
    key_t_ k;
    key_start(&k, 'I'); key_u64(&k, s->lease_floor);
    leveldb_iterator_t *it = iter_at(s, &k);
    const char *key;
    size_t klen;
    int rc = 0, first = 1;
    for (; *n < max && iter_in(it, "I", 1, &key, &klen); leveldb_iter_next(it)) {
        if (klen < 1 + 8 + 2 + 8 || key[klen - 9] != '\0') {
            set_err(err, errlen, "corrupt lease key in %s", s->path);
            rc = -1;
            break;
        }
        uint64_t deadline = get_be64(key + 1);
        if (first) { s->lease_floor = deadline; first = 0; }
        if (deadline > now_ms) { break; }
        size_t glen = klen - 1 - 8 - 1 - 8;
        size_t vlen;
        const char *v = leveldb_iter_value(it, &vlen);
        msg_t m;
        if (decode_value(v, vlen, &m, "a lease", err, errlen) != 0) { rc = -1; break; }
        store_lease_ref_t *r = &out[(*n)++];
        memcpy(r->group, key + 9, glen);
        r->group[glen] = '\0';
        r->id = get_be64(key + klen - 8);
        r->reconsume = m.reconsume;
        r->deadline_ms = deadline;
        if (*n == max || (uint64_t)*n == total) { break; }
    }
    if (rc == 0) { rc = iter_error(it, "the lease range", err, errlen); }
    leveldb_iter_destroy(it);
    return rc;
}

int store_fail(store_t *s, const char *group, size_t group_len, uint64_t id,
               const store_fail_req_t *req, uint64_t now_ms, int *found, uint64_t *due_out,
               char *err, size_t errlen)
{
    *found = 0;
    if (due_out) { *due_out = 0; }
    if (req->reason_len > MSG_MAX_REASON) {
        set_err(err, errlen, "reason is %zu bytes, longer than the limit of %d", req->reason_len, MSG_MAX_REASON);
        return -1;
    }
    const lvl_table_t *t = &s->opt.levels;
    if (!req->to_dlq) {
        if (req->level < 0 || req->level > t->count) {
            set_err(err, errlen, "level %d does not exist (levels are 1..%d)", req->level, t->count);
            return -1;
        }
        if (req->level == 0 && req->delay_ms == 0) {
            set_err(err, errlen, "retry delay must be positive");
            return -1;
        }
        uint8_t plan[LVL_MAX_HOPS];
        int hops;
        if (req->level == 0
            && lvl_chain_plan(t, req->delay_ms, s->opt.max_delay_ms, plan, LVL_MAX_HOPS, &hops, err, errlen) != 0) {
            return -1;
        }
    }
    group_state_t *g;
    msg_t m;
    char *buf;
    int f = lease_take(s, group, group_len, id, &g, &m, &buf, err, errlen);
    if (f <= 0) { return f; }
    m.reconsume++;
    m.reason.ptr = req->reason; m.reason.len = (uint32_t)req->reason_len;
    if (req->to_dlq) {
        key_t_ k;
        m.stamp_ms = now_ms;
        named_key(&k, 'D', g->name, g->len, id);
        batch_put_msg(s, &k, &m);
        g->dlq++;
    } else {
        m.dest = MSG_DEST_GROUP;
        m.group_gen = g->gen;
        uint64_t due = level_enqueue(s, &m, req->level, req->level ? 0 : lvl_round_delay(req->delay_ms), now_ms);
        g->retry_delayed++;
        if (due_out) { *due_out = due; }
    }
    mark_group(s, g);
    leveldb_free(buf);
    *found = 1;
    return 0;
}

/* ---- DLQ ---------------------------------------------------------------------------------- */

int store_dlq_list(store_t *s, const char *group, size_t group_len, uint64_t after_id, int count,
                   msg_owned_t *out, int *n, char *err, size_t errlen)
{
    *n = 0;
    if (prepare_read(s, err, errlen) != 0) { return -1; }
    if (group_get(s, group, group_len) == NULL || count <= 0 || after_id == UINT64_MAX) { return 0; }
    key_t_ k;
    key_start(&k, 'D'); key_name(&k, group, group_len);
    char prefix[KEY_MAX];
    size_t plen = k.n;
    memcpy(prefix, k.b, plen);
    key_u64(&k, after_id + 1);
    leveldb_iterator_t *it = iter_at(s, &k);
    const char *key;
    size_t klen;
    int rc = 0;
    for (; *n < count && iter_in(it, prefix, plen, &key, &klen); leveldb_iter_next(it)) {
        size_t vlen;
        const char *v = leveldb_iter_value(it, &vlen);
        msg_t m;
        if (decode_value(v, vlen, &m, "the DLQ", err, errlen) != 0) { rc = -1; break; }
        msg_owned_copy(&out[(*n)++], &m);
    }
    if (rc == 0) { rc = iter_error(it, "the DLQ", err, errlen); }
    leveldb_iter_destroy(it);
    if (rc != 0) {
        for (int i = 0; i < *n; i++) { msg_owned_free(&out[i]); }
        *n = 0;
    }
    return rc;
}

/* Requeue (requeue = 1) or drop each DLQ entry of g with the given id, or all. */
static int dlq_take(store_t *s, group_state_t *g, uint64_t id, int all, int requeue, uint64_t now_ms,
                    uint64_t *count, char *err, size_t errlen)
{
    key_t_ k;
    key_start(&k, 'D'); key_name(&k, g->name, g->len);
    char prefix[KEY_MAX];
    size_t plen = k.n;
    memcpy(prefix, k.b, plen);
    key_u64(&k, all ? 0 : id);
    leveldb_iterator_t *it = iter_at(s, &k);
    const char *key;
    size_t klen;
    int rc = 0;
    for (; iter_in(it, prefix, plen, &key, &klen); leveldb_iter_next(it)) {
        if (klen != plen + 8) { set_err(err, errlen, "corrupt DLQ key in %s", s->path); rc = -1; break; }
        if (!all && get_be64(key + plen) != id) { break; }
        key_t_ dk;
        memcpy(dk.b, key, klen);
        dk.n = klen;
        if (requeue) {
            size_t vlen;
            const char *v = leveldb_iter_value(it, &vlen);
            msg_t m;
            if (decode_value(v, vlen, &m, "the DLQ", err, errlen) != 0) { rc = -1; break; }
            m.reconsume = 0;
            retry_ready_append(s, g, &m, now_ms);
        }
        batch_del(s, &dk);
        g->dlq--;
        (*count)++;
        if (!all) { break; }
    }
    if (rc == 0) { rc = iter_error(it, "the DLQ", err, errlen); }
    leveldb_iter_destroy(it);
    if (*count) { mark_group(s, g); }
    return rc;
}

int store_dlq_requeue(store_t *s, const char *group, size_t group_len, uint64_t id, int all,
                      uint64_t now_ms, uint64_t *count, char *err, size_t errlen)
{
    *count = 0;
    if (prepare_read(s, err, errlen) != 0) { return -1; }
    group_state_t *g = group_get(s, group, group_len);
    return g == NULL ? 0 : dlq_take(s, g, id, all, 1, now_ms, count, err, errlen);
}

int store_dlq_drop(store_t *s, const char *group, size_t group_len, uint64_t id, int all,
                   uint64_t *count, char *err, size_t errlen)
{
    *count = 0;
    if (prepare_read(s, err, errlen) != 0) { return -1; }
    group_state_t *g = group_get(s, group, group_len);
    return g == NULL ? 0 : dlq_take(s, g, id, all, 0, 0, count, err, errlen);
}

/* ---- topics ---------------------------------------------------------------------------------- */

int store_topic_info(const store_t *s, const char *topic, size_t topic_len, store_topic_info_t *out)
{
    const topic_state_t *t = topic_get(s, topic, topic_len);
    if (t == NULL) { return 0; }
    out->appended = t->appended;
    out->retained = t->appended - t->removed;
    out->groups = t->groups;
    return 1;
}

/* ---- maintenance ------------------------------------------------------------------------------ */

/* Smallest cursor of the groups bound to t; UINT64_MAX when none. */
static uint64_t topic_min_cursor(const store_t *s, const topic_state_t *t)
{
    uint64_t min = UINT64_MAX;
    STRMAP_FOREACH(&s->groups, slot) {
        const group_state_t *g = slot->val;
        if (g->topic == t && g->cursor < min) { min = g->cursor; }
    }
    return min;
}

/* Collect up to budget topic-log entries of t that every group passed (or, with
 * no group, that are past retention). Returns the count, -1 on error. */
static int topic_gc(store_t *s, topic_state_t *t, uint64_t now_ms, int budget, char *err, size_t errlen)
{
    if (t->appended == t->removed) { return 0; }
    uint64_t below = t->groups > 0 ? topic_min_cursor(s, t) : UINT64_MAX;
    key_t_ k;
    key_start(&k, 'T'); key_name(&k, t->name, t->len);
    char prefix[KEY_MAX];
    size_t plen = k.n;
    memcpy(prefix, k.b, plen);
    key_u64(&k, t->head_hint);
    leveldb_iterator_t *it = iter_at(s, &k);
    const char *key;
    size_t klen;
    int n = 0, rc = 0;
    for (; n < budget && iter_in(it, prefix, plen, &key, &klen); leveldb_iter_next(it)) {
        uint64_t seq = get_be64(key + plen);
        if (t->groups > 0) {
            if (seq >= below) { break; }
        } else {
            size_t vlen;
            const char *v = leveldb_iter_value(it, &vlen);
            msg_t m;
            if (decode_value(v, vlen, &m, "a topic log", err, errlen) != 0) { rc = -1; break; }
            if (m.stamp_ms + s->opt.retention_ms > now_ms) { break; }
        }
        key_t_ dk;
        memcpy(dk.b, key, klen);
        dk.n = klen;
        batch_del(s, &dk);
        t->removed++;
        t->head_hint = seq + 1;
        t->pops_since_compact++;
        n++;
    }
    if (rc == 0) { rc = iter_error(it, "a topic log", err, errlen); }
    leveldb_iter_destroy(it);
    if (n > 0) { mark_topic(s, t); }
    return rc != 0 ? -1 : n;
}

static void compact_below(store_t *s, const key_t_ *start, const key_t_ *limit)
{
    leveldb_compact_range(s->db, start->b, start->n, limit->b, limit->n);
}

/* Compact the consumed part of a named queue (tag name 0x00 seq) below head
 * when it popped enough since the last time. Returns 1 when it compacted. */
static int compact_named_range(store_t *s, char tag, const char *name, size_t len, uint64_t head,
                               uint64_t *pops_since_compact)
{
    if (*pops_since_compact < COMPACT_AFTER_POPS) { return 0; }
    key_t_ a, b;
    key_start(&a, tag); key_name(&a, name, len);
    named_key(&b, tag, name, len, head);
    compact_below(s, &a, &b);
    *pops_since_compact = 0;
    return 1;
}

int store_maintain(store_t *s, uint64_t now_ms, int max_deletes, int *work, char *err, size_t errlen)
{
    *work = 0;
    if (prepare_read(s, err, errlen) != 0) { return -1; }
    STRMAP_FOREACH(&s->topics, slot) {
        if (*work >= max_deletes) { break; }
        int n = topic_gc(s, slot->val, now_ms, max_deletes - *work, err, errlen);
        if (n < 0) { return -1; }
        *work += n;
    }
    if (store_commit_durable(s, 0, err, errlen) != 0) { return -1; }
    key_t_ a, b;
    for (int l = 1; l <= s->opt.levels.count; l++) {
        level_state_t *ls = &s->levels[l];
        if (ls->pops_since_compact < COMPACT_AFTER_POPS) { continue; }
        key_start(&a, 'L'); key_u8(&a, (uint8_t)l);
        if (ls->has_head) { level_key(&b, l, ls->head_due, ls->head_seq); }
        else { key_start(&b, 'L'); key_u8(&b, (uint8_t)(l + 1)); }
        compact_below(s, &a, &b);
        ls->pops_since_compact = 0;
        (*work)++;
    }
    STRMAP_FOREACH(&s->topics, slot) {
        topic_state_t *t = slot->val;
        *work += compact_named_range(s, 'T', t->name, t->len, t->head_hint, &t->pops_since_compact);
    }
    STRMAP_FOREACH(&s->groups, slot) {
        group_state_t *g = slot->val;
        *work += compact_named_range(s, 'R', g->name, g->len, g->retry_head_hint, &g->pops_since_compact);
    }
    if (s->lease_pops_since_compact >= COMPACT_AFTER_POPS) {
        key_start(&a, 'I');
        key_start(&b, 'I'); key_u64(&b, s->lease_floor);
        compact_below(s, &a, &b);
        s->lease_pops_since_compact = 0;
        (*work)++;
    }
    return 0;
}

/* ---- scanning and checking --------------------------------------------------------------------- */

int store_scan(store_t *s, int (*fn)(void *ctx, const store_entry_t *e), void *ctx,
               char *err, size_t errlen)
{
    if (prepare_read(s, err, errlen) != 0) { return -1; }
    static const char tags[] = { 'L', 'T', 'R', 'I', 'D' };
    int rc = 0;
    for (size_t i = 0; i < sizeof tags && rc == 0; i++) {
        key_t_ k;
        key_start(&k, tags[i]);
        leveldb_iterator_t *it = iter_at(s, &k);
        const char *key;
        size_t klen;
        for (; iter_in(it, &tags[i], 1, &key, &klen); leveldb_iter_next(it)) {
            size_t vlen;
            const char *v = leveldb_iter_value(it, &vlen);
            msg_t m;
            char where[48];
            snprintf(where, sizeof where, "range '%c'", tags[i]);
            if (decode_value(v, vlen, &m, where, err, errlen) != 0) { rc = -1; break; }
            store_entry_t e = { .range = (store_range_t)tags[i], .m = &m };
            if (klen < 9) { set_err(err, errlen, "corrupt key in %s", where); rc = -1; break; }
            switch (tags[i]) {
            case 'L': e.level = (unsigned char)key[1]; e.due_ms = get_be64(key + 2); e.seq = get_be64(key + klen - 8); break;
            case 'I': e.deadline_ms = get_be64(key + 1); break;
            case 'D': break;
            default: e.seq = get_be64(key + klen - 8); break;
            }
            if (fn(ctx, &e) != 0) { rc = 1; break; }
        }
        if (rc == 0) { rc = iter_error(it, "the store", err, errlen); }
        leveldb_iter_destroy(it);
    }
    return rc < 0 ? -1 : 0;
}

typedef struct check_ctx {
    store_t *s;
    uint64_t level_depth[LVL_MAX_LEVELS + 1];
    uint64_t level_first_due[LVL_MAX_LEVELS + 1];   /* the first key of each level, in scan order */
    uint64_t level_first_seq[LVL_MAX_LEVELS + 1];
    strmap_t counts;     /* "tag:name" → uint64_t* */
    char **places;       /* "group\0id" membership keys for the uniqueness check */
    size_t n_places, cap_places;
    char *err;
    size_t errlen;
    int bad;
} check_ctx_t;

static void check_count(check_ctx_t *c, char tag, const char *name, size_t len)
{
    char k[MSG_MAX_NAME + 3];
    k[0] = tag; k[1] = ':';
    memcpy(k + 2, name, len);
    uint64_t *v = strmap_get(&c->counts, k, len + 2);
    if (v == NULL) {
        v = calloc(1, sizeof *v);
        if (v == NULL) { abort(); }
        strmap_put(&c->counts, k, len + 2, v);
    }
    (*v)++;
}

static uint64_t check_get(check_ctx_t *c, char tag, const char *name, size_t len)
{
    char k[MSG_MAX_NAME + 3];
    k[0] = tag; k[1] = ':';
    memcpy(k + 2, name, len);
    uint64_t *v = strmap_get(&c->counts, k, len + 2);
    return v ? *v : 0;
}

static void check_place(check_ctx_t *c, const msg_str_t *group, uint64_t id)
{
    if (c->n_places == c->cap_places) {
        c->cap_places = c->cap_places ? c->cap_places * 2 : 1024;
        c->places = xrealloc(c->places, c->cap_places * sizeof *c->places);
    }
    char *p = xmalloc(group->len + 1 + 17);
    memcpy(p, group->ptr, group->len);
    p[group->len] = '\0';
    store_id_format(id, p + group->len + 1);
    c->places[c->n_places++] = p;
}

static int check_entry(void *ctx, const store_entry_t *e)
{
    check_ctx_t *c = ctx;
    const msg_t *m = e->m;
    switch (e->range) {
    case STORE_LEVEL:
        if (e->level < 1 || e->level > c->s->opt.levels.count) {
            set_err(c->err, c->errlen, "message %llu sits on level %d, outside the table",
                    (unsigned long long)m->id, e->level);
            c->bad = 1;
            return 1;
        }
        if (c->level_depth[e->level]++ == 0) {
            c->level_first_seq[e->level] = e->seq;
            c->level_first_due[e->level] = e->due_ms;
        }
        if (m->dest == MSG_DEST_GROUP) {
            group_state_t *g = group_get(c->s, m->group.ptr, m->group.len);
            if (g != NULL && g->gen == m->group_gen) {
                check_count(c, 'd', m->group.ptr, m->group.len);
                check_place(c, &m->group, m->id);
            }
        }
        break;
    case STORE_TOPIC: {
        check_count(c, 'T', m->topic.ptr, m->topic.len);
        STRMAP_FOREACH(&c->s->groups, slot) {
            group_state_t *g = slot->val;
            if (g->topic->len == m->topic.len && memcmp(g->topic->name, m->topic.ptr, m->topic.len) == 0 &&
                e->seq >= g->cursor) {
                check_count(c, 'B', g->name, g->len);
            }
        }
        break;
    }
    case STORE_RETRY: check_count(c, 'R', m->group.ptr, m->group.len); check_place(c, &m->group, m->id); break;
    case STORE_LEASE: check_count(c, 'I', m->group.ptr, m->group.len); check_place(c, &m->group, m->id); break;
    case STORE_DLQ: check_count(c, 'D', m->group.ptr, m->group.len); check_place(c, &m->group, m->id); break;
    }
    return 0;
}

static int cmp_str(const void *a, const void *b)
{
    const char *x = *(char *const *)a, *y = *(char *const *)b;
    int r = strcmp(x, y);
    return r ? r : strcmp(x + strlen(x) + 1, y + strlen(y) + 1);
}

static int check_lease_index(store_t *s, check_ctx_t *c, char *err, size_t errlen)
{
    key_t_ k;
    key_start(&k, 'J');
    leveldb_iterator_t *it = iter_at(s, &k);
    const char *key;
    size_t klen;
    int rc = 0;
    for (; iter_in(it, "J", 1, &key, &klen); leveldb_iter_next(it)) {
        size_t vlen;
        const char *v = leveldb_iter_value(it, &vlen);
        if (vlen != 8 || klen < 11) { set_err(err, errlen, "corrupt lease index entry"); rc = -1; break; }
        size_t glen = klen - 1 - 1 - 8;
        check_count(c, 'J', key + 1, glen);
        char *val;
        size_t ivlen;
        key_t_ ik;
        lease_key(&ik, get_be64(v), key + 1, glen, get_be64(key + klen - 8));
        int found = db_get(s, &ik, &val, &ivlen, err, errlen);
        if (found < 0) { rc = -1; break; }
        if (!found) {
            set_err(err, errlen, "lease index entry for group %.*s id %llu names no lease", (int)glen, key + 1,
                    (unsigned long long)get_be64(key + klen - 8));
            rc = -1;
            break;
        }
        leveldb_free(val);
    }
    if (rc == 0) { rc = iter_error(it, "the lease index", err, errlen); }
    leveldb_iter_destroy(it);
    return rc;
}

int store_check(store_t *s, char *err, size_t errlen)
{
    check_ctx_t c;
    memset(&c, 0, sizeof c);
    c.s = s;
    c.err = err;
    c.errlen = errlen;
    int rc = store_scan(s, check_entry, &c, err, errlen);
    if (rc == 0 && c.bad) { rc = -1; }
    if (rc == 0) { rc = check_lease_index(s, &c, err, errlen); }
    for (int l = 1; rc == 0 && l <= s->opt.levels.count; l++) {
        if (c.level_depth[l] != s->levels[l].depth) {
            set_err(err, errlen, "level %d counter says %llu but holds %llu", l,
                    (unsigned long long)s->levels[l].depth, (unsigned long long)c.level_depth[l]);
            rc = -1;
        } else if (c.level_depth[l] > 0 && (!s->levels[l].has_head || s->levels[l].head_due != c.level_first_due[l] ||
                                            s->levels[l].head_seq != c.level_first_seq[l])) {
            set_err(err, errlen, "level %d remembers head (%llu, %llu) but its first message is at (%llu, %llu)", l,
                    (unsigned long long)s->levels[l].head_due, (unsigned long long)s->levels[l].head_seq,
                    (unsigned long long)c.level_first_due[l], (unsigned long long)c.level_first_seq[l]);
            rc = -1;
        }
    }
    if (rc == 0) {
        STRMAP_FOREACH(&s->topics, slot) {
            topic_state_t *t = slot->val;
            uint64_t held = check_get(&c, 'T', t->name, t->len);
            if (held != t->appended - t->removed) {
                set_err(err, errlen, "topic %s counters say %llu retained but the log holds %llu", t->name,
                        (unsigned long long)(t->appended - t->removed), (unsigned long long)held);
                rc = -1;
                break;
            }
        }
    }
    if (rc == 0) {
        STRMAP_FOREACH(&s->groups, slot) {
            group_state_t *g = slot->val;
            struct { const char *what; char tag; uint64_t want; } f[] = {
                { "backlog", 'B', g->topic->appended - g->position },
                { "retry-ready", 'R', g->retry_ready },
                { "retry-delayed", 'd', g->retry_delayed },
                { "in-flight", 'I', g->inflight },
                { "lease-index", 'J', g->inflight },
                { "DLQ", 'D', g->dlq },
            };
            for (size_t i = 0; i < sizeof f / sizeof f[0]; i++) {
                uint64_t held = check_get(&c, f[i].tag, g->name, g->len);
                if (held != f[i].want) {
                    set_err(err, errlen, "group %s %s counter says %llu but the store holds %llu", g->name,
                            f[i].what, (unsigned long long)f[i].want, (unsigned long long)held);
                    rc = -1;
                    break;
                }
            }
            if (rc != 0) { break; }
        }
    }
    if (rc == 0 && c.n_places > 1) {
        qsort(c.places, c.n_places, sizeof *c.places, cmp_str);
        for (size_t i = 1; i < c.n_places; i++) {
            if (cmp_str(&c.places[i - 1], &c.places[i]) == 0) {
                const char *p = c.places[i];
                set_err(err, errlen, "message %s of group %s is in two places", p + strlen(p) + 1, p);
                rc = -1;
                break;
            }
        }
    }
    for (size_t i = 0; i < c.n_places; i++) { free(c.places[i]); }
    free(c.places);
    STRMAP_FOREACH(&c.counts, slot) { free(slot->val); }
    strmap_free(&c.counts);
    return rc;
}
