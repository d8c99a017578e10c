/*
 * compensator/db.c — one MariaDB connection with lazily prepared statements
 * (contract: db.h). Used by one thread at a time.
 *
 * Invariant: db->m is NULL or a live connection; every comp_stmt_t in
 * db->stmts has st != NULL only while db->m is the connection it was
 * prepared on. comp_db_disconnect closes the statements before the
 * connection, so a reconnect always re-prepares.
 */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include "compensator/db.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <errmsg.h>
#include <mysqld_error.h>

#define MAX_STMTS 16
#define DEFAULT_CONNECT_TIMEOUT_S 5
#define DEFAULT_RW_TIMEOUT_S 60
#define ER_CLIENT_INTERACTION_TIMEOUT_ 4031 /* MariaDB 10.11 numbering, as order_cancel.c */

struct comp_db {
    MYSQL *m;
    unsigned long connection_id;
    uint64_t connects;
    char role[32];
    char *host, *socket, *user, *password, *database;
    unsigned port, connect_timeout_s, read_timeout_s, write_timeout_s, lock_wait_timeout_s;
    comp_stmt_t *stmts[MAX_STMTS];
    size_t stmt_count;
};

static char *dup_or_null(const char *s)
{
    if (s == NULL)
        return NULL;
    char *d = strdup(s);
    if (d == NULL)
        abort();
    return d;
}

comp_db_t *comp_db_new(const hg_order_db_params_t *p, const char *role)
{
    comp_db_t *db = calloc(1, sizeof *db);
    if (db == NULL)
        abort();
    snprintf(db->role, sizeof db->role, "%s", role != NULL ? role : "db");
    db->host = dup_or_null(p->host);
    db->socket = dup_or_null(p->socket);
    db->user = dup_or_null(p->user);
    db->password = dup_or_null(p->password);
    db->database = dup_or_null(p->database);
    db->port = p->port;
    db->connect_timeout_s = p->connect_timeout_s ? p->connect_timeout_s : DEFAULT_CONNECT_TIMEOUT_S;
    db->read_timeout_s = p->read_timeout_s ? p->read_timeout_s : DEFAULT_RW_TIMEOUT_S;
    db->write_timeout_s = p->write_timeout_s ? p->write_timeout_s : DEFAULT_RW_TIMEOUT_S;
    db->lock_wait_timeout_s = p->lock_wait_timeout_s;
    return db;
}

void comp_db_disconnect(comp_db_t *db)
{
    for (size_t i = 0; i < db->stmt_count; i++)
        if (db->stmts[i]->st != NULL) {
            mysql_stmt_close(db->stmts[i]->st);
            db->stmts[i]->st = NULL;
        }
    if (db->m != NULL)
        mysql_close(db->m);
    db->m = NULL;
    db->connection_id = 0;
}

void comp_db_free(comp_db_t *db)
{
    if (db == NULL)
        return;
    comp_db_disconnect(db);
    free(db->host);
    free(db->socket);
    free(db->user);
    free(db->password);
    free(db->database);
    free(db);
}

MYSQL *comp_db_mysql(comp_db_t *db)
{
    return db->m;
}

unsigned long comp_db_connection_id(const comp_db_t *db)
{
    return db->m != NULL ? db->connection_id : 0;
}

uint64_t comp_db_connects(const comp_db_t *db)
{
    return db->connects;
}

static void set_err(hg_order_error_t *err, unsigned code, const char *state, const char *fmt, const char *a,
                    const char *b)
{
    if (err == NULL)
        return;
    err->code = code;
    snprintf(err->sqlstate, sizeof err->sqlstate, "%s", state != NULL ? state : "");
    snprintf(err->message, sizeof err->message, fmt, a, code, b);
}

/* Errors after which the connection must not be used again (order_cancel.c's rule). */
static int connection_is_lost(unsigned code)
{
    return (code >= 2000 && code < 3000) || code == ER_CONNECTION_KILLED || code == ER_CLIENT_INTERACTION_TIMEOUT_
           || code == ER_SERVER_SHUTDOWN;
}

