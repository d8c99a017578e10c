/*
 * console/http.c — the HTTP helpers hourglass-console answers with
 * (contract: console.h, "http.c"): the headers of every reply, a reply of
 * bytes, of JSON or of an error, the session cookie, a request's
 * parameters, the audit line and the peer's address. It knows no route and
 * no handler: the server (server.c), the gate (api.c) and the handlers
 * (api_broker.c, api_orders.c, job.c) stand on it.
 *
 * A reply to a HEAD is its headers only, with the Content-Length of the
 * body a GET would get (http_send_reply).
 *
 * Replies carry nosniff, DENY framing, no referrer and a
 * Content-Security-Policy of 'self' only (http_common_headers); API replies
 * no-store. The cookie is HttpOnly; SameSite=Strict; Path=/ (and Secure
 * over https, where its name has the __Host- prefix); every reply to a
 * request of a live session sends it again with Max-Age session-ttl, as the
 * session's expiry slides with each use.
 * What a client typed is logged on one line (console_one_line).
 *
 * Threads: the event loop's only.
 */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include "console/console.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include <event2/buffer.h>
#include <event2/http.h>
#include <event2/keyvalq_struct.h>

#include "base/json.h"
#include "common/log.h"

void http_common_headers(struct evhttp_request *req, const char *type)
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

void http_send_reply(struct evhttp_request *req, int status, const char *reason, const void *data, size_t len)
{
    if (evhttp_request_get_command(req) == EVHTTP_REQ_HEAD) {
        char n[24];
        snprintf(n, sizeof n, "%zu", len);
        evhttp_add_header(evhttp_request_get_output_headers(req), "Content-Length", n);
        evhttp_send_reply(req, status, reason, NULL);
        return;
    }
    struct evbuffer *out = evbuffer_new();
    evbuffer_add(out, data, len);
    evhttp_send_reply(req, status, reason, out);
    evbuffer_free(out);
}

void http_allow(struct evhttp_request *req, const char *methods)
{
    evhttp_add_header(evhttp_request_get_output_headers(req), "Allow", methods);
}

void http_send_bytes(struct evhttp_request *req, int status, const char *type, const void *data, size_t len,
                     int no_store)
{
    http_common_headers(req, type);
    if (no_store)
        evhttp_add_header(evhttp_request_get_output_headers(req), "Cache-Control", "no-store");
    http_send_reply(req, status, NULL, data, len);
}

const char *http_cookie_name(const console_t *c)
{
    return c->tls != NULL ? "__Host-hg_session" : "hg_session";
}

const char *http_cookie_find(const console_t *c, const char *cookie_header, const char *after)
{
    const char *name = http_cookie_name(c);
    size_t len = strlen(name);
    const char *p = after != NULL ? after : cookie_header;
    while (p != NULL && (p = strstr(p, name)) != NULL) {
        int starts = p == cookie_header || p[-1] == ' ' || p[-1] == ';';
        p += len;
        if (starts && *p == '=')
            return p + 1;
    }
    return NULL;
}

void http_set_cookie(request_t *r, const char *token, long long max_age_s)
{
    char cookie[256];
    snprintf(cookie, sizeof cookie, "%s=%s; Path=/; HttpOnly; SameSite=Strict; Max-Age=%lld%s", http_cookie_name(r->c),
             token, max_age_s, r->c->tls != NULL ? "; Secure" : "");
    evhttp_add_header(evhttp_request_get_output_headers(r->req), "Set-Cookie", cookie);
}

void http_json(request_t *r, int status, const buf_t *body)
{
    /* Every reply to a request of a live session (the login's too) sends the
     * cookie again: the request was a use that moved the session's expiry
     * (session_find), so the cookie's moves with it. */
    if (r->s != NULL && r->s->used)
        http_set_cookie(r, r->s->token, r->c->cfg->session_ttl_ms / 1000);
    http_send_bytes(r->req, status ? status : 200, "application/json; charset=utf-8", body->data ? body->data : "",
                    body->len, 1);
}

void http_error(request_t *r, int status, const char *fmt, ...)
{
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    json_reply_t out;
    json_kstr(json_reply_open(&out), "error", msg);
    json_reply_send(r, status, &out);
}

json_t *json_reply_open(json_reply_t *out)
{
    out->body = (buf_t)BUF_INIT;
    json_init(&out->j, &out->body);
    json_object_open(&out->j);
    return &out->j;
}

void json_reply_send(request_t *r, int status, json_reply_t *out)
{
    json_object_close(&out->j);
    http_json(r, status, &out->body);
    buf_free(&out->body);
}

void json_reply_drop(json_reply_t *out)
{
    buf_free(&out->body);
}

const char *http_param(request_t *r, const char *name)
{
    const char *v = r->is_post ? evhttp_find_header(&r->form, name) : NULL;
    return v != NULL ? v : evhttp_find_header(&r->query, name);
}

void console_one_line(char *s)
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
    console_one_line(msg); /* a reason typed with a newline fakes no audit line */
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
