/*
 * tests/integration/test_db_tls.c — TLS between Hourglass and MariaDB
 * (hg_order_db_params_t.tls, the mysql-tls* keys): a private MariaDB on a
 * free TCP port of 127.0.0.1 (tu_mariadb_t.tcp_port) with a certificate of
 * a throwaway CA the test makes (tests/helpers/tls_certs.h: EC P-256,
 * CN/SAN 127.0.0.1), a user app/pw allowed from anywhere.
 *
 * Suite "db_tls", one server whose flags change between groups of tests (it
 * is stopped and started again on the same data):
 *   on            tls on: Ssl_cipher not empty, TLS 1.2 or 1.3, an AEAD suite
 *   verify        the right CA: connected; another CA: refused (2026) naming
 *                 the certificate
 *   client cert   a user created REQUIRE X509 logs in with tls_cert_file and
 *                 tls_key_file, and is refused without them
 *   plaintext     tls off against require_secure_transport = ON: refused, the
 *                 message points at mysql-tls; tls on passes the same server
 *   socket        the unix socket: on and verify are TLS sessions there,
 *                 verify checks the chain (another CA refused)
 *   inputs        a missing file, no PEM in it, an encrypted key (PKCS#8
 *                 and legacy), a certificate request as the CA, a DER CA,
 *                 a bundle with a damaged certificate, a key that is not
 *                 the certificate's, verify without a CA, a certificate
 *                 without its key, a file with tls off: the library's
 *                 error names the field, hourglass-consumer
 *                 --check-config's names the key (exit 2); a bundle of CAs
 *                 and an "EC PRIVATE KEY" are taken (verify, client cert)
 *   accounts      the account's own plugin after the guard's empty login,
 *                 tls on/verify: ed25519 (TCP and socket), ed25519 OR
 *                 mysql_native_password (either password), unix_socket over
 *                 the socket (a TLS session; a wrong password still gets in),
 *                 a wrong password (native, ed25519): the server's 1045
 *                 "Access denied for user …", never the guard's refusal
 *   PAM           auth_pam accounts on the host's PAM services (root):
 *                 runuser (pam_rootok) logs in over TLS, other (pam_unix,
 *                 a locked account) is the server's 1045, dialog not
 *                 loadable is 2059 naming it
 *   plugin gone   client_ed25519 not loadable (MARIADB_PLUGIN_DIR an empty
 *                 dir, hourglass-cli): 2059 naming the plugin, on and off
 *   wrong name    a certificate of the right CA for db.example: on takes it,
 *                 verify refuses it (2026), over TCP and the socket
 *   tls12         a server limited to TLS 1.2: an ECDHE AEAD suite
 *   weak          a server offering only ECDHE-ECDSA-AES128-SHA (CBC, SHA-1
 *                 MAC) on TLS 1.2: refused, on and verify alike
 *   no tls        a server without TLS (--skip-ssl): tls on refuses it
 *                 (Connector/C alone would go on in plaintext), verify too;
 *                 on over the socket too
 *
 * Suite "no_tls_stub", no MariaDB: a greeting stub (tests/helpers/
 * greeting_stub.h) plays a server without TLS and records what the client
 * sends after its greeting: on and verify, over TCP and a unix socket,
 * send nothing (Connector/C 3.3 alone sends its login, user name and
 * password scramble, in plaintext for on); nor with option files
 * ($HOME/.my.cnf …) naming default-auth=mysql_clear_password: Hourglass
 * reads none, the guard stays the first plugin.
 *
 * Run one suite: ./tests/integration/test_db_tls db_tls (or no_tls_stub)
 */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include "include/hourglass/order.h"
#include "tests/helpers/greeting_stub.h"
#include "tests/helpers/sql_client.h"
#include "tests/helpers/testutil.h"
#include "tests/helpers/tls_certs.h"

#include <pwd.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <CUnit/CUnit.h>
#include <mysql.h>

#define CONSUMER_PATH HG_BUILDDIR "/hourglass-consumer"
#define CLI_PATH      HG_BUILDDIR "/hourglass-cli"

static tu_mariadb_t server;
static tc_certs_t pki;
static char pki_dir[512];
#define SERVER_FLAG_LEN 700
static char opt_cert[SERVER_FLAG_LEN], opt_key[SERVER_FLAG_LEN], opt_ca[SERVER_FLAG_LEN];
static const char *server_args[TU_MARIADB_MAX_EXTRA + 1];

/* "--name=path" into opt (SERVER_FLAG_LEN bytes): 0, or -1
 * said on stderr naming the path too long for it (never a cut flag that
 * would point the server at another file). */
static int server_flag(char *opt, const char *name, const char *path)
{
    int n = snprintf(opt, SERVER_FLAG_LEN, "--%s=%s", name, path);
    if (n < 0 || n >= SERVER_FLAG_LEN) {
        fprintf(stderr, "\nFAIL: --%s=%s is %d bytes, longer than the %d a server flag holds\n", name, path, n,
                SERVER_FLAG_LEN - 1);
        return -1;
    }
    return 0;
}

/* Server flags: the certificate and key, then the extra ones (NULL-ended). */
static void set_server_args(const char *a, const char *b)
{
    size_t n = 0;
    server_args[n++] = opt_cert;
    server_args[n++] = opt_key;
    server_args[n++] = opt_ca;
    if (a != NULL)
        server_args[n++] = a;
    if (b != NULL)
        server_args[n++] = b;
    server_args[n] = NULL;
}

