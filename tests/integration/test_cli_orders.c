/*
 * tests/integration/test_cli_orders.c — hourglass-cli's order view and its
 * newer habits, run as a child process against the real ./hourglass-broker
 * and a private MariaDB (tu_mariadb_start; a server that cannot start FAILS
 * the suite) on the reference schema.
 *
 * Suite "orders" (database "shop", topic order-timeout, group order-cancel
 * created with MAXRETRY 0 and no consumer running, so nothing cancels behind
 * the test's back):
 *   overdue     one order in each case — lost (outbox 'sent', no message),
 *               never sent (outbox 'new'), delayed (its message waits on a
 *               level), lagging (its message ready, nobody pulls), in the
 *               DLQ — each with the right verdict; an order not due yet and a
 *               paid one are left out; --older-than; --limit pages with a
 *               cursor that --after follows to the end; --json
 *   show        the order, its items, its outbox row, its message, the
 *               verdict; exit 1 for no such order
 *   cancel      the lost order cancelled with reason manual (status, stock
 *               back, outbox row done); again: not-pending; no such order:
 *               exit 1; --reason; it leaves the overdue list
 *   usage       no database key, a bad id, a bad cursor, a bad duration:
 *               exit 2 naming the problem; MariaDB unreachable: exit 3
 *   login       a second broker with a users file and a tls-port: orders
 *               show/overdue with --tls-ca-cert-file, --user and
 *               --password-file see its message; a wrong password, an
 *               untrusted certificate and a refused connection each show
 *               the real reason in the rows; --user without a password is
 *               a usage error
 *   gone        a broker frozen (SIGSTOP) under orders overdue: one wait
 *               of --timeout, the other rows skipped with its reason
 * and, on the same broker:
 *   globals     --json and -u after the command; --config file; --level
 *               checked against the broker's table
 *   dlq pages   dlq list stops at --count and says how to page on; --all
 *               lists every message with progress on stderr; dlq requeue
 *               --all of a small DLQ
 */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include <CUnit/CUnit.h>

#include "include/hourglass/hourglass.h"
#include "include/hourglass/order.h"
#include "tests/helpers/broker_proc.h"
#include "tests/helpers/order_env.h"
#include "tests/helpers/testutil.h"
#include "tests/helpers/tls_certs.h"
#include "tests/helpers/users_file.h"

#include <inttypes.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <mysql.h>

#define CLI_PATH HG_BUILDDIR "/hourglass-cli"
#define DB       "shop"
#define GROUP    "order-cancel"
#define OUT_MAX  65536

static oe_env_t env;
static char uri[64], workdir[512];
static rc_conn_t conn;
static bp_broker_t secure; /* suite login's broker (users, TLS), stopped by orders_cleanup */
static char login_dir[512];
static hg_order_db *handle;
static char out[OUT_MAX];

/* Run hourglass-cli with the command words first, ap (NULL-terminated), then
 * the broker flags login[] (NULL-terminated: --uri and any login flags) and
 * the order database flags (after the command: globals stand anywhere);
 * stdout and stderr into out. Returns the exit status. */
static int cli_run(const char *const *login, const char *first, va_list ap)
{
    tu_argv_t argv;

    tu_argv_init(&argv);
    tu_argv_add_list(&argv, (const char *const[]){ CLI_PATH, first, NULL });
    tu_argv_add_va(&argv, ap);
    tu_argv_add_list(&argv, login);
    tu_argv_add_list(&argv, (const char *const[]){ "--mysql-socket", env.server.socket, "--mysql-user", "root",
                                                   "--mysql-database=" DB, NULL });
    return tu_run_capture_argv(&argv, out, sizeof out);
}

/* cli_run against the suite's broker (--uri uri, no login). */
static int cli(const char *first, ...)
{
    const char *login[] = { "--uri", uri, NULL };
    va_list ap;

    va_start(ap, first);
    int rc = cli_run(login, first, ap);
    va_end(ap);
    return rc;
}

