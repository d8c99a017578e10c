/*
 * tests/unit/test_prom.c — CUnit suites for common/prom.c: the Prometheus
 * text writer (headers, samples, label escaping), the histogram (buckets,
 * cumulative output, quantiles, the bucket cap) and the /metrics + /healthz
 * endpoint, spoken to over a real socket on a free port.
 */
#include "common/prom.h"
#include "base/buf.h"
#include "tests/helpers/testutil.h"

#include <CUnit/CUnit.h>
#include <event2/thread.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

/* ---------------------------------------------------------------- text */

static void test_text(void)
{
    buf_t b = BUF_INIT;
    prom_metric_u64(&b, "hourglass_sends_total", "counter", "SENDs accepted", 42);
    prom_header(&b, "hourglass_depth", "gauge", "messages per level");
    prom_sample_u64(&b, "hourglass_depth", "{level=\"1\"}", 7);
    prom_sample_i64(&b, "hourglass_skew", "", -3);
    const char *want = "# HELP hourglass_sends_total SENDs accepted\n# TYPE hourglass_sends_total counter\n"
                       "hourglass_sends_total 42\n"
                       "# HELP hourglass_depth messages per level\n# TYPE hourglass_depth gauge\n"
                       "hourglass_depth{level=\"1\"} 7\nhourglass_skew -3\n";
    TU_CHECK(strcmp(buf_cstr(&b), want) == 0, "text:\n%s", buf_cstr(&b));
    buf_free(&b);
}

static void test_label_escape(void)
{
    char out[64];
    prom_label_escape("a\"b\\c\nd", out, sizeof out);
    CU_ASSERT_STRING_EQUAL(out, "a\\\"b\\\\c\\nd");
    /* cut short, never in the middle of an escape */
    char small[5];
    prom_label_escape("ab\"cd", small, sizeof small);
    TU_CHECK(strcmp(small, "ab") == 0 || strcmp(small, "ab\\\"") == 0, "cut: \"%s\"", small);
    CU_ASSERT(strlen(small) < sizeof small);
    prom_label_escape("", out, sizeof out);
    CU_ASSERT_STRING_EQUAL(out, "");
}

/* ---------------------------------------------------------------- histogram */

static const double bounds[] = { 0.001, 0.01, 0.1, 1 };

static void test_hist(void)
{
    prom_hist_t h;
    prom_hist_init(&h, bounds, 4);
    CU_ASSERT_EQUAL(prom_hist_quantile(&h, 0.5), 0);
    prom_hist_add(&h, 0.0005); /* first bucket */
    prom_hist_add(&h, 0.001);  /* the bound itself belongs to its bucket */
    prom_hist_add(&h, 0.05);
    prom_hist_add(&h, 5); /* +Inf */
    CU_ASSERT_EQUAL(h.count, 4);
    CU_ASSERT_EQUAL(h.buckets[0], 2);
    CU_ASSERT_EQUAL(h.buckets[2], 1);
    CU_ASSERT_EQUAL(h.buckets[4], 1);
    CU_ASSERT_DOUBLE_EQUAL(prom_hist_quantile(&h, 0.5), 0.001, 1e-12);
    CU_ASSERT_DOUBLE_EQUAL(prom_hist_quantile(&h, 0.75), 0.1, 1e-12);
    /* a quantile in +Inf reports the last finite bound */
    CU_ASSERT_DOUBLE_EQUAL(prom_hist_quantile(&h, 1.0), 1, 1e-12);

    buf_t b = BUF_INIT;
    prom_hist_write(&b, "lat_seconds", "lateness", &h);
    const char *t = buf_cstr(&b);
    CU_ASSERT_PTR_NOT_NULL(strstr(t, "# TYPE lat_seconds histogram\n"));
    CU_ASSERT_PTR_NOT_NULL(strstr(t, "lat_seconds_bucket{le=\"0.001\"} 2\n"));
    CU_ASSERT_PTR_NOT_NULL(strstr(t, "lat_seconds_bucket{le=\"0.01\"} 2\n")); /* cumulative */
    CU_ASSERT_PTR_NOT_NULL(strstr(t, "lat_seconds_bucket{le=\"0.1\"} 3\n"));
    CU_ASSERT_PTR_NOT_NULL(strstr(t, "lat_seconds_bucket{le=\"1\"} 3\n"));
    CU_ASSERT_PTR_NOT_NULL(strstr(t, "lat_seconds_bucket{le=\"+Inf\"} 4\n"));
    CU_ASSERT_PTR_NOT_NULL(strstr(t, "lat_seconds_count 4\n"));
    CU_ASSERT_PTR_NOT_NULL(strstr(t, "lat_seconds_sum 5.051500\n"));
    buf_free(&b);

    /* more bounds than the cap: only the first PROM_HIST_MAX_BUCKETS are used */
    double many[PROM_HIST_MAX_BUCKETS + 5];
    for (int i = 0; i < PROM_HIST_MAX_BUCKETS + 5; i++)
        many[i] = i + 1;
    prom_hist_init(&h, many, PROM_HIST_MAX_BUCKETS + 5);
    CU_ASSERT_EQUAL(h.nb, PROM_HIST_MAX_BUCKETS);
    prom_hist_add(&h, 1000);
    CU_ASSERT_EQUAL(h.buckets[PROM_HIST_MAX_BUCKETS], 1);
}

