/*
 * levels/db.c — every LevelDB access of the store package: the pending write
 * batch and its commit, point reads and iterators (store_internal.h; the
 * public commit calls: store.h).
 *
 * Writes are grouped: operations add puts and deletes to one pending batch
 * and mark the records they change dirty; a commit writes the dirty records
 * and the sequence counter into the batch and hands it to LevelDB as one
 * WriteBatch, so a crash leaves every move whole or absent. A failed write
 * marks the store broken (as store_break does for an owner that must drop its
 * batch): the in-memory state already reflects the lost batch,
 * so nothing but a reopen (which rebuilds it from disk) is safe.
 *
 * The batch is reused across commits; one that held more than
 * STORE_BATCH_KEEP_BYTES is destroyed and created again, so a burst does not
 * pin its memory. Its owners keep it near STORE_BATCH_MAX_BYTES (store.h).
 *
 * Reads see committed data only: every reading operation calls
 * store_read_begin first, which commits what is pending (unsynced).
 *
 * Once the commit log is open (store_log.c), a commit is a log batch whose
 * LevelDB writes are held until the log is synced (design-commitlog.md §3
 * rule 2): a point read (store_get, store_has) asks the held writes first
 * (the redo's overlay), an iterator first passes the barrier (the log synced
 * and every held batch written to LevelDB) — but a walk of a topic's log,
 * which merges the held appends itself (topic_walk.c: store_iter_applied_at).
 * The LevelDB batch is used only
 * before the redo opens (a new directory's meta records).
 *
 * Threading: one thread at a time (the broker's storage thread).
 */
#include "levels/store_internal.h"
#include "base/alloc.h"
#include "base/err.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* What one batch entry costs besides its bytes: a tag and two varint lengths. */
#define BATCH_ENTRY_OVERHEAD 11

/* ---- the pending batch ------------------------------------------------------------ */

void store_put(store_t *s, const key_buf_t *k, const char *v, size_t vlen)
{
    if (s->redo != NULL) {
        redo_db_put(&s->log_batch, k->b, k->n, v, vlen);
    } else {
        leveldb_writebatch_put(s->batch, k->b, k->n, v, vlen);
    }
    s->pending++;
    s->batch_bytes += k->n + vlen + BATCH_ENTRY_OVERHEAD;
}

void store_del_raw(store_t *s, const char *key, size_t klen)
{
    if (s->redo != NULL) {
        if (klen > 0 && key[0] == KEY_TOPIC_LOG) {
            topic_held_note_delete(s); /* the topic logs' walks ask the overlay while it is held */
        }
        redo_db_delete(&s->log_batch, key, klen);
    } else {
        leveldb_writebatch_delete(s->batch, key, klen);
    }
    s->pending++;
    s->batch_bytes += klen + BATCH_ENTRY_OVERHEAD;
}

void store_del(store_t *s, const key_buf_t *k)
{
    store_del_raw(s, k->b, k->n);
}

void store_put_msg(store_t *s, const key_buf_t *k, const msg_t *m)
{
    char small[512];
    size_t n = msg_encoded_size(m);
    char *buf = n <= sizeof small ? small : xmalloc(n);
    msg_encode(m, buf, n);
    store_put(s, k, buf, n);
    if (buf != small) {
        free(buf);
    }
}

void store_mark_level(store_t *s, int level)
{
    s->levels[level].dirty = 1;
}

void store_mark_topic(store_t *s, topic_state_t *t)
{
    if (t->dirty) {
        return;
    }
    t->dirty = 1;
    if (s->n_dirty_topics == s->cap_dirty_topics) {
        s->cap_dirty_topics = s->cap_dirty_topics ? s->cap_dirty_topics * 2 : 16;
        s->dirty_topics = xrealloc(s->dirty_topics, s->cap_dirty_topics * sizeof *s->dirty_topics);
    }
    s->dirty_topics[s->n_dirty_topics++] = t;
}