/* Run with exactly these arguments (no database flags, no --uri). */
static int cli_raw(const char *first, ...)
{
    tu_argv_t argv;
    va_list ap;

    tu_argv_init(&argv);
    tu_argv_add_list(&argv, (const char *const[]){ CLI_PATH, first, NULL });
    va_start(ap, first);
    tu_argv_add_va(&argv, ap);
    va_end(ap);
    return tu_run_capture_argv(&argv, out, sizeof out);
}

/* The line of out that starts with prefix after its leading blanks (copied
 * into line), or NULL. */
static const char *line_of(const char *prefix, char *line, size_t len)
{
    size_t plen = strlen(prefix);
    for (const char *p = out; p != NULL && *p != '\0';) {
        p += strspn(p, " ");
        const char *end = strchr(p, '\n');
        size_t l = end != NULL ? (size_t)(end - p) : strlen(p);
        if (l >= plen && strncmp(p, prefix, plen) == 0) {
            snprintf(line, len, "%.*s", (int)l, p);
            return line;
        }
        p = end != NULL ? end + 1 : NULL;
    }
    return NULL;
}

/* Seed one order expiring in expire_in_ms, with one item (test_cancel_manual
 * reads its qty) of 1..2 units and its outbox row 'sent'. */
static int seed(uint64_t id, int64_t expire_in_ms)
{
    return oe_seed_order(&env, DB, id, expire_in_ms, 1, 2);
}

static int send_key(const char *key, const char *opt, const char *value, char *id)
{
    char err[256];
    if (bp_send(&conn, id, HG_ID_MAX, err, sizeof err, OE_TOPIC, key, "KEY", key, opt, value, NULL) != 0) {
        fprintf(stderr, "SEND %s: %s\n", key, err);
        return -1;
    }
    return 0;
}

/* The orders of suite "orders":
 *   101 lost: overdue 120 s, outbox 'sent', no message
 *   102 never sent: overdue 90 s, outbox 'new'
 *   103 delayed: overdue 60 s, its message waits 1 h on a level
 *   104 lagging: overdue 50 s, its message ready in the topic
 *   105 in the DLQ: overdue 40 s, its message NACKed to the DLQ
 *   106 not due yet (expires in 30 min); 107 paid, overdue */
static int orders_init(void)
{
    char err[512], id[HG_ID_MAX];

    if (oe_suite_start(&env, CU_get_number_of_failures) != 0 ||
        tu_mkdtemp("cli-orders", workdir, sizeof workdir) != 0) {
        fprintf(stderr, "\nFAIL: MariaDB, broker or temp dir\n");
        return -1;
    }
    snprintf(uri, sizeof uri, "hourglass://127.0.0.1:%d", env.broker.port);
    if ((handle = oe_fresh_database(&env, DB, 0, NULL)) == NULL) {
        fprintf(stderr, "\nFAIL: database " DB "\n");
        return -1;
    }
    if (bp_connect(&env.broker, &conn, err, sizeof err) != 0 ||
        bp_ok_cmd(&conn, err, sizeof err, "GROUP", "CREATE", GROUP, OE_TOPIC, "FROM", "NOW", "MAXRETRY", "0", NULL) !=
            0) {
        fprintf(stderr, "\nFAIL: broker set-up: %s\n", err);
        return -1;
    }
    if (seed(101, -120000) || seed(102, -90000) || seed(103, -60000) || seed(104, -50000) || seed(105, -40000) ||
        seed(106, 1800000) || seed(107, -30000)) {
        fprintf(stderr, "\nFAIL: seeding the orders\n");
        return -1;
    }
    if (oe_outbox_unsent(&env, DB, 102) != 0 || oe_pay(handle, 107) != 0)
        return -1;
    /* 105 first: PULL takes it, NACK parks it (MAXRETRY 0); then 104 ready. */
    if (oe_park(&conn, GROUP, OE_TOPIC, "105", "105", "test: parked") != 0)
        return -1;
    if (send_key("104", "LEVEL", "0", id) != 0 || send_key("103", "DELAY", "1h", id) != 0)
        return -1;
    return 0;
}

