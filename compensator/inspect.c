/*
 * compensator/inspect.c — the order-table inspection (contract: inspect.h).
 *
 * Connections of the layer, all used by its one thread:
 *   query   db_conn_t: the cutoff and the keyset pages (autocommit, so each
 *           page reads fresh committed data and holds no snapshot);
 *   lock    comp_lock_t: GET_LOCK on its own connection (lock.c);
 *   cancel  hg_order_db via comp_canceller_t (cancel.c).
 * A page is read completely (store_result) before its cancels run.
 */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include "compensator/inspect.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "common/log.h"
#include "compensator/cancel.h"
#include "compensator/lock.h"
#include "compensator/page.h"
#include "compensator/stats.h"
#include "compensator/stop.h"
#include "db/conn.h"
#include "db/keys.h"

struct comp_inspect {
    db_conn_t *db;
    comp_lock_t *lock;
    comp_canceller_t canceller;
    comp_pager_t pager;
    uint64_t page_pause_ms, keepalive_ms;
    unsigned long long last_rows;
    hg_order_batch_item_t *items; /* one page of them */
};

comp_inspect_t *comp_inspect_new(const comp_config_t *cfg, const hg_order_db_params_t *params)
{
    comp_inspect_t *in = xcalloc(1, sizeof *in);
    in->db = db_conn_new(params, "inspection", DB_AUTOCOMMIT | DB_READ_COMMITTED);
    comp_stop_watch_conn(in->db);
    in->lock = comp_lock_new(params, cfg->effective_lock_name, db_keys_seconds(cfg->inspect_lock_timeout_ms));
    comp_canceller_init(&in->canceller, params, COMP_CANCELLER_INSPECTION, COMP_REASON_INSPECTION, cfg->cancel_batch,
                        db_keys_seconds(cfg->mysql_idle_transaction_timeout_ms));
    in->items = xcalloc(cfg->inspect_page_size, sizeof *in->items);
    comp_pager_init(&in->pager, in->db, "inspection", COMP_INSPECT_PAGE_SQL, cfg->inspect_grace_ms * 1000u,
                    cfg->inspect_page_size);
    in->page_pause_ms = cfg->inspect_page_pause_ms;
    in->keepalive_ms = comp_inspect_keepalive_ms(cfg);
    return in;
}

void comp_inspect_free(comp_inspect_t *in)
{
    if (in == NULL)
        return;
    comp_lock_free(in->lock);
    comp_canceller_close(&in->canceller);
    comp_stop_unwatch(in->db);
    db_conn_free(in->db);
    comp_pager_free(&in->pager);
    free(in->items);
    free(in);
}

void comp_inspect_keepalive(comp_inspect_t *in)
{
    hg_order_error_t err;
    comp_lock_check(in->lock, &err); /* a loss is logged and counted there; the next check ends the round */
}

/* comp_inspect_keepalive for comp_sleep_keepalive (a page pause). */
static void keepalive_during_pause(void *in)
{
    comp_inspect_keepalive(in);
    comp_progress(); /* a step, for /healthz's stuck check */
}

uint64_t comp_inspect_keepalive_ms(const comp_config_t *cfg)
{
    return cfg->inspect_lock_timeout_ms / 3;
}

unsigned long long comp_inspect_last_rows(const comp_inspect_t *in)
{
    return in->last_rows;
}

struct st_mysql *comp_inspect_mysql(comp_inspect_t *in)
{
    return db_mysql(in->db);
}

