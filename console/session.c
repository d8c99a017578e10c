/*
 * console/session.c — logins (contract: console.h, "session.c").
 *
 * The console holds no passwords and no user list of its own: a login is a
 * connection to the broker as that user (the client options' user and
 * password, so the client sends AUTH user password on every reconnect; a
 * refused AUTH is "wrong user name or password", whichever part was
 * wrong), and the roles are
 * the broker's (the "roles" field of HELLO). That connection serves every
 * request of the session, so the broker checks each command against the
 * user's own roles too — the console's check (admin for actions) is the
 * first gate, not the only one.
 *
 * A login has three parts: session_login_check on the loop (the name, a
 * free slot), session_broker_login on the login's thread (login.c), and
 * session_adopt back on the loop. The broker half is one connection: the
 * session's, opened with the credentials and the login's stop fd in its
 * options (hg_client_opts_t.stop_fd), so its connect, its AUTH (which the
 * broker holds back up to 5 s when refused) and HELLO all end when the
 * console stops or the login's client leaves (login.c).
 *
 * A broker without users answers AUTH with "AUTH called without any users
 * configured": then no-users-role decides (none: refused; viewer; admin),
 * and the session gets a connection without credentials (a second one,
 * stopped the same way), which must then run a command (CLIENT ID) that a
 * broker with users refuses before AUTH. A broker with users whose HELLO
 * names no roles gives a read-only session.
 *
 * Roles change under a session: an admin demoted or removed (the users
 * file reloaded). The broker checks its own commands on the session's
 * connection (a removed user's broker pages answer 401), but the order
 * pages, the overview, the jobs and the session document never reach it,
 * so before an order action (the manual cancel) the console asks again
 * (HELLO on the session's connection), and before any other request of
 * the session once roles-recheck has passed since the last answer (api.c's
 * gate); a user the broker no longer accepts ends the session. A broker that cannot be reached (or has been silent:
 * the sampler says so) keeps the roles as they were, so the manual cancel,
 * the fallback for exactly that case, still works.
 *
 * A user holds at most SESSIONS_PER_USER sessions (a login past it ends that
 * user's least recently used one), so no user can fill the table and lock
 * the others out; expired sessions are ended, and their broker connections
 * closed, by session_sweep (a timer of main.c's) as well as when met.
 *
 * Tokens (the session cookie and the CSRF token) are 32 bytes of
 * getrandom(2) in hex, compared in constant time. Sessions end after
 * session-ttl without use, at logout, and at shutdown.
 *
 * Threads: the event loop's, but session_broker_login, which runs on a
 * login's thread and touches nothing of the loop's (the configuration keys
 * it reads are ones SIGHUP does not change: uri, tls-*, broker-timeout,
 * login-timeout, no-users-role).
 */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include "console/console.h"

#include <ctype.h>
#include <stdio.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>

#include "base/clock.h"
#include "base/err.h"
#include "base/json.h"
#include "common/log.h"

#define LOGIN_READ_TIMEOUT_MIN_MS 6000u /* above the broker's longest failure delay, 5 s */
/* The login's own waits (its AUTH) are bounded by login-timeout as a whole:
 * login.c's timer writes the login's stop fd then, whatever it waits on. The
 * library's read timeout for AUTH is this much later, so it is never what
 * ends a login first (its end would be an error without the bound's name,
 * and a reconnect retry after it, a second wait). */
#define LOGIN_STOP_MARGIN_MS 1000u
#define SESSIONS_PER_USER    8
/* The broker's reply to AUTH when it has no users (broker/cmd_conn.c). */
#define NO_USERS_REPLY "ERR AUTH called without any users configured"

static int random_token(char *out)
{
    unsigned char raw[CONSOLE_TOKEN_HEX / 2];
    size_t got = 0;
    while (got < sizeof raw) {
        ssize_t n = getrandom(raw + got, sizeof raw - got, 0);
        if (n <= 0)
            return -1;
        got += (size_t)n;
    }
    for (size_t i = 0; i < sizeof raw; i++)
        snprintf(out + 2 * i, 3, "%02x", raw[i]);
    return 0;
}

int session_token_equal(const char *a, const char *b)
{
    unsigned char diff = 0;
    if (strlen(a) != CONSOLE_TOKEN_HEX || strlen(b) != CONSOLE_TOKEN_HEX)
        return 0;
    for (size_t i = 0; i < CONSOLE_TOKEN_HEX; i++)
        diff |= (unsigned char)(a[i] ^ b[i]);
    return diff == 0;
}

static const struct {
    const char *name;
    unsigned bit;
} role_names[] = {
    { "producer", ROLE_PRODUCER }, { "consumer", ROLE_CONSUMER }, { "admin", ROLE_ADMIN }, { "viewer", ROLE_VIEWER }
};