static int orders_cleanup(void)
{
    rc_close(&conn);
    bp_destroy(&secure);
    if (login_dir[0] != '\0')
        tu_rmtree(login_dir);
    hg_order_db_close(handle);
    oe_stop(&env);
    if (workdir[0] != '\0')
        tu_rmtree(workdir);
    return 0;
}

/* The overdue table's row of order id (its line), or NULL. */
static const char *row_of(uint64_t id, char *line, size_t len)
{
    char prefix[32];
    snprintf(prefix, sizeof prefix, "%" PRIu64 " ", id);
    return line_of(prefix, line, len);
}

static void test_overdue_verdicts(void)
{
    char line[1024];
    int rc = cli("orders", "overdue", NULL);

    TU_REQUIRE(rc == 0, "orders overdue: exit %d\n%s", rc, out);
    TU_CHECK(row_of(101, line, sizeof line) && strstr(line, "no-message") && strstr(line, "sent/"),
             "101 (outbox sent, no message) is no-message:\n%s", out);
    TU_CHECK(strstr(line, "lost") != NULL, "the verdict says the message was lost: %s", line);
    TU_CHECK(row_of(102, line, sizeof line) && strstr(line, "not-sent") && strstr(line, "new/0"),
             "102 (outbox new) is not-sent:\n%s", out);
    TU_CHECK(row_of(103, line, sizeof line) && strstr(line, " delayed"), "103 is delayed:\n%s", out);
    TU_CHECK(row_of(104, line, sizeof line) && strstr(line, "consumer-lagging"), "104 is consumer-lagging:\n%s", out);
    TU_CHECK(row_of(105, line, sizeof line) && strstr(line, "in-dlq") && strstr(line, "test: parked"),
             "105 is in-dlq with its reason:\n%s", out);
    TU_CHECK(row_of(106, line, sizeof line) == NULL, "106 is not due yet, not listed:\n%s", out);
    TU_CHECK(row_of(107, line, sizeof line) == NULL, "107 is paid, not listed:\n%s", out);
    /* Oldest first. */
    const char *a = strstr(out, " 101 "), *b = strstr(out, " 105 ");
    TU_CHECK(a != NULL && b != NULL && a < b, "oldest first (101 before 105):\n%s", out);

    rc = cli("orders", "overdue", "--older-than", "70s", NULL);
    TU_CHECK(rc == 0 && row_of(101, line, sizeof line) && row_of(102, line, sizeof line) &&
                 !row_of(103, line, sizeof line) && !row_of(105, line, sizeof line),
             "--older-than 70s: 101 and 102 only:\n%s", out);
}

static void test_overdue_pages_and_json(void)
{
    char cursor[128] = "", line[1024];
    int seen = 0, pages = 0;

    for (;;) {
        int rc = cursor[0] ? cli("orders", "overdue", "--limit", "2", "--after", cursor, NULL)
                           : cli("orders", "overdue", "--limit", "2", NULL);
        TU_REQUIRE(rc == 0, "page %d: exit %d\n%s", pages, rc, out);
        pages++;
        for (uint64_t id = 101; id <= 105; id++)
            seen += row_of(id, line, sizeof line) != NULL;
        const char *more = line_of("more: ", line, sizeof line);
        if (more == NULL)
            break;
        const char *c = strstr(line, "--after ");
        TU_REQUIRE(c != NULL, "the more line names the cursor: %s", line);
        sscanf(c + 8, "%127s", cursor);
        TU_REQUIRE(pages < 10, "paging does not end");
    }
    TU_CHECK(pages == 3 && seen == 5, "5 overdue orders in pages of 2: %d pages, %d rows", pages, seen);

    int rc = cli("--json", "orders", "overdue", "--limit", "1", NULL);
    TU_CHECK(rc == 0 && strncmp(out, "{\"orders\":[{\"id\":101,", 21) == 0 && strstr(out, "\"late\":\"no-message\"") &&
                 strstr(out, "\"next\":\"") && strstr(out, "\"outbox\":{\"status\":\"sent\""),
             "--json: the oldest, its verdict, a next cursor:\n%.600s", out);
}