hg_order_outcome_t comp_db_fail(comp_db_t *db, const char *what, MYSQL_STMT *st, hg_order_error_t *err)
{
    unsigned code = st != NULL ? mysql_stmt_errno(st) : db->m != NULL ? mysql_errno(db->m) : CR_SERVER_LOST;
    const char *msg = st != NULL ? mysql_stmt_error(st) : db->m != NULL ? mysql_error(db->m) : "not connected";
    const char *state = st != NULL ? mysql_stmt_sqlstate(st) : db->m != NULL ? mysql_sqlstate(db->m) : "HY000";
    if (code == 0) { /* never report "0 success" */
        code = CR_UNKNOWN_ERROR;
        msg = "unknown error (the client library gave no error number)";
        state = "HY000";
    }
    char prefix[96];
    snprintf(prefix, sizeof prefix, "%s: %s", db->role, what);
    set_err(err, code, state, "%s: %u %s", prefix, msg);
    if (connection_is_lost(code))
        comp_db_disconnect(db);
    return hg_order_classify(code);
}

int comp_db_connect(comp_db_t *db, hg_order_error_t *err)
{
    if (db->m != NULL)
        return 0;
    MYSQL *m = mysql_init(NULL);
    if (m == NULL) {
        set_err(err, CR_OUT_OF_MEMORY, "HY000", "%s: connect: %u %s", db->role, "mysql_init failed");
        return -1;
    }
    my_bool off = 0;
    unsigned ct = db->connect_timeout_s, rt = db->read_timeout_s, wt = db->write_timeout_s;
    mysql_options(m, MYSQL_OPT_RECONNECT, &off);
    mysql_options(m, MYSQL_OPT_CONNECT_TIMEOUT, &ct);
    mysql_options(m, MYSQL_OPT_READ_TIMEOUT, &rt);
    mysql_options(m, MYSQL_OPT_WRITE_TIMEOUT, &wt);
    mysql_options(m, MYSQL_SET_CHARSET_NAME, "utf8mb4");
    if (mysql_real_connect(m, db->host, db->user, db->password, db->database, db->port, db->socket, 0) == NULL) {
        unsigned code = mysql_errno(m);
        set_err(err, code != 0 ? code : CR_CONNECTION_ERROR, mysql_sqlstate(m), "%s: connect: %u %s", db->role,
                mysql_error(m));
        mysql_close(m);
        return -1;
    }
    db->m = m;
    db->connects++;
    db->connection_id = mysql_thread_id(m);
    if (mysql_autocommit(m, 1) != 0) {
        comp_db_fail(db, "autocommit", NULL, err);
        comp_db_disconnect(db);
        return -1;
    }
    /* READ COMMITTED: a locking read takes record locks only, no gap locks,
     * so the relay's SELECT … FOR UPDATE never blocks the order service
     * inserting new outbox rows next to the rows it holds; and every plain
     * read sees the latest committed data. */
    if (mysql_query(m, "SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED") != 0) {
        comp_db_fail(db, "SET TRANSACTION ISOLATION LEVEL", NULL, err);
        comp_db_disconnect(db);
        return -1;
    }
    if (db->lock_wait_timeout_s > 0) {
        char sql[80];
        snprintf(sql, sizeof sql, "SET SESSION innodb_lock_wait_timeout = %u", db->lock_wait_timeout_s);
        if (mysql_query(m, sql) != 0) {
            comp_db_fail(db, "SET innodb_lock_wait_timeout", NULL, err);
            comp_db_disconnect(db);
            return -1;
        }
    }
    return 0;
}

int comp_db_query(comp_db_t *db, const char *sql, hg_order_error_t *err)
{
    if (comp_db_connect(db, err) != 0)
        return -1;
    if (mysql_query(db->m, sql) != 0) {
        comp_db_fail(db, sql, NULL, err);
        return -1;
    }
    MYSQL_RES *res = mysql_store_result(db->m); /* none expected; drain if any */
    if (res != NULL)
        mysql_free_result(res);
    return 0;
}

int comp_db_begin(comp_db_t *db, hg_order_error_t *err)
{
    return comp_db_query(db, "START TRANSACTION", err);
}

int comp_db_commit(comp_db_t *db, hg_order_error_t *err)
{
    if (db->m == NULL) { /* the transaction died with its connection */
        set_err(err, CR_SERVER_LOST, "HY000", "%s: %u %s", db->role, "COMMIT: connection lost during the transaction");
        return -1;
    }
    return comp_db_query(db, "COMMIT", err);
}

