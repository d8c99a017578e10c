/*
 * tests/unit/test_console_status.c — CUnit suites for what hourglass-console
 * reads of other daemons' plain-http endpoints:
 *   url          metrics_url_parse: host, port, the default path, IPv6 in
 *                brackets; refused: https, no port, a port out of range, no
 *                host
 *   compensator  compensator_status_parse on hourglass-compensator's own
 *                /metrics text: the enabled layers only, last run, duration,
 *                outcome, failures in a row, the active alerts, /healthz's
 *                errors for failed layers; a text that is not the
 *                compensator's; compensator_status_json's document
 *   get          metrics_get: a server that accepts and never answers is
 *                given up within the timeout; a refused port fails at once;
 *                a small real reply (a thread serving one request) gives its
 *                status and body
 * The overview's use of them is tested end to end in
 * tests/integration/test_console (a real compensator).
 */
#include "console/console.h"
#include "tests/helpers/testutil.h"

#include <CUnit/CUnit.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

/* ------------------------------------------------------------------ url */

static void test_url_ok(void)
{
    metrics_url_t u;
    char err[256];
    TU_REQUIRE(metrics_url_parse("http://127.0.0.1:9102/metrics", &u, err, sizeof err) == 0, "%s", err);
    TU_CHECK(strcmp(u.host, "127.0.0.1") == 0 && strcmp(u.port, "9102") == 0 && strcmp(u.path, "/metrics") == 0,
             "host %s port %s path %s", u.host, u.port, u.path);
    TU_REQUIRE(metrics_url_parse("http://comp.example.org:80", &u, err, sizeof err) == 0, "%s", err);
    TU_CHECK(strcmp(u.host, "comp.example.org") == 0 && strcmp(u.path, "/metrics") == 0, "no path: /metrics (%s %s)",
             u.host, u.path);
    TU_REQUIRE(metrics_url_parse("http://[::1]:9102/x/metrics", &u, err, sizeof err) == 0, "%s", err);
    TU_CHECK(strcmp(u.host, "::1") == 0 && strcmp(u.port, "9102") == 0 && strcmp(u.path, "/x/metrics") == 0,
             "IPv6: host %s port %s path %s", u.host, u.port, u.path);
}

static void test_url_refused(void)
{
    static const struct {
        const char *url, *says;
    } bad[] = {
        { "https://127.0.0.1:9102/metrics", "not an http:// URL" },
        { "127.0.0.1:9102", "not an http:// URL" },
        { "http://127.0.0.1/metrics", "has no port" },
        { "http://127.0.0.1:0/metrics", "port is not 1..65535" },
        { "http://127.0.0.1:65536/metrics", "port is not 1..65535" },
        { "http://127.0.0.1:99x/metrics", "port is not 1..65535" },
        { "http://:9102/metrics", "no host" },
        { "http://[::1:9102/metrics", "closing ']'" },
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        metrics_url_t u;
        char err[256] = "";
        TU_CHECK(metrics_url_parse(bad[i].url, &u, err, sizeof err) == -1 && strstr(err, bad[i].says) != NULL,
                 "%s: refused saying '%s' (said '%s')", bad[i].url, bad[i].says, err);
    }
}

static const tu_test_t url_tests[] = {
    { "host, port, default path, IPv6", test_url_ok },
    { "https, no port, bad port, no host: refused, named", test_url_refused },
    { NULL, NULL },
};

/* ------------------------------------------------------------------ compensator */

/* A piece of hourglass-compensator's /metrics (compensator/metrics.c): the
 * relay and the monitor enabled, the overdue layer and the inspection not. */
