/*
 * tests/unit/test_client.c — CUnit suite for what an opened client is,
 * without a broker: hg_client_send_bound_ms, the longest one send can take
 * as the client is configured (lib/client_api.c, client_connect.c).
 *
 * Each test opens hourglass:// clients against a loopback stub
 * (tests/helpers/stub_broker.h: it accepts, answers AUTH with +OK and says
 * nothing else) and checks the bound's figure for the defaults and for
 * custom timeouts, credentials, reconnect and resend options, the read
 * timeout set after opening, and the cases without a bound. Each figure is
 * worked out in a comment from the rule in <hourglass/hourglass.h>: rounds ×
 * (connecting + read timeout), connecting = attempts × (connect [+ read for
 * AUTH]) + the backoff's pauses. hourglass+tls:// and amqp:// need a real
 * handshake: tests/integration/test_tls.c and test_transport.c check theirs.
 */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include "tests/helpers/stub_broker.h"
#include "tests/helpers/testutil.h"

#include <CUnit/CUnit.h>
#include <hourglass/hourglass.h>
#include <inttypes.h>
#include <stdio.h>

static sb_t stub;

static void setup(void)
{
    char err[256];
    TU_REQUIRE(sb_start(&stub, err, sizeof err) == 0, "%s", err);
}

static void teardown(void)
{
    sb_stop(&stub);
}

/* The options of the custom figures: connect 300 ms, read 2 s, one
 * reconnect retry 100 ms later (what the compensator's relay uses). */
static void custom_opts(hg_client_opts_t *o)
{
    hg_client_opts_init(o);
    o->connect_timeout_ms = 300;
    o->read_timeout_ms = 2000;
    o->reconnect_backoff.base_ms = 100;
    o->reconnect_backoff.cap_ms = 100;
    o->reconnect_backoff.attempts = 1;
}

/* Open hourglass://[login@]127.0.0.1:<stub> with o (NULL: the defaults). */
static hg_client_t *open_stub(const char *login, const hg_client_opts_t *o, int line)
{
    char uri[200];
    hg_client_t *c = NULL;
    hg_error_t e;
    snprintf(uri, sizeof uri, "hourglass://%s%s127.0.0.1:%d", login != NULL ? login : "", login != NULL ? "@" : "",
             stub.port);
    TU_REQUIRE_AT(hg_client_open(uri, o, &c, &e) == HG_OK, line, "open %s: %s", uri, e.message);
    return c;
}

/* The bound of a client opened with login and o, closed again. */
static uint64_t bound_at(const char *login, const hg_client_opts_t *o, int line)
{
    hg_client_t *c = open_stub(login, o, line);
    uint64_t ms = hg_client_send_bound_ms(c);
    hg_client_close(c);
    return ms;
}
#define BOUND(login, o) bound_at((login), (o), __LINE__)

static void test_defaults(void)
{
    /* connect 5 s, read 10 s, reconnect 5 times after 100, 200, 400, 800,
     * 1600 ms: connecting 6 × 5 s + 3.1 s = 33.1 s, a round 43.1 s, four */
    uint64_t ms = BOUND(NULL, NULL);
    TU_CHECK(ms == 172400, "the defaults: %" PRIu64 " ms, want 172400", ms);
    hg_client_opts_t o;
    hg_client_opts_init(&o);
    ms = BOUND(NULL, &o);
    TU_CHECK(ms == 172400, "hg_client_opts_init's: %" PRIu64 " ms, want 172400", ms);
    /* AUTH waits for its reply in every attempt: 6 × 15 s + 3.1 s = 93.1 s */
    ms = BOUND("u:p", NULL);
    TU_CHECK(ms == 412400, "the defaults with credentials: %" PRIu64 " ms, want 412400", ms);
}

static void test_custom_timeouts(void)
{
    hg_client_opts_t o;
    custom_opts(&o);
    /* connecting 2 × 0.3 s + 0.1 s = 0.7 s, a round 2.7 s, four */
    uint64_t ms = BOUND(NULL, &o);
    TU_CHECK(ms == 10800, "300ms / 2s: %" PRIu64 " ms, want 10800", ms);
    /* with credentials in the URI: 2 × (0.3 s + 2 s) + 0.1 s = 4.7 s, a round 6.7 s */
    ms = BOUND("relay:secret", &o);
    TU_CHECK(ms == 26800, "300ms / 2s, user:pass@: %" PRIu64 " ms, want 26800", ms);
    /* or in the options: the same */
    o.user = "relay";
    o.password = "secret";
    ms = BOUND(NULL, &o);
    TU_CHECK(ms == 26800, "300ms / 2s, opts.user: %" PRIu64 " ms, want 26800", ms);
    /* a longer connect timeout only: 2 × 1 s + 0.1 s, a round 4.1 s */
    custom_opts(&o);
    o.connect_timeout_ms = 1000;
    ms = BOUND(NULL, &o);
    TU_CHECK(ms == 16400, "1s / 2s: %" PRIu64 " ms, want 16400", ms);
}

