/*
 * tests/integration/test_console.c — hourglass-console end to end: a
 * private MariaDB (tu_mariadb_start; a server that cannot start FAILS the
 * suite), the real ./hourglass-broker with a users file (alice admin, bob
 * viewer, carol producer, monitor viewer for the console's sampler, tester
 * for this set-up; scrypt hashes made by tests/helpers/users_file.h), and a real
 * ./hourglass-console on a free port, on a database seeded with orders in
 * every state of the order view and a DLQ with parked messages, after real
 * traffic (sends, deliveries, acks).
 *
 * The checks themselves are Python scripts (Debian's python3, standard
 * library; the browser one Debian's python3-selenium with chromium and
 * chromium-driver), run as children with the set-up in the environment:
 * Suite "console", in order:
 *   api              tests/console/test_api.py: every endpoint; the Host
 *                    check (allowed-hosts console.test, Ops.Example.org);
 *                    logins of the broker's users (admin acts; viewer looks
 *                    and every action is refused 403 and audited; a wrong
 *                    password and an unknown user get the same refusal); the
 *                    refused actions
 *                    (no session, no CSRF token), the DLQ requeue / drop with
 *                    its confirmation, the manual cancel seen in the
 *                    database, the audit log
 *   http             tests/console/test_http.py: the HTTP layer over raw
 *                    sockets: HEAD (headers only, the next reply intact),
 *                    405 with Allow for the other method of every path,
 *                    ambiguous framing or Host (two Content-Length, two
 *                    Host, a blank before a colon) 400 and closed, an
 *                    absolute-form target's host checked, a form or query
 *                    that does not parse 400 naming the part, HTTP/1.1
 *                    without Host 400; slowloris: a trickling client
 *                    answered 408 and a silent one closed after
 *                    header-timeout while others are served, an idle
 *                    kept-alive connection left alone, a connection past
 *                    max-connections answered 503 at once; SIGHUP (the
 *                    console's --config file rewritten) reloads both keys
 *   browser          tests/console/test_browser.py: log in as alice (admin),
 *                    the overview with live figures, "Back up now" and its
 *                    outcome, requeue a DLQ message, delete a topic with
 *                    its retained messages (the confirmation names them),
 *                    find a message by key, cancel an overdue order by hand
 *                    and see it in the database with reason manual; a
 *                    screenshot of every page (1280x800 and a narrow window)
 *                    into tests/console-artifacts/; the browser's console log
 *                    free of errors
 *   hostile          tests/console/test_hostile.py: markup, U+202E, control
 *                    bytes, bytes that are not UTF-8, an emoji and 64 KiB in
 *                    names, keys, payloads, DLQ reasons and order rows: in
 *                    chromium no alert, no element made, no sideways
 *                    overflow, controls shown as escapes; every reply JSON;
 *                    hostile parameters (repeated, huge, wrong type,
 *                    unicode) a 4xx naming them, the console still up
 *   stall            tests/console/test_stall.py: the private MariaDB stopped
 *                    (SIGSTOP): the sampler (its own thread and handle) waits
 *                    on it, while the overview, the broker's pages and the
 *                    session answer at once; once it has waited
 *                    mysql-read-timeout (4 s here), the order pages answer
 *                    503 at once; SIGCONT: it catches up
 *   broker stall     tests/console/test_broker_stall.py: the broker
 *                    stopped (SIGSTOP): once the sampler has waited
 *                    broker-timeout on it, the broker's pages answer 503
 *                    at once, the overdue orders answer at once without
 *                    the broker's half (saying why), an overdue order is
 *                    cancelled by hand; SIGCONT: all answer again
 *   jobs             tests/console/test_jobs.py: the broker stopped
 *                    (SIGSTOP): a purge is answered 202 at once and runs
 *                    as a job while the session, the page, the overview
 *                    and the job's status answer at once; four run at
 *                    most (the fifth 429); SIGCONT: each ends with its
 *                    own outcome
 *   sessions         a console and a broker of its own (case_broker_t),
 *                    tests/console/test_sessions.py: a user name that spells
 *                    the broker's "no users" reply is a wrong login; alice
 *                    demoted to viewer in the users file (SIGHUP): her open
 *                    session's manual cancel is refused 403; removed: it
 *                    ends at its next action (401), its sessions that only
 *                    poll within the console's roles-recheck (2s here, so
 *                    the case waits seconds, not the default 30 s); eight
 *                    sessions per user
 *                    (a ninth login ends the oldest, the table never fills);
 *                    a stale hg_session cookie before the live one, alone
 *                    cleared by its 401 (Max-Age=0); the
 *                    drop's confirmation a whole number; an audit line one
 *                    line; a login opens one broker connection
 *   login flood      a console and a broker of its own (case_broker_t),
 *                    tests/console/test_login_flood.py: a password guesser
 *                    (wrong passwords in a loop, each held back by the
 *                    broker) while an operator's overview answers within
 *                    500 ms every time and a right password from another
 *                    address logs in; the guesser's address backs off (429,
 *                    Retry-After); the broker stopped: four logins wait,
 *                    a fifth and a second from one address are 429 at once,
 *                    a client that closes its socket: its login stopped at
 *                    once (the broker still stopped), no session made
 *   login timeout    a console of its own with login-timeout 3s
 *                    (tests/console/test_login_timeout.py): the broker
 *                    stopped (SIGSTOP), a login is answered 504 within the
 *                    bound, naming the broker's address and the bound,
 *                    while the session and the page answer at once
 *   session ttl      a second console with session-ttl 3s
 *                    (tests/console/test_session_ttl.py): every reply to a
 *                    live session sends the cookie again with Max-Age 3, so
 *                    a session used every second outlives its first 3 s in
 *                    a cookie jar that honours Max-Age; unused, it ends
 *   https            a TLS-only broker (port 0, tls-port; no users) and a
 *                    console serving https (https-cert-file, a throwaway CA of
 *                    tests/helpers/tls_certs.h) connected to it with
 *                    hourglass+tls:// and tls-ca-cert-file:
 *                    tests/console/test_https.py (the API over https, a Secure
 *                    __Host-hg_session cookie, a stale one cleared, the sampler and the sessions over TLS, plain http
 *                    and TLS 1.1 refused, a trickled head answered 408 inside
 *                    TLS, one past max-connections closed unanswered); SIGHUP
 *                    reloads the https
 *                    certificate (the served serial changes)
 *   config           sampler-user without its password file, a tls-* key
 *                    with a plaintext uri, https-cert-file without its key,
 *                    a uri with a password, allowed-hosts with a port,
 *                    login-timeout under 1 s, roles-recheck out of
 *                    1s..1h (its bounds accepted):
 *                    exit 2, named
 *   db password      mysql-password-file (tests/console/test_db_password.py):
 *                    a console of its own as MariaDB user rotator; the
 *                    password rotated (ALTER USER, the file, KILL
 *                    CONNECTION): the next order page and the overview's
 *                    database half answer with the new one; an unreadable
 *                    file keeps the last good one, warned about once
 *   check-config     --check-config: the effective values, then the comment "; hourglass-console:
 *                    configuration OK" last (as the other daemons); a missing
 *                    static-dir or one without index.html: a warning naming it
 *   static-dir       a console whose static-dir is missing: warned once at
 *                    start, each page file's 404 logged once (not per request)
 *   static reload    static-dir changed in the --config file + SIGHUP: the new
 *                    page served; a missing one refused, named, the old kept
 *   sampler login    (a broker of its own) the sampler's user unknown to the
 *                    broker: one warning
 *                    naming the broker, the user and the reply, however many
 *                    samples fail; the user added (SIGHUP): "answers INFO again"
 *   sampler password (a broker of its own) sampler-password-file wrong at
 *                    start, corrected, SIGHUP:
 *                    the change logged, the sampler answers; a wrong one +
 *                    SIGHUP: the working connection refused; corrected
 *                    without SIGHUP: read again after the refused AUTH
 *   stop             SIGHUP: still answering, the re-read logged; SIGTERM
 *                    while a job and a login wait on a stopped broker
 *                    (tests/console/test_jobs_stop.py): the login's client
 *                    answered or closed within 1 s, exit 0 within the stop
 *                    bound (broker-timeout: the sampler's INFO in flight),
 *                    the job's and the login's ends logged
 * The scripts print what failed; a non-zero exit is a failure here. A missing
 * python3, selenium, chromium or chromedriver is a failure, never a skip.
 */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include <CUnit/CUnit.h>

#include "include/hourglass/hourglass.h"
#include "include/hourglass/order.h"
#include "tests/helpers/users_file.h"
#include "tests/helpers/broker_proc.h"
#include "tests/helpers/order_env.h"
#include "tests/helpers/testutil.h"
#include "tests/helpers/tls_certs.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <signal.h>
#include <sys/stat.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <mysql.h>

#define CONSOLE_BIN     HG_BUILDDIR "/hourglass-console"
#define COMPENSATOR_BIN HG_BUILDDIR "/hourglass-compensator"
#define PYTHON          "/usr/bin/python3"
#define DB              "shop"
#define GROUP           "order-cancel"
#define ARTIFACTS       HG_BUILDDIR "/tests/console-artifacts"
#define SCRIPTS         HG_SRCDIR "/tests/console"

