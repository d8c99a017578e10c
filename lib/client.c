/*
 * lib/client.c — one connection to an Hourglass broker.
 *
 * A client is a URI, options and at most one TCP socket. The socket is
 * non-blocking and every wait is a poll() with a deadline, so no call can
 * hang longer than its timeouts (getaddrinfo aside: the system resolver has
 * its own timeouts).
 *
 * Life of a call:
 *   client_ensure     a live socket, or connect: getaddrinfo, then each
 *                     address with connect_timeout_ms, then AUTH when the URI
 *                     has credentials. A failed round is retried after
 *                     hg_backoff_delay(reconnect_backoff, k). A socket the
 *                     broker closed while we were idle (restart, idle
 *                     timeout) is detected before anything is written
 *                     (poll + MSG_PEEK sees EOF), so it is replaced without
 *                     any doubt about a half-sent command.
 *   client_exchange   writes the request bytes and reads replies in the same
 *                     poll loop (a big pipeline never deadlocks against the
 *                     broker's own backpressure), taking each reply out of
 *                     the input as soon as it is whole. The socket pieces
 *                     (connect with a deadline, recv, reply parsing) are
 *                     lib/wire.h's, shared with the tests' raw RESP client.
 *                     The read timeout
 *                     is an inactivity timeout: any byte of progress resets
 *                     it. Any failure closes the socket: after a timeout or a
 *                     malformed reply the stream position is unknown.
 *
 * TLS (hourglass+tls://): the context (CA, client certificate) is built
 * once at create; each connection runs the handshake right after connect,
 * within the same connect timeout, and then every byte goes through
 * lib/tlsconn.h's send / recv, which behave like the socket calls (with the
 * poll events to wait for, and bytes TLS holds decrypted that poll cannot
 * see). A certificate that fails verification ends client_ensure at once:
 * reconnecting cannot make it trusted.
 *
 * Invariant: when fd >= 0 no reply is outstanding (every exchange either read
 * all its replies or closed the socket), so the bytes in `in` beyond in_off
 * are always empty between calls.
 *
 * Errors: every public call clears the client's error first and sets it once,
 * at the point of failure, with the cause ("cannot connect to h:p: ...").
 * Threading: one thread at a time per client; no globals besides the
 * per-thread random state of backoff.c.
 */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include "lib/client.h"
#include "lib/backoff.h"
#include "lib/tlsconn.h"
#include "lib/transport.h"
#include "lib/uri.h"
#include "lib/wire.h"

#include "base/alloc.h"

#include <errno.h>
#include <netdb.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <unistd.h>

#define CLIENT_MAX_RESENDS HG_SEND_MAX_RESENDS /* resends of one command per call */

struct hg_client {
    uri_t uri;
    hg_client_opts_t opts;
    char address[URI_HOST_MAX + 16]; /* "host:port" or "[v6]:port" */
    int fd;                          /* -1 when disconnected */
    tlsconn_ctx_t *tls_ctx;          /* hourglass+tls://: the client context; else NULL */
    tlsconn_t *tls;                  /* the TLS session on fd, when tls_ctx */
    char tls_name[URI_HOST_MAX];     /* the name the broker's certificate must carry */
    int verify_failed;               /* the last connect round failed on the certificate */
    int wake_fd;                     /* -1, or readable = stop */
    int stop_all;                    /* hg_client_set_stop_fd: wake_fd cuts every wait short */
    buf_t in;                        /* bytes received */
    size_t in_off;                   /* parsed up to here */
    buf_t out;                       /* request scratch for client_call */
    unsigned connects;               /* successful connections so far */
    const transport_ops_t *tops;     /* NULL: RESP (hourglass://); else the transport */
    transport_state_t *tstate;       /* its state */
    hg_err_t errcode;
    char errmsg[HG_ERRMSG_MAX];
};

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
 * Small helpers
 * ------------------------------------------------------------------------ */

