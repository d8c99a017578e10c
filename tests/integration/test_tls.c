/*
 * tests/integration/test_tls.c — TLS between libhourglass (and stock tools)
 * and the real hourglass-broker, with a throwaway CA made by the test
 * (tests/helpers/tls_certs.h: the openssl command in the test's temp dir).
 *
 * Each test makes its PKI and starts its own broker with a plaintext port
 * and a tls-port (free ports, fresh temp dirs). Checks:
 *  - round trip through the library over TLS (by IP and by name): 2 000
 *    pipelined SENDs of 1 KiB, PULLed back (replies of many TLS records);
 *    the send bound counts the handshake (hg_client_send_bound_ms);
 *  - the broker's certificate: signed by another CA, expired, or issued to
 *    another name is refused by the library at once (no reconnect rounds),
 *    with the reason; the broker logs the client's refusal;
 *  - mutual TLS (tls-auth-clients yes): a client without a certificate or
 *    with one from another CA is refused and logged, one with the test CA's
 *    certificate gets in;
 *  - tls-auth-clients-user cn: a client certificate logs its connection in
 *    as the user its CN names (ACL WHOAMI); without one, or when the users
 *    file no longer has that user, or its subject has two CNs (which one
 *    would it be?), AUTH is needed (NOAUTH) and logged;
 *  - tls-crl-file: a client certificate revoked in the CRL is refused (the
 *    client and the log say "revoked"), another gets in; SIGHUP reads a new
 *    CRL, and a file with no CRL keeps the last one;
 *  - plaintext on the TLS port and TLS on the plaintext port: each refused
 *    with a log line naming it, while a client on the right port keeps
 *    working; the plaintext client is told in RESP;
 *  - a handshake trickled a byte a second (a slowloris on the handshake) is
 *    closed 10 s after the accept and logged, although bytes keep coming;
 *  - tls-max-handshakes-per-address: with that many handshakes of one
 *    address in progress, its next connection is closed before any TLS
 *    (INFO tls_handshakes_refused, logged) while another address's is
 *    taken; one ending frees a slot for a full TLS client;
 *  - TLS only (port 0 with tls-port);
 *  - TLS connections are seen: INFO tls_port and connected_tls_clients,
 *    CLIENT LIST tls=yes|no, /metrics hourglass_tls_*; a client beyond
 *    max-clients on the TLS port is closed without a plaintext byte and
 *    the log says so;
 *  - clients from other hosts (this machine's own non-loopback address):
 *    with allow-remote and TLS, served on the TLS port and told DENIED on
 *    the plaintext port (logged), while loopback clients keep both; with
 *    allow-remote-plaintext yes the plaintext port serves them too;
 *  - openssl s_client and redis-cli --tls (Debian's redis-tools 7) against it;
 *  - hourglass-cli's --tls-* flags (mutual TLS), the daemons' shared tls-*
 *    keys checked (hourglass-compensator --check-config);
 *  - bad tls-* keys and unreadable or mismatched files stop the start-up
 *    with the key, file and reason, and --check-config says the same;
 *  - SIGHUP: a replaced certificate is served to new connections (its
 *    serial), open connections keep working; a broken file keeps the old
 *    certificate and the log says why; a key file its group can read is
 *    warned about, naming it and its mode.
 *
 * Waits poll with generous deadlines (tu_poll_until, tu_wait_file_contains).
 * Run one suite: ./tests/integration/test_tls SUITE (library, mtls, mixups,
 * tools, reload).
 */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include <hourglass/hourglass.h>

#include <arpa/inet.h>
#include <fcntl.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <CUnit/CUnit.h>

#include "tests/helpers/broker_proc.h"
#include "tests/helpers/testutil.h"
#include "tests/helpers/tls_certs.h"
#include "tests/helpers/users_file.h"

#define REDIS_CLI "/usr/bin/redis-cli"
#define CLI_BIN   HG_BUILDDIR "/hourglass-cli"
#define COMP_BIN  HG_BUILDDIR "/hourglass-compensator"
#define NMSG      2000
#define MSG_BYTES 1024

static bp_broker_t B;
static tc_certs_t PKI;
static char PKI_DIR[512];
static int TLS_PORT;
static char TLS_PORT_S[16];

static void setup(void)
{
    char err[4096];
    memset(&B, 0, sizeof B);
    TU_REQUIRE(tu_mkdtemp("tls-pki", PKI_DIR, sizeof PKI_DIR) == 0, "cannot make a temp dir");
    TU_REQUIRE(tc_make(PKI_DIR, &PKI, err, sizeof err) == 0, "making the test PKI: %s", err);
    TLS_PORT = tu_free_port();
    TU_REQUIRE(TLS_PORT > 0, "no free port");
    snprintf(TLS_PORT_S, sizeof TLS_PORT_S, "%d", TLS_PORT);
}

static void teardown(void)
{
    bp_destroy(&B);
    if (PKI_DIR[0] != '\0' && getenv("HG_KEEP_TMP") == NULL) {
        tu_rmtree(PKI_DIR);
    }
    PKI_DIR[0] = '\0';
}

/* Start the broker with a tls-port serving cert, plus more flags (NULL-ended). */
static void start_tls_broker(const char *cert, const char *more0, ...)
{
    const char *extra[BP_MAX_EXTRA];
    int n = 0;
    extra[n++] = "--tls-port";
    extra[n++] = TLS_PORT_S;
    extra[n++] = "--tls-cert-file";
    extra[n++] = cert;
    extra[n++] = "--tls-key-file";
    extra[n++] = PKI.server_key;
    va_list ap;
    va_start(ap, more0);
    for (const char *a = more0; a != NULL && n < BP_MAX_EXTRA - 1; a = va_arg(ap, const char *)) {
        extra[n++] = a;
    }
    va_end(ap);
    extra[n] = NULL;
    char err[2048];
    TU_REQUIRE(bp_start(&B, extra, err, sizeof err) == 0, "broker start: %s", err);
}

/* hourglass+tls://HOST:TLS_PORT?ca=CA[&cert=..&key=..] into uri. */
static void tls_uri(char *uri, size_t len, const char *host, const char *ca, const char *cert, const char *key)
{
    int n = snprintf(uri, len, "hourglass+tls://%s:%d?ca=%s", host, TLS_PORT, ca);
    if (cert != NULL) {
        snprintf(uri + n, len - (size_t)n, "&cert=%s&key=%s", cert, key);
    }
}

/* Options that fail fast: one connection attempt, short timeouts. */
static void quick_opts(hg_client_opts_t *o)
{
    hg_client_opts_init(o);
    o->connect_timeout_ms = 10000;
    o->read_timeout_ms = 10000;
    o->reconnect = 0;
}

/* PING through c: 1 when +PONG came back. */
static int ping_ok(hg_client_t *c)
{
    const char *argv[] = { "PING" };
    hg_reply_t *r = NULL;
    if (hg_client_command(c, 1, argv, NULL, &r) != HG_OK) {
        return 0;
    }
    size_t len = 0;
    const char *s = hg_reply_str(r, &len);
    int ok = s != NULL && len == 4 && memcmp(s, "PONG", 4) == 0;
    hg_reply_free(r);
    return ok;
}

/* Open uri and PING: HG_OK, or the failing code with its message in msg. */
static hg_err_t open_and_ping(const char *uri, const hg_client_opts_t *o, char *msg, size_t msglen)
{
    hg_client_t *c = NULL;
    hg_error_t e;
    hg_err_t rc = hg_client_open(uri, o, &c, &e);
    if (rc != HG_OK) {
        snprintf(msg, msglen, "%s", e.message);
        return rc;
    }
    rc = ping_ok(c) ? HG_OK : hg_client_errcode(c);
    snprintf(msg, msglen, "%s", hg_client_errmsg(c));
    if (rc == HG_OK && msg[0] == '\0') {
        snprintf(msg, msglen, "PONG");
    }
    hg_client_close(c);
    return rc == HG_OK ? HG_OK : (rc == HG_OK ? HG_ERR_PROTOCOL : rc);
}

/* ------------------------------------------------------------------------
 * library
 * ------------------------------------------------------------------------ */

