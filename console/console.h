/*
 * console/console.h — hourglass-console's shared state and the contracts
 * of its modules.
 *
 *   main.c            start-up, configuration, signals, the event loop
 *   console_config.c  the key table, the options of every broker
 *                     connection (console_config.h)
 *   server.c          the evhttp server: the listener, https, the Host
 *                     check, the static page; /api goes on to api.c
 *   api.c             the gate of /api (session, CSRF, roles), login,
 *                     logout, and the routing to the handlers below
 *   http.c            what replies are made of: headers, JSON and error
 *                     replies, the cookie, parameters, the audit line
 *   session.c         logins: a session per user, its broker connection
 *                     (AUTHed as that user), its roles, its CSRF token
 *   sampler.c         the overview's samples, kept in memory (INFO, the
 *                     broker's lateness histogram, the order counts, the
 *                     compensator's layers)
 *   history.c         their ring for `history`, at most HISTORY_POINTS_MAX
 *                     points (history.h)
 *   compensator_status.c  the compensator's layers and alerts, from its
 *                     /metrics (compensator-metrics)
 *   metrics_get.c     one plain-http GET of a daemon's /metrics or /healthz
 *   api_broker.c      /api/overview, /api/dlq…, /api/msg…
 *   api_orders.c      /api/orders… (the order view, <hourglass/order_view.h>)
 *   db.c              the MariaDB handles, opened again with a rotated
 *                     mysql-password-file's password
 *   job.c             the broker commands that may run for minutes (DLQ …
 *                     ALL, TOPIC DEL … PURGE): a thread and a connection
 *                     each, polled at /api/jobs
 *   login.c           logins: the broker's AUTH on a thread of its own
 *                     each, the reply sent from the loop when it is done;
 *                     at most 4 at once, a backoff per client address
 *
 * Threads: the event loop's, the sampler's, one per running job and one per
 * login waiting on the broker. Every request but a login runs to
 * completion on the event loop thread; its broker
 * and MariaDB calls are blocking with short timeouts (broker-timeout, the
 * mysql-* timeouts) — an operator console serves a handful of people, and
 * one thread keeps every session's handle single-owner. The sampler
 * (sampler.c) runs on a thread of its own with its own broker connection
 * and database handle, so the overview never waits on them; the two
 * threads share only the published samples, under the sampler's mutex. A
 * command the broker answers only after minutes runs as a job (job.c), on
 * a thread with a connection of its own; the loop reads what the thread
 * wrote at its end under the jobs' mutex. A login's AUTH, which the broker
 * holds back up to 5 s when it fails, runs on a thread of its own too
 * (login.c); the loop answers its request when the thread is done.
 */
#ifndef HG_CONSOLE_CONSOLE_H
#define HG_CONSOLE_CONSOLE_H

#include <hourglass/hourglass.h>
#include <hourglass/order_view.h>

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include <event2/event.h>
#include <event2/http.h>
#include <event2/keyvalq_struct.h>

#include "base/buf.h"
#include "base/json.h"
#include "common/http_conns.h"
#include "console/console_config.h"

#define CONSOLE_TOKEN_HEX    64 /* session and CSRF tokens: 32 random bytes in hex */
#define CONSOLE_USER_MAX     128
#define CONSOLE_MAX_SESSIONS 256

/* Roles as the broker names them (DESIGN.md §9). */
#define ROLE_PRODUCER 0x1u
#define ROLE_CONSUMER 0x2u
#define ROLE_ADMIN    0x4u
#define ROLE_VIEWER   0x8u

typedef struct session {
    int used;
    char token[CONSOLE_TOKEN_HEX + 1];
    char csrf[CONSOLE_TOKEN_HEX + 1];
    char user[CONSOLE_USER_MAX];
    unsigned roles;
    int no_users;                            /* the broker has no users: roles came from no-users-role */
    hg_client_t *client;                     /* logged in to the broker as user */
    uint64_t created_ms;                     /* wall clock, for people */
    uint64_t last_used_ms, roles_checked_ms; /* monotonic: the TTL, the next roles check */
} session_t;

