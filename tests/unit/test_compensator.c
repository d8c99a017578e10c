/*
 * tests/unit/test_compensator.c — the compensator's parts that need no
 * server: the relay's lease (comp_relay_lease_ms, on a client opened with the
 * relay's options against a loopback stub, tests/helpers/stub_broker.h)
 * against the client's worst case; the alert state machine (comp_alert_check_at with a clock the
 * test drives; no alert-command, so an alert is only logged); which failed
 * cancels are lock conflicts a round passes over (comp_cancel_lock_conflict).
 */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include "common/log.h"
#include "compensator/alerts.h"
#include "compensator/cancel.h"
#include "compensator/comp_config.h"
#include "compensator/relay.h"
#include "compensator/stats.h"
#include "compensator/stuck.h"
#include "tests/helpers/stub_broker.h"
#include "tests/helpers/testutil.h"

#include <CUnit/CUnit.h>
#include <hourglass/hourglass.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

static sb_t stub;

/* The lease of the relay's client as the defaults and keys (name, value
 * pairs, NULL-ended) make it (comp_relay_client_opts), opened against the
 * stub as hourglass://[login@]127.0.0.1:<stub>. 0 when it cannot be opened
 * (reported at line). */
static uint64_t lease_at(const char *login, const char *const *keys, int line)
{
    comp_config_t cfg;
    hg_client_opts_t o;
    hg_client_t *c = NULL;
    hg_error_t e;
    char err[256], uri[200];
    uint64_t ms = 0;

    comp_config_init(&cfg);
    for (size_t i = 0; keys[i] != NULL; i += 2)
        TU_CHECK_AT(comp_config_set(&cfg, keys[i], keys[i + 1], err, sizeof err) == 0, line, "%s %s: %s", keys[i],
                    keys[i + 1], err);
    snprintf(uri, sizeof uri, "hourglass://%s%s127.0.0.1:%d", login != NULL ? login : "", login != NULL ? "@" : "",
             stub.port);
    comp_relay_client_opts(&cfg, &o);
    TU_CHECK_AT(hg_client_open(uri, &o, &c, &e) == HG_OK, line, "open %s: %s", uri, e.message);
    if (c != NULL)
        ms = comp_relay_lease_ms(c);
    hg_client_close(c);
    comp_config_free(&cfg);
    return ms;
}
#define LEASE(login, keys) lease_at((login), (keys), __LINE__)

static void test_lease_figures(void)
{
    /* connect 1 s, broker-timeout 5 s, one reconnect retry 100 ms later:
     * connecting 2 × 1 s + 0.1 s, a round 7.1 s, four, and a second */
    const char *none[] = { NULL };
    uint64_t ms = LEASE(NULL, none);
    TU_CHECK(ms == 29400, "defaults: %" PRIu64 " ms, want 29400", ms);
    /* AUTH waits for its reply in every attempt: connecting 2 × 6 s + 0.1 s */
    ms = LEASE("relay:secret", none);
    TU_CHECK(ms == 69400, "AUTH: %" PRIu64 " ms, want 69400", ms);
    /* tests/integration/test_compensator.c's timeouts (the relay kill test waits for it):
     * connecting 2 × 0.3 s + 0.1 s, a round 2.7 s */
    const char *fast[] = { "broker-connect-timeout", "300ms", "broker-timeout", "2s", NULL };
    ms = LEASE(NULL, fast);
    TU_CHECK(ms == 11800, "300ms / 2s: %" PRIu64 " ms, want 11800", ms);
    /* a bound past the cap: connecting 2 × (1 s + 30 s) + 0.1 s, a round 92.1 s, four */
    const char *slow[] = { "broker-timeout", "30s", NULL };
    ms = LEASE("relay:secret", slow);
    TU_CHECK(ms == RELAY_LEASE_MAX_MS, "AUTH, 30 s: %" PRIu64 " ms, want the cap %u", ms, RELAY_LEASE_MAX_MS);
    /* just under it: connecting 2 × (1 s + 2.8 s) + 0.1 s = 7.7 s, a round 10.5 s, four 42 s, + 1 s */
    const char *under[] = { "broker-timeout", "2800ms", NULL };
    ms = LEASE("relay:secret", under);
    TU_CHECK(ms == 43000, "AUTH, 2.8 s: %" PRIu64 " ms, want 43000", ms);
}