static void test_roundtrip(void)
{
    start_tls_broker(PKI.server, NULL);
    char uri[2048];
    hg_client_opts_t o;
    hg_error_t e;
    hg_client_t *c = NULL;
    quick_opts(&o);
    tls_uri(uri, sizeof uri, "127.0.0.1", PKI.ca, NULL, NULL);
    TU_REQUIRE(hg_client_open(uri, &o, &c, &e) == HG_OK, "open %s: %s", uri, e.message);
    /* hg_client_send_bound_ms counts the handshake's own connect timeout: a
     * round is the TCP connect and the handshake (10 s each, one attempt) and
     * the replies (10 s); four rounds */
    TU_CHECK(hg_client_send_bound_ms(c) == 4 * (10000 + 10000 + 10000), "send bound over TLS: %" PRIu64 " ms",
             hg_client_send_bound_ms(c));

    static char payload[MSG_BYTES];
    static hg_send_item_t items[NMSG];
    memset(payload, 'p', sizeof payload);
    for (int i = 0; i < NMSG; i++) {
        memset(&items[i], 0, sizeof items[i]);
        items[i].topic = "tls-topic";
        items[i].payload = payload;
        items[i].payload_len = sizeof payload;
        items[i].delay = hg_delay_none();
    }
    const char *create[] = { "GROUP", "CREATE", "tls-group", "tls-topic", "FROM", "FIRST" };
    hg_reply_t *r = NULL;
    TU_REQUIRE(hg_client_command(c, 6, create, NULL, &r) == HG_OK, "GROUP CREATE: %s", hg_client_errmsg(c));
    hg_reply_free(r);
    size_t ok = 0;
    hg_err_t rc = hg_send_many(c, items, NMSG, &ok);
    TU_REQUIRE(rc == HG_OK && ok == NMSG, "hg_send_many over TLS: %s, %zu of %d ok (%s)", hg_strerror(rc), ok, NMSG,
               hg_client_errmsg(c));

    size_t pulled = 0, bytes = 0;
    while (pulled < NMSG) {
        const char *pull[] = { "PULL", "tls-group", "tls-topic", "COUNT", "1000" };
        r = NULL;
        TU_REQUIRE(hg_client_command(c, 5, pull, NULL, &r) == HG_OK, "PULL: %s", hg_client_errmsg(c));
        size_t n = hg_reply_count(r);
        for (size_t i = 0; i < n; i++) {
            size_t len = 0;
            hg_reply_str(hg_reply_element(hg_reply_element(r, i), 3), &len);
            bytes += len;
        }
        hg_reply_free(r);
        TU_REQUIRE(n > 0, "PULL returned nothing after %zu of %d", pulled, NMSG);
        pulled += n;
    }
    TU_CHECK(pulled == NMSG && bytes == (size_t)NMSG * MSG_BYTES, "pulled %zu messages, %zu bytes; want %d, %d", pulled,
             bytes, NMSG, NMSG * MSG_BYTES);
    /* A clone shares the TLS context, outlives the client it came from, and connects verified. */
    hg_client_t *clone = NULL;
    TU_REQUIRE(hg_client_clone(c, &clone, &e) == HG_OK, "clone: %s", e.message);
    hg_client_close(c);
    const char *ping[] = { "PING" };
    r = NULL;
    TU_CHECK(hg_client_command(clone, 1, ping, NULL, &r) == HG_OK && hg_reply_str(r, NULL) != NULL,
             "PING on a clone of a TLS client, its source closed: %s", hg_client_errmsg(clone));
    hg_reply_free(r);
    hg_client_close(clone);

    /* By name: the certificate's DNS SAN. */
    char msg[512];
    tls_uri(uri, sizeof uri, "localhost", PKI.ca, NULL, NULL);
    TU_CHECK(open_and_ping(uri, &o, msg, sizeof msg) == HG_OK, "%s: %s", uri, msg);
    /* The CA as an option instead of a URI parameter. */
    o.tls_ca_file = PKI.ca;
    snprintf(uri, sizeof uri, "hourglass+tls://127.0.0.1:%d", TLS_PORT);
    TU_CHECK(open_and_ping(uri, &o, msg, sizeof msg) == HG_OK, "%s with tls_ca_file: %s", uri, msg);
}

/* The broker's certificate refused: fast (no reconnect rounds) and named. */
static void check_refused(const char *uri, const char *want)
{
    hg_client_opts_t o;
    hg_client_opts_init(&o); /* reconnect on: a refused certificate must still fail at once */
    char msg[512];
    uint64_t t0 = tu_now_mono_ms();
    hg_err_t rc = open_and_ping(uri, &o, msg, sizeof msg);
    uint64_t took = tu_now_mono_ms() - t0;
    TU_CHECK(rc == HG_ERR_CONNECT, "%s: got %s (%s), want HG_ERR_CONNECT", uri, hg_strerror(rc), msg);
    TU_CHECK(strstr(msg, want) != NULL, "%s: message '%s' lacks '%s'", uri, msg, want);
    TU_CHECK(strstr(msg, "attempts") == NULL && took < 5000, "%s: retried (%llu ms): %s", uri, (unsigned long long)took,
             msg);
}

static void test_wrong_ca_and_name(void)
{
    start_tls_broker(PKI.server, NULL);
    char uri[2048];
    tls_uri(uri, sizeof uri, "127.0.0.1", PKI.other_ca, NULL, NULL);
    check_refused(uri, "not trusted: unable to get local issuer certificate");
    TU_CHECK(tu_wait_file_contains(B.log_path, "refused the broker's certificate", 20000) == 0,
             "the broker did not log the client's refusal");
    snprintf(uri, sizeof uri, "hourglass+tls://127.0.0.1:%d?ca=%s&sni=other.example", TLS_PORT, PKI.ca);
    check_refused(uri, "hostname mismatch");
    /* The system trust store does not know the test CA. */
    snprintf(uri, sizeof uri, "hourglass+tls://127.0.0.1:%d", TLS_PORT);
    check_refused(uri, "not trusted");
}

/* Is something listening on 127.0.0.1:*port? */
static int port_listens(void *arg)
{
    int fd = tu_tcp_connect(*(int *)arg);
    if (fd < 0)
        return 0;
    close(fd);
    return 1;
}

/* The client offers TLS 1.2 ECDHE + AEAD suites only: a server (openssl s_server) that accepts nothing but a CBC /
 * SHA-1 suite finds no cipher in common, and the connect fails at the handshake. Before, the client offered
 * OpenSSL's defaults and agreed to ECDHE-ECDSA-AES256-SHA. */
static void test_client_ciphers(void)
{
    int port = tu_free_port();
    TU_REQUIRE(port > 0, "no free port");
    char accept_arg[32];
    snprintf(accept_arg, sizeof accept_arg, "%d", port);
    pid_t pid = fork();
    if (pid == 0) {
        int null = open("/dev/null", O_RDWR);
        dup2(null, 0);
        dup2(null, 1);
        dup2(null, 2);
        execl(TC_OPENSSL, TC_OPENSSL, "s_server", "-accept", accept_arg, "-cert", PKI.server, "-key", PKI.server_key,
              "-tls1_2", "-cipher", "ECDHE-ECDSA-AES256-SHA", "-quiet", (char *)NULL);
        _exit(127);
    }
    TU_REQUIRE(pid > 0, "fork");
    int up = tu_poll_until(port_listens, &port, 10000, 20) == 0;
    char uri[2048];
    snprintf(uri, sizeof uri, "hourglass+tls://127.0.0.1:%d?ca=%s", port, PKI.ca);
    if (up) {
        hg_client_opts_t o;
        hg_client_opts_init(&o);
        char msg[512];
        hg_err_t rc = open_and_ping(uri, &o, msg, sizeof msg);
        TU_CHECK(rc == HG_ERR_CONNECT && strstr(msg, "TLS handshake failed") != NULL,
                 "a CBC-only server: got %s (%s), want HG_ERR_CONNECT, TLS handshake failed", hg_strerror(rc), msg);
    }
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
    TU_CHECK(up, "openssl s_server did not listen on %d", port);
}

static void test_expired(void)
{
    start_tls_broker(PKI.expired, NULL);
    TU_CHECK(bp_log_contains(&B, "has EXPIRED"), "no start-up warning about the expired certificate");
    char uri[2048];
    tls_uri(uri, sizeof uri, "127.0.0.1", PKI.ca, NULL, NULL);
    check_refused(uri, "certificate has expired");
}

