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
    size_t count = map_count(&s->topics) + (planned != NULL ? map_count(planned) : 0);
    if (s->opt.max_topics == 0 || map_get(&s->topics, topic, topic_len) != NULL ||
        (planned != NULL && map_get(planned, topic, topic_len) != NULL) || count < s->opt.max_topics) {
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

topic_state_t *store_topic_get_or_create(store_t *s, const char *name, size_t len)
{
    topic_state_t *t = map_get(&s->topics, name, len);
    if (t != NULL) {
        return t;
    }
    t = xcalloc(1, sizeof *t);
    t->name = xstrndup(name, len);
    t->len = len;
    t->log_next_min = s->next_seq; /* above every seq the directory holds */
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
    free(t->name);
    free(t);
}

void store_group_free(void *p)
{
    group_state_t *g = p;
    map_free(&g->lease_ids, NULL);
    map_free(&g->pend_ids, NULL); /* its entries are the store's to free (store_free) */
    free(g->name);
    free(g);
}

int store_group_holds_none(const group_state_t *g, uint64_t id)
{
    return g->leases_untracked == 0 && g->retry_ready == 0 && g->retry_delayed == 0 && g->dlq == 0 &&
           (g->inflight == 0 || map_get(&g->lease_ids, &id, sizeof id) == NULL);
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

static int cmp_group_rows_by_topic(const void *a, const void *b)
{
    const store_group_row_t *x = a, *y = b;
    int c = strcmp(x->info.topic, y->info.topic);
    return c ? c : strcmp(x->name, y->name);
}

void store_group_rows(const store_t *s, int by_topic, store_group_row_t **rows, size_t *n)
{
    *n = map_count(&s->groups);
    *rows = *n ? xmalloc(*n * sizeof **rows) : NULL;
    map_iter_t it = { 0 };
    void *v;
    size_t i = 0;
    while (map_next(&s->groups, &it, NULL, NULL, &v)) {
        const group_state_t *g = v;
        memcpy((*rows)[i].name, g->name, g->len + 1);
        group_fill_info(g, &(*rows)[i].info);
        i++;
    }
    if (*n > 1) {
        qsort(*rows, *n, sizeof **rows, by_topic ? cmp_group_rows_by_topic : cmp_group_rows);
    }
}

/* ---- topics ---------------------------------------------------------------------------- */

/* A topic's own counts; ready as when it has no group (every retained
 * message), else 0, for the caller to raise to its groups' largest backlog. */
static void topic_fill_counts(const topic_state_t *t, store_topic_info_t *out)
{
    out->appended = t->appended;
    out->retained = t->appended - t->removed;
    out->delayed = t->delayed;
    out->sent = t->sent;
    out->groups = t->groups;
    out->ready = t->groups == 0 ? out->retained : 0;
}

static void topic_fill_info(const store_t *s, const topic_state_t *t, store_topic_info_t *out)
{
    topic_fill_counts(t, out);
    if (t->groups == 0) {
        return;
    }
    map_iter_t it = { 0 };
    void *v;
    while (map_next(&s->groups, &it, NULL, NULL, &v)) {
        const group_state_t *g = v;
        if (g->topic == t && t->appended - g->position > out->ready) {
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
    topic_fill_info(s, t, out);
    return 1;
}

static int cmp_topic_rows(const void *a, const void *b)
{
    return strcmp(((const store_topic_row_t *)a)->name, ((const store_topic_row_t *)b)->name);
}

/* The topic rows' ready counts come from one pass over the groups, each
 * finding its topic's row by name in the sorted rows: O((topics + groups) log
 * topics). Filling each row with topic_fill_info scanned every group per
 * topic: with 10 000 topics of one group each (within the default max-topics
 * and max-groups) a TOPICS COUNT 10 held the storage thread 1.7-5 s, and
 * every scrape of /metrics 3.9 s. */
void store_topic_rows(const store_t *s, store_topic_row_t **rows, size_t *n)
{
    *n = map_count(&s->topics);
    *rows = *n ? xmalloc(*n * sizeof **rows) : NULL;
    map_iter_t it = { 0 };
    void *v;
    size_t i = 0;
    while (map_next(&s->topics, &it, NULL, NULL, &v)) {
        const topic_state_t *t = v;
        memcpy((*rows)[i].name, t->name, t->len + 1);
        topic_fill_counts(t, &(*rows)[i].info);
        i++;
    }
    if (*n > 1) {
        qsort(*rows, *n, sizeof **rows, cmp_topic_rows);
    }
    memset(&it, 0, sizeof it);
    while (*n > 0 && map_next(&s->groups, &it, NULL, NULL, &v)) {
        const group_state_t *g = v;
        const topic_state_t *t = g->topic;
        store_topic_row_t key;
        memcpy(key.name, t->name, t->len + 1);
        store_topic_row_t *row = bsearch(&key, *rows, *n, sizeof **rows, cmp_topic_rows);
        if (row != NULL && t->appended - g->position > row->info.ready) {
            row->info.ready = t->appended - g->position;
        }
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
            topic_fill_info(s, t, info);
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
    map_del(&s->topics, topic, topic_len);
    store_topic_free(t);
    *out = STORE_TOPIC_DELETED;
    return 0;
}
