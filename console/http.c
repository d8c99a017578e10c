/*
 * console/http.c — hourglass-console's HTTP side (contract: console.h,
 * "http.c"): the evhttp server, the page, and the gate every /api request
 * passes.
 *
 * Every request first: its Host header names the console — an IP literal,
 * localhost, bind or a name of allowed-hosts — or it is refused 421 (a page
 * elsewhere whose name was re-pointed at the console's address, DNS
 * rebinding, must not reach it; no Host at all is served: browsers always
 * send one). A refusal is logged once per HOST_REFUSAL_LOG_MS at most, the
 * next line counting those left out, so such a page cannot flood the log.
 *
 * The gate, in order:
 *   GET or POST only (405: every method evhttp knows reaches it); a path,
 *   query or form with %00 (a NUL byte, that decoded would cut a name
 *   short) is refused (400); a POST body is
 *   application/x-www-form-urlencoded (415), at most CONSOLE_BODY_MAX bytes
 *   (evhttp answers 413 itself, with its own HTML page, as it does a request
 *   it cannot parse: libevent 2.1 has no hook for them, docs/console.md);
 *   POST /api/login is the only request without a session (GET /api/session
 *   answers {"logged_in":false} without one);
 *   every other /api request needs the session cookie (401);
 *   every POST needs the session's CSRF token in X-CSRF-Token (403), and every
 *   POST but logout the role admin (403);
 *   then api_broker / api_orders route by path (404 when neither knows it).
 * The cookie is HttpOnly; SameSite=Strict; Path=/ (and Secure over https);
 * every reply to a request of a live session sends it again with Max-Age
 * session-ttl, as the session's expiry slides with each use.
 * Replies carry no-store, nosniff, DENY framing and a
 * Content-Security-Policy of 'self' only.
 *
 * https: with https-cert-file, every accepted connection is a
 * bufferevent_openssl (evhttp_set_bevcb) on an SSL of common/tls_server.h's
 * context — TLS 1.2 at least; no plain-http listener beside it. SIGHUP
 * builds a new context from the files (http_reload_tls).
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
#include <sys/queue.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/bufferevent_ssl.h>
#include <event2/http.h>
#include <event2/keyvalq_struct.h>

#include "base/alloc.h"
#include "base/clock.h"
#include "base/err.h"
#include "base/json.h"
#include "common/log.h"
#include "common/tls_server.h"

#define CONSOLE_BODY_MAX    65536
#define CONSOLE_HEADER_MAX  16384
#define CONSOLE_STATIC_MAX  (4 * 1024 * 1024)
#define HOST_REFUSAL_LOG_MS 10000 /* at most one log line of refused Hosts per this long */

static void common_headers(struct evhttp_request *req, const char *type)
{
    struct evkeyvalq *h = evhttp_request_get_output_headers(req);
    evhttp_add_header(h, "Content-Type", type);
    evhttp_add_header(h, "X-Content-Type-Options", "nosniff");
    evhttp_add_header(h, "X-Frame-Options", "DENY");
    evhttp_add_header(h, "Referrer-Policy", "no-referrer");
    evhttp_add_header(h, "Content-Security-Policy",
                      "default-src 'self'; img-src 'self' data:; style-src 'self'; script-src 'self'; "
                      "connect-src 'self'; frame-ancestors 'none'; form-action 'self'; base-uri 'none'");
}

static void send_bytes(struct evhttp_request *req, int status, const char *type, const void *data, size_t len,
                       int no_store)
{
    struct evbuffer *out = evbuffer_new();
    common_headers(req, type);
    if (no_store)
        evhttp_add_header(evhttp_request_get_output_headers(req), "Cache-Control", "no-store");
    evbuffer_add(out, data, len);
    evhttp_send_reply(req, status, NULL, out);
    evbuffer_free(out);
}

/* The session cookie: Max-Age is session-ttl from now, as the server's own
 * expiry is (session-ttl after the last use), so the browser keeps the
 * cookie exactly as long as the session lives. */
static void set_cookie(request_t *r, const char *token, long long max_age_s)
{
    char cookie[256];
    snprintf(cookie, sizeof cookie, "hg_session=%s; Path=/; HttpOnly; SameSite=Strict; Max-Age=%lld%s", token,
             max_age_s, r->c->tls != NULL ? "; Secure" : "");
    evhttp_add_header(evhttp_request_get_output_headers(r->req), "Set-Cookie", cookie);
}