static void test_bad_files(void)
{
    hg_client_t *c = NULL;
    hg_error_t e;
    char uri[2048];
    TLS_PORT = 1; /* never reached: the files fail first */
    snprintf(uri, sizeof uri, "hourglass+tls://127.0.0.1:%d?ca=%s/nope.pem", TLS_PORT, PKI_DIR);
    TU_CHECK(hg_client_open(uri, NULL, &c, &e) == HG_ERR_ARG && strstr(e.message, "nope.pem: No such file") != NULL,
             "missing CA file: %s", e.message);
    snprintf(uri, sizeof uri, "hourglass+tls://127.0.0.1:1?ca=%s&cert=%s", PKI.ca, PKI.client);
    TU_CHECK(hg_client_open(uri, NULL, &c, &e) == HG_ERR_ARG && strstr(e.message, "needs its key") != NULL,
             "cert without key: %s", e.message);
    snprintf(uri, sizeof uri, "hourglass+tls://127.0.0.1:1?ca=%s&cert=%s&key=%s", PKI.ca, PKI.client,
             PKI.other_client_key);
    TU_CHECK(hg_client_open(uri, NULL, &c, &e) == HG_ERR_ARG && strstr(e.message, "TLS key file") != NULL,
             "a key of another certificate: %s", e.message);
    snprintf(uri, sizeof uri, "hourglass+tls://127.0.0.1:1?ca=%s&bogus=1", PKI.ca);
    TU_CHECK(hg_client_open(uri, NULL, &c, &e) == HG_ERR_URI && strstr(e.message, "unknown URI parameter 'bogus'"),
             "unknown parameter: %s", e.message);
    TU_CHECK(c == NULL, "a client was returned on failure");
}

/* ------------------------------------------------------------------------
 * mutual TLS
 * ------------------------------------------------------------------------ */

static void test_mtls(void)
{
    start_tls_broker(PKI.server, "--tls-auth-clients", "yes", "--tls-ca-cert-file", PKI.ca, NULL);
    char uri[2048], msg[512];
    hg_client_opts_t o;
    quick_opts(&o);

    tls_uri(uri, sizeof uri, "127.0.0.1", PKI.ca, PKI.client, PKI.client_key);
    TU_CHECK(open_and_ping(uri, &o, msg, sizeof msg) == HG_OK, "with the CA's client certificate: %s", msg);

    tls_uri(uri, sizeof uri, "127.0.0.1", PKI.ca, NULL, NULL);
    hg_err_t rc = open_and_ping(uri, &o, msg, sizeof msg);
    TU_CHECK(rc != HG_OK, "a client without a certificate got in");
    TU_CHECK(strstr(msg, "certificate required") != NULL, "without a certificate: %s: %s", hg_strerror(rc), msg);
    TU_CHECK(tu_wait_file_contains(B.log_path, "the client sent no certificate", 20000) == 0,
             "the broker did not log the missing client certificate");

    tls_uri(uri, sizeof uri, "127.0.0.1", PKI.ca, PKI.other_client, PKI.other_client_key);
    rc = open_and_ping(uri, &o, msg, sizeof msg);
    TU_CHECK(rc != HG_OK, "a client certificate of another CA got in");
    TU_CHECK(tu_wait_file_contains(B.log_path,
                                   "certificate verify failed (the client's certificate: unable to get local issuer",
                                   20000) == 0,
             "the broker did not log the untrusted client certificate");

    /* hourglass-cli with the --tls-* flags: in with the certificate (exit 0),
     * refused without (exit 3: cannot reach the broker). */
    char cli_uri[128], out[8192];
    snprintf(cli_uri, sizeof cli_uri, "hourglass+tls://127.0.0.1:%d", TLS_PORT);
    const char *cli_ok[] = {
        CLI_BIN,        "--uri", cli_uri, "--tls-ca-cert-file", PKI.ca, "--tls-cert-file", PKI.client, "--tls-key-file",
        PKI.client_key, "ping",  NULL
    };
    int exit_code = tu_run_capture(cli_ok, out, sizeof out);
    TU_CHECK(exit_code == 0 && strstr(out, "PONG") != NULL, "hourglass-cli with a certificate: exit %d: %s", exit_code,
             out);
    const char *cli_no_cert[] = { CLI_BIN, "--uri", cli_uri, "--tls-ca-cert-file", PKI.ca, "ping", NULL };
    exit_code = tu_run_capture(cli_no_cert, out, sizeof out);
    TU_CHECK(exit_code == 3 && strstr(out, "certificate required") != NULL,
             "hourglass-cli without a certificate: exit %d: %s", exit_code, out);
    /* Without --tls-ca-cert-file the system's trust store is used: the error says which flag names the CA. */
    const char *cli_no_ca[] = { CLI_BIN, "--uri", cli_uri, "ping", NULL };
    exit_code = tu_run_capture(cli_no_ca, out, sizeof out);
    TU_CHECK(exit_code == 3 && strstr(out, "not trusted") != NULL && strstr(out, "--tls-ca-cert-file FILE") != NULL,
             "hourglass-cli without --tls-ca-cert-file: exit %d: %s", exit_code, out);

    /* The options instead of URI parameters. */
    o.tls_ca_file = PKI.ca;
    o.tls_cert_file = PKI.client;
    o.tls_key_file = PKI.client_key;
    snprintf(uri, sizeof uri, "hourglass+tls://localhost:%d", TLS_PORT);
    TU_CHECK(open_and_ping(uri, &o, msg, sizeof msg) == HG_OK, "client certificate by options: %s", msg);
}

/* tls-crl-file: the client revoked in the CRL is refused and logged, the
 * others get in; SIGHUP reads a new CRL (and a bad one keeps the old). */
static void test_crl(void)
{
    char live_crl[700], uri[2048], msg[512];
    snprintf(live_crl, sizeof live_crl, "%s/live-crl.pem", PKI_DIR);
    TU_REQUIRE(tc_copy_file(PKI.crl, live_crl) == 0, "copy the CRL");
    start_tls_broker(PKI.server, "--tls-auth-clients", "yes", "--tls-ca-cert-file", PKI.ca, "--tls-crl-file", live_crl,
                     NULL);
    TU_CHECK(bp_log_contains(&B, "client certificates checked against 1 CRL"), "no CRL in the start-up line");
    hg_client_opts_t o;
    quick_opts(&o);

    tls_uri(uri, sizeof uri, "127.0.0.1", PKI.ca, PKI.client, PKI.client_key);
    TU_CHECK(open_and_ping(uri, &o, msg, sizeof msg) == HG_OK, "a client certificate not in the CRL: %s", msg);
    tls_uri(uri, sizeof uri, "127.0.0.1", PKI.ca, PKI.revoked, PKI.revoked_key);
    hg_err_t rc = open_and_ping(uri, &o, msg, sizeof msg);
    TU_CHECK(rc != HG_OK, "a revoked client certificate got in");
    TU_CHECK(strstr(msg, "revoked") != NULL, "the revoked client's error does not say so: %s: %s", hg_strerror(rc),
             msg);
    TU_CHECK(tu_wait_file_contains(B.log_path, "(the client's certificate: certificate revoked)", 20000) == 0,
             "the broker did not log the revoked client certificate");

    /* The next CRL revokes the other client too: after SIGHUP it is refused. */
    TU_REQUIRE(tc_copy_file(PKI.crl_all, live_crl) == 0, "replace the CRL");
    TU_REQUIRE(kill(B.pid, SIGHUP) == 0, "SIGHUP");
    TU_REQUIRE(tu_wait_file_contains(B.log_path, "SIGHUP: TLS certificate reloaded", 20000) == 0, "no reload line");
    tls_uri(uri, sizeof uri, "127.0.0.1", PKI.ca, PKI.client, PKI.client_key);
    rc = open_and_ping(uri, &o, msg, sizeof msg);
    TU_CHECK(rc != HG_OK && strstr(msg, "revoked") != NULL, "after the new CRL the client got %s: %s", hg_strerror(rc),
             msg);

    /* A CRL file with no CRL in it: the reload is refused, the last CRL stays. */
    TU_REQUIRE(tc_copy_file(PKI.ca, live_crl) == 0, "write a certificate where the CRL was");
    TU_REQUIRE(kill(B.pid, SIGHUP) == 0, "SIGHUP");
    TU_REQUIRE(tu_wait_file_contains(B.log_path, "no CRL in it", 20000) == 0, "no log line for the refused CRL");
    rc = open_and_ping(uri, &o, msg, sizeof msg);
    TU_CHECK(rc != HG_OK && strstr(msg, "revoked") != NULL, "after a bad CRL reload the client got %s: %s",
             hg_strerror(rc), msg);
    TU_CHECK(bp_alive(&B), "the broker died on a bad CRL reload");
}

