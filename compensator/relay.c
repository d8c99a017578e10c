/*
 * compensator/relay.c — the outbox relay (contract: relay.h).
 *
 * Connections, both used by the layer's one thread: a db_conn_t (explicit
 * transactions) and an hg_client_t to the broker, opened when rows are first
 * due — before any of them is claimed — and kept; libhourglass reconnects it
 * when the broker comes back. A reconnect that fails (the broker refused the
 * password the client was opened with: a rotated one) closes it, and a
 * SIGHUP that found a rotated password does too: the next open reads
 * password-file again (comp_password_refresh).
 *
 * No row lock is held across a broker call: a batch is claimed in one short
 * transaction (locked with SKIP LOCKED, leased by moving next_attempt_at
 * past the longest the sends can take — comp_relay_lease_ms, which asks the
 * opened client: hg_client_send_bound_ms — committed), sent with nothing
 * locked, and its outcome written in a second short transaction (only rows
 * still 'new': a payment or a cancel meanwhile wins). So a broker that
 * hangs never makes a payment or a cancel wait on the relay's locks. A
 * relay that dies between the two leaves its rows 'new' and leased: sent
 * again when the lease ends, SEND … DEDUP making that harmless; so does a
 * send that the stop cut after stop-grace (the client's stop fd,
 * comp_stop_broker_fd: HG_ERR_STOPPED), recorded neither sent nor failed.
 * While the client cannot be opened nothing is sent: a batch is selected
 * and recorded failed in one transaction, never leased.
 *
 * The lease and "mark sent" statements have relay-batch placeholders
 * (order_id IN (?, ?, …)); a shorter list is padded by repeating an id, so
 * one prepared statement serves every batch.
 *
 * A round that fails (MariaDB or the broker down: one a relay-interval, a
 * second by default) is logged through a common/log_limit.h: the first at
 * once, the same failure again at most once per 10 s with a count, one line
 * when a round sends again.
 */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include "compensator/relay.h"

#include <hourglass/hourglass.h>

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "base/clock.h"
#include "common/log.h"
#include "common/log_limit.h"
#include "compensator/stats.h"
#include "compensator/stop.h"
#include "db/keys.h"
#include "db/conn.h"

#define LAST_ERROR_MAX 255 /* order_timeout_msg.last_error VARCHAR(255) */

typedef struct relay_row {
    uint64_t order_id;
    MYSQL_TIME next_attempt_at;
    int64_t remaining_us; /* expire_at - NOW(6), on the server's clock */
    uint64_t attempts;
    char payload[24]; /* the order id in decimal: message payload and key */
} relay_row_t;

struct comp_relay {
    const comp_config_t *cfg;
    log_limit_t log; /* failed rounds and failed reconnects */
    db_conn_t *db;
    hg_client_t *client;
    hg_client_opts_t client_opts;
    comp_password_t password; /* password-file, read again before each open */
    hg_backoff_t backoff;
    size_t batch;
    char *sent_sql;
    char *lease_sql;
    uint64_t lease_us; /* longer than a batch's sends can take: comp_relay_lease_ms, set when the client opens */
    db_stmt_t due_stmt, select_tie_stmt, select_after_stmt, lease_stmt, sent_stmt, fail_stmt;
    relay_row_t *rows;
    hg_send_item_t *items;
    uint64_t *sent_ids;
    MYSQL_BIND *sent_params;
};

/* Within a round the batches walk the (status, next_attempt_at, order_id)
 * index as a keyset, after the last row of the batch before: the rows marked
 * 'sent' leave delete-marked entries at the head of the 'new' range until
 * purge removes them, and restarting every batch from the head steps over
 * all of them again (measured: a 10^5-row backlog slowed down batch after
 * batch). MariaDB does not turn a row comparison (a, b) > (?, ?) into an
 * index range, so the keyset is two ranges it does use, in one transaction:
 *   tie    the rows with the same next_attempt_at as the last one, after its
 *          order_id (bulk inserts share a timestamp);
 *   after  the rows with a later next_attempt_at, up to NOW(6). */