void http_json(request_t *r, int status, const buf_t *body)
{
    /* Every reply to a request of a live session (the login's too) sends the
     * cookie again: the request was a use that moved the session's expiry
     * (session_find), so the cookie's moves with it. */
    if (r->s != NULL && r->s->used)
        set_cookie(r, r->s->token, r->c->cfg->session_ttl_ms / 1000);
    send_bytes(r->req, status ? status : 200, "application/json; charset=utf-8", body->data ? body->data : "",
               body->len, 1);
}

void http_error(request_t *r, int status, const char *fmt, ...)
{
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    buf_t b = BUF_INIT;
    json_t j;
    json_init(&j, &b);
    json_object_open(&j);
    json_kstr(&j, "error", msg);
    json_object_close(&j);
    http_json(r, status, &b);
    buf_free(&b);
}

const char *http_param(request_t *r, const char *name)
{
    const char *v = r->is_post ? evhttp_find_header(&r->form, name) : NULL;
    return v != NULL ? v : evhttp_find_header(&r->query, name);
}

/* Control characters of s as '?': what a client typed stays on one log
 * line (a newline in it fakes no second line). */
static void one_line(char *s)
{
    for (; *s != '\0'; s++)
        if ((unsigned char)*s < 0x20 || *s == 0x7f)
            *s = '?';
}

void console_audit(const request_t *r, const char *fmt, ...)
{
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    one_line(msg); /* a reason typed with a newline fakes no audit line */
    char peer[64];
    console_peer(r, peer, sizeof peer);
    log_info("audit: user=%s from=%s %s", r->s != NULL ? r->s->user : "-", peer, msg);
}

void console_peer(const request_t *r, char *buf, size_t len)
{
    const char *peer = NULL;
    ev_uint16_t port = 0;
    evhttp_connection_get_peer(evhttp_request_get_connection(r->req), (char **)&peer, &port);
    snprintf(buf, len, "%s", peer != NULL ? peer : "?");
}

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

static void serve_file(console_t *c, struct evhttp_request *req, const char *name)
{
    char path[4096];
    struct stat st;
    snprintf(path, sizeof path, "%s/%s", c->cfg->static_dir, name);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0 || fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_size > CONSOLE_STATIC_MAX) {
        if (fd >= 0)
            close(fd);
        log_warn("page file %s: %s", path, fd < 0 ? strerror(errno) : "not a regular file of a sane size");
        const char *msg = "the console's page is not installed (static-dir)\n";
        send_bytes(req, 404, "text/plain; charset=utf-8", msg, strlen(msg), 1);
        return;
    }
    struct evbuffer *out = evbuffer_new();
    common_headers(req, content_type(name));
    evhttp_add_header(evhttp_request_get_output_headers(req), "Cache-Control", "no-cache");
    evbuffer_add_file(out, fd, 0, st.st_size); /* takes the fd */
    evhttp_send_reply(req, 200, NULL, out);
    evbuffer_free(out);
}

static void serve_page(console_t *c, struct evhttp_request *req, const char *path)
{
    static const char *const files[] = { "app.js", "app.css", "favicon.svg" };
    if (evhttp_request_get_command(req) != EVHTTP_REQ_GET && evhttp_request_get_command(req) != EVHTTP_REQ_HEAD) {
        const char *msg = "GET only\n";
        send_bytes(req, 405, "text/plain; charset=utf-8", msg, strlen(msg), 1);
        return;
    }
    for (size_t i = 0; i < sizeof files / sizeof files[0]; i++)
        if (path[0] == '/' && strcmp(path + 1, files[i]) == 0) {
            serve_file(c, req, files[i]);
            return;
        }
    serve_file(c, req, "index.html");
}

/* ------------------------------------------------------------------ /api */