static void test_show(void)
{
    char line[1024];
    int rc = cli("orders", "show", "105", NULL);

    TU_REQUIRE(rc == 0, "orders show 105: exit %d\n%s", rc, out);
    TU_CHECK(line_of("status:", line, sizeof line) && strstr(line, "pending"), "status pending:\n%s", out);
    TU_CHECK(line_of("items:", line, sizeof line) && strstr(line, "sku ") && strstr(line, " x"), "items:\n%s", out);
    TU_CHECK(line_of("outbox:", line, sizeof line) && strstr(line, "sent"), "outbox row:\n%s", out);
    TU_CHECK(line_of("messages:", line, sizeof line) && strstr(line, " dlq ") && strstr(line, "group " GROUP),
             "its message in the DLQ of " GROUP ":\n%s", out);
    TU_CHECK(line_of("late:", line, sizeof line) && strstr(line, "in-dlq"), "verdict in-dlq:\n%s", out);

    rc = cli("--json", "orders", "show", "103", NULL);
    TU_CHECK(rc == 0 && strstr(out, "\"items\":[{\"sku_id\":") && strstr(out, "\"state\":\"delayed\"") &&
                 strstr(out, "\"where\":\"level "),
             "--json show 103: items, a delayed message on a level:\n%.800s", out);
    TU_CHECK(cli("orders", "show", "99999", NULL) == 1 && strstr(out, "no order 99999"), "no such order: exit 1: %s",
             out);
}

static void test_cancel_manual(void)
{
    char line[1024];
    long long available = oe_scalarf(&env, "SELECT s.available FROM " DB ".stock s JOIN " DB
                                           ".order_items i ON i.sku_id = s.sku_id WHERE i.order_id = 101");
    long long qty = oe_scalarf(&env, "SELECT qty FROM " DB ".order_items WHERE order_id = 101");
    int rc = cli("orders", "cancel", "101", NULL);

    TU_REQUIRE(rc == 0, "orders cancel 101: exit %d\n%s", rc, out);
    TU_CHECK(line_of("outcome:", line, sizeof line) && strstr(line, "cancelled"), "outcome cancelled:\n%s", out);
    TU_CHECK(line_of("cancelled:", line, sizeof line) && strstr(line, "reason manual"), "shows reason manual:\n%s",
             out);
    TU_CHECK(oe_scalarf(&env, "SELECT COUNT(*) FROM " DB ".orders WHERE id = 101 AND status = 'cancelled' AND "
                              "cancel_reason = 'manual' AND cancelled_at IS NOT NULL") == 1,
             "order 101 cancelled in the database with reason manual");
    TU_CHECK(oe_scalarf(&env, "SELECT s.available FROM " DB ".stock s JOIN " DB
                              ".order_items i ON i.sku_id = s.sku_id WHERE i.order_id = 101") == available + qty,
             "stock returned: available %lld + %lld", available, qty);
    TU_CHECK(oe_scalarf(&env, "SELECT COUNT(*) FROM " DB ".order_timeout_msg WHERE order_id = 101 AND "
                              "status = 'done'") == 1,
             "outbox row done");
    rc = cli("orders", "overdue", NULL);
    TU_CHECK(rc == 0 && !row_of(101, line, sizeof line) && row_of(102, line, sizeof line),
             "101 left the overdue list:\n%s", out);

    rc = cli("--json", "orders", "cancel", "101", NULL);
    TU_CHECK(rc == 0 && strstr(out, "{\"outcome\":\"not-pending\"") && strstr(out, "\"cancel_reason\":\"manual\""),
             "second cancel: not-pending, nothing changed:\n%.400s", out);
    rc = cli("orders", "cancel", "102", "--reason", "ops-ticket-7", NULL);
    TU_CHECK(rc == 0 && oe_scalarf(&env, "SELECT COUNT(*) FROM " DB ".orders WHERE id = 102 AND "
                                         "cancel_reason = 'ops-ticket-7'") == 1,
             "--reason recorded: exit %d\n%s", rc, out);
    TU_CHECK(cli("orders", "cancel", "99999", NULL) == 1 && strstr(out, "no order 99999"), "no such order: %s", out);
    TU_CHECK(oe_scalarf(&env, "SELECT status = 'paid' FROM " DB ".orders WHERE id = 107") == 1, "107 stays paid");
}

