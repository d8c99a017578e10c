/*
 * broker/server.c — the listener, accept/EMFILE handling, signals, the
 * metrics HTTP endpoint and the shutdown sequence (see server.h). The
 * connections are conn.h's: accepted sockets go to conn_accept, storage
 * completions to conn_job_done.
 *
 * Thread: everything here runs on the event-loop thread. The only entries
 * from the storage thread are server_job_done / server_writer_stopped, which
 * the writer calls on this thread (through its completion event).
 *
 * SIGHUP calls the reload hook main set (server_on_hup) and never stops
 * the loop.
 *
 * Two RESP listeners, each optional: port (plaintext) and tls-port (each
 * accepted socket gets an SSL from common/tls_server.h's current context). They
 * share max-clients, the accept back-off and everything after accept. The
 * metrics endpoint stays plain HTTP.
 *
 * The files that hold secrets (users-file: password hashes; tls-key-file:
 * the private key) are checked when they are read, at start and on SIGHUP:
 * one the group or others can read or write is logged at warn, naming it
 * and its mode (it still loads: a warning, as ssh gives, not a refusal — the broker
 * may run under a shared group on purpose).
 *
 * Protected mode (server.h, docs/security.md) is decided per accepted
 * socket from its peer address, before a connection exists: a refused peer
 * gets one "-DENIED" line and is closed.
 *
 * Shutdown: RUNNING -> STOPPING (listener off, no more parsing, writer asked
 * to finish its queue and close the store) -> CLOSING (writer done: every
 * connection drains its replies and closes; a 2 s guard timer) -> loop exit.
 */
#include "broker/server.h"

#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <event2/buffer.h>
#include <event2/http.h>
#include <event2/keyvalq_struct.h>
#include <event2/listener.h>
#include <event2/util.h>

#include "base/alloc.h"
#include "broker/conn.h"
#include "common/tls_server.h"
#include "common/log.h"
#include "base/clock.h"

#define ACCEPT_RETRY_MS 100
#define CLOSE_GRACE_MS  2000

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
    conn_set_t *conns;
    writer_t *writer;
    int writer_running;
    int state;
    uint64_t started_mono;
    uint64_t last_emfile_log;      /* "pausing accepts" logged (at most once a second) */
    uint64_t last_shed_log;        /* "refused N waiting clients" logged (its own second: a pause
                               * just before must not hide the refusals) */
    int shed_unlogged;             /* clients refused since that line */
    uint64_t rejected;             /* connections refused at max-clients */
    uint64_t last_tls_refusal_log; /* monotonic ms of the last such log line for tls-port */
    int spare_fd;                  /* /dev/null held open so that EMFILE can still accept and refuse */
    /* users, AUTH, protected mode */
    users_t *users;
    auth_worker_t *auth;
    uint64_t denied; /* connections refused by protected mode */
    uint64_t last_denied_log;
    char warning[256]; /* the security warning, "" = none */
};

typedef struct http_job {
    job_t job;
    server_t *srv;
    struct evhttp_request *req;
} http_job_t;

static void close_timer_cb(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    server_t *s = arg;
    size_t n = conn_set_count(s->conns);
    if (n > 0) {
        log_warn("%zu clients still had replies unwritten at exit", n);
    }
    event_base_loopbreak(s->base);
}

void server_writer_stopped(void *ctx)
{
    server_t *s = ctx;
    s->writer_running = 0;
    s->state = SRV_CLOSING;
    if (conn_set_drain_all(s->conns) == 0) {
        return;
    } /* the loop breaks once the dead are freed */
    struct timeval tv = { CLOSE_GRACE_MS / 1000, (CLOSE_GRACE_MS % 1000) * 1000 };
    evtimer_add(s->close_timer, &tv);
}

void server_shutdown(server_t *s, const char *why)
{
    if (s->state != SRV_RUNNING) {
        return;
    }
    log_info("shutting down (%s): finishing the batch in flight", why);
    s->state = SRV_STOPPING;
    if (s->listener) {
        evconnlistener_disable(s->listener);
    }
    if (s->tls_listener) {
        evconnlistener_disable(s->tls_listener);
    }
    conn_set_stop_reading(s->conns);
    if (s->writer_running) {
        writer_stop(s->writer);
    } else {
        server_writer_stopped(s);
    }
}

