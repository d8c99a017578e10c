/*
 * tests/fuzz/fuzz_resp.c — libFuzzer targets for the RESP codec in proto/.
 *
 * `make fuzz` builds it twice (tests/fuzz.am): fuzz_request (-DFUZZ_REQUEST_ONLY,
 * the server's request parser) and fuzz_reply (-DFUZZ_REPLY_ONLY, the client's
 * reply parser), and runs each for FUZZ_SECONDS on a copy of its seed corpus
 * tests/fuzz/corpus/NAME/. Without either macro one binary does both.
 *
 * The first input byte picks options (small limits or the defaults; the
 * chunking seed), the rest is the byte stream. For each input:
 *   request parser  the stream is fed whole, in pseudo-random chunk sizes and
 *                   (when short) one byte at a time; the three runs must give
 *                   the same commands, the same final status and the same
 *                   message. Memory held must stay within a bound set by the
 *                   bytes fed so far, never by a declared length. Every
 *                   command, re-encoded with resp_add_command, must parse back
 *                   to itself.
 *   reply parser    replies are parsed one after another from the stream;
 *                   each must take at least one byte, every proper prefix of
 *                   it must say NEED_MORE, and the tree, written out again
 *                   canonically and re-parsed, must give the same bytes.
 * A failed check calls abort(), which libFuzzer reports as a crash.
 */
#include "proto/client.h"
#include "proto/request.h"
#include "tests/helpers/resp_transcript.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#include "tests/fuzz/fuzz_check.h"

typedef struct run_result {
    buf_t transcript;
    resp_status_t status; /* RESP_OK (clean end), RESP_NEED_MORE (mid-command) or the error */
    char err[200];
} run_result_t;

/* Re-encode a command and check it parses back to itself. */
static void check_reencode(const resp_command_t *cmd, const resp_limits_t *limits)
{
    buf_t wire = BUF_INIT, a = BUF_INIT, b = BUF_INIT;
    const char **argv = malloc(cmd->argc * sizeof *argv);
    size_t *lens = malloc(cmd->argc * sizeof *lens);
    resp_parser_t p;
    resp_command_t again;
    size_t used = 0;
    resp_limits_t roomy = RESP_LIMITS_DEFAULT;

    if (limits != NULL)
        roomy = *limits;
    CHECK(argv != NULL && lens != NULL);
    for (size_t i = 0; i < cmd->argc; i++) {
        argv[i] = cmd->argv[i].ptr;
        lens[i] = cmd->argv[i].len;
    }
    resp_add_command(&wire, cmd->argc, argv, lens);
    roomy.max_query = wire.len; /* exactly at the limit must pass */
    resp_parser_init(&p, &roomy);
    CHECK(resp_parser_feed(&p, wire.data, wire.len, &used, &again) == RESP_OK);
    CHECK(used == wire.len);
    CHECK(again.wire_len == wire.len);
    resp_transcript_add(&a, cmd);
    resp_transcript_add(&b, &again);
    /* the form letter differs for inline commands: compare from the '|' */
    CHECK(a.len == b.len);
    {
        const char *pa = memchr(a.data, '|', a.len), *pb = memchr(b.data, '|', b.len);
        CHECK(pa != NULL && pb != NULL);
        CHECK(memcmp(pa, pb, a.len - (size_t)(pa - a.data)) == 0);
    }
    resp_parser_free(&p);
    buf_free(&wire);
    buf_free(&a);
    buf_free(&b);
    free(argv);
    free(lens);
}

