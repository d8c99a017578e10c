/*
 * levels/check.c — reading a whole store: store_scan (every stored message)
 * and store_check, the consistency checker (see store.h).
 *
 * store_check verifies the invariants of keys.h against one walk over every
 * record in key order: every block of every table passes its checksum; every
 * value decodes; each level's depth and remembered head equal its
 * keys; each topic's counters equal its log and its delayed counter the level
 * entries bound for it; each group's counters equal its
 * ranges (backlog, retry-ready, delayed retries of its current gen on the
 * levels, leases, DLQ); each level's consume queue and the remainder lane's
 * hold its SEND-journey entries (check_cq.c) — on a level served from its CQ
 * those are the only record of a journey (no `L`, no 'X': design-commitlog.md
 * 4a.5), walked from the CQs (journey.c) and checked as level entries, also by
 * store_scan; every key parses as its readers parse it (keys.h's
 * layout: names of 1..MSG_MAX_NAME bytes without 0x00), a lease's naming its
 * message's group and id, a topic-log, retry-ready or DLQ entry's its
 * message's topic or group; a lease's topic-log seq is where its message's own
 * copy is (idx_check_*: every copy has its index entry, a lease's naming its
 * deadline); and no (group, id) is in two places. The walk reads each record
 * once; the index checks also look entries up by id (the index is not in
 * queue order). It uses nothing but what store_open
 * loads, so it works on a store just opened by a process that does nothing
 * else (an operator's check, through a scratch view: checkview.c) as well as
 * on one in use (tests).
 * It keeps a key per group message in memory: not for hot paths.
 *
 * Threading: one thread at a time (the store's).
 */
#include "levels/store_internal.h"
#include "base/alloc.h"
#include "base/err.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- scanning ------------------------------------------------------------------------ */

/* The message ranges, in scan order. */
static const enum key_tag scan_ranges[] = { KEY_LEVEL, KEY_TOPIC_LOG, KEY_RETRY, KEY_LEASE, KEY_DLQ };

/* Fill e's position fields from a key of range tag: 0, or -1 with the key
 * in err when it is too short to hold them (a level key not exactly
 * KEY_LEVEL_BYTES, as the level readers parse it; any other under 9 bytes).
 * where names the range. */
static int entry_position(enum key_tag tag, const char *key, size_t klen, store_entry_t *e, const char *where,
                          char *err, size_t errlen)
{
    int level = 0;
    if (tag == KEY_LEVEL ? key_level_parse(key, klen, &level, &e->due_ms, &e->seq) != 0 : klen < 9) {
        char d[KEY_DESCRIBE_BYTES];
        return err_set(err, errlen, "corrupt key %s in %s", key_describe(key, klen, d, sizeof d), where);
    }
    switch (tag) {
    case KEY_LEVEL:
        e->level = level;
        break;
    case KEY_LEASE:
        e->deadline_ms = be64_get(key + 1);
        break;
    case KEY_DLQ:
        break;
    default:
        e->seq = be64_get(key + klen - 8);
        break;
    }
    return 0;
}

typedef struct scan_journeys {
    int (*fn)(void *ctx, const store_entry_t *e);
    void *ctx;
} scan_journeys_t;

/* A SEND journey of a CQ-served level (journey.c) as a level entry: its CQ
 * entry's due and the `L` key it would have (STORE_JOURNEY_SEQ | id). */
static int scan_journey(void *ctx, const msg_t *m, const store_journey_t *at, char *err, size_t errlen)
{
    (void)err;
    (void)errlen;
    const scan_journeys_t *sj = ctx;
    store_entry_t e = {
        .range = STORE_LEVEL, .m = m, .level = at->level, .due_ms = at->hop_due, .seq = STORE_JOURNEY_SEQ | m->id
    };
    return sj->fn(sj->ctx, &e) != 0 ? 1 : 0;
}

/* A topic CQ entry (topic_cq.c) as the topic-log entry it stands for: seq
 * its CQ seq. */
static int scan_topic_cq(void *ctx, topic_state_t *t, uint64_t index, const msg_t *m, char *err, size_t errlen)
{
    (void)err;
    (void)errlen;
    const scan_journeys_t *sj = ctx;
    store_entry_t e = { .range = STORE_TOPIC, .m = m, .seq = store_topic_cq_seq(t, index) };
    return sj->fn(sj->ctx, &e) != 0 ? 1 : 0;
}

