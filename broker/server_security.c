/*
 * broker/server_security.c — who may use the broker: protected mode, the
 * users table (users-file, reloaded on SIGHUP), the security warning shown at
 * start, on reload and in INFO, and the check of the files that hold secrets.
 *
 * Protected mode (server.h, docs/security.md) is decided per accepted
 * socket from its peer address, before a connection exists
 * (server_peer_admitted, asked by server_accept.c): a refused peer gets one
 * "-DENIED" line and is closed (server_deny).
 *
 * The files that hold secrets (users-file: password hashes; tls-key-file:
 * the private key) are checked when they are read, at start and on SIGHUP:
 * one the group or others can read or write is logged at warn, naming it
 * and its mode (it still loads: a warning, as ssh gives, not a refusal — the broker
 * may run under a shared group on purpose).
 *
 * Thread: everything here runs on the event-loop thread.
 */
#include <limits.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>

#include <event2/util.h>

#include "broker/server_internal.h"
#include "common/log.h"
#include "common/passwd.h"

/* 1 for a loopback peer (127.0.0.0/8, ::1, or ::ffff:127.x.y.z). */
static int peer_is_loopback(const struct sockaddr *sa)
{
    if (sa->sa_family == AF_INET) {
        return (ntohl(((const struct sockaddr_in *)sa)->sin_addr.s_addr) >> 24) == 127;
    }
    if (sa->sa_family == AF_INET6) {
        const struct in6_addr *a = &((const struct sockaddr_in6 *)sa)->sin6_addr;
        if (IN6_IS_ADDR_LOOPBACK(a)) {
            return 1;
        }
        return IN6_IS_ADDR_V4MAPPED(a) && a->s6_addr[12] == 127;
    }
    return sa->sa_family == AF_UNIX;
}

int server_protected(const server_t *s)
{
    return !s->cfg->allow_remote && !(s->cfg->users_file != NULL && config_tls_enabled(s->cfg));
}

/* 1 when a client from another host may use the TLS port (tls = 1) or the
 * plaintext one. With TLS configured, remote clients are served on the TLS
 * port only, unless allow-remote-plaintext says otherwise: TLS is there so
 * that passwords and messages do not cross the network in the clear, and a
 * plaintext port open to the same clients would undo that silently. */
static int remote_admitted(const server_t *s, int tls)
{
    if (server_protected(s)) {
        return 0;
    }
    return tls || !config_tls_enabled(s->cfg) || s->cfg->allow_remote_plaintext;
}

int server_peer_admitted(const server_t *s, const struct sockaddr *sa, int tls)
{
    return peer_is_loopback(sa) || remote_admitted(s, tls);
}

/* Why protected mode is on (server_protected), for the two texts that say so — the start-up warning and the
 * DENIED reply — which then say the same: it ends only with users-file and TLS both configured, or allow-remote. */
static const char *protected_reason(const config_t *cfg)
{
    if (cfg->users_file == NULL && !config_tls_enabled(cfg)) {
        return "neither users-file nor TLS is configured";
    }
    return cfg->users_file == NULL ? "users-file is not configured" : "TLS is not configured";
}
#define PROTECTED_FIX "configure users-file and TLS (both), or set allow-remote yes (docs/security.md)"

void server_deny(server_t *s, evutil_socket_t fd, const struct sockaddr *sa)
{
    char msg[320];
    if (server_protected(s)) {
        snprintf(
            msg, sizeof msg,
            "-DENIED Hourglass is in protected mode: it serves only clients on this host because %s: " PROTECTED_FIX
            "\r\n",
            protected_reason(s->cfg));
    } else {
        snprintf(msg, sizeof msg,
                 "-DENIED clients from other hosts must use TLS on port %d; this port serves only clients on this "
                 "host (allow-remote-plaintext, see docs/security.md)\r\n",
                 s->tls_port);
    }
    ssize_t w = send(fd, msg, strlen(msg), MSG_NOSIGNAL | MSG_DONTWAIT);
    (void)w;
    evutil_closesocket(fd);
    s->denied++;
    char host[INET6_ADDRSTRLEN] = "?";
    if (sa->sa_family == AF_INET) {
        evutil_inet_ntop(AF_INET, &((const struct sockaddr_in *)sa)->sin_addr, host, sizeof host);
    } else if (sa->sa_family == AF_INET6) {
        evutil_inet_ntop(AF_INET6, &((const struct sockaddr_in6 *)sa)->sin6_addr, host, sizeof host);
    }
    if (server_protected(s)) {
        log_limit_count(&s->accept_log, LOG_LEVEL_WARN, "protected mode",
                        "protected mode: refused a client from %s (%llu refused so far; docs/security.md)", host,
                        (unsigned long long)s->denied);
    } else {
        log_limit_count(&s->accept_log, LOG_LEVEL_WARN, "remote plaintext",
                        "refused a plaintext client from %s: clients from other hosts must use tls-port %d "
                        "(%llu refused so far; allow-remote-plaintext, docs/security.md)",
                        host, s->tls_port, (unsigned long long)s->denied);
    }
}