void store_mark_group(store_t *s, group_state_t *g)
{
    if (g->dirty) {
        return;
    }
    g->dirty = 1;
    s->pending++; /* its record is a write: a commit must follow, even with no other (and no group left dirty) */
    if (s->n_dirty_groups == s->cap_dirty_groups) {
        s->cap_dirty_groups = s->cap_dirty_groups ? s->cap_dirty_groups * 2 : 16;
        s->dirty_groups = xrealloc(s->dirty_groups, s->cap_dirty_groups * sizeof *s->dirty_groups);
    }
    s->dirty_groups[s->n_dirty_groups++] = g;
}

/* The sequence counter's record, into the batch. */
static void put_seq(store_t *s)
{
    key_buf_t k;
    char v[8];
    key_meta(&k, "seq");
    be64_put(v, s->next_seq);
    store_put(s, &k, v, 8);
}

/* Writes every dirty record (and the counter when it moved) into the batch. */
static void flush_records(store_t *s)
{
    key_buf_t k;
    char v[RECORD_GROUP_MAX];
    for (int l = 1; l <= s->opt.levels.count; l++) {
        level_state_t *ls = &s->levels[l];
        if (!ls->dirty) {
            continue;
        }
        record_level_t r = { ls->depth,
                             ls->has_head ? ls->head_due : 0,
                             ls->has_head ? ls->head_seq : 0,
                             ls->last_enqueue_ms,
                             ls->cq_head,
                             ls->cq_tail,
                             ls->on_l ? 0 : ls->retries,
                             ls->on_l ? RECORD_LEVEL_ON_L : 0 };
        key_level_record(&k, l);
        record_level_encode(&r, v);
        store_put(s, &k, v, RECORD_LEVEL_BYTES);
        ls->dirty = 0;
    }
    for (size_t i = 0; i < s->n_dirty_topics; i++) {
        topic_state_t *t = s->dirty_topics[i];
        key_record(&k, KEY_TOPIC_RECORD, t->name, t->len);
        record_topic_t r = { t->appended, t->removed, t->delayed, t->queue, t->cq_seq_base, t->cq_head, t->cq_tail };
        record_topic_encode(&r, v);
        store_put(s, &k, v, RECORD_TOPIC_BYTES);
        t->dirty = 0;
    }
    s->n_dirty_topics = 0;
    for (size_t i = 0; i < s->n_dirty_groups; i++) {
        group_state_t *g = s->dirty_groups[i];
        record_group_t r = { .max_reconsume = g->max_reconsume,
                             .gen = g->gen,
                             .cursor = store_group_persisted_cursor(g),
                             .position = g->position - g->npend, /* those from that cursor on */
                             .retry_ready = g->retry_ready,
                             .retry_delayed = g->retry_delayed,
                             .inflight = g->inflight - g->npend,
                             .dlq = g->dlq,
                             .created_ms = g->created_ms,
                             .flags = g->deleting ? RECORD_GROUP_DELETING : 0,
                             .topic = g->topic->name,
                             .topic_len = g->topic->len };
        key_record(&k, KEY_GROUP_RECORD, g->name, g->len);
        store_put(s, &k, v, record_group_encode(&r, v));
        g->dirty = 0;
    }
    s->n_dirty_groups = 0;
    if (s->lane != NULL) {
        store_lane_flush(s);
    }
    segcount_flush(s);
    if (s->next_seq != s->persisted_seq) {
        put_seq(s);
    }
}

/* Before the redo opens (a new directory's meta records): the batch straight into LevelDB. */
static int write_leveldb_batch(store_t *s, int sync, int *full, char *dberr, size_t dberrlen)
{
    char *e = NULL;
    if (s->key_it != NULL) { /* it would not see this write */
        leveldb_iter_destroy(s->key_it);
        s->key_it = NULL;
    }
    leveldb_write(s->db, sync ? s->wopt_sync : s->wopt_nosync, s->batch, &e);
    if (e != NULL) {
        if (full != NULL) {
            *full = store_failure_text_full(e); /* on the whole text: no buffer cut it yet */
        }
        store_failure_text(e, s->path, dberr, dberrlen);
        leveldb_free(e);
        return -1;
    }
    if (s->batch_bytes > STORE_BATCH_KEEP_BYTES) {
        leveldb_writebatch_destroy(s->batch);
        s->batch = leveldb_writebatch_create();
    } else {
        leveldb_writebatch_clear(s->batch);
    }
    return 0;
}

