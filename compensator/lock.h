/*
 * compensator/lock.h — the inspection lock: MySQL GET_LOCK held on a
 * dedicated connection.
 *
 * Only one compensator scans the order table at a time. The instance whose
 * connection holds GET_LOCK(name) is the inspector; it keeps the lock
 * between rounds (a stable leader) and loses it only when it stops
 * (comp_lock_free) or when that connection dies — the server releases a
 * named lock with the connection that took it, and MYSQL_OPT_RECONNECT is
 * off so a silent reconnect cannot hide the loss.
 *
 * A holder that freezes (SIGSTOP, a hung host) must not keep it: the lock
 * connection's wait_timeout is inspect-lock-timeout (30 s), so the server
 * closes it, and releases the lock, that long after the holder's last
 * statement (the server's own default is 8 hours, and inspection stopped
 * everywhere that long). A live holder keeps it: a check before each page
 * and each cancel batch, and comp_inspect_keepalive between rounds and during
 * page pauses. The loss is
 * detected:
 *   - comp_lock_check: a round trip on the lock connection
 *     (IS_USED_LOCK(name) = CONNECTION_ID()), before each page and each
 *     cancel batch;
 *   - comp_lock_alive: no round trip (db_drop_if_closed: an idle MySQL
 *     connection never has anything to read, so a readable or hung-up
 *     socket means the server closed it: KILL, restart, wait_timeout);
 *     before a round reuses the lock it holds.
 * After a loss the connection is closed; the next comp_lock_acquire
 * reconnects and tries again.
 *
 * The lock is an efficiency and politeness device, not the correctness
 * guarantee: two scans at once would only duplicate work, because every
 * cancel is the idempotent hg_order_cancel.
 *
 * Threads: one comp_lock_t per instance, used by the inspection thread only.
 * comp_stats.lock_held mirrors whether this instance believes it holds the
 * lock (0/1).
 */
#ifndef HG_COMPENSATOR_LOCK_H
#define HG_COMPENSATOR_LOCK_H

#include <hourglass/order.h>

typedef struct comp_lock comp_lock_t;

typedef enum comp_lock_state {
    COMP_LOCK_HELD = 0, /* this instance holds the lock */
    COMP_LOCK_BUSY,     /* another connection holds it */
    COMP_LOCK_ERROR     /* could not tell (database unreachable, error); err says why */
} comp_lock_state_t;

/* A lock handle (not connected). name: at most 64 characters; timeout_s:
 * the lock connection's wait_timeout (inspect-lock-timeout). Never NULL. */
comp_lock_t *comp_lock_new(const hg_order_db_params_t *params, const char *name, unsigned timeout_s);

/* Release the lock (RELEASE_LOCK, best effort), close the connection, free.
 * NULL is fine. */
void comp_lock_free(comp_lock_t *l);

/* Make sure this instance holds the lock: when it believes it holds it,
 * verify (comp_lock_check); otherwise connect if needed and GET_LOCK(name, 0)
 * — never waits for another holder. Returns the state. */
comp_lock_state_t comp_lock_acquire(comp_lock_t *l, hg_order_error_t *err);

/* Verify with a round trip that the lock is still ours. Returns 1 when held;
 * 0 when it is lost (connection dead or lock not ours: the connection is
 * closed, err says why). */
int comp_lock_check(comp_lock_t *l, hg_order_error_t *err);

/* Cheap check without a round trip (poll on the idle connection's socket).
 * Returns 1 when the lock is believed held and the connection shows no sign
 * of death; 0 otherwise (a dead connection is closed and the lock marked
 * lost). */
int comp_lock_alive(comp_lock_t *l);

#endif
