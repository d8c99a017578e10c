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
 *
 * The client is four files around one private header (lib/client_internal.h,
 * struct hg_client): this one (errors, options, creation, disconnect),
 * client_connect.c (client_ensure), client_exchange.c (client_exchange)
 * and client_api.c (client_call and the public hg_client_* / hg_reply_*
 * calls).
 */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include "lib/client.h"
#include "lib/backoff.h"
#include "lib/client_internal.h"
#include "lib/tlsconn.h"
#include "lib/transport.h"
#include "lib/uri.h"
#include "lib/wire.h"

#include "base/alloc.h"

#include <errno.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

/* ------------------------------------------------------------------------
 * Small helpers
 * ------------------------------------------------------------------------ */

/* Sleep ms, ending early with -1 when fd_a or fd_b (either may be -1) is
 * readable. */
static int sleep_on(int fd_a, int fd_b, uint64_t ms)
{
    uint64_t deadline = wire_now_ms() + ms;

    for (;;) {
        struct pollfd p[2];
        nfds_t np = 0;
        int left = wire_poll_ms(deadline), n;
        if (fd_a >= 0)
            p[np++] = (struct pollfd){ fd_a, POLLIN, 0 };
        if (fd_b >= 0)
            p[np++] = (struct pollfd){ fd_b, POLLIN, 0 };
        if (left == 0)
            return 0;
        n = poll(p, np, left);
        if (n > 0)
            return -1;
        if (n < 0 && errno != EINTR)
            return 0;
    }
}

int client_sleep(int wake_fd, uint64_t ms)
{
    return sleep_on(wake_fd, -1, ms);
}

int client_pause(const hg_client_t *c, uint64_t ms)
{
    return sleep_on(c->wake_fd, c->stop_fd, ms);
}

int client_woken(int wake_fd)
{
    struct pollfd p = { wake_fd, POLLIN, 0 };
    return wake_fd >= 0 && poll(&p, 1, 0) > 0;
}

hg_err_t client_fail(hg_client_t *c, hg_err_t code, const char *fmt, ...)
{
    char msg[sizeof(c->errmsg)];
    va_list ap;

    /* Formatted aside first: an argument may be c->errmsg itself (a failure
     * that wraps the one before it, as connect_round's AUTH), and vsnprintf
     * into the buffer it reads from overwrites the cause with the prefix. */
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    c->errcode = code;
    memcpy(c->errmsg, msg, sizeof(msg));
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
    if (opts == NULL)
        return;
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
    if (opts->has_stop_fd && opts->stop_fd < 0) {
        client_error_fill(err, HG_ERR_ARG, "stop_fd %d is not a file descriptor (has_stop_fd is set)", opts->stop_fd);
        return -1;
    }
    return 0;
}

/* The stop fd a new client starts with: opts' (has_stop_fd), else none. */
static int initial_stop_fd(const hg_client_opts_t *opts)
{
    return opts != NULL && opts->has_stop_fd ? opts->stop_fd : -1;
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
    c->stop_fd = initial_stop_fd(opts);
    buf_init(&c->in);
    buf_init(&c->out);
    c->tops = transport_for_uri(uri);
    e = c->tops->create(c, uri, &c->tstate, c->address, sizeof(c->address), err);
    c->opts.user = NULL; /* the transport copied them: never keep the caller's pointers */
    c->opts.password = NULL;
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

int client_stop_fd(const hg_client_t *c)
{
    return c->stop_fd;
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

    if (u.has_user && !u.has_auth && (opts == NULL || opts->password == NULL)) {
        client_error_fill(err, HG_ERR_ARG, "no password given for user '%.64s' (named in the URI)", u.user);
        memset(&u, 0, sizeof(u));
        return HG_ERR_ARG;
    }
    if (opts != NULL && (opts->user != NULL || opts->password != NULL)) {
        const char *user = opts->user != NULL ? opts->user : (u.has_user ? u.user : "default");
        const char *pass = opts->password != NULL ? opts->password : (u.has_auth ? u.password : NULL);
        if (pass == NULL || user[0] == '\0') {
            memset(&u, 0, sizeof(u));
            if (pass == NULL)
                client_error_fill(err, HG_ERR_ARG, "no password given for user '%.64s'", user);
            else
                client_error_fill(err, HG_ERR_ARG, "%s", "user is empty");
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
    uri_address(c->address, sizeof(c->address), u.host, u.port);
    c->fd = -1;
    c->wake_fd = -1;
    c->stop_fd = initial_stop_fd(opts);
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