/* ---- protected mode --------------------------------------------------------------------------- */

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

/* Recompute the warning after a start or a reload, and log it. */
/* Warn when the file at path (config key key), which holds what, can be
 * read or written by its group or others (written: whoever can may add an
 * admin, or swap the key). */
static void warn_if_exposed(const char *key, const char *path, const char *what)
{
    struct stat st;
    if (path == NULL || stat(path, &st) != 0 || (st.st_mode & (S_IRGRP | S_IROTH | S_IWGRP | S_IWOTH)) == 0) {
        return;
    }
    int writable = (st.st_mode & (S_IWGRP | S_IWOTH)) != 0;
    mode_t bit = writable ? S_IWOTH : S_IROTH;
    log_warn("%s %s is %s by %s (mode %04o), and it holds %s: chmod 600 it, owned by the broker's user "
             "(docs/security.md)",
             key, path, writable ? "writable" : "readable",
             (st.st_mode & bit) ? "every user of this host" : "its group", (unsigned)(st.st_mode & 07777), what);
}

static void security_check(server_t *s)
{
    const config_t *cfg = s->cfg;
    s->warning[0] = '\0';
    warn_if_exposed("users-file", cfg->users_file, "the users' password hashes");
    if (server_protected(s)) {
        if (!config_is_loopback(cfg->bind)) {
            log_warn("protected mode: listening on %s, but clients from other hosts are refused: %s; set "
                     "allow-remote yes to accept them anyway (docs/security.md)",
                     cfg->bind, cfg->users_file == NULL ? "no users-file is configured" : "TLS is not configured");
        }
        return;
    }
    if (config_is_loopback(cfg->bind)) {
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
    security_check(s);
}

/* ---- accepting ---------------------------------------------------------------------------- */

/* Tell a client it cannot be served and close it (never blocks). On the TLS
 * port it is closed without a word: a plaintext error would reach its TLS
 * stack as a garbled record, and a handshake only to say "full" would spend
 * the CPU of a broker that is already at its limit on whoever connects; the
 * log says why (at most once a second) and rejected_connections counts it. */
static void refuse(server_t *s, evutil_socket_t fd, int tls)
{
    static const char msg[] = "-ERR max number of clients reached\r\n";
    if (!tls) {
        ssize_t w = send(fd, msg, sizeof msg - 1, MSG_NOSIGNAL | MSG_DONTWAIT);
        (void)w;
    }
    evutil_closesocket(fd);
    s->rejected++;
    uint64_t now = clock_mono_ms();
    if (tls && now >= s->last_tls_refusal_log + 1000) {
        log_warn("max-clients (%lld) reached: closed a client on tls-port %d (%llu refused so far)",
                 s->cfg->max_clients, s->tls_port, (unsigned long long)s->rejected);
        s->last_tls_refusal_log = now;
    }
}

static void accept_cb(struct evconnlistener *l, evutil_socket_t fd, struct sockaddr *sa, int salen, void *arg)
{
    (void)salen;
    server_t *s = arg;
    if (s->state != SRV_RUNNING) {
        evutil_closesocket(fd);
        return;
    }
    if (conn_set_count(s->conns) >= (uint64_t)s->cfg->max_clients) {
        refuse(s, fd, l == s->tls_listener);
        return;
    }
    if (!peer_is_loopback(sa) && !remote_admitted(s, l == s->tls_listener)) {
        static const char protected_msg[] = "-DENIED Hourglass is in protected mode: it serves only clients on this "
                                            "host because users or TLS are not configured. Configure users-file and "
                                            "TLS, or set allow-remote yes (see docs/security.md)\r\n";
        char tls_msg[256];
        snprintf(tls_msg, sizeof tls_msg,
                 "-DENIED clients from other hosts must use TLS on port %d; this port serves only clients on this "
                 "host (allow-remote-plaintext, see docs/security.md)\r\n",
                 s->tls_port);
        const char *msg = server_protected(s) ? protected_msg : tls_msg;
        ssize_t w = send(fd, msg, strlen(msg), MSG_NOSIGNAL | MSG_DONTWAIT);
        (void)w;
        evutil_closesocket(fd);
        s->denied++;
        uint64_t now = clock_mono_ms();
        if (now >= s->last_denied_log + 1000) {
            char host[INET6_ADDRSTRLEN] = "?";
            if (sa->sa_family == AF_INET) {
                evutil_inet_ntop(AF_INET, &((struct sockaddr_in *)sa)->sin_addr, host, sizeof host);
            } else if (sa->sa_family == AF_INET6) {
                evutil_inet_ntop(AF_INET6, &((struct sockaddr_in6 *)sa)->sin6_addr, host, sizeof host);
            }
            if (server_protected(s)) {
                log_warn("protected mode: refused a client from %s (%llu refused so far; docs/security.md)", host,
                         (unsigned long long)s->denied);
            } else {
                log_warn("refused a plaintext client from %s: clients from other hosts must use tls-port %d "
                         "(%llu refused so far; allow-remote-plaintext, docs/security.md)",
                         host, s->tls_port, (unsigned long long)s->denied);
            }
            s->last_denied_log = now;
        }
        return;
    }
    SSL *ssl = NULL;
    if (l == s->tls_listener) {
        char err[256];
        if (conn_tls_admit(s->conns, sa) != 0) { /* its address has enough handshakes in progress */
            evutil_closesocket(fd);
            return;
        }
        ssl = tls_server_ssl(s->tls, err, sizeof err);
        if (ssl == NULL) {
            log_error("cannot start TLS for a new client: %s; closing it", err);
            evutil_closesocket(fd);
            return;
        }
    }
    conn_accept(s->conns, fd, sa, ssl);
}

/* Out of descriptors with clients waiting in the backlog: give the spare
 * descriptor back, accept one waiting client into it, refuse it, take the
 * spare again — so a client is told why instead of hanging in the backlog
 * (and the listener is not woken forever by a connection it cannot take).
 * Returns the clients refused; 0 when the spare could not be used. */
#define SHED_MAX 64
static int shed_backlog(server_t *s, evutil_socket_t lfd)
{
    int shed = 0;
    while (s->spare_fd >= 0 && shed < SHED_MAX) {
        close(s->spare_fd);
        s->spare_fd = -1;
        int fd = accept(lfd, NULL, NULL);
        if (fd >= 0) {
            evutil_make_socket_nonblocking(fd);
            refuse(s, fd, s->tls_listener != NULL && lfd == evconnlistener_get_fd(s->tls_listener));
            shed++;
        }
        s->spare_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
        if (fd < 0) {
            break;
        }
    }
    return shed;
}

static void accept_timer_cb(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    server_t *s = arg;
    if (s->state == SRV_RUNNING && s->listener) {
        evconnlistener_enable(s->listener);
    }
    if (s->state == SRV_RUNNING && s->tls_listener) {
        evconnlistener_enable(s->tls_listener);
    }
}

static void accept_error_cb(struct evconnlistener *l, void *arg)
{
    server_t *s = arg;
    int err = EVUTIL_SOCKET_ERROR();
    if (err == EMFILE || err == ENFILE) {
        int shed = shed_backlog(s, evconnlistener_get_fd(l));
        if (shed > 0) {
            uint64_t now = clock_mono_ms();
            s->shed_unlogged += shed;
            if (now >= s->last_shed_log + 1000) {
                log_warn("accept: %s (%zu clients): refused %d waiting client%s with 'max number of clients reached'",
                         evutil_socket_error_to_string(err), conn_set_count(s->conns), s->shed_unlogged,
                         s->shed_unlogged == 1 ? "" : "s");
                s->last_shed_log = now;
                s->shed_unlogged = 0;
            }
            return;
        }
    }
    if (err == EMFILE || err == ENFILE || err == ENOBUFS || err == ENOMEM) {
        uint64_t now = clock_mono_ms();
        if (now >= s->last_emfile_log + 1000) {
            log_warn("accept: %s (%zu clients); pausing accepts for %d ms", evutil_socket_error_to_string(err),
                     conn_set_count(s->conns), ACCEPT_RETRY_MS);
            s->last_emfile_log = now;
        }
        evconnlistener_disable(l);
        struct timeval tv = { 0, ACCEPT_RETRY_MS * 1000 };
        evtimer_add(s->accept_timer, &tv);
        return;
    }
    log_warn("accept: %s", evutil_socket_error_to_string(err));
}

/* ---- signals --------------------------------------------------------------------------------- */

static void signal_cb(evutil_socket_t sig, short what, void *arg)
{
    (void)what;
    server_t *s = arg;
    if (s->state != SRV_RUNNING) {
        log_warn("second %s during shutdown: exiting now (the store recovers on the next start)",
                 sig == SIGINT ? "SIGINT" : "SIGTERM");
        _exit(1);
    }
    server_shutdown(s, sig == SIGINT ? "SIGINT" : "SIGTERM");
}

/* SIGHUP (a closed terminal, logrotate): reload, never stop. */
static void hup_cb(evutil_socket_t sig, short what, void *arg)
{
    (void)sig;
    (void)what;
    server_t *s = arg;
    if (s->state != SRV_RUNNING) {
        return;
    }
    if (s->on_hup != NULL) {
        s->on_hup(s->on_hup_arg);
    } else {
        log_info("SIGHUP: nothing to reload");
    }
}

void server_on_hup(server_t *s, void (*fn)(void *arg), void *arg)
{
    s->on_hup = fn;
    s->on_hup_arg = arg;
}

/* ---- HTTP: /metrics and /healthz ------------------------------------------------------------ */

static job_result_t http_metrics_exec(job_t *j, writer_t *w)
{
    const http_job_t *hj = (const http_job_t *)j; /* metrics-max-topics: read-only after start-up */
    metrics_prom_storage(&j->reply.raw, writer_store(w), writer_stats(w), writer_now(w),
                         hj->srv->cfg->metrics_max_topics);
    return JOB_DONE;
}

static void http_metrics_complete(job_t *j)
{
    http_job_t *hj = (http_job_t *)j;
    struct evbuffer *body = evbuffer_new();
    if (j->failed) {
        evbuffer_add_printf(body, "storage failure\n");
        evhttp_send_reply(hj->req, 503, "Service Unavailable", body);
    } else {
        loop_info_t li;
        server_loop_info(hj->srv, &li);
        metrics_prom_loop(&j->reply.raw, &li);
        evbuffer_add(body, j->reply.raw.data, j->reply.raw.len);
        evhttp_add_header(evhttp_request_get_output_headers(hj->req), "Content-Type",
                          "text/plain; version=0.0.4; charset=utf-8");
        evhttp_send_reply(hj->req, 200, "OK", body);
    }
    evbuffer_free(body);
    job_free(j);
}

static void http_cb(struct evhttp_request *req, void *arg)
{
    server_t *s = arg;
    const struct evhttp_uri *uri = evhttp_request_get_evhttp_uri(req);
    const char *path = uri ? evhttp_uri_get_path(uri) : NULL;
    struct evbuffer *body = evbuffer_new();
    if (path && strcmp(path, "/healthz") == 0) {
        char why[600];
        int code = 200;
        if (s->state != SRV_RUNNING) {
            code = 503;
            snprintf(why, sizeof why, "shutting down");
        } else if (!writer_healthy(s->writer, why, sizeof why)) {
            code = 503;
        }
        evbuffer_add_printf(body, "%s\n", why);
        evhttp_add_header(evhttp_request_get_output_headers(req), "Content-Type", "text/plain");
        evhttp_send_reply(req, code, code == 200 ? "OK" : "Service Unavailable", body);
    } else if (path && strcmp(path, "/metrics") == 0) {
        if (!s->writer_running || s->state != SRV_RUNNING) {
            evbuffer_add_printf(body, "shutting down\n");
            evhttp_send_reply(req, 503, "Service Unavailable", body);
        } else {
            http_job_t *hj = xmalloc(sizeof *hj);
            memset(hj, 0, sizeof *hj);
            resp_buf_init(&hj->job.reply);
            hj->job.exec = http_metrics_exec;
            hj->job.reads_only = 1;
            hj->job.complete = http_metrics_complete;
            hj->srv = s;
            hj->req = req;
            writer_submit(s->writer, &hj->job);
        }
    } else {
        evbuffer_add_printf(body, "not found: try /metrics or /healthz\n");
        evhttp_send_reply(req, 404, "Not Found", body);
    }
    evbuffer_free(body);
}

/* ---- life cycle ------------------------------------------------------------------------------ */

server_t *server_new(const config_t *cfg, struct event_base *base)
{
    server_t *s = xmalloc(sizeof *s);
    memset(s, 0, sizeof *s);
    s->cfg = cfg;
    s->base = base;
    s->accept_timer = evtimer_new(base, accept_timer_cb, s);
    s->close_timer = evtimer_new(base, close_timer_cb, s);
    s->sig_term = evsignal_new(base, SIGTERM, signal_cb, s);
    s->sig_int = evsignal_new(base, SIGINT, signal_cb, s);
    s->sig_hup = evsignal_new(base, SIGHUP, hup_cb, s);
    if (!s->accept_timer || !s->close_timer || !s->sig_term || !s->sig_int || !s->sig_hup) {
        log_error("out of memory creating events");
        abort();
    }
    s->conns = conn_set_new(cfg, base, s);
    s->auth = auth_new(base, server_job_done, s);
    s->started_mono = clock_mono_ms();
    s->spare_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
    return s;
}

static int resolve(const char *host, int port, struct sockaddr_storage *ss, socklen_t *len, char *err, size_t errlen)
{
    struct addrinfo hints, *res = NULL;
    memset(&hints, 0, sizeof hints);
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
    char portstr[16];
    snprintf(portstr, sizeof portstr, "%d", port);
    int rc = getaddrinfo(host, portstr, &hints, &res);
    if (rc != 0 || res == NULL) {
        snprintf(err, errlen, "cannot resolve bind address %s: %s", host, gai_strerror(rc));
        return -1;
    }
    memcpy(ss, res->ai_addr, res->ai_addrlen);
    *len = res->ai_addrlen;
    freeaddrinfo(res);
    return 0;
}

/* A RESP listener on bind:port; *bound_port is the port bound. NULL with err. */
static struct evconnlistener *listen_on(server_t *s, long long port, int *bound_port, char *err, size_t errlen)
{
    const config_t *cfg = s->cfg;
    struct sockaddr_storage ss;
    socklen_t sl;
    if (resolve(cfg->bind, (int)port, &ss, &sl, err, errlen) != 0) {
        return NULL;
    }
    struct evconnlistener *l = evconnlistener_new_bind(
        s->base, accept_cb, s, LEV_OPT_CLOSE_ON_FREE | LEV_OPT_REUSEABLE | LEV_OPT_CLOSE_ON_EXEC, (int)cfg->tcp_backlog,
        (struct sockaddr *)&ss, (int)sl);
    if (l == NULL) {
        int e = EVUTIL_SOCKET_ERROR();
        snprintf(err, errlen, "cannot listen on %s:%lld: %s", cfg->bind, port, evutil_socket_error_to_string(e));
        return NULL;
    }
    evconnlistener_set_error_cb(l, accept_error_cb);
    struct sockaddr_storage bound;
    socklen_t bl = sizeof bound;
    if (getsockname(evconnlistener_get_fd(l), (struct sockaddr *)&bound, &bl) == 0) {
        *bound_port = bound.ss_family == AF_INET6 ? ntohs(((struct sockaddr_in6 *)&bound)->sin6_port)
                                                  : ntohs(((struct sockaddr_in *)&bound)->sin_port);
    } else {
        *bound_port = (int)port;
    }
    return l;
}

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
    warn_if_exposed("tls-key-file", cfg->tls_key_file, "the TLS private key");
    return 0;
}

