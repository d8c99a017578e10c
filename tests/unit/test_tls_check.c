/*
 * tests/unit/test_tls_check.c — CUnit suite for db/tls_check.c (the checks
 * of the mysql-tls* files, by OpenSSL's readers), without a server: the
 * files are a throwaway PKI made with the openssl command
 * (tests/helpers/tls_certs.h) and variants written here.
 *
 * Suite "tls_check":
 *   rules     mode out of range, verify without a CA, a certificate without
 *             its key, a file with the mode off: each error names the field
 *   accepted  a CA, a bundle of two, CRLF line ends, a comment line longer
 *             than 512 bytes before the certificate, an "EC PRIVATE KEY",
 *             a key file that also holds the certificate
 *   refused   an empty path, a directory, a missing file, DER (CA and key),
 *             a damaged second certificate of a bundle, a damaged client
 *             certificate, a CSR as the CA, a certificate as the key, an
 *             encrypted key (PKCS#8 and legacy), a key that is not the
 *             certificate's: each error names the field, the file and the
 *             problem, and leaves OpenSSL's error queue empty
 *   not regular  a FIFO as the CA, the certificate or the key: refused at
 *             once (it used to block in the open), key and path named
 *
 * Run it: ./tests/unit/test_tls_check
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

#include <CUnit/CUnit.h>
#include <openssl/err.h>

#include "db/tls_check.h"
#include "include/hourglass/order.h"
#include "tests/helpers/testutil.h"
#include "tests/helpers/tls_certs.h"

static const db_tls_names_t fields = { "tls", "tls_ca_file", "tls_cert_file", "tls_key_file" };
static tc_certs_t pki;
static char dir[512];

static int suite_init(void)
{
    char err[4096];
    if (tu_mkdtemp("tlscheck", dir, sizeof dir) != 0 || tc_make(dir, &pki, err, sizeof err) != 0) {
        fprintf(stderr, "\nFAIL: cannot make the test CA: %s\n", err);
        return -1;
    }
    return 0;
}

static int suite_cleanup(void)
{
    if (dir[0] != '\0')
        tu_rmtree(dir);
    return 0;
}

/* The path dir/name into out. */
static void in_dir(const char *name, char *out, size_t len)
{
    snprintf(out, len, "%s/%s", dir, name);
}

/* The whole file at path, NUL-ended (free it). */
static char *slurp(const char *path)
{
    FILE *f = fopen(path, "re");
    TU_REQUIRE(f != NULL, "cannot read %s", path);
    char *text = calloc(1, 1 << 20);
    TU_REQUIRE(text != NULL, "out of memory");
    size_t n = fread(text, 1, (1 << 20) - 1, f);
    fclose(f);
    text[n] = '\0';
    return text;
}

/* Run the openssl command with these arguments (NULL-ended); it must succeed. */
static void run_openssl(const char *const *args)
{
    char err[4608];
    TU_REQUIRE(tc_openssl(args, err, sizeof err) == 0, "%s", err);
}

/* db_tls_check accepts these (mode on). */
static void expect_ok(const char *what, const char *ca, const char *cert, const char *key)
{
    char err[1024] = "";
    int rc = db_tls_check(&fields, HG_ORDER_TLS_ON, ca, cert, key, err, sizeof err);
    TU_CHECK(rc == 0, "%s: refused: %s", what, err);
    TU_CHECK(ERR_peek_error() == 0, "%s: OpenSSL's error queue left non-empty", what);
}

/* db_tls_check refuses these (mode) with an error holding each of says[]
 * (NULL-ended), and leaves OpenSSL's error queue empty. */
static void expect_refused(const char *what, int mode, const char *ca, const char *cert, const char *key,
                           const char *const *says)
{
    char err[1024] = "";
    int rc = db_tls_check(&fields, mode, ca, cert, key, err, sizeof err);
    TU_CHECK(rc == -1, "%s: accepted", what);
    for (size_t i = 0; says[i] != NULL; i++)
        TU_CHECK(strstr(err, says[i]) != NULL, "%s: '%s' does not say '%s'", what, err, says[i]);
    TU_CHECK(ERR_peek_error() == 0, "%s: OpenSSL's error queue left non-empty", what);
}