/* Through the log: appended, its LevelDB writes held; synced and applied in
 * the same call when sync asks it (store_log_append), or right after when the
 * unsynced log reaches STORE_HELD_MAX_BYTES (held batches are memory). */
static int write_log_batch(store_t *s, int sync, int *full, char *dberr, size_t dberrlen)
{
    if (store_log_append(s, sync, dberr, dberrlen) != 0) {
        if (full != NULL) {
            *full = store_log_failure_full(s, dberr);
        }
        return -1;
    }
    if (s->batch_bytes > STORE_BATCH_KEEP_BYTES) { /* its buffer keeps its capacity, as LevelDB's does */
        clog_batch_free(&s->log_batch.log);
    }
    if (!sync && store_log_unsynced_bytes(s) >= STORE_HELD_MAX_BYTES &&
        store_log_make_durable(s, dberr, dberrlen) != 0) {
        if (full != NULL) {
            *full = store_log_failure_full(s, dberr);
        }
        return -1;
    }
    return 0;
}

int store_write_batch(store_t *s, int sync, int *full, char *dberr, size_t dberrlen)
{
    flush_records(s);
    int rc = s->redo != NULL ? write_log_batch(s, sync, full, dberr, dberrlen)
                             : write_leveldb_batch(s, sync, full, dberr, dberrlen);
    if (rc != 0) {
        return -1;
    }
    s->pending = 0;
    s->batch_bytes = 0;
    s->persisted_seq = s->next_seq;
    idx_batch_written(s);
    return 0;
}

/* A write LevelDB refused (dberr: its error, path shortened; full: it said
 * no room): the store is broken, and err says why. */
static int write_failed(store_t *s, int full, const char *dberr, char *err, size_t errlen)
{
    char why[sizeof s->broken_err];
    snprintf(why, sizeof why, "write to %s failed: %s", s->path_shown, dberr);
    store_break_as(s, full, why);
    return err_set(err, errlen, "%s", s->broken_err);
}

int store_commit(store_t *s, char *err, size_t errlen)
{
    return store_commit_durable(s, 1, err, errlen);
}

int store_commit_durable(store_t *s, int durable, char *err, size_t errlen)
{
    if (store_usable(s, err, errlen) != 0) {
        return -1;
    }
    int sync = durable && s->opt.sync;
    if (s->pending == 0) {
        if (!sync || !s->unsynced) {
            return 0;
        }
        if (s->redo != NULL) { /* earlier unsynced commits need the log's fsync */
            if (store_log_make_durable(s, err, errlen) != 0) {
                return -1;
            }
            s->unsynced = 0;
            return 0;
        }
        /* Nothing pending, but earlier unsynced writes need their fsync: a
         * synced write of one small record syncs the whole log. */
        put_seq(s);
    }
    char dberr[384];
    int full = 0;
    if (store_write_batch(s, sync, &full, dberr, sizeof dberr) != 0) {
        return write_failed(s, full, dberr, err, errlen);
    }
    s->unsynced = s->opt.sync && !sync;
    return 0;
}

int store_check_writable(store_t *s, char *err, size_t errlen)
{
    if (store_usable(s, err, errlen) != 0) {
        return -1;
    }
    if (s->pending > 0) {
        return store_commit_durable(s, 0, err, errlen);
    }
    /* An empty batch: LevelDB answers with its background error before it
     * writes anything but an empty log record. */
    leveldb_writebatch_t *empty = leveldb_writebatch_create();
    char *e = NULL;
    leveldb_write(s->db, s->wopt_nosync, empty, &e);
    leveldb_writebatch_destroy(empty);
    if (e != NULL) {
        char dberr[384];
        int full = store_failure_text_full(e);
        store_failure_text(e, s->path, dberr, sizeof dberr);
        leveldb_free(e);
        return write_failed(s, full, dberr, err, errlen);
    }
    return 0;
}