static oe_env_t env;
static char uri[64], workdir[512], users_path[600], monitor_pw_path[600], console_conf_path[600];
/* The main console's configuration file: the two keys test_http.py changes
 * and reloads (SIGHUP), restoring this text at its end. */
#define CONSOLE_CONF "[http]\nheader-timeout = 3s\nmax-connections = 40\n"
static rc_conn_t conn;
static hg_order_db *handle;

/* The broker's users: name, roles, password. */
static const char *const users[][3] = {
    { "alice", "admin", "alice-Secret-1" },
    { "bob", "viewer", "bob-Secret-2" },
    { "carol", "producer", "carol-Secret-3" },
    { "monitor", "viewer", "monitor-Secret-4" },
    { "tester", "producer,consumer,admin", "tester-Secret-5" },
};
#define USER_TESTER 4

/* A daemon under test: a console (port: its http port) or the compensator
 * (port: its metrics port). broker and users_file: the broker the console
 * talks to and its users file, told to the scripts (NULL: the suite's). */
typedef struct console_proc {
    const char *name;
    int port;
    pid_t pid;
    char log[700];
    const bp_broker_t *broker;
    const char *users_file;
} console_proc_t;

/* A broker of a case's own, with the suite's users (and the variants
 * test_sessions.py swaps in). The broker holds back each failed AUTH from
 * an address for 200 ms doubling up to 5 s, counting the failures within
 * 60 s of each other, and every console reaches it from 127.0.0.1: on the
 * suite's broker a case whose logins fail pays up to 5 s per failure for
 * the failures of the cases before it. A case whose checks count refused
 * logins gets this broker, where the count starts at none. */
typedef struct case_broker {
    bp_broker_t broker;
    char uri[64];
    char users[700];
} case_broker_t;

static console_proc_t console = { .name = "users" }, compensator = { .name = "compensator" };
static char bob_pw_path[600];

/* A users file at path (cheap scrypt, ln=10): the users, alice with
 * alice_roles (NULL: alice left out). */
static int write_users_file(const char *path, const char *alice_roles)
{
    tu_user_t list[sizeof users / sizeof users[0]];
    size_t n = 0;
    char err[512];
    for (size_t i = 0; i < sizeof users / sizeof users[0]; i++) {
        int alice = strcmp(users[i][0], "alice") == 0;
        if (alice && alice_roles == NULL)
            continue;
        list[n++] = (tu_user_t){ users[i][0], alice ? alice_roles : users[i][1], users[i][2] };
    }
    if (tu_write_users_file(path, list, n, err, sizeof err) != 0) {
        fprintf(stderr, "\nFAIL: %s\n", err);
        return -1;
    }
    return 0;
}

/* The users file at path and its variants for test_sessions.py: path.alice-viewer
 * (alice demoted to viewer), path.no-alice (alice removed). */
static int write_users_files(const char *path)
{
    char variant[800];
    if (write_users_file(path, "admin") != 0)
        return -1;
    snprintf(variant, sizeof variant, "%s.alice-viewer", path);
    if (write_users_file(variant, "viewer") != 0)
        return -1;
    snprintf(variant, sizeof variant, "%s.no-alice", path);
    return write_users_file(variant, NULL);
}

/* The suite's users files and the sampler's password file. */
static int write_users(void)
{
    snprintf(users_path, sizeof users_path, "%s/users", workdir);
    if (write_users_files(users_path) != 0)
        return -1;
    snprintf(monitor_pw_path, sizeof monitor_pw_path, "%s/monitor.password", workdir);
    char pw[128];
    snprintf(pw, sizeof pw, "%s\n", users[3][2]);
    snprintf(bob_pw_path, sizeof bob_pw_path, "%s/bob.password", workdir);
    char bob_pw[128];
    snprintf(bob_pw, sizeof bob_pw, "%s\n", users[1][2]);
    if (tu_write_file(monitor_pw_path, pw) != 0 || tu_write_file(bob_pw_path, bob_pw) != 0) {
        fprintf(stderr, "\nFAIL: cannot write %s\n", users_path);
        return -1;
    }
    return 0;
}

/* One order expiring in expire_in_ms: 1..2 items of 1..3 units, its outbox
 * row 'sent'. */
static int seed(uint64_t id, int64_t expire_in_ms)
{
    return oe_seed_order(&env, DB, id, expire_in_ms, 2, 3);
}

/* oe_park on the test's connection. */
static int park(const char *group, const char *topic, const char *payload, const char *key, const char *reason)
{
    return oe_park(&conn, group, topic, payload, key, reason);
}

/* Real traffic: n messages sent to topic traffic, pulled and acked by group tg. */
static int traffic(int n)
{
    char err[512], id[HG_ID_MAX];
    for (int i = 0; i < n; i++) {
        char p[16];
        snprintf(p, sizeof p, "t%d", i);
        if (bp_send(&conn, id, sizeof id, err, sizeof err, "traffic", p, NULL) != 0)
            goto fail;
    }
    for (int got = 0; got < n;) {
        resp_reply_t *r = bp_pull(&conn, err, sizeof err, "tg", "traffic", "COUNT", "100", "BLOCK", "5000", NULL);
        if (r == NULL || r->count == 0) {
            resp_reply_free(r);
            snprintf(err, sizeof err, "PULL tg: %d of %d", got, n);
            goto fail;
        }
        for (size_t i = 0; i < r->count; i++) {
            rc_msg_t m;
            long long acked;
            if (rc_msg_at(r, i, &m, err, sizeof err) != 0 ||
                bp_int_cmd(&conn, &acked, err, sizeof err, "ACK", "tg", m.id, NULL) != 0) {
                resp_reply_free(r);
                goto fail;
            }
        }
        got += (int)r->count;
        resp_reply_free(r);
    }
    return 0;
fail:
    fprintf(stderr, "\nFAIL: traffic: %s\n", err);
    return -1;
}

static int console_up(void *arg)
{
    char out[512];
    return tu_http_get(((console_proc_t *)arg)->port, "/", out, sizeof out) == 200;
}

/* The console answers HTTP at all (its page may be a 404). */
static int console_answers(void *arg)
{
    char out[512];
    return tu_http_get(((console_proc_t *)arg)->port, "/", out, sizeof out) > 0;
}

typedef struct file_count_wait {
    const char *path, *text;
    int at_least;
} file_count_wait_t;

static int file_count_reached(void *arg)
{
    const file_count_wait_t *w = arg;
    return tu_file_count(w->path, w->text) >= w->at_least;
}

/* Run argv as c (output into c->log) and wait until up(c) says it answers. */
static int start_process(console_proc_t *c, const char *const *argv, int (*up)(void *))
{
    c->pid = fork();
    if (c->pid == 0) {
        int fd = open(c->log, O_WRONLY | O_CREAT | O_TRUNC, 0600);
        if (fd >= 0) {
            dup2(fd, 1);
            dup2(fd, 2);
        }
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        execv(argv[0], (char *const *)argv);
        _exit(127);
    }
    if (c->pid < 0 || tu_poll_until(up, c, 30000, 50) != 0) {
        fprintf(stderr, "\nFAIL: %s (%s) did not answer on port %d\n", argv[0], c->name, c->port);
        oe_print_file(c->log);
        return -1;
    }
    return 0;
}

/* Start c on a free port with the common flags and extra (NULL-terminated);
 * up: how to see that it answers. */
static int start_console(console_proc_t *c, const char *const *extra, int (*up)(void *))
{
    char port[16], static_dir[600];
    const char *argv[64];
    int n = 0;
    c->port = tu_free_port();
    snprintf(port, sizeof port, "%d", c->port);
    snprintf(c->log, sizeof c->log, "%s/console-%s.log", workdir, c->name);
    snprintf(static_dir, sizeof static_dir, "%s/console/static", HG_SRCDIR);
    const char *common[] = { CONSOLE_BIN,
                             "--port",
                             port,
                             "--static-dir",
                             static_dir,
                             "--mysql-socket",
                             env.server.socket,
                             "--mysql-user",
                             "root",
                             "--mysql-database",
                             DB,
                             "--sample-interval",
                             "500ms",
                             "--log-level",
                             "info",
                             NULL };
    for (int i = 0; common[i] != NULL; i++)
        argv[n++] = common[i];
    for (int i = 0; extra != NULL && extra[i] != NULL && n < 63; i++)
        argv[n++] = extra[i];
    argv[n] = NULL;
    return start_process(c, argv, up);
}

static int stop_console(console_proc_t *c)
{
    int status = 0;
    if (c->pid <= 0)
        return 0;
    kill(c->pid, SIGTERM);
    for (int i = 0; i < 500 && waitpid(c->pid, &status, WNOHANG) == 0; i++)
        usleep(20000);
    if (waitpid(c->pid, &status, WNOHANG) == 0) {
        kill(c->pid, SIGKILL);
        waitpid(c->pid, &status, 0);
    }
    c->pid = 0;
    return WIFEXITED(status) && WEXITSTATUS(status) == 0 ? 0 : -1;
}

/* Start cb, a broker of the case tag's own (case_broker_t), with the
 * suite's users in a users file of its own (and its variants). */
