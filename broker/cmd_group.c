/*
 * broker/cmd_group.c — topics, consumer groups and the dead-letter queue:
 * TOPICS, TOPIC DEL, GROUP (CREATE LIST DEL) and DLQ (LEN LIST REQUEUE DROP).
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

/* A page of a name-ordered listing (TOPICS, GROUP LIST): the names after
 * `after` (empty: from the first), at most count of them (0: all). */
typedef struct name_page {
    int count;
    resp_arg_t after; /* a copy */
} name_page_t;

/* GROUP CREATE group topic [FROM FIRST|NOW] [MAXRETRY n] | LIST [COUNT n] [AFTER group] | DEL group */
typedef struct group_cmd_req {
    int sub;                 /* SUB_CREATE, SUB_LIST or SUB_DEL */
    resp_arg_t group, topic; /* copies (empty when not given) */
    name_page_t page;        /* LIST */
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
    store_dlq_walk_t walk; /* REQUEUE/DROP ALL: where its steps got to */
} dlq_job_t;

/* DLQ REQUEUE/DROP ALL: entries per step. A step holds the storage thread,
 * so every other client's command, for 1–2 ms (a requeue costs about 2 µs,
 * a drop 4: it asks the indexes whether the message is gone); between steps
 * the other connections' jobs, the commit and the scheduler run. Half as
 * many per drop step took 46 % longer and left the p99 of a SEND beside it
 * as it was (docs/BENCH-broker.md). */
#define DLQ_STEP_ENTRIES 512

/* ---- GROUP ------------------------------------------------------------------------------ */

static void add_kv_int(resp_buf_t *b, const char *k, uint64_t v)
{
    resp_add_bulk_str(b, k);
    resp_add_int(b, (long long)v);
}

/* [COUNT n] [AFTER name] from argv[from..]: 0 with *count (0: not given)
 * and *after (NULL: not given), or -1 with the error reply. what names the
 * command for an unknown option; kind the names ("topic", "group"). */
static int parse_page(cmd_call_t *call, size_t from, const char *what, const char *kind, int *count,
                      const resp_arg_t **after)
{
    const resp_arg_t *argv = call->argv;
    int seen_count = 0, seen_after = 0;
    *count = 0;
    *after = NULL;
    for (size_t i = from; i < call->argc; i += 2) {
        const resp_arg_t *o = &argv[i];
        int is_count = cmd_arg_is(o, "count");
        if (!is_count && !cmd_arg_is(o, "after")) { /* before asking for its value: one reply per command */
            cmd_unknown_option(call, o, what);
            return -1;
        }
        const resp_arg_t *v = cmd_opt_value(call, argv, call->argc, i);
        if (v == NULL) {
            return -1;
        }
        if (is_count) {
            if (cmd_once(call, &seen_count, "COUNT") != 0 || cmd_parse_count(call, v, count) != 0) {
                return -1;
            }
        } else {
            if (cmd_once(call, &seen_after, "AFTER") != 0 || cmd_check_name(call, kind, v) != 0) {
                return -1;
            }
            *after = v;
        }
    }
    return 0;
}

/* The most a page of TOPICS or GROUP LIST may hold, charged to the
 * connection (conn_request.c) and fair-shared by the storage thread as a listing:
 * without it a client pipelining TOPICS and never reading had 1 024 replies
 * of 10 000 topics built in one iteration (4 GB) while every SEND waited.
 * count rows (all: limit — max-topics or max-groups —, or 10 000 without
 * a limit), each its name and fields, about 1 KiB. */
#define PAGE_ROW_ESTIMATE 1024
static size_t page_estimate(int count, long long limit)
{
    long long rows = count > 0 ? count : limit > 0 ? limit : 10000;
    return (size_t)rows * PAGE_ROW_ESTIMATE;
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
        store_group_row_t *rows;
        size_t n;
        store_group_page(s, r->page.after.len > 0 ? r->page.after.ptr : NULL, (size_t)r->page.count, &rows, &n);
        resp_add_array(&j->reply, n);
        for (size_t i = 0; i < n; i++) {
            const store_group_info_t *gi = &rows[i].info;
            resp_add_map(&j->reply, 11);
            resp_add_bulk_str(&j->reply, "group");
            resp_add_bulk_str(&j->reply, rows[i].name);
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
        free(rows);
    }
    return JOB_DONE;
}

/* ---- TOPICS ----------------------------------------------------------------------------- */

/* TOPICS: the dedup-topics list as of the command (a copy: SIGHUP may
 * change the live one on the loop thread meanwhile). */
