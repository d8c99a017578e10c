/*
 * console/server.c — hourglass-console's evhttp server (contract:
 * console.h, "server.c"): the listener, https, the Host check every request
 * passes first, and the page; a request under /api/ goes on to the gate
 * (api.c).
 *
 * Every request first: its Host header names the console — an IP literal,
 * localhost, bind or a name of allowed-hosts — or it is refused 421 (a page
 * elsewhere whose name was re-pointed at the console's address, DNS
 * rebinding, must not reach it; an HTTP/1.0 request without Host is served:
 * browsers always send one). A refusal is logged once per HOST_REFUSAL_LOG_MS at most, the
 * next line counting those left out, so such a page cannot flood the log.
 *
 * Before that, a request a proxy in front could read otherwise than evhttp
 * (two Content-Length headers that differ, two Host headers, a header name
 * with a blank or control byte) is refused 400 and its connection closed:
 * request smuggling. An HTTP/1.1 request without a Host header is refused
 * 400 too (RFC 9112 3.2 requires it; HTTP/1.0 has no Host and is served).
 *
 * Every accepted connection goes to common/http_conns.c (max-connections, header-timeout)
 * from the bevcb, which makes its bufferevent.
 *
 * https: with https-cert-file, every accepted connection is a
 * bufferevent_openssl (evhttp_set_bevcb) on an SSL of common/tls_server.h's
 * context — TLS 1.2 at least; no plain-http listener beside it. SIGHUP
 * builds a new context from the files (server_reload_tls).
 *
 * The page: GET of /app.js, /app.css, /favicon.svg serves the file of
 * static-dir; any other path outside /api serves index.html, so every view
 * (/dlq/order-cancel, /orders/42 …) is a link that loads the app.
 *
 * Threads: the event loop's only.
 */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include "console/console.h"

#include <errno.h>
#include <netinet/in.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/queue.h>
#include <sys/stat.h>
#include <unistd.h>

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/bufferevent_ssl.h>
#include <event2/http.h>
#include <event2/http_struct.h> /* a request's HTTP version (major, minor): 2.1 has no getter */
#include <event2/keyvalq_struct.h>

#include "base/clock.h"
#include "base/err.h"
#include "base/json.h"
#include "common/log.h"
#include "common/tls_server.h"

#define CONSOLE_BODY_MAX    65536
#define CONSOLE_HEADER_MAX  16384
#define CONSOLE_STATIC_MAX  (4 * 1024 * 1024)
#define HOST_REFUSAL_LOG_MS 10000 /* at most one log line of refused Hosts per this long */

/* ------------------------------------------------------------------ the page */

static const char *content_type(const char *name)
{
    const char *dot = strrchr(name, '.');
    if (dot == NULL)
        return "application/octet-stream";
    if (strcmp(dot, ".html") == 0)
        return "text/html; charset=utf-8";
    if (strcmp(dot, ".js") == 0)
        return "text/javascript; charset=utf-8";
    if (strcmp(dot, ".css") == 0)
        return "text/css; charset=utf-8";
    if (strcmp(dot, ".svg") == 0)
        return "image/svg+xml";
    return "application/octet-stream";
}

/* The files of the page: GET /NAME serves these; every other path index.html. */
static const char *const page_files[] = { "index.html", "app.js", "app.css", "favicon.svg" };

/* Can static_dir/name be served? 0, or -1 with err naming the file and why. */
static int page_file_check(const char *dir, const char *name, char *err, size_t errlen)
{
    char path[4096];
    struct stat st;
    snprintf(path, sizeof path, "%s/%s", dir, name);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return err_set(err, errlen, "%s: %s", path, strerror(errno));
    int ok = fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_size <= CONSOLE_STATIC_MAX;
    close(fd);
    if (!ok)
        return err_set(err, errlen, "%s: not a regular file of at most %d bytes", path, CONSOLE_STATIC_MAX);
    return 0;
}