/* "ACL WHOAMI" through a client with the client certificate cert/key (NULL:
 * none) into who ("" on an error, whose text is then in who after "error: "). */
static void whoami(const char *cert, const char *key, char *who, size_t wholen)
{
    char uri[2048];
    hg_client_opts_t o;
    hg_client_t *c = NULL;
    hg_error_t e;
    hg_reply_t *r = NULL;
    quick_opts(&o);
    tls_uri(uri, sizeof uri, "127.0.0.1", PKI.ca, cert, key);
    const char *argv[] = { "ACL", "WHOAMI" };
    if (hg_client_open(uri, &o, &c, &e) != HG_OK) {
        snprintf(who, wholen, "error: %s", e.message);
        return;
    }
    if (hg_client_command(c, 2, argv, NULL, &r) != HG_OK) {
        snprintf(who, wholen, "error: %s", hg_client_errmsg(c));
    } else {
        const char *text = hg_reply_str(r, NULL);
        snprintf(who, wholen, "%s", text != NULL ? text : "?");
    }
    hg_reply_free(r);
    hg_client_close(c);
}

/* tls-auth-clients-user cn: the certificate's CN logs the connection in as
 * that user; a CN that is no user (or none sent) leaves AUTH to do. */
static void test_cert_user(void)
{
    char users[700], err[768], who[512];
    const tu_user_t both[] = { { "hourglass-test-client", "consumer", "pw" }, { "ops", "admin", "pw" } };
    snprintf(users, sizeof users, "%s/users", PKI_DIR);
    TU_REQUIRE(tu_write_users_file(users, both, 2, err, sizeof err) == 0, "%s", err);
    start_tls_broker(PKI.server, "--tls-auth-clients", "optional", "--tls-ca-cert-file", PKI.ca,
                     "--tls-auth-clients-user", "cn", "--users-file", users, NULL);

    whoami(PKI.client, PKI.client_key, who, sizeof who);
    TU_CHECK(strcmp(who, "hourglass-test-client") == 0, "with the certificate of CN hourglass-test-client: %s", who);
    TU_CHECK(tu_wait_file_contains(B.log_path, "logged in as 'hourglass-test-client' (consumer) by its certificate",
                                   20000) == 0,
             "no log line for the certificate login");
    whoami(NULL, NULL, who, sizeof who);
    TU_CHECK(strstr(who, "NOAUTH") != NULL, "without a certificate (optional): %s, want NOAUTH", who);

    /* A subject with two CNs names no user: OpenSSL's lookup took the first (ops, the admin) while a CA that
     * checked the request may have looked at the last. */
    char cmd[4096], out[4096], two[700], two_key[700];
    snprintf(two, sizeof two, "%s/two-cn.pem", PKI_DIR);
    snprintf(two_key, sizeof two_key, "%s/two-cn.key", PKI_DIR);
    snprintf(cmd, sizeof cmd,
             "cd %s && " TC_OPENSSL " req -new -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -keyout %s "
             "-out two-cn.csr -subj '/CN=ops/CN=hourglass-test-client' 2>&1 && printf 'extendedKeyUsage=clientAuth\\n' "
             "> two-cn.ext && " TC_OPENSSL " x509 -req -in two-cn.csr -CA %s -CAkey %s -set_serial 0x3001 -days 2 "
             "-extfile two-cn.ext -out %s 2>&1",
             PKI_DIR, two_key, PKI.ca, PKI.ca_key, two);
    const char *sh[] = { "/bin/sh", "-c", cmd, NULL };
    TU_REQUIRE(tu_run_capture(sh, out, sizeof out) == 0, "making a certificate with two CNs: %s", out);
    whoami(two, two_key, who, sizeof who);
    TU_CHECK(strstr(who, "NOAUTH") != NULL, "a certificate with CN=ops and CN=hourglass-test-client: %s, want NOAUTH",
             who);
    TU_CHECK(tu_wait_file_contains(B.log_path, "subject has more than one CN, so none names a user", 20000) == 0,
             "no log line for the certificate with two CNs");

    /* The user gone from the users file: the CN logs no one in, and says so. */
    TU_REQUIRE(tu_write_users_file(users, &both[1], 1, err, sizeof err) == 0, "%s", err);
    TU_REQUIRE(kill(B.pid, SIGHUP) == 0, "SIGHUP");
    TU_REQUIRE(tu_wait_file_contains(B.log_path, "SIGHUP: 1 users reloaded", 20000) == 0, "no users reload line");
    uint64_t end = tu_now_mono_ms() + 20000;
    do {
        whoami(PKI.client, PKI.client_key, who, sizeof who);
    } while (strstr(who, "NOAUTH") == NULL && tu_now_mono_ms() < end);
    TU_CHECK(strstr(who, "NOAUTH") != NULL, "a CN that is no user: %s, want NOAUTH", who);
    TU_CHECK(tu_wait_file_contains(B.log_path, "certificate's CN 'hourglass-test-client' is no user in the users file",
                                   20000) == 0,
             "no log line for the CN that is no user");
}

/* ------------------------------------------------------------------------
 * mix-ups: plaintext on the TLS port, TLS on the plaintext port
 * ------------------------------------------------------------------------ */

static void test_mixups(void)
{
    start_tls_broker(PKI.server, NULL);
    char uri[2048], err[512];
    hg_client_opts_t o;
    hg_error_t e;
    quick_opts(&o);
    /* Bystanders on both ports, connected before and used after. */
    hg_client_t *tls_client = NULL;
    tls_uri(uri, sizeof uri, "127.0.0.1", PKI.ca, NULL, NULL);
    TU_REQUIRE(hg_client_open(uri, &o, &tls_client, &e) == HG_OK, "TLS bystander: %s", e.message);
    rc_conn_t plain;
    TU_REQUIRE(bp_connect(&B, &plain, err, sizeof err) == 0, "plaintext bystander: %s", err);

    /* Plaintext RESP on the TLS port: told so in RESP, logged, closed. */
    rc_conn_t bad;
    TU_REQUIRE(rc_connect(&bad, "127.0.0.1", TLS_PORT, 10000) == 0, "connect: %s", bad.err);
    rc_appendl(&bad, "PING", NULL);
    TU_CHECK(rc_flush(&bad, 0) == 0, "write: %s", bad.err);
    resp_reply_t *r = rc_read(&bad, 0);
    TU_CHECK(r != NULL && r->type == RESP_REPLY_ERROR && strstr(r->str, "speaks TLS only") != NULL,
             "plaintext PING on the TLS port: %s", r ? (r->str ? r->str : "(no text)") : bad.err);
    resp_reply_free(r);
    rc_close(&bad);
    TU_CHECK(tu_wait_file_contains(B.log_path, "a plaintext client on the TLS port?", 20000) == 0,
             "no log line for plaintext on the TLS port");

    /* TLS on the plaintext port: the library's handshake fails and says where. */
    char plain_uri[2048], msg[512];
    snprintf(plain_uri, sizeof plain_uri, "hourglass+tls://127.0.0.1:%d?ca=%s", B.port, PKI.ca);
    hg_err_t rc = open_and_ping(plain_uri, &o, msg, sizeof msg);
    TU_CHECK(rc == HG_ERR_CONNECT && strstr(msg, "tls-port") != NULL, "TLS on the plaintext port: %s: %s",
             hg_strerror(rc), msg);
    TU_CHECK(tu_wait_file_contains(B.log_path, "a TLS handshake on the plaintext port", 20000) == 0,
             "no log line for TLS on the plaintext port");

    /* Both bystanders unaffected. */
    TU_CHECK(ping_ok(tls_client), "the TLS bystander: %s", hg_client_errmsg(tls_client));
    r = rc_cmd(&plain, "PING", NULL);
    TU_CHECK(r != NULL && r->str != NULL && strcmp(r->str, "PONG") == 0, "the plaintext bystander: %s",
             r ? (r->str ? r->str : "(no text)") : plain.err);
    resp_reply_free(r);
    hg_client_close(tls_client);
    rc_close(&plain);
}