static const char select_tie_sql[] =
    "SELECT order_id, next_attempt_at, TIMESTAMPDIFF(MICROSECOND, NOW(6), expire_at), attempts"
    " FROM order_timeout_msg"
    " WHERE status = 'new' AND next_attempt_at = ? AND order_id > ?"
    " ORDER BY order_id LIMIT ? FOR UPDATE SKIP LOCKED";
static const char select_after_sql[] =
    "SELECT order_id, next_attempt_at, TIMESTAMPDIFF(MICROSECOND, NOW(6), expire_at), attempts"
    " FROM order_timeout_msg"
    " WHERE status = 'new' AND next_attempt_at > ? AND next_attempt_at <= NOW(6)"
    " ORDER BY next_attempt_at, order_id LIMIT ? FOR UPDATE SKIP LOCKED";

/* Whether any row is due: asked before the client is opened, so that a
 * relay with nothing to send never connects to the broker. */
static const char due_sql[] =
    "SELECT 1 FROM order_timeout_msg WHERE status = 'new' AND next_attempt_at <= NOW(6) LIMIT 1";

static const char fail_sql[] =
    "UPDATE order_timeout_msg SET attempts = attempts + 1, next_attempt_at = NOW(6) + INTERVAL ? MICROSECOND,"
    " last_error = ? WHERE order_id = ? AND status = 'new'";

/* "head(?, ?, …)" with n placeholders and the closing parenthesis. */
static char *in_list_sql(const char *head, size_t n)
{
    size_t len = strlen(head) + n * 3 + 2;
    char *sql = xmalloc(len);
    size_t at = (size_t)snprintf(sql, len, "%s", head);
    for (size_t i = 0; i < n; i++)
        at += (size_t)snprintf(sql + at, len - at, i == 0 ? "?" : ",?");
    snprintf(sql + at, len - at, ")");
    return sql;
}

void comp_relay_client_opts(const comp_config_t *cfg, hg_client_opts_t *o)
{
    hg_client_opts_init(o);
    o->connect_timeout_ms = (uint32_t)cfg->broker_connect_timeout_ms;
    o->read_timeout_ms = (uint32_t)cfg->broker_timeout_ms;
    comp_config_client_credentials(cfg, o);
    o->reconnect = 1;
    o->reconnect_backoff.base_ms = 100;
    o->reconnect_backoff.cap_ms = 100;
    o->reconnect_backoff.attempts = 1;
    o->resend_sends = 1;
    TLS_KEYS_TO_OPTS(cfg, o);
}

uint64_t comp_relay_lease_ms(const hg_client_t *client)
{
    /* comp_relay_client_opts always gives a bound: broker-timeout >= 1 ms, one reconnect retry */
    uint64_t bound = hg_client_send_bound_ms(client);
    return bound >= RELAY_LEASE_MAX_MS - 1000u ? RELAY_LEASE_MAX_MS : bound + 1000u;
}

