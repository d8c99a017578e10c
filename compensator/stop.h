/*
 * compensator/stop.h — the process-wide stop request, interruptible waits
 * and the bounded stop.
 *
 * A stop is requested once (SIGTERM / SIGINT); every layer checks
 * comp_stopping() between pages, batches and cancels, and sleeps with
 * comp_sleep_ms, which returns early when the stop comes.
 *
 * The bounded stop (stop-grace, common/stop_grace.h): every MariaDB
 * connection a layer may block on is registered here while it exists (the
 * layers' db_conn_t from their _new to their _free, the cancel handles from
 * their open to their close). When a stop is still waiting on MariaDB
 * stop-grace after it was requested — a server that stopped answering holds
 * a call for mysql-read-timeout — they are all cut (db_interrupt,
 * hg_order_db_interrupt: the socket shut down): the call in flight fails at
 * once with 2013, its transaction dies with the connection and the server
 * rolls it back, and nothing connects again. A second request cuts at once.
 * The broker clients (the relay's and the monitor's) are cut at the same
 * moment through their stop fd (comp_stop_broker_fd): a broker that stopped
 * answering holds a call for broker-timeout, and more with the relay's
 * reconnects and resends; the call ends with HG_ERR_STOPPED.
 * What that leaves: the relay's rows 'new' (leased: sent again when the
 * lease ends, DEDUP making a send that did arrive exact; a row is marked
 * 'sent' only by a record that committed, and a send cut by the stop is
 * recorded neither sent nor failed), the cancels not done (the next start
 * does them), the inspection lock released by the server when it finds its
 * connection gone.
 *
 * Without comp_stop_start (the tests and the benchmark drive the layers
 * directly) there is no grace: registering does nothing and nothing is cut.
 *
 * Threads: comp_stop_start / comp_stop_finish on the main thread; the rest
 * from any thread (comp_stop_request_from_signal in a signal handler).
 */
#ifndef HG_COMPENSATOR_STOP_H
#define HG_COMPENSATOR_STOP_H

#include <hourglass/order.h>

#include <stddef.h>
#include <stdint.h>

#include "db/conn.h"

/* Start the bounded stop with grace_ms (stop-grace; 0: cut at the first
 * request). Returns 0, or -1 with err naming what failed. Main thread,
 * before the layers are created and the signal handlers installed. */
int comp_stop_start(uint64_t grace_ms, char *err, size_t errlen);

/* End it: nothing is cut from then on. Main thread, after the layers were
 * freed and with SIGINT / SIGTERM no longer handled. Fine without a start. */
void comp_stop_finish(void);

/* Request the stop, wake every sleeper and start the grace (a later request
 * cuts at once). Thread-safe; not for signal handlers. */
void comp_stop_request(void);

/* The same from a signal handler: async-signal-safe (sleepers notice the
 * flag within 100 ms). */
void comp_stop_request_from_signal(void);

/* 1 once a stop was requested. */
int comp_stopping(void);

/* 1 once the connections were cut: open no new one (a connect to a hung
 * server waits mysql-connect-timeout). */
int comp_stop_cut(void);

/* The stop fd of a layer's broker client (hg_client_set_stop_fd, set once
 * the client is open): readable from the cut on. -1 without comp_stop_start.
 * Valid until comp_stop_finish (the layers close their clients before). */
int comp_stop_broker_fd(void);

/* Register a layer's connection, or a cancel handle, to be cut after
 * stop-grace (at once when the cut happened already). It must stay valid
 * until comp_stop_unwatch. Any thread. */
void comp_stop_watch_conn(db_conn_t *c);
void comp_stop_watch_order_db(hg_order_db *db);

/* Withdraw c or db before freeing it (NULL is fine): no cut runs on it once
 * this returns. */
void comp_stop_unwatch(const void *handle);

/* Sleep ms milliseconds or until a stop. Returns 1 when stopping, else 0. */
int comp_sleep_ms(uint64_t ms);

/* comp_sleep_ms, running keepalive(arg) every every_ms meanwhile (none when
 * keepalive is NULL or every_ms 0): the inspection keeps its lock
 * connection from idling out while it waits (its next round, a page pause).
 * Returns 1 when stopping, else 0. */
int comp_sleep_keepalive(uint64_t ms, uint64_t every_ms, void (*keepalive)(void *arg), void *arg);

#endif