static void test_rules(void)
{
    const char *mode[] = { "tls: 7 is not off (0), on (1) or verify (2)", NULL };
    expect_refused("mode 7", 7, NULL, NULL, NULL, mode);
    const char *verify[] = { "tls is verify but tls_ca_file is not set", NULL };
    expect_refused("verify without a CA", HG_ORDER_TLS_VERIFY, NULL, NULL, NULL, verify);
    const char *alone[] = { "tls_cert_file is set without tls_key_file", NULL };
    expect_refused("certificate alone", HG_ORDER_TLS_ON, NULL, pki.client, NULL, alone);
    const char *off[] = { "tls_ca_file is set but tls is off", NULL };
    expect_refused("a CA with tls off", HG_ORDER_TLS_OFF, pki.ca, NULL, NULL, off);
    char err[64];
    TU_CHECK(db_tls_check(&fields, HG_ORDER_TLS_OFF, NULL, NULL, NULL, err, sizeof err) == 0, "off alone: %s", err);
}

static void test_accepted(void)
{
    char bundle[600], crlf[600], long_line[600], ec_key[600], combined[600];
    char *ca = slurp(pki.ca), *other = slurp(pki.other_ca), *client = slurp(pki.client);
    char *client_key = slurp(pki.client_key);

    expect_ok("one CA", pki.ca, NULL, NULL);

    in_dir("bundle.pem", bundle, sizeof bundle);
    char *joined = calloc(1, strlen(ca) + strlen(other) + 1);
    TU_REQUIRE(joined != NULL, "out of memory");
    strcat(strcat(joined, other), ca);
    TU_REQUIRE(tu_write_file(bundle, joined) == 0, "cannot write %s", bundle);
    expect_ok("a bundle of two CAs", bundle, NULL, NULL);

    in_dir("crlf.pem", crlf, sizeof crlf);
    char *dos = calloc(2, strlen(ca) + 1), *w = dos;
    TU_REQUIRE(dos != NULL, "out of memory");
    for (const char *r = ca; *r != '\0'; r++) {
        if (*r == '\n')
            *w++ = '\r';
        *w++ = *r;
    }
    TU_REQUIRE(tu_write_file(crlf, dos) == 0, "cannot write %s", crlf);
    expect_ok("CRLF line ends", crlf, NULL, NULL);

    in_dir("long-line.pem", long_line, sizeof long_line);
    char *commented = calloc(1, strlen(ca) + 2000);
    TU_REQUIRE(commented != NULL, "out of memory");
    memset(commented, 'x', 1500); /* a 1500-byte comment line: longer than the old scan's 512-byte lines */
    strcat(strcat(commented, "\n"), ca);
    TU_REQUIRE(tu_write_file(long_line, commented) == 0, "cannot write %s", long_line);
    expect_ok("a long comment line first", long_line, NULL, NULL);

    in_dir("client-ec.key", ec_key, sizeof ec_key);
    const char *ec_args[] = { "ec", "-in", pki.client_key, "-out", ec_key, NULL };
    run_openssl(ec_args);
    char *ec_text = slurp(ec_key);
    TU_CHECK(strstr(ec_text, "-----BEGIN EC PRIVATE KEY-----") != NULL, "openssl ec wrote no EC PRIVATE KEY");
    expect_ok("an EC PRIVATE KEY", pki.ca, pki.client, ec_key);

    in_dir("combined.pem", combined, sizeof combined);
    char *both = calloc(1, strlen(client) + strlen(client_key) + 1);
    TU_REQUIRE(both != NULL, "out of memory");
    strcat(strcat(both, client), client_key);
    TU_REQUIRE(tu_write_file(combined, both) == 0, "cannot write %s", combined);
    expect_ok("certificate and key in one file", NULL, combined, combined);

    free(ca), free(other), free(client), free(client_key), free(joined), free(dos), free(commented), free(ec_text);
    free(both);
}

