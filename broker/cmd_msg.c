/*
 * broker/cmd_msg.c — the message commands: SEND PULL ACK NACK TOUCH.
 *
 * The hot path. Each command parses its arguments on the loop thread into a
 * typed request (send_req_t, pull_req_t, ...) held by its storage job, with
 * copies of only the argument bytes the exec half needs, in the job's single
 * allocation. SEND is validated once, before it is queued, by the store's
 * own pure check (store_send_validate) against the store's options
 * (config_t.store): one limits source, one wording. The exec halves run on
 * the storage thread, use only their request, and write the reply (SEND's
 * also has a check half that writes nothing, cmd_send_check, which EXEC runs
 * over every queued SEND before it stores any: cmd_multi.c); their
 * writes commit with the rest of the group (writer_commit.c) before the reply is
 * sent.
 */
#include "broker/cmd_shared.h"

#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "base/clock.h"
#include "base/err.h"
#include "base/units.h"
#include "broker/metrics.h"
#include "levels/msg.h"
#include "levels/sched.h"
#include "levels/store.h"
#include "levels/table.h"

/* SEND topic payload [KEY k] [LEVEL n | DELAY d | AT unix-ms] */
typedef struct send_req {
    store_send_req_t msg; /* topic, key, payload (copies), level, delay_ms */
    int has_at;           /* AT: the delay is at_ms - now when it runs */
    int dedup;            /* answer a live message's id with that topic and key instead: DEDUP, or a keyed
                             SEND to a dedup-topics topic */
    int dedup_reply;      /* DEDUP was said: reply [id, duplicate] (dedup-topics alone: the id, as any SEND) */
    uint64_t at_ms;
    uint64_t max_delay_ms; /* AT is checked against it again when it runs (at_check) */
} send_req_t;

/* PULL group topic [COUNT n] [BLOCK ms] [LEASE ms] (BLOCK lives in the job_t) */
typedef struct pull_req {
    resp_arg_t group, topic; /* copies */
    resp_arg_t addr, user;   /* copies of who sent it, for the audit line of a group it creates */
    int count;
    uint64_t lease_ms;
} pull_req_t;

/* ACK group id [id ...] */
typedef struct ack_req {
    resp_arg_t group; /* a copy */
    int nids;
    uint64_t *ids; /* in the job's allocation */
} ack_req_t;

/* NACK group id [LEVEL n | DELAY d | DLQ] [REASON text] */
typedef struct nack_req {
    resp_arg_t group; /* a copy */
    uint64_t id;
    sched_nack_req_t how; /* to_dlq, level, delay_ms, reason (a copy) */
} nack_req_t;

/* TOUCH group id [LEASE ms] */
typedef struct touch_req {
    resp_arg_t group; /* a copy */
    uint64_t id;
    uint64_t lease_ms;
} touch_req_t;

typedef struct send_job {
    job_t job;
    send_req_t req;
} send_job_t;
typedef struct pull_job {
    job_t job;
    pull_req_t req;
} pull_job_t;
typedef struct ack_job {
    job_t job;
    ack_req_t req;
} ack_job_t;
typedef struct nack_job {
    job_t job;
    nack_req_t req;
} nack_job_t;
typedef struct touch_job {
    job_t job;
    touch_req_t req;
} touch_job_t;

/* AT at_ms against max-delay at now (wall ms): 0, or -1 with the error in err, naming AT, the time asked for, the
 * limit and the latest time accepted now — not the store's "delay … exceeds max-delay …", which would name a delay
 * the client never sent. */
static int at_check(uint64_t at_ms, uint64_t now, uint64_t max_delay_ms, char *err, size_t errlen)
{
    if (at_ms <= now || at_ms - now <= max_delay_ms) {
        return 0;
    }
    char m[UNITS_TEXT_MAX];
    units_format_duration(max_delay_ms, m, sizeof m);
    return err_set(err, errlen, "AT %llu is more than max-delay %s from now (the latest accepted now is %llu)",
                   (unsigned long long)at_ms, m, (unsigned long long)(now + max_delay_ms));
}

