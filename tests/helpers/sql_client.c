/*
 * tests/helpers/sql_client.c — see sql_client.h.
 */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include "tests/helpers/sql_client.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

MYSQL *sql_connect_root(const tu_mariadb_t *server, const char *db)
{
    MYSQL *m = mysql_init(NULL);
    if (m == NULL)
        return NULL;
    mysql_options(m, MYSQL_SET_CHARSET_NAME, "utf8mb4");
    if (mysql_real_connect(m, NULL, "root", "", db, 0, server->socket, 0) == NULL) {
        fprintf(stderr, "connect to %s: %u %s\n", server->socket, mysql_errno(m), mysql_error(m));
        mysql_close(m);
        return NULL;
    }
    return m;
}

int sql_query(MYSQL *m, const char *sql)
{
    if (mysql_query(m, sql) != 0) {
        fprintf(stderr, "SQL failed: %s\n  -> %u %s\n", sql, mysql_errno(m), mysql_error(m));
        return -1;
    }
    return 0;
}

/* The longest statement the formatting helpers build; longer ones are refused. */
#define SQL_TEXT_MAX 8192

static int format_sql(char *text, const char *fmt, va_list ap)
{
    int n = vsnprintf(text, SQL_TEXT_MAX, fmt, ap);
    if (n < 0 || n >= SQL_TEXT_MAX) {
        fprintf(stderr, "SQL statement longer than %d bytes: %.80s...\n", SQL_TEXT_MAX, text);
        return -1;
    }
    return 0;
}

int sql_execf(MYSQL *m, const char *fmt, ...)
{
    char text[SQL_TEXT_MAX];
    va_list ap;
    va_start(ap, fmt);
    int rc = format_sql(text, fmt, ap);
    va_end(ap);
    if (rc != 0 || sql_query(m, text) != 0)
        return -1;
    MYSQL_RES *res = mysql_store_result(m);
    if (res != NULL)
        mysql_free_result(res);
    return 0;
}

long long sql_scalar(MYSQL *m, const char *sql)
{
    if (sql_query(m, sql) != 0)
        return -2;
    MYSQL_RES *res = mysql_store_result(m);
    if (res == NULL)
        return -2;
    MYSQL_ROW row = mysql_fetch_row(res);
    long long v = row == NULL || row[0] == NULL ? -1 : strtoll(row[0], NULL, 10);
    mysql_free_result(res);
    return v;
}

long long sql_scalarf(MYSQL *m, const char *fmt, ...)
{
    char text[SQL_TEXT_MAX];
    va_list ap;
    va_start(ap, fmt);
    int rc = format_sql(text, fmt, ap);
    va_end(ap);
    return rc != 0 ? -2 : sql_scalar(m, text);
}
