/*
 * consumer/stop.h — hourglass-consumer's bounded stop: the workers'
 * MariaDB handles, and the thread that cuts them when a stop outlasts
 * stop-grace.
 *
 * SIGINT / SIGTERM stop the consumer loop (hg_consumer_stop: PULL waits and
 * backoff sleeps end at once) and start the grace (stop_request). A worker
 * still inside MariaDB when stop-grace has passed — a server that stopped
 * answering (SIGSTOPped, a network black hole) would hold it for
 * mysql-read-timeout — has its connection cut (hg_order_db_interrupt: the
 * socket shut down): the call returns at once, the cancel is TRANSIENT (its
 * transaction rolled back by the server when the connection dies, or its
 * COMMIT's outcome unknown), so its message is NACKed as "consumer stopping",
 * never ACKed, and comes back: the cancel is idempotent. A second signal
 * cuts at once. The stop then takes at most stop-grace (plus
 * mysql-connect-timeout for a connect in progress, which cannot be cut).
 *
 * The handles: worker i's is opened by worker i (stop_adopt publishes it)
 * and freed by stop_finish, after the stop thread has ended; the stop thread
 * reads the slots under a lock, so a handle it cuts is never one being freed.
 * Threads: stop_start / stop_finish on the main thread, stop_request in a
 * signal handler, stop_handle / stop_adopt / stop_cut on worker threads.
 */
#ifndef HG_CONSUMER_STOP_H
#define HG_CONSUMER_STOP_H

#include <hourglass/order.h>

#include <stddef.h>
#include <stdint.h>

typedef struct stop stop_t;

/* Start the stop thread with `workers` empty handle slots and grace_ms
 * (stop-grace; 0: cut at the first signal). Returns the stop, or NULL with
 * err naming what failed (the pipe, the thread). Main thread, before the
 * signal handlers that call stop_request are installed. */
stop_t *stop_start(size_t workers, uint64_t grace_ms, char *err, size_t errlen);

/* A stop was asked for: the first call starts the grace, a later one cuts
 * at once. Async-signal-safe (one write(2) to a non-blocking pipe). */
void stop_request(stop_t *s);

/* Worker `worker`'s handle, NULL until stop_adopt. That worker's thread. */
hg_order_db *stop_handle(stop_t *s, size_t worker);

/* 1 once the handles were cut: a worker opens no new handle then (a
 * connect to a hung server would wait mysql-connect-timeout). Any thread. */
int stop_cut(stop_t *s);

/* Make db worker `worker`'s handle (its slot was empty). When the handles
 * were cut already, db is cut at once, so its first call fails fast. That
 * worker's thread. */
void stop_adopt(stop_t *s, size_t worker, hg_order_db *db);

/* End the stop thread (it cuts nothing from then on), then close every
 * handle and free s. Main thread, after hg_consumer_run returned (no worker
 * uses a handle any more). NULL is fine. */
void stop_finish(stop_t *s);

#endif