int server_static_check(const char *dir, char *err, size_t errlen)
{
    struct stat st;
    if (stat(dir, &st) != 0)
        return err_set(err, errlen, "static-dir %s: %s: every page would answer 404", dir, strerror(errno));
    if (!S_ISDIR(st.st_mode))
        return err_set(err, errlen, "static-dir %s: not a directory: every page would answer 404", dir);
    char why[4200];
    for (size_t i = 0; i < sizeof page_files / sizeof page_files[0]; i++)
        if (page_file_check(dir, page_files[i], why, sizeof why) != 0)
            return err_set(err, errlen, "static-dir %s: %s: the page would answer 404", dir, why);
    return 0;
}

static void serve_file(console_t *c, struct evhttp_request *req, const char *name)
{
    char path[4096];
    struct stat st;
    snprintf(path, sizeof path, "%s/%s", c->cfg->static_dir, name);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0 || fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_size > CONSOLE_STATIC_MAX) {
        if (fd >= 0)
            close(fd);
        /* once per distinct error (a missing static-dir would log every request; start-up warned already) */
        char why[4200];
        snprintf(why, sizeof why, "page file %s: %s", path,
                 fd < 0 ? strerror(errno) : "not a regular file of a sane size");
        if (strcmp(why, c->page_error) != 0)
            log_warn("%s (answered 404; logged once until it changes)", why);
        snprintf(c->page_error, sizeof c->page_error, "%s", why);
        const char *msg = "the console's page is not installed (static-dir)\n";
        http_send_bytes(req, 404, "text/plain; charset=utf-8", msg, strlen(msg), 1);
        return;
    }
    char served[4200];
    int n = snprintf(served, sizeof served, "page file %s: ", path);
    if (n > 0 && strncmp(c->page_error, served, (size_t)n) == 0)
        c->page_error[0] = '\0'; /* that file serves again: its next error is logged again */
    http_common_headers(req, content_type(name));
    evhttp_add_header(evhttp_request_get_output_headers(req), "Cache-Control", "no-cache");
    if (evhttp_request_get_command(req) == EVHTTP_REQ_HEAD) { /* its headers, the file's length, no body */
        close(fd);
        http_send_reply(req, 200, NULL, NULL, (size_t)st.st_size);
        return;
    }
    struct evbuffer *out = evbuffer_new();
    evbuffer_add_file(out, fd, 0, st.st_size); /* takes the fd */
    evhttp_send_reply(req, 200, NULL, out);
    evbuffer_free(out);
}

static void serve_page(console_t *c, struct evhttp_request *req, const char *path)
{
    if (evhttp_request_get_command(req) != EVHTTP_REQ_GET && evhttp_request_get_command(req) != EVHTTP_REQ_HEAD) {
        const char *msg = "GET only\n";
        http_allow(req, "GET, HEAD");
        http_send_bytes(req, 405, "text/plain; charset=utf-8", msg, strlen(msg), 1);
        return;
    }
    for (size_t i = 1; i < sizeof page_files / sizeof page_files[0]; i++) /* [0]: index.html, the fallback */
        if (path[0] == '/' && strcmp(path + 1, page_files[i]) == 0) {
            serve_file(c, req, page_files[i]);
            return;
        }
    serve_file(c, req, "index.html");
}

/* ------------------------------------------------------------------ the Host check */

/* Log a refused Host, at most once per HOST_REFUSAL_LOG_MS: the refusals
 * in between are counted, and the next line says how many. */
static void log_refused_host(const char *shown, const char *peer)
{
    static int logged_once;
    static uint64_t logged_mono;
    static unsigned long left_out;
    uint64_t now = clock_mono_ms();
    if (logged_once && now - logged_mono < HOST_REFUSAL_LOG_MS) {
        left_out++;
        return;
    }
    char more[96] = "";
    if (left_out > 0)
        snprintf(more, sizeof more, "; %lu more refused since the last such line", left_out);
    log_warn("refused a request for host '%s' from %s: not an IP address, localhost, bind or a name of "
             "allowed-hosts (DNS rebinding?)%s",
             shown, peer != NULL ? peer : "?", more);
    logged_once = 1;
    logged_mono = now;
    left_out = 0;
}