/* The review's bound: a send the client resends HG_SEND_MAX_RESENDS times,
 * each round connecting (two attempts: the relay's one reconnect retry) and
 * then waiting broker-timeout, fits in the lease — over a sweep of
 * timeouts — up to the cap, RELAY_LEASE_MAX_MS. */
static void test_lease_covers_resends(void)
{
    static const char *const connects[] = { "1ms", "300ms", "1s", "5s", "10m" };
    static const char *const replies[] = { "1ms", "2s", "5s", "30s", "10m" };
    static const char *const logins[] = { NULL, "u:p" };
    for (size_t u = 0; u < 2; u++)
        for (size_t c = 0; c < 5; c++)
            for (size_t r = u == 1 ? 1 : 0; r < 5; r++) { /* AUTH's reply within 1 ms: not on a loaded machine */
                const char *keys[] = { "broker-connect-timeout", connects[c], "broker-timeout", replies[r], NULL };
                comp_config_t cfg;
                char err[256];
                comp_config_init(&cfg);
                CU_ASSERT_EQUAL(comp_config_set(&cfg, keys[0], keys[1], err, sizeof err), 0);
                CU_ASSERT_EQUAL(comp_config_set(&cfg, keys[2], keys[3], err, sizeof err), 0);
                uint64_t rounds = 1 + HG_SEND_MAX_RESENDS, auth = logins[u] != NULL ? cfg.broker_timeout_ms : 0;
                uint64_t worst = rounds * (2 * (cfg.broker_connect_timeout_ms + auth) + cfg.broker_timeout_ms);
                comp_config_free(&cfg);
                uint64_t lease = LEASE(logins[u], keys), want = worst + 1000;
                if (want > RELAY_LEASE_MAX_MS)
                    want = RELAY_LEASE_MAX_MS; /* the cap: past it a batch counts as an overrun */
                TU_CHECK(lease >= want && lease <= RELAY_LEASE_MAX_MS,
                         "%s, connect %s, timeout %s: lease %" PRIu64 " ms, want %" PRIu64 " .. %u ms",
                         logins[u] != NULL ? "AUTH" : "plain", connects[c], replies[r], lease, want,
                         RELAY_LEASE_MAX_MS);
            }
}

/* ---------------------------------------------------------------- alerts */

static comp_config_t alert_cfg;

/* Alerts with alert-min-interval min (no command: logged only). */
static comp_alerts_t *alerts_with(const char *min)
{
    char err[256];
    comp_stats_init();
    comp_config_init(&alert_cfg);
    TU_CHECK(comp_config_set(&alert_cfg, "alert-min-interval", min, err, sizeof err) == 0, "%s", err);
    return comp_alerts_new(&alert_cfg);
}

static void alerts_done(comp_alerts_t *a)
{
    comp_alerts_free(a);
    comp_config_free(&alert_cfg);
}

#define SEC 1000000ull /* µs */

/* What one check sent: 'F' firing, 'R' resolved, '-' nothing. */
static char check(comp_alerts_t *a, int active, uint64_t now_us)
{
    int ran = comp_alert_check_at(a, COMP_ALERT_DLQ_DEPTH, "order-cancel", active, active ? 5 : 0, 1, "DLQ", now_us);
    return ran ? (active ? 'F' : 'R') : '-';
}

/* The review's case, on the real clock: fired, resolved, back at once (well
 * within alert-min-interval 1h): a new incident, so it fires. */