static int suite_init(void)
{
    char err[4096];
    if (tu_mkdtemp("dbtls-pki", pki_dir, sizeof pki_dir) != 0 || tc_make(pki_dir, &pki, err, sizeof err) != 0) {
        fprintf(stderr, "\nFAIL: cannot make the test CA: %s\n", err);
        return -1;
    }
    if (server_flag(opt_cert, "ssl-cert", pki.server) != 0 || server_flag(opt_key, "ssl-key", pki.server_key) != 0 ||
        server_flag(opt_ca, "ssl-ca", pki.ca) != 0) /* ssl-ca: for the client certificates */
        return -1;
    set_server_args(NULL, NULL);
    server.extra_args = server_args;
    server.tcp_port = tu_free_port();
    if (tu_mariadb_start(&server, err, sizeof err) != 0) {
        fprintf(stderr, "\nFAIL: cannot start a private MariaDB: %s\n", err);
        return -1;
    }
    MYSQL *m = sql_connect_root(&server, NULL);
    if (m == NULL || sql_query(m, "CREATE DATABASE shop") != 0 ||
        sql_query(m, "CREATE USER 'app'@'%' IDENTIFIED BY 'pw'") != 0 ||
        sql_query(m, "GRANT ALL ON shop.* TO 'app'@'%'") != 0 ||
        sql_query(m, "CREATE USER 'cert'@'%' IDENTIFIED BY 'pw' REQUIRE X509") != 0 ||
        sql_query(m, "GRANT ALL ON shop.* TO 'cert'@'%'") != 0 || sql_query(m, "INSTALL SONAME 'auth_ed25519'") != 0 ||
        sql_query(m, "CREATE USER 'ed'@'%' IDENTIFIED VIA ed25519 USING PASSWORD('edpw')") != 0 ||
        sql_query(m, "GRANT ALL ON shop.* TO 'ed'@'%'") != 0 ||
        sql_query(m, "CREATE USER 'either'@'%' IDENTIFIED VIA ed25519 USING PASSWORD('edpw')"
                     " OR mysql_native_password USING PASSWORD('nativepw')") != 0 ||
        sql_query(m, "GRANT ALL ON shop.* TO 'either'@'%'") != 0) {
        if (m != NULL)
            mysql_close(m);
        return -1;
    }
    mysql_close(m);
    return 0;
}

static int suite_cleanup(void)
{
    tu_mariadb_stop(&server);
    if (pki_dir[0] != '\0')
        tu_rmtree(pki_dir);
    return 0;
}

/* Stop the server and start it again on the same data with these flags
 * (besides the certificate and key). */
static void restart_with(const char *a, const char *b)
{
    char err[4096];
    uint64_t waited = 0;
    kill(server.pid, SIGTERM);
    TU_REQUIRE(tu_wait_exit(server.pid, 60000, &waited) == 0, "mariadbd (pid %d) did not stop on SIGTERM",
               (int)server.pid);
    server.pid = 0;
    set_server_args(a, b);
    TU_REQUIRE(tu_mariadb_restart(&server, err, sizeof err) == 0, "restart: %s", err);
}

/* The parameters of app over TCP with this mode and CA file. */
static hg_order_db_params_t params(hg_order_tls_t tls, const char *ca)
{
    hg_order_db_params_t p = { .host = "127.0.0.1",
                               .port = (unsigned)server.tcp_port,
                               .user = "app",
                               .password = "pw",
                               .database = "shop",
                               .connect_timeout_s = 10,
                               .tls = tls,
                               .tls_ca_file = ca };
    return p;
}

/* The parameters of app over the unix socket (no host: the name verify
 * checks is localhost) with this mode and CA file. */
static hg_order_db_params_t socket_params(hg_order_tls_t tls, const char *ca)
{
    hg_order_db_params_t p = params(tls, ca);
    p.host = NULL;
    p.port = 0;
    p.socket = server.socket;
    return p;
}

/* The file at path made of the files a and b, one after the other. */
static void join_files(const char *path, const char *a, const char *b)
{
    FILE *out = fopen(path, "we");
    TU_REQUIRE(out != NULL, "cannot write %s", path);
    const char *parts[] = { a, b };
    for (size_t i = 0; i < 2; i++) {
        FILE *in = fopen(parts[i], "re");
        TU_REQUIRE(in != NULL, "cannot read %s", parts[i]);
        char chunk[4096];
        size_t got;
        while ((got = fread(chunk, 1, sizeof chunk, in)) > 0)
            TU_REQUIRE(fwrite(chunk, 1, got, out) == got, "cannot write %s", path);
        fclose(in);
    }
    TU_REQUIRE(fclose(out) == 0, "cannot write %s", path);
}

/* Run the openssl command with these arguments (NULL-ended); it must succeed. */
static void run_openssl(const char *const *args)
{
    char err[4608];
    TU_REQUIRE(tc_openssl(args, err, sizeof err) == 0, "%s", err);
}

/* hourglass-consumer --check-config with these flags (NULL-ended) accepts them (exit 0). */
static void expect_config_ok(const char *const *flags)
{
    const char *argv[16] = { CONSUMER_PATH, "--check-config", "--mysql-database", "shop" };
    size_t n = 4;
    for (size_t i = 0; flags[i] != NULL; i++)
        argv[n++] = flags[i];
    argv[n] = NULL;
    char out[4096];
    int rc = tu_run_capture(argv, out, sizeof out);
    TU_CHECK(rc == 0, "--check-config exited %d, want 0: %s", rc, out);
}

/* The session's status variable name (Ssl_cipher, Ssl_version) into out. */
static void session_status(hg_order_db *db, const char *name, char *out, size_t len)
{
    out[0] = '\0';
    MYSQL *m = hg_order_db_mysql(db, NULL);
    char sql[128];
    snprintf(sql, sizeof sql, "SHOW SESSION STATUS LIKE '%s'", name);
    TU_REQUIRE(m != NULL && sql_query(m, sql) == 0, "SHOW SESSION STATUS LIKE '%s' failed", name);
    MYSQL_RES *res = mysql_store_result(m);
    MYSQL_ROW row = res != NULL ? mysql_fetch_row(res) : NULL;
    if (row != NULL && row[1] != NULL)
        snprintf(out, len, "%s", row[1]);
    if (res != NULL)
        mysql_free_result(res);
}

/* Open with p; check the session is TLS 1.2+ with an AEAD suite; the
 * negotiated version into version. */
static void expect_tls(const hg_order_db_params_t *p, char *version, size_t len)
{
    hg_order_error_t e = { 0 };
    hg_order_db *db = hg_order_db_open(p, &e);
    TU_REQUIRE(db != NULL, "open refused: %u %s", e.code, e.message);
    char cipher[128];
    session_status(db, "Ssl_cipher", cipher, sizeof cipher);
    session_status(db, "Ssl_version", version, len);
    TU_CHECK(cipher[0] != '\0', "Ssl_cipher is empty: the connection is plaintext");
    TU_CHECK(strcmp(version, "TLSv1.2") == 0 || strcmp(version, "TLSv1.3") == 0, "Ssl_version '%s', want 1.2+",
             version);
    TU_CHECK(strstr(cipher, "GCM") != NULL || strstr(cipher, "CHACHA20") != NULL, "cipher %s is not AEAD", cipher);
    printf("\n  %s %s", version, cipher);
    hg_order_db_close(db);
}