typedef struct sampler sampler_t;
typedef struct tls_server tls_server_t;
typedef struct console_jobs console_jobs_t;
typedef struct console_logins console_logins_t;

typedef struct console {
    console_config_t *cfg;
    struct event_base *base;
    struct evhttp *http;
    tls_server_t *tls;           /* https (https-cert-file), or NULL: plain http */
    int port;                    /* the bound port */
    hg_order_db *db;             /* the order database (one handle: the loop's; console_db opens it again) */
    passwd_source_t db_password; /* mysql-password-file, read again at each (re)connect (db.c); no file: none */
    unsigned long db_generation; /* the db_password generation db was opened with */
    sampler_t *sampler;
    console_jobs_t *jobs;     /* job.c: the long broker commands, each on a thread of its own */
    http_conns_t *conns;      /* common/http_conns.c: the open connections, max-connections and header-timeout */
    console_logins_t *logins; /* login.c: the logins waiting on the broker, each on a thread of its own */
    session_t sessions[CONSOLE_MAX_SESSIONS];
    char page_error[4400]; /* server.c: the last page-file error logged (once each); loop thread */
} console_t;


/* ---- session.c ---- */

/* What the broker granted a login: its connection (logged in as the user;
 * without credentials for a broker without users), the roles. */
typedef struct session_grant {
    hg_client_t *client;
    unsigned roles;
    int no_users;
} session_grant_t;

/* Before a login asks the broker (loop): the user name is 1..127 bytes
 * (else 400), and a slot is free or the user's own (else 429: every slot
 * taken by live sessions of others). 0, or -1 with *status and err. */
int session_login_check(console_t *c, const char *user, int *status, char *err, size_t errlen);

/* The broker half of a login, on a login's thread (login.c): the session's
 * connection, opened as user/password (its AUTH), and its roles (HELLO);
 * every wait of it — the connect, AUTH, HELLO — ends when stop_fd is
 * readable (the console stops, the login's client left, login-timeout
 * passed: login.c); a broker without users: no-users-role. Reads only keys
 * of cfg that SIGHUP does not change. Returns 0 with *g (g->client the
 * caller's, its stop fd off), or -1 with *status (401 refused, 503 broker
 * unreachable, 502 another broker failure; 0 when stop_fd stopped it: the
 * caller knows why) and err. */
int session_broker_login(const console_config_t *cfg, const char *user, const char *password, int stop_fd,
                         session_grant_t *g, int *status, char *err, size_t errlen);

/* Make the session of a granted login (loop): a user has at most
 * SESSIONS_PER_USER sessions, past that the user's least recently used one
 * is ended. Returns it (g->client is the session's now), or NULL with
 * *status (429: the table filled meanwhile, 500) and err (g->client still
 * the caller's). */
session_t *session_adopt(console_t *c, const char *user, session_grant_t *g, int *status, char *err, size_t errlen);

/* The live session of a Cookie header (the session cookie,
 * http_cookie_name, searched with http_cookie_find), its last use
 * refreshed; NULL when none or expired (an expired one is ended). */
session_t *session_find(console_t *c, const char *cookie_header);

/* Ask the broker again for s's roles (HELLO on its connection; a session of
 * a broker without users checks that the broker still serves it without
 * AUTH): always with action 1 (before an order action: the broker never
 * sees those), else when roles-recheck (c->cfg->roles_recheck_ms) has
 * passed since the last answer. A changed answer updates s->roles
 * (logged). Returns -1 when the
 * broker no longer accepts the user (NOAUTH, a refused AUTH): the caller
 * ends the session. A broker that does not answer, or that the sampler
 * knows to be silent, leaves the roles as they were (0). */
int session_recheck_roles(console_t *c, session_t *s, int action);

/* End every session that expired (session-ttl without use) and close its
 * broker connection. Run by a timer, and before a login takes a slot. */
void session_sweep(console_t *c);

/* End a session: close its broker connection, forget it. */
void session_end(session_t *s);

/* End every session (shutdown). */
void session_end_all(console_t *c);

