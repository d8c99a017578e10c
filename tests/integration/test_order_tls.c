/*
 * tests/integration/test_order_tls.c — hourglass-consumer cancelling orders
 * over TLS: the real ./hourglass-broker with a tls-port that requires client
 * certificates (tls-auth-clients yes), a private MariaDB, the real
 * ./hourglass-consumer with an hourglass+tls:// uri and the tls-* keys, and
 * a throwaway CA made by the test (tests/helpers/tls_certs.h).
 *
 *   cancel over TLS  orders seeded, some paid; their ids sent through the
 *                    library over TLS; the daemon (mutual TLS) cancels exactly
 *                    the unpaid ones; the invariant holds; SIGTERM ends it
 *                    with status 0.
 *   refused          the same daemon with a CA that did not sign the broker's
 *                    certificate cancels nothing and logs why; --check-config
 *                    refuses tls-* keys with a plaintext uri.
 */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include "include/hourglass/hourglass.h"
#include "include/hourglass/order.h"
#include "tests/helpers/order_env.h"
#include "tests/helpers/tls_certs.h"

#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <CUnit/CUnit.h>

#define NORDERS 200
#define NPAID   50

static oe_env_t env;
static tc_certs_t pki;
static char pki_dir[512], tls_port[16], tls_uri[128];

static int suite_init(void)
{
    char err[4096];
    if (tu_mkdtemp("order-tls-pki", pki_dir, sizeof pki_dir) != 0 || tc_make(pki_dir, &pki, err, sizeof err) != 0) {
        fprintf(stderr, "test PKI: %s\n", err);
        return -1;
    }
    snprintf(tls_port, sizeof tls_port, "%d", tu_free_port());
    snprintf(tls_uri, sizeof tls_uri, "hourglass+tls://127.0.0.1:%s", tls_port);
    const char *extra[] = { "--tls-port",
                            tls_port,
                            "--tls-cert-file",
                            pki.server,
                            "--tls-key-file",
                            pki.server_key,
                            "--tls-auth-clients",
                            "yes",
                            "--tls-ca-cert-file",
                            pki.ca,
                            NULL };
    bp_set_failure_counter(CU_get_number_of_failures);
    if (oe_start(&env, extra, err, sizeof err) != 0) {
        fprintf(stderr, "order env: %s\n", err);
        return -1;
    }
    return 0;
}

static int suite_cleanup(void)
{
    oe_stop(&env);
    if (getenv("HG_KEEP_TMP") == NULL)
        tu_rmtree(pki_dir);
    return 0;
}

static int all_cancelled(void *arg)
{
    (void)arg;
    return oe_scalar(&env, "SELECT COUNT(*) FROM tlsorders.orders WHERE status = 'pending'") == 0;
}

static void test_cancel_over_tls(void)
{
    hg_order_db *db = oe_fresh_database(&env, "tlsorders", NORDERS, NULL);
    CU_ASSERT_PTR_NOT_NULL_FATAL(db);
    hg_order_outcome_t out;
    for (uint64_t id = 1; id <= NPAID; id++)
        CU_ASSERT_EQUAL(hg_order_pay(db, id, &out, NULL), 0);

    /* The producer side over TLS too: the library with the client certificate. */
    hg_client_opts_t o;
    hg_client_opts_init(&o);
    o.tls_ca_file = pki.ca;
    o.tls_cert_file = pki.client;
    o.tls_key_file = pki.client_key;
    hg_client_t *c = NULL;
    hg_error_t e;
    if (hg_client_open(tls_uri, &o, &c, &e) != HG_OK)
        fprintf(stderr, "\n  open %s: %s\n", tls_uri, e.message);
    CU_ASSERT_PTR_NOT_NULL_FATAL(c);
    const char *create[] = { "GROUP", "CREATE", "tlsorders", OE_TOPIC, "FROM", "NOW" };
    hg_reply_t *r = NULL;
    CU_ASSERT_EQUAL_FATAL(hg_client_command(c, 6, create, NULL, &r), HG_OK);
    hg_reply_free(r);
    for (int id = 1; id <= NORDERS; id++) {
        char payload[24];
        int n = snprintf(payload, sizeof payload, "%d", id);
        hg_err_t rc = hg_send(c, OE_TOPIC, payload, payload, (size_t)n, hg_delay_none(), NULL);
        if (rc != HG_OK)
            fprintf(stderr, "\n  send %d: %s\n", id, hg_client_errmsg(c));
        CU_ASSERT_EQUAL_FATAL(rc, HG_OK);
    }

    char dir[512], log_path[600];
    CU_ASSERT_EQUAL_FATAL(tu_mkdtemp("consumer-tls", dir, sizeof dir), 0);
    snprintf(log_path, sizeof log_path, "%s/consumer.log", dir);
    const char *extra[] = { "--uri",    tls_uri,          "--tls-ca-cert-file", pki.ca, "--tls-cert-file",
                            pki.client, "--tls-key-file", pki.client_key,       NULL };
    pid_t pid = oe_start_consumer(&env, "tlsorders", "tlsorders", 4, 0, log_path, extra);
    CU_ASSERT_TRUE_FATAL(pid > 0);
    CU_ASSERT_EQUAL(tu_poll_until(all_cancelled, NULL, 120000, 50), 0);
    CU_ASSERT_EQUAL(oe_stop_consumer(pid), 0);
    if (CU_get_number_of_failures() > 0)
        oe_print_file(log_path);

    of_report_t rep;
    hg_order_error_t oerr;
    CU_ASSERT_EQUAL_FATAL(oe_check(&env, "tlsorders", 3600, &rep, &oerr), 0);
    CU_ASSERT_TRUE(rep.ok);
    CU_ASSERT_EQUAL(rep.paid, NPAID);
    CU_ASSERT_EQUAL(rep.cancelled, NORDERS - NPAID);
    /* Every lease was ACKed over TLS: nothing left in flight or in the DLQ. */
    const char *dlq[] = { "DLQ", "LEN", "tlsorders" };
    r = NULL;
    CU_ASSERT_EQUAL(hg_client_command(c, 3, dlq, NULL, &r), HG_OK);
    if (r != NULL)
        CU_ASSERT_EQUAL(hg_reply_integer(r), 0);
    hg_reply_free(r);
    hg_client_close(c);
    tu_rmtree(dir);
    hg_order_db_close(db);
}

