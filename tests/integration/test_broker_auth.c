/*
 * tests/integration/test_broker_auth.c — users, roles, AUTH and protected
 * mode against the real broker (docs/security.md, docs/protocol.md).
 *
 *  - before AUTH only PING, AUTH, HELLO and QUIT run; everything else is
 *    NOAUTH (CONFIG GET and CLIENT LIST included);
 *  - the roles column, for every command and subcommand of COMMAND (a new
 *    one without a case fails the test): a producer cannot PULL or touch the DLQ, a consumer
 *    cannot SEND or drop the DLQ, a viewer changes nothing, the admin can do
 *    everything; NOPERM names the user, its roles and the command, and a
 *    refused destructive or admin command is audited with who tried it; COMMAND
 *    INFO shows "admin" exactly for what only the admin may run (a
 *    subcommand in its own entry, "group|list") and "readonly" for what a
 *    viewer may run;
 *  - a wrong password or an unknown user: WRONGPASS, held back (per address),
 *    a warning naming the address and the user, while another client is
 *    answered at once; the connection stays usable; AUTH pipelined with
 *    commands applies before them;
 *  - many connections from one address guess no faster than one: wrong AUTHs
 *    sent on four connections at once are verified one per held-back delay
 *    (the fourth answered after 200+400+800+1600 ms), while a wrong AUTH
 *    from another loopback address (127.0.0.2) is answered after its own
 *    200 ms;
 *  - HELLO 3 AUTH user pass answers the map with user and roles; AUTH pass is
 *    AUTH default pass; ACL WHOAMI;
 *  - SIGHUP re-reads the users file: a removed user is logged out, new roles
 *    apply at once, a bad file keeps the old users;
 *  - AUTH and HELLO AUTH with the wrong arity are refused at once, not
 *    checked, and their arguments stay out of the log;
 *  - AUTH and HELLO AUTH inside MULTI are refused and doom the transaction;
 *  - a consumer removed by SIGHUP while its PULL BLOCK 0 waits: its
 *    connection is closed, the next message goes to another consumer;
 *  - a password changed by SIGHUP: the old one is refused (the cache knew
 *    it), connections logged in with it stay until CLIENT KILL USER;
 *  - hourglass-cli passwd refuses a password with a NUL byte (its hash
 *    would have covered only the bytes before it), and one longer than
 *    1 KiB (1 KiB is taken);
 *  - a failed AUTH's warning names the user only when it is one ("unknown
 *    user (N bytes)" else: AUTH password user keeps the password out of the
 *    log), and no control byte from the client reaches the log;
 *  - a password longer than 1 KiB in AUTH or HELLO AUTH is refused with its
 *    own error, unhashed, and counted as a failed AUTH;
 *  - INFO shows file-system paths (dir, backup_last_error) to the admin
 *    only: a viewer and a consumer read "(admin only)";
 *  - so do error replies: a producer whose SEND fails on a failed fsync
 *    (the failsync shim) reads "(path hidden: admin only)" where the path
 *    was, the log has the whole text, the admin's error has the path; the
 *    same for "store unavailable" when the store cannot reopen (LevelDB's
 *    text);
 *  - auth-timeout: a client that never logs in (or that a reload logged
 *    out) is told and closed, never before auth-timeout from its connect
 *    (the logout) and not long after; a logged-in one stays;
 *  - a users file its group or others can read or write is warned about
 *    (naming it and its mode) at start and on SIGHUP, and no longer once it
 *    is 0600;
 *  - CLIENT KILL (admin): by USER (every connection of it), ID with ADDR,
 *    the old ip:port form, SKIPME; refusals name the filter; each kill and
 *    the audit line logged;
 *  - protected mode: bound to 0.0.0.0 without users, a client reaching the
 *    broker through this machine's non-loopback address is told DENIED and
 *    closed (loopback works); allow-remote yes lets it in with a warning in
 *    the log and in INFO.
 *
 * The hashes are made with low costs (scrypt ln=10) to keep the suite quick;
 * the cost comes from the hash text, so the broker's code path is the same.
 *
 * Run one suite: ./tests/integration/test_broker_auth auth
 */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <CUnit/CUnit.h>

#include "common/passwd.h"
#include "tests/helpers/broker_test.h"
#include "tests/helpers/testutil.h"
#include "tests/helpers/users_file.h"

static char users_dir[512], users_path[600];

/* A user name of USERS_NAME_MAX (64) bytes, the longest a users file takes. */
#define LONG_USER "long-name-of-sixty-four-bytes-xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx"

/* The test's users: the four roles, "default", and a user whose name is the
 * longest allowed. */
static const tu_user_t test_users[] = {
    { "shop", "producer", "pw-shop" },     { "canceller", "consumer", "pw-canceller" },
    { "ops", "admin", "pw-ops" },          { "grafana", "viewer", "pw-grafana" },
    { "default", "viewer", "pw-default" }, { LONG_USER, "viewer", "pw-long" },
};
#define TEST_USERS (sizeof test_users / sizeof test_users[0])

/* Write the users file (tu_write_users_file): test_users without the user
 * named without (NULL: all of them), and with replace (NULL: none) in place
 * of the user of its name. */
static void write_users_but(const char *without, const tu_user_t *replace)
{
    tu_user_t users[TEST_USERS];
    size_t n = 0;
    char err[512];
    for (size_t i = 0; i < TEST_USERS; i++) {
        if (without != NULL && strcmp(test_users[i].name, without) == 0)
            continue;
        users[n++] = replace != NULL && strcmp(test_users[i].name, replace->name) == 0 ? *replace : test_users[i];
    }
    TU_REQUIRE(tu_write_users_file(users_path, users, n, err, sizeof err) == 0, "%s", err);
}

/* Write the users file: every test user, or all but grafana (the viewer). */
static void write_users(int with_viewer)
{
    write_users_but(with_viewer ? NULL : "grafana", NULL);
}

/* The users file's directory removed, if there is one: each test's teardown
 * too, so that a test that fails half-way leaves nothing behind. */
static void cleanup_users(void)
{
    if (users_dir[0])
        tu_rmtree(users_dir);
    users_dir[0] = '\0';
}

/* Start the broker with the users file, and flag value when flag is not NULL. */
static void start_with_users_and(const char *flag, const char *value)
{
    cleanup_users(); /* a test that started the broker twice: the first users file's directory too */
    TU_REQUIRE(tu_mkdtemp("hg-users", users_dir, sizeof users_dir) == 0, "temp dir");
    snprintf(users_path, sizeof users_path, "%s/users", users_dir);
    write_users(1);
    const char *extra[] = { "--users-file", users_path, flag, value, NULL };
    bt_start(extra);
}

static void start_with_users(void)
{
    start_with_users_and(NULL, NULL);
}

/* A new connection, logged in as user (NULL: not logged in). */
static void connect_as(rc_conn_t *c, const char *user, const char *pw)
{
    char e[1024];
    BP_REQUIRE(bp_connect(&bt_broker, c, e, sizeof e) == 0, "connect: %s", e);
    if (user == NULL)
        return;
    resp_reply_t *r = rc_cmd(c, "AUTH", user, pw, NULL);
    BP_REQUIRE(r != NULL && rc_str_eq(r, "OK"), "AUTH %s: %s", user, r ? rc_describe(r, e, sizeof e) : c->err);
    resp_reply_free(r);
}

/* Run argv on c; expect an error starting with want_err, or (want_err NULL) a reply that is not a
 * NOPERM / NOAUTH / WRONGPASS error (a command may still fail for its own reasons, e.g. a group that
 * exists already: the permission check let it through). */
static void expect(rc_conn_t *c, const char *who, const char *want_err, const char *const *argv)
{
    char e[1024], cmd[256] = "";
    int argc = 0;
    while (argv[argc] != NULL) {
        strncat(cmd, argv[argc], sizeof cmd - strlen(cmd) - 2);
        strcat(cmd, " ");
        argc++;
    }
    resp_reply_t *r = rc_cmdv(c, argc, argv, NULL);
    BP_REQUIRE(r != NULL, "%s: %s: no reply: %s", who, cmd, c->err);
    if (want_err == NULL)
        BP_CHECK(!rc_is_error(r, "NOPERM") && !rc_is_error(r, "NOAUTH") && !rc_is_error(r, "WRONGPASS"),
                 "%s: %s: %s, want it allowed", who, cmd, rc_describe(r, e, sizeof e));
    else
        BP_CHECK(rc_is_error(r, want_err), "%s: %s: %s, want an error starting '%s'", who, cmd,
                 rc_describe(r, e, sizeof e), want_err);
    resp_reply_free(r);
}

#define EXPECT(c, who, want, ...)                    \
    do {                                             \
        const char *argv_[] = { __VA_ARGS__, NULL }; \
        expect(c, who, want, argv_);                 \
    } while (0)

static void test_unauthenticated(void)
{
    start_with_users();
    rc_conn_t c;
    connect_as(&c, NULL, NULL);
    EXPECT(&c, "anonymous", NULL, "PING");
    EXPECT(&c, "anonymous", "NOAUTH", "SEND", "t", "p");
    EXPECT(&c, "anonymous", "NOAUTH", "PULL", "g", "t");
    EXPECT(&c, "anonymous", "NOAUTH", "GROUP", "LIST");
    EXPECT(&c, "anonymous", "NOAUTH", "DLQ", "LEN", "g");
    EXPECT(&c, "anonymous", "NOAUTH", "INFO");
    EXPECT(&c, "anonymous", "NOAUTH", "LEVELS");
    EXPECT(&c, "anonymous", "NOAUTH", "CONFIG", "GET", "*");
    EXPECT(&c, "anonymous", "NOAUTH", "CLIENT", "LIST");
    EXPECT(&c, "anonymous", "NOAUTH", "COMMAND");
    EXPECT(&c, "anonymous", "NOAUTH", "SHUTDOWN");
    EXPECT(&c, "anonymous", "NOAUTH", "HELLO", "3");
    EXPECT(&c, "anonymous", "NOAUTH", "ACL", "WHOAMI");
    EXPECT(&c, "anonymous", NULL, "QUIT");
    BP_CHECK(rc_wait_closed(&c, 10000) == 1, "QUIT did not close");
    rc_close(&c);
    BP_CHECK(bp_alive(&bt_broker), "the broker died");
    cleanup_users();
}

typedef struct role_case {
    const char *argv[6];
    /* prod, cons, view: */
    const char *prod, *cons, *view; /* NULL: allowed; "NOPERM": refused (admin is always allowed) */
} role_case_t;

/* 1 when the COMMAND entry (an array: name, arity, flags, ...) has flag among its flags. */
static int entry_has_flag(const resp_reply_t *entry, const char *flag)
{
    if (entry == NULL || entry->count < 3)
        return 0;
    const resp_reply_t *flags = &entry->elements[2];
    for (size_t i = 0; i < flags->count; i++)
        if (flags->elements[i].str != NULL && strcmp(flags->elements[i].str, flag) == 0)
            return 1;
    return 0;
}

/* COMMAND INFO's entry for what argv runs: the command's, or for a command with subcommands (Redis 7: element 10
 * holds their entries, "group|list") the subcommand's. NULL when there is none; *r is the reply to free. */
static const resp_reply_t *entry_for(rc_conn_t *c, const char *const *argv, resp_reply_t **r)
{
    *r = rc_cmd(c, "COMMAND", "INFO", argv[0], NULL);
    if (*r == NULL || (*r)->type != RESP_REPLY_ARRAY || (*r)->count != 1 || (*r)->elements[0].type != RESP_REPLY_ARRAY)
        return NULL;
    const resp_reply_t *entry = &(*r)->elements[0];
    if (entry->count < 10 || entry->elements[9].count == 0 || argv[1] == NULL)
        return entry;
    char want[64];
    snprintf(want, sizeof want, "%s|%s", argv[0], argv[1]);
    for (char *p = want; *p; p++)
        if (*p >= 'A' && *p <= 'Z')
            *p = (char)(*p + 32);
    const resp_reply_t *subs = &entry->elements[9];
    for (size_t i = 0; i < subs->count; i++)
        if (subs->elements[i].count >= 3 && subs->elements[i].elements[0].str != NULL &&
            strcmp(subs->elements[i].elements[0].str, want) == 0)
            return &subs->elements[i];
    return NULL;
}