/* 1 when a and b (CONSOLE_TOKEN_HEX hex digits each) are equal, in time
 * independent of where they differ. */
int session_token_equal(const char *a, const char *b);

/* The session document of s ({"logged_in":true,"user":…,"roles":[…],"can_act":…,"no_users":…,"csrf":…})
 * into b: the answer of a login (login.c) and of GET /api/session (api.c). */
void session_json(const session_t *s, buf_t *b);

/* The role names of a mask, "admin,viewer" ("" for none), into buf. */
void session_roles_text(unsigned roles, char *buf, size_t len);

/* The roles a HELLO reply grants (its "roles" field: an array of names or
 * one comma-separated string); *found 0 when the reply has no such field. */
unsigned session_roles_from_hello(const hg_reply_t *hello, int *found);

/* ---- http.c ---- */

/* One API request as the handlers see it. */
typedef struct request {
    console_t *c;
    struct evhttp_request *req;
    session_t *s;     /* the logged-in session (every /api handler but login has one) */
    const char *path; /* decoded path */
    char *parts[8];   /* path split on '/', after "/api/" */
    int nparts;
    struct evkeyvalq query; /* ?a=b */
    struct evkeyvalq form;  /* a POST's application/x-www-form-urlencoded body */
    int is_post;
} request_t;

/* The headers of every reply: Content-Type type, nosniff, DENY framing, no
 * referrer, a Content-Security-Policy of 'self' only. */
void http_common_headers(struct evhttp_request *req, const char *type);

/* Reply status with len bytes of data as type (the common headers, and
 * Cache-Control no-store when no_store). To a HEAD, the headers only, with
 * Content-Length len (http_send_reply). */
void http_send_bytes(struct evhttp_request *req, int status, const char *type, const void *data, size_t len,
                     int no_store);

/* Send req's reply: status (reason NULL: the standard phrase) with len bytes
 * of data. To a HEAD, the headers only, with Content-Length len: evhttp 2.1
 * would send the body after a HEAD's headers (and no Content-Length), which
 * a client on a kept-alive connection reads as the start of the next reply. */
void http_send_reply(struct evhttp_request *req, int status, const char *reason, const void *data, size_t len);

/* Add "Allow: methods" to req's reply (every 405 says what the path takes). */
void http_allow(struct evhttp_request *req, const char *methods);

/* The session cookie's name: "__Host-hg_session" over https (a browser
 * keeps a __Host- cookie only as the console sends it — Secure, Path=/, no
 * Domain — so neither another host of the domain nor a plain-http page can
 * plant one), "hg_session" over http (the prefix needs Secure, which a
 * browser refuses from plain http). */
const char *http_cookie_name(const console_t *c);

/* The value of the next session cookie in a Cookie header (NULL: none)
 * after `after` (NULL: from the start; else a value this returned): its
 * name must start the header or follow ' ' or ';' ("x__Host-hg_session" is
 * another cookie). The value runs to the next ';' or ' '. NULL when no
 * more. */
const char *http_cookie_find(const console_t *c, const char *cookie_header, const char *after);

/* Add the session cookie (http_cookie_name)=token to r's reply: Max-Age
 * max_age_s (the server's own expiry, session-ttl after the last use, so
 * the browser keeps the cookie exactly as long as the session lives; 0
 * with "" ends it), HttpOnly, SameSite=Strict, Path=/, and Secure over
 * https; never a Domain. */
void http_set_cookie(request_t *r, const char *token, long long max_age_s);

/* Reply with a JSON document (status 200 unless given), no-store; a live
 * session's cookie goes with it again (its expiry moved with this use). */
void http_json(request_t *r, int status, const buf_t *body);
/* A reply whose body is one JSON object, written through the json_t
 * json_reply_open returns. */
typedef struct json_reply {
    buf_t body;
    json_t j;
} json_reply_t;
/* Start *out: an empty body with its object opened. Returns the writer
 * (&out->j, valid while *out is). Then json_reply_send, or json_reply_drop
 * when another reply (http_error) went instead. */
