/*
 * broker/cmd_shared.c — the argument helpers and the job plumbing the
 * command families share (contract: cmd_shared.h).
 *
 * Error wording: "-ERR <what was wrong>", naming the argument or the limit;
 * syntax problems start with "ERR syntax error:" (docs/broker.md).
 * Loop thread, except cmd_reply_store_error / cmd_add_id (storage thread).
 */
#include "broker/cmd_shared.h"

#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "base/buf.h"
#include "base/units.h"
#include "broker/server.h"
#include "levels/msg.h"
#include "levels/store.h"

#define MAX_LEASE_MS (UINT64_C(24) * 3600 * 1000)

int cmd_arg_is(const resp_arg_t *a, const char *word)
{
    /* strncasecmp's answer in the C locale (a letter matches its other case,
     * any other byte only itself), in one pass that stops at the first byte
     * that differs: no strlen and no libc call per option word tried */
    size_t i = 0;
    for (; i < a->len; i++) {
        char want = word[i], got = a->ptr[i];
        char folded = (char)(want | 0x20);
        if (want == '\0' || (got != want && !(folded >= 'a' && folded <= 'z' && (char)(got | 0x20) == folded))) {
            return 0;
        }
    }
    return word[i] == '\0';
}

int cmd_parse_u64(const resp_arg_t *a, uint64_t *out)
{
    if (a->len == 0 || a->len > 20) {
        return -1;
    }
    uint64_t v = 0;
    for (size_t i = 0; i < a->len; i++) {
        char c = a->ptr[i];
        if (c < '0' || c > '9') {
            return -1;
        }
        if (v > (UINT64_MAX - (uint64_t)(c - '0')) / 10) {
            return -1;
        }
        v = v * 10 + (uint64_t)(c - '0');
    }
    *out = v;
    return 0;
}

int cmd_parse_duration(cmd_call_t *call, const char *what, const resp_arg_t *v, uint64_t *ms)
{
    char why[200], b[40];
    if (units_parse_duration(v->ptr, v->len, UNITS_BARE_MS, ms, why, sizeof why) != 0) {
        resp_add_errorf(call->out, "ERR %s '%s' is not a duration: %s", what, cmd_shown(v, b, sizeof b), why);
        return -1;
    }
    return 0;
}

const char *cmd_shown(const resp_arg_t *a, char *buf, size_t buflen)
{
    size_t n = a->len < buflen - 4 ? a->len : buflen - 4;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)a->ptr[i];
        buf[i] = (c >= 0x20 && c < 0x7f && c != '\'') ? (char)c : '?';
    }
    if (n < a->len) {
        memcpy(buf + n, "...", 3);
        n += 3;
    }
    buf[n] = '\0';
    return buf;
}

static void upper_name(const resp_arg_t *a, char *buf, size_t buflen)
{
    cmd_shown(a, buf, buflen);
    for (char *p = buf; *p; p++) {
        if (*p >= 'a' && *p <= 'z') {
            *p = (char)(*p - 32);
        }
    }
}

const config_t *cmd_config_of(const cmd_call_t *call)
{
    return server_config(call->srv);
}

int cmd_check_name(cmd_call_t *call, const char *what, const resp_arg_t *a)
{
    char err[200];
    if (msg_check_name(what, a->ptr, a->len, err, sizeof err) != 0) {
        resp_add_errorf(call->out, "ERR %s", err);
        return -1;
    }
    return 0;
}

int cmd_parse_id(cmd_call_t *call, const resp_arg_t *a, uint64_t *id)
{
    if (store_id_parse(a->ptr, a->len, id) != 0) {
        char b[40];
        resp_add_errorf(call->out, "ERR invalid message id '%s' (16 hex digits)", cmd_shown(a, b, sizeof b));
        return -1;
    }
    return 0;
}

const resp_arg_t *cmd_opt_value(cmd_call_t *call, const resp_arg_t *argv, size_t argc, size_t i)
{
    if (i + 1 >= argc) {
        char b[40];
        upper_name(&argv[i], b, sizeof b);
        resp_add_errorf(call->out, "ERR syntax error: %s needs a value", b);
        return NULL;
    }
    return &argv[i + 1];
}

int cmd_once(cmd_call_t *call, int *seen, const char *what)
{
    if (*seen) {
        resp_add_errorf(call->out, "ERR syntax error: %s given twice", what);
        return -1;
    }
    *seen = 1;
    return 0;
}

void cmd_unknown_option(cmd_call_t *call, const resp_arg_t *a, const char *cmd)
{
    char b[40];
    resp_add_errorf(call->out, "ERR syntax error: unknown option '%s' for '%s'", cmd_shown(a, b, sizeof b), cmd);
}