int server_listen(server_t *s, char *err, size_t errlen)
{
    const config_t *cfg = s->cfg;
    if (cfg->tls_port != 0) {
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
        warn_if_exposed("tls-key-file", cfg->tls_key_file, "the TLS private key");
        s->tls_listener = listen_on(s, cfg->tls_port, &s->tls_port, err, errlen);
        if (s->tls_listener == NULL) {
            return -1;
        }
    }
    if (cfg->port != 0 || cfg->tls_port == 0) {
        s->listener = listen_on(s, cfg->port, &s->port, err, errlen);
        if (s->listener == NULL) {
            return -1;
        }
    }
    if (auth_start(s->auth, err, errlen) != 0) {
        return -1;
    }
    if (cfg->metrics_port > 0) {
        s->http = evhttp_new(s->base);
        if (s->http == NULL) {
            snprintf(err, errlen, "cannot create the HTTP server");
            return -1;
        }
        evhttp_set_allowed_methods(s->http, EVHTTP_REQ_GET | EVHTTP_REQ_HEAD);
        evhttp_set_gencb(s->http, http_cb, s);
        evhttp_set_timeout(s->http, 30);
        if (evhttp_bind_socket_with_handle(s->http, cfg->metrics_bind, (ev_uint16_t)cfg->metrics_port) == NULL) {
            int e = EVUTIL_SOCKET_ERROR();
            snprintf(err, errlen, "cannot listen for metrics on %s:%lld: %s", cfg->metrics_bind, cfg->metrics_port,
                     evutil_socket_error_to_string(e));
            return -1;
        }
    }
    evsignal_add(s->sig_term, NULL);
    evsignal_add(s->sig_int, NULL);
    evsignal_add(s->sig_hup, NULL);
    security_check(s);
    return 0;
}