static void test_alert_refire_after_resolve(void)
{
    comp_alerts_t *a = alerts_with("1h");
    const char *m = "DLQ depth 5";
    CU_ASSERT_EQUAL(comp_alert_check(a, COMP_ALERT_DLQ_DEPTH, "g", 1, 5, 1, m), 1);
    CU_ASSERT_EQUAL(comp_alert_check(a, COMP_ALERT_DLQ_DEPTH, "g", 1, 5, 1, m), 0); /* a reminder held back */
    CU_ASSERT_EQUAL(comp_alert_check(a, COMP_ALERT_DLQ_DEPTH, "g", 0, 0, 1, m), 1); /* resolved */
    TU_CHECK(comp_alert_check(a, COMP_ALERT_DLQ_DEPTH, "g", 1, 3, 1, m) == 1,
             "an alert back right after its resolve was not sent");
    CU_ASSERT_EQUAL(comp_load(&comp_stats.alerts_fired[COMP_ALERT_DLQ_DEPTH]), 2);
    CU_ASSERT_EQUAL(comp_load(&comp_stats.alerts_suppressed[COMP_ALERT_DLQ_DEPTH]), 1);
    CU_ASSERT_EQUAL(comp_gauge_get(&comp_stats.alerts_active[COMP_ALERT_DLQ_DEPTH]), 1);
    alerts_done(a);
}

static void test_alert_reminders(void)
{
    comp_alerts_t *a = alerts_with("10m");
    uint64_t t = 1000 * SEC;
    CU_ASSERT_EQUAL(check(a, 1, t), 'F');
    CU_ASSERT_EQUAL(check(a, 1, t + 15 * SEC), '-');
    CU_ASSERT_EQUAL(check(a, 1, t + 599 * SEC), '-');
    CU_ASSERT_EQUAL(check(a, 1, t + 600 * SEC), 'F'); /* reminder */
    CU_ASSERT_EQUAL(check(a, 0, t + 615 * SEC), 'R'); /* a single episode resolves at once */
    CU_ASSERT_EQUAL(check(a, 0, t + 630 * SEC), '-');
    /* other subjects are separate alerts */
    CU_ASSERT_EQUAL(comp_alert_check_at(a, COMP_ALERT_DLQ_DEPTH, "other", 1, 2, 1, "DLQ", t + 631 * SEC), 1);
    alerts_done(a);
}

/* A condition that flaps every monitor round (15 s) for an hour: every
 * episode that begins is told, the resolves are held while it flaps, so
 * the commands stay few; it ends with exactly one resolve once it settles,
 * and firings and resolves alternate from the start. */
static void test_alert_flapping_bounded(void)
{
    comp_alerts_t *a = alerts_with("10m");
    char sent[512];
    size_t n = 0;
    uint64_t t = 1000 * SEC;
    for (int i = 0; i < 240; i++, t += 15 * SEC) {
        char c = check(a, i % 2 == 0, t);
        if (c != '-' && n + 1 < sizeof sent)
            sent[n++] = c;
    }
    sent[n] = '\0';
    /* settles: clear from here on; the held resolve comes after 10 min clear */
    for (int i = 0; i < 60; i++, t += 15 * SEC) {
        char c = check(a, 0, t);
        if (c != '-' && n + 1 < sizeof sent)
            sent[n++] = c;
    }
    sent[n] = '\0';
    printf("\n    flapping every 15 s for 1 h, then clear 15 min (alert-min-interval 10m): %s\n", sent);
    /* F R F, then a reminder per 10 min of flapping (6 in the hour), then the one resolve */
    TU_CHECK(strncmp(sent, "FRF", 3) == 0, "starts %s", sent);
    TU_CHECK(n >= 4 && sent[n - 1] == 'R', "ends %s", sent);
    size_t fired = 0, resolved = 0;
    int open = 0, alternate = 1;
    for (size_t i = 0; i < n; i++) {
        if (sent[i] == 'R') {
            alternate &= open;
            open = 0;
            resolved++;
        } else {
            fired++;
            open = 1;
        }
    }
    TU_CHECK(alternate && !open, "a resolve without a firing before it, or none at the end: %s", sent);
    TU_CHECK(resolved == 2 && fired <= 2 + 6 + 1, "%zu firings, %zu resolves (want <= 9, 2): %s", fired, resolved,
             sent);
    alerts_done(a);
}

