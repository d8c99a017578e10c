/*
 * consumer/order_cancel.c — the idempotent order cancel (hg_order_cancel) and
 * the payment claim (hg_order_pay) on MySQL/MariaDB. Contract:
 * include/hourglass/order.h; the why: DESIGN.md §5.
 *
 * One handle = one MYSQL connection + its prepared statements, used by one
 * thread at a time. The connection runs with autocommit off, so each claim
 * starts a transaction implicitly and COMMIT / ROLLBACK ends it: a cancel that
 * wins is claim + side effects + COMMIT (2 + side effects round trips), one
 * that loses is claim + lookup + ROLLBACK.
 *
 * Connection life: MYSQL_OPT_RECONNECT is off — a silent reconnect would lose
 * the transaction in flight and the prepared statements without telling us.
 * Instead, any error that leaves the connection unusable or in doubt (every
 * client error 2000-2999, 1927 killed, 4031 disconnected, 1053 shutdown)
 * closes it; the next call connects again and re-prepares each statement on
 * first use. Any other error is followed by our own ROLLBACK (1205 rolled
 * back only the statement; after 1213 the ROLLBACK is a harmless no-op), so a
 * handle never carries a half transaction into the next call.
 *
 * Invariant: between calls the handle is either disconnected or connected
 * with no open transaction.
 */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include "consumer/order_sql.h"

#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <errmsg.h>
#include <mysqld_error.h>

#define DEFAULT_CONNECT_TIMEOUT_S 5
#define DEFAULT_READ_TIMEOUT_S 60
#define DEFAULT_WRITE_TIMEOUT_S 60

/* MariaDB 10.11's ER_CLIENT_INTERACTION_TIMEOUT ("disconnected by the server
 * because of inactivity"); Connector/C's mysqld_error.h predates it and gives
 * 4031 an older name, so the number is spelled out. */
#define HG_ER_CLIENT_INTERACTION_TIMEOUT 4031

/* The payment path on the reference schema (hg_order_pay). */
static const char pay_claim_sql[] =
    "UPDATE orders SET status='paid', paid_at=NOW(6) WHERE id=? AND status='pending'";
static const char pay_stock_sql[] =
    "UPDATE stock s JOIN order_items i ON i.sku_id = s.sku_id"
    " SET s.reserved = s.reserved - i.qty, s.sold = s.sold + i.qty"
    " WHERE i.order_id = ?";
static const char pay_outbox_sql[] = "UPDATE order_timeout_msg SET status='done' WHERE order_id = ?";

/* A statement of the handle: its configured name, translated text and, while
 * connected, its server-side prepared statement. */
typedef struct prepared {
    char field[32];     /* "claim-sql", "side-effect-sql[1]", "pay-claim" … */
    order_sql_text_t text;
    MYSQL_STMT *st;     /* NULL until prepared on the current connection */
} prepared_t;

struct hg_order_db {
    MYSQL *m;                 /* NULL while disconnected */
    unsigned long connection_id;
    uint64_t connects;

    char *host, *socket, *user, *password, *database;
    unsigned port, connect_timeout_s, read_timeout_s, write_timeout_s, lock_wait_timeout_s;

    prepared_t claim;
    prepared_t side[HG_ORDER_SQL_MAX_SIDE_EFFECTS];
    size_t side_count;
    prepared_t lookup;
    prepared_t pay[3];        /* claim, stock reserved → sold, outbox done */
};

/* ---------------------------------------------------------------- errors */

const char *hg_order_outcome_name(hg_order_outcome_t outcome)
{
    switch (outcome) {
    case HG_ORDER_CANCELLED: return "cancelled";
    case HG_ORDER_PAID: return "paid";
    case HG_ORDER_NOT_PENDING: return "not-pending";
    case HG_ORDER_NOT_FOUND: return "not-found";
    case HG_ORDER_TRANSIENT: return "transient";
    case HG_ORDER_PERMANENT: return "permanent";
    }
    return "unknown";
}

