/*
 * lib/rmq_tls.c — the TLS socket of an amqps:// connection.
 *
 * rabbitmq-c makes the socket and runs the handshake; this file sets it up
 * the way lib/tlsconn.c sets up hourglass+tls://, so both transports trust
 * the same things:
 *   - TLS 1.2 at least, offering only base/tls_policy.h's TLS 1.2 cipher
 *     suites (ECDHE with AES-GCM or ChaCha20-Poly1305), as lib/tlsconn.c
 *     and the daemons' TLS listeners do: librabbitmq leaves OpenSSL's
 *     default list (CBC, SHA-1 MACs, static RSA), and its SSL_CTX
 *     (amqp_ssl_socket_get_context) is where the list is set;
 *   - the peer's certificate always verified: against ca= (or the client's
 *     tls_ca_file), else the system's trust store;
 *   - the name checked by OpenSSL (X509_VERIFY_PARAM: DNS names, and IP
 *     SANs when the name is an address), which is sni= / tls_server_name
 *     when given, else the host of the URI. rabbitmq-c's own host-name check
 *     is off: it knows neither IP SANs nor a name other than the host;
 *   - a client certificate (cert= and key=, or tls_cert_file/tls_key_file)
 *     for a RabbitMQ with ssl_options.verify = verify_peer.
 * The verify callback keeps the first reason a certificate was refused in
 * r->tls_why, so a failed connect says "certificate has expired" rather
 * than rabbitmq-c's "SSL connection failed". The info callback guards the
 * socket as the handshake starts (rmq_guard_socket), so the client's stop
 * fd cuts a handshake with a node that does not answer.
 *
 * The URI's parameters win over the client's options, one by one, as for
 * hourglass+tls:// (lib/client.c). One thread per connection.
 */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include "lib/rmq.h"
#include "lib/client.h"

#include "base/openssl_error.h"
#include "base/tls_policy.h"

#include <amqp_ssl_socket.h>
#include <arpa/inet.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>
#include <stdio.h>
#include <string.h>

/* OpenSSL's verify callback: keep the first refusal's reason on the rmq_t
 * the context belongs to (its app data), and let OpenSSL's verdict stand. */
static int verify_cb(int ok, X509_STORE_CTX *store)
{
    SSL *ssl = X509_STORE_CTX_get_ex_data(store, SSL_get_ex_data_X509_STORE_CTX_idx());
    rmq_t *r = ssl != NULL ? SSL_CTX_get_app_data(SSL_get_SSL_CTX(ssl)) : NULL;

    if (!ok && r != NULL && r->tls_why[0] == '\0') {
        int e = X509_STORE_CTX_get_error(store);
        snprintf(r->tls_why, sizeof(r->tls_why), "RabbitMQ's certificate: %s (chain depth %d)",
                 X509_verify_cert_error_string(e), X509_STORE_CTX_get_error_depth(store));
    }
    return ok;
}

/* OpenSSL's info callback: as the handshake of a new connection starts,
 * guard its socket (librabbitmq made it, and shows it only once the
 * handshake is done), so a stop cuts a handshake with a node that does not
 * answer at once; the deadline stays librabbitmq's (a connect timeout).
 * r->st is set only after the login: later handshake messages (TLS 1.3
 * tickets) leave the guard alone. */
static void info_cb(const SSL *ssl, int where, int ret)
{
    rmq_t *r = SSL_CTX_get_app_data(SSL_get_SSL_CTX(ssl));

    (void)ret;
    if ((where & SSL_CB_HANDSHAKE_START) && r != NULL && r->st == NULL && SSL_get_fd(ssl) >= 0)
        rmq_guard_socket(r, SSL_get_fd(ssl), 0);
}

