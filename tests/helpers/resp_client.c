/*
 * tests/helpers/resp_client.c — a small blocking RESP client (contract in resp_client.h).
 *
 * Design: the socket is non-blocking and every wait is a poll() against a
 * monotonic deadline, so no call can hang a test past its timeout. A connect
 * to 127.0.0.1 goes through tests/helpers/loopback_dial.h (a stalled SYN
 * tried again from a new port within the timeout); any other connect, the
 * waits, the reads into c->in and the taking of whole replies out of it are
 * libhourglass's own (lib/wire.h, compiled in here), so the
 * tests read replies exactly as the library does; what is this helper's
 * alone is what raw protocol tests need and the library never does: queue
 * unframed bytes (rc_append_raw), flush on demand, read one reply at a time
 * with its own timeout, wait for the server to hang up, read to EOF.
 * Output is framed into c->out by resp_add_command and written by rc_flush.
 *
 * Threading: an rc_conn_t belongs to one thread.
 */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include "tests/helpers/resp_client.h"
#include "tests/helpers/loopback_dial.h"
#include "base/clock.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "base/err.h"
#include "lib/wire.h"

#define RC_MAX_ARGS 64 /* rc_cmd / rc_appendl: most arguments */

/* loopback_dial's prepare: replies are small and waited for (as wire_connect sets it). */
static int set_nodelay(int fd, void *arg)
{
    (void)arg;
    int one = 1;
    return setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

int rc_connect(rc_conn_t *c, const char *host, int port, int timeout_ms)
{
    memset(c, 0, sizeof *c);
    c->fd = -1;
    c->timeout_ms = timeout_ms > 0 ? timeout_ms : RC_DEFAULT_TIMEOUT_MS;
    buf_init(&c->out);
    buf_init(&c->in);

    struct sockaddr_in sa;
    memset(&sa, 0, sizeof sa);
    sa.sin_family = AF_INET;
    sa.sin_port = htons((uint16_t)port);
    if (host == NULL || strcmp(host, "localhost") == 0)
        host = "127.0.0.1";
    if (inet_pton(AF_INET, host, &sa.sin_addr) != 1) {
        err_set(c->err, sizeof c->err, "bad address '%s'", host);
        return -1;
    }
    int why = 0;
    if (sa.sin_addr.s_addr == htonl(INADDR_LOOPBACK)) {
        /* a SYN stalled on a TIME-WAIT tuple is tried again from a new port
         * (loopback_dial.h), not waited out past the timeout */
        int try_ms = c->timeout_ms < LOOPBACK_DIAL_TRY_MS ? c->timeout_ms : LOOPBACK_DIAL_TRY_MS;
        loopback_dial_t how = { .try_ms = try_ms,
                                .tries = c->timeout_ms / try_ms + 1,
                                .deadline = clock_mono_ms() + (uint64_t)c->timeout_ms,
                                .prepare = set_nodelay };
        c->fd = loopback_dial(port, &how, &why);
    } else {
        c->fd = wire_connect((const struct sockaddr *)&sa, sizeof sa, (uint32_t)c->timeout_ms, -1, &why);
    }
    if (c->fd < 0) {
        err_set(c->err, sizeof c->err, "connect %s:%d: %s", host, port, why == ETIMEDOUT ? "timed out" : strerror(why));
        return -1;
    }
    return 0;
}

void rc_close(rc_conn_t *c)
{
    if (c->fd >= 0)
        close(c->fd);
    c->fd = -1;
    buf_free(&c->out);
    buf_free(&c->in);
    c->in_off = 0;
}

void rc_append(rc_conn_t *c, int argc, const char *const *argv, const size_t *argvlen)
{
    resp_add_command(&c->out, (size_t)argc, argv, argvlen);
}

/* Collect the NULL-terminated varargs after arg0 into argv; returns argc. */
static int collect_args(const char **argv, const char *arg0, va_list ap)
{
    int argc = 0;
    for (const char *a = arg0; a != NULL && argc < RC_MAX_ARGS; a = va_arg(ap, const char *))
        argv[argc++] = a;
    return argc;
}

void rc_appendl(rc_conn_t *c, const char *arg0, ...)
{
    const char *argv[RC_MAX_ARGS];
    va_list ap;
    va_start(ap, arg0);
    int argc = collect_args(argv, arg0, ap);
    va_end(ap);
    rc_append(c, argc, argv, NULL);
}

void rc_append_raw(rc_conn_t *c, const void *p, size_t n)
{
    buf_append(&c->out, p, n);
}

/* The deadline timeout_ms from now (<= 0: the connection's default). */
static uint64_t deadline_in(const rc_conn_t *c, int timeout_ms)
{
    return wire_now_ms() + (uint64_t)(timeout_ms > 0 ? timeout_ms : c->timeout_ms);
}

int rc_flush(rc_conn_t *c, int timeout_ms)
{
    if (c->fd < 0) {
        err_set(c->err, sizeof c->err, "not connected");
        return -1;
    }
    uint64_t deadline = deadline_in(c, timeout_ms);
    size_t off = 0;
    int rc = 0;
    while (off < c->out.len) {
        ssize_t n = send(c->fd, c->out.data + off, c->out.len - off, MSG_NOSIGNAL);
        if (n > 0) {
            off += (size_t)n;
            continue;
        }
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            int w = wire_wait(c->fd, POLLOUT, deadline);
            if (w == 1)
                continue;
            if (w == 0)
                err_set(c->err, sizeof c->err, "write timed out with %zu of %zu bytes unsent", c->out.len - off,
                        c->out.len);
            else
                err_set(c->err, sizeof c->err, "poll: %s", strerror(errno));
            rc = -1;
            break;
        }
        err_set(c->err, sizeof c->err, "send: %s", n < 0 ? strerror(errno) : "wrote nothing");
        rc = -1;
        break;
    }
    buf_consume(&c->out, off);
    return rc;
}