/* Server errors that are about the moment rather than the message. */
static const unsigned transient_server_errors[] = {
    ER_LOCK_DEADLOCK,                 /* 1213: the server rolled the transaction back */
    ER_LOCK_WAIT_TIMEOUT,             /* 1205: the statement was rolled back, we roll back the rest */
    ER_QUERY_INTERRUPTED,             /* 1317: KILL QUERY */
    ER_STATEMENT_TIMEOUT,             /* 1969: max_statement_time */
    ER_CONNECTION_KILLED,             /* 1927: KILL CONNECTION */
    HG_ER_CLIENT_INTERACTION_TIMEOUT, /* 4031: disconnected for inactivity (10.11) */
    ER_CON_COUNT_ERROR,               /* 1040: too many connections */
    ER_SERVER_SHUTDOWN,               /* 1053: server shutdown in progress */
    ER_OPTION_PREVENTS_STATEMENT,     /* 1290: --read-only (a fail-over in progress) */
    ER_NEED_REPREPARE,                /* 1615: a table changed under a prepared statement */
};

hg_order_outcome_t hg_order_classify(unsigned code)
{
    if (code >= 2000 && code < 3000) /* client errors: gone away, lost, cannot connect … */
        return HG_ORDER_TRANSIENT;
    for (size_t i = 0; i < sizeof transient_server_errors / sizeof transient_server_errors[0]; i++)
        if (transient_server_errors[i] == code)
            return HG_ORDER_TRANSIENT;
    return HG_ORDER_PERMANENT;
}

/* Errors after which the connection must not be used again. */
static int connection_is_lost(unsigned code)
{
    return (code >= 2000 && code < 3000) || code == ER_CONNECTION_KILLED
           || code == HG_ER_CLIENT_INTERACTION_TIMEOUT || code == ER_SERVER_SHUTDOWN;
}

void order_error_set(hg_order_error_t *err, const char *fmt, ...)
{
    if (err == NULL)
        return;
    err->code = 0;
    err->sqlstate[0] = '\0';
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err->message, sizeof err->message, fmt, ap);
    va_end(ap);
}

void order_error_set_mysql(hg_order_error_t *err, const char *what, MYSQL *m, MYSQL_STMT *st)
{
    if (err == NULL)
        return;
    unsigned code = st != NULL ? mysql_stmt_errno(st) : m != NULL ? mysql_errno(m) : 0;
    const char *msg = st != NULL ? mysql_stmt_error(st) : m != NULL ? mysql_error(m) : "no connection";
    const char *state = st != NULL ? mysql_stmt_sqlstate(st) : m != NULL ? mysql_sqlstate(m) : "";
    if (code == 0) { /* a failure the library did not explain: never report "0 success" */
        code = CR_UNKNOWN_ERROR;
        msg = "unknown error (the client library gave no error number)";
        state = "HY000";
    }
    err->code = code;
    snprintf(err->sqlstate, sizeof err->sqlstate, "%s", state != NULL ? state : "");
    snprintf(err->message, sizeof err->message, "%s: %u %s", what, code, msg);
}

/* ---------------------------------------------------------------- configured SQL */

static const char default_claim[] =
    "UPDATE orders SET status='cancelled', cancelled_at=NOW(6), cancel_reason=:reason"
    " WHERE id=? AND status='pending'";
static const char default_return_stock[] =
    "UPDATE stock s JOIN order_items i ON i.sku_id = s.sku_id"
    " SET s.available = s.available + i.qty, s.reserved = s.reserved - i.qty"
    " WHERE i.order_id = ?";
static const char default_outbox_done[] =
    "UPDATE order_timeout_msg SET status='done' WHERE order_id = ?";
static const char default_lookup[] = "SELECT status FROM orders WHERE id = ?";

void hg_order_sql_default(hg_order_sql_t *sql)
{
    memset(sql, 0, sizeof *sql);
    sql->claim = default_claim;
    sql->side_effects[0] = default_return_stock;
    sql->side_effects[1] = default_outbox_done;
    sql->side_effect_count = 2;
    sql->lookup = default_lookup;
}