json_t *json_reply_open(json_reply_t *out);
/* Close the object, reply with it and status (http_json) and free the body. */
void json_reply_send(request_t *r, int status, json_reply_t *out);
/* Free the body of a reply not sent. */
void json_reply_drop(json_reply_t *out);
/* Reply {"error": message} with status. */
void http_error(request_t *r, int status, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* A query or form value (NULL when absent). */
const char *http_param(request_t *r, const char *name);

/* Audit: one log line at info naming the user, the action and its outcome. */
void console_audit(const request_t *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* The address r came from ("?" when unknown), into buf. */
void console_peer(const request_t *r, char *buf, size_t len);

/* Control characters of s as '?', in place: what a client typed stays on
 * one log line (a newline in it fakes no second line). */
void console_one_line(char *s);

/* ---- api.c ---- */

/* Answer one request under /api/ (raw_path: its path as the URI has it,
 * "/api/…"; each segment is decoded here): the gate, login, session and
 * logout, then the handlers by path (api_broker, api_orders, api_jobs).
 * Always replies; frees what it parsed. */
void api_request(console_t *c, struct evhttp_request *req, const char *raw_path);

/* ---- server.c ---- */

/* Start serving on cfg->bind:cfg->port (c->port gets the bound port), over
 * TLS when https-cert-file is set (c->tls). Returns 0, or -1 with err
 * (naming the https-* key and file that did not load). */
int server_start(console_t *c, char *err, size_t errlen);
void server_stop(console_t *c);

/* Can the page be served from dir (static-dir): the directory and each of
 * its files (index.html, app.js, app.css, favicon.svg) open as regular
 * files? 0, or -1 with err naming static-dir, the file and why. Any thread. */
int server_static_check(const char *dir, char *err, size_t errlen);

/* SIGHUP: read https-cert-file and https-key-file again; new connections
 * get the new certificate, a file that does not load changes nothing. Both
 * outcomes are logged. Nothing to do without https. */
void server_reload_tls(console_t *c);

/* "https" or "http", as the console serves. */
const char *server_scheme(const console_t *c);

/* ---- sampler.c ---- */

/* Start the sampler's thread: a sample at once, then one every
 * cfg->sample_interval_ms, with its own broker connection and database
 * handle. Returns it, or NULL with err (no thread). Main thread. */
sampler_t *sampler_start(console_t *c, char *err, size_t errlen);

/* Stop the thread (it ends after the call it is in, within that call's
 * timeout) and free everything. Main thread. */
void sampler_free(sampler_t *s);

/* Read sampler-password-file again (when set; SIGHUP, and the sampler
 * itself after the broker refused its AUTH): another password is logged
 * at info and the sampler's broker connection is opened again with it
 * before its next sample; a file that cannot be read keeps the last good
 * password, warned about once per error. s may be NULL (nothing done).
 * Any thread. */
void sampler_password_refresh(sampler_t *s);

/* The overview document (latest sample, history, alerts, what the sampler
 * waits on) into out; never waits on the broker or the database. Event
 * loop thread. */
void sampler_overview_json(sampler_t *s, buf_t *out);

/* The sampler's two dependencies. */
typedef enum sampler_dep {
    SAMPLER_BROKER,
    SAMPLER_DB
} sampler_dep_t;

/* 1 when d does not answer: the sampler's last call to it (INFO; the
 * order counts) took its whole timeout (broker-timeout;
 * mysql-read-timeout) and failed, or the one in flight has waited that
 * long; *for_ms since when. A request would wait as long for nothing, so
 * meanwhile the pages that need it answer 503 at once (the order pages
 * leave a silent broker's half out instead). A dependency that refuses
 * connections is not silent (a request fails at once anyway). Never
 * waits. */
int sampler_silent(sampler_t *s, sampler_dep_t d, uint64_t *for_ms);

/* ---- metrics_get.c ---- */

typedef struct metrics_url {
    char host[256], port[16], path[512];
} metrics_url_t;

/* Split "http://HOST:PORT[/PATH]" (PATH default /metrics; an IPv6 HOST in
 * brackets). 0, or -1 with err naming the URL and what is wrong. */
int metrics_url_parse(const char *url, metrics_url_t *u, char *err, size_t errlen);

/* GET path from u's host and port over plain http/1.0, everything within
 * timeout_ms: 0 with the HTTP *status and the body in body (cleared first),
 * or -1 with err (unreachable, timed out, not HTTP, over 8 MiB). */
int metrics_get(const metrics_url_t *u, const char *path, int timeout_ms, int *status, buf_t *body, char *err,
                size_t errlen);

/* ---- compensator_status.c ---- */

#define COMPENSATOR_LAYERS_MAX 8
#define COMPENSATOR_ALERTS_MAX 8
#define COMPENSATOR_NAME_MAX   32

typedef struct compensator_layer {
    char name[COMPENSATOR_NAME_MAX];    /* relay, overdue, inspection, monitor */
    uint64_t last_run_ms;               /* wall clock when its last run ended; 0: never ran */
    double duration_ms;                 /* of the last run */
    char outcome[COMPENSATOR_NAME_MAX]; /* ok, failed, skipped, lock-lost; "" before the first run */
    long long consecutive_failures;
    char error[400]; /* of a failed last run, from /healthz ("" otherwise) */
} compensator_layer_t;

typedef struct compensator_status {
    int configured; /* compensator-metrics is set */
    int ok;         /* its /metrics was read */
    char error[512];
    compensator_layer_t layers[COMPENSATOR_LAYERS_MAX]; /* the enabled layers */
    size_t nlayers;
    struct {
        char name[COMPENSATOR_NAME_MAX]; /* overdue-pending, dlq-depth, layer-failing */
        long long active;                /* subjects whose condition holds now */
    } alerts[COMPENSATOR_ALERTS_MAX];
    size_t nalerts;
} compensator_status_t;

/* Read cfg->compensator_metrics (and its /healthz when a layer failed)
 * into *st, at most about two seconds; unconfigured: st->configured 0. A
 * failure is st->ok 0 with st->error. */
void compensator_status_read(const console_config_t *cfg, compensator_status_t *st);

/* The pure half of compensator_status_read: *st from the text of /metrics
 * and, when not NULL, of /healthz (the errors of failed layers). Returns 0
 * (st->ok), or -1 when metrics names no enabled layer (not the
 * compensator's). */
int compensator_status_parse(compensator_status_t *st, const char *metrics, const char *healthz);

/* *st as the overview's "compensator" object (docs/console.md). */
void compensator_status_json(const compensator_status_t *st, const char *url, json_t *j);

/* ---- job.c ---- */

#define JOB_ARGS_MAX 4

/* A broker command that may run for minutes, answered with one integer:
 * DLQ REQUEUE|DROP group ALL, TOPIC DEL topic PURGE. */
typedef struct job_spec {
    char what[320];         /* for people: "requeue all of the DLQ of group g" */
    char audit[320];        /* the audit line's action: "dlq requeue all group=g" */
    const char *target_key; /* a literal: "group", "topic" */
    char target[HG_NAME_MAX];
    const char *result_key; /* a literal: the integer's name, "requeued" */
    char zero_error[320];   /* when set, a reply of 0 fails the job with it, as 404 */
    uint32_t wait_ms;       /* the read timeout for the command */
    int argc;
    char argv[JOB_ARGS_MAX][HG_NAME_MAX];
} job_spec_t;

/* The fields of *spec but what, audit and zero_error (the caller prints
 * those into it). -1 when a name or an argument does not fit (longer than
 * HG_NAME_MAX - 1 bytes): no command is ever run on a cut name. */
int job_spec_init(job_spec_t *spec, const char *target_key, const char *target, const char *result_key,
                  uint32_t wait_ms, int argc, const char *const *argv);

/* The jobs of a console: NULL with err when the stop pipe cannot be made.
 * jobs_stop ends every running job's wait on the broker and joins them
 * (shutdown: before the sessions end); jobs_free stops them too. Main
 * thread. */
console_jobs_t *jobs_new(char *err, size_t errlen);
void jobs_stop(console_jobs_t *t);
void jobs_free(console_jobs_t *t);

/* The read end of the stop pipe (readable once jobs_stop has run): a job's
 * thread gives it to its clients (hg_client_set_stop_fd; a login has a stop
 * pipe of its own, login.c). Valid until jobs_free. */
int jobs_stop_fd(const console_jobs_t *t);

/* pthread_create(thread, fn, arg) of a thread with every signal blocked
 * (signals are the event loop's): a job's or a login's. pthread_create's
 * return. */
int jobs_thread_start(pthread_t *thread, void *(*fn)(void *), void *arg);

/* Run spec on a thread of its own, on a clone of r's session connection
 * (the same user), and reply 202 {"job": …} at once; or 429 when
 * JOBS_RUNNING_MAX run already, 502 when there is no connection for it.
 * The start and the end are audited. */
void job_start(request_t *r, const job_spec_t *spec);

/* GET /api/jobs and GET /api/jobs/{id} (docs/console.md); 1 when it
 * handled the path. */
int api_jobs(request_t *r);

/* ---- login.c ---- */

/* The logins of c (logins_new after the jobs: their threads take the jobs'
 * stop fd). logins_free, at shutdown after jobs_stop (the stop pipe
 * readable: every login's wait ends) and before server_stop: joins every
 * login's thread and closes its connection, unanswered. Main thread.
 * logins_new: NULL with err when its pipe cannot be made. */
console_logins_t *logins_new(console_t *c, char *err, size_t errlen);
void logins_free(console_logins_t *t);

/* POST /api/login past the gate (api.c: CSRF, Origin, a silent broker):
 * checks the name and the session table (400, 429), this address's login
 * in flight and its backoff (429 with Retry-After), the number of logins
 * waiting on the broker (429 with Retry-After), then runs the broker's
 * check on a thread of its own and answers r's request from the loop when
 * it is done (the session, its cookie; or the refusal). Audited. */
void login_start(request_t *r, const char *user, const char *password);

/* ---- db.c: the MariaDB handles and mysql-password-file ---- */

/* Set up c->db_password from c->cfg (mysql-password-file as read at
 * start-up; nothing to re-read without the key); free it at the end. Main. */
void console_db_password_init(console_t *c);
void console_db_password_free(console_t *c);

/* Read mysql-password-file again (when set): a new password is logged and
 * taken by each handle at its next open; a file that cannot be read keeps
 * the last good password, warned about once per error. Any thread. */
void console_db_password_refresh(console_t *c);

/* 1 when mysql-password-file now holds a newer password than the one of
 * generation (what console_db_open gave); 0 without the key. Any thread. */
int console_db_stale(console_t *c, unsigned long generation);

/* Open a handle with the mysql-* keys and the current password (the file
 * read again first); *generation its password's (0 without the file).
 * NULL with err as hg_order_db_open. Any thread; the caller owns it. */
hg_order_db *console_db_open(console_t *c, unsigned long *generation, hg_order_error_t *err);

/* The loop's handle c->db for a call: closed and opened again when the
 * file holds a newer password, opened when missing. NULL with err when it
 * cannot be opened (the next call tries again). The event loop's thread. */
hg_order_db *console_db(console_t *c, hg_order_error_t *err);

/* After a call on c->db failed with err: when MariaDB itself failed (a
 * killed connection, a refused password) the file is read again. 1 when it
 * now holds a newer password than c->db's: console_db opens the handle
 * again with it, and a call that changed nothing may be made once more.
 * The event loop's thread. */
int console_db_failed(console_t *c, const hg_order_error_t *err);

/* ---- api_broker.c, api_orders.c: each returns 1 when it handled the path ---- */
int api_broker(request_t *r);
int api_orders(request_t *r);

/* The session's broker client for a handler; on a broker error, reply 502
 * (or 403 for NOPERM) with the client's message. Returns the reply status
 * used (0 when e is HG_OK). */
int api_broker_failure(request_t *r, hg_err_t e);

#endif
