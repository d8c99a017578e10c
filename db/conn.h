/*
 * db/conn.h — the one MariaDB connection module: connect options, timeouts,
 * the classification of errors, lazy reconnect, statements prepared on
 * first use.
 *
 * Used by libhourglass's order cancel (lib/order_cancel.c, compiled into the
 * library and hidden by its export list), by hourglass-compensator's own
 * queries (relay, pages, GET_LOCK, gauges) and by the test fixtures. The
 * parameters and the error are the public types of <hourglass/order.h>
 * (hg_order_db_params_t, hg_order_error_t): the library's users fill and
 * read them, so nothing is converted on the way.
 *
 * Rules every connection follows (MariaDB Connector/C):
 *   - MYSQL_OPT_RECONNECT off: a silent reconnect would drop the transaction
 *     in flight, GET_LOCK locks and prepared statements without telling us;
 *   - TLS as params->tls says (hg_order_tls_t): off, or TLS required with
 *     TLS 1.2 as the minimum and base/tls_policy.h's suites for TLS 1.2, the
 *     certificate and host name checked for verify; a server whose greeting
 *     offers no TLS is refused before the login is sent (db/tls_guard.h:
 *     Connector/C alone sends it in plaintext unless it checks the
 *     certificate), and a session that came up without a cipher anyway is
 *     refused after the connect: both 2026. The file rules
 *     are db/tls_check.h's, checked by the caller (hg_order_db_open,
 *     DB_KEYS_CHECK) before;
 *   - utf8mb4; connect / read / write timeouts from the parameters
 *     (DB_DEFAULT_* when 0); innodb_lock_wait_timeout and
 *     idle_transaction_timeout when given (the latter on MariaDB only:
 *     MySQL has no such variable);
 *   - connected lazily: db_connect is a no-op on a live connection and the
 *     reconnect after a loss; statements are prepared again on first use
 *     after each connect;
 *   - an error that leaves the connection unusable or in doubt (DB_LOST:
 *     every client error 2000-2999, 1927 killed, 4031 disconnected for
 *     inactivity, 1053 shutdown, 1290 read-only) closes it; the next call
 *     reconnects.
 *
 * Errors: 0 / -1 (or a pointer / NULL) with err (may be NULL) holding the
 * MySQL error number, its SQLSTATE and "[role: ]what: <code> <server text>".
 *
 * Threads: a db_conn_t belongs to one thread at a time, except for
 * db_interrupt, which any thread may call while the owner uses it.
 * db_classify and the bind helpers are pure and thread-safe.
 */
#ifndef HG_DB_CONN_H
#define HG_DB_CONN_H

#include <stddef.h>
#include <stdint.h>

#include <mysql.h>

#include "include/hourglass/order.h"

/* Defaults for parameters left 0 (also the mysql-* config keys' defaults). */
#define DB_DEFAULT_CONNECT_TIMEOUT_S 5
#define DB_DEFAULT_READ_TIMEOUT_S    60
#define DB_DEFAULT_WRITE_TIMEOUT_S   60

/* MariaDB 10.11's ER_CLIENT_INTERACTION_TIMEOUT ("disconnected by the server
 * because of inactivity"); Connector/C's mysqld_error.h predates it and gives
 * 4031 an older name, so the number is spelled out. */
#define DB_ER_CLIENT_INTERACTION_TIMEOUT 4031

/* ------------------------------------------------------------------ errors */

/* What an error number means for the caller's next step. */
typedef enum db_class {
    DB_PERMANENT = 0, /* about the statement or the data: a retry will not fix it */
    DB_TRANSIENT,     /* about the moment; the connection is fine: ROLLBACK, retry the transaction */
    DB_LOST           /* transient, and the connection is unusable or in doubt: close it, reconnect */
} db_class_t;