/* The body of a refusal made before any route runs: {"error": msg} under
 * /api, the text and a newline for the page; returns its Content-Type. */
static const char *error_body(buf_t *b, const char *path, const char *msg)
{
    if (strncmp(path, "/api/", 5) != 0) {
        buf_append_str(b, msg);
        buf_append_str(b, "\n");
        return "text/plain; charset=utf-8";
    }
    json_t j;
    json_init(&j, b);
    json_object_open(&j);
    json_kstr(&j, "error", msg);
    json_object_close(&j);
    return "application/json; charset=utf-8";
}

/* A request for a host name that is not the console's: 421 Misdirected
 * Request naming it (a JSON error under /api, text for the page); logged
 * with where it came from (log_refused_host). */
static void refuse_host(struct evhttp_request *req, const char *path, const char *host)
{
    char shown[128], msg[512];
    const char *peer = NULL;
    ev_uint16_t port = 0;
    snprintf(shown, sizeof shown, "%s", host);
    console_one_line(shown);
    evhttp_connection_get_peer(evhttp_request_get_connection(req), (char **)&peer, &port);
    log_refused_host(shown, peer);
    snprintf(msg, sizeof msg,
             "host '%s' is not this console's: use its IP address or localhost, or add the name to allowed-hosts",
             shown);
    buf_t b = BUF_INIT;
    const char *type = error_body(&b, path, msg);
    http_common_headers(req, type);
    evhttp_add_header(evhttp_request_get_output_headers(req), "Cache-Control", "no-store");
    http_send_reply(req, 421, "Misdirected Request", b.data, b.len);
    buf_free(&b);
}

/* ------------------------------------------------------------------ ambiguous requests */

/* Is c a token character of a header name (RFC 9110 5.1, tchar)? */
static int header_name_char(unsigned char c)
{
    return c > 0x20 && c < 0x7f && strchr("\"(),/:;<=>?@[\\]{}", c) == NULL;
}

/* A request that a proxy in front may frame or route otherwise than evhttp
 * (which reads the first of two headers): two Content-Length headers that
 * differ, two Host headers, a header name with a byte no name holds (a blank
 * before its colon: "Host : evil.example" is no Host to evhttp, a Host to
 * some proxies). 0, or -1 with why. */
static int ambiguous_request(struct evhttp_request *req, char *why, size_t whylen)
{
    struct evkeyval *h;
    const char *length = NULL;
    int hosts = 0;
    TAILQ_FOREACH(h, evhttp_request_get_input_headers(req), next)
    {
        for (const char *k = h->key; *k != '\0'; k++)
            if (!header_name_char((unsigned char)*k)) {
                char name[48];
                snprintf(name, sizeof name, "%.40s", h->key);
                console_one_line(name);
                return err_set(why, whylen, "bad request: the header name '%s' holds the byte 0x%02x", name,
                               (unsigned char)*k);
            }
        if (strcasecmp(h->key, "Host") == 0 && ++hosts > 1)
            return err_set(why, whylen, "bad request: more than one Host header");
        if (strcasecmp(h->key, "Content-Length") == 0) {
            if (length != NULL && strcmp(length, h->value) != 0)
                return err_set(why, whylen, "bad request: two Content-Length headers that differ");
            length = h->value;
        }
    }
    return 0;
}

/* 400 for a request refused before routing (a JSON error under /api, text
 * for the page); with close, the connection closed after it: after an
 * ambiguous request the bytes that follow may be a request a proxy did not
 * see. */
static void refuse_bad_request(struct evhttp_request *req, const char *path, const char *why, int close)
{
    buf_t b = BUF_INIT;
    const char *type = error_body(&b, path, why);
    if (close)
        evhttp_add_header(evhttp_request_get_output_headers(req), "Connection", "close");
    http_send_bytes(req, 400, type, b.data, b.len, 1);
    buf_free(&b);
}