int hg_order_sql_check(const char *field, const char *text, char *err, size_t errlen)
{
    if (field == NULL)
        field = "sql";
    int allow_reason = strcmp(field, "lookup-sql") != 0;
    return order_sql_translate(field, text, allow_reason, NULL, err, errlen);
}

int hg_order_sql_validate(const hg_order_sql_t *sql, char *err, size_t errlen)
{
    if (sql == NULL) {
        if (err != NULL && errlen > 0)
            snprintf(err, errlen, "sql: no statements given");
        return -1;
    }
    if (hg_order_sql_check("claim-sql", sql->claim, err, errlen) != 0)
        return -1;
    if (sql->side_effect_count > HG_ORDER_SQL_MAX_SIDE_EFFECTS) {
        if (err != NULL && errlen > 0)
            snprintf(err, errlen, "side-effect-sql: %zu statements, more than the limit of %d",
                     sql->side_effect_count, HG_ORDER_SQL_MAX_SIDE_EFFECTS);
        return -1;
    }
    for (size_t k = 0; k < sql->side_effect_count; k++) {
        char field[40];
        snprintf(field, sizeof field, "side-effect-sql[%zu]", k + 1);
        if (order_sql_translate(field, sql->side_effects[k], 1, NULL, err, errlen) != 0)
            return -1;
    }
    return hg_order_sql_check("lookup-sql", sql->lookup, err, errlen);
}

/* ---------------------------------------------------------------- library and handle */

static pthread_once_t library_once = PTHREAD_ONCE_INIT;
static int library_status = -1;

static void library_init_once(void)
{
    library_status = mysql_library_init(0, NULL, NULL) == 0 ? 0 : -1;
}

int hg_order_library_init(void)
{
    pthread_once(&library_once, library_init_once);
    return library_status;
}

static char *dup_or_null(const char *s, int *oom)
{
    if (s == NULL)
        return NULL;
    char *d = strdup(s);
    if (d == NULL)
        *oom = 1;
    return d;
}

static int prepared_init(prepared_t *p, const char *field, const char *text, int allow_reason,
                         hg_order_error_t *err)
{
    snprintf(p->field, sizeof p->field, "%s", field);
    p->st = NULL;
    char msg[sizeof err->message];
    if (order_sql_translate(field, text, allow_reason, &p->text, msg, sizeof msg) != 0) {
        order_error_set(err, "%s", msg);
        return -1;
    }
    return 0;
}

/* Every statement of the handle, for loops: returns the count written. */
static size_t all_statements(hg_order_db *db, prepared_t **out)
{
    size_t n = 0;
    out[n++] = &db->claim;
    for (size_t i = 0; i < db->side_count; i++)
        out[n++] = &db->side[i];
    out[n++] = &db->lookup;
    for (size_t i = 0; i < 3; i++)
        out[n++] = &db->pay[i];
    return n;
}

#define MAX_STATEMENTS (HG_ORDER_SQL_MAX_SIDE_EFFECTS + 5)

/* Close the connection (if any) and forget every prepared statement: mysql_close
 * detaches them, mysql_stmt_close then only frees client memory. */
static void drop_connection(hg_order_db *db)
{
    if (db->m != NULL) {
        mysql_close(db->m);
        db->m = NULL;
    }
    db->connection_id = 0;
    prepared_t *all[MAX_STATEMENTS];
    size_t n = all_statements(db, all);
    for (size_t i = 0; i < n; i++) {
        if (all[i]->st != NULL) {
            mysql_stmt_close(all[i]->st);
            all[i]->st = NULL;
        }
    }
}

/* Close every prepared statement but keep the connection (after 1615). */
static void drop_statements(hg_order_db *db)
{
    prepared_t *all[MAX_STATEMENTS];
    size_t n = all_statements(db, all);
    for (size_t i = 0; i < n; i++) {
        if (all[i]->st != NULL) {
            mysql_stmt_close(all[i]->st);
            all[i]->st = NULL;
        }
    }
}

