/*
 * broker/cmd_group.c — topics, consumer groups and the dead-letter queue:
 * TOPICS, GROUP (CREATE LIST DEL) and DLQ (LEN LIST REQUEUE DROP).
 *
 * Each command parses into its typed request (group_cmd_req_t, dlq_cmd_req_t) on the
 * loop thread; the storage job carries the request and a copy of the names
 * it needs, and its exec half (storage thread) uses only that request. Who
 * may run which subcommand (GROUP DEL is admin-only) is the command table's
 * roles column (cmd_table.c).
 */
#include "broker/cmd_shared.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "levels/msg.h"
#include "levels/store.h"

#define DLQ_LIST_DEFAULT 100

enum {
    SUB_CREATE = 1,
    SUB_LIST,
    SUB_DEL,
    SUB_LEN,
    SUB_REQUEUE,
    SUB_DROP
};

/* GROUP CREATE group topic [FROM FIRST|NOW] [MAXRETRY n] | LIST | DEL group */
typedef struct group_cmd_req {
    int sub;                 /* SUB_CREATE, SUB_LIST or SUB_DEL */
    resp_arg_t group, topic; /* copies (empty when not given) */
    int from_first;          /* CREATE: 1 FROM FIRST (default), 0 FROM NOW */
    int max_reconsume;       /* CREATE: MAXRETRY, or -1 for the store's default */
} group_cmd_req_t;

typedef struct group_job {
    job_t job; /* first member */
    group_cmd_req_t req;
} group_job_t;

/* DLQ LEN group | LIST group [COUNT n] [AFTER id] | REQUEUE group id|ALL | DROP group id|ALL */
typedef struct dlq_cmd_req {
    int sub;           /* SUB_LEN, SUB_LIST, SUB_REQUEUE or SUB_DROP */
    resp_arg_t group;  /* a copy */
    int count;         /* LIST */
    uint64_t after_id; /* LIST AFTER, 0: from the start */
    uint64_t id;       /* REQUEUE / DROP one id ... */
    int all;           /* ... or ALL */
} dlq_cmd_req_t;

typedef struct dlq_job {
    job_t job; /* first member */
    dlq_cmd_req_t req;
} dlq_job_t;

/* ---- GROUP ------------------------------------------------------------------------------ */

typedef struct group_row {
    char name[MSG_MAX_NAME + 1];
    store_group_info_t info;
} group_row_t;

typedef struct group_rows {
    group_row_t *rows;
    size_t n, cap;
} group_rows_t;

static int collect_group(void *ctx, const char *group, const store_group_info_t *info)
{
    group_rows_t *r = ctx;
    if (r->n == r->cap) {
        r->cap = r->cap ? r->cap * 2 : 16;
        r->rows = xrealloc(r->rows, r->cap * sizeof *r->rows);
    }
    snprintf(r->rows[r->n].name, sizeof r->rows[r->n].name, "%s", group);
    r->rows[r->n].info = *info;
    r->n++;
    return 0;
}

static int cmp_rows(const void *a, const void *b)
{
    return strcmp(((const group_row_t *)a)->name, ((const group_row_t *)b)->name);
}

static void add_kv_int(resp_buf_t *b, const char *k, uint64_t v)
{
    resp_add_bulk_str(b, k);
    resp_add_int(b, (long long)v);
}

static job_result_t group_exec(job_t *j, writer_t *w)
{
    const group_cmd_req_t *r = &((group_job_t *)j)->req;
    store_t *s = writer_store(w);
    char err[300];
    if (r->sub == SUB_CREATE) {
        if (store_group_create(s, r->group.ptr, r->group.len, r->topic.ptr, r->topic.len, r->from_first,
                               r->max_reconsume, writer_now(w), err, sizeof err) != 0) {
            cmd_reply_store_error(j, err);
        } else {
            resp_add_simple(&j->reply, "OK");
        }
    } else if (r->sub == SUB_DEL) {
        int found = 0;
        if (store_group_delete(s, r->group.ptr, r->group.len, &found, err, sizeof err) != 0) {
            cmd_reply_store_error(j, err);
        } else {
            resp_add_int(&j->reply, found);
        }
    } else {
        group_rows_t rows = { 0 };
        store_group_foreach(s, collect_group, &rows);
        if (rows.n > 1) {
            qsort(rows.rows, rows.n, sizeof *rows.rows, cmp_rows);
        }
        resp_add_array(&j->reply, rows.n);
        for (size_t i = 0; i < rows.n; i++) {
            const store_group_info_t *gi = &rows.rows[i].info;
            resp_add_map(&j->reply, 11);
            resp_add_bulk_str(&j->reply, "group");
            resp_add_bulk_str(&j->reply, rows.rows[i].name);
            resp_add_bulk_str(&j->reply, "topic");
            resp_add_bulk_str(&j->reply, gi->topic);
            add_kv_int(&j->reply, "ready", gi->ready);
            add_kv_int(&j->reply, "backlog", gi->backlog);
            add_kv_int(&j->reply, "retry-ready", gi->retry_ready);
            add_kv_int(&j->reply, "retry-delayed", gi->retry_delayed);
            add_kv_int(&j->reply, "inflight", gi->inflight);
            add_kv_int(&j->reply, "dlq", gi->dlq);
            add_kv_int(&j->reply, "max-reconsume", gi->max_reconsume);
            add_kv_int(&j->reply, "created-ms", gi->created_ms);
            add_kv_int(&j->reply, "retry", gi->retry_ready + gi->retry_delayed);
        }
        free(rows.rows);
    }
    return JOB_DONE;
}