/* Open with p must fail; the error's code into *code and text into msg. */
static void expect_refused(const hg_order_db_params_t *p, unsigned *code, char *msg, size_t len)
{
    hg_order_error_t e = { 0 };
    hg_order_db *db = hg_order_db_open(p, &e);
    TU_CHECK(db == NULL, "open succeeded, want a refusal");
    hg_order_db_close(db);
    *code = e.code;
    snprintf(msg, len, "%s", e.message);
    printf("\n  refused: %s", msg);
}

static void test_on(void)
{
    char version[32];
    hg_order_db_params_t p = params(HG_ORDER_TLS_ON, NULL);
    expect_tls(&p, version, sizeof version);
}

static void test_verify(void)
{
    char version[32], msg[600];
    unsigned code = 0;
    hg_order_db_params_t p = params(HG_ORDER_TLS_VERIFY, pki.ca);
    expect_tls(&p, version, sizeof version);
    p = params(HG_ORDER_TLS_VERIFY, pki.other_ca);
    expect_refused(&p, &code, msg, sizeof msg);
    TU_CHECK(code == 2026, "code %u, want 2026 (TLS)", code);
    TU_CHECK(strstr(msg, "certificate") != NULL, "'%s' does not name the certificate", msg);
    TU_CHECK(strstr(msg, "mysql-tls-ca-file") != NULL, "'%s' does not point at mysql-tls-ca-file", msg);

    /* a bundle of two CAs, the server's second: every certificate is read, the connection too */
    char bundle[700];
    snprintf(bundle, sizeof bundle, "%s/bundle.pem", pki_dir);
    join_files(bundle, pki.other_ca, pki.ca);
    p = params(HG_ORDER_TLS_VERIFY, bundle);
    expect_tls(&p, version, sizeof version);
    const char *bundle_flags[] = { "--mysql-tls", "verify", "--mysql-tls-ca-file", bundle, NULL };
    expect_config_ok(bundle_flags);

    /* The keys reach a program's connection: hourglass-cli with the other CA. */
    char port[16], out[4096];
    snprintf(port, sizeof port, "%d", server.tcp_port);
    const char *argv[] = { CLI_PATH,
                           "orders",
                           "show",
                           "1",
                           "--mysql-host",
                           "127.0.0.1",
                           "--mysql-port",
                           port,
                           "--mysql-user",
                           "app",
                           "--mysql-password",
                           "pw",
                           "--mysql-database",
                           "shop",
                           "--mysql-tls",
                           "verify",
                           "--mysql-tls-ca-file",
                           pki.other_ca,
                           NULL };
    int rc = tu_run_capture(argv, out, sizeof out);
    TU_CHECK(rc == 3 && strstr(out, "2026") != NULL && strstr(out, "mysql-tls") != NULL,
             "hourglass-cli with another CA: exit %d, want 3 and a TLS error: %s", rc, out);
}

/* A user created REQUIRE X509: in with mysql-tls-cert-file / -key-file,
 * refused without. */
static void test_client_certificate(void)
{
    char version[32], msg[600];
    unsigned code = 0;
    hg_order_db_params_t p = params(HG_ORDER_TLS_VERIFY, pki.ca);
    p.user = "cert";
    p.tls_cert_file = pki.client;
    p.tls_key_file = pki.client_key;
    expect_tls(&p, version, sizeof version);

    /* the same key as "BEGIN EC PRIVATE KEY" (the traditional form): read, matched, used */
    char ec_key[700];
    snprintf(ec_key, sizeof ec_key, "%s/client-ec.key", pki_dir);
    const char *ec_args[] = { "ec", "-in", pki.client_key, "-out", ec_key, NULL };
    run_openssl(ec_args);
    p.tls_key_file = ec_key;
    expect_tls(&p, version, sizeof version);
    const char *ec_flags[] = { "--mysql-tls",
                               "verify",
                               "--mysql-tls-ca-file",
                               pki.ca,
                               "--mysql-tls-cert-file",
                               pki.client,
                               "--mysql-tls-key-file",
                               ec_key,
                               NULL };
    expect_config_ok(ec_flags);

    p.tls_cert_file = p.tls_key_file = NULL;
    expect_refused(&p, &code, msg, sizeof msg);
    TU_CHECK(code == 1045, "without the certificate: code %u, want 1045", code);
}

static void test_plaintext_refused(void)
{
    char msg[600], version[32];
    unsigned code = 0;
    MYSQL *m = sql_connect_root(&server, NULL); /* the socket counts as secure transport */
    TU_REQUIRE(m != NULL && sql_query(m, "SET GLOBAL require_secure_transport = ON") == 0, "cannot set it");
    hg_order_db_params_t p = params(HG_ORDER_TLS_OFF, NULL);
    expect_refused(&p, &code, msg, sizeof msg);
    TU_CHECK(code == 1045, "code %u, want 1045", code);
    TU_CHECK(strstr(msg, "require_secure_transport") != NULL && strstr(msg, "mysql-tls") != NULL,
             "'%s' does not point at mysql-tls", msg);
    p = params(HG_ORDER_TLS_ON, NULL);
    expect_tls(&p, version, sizeof version);
    TU_CHECK(sql_query(m, "SET GLOBAL require_secure_transport = OFF") == 0, "cannot reset it");
    mysql_close(m);
}

/* The library names the field, hourglass-consumer --check-config the key. */
static void expect_input_error(const hg_order_db_params_t *p, const char *field, const char *const *flags,
                               const char *key)
{
    hg_order_error_t e = { 0 };
    hg_order_db *db = hg_order_db_open(p, &e);
    TU_CHECK(db == NULL, "open succeeded with a bad %s", field);
    hg_order_db_close(db);
    TU_CHECK(strstr(e.message, field) != NULL, "'%s' does not name %s", e.message, field);
    const char *argv[16] = { CONSUMER_PATH, "--check-config", "--mysql-database", "shop" };
    size_t n = 4;
    for (size_t i = 0; flags[i] != NULL; i++)
        argv[n++] = flags[i];
    argv[n] = NULL;
    char out[4096];
    int rc = tu_run_capture(argv, out, sizeof out);
    TU_CHECK(rc == 2, "--check-config exited %d, want 2: %s", rc, out);
    TU_CHECK(strstr(out, key) != NULL, "'%s' does not name %s", out, key);
}