static int connect_now(hg_order_db *db, hg_order_error_t *err)
{
    MYSQL *m = mysql_init(NULL);
    if (m == NULL) {
        order_error_set(err, "connect: mysql_init failed (out of memory)");
        if (err != NULL)
            err->code = CR_OUT_OF_MEMORY;
        return -1;
    }
    unsigned int connect_timeout = db->connect_timeout_s, read_timeout = db->read_timeout_s,
                 write_timeout = db->write_timeout_s;
    my_bool reconnect = 0;
    mysql_options(m, MYSQL_OPT_CONNECT_TIMEOUT, &connect_timeout);
    mysql_options(m, MYSQL_OPT_READ_TIMEOUT, &read_timeout);
    mysql_options(m, MYSQL_OPT_WRITE_TIMEOUT, &write_timeout);
    mysql_options(m, MYSQL_OPT_RECONNECT, &reconnect);
    mysql_options(m, MYSQL_SET_CHARSET_NAME, "utf8mb4");
    if (db->lock_wait_timeout_s > 0) {
        char init[80];
        snprintf(init, sizeof init, "SET SESSION innodb_lock_wait_timeout=%u", db->lock_wait_timeout_s);
        mysql_options(m, MYSQL_INIT_COMMAND, init);
    }
    if (mysql_real_connect(m, db->host, db->user, db->password, db->database, db->port, db->socket, 0)
        == NULL) {
        char what[700];
        snprintf(what, sizeof what, "connect to %s", db->socket != NULL ? db->socket
                                                       : db->host != NULL ? db->host : "localhost");
        order_error_set_mysql(err, what, m, NULL);
        mysql_close(m);
        return -1;
    }
    if (mysql_autocommit(m, 0) != 0) {
        order_error_set_mysql(err, "connect: autocommit off", m, NULL);
        mysql_close(m);
        return -1;
    }
    db->m = m;
    db->connection_id = mysql_thread_id(m);
    db->connects++;
    return 0;
}

MYSQL *order_db_mysql(hg_order_db *db, hg_order_error_t *err)
{
    if (db->m == NULL && connect_now(db, err) != 0)
        return NULL;
    return db->m;
}

MYSQL *order_db_connection(const hg_order_db *db)
{
    return db->m;
}

void order_db_disconnect(hg_order_db *db)
{
    drop_connection(db);
}

hg_order_db *hg_order_db_open(const hg_order_db_params_t *params, hg_order_error_t *err)
{
    if (params == NULL) {
        order_error_set(err, "hg_order_db_open: no parameters");
        return NULL;
    }
    if (hg_order_library_init() != 0) {
        order_error_set(err, "mysql_library_init failed");
        return NULL;
    }
    hg_order_sql_t defaults;
    const hg_order_sql_t *sql = params->sql;
    if (sql == NULL) {
        hg_order_sql_default(&defaults);
        sql = &defaults;
    }
    char msg[sizeof err->message];
    if (hg_order_sql_validate(sql, msg, sizeof msg) != 0) {
        order_error_set(err, "%s", msg);
        return NULL;
    }

    hg_order_db *db = calloc(1, sizeof *db);
    if (db == NULL) {
        order_error_set(err, "hg_order_db_open: out of memory");
        return NULL;
    }
    int oom = 0;
    db->host = dup_or_null(params->host, &oom);
    db->socket = dup_or_null(params->socket, &oom);
    db->user = dup_or_null(params->user, &oom);
    db->password = dup_or_null(params->password, &oom);
    db->database = dup_or_null(params->database, &oom);
    db->port = params->port;
    db->connect_timeout_s = params->connect_timeout_s ? params->connect_timeout_s : DEFAULT_CONNECT_TIMEOUT_S;
    db->read_timeout_s = params->read_timeout_s ? params->read_timeout_s : DEFAULT_READ_TIMEOUT_S;
    db->write_timeout_s = params->write_timeout_s ? params->write_timeout_s : DEFAULT_WRITE_TIMEOUT_S;
    db->lock_wait_timeout_s = params->lock_wait_timeout_s;
    if (oom) {
        order_error_set(err, "hg_order_db_open: out of memory");
        goto fail;
    }

    /* Already validated: these translations only fail on out-of-memory. */
    if (prepared_init(&db->claim, "claim-sql", sql->claim, 1, err) != 0)
        goto fail;
    for (size_t i = 0; i < sql->side_effect_count; i++) {
        char field[32];
        snprintf(field, sizeof field, "side-effect-sql[%zu]", i + 1);
        if (prepared_init(&db->side[i], field, sql->side_effects[i], 1, err) != 0)
            goto fail;
        db->side_count++;
    }
    if (prepared_init(&db->lookup, "lookup-sql", sql->lookup, 0, err) != 0
        || prepared_init(&db->pay[0], "pay-claim", pay_claim_sql, 0, err) != 0
        || prepared_init(&db->pay[1], "pay-stock", pay_stock_sql, 0, err) != 0
        || prepared_init(&db->pay[2], "pay-outbox", pay_outbox_sql, 0, err) != 0)
        goto fail;

    if (connect_now(db, err) != 0)
        goto fail;
    return db;

fail:
    hg_order_db_close(db);
    return NULL;
}

