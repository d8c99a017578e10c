/*
 * tests/integration/test_broker_hostile.c — hostile clients cannot hurt the broker or others.
 *
 * Each test starts its own hourglass-broker and keeps a bystander client
 * (the fixture's bt_conn) connected throughout. Checks, over the protocol (DESIGN §9, docs/broker.md
 * "Limits"):
 *  - malformed or oversized requests (a 1 GiB bulk header, a negative bulk
 *    length, 10^6 arguments, bad headers, data not followed by CRLF, an inline
 *    line over max-inline, unbalanced quotes) get one "-ERR Protocol error…"
 *    reply and are disconnected, while the bystander keeps working (PING,
 *    SEND, PULL) and the process stays alive; random garbage likewise;
 *  - a client that stops reading while pulling large payloads is disconnected
 *    at max-reply-buffer without hurting a reader of the same topic;
 *  - a connection closed after a protocol error lingers at most 1 s however
 *    its client keeps writing without reading its replies;
 *  - unknown commands and wrong arity are errors that keep the connection;
 *    every command and subcommand is found by its name in any case, and
 *    only by it;
 *    an over-size payload is refused and keeps the connection; max-clients;
 *    idle-timeout closes idle clients but not blocked PULLs, and a consumer
 *    long-polling with BLOCK = idle-timeout keeps every reply and its
 *    connection; a reply written is activity (idle-timeout counts from it,
 *    not from the request); CLIENT INFO after a pause, pipelined behind
 *    another command, shows its client idle 0 s with qbuf 0; HELLO 3;
 *  - a pipeline deeper than the broker's in-flight window is answered in order;
 *  - an HTTP request (a browser's form POST carrying commands in its body) is
 *    closed unanswered and unexecuted, with a warning naming the address; a
 *    request line alone, leaving nothing unread, is closed at once;
 *  - message ids of other than 16 hex digits are refused; HELLO SETNAME checks
 *    names exactly as CLIENT SETNAME does;
 *  - each bad argument (unknown, repeated or contradicting options, a value
 *    missing, durations with a bad unit or out of range, unknown words) gets
 *    one error reply naming the problem and the value, and the connection
 *    goes on; SHUTDOWN with contradicting options does not shut down; a
 *    nested MULTI dooms its transaction.
 *
 * Run one suite: ./tests/integration/test_broker_hostile hostile
 */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <CUnit/CUnit.h>

#include "tests/helpers/broker_test.h"
#include "tests/helpers/testutil.h"

/* The bystander still works: PING, SEND, PULL of what it sent; and the broker lives. */
static void bystander_ok(const char *after)
{
    char e[1024], id[32];
    BP_REQUIRE(bp_alive(&bt_broker), "the broker died after %s", after);
    resp_reply_t *r = rc_cmd(&bt_conn, "PING", NULL);
    BP_REQUIRE(r != NULL && rc_str_eq(r, "PONG"), "bystander PING after %s: %s", after,
               r == NULL ? bt_conn.err : rc_describe(r, e, sizeof e));
    resp_reply_free(r);
    BP_REQUIRE(bp_send(&bt_conn, id, sizeof id, e, sizeof e, "calm", "still here", NULL) == 0,
               "bystander SEND after %s: %s", after, e);
    r = bp_pull(&bt_conn, e, sizeof e, "bystander", "calm", "COUNT", "1000", NULL);
    BP_REQUIRE(r != NULL, "bystander PULL after %s: %s", after, e);
    int found = 0;
    for (size_t i = 0; i < r->count; i++) {
        rc_msg_t m;
        if (rc_msg_at(r, i, &m, e, sizeof e) == 0 && strcmp(m.id, id) == 0)
            found = 1;
    }
    BP_CHECK(found, "bystander PULL after %s did not return its message %s", after, id);
    resp_reply_free(r);
}

typedef struct hostile_case {
    const char *name;
    const char *bytes;
    size_t len;       /* 0: strlen(bytes) */
    const char *want; /* expected error prefix */
} hostile_case_t;

/* Send bytes on a fresh connection, expect an error reply starting with want
 * and the connection closed by the broker. */
static void expect_protocol_error(const char *name, const char *bytes, size_t len, const char *want)
{
    char e[1024];
    rc_conn_t x;
    BP_REQUIRE(bp_connect(&bt_broker, &x, e, sizeof e) == 0, "%s: connect: %s", name, e);
    rc_append_raw(&x, bytes, len);
    int wrote = rc_flush(&x, 10000); /* may fail: the broker may close before all is written */
    resp_reply_t *r = rc_read(&x, 10000);
    BP_CHECK(r != NULL && rc_is_error(r, want), "%s: reply %s (write %s; %s), want an error starting '%s'", name,
             rc_describe(r, e, sizeof e), wrote == 0 ? "complete" : "cut short", r == NULL ? x.err : "", want);
    if (r != NULL && r->type == RESP_REPLY_ERROR)
        printf("\n    %-34s -> -%.*s", name, (int)r->len, r->str);
    resp_reply_free(r);
    BP_CHECK(rc_wait_closed(&x, 10000) == 1, "%s: the broker did not close the connection", name);
    rc_close(&x);
    bystander_ok(name);
}

static void test_malformed_requests(void)
{
    bt_start(NULL);
    static char many_args[4096];
    size_t n = (size_t)snprintf(many_args, sizeof many_args, "*1000000\r\n");
    for (int i = 0; i < 100; i++)
        n += (size_t)snprintf(many_args + n, sizeof many_args - n, "$4\r\nPING\r\n");
    static char long_inline[70 * 1024];
    memset(long_inline, 'A', sizeof long_inline);
    static const char nul_bulk[] = "*1\r\n$\x00\x01\r\n";
    const hostile_case_t cases[] = {
        { "1 GiB bulk header", "*1\r\n$1073741824\r\n", 0, "ERR Protocol error" },
        { "1 GiB bulk header, second arg", "*2\r\n$4\r\nSEND\r\n$1073741824\r\n", 0, "ERR Protocol error" },
        { "bulk just over max-bulk (8mb)", "*1\r\n$8388609\r\n", 0, "ERR Protocol error" },
        { "negative bulk length", "*1\r\n$-5\r\n", 0, "ERR Protocol error" },
        { "bulk length -1 in a request", "*1\r\n$-1\r\n", 0, "ERR Protocol error" },
        { "10^6 arguments", many_args, n, "ERR Protocol error" },
        { "2^63 arguments", "*9223372036854775807\r\n", 0, "ERR Protocol error" },
        { "argument count overflow", "*99999999999999999999999\r\n", 0, "ERR Protocol error" },
        { "negative argument count", "*-5\r\n", 0, "ERR Protocol error" },
        { "letters as argument count", "*abc\r\n", 0, "ERR Protocol error" },
        { "letters as bulk length", "*1\r\n$abc\r\n", 0, "ERR Protocol error" },
        { "NUL in bulk length", nul_bulk, sizeof nul_bulk - 1, "ERR Protocol error" },
        { "missing '$'", "*2\r\n$4\r\nPING\r\nxyz\r\n", 0, "ERR Protocol error" },
        { "bulk not followed by CRLF", "*1\r\n$4\r\nPINGxx\r\n", 0, "ERR Protocol error" },
        { "inline line over max-inline", long_inline, sizeof long_inline, "ERR Protocol error" },
        { "unbalanced quotes inline", "SEND t \"abc\r\n", 0, "ERR Protocol error" },
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        expect_protocol_error(cases[i].name, cases[i].bytes, cases[i].len ? cases[i].len : strlen(cases[i].bytes),
                              cases[i].want);
    printf("\n");
    char v[64], e[1024];
    BP_REQUIRE(bp_info_field(&bt_conn, "protocol_errors", v, sizeof v, e, sizeof e) == 0, "%s", e);
    BP_CHECK(strtoull(v, NULL, 10) >= sizeof cases / sizeof cases[0], "INFO protocol_errors %s, want >= %zu", v,
             sizeof cases / sizeof cases[0]);
}

/* A small xorshift PRNG, seeded: the garbage is the same on every run. */
static uint64_t rng_state = 0x9e3779b97f4a7c15ull;
static uint64_t rng(void)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return rng_state;
}