int store_scan(store_t *s, int (*fn)(void *ctx, const store_entry_t *e), void *ctx, char *err, size_t errlen)
{
    if (store_read_begin_whole(s, err, errlen) != 0 || store_read_barrier(s, err, errlen) != 0) {
        return -1;
    }
    int rc = 0;
    for (size_t i = 0; i < sizeof scan_ranges / sizeof scan_ranges[0] && rc == 0; i++) {
        scan_journeys_t sj = { fn, ctx };
        if (i == 1) { /* the levels' journeys that only their CQs hold, after the `L` range */
            rc = store_journeys_each(s, scan_journey, &sj, err, errlen);
        }
        if (i == 2) { /* the topic CQs' messages, after the 'T' range */
            rc = topic_cqs_each(s, scan_topic_cq, &sj, err, errlen);
        }
        if (rc != 0) {
            break;
        }
        enum key_tag tag = scan_ranges[i];
        char where[48];
        snprintf(where, sizeof where, "range '%c'", (char)tag);
        leveldb_iterator_t *it = store_iter_range(s, tag);
        const char *key;
        size_t klen;
        for (; store_iter_in_range(it, tag, &key, &klen); leveldb_iter_next(it)) {
            msg_t m;
            if (store_iter_msg(it, &m, where, err, errlen) != 0) {
                rc = -1;
                break;
            }
            store_entry_t e = { .range = (store_range_t)tag, .m = &m };
            if (entry_position(tag, key, klen, &e, where, err, errlen) != 0) {
                rc = -1;
                break;
            }
            if (fn(ctx, &e) != 0) {
                rc = 1;
                break;
            }
        }
        if (rc == 0) {
            rc = store_iter_error(it, "the store", err, errlen);
        }
        leveldb_iter_destroy(it);
    }
    return rc < 0 ? -1 : 0;
}

/* ---- checking -------------------------------------------------------------------------- */

typedef struct check_ctx {
    store_t *s;
    uint64_t level_depth[LVL_MAX_LEVELS + 1];
    uint64_t level_first_due[LVL_MAX_LEVELS + 1]; /* the first key of each level, in scan order */
    uint64_t level_first_seq[LVL_MAX_LEVELS + 1];
    uint64_t level_walked[LVL_MAX_LEVELS + 1];     /* its keys without STORE_JOURNEY_SEQ: retries, or journeys on `L` */
    uint64_t level_walked_due[LVL_MAX_LEVELS + 1]; /* the first of them */
    uint64_t level_walked_seq[LVL_MAX_LEVELS + 1];
    uint64_t level_walked_journeys[LVL_MAX_LEVELS + 1]; /* of them, bound for a topic */
    map_t counts;                 /* "tag:name" → uint64_t* (what the ranges hold per topic / group) */
    char **places;                /* "group\0id" membership keys for the uniqueness check */
    check_cq_t *cq;               /* the consume queues against the level entries (check_cq.c) */
    const idx_journey_t *journey; /* the journey of the level entry being checked when its CQ gave it, else NULL */
    size_t n_places, cap_places;
    char *err;
    size_t errlen;
} check_ctx_t;

/* The counter "tag:name" (created at 0 when asked to). */
static uint64_t *check_counter(check_ctx_t *c, char tag, const char *name, size_t len, int create)
{
    char k[MSG_MAX_NAME + 3];
    k[0] = tag;
    k[1] = ':';
    memcpy(k + 2, name, len);
    uint64_t *v = map_get(&c->counts, k, len + 2);
    if (v == NULL && create) {
        v = xcalloc(1, sizeof *v);
        map_put(&c->counts, k, len + 2, v);
    }
    return v;
}

static void check_count(check_ctx_t *c, char tag, const char *name, size_t len)
{
    (*check_counter(c, tag, name, len, 1))++;
}