static int case_broker_start(case_broker_t *cb, const char *tag)
{
    char err[2048];
    memset(cb, 0, sizeof *cb);
    snprintf(cb->users, sizeof cb->users, "%s/users-%s", workdir, tag);
    if (write_users_files(cb->users) != 0)
        return -1;
    const char *extra[] = { "--users-file", cb->users, NULL };
    if (bp_start(&cb->broker, extra, err, sizeof err) != 0) {
        fprintf(stderr, "\nFAIL: the broker of case %s: %s\n", tag, err);
        return -1;
    }
    snprintf(cb->uri, sizeof cb->uri, "hourglass://127.0.0.1:%d", cb->broker.port);
    return 0;
}

/* Stop cb (SIGCONT first: the case may have left it stopped) and remove its
 * directory. Returns 0 when it stopped cleanly. */
static int case_broker_stop(case_broker_t *cb)
{
    if (cb->broker.pid > 0)
        kill(cb->broker.pid, SIGCONT);
    return bp_destroy(&cb->broker);
}

static int compensator_up(void *arg)
{
    char out[512];
    return tu_http_get(((console_proc_t *)arg)->port, "/metrics", out, sizeof out) == 200;
}

/* A real hourglass-compensator whose /metrics the console reads: the relay
 * and the monitor only (nothing it does changes what the API test expects),
 * logged in as bob — a viewer, so the relay's SEND of order 304's 'new'
 * outbox row is refused (NOPERM): the relay's runs fail, with that error;
 * the monitor's alerts dlq-depth (order-cancel) and overdue-pending hold. */
static int start_compensator(void)
{
    char port[16];
    compensator.port = tu_free_port();
    snprintf(port, sizeof port, "%d", compensator.port);
    snprintf(compensator.log, sizeof compensator.log, "%s/compensator.log", workdir);
    const char *argv[] = { COMPENSATOR_BIN, "--uri", uri, "--user", "bob", "--password-file", bob_pw_path,
                           "--mysql-socket", env.server.socket, "--mysql-user", "root", "--mysql-database", DB,
                           "--layers", "relay,monitor", "--relay-interval", "300ms",
                           /* the refused row is due again at every run: every run fails */
                           "--relay-backoff-base", "100ms", "--relay-backoff-factor", "1", "--relay-backoff-cap",
                           "100ms", "--relay-backoff-jitter", "0", "--monitor-interval", "300ms", "--dlq-groups", GROUP,
                           "--alert-dlq-depth", "1", "--alert-overdue-pending", "1", "--inspect-grace", "1s",
                           "--metrics-port", port, NULL };
    return start_process(&compensator, argv, compensator_up);
}

/* The orders (every state of the order view):
 *   301 lost (outbox sent, no message), overdue 5 min
 *   302 its message parked in the DLQ of order-cancel, overdue 4 min
 *   303 its message delayed 1 h, overdue 3 min
 *   304 never sent (outbox new), overdue 2 min
 *   305 not due yet; 306 paid
 * and three more parked messages in the DLQ of order-cancel (payloads
 * dlq-a, dlq-b, dlq-c with keys ka, kb, kc), two in the DLQ of group junk and two in that of junk2,
 * a message of topic revoke-me with key rv delayed 1 h, and 40 messages of
 * topic traffic sent, delivered to group tg and acked. */
static int console_init(void)
{
    char err[512], id[HG_ID_MAX];

    char start_err[4096];
    if (tu_mkdtemp("console", workdir, sizeof workdir) != 0 || write_users() != 0)
        return -1;
    static char backup_dir[600];
    snprintf(backup_dir, sizeof backup_dir, "%s/backups", workdir);
    if (mkdir(backup_dir, 0700) != 0)
        return -1;
    const char *broker_extra[] = { "--users-file", users_path, "--backup-dir", backup_dir, NULL };
    bp_set_failure_counter(CU_get_number_of_failures);
    if (oe_start(&env, broker_extra, start_err, sizeof start_err) != 0) {
        fprintf(stderr, "\nFAIL: MariaDB or broker: %s\n", start_err);
        return -1;
    }
    snprintf(uri, sizeof uri, "hourglass://127.0.0.1:%d", env.broker.port);
    if ((handle = oe_fresh_database(&env, DB, 0, NULL)) == NULL)
        return -1;
    if (bp_connect(&env.broker, &conn, err, sizeof err) != 0 ||
        bp_ok_cmd(&conn, err, sizeof err, "AUTH", users[USER_TESTER][0], users[USER_TESTER][2], NULL) != 0 ||
        bp_ok_cmd(&conn, err, sizeof err, "GROUP", "CREATE", GROUP, OE_TOPIC, "FROM", "NOW", "MAXRETRY", "0", NULL) !=
            0 ||
        bp_ok_cmd(&conn, err, sizeof err, "GROUP", "CREATE", "tg", "traffic", "FROM", "NOW", NULL) != 0 ||
        bp_ok_cmd(&conn, err, sizeof err, "GROUP", "CREATE", "junk", "junk", "FROM", "NOW", "MAXRETRY", "0", NULL) !=
            0 ||
        bp_ok_cmd(&conn, err, sizeof err, "GROUP", "CREATE", "junk2", "junk2", "FROM", "NOW", "MAXRETRY", "0", NULL) !=
            0) {
        fprintf(stderr, "\nFAIL: broker set-up: %s\n", err);
        return -1;
    }
    if (seed(301, -300000) || seed(302, -240000) || seed(303, -180000) || seed(304, -120000) || seed(305, 1800000) ||
        seed(306, -60000))
        return -1;
    if (oe_outbox_unsent(&env, DB, 304) != 0 || oe_pay(handle, 306) != 0)
        return -1;
    if (park(GROUP, OE_TOPIC, "302", "302", "cancel failed: lock wait timeout") ||
        park(GROUP, OE_TOPIC, "dlq-a", "ka", "test: parked a") ||
        park(GROUP, OE_TOPIC, "dlq-b", "kb", "test: parked b") ||
        park(GROUP, OE_TOPIC, "dlq-c", "kc", "test: parked c"))
        return -1;
    if (park("junk", "junk", "j1", "j1", "junk 1") || park("junk", "junk", "j2", "j2", "junk 2") ||
        park("junk2", "junk2", "j3", "j3", "junk 3") || park("junk2", "junk2", "j4", "j4", "junk 4"))
        return -1;
    if (bp_send(&conn, id, sizeof id, err, sizeof err, OE_TOPIC, "303", "KEY", "303", "DELAY", "1h", NULL) != 0 ||
        bp_send(&conn, id, sizeof id, err, sizeof err, "revoke-me", "x", "KEY", "rv", "DELAY", "1h", NULL) != 0) {
        fprintf(stderr, "\nFAIL: SEND 303 / revoke-me: %s\n", err);
        return -1;
    }
    if (traffic(40) != 0)
        return -1;
    if (start_compensator() != 0)
        return -1;
    char compensator_url[64];
    snprintf(compensator_url, sizeof compensator_url, "http://127.0.0.1:%d/metrics", compensator.port);
    const char *console_extra[] = { "--uri",
                                    uri,
                                    "--sampler-user",
                                    "monitor",
                                    "--sampler-password-file",
                                    monitor_pw_path,
                                    "--compensator-metrics",
                                    compensator_url,
                                    "--mysql-read-timeout", /* the stall test waits for it to pass */
                                    "4s",
                                    "--mysql-lock-wait-timeout", /* below the read timeout, as checked */
                                    "2s",
                                    "--allowed-hosts", /* test_api.py: the Host header */
                                    "console.test, Ops.Example.org",
                                    "--config",        /* test_http.py: header-timeout 3s, max-connections 40; it */
                                    console_conf_path, /* rewrites the file and sends SIGHUP (the reload) */
                                    "--login-timeout", /* test_login_flood.py holds logins on the stopped broker */
                                    "60s",             /* for as long as its checks take, then expects them 200 */
                                    NULL };
    snprintf(console_conf_path, sizeof console_conf_path, "%s/console.conf", workdir);
    if (tu_write_file(console_conf_path, CONSOLE_CONF) != 0) {
        fprintf(stderr, "\nFAIL: cannot write %s\n", console_conf_path);
        return -1;
    }
    if (start_console(&console, console_extra, console_up) != 0)
        return -1;
    return 0;
}

static int console_cleanup(void)
{
    if (stop_console(&console) != 0)
        fprintf(stderr, "the console did not stop cleanly on SIGTERM\n");
    if (stop_console(&compensator) != 0)
        fprintf(stderr, "the compensator did not stop cleanly on SIGTERM\n");
    if (CU_get_number_of_failures() > 0) {
        oe_print_file(console.log);
        oe_print_file(compensator.log);
    }
    rc_close(&conn);
    hg_order_db_close(handle);
    oe_stop(&env);
    if (workdir[0] != '\0')
        tu_rmtree(workdir);
    return 0;
}

/* Run a script of tests/console against the console c with the set-up in
 * its environment (HG_CONSOLE_URL, HG_CONSOLE_LOG, HG_CA_FILE for https,
 * HG_USERS "name=password;…", HG_BROKER_PORT, HG_BROKER_PID and
 * HG_BROKER_AUTH for the traffic, HG_USERS_FILE: c's broker and its users
 * file, the database, HG_ARTIFACTS, HG_WORKDIR, HG_CONSOLE_PID; HG_CONSOLE_CONFIG for the main
 * console, whose file test_http.py rewrites); its output goes to this
 * test's. Returns its exit status. */