/* ---- TOPICS ----------------------------------------------------------------------------- */

typedef struct topic_row {
    char name[MSG_MAX_NAME + 1];
    store_topic_info_t info;
} topic_row_t;

typedef struct topic_rows {
    topic_row_t *rows;
    size_t n, cap;
} topic_rows_t;

static int collect_topic(void *ctx, const char *topic, const store_topic_info_t *info)
{
    topic_rows_t *r = ctx;
    if (r->n == r->cap) {
        r->cap = r->cap ? r->cap * 2 : 16;
        r->rows = xrealloc(r->rows, r->cap * sizeof *r->rows);
    }
    snprintf(r->rows[r->n].name, sizeof r->rows[r->n].name, "%s", topic);
    r->rows[r->n].info = *info;
    r->n++;
    return 0;
}

static int cmp_topic_rows(const void *a, const void *b)
{
    return strcmp(((const topic_row_t *)a)->name, ((const topic_row_t *)b)->name);
}

/* Groups in (topic, name) order, so each topic's are one run. */
static int cmp_rows_by_topic(const void *a, const void *b)
{
    const group_row_t *x = a, *y = b;
    int c = strcmp(x->info.topic, y->info.topic);
    return c ? c : strcmp(x->name, y->name);
}

/* TOPICS: per topic (name order) its counts and its groups (docs/protocol.md). */
static job_result_t topics_exec(job_t *j, writer_t *w)
{
    store_t *s = writer_store(w);
    topic_rows_t topics = { 0 };
    group_rows_t groups = { 0 };
    store_topic_foreach(s, collect_topic, &topics);
    store_group_foreach(s, collect_group, &groups);
    if (topics.n > 1) {
        qsort(topics.rows, topics.n, sizeof *topics.rows, cmp_topic_rows);
    }
    if (groups.n > 1) {
        qsort(groups.rows, groups.n, sizeof *groups.rows, cmp_rows_by_topic);
    }
    resp_add_array(&j->reply, topics.n);
    size_t g = 0;
    for (size_t i = 0; i < topics.n; i++) {
        const topic_row_t *t = &topics.rows[i];
        resp_add_map(&j->reply, 7);
        resp_add_bulk_str(&j->reply, "topic");
        resp_add_bulk_str(&j->reply, t->name);
        add_kv_int(&j->reply, "ready", t->info.ready);
        add_kv_int(&j->reply, "delayed", t->info.delayed);
        add_kv_int(&j->reply, "retained", t->info.retained);
        add_kv_int(&j->reply, "appended", t->info.appended);
        add_kv_int(&j->reply, "sends", t->info.sent);
        while (g < groups.n && strcmp(groups.rows[g].info.topic, t->name) < 0) {
            g++; /* a group whose topic has no record (the store never has one) */
        }
        size_t first = g;
        while (g < groups.n && strcmp(groups.rows[g].info.topic, t->name) == 0) {
            g++;
        }
        resp_add_bulk_str(&j->reply, "groups");
        resp_add_array(&j->reply, g - first);
        for (size_t k = first; k < g; k++) {
            const store_group_info_t *gi = &groups.rows[k].info;
            resp_add_map(&j->reply, 5);
            resp_add_bulk_str(&j->reply, "group");
            resp_add_bulk_str(&j->reply, groups.rows[k].name);
            add_kv_int(&j->reply, "ready", gi->ready);
            add_kv_int(&j->reply, "inflight", gi->inflight);
            add_kv_int(&j->reply, "retry", gi->retry_ready + gi->retry_delayed);
            add_kv_int(&j->reply, "dlq", gi->dlq);
        }
    }
    free(topics.rows);
    free(groups.rows);
    return JOB_DONE;
}

void cmd_topics(cmd_call_t *call)
{
    job_t *j = cmd_job_new(sizeof *j, 0, topics_exec, NULL);
    call->job = j;
}