/* A client that trickles its ClientHello, one byte a second: each byte is
 * activity, so only a deadline from the accept ends it. The broker must close
 * it 10 s after the accept (CONN_TLS_HANDSHAKE_MS), not when the bytes stop. */
static void test_handshake_trickle(void)
{
    start_tls_broker(PKI.server, NULL);
    uint64_t t0 = tu_now_mono_ms(); /* before the connect: never after the accept */
    int fd = tu_tcp_connect(TLS_PORT);
    TU_REQUIRE(fd >= 0, "connect to the TLS port");
    /* A TLS record header announcing a 512-byte ClientHello: OpenSSL waits for the whole record. */
    unsigned char hello[64] = { 0x16, 0x03, 0x01, 0x02, 0x00, 0x01, 0x00, 0x01, 0xfc, 0x03, 0x03 };
    int closed = 0;
    for (size_t i = 0; i < sizeof hello && !closed; i++) {
        if (send(fd, &hello[i], 1, MSG_NOSIGNAL) != 1) {
            closed = 1;
            break;
        }
        struct pollfd p = { .fd = fd, .events = POLLIN };
        if (poll(&p, 1, 1000) > 0) {
            char b[64];
            closed = recv(fd, b, sizeof b, 0) <= 0;
        }
    }
    uint64_t ms = tu_now_mono_ms() - t0;
    close(fd);
    TU_CHECK(closed, "a handshake trickled a byte a second is still open after %" PRIu64 " ms", ms);
    TU_CHECK(ms >= 10000, "closed %" PRIu64 " ms after the connect, before the 10 s handshake deadline", ms);
    /* the sweep runs every 200 ms, this loop sees the close within its 1 s poll; slack for a slow broker */
    TU_CHECK(ms < 16000, "closed %" PRIu64 " ms after the connect, long after the 10 s handshake deadline", ms);
    TU_CHECK(tu_wait_file_contains(B.log_path, "no TLS handshake within 10000 ms", 20000) == 0,
             "no log line for the handshake deadline");
}

/* A TCP connection to the TLS port from the loopback address src; the fd, or -1. */
static int tls_connect_from(const char *src)
{
    tu_dial_opts_t from = { .source = src };
    return tu_tcp_connect_with(TLS_PORT, &from);
}

typedef struct info_wait {
    rc_conn_t *c;
    const char *field;
    long long want;
    char got[64];
} info_wait_t;

static int info_is(void *arg)
{
    info_wait_t *w = arg;
    char err[256];
    if (bp_info_field(w->c, w->field, w->got, sizeof w->got, err, sizeof err) != 0) {
        snprintf(w->got, sizeof w->got, "(none)");
        return 0;
    }
    return atoll(w->got) == w->want;
}

/* Wait (10 s at most) until INFO field on c is want; 0, or -1 with the last value in got. */
static int wait_info(rc_conn_t *c, const char *field, long long want, char *got, size_t gotlen)
{
    info_wait_t w = { .c = c, .field = field, .want = want };
    int rc = tu_poll_until(info_is, &w, 10000, 20);
    snprintf(got, gotlen, "%s", w.got);
    return rc;
}

/* 1 when the broker closes fd (EOF, no byte before it) within 10 s. */
static int closed_silently(int fd)
{
    struct pollfd p = { .fd = fd, .events = POLLIN };
    if (poll(&p, 1, 10000) <= 0) {
        return 0;
    }
    char b[64];
    return recv(fd, b, sizeof b, 0) == 0;
}

/* One address may have tls-max-handshakes-per-address (here 3) handshakes in progress: the next connection from
 * it is closed before any TLS work, counted and logged, while another address's is taken; a handshake that ends
 * frees its slot. Before, any number of connections from one address each got a handshake (and its CPU). */
static void test_handshakes_per_address(void)
{
    char err[512], got[64], uri[2048];
    start_tls_broker(PKI.server, "--tls-max-handshakes-per-address", "3", NULL);
    rc_conn_t plain;
    TU_REQUIRE(bp_connect(&B, &plain, err, sizeof err) == 0, "plaintext client: %s", err);
    int fds[3];
    for (int i = 0; i < 3; i++) {
        fds[i] = tls_connect_from("127.0.0.1"); /* connected, no ClientHello yet: its handshake is in progress */
        TU_REQUIRE(fds[i] >= 0, "connect %d", i);
    }
    TU_CHECK(wait_info(&plain, "tls_handshakes_in_progress", 3, got, sizeof got) == 0,
             "INFO tls_handshakes_in_progress '%s', want 3", got);
    int over = tls_connect_from("127.0.0.1");
    TU_REQUIRE(over >= 0, "connect the fourth");
    TU_CHECK(closed_silently(over), "the fourth handshake of 127.0.0.1 was not closed at once, without a byte");
    close(over);
    TU_CHECK(wait_info(&plain, "tls_handshakes_refused", 1, got, sizeof got) == 0,
             "INFO tls_handshakes_refused '%s', want 1", got);
    TU_CHECK(tu_wait_file_contains(B.log_path,
                                   "closed a client from 127.0.0.1 on tls-port before its handshake: 3 handshakes "
                                   "from that address are in progress (tls-max-handshakes-per-address 3",
                                   10000) == 0,
             "no log line for the refused handshake");
    /* Another address is not affected. */
    int other = tls_connect_from("127.0.0.2");
    TU_REQUIRE(other >= 0, "connect from 127.0.0.2");
    TU_CHECK(wait_info(&plain, "tls_handshakes_in_progress", 4, got, sizeof got) == 0,
             "INFO tls_handshakes_in_progress '%s', want 4 (127.0.0.2's taken)", got);
    /* One of 127.0.0.1's ends: a full TLS client from it gets in. */
    close(fds[0]);
    TU_CHECK(wait_info(&plain, "tls_handshakes_in_progress", 3, got, sizeof got) == 0,
             "INFO tls_handshakes_in_progress '%s' after a close, want 3", got);
    hg_client_opts_t o;
    quick_opts(&o);
    tls_uri(uri, sizeof uri, "127.0.0.1", PKI.ca, NULL, NULL);
    TU_CHECK(open_and_ping(uri, &o, err, sizeof err) == HG_OK, "a TLS client after a slot freed: %s", err);
    TU_CHECK(wait_info(&plain, "tls_handshakes_refused", 1, got, sizeof got) == 0,
             "INFO tls_handshakes_refused '%s', want still 1", got);
    for (int i = 1; i < 3; i++) {
        close(fds[i]);
    }
    close(other);
    TU_CHECK(wait_info(&plain, "tls_handshakes_in_progress", 0, got, sizeof got) == 0,
             "INFO tls_handshakes_in_progress '%s' after all closed, want 0", got);
    rc_close(&plain);
}

static int tls_only_ready(void *arg)
{
    const char *uri = arg;
    hg_client_opts_t o;
    char msg[512];
    quick_opts(&o);
    return open_and_ping(uri, &o, msg, sizeof msg) == HG_OK;
}

static void test_tls_only(void)
{
    char err[2048];
    TU_REQUIRE(bp_startl(&B, err, sizeof err, "--tls-port", TLS_PORT_S, "--tls-cert-file", PKI.server, "--tls-key-file",
                         PKI.server_key, NULL) == 0,
               "broker: %s", err);
    TU_REQUIRE(bp_stop(&B, err, sizeof err) == 0, "stop: %s", err);
    /* Now without the plaintext port (the last --port wins). */
    B.extra[B.nextra++] = strdup("--port");
    B.extra[B.nextra++] = strdup("0");
    TU_REQUIRE(bp_spawn(&B, err, sizeof err) == 0, "spawn: %s", err);
    char uri[2048];
    tls_uri(uri, sizeof uri, "127.0.0.1", PKI.ca, NULL, NULL);
    TU_REQUIRE(tu_poll_until(tls_only_ready, uri, 60000, 50) == 0, "no PONG over TLS from the TLS-only broker");
    TU_CHECK(tu_wait_file_contains(B.log_path, "(TLS only)", 20000) == 0, "the start-up line does not say TLS only");
    rc_conn_t plain;
    TU_CHECK(rc_connect(&plain, "127.0.0.1", B.port, 2000) != 0, "the plaintext port %d still answers", B.port);
    rc_close(&plain);
}