static void test_roles(void)
{
    start_with_users();
    rc_conn_t prod, cons, view, adm;
    connect_as(&prod, "shop", "pw-shop");
    connect_as(&cons, "canceller", "pw-canceller");
    connect_as(&view, "grafana", "pw-grafana");
    connect_as(&adm, "ops", "pw-ops");
    EXPECT(&adm, "admin", NULL, "GROUP", "CREATE", "g", "t");
    EXPECT(&adm, "admin", NULL, "GROUP", "CREATE", "gone", "t");
    const char *P = "NOPERM";
    const role_case_t cases[] = {
        { { "SEND", "t", "p" }, NULL, P, P },
        { { "PULL", "g", "t" }, P, NULL, P },
        { { "ACK", "g", "0000000000000001" }, P, NULL, P },
        { { "NACK", "g", "0000000000000001" }, P, NULL, P },
        { { "TOUCH", "g", "0000000000000001" }, P, NULL, P },
        { { "GROUP", "CREATE", "g2", "t" }, P, NULL, P },
        { { "GROUP", "LIST" }, P, NULL, NULL },
        { { "DLQ", "LEN", "g" }, P, NULL, NULL },
        { { "DLQ", "LIST", "g" }, P, NULL, NULL },
        { { "DLQ", "REQUEUE", "g", "ALL" }, P, P, P },
        { { "DLQ", "DROP", "g", "ALL" }, P, P, P },
        { { "INFO" }, NULL, NULL, NULL }, /* a producer: its server section only (test_info_producer) */
        { { "INFO", "groups" }, P, NULL, NULL },
        { { "TOPICS" }, P, NULL, NULL },
        { { "LEVELS" }, NULL, NULL, NULL },
        { { "CONFIG", "GET", "port" }, P, P, P },
        { { "CLIENT", "LIST" }, P, P, P },
        { { "CLIENT", "ID" }, NULL, NULL, NULL },
        { { "CLIENT", "KILL", "ID", "999999" }, P, P, P },
        { { "COMMAND", "COUNT" }, NULL, NULL, NULL },
        { { "SHUTDOWN" }, P, P, P },
        { { "GROUP", "DEL", "gone" }, P, P, P },
        { { "GROUP", "DELETE", "nosuch" }, P, P, P },
        { { "GROUP", "DESTROY", "nosuch" }, P, P, P },
        { { "TOPIC", "DEL", "nosuch" }, P, P, P },
        { { "TOPIC", "DELETE", "nosuch" }, P, P, P },
        { { "TOPIC", "DESTROY", "nosuch" }, P, P, P },
        { { "REVOKE", "t", "KEY", "k" }, NULL, P, P },
        { { "GET", "0000000000000001" }, P, NULL, NULL },
        { { "FIND", "t", "k" }, P, NULL, NULL },
        { { "PEEK", "TOPIC", "t" }, P, NULL, NULL },
        { { "BACKUP", "b1" }, P, P, P }, /* the admin is refused for want of backup-dir, not NOPERM */
        { { "MULTI" }, NULL, P, P },     /* DISCARDed after each (below) */
        { { "EXEC" }, NULL, P, P },      /* allowed: "EXEC without MULTI" */
        { { "DISCARD" }, NULL, NULL, NULL },
        { { "PING" }, NULL, NULL, NULL },
        { { "ECHO", "x" }, NULL, NULL, NULL },
        { { "HELLO", "2" }, NULL, NULL, NULL },
        { { "SELECT", "0" }, NULL, NULL, NULL },
        { { "ACL", "WHOAMI" }, NULL, NULL, NULL },
        { { "COMMAND" }, NULL, NULL, NULL },
        { { "COMMAND", "DOCS", "send" }, NULL, NULL, NULL },
        { { "CLIENT", "SETNAME", "n" }, NULL, NULL, NULL },
        { { "CLIENT", "GETNAME" }, NULL, NULL, NULL },
        { { "CLIENT", "INFO" }, NULL, NULL, NULL },
        { { "CLIENT", "SETINFO", "lib-name", "x" }, NULL, NULL, NULL },
        { { "CLIENT", "NO-EVICT", "on" }, NULL, NULL, NULL },
        { { "CLIENT", "NO-TOUCH", "on" }, NULL, NULL, NULL },
    };
    /* Every command and subcommand of the table has a case (a new one must say who may run it), but AUTH and
     * QUIT: run before AUTH by anyone (test_unauthenticated, test_hello_auth). */
    char d[512];
    resp_reply_t *all = rc_cmd(&view, "COMMAND", NULL);
    BP_REQUIRE(all != NULL && all->type == RESP_REPLY_ARRAY && all->count > 10, "COMMAND: %s",
               rc_describe(all, d, sizeof d));
    for (size_t i = 0; i < all->count; i++) {
        const resp_reply_t *en = &all->elements[i];
        const char *name = en->elements[0].str;
        size_t nsubs = en->count >= 10 ? en->elements[9].count : 0;
        for (size_t k = 0; k < (nsubs ? nsubs : 1); k++) {
            const char *sub = nsubs ? strchr(en->elements[9].elements[k].elements[0].str, '|') + 1 : NULL;
            int covered = strcmp(name, "auth") == 0 || strcmp(name, "quit") == 0;
            for (size_t j = 0; j < sizeof cases / sizeof cases[0] && !covered; j++)
                covered = strcasecmp(cases[j].argv[0], name) == 0 &&
                          (sub == NULL || (cases[j].argv[1] != NULL && strcasecmp(cases[j].argv[1], sub) == 0));
            BP_CHECK(covered, "%s%s%s has no case in test_roles: say which roles may run it", name, sub ? "|" : "",
                     sub ? sub : "");
        }
    }
    resp_reply_free(all);
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        expect(&prod, "producer", cases[i].prod, cases[i].argv);
        expect(&cons, "consumer", cases[i].cons, cases[i].argv);
        expect(&view, "viewer", cases[i].view, cases[i].argv);
        if (strcmp(cases[i].argv[0], "SHUTDOWN") != 0)
            expect(&adm, "admin", NULL, cases[i].argv);
        if (strcmp(cases[i].argv[0], "MULTI") == 0) {
            rc_conn_t *in_multi[] = { &prod, &adm };
            for (size_t k = 0; k < 2; k++)
                expect(in_multi[k], "after MULTI", NULL, (const char *const[]){ "DISCARD", NULL });
        }
        /* COMMAND INFO tells the truth: "admin" exactly when only the admin may run it (for a subcommand, its
         * own entry), and what a viewer may run is "readonly". */
        resp_reply_t *info;
        const resp_reply_t *entry = entry_for(&adm, cases[i].argv, &info);
        int admin_only = cases[i].prod != NULL && cases[i].cons != NULL && cases[i].view != NULL;
        BP_CHECK(entry != NULL && entry_has_flag(entry, "admin") == admin_only,
                 "COMMAND INFO for %s %s: %s the admin flag (%s)", cases[i].argv[0],
                 cases[i].argv[1] ? cases[i].argv[1] : "", admin_only ? "without" : "with",
                 entry ? rc_describe(entry, d, sizeof d) : rc_describe(info, d, sizeof d));
        BP_CHECK(entry == NULL || cases[i].view != NULL || entry_has_flag(entry, "readonly"),
                 "COMMAND INFO for %s %s, which a viewer runs: not readonly (%s)", cases[i].argv[0],
                 cases[i].argv[1] ? cases[i].argv[1] : "", entry ? rc_describe(entry, d, sizeof d) : "");
        resp_reply_free(info);
    }
    /* A subcommand not in the table runs with its command's roles: CLIENT's (anyone: then the handler's error),
     * DLQ's (admin). */
    EXPECT(&view, "viewer", NULL, "CLIENT", "PAUSE", "10");
    EXPECT(&cons, "consumer", "NOPERM", "DLQ", "PURGE", "g");
    EXPECT(&view, "viewer", "NOPERM", "DLQ", "PURGE", "g");
    /* A command with subcommands of different roles shows none of their flags itself (Redis 7's container
     * commands); COMMAND INFO group|list answers the subcommand's entry. */
    static const char *const group_only[] = { "GROUP", NULL };
    resp_reply_t *info;
    const resp_reply_t *entry = entry_for(&adm, group_only, &info);
    BP_CHECK(entry != NULL && !entry_has_flag(entry, "admin") && !entry_has_flag(entry, "readonly") &&
                 !entry_has_flag(entry, "write"),
             "COMMAND INFO group: %s", rc_describe(info, d, sizeof d));
    resp_reply_free(info);
    info = rc_cmd(&view, "COMMAND", "INFO", "group|list", "group|del", "group|nosuch", NULL);
    BP_CHECK(info != NULL && info->type == RESP_REPLY_ARRAY && info->count == 3 && info->elements[0].count >= 3 &&
                 rc_str_eq(&info->elements[0].elements[0], "group|list") &&
                 entry_has_flag(&info->elements[0], "readonly") && !entry_has_flag(&info->elements[0], "admin") &&
                 entry_has_flag(&info->elements[1], "admin") && entry_has_flag(&info->elements[1], "write") &&
                 info->elements[2].type == RESP_REPLY_NIL,
             "COMMAND INFO group|list group|del group|nosuch: %s", rc_describe(info, d, sizeof d));
    resp_reply_free(info);
    /* NOPERM names the user, its roles and the command (with the subcommand). */
    char e[512];
    resp_reply_t *r = rc_cmd(&cons, "DLQ", "DROP", "g", "ALL", NULL);
    BP_CHECK(rc_is_error(r, "NOPERM User canceller (roles: consumer) has no permissions to run the 'dlq|drop' command"),
             "NOPERM wording: %s", rc_describe(r, e, sizeof e));
    resp_reply_free(r);
    /* A refused destructive command is audited with who tried it. */
    BP_CHECK(tu_wait_file_contains(bt_broker.log_path,
                                   "user=canceller DLQ DROP g ALL: NOPERM User canceller (roles: consumer)",
                                   10000) == 0,
             "no audit line for the consumer's refused DLQ DROP");
    BP_CHECK(tu_wait_file_contains(bt_broker.log_path, "user=grafana SHUTDOWN: NOPERM", 10000) == 0,
             "no audit line for the viewer's refused SHUTDOWN");
    r = rc_cmd(&prod, "PULL", "g", "t", NULL);
    BP_CHECK(rc_is_error(r, "NOPERM User shop (roles: producer) has no permissions to run the 'pull' command"),
             "NOPERM wording: %s", rc_describe(r, e, sizeof e));
    resp_reply_free(r);
    /* The viewer changed nothing: the group it tried to create does not exist. */
    r = rc_cmd(&adm, "GROUP", "LIST", NULL);
    BP_REQUIRE(r != NULL && r->type == RESP_REPLY_ARRAY, "GROUP LIST: %s", rc_describe(r, e, sizeof e));
    BP_CHECK(r->count == 2, "GROUP LIST has %zu groups, want 2 (g, g2: the admin's; gone deleted)", r->count);
    resp_reply_free(r);
    /* ACL WHOAMI */
    r = rc_cmd(&view, "ACL", "WHOAMI", NULL);
    BP_CHECK(r != NULL && rc_str_eq(r, "grafana"), "ACL WHOAMI: %s", rc_describe(r, e, sizeof e));
    resp_reply_free(r);
    /* The admin may shut it down. */
    rc_appendl(&adm, "SHUTDOWN", NULL);
    BP_CHECK(rc_flush(&adm, 10000) == 0, "SHUTDOWN write");
    BP_CHECK(bp_wait_exit(&bt_broker, 30000, e, sizeof e) == 0, "admin SHUTDOWN: %s", e);
    rc_close(&prod);
    rc_close(&cons);
    rc_close(&view);
    rc_close(&adm);
    cleanup_users();
}