static void test_reconnect_and_resend(void)
{
    hg_client_opts_t o;
    /* pauses that reach the cap: 100 + 200 + 400 + 500 + 500 = 1.7 s;
     * connecting 6 × 0.3 s + 1.7 s = 3.5 s, a round 5.5 s */
    custom_opts(&o);
    o.reconnect_backoff.attempts = 5;
    o.reconnect_backoff.cap_ms = 500;
    o.reconnect_backoff.factor = 2.0;
    uint64_t ms = BOUND(NULL, &o);
    TU_CHECK(ms == 22000, "five retries, cap 500 ms: %" PRIu64 " ms, want 22000", ms);
    /* no reconnect: one attempt a round, 0.3 s + 2 s */
    custom_opts(&o);
    o.reconnect = 0;
    ms = BOUND(NULL, &o);
    TU_CHECK(ms == 9200, "reconnect 0: %" PRIu64 " ms, want 9200", ms);
    o.reconnect_backoff.attempts = 0; /* "forever" means nothing without reconnect */
    ms = BOUND(NULL, &o);
    TU_CHECK(ms == 9200, "reconnect 0, attempts 0: %" PRIu64 " ms, want 9200", ms);
    /* no resend: one round */
    custom_opts(&o);
    o.resend_sends = 0;
    ms = BOUND(NULL, &o);
    TU_CHECK(ms == 2700, "resend_sends 0: %" PRIu64 " ms, want 2700", ms);
}

static void test_unbounded(void)
{
    hg_client_opts_t o;
    custom_opts(&o);
    o.read_timeout_ms = 0;
    uint64_t ms = BOUND(NULL, &o);
    TU_CHECK(ms == HG_UNBOUNDED, "read timeout 0: %" PRIu64, ms);
    custom_opts(&o);
    o.reconnect_backoff.attempts = 0; /* reconnect forever */
    ms = BOUND(NULL, &o);
    TU_CHECK(ms == HG_UNBOUNDED, "reconnecting forever: %" PRIu64, ms);
}

static void test_set_read_timeout_and_clone(void)
{
    hg_client_opts_t o;
    custom_opts(&o);
    hg_client_t *c = open_stub("relay:secret", &o, __LINE__), *copy = NULL;
    hg_error_t e;
    TU_CHECK(hg_client_send_bound_ms(c) == 26800, "opened: %" PRIu64, hg_client_send_bound_ms(c));
    /* the clone has c's URI, options and credentials, so the same bound */
    TU_REQUIRE(hg_client_clone(c, &copy, &e) == HG_OK, "clone: %s", e.message);
    TU_CHECK(hg_client_send_bound_ms(copy) == 26800, "its clone: %" PRIu64, hg_client_send_bound_ms(copy));
    hg_client_close(copy);
    /* the read timeout in force counts, in AUTH's wait too: 2 × 0.8 s + 0.1 s, a round 2.2 s */
    hg_client_set_read_timeout(c, 500);
    TU_CHECK(hg_client_send_bound_ms(c) == 8800, "read timeout set to 500 ms: %" PRIu64, hg_client_send_bound_ms(c));
    hg_client_set_read_timeout(c, 0);
    TU_CHECK(hg_client_send_bound_ms(c) == HG_UNBOUNDED, "read timeout set to 0: %" PRIu64, hg_client_send_bound_ms(c));
    hg_client_close(c);
}

static const tu_test_t bound_tests[] = {
    { "send bound: the defaults, with and without credentials", test_defaults },
    { "send bound: custom timeouts and credentials", test_custom_timeouts },
    { "send bound: reconnect pauses, no reconnect, no resend", test_reconnect_and_resend },
    { "send bound: none with a read timeout of 0 or reconnecting forever", test_unbounded },
    { "send bound: follows hg_client_set_read_timeout; a clone's is the same", test_set_read_timeout_and_clone },
    { NULL, NULL },
};

static const tu_suite_t suites[] = {
    { "bound", bound_tests },
};

int main(int argc, char **argv)
{
    return tu_suites_main(argc, argv, suites, sizeof suites / sizeof suites[0], setup, teardown);
}