void comp_db_rollback(comp_db_t *db)
{
    if (db->m == NULL)
        return;
    if (mysql_query(db->m, "ROLLBACK") != 0)
        comp_db_fail(db, "ROLLBACK", NULL, NULL);
}

static int stmt_register(comp_db_t *db, comp_stmt_t *s)
{
    for (size_t i = 0; i < db->stmt_count; i++)
        if (db->stmts[i] == s)
            return 0;
    if (db->stmt_count == MAX_STMTS)
        return -1;
    db->stmts[db->stmt_count++] = s;
    return 0;
}

MYSQL_STMT *comp_db_exec(comp_db_t *db, comp_stmt_t *s, MYSQL_BIND *params, size_t n, MYSQL_BIND *result,
                         hg_order_error_t *err)
{
    if (comp_db_connect(db, err) != 0)
        return NULL;
    if (s->st == NULL) {
        if (stmt_register(db, s) != 0) {
            set_err(err, CR_OUT_OF_MEMORY, "HY000", "%s: %u %s", db->role, "too many statements on one handle");
            return NULL;
        }
        MYSQL_STMT *st = mysql_stmt_init(db->m);
        if (st == NULL) {
            comp_db_fail(db, s->name, NULL, err);
            return NULL;
        }
        if (mysql_stmt_prepare(st, s->sql, (unsigned long)strlen(s->sql)) != 0) {
            char what[80];
            snprintf(what, sizeof what, "%s: prepare", s->name);
            comp_db_fail(db, what, st, err);
            mysql_stmt_close(st);
            return NULL;
        }
        s->st = st;
    }
    MYSQL_STMT *st = s->st;
    if (n > 0 && mysql_stmt_bind_param(st, params) != 0) {
        comp_db_fail(db, s->name, st, err);
        return NULL;
    }
    if (mysql_stmt_execute(st) != 0) {
        comp_db_fail(db, s->name, st, err);
        return NULL;
    }
    if (result != NULL) {
        if (mysql_stmt_bind_result(st, result) != 0 || mysql_stmt_store_result(st) != 0) {
            comp_db_fail(db, s->name, st, err);
            if (db->m != NULL)
                mysql_stmt_free_result(st);
            return NULL;
        }
    }
    return st;
}

void comp_bind_u64(MYSQL_BIND *b, uint64_t *v)
{
    memset(b, 0, sizeof *b);
    b->buffer_type = MYSQL_TYPE_LONGLONG;
    b->buffer = v;
    b->is_unsigned = 1;
}

void comp_bind_i64(MYSQL_BIND *b, int64_t *v)
{
    memset(b, 0, sizeof *b);
    b->buffer_type = MYSQL_TYPE_LONGLONG;
    b->buffer = v;
}

void comp_bind_i64_null(MYSQL_BIND *b, int64_t *v, my_bool *is_null)
{
    comp_bind_i64(b, v);
    b->is_null = is_null;
}

void comp_bind_time(MYSQL_BIND *b, MYSQL_TIME *v)
{
    memset(b, 0, sizeof *b);
    b->buffer_type = MYSQL_TYPE_DATETIME;
    b->buffer = v;
    b->buffer_length = sizeof *v;
}

void comp_bind_str(MYSQL_BIND *b, const char *s, unsigned long *len)
{
    memset(b, 0, sizeof *b);
    *len = (unsigned long)strlen(s);
    b->buffer_type = MYSQL_TYPE_STRING;
    b->buffer = (void *)s;
    b->buffer_length = *len;
    b->length = len;
}

int comp_time_cmp(const MYSQL_TIME *a, const MYSQL_TIME *b)
{
    const unsigned long av[] = {a->year, a->month, a->day, a->hour, a->minute, a->second, a->second_part};
    const unsigned long bv[] = {b->year, b->month, b->day, b->hour, b->minute, b->second, b->second_part};
    for (size_t i = 0; i < sizeof av / sizeof av[0]; i++)
        if (av[i] != bv[i])
            return av[i] < bv[i] ? -1 : 1;
    return 0;
}

const char *comp_time_format(const MYSQL_TIME *t, char *buf, size_t len)
{
    snprintf(buf, len, "%04u-%02u-%02u %02u:%02u:%02u.%06lu", t->year, t->month, t->day, t->hour, t->minute,
             t->second, t->second_part);
    return buf;
}
