/*
 * tests/helpers/sql_client.h — client calls the MariaDB tests share: a root
 * connection to a private server (tu_mariadb_start), a query that says what
 * failed, and printf-formatted statements and scalar queries.
 *
 * Failures are printed to stderr (the statement and the server's error), so
 * a test can assert on the return value alone.
 */
#ifndef HG_TESTS_SQL_CLIENT_H
#define HG_TESTS_SQL_CLIENT_H

#include <mysql.h>

#include "tests/helpers/testutil.h"

/* A root connection (utf8mb4) over server's unix socket, with default
 * database db (may be NULL). Returns it (mysql_close it), or NULL with the
 * client error printed. */
MYSQL *sql_connect_root(const tu_mariadb_t *server, const char *db);

/* mysql_query(m, sql); the result, if any, is left for the caller
 * (mysql_store_result). Returns 0, or -1 with the statement and the error
 * printed. */
int sql_query(MYSQL *m, const char *sql);

/* The statement formatted from fmt (at most 8 KiB), run, its result (if any)
 * discarded. Returns 0, or -1 with the statement and the error printed. */
int sql_execf(MYSQL *m, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* The first column of the first row of the formatted query, as an integer:
 * -1 when no row came or the value is NULL, -2 on an error (printed). */
long long sql_scalarf(MYSQL *m, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* The same for a statement already formatted. */
long long sql_scalar(MYSQL *m, const char *sql);

#endif