/* Feed the stream with chunk sizes from next_chunk (0 = all at once). */
static void run_request(const uint8_t *s, size_t len, const resp_limits_t *limits, int mode, uint32_t seed,
                        int reencode, run_result_t *out)
{
    resp_parser_t p;
    size_t off = 0;
    resp_status_t st = RESP_NEED_MORE;
    uint32_t x = seed | 1;

    buf_init(&out->transcript);
    resp_parser_init(&p, limits);
    while (off < len && st >= 0) {
        size_t n;
        if (mode == 0) {
            n = len - off;
        } else if (mode == 1) {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            n = 1 + x % 64;
        } else {
            n = 1;
        }
        if (n > len - off)
            n = len - off;
        {
            const char *b = (const char *)s + off;
            off += n;
            while (n > 0) {
                size_t used = 0;
                resp_command_t cmd;
                st = resp_parser_feed(&p, b, n, &used, &cmd);
                CHECK(used <= n);
                if (st == RESP_OK) {
                    CHECK(cmd.argc >= 1);
                    CHECK(cmd.argc <= p.limits.max_args);
                    CHECK(cmd.wire_len <= p.limits.max_query);
                    for (size_t i = 0; i < cmd.argc; i++) {
                        CHECK(cmd.argv[i].len <= p.limits.max_bulk);
                        CHECK(cmd.argv[i].ptr[cmd.argv[i].len] == '\0');
                    }
                    resp_transcript_add(&out->transcript, &cmd);
                    if (reencode)
                        check_reencode(&cmd, limits);
                } else if (st == RESP_NEED_MORE) {
                    CHECK(used == n);
                } else {
                    CHECK(resp_parser_error(&p)[0] != '\0');
                    break;
                }
                b += used;
                n -= used;
            }
            /* memory follows the bytes fed, never a declared length */
            CHECK(resp_parser_buffered(&p) <= 2 * (off + 1) + 256 + (2 * off + 16) * sizeof(resp_arg_t));
        }
    }
    if (st >= 0)
        st = resp_parser_in_command(&p) ? RESP_NEED_MORE : RESP_OK;
    out->status = st;
    snprintf(out->err, sizeof out->err, "%s", resp_parser_error(&p));
    resp_parser_free(&p);
}

static void check_same(const run_result_t *a, const run_result_t *b)
{
    CHECK(a->status == b->status);
    CHECK(strcmp(a->err, b->err) == 0);
    CHECK(a->transcript.len == b->transcript.len);
    CHECK(a->transcript.len == 0 || memcmp(a->transcript.data, b->transcript.data, a->transcript.len) == 0);
}

/* Write a reply tree back out canonically. */
static void write_canonical(buf_t *b, const resp_reply_t *r)
{
    char head[64];
    int n;

    switch (r->type) {
    case RESP_REPLY_STATUS:
        buf_append(b, "+", 1);
        buf_append(b, r->str, r->len);
        buf_append(b, "\r\n", 2);
        break;
    case RESP_REPLY_ERROR:
        n = snprintf(head, sizeof head, "!%zu\r\n", r->len);
        buf_append(b, head, (size_t)n);
        buf_append(b, r->str, r->len);
        buf_append(b, "\r\n", 2);
        break;
    case RESP_REPLY_INTEGER:
        n = snprintf(head, sizeof head, ":%lld\r\n", r->integer);
        buf_append(b, head, (size_t)n);
        break;
    case RESP_REPLY_BULK:
        n = snprintf(head, sizeof head, "$%zu\r\n", r->len);
        buf_append(b, head, (size_t)n);
        buf_append(b, r->str, r->len);
        buf_append(b, "\r\n", 2);
        break;
    case RESP_REPLY_NIL:
        buf_append(b, "_\r\n", 3);
        break;
    case RESP_REPLY_DOUBLE:
        buf_append(b, ",", 1);
        buf_append(b, r->str, r->len);
        buf_append(b, "\r\n", 2);
        break;
    case RESP_REPLY_BOOL:
        buf_append(b, r->integer ? "#t\r\n" : "#f\r\n", 4);
        break;
    case RESP_REPLY_BIGNUM:
        buf_append(b, "(", 1);
        buf_append(b, r->str, r->len);
        buf_append(b, "\r\n", 2);
        break;
    case RESP_REPLY_VERBATIM:
        CHECK(strlen(r->format) == 3);
        n = snprintf(head, sizeof head, "=%zu\r\n%s:", r->len + 4, r->format);
        buf_append(b, head, (size_t)n);
        buf_append(b, r->str, r->len);
        buf_append(b, "\r\n", 2);
        break;
    case RESP_REPLY_ARRAY:
    case RESP_REPLY_MAP:
    case RESP_REPLY_SET:
    case RESP_REPLY_PUSH: {
        char t = r->type == RESP_REPLY_ARRAY ? '*'
                 : r->type == RESP_REPLY_MAP ? '%'
                 : r->type == RESP_REPLY_SET ? '~'
                                             : '>';
        size_t count = r->type == RESP_REPLY_MAP ? r->count / 2 : r->count;
        CHECK(r->type != RESP_REPLY_MAP || r->count % 2 == 0);
        CHECK(r->count == 0 || r->elements != NULL);
        n = snprintf(head, sizeof head, "%c%zu\r\n", t, count);
        buf_append(b, head, (size_t)n);
        for (size_t i = 0; i < r->count; i++)
            write_canonical(b, &r->elements[i]);
        break;
    }
    default:
        CHECK(!"unknown reply type");
    }
    if (r->str != NULL)
        CHECK(r->str[r->len] == '\0');
}

