/*
 * compensator/monitor.c — gauges and thresholds (contract: monitor.h).
 *
 * Connections, used by the monitor thread only: a db_conn_t for the counts
 * and an hg_client_t for DLQ LEN (opened lazily, kept), both cut by a stop
 * still waiting after stop-grace (stop.h): the round then just ends.
 */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include "compensator/monitor.h"

#include <hourglass/hourglass.h>

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "common/log.h"
#include "compensator/alerts.h"
#include "compensator/stats.h"
#include "compensator/stop.h"
#include "db/conn.h"

struct comp_monitor {
    const comp_config_t *cfg;
    db_conn_t *db;
    hg_client_t *client;
    hg_client_opts_t client_opts;
    comp_password_t password; /* password-file, read again before each open */
    comp_alerts_t *alerts;
    db_stmt_t overdue_stmt, unsent_stmt;
    int warned_unknown_group[COMP_MAX_DLQ_GROUPS];
};

static const char overdue_sql[] = "SELECT COUNT(*), TIMESTAMPDIFF(SECOND, MIN(expire_at), NOW(6)) FROM orders"
                                  " WHERE status = 'pending' AND expire_at < NOW(6) - INTERVAL ? MICROSECOND";
static const char unsent_sql[] = "SELECT COUNT(*) FROM order_timeout_msg WHERE status = 'new'";

comp_monitor_t *comp_monitor_new(const comp_config_t *cfg, const hg_order_db_params_t *params)
{
    comp_monitor_t *m = xcalloc(1, sizeof *m);
    m->cfg = cfg;
    m->db = db_conn_new(params, "monitor", DB_AUTOCOMMIT | DB_READ_COMMITTED);
    comp_stop_watch_conn(m->db);
    m->alerts = comp_alerts_new(cfg);
    hg_client_opts_init(&m->client_opts);
    m->client_opts.connect_timeout_ms = (uint32_t)cfg->broker_connect_timeout_ms;
    m->client_opts.read_timeout_ms = (uint32_t)cfg->broker_timeout_ms;
    comp_config_client_credentials(cfg, &m->client_opts);
    comp_password_init(cfg, &m->password);
    m->client_opts.reconnect_backoff.base_ms = 100;
    m->client_opts.reconnect_backoff.cap_ms = 100;
    m->client_opts.reconnect_backoff.attempts = 1;
    TLS_KEYS_TO_OPTS(cfg, &m->client_opts);
    m->overdue_stmt = (db_stmt_t){ "monitor-overdue", overdue_sql, 0, NULL };
    m->unsent_stmt = (db_stmt_t){ "monitor-unsent", unsent_sql, 0, NULL };
    return m;
}

void comp_monitor_free(comp_monitor_t *m)
{
    if (m == NULL)
        return;
    hg_client_close(m->client);
    memset(&m->password, 0, sizeof m->password);
    comp_stop_unwatch(m->db);
    db_conn_free(m->db);
    comp_alerts_free(m->alerts);
    free(m);
}

/* Run a statement returning one row of up to two integers (NULL → -1). */
static int read_ints(comp_monitor_t *m, db_stmt_t *s, MYSQL_BIND *params, size_t np, int64_t *a, int64_t *b,
                     hg_order_error_t *err)
{
    MYSQL_BIND result[2];
    my_bool null_a = 0, null_b = 0;
    int64_t dummy;
    db_bind_i64_null(&result[0], a, &null_a);
    db_bind_i64_null(&result[1], b != NULL ? b : &dummy, &null_b);
    MYSQL_STMT *st = db_exec(m->db, s, params, np, result, err);
    if (st == NULL)
        return -1;
    int rc = mysql_stmt_fetch(st);
    mysql_stmt_free_result(st);
    if (rc != 0 && rc != MYSQL_DATA_TRUNCATED) {
        snprintf(err->message, sizeof err->message, "monitor: %s returned no row", s->name);
        return -1;
    }
    if (null_a)
        *a = -1;
    if (b != NULL && null_b)
        *b = -1;
    return 0;
}

/* DLQ LEN group. Returns 0 with *depth, 1 when the stop cut the call (after
 * stop-grace: the broker did not answer), -1 with the cause in err when the
 * broker answered an error, or -2 with the cause in err when it could not be
 * reached or did not answer (connect, I/O, broker-timeout). */
