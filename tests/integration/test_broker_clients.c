/*
 * tests/integration/test_broker_clients.c — what real Redis client libraries
 * send when they connect, replayed byte for byte against hourglass-broker.
 *
 * Each handshake below was captured between the library and the broker (a
 * logging TCP proxy; docs/protocol.md, "Client libraries", lists the
 * versions): the bytes go out in the writes the library made, pipelined as it
 * pipelines them, and every reply must be the one that library accepts — an
 * error only where the library ignores it (node-redis 5's CLIENT
 * MAINT_NOTIFICATIONS) or recognises its text (ioredis's AUTH without users).
 * After the handshake the connection must still serve a PING: a handshake
 * that closes or hangs the connection fails here, within the read timeout.
 *
 * One broker per test: plain, then with a users file (AUTH before anything
 * but PING, HELLO and QUIT), then the CLIENT SETINFO those libraries send:
 * kept and shown by CLIENT LIST / INFO, anything but LIB-NAME / LIB-VER with
 * a printable value refused. Main thread only (the CUnit fixture of
 * tests/helpers/broker_test.h).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/helpers/broker_test.h"
#include "tests/helpers/testutil.h"
#include "tests/helpers/users_file.h"

#define MAX_REPLIES 8

/* A reply as the library needs it: "+X" a status X; "-X" an error starting
 * with X; "$" any bulk, "$X" the bulk X; "*N" an array of N; "%" a map
 * (RESP3); "text:X" a bulk or verbatim string holding X (INFO). */
typedef struct handshake {
    const char *client; /* library and version, as captured */
    const char *bytes;  /* what it wrote on connect */
    size_t len;
    const char *replies[MAX_REPLIES]; /* NULL-terminated */
} handshake_t;

#define WIRE(s) s, sizeof(s) - 1

