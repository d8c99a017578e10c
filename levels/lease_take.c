/*
 * levels/lease_take.c — leasing (store_lease, see store.h): a group takes
 * its retry-ready entries first, then its topic log's from its cursor, up to
 * a count and a byte budget.
 *
 * A retry taken is consumed (its 'R' key deleted); a topic-log entry stays
 * (the log is shared) and only the group's cursor and position move. A
 * lease of a topic-log entry is held in memory (lease_pend.c) when the write
 * delay is on and it would not expire before it; store_pend_keep_order keeps
 * the held leases the entries from the persisted cursor to the cursor. A
 * PULL naming a group that does not exist creates it (within the limits).
 *
 * Damage at a queue's head: a PULL that fails at the head of the retry-ready
 * queue or of the topic log at the cursor, before it took anything there,
 * marks that queue of the group damaged and serves the other one; the
 * group's PULLs skip it for opt.damage_retry_ms, then try it again.
 * Nothing of the damaged queue is written, so its entries (the damaged one
 * first) wait in place: none is dropped, none taken twice, and the retries
 * behind a damaged retry-queue head (or the log behind a damaged entry)
 * keep their order. Only a head can be skipped this way: an entry behind a
 * whole head is reached by the PULL after it took that head (it ends there,
 * handing out what it took), and the next PULL finds it at the head. When
 * a skip ends, store_group_damage_wake marks the group's topic woken, so a
 * PULL … BLOCK parked meanwhile tries the queue again then rather than at
 * its BLOCK timeout; a queue that passes again is counted and named for the
 * owner's "served again" report.
 *
 * Threading: one thread at a time (the broker's storage thread).
 */
#include "levels/store_internal.h"
#include "base/err.h"
#include "base/units.h"

#include <stdio.h>
#include <string.h>

uint64_t store_group_damage_events(const store_t *s)
{
    return s->group_damage_events;
}

const char *store_group_damage_last(const store_t *s)
{
    return s->group_damage_last;
}

uint64_t store_group_queues_damaged(const store_t *s)
{
    return s->group_queues_damaged;
}

uint64_t store_group_recoveries(const store_t *s)
{
    return s->group_recoveries;
}

const char *store_group_recovery_last(const store_t *s)
{
    return s->group_recovery_last;
}

uint64_t store_group_damage_next_end(const store_t *s)
{
    return s->group_damage_wake_at != 0 ? s->group_damage_wake_at : UINT64_MAX;
}

/* Queue d of g: its skip's end passed on when it came by now_ms, else
 * *next lowered to it (a queue with no end pending leaves *next as it is). */
static void queue_wake_if_ended(store_t *s, group_state_t *g, struct queue_damage *d, uint64_t now_ms, uint64_t *next)
{
    if (!d->damaged || !d->wake_pending) {
        return;
    }
    if (d->damaged_until <= now_ms) {
        d->wake_pending = 0;
        store_mark_woken(s, g->topic);
    } else if (d->damaged_until < *next) {
        *next = d->damaged_until;
    }
}

void store_group_damage_wake(store_t *s, uint64_t now_ms)
{
    if (s->group_damage_wake_at == 0 || now_ms < s->group_damage_wake_at) {
        return; /* no skip ended: no walk of the groups */
    }
    uint64_t next = UINT64_MAX;
    map_iter_t it = { 0 };
    void *val;
    while (map_next(&s->groups, &it, NULL, NULL, &val)) {
        group_state_t *g = val;
        queue_wake_if_ended(s, g, &g->retry_damage, now_ms, &next);
        queue_wake_if_ended(s, g, &g->log_damage, now_ms, &next);
    }
    s->group_damage_wake_at = next != UINT64_MAX ? next : 0;
}

void store_topic_log_damage_retry(store_t *s, topic_state_t *t)
{
    for (group_state_t *g = t->first_group; g != NULL; g = g->next_in_topic) {
        if (g->log_damage.damaged) {
            g->log_damage.damaged_until = 0; /* no longer skipped: still damaged until a PULL passes */
            g->log_damage.wake_pending = 0;
            store_mark_woken(s, t);
        }
    }
}

void store_group_damage_forget(store_t *s, group_state_t *g)
{
    s->group_queues_damaged -= (uint64_t)(g->retry_damage.damaged + g->log_damage.damaged);
    g->retry_damage.damaged = g->log_damage.damaged = 0;
}

/* 1 while queue d of a group is skipped for damage. */
static int queue_skipped(const struct queue_damage *d, uint64_t now_ms)
{
    return d->damaged && now_ms < d->damaged_until;
}

/* A PULL of g failed at the head of queue d (its retry queue: tag
 * KEY_RETRY, else its topic log) reading the entry of seq failed_seq
 * (UINT64_MAX: a key that does not parse, or the iterator's own error), err
 * saying why: skipped until opt.damage_retry_ms from now; a new finding is
 * counted and kept for the owner's report (a retry that fails again is
 * neither: it only renews the skip). */