int client_sleep(int wake_fd, uint64_t ms)
{
    uint64_t deadline = wire_now_ms() + ms;

    for (;;) {
        struct pollfd p = { wake_fd, POLLIN, 0 };
        int left = wire_poll_ms(deadline), n;
        if (left == 0)
            return 0;
        n = poll(&p, wake_fd >= 0 ? 1 : 0, left);
        if (n > 0)
            return -1;
        if (n < 0 && errno != EINTR)
            return 0;
    }
}

static int woken(int wake_fd)
{
    struct pollfd p = { wake_fd, POLLIN, 0 };
    return wake_fd >= 0 && poll(&p, 1, 0) > 0;
}

hg_err_t client_fail(hg_client_t *c, hg_err_t code, const char *fmt, ...)
{
    va_list ap;

    c->errcode = code;
    va_start(ap, fmt);
    vsnprintf(c->errmsg, sizeof(c->errmsg), fmt, ap);
    va_end(ap);
    return code;
}

void client_clear_error(hg_client_t *c)
{
    c->errcode = HG_OK;
    c->errmsg[0] = '\0';
}

hg_err_t client_fail_reply(hg_client_t *c, const resp_reply_t *r)
{
    return client_fail(c, HG_ERR_SERVER, "%.*s", (int)(r->len > 250 ? 250 : r->len), r->str != NULL ? r->str : "");
}

void client_error_fill(hg_error_t *err, hg_err_t code, const char *fmt, ...)
{
    va_list ap;

    if (err == NULL)
        return;
    err->code = code;
    va_start(ap, fmt);
    vsnprintf(err->message, sizeof(err->message), fmt, ap);
    va_end(ap);
}

const char *hg_strerror(hg_err_t code)
{
    switch (code) {
    case HG_OK:
        return "success";
    case HG_ERR_ARG:
        return "invalid argument";
    case HG_ERR_URI:
        return "bad URI";
    case HG_ERR_UNSUPPORTED:
        return "not supported";
    case HG_ERR_CONNECT:
        return "cannot connect";
    case HG_ERR_IO:
        return "connection lost";
    case HG_ERR_TIMEOUT:
        return "timed out";
    case HG_ERR_PROTOCOL:
        return "protocol error";
    case HG_ERR_SERVER:
        return "broker error";
    case HG_ERR_AUTH:
        return "authentication failed";
    case HG_ERR_STOPPED:
        return "stopped";
    case HG_ERR_SYSTEM:
        return "system error";
    }
    return "unknown error";
}

/* ------------------------------------------------------------------------
 * Options, creation
 * ------------------------------------------------------------------------ */

void hg_client_opts_init(hg_client_opts_t *opts)
{
    memset(opts, 0, sizeof(*opts));
    opts->connect_timeout_ms = 5000;
    opts->read_timeout_ms = 10000;
    opts->reconnect = 1;
    opts->reconnect_backoff.base_ms = 100;
    opts->reconnect_backoff.factor = 2.0;
    opts->reconnect_backoff.cap_ms = 5000;
    opts->reconnect_backoff.attempts = 5;
    opts->reconnect_backoff.jitter = 0.2;
    opts->resend_sends = 1;
}

/* Check the client options (as client_create). Returns 0, or -1 with err. */
static int check_client_opts(const hg_client_opts_t *opts, hg_error_t *err)
{
    char why[HG_ERRMSG_MAX - 32];

    if (opts == NULL)
        return 0;
    if (opts->connect_timeout_ms == 0) {
        client_error_fill(err, HG_ERR_ARG, "connect_timeout_ms must be greater than 0");
        return -1;
    }
    if (backoff_check(&opts->reconnect_backoff, "reconnect_backoff", why, sizeof(why)) < 0) {
        client_error_fill(err, HG_ERR_ARG, "%s", why);
        return -1;
    }
    return 0;
}

const transport_ops_t *transport_for_uri(const char *uri)
{
    if (strncasecmp(uri, "amqp://", 7) == 0 || strncasecmp(uri, "amqps://", 8) == 0)
        return &rmq_transport_ops;
    return NULL;
}