static void test_seen(void)
{
    char uri[2048], err[512], v[64];
    static char text[1 << 18];
    start_tls_broker(PKI.server, "--max-clients", "2", NULL);
    hg_client_opts_t o;
    hg_error_t e;
    quick_opts(&o);
    hg_client_t *tls_client = NULL;
    tls_uri(uri, sizeof uri, "127.0.0.1", PKI.ca, NULL, NULL);
    TU_REQUIRE(hg_client_open(uri, &o, &tls_client, &e) == HG_OK, "TLS client: %s", e.message);
    TU_REQUIRE(ping_ok(tls_client), "TLS PING: %s", hg_client_errmsg(tls_client));
    rc_conn_t plain;
    TU_REQUIRE(bp_connect(&B, &plain, err, sizeof err) == 0, "plaintext client: %s", err);
    TU_CHECK(bp_info_field(&plain, "tls_port", v, sizeof v, err, sizeof err) == 0 && atoi(v) == TLS_PORT,
             "INFO tls_port '%s', want %d", v, TLS_PORT);
    TU_CHECK(bp_info_field(&plain, "connected_tls_clients", v, sizeof v, err, sizeof err) == 0 && strcmp(v, "1") == 0,
             "INFO connected_tls_clients '%s', want 1", v);
    resp_reply_t *r = rc_cmd(&plain, "CLIENT", "LIST", NULL);
    TU_REQUIRE(r != NULL && r->type == RESP_REPLY_BULK, "CLIENT LIST: %s", plain.err);
    int yes = 0, no = 0;
    for (const char *p = r->str; (p = strstr(p, " tls=")) != NULL; p += 5) {
        yes += strncmp(p, " tls=yes\n", 9) == 0;
        no += strncmp(p, " tls=no\n", 8) == 0;
    }
    TU_CHECK(yes == 1 && no == 1, "CLIENT LIST: %d tls=yes and %d tls=no lines, want 1 and 1:\n%s", yes, no, r->str);
    resp_reply_free(r);
    TU_CHECK(tu_http_get(B.metrics_port, "/metrics", text, sizeof text) == 200 &&
                 strstr(text, "\nhourglass_tls_connected_clients 1\n") != NULL,
             "/metrics has no hourglass_tls_connected_clients 1");
    /* both slots taken: a third client on the TLS port is closed without a plaintext byte */
    rc_conn_t third;
    TU_REQUIRE(rc_connect(&third, "127.0.0.1", TLS_PORT, 10000) == 0, "connect: %s", third.err);
    TU_CHECK(rc_read_to_eof(&third, 10000) == 1, "the client beyond max-clients on the TLS port was not closed");
    TU_CHECK(rc_pending_input(&third) == 0, "the client beyond max-clients on the TLS port was sent '%.*s'",
             (int)rc_pending_input(&third), rc_input(&third));
    rc_close(&third);
    TU_CHECK(tu_wait_file_contains(B.log_path, "reached: closed a client on tls-port", 20000) == 0,
             "no log line for the refusal on the TLS port");
    rc_close(&plain);
    hg_client_close(tls_client);
}

/* The decision of docs/security.md "Protected mode": with TLS configured a
 * client from another host uses the TLS port; the plaintext port serves this
 * host unless allow-remote-plaintext yes. */
static void test_remote_tls_only(void)
{
    char ip[64], uri[2048], msg[512], err[512];
    TU_REQUIRE(tu_own_ipv4(ip, sizeof ip) == 0,
               "this machine has no non-loopback IPv4 address: remote clients cannot be tested honestly");
    start_tls_broker(PKI.server, "--bind", "0.0.0.0", "--allow-remote", "yes", NULL);
    hg_client_opts_t o;
    quick_opts(&o);
    snprintf(uri, sizeof uri, "hourglass+tls://%s:%d?ca=%s&sni=localhost", ip, TLS_PORT, PKI.ca);
    hg_err_t rc = open_and_ping(uri, &o, msg, sizeof msg);
    TU_CHECK(rc == HG_OK, "a remote client on the TLS port: %s: %s", hg_strerror(rc), msg);
    rc_conn_t remote;
    TU_REQUIRE(rc_connect(&remote, ip, B.port, 10000) == 0, "connect to %s:%d: %s", ip, B.port, remote.err);
    resp_reply_t *r = rc_read(&remote, 10000);
    char want[128];
    snprintf(want, sizeof want, "DENIED clients from other hosts must use TLS on port %d", TLS_PORT);
    TU_CHECK(rc_is_error(r, want), "a remote client on the plaintext port: %s", rc_describe(r, msg, sizeof msg));
    resp_reply_free(r);
    TU_CHECK(rc_wait_closed(&remote, 10000) == 1, "the refused plaintext client was not closed");
    rc_close(&remote);
    TU_CHECK(tu_wait_file_contains(B.log_path, "refused a plaintext client from", 20000) == 0,
             "no log line for the refused plaintext client");
    TU_CHECK(tu_wait_file_contains(B.log_path, "clients from other hosts are served on tls-port", 20000) == 0,
             "the start-up does not say remote clients are served on the TLS port only");
    rc_conn_t local;
    TU_REQUIRE(bp_connect(&B, &local, err, sizeof err) == 0, "loopback client: %s", err);
    r = rc_cmd(&local, "PING", NULL);
    TU_CHECK(r != NULL && rc_str_eq(r, "PONG"), "a loopback client on the plaintext port: %s",
             r == NULL ? local.err : rc_describe(r, msg, sizeof msg));
    resp_reply_free(r);
    rc_close(&local);
    bp_destroy(&B);
    memset(&B, 0, sizeof B);

    start_tls_broker(PKI.server, "--bind", "0.0.0.0", "--allow-remote", "yes", "--allow-remote-plaintext", "yes", NULL);
    TU_REQUIRE(rc_connect(&remote, ip, B.port, 10000) == 0, "connect to %s:%d: %s", ip, B.port, remote.err);
    r = rc_cmd(&remote, "PING", NULL);
    TU_CHECK(r != NULL && rc_str_eq(r, "PONG"), "a remote client on the plaintext port with allow-remote-plaintext: %s",
             r == NULL ? remote.err : rc_describe(r, msg, sizeof msg));
    resp_reply_free(r);
    rc_close(&remote);
}

/* ------------------------------------------------------------------------
 * tools: openssl s_client, redis-cli --tls
 * ------------------------------------------------------------------------ */

static void test_s_client(void)
{
    start_tls_broker(PKI.server, NULL);
    char addr[64], out[16384], in_path[700], cmd[2048];
    snprintf(addr, sizeof addr, "127.0.0.1:%d", TLS_PORT);
    snprintf(in_path, sizeof in_path, "%s/s_client.in", PKI_DIR);
    TU_REQUIRE(tu_write_file(in_path, "PING\r\nECHO hello-over-tls\r\nQUIT\r\n") == 0, "write %s", in_path);
    /* s_client reads its stdin: a shell redirect, and -ign_eof so the replies are read until QUIT closes. */
    snprintf(cmd, sizeof cmd,
             "exec " TC_OPENSSL " s_client -connect %s -CAfile %s -verify_return_error -verify_ip 127.0.0.1 "
             "-ign_eof < %s",
             addr, PKI.ca, in_path);
    const char *argv[] = { "/bin/sh", "-c", cmd, NULL };
    int rc = tu_run_capture(argv, out, sizeof out);
    TU_CHECK(rc == 0, "s_client exited %d: %s", rc, out);
    TU_CHECK(strstr(out, "Verify return code: 0 (ok)") != NULL, "s_client did not verify: %s", out);
    TU_CHECK(strstr(out, "+PONG") != NULL && strstr(out, "hello-over-tls") != NULL, "no replies in: %s", out);
    TU_CHECK(strstr(out, "TLSv1.3") != NULL || strstr(out, "TLSv1.2") != NULL, "no protocol in: %s", out);

    /* TLS 1.1 is refused (TLS 1.2 minimum). */
    snprintf(cmd, sizeof cmd, "exec " TC_OPENSSL " s_client -connect %s -CAfile %s -tls1_1 < /dev/null", addr, PKI.ca);
    const char *argv11[] = { "/bin/sh", "-c", cmd, NULL };
    rc = tu_run_capture(argv11, out, sizeof out);
    TU_CHECK(rc != 0, "a TLS 1.1 handshake succeeded: %s", out);

    /* TLS 1.2 offers ECDHE with AEAD ciphers only: a CBC / SHA-1 suite is refused, an AES-GCM one accepted. */
    const char *refused[] = { "ECDHE-ECDSA-AES256-SHA", "ECDHE-ECDSA-AES128-SHA256", "ECDHE-ECDSA-AES256-SHA384" };
    for (size_t i = 0; i < sizeof refused / sizeof refused[0]; i++) {
        snprintf(cmd, sizeof cmd, "exec " TC_OPENSSL " s_client -connect %s -CAfile %s -tls1_2 -cipher %s < /dev/null",
                 addr, PKI.ca, refused[i]);
        const char *argvc[] = { "/bin/sh", "-c", cmd, NULL };
        rc = tu_run_capture(argvc, out, sizeof out);
        TU_CHECK(rc != 0, "a TLS 1.2 handshake with %s succeeded: %s", refused[i], out);
    }
    const char *accepted[] = { "ECDHE-ECDSA-AES128-GCM-SHA256", "ECDHE-ECDSA-AES256-GCM-SHA384",
                               "ECDHE-ECDSA-CHACHA20-POLY1305" };
    for (size_t i = 0; i < sizeof accepted / sizeof accepted[0]; i++) {
        snprintf(cmd, sizeof cmd,
                 "exec " TC_OPENSSL " s_client -connect %s -CAfile %s -tls1_2 -cipher %s -ign_eof < %s", addr, PKI.ca,
                 accepted[i], in_path);
        const char *argva[] = { "/bin/sh", "-c", cmd, NULL };
        rc = tu_run_capture(argva, out, sizeof out);
        TU_CHECK(rc == 0 && strstr(out, "+PONG") != NULL && strstr(out, accepted[i]) != NULL,
                 "a TLS 1.2 handshake with %s: exit %d: %s", accepted[i], rc, out);
    }
}

