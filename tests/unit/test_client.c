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
 *
 * Suite arguments: the public calls at their edges without a broker — a
 * NULL client, consumer or order handle and NULL out-parameters give
 * HG_ERR_ARG (or -1) with a message naming the argument, never a crash; an
 * error is cleared by the next call; the pure helpers at their extremes
 * (hg_dlq_all_read_timeout never shortens the timeout, hg_order_age_text
 * of INT64_MIN); the URI messages name a bad port on hourglass:// and
 * amqp:// alike and show an IPv6 host in brackets; an empty key is refused
 * by hg_send, an hg_send_many item and hg_send_dedup.
 *
 * Suite stop: a consumer whose worker waits in a connect — a TCP connect
 * the broker's host never answers (a loopback listener whose full queue
 * drops SYNs), a TLS handshake with a listener that accepts and says
 * nothing (as a SIGSTOPped broker) — returns at once when it is stopped and
 * its stop fd becomes readable, with a connect timeout of 60 s (before, the
 * stop fd cut neither: the stop waited the connect timeout). And
 * hg_client_open with hg_client_opts_t.stop_fd: its AUTH to a listener that
 * never answers and its TCP connect end within 100 ms of the stop; an open
 * begun while the fd is readable connects to nothing; without has_stop_fd
 * (zeroed options) the fd is not the client's; a negative fd is refused.
 *
 * Suite messages: the exact text of a failed reconnect's error — a
 * reconnect whose AUTH gets no reply says once what failed and why.
 */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include "tests/helpers/stub_broker.h"
#include "tests/helpers/testutil.h"

#include <CUnit/CUnit.h>
#include <hourglass/hourglass.h>
#include <hourglass/order_view.h>
#include <arpa/inet.h>
#include <errno.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

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

/* ------------------------------------------------------------------------
 * Arguments: NULL handles and out-parameters, the messages that name them
 * ------------------------------------------------------------------------ */

/* The client's message contains want. */
#define MSG_HAS(c, want) (strstr(hg_client_errmsg(c), (want)) != NULL)

/* A notice for hg_client_command_notice that counts its calls. */
static void count_notice(void *arg)
{
    (*(int *)arg)++;
}

static void test_null_client(void)
{
    const char *ping[] = { "PING" };
    hg_reply_t *r = (hg_reply_t *)&stub; /* not NULL: the call must clear it */
    hg_levels_t *l = NULL;
    hg_msg_info_t *info = NULL;
    size_t n = 9;
    hg_send_item_t item = { .topic = "t" };

    /* a NULL client: HG_ERR_ARG, never a crash (no handle to keep a message) */
    TU_CHECK(hg_client_command(NULL, 1, ping, NULL, &r) == HG_ERR_ARG && r == NULL, "hg_client_command(NULL)");
    int notices = 0;
    r = (hg_reply_t *)&stub;
    TU_CHECK(hg_client_command_notice(NULL, 1, ping, NULL, 10, count_notice, &notices, &r) == HG_ERR_ARG && r == NULL &&
                 notices == 0,
             "hg_client_command_notice(NULL)");
    TU_CHECK(hg_send(NULL, "t", NULL, "x", 1, hg_delay_none(), NULL) == HG_ERR_ARG, "hg_send(NULL)");
    TU_CHECK(hg_send_dedup(NULL, "t", "k", "x", 1, hg_delay_none(), NULL, NULL) == HG_ERR_ARG, "hg_send_dedup(NULL)");
    TU_CHECK(hg_send_many(NULL, &item, 1, &n) == HG_ERR_ARG && n == 0, "hg_send_many(NULL): n %zu", n);
    TU_CHECK(hg_levels_fetch(NULL, &l) == HG_ERR_ARG && l == NULL, "hg_levels_fetch(NULL)");
    TU_CHECK(hg_msg_get(NULL, "0123456789abcdef", &info) == HG_ERR_ARG && info == NULL, "hg_msg_get(NULL)");
    TU_CHECK(hg_msg_find(NULL, "t", "k", &info, &n) == HG_ERR_ARG && info == NULL && n == 0, "hg_msg_find(NULL)");
    TU_CHECK(hg_msg_revoke_id(NULL, "0123456789abcdef", NULL) == HG_ERR_ARG, "hg_msg_revoke_id(NULL)");
    TU_CHECK(hg_msg_revoke_key(NULL, "t", "k", NULL) == HG_ERR_ARG, "hg_msg_revoke_key(NULL)");
    /* the accessors and setters answer for "no client" */
    TU_CHECK(hg_client_errcode(NULL) == HG_ERR_ARG, "hg_client_errcode(NULL)");
    TU_CHECK(strstr(hg_client_errmsg(NULL), "NULL") != NULL, "hg_client_errmsg(NULL): '%s'", hg_client_errmsg(NULL));
    TU_CHECK(strcmp(hg_client_address(NULL), "") == 0, "hg_client_address(NULL)");
    TU_CHECK(hg_client_read_timeout(NULL) == 0, "hg_client_read_timeout(NULL)");
    TU_CHECK(hg_client_send_bound_ms(NULL) == HG_UNBOUNDED, "hg_client_send_bound_ms(NULL)");
    hg_client_set_read_timeout(NULL, 5);
    hg_client_set_stop_fd(NULL, 5);
    hg_client_opts_init(NULL);
    hg_backoff_default(NULL);
    TU_CHECK(hg_backoff_delay(NULL, 3, NULL, NULL) == 0, "hg_backoff_delay(NULL)");
    TU_CHECK(hg_levels_count(NULL) == 0 && hg_levels_delay_ms(NULL, 1) == 0, "hg_levels_count / delay_ms (NULL)");
    size_t vlen = 7;
    TU_CHECK(hg_info_value("a:b\r\n", 5, NULL, &vlen) == NULL && hg_info_value(NULL, 5, "a", &vlen) == NULL,
             "hg_info_value with a NULL key or text");
    TU_CHECK(hg_info_value("a:b\r\n", 5, "a", NULL) != NULL, "hg_info_value with vlen NULL finds the value");
}