/* LEVEL n in min..count of the store's level table: 0 and *level, or -1 with the error reply. */
static int parse_level(cmd_call_t *call, const resp_arg_t *v, int min, int *level)
{
    const lvl_table_t *t = &cmd_config_of(call)->store.levels;
    uint64_t n;
    if (cmd_parse_u64(v, &n) != 0 || n < (uint64_t)min || n > (uint64_t)t->count) {
        char b[40];
        resp_add_errorf(call->out, "ERR LEVEL must be %d..%d, got '%s'", min, t->count, cmd_shown(v, b, sizeof b));
        return -1;
    }
    *level = (int)n;
    return 0;
}

/* ---- SEND ---------------------------------------------------------------------- */

/* r's message as it is stored at now: an AT's delay counted from now, after the AT is checked again (a wall clock set
 * back since it was parsed could have moved it past max-delay). 0, or -1 with the error. */
static int send_msg_at(const send_req_t *r, uint64_t now, store_send_req_t *msg, char *err, size_t errlen)
{
    *msg = r->msg;
    if (r->has_at) {
        if (at_check(r->at_ms, now, r->max_delay_ms, err, errlen) != 0) {
            return -1;
        }
        msg->delay_ms = r->at_ms > now ? r->at_ms - now : 0;
    }
    return 0;
}

int cmd_send_run(job_t *j, writer_t *w, uint64_t now, char *err, size_t errlen)
{
    const send_req_t *r = &((send_job_t *)j)->req;
    store_send_req_t msg;
    uint64_t id, due;
    int dup = 0;
    if (send_msg_at(r, now, &msg, err, errlen) != 0) {
        cmd_reply_store_error(j, err);
        return -1;
    }
    int rc = r->dedup ? store_send_dedup(writer_store(w), &msg, now, &id, &due, &dup, err, errlen)
                      : store_send(writer_store(w), &msg, now, &id, &due, err, errlen);
    if (rc != 0) {
        cmd_reply_store_error(j, err);
        return -1;
    }
    if (dup) {
        writer_stats(w)->dedup_hits++;
    } else {
        writer_stats(w)->sends++;
    }
    if (r->dedup_reply) { /* [id, duplicate] (docs/protocol.md) */
        resp_add_array(&j->reply, 2);
        cmd_add_id(&j->reply, id);
        resp_add_int(&j->reply, dup);
        return 0;
    }
    cmd_add_id(&j->reply, id);
    return 0;
}

static job_result_t send_exec(job_t *j, writer_t *w)
{
    char err[300];
    cmd_send_run(j, w, writer_now(w), err, sizeof err);
    return JOB_DONE;
}

int cmd_send_check(job_t *j, writer_t *w, store_send_check_t *c, uint64_t now, char *err, size_t errlen)
{
    const send_req_t *r = &((send_job_t *)j)->req;
    store_send_req_t msg;
    if (send_msg_at(r, now, &msg, err, errlen) != 0) {
        return -1;
    }
    return store_send_check(writer_store(w), c, &msg, r->dedup, err, errlen);
}

resp_arg_t cmd_send_topic(const job_t *j)
{
    const send_req_t *r = &((const send_job_t *)j)->req;
    return (resp_arg_t){ .ptr = r->msg.topic, .len = r->msg.topic_len };
}

const store_send_req_t *cmd_send_req(const job_t *j)
{
    return &((const send_job_t *)j)->req.msg;
}