static int dlq_len(comp_monitor_t *m, size_t i, int64_t *depth, char *err, size_t errlen)
{
    const char *group = m->cfg->groups[i];
    if (m->client != NULL && comp_password_stale(&m->password)) {
        log_msg(LOG_LEVEL_INFO, "monitor: password-file holds another password (SIGHUP): reconnecting with it");
        hg_client_close(m->client);
        m->client = NULL;
    }
    if (m->client == NULL) {
        hg_error_t e = { 0 };
        comp_password_refresh(m->cfg, &m->password, &m->client_opts);
        if (hg_client_open(m->cfg->uri, &m->client_opts, &m->client, &e) != HG_OK) {
            m->client = NULL;
            snprintf(err, errlen, "DLQ LEN %s: %s", group, e.message);
            return e.code == HG_ERR_CONNECT || e.code == HG_ERR_IO || e.code == HG_ERR_TIMEOUT ? -2 : -1;
        }
        hg_client_set_stop_fd(m->client, comp_stop_broker_fd());
    }
    const char *argv[] = { "DLQ", "LEN", group };
    hg_reply_t *reply = NULL;
    hg_err_t rc = hg_client_command(m->client, 3, argv, NULL, &reply);
    if (rc == HG_ERR_STOPPED)
        return 1;
    if (rc == HG_ERR_SERVER && strstr(hg_client_errmsg(m->client), "no such group") != NULL) {
        if (!m->warned_unknown_group[i])
            log_msg(LOG_LEVEL_WARN, "dlq-groups: the broker has no group '%s' (yet); its DLQ depth counts 0", group);
        m->warned_unknown_group[i] = 1;
        *depth = 0;
        return 0;
    }
    if (rc == HG_ERR_AUTH || rc == HG_ERR_CONNECT) { /* the reconnect used the password it was opened with: a new
                                                      * client next time, password-file read again */
        snprintf(err, errlen, "DLQ LEN %s: %s", group, hg_client_errmsg(m->client));
        hg_client_close(m->client);
        m->client = NULL;
        return -2;
    }
    if (rc != HG_OK) {
        snprintf(err, errlen, "DLQ LEN %s: %s", group, hg_client_errmsg(m->client));
        return rc == HG_ERR_CONNECT || rc == HG_ERR_IO || rc == HG_ERR_TIMEOUT ? -2 : -1;
    }
    m->warned_unknown_group[i] = 0;
    int ok = hg_reply_type(reply) == HG_REPLY_INTEGER;
    *depth = hg_reply_integer(reply);
    hg_reply_free(reply);
    if (!ok) {
        snprintf(err, errlen, "DLQ LEN %s: the reply is not an integer", group);
        return -1;
    }
    return 0;
}

/* Its own round (outcome, error) is recorded only after it returns
 * (main.c's run_once): the monitor's own failures are counted with this
 * round's, or its layer-failing alert came a round late (and never with
 * --once, where it runs one round). */
static void check_thresholds(comp_monitor_t *m, comp_run_outcome_t outcome, const char *error)
{
    const comp_config_t *cfg = m->cfg;
    char msg[512];
    int64_t overdue = comp_gauge_get(&comp_stats.overdue_pending);
    if (cfg->alert_overdue_pending > 0 && overdue >= 0) {
        snprintf(msg, sizeof msg, "%" PRId64 " pending order%s past expire_at + %llums (oldest %" PRId64 " s overdue)",
                 overdue, overdue == 1 ? "" : "s", cfg->inspect_grace_ms,
                 comp_gauge_get(&comp_stats.overdue_oldest_seconds));
        comp_alert_check(m->alerts, COMP_ALERT_OVERDUE_PENDING, "orders",
                         (uint64_t)overdue >= cfg->alert_overdue_pending, overdue, cfg->alert_overdue_pending, msg);
    }
    for (size_t i = 0; i < cfg->group_count && cfg->alert_dlq_depth > 0; i++) {
        int64_t depth = comp_gauge_get(&comp_stats.dlq_depth[i]);
        if (depth < 0)
            continue;
        snprintf(msg, sizeof msg, "DLQ of group %s holds %" PRId64 " message%s", cfg->groups[i], depth,
                 depth == 1 ? "" : "s");
        comp_alert_check(m->alerts, COMP_ALERT_DLQ_DEPTH, cfg->groups[i], (uint64_t)depth >= cfg->alert_dlq_depth,
                         depth, cfg->alert_dlq_depth, msg);
    }
    for (int l = 0; l < COMP_LAYER_COUNT && cfg->alert_layer_failures > 0; l++) {
        if (!(cfg->layers & COMP_LAYER_BIT(l)))
            continue;
        uint64_t failures = comp_load(&comp_stats.layer[l].consecutive_failures);
        char last[300];
        comp_stats_last_error(l, last, sizeof last);
        if (l == COMP_LAYER_INDEX_MONITOR) {
            failures = outcome == COMP_RUN_FAILED ? failures + 1 : 0;
            snprintf(last, sizeof last, "%s", outcome == COMP_RUN_FAILED ? error : "");
        }
        snprintf(msg, sizeof msg, "layer %s failed %" PRIu64 " run%s in a row: %s", comp_layer_name(l), failures,
                 failures == 1 ? "" : "s", last);
        comp_alert_check(m->alerts, COMP_ALERT_LAYER_FAILING, comp_layer_name(l), failures >= cfg->alert_layer_failures,
                         (int64_t)failures, cfg->alert_layer_failures, msg);
    }
}