void hg_order_db_close(hg_order_db *db)
{
    if (db == NULL)
        return;
    if (db->m != NULL)
        mysql_rollback(db->m); /* never leave a transaction to the server's timeout */
    drop_connection(db);
    prepared_t *all[MAX_STATEMENTS];
    size_t n = all_statements(db, all);
    for (size_t i = 0; i < n; i++)
        order_sql_text_free(&all[i]->text);
    free(db->host);
    free(db->socket);
    free(db->user);
    free(db->password);
    free(db->database);
    free(db);
}

unsigned long hg_order_db_connection_id(const hg_order_db *db)
{
    return db != NULL ? db->connection_id : 0;
}

uint64_t hg_order_db_connects(const hg_order_db *db)
{
    return db != NULL ? db->connects : 0;
}

/* ---------------------------------------------------------------- statements */

/* Prepare p on the current connection if it is not yet. Returns 0, or the
 * error code (err filled; the statement left unprepared). */
static unsigned prepare(hg_order_db *db, prepared_t *p, hg_order_error_t *err)
{
    if (p->st != NULL)
        return 0;
    MYSQL_STMT *st = mysql_stmt_init(db->m);
    if (st == NULL) {
        char what[64];
        snprintf(what, sizeof what, "%s: prepare", p->field);
        order_error_set_mysql(err, what, db->m, NULL);
        return err != NULL ? err->code : CR_OUT_OF_MEMORY;
    }
    if (mysql_stmt_prepare(st, p->text.sql, (unsigned long)strlen(p->text.sql)) != 0) {
        char what[64];
        snprintf(what, sizeof what, "%s: prepare", p->field);
        order_error_set_mysql(err, what, NULL, st);
        unsigned code = mysql_stmt_errno(st);
        mysql_stmt_close(st);
        return code != 0 ? code : CR_UNKNOWN_ERROR;
    }
    if (mysql_stmt_param_count(st) != (unsigned long)p->text.nparams) {
        /* Our lexer and the server disagree (a construct it does not know). */
        order_error_set(err, "%s: the server counts %lu placeholders, the configuration check %d",
                           p->field, mysql_stmt_param_count(st), p->text.nparams);
        mysql_stmt_close(st);
        return ER_WRONG_ARGUMENTS;
    }
    p->st = st;
    return 0;
}

/* Execute p with the order id and reason bound. *rows gets the affected rows,
 * or for a statement that returns rows, the number of rows. Returns 0 or the
 * error code (err filled, code 0 never returned for a failure). */
