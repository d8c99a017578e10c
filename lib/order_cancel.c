/*
 * lib/order_cancel.c — the idempotent order cancel (hg_order_cancel), the
 * payment claim (hg_order_pay) and the configured-SQL checks on
 * MySQL/MariaDB. Contract: include/hourglass/order.h; the why: DESIGN.md §5.
 *
 * One handle = one db/conn.h connection + its prepared statements, used by
 * one thread at a time. The connection runs with autocommit off, so each
 * claim starts a transaction implicitly and COMMIT / ROLLBACK ends it: a
 * cancel that wins is claim + side effects + COMMIT (2 + side effects round
 * trips), one that loses is claim + lookup + ROLLBACK.
 *
 * Connection life (db/conn.h): MYSQL_OPT_RECONNECT is off; any error that
 * leaves the connection unusable or in doubt (DB_LOST) closes it, and the
 * next call connects again and re-prepares each statement on first use. Any
 * other error is followed by our own ROLLBACK (1205 rolled back only the
 * statement; after 1213 the ROLLBACK is a harmless no-op; after 1615 the
 * statements are dropped first), so a handle never carries a half
 * transaction into the next call.
 *
 * Invariant: between calls the handle is either disconnected or connected
 * with no open transaction.
 *
 * Allocation: out of memory aborts (base/alloc.h), like everywhere else.
 */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include "lib/order_sql.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <mysqld_error.h>

#include "base/alloc.h"
#include "base/err.h"
#include "db/tls_check.h"

/* The payment path on the reference schema (hg_order_pay). */
static const char pay_claim_sql[] = "UPDATE orders SET status='paid', paid_at=NOW(6) WHERE id=? AND status='pending'";
static const char pay_stock_sql[] = "UPDATE stock s JOIN order_items i ON i.sku_id = s.sku_id"
                                    " SET s.reserved = s.reserved - i.qty, s.sold = s.sold + i.qty"
                                    " WHERE i.order_id = ?";
static const char pay_outbox_sql[] = "UPDATE order_timeout_msg SET status='done' WHERE order_id = ?";

/* A statement of the handle: its configured name, translated text and the
 * connection's statement (stmt.name = field, stmt.sql = text.sql). */
typedef struct prepared {
    char field[40]; /* "claim-sql", "side-effect-sql[1]", "pay-claim" … */
    order_sql_text_t text;
    db_stmt_t stmt;
} prepared_t;

struct hg_order_db {
    db_conn_t *conn; /* autocommit off */
    prepared_t claim;
    prepared_t side[HG_ORDER_SQL_MAX_SIDE_EFFECTS];
    size_t side_count;
    prepared_t lookup;
    prepared_t pay[3]; /* claim, stock reserved → sold, outbox done */
    int reference;     /* 1: the cancel SQL is hg_order_sql_default's (batches run set-based) */
};

/* ---------------------------------------------------------------- outcomes */

const char *hg_order_outcome_name(hg_order_outcome_t outcome)
{
    static const char *const names[] = {
        [HG_ORDER_CANCELLED] = "cancelled", [HG_ORDER_PAID] = "paid",           [HG_ORDER_NOT_PENDING] = "not-pending",
        [HG_ORDER_NOT_FOUND] = "not-found", [HG_ORDER_TRANSIENT] = "transient", [HG_ORDER_PERMANENT] = "permanent",
        [HG_ORDER_LOCKED] = "locked",
    };
    if ((unsigned)outcome >= sizeof names / sizeof names[0])
        return "unknown";
    return names[outcome];
}

hg_order_outcome_t hg_order_classify(unsigned code)
{
    return db_classify(code) == DB_PERMANENT ? HG_ORDER_PERMANENT : HG_ORDER_TRANSIENT;
}

const char *hg_order_setup_hint(unsigned code)
{
    return db_setup_hint(code);
}

int hg_order_error_is_database(unsigned code)
{
    /* Code 0 is a failure the library found itself, with no word from the
     * server (a claim that changed 2 rows, no handle): about the data or the
     * caller, never MariaDB being down. */
    if (code == 0)
        return 0;
    return db_classify(code) == DB_LOST || code == ER_CON_COUNT_ERROR || db_setup_hint(code) != NULL;
}

/* ---------------------------------------------------------------- configured SQL */

static const char default_claim[] = "UPDATE orders SET status='cancelled', cancelled_at=NOW(6), cancel_reason=:reason"
                                    " WHERE id=? AND status='pending'";