void cmd_group(cmd_call_t *call)
{
    const resp_arg_t *argv = call->argv;
    const resp_arg_t *sub = &argv[1];
    int code;
    if (cmd_arg_is(sub, "create")) {
        code = SUB_CREATE;
        if (call->argc < 4) {
            resp_add_error(call->out, "ERR wrong number of arguments for 'group|create' command");
            return;
        }
        if (cmd_check_name(call, "group", &argv[2]) != 0 || cmd_check_name(call, "topic", &argv[3]) != 0) {
            return;
        }
    } else if (cmd_arg_is(sub, "list")) {
        code = SUB_LIST;
        if (call->argc != 2) {
            resp_add_error(call->out, "ERR wrong number of arguments for 'group|list' command");
            return;
        }
    } else if (cmd_arg_is(sub, "del") || cmd_arg_is(sub, "delete") || cmd_arg_is(sub, "destroy")) {
        code = SUB_DEL;
        if (call->argc != 3) {
            resp_add_error(call->out, "ERR wrong number of arguments for 'group|del' command");
            return;
        }
        if (cmd_check_name(call, "group", &argv[2]) != 0) {
            return;
        }
    } else {
        char b[40];
        resp_add_errorf(call->out, "ERR unknown subcommand '%s' for 'group' (CREATE, LIST, DEL)",
                        cmd_shown(sub, b, sizeof b));
        return;
    }
    int from_first = 1, maxretry = -1, seen_from = 0, seen_max = 0;
    if (code == SUB_CREATE) {
        for (size_t i = 4; i < call->argc; i += 2) {
            const resp_arg_t *o = &argv[i];
            const resp_arg_t *v;
            if (cmd_arg_is(o, "from")) {
                if (!(v = cmd_opt_value(call, argv, call->argc, i)) || cmd_once(call, &seen_from, "FROM") != 0) {
                    return;
                }
                if (cmd_arg_is(v, "first")) {
                    from_first = 1;
                } else if (cmd_arg_is(v, "now")) {
                    from_first = 0;
                } else {
                    resp_add_error(call->out, "ERR FROM must be FIRST or NOW");
                    return;
                }
            } else if (cmd_arg_is(o, "maxretry")) {
                if (!(v = cmd_opt_value(call, argv, call->argc, i)) || cmd_once(call, &seen_max, "MAXRETRY") != 0) {
                    return;
                }
                uint64_t n;
                if (cmd_parse_u64(v, &n) != 0 || n > STORE_MAX_MAX_RECONSUME) {
                    char b[40];
                    resp_add_errorf(call->out, "ERR MAXRETRY must be 0..%d, got '%s'", STORE_MAX_MAX_RECONSUME,
                                    cmd_shown(v, b, sizeof b));
                    return;
                }
                maxretry = (int)n;
            } else {
                cmd_unknown_option(call, o, "group create");
                return;
            }
        }
    }
    const resp_arg_t *group = code != SUB_LIST ? &argv[2] : NULL;
    const resp_arg_t *topic = code == SUB_CREATE ? &argv[3] : NULL;
    char *arena;
    group_job_t *gj = cmd_job_new(sizeof *gj, cmd_copy_size(group) + cmd_copy_size(topic), group_exec, &arena);
    gj->req.sub = code;
    gj->req.group = cmd_job_copy(&arena, group);
    gj->req.topic = cmd_job_copy(&arena, topic);
    gj->req.from_first = from_first;
    gj->req.max_reconsume = maxretry;
    gj->job.reads_only = code == SUB_LIST; /* served while the disk is full */
    call->job = &gj->job;
}

/* ---- DLQ ------------------------------------------------------------------------------------ */