typedef struct topics_job {
    job_t job; /* first member */
    const char *dedup_topics;
    name_page_t page; /* TOPICS [COUNT n] [AFTER topic] */
} topics_job_t;

/* TOPICS: per topic (name order) its counts and its groups (docs/protocol.md). */
static job_result_t topics_exec(job_t *j, writer_t *w)
{
    const char *dedup_topics = ((topics_job_t *)j)->dedup_topics;
    store_t *s = writer_store(w);
    store_topic_row_t *topics;
    size_t ntopics;
    const name_page_t *page = &((topics_job_t *)j)->page;
    store_topic_page(s, page->after.len > 0 ? page->after.ptr : NULL, (size_t)page->count, &topics, &ntopics);
    resp_add_array(&j->reply, ntopics);
    for (size_t i = 0; i < ntopics; i++) {
        const store_topic_row_t *t = &topics[i];
        resp_add_map(&j->reply, 8);
        resp_add_bulk_str(&j->reply, "topic");
        resp_add_bulk_str(&j->reply, t->name);
        add_kv_int(&j->reply, "dedup", (uint64_t)config_topic_listed(dedup_topics, t->name, strlen(t->name)));
        add_kv_int(&j->reply, "ready", t->info.ready);
        add_kv_int(&j->reply, "delayed", t->info.delayed);
        add_kv_int(&j->reply, "retained", t->info.retained);
        add_kv_int(&j->reply, "appended", t->info.appended);
        add_kv_int(&j->reply, "sends", t->info.sent);
        store_group_row_t *groups;
        size_t ngroups;
        store_topic_group_rows(s, t->name, strlen(t->name), &groups, &ngroups);
        resp_add_bulk_str(&j->reply, "groups");
        resp_add_array(&j->reply, ngroups);
        for (size_t k = 0; k < ngroups; k++) {
            const store_group_info_t *gi = &groups[k].info;
            resp_add_map(&j->reply, 5);
            resp_add_bulk_str(&j->reply, "group");
            resp_add_bulk_str(&j->reply, groups[k].name);
            add_kv_int(&j->reply, "ready", gi->ready);
            add_kv_int(&j->reply, "inflight", gi->inflight);
            add_kv_int(&j->reply, "retry", gi->retry_ready + gi->retry_delayed);
            add_kv_int(&j->reply, "dlq", gi->dlq);
        }
        free(groups);
    }
    free(topics);
    return JOB_DONE;
}

void cmd_topics(cmd_call_t *call)
{
    int count;
    const resp_arg_t *after;
    if (parse_page(call, 1, "topics", "topic", &count, &after) != 0) {
        return;
    }
    const char *list = cmd_config_of(call)->dedup_topics;
    resp_arg_t copy = { list, list ? strlen(list) : 0 };
    char *arena;
    topics_job_t *tj =
        cmd_job_new(sizeof *tj, (list ? cmd_copy_size(&copy) : 0) + cmd_copy_size(after), topics_exec, &arena);
    tj->dedup_topics = list ? cmd_job_copy(&arena, &copy).ptr : NULL;
    tj->page.count = count;
    tj->page.after = cmd_job_copy(&arena, after);
    tj->job.reply_estimate = page_estimate(count, cmd_config_of(call)->max_topics);
    call->job = &tj->job;
}

/* ---- TOPIC DEL ------------------------------------------------------------------------------ */

typedef struct topic_del_job {
    job_t job;        /* first member */
    resp_arg_t topic; /* a copy */
    int purge;        /* TOPIC DEL topic PURGE: its retained messages first, in steps (JOB_AGAIN) */
    uint64_t until;   /* store_topic_purge_step's bound (0 before the first step) */
    uint64_t purged;  /* retained messages deleted by the steps so far */
} topic_del_job_t;

/* Retained messages TOPIC DEL … PURGE deletes per step (each with its index
 * entries): about DLQ DROP ALL's step. */
#define TOPIC_PURGE_STEP 512

/* Why a topic is not empty, for the refusal: its groups, what its log keeps,
 * what is still on the levels (only the nonzero ones), each with what to do
 * about it (PURGE does not reach the levels: only time or REVOKE empties them). */