/* A real new incident long after the flapping settled resolves at once again. */
static void test_alert_after_flapping(void)
{
    comp_alerts_t *a = alerts_with("10m");
    uint64_t t = 1000 * SEC;
    CU_ASSERT_EQUAL(check(a, 1, t), 'F');
    CU_ASSERT_EQUAL(check(a, 0, t + 15 * SEC), 'R');
    CU_ASSERT_EQUAL(check(a, 1, t + 30 * SEC), 'F'); /* flapping: its resolve is held */
    CU_ASSERT_EQUAL(check(a, 0, t + 45 * SEC), '-');
    CU_ASSERT_EQUAL(check(a, 0, t + 644 * SEC), '-');
    CU_ASSERT_EQUAL(check(a, 0, t + 645 * SEC), 'R'); /* clear for 10 min */
    CU_ASSERT_EQUAL(check(a, 1, t + 3600 * SEC), 'F');
    CU_ASSERT_EQUAL(check(a, 0, t + 3615 * SEC), 'R'); /* not flapping: at once */
    alerts_done(a);
    /* alert-min-interval 0: every change is sent */
    comp_alerts_t *b = alerts_with("0s");
    for (int i = 0; i < 6; i++)
        CU_ASSERT_EQUAL(check(b, i % 2 == 0, t + (uint64_t)i * SEC), i % 2 == 0 ? 'F' : 'R');
    alerts_done(b);
}

/* The orders failing permanently (stuck.c), on a clock the test drives:
 * logged once, again when the error changes or an hour on; paused 1 s, 2 s,
 * 4 s … up to an hour; forgotten when settled; bounded. */
static hg_order_error_t stuck_error(unsigned code, const char *text)
{
    hg_order_error_t e;
    memset(&e, 0, sizeof e);
    e.code = code;
    snprintf(e.message, sizeof e.message, "%s", text);
    return e;
}

static void test_stuck(void)
{
    comp_stuck_reset();
    comp_stuck_set_backoff(1000);
    hg_order_error_t check = stuck_error(4025, "batch stock: 4025 CONSTRAINT `stock_nonneg` failed");
    hg_order_error_t other = stuck_error(1406, "batch outbox: 1406 Data too long");
    hg_order_error_t got;
    uint64_t t = 1000000;
    CU_ASSERT_EQUAL(comp_stuck_failed(7, &check, t), 1); /* new: logged */
    CU_ASSERT_EQUAL(comp_stuck_count(), 1);
    CU_ASSERT_EQUAL(comp_stuck_deferred(7, t + 999, &got), 1); /* paused 1 s */
    TU_CHECK(strstr(got.message, "(not tried for 0.0 s more) batch stock: 4025") == got.message, "%s", got.message);
    CU_ASSERT_EQUAL(got.code, 4025);
    CU_ASSERT_EQUAL(comp_stuck_deferred(7, t + 1000, &got), 0);
    CU_ASSERT_EQUAL(comp_stuck_deferred(8, t, &got), 0);        /* another order */
    CU_ASSERT_EQUAL(comp_stuck_failed(7, &check, t + 1000), 0); /* the same: not logged again */
    CU_ASSERT_EQUAL(comp_stuck_deferred(7, t + 2999, &got), 1); /* paused 2 s now */
    CU_ASSERT_EQUAL(comp_stuck_deferred(7, t + 3000, &got), 0);
    CU_ASSERT_EQUAL(comp_stuck_failed(7, &other, t + 3000), 1);                        /* its error changed */
    CU_ASSERT_EQUAL(comp_stuck_failed(7, &other, t + 4000), 0);                        /* … once */
    CU_ASSERT_EQUAL(comp_stuck_failed(7, &other, t + 3000 + COMP_STUCK_REMIND_MS), 1); /* an hour on: reminded */
    for (int i = 0; i < 30; i++)                                                       /* the pause stops at an hour */
        comp_stuck_failed(7, &other, t);
    CU_ASSERT_EQUAL(comp_stuck_deferred(7, t + COMP_STUCK_BACKOFF_CAP_MS - 1, &got), 1);
    CU_ASSERT_EQUAL(comp_stuck_deferred(7, t + COMP_STUCK_BACKOFF_CAP_MS, &got), 0);
    comp_stuck_settled(7); /* cancelled at last: forgotten */
    CU_ASSERT_EQUAL(comp_stuck_count(), 0);
    CU_ASSERT_EQUAL(comp_stuck_deferred(7, t, &got), 0);
    CU_ASSERT_EQUAL(comp_stuck_failed(7, &check, t), 1); /* failing again: news again */

    /* bounded: beyond COMP_STUCK_MAX every failure is logged, and counted */
    for (uint64_t id = 100; id < 100 + COMP_STUCK_MAX; id++)
        comp_stuck_failed(id, &check, t);
    CU_ASSERT_EQUAL(comp_stuck_count(), COMP_STUCK_MAX);
    uint64_t before = comp_stuck_overflows();
    CU_ASSERT_EQUAL(comp_stuck_failed(1, &check, t), 1);
    CU_ASSERT_EQUAL(comp_stuck_failed(1, &check, t), 1);
    CU_ASSERT_EQUAL(comp_stuck_overflows(), before + 2);
    CU_ASSERT_EQUAL(comp_stuck_deferred(1, t, &got), 0); /* not remembered: tried every round */
    comp_stuck_set_backoff(0);                           /* 0: never paused */
    comp_stuck_reset();
    CU_ASSERT_EQUAL(comp_stuck_failed(9, &check, t), 1);
    CU_ASSERT_EQUAL(comp_stuck_deferred(9, t, &got), 0);
    comp_stuck_reset();
    CU_ASSERT_EQUAL(comp_stuck_count(), 0);
}