static void test_refused(void)
{
    char missing[600], der_ca[600], der_key[600], damaged[600], bad_bundle[600], bad_client[600];
    char request[600], pkcs8[600], legacy[600];
    char *ca = slurp(pki.ca);
    static const char damaged_block[] = "-----BEGIN CERTIFICATE-----\nMIIBnotbase64!!\n-----END CERTIFICATE-----\n";

    const char *empty[] = { "tls_ca_file is empty", NULL };
    expect_refused("an empty path", HG_ORDER_TLS_ON, "", NULL, NULL, empty);
    const char *directory[] = { "tls_ca_file: cannot read", dir, "Is a directory", NULL };
    expect_refused("a directory", HG_ORDER_TLS_ON, dir, NULL, NULL, directory);
    in_dir("no-such.pem", missing, sizeof missing);
    const char *absent[] = { "tls_ca_file: cannot read", missing, "No such file or directory", NULL };
    expect_refused("a missing file", HG_ORDER_TLS_ON, missing, NULL, NULL, absent);

    in_dir("ca.der", der_ca, sizeof der_ca);
    const char *der_ca_args[] = { "x509", "-in", pki.ca, "-outform", "DER", "-out", der_ca, NULL };
    run_openssl(der_ca_args);
    const char *der_ca_says[] = { "tls_ca_file: ", der_ca, "is DER (binary), not PEM", "openssl x509 -inform DER",
                                  NULL };
    expect_refused("a DER CA", HG_ORDER_TLS_ON, der_ca, NULL, NULL, der_ca_says);
    in_dir("client.der", der_key, sizeof der_key);
    const char *der_key_args[] = { "pkey", "-in", pki.client_key, "-outform", "DER", "-out", der_key, NULL };
    run_openssl(der_key_args);
    const char *der_key_says[] = { "tls_key_file: ", der_key, "is DER (binary), not PEM", "openssl pkey -inform DER",
                                   NULL };
    expect_refused("a DER key", HG_ORDER_TLS_ON, NULL, pki.client, der_key, der_key_says);

    in_dir("damaged.pem", damaged, sizeof damaged);
    TU_REQUIRE(tu_write_file(damaged, damaged_block) == 0, "cannot write %s", damaged);
    in_dir("bad-bundle.pem", bad_bundle, sizeof bad_bundle);
    char *joined = calloc(1, strlen(ca) + sizeof damaged_block);
    TU_REQUIRE(joined != NULL, "out of memory");
    strcat(strcat(joined, ca), damaged_block);
    TU_REQUIRE(tu_write_file(bad_bundle, joined) == 0, "cannot write %s", bad_bundle);
    const char *bundle_says[] = { "tls_ca_file: ", bad_bundle, "certificate 2 is damaged", NULL };
    expect_refused("a damaged second CA", HG_ORDER_TLS_ON, bad_bundle, NULL, NULL, bundle_says);
    in_dir("bad-client.pem", bad_client, sizeof bad_client);
    TU_REQUIRE(tu_write_file(bad_client, damaged_block) == 0, "cannot write %s", bad_client);
    const char *client_says[] = { "tls_cert_file: ", bad_client, "certificate 1 is damaged", NULL };
    expect_refused("a damaged client certificate", HG_ORDER_TLS_ON, NULL, bad_client, pki.client_key, client_says);

    in_dir("request.csr", request, sizeof request);
    const char *req_args[] = { "req", "-new", "-key", pki.client_key, "-subj", "/CN=x", "-out", request, NULL };
    run_openssl(req_args);
    const char *req_says[] = { "tls_ca_file: ", request, "holds no PEM certificate", NULL };
    expect_refused("a CSR as the CA", HG_ORDER_TLS_ON, request, NULL, NULL, req_says);
    const char *cert_as_key[] = { "tls_key_file: ", pki.client, "holds no PEM private key", NULL };
    expect_refused("a certificate as the key", HG_ORDER_TLS_ON, NULL, pki.client, pki.client, cert_as_key);

    in_dir("pkcs8-encrypted.key", pkcs8, sizeof pkcs8);
    const char *pkcs8_args[] = { "pkey", "-in", pki.client_key, "-aes256", "-passout", "pass:x", "-out", pkcs8, NULL };
    run_openssl(pkcs8_args);
    const char *pkcs8_says[] = { "tls_key_file: ", pkcs8, "is encrypted (a passphrase cannot be given)", NULL };
    expect_refused("a PKCS#8 encrypted key", HG_ORDER_TLS_ON, NULL, pki.client, pkcs8, pkcs8_says);
    in_dir("legacy-encrypted.key", legacy, sizeof legacy);
    const char *legacy_args[] = { "ec", "-in", pki.client_key, "-aes256", "-passout", "pass:x", "-out", legacy, NULL };
    run_openssl(legacy_args);
    const char *legacy_says[] = { "tls_key_file: ", legacy, "is encrypted (a passphrase cannot be given)", NULL };
    expect_refused("a legacy encrypted key", HG_ORDER_TLS_ON, NULL, pki.client, legacy, legacy_says);

    const char *mismatch[] = { "tls_key_file: ", pki.other_client_key, "is not the key of the certificate in",
                               pki.client, NULL };
    expect_refused("another certificate's key", HG_ORDER_TLS_ON, NULL, pki.client, pki.other_client_key, mismatch);

    free(ca), free(joined);
}

