/*
 * console/api.c — the gate every /api request passes, and its routing
 * (contract: console.h, "api.c"): the server (server.c) hands it each
 * request under /api/ whose Host it accepted.
 *
 * The gate, in order:
 *   GET or POST only (405: every method evhttp knows reaches it), and the
 *   one of them the path takes (405 with Allow: api_method); a path,
 *   query or form with %00 (a NUL byte, that decoded would cut a name
 *   short) is refused (400); a POST body is
 *   application/x-www-form-urlencoded (415), at most CONSOLE_BODY_MAX bytes
 *   (server.c; evhttp answers 413 itself, with its own HTML page, as it does
 *   a request it cannot parse: libevent 2.1 has no hook for them,
 *   docs/console.md); a query or form part that is not name=value is 400
 *   naming it, and so is a parameter given twice (but id, which names
 *   several messages);
 *   POST /api/login is the only request without a session (GET /api/session
 *   answers {"logged_in":false} without one);
 *   every other /api request needs the session cookie (401; a cookie that
 *   names no live session is cleared with it, Max-Age=0, as it is by the
 *   {"logged_in":false} answer of GET /api/session);
 *   the session's roles are asked again — before an order action always,
 *   before any other request once every roles-recheck
 *   (session_recheck_roles) — and
 *   a user the broker no longer accepts is logged out, 401: the overview,
 *   the jobs and the session itself never reach the broker, and the page
 *   polls them every few seconds, which would keep a removed user's
 *   session alive for ever;
 *   every POST needs the session's CSRF token in X-CSRF-Token (403), and every
 *   POST but logout the role admin (403);
 *   then /api/session and /api/logout are answered here, and the rest
 *   routed by path to api_broker, api_orders and api_jobs (404 when none
 *   knows it).
 * A login is refused while the sampler knows the broker to be silent (it
 * would wait for nothing), and when the browser says it comes from another
 * site (Sec-Fetch-Site; from a browser that sends none, an Origin that is
 * not the Host: login CSRF); past these, login.c takes it (the broker's
 * check on a thread of its own, the reply from the loop when it is done).
 *
 * Threads: the event loop's only.
 */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include "console/console.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/queue.h>

#include <event2/buffer.h>
#include <event2/http.h>
#include <event2/keyvalq_struct.h>

#include "base/alloc.h"
#include "base/err.h"
#include "common/log.h"

/* Does a browser's Origin header ("http://host:port", or "null") name the
 * host:port of the request's Host header (case aside)? */
static int origin_is_host(const char *origin, const char *host)
{
    const char *authority = strstr(origin, "://");
    return authority != NULL && host != NULL && strcasecmp(authority + 3, host) == 0;
}

