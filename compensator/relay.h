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
 * resend of the client counted, as libhourglass bounds its opened client)
 * keeps other compensators off the batch while it is sent; the client is
 * opened before the first batch is claimed (only when rows are due), so the
 * lease does not cover the open; while it cannot be opened a batch is
 * selected and recorded failed in one transaction, unleased. SKIP LOCKED
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

#include <hourglass/hourglass.h>
#include <hourglass/order.h>

#include "compensator/comp_config.h"
#include "compensator/stats.h"

typedef struct comp_relay comp_relay_t;

/* The options of the relay's broker client: broker-connect-timeout,
 * broker-timeout, the credentials and TLS keys, one reconnect retry 100 ms
 * later (not the default 5 with backoff: the batch waits, and the next round,
 * with the rows' own backoff, is the real retry), resends of a batch whose
 * connection broke on (DEDUP makes them exact). The strings point into cfg. */
void comp_relay_client_opts(const comp_config_t *cfg, hg_client_opts_t *o);

/* The most a relay batch is leased for, in ms. The bound below stacks every
 * timeout of every round; on amqp:// (a new connection declares the whole
 * topology, each declaration waiting broker-timeout) it comes to about 30
 * minutes. A lease that long would hold the rows of a relay that died for
 * that long, their cancels left to the overdue layer, while a second send
 * costs nothing (the consumer's cancel is idempotent; DEDUP on hourglass://).
 * So the lease stops here, and a batch that takes longer is counted. */
#define RELAY_LEASE_MAX_MS 120000u

/* The lease of a batch sent through client (opened with
 * comp_relay_client_opts), in ms: hg_client_send_bound_ms — the longest one
 * hg_send_many can take, every reconnect and resend counted — plus a second,
 * at most RELAY_LEASE_MAX_MS. With the defaults (1 s, 5 s; plain
 * hourglass://, no AUTH) 29.4 s; on amqp:// the cap. A batch that takes
 * longer anyway (a broker that answers slowly but steadily) is counted
 * (relay_lease_overruns) and logged. Reads client only. */
uint64_t comp_relay_lease_ms(const hg_client_t *client);

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