static void test_usage(void)
{
    int rc = cli_raw("orders", "overdue", "--uri", uri, NULL);
    TU_CHECK(rc == 2 && strstr(out, "mysql-database"), "no database: exit 2 naming the key: %d %s", rc, out);
    TU_CHECK(cli("orders", "show", "12x", NULL) == 2 && strstr(out, "'12x' is not an order id"), "bad id: %s", out);
    TU_CHECK(cli("orders", "overdue", "--after", "2024-01-01", NULL) == 2 && strstr(out, "bad cursor"),
             "bad cursor: %s", out);
    TU_CHECK(cli("orders", "overdue", "--older-than", "soon", NULL) == 2 && strstr(out, "--older-than 'soon'"),
             "bad duration: %s", out);
    TU_CHECK(cli("orders", "overdue", "--limit", "0", NULL) == 2, "limit 0: %s", out);
    TU_CHECK(cli("orders", "bogus", NULL) == 2 && strstr(out, "overdue, show, cancel"), "bad subcommand: %s", out);
    char sock[700];
    snprintf(sock, sizeof sock, "%s/nothing-here.sock", workdir);
    rc = cli_raw("orders", "show", "1", "--mysql-socket", sock, "--mysql-database", DB, NULL);
    TU_CHECK(rc == 3 && strstr(out, "MariaDB"), "MariaDB unreachable: exit 3: %d %s", rc, out);
    /* mysql-password-file (db/keys.h): exclusive with mysql-password, a file that cannot be read named */
    char missing[760];
    snprintf(missing, sizeof missing, "%s/no-such-password", workdir);
    rc = cli_raw("orders", "show", "1", "--mysql-database", DB, "--mysql-password", "x", "--mysql-password-file",
                 missing, NULL);
    TU_CHECK(rc == 2 && strstr(out, "mysql-password and mysql-password-file are both set"), "both: exit %d %s", rc,
             out);
    rc = cli_raw("orders", "show", "1", "--mysql-database", DB, "--mysql-password-file", missing, NULL);
    TU_CHECK(rc == 2 && strstr(out, "mysql-password-file: cannot read the password file"), "missing file: exit %d %s",
             rc, out);
}

/* Run the cli against the secure broker: --uri u, --tls-ca-cert-file ca
 * (NULL: none), --user ops, --password-file pw (NULL: none), the database
 * flags, and the command words (NULL-terminated). Returns the exit code. */
static int cli_login(const char *u, const char *ca, const char *pw, const char *first, ...)
{
    const char *login[9];
    size_t n = 0;
    va_list ap;

    login[n++] = "--uri";
    login[n++] = u;
    if (ca != NULL) {
        login[n++] = "--tls-ca-cert-file";
        login[n++] = ca;
    }
    login[n++] = "--user";
    login[n++] = "ops";
    if (pw != NULL) {
        login[n++] = "--password-file";
        login[n++] = pw;
    }
    login[n] = NULL;
    va_start(ap, first);
    int rc = cli_run(login, first, ap);
    va_end(ap);
    return rc;
}

/* The broker login given with flags (--user, --password-file, --tls-*) is
 * the one orders show/overdue ask the broker with, and when the broker
 * cannot be asked the rows say why. */