/* A broker without users. */
static const handshake_t plain_handshakes[] = {
    { "redis-py 4.3.4, client_name", WIRE("*3\r\n$6\r\nCLIENT\r\n$7\r\nSETNAME\r\n$9\r\npy-worker\r\n"), { "+OK" } },
    { "node-redis 4.7.1 (@redis/client 1.6.1)",
      WIRE("*4\r\n$6\r\nCLIENT\r\n$7\r\nSETINFO\r\n$8\r\nLIB-NAME\r\n$10\r\nnode-redis\r\n"
           "*4\r\n$6\r\nCLIENT\r\n$7\r\nSETINFO\r\n$7\r\nLIB-VER\r\n$5\r\n1.6.0\r\n"),
      { "+OK", "+OK" } },
    { "node-redis 4.7.1, name",
      WIRE("*3\r\n$6\r\nCLIENT\r\n$7\r\nSETNAME\r\n$9\r\nnr-worker\r\n"
           "*4\r\n$6\r\nCLIENT\r\n$7\r\nSETINFO\r\n$8\r\nLIB-NAME\r\n$10\r\nnode-redis\r\n"
           "*4\r\n$6\r\nCLIENT\r\n$7\r\nSETINFO\r\n$7\r\nLIB-VER\r\n$5\r\n1.6.0\r\n"),
      { "+OK", "+OK", "+OK" } },
    { "node-redis 5.12.4 (RESP2: HELLO 2)",
      WIRE("*2\r\n$5\r\nHELLO\r\n$1\r\n2\r\n"
           "*4\r\n$6\r\nCLIENT\r\n$7\r\nSETINFO\r\n$7\r\nLIB-VER\r\n$6\r\n5.12.4\r\n"
           "*4\r\n$6\r\nCLIENT\r\n$7\r\nSETINFO\r\n$8\r\nLIB-NAME\r\n$10\r\nnode-redis\r\n"),
      { "*18", "+OK", "+OK" } },
    { "node-redis 5.12.4, RESP: 3, name",
      WIRE("*4\r\n$5\r\nHELLO\r\n$1\r\n3\r\n$7\r\nSETNAME\r\n$9\r\nnr-worker\r\n"
           "*4\r\n$6\r\nCLIENT\r\n$7\r\nSETINFO\r\n$7\r\nLIB-VER\r\n$6\r\n5.12.4\r\n"
           "*4\r\n$6\r\nCLIENT\r\n$7\r\nSETINFO\r\n$8\r\nLIB-NAME\r\n$10\r\nnode-redis\r\n"
           "*5\r\n$6\r\nCLIENT\r\n$19\r\nMAINT_NOTIFICATIONS\r\n$2\r\nON\r\n$20\r\nmoving-endpoint-type\r\n"
           "$11\r\nexternal-ip\r\n"),
      /* node-redis ignores the error (maintNotifications 'auto'), as it does Redis before 8.2's */
      { "%", "+OK", "+OK", "-ERR unknown subcommand" } },
    { "ioredis 5.11.1 (ready check: INFO)",
      WIRE("*4\r\n$6\r\nclient\r\n$7\r\nSETINFO\r\n$8\r\nLIB-NAME\r\n$7\r\nioredis\r\n"
           "*4\r\n$6\r\nclient\r\n$7\r\nSETINFO\r\n$7\r\nLIB-VER\r\n$6\r\n5.11.1\r\n"
           "*1\r\n$4\r\ninfo\r\n"),
      { "+OK", "+OK", "text:redis_version:" } },
    { "ioredis 5.11.1, connectionName",
      WIRE("*3\r\n$6\r\nclient\r\n$7\r\nsetname\r\n$9\r\nio-worker\r\n"
           "*4\r\n$6\r\nclient\r\n$7\r\nSETINFO\r\n$8\r\nLIB-NAME\r\n$7\r\nioredis\r\n"
           "*4\r\n$6\r\nclient\r\n$7\r\nSETINFO\r\n$7\r\nLIB-VER\r\n$6\r\n5.11.1\r\n"
           "*1\r\n$4\r\ninfo\r\n"),
      { "+OK", "+OK", "+OK", "text:redis_version:" } },
    /* A password where none is needed: ioredis warns and goes on only when the
     * error says what Redis says; anything else makes it reconnect forever. */
    { "ioredis 5.11.1, password but no users",
      WIRE("*2\r\n$4\r\nauth\r\n$6\r\nsecret\r\n"
           "*4\r\n$6\r\nclient\r\n$7\r\nSETINFO\r\n$8\r\nLIB-NAME\r\n$7\r\nioredis\r\n"),
      { "-ERR AUTH called without any users configured (see users-file), so without any password configured for "
        "the default user",
        "+OK" } },
    { "ioredis 6.1.0 (RESP3 by default), connectionName",
      WIRE("*2\r\n$5\r\nhello\r\n$1\r\n3\r\n"
           "*3\r\n$6\r\nclient\r\n$7\r\nsetname\r\n$9\r\nio-worker\r\n"
           "*4\r\n$6\r\nclient\r\n$7\r\nSETINFO\r\n$7\r\nLIB-VER\r\n$5\r\n6.1.0\r\n"
           "*4\r\n$6\r\nclient\r\n$7\r\nSETINFO\r\n$8\r\nLIB-NAME\r\n$7\r\nioredis\r\n"
           "*5\r\n$6\r\nclient\r\n$19\r\nMAINT_NOTIFICATIONS\r\n$2\r\nON\r\n$20\r\nmoving-endpoint-type\r\n"
           "$11\r\ninternal-ip\r\n"
           "*1\r\n$4\r\ninfo\r\n"),
      { "%", "+OK", "+OK", "+OK", "-ERR unknown subcommand", "text:redis_version:" } },
    /* Redis's default user without a password takes any: ioredis 6 sends HELLO 3 AUTH default, and on this
     * error's text warns, stays on RESP2 and goes on. */
    { "ioredis 6.1.0, password but no users",
      WIRE("*5\r\n$5\r\nhello\r\n$1\r\n3\r\n$4\r\nAUTH\r\n$7\r\ndefault\r\n$6\r\nsecret\r\n"
           "*4\r\n$6\r\nclient\r\n$7\r\nSETINFO\r\n$7\r\nLIB-VER\r\n$5\r\n6.1.0\r\n"
           "*1\r\n$4\r\ninfo\r\n"),
      { "-ERR AUTH called without any users configured (see users-file), so without any password configured for "
        "the default user",
        "+OK", "text:redis_version:" } },
    { "redis-cli 7.0.15 -3 (interactive: hints from COMMAND DOCS)",
      WIRE("*2\r\n$5\r\nHELLO\r\n$1\r\n3\r\n"
           "*2\r\n$7\r\nCOMMAND\r\n$4\r\nDOCS\r\n"),
      { "%", "%" } },
    { "redis-cli 7.0.15 --pipe (inline commands, an empty line, then its ECHO marker)",
      WIRE("SEND t-pipe a\r\nSEND t-pipe b\r\nPING\r\n\r\n"
           "*2\r\n$4\r\nECHO\r\n$20\r\n\xd2\xafh\x9a\xc0*^\xefl6\x93+tQP\xee"
           "a\x0e$,\r\n"),
      { "$", "$", "+PONG",
        "$\xd2\xafh\x9a\xc0*^\xefl6\x93+tQP\xee"
        "a\x0e$," } },
    { "hiredis 0.14.1 (sends nothing on connect): a binary payload",
      WIRE("*3\r\n$4\r\nSEND\r\n$4\r\nt-hi\r\n$7\r\nbin\0ary\r\n"),
      { "$" } },
};

