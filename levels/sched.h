/*
 * levels/sched.h — the scheduler: due processing, lease expiry, retry and DLQ
 * policy on top of the store.
 *
 * Time comes from an injected clock, so tests step it forward and back. The
 * scheduler never sleeps and owns no thread: its owner (the broker's storage
 * thread, a test, the bench) asks sched_next_wakeup() when to come back, and
 * calls sched_run() then. Writes are left pending in the store; the owner
 * commits (store_commit), so many moves share one synced batch.
 *
 * Retry policy, RocketMQ's rule exactly (DESIGN §3): a failure of a message
 * with reconsume = r goes to level 3 + r (clamped to the table's last level)
 * with reconsume r + 1 while r < max-reconsume; the failure at
 * r = max-reconsume goes to the DLQ. With the default table and 16: 16 retries
 * (10s, 30s, 1m … 2h) and 17 deliveries at most.
 *
 * Threading: the same thread as the store.
 */
#ifndef HG_LEVELS_SCHED_H
#define HG_LEVELS_SCHED_H

#include <stddef.h>
#include <stdint.h>

#include "levels/store.h"

#define SCHED_RETRY_BASE_LEVEL     3 /* RocketMQ: the first retry waits level 3 (10s) */
#define SCHED_LEASE_EXPIRED_REASON "lease expired"

/* Milliseconds since the epoch. */
typedef uint64_t (*sched_clock_fn)(void *ctx);

/* The wall clock (CLOCK_REALTIME), the default. */
uint64_t sched_wall_clock(void *ctx);

typedef struct sched sched_t;

/* A scheduler over s. clock NULL means sched_wall_clock. Never fails (aborts on
 * out-of-memory). The store must outlive it. */
sched_t *sched_new(store_t *s, sched_clock_fn clock, void *clock_ctx);
void sched_free(sched_t *sc);

uint64_t sched_now(sched_t *sc);

/* When to run next: the earliest level head due time or lease deadline;
 * UINT64_MAX when there is nothing to wait for. */
uint64_t sched_next_wakeup(sched_t *sc);

/* Where a failure goes by the rule alone: returns 1 and sets *level for a
 * retry, or 0 for the DLQ. Pure. */
int sched_retry_level(const lvl_table_t *t, uint32_t reconsume, uint32_t max_reconsume, int *level);

typedef struct sched_stats {
    uint64_t moved;   /* level heads moved (hops included) */
    uint64_t ready;   /* messages that became ready for consumers */
    uint64_t expired; /* leases that expired */
    uint64_t retried; /* failures scheduled for retry */
    uint64_t dead;    /* failures parked in the DLQ */
} sched_stats_t;

/* Do due work, at most max moves and max lease expiries: move due level heads
 * and fail expired leases by the retry policy (reason "lease expired").
 * Adds what it did to *st (may be NULL). *more (may be NULL) is set to 1 when it
 * stopped with work left: at max, or once the pending batch holds
 * STORE_BATCH_MAX_BYTES (the owner commits and calls again). Leaves the writes
 * pending. */
int sched_run(sched_t *sc, int max, sched_stats_t *st, int *more, char *err, size_t errlen);

typedef struct sched_nack_req {
    int to_dlq;        /* 1: a permanent failure — straight to the DLQ, no retry */
    int level;         /* > 0: retry on exactly this level */
    uint64_t delay_ms; /* > 0 (and level 0): retry after this delay */
    const char *reason;
    size_t reason_len;
} sched_nack_req_t;

/* The retry decision, pure: what store_fail does with a message that failed
 * `reconsume` times so far in a group whose limit is max_reconsume, given the
 * NACK's overrides (a lease expiry passes a request with only its reason).
 * The DLQ when nack->to_dlq (a permanent failure) or when the rule says so
 * (reconsume >= max_reconsume: the limit overrides an explicit level or
 * delay); otherwise nack's level, else its delay, else the rule's level
 * (sched_retry_level). The reason is nack's; decide is NULL. Out-of-range
 * overrides are passed through for store_fail to refuse. */
store_fail_req_t sched_retry_decide(const lvl_table_t *t, uint32_t reconsume, uint32_t max_reconsume,
                                    const sched_nack_req_t *nack);

/* A consumer NACKed a leased message. Its next place follows the policy, unless
 * req asks for the DLQ (a permanent failure), a level or a delay — but the
 * failure at max-reconsume always goes to the DLQ (sched_retry_decide). One
 * lookup of the lease (store_fail decides from what it reads). *found 0: no
 * such lease (an expired lease was already rescheduled). *next_due_ms: the
 * retry's due time, 0 when it went to the DLQ. */
int sched_nack(sched_t *sc, const char *group, size_t group_len, uint64_t id, const sched_nack_req_t *req, int *found,
               uint64_t *next_due_ms, sched_stats_t *st, char *err, size_t errlen);

#endif
