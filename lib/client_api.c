/*
 * lib/client_api.c — the calls: client_call (connect, exchange, resend),
 * and the public client API of <hourglass/hourglass.h> on top of it:
 * hg_client_open / clone / close, the stop fd and read timeout, the error
 * accessors, hg_client_command (and _notice, which also tells the caller
 * when the reply is slow), the reply accessors, and the small helpers
 * of the public header (hg_info_value, the read timeouts of long commands),
 * and hg_client_send_bound_ms: client_call's and hg_send_many's rounds
 * (client_send_bound_ms) of connecting (client_connect.c's bounds) and one
 * reply wait, or the transport's own count.
 *
 * client_call is client_ensure (client_connect.c) then client_exchange
 * (client_exchange.c), again after a broken connection when the command may
 * be resent (at most CLIENT_MAX_RESENDS times, never after a stop). Each
 * public call is a thin layer over lib/client.h: it checks its arguments,
 * clears the client's error, and reports through the client's error or the
 * caller's hg_error_t. hg_reply_t is resp_reply_t behind an opaque name.
 * Thread: one thread at a time per client, as every client call.
 */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include "lib/client.h"
#include "lib/client_internal.h"
#include "lib/tlsconn.h"
#include "lib/wire.h"

#include "base/alloc.h"

#include <stdlib.h>
#include <string.h>

#define CLIENT_MAX_RESENDS HG_SEND_MAX_RESENDS /* resends of one command per call */

/* client_call with a notice of slow replies (NULL: none; client.h's
 * client_exchange_notice). A transport (amqp://) runs the command in the
 * library and cannot time it: the notice is given before it runs. */
static hg_err_t call_notice(hg_client_t *c, size_t argc, const char *const *argv, const size_t *argvlen, int resend,
                            uint32_t extra_wait_ms, int flags, const client_notice_t *notice, resp_reply_t **reply)
{
    int resends = 0;
    hg_err_t e;

    *reply = NULL;
    if (c->tops != NULL) {
        if (notice != NULL)
            notice->fn(notice->arg);
        return c->tops->call(c, c->tstate, argc, argv, argvlen, resend, extra_wait_ms, flags, reply);
    }
    buf_clear(&c->out);
    resp_add_command(&c->out, argc, argv, argvlen);
    for (;;) {
        size_t got = 0;
        e = client_ensure(c);
        if (e != HG_OK)
            break;
        e = client_exchange_notice(c, c->out.data, c->out.len, 1, reply, &got, extra_wait_ms, flags, notice);
        if (e != HG_ERR_IO || !resend || resends >= CLIENT_MAX_RESENDS || client_woken(c->wake_fd) ||
            client_woken(c->stop_fd))
            break;
        resends++;
    }
    if (c->out.cap > WIRE_READ_CHUNK)
        buf_free(&c->out); /* do not keep a big payload's buffer */
    return e;
}

hg_err_t client_call(hg_client_t *c, size_t argc, const char *const *argv, const size_t *argvlen, int resend,
                     uint32_t extra_wait_ms, int flags, resp_reply_t **reply)
{
    return call_notice(c, argc, argv, argvlen, resend, extra_wait_ms, flags, NULL, reply);
}

hg_err_t client_call_checked(hg_client_t *c, size_t argc, const char *const *argv, const size_t *argvlen, int resend,
                             resp_reply_t **reply)
{
    hg_err_t e = client_call(c, argc, argv, argvlen, resend, 0, 0, reply);
    if (e != HG_OK || (*reply)->type != RESP_REPLY_ERROR)
        return e;
    client_fail_reply(c, *reply);
    resp_reply_free(*reply);
    *reply = NULL;
    return HG_ERR_SERVER;
}

