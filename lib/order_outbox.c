/*
 * lib/order_outbox.c — the order service's half of the fast path, in
 * libhourglass (contract: include/hourglass/order.h, "the order service's
 * half"; why: DESIGN.md §7, docs/order-service.md).
 *
 * The outbox row is written on the caller's own connection, in the caller's
 * open transaction, so the order and its timeout commit together or not at
 * all: no order without a timeout, no timeout without an order. After the
 * COMMIT the message is sent with the delay that remains until expire_at
 * (payload and KEY the order id in decimal, as the compensator's relay sends
 * it), and the row is marked 'sent' under the guard AND status='new' so that
 * a payment or a cancel that marked it 'done' in between is never undone.
 *
 * The statements are text queries with integers formatted in — no string of
 * the caller's reaches the SQL — one round trip each; no prepared statement
 * is kept, so nothing here must be re-prepared after a reconnect.
 *
 * Connection life follows order_cancel.c: a commit that fails, or a rollback
 * that cannot run, closes the connection (mysql_close discards whatever the
 * server still holds of the transaction) and the next call reconnects. A
 * commit is never retried here: after a lost connection its outcome is
 * unknown and only the caller can tell whether to create the order again.
 *
 * Threads: the handle's and the client's own (one thread at a time each).
 */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include "db/conn.h"
#include "lib/client.h"
#include "lib/order_sql.h"

#include "include/hourglass/hourglass.h"
#include "base/clock.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include <errmsg.h>

struct st_mysql *hg_order_db_mysql(hg_order_db *db, hg_order_error_t *err)
{
    if (db == NULL) {
        db_error_set(err, "no database handle");
        return NULL;
    }
    db_conn_t *c = order_db_conn(db);
    if (db_connect(c, err) != 0)
        return NULL;
    return db_mysql(c);
}

int hg_order_db_commit(hg_order_db *db, hg_order_error_t *err)
{
    MYSQL *m = db != NULL ? db_mysql(order_db_conn(db)) : NULL;
    if (m == NULL) {
        db_error_set(err, "commit: %s",
                     db == NULL ? "no database handle" : "the connection is gone: nothing was committed");
        if (err != NULL && db != NULL)
            err->code = CR_SERVER_GONE_ERROR;
        return -1;
    }
    if (mysql_commit(m) != 0) {
        db_error_mysql(err, "commit", m, NULL);
        db_disconnect(order_db_conn(db));
        return -1;
    }
    return 0;
}

void hg_order_db_rollback(hg_order_db *db)
{
    if (db != NULL)
        db_rollback(order_db_conn(db));
}

int hg_order_timeout_create(hg_order_db *db, uint64_t order_id, uint64_t expire_at_ms, uint32_t relay_after_ms,
                            hg_order_error_t *err)
{
    if (db == NULL || order_id == 0 || expire_at_ms == 0) {
        db_error_set(err, "outbox insert: %s",
                     db == NULL      ? "no database handle"
                     : order_id == 0 ? "order id 0"
                                     : "expire_at_ms 0");
        return -1;
    }
    MYSQL *m = hg_order_db_mysql(db, err);
    if (m == NULL)
        return -1;
    uint64_t relay_after_us =
        (uint64_t)(relay_after_ms != 0 ? relay_after_ms : HG_ORDER_RELAY_AFTER_DEFAULT_MS) * 1000u;
    char expire[48], sql[512];
    snprintf(expire, sizeof expire, "FROM_UNIXTIME(%" PRIu64 ".%03u)", expire_at_ms / 1000u,
             (unsigned)(expire_at_ms % 1000u));
    int n = snprintf(sql, sizeof sql,
                     "INSERT INTO order_timeout_msg (order_id, expire_at, status, attempts, next_attempt_at)"
                     " VALUES (%" PRIu64 ", %s, 'new', 0, LEAST(NOW(6) + INTERVAL %" PRIu64 " MICROSECOND, %s))",
                     order_id, expire, relay_after_us, expire);
    if (mysql_real_query(m, sql, (unsigned long)n) != 0) {
        db_error_mysql(err, "outbox insert", m, NULL);
        return -1;
    }
    return 0;
}

