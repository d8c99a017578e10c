/*
 * lib/tlsconn.c — OpenSSL on the library's non-blocking sockets (contract:
 * tlsconn.h).
 *
 * The SSL reads and writes the socket itself; the caller polls.
 * The socket BIO is our own (socket_bio_method): send(2) with MSG_NOSIGNAL,
 * so a broker that went away never raises SIGPIPE in the application (the
 * library's plaintext path never does either); recv(2) for reads.
 * Partial writes are on (SSL_MODE_ENABLE_PARTIAL_WRITE) so a big pipeline
 * goes out record by record like send(2), and a retried write may come from
 * a moved buffer (SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER). A close without
 * close_notify reads as EOF (SSL_OP_IGNORE_UNEXPECTED_EOF), as the broker
 * may be killed. Verification is always on: the chain against the CA file
 * (or the system store), the name against the URI's host.
 *
 * Thread: a context is shared read-only; a connection is its caller's.
 */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include "lib/tlsconn.h"
#include "lib/wire.h"

#include "base/alloc.h"
#include "base/err.h"
#include "base/openssl_error.h"
#include "base/tls_policy.h"

#include <arpa/inet.h>
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>

struct tlsconn_ctx {
    SSL_CTX *ctx;
};

struct tlsconn {
    SSL *ssl;
    int fd;
    short wants; /* poll events the last would-block waits for */
    char err[256];
};

/* ---- a socket BIO without SIGPIPE ----------------------------------------- */

static int bio_fd(BIO *b)
{
    return (int)(intptr_t)BIO_get_data(b);
}

static int socket_bio_write(BIO *b, const char *data, int len)
{
    ssize_t n = send(bio_fd(b), data, (size_t)len, MSG_NOSIGNAL | MSG_DONTWAIT);

    BIO_clear_retry_flags(b);
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))
        BIO_set_retry_write(b);
    return (int)n;
}

static int socket_bio_read(BIO *b, char *data, int len)
{
    ssize_t n = recv(bio_fd(b), data, (size_t)len, MSG_DONTWAIT);

    BIO_clear_retry_flags(b);
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))
        BIO_set_retry_read(b);
    return (int)n;
}

static long socket_bio_ctrl(BIO *b, int cmd, long num, void *ptr)
{
    (void)b, (void)num, (void)ptr;
    return cmd == BIO_CTRL_FLUSH ? 1 : 0;
}

static int socket_bio_create(BIO *b)
{
    BIO_set_init(b, 1);
    return 1;
}

static BIO_METHOD *bio_method;
static pthread_once_t bio_once = PTHREAD_ONCE_INIT;

static void bio_method_init(void)
{
    BIO_METHOD *m = BIO_meth_new(BIO_get_new_index() | BIO_TYPE_SOURCE_SINK, "hourglass socket");
    if (m == NULL)
        return;
    BIO_meth_set_write(m, socket_bio_write);
    BIO_meth_set_read(m, socket_bio_read);
    BIO_meth_set_ctrl(m, socket_bio_ctrl);
    BIO_meth_set_create(m, socket_bio_create);
    bio_method = m;
}

/* A BIO on fd that does not close it, or NULL. */
static BIO *socket_bio_new(int fd)
{
    BIO *b;

    pthread_once(&bio_once, bio_method_init);
    if (bio_method == NULL || (b = BIO_new(bio_method)) == NULL)
        return NULL;
    BIO_set_data(b, (void *)(intptr_t)fd);
    return b;
}

/* ---- contexts and connections ------------------------------------------------ */