static void test_login_flags(void)
{
    const tu_user_t users[] = { { "ops", "viewer", "pw-ops" }, { "shop", "producer", "pw-shop" } };
    char err[4096], path[700], pw[700], bad_pw[700], tls_port[16], tls[80], plain[96], refused[80], line[1024];
    tc_certs_t pki;

    TU_REQUIRE(tu_mkdtemp("cli-orders-login", login_dir, sizeof login_dir) == 0, "temp dir");
    TU_REQUIRE(tc_make(login_dir, &pki, err, sizeof err) == 0, "test PKI: %s", err);
    snprintf(path, sizeof path, "%s/users", login_dir);
    TU_REQUIRE(tu_write_users_file(path, users, 2, err, sizeof err) == 0, "%s", err);
    snprintf(pw, sizeof pw, "%s/ops.pw", login_dir);
    snprintf(bad_pw, sizeof bad_pw, "%s/wrong.pw", login_dir);
    TU_REQUIRE(tu_write_file(pw, "pw-ops\n") == 0 && tu_write_file(bad_pw, "not-the-password\n") == 0, "pw files");
    snprintf(tls_port, sizeof tls_port, "%d", tu_free_port());
    const char *extra[] = { "--fsync",         "no",       "--users-file",   path,           "--tls-port", tls_port,
                            "--tls-cert-file", pki.server, "--tls-key-file", pki.server_key, NULL };
    TU_REQUIRE(bp_start(&secure, extra, err, sizeof err) == 0, "broker with users and TLS: %s", err);
    snprintf(tls, sizeof tls, "hourglass+tls://127.0.0.1:%s", tls_port);
    snprintf(plain, sizeof plain, "hourglass://shop:pw-shop@127.0.0.1:%d", secure.port);
    TU_REQUIRE(cli_raw("--uri", plain, "send", OE_TOPIC, "x", "--key", "103", "--delay", "1h", NULL) == 0,
               "send 103's message to the secure broker: %s", out);

    int rc = cli_login(tls, pki.ca, pw, "orders", "show", "103", NULL);
    TU_CHECK(rc == 0 && line_of("messages:", line, sizeof line) && strstr(line, " delayed "),
             "orders show with --user/--password-file/--tls-ca-cert-file sees the message: exit %d\n%s", rc, out);
    rc = cli_login(tls, pki.ca, pw, "orders", "overdue", NULL);
    TU_CHECK(rc == 0 && row_of(103, line, sizeof line) && strstr(line, " delayed") &&
                 !strstr(out, "could not be asked"),
             "orders overdue with the login flags asks the broker: exit %d\n%s", rc, out);

    rc = cli_login(tls, pki.ca, bad_pw, "orders", "show", "103", NULL);
    TU_CHECK(rc == 0 && line_of("messages:", line, sizeof line) && strstr(line, "unknown (") &&
                 !strstr(line, "no broker connection") && strstr(line, "WRONGPASS"),
             "a wrong password: the broker's refusal in the output: exit %d\n%s", rc, out);
    rc = cli_login(tls, pki.ca, bad_pw, "orders", "overdue", NULL);
    TU_CHECK(rc == 0 && row_of(103, line, sizeof line) && strstr(line, "could not be asked") &&
                 strstr(line, "WRONGPASS"),
             "overdue with a wrong password: each row names the refusal: exit %d\n%s", rc, out);
    rc = cli_login(tls, NULL, pw, "orders", "show", "103", NULL);
    TU_CHECK(rc == 0 && line_of("messages:", line, sizeof line) && strstr(line, "certificate"),
             "no CA: the untrusted certificate named: exit %d\n%s", rc, out);
    snprintf(refused, sizeof refused, "hourglass://127.0.0.1:%d", tu_free_port());
    rc = cli_login(refused, NULL, pw, "orders", "show", "103", NULL);
    TU_CHECK(rc == 0 && line_of("messages:", line, sizeof line) && strstr(line, "refused"),
             "nothing listening: connection refused named: exit %d\n%s", rc, out);
    rc = cli_login(tls, pki.ca, NULL, "orders", "show", "103", NULL);
    TU_CHECK(rc == 2 && strstr(out, "--user 'ops' needs --password-file"),
             "--user without a password: a usage error, exit 2: %d\n%s", rc, out);
}

/* A broker that stops answering once the command is under way (SIGSTOP
 * after nothing: the TCP connect still succeeds, every reply waits): orders
 * overdue asks it for the first row only, waits --timeout once, and marks
 * the rest "not asked" with that reason, one line on stderr saying so —
 * instead of waiting --timeout again for every row. */