static uint64_t check_get(check_ctx_t *c, char tag, const char *name, size_t len)
{
    const uint64_t *v = check_counter(c, tag, name, len, 0);
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

/* A message counted for its group ('R', 'I', 'D': its range; 'd': a delayed retry). */
static void check_group_entry(check_ctx_t *c, char tag, const msg_t *m)
{
    check_count(c, tag, m->group.ptr, m->group.len);
    check_place(c, &m->group, m->id);
}

static int check_entry(void *ctx, const store_entry_t *e)
{
    check_ctx_t *c = ctx;
    const msg_t *m = e->m;
    switch (e->range) {
    case STORE_LEVEL:
        if (e->level < 1 || e->level > c->s->opt.levels.count) {
            err_set(c->err, c->errlen, "message %llu sits on level %d, outside the table", (unsigned long long)m->id,
                    e->level);
            return 1;
        }
        if (c->level_depth[e->level]++ == 0) {
            c->level_first_seq[e->level] = e->seq;
            c->level_first_due[e->level] = e->due_ms;
        }
        if (!(e->seq & STORE_JOURNEY_SEQ)) {
            if (c->level_walked[e->level]++ == 0) {
                c->level_walked_seq[e->level] = e->seq;
                c->level_walked_due[e->level] = e->due_ms;
            }
            c->level_walked_journeys[e->level] += m->dest == MSG_DEST_TOPIC;
        }
        if (m->dest == MSG_DEST_TOPIC) {
            if (map_get(&c->s->topics, m->topic.ptr, m->topic.len) == NULL) {
                err_set(c->err, c->errlen, "message %llu on level %d is bound for topic %.*s, which has no record",
                        (unsigned long long)m->id, e->level, (int)m->topic.len, m->topic.ptr);
                return 1;
            }
            check_count(c, 'L', m->topic.ptr, m->topic.len);
            if (c->cq != NULL && check_cq_add(c->cq, e->level, e->due_ms, m, c->journey, c->err, c->errlen) != 0) {
                return 1;
            }
        }
        if (m->dest == MSG_DEST_GROUP) {
            const group_state_t *g = store_group_get(c->s, m->group.ptr, m->group.len);
            if (g != NULL && g->gen == m->group_gen) {
                check_group_entry(c, 'd', m);
            }
        }
        break;
    case STORE_TOPIC: {
        check_count(c, 'T', m->topic.ptr, m->topic.len);
        map_iter_t it = { 0 };
        void *v;
        while (map_next(&c->s->groups, &it, NULL, NULL, &v)) {
            const group_state_t *g = v;
            if (g->topic->len == m->topic.len && memcmp(g->topic->name, m->topic.ptr, m->topic.len) == 0 &&
                e->seq >= g->cursor) {
                check_count(c, 'B', g->name, g->len);
            }
        }
        break;
    }
    case STORE_RETRY:
        check_group_entry(c, 'R', m);
        break;
    case STORE_LEASE:
        check_group_entry(c, 'I', m);
        break;
    case STORE_DLQ:
        check_group_entry(c, 'D', m);
        break;
    }
    return 0;
}

static int cmp_place(const void *a, const void *b)
{
    const char *x = *(char *const *)a, *y = *(char *const *)b;
    int r = strcmp(x, y);
    return r ? r : strcmp(x + strlen(x) + 1, y + strlen(y) + 1);
}

/* Each level's depth and remembered head against what the scan saw. */
static int check_levels(const store_t *s, const check_ctx_t *c, char *err, size_t errlen)
{
    for (int l = 1; l <= s->opt.levels.count; l++) {
        const level_state_t *ls = &s->levels[l];
        if (c->level_depth[l] != ls->depth) {
            return err_set(err, errlen, "level %d counter says %llu but holds %llu", l, (unsigned long long)ls->depth,
                           (unsigned long long)c->level_depth[l]);
        }
        /* The `L` head is a lower bound (design-commitlog.md 4a.4): of every key when the level is walked
           (on_l), of its retries' keys when its journeys are served from its CQ. */
        uint64_t n = ls->on_l ? c->level_depth[l] : c->level_walked[l];
        uint64_t due = ls->on_l ? c->level_first_due[l] : c->level_walked_due[l];
        uint64_t seq = ls->on_l ? c->level_first_seq[l] : c->level_walked_seq[l];
        if (n > 0 && (!ls->has_head || ls->head_due > due || (ls->head_due == due && ls->head_seq > seq))) {
            return err_set(err, errlen, "level %d remembers head (%llu, %llu)%s but its first %s is at (%llu, %llu)", l,
                           (unsigned long long)ls->head_due, (unsigned long long)ls->head_seq,
                           ls->has_head ? "" : " (none)", ls->on_l ? "message" : "retry", (unsigned long long)due,
                           (unsigned long long)seq);
        }
        if (!ls->on_l && c->level_walked_journeys[l] > 0) {
            return err_set(err, errlen,
                           "level %d is served from its consume queue but %llu SEND journeys on it have no entry there",
                           l, (unsigned long long)c->level_walked_journeys[l]);
        }
        if (!ls->on_l && ls->retries != c->level_walked[l]) {
            return err_set(err, errlen, "level %d counts %llu retries but holds %llu", l,
                           (unsigned long long)ls->retries, (unsigned long long)c->level_walked[l]);
        }
    }
    return 0;
}

/* Each topic's and group's counters against what the scan counted. */
static int check_counters(const store_t *s, check_ctx_t *c, char *err, size_t errlen)
{
    map_iter_t it = { 0 };
    void *v;
    while (map_next(&s->topics, &it, NULL, NULL, &v)) {
        const topic_state_t *t = v;
        uint64_t held = check_get(c, 'T', t->name, t->len);
        if (held != t->appended - t->removed) {
            return err_set(err, errlen, "topic %s counters say %llu retained but the log holds %llu", t->name,
                           (unsigned long long)(t->appended - t->removed), (unsigned long long)held);
        }
        held = check_get(c, 'L', t->name, t->len);
        if (held != t->delayed) {
            return err_set(err, errlen,
                           "topic %s delayed counter says %llu but the levels hold %llu on their way to it", t->name,
                           (unsigned long long)t->delayed, (unsigned long long)held);
        }
    }
    /* A group being deleted has no backlog and drops its delayed retries
     * when due (group_delete.c): only what its deletion counts down. */
    const map_t *maps[] = { &s->groups, &s->deleting };
    for (size_t m = 0; m < sizeof maps / sizeof maps[0]; m++) {
        it = (map_iter_t){ 0 };
        while (map_next(maps[m], &it, NULL, NULL, &v)) {
            const group_state_t *g = v;
            const struct {
                const char *what;
                char tag;
                uint64_t want;
                int live_only; /* not kept by a group being deleted */
            } f[] = {
                { "backlog", 'B', g->topic->appended - g->position, 1 },
                { "retry-ready", 'R', g->retry_ready, 0 },
                { "retry-delayed", 'd', g->retry_delayed, 1 },
                { "in-flight", 'I', g->inflight, 0 },
                { "DLQ", 'D', g->dlq, 0 },
            };
            for (size_t i = 0; i < sizeof f / sizeof f[0]; i++) {
                if (g->deleting && f[i].live_only) {
                    continue;
                }
                uint64_t held = check_get(c, f[i].tag, g->name, g->len);
                if (held != f[i].want) {
                    return err_set(err, errlen, "group %s%s %s counter says %llu but the store holds %llu", g->name,
                                   g->deleting ? " (being deleted)" : "", f[i].what, (unsigned long long)f[i].want,
                                   (unsigned long long)held);
                }
            }
        }
    }
    return 0;
}

/* No (group, id) twice. Sorts c->places. */
static int check_unique(check_ctx_t *c, char *err, size_t errlen)
{
    if (c->n_places < 2) {
        return 0;
    }
    qsort(c->places, c->n_places, sizeof *c->places, cmp_place);
    for (size_t i = 1; i < c->n_places; i++) {
        if (cmp_place(&c->places[i - 1], &c->places[i]) == 0) {
            const char *p = c->places[i];
            return err_set(err, errlen, "message %s of group %s is in two places", p + strlen(p) + 1, p);
        }
    }
    return 0;
}

/* A lease key parsed as lease expiry and GROUP DEL parse it, naming the
 * group and id of the message it holds: 0, or -1 with the key in err. */
static int check_lease_key(check_ctx_t *c, const char *key, size_t klen, const msg_t *m)
{
    store_lease_key_t lk;
    if (store_lease_key_read(c->s, key, klen, &lk, c->err, c->errlen) != 0) {
        return -1;
    }
    if (lk.id != m->id || lk.glen != m->group.len || memcmp(lk.group, m->group.ptr, lk.glen) != 0) {
        char d[KEY_DESCRIBE_BYTES];
        return err_set(c->err, c->errlen, "lease key %s holds message %016llx of group %.*s, not its own",
                       key_describe(key, klen, d, sizeof d), (unsigned long long)m->id, (int)m->group.len,
                       m->group.ptr ? m->group.ptr : "");
    }
    return 0;
}

/* A topic-log, retry-ready or DLQ key parsed, naming the topic ('T') or the
 * group ('R', 'D') of the message it holds (the queue reads find it under
 * that name only): 0, or -1 with the key in err. */
static int check_queue_key(check_ctx_t *c, enum key_tag tag, const char *key, size_t klen, const msg_t *m)
{
    const char *name;
    size_t len;
    uint64_t n;
    char d[KEY_DESCRIBE_BYTES];
    if (key_queue_entry_parse(key, klen, &name, &len, &n) != 0) {
        return err_set(c->err, c->errlen,
                       "corrupt key %s in range '%c' (not tag name 0x00 u64 with a name of 1 to %d "
                       "bytes without 0x00)",
                       key_describe(key, klen, d, sizeof d), (char)tag, MSG_MAX_NAME);
    }
    const msg_str_t *own = tag == KEY_TOPIC_LOG ? &m->topic : &m->group;
    if (len != own->len || memcmp(name, own->ptr, len) != 0) {
        return err_set(c->err, c->errlen, "key %s holds message %016llx of %s %.*s, not its own",
                       key_describe(key, klen, d, sizeof d), (unsigned long long)m->id,
                       tag == KEY_TOPIC_LOG ? "topic" : "group", (int)own->len, own->ptr ? own->ptr : "");
    }
    return 0;
}

/* A message of range tag at the walk's iterator: decoded, its position read
 * from its key, given to both checkers and counted. 0, or -1 with err. */
static int walk_message(check_ctx_t *c, idx_check_t *ic, store_check_counts_t *n, leveldb_iterator_t *it,
                        enum key_tag tag, const char *key, size_t klen)
{
    char where[48];
    snprintf(where, sizeof where, "range '%c'", (char)tag);
    msg_t m;
    if (store_iter_msg(it, &m, where, c->err, c->errlen) != 0) {
        return -1;
    }
    store_entry_t e = { .range = (store_range_t)tag, .m = &m };
    if (entry_position(tag, key, klen, &e, where, c->err, c->errlen) != 0) {
        return -1;
    }
    if (tag == KEY_LEASE && check_lease_key(c, key, klen, &m) != 0) {
        return -1;
    }
    if ((tag == KEY_TOPIC_LOG || tag == KEY_RETRY || tag == KEY_DLQ) && check_queue_key(c, tag, key, klen, &m) != 0) {
        return -1;
    }
    if (check_entry(c, &e) != 0 || idx_check_entry(ic, &e) != 0) {
        return -1;
    }
    n->messages++;
    switch (e.range) {
    case STORE_LEVEL:
        n->level++;
        break;
    case STORE_TOPIC:
        n->topic++;
        break;
    case STORE_RETRY:
        n->retry++;
        break;
    case STORE_LEASE:
        n->lease++;
        break;
    case STORE_DLQ:
        n->dlq++;
        break;
    }
    return 0;
}

/* The one walk: every record of the database, in key order, with each
 * block's checksum verified and past the block cache. Each message goes to
 * check_entry and idx_check_entry, each index record to idx_check_record.
 * Walking everything (not only the ranges the checks know) is what finds a
 * damaged block between them; LevelDB's iterator skips a block that fails
 * its checksum and keeps the error in its status, so that error is looked at
 * last and comes first: what the checks saw around a skipped block is its
 * consequence. */
static int check_walk(store_t *s, check_ctx_t *c, idx_check_t *ic, store_check_counts_t *n, char *err, size_t errlen)
{
    if (store_read_begin_whole(s, err, errlen) != 0 || store_read_barrier(s, err, errlen) != 0) {
        return -1;
    }
    leveldb_readoptions_t *ro = leveldb_readoptions_create();
    leveldb_readoptions_set_verify_checksums(ro, 1);
    leveldb_readoptions_set_fill_cache(ro, 0);
    leveldb_iterator_t *it = leveldb_create_iterator(s->db, ro);
    int rc = 0;
    for (leveldb_iter_seek_to_first(it); rc == 0 && leveldb_iter_valid(it); leveldb_iter_next(it)) {
        size_t klen, vlen;
        const char *key = leveldb_iter_key(it, &klen);
        n->records++;
        if (klen == 0) {
            rc = err_set(err, errlen, "an empty key in the store (corrupt)");
            break;
        }
        enum key_tag tag = (enum key_tag)key[0];
        for (size_t i = 0; i < sizeof scan_ranges / sizeof scan_ranges[0]; i++) {
            if (scan_ranges[i] == tag) {
                rc = walk_message(c, ic, n, it, tag, key, klen);
                break;
            }
        }
        if (rc == 0 && (tag == KEY_MSG_INDEX || tag == KEY_COPY_INDEX || tag == KEY_KEY_INDEX)) {
            const char *v = leveldb_iter_value(it, &vlen);
            rc = idx_check_record(ic, key, klen, v, vlen);
        }
        if (rc == 0 && tag == KEY_LEASE_INDEX) {
            /* folded into the copy index at open (each lease's copy index
             * entry is checked against its lease key and 'X') */
            rc = err_set(err, errlen, "a format-2 lease index entry is left (open folds them into the copy index)");
        }
    }
    char *e = NULL;
    leveldb_iter_get_error(it, &e);
    leveldb_iter_destroy(it);
    leveldb_readoptions_destroy(ro);
    if (e == NULL) {
        return rc;
    }
    err_set(err, errlen,
            "%s is damaged: reading every record (%llu read) LevelDB found %s; a table file (*.ldb) holds a block that "
            "fails its checksum: restore the directory from a backup",
            s->path, (unsigned long long)n->records, e);
    leveldb_free(e);
    return -1;
}

typedef struct check_journeys {
    check_ctx_t *c;
    store_check_counts_t *n;
} check_journeys_t;

/* A SEND journey only its CQ holds (journey.c), checked as the level entry
 * store_scan makes of it; no 'X' to check (it has none until it arrives). */
static int check_journey(void *ctx, const msg_t *m, const store_journey_t *at, char *err, size_t errlen)
{
    (void)err;
    (void)errlen;
    check_journeys_t *cj = ctx;
    store_entry_t e = {
        .range = STORE_LEVEL, .m = m, .level = at->level, .due_ms = at->hop_due, .seq = STORE_JOURNEY_SEQ | m->id
    };
    cj->c->journey = &at->j;
    int rc = check_entry(cj->c, &e);
    cj->c->journey = NULL;
    if (rc != 0) {
        return -1;
    }
    cj->n->messages++;
    cj->n->level++;
    return 0;
}

/* A topic CQ entry's message (topic_cq.c), checked as the topic-log entry
 * store_scan makes of it; no 'X' to check (it has none), its segment's live
 * count to be compared (check_cq_add_topic). */
static int check_topic_cq(void *ctx, topic_state_t *t, uint64_t index, const msg_t *m, char *err, size_t errlen)
{
    check_journeys_t *cj = ctx;
    if (m->topic.len != t->len || memcmp(m->topic.ptr, t->name, t->len) != 0) {
        return err_set(err, errlen, "topic %s, CQ index %llu: its message %016llx is of topic %.*s", t->name,
                       (unsigned long long)index, (unsigned long long)m->id, (int)m->topic.len, m->topic.ptr);
    }
    store_entry_t e = { .range = STORE_TOPIC, .m = m, .seq = store_topic_cq_seq(t, index) };
    if (check_entry(cj->c, &e) != 0) {
        return -1;
    }
    check_cq_add_topic(cj->c->cq, m->id);
    cj->n->messages++;
    cj->n->topic++;
    return 0;
}

int store_check_counted(store_t *s, store_check_counts_t *counts, char *err, size_t errlen)
{
    check_ctx_t c;
    memset(&c, 0, sizeof c);
    c.s = s;
    c.err = err;
    c.errlen = errlen;
    map_init(&c.counts);
    idx_check_t ic = { .s = s, .err = err, .errlen = errlen };
    store_check_counts_t n = { 0 };
    c.cq = check_cq_new(s);
    int rc = check_walk(s, &c, &ic, &n, err, errlen); /* commits what is pending first */
    check_journeys_t cj = { &c, &n };
    if (rc == 0) {
        rc = store_journeys_each(s, check_journey, &cj, err, errlen);
    }
    if (rc == 0) {
        rc = topic_cqs_each(s, check_topic_cq, &cj, err, errlen);
    }
    if (rc == 0) { /* before the counts: a damaged queue is named, not the depth it leaves */
        rc = check_cq_end(c.cq, err, errlen);
    }
    if (rc == 0) {
        rc = check_levels(s, &c, err, errlen);
    }
    check_cq_free(c.cq);
    if (rc == 0) {
        rc = check_counters(s, &c, err, errlen);
    }
    if (rc == 0) {
        rc = check_unique(&c, err, errlen);
    }
    if (rc == 0) {
        rc = idx_check_end(&ic);
    }
    idx_check_free(&ic);
    for (size_t i = 0; i < c.n_places; i++) {
        free(c.places[i]);
    }
    free(c.places);
    map_free(&c.counts, free);
    if (counts != NULL) {
        *counts = n;
    }
    return rc;
}

int store_check(store_t *s, char *err, size_t errlen)
{
    return store_check_counted(s, NULL, err, errlen);
}