static job_result_t dlq_exec(job_t *j, writer_t *w)
{
    const dlq_cmd_req_t *r = &((dlq_job_t *)j)->req;
    store_t *s = writer_store(w);
    char err[300];
    store_group_info_t gi;
    if (!store_group_info(s, r->group.ptr, r->group.len, &gi)) {
        char b[80];
        resp_add_errorf(&j->reply, "ERR no such group '%s'", cmd_shown(&r->group, b, sizeof b));
        return JOB_DONE;
    }
    uint64_t count = 0;
    switch (r->sub) {
    case SUB_LEN:
        resp_add_int(&j->reply, (long long)gi.dlq);
        break;
    case SUB_LIST: {
        msg_owned_t *msgs = xmalloc((size_t)r->count * sizeof *msgs);
        int n = 0;
        if (store_dlq_list(s, r->group.ptr, r->group.len, r->after_id, r->count, msgs, &n, err, sizeof err) != 0) {
            free(msgs);
            cmd_reply_store_error(j, err);
            break;
        }
        resp_add_array(&j->reply, (size_t)n);
        for (int i = 0; i < n; i++) {
            const msg_t *m = &msgs[i].m;
            resp_add_array(&j->reply, 6);
            cmd_add_id(&j->reply, m->id);
            resp_add_bulk(&j->reply, m->key.ptr, m->key.len);
            resp_add_bulk(&j->reply, m->payload.ptr, m->payload.len);
            resp_add_int(&j->reply, (long long)m->reconsume);
            resp_add_bulk(&j->reply, m->reason.ptr, m->reason.len);
            resp_add_int(&j->reply, (long long)m->stamp_ms);
            msg_owned_free(&msgs[i]);
        }
        free(msgs);
        break;
    }
    case SUB_REQUEUE:
        if (store_dlq_requeue(s, r->group.ptr, r->group.len, r->id, r->all, writer_now(w), &count, err, sizeof err) !=
            0) {
            cmd_reply_store_error(j, err);
            break;
        }
        writer_stats(w)->requeued += count;
        resp_add_int(&j->reply, (long long)count);
        break;
    case SUB_DROP:
        if (store_dlq_drop(s, r->group.ptr, r->group.len, r->id, r->all, &count, err, sizeof err) != 0) {
            cmd_reply_store_error(j, err);
            break;
        }
        writer_stats(w)->dropped += count;
        resp_add_int(&j->reply, (long long)count);
        break;
    }
    return JOB_DONE;
}

void cmd_dlq(cmd_call_t *call)
{
    const config_t *cfg = cmd_config_of(call);
    const resp_arg_t *argv = call->argv;
    const resp_arg_t *sub = &argv[1];
    int code;
    if (cmd_arg_is(sub, "len")) {
        code = SUB_LEN;
    } else if (cmd_arg_is(sub, "list")) {
        code = SUB_LIST;
    } else if (cmd_arg_is(sub, "requeue")) {
        code = SUB_REQUEUE;
    } else if (cmd_arg_is(sub, "drop")) {
        code = SUB_DROP;
    } else {
        char b[40];
        resp_add_errorf(call->out, "ERR unknown subcommand '%s' for 'dlq' (LEN, LIST, REQUEUE, DROP)",
                        cmd_shown(sub, b, sizeof b));
        return;
    }
    static const char *const names[] = { "", "", "list", "", "len", "requeue", "drop" };
    if (call->argc < 3 || (code == SUB_LEN && call->argc != 3) ||
        ((code == SUB_REQUEUE || code == SUB_DROP) && call->argc != 4)) {
        resp_add_errorf(call->out, "ERR wrong number of arguments for 'dlq|%s' command", names[code]);
        return;
    }
    if (cmd_check_name(call, "group", &argv[2]) != 0) {
        return;
    }
    int count = DLQ_LIST_DEFAULT < cfg->max_pull_count ? DLQ_LIST_DEFAULT : (int)cfg->max_pull_count;
    uint64_t after = 0, id = 0;
    int all = 0;
    if (code == SUB_LIST) {
        int seen_count = 0, seen_after = 0;
        for (size_t i = 3; i < call->argc; i += 2) {
            const resp_arg_t *o = &argv[i];
            const resp_arg_t *v;
            if (cmd_arg_is(o, "count")) {
                if (!(v = cmd_opt_value(call, argv, call->argc, i)) || cmd_once(call, &seen_count, "COUNT") != 0 ||
                    cmd_parse_count(call, v, &count) != 0) {
                    return;
                }
            } else if (cmd_arg_is(o, "after")) {
                if (!(v = cmd_opt_value(call, argv, call->argc, i)) || cmd_once(call, &seen_after, "AFTER") != 0 ||
                    cmd_parse_id(call, v, &after) != 0) {
                    return;
                }
            } else {
                cmd_unknown_option(call, o, "dlq list");
                return;
            }
        }
    } else if (code == SUB_REQUEUE || code == SUB_DROP) {
        if (cmd_arg_is(&argv[3], "all")) {
            all = 1;
        } else if (cmd_parse_id(call, &argv[3], &id) != 0) {
            return;
        }
    }
    char *arena;
    dlq_job_t *dj = cmd_job_new(sizeof *dj, cmd_copy_size(&argv[2]), dlq_exec, &arena);
    dj->req.sub = code;
    dj->req.group = cmd_job_copy(&arena, &argv[2]);
    dj->req.count = count;
    dj->req.after_id = after;
    dj->req.id = id;
    dj->req.all = all;
    if (code == SUB_LIST) {
        dj->job.reply_estimate = cmd_listing_estimate(cmd_config_of(call), count);
    }
    dj->job.reads_only = code == SUB_LEN || code == SUB_LIST; /* served while the disk is full */
    call->job = &dj->job;
}