/* Classify a MySQL/MariaDB error number:
 *   DB_LOST       every client error 2000-2999 (2006 gone away, 2013 lost
 *                 during a query, 2002/2003 cannot connect …: the outcome of a
 *                 COMMIT in flight is unknown), 1927 connection killed, 4031
 *                 disconnected for inactivity, 1053 server shutdown, 1290
 *                 read-only (a demoted primary: the next connection may
 *                 reach the new one);
 *   DB_TRANSIENT  1213 deadlock (the server rolled the transaction back),
 *                 1205 lock wait timeout (only the statement was rolled back:
 *                 the caller rolls back the rest), 1317 query interrupted,
 *                 1969 max_statement_time, 1040 too many connections, 1615
 *                 statement needs re-preparing, and the set-up errors of
 *                 db_setup_hint (1044, 1045, 1049, 1142, 1143, 1146, and
 *                 1021/1114 a full disk: not the order's fault, healed by
 *                 fixing the set-up or freeing space);
 *   DB_PERMANENT  everything else (syntax, unknown column, constraint …).
 * Pure; thread-safe. */
db_class_t db_classify(unsigned code);

/* For an error that waiting will not heal because the set-up is wrong — 1045
 * access denied (user or password), 1044 no rights on the database, 1049 no
 * such database, 1142/1143 a missing GRANT on a table or column, 1146 no such
 * table (the schema is not loaded), 1021/1114 a full disk, 2059 the client
 * side of the account's authentication plugin cannot be loaded (db_connect
 * reports Connector/C's "Plugin NAME could not be loaded" as 2059, not as
 * the server's 1045 that follows it) — the fix, in a few words naming the
 * config keys ("check mysql-user and mysql-password …"); NULL for any other
 * code. Such an error is DB_TRANSIENT for db_classify (2059, a client
 * error: DB_LOST, the failed connect has nothing to close). Pure;
 * thread-safe. */
const char *db_setup_hint(unsigned code);

/* 1 when code is a client-side error (2000-2999): the server could not be
 * reached or the connection broke, whatever the statement. */
int db_is_client_error(unsigned code);

/* 1 when mysql_get_server_info's text names MariaDB ("10.11.6-MariaDB-0+deb12u1"),
 * 0 for MySQL or NULL. Pure. */
int db_server_is_mariadb(const char *server_info);