static void queue_mark_damaged(store_t *s, group_state_t *g, struct queue_damage *d, enum key_tag tag, uint64_t now_ms,
                               uint64_t failed_seq, const char *err)
{
    d->damaged_until = now_ms + s->opt.damage_retry_ms;
    d->wake_pending = 1;
    if (s->group_damage_wake_at == 0 || d->damaged_until < s->group_damage_wake_at) {
        s->group_damage_wake_at = d->damaged_until;
    }
    if (d->damaged) {
        return; /* a retry that failed again: no new finding */
    }
    d->damaged = 1;
    s->group_queues_damaged++;
    s->group_damage_events++;
    char every[32], where[64];
    units_format_duration(s->opt.damage_retry_ms, every, sizeof every);
    if (failed_seq != UINT64_MAX) {
        snprintf(where, sizeof where, "seq %llu", (unsigned long long)failed_seq);
    } else if (tag == KEY_RETRY) {
        snprintf(where, sizeof where, "its head");
    } else {
        snprintf(where, sizeof where, "its head (its cursor: seq %llu)", (unsigned long long)g->cursor);
    }
    if (tag == KEY_RETRY) {
        snprintf(s->group_damage_last, sizeof s->group_damage_last,
                 "group %s: its retry queue fails at %s, so its %llu ready retries wait (tried again every %s; "
                 "its topic log is served): %s",
                 g->name, where, (unsigned long long)g->retry_ready, every, err);
        return;
    }
    snprintf(s->group_damage_last, sizeof s->group_damage_last,
             "group %s: its topic log %s fails at %s, so its %llu messages from there wait (tried again every %s; "
             "its retries are served): %s",
             g->name, g->topic->name, where, (unsigned long long)(g->topic->appended - g->position), every, err);
}

/* Queue d of g (its retry queue: tag KEY_RETRY, else its topic log) gave a
 * PULL what it held up to the count (or the damage behind a head it took):
 * no longer damaged; when it was, the recovery is counted and named. */
static void queue_passed(store_t *s, group_state_t *g, struct queue_damage *d, enum key_tag tag)
{
    if (!d->damaged) {
        return;
    }
    d->damaged = 0;
    d->wake_pending = 0;
    s->group_queues_damaged--;
    s->group_recoveries++;
    if (tag == KEY_RETRY) {
        snprintf(s->group_recovery_last, sizeof s->group_recovery_last, "group %s: its retry queue is served again",
                 g->name);
    } else {
        snprintf(s->group_recovery_last, sizeof s->group_recovery_last, "group %s: its topic log %s is served again",
                 g->name, g->topic->name);
    }
}

/* Read the queue range of tag ('R': g's retries, 'T': its topic's log) from
 * seq `from`, leasing up to want messages within *budget (msg.h). Returns
 * the count leased (owned copies in out[]); *last_seq gets the last seq
 * taken; delete_taken deletes each entry (a retry is consumed; the topic log
 * is shared and only the cursor moves). write_at (not 0): a lease of a
 * topic-log entry is held in memory until then, when there is room and it
 * would not expire before.
 * An entry is taken whole or not at all (its lease written or held, counted
 * and tracked), so a read error or damage met after some were taken ends
 * the walk there and returns those: they are leases the caller must hand
 * out, or they would stay taken, undelivered until they expire. *failed
 * gets 1 then (err says why); a failure before the first entry is -1.
 * *failed_seq gets the seq of the entry whose read failed, UINT64_MAX when
 * none did or it is not known (a key that does not parse, the iterator's
 * own error). */
static int lease_from_range(store_t *s, group_state_t *g, enum key_tag tag, uint64_t from, int want, uint64_t deadline,
                            uint64_t write_at, msg_budget_t *budget, msg_owned_t *out, uint64_t *last_seq,
                            int delete_taken, int *failed, uint64_t *failed_seq, char *err, size_t errlen)
{
    *failed_seq = UINT64_MAX;
    queue_walk_t w;
    if (tag == KEY_TOPIC_LOG) {
        queue_walk_topic(&w, s, g->topic, from); /* the last due move's arrivals read where they are held */
    } else {
        queue_walk_range(&w, s, KEY_RETRY, g->name, g->len, from);
    }
    const char *where = tag == KEY_RETRY ? "a retry queue" : "a topic log";
    const char *key;
    size_t klen;
    uint64_t seq;
    msg_t *m; /* the walk's, valid until its next step: copied into out[] once, below */
    int n = 0, rc = 0, got;
    while (n < want && msg_budget_open(budget) &&
           (got = queue_walk_next(&w, &key, &klen, &seq, where, err, errlen)) != 0) {
        if (got < 0 || (m = queue_walk_msg(&w, err, errlen)) == NULL) {
            *failed_seq = w.failed_seq; /* the entry's whose read or decode failed (a key that does not parse: none) */
            rc = -1;
            break;
        }
        if (delete_taken) {
            store_del_raw(s, key, klen);
        }
        int hold = tag == KEY_TOPIC_LOG && write_at != 0 && deadline >= write_at;
        if (tag == KEY_TOPIC_LOG && store_pend_keep_order(s, g, hold, err, errlen) != 0) {
            rc = -1;
            break;
        }
        if (hold) {
            store_lease_stamp(g, m);
            store_pend_add(s, g, m->id, seq, deadline, write_at);
        } else {
            store_lease_put(s, g, m, deadline, tag == KEY_TOPIC_LOG ? seq : 0);
        }
        *last_seq = seq;
        msg_owned_copy(&out[n], m);
        n++;
        msg_budget_charge(budget, m);
        /* the loop stops here when it has enough, before the walk steps past it: it could walk the next range's
           deleted keys */
    }
    queue_walk_end(&w);
    *failed = rc != 0;
    return rc != 0 && n == 0 ? -1 : n;
}

