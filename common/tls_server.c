/*
 * common/tls_server.c — a TLS server's OpenSSL context (contract:
 * tls_server.h), for the broker's tls-port and the console's https.
 *
 * One SSL_CTX at a time, built completely before it is used: TLS 1.2 at
 * least, TLS 1.2 with ECDHE and AEAD ciphers only (base/tls_policy.h;
 * TLS 1.3's suites are all AEAD and left as OpenSSL has them), no
 * renegotiation, the server's cipher preference, the certificate
 * chain and its key (checked to match), for mTLS the client CAs and the
 * verify mode. A build that fails at any step frees what it made and leaves
 * the current context alone, which is what makes a bad SIGHUP harmless.
 * Files are checked for readability first so that the common mistakes read
 * as "No such file or directory" / "Permission denied" rather than as
 * OpenSSL's internal error codes.
 *
 * Thread: the event-loop thread (start-up: main, before the loop runs).
 */
#include "common/tls_server.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <event2/bufferevent_ssl.h>
#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/x509.h>

#include "base/tls_policy.h"

#include "base/alloc.h"
#include "base/err.h"
#include "base/openssl_error.h"

struct tls_server {
    SSL_CTX *ctx; /* the current context; connections hold their own reference */
    int crls;     /* CRLs loaded into ctx from crl_file (0: none checked) */
};

static unsigned long next_bev_error(void *arg)
{
    return (unsigned long)bufferevent_get_openssl_error(arg);
}

char *tls_bev_error_text(struct bufferevent *bev, char *buf, size_t len)
{
    openssl_errors_join(next_bev_error, bev, buf, len);
    if (len > 0 && buf[0] == '\0') {
        openssl_errors(buf, len); /* some reach only the thread's queue */
    }
    return buf;
}

void tls_describe_session(SSL *ssl, char *buf, size_t len)
{
    char peer[256] = "";
    X509 *x = SSL_get1_peer_certificate(ssl);
    if (x != NULL) {
        char subject[200];
        X509_NAME_oneline(X509_get_subject_name(x), subject, sizeof subject);
        snprintf(peer, sizeof peer, ", client certificate %s", subject);
        X509_free(x);
    }
    snprintf(buf, len, "%s %s%s", SSL_get_version(ssl), SSL_get_cipher_name(ssl), peer);
}

const char *tls_peer_verify_failure(SSL *ssl)
{
    long v = ssl != NULL ? SSL_get_verify_result(ssl) : X509_V_OK;
    return v == X509_V_OK ? NULL : X509_verify_cert_error_string(v);
}

const char *tls_error_hint(const char *text)
{
    static const char *const plain[] = { "wrong version number",   "http request",     "https proxy request",
                                         "packet length too long", "unknown protocol", "record layer failure" };
    for (size_t i = 0; i < sizeof plain / sizeof plain[0]; i++) {
        if (strstr(text, plain[i]) != NULL) {
            return " (a plaintext client on the TLS port?)";
        }
    }
    if (strstr(text, "alert bad certificate") || strstr(text, "alert unknown ca") ||
        strstr(text, "alert certificate expired") || strstr(text, "alert certificate unknown")) {
        return " (the client refused the broker's certificate)";
    }
    if (strstr(text, "peer did not return a certificate")) {
        return " (tls-auth-clients yes: the client sent no certificate)";
    }
    return "";
}

/* 0 when path can be read, else -1 with "key path: reason". */
static int check_readable(const char *key, const char *path, char *err, size_t errlen)
{
    if (access(path, R_OK) != 0) {
        return err_set(err, errlen, "%s %s: %s", key, path, strerror(errno));
    }
    return 0;
}

/* Load the CRLs of path (PEM) into ctx's store and check client
 * certificates against them. The count loaded, or -1 with err. */
