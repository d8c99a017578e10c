/*
 * db/keys.h — the MariaDB connection keys of hourglass-consumer and
 * hourglass-compensator: one set of config-table rows (common/cfg.h), one
 * set of fields, one conversion to the connection parameters of db/conn.h.
 *
 * A program puts DB_KEYS_FIELDS in its config struct (flat fields
 * mysql_host … mysql_lock_wait_timeout_ms) and DB_KEYS_ROWS(its_config_t) in
 * its cfg_key_t table; the keys are
 * mysql-host, mysql-socket, mysql-port, mysql-user, mysql-password,
 * mysql-password-file (exclusive with mysql-password), mysql-database
 * (required), mysql-connect-timeout, mysql-read-timeout,
 * mysql-write-timeout, mysql-lock-wait-timeout, mysql-idle-transaction-timeout,
 * mysql-tls (off|on|verify), mysql-tls-ca-file, mysql-tls-cert-file,
 * mysql-tls-key-file (checked by db/tls_check.h's rules).
 * The timeout defaults are the
 * connection module's (DB_DEFAULT_*), so a key left unset and a parameter
 * left 0 mean the same.
 *
 * Header only: the checks are static inline, so libhourglass (which
 * compiles db/ in) carries nothing of the config engine. The mysql-tls*
 * files are checked by db/tls_check.c (OpenSSL's readers), which a program
 * including this header links: db/libhgtlscheck.la and $(CRYPTO_LIBS).
 * Main thread, at start-up.
 */
#ifndef HG_DB_KEYS_H
#define HG_DB_KEYS_H

#include <stddef.h>
#include <stdio.h>

#include "common/cfg.h"
#include "common/passwd.h"
#include "db/conn.h"
#include "db/tls_check.h"

/* The fields, inside the program's config struct. */
#define DB_KEYS_FIELDS                                                                                \
    char *mysql_host, *mysql_socket, *mysql_user, *mysql_password, *mysql_database; /* NULL: unset */ \
    char *mysql_password_file;                                                      /* NULL: unset */ \
    char mysql_password_read[PASSWD_FILE_MAX + 1]; /* what db_keys_credentials read from it */        \
    unsigned long long mysql_port;                 /* 0: 3306 */                                      \
    unsigned long long mysql_connect_timeout_ms, mysql_read_timeout_ms, mysql_write_timeout_ms,       \
        mysql_lock_wait_timeout_ms, mysql_idle_transaction_timeout_ms;                                \
    int mysql_tls;                                                     /* hg_order_tls_t */           \
    char *mysql_tls_ca_file, *mysql_tls_cert_file, *mysql_tls_key_file /* NULL: unset */

#define DB_KEYS_DAY_MS      86400000LL
#define DB_KEYS_TEXT_(n)    #n
#define DB_KEYS_SECONDS_(n) DB_KEYS_TEXT_(n) "s" /* DB_KEYS_SECONDS_(5) is "5s" */