static void session_json(const session_t *s, buf_t *b)
{
    char roles[128];
    json_t j;
    json_init(&j, b);
    session_roles_text(s->roles, roles, sizeof roles);
    json_object_open(&j);
    json_kbool(&j, "logged_in", 1);
    json_kstr(&j, "user", s->user);
    json_key(&j, "roles");
    json_array_open(&j);
    for (char *p = roles; *p != '\0';) {
        size_t n = strcspn(p, ",");
        json_strn(&j, p, n);
        p += n + (p[n] == ',');
    }
    json_array_close(&j);
    json_kbool(&j, "can_act", (s->roles & ROLE_ADMIN) != 0);
    json_kbool(&j, "no_users", s->no_users);
    json_kstr(&j, "csrf", s->csrf);
    json_object_close(&j);
}

static void api_login(request_t *r)
{
    char err[512];
    int status = 0;
    const char *user = http_param(r, "user");
    uint64_t silent_ms;
    /* Login CSRF: a page elsewhere posting a form here would log the
     * operator's browser in as someone else (or fill the session table).
     * Browsers say where a request comes from in Sec-Fetch-Site (computed
     * by the browser, so a reverse proxy does not change it); the console's
     * own page is same-origin. Clients that send none (curl, scripts) are
     * not browsers and log in as before. */
    const char *site = evhttp_find_header(evhttp_request_get_input_headers(r->req), "Sec-Fetch-Site");
    if (site != NULL && strcmp(site, "same-origin") != 0 && strcmp(site, "none") != 0) {
        log_warn("audit: login refused: user=%s: a %s request (Sec-Fetch-Site)", user != NULL ? user : "-", site);
        http_error(r, 403, "login refused: a login comes from the console's own page (Sec-Fetch-Site: %.20s)", site);
        return;
    }
    if (sampler_silent(r->c->sampler, SAMPLER_BROKER, &silent_ms)) { /* a login is an AUTH: it would wait for nothing */
        log_warn("audit: login refused: user=%s: the broker has not answered for %.1f s", user != NULL ? user : "-",
                 silent_ms / 1e3);
        http_error(r, 503,
                   "login refused: the broker has not answered for %.1f s, and a login is checked by the broker "
                   "(sessions already open keep working)",
                   silent_ms / 1e3);
        return;
    }
    session_t *s = session_login(r->c, user, http_param(r, "password"), &status, err, sizeof err);
    if (s == NULL) {
        log_warn("audit: login refused: user=%s: %s", user != NULL ? user : "-", err);
        http_error(r, status, "login refused: %s", err);
        return;
    }
    r->s = s;
    char roles[128];
    session_roles_text(s->roles, roles, sizeof roles);
    console_audit(r, "login roles=%s%s", roles[0] ? roles : "none", s->no_users ? " (broker without users)" : "");
    buf_t b = BUF_INIT; /* http_json sends the cookie */
    session_json(s, &b);
    http_json(r, 200, &b);
    buf_free(&b);
}

/* Split the part of the path after "/api/" into r->parts (decoded). -1 with
 * err for too many segments or a segment with %00: decoded, a NUL would cut
 * the name short without a word (no name or id holds one). */
static int split_path(request_t *r, const char *raw, char *err, size_t errlen)
{
    const char *p = raw + strlen("/api/");
    r->nparts = 0;
    while (*p != '\0') {
        size_t n = strcspn(p, "/"), len = 0;
        if (r->nparts == (int)(sizeof r->parts / sizeof r->parts[0]))
            return err_set(err, errlen, "bad path: more than %d segments", (int)(sizeof r->parts / sizeof r->parts[0]));
        char *enc = xstrndup(p, n);
        r->parts[r->nparts] = evhttp_uridecode(enc, 0, &len);
        if (r->parts[r->nparts] == NULL) {
            free(enc);
            return err_set(err, errlen, "bad path: segment %d does not decode", r->nparts + 1);
        }
        r->nparts++;
        if (memchr(r->parts[r->nparts - 1], '\0', len) != NULL) {
            err_set(err, errlen, "bad path: segment %d ('%.80s') holds %%00, a NUL byte, which no name or id holds",
                    r->nparts, enc);
            free(enc);
            return -1;
        }
        free(enc);
        p += n;
        if (*p == '/')
            p++;
    }
    return 0;
}

/* A query or form body holds %00: decoded, the NUL would cut its value
 * short. */
static int holds_nul_escape(const char *text)
{
    return text != NULL && strstr(text, "%00") != NULL;
}