/* Read what is available into c->in, waiting up to deadline. Returns 1 got
 * bytes, 0 timeout, -1 EOF or error (c->err set). */
static int fill(rc_conn_t *c, uint64_t deadline)
{
    for (;;) {
        ssize_t n = wire_recv(c->fd, &c->in);
        if (n > 0)
            return 1;
        if (n == 0) {
            c->eof = 1;
            err_set(c->err, sizeof c->err, "connection closed by the server");
            return -1;
        }
        if (errno == EINTR)
            continue;
        if (errno == EAGAIN || errno == EWOULDBLOCK) {
            int w = wire_wait(c->fd, POLLIN, deadline);
            if (w == 1)
                continue;
            if (w < 0)
                err_set(c->err, sizeof c->err, "poll: %s", strerror(errno));
            return w == 0 ? 0 : -1;
        }
        err_set(c->err, sizeof c->err, "recv: %s", strerror(errno));
        c->eof = 1;
        return -1;
    }
}

resp_reply_t *rc_read(rc_conn_t *c, int timeout_ms)
{
    c->timed_out = 0;
    if (c->fd < 0) {
        err_set(c->err, sizeof c->err, "not connected");
        return NULL;
    }
    uint64_t deadline = deadline_in(c, timeout_ms);
    for (;;) {
        resp_reply_t *r = NULL;
        char perr[160];
        resp_status_t st = wire_take_reply(&c->in, &c->in_off, &r, perr, sizeof perr);
        if (st == RESP_OK)
            return r;
        if (st != RESP_NEED_MORE) {
            err_set(c->err, sizeof c->err, "bad reply: %s", perr);
            return NULL;
        }
        int f = fill(c, deadline);
        if (f == 1)
            continue;
        if (f == 0) {
            c->timed_out = 1;
            err_set(c->err, sizeof c->err, "no reply within %d ms", timeout_ms > 0 ? timeout_ms : c->timeout_ms);
        }
        return NULL;
    }
}

int rc_timed_out(const rc_conn_t *c)
{
    return c->timed_out;
}

resp_reply_t *rc_cmdv(rc_conn_t *c, int argc, const char *const *argv, const size_t *argvlen)
{
    rc_append(c, argc, argv, argvlen);
    if (rc_flush(c, 0) != 0)
        return NULL;
    return rc_read(c, 0);
}

resp_reply_t *rc_cmd(rc_conn_t *c, const char *arg0, ...)
{
    const char *argv[RC_MAX_ARGS];
    va_list ap;
    va_start(ap, arg0);
    int argc = collect_args(argv, arg0, ap);
    va_end(ap);
    return rc_cmdv(c, argc, argv, NULL);
}

