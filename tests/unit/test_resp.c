/*
 * tests/unit/test_resp.c — unit tests for the RESP codec in proto/.
 *
 * One suite per file of the codec:
 *   request  (server, proto/request.h) the incremental request parser: both
 *            forms, binary data, pipelining, every split point, every limit
 *            at and one past, Redis's error messages, and that declared
 *            lengths allocate nothing (checked through resp_parser_buffered).
 *   writer   (server, proto/reply.h) every reply writer, byte for byte, in
 *            RESP2 and RESP3.
 *   client   (client, proto/client.h) resp_add_command, and the reply
 *            parser: every type, round trips of writer output, NEED_MORE for
 *            every proper prefix, errors and limits.
 *
 * Pure logic: no files, no sockets. Randomised cases use a fixed seed.
 */
#include "proto/client.h"
#include "proto/reply.h"
#include "proto/request.h"
#include "tests/helpers/resp_transcript.h"
#include "tests/helpers/testutil.h"

#include <CUnit/CUnit.h>
#include <limits.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------------------
 * Helpers
 * ------------------------------------------------------------------------ */

/* Write an escaped, truncated rendering of bytes for failure messages. */
static void escape_bytes(char *dst, size_t dstlen, const char *s, size_t n)
{
    size_t k = 0;
    for (size_t i = 0; i < n && k + 8 < dstlen; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c == '\r')
            k += (size_t)snprintf(dst + k, dstlen - k, "\\r");
        else if (c == '\n')
            k += (size_t)snprintf(dst + k, dstlen - k, "\\n");
        else if (c < 0x20 || c >= 0x7f)
            k += (size_t)snprintf(dst + k, dstlen - k, "\\x%02x", c);
        else
            dst[k++] = (char)c;
    }
    dst[k] = '\0';
}

/* Assert got[0..gotlen) == want[0..wantlen), printing both when not. */
static void check_bytes(const char *got, size_t gotlen, const char *want, size_t wantlen, unsigned line)
{
    char msg[700], g[300], w[300];
    int ok = gotlen == wantlen && (wantlen == 0 || memcmp(got, want, wantlen) == 0);
    escape_bytes(g, sizeof g, got ? got : "", got ? gotlen : 0);
    escape_bytes(w, sizeof w, want, wantlen);
    snprintf(msg, sizeof msg, "bytes differ: got \"%s\" (%zu), want \"%s\" (%zu)", g, gotlen, w, wantlen);
    CU_assertImplementation(ok ? CU_TRUE : CU_FALSE, line, ok ? "bytes equal" : msg, __FILE__, "", CU_FALSE);
}

#define CHECK_BYTES(got, gotlen, lit) check_bytes((got), (gotlen), (lit), sizeof(lit) - 1, __LINE__)
#define CHECK_BUF(b, lit)             check_bytes((b)->raw.data, (b)->raw.len, (lit), sizeof(lit) - 1, __LINE__)
#define CHECK_RAW(b, lit)             check_bytes((b)->data, (b)->len, (lit), sizeof(lit) - 1, __LINE__)
#define CHECK_ARG(cmd, i, lit)        check_bytes((cmd).argv[i].ptr, (cmd).argv[i].len, (lit), sizeof(lit) - 1, __LINE__)

/* Feed data in chunks of chunk bytes (0: all at once), collecting every
 * command into t. Checks the feed contract on the way (consumed bounds,
 * NUL after every argument). Returns RESP_OK when the stream ended between
 * commands, RESP_NEED_MORE when it ended inside one, or the error; err gets
 * the parser's message. */
static resp_status_t parse_stream(const char *data, size_t len, size_t chunk, const resp_limits_t *limits, buf_t *t,
                                  char *err, size_t errlen)
{
    resp_parser_t p;
    resp_status_t st = RESP_NEED_MORE;
    size_t off = 0;

    resp_parser_init(&p, limits);
    if (chunk == 0)
        chunk = len ? len : 1;
    while (off < len && st >= 0) {
        size_t n = len - off < chunk ? len - off : chunk;
        const char *b = data + off;
        off += n;
        while (n > 0) {
            size_t used = 0;
            resp_command_t cmd;
            st = resp_parser_feed(&p, b, n, &used, &cmd);
            CU_ASSERT(used <= n);
            if (st == RESP_OK) {
                CU_ASSERT(cmd.argc >= 1);
                for (size_t i = 0; i < cmd.argc; i++)
                    CU_ASSERT(cmd.argv[i].ptr[cmd.argv[i].len] == '\0');
                resp_transcript_add(t, &cmd);
            } else if (st == RESP_NEED_MORE) {
                CU_ASSERT_EQUAL(used, n);
            } else {
                break;
            }
            b += used;
            n -= used;
        }
    }
    if (st >= 0)
        st = resp_parser_in_command(&p) ? RESP_NEED_MORE : RESP_OK;
    if (err != NULL)
        snprintf(err, errlen, "%s", resp_parser_error(&p));
    resp_parser_free(&p);
    return st;
}

/* Parse text (one or more commands) in one go with limits; return the
 * status as parse_stream does, and the message. */
static resp_status_t parse_text(const char *data, size_t len, const resp_limits_t *limits, char *err, size_t errlen)
{
    buf_t t = BUF_INIT;
    resp_status_t st = parse_stream(data, len, 0, limits, &t, err, errlen);
    buf_free(&t);
    return st;
}

/* Feed exactly one command from a literal; assert it parsed, using all bytes. */
static resp_status_t feed_one(resp_parser_t *p, const char *data, size_t len, resp_command_t *cmd)
{
    size_t used = 0;
    resp_status_t st = resp_parser_feed(p, data, len, &used, cmd);
    if (st == RESP_OK)
        CU_ASSERT_EQUAL(used, len);
    return st;
}

#define FEED_ONE(p, lit, cmd) feed_one((p), (lit), sizeof(lit) - 1, (cmd))

/* Tiny deterministic generator (xorshift64*). */
static uint64_t rng_state = 0x9E3779B97F4A7C15ULL;
static uint64_t rng(void)
{
    rng_state ^= rng_state >> 12;
    rng_state ^= rng_state << 25;
    rng_state ^= rng_state >> 27;
    return rng_state * 2685821657736338717ULL;
}

/* ------------------------------------------------------------------------
 * Request parser
 * ------------------------------------------------------------------------ */

static void test_request_multibulk(void)
{
    static const char in[] = "*3\r\n$4\r\nSEND\r\n$5\r\ntopic\r\n$7\r\npayload\r\n";
    resp_parser_t p;
    resp_command_t cmd;

    resp_parser_init(&p, NULL);
    CU_ASSERT_EQUAL_FATAL(FEED_ONE(&p, in, &cmd), RESP_OK);
    CU_ASSERT_EQUAL(cmd.argc, 3);
    CU_ASSERT_EQUAL(cmd.is_inline, 0);
    CU_ASSERT_EQUAL(cmd.wire_len, sizeof in - 1);
    CHECK_ARG(cmd, 0, "SEND");
    CHECK_ARG(cmd, 1, "topic");
    CHECK_ARG(cmd, 2, "payload");
    CU_ASSERT_STRING_EQUAL(resp_parser_error(&p), "");
    CU_ASSERT_EQUAL(resp_parser_in_command(&p), 0);
    resp_parser_free(&p);
}

static void test_request_inline(void)
{
    resp_parser_t p;
    resp_command_t cmd;

    resp_parser_init(&p, NULL);
    CU_ASSERT_EQUAL_FATAL(FEED_ONE(&p, "PING\r\n", &cmd), RESP_OK);
    CU_ASSERT_EQUAL(cmd.argc, 1);
    CU_ASSERT_EQUAL(cmd.is_inline, 1);
    CU_ASSERT_EQUAL(cmd.wire_len, 6);
    CHECK_ARG(cmd, 0, "PING");

    /* a bare "\n" ends a line too; runs of blanks and tabs separate */
    CU_ASSERT_EQUAL_FATAL(FEED_ONE(&p, "  SEND\t topic   payload  \n", &cmd), RESP_OK);
    CU_ASSERT_EQUAL(cmd.argc, 3);
    CHECK_ARG(cmd, 0, "SEND");
    CHECK_ARG(cmd, 1, "topic");
    CHECK_ARG(cmd, 2, "payload");

    /* a NUL byte is an ordinary character */
    CU_ASSERT_EQUAL_FATAL(FEED_ONE(&p, "ECHO a\0b\r\n", &cmd), RESP_OK);
    CU_ASSERT_EQUAL(cmd.argc, 2);
    CHECK_ARG(cmd, 1, "a\0b");
    resp_parser_free(&p);
}

static void test_request_inline_quotes(void)
{
    resp_parser_t p;
    resp_command_t cmd;

    resp_parser_init(&p, NULL);
    CU_ASSERT_EQUAL_FATAL(FEED_ONE(&p, "SET \"a b\" 'c d' \"\\x41\\n\\\"\\t\\\\\" 'it\\'s' \"\" x\"y z\"\r\n", &cmd),
                          RESP_OK);
    CU_ASSERT_EQUAL_FATAL(cmd.argc, 7);
    CHECK_ARG(cmd, 0, "SET");
    CHECK_ARG(cmd, 1, "a b");
    CHECK_ARG(cmd, 2, "c d");
    CHECK_ARG(cmd, 3, "A\n\"\t\\");
    CHECK_ARG(cmd, 4, "it's");
    CHECK_ARG(cmd, 5, "");
    CHECK_ARG(cmd, 6, "xy z");
    /* \x with non-hex digits is an ordinary escape of 'x' */
    CU_ASSERT_EQUAL_FATAL(FEED_ONE(&p, "E \"\\xZZ\"\n", &cmd), RESP_OK);
    CHECK_ARG(cmd, 1, "xZZ");
    resp_parser_free(&p);
}