/* ---------------------------------------------------------------- endpoint */

static int healthy = 1;

static void render(buf_t *out, void *arg)
{
    prom_metric_u64(out, "test_up", "gauge", "always one", *(int *)arg);
}

static int health(buf_t *out, void *arg)
{
    (void)arg;
    if (healthy)
        return 0;
    buf_append_str(out, "store unavailable\n");
    return -1;
}

/* An endpoint on 127.0.0.1 at a free port serving render and health with
 * arg: its port (the test stops on failure). */
static int start_endpoint(prom_http_t **h, int *arg)
{
    char err[200] = "";
    int port = tu_free_port();
    TU_REQUIRE(port > 0, "no free port");
    TU_REQUIRE(prom_http_start(h, "127.0.0.1", NULL, (unsigned)port, render, health, arg, err, sizeof err) == 0,
               "start: %s", err);
    return port;
}


static void test_endpoint(void)
{
    static int one = 1;
    char err[200] = "";
    prom_http_t *h = NULL;
    int port = start_endpoint(&h, &one);
    char resp[4096];
    TU_REQUIRE(tu_http_get(port, "/metrics", resp, sizeof resp) == 200, "GET /metrics failed");
    CU_ASSERT_PTR_NOT_NULL(strstr(resp, "200"));
    CU_ASSERT_PTR_NOT_NULL(strstr(resp, "text/plain"));
    CU_ASSERT_PTR_NOT_NULL(strstr(resp, "test_up 1\n"));
    TU_REQUIRE(tu_http_get(port, "/healthz", resp, sizeof resp) == 200, "GET /healthz failed");
    TU_CHECK(strstr(resp, "200") != NULL && strstr(resp, "ok\n") != NULL, "healthz: %s", resp);
    healthy = 0;
    TU_REQUIRE(tu_http_get(port, "/healthz", resp, sizeof resp) == 503, "GET /healthz not 503");
    TU_CHECK(strstr(resp, "503") != NULL && strstr(resp, "store unavailable") != NULL, "healthz: %s", resp);
    healthy = 1;

    /* the port is taken: a second endpoint names metrics-port and the cause */
    prom_http_t *second = NULL;
    CU_ASSERT_EQUAL(prom_http_start(&second, "127.0.0.1", NULL, (unsigned)port, render, NULL, &one, err, sizeof err),
                    -1);
    CU_ASSERT_PTR_NULL(second);
    TU_CHECK(strstr(err, "metrics-port") != NULL, "error: %s", err);
    /* a bind that is no address: named, not "Resource temporarily unavailable" */
    CU_ASSERT_EQUAL(prom_http_start(&second, "300.1.1.1", NULL, (unsigned)port, render, NULL, &one, err, sizeof err),
                    -1);
    CU_ASSERT_PTR_NULL(second);
    TU_CHECK(strstr(err, "metrics-bind '300.1.1.1' is not an IP address") != NULL, "error: %s", err);
    prom_http_stop(h);
    prom_http_stop(NULL);
}