#define OVERDUE_TIMEOUT_MS  2000
#define OVERDUE_TIMEOUT_ARG "2000"
static void test_overdue_broker_gone_midway(void)
{
    bp_broker_t frozen;
    char err[4096], u[80], line[1024];
    const char *extra[] = { "--fsync", "no", NULL };

    memset(&frozen, 0, sizeof frozen);
    TU_REQUIRE(bp_start(&frozen, extra, err, sizeof err) == 0, "a broker to freeze: %s", err);
    snprintf(u, sizeof u, "hourglass://127.0.0.1:%d", frozen.port);
    TU_REQUIRE(kill(frozen.pid, SIGSTOP) == 0, "SIGSTOP the broker");
    uint64_t t0 = tu_now_mono_ms();
    int rc = cli_raw("orders", "overdue", "--timeout", OVERDUE_TIMEOUT_ARG, "--uri", u, "--mysql-socket",
                     env.server.socket, "--mysql-user", "root", "--mysql-database=" DB, NULL);
    uint64_t took = tu_now_mono_ms() - t0;
    kill(frozen.pid, SIGCONT);
    bp_destroy(&frozen);
    int rows = 0, asked = 0, not_asked = 0;
    for (uint64_t id = 101; id <= 105; id++) {
        if (row_of(id, line, sizeof line) == NULL)
            continue; /* 101 once test_cancel_manual cancelled it */
        rows++;
        if (strstr(line, "skipped after the failure for order") && strstr(line, "no reply from"))
            not_asked++;
        else if (strstr(line, "no reply from"))
            asked += rows == 1; /* the first row names the broker's silence itself */
    }
    TU_CHECK(rc == 0 && rows >= 3 && asked == 1 && not_asked == rows - 1,
             "the first row asked, the %d after it not asked with its reason: exit %d, %d asked, %d not\n%s", rows - 1,
             rc, asked, not_asked, out);
    TU_CHECK(strstr(out, "orders overdue: the broker did not answer for order ") && strstr(out, "were not asked"),
             "one line says the rest were not asked:\n%s", out);
    /* The counts above are the behaviour; the time confirms it without a
     * guess about the machine's speed: a wait per row cannot take less than
     * rows x --timeout, one wait leaves (rows - 1) x --timeout (>= 4 s) for
     * start-up and the queries on a loaded machine. */
    TU_CHECK(took < (uint64_t)rows * OVERDUE_TIMEOUT_MS,
             "one --timeout %d wait, not one per row: took %llu ms for %d rows\n%s", OVERDUE_TIMEOUT_MS,
             (unsigned long long)took, rows, out);
}

/* ---------------------------------------------------------------- suite cli */

static void test_globals_anywhere(void)
{
    char port_uri[80], conf[700], text[900];

    TU_CHECK(cli_raw("ping", "--json", "-u", uri, NULL) == 0 && strncmp(out, "{\"pong\":true", 12) == 0,
             "ping --json -u URI: %s", out);
    TU_CHECK(cli_raw("levels", "--uri=bogus://x", NULL) == 2, "a bad URI after the command is still read: %s", out);
    snprintf(port_uri, sizeof port_uri, "%s", uri);
    snprintf(conf, sizeof conf, "%s/cli.conf", workdir);
    snprintf(text, sizeof text, "uri = %s\n[mysql]\nmysql-socket = %s\nmysql-user = root\nmysql-database = " DB "\n",
             port_uri, env.server.socket);
    TU_REQUIRE(tu_write_file(conf, text) == 0, "write %s", conf);
    int rc = cli_raw("orders", "show", "106", "--config", conf, NULL);
    TU_CHECK(rc == 0 && strstr(out, "not due yet"), "--config file gives uri and the database: %d\n%s", rc, out);
    rc = cli_raw("-c", conf, "send", OE_TOPIC, "x", "--level", "19", NULL);
    TU_CHECK(rc == 2 && strstr(out, "--level 19 is not a level of this broker (0..18"),
             "--level 19 against the broker's 18 levels: %d %s", rc, out);
    rc = cli_raw("-c", conf, "send", "other", "x", "--level", "18", NULL);
    TU_CHECK(rc == 0, "--level 18 accepted: %d %s", rc, out);
    TU_CHECK(cli_raw("--bogus", "ping", NULL) == 2 && strstr(out, "unknown option '--bogus'"), "unknown global: %s",
             out);
}