static void run_replies(const uint8_t *s, size_t len, const resp_reply_limits_t *lim)
{
    size_t off = 0;

    while (off < len) {
        resp_reply_t *r = NULL, *again = NULL;
        size_t used = 0, used2 = 0;
        char err[200];
        resp_status_t st = resp_reply_parse((const char *)s + off, len - off, lim, &r, &used, err, sizeof err);

        if (st != RESP_OK) {
            CHECK(r == NULL && used == 0);
            if (st < 0)
                CHECK(err[0] != '\0');
            return;
        }
        CHECK(r != NULL && used > 0 && used <= len - off);
        /* every proper prefix is incomplete (check a handful when long) */
        for (size_t k = 0; k < used; k += (used > 64 ? used / 64 : 1)) {
            resp_reply_t *none = NULL;
            size_t u = 1;
            CHECK(resp_reply_parse((const char *)s + off, k, lim, &none, &u, NULL, 0) == RESP_NEED_MORE);
            CHECK(none == NULL && u == 0);
        }
        {
            buf_t a = BUF_INIT, b = BUF_INIT;
            resp_reply_limits_t roomy = { .max_depth = RESP_REPLY_DEPTH_CAP,
                                          .max_elements = SIZE_MAX,
                                          .max_bulk = SIZE_MAX };
            write_canonical(&a, r);
            CHECK(resp_reply_parse(a.data, a.len, &roomy, &again, &used2, err, sizeof err) == RESP_OK);
            CHECK(used2 == a.len);
            write_canonical(&b, again);
            CHECK(a.len == b.len && memcmp(a.data, b.data, a.len) == 0);
            buf_free(&a);
            buf_free(&b);
        }
        resp_reply_free(again);
        resp_reply_free(r);
        off += used;
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    resp_limits_t small = { .max_args = 8, .max_bulk = 64, .max_inline = 48, .max_query = 200 };
    resp_reply_limits_t small_reply = { .max_depth = 4, .max_elements = 16, .max_bulk = 64 };
    const resp_limits_t *lim;
    run_result_t whole, chunked, bytewise;
    uint8_t opts;

    if (size < 1)
        return 0;
    opts = data[0];
    data++;
    size--;
    lim = (opts & 1) ? &small : NULL;

#ifndef FUZZ_REPLY_ONLY
    run_request(data, size, lim, 0, 0, 1, &whole);
    run_request(data, size, lim, 1, (uint32_t)opts * 2654435761u, 0, &chunked);
    check_same(&whole, &chunked);
    if (size <= 512) {
        run_request(data, size, lim, 2, 0, 0, &bytewise);
        check_same(&whole, &bytewise);
        buf_free(&bytewise.transcript);
    }
    buf_free(&whole.transcript);
    buf_free(&chunked.transcript);
#else
    (void)lim;
    (void)whole, (void)chunked, (void)bytewise;
#endif
#ifndef FUZZ_REQUEST_ONLY
    run_replies(data, size, (opts & 2) ? &small_reply : NULL);
#else
    (void)small_reply;
#endif
    return 0;
}
