/*
 * console/login.c — logins off the event loop (contract: console.h,
 * "login.c"; the documents: docs/console.md, "Logins").
 *
 * A login is a broker's AUTH, and the broker holds a refused one back
 * before it answers (200 ms doubling up to 5 s per address, and every login
 * reaches it from the console's one address). Run on the loop, a password
 * guesser without any account held the console's one thread up to 5 s per
 * attempt, and every operator's every page waited. So a login's broker
 * half (session_broker_login: connect, AUTH, HELLO) runs on a thread of
 * its own, and the loop serves everyone else meanwhile:
 *
 *   - api.c's gate runs first, on the loop (the method, the form, login
 *     CSRF: Sec-Fetch-Site and Origin, the broker known silent), then
 *     login_start: the name and a free session slot (session_login_check),
 *     this address's backoff, the limits below; then the request is held
 *     (http_conns_hold) and the thread started (jobs_thread_start: the jobs'
 *     kind of thread, their stop pipe);
 *   - the thread writes its slot's index into the notify pipe when it is
 *     done; the loop joins it (after which it reads what the thread wrote:
 *     the join orders it) and answers the held request as the login did
 *     before — the session made (session_adopt), the browser's previous
 *     session ended, the audit line, the cookie — one request, one reply,
 *     so curl and scripts log in as before;
 *   - a client that closes its connection before the answer (a browser
 *     tab closed, curl interrupted): common/http_conns.c watches a held request's
 *     socket for the client's end (evhttp 2.1 reads nothing from a
 *     connection whose request waits for its reply, so it would not see
 *     it) and frees the connection; its close callback tells this file
 *     (on_gone), as for a connection evhttp frees itself (a client
 *     pipelining behind its login past header-timeout): the request is
 *     never touched again (one evhttp detached is freed here, at the next
 *     safe point), the login's stop pipe is written, so its broker work
 *     (connect, AUTH, HELLO) ends at once, and a session granted meanwhile
 *     is closed, never made. A login its client left counts as a failure
 *     for the address's backoff unless the broker had said yes (it may
 *     have been one, and hanging up must not be a way round the backoff).
 *
 * Bounds: at most LOGINS_MAX logins wait on the broker at once (one more is
 * 429 with Retry-After); an address has one login in flight at a time (a
 * second is 429 at once); and an address whose logins failed
 * LOGIN_FREE_FAILURES times in a row waits before its next one, 1 s
 * doubling up to LOGIN_BACKOFF_MAX_MS (429 with Retry-After, before the
 * broker is asked, so a guesser can neither take every slot nor drive the
 * broker's delay for the console's address up for everyone). A success
 * from the address, or LOGIN_FORGET_MS without a failure, forgets them. At
 * most LOGIN_ADDRS_MAX addresses are remembered; a new one beyond replaces
 * the one whose last failure is the oldest. An IPv6 address counts as its
 * /64 (one host holds a whole /64), an IPv4-mapped one as its IPv4 address.
 *
 * A login waits on the broker login-timeout at most, whatever it waits on
 * (a hung or SIGSTOPped broker accepts the TCP connection and never
 * answers AUTH; a host that drops the SYN never connects): a timer of the
 * loop's writes its stop pipe then, which ends the connect, the TLS
 * handshake, AUTH, HELLO or a reconnect's pause at once, and the login is
 * answered 504 "the broker at HOST:PORT did not answer within N s
 * (login-timeout)". Such a login counts as a failure for the address's
 * backoff (below login-timeout a refused password the broker holds back
 * would otherwise be a way round it).
 *
 * Each login has a stop pipe of its own (its broker connection's stop fd,
 * hg_client_opts_t.stop_fd, in force from the connect on). Shutdown
 * (logins_free): every login's stop pipe is written, so a login waiting
 * on the broker ends at once — its connect, AUTH or HELLO — is joined, and
 * its connection is closed, unanswered (the loop runs no more: a reply
 * would never be written).
 *
 * Threads: the event loop's owns the table, the requests and the address
 * backoff; a login's thread owns its broker connections and writes only
 * its slot's result fields, which the loop reads after joining it.
 */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include "console/console.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/queue.h>
#include <unistd.h>

#include <event2/event.h>
#include <event2/http.h>
#include <event2/keyvalq_struct.h>

#include "base/alloc.h"
#include "base/clock.h"
#include "common/log.h"