static void test_request_inline_unbalanced(void)
{
    static const char *bad[] = {
        "SET \"abc\r\n",                       /* unterminated double quote */
        "SET 'abc\r\n",                        /* unterminated single quote */
        "SET \"a\"b\r\n",                      /* closing quote followed by a non-blank */
        "SET 'a'b\r\n",   "SET \"abc\\\"\r\n", /* escaped quote does not close */
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char err[200];
        CU_ASSERT_EQUAL(parse_text(bad[i], strlen(bad[i]), NULL, err, sizeof err), RESP_ERR_PROTOCOL);
        CU_ASSERT_STRING_EQUAL(err, "Protocol error: unbalanced quotes in request");
    }
}

static void test_request_blank_lines_skipped(void)
{
    static const char in[] = "\r\n\n   \r\n\t\nPING\r\n\r\n";
    resp_parser_t p;
    resp_command_t cmd;
    size_t used = 0;

    resp_parser_init(&p, NULL);
    CU_ASSERT_EQUAL_FATAL(resp_parser_feed(&p, in, sizeof in - 1, &used, &cmd), RESP_OK);
    CU_ASSERT_EQUAL(cmd.argc, 1);
    CHECK_ARG(cmd, 0, "PING");
    CU_ASSERT_EQUAL(used, sizeof in - 3);
    CU_ASSERT_EQUAL(resp_parser_feed(&p, in + used, sizeof in - 1 - used, &used, &cmd), RESP_NEED_MORE);
    CU_ASSERT_EQUAL(used, 2);
    CU_ASSERT_EQUAL(resp_parser_in_command(&p), 0);
    resp_parser_free(&p);
}

static void test_request_binary_bulk(void)
{
    static const char in[] = "*2\r\n$4\r\nECHO\r\n$9\r\na\0b\r\nc\r\n\0\r\n";
    resp_parser_t p;
    resp_command_t cmd;

    resp_parser_init(&p, NULL);
    CU_ASSERT_EQUAL_FATAL(FEED_ONE(&p, in, &cmd), RESP_OK);
    CU_ASSERT_EQUAL_FATAL(cmd.argc, 2);
    CHECK_ARG(cmd, 1, "a\0b\r\nc\r\n\0");
    CU_ASSERT_EQUAL(cmd.argv[1].ptr[9], '\0');
    resp_parser_free(&p);
}

static void test_request_zero_length_bulk(void)
{
    resp_parser_t p;
    resp_command_t cmd;

    resp_parser_init(&p, NULL);
    CU_ASSERT_EQUAL_FATAL(FEED_ONE(&p, "*3\r\n$0\r\n\r\n$4\r\nECHO\r\n$0\r\n\r\n", &cmd), RESP_OK);
    CU_ASSERT_EQUAL_FATAL(cmd.argc, 3);
    CU_ASSERT_EQUAL(cmd.argv[0].len, 0);
    CU_ASSERT_PTR_NOT_NULL(cmd.argv[0].ptr);
    CU_ASSERT_EQUAL(cmd.argv[0].ptr[0], '\0');
    CHECK_ARG(cmd, 1, "ECHO");
    CU_ASSERT_EQUAL(cmd.argv[2].len, 0);
    CU_ASSERT_PTR_NOT_NULL(cmd.argv[2].ptr);
    resp_parser_free(&p);
}

static void test_request_pipelined(void)
{
    static const char in[] = "*1\r\n$4\r\nPING\r\nECHO hi\r\n*2\r\n$3\r\nGET\r\n$1\r\nk\r\n*1\r\n$4\r\nPI";
    resp_parser_t p;
    resp_command_t cmd;
    size_t used = 0, off = 0;

    resp_parser_init(&p, NULL);
    CU_ASSERT_EQUAL_FATAL(resp_parser_feed(&p, in, sizeof in - 1, &used, &cmd), RESP_OK);
    CU_ASSERT_EQUAL(used, 14);
    CHECK_ARG(cmd, 0, "PING");
    off += used;
    CU_ASSERT_EQUAL_FATAL(resp_parser_feed(&p, in + off, sizeof in - 1 - off, &used, &cmd), RESP_OK);
    CU_ASSERT_EQUAL(used, 9);
    CU_ASSERT_EQUAL(cmd.is_inline, 1);
    CHECK_ARG(cmd, 1, "hi");
    off += used;
    CU_ASSERT_EQUAL_FATAL(resp_parser_feed(&p, in + off, sizeof in - 1 - off, &used, &cmd), RESP_OK);
    CU_ASSERT_EQUAL(cmd.argc, 2);
    CHECK_ARG(cmd, 0, "GET");
    CHECK_ARG(cmd, 1, "k");
    off += used;
    CU_ASSERT_EQUAL(resp_parser_feed(&p, in + off, sizeof in - 1 - off, &used, &cmd), RESP_NEED_MORE);
    CU_ASSERT_EQUAL(off + used, sizeof in - 1);
    CU_ASSERT_EQUAL(resp_parser_in_command(&p), 1);
    CU_ASSERT_EQUAL_FATAL(FEED_ONE(&p, "NG\r\n", &cmd), RESP_OK);
    CHECK_ARG(cmd, 0, "PING");
    CU_ASSERT_EQUAL(cmd.wire_len, 14);
    resp_parser_free(&p);
}

/* A stream exercising every form; parsed whole, one byte at a time, in every
 * chunk size, and split in two at every position, the transcripts agree. */
static const char split_stream[] = "*3\r\n$4\r\nSEND\r\n$5\r\norder\r\n$12\r\nx\0y\r\nz\r\n\r\n\0!\r\n"
                                   "PING\r\n"
                                   "\r\n  \n"
                                   "*0\r\n*-1\r\n"
                                   "*2\r\n$4\r\nECHO\r\n$0\r\n\r\n"
                                   "SET \"a b\" 'c'\n"
                                   "*1\r\n$26\r\nabcdefghijklmnopqrstuvwxyz\r\n"
                                   "ECHO x\n";

static void test_request_split_every_byte(void)
{
    size_t len = sizeof split_stream - 1;
    buf_t whole = BUF_INIT;
    resp_status_t st;

    st = parse_stream(split_stream, len, 0, NULL, &whole, NULL, 0);
    CU_ASSERT_EQUAL_FATAL(st, RESP_OK);
    CHECK_RAW(&whole, "3m|4:SEND|5:order|12:x\0y\r\nz\r\n\r\n\0!\n"
                      "1i|4:PING\n"
                      "2m|4:ECHO|0:\n"
                      "3i|3:SET|3:a b|1:c\n"
                      "1m|26:abcdefghijklmnopqrstuvwxyz\n"
                      "2i|4:ECHO|1:x\n");

    for (size_t chunk = 1; chunk <= len; chunk++) {
        buf_t t = BUF_INIT;
        st = parse_stream(split_stream, len, chunk, NULL, &t, NULL, 0);
        CU_ASSERT_EQUAL(st, RESP_OK);
        check_bytes(t.data, t.len, whole.data, whole.len, __LINE__);
        buf_free(&t);
    }
    buf_free(&whole);
}

static void test_request_split_two_pieces(void)
{
    size_t len = sizeof split_stream - 1;
    buf_t whole = BUF_INIT;

    CU_ASSERT_EQUAL_FATAL(parse_stream(split_stream, len, 0, NULL, &whole, NULL, 0), RESP_OK);
    for (size_t cut = 0; cut <= len; cut++) {
        resp_parser_t p;
        buf_t t = BUF_INIT;
        const char *pieces[2] = { split_stream, split_stream + cut };
        size_t lens[2] = { cut, len - cut };

        resp_parser_init(&p, NULL);
        for (int k = 0; k < 2; k++) {
            const char *b = pieces[k];
            size_t n = lens[k], used;
            resp_command_t cmd;
            while (n > 0) {
                resp_status_t st = resp_parser_feed(&p, b, n, &used, &cmd);
                CU_ASSERT_FATAL(st >= 0);
                if (st == RESP_OK)
                    resp_transcript_add(&t, &cmd);
                b += used;
                n -= used;
            }
        }
        check_bytes(t.data, t.len, whole.data, whole.len, __LINE__);
        buf_free(&t);
        resp_parser_free(&p);
    }
    buf_free(&whole);
}

static void test_request_empty_multibulk_skipped(void)
{
    static const char in[] = "*0\r\n*-1\r\n*0\r\n*1\r\n$4\r\nPING\r\n";
    resp_parser_t p;
    resp_command_t cmd;
    size_t used;

    resp_parser_init(&p, NULL);
    CU_ASSERT_EQUAL_FATAL(resp_parser_feed(&p, in, sizeof in - 1, &used, &cmd), RESP_OK);
    CU_ASSERT_EQUAL(used, sizeof in - 1);
    CU_ASSERT_EQUAL(cmd.argc, 1);
    CHECK_ARG(cmd, 0, "PING");
    /* wire_len counts the command itself, not what was skipped before it */
    CU_ASSERT_EQUAL(cmd.wire_len, 14);
    CU_ASSERT_EQUAL(resp_parser_feed(&p, "*0\r\n", 4, &used, &cmd), RESP_NEED_MORE);
    CU_ASSERT_EQUAL(used, 4);
    CU_ASSERT_EQUAL(resp_parser_in_command(&p), 0);
    resp_parser_free(&p);
}

struct bad_case {
    const char *in;
    size_t len;
    resp_status_t status;
    const char *msg;
};
#define BAD(lit, st, msg)             \
    {                                 \
        lit, sizeof(lit) - 1, st, msg \
    }

/* Each case is fed whole (a header line that arrived whole takes the fast
 * path) and a byte at a time (the byte-at-a-time path): both must give the
 * same status and message. */
