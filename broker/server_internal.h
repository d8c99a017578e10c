/*
 * broker/server_internal.h — the server package's private header: the state
 * behind server_t and the functions its files share. Not installed; only the
 * package's own files (below) include it. The public contract is server.h.
 *
 * The files of the package (each opens with its own design comment):
 *   server.c           the life cycle: create, start (server_listen puts the
 *                      pieces below together), the signals and the shutdown
 *                      sequence, free; what the loop knows (INFO, /metrics)
 *   server_accept.c    the RESP listeners: binding them, accepting (max-
 *                      clients, protected mode's verdict, the TLS handshake
 *                      limit) and the EMFILE back-off
 *   server_security.c  protected mode, the users table, the security warning
 *                      and the check of files that hold secrets
 *   server_tls.c       the TLS context: loading the tls-* files at start,
 *                      --check-config and SIGHUP
 *   server_http.c      the metrics HTTP endpoint: /metrics and /healthz
 *
 * Threading: everything here runs on the event-loop thread.
 */
#ifndef HG_BROKER_SERVER_INTERNAL_H
#define HG_BROKER_SERVER_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include <event2/event.h>
#include <event2/listener.h>

#include "broker/conn.h"
#include "broker/server.h"
#include "common/http_guard.h"
#include "common/log_limit.h"
#include "common/tls_server.h"

enum {
    SRV_RUNNING = 0,
    SRV_STOPPING,
    SRV_CLOSING
};

struct server {
    const config_t *cfg;
    struct event_base *base;
    struct evconnlistener *listener;     /* plaintext; NULL when port is 0 with tls-port set */
    struct evconnlistener *tls_listener; /* NULL when tls-port is 0 */
    tls_server_t *tls;
    int port, tls_port;
    struct event *accept_timer, *close_timer, *sig_term, *sig_int, *sig_hup;
    void (*on_hup)(void *arg);
    void *on_hup_arg;
    struct evhttp *http;
    http_guard_t *http_guard; /* the metrics port's Host check (common/http_guard.h) */
    conn_set_t *conns;
    writer_t *writer;
    int writer_running;
    int state;
    uint64_t started_mono;
    uint64_t rejected;      /* connections refused at max-clients */
    log_limit_t accept_log; /* refusals and pauses at accept (server_accept.c, server_security.c): each key
                                      (plaintext port, tls-port, EMFILE shed, accept paused, protected mode,
                                      remote plaintext) at most once per ACCEPT_LOG_MS */
    int spare_fd;           /* /dev/null held open so that EMFILE can still accept and refuse */
    /* users, AUTH, protected mode */
    users_t *users;
    auth_worker_t *auth;
    uint64_t denied;   /* connections refused by protected mode or as remote plaintext (accept_log logs them) */
    char warning[256]; /* the security warning, "" = none */
};

/* ---- server_accept.c ---- */

#define ACCEPT_LOG_MS 1000 /* accept_log's interval */

/* A RESP listener on bind:port (accepting into s's connections); *bound_port
 * is the port bound. NULL with err ("cannot listen on 127.0.0.1:7379: ..."). */
struct evconnlistener *server_accept_listen(server_t *s, long long port, int *bound_port, char *err, size_t errlen);

/* The accept timer's callback (arg: the server): turns the listeners back on
 * after an EMFILE pause while the server is running. */
void server_accept_timer_cb(evutil_socket_t fd, short what, void *arg);

/* ---- server_security.c ---- */

/* 1 when the client at sa may be served on the TLS port (tls = 1) or the
 * plaintext one: it is on this host, or protected mode and the plaintext
 * rule (allow-remote-plaintext) let it in. */
int server_peer_admitted(const server_t *s, const struct sockaddr *sa, int tls);

/* Refuse the client on fd (at sa) that server_peer_admitted turned away: one
 * "-DENIED" line saying why, then close fd (never blocks); counted in
 * denied_connections and logged at most once a second. */
void server_deny(server_t *s, evutil_socket_t fd, const struct sockaddr *sa);

/* Recompute the security warning after a start or a reload, and log it
 * (and the users-file's mode, through server_warn_if_exposed). */
void server_security_check(server_t *s);

/* Warn (log) when the file at path (config key key; NULL path: nothing),
 * which holds what, can be read or written by its group or others. */
void server_warn_if_exposed(const char *key, const char *path, const char *what);

/* ---- server_tls.c ---- */

/* Load the TLS context of the tls-* keys into s->tls and log the
 * certificate (and warn when it has expired or its key file is exposed).
 * 0, or -1 with the key, file and reason in err. */
int server_tls_start(server_t *s, char *err, size_t errlen);

/* ---- server_http.c ---- */

/* Bind the metrics HTTP endpoint on metrics-bind:metrics-port (nothing when
 * metrics-port is 0). 0, or -1 with the address and reason in err. */
int server_http_start(server_t *s, char *err, size_t errlen);

/* Free the metrics endpoint (its connections close); nothing when it never started. */
void server_http_stop(server_t *s);

#endif