static void test_dlq_pages(void)
{
    char err[512], id[HG_ID_MAX], line[1024];
    long long next;

    TU_REQUIRE(bp_ok_cmd(&conn, err, sizeof err, "GROUP", "CREATE", "pg", "pages", "MAXRETRY", "0", NULL) == 0, "%s",
               err);
    for (int i = 0; i < 7; i++) {
        char p[8];
        snprintf(p, sizeof p, "p%d", i);
        TU_REQUIRE(bp_send(&conn, id, sizeof id, err, sizeof err, "pages", p, NULL) == 0, "send: %s", err);
    }
    resp_reply_t *r = bp_pull(&conn, err, sizeof err, "pg", "pages", "COUNT", "7", "BLOCK", "5000", NULL);
    TU_REQUIRE(r != NULL && r->count == 7, "PULL 7: %s", r == NULL ? err : "fewer");
    for (size_t i = 0; i < 7; i++) {
        rc_msg_t m;
        TU_REQUIRE(rc_msg_at(r, i, &m, err, sizeof err) == 0, "message %zu: %s", i, err);
        TU_REQUIRE(bp_int_cmd(&conn, &next, err, sizeof err, "NACK", "pg", m.id, NULL) == 0, "NACK: %s", err);
    }
    resp_reply_free(r);
    int rc = cli("dlq", "list", "pg", "--count", "3", NULL);
    TU_CHECK(rc == 0 && line_of("more: hourglass-cli dlq list pg --after ", line, sizeof line),
             "a full page says how to page on:\n%s", out);
    rc = cli("dlq", "list", "pg", "--count", "7", NULL);
    TU_CHECK(rc == 0 && !strstr(out, "more:"), "all 7 in one page: no more line:\n%s", out);
    rc = cli("dlq", "list", "pg", "--all", NULL);
    TU_CHECK(rc == 0 && strstr(out, "dlq list pg: 7 listed, done"), "--all: progress and the total:\n%s", out);
    rc = cli("--json", "dlq", "list", "pg", "--all", NULL);
    TU_CHECK(rc == 0 && strstr(out, "\"payload\":\"p0\"") && strstr(out, "\"payload\":\"p6\""), "--json --all:\n%s",
             out);
    rc = cli("dlq", "requeue", "pg", "--all", NULL);
    /* 7 entries are one step, answered long before the 300 ms after which the
     * wait would be announced (test_client's admin drop of a big DLQ sees it) */
    TU_CHECK(rc == 0 && strstr(out, "requeued 7 messages"), "requeue --all: the outcome:\n%s", out);
}

static const tu_test_t orders_tests[] = {
    { "overdue: each order's verdict (lost, not sent, delayed, lagging, DLQ)", test_overdue_verdicts },
    { "overdue: pages with --limit/--after, --json", test_overdue_pages_and_json },
    { "show: order, items, outbox, message, verdict", test_show },
    { "cancel: reason manual, idempotent, stock back", test_cancel_manual },
    { "usage errors and an unreachable MariaDB", test_usage },
    { "login flags: --user, --password-file, --tls-* reach the broker; a refusal is named", test_login_flags },
    { "overdue: a broker gone midway is waited for once, the rest not asked", test_overdue_broker_gone_midway },
    { "global flags anywhere, -u, --config, --level against LEVELS", test_globals_anywhere },
    { "dlq list pages, says when there are more, --all", test_dlq_pages },
    { NULL, NULL },
};

static int add_suites(void)
{
    return tu_add_suite("orders", orders_init, orders_cleanup, NULL, NULL, orders_tests);
}

int main(int argc, char **argv)
{
    return oe_cunit_main(argc, argv, add_suites);
}