static void run_bad_cases(const struct bad_case *cases, size_t n, const resp_limits_t *limits)
{
    for (size_t i = 0; i < n; i++) {
        for (size_t chunk = 0; chunk <= 1; chunk++) {
            char err[200];
            buf_t t = BUF_INIT;
            resp_status_t st = parse_stream(cases[i].in, cases[i].len, chunk, limits, &t, err, sizeof err);
            char where[400], esc[120];
            buf_free(&t);
            escape_bytes(esc, sizeof esc, cases[i].in, cases[i].len);
            snprintf(where, sizeof where, "case \"%s\" fed %s: status %d, message \"%s\"", esc,
                     chunk ? "a byte at a time" : "whole", st, err);
            CU_assertImplementation(st == cases[i].status && strcmp(err, cases[i].msg) == 0 ? CU_TRUE : CU_FALSE,
                                    __LINE__, where, __FILE__, "", CU_FALSE);
        }
    }
}

static void test_request_bad_multibulk_length(void)
{
    static const char *m = "Protocol error: invalid multibulk length";
    const struct bad_case cases[] = {
        BAD("*-2\r\n", RESP_ERR_PROTOCOL, m),
        BAD("*-100\r\n", RESP_ERR_PROTOCOL, m),
        BAD("*abc\r\n", RESP_ERR_PROTOCOL, m),
        BAD("*\r\n", RESP_ERR_PROTOCOL, m),
        BAD("*01\r\n", RESP_ERR_PROTOCOL, m),
        BAD("*-0\r\n", RESP_ERR_PROTOCOL, m),
        BAD("*+1\r\n", RESP_ERR_PROTOCOL, m),
        BAD("*1 \r\n", RESP_ERR_PROTOCOL, m),
        BAD("*1-\r\n", RESP_ERR_PROTOCOL, m),
        BAD("*1\rX", RESP_ERR_PROTOCOL, m),
        BAD("*1\n", RESP_ERR_PROTOCOL, m),
        BAD("*9223372036854775808\r\n", RESP_ERR_PROTOCOL, m), /* overflows a long long */
        BAD("*123456789012345678901", RESP_ERR_PROTOCOL, m),   /* 21 digits: refused at once */
    };
    run_bad_cases(cases, sizeof cases / sizeof cases[0], NULL);
}

static void test_request_bad_bulk_length(void)
{
    static const char *m = "Protocol error: invalid bulk length";
    const struct bad_case cases[] = {
        BAD("*1\r\n$-1\r\n", RESP_ERR_PROTOCOL, m), /* no null bulk in a request */
        BAD("*1\r\n$-2\r\n", RESP_ERR_PROTOCOL, m),
        BAD("*1\r\n$abc\r\n", RESP_ERR_PROTOCOL, m),
        BAD("*1\r\n$\r\n", RESP_ERR_PROTOCOL, m),
        BAD("*1\r\n$01\r\n", RESP_ERR_PROTOCOL, m),
        BAD("*1\r\n$1x\r\n", RESP_ERR_PROTOCOL, m),
        BAD("*1\r\n$1\rX", RESP_ERR_PROTOCOL, m),
        BAD("*1\r\n$99999999999999999999\r\n", RESP_ERR_PROTOCOL, m),
        BAD("*1\r\n$+3\r\n", RESP_ERR_PROTOCOL, m),
        BAD("*1\r\n$-0\r\n", RESP_ERR_PROTOCOL, m),
        BAD("*1\r\n$ 3\r\n", RESP_ERR_PROTOCOL, m),
        BAD("*1\r\n$9223372036854775808\r\n", RESP_ERR_PROTOCOL, m),   /* overflows a long long */
        BAD("*1\r\n$123456789012345678901\r\n", RESP_ERR_PROTOCOL, m), /* 21 digits */
        BAD("*1\r\nPING\r\n", RESP_ERR_PROTOCOL, "Protocol error: expected '$', got 'P'"),
        BAD("*2\r\n$1\r\na\r\n:1\r\n", RESP_ERR_PROTOCOL, "Protocol error: expected '$', got ':'"),
        BAD("*1\r\n\x01", RESP_ERR_PROTOCOL, "Protocol error: expected '$', got '\\x01'"),
        BAD("*1\r\n\r\n", RESP_ERR_PROTOCOL, "Protocol error: expected '$', got '\\x0d'"),
        BAD("*1\r\n$3\r\nabcd\r\n", RESP_ERR_PROTOCOL, "Protocol error: bulk data not followed by CRLF"),
        BAD("*1\r\n$3\r\nabc\rX", RESP_ERR_PROTOCOL, "Protocol error: bulk data not followed by CRLF"),
        BAD("*1\r\n$0\r\n\n", RESP_ERR_PROTOCOL, "Protocol error: bulk data not followed by CRLF"),
    };
    run_bad_cases(cases, sizeof cases / sizeof cases[0], NULL);
}

/* Bytes the parser consumed from data[0..len) up to its error, fed in chunks
 * of chunk bytes (0: whole). */
static size_t consumed_to_error(const char *data, size_t len, size_t chunk, const resp_limits_t *limits)
{
    resp_parser_t p;
    size_t off = 0;

    resp_parser_init(&p, limits);
    if (chunk == 0)
        chunk = len;
    while (off < len) {
        size_t used = 0, n = len - off < chunk ? len - off : chunk;
        resp_command_t cmd;
        resp_status_t st = resp_parser_feed(&p, data + off, n, &used, &cmd);
        off += used;
        if (st < 0)
            break;
    }
    resp_parser_free(&p);
    return off;
}

/* Arguments that arrived whole take the fast path (take_whole_arguments);
 * one it would refuse — at the first argument or a later one — is left to
 * the byte-at-a-time path, which names the error: fed whole or a byte at a
 * time, the same status, message and bytes consumed. */
static void test_request_whole_arguments_refused_alike(void)
{
    const resp_limits_t lim = { .max_bulk = 10, .max_query = 40 };
    const struct bad_case cases[] = {
        BAD("*2\r\n$1\r\na\r\n$11\r\n01234567890\r\n", RESP_ERR_LIMIT,
            "Protocol error: bulk length 11 exceeds the limit of 10 bytes (max-bulk)"),
        BAD("*1\r\n$11\r\n01234567890\r\n", RESP_ERR_LIMIT,
            "Protocol error: bulk length 11 exceeds the limit of 10 bytes (max-bulk)"),
        BAD("*3\r\n$10\r\n0123456789\r\n$10\r\n0123456789\r\n$1\r\nx\r\n", RESP_ERR_LIMIT,
            "Protocol error: command of at least 45 bytes exceeds the limit of 40 bytes (max-query)"),
        BAD("*2\r\n$1\r\na\r\n$3\r\nabcd\r\n", RESP_ERR_PROTOCOL, "Protocol error: bulk data not followed by CRLF"),
        BAD("*2\r\n$1\r\na\r\n$3\r\nabc\n\r", RESP_ERR_PROTOCOL, "Protocol error: bulk data not followed by CRLF"),
        BAD("*2\r\n$1\r\na\r\n$3\r\nabc\rX\r\n", RESP_ERR_PROTOCOL, "Protocol error: bulk data not followed by CRLF"),
        BAD("*2\r\n$1\r\na\r\n$01\r\nb\r\n", RESP_ERR_PROTOCOL, "Protocol error: invalid bulk length"),
        BAD("*2\r\n$1\r\na\r\n$-1\r\n\r\n", RESP_ERR_PROTOCOL, "Protocol error: invalid bulk length"),
        BAD("*2\r\n$1\r\na\r\n$1-\r\nb\r\n", RESP_ERR_PROTOCOL, "Protocol error: invalid bulk length"),
        BAD("*2\r\n$1\r\na\r\n:1\r\n", RESP_ERR_PROTOCOL, "Protocol error: expected '$', got ':'"),
        BAD("*1\r\n$1\r\na\r\n*2\r\n$0\r\n\r\n$2\r\nb\r\n", RESP_ERR_PROTOCOL,
            "Protocol error: bulk data not followed by CRLF"),
    };
    run_bad_cases(cases, sizeof cases / sizeof cases[0], &lim);
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        CU_ASSERT_EQUAL(consumed_to_error(cases[i].in, cases[i].len, 0, &lim),
                        consumed_to_error(cases[i].in, cases[i].len, 1, &lim));

    /* and what the fast path takes counts as the byte-at-a-time path counts */
    static const char ok[] = "*3\r\n$0\r\n\r\n$10\r\n0123456789\r\n$3\r\na\0c\r\n";
    resp_parser_t p;
    resp_command_t cmd;
    resp_parser_init(&p, &lim);
    CU_ASSERT_EQUAL_FATAL(FEED_ONE(&p, ok, &cmd), RESP_OK);
    CU_ASSERT_EQUAL(cmd.wire_len, sizeof ok - 1);
    CU_ASSERT_EQUAL_FATAL(cmd.argc, 3);
    CHECK_ARG(cmd, 0, "");
    CHECK_ARG(cmd, 1, "0123456789");
    CHECK_ARG(cmd, 2, "a\0c");
    resp_parser_free(&p);
}

static void test_request_limit_args(void)
{
    resp_limits_t lim = { .max_args = 4 };
    buf_t t = BUF_INIT;
    char err[200];
    static const char at[] = "*4\r\n$1\r\na\r\n$1\r\nb\r\n$1\r\nc\r\n$1\r\nd\r\n";

    CU_ASSERT_EQUAL(parse_stream(at, sizeof at - 1, 0, &lim, &t, err, sizeof err), RESP_OK);
    CHECK_RAW(&t, "4m|1:a|1:b|1:c|1:d\n");
    buf_free(&t);
    CU_ASSERT_EQUAL(parse_stream("a b c d\r\n", 9, 0, &lim, &t, err, sizeof err), RESP_OK);
    CHECK_RAW(&t, "4i|1:a|1:b|1:c|1:d\n");
    buf_free(&t);

    /* one past: refused at the header, before any argument arrives */
    CU_ASSERT_EQUAL(parse_text("*5\r\n", 4, &lim, err, sizeof err), RESP_ERR_LIMIT);
    CU_ASSERT_STRING_EQUAL(err, "Protocol error: 5 arguments exceed the limit of 4 (max-args)");
    CU_ASSERT_EQUAL(parse_text("a b c d e\r\n", 11, &lim, err, sizeof err), RESP_ERR_LIMIT);
    CU_ASSERT_STRING_EQUAL(err, "Protocol error: 5 arguments exceed the limit of 4 (max-args)");
}