typedef struct ping_during {
    rc_conn_t *other;
    int answered;
} ping_during_t;

static void test_wrong_password(void)
{
    start_with_users();
    rc_conn_t bad, other;
    char e[1024], id[32];
    connect_as(&bad, NULL, NULL);
    connect_as(&other, "shop", "pw-shop");

    /* A wrong password: WRONGPASS, held back; another client is answered meanwhile. */
    uint64_t t0 = tu_now_mono_ms();
    rc_appendl(&bad, "AUTH", "ops", "guess", NULL);
    BP_REQUIRE(rc_flush(&bad, 10000) == 0, "write AUTH");
    BP_REQUIRE(bp_send(&other, id, sizeof id, e, sizeof e, "t", "meanwhile", NULL) == 0, "other SEND: %s", e);
    uint64_t other_ms = tu_now_mono_ms() - t0;
    resp_reply_t *r = rc_read(&bad, 10000);
    uint64_t bad_ms = tu_now_mono_ms() - t0;
    BP_CHECK(rc_is_error(r, "WRONGPASS invalid username-password pair or user is disabled"), "AUTH ops guess: %s",
             rc_describe(r, e, sizeof e));
    resp_reply_free(r);
    BP_CHECK(bad_ms >= 180, "a wrong password was answered after %llu ms, want it held back >= 200 ms",
             (unsigned long long)bad_ms);
    printf("\n    wrong password answered after %llu ms; another client's SEND meanwhile took %llu ms",
           (unsigned long long)bad_ms, (unsigned long long)other_ms);
    BP_CHECK(other_ms < bad_ms, "the other client waited for the failed AUTH (%llu ms >= %llu ms)",
             (unsigned long long)other_ms, (unsigned long long)bad_ms);
    BP_CHECK(tu_wait_file_contains(bt_broker.log_path, "AUTH failed from 127.0.0.1:", 10000) == 0,
             "no warning naming the address");
    BP_CHECK(bp_log_contains(&bt_broker, "for user 'ops' (wrong password)"), "the warning does not name the user");

    /* An unknown user: the same reply; the log says why. The second failure waits longer. */
    t0 = tu_now_mono_ms();
    r = rc_cmd(&bad, "AUTH", "mallory", "x", NULL);
    bad_ms = tu_now_mono_ms() - t0;
    BP_CHECK(rc_is_error(r, "WRONGPASS"), "AUTH mallory: %s", rc_describe(r, e, sizeof e));
    resp_reply_free(r);
    BP_CHECK(bad_ms >= 380, "the second failure from this address waited %llu ms, want >= 400 ms",
             (unsigned long long)bad_ms);
    BP_CHECK(tu_wait_file_contains(bt_broker.log_path, "for unknown user (7 bytes) (no such user)", 10000) == 0,
             "no warning for the unknown user");

    /* Still not logged in, and the connection still works. */
    EXPECT(&bad, "after WRONGPASS", "NOAUTH", "SEND", "t", "p");
    /* AUTH pipelined with a command: the command runs as the new user. */
    rc_appendl(&bad, "AUTH", "shop", "pw-shop", NULL);
    rc_appendl(&bad, "SEND", "t", "pipelined", NULL);
    BP_REQUIRE(rc_flush(&bad, 10000) == 0, "write the pipeline");
    r = rc_read(&bad, 10000);
    BP_CHECK(r != NULL && rc_str_eq(r, "OK"), "pipelined AUTH: %s", rc_describe(r, e, sizeof e));
    resp_reply_free(r);
    r = rc_read(&bad, 10000);
    BP_CHECK(r != NULL && r->type == RESP_REPLY_BULK && r->len == 16, "SEND after a pipelined AUTH: %s",
             rc_describe(r, e, sizeof e));
    resp_reply_free(r);
    /* A failed AUTH keeps the user logged in as before. */
    r = rc_cmd(&bad, "AUTH", "ops", "wrong-again", NULL);
    BP_CHECK(rc_is_error(r, "WRONGPASS"), "AUTH ops wrong-again: %s", rc_describe(r, e, sizeof e));
    resp_reply_free(r);
    r = rc_cmd(&bad, "ACL", "WHOAMI", NULL);
    BP_CHECK(r != NULL && rc_str_eq(r, "shop"), "WHOAMI after a failed AUTH: %s", rc_describe(r, e, sizeof e));
    resp_reply_free(r);
    char v[64];
    rc_conn_t adm;
    connect_as(&adm, "ops", "pw-ops");
    BP_CHECK(bp_info_field(&adm, "auth_failures", v, sizeof v, e, sizeof e) == 0 && atoi(v) >= 3,
             "INFO auth_failures %s, want >= 3", v);
    rc_close(&adm);
    rc_close(&bad);
    rc_close(&other);
    cleanup_users();
}

/* A connection from source address src (127.0.0.x) to the broker, or -1. */
static int connect_from(const char *src)
{
    tu_dial_opts_t from = { .source = src };
    return tu_tcp_connect_with(bt_broker.port, &from);
}

/* Read one reply line from fd into line (at most 10 s). 0, or -1. */
static int read_line(int fd, char *line, size_t len)
{
    size_t n = 0;
    uint64_t deadline = tu_now_mono_ms() + 10000;
    while (n + 1 < len && tu_now_mono_ms() < deadline) {
        struct pollfd p = { .fd = fd, .events = POLLIN };
        if (poll(&p, 1, 100) <= 0)
            continue;
        if (read(fd, line + n, 1) != 1)
            return -1;
        if (line[n++] == '\n') {
            line[n] = '\0';
            return 0;
        }
    }
    return -1;
}

#define GUESSERS 4

/* Many connections from one address: each wrong AUTH waits for the previous
 * failure's release before it is even verified, so 4 connections guess no
 * faster than one (200 + 400 + 800 + 1600 ms for the fourth reply). Holding
 * back only the replies let them all be verified at once: the fourth came
 * after 1.6 s, and N connections guessed N passwords per delay. */
static void test_many_connections(void)
{
    start_with_users();
    int fds[GUESSERS];
    for (int i = 0; i < GUESSERS; i++) {
        fds[i] = connect_from("127.0.0.1");
        BP_REQUIRE(fds[i] >= 0, "connect %d", i);
    }
    int other = connect_from("127.0.0.2");
    BP_REQUIRE(other >= 0, "connect from 127.0.0.2");
    static const char guess[] = "AUTH ops guess\r\n";
    uint64_t t0 = tu_now_mono_ms();
    for (int i = 0; i < GUESSERS; i++)
        BP_REQUIRE(write(fds[i], guess, sizeof guess - 1) == (ssize_t)(sizeof guess - 1), "write %d", i);
    /* Another address is not held up by these. */
    uint64_t t1 = tu_now_mono_ms();
    BP_REQUIRE(write(other, guess, sizeof guess - 1) == (ssize_t)(sizeof guess - 1), "write from 127.0.0.2");
    char line[256];
    BP_CHECK(read_line(other, line, sizeof line) == 0 && strncmp(line, "-WRONGPASS", 10) == 0, "127.0.0.2's AUTH: %s",
             line);
    uint64_t other_ms = tu_now_mono_ms() - t1;
    BP_CHECK(other_ms < 1500, "a wrong AUTH from 127.0.0.2 waited %llu ms for 127.0.0.1's failures",
             (unsigned long long)other_ms);
    struct pollfd p[GUESSERS];
    int answered = 0;
    for (int i = 0; i < GUESSERS; i++)
        p[i] = (struct pollfd){ .fd = fds[i], .events = POLLIN };
    while (answered < GUESSERS && tu_now_mono_ms() - t0 < 30000) {
        if (poll(p, GUESSERS, 100) <= 0)
            continue;
        for (int i = 0; i < GUESSERS; i++) {
            if (p[i].fd >= 0 && (p[i].revents & POLLIN)) {
                BP_CHECK(read_line(p[i].fd, line, sizeof line) == 0 && strncmp(line, "-WRONGPASS", 10) == 0,
                         "guesser %d: %s", i, line);
                p[i].fd = -1;
                answered++;
            }
        }
    }
    uint64_t all_ms = tu_now_mono_ms() - t0;
    printf("\n    %d wrong AUTHs on %d connections from one address answered within %llu ms; another address's "
           "in %llu ms",
           answered, GUESSERS, (unsigned long long)all_ms, (unsigned long long)other_ms);
    BP_CHECK(answered == GUESSERS, "%d of %d guesses answered", answered, GUESSERS);
    BP_CHECK(all_ms >= 2800,
             "%d wrong AUTHs on %d connections from one address were all answered within %llu ms, "
             "want >= 3000 ms (200+400+800+1600: one verification per held-back failure)",
             GUESSERS, GUESSERS, (unsigned long long)all_ms);
    for (int i = 0; i < GUESSERS; i++)
        close(fds[i]);
    close(other);
    cleanup_users();
}

static void test_hello_auth(void)
{
    start_with_users();
    rc_conn_t c;
    char e[1024];
    connect_as(&c, NULL, NULL);
    resp_reply_t *r = rc_cmd(&c, "HELLO", "3", "AUTH", "canceller", "nope", NULL);
    BP_CHECK(rc_is_error(r, "WRONGPASS"), "HELLO 3 AUTH with a wrong password: %s", rc_describe(r, e, sizeof e));
    resp_reply_free(r);
    r = rc_cmd(&c, "PING", NULL);
    BP_CHECK(r != NULL && r->type == RESP_REPLY_STATUS, "the protocol changed after a failed HELLO AUTH: %s",
             rc_describe(r, e, sizeof e));
    resp_reply_free(r);
    r = rc_cmd(&c, "HELLO", "3", "AUTH", "canceller", "pw-canceller", "SETNAME", "cancel-7", NULL);
    BP_REQUIRE(r != NULL && r->type == RESP_REPLY_MAP, "HELLO 3 AUTH: %s", rc_describe(r, e, sizeof e));
    int saw_user = 0, saw_roles = 0;
    for (size_t i = 0; i + 1 < r->count; i += 2) {
        const resp_reply_t *k = &r->elements[i], *val = &r->elements[i + 1];
        if (rc_str_eq(k, "user"))
            saw_user = rc_str_eq(val, "canceller");
        if (rc_str_eq(k, "roles"))
            saw_roles = val->type == RESP_REPLY_ARRAY && val->count == 1 && rc_str_eq(&val->elements[0], "consumer");
    }
    BP_CHECK(saw_user, "HELLO's map lacks user canceller: %s", rc_describe(r, e, sizeof e));
    BP_CHECK(saw_roles, "HELLO's map lacks roles [consumer]: %s", rc_describe(r, e, sizeof e));
    resp_reply_free(r);
    r = rc_cmd(&c, "CLIENT", "GETNAME", NULL);
    BP_CHECK(r != NULL && rc_str_eq(r, "cancel-7"), "SETNAME with HELLO AUTH: %s", rc_describe(r, e, sizeof e));
    resp_reply_free(r);
    rc_close(&c);

    /* AUTH with only a password is the user "default". */
    connect_as(&c, NULL, NULL);
    r = rc_cmd(&c, "AUTH", "pw-default", NULL);
    BP_CHECK(r != NULL && rc_str_eq(r, "OK"), "AUTH pw-default: %s", rc_describe(r, e, sizeof e));
    resp_reply_free(r);
    r = rc_cmd(&c, "ACL", "WHOAMI", NULL);
    BP_CHECK(r != NULL && rc_str_eq(r, "default"), "WHOAMI: %s", rc_describe(r, e, sizeof e));
    resp_reply_free(r);
    EXPECT(&c, "default (viewer)", "NOPERM", "SEND", "t", "p");
    rc_close(&c);
    cleanup_users();
}

