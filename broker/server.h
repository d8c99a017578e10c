/*
 * broker/server.h — the event loop's top: the listener (accept, max-clients,
 * EMFILE back-off), signals, the metrics HTTP endpoint, and the shutdown
 * sequence. The connections themselves are broker/conn.h's.
 *
 * Shutdown: RUNNING -> STOPPING (listener off, no more parsing, writer asked
 * to finish its queue and close the store) -> CLOSING (writer done: every
 * connection drains its replies and closes; a 3 s guard timer) -> loop exit.
 *
 * Everything here runs on the event-loop thread.
 */
#ifndef HG_BROKER_SERVER_H
#define HG_BROKER_SERVER_H

#include <stddef.h>

#include <event2/event.h>

#include "broker/auth.h"
#include "broker/metrics.h"
#include "broker/settings.h"
#include "broker/users.h"
#include "broker/writer.h"

typedef struct server server_t;

/* Create the server on base (evthread_use_pthreads() must have been called
 * before base was created). cfg must outlive it. Never fails. */
server_t *server_new(const config_t *cfg, struct event_base *base);

/* On SIGHUP the loop calls fn(arg) (on the loop thread); without one SIGHUP
 * is logged and ignored. Call before server_listen. SIGHUP never stops the
 * broker. */
void server_on_hup(server_t *s, void (*fn)(void *arg), void *arg);

/* Bind and listen on cfg bind:port and bind:tls-port (loading the TLS
 * certificate first: an unreadable one fails here), install SIGTERM/SIGINT/SIGHUP handlers and the
 * metrics HTTP listener. 0, or -1 with e.g. "cannot listen on
 * 127.0.0.1:7379: Address already in use" in err. */
int server_listen(server_t *s, char *err, size_t errlen);

/* The port actually bound (after server_listen; differs from cfg with port 0;
 * 0 when there is no plaintext listener: port 0 with tls-port set). */
int server_port(const server_t *s);

/* The TLS port bound (0: TLS off). */
int server_tls_port(const server_t *s);

/* --check-config: load the TLS files of cfg (tls-port set) as a start
 * would, and drop them. 0 (also when TLS is off), or -1 with the key, file
 * and reason in err — what would make the start fail. */
int server_check_tls(const config_t *cfg, char *err, size_t errlen);

/* SIGHUP: read the TLS certificate, key and CA files again (the tls-* keys
 * of the running configuration) and use them for new connections; a file
 * that does not load keeps the old context. Logs the outcome (the new
 * certificate's subject, serial and expiry, or why not). 0, or -1 when not
 * reloaded; 0 when TLS is off. */
int server_reload_tls(server_t *s);

/* SIGHUP, after the configuration re-read: the metrics port serves the
 * names of the running metrics-allowed-hosts (http_guard_set_allowed) from
 * its next request. Nothing without a metrics port. Loop thread. */
void server_reload_metrics_hosts(server_t *s);

/* Attach the storage thread: its completions go to the connections. */
void server_set_writer(server_t *s, writer_t *w);

/* The writer's callbacks (pass them to writer_new with the server as ctx). */
void server_job_done(job_t *j, void *ctx);
void server_writer_stopped(void *ctx);

/* Run the loop until shutdown is complete. Returns 0. */
int server_run(server_t *s);

/* Begin shutdown: stop accepting, stop reading, let the writer finish its
 * batch and close the store, write the last replies, stop the loop.
 * Idempotent. why is logged. */
void server_shutdown(server_t *s, const char *why);

/* Close every connection and free the server. NULL is fine. */
void server_free(server_t *s);

/* ---- users, AUTH and protected mode (docs/security.md) ----
 *
 * Authentication is required when users-file is set (even when the file
 * lists nobody: configured authentication never turns itself off).
 * Protected mode: remote clients (a peer that is not a loopback address) are
 * served only when users and TLS are both configured, or allow-remote is
 * yes; otherwise they are told "-DENIED ..." and closed. Remote clients
 * allowed without users or without TLS make a loud warning at start, on
 * every reload and in INFO (security_warning). */

/* Take users (the loaded users file; NULL when users-file is unset).
 * Before server_listen. */
void server_set_users(server_t *s, users_t *users);

/* SIGHUP: re-read users-file and swap the table in (connections follow:
 * conn_set_users_changed); on an error the old table stays (logged). */
void server_reload_users(server_t *s);

const users_t *server_users(const server_t *s);
int server_auth_required(const server_t *s);
auth_worker_t *server_auth(server_t *s);

/* 1 when clients from other hosts are refused (protected mode). */
int server_protected(const server_t *s);

/* The security warning (INFO security_warning), or NULL when there is none. */
const char *server_security_warning(const server_t *s);

/* For commands: the configuration, and what the loop knows (INFO, /metrics). */
const config_t *server_config(const server_t *s);
void server_loop_info(server_t *s, loop_info_t *li);

#endif