#define LOGINS_MAX            4       /* logins waiting on the broker at once */
#define LOGIN_FREE_FAILURES   3       /* failed logins in a row an address makes without waiting (typos) */
#define LOGIN_BACKOFF_BASE_MS 1000u   /* then its next login waits this long, doubling */
#define LOGIN_BACKOFF_MAX_MS  60000u  /* up to this */
#define LOGIN_FORGET_MS       600000u /* an address without a failure this long starts afresh */
#define LOGIN_ADDRS_MAX       1024    /* addresses remembered */
#define LOGIN_LOG_MS          10000u  /* a refusal of the limits is logged once per this long at most */

typedef struct login {
    int used;
    console_logins_t *set;
    struct evhttp_request *req;    /* NULL once its connection closed (on_gone) */
    struct evhttp_request *orphan; /* a request evhttp detached when the client left: freed here */
    char user[CONSOLE_USER_MAX];
    char *password;      /* wiped and freed once the thread is joined */
    char peer[64];       /* the client's address, for people */
    char key[72];        /* what it counts under (addr_key) */
    int stop[2];         /* its stop pipe: the read end is its broker connection's stop fd */
    int left;            /* its client left before the answer: stopped, no session made */
    int timed_out;       /* login-timeout passed before the thread ended: stopped, answered 504 */
    struct event *timer; /* login-timeout: on_timeout */
    uint64_t started_mono;
    pthread_t thread;
    /* the thread's, read by the loop after pthread_join */
    int ok;
    session_grant_t grant;
    int status;
    char err[512];
} login_t;

typedef struct addr_failures {
    char addr[72]; /* an addr_key; "": a free entry */
    unsigned failures;
    uint64_t last_mono;    /* the last failure */
    uint64_t until_mono;   /* no login of the address before this */
    unsigned long refused; /* logins refused 429 since the last failure */
} addr_failures_t;

struct console_logins {
    console_t *c;
    int notify[2]; /* a login's thread writes its slot's index here when it is done */
    struct event *notified;
    login_t logins[LOGINS_MAX];
    addr_failures_t *addrs; /* LOGIN_ADDRS_MAX */
    uint64_t busy_logged_mono;
    unsigned long busy_left_out;
};

/* ------------------------------------------------------------------ the address backoff */

/* The key an address counts under, into key: an IPv4 address as it is; an
 * IPv6 one as its /64 ("2001:db8:1:2::/64": one host holds a whole /64, and
 * would otherwise have 2^64 fresh counts), an IPv4-mapped one as its IPv4
 * address. */
static void addr_key(const char *peer, char *key, size_t len)
{
    struct in6_addr a6;
    if (strchr(peer, ':') == NULL || inet_pton(AF_INET6, peer, &a6) != 1) {
        snprintf(key, len, "%s", peer);
        return;
    }
    char text[INET6_ADDRSTRLEN];
    if (IN6_IS_ADDR_V4MAPPED(&a6)) {
        inet_ntop(AF_INET, &a6.s6_addr[12], text, sizeof text);
        snprintf(key, len, "%s", text);
        return;
    }
    memset(&a6.s6_addr[8], 0, 8);
    inet_ntop(AF_INET6, &a6, text, sizeof text);
    snprintf(key, len, "%s/64", text);
}

static addr_failures_t *addr_find(console_logins_t *t, const char *addr, int make)
{
    addr_failures_t *free_one = NULL, *oldest = NULL;
    uint64_t now = clock_mono_ms();
    for (size_t i = 0; i < LOGIN_ADDRS_MAX; i++) {
        addr_failures_t *a = &t->addrs[i];
        if (a->addr[0] != '\0' && now - a->last_mono > LOGIN_FORGET_MS)
            memset(a, 0, sizeof *a);
        if (a->addr[0] == '\0') {
            free_one = free_one != NULL ? free_one : a;
            continue;
        }
        if (strcmp(a->addr, addr) == 0)
            return a;
        if (oldest == NULL || a->last_mono < oldest->last_mono)
            oldest = a;
    }
    if (!make)
        return NULL;
    addr_failures_t *a = free_one != NULL ? free_one : oldest;
    memset(a, 0, sizeof *a);
    snprintf(a->addr, sizeof a->addr, "%s", addr);
    return a;
}

/* The broker refused a login from addr: past LOGIN_FREE_FAILURES in a row,
 * the address waits before its next one. */