/* A broker with a users file: shop (producer) and ops (admin). */
static const handshake_t users_handshakes[] = {
    { "redis-py 4.3.4, username, password, client_name (one write each)",
      WIRE("*3\r\n$4\r\nAUTH\r\n$4\r\nshop\r\n$7\r\npw-shop\r\n"
           "*3\r\n$6\r\nCLIENT\r\n$7\r\nSETNAME\r\n$7\r\nshopper\r\n"),
      { "+OK", "+OK" } },
    { "node-redis 4.7.1, redis://shop:…@, name",
      WIRE("*3\r\n$4\r\nAUTH\r\n$4\r\nshop\r\n$7\r\npw-shop\r\n"
           "*3\r\n$6\r\nCLIENT\r\n$7\r\nSETNAME\r\n$7\r\nnr-shop\r\n"
           "*4\r\n$6\r\nCLIENT\r\n$7\r\nSETINFO\r\n$8\r\nLIB-NAME\r\n$10\r\nnode-redis\r\n"
           "*4\r\n$6\r\nCLIENT\r\n$7\r\nSETINFO\r\n$7\r\nLIB-VER\r\n$5\r\n1.6.0\r\n"),
      { "+OK", "+OK", "+OK", "+OK" } },
    { "node-redis 5.12.4, RESP: 3, redis://shop:…@, name",
      WIRE("*7\r\n$5\r\nHELLO\r\n$1\r\n3\r\n$4\r\nAUTH\r\n$4\r\nshop\r\n$7\r\npw-shop\r\n$7\r\nSETNAME\r\n$7\r\nnr-"
           "shop\r\n"
           "*4\r\n$6\r\nCLIENT\r\n$7\r\nSETINFO\r\n$7\r\nLIB-VER\r\n$6\r\n5.12.4\r\n"
           "*4\r\n$6\r\nCLIENT\r\n$7\r\nSETINFO\r\n$8\r\nLIB-NAME\r\n$10\r\nnode-redis\r\n"),
      { "%", "+OK", "+OK" } },
    { "node-redis 5.12.4 (RESP2), redis://shop:…@",
      WIRE("*5\r\n$5\r\nHELLO\r\n$1\r\n2\r\n$4\r\nAUTH\r\n$4\r\nshop\r\n$7\r\npw-shop\r\n"),
      { "*18" } },
    { "ioredis 5.11.1, username, password, connectionName (INFO as a producer)",
      WIRE("*3\r\n$4\r\nauth\r\n$4\r\nshop\r\n$7\r\npw-shop\r\n"
           "*3\r\n$6\r\nclient\r\n$7\r\nsetname\r\n$7\r\nio-shop\r\n"
           "*4\r\n$6\r\nclient\r\n$7\r\nSETINFO\r\n$8\r\nLIB-NAME\r\n$7\r\nioredis\r\n"
           "*4\r\n$6\r\nclient\r\n$7\r\nSETINFO\r\n$7\r\nLIB-VER\r\n$6\r\n5.11.1\r\n"
           "*1\r\n$4\r\ninfo\r\n"),
      { "+OK", "+OK", "+OK", "+OK", "text:redis_version:" } },
    { "ioredis 6.1.0, username, password, connectionName",
      WIRE("*5\r\n$5\r\nhello\r\n$1\r\n3\r\n$4\r\nAUTH\r\n$4\r\nshop\r\n$7\r\npw-shop\r\n"
           "*3\r\n$6\r\nclient\r\n$7\r\nsetname\r\n$7\r\nio-shop\r\n"
           "*4\r\n$6\r\nclient\r\n$7\r\nSETINFO\r\n$7\r\nLIB-VER\r\n$5\r\n6.1.0\r\n"
           "*4\r\n$6\r\nclient\r\n$7\r\nSETINFO\r\n$8\r\nLIB-NAME\r\n$7\r\nioredis\r\n"
           "*1\r\n$4\r\ninfo\r\n"),
      { "%", "+OK", "+OK", "+OK", "text:redis_version:" } },
    { "redis-cli 7.0.15 -3 -u redis://ops:…@",
      WIRE("*3\r\n$4\r\nAUTH\r\n$3\r\nops\r\n$6\r\npw-ops\r\n"
           "*2\r\n$5\r\nHELLO\r\n$1\r\n3\r\n"),
      { "+OK", "%" } },
    { "hiredis 0.14.1, AUTH then a pipeline",
      WIRE("*3\r\n$4\r\nAUTH\r\n$4\r\nshop\r\n$7\r\npw-shop\r\n"
           "*3\r\n$4\r\nSEND\r\n$4\r\nt-hi\r\n$2\r\np0\r\n*3\r\n$4\r\nSEND\r\n$4\r\nt-hi\r\n$2\r\np1\r\n"),
      { "+OK", "$", "$" } },
};