static void test_redis_cli(void)
{
    start_tls_broker(PKI.server, "--tls-auth-clients", "optional", "--tls-ca-cert-file", PKI.ca, NULL);
    char out[8192];
    const char *ping[] = { REDIS_CLI, "-h", "127.0.0.1", "-p", TLS_PORT_S, "--tls", "--cacert", PKI.ca, "PING", NULL };
    int rc = tu_run_capture(ping, out, sizeof out);
    TU_CHECK(rc == 0 && strstr(out, "PONG") != NULL, "redis-cli --tls PING: exit %d: %s", rc, out);
    const char *send[] = { REDIS_CLI,  "-h",        "127.0.0.1", "-p",       TLS_PORT_S, "--tls",
                           "--cacert", PKI.ca,      "--cert",    PKI.client, "--key",    PKI.client_key,
                           "SEND",     "cli-topic", "hello",     NULL };
    rc = tu_run_capture(send, out, sizeof out);
    TU_CHECK(rc == 0 && strlen(out) >= 16 && strstr(out, "ERR") == NULL,
             "redis-cli --tls with a client certificate SEND: exit %d: %s", rc, out);
    /* redis-cli without --tls on the TLS port reads our RESP refusal. */
    const char *plain[] = { REDIS_CLI, "-h", "127.0.0.1", "-p", TLS_PORT_S, "PING", NULL };
    rc = tu_run_capture(plain, out, sizeof out);
    TU_CHECK(strstr(out, "speaks TLS only") != NULL, "plaintext redis-cli on the TLS port: exit %d: %s", rc, out);
}

/* ------------------------------------------------------------------------
 * SIGHUP: certificate reload
 * ------------------------------------------------------------------------ */

static void test_reload(void)
{
    char live_cert[700], serial[64], err[512], uri[2048];
    snprintf(live_cert, sizeof live_cert, "%s/live.pem", PKI_DIR);
    TU_REQUIRE(tc_copy_file(PKI.server, live_cert) == 0, "copy the certificate");
    start_tls_broker(live_cert, NULL);
    TU_REQUIRE(tc_peer_serial(TLS_PORT, PKI.ca, serial, sizeof serial, err, sizeof err) == 0, "%s", err);
    TU_CHECK(strcmp(serial, TC_SERIAL_SERVER) == 0, "serial %s, want %s", serial, TC_SERIAL_SERVER);

    hg_client_opts_t o;
    hg_error_t e;
    hg_client_t *c = NULL;
    quick_opts(&o);
    tls_uri(uri, sizeof uri, "127.0.0.1", PKI.ca, NULL, NULL);
    TU_REQUIRE(hg_client_open(uri, &o, &c, &e) == HG_OK, "open: %s", e.message);

    /* A new certificate in place, SIGHUP: new connections see its serial. The key, now readable by its group, is
     * warned about (it was 0600 at start: no warning then). */
    TU_CHECK(!bp_log_contains(&B, "is readable by"), "a key file of mode 0600 was warned about");
    TU_REQUIRE(chmod(PKI.server_key, 0640) == 0, "chmod the key");
    TU_REQUIRE(tc_copy_file(PKI.server2, live_cert) == 0, "replace the certificate");
    TU_REQUIRE(kill(B.pid, SIGHUP) == 0, "SIGHUP");
    TU_REQUIRE(tu_wait_file_contains(B.log_path, "serial " TC_SERIAL_SERVER2, 20000) == 0,
               "no reload line with the new serial");
    char want[800];
    snprintf(want, sizeof want, "tls-key-file %s is readable by its group (mode 0640)", PKI.server_key);
    TU_CHECK(tu_wait_file_contains(B.log_path, want, 20000) == 0, "no warning '%s'", want);
    TU_REQUIRE(tc_peer_serial(TLS_PORT, PKI.ca, serial, sizeof serial, err, sizeof err) == 0, "%s", err);
    TU_CHECK(strcmp(serial, TC_SERIAL_SERVER2) == 0, "after SIGHUP: serial %s, want %s", serial, TC_SERIAL_SERVER2);
    TU_CHECK(ping_ok(c), "the connection opened before the reload: %s", hg_client_errmsg(c));

    /* A broken file: the reload is refused, the last good certificate stays. */
    TU_REQUIRE(tu_write_file(live_cert, "-----BEGIN CERTIFICATE-----\nnot base64 at all\n") == 0, "write");
    TU_REQUIRE(kill(B.pid, SIGHUP) == 0, "SIGHUP");
    TU_REQUIRE(tu_wait_file_contains(B.log_path, "TLS certificate not reloaded, keeping the one in use", 20000) == 0,
               "no log line for the refused reload");
    TU_REQUIRE(tc_peer_serial(TLS_PORT, PKI.ca, serial, sizeof serial, err, sizeof err) == 0, "%s", err);
    TU_CHECK(strcmp(serial, TC_SERIAL_SERVER2) == 0, "after a bad SIGHUP: serial %s, want %s", serial,
             TC_SERIAL_SERVER2);
    TU_CHECK(ping_ok(c), "the old connection after a bad reload: %s", hg_client_errmsg(c));
    TU_CHECK(bp_alive(&B), "the broker died on a bad certificate reload");
    hg_client_close(c);
}

/* ------------------------------------------------------------------------
 * configuration: what the broker refuses to start with
 * ------------------------------------------------------------------------ */

/* Run the broker with argv (--check-config, or a start that must fail) and
 * expect exit code `code` (2: a configuration error; 1: a start-up failure,
 * such as a file that does not load) with want in its output. */
static void refused(int code, const char *want, const char *a0, ...)
{
    const char *argv[32];
    char out[8192], dir[700];
    int n = 0;
    snprintf(dir, sizeof dir, "%s/data", PKI_DIR);
    argv[n++] = HG_BUILDDIR "/hourglass-broker";
    argv[n++] = "--dir";
    argv[n++] = dir;
    argv[n++] = "--port";
    argv[n++] = "0";
    va_list ap;
    va_start(ap, a0);
    for (const char *a = a0; a != NULL && n < 31; a = va_arg(ap, const char *)) {
        argv[n++] = a;
    }
    va_end(ap);
    argv[n] = NULL;
    int rc = tu_run_capture(argv, out, sizeof out);
    TU_CHECK(rc == code && strstr(out, want) != NULL, "want exit %d with '%s', got %d: %s", code, want, rc, out);
}