void session_roles_text(unsigned roles, char *buf, size_t len)
{
    buf[0] = '\0';
    for (size_t i = 0; i < sizeof role_names / sizeof role_names[0]; i++)
        if (roles & role_names[i].bit)
            snprintf(buf + strlen(buf), len - strlen(buf), "%s%s", buf[0] ? "," : "", role_names[i].name);
}

static unsigned role_bit(const char *s, size_t n)
{
    for (size_t i = 0; i < sizeof role_names / sizeof role_names[0]; i++)
        if (strlen(role_names[i].name) == n && strncasecmp(role_names[i].name, s, n) == 0)
            return role_names[i].bit;
    return 0;
}

/* Roles named in s[0..n): words separated by commas or blanks. */
static unsigned roles_in_text(const char *s, size_t n)
{
    unsigned roles = 0;
    size_t i = 0;
    while (i < n) {
        while (i < n && (s[i] == ',' || isspace((unsigned char)s[i])))
            i++;
        size_t start = i;
        while (i < n && s[i] != ',' && !isspace((unsigned char)s[i]))
            i++;
        if (i > start)
            roles |= role_bit(s + start, i - start);
    }
    return roles;
}

unsigned session_roles_from_hello(const hg_reply_t *hello, int *found)
{
    *found = 0;
    if (hello == NULL)
        return 0;
    for (size_t i = 0; i + 1 < hg_reply_count(hello); i += 2) {
        size_t len;
        const char *k = hg_reply_str(hg_reply_element(hello, i), &len);
        if (k == NULL || len != 5 || strncasecmp(k, "roles", 5) != 0)
            continue;
        const hg_reply_t *v = hg_reply_element(hello, i + 1);
        unsigned roles = 0;
        const char *text = hg_reply_str(v, &len);
        *found = 1;
        if (text != NULL)
            return roles_in_text(text, len);
        for (size_t e = 0; e < hg_reply_count(v); e++)
            if ((text = hg_reply_str(hg_reply_element(v, e), &len)) != NULL)
                roles |= roles_in_text(text, len);
        return roles;
    }
    return 0;
}

void session_json(const session_t *s, buf_t *b)
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

static int expired(const console_t *c, const session_t *s, uint64_t now)
{
    return now - s->last_used_ms > (uint64_t)c->cfg->session_ttl_ms;
}

void session_sweep(console_t *c)
{
    uint64_t now = clock_mono_ms();
    for (size_t i = 0; i < CONSOLE_MAX_SESSIONS; i++) {
        session_t *s = &c->sessions[i];
        if (s->used && expired(c, s, now)) {
            log_info("session of %s expired", s->user);
            session_end(s);
        }
    }
}

/* A slot for a new session of user: a free one (expired ones are ended
 * first); past SESSIONS_PER_USER of user's, the least recently used of
 * them, ended — only with take (after the broker accepted the login: a
 * wrong password typed for alice must not end alice's sessions); without,
 * the slot is only looked for. NULL when every slot is taken by a live
 * session of another user. */
static session_t *free_slot(console_t *c, const char *user, int take)
{
    session_sweep(c);
    session_t *free_one = NULL, *oldest_own = NULL;
    size_t own = 0;
    for (size_t i = 0; i < CONSOLE_MAX_SESSIONS; i++) {
        session_t *s = &c->sessions[i];
        if (!s->used) {
            free_one = free_one != NULL ? free_one : s;
        } else if (strcmp(s->user, user) == 0) {
            own++;
            if (oldest_own == NULL || s->last_used_ms < oldest_own->last_used_ms)
                oldest_own = s;
        }
    }
    if (own >= SESSIONS_PER_USER || (free_one == NULL && oldest_own != NULL)) {
        if (!take)
            return oldest_own;
        log_info("session of %s ended: a new login of the same user (at most %d each)", oldest_own->user,
                 SESSIONS_PER_USER);
        session_end(oldest_own);
        return oldest_own;
    }
    return free_one;
}

/* Does the broker serve a connection without credentials (it has no
 * users)? CLIENT ID needs AUTH on a broker with users. */
static int serves_without_auth(hg_client_t *client)
{
    const char *argv[2] = { "CLIENT", "ID" };
    hg_reply_t *r = NULL;
    int ok = hg_client_command(client, 2, argv, NULL, &r) == HG_OK;
    hg_reply_free(r);
    return ok;
}

int session_login_check(console_t *c, const char *user, int *status, char *err, size_t errlen)
{
    if (user == NULL || user[0] == '\0' || strlen(user) >= CONSOLE_USER_MAX) {
        *status = 400;
        return err_set(err, errlen, "user: 1..%d bytes", CONSOLE_USER_MAX - 1);
    }
    if (free_slot(c, user, 0) == NULL) {
        *status = 429;
        return err_set(err, errlen, "too many sessions (%d): try again when one has ended", CONSOLE_MAX_SESSIONS);
    }
    return 0;
}