static int run_script(const char *script, const console_proc_t *c, const char *scheme, const char *ca_file)
{
    char path[700], url[128], broker_port[16], users_env[1024] = "", auth[256];
    const bp_broker_t *broker = c->broker != NULL ? c->broker : &env.broker;
    snprintf(path, sizeof path, "%s/%s", SCRIPTS, script);
    snprintf(url, sizeof url, "%s://127.0.0.1:%d", scheme, c->port);
    snprintf(broker_port, sizeof broker_port, "%d", broker->port);
    for (size_t i = 0; i < sizeof users / sizeof users[0]; i++)
        snprintf(users_env + strlen(users_env), sizeof users_env - strlen(users_env), "%s%s=%s", i ? ";" : "",
                 users[i][0], users[i][2]);
    snprintf(auth, sizeof auth, "%s=%s", users[USER_TESTER][0], users[USER_TESTER][2]);
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    if (pid == 0) {
        setenv("HG_CONSOLE_URL", url, 1);
        setenv("HG_CONSOLE_LOG", c->log, 1);
        if (ca_file != NULL)
            setenv("HG_CA_FILE", ca_file, 1);
        setenv("HG_USERS", users_env, 1);
        setenv("HG_BROKER_PORT", broker_port, 1);
        setenv("HG_BROKER_AUTH", auth, 1);
        char mysql_pid[24];
        snprintf(mysql_pid, sizeof mysql_pid, "%d", (int)env.server.pid);
        setenv("HG_MYSQL_PID", mysql_pid, 1);
        char broker_pid[24];
        snprintf(broker_pid, sizeof broker_pid, "%d", (int)broker->pid);
        setenv("HG_BROKER_PID", broker_pid, 1);
        setenv("HG_MYSQL_SOCKET", env.server.socket, 1);
        setenv("HG_MYSQL_DATABASE", DB, 1);
        setenv("HG_ARTIFACTS", ARTIFACTS, 1);
        setenv("HG_WORKDIR", workdir, 1);
        setenv("HG_USERS_FILE", c->users_file != NULL ? c->users_file : users_path, 1);
        char console_pid[24];
        snprintf(console_pid, sizeof console_pid, "%d", (int)c->pid);
        setenv("HG_CONSOLE_PID", console_pid, 1);
        if (c == &console)
            setenv("HG_CONSOLE_CONFIG", console_conf_path, 1);
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        execl(PYTHON, PYTHON, path, (char *)NULL);
        fprintf(stderr, "FAIL: cannot run %s %s\n", PYTHON, path);
        _exit(127);
    }
    int status = 0;
    if (pid < 0 || waitpid(pid, &status, 0) != pid)
        return -1;
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

/* A console of its own (c, started with extra) runs script against itself
 * over http; resume (0: none) is sent SIGCONT after the script, whatever it
 * did or did not do (a script may stop a broker for a while). The script's
 * exit, the console's clean stop and, on a failure, its log are the case's. */
static void script_on_own_console(console_proc_t *c, const char *const *extra, const char *script, pid_t resume)
{
    if (start_console(c, extra, console_up) == 0) {
        int rc = run_script(script, c, "http", NULL);
        if (resume > 0)
            kill(resume, SIGCONT);
        TU_CHECK(rc == 0, "tests/console/%s exited %d (its output above says what failed)", script, rc);
    }
    TU_CHECK(stop_console(c) == 0, "the %s console exits 0 on SIGTERM", c->name);
    if (CU_get_number_of_failures() > 0)
        oe_print_file(c->log);
}

static void test_api(void)
{
    int rc = run_script("test_api.py", &console, "http", NULL);
    TU_CHECK(rc == 0, "tests/console/test_api.py exited %d (its output above says what failed)", rc);
}

static void test_hostile(void)
{
    int rc = run_script("test_hostile.py", &console, "http", NULL);
    TU_CHECK(rc == 0, "tests/console/test_hostile.py exited %d (its output above says what failed)", rc);
}

static void test_http(void)
{
    int rc = run_script("test_http.py", &console, "http", NULL);
    TU_CHECK(rc == 0, "tests/console/test_http.py exited %d (its output above says what failed)", rc);
}

static void test_browser(void)
{
    int rc = run_script("test_browser.py", &console, "http", NULL);
    TU_CHECK(rc == 0, "tests/console/test_browser.py exited %d (its output above says what failed)", rc);
    TU_CHECK(oe_scalarf(&env, "SELECT COUNT(*) FROM " DB ".orders WHERE id = 303 AND status = 'cancelled' AND "
                              "cancel_reason = 'manual'") == 1,
             "order 303 cancelled by hand in the browser: in the database with reason manual");
}

static void test_stall(void)
{
    int rc = run_script("test_stall.py", &console, "http", NULL);
    kill(env.server.pid, SIGCONT); /* whatever the script did or did not do */
    TU_CHECK(rc == 0, "tests/console/test_stall.py exited %d (its output above says what failed)", rc);
}

static void test_broker_stall(void)
{
    int rc = run_script("test_broker_stall.py", &console, "http", NULL);
    kill(env.broker.pid, SIGCONT); /* whatever the script did or did not do */
    TU_CHECK(rc == 0, "tests/console/test_broker_stall.py exited %d (its output above says what failed)", rc);
}

/* The DLQ of group junk2 on cb's broker as console_init makes it on the
 * suite's: two parked messages (test_sessions.py drops them). */
static int case_broker_park_junk2(case_broker_t *cb)
{
    rc_conn_t c;
    char err[512];
    if (bp_connect(&cb->broker, &c, err, sizeof err) != 0 ||
        bp_ok_cmd(&c, err, sizeof err, "AUTH", users[USER_TESTER][0], users[USER_TESTER][2], NULL) != 0 ||
        bp_ok_cmd(&c, err, sizeof err, "GROUP", "CREATE", "junk2", "junk2", "FROM", "NOW", "MAXRETRY", "0", NULL) !=
            0) {
        fprintf(stderr, "\nFAIL: junk2 on the case's broker: %s\n", err);
        rc_close(&c);
        return -1;
    }
    int rc = oe_park(&c, "junk2", "junk2", "j3", "j3", "junk 3") || oe_park(&c, "junk2", "junk2", "j4", "j4", "junk 4")
                 ? -1
                 : 0;
    rc_close(&c);
    return rc;
}

/* Roles asked again, sessions per user (test_sessions.py): its own broker
 * (case_broker_t: its wrong logins are held back from the first one on)
 * and a console of its own on it, whose roles-recheck is short, so the
 * removed user's polling sessions end in seconds (the default: 30 s). */
#define SESSIONS_ROLES_RECHECK_S "2"
static void test_sessions(void)
{
    case_broker_t cb;
    TU_REQUIRE(case_broker_start(&cb, "sessions") == 0 && case_broker_park_junk2(&cb) == 0,
               "the sessions case's broker starts, junk2's DLQ parked");
    console_proc_t ss = { .name = "sessions", .broker = &cb.broker, .users_file = cb.users };
    const char *extra[] = { "--uri",
                            cb.uri,
                            "--sampler-user",
                            "monitor",
                            "--sampler-password-file",
                            monitor_pw_path,
                            "--roles-recheck",
                            SESSIONS_ROLES_RECHECK_S "s",
                            NULL };
    setenv("HG_ROLES_RECHECK_S", SESSIONS_ROLES_RECHECK_S, 1); /* the script's bound: --roles-recheck's */
    script_on_own_console(&ss, extra, "test_sessions.py", 0);
    unsetenv("HG_ROLES_RECHECK_S");
    TU_CHECK(case_broker_stop(&cb) == 0, "the sessions case's broker stops cleanly");
}

/* Logins off the event loop: a guesser cannot hold the console, at most
 * four wait on the broker, a backoff per address (test_login_flood.py; it
 * stops the broker for a while). Its own broker (case_broker_t: its checks
 * time the broker's hold of each refused login from the first one on) and a
 * console of its own on it, whose logins may wait as long as the checks take
 * (login-timeout 60s). */
static void test_login_flood(void)
{
    case_broker_t cb;
    TU_REQUIRE(case_broker_start(&cb, "login-flood") == 0, "the login-flood case's broker starts");
    console_proc_t lf = { .name = "login-flood", .broker = &cb.broker, .users_file = cb.users };
    const char *extra[] = {
        "--uri", cb.uri, "--sampler-user", "monitor", "--sampler-password-file", monitor_pw_path, "--login-timeout",
        "60s",   NULL
    };
    script_on_own_console(&lf, extra, "test_login_flood.py", cb.broker.pid);
    TU_CHECK(case_broker_stop(&cb) == 0, "the login-flood case's broker stops cleanly");
}

static void test_jobs(void)
{
    int rc = run_script("test_jobs.py", &console, "http", NULL);
    kill(env.broker.pid, SIGCONT); /* whatever the script did or did not do */
    TU_CHECK(rc == 0, "tests/console/test_jobs.py exited %d (its output above says what failed)", rc);
}

/* A console of its own with a login-timeout of 3 s
 * (tests/console/test_login_timeout.py): the broker stopped, a login is
 * answered 504 within the bound, naming the broker and the bound, while the
 * console serves its sessions. */
static void test_login_timeout(void)
{
    console_proc_t lt = { .name = "login-timeout" };
    const char *extra[] = {
        "--uri", uri, "--sampler-user", "monitor", "--sampler-password-file", monitor_pw_path, "--login-timeout",
        "3s",    NULL
    };
    setenv("HG_LOGIN_TIMEOUT_S", "3", 1); /* the script's bound: --login-timeout's */
    script_on_own_console(&lt, extra, "test_login_timeout.py", env.broker.pid);
    unsetenv("HG_LOGIN_TIMEOUT_S");
}

/* A second console with a session-ttl of 3 s: the session cookie's
 * Max-Age slides with the server's expiry (tests/console/test_session_ttl.py). */
static void test_session_ttl(void)
{
    console_proc_t ttl = { .name = "ttl" };
    const char *extra[] = {
        "--uri", uri, "--sampler-user", "monitor", "--sampler-password-file", monitor_pw_path, "--session-ttl",
        "3s",    NULL
    };
    script_on_own_console(&ttl, extra, "test_session_ttl.py", 0);
}

/* A console with sample-interval 200ms and history 1s: its overview's
 * history stays at 6 samples, the newest, once the ring has wrapped
 * (tests/console/test_history.py). */
static void test_history(void)
{
    console_proc_t hist = { .name = "history" };
    const char *extra[] = { "--uri",
                            uri,
                            "--sampler-user",
                            "monitor",
                            "--sampler-password-file",
                            monitor_pw_path,
                            "--sample-interval",
                            "200ms",
                            "--history",
                            "1s",
                            NULL };
    script_on_own_console(&hist, extra, "test_history.py", 0);
}

/* mysql-password-file: a console of its own connects to MariaDB as
 * 'rotator' (SELECT, UPDATE on the order database) with the password in a
 * file; tests/console/test_db_password.py rotates it (ALTER USER, the file,
 * KILL CONNECTION) and the next order page answers with the new one. */
static void test_db_password(void)
{
    char pwfile[700];
    snprintf(pwfile, sizeof pwfile, "%s/mysql.password", workdir);
    TU_REQUIRE(tu_write_file(pwfile, "pw-one\n") == 0 && chmod(pwfile, 0600) == 0, "write %s", pwfile);
    const char *setup[] = { "DROP USER IF EXISTS 'rotator'@'localhost'",
                            "CREATE USER 'rotator'@'localhost' IDENTIFIED BY 'pw-one'",
                            "GRANT SELECT, UPDATE ON " DB ".* TO 'rotator'@'localhost'" };
    for (size_t i = 0; i < sizeof setup / sizeof setup[0]; i++)
        TU_REQUIRE(mysql_query(env.admin, setup[i]) == 0, "%s: %s", setup[i], mysql_error(env.admin));
    console_proc_t rot = { .name = "dbpw" };
    const char *extra[] = { "--uri",
                            uri,
                            "--sampler-user",
                            "monitor",
                            "--sampler-password-file",
                            monitor_pw_path,
                            "--mysql-user",
                            "rotator",
                            "--mysql-password-file",
                            pwfile,
                            NULL };
    if (start_console(&rot, extra, console_up) == 0) {
        setenv("HG_MYSQL_PASSWORD_FILE", pwfile, 1);
        int rc = run_script("test_db_password.py", &rot, "http", NULL);
        unsetenv("HG_MYSQL_PASSWORD_FILE");
        TU_CHECK(rc == 0, "tests/console/test_db_password.py exited %d (its output above says what failed)", rc);
    }
    TU_CHECK(stop_console(&rot) == 0, "the mysql-password-file console exits 0 on SIGTERM");
    if (CU_get_number_of_failures() > 0)
        oe_print_file(rot.log);
    mysql_query(env.admin, "DROP USER IF EXISTS 'rotator'@'localhost'");
}

/* ---- https in front of a TLS-only broker ---- */

static tc_certs_t pki;
static char https_cert[700];

static int https_up(void *arg)
{
    char serial[64], err[256];
    return tc_peer_serial(((console_proc_t *)arg)->port, pki.ca, serial, sizeof serial, err, sizeof err) == 0;
}

static int tls_broker_up(void *arg)
{
    hg_client_opts_t o;
    hg_client_t *c = NULL;
    hg_error_t e;
    hg_client_opts_init(&o);
    o.tls_ca_file = pki.ca;
    o.connect_timeout_ms = o.read_timeout_ms = 5000;
    o.reconnect = 0;
    if (hg_client_open(arg, &o, &c, &e) != HG_OK)
        return 0;
    const char *ping[] = { "PING" };
    hg_reply_t *r = NULL;
    int ok = hg_client_command(c, 1, ping, NULL, &r) == HG_OK;
    hg_reply_free(r);
    hg_client_close(c);
    return ok;
}

static void test_https(void)
{
    char dir[600], err[2048], tls_port[16], tls_uri[128], serial[64];
    bp_broker_t broker;
    console_proc_t https = { .name = "https" };

    memset(&broker, 0, sizeof broker);
    snprintf(dir, sizeof dir, "%s/pki", workdir);
    TU_REQUIRE(mkdir(dir, 0700) == 0 && tc_make(dir, &pki, err, sizeof err) == 0, "throwaway CA: %s", err);
    snprintf(https_cert, sizeof https_cert, "%s/https.pem", dir);
    TU_REQUIRE(tc_copy_file(pki.server, https_cert) == 0, "copy %s", pki.server);
    snprintf(tls_port, sizeof tls_port, "%d", tu_free_port());
    snprintf(tls_uri, sizeof tls_uri, "hourglass+tls://127.0.0.1:%s", tls_port);
    /* TLS only: started with both ports first (bp_start's readiness is a
     * plaintext PING), then again with --port 0 (the last --port wins) */
    const char *broker_flags[] = { "--tls-port",   tls_port, "--tls-cert-file", pki.server, "--tls-key-file",
                                   pki.server_key, NULL };
    TU_REQUIRE(bp_start(&broker, broker_flags, err, sizeof err) == 0 && bp_stop(&broker, err, sizeof err) == 0,
               "broker with tls-port: %s", err);
    broker.extra[broker.nextra++] = strdup("--port");
    broker.extra[broker.nextra++] = strdup("0");
    TU_REQUIRE(bp_spawn(&broker, err, sizeof err) == 0, "TLS-only broker: %s", err);
    TU_CHECK(tu_poll_until(tls_broker_up, tls_uri, 60000, 50) == 0, "the TLS-only broker answers PING over TLS");
    TU_CHECK(tu_wait_file_contains(broker.log_path, "(TLS only)", 20000) == 0, "and says it is TLS only");

    const char *extra[] = { "--uri",
                            tls_uri,
                            "--tls-ca-cert-file",
                            pki.ca,
                            "--https-cert-file",
                            https_cert,
                            "--https-key-file",
                            pki.server_key,
                            "--no-users-role",
                            "viewer",
                            "--header-timeout", /* test_https.py: the 408 over TLS, the refusal past */
                            "2s",               /* max-connections unanswered (it knows these two values) */
                            "--max-connections",
                            "8",
                            NULL };
    if (start_console(&https, extra, https_up) == 0) {
        TU_CHECK(tu_wait_file_contains(https.log, "listening on https://", 5000) == 0, "the console says https");
        int rc = run_script("test_https.py", &https, "https", pki.ca);
        TU_CHECK(rc == 0, "tests/console/test_https.py exited %d (its output above says what failed)", rc);

        /* certificate rotation: the file replaced in place, SIGHUP */
        TU_CHECK(tc_peer_serial(https.port, pki.ca, serial, sizeof serial, err, sizeof err) == 0 &&
                     strcmp(serial, TC_SERIAL_SERVER) == 0,
                 "the console serves the first certificate (serial %s, want %s; %s)", serial, TC_SERIAL_SERVER, err);
        TU_CHECK(tc_copy_file(pki.server2, https_cert) == 0 && kill(https.pid, SIGHUP) == 0, "replace and SIGHUP");
        TU_CHECK(tu_wait_file_contains(https.log, "SIGHUP: reloaded https certificate", 10000) == 0,
                 "SIGHUP reloads the https certificate (logged)");
        TU_CHECK(tc_peer_serial(https.port, pki.ca, serial, sizeof serial, err, sizeof err) == 0 &&
                     strcmp(serial, TC_SERIAL_SERVER2) == 0,
                 "new connections get the new certificate (serial %s, want %s; %s)", serial, TC_SERIAL_SERVER2, err);
        TU_CHECK(tu_write_file(https_cert, "not a certificate\n") == 0 && kill(https.pid, SIGHUP) == 0,
                 "a broken file and SIGHUP");
        TU_CHECK(tu_wait_file_contains(https.log, "https certificate not reloaded, keeping the one in use", 10000) == 0,
                 "a file that does not load is refused (logged)");
        TU_CHECK(tc_peer_serial(https.port, pki.ca, serial, sizeof serial, err, sizeof err) == 0 &&
                     strcmp(serial, TC_SERIAL_SERVER2) == 0,
                 "and the certificate in use stays (serial %s)", serial);
    }
    TU_CHECK(stop_console(&https) == 0, "the https console exits 0 on SIGTERM");
    if (CU_get_number_of_failures() > 0)
        oe_print_file(https.log);
    TU_CHECK(bp_destroy(&broker) == 0, "the TLS-only broker stops cleanly");
}

static void test_config(void)
{
    char out[2048];
    const char *argv[] = { CONSOLE_BIN, "--check-config", "--mysql-database", DB, "--sampler-user", "monitor", NULL };
    int rc = tu_run_capture(argv, out, sizeof out);
    TU_CHECK(rc == 2 && strstr(out, "sampler-user 'monitor' needs sampler-password-file") != NULL,
             "sampler-user without sampler-password-file: exit 2 naming both keys (exit %d: %s)", rc, out);
    /* sampler-password-file others can read: warned as mysql-password-file is (it was silent) */
    char pwdir[256], pwfile[300];
    TU_REQUIRE(tu_mkdtemp("console-pw", pwdir, sizeof pwdir) == 0, "mkdtemp");
    snprintf(pwfile, sizeof pwfile, "%s/monitor.password", pwdir);
    TU_REQUIRE(tu_write_file(pwfile, "pw-monitor\n") == 0 && chmod(pwfile, 0644) == 0, "write %s", pwfile);
    const char *exposed[] = { CONSOLE_BIN,
                              "--check-config",
                              "--mysql-database",
                              DB,
                              "--sampler-user",
                              "monitor",
                              "--sampler-password-file",
                              pwfile,
                              NULL };
    rc = tu_run_capture(exposed, out, sizeof out);
    TU_CHECK(rc == 0 && strstr(out, "warning: sampler-password-file: ") && strstr(out, "readable by every user"),
             "sampler-password-file (mode 0644): exit %d: %s", rc, out);
    tu_rmtree(pwdir);
    const char *plain_tls[] = { CONSOLE_BIN, "--check-config", "--mysql-database", DB, "--tls-ca-cert-file", "ca.pem",
                                NULL };
    rc = tu_run_capture(plain_tls, out, sizeof out);
    TU_CHECK(rc == 2 && strstr(out, "tls-ca-cert-file is set but uri is neither hourglass+tls:// nor amqps://") != NULL,
             "a tls-* key with a plaintext uri: exit 2 (exit %d: %s)", rc, out);
    const char *half_https[] = { CONSOLE_BIN, "--check-config", "--mysql-database", DB, "--https-cert-file", "c.pem",
                                 NULL };
    rc = tu_run_capture(half_https, out, sizeof out);
    TU_CHECK(rc == 2 && strstr(out, "https-cert-file is set without https-key-file") != NULL,
             "https-cert-file without https-key-file: exit 2 (exit %d: %s)", rc, out);
    const char *bad_host[] = { CONSOLE_BIN, "--check-config",  "--mysql-database",
                               DB,          "--allowed-hosts", "ok.example, bad.example:80",
                               NULL };
    rc = tu_run_capture(bad_host, out, sizeof out);
    TU_CHECK(rc == 2 && strstr(out, "allowed-hosts: 'bad.example:80' is not a host name") != NULL,
             "allowed-hosts with a port: exit 2 naming the entry (exit %d: %s)", rc, out);
    const char *short_login[] = { CONSOLE_BIN, "--check-config", "--mysql-database", DB, "--login-timeout", "500ms",
                                  NULL };
    rc = tu_run_capture(short_login, out, sizeof out);
    TU_CHECK(rc == 2 && strstr(out, "login-timeout: '500ms' out of range 1s..10m") != NULL,
             "login-timeout under 1 s: exit 2 naming the key and its range (exit %d: %s)", rc, out);
    /* roles-recheck: 1s..1h, the bounds themselves accepted */
    static const struct {
        const char *value;
        int exit;
    } rechecks[] = { { "999ms", 2 }, { "1s", 0 }, { "1h", 0 }, { "3600001ms", 2 }, { "0s", 2 } };
    for (size_t i = 0; i < sizeof rechecks / sizeof rechecks[0]; i++) {
        const char *recheck[] = { CONSOLE_BIN, "--check-config",  "--mysql-database",
                                  DB,          "--roles-recheck", rechecks[i].value,
                                  NULL };
        char want[128];
        snprintf(want, sizeof want, "roles-recheck: '%s' out of range 1s..1h", rechecks[i].value);
        rc = tu_run_capture(recheck, out, sizeof out);
        TU_CHECK(rc == rechecks[i].exit && (rc == 0) == (strstr(out, want) == NULL),
                 "roles-recheck %s: exit %d (want %d), naming the key and its range when refused: %s",
                 rechecks[i].value, rc, rechecks[i].exit, out);
    }
    const char *with_password[] = { CONSOLE_BIN, "--check-config", "--mysql-database",
                                    DB,          "--uri",          "hourglass://monitor:pw-Secret@127.0.0.1:7379",
                                    NULL };
    rc = tu_run_capture(with_password, out, sizeof out);
    TU_CHECK(rc == 2 && strstr(out, "uri: holds a user name or password") != NULL && strstr(out, "pw-Secret") == NULL,
             "a uri with a password (the overview shows uri to viewers): exit 2, the password not echoed (exit %d: %s)",
             rc, out);
}

/* --check-config ends with the comment "; hourglass-console: configuration OK" as the other daemons' do,
 * after the effective values (a comment, so the output reads back as a configuration file); a static-dir the page cannot be served from is a warning naming it (exit 0: the API
 * works without the page). */
static void test_check_config_output(void)
{
    static char out[16384];
    char static_dir[600], conf[700], want[1600];
    snprintf(static_dir, sizeof static_dir, "%s/console/static", HG_SRCDIR);
    const char *ok[] = { CONSOLE_BIN, "--check-config", "--mysql-database", DB, "--static-dir", static_dir, NULL };
    int rc = tu_run_capture(ok, out, sizeof out);
    size_t len = strlen(out);
    const char *tail = "\n; hourglass-console: configuration OK\n";
    TU_CHECK(rc == 0 && len > strlen(tail) && strcmp(out + len - strlen(tail), tail) == 0 &&
                 strncmp(out, "# hourglass-console ", 20) == 0 && strstr(out, "warning") == NULL,
             "--check-config: the effective values, then '; hourglass-console: configuration OK' last, no warning "
             "(exit %d: %s)",
             rc, out);
    snprintf(conf, sizeof conf, "%s/check.conf", workdir);
    TU_REQUIRE(tu_write_file(conf, "[mysql]\nmysql-database = " DB "\n") == 0, "write %s", conf);
    const char *with_file[] = { CONSOLE_BIN, "--check-config", "--config", conf, "--static-dir", static_dir, NULL };
    rc = tu_run_capture(with_file, out, sizeof out);
    snprintf(want, sizeof want, "\n; hourglass-console: configuration OK (%s)\n", conf);
    TU_CHECK(rc == 0 && strstr(out, want) != NULL, "--check-config --config FILE: '%s' (exit %d: %s)", want + 1, rc,
             out);

    char missing[700];
    snprintf(missing, sizeof missing, "%s/no-such-static", workdir);
    const char *no_page[] = { CONSOLE_BIN, "--check-config", "--mysql-database", DB, "--static-dir", missing, NULL };
    rc = tu_run_capture(no_page, out, sizeof out);
    snprintf(want, sizeof want, "hourglass-console: warning: static-dir %s: No such file or directory", missing);
    TU_CHECK(rc == 0 && strstr(out, want) != NULL && strstr(out, "configuration OK") != NULL,
             "--check-config with a missing static-dir: warned, named (exit %d: %s)", rc, out);
    char empty[700];
    snprintf(empty, sizeof empty, "%s/empty-static", workdir);
    TU_REQUIRE(mkdir(empty, 0700) == 0 || errno == EEXIST, "mkdir %s", empty);
    const char *no_index[] = { CONSOLE_BIN, "--check-config", "--mysql-database", DB, "--static-dir", empty, NULL };
    rc = tu_run_capture(no_index, out, sizeof out);
    snprintf(want, sizeof want, "warning: static-dir %s: %s/index.html: No such file or directory", empty, empty);
    TU_CHECK(rc == 0 && strstr(out, want) != NULL,
             "--check-config with a static-dir without index.html: named (exit %d: %s)", rc, out);
}

/* A console whose static-dir is missing warns once at start, and its pages' 404s are logged once, not one
 * line per request. */
static void test_static_dir_missing(void)
{
    char missing[700], want[1600], out[512];
    snprintf(missing, sizeof missing, "%s/no-such-static", workdir);
    console_proc_t np = { .name = "no-page" };
    const char *extra[] = {
        "--uri", uri, "--sampler-user", "monitor", "--sampler-password-file", monitor_pw_path, "--static-dir",
        missing, NULL
    };
    if (start_console(&np, extra, console_answers) == 0) {
        snprintf(want, sizeof want, "static-dir %s: No such file or directory: every page would answer 404", missing);
        TU_CHECK(tu_wait_file_contains(np.log, want, 10000) == 0, "the start warns of the missing static-dir");
        for (int i = 0; i < 5; i++)
            TU_CHECK(tu_http_get(np.port, i % 2 ? "/orders" : "/", out, sizeof out) == 404, "a page answers 404");
        TU_CHECK(tu_http_get(np.port, "/app.js", out, sizeof out) == 404, "app.js answers 404");
        snprintf(want, sizeof want, "page file %s/index.html: No such file or directory", missing);
        TU_CHECK(tu_file_count(np.log, want) == 1, "five requests for index.html: its error logged once (%d times)",
                 tu_file_count(np.log, want));
        snprintf(want, sizeof want, "page file %s/app.js: No such file or directory", missing);
        TU_CHECK(tu_file_count(np.log, want) == 1, "app.js's error logged once too (%d times)",
                 tu_file_count(np.log, want));
    }
    TU_CHECK(stop_console(&np) == 0, "the console without its page exits 0 on SIGTERM");
    if (CU_get_number_of_failures() > 0)
        oe_print_file(np.log);
}

/* static-dir is reloaded on SIGHUP, to a directory the page can be served from: a console started with
 * static-dir in its --config file (no flag: a flag would win over the file); the file names a copy of the page
 * (its index.html marked), SIGHUP: the change logged, the copy served; a missing directory, SIGHUP: an error naming
 * it and why, the copy still served; --check-config warns of the missing one as before. */
static void test_static_dir_reload(void)
{
    char conf[700], page_b[700], missing[700], path[800], text[1600], want[2400], out[512], port[16];
    snprintf(conf, sizeof conf, "%s/static-reload.conf", workdir);
    snprintf(page_b, sizeof page_b, "%s/page-b", workdir);
    snprintf(missing, sizeof missing, "%s/no-such-page", workdir);
    TU_REQUIRE(mkdir(page_b, 0700) == 0 || errno == EEXIST, "mkdir %s", page_b);
    static const char *const files[][2] = { { "index.html", "<!doctype html><title>page-b-marker</title>\n" },
                                            { "app.js", "\n" },
                                            { "app.css", "\n" },
                                            { "favicon.svg", "<svg xmlns=\"http://www.w3.org/2000/svg\"/>\n" } };
    for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
        snprintf(path, sizeof path, "%s/%s", page_b, files[i][0]);
        TU_REQUIRE(tu_write_file(path, files[i][1]) == 0, "write %s", path);
    }
    snprintf(text, sizeof text, "[http]\nstatic-dir = %s/console/static\n", HG_SRCDIR);
    TU_REQUIRE(tu_write_file(conf, text) == 0, "write %s", conf);

    console_proc_t sd = { .name = "static-reload" };
    sd.port = tu_free_port();
    snprintf(port, sizeof port, "%d", sd.port);
    snprintf(sd.log, sizeof sd.log, "%s/console-%s.log", workdir, sd.name);
    const char *argv[] = { CONSOLE_BIN,
                           "--config",
                           conf,
                           "--port",
                           port,
                           "--uri",
                           uri,
                           "--sampler-user",
                           "monitor",
                           "--sampler-password-file",
                           monitor_pw_path,
                           "--mysql-socket",
                           env.server.socket,
                           "--mysql-user",
                           "root",
                           "--mysql-database",
                           DB,
                           "--log-level",
                           "info",
                           NULL };
    TU_REQUIRE(start_process(&sd, argv, console_up) == 0, "start the console, static-dir in its file");
    TU_CHECK(tu_http_get(sd.port, "/", out, sizeof out) == 200 && strstr(out, "page-b-marker") == NULL,
             "the page of the source tree is served");

    /* a directory the page can be served from: applied */
    snprintf(text, sizeof text, "[http]\nstatic-dir = %s\n", page_b);
    TU_REQUIRE(tu_write_file(conf, text) == 0 && kill(sd.pid, SIGHUP) == 0, "static-dir page-b + SIGHUP");
    snprintf(want, sizeof want, "SIGHUP: static-dir %s/console/static -> %s", HG_SRCDIR, page_b);
    TU_CHECK(tu_wait_file_contains(sd.log, want, 10000) == 0, "the change is logged: '%s'", want);
    TU_CHECK(tu_http_get(sd.port, "/orders", out, sizeof out) == 200 && strstr(out, "page-b-marker") != NULL,
             "the new page is served without a restart: %.200s", out);

    /* a missing one: refused, named, the running one kept */
    snprintf(text, sizeof text, "[http]\nstatic-dir = %s\n", missing);
    TU_REQUIRE(tu_write_file(conf, text) == 0 && kill(sd.pid, SIGHUP) == 0, "static-dir missing + SIGHUP");
    snprintf(want, sizeof want,
             "SIGHUP: static-dir %s: No such file or directory: every page would answer 404; keeping static-dir %s",
             missing, page_b);
    TU_CHECK(tu_wait_file_contains(sd.log, want, 10000) == 0, "the bad directory is refused, named: '%s'", want);
    TU_CHECK(tu_wait_file_contains(sd.log, "SIGHUP: configuration re-read, nothing changed", 10000) == 0,
             "and nothing else changed");
    TU_CHECK(tu_http_get(sd.port, "/", out, sizeof out) == 200 && strstr(out, "page-b-marker") != NULL,
             "the running page is still served: %.200s", out);
    TU_CHECK(stop_console(&sd) == 0, "the static-reload console exits 0 on SIGTERM");
    if (CU_get_number_of_failures() > 0)
        oe_print_file(sd.log);
}