/* 1 when r is what want describes (see handshake_t). */
static int reply_matches(const resp_reply_t *r, const char *want)
{
    size_t n = strlen(want + 1);
    switch (want[0]) {
    case '+':
        return r->type == RESP_REPLY_STATUS && strcmp(r->str, want + 1) == 0;
    case '-':
        return rc_is_error(r, want + 1);
    case '$':
        return r->type == RESP_REPLY_BULK && (n == 0 || (r->len == n && memcmp(r->str, want + 1, n) == 0));
    case '*':
        return r->type == RESP_REPLY_ARRAY && (n == 0 || r->count == (size_t)atoi(want + 1));
    case '%':
        return r->type == RESP_REPLY_MAP;
    default:
        if (strncmp(want, "text:", 5) == 0) {
            return (r->type == RESP_REPLY_BULK || r->type == RESP_REPLY_VERBATIM) && r->str != NULL &&
                   strstr(r->str, want + 5) != NULL;
        }
        return 0;
    }
}

/* Replay h on a new connection; check each reply, then a PING. */
static void replay(const handshake_t *h)
{
    rc_conn_t c;
    char e[1024];
    BP_REQUIRE(bp_connect(&bt_broker, &c, e, sizeof e) == 0, "%s: connect: %s", h->client, e);
    rc_append_raw(&c, h->bytes, h->len);
    BP_REQUIRE(rc_flush(&c, 0) == 0, "%s: write: %s", h->client, c.err);
    for (size_t i = 0; i < MAX_REPLIES && h->replies[i] != NULL; i++) {
        resp_reply_t *r = rc_read(&c, 0);
        BP_CHECK(r != NULL, "%s: reply %zu: none (%s), want %s", h->client, i + 1, c.err, h->replies[i]);
        if (r == NULL) {
            rc_close(&c);
            return;
        }
        BP_CHECK(reply_matches(r, h->replies[i]), "%s: reply %zu is %s, want %.60s", h->client, i + 1,
                 rc_describe(r, e, sizeof e), h->replies[i]);
        resp_reply_free(r);
    }
    resp_reply_t *r = rc_cmd(&c, "PING", NULL);
    BP_CHECK(r != NULL && (rc_str_eq(r, "PONG")), "%s: PING after the handshake: %s", h->client,
             r ? rc_describe(r, e, sizeof e) : c.err);
    resp_reply_free(r);
    rc_close(&c);
}