static unsigned execute(hg_order_db *db, prepared_t *p, uint64_t order_id, const char *reason,
                        uint64_t *rows, hg_order_error_t *err)
{
    unsigned code = prepare(db, p, err);
    if (code != 0)
        return code;

    MYSQL_BIND bind[ORDER_SQL_MAX_PARAMS];
    unsigned long reason_len = reason != NULL ? (unsigned long)strlen(reason) : 0;
    memset(bind, 0, sizeof bind);
    for (int i = 0; i < p->text.nparams; i++) {
        if (p->text.kinds[i] == ORDER_SQL_PARAM_ORDER_ID) {
            bind[i].buffer_type = MYSQL_TYPE_LONGLONG;
            bind[i].buffer = &order_id;
            bind[i].is_unsigned = 1;
        } else if (reason == NULL) {
            bind[i].buffer_type = MYSQL_TYPE_NULL;
        } else {
            bind[i].buffer_type = MYSQL_TYPE_STRING;
            bind[i].buffer = (char *)reason;
            bind[i].buffer_length = reason_len;
            bind[i].length = &reason_len;
        }
    }
    if ((p->text.nparams > 0 && mysql_stmt_bind_param(p->st, bind) != 0) || mysql_stmt_execute(p->st) != 0)
        goto fail;
    if (mysql_stmt_field_count(p->st) > 0) {
        if (mysql_stmt_store_result(p->st) != 0)
            goto fail;
        *rows = mysql_stmt_num_rows(p->st);
        mysql_stmt_free_result(p->st);
    } else {
        *rows = mysql_stmt_affected_rows(p->st);
    }
    return 0;

fail:
    order_error_set_mysql(err, p->field, NULL, p->st);
    return err != NULL ? err->code : (mysql_stmt_errno(p->st) ? mysql_stmt_errno(p->st) : CR_UNKNOWN_ERROR);
}

int hg_order_db_prepare(hg_order_db *db, hg_order_error_t *err)
{
    if (order_db_mysql(db, err) == NULL)
        return -1;
    prepared_t *cancel[HG_ORDER_SQL_MAX_SIDE_EFFECTS + 2];
    size_t n = 0;
    cancel[n++] = &db->claim;
    for (size_t i = 0; i < db->side_count; i++)
        cancel[n++] = &db->side[i];
    cancel[n++] = &db->lookup;
    for (size_t i = 0; i < n; i++) {
        unsigned code = prepare(db, cancel[i], err);
        if (code != 0) {
            if (connection_is_lost(code))
                drop_connection(db);
            return -1;
        }
    }
    return 0;
}

/* ---------------------------------------------------------------- the transaction */

/* After a failed statement: leave the handle clean (rolled back, or
 * disconnected when the connection is lost or in doubt) and classify. */
static int fail(hg_order_db *db, unsigned code, hg_order_outcome_t cls, hg_order_outcome_t *outcome)
{
    if (code != 0 && connection_is_lost(code)) {
        drop_connection(db);
    } else if (db->m != NULL) {
        if (code == ER_NEED_REPREPARE)
            drop_statements(db);
        if (mysql_rollback(db->m) != 0)
            drop_connection(db);
    }
    *outcome = cls;
    return -1;
}

/* claim; if it changed one row: side effects and COMMIT → win; if none:
 * lookup and ROLLBACK → NOT_PENDING / NOT_FOUND. */