/* On a loopback bind only a Host naming the listener is answered (DNS rebinding), as on the broker's metrics port;
 * before, any Host was answered 200 with the metrics. */
static void test_endpoint_host(void)
{
    static int one = 1;
    char out[4096];
    prom_http_t *h = NULL;
    int port = start_endpoint(&h, &one);
    const char *served[] = { "127.0.0.1", "127.0.0.1:9102", "localhost", "LOCALHOST.:9102", "[::1]:9102", NULL };
    for (int i = 0; served[i] != NULL; i++) {
        int st = tu_http_get_host(port, "/metrics", served[i], out, sizeof out);
        TU_CHECK(st == 200 && strstr(out, "test_up 1") != NULL, "Host %s: %d, want 200", served[i], st);
    }
    TU_CHECK(tu_http_get_host(port, "/healthz", NULL, out, sizeof out) == 200, "no Host (HTTP/1.0): '%.80s'", out);
    const char *refused[] = { "attacker.example:9102", "attacker.example", "127.0.0.1.nip.io", "[::1", "", NULL };
    const char *paths[] = { "/metrics", "/healthz" };
    for (int i = 0; refused[i] != NULL; i++)
        for (int k = 0; k < 2; k++) {
            int st = tu_http_get_host(port, paths[k], refused[i], out, sizeof out);
            TU_CHECK(st == 421 && strstr(out, "is not this process's metrics listener") != NULL &&
                         strstr(out, "test_up") == NULL,
                     "Host '%s' %s: %d '%.200s', want 421", refused[i], paths[k], st, out);
        }
    prom_http_stop(h);
}

/* Two Host headers are refused 400 whichever comes first: a proxy in front may route by the other one (RFC 9112
 * 3.2). Before, the first was checked and the request answered 200 when it named the listener. */
static void test_endpoint_two_hosts(void)
{
    static int one = 1;
    char out[4096];
    prom_http_t *h = NULL;
    int port = start_endpoint(&h, &one);
    const char *hosts[][2] = { { "127.0.0.1", "attacker.example" },
                               { "attacker.example", "127.0.0.1" },
                               { "localhost", "localhost" } };
    for (size_t i = 0; i < sizeof hosts / sizeof hosts[0]; i++) {
        char req[300];
        int rl = snprintf(req, sizeof req, "GET /metrics HTTP/1.1\r\nHost: %s\r\nHost: %s\r\nConnection: close\r\n\r\n",
                          hosts[i][0], hosts[i][1]);
        int st = tu_http_request(port, req, rl, out, sizeof out);
        TU_CHECK(st == 400 && strstr(out, "more than one Host header") != NULL && strstr(out, "test_up") == NULL,
                 "Host %s and Host %s: %d '%.200s', want 400 naming the two Host headers", hosts[i][0], hosts[i][1], st,
                 out);
    }
    TU_CHECK(tu_http_get_host(port, "/metrics", "127.0.0.1", out, sizeof out) == 200, "one Host after: '%.80s'", out);
    prom_http_stop(h);
}

/* This machine's host name is served (a Prometheus on this host scraping http://myhost:9121/metrics), and so is a
 * name of metrics-allowed-hosts (a reverse proxy's own); another name is still refused, its reply saying where to
 * list it. Before, both were refused 421. */