int tlsconn_ctx_new(const char *ca_file, const char *cert_file, const char *key_file, tlsconn_ctx_t **out, char *err,
                    size_t errlen)
{
    char why[256];
    SSL_CTX *ctx;

    *out = NULL;
    if ((cert_file == NULL) != (key_file == NULL))
        return err_set(
            err, errlen,
            "TLS client certificate: a certificate needs its key and a key its certificate (got only the %s)",
            cert_file != NULL ? "certificate" : "key");
    if (ca_file != NULL && access(ca_file, R_OK) != 0)
        return err_set(err, errlen, "TLS CA file %s: %s", ca_file, strerror(errno));
    if (cert_file != NULL && access(cert_file, R_OK) != 0)
        return err_set(err, errlen, "TLS certificate file %s: %s", cert_file, strerror(errno));
    if (key_file != NULL && access(key_file, R_OK) != 0)
        return err_set(err, errlen, "TLS key file %s: %s", key_file, strerror(errno));
    ERR_clear_error();
    ctx = SSL_CTX_new(TLS_client_method());
    if (ctx == NULL) {
        openssl_errors(why, sizeof(why));
        return err_set(err, errlen, "cannot create a TLS context: %s", why);
    }
    SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION);
    SSL_CTX_set_options(ctx, SSL_OP_NO_RENEGOTIATION | SSL_OP_IGNORE_UNEXPECTED_EOF);
    if (SSL_CTX_set_cipher_list(ctx, HG_TLS12_CIPHERS) != 1) {
        openssl_errors(why, sizeof(why));
        SSL_CTX_free(ctx);
        return err_set(err, errlen, "cannot set the TLS 1.2 ciphers: %s", why);
    }
    SSL_CTX_set_mode(ctx, SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
    SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER, NULL);
    if (ca_file != NULL ? SSL_CTX_load_verify_locations(ctx, ca_file, NULL) != 1
                        : SSL_CTX_set_default_verify_paths(ctx) != 1) {
        openssl_errors(why, sizeof(why));
        SSL_CTX_free(ctx);
        return err_set(err, errlen, "TLS CA file %s: %s", ca_file != NULL ? ca_file : "(system default)", why);
    }
    if (cert_file != NULL) {
        if (SSL_CTX_use_certificate_chain_file(ctx, cert_file) != 1) {
            openssl_errors(why, sizeof(why));
            SSL_CTX_free(ctx);
            return err_set(err, errlen, "TLS certificate file %s: %s", cert_file, why);
        }
        if (SSL_CTX_use_PrivateKey_file(ctx, key_file, SSL_FILETYPE_PEM) != 1 || SSL_CTX_check_private_key(ctx) != 1) {
            openssl_errors(why, sizeof(why));
            SSL_CTX_free(ctx);
            return err_set(err, errlen, "TLS key file %s (for %s): %s", key_file, cert_file, why);
        }
    }
    *out = xcalloc(1, sizeof(**out));
    (*out)->ctx = ctx;
    return 0;
}

void tlsconn_ctx_free(tlsconn_ctx_t *ctx)
{
    if (ctx == NULL)
        return;
    SSL_CTX_free(ctx->ctx);
    free(ctx);
}

tlsconn_ctx_t *tlsconn_ctx_ref(const tlsconn_ctx_t *ctx)
{
    tlsconn_ctx_t *ref = xcalloc(1, sizeof(*ref));
    SSL_CTX_up_ref(ctx->ctx);
    ref->ctx = ctx->ctx;
    return ref;
}

/* After a failed SSL call that returned rc: errno and t->err set, or EAGAIN
 * with t->wants. Returns -1 (or 0 for a clean close, when eof_ok). */
static ssize_t ssl_failed(tlsconn_t *t, int rc, int eof_ok)
{
    int e = SSL_get_error(t->ssl, rc);

    switch (e) {
    case SSL_ERROR_WANT_READ:
        t->wants = POLLIN;
        errno = EAGAIN;
        return -1;
    case SSL_ERROR_WANT_WRITE:
        t->wants = POLLOUT;
        errno = EAGAIN;
        return -1;
    case SSL_ERROR_ZERO_RETURN:
        if (eof_ok)
            return 0;
        snprintf(t->err, sizeof(t->err), "closed by the broker");
        errno = EPIPE;
        return -1;
    case SSL_ERROR_SYSCALL:
        if (errno == 0) {
            if (eof_ok)
                return 0;
            errno = EPIPE;
        }
        snprintf(t->err, sizeof(t->err), "%s", strerror(errno));
        ERR_clear_error();
        return -1;
    default:
        openssl_errors(t->err, sizeof(t->err));
        if (t->err[0] == '\0')
            snprintf(t->err, sizeof(t->err), "TLS error %d", e);
        errno = EPROTO;
        return -1;
    }
}