amqp_socket_t *rmq_tls_socket(rmq_t *r, amqp_connection_state_t st, const char *host)
{
    const hg_client_opts_t *o = client_opts(r->client);
    const char *ca = r->tls_ca[0] ? r->tls_ca : o->tls_ca_file;
    const char *cert = r->tls_cert[0] ? r->tls_cert : o->tls_cert_file;
    const char *key = r->tls_key[0] ? r->tls_key : o->tls_key_file;
    const char *name = r->tls_sni[0] ? r->tls_sni : o->tls_server_name != NULL ? o->tls_server_name : host;
    X509_VERIFY_PARAM *param;
    unsigned char addr[16];
    amqp_socket_t *sock;
    SSL_CTX *ctx;
    char why[200];
    int rc, is_ip;

    if ((cert != NULL && cert[0] != '\0') != (key != NULL && key[0] != '\0')) {
        client_fail(r->client, HG_ERR_URI, "amqps://: a client certificate needs both cert and key (got only %s)",
                    cert != NULL && cert[0] != '\0' ? "cert" : "key");
        return NULL;
    }
    sock = amqp_ssl_socket_new(st);
    if (sock == NULL) {
        client_fail(r->client, HG_ERR_SYSTEM, "cannot create a TLS socket for %s: %s", r->address,
                    openssl_errors(why, sizeof(why)));
        return NULL;
    }
    ctx = amqp_ssl_socket_get_context(sock);
    if (SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION) != 1 ||
        SSL_CTX_set_cipher_list(ctx, HG_TLS12_CIPHERS) != 1) {
        client_fail(r->client, HG_ERR_SYSTEM, "amqps://: cannot set TLS 1.2 or later with the TLS 1.2 ciphers: %s",
                    openssl_errors(why, sizeof(why)));
        return NULL;
    }
    if (ca != NULL && ca[0] != '\0') {
        rc = amqp_ssl_socket_set_cacert(sock, ca);
        if (rc != AMQP_STATUS_OK) {
            client_fail(r->client, HG_ERR_URI, "amqps://: cannot load the CA file '%s': %s", ca,
                        openssl_errors(why, sizeof(why)));
            return NULL;
        }
    } else if (SSL_CTX_set_default_verify_paths(ctx) != 1) {
        client_fail(r->client, HG_ERR_SYSTEM, "amqps://: cannot load the system's trust store: %s",
                    openssl_errors(why, sizeof(why)));
        return NULL;
    }
    if (cert != NULL && cert[0] != '\0') {
        rc = amqp_ssl_socket_set_key(sock, cert, key);
        if (rc != AMQP_STATUS_OK) {
            client_fail(r->client, HG_ERR_URI, "amqps://: cannot use the client certificate '%s' with key '%s': %s",
                        cert, key, openssl_errors(why, sizeof(why)));
            return NULL;
        }
    }
    amqp_ssl_socket_set_verify_peer(sock, 1);
    amqp_ssl_socket_set_verify_hostname(sock, 0); /* OpenSSL checks the name (below) */
    param = SSL_CTX_get0_param(ctx);
    is_ip = inet_pton(AF_INET, name, addr) == 1 || inet_pton(AF_INET6, name, addr) == 1;
    if ((is_ip ? X509_VERIFY_PARAM_set1_ip_asc(param, name) : X509_VERIFY_PARAM_set1_host(param, name, 0)) != 1) {
        client_fail(r->client, HG_ERR_URI, "amqps://: cannot check the certificate against the name '%s'", name);
        return NULL;
    }
    SSL_CTX_set_app_data(ctx, r);
    SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER, verify_cb);
    SSL_CTX_set_info_callback(ctx, info_cb);
    r->tls_why[0] = '\0';
    return sock;
}

const char *rmq_tls_failure(rmq_t *r, int status, char *buf, size_t len)
{
    char reason[200];

    if (r->tls_why[0] != '\0')
        snprintf(buf, len, "%s", r->tls_why);
    else if (openssl_errors(reason, sizeof(reason))[0] != '\0')
        snprintf(buf, len, "%s: %s", amqp_error_string2(status), reason);
    else
        snprintf(buf, len, "%s", amqp_error_string2(status));
    return buf;
}