static void test_inputs(void)
{
    char missing[700], notpem[700];
    snprintf(missing, sizeof missing, "%s/no-such.pem", pki_dir);
    snprintf(notpem, sizeof notpem, "%s/not.pem", pki_dir);
    TU_REQUIRE(tu_write_file(notpem, "hello\n") == 0, "cannot write %s", notpem);

    hg_order_db_params_t p = params(HG_ORDER_TLS_ON, missing);
    const char *f1[] = { "--mysql-tls", "on", "--mysql-tls-ca-file", missing, NULL };
    expect_input_error(&p, "tls_ca_file: cannot read", f1, "mysql-tls-ca-file: cannot read");

    p = params(HG_ORDER_TLS_VERIFY, NULL);
    const char *f2[] = { "--mysql-tls", "verify", NULL };
    expect_input_error(&p, "tls_ca_file is not set", f2, "mysql-tls-ca-file is not set");

    p = params(HG_ORDER_TLS_ON, NULL);
    p.tls_cert_file = pki.client;
    const char *f3[] = { "--mysql-tls", "on", "--mysql-tls-cert-file", pki.client, NULL };
    expect_input_error(&p, "tls_cert_file is set without tls_key_file", f3,
                       "mysql-tls-cert-file is set without mysql-tls-key-file");

    p = params(HG_ORDER_TLS_ON, NULL);
    p.tls_cert_file = pki.client;
    p.tls_key_file = notpem;
    const char *f4[] = {
        "--mysql-tls", "on", "--mysql-tls-cert-file", pki.client, "--mysql-tls-key-file", notpem, NULL
    };
    expect_input_error(&p, "tls_key_file", f4, "mysql-tls-key-file: ");

    p = params(HG_ORDER_TLS_ON, NULL);
    p.tls_cert_file = pki.client;
    p.tls_key_file = pki_dir; /* a directory */
    const char *f5[] = {
        "--mysql-tls", "on", "--mysql-tls-cert-file", pki.client, "--mysql-tls-key-file", pki_dir, NULL
    };
    expect_input_error(&p, "tls_key_file: cannot read", f5, "mysql-tls-key-file: cannot read");

    /* an encrypted key: nothing can give its passphrase (--check-config said OK before) */
    char encrypted[700], out[4096];
    snprintf(encrypted, sizeof encrypted, "%s/encrypted.key", pki_dir);
    const char *enc_argv[] = { TC_OPENSSL, "pkey",   "-in",  pki.client_key, "-aes256",
                               "-passout", "pass:x", "-out", encrypted,      NULL };
    TU_REQUIRE(tu_run_capture(enc_argv, out, sizeof out) == 0, "openssl: %s", out);
    p = params(HG_ORDER_TLS_ON, NULL);
    p.tls_cert_file = pki.client;
    p.tls_key_file = encrypted;
    const char *f8[] = { "--mysql-tls", "on", "--mysql-tls-cert-file", pki.client, "--mysql-tls-key-file",
                         encrypted,     NULL };
    expect_input_error(&p, "tls_key_file: ", f8, "is encrypted (a passphrase cannot be given)");

    /* a certificate request given as the CA (--check-config said OK before) */
    char request[700];
    snprintf(request, sizeof request, "%s/request.csr", pki_dir);
    const char *req_argv[] = { TC_OPENSSL, "req",   "-new", "-key",  pki.client_key,
                               "-subj",    "/CN=x", "-out", request, NULL };
    TU_REQUIRE(tu_run_capture(req_argv, out, sizeof out) == 0, "openssl: %s", out);
    p = params(HG_ORDER_TLS_ON, request);
    const char *f9[] = { "--mysql-tls", "on", "--mysql-tls-ca-file", request, NULL };
    expect_input_error(&p, "tls_ca_file: ", f9, "holds no PEM certificate");

    /* a legacy encrypted key ("Proc-Type: 4,ENCRYPTED" under "BEGIN EC PRIVATE KEY") */
    char legacy[700];
    snprintf(legacy, sizeof legacy, "%s/legacy-encrypted.key", pki_dir);
    const char *legacy_args[] = { "ec", "-in", pki.client_key, "-aes256", "-passout", "pass:x", "-out", legacy, NULL };
    run_openssl(legacy_args);
    p = params(HG_ORDER_TLS_ON, NULL);
    p.tls_cert_file = pki.client;
    p.tls_key_file = legacy;
    const char *f10[] = {
        "--mysql-tls", "on", "--mysql-tls-cert-file", pki.client, "--mysql-tls-key-file", legacy, NULL
    };
    expect_input_error(&p, "tls_key_file: ", f10, "is encrypted (a passphrase cannot be given)");

    /* a key that is not the certificate's (--check-config said OK before) */
    p = params(HG_ORDER_TLS_ON, NULL);
    p.tls_cert_file = pki.client;
    p.tls_key_file = pki.other_client_key;
    const char *f11[] = { "--mysql-tls",        "on", "--mysql-tls-cert-file", pki.client, "--mysql-tls-key-file",
                          pki.other_client_key, NULL };
    expect_input_error(&p, "tls_key_file: ", f11, "is not the key of the certificate in");

    /* a bundle whose second certificate is damaged (--check-config said OK before) */
    char damaged[700], bad_bundle[700];
    snprintf(damaged, sizeof damaged, "%s/damaged.pem", pki_dir);
    snprintf(bad_bundle, sizeof bad_bundle, "%s/bad-bundle.pem", pki_dir);
    TU_REQUIRE(tu_write_file(damaged, "-----BEGIN CERTIFICATE-----\nMIIBnotbase64!!\n-----END CERTIFICATE-----\n") == 0,
               "cannot write %s", damaged);
    join_files(bad_bundle, pki.ca, damaged);
    p = params(HG_ORDER_TLS_VERIFY, bad_bundle);
    const char *f12[] = { "--mysql-tls", "verify", "--mysql-tls-ca-file", bad_bundle, NULL };
    expect_input_error(&p, "tls_ca_file: ", f12, "certificate 2 is damaged");

    /* a DER certificate: named as DER, with the command that converts it (was "holds no PEM certificate") */
    char der[700];
    snprintf(der, sizeof der, "%s/ca.der", pki_dir);
    const char *der_args[] = { "x509", "-in", pki.ca, "-outform", "DER", "-out", der, NULL };
    run_openssl(der_args);
    p = params(HG_ORDER_TLS_VERIFY, der);
    const char *f13[] = { "--mysql-tls", "verify", "--mysql-tls-ca-file", der, NULL };
    expect_input_error(&p, "tls_ca_file: ", f13, "is DER (binary), not PEM");

    p = params(HG_ORDER_TLS_OFF, pki.ca);
    const char *f6[] = { "--mysql-tls-ca-file", pki.ca, NULL };
    expect_input_error(&p, "tls_ca_file is set but tls is off", f6, "mysql-tls-ca-file is set but mysql-tls is off");

    p = params((hg_order_tls_t)7, NULL);
    const char *f7[] = { "--mysql-tls", "yes", NULL };
    expect_input_error(&p, "tls: 7", f7, "mysql-tls: 'yes' is not one of off|on|verify");
}