/* The rows, for a table of the program's config_type (with DB_KEYS_FIELDS). */
#define DB_KEYS_ROWS(config_type)                                                                                    \
    { CFG_KEY("mysql-host", CFG_STRING, NULL, 0, 0, offsetof(config_type, mysql_host),                               \
              "MariaDB host (unset: localhost / the socket)") },                                                     \
        { CFG_KEY("mysql-socket", CFG_STRING, NULL, 0, 0, offsetof(config_type, mysql_socket),                       \
                  "MariaDB unix socket path") },                                                                     \
        { CFG_KEY("mysql-port", CFG_INT, "0", 0, 65535, offsetof(config_type, mysql_port),                           \
                  "MariaDB TCP port (0: 3306)") },                                                                   \
        { CFG_KEY("mysql-user", CFG_STRING, NULL, 0, 0, offsetof(config_type, mysql_user),                           \
                  "MariaDB user (unset: the current user)") },                                                       \
        { CFG_KEY("mysql-password", CFG_STRING, NULL, 0, 0, offsetof(config_type, mysql_password),                   \
                  "MariaDB password (visible to whoever reads this file: prefer mysql-password-file)"),              \
          .secret = CFG_SECRET_VALUE },                                                                              \
        { CFG_KEY("mysql-password-file", CFG_STRING, NULL, 0, 0, offsetof(config_type, mysql_password_file),         \
                  "file holding the MariaDB password instead of mysql-password (chmod 600; a rotated one: "          \
                  "docs/security.md)") },                                                                            \
        { CFG_KEY("mysql-database", CFG_STRING, NULL, 0, 0, offsetof(config_type, mysql_database),                   \
                  "database holding the orders (required)"),                                                         \
          .required = 1 },                                                                                           \
        { CFG_KEY("mysql-connect-timeout", CFG_DURATION, DB_KEYS_SECONDS_(DB_DEFAULT_CONNECT_TIMEOUT_S), 1000,       \
                  3600000, offsetof(config_type, mysql_connect_timeout_ms), "connect timeout (whole seconds)") },    \
        { CFG_KEY("mysql-read-timeout", CFG_DURATION, DB_KEYS_SECONDS_(DB_DEFAULT_READ_TIMEOUT_S), 1000,             \
                  DB_KEYS_DAY_MS, offsetof(config_type, mysql_read_timeout_ms),                                      \
                  "read timeout (whole seconds; above mysql-lock-wait-timeout)") },                                  \
        { CFG_KEY("mysql-write-timeout", CFG_DURATION, DB_KEYS_SECONDS_(DB_DEFAULT_WRITE_TIMEOUT_S), 1000,           \
                  DB_KEYS_DAY_MS, offsetof(config_type, mysql_write_timeout_ms), "write timeout (whole seconds)") }, \
        { CFG_KEY("mysql-lock-wait-timeout", CFG_DURATION, "5s", 0, DB_KEYS_DAY_MS,                                  \
                  offsetof(config_type, mysql_lock_wait_timeout_ms),                                                 \
                  "session innodb_lock_wait_timeout: the longest a statement waits for a row lock "                  \
                  "(whole seconds; 0: the server's, 50 s by default)") },                                            \
        { CFG_KEY("mysql-idle-transaction-timeout", CFG_DURATION, "5s", 0, DB_KEYS_DAY_MS,                           \
                  offsetof(config_type, mysql_idle_transaction_timeout_ms),                                          \
                  "cancel and relay connections: the server rolls back a transaction idle this long and drops the "  \
                  "connection, so a frozen process loses its row locks (whole seconds; 0: never)") },                \
        { CFG_KEY("mysql-tls", CFG_ENUM, "off", 0, 2, offsetof(config_type, mysql_tls),                              \
                  "TLS to MariaDB: on encrypts (TLS 1.2+, AEAD suites) and refuses a server without TLS before "     \
                  "sending the login; verify also checks the server's certificate against mysql-tls-ca-file and "    \
                  "its name against mysql-host"),                                                                    \
          .words = "off|on|verify" },                                                                                \
        { CFG_KEY("mysql-tls-ca-file", CFG_STRING, NULL, 0, 0, offsetof(config_type, mysql_tls_ca_file),             \
                  "PEM CA file the MariaDB server's certificate must chain to (required by mysql-tls verify)"),      \
          .hint = "FILE" },                                                                                          \
        { CFG_KEY("mysql-tls-cert-file", CFG_STRING, NULL, 0, 0, offsetof(config_type, mysql_tls_cert_file),         \
                  "PEM client certificate for MariaDB (a user created REQUIRE X509), with mysql-tls-key-file"),      \
          .hint = "FILE" },                                                                                          \
    {                                                                                                                \
        CFG_KEY("mysql-tls-key-file", CFG_STRING, NULL, 0, 0, offsetof(config_type, mysql_tls_key_file),             \
                "the private key of mysql-tls-cert-file (PEM, unencrypted)"),                                        \
            .hint = "FILE"                                                                                           \
    }

/* ms as whole seconds for the client library, rounding up. */
static inline unsigned db_keys_seconds(unsigned long long ms)
{
    return (unsigned)((ms + 999) / 1000);
}

/* Checks beyond the table's, on the DB_KEYS_FIELDS of the config *k:
 * - mysql-socket, when set, is an absolute path;
 * - mysql-lock-wait-timeout, when set (not 0), is below mysql-read-timeout,
 *   both as the whole seconds they are sent as. A statement waiting for a row
 *   lock longer than the read timeout is cut by the client, which drops the
 *   connection (its transaction with it) instead of getting the server's
 *   "Lock wait timeout exceeded" it can retry on the same connection;
 * - the mysql-tls* keys: db_tls_check (verify needs mysql-tls-ca-file, the
 *   certificate and its key together, no file with mysql-tls off, each file
 *   read by OpenSSL: every CA of the bundle, an unencrypted key that is the
 *   certificate's).
 * Returns 0, or -1 with err naming the key. */
#define DB_KEYS_CHECK(k, err, errlen)                                                                             \
    db_keys_check((k)->mysql_socket, (k)->mysql_read_timeout_ms, (k)->mysql_lock_wait_timeout_ms, (k)->mysql_tls, \
                  (k)->mysql_tls_ca_file, (k)->mysql_tls_cert_file, (k)->mysql_tls_key_file, err, errlen)