static void on_request(struct evhttp_request *req, void *arg)
{
    console_t *c = arg;
    const struct evhttp_uri *uri = evhttp_request_get_evhttp_uri(req);
    const char *path = evhttp_uri_get_path(uri);
    char why[160];
    if (path == NULL || path[0] == '\0')
        path = "/";
    http_conns_request_in(c->conns, req);
    if (ambiguous_request(req, why, sizeof why) != 0) {
        refuse_bad_request(req, path, why, 1);
        return;
    }
    /* The Host header, and the host of a target in absolute form
     * (GET http://host/… names the host a proxy goes by) */
    const char *host = evhttp_find_header(evhttp_request_get_input_headers(req), "Host");
    if (host == NULL && (req->major > 1 || (req->major == 1 && req->minor >= 1))) { /* RFC 9112 3.2: a MUST */
        snprintf(why, sizeof why, "bad request: an HTTP/%d.%d request without a Host header (HTTP/1.1 requires one)",
                 req->major, req->minor);
        refuse_bad_request(req, path, why, 0);
        return;
    }
    const char *target_host = evhttp_uri_get_host(uri);
    if (!console_host_allowed(c->cfg, host)) {
        refuse_host(req, path, host);
        return;
    }
    if (target_host != NULL && !console_host_allowed(c->cfg, target_host)) {
        refuse_host(req, path, target_host);
        return;
    }
    if (strncmp(path, "/api/", 5) == 0)
        api_request(c, req, path);
    else
        serve_page(c, req, path);
}

/* ------------------------------------------------------------------ the listener, https */

/* https-cert-file and https-key-file as common/tls_server.h's files. */
static void https_files(const console_config_t *cfg, tls_server_files_t *f)
{
    memset(f, 0, sizeof *f);
    f->key_prefix = "https";
    f->cert_file = cfg->https_cert_file;
    f->key_file = cfg->https_key_file;
    f->clients = TLS_CLIENTS_NO;
    f->session_id = "hourglass-console";
}

/* evhttp's bufferevent for an accepted connection: TLS on the current
 * context with https, else a plain one as evhttp makes by default; either
 * goes to http_conns_accept (max-connections, header-timeout). evhttp would make
 * a plain one of a NULL: never return NULL. */
static struct bufferevent *new_bufferevent(struct event_base *base, void *arg)
{
    console_t *c = arg;
    struct bufferevent *bev;
    if (c->tls != NULL) {
        char err[256];
        SSL *ssl = tls_server_ssl(c->tls, err, sizeof err);
        bev = ssl != NULL
                  ? bufferevent_openssl_socket_new(base, -1, ssl, BUFFEREVENT_SSL_ACCEPTING, BEV_OPT_CLOSE_ON_FREE)
                  : NULL;
        if (bev == NULL) {
            log_error("https: no TLS for a new connection: %s", ssl == NULL ? err : "bufferevent_openssl_socket_new");
            abort(); /* out of memory (CONTRIBUTING.md) */
        }
        /* a browser may close without close_notify: that ends the connection, it is no error */
        bufferevent_openssl_set_allow_dirty_shutdown(bev, 1);
    } else {
        bev = bufferevent_socket_new(base, -1, 0);
        if (bev == NULL) {
            log_error("no bufferevent for a new connection");
            abort(); /* out of memory (CONTRIBUTING.md) */
        }
    }
    http_conns_accept(c->conns, bev);
    return bev;
}

static void log_certificate(const console_t *c, const char *when)
{
    char what[512];
    tls_server_describe(c->tls, what, sizeof what);
    if (tls_server_expired(c->tls))
        log_warn("%shttps certificate %s: %s has EXPIRED: browsers will refuse it", when, c->cfg->https_cert_file,
                 what);
    else
        log_info("%shttps certificate %s: %s", when, c->cfg->https_cert_file, what);
}