static int load_crls(SSL_CTX *ctx, const char *key, const char *path, char *err, size_t errlen)
{
    char why[512];
    X509_STORE *store = SSL_CTX_get_cert_store(ctx);
    X509_LOOKUP *lookup = X509_STORE_add_lookup(store, X509_LOOKUP_file());
    int n = lookup != NULL ? X509_load_crl_file(lookup, path, X509_FILETYPE_PEM) : 0;
    if (n <= 0) {
        openssl_errors(why, sizeof why);
        return err_set(err, errlen, "%s %s: no CRL in it%s%s", key, path, why[0] ? ": " : "", why);
    }
    /* The leaf only: a client certificate whose issuer has no CRL here is
     * refused ("unable to get certificate CRL"); intermediates are not
     * looked up (X509_V_FLAG_CRL_CHECK_ALL would want a CRL of each). */
    X509_STORE_set_flags(store, X509_V_FLAG_CRL_CHECK);
    return n;
}

/* A complete new context from the files, or NULL with err; *crls: the
 * number of CRLs it checks. */
static SSL_CTX *tls_build(const tls_server_files_t *f, int *crls, char *err, size_t errlen)
{
    char why[512], cert_key[64], key_key[64], ca_key[64], crl_key[64];
    const char *prefix = f->key_prefix != NULL ? f->key_prefix : "tls";
    snprintf(cert_key, sizeof cert_key, "%s-cert-file", prefix);
    snprintf(key_key, sizeof key_key, "%s-key-file", prefix);
    snprintf(ca_key, sizeof ca_key, "%s-ca-cert-file", prefix);
    snprintf(crl_key, sizeof crl_key, "%s-crl-file", prefix);
    *crls = 0;
    ERR_clear_error();
    if (f->cert_file == NULL || f->key_file == NULL) {
        err_set(err, errlen, "TLS needs %s and %s", cert_key, key_key);
        return NULL;
    }
    if (check_readable(cert_key, f->cert_file, err, errlen) != 0 ||
        check_readable(key_key, f->key_file, err, errlen) != 0 ||
        (f->ca_file != NULL && check_readable(ca_key, f->ca_file, err, errlen) != 0) ||
        (f->crl_file != NULL && check_readable(crl_key, f->crl_file, err, errlen) != 0)) {
        return NULL;
    }
    SSL_CTX *ctx = SSL_CTX_new(TLS_server_method());
    if (ctx == NULL) {
        err_set(err, errlen, "cannot create a TLS context: %s", openssl_errors(why, sizeof why));
        return NULL;
    }
    SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION);
    SSL_CTX_set_options(ctx, SSL_OP_NO_RENEGOTIATION | SSL_OP_CIPHER_SERVER_PREFERENCE);
    if (SSL_CTX_set_cipher_list(ctx, HG_TLS12_CIPHERS) != 1) {
        err_set(err, errlen, "cannot set the TLS 1.2 ciphers: %s", openssl_errors(why, sizeof why));
        goto fail;
    }
    SSL_CTX_set_mode(ctx, SSL_MODE_RELEASE_BUFFERS); /* idle connections hold no record buffers */
    /* Session resumption with client certificates needs a context id. */
    const char *sid = f->session_id != NULL ? f->session_id : "hourglass";
    SSL_CTX_set_session_id_context(ctx, (const unsigned char *)sid, (unsigned)strlen(sid));
    if (SSL_CTX_use_certificate_chain_file(ctx, f->cert_file) != 1) {
        err_set(err, errlen, "%s %s: %s", cert_key, f->cert_file, openssl_errors(why, sizeof why));
        goto fail;
    }
    if (SSL_CTX_use_PrivateKey_file(ctx, f->key_file, SSL_FILETYPE_PEM) != 1 || SSL_CTX_check_private_key(ctx) != 1) {
        openssl_errors(why, sizeof why);
        if (strstr(why, "mismatch") == NULL && SSL_CTX_get0_privatekey(ctx) == NULL) {
            err_set(err, errlen, "%s %s holds no private key OpenSSL can read (PEM, unencrypted)%s%s", key_key,
                    f->key_file, why[0] ? ": " : "", why);
            goto fail;
        }
        err_set(err, errlen, "%s %s does not belong to %s %s: %s", key_key, f->key_file, cert_key, f->cert_file, why);
        goto fail;
    }
    if (f->ca_file != NULL) {
        if (SSL_CTX_load_verify_locations(ctx, f->ca_file, NULL) != 1) {
            err_set(err, errlen, "%s %s: %s", ca_key, f->ca_file, openssl_errors(why, sizeof why));
            goto fail;
        }
        STACK_OF(X509_NAME) *names = SSL_load_client_CA_file(f->ca_file);
        if (names == NULL) {
            err_set(err, errlen, "%s %s: no certificate in it: %s", ca_key, f->ca_file,
                    openssl_errors(why, sizeof why));
            goto fail;
        }
        SSL_CTX_set_client_CA_list(ctx, names);
    }
    if (f->crl_file != NULL && (*crls = load_crls(ctx, crl_key, f->crl_file, err, errlen)) < 0) {
        goto fail;
    }
    switch (f->clients) {
    case TLS_CLIENTS_YES:
        SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT, NULL);
        break;
    case TLS_CLIENTS_OPTIONAL:
        SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER, NULL);
        break;
    default:
        SSL_CTX_set_verify(ctx, SSL_VERIFY_NONE, NULL);
        break;
    }
    return ctx;