comp_relay_t *comp_relay_new(const comp_config_t *cfg, const hg_order_db_params_t *params)
{
    comp_relay_t *r = xcalloc(1, sizeof *r);
    r->cfg = cfg;
    log_limit_init(&r->log, "relay: sends succeed", LOG_LIMIT_INTERVAL_MS);
    /* Its transactions last milliseconds (none spans a broker call), so the
     * idle-transaction bound of the cancel connections applies here too. */
    hg_order_db_params_t p = *params;
    p.idle_transaction_timeout_s = db_keys_seconds(cfg->mysql_idle_transaction_timeout_ms);
    r->db = db_conn_new(&p, "relay", DB_AUTOCOMMIT | DB_READ_COMMITTED);
    comp_stop_watch_conn(r->db); /* cut after stop-grace: a record cut leaves its rows 'new' and leased */
    r->batch = (size_t)cfg->relay_batch;

    comp_relay_client_opts(cfg, &r->client_opts);
    comp_password_init(cfg, &r->password);

    r->backoff.base_ms = (uint32_t)cfg->relay_backoff_base_ms;
    r->backoff.factor = cfg->relay_backoff_factor;
    r->backoff.cap_ms = (uint32_t)(cfg->relay_backoff_cap_ms > UINT32_MAX ? UINT32_MAX : cfg->relay_backoff_cap_ms);
    r->backoff.attempts = 0;
    r->backoff.jitter = cfg->relay_backoff_jitter;

    r->sent_sql = in_list_sql("UPDATE order_timeout_msg SET status = 'sent', attempts = attempts + 1, last_error = NULL"
                              " WHERE status = 'new' AND order_id IN (",
                              r->batch);
    r->lease_sql = in_list_sql("UPDATE order_timeout_msg SET next_attempt_at = NOW(6) + INTERVAL ? MICROSECOND"
                               " WHERE status = 'new' AND order_id IN (",
                               r->batch);

    r->due_stmt = (db_stmt_t){ "relay-due", due_sql, 0, NULL };
    r->select_tie_stmt = (db_stmt_t){ "relay-select-tie", select_tie_sql, 0, NULL };
    r->select_after_stmt = (db_stmt_t){ "relay-select-after", select_after_sql, 0, NULL };
    r->lease_stmt = (db_stmt_t){ "relay-lease", r->lease_sql, 0, NULL };
    r->sent_stmt = (db_stmt_t){ "relay-mark-sent", r->sent_sql, 0, NULL };
    r->fail_stmt = (db_stmt_t){ "relay-mark-failed", fail_sql, 0, NULL };
    r->rows = xcalloc(r->batch, sizeof *r->rows);
    r->items = xcalloc(r->batch, sizeof *r->items);
    r->sent_ids = xcalloc(r->batch, sizeof *r->sent_ids);
    r->sent_params = xcalloc(r->batch + 1, sizeof *r->sent_params); /* the lease's interval first */
    return r;
}

void comp_relay_free(comp_relay_t *r)
{
    if (r == NULL)
        return;
    hg_client_close(r->client);
    comp_stop_unwatch(r->db);
    db_conn_free(r->db);
    log_limit_destroy(&r->log);
    memset(&r->password, 0, sizeof r->password);
    free(r->sent_sql);
    free(r->lease_sql);
    free(r->rows);
    free(r->items);
    free(r->sent_ids);
    free(r->sent_params);
    free(r);
}

/* Run one of the two keyset selects, appending up to limit rows to r->rows
 * from index *n on. Returns 0 / -1. */
static int select_into(comp_relay_t *r, db_stmt_t *s, MYSQL_BIND *params, size_t nparams, size_t limit, long *n,
                       hg_order_error_t *err)
{
    MYSQL_BIND result[4];
    uint64_t id, attempts;
    MYSQL_TIME at;
    int64_t remaining;
    my_bool remaining_null = 0;
    db_bind_u64(&result[0], &id);
    db_bind_time(&result[1], &at);
    db_bind_i64_null(&result[2], &remaining, &remaining_null);
    db_bind_u64(&result[3], &attempts);
    MYSQL_STMT *st = db_exec(r->db, s, params, nparams, result, err);
    if (st == NULL)
        return -1;
    int rc;
    size_t got = 0;
    while ((rc = mysql_stmt_fetch(st)) == 0 || rc == MYSQL_DATA_TRUNCATED)
        if (got < limit && (size_t)*n < r->batch) {
            relay_row_t *row = &r->rows[(*n)++];
            got++;
            row->order_id = id;
            row->next_attempt_at = at;
            row->remaining_us = remaining_null ? 0 : remaining;
            row->attempts = attempts;
            snprintf(row->payload, sizeof row->payload, "%" PRIu64, id);
        }
    return db_fetch_end(r->db, s, st, rc, err);
}

/* Lock up to batch due rows after the keyset position (last_at, last_id).
 * Returns the count, or -1. */
