/*
 * compensator/page.h — keyset pages of overdue rows, shared by the
 * overdue-outbox layer and the order-table inspection.
 *
 * Both layers read "rows whose expire_at is before NOW(6) - grace" in pages
 * ordered by (expire_at, id), each page after the last row handled, and
 * cancel the ids one by one. The pager holds the cutoff (read once per round
 * from the server's clock, the clock that wrote expire_at), the keyset
 * position and one page of rows; the layer keeps its own loop (locks,
 * closing rows, stats).
 *
 * The page statement takes five parameters — cutoff, last expire_at (twice),
 * last id, limit — and returns (id, expire_at) rows: see
 * COMP_INSPECT_PAGE_SQL (inspect.h) and overdue.c's page_sql.
 * One pager belongs to one layer thread.
 */
#ifndef HG_COMPENSATOR_PAGE_H
#define HG_COMPENSATOR_PAGE_H

#include <stdint.h>

#include "db/conn.h"

typedef struct comp_page_row {
    uint64_t id;
    MYSQL_TIME expire_at;
} comp_page_row_t;

typedef struct comp_pager {
    db_conn_t *db;     /* not owned */
    const char *layer; /* "inspection", "overdue": messages */
    char cutoff_name[48], page_name[48];
    db_stmt_t cutoff_stmt, page_stmt;
    uint64_t grace_us, page_size;
    comp_page_row_t *rows; /* page_size of them */
    MYSQL_TIME cutoff;     /* of the round (comp_pager_start) */
    MYSQL_TIME last_exp;   /* the keyset position: after (last_exp, last_id) */
    uint64_t last_id;
} comp_pager_t;

/* Set p up to read pages of page_size rows with page_sql on db (which must
 * outlive p). layer names the statements ("<layer>-cutoff",
 * "<layer>-page") and the messages. p must not move afterwards (the
 * statement names point into it). Out of memory aborts. */
void comp_pager_init(comp_pager_t *p, db_conn_t *db, const char *layer, const char *page_sql, uint64_t grace_us,
                     uint64_t page_size);

/* Free the rows. */
void comp_pager_free(comp_pager_t *p);

/* Start a round: read the cutoff (NOW(6) - grace) and go back to the first
 * row. Returns 0, or -1 with err. */
int comp_pager_start(comp_pager_t *p, hg_order_error_t *err);

/* Read the next page (after the position) into p->rows. Returns the row
 * count (fewer than page_size: the last page), or -1 with err. */
long comp_pager_next(comp_pager_t *p, hg_order_error_t *err);

/* Move the position past rows[i] (call when that row was handled). */
void comp_pager_advance(comp_pager_t *p, long i);

#endif