static void test_request_limit_bulk(void)
{
    resp_limits_t lim = { .max_bulk = 10 };
    buf_t t = BUF_INIT;
    char err[200];

    CU_ASSERT_EQUAL(parse_stream("*1\r\n$10\r\n0123456789\r\n", 21, 0, &lim, &t, err, sizeof err), RESP_OK);
    CHECK_RAW(&t, "1m|10:0123456789\n");
    buf_free(&t);
    CU_ASSERT_EQUAL(parse_text("*1\r\n$11\r\n", 9, &lim, err, sizeof err), RESP_ERR_LIMIT);
    CU_ASSERT_STRING_EQUAL(err, "Protocol error: bulk length 11 exceeds the limit of 10 bytes (max-bulk)");
}

static void test_request_limit_inline(void)
{
    resp_limits_t lim = { .max_inline = 16 };
    buf_t t = BUF_INIT;
    resp_parser_t p;
    resp_command_t cmd;
    char err[200];
    size_t used;

    /* 16 bytes before the '\n' is the most; a '\r' counts */
    CU_ASSERT_EQUAL(parse_stream("0123456789abcdef\n", 17, 0, &lim, &t, err, sizeof err), RESP_OK);
    CHECK_RAW(&t, "1i|16:0123456789abcdef\n");
    buf_free(&t);
    CU_ASSERT_EQUAL(parse_stream("0123456789abcde\r\n", 17, 0, &lim, &t, err, sizeof err), RESP_OK);
    CHECK_RAW(&t, "1i|15:0123456789abcde\n");
    buf_free(&t);
    CU_ASSERT_EQUAL(parse_text("0123456789abcdef\r\n", 18, &lim, err, sizeof err), RESP_ERR_LIMIT);
    CU_ASSERT_STRING_EQUAL(err, "Protocol error: too big inline request");

    /* without a newline, the 17th byte is refused the moment it arrives */
    resp_parser_init(&p, &lim);
    for (int i = 0; i < 16; i++)
        CU_ASSERT_EQUAL(resp_parser_feed(&p, "x", 1, &used, &cmd), RESP_NEED_MORE);
    CU_ASSERT_EQUAL(resp_parser_feed(&p, "x", 1, &used, &cmd), RESP_ERR_LIMIT);
    CU_ASSERT_STRING_EQUAL(resp_parser_error(&p), "Protocol error: too big inline request");
    CU_ASSERT(resp_parser_buffered(&p) < 1024);
    resp_parser_free(&p);
}

static void test_request_limit_query(void)
{
    static const char in[] = "*2\r\n$4\r\nECHO\r\n$5\r\nhello\r\n"; /* 25 bytes */
    resp_limits_t lim = { .max_query = sizeof in - 1 };
    buf_t t = BUF_INIT;
    char err[200];

    CU_ASSERT_EQUAL(parse_stream(in, sizeof in - 1, 0, &lim, &t, err, sizeof err), RESP_OK);
    CHECK_RAW(&t, "2m|4:ECHO|5:hello\n");
    buf_free(&t);

    lim.max_query = sizeof in - 2;
    /* refused at the last header: the declared length already tells */
    CU_ASSERT_EQUAL(parse_text(in, 19, &lim, err, sizeof err), RESP_ERR_LIMIT);
    CU_ASSERT_STRING_EQUAL(err,
                           "Protocol error: command of at least 25 bytes exceeds the limit of 24 bytes (max-query)");

    lim.max_query = 12;
    CU_ASSERT_EQUAL(parse_stream("ECHO hello\r\n", 12, 0, &lim, &t, err, sizeof err), RESP_OK);
    CHECK_RAW(&t, "2i|4:ECHO|5:hello\n");
    buf_free(&t);
    lim.max_query = 11;
    CU_ASSERT_EQUAL(parse_text("ECHO hello\r\n", 12, &lim, err, sizeof err), RESP_ERR_LIMIT);
    CU_ASSERT_STRING_EQUAL(err,
                           "Protocol error: command of at least 12 bytes exceeds the limit of 11 bytes (max-query)");
}

static void test_request_default_limits(void)
{
    resp_limits_t d;
    resp_parser_t p;
    resp_command_t cmd;
    size_t used;

    resp_limits_default(&d);
    CU_ASSERT_EQUAL(d.max_args, 65536);
    CU_ASSERT_EQUAL(d.max_bulk, 64u * 1024 * 1024);
    CU_ASSERT_EQUAL(d.max_inline, 64u * 1024);
    CU_ASSERT_EQUAL(d.max_query, 128u * 1024 * 1024);

    /* zero fields mean defaults */
    {
        resp_limits_t partial = { .max_args = 3 };
        resp_parser_init(&p, &partial);
        CU_ASSERT_EQUAL(p.limits.max_args, 3);
        CU_ASSERT_EQUAL(p.limits.max_bulk, RESP_DEFAULT_MAX_BULK);
        CU_ASSERT_EQUAL(p.limits.max_inline, RESP_DEFAULT_MAX_INLINE);
        CU_ASSERT_EQUAL(p.limits.max_query, RESP_DEFAULT_MAX_QUERY);
        resp_parser_free(&p);
    }

    /* a 1 GiB bulk header: refused, nothing allocated for it */
    resp_parser_init(&p, NULL);
    CU_ASSERT_EQUAL(resp_parser_feed(&p, "*1\r\n$1073741824\r\n", 18, &used, &cmd), RESP_ERR_LIMIT);
    CU_ASSERT_STRING_EQUAL(resp_parser_error(&p),
                           "Protocol error: bulk length 1073741824 exceeds the limit of 67108864 bytes (max-bulk)");
    CU_ASSERT_EQUAL(resp_parser_buffered(&p), 0);
    resp_parser_free(&p);

    /* a 10^6-argument header: refused, nothing allocated for it */
    resp_parser_init(&p, NULL);
    CU_ASSERT_EQUAL(resp_parser_feed(&p, "*1000000\r\n", 10, &used, &cmd), RESP_ERR_LIMIT);
    CU_ASSERT_STRING_EQUAL(resp_parser_error(&p),
                           "Protocol error: 1000000 arguments exceed the limit of 65536 (max-args)");
    CU_ASSERT_EQUAL(resp_parser_buffered(&p), 0);
    resp_parser_free(&p);
}

/* With limits raised out of the way, huge declared lengths still cost only
 * what actually arrived. */
static void test_request_no_allocation_on_declared_length(void)
{
    resp_limits_t big = { .max_args = 2000000000, .max_bulk = (size_t)4 << 30, .max_query = SIZE_MAX };
    resp_parser_t p;
    resp_command_t cmd;
    size_t used;
    char *chunk = malloc(100 * 1024);

    CU_ASSERT_PTR_NOT_NULL_FATAL(chunk);
    memset(chunk, 'x', 100 * 1024);

    resp_parser_init(&p, &big);
    CU_ASSERT_EQUAL(resp_parser_feed(&p, "*1000000000\r\n$1073741824\r\n", 26, &used, &cmd), RESP_NEED_MORE);
    CU_ASSERT_EQUAL(resp_parser_buffered(&p), 0);
    CU_ASSERT_EQUAL(resp_parser_feed(&p, chunk, 4096, &used, &cmd), RESP_NEED_MORE);
    CU_ASSERT(resp_parser_buffered(&p) <= 2 * 4097);
    CU_ASSERT_EQUAL(resp_parser_feed(&p, chunk, 100 * 1024, &used, &cmd), RESP_NEED_MORE);
    CU_ASSERT(resp_parser_buffered(&p) <= 2 * (4096 + 100 * 1024 + 1));
    CU_ASSERT_EQUAL(resp_parser_in_command(&p), 1);
    resp_parser_free(&p);

    /* 10^9 arguments declared, 10000 empty ones sent: argv grows with them */
    resp_parser_init(&p, &big);
    CU_ASSERT_EQUAL(resp_parser_feed(&p, "*1000000000\r\n", 13, &used, &cmd), RESP_NEED_MORE);
    CU_ASSERT_EQUAL(resp_parser_buffered(&p), 0);
    for (int i = 0; i < 10000; i++)
        CU_ASSERT_EQUAL(resp_parser_feed(&p, "$0\r\n\r\n", 6, &used, &cmd), RESP_NEED_MORE);
    CU_ASSERT(resp_parser_buffered(&p) > 0);
    CU_ASSERT(resp_parser_buffered(&p) <= 2 * 10000 * (sizeof(resp_arg_t) + 1));
    resp_parser_free(&p);
    free(chunk);
}

static void test_request_dead_after_error(void)
{
    resp_parser_t p;
    resp_command_t cmd;
    size_t used = 99;

    resp_parser_init(&p, NULL);
    CU_ASSERT_EQUAL(resp_parser_feed(&p, "*1\r\nx", 5, &used, &cmd), RESP_ERR_PROTOCOL);
    CU_ASSERT_EQUAL(used, 5);
    CU_ASSERT_STRING_EQUAL(resp_parser_error(&p), "Protocol error: expected '$', got 'x'");
    CU_ASSERT_EQUAL(resp_parser_in_command(&p), 0);
    CU_ASSERT_EQUAL(resp_parser_feed(&p, "PING\r\n", 6, &used, &cmd), RESP_ERR_PROTOCOL);
    CU_ASSERT_EQUAL(used, 0);
    CU_ASSERT_STRING_EQUAL(resp_parser_error(&p), "Protocol error: expected '$', got 'x'");

    /* reset brings it back */
    resp_parser_reset(&p);
    CU_ASSERT_STRING_EQUAL(resp_parser_error(&p), "");
    CU_ASSERT_EQUAL_FATAL(FEED_ONE(&p, "PING\r\n", &cmd), RESP_OK);
    CHECK_ARG(cmd, 0, "PING");
    resp_parser_free(&p);
}