comp_run_outcome_t comp_inspect_run(comp_inspect_t *in, char *errbuf, size_t errlen)
{
    hg_order_error_t err;
    memset(&err, 0, sizeof err);
    errbuf[0] = '\0';
    in->last_rows = 0;

    comp_lock_state_t got = comp_lock_acquire(in->lock, &err);
    comp_progress(); /* each step, for /healthz's stuck check */
    switch (got) {
    case COMP_LOCK_HELD:
        break;
    case COMP_LOCK_BUSY:
        comp_count(&comp_stats.lock_busy, 1);
        log_msg(LOG_LEVEL_DEBUG, "inspection: the lock is held by another instance; skipped");
        return COMP_RUN_SKIPPED;
    case COMP_LOCK_ERROR:
        snprintf(errbuf, errlen, "%s", err.message);
        log_msg(LOG_LEVEL_WARN, "inspection: failed: %s", errbuf);
        return COMP_RUN_FAILED;
    }

    if (comp_pager_start(&in->pager, &err) != 0) {
        snprintf(errbuf, errlen, "%s", err.message);
        log_msg(LOG_LEVEL_WARN, "inspection: failed: %s", errbuf);
        return COMP_RUN_FAILED;
    }

    comp_count(&comp_stats.scans_started, 1);
    atomic_store_explicit(&comp_stats.scanning, 1, memory_order_relaxed);
    uint64_t cancelled = 0, failed = 0, skipped = 0;
    comp_run_outcome_t outcome = COMP_RUN_OK;
    char first_failure[400] = "";

    for (;;) {
        if (comp_stopping())
            break;
        int held = comp_lock_check(in->lock, &err);
        comp_progress();
        if (!held) {
            snprintf(errbuf, errlen, "lock lost before a page: %s", err.message);
            outcome = COMP_RUN_LOCK_LOST;
            break;
        }
        long n = comp_pager_next(&in->pager, &err);
        if (n < 0) {
            snprintf(errbuf, errlen, "%s", err.message);
            outcome = COMP_RUN_FAILED;
            break;
        }
        in->last_rows += (unsigned long long)n;
        comp_count(&comp_stats.pages, 1);
        comp_count(&comp_stats.rows_read, (uint64_t)n);
        /* The page in cancel transactions of cancel-batch orders, the lock
         * checked before each; the scan goes on past whatever was locked or
         * failed — the next round starts at the oldest again and retries it. */
        long step = (long)in->canceller.batch_size;
        for (long off = 0; off < n && outcome == COMP_RUN_OK && !comp_stopping(); off += step) {
            long len = n - off < step ? n - off : step;
            /* a round trip: it also keeps the lock connection from idling out */
            int still_held = comp_lock_check(in->lock, &err);
            comp_progress();
            if (!still_held) {
                snprintf(errbuf, errlen, "lock lost during a page after %" PRIu64 " cancels: %s", cancelled,
                         err.message);
                outcome = COMP_RUN_LOCK_LOST;
                break;
            }
            for (long i = off; i < off + len; i++)
                in->items[i] = (hg_order_batch_item_t){ .order_id = in->pager.rows[i].id };
            comp_pager_advance(&in->pager, off + len - 1);
            comp_cancel_many(&in->canceller, in->items + off, (size_t)len);
            for (long i = off; i < off + len && outcome == COMP_RUN_OK; i++) {
                hg_order_outcome_t o = in->items[i].outcome;
                if (o == HG_ORDER_CANCELLED)
                    cancelled++;
                if (o == HG_ORDER_LOCKED || comp_cancel_lock_conflict(o, &in->items[i].error))
                    skipped++; /* another transaction holds what it needs: next round */
                else if (o == HG_ORDER_TRANSIENT || o == HG_ORDER_PERMANENT) {
                    failed++;
                    if (comp_cancel_failure(in->items[i].order_id, &in->items[i].error, first_failure,
                                            sizeof first_failure)) {
                        snprintf(errbuf, errlen, "%s", first_failure);
                        outcome = COMP_RUN_FAILED;
                    }
                }
            }
        }
        if (outcome != COMP_RUN_OK || comp_stopping() || (uint64_t)n < in->pager.page_size)
            break;
        /* The lock kept alive through the pause: one longer than
         * inspect-lock-timeout let the server close the idle lock connection,
         * and every round ended lock-lost after its first page. */
        if (in->page_pause_ms > 0 &&
            comp_sleep_keepalive(in->page_pause_ms, in->keepalive_ms, keepalive_during_pause, in))
            break;
    }
    atomic_store_explicit(&comp_stats.scanning, 0, memory_order_relaxed);

    if (outcome == COMP_RUN_OK) {
        comp_count(&comp_stats.scans_completed, 1);
        if (failed > 0) { /* every order was tried; a person must look at the ones that failed */
            snprintf(errbuf, errlen, "%" PRIu64 " cancels failed, first: %s", failed, first_failure);
            outcome = COMP_RUN_FAILED;
        }
    }
    char cut[32];
    log_msg(outcome != COMP_RUN_OK ? LOG_LEVEL_WARN
            : cancelled > 0        ? LOG_LEVEL_INFO
                                   : LOG_LEVEL_DEBUG,
            "inspection: %s; %llu overdue orders read (expire_at < %s), %" PRIu64 " cancelled, %" PRIu64
            " skipped (locked), %" PRIu64 " failed%s%s",
            comp_run_outcome_name(outcome), in->last_rows, db_time_format(&in->pager.cutoff, cut, sizeof cut),
            cancelled, skipped, failed, errbuf[0] ? ": " : "", errbuf);
    return outcome;
}