/* A failed broker login: *status, err from e's code and message (*status 0
 * for a stop: the caller knows why it stopped the login). */
static int broker_failure(hg_err_t code, const char *message, int *status, char *err, size_t errlen)
{
    *status = code == HG_ERR_CONNECT ? 503 : code == HG_ERR_ARG ? 400 : code == HG_ERR_STOPPED ? 0 : 502;
    if (code == HG_ERR_STOPPED)
        return err_set(err, errlen, "stopped (the console stops, or its client left)");
    return err_set(err, errlen, "%s", message);
}

/* Is message hg_client_open's refusal of user's AUTH with the broker's "no
 * users" reply? The library's words (lib/client_connect.c) with this very
 * user, so a user name that spells the reply is never taken for it. */
static int no_users_refusal(const char *message, const char *user)
{
    char want[HG_ERRMSG_MAX];
    int n = snprintf(want, sizeof want, "authentication as '%s' failed: %s", user, NO_USERS_REPLY);
    return n > 0 && (size_t)n < sizeof want && strncmp(message, want, (size_t)n) == 0;
}

/* A broker without users (it refused AUTH so): no-users-role decides, on a
 * connection without credentials (whose waits stop_fd ends too), whose
 * replies then wait up to read_ms. */
static int no_users_login(const console_config_t *cfg, hg_client_opts_t *opts, uint32_t read_ms, session_grant_t *g,
                          int *status, char *err, size_t errlen)
{
    hg_client_t *client = NULL;
    hg_error_t e;

    if (cfg->no_users_role == CONSOLE_NO_USERS_REFUSE) {
        *status = 401;
        return err_set(err, errlen, "the broker has no users, and no-users-role is none: no login");
    }
    opts->user = NULL;
    opts->password = NULL;
    hg_err_t code = hg_client_open(cfg->uri, opts, &client, &e);
    if (code != HG_OK)
        return broker_failure(code, e.message, status, err, errlen);
    hg_client_set_read_timeout(client, read_ms);
    if (!serves_without_auth(client)) { /* it has users after all */
        code = hg_client_errcode(client);
        hg_client_close(client);
        if (code == HG_ERR_STOPPED)
            return broker_failure(code, "", status, err, errlen);
        *status = 401;
        return err_set(err, errlen, "wrong user name or password");
    }
    hg_client_set_stop_fd(client, -1); /* the session's connection, the loop's from now on */
    g->client = client;
    g->no_users = 1;
    g->roles = cfg->no_users_role == CONSOLE_NO_USERS_ADMIN ? (ROLE_ADMIN | ROLE_VIEWER) : ROLE_VIEWER;
    return 0;
}

int session_broker_login(const console_config_t *cfg, const char *user, const char *password, int stop_fd,
                         session_grant_t *g, int *status, char *err, size_t errlen)
{
    hg_client_opts_t opts;
    hg_client_t *client = NULL;
    hg_error_t e;
    hg_reply_t *r = NULL;

    memset(g, 0, sizeof *g);
    console_client_opts(cfg, &opts);
    /* The broker holds a refused AUTH back before answering it (up to 5 s
     * per address, docs/security.md), and every login comes from the
     * console's address: the session's connection waits past that, so a
     * refusal after a reconnect reads as one. */
    uint32_t session_read_ms = opts.read_timeout_ms;
    if (session_read_ms < LOGIN_READ_TIMEOUT_MIN_MS)
        session_read_ms = LOGIN_READ_TIMEOUT_MIN_MS;
    /* The login's AUTH is the open's own, on the session's connection; its
     * wait is login-timeout's: stop_fd, written when that has passed
     * (login.c), ends its every wait — the connect, the TLS handshake, AUTH,
     * HELLO, a reconnect's pause — so the library's own read timeout is set
     * past it (LOGIN_STOP_MARGIN_MS). */
    uint64_t auth_read_ms = (uint64_t)cfg->login_timeout_ms + LOGIN_STOP_MARGIN_MS;
    opts.read_timeout_ms = auth_read_ms > UINT32_MAX ? UINT32_MAX : (uint32_t)auth_read_ms;
    opts.has_stop_fd = 1;
    opts.stop_fd = stop_fd;
    opts.user = user;
    opts.password = password != NULL ? password : "";
    hg_err_t code = hg_client_open(cfg->uri, &opts, &client, &e);
    if (code == HG_ERR_AUTH && no_users_refusal(e.message, user))
        return no_users_login(cfg, &opts, session_read_ms, g, status, err, errlen);
    if (code == HG_ERR_AUTH) {
        /* One answer for an unknown user, a wrong password and a disabled
         * user (the broker's own reply does not tell them apart either). */
        *status = 401;
        return err_set(err, errlen, "wrong user name or password");
    }
    if (code != HG_OK)
        return broker_failure(code, e.message, status, err, errlen);
    hg_client_set_read_timeout(client, session_read_ms);
    const char *hello[2] = { "HELLO", "2" };
    int found = 0;
    code = hg_client_command(client, 2, hello, NULL, &r);
    if (code == HG_OK)
        g->roles = session_roles_from_hello(r, &found);
    hg_reply_free(r);
    if (code == HG_ERR_STOPPED) {
        hg_client_close(client);
        return broker_failure(code, "", status, err, errlen);
    }
    if (!found)
        g->roles = ROLE_VIEWER;        /* the broker did not say: look, never act */
    hg_client_set_stop_fd(client, -1); /* the session's connection, the loop's from now on */
    g->client = client;
    return 0;
}

