/*
 * tests/unit/test_stop_grace.c — CUnit suite for common/stop_grace.c, the
 * bounded stop hourglass-consumer and hourglass-compensator share: the
 * handles are cut once the grace after the first request has run out (not
 * before), at once on a second request or with a grace of 0, at once when
 * registered after the cut; a withdrawn handle is never cut, and nothing is
 * cut without a request. The cut fd (the broker clients' stop fd) becomes
 * readable at the cut, not before, and stays so. stop_grace_handle_signals
 * gives SIGINT and SIGTERM to the daemon's handler, or ignores them. The
 * handles here are counters; every wait polls with a deadline.
 */
#include "common/stop_grace.h"
#include "tests/helpers/testutil.h"

#include <CUnit/CUnit.h>
#include <poll.h>
#include <signal.h>
#include <stdatomic.h>
#include <string.h>

typedef struct handle {
    atomic_int cuts;
} handle_t;

static void cut(void *h)
{
    atomic_fetch_add(&((handle_t *)h)->cuts, 1);
}

static stop_grace_t *start(uint64_t grace_ms)
{
    const stop_grace_opts_t opts = {
        .grace_ms = grace_ms, .finishing = "finishing the test", .handles = "test handles", .after_cut = "nothing lost"
    };
    char err[256] = "";
    stop_grace_t *s = stop_grace_start(&opts, err, sizeof err);
    TU_CHECK(s != NULL, "stop_grace_start: %s", err);
    return s;
}

static int is_cut(void *s)
{
    return stop_grace_cut(s);
}

/* The cut fd is readable now. */
static int cut_fd_readable(void *s)
{
    struct pollfd p = { stop_grace_cut_fd(s), POLLIN, 0 };
    return poll(&p, 1, 0) == 1 && (p.revents & POLLIN);
}

static void test_no_request(void)
{
    handle_t h = { 0 };
    stop_grace_t *s = start(0);
    CU_ASSERT_PTR_NOT_NULL_FATAL(s);
    stop_grace_watch(s, cut, &h);
    CU_ASSERT_FALSE(cut_fd_readable(s));
    stop_grace_finish(s);
    CU_ASSERT_EQUAL(atomic_load(&h.cuts), 0);
}

static void test_grace(void)
{
    handle_t a = { 0 }, b = { 0 }, gone = { 0 };
    stop_grace_t *s = start(300);
    CU_ASSERT_PTR_NOT_NULL_FATAL(s);
    stop_grace_watch(s, cut, &a);
    stop_grace_watch(s, cut, &gone);
    stop_grace_watch(s, cut, &b);
    stop_grace_unwatch(s, &gone);
    stop_grace_unwatch(s, &gone); /* not registered any more: nothing */
    uint64_t t0 = tu_now_mono_ms();
    stop_grace_request(s);
    CU_ASSERT_EQUAL(stop_grace_cut(s), 0);
    CU_ASSERT_FALSE(cut_fd_readable(s));
    CU_ASSERT_EQUAL_FATAL(tu_poll_until(cut_fd_readable, s, 10000, 5), 0);
    uint64_t took = tu_now_mono_ms() - t0;
    TU_CHECK(took >= 290, "cut fd readable %llu ms after the request, before the 300 ms grace",
             (unsigned long long)took);
    CU_ASSERT_EQUAL(stop_grace_cut(s), 1);
    CU_ASSERT_EQUAL(atomic_load(&a.cuts), 1);
    CU_ASSERT_EQUAL(atomic_load(&b.cuts), 1);
    CU_ASSERT_EQUAL(atomic_load(&gone.cuts), 0);
    /* Registered after the cut: cut as it is registered. */
    handle_t late = { 0 };
    stop_grace_watch(s, cut, &late);
    CU_ASSERT_EQUAL(atomic_load(&late.cuts), 1);
    stop_grace_request(s);              /* after the cut: nothing more */
    CU_ASSERT_TRUE(cut_fd_readable(s)); /* never drained */
    stop_grace_finish(s);
    CU_ASSERT_EQUAL(atomic_load(&a.cuts), 1);
    CU_ASSERT_EQUAL(atomic_load(&late.cuts), 1);
}

static void test_second_request(void)
{
    handle_t h = { 0 };
    stop_grace_t *s = start(3600000);
    CU_ASSERT_PTR_NOT_NULL_FATAL(s);
    stop_grace_watch(s, cut, &h);
    stop_grace_request(s);
    stop_grace_request(s);
    uint64_t t0 = tu_now_mono_ms();
    CU_ASSERT_EQUAL(tu_poll_until(cut_fd_readable, s, 10000, 5), 0);
    printf("\n    a second request with a 1 h grace: cut after %llu ms\n", (unsigned long long)(tu_now_mono_ms() - t0));
    CU_ASSERT_EQUAL(atomic_load(&h.cuts), 1);
    stop_grace_finish(s);
}

static stop_grace_t *signalled;

static void on_signal(int sig)
{
    (void)sig;
    stop_grace_request(signalled);
}

static void test_zero_grace_from_a_signal(void)
{
    handle_t h = { 0 };
    stop_grace_t *s = start(0);
    CU_ASSERT_PTR_NOT_NULL_FATAL(s);
    stop_grace_watch(s, cut, &h);
    signalled = s;
    struct sigaction sa, old;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGUSR1, &sa, &old);
    raise(SIGUSR1);
    CU_ASSERT_EQUAL(tu_poll_until(is_cut, s, 10000, 5), 0);
    CU_ASSERT_EQUAL(atomic_load(&h.cuts), 1);
    sigaction(SIGUSR1, &old, NULL);
    stop_grace_finish(s);
    stop_grace_finish(NULL);
}

static atomic_int signals_seen;

static void count_signal(int sig)
{
    (void)sig;
    atomic_fetch_add(&signals_seen, 1);
}

static void test_handle_signals(void)
{
    stop_grace_handle_signals(count_signal);
    raise(SIGINT);
    raise(SIGTERM);
    CU_ASSERT_EQUAL(atomic_load(&signals_seen), 2);
    stop_grace_handle_signals(SIG_IGN);
    raise(SIGINT); /* ignored: the suite goes on */
    raise(SIGTERM);
    CU_ASSERT_EQUAL(atomic_load(&signals_seen), 2);
    stop_grace_handle_signals(SIG_DFL);
    struct sigaction now;
    sigaction(SIGTERM, NULL, &now);
    CU_ASSERT_PTR_EQUAL(now.sa_handler, SIG_DFL);
}

static const tu_test_t stop_tests[] = {
    { "no request: nothing cut", test_no_request },
    { "cut (and the cut fd readable) when the grace runs out, not before; unwatched never; late watch at once",
      test_grace },
    { "a second request cuts at once", test_second_request },
    { "grace 0, requested from a signal handler: cut at once", test_zero_grace_from_a_signal },
    { "SIGINT and SIGTERM to the handler, then ignored", test_handle_signals },
    { NULL, NULL },
};
static const tu_suite_t suites[] = {
    { "stop", stop_tests },
};

int main(int argc, char **argv)
{
    return tu_suites_main(argc, argv, suites, sizeof suites / sizeof suites[0], NULL, NULL);
}