int store_usable(const store_t *s, char *err, size_t errlen)
{
    if (!s->broken) {
        return 0;
    }
    return err_set(err, errlen, "store is unusable (%s); reopen it", s->broken_err);
}

int store_read_begin(store_t *s, char *err, size_t errlen)
{
    if (store_usable(s, err, errlen) != 0) {
        return -1;
    }
    return s->pending ? store_commit_durable(s, 0, err, errlen) : 0;
}

int store_read_barrier(store_t *s, char *err, size_t errlen)
{
    if (store_read_begin(s, err, errlen) != 0) {
        return -1;
    }
    if (s->redo == NULL || redo_held(s->redo) == 0) {
        return 0;
    }
    s->read_barriers++;
    return store_log_make_durable(s, err, errlen);
}

uint64_t store_read_barriers(const store_t *s)
{
    return s->read_barriers;
}

/* The iterators' barrier: a failure breaks the store (store_log_make_durable
 * does), which the walk's caller finds at its next commit or read. */
static void iter_barrier(store_t *s)
{
    if (s->redo != NULL && redo_held(s->redo) > 0 && !s->broken) {
        s->read_barriers++;
        (void)store_log_make_durable(s, NULL, 0);
    }
}

int store_commit_when_full(store_t *s, char *err, size_t errlen)
{
    if (s->batch_bytes < STORE_BATCH_MAX_BYTES && s->pending < STORE_BATCH_MAX_OPS) {
        return 0;
    }
    return store_commit_durable(s, 0, err, errlen);
}

int store_pending(const store_t *s)
{
    return s->pending;
}

uint64_t store_pending_bytes(const store_t *s)
{
    return s->batch_bytes;
}
uint64_t store_next_seq(const store_t *s)
{
    return s->redo != NULL ? store_log_next_id(s) : s->next_seq;
}
int store_broken(const store_t *s)
{
    return s->broken;
}

void store_break(store_t *s, const char *why)
{
    store_break_as(s, 0, why);
}

void store_break_as(store_t *s, int full, const char *why)
{
    if (s->broken) {
        return;
    }
    s->broken = 1;
    s->broken_full = full;
    snprintf(s->broken_err, sizeof s->broken_err, "%s", why);
}

int store_last_failure_full(const store_t *s)
{
    return s->broken && s->broken_full;
}

int store_fail_half_way(store_t *s, int pending_before, const char *what, char *err, size_t errlen)
{
    if (s->pending == pending_before) {
        return -1;
    }
    if (s->broken) {
        return -1; /* broken on the way (a read key_count_get needed): that cause stands */
    }
    char why[sizeof s->broken_err];
    snprintf(why, sizeof why, "%s failed half-way (none of its writes is written): %s", what,
             err != NULL && errlen > 0 ? err : "no cause given");
    store_break(s, why);
    return err_set(err, errlen, "%s", s->broken_err);
}

/* ---- reads ------------------------------------------------------------------------- */

int store_get_applied(store_t *s, const key_buf_t *k, char **val, size_t *vlen, char *why, size_t whylen)
{
    char *e = NULL;
    *val = leveldb_get(s->db, s->ropt, k->b, k->n, vlen, &e);
    if (e != NULL) {
        snprintf(why, whylen, "%s", e);
        leveldb_free(e);
        return -1;
    }
    return *val != NULL;
}