static void test_null_out_parameters(void)
{
    hg_client_t *c = open_stub(NULL, NULL, __LINE__);
    const char *ping[] = { "PING" };
    hg_reply_t *r = NULL;
    hg_msg_info_t *info = NULL;
    size_t n = 0;
    hg_error_t e;

    /* an error left by an earlier call must not linger: every call clears it */
    TU_CHECK(hg_send(c, NULL, NULL, "x", 1, hg_delay_none(), NULL) == HG_ERR_ARG && MSG_HAS(c, "topic is NULL"),
             "hg_send topic NULL: '%s'", hg_client_errmsg(c));
    TU_CHECK(hg_client_command(c, 1, ping, NULL, NULL) == HG_ERR_ARG && MSG_HAS(c, "reply is NULL"),
             "hg_client_command reply NULL: '%s'", hg_client_errmsg(c));
    TU_CHECK(hg_client_command(c, 1, NULL, NULL, &r) == HG_ERR_ARG && MSG_HAS(c, "argv is NULL"),
             "hg_client_command argv NULL: '%s'", hg_client_errmsg(c));
    TU_CHECK(hg_client_command(c, 0, ping, NULL, &r) == HG_ERR_ARG && MSG_HAS(c, "argc 0"),
             "hg_client_command argc 0: '%s'", hg_client_errmsg(c));
    int notices = 0;
    TU_CHECK(hg_client_command_notice(c, 1, ping, NULL, 10, NULL, NULL, &r) == HG_ERR_ARG && r == NULL &&
                 MSG_HAS(c, "hg_client_command_notice: notice is NULL"),
             "hg_client_command_notice notice NULL: '%s'", hg_client_errmsg(c));
    TU_CHECK(hg_client_command_notice(c, 1, ping, NULL, 10, count_notice, &notices, NULL) == HG_ERR_ARG &&
                 MSG_HAS(c, "hg_client_command_notice: reply is NULL") && notices == 0,
             "hg_client_command_notice reply NULL: '%s'", hg_client_errmsg(c));
    TU_CHECK(hg_send(c, "t", NULL, "x", 1, hg_delay_level(-1), NULL) == HG_ERR_ARG && MSG_HAS(c, "level -1 "),
             "hg_send level -1 names -1: '%s'", hg_client_errmsg(c));
    TU_CHECK(hg_send_dedup(c, NULL, "k", "x", 1, hg_delay_none(), NULL, NULL) == HG_ERR_ARG &&
                 MSG_HAS(c, "topic is NULL"),
             "hg_send_dedup topic NULL: '%s'", hg_client_errmsg(c));
    TU_CHECK(hg_msg_get(c, "0123456789abcdef", NULL) == HG_ERR_ARG && MSG_HAS(c, "out is NULL"),
             "hg_msg_get out NULL: '%s'", hg_client_errmsg(c));
    TU_CHECK(hg_msg_find(c, "t", "k", NULL, &n) == HG_ERR_ARG && MSG_HAS(c, "out is NULL"),
             "hg_msg_find out NULL: '%s'", hg_client_errmsg(c));
    TU_CHECK(hg_msg_find(c, "t", "k", &info, NULL) == HG_ERR_ARG && info == NULL && MSG_HAS(c, "n is NULL"),
             "hg_msg_find n NULL: '%s'", hg_client_errmsg(c));
    TU_CHECK(hg_msg_find(c, NULL, "k", &info, &n) == HG_ERR_ARG && MSG_HAS(c, "topic is NULL"),
             "hg_msg_find topic NULL: '%s'", hg_client_errmsg(c));
    TU_CHECK(hg_levels_fetch(c, NULL) == HG_ERR_ARG && MSG_HAS(c, "out is NULL"), "hg_levels_fetch out NULL: '%s'",
             hg_client_errmsg(c));
    TU_CHECK(hg_levels_parse("1s", NULL, &e) == HG_ERR_ARG && strstr(e.message, "out is NULL") != NULL,
             "hg_levels_parse out NULL: '%s'", e.message);
    TU_CHECK(hg_consumer_last_error(NULL, &e) == HG_ERR_ARG && strstr(e.message, "NULL") != NULL,
             "hg_consumer_last_error(NULL): '%s'", e.message);
    TU_CHECK(hg_consumer_last_error(NULL, NULL) == HG_ERR_ARG, "hg_consumer_last_error(NULL, NULL)");
    TU_CHECK(hg_consumer_run(NULL) == HG_ERR_ARG, "hg_consumer_run(NULL)");
    hg_consumer_stats_t st;
    memset(&st, 0xff, sizeof st);
    hg_consumer_stats(NULL, &st);
    TU_CHECK(st.delivered == 0 && st.errors == 0, "hg_consumer_stats(NULL) gives zeros");
    TU_CHECK(hg_consumer_pull_failing_ms(NULL) == 0, "hg_consumer_pull_failing_ms(NULL)");
    hg_consumer_stop(NULL);
    hg_consumer_set_stop_fd(NULL, 3);
    hg_consumer_set_conn_event_fn(NULL, NULL, NULL);
    hg_consumer_opts_init(NULL);
    /* and after all that, a good call reports no error */
    TU_CHECK(hg_client_command(c, 1, ping, NULL, &r) == HG_OK && hg_client_errcode(c) == HG_OK &&
                 strcmp(hg_client_errmsg(c), "") == 0,
             "a good call clears the error: %d '%s'", hg_client_errcode(c), hg_client_errmsg(c));
    hg_reply_free(r);
    hg_client_close(c);
}