static void test_config(void)
{
    char missing[700];
    snprintf(missing, sizeof missing, "%s/missing.pem", PKI_DIR);
    refused(2, "tls-port 7380 needs tls-cert-file and tls-key-file", "--check-config", "--tls-port", "7380", NULL);
    refused(2, "tls-auth-clients yes needs tls-ca-cert-file", "--check-config", "--tls-port", "7380", "--tls-cert-file",
            PKI.server, "--tls-key-file", PKI.server_key, "--tls-auth-clients", "yes", NULL);
    refused(2, "tls-auth-clients is set but tls-port is 0", "--check-config", "--tls-auth-clients", "optional", NULL);
    refused(2, "'maybe'", "--check-config", "--tls-auth-clients", "maybe", NULL);
    refused(2, "tls-crl-file is set but tls-auth-clients is no", "--check-config", "--tls-port", "7380",
            "--tls-cert-file", PKI.server, "--tls-key-file", PKI.server_key, "--tls-crl-file", PKI.crl, NULL);
    refused(2, "tls-crl-file is set but tls-port is 0", "--check-config", "--tls-crl-file", PKI.crl, NULL);
    refused(2, "tls-auth-clients-user cn needs tls-auth-clients yes or optional and a users-file", "--check-config",
            "--tls-port", "7380", "--tls-cert-file", PKI.server, "--tls-key-file", PKI.server_key,
            "--tls-auth-clients-user", "cn", NULL);
    /* Files are read at start: the key, file and reason named. */
    refused(1, "tls-cert-file " /* path follows */, "--tls-port", TLS_PORT_S, "--tls-cert-file", missing,
            "--tls-key-file", PKI.server_key, NULL);
    refused(1, "missing.pem: No such file or directory", "--tls-port", TLS_PORT_S, "--tls-cert-file", missing,
            "--tls-key-file", PKI.server_key, NULL);
    refused(1, "does not belong to tls-cert-file", "--tls-port", TLS_PORT_S, "--tls-cert-file", PKI.server,
            "--tls-key-file", PKI.client_key, NULL);
    /* a file that is no key (here a certificate) is said as such: it read only OpenSSL's "unsupported; PEM lib" */
    refused(1, "holds no private key OpenSSL can read (PEM, unencrypted)", "--tls-port", TLS_PORT_S, "--tls-cert-file",
            PKI.server, "--tls-key-file", PKI.ca, NULL);
    refused(1, "no CRL in it", "--tls-port", TLS_PORT_S, "--tls-cert-file", PKI.server, "--tls-key-file",
            PKI.server_key, "--tls-auth-clients", "yes", "--tls-ca-cert-file", PKI.ca, "--tls-crl-file", PKI.ca, NULL);
    /* --check-config reads them too: what would stop the start is a configuration error now (it said
     * "configuration OK" to a key of another certificate, and the restart then failed). */
    refused(2, "does not belong to tls-cert-file", "--check-config", "--tls-port", TLS_PORT_S, "--tls-cert-file",
            PKI.server, "--tls-key-file", PKI.client_key, NULL);
    refused(2, "missing.pem: No such file or directory", "--check-config", "--tls-port", TLS_PORT_S, "--tls-cert-file",
            missing, "--tls-key-file", PKI.server_key, NULL);
    refused(0, "configuration OK", "--check-config", "--tls-port", TLS_PORT_S, "--tls-cert-file", PKI.server,
            "--tls-key-file", PKI.server_key, NULL);

    /* The clients' shared tls-* keys (common/tls_keys.h), through hourglass-compensator and hourglass-cli. */
    char out[4096], uri[128];
    snprintf(uri, sizeof uri, "hourglass+tls://127.0.0.1:%d", TLS_PORT);
    const char *comp_plain[] = {
        COMP_BIN, "--check-config", "--mysql-database", "x", "--tls-ca-cert-file", PKI.ca, NULL
    };
    int rc = tu_run_capture(comp_plain, out, sizeof out);
    TU_CHECK(rc == 2 && strstr(out, "tls-ca-cert-file is set but uri is neither hourglass+tls:// nor amqps://") != NULL,
             "compensator, tls-* with a plaintext uri: exit %d: %s", rc, out);
    const char *comp_half[] = { COMP_BIN, "--check-config",  "--mysql-database", "x", "--uri",
                                uri,      "--tls-cert-file", PKI.client,         NULL };
    rc = tu_run_capture(comp_half, out, sizeof out);
    TU_CHECK(rc == 2 && strstr(out, "tls-cert-file is set without tls-key-file") != NULL,
             "compensator, a certificate without its key: exit %d: %s", rc, out);
    const char *comp_missing[] = {
        COMP_BIN, "--check-config", "--mysql-database", "x", "--uri", uri, "--tls-ca-cert-file", missing, NULL
    };
    rc = tu_run_capture(comp_missing, out, sizeof out);
    TU_CHECK(rc == 2 && strstr(out, "uri: TLS CA file") != NULL && strstr(out, "No such file") != NULL,
             "compensator, a missing CA file: exit %d: %s", rc, out);
    const char *comp_ok[] = { COMP_BIN,
                              "--check-config",
                              "--mysql-database",
                              "x",
                              "--uri",
                              uri,
                              "--tls-ca-cert-file",
                              PKI.ca,
                              "--tls-cert-file",
                              PKI.client,
                              "--tls-key-file",
                              PKI.client_key,
                              NULL };
    rc = tu_run_capture(comp_ok, out, sizeof out);
    TU_CHECK(rc == 0, "compensator with the tls-* keys: exit %d: %s", rc, out);
    const char *cli_plain[] = { CLI_BIN, "--tls-ca-cert-file", PKI.ca, "ping", NULL };
    rc = tu_run_capture(cli_plain, out, sizeof out);
    TU_CHECK(rc == 2 && strstr(out, "neither hourglass+tls:// nor amqps://") != NULL,
             "cli, --tls-* with a plaintext uri: exit %d: %s", rc, out);
}

/* ------------------------------------------------------------------------ */

static const tu_test_t config_tests[] = {
    { "bad tls-* keys and files refuse to start, naming them", test_config },
    { NULL, NULL },
};
static const tu_test_t library_tests[] = {
    { "round trip over TLS (pipelined SENDs, large PULLs, by IP and by name)", test_roundtrip },
    { "another CA, another name, the system store: refused at once", test_wrong_ca_and_name },
    { "an expired broker certificate is refused", test_expired },
    { "bad CA / certificate / key files and URI parameters", test_bad_files },
    { "the client offers TLS 1.2 ECDHE + AEAD only: a CBC-only server refused", test_client_ciphers },
    { NULL, NULL },
};
static const tu_test_t mtls_tests[] = {
    { "tls-auth-clients yes: no certificate or another CA's refused", test_mtls },
    { "tls-crl-file: a revoked client certificate refused; SIGHUP reads the CRL again", test_crl },
    { "tls-auth-clients-user cn: the certificate's CN logs in as that user", test_cert_user },
    { NULL, NULL },
};
static const tu_test_t mixup_tests[] = {
    { "plaintext on the TLS port, TLS on the plaintext port", test_mixups },
    { "a handshake trickled byte by byte is closed 10 s after the accept", test_handshake_trickle },
    { "tls-max-handshakes-per-address: more from one address closed before TLS", test_handshakes_per_address },
    { "port 0 with tls-port: TLS only", test_tls_only },
    { "TLS connections in INFO, CLIENT LIST, /metrics; max-clients on the TLS port", test_seen },
    { "clients from other hosts: the TLS port only, unless allow-remote-plaintext", test_remote_tls_only },
    { NULL, NULL },
};
static const tu_test_t tool_tests[] = {
    { "openssl s_client", test_s_client },
    { "redis-cli --tls", test_redis_cli },
    { NULL, NULL },
};
static const tu_test_t reload_tests[] = {
    { "SIGHUP reloads the certificate; a bad one is kept out", test_reload },
    { NULL, NULL },
};

int main(int argc, char **argv)
{
    static const tu_suite_t suites[] = {
        { "library", library_tests }, { "mtls", mtls_tests },     { "mixups", mixup_tests },
        { "tools", tool_tests },      { "reload", reload_tests }, { "config", config_tests },
    };
    bp_set_failure_counter(CU_get_number_of_failures);
    return tu_suites_main(argc, argv, suites, sizeof suites / sizeof suites[0], setup, teardown);
}
