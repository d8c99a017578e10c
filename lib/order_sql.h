/*
 * lib/order_sql.h — internals shared by the order-cancel files of
 * libhourglass (not installed).
 *
 * order_sql.c:    the SQL lexer — placeholders of a configured statement
 *                 (? = order id, :reason), translation to the server's '?'
 *                 form, splitting a script into statements. Pure.
 * order_cancel.c: the hg_order_db handle; order_db_conn hands its
 *                 connection (db/conn.h) to the schema helper.
 * order_batch.c:  hg_order_cancel_batch, through the order_db_* steps below.
 * order_schema.c: the compiled-in reference schema and its creation.
 * order_outbox.c: the order service's half (outbox row, fast-path send, mark sent).
 */
#ifndef HG_LIB_ORDER_SQL_H
#define HG_LIB_ORDER_SQL_H

#include "db/conn.h"
#include "include/hourglass/order.h"

#include <stddef.h>

#define ORDER_SQL_MAX_PARAMS 16

typedef enum order_sql_param {
    ORDER_SQL_PARAM_ORDER_ID, /* '?' in the configured text */
    ORDER_SQL_PARAM_REASON    /* ':reason' in the configured text */
} order_sql_param_t;

/* A configured statement translated for mysql_stmt_prepare: every
 * placeholder is '?', kinds[i] says what the i-th one binds. */
typedef struct order_sql_text {
    char *sql; /* allocated; free with order_sql_text_free */
    int nparams;
    order_sql_param_t kinds[ORDER_SQL_MAX_PARAMS];
} order_sql_text_t;

/* Check text for field (see hg_order_sql_check) and, when out is not NULL,
 * translate it into *out (out->sql allocated). allow_reason: whether :reason
 * may appear. Returns 0 / -1 with err starting with the field name. */
int order_sql_translate(const char *field, const char *text, int allow_reason, order_sql_text_t *out, char *err,
                        size_t errlen);
void order_sql_text_free(order_sql_text_t *t);

/* Iterate over the top-level statements of a script: each call finds the
 * next statement at or after *pos (comments and blanks around it skipped,
 * its ';' excluded), stores its start and length and advances *pos. Returns
 * 1 when a statement was found, 0 at the end, -1 on an unterminated quote or
 * comment (err says where). */
int order_sql_next_statement(const char *script, size_t *pos, const char **stmt, size_t *len, char *err, size_t errlen);

/* The handle's connection (connected or not). For the schema helper and
 * order_outbox.c: they run plain queries and must end every transaction
 * they start. */
db_conn_t *order_db_conn(hg_order_db *db);

/* 1 when sql holds exactly hg_order_sql_default's statements (the batch
 * cancel then runs its set-based form). Pure. */
int order_sql_is_default(const hg_order_sql_t *sql);

/* order_cancel.c's handle, as order_batch.c drives it. */
typedef enum order_step {
    ORDER_STEP_CLAIM,
    ORDER_STEP_SIDE, /* side effect number `side` (0-based) */
    ORDER_STEP_LOOKUP
} order_step_t;

/* 1 when the handle's cancel SQL is the reference schema's. */
int order_db_reference(const hg_order_db *db);

/* How many side effects the handle's cancel runs. */
size_t order_db_side_count(const hg_order_db *db);

/* Execute one configured statement with order_id and reason bound, in the
 * open transaction (autocommit is off). *rows: affected rows, or the rows a
 * query returned. Returns 0 or the error code (err filled, never 0 for a
 * failure; a lost connection closed). */
unsigned order_db_execute(hg_order_db *db, order_step_t step, size_t side, uint64_t order_id, const char *reason,
                          uint64_t *rows, hg_order_error_t *err);

/* After a failure with code (0: ours): roll back, or disconnect when the
 * connection is lost or in doubt — the handle is clean again. */
void order_db_abort(hg_order_db *db, unsigned code);

#endif
