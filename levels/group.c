/*
 * levels/group.c — topics and groups (see store.h): creating, describing,
 * listing groups (deleting them: group_delete.c), topic info, and the
 * in-memory maps of both.
 *
 * A topic exists once something names it (a SEND, a group binding) until an
 * operator deletes it while it is empty (store_topic_delete): its record
 * holds the log's appended / removed counters and how many of its messages
 * are still on their way through the levels. A
 * group is bound to one topic for life and reads its log from a cursor; its
 * incarnation (gen, the seq at creation) is stamped on its retries, so a
 * retry still on a level when its group is deleted and created again is
 * dropped when it comes due instead of reaching the new group.
 *
 * Threading: one thread at a time (the broker's storage thread).
 */
#include "levels/store_internal.h"
#include "base/alloc.h"
#include "base/err.h"

#include <stdlib.h>
#include <string.h>

/* ---- the maps ---------------------------------------------------------------------- */

group_state_t *store_group_get(const store_t *s, const char *name, size_t len)
{
    return map_get(&s->groups, name, len);
}

int store_topic_room_planned(const store_t *s, const map_t *planned, const char *topic, size_t topic_len, char *err,
                             size_t errlen)
{
    if (s->opt.max_topics == 0) {
        return 0;
    }
    /* under the limit, whether the topic exists does not matter: no lookup (before: one a SEND) */
    size_t count = map_count(&s->topics) + (planned != NULL ? map_count(planned) : 0);
    if (count < s->opt.max_topics || map_get(&s->topics, topic, topic_len) != NULL ||
        (planned != NULL && map_get(planned, topic, topic_len) != NULL)) {
        return 0;
    }
    return err_set(err, errlen,
                   "topic %.*s would be topic %zu, over max-topics %llu (send to an existing topic, delete an empty "
                   "one with TOPIC DEL, or raise max-topics)",
                   (int)topic_len, topic, count + 1, (unsigned long long)s->opt.max_topics);
}

int store_topic_room(const store_t *s, const char *topic, size_t topic_len, char *err, size_t errlen)
{
    return store_topic_room_planned(s, NULL, topic, topic_len, err, errlen);
}

int store_group_room(const store_t *s, const char *group, size_t group_len, char *err, size_t errlen)
{
    if (s->opt.max_groups == 0 || map_get(&s->groups, group, group_len) != NULL ||
        map_count(&s->groups) < s->opt.max_groups) {
        return 0;
    }
    return err_set(err, errlen,
                   "group %.*s would be group %zu, over max-groups %llu (use an existing group, delete one with "
                   "GROUP DEL, or raise max-groups)",
                   (int)group_len, group, map_count(&s->groups) + 1, (unsigned long long)s->opt.max_groups);
}

/* The hot paths (every SEND, every due move) ask for a topic by name, message
 * after message, and mostly for the one they asked for before: a map lookup
 * hashes the name byte by byte and was some 110 Ir of each; the comparison
 * with the last topic found is a fraction of that. store_topic_delete clears
 * it before the topic is freed. */
topic_state_t *store_topic_get(store_t *s, const char *name, size_t len)
{
    topic_state_t *t = s->topic_last;
    if (t != NULL && t->len == len && memcmp(t->name, name, len) == 0) {
        return t;
    }
    t = map_get(&s->topics, name, len);
    if (t != NULL) {
        s->topic_last = t;
    }
    return t;
}

topic_state_t *store_topic_get_or_create(store_t *s, const char *name, size_t len)
{
    topic_state_t *t = store_topic_get(s, name, len);
    if (t != NULL) {
        return t;
    }
    t = store_topic_make(s, name, len);
    if (s->redo != NULL) {
        topic_cq_make(s, t); /* its CQ from its creation: the redo's bounds tell a made queue from one to come */
    }
    return t;
}

topic_state_t *store_topic_make(store_t *s, const char *name, size_t len)
{
    topic_state_t *t = map_get(&s->topics, name, len);
    if (t != NULL) {
        return t;
    }
    t = xcalloc(1, sizeof *t);
    t->name = xstrndup(name, len);
    t->len = len;
    t->log_next_min = s->next_seq; /* above every seq the directory holds */
    t->held.applied_below = t->log_next_min;
    map_put(&s->topics, name, len, t);
    store_mark_topic(s, t);
    return t;
}

void store_topic_add_group(group_state_t *g)
{
    g->topic->groups++;
    g->next_in_topic = g->topic->first_group;
    g->topic->first_group = g;
    g->topic->gc_nmarks = 0; /* its cursor may be below every sample store_collect took */
}

void store_topic_remove_group(group_state_t *g)
{
    group_state_t **at = &g->topic->first_group;
    while (*at != g) {
        at = &(*at)->next_in_topic;
    }
    *at = g->next_in_topic;
    g->topic->groups--;
}

