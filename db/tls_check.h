/*
 * db/tls_check.h — the checks of the TLS parameters of a MariaDB connection
 * (hg_order_db_params_t's tls, tls_ca_file, tls_cert_file, tls_key_file),
 * shared by hg_order_db_open (whose errors name the struct's fields) and
 * db/keys.h (whose errors name the mysql-tls* config keys): one set of rules,
 * the names passed in.
 *
 * The files are read by OpenSSL's own PEM and X509 readers — the ones
 * Connector/C loads them with when it connects — so a file passes here
 * exactly when the connection can load it: every certificate of a CA bundle,
 * any PEM private key ("PRIVATE KEY", "EC PRIVATE KEY", "RSA PRIVATE KEY"),
 * and the key checked against the client certificate.
 *
 * Compiled alone into db/libhgtlscheck.la (libcrypto only, no Connector/C):
 * libhourglass gets it through db/libhgdb.la, and hourglass-consumer,
 * hourglass-cli and hourglass-console, which reach db/keys.h without linking
 * db/ (libhourglass hides its db_* symbols), link it themselves. Pure but for
 * reading the files; thread-safe (OpenSSL's error queue is per thread, and
 * is left empty).
 */
#ifndef HG_DB_TLS_CHECK_H
#define HG_DB_TLS_CHECK_H

#include <stddef.h>

/* The names an error uses for the mode and the three files. */
typedef struct db_tls_names {
    const char *mode, *ca_file, *cert_file, *key_file;
} db_tls_names_t;

#define DB_TLS_FILE_MAX (16 * 1024 * 1024) /* bytes: a larger file is refused, not read */

/* The rules, mode being an hg_order_tls_t: mode is off, on or verify;
 * verify needs the CA file; the client certificate and its key come
 * together; no file is given with the mode off (it would not be used: a
 * plaintext connection the operator thought was TLS); each file given is
 * a regular file (a FIFO, a socket or a device is refused, "… is not a
 * regular file (a FIFO)", without waiting on it) and checked by OpenSSL:
 * - the CA file: readable, PEM (a DER file is named as such), at least one
 *   certificate, each certificate of a bundle well formed (a damaged one is
 *   named by its position);
 * - the certificate file: its first certificate well formed;
 * - the key file: a PEM private key of any kind, not encrypted (no
 *   passphrase can be given: an encrypted key is an error saying so), and
 *   the key of the certificate file's certificate.
 * Returns 0, or -1 with err naming the field or key (n's names), the file
 * and the problem. */
int db_tls_check(const db_tls_names_t *n, int mode, const char *ca, const char *cert, const char *key, char *err,
                 size_t errlen);

#endif