hg_err_t hg_order_timeout_send(hg_client_t *client, const char *topic, uint64_t order_id, uint64_t expire_at_ms,
                               char *id_out)
{
    if (id_out != NULL)
        id_out[0] = '\0';
    if (client == NULL)
        return HG_ERR_ARG;
    if (order_id == 0) /* its payload "0" would be refused by every consumer (hg_order_parse_id) */
        return client_fail(client, HG_ERR_ARG, "hg_order_timeout_send: order id 0 is not an order id");
    char id[24];
    int len = snprintf(id, sizeof id, "%" PRIu64, order_id);
    uint64_t now = clock_wall_ms();
    hg_delay_t delay = expire_at_ms > now ? hg_delay_ms(expire_at_ms - now) : hg_delay_none();
    /* DEDUP: a resend, or the relay racing this send, never puts a second
     * timeout message of the order in flight. */
    return hg_send_dedup(client, topic != NULL ? topic : HG_ORDER_TIMEOUT_TOPIC, id, id, (size_t)len, delay, id_out,
                         NULL);
}

int hg_order_timeout_mark_sent(hg_order_db *db, uint64_t order_id, int *marked, hg_order_error_t *err)
{
    if (marked != NULL)
        *marked = 0;
    if (db == NULL) {
        db_error_set(err, "mark sent: no database handle");
        return -1;
    }
    MYSQL *m = hg_order_db_mysql(db, err);
    if (m == NULL)
        return -1;
    char sql[256];
    int n = snprintf(sql, sizeof sql,
                     "UPDATE order_timeout_msg SET status='sent', attempts=attempts+1, last_error=NULL"
                     " WHERE order_id=%" PRIu64 " AND status='new'",
                     order_id);
    if (mysql_real_query(m, sql, (unsigned long)n) != 0) {
        db_error_mysql(err, "mark sent", m, NULL);
        hg_order_db_rollback(db);
        return -1;
    }
    my_ulonglong rows = mysql_affected_rows(m);
    if (hg_order_db_commit(db, err) != 0)
        return -1;
    if (marked != NULL)
        *marked = rows == 1;
    return 0;
}

const char *hg_order_publish_outcome_name(hg_order_publish_outcome_t outcome)
{
    static const char *const names[] = {
        [HG_ORDER_PUBLISH_SENT] = "sent",
        [HG_ORDER_PUBLISH_SENT_KEPT] = "sent-kept",
        [HG_ORDER_PUBLISH_SEND_FAILED] = "send-failed",
        [HG_ORDER_PUBLISH_MARK_FAILED] = "mark-failed",
    };
    if ((unsigned)outcome < sizeof names / sizeof names[0])
        return names[outcome];
    return "unknown";
}

hg_order_publish_outcome_t hg_order_timeout_publish(hg_order_db *db, struct hg_client *client, const char *topic,
                                                    uint64_t order_id, uint64_t expire_at_ms, char *id_out, char *error,
                                                    size_t errlen)
{
    if (error != NULL && errlen > 0)
        error[0] = '\0';
    hg_err_t rc = hg_order_timeout_send(client, topic, order_id, expire_at_ms, id_out);
    if (rc != HG_OK) {
        if (error != NULL && errlen > 0)
            snprintf(error, errlen, "send: %s", client != NULL ? hg_client_errmsg(client) : "the client is NULL");
        return HG_ORDER_PUBLISH_SEND_FAILED;
    }
    int marked = 0;
    hg_order_error_t err = { 0 };
    if (hg_order_timeout_mark_sent(db, order_id, &marked, &err) != 0) {
        if (error != NULL && errlen > 0)
            snprintf(error, errlen, "%s", err.message);
        return HG_ORDER_PUBLISH_MARK_FAILED;
    }
    return marked ? HG_ORDER_PUBLISH_SENT : HG_ORDER_PUBLISH_SENT_KEPT;
}

int hg_order_pay_revoke(hg_order_db *db, struct hg_client *client, const char *topic, uint64_t order_id,
                        hg_order_outcome_t *outcome, long *revoked, hg_order_error_t *err)
{
    hg_order_outcome_t ignored;
    if (outcome == NULL) /* may be NULL, as for hg_order_pay: the revoke still needs to know */
        outcome = &ignored;
    if (revoked != NULL)
        *revoked = -1;
    int rc = hg_order_pay(db, order_id, outcome, err);
    if (rc != 0 || *outcome != HG_ORDER_PAID || client == NULL)
        return rc;
    char key[24];
    snprintf(key, sizeof key, "%" PRIu64, order_id);
    hg_revoke_result_t res;
    if (hg_msg_revoke_key(client, topic != NULL ? topic : HG_ORDER_TIMEOUT_TOPIC, key, &res) == HG_OK &&
        revoked != NULL)
        *revoked = (long)res.revoked;
    return rc;
}