/* Fill err (may be NULL) with code 0, no SQLSTATE and a formatted message. */
void db_error_set(hg_order_error_t *err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Fill err (may be NULL) from a statement's error (st, when not NULL) or a
 * connection's (m; NULL: "not connected", 2013): "what: <code> <text>". A
 * failure the client library left without a number is reported as 2000
 * (CR_UNKNOWN_ERROR), never as "0 success". */
void db_error_mysql(hg_order_error_t *err, const char *what, MYSQL *m, MYSQL_STMT *st);

/* ------------------------------------------------------------------ the connection */

/* Options of db_conn_new. */
#define DB_AUTOCOMMIT     0x1 /* autocommit on; without it every statement opens a transaction */
#define DB_READ_COMMITTED 0x2 /* SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED */

/* A statement a module prepares on a connection: its name for messages, its
 * text, the number of placeholders the caller binds (checked against the
 * server's count when prepared; 0: not checked) and the prepared handle on
 * the current connection (NULL until first use after each connect).
 * Initialised by the module:
 *   static db_stmt_t select_rows = {"relay-select", "SELECT …", 0, NULL};
 * A db_stmt_t belongs to one connection (the first that prepares it) and
 * must stay at its address while that connection lives. */
typedef struct db_stmt {
    const char *name;
    const char *sql;
    unsigned params;
    MYSQL_STMT *st;
} db_stmt_t;

typedef struct db_conn db_conn_t;

/* A new connection (not connected yet) with a copy of the parameters
 * (params->sql is ignored); role prefixes its messages ("relay", "lock"; NULL
 * or "" for none); flags: DB_AUTOCOMMIT, DB_READ_COMMITTED. Never NULL (out
 * of memory aborts). */
db_conn_t *db_conn_new(const hg_order_db_params_t *params, const char *role, unsigned flags);

/* The session's wait_timeout (seconds; 0: the server's), set at each
 * connect from then on: the server closes the connection after that long
 * without a statement, so a frozen holder of a GET_LOCK loses it in that
 * time (the server's default is 8 hours). */
void db_set_idle_timeout(db_conn_t *c, unsigned seconds);

/* Between transactions, never inside one: when the server has closed the
 * idle connection (wait_timeout, idle_transaction_timeout, KILL), drop it
 * now, so the next statement reconnects instead of failing with "gone
 * away". A poll of the socket, no round trip. 1 when it was dropped. */
int db_drop_if_closed(db_conn_t *c);

/* The password of every later connect of every connection (of this copy
 * of the module: libhourglass compiles its own), instead of the one in the
 * parameters: before each mysql_real_connect, hook(arg, out, outlen) is
 * called and, when it returns 1, out (NUL-terminated, outlen is
 * DB_PASSWORD_MAX + 1) is the password — a program whose password lives in
 * a file that is rotated reads the file there (mysql-password-file), so a
 * reconnect after KILL CONNECTION or a server restart takes the new one.
 * 0: the parameters' password. NULL hook: none. Set once at start-up, before
 * any thread connects; the hook is called from whichever thread connects. */
#define DB_PASSWORD_MAX 1024
void db_set_password_hook(int (*hook)(void *arg, char *out, size_t outlen), void *arg);

/* Close the statements and the connection, free. NULL is fine. */
void db_conn_free(db_conn_t *c);

/* Connect when disconnected (a no-op on a live connection). Returns 0, or
 * -1 with err: "connect to <socket or host>: <code> <text>". */
int db_connect(db_conn_t *c, hg_order_error_t *err);

/* Close every prepared statement and the connection; the next call
 * reconnects and re-prepares. */
void db_disconnect(db_conn_t *c);

/* Cut c from another thread, for a stop that must not wait on a hung
 * server: shut its socket down both ways (shutdown(2)), so a call of the
 * owner blocked on the server returns at once with 2013 (lost; its
 * transaction dies with the connection and the server rolls it back), and
 * refuse every later connect (2002 "interrupted: the connection was cut for
 * a stop"). For good: an interrupted connection never connects again. A
 * connect in progress is not cut (mysql-connect-timeout bounds it); it is
 * refused when it returns. Thread-safe: the one function another thread may
 * call while the owner uses c, until db_conn_free. */
void db_interrupt(db_conn_t *c);

/* 1 when the server's last reply said a transaction is open
 * (SERVER_STATUS_IN_TRANS), or the status cannot be read; 0 when
 * disconnected or none is open. No round trip. */
int db_in_transaction(db_conn_t *c);

/* Close every prepared statement but keep the connection (after 1615). */
void db_drop_statements(db_conn_t *c);

/* The connection, NULL while disconnected. */
MYSQL *db_mysql(db_conn_t *c);

/* CONNECTION_ID() of the current connection, 0 while disconnected. */
unsigned long db_connection_id(const db_conn_t *c);

/* How many times the connection was made, the first one included. */
uint64_t db_connects(const db_conn_t *c);

/* How many db_commit calls on c failed after sending the COMMIT with the
 * connection lost or in doubt (DB_LOST: 2013, 1927 …): their transactions may
 * have committed. A COMMIT never sent (the connection died before it) or
 * refused by the server (rolled back) is not counted. */
uint64_t db_commits_unknown(const db_conn_t *c);

/* fn(arg) from now on each time a round trip of c to the server returns,
 * whatever it answered: a connect (made or refused), a statement (a row, an
 * error, a lock wait timeout, a deadlock), a COMMIT or ROLLBACK, a prepare.
 * A watchdog of the owner's thread restarts its clock there (a /healthz
 * stuck check: only a round trip that does not return is stuck). Runs on
 * the owner's thread; fn must be quick and must not use c. NULL fn: none. */
void db_set_progress(db_conn_t *c, void (*fn)(void *arg), void *arg);

/* Call c's db_set_progress callback now: for a module that sends a
 * statement with Connector/C itself (mysql_query on db_mysql), once it
 * returned without an error (db_fail reports the errors). */
void db_progress(db_conn_t *c);

/* Record a failure of `what` (the error of st when given, else of the
 * connection) in err with the role in front, close the connection when the
 * error lost it (DB_LOST), and return the class. An error is an answer:
 * db_progress runs. */
db_class_t db_fail(db_conn_t *c, const char *what, MYSQL_STMT *st, hg_order_error_t *err);

/* A statement without parameters or result set (START TRANSACTION, COMMIT,
 * SET …), as text; any result is discarded. Connects first. Returns 0 / -1
 * (db_fail ran). */
int db_query(db_conn_t *c, const char *sql, hg_order_error_t *err);

/* START TRANSACTION; COMMIT (fails with 2013 when the connection was lost
 * during the transaction). Return 0 / -1. */
int db_begin(db_conn_t *c, hg_order_error_t *err);
int db_commit(db_conn_t *c, hg_order_error_t *err);

/* ROLLBACK when connected. Returns 0, or -1 when it failed — the connection
 * is then closed (a handle never carries a half transaction on). */
int db_rollback(db_conn_t *c);

/* Connect, and prepare s on first use on this connection: "<name>: prepare:
 * <code> <text>" when the server refuses it; s->params, when not 0, must
 * equal the server's count of placeholders (else 1210, "<name>: the server
 * counts N placeholders, the statement has M"). Returns the prepared
 * statement, or NULL with err (db_fail ran). */
MYSQL_STMT *db_prepare(db_conn_t *c, db_stmt_t *s, hg_order_error_t *err);

/* db_prepare, bind params (may be NULL when n is 0) and execute. When
 * result is not NULL, bind it as the result row and buffer the whole result
 * set (mysql_stmt_store_result): the caller then calls mysql_stmt_fetch until
 * MYSQL_NO_DATA and mysql_stmt_free_result. Returns the statement, or NULL
 * with err filled (db_fail ran: a lost connection is closed). */
MYSQL_STMT *db_exec(db_conn_t *c, db_stmt_t *s, MYSQL_BIND *params, size_t n, MYSQL_BIND *result,
                    hg_order_error_t *err);

/* End the fetch loop of st (s run by db_exec with a result): rc is what the
 * last mysql_stmt_fetch returned. 1, an error: "<name>: fetch" is recorded
 * in err through db_fail (which closes a lost connection, its statements
 * with it) and -1 returned; anything else (MYSQL_NO_DATA): 0. The result set
 * is freed either way, unless the connection was closed. */
int db_fetch_end(db_conn_t *c, const db_stmt_t *s, MYSQL_STMT *st, int rc, hg_order_error_t *err);

/* ------------------------------------------------------------------ values */

/* Fill one MYSQL_BIND (zeroed first) for a value that lives in the caller's
 * variable. db_bind_str sets *len = strlen(s) and binds it; a NULL s binds
 * SQL NULL. db_bind_i64_null: a nullable result column, *is_null receives 1
 * for NULL. */
void db_bind_u64(MYSQL_BIND *b, uint64_t *v);
void db_bind_i64(MYSQL_BIND *b, int64_t *v);
void db_bind_i64_null(MYSQL_BIND *b, int64_t *v, my_bool *is_null);
void db_bind_time(MYSQL_BIND *b, MYSQL_TIME *v);
void db_bind_str(MYSQL_BIND *b, const char *s, unsigned long *len);

/* "YYYY-MM-DD HH:MM:SS.ffffff" into buf (at least 27 bytes). Returns buf. */
const char *db_time_format(const MYSQL_TIME *t, char *buf, size_t len);

#endif