static long select_rows(comp_relay_t *r, MYSQL_TIME *last_at, uint64_t *last_id, hg_order_error_t *err)
{
    long n = 0;
    MYSQL_BIND params[3];
    uint64_t limit = r->batch;
    db_bind_time(&params[0], last_at);
    db_bind_u64(&params[1], last_id);
    db_bind_u64(&params[2], &limit);
    if (select_into(r, &r->select_tie_stmt, params, 3, r->batch, &n, err) != 0)
        return -1;
    if ((size_t)n < r->batch) {
        uint64_t rest = r->batch - (size_t)n;
        db_bind_time(&params[0], last_at);
        db_bind_u64(&params[1], &rest);
        if (select_into(r, &r->select_after_stmt, params, 2, rest, &n, err) != 0)
            return -1;
    }
    return n;
}

/* last_error must fit VARCHAR(255) and be valid UTF-8 under strict mode:
 * keep printable ASCII, replace anything else. */
static void sanitize(const char *in, char *out, size_t outlen)
{
    size_t n = 0;
    for (; *in != '\0' && n + 1 < outlen && n < LAST_ERROR_MAX; in++)
        out[n++] = (*in >= 0x20 && *in < 0x7f) ? *in : '?';
    out[n] = '\0';
}

static int mark_failed(comp_relay_t *r, const relay_row_t *row, const char *cause, hg_order_error_t *err)
{
    uint64_t delay_us =
        hg_backoff_delay(&r->backoff, row->attempts > 64 ? 64 : (unsigned)row->attempts, NULL, NULL) * 1000u;
    char text[LAST_ERROR_MAX + 1];
    sanitize(cause, text, sizeof text);
    MYSQL_BIND params[3];
    unsigned long len;
    uint64_t id = row->order_id;
    db_bind_u64(&params[0], &delay_us);
    db_bind_str(&params[1], text, &len);
    db_bind_u64(&params[2], &id);
    return db_exec(r->db, &r->fail_stmt, params, 3, NULL, err) != NULL ? 0 : -1;
}

/* Run stmt (… order_id IN (batch placeholders)) over ids[0..count), the
 * list padded with ids[0]; with lead (not NULL) bound first. *changed (may
 * be NULL) gets the rows it changed (each once, whatever the padding). */
static int exec_in_list(comp_relay_t *r, db_stmt_t *stmt, const uint64_t *lead, const uint64_t *ids, size_t count,
                        uint64_t *changed, hg_order_error_t *err)
{
    size_t k = 0;
    if (lead != NULL)
        db_bind_u64(&r->sent_params[k++], (uint64_t *)lead);
    for (size_t i = 0; i < r->batch; i++)
        db_bind_u64(&r->sent_params[k++], (uint64_t *)&ids[i < count ? i : 0]);
    MYSQL_STMT *st = db_exec(r->db, stmt, r->sent_params, k, NULL, err);
    if (st == NULL)
        return -1;
    if (changed != NULL)
        *changed = (uint64_t)mysql_stmt_affected_rows(st);
    return 0;
}

/* 1 when a row is due, 0 when none, -1 on a database failure. */
static long rows_due(comp_relay_t *r, hg_order_error_t *err)
{
    MYSQL_BIND result;
    uint64_t one = 0;
    db_bind_u64(&result, &one);
    MYSQL_STMT *st = db_exec(r->db, &r->due_stmt, NULL, 0, &result, err);
    if (st == NULL)
        return -1;
    int rc = mysql_stmt_fetch(st);
    mysql_stmt_free_result(st);
    return rc == 0 || rc == MYSQL_DATA_TRUNCATED ? 1 : 0;
}

/* Open the client (before anything is claimed: the lease need not cover the
 * open) and take the lease from it. r->client stays NULL when it cannot be
 * opened; open_err says why. */
static void relay_open(comp_relay_t *r, hg_error_t *open_err)
{
    comp_password_refresh(r->cfg, &r->password, &r->client_opts);
    if (hg_client_open(r->cfg->uri, &r->client_opts, &r->client, open_err) != HG_OK) {
        r->client = NULL;
        return;
    }
    hg_client_set_stop_fd(r->client, comp_stop_broker_fd()); /* a stop past stop-grace cuts the sends */
    r->lease_us = comp_relay_lease_ms(r->client) * 1000u;
    log_msg(LOG_LEVEL_INFO,
            "relay: connected to %s; batches of %zu rows, each leased for %" PRIu64
            " ms (the longest its sends can take, every resend counted, and a second)",
            hg_client_address(r->client), r->batch, r->lease_us / 1000);
}