static void test_reload(void)
{
    start_with_users();
    rc_conn_t view, prod;
    char e[1024];
    connect_as(&view, "grafana", "pw-grafana");
    connect_as(&prod, "shop", "pw-shop");
    rc_conn_t txn; /* shop inside MULTI when the reload takes its producer role away */
    connect_as(&txn, "shop", "pw-shop");
    EXPECT(&txn, "shop", NULL, "MULTI");
    EXPECT(&txn, "shop", NULL, "SEND", "t", "queued");
    EXPECT(&view, "viewer", NULL, "INFO", "server");
    /* A bad file: refused, the old users stay. */
    TU_REQUIRE(tu_write_file(users_path, "shop producer,boss $scrypt$ln=10,r=8,p=1$00$00\n") == 0, "write");
    BP_REQUIRE(kill(bt_broker.pid, SIGHUP) == 0, "SIGHUP");
    BP_CHECK(tu_wait_file_contains(bt_broker.log_path, "users file not reloaded", 10000) == 0,
             "a bad users file was not reported");
    BP_CHECK(bp_log_contains(&bt_broker, "users:1: user 'shop': unknown role 'boss'"),
             "the error does not name file:line and the problem");
    EXPECT(&view, "viewer after a bad reload", NULL, "INFO", "server");
    /* Without grafana, and shop a consumer instead of a producer. */
    write_users_but("grafana", &(tu_user_t){ "shop", "consumer", "pw-shop" });
    BP_REQUIRE(kill(bt_broker.pid, SIGHUP) == 0, "SIGHUP");
    BP_CHECK(tu_wait_file_contains(bt_broker.log_path, "users reloaded from", 10000) == 0, "no reload logged");
    BP_CHECK(tu_wait_file_contains(bt_broker.log_path, "user 'grafana' is gone", 10000) == 0,
             "the removed user's connection was not logged out");
    EXPECT(&view, "removed viewer", "NOAUTH", "INFO", "server");
    EXPECT(&prod, "shop now a consumer", NULL, "GROUP", "CREATE", "g", "t");
    EXPECT(&prod, "shop now a consumer", NULL, "PULL", "g", "t");
    EXPECT(&prod, "shop now a consumer", "NOPERM", "SEND", "t", "x");
    /* Its open transaction: EXEC is refused, DISCARD (any role) leaves it, and the connection works again. */
    EXPECT(&txn, "shop in MULTI, producer role gone", "NOPERM", "EXEC");
    EXPECT(&txn, "shop in MULTI, producer role gone", NULL, "DISCARD");
    EXPECT(&txn, "shop after DISCARD", NULL, "PING");
    rc_close(&txn);
    rc_conn_t again;
    BP_REQUIRE(bp_connect(&bt_broker, &again, e, sizeof e) == 0, "connect");
    EXPECT(&again, "grafana after removal", "WRONGPASS", "AUTH", "grafana", "pw-grafana");
    rc_close(&again);
    rc_close(&view);
    rc_close(&prod);
    cleanup_users();
}

/* AUTH and HELLO … AUTH with the wrong number of arguments: refused at once with the reason, never checked (no
 * failure counted, nothing held back, no password in the log). */
static void test_auth_arity(void)
{
    start_with_users();
    rc_conn_t c;
    connect_as(&c, NULL, NULL);
    EXPECT(&c, "AUTH with 3 arguments", "ERR wrong number of arguments for 'auth' command", "AUTH", "shop", "pw-shop",
           "extra-secret");
    EXPECT(&c, "AUTH alone", "ERR wrong number of arguments for 'auth' command", "AUTH");
    EXPECT(&c, "HELLO 3 AUTH user", "ERR syntax error: AUTH needs a user name and a password", "HELLO", "3", "AUTH",
           "lonely-secret");
    EXPECT(&c, "still not logged in", "NOAUTH", "SEND", "t", "p");
    rc_conn_t adm;
    connect_as(&adm, "ops", "pw-ops");
    char v[64], e[512];
    BP_CHECK(bp_info_field(&adm, "auth_failures", v, sizeof v, e, sizeof e) == 0 && atoi(v) == 0,
             "INFO auth_failures %s after arity errors, want 0", v);
    BP_CHECK(!bp_log_contains(&bt_broker, "extra-secret") && !bp_log_contains(&bt_broker, "lonely-secret"),
             "an argument of a refused AUTH reached the log");
    rc_close(&adm);
    rc_close(&c);
    cleanup_users();
}

/* AUTH and HELLO … AUTH inside MULTI are refused (a transaction holds SENDs only), doom it, and switch no user: a
 * producer cannot queue SENDs and then run them as someone else, nor try passwords where the held-back failures
 * would not see them. */
static void test_auth_in_multi(void)
{
    start_with_users();
    rc_conn_t c;
    connect_as(&c, "shop", "pw-shop");
    EXPECT(&c, "shop", NULL, "MULTI");
    EXPECT(&c, "shop in MULTI", "ERR AUTH is not allowed inside MULTI", "AUTH", "ops", "pw-ops");
    EXPECT(&c, "shop in MULTI", "ERR HELLO is not allowed inside MULTI", "HELLO", "3", "AUTH", "ops", "pw-ops");
    EXPECT(&c, "shop in MULTI", "EXECABORT", "EXEC");
    char e[512];
    resp_reply_t *r = rc_cmd(&c, "ACL", "WHOAMI", NULL);
    BP_CHECK(r != NULL && rc_str_eq(r, "shop"), "WHOAMI after AUTH inside MULTI: %s", rc_describe(r, e, sizeof e));
    resp_reply_free(r);
    rc_close(&c);
    cleanup_users();
}

/* A changed password (reload): the old one is refused from then on — the cache of verified passwords knew it —
 * while connections logged in with it stay (clients move to the new one at their own pace: docs/security.md);
 * CLIENT KILL USER ends them when the old password leaked. */
static void test_password_changed(void)
{
    start_with_users();
    char e[1024];
    rc_conn_t old, again, adm;
    connect_as(&old, "shop", "pw-shop");
    connect_as(&adm, "ops", "pw-ops");
    write_users_but(NULL, &(tu_user_t){ "shop", "producer", "pw-shop-2" });
    BP_REQUIRE(kill(bt_broker.pid, SIGHUP) == 0, "SIGHUP");
    BP_CHECK(tu_wait_file_contains(bt_broker.log_path, "users reloaded from", 10000) == 0, "no reload logged");
    connect_as(&again, NULL, NULL);
    EXPECT(&again, "shop's old password after the change", "WRONGPASS", "AUTH", "shop", "pw-shop");
    EXPECT(&again, "shop's new password", NULL, "AUTH", "shop", "pw-shop-2");
    EXPECT(&old, "shop logged in with the old password", NULL, "SEND", "t", "still-in");
    resp_reply_t *r = rc_cmd(&adm, "CLIENT", "KILL", "USER", "shop", NULL);
    BP_CHECK(r != NULL && r->type == RESP_REPLY_INTEGER && r->integer == 2, "CLIENT KILL USER shop: %s, want 2",
             rc_describe(r, e, sizeof e));
    resp_reply_free(r);
    rc_close(&old);
    rc_close(&again);
    rc_close(&adm);
    cleanup_users();
}

/* hourglass-cli passwd: a password with a NUL byte is refused — the hash covered only the bytes before it (it
 * printed a line for "a" when given "a\0b"), while a client's AUTH sends them all and never matched. */
static void test_cli_passwd_nul(void)
{
    char out[4096];
    const char *nul[] = { "/bin/sh", "-c", "printf 'a\\000b\\n' | " HG_BUILDDIR "/hourglass-cli passwd --cost 10",
                          NULL };
    int rc = tu_run_capture(nul, out, sizeof out);
    BP_CHECK(rc == 2 && strstr(out, "the password on stdin has a NUL byte") != NULL && strstr(out, "$scrypt$") == NULL,
             "passwd with a NUL byte: exit %d: %s", rc, out);
    const char *ok[] = { "/bin/sh", "-c", "printf 'a b\\n' | " HG_BUILDDIR "/hourglass-cli passwd --cost 10", NULL };
    rc = tu_run_capture(ok, out, sizeof out);
    BP_CHECK(rc == 0 && strncmp(out, "$scrypt$ln=10,", 14) == 0, "passwd 'a b': exit %d: %s", rc, out);
}

/* The broker's log, whole, into a new string (NULL when it cannot be read). */
static char *read_log(size_t *len)
{
    FILE *f = fopen(bt_broker.log_path, "rb");
    if (f == NULL)
        return NULL;
    size_t cap = 1 << 20, n = 0;
    char *text = malloc(cap + 1);
    n = fread(text, 1, cap, f);
    fclose(f);
    text[n] = '\0';
    *len = n;
    return text;
}

/* A failed AUTH's warning names the user only when it is one: a name that is no user's may be a password typed
 * in its place (AUTH password user), and it may hold control bytes. Before, the warning showed it as typed. */
static void test_auth_log_names(void)
{
    start_with_users();
    rc_conn_t c;
    char e[1024];
    connect_as(&c, NULL, NULL);
    /* Swapped: the password where the name goes, with an escape sequence and a newline in it. */
    const char *swapped = "Pw-Swapped\x1b[2J\r\nforged line";
    resp_reply_t *r = rc_cmd(&c, "AUTH", swapped, "ops", NULL);
    BP_CHECK(rc_is_error(r, "WRONGPASS"), "AUTH <password> ops: %s", rc_describe(r, e, sizeof e));
    resp_reply_free(r);
    char want[96];
    snprintf(want, sizeof want, "for unknown user (%zu bytes) (no such user)", strlen(swapped));
    BP_CHECK(tu_wait_file_contains(bt_broker.log_path, want, 10000) == 0, "no warning '%s'", want);
    /* A known user's wrong password: the name is shown. */
    r = rc_cmd(&c, "AUTH", "ops", "wrong", NULL);
    BP_CHECK(rc_is_error(r, "WRONGPASS"), "AUTH ops wrong: %s", rc_describe(r, e, sizeof e));
    resp_reply_free(r);
    BP_CHECK(tu_wait_file_contains(bt_broker.log_path, "for user 'ops' (wrong password)", 10000) == 0,
             "the warning does not name the known user");
    size_t len = 0;
    char *log = read_log(&len);
    BP_REQUIRE(log != NULL, "read %s", bt_broker.log_path);
    BP_CHECK(strstr(log, "Pw-Swapped") == NULL, "the password typed as a user name is in the log");
    BP_CHECK(memchr(log, 0x1b, len) == NULL, "an escape byte reached the log raw");
    BP_CHECK(strstr(log, "\nforged line") == NULL, "a newline from the client forged a log line");
    free(log);
    rc_close(&c);
    cleanup_users();
}

/* The longest password is PASSWD_MAX (1 KiB) bytes: a longer one in AUTH or HELLO AUTH is refused with its own
 * error, never hashed, and counted (and held back) as a failed AUTH. Before, it was hashed whatever its length
 * (4 MiB: 0.2 s of hashing). */
static void test_auth_password_too_long(void)
{
    start_with_users();
    rc_conn_t c, adm;
    char e[1024], v[64];
    connect_as(&adm, "ops", "pw-ops");
    BP_REQUIRE(bp_info_field(&adm, "auth_failures", v, sizeof v, e, sizeof e) == 0, "INFO: %s", e);
    long long before = atoll(v);
    connect_as(&c, NULL, NULL);
    static char big[4 << 20];
    memset(big, 'x', sizeof big - 1);
    const char *argv[] = { "AUTH", "ops", big };
    size_t lens[] = { 4, 3, PASSWD_MAX + 1 };
    resp_reply_t *r = rc_cmdv(&c, 3, argv, lens);
    BP_CHECK(rc_is_error(r, "ERR AUTH refused: the password is longer than 1024 bytes"), "AUTH of %d bytes: %s",
             PASSWD_MAX + 1, rc_describe(r, e, sizeof e));
    resp_reply_free(r);
    BP_CHECK(tu_wait_file_contains(bt_broker.log_path,
                                   "for user 'ops' (a password of 1025 bytes, longer than 1024: not checked)",
                                   10000) == 0,
             "no warning for the long password");
    const char *hello[] = { "HELLO", "3", "AUTH", "ops", big };
    size_t hlens[] = { 5, 1, 4, 3, sizeof big - 1 };
    r = rc_cmdv(&c, 5, hello, hlens);
    BP_CHECK(rc_is_error(r, "ERR AUTH refused: the password is longer than 1024 bytes"), "HELLO AUTH of 4 MiB: %s",
             rc_describe(r, e, sizeof e));
    resp_reply_free(r);
    /* PASSWD_MAX bytes are checked: a wrong one is WRONGPASS. */
    lens[2] = PASSWD_MAX;
    r = rc_cmdv(&c, 3, argv, lens);
    BP_CHECK(rc_is_error(r, "WRONGPASS"), "AUTH of %d bytes: %s", PASSWD_MAX, rc_describe(r, e, sizeof e));
    resp_reply_free(r);
    EXPECT(&c, "after the refusals", "NOAUTH", "SEND", "t", "p");
    BP_CHECK(bp_info_field(&adm, "auth_failures", v, sizeof v, e, sizeof e) == 0 && atoll(v) == before + 3,
             "INFO auth_failures %s, want %lld (the two refused and the wrong one)", v, before + 3);
    rc_close(&c);
    rc_close(&adm);
    cleanup_users();
}