/* The order module's calls that need no database, with NULL arguments. */
static void test_null_order(void)
{
    hg_order_error_t e;
    char err[200] = "";
    hg_order_view_t v;

    memset(&e, 0, sizeof e);
    TU_CHECK(hg_order_db_prepare(NULL, &e) == -1 && strstr(e.message, "no database handle") != NULL,
             "hg_order_db_prepare(NULL): '%s'", e.message);
    memset(&e, 0, sizeof e);
    TU_CHECK(hg_order_schema_create(NULL, &e) == -1 && strstr(e.message, "no database handle") != NULL,
             "hg_order_schema_create(NULL): '%s'", e.message);
    TU_CHECK(hg_order_parse_id("12", 2, NULL, err, sizeof err) == -1 && strstr(err, "id is NULL") != NULL,
             "hg_order_parse_id id NULL: '%s'", err);
    hg_order_sql_default(NULL);
    hg_order_late_classify(NULL);
    memset(&v, 0, sizeof v);
    hg_order_explain(NULL, NULL, NULL, &v);
    TU_CHECK(v.late == HG_ORDER_LATE_UNKNOWN && strstr(v.broker_error, "NULL") != NULL,
             "hg_order_explain without an order: late %d '%s'", (int)v.late, v.broker_error);
    hg_order_explain(NULL, NULL, NULL, NULL);
    /* the fast path's send refuses order id 0 (a payload no consumer takes), and says so */
    hg_client_t *c = open_stub(NULL, NULL, __LINE__);
    char id[HG_ID_MAX] = "x";
    TU_CHECK(hg_order_timeout_send(c, NULL, 0, 1, id) == HG_ERR_ARG && strstr(hg_client_errmsg(c), "order id 0") &&
                 id[0] == '\0',
             "hg_order_timeout_send of order 0: '%s'", hg_client_errmsg(c));
    hg_client_close(c);
    TU_CHECK(hg_order_timeout_publish(NULL, NULL, NULL, 1, 1, NULL, err, sizeof err) == HG_ORDER_PUBLISH_SEND_FAILED &&
                 strstr(err, "client is NULL") != NULL,
             "hg_order_timeout_publish without a client: '%s'", err);
    char *j = hg_order_view_json(NULL, NULL, 0);
    TU_CHECK(j != NULL && strcmp(j, "null") == 0, "hg_order_view_json(NULL): %s", j ? j : "(NULL)");
    free(j);
    j = hg_msg_info_json(NULL);
    TU_CHECK(j != NULL && strcmp(j, "null") == 0, "hg_msg_info_json(NULL): %s", j ? j : "(NULL)");
    free(j);
}

/* ------------------------------------------------------------------------
 * The pure helpers at their edges
 * ------------------------------------------------------------------------ */

static void test_helper_edges(void)
{
    char b[64];
    /* the DLQ timeout only ever lengthens the read timeout in force */
    uint32_t t = hg_dlq_all_read_timeout(UINT32_MAX - 1, 1);
    TU_CHECK(t == UINT32_MAX - 1, "hg_dlq_all_read_timeout(UINT32_MAX - 1, 1): %u, shorter than the timeout", t);
    t = hg_dlq_all_read_timeout(100000000, 1000);
    TU_CHECK(t == 100000000, "hg_dlq_all_read_timeout(100000000 (above a day), 1000): %u", t);
    t = hg_dlq_all_read_timeout(10000, 1000000);
    TU_CHECK(t == 60000, "hg_dlq_all_read_timeout(10000, 1000000): %u, want 60000", t);
    t = hg_dlq_all_read_timeout(10000, INT64_MAX);
    TU_CHECK(t == 86400000, "hg_dlq_all_read_timeout(10000, LLONG_MAX): %u, want a day", t);
    /* every int64 has a text, INT64_MIN too (its negation overflows) */
    hg_order_age_text(INT64_MIN, b, sizeof b);
    TU_CHECK(strcmp(b, "-106751991167d07h") == 0, "hg_order_age_text(INT64_MIN): '%s'", b);
    hg_order_age_text(INT64_MAX, b, sizeof b);
    TU_CHECK(strcmp(b, "106751991167d07h") == 0, "hg_order_age_text(INT64_MAX): '%s'", b);
    hg_order_age_text(-999, b, sizeof b);
    TU_CHECK(strcmp(b, "0s") == 0, "hg_order_age_text(-999): '%s'", b);
}