static void test_endpoint_host_names(void)
{
    static int one = 1;
    char out[4096], hostname[256] = "", err[200] = "";
    TU_REQUIRE(gethostname(hostname, sizeof hostname - 1) == 0 && hostname[0] != '\0', "this machine has no name");
    int port = tu_free_port();
    TU_REQUIRE(port > 0, "no free port");
    prom_http_t *h = NULL;
    TU_REQUIRE(prom_http_start(&h, "127.0.0.1", "proxy.example, scrape.example.", (unsigned)port, render, health, &one,
                               err, sizeof err) == 0,
               "start: %s", err);
    char with_port[300];
    snprintf(with_port, sizeof with_port, "%s:%d", hostname, port);
    const char *served[] = { hostname, with_port, "proxy.example", "SCRAPE.example:9102", NULL };
    for (int i = 0; served[i] != NULL; i++) {
        int st = tu_http_get_host(port, "/metrics", served[i], out, sizeof out);
        TU_CHECK(st == 200 && strstr(out, "test_up 1") != NULL, "Host %s: %d, want 200", served[i], st);
    }
    int st = tu_http_get_host(port, "/metrics", "attacker.example", out, sizeof out);
    TU_CHECK(st == 421 && strstr(out, "list the name in metrics-allowed-hosts") != NULL && strstr(out, hostname),
             "Host attacker.example: %d '%.300s', want 421 naming metrics-allowed-hosts and %s", st, out, hostname);
    prom_http_stop(h);
}

/* A client streaming header lines is answered 400 and closed within the first few MiB (the socket buffers); before,
 * the endpoint kept every byte for as long as the client sent (the daemon's memory grew without limit). A POST is
 * refused: GET and HEAD only. */
static void test_endpoint_bounded(void)
{
    static int one = 1;
    char reply[512], out[4096];
    prom_http_t *h = NULL;
    int port = start_endpoint(&h, &one);
    long sent = tu_http_flood_headers(port, (size_t)64 << 20, reply, sizeof reply);
    TU_REQUIRE(sent >= 0, "connect to the endpoint");
    TU_CHECK(sent < (16L << 20), "the endpoint took %ld MiB of header lines, want it to close before 16 MiB",
             sent >> 20);
    TU_CHECK(strncmp(reply, "HTTP/1.1 400", 12) == 0, "reply '%.40s', want 400", reply);
    TU_CHECK(tu_http_get(port, "/healthz", out, sizeof out) == 200, "/healthz after: '%.80s'", out);
    prom_http_stop(h);
}

/* Slowloris: a head trickled a byte at a time is closed 10 s (HTTP_GUARD_HEADER_TIMEOUT_MS) after the accept,
 * answered 408; before, evhttp's timeout (30 s of silence) never fired while a byte came every 200 ms. */
static void test_endpoint_trickle(void)
{
    static int one = 1;
    char reply[512] = "";
    prom_http_t *h = NULL;
    int port = start_endpoint(&h, &one);
    /* a byte every 200 ms for up to 25 s, reading whatever the endpoint answers */
    double waited = tu_http_trickle(port, 25.0, reply, sizeof reply);
    TU_REQUIRE(waited >= 0, "connect");
    TU_CHECK(waited < 15.0, "a trickled head still open after %.1f s, want closed after 10 s", waited);
    TU_CHECK(strncmp(reply, "HTTP/1.1 408", 12) == 0 && strstr(reply, "header deadline 10000 ms") != NULL,
             "reply '%.200s', want 408 naming the deadline", reply);
    char out[4096];
    TU_CHECK(tu_http_get(port, "/metrics", out, sizeof out) == 200, "/metrics after: '%.80s'", out);
    prom_http_stop(h);
}

/* At most 64 connections (HTTP_GUARD_MAX_CONNECTIONS): the next is answered 503 at once; before, every connection
 * a client opened was kept (until the process ran out of descriptors). */
