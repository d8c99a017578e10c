/*
 * db/tls_guard.h — refuse a MariaDB server without TLS before the login.
 *
 * Connector/C 3.3 with MYSQL_OPT_SSL_ENFORCE but no certificate check
 * (mysql-tls = on) goes on in plaintext when the server's greeting lacks
 * CLIENT_SSL: its login packet carries the user name and the password's
 * mysql_native_password scramble (a SHA-1 challenge response that whoever
 * reads the wire can attack offline). Only the certificate check (verify)
 * or a fingerprint make it refuse; no option does for on.
 *
 * The guard is a client authentication plugin, registered in the process's
 * Connector/C and made a connection's first plugin (MYSQL_DEFAULT_AUTH).
 * Connector/C calls it once the greeting is read and before anything is
 * written: it refuses when the greeting lacks CLIENT_SSL (2026, nothing
 * sent after the TCP or socket connect), else it answers with an empty
 * login — encrypted: Connector/C starts TLS in that first write — and the
 * server, which does not know the plugin, asks for the account's own
 * (mysql_native_password, ed25519 …), which Connector/C then runs as
 * always. Cost: one more round trip per connect.
 *
 * Tested behind it (tests/integration/test_db_tls.c, MariaDB 10.11):
 * mysql_native_password, ed25519, ed25519 OR mysql_native_password,
 * unix_socket over the socket, PAM (client plugin dialog); a wrong
 * password stays the server's 1045.
 *
 * An option file read on the armed handle (MYSQL_READ_DEFAULT_FILE or
 * _GROUP) is applied at the connect, after this, and its default-auth
 * replaces the guard: the login then goes in plaintext. Hourglass reads
 * none (test_db_tls's no_tls_stub suite checks it with a ~/.my.cnf naming
 * mysql_clear_password); arming again after that option does not help.
 *
 * A server that does not announce CLIENT_PLUGIN_AUTH (before MySQL 5.5)
 * ignores MYSQL_DEFAULT_AUTH: there the guard is not called, and the
 * caller's check after the connect (no cipher: refused) is the only one.
 */
#ifndef HG_DB_TLS_GUARD_H
#define HG_DB_TLS_GUARD_H

#include <mysql.h>

/* Make the guard m's first authentication plugin (register it in
 * Connector/C first, once per process; thread-safe). Call between
 * mysql_init and mysql_real_connect, for mysql-tls on and verify. */
void db_tls_guard_arm(MYSQL *m);

/* 1 when m's failed connect was the guard's refusal: the server's greeting
 * offered no TLS and nothing was sent after it. */
int db_tls_guard_refused(MYSQL *m);

#endif