static void test_request_big_buffers_released(void)
{
    size_t n = 1024 * 1024;
    buf_t in = BUF_INIT;
    resp_parser_t p;
    resp_command_t cmd;
    char *payload = malloc(n);
    const char *argv[2] = { "SEND", payload };
    size_t lens[2] = { 4, n };

    CU_ASSERT_PTR_NOT_NULL_FATAL(payload);
    memset(payload, 'p', n);
    resp_add_command(&in, 2, argv, lens);
    resp_parser_init(&p, NULL);
    CU_ASSERT_EQUAL_FATAL(feed_one(&p, in.data, in.len, &cmd), RESP_OK);
    CU_ASSERT_EQUAL(cmd.argv[1].len, n);
    CU_ASSERT(memcmp(cmd.argv[1].ptr, payload, n) == 0);
    CU_ASSERT(resp_parser_buffered(&p) >= n);
    /* the whole bulk arrived at once: allocated to fit, not doubled */
    CU_ASSERT(resp_parser_buffered(&p) < n + 8192);
    CU_ASSERT_EQUAL_FATAL(FEED_ONE(&p, "PING\r\n", &cmd), RESP_OK);
    CU_ASSERT(resp_parser_buffered(&p) <= 64 * 1024 + 1024 * sizeof(resp_arg_t));
    resp_parser_free(&p);
    CU_ASSERT_EQUAL(resp_parser_buffered(&p), 0);
    resp_parser_free(&p); /* twice is fine */
    buf_free(&in);
    free(payload);
}

static void test_request_set_limits_live(void)
{
    resp_limits_t tight = { .max_args = 2 };
    resp_parser_t p;
    resp_command_t cmd;
    size_t used;

    resp_parser_init(&p, NULL);
    CU_ASSERT_EQUAL_FATAL(FEED_ONE(&p, "a b c\r\n", &cmd), RESP_OK);
    resp_parser_set_limits(&p, &tight);
    CU_ASSERT_EQUAL(resp_parser_feed(&p, "*3\r\n", 4, &used, &cmd), RESP_ERR_LIMIT);
    CU_ASSERT_STRING_EQUAL(resp_parser_error(&p), "Protocol error: 3 arguments exceed the limit of 2 (max-args)");
    resp_parser_free(&p);
}

/* Random binary commands, encoded by resp_add_command, parsed in random
 * chunk sizes, come out identical. */
static void test_request_roundtrip_random(void)
{
    buf_t wire = BUF_INIT, want = BUF_INIT, got = BUF_INIT;

    for (int c = 0; c < 300; c++) {
        size_t argc = 1 + rng() % 8;
        char bytes[8][64];
        const char *argv[8];
        size_t lens[8];
        resp_command_t fake;
        resp_arg_t args[8];

        for (size_t i = 0; i < argc; i++) {
            lens[i] = rng() % 64;
            for (size_t k = 0; k < lens[i]; k++) {
                static const char alphabet[] = "ab\r\n\0 $*\"'";
                bytes[i][k] = (rng() & 1) ? (char)(rng() & 0xff) : alphabet[rng() % (sizeof alphabet - 1)];
            }
            argv[i] = bytes[i];
            args[i].ptr = bytes[i];
            args[i].len = lens[i];
        }
        resp_add_command(&wire, argc, argv, lens);
        fake.argc = argc;
        fake.argv = args;
        fake.is_inline = 0;
        resp_transcript_add(&want, &fake);
    }
    for (int round = 0; round < 20; round++) {
        size_t off = 0;
        resp_parser_t p;
        resp_parser_init(&p, NULL);
        got.len = 0;
        while (off < wire.len) {
            size_t n = 1 + rng() % 200, used;
            const char *b = wire.data + off;
            if (n > wire.len - off)
                n = wire.len - off;
            off += n;
            while (n > 0) {
                resp_command_t cmd;
                resp_status_t st = resp_parser_feed(&p, b, n, &used, &cmd);
                CU_ASSERT_FATAL(st >= 0);
                if (st == RESP_OK)
                    resp_transcript_add(&got, &cmd);
                b += used;
                n -= used;
            }
        }
        check_bytes(got.data, got.len, want.data, want.len, __LINE__);
        resp_parser_free(&p);
    }
    buf_free(&wire);
    buf_free(&want);
    buf_free(&got);
}

/* ------------------------------------------------------------------------
 * Reply writer
 * ------------------------------------------------------------------------ */

static void test_writer_simple_and_error(void)
{
    resp_buf_t b = RESP_BUF_INIT;

    resp_add_simple(&b, "OK");
    CHECK_BUF(&b, "+OK\r\n");
    resp_buf_clear(&b);
    resp_add_simple(&b, "a\r\nb");
    CHECK_BUF(&b, "+a  b\r\n");
    resp_buf_clear(&b);

    resp_add_error(&b, "ERR unknown command");
    CHECK_BUF(&b, "-ERR unknown command\r\n");
    resp_buf_clear(&b);
    resp_add_error(&b, "-NOPERM no");
    CHECK_BUF(&b, "-NOPERM no\r\n");
    resp_buf_clear(&b);
    resp_add_error(&b, "");
    CHECK_BUF(&b, "-ERR\r\n");
    resp_buf_clear(&b);
    resp_add_error(&b, "-");
    CHECK_BUF(&b, "-ERR\r\n");
    resp_buf_clear(&b);
    resp_add_error(&b, "ERR a\r\nb\nc\rd");
    CHECK_BUF(&b, "-ERR a  b c d\r\n");
    resp_buf_clear(&b);
    resp_add_error_len(&b, "BUSY xyz", 6);
    CHECK_BUF(&b, "-BUSY x\r\n");
    resp_buf_free(&b);
}

static void test_writer_errorf(void)
{
    resp_buf_t b = RESP_BUF_INIT;
    char big[1001];

    resp_add_errorf(&b, "ERR unknown command '%s', with args beginning with: %d", "FOO", 2);
    CHECK_BUF(&b, "-ERR unknown command 'FOO', with args beginning with: 2\r\n");
    resp_buf_clear(&b);
    resp_add_errorf(&b, "ERR bad name '%s'", "x\r\n-ERR injected");
    CHECK_BUF(&b, "-ERR bad name 'x  -ERR injected'\r\n");
    resp_buf_clear(&b);

    memset(big, 'x', 1000);
    big[1000] = '\0';
    resp_add_errorf(&b, "ERR %s", big);
    CU_ASSERT_EQUAL(b.raw.len, 1 + 4 + 1000 + 2);
    CU_ASSERT(memcmp(b.raw.data, "-ERR xxx", 8) == 0);
    CU_ASSERT(memcmp(b.raw.data + b.raw.len - 3, "x\r\n", 3) == 0);
    resp_buf_free(&b);
}

static void test_writer_scalars(void)
{
    resp_buf_t b = RESP_BUF_INIT;

    resp_add_int(&b, 0);
    resp_add_int(&b, 42);
    resp_add_int(&b, -1);
    resp_add_int(&b, LLONG_MAX);
    resp_add_int(&b, LLONG_MIN);
    CHECK_BUF(&b, ":0\r\n:42\r\n:-1\r\n:9223372036854775807\r\n:-9223372036854775808\r\n");
    resp_buf_clear(&b);

    resp_add_bulk(&b, "hello", 5);
    resp_add_bulk(&b, "a\0\r\nb", 5);
    resp_add_bulk(&b, NULL, 0);
    resp_add_bulk_str(&b, "xy");
    CHECK_BUF(&b, "$5\r\nhello\r\n$5\r\na\0\r\nb\r\n$0\r\n\r\n$2\r\nxy\r\n");
    resp_buf_free(&b);
}

static void test_writer_resp2_vs_resp3(void)
{
    resp_buf_t b2 = RESP_BUF_INIT, b3 = RESP_BUF_INIT;

    b3.proto = RESP_PROTO_3;
    for (int k = 0; k < 2; k++) {
        resp_buf_t *b = k ? &b3 : &b2;
        resp_add_null(b);
        resp_add_null_array(b);
        resp_add_array(b, 3);
        resp_add_array(b, 0);
        resp_add_map(b, 2);
        resp_add_set(b, 3);
        resp_add_bool(b, 1);
        resp_add_bool(b, 0);
        resp_add_verbatim(b, "txt", "hello", 5);
        resp_add_verbatim(b, "toolong", "x", 1);
    }
    CHECK_BUF(&b2, "$-1\r\n*-1\r\n*3\r\n*0\r\n*4\r\n*3\r\n:1\r\n:0\r\n$5\r\nhello\r\n$1\r\nx\r\n");
    CHECK_BUF(&b3, "_\r\n_\r\n*3\r\n*0\r\n%2\r\n~3\r\n#t\r\n#f\r\n=9\r\ntxt:hello\r\n=5\r\ntxt:x\r\n");
    resp_buf_free(&b2);
    resp_buf_free(&b3);
}