static void addr_failed(console_logins_t *t, const char *addr)
{
    addr_failures_t *a = addr_find(t, addr, 1);
    uint64_t now = clock_mono_ms();
    a->failures++;
    a->last_mono = now;
    if (a->failures > LOGIN_FREE_FAILURES) {
        unsigned shift = a->failures - LOGIN_FREE_FAILURES - 1;
        uint64_t wait = shift >= 7 ? LOGIN_BACKOFF_MAX_MS : (uint64_t)LOGIN_BACKOFF_BASE_MS << shift;
        if (wait > LOGIN_BACKOFF_MAX_MS)
            wait = LOGIN_BACKOFF_MAX_MS;
        a->until_mono = now + wait;
        log_warn("login: %u failed logins in a row from %s: its next login waits %.0f s (%lu refused 429 since the "
                 "one before)",
                 a->failures, addr, wait / 1e3, a->refused);
        a->refused = 0;
    }
}

/* ------------------------------------------------------------------ the thread */

static void *login_main(void *arg)
{
    login_t *l = arg;
    l->ok = session_broker_login(l->set->c->cfg, l->user, l->password, l->stop[0], &l->grant, &l->status, l->err,
                                 sizeof l->err) == 0;
    unsigned char index = (unsigned char)(l - l->set->logins);
    while (write(l->set->notify[1], &index, 1) != 1 && errno == EINTR)
        ; /* a full pipe cannot be: it holds LOGINS_MAX bytes at most */
    return NULL;
}

/* ------------------------------------------------------------------ the loop's side */

/* Stop l's broker work: its every wait ends (its thread then notifies). */
static void login_stop(login_t *l)
{
    while (write(l->stop[1], "x", 1) != 1 && errno == EINTR)
        ; /* a full pipe cannot be: one byte, written at most twice */
}

/* The client of l left before its reply (http_conns.c's close callback): its
 * request is never touched again, but one evhttp detached, which is ours
 * to free (login_finish or logins_free, outside evhttp's callbacks); its
 * broker work is stopped: nobody waits for it. */
static void on_gone(void *arg, int detached)
{
    login_t *l = arg;
    if (detached)
        l->orphan = l->req;
    l->req = NULL;
    l->left = 1;
    login_stop(l);
}

/* login-timeout has passed and l's thread still waits on the broker: stop
 * it (its thread then notifies; login_finish answers 504). */
static void on_timeout(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    login_t *l = arg;
    l->timed_out = 1;
    login_stop(l);
}

/* "HOST:PORT" of uri (the console's uri holds no credentials: checked at
 * start-up) into out, for people. */
static void broker_address(const char *uri, char *out, size_t len)
{
    const char *p = strstr(uri, "://");
    p = p != NULL ? p + 3 : uri;
    snprintf(out, len, "%.*s", (int)strcspn(p, "/?#"), p);
}

/* A joined login's leftovers: the password, a granted connection nobody
 * took, an orphaned request, its timer; the slot is free again. */
static void login_clear(login_t *l)
{
    if (l->timer != NULL)
        event_free(l->timer);
    if (l->password != NULL) {
        memset(l->password, 0, strlen(l->password));
        free(l->password);
    }
    hg_client_close(l->grant.client);
    if (l->orphan != NULL)
        evhttp_request_free(l->orphan);
    close(l->stop[0]);
    close(l->stop[1]);
    memset(l, 0, sizeof *l);
}

/* The reply of a login whose thread has ended (joined): as the login on
 * the loop answered it before. */
static void login_reply(login_t *l)
{
    console_t *c = l->set->c;
    request_t r;
    char err[600];
    int status = l->status;
    memset(&r, 0, sizeof r);
    r.c = c;
    r.req = l->req;
    r.is_post = 1;
    TAILQ_INIT(&r.query);
    TAILQ_INIT(&r.form);
    session_t *s = l->ok ? session_adopt(c, l->user, &l->grant, &status, err, sizeof err) : NULL;
    if (s == NULL) {
        if (!l->ok)
            snprintf(err, sizeof err, "%s", l->err);
        log_warn("audit: login refused: user=%s from=%s: %s", l->user, l->peer, err);
        http_error(&r, status, "login refused: %s", err);
        return;
    }
    /* The session this browser held until now ends: its cookie is replaced,
     * and a token that may have been seen elsewhere must not outlive it. */
    session_t *previous = session_find(c, evhttp_find_header(evhttp_request_get_input_headers(l->req), "Cookie"));
    if (previous != NULL && previous != s) {
        log_info("session of %s ended: a new login (of %s) from its browser", previous->user, s->user);
        session_end(previous);
    }
    r.s = s;
    char roles[128];
    session_roles_text(s->roles, roles, sizeof roles);
    console_audit(&r, "login roles=%s%s", roles[0] ? roles : "none", s->no_users ? " (broker without users)" : "");
    buf_t b = BUF_INIT; /* http_json sends the cookie */
    session_json(s, &b);
    http_json(&r, 200, &b);
    buf_free(&b);
}