static void add_in_use_error(resp_buf_t *out, const resp_arg_t *topic, const store_topic_info_t *why,
                             const char *suffix)
{
    char b[80], reasons[400] = "";
    size_t n = 0;
    if (why->groups > 0) {
        n += (size_t)snprintf(reasons + n, sizeof reasons - n, "%d group%s bound to it (GROUP DEL first)", why->groups,
                              why->groups == 1 ? "" : "s");
    }
    if (why->retained > 0 && n < sizeof reasons) {
        n += (size_t)snprintf(reasons + n, sizeof reasons - n, "%s%llu message%s in its log (%s)", n ? ", " : "",
                              (unsigned long long)why->retained, why->retained == 1 ? "" : "s",
                              why->groups > 0 ? "until its groups have consumed them"
                                              : "a topic without groups keeps them for retention: TOPIC DEL "
                                                "topic PURGE deletes them");
    }
    if (why->delayed > 0 && n < sizeof reasons) {
        int one = why->delayed == 1;
        snprintf(reasons + n, sizeof reasons - n,
                 "%s%llu message%s on the levels, not due yet (wait until %s due, or REVOKE %s by key or id)",
                 n ? ", " : "", (unsigned long long)why->delayed, one ? "" : "s", one ? "it comes" : "they come",
                 one ? "it" : "them");
    }
    resp_add_errorf(out, "ERR topic '%s' is not empty: %s%s", cmd_shown(topic, b, sizeof b), reasons, suffix);
}

/* What a PURGE's steps deleted so far (job_t.so_far). */
static void topic_purge_so_far(const job_t *j, char *buf, size_t len)
{
    const topic_del_job_t *tj = (const topic_del_job_t *)j;
    char b[80];
    buf[0] = '\0';
    if (tj->purged > 0) {
        snprintf(buf, len, "%llu retained message%s of topic '%s' were deleted", (unsigned long long)tj->purged,
                 tj->purged == 1 ? "" : "s", cmd_shown(&tj->topic, b, sizeof b));
    }
}

/* TOPIC DEL, or with PURGE one step of it (JOB_AGAIN until the retained
 * messages are gone and the topic with them). */
static job_result_t topic_del_exec(job_t *j, writer_t *w)
{
    topic_del_job_t *tj = (topic_del_job_t *)j;
    store_topic_del_t out;
    store_topic_info_t why;
    char err[300], steps[320];
    int done = 1, rc;
    if (tj->purge) {
        uint64_t n = 0;
        rc = store_topic_purge_step(writer_store(w), tj->topic.ptr, tj->topic.len, &tj->until, TOPIC_PURGE_STEP, &n,
                                    &done, &out, &why, err, sizeof err);
        tj->purged += n;
    } else {
        rc = store_topic_delete(writer_store(w), tj->topic.ptr, tj->topic.len, &out, &why, err, sizeof err);
    }
    if (rc != 0) {
        cmd_reply_store_error(j, err);
        return JOB_DONE;
    }
    if (!done) {
        if (!writer_stopping(w)) {
            return JOB_AGAIN;
        }
        cmd_reply_stopping(j);
        return JOB_DONE;
    }
    if (out == STORE_TOPIC_IN_USE) {
        add_in_use_error(&j->reply, &tj->topic, &why, writer_steps_suffix(j, steps, sizeof steps));
    } else {
        resp_add_int(&j->reply, out == STORE_TOPIC_DELETED);
    }
    if (tj->purge) {
        snprintf(j->audit_result, sizeof j->audit_result, "purged %llu retained messages, %s",
                 (unsigned long long)tj->purged,
                 out == STORE_TOPIC_DELETED  ? "deleted"
                 : out == STORE_TOPIC_IN_USE ? "not empty"
                                             : "no such topic");
    }
    return JOB_DONE;
}

