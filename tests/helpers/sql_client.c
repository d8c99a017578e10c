/*
 * tests/helpers/sql_client.c — see sql_client.h.
 */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include "tests/helpers/sql_client.h"

#include <stdio.h>

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