static const tu_test_t stuck_tests[] = {
    { "logged once, paused, forgotten when settled, bounded", test_stuck },
    { NULL, NULL },
};

static const tu_test_t alert_tests[] = {
    { "back within alert-min-interval after its resolve: fires", test_alert_refire_after_resolve },
    { "reminders at most once per alert-min-interval", test_alert_reminders },
    { "flapping: every firing told, then bounded, one resolve at the end", test_alert_flapping_bounded },
    { "a held resolve; later incidents resolve at once; min-interval 0", test_alert_after_flapping },
    { NULL, NULL },
};

static const tu_test_t lease_tests[] = {
    { "relay lease: figures", test_lease_figures },
    { "relay lease: covers every resend", test_lease_covers_resends },
    { NULL, NULL },
};

/* A lock wait timeout or a deadlock is a lock conflict (skipped, retried next
 * round, the round not failed); a lost connection, a permanent failure or a
 * transient one of another kind is not. */
static void test_lock_conflict(void)
{
    static const struct {
        hg_order_outcome_t outcome;
        unsigned code;
        int conflict;
    } cases[] = {
        { HG_ORDER_TRANSIENT, 1205, 1 },                                  /* lock wait timeout */
        { HG_ORDER_TRANSIENT, 1213, 1 },                                  /* deadlock */
        { HG_ORDER_TRANSIENT, 2013, 0 },                                  /* lost during a query: MariaDB, not a lock */
        { HG_ORDER_TRANSIENT, 1045, 0 },                                  /* access denied */
        { HG_ORDER_TRANSIENT, 0, 0 },    { HG_ORDER_PERMANENT, 1205, 0 }, /* only a transient outcome */
        { HG_ORDER_LOCKED, 0, 0 },                                        /* the layers count it themselves */
        { HG_ORDER_CANCELLED, 0, 0 },
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        hg_order_error_t err = { .code = cases[i].code };
        TU_CHECK(comp_cancel_lock_conflict(cases[i].outcome, &err) == cases[i].conflict, "%s %u: expected %d",
                 hg_order_outcome_name(cases[i].outcome), cases[i].code, cases[i].conflict);
    }
    TU_CHECK(comp_cancel_lock_conflict(HG_ORDER_TRANSIENT, NULL) == 0, "NULL error: expected 0");
}

static const tu_test_t conflict_tests[] = {
    { "1205 and 1213 are lock conflicts, nothing else", test_lock_conflict },
    { NULL, NULL },
};

static const tu_suite_t suites[] = {
    { "lease", lease_tests },
    { "alerts", alert_tests },
    { "permanent failures", stuck_tests },
    { "lock conflicts", conflict_tests },
};

int main(int argc, char **argv)
{
    char err[256];
    log_set_level(LOG_LEVEL_ERROR); /* the alerts are logged at warn */
    if (sb_start(&stub, err, sizeof err) != 0) {
        fprintf(stderr, "%s\n", err);
        return 1;
    }
    int rc = tu_suites_main(argc, argv, suites, sizeof suites / sizeof suites[0], NULL, NULL);
    sb_stop(&stub);
    return rc;
}