/* The sampler's broker login fails (its user not in the broker's users file): the console's log says so once,
 * naming the broker, the user and the broker's reply, however many samples fail; the user added (SIGHUP to the
 * broker): an info line says the broker answers again. On a broker of its own (case_broker_t): the refusals it
 * waits for are held back from the first one on, not 5 s each after the earlier cases' refused logins. */
static void test_sampler_login(void)
{
    char err[512], pw_path[700], watcher_users[700];
    const char *user = "sampler-watcher", *password = "watcher-Secret-6";
    snprintf(pw_path, sizeof pw_path, "%s/watcher.password", workdir);
    TU_REQUIRE(tu_write_file(pw_path, "watcher-Secret-6\n") == 0, "write %s", pw_path);
    case_broker_t cb;
    TU_REQUIRE(case_broker_start(&cb, "sampler-login") == 0, "the sampler-login case's broker starts");
    console_proc_t w = { .name = "sampler-login", .broker = &cb.broker, .users_file = cb.users };
    /* the broker holds a failed AUTH's reply back up to 5 s per failure from the address: a broker-timeout above
     * that, so the sampler gets the broker's refusal, never its own timeout */
    const char *extra[] = {
        "--uri", cb.uri, "--sampler-user", user, "--sampler-password-file", pw_path, "--broker-timeout", "20s", NULL
    };
    char failed[64];
    snprintf(failed, sizeof failed, "for unknown user (%zu bytes)", strlen(user));
    int failed_before = tu_file_count(cb.broker.log_path, failed);
    TU_REQUIRE(start_console(&w, extra, console_up) == 0, "start the console with sampler-user %s", user);
    char want[600];
    snprintf(want, sizeof want, "sampler: the broker at %s, as user %s, does not answer INFO: ", cb.uri, user);
    TU_CHECK(tu_wait_file_contains(w.log, want, 60000) == 0, "the failed login is logged: '%s'", want);
    TU_CHECK(tu_file_count(w.log, "does not answer INFO: authentication as 'sampler-watcher' failed: WRONGPASS invalid "
                                  "username-password pair") == 1,
             "with the broker's reply");
    /* several samples fail (the broker logs each AUTH of this unknown name, by its length), one line still */
    file_count_wait_t fails = { cb.broker.log_path, failed, failed_before + 3 };
    TU_CHECK(tu_poll_until(file_count_reached, &fails, 90000, 50) == 0, "the broker refused three AUTHs (%d)",
             tu_file_count(cb.broker.log_path, failed) - failed_before);
    TU_CHECK(tu_file_count(w.log, want) == 1, "three failed samples, one warning (%d)", tu_file_count(w.log, want));

    /* the user added to the broker's users file: the sampler logs in, an info line says so */
    snprintf(watcher_users, sizeof watcher_users, "%s/users.watcher", workdir);
    tu_user_t list[sizeof users / sizeof users[0] + 1];
    size_t n = 0;
    for (size_t i = 0; i < sizeof users / sizeof users[0]; i++)
        list[n++] = (tu_user_t){ users[i][0], users[i][1], users[i][2] };
    list[n++] = (tu_user_t){ user, "viewer", password };
    TU_REQUIRE(tu_write_users_file(watcher_users, list, n, err, sizeof err) == 0, "%s", err);
    TU_REQUIRE(rename(watcher_users, cb.users) == 0 && kill(cb.broker.pid, SIGHUP) == 0, "users file + SIGHUP");
    snprintf(want, sizeof want, "sampler: the broker at %s answers INFO again, as user %s", cb.uri, user);
    TU_CHECK(tu_wait_file_contains(w.log, want, 60000) == 0, "the recovery is logged: '%s'", want);
    TU_CHECK(stop_console(&w) == 0, "the sampler-login console exits 0 on SIGTERM");
    /* the users file as it was, the broker told */
    TU_CHECK(write_users_file(cb.users, "admin") == 0 && kill(cb.broker.pid, SIGHUP) == 0, "users file restored");
    if (CU_get_number_of_failures() > 0)
        oe_print_file(w.log);
    TU_CHECK(case_broker_stop(&cb) == 0, "the sampler-login case's broker stops cleanly");
}