/* ------------------------------------------------------------------------
 * A stop while connecting (hg_consumer_set_stop_fd / hg_client_set_stop_fd)
 * ------------------------------------------------------------------------ */

/* A listening socket on a free loopback port that the test accepts from by
 * hand (or never); *port. With backlog 0 one waiting connection fills its
 * queue, and the kernel then drops the next SYNs: a connect hangs, as to a
 * host that does not answer. */
static int listen_loopback(int backlog, int *port)
{
    struct sockaddr_in sa = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
    socklen_t len = sizeof sa;
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

    TU_REQUIRE(fd >= 0 && bind(fd, (struct sockaddr *)&sa, sizeof sa) == 0 && listen(fd, backlog) == 0 &&
                   getsockname(fd, (struct sockaddr *)&sa, &len) == 0,
               "listen on 127.0.0.1: %s", strerror(errno));
    *port = ntohs(sa.sin_port);
    return fd;
}

typedef struct connecting {
    hg_consumer_t *consumer;
    hg_err_t result;
    uint64_t ended_ms;
    int done;
    int port;     /* the listener's */
    int listener; /* to accept from (the TLS case) */
    int accepted; /* -1 until accepted */
} connecting_t;

static void *consumer_main(void *arg)
{
    connecting_t *c = arg;
    c->result = hg_consumer_run(c->consumer);
    c->ended_ms = tu_now_mono_ms();
    __atomic_store_n(&c->done, 1, __ATOMIC_RELEASE);
    return NULL;
}

static int consumer_done(void *arg)
{
    return __atomic_load_n(&((connecting_t *)arg)->done, __ATOMIC_ACQUIRE);
}

static hg_outcome_t never_called(const hg_message_t *m, char *reason, size_t len, void *arg)
{
    (void)m, (void)reason, (void)len, (void)arg;
    return HG_DONE;
}

/* 1 once a socket of this machine waits in SYN_SENT for 127.0.0.1:port
 * (/proc/net/tcp: a connect the listener's full queue drops). */
static int syn_sent(void *arg)
{
    FILE *f = fopen("/proc/net/tcp", "r");
    char line[512];
    int found = 0;

    if (f == NULL)
        return 0;
    while (!found && fgets(line, sizeof line, f) != NULL) {
        unsigned remote_port, state;
        if (sscanf(line, " %*u: %*x:%*x %*x:%x %x", &remote_port, &state) == 2)
            found = (int)remote_port == ((connecting_t *)arg)->port && state == 0x02;
    }
    fclose(f);
    return found;
}

/* 1 once the client's connection was accepted and its ClientHello is there
 * to read (it waits for the answer that never comes). */