uint64_t client_send_bound_ms(const hg_client_opts_t *o, uint64_t round_ms, uint64_t pauses_ms)
{
    uint64_t rounds = o->resend_sends ? 1u + HG_SEND_MAX_RESENDS : 1u;

    if (round_ms == HG_UNBOUNDED)
        return HG_UNBOUNDED;
    return rounds * round_ms + pauses_ms;
}

/* The public reply type is resp_reply_t itself, behind an opaque name: the
 * accessors cast, and the enum values are kept identical. */
_Static_assert((int)HG_REPLY_STATUS == (int)RESP_REPLY_STATUS && (int)HG_REPLY_ERROR == (int)RESP_REPLY_ERROR &&
                   (int)HG_REPLY_INTEGER == (int)RESP_REPLY_INTEGER && (int)HG_REPLY_STRING == (int)RESP_REPLY_BULK &&
                   (int)HG_REPLY_NIL == (int)RESP_REPLY_NIL && (int)HG_REPLY_ARRAY == (int)RESP_REPLY_ARRAY &&
                   (int)HG_REPLY_MAP == (int)RESP_REPLY_MAP && (int)HG_REPLY_SET == (int)RESP_REPLY_SET &&
                   (int)HG_REPLY_PUSH == (int)RESP_REPLY_PUSH && (int)HG_REPLY_DOUBLE == (int)RESP_REPLY_DOUBLE &&
                   (int)HG_REPLY_BOOL == (int)RESP_REPLY_BOOL && (int)HG_REPLY_BIGNUM == (int)RESP_REPLY_BIGNUM &&
                   (int)HG_REPLY_VERBATIM == (int)RESP_REPLY_VERBATIM,
               "hg_reply_type_t must mirror resp_reply_type_t");

/* ------------------------------------------------------------------------
 * Public API
 * ------------------------------------------------------------------------ */

hg_err_t hg_client_open(const char *uri, const hg_client_opts_t *opts, hg_client_t **out, hg_error_t *err)
{
    hg_client_t *c = NULL;
    hg_err_t e;

    if (out == NULL) {
        client_error_fill(err, HG_ERR_ARG, "hg_client_open: out is NULL");
        return HG_ERR_ARG;
    }
    *out = NULL;
    e = client_create(uri, opts, &c, err);
    if (e != HG_OK)
        return e;
    e = client_ensure(c);
    if (e != HG_OK) {
        client_error_fill(err, e, "%s", c->errmsg);
        hg_client_close(c);
        return e;
    }
    client_error_fill(err, HG_OK, "%s", "");
    *out = c;
    return HG_OK;
}

hg_err_t hg_client_clone(const hg_client_t *c, hg_client_t **out, hg_error_t *err)
{
    hg_client_t *n;

    if (out == NULL || c == NULL) {
        client_error_fill(err, HG_ERR_ARG, "hg_client_clone: %s is NULL", out == NULL ? "out" : "the client");
        if (out != NULL)
            *out = NULL;
        return HG_ERR_ARG;
    }
    *out = NULL;
    if (c->tops != NULL) {
        client_error_fill(err, HG_ERR_UNSUPPORTED, "hg_client_clone: not supported on %s", c->tops->scheme);
        return HG_ERR_UNSUPPORTED;
    }
    n = xcalloc(1, sizeof(*n));
    n->uri = c->uri; /* the credentials with it */
    n->opts = c->opts;
    memcpy(n->address, c->address, sizeof(n->address));
    memcpy(n->tls_name, c->tls_name, sizeof(n->tls_name));
    n->tls_ctx = c->tls_ctx != NULL ? tlsconn_ctx_ref(c->tls_ctx) : NULL;
    n->fd = -1;
    n->wake_fd = -1;
    n->stop_fd = -1;
    buf_init(&n->in);
    buf_init(&n->out);
    client_error_fill(err, HG_OK, "%s", "");
    *out = n;
    return HG_OK;
}

void hg_client_set_stop_fd(hg_client_t *c, int fd)
{
    if (c != NULL)
        c->stop_fd = fd;
}

