/*
 * console/console_config.c — hourglass-console's key table and checks
 * (contract: console_config.h), and the options every broker connection of
 * the console is opened with (console_client_opts: the session's and the
 * sampler's connections, from broker-timeout and the tls-* keys). Main
 * thread (start-up, then the event loop); console_client_opts also on the
 * sampler's thread: it reads only keys that SIGHUP does not reload.
 */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include "console/console.h"

#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "base/err.h"
#include "common/http_host.h"
#include "common/log.h"

#define OFF(field) offsetof(console_config_t, field)
#define DAY_MS     86400000LL

#ifndef HG_CONSOLE_STATIC_DIR
#define HG_CONSOLE_STATIC_DIR "/usr/local/share/hourglass/console"
#endif

static const cfg_key_t keys[] = {
    { CFG_KEY("uri", CFG_STRING, "hourglass://127.0.0.1:7379", 0, 0, OFF(uri),
              "broker URI without credentials: each user logs in to the broker with their own"),
      .required = 1, .secret = CFG_SECRET_URI },
    TLS_KEYS_ROWS(console_config_t),
    { CFG_KEY("broker-timeout", CFG_DURATION, "5s", 100, 600000, OFF(broker_timeout_ms),
              "connect and reply timeout of every broker call") },
    { CFG_KEY("bind", CFG_STRING, "127.0.0.1", 0, 0, OFF(bind),
              "address the console listens on; non-loopback needs allow-remote yes"),
      .required = 1 },
    { CFG_KEY("port", CFG_INT, "7390", 0, 65535, OFF(port), "HTTP port of the page and /api (0: any free port)") },
    { CFG_KEY("allow-remote", CFG_BOOL, "no", 0, 1, OFF(allow_remote),
              "allow a bind address other than loopback (serve https there: https-cert-file, https-key-file)") },
    { CFG_KEY("https-cert-file", CFG_STRING, NULL, 0, 0, OFF(https_cert_file),
              "serve https (TLS 1.2 or later) with this certificate chain, leaf first (PEM); needs https-key-file"),
      .hint = "FILE", .shown_default = "none: plain http", .reload = 1 },
    { CFG_KEY("https-key-file", CFG_STRING, NULL, 0, 0, OFF(https_key_file),
              "the private key of https-cert-file (PEM, unencrypted)"),
      .hint = "FILE", .reload = 1 },
    { CFG_KEY("allowed-hosts", CFG_STRING, NULL, 0, 0, OFF(allowed_hosts),
              "host names the console answers to (Host header), comma-separated, besides IP literals, localhost "
              "and bind: a request for any other name is refused 421 (DNS rebinding)"),
      .hint = "NAMES", .shown_default = "none: IP literals, localhost and bind only", .reload = 1 },
    { CFG_KEY("max-connections", CFG_INT, "256", 1, 65536, OFF(max_connections),
              "open HTTP connections at most: one more is answered 503 and closed at once (over https closed "
              "unanswered); keep this under the open-files limit, less the broker and database connections"),
      .reload = 1 },
    { CFG_KEY("header-timeout", CFG_DURATION, "10s", 0, DAY_MS, OFF(header_timeout_ms),
              "a request (its head and body) must be whole this long after its first byte (a new connection's: after "
              "the accept) or its connection is answered 408 and closed (unanswered when it sent nothing): "
              "slowloris; 0 disables"),
      .reload = 1 },
    { CFG_KEY("static-dir", CFG_STRING, HG_CONSOLE_STATIC_DIR, 0, 0, OFF(static_dir),
              "directory of the page (index.html, app.js, app.css, favicon.svg); on SIGHUP a new one the page cannot "
              "be served from keeps the running one (logged)"),
      .required = 1, .shown_default = "the installed page, DATADIR/hourglass/console", .reload = 1 },
    { CFG_KEY("order-topic", CFG_STRING, "order-timeout", 0, 0, OFF(order_topic),
              "topic of the orders' timeout messages"),
      .required = 1 },
    { CFG_KEY("overdue-after", CFG_DURATION, "0s", 0, DAY_MS, OFF(overdue_after_ms),
              "a pending order counts as overdue this long after expire_at (the overview's count)") },
    DB_KEYS_ROWS(console_config_t),
    { CFG_KEY("sample-interval", CFG_DURATION, "5s", 200, 3600000, OFF(sample_interval_ms),
              "how often the overview samples the broker and the database") },
    { CFG_KEY("sampler-user", CFG_STRING, NULL, 0, 0, OFF(sampler_user),
              "broker user of the overview's own connection (role viewer is enough; needs sampler-password-file)"),
      .hint = "NAME", .shown_default = "none: the sampler connects without AUTH (a broker without users)" },
    { CFG_KEY("sampler-password-file", CFG_STRING, NULL, 0, 0, OFF(sampler_password_file),
              "file holding sampler-user's password (one trailing newline allowed)"),
      .hint = "FILE" },
    { CFG_KEY("compensator-metrics", CFG_STRING, NULL, 0, 0, OFF(compensator_metrics),
              "hourglass-compensator's /metrics, http://HOST:PORT/metrics: each layer's last run and outcome and the "
              "alerts firing, on the overview"),
      .hint = "URL", .shown_default = "none: the overview shows no compensator" },
    { CFG_KEY("history", CFG_DURATION, "1h", 1000, 7 * DAY_MS, OFF(history_ms),
              "how long samples are kept in memory (the overview's charts: at most 1000 points, neighbouring samples "
              "averaged past that)") },
    { CFG_KEY("session-ttl", CFG_DURATION, "8h", 1000, 30 * DAY_MS, OFF(session_ttl_ms),
              "a login lasts this long without use") },
    { CFG_KEY("roles-recheck", CFG_DURATION, "30s", 1000, 3600000, OFF(roles_recheck_ms),
              "a session's roles are asked of the broker again at its first request this long after they were last "
              "asked (an order action always asks): the longest a demoted or removed user's open session keeps its "
              "old roles") },
    { CFG_KEY("login-timeout", CFG_DURATION, "8s", 1000, 600000, OFF(login_timeout_ms),
              "a login whose broker (connect, AUTH, HELLO) has not answered within this is refused 504 naming the "
              "broker's address and this bound; keep it above 5s, the broker's longest hold of a refused password") },
    { CFG_KEY("no-users-role", CFG_ENUM, "none", 0, 0, OFF(no_users_role),
              "what a login gets when the broker has no users: none (refused), viewer, admin"),
      .words = "none|viewer|admin" },
    LOG_KEYS_ROWS(console_config_t),
};