static int hello_sent(void *arg)
{
    connecting_t *c = arg;
    struct pollfd p;

    if (c->accepted < 0)
        c->accepted = accept4(c->listener, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (c->accepted < 0)
        return 0;
    p = (struct pollfd){ c->accepted, POLLIN, 0 };
    return poll(&p, 1, 0) == 1;
}

/* Run a consumer of uri (connect timeout 60 s, stop fd set) until ready()
 * says its worker waits in the connect; then hg_consumer_stop and the stop
 * fd. The ms from then until hg_consumer_run returned, or -1 when it was
 * still running after 30 s (it then ends at the connect timeout). */
static long long stop_while_connecting(const char *uri, connecting_t *c, int (*ready)(void *))
{
    hg_client_opts_t co;
    hg_consumer_opts_t o;
    hg_error_t e;
    pthread_t th;
    uint64_t from;
    int pfd[2], ended;

    hg_client_opts_init(&co);
    co.connect_timeout_ms = 60000;
    hg_consumer_opts_init(&o);
    o.uri = uri;
    o.client = &co;
    o.group = "g";
    o.topic = "t";
    o.workers = 1;
    o.handler = never_called;
    TU_REQUIRE(pipe(pfd) == 0, "pipe");
    TU_REQUIRE(hg_consumer_new(&o, &c->consumer, &e) == HG_OK, "hg_consumer_new(%s): %s", uri, e.message);
    hg_consumer_set_stop_fd(c->consumer, pfd[0]);
    TU_REQUIRE(pthread_create(&th, NULL, consumer_main, c) == 0, "pthread_create");
    TU_CHECK(tu_poll_until(ready, c, 30000, 5) == 0, "%s: the consumer's connect never waited", uri);
    from = tu_now_mono_ms();
    hg_consumer_stop(c->consumer);
    TU_CHECK(write(pfd[1], "x", 1) == 1, "write the stop fd");
    ended = tu_poll_until(consumer_done, c, 30000, 5) == 0;
    pthread_join(th, NULL); /* after 30 s: at the connect timeout */
    hg_consumer_free(c->consumer);
    close(pfd[0]);
    close(pfd[1]);
    return ended ? (long long)(c->ended_ms - from) : -1;
}

typedef struct pinging {
    hg_client_t *client;
    hg_err_t result;
    uint64_t ended_ms;
    int done;
} pinging_t;

static void *ping_main(void *arg)
{
    pinging_t *p = arg;
    const char *ping[] = { "PING" };
    hg_reply_t *r = NULL;

    p->result = hg_client_command(p->client, 1, ping, NULL, &r);
    hg_reply_free(r);
    p->ended_ms = tu_now_mono_ms();
    __atomic_store_n(&p->done, 1, __ATOMIC_RELEASE);
    return NULL;
}

static int ping_done(void *arg)
{
    return __atomic_load_n(&((pinging_t *)arg)->done, __ATOMIC_ACQUIRE);
}

/* A stop cuts a TCP connect in progress (the broker's host does not answer
 * SYNs): a client's call returns HG_ERR_STOPPED naming the connect at once,
 * and a consumer's run returns at once, not after the connect timeout. */
static void test_stop_cuts_tcp_connect(void)
{
    connecting_t c = { .accepted = -1 };
    int listener = listen_loopback(0, &c.port), pfd[2];
    char uri[100], want[100];
    hg_client_opts_t o;
    hg_client_t *first = NULL, *clone = NULL;
    hg_error_t e;
    pinging_t p = { 0 };
    pthread_t th;
    uint64_t from;
    long long took;

    /* The client: opened (its connection fills the listener's queue), then
     * a clone, whose first call connects and hangs. */
    snprintf(uri, sizeof uri, "hourglass://127.0.0.1:%d", c.port);
    hg_client_opts_init(&o);
    o.connect_timeout_ms = 60000;
    o.reconnect = 0;
    TU_REQUIRE(hg_client_open(uri, &o, &first, &e) == HG_OK, "open %s: %s", uri, e.message);
    TU_REQUIRE(hg_client_clone(first, &clone, &e) == HG_OK, "hg_client_clone: %s", e.message);
    TU_REQUIRE(pipe(pfd) == 0, "pipe");
    hg_client_set_stop_fd(clone, pfd[0]);
    p.client = clone;
    TU_REQUIRE(pthread_create(&th, NULL, ping_main, &p) == 0, "pthread_create");
    TU_CHECK(tu_poll_until(syn_sent, &c, 30000, 5) == 0, "the clone's connect never waited");
    from = tu_now_mono_ms();
    TU_CHECK(write(pfd[1], "x", 1) == 1, "write the stop fd");
    TU_CHECK(tu_poll_until(ping_done, &p, 30000, 5) == 0, "the clone's PING was still connecting 30 s after the stop");
    pthread_join(th, NULL); /* after 30 s: at the connect timeout */
    took = (long long)(p.ended_ms - from);
    printf("\n    a TCP connect stopped: %s %lld ms after the stop (%s)", hg_strerror(p.result), took,
           hg_client_errmsg(clone));
    snprintf(want, sizeof want, "stopped while connecting to 127.0.0.1:%d", c.port);
    TU_CHECK(p.result == HG_ERR_STOPPED && strstr(hg_client_errmsg(clone), want) != NULL,
             "a connect cut by the stop fd: %s '%s', want HG_ERR_STOPPED '%s'", hg_strerror(p.result),
             hg_client_errmsg(clone), want);
    TU_CHECK(took >= 0 && took < 3000, "the PING returned %lld ms after the stop, want at once (connect timeout 60 s)",
             took);
    hg_client_close(clone);
    hg_client_close(first);
    close(pfd[0]);
    close(pfd[1]);

    /* A consumer, its worker's connect dropped the same way. */
    took = stop_while_connecting(uri, &c, syn_sent);
    printf("\n    a consumer's TCP connect stopped: run returned %lld ms after the stop", took);
    TU_CHECK(took >= 0 && took < 3000,
             "hg_consumer_run returned %lld ms after the stop, want at once (connect timeout 60 s)", took);
    /* amqp://: its workers' and its hop router's TCP connects (made by the
     * library, not librabbitmq, so the stop fd reaches them) */
    snprintf(uri, sizeof uri, "amqp://guest:guest@127.0.0.1:%d/", c.port);
    took = stop_while_connecting(uri, &c, syn_sent);
    printf("\n    an amqp:// consumer's TCP connects stopped: run returned %lld ms after the stop", took);
    TU_CHECK(took >= 0 && took < 3000,
             "amqp://: hg_consumer_run returned %lld ms after the stop, want at once (connect timeout 60 s)", took);
    close(listener);
}

/* A stop cuts a TLS handshake with a broker that accepted the connection
 * and never answers (a SIGSTOPped broker looks the same). */
static void test_stop_cuts_tls_handshake(void)
{
    connecting_t c = { .accepted = -1 };
    char uri[100];
    long long took;

    c.listener = listen_loopback(16, &c.port);
    snprintf(uri, sizeof uri, "hourglass+tls://127.0.0.1:%d", c.port); /* the system's trust store: never used */
    took = stop_while_connecting(uri, &c, hello_sent);
    printf("\n    a consumer's TLS handshake stopped: run returned %lld ms after the stop", took);
    TU_CHECK(took >= 0 && took < 3000,
             "hg_consumer_run returned %lld ms after the stop, want at once (connect timeout 60 s)", took);
    if (c.accepted >= 0)
        close(c.accepted);
    close(c.listener);
}

typedef struct opening {
    const char *uri;
    const hg_client_opts_t *opts;
    hg_client_t *client;
    hg_error_t err;
    hg_err_t result;
    uint64_t ended_ms;
    int done;
} opening_t;

static void *open_main(void *arg)
{
    opening_t *o = arg;
    o->result = hg_client_open(o->uri, o->opts, &o->client, &o->err);
    o->ended_ms = tu_now_mono_ms();
    __atomic_store_n(&o->done, 1, __ATOMIC_RELEASE);
    return NULL;
}

static int open_done(void *arg)
{
    return __atomic_load_n(&((opening_t *)arg)->done, __ATOMIC_ACQUIRE);
}

/* Run hg_client_open(uri, opts) on a thread until ready(c) says it waits;
 * then write the stop fd. The ms from then until the open returned (o holds
 * its result), or -1 when it was still waiting 30 s later. */
static long long stop_while_opening(const char *uri, hg_client_opts_t *opts, int pfd[2], connecting_t *c,
                                    int (*ready)(void *), opening_t *o)
{
    pthread_t th;
    uint64_t from;
    int ended;

    memset(o, 0, sizeof *o);
    o->uri = uri;
    o->opts = opts;
    TU_REQUIRE(pthread_create(&th, NULL, open_main, o) == 0, "pthread_create");
    TU_CHECK(tu_poll_until(ready, c, 30000, 1) == 0, "%s: hg_client_open never waited", uri);
    from = tu_now_mono_ms();
    TU_CHECK(write(pfd[1], "x", 1) == 1, "write the stop fd");
    ended = tu_poll_until(open_done, o, 30000, 1) == 0;
    pthread_join(th, NULL); /* after 30 s: at the timeouts */
    return ended ? (long long)(o->ended_ms - from) : -1;
}

/* "At once" as a bound: a stop takes a few ms, a missed one waits for the
 * 60 s timeouts; 3 s (the bound of the other stop tests here) leaves a loaded
 * CI machine room to schedule the opening thread, which 100 ms did not. */
#define STOP_AT_ONCE_MS 3000

/* hg_client_opts_t.stop_fd (has_stop_fd): hg_client_open's own connect is
 * cut by it — AUTH's wait for a listener that accepts and never answers (as
 * a SIGSTOPped broker), the TCP connect to a host that drops SYNs — at once
 * (STOP_AT_ONCE_MS), timeouts 60 s; an open begun while it is readable connects to
 * nothing; without has_stop_fd (zeroed, as before the option) a readable
 * stop_fd is not the client's; a negative one is refused. */
static void test_open_stop_fd(void)
{
    connecting_t c = { .accepted = -1 };
    hg_client_opts_t o;
    opening_t op;
    int pfd[2];
    char uri[100], want[100], byte;
    long long took;

    TU_REQUIRE(pipe(pfd) == 0, "pipe");
    hg_client_opts_init(&o);
    TU_CHECK(o.has_stop_fd == 0, "hg_client_opts_init: has_stop_fd %d, want 0", o.has_stop_fd);
    o.connect_timeout_ms = 60000;
    o.read_timeout_ms = 60000;
    o.has_stop_fd = 1;
    o.stop_fd = pfd[0];

    /* AUTH to a listener that accepts and never answers. */
    c.listener = listen_loopback(16, &c.port);
    snprintf(uri, sizeof uri, "hourglass://alice:secret@127.0.0.1:%d", c.port);
    took = stop_while_opening(uri, &o, pfd, &c, hello_sent, &op);
    printf("\n    hg_client_open's AUTH stopped: %s %lld ms after the stop (%s)", hg_strerror(op.result), took,
           op.err.message);
    snprintf(want, sizeof want, "stopped during AUTH with 127.0.0.1:%d", c.port);
    TU_CHECK(op.result == HG_ERR_STOPPED && op.client == NULL && strstr(op.err.message, want) != NULL,
             "an open whose AUTH waits, stopped: %s '%s', want HG_ERR_STOPPED '%s'", hg_strerror(op.result),
             op.err.message, want);
    TU_CHECK(took >= 0 && took < STOP_AT_ONCE_MS, "hg_client_open returned %lld ms after the stop, want at once (< %d)",
             took, STOP_AT_ONCE_MS);
    close(c.accepted);
    c.accepted = -1;

    /* Still readable: a second open stops before it connects (nothing accepted). */
    TU_CHECK(hg_client_open(uri, &o, &op.client, &op.err) == HG_ERR_STOPPED && op.client == NULL,
             "an open while the stop fd is readable: '%s', want HG_ERR_STOPPED", op.err.message);
    TU_CHECK(strstr(op.err.message, "stopped before connecting") != NULL, "its message: '%s'", op.err.message);
    struct pollfd lp = { c.listener, POLLIN, 0 };
    TU_CHECK(poll(&lp, 1, 0) == 0, "an open stopped before it began connected all the same");

    /* has_stop_fd 0 (zeroed): the readable stop_fd is not the client's. */
    o.has_stop_fd = 0;
    snprintf(uri, sizeof uri, "hourglass://127.0.0.1:%d", c.port);
    TU_CHECK(hg_client_open(uri, &o, &op.client, &op.err) == HG_OK,
             "has_stop_fd 0 with a readable stop_fd: %s, want HG_OK (no stop fd)", op.err.message);
    hg_client_close(op.client);
    if (c.accepted >= 0)
        close(c.accepted);
    close(c.listener);
    TU_CHECK(read(pfd[0], &byte, 1) == 1, "read the stop fd back");

    /* The TCP connect to a host that drops SYNs (a listener with a full queue). */
    memset(&c, 0, sizeof c);
    c.accepted = -1;
    c.listener = listen_loopback(0, &c.port);
    snprintf(uri, sizeof uri, "hourglass://127.0.0.1:%d", c.port);
    o.has_stop_fd = 0;
    hg_client_t *filler = NULL;
    TU_REQUIRE(hg_client_open(uri, &o, &filler, &op.err) == HG_OK, "open %s: %s", uri, op.err.message);
    o.has_stop_fd = 1;
    o.reconnect = 0;
    took = stop_while_opening(uri, &o, pfd, &c, syn_sent, &op);
    printf("\n    hg_client_open's TCP connect stopped: %s %lld ms after the stop (%s)", hg_strerror(op.result), took,
           op.err.message);
    TU_CHECK(op.result == HG_ERR_STOPPED && strstr(op.err.message, "stopped while connecting") != NULL,
             "an open whose TCP connect waits, stopped: %s '%s'", hg_strerror(op.result), op.err.message);
    TU_CHECK(took >= 0 && took < STOP_AT_ONCE_MS, "hg_client_open returned %lld ms after the stop, want at once (< %d)",
             took, STOP_AT_ONCE_MS);
    hg_client_close(filler);
    close(c.listener);

    /* A negative stop fd is named. */
    o.stop_fd = -1;
    TU_CHECK(hg_client_open(uri, &o, &op.client, &op.err) == HG_ERR_ARG &&
                 strcmp(op.err.message, "stop_fd -1 is not a file descriptor (has_stop_fd is set)") == 0,
             "has_stop_fd with stop_fd -1: '%s', want HG_ERR_ARG naming it", op.err.message);
    close(pfd[0]);
    close(pfd[1]);
}

/* The message of a reconnect that fails during AUTH says once what failed
 * and why: the client is opened (the test answers its AUTH by hand), the
 * listener then closes that connection and answers nothing more, so the
 * next call's reconnect rounds each wait out the read timeout on AUTH.
 * Before, client_connect.c formatted the AUTH failure into the client's
 * error buffer from that same buffer, and the message began twice
 * ("cannot connect to …: during AUTH: cannot connect to …: during AUTH: …"). */
static void test_reconnect_auth_message(void)
{
    static const char auth[] = "*3\r\n$4\r\nAUTH\r\n$5\r\nalice\r\n$6\r\nsecret\r\n";
    connecting_t c = { .accepted = -1 };
    const char *ping[] = { "PING" };
    hg_client_opts_t o;
    hg_reply_t *r = NULL;
    opening_t op;
    pthread_t th;
    char uri[100], want[HG_ERRMSG_MAX], got[sizeof auth];
    size_t n = 0;
    hg_err_t e;

    c.listener = listen_loopback(16, &c.port);
    snprintf(uri, sizeof uri, "hourglass://alice:secret@127.0.0.1:%d", c.port);
    hg_client_opts_init(&o);
    o.connect_timeout_ms = 5000;
    o.reconnect_backoff.base_ms = 10;
    o.reconnect_backoff.cap_ms = 10;
    o.reconnect_backoff.jitter = 0;
    o.reconnect_backoff.attempts = 1;
    memset(&op, 0, sizeof op);
    op.uri = uri;
    op.opts = &o;
    o.read_timeout_ms = 30000; /* the open's AUTH waits for the answer by hand */
    TU_REQUIRE(pthread_create(&th, NULL, open_main, &op) == 0, "pthread_create");
    TU_REQUIRE(tu_poll_until(hello_sent, &c, 30000, 1) == 0, "the open's AUTH never came");
    while (n < sizeof auth - 1) {
        struct pollfd p = { c.accepted, POLLIN, 0 };
        ssize_t k;
        TU_REQUIRE(poll(&p, 1, 30000) == 1, "the open's AUTH: %zu bytes of %zu", n, sizeof auth - 1);
        k = read(c.accepted, got + n, sizeof auth - 1 - n);
        TU_REQUIRE(k > 0, "read the open's AUTH: %s", k == 0 ? "EOF" : strerror(errno));
        n += (size_t)k;
    }
    TU_CHECK(memcmp(got, auth, n) == 0, "the open sent '%.*s', want AUTH alice secret", (int)n, got);
    TU_REQUIRE(write(c.accepted, "+OK\r\n", 5) == 5, "answer the AUTH");
    pthread_join(th, NULL);
    TU_REQUIRE(op.result == HG_OK, "open %s: %s", uri, op.err.message);
    hg_client_set_read_timeout(op.client, 200);
    close(c.accepted); /* the broker closes the connection; it accepts but never answers again */

    e = hg_client_command(op.client, 1, ping, NULL, &r);
    snprintf(want, sizeof want,
             "cannot connect to 127.0.0.1:%d: during AUTH: no reply from 127.0.0.1:%d within 200ms (after 2 attempts)",
             c.port, c.port);
    TU_CHECK(e == HG_ERR_CONNECT && strcmp(hg_client_errmsg(op.client), want) == 0,
             "a reconnect whose AUTH gets no reply: %s '%s', want HG_ERR_CONNECT '%s'", hg_strerror(e),
             hg_client_errmsg(op.client), want);
    hg_reply_free(r);
    hg_client_close(op.client);
    close(c.listener);
}

static const tu_test_t message_tests[] = {
    { "a reconnect that fails during AUTH: its message says once what failed", test_reconnect_auth_message },
    { NULL, NULL },
};

static const tu_test_t stop_tests[] = {
    { "a stop cuts a TCP connect that the broker's host never answers", test_stop_cuts_tcp_connect },
    { "a stop cuts a TLS handshake that the broker never answers", test_stop_cuts_tls_handshake },
    { "hg_client_opts_t.stop_fd cuts hg_client_open's AUTH and TCP connect", test_open_stop_fd },
    { NULL, NULL },
};

/* An empty key is refused before anything is sent: hg_send, an
 * hg_send_many item (the others still go), hg_send_dedup. */
static void test_empty_key(void)
{
    hg_client_t *c = open_stub(NULL, NULL, __LINE__);
    hg_send_item_t items[2] = {
        { .topic = "t", .key = "", .payload = "x", .payload_len = 1 },
        { .topic = "t", .key = "k", .payload = "y", .payload_len = 1 },
    };
    size_t ok = 9;

    TU_CHECK(hg_send(c, "t", "", "x", 1, hg_delay_none(), NULL) == HG_ERR_ARG &&
                 MSG_HAS(c, "hg_send: key is empty (pass NULL for a message without one)"),
             "hg_send with key \"\": '%s'", hg_client_errmsg(c));
    (void)hg_send_many(c, items, 2, &ok);
    TU_CHECK(items[0].err == HG_ERR_ARG && strstr(items[0].error, "key is empty") != NULL,
             "hg_send_many item with key \"\": %s '%s'", hg_strerror(items[0].err), items[0].error);
    TU_CHECK(items[1].err != HG_ERR_ARG, "the item with a key was refused too: '%s'", items[1].error);
    TU_CHECK(hg_send_dedup(c, "t", "", "x", 1, hg_delay_none(), NULL, NULL) == HG_ERR_ARG &&
                 MSG_HAS(c, "hg_send_dedup: key is empty"),
             "hg_send_dedup with key \"\": '%s'", hg_client_errmsg(c));
    hg_client_close(c);
}

/* The URI messages name the bad port on both schemes, and an amqp://
 * address shows an IPv6 host in brackets, as hourglass:// does. */
static void test_uri_messages(void)
{
    static const struct {
        const char *uri, *want;
    } bad[] = {
        { "hourglass://h:99999", "bad URI: bad port '99999': out of range (want 1..65535)" },
        { "amqp://h:99999/", "bad URI: bad port '99999': out of range (want 1..65535)" },
        { "amqp://guest:guest@a:5672,b:70000/v", "bad port '70000': out of range" },
        { "amqp://[::1]:99999/", "bad port '99999': out of range" },
        { "amqps://h:0/", "bad port '0': out of range" },
        { "amqp://h:56x2/", "bad port '56x2': not a number" },
    };
    hg_client_opts_t o;
    hg_client_t *c = NULL;
    hg_error_t e;

    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        memset(&e, 0, sizeof e);
        TU_CHECK(hg_client_open(bad[i].uri, NULL, &c, &e) == HG_ERR_URI && c == NULL &&
                     strstr(e.message, bad[i].want) != NULL,
                 "%s: '%s', want HG_ERR_URI with '%s'", bad[i].uri, e.message, bad[i].want);
    }
    /* nothing listens on port 1: the connect fails at once, naming the node */
    hg_client_opts_init(&o);
    o.connect_timeout_ms = 2000;
    o.reconnect = 0;
    memset(&e, 0, sizeof e);
    TU_CHECK(hg_client_open("amqp://guest:guest@[::1]:1/", &o, &c, &e) == HG_ERR_CONNECT &&
                 strstr(e.message, "RabbitMQ at [::1]:1:") != NULL,
             "amqp://[::1]:1/: '%s', want HG_ERR_CONNECT naming [::1]:1", e.message);
    /* a CA file that is not there: named, with OpenSSL's reason (base/openssl_error.h), not its
     * "error:XXXXXXXX:lib::reason" string, which this message showed before */
    o.tls_ca_file = "/nonexistent/ca.pem";
    memset(&e, 0, sizeof e);
    TU_CHECK(hg_client_open("amqps://guest:guest@127.0.0.1:1/", &o, &c, &e) != HG_OK && c == NULL &&
                 strstr(e.message, "amqps://: cannot load the CA file '/nonexistent/ca.pem': ") != NULL &&
                 strstr(e.message, "error:") == NULL && strstr(e.message, "No such file or directory") != NULL,
             "amqps:// with a missing CA file: '%s', want the file named with OpenSSL's reason", e.message);
}

static const tu_test_t argument_tests[] = {
    { "a NULL client: HG_ERR_ARG or a neutral answer, never a crash", test_null_client },
    { "NULL out-parameters and inputs: HG_ERR_ARG naming them", test_null_out_parameters },
    { "the order calls without a database: NULL arguments", test_null_order },
    { "pure helpers at their edges: DLQ read timeout, age text", test_helper_edges },
    { "URI messages: a bad port named on hourglass:// and amqp://, [IPv6] shown in brackets", test_uri_messages },
    { "an empty key: refused by hg_send, an hg_send_many item, hg_send_dedup", test_empty_key },
    { NULL, NULL },
};

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
    { "arguments", argument_tests },
    { "stop", stop_tests },
    { "messages", message_tests },
};

int main(int argc, char **argv)
{
    return tu_suites_main(argc, argv, suites, sizeof suites / sizeof suites[0], setup, teardown);
}