int store_get(store_t *s, const key_buf_t *k, char **val, size_t *vlen, char *err, size_t errlen)
{
    if (s->redo != NULL && redo_held(s->redo) > 0) { /* a held batch's write is the key's current value */
        const char *held;
        int o = overlay_get(redo_overlay(s->redo), k->b, k->n, &held, vlen);
        if (o == OVERLAY_DELETED) {
            *val = NULL;
            return 0;
        }
        if (o == OVERLAY_HELD) {
            *val = xmemdup(held, *vlen); /* leveldb_free is free(3) */
            return 1;
        }
    }
    char *e = NULL;
    *val = leveldb_get(s->db, s->ropt, k->b, k->n, vlen, &e);
    if (e != NULL) {
        char dberr[384];
        store_failure_text(e, s->path, dberr, sizeof dberr);
        leveldb_free(e);
        return err_set(err, errlen, "read from %s failed: %s", s->path_shown, dberr);
    }
    return *val != NULL;
}

int store_has(store_t *s, const key_buf_t *k, char *err, size_t errlen)
{
    char *v;
    size_t vlen;
    int found = store_get(s, k, &v, &vlen, err, errlen);
    if (found > 0) {
        leveldb_free(v);
    }
    return found;
}

leveldb_iterator_t *store_iter_at(store_t *s, const key_buf_t *k)
{
    iter_barrier(s);
    leveldb_iterator_t *it = leveldb_create_iterator(s->db, s->ropt);
    leveldb_iter_seek(it, k->b, k->n);
    return it;
}

leveldb_iterator_t *store_iter_applied_at(store_t *s, const key_buf_t *k)
{
    leveldb_iterator_t *it = leveldb_create_iterator(s->db, s->ropt);
    leveldb_iter_seek(it, k->b, k->n);
    return it;
}

leveldb_iterator_t *store_iter_committed(store_t *s)
{
    iter_barrier(s);
    if (s->key_it == NULL) {
        s->key_it = leveldb_create_iterator(s->db, s->ropt);
    }
    return s->key_it;
}

leveldb_iterator_t *store_iter_range(store_t *s, enum key_tag tag)
{
    key_buf_t k;
    key_start(&k, tag);
    return store_iter_at(s, &k);
}

int store_iter_error(leveldb_iterator_t *it, const char *what, char *err, size_t errlen)
{
    char *e = NULL;
    leveldb_iter_get_error(it, &e);
    if (e == NULL) {
        return 0;
    }
    err_set(err, errlen, "reading %s: %s", what, e);
    leveldb_free(e);
    return -1;
}

int store_decode(const char *v, size_t vlen, msg_t *m, const char *where, char *err, size_t errlen)
{
    char e[160];
    if (msg_decode(v, vlen, m, e, sizeof e) != 0) {
        return err_set(err, errlen, "corrupt message in %s: %s", where, e);
    }
    return store_msg_check(m, where, err, errlen);
}

int store_msg_check(const msg_t *m, const char *where, char *err, size_t errlen)
{
    /* its topic, group and key go into keys (key_buf_t holds no longer
     * ones) and name topics and groups: the layout's limits (keys.h) */
    const msg_str_t *str = !key_name_ok(m->topic.ptr, m->topic.len)                       ? &m->topic
                           : m->group.len > 0 && !key_name_ok(m->group.ptr, m->group.len) ? &m->group
                           : m->key.len > MSG_MAX_KEY                                     ? &m->key
                                                                                          : NULL;
    if (str != NULL) {
        int is_key = str == &m->key;
        const char *bad = str == &m->topic ? "topic name" : str == &m->group ? "group name" : "key";
        return err_set(err, errlen, "corrupt message %016llx in %s: its %s is %u bytes%s (%s %d bytes%s)",
                       (unsigned long long)m->id, where, bad, str->len,
                       str->len > 0 && memchr(str->ptr, 0, str->len) != NULL ? " holding a 0x00" : "",
                       is_key ? "at most" : "1 to", is_key ? MSG_MAX_KEY : MSG_MAX_NAME,
                       is_key ? "" : " without a 0x00");
    }
    return 0;
}

int store_iter_msg(leveldb_iterator_t *it, msg_t *m, const char *where, char *err, size_t errlen)
{
    size_t vlen;
    const char *v = leveldb_iter_value(it, &vlen);
    return store_decode(v, vlen, m, where, err, errlen);
}