static inline int db_keys_check(const char *socket, unsigned long long read_timeout_ms,
                                unsigned long long lock_wait_timeout_ms, int tls, const char *tls_ca_file,
                                const char *tls_cert_file, const char *tls_key_file, char *err, size_t errlen)
{
    static const db_tls_names_t tls_keys = { "mysql-tls", "mysql-tls-ca-file", "mysql-tls-cert-file",
                                             "mysql-tls-key-file" };
    if (db_tls_check(&tls_keys, tls, tls_ca_file, tls_cert_file, tls_key_file, err, errlen) != 0)
        return -1;
    if (socket != NULL && socket[0] != '\0' && socket[0] != '/') {
        snprintf(err, errlen, "mysql-socket: '%s' is not an absolute path", socket);
        return -1;
    }
    unsigned read_s = db_keys_seconds(read_timeout_ms), lock_s = db_keys_seconds(lock_wait_timeout_ms);
    if (lock_s != 0 && read_s != 0 && lock_s >= read_s) {
        snprintf(err, errlen,
                 "mysql-lock-wait-timeout: %us is not below mysql-read-timeout %us (a statement waiting that "
                 "long for a row lock would be cut by the read timeout and its connection dropped): lower the "
                 "lock wait or raise the read timeout",
                 lock_s, read_s);
        return -1;
    }
    return 0;
}

/* The password of mysql-password-file, on the DB_KEYS_FIELDS of the config
 * *k: both mysql-password and mysql-password-file set is an error naming
 * both; the file is read (passwd_read_file: not readable, empty, a NUL byte
 * or longer than PASSWD_FILE_MAX bytes is an error naming the file) into
 * k->mysql_password_read, which DB_KEYS_TO_PARAMS then passes on. Returns
 * 0, or -1 with err naming the key. A program calls it at start-up, at
 * --check-config and at each SIGHUP. */
#define DB_KEYS_CREDENTIALS(k, err, errlen)                                                      \
    db_keys_credentials((k)->mysql_password, (k)->mysql_password_file, (k)->mysql_password_read, \
                        sizeof(k)->mysql_password_read, err, errlen)
static inline int db_keys_credentials(const char *password, const char *password_file, char *out, size_t outlen,
                                      char *err, size_t errlen)
{
    char why[PASSWD_FILE_MAX + 200];
    out[0] = '\0';
    if (password_file == NULL)
        return 0;
    if (password != NULL) {
        snprintf(err, errlen,
                 "mysql-password and mysql-password-file are both set: keep one "
                 "(mysql-password-file "
                 "keeps the "
                 "password out of the configuration)");
        return -1;
    }
    if (passwd_read_file(password_file, out, outlen, why, sizeof why) != 0) {
        snprintf(err, errlen, "mysql-password-file: %s", why);
        return -1;
    }
    return 0;
}

/* The passwd_key_file_t of mysql-password-file of the config *k, for
 * passwd_warn_exposed (the program warns at start-up and at --check-config
 * when others can read or write it). */
#define DB_KEYS_SECRET_FILE(k)                          \
    {                                                   \
        "mysql-password-file", (k)->mysql_password_file \
    }

/* Fill the connection fields of an hg_order_db_params_t *p from the
 * DB_KEYS_FIELDS of the config *k (p->sql is left alone).
 * idle_transaction_timeout_s is left 0: it belongs on the connections
 * whose transactions last milliseconds (the cancel connections, the
 * compensator's relay: a program sets it there with db_keys_seconds of
 * mysql_idle_transaction_timeout_ms), never on one that holds a transaction
 * open across a slow call. The password is mysql-password-file's as read by
 * DB_KEYS_CREDENTIALS, else mysql-password. */
#define DB_KEYS_TO_PARAMS(k, p)                                                                            \
    do {                                                                                                   \
        (p)->host = (k)->mysql_host;                                                                       \
        (p)->socket = (k)->mysql_socket;                                                                   \
        (p)->port = (unsigned)(k)->mysql_port;                                                             \
        (p)->user = (k)->mysql_user;                                                                       \
        (p)->password = (k)->mysql_password_file != NULL ? (k)->mysql_password_read : (k)->mysql_password; \
        (p)->database = (k)->mysql_database;                                                               \
        (p)->connect_timeout_s = db_keys_seconds((k)->mysql_connect_timeout_ms);                           \
        (p)->read_timeout_s = db_keys_seconds((k)->mysql_read_timeout_ms);                                 \
        (p)->write_timeout_s = db_keys_seconds((k)->mysql_write_timeout_ms);                               \
        (p)->lock_wait_timeout_s = db_keys_seconds((k)->mysql_lock_wait_timeout_ms);                       \
        (p)->tls = (hg_order_tls_t)(k)->mysql_tls;                                                         \
        (p)->tls_ca_file = (k)->mysql_tls_ca_file;                                                         \
        (p)->tls_cert_file = (k)->mysql_tls_cert_file;                                                     \
        (p)->tls_key_file = (k)->mysql_tls_key_file;                                                       \
    } while (0)

#endif
