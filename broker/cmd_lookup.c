/*
 * broker/cmd_lookup.c — finding and taking back messages: GET, FIND, REVOKE.
 *
 * GET id and FIND topic key answer message maps (a RESP3 map after HELLO 3, a
 * flat [field, value, ...] array under RESP2; fields that do not apply are
 * left out) built from the store's views (levels/lookup.c). REVOKE id and
 * REVOKE topic KEY k take back messages no group has received yet, in one
 * batch, and answer what they did: {revoked, delayed, ready, refused}.
 * docs/protocol.md has the field lists.
 *
 * Each command parses into its typed request on the loop thread; the exec
 * half runs on the storage thread with only that request. REVOKE is audited
 * (logged at info with the client's address and what it changed) when its
 * reply reaches the loop (cmd_audit).
 */
#include "broker/cmd_shared.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "levels/msg.h"
#include "levels/store.h"

/* FIND answers at most this many messages (one key rarely has more than
 * one), and stops once their keys and reasons reach max-pull-bytes (the
 * reply byte budget, msg_budget_t; at least one). */
#define FIND_MAX 1000

/* PEEK answers at most this many messages, and stops once their payloads
 * reach PEEK_MAX_BYTES (at least one). */
#define PEEK_DEFAULT   10
#define PEEK_MAX       1000
#define PEEK_MAX_BYTES (UINT64_C(1) << 20)

/* GET id | FIND topic key | REVOKE id | REVOKE topic KEY key | PEEK LEVEL n | PEEK TOPIC t */
typedef struct lookup_req {
    int level, count;      /* PEEK: level (0: the topic's log), COUNT */
    uint64_t id;           /* GET, REVOKE id */
    resp_arg_t topic, key; /* FIND, REVOKE by key (copies) */
    int by_key;
} lookup_req_t;

typedef struct lookup_job {
    job_t job; /* first member */
    lookup_req_t req;
} lookup_job_t;

/* ---- message maps -------------------------------------------------------------------- */

static void add_field_str(resp_buf_t *b, const char *name, const char *v, size_t len)
{
    resp_add_bulk_str(b, name);
    resp_add_bulk(b, v, len);
}

static void add_field_int(resp_buf_t *b, const char *name, long long v)
{
    resp_add_bulk_str(b, name);
    resp_add_int(b, v);
}

static void add_copy(resp_buf_t *b, const store_copy_view_t *c)
{
    size_t n = 3;
    n += c->state == STORE_MSG_LEASED;
    n += c->state == STORE_MSG_RETRY ? 1 + (c->level > 0) : 0;
    n += c->state == STORE_MSG_DLQ;
    n += c->reason != NULL;
    resp_add_map(b, n);
    add_field_str(b, "group", c->group, strlen(c->group));
    const char *st = store_msg_state_name(c->state);
    add_field_str(b, "state", st, strlen(st));
    add_field_int(b, "reconsume", c->reconsume);
    if (c->state == STORE_MSG_LEASED) {
        add_field_int(b, "deadline_ms", (long long)c->deadline_ms);
    }
    if (c->state == STORE_MSG_RETRY) {
        add_field_int(b, "level", c->level);
        if (c->level > 0) {
            add_field_int(b, "due_ms", (long long)c->due_ms);
        }
    }
    if (c->state == STORE_MSG_DLQ) {
        add_field_int(b, "parked_ms", (long long)c->parked_ms);
    }
    if (c->reason != NULL) {
        add_field_str(b, "reason", c->reason, c->reason_len);
    }
}