static void test_writer_double(void)
{
    resp_buf_t b = RESP_BUF_INIT;

    b.proto = RESP_PROTO_3;
    resp_add_double(&b, 1.5);
    resp_add_double(&b, 0.1);
    resp_add_double(&b, 0);
    resp_add_double(&b, -0.0);
    resp_add_double(&b, 1e300);
    resp_add_double(&b, INFINITY);
    resp_add_double(&b, -INFINITY);
    resp_add_double(&b, NAN);
    resp_add_double(&b, 1.0 / 3);
    CHECK_BUF(&b, ",1.5\r\n,0.1\r\n,0\r\n,-0\r\n,1e+300\r\n,inf\r\n,-inf\r\n,nan\r\n,0.3333333333333333\r\n");
    resp_buf_clear(&b);
    b.proto = RESP_PROTO_2;
    resp_add_double(&b, 1.5);
    resp_add_double(&b, -INFINITY);
    CHECK_BUF(&b, "$3\r\n1.5\r\n$4\r\n-inf\r\n");

    /* random doubles read back exactly through the reply parser */
    b.proto = RESP_PROTO_3;
    for (int i = 0; i < 1000; i++) {
        uint64_t bits = rng();
        double d;
        resp_reply_t *r = NULL;
        size_t used;
        memcpy(&d, &bits, sizeof d);
        if (isnan(d))
            continue;
        resp_buf_clear(&b);
        resp_add_double(&b, d);
        CU_ASSERT_EQUAL_FATAL(resp_reply_parse(b.raw.data, b.raw.len, NULL, &r, &used, NULL, 0), RESP_OK);
        CU_ASSERT_EQUAL(r->type, RESP_REPLY_DOUBLE);
        CU_ASSERT(r->dval == d);
        resp_reply_free(r);
    }
    resp_buf_free(&b);
}

static void test_writer_command(void)
{
    buf_t b = BUF_INIT;
    const char *argv[] = { "SET", "k", "v" };
    const char *bin[] = { "ECHO", "a\0b" };
    size_t binlen[] = { 4, 3 };

    resp_add_command(&b, 3, argv, NULL);
    CHECK_RAW(&b, "*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$1\r\nv\r\n");
    buf_clear(&b);
    resp_add_command(&b, 2, bin, binlen);
    CHECK_RAW(&b, "*2\r\n$4\r\nECHO\r\n$3\r\na\0b\r\n");
    buf_free(&b);
}


/* ------------------------------------------------------------------------
 * Reply parser
 * ------------------------------------------------------------------------ */

/* Parse a literal that must be one complete reply; returns the tree. */
static resp_reply_t *parse_reply_lit(const char *in, size_t len, const resp_reply_limits_t *lim)
{
    resp_reply_t *r = NULL;
    size_t used = 0;
    char err[200] = "";
    resp_status_t st = resp_reply_parse(in, len, lim, &r, &used, err, sizeof err);
    CU_ASSERT_EQUAL(st, RESP_OK);
    CU_ASSERT_EQUAL(used, len);
    CU_ASSERT_STRING_EQUAL(err, "");
    return st == RESP_OK ? r : NULL;
}
#define PARSE_REPLY(lit) parse_reply_lit((lit), sizeof(lit) - 1, NULL)

static void test_reply_resp2_types(void)
{
    resp_reply_t *r;

    r = PARSE_REPLY("+OK\r\n");
    CU_ASSERT_PTR_NOT_NULL_FATAL(r);
    CU_ASSERT_EQUAL(r->type, RESP_REPLY_STATUS);
    CHECK_BYTES(r->str, r->len, "OK");
    CU_ASSERT_EQUAL(r->str[r->len], '\0');
    resp_reply_free(r);

    r = PARSE_REPLY("-ERR bad thing\r\n");
    CU_ASSERT_PTR_NOT_NULL_FATAL(r);
    CU_ASSERT_EQUAL(r->type, RESP_REPLY_ERROR);
    CHECK_BYTES(r->str, r->len, "ERR bad thing");
    resp_reply_free(r);

    r = PARSE_REPLY(":-9223372036854775808\r\n");
    CU_ASSERT_PTR_NOT_NULL_FATAL(r);
    CU_ASSERT_EQUAL(r->type, RESP_REPLY_INTEGER);
    CU_ASSERT_EQUAL(r->integer, LLONG_MIN);
    resp_reply_free(r);

    r = PARSE_REPLY("$5\r\nh\0\r\no\r\n");
    CU_ASSERT_PTR_NOT_NULL_FATAL(r);
    CU_ASSERT_EQUAL(r->type, RESP_REPLY_BULK);
    CHECK_BYTES(r->str, r->len, "h\0\r\no");
    CU_ASSERT_EQUAL(r->str[5], '\0');
    resp_reply_free(r);

    r = PARSE_REPLY("$0\r\n\r\n");
    CU_ASSERT_PTR_NOT_NULL_FATAL(r);
    CU_ASSERT_EQUAL(r->type, RESP_REPLY_BULK);
    CU_ASSERT_EQUAL(r->len, 0);
    CU_ASSERT_PTR_NOT_NULL(r->str);
    resp_reply_free(r);

    r = PARSE_REPLY("$-1\r\n");
    CU_ASSERT_PTR_NOT_NULL_FATAL(r);
    CU_ASSERT_EQUAL(r->type, RESP_REPLY_NIL);
    CU_ASSERT_PTR_NULL(r->str);
    resp_reply_free(r);

    r = PARSE_REPLY("*-1\r\n");
    CU_ASSERT_PTR_NOT_NULL_FATAL(r);
    CU_ASSERT_EQUAL(r->type, RESP_REPLY_NIL);
    resp_reply_free(r);

    r = PARSE_REPLY("*0\r\n");
    CU_ASSERT_PTR_NOT_NULL_FATAL(r);
    CU_ASSERT_EQUAL(r->type, RESP_REPLY_ARRAY);
    CU_ASSERT_EQUAL(r->count, 0);
    CU_ASSERT_PTR_NULL(r->elements);
    resp_reply_free(r);

    r = PARSE_REPLY("*3\r\n*2\r\n:1\r\n$1\r\na\r\n*0\r\n*1\r\n*1\r\n+deep\r\n");
    CU_ASSERT_PTR_NOT_NULL_FATAL(r);
    CU_ASSERT_EQUAL_FATAL(r->type, RESP_REPLY_ARRAY);
    CU_ASSERT_EQUAL_FATAL(r->count, 3);
    CU_ASSERT_EQUAL_FATAL(r->elements[0].count, 2);
    CU_ASSERT_EQUAL(r->elements[0].elements[0].integer, 1);
    CHECK_BYTES(r->elements[0].elements[1].str, r->elements[0].elements[1].len, "a");
    CU_ASSERT_EQUAL(r->elements[1].type, RESP_REPLY_ARRAY);
    CU_ASSERT_EQUAL(r->elements[1].count, 0);
    CU_ASSERT_EQUAL_FATAL(r->elements[2].count, 1);
    CU_ASSERT_EQUAL_FATAL(r->elements[2].elements[0].count, 1);
    CU_ASSERT_EQUAL(r->elements[2].elements[0].elements[0].type, RESP_REPLY_STATUS);
    CHECK_BYTES(r->elements[2].elements[0].elements[0].str, 4, "deep");
    resp_reply_free(r);
    resp_reply_free(NULL);
}

static void test_reply_resp3_types(void)
{
    resp_reply_t *r;

    r = PARSE_REPLY("_\r\n");
    CU_ASSERT_PTR_NOT_NULL_FATAL(r);
    CU_ASSERT_EQUAL(r->type, RESP_REPLY_NIL);
    resp_reply_free(r);

    r = PARSE_REPLY(",3.25\r\n");
    CU_ASSERT_PTR_NOT_NULL_FATAL(r);
    CU_ASSERT_EQUAL(r->type, RESP_REPLY_DOUBLE);
    CU_ASSERT(r->dval == 3.25);
    CHECK_BYTES(r->str, r->len, "3.25");
    resp_reply_free(r);

    r = PARSE_REPLY(",-inf\r\n");
    CU_ASSERT_PTR_NOT_NULL_FATAL(r);
    CU_ASSERT(isinf(r->dval) && r->dval < 0);
    resp_reply_free(r);

    r = PARSE_REPLY("#t\r\n");
    CU_ASSERT_PTR_NOT_NULL_FATAL(r);
    CU_ASSERT_EQUAL(r->type, RESP_REPLY_BOOL);
    CU_ASSERT_EQUAL(r->integer, 1);
    resp_reply_free(r);
    r = PARSE_REPLY("#f\r\n");
    CU_ASSERT_PTR_NOT_NULL_FATAL(r);
    CU_ASSERT_EQUAL(r->integer, 0);
    resp_reply_free(r);

    r = PARSE_REPLY("(-123456789012345678901234567890\r\n");
    CU_ASSERT_PTR_NOT_NULL_FATAL(r);
    CU_ASSERT_EQUAL(r->type, RESP_REPLY_BIGNUM);
    CHECK_BYTES(r->str, r->len, "-123456789012345678901234567890");
    resp_reply_free(r);

    r = PARSE_REPLY("=9\r\nmkd:hello\r\n");
    CU_ASSERT_PTR_NOT_NULL_FATAL(r);
    CU_ASSERT_EQUAL(r->type, RESP_REPLY_VERBATIM);
    CU_ASSERT_STRING_EQUAL(r->format, "mkd");
    CHECK_BYTES(r->str, r->len, "hello");
    resp_reply_free(r);

    r = PARSE_REPLY("!10\r\nERR b\r\noom\r\n");
    CU_ASSERT_PTR_NOT_NULL_FATAL(r);
    CU_ASSERT_EQUAL(r->type, RESP_REPLY_ERROR);
    CHECK_BYTES(r->str, r->len, "ERR b\r\noom");
    resp_reply_free(r);

    r = PARSE_REPLY("%2\r\n+a\r\n:1\r\n+b\r\n#t\r\n");
    CU_ASSERT_PTR_NOT_NULL_FATAL(r);
    CU_ASSERT_EQUAL(r->type, RESP_REPLY_MAP);
    CU_ASSERT_EQUAL_FATAL(r->count, 4);
    CHECK_BYTES(r->elements[2].str, r->elements[2].len, "b");
    CU_ASSERT_EQUAL(r->elements[3].type, RESP_REPLY_BOOL);
    resp_reply_free(r);

    r = PARSE_REPLY("~2\r\n:1\r\n:2\r\n");
    CU_ASSERT_PTR_NOT_NULL_FATAL(r);
    CU_ASSERT_EQUAL(r->type, RESP_REPLY_SET);
    CU_ASSERT_EQUAL(r->count, 2);
    CU_ASSERT_EQUAL(r->elements[1].integer, 2);
    resp_reply_free(r);

    r = PARSE_REPLY(">2\r\n+message\r\n$1\r\nx\r\n");
    CU_ASSERT_PTR_NOT_NULL_FATAL(r);
    CU_ASSERT_EQUAL(r->type, RESP_REPLY_PUSH);
    CU_ASSERT_EQUAL(r->count, 2);
    resp_reply_free(r);
}

