/*
 * consumer/health.h — what hourglass-consumer's /healthz says: healthy
 * unless the last cancel attempt failed for a reason that is about MariaDB
 * or its set-up (the database cannot be reached, access denied, a missing
 * GRANT or table), not about one order. A message for an unknown order, a
 * paid order, a bad payload, one deadlock or a data error the library found
 * (code 0: a claim that changed 2 rows) does not make it unhealthy; a
 * consumer whose every cancel fails with "access denied" does, at once, with
 * the reason, until a cancel succeeds again. Nor is the broker left out: a
 * consumer whose every worker's PULL has failed for broker-unhealthy-after
 * (the broker down, unreachable, refusing it) is unhealthy too, with the
 * last error, until a PULL is answered again — it cancels nothing meanwhile.
 * Nor a MariaDB that stopped answering (a frozen server, a network black
 * hole): a worker inside a cancel call whose current round trip to MariaDB
 * (the connect, a statement, a COMMIT) has waited longer than the stuck
 * bound is unhealthy at once, long before the call fails at
 * mysql-read-timeout, until an answer comes. A call that waits on row locks
 * again and again (each wait ending in an answer) stays healthy.
 *
 * Any thread (the workers report, the metrics thread reads); lock-free
 * except the reason text, which a small mutex guards.
 */
#ifndef HG_CONSUMER_HEALTH_H
#define HG_CONSUMER_HEALTH_H

#include "base/buf.h"

#include <stdint.h>

/* A cancel attempt reached MariaDB and ended (cancelled, not pending, not
 * found): healthy from now on. */
void health_cancel_ok(void);

/* A cancel attempt failed because of MariaDB or its set-up; reason is the
 * text /healthz shows (copied, cut to 400 bytes). */
void health_cancel_failed(const char *reason);

/* How long every worker's PULL must have failed before /healthz says so
 * (ms; 0: at once). Set once at start-up, before the metrics server starts. */
void health_set_broker_grace(uint64_t ms);

/* The stuck bound (ms): a worker's MariaDB step running longer is reported.
 * Set once at start-up, before the workers start. */
void health_set_stuck_after(uint64_t ms);

/* Worker (0..255) begins a MariaDB step (opening its handle, a cancel or a
 * batch of cancels) / ended it. Any worker thread, its own slot. */
void health_step_begin(int worker);
void health_step_end(int worker);

/* For hg_order_db_set_progress on a worker's handle, arg the worker number
 * ((void *)(intptr_t)worker): a round trip of its step returned (any answer:
 * a row, a lock wait timeout, a deadlock), so its clock restarts — the
 * stuck bound applies to one round trip, not to the whole step, which may
 * wait on locks many times (a batch split down to single orders). */
void health_step_answered(void *worker);

/* For common/prom.h's health callback; arg: the hg_consumer_t (its PULLs).
 * 0 when healthy; else 1 with one line per problem in out:
 * "cancels failing for <n> s (<count> attempts): <reason>\n" and
 * "broker: every PULL failing for <n> s: <last error>\n" and
 * "worker <w>: stuck in a MariaDB call for <n> s (bound <b> s): MariaDB does
 * not answer\n" (<n>: since its last answer). */
int health_render(buf_t *out, void *arg);

#endif