/* Replace path's text in one step (rename): a sampler reading it never sees it half written. */
static int replace_file(const char *path, const char *text)
{
    char tmp[800];
    snprintf(tmp, sizeof tmp, "%s.new", path);
    return tu_write_file(tmp, text) == 0 && rename(tmp, path) == 0 ? 0 : -1;
}

/* sampler-password-file is read again without a restart: a console started with a wrong password for monitor
 * (its sampler refused); the file corrected and SIGHUP: the new password is logged and the sampler answers; a wrong
 * one written and SIGHUP: its working connection is dropped and the refusal logged; the file corrected without a
 * SIGHUP: the refused AUTH reads it again, the next sample logs in. On a broker of its own (case_broker_t), as
 * test_sampler_login. */
static void test_sampler_password(void)
{
    char pw_path[700], right[128], changed[900], again[600];
    snprintf(pw_path, sizeof pw_path, "%s/sampler-rotate.password", workdir);
    snprintf(right, sizeof right, "%s\n", users[3][2]);
    TU_REQUIRE(replace_file(pw_path, "wrong-Sampler-Secret\n") == 0, "write %s", pw_path);
    case_broker_t cb;
    TU_REQUIRE(case_broker_start(&cb, "sampler-password") == 0, "the sampler-password case's broker starts");
    console_proc_t sp = { .name = "sampler-password", .broker = &cb.broker, .users_file = cb.users };
    /* broker-timeout above the broker's hold of a refused AUTH (as test_sampler_login) */
    const char *extra[] = { "--uri",
                            cb.uri,
                            "--sampler-user",
                            "monitor",
                            "--sampler-password-file",
                            pw_path,
                            "--broker-timeout",
                            "20s",
                            "--sample-interval",
                            "1s",
                            NULL };
    TU_REQUIRE(start_console(&sp, extra, console_up) == 0, "start the console with a wrong sampler password");
    const char *refused = "does not answer INFO: authentication as 'monitor' failed: WRONGPASS";
    snprintf(changed, sizeof changed, "sampler-password-file %s holds another password", pw_path);
    snprintf(again, sizeof again, "sampler: the broker at %s answers INFO again, as user monitor", cb.uri);
    TU_CHECK(tu_wait_file_contains(sp.log, refused, 60000) == 0, "the wrong password is refused, logged");

    /* corrected, SIGHUP */
    TU_REQUIRE(replace_file(pw_path, right) == 0 && kill(sp.pid, SIGHUP) == 0, "the right password + SIGHUP");
    TU_CHECK(tu_wait_file_contains(sp.log, changed, 60000) == 0, "the new password is logged: '%s'", changed);
    TU_CHECK(tu_wait_file_contains(sp.log, again, 60000) == 0, "the sampler logs in with it: '%s'", again);

    /* a wrong one, SIGHUP: the working connection is opened again with it and refused */
    TU_REQUIRE(replace_file(pw_path, "wrong-Sampler-Secret\n") == 0 && kill(sp.pid, SIGHUP) == 0,
               "a wrong password + SIGHUP");
    file_count_wait_t w = { sp.log, changed, 2 };
    TU_CHECK(tu_poll_until(file_count_reached, &w, 60000, 50) == 0, "SIGHUP: the changed file logged again (%d)",
             tu_file_count(sp.log, changed));
    w = (file_count_wait_t){ sp.log, refused, 2 };
    TU_CHECK(tu_poll_until(file_count_reached, &w, 60000, 50) == 0,
             "the sampler logged in again with the file's password: refused (%d)", tu_file_count(sp.log, refused));

    /* corrected, no SIGHUP: the next refused AUTH reads the file again */
    TU_REQUIRE(replace_file(pw_path, right) == 0, "the right password, no SIGHUP");
    w = (file_count_wait_t){ sp.log, again, 2 };
    TU_CHECK(tu_poll_until(file_count_reached, &w, 60000, 50) == 0,
             "after a refused AUTH the file is read again and the sampler answers (%d)", tu_file_count(sp.log, again));
    TU_CHECK(tu_file_count(sp.log, changed) == 3, "each change logged once (%d)", tu_file_count(sp.log, changed));
    TU_CHECK(tu_file_count(sp.log, "Sampler-Secret") == 0 && tu_file_count(sp.log, users[3][2]) == 0,
             "no password is ever logged");
    TU_CHECK(stop_console(&sp) == 0, "the sampler-password console exits 0 on SIGTERM");
    if (CU_get_number_of_failures() > 0)
        oe_print_file(sp.log);
    TU_CHECK(case_broker_stop(&cb) == 0, "the sampler-password case's broker stops cleanly");
}