void hg_client_close(hg_client_t *c)
{
    if (c == NULL)
        return;
    if (c->tops != NULL && c->tops->before_close != NULL)
        c->tops->before_close(c->tstate);
    client_disconnect(c);
    tlsconn_ctx_free(c->tls_ctx);
    if (c->tops != NULL)
        c->tops->destroy(c->tstate);
    buf_free(&c->in);
    buf_free(&c->out);
    memset(c->uri.password, 0, sizeof(c->uri.password));
    free(c);
}

void hg_client_set_read_timeout(hg_client_t *c, uint32_t ms)
{
    if (c != NULL)
        c->opts.read_timeout_ms = ms;
}

uint32_t hg_client_read_timeout(const hg_client_t *c)
{
    return c != NULL ? c->opts.read_timeout_ms : 0;
}

uint64_t hg_client_send_bound_ms(const hg_client_t *c)
{
    uint64_t ensure;

    if (c == NULL)
        return HG_UNBOUNDED; /* nothing to bound: never promise a figure */
    if (c->tops != NULL)
        return c->tops->send_bound_ms(c, c->tstate);
    if (c->opts.read_timeout_ms == 0)
        return HG_UNBOUNDED;
    /* client_call and hg_send_many: each round is client_ensure, then one
     * client_exchange waiting up to the read timeout */
    ensure = client_connect_bound_ms(&c->opts, client_attempt_bound_ms(c));
    if (ensure == HG_UNBOUNDED)
        return HG_UNBOUNDED;
    return client_send_bound_ms(&c->opts, ensure + c->opts.read_timeout_ms, 0);
}

uint32_t hg_dlq_all_read_timeout(uint32_t read_timeout_ms, long long entries)
{
    const uint64_t us_per_entry = 50, most_ms = 86400000;
    if (read_timeout_ms == 0 || entries <= 0)
        return read_timeout_ms;
    /* entries is below 2^63, so the product stays below 2^69 / 2^10: no overflow in the division first */
    uint64_t extra = (uint64_t)entries / 1000 * us_per_entry + (uint64_t)entries % 1000 * us_per_entry / 1000;
    uint64_t ms = read_timeout_ms + (extra < most_ms ? extra : most_ms);
    if (ms > most_ms)
        ms = read_timeout_ms > most_ms ? read_timeout_ms : most_ms; /* the cap never shortens the timeout in force */
    return (uint32_t)ms;
}

const char *hg_info_value(const char *info, size_t len, const char *key, size_t *vlen)
{
    size_t klen, ignored;

    if (info == NULL || key == NULL)
        return NULL;
    if (vlen == NULL)
        vlen = &ignored;
    klen = strlen(key);
    for (size_t i = 0; i < len;) {
        const char *line = info + i, *nl = memchr(line, '\n', len - i);
        size_t n = nl != NULL ? (size_t)(nl - line) : len - i;
        if (n > klen && memcmp(line, key, klen) == 0 && line[klen] == ':') {
            *vlen = n - klen - 1;
            if (*vlen > 0 && line[n - 1] == '\r')
                (*vlen)--;
            return line + klen + 1;
        }
        i += n + 1;
    }
    return NULL;
}

uint32_t hg_topic_purge_read_timeout(uint32_t read_timeout_ms)
{
    const uint32_t least_ms = 10u * 60 * 1000;
    return read_timeout_ms == 0 || read_timeout_ms >= least_ms ? read_timeout_ms : least_ms;
}

hg_err_t hg_client_errcode(const hg_client_t *c)
{
    return c != NULL ? c->errcode : HG_ERR_ARG;
}

const char *hg_client_errmsg(const hg_client_t *c)
{
    return c != NULL ? c->errmsg : "the client is NULL";
}

const char *hg_client_address(const hg_client_t *c)
{
    return c != NULL ? c->address : "";
}