/* client_create for a URI of another transport (transport.h). */
static hg_err_t create_transport(const char *uri, const hg_client_opts_t *opts, hg_client_t **out, hg_error_t *err)
{
    hg_client_t *c;
    hg_err_t e;

    if (check_client_opts(opts, err) < 0)
        return HG_ERR_ARG;
    c = xcalloc(1, sizeof(*c));
    if (opts != NULL)
        c->opts = *opts;
    else
        hg_client_opts_init(&c->opts);
    c->fd = -1;
    c->wake_fd = -1;
    buf_init(&c->in);
    buf_init(&c->out);
    c->tops = transport_for_uri(uri);
    e = c->tops->create(c, uri, &c->tstate, c->address, sizeof(c->address), err);
    if (e != HG_OK) {
        free(c);
        return e;
    }
    *out = c;
    return HG_OK;
}

const transport_ops_t *client_transport(const hg_client_t *c)
{
    return c->tops;
}

transport_state_t *client_transport_state(const hg_client_t *c)
{
    return c->tstate;
}

void client_note_connect(hg_client_t *c)
{
    c->connects++;
}

int client_wake_fd(const hg_client_t *c)
{
    return c->wake_fd;
}

hg_err_t client_create(const char *uri, const hg_client_opts_t *opts, hg_client_t **out, hg_error_t *err)
{
    char why[HG_ERRMSG_MAX - 32];
    hg_client_t *c;
    uri_t u;

    *out = NULL;
    if (uri != NULL && transport_for_uri(uri) != NULL)
        return create_transport(uri, opts, out, err);
    if (uri_parse(uri, HG_DEFAULT_PORT, &u, why, sizeof(why)) < 0) {
        client_error_fill(err, HG_ERR_URI, "bad URI: %s", why);
        return HG_ERR_URI;
    }
    if (check_client_opts(opts, err) < 0)
        return HG_ERR_ARG;

    if (opts != NULL && (opts->user != NULL || opts->password != NULL)) {
        const char *user = opts->user != NULL ? opts->user : (u.has_auth ? u.user : "default");
        const char *pass = opts->password != NULL ? opts->password : (u.has_auth ? u.password : NULL);
        if (pass == NULL || user[0] == '\0') {
            memset(&u, 0, sizeof(u));
            client_error_fill(err, HG_ERR_ARG, "%s",
                              pass == NULL ? "user is set but no password (opts.password or "
                                             "the URI's user:pass@)"
                                           : "user is empty");
            return HG_ERR_ARG;
        }
        if (strlen(user) >= sizeof(u.user) || strlen(pass) >= sizeof(u.password)) {
            memset(&u, 0, sizeof(u));
            client_error_fill(err, HG_ERR_ARG, "user or password longer than %zu bytes", sizeof(u.user) - 1);
            return HG_ERR_ARG;
        }
        char user_copy[sizeof(u.user)], pass_copy[sizeof(u.password)];
        snprintf(user_copy, sizeof(user_copy), "%s", user); /* user and pass may point into u */
        snprintf(pass_copy, sizeof(pass_copy), "%s", pass);
        memcpy(u.user, user_copy, sizeof(u.user));
        memcpy(u.password, pass_copy, sizeof(u.password));
        memset(pass_copy, 0, sizeof(pass_copy));
        u.has_auth = 1;
    }
    c = xcalloc(1, sizeof(*c));
    c->uri = u;
    if (opts != NULL)
        c->opts = *opts;
    else
        hg_client_opts_init(&c->opts);
    if (u.tls) {
        const char *ca = u.tls_ca[0] ? u.tls_ca : c->opts.tls_ca_file;
        const char *cert = u.tls_cert[0] ? u.tls_cert : c->opts.tls_cert_file;
        const char *key = u.tls_key[0] ? u.tls_key : c->opts.tls_key_file;
        const char *name = u.tls_sni[0] ? u.tls_sni : c->opts.tls_server_name ? c->opts.tls_server_name : u.host;
        if (tlsconn_ctx_new(ca, cert, key, &c->tls_ctx, why, sizeof(why)) < 0) {
            client_error_fill(err, HG_ERR_ARG, "%s", why);
            memset(&c->uri.password, 0, sizeof(c->uri.password));
            memset(&u, 0, sizeof(u));
            free(c);
            return HG_ERR_ARG;
        }
        snprintf(c->tls_name, sizeof(c->tls_name), "%s", name);
    }
    c->opts.user = NULL; /* copied into c->uri: never keep the caller's pointers */
    c->opts.password = NULL;
    if (strchr(u.host, ':') != NULL)
        snprintf(c->address, sizeof(c->address), "[%s]:%d", u.host, u.port);
    else
        snprintf(c->address, sizeof(c->address), "%s:%d", u.host, u.port);
    c->fd = -1;
    c->wake_fd = -1;
    buf_init(&c->in);
    buf_init(&c->out);
    memset(&u, 0, sizeof(u)); /* do not leave the password on the stack */
    *out = c;
    return HG_OK;
}