/* One message map (docs/protocol.md, GET). */
static void add_view(resp_buf_t *b, const store_msg_view_t *v, int with_payload)
{
    char id[17];
    store_id_format(v->id, id);
    const char *st = store_msg_state_name(v->state);
    if (v->state == STORE_MSG_GONE) {
        resp_add_map(b, 2);
        add_field_str(b, "id", id, 16);
        add_field_str(b, "state", st, strlen(st));
        return;
    }
    const msg_t *m = &v->msg.m;
    int delayed = v->state == STORE_MSG_DELAYED;
    resp_add_map(b, 8 + (size_t)with_payload + (delayed ? 3 : 0));
    add_field_str(b, "id", id, 16);
    add_field_str(b, "state", st, strlen(st));
    add_field_str(b, "topic", m->topic.ptr, m->topic.len);
    add_field_str(b, "key", m->key.ptr, m->key.len);
    if (with_payload) {
        add_field_str(b, "payload", m->payload.ptr, m->payload.len);
    }
    add_field_int(b, "created_ms", (long long)m->created_ms);
    add_field_int(b, "due_ms", (long long)m->due_ms);
    if (delayed) {
        add_field_int(b, "level", v->level);
        add_field_int(b, "hop_due_ms", (long long)v->hop_due_ms);
        add_field_int(b, "hops_left", v->hops_left);
    }
    add_field_int(b, "reconsume", v->reconsume);
    resp_add_bulk_str(b, "groups");
    resp_add_array(b, (size_t)v->ncopies);
    for (int i = 0; i < v->ncopies; i++) {
        add_copy(b, &v->copies[i]);
    }
}

/* ---- GET -------------------------------------------------------------------------------- */

static job_result_t get_exec(job_t *j, writer_t *w)
{
    const lookup_req_t *r = &((lookup_job_t *)j)->req;
    store_msg_view_t v;
    char err[300];
    if (store_msg_get(writer_store(w), r->id, 1, &v, err, sizeof err) != 0) {
        cmd_reply_store_error(j, err);
        return JOB_DONE;
    }
    if (v.state != STORE_MSG_GONE) {
        job_shows(j, v.id);
    }
    add_view(&j->reply, &v, 1);
    store_msg_view_free(&v);
    return JOB_DONE;
}

void cmd_get(cmd_call_t *call)
{
    uint64_t id;
    if (cmd_parse_id(call, &call->argv[1], &id) != 0) {
        return;
    }
    char *arena;
    lookup_job_t *lj = cmd_job_new(sizeof *lj, 0, get_exec, &arena);
    lj->req.id = id;
    lj->job.reply_estimate = cmd_listing_estimate(cmd_config_of(call), 1); /* one message with its payload */
    call->job = &lj->job;
}

/* ---- FIND ------------------------------------------------------------------------------- */

static job_result_t find_exec(job_t *j, writer_t *w)
{
    const lookup_req_t *r = &((lookup_job_t *)j)->req;
    store_msg_view_t *views;
    int n;
    char err[300];
    if (store_msg_find(writer_store(w), r->topic.ptr, r->topic.len, r->key.ptr, r->key.len, FIND_MAX, &views, &n, err,
                       sizeof err) != 0) {
        cmd_reply_store_error(j, err);
        return JOB_DONE;
    }
    /* The reply byte budget (max-pull-bytes, as PULL and DLQ LIST): maps are
     * taken while it lasts, each charged its key and its copies' reasons. */
    msg_budget_t budget;
    msg_budget_init(&budget, store_options(writer_store(w))->max_lease_bytes);
    int shown = 0;
    while (shown < n && msg_budget_open(&budget)) {
        msg_budget_charge(&budget, &views[shown].msg.m);
        for (int c = 0; c < views[shown].ncopies; c++) {
            msg_t reason = { .reason = { views[shown].copies[c].reason, (uint32_t)views[shown].copies[c].reason_len } };
            msg_budget_charge(&budget, &reason);
        }
        shown++;
    }
    resp_add_array(&j->reply, (size_t)shown);
    for (int i = 0; i < n; i++) {
        if (i < shown) {
            job_shows(j, views[i].id);
            add_view(&j->reply, &views[i], 0);
        }
        store_msg_view_free(&views[i]);
    }
    free(views);
    return JOB_DONE;
}

/* A non-empty key within MSG_MAX_KEY: 0, or -1 with the error reply. */
static int check_key(cmd_call_t *call, const resp_arg_t *k)
{
    if (k->len == 0 || k->len > MSG_MAX_KEY) {
        resp_add_errorf(call->out, "ERR key must be 1..%d bytes, got %zu", MSG_MAX_KEY, k->len);
        return -1;
    }
    return 0;
}

