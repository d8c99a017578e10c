/*
 * common/tls_server.h — a TLS server's OpenSSL context, shared by the
 * daemons that accept TLS (hourglass-broker's tls-port, hourglass-console's
 * https): one context built from a certificate, its key and, for client
 * certificates, a CA file; a new SSL object per accepted connection; the
 * context swapped on SIGHUP; and the wording of OpenSSL's errors.
 *
 * The context (tls_server_t) holds the current SSL_CTX: TLS 1.2 at least
 * (with ECDHE and AEAD ciphers only: base/tls_policy.h),
 * the certificate chain of the cert file with the private key of the key
 * file (checked to match), and with client verification yes/optional the
 * CAs of the CA file that client certificates must chain to (yes: a client
 * without one is refused in the handshake; optional: one that is sent must
 * verify). With a CRL file, a client certificate must also not be revoked
 * in it, and its issuer must have a CRL there (OpenSSL's leaf CRL check: an
 * issuer without one, or a CRL past its nextUpdate, refuses the client; so
 * a CRL is renewed before it runs out and SIGHUP reads it again).
 *
 * Reload (SIGHUP): tls_server_reload builds a complete new SSL_CTX from the
 * files; only when every step succeeds it replaces the current one. An SSL
 * holds a reference to the SSL_CTX it was made from, so connections already
 * open keep the old certificate and new ones get the new one; a bad new
 * file leaves everything as it was.
 *
 * Errors name the program's own config keys: the files struct carries the
 * prefix of their names ("tls" gives tls-cert-file, tls-key-file,
 * tls-ca-cert-file, tls-crl-file; "https" gives https-cert-file …).
 *
 * Everything here runs on the event-loop thread (start-up: the main thread
 * before the loop runs).
 */
#ifndef HG_COMMON_TLS_SERVER_H
#define HG_COMMON_TLS_SERVER_H

#include <stddef.h>

#include <openssl/ssl.h>

/* Client certificates: the order is the broker's tls-auth-clients words. */
typedef enum tls_clients {
    TLS_CLIENTS_NO = 0,  /* not asked for */
    TLS_CLIENTS_YES,     /* required, and verified against ca_file */
    TLS_CLIENTS_OPTIONAL /* asked for; one that is sent must verify */
} tls_clients_t;

typedef struct tls_server_files {
    const char *key_prefix; /* the config keys' prefix in errors: "tls", "https" */
    const char *cert_file;  /* the chain, leaf first (PEM) */
    const char *key_file;   /* its private key (PEM, unencrypted) */
    const char *ca_file;    /* NULL, or the CAs client certificates chain to */
    const char *crl_file;   /* NULL, or the CRLs (PEM) a client certificate must not be revoked in */
    tls_clients_t clients;
    const char *session_id; /* the session id context (the program's name) */
} tls_server_files_t;

typedef struct tls_server tls_server_t;

/* Build the context from the files. 0 and *out (free with
 * tls_server_free), or -1 with err naming the key, the file and OpenSSL's
 * reason ("tls-cert-file /etc/x.pem: no start line"). */
int tls_server_new(const tls_server_files_t *files, tls_server_t **out, char *err, size_t errlen);

/* Build a new context from the files (read again) and make it the current
 * one. 0, or -1 with err as tls_server_new (the current context
 * unchanged). */
int tls_server_reload(tls_server_t *t, const tls_server_files_t *files, char *err, size_t errlen);

/* A new server-side SSL from the current context, or NULL (out of memory;
 * the reason in err). */
SSL *tls_server_ssl(tls_server_t *t, char *err, size_t errlen);

/* "subject CN=..., serial 1A2B, expires 2027-01-01 00:00:00 GMT" of the
 * current certificate into buf[len] (for the start-up and reload lines). */
void tls_server_describe(const tls_server_t *t, char *buf, size_t len);

/* 1 when the current certificate's notAfter has passed. */
int tls_server_expired(const tls_server_t *t);

/* Free the context (connections keep their SSL_CTX reference). NULL is fine. */
void tls_server_free(tls_server_t *t);

/* The OpenSSL errors a bufferevent_openssl recorded (its own queue, not
 * the thread's; when it has none, the thread's) into buf[len], joined by
 * "; " as base/openssl_error.h's openssl_errors_join does (e.g. "wrong
 * version number"), both queues drained. Returns buf. */
struct bufferevent;
char *tls_bev_error_text(struct bufferevent *bev, char *buf, size_t len);

/* "TLSv1.3 TLS_AES_256_GCM_SHA384" of an established connection, and the
 * client certificate's subject when one was sent, into buf[len]. */
void tls_describe_session(SSL *ssl, char *buf, size_t len);

/* Why the client's certificate failed verification ("certificate has
 * expired", "unable to get local issuer certificate"), or NULL when it did
 * not fail (or none was sent). */
const char *tls_peer_verify_failure(SSL *ssl);

/* A hint for a failed handshake whose reason is text: "a plaintext client
 * on the TLS port?" for the reasons a non-TLS first packet produces, else
 * "". Never NULL. */
const char *tls_error_hint(const char *text);

#endif