/* Begin a transaction and lock up to a batch of due rows (SKIP LOCKED),
 * moving the keyset position past them. Returns the rows locked, the
 * transaction left open; 0 (nothing due) or -1 with it rolled back. */
static long select_batch(comp_relay_t *r, MYSQL_TIME *last_at, uint64_t *last_id, hg_order_error_t *err)
{
    if (db_begin(r->db, err) != 0)
        return -1;
    long n = select_rows(r, last_at, last_id, err);
    if (n <= 0) {
        db_rollback(r->db);
        return n;
    }
    *last_at = r->rows[n - 1].next_attempt_at;
    *last_id = r->rows[n - 1].order_id;
    return n;
}

/* Claim up to a batch of due rows: lock them (SKIP LOCKED), lease them
 * (next_attempt_at past the sends), commit. Returns the rows claimed (0:
 * nothing due), or -1 with nothing claimed. */
static long claim_batch(comp_relay_t *r, MYSQL_TIME *last_at, uint64_t *last_id, hg_order_error_t *err)
{
    long n = select_batch(r, last_at, last_id, err);
    if (n <= 0)
        return n;
    for (long i = 0; i < n; i++)
        r->sent_ids[i] = r->rows[i].order_id;
    if (exec_in_list(r, &r->lease_stmt, &r->lease_us, r->sent_ids, (size_t)n, NULL, err) != 0 ||
        db_commit(r->db, err) != 0) {
        db_rollback(r->db);
        return -1;
    }
    return n;
}

/* The send items of the n rows (r->items), each failed with open_err when
 * there is no client to send with. */
static void fill_items(comp_relay_t *r, long n, const hg_error_t *open_err)
{
    for (long i = 0; i < n; i++) {
        relay_row_t *row = &r->rows[i];
        hg_send_item_t *it = &r->items[i];
        memset(it, 0, sizeof *it);
        it->topic = r->cfg->topic;
        it->key = row->payload;
        it->dedup = 1; /* a fast-path send that did arrive is not sent twice (docs/order-service.md) */
        it->payload = row->payload;
        it->payload_len = strlen(row->payload);
        /* The remaining delay in whole ms, rounded up (never early); past expiry: now. */
        it->delay = row->remaining_us > 0 ? hg_delay_ms(((uint64_t)row->remaining_us + 999) / 1000) : hg_delay_none();
        if (r->client == NULL) {
            it->err = open_err->code != HG_OK ? open_err->code : HG_ERR_CONNECT;
            snprintf(it->error, sizeof it->error, "%s", open_err->message[0] ? open_err->message : "cannot connect");
        }
    }
}

/* Send the n rows claimed at claimed_us (leased, not locked) and count a
 * send that took longer than the lease. */
static void send_batch(comp_relay_t *r, long n, uint64_t claimed_us)
{
    hg_send_many(r->client, r->items, (size_t)n, NULL);
    uint64_t took_us = clock_mono_us() - claimed_us;
    if (took_us > r->lease_us) {
        /* A broker that answers slowly but steadily restarts broker-timeout with every reply (or a host with
         * several addresses): past the bound hg_client_send_bound_ms counts. */
        comp_count(&comp_stats.relay_lease_overruns, 1);
        log_msg(LOG_LEVEL_WARN,
                "relay: sending %ld rows took %" PRIu64 " ms, past their lease of %" PRIu64
                " ms: another relay may have sent them too (DEDUP makes that harmless)",
                n, took_us / 1000, r->lease_us / 1000);
    }
}

/* Record the outcome of the n rows' items in the open transaction and
 * commit it; an item whose send the stop cut (HG_ERR_STOPPED) is left as it
 * is, 'new' and leased. Returns n, or -1 (rolled back). */