/* Warn when the file at path (config key key), which holds what, can be
 * read or written by its group or others (written: whoever can may add an
 * admin, or swap the key). */
void server_warn_if_exposed(const char *key, const char *path, const char *what)
{
    char why[PATH_MAX + 300];
    if (path != NULL && passwd_secret_exposed(path, what, why, sizeof why)) {
        log_warn("%s %s", key, why); /* the rule of every daemon's secret files (common/passwd.h) */
    }
}

/* Recompute the warning after a start or a reload, and log it. */
void server_security_check(server_t *s)
{
    const config_t *cfg = s->cfg;
    s->warning[0] = '\0';
    server_warn_if_exposed("users-file", cfg->users_file, "the users' password hashes");
    if (server_protected(s)) {
        if (!cfg_bind_is_loopback(cfg->bind)) {
            log_warn(
                "protected mode: listening on %s, but it serves only clients on this host because %s: " PROTECTED_FIX,
                cfg->bind, protected_reason(cfg));
        }
        return;
    }
    if (cfg_bind_is_loopback(cfg->bind)) {
        return; /* allow-remote, but nobody else can reach this address */
    }
    if (s->listener != NULL && s->tls_listener != NULL && !remote_admitted(s, 0)) {
        log_info("clients from other hosts are served on tls-port %d only; the plaintext port %d serves this host "
                 "(allow-remote-plaintext yes to change that)",
                 s->tls_port, s->port);
    }
    if (cfg->users_file == NULL) {
        snprintf(s->warning, sizeof s->warning,
                 "allow-remote yes without users: any client that reaches %s:%d may run every command, SHUTDOWN "
                 "included",
                 cfg->bind, s->port);
    } else if (!config_tls_enabled(cfg)) {
        snprintf(s->warning, sizeof s->warning,
                 "allow-remote yes without TLS: passwords and messages cross the network in plaintext");
    } else if (s->listener != NULL && cfg->allow_remote_plaintext) {
        snprintf(s->warning, sizeof s->warning,
                 "allow-remote-plaintext yes: clients from other hosts may use the plaintext port %d, where passwords "
                 "and messages cross the network in plaintext",
                 s->port);
    }
    if (s->warning[0]) {
        log_warn("SECURITY WARNING: %s (docs/security.md)", s->warning);
    }
}

const char *server_security_warning(const server_t *s)
{
    return s->warning[0] ? s->warning : NULL;
}

void server_set_users(server_t *s, users_t *users)
{
    users_free(s->users);
    s->users = users;
}

const users_t *server_users(const server_t *s)
{
    return s->users;
}

int server_auth_required(const server_t *s)
{
    return s->cfg->users_file != NULL;
}

auth_worker_t *server_auth(server_t *s)
{
    return s->auth;
}

void server_reload_users(server_t *s)
{
    if (s->cfg->users_file == NULL) {
        return;
    }
    users_t *u = NULL;
    char err[512];
    if (users_load(s->cfg->users_file, &u, err, sizeof err) != 0) {
        log_error("SIGHUP: users file not reloaded, the previous users stay: %s", err);
        return;
    }
    log_info("SIGHUP: %zu users reloaded from %s", users_count(u), s->cfg->users_file);
    server_set_users(s, u);
    conn_set_users_changed(s->conns, s->users);
    server_security_check(s);
}
