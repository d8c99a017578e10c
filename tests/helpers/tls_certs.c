/*
 * tests/helpers/tls_certs.c — the throwaway PKI of the TLS tests (see
 * tls_certs.h): the openssl command for keys and certificates, the OpenSSL
 * library for reading the certificate a broker serves.
 */
#include "tests/helpers/tls_certs.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <openssl/bn.h>
#include <openssl/err.h>

#include "base/openssl_error.h"
#include <openssl/ssl.h>
#include <openssl/x509.h>

#include "tests/helpers/testutil.h"

static int fail(char *err, size_t errlen, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int fail(char *err, size_t errlen, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
    return -1;
}

/* Run openssl with a's words (TC_OPENSSL first); what it printed goes into
 * err when it fails. */
static int run_openssl(const tu_argv_t *a, char *err, size_t errlen)
{
    char out[4096];
    const char *what = a->n > 1 ? a->word[1] : "(no command)";
    if (tu_argv_check(a) != 0)
        return fail(err, errlen, "openssl %s ...: more than %d arguments, not run", what, TU_ARGV_MAX);
    int rc = tu_run_capture_argv(a, out, sizeof out);
    if (rc != 0)
        return fail(err, errlen, "openssl %s ... exited %d: %s", what, rc, out);
    return 0;
}

/* Run openssl with the NULL-terminated arguments. */
static int run(char *err, size_t errlen, const char *arg0, ...)
{
    tu_argv_t a;
    va_list ap;
    tu_argv_init(&a);
    tu_argv_add(&a, TC_OPENSSL);
    tu_argv_add(&a, arg0);
    va_start(ap, arg0);
    tu_argv_add_va(&a, ap);
    va_end(ap);
    return run_openssl(&a, err, errlen);
}

int tc_openssl(const char *const *args, char *err, size_t errlen)
{
    tu_argv_t a;
    tu_argv_init(&a);
    tu_argv_add(&a, TC_OPENSSL);
    tu_argv_add_list(&a, args);
    return run_openssl(&a, err, errlen);
}

static void path(char *dst, size_t len, const char *dir, const char *name)
{
    snprintf(dst, len, "%s/%s", dir, name);
}

/* A self-signed CA. */
static int make_ca(const char *cert, const char *key, const char *cn, char *err, size_t errlen)
{
    char subj[128];
    snprintf(subj, sizeof subj, "/CN=%s", cn);
    return run(err, errlen, "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
               "-keyout", key, "-out", cert, "-days", "2", "-subj", subj, "-addext",
               "basicConstraints=critical,CA:TRUE", "-addext", "keyUsage=critical,keyCertSign,cRLSign", NULL);
}

/* A key and a signing request for cn. */
static int make_csr(const char *csr, const char *key, const char *cn, char *err, size_t errlen)
{
    char subj[128];
    snprintf(subj, sizeof subj, "/CN=%s", cn);
    return run(err, errlen, "req", "-new", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
               "-keyout", key, "-out", csr, "-subj", subj, NULL);
}

/* Sign csr with the CA into cert: serial (hex), days valid (negative:
 * expired), extensions from the file ext. */
static int sign(const char *csr, const char *ca, const char *ca_key, const char *cert, const char *serial,
                const char *days, const char *ext, char *err, size_t errlen)
{
    char hex[32];
    snprintf(hex, sizeof hex, "0x%s", serial);
    return run(err, errlen, "x509", "-req", "-in", csr, "-CA", ca, "-CAkey", ca_key, "-set_serial", hex, "-days", days,
               "-extfile", ext, "-out", cert, NULL);
}

/* A CRL of the CA into crl revoking the serials (hex, NULL-terminated),
 * made by `openssl ca -gencrl` from a revocation database written here. */
static int make_crl(const char *dir, const char *ca, const char *ca_key, const char *crl, const char *const *serials,
                    char *err, size_t errlen)
{
    char cnf[600], db[600], number[600], conf_text[2048], db_text[1024];
    path(cnf, sizeof cnf, dir, "crl.cnf");
    path(db, sizeof db, dir, "crl-index.txt");
    path(number, sizeof number, dir, "crl-number");
    snprintf(conf_text, sizeof conf_text,
             "[ca]\ndefault_ca = test_ca\n[test_ca]\ndatabase = %s\ncrlnumber = %s\ndefault_md = sha256\n"
             "default_crl_days = 2\n",
             db, number);
    size_t used = 0;
    db_text[0] = '\0';
    for (const char *const *sn = serials; *sn != NULL && used < sizeof db_text; sn++) {
        /* status, expiry, revocation date, serial, file, subject */
        used += (size_t)snprintf(db_text + used, sizeof db_text - used,
                                 "R\t301231000000Z\t200101000000Z\t%s\tunknown\t/CN=x\n", *sn);
    }
    if (tu_write_file(cnf, conf_text) != 0 || tu_write_file(db, db_text) != 0 || tu_write_file(number, "01\n") != 0) {
        return fail(err, errlen, "cannot write the CRL database in %s", dir);
    }
    return run(err, errlen, "ca", "-gencrl", "-config", cnf, "-keyfile", ca_key, "-cert", ca, "-out", crl, NULL);
}

int tc_make(const char *dir, tc_certs_t *c, char *err, size_t errlen)
{
    static const char *const revoked[] = { TC_SERIAL_REVOKED, NULL };
    static const char *const revoked_all[] = { TC_SERIAL_REVOKED, TC_SERIAL_CLIENT, NULL };
    char csr[600], ext_server[600], ext_client[600], other_key[600], other_csr[600];
    memset(c, 0, sizeof *c);
    snprintf(c->dir, sizeof c->dir, "%s", dir);
    path(c->ca, sizeof c->ca, dir, "ca.pem");
    path(c->ca_key, sizeof c->ca_key, dir, "ca.key");
    path(c->server, sizeof c->server, dir, "server.pem");
    path(c->server_key, sizeof c->server_key, dir, "server.key");
    path(c->server2, sizeof c->server2, dir, "server2.pem");
    path(c->expired, sizeof c->expired, dir, "expired.pem");
    path(c->client, sizeof c->client, dir, "client.pem");
    path(c->client_key, sizeof c->client_key, dir, "client.key");
    path(c->revoked, sizeof c->revoked, dir, "revoked.pem");
    path(c->revoked_key, sizeof c->revoked_key, dir, "revoked.key");
    path(c->crl, sizeof c->crl, dir, "crl.pem");
    path(c->crl_all, sizeof c->crl_all, dir, "crl-all.pem");
    path(c->other_ca, sizeof c->other_ca, dir, "other-ca.pem");
    path(other_key, sizeof other_key, dir, "other-ca.key");
    path(c->other_client, sizeof c->other_client, dir, "other-client.pem");
    path(c->other_client_key, sizeof c->other_client_key, dir, "other-client.key");
    path(csr, sizeof csr, dir, "server.csr");
    path(other_csr, sizeof other_csr, dir, "client.csr");
    path(ext_server, sizeof ext_server, dir, "server.ext");
    path(ext_client, sizeof ext_client, dir, "client.ext");
    if (tu_write_file(ext_server, "subjectAltName=IP:127.0.0.1,DNS:localhost\n"
                                  "extendedKeyUsage=serverAuth\n") != 0 ||
        tu_write_file(ext_client, "extendedKeyUsage=clientAuth\n") != 0) {
        return fail(err, errlen, "cannot write the extension files in %s", dir);
    }
    if (make_ca(c->ca, c->ca_key, "Hourglass Test CA", err, errlen) != 0 ||
        make_ca(c->other_ca, other_key, "Other Test CA", err, errlen) != 0 ||
        make_csr(csr, c->server_key, "127.0.0.1", err, errlen) != 0 ||
        sign(csr, c->ca, c->ca_key, c->server, TC_SERIAL_SERVER, "2", ext_server, err, errlen) != 0 ||
        sign(csr, c->ca, c->ca_key, c->server2, TC_SERIAL_SERVER2, "2", ext_server, err, errlen) != 0 ||
        sign(csr, c->ca, c->ca_key, c->expired, TC_SERIAL_EXPIRED, "-1", ext_server, err, errlen) != 0 ||
        make_csr(other_csr, c->client_key, "hourglass-test-client", err, errlen) != 0 ||
        sign(other_csr, c->ca, c->ca_key, c->client, TC_SERIAL_CLIENT, "2", ext_client, err, errlen) != 0 ||
        make_csr(other_csr, c->revoked_key, "hourglass-revoked-client", err, errlen) != 0 ||
        sign(other_csr, c->ca, c->ca_key, c->revoked, TC_SERIAL_REVOKED, "2", ext_client, err, errlen) != 0 ||
        make_crl(dir, c->ca, c->ca_key, c->crl, revoked, err, errlen) != 0 ||
        make_crl(dir, c->ca, c->ca_key, c->crl_all, revoked_all, err, errlen) != 0 ||
        make_csr(other_csr, c->other_client_key, "other-client", err, errlen) != 0 ||
        sign(other_csr, c->other_ca, other_key, c->other_client, "3001", "2", ext_client, err, errlen) != 0) {
        return -1;
    }
    return 0;
}

int tc_peer_serial(int port, const char *ca_file, char *out, size_t outlen, char *err, size_t errlen)
{
    int rc = -1;
    SSL_CTX *ctx = SSL_CTX_new(TLS_client_method());
    SSL *ssl = NULL;
    int fd = -1;
    struct timeval tv = { 10, 0 };
    if (ctx == NULL) {
        fail(err, errlen, "out of resources");
        goto out;
    }
    /* a connect with a deadline per attempt (tu_tcp_connect), not the kernel's SYN backoff */
    if ((fd = tu_tcp_connect(port)) < 0) {
        fail(err, errlen, "connect to 127.0.0.1:%d failed: %s", port, strerror(errno));
        goto out;
    }
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER, NULL);
    if (SSL_CTX_load_verify_locations(ctx, ca_file, NULL) != 1) {
        fail(err, errlen, "cannot load %s", ca_file);
        goto out;
    }
    ssl = SSL_new(ctx);
    SSL_set_fd(ssl, fd);
    if (SSL_connect(ssl) != 1) {
        char why[256];
        openssl_last_error(why, sizeof why, "no OpenSSL error recorded");
        fail(err, errlen, "TLS handshake with port %d failed: %s (verify: %s)", port, why,
             X509_verify_cert_error_string(SSL_get_verify_result(ssl)));
        goto out;
    }
    X509 *x = SSL_get1_peer_certificate(ssl);
    if (x == NULL) {
        fail(err, errlen, "no peer certificate");
        goto out;
    }
    BIGNUM *bn = ASN1_INTEGER_to_BN(X509_get0_serialNumber(x), NULL);
    char *hex = bn ? BN_bn2hex(bn) : NULL;
    snprintf(out, outlen, "%s", hex ? hex : "?");
    OPENSSL_free(hex);
    BN_free(bn);
    X509_free(x);
    SSL_shutdown(ssl);
    rc = 0;
out:
    SSL_free(ssl);
    SSL_CTX_free(ctx);
    if (fd >= 0) {
        close(fd);
    }
    return rc;
}

int tc_copy_file(const char *from, const char *to)
{
    char tmp[700], data[65536];
    FILE *in = fopen(from, "rb");
    if (in == NULL) {
        return -1;
    }
    size_t n = fread(data, 1, sizeof data, in);
    fclose(in);
    snprintf(tmp, sizeof tmp, "%s.tmp", to);
    FILE *out = fopen(tmp, "wb");
    if (out == NULL) {
        return -1;
    }
    int ok = fwrite(data, 1, n, out) == n;
    ok = (fclose(out) == 0) && ok;
    return ok && rename(tmp, to) == 0 ? 0 : -1;
}