void cmd_topic(cmd_call_t *call)
{
    const resp_arg_t *argv = call->argv;
    if (!(cmd_arg_is(&argv[1], "del") || cmd_arg_is(&argv[1], "delete") || cmd_arg_is(&argv[1], "destroy"))) {
        char b[40];
        resp_add_errorf(call->out, "ERR unknown subcommand '%s' for 'topic' (DEL)", cmd_shown(&argv[1], b, sizeof b));
        return;
    }
    if (call->argc != 3 && call->argc != 4) {
        resp_add_error(call->out, "ERR wrong number of arguments for 'topic|del' command");
        return;
    }
    if (cmd_check_name(call, "topic", &argv[2]) != 0) {
        return;
    }
    if (call->argc == 4 && !cmd_arg_is(&argv[3], "purge")) {
        char b[40];
        resp_add_errorf(call->out, "ERR syntax error: unknown option '%s' for 'topic|del' (PURGE)",
                        cmd_shown(&argv[3], b, sizeof b));
        return;
    }
    char *arena;
    topic_del_job_t *tj = cmd_job_new(sizeof *tj, cmd_copy_size(&argv[2]), topic_del_exec, &arena);
    tj->topic = cmd_job_copy(&arena, &argv[2]);
    tj->purge = call->argc == 4;
    tj->job.so_far = topic_purge_so_far;
    call->job = &tj->job;
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
    int from_first = 1, maxretry = -1, seen_from = 0, seen_max = 0, count = 0;
    const resp_arg_t *after = NULL;
    if (code == SUB_LIST && parse_page(call, 2, "group list", "group", &count, &after) != 0) {
        return;
    }
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
                    char b[40];
                    resp_add_errorf(call->out, "ERR FROM must be FIRST or NOW, got '%s'", cmd_shown(v, b, sizeof b));
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
    group_job_t *gj =
        cmd_job_new(sizeof *gj, cmd_copy_size(group) + cmd_copy_size(topic) + cmd_copy_size(after), group_exec, &arena);
    gj->req.sub = code;
    gj->req.page.count = count;
    if (code == SUB_LIST) {
        gj->job.reply_estimate = page_estimate(count, cmd_config_of(call)->max_groups);
    }
    gj->req.page.after = cmd_job_copy(&arena, after);
    gj->req.group = cmd_job_copy(&arena, group);
    gj->req.topic = cmd_job_copy(&arena, topic);
    gj->req.from_first = from_first;
    gj->req.max_reconsume = maxretry;
    gj->job.reads_only = code == SUB_LIST; /* served while the disk is full */
    call->job = &gj->job;
}

/* ---- DLQ ------------------------------------------------------------------------------------ */

/* DLQ REQUEUE/DROP id, or ALL a step per call (JOB_AGAIN): the reply, the
 * count, comes with the last step. */
static job_result_t dlq_take_exec(dlq_job_t *dj, writer_t *w)
{
    const dlq_cmd_req_t *r = &dj->req;
    job_t *j = &dj->job;
    store_t *s = writer_store(w);
    int requeue = r->sub == SUB_REQUEUE;
    char err[300];
    uint64_t count = 0;
    int rc;
    if (!r->all) {
        rc = requeue
                 ? store_dlq_requeue(s, r->group.ptr, r->group.len, r->id, 0, writer_now(w), &count, err, sizeof err)
                 : store_dlq_drop(s, r->group.ptr, r->group.len, r->id, 0, &count, err, sizeof err);
    } else {
        store_dlq_walk_t *walk = &dj->walk;
        walk->requeue = requeue;
        uint64_t before = walk->count;
        rc = store_dlq_walk_step(s, r->group.ptr, r->group.len, walk, DLQ_STEP_ENTRIES, writer_now(w), err, sizeof err);
        count = walk->count - before;
    }
    if (rc != 0) {
        cmd_reply_store_error(j, err);
        return JOB_DONE;
    }
    *(requeue ? &writer_stats(w)->requeued : &writer_stats(w)->dropped) += count;
    if (r->all && !dj->walk.done) {
        if (!writer_stopping(w)) {
            return JOB_AGAIN;
        }
        cmd_reply_stopping(j);
        return JOB_DONE;
    }
    resp_add_int(&j->reply, (long long)(r->all ? dj->walk.count : count));
    return JOB_DONE;
}

/* What the steps of REQUEUE|DROP … ALL moved so far (job_t.so_far). */
static void dlq_walk_so_far(const job_t *j, char *buf, size_t len)
{
    const dlq_job_t *dj = (const dlq_job_t *)j;
    char b[80];
    buf[0] = '\0';
    if (dj->walk.count > 0) {
        snprintf(buf, len, "%llu of the DLQ of group '%s' were %s", (unsigned long long)dj->walk.count,
                 cmd_shown(&dj->req.group, b, sizeof b), dj->req.sub == SUB_REQUEUE ? "requeued" : "dropped");
    }
}

static job_result_t dlq_exec(job_t *j, writer_t *w)
{
    dlq_job_t *dj = (dlq_job_t *)j;
    const dlq_cmd_req_t *r = &dj->req;
    store_t *s = writer_store(w);
    char err[300];
    store_group_info_t gi;
    int walking = dj->walk.started; /* a later step of ALL: it ends by itself when its group is gone */
    if (!walking && !store_group_info(s, r->group.ptr, r->group.len, &gi)) {
        char b[80];
        resp_add_errorf(&j->reply, "ERR no such group '%s'", cmd_shown(&r->group, b, sizeof b));
        return JOB_DONE;
    }
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
    case SUB_DROP:
        return dlq_take_exec(dj, w);
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
    dj->job.so_far = dlq_walk_so_far;
    call->job = &dj->job;
}