void client_set_wake_fd(hg_client_t *c, int fd)
{
    c->wake_fd = fd;
}

const hg_client_opts_t *client_opts(const hg_client_t *c)
{
    return &c->opts;
}

unsigned client_connect_count(const hg_client_t *c)
{
    return c->connects;
}

void client_disconnect(hg_client_t *c)
{
    tlsconn_close(c->tls);
    c->tls = NULL;
    if (c->tops != NULL)
        c->tops->disconnect(c->tstate);
    if (c->fd >= 0)
        close(c->fd);
    c->fd = -1;
    buf_clear(&c->in);
    c->in_off = 0;
}

/* ------------------------------------------------------------------------
 * Connecting
 * ------------------------------------------------------------------------ */

/* One connection round: resolve, try each address, AUTH. Returns HG_OK or
 * HG_ERR_CONNECT / HG_ERR_AUTH with the error set. */
static hg_err_t connect_round(hg_client_t *c)
{
    struct addrinfo hints, *res = NULL;
    char port[8];
    int rc, why = 0;

    memset(&hints, 0, sizeof(hints));
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    /* No AI_ADDRCONFIG: with only a loopback interface (a container, a CI
     * namespace) glibc would then refuse even "localhost". */
    snprintf(port, sizeof(port), "%d", c->uri.port);
    rc = getaddrinfo(c->uri.host, port, &hints, &res);
    if (rc != 0)
        return client_fail(c, HG_ERR_CONNECT, "cannot resolve host '%s': %s", c->uri.host,
                           rc == EAI_SYSTEM ? strerror(errno) : gai_strerror(rc));
    for (struct addrinfo *ai = res; ai != NULL; ai = ai->ai_next) {
        c->fd = wire_connect(ai->ai_addr, ai->ai_addrlen, c->opts.connect_timeout_ms, &why);
        if (c->fd >= 0)
            break;
    }
    freeaddrinfo(res);
    if (c->fd < 0)
        return client_fail(c, HG_ERR_CONNECT, "cannot connect to %s: %s", c->address,
                           why == ETIMEDOUT ? "connection timed out" : strerror(why));
    buf_clear(&c->in);
    c->in_off = 0;
    c->verify_failed = 0;
    if (c->tls_ctx != NULL) {
        char msg[HG_ERRMSG_MAX - 64];
        if (tlsconn_open(c->tls_ctx, c->fd, c->tls_name, wire_now_ms() + c->opts.connect_timeout_ms, &c->tls,
                         &c->verify_failed, msg, sizeof(msg)) < 0) {
            client_disconnect(c);
            return client_fail(c, HG_ERR_CONNECT, "cannot connect to %s: %s", c->address, msg);
        }
    }

    if (c->uri.has_auth) {
        const char *argv[3] = { "AUTH", c->uri.user, c->uri.password };
        buf_t req = BUF_INIT; /* not c->out: it may hold the caller's request */
        resp_reply_t *reply = NULL;
        size_t got = 0;
        hg_err_t e;

        resp_add_command(&req, 3, argv, NULL);
        e = client_exchange(c, req.data, req.len, 1, &reply, &got, 0, 0);
        memset(req.data, 0, req.len); /* the password */
        buf_free(&req);
        if (e == HG_ERR_STOPPED)
            return client_fail(c, HG_ERR_STOPPED, "stopped during AUTH with %s", c->address);
        if (e != HG_OK)
            return client_fail(c, HG_ERR_CONNECT, "cannot connect to %s: during AUTH: %s", c->address, c->errmsg);
        if (reply->type == RESP_REPLY_ERROR) {
            client_fail(c, HG_ERR_AUTH, "authentication as '%s' failed: %.*s", c->uri.user,
                        (int)(reply->len > 200 ? 200 : reply->len), reply->str);
            resp_reply_free(reply);
            client_disconnect(c);
            return HG_ERR_AUTH;
        }
        resp_reply_free(reply);
    }
    c->connects++;
    return HG_OK;
}