/* A server certificate of the right CA for another name (db.example): on
 * (the chain checked, not the name) connects, verify refuses it. */
static void test_wrong_name(void)
{
    char cert[700], key[700], out[4096], msg[600], version[32];
    unsigned code = 0;
    snprintf(cert, sizeof cert, "%s/other-name.pem", pki_dir);
    snprintf(key, sizeof key, "%s/other-name.key", pki_dir);
    const char *argv[] = { TC_OPENSSL,
                           "req",
                           "-x509",
                           "-newkey",
                           "ec",
                           "-pkeyopt",
                           "ec_paramgen_curve:P-256",
                           "-nodes",
                           "-keyout",
                           key,
                           "-out",
                           cert,
                           "-subj",
                           "/CN=db.example",
                           "-addext",
                           "subjectAltName=DNS:db.example",
                           "-CA",
                           pki.ca,
                           "-CAkey",
                           pki.ca_key,
                           "-days",
                           "2",
                           NULL };
    TU_REQUIRE(tu_run_capture(argv, out, sizeof out) == 0, "openssl: %s", out);
    /* both flags made before either is swapped in: a path too long leaves the suite's flags as they were */
    char other_cert[SERVER_FLAG_LEN], other_key[SERVER_FLAG_LEN], saved_cert[SERVER_FLAG_LEN],
        saved_key[SERVER_FLAG_LEN];
    TU_REQUIRE(server_flag(other_cert, "ssl-cert", cert) == 0 && server_flag(other_key, "ssl-key", key) == 0,
               "the other-name certificate's flags (the path too long is said above)");
    memcpy(saved_cert, opt_cert, SERVER_FLAG_LEN);
    memcpy(saved_key, opt_key, SERVER_FLAG_LEN);
    memcpy(opt_cert, other_cert, SERVER_FLAG_LEN);
    memcpy(opt_key, other_key, SERVER_FLAG_LEN);
    restart_with(NULL, NULL);
    hg_order_db_params_t p = params(HG_ORDER_TLS_ON, pki.ca);
    expect_tls(&p, version, sizeof version);
    p = params(HG_ORDER_TLS_VERIFY, pki.ca);
    expect_refused(&p, &code, msg, sizeof msg);
    TU_CHECK(code == 2026, "verify, certificate for db.example: code %u, want 2026", code);
    p = socket_params(HG_ORDER_TLS_VERIFY, pki.ca); /* over the socket the name checked is localhost */
    expect_refused(&p, &code, msg, sizeof msg);
    TU_CHECK(code == 2026, "verify over the socket, certificate for db.example: code %u, want 2026", code);
    memcpy(opt_cert, saved_cert, SERVER_FLAG_LEN);
    memcpy(opt_key, saved_key, SERVER_FLAG_LEN);
}

static void test_tls12(void)
{
    char version[32];
    restart_with("--tls-version=TLSv1.2", NULL);
    hg_order_db_params_t p = params(HG_ORDER_TLS_VERIFY, pki.ca);
    expect_tls(&p, version, sizeof version);
    TU_CHECK(strcmp(version, "TLSv1.2") == 0, "Ssl_version %s, want TLSv1.2 from this server", version);
}

/* The server just started refuses both tls on and verify (2026); on's
 * message says `says` (else the check fails with "'msg' " + fail). */
static void on_and_verify_refused(const char *says, const char *fail)
{
    char msg[600];
    unsigned code = 0;
    hg_order_db_params_t p = params(HG_ORDER_TLS_ON, NULL);
    expect_refused(&p, &code, msg, sizeof msg);
    TU_CHECK(code == 2026, "tls on: code %u, want 2026", code);
    TU_CHECK(strstr(msg, says) != NULL, "'%s' %s", msg, fail);
    p = params(HG_ORDER_TLS_VERIFY, pki.ca);
    expect_refused(&p, &code, msg, sizeof msg);
    TU_CHECK(code == 2026, "tls verify: code %u, want 2026", code);
}

static void test_weak_suite_refused(void)
{
    restart_with("--tls-version=TLSv1.2", "--ssl-cipher=ECDHE-ECDSA-AES128-SHA");
    MYSQL *m = sql_connect_root(&server, NULL);
    TU_REQUIRE(m != NULL, "root over the socket");
    long long on = sql_scalar(m, "SELECT @@have_ssl = 'YES'");
    mysql_close(m);
    TU_REQUIRE(on == 1, "the server has no TLS: the test proves nothing");
    on_and_verify_refused("AEAD", "does not say what the server must offer");
}

/* The server's Aborted_connects_preauth: connections closed before their
 * login was read. */
static long long aborted_before_login(void)
{
    MYSQL *m = sql_connect_root(&server, NULL);
    TU_REQUIRE(m != NULL, "root over the socket");
    long long n = sql_scalar(m, "SELECT VARIABLE_VALUE FROM information_schema.GLOBAL_STATUS"
                                " WHERE VARIABLE_NAME = 'ABORTED_CONNECTS_PREAUTH'");
    mysql_close(m);
    return n;
}

struct preauth_wait {
    long long from, want;
};

static int preauth_reached(void *arg)
{
    const struct preauth_wait *w = arg;
    return aborted_before_login() - w->from >= w->want;
}

static void test_no_tls_refused(void)
{
    restart_with("--skip-ssl", NULL);
    struct preauth_wait w = { aborted_before_login(), 3 };
    on_and_verify_refused("does not offer TLS", "does not say the server has no TLS");
    char msg[600];
    unsigned code = 0;
    hg_order_db_params_t p = socket_params(HG_ORDER_TLS_ON, NULL); /* nor over the socket */
    expect_refused(&p, &code, msg, sizeof msg);
    TU_CHECK(code == 2026, "tls on over the socket: code %u, want 2026", code);
    TU_CHECK(strstr(msg, "does not offer TLS") != NULL, "'%s' does not say the server has no TLS", msg);
    /* The server's side: each of the 3 refused connects (on and verify over
     * TCP, on over the socket) ended before the server read a login. */
    tu_poll_until(preauth_reached, &w, 10000, 20);
    long long aborted = aborted_before_login() - w.from;
    TU_CHECK(aborted == 3, "Aborted_connects_preauth rose by %lld, want 3: a login reached the server", aborted);
    p = params(HG_ORDER_TLS_OFF, NULL); /* the server is fine: plaintext still works */
    hg_order_error_t e = { 0 };
    hg_order_db *db = hg_order_db_open(&p, &e);
    TU_CHECK(db != NULL, "tls off: %s", e.message);
    hg_order_db_close(db);
}