static lookup_job_t *key_job(cmd_call_t *call, const resp_arg_t *topic, const resp_arg_t *key,
                             job_result_t (*exec)(job_t *, writer_t *))
{
    char *arena;
    lookup_job_t *lj = cmd_job_new(sizeof *lj, cmd_copy_size(topic) + cmd_copy_size(key), exec, &arena);
    lj->req.topic = cmd_job_copy(&arena, topic);
    lj->req.key = cmd_job_copy(&arena, key);
    lj->req.by_key = 1;
    return lj;
}

void cmd_find(cmd_call_t *call)
{
    if (cmd_check_name(call, "topic", &call->argv[1]) != 0 || check_key(call, &call->argv[2]) != 0) {
        return;
    }
    lookup_job_t *lj = key_job(call, &call->argv[1], &call->argv[2], find_exec);
    lj->job.reply_estimate = cmd_listing_estimate(cmd_config_of(call), FIND_MAX); /* bounded by max-pull-bytes */
    call->job = &lj->job;
}

/* ---- REVOKE ----------------------------------------------------------------------------- */

static job_result_t revoke_exec(job_t *j, writer_t *w)
{
    const lookup_req_t *r = &((lookup_job_t *)j)->req;
    store_revoke_result_t res;
    char err[300];
    int rc = r->by_key ? store_revoke_key(writer_store(w), r->topic.ptr, r->topic.len, r->key.ptr, r->key.len, &res,
                                          err, sizeof err)
                       : store_revoke_id(writer_store(w), r->id, &res, err, sizeof err);
    if (rc != 0) {
        cmd_reply_store_error(j, err);
        return JOB_DONE;
    }
    writer_stats(w)->revoked += res.revoked;
    snprintf(j->audit_result, sizeof j->audit_result, "revoked %llu (delayed %llu, ready %llu), refused %llu%s%.80s",
             (unsigned long long)res.revoked, (unsigned long long)res.from_delayed, (unsigned long long)res.from_ready,
             (unsigned long long)res.refused_total, res.nrefused ? ": " : "",
             res.nrefused ? res.refused[0].reason : "");
    resp_buf_t *b = &j->reply;
    resp_add_map(b, 5);
    add_field_int(b, "revoked", (long long)res.revoked);
    add_field_int(b, "delayed", (long long)res.from_delayed);
    add_field_int(b, "ready", (long long)res.from_ready);
    add_field_int(b, "refused_total", (long long)res.refused_total);
    resp_add_bulk_str(b, "refused");
    resp_add_array(b, (size_t)res.nrefused);
    for (int i = 0; i < res.nrefused; i++) {
        resp_add_array(b, 2);
        cmd_add_id(b, res.refused[i].id);
        resp_add_bulk_str(b, res.refused[i].reason);
    }
    return JOB_DONE;
}

void cmd_revoke(cmd_call_t *call)
{
    const resp_arg_t *argv = call->argv;
    if (call->argc == 2) {
        uint64_t id;
        if (cmd_parse_id(call, &argv[1], &id) != 0) {
            return;
        }
        char *arena;
        lookup_job_t *lj = cmd_job_new(sizeof *lj, 0, revoke_exec, &arena);
        lj->req.id = id;
        call->job = &lj->job;
        return;
    }
    if (!cmd_arg_is(&argv[2], "key")) {
        cmd_unknown_option(call, &argv[2], "revoke");
        return;
    }
    if (cmd_opt_value(call, argv, call->argc, 2) == NULL) {
        return;
    }
    if (call->argc > 4) {
        char b[40];
        resp_add_errorf(call->out, "ERR syntax error: unexpected argument '%s' after REVOKE topic KEY key",
                        cmd_shown(&argv[4], b, sizeof b));
        return;
    }
    if (cmd_check_name(call, "topic", &argv[1]) != 0 || check_key(call, &argv[3]) != 0) {
        return;
    }
    call->job = &key_job(call, &argv[1], &argv[3], revoke_exec)->job;
}