int store_lease(store_t *s, const char *group, size_t group_len, const char *topic, size_t topic_len, int count,
                uint64_t lease_ms, uint64_t now_ms, msg_owned_t *out, int *n, char *err, size_t errlen)
{
    return store_lease_within(s, group, group_len, topic, topic_len, count, s->opt.max_lease_bytes, lease_ms, now_ms,
                              out, n, err, errlen);
}

int store_lease_within(store_t *s, const char *group, size_t group_len, const char *topic, size_t topic_len, int count,
                       uint64_t max_bytes, uint64_t lease_ms, uint64_t now_ms, msg_owned_t *out, int *n, char *err,
                       size_t errlen)
{
    *n = 0;
    if (msg_check_name("group", group, group_len, err, errlen) != 0 ||
        msg_check_name("topic", topic, topic_len, err, errlen) != 0) {
        return -1;
    }
    if (count < 1) {
        return err_set(err, errlen, "count must be at least 1");
    }
    if (store_read_begin(s, err, errlen) != 0) {
        return -1;
    }
    group_state_t *g = store_group_get(s, group, group_len);
    if (g == NULL) {
        if (store_topic_room(s, topic, topic_len, err, errlen) != 0 ||
            store_group_room(s, group, group_len, err, errlen) != 0) {
            return -1;
        }
        g = store_group_new(s, group, group_len, store_topic_get_or_create(s, topic, topic_len), 1,
                            s->opt.max_reconsume, now_ms, err, errlen);
        if (g == NULL) {
            return -1;
        }
    } else if (g->topic->len != topic_len || memcmp(g->topic->name, topic, topic_len) != 0) {
        return err_set(err, errlen, "group %.*s is bound to topic %.*s, not %.*s", (int)group_len, group,
                       (int)g->topic->len, g->topic->name, (int)topic_len, topic);
    }
    uint64_t deadline = now_ms + lease_ms;
    uint64_t write_at = s->opt.lease_write_delay_ms > 0 ? now_ms + s->opt.lease_write_delay_ms : 0;
    uint64_t last = 0;
    msg_budget_t budget;
    msg_budget_init(&budget, max_bytes);
    int failed = 0; /* after it took some: those are returned, the rest left to the next call */
    uint64_t failed_seq;
    if (g->retry_ready > 0 && !queue_skipped(&g->retry_damage, now_ms)) {
        int want = count < (int64_t)g->retry_ready ? count : (int)g->retry_ready;
        int got = lease_from_range(s, g, KEY_RETRY, g->retry_head_hint, want, deadline, 0, &budget, out, &last, 1,
                                   &failed, &failed_seq, err, errlen);
        if (got < 0) {
            if (store_broken(s)) {
                return -1;
            }
            queue_mark_damaged(s, g, &g->retry_damage, KEY_RETRY, now_ms, failed_seq, err);
            failed = 0; /* nothing taken: the topic log is served */
            got = 0;
        } else {
            queue_passed(s, g, &g->retry_damage, KEY_RETRY);
        }
        if (got > 0) {
            g->retry_ready -= (uint64_t)got;
            g->retry_head_hint = last + 1;
            g->pops_since_compact += (uint64_t)got;
        }
        *n = got;
    }
    uint64_t backlog = g->topic->appended - g->position;
    if (!failed && *n < count && backlog > 0 && msg_budget_open(&budget) && !queue_skipped(&g->log_damage, now_ms)) {
        int want = count - *n;
        if ((uint64_t)want > backlog) {
            want = (int)backlog;
        }
        int got = lease_from_range(s, g, KEY_TOPIC_LOG, g->cursor, want, deadline, write_at, &budget, out + *n, &last,
                                   0, &failed, &failed_seq, err, errlen);
        if (got < 0) {
            if (store_broken(s)) {
                /* the retries taken are leases: handed out, not dropped */
                return *n > 0 ? 0 : -1;
            }
            queue_mark_damaged(s, g, &g->log_damage, KEY_TOPIC_LOG, now_ms, failed_seq, err);
            return 0; /* the retries taken, if any */
        }
        queue_passed(s, g, &g->log_damage, KEY_TOPIC_LOG);
        if (got > 0) {
            g->cursor = last + 1;
            g->position += (uint64_t)got;
        }
        *n += got;
    }
    /* No mark of g here: a written lease marked it (store_lease_put), and leases
     * held in memory change nothing the group record persists. */
    return 0;
}
