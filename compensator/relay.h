/*
 * compensator/relay.h — layer 1: the outbox relay.
 *
 * The order service writes an order_timeout_msg row ('new') in the order's
 * own transaction and sends the delayed message after the commit (the fast
 * path), marking the row 'sent'. When that send failed or the service died
 * before it, the row stays 'new'; the relay sends it:
 *
 *   claim, one short transaction:
 *     SELECT order_id, remaining µs to expire_at, attempts FROM order_timeout_msg
 *       WHERE status='new' AND next_attempt_at <= NOW(6)
 *         AND (next_attempt_at, order_id) after the previous batch's last row
 *       ORDER BY next_attempt_at, order_id LIMIT relay-batch
 *       FOR UPDATE SKIP LOCKED
 *     UPDATE … SET next_attempt_at = NOW(6) + lease WHERE status='new' AND order_id IN (…)
 *     COMMIT
 *   send, nothing locked:
 *     hg_send_many: SEND topic <order id> KEY <order id> DELAY <remaining ms> DEDUP
 *       (no delay when expire_at has passed), pipelined
 *   record, one short transaction (rows still 'new' only):
 *     sent rows:   status='sent', attempts+1, last_error NULL   (one statement)
 *     failed rows: attempts+1, next_attempt_at = NOW(6) + backoff(attempts),
 *                  last_error = the cause                        (capped
 *                  exponential backoff with jitter, hg_backoff_delay)
 *     COMMIT
 *
 * The lease (comp_relay_lease_ms: the longest the sends can take, every
 * resend of the client counted) keeps other compensators off the batch
 * while it is sent; SKIP LOCKED
 * lets several claim at once, none waiting for another. No lock is held
 * across the broker call: a payment or a cancel of an order in the batch
 * never waits on the relay, even while the broker hangs (tested), and a
 * row paid meanwhile stays 'done' (its send, if it succeeded, is counted
 * as superseded, not as relayed: comp_stats.relay_superseded). A crash between the send and the
 * record leaves the rows 'new' and leased: sent again when the lease ends,
 * which DEDUP makes harmless (at least once; the cancel is idempotent).
 * The connection runs READ COMMITTED (db/conn.h), so the claim takes record
 * locks only, and mysql-idle-transaction-timeout bounds a frozen relay's
 * transaction as it does the cancel connections'.
 *
 * A round relays batches until one comes back short or a send fails.
 * Threads: the relay thread only (or main with --once).
 */
#ifndef HG_COMPENSATOR_RELAY_H
#define HG_COMPENSATOR_RELAY_H

#include <stddef.h>
#include <stdint.h>

#include <hourglass/order.h>

#include "compensator/comp_config.h"
#include "compensator/stats.h"

typedef struct comp_relay comp_relay_t;

/* The lease of a claimed batch, in ms: the longest its sends can take when
 * the broker makes no progress for broker-timeout — the client opened (a
 * connection round — TCP connect, the TLS handshake with hourglass+tls:// or
 * amqps://, AUTH's reply with credentials — and its one reconnect retry
 * 100 ms later), then 1 + HG_SEND_MAX_RESENDS send rounds, each reconnecting
 * as long and waiting broker-timeout for replies — plus a second:
 *   ensure = 2 × (connect [+ connect with TLS] [+ broker-timeout with AUTH]) + 100 ms
 *   lease  = ensure + (1 + HG_SEND_MAX_RESENDS) × (ensure + broker-timeout) + 1 s
 * Assumes one address per host name and a reply within broker-timeout of
 * the one before (the client's timeout restarts with every reply); a batch
 * that takes longer anyway is counted (relay_lease_overruns) and logged.
 * Pure. */
uint64_t comp_relay_lease_ms(const comp_config_t *cfg);

/* Set up (nothing connects yet). cfg and params' strings must outlive it. */
comp_relay_t *comp_relay_new(const comp_config_t *cfg, const hg_order_db_params_t *params);

/* Close the connections, free. NULL is fine. */
void comp_relay_free(comp_relay_t *r);

/* One round. Returns COMP_RUN_OK, or COMP_RUN_FAILED when the database
 * failed or a send failed (the rows then carry attempts, next_attempt_at and
 * last_error); err says why. *sent (may be NULL) receives the rows marked
 * 'sent' in this round. */
comp_run_outcome_t comp_relay_run(comp_relay_t *r, uint64_t *sent, char *err, size_t errlen);

#endif