/* ---- PEEK ---------------------------------------------------------------------------------- */

static job_result_t peek_exec(job_t *j, writer_t *w)
{
    const lookup_req_t *r = &((lookup_job_t *)j)->req;
    msg_owned_t *msgs = xcalloc((size_t)r->count, sizeof *msgs);
    uint64_t *due = xcalloc((size_t)r->count, sizeof *due);
    int n = 0;
    char err[300];
    if (store_peek(writer_store(w), r->level, r->topic.ptr, r->topic.len, r->count, PEEK_MAX_BYTES, msgs, due, &n, err,
                   sizeof err) != 0) {
        cmd_reply_store_error(j, err);
    } else {
        resp_add_array(&j->reply, (size_t)n);
        for (int i = 0; i < n; i++) {
            const msg_t *m = &msgs[i].m;
            job_shows(j, m->id);
            resp_add_array(&j->reply, 7);
            cmd_add_id(&j->reply, m->id);
            resp_add_bulk(&j->reply, m->topic.ptr, m->topic.len);
            resp_add_bulk(&j->reply, m->key.ptr, m->key.len);
            resp_add_bulk(&j->reply, m->payload.ptr, m->payload.len);
            resp_add_int(&j->reply, (long long)m->reconsume);
            resp_add_int(&j->reply, (long long)m->due_ms);
            resp_add_int(&j->reply, (long long)due[i]);
            msg_owned_free(&msgs[i]);
        }
    }
    free(msgs);
    free(due);
    return JOB_DONE;
}

void cmd_peek(cmd_call_t *call)
{
    const resp_arg_t *argv = call->argv;
    int is_level = cmd_arg_is(&argv[1], "level"), is_topic = cmd_arg_is(&argv[1], "topic");
    char b[40];
    if (!(is_level || is_topic)) {
        resp_add_errorf(call->out, "ERR syntax error: PEEK needs LEVEL n or TOPIC t, got '%s'",
                        cmd_shown(&argv[1], b, sizeof b));
        return;
    }
    int level = 0, count = PEEK_DEFAULT; /* argv[2] is there: the arity is -3 */
    if (is_level) {
        uint64_t v;
        int max = cmd_config_of(call)->store.levels.count;
        if (cmd_parse_u64(&argv[2], &v) != 0 || v < 1 || v > (uint64_t)max) {
            resp_add_errorf(call->out, "ERR LEVEL must be 1..%d, got '%s'", max, cmd_shown(&argv[2], b, sizeof b));
            return;
        }
        level = (int)v;
    } else if (cmd_check_name(call, "topic", &argv[2]) != 0) {
        return;
    }
    int seen_count = 0;
    for (size_t i = 3; i < call->argc; i += 2) {
        uint64_t v;
        if (!cmd_arg_is(&argv[i], "count")) {
            cmd_unknown_option(call, &argv[i], "peek");
            return;
        }
        const resp_arg_t *cv = cmd_opt_value(call, argv, call->argc, i);
        if (!cv || cmd_once(call, &seen_count, "COUNT") != 0) {
            return;
        }
        if (cmd_parse_u64(cv, &v) != 0 || v < 1 || v > PEEK_MAX) {
            resp_add_errorf(call->out, "ERR COUNT must be 1..%d, got '%s'", PEEK_MAX, cmd_shown(cv, b, sizeof b));
            return;
        }
        count = (int)v;
    }
    char *arena;
    lookup_job_t *lj = cmd_job_new(sizeof *lj, is_topic ? cmd_copy_size(&argv[2]) : 0, peek_exec, &arena);
    if (is_topic) {
        lj->req.topic = cmd_job_copy(&arena, &argv[2]);
    }
    lj->req.level = level;
    lj->req.count = count;
    lj->job.reply_estimate = cmd_listing_estimate(cmd_config_of(call), count);
    call->job = &lj->job;
}