/* 1 when INFO storage on c shows field with a value containing want. */
static int info_has(rc_conn_t *c, const char *field, const char *want, char *got, size_t gotlen)
{
    char e[256];
    got[0] = '\0';
    if (bp_info_field(c, field, got, gotlen, e, sizeof e) != 0)
        snprintf(got, gotlen, "(no field: %s)", e);
    return strstr(got, want) != NULL;
}

/* INFO shows file-system paths (storage: dir, backup_last_error) to the admin only, who alone may CONFIG GET
 * them; a viewer, consumer or producer sees "(admin only)" there, the other fields as before. Before, every
 * role that may run INFO read the data directory and the backup error's paths. */
/* A producer's INFO (ioredis asks it at connect: its ready check warned for
 * every producer when INFO was refused) is the server section alone; a
 * section by name other than server is refused, naming it; a producer that
 * also views reads everything. */
static void test_info_producer(void)
{
    start_with_users();
    rc_conn_t prod, view;
    char e[1024];
    connect_as(&prod, "shop", "pw-shop");
    connect_as(&view, "grafana", "pw-grafana");
    const char *asks[][2] = { { "INFO", NULL }, { "INFO", "server" }, { "INFO", "all" }, { "INFO", "everything" } };
    for (size_t i = 0; i < sizeof asks / sizeof asks[0]; i++) {
        resp_reply_t *r = rc_cmd(&prod, asks[i][0], asks[i][1], NULL);
        BP_CHECK(r != NULL && r->str != NULL && strstr(r->str, "# Server") != NULL &&
                     strstr(r->str, "# Clients") == NULL && strstr(r->str, "# Groups") == NULL &&
                     strstr(r->str, "# Storage") == NULL && strstr(r->str, "# Stats") == NULL,
                 "producer: INFO %s: want the server section alone: %s", asks[i][1] ? asks[i][1] : "",
                 rc_describe(r, e, sizeof e));
        resp_reply_free(r);
    }
    resp_reply_t *r = rc_cmd(&prod, "INFO", "server", "stats", NULL);
    BP_CHECK(rc_is_error(r, "NOPERM") && strstr(r->str, "may read INFO's server section only, not 'stats'") != NULL,
             "producer: INFO server stats: %s", rc_describe(r, e, sizeof e));
    resp_reply_free(r);
    r = rc_cmd(&view, "INFO", NULL);
    BP_CHECK(r != NULL && r->str != NULL && strstr(r->str, "# Server") != NULL && strstr(r->str, "# Stats") != NULL,
             "viewer: INFO: want every section: %s", rc_describe(r, e, sizeof e));
    resp_reply_free(r);
    rc_close(&prod);
    rc_close(&view);
}

static void test_info_paths_admin_only(void)
{
    char bkdir[700], parent[650], got[600];
    TU_REQUIRE(tu_mkdtemp("hg-bkparent", parent, sizeof parent) == 0, "temp dir");
    snprintf(bkdir, sizeof bkdir, "%s/gone/bk", parent); /* its parent is missing: BACKUP fails, naming the path */
    start_with_users_and("--backup-dir", bkdir);
    rc_conn_t adm, viewer, consumer;
    char e[1024];
    connect_as(&adm, "ops", "pw-ops");
    connect_as(&viewer, "grafana", "pw-grafana");
    connect_as(&consumer, "canceller", "pw-canceller");
    resp_reply_t *r = rc_cmd(&adm, "BACKUP", "b1", NULL);
    BP_CHECK(rc_is_error(r, "ERR"), "BACKUP into a missing parent: %s", rc_describe(r, e, sizeof e));
    resp_reply_free(r);
    BP_CHECK(info_has(&adm, "dir", bt_broker.data_dir, got, sizeof got), "admin: INFO dir '%s', want %s", got,
             bt_broker.data_dir);
    BP_CHECK(info_has(&adm, "backup_last_error", parent, got, sizeof got),
             "admin: INFO backup_last_error '%s', want the path", got);
    rc_conn_t *others[] = { &viewer, &consumer };
    for (size_t i = 0; i < 2; i++) {
        const char *who = i == 0 ? "viewer" : "consumer";
        BP_CHECK(info_has(others[i], "dir", "(admin only)", got, sizeof got), "%s: INFO dir '%s'", who, got);
        BP_CHECK(info_has(others[i], "backup_last_error", "(admin only)", got, sizeof got),
                 "%s: INFO backup_last_error '%s'", who, got);
        BP_CHECK(info_has(others[i], "backup_last_status", "failed", got, sizeof got),
                 "%s: INFO backup_last_status '%s', want failed", who, got);
        /* No path anywhere in INFO (all sections), nor through CONFIG GET. */
        r = rc_cmd(others[i], "INFO", "everything", NULL);
        BP_CHECK(r != NULL && r->str != NULL && strstr(r->str, bt_broker.dir) == NULL && strstr(r->str, parent) == NULL,
                 "%s: INFO everything shows a path: %s", who, rc_describe(r, e, sizeof e));
        resp_reply_free(r);
        EXPECT(others[i], who, "NOPERM", "CONFIG", "GET", "dir");
    }
    rc_close(&adm);
    rc_close(&viewer);
    rc_close(&consumer);
    cleanup_users();
    tu_rmtree(parent);
}

/* 1 once the broker's log has the text arg. */
static int log_has(void *arg)
{
    return bp_log_contains(&bt_broker, (const char *)arg);
}

typedef struct send_ctx {
    rc_conn_t *c;
    char err[1024];
} send_ctx_t;

/* One SEND on ctx->c; 1 once it is acknowledged (the store reopened after a failed fsync). */
static int send_acknowledged(void *arg)
{
    send_ctx_t *x = arg;
    char id[32];
    return bp_send(x->c, id, sizeof id, x->err, sizeof x->err, "t", "p", NULL) == 0;
}

/* The SEND whose fsync fails (trigger made), on c: its error into e[elen]. */
static void send_failing(rc_conn_t *c, const char *trigger, const char *who, char *e, size_t elen)
{
    char id[32];
    TU_REQUIRE(tu_write_file(trigger, "") == 0, "write %s", trigger);
    BP_REQUIRE(bp_send(c, id, sizeof id, e, elen, "t", "doomed", NULL) != 0,
               "%s: the SEND whose fsync failed got id %s", who, id);
    BP_CHECK(strstr(e, "fdatasync") != NULL && strstr(e, "Input/output error") != NULL,
             "%s: '%s', want the fsync's error", who, e);
}

/* Error replies carry file-system paths to the admin only, as INFO does: a producer whose SEND fails because the
 * fdatasync of the store's commit log failed reads the error with its paths (the data directory, the segment)
 * replaced by "(path hidden: admin only)", the error code and the cause kept; the log has the whole text with the
 * paths; the admin's SEND gets them. Before, the producer read "ERR storage failure: commit log of <the data
 * directory>: <the data directory>/clog-<base>.seg: cannot fdatasync ...". The shim fails only a segment's sync
 * (HG_FAILSYNC_ONLY): a checkpoint's sync of LevelDB's logs, running meanwhile, would take the trigger otherwise and
 * the SEND would be acknowledged. */
static void test_error_paths_admin_only(void)
{
    char shimdir[512], trigger[600], e[1024], want[2 * sizeof bt_broker.data_dir + 96];
    bt_preload_failsync(shimdir, sizeof shimdir, trigger, sizeof trigger);
    setenv("HG_FAILSYNC_ONLY", ".seg", 1); /* the SEND's sync: the syncer's of the commit log */
    start_with_users();                    /* fsync always */
    unsetenv("LD_PRELOAD");                /* the broker has it; nothing else the test starts does */
    rc_conn_t adm, shop;
    connect_as(&adm, "ops", "pw-ops");
    connect_as(&shop, "shop", "pw-shop");
    send_ctx_t x = { .c = &shop };
    BP_REQUIRE(send_acknowledged(&x), "a first SEND: %s", x.err);
    /* The known paths are derived once per configuration: a reload makes them again, and they still hide. */
    BP_REQUIRE(kill(bt_broker.pid, SIGHUP) == 0, "SIGHUP");
    BP_REQUIRE(tu_wait_file_contains(bt_broker.log_path, "users reloaded from", 10000) == 0, "no reload logged");

    send_failing(&shop, trigger, "producer", e, sizeof e);
    BP_CHECK(strstr(e, "ERR storage failure: commit log of (path hidden: admin only): (path hidden: admin only): "
                       "cannot fdatasync (the segment must be abandoned): Input/output error") != NULL &&
                 strstr(e, bt_broker.dir) == NULL && strstr(e, "clog-") == NULL,
             "producer: '%s', want the error with its paths hidden", e);
    snprintf(want, sizeof want,
             "user=shop, its paths hidden (not an admin): ERR storage failure: commit log of %s: %s/clog-",
             bt_broker.data_dir, bt_broker.data_dir);
    BP_CHECK(tu_poll_until(log_has, want, 10000, 20) == 0, "the log has no line with '%s'", want);

    BP_REQUIRE(tu_poll_until(send_acknowledged, &x, 30000, 100) == 0, "no SEND acknowledged again in 30 s: %s", x.err);
    send_failing(&adm, trigger, "admin", e, sizeof e);
    snprintf(want, sizeof want, "commit log of %s: %s/clog-", bt_broker.data_dir, bt_broker.data_dir);
    BP_CHECK(strstr(e, want) != NULL && strstr(e, "path hidden") == NULL, "admin: '%s', want the paths (%s)", e, want);

    /* A broken store (the reopen after the failed fsync fails: CURRENT moved away): LevelDB's text names the path. */
    char current[700], away[700];
    BP_REQUIRE(tu_poll_until(send_acknowledged, &x, 30000, 100) == 0, "no SEND acknowledged again in 30 s: %s", x.err);
    snprintf(current, sizeof current, "%s/CURRENT", bt_broker.data_dir);
    snprintf(away, sizeof away, "%s/CURRENT.away", bt_broker.data_dir);
    BP_REQUIRE(rename(current, away) == 0, "rename %s", current);
    send_failing(&shop, trigger, "producer", e, sizeof e);
    BP_REQUIRE(tu_poll_until(log_has, "cannot reopen the store", 20000, 50) == 0, "no failed reopen logged");
    x.c = &shop;
    BP_CHECK(!send_acknowledged(&x) && strstr(x.err, "store unavailable: ") != NULL &&
                 strstr(x.err, "(path hidden: admin only)") != NULL && strstr(x.err, bt_broker.dir) == NULL,
             "producer, the store broken: '%s', want its paths hidden", x.err);
    printf("\n    a producer reads: %s\n", x.err);
    x.c = &adm;
    BP_CHECK(!send_acknowledged(&x) && strstr(x.err, "store unavailable: ") != NULL &&
                 strstr(x.err, bt_broker.data_dir) != NULL && strstr(x.err, "path hidden") == NULL,
             "admin, the store broken: '%s', want the paths", x.err);
    /* /healthz, which anyone who reaches the metrics port reads without logging in, says the store is broken and
     * why, its paths hidden as for a non-admin; the log has them (the failed reopen above). Before, it answered
     * "storage broken: store unavailable: data directory <dir>/data: ..." to anyone. */
    char health[2048];
    int status = tu_http_get(bt_broker.metrics_port, "/healthz", health, sizeof health);
    BP_CHECK(status == 503 && strstr(health, "storage broken: ") != NULL &&
                 strstr(health, "(path hidden: admin only)") != NULL && strstr(health, bt_broker.dir) == NULL,
             "/healthz, the store broken: %d '%s', want 503 with its paths hidden", status, health);
    printf("    /healthz reads: %s\n", health);
    /* The same refusal again and again (a producer retrying): its text logged once, not once per reply. */
    x.c = &shop;
    for (int i = 0; i < 5; i++)
        BP_CHECK(!send_acknowledged(&x) && strstr(x.err, "store unavailable: ") != NULL, "producer: '%s'", x.err);
    int lines = bt_log_count("user=shop, its paths hidden (not an admin): ERR storage failure: store unavailable: data "
                             "directory");
    BP_CHECK(lines == 1, "%d log lines for 6 refusals with the same text, want 1", lines);
    BP_REQUIRE(rename(away, current) == 0, "rename back %s", away);
    BP_REQUIRE(tu_poll_until(send_acknowledged, &x, 30000, 100) == 0, "no SEND acknowledged once CURRENT was back: %s",
               x.err);

    rc_close(&adm);
    rc_close(&shop);
    unsetenv("HG_FAILSYNC_TRIGGER");
    unsetenv("HG_FAILSYNC_ONLY");
    cleanup_users();
    tu_rmtree(shimdir);
}