/* The unix socket: MariaDB speaks TLS on it too, and Hourglass asks for it
 * there as over TCP — on encrypts, verify checks the chain and the name
 * localhost; never a plaintext session when TLS was asked for. */
static void test_socket(void)
{
    char version[32], msg[600];
    unsigned code = 0;
    hg_order_db_params_t p = socket_params(HG_ORDER_TLS_ON, NULL);
    expect_tls(&p, version, sizeof version);
    p = socket_params(HG_ORDER_TLS_VERIFY, pki.ca);
    expect_tls(&p, version, sizeof version);
    p = socket_params(HG_ORDER_TLS_VERIFY, pki.other_ca);
    expect_refused(&p, &code, msg, sizeof msg);
    TU_CHECK(code == 2026, "verify over the socket, another CA: code %u, want 2026", code);
}

/* An environment variable's value before env_set, for env_restore. */
typedef struct saved_env {
    const char *name;
    int had;
    char value[600];
} saved_env_t;

/* Set name to value for what follows (children inherit it), saving the old one into old. */
static void env_set(const char *name, const char *value, saved_env_t *old)
{
    const char *v = getenv(name);
    old->name = name;
    old->had = v != NULL;
    snprintf(old->value, sizeof old->value, "%s", v != NULL ? v : "");
    setenv(name, value, 1);
}

static void env_restore(const saved_env_t *old)
{
    if (old->had)
        setenv(old->name, old->value, 1);
    else
        unsetenv(old->name);
}

/* Open with p must fail as the server refuses user's login: 1045 and the
 * server's own "Access denied for user 'USER'", nothing of the guard (its
 * plugin's name, its refusal) in the message. */
static void expect_access_denied(const hg_order_db_params_t *p, const char *user)
{
    char msg[600], denied[128];
    unsigned code = 0;
    expect_refused(p, &code, msg, sizeof msg);
    snprintf(denied, sizeof denied, "Access denied for user '%s'", user);
    TU_CHECK(code == 1045, "%s: code %u, want 1045 (access denied): %s", user, code, msg);
    TU_CHECK(strstr(msg, denied) != NULL, "'%s' is not the server's \"%s\"", msg, denied);
    TU_CHECK(strstr(msg, "hourglass_tls_guard") == NULL && strstr(msg, "does not offer TLS") == NULL,
             "'%s' blames the TLS guard for a wrong password", msg);
}

/* A native account with a wrong password: the server's 1045, on and verify,
 * over TCP and the socket. */
static void test_native_wrong_password(void)
{
    hg_order_db_params_t p = params(HG_ORDER_TLS_ON, NULL);
    p.password = "not-pw";
    expect_access_denied(&p, "app");
    p = params(HG_ORDER_TLS_VERIFY, pki.ca);
    p.password = "not-pw";
    expect_access_denied(&p, "app");
    p = socket_params(HG_ORDER_TLS_ON, NULL);
    p.password = "not-pw";
    expect_access_denied(&p, "app");
}

/* An ed25519 account (the server switches the guard's empty login to
 * client_ed25519): in over TLS with its password, on and verify, TCP and
 * the socket; a wrong password is the server's 1045. */
static void test_ed25519(void)
{
    char version[32];
    hg_order_db_params_t p = params(HG_ORDER_TLS_ON, NULL);
    p.user = "ed";
    p.password = "edpw";
    expect_tls(&p, version, sizeof version);
    p.tls = HG_ORDER_TLS_VERIFY;
    p.tls_ca_file = pki.ca;
    expect_tls(&p, version, sizeof version);
    p = socket_params(HG_ORDER_TLS_ON, NULL);
    p.user = "ed";
    p.password = "edpw";
    expect_tls(&p, version, sizeof version);
    p = params(HG_ORDER_TLS_ON, NULL);
    p.user = "ed";
    p.password = "pw";
    expect_access_denied(&p, "ed");
}

/* IDENTIFIED VIA ed25519 OR mysql_native_password: the ed25519 password
 * passes the first plugin, the native one the second (the server switches
 * twice after the guard), neither is the server's 1045. */
static void test_ed25519_or_native(void)
{
    char version[32];
    hg_order_db_params_t p = params(HG_ORDER_TLS_ON, NULL);
    p.user = "either";
    p.password = "edpw";
    expect_tls(&p, version, sizeof version);
    p.password = "nativepw";
    expect_tls(&p, version, sizeof version);
    p.password = "neither";
    expect_access_denied(&p, "either");
}

/* A unix_socket account (named after the user this test runs as) over the
 * socket with tls on and verify: a TLS session (MariaDB speaks TLS on its
 * socket too), and the password is not looked at — a wrong one logs in,
 * so it was unix_socket that let the client in. */
static void test_unix_socket_account(void)
{
    char version[32], sql[256];
    const struct passwd *pw = getpwuid(geteuid());
    TU_REQUIRE(pw != NULL, "who am I (uid %u)?", (unsigned)geteuid());
    MYSQL *m = sql_connect_root(&server, NULL);
    TU_REQUIRE(m != NULL, "root over the socket");
    snprintf(sql, sizeof sql, "CREATE USER IF NOT EXISTS '%s'@'localhost'", pw->pw_name);
    TU_REQUIRE(sql_query(m, sql) == 0, "%s", sql);
    /* as root: root itself (sql_connect_root still gets in: the same OS user) */
    snprintf(sql, sizeof sql, "ALTER USER '%s'@'localhost' IDENTIFIED VIA unix_socket", pw->pw_name);
    TU_REQUIRE(sql_query(m, sql) == 0, "%s", sql);
    snprintf(sql, sizeof sql, "GRANT ALL ON shop.* TO '%s'@'localhost'", pw->pw_name);
    TU_REQUIRE(sql_query(m, sql) == 0, "%s", sql);
    mysql_close(m);
    hg_order_db_params_t p = socket_params(HG_ORDER_TLS_ON, NULL);
    p.user = pw->pw_name;
    p.password = "not-the-password";
    expect_tls(&p, version, sizeof version);
    p.tls = HG_ORDER_TLS_VERIFY;
    p.tls_ca_file = pki.ca;
    expect_tls(&p, version, sizeof version);
}