/* 1 when the idle socket is still usable: no EOF or error pending. */
static int socket_alive(hg_client_t *c)
{
    struct pollfd p = { c->fd, POLLIN, 0 };
    char byte;
    ssize_t n;

    if (c->tls != NULL)
        return tlsconn_alive(c->tls);
    if (poll(&p, 1, 0) <= 0)
        return 1; /* nothing pending: alive */
    if (p.revents & (POLLERR | POLLNVAL))
        return 0;
    n = recv(c->fd, &byte, 1, MSG_PEEK | MSG_DONTWAIT);
    if (n == 0)
        return 0; /* EOF: the broker closed it */
    if (n < 0)
        return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR;
    return 1; /* unsolicited bytes (a RESP3 push): read with the next reply */
}

hg_err_t client_ensure(hg_client_t *c)
{
    const hg_backoff_t *b = &c->opts.reconnect_backoff;
    unsigned attempt = 0;
    hg_err_t e;

    if (c->tops != NULL)
        return c->tops->ensure(c, c->tstate);
    if (c->fd >= 0) {
        if (socket_alive(c))
            return HG_OK;
        client_disconnect(c);
    }
    for (;;) {
        if (c->stop_all && woken(c->wake_fd))
            return client_fail(c, HG_ERR_STOPPED, "stopped before connecting to %s", c->address);
        e = connect_round(c);
        if (e == HG_OK || e == HG_ERR_AUTH || e == HG_ERR_STOPPED || c->verify_failed)
            return e;
        if (!c->opts.reconnect || (b->attempts > 0 && attempt >= (unsigned)b->attempts)) {
            if (attempt > 0) {
                size_t len = strlen(c->errmsg);
                snprintf(c->errmsg + len, sizeof(c->errmsg) - len, " (after %u attempts)", attempt + 1);
            }
            return e;
        }
        if (client_sleep(c->wake_fd, hg_backoff_delay(b, attempt, NULL, NULL)) < 0)
            return client_fail(c, HG_ERR_STOPPED, "stopped while reconnecting to %s", c->address);
        attempt++;
    }
}

/* ------------------------------------------------------------------------
 * The exchange: write while reading
 * ------------------------------------------------------------------------ */

/* Take as many whole replies as `in` holds into replies[*got..nreplies)
 * (RESP3 pushes are out-of-band data, not replies: dropped). Returns HG_OK
 * (maybe with fewer than wanted), or HG_ERR_PROTOCOL. */
static hg_err_t parse_replies(hg_client_t *c, size_t nreplies, resp_reply_t **replies, size_t *got)
{
    char why[160];

    while (*got < nreplies) {
        resp_reply_t *r = NULL;
        resp_status_t st = wire_take_reply(&c->in, &c->in_off, &r, why, sizeof(why));
        if (st == RESP_NEED_MORE)
            break;
        if (st != RESP_OK)
            return client_fail(c, HG_ERR_PROTOCOL, "bad reply from %s: %s", c->address, why);
        if (r->type == RESP_REPLY_PUSH) {
            resp_reply_free(r);
            continue;
        }
        replies[(*got)++] = r;
    }
    return HG_OK;
}