int rc_wait_closed(rc_conn_t *c, int timeout_ms)
{
    if (c->fd < 0 || c->eof)
        return 1;
    uint64_t deadline = wire_now_ms() + (uint64_t)(timeout_ms > 0 ? timeout_ms : 0);
    for (;;) {
        c->in.len = c->in_off = 0; /* discard */
        int f = fill(c, deadline);
        if (f < 0)
            return 1;
        if (f == 0)
            return 0;
    }
}

int rc_read_to_eof(rc_conn_t *c, int timeout_ms)
{
    if (c->fd < 0 || c->eof)
        return 1;
    uint64_t deadline = wire_now_ms() + (uint64_t)(timeout_ms > 0 ? timeout_ms : 0);
    for (;;) {
        int f = fill(c, deadline);
        if (f < 0)
            return 1;
        if (f == 0)
            return 0;
    }
}

const char *rc_input(const rc_conn_t *c)
{
    return c->in.data != NULL ? c->in.data + c->in_off : "";
}

size_t rc_pending_input(const rc_conn_t *c)
{
    return c->in.len - c->in_off;
}

/* ---- reading replies ---------------------------------------------------- */

const char *rc_describe(const resp_reply_t *r, char *buf, size_t len)
{
    if (r == NULL) {
        snprintf(buf, len, "no reply");
        return buf;
    }
    switch (r->type) {
    case RESP_REPLY_INTEGER:
    case RESP_REPLY_BOOL:
        snprintf(buf, len, "%s %lld", resp_reply_type_name(r->type), r->integer);
        break;
    case RESP_REPLY_ARRAY:
    case RESP_REPLY_MAP:
    case RESP_REPLY_SET:
    case RESP_REPLY_PUSH:
        snprintf(buf, len, "%s of %zu", resp_reply_type_name(r->type), r->count);
        break;
    case RESP_REPLY_NIL:
        snprintf(buf, len, "nil");
        break;
    default:
        snprintf(buf, len, "%s '%.*s'", resp_reply_type_name(r->type), (int)(r->len > 200 ? 200 : r->len),
                 r->str != NULL ? r->str : "");
        break;
    }
    return buf;
}

int rc_is_error(const resp_reply_t *r, const char *prefix)
{
    if (r == NULL || r->type != RESP_REPLY_ERROR)
        return 0;
    size_t pl = strlen(prefix);
    return r->len >= pl && memcmp(r->str, prefix, pl) == 0;
}

int rc_int(const resp_reply_t *r, long long *out)
{
    if (r == NULL)
        return -1;
    if (r->type == RESP_REPLY_INTEGER) {
        *out = r->integer;
        return 0;
    }
    if ((r->type == RESP_REPLY_BULK || r->type == RESP_REPLY_STATUS) && r->len > 0 && r->len < 24) {
        char *end = NULL;
        errno = 0;
        long long v = strtoll(r->str, &end, 10);
        if (errno == 0 && end == r->str + r->len) {
            *out = v;
            return 0;
        }
    }
    return -1;
}

int rc_u64(const resp_reply_t *r, uint64_t *out)
{
    if (r == NULL)
        return -1;
    if (r->type == RESP_REPLY_INTEGER) {
        if (r->integer < 0)
            return -1;
        *out = (uint64_t)r->integer;
        return 0;
    }
    if ((r->type == RESP_REPLY_BULK || r->type == RESP_REPLY_STATUS) && r->len > 0 && r->len < 24 && r->str[0] != '-') {
        char *end = NULL;
        errno = 0;
        unsigned long long v = strtoull(r->str, &end, 10);
        if (errno == 0 && end == r->str + r->len) {
            *out = v;
            return 0;
        }
    }
    return -1;
}

int rc_str_eq(const resp_reply_t *r, const char *s)
{
    if (r == NULL || (r->type != RESP_REPLY_BULK && r->type != RESP_REPLY_STATUS && r->type != RESP_REPLY_VERBATIM))
        return 0;
    size_t n = strlen(s);
    return r->len == n && memcmp(r->str, s, n) == 0;
}