/* l's thread has ended: join it, count the outcome for its address, answer. */
static void login_finish(login_t *l)
{
    console_logins_t *t = l->set;
    pthread_join(l->thread, NULL);
    event_del(l->timer);
    if (!l->ok && l->status == 0 && l->timed_out) { /* stopped by on_timeout */
        char address[256];
        broker_address(t->c->cfg->uri, address, sizeof address);
        l->status = 504;
        snprintf(l->err, sizeof l->err, "the broker at %s did not answer within %g s (login-timeout)", address,
                 t->c->cfg->login_timeout_ms / 1e3);
    } else if (!l->ok && l->status == 0) { /* stopped otherwise: its client left (it gets no answer) */
        l->status = 503;
    }
    if (l->ok) {
        addr_failures_t *a = addr_find(t, l->key, 0);
        if (a != NULL)
            memset(a, 0, sizeof *a); /* a success from the address: its failures are forgotten */
    } else if (l->status == 401 || l->left || l->timed_out) {
        addr_failed(t, l->key);
    }
    if (l->req == NULL) {
        log_info("login of %s from %s: the client left before the broker answered (%s, %llu ms): no session made",
                 l->user, l->peer, l->ok ? "granted, not made" : l->err,
                 (unsigned long long)(clock_mono_ms() - l->started_mono));
    } else {
        http_conns_release(t->c->conns, l->req);
        login_reply(l);
    }
    login_clear(l);
}

static void on_notified(evutil_socket_t fd, short what, void *arg)
{
    (void)what;
    console_logins_t *t = arg;
    unsigned char done[LOGINS_MAX];
    ssize_t n = read(fd, done, sizeof done);
    for (ssize_t i = 0; i < n; i++)
        if (done[i] < LOGINS_MAX && t->logins[done[i]].used)
            login_finish(&t->logins[done[i]]);
}

console_logins_t *logins_new(console_t *c, char *err, size_t errlen)
{
    console_logins_t *t = xcalloc(1, sizeof *t);
    t->c = c;
    if (pipe2(t->notify, O_CLOEXEC | O_NONBLOCK) != 0) {
        snprintf(err, errlen, "logins: pipe: %s", strerror(errno));
        free(t);
        return NULL;
    }
    t->addrs = xcalloc(LOGIN_ADDRS_MAX, sizeof *t->addrs);
    t->notified = event_new(c->base, t->notify[0], EV_READ | EV_PERSIST, on_notified, t);
    if (t->notified == NULL)
        abort(); /* out of memory (CONTRIBUTING.md) */
    event_add(t->notified, NULL);
    return t;
}

void logins_free(console_logins_t *t)
{
    if (t == NULL)
        return;
    size_t waiting = 0;
    for (size_t i = 0; i < LOGINS_MAX; i++)
        waiting += t->logins[i].used != 0;
    if (waiting > 0)
        log_info("stopping: %zu login%s still waiting on the broker: stopped, %s connection%s closed", waiting,
                 waiting == 1 ? "" : "s", waiting == 1 ? "its" : "their", waiting == 1 ? "" : "s");
    for (size_t i = 0; i < LOGINS_MAX; i++)
        if (t->logins[i].used)
            login_stop(&t->logins[i]);
    for (size_t i = 0; i < LOGINS_MAX; i++) {
        login_t *l = &t->logins[i];
        if (!l->used)
            continue;
        pthread_join(l->thread, NULL); /* its waits end: its stop pipe is readable */
        if (l->req != NULL) {
            /* closed now, not at evhttp_free: the sampler's stop before it may wait out a broker-timeout */
            struct evhttp_connection *evcon = evhttp_request_get_connection(l->req);
            http_conns_release(t->c->conns, l->req);
            if (evcon != NULL)
                evhttp_connection_free(evcon); /* frees the request with it */
        }
        login_clear(l);
    }
    event_free(t->notified);
    close(t->notify[0]);
    close(t->notify[1]);
    free(t->addrs);
    free(t);
}

