/*
 * common/stop_grace.h — a daemon's bounded stop: once a stop is asked for,
 * what is still in use after a grace (the stop-grace key) is cut.
 *
 * A daemon whose threads block on another server (a MariaDB that stopped
 * answering — SIGSTOPped, a network black hole — holds a call for its read
 * timeout, 60 s by default) registers each such handle here with the
 * function that cuts it from another thread (for a MariaDB handle, the
 * shutdown(2) of its socket: db_interrupt, hg_order_db_interrupt), and asks
 * for the stop from its signal handler. The first request starts the grace;
 * when it runs out before stop_grace_finish, a thread of this module cuts
 * every handle registered, so the blocked calls return at once and the
 * threads can finish; a second request cuts at once. From the cut on, a
 * handle registered is cut as it is registered, and stop_grace_cut answers 1
 * (a daemon opens nothing new then: a connect to a hung server would wait
 * its connect timeout). What a cut means for the work in flight is the
 * daemon's to guarantee (a transaction dies with its connection and the
 * server rolls it back). Calls to a broker are cut through a descriptor
 * instead (stop_grace_cut_fd, the stop fd libhourglass's clients poll
 * beside their socket): it becomes readable at the cut.
 *
 * Handles are the caller's: it registers one (stop_grace_watch) once it may
 * block on it, and withdraws it (stop_grace_unwatch) before it frees it; the
 * cut runs under the module's lock, so once stop_grace_unwatch returns no
 * cut runs on that handle. A cut function must be quick and must not block
 * (it only shuts a socket down); it never calls back into this module.
 *
 * The daemon's handler of SIGINT and SIGTERM (installed with
 * stop_grace_handle_signals, which both daemons use) asks for the stop.
 *
 * Threads: stop_grace_start / stop_grace_finish / stop_grace_handle_signals
 * on the main thread; stop_grace_request from a signal handler or any thread
 * (async-signal-safe); the rest from any thread.
 */
#ifndef HG_COMMON_STOP_GRACE_H
#define HG_COMMON_STOP_GRACE_H

#include <stddef.h>
#include <stdint.h>

typedef struct stop_grace stop_grace_t;

/* What the log says about a stop, in the daemon's words. */
typedef struct stop_grace_opts {
    uint64_t grace_ms;     /* stop-grace; 0: cut at the first request */
    const char *finishing; /* "finishing the messages in hand": logged when the grace starts */
    const char *handles;   /* "MariaDB connections": what is cut, logged with their count */
    const char *after_cut; /* what a cut means for the work in flight, logged after it */
} stop_grace_opts_t;

/* Start the thread that waits for a stop. The strings of opts are borrowed
 * (they must outlive the stop; literals). Returns the stop, or NULL with err
 * naming what failed (the pipe, the thread). Main thread, before the signal
 * handlers that call stop_grace_request are installed. */
stop_grace_t *stop_grace_start(const stop_grace_opts_t *opts, char *err, size_t errlen);

/* A stop was asked for: the first call starts the grace, a later one cuts at
 * once. Async-signal-safe (one write(2) to a non-blocking pipe). */
void stop_grace_request(stop_grace_t *s);

/* Register handle, cut by cut(handle) when the grace runs out; cut at once
 * when that happened already. handle must stay valid until
 * stop_grace_unwatch or stop_grace_finish. Any thread. */
void stop_grace_watch(stop_grace_t *s, void (*cut)(void *handle), void *handle);

/* Withdraw handle (nothing when it is not registered): no cut runs on it
 * once this returns. Any thread; before the handle is freed. */
void stop_grace_unwatch(stop_grace_t *s, const void *handle);

/* 1 once the handles were cut: open nothing new then. Any thread. */
int stop_grace_cut(stop_grace_t *s);

/* A descriptor that becomes readable at the cut and stays so (s owns it:
 * never read nor close it): the stop fd of the daemon's broker clients
 * (hg_client_set_stop_fd, hg_consumer_set_stop_fd), so that a call to a
 * broker that stopped answering ends with the rest of the cut, without a
 * handle to register. Valid until stop_grace_finish. Any thread. */
int stop_grace_cut_fd(const stop_grace_t *s);

/* SIGINT and SIGTERM handled by handler from now on (sigaction: no flags,
 * no other signal blocked while it runs); SIG_IGN ignores them, SIG_DFL
 * restores the default. The daemon's handler asks for the stop
 * (stop_grace_request, with whatever else it stops); SIG_IGN once nothing is
 * left to stop, before stop_grace_finish. Main thread. */
void stop_grace_handle_signals(void (*handler)(int));

/* End the thread (it cuts nothing from then on) and free s; the handles
 * still registered are left as they are (the caller's). Main thread, once
 * nothing calls stop_grace_request any more (the signal handlers are
 * gone). NULL is fine. */
void stop_grace_finish(stop_grace_t *s);

#endif