const char *server_scheme(const console_t *c)
{
    return c->tls != NULL ? "https" : "http";
}

void server_reload_tls(console_t *c)
{
    char err[1024];
    tls_server_files_t files;
    if (c->tls == NULL) {
        if (c->cfg->https_cert_file != NULL)
            log_warn("SIGHUP: https-cert-file is set, but https starts only at a restart (serving http)");
        return;
    }
    if (c->cfg->https_cert_file == NULL) {
        log_warn("SIGHUP: https-cert-file is unset, but http replaces https only at a restart (serving https)");
        return;
    }
    https_files(c->cfg, &files);
    if (tls_server_reload(c->tls, &files, err, sizeof err) != 0) {
        log_error("SIGHUP: https certificate not reloaded, keeping the one in use: %s", err);
        return;
    }
    log_certificate(c, "SIGHUP: reloaded ");
}

int server_start(console_t *c, char *err, size_t errlen)
{
    if (c->cfg->https_cert_file != NULL) {
        tls_server_files_t files;
        https_files(c->cfg, &files);
        if (tls_server_new(&files, &c->tls, err, errlen) != 0)
            return -1;
        log_certificate(c, "");
    }
    c->http = evhttp_new(c->base);
    if (c->http == NULL) {
        snprintf(err, errlen, "evhttp_new failed");
        return -1;
    }
    http_conns_config_t limits = {
        .max_connections = &c->cfg->max_connections, /* c->cfg: SIGHUP updates it in place */
        .header_timeout_ms = &c->cfg->header_timeout_ms,
        .tls = c->tls != NULL,
        .what = "the console",
        .max_name = "max-connections",
        .timeout_name = "header-timeout",
        .log_prefix = "",
    };
    c->conns = http_conns_new(c->base, &limits);
    evhttp_set_bevcb(c->http, new_bufferevent, c);
    evhttp_set_max_body_size(c->http, CONSOLE_BODY_MAX);
    evhttp_set_max_headers_size(c->http, CONSOLE_HEADER_MAX);
    evhttp_set_timeout(c->http, 30);
    /* every method evhttp knows reaches the gate, which answers 405 (JSON under /api) for all but GET and POST;
     * evhttp itself answers a method it does not know (501), as the other requests it refuses before any
     * callback of ours (docs/console.md) */
    evhttp_set_allowed_methods(c->http, EVHTTP_REQ_GET | EVHTTP_REQ_POST | EVHTTP_REQ_HEAD | EVHTTP_REQ_PUT |
                                            EVHTTP_REQ_DELETE | EVHTTP_REQ_OPTIONS | EVHTTP_REQ_TRACE |
                                            EVHTTP_REQ_CONNECT | EVHTTP_REQ_PATCH);
    evhttp_set_gencb(c->http, on_request, c);
    struct evhttp_bound_socket *sock = evhttp_bind_socket_with_handle(c->http, c->cfg->bind, (ev_uint16_t)c->cfg->port);
    if (sock == NULL) {
        snprintf(err, errlen, "cannot listen on %s:%lld: %s", c->cfg->bind, c->cfg->port, strerror(errno));
        return -1;
    }
    struct sockaddr_storage ss;
    socklen_t sl = sizeof ss;
    evutil_socket_t fd = evhttp_bound_socket_get_fd(sock);
    if (getsockname(fd, (struct sockaddr *)&ss, &sl) == 0)
        c->port = ss.ss_family == AF_INET6 ? ntohs(((struct sockaddr_in6 *)&ss)->sin6_port)
                                           : ntohs(((struct sockaddr_in *)&ss)->sin_port);
    return 0;
}

void server_stop(console_t *c)
{
    if (c->http != NULL)
        evhttp_free(c->http); /* every connection's close callback runs: conns holds none after it */
    c->http = NULL;
    http_conns_free(c->conns);
    c->conns = NULL;
    tls_server_free(c->tls);
    c->tls = NULL;
}