/* hourglass-cli orders show 1 as user/password over TCP with this
 * mysql-tls mode and MARIADB_PLUGIN_DIR set to plugin_dir for the child;
 * exit code, output into out. */
static int cli_as(const char *user, const char *password, const char *tls, const char *plugin_dir, char *out,
                  size_t len)
{
    char port[16];
    snprintf(port, sizeof port, "%d", server.tcp_port);
    const char *argv[] = { CLI_PATH,
                           "orders",
                           "show",
                           "1",
                           "--mysql-host",
                           "127.0.0.1",
                           "--mysql-port",
                           port,
                           "--mysql-user",
                           user,
                           "--mysql-password",
                           password,
                           "--mysql-database",
                           "shop",
                           "--mysql-tls",
                           tls,
                           NULL };
    saved_env_t saved;
    env_set("MARIADB_PLUGIN_DIR", plugin_dir, &saved);
    int rc = tu_run_capture(argv, out, len);
    env_restore(&saved);
    printf("\n  mysql-tls %s, MARIADB_PLUGIN_DIR=%s: exit %d: %s", tls, plugin_dir, rc, out);
    return rc;
}

/* The server switches the login to client_ed25519, which Connector/C
 * cannot load (an empty plugin directory): the error is 2059 and names the
 * plugin — not the server's 1045 (which Connector/C's number says after it
 * answered the server with empty packets) nor the guard; the same with
 * mysql-tls off, where the guard is not armed. */
static void test_client_plugin_missing(void)
{
    char dir[512], out[4096];
    TU_REQUIRE(tu_mkdtemp("dbtls-plugins", dir, sizeof dir) == 0, "cannot make a temp dir");
    const char *modes[] = { "on", "off" };
    for (size_t i = 0; i < 2; i++) {
        int rc = cli_as("ed", "edpw", modes[i], dir, out, sizeof out);
        TU_CHECK(rc == 3, "mysql-tls %s: exit %d, want 3 (a database error)", modes[i], rc);
        TU_CHECK(strstr(out, "2059 Plugin client_ed25519 could not be loaded") != NULL,
                 "mysql-tls %s: '%s' is not 2059 naming the client plugin client_ed25519", modes[i], out);
        TU_CHECK(strstr(out, "hourglass_tls_guard") == NULL, "mysql-tls %s: '%s' names the guard", modes[i], out);
    }
    tu_rmtree(dir);
    const char *hint = hg_order_setup_hint(2059);
    TU_CHECK(hint != NULL && strstr(hint, "MARIADB_PLUGIN_DIR") != NULL, "the set-up hint of 2059: %s",
             hint != NULL ? hint : "(none)");
}

/* PAM accounts (auth_pam; the server switches the guard's login to the
 * client plugin dialog), on this host's PAM services: daemon through
 * "runuser" (pam_rootok: mariadbd runs as root, no password asked) logs in
 * over TLS; bin through "other" (pam_unix: a locked account) is the
 * server's 1045; with dialog not loadable the error is 2059 naming it. */
static void test_pam_account(void)
{
    char version[32], dir[512], out[4096];
    TU_REQUIRE(geteuid() == 0, "the PAM accounts need mariadbd running as root (pam_rootok), as CI runs it");
    TU_REQUIRE(access("/etc/pam.d/runuser", R_OK) == 0 && access("/etc/pam.d/other", R_OK) == 0,
               "this host lacks the PAM services runuser and other (util-linux, libpam-runtime)");
    MYSQL *m = sql_connect_root(&server, NULL);
    TU_REQUIRE(m != NULL, "root over the socket");
    TU_REQUIRE(sql_query(m, "INSTALL SONAME 'auth_pam'") == 0 &&
                   sql_query(m, "CREATE USER 'daemon'@'%' IDENTIFIED VIA pam USING 'runuser'") == 0 &&
                   sql_query(m, "CREATE USER 'bin'@'%' IDENTIFIED VIA pam USING 'other'") == 0 &&
                   sql_query(m, "GRANT ALL ON shop.* TO 'daemon'@'%', 'bin'@'%'") == 0,
               "cannot create the PAM accounts");
    mysql_close(m);
    hg_order_db_params_t p = params(HG_ORDER_TLS_ON, NULL);
    p.user = "daemon";
    p.password = "unused";
    expect_tls(&p, version, sizeof version);
    p.user = "bin";
    expect_access_denied(&p, "bin");
    TU_REQUIRE(tu_mkdtemp("dbtls-plugins", dir, sizeof dir) == 0, "cannot make a temp dir");
    int rc = cli_as("daemon", "unused", "on", dir, out, sizeof out);
    tu_rmtree(dir);
    TU_CHECK(rc == 3 && strstr(out, "2059 Plugin dialog could not be loaded") != NULL,
             "dialog not loadable: exit %d, want 3 and 2059 naming dialog: %s", rc, out);
}

/* Suite "no_tls_stub": no MariaDB, a greeting stub instead, and a CA of
 * its own for verify. */
static tc_certs_t stub_pki;
static char stub_pki_dir[512];

static int stub_suite_init(void)
{
    char err[4096];
    if (tu_mkdtemp("dbtls-stub-pki", stub_pki_dir, sizeof stub_pki_dir) != 0 ||
        tc_make(stub_pki_dir, &stub_pki, err, sizeof err) != 0) {
        fprintf(stderr, "\nFAIL: cannot make the test CA: %s\n", err);
        return -1;
    }
    return 0;
}

static int stub_suite_cleanup(void)
{
    if (stub_pki_dir[0] != '\0')
        tu_rmtree(stub_pki_dir);
    return 0;
}

/* Open with tls against a greeting stub (tests/helpers/greeting_stub.h:
 * a server without TLS) on TCP (socket_path NULL) or on a unix socket: the
 * open is refused with 2026 naming the server and saying no login was
 * sent, and the stub received nothing at all after its greeting — not the
 * login packet with the user name and the password's scramble. */