/* A POST's form into r->form: 0; -1 when the body is not form-encoded
 * (415); -2 when it holds %00 (400). */
static int read_form(request_t *r)
{
    struct evbuffer *in = evhttp_request_get_input_buffer(r->req);
    size_t len = evbuffer_get_length(in);
    const char *type = evhttp_find_header(evhttp_request_get_input_headers(r->req), "Content-Type");
    if (len == 0)
        return 0;
    if (type == NULL || strncasecmp(type, "application/x-www-form-urlencoded", 33) != 0)
        return -1;
    char *body = xmalloc(len + 1);
    evbuffer_remove(in, body, len);
    body[len] = '\0';
    int rc = holds_nul_escape(body) ? -2 : evhttp_parse_query_str(body, &r->form);
    free(body);
    return rc;
}

static void api(console_t *c, struct evhttp_request *req, const char *raw_path)
{
    request_t r;
    memset(&r, 0, sizeof r);
    r.c = c;
    r.req = req;
    r.path = raw_path;
    TAILQ_INIT(&r.query);
    TAILQ_INIT(&r.form);
    enum evhttp_cmd_type cmd = evhttp_request_get_command(req);
    r.is_post = cmd == EVHTTP_REQ_POST;
    const char *q = evhttp_uri_get_query(evhttp_request_get_evhttp_uri(req));
    char err[256];
    int form = 0;

    if (cmd != EVHTTP_REQ_GET && cmd != EVHTTP_REQ_POST) {
        http_error(&r, 405, "GET or POST only");
    } else if (split_path(&r, raw_path, err, sizeof err) != 0) {
        http_error(&r, 400, "%s", err);
    } else if (holds_nul_escape(q)) {
        http_error(&r, 400, "bad query: it holds %%00, a NUL byte, which no parameter holds");
    } else if (q != NULL && evhttp_parse_query_str(q, &r.query) != 0) {
        http_error(&r, 400, "bad query");
    } else if (r.is_post && (form = read_form(&r)) != 0) {
        if (form == -2)
            http_error(&r, 400, "bad form: it holds %%00, a NUL byte, which no parameter holds");
        else
            http_error(&r, 415, "a POST body is application/x-www-form-urlencoded");
    } else if (r.nparts == 1 && strcmp(r.parts[0], "login") == 0) {
        if (!r.is_post)
            http_error(&r, 405, "POST user and password to /api/login");
        else
            api_login(&r);
    } else if ((r.s = session_find(c, evhttp_find_header(evhttp_request_get_input_headers(req), "Cookie"))) == NULL &&
               r.nparts == 1 && strcmp(r.parts[0], "session") == 0 && !r.is_post) {
        buf_t b = BUF_INIT; /* the page asks first: an answer, not an error */
        buf_append_str(&b, "{\"logged_in\":false}");
        http_json(&r, 200, &b);
        buf_free(&b);
    } else if (r.s == NULL) {
        http_error(&r, 401, "not logged in");
    } else if (r.nparts >= 1 && strcmp(r.parts[0], "orders") == 0 && session_recheck_roles(c, r.s, r.is_post) != 0) {
        console_audit(&r, "session ended: the broker no longer accepts user %s", r.s->user);
        set_cookie(&r, "", 0);
        session_end(r.s);
        r.s = NULL;
        http_error(&r, 401, "not logged in: the broker no longer accepts this user (log in again)");
    } else if (r.is_post &&
               !session_token_equal(r.s->csrf,
                                    evhttp_find_header(evhttp_request_get_input_headers(req), "X-CSRF-Token") ?: "")) {
        console_audit(&r, "refused %s: missing or wrong CSRF token", raw_path);
        http_error(&r, 403, "missing or wrong CSRF token (X-CSRF-Token)");
    } else if (r.nparts == 1 && strcmp(r.parts[0], "session") == 0) {
        buf_t b = BUF_INIT;
        session_json(r.s, &b);
        http_json(&r, 200, &b);
        buf_free(&b);
    } else if (r.nparts == 1 && strcmp(r.parts[0], "logout") == 0 && r.is_post) {
        console_audit(&r, "logout");
        set_cookie(&r, "", 0);
        session_end(r.s);
        r.s = NULL;
        buf_t b = BUF_INIT;
        buf_append_str(&b, "{\"ok\":true}");
        http_json(&r, 200, &b);
        buf_free(&b);
    } else if (r.is_post && !(r.s->roles & ROLE_ADMIN)) {
        console_audit(&r, "refused %s: no role admin", raw_path);
        http_error(&r, 403, "user %s may not act: the role admin is needed", r.s->user);
    } else if (!api_broker(&r) && !api_orders(&r) && !api_jobs(&r)) {
        http_error(&r, 404, "no such API: %s", raw_path);
    }
    evhttp_clear_headers(&r.query);
    evhttp_clear_headers(&r.form);
    for (int i = 0; i < r.nparts; i++)
        free(r.parts[i]);
}

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