static void test_refused(void)
{
    hg_order_db *db = oe_fresh_database(&env, "tlsrefused", 20, NULL);
    CU_ASSERT_PTR_NOT_NULL_FATAL(db);
    rc_conn_t c;
    char err[512];
    CU_ASSERT_EQUAL_FATAL(bp_connect(&env.broker, &c, err, sizeof err), 0);
    CU_ASSERT_EQUAL_FATAL(bp_ok_cmd(&c, err, sizeof err, "GROUP", "CREATE", "tlsrefused", OE_TOPIC, NULL), 0);
    CU_ASSERT_EQUAL_FATAL(oe_send_ids(&c, 1, 20, err, sizeof err), 0);
    rc_close(&c);

    char dir[512], log_path[600];
    CU_ASSERT_EQUAL_FATAL(tu_mkdtemp("consumer-tls", dir, sizeof dir), 0);
    snprintf(log_path, sizeof log_path, "%s/consumer.log", dir);
    const char *extra[] = { "--uri",    tls_uri,          "--tls-ca-cert-file", pki.other_ca, "--tls-cert-file",
                            pki.client, "--tls-key-file", pki.client_key,       NULL };
    pid_t pid = oe_start_consumer(&env, "tlsrefused", "tlsrefused", 1, 0, log_path, extra);
    CU_ASSERT_TRUE_FATAL(pid > 0);
    CU_ASSERT_EQUAL(tu_wait_file_contains(log_path, "the broker's TLS certificate is not trusted", 60000), 0);
    CU_ASSERT_EQUAL(oe_scalar(&env, "SELECT COUNT(*) FROM tlsrefused.orders WHERE status = 'pending'"), 20);
    oe_stop_consumer(pid);
    if (CU_get_number_of_failures() > 0)
        oe_print_file(log_path);
    tu_rmtree(dir);

    char out[4096];
    const char *argv[] = {
        OE_CONSUMER_BIN, "--check-config", "--mysql-database", "x", "--tls-ca-cert-file", pki.ca, NULL
    };
    int rc = tu_run_capture(argv, out, sizeof out);
    CU_ASSERT_EQUAL(rc, 2);
    CU_ASSERT_PTR_NOT_NULL(strstr(out, "tls-ca-cert-file is set but uri is neither hourglass+tls:// nor amqps://"));
    hg_order_db_close(db);
}

static const tu_test_t tests[] = {
    { "hourglass-consumer cancels over mutual TLS", test_cancel_over_tls },
    { "an untrusted broker certificate: nothing cancelled, the reason logged", test_refused },
    { NULL, NULL },
};

static int add_suites(void)
{
    return tu_add_suite("tls", suite_init, suite_cleanup, NULL, NULL, tests);
}

int main(int argc, char **argv)
{
    return oe_cunit_main(argc, argv, add_suites);
}