/* 429 "login refused: why", with Retry-After (seconds, at least 1). */
static void refuse_busy(request_t *r, unsigned retry_after_s, const char *why)
{
    char after[24];
    snprintf(after, sizeof after, "%u", retry_after_s > 0 ? retry_after_s : 1);
    evhttp_add_header(evhttp_request_get_output_headers(r->req), "Retry-After", after);
    http_error(r, 429, "login refused: %s", why);
}

/* Log a refusal of the limits at most once per LOGIN_LOG_MS (a client
 * hammering them must not flood the log). */
static void log_busy(console_logins_t *t, const char *user, const char *peer, const char *why)
{
    uint64_t now = clock_mono_ms();
    if (t->busy_logged_mono != 0 && now - t->busy_logged_mono < LOGIN_LOG_MS) {
        t->busy_left_out++;
        return;
    }
    log_warn("audit: login refused: user=%s from=%s: %s (%lu more such refusals since the last such line)", user, peer,
             why, t->busy_left_out);
    t->busy_logged_mono = now;
    t->busy_left_out = 0;
}

void login_start(request_t *r, const char *user, const char *password)
{
    console_logins_t *t = r->c->logins;
    char err[512], peer[64], key[72];
    int status = 0;
    console_peer(r, peer, sizeof peer);
    addr_key(peer, key, sizeof key);
    if (session_login_check(r->c, user, &status, err, sizeof err) != 0) {
        log_warn("audit: login refused: user=%s from=%s: %s", user != NULL ? user : "-", peer, err);
        http_error(r, status, "login refused: %s", err);
        return;
    }
    char why[300];
    login_t *slot = NULL;
    for (size_t i = 0; i < LOGINS_MAX; i++) {
        login_t *l = &t->logins[i];
        if (!l->used) {
            slot = slot != NULL ? slot : l;
        } else if (strcmp(l->key, key) == 0) {
            snprintf(why, sizeof why, "a login from %s waits on the broker already: one at a time per address", peer);
            log_busy(t, user, peer, why);
            refuse_busy(r, 1, why);
            return;
        }
    }
    addr_failures_t *a = addr_find(t, key, 0);
    uint64_t now = clock_mono_ms();
    if (a != NULL && now < a->until_mono) {
        unsigned wait_s = (unsigned)((a->until_mono - now + 999) / 1000);
        snprintf(why, sizeof why, "%u failed logins in a row from %s: its next login is taken in %u s", a->failures,
                 key, wait_s);
        if (++a->refused == 1) /* once per wait: the next failure's line counts the others */
            log_warn("audit: login refused: user=%s from=%s: %s", user, peer, why);
        refuse_busy(r, wait_s, why);
        return;
    }
    if (slot == NULL) {
        snprintf(why, sizeof why, "%d logins wait on the broker already (at most %d at once): try again in a second",
                 LOGINS_MAX, LOGINS_MAX);
        log_busy(t, user, peer, why);
        refuse_busy(r, 1, why);
        return;
    }
    int stop[2];
    if (pipe2(stop, O_CLOEXEC | O_NONBLOCK) != 0) {
        http_error(r, 503, "login refused: no stop pipe for it: %s", strerror(errno));
        return;
    }
    if (http_conns_hold(r->c->conns, r->req, on_gone, slot) != 0) {
        close(stop[0]);
        close(stop[1]);
        http_error(r, 503, "login refused: its connection is not one the console tracks");
        return;
    }
    memset(slot, 0, sizeof *slot);
    slot->stop[0] = stop[0];
    slot->stop[1] = stop[1];
    slot->used = 1;
    slot->set = t;
    slot->req = r->req;
    snprintf(slot->user, sizeof slot->user, "%s", user);
    slot->password = xstrdup(password != NULL ? password : "");
    snprintf(slot->peer, sizeof slot->peer, "%s", peer);
    snprintf(slot->key, sizeof slot->key, "%s", key);
    slot->started_mono = now;
    slot->timer = evtimer_new(r->c->base, on_timeout, slot);
    if (slot->timer == NULL)
        abort(); /* out of memory (CONTRIBUTING.md) */
    int rc = jobs_thread_start(&slot->thread, login_main, slot);
    if (rc != 0) {
        http_conns_release(r->c->conns, r->req);
        login_clear(slot);
        http_error(r, 503, "login refused: no thread for it: %s", strerror(rc));
        return;
    }
    struct timeval bound = { (time_t)(r->c->cfg->login_timeout_ms / 1000),
                             (suseconds_t)(r->c->cfg->login_timeout_ms % 1000 * 1000) };
    evtimer_add(slot->timer, &bound);
}