static void expect_refused_before_login(hg_order_tls_t tls, const char *ca, const char *socket_path, const char *where)
{
    char err[600];
    gs_t stub;
    TU_REQUIRE(gs_start(&stub, socket_path, err, sizeof err) == 0, "%s", err);
    hg_order_db_params_t p = { .user = "app",
                               .password = "pw",
                               .database = "shop",
                               .connect_timeout_s = 10,
                               .read_timeout_s = 10,
                               .tls = tls,
                               .tls_ca_file = ca };
    if (socket_path != NULL) {
        p.socket = socket_path;
    } else {
        p.host = "127.0.0.1";
        p.port = (unsigned)stub.port;
    }
    hg_order_error_t e = { 0 };
    hg_order_db *db = hg_order_db_open(&p, &e);
    hg_order_db_close(db);
    gs_finish(&stub);
    printf("\n  %s: %s; the stub received %zu bytes", where, db == NULL ? e.message : "connected", stub.recorded);
    TU_CHECK(db == NULL, "%s: open succeeded against a server without TLS", where);
    TU_CHECK(stub.accepted, "%s: the client never connected to the stub", where);
    TU_CHECK(stub.recorded == 0, "%s: the client sent %zu bytes after the greeting (the login%s)", where, stub.recorded,
             gs_recorded_contains(&stub, "app") ? ", with the user name app" : "");
    TU_CHECK(e.code == 2026, "%s: code %u, want 2026", where, e.code);
    TU_CHECK(strstr(e.message, "does not offer TLS") != NULL && strstr(e.message, "refused before sending the login"),
             "%s: '%s' does not say the server offers no TLS and no login was sent", where, e.message);
    TU_CHECK(strstr(e.message, socket_path != NULL ? socket_path : "127.0.0.1:") != NULL,
             "%s: '%s' does not name the server", where, e.message);
    TU_CHECK(strstr(e.message, tls == HG_ORDER_TLS_ON ? "mysql-tls = on" : "mysql-tls = verify") != NULL,
             "%s: '%s' does not name the mode", where, e.message);
}

/* A server without TLS, as the client sees it (a greeting without
 * CLIENT_SSL): on and verify send nothing after the greeting, over TCP
 * and over a unix socket. */
static void test_no_tls_nothing_sent(void)
{
    char dir[512], path[600];
    TU_REQUIRE(tu_mkdtemp("dbtls-stub", dir, sizeof dir) == 0, "cannot make a temp dir");
    expect_refused_before_login(HG_ORDER_TLS_ON, NULL, NULL, "on, TCP");
    snprintf(path, sizeof path, "%s/on.sock", dir);
    expect_refused_before_login(HG_ORDER_TLS_ON, NULL, path, "on, socket");
    expect_refused_before_login(HG_ORDER_TLS_VERIFY, stub_pki.ca, NULL, "verify, TCP");
    snprintf(path, sizeof path, "%s/verify.sock", dir);
    expect_refused_before_login(HG_ORDER_TLS_VERIFY, stub_pki.ca, path, "verify, socket");
    tu_rmtree(dir);
}

/* The MariaDB option files a client may read ($HOME/.my.cnf,
 * $MYSQL_HOME/my.cnf, $MARIADB_HOME/my.cnf) name another first plugin,
 * mysql_clear_password (the password itself on the wire): Hourglass reads
 * no option file, so the guard stays first and nothing is sent. Were one
 * read (MYSQL_READ_DEFAULT_GROUP), its default-auth would replace the guard
 * at the connect, after the options were set, and the stub would receive
 * the login. */
static void test_option_file_ignored(void)
{
    static const char *const vars[] = { "HOME", "MYSQL_HOME", "MARIADB_HOME" };
    char dir[512], path[600];
    saved_env_t saved[3];
    TU_REQUIRE(tu_mkdtemp("dbtls-mycnf", dir, sizeof dir) == 0, "cannot make a temp dir");
    static const char cnf[] = "[client]\ndefault-auth=mysql_clear_password\n"
                              "[client-mariadb]\ndefault-auth=mysql_clear_password\n";
    snprintf(path, sizeof path, "%s/.my.cnf", dir);
    TU_REQUIRE(tu_write_file(path, cnf) == 0, "cannot write %s", path);
    snprintf(path, sizeof path, "%s/my.cnf", dir);
    TU_REQUIRE(tu_write_file(path, cnf) == 0, "cannot write %s", path);
    for (size_t i = 0; i < 3; i++)
        env_set(vars[i], dir, &saved[i]);
    expect_refused_before_login(HG_ORDER_TLS_ON, NULL, NULL, "on, TCP, an option file naming mysql_clear_password");
    for (size_t i = 0; i < 3; i++)
        env_restore(&saved[i]);
    tu_rmtree(dir);
}

static const tu_test_t tests[] = {
    { "tls on: encrypted, TLS 1.2+, AEAD", test_on },
    { "verify: the right CA connects, another is refused", test_verify },
    { "a client certificate for a user REQUIRE X509", test_client_certificate },
    { "plaintext against require_secure_transport: points at mysql-tls", test_plaintext_refused },
    { "the unix socket: on and verify are TLS there too", test_socket },
    { "a native account, wrong password: the server's 1045", test_native_wrong_password },
    { "an ed25519 account over TLS; wrong password: 1045", test_ed25519 },
    { "ed25519 OR mysql_native_password: either password, TLS", test_ed25519_or_native },
    { "a unix_socket account over the socket with TLS", test_unix_socket_account },
    { "client_ed25519 not loadable: the error names it", test_client_plugin_missing },
    { "a PAM account (client plugin dialog) over TLS", test_pam_account },
    { "bad inputs name the field and the key", test_inputs },
    { "verify: a certificate for another name is refused, on takes it", test_wrong_name },
    { "a TLS 1.2 server: an ECDHE AEAD suite", test_tls12 },
    { "a server offering only CBC/SHA-1: refused", test_weak_suite_refused },
    { "a server without TLS: refused", test_no_tls_refused },
    { NULL, NULL },
};

static const tu_test_t stub_tests[] = {
    { "a server without TLS: on and verify send no login, TCP and socket", test_no_tls_nothing_sent },
    { "an option file's default-auth does not replace the guard", test_option_file_ignored },
    { NULL, NULL },
};

static int add_suites(void)
{
    return tu_add_suite("no_tls_stub", stub_suite_init, stub_suite_cleanup, NULL, NULL, stub_tests) != 0 ||
                   tu_add_suite("db_tls", suite_init, suite_cleanup, NULL, NULL, tests) != 0
               ? -1
               : 0;
}

int main(int argc, char **argv)
{
    return tu_cunit_main(argc, argv, add_suites);
}