static const char default_return_stock[] = "UPDATE stock s JOIN order_items i ON i.sku_id = s.sku_id"
                                           " SET s.available = s.available + i.qty, s.reserved = s.reserved - i.qty"
                                           " WHERE i.order_id = ?";
static const char default_outbox_done[] = "UPDATE order_timeout_msg SET status='done' WHERE order_id = ?";
static const char default_lookup[] = "SELECT status FROM orders WHERE id = ?";

int order_sql_is_default(const hg_order_sql_t *sql)
{
    if (sql->side_effect_count != 2)
        return 0;
    return strcmp(sql->claim, default_claim) == 0 && strcmp(sql->side_effects[0], default_return_stock) == 0 &&
           strcmp(sql->side_effects[1], default_outbox_done) == 0 && strcmp(sql->lookup, default_lookup) == 0;
}

void hg_order_sql_default(hg_order_sql_t *sql)
{
    if (sql == NULL)
        return;
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
    if (sql == NULL)
        return err_set(err, errlen, "sql: no statements given");
    if (hg_order_sql_check("claim-sql", sql->claim, err, errlen) != 0)
        return -1;
    if (sql->side_effect_count > HG_ORDER_SQL_MAX_SIDE_EFFECTS)
        return err_set(err, errlen, "side-effect-sql: %zu statements, more than the limit of %d",
                       sql->side_effect_count, HG_ORDER_SQL_MAX_SIDE_EFFECTS);
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

/* Translate text into p (already validated: cannot fail but for a lexer bug). */
static int prepared_init(prepared_t *p, const char *field, const char *text, int allow_reason, hg_order_error_t *err)
{
    char msg[sizeof err->message];
    snprintf(p->field, sizeof p->field, "%s", field);
    if (order_sql_translate(field, text, allow_reason, &p->text, msg, sizeof msg) != 0) {
        db_error_set(err, "%s", msg);
        return -1;
    }
    p->stmt = (db_stmt_t){ p->field, p->text.sql, (unsigned)p->text.nparams, NULL };
    return 0;
}

db_conn_t *order_db_conn(hg_order_db *db)
{
    return db->conn;
}

hg_order_db *hg_order_db_open(const hg_order_db_params_t *params, hg_order_error_t *err)
{
    if (params == NULL) {
        db_error_set(err, "hg_order_db_open: no parameters");
        return NULL;
    }
    if (hg_order_library_init() != 0) {
        db_error_set(err, "mysql_library_init failed");
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
        db_error_set(err, "%s", msg);
        return NULL;
    }
    static const db_tls_names_t tls_fields = { "tls", "tls_ca_file", "tls_cert_file", "tls_key_file" };
    if (db_tls_check(&tls_fields, (int)params->tls, params->tls_ca_file, params->tls_cert_file, params->tls_key_file,
                     msg, sizeof msg) != 0) {
        db_error_set(err, "%s", msg);
        return NULL;
    }

    hg_order_db *db = xcalloc(1, sizeof *db);
    db->conn = db_conn_new(params, NULL, 0);
    db->reference = sql == &defaults || order_sql_is_default(sql);
    if (prepared_init(&db->claim, "claim-sql", sql->claim, 1, err) != 0)
        goto fail;
    for (size_t i = 0; i < sql->side_effect_count; i++) {
        char field[40];
        snprintf(field, sizeof field, "side-effect-sql[%zu]", i + 1);
        if (prepared_init(&db->side[i], field, sql->side_effects[i], 1, err) != 0)
            goto fail;
        db->side_count++;
    }
    if (prepared_init(&db->lookup, "lookup-sql", sql->lookup, 0, err) != 0 ||
        prepared_init(&db->pay[0], "pay-claim", pay_claim_sql, 0, err) != 0 ||
        prepared_init(&db->pay[1], "pay-stock", pay_stock_sql, 0, err) != 0 ||
        prepared_init(&db->pay[2], "pay-outbox", pay_outbox_sql, 0, err) != 0)
        goto fail;

    if (db_connect(db->conn, err) != 0)
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
    /* Never leave a transaction to the server's timeout; but no round trip
     * when none is open: closing an idle handle on a hung server must not
     * wait mysql-read-timeout (the COM_QUIT of mysql_close is only written). */
    if (db_in_transaction(db->conn))
        db_rollback(db->conn);
    db_conn_free(db->conn);
    order_sql_text_free(&db->claim.text);
    for (size_t i = 0; i < db->side_count; i++)
        order_sql_text_free(&db->side[i].text);
    order_sql_text_free(&db->lookup.text);
    for (size_t i = 0; i < 3; i++)
        order_sql_text_free(&db->pay[i].text);
    free(db);
}

void hg_order_db_interrupt(hg_order_db *db)
{
    if (db != NULL)
        db_interrupt(db->conn);
}

void hg_order_db_set_progress(hg_order_db *db, void (*fn)(void *arg), void *arg)
{
    if (db != NULL)
        db_set_progress(db->conn, fn, arg);
}

unsigned long hg_order_db_connection_id(const hg_order_db *db)
{
    return db != NULL ? db_connection_id(db->conn) : 0;
}

uint64_t hg_order_db_connects(const hg_order_db *db)
{
    return db != NULL ? db_connects(db->conn) : 0;
}

uint64_t hg_order_db_commits_unknown(const hg_order_db *db)
{
    return db != NULL ? db_commits_unknown(db->conn) : 0;
}

int hg_order_db_prepare(hg_order_db *db, hg_order_error_t *err)
{
    hg_order_error_t local;
    if (err == NULL)
        err = &local;
    if (db == NULL) {
        db_error_set(err, "prepare: no database handle");
        return -1;
    }
    if (db_connect(db->conn, err) != 0)
        return -1;
    if (db_prepare(db->conn, &db->claim.stmt, err) == NULL)
        return -1;
    for (size_t i = 0; i < db->side_count; i++)
        if (db_prepare(db->conn, &db->side[i].stmt, err) == NULL)
            return -1;
    return db_prepare(db->conn, &db->lookup.stmt, err) != NULL ? 0 : -1;
}

/* ---------------------------------------------------------------- for order_batch.c */

int order_db_reference(const hg_order_db *db)
{
    return db->reference;
}

size_t order_db_side_count(const hg_order_db *db)
{
    return db->side_count;
}

/* ---------------------------------------------------------------- the transaction */

/* Execute p with the order id and reason bound. *rows gets the affected rows,
 * or for a statement that returns rows, the number of rows. Returns 0 or the
 * error code (err filled; a lost connection closed; never 0 for a failure). */
static unsigned execute(hg_order_db *db, prepared_t *p, uint64_t order_id, const char *reason, uint64_t *rows,
                        hg_order_error_t *err)
{
    MYSQL_BIND bind[ORDER_SQL_MAX_PARAMS];
    unsigned long reason_len = 0;
    for (int i = 0; i < p->text.nparams; i++) {
        if (p->text.kinds[i] == ORDER_SQL_PARAM_ORDER_ID)
            db_bind_u64(&bind[i], &order_id);
        else
            db_bind_str(&bind[i], reason, &reason_len);
    }
    MYSQL_STMT *st = db_exec(db->conn, &p->stmt, bind, (size_t)p->text.nparams, NULL, err);
    if (st == NULL)
        return err->code;
    if (mysql_stmt_field_count(st) > 0) {
        if (mysql_stmt_store_result(st) != 0) {
            db_fail(db->conn, p->field, st, err);
            return err->code;
        }
        *rows = mysql_stmt_num_rows(st);
        mysql_stmt_free_result(st);
    } else {
        *rows = mysql_stmt_affected_rows(st);
    }
    /* A CALL answers with a result set for each SELECT of its body, then
     * its status: every one is read, or the next statement (the COMMIT)
     * fails with 2014 "Commands out of sync". */
    for (int more; (more = mysql_stmt_next_result(st)) != -1;) {
        if (more > 0 || (mysql_stmt_field_count(st) > 0 && mysql_stmt_store_result(st) != 0)) {
            db_fail(db->conn, p->field, st, err);
            return err->code;
        }
        mysql_stmt_free_result(st);
    }
    return 0;
}

/* After a failed statement: leave the handle clean (rolled back, or
 * disconnected when the connection is lost or in doubt) and classify. */
static int fail(hg_order_db *db, unsigned code, hg_order_outcome_t cls, hg_order_outcome_t *outcome)
{
    if (code != 0 && db_classify(code) == DB_LOST) {
        db_disconnect(db->conn);
    } else {
        if (code == ER_NEED_REPREPARE)
            db_drop_statements(db->conn);
        db_rollback(db->conn);
    }
    *outcome = cls;
    return -1;
}

unsigned order_db_execute(hg_order_db *db, order_step_t step, size_t side, uint64_t order_id, const char *reason,
                          uint64_t *rows, hg_order_error_t *err)
{
    prepared_t *p = step == ORDER_STEP_CLAIM ? &db->claim : step == ORDER_STEP_LOOKUP ? &db->lookup : &db->side[side];
    return execute(db, p, order_id, reason, rows, err);
}

void order_db_abort(hg_order_db *db, unsigned code)
{
    hg_order_outcome_t ignored;
    fail(db, code, HG_ORDER_TRANSIENT, &ignored);
}

/* claim; if it changed one row: side effects and COMMIT → win; if none:
 * lookup and ROLLBACK → NOT_PENDING / NOT_FOUND. */
static int claim_transaction(hg_order_db *db, prepared_t *claim, prepared_t **sides, size_t side_count,
                             uint64_t order_id, const char *reason, hg_order_outcome_t win, hg_order_outcome_t *outcome,
                             hg_order_error_t *err)
{
    hg_order_outcome_t ignored;
    hg_order_error_t local;
    if (outcome == NULL)
        outcome = &ignored;
    if (err == NULL)
        err = &local;
    if (db == NULL) {
        db_error_set(err, "no database handle");
        *outcome = HG_ORDER_PERMANENT;
        return -1;
    }
    if (db_connect(db->conn, err) != 0) {
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
        if (db_commit(db->conn, err) != 0) /* unknown outcome when the connection died: the retry tells */
            return fail(db, err->code, hg_order_classify(err->code), outcome);
        *outcome = win;
        return 0;
    }

    if (rows > 1) {
        db_error_set(err,
                     "%s: changed %llu rows for order %llu, expected 0 or 1: rolled back "
                     "(its WHERE must select one order by id and status='pending')",
                     claim->field, (unsigned long long)rows, (unsigned long long)order_id);
        return fail(db, 0, HG_ORDER_PERMANENT, outcome);
    }

    /* 0 rows: paid, cancelled, or no such order. Nothing was changed. */
    uint64_t found = 0;
    code = execute(db, &db->lookup, order_id, NULL, &found, err);
    if (code != 0)
        return fail(db, code, hg_order_classify(code), outcome);
    db_rollback(db->conn); /* a failure closes the connection: nothing to lose, nothing was changed */
    *outcome = found > 0 ? HG_ORDER_NOT_PENDING : HG_ORDER_NOT_FOUND;
    return 0;
}

int hg_order_cancel(hg_order_db *db, uint64_t order_id, const char *reason, hg_order_outcome_t *outcome,
                    hg_order_error_t *err)
{
    prepared_t *sides[HG_ORDER_SQL_MAX_SIDE_EFFECTS];
    size_t n = 0;
    if (db != NULL)
        for (; n < db->side_count; n++)
            sides[n] = &db->side[n];
    return claim_transaction(db, db != NULL ? &db->claim : NULL, sides, n, order_id, reason, HG_ORDER_CANCELLED,
                             outcome, err);
}

int hg_order_pay(hg_order_db *db, uint64_t order_id, hg_order_outcome_t *outcome, hg_order_error_t *err)
{
    prepared_t *sides[2];
    if (db != NULL) {
        sides[0] = &db->pay[1];
        sides[1] = &db->pay[2];
    }
    return claim_transaction(db, db != NULL ? &db->pay[0] : NULL, sides, 2, order_id, NULL, HG_ORDER_PAID, outcome,
                             err);
}

/* ---------------------------------------------------------------- payload */

int hg_order_parse_id(const char *text, size_t len, uint64_t *id, char *err, size_t errlen)
{
    if (id == NULL)
        return err_set(err, errlen, "hg_order_parse_id: id is NULL");
    if (text == NULL || len == 0)
        return err_set(err, errlen, "payload is not an order id: it is empty");
    if (len > 20)
        return err_set(err, errlen, "payload is not an order id: %zu bytes, an order id has at most 20 digits", len);
    uint64_t v = 0;
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)text[i];
        if (c < '0' || c > '9') {
            if (c >= 0x21 && c < 0x7f)
                return err_set(err, errlen, "payload is not an order id: byte %zu is '%c', not a digit", i + 1, c);
            return err_set(err, errlen, "payload is not an order id: byte %zu is 0x%02x, not a digit", i + 1, c);
        }
        if (i == 0 && c == '0')
            return err_set(err, errlen, "payload is not an order id: %s",
                           len == 1 ? "0 is not an order id" : "leading zero");
        unsigned d = c - '0';
        if (v > (UINT64_MAX - d) / 10)
            return err_set(err, errlen, "payload is not an order id: larger than 18446744073709551615");
        v = v * 10 + d;
    }
    *id = v;
    return 0;
}