static void test_stop(void)
{
    char out[512];
    TU_REQUIRE(kill(console.pid, SIGHUP) == 0, "SIGHUP to the console");
    TU_CHECK(tu_wait_file_contains(console.log, "SIGHUP: configuration re-read", 10000) == 0,
             "SIGHUP re-reads the configuration (logged)");
    TU_CHECK(tu_http_get(console.port, "/", out, sizeof out) == 200, "and the console still answers");
    /* SIGTERM (sent by the script) while a job and a login wait on a stopped broker: their waits end, the
     * console exits 0 */
    int rc = run_script("test_jobs_stop.py", &console, "http", NULL); /* it stops the broker, then the console */
    TU_CHECK(rc == 0, "tests/console/test_jobs_stop.py exited %d (its output above says what failed)", rc);
    int stopped = stop_console(&console);
    kill(env.broker.pid, SIGCONT);
    TU_CHECK(stopped == 0, "the console exits 0 on SIGTERM, a job and a login waiting on the stopped broker");
    TU_CHECK(tu_wait_file_contains(console.log, "stopping: 1 console job still waiting on the broker: stopped", 5000) ==
                 0,
             "the shutdown says it stopped the job");
    TU_CHECK(tu_wait_file_contains(console.log, "topic delete topic=stop-me purge=1 stopped: the console stopped",
                                   5000) == 0,
             "and the job's audit line says how it ended");
    TU_CHECK(tu_wait_file_contains(console.log,
                                   "stopping: 1 login still waiting on the broker: stopped, its connection closed",
                                   5000) == 0,
             "the shutdown says it stopped the login");
    TU_CHECK(tu_wait_file_contains(console.log, "stopped", 5000) == 0, "and logs that it stopped");
}