/* hourglass-cli passwd takes a password of PASSWD_MAX bytes and refuses a longer one, saying so. Before, it took
 * 1025 bytes (one too many) and said "no password on stdin" of a longer one. */
static void test_cli_passwd_long(void)
{
    char out[4096], cmd[256];
    for (int n = PASSWD_MAX; n <= PASSWD_MAX + 1; n++) {
        snprintf(cmd, sizeof cmd, "head -c %d /dev/zero | tr '\\0' p; printf '\\r\\n'", n);
        char full[512];
        snprintf(full, sizeof full, "(%s) | %s/hourglass-cli passwd --cost 10", cmd, HG_BUILDDIR);
        const char *argv[] = { "/bin/sh", "-c", full, NULL };
        int rc = tu_run_capture(argv, out, sizeof out);
        if (n == PASSWD_MAX)
            BP_CHECK(rc == 0 && strncmp(out, "$scrypt$ln=10,", 14) == 0, "passwd of %d bytes: exit %d: %s", n, rc, out);
        else
            BP_CHECK(rc == 2 && strstr(out, "the password on stdin is longer than 1024 bytes") != NULL &&
                         strstr(out, "$scrypt$") == NULL,
                     "passwd of %d bytes: exit %d: %s", n, rc, out);
    }
}

/* 1 when the broker closed c (EOF), after whatever it said last. */
static int closed_after(rc_conn_t *c, int deadline_ms, char *last, size_t lastlen)
{
    uint64_t end = tu_now_mono_ms() + (uint64_t)deadline_ms;
    last[0] = '\0';
    while (tu_now_mono_ms() < end) {
        resp_reply_t *r = rc_read(c, 200);
        if (r != NULL) {
            rc_describe(r, last, lastlen);
            resp_reply_free(r);
        } else if (!c->timed_out) {
            return 1;
        }
    }
    return 0;
}

/* auth-timeout: a client that never logs in is told and closed (it held a max-clients slot for ever, and with it
 * 10 000 silent connections locked every user out); a logged-in one stays; one a reload logged out gets the same
 * time again from the logout. The times are measured from before the connect (the logout: before the SIGHUP),
 * which is never after the broker's accept: so never before auth-timeout, strictly; and not much after it (the
 * sweep runs every 200 ms; 5 s of slack for a slow or valgrinded broker). Before, the clock started after the
 * two logins that follow the silent client's connect: under valgrind their scrypt checks took 200-350 ms, and a
 * close on time looked early ("closed after 665 ms"). */
static void test_auth_timeout(void)
{
    start_with_users_and("--auth-timeout", "1s");
    rc_conn_t silent, in, view;
    char last[512];
    uint64_t t0 = tu_now_mono_ms();
    connect_as(&silent, NULL, NULL);
    connect_as(&in, "shop", "pw-shop");
    connect_as(&view, "grafana", "pw-grafana");
    BP_CHECK(closed_after(&silent, 10000, last, sizeof last), "a client that never logged in is still open");
    uint64_t ms = tu_now_mono_ms() - t0;
    BP_CHECK(strstr(last, "not logged in within auth-timeout (1000 ms)") != NULL, "its last reply: %s", last);
    BP_CHECK(ms >= 1000, "closed %llu ms after its connect, before auth-timeout 1s", (unsigned long long)ms);
    BP_CHECK(ms < 6000, "closed %llu ms after its connect, long after auth-timeout 1s", (unsigned long long)ms);
    BP_CHECK(tu_wait_file_contains(bt_broker.log_path, "after it connected (auth-timeout 1000 ms); closing", 10000) ==
                 0,
             "no log line for auth-timeout");
    EXPECT(&in, "shop, logged in, after auth-timeout", NULL, "PING");
    /* grafana removed: logged out, then closed auth-timeout later. */
    write_users(0);
    t0 = tu_now_mono_ms();
    BP_REQUIRE(kill(bt_broker.pid, SIGHUP) == 0, "SIGHUP");
    BP_CHECK(tu_wait_file_contains(bt_broker.log_path, "user 'grafana' is gone", 10000) == 0, "no logout");
    BP_CHECK(closed_after(&view, 10000, last, sizeof last), "a client logged out by the reload is still open");
    ms = tu_now_mono_ms() - t0;
    BP_CHECK(ms >= 1000, "logged out by a reload, closed %llu ms after the SIGHUP, before auth-timeout 1s",
             (unsigned long long)ms);
    BP_CHECK(ms < 6000, "logged out by a reload, closed %llu ms after the SIGHUP, long after auth-timeout 1s",
             (unsigned long long)ms);
    EXPECT(&in, "shop after the reload", NULL, "PING");
    rc_close(&silent);
    rc_close(&in);
    rc_close(&view);
    cleanup_users();
}

static int one_blocked(void *arg)
{
    char v[32], e[256];
    return bp_info_field(arg, "blocked_clients", v, sizeof v, e, sizeof e) == 0 && atoi(v) == 1;
}

/* A consumer removed by a reload while its PULL … BLOCK 0 waits: the connection is closed and the PULL with it, so
 * the next message is not leased to a user that no longer exists (it was: logged out, the parked PULL still
 * delivered). auth-timeout 0, so only the reload can close it. */
static void test_reload_blocked_pull(void)
{
    start_with_users_and("--auth-timeout", "0");
    rc_conn_t cons, adm;
    char e[1024];
    connect_as(&cons, "canceller", "pw-canceller");
    connect_as(&adm, "ops", "pw-ops");
    EXPECT(&adm, "admin", NULL, "GROUP", "CREATE", "g", "t");
    rc_appendl(&cons, "PULL", "g", "t", "BLOCK", "0", NULL);
    BP_REQUIRE(rc_flush(&cons, 10000) == 0, "write PULL");
    BP_REQUIRE(tu_poll_until(one_blocked, &adm, 10000, 20) == 0, "the PULL BLOCK 0 is not parked");
    write_users_but("canceller", NULL);
    BP_REQUIRE(kill(bt_broker.pid, SIGHUP) == 0, "SIGHUP");
    BP_CHECK(tu_wait_file_contains(bt_broker.log_path, "user 'canceller' may no longer PULL", 10000) == 0,
             "no log line for the closed PULL");
    char last[512];
    BP_CHECK(closed_after(&cons, 10000, last, sizeof last), "the removed consumer's connection is open (last: %s)",
             last);
    BP_CHECK(last[0] == '\0', "the removed consumer got a reply: %s", last);
    char id[32];
    BP_REQUIRE(bp_send(&adm, id, sizeof id, e, sizeof e, "t", "after-removal", NULL) == 0, "SEND: %s", e);
    resp_reply_t *r = rc_cmd(&adm, "PULL", "g", "t", "BLOCK", "5000", NULL);
    BP_CHECK(r != NULL && r->type == RESP_REPLY_ARRAY && r->count == 1, "the message went elsewhere: %s",
             rc_describe(r, e, sizeof e));
    resp_reply_free(r);
    rc_close(&cons);
    rc_close(&adm);
    cleanup_users();
}

static int reloads_seen_3(void *arg)
{
    (void)arg;
    return bt_log_count("users reloaded from") >= 3;
}

/* The users file holds password hashes: a mode that lets the group or others read or write it is warned about. */
static void test_exposed_users_file(void)
{
    start_with_users();
    char want[800];
    BP_REQUIRE(chmod(users_path, 0640) == 0, "chmod");
    BP_REQUIRE(kill(bt_broker.pid, SIGHUP) == 0, "SIGHUP");
    snprintf(want, sizeof want, "users-file %s is readable by its group (mode 0640)", users_path);
    BP_CHECK(tu_wait_file_contains(bt_broker.log_path, want, 10000) == 0, "no warning '%s'", want);
    BP_CHECK(bp_log_contains(&bt_broker, "chmod 600 it"), "the warning does not say what to do");
    BP_REQUIRE(chmod(users_path, 0620) == 0, "chmod"); /* writable: anyone in the group could add an admin */
    BP_REQUIRE(kill(bt_broker.pid, SIGHUP) == 0, "SIGHUP");
    snprintf(want, sizeof want, "users-file %s is writable by its group (mode 0620)", users_path);
    BP_CHECK(tu_wait_file_contains(bt_broker.log_path, want, 10000) == 0, "no warning '%s'", want);
    int warned = bt_log_count("able by");
    BP_REQUIRE(chmod(users_path, 0600) == 0, "chmod");
    BP_REQUIRE(kill(bt_broker.pid, SIGHUP) == 0, "SIGHUP");
    BP_CHECK(tu_poll_until(reloads_seen_3, NULL, 10000, 20) == 0, "the third reload was not logged");
    rc_conn_t c;
    connect_as(&c, NULL, NULL); /* a PING after the reload: the loop finished the SIGHUP before answering it */
    EXPECT(&c, "after the reload", NULL, "PING");
    rc_close(&c);
    BP_CHECK(bt_log_count("able by") == warned,
             "a users file of mode 0600 was warned about: %d warnings, %d "
             "before",
             bt_log_count("able by"), warned);
    cleanup_users();
}