/* A request for a host name that is not the console's: 421 Misdirected
 * Request naming it (a JSON error under /api, text for the page); logged
 * with where it came from (log_refused_host). */
static void refuse_host(struct evhttp_request *req, const char *path, const char *host)
{
    char shown[128], msg[512];
    const char *peer = NULL;
    ev_uint16_t port = 0;
    snprintf(shown, sizeof shown, "%s", host);
    one_line(shown);
    evhttp_connection_get_peer(evhttp_request_get_connection(req), (char **)&peer, &port);
    log_refused_host(shown, peer);
    snprintf(msg, sizeof msg,
             "host '%s' is not this console's: use its IP address or localhost, or add the name to allowed-hosts",
             shown);
    buf_t b = BUF_INIT;
    int api = strncmp(path, "/api/", 5) == 0;
    if (api) {
        json_t j;
        json_init(&j, &b);
        json_object_open(&j);
        json_kstr(&j, "error", msg);
        json_object_close(&j);
    } else {
        buf_append_str(&b, msg);
        buf_append_str(&b, "\n");
    }
    struct evbuffer *out = evbuffer_new();
    common_headers(req, api ? "application/json; charset=utf-8" : "text/plain; charset=utf-8");
    evhttp_add_header(evhttp_request_get_output_headers(req), "Cache-Control", "no-store");
    evbuffer_add(out, b.data, b.len);
    evhttp_send_reply(req, 421, "Misdirected Request", out);
    evbuffer_free(out);
    buf_free(&b);
}

static void on_request(struct evhttp_request *req, void *arg)
{
    console_t *c = arg;
    const char *path = evhttp_uri_get_path(evhttp_request_get_evhttp_uri(req));
    if (path == NULL || path[0] == '\0')
        path = "/";
    const char *host = evhttp_find_header(evhttp_request_get_input_headers(req), "Host");
    if (!console_host_allowed(c->cfg, host)) {
        refuse_host(req, path, host);
        return;
    }
    if (strncmp(path, "/api/", 5) == 0)
        api(c, req, path);
    else
        serve_page(c, req, path);
}

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
 * context. (evhttp would make a plain one of a NULL: never return NULL.) */
static struct bufferevent *https_bufferevent(struct event_base *base, void *arg)
{
    console_t *c = arg;
    char err[256];
    SSL *ssl = tls_server_ssl(c->tls, err, sizeof err);
    struct bufferevent *bev =
        ssl != NULL ? bufferevent_openssl_socket_new(base, -1, ssl, BUFFEREVENT_SSL_ACCEPTING, BEV_OPT_CLOSE_ON_FREE)
                    : NULL;
    if (bev == NULL) {
        log_error("https: no TLS for a new connection: %s", ssl == NULL ? err : "bufferevent_openssl_socket_new");
        abort(); /* out of memory (CONTRIBUTING.md) */
    }
    /* a browser may close without close_notify: that ends the connection, it is no error */
    bufferevent_openssl_set_allow_dirty_shutdown(bev, 1);
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

const char *http_scheme(const console_t *c)
{
    return c->tls != NULL ? "https" : "http";
}

void http_reload_tls(console_t *c)
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

int http_start(console_t *c, char *err, size_t errlen)
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
    if (c->tls != NULL)
        evhttp_set_bevcb(c->http, https_bufferevent, c);
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

void http_stop(console_t *c)
{
    if (c->http != NULL)
        evhttp_free(c->http);
    c->http = NULL;
    tls_server_free(c->tls);
    c->tls = NULL;
}
