/*
 * tests/integration/test_broker_limits.c — bounded resources, through the
 * protocol against the real broker (docs/operations.md "Resource limits").
 *
 *  - fd_limit: under an open-files limit of 1024 (set in the broker's child
 *    before exec) the broker lowers max-clients so that LevelDB keeps its
 *    table-file cache, says so in its log and in CONFIG GET; 1 100 clients
 *    connect at once: the surplus are told "-ERR max number of clients
 *    reached" and closed (none left hanging in the backlog), the admitted
 *    answer PING, and SENDs large enough to rotate LevelDB's memtable many
 *    times keep succeeding meanwhile;
 *  - fd_exhausted: the descriptors run out below max-clients (idle /metrics
 *    connections hold them): accept() fails with EMFILE and the broker still
 *    refuses the waiting clients politely through its spare descriptor.
 *
 * Run one: ./tests/integration/test_broker_limits limits
 */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <arpa/inet.h>

#include <CUnit/CUnit.h>

#include "tests/helpers/broker_test.h"
#include "tests/helpers/testutil.h"

#define REFUSED "-ERR max number of clients reached\r\n"

/* Let this process hold at least want descriptors. */
static void need_fds(long want)
{
    struct rlimit rl;
    BP_REQUIRE(getrlimit(RLIMIT_NOFILE, &rl) == 0, "getrlimit: %s", strerror(errno));
    if (rl.rlim_cur != RLIM_INFINITY && rl.rlim_cur < (rlim_t)want) {
        if (rl.rlim_max != RLIM_INFINITY && rl.rlim_max < (rlim_t)want)
            rl.rlim_max = (rlim_t)want; /* root may raise the hard limit (CI runs as root) */
        rl.rlim_cur = (rlim_t)want;
        BP_REQUIRE(setrlimit(RLIMIT_NOFILE, &rl) == 0, "cannot raise this test's open-files limit to %ld: %s", want,
                   strerror(errno));
    }
}

/* A blocking TCP connection to 127.0.0.1:port, or -1. */
static int tcp_connect(int port)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -1;
    struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port) };
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (connect(fd, (struct sockaddr *)&sa, sizeof sa) != 0) {
        close(fd);
        return -1;
    }
    return fd;
}

typedef struct info_wait {
    long long want; /* connected_clients + rejected_connections */
    long long got;
} info_wait_t;

static int clients_settled(void *ctx)
{
    info_wait_t *w = ctx;
    char e[256], a[32], b[32];
    if (bp_info_field(&bt_conn, "connected_clients", a, sizeof a, e, sizeof e) != 0 ||
        bp_info_field(&bt_conn, "rejected_connections", b, sizeof b, e, sizeof e) != 0)
        return 0;
    w->got = atoll(a) + atoll(b);
    return w->got >= w->want;
}

/* Wait until fd has something to read (or EOF) within ms; 1 readable, 0 not. */
static int readable(int fd, int ms)
{
    struct pollfd p = { .fd = fd, .events = POLLIN };
    return poll(&p, 1, ms) == 1;
}

typedef struct tally {
    int admitted, refused, other;
    char other_what[200];
} tally_t;

/* Classify each connection: refused (the error then EOF) or admitted (PING → PONG). */
static void classify(int *fds, int n, tally_t *t)
{
    memset(t, 0, sizeof *t);
    for (int i = 0; i < n; i++) {
        char buf[256];
        ssize_t r = recv(fds[i], buf, sizeof buf - 1, MSG_DONTWAIT);
        if (r > 0) {
            buf[r] = '\0';
            if (strcmp(buf, REFUSED) == 0) {
                t->refused++;
            } else {
                t->other++;
                snprintf(t->other_what, sizeof t->other_what, "connection %d got %s", i, buf);
            }
            continue;
        }
        if (r == 0) {
            t->other++;
            snprintf(t->other_what, sizeof t->other_what, "connection %d closed without a word", i);
            continue;
        }
        static const char ping[] = "*1\r\n$4\r\nPING\r\n";
        if (send(fds[i], ping, sizeof ping - 1, MSG_NOSIGNAL) != (ssize_t)(sizeof ping - 1) ||
            !readable(fds[i], 10000)) {
            t->other++;
            snprintf(t->other_what, sizeof t->other_what, "connection %d: no answer to PING", i);
            continue;
        }
        r = recv(fds[i], buf, sizeof buf - 1, 0);
        buf[r > 0 ? r : 0] = '\0';
        if (r > 0 && strcmp(buf, "+PONG\r\n") == 0) {
            t->admitted++;
        } else if (r > 0 && strcmp(buf, REFUSED) == 0) {
            t->refused++; /* the refusal arrived after the first look */
        } else {
            t->other++;
            snprintf(t->other_what, sizeof t->other_what, "connection %d answered PING with '%s'", i, buf);
        }
    }
}

/* SENDs of 256 KiB payloads (enough to rotate a 4 MiB memtable many times): all must succeed. */
static void sends_keep_working(int count, const char *when)
{
    size_t len = 256 * 1024;
    char *payload = malloc(len + 1);
    BP_REQUIRE(payload != NULL, "out of memory");
    memset(payload, 'p', len);
    payload[len] = '\0';
    for (int i = 0; i < count; i++) {
        char id[32], e[512];
        payload[0] = (char)('a' + i % 26);
        int rc = bp_send(&bt_conn, id, sizeof id, e, sizeof e, "fdtopic", payload, NULL);
        BP_CHECK(rc == 0, "SEND %d %s: %s", i, when, e);
        if (rc != 0)
            break;
    }
    free(payload);
}