static void test_protected_mode(void)
{
    char ip[64], e[1024], v[300];
    /* The test needs a route from this machine to itself that is not loopback: the kernel then reports the
     * machine's own address as the peer, which is what a remote client looks like to the broker. */
    BP_REQUIRE(tu_own_ipv4(ip, sizeof ip) == 0,
               "this machine has no non-loopback IPv4 address: protected mode cannot be tested honestly");
    const char *extra[] = { "--bind", "0.0.0.0", NULL };
    bt_start(extra);
    rc_conn_t remote;
    BP_REQUIRE(rc_connect(&remote, ip, bt_broker.port, 10000) == 0, "connect to %s:%d: %s", ip, bt_broker.port,
               remote.err);
    resp_reply_t *r = rc_read(&remote, 10000);
    BP_CHECK(rc_is_error(r, "DENIED Hourglass is in protected mode"), "a client via %s: %s", ip,
             rc_describe(r, e, sizeof e));
    /* The reply and the start-up warning say the same true thing: what is missing, and that users-file and TLS
     * are both needed (the warning named only the users-file, the reply "users or TLS"). */
    static const char protected_why[] =
        "serves only clients on this host because neither users-file nor TLS is configured: configure users-file and "
        "TLS (both), or set allow-remote yes";
    BP_CHECK(strstr(rc_describe(r, e, sizeof e), protected_why) != NULL, "the DENIED reply: %s", e);
    BP_CHECK(tu_wait_file_contains(bt_broker.log_path, protected_why, 10000) == 0,
             "the start-up warning does not say '%s'", protected_why);
    resp_reply_free(r);
    BP_CHECK(rc_wait_closed(&remote, 10000) == 1, "the refused client was not closed");
    rc_close(&remote);
    BP_CHECK(tu_wait_file_contains(bt_broker.log_path, "protected mode: refused a client from", 10000) == 0,
             "no warning for the refused client");
    EXPECT(&bt_conn, "loopback client", NULL, "SEND", "t", "local");
    BP_CHECK(bp_info_field(&bt_conn, "protected_mode", v, sizeof v, e, sizeof e) == 0 && strcmp(v, "yes") == 0,
             "INFO protected_mode %s", v);
    BP_CHECK(bp_info_field(&bt_conn, "denied_connections", v, sizeof v, e, sizeof e) == 0 && strcmp(v, "1") == 0,
             "INFO denied_connections %s, want 1", v);
    bt_teardown();
    bt_setup();

    /* allow-remote without users: served, with a loud warning in the log and INFO. */
    const char *open_extra[] = { "--bind", "0.0.0.0", "--allow-remote", "yes", NULL };
    bt_start(open_extra);
    BP_CHECK(bp_log_contains(&bt_broker, "SECURITY WARNING: allow-remote yes without users"),
             "no warning in the log for allow-remote without users");
    BP_CHECK(bp_info_field(&bt_conn, "security_warning", v, sizeof v, e, sizeof e) == 0 &&
                 strstr(v, "without users") != NULL,
             "INFO security_warning: '%s'", v);
    BP_REQUIRE(rc_connect(&remote, ip, bt_broker.port, 10000) == 0, "connect to %s: %s", ip, remote.err);
    EXPECT(&remote, "remote with allow-remote", NULL, "PING");
    rc_close(&remote);
    bt_teardown();
    bt_setup();

    /* allow-remote with users but no TLS: a warning about plaintext; a remote client must AUTH. */
    TU_REQUIRE(tu_mkdtemp("hg-users", users_dir, sizeof users_dir) == 0, "temp dir");
    snprintf(users_path, sizeof users_path, "%s/users", users_dir);
    write_users(1);
    const char *users_extra[] = { "--bind", "0.0.0.0", "--allow-remote", "yes", "--users-file", users_path, NULL };
    bt_start(users_extra);
    BP_CHECK(bp_log_contains(&bt_broker, "without TLS: passwords and messages cross the network in plaintext"),
             "no warning in the log for users without TLS");
    BP_REQUIRE(rc_connect(&remote, ip, bt_broker.port, 10000) == 0, "connect to %s: %s", ip, remote.err);
    EXPECT(&remote, "remote before AUTH", "NOAUTH", "SEND", "t", "p");
    EXPECT(&remote, "remote", NULL, "AUTH", "shop", "pw-shop");
    EXPECT(&remote, "remote producer", NULL, "SEND", "t", "p");
    rc_close(&remote);
    bt_teardown();
    bt_setup();

    /* users without TLS nor allow-remote: still protected, and both texts say TLS is what is missing. */
    const char *no_tls_extra[] = { "--bind", "0.0.0.0", "--users-file", users_path, NULL };
    bt_start(no_tls_extra);
    static const char no_tls_why[] = "serves only clients on this host because TLS is not configured: configure "
                                     "users-file and TLS (both), or set allow-remote yes";
    BP_CHECK(tu_wait_file_contains(bt_broker.log_path, no_tls_why, 10000) == 0,
             "the start-up warning does not say '%s'", no_tls_why);
    BP_REQUIRE(rc_connect(&remote, ip, bt_broker.port, 10000) == 0, "connect to %s: %s", ip, remote.err);
    r = rc_read(&remote, 10000);
    BP_CHECK(r != NULL && strstr(rc_describe(r, e, sizeof e), no_tls_why) != NULL, "the DENIED reply: %s",
             rc_describe(r, e, sizeof e));
    resp_reply_free(r);
    rc_close(&remote);
    cleanup_users();
}

/* The id and "ip:port" of c's connection (CLIENT ID, CLIENT INFO). */
static void conn_facts(rc_conn_t *c, long long *id, char *addr, size_t addrlen)
{
    char e[512];
    resp_reply_t *r = rc_cmd(c, "CLIENT", "ID", NULL);
    BP_REQUIRE(r != NULL && rc_int(r, id) == 0, "CLIENT ID: %s", rc_describe(r, e, sizeof e));
    resp_reply_free(r);
    r = rc_cmd(c, "CLIENT", "INFO", NULL);
    BP_REQUIRE(r != NULL && r->str != NULL, "CLIENT INFO: %s", rc_describe(r, e, sizeof e));
    const char *a = strstr(r->str, " addr=");
    BP_REQUIRE(a != NULL, "CLIENT INFO without addr: %s", r->str);
    a += 6;
    size_t n = strcspn(a, " ");
    snprintf(addr, addrlen, "%.*s", (int)n, a);
    resp_reply_free(r);
}

/* 1 when the broker closed c: a PING gets no reply. */
static int closed_by_broker(rc_conn_t *c)
{
    c->timeout_ms = 10000;
    resp_reply_t *r = rc_cmd(c, "PING", NULL);
    int closed = r == NULL;
    resp_reply_free(r);
    return closed;
}

/* Expect the integer want from argv on c. */
static void expect_count(rc_conn_t *c, long long want, const char *const *argv)
{
    char e[512];
    int argc = 0;
    while (argv[argc] != NULL)
        argc++;
    long long got = -1;
    resp_reply_t *r = rc_cmdv(c, argc, argv, NULL);
    BP_CHECK(r != NULL && rc_int(r, &got) == 0 && got == want, "%s %s %s %s: %s, want %lld", argv[0], argv[1], argv[2],
             argc > 3 ? argv[3] : "", rc_describe(r, e, sizeof e), want);
    resp_reply_free(r);
}

#define EXPECT_COUNT(c, want, ...)                   \
    do {                                             \
        const char *argv_[] = { __VA_ARGS__, NULL }; \
        expect_count(c, want, argv_);                \
    } while (0)

static void test_client_kill(void)
{
    start_with_users();
    rc_conn_t prod, prod2, cons, view, adm;
    connect_as(&prod, "shop", "pw-shop");
    connect_as(&prod2, "shop", "pw-shop");
    connect_as(&cons, "canceller", "pw-canceller");
    connect_as(&view, "grafana", "pw-grafana");
    connect_as(&adm, "ops", "pw-ops");
    long long cons_id, view_id, adm_id;
    char cons_addr[64], view_addr[64], adm_addr[64], id_text[32], e[512];
    conn_facts(&cons, &cons_id, cons_addr, sizeof cons_addr);
    conn_facts(&view, &view_id, view_addr, sizeof view_addr);
    conn_facts(&adm, &adm_id, adm_addr, sizeof adm_addr);

    /* Refusals name the problem and close nothing. */
    EXPECT(&adm, "admin", "ERR CLIENT KILL filter 'LADDR' is not supported", "CLIENT", "KILL", "LADDR", "x");
    EXPECT(&adm, "admin", "ERR CLIENT KILL ID 'abc' is not a client id", "CLIENT", "KILL", "ID", "abc");
    EXPECT(&adm, "admin", "ERR CLIENT KILL SKIPME 'maybe': yes or no", "CLIENT", "KILL", "ID", "1", "SKIPME", "maybe");
    EXPECT(&adm, "admin", "ERR CLIENT KILL takes filter-value pairs", "CLIENT", "KILL", "ID", "1", "USER");
    EXPECT(&adm, "admin", "ERR No such client", "CLIENT", "KILL", "127.0.0.1:1");
    EXPECT_COUNT(&adm, 0, "CLIENT", "KILL", "USER", "nobody");
    EXPECT(&view, "viewer", "NOPERM", "CLIENT", "KILL", "USER", "shop");

    /* USER: both of its connections; the others stay. */
    EXPECT_COUNT(&adm, 2, "CLIENT", "KILL", "USER", "shop");
    BP_CHECK(closed_by_broker(&prod) && closed_by_broker(&prod2), "the producer's connections are still open");
    /* ID, and ID with ADDR (both must match). */
    snprintf(id_text, sizeof id_text, "%lld", cons_id);
    EXPECT_COUNT(&adm, 0, "CLIENT", "KILL", "ID", id_text, "ADDR", view_addr);
    EXPECT_COUNT(&adm, 1, "CLIENT", "KILL", "ID", id_text, "ADDR", cons_addr);
    BP_CHECK(closed_by_broker(&cons), "the consumer's connection is still open");
    /* The old form: ip:port, +OK. */
    resp_reply_t *r = rc_cmd(&adm, "CLIENT", "KILL", view_addr, NULL);
    BP_CHECK(r != NULL && rc_str_eq(r, "OK"), "CLIENT KILL %s: %s", view_addr, rc_describe(r, e, sizeof e));
    resp_reply_free(r);
    BP_CHECK(closed_by_broker(&view), "the viewer's connection is still open");
    /* The caller is skipped unless SKIPME no; then it gets its reply first. */
    snprintf(id_text, sizeof id_text, "%lld", adm_id);
    EXPECT_COUNT(&adm, 0, "CLIENT", "KILL", "ID", id_text);
    EXPECT_COUNT(&adm, 1, "CLIENT", "KILL", "ID", id_text, "SKIPME", "no");
    BP_CHECK(closed_by_broker(&adm), "the admin's own connection is still open after SKIPME no");

    BP_CHECK(
        tu_wait_file_contains(bt_broker.log_path, "user=canceller: closed by CLIENT KILL from client id=", 20000) == 0,
        "no log line for the killed consumer");
    BP_CHECK(bp_log_contains(&bt_broker, "audit: client id=") && bp_log_contains(&bt_broker, "CLIENT KILL USER shop"),
             "no audit line for CLIENT KILL USER shop");
    rc_close(&prod);
    rc_close(&prod2);
    rc_close(&cons);
    rc_close(&view);
    rc_close(&adm);
    cleanup_users();
}

static void test_no_users(void)
{
    bt_start(NULL);
    char e[512], v[64];
    resp_reply_t *r = rc_cmd(&bt_conn, "AUTH", "x", NULL);
    BP_CHECK(rc_is_error(r, "ERR AUTH called without any users configured"), "AUTH without users: %s",
             rc_describe(r, e, sizeof e));
    resp_reply_free(r);
    EXPECT(&bt_conn, "no users", NULL, "CONFIG", "GET", "port");
    EXPECT(&bt_conn, "no users", NULL, "GROUP", "CREATE", "g", "t");
    EXPECT(&bt_conn, "no users", NULL, "DLQ", "DROP", "g", "ALL");
    r = rc_cmd(&bt_conn, "ACL", "WHOAMI", NULL);
    BP_CHECK(r != NULL && rc_str_eq(r, "default"), "WHOAMI: %s", rc_describe(r, e, sizeof e));
    resp_reply_free(r);
    BP_CHECK(bp_info_field(&bt_conn, "auth_required", v, sizeof v, e, sizeof e) == 0 && strcmp(v, "no") == 0,
             "INFO auth_required %s", v);
}

/* Which calls the audit log records is the command table's CMD_AUDIT flag:
 * every destructive or admin call, subcommands by their own rows (GROUP's
 * unknown subcommands audited, DLQ's and CLIENT's not), CONFIG except GET,
 * and no read. Each call is answered before the next is sent, and the last
 * is audited, so once its line is in the log every earlier one is too. */