static void test_random_garbage(void)
{
    bt_start(NULL);
    char e[1024];
    static char buf[8192];
    int closed = 0;
    for (int round = 0; round < 40; round++) {
        size_t len = 1 + rng() % sizeof buf;
        for (size_t i = 0; i < len; i++)
            buf[i] = (char)rng();
        /* Every other round starts like a multibulk request, to get past the first byte. */
        if (round % 2 == 0 && len > 2) {
            buf[0] = '*';
            buf[1] = (char)('1' + rng() % 9);
        }
        rc_conn_t x;
        BP_REQUIRE(bp_connect(&bt_broker, &x, e, sizeof e) == 0, "round %d: connect: %s", round, e);
        rc_append_raw(&x, buf, len);
        rc_flush(&x, 5000);
        /* Read until the broker closes or stays quiet; either is fine — it must not die. */
        closed += rc_wait_closed(&x, 300);
        rc_close(&x);
        BP_REQUIRE(bp_alive(&bt_broker), "the broker died on garbage round %d", round);
    }
    printf("\n    40 rounds of garbage: the broker closed %d of the connections\n", closed);
    bystander_ok("random garbage");
}

static void test_slow_reader_disconnected(void)
{
    static const char *const flags[] = { "--max-reply-buffer", "1mb", NULL };
    bt_start(flags);
    enum {
        N = 60,
        SIZE = 256 * 1024
    };
    char e[1024], id[32];
    char *payload = malloc(SIZE + 1);
    BP_REQUIRE(payload != NULL, "malloc");
    memset(payload, 'P', SIZE);
    payload[SIZE] = '\0';
    for (int i = 0; i < N; i++)
        BP_REQUIRE(bp_send(&bt_conn, id, sizeof id, e, sizeof e, "big", payload, NULL) == 0, "SEND %d: %s", i, e);
    free(payload);

    rc_conn_t x;
    BP_REQUIRE(bp_connect(&bt_broker, &x, e, sizeof e) == 0, "%s", e);
    int small = 4096;
    setsockopt(x.fd, SOL_SOCKET, SO_RCVBUF, &small, sizeof small);
    for (int i = 0; i < N; i++)
        rc_appendl(&x, "PULL", "slow", "big", "COUNT", "1", NULL);
    BP_REQUIRE(rc_flush(&x, 10000) == 0, "slow client's PULLs: %s", x.err);

    /* The bystander reads the same topic in its own group meanwhile. */
    int got = 0;
    uint64_t end = tu_now_mono_ms() + 20000;
    while (got < N && tu_now_mono_ms() < end) {
        resp_reply_t *r = bp_pull(&bt_conn, e, sizeof e, "fast", "big", "COUNT", "10", "BLOCK", "1000", NULL);
        BP_REQUIRE(r != NULL, "bystander PULL: %s", e);
        for (size_t i = 0; i < r->count; i++) {
            rc_msg_t m;
            BP_REQUIRE(rc_msg_at(r, i, &m, e, sizeof e) == 0, "%s", e);
            BP_CHECK(m.payload_len == SIZE, "bystander got a payload of %zu bytes", m.payload_len);
        }
        got += (int)r->count;
        resp_reply_free(r);
    }
    BP_CHECK(got == N, "bystander got %d of %d large messages", got, N);

    /* The slow client is disconnected (reply buffer over 1mb). */
    char v[64] = "";
    end = tu_now_mono_ms() + 20000;
    while (tu_now_mono_ms() < end) {
        BP_REQUIRE(bp_info_field(&bt_conn, "reply_buffer_disconnects", v, sizeof v, e, sizeof e) == 0, "%s", e);
        if (strtoull(v, NULL, 10) >= 1)
            break;
        resp_reply_t *r = bp_pull(&bt_conn, e, sizeof e, "idle", "nothing", "BLOCK", "100", NULL);
        resp_reply_free(r);
    }
    BP_CHECK(strtoull(v, NULL, 10) >= 1, "INFO reply_buffer_disconnects is '%s' after 20 s, want >= 1", v);
    /* The broker's end is closed; the client sees EOF once it has read what
     * was queued before the FIN. Should the orphaned socket have given up
     * sending into the client's tiny window, it is gone without a FIN, and
     * only a segment from the client draws the RST that says so: a live
     * socket (a leaked fd) would answer neither way. */
    int closed = rc_wait_closed(&x, 10000);
    if (!closed) {
        rc_append_raw(&x, "PING\r\n", 6);
        (void)rc_flush(&x, 1000); /* EPIPE or ECONNRESET here is the answer */
        closed = rc_wait_closed(&x, 10000);
    }
    if (!closed) {
        struct tcp_info ti;
        socklen_t tl = sizeof ti;
        memset(&ti, 0, sizeof ti);
        getsockopt(x.fd, IPPROTO_TCP, TCP_INFO, &ti, &tl);
        BP_CHECK(0,
                 "the slow reader's connection was not closed after 20 s (client side: state %u, rcv_space %u, "
                 "probes %u, backoff %u)",
                 ti.tcpi_state, ti.tcpi_rcv_space, ti.tcpi_probes, ti.tcpi_backoff);
    }
    rc_close(&x);
    bystander_ok("a slow reader");
}

/* A connection closed after a protocol error lingers at most LINGER_MS (1 s)
 * discarding what its client still writes: a client that reads none of its
 * replies (so they stay unacknowledged in a tiny receive window) and writes
 * without pause (each read re-arms the linger's 5 ms poll) is closed within
 * the deadline, not held for as long as it keeps writing. */
static void test_linger_bounded_for_a_writer(void)
{
    bt_start(NULL);
    char e[1024], v[64] = "";
    tu_dial_opts_t tiny_window = { .rcvbuf = 2048 };
    int fd = tu_tcp_connect_with(bt_broker.port, &tiny_window);
    BP_REQUIRE(fd >= 0, "connect with SO_RCVBUF 2048: %m");
    /* 32 ECHOs of 2 KiB (64 KiB of replies, never read), then a protocol error */
    char payload[2048];
    memset(payload, 'e', sizeof payload);
    for (int i = 0; i < 32; i++) {
        char head[64];
        int n = snprintf(head, sizeof head, "*2\r\n$4\r\nECHO\r\n$%zu\r\n", sizeof payload);
        BP_REQUIRE(send(fd, head, (size_t)n, MSG_NOSIGNAL) == n, "send: %m");
        BP_REQUIRE(send(fd, payload, sizeof payload, MSG_NOSIGNAL) == (ssize_t)sizeof payload, "send: %m");
        BP_REQUIRE(send(fd, "\r\n", 2, MSG_NOSIGNAL) == 2, "send: %m");
    }
    BP_REQUIRE(send(fd, "*x\r\n", 4, MSG_NOSIGNAL) == 4, "send: %m");
    uint64_t start = tu_now_mono_ms(), end = start + 8000;
    int closed = 0;
    static char flood[4096];
    memset(flood, 'P', sizeof flood);
    while (!closed && tu_now_mono_ms() < end) {
        /* EPIPE or ECONNRESET: the broker closed it (a write after its close draws a reset) */
        closed = send(fd, flood, sizeof flood, MSG_NOSIGNAL | MSG_DONTWAIT) < 0 && errno != EAGAIN;
        struct timespec ts = { 0, 100 * 1000 };
        nanosleep(&ts, NULL);
    }
    uint64_t took = tu_now_mono_ms() - start;
    BP_REQUIRE(bp_info_field(&bt_conn, "connected_clients", v, sizeof v, e, sizeof e) == 0, "%s", e);
    BP_CHECK(closed,
             "a lingering connection whose client keeps writing was still open after %llu ms "
             "(connected_clients %s), want closed within about 1 s",
             (unsigned long long)took, v);
    printf("\n    closed after %llu ms ", (unsigned long long)took);
    close(fd);
    bystander_ok("a writer that never reads its replies");
}