group_state_t *store_group_new(store_t *s, const char *name, size_t len, topic_state_t *t, int from_first,
                               uint32_t max_reconsume, uint64_t now_ms, char *err, size_t errlen)
{
    if (group_delete_finish(s, name, len, err, errlen) != 0) { /* its entries are keyed by name too */
        return NULL;
    }
    group_state_t *g = xcalloc(1, sizeof *g);
    g->name = xstrndup(name, len);
    g->len = len;
    g->topic = t;
    g->gen = s->next_seq++;
    g->max_reconsume = max_reconsume;
    g->created_ms = now_ms;
    if (from_first) {
        g->cursor = t->head_hint;
        g->position = t->removed;
    } else {
        g->cursor = t->log_next_min;
        g->position = t->appended;
    }
    store_topic_add_group(g);
    map_put(&s->groups, g->name, g->len, g);
    store_mark_group(s, g);
    store_mark_woken(s, t); /* from the first message, it may have some ready at once */
    s->pending++;           /* the group record is a write even with no other put */
    return g;
}

void store_topic_free(void *p)
{
    topic_state_t *t = p;
    topic_held_free(&t->held);
    free(t->name);
    free(t);
}

void store_group_free(void *p)
{
    group_state_t *g = p;
    idmap_free(&g->lease_ids);
    idmap_free(&g->pend_ids); /* its entries are the store's to free (store_free) */
    free(g->name);
    free(g);
}

int store_group_holds_none(const group_state_t *g, uint64_t id)
{
    return g->leases_untracked == 0 && g->retry_ready == 0 && g->retry_delayed == 0 && g->dlq == 0 &&
           (g->inflight == 0 || idmap_get(&g->lease_ids, id) == NULL);
}

void store_retry_append(store_t *s, group_state_t *g, msg_t *m, uint64_t now_ms)
{
    key_buf_t k;
    m->dest = MSG_DEST_GROUP;
    m->group.ptr = g->name;
    m->group.len = (uint32_t)g->len;
    m->group_gen = g->gen;
    m->stamp_ms = now_ms;
    idx_place_t p = { 'R', 0, 0, s->next_seq };
    key_queue(&k, KEY_RETRY, g->name, g->len, s->next_seq++);
    store_put_msg(s, &k, m);
    idx_copy_put(s, m->id, g->name, g->len, g->gen, &p);
    g->retry_ready++;
    store_mark_group(s, g);
    store_mark_woken(s, g->topic);
}

void store_mark_woken(store_t *s, topic_state_t *t)
{
    if (t->woken) {
        return;
    }
    t->woken = 1;
    if (s->n_woken == s->cap_woken) {
        s->cap_woken = s->cap_woken ? s->cap_woken * 2 : 16;
        s->woken = xrealloc(s->woken, s->cap_woken * sizeof *s->woken);
    }
    s->woken[s->n_woken++] = t;
}

void store_take_woken(store_t *s, void (*fn)(void *ctx, const char *topic, size_t topic_len), void *ctx)
{
    size_t n = s->n_woken;
    if (n > s->cap_taking) {
        s->cap_taking = s->cap_woken;
        s->taking = xrealloc(s->taking, s->cap_taking * sizeof *s->taking);
    }
    for (size_t i = 0; i < n; i++) {
        s->taking[i] = s->woken[i];
        s->woken[i]->woken = 0;
    }
    s->n_woken = 0;
    for (size_t i = 0; i < n; i++) {
        fn(ctx, s->taking[i]->name, s->taking[i]->len);
    }
}

/* ---- groups ------------------------------------------------------------------------- */

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

int store_group_create(store_t *s, const char *group, size_t group_len, const char *topic, size_t topic_len,
                       int from_first, int max_reconsume, uint64_t now_ms, char *err, size_t errlen)
{
    if (store_usable(s, err, errlen) != 0) {
        return -1;
    }
    if (msg_check_name("group", group, group_len, err, errlen) != 0 ||
        msg_check_name("topic", topic, topic_len, err, errlen) != 0 ||
        store_topic_room(s, topic, topic_len, err, errlen) != 0) {
        return -1;
    }
    group_state_t *g = store_group_get(s, group, group_len);
    if (g != NULL) {
        return err_set(err, errlen, "group %.*s already exists (bound to topic %.*s)", (int)group_len, group,
                       (int)g->topic->len, g->topic->name);
    }
    if (store_group_room(s, group, group_len, err, errlen) != 0) {
        return -1;
    }
    if (max_reconsume > STORE_MAX_MAX_RECONSUME) {
        return err_set(err, errlen, "max-reconsume %d exceeds the limit of %d", max_reconsume, STORE_MAX_MAX_RECONSUME);
    }
    uint32_t mr = max_reconsume < 0 ? s->opt.max_reconsume : (uint32_t)max_reconsume;
    return store_group_new(s, group, group_len, store_topic_get_or_create(s, topic, topic_len), from_first, mr, now_ms,
                           err, errlen) != NULL
               ? 0
               : -1;
}