static void test_audited_set(void)
{
    bt_start(NULL);
    const char *const calls[][5] = {
        /* { audited?, command ... } */
        { "yes", "GROUP", "CREATE", "ga", "t" },
        { "no", "GROUP", "LIST" },
        { "yes", "GROUP", "NOSUCH", "ga" },
        { "no", "DLQ", "LEN", "ga" },
        { "no", "DLQ", "NOSUCH", "ga" },
        { "yes", "DLQ", "REQUEUE", "ga", "ALL" },
        { "no", "CONFIG", "GET", "port" },
        { "yes", "CONFIG", "SET", "port", "1" },
        { "no", "CLIENT", "LIST" },
        { "no", "CLIENT", "ID" },
        { "yes", "CLIENT", "KILL", "ID", "999999" },
        { "no", "GET", "0000000000000001" },
        { "no", "SEND", "t", "p" },
        { "yes", "REVOKE", "0000000000000001" },
        { "yes", "TOPIC", "DEL", "nosuch" },
        { "yes", "DLQ", "DROP", "ga", "ALL" },
    };
    const size_t ncalls = sizeof calls / sizeof calls[0];
    char shown[128];
    for (size_t i = 0; i < ncalls; i++) {
        resp_reply_t *r = rc_cmd(&bt_conn, calls[i][1], calls[i][2], calls[i][3], calls[i][4], NULL);
        BP_REQUIRE(r != NULL, "%s %s: no reply", calls[i][1], calls[i][2]);
        resp_reply_free(r);
    }
    BP_REQUIRE(tu_wait_file_contains(bt_broker.log_path, "user=default DLQ DROP ga ALL:", 10000) == 0,
               "no audit line for the last call, DLQ DROP ga ALL, in %s", bt_broker.log_path);
    for (size_t i = 0; i < ncalls; i++) {
        snprintf(shown, sizeof shown, "user=default %s %s%s%s", calls[i][1], calls[i][2], calls[i][3] ? " " : "",
                 calls[i][3] ? calls[i][3] : "");
        int want = strcmp(calls[i][0], "yes") == 0;
        BP_CHECK(bp_log_contains(&bt_broker, shown) == want, "%s is %s, want %s (log %s)", shown,
                 want ? "not audited" : "audited", want ? "audited" : "not", bt_broker.log_path);
    }
}

/* The longest user name logs in, through the AUTH thread (the first time)
 * and the cache (the second): it was cut to 61 bytes and "..." on its way to
 * the lookup, and a right password got WRONGPASS. One byte more matches
 * nobody. */
static void test_long_user_name(void)
{
    BP_REQUIRE(strlen(LONG_USER) == 64, "LONG_USER is %zu bytes", strlen(LONG_USER));
    start_with_users();
    rc_conn_t a, b, c;
    connect_as(&a, LONG_USER, "pw-long");
    connect_as(&b, LONG_USER, "pw-long");
    EXPECT(&a, "long", NULL, "ACL", "WHOAMI");
    connect_as(&c, NULL, NULL);
    EXPECT(&c, "long+1", "WRONGPASS", "AUTH", LONG_USER "x", "pw-long");
    rc_close(&a);
    rc_close(&b);
    rc_close(&c);
    cleanup_users();
}

/* One more refused request (a foreign Host) on the metrics port; 1 once the log has a refusal line that says how
 * many were not logged since the one before (common/log_limit.h's count). Sent every poll interval, so lines come
 * once a second with a few refusals between them. */
static int refusal_count_logged(void *arg)
{
    char out[1024];
    (void)tu_http_get_host(*(int *)arg, "/metrics", "rebound.example", out, sizeof out);
    return bp_log_contains(&bt_broker, "metrics port: refused a request for host 'rebound.example'") &&
           bp_log_contains(&bt_broker, "names this loopback listener (DNS rebinding?) (repeated ");
}

/* The metrics port on loopback answers only requests whose Host names it (an IP literal, localhost, metrics-bind),
 * so a web page that re-points its own DNS name at 127.0.0.1 (DNS rebinding) cannot read /metrics — every topic's
 * and group's name — from a browser on the broker's host: 421, logged. Before, any Host was answered 200. */
static void test_metrics_host(void)
{
    bt_start(NULL);
    char out[32768];
    int port = bt_broker.metrics_port;
    const char *served[] = { "127.0.0.1", "127.0.0.1:9121", "localhost", "LOCALHOST.:9121", "[::1]:9121", NULL };
    for (int i = 0; served[i] != NULL; i++) {
        int st = tu_http_get_host(port, "/metrics", served[i], out, sizeof out);
        BP_CHECK(st == 200 && strstr(out, "hourglass_uptime_seconds") != NULL, "Host %s: %d, want 200", served[i], st);
    }
    BP_CHECK(tu_http_get_host(port, "/healthz", NULL, out, sizeof out) == 200, "no Host (HTTP/1.0): '%.80s', want 200",
             out);
    const char *refused[] = { "attacker.example:9121", "attacker.example", "127.0.0.1.nip.io", "[::1", "", NULL };
    for (int i = 0; refused[i] != NULL; i++) {
        const char *paths[] = { "/metrics", "/healthz" };
        for (int k = 0; k < 2; k++) {
            int st = tu_http_get_host(port, paths[k], refused[i], out, sizeof out);
            BP_CHECK(st == 421 && strstr(out, "is not this broker's metrics listener") != NULL &&
                         strstr(out, "hourglass_") == NULL,
                     "Host '%s' %s: %d '%.200s', want 421", refused[i], paths[k], st, out);
        }
    }
    BP_CHECK(tu_poll_until(log_has, "metrics port: refused a request for host 'attacker.example:9121'", 10000, 20) == 0,
             "the refusal is not logged");
    /* A flood of refusals: a line at most once a second, the next one counting those not logged (before 2026-12-05
     * the ones between two lines were only in the running total). */
    BP_CHECK(tu_poll_until(refusal_count_logged, &port, 20000, 200) == 0,
             "no refusal line saying how many refusals were not logged since the last");
}

/* A Prometheus on the broker's host scraping http://<hostname>:<port>/metrics, and a reverse proxy that passes its
 * own name (metrics-allowed-hosts), are answered on a loopback metrics-bind; a rebinding page's name still is not.
 * Before, both were refused 421. */
static void test_metrics_host_names(void)
{
    const char *extra[] = { "--metrics-allowed-hosts", "metrics-proxy.example", NULL };
    bt_start(extra);
    char out[32768], hostname[256] = "";
    BP_REQUIRE(gethostname(hostname, sizeof hostname - 1) == 0 && hostname[0] != '\0', "this machine has no name");
    int port = bt_broker.metrics_port;
    const char *served[] = { hostname, "metrics-proxy.example", "Metrics-Proxy.example.:443", NULL };
    for (int i = 0; served[i] != NULL; i++) {
        int st = tu_http_get_host(port, "/metrics", served[i], out, sizeof out);
        BP_CHECK(st == 200 && strstr(out, "hourglass_uptime_seconds") != NULL, "Host %s: %d, want 200", served[i], st);
    }
    int st = tu_http_get_host(port, "/metrics", "rebound.example", out, sizeof out);
    BP_CHECK(st == 421 && strstr(out, "metrics-allowed-hosts") != NULL, "Host rebound.example: %d '%.200s', want 421",
             st, out);
}

/* The metrics port bounds what a request may send: a client streaming header lines is answered 400 and closed
 * within the first few MiB (the kernel's socket buffers), where before the broker kept every byte (200 MiB of
 * headers: 220 MiB more RSS) for as long as the client sent. */
static void test_metrics_headers_bounded(void)
{
    bt_start(NULL);
    char reply[512];
    long sent = tu_http_flood_headers(bt_broker.metrics_port, (size_t)64 << 20, reply, sizeof reply);
    BP_REQUIRE(sent >= 0, "connect to the metrics port");
    BP_CHECK(sent < (16L << 20), "the broker took %ld MiB of header lines, want it to close before 16 MiB", sent >> 20);
    BP_CHECK(strncmp(reply, "HTTP/1.1 400", 12) == 0, "reply '%.40s', want 400", reply);
    char out[4096];
    BP_CHECK(tu_http_get(bt_broker.metrics_port, "/healthz", out, sizeof out) == 200, "/healthz after: '%.80s'", out);
}

/* Slowloris on the metrics port: a head trickled a byte every 200 ms is answered 408 and closed 10 s after the
 * accept (before, evhttp's 30 s of silence never came: hours), and past 64 open connections the next is answered 503
 * at once (before, every one was kept until the broker ran out of descriptors). */
static void test_metrics_slowloris(void)
{
    bt_start(NULL);
    int port = bt_broker.metrics_port;
    char reply[512] = "", out[4096];
    double waited = tu_http_trickle(port, 25.0, reply, sizeof reply);
    BP_REQUIRE(waited >= 0, "connect to the metrics port");
    BP_CHECK(waited < 15.0 && strncmp(reply, "HTTP/1.1 408", 12) == 0,
             "a trickled head after %.1f s: '%.80s', want 408 after 10 s", waited, reply);

    int fds[64];
    /* the 64 are accepted (and counted) before the 65th: a request on the last one is answered */
    int filled = tu_http_fill(port, 64, fds, out, sizeof out);
    BP_REQUIRE(filled >= 0, "64 connections to the metrics port");
    BP_CHECK(filled == 1, "the 64th connection's request: '%.80s'", out);
    int st = tu_http_get(port, "/metrics", out, sizeof out);
    BP_CHECK(st == 503 && strstr(out, "the metrics port has 64 connections open (at most 64)") != NULL,
             "past 64 connections: %d '%.300s', want 503", st, out);
    for (int k = 0; k < 64; k++)
        close(fds[k]);
    BP_CHECK(tu_poll_http_status(port, "/metrics", 200, 10000, 50, out, sizeof out) == 0,
             "after the 64 closed: '%.80s', want 200", out);
}

static const tu_test_t auth_tests[] = {
    { "before AUTH only PING AUTH HELLO QUIT", test_unauthenticated },
    { "roles: producer, consumer, viewer, admin", test_roles },
    { "a producer's INFO: the server section alone", test_info_producer },
    { "wrong password: refused, held back, logged; others unaffected", test_wrong_password },
    { "many connections from one address: one verification per held-back failure", test_many_connections },
    { "HELLO 3 AUTH, AUTH default, ACL WHOAMI", test_hello_auth },
    { "SIGHUP reloads the users file", test_reload },
    { "AUTH and HELLO AUTH with the wrong arity: refused, never checked", test_auth_arity },
    { "AUTH and HELLO AUTH inside MULTI: refused, no user switched", test_auth_in_multi },
    { "a user removed while its PULL BLOCK waits: closed, nothing leased to it", test_reload_blocked_pull },
    { "a password changed by SIGHUP: the old one refused, its connections stay", test_password_changed },
    { "auth-timeout: a client that does not log in is closed", test_auth_timeout },
    { "a users file the group or others can read or write is warned about", test_exposed_users_file },
    { "hourglass-cli passwd refuses a password with a NUL byte", test_cli_passwd_nul },
    { "protected mode and allow-remote", test_protected_mode },
    { "CLIENT KILL by ID, ADDR, USER, SKIPME; admin only; logged", test_client_kill },
    { "without users: as before", test_no_users },
    { "the audit log: destructive and admin calls, no reads", test_audited_set },
    { "a user name of 64 bytes logs in", test_long_user_name },
    { "a failed AUTH logs a name only when it is a user's, never control bytes", test_auth_log_names },
    { "a password longer than 1 KiB: refused unhashed, counted as a failure", test_auth_password_too_long },
    { "hourglass-cli passwd refuses a password longer than 1 KiB", test_cli_passwd_long },
    { "INFO shows file-system paths to the admin only", test_info_paths_admin_only },
    { "error replies show file-system paths to the admin only; the log has them", test_error_paths_admin_only },
    { "the metrics port on loopback answers only its own host names (DNS rebinding)", test_metrics_host },
    { "the metrics port answers this machine's name and metrics-allowed-hosts", test_metrics_host_names },
    { "the metrics port bounds a request's headers", test_metrics_headers_bounded },
    { "the metrics port: a trickled head closed after 10 s, at most 64 connections", test_metrics_slowloris },
    { NULL, NULL },
};

int main(int argc, char **argv)
{
    return bt_main_after(argc, argv, "auth", auth_tests, cleanup_users);
}