static void test_endpoint_max_connections(void)
{
    static int one = 1;
    char out[4096];
    prom_http_t *h = NULL;
    int port = start_endpoint(&h, &one);
    int fds[64];
    /* the 64 are accepted (and counted) before the 65th: a request on the last one is answered */
    int filled = tu_http_fill(port, 64, fds, out, sizeof out);
    TU_REQUIRE(filled >= 0, "64 connections");
    TU_CHECK(filled == 1, "the 64th connection's request: '%.80s'", out);
    int st = tu_http_get(port, "/metrics", out, sizeof out);
    TU_CHECK(st == 503 && strstr(out, "the metrics port has 64 connections open (at most 64)") != NULL &&
                 strstr(out, "Retry-After") != NULL,
             "the 65th connection: %d '%.300s', want 503", st, out);
    for (int i = 0; i < 64; i++)
        close(fds[i]);
    TU_CHECK(tu_poll_http_status(port, "/metrics", 200, 10000, 50, out, sizeof out) == 0,
             "after the 64 closed: '%.80s', want 200", out);
    prom_http_stop(h);
}

/* prom_check_bind: what --check-config and the start say about metrics-bind. */
static void test_check_bind(void)
{
    char err[300] = "";
    CU_ASSERT_EQUAL(prom_check_bind("metrics-bind", "127.0.0.1", err, sizeof err), 0);
    CU_ASSERT_EQUAL(prom_check_bind("metrics-bind", "0.0.0.0", err, sizeof err), 0);
    CU_ASSERT_EQUAL(prom_check_bind("metrics-bind", "::1", err, sizeof err), 0);
    CU_ASSERT_EQUAL(prom_check_bind("metrics-bind", "localhost", err, sizeof err), 0);
    CU_ASSERT_EQUAL(prom_check_bind("metrics-bind", "300.1.1.1", err, sizeof err), -1);
    TU_CHECK(strcmp(err, "metrics-bind '300.1.1.1' is not an IP address (a dotted quad of 0..255, or IPv6)") == 0,
             "error: %s", err);
    CU_ASSERT_EQUAL(prom_check_bind("metrics-bind", "1.2.3", err, sizeof err), -1);
    TU_CHECK(strstr(err, "is not an IP address") != NULL, "error: %s", err);
    CU_ASSERT_EQUAL(prom_check_bind("metrics-bind", "fe80::zz", err, sizeof err), -1);
    TU_CHECK(strstr(err, "'fe80::zz' is not an IP address") != NULL, "error: %s", err);
    /* .invalid never resolves (RFC 6761), with or without a network */
    CU_ASSERT_EQUAL(prom_check_bind("metrics-bind", "no-such-host.invalid", err, sizeof err), -1);
    TU_CHECK(strstr(err, "metrics-bind 'no-such-host.invalid' is not an IP address and does not resolve: ") != NULL,
             "error: %s", err);
    CU_ASSERT_EQUAL(prom_check_bind("metrics-bind", "", err, sizeof err), -1);
    TU_CHECK(strcmp(err, "metrics-bind: empty value") == 0, "error: %s", err);
}

static const tu_test_t text_tests[] = {
    { "headers and samples", test_text },
    { "label escape", test_label_escape },
    { NULL, NULL },
};
static const tu_test_t hist_tests[] = {
    { "buckets, output, quantiles", test_hist },
    { NULL, NULL },
};
static const tu_test_t http_tests[] = {
    { "metrics and healthz", test_endpoint },
    { "on loopback only its own host names are answered (DNS rebinding)", test_endpoint_host },
    { "this machine's name and metrics-allowed-hosts are answered", test_endpoint_host_names },
    { "two Host headers are refused 400", test_endpoint_two_hosts },
    { "a request's headers are bounded", test_endpoint_bounded },
    { "a trickled head is closed 10 s after the accept (slowloris)", test_endpoint_trickle },
    { "at most 64 connections: the next answered 503", test_endpoint_max_connections },
    { "metrics-bind checked", test_check_bind },
    { NULL, NULL },
};
static const tu_suite_t suites[] = {
    { "text", text_tests },
    { "histogram", hist_tests },
    { "endpoint", http_tests },
};

int main(int argc, char **argv)
{
    evthread_use_pthreads();
    return tu_suites_main(argc, argv, suites, sizeof suites / sizeof suites[0], NULL, NULL);
}