void cmd_send(cmd_call_t *call)
{
    const config_t *cfg = cmd_config_of(call);
    const resp_arg_t *argv = call->argv;
    int seen_key = 0, seen_when = 0, dedup = 0;
    int level = 0, has_at = 0;
    uint64_t delay = 0, at = 0;
    const resp_arg_t *key = NULL;
    for (size_t i = 3; i < call->argc; i += 2) {
        const resp_arg_t *o = &argv[i];
        if (cmd_arg_is(o, "dedup")) { /* no value */
            if (cmd_once(call, &dedup, "DEDUP") != 0) {
                return;
            }
            i--;
            continue;
        }
        int is_key = cmd_arg_is(o, "key"), is_level = cmd_arg_is(o, "level"), is_delay = cmd_arg_is(o, "delay"),
            is_at = cmd_arg_is(o, "at");
        if (!(is_key || is_level || is_delay || is_at)) {
            cmd_unknown_option(call, o, "send");
            return;
        }
        const resp_arg_t *v = cmd_opt_value(call, argv, call->argc, i);
        if (v == NULL) {
            return;
        }
        if (is_key) {
            if (cmd_once(call, &seen_key, "KEY") != 0) {
                return;
            }
            if (v->len == 0) { /* FIND, REVOKE and DEDUP could never name it */
                resp_add_error(call->out, "ERR key is empty (omit KEY for a message without one)");
                return;
            }
            key = v;
            continue;
        }
        if (seen_when) {
            resp_add_error(call->out, "ERR syntax error: only one of LEVEL, DELAY and AT may be given");
            return;
        }
        seen_when = 1;
        if (is_level) {
            uint64_t n;
            if (cmd_parse_u64(v, &n) != 0 || n > INT_MAX) {
                char b[40];
                resp_add_errorf(call->out, "ERR LEVEL must be 0..%d (levels are 1..%d; 0: no delay), got %s",
                                cfg->store.levels.count, cfg->store.levels.count, cmd_shown(v, b, sizeof b));
                return;
            }
            level = (int)n;
        } else if (is_delay) {
            if (cmd_parse_duration(call, "DELAY", v, &delay) != 0) {
                return;
            }
        } else {
            if (cmd_parse_u64(v, &at) != 0) {
                char b[40];
                resp_add_errorf(call->out, "ERR AT must be a unix time in milliseconds, got '%s'",
                                cmd_shown(v, b, sizeof b));
                return;
            }
            has_at = 1;
        }
    }
    /* The one check of a SEND (the store's, against the store's options). */
    store_send_req_t msg = {
        .topic = argv[1].ptr,
        .topic_len = argv[1].len,
        .key = key ? key->ptr : NULL,
        .key_len = key ? key->len : 0,
        .payload = argv[2].ptr,
        .payload_len = argv[2].len,
        .level = level,
        .delay_ms = delay,
    };
    char err[300];
    if (has_at) {
        uint64_t now = clock_wall_ms();
        if (at_check(at, now, cfg->store.max_delay_ms, err, sizeof err) != 0) {
            resp_add_errorf(call->out, "ERR %s", err);
            return;
        }
        msg.delay_ms = at > now ? at - now : 0;
    }
    if (store_send_validate(&cfg->store, &msg, err, sizeof err) != 0) {
        resp_add_errorf(call->out, "ERR %s", err);
        return;
    }
    if (dedup && msg.key_len == 0) {
        resp_add_error(call->out, "ERR DEDUP needs a non-empty KEY (it deduplicates by topic and key)");
        return;
    }
    char *arena;
    send_job_t *sj = cmd_job_new(sizeof *sj, cmd_copy_size(&argv[1]) + cmd_copy_size(&argv[2]) + cmd_copy_size(key),
                                 send_exec, &arena);
    resp_arg_t topic = cmd_job_copy(&arena, &argv[1]);
    resp_arg_t payload = cmd_job_copy(&arena, &argv[2]);
    resp_arg_t k = cmd_job_copy(&arena, key);
    msg.topic = topic.ptr;
    msg.payload = payload.ptr;
    msg.key = key ? k.ptr : NULL;
    msg.delay_ms = delay;
    sj->req.msg = msg;
    sj->req.has_at = has_at;
    /* dedup-topics: a keyed SEND to such a topic deduplicates even without DEDUP */
    sj->req.dedup = dedup || (msg.key_len > 0 && config_dedup_topic(cfg, msg.topic, msg.topic_len));
    sj->req.dedup_reply = dedup;
    sj->req.at_ms = at;
    sj->req.max_delay_ms = cfg->store.max_delay_ms;
    call->job = &sj->job;
}

/* ---- PULL ------------------------------------------------------------------------ */