static const char metrics_text[] =
    "# HELP hourglass_compensator_layer_enabled 1 for the layers this instance runs.\n"
    "# TYPE hourglass_compensator_layer_enabled gauge\n"
    "hourglass_compensator_layer_enabled{layer=\"relay\"} 1\n"
    "hourglass_compensator_layer_enabled{layer=\"overdue\"} 0\n"
    "hourglass_compensator_layer_enabled{layer=\"inspection\"} 0\n"
    "hourglass_compensator_layer_enabled{layer=\"monitor\"} 1\n"
    "hourglass_compensator_runs_total{layer=\"relay\",outcome=\"ok\"} 3\n"
    "hourglass_compensator_last_run_timestamp_seconds{layer=\"relay\"} 1764662400.250\n"
    "hourglass_compensator_last_run_timestamp_seconds{layer=\"monitor\"} 1764662401.000\n"
    "hourglass_compensator_last_run_duration_seconds{layer=\"relay\"} 0.002300\n"
    "hourglass_compensator_last_run_duration_seconds{layer=\"monitor\"} 0.006600\n"
    "hourglass_compensator_last_run_success{layer=\"relay\"} 0\n"
    "hourglass_compensator_last_run_outcome{layer=\"relay\",outcome=\"ok\"} 0\n"
    "hourglass_compensator_last_run_outcome{layer=\"relay\",outcome=\"failed\"} 1\n"
    "hourglass_compensator_last_run_outcome{layer=\"monitor\",outcome=\"ok\"} 1\n"
    "hourglass_compensator_last_run_outcome{layer=\"monitor\",outcome=\"failed\"} 0\n"
    "hourglass_compensator_consecutive_failures{layer=\"relay\"} 9\n"
    "hourglass_compensator_consecutive_failures{layer=\"monitor\"} 0\n"
    "hourglass_compensator_alerts_fired_total{alert=\"dlq-depth\"} 4\n"
    "hourglass_compensator_alerts_active{alert=\"overdue-pending\"} 0\n"
    "hourglass_compensator_alerts_active{alert=\"dlq-depth\"} 2\n"
    "hourglass_compensator_alerts_active{alert=\"layer-failing\"} 1\n";

static void test_compensator_parse(void)
{
    compensator_status_t st;
    TU_REQUIRE(compensator_status_parse(&st, metrics_text, "relay: order 304: send failed: NOPERM\n") == 0,
               "the compensator's text is understood");
    TU_REQUIRE(st.ok && st.nlayers == 2, "two enabled layers (%zu)", st.nlayers);
    const compensator_layer_t *relay = &st.layers[0], *monitor = &st.layers[1];
    TU_CHECK(strcmp(relay->name, "relay") == 0 && strcmp(monitor->name, "monitor") == 0, "in their order: %s, %s",
             relay->name, monitor->name);
    TU_CHECK(relay->last_run_ms == 1764662400250ull && monitor->last_run_ms == 1764662401000ull,
             "last runs in ms: %llu, %llu", (unsigned long long)relay->last_run_ms,
             (unsigned long long)monitor->last_run_ms);
    TU_CHECK(relay->duration_ms > 2.29 && relay->duration_ms < 2.31, "duration 2.3 ms (%f)", relay->duration_ms);
    TU_CHECK(strcmp(relay->outcome, "failed") == 0 && strcmp(monitor->outcome, "ok") == 0, "outcomes %s, %s",
             relay->outcome, monitor->outcome);
    TU_CHECK(relay->consecutive_failures == 9 && monitor->consecutive_failures == 0, "failures in a row %lld, %lld",
             relay->consecutive_failures, monitor->consecutive_failures);
    TU_CHECK(strcmp(relay->error, "order 304: send failed: NOPERM") == 0 && monitor->error[0] == '\0',
             "/healthz's error goes to its layer: '%s' / '%s'", relay->error, monitor->error);
    TU_REQUIRE(st.nalerts == 3, "three alert kinds (%zu)", st.nalerts);
    TU_CHECK(strcmp(st.alerts[1].name, "dlq-depth") == 0 && st.alerts[1].active == 2 && st.alerts[0].active == 0,
             "dlq-depth active 2 (%s %lld)", st.alerts[1].name, st.alerts[1].active);

    buf_t b = BUF_INIT;
    json_t j;
    json_init(&j, &b);
    compensator_status_json(&st, "http://127.0.0.1:9102/metrics", &j);
    const char *doc = buf_cstr(&b);
    TU_CHECK(strstr(doc, "\"configured\":true,\"ok\":true,\"error\":null,\"url\":\"http://127.0.0.1:9102/metrics\"") !=
                 NULL,
             "the document's head: %s", doc);
    TU_CHECK(strstr(doc, "{\"layer\":\"relay\",\"last_run_ms\":1764662400250,") != NULL &&
                 strstr(doc, "\"outcome\":\"failed\",\"consecutive_failures\":9,\"error\":\"order 304: send failed: "
                             "NOPERM\"}") != NULL,
             "the relay's entry: %s", doc);
    TU_CHECK(strstr(doc, "{\"alert\":\"dlq-depth\",\"active\":2}") != NULL, "the alerts: %s", doc);
    buf_free(&b);
}