/* hg_client_command and hg_client_command_notice: the checks of the
 * arguments (named by the call, `name`), the command, an error reply as
 * HG_ERR_SERVER. */
static hg_err_t command(const char *name, hg_client_t *c, int argc, const char *const *argv, const size_t *argvlen,
                        const client_notice_t *notice, hg_reply_t **reply)
{
    resp_reply_t *r = NULL;
    hg_err_t e;

    if (reply != NULL)
        *reply = NULL;
    if (c == NULL)
        return HG_ERR_ARG;
    client_clear_error(c);
    if (reply == NULL)
        return client_fail(c, HG_ERR_ARG, "%s: reply is NULL", name);
    if (argv == NULL)
        return client_fail(c, HG_ERR_ARG, "%s: argv is NULL", name);
    if (argc < 1)
        return client_fail(c, HG_ERR_ARG, "%s: no command (argc %d)", name, argc);
    for (int i = 0; i < argc; i++)
        if (argv[i] == NULL)
            return client_fail(c, HG_ERR_ARG, "%s: argv[%d] is NULL", name, i);
    e = call_notice(c, (size_t)argc, argv, argvlen, 0, 0, 0, notice, &r);
    if (e == HG_OK && r->type == RESP_REPLY_ERROR) {
        e = client_fail_reply(c, r);
        resp_reply_free(r);
        r = NULL;
    }
    if (e != HG_OK)
        return e;
    *reply = (hg_reply_t *)r;
    return HG_OK;
}

hg_err_t hg_client_command(hg_client_t *c, int argc, const char *const *argv, const size_t *argvlen, hg_reply_t **reply)
{
    return command("hg_client_command", c, argc, argv, argvlen, NULL, reply);
}

hg_err_t hg_client_command_notice(hg_client_t *c, int argc, const char *const *argv, const size_t *argvlen,
                                  uint32_t notice_ms, void (*notice)(void *arg), void *arg, hg_reply_t **reply)
{
    client_notice_t n = { notice_ms, notice, arg };

    if (notice == NULL) {
        if (reply != NULL)
            *reply = NULL;
        return c == NULL ? HG_ERR_ARG : client_fail(c, HG_ERR_ARG, "hg_client_command_notice: notice is NULL");
    }
    return command("hg_client_command_notice", c, argc, argv, argvlen, &n, reply);
}

/* --- reply accessors --- */

hg_reply_type_t hg_reply_type(const hg_reply_t *r)
{
    return (hg_reply_type_t)((const resp_reply_t *)r)->type;
}

const char *hg_reply_str(const hg_reply_t *r, size_t *len)
{
    const resp_reply_t *x = (const resp_reply_t *)r;
    if (x->str == NULL) {
        if (len != NULL)
            *len = 0;
        return NULL;
    }
    if (len != NULL)
        *len = x->len;
    return x->str;
}

long long hg_reply_integer(const hg_reply_t *r)
{
    const resp_reply_t *x = (const resp_reply_t *)r;
    return (x->type == RESP_REPLY_INTEGER || x->type == RESP_REPLY_BOOL) ? x->integer : 0;
}

double hg_reply_double(const hg_reply_t *r)
{
    const resp_reply_t *x = (const resp_reply_t *)r;
    return x->type == RESP_REPLY_DOUBLE ? x->dval : 0.0;
}

size_t hg_reply_count(const hg_reply_t *r)
{
    const resp_reply_t *x = (const resp_reply_t *)r;
    return x->elements != NULL ? x->count : 0;
}

const hg_reply_t *hg_reply_element(const hg_reply_t *r, size_t i)
{
    const resp_reply_t *x = (const resp_reply_t *)r;
    if (x->elements == NULL || i >= x->count)
        return NULL;
    return (const hg_reply_t *)&x->elements[i];
}

void hg_reply_free(hg_reply_t *r)
{
    resp_reply_free((resp_reply_t *)r);
}