static job_result_t pull_exec(job_t *j, writer_t *w)
{
    const pull_req_t *r = &((pull_job_t *)j)->req;
    store_t *s = writer_store(w);
    uint64_t now = writer_now(w);
    msg_owned_t *msgs = xmalloc((size_t)r->count * sizeof *msgs);
    int n = 0;
    char err[300];
    uint64_t max_bytes = j->reply_cap ? j->reply_cap : store_options(s)->max_lease_bytes; /* woken: writer.h */
    int existed = store_group_exists(s, r->group.ptr, r->group.len);
    int rc = store_lease_within(s, r->group.ptr, r->group.len, r->topic.ptr, r->topic.len, r->count, max_bytes,
                                r->lease_ms, now, msgs, &n, err, sizeof err);
    if (!existed && store_group_exists(s, r->group.ptr, r->group.len)) { /* the store created it: audited */
        cmd_audit_group_created(j->conn_id, r->addr.ptr, r->user.ptr, "PULL", &r->group, &r->topic);
    }
    if (rc != 0) {
        free(msgs);
        cmd_reply_store_error(j, err);
        return JOB_DONE;
    }
    if (n == 0 && j->block_set) {
        free(msgs);
        return JOB_PARK;
    }
    storage_stats_t *st = writer_stats(w);
    resp_add_array(&j->reply, (size_t)n);
    for (int i = 0; i < n; i++) {
        const msg_t *m = &msgs[i].m;
        resp_add_array(&j->reply, 6);
        cmd_add_id(&j->reply, m->id);
        resp_add_bulk(&j->reply, m->topic.ptr, m->topic.len);
        resp_add_bulk(&j->reply, m->key.ptr, m->key.len);
        resp_add_bulk(&j->reply, m->payload.ptr, m->payload.len);
        resp_add_int(&j->reply, (long long)m->reconsume);
        resp_add_int(&j->reply, (long long)m->due_ms);
        job_shows(j, m->id);
        prom_hist_add(&st->lateness, now > m->due_ms ? (double)(now - m->due_ms) / 1000.0 : 0.0);
        msg_owned_free(&msgs[i]);
    }
    st->deliveries += (uint64_t)n;
    free(msgs);
    return JOB_DONE;
}

/* Parked PULL: worth trying again when its group has something ready. */
static int pull_wake(job_t *j, writer_t *w)
{
    const pull_req_t *r = &((pull_job_t *)j)->req;
    store_t *s = writer_store(w);
    store_group_info_t gi;
    if (store_group_info(s, r->group.ptr, r->group.len, &gi)) {
        return gi.ready > 0;
    }
    store_topic_info_t ti;
    return store_topic_info(s, r->topic.ptr, r->topic.len, &ti) && ti.retained > 0;
}

static void pull_expire(job_t *j, writer_t *w)
{
    (void)w;
    resp_buf_clear(&j->reply);
    resp_add_array(&j->reply, 0);
}

void cmd_pull(cmd_call_t *call)
{
    const config_t *cfg = cmd_config_of(call);
    const resp_arg_t *argv = call->argv;
    if (cmd_check_name(call, "group", &argv[1]) != 0 || cmd_check_name(call, "topic", &argv[2]) != 0) {
        return;
    }
    int count = 1, seen_count = 0, seen_block = 0, seen_lease = 0;
    uint64_t block = 0, lease = (uint64_t)cfg->lease_ms;
    for (size_t i = 3; i < call->argc; i += 2) {
        const resp_arg_t *o = &argv[i];
        if (cmd_arg_is(o, "count")) {
            const resp_arg_t *v = cmd_opt_value(call, argv, call->argc, i);
            if (!v || cmd_once(call, &seen_count, "COUNT") != 0 || cmd_parse_count(call, v, &count) != 0) {
                return;
            }
        } else if (cmd_arg_is(o, "block")) {
            const resp_arg_t *v = cmd_opt_value(call, argv, call->argc, i);
            if (!v || cmd_once(call, &seen_block, "BLOCK") != 0) {
                return;
            }
            if (cmd_parse_duration(call, "BLOCK", v, &block) != 0) { /* at most the grammar's 100 years */
                return;
            }
        } else if (cmd_arg_is(o, "lease")) {
            const resp_arg_t *v = cmd_opt_value(call, argv, call->argc, i);
            if (!v || cmd_once(call, &seen_lease, "LEASE") != 0 || cmd_parse_lease(call, v, &lease) != 0) {
                return;
            }
        } else {
            cmd_unknown_option(call, o, "pull");
            return;
        }
    }
    const char *user = conn_user_shown(call->conn);
    const resp_arg_t addr = { call->conn->addr, strlen(call->conn->addr) }, who = { user, strlen(user) };
    char *arena;
    pull_job_t *pj = cmd_job_new(
        sizeof *pj, cmd_copy_size(&argv[1]) + cmd_copy_size(&argv[2]) + cmd_copy_size(&addr) + cmd_copy_size(&who),
        pull_exec, &arena);
    pj->req.group = cmd_job_copy(&arena, &argv[1]);
    pj->req.topic = cmd_job_copy(&arena, &argv[2]);
    pj->req.addr = cmd_job_copy(&arena, &addr);
    pj->req.user = cmd_job_copy(&arena, &who);
    pj->req.count = count;
    pj->req.lease_ms = lease;
    pj->job.reply_estimate = cmd_listing_estimate(cmd_config_of(call), count);
    if (seen_block) {
        pj->job.block_set = 1;
        pj->job.block_ms = block;
        pj->job.wake = pull_wake;
        pj->job.wake_topic = pj->req.topic.ptr; /* a PULL can only get messages of its topic */
        pj->job.wake_topic_len = pj->req.topic.len;
        pj->job.expire = pull_expire;
    }
    call->job = &pj->job;
}

