/*
 * tests/unit/test_compensator.c — the compensator's pure parts, without
 * servers: the relay's lease (comp_relay_lease_ms) against the client's
 * worst case.
 */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include "compensator/comp_config.h"
#include "compensator/relay.h"
#include "tests/helpers/testutil.h"

#include <CUnit/CUnit.h>
#include <hourglass/hourglass.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

/* The lease with the defaults and keys (name, value pairs, NULL-ended). */
static uint64_t lease_with(const char *const *keys)
{
    comp_config_t cfg;
    char err[256];
    comp_config_init(&cfg);
    for (size_t i = 0; keys[i] != NULL; i += 2)
        TU_CHECK(comp_config_set(&cfg, keys[i], keys[i + 1], err, sizeof err) == 0, "%s %s: %s", keys[i], keys[i + 1],
                 err);
    uint64_t ms = comp_relay_lease_ms(&cfg);
    comp_config_free(&cfg);
    return ms;
}

static void test_lease_figures(void)
{
    /* connect 1 s, broker-timeout 5 s: ensure 2 × 1 s + 0.1 s, lease 2.1 + 4 × 7.1 + 1 */
    const char *plain[] = { "uri", "hourglass://broker:7379", NULL };
    TU_CHECK(lease_with(plain) == 31500, "defaults: %" PRIu64 " ms", lease_with(plain));
    /* AUTH waits for a reply in every connection round: ensure 2 × 6 s + 0.1 s */
    const char *auth[] = { "uri", "hourglass://relay:secret@broker:7379", NULL };
    TU_CHECK(lease_with(auth) == 81500, "AUTH from the URI: %" PRIu64 " ms", lease_with(auth));
    const char *user[] = { "uri", "hourglass://broker:7379", "user", "relay", NULL };
    TU_CHECK(lease_with(user) == 81500, "AUTH from user: %" PRIu64 " ms", lease_with(user));
    /* the TLS handshake has its own connect timeout: ensure 2 × 2 s + 0.1 s */
    const char *tls[] = { "uri", "hourglass+tls://broker:7379", NULL };
    TU_CHECK(lease_with(tls) == 41500, "TLS: %" PRIu64 " ms", lease_with(tls));
    /* an '@' after the host is not a login */
    const char *query[] = { "uri", "hourglass://broker:7379/?x=a@b", NULL };
    TU_CHECK(lease_with(query) == 31500, "'@' in the query: %" PRIu64 " ms", lease_with(query));
    /* tests/integration/test_compensator.c's timeouts (the relay kill test waits for it) */
    const char *fast[] = { "uri", "hourglass://127.0.0.1:1", "broker-connect-timeout", "300ms", "broker-timeout", "2s",
                           NULL };
    TU_CHECK(lease_with(fast) == 12500, "300ms / 2s: %" PRIu64 " ms", lease_with(fast));
}

/* The review's bound: a send the client resends HG_SEND_MAX_RESENDS times,
 * each round connecting and then waiting broker-timeout, fits in the lease —
 * over a sweep of timeouts. */
static void test_lease_covers_resends(void)
{
    static const char *const connects[] = { "1ms", "300ms", "1s", "5s", "10m" };
    static const char *const replies[] = { "1ms", "2s", "5s", "30s", "10m" };
    static const char *const uris[] = { "hourglass://b:1", "hourglass://u:p@b:1", "hourglass+tls://b:1" };
    for (size_t u = 0; u < 3; u++)
        for (size_t c = 0; c < 5; c++)
            for (size_t r = 0; r < 5; r++) {
                comp_config_t cfg;
                char err[256];
                comp_config_init(&cfg);
                CU_ASSERT_EQUAL(comp_config_set(&cfg, "uri", uris[u], err, sizeof err), 0);
                CU_ASSERT_EQUAL(comp_config_set(&cfg, "broker-connect-timeout", connects[c], err, sizeof err), 0);
                CU_ASSERT_EQUAL(comp_config_set(&cfg, "broker-timeout", replies[r], err, sizeof err), 0);
                uint64_t rounds = 1 + HG_SEND_MAX_RESENDS;
                /* each round: two connection attempts (the relay's one reconnect retry) and the reply wait */
                uint64_t worst = rounds * (2 * cfg.broker_connect_timeout_ms + cfg.broker_timeout_ms);
                uint64_t lease = comp_relay_lease_ms(&cfg);
                TU_CHECK(lease >= worst + 1000, "%s, connect %s, timeout %s: lease %" PRIu64 " ms < %" PRIu64 " ms",
                         uris[u], connects[c], replies[r], lease, worst + 1000);
                comp_config_free(&cfg);
            }
}

static const tu_test_t lease_tests[] = {
    { "relay lease: figures", test_lease_figures },
    { "relay lease: covers every resend", test_lease_covers_resends },
    { NULL, NULL },
};

static const tu_suite_t suites[] = {
    { "lease", lease_tests },
};

int main(int argc, char **argv)
{
    return tu_suites_main(argc, argv, suites, sizeof suites / sizeof suites[0], NULL, NULL);
}