static long record_batch(comp_relay_t *r, long n, uint64_t *sent, uint64_t *superseded, uint64_t *send_failures,
                         char *cause, size_t causelen, hg_order_error_t *err)
{
    size_t ok = 0;
    for (long i = 0; i < n; i++) {
        if (r->items[i].err == HG_OK) {
            r->sent_ids[ok++] = r->rows[i].order_id;
            continue;
        }
        if (r->items[i].err == HG_ERR_STOPPED)
            continue;
        (*send_failures)++;
        if (cause[0] == '\0')
            snprintf(cause, causelen, "order %s: send failed: %s", r->rows[i].payload, r->items[i].error);
        if (mark_failed(r, &r->rows[i], r->items[i].error, err) != 0) {
            db_rollback(r->db);
            return -1;
        }
    }
    /* Only rows still 'new' are marked: a row whose order was paid or
     * cancelled during the send is 'done' already, and its message finds
     * the order settled. Those are not relayed rows. */
    uint64_t marked = 0;
    if (ok > 0 && exec_in_list(r, &r->sent_stmt, NULL, r->sent_ids, ok, &marked, err) != 0) {
        db_rollback(r->db);
        return -1;
    }
    if (db_commit(r->db, err) != 0) {
        db_rollback(r->db);
        return -1;
    }
    if (marked > ok)
        marked = ok; /* cannot happen: each id once, status='new' */
    *sent += marked;
    *superseded += ok - marked;
    comp_count(&comp_stats.relay_sent, marked);
    comp_count(&comp_stats.relay_superseded, ok - marked);
    comp_count(&comp_stats.relay_send_failures, *send_failures);
    return n;
}

/* The items whose send the stop cut (HG_ERR_STOPPED: no reply came; the
 * message may have reached the broker, the DEDUP of the next send covers
 * that). Their rows stay as the claim left them: 'new', leased, no attempt
 * counted. */
static size_t count_stopped(const comp_relay_t *r, long n)
{
    size_t stopped = 0;
    for (long i = 0; i < n; i++)
        stopped += r->items[i].err == HG_ERR_STOPPED;
    return stopped;
}

/* One batch: claimed (a short transaction), sent with nothing locked, its
 * outcome written (another). Without a client (it cannot be opened) the
 * batch is selected and recorded failed in one transaction. Returns the rows
 * claimed (0: nothing due), or -1 on a database failure; *sent counts the
 * rows marked 'sent', *superseded the rows sent whose order was paid or
 * cancelled during the send (no longer 'new' at the record: left as they
 * are), *send_failures the rows whose send failed, *left the rows whose
 * send the stop cut (left leased, recorded neither way; when that is every
 * row, no record transaction is begun). */
static long relay_batch(comp_relay_t *r, MYSQL_TIME *last_at, uint64_t *last_id, uint64_t *sent, uint64_t *superseded,
                        uint64_t *send_failures, uint64_t *left, char *cause, size_t causelen, hg_order_error_t *err)
{
    hg_error_t open_err = { 0 };
    if (r->client == NULL) {
        long due = rows_due(r, err);
        if (due <= 0)
            return due;
        comp_progress(); /* each step, for /healthz's stuck check */
        relay_open(r, &open_err);
        comp_progress();
    }
    long n = r->client != NULL ? claim_batch(r, last_at, last_id, err) : select_batch(r, last_at, last_id, err);
    if (n <= 0)
        return n;
    comp_progress();
    uint64_t claimed_us = clock_mono_us(); /* the lease runs from the claim's commit */
    comp_count(&comp_stats.relay_batches, 1);
    fill_items(r, n, &open_err);
    if (r->client != NULL) {
        send_batch(r, n, claimed_us);
        comp_progress();
        size_t stopped = count_stopped(r, n);
        *left += stopped;
        if (stopped == (size_t)n)
            return n; /* nothing to record (and the stop has cut the MariaDB connection too) */
        if (db_begin(r->db, err) != 0)
            return -1; /* the rows stay leased 'new': sent again when the lease ends */
    }
    return record_batch(r, n, sent, superseded, send_failures, cause, causelen, err);
}