static void expect_error_keeps_conn(rc_conn_t *c, int argc, const char *const *argv, const size_t *lens,
                                    const char *want)
{
    char d[300];
    resp_reply_t *r = rc_cmdv(c, argc, argv, lens);
    BP_REQUIRE(r != NULL, "%s: %s", argv[0], c->err);
    BP_CHECK(rc_is_error(r, want), "%s%s%s: %s, want an error starting '%s'", argv[0], argc > 1 ? " " : "",
             argc > 1 ? argv[1] : "", rc_describe(r, d, sizeof d), want);
    resp_reply_free(r);
    r = rc_cmd(c, "PING", NULL);
    BP_CHECK(r != NULL && rc_str_eq(r, "PONG"), "PING after %s: %s", argv[0],
             r == NULL ? c->err : rc_describe(r, d, sizeof d));
    resp_reply_free(r);
}

/* 1 when name[0..len) is, ignoring case, one of the count names of list. */
static int among_names(const resp_reply_t *list, const char *name, size_t len)
{
    for (size_t i = 0; i < list->count; i++) {
        if (list->elements[i].len == len && strncasecmp(list->elements[i].str, name, len) == 0) {
            return 1;
        }
    }
    return 0;
}

/* Every row of the command table is found by its name in any case (COMMAND
 * INFO looks names up as dispatch does), and only by its name: a name one
 * byte longer or shorter, or with a byte changed, is no command unless it is
 * another row's. */
static void test_command_lookup(void)
{
    bt_start(NULL);
    char d[300];
    resp_reply_t *list = rc_cmd(&bt_conn, "COMMAND", "LIST", NULL);
    BP_REQUIRE(list != NULL && list->type == RESP_REPLY_ARRAY && list->count >= 30, "COMMAND LIST: %s",
               list == NULL ? bt_conn.err : rc_describe(list, d, sizeof d));
    for (size_t i = 0; i < list->count; i++) {
        const char *row = list->elements[i].str;
        size_t len = list->elements[i].len;
        char variants[5][64];
        BP_REQUIRE(len >= 1 && len + 2 < sizeof variants[0], "a command name of %zu bytes", len);
        size_t variant_lens[5] = { len, len, len + 1, len - 1, len };
        for (size_t v = 0; v < 5; v++) {
            memcpy(variants[v], row, len + 1);
        }
        for (size_t b = 0; b < len; b++) { /* 0: upper case, 1: every other byte upper case */
            variants[0][b] = (char)toupper((unsigned char)row[b]);
            variants[1][b] = b % 2 ? (char)toupper((unsigned char)row[b]) : row[b];
        }
        variants[2][len] = 'x'; /* one byte more */
        variants[2][len + 1] = '\0';
        variants[3][len - 1] = '\0';                        /* one byte less */
        variants[4][len - 1] = (char)(row[len - 1] ^ 0x40); /* the last byte changed */
        for (size_t v = 0; v < 5; v++) {
            const char *name = variants[v];
            int known = among_names(list, name, variant_lens[v]);
            resp_reply_t *r = rc_cmd(&bt_conn, "COMMAND", "INFO", name, NULL);
            BP_REQUIRE(r != NULL && r->type == RESP_REPLY_ARRAY && r->count == 1, "COMMAND INFO %s: %s", name,
                       r == NULL ? bt_conn.err : rc_describe(r, d, sizeof d));
            const resp_reply_t *e = &r->elements[0];
            if (known) {
                BP_CHECK(e->type == RESP_REPLY_ARRAY && e->count >= 1 && e->elements[0].len == variant_lens[v] &&
                             strncasecmp(e->elements[0].str, name, variant_lens[v]) == 0,
                         "COMMAND INFO %s: %s, want its entry", name, rc_describe(e, d, sizeof d));
            } else {
                BP_CHECK(e->type == RESP_REPLY_NIL, "COMMAND INFO %s: %s, want a null (no such command)", name,
                         rc_describe(e, d, sizeof d));
            }
            resp_reply_free(r);
        }
    }
    resp_reply_free(list);

    /* a subcommand by its name in any case (cmd_arg_is), and only by it; a NUL
     * byte is a byte like any other, never the end of a name */
    static const struct {
        const char *name;
        size_t len;
        int known;
    } subs[] = {
        { "GROUP|LIST", 10, 1 },   { "group|LiSt", 10, 1 }, { "group|lis", 9, 0 },    { "group|listx", 11, 0 },
        { "group|list\0", 11, 0 }, { "ping\0", 5, 0 },      { "dlq|REQUEUE", 11, 1 }, { "dlq|requeu", 10, 0 },
    };
    for (size_t i = 0; i < sizeof subs / sizeof subs[0]; i++) {
        const char *argv[] = { "COMMAND", "INFO", subs[i].name };
        const size_t lens[] = { 7, 4, subs[i].len };
        resp_reply_t *r = rc_cmdv(&bt_conn, 3, argv, lens);
        BP_REQUIRE(r != NULL && r->type == RESP_REPLY_ARRAY && r->count == 1, "COMMAND INFO %s: %s", subs[i].name,
                   r == NULL ? bt_conn.err : rc_describe(r, d, sizeof d));
        BP_CHECK((r->elements[0].type == RESP_REPLY_ARRAY) == subs[i].known, "COMMAND INFO %s (%zu bytes): %s",
                 subs[i].name, subs[i].len, rc_describe(&r->elements[0], d, sizeof d));
        resp_reply_free(r);
    }
    bystander_ok("command lookups");
}