/* A PULL-like reply written by the writer: [ [id, topic, nil, payload, n, due], ... ] */
static void write_sample(resp_buf_t *b)
{
    resp_add_array(b, 4);
    resp_add_array(b, 6);
    resp_add_bulk_str(b, "0000000001-0001");
    resp_add_bulk_str(b, "orders");
    resp_add_null(b);
    resp_add_bulk(b, "pay\0load\r\n", 10);
    resp_add_int(b, 3);
    resp_add_int(b, 1700000000123LL);
    resp_add_map(b, 2);
    resp_add_simple(b, "depth");
    resp_add_double(b, 2.5);
    resp_add_simple(b, "ok");
    resp_add_bool(b, 1);
    resp_add_set(b, 0);
    resp_add_errorf(b, "ERR %d things", 7);
}

static void test_reply_roundtrip_writer(void)
{
    for (int proto = RESP_PROTO_2; proto <= RESP_PROTO_3; proto++) {
        resp_buf_t b = RESP_BUF_INIT;
        resp_reply_t *r, *m;

        b.proto = proto;
        write_sample(&b);
        r = parse_reply_lit(b.raw.data, b.raw.len, NULL);
        CU_ASSERT_PTR_NOT_NULL_FATAL(r);
        CU_ASSERT_EQUAL_FATAL(r->type, RESP_REPLY_ARRAY);
        CU_ASSERT_EQUAL_FATAL(r->count, 4);
        CU_ASSERT_EQUAL_FATAL(r->elements[0].count, 6);
        m = r->elements[0].elements;
        CHECK_BYTES(m[0].str, m[0].len, "0000000001-0001");
        CHECK_BYTES(m[1].str, m[1].len, "orders");
        CU_ASSERT_EQUAL(m[2].type, RESP_REPLY_NIL);
        CHECK_BYTES(m[3].str, m[3].len, "pay\0load\r\n");
        CU_ASSERT_EQUAL(m[4].integer, 3);
        CU_ASSERT_EQUAL(m[5].integer, 1700000000123LL);

        m = &r->elements[1];
        CU_ASSERT_EQUAL(m->type, proto == RESP_PROTO_3 ? RESP_REPLY_MAP : RESP_REPLY_ARRAY);
        CU_ASSERT_EQUAL_FATAL(m->count, 4);
        CHECK_BYTES(m->elements[0].str, m->elements[0].len, "depth");
        CU_ASSERT_EQUAL(m->elements[1].type, proto == RESP_PROTO_3 ? RESP_REPLY_DOUBLE : RESP_REPLY_BULK);
        CHECK_BYTES(m->elements[1].str, m->elements[1].len, "2.5");
        CU_ASSERT_EQUAL(m->elements[3].type, proto == RESP_PROTO_3 ? RESP_REPLY_BOOL : RESP_REPLY_INTEGER);
        CU_ASSERT_EQUAL(m->elements[3].integer, 1);

        CU_ASSERT_EQUAL(r->elements[2].type, proto == RESP_PROTO_3 ? RESP_REPLY_SET : RESP_REPLY_ARRAY);
        CU_ASSERT_EQUAL(r->elements[2].count, 0);
        CU_ASSERT_EQUAL(r->elements[3].type, RESP_REPLY_ERROR);
        CHECK_BYTES(r->elements[3].str, r->elements[3].len, "ERR 7 things");
        resp_reply_free(r);
        resp_buf_free(&b);
    }
}

static void test_reply_every_prefix_needs_more(void)
{
    static const char *samples[] = {
        "+OK\r\n",
        ":12\r\n",
        "$3\r\nabc\r\n",
        "$0\r\n\r\n",
        "$-1\r\n",
        "*-1\r\n",
        "_\r\n",
        "#t\r\n",
        ",1.5\r\n",
        "(12\r\n",
        "=5\r\ntxt:x\r\n",
        "!3\r\nERR\r\n",
        "%1\r\n+a\r\n+b\r\n",
        "*2\r\n*1\r\n:1\r\n$2\r\nab\r\n",
    };
    for (int proto = RESP_PROTO_2; proto <= RESP_PROTO_3 + 1; proto++) {
        resp_buf_t b = RESP_BUF_INIT;
        size_t count = proto <= RESP_PROTO_3 ? 1 : sizeof samples / sizeof samples[0];
        for (size_t s = 0; s < count; s++) {
            resp_buf_clear(&b);
            if (proto <= RESP_PROTO_3) {
                b.proto = proto;
                write_sample(&b);
            } else {
                buf_append(&b.raw, samples[s], strlen(samples[s]));
            }
            for (size_t k = 0; k < b.raw.len; k++) {
                resp_reply_t *r = (resp_reply_t *)&b; /* must be overwritten */
                size_t used = 77;
                CU_ASSERT_EQUAL(resp_reply_parse(b.raw.data, k, NULL, &r, &used, NULL, 0), RESP_NEED_MORE);
                CU_ASSERT_PTR_NULL(r);
                CU_ASSERT_EQUAL(used, 0);
            }
            /* complete, with trailing bytes of the next reply */
            {
                resp_reply_t *r = NULL;
                size_t used = 0, full = b.raw.len;
                buf_append(&b.raw, "+NEXT", 5);
                CU_ASSERT_EQUAL(resp_reply_parse(b.raw.data, b.raw.len, NULL, &r, &used, NULL, 0), RESP_OK);
                CU_ASSERT_EQUAL(used, full);
                resp_reply_free(r);
            }
        }
        resp_buf_free(&b);
    }
}

static void test_reply_pipelined(void)
{
    static const char in[] = "+OK\r\n:1\r\n$1\r\nx\r\n";
    resp_reply_t *r;
    size_t used, off = 0;

    CU_ASSERT_EQUAL_FATAL(resp_reply_parse(in, sizeof in - 1, NULL, &r, &used, NULL, 0), RESP_OK);
    CU_ASSERT_EQUAL(used, 5);
    CU_ASSERT_EQUAL(r->type, RESP_REPLY_STATUS);
    resp_reply_free(r);
    off += used;
    CU_ASSERT_EQUAL_FATAL(resp_reply_parse(in + off, sizeof in - 1 - off, NULL, &r, &used, NULL, 0), RESP_OK);
    CU_ASSERT_EQUAL(used, 4);
    CU_ASSERT_EQUAL(r->integer, 1);
    resp_reply_free(r);
    off += used;
    CU_ASSERT_EQUAL_FATAL(resp_reply_parse(in + off, sizeof in - 1 - off, NULL, &r, &used, NULL, 0), RESP_OK);
    CU_ASSERT_EQUAL(used, 7);
    CU_ASSERT_EQUAL(off + used, sizeof in - 1);
    resp_reply_free(r);
}

static void run_reply_bad(const struct bad_case *cases, size_t n, const resp_reply_limits_t *lim)
{
    for (size_t i = 0; i < n; i++) {
        char err[200] = "", where[400], esc[120];
        resp_reply_t *r = (resp_reply_t *)err;
        size_t used = 5;
        resp_status_t st = resp_reply_parse(cases[i].in, cases[i].len, lim, &r, &used, err, sizeof err);
        escape_bytes(esc, sizeof esc, cases[i].in, cases[i].len);
        snprintf(where, sizeof where, "reply \"%s\": status %d, message \"%s\"", esc, st, err);
        CU_assertImplementation(st == cases[i].status && strcmp(err, cases[i].msg) == 0 ? CU_TRUE : CU_FALSE, __LINE__,
                                where, __FILE__, "", CU_FALSE);
        CU_ASSERT_PTR_NULL(r);
        CU_ASSERT_EQUAL(used, 0);
    }
}

