/*
 * console/console_config.h — hourglass-console's keys: one cfg_key_t table
 * (common/cfg.h) for the INI file, the flags, --help and --check-config.
 *
 * The broker (uri; the console logs in to it as each user; over TLS the
 * tls-* keys of common/tls_keys.h), where the page is served (bind, port,
 * allow-remote, allowed-hosts (reloaded on SIGHUP), static-dir (reloaded on SIGHUP when the
 * page can be served from the new one: console/main.c's reload_load), max-connections,
 * header-timeout (both reloaded on SIGHUP: common/http_conns.c reads them at each
 * accept and each request's start); https-cert-file and https-key-file: https,
 * reloaded on SIGHUP), the order database (the
 * mysql-* keys of db/keys.h, order-topic, overdue-after), the samples kept in
 * memory for the overview (sample-interval, history; the sampler's own
 * broker user: sampler-user, sampler-password-file; compensator-metrics),
 * sessions
 * (session-ttl, roles-recheck, no-users-role) and the log keys of
 * common/log_keys.h
 * (log-level, log-file, log-format: reloaded on SIGHUP); and the options
 * every broker connection of the console is opened with. Main thread, but
 * for console_client_opts.
 */
#ifndef HG_CONSOLE_CONFIG_H
#define HG_CONSOLE_CONFIG_H

#include <hourglass/hourglass.h>

#include <stddef.h>

#include "common/cfg.h"
#include "common/log_keys.h"
#include "common/passwd.h"
#include "common/tls_keys.h"
#include "db/keys.h"

/* no-users-role: what a login gets from a broker that has no users. */
typedef enum console_no_users {
    CONSOLE_NO_USERS_REFUSE = 0, /* "none": no login */
    CONSOLE_NO_USERS_VIEWER,     /* "viewer": every login may look, never act */
    CONSOLE_NO_USERS_ADMIN       /* "admin": every login may act (a private test set-up) */
} console_no_users_t;

typedef struct console_config {
    char *uri, *bind, *static_dir, *order_topic;
    long long port, allow_remote;
    long long max_connections, header_timeout_ms; /* the server's connections (common/http_conns.c) */
    long long sample_interval_ms, history_ms, session_ttl_ms, broker_timeout_ms, overdue_after_ms;
    long long login_timeout_ms; /* login-timeout: a login's whole wait on the broker (console/login.c) */
    long long roles_recheck_ms; /* roles-recheck: a session's roles asked again after this long (session.c) */
    int no_users_role;          /* console_no_users_t */
    char *sampler_user, *sampler_password_file;
    char sampler_password[PASSWD_FILE_MAX + 1]; /* sampler-password-file at start ("" without); sampler.c re-reads */
    char *https_cert_file, *https_key_file;     /* both set: the console serves https */
    char *compensator_metrics;                  /* http://host:port/metrics of hourglass-compensator, or NULL */
    char *allowed_hosts;                        /* allowed-hosts: "a.example, b.example", or NULL */
    TLS_KEYS_FIELDS;                            /* the tls-* keys (hourglass+tls:// uri) */
    LOG_KEYS_FIELDS;
    DB_KEYS_FIELDS;
} console_config_t;

const cfg_table_t *console_config_table(void);

/* Zero conf and apply the defaults. */
void console_config_init(console_config_t *conf);

/* Cross-key checks after parsing: the required keys, mysql-socket, a bind
 * address that is not loopback without allow-remote yes, history at least
 * two samples, sampler-user with sampler-password-file (whose password is
 * read into conf->sampler_password), https-cert-file with https-key-file,
 * the tls-* keys only with an hourglass+tls:// uri, compensator-metrics an
 * http://HOST:PORT[/PATH] URL, allowed-hosts a list of host names. Returns 0, or -1 with
 * err naming the key(s). */
int console_config_validate(console_config_t *conf, char *err, size_t errlen);

void console_config_free(console_config_t *conf);

/* 1 when the Host header host (NULL: none was sent) names the console: an
 * IPv4 or IPv6 literal (v6 in brackets), localhost, bind or a name of
 * allowed-hosts, compared without case and without a trailing dot; a port
 * after the name is not looked at. 0 for any other name: a page whose name
 * was re-pointed at the console's address (DNS rebinding). The matcher is
 * common/http_host.h's, the metrics ports' too. */
int console_host_allowed(const console_config_t *conf, const char *host);

/* The options of every broker connection of the console (a session's, the
 * sampler's), into *opts: broker-timeout, one connect attempt, no resent
 * SENDs, the tls-* keys. No credentials: the caller adds them. Any thread:
 * it reads only keys that SIGHUP does not reload. */
void console_client_opts(const console_config_t *conf, hg_client_opts_t *opts);

#endif