/* send(2) / recv(2) on the connection, through TLS when it has it. */
static ssize_t conn_send(hg_client_t *c, const char *data, size_t len)
{
    if (c->tls != NULL)
        return tlsconn_send(c->tls, data, len);
    return send(c->fd, data, len, MSG_NOSIGNAL);
}

static ssize_t conn_recv(hg_client_t *c)
{
    if (c->tls != NULL)
        return tlsconn_recv(c->tls, &c->in);
    return wire_recv(c->fd, &c->in);
}

/* What a failed conn_send / conn_recv says (errno, and TLS's reason). */
static const char *conn_error(const hg_client_t *c)
{
    if (c->tls != NULL && tlsconn_error(c->tls)[0] != '\0')
        return tlsconn_error(c->tls);
    return strerror(errno);
}

hg_err_t client_exchange(hg_client_t *c, const char *req, size_t reqlen, size_t nreplies, resp_reply_t **replies,
                         size_t *got, uint32_t extra_wait_ms, int flags)
{
    size_t written = 0;
    uint64_t wait_ms, deadline;
    hg_err_t e = HG_OK;

    *got = 0;
    if (c->tops != NULL)
        return client_fail(c, HG_ERR_UNSUPPORTED, "raw RESP requests are not supported on %s", c->tops->scheme);
    if (c->fd < 0)
        return client_fail(c, HG_ERR_IO, "not connected to %s", c->address);
    wait_ms = c->opts.read_timeout_ms == 0 ? 0 : (uint64_t)c->opts.read_timeout_ms + extra_wait_ms;
    deadline = wait_ms == 0 ? 0 : wire_now_ms() + wait_ms;

    /* Bytes already received (a push before our reply) are parsed first. */
    e = parse_replies(c, nreplies, replies, got);

    while (e == HG_OK && (written < reqlen || *got < nreplies)) {
        struct pollfd p[2];
        int n, np = 1, left = wire_poll_ms(deadline);

        if (left == 0) {
            e = client_fail(c, HG_ERR_TIMEOUT, "no reply from %s within %llums", c->address,
                            (unsigned long long)wait_ms);
            break;
        }
        p[0].fd = c->fd;
        p[0].events = (short)(POLLIN | (written < reqlen ? POLLOUT : 0));
        p[0].revents = 0;
        if (c->tls != NULL && written < reqlen)
            p[0].events |= tlsconn_wants(c->tls); /* a TLS write may wait for input, too */
        if (((flags & CLIENT_INTERRUPTIBLE) || c->stop_all) && c->wake_fd >= 0) {
            p[1].fd = c->wake_fd;
            p[1].events = POLLIN;
            p[1].revents = 0;
            np = 2;
        }
        if (c->tls != NULL && tlsconn_pending(c->tls)) {
            /* decrypted bytes poll cannot see: read them now */
            n = poll(p, (nfds_t)np, 0);
            if (n >= 0) {
                p[0].revents |= POLLIN;
                n = 1;
            }
        } else
            n = poll(p, (nfds_t)np, left);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            e = client_fail(c, HG_ERR_IO, "poll: %s", strerror(errno));
            break;
        }
        if (n == 0)
            continue; /* the deadline check above reports it */
        if (np == 2 && (p[1].revents & POLLIN)) {
            e = client_fail(c, HG_ERR_STOPPED, "stopped while waiting for %s", c->address);
            break;
        }
        if ((p[0].revents & (c->tls != NULL ? POLLIN | POLLOUT : POLLOUT)) && written < reqlen) {
            ssize_t w = conn_send(c, req + written, reqlen - written);
            if (w > 0) {
                written += (size_t)w;
                if (deadline != 0)
                    deadline = wire_now_ms() + wait_ms;
            } else if (w < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
                e = client_fail(c, HG_ERR_IO, "connection to %s lost while sending: %s", c->address, conn_error(c));
                break;
            }
        }
        if (p[0].revents & (POLLIN | POLLHUP | POLLERR)) {
            ssize_t r = conn_recv(c);
            if (r > 0) {
                if (deadline != 0)
                    deadline = wire_now_ms() + wait_ms;
                e = parse_replies(c, nreplies, replies, got);
            } else if (r == 0) {
                e = client_fail(c, HG_ERR_IO, "connection to %s closed by the broker", c->address);
            } else if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
                e = client_fail(c, HG_ERR_IO, "connection to %s lost: %s", c->address, conn_error(c));
            }
        }
    }
    if (e != HG_OK)
        client_disconnect(c);
    return e;
}