static void test_fd_limit(void)
{
    enum {
        CLIENTS = 1100
    };
    static int fds[CLIENTS];
    char e[512], v[64];

    need_fds(CLIENTS + 200);
    bt_broker.nofile = 1024;
    bt_start(NULL);
    BP_CHECK(bp_log_contains(&bt_broker, "max-clients lowered from 10000 to"),
             "no log line saying max-clients was lowered for ulimit -n 1024");
    BP_REQUIRE(bp_info_field(&bt_conn, "maxclients", v, sizeof v, e, sizeof e) == 0, "INFO: %s", e);
    long long maxclients = atoll(v);
    BP_CHECK(maxclients > 100 && maxclients < 1024 - 500, "maxclients %lld under ulimit -n 1024, max-open-files 500",
             maxclients);

    for (int i = 0; i < CLIENTS; i++) {
        fds[i] = tcp_connect(bt_broker.port);
        BP_REQUIRE(fds[i] >= 0, "connect %d: %s", i, strerror(errno));
    }
    sends_keep_working(80, "with every client slot taken");
    info_wait_t w = { .want = CLIENTS + 1 };
    BP_CHECK(tu_poll_until(clients_settled, &w, 30000, 50) == 0,
             "connected + rejected reached %lld of %lld: clients left in the backlog", w.got, w.want);

    tally_t t;
    classify(fds, CLIENTS, &t);
    BP_CHECK(t.other == 0, "%d connections neither admitted nor refused; e.g. %s", t.other, t.other_what);
    BP_CHECK(t.admitted == maxclients - 1, "%d admitted besides the fixture's, want maxclients-1 = %lld", t.admitted,
             maxclients - 1);
    BP_CHECK(t.refused == CLIENTS - t.admitted, "%d refused, want %d", t.refused, CLIENTS - t.admitted);
    printf("fd_limit: ulimit -n 1024: maxclients %lld, %d admitted, %d refused of %d\n", maxclients, t.admitted,
           t.refused, CLIENTS);

    for (int i = 0; i < CLIENTS; i++)
        close(fds[i]);
    sends_keep_working(40, "after the clients left");
    rc_conn_t again;
    BP_REQUIRE(bp_connect(&bt_broker, &again, e, sizeof e) == 0, "connect after the crowd left: %s", e);
    resp_reply_t *r = rc_cmd(&again, "PING", NULL);
    BP_CHECK(r != NULL && rc_str_eq(r, "PONG"), "a new client after the crowd left: %s",
             r == NULL ? again.err : rc_describe(r, e, sizeof e));
    resp_reply_free(r);
    rc_close(&again);
}

static void test_fd_exhausted(void)
{
    enum {
        METRICS = 120,
        CLIENTS = 1000
    };
    static int mfds[METRICS], fds[CLIENTS];
    char e[512], v[64];

    need_fds(METRICS + CLIENTS + 200);
    bt_broker.nofile = 1024;
    /* A small table cache leaves ~960 client slots: more than the descriptors left once
     * the /metrics connections below hold theirs. */
    const char *extra[] = { "--max-open-files", "16", NULL };
    bt_start(extra);
    BP_REQUIRE(bp_info_field(&bt_conn, "maxclients", v, sizeof v, e, sizeof e) == 0, "INFO: %s", e);
    long long maxclients = atoll(v);
    BP_REQUIRE(maxclients + METRICS > 1024, "maxclients %lld + %d /metrics connections fit in 1024", maxclients,
               METRICS);
    for (int i = 0; i < METRICS; i++) {
        mfds[i] = tcp_connect(bt_broker.metrics_port);
        BP_REQUIRE(mfds[i] >= 0, "metrics connect %d: %s", i, strerror(errno));
    }
    for (int i = 0; i < CLIENTS; i++) {
        fds[i] = tcp_connect(bt_broker.port);
        BP_REQUIRE(fds[i] >= 0, "connect %d: %s", i, strerror(errno));
    }
    BP_CHECK(tu_wait_file_contains(bt_broker.log_path, "with 'max number of clients reached'", 30000) == 0,
             "no log line saying waiting clients were refused at EMFILE");
    info_wait_t w = { .want = CLIENTS + 1 };
    BP_CHECK(tu_poll_until(clients_settled, &w, 30000, 50) == 0,
             "connected + rejected reached %lld of %lld: clients left in the backlog at EMFILE", w.got, w.want);
    tally_t t;
    classify(fds, CLIENTS, &t);
    BP_CHECK(t.other == 0, "%d connections neither admitted nor refused; e.g. %s", t.other, t.other_what);
    BP_CHECK(t.refused > 0 && t.admitted > 0, "%d admitted, %d refused", t.admitted, t.refused);
    printf("fd_exhausted: %d /metrics connections, %d admitted, %d refused of %d\n", METRICS, t.admitted, t.refused,
           CLIENTS);
    for (int i = 0; i < CLIENTS; i++)
        close(fds[i]);
    for (int i = 0; i < METRICS; i++)
        close(mfds[i]);
    sends_keep_working(10, "after EMFILE");
}

int main(int argc, char **argv)
{
    static const tu_test_t tests[] = {
        { "fd_limit", test_fd_limit },
        { "fd_exhausted", test_fd_exhausted },
        { NULL, NULL },
    };
    return bt_main(argc, argv, "limits", tests);
}