session_t *session_adopt(console_t *c, const char *user, session_grant_t *g, int *status, char *err, size_t errlen)
{
    session_t *s = free_slot(c, user, 1);
    if (s == NULL) { /* the table filled while the broker was asked */
        *status = 429;
        err_set(err, errlen, "too many sessions (%d): try again when one has ended", CONSOLE_MAX_SESSIONS);
        return NULL;
    }
    memset(s, 0, sizeof *s);
    if (random_token(s->token) != 0 || random_token(s->csrf) != 0) {
        memset(s, 0, sizeof *s);
        *status = 500;
        err_set(err, errlen, "no random bytes for a session token");
        return NULL;
    }
    s->used = 1;
    snprintf(s->user, sizeof s->user, "%s", user);
    s->roles = g->roles;
    s->no_users = g->no_users;
    s->client = g->client;
    g->client = NULL;
    s->created_ms = clock_wall_ms();
    s->last_used_ms = s->roles_checked_ms = clock_mono_ms();
    return s;
}

int session_recheck_roles(console_t *c, session_t *s, int action)
{
    uint64_t now = clock_mono_ms(), silent_ms = 0;
    if (!action && now - s->roles_checked_ms < (uint64_t)c->cfg->roles_recheck_ms)
        return 0;
    if (sampler_silent(c->sampler, SAMPLER_BROKER, &silent_ms))
        return 0; /* not asked: the broker has not answered (the roles stay as they were) */
    const char *hello[2] = { "HELLO", "2" };
    const char *client_id[2] = { "CLIENT", "ID" };
    hg_reply_t *r = NULL;
    hg_err_t e = hg_client_command(s->client, 2, s->no_users ? client_id : hello, NULL, &r);
    int rc = 0;
    if (e == HG_OK) {
        s->roles_checked_ms = now;
        int found = 0;
        unsigned roles = s->no_users ? s->roles : session_roles_from_hello(r, &found);
        if (!s->no_users && !found)
            roles = ROLE_VIEWER;
        if (roles != s->roles) {
            char was[64], is[64];
            session_roles_text(s->roles, was, sizeof was);
            session_roles_text(roles, is, sizeof is);
            log_info("session of %s: roles %s now (were %s)", s->user, is[0] ? is : "none", was);
            s->roles = roles;
        }
    } else if (e == HG_ERR_AUTH || (e == HG_ERR_SERVER && strncmp(hg_client_errmsg(s->client), "NOAUTH", 6) == 0)) {
        log_info("session of %s ended: the broker no longer accepts the user (%s)", s->user,
                 hg_client_errmsg(s->client));
        rc = -1;
    }
    hg_reply_free(r);
    return rc;
}

session_t *session_find(console_t *c, const char *cookie_header)
{
    char token[CONSOLE_TOKEN_HEX + 1];

    for (const char *p = http_cookie_find(c, cookie_header, NULL); p != NULL;
         p = http_cookie_find(c, cookie_header, p)) {
        size_t n = strcspn(p, "; ");
        if (n != CONSOLE_TOKEN_HEX)
            continue; /* another cookie of that name (a stale one, another path's) may follow */
        memcpy(token, p, n);
        token[n] = '\0';
        uint64_t now = clock_mono_ms();
        for (size_t i = 0; i < CONSOLE_MAX_SESSIONS; i++) {
            session_t *s = &c->sessions[i];
            if (s->used && session_token_equal(s->token, token)) {
                if (expired(c, s, now)) {
                    log_info("session of %s expired", s->user);
                    session_end(s);
                    return NULL;
                }
                s->last_used_ms = now;
                return s;
            }
        }
    }
    return NULL;
}

void session_end(session_t *s)
{
    if (!s->used)
        return;
    hg_client_close(s->client);
    memset(s, 0, sizeof *s);
}

void session_end_all(console_t *c)
{
    for (size_t i = 0; i < CONSOLE_MAX_SESSIONS; i++)
        session_end(&c->sessions[i]);
}