/* ---- ACK NACK TOUCH ------------------------------------------------------------------- */

static job_result_t ack_exec(job_t *j, writer_t *w)
{
    const ack_req_t *r = &((ack_job_t *)j)->req;
    int released = 0;
    char err[300];
    if (store_ack(writer_store(w), r->group.ptr, r->group.len, r->ids, r->nids, &released, err, sizeof err) != 0) {
        cmd_reply_store_error(j, err);
        return JOB_DONE;
    }
    writer_stats(w)->acks += (uint64_t)released;
    resp_add_int(&j->reply, released);
    return JOB_DONE;
}

void cmd_ack(cmd_call_t *call)
{
    if (cmd_check_name(call, "group", &call->argv[1]) != 0) {
        return;
    }
    size_t nids = call->argc - 2;
    char *arena;
    ack_job_t *aj = cmd_job_new(sizeof *aj, nids * sizeof(uint64_t) + cmd_copy_size(&call->argv[1]), ack_exec, &arena);
    aj->req.ids = (uint64_t *)(void *)arena; /* the arena is 16-byte aligned */
    arena += nids * sizeof(uint64_t);
    for (size_t i = 0; i < nids; i++) {
        if (cmd_parse_id(call, &call->argv[2 + i], &aj->req.ids[i]) != 0) {
            job_free(&aj->job);
            return;
        }
    }
    aj->req.nids = (int)nids;
    aj->req.group = cmd_job_copy(&arena, &call->argv[1]);
    call->job = &aj->job;
}

static job_result_t nack_exec(job_t *j, writer_t *w)
{
    const nack_req_t *r = &((nack_job_t *)j)->req;
    int found = 0;
    uint64_t next_due = 0;
    sched_stats_t st = { 0 };
    char err[300];
    if (sched_nack(writer_sched(w), r->group.ptr, r->group.len, r->id, &r->how, &found, &next_due, &st, err,
                   sizeof err) != 0) {
        cmd_reply_store_error(j, err);
        return JOB_DONE;
    }
    storage_stats_t *ss = writer_stats(w);
    if (found) {
        ss->nacks++;
    }
    ss->retries += st.retried;
    ss->dlq_moves += st.dead;
    resp_add_int(&j->reply, found ? (long long)next_due : -1);
    return JOB_DONE;
}