static int claim_transaction(hg_order_db *db, prepared_t *claim, prepared_t **sides, size_t side_count,
                             uint64_t order_id, const char *reason, hg_order_outcome_t win,
                             hg_order_outcome_t *outcome, hg_order_error_t *err)
{
    hg_order_outcome_t ignored;
    if (outcome == NULL)
        outcome = &ignored;
    if (db == NULL) {
        order_error_set(err, "no database handle");
        *outcome = HG_ORDER_PERMANENT;
        return -1;
    }
    if (db->m == NULL && connect_now(db, err) != 0) {
        /* Not this order's fault, whatever the server said: retry later. */
        *outcome = HG_ORDER_TRANSIENT;
        return -1;
    }

    uint64_t rows = 0;
    unsigned code = execute(db, claim, order_id, reason, &rows, err);
    if (code != 0)
        return fail(db, code, hg_order_classify(code), outcome);

    if (rows == 1) {
        for (size_t i = 0; i < side_count; i++) {
            uint64_t changed;
            code = execute(db, sides[i], order_id, reason, &changed, err);
            if (code != 0)
                return fail(db, code, hg_order_classify(code), outcome);
        }
        if (mysql_commit(db->m) != 0) {
            /* The outcome is unknown when the connection died: the retry tells. */
            order_error_set_mysql(err, "commit", db->m, NULL);
            code = err != NULL ? err->code : mysql_errno(db->m);
            return fail(db, code, hg_order_classify(code), outcome);
        }
        *outcome = win;
        return 0;
    }

    if (rows > 1) {
        order_error_set(err, "%s: changed %llu rows for order %llu, expected 0 or 1: rolled back "
                           "(its WHERE must select one order by id and status='pending')",
                           claim->field, (unsigned long long)rows, (unsigned long long)order_id);
        return fail(db, 0, HG_ORDER_PERMANENT, outcome);
    }

    /* 0 rows: paid, cancelled, or no such order. Nothing was changed. */
    uint64_t found = 0;
    code = execute(db, &db->lookup, order_id, NULL, &found, err);
    if (code != 0)
        return fail(db, code, hg_order_classify(code), outcome);
    if (mysql_rollback(db->m) != 0)
        drop_connection(db); /* nothing to lose: the transaction changed nothing */
    *outcome = found > 0 ? HG_ORDER_NOT_PENDING : HG_ORDER_NOT_FOUND;
    return 0;
}

int hg_order_cancel(hg_order_db *db, uint64_t order_id, const char *reason,
                    hg_order_outcome_t *outcome, hg_order_error_t *err)
{
    prepared_t *sides[HG_ORDER_SQL_MAX_SIDE_EFFECTS];
    size_t n = 0;
    if (db != NULL)
        for (; n < db->side_count; n++)
            sides[n] = &db->side[n];
    return claim_transaction(db, db != NULL ? &db->claim : NULL, sides, n, order_id, reason,
                             HG_ORDER_CANCELLED, outcome, err);
}

int hg_order_pay(hg_order_db *db, uint64_t order_id, hg_order_outcome_t *outcome, hg_order_error_t *err)
{
    prepared_t *sides[2];
    if (db != NULL) {
        sides[0] = &db->pay[1];
        sides[1] = &db->pay[2];
    }
    return claim_transaction(db, db != NULL ? &db->pay[0] : NULL, sides, 2, order_id, NULL, HG_ORDER_PAID,
                             outcome, err);
}

/* ---------------------------------------------------------------- payload */

int hg_order_parse_id(const char *text, size_t len, uint64_t *id, char *err, size_t errlen)
{
    if (text == NULL || len == 0) {
        if (err != NULL && errlen > 0)
            snprintf(err, errlen, "payload is not an order id: it is empty");
        return -1;
    }
    if (len > 20) {
        if (err != NULL && errlen > 0)
            snprintf(err, errlen, "payload is not an order id: %zu bytes, an order id has at most 20 digits", len);
        return -1;
    }
    uint64_t v = 0;
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)text[i];
        if (c < '0' || c > '9') {
            if (err != NULL && errlen > 0) {
                if (c >= 0x21 && c < 0x7f)
                    snprintf(err, errlen, "payload is not an order id: byte %zu is '%c', not a digit", i + 1, c);
                else
                    snprintf(err, errlen, "payload is not an order id: byte %zu is 0x%02x, not a digit", i + 1, c);
            }
            return -1;
        }
        if (i == 0 && c == '0') {
            if (err != NULL && errlen > 0)
                snprintf(err, errlen, "payload is not an order id: %s", len == 1 ? "0 is not an order id"
                                                                                 : "leading zero");
            return -1;
        }
        unsigned d = c - '0';
        if (v > (UINT64_MAX - d) / 10) {
            if (err != NULL && errlen > 0)
                snprintf(err, errlen, "payload is not an order id: larger than 18446744073709551615");
            return -1;
        }
        v = v * 10 + d;
    }
    *id = v;
    return 0;
}