static void test_plain(void)
{
    bt_start(NULL);
    for (size_t i = 0; i < sizeof plain_handshakes / sizeof plain_handshakes[0]; i++) {
        replay(&plain_handshakes[i]);
    }
}

static void test_users(void)
{
    static const tu_user_t users[] = { { "shop", "producer", "pw-shop" }, { "ops", "admin", "pw-ops" } };
    char dir[512], path[600], err[512];
    TU_REQUIRE(tu_mkdtemp("hg-clients", dir, sizeof dir) == 0, "temp dir");
    snprintf(path, sizeof path, "%s/users", dir);
    TU_REQUIRE(tu_write_users_file(path, users, 2, err, sizeof err) == 0, "%s", err);
    const char *extra[] = { "--users-file", path, NULL };
    bt_start(extra);
    for (size_t i = 0; i < sizeof users_handshakes / sizeof users_handshakes[0]; i++) {
        replay(&users_handshakes[i]);
    }
    tu_rmtree(dir);
}

/* The value of field= in a CLIENT LIST / CLIENT INFO line into out ("" when
 * it is there empty); -1 when the line has no such field. */
static int client_field(const char *line, const char *field, char *out, size_t outlen)
{
    char key[64];
    out[0] = '\0';
    snprintf(key, sizeof key, " %s=", field);
    const char *p = strstr(line, key);
    if (p == NULL) {
        return -1;
    }
    p += strlen(key);
    size_t n = strcspn(p, " \r\n");
    snprintf(out, outlen, "%.*s", (int)n, p);
    return 0;
}

/* CLIENT SETINFO attr value on c: check the reply is an error starting with want_error, or
 * (want_error NULL) +OK. */
static void expect_setinfo(rc_conn_t *c, const char *attr, const char *value, const char *want_error)
{
    char e[512];
    resp_reply_t *r = rc_cmd(c, "CLIENT", "SETINFO", attr, value, NULL);
    if (want_error == NULL) {
        BP_CHECK(r != NULL && rc_str_eq(r, "OK"), "CLIENT SETINFO %s '%s': %s, want +OK", attr, value,
                 r ? rc_describe(r, e, sizeof e) : c->err);
    } else {
        BP_CHECK(r != NULL && rc_is_error(r, want_error), "CLIENT SETINFO %s '%s': %s, want an error starting '%s'",
                 attr, value, r ? rc_describe(r, e, sizeof e) : c->err, want_error);
    }
    resp_reply_free(r);
}