int tlsconn_open(tlsconn_ctx_t *ctx, int fd, const char *name, uint64_t deadline, int stop_fd, tlsconn_t **out,
                 int *verify_failed, char *err, size_t errlen)
{
    struct in6_addr addr;
    int is_ip = inet_pton(AF_INET, name, &addr) == 1 || inet_pton(AF_INET6, name, &addr) == 1;
    tlsconn_t *t;

    *out = NULL;
    *verify_failed = 0;
    ERR_clear_error();
    t = xcalloc(1, sizeof(*t));
    t->fd = fd;
    t->ssl = SSL_new(ctx->ctx);
    BIO *bio = t->ssl != NULL ? socket_bio_new(fd) : NULL;
    if (bio == NULL) {
        char why[256];
        openssl_errors(why, sizeof(why));
        tlsconn_close(t);
        return err_set(err, errlen, "cannot start TLS: %s", why[0] ? why : "out of memory");
    }
    SSL_set_bio(t->ssl, bio, bio);
    if (is_ip) {
        X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(t->ssl), name);
    } else {
        SSL_set_tlsext_host_name(t->ssl, name);
        SSL_set1_host(t->ssl, name);
    }
    for (;;) {
        int rc = SSL_connect(t->ssl), w;
        if (rc == 1)
            break;
        errno = 0;
        if (ssl_failed(t, rc, 0) == -1 && errno == EAGAIN) {
            w = wire_wait_stop(fd, t->wants, deadline, stop_fd);
            if (w == 1)
                continue;
            err_set(err, errlen, "TLS handshake %s",
                    w == 0              ? "timed out"
                    : w == WIRE_STOPPED ? "stopped"
                                        : strerror(errno));
            tlsconn_close(t);
            errno = w == WIRE_STOPPED ? ECANCELED : errno;
            return -1;
        }
        long v = SSL_get_verify_result(t->ssl);
        if (v != X509_V_OK) {
            *verify_failed = 1;
            err_set(err, errlen, "the broker's TLS certificate is not trusted: %s", X509_verify_cert_error_string(v));
        } else if (errno == EPIPE || strstr(t->err, "unexpected eof") != NULL ||
                   strstr(t->err, "wrong version number") != NULL || strstr(t->err, "packet length") != NULL) {
            err_set(err, errlen, "TLS handshake failed: %s (is it the broker's tls-port?)",
                    errno == EPIPE ? "connection closed by the broker" : t->err);
        } else {
            err_set(err, errlen, "TLS handshake failed: %s", t->err);
        }
        tlsconn_close(t);
        return -1;
    }
    t->wants = 0;
    *out = t;
    return 0;
}

ssize_t tlsconn_send(tlsconn_t *t, const void *data, size_t len)
{
    int n = SSL_write(t->ssl, data, len > 0x40000000 ? 0x40000000 : (int)len);
    ssize_t rc;

    if (n > 0)
        return n;
    errno = 0;
    rc = ssl_failed(t, n, 0);
    if (rc < 0 && (errno == EPIPE || errno == ECONNRESET)) {
        /* The broker closed after an alert (TLS 1.3 refuses a client
         * certificate after our handshake finished): its reason is still
         * in the socket's input, and says more than "Broken pipe". */
        int saved = errno;
        char sink[512];
        int r = SSL_read(t->ssl, sink, (int)sizeof(sink));
        if (r <= 0 && SSL_get_error(t->ssl, r) == SSL_ERROR_SSL) {
            char why[sizeof(t->err)];
            openssl_errors(why, sizeof(why));
            if (why[0] != '\0')
                snprintf(t->err, sizeof(t->err), "%s", why);
        }
        ERR_clear_error();
        errno = saved;
    }
    return rc;
}

ssize_t tlsconn_recv(tlsconn_t *t, buf_t *in)
{
    char *dst = buf_reserve(in, WIRE_READ_CHUNK);
    int n = SSL_read(t->ssl, dst, (int)WIRE_READ_CHUNK);

    if (n > 0) {
        in->len += (size_t)n;
        return n;
    }
    errno = 0;
    return ssl_failed(t, n, 1);
}

short tlsconn_wants(const tlsconn_t *t)
{
    return t->wants != 0 ? t->wants : POLLIN;
}

int tlsconn_pending(const tlsconn_t *t)
{
    return SSL_pending(t->ssl) > 0;
}

int tlsconn_alive(tlsconn_t *t)
{
    struct pollfd p = { t->fd, POLLIN, 0 };
    char byte;
    int n;

    if (SSL_pending(t->ssl) > 0)
        return 1;
    if (poll(&p, 1, 0) <= 0)
        return 1; /* nothing pending: alive */
    if (p.revents & (POLLERR | POLLNVAL))
        return 0;
    n = SSL_peek(t->ssl, &byte, 1);
    if (n > 0)
        return 1; /* unsolicited data (a RESP3 push): read with the next reply */
    errno = 0;
    return ssl_failed(t, n, 1) == -1 && errno == EAGAIN; /* only records without data (tickets) */
}

const char *tlsconn_error(const tlsconn_t *t)
{
    return t->err;
}

void tlsconn_close(tlsconn_t *t)
{
    if (t == NULL)
        return;
    if (t->ssl != NULL) {
        if (SSL_is_init_finished(t->ssl))
            SSL_shutdown(t->ssl); /* non-blocking socket: one try, never waits */
        SSL_free(t->ssl);
    }
    ERR_clear_error();
    free(t);
}