static void api_login(request_t *r)
{
    const char *user = http_param(r, "user");
    uint64_t silent_ms;
    /* Login CSRF: a page elsewhere posting a form here would log the
     * operator's browser in as someone else (or fill the session table).
     * Browsers say where a request comes from in Sec-Fetch-Site (computed
     * by the browser, so a reverse proxy does not change it); the console's
     * own page is same-origin. Clients that send none (curl, scripts) are
     * not browsers and log in as before. */
    const struct evkeyvalq *in = evhttp_request_get_input_headers(r->req);
    const char *site = evhttp_find_header(in, "Sec-Fetch-Site"), *origin = evhttp_find_header(in, "Origin");
    if (site != NULL && strcmp(site, "same-origin") != 0 && strcmp(site, "none") != 0) {
        log_warn("audit: login refused: user=%s: a %s request (Sec-Fetch-Site)", user != NULL ? user : "-", site);
        http_error(r, 403, "login refused: a login comes from the console's own page (Sec-Fetch-Site: %.20s)", site);
        return;
    }
    if (site == NULL && origin != NULL && !origin_is_host(origin, evhttp_find_header(in, "Host"))) {
        char shown[128];
        snprintf(shown, sizeof shown, "%s", origin);
        console_one_line(shown);
        log_warn("audit: login refused: user=%s: posted from %s (Origin)", user != NULL ? user : "-", shown);
        http_error(r, 403, "login refused: a login comes from the console's own page (Origin: %.80s)", shown);
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
    login_start(r, user, http_param(r, "password")); /* the broker's check off the loop; replies when it is done */
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

/* The method the API path of r takes: EVHTTP_REQ_GET or EVHTTP_REQ_POST;
 * 0 for a path it does not know (404). The routers (api_broker, api_orders,
 * api_jobs and the gate's own) answer these shapes; this table only lets
 * the other method of a known path be 405, rather than 404 or, where the
 * GET shape would take the verb for an id (GET /api/dlq/G/requeue), 400. */
static int api_method(const request_t *r)
{
    const int get = EVHTTP_REQ_GET, post = EVHTTP_REQ_POST;
    const char *family = r->nparts >= 1 ? r->parts[0] : "", *last = r->nparts >= 1 ? r->parts[r->nparts - 1] : "";
    if (r->nparts == 1 && (strcmp(family, "session") == 0 || strcmp(family, "overview") == 0))
        return get;
    if (r->nparts == 1 &&
        (strcmp(family, "login") == 0 || strcmp(family, "logout") == 0 || strcmp(family, "backup") == 0))
        return post;
    if (strcmp(family, "jobs") == 0 && r->nparts <= 2)
        return get;
    if (strcmp(family, "dlq") == 0 && r->nparts <= 3)
        return r->nparts == 3 && (strcmp(last, "requeue") == 0 || strcmp(last, "drop") == 0) ? post : get;
    if (strcmp(family, "msg") == 0 && r->nparts <= 3)
        return strcmp(last, "revoke") == 0 && r->nparts >= 2 ? post : r->nparts <= 2 ? get : 0;
    if (strcmp(family, "topics") == 0)
        return r->nparts == 1 ? get : r->nparts == 3 && strcmp(last, "delete") == 0 ? post : 0;
    if (strcmp(family, "orders") == 0)
        return r->nparts == 2 ? get : r->nparts == 3 && strcmp(last, "cancel") == 0 ? post : 0;
    return 0;
}

/* The first '&'-separated part of a query or form that is not name=value
 * (no '=', or an empty name: what evhttp_parse_query_str refuses), into
 * buf (at most 40 bytes of it). */
static void bad_part(const char *text, char *buf, size_t len)
{
    buf[0] = '\0';
    for (const char *p = text; p != NULL && *p != '\0';) {
        size_t n = strcspn(p, "&");
        const char *eq = memchr(p, '=', n);
        if (eq == NULL || eq == p) {
            snprintf(buf, len, "%.*s", (int)(n > 40 ? 40 : n), p);
            return;
        }
        p += n + (p[n] == '&');
    }
}

/* A query or form body holds %00: decoded, the NUL would cut its value
 * short. */
static int holds_nul_escape(const char *text)
{
    return text != NULL && strstr(text, "%00") != NULL;
}

/* A parameter given more than once (in the query, the form, or both) into
 * name[namelen], with its count: 0 when none is. Only "id" may repeat (a
 * requeue or drop of several messages); any other would be read as one of
 * its values, silently (evhttp_find_header takes the first, and a form's
 * value wins over the query's). */
static int repeated_param(const request_t *r, char *name, size_t namelen)
{
    const struct evkeyvalq *lists[2] = { &r->query, &r->form };
    const struct evkeyval *kv, *other;
    for (int i = 0; i < 2; i++) {
        TAILQ_FOREACH(kv, lists[i], next)
        {
            if (strcmp(kv->key, "id") == 0)
                continue;
            int n = 0;
            for (int j = 0; j < 2; j++)
                TAILQ_FOREACH(other, lists[j], next)
            n += strcmp(other->key, kv->key) == 0;
            if (n > 1) {
                snprintf(name, namelen, "%s", kv->key);
                return n;
            }
        }
    }
    return 0;
}

/* A POST's form into r->form: 0; -1 when the body is not form-encoded
 * (415); -2 when it holds %00 (400); -3 when a part of it is not
 * name=value (400, the part into bad, badlen bytes). */
static int read_form(request_t *r, char *bad, size_t badlen)
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
    int rc = holds_nul_escape(body) ? -2 : evhttp_parse_query_str(body, &r->form) != 0 ? -3 : 0;
    if (rc == -3)
        bad_part(body, bad, badlen);
    free(body);
    return rc;
}

void api_request(console_t *c, struct evhttp_request *req, const char *raw_path)
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
    const char *cookie = evhttp_find_header(evhttp_request_get_input_headers(req), "Cookie");
    char err[256], bad[48];
    int form = 0, method = 0, repeats = 0;

    if (cmd != EVHTTP_REQ_GET && cmd != EVHTTP_REQ_POST) {
        http_allow(req, "GET, POST");
        http_error(&r, 405, "GET or POST only");
    } else if (split_path(&r, raw_path, err, sizeof err) != 0) {
        http_error(&r, 400, "%s", err);
    } else if ((method = api_method(&r)) != 0 && method != (int)cmd) {
        http_allow(req, method == EVHTTP_REQ_POST ? "POST" : "GET");
        http_error(&r, 405, "%s takes %s only", raw_path, method == EVHTTP_REQ_POST ? "POST" : "GET");
    } else if (holds_nul_escape(q)) {
        http_error(&r, 400, "bad query: it holds %%00, a NUL byte, which no parameter holds");
    } else if (q != NULL && evhttp_parse_query_str(q, &r.query) != 0) {
        bad_part(q, bad, sizeof bad);
        http_error(&r, 400, "bad query: the part '%s' is not name=value", bad);
    } else if (r.is_post && (form = read_form(&r, bad, sizeof bad)) != 0) {
        if (form == -2)
            http_error(&r, 400, "bad form: it holds %%00, a NUL byte, which no parameter holds");
        else if (form == -3)
            http_error(&r, 400, "bad form: the part '%s' is not name=value", bad);
        else
            http_error(&r, 415, "a POST body is application/x-www-form-urlencoded");
    } else if ((repeats = repeated_param(&r, bad, sizeof bad)) != 0) {
        console_one_line(bad);
        http_error(&r, 400, "bad parameter: '%s' is given %d times; it takes one value", bad, repeats);
    } else if (r.nparts == 1 && strcmp(r.parts[0], "login") == 0) {
        api_login(&r); /* a POST: api_method */
    } else if ((r.s = session_find(c, cookie)) == NULL && r.nparts == 1 && strcmp(r.parts[0], "session") == 0 &&
               !r.is_post) {
        if (http_cookie_find(c, cookie, NULL) != NULL)
            http_set_cookie(&r, "", 0); /* a stale cookie (its session ended, expired, or the console restarted) */
        buf_t b = BUF_INIT;             /* the page asks first: an answer, not an error */
        buf_append_str(&b, "{\"logged_in\":false}");
        http_json(&r, 200, &b);
        buf_free(&b);
    } else if (r.s == NULL) {
        if (http_cookie_find(c, cookie, NULL) != NULL)
            http_set_cookie(&r, "", 0); /* a stale cookie: the browser forgets it */
        http_error(&r, 401, "not logged in");
    } else if (session_recheck_roles(c, r.s, r.is_post && r.nparts >= 1 && strcmp(r.parts[0], "orders") == 0) != 0) {
        console_audit(&r, "session ended: the broker no longer accepts user %s", r.s->user);
        http_set_cookie(&r, "", 0);
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
        http_set_cookie(&r, "", 0);
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
