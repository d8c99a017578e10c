/*
 * broker/server_tls.c — the broker's TLS context (common/tls_server.h) from
 * the tls-* keys: loaded at start (server_listen, before tls-port is bound:
 * an unreadable certificate fails the start), tried by --check-config, and
 * loaded again on SIGHUP, where a file that does not load keeps the context
 * in use. Each load logs the certificate (subject, serial, expiry) and warns
 * when it has expired or its key file is readable by others. Accepted
 * sockets on tls-port take their SSL from the current context
 * (server_accept.c).
 *
 * Thread: everything here runs on the event-loop thread (server_check_tls
 * also runs before there is a loop).
 */
#include "broker/server_internal.h"
#include "common/log.h"

/* The tls-* keys as common/tls_server.h's files. */
static void tls_files(const config_t *cfg, tls_server_files_t *f)
{
    _Static_assert((int)TLS_AUTH_YES == (int)TLS_CLIENTS_YES && (int)TLS_AUTH_OPTIONAL == (int)TLS_CLIENTS_OPTIONAL,
                   "tls-auth-clients words in the order of tls_clients_t");
    f->key_prefix = "tls";
    f->cert_file = cfg->tls_cert_file;
    f->key_file = cfg->tls_key_file;
    f->ca_file = cfg->tls_ca_cert_file;
    f->crl_file = cfg->tls_crl_file;
    f->clients = (tls_clients_t)cfg->tls_auth_clients;
    f->session_id = "hourglass-broker";
}

int server_check_tls(const config_t *cfg, char *err, size_t errlen)
{
    if (cfg->tls_port == 0) {
        return 0;
    }
    tls_server_files_t files;
    tls_server_t *t = NULL;
    tls_files(cfg, &files);
    if (tls_server_new(&files, &t, err, errlen) != 0) {
        return -1;
    }
    tls_server_free(t);
    server_warn_if_exposed("tls-key-file", cfg->tls_key_file, "the TLS private key");
    return 0;
}

int server_tls_start(server_t *s, char *err, size_t errlen)
{
    const config_t *cfg = s->cfg;
    tls_server_files_t files;
    tls_files(cfg, &files);
    if (tls_server_new(&files, &s->tls, err, errlen) != 0) {
        return -1;
    }
    char what[512];
    tls_server_describe(s->tls, what, sizeof what);
    if (tls_server_expired(s->tls)) {
        log_warn("TLS certificate %s: %s has EXPIRED: clients that verify it will refuse to connect",
                 cfg->tls_cert_file, what);
    } else {
        log_info("TLS certificate %s: %s", cfg->tls_cert_file, what);
    }
    server_warn_if_exposed("tls-key-file", cfg->tls_key_file, "the TLS private key");
    return 0;
}

int server_reload_tls(server_t *s)
{
    if (s->tls == NULL) {
        return 0;
    }
    char err[1024];
    tls_server_files_t files;
    tls_files(s->cfg, &files);
    if (tls_server_reload(s->tls, &files, err, sizeof err) != 0) {
        log_error("SIGHUP: TLS certificate not reloaded, keeping the one in use: %s", err);
        return -1;
    }
    char what[512];
    tls_server_describe(s->tls, what, sizeof what);
    if (tls_server_expired(s->tls)) {
        log_warn("SIGHUP: TLS certificate reloaded from %s: %s has EXPIRED", s->cfg->tls_cert_file, what);
    } else {
        log_info("SIGHUP: TLS certificate reloaded from %s: %s (new connections use it)", s->cfg->tls_cert_file, what);
    }
    server_warn_if_exposed("tls-key-file", s->cfg->tls_key_file, "the TLS private key");
    return 0;
}