static void test_reply_errors(void)
{
    const struct bad_case cases[] = {
        BAD("?\r\n", RESP_ERR_PROTOCOL, "Protocol error: unexpected reply type byte '?'"),
        BAD("|1\r\n+a\r\n+b\r\n", RESP_ERR_PROTOCOL, "Protocol error: unexpected reply type byte '|'"),
        BAD("\0", RESP_ERR_PROTOCOL, "Protocol error: unexpected reply type byte '\\x00'"),
        BAD(":abc\r\n", RESP_ERR_PROTOCOL, "Protocol error: invalid integer reply"),
        BAD(":1\rX", RESP_ERR_PROTOCOL, "Protocol error: invalid integer reply"),
        BAD(":123456789012345678901\r\n", RESP_ERR_PROTOCOL, "Protocol error: invalid integer reply"),
        BAD("$-2\r\n", RESP_ERR_PROTOCOL, "Protocol error: invalid bulk length"),
        BAD("$?\r\n", RESP_ERR_PROTOCOL, "Protocol error: invalid bulk length"),
        BAD("!-1\r\n", RESP_ERR_PROTOCOL, "Protocol error: invalid bulk length"),
        BAD("$3\r\nabcX\r\n", RESP_ERR_PROTOCOL, "Protocol error: bulk data not followed by CRLF"),
        BAD("_x\r\n", RESP_ERR_PROTOCOL, "Protocol error: invalid null reply"),
        BAD("#x\r\n", RESP_ERR_PROTOCOL, "Protocol error: invalid boolean reply"),
        BAD("#tt\r\n", RESP_ERR_PROTOCOL, "Protocol error: invalid boolean reply"),
        BAD(",abc\r\n", RESP_ERR_PROTOCOL, "Protocol error: invalid double reply"),
        BAD(",\r\n", RESP_ERR_PROTOCOL, "Protocol error: invalid double reply"),
        BAD(", 1\r\n", RESP_ERR_PROTOCOL, "Protocol error: invalid double reply"),
        BAD("(12a\r\n", RESP_ERR_PROTOCOL, "Protocol error: invalid big number reply"),
        BAD("(-\r\n", RESP_ERR_PROTOCOL, "Protocol error: invalid big number reply"),
        BAD("=3\r\nabc\r\n", RESP_ERR_PROTOCOL, "Protocol error: invalid verbatim string"),
        BAD("=4\r\nabcd\r\n", RESP_ERR_PROTOCOL, "Protocol error: invalid verbatim string"),
        BAD("=5\r\nt\x01\0:h\r\n", RESP_ERR_PROTOCOL, "Protocol error: invalid verbatim string"), /* fuzz find */
        BAD("*-2\r\n", RESP_ERR_PROTOCOL, "Protocol error: invalid multibulk length"),
        BAD("%-1\r\n", RESP_ERR_PROTOCOL, "Protocol error: invalid multibulk length"),
        BAD("+OK\rX", RESP_ERR_PROTOCOL, "Protocol error: reply line not ended by CRLF"),
        BAD("*2\r\n:1\r\n:x\r\n", RESP_ERR_PROTOCOL, "Protocol error: invalid integer reply"),
    };
    run_reply_bad(cases, sizeof cases / sizeof cases[0], NULL);
}

static void test_reply_limits(void)
{
    resp_reply_limits_t depth2 = { .max_depth = 2 };
    resp_reply_limits_t elems3 = { .max_elements = 3 };
    resp_reply_limits_t bulk5 = { .max_bulk = 5 };
    resp_reply_t *r;

    r = parse_reply_lit("*1\r\n*1\r\n:1\r\n", 12, &depth2);
    resp_reply_free(r);
    r = parse_reply_lit("*3\r\n:1\r\n:2\r\n:3\r\n", 16, &elems3);
    resp_reply_free(r);
    r = parse_reply_lit("*2\r\n*1\r\n:1\r\n:2\r\n", 16, &elems3);
    resp_reply_free(r);
    r = parse_reply_lit("$5\r\nhello\r\n", 11, &bulk5);
    resp_reply_free(r);
    r = parse_reply_lit("+hello\r\n", 8, &bulk5);
    resp_reply_free(r);
    {
        const struct bad_case c[] = {
            BAD("*1\r\n*1\r\n*0\r\n", RESP_ERR_LIMIT, "Protocol error: reply nested deeper than 2 levels (max-depth)"),
        };
        run_reply_bad(c, 1, &depth2);
    }
    {
        const struct bad_case c[] = {
            BAD("*4\r\n", RESP_ERR_LIMIT, "Protocol error: reply has more than 3 elements (max-elements)"),
            BAD("*2\r\n*2\r\n", RESP_ERR_LIMIT, "Protocol error: reply has more than 3 elements (max-elements)"),
            BAD("%2\r\n", RESP_ERR_LIMIT, "Protocol error: reply has more than 3 elements (max-elements)"),
        };
        run_reply_bad(c, 3, &elems3);
    }
    {
        const struct bad_case c[] = {
            BAD("$6\r\n", RESP_ERR_LIMIT, "Protocol error: bulk length 6 exceeds the limit of 5 bytes (max-bulk)"),
            BAD("+hello!", RESP_ERR_LIMIT, "Protocol error: reply line longer than 5 bytes (max-bulk)"),
        };
        run_reply_bad(c, 2, &bulk5);
    }
}

static void test_reply_default_limits(void)
{
    resp_reply_t *r = NULL;
    size_t used = 0;
    char err[200];
    resp_reply_limits_t huge_depth = { .max_depth = 100000 };
    buf_t deep = BUF_INIT;

    /* declared sizes at the limits: just waiting for the bytes */
    CU_ASSERT_EQUAL(resp_reply_parse("*1048576\r\n:1\r\n", 14, NULL, &r, &used, err, sizeof err), RESP_NEED_MORE);
    CU_ASSERT_EQUAL(resp_reply_parse("$536870912\r\nabc", 15, NULL, &r, &used, err, sizeof err), RESP_NEED_MORE);
    /* one past */
    CU_ASSERT_EQUAL(resp_reply_parse("*1048577\r\n", 10, NULL, &r, &used, err, sizeof err), RESP_ERR_LIMIT);
    CU_ASSERT_STRING_EQUAL(err, "Protocol error: reply has more than 1048576 elements (max-elements)");
    CU_ASSERT_EQUAL(resp_reply_parse("$536870913\r\n", 12, NULL, &r, &used, err, sizeof err), RESP_ERR_LIMIT);
    CU_ASSERT_STRING_EQUAL(err,
                           "Protocol error: bulk length 536870913 exceeds the limit of 536870912 bytes (max-bulk)");

    /* depth: 32 by default, and never more than RESP_REPLY_DEPTH_CAP */
    for (int i = 0; i < 32; i++)
        buf_append(&deep, "*1\r\n", 4);
    buf_append(&deep, ":1\r\n", 4);
    r = parse_reply_lit(deep.data, deep.len, NULL);
    resp_reply_free(r);
    buf_clear(&deep);
    for (int i = 0; i < 33; i++)
        buf_append(&deep, "*1\r\n", 4);
    CU_ASSERT_EQUAL(resp_reply_parse(deep.data, deep.len, NULL, &r, &used, err, sizeof err), RESP_ERR_LIMIT);
    CU_ASSERT_STRING_EQUAL(err, "Protocol error: reply nested deeper than 32 levels (max-depth)");
    buf_clear(&deep);
    for (int i = 0; i < RESP_REPLY_DEPTH_CAP + 1; i++)
        buf_append(&deep, "*1\r\n", 4);
    CU_ASSERT_EQUAL(resp_reply_parse(deep.data, deep.len, &huge_depth, &r, &used, err, sizeof err), RESP_ERR_LIMIT);
    CU_ASSERT_STRING_EQUAL(err, "Protocol error: reply nested deeper than 512 levels (max-depth)");
    buf_free(&deep);
}

static void test_reply_type_names(void)
{
    CU_ASSERT_STRING_EQUAL(resp_reply_type_name(RESP_REPLY_BULK), "bulk");
    CU_ASSERT_STRING_EQUAL(resp_reply_type_name(RESP_REPLY_MAP), "map");
    CU_ASSERT_STRING_EQUAL(resp_reply_type_name(RESP_REPLY_VERBATIM), "verbatim");
    CU_ASSERT_STRING_EQUAL(resp_reply_type_name((resp_reply_type_t)999), "unknown");
}

/* ------------------------------------------------------------------------
 * Registration
 * ------------------------------------------------------------------------ */

struct test_entry {
    const char *name;
    CU_TestFunc fn;
};

static int add_suite(const char *name, const struct test_entry *tests, size_t n)
{
    CU_pSuite s = CU_add_suite(name, NULL, NULL);
    if (s == NULL)
        return -1;
    for (size_t i = 0; i < n; i++)
        if (CU_add_test(s, tests[i].name, tests[i].fn) == NULL)
            return -1;
    return 0;
}

#define T(fn)   \
    {           \
#fn, fn \
    }

static int add_suites(void)
{
    static const struct test_entry request[] = {
        T(test_request_multibulk),
        T(test_request_inline),
        T(test_request_inline_quotes),
        T(test_request_inline_unbalanced),
        T(test_request_blank_lines_skipped),
        T(test_request_binary_bulk),
        T(test_request_zero_length_bulk),
        T(test_request_pipelined),
        T(test_request_split_every_byte),
        T(test_request_split_two_pieces),
        T(test_request_empty_multibulk_skipped),
        T(test_request_bad_multibulk_length),
        T(test_request_bad_bulk_length),
        T(test_request_whole_arguments_refused_alike),
        T(test_request_limit_args),
        T(test_request_limit_bulk),
        T(test_request_limit_inline),
        T(test_request_limit_query),
        T(test_request_default_limits),
        T(test_request_no_allocation_on_declared_length),
        T(test_request_dead_after_error),
        T(test_request_big_buffers_released),
        T(test_request_set_limits_live),
        T(test_request_roundtrip_random),
    };
    static const struct test_entry writer[] = {
        T(test_writer_simple_and_error), T(test_writer_errorf), T(test_writer_scalars),
        T(test_writer_resp2_vs_resp3),   T(test_writer_double),
    };
    static const struct test_entry client[] = {
        T(test_writer_command),
        T(test_reply_resp2_types),
        T(test_reply_resp3_types),
        T(test_reply_roundtrip_writer),
        T(test_reply_every_prefix_needs_more),
        T(test_reply_pipelined),
        T(test_reply_errors),
        T(test_reply_limits),
        T(test_reply_default_limits),
        T(test_reply_type_names),
    };
    if (add_suite("request", request, sizeof request / sizeof request[0]) != 0 ||
        add_suite("writer", writer, sizeof writer / sizeof writer[0]) != 0 ||
        add_suite("client", client, sizeof client / sizeof client[0]) != 0)
        return -1;
    return 0;
}

int main(int argc, char **argv)
{
    return tu_cunit_main(argc, argv, add_suites);
}