int server_port(const server_t *s)
{
    return s->port;
}

int server_tls_port(const server_t *s)
{
    return s->tls_port;
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
    warn_if_exposed("tls-key-file", s->cfg->tls_key_file, "the TLS private key");
    return 0;
}

void server_set_writer(server_t *s, writer_t *w)
{
    s->writer = w;
    s->writer_running = 1;
    conn_set_attach_writer(s->conns, w);
}

void server_job_done(job_t *j, void *ctx)
{
    server_t *s = ctx;
    conn_job_done(j, s->conns);
}

int server_run(server_t *s)
{
    event_base_dispatch(s->base);
    return 0;
}

void server_free(server_t *s)
{
    if (s == NULL) {
        return;
    }
    auth_free(s->auth);
    conn_set_free(s->conns);
    users_free(s->users);
    if (s->http) {
        evhttp_free(s->http);
    }
    if (s->listener) {
        evconnlistener_free(s->listener);
    }
    if (s->tls_listener) {
        evconnlistener_free(s->tls_listener);
    }
    tls_server_free(s->tls);
    event_free(s->accept_timer);
    event_free(s->close_timer);
    event_free(s->sig_term);
    event_free(s->sig_int);
    event_free(s->sig_hup);
    if (s->spare_fd >= 0) {
        close(s->spare_fd);
    }
    free(s);
}

const config_t *server_config(const server_t *s)
{
    return s->cfg;
}

void server_loop_info(server_t *s, loop_info_t *li)
{
    memset(li, 0, sizeof *li);
    li->cfg = s->cfg;
    li->port = s->port;
    li->tls_port = s->tls_listener != NULL ? s->tls_port : 0;
    li->uptime_ms = clock_mono_ms() - s->started_mono;
    conn_set_stats(s->conns, li);
    li->rejected_connections = s->rejected;
    li->protected_mode = server_protected(s);
    li->auth_required = server_auth_required(s);
    li->users = users_count(s->users);
    li->auth_failures = auth_failures(s->auth);
    li->denied_connections = s->denied;
    li->security_warning = server_security_warning(s);
    if (s->writer_running) {
        li->jobs_queued = writer_queued(s->writer);
        li->jobs_parked = writer_parked(s->writer);
    }
}