fail:
    SSL_CTX_free(ctx);
    return NULL;
}

int tls_server_new(const tls_server_files_t *files, tls_server_t **out, char *err, size_t errlen)
{
    *out = NULL;
    int crls;
    SSL_CTX *ctx = tls_build(files, &crls, err, errlen);
    if (ctx == NULL) {
        return -1;
    }
    tls_server_t *t = xcalloc(1, sizeof *t);
    t->ctx = ctx;
    t->crls = crls;
    *out = t;
    return 0;
}

int tls_server_reload(tls_server_t *t, const tls_server_files_t *files, char *err, size_t errlen)
{
    int crls;
    SSL_CTX *ctx = tls_build(files, &crls, err, errlen);
    if (ctx == NULL) {
        return -1;
    }
    SSL_CTX_free(t->ctx); /* open connections keep their reference */
    t->ctx = ctx;
    t->crls = crls;
    return 0;
}

SSL *tls_server_ssl(tls_server_t *t, char *err, size_t errlen)
{
    char why[256];
    SSL *ssl = SSL_new(t->ctx);
    if (ssl == NULL) {
        err_set(err, errlen, "SSL_new: %s", openssl_errors(why, sizeof why));
    }
    return ssl;
}

void tls_server_describe(const tls_server_t *t, char *buf, size_t len)
{
    X509 *x = SSL_CTX_get0_certificate(t->ctx);
    if (len == 0) {
        return;
    }
    if (x == NULL) {
        snprintf(buf, len, "no certificate");
        return;
    }
    char subject[256] = "?", serial[128] = "?", expires[64] = "?";
    X509_NAME_oneline(X509_get_subject_name(x), subject, sizeof subject);
    BIGNUM *bn = ASN1_INTEGER_to_BN(X509_get0_serialNumber(x), NULL);
    if (bn != NULL) {
        char *hex = BN_bn2hex(bn);
        if (hex != NULL) {
            snprintf(serial, sizeof serial, "%s", hex);
            OPENSSL_free(hex);
        }
        BN_free(bn);
    }
    BIO *mem = BIO_new(BIO_s_mem());
    if (mem != NULL) {
        if (ASN1_TIME_print(mem, X509_get0_notAfter(x)) == 1) {
            int n = BIO_read(mem, expires, (int)sizeof expires - 1);
            expires[n > 0 ? n : 0] = '\0';
        }
        BIO_free(mem);
    }
    int n = snprintf(buf, len, "subject %s, serial %s, expires %s", subject, serial, expires);
    if (t->crls > 0 && n >= 0 && (size_t)n < len) {
        snprintf(buf + n, len - (size_t)n, "; client certificates checked against %d CRL%s", t->crls,
                 t->crls == 1 ? "" : "s");
    }
}

int tls_server_expired(const tls_server_t *t)
{
    X509 *x = SSL_CTX_get0_certificate(t->ctx);
    return x != NULL && X509_cmp_current_time(X509_get0_notAfter(x)) < 0;
}

void tls_server_free(tls_server_t *t)
{
    if (t == NULL) {
        return;
    }
    SSL_CTX_free(t->ctx);
    free(t);
}