/* One set-up for all (console_init). Each script needs only that set-up and
 * makes anything else itself, so each passes alone
 * (`test_console console "<its name>"`); the API test counts the set-up
 * exactly (four parked, four overdue), so it runs first. */
static const tu_test_t console_tests[] = {
    { "api: every endpoint, refusals, DLQ, manual cancel, audit", test_api },
    { "http: HEAD, 405 with Allow, ambiguous framing or Host, absolute targets, unparsable forms, slowloris",
      test_http },
    { "browser: login, overview, requeue, find, manual cancel, screenshots", test_browser },
    { "hostile: markup, control bytes, bad UTF-8 shown as text; hostile API parameters a 4xx", test_hostile },
    { "stall: MariaDB stopped (SIGSTOP): the overview and the broker's pages answer at once", test_stall },
    { "broker stall: the broker stopped (SIGSTOP): its pages 503 at once, the order pages and a manual cancel work",
      test_broker_stall },
    { "jobs: DLQ … ALL and a purge run off the loop: the broker stopped, every page answers; four at most", test_jobs },
    { "sessions: roles asked again, a removed user's session ended, sessions per user, the no-users reply",
      test_sessions },
    { "login flood: a guesser holds nobody's page; four logins wait at most; a backoff per address", test_login_flood },
    { "login timeout: the broker stopped, a login is answered 504 within login-timeout, naming the broker",
      test_login_timeout },
    { "session ttl: the cookie's Max-Age slides with the session's expiry", test_session_ttl },
    { "history: the overview keeps history / sample-interval + 1 samples, the newest, once full", test_history },
    { "https: the console over https, in front of a TLS-only broker; SIGHUP reloads the certificate", test_https },
    { "config: sampler-user needs its password file, tls-* keys a TLS uri, https both files, roles-recheck 1s..1h",
      test_config },
    { "mysql-password-file: a rotated MariaDB password is read again at the reconnect", test_db_password },
    { "check-config: the effective values, then 'configuration OK'; a static-dir without the page warned",
      test_check_config_output },
    { "static-dir missing: warned once at start, each page file's 404 logged once", test_static_dir_missing },
    { "static-dir reload: a new page directory applied on SIGHUP, a bad one refused and named",
      test_static_dir_reload },
    { "sampler login: its broker login refused is logged once, named; its recovery logged", test_sampler_login },
    { "sampler password: sampler-password-file read again on SIGHUP and after a refused AUTH", test_sampler_password },
    { "SIGHUP: alive, configuration re-read; SIGTERM: a clean stop", test_stop },
    { NULL, NULL },
};

static int add_suites(void)
{
    return tu_add_suite("console", console_init, console_cleanup, NULL, NULL, console_tests);
}

int main(int argc, char **argv)
{
    return oe_cunit_main(argc, argv, add_suites);
}