void cmd_nack(cmd_call_t *call)
{
    const resp_arg_t *argv = call->argv;
    if (cmd_check_name(call, "group", &argv[1]) != 0) {
        return;
    }
    uint64_t id;
    if (cmd_parse_id(call, &argv[2], &id) != 0) {
        return;
    }
    int seen_when = 0, seen_reason = 0, level = -1, to_dlq = 0;
    uint64_t delay = 0;
    const resp_arg_t *reason = NULL;
    for (size_t i = 3; i < call->argc; i += 2) {
        const resp_arg_t *o = &argv[i];
        int is_level = cmd_arg_is(o, "level"), is_delay = cmd_arg_is(o, "delay"), is_reason = cmd_arg_is(o, "reason");
        if (cmd_arg_is(o, "dlq")) { /* a permanent failure: straight to the DLQ (no value) */
            if (to_dlq) {
                resp_add_error(call->out, "ERR syntax error: DLQ given twice");
                return;
            }
            if (seen_when) {
                resp_add_error(call->out, "ERR syntax error: only one of LEVEL, DELAY and DLQ may be given");
                return;
            }
            seen_when = 1;
            to_dlq = 1;
            i--; /* the loop steps by two; DLQ takes no value */
            continue;
        }
        if (!(is_level || is_delay || is_reason)) {
            cmd_unknown_option(call, o, "nack");
            return;
        }
        const resp_arg_t *v = cmd_opt_value(call, argv, call->argc, i);
        if (v == NULL) {
            return;
        }
        if (is_reason) {
            if (cmd_once(call, &seen_reason, "REASON") != 0) {
                return;
            }
            if (v->len > MSG_MAX_REASON) {
                resp_add_errorf(call->out, "ERR REASON is %zu bytes, longer than the limit of %d", v->len,
                                MSG_MAX_REASON);
                return;
            }
            reason = v;
            continue;
        }
        if (seen_when) {
            resp_add_error(call->out, "ERR syntax error: only one of LEVEL, DELAY and DLQ may be given");
            return;
        }
        seen_when = 1;
        if (is_level) {
            if (parse_level(call, v, 1, &level) != 0) {
                return;
            }
        } else {
            if (cmd_parse_duration(call, "DELAY", v, &delay) != 0) {
                return;
            }
            if (delay > cmd_config_of(call)->store.max_delay_ms) {
                char a[UNITS_TEXT_MAX], m[UNITS_TEXT_MAX];
                units_format_duration(delay, a, sizeof a);
                units_format_duration(cmd_config_of(call)->store.max_delay_ms, m, sizeof m);
                resp_add_errorf(call->out, "ERR delay %s exceeds max-delay %s", a, m);
                return;
            }
            if (delay == 0) {
                resp_add_error(call->out, "ERR NACK DELAY must be greater than 0");
                return;
            }
        }
    }
    char *arena;
    nack_job_t *nj = cmd_job_new(sizeof *nj, cmd_copy_size(&argv[1]) + cmd_copy_size(reason), nack_exec, &arena);
    nj->req.group = cmd_job_copy(&arena, &argv[1]);
    nj->req.id = id;
    resp_arg_t why = cmd_job_copy(&arena, reason);
    nj->req.how.to_dlq = to_dlq;
    nj->req.how.level = level > 0 ? level : 0;
    nj->req.how.delay_ms = delay;
    nj->req.how.reason = reason ? why.ptr : NULL;
    nj->req.how.reason_len = why.len;
    call->job = &nj->job;
}

static job_result_t touch_exec(job_t *j, writer_t *w)
{
    const touch_req_t *r = &((touch_job_t *)j)->req;
    uint64_t deadline = writer_now(w) + r->lease_ms;
    int found = 0;
    char err[300];
    if (store_touch(writer_store(w), r->group.ptr, r->group.len, r->id, deadline, &found, err, sizeof err) != 0) {
        cmd_reply_store_error(j, err);
        return JOB_DONE;
    }
    if (found) {
        writer_stats(w)->touches++;
    }
    resp_add_int(&j->reply, found ? (long long)deadline : 0);
    return JOB_DONE;
}

void cmd_touch(cmd_call_t *call)
{
    const config_t *cfg = cmd_config_of(call);
    const resp_arg_t *argv = call->argv;
    if (cmd_check_name(call, "group", &argv[1]) != 0) {
        return;
    }
    uint64_t id, lease = (uint64_t)cfg->lease_ms;
    if (cmd_parse_id(call, &argv[2], &id) != 0) {
        return;
    }
    int seen_lease = 0;
    for (size_t i = 3; i < call->argc; i += 2) {
        if (!cmd_arg_is(&argv[i], "lease")) {
            cmd_unknown_option(call, &argv[i], "touch");
            return;
        }
        const resp_arg_t *v = cmd_opt_value(call, argv, call->argc, i);
        if (!v || cmd_once(call, &seen_lease, "LEASE") != 0 || cmd_parse_lease(call, v, &lease) != 0) {
            return;
        }
    }
    char *arena;
    touch_job_t *tj = cmd_job_new(sizeof *tj, cmd_copy_size(&argv[1]), touch_exec, &arena);
    tj->req.group = cmd_job_copy(&arena, &argv[1]);
    tj->req.id = id;
    tj->req.lease_ms = lease;
    call->job = &tj->job;
}