static void test_compensator_not_its_text(void)
{
    compensator_status_t st;
    TU_CHECK(compensator_status_parse(&st, "hourglass_sends_total 3\n# a broker's /metrics\n", NULL) == -1 && !st.ok,
             "a text without the compensator's layers is not taken for it");
    TU_CHECK(compensator_status_parse(&st, "hourglass_compensator_layer_enabled{layer=\"relay\"} 1", NULL) == 0 &&
                 st.nlayers == 1 && st.layers[0].outcome[0] == '\0' && st.layers[0].last_run_ms == 0,
             "a layer that never ran: no outcome, no last run (a last line without a newline is read too)");
    TU_CHECK(compensator_status_parse(&st,
                                      "hourglass_compensator_layer_enabled_extra{layer=\"relay\"} 1\n"
                                      "hourglass_compensator_layer_enabled{layer=\"relay\",x=\"y\"}1\n",
                                      NULL) == -1,
             "a longer metric name and a sample without its blank are not samples of layer_enabled");
}

/* Sample values a double holds but the fields do not: NaN, infinities, negatives, 1e300 (converting them was
 * undefined behaviour; found by tests/fuzz/fuzz_compensator_status on its seed with NaN). */
static void test_compensator_odd_values(void)
{
    compensator_status_t st;
    TU_REQUIRE(compensator_status_parse(&st,
                                        "hourglass_compensator_layer_enabled{layer=\"relay\"} 1\n"
                                        "hourglass_compensator_layer_enabled{layer=\"monitor\"} 1\n"
                                        "hourglass_compensator_last_run_timestamp_seconds{layer=\"relay\"} NaN\n"
                                        "hourglass_compensator_last_run_timestamp_seconds{layer=\"monitor\"} 1e300\n"
                                        "hourglass_compensator_consecutive_failures{layer=\"relay\"} +Inf\n"
                                        "hourglass_compensator_consecutive_failures{layer=\"monitor\"} -5\n"
                                        "hourglass_compensator_alerts_active{alert=\"dlq-depth\"} -Inf\n"
                                        "hourglass_compensator_alerts_active{alert=\"layer-failing\"} 1e19\n",
                                        NULL) == 0 &&
                   st.nlayers == 2 && st.nalerts == 2,
               "parsed: %zu layers, %zu alerts", st.nlayers, st.nalerts);
    TU_CHECK(st.layers[0].last_run_ms == 0, "NaN seconds: never ran (%llu)",
             (unsigned long long)st.layers[0].last_run_ms);
    TU_CHECK(st.layers[1].last_run_ms == UINT64_MAX, "1e300 seconds: the largest time (%llu)",
             (unsigned long long)st.layers[1].last_run_ms);
    TU_CHECK(st.layers[0].consecutive_failures == LLONG_MAX && st.layers[1].consecutive_failures == 0,
             "+Inf and -5 failures: %lld, %lld", st.layers[0].consecutive_failures, st.layers[1].consecutive_failures);
    TU_CHECK(st.alerts[0].active == 0 && st.alerts[1].active == LLONG_MAX, "-Inf and 1e19 active: %lld, %lld",
             st.alerts[0].active, st.alerts[1].active);
    TU_CHECK(compensator_status_parse(&st, "hourglass_compensator_layer_enabled{layer=\"\"} 1\n", NULL) == -1,
             "a layer with an empty name is no layer (%zu)", st.nlayers);
}

static const tu_test_t compensator_tests[] = {
    { "its /metrics and /healthz: layers, outcomes, errors, alerts; the JSON", test_compensator_parse },
    { "not the compensator's text; a layer that never ran", test_compensator_not_its_text },
    { "NaN, infinite, negative and huge sample values", test_compensator_odd_values },
    { NULL, NULL },
};

/* ------------------------------------------------------------------ get */

