/*
 * tests/helpers/tls_certs.h — a throwaway PKI for the TLS tests, made with
 * the openssl command (Debian's `openssl` package) in the test's temp dir.
 *
 * tc_make writes, into dir, EC P-256 keys and certificates valid from now
 * for two days unless said otherwise:
 *   ca.pem / ca.key                the test CA ("Hourglass Test CA")
 *   server.pem / server.key        CN=127.0.0.1, SAN IP:127.0.0.1 and
 *                                  DNS:localhost, serial TC_SERIAL_SERVER
 *   server2.pem                    the same key and names, serial
 *                                  TC_SERIAL_SERVER2 (the SIGHUP reload test)
 *   expired.pem                    the same key and names, serial
 *                                  TC_SERIAL_EXPIRED, notAfter a day before
 *                                  notBefore: expired
 *   client.pem / client.key        CN=hourglass-test-client, clientAuth,
 *                                  serial TC_SERIAL_CLIENT
 *   revoked.pem / revoked.key      CN=hourglass-revoked-client, clientAuth,
 *                                  serial TC_SERIAL_REVOKED
 *   crl.pem                        the test CA's CRL: TC_SERIAL_REVOKED revoked
 *   crl-all.pem                    the test CA's next CRL: TC_SERIAL_REVOKED
 *                                  and TC_SERIAL_CLIENT revoked
 *   other-ca.pem                   an unrelated CA ("Other Test CA")
 *   other-client.pem / .key        a client certificate signed by it
 * Returns 0 with the paths in *c, or -1 with the failing command's output
 * in err.
 *
 * tc_peer_serial connects to 127.0.0.1:port with TLS (verifying against
 * ca_file) and reads the serial of the certificate the broker presents —
 * what the reload test compares.
 */
#ifndef HG_TESTS_TLS_CERTS_H
#define HG_TESTS_TLS_CERTS_H

#include <stddef.h>

#define TC_OPENSSL "/usr/bin/openssl"

#define TC_SERIAL_SERVER  "1001"
#define TC_SERIAL_SERVER2 "1002"
#define TC_SERIAL_EXPIRED "1003"
#define TC_SERIAL_CLIENT  "2001"
#define TC_SERIAL_REVOKED "2002"

typedef struct tc_certs {
    char dir[512];
    char ca[600], ca_key[600];
    char server[600], server_key[600], server2[600], expired[600];
    char client[600], client_key[600];
    char revoked[600], revoked_key[600], crl[600], crl_all[600];
    char other_ca[600], other_client[600], other_client_key[600];
} tc_certs_t;

int tc_make(const char *dir, tc_certs_t *c, char *err, size_t errlen);

/* Run the openssl command with args (NULL-ended, args[0] its subcommand).
 * 0, or -1 with err naming the subcommand, its exit status and its output. */
int tc_openssl(const char *const *args, char *err, size_t errlen);

/* The serial (upper-case hex, no leading zeros) of the certificate served
 * on 127.0.0.1:port into out[outlen]. 0, or -1 with err. */
int tc_peer_serial(int port, const char *ca_file, char *out, size_t outlen, char *err, size_t errlen);

/* Copy the file at from over the file at to (replaced atomically: a
 * temporary file renamed). 0 / -1. */
int tc_copy_file(const char *from, const char *to);

#endif
