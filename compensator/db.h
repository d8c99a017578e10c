/*
 * compensator/db.h — MariaDB access for the compensator's own queries.
 *
 * The cancels go through libhourglass's hg_order_cancel (its own handle).
 * What order.h does not offer — locking outbox rows FOR UPDATE SKIP LOCKED,
 * keyset pages over the orders, GET_LOCK, counts for the gauges — goes
 * through a comp_db_t: one MYSQL connection (Connector/C) with prepared
 * statements, following the same rules as order.h:
 *   - MYSQL_OPT_RECONNECT off (a silent reconnect would drop GET_LOCK locks,
 *     transactions and prepared statements without telling us);
 *   - connected lazily; an error that leaves the connection unusable or in
 *     doubt (client errors 2000-2999, 1927 killed, 4031, 1053 shutdown)
 *     closes it and the next call connects and re-prepares;
 *   - errors are classified with hg_order_classify (transient / permanent).
 * Autocommit is on; the relay opens its transactions with comp_db_begin.
 * Isolation is READ COMMITTED (no gap locks: see comp_db_connect).
 *
 * Threads: one comp_db_t per thread, never used by two at once.
 * Errors: 0 / -1 (or a pointer / NULL) with err (may be NULL) holding the
 * MySQL error number and a message that names the statement.
 */
#ifndef HG_COMPENSATOR_DB_H
#define HG_COMPENSATOR_DB_H

#include <stddef.h>
#include <stdint.h>

#include <hourglass/order.h>
#include <mysql.h>

typedef struct comp_db comp_db_t;

/* A statement a module prepares on a comp_db_t: its name for messages, its
 * text, and the prepared handle on the current connection (NULL until first
 * use after each connect). Statically initialised by the module:
 *   static comp_stmt_t select_rows = {"relay-select", "SELECT …"};
 * A comp_stmt_t belongs to one comp_db_t (the first that prepares it). */
typedef struct comp_stmt {
    const char *name;
    const char *sql;
    MYSQL_STMT *st;
} comp_stmt_t;

/* A new handle (not connected) with a copy of the connection parameters
 * (params->sql is ignored). role names it in messages ("relay", "lock" …).
 * Never NULL (out of memory aborts). */
comp_db_t *comp_db_new(const hg_order_db_params_t *params, const char *role);

/* Close the statements and the connection, free the handle. NULL is fine. */
void comp_db_free(comp_db_t *db);

/* Connect if disconnected. Returns 0, or -1 (err->code is the client's error;
 * a failure to connect is always transient). */
int comp_db_connect(comp_db_t *db, hg_order_error_t *err);

/* Close the statements and the connection (the next call reconnects). */
void comp_db_disconnect(comp_db_t *db);

/* The connection, NULL while disconnected. */
MYSQL *comp_db_mysql(comp_db_t *db);

/* CONNECTION_ID() of the current connection, 0 while disconnected. */
unsigned long comp_db_connection_id(const comp_db_t *db);

/* How many times the handle connected, the first one included. */
uint64_t comp_db_connects(const comp_db_t *db);

/* Record a failure of `what` (the error of st when given, else of the
 * connection) in err, close the connection when the error left it unusable,
 * and return the class: HG_ORDER_TRANSIENT or HG_ORDER_PERMANENT. */
hg_order_outcome_t comp_db_fail(comp_db_t *db, const char *what, MYSQL_STMT *st, hg_order_error_t *err);

/* A statement without parameters or result set (START TRANSACTION, COMMIT,
 * SET …), as text. Connects first. Returns 0 / -1. */
int comp_db_query(comp_db_t *db, const char *sql, hg_order_error_t *err);

/* START TRANSACTION / COMMIT. Return 0 / -1. */
int comp_db_begin(comp_db_t *db, hg_order_error_t *err);
int comp_db_commit(comp_db_t *db, hg_order_error_t *err);

/* ROLLBACK, ignoring errors (a lost connection is closed). */
void comp_db_rollback(comp_db_t *db);

/* Connect, prepare s on first use, bind params (may be NULL when n is 0)
 * and execute. When result is not NULL, bind it as the result row and buffer
 * the whole result set (mysql_stmt_store_result): the caller then calls
 * mysql_stmt_fetch until MYSQL_NO_DATA and mysql_stmt_free_result.
 * Returns the statement, or NULL with err filled (comp_db_fail ran). */
MYSQL_STMT *comp_db_exec(comp_db_t *db, comp_stmt_t *s, MYSQL_BIND *params, size_t n, MYSQL_BIND *result,
                         hg_order_error_t *err);

/* Binding helpers: fill one MYSQL_BIND (zeroed first) for a value that lives
 * in the caller's variable. */
void comp_bind_u64(MYSQL_BIND *b, uint64_t *v);
void comp_bind_i64(MYSQL_BIND *b, int64_t *v);
void comp_bind_time(MYSQL_BIND *b, MYSQL_TIME *v);
void comp_bind_str(MYSQL_BIND *b, const char *s, unsigned long *len); /* *len = strlen(s) set by the helper */
/* A nullable result column: *is_null receives 1 for NULL. */
void comp_bind_i64_null(MYSQL_BIND *b, int64_t *v, my_bool *is_null);

/* Compare two DATETIMEs: <0, 0, >0. */
int comp_time_cmp(const MYSQL_TIME *a, const MYSQL_TIME *b);

/* "YYYY-MM-DD HH:MM:SS.ffffff" into buf (at least 27 bytes). Returns buf. */
const char *comp_time_format(const MYSQL_TIME *t, char *buf, size_t len);

#endif