int cmd_parse_count(cmd_call_t *call, const resp_arg_t *v, int *count)
{
    const config_t *cfg = cmd_config_of(call);
    uint64_t n;
    if (cmd_parse_u64(v, &n) != 0 || n < 1 || n > (uint64_t)cfg->max_pull_count) {
        char b[40];
        resp_add_errorf(call->out, "ERR COUNT must be 1..%lld, got '%s'", cfg->max_pull_count,
                        cmd_shown(v, b, sizeof b));
        return -1;
    }
    *count = (int)n;
    return 0;
}

int cmd_parse_lease(cmd_call_t *call, const resp_arg_t *v, uint64_t *ms)
{
    if (cmd_parse_duration(call, "LEASE", v, ms) != 0) {
        return -1;
    }
    if (*ms < 1 || *ms > MAX_LEASE_MS) {
        char b[40];
        resp_add_errorf(call->out, "ERR LEASE must be 1ms..24h (milliseconds, or a duration such as 30s), got '%s'",
                        cmd_shown(v, b, sizeof b));
        return -1;
    }
    return 0;
}

void cmd_reply_store_error(job_t *j, const char *err)
{
    char steps[320];
    resp_buf_clear(&j->reply);
    resp_add_errorf(&j->reply, "ERR %s%s", err, writer_steps_suffix(j, steps, sizeof steps));
}

void cmd_reply_stopping(job_t *j)
{
    char done[256] = "";
    if (j->so_far != NULL) {
        j->so_far(j, done, sizeof done);
    }
    resp_buf_clear(&j->reply);
    resp_add_errorf(&j->reply,
                    "ERR the broker is shutting down: %s, the rest are still there (run the command again after the "
                    "restart)",
                    done[0] ? done : "nothing was done yet");
}

void cmd_add_id(resp_buf_t *b, uint64_t id)
{
    /* "$16\r\n<16 hex digits>\r\n" written in place: one reserve, and no
     * length to format (twice per message: SEND's reply and PULL's) */
    static const char header[] = "$16\r\n";
    const size_t head = sizeof header - 1, total = head + 16 + 2;
    char *w = buf_reserve(&b->raw, total);
    memcpy(w, header, head);
    store_id_format(id, w + head); /* its NUL lands where the CR goes */
    w[head + 16] = '\r';
    w[head + 17] = '\n';
    b->raw.len += total;
}

#define CMD_REPLY_RESERVE 64 /* buf_reserve's first capacity: no more is allocated until a reply outgrows it */

void *cmd_job_new(size_t head_size, size_t extra, job_result_t (*exec)(job_t *, writer_t *), char **arena)
{
    size_t head = (head_size + 15) & ~(size_t)15;
    char *mem = xmalloc(head + extra);
    memset(mem, 0, head_size);
    job_t *j = (job_t *)(void *)mem;
    resp_buf_init(&j->reply);
    /* The reply's first bytes reserved here, on the loop thread that frees
     * them after the reply is written out: a malloc from the thread's own
     * cache. Left to the storage thread, each job's reply was a malloc there
     * whose free went to the other thread, so the storage thread's cache
     * never refilled (_int_malloc and malloc_consolidate, ~5 % of its
     * samples in the flood; docs/BENCH-broker.md, s54). SEND's reply (an id)
     * and ACK's (a count) fit. */
    (void)buf_reserve(&j->reply.raw, CMD_REPLY_RESERVE);
    j->exec = exec;
    if (arena) {
        *arena = mem + head;
    }
    return mem;
}

resp_arg_t cmd_job_copy(char **arena, const resp_arg_t *a)
{
    resp_arg_t r = { "", 0 };
    if (a == NULL) {
        return r;
    }
    char *p = *arena;
    memcpy(p, a->ptr, a->len);
    p[a->len] = '\0';
    r.ptr = p;
    r.len = a->len;
    *arena = p + a->len + 1;
    return r;
}

/* Per message besides its payload: key, reason, topic and the RESP framing, roughly. */
#define LISTING_MSG_OVERHEAD 512

size_t cmd_listing_estimate(const config_t *cfg, long long count)
{
    uint64_t per = (uint64_t)cfg->max_payload + LISTING_MSG_OVERHEAD;
    uint64_t by_count = (uint64_t)(count > 0 ? count : 1) * per;
    uint64_t by_budget = (uint64_t)cfg->max_pull_bytes + per;
    return (size_t)(by_count < by_budget ? by_count : by_budget);
}