/* CLIENT INFO's field on c into out; requires the reply and the field. */
static void client_info_field(rc_conn_t *c, const char *field, char *out, size_t outlen)
{
    char e[512];
    resp_reply_t *r = rc_cmd(c, "CLIENT", "INFO", NULL);
    BP_REQUIRE(r != NULL && r->str != NULL, "CLIENT INFO: %s", r ? rc_describe(r, e, sizeof e) : c->err);
    BP_CHECK(client_field(r->str, field, out, outlen) == 0, "CLIENT INFO has no %s=: %s", field, r->str);
    resp_reply_free(r);
}

static void test_setinfo(void)
{
    bt_start(NULL);
    char v[128];
    client_info_field(&bt_conn, "lib-name", v, sizeof v);
    BP_CHECK(strcmp(v, "") == 0, "lib-name before SETINFO: '%s', want empty", v);
    expect_setinfo(&bt_conn, "LIB-NAME", "go-redis(,go1.21.0)", NULL);
    expect_setinfo(&bt_conn, "lib-ver", "9.5.1", NULL);
    client_info_field(&bt_conn, "lib-name", v, sizeof v);
    BP_CHECK(strcmp(v, "go-redis(,go1.21.0)") == 0, "lib-name: '%s'", v);
    client_info_field(&bt_conn, "lib-ver", v, sizeof v);
    BP_CHECK(strcmp(v, "9.5.1") == 0, "lib-ver: '%s'", v);

    /* Refused, naming the problem; the value set before stays. */
    expect_setinfo(&bt_conn, "LIB-COLOUR", "blue", "ERR Unrecognized option 'LIB-COLOUR' for CLIENT SETINFO");
    expect_setinfo(&bt_conn, "LIB-NAME", "two words", "ERR lib-name cannot contain spaces");
    expect_setinfo(&bt_conn, "LIB-VER", "1\n2", "ERR lib-ver cannot contain spaces");
    char longer[80];
    memset(longer, 'x', sizeof longer - 1);
    longer[sizeof longer - 1] = '\0';
    expect_setinfo(&bt_conn, "LIB-NAME", longer, "ERR lib-name is 79 bytes, longer than 63");
    client_info_field(&bt_conn, "lib-name", v, sizeof v);
    BP_CHECK(strcmp(v, "go-redis(,go1.21.0)") == 0, "lib-name after the refusals: '%s'", v);

    /* CLIENT LIST shows each connection's own; an empty value clears it. */
    rc_conn_t other;
    char e[512];
    BP_REQUIRE(bp_connect(&bt_broker, &other, e, sizeof e) == 0, "connect: %s", e);
    expect_setinfo(&other, "LIB-NAME", "redis-py", NULL);
    expect_setinfo(&bt_conn, "LIB-NAME", "", NULL);
    resp_reply_t *r = rc_cmd(&bt_conn, "CLIENT", "LIST", NULL);
    BP_REQUIRE(r != NULL && r->str != NULL, "CLIENT LIST: %s", r ? rc_describe(r, e, sizeof e) : bt_conn.err);
    int lines = 0, py = 0, empty = 0;
    for (const char *line = r->str; *line; line = strchr(line, '\n') ? strchr(line, '\n') + 1 : line + strlen(line)) {
        lines++;
        if (client_field(line, "lib-name", v, sizeof v) == 0) {
            py += strcmp(v, "redis-py") == 0;
            empty += strcmp(v, "") == 0;
        }
    }
    BP_CHECK(lines == 2 && py == 1 && empty == 1, "CLIENT LIST: %d lines, %d lib-name=redis-py, %d empty: %s", lines,
             py, empty, r->str);
    resp_reply_free(r);
    rc_close(&other);
}

static const tu_test_t client_tests[] = {
    { "without users: each client library's connect handshake gets replies it accepts", test_plain },
    { "with users: each client library's AUTH handshake gets replies it accepts", test_users },
    { "CLIENT SETINFO: LIB-NAME and LIB-VER shown by CLIENT INFO and LIST; anything else refused naming it",
      test_setinfo },
    { NULL, NULL },
};

int main(int argc, char **argv)
{
    return bt_main(argc, argv, "clients", client_tests);
}