comp_run_outcome_t comp_monitor_run(comp_monitor_t *m, char *errbuf, size_t errlen)
{
    hg_order_error_t err;
    memset(&err, 0, sizeof err);
    errbuf[0] = '\0';
    comp_run_outcome_t outcome = COMP_RUN_OK;
    db_drop_if_closed(m->db); /* idle since the last round: the server may have closed it (wait_timeout) */

    MYSQL_BIND param;
    uint64_t grace_us = m->cfg->inspect_grace_ms * 1000u;
    db_bind_u64(&param, &grace_us);
    int64_t count = -1, oldest = -1;
    if (read_ints(m, &m->overdue_stmt, &param, 1, &count, &oldest, &err) != 0) {
        count = oldest = -1;
        snprintf(errbuf, errlen, "%s", err.message);
        outcome = COMP_RUN_FAILED;
    }
    comp_progress(); /* each step, for /healthz's stuck check */
    comp_gauge_set(&comp_stats.overdue_pending, count);
    comp_gauge_set(&comp_stats.overdue_oldest_seconds, count > 0 ? oldest : count == 0 ? 0 : -1);

    int64_t unsent = -1;
    if (read_ints(m, &m->unsent_stmt, NULL, 0, &unsent, NULL, &err) != 0) {
        unsent = -1;
        if (errbuf[0] == '\0')
            snprintf(errbuf, errlen, "%s", err.message);
        outcome = COMP_RUN_FAILED;
    }
    comp_progress();
    comp_gauge_set(&comp_stats.outbox_unsent, unsent);

    /* A broker that does not answer is asked once a round, not once per
     * group: each DLQ LEN to a hung broker waits broker-timeout, and the
     * alerts below waited for all of them (32 groups: 160 s with the
     * defaults). The groups not asked are unknown (-1) this round. */
    int unreachable = 0;
    for (size_t i = 0; i < m->cfg->group_count; i++) {
        int64_t depth = -1;
        char e[400];
        int rc = unreachable ? -2 : dlq_len(m, i, &depth, e, sizeof e);
        comp_progress();
        if (rc > 0) { /* cut by the stop: not the broker's failure, and the round is over */
            log_msg(LOG_LEVEL_DEBUG, "monitor: the stop cut DLQ LEN %s", m->cfg->groups[i]);
            break;
        }
        if (rc != 0 && !unreachable) {
            comp_count(&comp_stats.dlq_read_errors, 1);
            if (errbuf[0] == '\0')
                snprintf(errbuf, errlen, "%s", e);
            outcome = COMP_RUN_FAILED;
            unreachable = rc == -2;
        }
        comp_gauge_set(&comp_stats.dlq_depth[i], rc == 0 ? depth : -1);
    }

    check_thresholds(m, outcome, errbuf);
    log_msg(outcome != COMP_RUN_OK ? LOG_LEVEL_WARN : LOG_LEVEL_DEBUG,
            "monitor: %s; overdue pending %" PRId64 ", outbox unsent %" PRId64 "%s%s", comp_run_outcome_name(outcome),
            count, unsent, errbuf[0] ? ": " : "", errbuf);
    return outcome;
}
