/*
 * compensator/lock.c — GET_LOCK on a dedicated connection (contract: lock.h).
 *
 * State: l->held is our belief; it becomes 0 the moment any check fails,
 * and the connection is then closed (a half-dead connection is never reused).
 * Runs on the inspection thread only.
 */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include "compensator/lock.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "common/log.h"
#include "compensator/stats.h"
#include "compensator/stop.h"
#include "db/conn.h"

struct comp_lock {
    db_conn_t *db;
    char name[COMP_LOCK_NAME_MAX + 1];
    int held;
    db_stmt_t get, check, release;
};

static void set_held(comp_lock_t *l, int held)
{
    if (l->held && !held)
        comp_count(&comp_stats.lock_lost, 1);
    if (!l->held && held)
        comp_count(&comp_stats.lock_acquired, 1);
    l->held = held;
    atomic_store_explicit(&comp_stats.lock_held, held, memory_order_relaxed);
}

comp_lock_t *comp_lock_new(const hg_order_db_params_t *params, const char *name, unsigned timeout_s)
{
    comp_lock_t *l = xcalloc(1, sizeof *l);
    l->db = db_conn_new(params, "lock", DB_AUTOCOMMIT | DB_READ_COMMITTED);
    db_set_idle_timeout(l->db, timeout_s);
    comp_stop_watch_conn(l->db); /* cut, it loses the lock: the server releases it with the connection */
    snprintf(l->name, sizeof l->name, "%s", name);
    l->get = (db_stmt_t){ "get-lock", "SELECT GET_LOCK(?, 0)", 0, NULL };
    l->check = (db_stmt_t){ "check-lock", "SELECT IS_USED_LOCK(?) = CONNECTION_ID()", 0, NULL };
    l->release = (db_stmt_t){ "release-lock", "SELECT RELEASE_LOCK(?)", 0, NULL };
    return l;
}

/* Run one of the three statements with the name as its parameter; the
 * single integer result into *value (*is_null for NULL). Returns 0 / -1. */
static int name_query(comp_lock_t *l, db_stmt_t *s, int64_t *value, my_bool *is_null, hg_order_error_t *err)
{
    MYSQL_BIND param, result;
    unsigned long len;
    db_bind_str(&param, l->name, &len);
    db_bind_i64_null(&result, value, is_null);
    MYSQL_STMT *st = db_exec(l->db, s, &param, 1, &result, err);
    if (st == NULL)
        return -1;
    int rc = mysql_stmt_fetch(st);
    mysql_stmt_free_result(st);
    if (rc != 0 && rc != MYSQL_DATA_TRUNCATED) {
        if (err != NULL)
            snprintf(err->message, sizeof err->message, "lock: %s: no result row", s->name);
        return -1;
    }
    return 0;
}

void comp_lock_free(comp_lock_t *l)
{
    if (l == NULL)
        return;
    if (l->held && db_mysql(l->db) != NULL) {
        int64_t v;
        my_bool is_null;
        name_query(l, &l->release, &v, &is_null, NULL);
    }
    if (l->held)
        atomic_store_explicit(&comp_stats.lock_held, 0, memory_order_relaxed);
    comp_stop_unwatch(l->db);
    db_conn_free(l->db);
    free(l);
}

static void lose(comp_lock_t *l, const char *why)
{
    if (l->held)
        log_msg(LOG_LEVEL_WARN, "inspection lock '%s' lost: %s", l->name, why);
    set_held(l, 0);
    db_disconnect(l->db);
}

int comp_lock_check(comp_lock_t *l, hg_order_error_t *err)
{
    if (!l->held) {
        if (err != NULL) { /* lost at an earlier check (a keepalive during a page pause), logged there */
            err->code = 0;
            snprintf(err->message, sizeof err->message, "lock: '%s' was lost earlier", l->name);
        }
        return 0;
    }
    int64_t v = 0;
    my_bool is_null = 0;
    if (name_query(l, &l->check, &v, &is_null, err) != 0) {
        lose(l, err != NULL ? err->message : "the lock connection failed");
        return 0;
    }
    if (is_null || v != 1) {
        if (err != NULL) {
            err->code = 0;
            snprintf(err->message, sizeof err->message, "lock: IS_USED_LOCK('%s') is no longer this connection",
                     l->name);
        }
        lose(l, "held by another connection");
        return 0;
    }
    return 1;
}

int comp_lock_alive(comp_lock_t *l)
{
    if (!l->held)
        return 0;
    if (db_mysql(l->db) == NULL) {
        lose(l, "the lock connection is closed");
        return 0;
    }
    if (db_drop_if_closed(l->db)) { /* EOF, reset, or an unsolicited error packet: the server dropped us */
        lose(l, "the server closed the lock connection");
        return 0;
    }
    return 1;
}

comp_lock_state_t comp_lock_acquire(comp_lock_t *l, hg_order_error_t *err)
{
    if (l->held) {
        if (comp_lock_alive(l) && comp_lock_check(l, err))
            return COMP_LOCK_HELD;
    }
    int64_t v = 0;
    my_bool is_null = 0;
    db_drop_if_closed(l->db); /* the server closed it while idle: a new one, not a failed round */
    if (name_query(l, &l->get, &v, &is_null, err) != 0)
        return COMP_LOCK_ERROR;
    if (is_null) {
        if (err != NULL) {
            err->code = 0;
            snprintf(err->message, sizeof err->message, "lock: GET_LOCK('%s') returned NULL", l->name);
        }
        return COMP_LOCK_ERROR;
    }
    if (v != 1)
        return COMP_LOCK_BUSY;
    set_held(l, 1);
    log_msg(LOG_LEVEL_INFO, "inspection lock '%s' acquired on connection %lu", l->name, db_connection_id(l->db));
    return COMP_LOCK_HELD;
}
