/*
 * broker/server_accept.c — the RESP listeners: binding bind:port and
 * bind:tls-port, and what happens to each accepted socket before it becomes
 * a connection (conn_accept): max-clients, protected mode's verdict
 * (server_security.c), and on tls-port the per-address handshake limit and a
 * fresh SSL from common/tls_server.h's current context. Both listeners share
 * max-clients, the back-off below and everything after accept.
 *
 * Out of descriptors (EMFILE/ENFILE): a spare descriptor (/dev/null, held
 * open) is given back to accept and refuse the clients waiting in the
 * backlog, so they are told why instead of hanging; when that cannot be
 * done (or on ENOBUFS/ENOMEM) accepting pauses for ACCEPT_RETRY_MS. Each of
 * these (and the refusals at max-clients, per port) is logged through
 * s->accept_log (common/log_limit.h's log_limit_count): at most once per
 * ACCEPT_LOG_MS, the next line saying how many were not logged.
 *
 * Thread: everything here runs on the event-loop thread.
 */
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <event2/listener.h>
#include <event2/util.h>

#include "broker/server_internal.h"
#include "common/log.h"
#include "common/log_limit.h"

#define ACCEPT_RETRY_MS 100

/* Tell a client it cannot be served and close it (never blocks). On the TLS
 * port it is closed without a word: a plaintext error would reach its TLS
 * stack as a garbled record, and a handshake only to say "full" would spend
 * the CPU of a broker that is already at its limit on whoever connects.
 * rejected_connections counts it; at_limit: refused at max-clients (not for
 * want of descriptors, which shed_backlog logs itself), and the log says so,
 * at most once per ACCEPT_LOG_MS per port. */
static void refuse(server_t *s, evutil_socket_t fd, int tls, int at_limit)
{
    static const char msg[] = "-ERR max number of clients reached\r\n";
    if (!tls) {
        ssize_t w = send(fd, msg, sizeof msg - 1, MSG_NOSIGNAL | MSG_DONTWAIT);
        (void)w;
    }
    evutil_closesocket(fd);
    s->rejected++;
    if (!at_limit) {
        return;
    }
    if (tls) {
        log_limit_count(&s->accept_log, LOG_LEVEL_WARN, "max-clients tls-port",
                        "max-clients (%lld) reached: closed a client on tls-port %d (%llu refused so far)",
                        s->cfg->max_clients, s->tls_port, (unsigned long long)s->rejected);
    } else {
        log_limit_count(&s->accept_log, LOG_LEVEL_WARN, "max-clients port",
                        "max-clients (%lld) reached: refused a client with 'max number of clients reached' (%llu "
                        "refused so far)",
                        s->cfg->max_clients, (unsigned long long)s->rejected);
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
        refuse(s, fd, l == s->tls_listener, 1);
        return;
    }
    if (!server_peer_admitted(s, sa, l == s->tls_listener)) {
        server_deny(s, fd, sa);
        return;
    }
    SSL *ssl = NULL;
    char hs_key[CONN_ADDR_KEY_SIZE];
    if (l == s->tls_listener) {
        char err[256];
        if (conn_tls_admit(s->conns, sa, hs_key) != 0) { /* its address has enough handshakes in progress */
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
    conn_accept(s->conns, fd, sa, ssl, ssl != NULL ? hs_key : NULL);
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
            refuse(s, fd, s->tls_listener != NULL && lfd == evconnlistener_get_fd(s->tls_listener), 0);
            shed++;
        }
        s->spare_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
        if (fd < 0) {
            break;
        }
    }
    return shed;
}

void server_accept_timer_cb(evutil_socket_t fd, short what, void *arg)
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
        if (shed > 0) { /* its own key: a pause just before must not hide the refusals */
            log_limit_count(&s->accept_log, LOG_LEVEL_WARN, "shed",
                            "accept: %s (%zu clients): refused %d waiting client%s with 'max number of clients "
                            "reached' (%llu refused so far)",
                            evutil_socket_error_to_string(err), conn_set_count(s->conns), shed, shed == 1 ? "" : "s",
                            (unsigned long long)s->rejected);
            return;
        }
    }
    if (err == EMFILE || err == ENFILE || err == ENOBUFS || err == ENOMEM) {
        log_limit_count(&s->accept_log, LOG_LEVEL_WARN, "pause", "accept: %s (%zu clients); pausing accepts for %d ms",
                        evutil_socket_error_to_string(err), conn_set_count(s->conns), ACCEPT_RETRY_MS);
        evconnlistener_disable(l);
        struct timeval tv = { 0, ACCEPT_RETRY_MS * 1000 };
        evtimer_add(s->accept_timer, &tv);
        return;
    }
    log_warn("accept: %s", evutil_socket_error_to_string(err));
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

/* server_internal.h */
struct evconnlistener *server_accept_listen(server_t *s, long long port, int *bound_port, char *err, size_t errlen)
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