static const char *const sections[] = { "broker", "http", "mysql", "orders", "overview", "sessions", "log", NULL };

static const cfg_table_t table = {
    .program = "hourglass-console",
    .keys = keys,
    .count = sizeof keys / sizeof keys[0],
    .sections = sections,
    .strings_nonempty = 1,
};

const cfg_table_t *console_config_table(void)
{
    return &table;
}

void console_config_init(console_config_t *conf)
{
    memset(conf, 0, sizeof *conf);
    cfg_init(&table, conf);
}

int console_host_allowed(const console_config_t *conf, const char *host)
{
    return http_host_allowed(host, conf->bind, conf->allowed_hosts);
}

/* Does uri carry a user name or password ("user:pw@" before the host)? */
static int uri_has_userinfo(const char *uri)
{
    const char *p = strstr(uri, "://");
    p = p != NULL ? p + 3 : uri;
    return memchr(p, '@', strcspn(p, "/?#")) != NULL;
}

int console_config_validate(console_config_t *conf, char *err, size_t errlen)
{
    if (cfg_check_required(&table, conf, err, errlen) != 0 || DB_KEYS_CHECK(conf, err, errlen) != 0 ||
        DB_KEYS_CREDENTIALS(conf, err, errlen) != 0 || TLS_KEYS_CHECK(conf, conf->uri, err, errlen) != 0)
        return -1;
    if (conf->uri != NULL && uri_has_userinfo(conf->uri)) {
        /* not echoed: it holds a password; the overview and the log show uri to every viewer */
        snprintf(err, errlen,
                 "uri: holds a user name or password (user:password@): give it without them; each operator logs in "
                 "with their own, and the overview uses sampler-user and sampler-password-file");
        return -1;
    }
    if ((conf->https_cert_file == NULL) != (conf->https_key_file == NULL)) {
        snprintf(err, errlen, "%s is set without %s", conf->https_cert_file ? "https-cert-file" : "https-key-file",
                 conf->https_cert_file ? "https-key-file" : "https-cert-file");
        return -1;
    }
    if (!conf->allow_remote && !cfg_bind_is_loopback(conf->bind)) {
        snprintf(err, errlen,
                 "bind: '%s' is not a loopback address; set allow-remote yes to listen there anyway "
                 "(and serve https: https-cert-file, https-key-file)",
                 conf->bind);
        return -1;
    }
    if (conf->allowed_hosts != NULL && http_hosts_check("allowed-hosts", conf->allowed_hosts, err, errlen) != 0)
        return -1;
    if (conf->history_ms < 2 * conf->sample_interval_ms) {
        snprintf(err, errlen, "history: %lld ms keeps fewer than two samples of sample-interval %lld ms",
                 conf->history_ms, conf->sample_interval_ms);
        return -1;
    }
    if (conf->compensator_metrics != NULL) {
        metrics_url_t url;
        char why[400];
        if (metrics_url_parse(conf->compensator_metrics, &url, why, sizeof why) != 0) {
            snprintf(err, errlen, "compensator-metrics: %s", why);
            return -1;
        }
    }
    conf->sampler_password[0] = '\0';
    if (conf->sampler_password_file != NULL) {
        char why[400];
        if (conf->sampler_user == NULL) {
            snprintf(err, errlen, "sampler-password-file is set without sampler-user");
            return -1;
        }
        if (passwd_read_file(conf->sampler_password_file, conf->sampler_password, sizeof conf->sampler_password, why,
                             sizeof why) != 0) {
            snprintf(err, errlen, "sampler-password-file: %s", why);
            return -1;
        }
    } else if (conf->sampler_user != NULL) {
        snprintf(err, errlen, "sampler-user '%s' needs sampler-password-file", conf->sampler_user);
        return -1;
    }
    return 0;
}

void console_config_free(console_config_t *conf)
{
    cfg_free(&table, conf);
}

void console_client_opts(const console_config_t *conf, hg_client_opts_t *opts)
{
    hg_client_opts_init(opts);
    opts->connect_timeout_ms = (uint32_t)conf->broker_timeout_ms;
    opts->read_timeout_ms = (uint32_t)conf->broker_timeout_ms;
    opts->reconnect_backoff.attempts = 1;
    opts->resend_sends = 0;
    TLS_KEYS_TO_OPTS(conf, opts);
}