int store_group_info(const store_t *s, const char *group, size_t group_len, store_group_info_t *out)
{
    const group_state_t *g = store_group_get(s, group, group_len);
    if (g == NULL) {
        return 0;
    }
    group_fill_info(g, out);
    return 1;
}

int store_group_exists(const store_t *s, const char *group, size_t group_len)
{
    return store_group_get(s, group, group_len) != NULL;
}

void store_group_foreach(const store_t *s, int (*fn)(void *ctx, const char *group, const store_group_info_t *info),
                         void *ctx)
{
    map_iter_t it = { 0 };
    void *v;
    while (map_next(&s->groups, &it, NULL, NULL, &v)) {
        const group_state_t *g = v;
        store_group_info_t info;
        group_fill_info(g, &info);
        if (fn(ctx, g->name, &info) != 0) {
            return;
        }
    }
}

static int cmp_group_rows(const void *a, const void *b)
{
    return strcmp(((const store_group_row_t *)a)->name, ((const store_group_row_t *)b)->name);
}

/* ---- a page of names ------------------------------------------------------------------ */

/* The first `count` names after `after` in byte order, picked from a map's
 * walk without sorting every name: a max-heap of the count smallest seen so
 * far (the largest at [0]), O(names · log count), then a sort of the count
 * picked. count 0 keeps every name after `after` (a sort of those). */
typedef struct name_pick {
    const char *name;
    const void *state;
} name_pick_t;

typedef struct name_picker {
    const char *after; /* NULL: from the first */
    size_t count;      /* 0: no bound */
    name_pick_t *heap;
    size_t n, cap;
} name_picker_t;

static void pick_swap(name_pick_t *a, name_pick_t *b)
{
    name_pick_t t = *a;
    *a = *b;
    *b = t;
}

static void picker_offer(name_picker_t *p, const char *name, const void *state)
{
    if (p->after != NULL && strcmp(name, p->after) <= 0) {
        return;
    }
    if (p->count > 0 && p->n == p->count) {
        if (strcmp(name, p->heap[0].name) >= 0) {
            return;
        }
        p->heap[0] = (name_pick_t){ name, state }; /* replaces the largest, then sifts down */
        for (size_t i = 0;;) {
            size_t l = 2 * i + 1, r = l + 1, big = i;
            if (l < p->n && strcmp(p->heap[l].name, p->heap[big].name) > 0) {
                big = l;
            }
            if (r < p->n && strcmp(p->heap[r].name, p->heap[big].name) > 0) {
                big = r;
            }
            if (big == i) {
                break;
            }
            pick_swap(&p->heap[i], &p->heap[big]);
            i = big;
        }
        return;
    }
    if (p->n == p->cap) {
        p->cap = p->cap ? p->cap * 2 : 16;
        p->heap = xrealloc(p->heap, p->cap * sizeof *p->heap);
    }
    size_t i = p->n++;
    p->heap[i] = (name_pick_t){ name, state };
    while (p->count > 0 && i > 0 && strcmp(p->heap[(i - 1) / 2].name, p->heap[i].name) < 0) {
        pick_swap(&p->heap[(i - 1) / 2], &p->heap[i]);
        i = (i - 1) / 2;
    }
}

static int cmp_picks(const void *a, const void *b)
{
    return strcmp(((const name_pick_t *)a)->name, ((const name_pick_t *)b)->name);
}

/* The picks in name order (free *picks). */
static void picker_pick(const map_t *m, const char *after, size_t count, name_pick_t **picks, size_t *n)
{
    name_picker_t p = { .after = after != NULL && after[0] != '\0' ? after : NULL, .count = count };
    map_iter_t it = { 0 };
    void *v;
    const char *key;
    size_t klen;
    while (map_next(m, &it, &key, &klen, &v)) {
        picker_offer(&p, key, v);
    }
    if (p.n > 1) {
        qsort(p.heap, p.n, sizeof *p.heap, cmp_picks);
    }
    *picks = p.heap;
    *n = p.n;
}

void store_group_page(const store_t *s, const char *after, size_t count, store_group_row_t **rows, size_t *n)
{
    name_pick_t *picks;
    picker_pick(&s->groups, after, count, &picks, n);
    *rows = *n ? xmalloc(*n * sizeof **rows) : NULL;
    for (size_t i = 0; i < *n; i++) {
        const group_state_t *g = picks[i].state;
        memcpy((*rows)[i].name, g->name, g->len + 1);
        group_fill_info(g, &(*rows)[i].info);
    }
    free(picks);
}