hg_err_t client_call(hg_client_t *c, size_t argc, const char *const *argv, const size_t *argvlen, int resend,
                     uint32_t extra_wait_ms, int flags, resp_reply_t **reply)
{
    int resends = 0;
    hg_err_t e;

    *reply = NULL;
    if (c->tops != NULL)
        return c->tops->call(c, c->tstate, argc, argv, argvlen, resend, extra_wait_ms, flags, reply);
    buf_clear(&c->out);
    resp_add_command(&c->out, argc, argv, argvlen);
    for (;;) {
        size_t got = 0;
        e = client_ensure(c);
        if (e != HG_OK)
            break;
        e = client_exchange(c, c->out.data, c->out.len, 1, reply, &got, extra_wait_ms, flags);
        if (e != HG_ERR_IO || !resend || resends >= CLIENT_MAX_RESENDS || woken(c->wake_fd))
            break;
        resends++;
    }
    if (c->out.cap > WIRE_READ_CHUNK)
        buf_free(&c->out); /* do not keep a big payload's buffer */
    return e;
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
    buf_init(&n->in);
    buf_init(&n->out);
    client_error_fill(err, HG_OK, "%s", "");
    *out = n;
    return HG_OK;
}

void hg_client_set_stop_fd(hg_client_t *c, int fd)
{
    c->wake_fd = fd;
    c->stop_all = fd >= 0;
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
    c->opts.read_timeout_ms = ms;
}

uint32_t hg_client_read_timeout(const hg_client_t *c)
{
    return c->opts.read_timeout_ms;
}

uint32_t hg_dlq_all_read_timeout(uint32_t read_timeout_ms, long long entries)
{
    const uint64_t us_per_entry = 50, most_ms = 86400000;
    if (read_timeout_ms == 0 || entries <= 0)
        return read_timeout_ms;
    uint64_t ms = read_timeout_ms + (uint64_t)entries * us_per_entry / 1000;
    return ms < most_ms ? (uint32_t)ms : (uint32_t)most_ms;
}

const char *hg_info_value(const char *info, size_t len, const char *key, size_t *vlen)
{
    size_t klen = strlen(key);
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
    return c->errcode;
}

const char *hg_client_errmsg(const hg_client_t *c)
{
    return c->errmsg;
}

const char *hg_client_address(const hg_client_t *c)
{
    return c->address;
}

hg_err_t hg_client_command(hg_client_t *c, int argc, const char *const *argv, const size_t *argvlen, hg_reply_t **reply)
{
    resp_reply_t *r = NULL;
    hg_err_t e;

    if (reply == NULL)
        return HG_ERR_ARG;
    *reply = NULL;
    client_clear_error(c);
    if (argc < 1 || argv == NULL)
        return client_fail(c, HG_ERR_ARG, "hg_client_command: no command (argc %d)", argc);
    for (int i = 0; i < argc; i++)
        if (argv[i] == NULL)
            return client_fail(c, HG_ERR_ARG, "hg_client_command: argv[%d] is NULL", i);
    e = client_call_checked(c, (size_t)argc, argv, argvlen, 0, &r);
    if (e != HG_OK)
        return e;
    *reply = (hg_reply_t *)r;
    return HG_OK;
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