/* A string element (bulk/status/verbatim) as pointer+length; -1 otherwise. */
static int str_elem(const resp_reply_t *e, const char **p, size_t *n)
{
    if (e->type == RESP_REPLY_BULK || e->type == RESP_REPLY_STATUS || e->type == RESP_REPLY_VERBATIM) {
        *p = e->str;
        *n = e->len;
        return 0;
    }
    if (e->type == RESP_REPLY_NIL) {
        *p = "";
        *n = 0;
        return 0;
    }
    return -1;
}

uint64_t rc_id_num(const char *id)
{
    size_t n = strlen(id);
    if (n == 0 || n > 16)
        return 0;
    uint64_t v = 0;
    for (size_t i = 0; i < n; i++) {
        char ch = id[i];
        int d = (ch >= '0' && ch <= '9')   ? ch - '0'
                : (ch >= 'a' && ch <= 'f') ? ch - 'a' + 10
                : (ch >= 'A' && ch <= 'F') ? ch - 'A' + 10
                                           : -1;
        if (d < 0)
            return 0;
        v = v * 16 + (uint64_t)d;
    }
    return v;
}

int rc_msg_at(const resp_reply_t *r, size_t i, rc_msg_t *m, char *err, size_t errlen)
{
    char d[300];
    memset(m, 0, sizeof *m);
    if (r == NULL || r->type != RESP_REPLY_ARRAY) {
        snprintf(err, errlen, "PULL reply is %s, not an array", rc_describe(r, d, sizeof d));
        return -1;
    }
    if (i >= r->count) {
        snprintf(err, errlen, "PULL reply has %zu messages, wanted index %zu", r->count, i);
        return -1;
    }
    const resp_reply_t *e = &r->elements[i];
    if (e->type != RESP_REPLY_ARRAY || e->count != 6) {
        snprintf(err, errlen, "message %zu is %s, not an array of 6", i, rc_describe(e, d, sizeof d));
        return -1;
    }
    const resp_reply_t *f = e->elements;
    if (f[0].type == RESP_REPLY_INTEGER) {
        snprintf(m->id, sizeof m->id, "%lld", f[0].integer);
    } else if ((f[0].type == RESP_REPLY_BULK || f[0].type == RESP_REPLY_STATUS) && f[0].len > 0 &&
               f[0].len < sizeof m->id) {
        memcpy(m->id, f[0].str, f[0].len);
        m->id[f[0].len] = '\0';
    } else {
        snprintf(err, errlen, "message %zu: id is %s", i, rc_describe(&f[0], d, sizeof d));
        return -1;
    }
    m->id_num = rc_id_num(m->id);
    if (str_elem(&f[1], &m->topic, &m->topic_len) != 0 || str_elem(&f[2], &m->key, &m->key_len) != 0 ||
        str_elem(&f[3], &m->payload, &m->payload_len) != 0) {
        snprintf(err, errlen, "message %zu: topic/key/payload are not strings", i);
        return -1;
    }
    if (rc_int(&f[4], &m->reconsume) != 0) {
        snprintf(err, errlen, "message %zu: reconsume is %s", i, rc_describe(&f[4], d, sizeof d));
        return -1;
    }
    if (rc_u64(&f[5], &m->due_ms) != 0) {
        snprintf(err, errlen, "message %zu: due_ms is %s", i, rc_describe(&f[5], d, sizeof d));
        return -1;
    }
    return 0;
}

int rc_info_field(const resp_reply_t *r, const char *key, char *buf, size_t len)
{
    if (r == NULL || r->str == NULL ||
        (r->type != RESP_REPLY_BULK && r->type != RESP_REPLY_VERBATIM && r->type != RESP_REPLY_STATUS))
        return -1;
    size_t kl = strlen(key);
    const char *p = r->str, *end = r->str + r->len;
    while (p < end) {
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        const char *le = nl != NULL ? nl : end;
        if ((size_t)(le - p) > kl && memcmp(p, key, kl) == 0 && p[kl] == ':') {
            const char *v = p + kl + 1;
            size_t vl = (size_t)(le - v);
            if (vl > 0 && v[vl - 1] == '\r')
                vl--;
            if (len > 0) {
                size_t cp = vl < len - 1 ? vl : len - 1;
                memcpy(buf, v, cp);
                buf[cp] = '\0';
            }
            return 0;
        }
        p = le + 1;
    }
    return -1;
}