static double mono_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

/* A listening socket on 127.0.0.1 (port into *port); -1 on failure. */
static int listener(int *port)
{
    struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
    socklen_t len = sizeof a;
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0 || bind(fd, (struct sockaddr *)&a, sizeof a) != 0 || listen(fd, 8) != 0 ||
        getsockname(fd, (struct sockaddr *)&a, &len) != 0) {
        if (fd >= 0)
            close(fd);
        return -1;
    }
    *port = ntohs(a.sin_port);
    return fd;
}

static void url_of(metrics_url_t *u, int port)
{
    memset(u, 0, sizeof *u);
    snprintf(u->host, sizeof u->host, "127.0.0.1");
    snprintf(u->port, sizeof u->port, "%d", port);
    snprintf(u->path, sizeof u->path, "/metrics");
}

static void test_get_silent_server(void)
{
    int port, status = -1;
    int fd = listener(&port); /* the kernel accepts into the backlog; nobody ever answers */
    TU_REQUIRE(fd >= 0, "a listening socket");
    metrics_url_t u;
    buf_t body = BUF_INIT;
    char err[256] = "";
    url_of(&u, port);
    double t0 = mono_s();
    int rc = metrics_get(&u, "/metrics", 300, &status, &body, err, sizeof err);
    double took = mono_s() - t0;
    TU_CHECK(rc == -1 && strstr(err, "300 ms") != NULL, "a silent server: given up, saying so (%d, %s)", rc, err);
    TU_CHECK(took >= 0.25 && took < 1.5, "after about the timeout of 300 ms (%.0f ms)", took * 1000);
    buf_free(&body);
    close(fd);
}

static void test_get_refused(void)
{
    int port, status = -1;
    int fd = listener(&port);
    TU_REQUIRE(fd >= 0, "a listening socket");
    close(fd); /* nobody listens there now */
    metrics_url_t u;
    buf_t body = BUF_INIT;
    char err[256] = "";
    url_of(&u, port);
    TU_CHECK(metrics_get(&u, "/metrics", 1000, &status, &body, err, sizeof err) == -1 &&
                 strstr(err, "connect to 127.0.0.1") != NULL,
             "a closed port: refused (%s)", err);
    buf_free(&body);
}

/* Serve one request on the listening socket *arg with a fixed reply. */
static void *serve_one(void *arg)
{
    int lfd = *(int *)arg;
    int fd = accept(lfd, NULL, NULL);
    if (fd >= 0) {
        char req[2048];
        ssize_t n = read(fd, req, sizeof req - 1);
        (void)n;
        const char reply[] = "HTTP/1.0 503 Service Unavailable\r\nContent-Type: text/plain\r\n\r\nrelay: it failed\n";
        ssize_t w = write(fd, reply, sizeof reply - 1);
        (void)w;
        close(fd);
    }
    return NULL;
}

static void test_get_reply(void)
{
    int port, status = -1;
    int fd = listener(&port);
    TU_REQUIRE(fd >= 0, "a listening socket");
    pthread_t t;
    TU_REQUIRE(pthread_create(&t, NULL, serve_one, &fd) == 0, "the server thread");
    metrics_url_t u;
    buf_t body = BUF_INIT;
    char err[256] = "";
    url_of(&u, port);
    int rc = metrics_get(&u, "/healthz", 5000, &status, &body, err, sizeof err);
    pthread_join(t, NULL);
    close(fd);
    TU_CHECK(rc == 0 && status == 503 && strcmp(buf_cstr(&body), "relay: it failed\n") == 0,
             "the status and the body without the headers (%d, %d, '%s', %s)", rc, status, buf_cstr(&body), err);
    buf_free(&body);
}

static const tu_test_t get_tests[] = {
    { "a server that never answers: given up within the timeout", test_get_silent_server },
    { "a closed port: refused at once", test_get_refused },
    { "a reply: its status and body", test_get_reply },
    { NULL, NULL },
};

static const tu_suite_t suites[] = {
    { "url", url_tests },
    { "compensator", compensator_tests },
    { "get", get_tests },
};

int main(int argc, char **argv)
{
    return tu_suites_main(argc, argv, suites, sizeof suites / sizeof suites[0], NULL, NULL);
}