/* A FIFO (or any file that is not regular) given as each of the three files
 * is refused at once, naming the key and the path: opening one for reading
 * waited for a writer for ever. db_tls_check runs in a child, so a check that
 * blocks fails here (killed after 10 s) rather than hanging the suite. */
static void test_not_regular(void)
{
    char fifo[600];
    snprintf(fifo, sizeof fifo, "%s/ca.fifo", dir);
    TU_REQUIRE(mkfifo(fifo, 0600) == 0, "mkfifo %s: %s", fifo, strerror(errno));
    const char *ca[3] = { fifo, NULL, NULL }, *cert[3] = { NULL, fifo, pki.client },
               *key[3] = { NULL, pki.client_key, fifo };
    const char *field[3] = { "tls_ca_file: ", "tls_cert_file: ", "tls_key_file: " };
    for (int i = 0; i < 3; i++) {
        int pipefd[2];
        TU_REQUIRE(pipe(pipefd) == 0, "pipe");
        pid_t pid = fork();
        TU_REQUIRE(pid >= 0, "fork");
        if (pid == 0) {
            char err[1024] = "";
            int rc = db_tls_check(&fields, HG_ORDER_TLS_ON, ca[i], cert[i], key[i], err, sizeof err);
            ssize_t w = write(pipefd[1], err, strlen(err) + 1);
            _exit(rc == -1 && w > 0 ? 0 : 1);
        }
        close(pipefd[1]);
        uint64_t waited = 0;
        int status = tu_wait_exit(pid, 10000, &waited);
        char err[1024] = "";
        ssize_t n = status == -1 ? 0 : read(pipefd[0], err, sizeof err - 1);
        close(pipefd[0]);
        err[n > 0 ? n : 0] = '\0';
        TU_CHECK(status == 0, "%sa FIFO: exit %d after %llu ms (-1: still blocked, killed): '%s'", field[i], status,
                 (unsigned long long)waited, err);
        TU_CHECK(strstr(err, field[i]) != NULL && strstr(err, fifo) != NULL &&
                     strstr(err, "is not a regular file (a FIFO)") != NULL,
                 "%sa FIFO: '%s'", field[i], err);
    }
    unlink(fifo);
}

static const tu_test_t tests[] = {
    { "the rules name the field", test_rules },
    { "accepted: bundles, CRLF, long lines, EC and combined keys", test_accepted },
    { "refused: each bad file named with its problem", test_refused },
    { "refused at once: a FIFO, not opened", test_not_regular },
    { NULL, NULL },
};

static int add_suites(void)
{
    return tu_add_suite("tls_check", suite_init, suite_cleanup, NULL, NULL, tests);
}

int main(int argc, char **argv)
{
    return tu_cunit_main(argc, argv, add_suites);
}