/* Close the client (logged with why; limited: a failure that repeats every
 * round): the next batch opens it again, with password-file read again. */
static void relay_close(comp_relay_t *r, const char *why, int limited)
{
    if (limited)
        log_limit_fail(&r->log, LOG_LEVEL_INFO, why, "relay: %s", why);
    else
        log_msg(LOG_LEVEL_INFO, "relay: %s", why);
    hg_client_close(r->client);
    r->client = NULL;
}

/* 1 when a send of the batch's n items failed to reconnect: refused for its
 * credentials (the library reconnects with the password it was opened with;
 * a later attempt says "cannot connect … during AUTH") or not connected at
 * all. A new client then reads password-file again. */
static int refused(const comp_relay_t *r, long n)
{
    for (long i = 0; i < n; i++)
        if (r->items[i].err == HG_ERR_AUTH || r->items[i].err == HG_ERR_CONNECT)
            return 1;
    return 0;
}

comp_run_outcome_t comp_relay_run(comp_relay_t *r, uint64_t *sent_out, char *errbuf, size_t errlen)
{
    hg_order_error_t err;
    memset(&err, 0, sizeof err);
    errbuf[0] = '\0';
    uint64_t sent = 0, superseded = 0, failures = 0, left = 0;
    char cause[400] = "";
    comp_run_outcome_t outcome = COMP_RUN_OK;
    MYSQL_TIME last_at = { .year = 1000, .month = 1, .day = 1, .time_type = MYSQL_TIMESTAMP_DATETIME };
    uint64_t last_id = 0;
    db_drop_if_closed(r->db); /* idle since the last round: the server may have closed it (wait_timeout) */
    if (r->client != NULL && comp_password_stale(&r->password))
        relay_close(r, "password-file holds another password (SIGHUP): reconnecting with it", 0);
    while (!comp_stopping()) {
        uint64_t batch_failures = 0;
        long n =
            relay_batch(r, &last_at, &last_id, &sent, &superseded, &batch_failures, &left, cause, sizeof cause, &err);
        comp_progress();
        if (r->client != NULL && n > 0 && refused(r, n))
            relay_close(r, "could not reconnect to the broker: a new client next time, password-file read again", 1);
        failures += batch_failures;
        if (n < 0) {
            snprintf(errbuf, errlen, "%s", err.message);
            outcome = COMP_RUN_FAILED;
            break;
        }
        if (batch_failures > 0) {
            snprintf(errbuf, errlen, "%s", cause);
            outcome = COMP_RUN_FAILED;
            break;
        }
        if ((size_t)n < r->batch)
            break;
    }
    if (sent_out != NULL)
        *sent_out = sent;
    if (left > 0)
        log_msg(LOG_LEVEL_WARN,
                "relay: the stop cut the send of %" PRIu64 " outbox rows: left 'new' and leased, no attempt counted; "
                "sent again when the lease ends (DEDUP makes a send that did arrive exact)",
                left);
    if (outcome != COMP_RUN_OK) { /* the same cause every relay-interval: at most once per 10 s */
        const char *key = strstr(errbuf, "send failed: "); /* "order <id>: send failed: <why>": the why */
        log_limit_fail(&r->log, LOG_LEVEL_WARN, key != NULL ? key : errbuf,
                       "relay: %s; %" PRIu64 " outbox rows sent, %" PRIu64 " sent but paid or cancelled meanwhile, "
                       "%" PRIu64 " sends failed%s%s",
                       comp_run_outcome_name(outcome), sent, superseded, failures, errbuf[0] ? ": " : "", errbuf);
        return outcome;
    }
    if (sent + superseded > 0) /* a round with nothing due shows nothing about the broker */
        log_limit_ok(&r->log);
    log_msg(sent > 0 ? LOG_LEVEL_INFO : LOG_LEVEL_DEBUG,
            "relay: %s; %" PRIu64 " outbox rows sent, %" PRIu64 " sent but paid or cancelled meanwhile, %" PRIu64
            " sends failed",
            comp_run_outcome_name(outcome), sent, superseded, failures);
    return outcome;
}