/* ---- topics ---------------------------------------------------------------------------- */

/* A topic's counts; ready is its groups' largest backlog (every retained
 * message when it has no group). */
static void topic_fill_info(const topic_state_t *t, store_topic_info_t *out)
{
    out->appended = t->appended;
    out->retained = t->appended - t->removed;
    out->delayed = t->delayed;
    out->sent = t->sent;
    out->groups = t->groups;
    out->ready = t->groups == 0 ? out->retained : 0;
    for (const group_state_t *g = t->first_group; g != NULL; g = g->next_in_topic) {
        if (t->appended - g->position > out->ready) {
            out->ready = t->appended - g->position;
        }
    }
}

int store_topic_info(const store_t *s, const char *topic, size_t topic_len, store_topic_info_t *out)
{
    const topic_state_t *t = map_get(&s->topics, topic, topic_len);
    if (t == NULL) {
        return 0;
    }
    topic_fill_info(t, out);
    return 1;
}

size_t store_topic_count(const store_t *s)
{
    return map_count(&s->topics);
}

void store_topic_page(const store_t *s, const char *after, size_t count, store_topic_row_t **rows, size_t *n)
{
    name_pick_t *picks;
    picker_pick(&s->topics, after, count, &picks, n);
    *rows = *n ? xmalloc(*n * sizeof **rows) : NULL;
    for (size_t i = 0; i < *n; i++) {
        const topic_state_t *t = picks[i].state;
        memcpy((*rows)[i].name, t->name, t->len + 1);
        topic_fill_info(t, &(*rows)[i].info);
    }
    free(picks);
}

void store_topic_group_rows(const store_t *s, const char *topic, size_t topic_len, store_group_row_t **rows, size_t *n)
{
    const topic_state_t *t = map_get(&s->topics, topic, topic_len);
    *n = t != NULL ? (size_t)t->groups : 0;
    *rows = *n ? xmalloc(*n * sizeof **rows) : NULL;
    size_t i = 0;
    for (const group_state_t *g = t != NULL ? t->first_group : NULL; g != NULL && i < *n; g = g->next_in_topic) {
        memcpy((*rows)[i].name, g->name, g->len + 1);
        group_fill_info(g, &(*rows)[i].info);
        i++;
    }
    *n = i;
    if (i > 1) {
        qsort(*rows, i, sizeof **rows, cmp_group_rows);
    }
}

/* ---- deleting an empty topic ------------------------------------------------------- */

/* A group of t being deleted (it still points at t), or NULL. */
static group_state_t *deleting_group_of(const store_t *s, const topic_state_t *t)
{
    map_iter_t it = { 0 };
    void *v;
    while (map_next(&s->deleting, &it, NULL, NULL, &v)) {
        group_state_t *g = v;
        if (g->topic == t) {
            return g;
        }
    }
    return NULL;
}

int store_topic_delete(store_t *s, const char *topic, size_t topic_len, store_topic_del_t *out,
                       store_topic_info_t *info, char *err, size_t errlen)
{
    *out = STORE_TOPIC_UNKNOWN;
    if (store_read_begin(s, err, errlen) != 0) {
        return -1;
    }
    topic_state_t *t = map_get(&s->topics, topic, topic_len);
    if (t == NULL) {
        return 0;
    }
    if (t->groups > 0 || t->appended != t->removed || t->delayed > 0) {
        if (info != NULL) {
            topic_fill_info(t, info);
        }
        *out = STORE_TOPIC_IN_USE;
        return 0;
    }
    for (group_state_t *g; (g = deleting_group_of(s, t)) != NULL;) {
        if (group_delete_finish(s, g->name, g->len, err, errlen) != 0) {
            return -1;
        }
    }
    if (t->dirty && store_commit(s, err, errlen) != 0) { /* no list of dirty records may hold t once it is freed */
        return -1;
    }
    key_buf_t k;
    key_record(&k, KEY_TOPIC_RECORD, t->name, t->len);
    store_del(s, &k);
    if (t->woken) {
        for (size_t i = 0; i < s->n_woken; i++) {
            if (s->woken[i] == t) {
                s->woken[i] = s->woken[--s->n_woken];
                break;
            }
        }
    }
    if (t->queue != 0) { /* its CQ is dead: the redo skips its writes (topic_cq_bounds), its files go */
        topic_cq_retire(s, t);
    }
    map_del(&s->topics, topic, topic_len);
    if (s->topic_last == t) {
        s->topic_last = NULL;
    }
    store_topic_free(t);
    *out = STORE_TOPIC_DELETED;
    return 0;
}