static void test_command_errors(void)
{
    bt_start(NULL);
    static const struct {
        int argc;
        const char *argv[4];
        const char *want;
    } cases[] = {
        { 1, { "FOO" }, "ERR unknown command" },
        { 2, { "GETX", "a" }, "ERR unknown command" },
        { 2, { "SEND", "t" }, "ERR wrong number of arguments for 'send' command" },
        { 1, { "send" }, "ERR wrong number of arguments for 'send' command" },
        { 2, { "PULL", "g" }, "ERR wrong number of arguments for 'pull' command" },
        { 2, { "ACK", "g" }, "ERR wrong number of arguments for 'ack' command" },
        { 2, { "NACK", "g" }, "ERR wrong number of arguments for 'nack' command" },
        { 2, { "TOUCH", "g" }, "ERR wrong number of arguments for 'touch' command" },
        { 1, { "GROUP" }, "ERR" },
        { 2, { "GROUP", "FROB" }, "ERR" },
        { 1, { "DLQ" }, "ERR" },
        { 3, { "DLQ", "FROB", "g" }, "ERR" },
        { 3, { "ECHO", "a", "b" }, "ERR wrong number of arguments for 'echo' command" },
        { 2, { "SELECT", "1" }, "ERR" },
        { 3, { "AUTH", "u", "p" }, "ERR" },
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        expect_error_keeps_conn(&bt_conn, cases[i].argc, cases[i].argv, NULL, cases[i].want);

    /* A payload over max-payload (4mb) is refused; the connection stays. */
    size_t big = 5000000;
    char *p = malloc(big);
    BP_REQUIRE(p != NULL, "malloc");
    memset(p, 'x', big);
    const char *argv[] = { "SEND", "t", p };
    size_t lens[] = { 4, 1, big };
    expect_error_keeps_conn(&bt_conn, 3, argv, lens, "ERR payload is 5000000 bytes, larger than max-payload");
    free(p);

    /* Inline commands work (telnet style), and empty multibulks are skipped. */
    char d[300];
    static const char inl[] = "*0\r\nPING\r\necho \"a b\"\r\n";
    rc_append_raw(&bt_conn, inl, sizeof inl - 1);
    BP_REQUIRE(rc_flush(&bt_conn, 0) == 0, "%s", bt_conn.err);
    resp_reply_t *r = rc_read(&bt_conn, 0);
    BP_CHECK(r != NULL && rc_str_eq(r, "PONG"), "inline PING: %s",
             r == NULL ? bt_conn.err : rc_describe(r, d, sizeof d));
    resp_reply_free(r);
    r = rc_read(&bt_conn, 0);
    BP_CHECK(r != NULL && r->type == RESP_REPLY_BULK && rc_str_eq(r, "a b"), "inline ECHO \"a b\": %s",
             r == NULL ? bt_conn.err : rc_describe(r, d, sizeof d));
    resp_reply_free(r);

    /* QUIT answers +OK and closes. */
    rc_conn_t q;
    char e[1024];
    BP_REQUIRE(bp_connect(&bt_broker, &q, e, sizeof e) == 0, "%s", e);
    r = rc_cmd(&q, "QUIT", NULL);
    BP_CHECK(r != NULL && r->type == RESP_REPLY_STATUS && rc_str_eq(r, "OK"), "QUIT: %s",
             r == NULL ? q.err : rc_describe(r, d, sizeof d));
    resp_reply_free(r);
    BP_CHECK(rc_wait_closed(&q, 5000) == 1, "QUIT did not close the connection");
    rc_close(&q);
    bystander_ok("command errors");
}

/* Every refusal of a bad argument is one error reply that names the problem and the value, and the connection goes
 * on: the PING after each must be answered PONG (a second reply to one command would answer it instead). */
static void test_argument_errors(void)
{
    bt_start(NULL);
    static const char id[] = "0000000000000001";
    static const struct {
        int argc;
        const char *argv[8];
        const char *want;
    } cases[] = {
        /* an option the listing does not know, last on the line: one reply, not "needs a value" and then a second */
        { 2, { "TOPICS", "FOO" }, "ERR syntax error: unknown option 'FOO' for 'topics'" },
        { 3, { "GROUP", "LIST", "FOO" }, "ERR syntax error: unknown option 'FOO' for 'group list'" },
        { 4, { "TOPICS", "COUNT", "1", "BAR" }, "ERR syntax error: unknown option 'BAR' for 'topics'" },
        /* durations say what is wrong with them (base/units.h's reason) */
        { 5, { "SEND", "t", "p", "DELAY", "1us" }, "ERR DELAY '1us' is not a duration: unknown unit \"us\"" },
        { 5,
          { "SEND", "t", "p", "DELAY", "1.0005s" },
          "ERR DELAY '1.0005s' is not a duration: duration \"1.0005s\" is not a whole number of milliseconds" },
        { 5, { "NACK", "g", id, "DELAY", "-1s" }, "ERR DELAY '-1s' is not a duration: sign not allowed" },
        { 5,
          { "PULL", "g", "t", "BLOCK", "99999999999999999" },
          "ERR BLOCK '99999999999999999' is not a duration: duration \"99999999999999999\" is above the maximum of "
          "36500d" },
        { 5, { "PULL", "g", "t", "LEASE", "1w" }, "ERR LEASE '1w' is not a duration: unknown unit \"w\"" },
        { 5, { "PULL", "g", "t", "LEASE", "25h" }, "ERR LEASE must be 1ms..24h" },
        /* TOUCH, PEEK and REVOKE name the word they stumbled on */
        { 4, { "TOUCH", "g", id, "LEASE" }, "ERR syntax error: LEASE needs a value" },
        { 4, { "TOUCH", "g", id, "FOO" }, "ERR syntax error: unknown option 'FOO' for 'touch'" },
        { 7, { "TOUCH", "g", id, "LEASE", "1s", "LEASE", "2s" }, "ERR syntax error: LEASE given twice" },
        { 3, { "PEEK", "FOO", "1" }, "ERR syntax error: PEEK needs LEVEL n or TOPIC t, got 'FOO'" },
        { 4, { "PEEK", "LEVEL", "1", "COUNT" }, "ERR syntax error: COUNT needs a value" },
        { 4, { "PEEK", "LEVEL", "1", "FOO" }, "ERR syntax error: unknown option 'FOO' for 'peek'" },
        { 7, { "PEEK", "TOPIC", "t", "COUNT", "1", "COUNT", "2" }, "ERR syntax error: COUNT given twice" },
        { 5, { "PEEK", "LEVEL", "1", "COUNT", "x" }, "ERR COUNT must be 1..1000, got 'x'" },
        { 3, { "PEEK", "LEVEL", "x" }, "ERR LEVEL must be 1..18, got 'x'" },
        { 4, { "REVOKE", "t", "FOO", "k" }, "ERR syntax error: unknown option 'FOO' for 'revoke'" },
        { 3, { "REVOKE", "t", "KEY" }, "ERR syntax error: KEY needs a value" },
        { 5,
          { "REVOKE", "t", "KEY", "k", "x" },
          "ERR syntax error: unexpected argument 'x' after REVOKE topic KEY key" },
        /* repeated and unknown values name themselves */
        { 5, { "NACK", "g", id, "DLQ", "DLQ" }, "ERR syntax error: DLQ given twice" },
        { 6, { "GROUP", "CREATE", "g", "t", "FROM", "later" }, "ERR FROM must be FIRST or NOW, got 'later'" },
        { 5, { "NACK", "g", id, "LEVEL", "0" }, "ERR LEVEL must be 1..18, got '0'" },
        { 2, { "SELECT", "1" }, "ERR DB index is out of range: '1' (one keyspace: SELECT 0 only)" },
        { 2, { "CONFIG", "REWRITE" }, "ERR CONFIG REWRITE is not supported: change the config file and restart" },
        { 3, { "COMMAND", "COUNT", "x" }, "ERR wrong number of arguments for 'command|count' command" },
        { 3, { "COMMAND", "HELP", "x" }, "ERR wrong number of arguments for 'command|help' command" },
        { 3, { "COMMAND", "LIST", "x" }, "ERR wrong number of arguments for 'command|list' command" },
        /* SHUTDOWN with contradicting or repeated options shuts nothing down */
        { 3, { "SHUTDOWN", "NOSAVE", "SAVE" }, "ERR syntax error: NOSAVE and SAVE contradict each other" },
        { 3, { "SHUTDOWN", "NOW", "now" }, "ERR syntax error: NOW given twice" },
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        expect_error_keeps_conn(&bt_conn, cases[i].argc, cases[i].argv, NULL, cases[i].want);
    bystander_ok("argument errors");
}

/* A MULTI inside MULTI is refused and dooms the transaction (as any refusal while queueing, and as Redis 7): EXEC
 * stores none of the SENDs queued around it. */
static void test_nested_multi_dooms(void)
{
    bt_start(NULL);
    char e[300];
    static const char *const steps[][3] = {
        { "MULTI", NULL, NULL },
        { "SEND", "nested", "one" },
        { "MULTI", NULL, NULL },
        { "SEND", "nested", "two" },
    };
    static const char *const want[] = { "+OK", "+QUEUED", "-ERR MULTI calls can not be nested", "+QUEUED" };
    for (size_t i = 0; i < sizeof steps / sizeof steps[0]; i++) {
        resp_reply_t *r = rc_cmdv(&bt_conn, steps[i][1] ? 3 : 1, steps[i], NULL);
        int ok = want[i][0] == '-' ? rc_is_error(r, want[i] + 1)
                                   : r != NULL && r->type == RESP_REPLY_STATUS && rc_str_eq(r, want[i] + 1);
        BP_CHECK(ok, "step %zu (%s): %s, want %s", i, steps[i][0], rc_describe(r, e, sizeof e), want[i]);
        resp_reply_free(r);
    }
    resp_reply_t *r = rc_cmd(&bt_conn, "EXEC", NULL);
    BP_CHECK(rc_is_error(r, "EXECABORT"), "EXEC after a nested MULTI: %s", rc_describe(r, e, sizeof e));
    resp_reply_free(r);
    r = rc_cmd(&bt_conn, "PEEK", "TOPIC", "nested", NULL);
    BP_CHECK(r != NULL && r->type == RESP_REPLY_ARRAY && r->count == 0, "the doomed transaction stored: %s",
             rc_describe(r, e, sizeof e));
    resp_reply_free(r);
    bystander_ok("a nested MULTI");
}

/* One more client while the broker is at max-clients (it is refused); 1 once the log has a refusal line that says
 * how many were not logged since the one before (common/log_limit.h's count). */
static int max_clients_count_logged(void *arg)
{
    (void)arg;
    int fd = tu_tcp_connect(bt_broker.port);
    if (fd >= 0)
        close(fd);
    return bp_log_contains(&bt_broker, "refused a client with 'max number of clients reached' (") &&
           bp_log_contains(&bt_broker, "refused so far) (repeated ");
}

static void test_max_clients(void)
{
    static const char *const flags[] = { "--max-clients", "3", NULL };
    bt_start(flags); /* bt_conn is client 1 */
    char e[1024], d[300];
    rc_conn_t c2, c3, c4;
    BP_REQUIRE(bp_connect(&bt_broker, &c2, e, sizeof e) == 0, "%s", e);
    BP_REQUIRE(bp_connect(&bt_broker, &c3, e, sizeof e) == 0, "%s", e);
    /* Make sure the broker has accepted both before the fourth. */
    resp_reply_t *r = rc_cmd(&c2, "PING", NULL);
    resp_reply_free(r);
    r = rc_cmd(&c3, "PING", NULL);
    resp_reply_free(r);
    BP_REQUIRE(bp_connect(&bt_broker, &c4, e, sizeof e) == 0, "%s", e);
    r = rc_read(&c4, 5000);
    if (r == NULL) { /* the error may be sent only once the client speaks */
        r = rc_cmd(&c4, "PING", NULL);
    }
    BP_CHECK(r != NULL && rc_is_error(r, "ERR max number of clients reached"), "4th client with max-clients 3: %s",
             r == NULL ? c4.err : rc_describe(r, d, sizeof d));
    resp_reply_free(r);
    BP_CHECK(rc_wait_closed(&c4, 5000) == 1, "the 4th client was not disconnected");
    /* The operator is told too (before, only a refusal on tls-port was logged). */
    BP_CHECK(tu_wait_file_contains(bt_broker.log_path,
                                   "max-clients (3) reached: refused a client with 'max number of clients reached'",
                                   10000) == 0,
             "no log line for the client refused at max-clients");
    /* A flood of them: a line at most once a second, the next one counting those not logged (before 2026-12-05
     * only the running total showed them). */
    BP_CHECK(tu_poll_until(max_clients_count_logged, NULL, 20000, 200) == 0,
             "no max-clients line saying how many refusals were not logged since the last");
    rc_close(&c4);
    rc_close(&c3);
    /* A slot is free again once c3 is gone. */
    char v[32] = "";
    uint64_t end = tu_now_mono_ms() + 5000;
    while (tu_now_mono_ms() < end && bp_info_field(&bt_conn, "connected_clients", v, sizeof v, e, sizeof e) == 0 &&
           strcmp(v, "2") != 0)
        ;
    BP_CHECK(strcmp(v, "2") == 0, "connected_clients %s after closing two, want 2", v);
    BP_REQUIRE(bp_connect(&bt_broker, &c4, e, sizeof e) == 0, "%s", e);
    r = rc_cmd(&c4, "PING", NULL);
    BP_CHECK(r != NULL && rc_str_eq(r, "PONG"), "a new client after one left: %s",
             r == NULL ? c4.err : rc_describe(r, d, sizeof d));
    resp_reply_free(r);
    rc_close(&c4);
    rc_close(&c2);
    bystander_ok("max-clients");
}

static void test_idle_timeout(void)
{
    static const char *const flags[] = { "--idle-timeout", "500ms", NULL };
    bt_start(flags);
    char e[1024], d[300];
    rc_conn_t idle, blocked;
    BP_REQUIRE(bp_connect(&bt_broker, &idle, e, sizeof e) == 0, "%s", e);
    BP_REQUIRE(bp_connect(&bt_broker, &blocked, e, sizeof e) == 0, "%s", e);
    rc_appendl(&blocked, "PULL", "g", "quiet", "BLOCK", "3000", NULL);
    BP_REQUIRE(rc_flush(&blocked, 0) == 0, "%s", blocked.err);
    uint64_t t0 = tu_now_mono_ms();
    BP_CHECK(rc_wait_closed(&idle, 10000) == 1, "an idle client was not closed with idle-timeout 500ms");
    uint64_t took = tu_now_mono_ms() - t0;
    BP_CHECK(took >= 400, "idle client closed after %" PRIu64 " ms, before the 500 ms idle-timeout", took);
    rc_close(&idle);
    /* The blocked PULL is exempt: it times out normally with an empty array. */
    resp_reply_t *r = rc_read(&blocked, 10000);
    BP_CHECK(r != NULL && r->type == RESP_REPLY_ARRAY && r->count == 0, "blocked PULL under idle-timeout: %s",
             r == NULL ? blocked.err : rc_describe(r, d, sizeof d));
    resp_reply_free(r);
    rc_close(&blocked);
    /* A long-polling consumer: PULL BLOCK as long as the idle-timeout, again and again.
     * Each empty reply must arrive, and the connection must stay usable for the next
     * PULL sent right after it (the client was waiting on the broker, not idle). */
    rc_conn_t poller;
    BP_REQUIRE(bp_connect(&bt_broker, &poller, e, sizeof e) == 0, "%s", e);
    int lost = 0, rounds = 0;
    for (; rounds < 20 && lost == 0; rounds++) {
        rc_appendl(&poller, "PULL", "g", "quiet", "BLOCK", "500", NULL);
        if (rc_flush(&poller, 5000) != 0) {
            lost = 1;
            break;
        }
        r = rc_read(&poller, 10000);
        if (r == NULL || r->type != RESP_REPLY_ARRAY || r->count != 0)
            lost = 1;
        resp_reply_free(r);
    }
    BP_CHECK(lost == 0, "long poll with BLOCK = idle-timeout: round %d of 20 lost its reply or the connection (%s)",
             rounds, poller.err);
    rc_close(&poller);

    /* bt_conn talked only at the start; talking again after a reconnect works. */
    rc_close(&bt_conn);
    BP_REQUIRE(bp_connect(&bt_broker, &bt_conn, e, sizeof e) == 0, "%s", e);
    bystander_ok("idle-timeout");
}

/* idle-timeout counts from the last reply written, not from the request it
 * answers: a PULL BLOCK 1500 under a 1 s idle-timeout is exempt while it
 * waits (blocked), and its reply at 1.5 s leaves the client idle from then
 * on, so 900 ms after that reply (2.4 s after its request, the idle time
 * checked at 2 s) the connection still serves a PING; it closes once it has
 * been idle a whole idle-timeout. */
static void test_idle_timeout_counts_from_the_reply(void)
{
    static const char *const flags[] = { "--idle-timeout", "1s", NULL };
    bt_start(flags);
    char e[1024], d[300];
    rc_conn_t c;
    BP_REQUIRE(bp_connect(&bt_broker, &c, e, sizeof e) == 0, "%s", e);
    resp_reply_t *r = rc_cmd(&c, "PULL", "g", "quiet", "BLOCK", "1500", NULL);
    uint64_t replied = tu_now_mono_ms();
    BP_REQUIRE(r != NULL && r->type == RESP_REPLY_ARRAY && r->count == 0, "PULL BLOCK 1500: %s",
               r == NULL ? c.err : rc_describe(r, d, sizeof d));
    resp_reply_free(r);
    BP_REQUIRE(rc_wait_closed(&c, 900) == 0,
               "closed %" PRIu64 " ms after the reply to a PULL BLOCK 1500, within the 1 s idle-timeout",
               tu_now_mono_ms() - replied);
    r = rc_cmd(&c, "PING", NULL);
    BP_CHECK(r != NULL && rc_str_eq(r, "PONG"), "PING 900 ms after the last reply (idle-timeout 1 s): %s",
             r == NULL ? c.err : rc_describe(r, d, sizeof d));
    resp_reply_free(r);
    uint64_t pinged = tu_now_mono_ms();
    BP_CHECK(rc_wait_closed(&c, 10000) == 1, "the client was not closed once idle");
    BP_CHECK(tu_now_mono_ms() - pinged >= 900, "closed %" PRIu64 " ms after its last PONG, idle-timeout 1 s",
             tu_now_mono_ms() - pinged);
    rc_close(&c);
    rc_close(&bt_conn); /* idle meanwhile, closed too */
    BP_REQUIRE(bp_connect(&bt_broker, &bt_conn, e, sizeof e) == 0, "%s", e);
    bystander_ok("idle-timeout from the reply");
}

/* A client idle over a second, then sending PING and CLIENT INFO in one
 * write (one read pass: the broker reads the clock once for both and drains
 * its input once, after both), is shown idle 0 s, its first command having
 * stamped its activity, and qbuf 0: nothing unparsed is left. */
static void test_client_info_idle_after_a_pause(void)
{
    bt_start(NULL);
    char e[1024], d[300];
    rc_conn_t c;
    BP_REQUIRE(bp_connect(&bt_broker, &c, e, sizeof e) == 0, "%s", e);
    resp_reply_t *r = rc_cmd(&c, "PING", NULL);
    BP_REQUIRE(r != NULL && rc_str_eq(r, "PONG"), "PING: %s", r == NULL ? c.err : rc_describe(r, d, sizeof d));
    resp_reply_free(r);
    uint64_t pause_end = tu_now_mono_ms() + 1500;
    while (tu_now_mono_ms() < pause_end) {
        BP_REQUIRE(rc_wait_closed(&c, (int)(pause_end - tu_now_mono_ms()) + 1) == 0, "closed during the pause");
    }
    rc_appendl(&c, "PING", NULL);
    rc_appendl(&c, "CLIENT", "INFO", NULL);
    BP_REQUIRE(rc_flush(&c, 0) == 0, "%s", c.err);
    r = rc_read(&c, 0);
    BP_CHECK(r != NULL && rc_str_eq(r, "PONG"), "PING: %s", r == NULL ? c.err : rc_describe(r, d, sizeof d));
    resp_reply_free(r);
    r = rc_read(&c, 0);
    BP_CHECK(r != NULL && r->type == RESP_REPLY_BULK && memmem(r->str, r->len, " idle=0 ", 8) != NULL,
             "CLIENT INFO right after a command, 1.5 s after the one before: %s",
             r == NULL ? c.err : rc_describe(r, d, sizeof d));
    /* the bytes of the PING and of the CLIENT INFO itself were parsed in that pass: not in its input */
    BP_CHECK(r != NULL && r->type == RESP_REPLY_BULK && memmem(r->str, r->len, " qbuf=0 ", 8) != NULL,
             "CLIENT INFO as the last command of a pipeline: %s", r == NULL ? c.err : rc_describe(r, d, sizeof d));
    resp_reply_free(r);
    rc_close(&c);
    bystander_ok("CLIENT INFO after a pause");
}

static void test_hello3(void)
{
    bt_start(NULL);
    char d[300];
    resp_reply_t *r = rc_cmd(&bt_conn, "HELLO", "3", NULL);
    BP_REQUIRE(r != NULL && r->type == RESP_REPLY_MAP, "HELLO 3: %s",
               r == NULL ? bt_conn.err : rc_describe(r, d, sizeof d));
    int proto = 0;
    for (size_t i = 0; i + 1 < r->count; i += 2)
        if (rc_str_eq(&r->elements[i], "proto"))
            proto = (int)r->elements[i + 1].integer;
    BP_CHECK(proto == 3, "HELLO 3 says proto %d", proto);
    resp_reply_free(r);
    r = rc_cmd(&bt_conn, "HELLO", "4", NULL);
    BP_CHECK(rc_is_error(r, "NOPROTO"), "HELLO 4: %s", rc_describe(r, d, sizeof d));
    resp_reply_free(r);
    /* RESP3: INFO is verbatim text, GROUP LIST elements are maps; the helpers read both. */
    r = rc_cmd(&bt_conn, "INFO", "server", NULL);
    BP_CHECK(r != NULL && r->type == RESP_REPLY_VERBATIM, "INFO under RESP3: %s", rc_describe(r, d, sizeof d));
    resp_reply_free(r);
    bystander_ok("HELLO 3");
    char e[300];
    long long v = -1;
    BP_CHECK(bp_group_field(&bt_conn, "bystander", "inflight", &v, e, sizeof e) == 1, "GROUP LIST under RESP3: %s", e);
    r = rc_cmd(&bt_conn, "HELLO", "2", NULL);
    BP_CHECK(r != NULL && (r->type == RESP_REPLY_ARRAY), "HELLO 2: %s", rc_describe(r, d, sizeof d));
    resp_reply_free(r);
}

/* More requests in flight than the broker's per-connection window (1024): it
 * pauses reading (backpressure) and still answers every one, in order. */
static void test_deep_pipeline(void)
{
    bt_start(NULL);
    enum {
        N = 5000
    };
    char d[300], e[300];
    for (int i = 0; i < N; i++) {
        char p[32];
        snprintf(p, sizeof p, "%d", i);
        if (i % 2 == 0)
            rc_appendl(&bt_conn, "ECHO", p, NULL);
        else
            rc_appendl(&bt_conn, "SEND", "deep", p, NULL);
    }
    BP_REQUIRE(rc_flush(&bt_conn, 30000) == 0, "writing %d pipelined commands: %s", N, bt_conn.err);
    int bad = 0;
    for (int i = 0; i < N; i++) {
        resp_reply_t *r = rc_read(&bt_conn, 30000);
        BP_REQUIRE(r != NULL, "reply %d of %d: %s", i, N, bt_conn.err);
        char p[32];
        snprintf(p, sizeof p, "%d", i);
        if (i % 2 == 0 ? !rc_str_eq(r, p) : !(r->type == RESP_REPLY_BULK && r->len == 16)) {
            if (bad++ == 0)
                BP_CHECK(0, "reply %d out of order or wrong: %s", i, rc_describe(r, d, sizeof d));
        }
        resp_reply_free(r);
    }
    BP_CHECK(bad == 0, "%d replies out of order or wrong", bad);
    resp_reply_t *r = bp_pull(&bt_conn, e, sizeof e, "g", "deep", "COUNT", "1000", NULL);
    BP_REQUIRE(r != NULL, "%s", e);
    BP_CHECK(r->count == 1000, "PULL COUNT 1000 after %d SENDs: %zu", N / 2, r->count);
    for (size_t i = 0; i < r->count; i++) {
        rc_msg_t m;
        BP_REQUIRE(rc_msg_at(r, i, &m, e, sizeof e) == 0, "%s", e);
        char p[32];
        snprintf(p, sizeof p, "%zu", 2 * i + 1);
        if (m.payload_len != strlen(p) || memcmp(m.payload, p, m.payload_len) != 0) {
            BP_CHECK(0, "message %zu has payload '%.*s', want '%s' (order lost)", i, (int)m.payload_len, m.payload, p);
            break;
        }
    }
    resp_reply_free(r);
}

/* 1 when CLIENT LIST (asked on the bystander) shows a client with this " addr=… " field, -1 on an error. */
static int client_listed(const char *addr_field)
{
    resp_reply_t *r = rc_cmd(&bt_conn, "CLIENT", "LIST", NULL);
    int listed =
        r == NULL || r->type != RESP_REPLY_BULK ? -1 : memmem(r->str, r->len, addr_field, strlen(addr_field)) != NULL;
    resp_reply_free(r);
    return listed;
}

/* An HTTP request line alone (no reply before it, nothing after it) leaves
 * nothing unread: its connection is closed at once, not lingered until its
 * client's EOF or 1 s (the bytes the broker parsed in that read are not
 * counted as unread). The bystander's CLIENT LIST shows it gone. */
static void test_http_alone_closed_at_once(void)
{
    bt_start(NULL);
    int fd = tu_tcp_connect(bt_broker.port);
    BP_REQUIRE(fd >= 0, "connect: %s", strerror(errno));
    struct sockaddr_in me;
    socklen_t len = sizeof me;
    BP_REQUIRE(getsockname(fd, (struct sockaddr *)&me, &len) == 0, "getsockname: %s", strerror(errno));
    char addr[64];
    snprintf(addr, sizeof addr, " addr=127.0.0.1:%d ", ntohs(me.sin_port));
    uint64_t end = tu_now_mono_ms() + 10000;
    while (client_listed(addr) == 0 && tu_now_mono_ms() < end) {
    }
    BP_REQUIRE(client_listed(addr) == 1, "the client%sis not in CLIENT LIST", addr);
    static const char req[] = "POST / HTTP/1.1\r\n";
    BP_REQUIRE(send(fd, req, sizeof req - 1, MSG_NOSIGNAL) == (ssize_t)(sizeof req - 1), "send: %s", strerror(errno));
    uint64_t sent = tu_now_mono_ms();
    end = sent + 10000;
    while (client_listed(addr) == 1 && tu_now_mono_ms() < end) {
    }
    uint64_t took = tu_now_mono_ms() - sent;
    BP_CHECK(client_listed(addr) == 0, "the HTTP client is still connected 10 s after its request");
    BP_CHECK(took < 700, "the HTTP client was closed %" PRIu64 " ms after its request, lingering with nothing unread",
             took);
    close(fd);
    bystander_ok("an HTTP request alone");
}

/* Poll the broker's log for text (generous deadline: the log is written by another process). */
static int log_shows(const char *text)
{
    uint64_t end = tu_now_mono_ms() + 10000;
    while (!bp_log_contains(&bt_broker, text)) {
        if (tu_now_mono_ms() >= end)
            return 0;
        struct timespec ts = { 0, 20 * 1000 * 1000 };
        nanosleep(&ts, NULL);
    }
    return 1;
}

/* Send raw bytes on a fresh connection and expect it closed with no reply at all. */
static void expect_http_closed(const char *name, const char *bytes)
{
    char e[1024];
    rc_conn_t x;
    BP_REQUIRE(bp_connect(&bt_broker, &x, e, sizeof e) == 0, "%s: connect: %s", name, e);
    rc_append_raw(&x, bytes, strlen(bytes));
    (void)rc_flush(&x, 10000); /* may be cut short: the broker closes at the first line */
    BP_CHECK(rc_read_to_eof(&x, 10000) == 1, "%s: the broker did not close the connection", name);
    BP_CHECK(rc_pending_input(&x) == 0, "%s: the broker answered %zu bytes ('%.*s'), want none", name,
             rc_pending_input(&x), (int)(rc_pending_input(&x) > 80 ? 80 : rc_pending_input(&x)), rc_input(&x));
    rc_close(&x);
}

/* What a browser's form POST (or curl --data-binary) sends to the RESP port:
 * the body would be inline commands. The connection is closed at "POST", so
 * neither GROUP DEL nor SHUTDOWN runs; the other HTTP shapes likewise. */
static void test_http_cross_protocol(void)
{
    bt_start(NULL);
    char e[1024], req[1024];
    BP_REQUIRE(bp_ok_cmd(&bt_conn, e, sizeof e, "GROUP", "CREATE", "victim", "orders", NULL) == 0, "%s", e);
    const char body[] = "GROUP DEL victim\r\nSHUTDOWN\r\n";
    snprintf(req, sizeof req,
             "POST / HTTP/1.1\r\nHost: 127.0.0.1:%d\r\nUser-Agent: curl/8.5.0\r\nAccept: */*\r\n"
             "Content-Length: %zu\r\nContent-Type: application/x-www-form-urlencoded\r\n\r\n%s",
             bt_broker.port, sizeof body - 1, body);
    expect_http_closed("curl POST", req);
    BP_CHECK(log_shows("possible cross-protocol attack (HTTP) from 127.0.0.1:"), "no warning in the log");
    long long v = -1;
    BP_CHECK(bp_group_field(&bt_conn, "victim", "backlog", &v, e, sizeof e) == 1,
             "group victim is gone after the HTTP POST: %s", e);
    rc_conn_t fresh;
    BP_REQUIRE(bp_connect(&bt_broker, &fresh, e, sizeof e) == 0, "a new connection after the POST: %s", e);
    resp_reply_t *r = rc_cmd(&fresh, "PING", NULL);
    BP_CHECK(r != NULL && rc_str_eq(r, "PONG"), "PING on a new connection: %s",
             r == NULL ? fresh.err : rc_describe(r, e, sizeof e));
    resp_reply_free(r);
    rc_close(&fresh);

    /* the other shapes, each with a command after it that must not run */
    const char *const first[] = {
        "GET / HTTP/1.1\r\nGROUP DEL victim\r\n",
        "get /index.html HTTP/1.0\r\nGROUP DEL victim\r\n",
        "PUT /x HTTP/1.1\r\nGROUP DEL victim\r\n",
        "HEAD / HTTP/1.1\r\nGROUP DEL victim\r\n",
        "DELETE /x HTTP/1.1\r\nGROUP DEL victim\r\n",
        "OPTIONS * HTTP/1.1\r\nGROUP DEL victim\r\n",
        "CONNECT h:1 HTTP/1.1\r\nGROUP DEL victim\r\n",
        "host: x\r\nGROUP DEL victim\r\n",
        /* POST and Host: at any position, in any form (as Redis) */
        "PING\r\npost / HTTP/1.1\r\nGROUP DEL victim\r\n",
        "*1\r\n$4\r\nPING\r\nHOST: x\r\nGROUP DEL victim\r\n",
        "*2\r\n$4\r\nPOST\r\n$1\r\n/\r\nGROUP DEL victim\r\n",
    };
    for (size_t i = 0; i < sizeof first / sizeof first[0]; i++) {
        char name[64];
        snprintf(name, sizeof name, "case %zu (%.12s...)", i, first[i]);
        rc_conn_t x;
        BP_REQUIRE(bp_connect(&bt_broker, &x, e, sizeof e) == 0, "%s: connect: %s", name, e);
        rc_append_raw(&x, first[i], strlen(first[i]));
        (void)rc_flush(&x, 10000);
        BP_CHECK(rc_read_to_eof(&x, 10000) == 1, "%s: the broker did not close the connection", name);
        /* a PING before the POST/Host: line is answered, nothing after it */
        const char *want = strstr(first[i], "PING") != NULL ? "+PONG\r\n" : "";
        BP_CHECK(rc_pending_input(&x) == strlen(want) && memcmp(rc_input(&x), want, strlen(want)) == 0,
                 "%s: the broker answered '%.*s', want '%s'", name, (int)rc_pending_input(&x), rc_input(&x), want);
        rc_close(&x);
        v = -1;
        BP_CHECK(bp_group_field(&bt_conn, "victim", "backlog", &v, e, sizeof e) == 1, "%s deleted the group: %s", name,
                 e);
    }
    /* GET with a key (not a path) is the message lookup (it wants an id) and a later PUT an
     * ordinary unknown command: errors, connection kept */
    r = rc_cmd(&bt_conn, "GET", "key", NULL);
    BP_CHECK(rc_is_error(r, "ERR invalid message id 'key'"), "GET key: %s", rc_describe(r, e, sizeof e));
    resp_reply_free(r);
    const char later[] = "PUT /x HTTP/1.1\r\n";
    rc_append_raw(&bt_conn, later, sizeof later - 1);
    BP_REQUIRE(rc_flush(&bt_conn, 0) == 0, "%s", bt_conn.err);
    r = rc_read(&bt_conn, 0);
    BP_CHECK(rc_is_error(r, "ERR unknown command"), "a later inline PUT: %s", rc_describe(r, e, sizeof e));
    resp_reply_free(r);
    bystander_ok("the HTTP requests");
}

/* Ids are exactly 16 hex digits: 15 (or 1) is refused, 17 too, upper case is fine. */
static void test_id_exactly_16(void)
{
    bt_start(NULL);
    char e[300];
    const char *const bad[] = { "000000000000001", "1", "2a", "00000000000000001", "0x00000000000001" };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char want[80];
        snprintf(want, sizeof want, "ERR invalid message id '%s' (16 hex digits)", bad[i]);
        resp_reply_t *r = rc_cmd(&bt_conn, "ACK", "g", bad[i], NULL);
        BP_CHECK(r != NULL && r->type == RESP_REPLY_ERROR && r->len == strlen(want) &&
                     memcmp(r->str, want, r->len) == 0,
                 "ACK g %s: %s, want '%s'", bad[i], rc_describe(r, e, sizeof e), want);
        resp_reply_free(r);
        r = rc_cmd(&bt_conn, "TOUCH", "g", bad[i], NULL);
        BP_CHECK(rc_is_error(r, want), "TOUCH g %s: %s", bad[i], rc_describe(r, e, sizeof e));
        resp_reply_free(r);
        r = rc_cmd(&bt_conn, "DLQ", "DROP", "g", bad[i], NULL);
        BP_CHECK(rc_is_error(r, want), "DLQ DROP g %s: %s", bad[i], rc_describe(r, e, sizeof e));
        resp_reply_free(r);
    }
    long long n = -1;
    BP_REQUIRE(bp_int_cmd(&bt_conn, &n, e, sizeof e, "ACK", "g", "000000000000001A", NULL) == 0,
               "ACK with 16 digits: %s", e);
    BP_CHECK(n == 0, "ACK of an unknown id released %lld", n);
}

/* HELLO ... SETNAME and CLIENT SETNAME share one rule and one error. */
static void test_setname_rule(void)
{
    bt_start(NULL);
    char e[300], d[4096];
    static const char *const why = "ERR Client names cannot contain spaces, newlines or special characters.";
    const char *const bad[] = { "a b", "a\rb", "a\nb", "a\tb", "a\x7f", "a\xc3\xa9" };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0] + 1; i++) {
        const char *argv[4] = { "HELLO", "2", "SETNAME", NULL };
        size_t lens[4] = { 5, 1, 7, 0 };
        if (i < sizeof bad / sizeof bad[0]) {
            argv[3] = bad[i];
            lens[3] = strlen(bad[i]);
        } else {
            argv[3] = "a\0b"; /* an embedded NUL */
            lens[3] = 3;
        }
        resp_reply_t *r = rc_cmdv(&bt_conn, 4, argv, lens);
        BP_CHECK(rc_is_error(r, why), "HELLO 2 SETNAME case %zu: %s", i, rc_describe(r, e, sizeof e));
        resp_reply_free(r);
        const char *cargv[3] = { "CLIENT", "SETNAME", argv[3] };
        size_t clens[3] = { 6, 7, lens[3] };
        r = rc_cmdv(&bt_conn, 3, cargv, clens);
        BP_CHECK(rc_is_error(r, why), "CLIENT SETNAME case %zu: %s", i, rc_describe(r, e, sizeof e));
        resp_reply_free(r);
    }
    char longname[200];
    memset(longname, 'n', sizeof longname - 1);
    longname[sizeof longname - 1] = '\0';
    resp_reply_t *r = rc_cmd(&bt_conn, "HELLO", "2", "SETNAME", longname, NULL);
    BP_CHECK(rc_is_error(r, "ERR client name longer than 127 bytes"), "HELLO SETNAME of 199 bytes: %s",
             rc_describe(r, e, sizeof e));
    resp_reply_free(r);
    r = rc_cmd(&bt_conn, "CLIENT", "INFO", NULL);
    BP_CHECK(r != NULL && r->type == RESP_REPLY_BULK && memmem(r->str, r->len, "name= ", 6) != NULL,
             "a refused name was set: %s", r == NULL ? bt_conn.err : rc_describe(r, d, sizeof d));
    resp_reply_free(r);
    r = rc_cmd(&bt_conn, "HELLO", "2", "SETNAME", "order-svc:7", NULL);
    BP_CHECK(r != NULL && r->type == RESP_REPLY_ARRAY, "HELLO 2 SETNAME order-svc:7: %s", rc_describe(r, e, sizeof e));
    resp_reply_free(r);
    r = rc_cmd(&bt_conn, "CLIENT", "LIST", NULL);
    BP_CHECK(r != NULL && r->type == RESP_REPLY_BULK && memmem(r->str, r->len, "name=order-svc:7 ", 17) != NULL,
             "CLIENT LIST after HELLO SETNAME: %.*s", r == NULL ? 0 : (int)r->len, r == NULL ? "" : r->str);
    resp_reply_free(r);
}

static const tu_test_t hostile_tests[] = {
    { "malformed requests: error, close, others unharmed", test_malformed_requests },
    { "random garbage does not hurt", test_random_garbage },
    { "a client that stops reading is disconnected", test_slow_reader_disconnected },
    { "a closing connection lingers at most 1 s however its client writes", test_linger_bounded_for_a_writer },
    { "unknown command, arity, payload limit, inline, QUIT", test_command_errors },
    { "every command found by its name in any case, and only by it", test_command_lookup },
    { "max-clients", test_max_clients },
    { "idle-timeout closes idle clients, not blocked ones", test_idle_timeout },
    { "idle-timeout counts from the last reply written", test_idle_timeout_counts_from_the_reply },
    { "CLIENT INFO after a pause shows its client idle 0 s", test_client_info_idle_after_a_pause },
    { "HELLO 3 (RESP3) and back", test_hello3 },
    { "5000 pipelined commands answered in order", test_deep_pipeline },
    { "an HTTP request is closed unexecuted (cross-protocol guard)", test_http_cross_protocol },
    { "an HTTP request alone is closed at once, not lingered", test_http_alone_closed_at_once },
    { "message ids are exactly 16 hex digits", test_id_exactly_16 },
    { "HELLO SETNAME and CLIENT SETNAME: one name rule", test_setname_rule },
    { "bad arguments: one error naming the problem and the value", test_argument_errors },
    { "a nested MULTI dooms the transaction", test_nested_multi_dooms },
    { NULL, NULL },
};

int main(int argc, char **argv)
{
    return bt_main(argc, argv, "hostile", hostile_tests);
}
