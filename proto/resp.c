/*
 * proto/resp.c — the RESP codec: request parser, reply writer, reply parser.
 *
 * Request parser: a byte-driven state machine (states below), fed whatever
 * the socket delivered. Every byte it keeps is copied into one arena
 * (p->data): a multibulk command's arguments are stored back to back, each
 * followed by a NUL; an inline line is collected whole and then split in
 * place into the same layout (the split only ever shrinks text, so the write
 * cursor never overtakes the read cursor). Argument pointers are computed only
 * when the command is complete, so the arena may move while it grows.
 * Invariants:
 *   - memory grows only with bytes received: the arena doubles as data is
 *     copied in (never to a declared length), argv doubles as arguments
 *     complete; a declared length only ever caps a growth step.
 *   - every declared length is checked against its limit when its header
 *     line ends, before any byte of its data is accepted.
 *   - after an error p->dead holds the status and nothing changes any more.
 *   - the arena and argv of a handed-out command stay untouched until the
 *     next feed; big buffers are released then (RESP_PARSER_KEEP_*).
 *
 * Reply writer: appends to a resp_buf_t; the only allocation path is
 * resp_xrealloc, which aborts on failure (STYLE.md §4).
 *
 * Reply parser: stateless, two passes over the same code (parse_value): a
 * scan with node == NULL checks one whole reply is present and counts nodes
 * and string bytes; the build pass then fills one allocation. The build pass
 * cannot fail because the scan already walked the same bytes.
 *
 * No globals; a parser or buffer is used by one thread at a time.
 */
#include "proto/resp.h"

#include "base/alloc.h"
#include "base/buf.h"

#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Buffers above these sizes are released once their command is done. */
#define RESP_PARSER_KEEP_BYTES (64u * 1024)
#define RESP_PARSER_KEEP_ARGS 1024
#define RESP_PARSER_FIRST_BYTES 256
#define RESP_PARSER_FIRST_ARGS 8

/* Longest double reply text accepted (",<text>\r\n"). */
#define RESP_MAX_DOUBLE_LEN 256

/* ------------------------------------------------------------------------
 * Allocation and small helpers
 * ------------------------------------------------------------------------ */


/* a + b, aborting on overflow (only reachable with absurd sizes). */
static size_t add_size(size_t a, size_t b)
{
    if (a > SIZE_MAX - b) {
        fprintf(stderr, "hourglass: size overflow in resp\n");
        abort();
    }
    return a + b;
}

/* Parse a decimal long long exactly as Redis's string2ll: optional '-', no
 * '+', no blanks, no leading zeros (but "0"), no "-0", no overflow.
 * Returns 0 and *out, or -1. */
static int parse_ll(const char *s, size_t n, long long *out)
{
    size_t i = 0;
    int neg = 0;
    unsigned long long v = 0;

    if (n == 0)
        return -1;
    if (n == 1 && s[0] == '0') {
        *out = 0;
        return 0;
    }
    if (s[0] == '-') {
        neg = 1;
        i = 1;
        if (n == 1)
            return -1;
    }
    if (s[i] < '1' || s[i] > '9')
        return -1;
    for (; i < n; i++) {
        unsigned d;
        if (s[i] < '0' || s[i] > '9')
            return -1;
        d = (unsigned)(s[i] - '0');
        if (v > (ULLONG_MAX - d) / 10)
            return -1;
        v = v * 10 + d;
    }
    if (neg) {
        if (v > (unsigned long long)LLONG_MAX + 1)
            return -1;
        *out = (v == (unsigned long long)LLONG_MAX + 1) ? LLONG_MIN : -(long long)v;
    } else {
        if (v > (unsigned long long)LLONG_MAX)
            return -1;
        *out = (long long)v;
    }
    return 0;
}

/* Write v in decimal into dst (room for 21 bytes); returns the length. */
static size_t format_ll(char *dst, long long v)
{
    char tmp[24];
    unsigned long long u = v < 0 ? 0ULL - (unsigned long long)v : (unsigned long long)v;
    size_t n = 0, k = 0;

    do {
        tmp[n++] = (char)('0' + u % 10);
        u /= 10;
    } while (u != 0);
    if (v < 0)
        dst[k++] = '-';
    while (n > 0)
        dst[k++] = tmp[--n];
    return k;
}

static size_t format_ull(char *dst, unsigned long long u)
{
    char tmp[24];
    size_t n = 0, k = 0;

    do {
        tmp[n++] = (char)('0' + u % 10);
        u /= 10;
    } while (u != 0);
    while (n > 0)
        dst[k++] = tmp[--n];
    return k;
}

/* A byte for an error message: itself when printable, else "\xHH". */
static void printable_byte(char dst[5], unsigned char c)
{
    if (c >= 0x20 && c < 0x7f && c != '\\' && c != '\'')
        snprintf(dst, 5, "%c", c);
    else
        snprintf(dst, 5, "\\x%02x", c);
}

/* ------------------------------------------------------------------------
 * Request parser
 * ------------------------------------------------------------------------ */

enum {
    ST_START,        /* between commands: the next byte picks the form */
    ST_INLINE,       /* collecting an inline line up to '\n' */
    ST_MB_COUNT,     /* reading the digits after '*' up to "\r\n" */
    ST_BULK_DOLLAR,  /* expecting the '$' of the next argument */
    ST_BULK_LEN,     /* reading the digits after '$' up to "\r\n" */
    ST_BULK_DATA,    /* copying bulk_left more bytes of the argument */
    ST_BULK_CR,      /* expecting the '\r' after the argument */
    ST_BULK_LF       /* expecting the '\n' after the argument */
};

void resp_limits_default(resp_limits_t *l)
{
    resp_limits_t d = RESP_LIMITS_DEFAULT;
    *l = d;
}

void resp_parser_set_limits(resp_parser_t *p, const resp_limits_t *limits)
{
    resp_limits_default(&p->limits);
    if (limits == NULL)
        return;
    if (limits->max_args)
        p->limits.max_args = limits->max_args;
    if (limits->max_bulk)
        p->limits.max_bulk = limits->max_bulk;
    if (limits->max_inline)
        p->limits.max_inline = limits->max_inline;
    if (limits->max_query)
        p->limits.max_query = limits->max_query;
}

void resp_parser_init(resp_parser_t *p, const resp_limits_t *limits)
{
    memset(p, 0, sizeof *p);
    p->state = ST_START;
    p->dead = RESP_OK;
    resp_parser_set_limits(p, limits);
}

void resp_parser_free(resp_parser_t *p)
{
    free(p->data);
    free(p->argv);
    p->data = NULL;
    p->argv = NULL;
    p->data_len = p->data_cap = 0;
    p->argc = p->argv_cap = 0;
}

/* Forget the current command; release buffers grown beyond the keep sizes. */
static void clear_command(resp_parser_t *p)
{
    p->state = ST_START;
    p->have_command = 0;
    p->query_len = 0;
    p->want_args = 0;
    p->bulk_left = 0;
    p->bulk_len = 0;
    p->number_len = 0;
    p->number_cr = 0;
    p->data_len = 0;
    p->argc = 0;
    if (p->data_cap > RESP_PARSER_KEEP_BYTES) {
        free(p->data);
        p->data = NULL;
        p->data_cap = 0;
    }
    if (p->argv_cap > RESP_PARSER_KEEP_ARGS) {
        free(p->argv);
        p->argv = NULL;
        p->argv_cap = 0;
    }
}

void resp_parser_reset(resp_parser_t *p)
{
    clear_command(p);
    p->dead = RESP_OK;
    p->err[0] = '\0';
}

const char *resp_parser_error(const resp_parser_t *p)
{
    return p->err;
}

int resp_parser_in_command(const resp_parser_t *p)
{
    return p->dead == RESP_OK && p->state != ST_START;
}

size_t resp_parser_buffered(const resp_parser_t *p)
{
    return p->data_cap + p->argv_cap * sizeof(resp_arg_t);
}

/* Kill the parser with a message; returns status for tail calls. */
static resp_status_t parser_fail(resp_parser_t *p, resp_status_t status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static resp_status_t parser_fail(resp_parser_t *p, resp_status_t status, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(p->err, sizeof p->err, fmt, ap);
    va_end(ap);
    p->dead = status;
    return status;
}

/* Make room for extra more bytes in the arena. Grows by doubling; cap_hint,
 * when nonzero and large enough, caps the step (it comes from a declared
 * length, which may only ever make an allocation smaller). */
static void data_reserve(resp_parser_t *p, size_t extra, size_t cap_hint)
{
    size_t need = add_size(p->data_len, extra);
    size_t cap;

    if (need <= p->data_cap)
        return;
    cap = p->data_cap ? p->data_cap : RESP_PARSER_FIRST_BYTES;
    while (cap < need)
        cap = cap > SIZE_MAX / 2 ? need : cap * 2;
    if (cap_hint >= need && cap > cap_hint)
        cap = cap_hint;
    p->data = xrealloc(p->data, cap);
    p->data_cap = cap;
}

/* Record one finished argument of len bytes (its bytes and NUL are already
 * in the arena). */
static void argv_push(resp_parser_t *p, size_t len)
{
    if (p->argc == p->argv_cap) {
        size_t cap = p->argv_cap ? p->argv_cap * 2 : RESP_PARSER_FIRST_ARGS;
        if (cap > SIZE_MAX / sizeof(resp_arg_t))
            cap = add_size(p->argv_cap, 1);
        p->argv = xrealloc(p->argv, cap * sizeof(resp_arg_t));
        p->argv_cap = cap;
    }
    p->argv[p->argc].ptr = NULL;
    p->argv[p->argc].len = len;
    p->argc++;
}

/* The command is complete: point argv into the arena and hand it out. */
static resp_status_t finish_command(resp_parser_t *p, resp_command_t *cmd, int is_inline)
{
    size_t off = 0;

    for (size_t i = 0; i < p->argc; i++) {
        p->argv[i].ptr = p->data + off;
        off += p->argv[i].len + 1;
    }
    cmd->argc = p->argc;
    cmd->argv = p->argv;
    cmd->wire_len = p->query_len;
    cmd->is_inline = is_inline;
    p->have_command = 1;
    p->state = ST_START;
    return RESP_OK;
}

static int is_split_blank(unsigned char c)
{
    return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f';
}

static int hex_value(unsigned char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

/* Split the inline line data[0..n) in place, as Redis's sdssplitargs does
 * (see resp.h), pushing at most max_args arguments. Requires data_cap > n.
 * Returns the number of arguments found (which may exceed max_args), or -1
 * on unbalanced quotes. */
static long long split_inline(resp_parser_t *p, size_t n)
{
    char *s = p->data;
    size_t r = 0, w = 0;
    long long nargs = 0;

    for (;;) {
        size_t start;
        int in_dq = 0, in_sq = 0, done = 0;

        while (r < n && is_split_blank((unsigned char)s[r]))
            r++;
        if (r == n)
            break;
        start = w;
        while (!done) {
            if (in_dq) {
                if (r == n)
                    return -1;
                if (s[r] == '\\' && r + 3 < n && s[r + 1] == 'x' &&
                    hex_value((unsigned char)s[r + 2]) >= 0 &&
                    hex_value((unsigned char)s[r + 3]) >= 0) {
                    s[w++] = (char)(hex_value((unsigned char)s[r + 2]) * 16 +
                                    hex_value((unsigned char)s[r + 3]));
                    r += 4;
                } else if (s[r] == '\\' && r + 1 < n) {
                    char c;
                    switch (s[r + 1]) {
                    case 'n': c = '\n'; break;
                    case 'r': c = '\r'; break;
                    case 't': c = '\t'; break;
                    case 'b': c = '\b'; break;
                    case 'a': c = '\a'; break;
                    default: c = s[r + 1]; break;
                    }
                    s[w++] = c;
                    r += 2;
                } else if (s[r] == '"') {
                    /* a closing quote must be followed by a blank or the end */
                    if (r + 1 < n && !is_split_blank((unsigned char)s[r + 1]))
                        return -1;
                    r++;
                    done = 1;
                } else {
                    s[w++] = s[r++];
                }
            } else if (in_sq) {
                if (r == n)
                    return -1;
                if (s[r] == '\\' && r + 1 < n && s[r + 1] == '\'') {
                    s[w++] = '\'';
                    r += 2;
                } else if (s[r] == '\'') {
                    if (r + 1 < n && !is_split_blank((unsigned char)s[r + 1]))
                        return -1;
                    r++;
                    done = 1;
                } else {
                    s[w++] = s[r++];
                }
            } else if (r == n) {
                done = 1;
            } else if (s[r] == ' ' || s[r] == '\n' || s[r] == '\r' || s[r] == '\t') {
                r++;
                done = 1;
            } else if (s[r] == '"') {
                in_dq = 1;
                r++;
            } else if (s[r] == '\'') {
                in_sq = 1;
                r++;
            } else {
                s[w++] = s[r++];
            }
        }
        s[w++] = '\0'; /* w <= r + 1 <= n + 1 <= data_cap */
        if (p->argc < p->limits.max_args)
            argv_push(p, w - 1 - start);
        nargs++;
    }
    return nargs;
}

/* An inline line (without its '\n') sits in data[0..data_len). Returns
 * RESP_OK with *cmd, RESP_NEED_MORE when the line was blank (skipped), or an
 * error. */
static resp_status_t process_inline(resp_parser_t *p, resp_command_t *cmd)
{
    size_t n = p->data_len;
    long long nargs;

    if (n > 0 && p->data[n - 1] == '\r')
        n--;
    nargs = split_inline(p, n);
    if (nargs < 0)
        return parser_fail(p, RESP_ERR_PROTOCOL, "Protocol error: unbalanced quotes in request");
    if ((unsigned long long)nargs > p->limits.max_args)
        return parser_fail(p, RESP_ERR_LIMIT,
                           "Protocol error: %lld arguments exceed the limit of %zu (max-args)",
                           nargs, p->limits.max_args);
    if (nargs == 0) {
        clear_command(p);
        return RESP_NEED_MORE;
    }
    if (p->query_len > p->limits.max_query)
        return parser_fail(p, RESP_ERR_LIMIT,
                           "Protocol error: command of at least %zu bytes exceeds the limit of %zu bytes (max-query)",
                           p->query_len, p->limits.max_query);
    return finish_command(p, cmd, 1);
}

/* The "*<count>\r\n" line ended. */
static resp_status_t on_count(resp_parser_t *p, int ok, long long v)
{
    if (!ok || v < -1)
        return parser_fail(p, RESP_ERR_PROTOCOL, "Protocol error: invalid multibulk length");
    if (v <= 0) {
        /* "*0" and "*-1": nothing to run, as in Redis */
        clear_command(p);
        return RESP_NEED_MORE;
    }
    if ((unsigned long long)v > p->limits.max_args)
        return parser_fail(p, RESP_ERR_LIMIT,
                           "Protocol error: %lld arguments exceed the limit of %zu (max-args)",
                           v, p->limits.max_args);
    if (p->query_len > p->limits.max_query)
        return parser_fail(p, RESP_ERR_LIMIT,
                           "Protocol error: command of at least %zu bytes exceeds the limit of %zu bytes (max-query)",
                           p->query_len, p->limits.max_query);
    p->want_args = (size_t)v;
    p->state = ST_BULK_DOLLAR;
    return RESP_OK;
}

/* The "$<len>\r\n" line ended. */
static resp_status_t on_bulk_len(resp_parser_t *p, int ok, long long v)
{
    unsigned long long projected;

    if (!ok || v < 0)
        return parser_fail(p, RESP_ERR_PROTOCOL, "Protocol error: invalid bulk length");
    if ((unsigned long long)v > p->limits.max_bulk)
        return parser_fail(p, RESP_ERR_LIMIT,
                           "Protocol error: bulk length %lld exceeds the limit of %zu bytes (max-bulk)",
                           v, p->limits.max_bulk);
    /* v <= LLONG_MAX and query_len is small: no overflow in 64 bits */
    projected = (unsigned long long)p->query_len + (unsigned long long)v + 2;
    if (projected > p->limits.max_query)
        return parser_fail(p, RESP_ERR_LIMIT,
                           "Protocol error: command of at least %llu bytes exceeds the limit of %zu bytes (max-query)",
                           projected, p->limits.max_query);
    p->bulk_len = (size_t)v;
    p->bulk_left = (size_t)v;
    if (v == 0) {
        data_reserve(p, 1, 0);
        p->data[p->data_len++] = '\0';
        p->state = ST_BULK_CR;
    } else {
        p->state = ST_BULK_DATA;
    }
    return RESP_OK;
}

resp_status_t resp_parser_feed(resp_parser_t *p, const char *buf, size_t len,
                               size_t *consumed, resp_command_t *cmd)
{
    size_t pos = 0;
    resp_status_t st;

    *consumed = 0;
    if (p->dead != RESP_OK)
        return p->dead;
    if (p->have_command)
        clear_command(p);

    while (pos < len) {
        switch (p->state) {
        case ST_START:
            p->query_len = 0;
            if (buf[pos] == '*') {
                pos++;
                p->query_len = 1;
                p->number_len = 0;
                p->number_cr = 0;
                p->state = ST_MB_COUNT;
            } else {
                p->state = ST_INLINE;
            }
            break;

        case ST_INLINE: {
            size_t avail = len - pos;
            const char *nl = memchr(buf + pos, '\n', avail);
            size_t take = nl ? (size_t)(nl - (buf + pos)) : avail;

            /* (the first test guards against limits lowered mid-line) */
            if (p->data_len > p->limits.max_inline ||
                take > p->limits.max_inline - p->data_len) {
                *consumed = pos;
                return parser_fail(p, RESP_ERR_LIMIT, "Protocol error: too big inline request");
            }
            data_reserve(p, take + 1, 0); /* +1: room for the last NUL */
            memcpy(p->data + p->data_len, buf + pos, take);
            p->data_len += take;
            p->query_len += take;
            pos += take;
            if (nl == NULL)
                break;
            pos++;
            p->query_len++;
            st = process_inline(p, cmd);
            if (st != RESP_NEED_MORE) {
                *consumed = pos;
                return st;
            }
            break;
        }

        case ST_MB_COUNT:
        case ST_BULK_LEN: {
            char c = buf[pos++];
            int is_count = p->state == ST_MB_COUNT;
            long long v = 0;
            int ok;

            p->query_len++;
            if (!p->number_cr) {
                if (c == '\r') {
                    p->number_cr = 1;
                    break;
                }
                if (((c >= '0' && c <= '9') || c == '-') && p->number_len < RESP_MAX_NUMBER_LEN) {
                    p->number[p->number_len++] = c;
                    break;
                }
                ok = 0; /* a byte no length can contain, or too many digits */
            } else {
                ok = c == '\n' && parse_ll(p->number, p->number_len, &v) == 0;
            }
            p->number_len = 0;
            p->number_cr = 0;
            st = is_count ? on_count(p, ok, v) : on_bulk_len(p, ok, v);
            if (st < 0) {
                *consumed = pos;
                return st;
            }
            break;
        }

        case ST_BULK_DOLLAR: {
            unsigned char c = (unsigned char)buf[pos++];
            p->query_len++;
            if (c != '$') {
                char shown[5];
                printable_byte(shown, c);
                *consumed = pos;
                return parser_fail(p, RESP_ERR_PROTOCOL, "Protocol error: expected '$', got '%s'", shown);
            }
            p->number_len = 0;
            p->number_cr = 0;
            p->state = ST_BULK_LEN;
            break;
        }

        case ST_BULK_DATA: {
            size_t avail = len - pos;
            size_t take = avail < p->bulk_left ? avail : p->bulk_left;

            /* +1 for the NUL; the declared length only caps the step */
            data_reserve(p, take + 1, p->data_len + p->bulk_left + 1);
            memcpy(p->data + p->data_len, buf + pos, take);
            p->data_len += take;
            p->bulk_left -= take;
            p->query_len += take;
            pos += take;
            if (p->bulk_left == 0) {
                p->data[p->data_len++] = '\0';
                p->state = ST_BULK_CR;
            }
            break;
        }

        case ST_BULK_CR:
        case ST_BULK_LF: {
            char c = buf[pos++];
            p->query_len++;
            if (c != (p->state == ST_BULK_CR ? '\r' : '\n')) {
                *consumed = pos;
                return parser_fail(p, RESP_ERR_PROTOCOL, "Protocol error: bulk data not followed by CRLF");
            }
            if (p->state == ST_BULK_CR) {
                p->state = ST_BULK_LF;
                break;
            }
            argv_push(p, p->bulk_len);
            if (p->argc == p->want_args) {
                *consumed = pos;
                return finish_command(p, cmd, 0);
            }
            p->state = ST_BULK_DOLLAR;
            break;
        }

        default:
            *consumed = pos;
            return parser_fail(p, RESP_ERR_PROTOCOL, "Protocol error: parser in a bad state");
        }
    }
    *consumed = pos;
    return RESP_NEED_MORE;
}

/* ------------------------------------------------------------------------
 * Byte buffer and reply writer
 * ------------------------------------------------------------------------ */

void resp_buf_init(resp_buf_t *b)
{
    buf_init(&b->raw);
    b->proto = RESP_PROTO_2;
}

void resp_buf_free(resp_buf_t *b)
{
    buf_free(&b->raw);
}

void resp_buf_clear(resp_buf_t *b)
{
    buf_clear(&b->raw);
}

/* "<type><n>\r\n" */
static void add_header_ll(buf_t *b, char type, long long n)
{
    char *w = buf_reserve(b, 24);
    size_t k = 0;
    w[k++] = type;
    k += format_ll(w + k, n);
    w[k++] = '\r';
    w[k++] = '\n';
    b->len += k;
}

static void add_header_size(buf_t *b, char type, size_t n)
{
    char *w = buf_reserve(b, 24);
    size_t k = 0;
    w[k++] = type;
    k += format_ull(w + k, n);
    w[k++] = '\r';
    w[k++] = '\n';
    b->len += k;
}

/* "<type><text with CR/LF turned into spaces>\r\n" */
static void add_line(buf_t *b, char type, const char *s, size_t n)
{
    char *w = buf_reserve(b, add_size(n, 3));
    w[0] = type;
    for (size_t i = 0; i < n; i++)
        w[1 + i] = (s[i] == '\r' || s[i] == '\n') ? ' ' : s[i];
    w[1 + n] = '\r';
    w[2 + n] = '\n';
    b->len += n + 3;
}

void resp_add_simple(resp_buf_t *b, const char *s)
{
    add_line(&b->raw, '+', s, strlen(s));
}

void resp_add_error_len(resp_buf_t *b, const char *msg, size_t len)
{
    if (len > 0 && msg[0] == '-') {
        msg++;
        len--;
    }
    if (len == 0)
        add_line(&b->raw, '-', "ERR", 3);
    else
        add_line(&b->raw, '-', msg, len);
}

void resp_add_error(resp_buf_t *b, const char *msg)
{
    resp_add_error_len(b, msg, strlen(msg));
}

void resp_add_verrorf(resp_buf_t *b, const char *fmt, va_list ap)
{
    char small[256];
    char *text = small;
    va_list ap2;
    int n;

    va_copy(ap2, ap);
    n = vsnprintf(small, sizeof small, fmt, ap2);
    va_end(ap2);
    if (n < 0) {
        resp_add_error(b, "ERR (unformattable error message)");
        return;
    }
    if ((size_t)n >= sizeof small) {
        text = xrealloc(NULL, (size_t)n + 1);
        vsnprintf(text, (size_t)n + 1, fmt, ap);
    }
    resp_add_error_len(b, text, (size_t)n);
    if (text != small)
        free(text);
}

void resp_add_errorf(resp_buf_t *b, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    resp_add_verrorf(b, fmt, ap);
    va_end(ap);
}

void resp_add_int(resp_buf_t *b, long long v)
{
    add_header_ll(&b->raw, ':', v);
}

/* "$<len>\r\n<bytes>\r\n" */
static void put_bulk(buf_t *b, const void *p, size_t len)
{
    char *w;
    add_header_size(b, '$', len);
    w = buf_reserve(b, add_size(len, 2));
    if (len)
        memcpy(w, p, len);
    w[len] = '\r';
    w[len + 1] = '\n';
    b->len += len + 2;
}

void resp_add_bulk(resp_buf_t *b, const void *p, size_t len)
{
    put_bulk(&b->raw, p, len);
}

void resp_add_bulk_str(resp_buf_t *b, const char *s)
{
    resp_add_bulk(b, s, strlen(s));
}

void resp_add_null(resp_buf_t *b)
{
    if (b->proto == RESP_PROTO_3)
        buf_append(&b->raw, "_\r\n", 3);
    else
        buf_append(&b->raw, "$-1\r\n", 5);
}

void resp_add_null_array(resp_buf_t *b)
{
    if (b->proto == RESP_PROTO_3)
        buf_append(&b->raw, "_\r\n", 3);
    else
        buf_append(&b->raw, "*-1\r\n", 5);
}

void resp_add_array(resp_buf_t *b, size_t n)
{
    add_header_size(&b->raw, '*', n);
}

void resp_add_map(resp_buf_t *b, size_t npairs)
{
    if (b->proto == RESP_PROTO_3)
        add_header_size(&b->raw, '%', npairs);
    else
        add_header_size(&b->raw, '*', add_size(npairs, npairs));
}

void resp_add_set(resp_buf_t *b, size_t n)
{
    add_header_size(&b->raw, b->proto == RESP_PROTO_3 ? '~' : '*', n);
}

/* The shortest %g text that strtod reads back to v; dst has 32 bytes. */
static size_t format_double(char *dst, double v)
{
    if (isnan(v))
        return (size_t)snprintf(dst, 32, "nan");
    if (isinf(v))
        return (size_t)snprintf(dst, 32, v > 0 ? "inf" : "-inf");
    for (int prec = 1; prec <= 17; prec++) {
        snprintf(dst, 32, "%.*g", prec, v);
        if (strtod(dst, NULL) == v)
            break;
    }
    return strlen(dst);
}

void resp_add_double(resp_buf_t *b, double v)
{
    char text[32];
    size_t n = format_double(text, v);

    if (b->proto == RESP_PROTO_3)
        add_line(&b->raw, ',', text, n);
    else
        resp_add_bulk(b, text, n);
}

void resp_add_bool(resp_buf_t *b, int v)
{
    if (b->proto == RESP_PROTO_3)
        buf_append(&b->raw, v ? "#t\r\n" : "#f\r\n", 4);
    else
        buf_append(&b->raw, v ? ":1\r\n" : ":0\r\n", 4);
}

void resp_add_verbatim(resp_buf_t *b, const char *format, const char *text, size_t len)
{
    char *w;

    if (b->proto != RESP_PROTO_3) {
        resp_add_bulk(b, text, len);
        return;
    }
    if (format == NULL || strlen(format) != 3)
        format = "txt";
    add_header_size(&b->raw, '=', add_size(len, 4));
    w = buf_reserve(&b->raw, add_size(len, 6));
    memcpy(w, format, 3);
    w[3] = ':';
    if (len)
        memcpy(w + 4, text, len);
    w[4 + len] = '\r';
    w[5 + len] = '\n';
    b->raw.len += len + 6;
}

void resp_add_command(buf_t *b, size_t argc, const char *const *argv, const size_t *argvlen)
{
    add_header_size(b, '*', argc);
    for (size_t i = 0; i < argc; i++)
        put_bulk(b, argv[i], argvlen ? argvlen[i] : strlen(argv[i]));
}

/* ------------------------------------------------------------------------
 * Reply parser
 * ------------------------------------------------------------------------ */

typedef struct reply_ctx {
    const char *buf;
    size_t len;
    size_t max_depth, max_elements, max_bulk;
    size_t elements;          /* declared children so far, all levels */
    size_t str_bytes;         /* string bytes + one NUL each */
    resp_reply_t *nodes;      /* build pass only */
    size_t next_node;
    char *strs;
    size_t next_str;
    char *err;
    size_t errlen;
} reply_ctx_t;

static resp_status_t reply_fail(reply_ctx_t *c, resp_status_t status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static resp_status_t reply_fail(reply_ctx_t *c, resp_status_t status, const char *fmt, ...)
{
    va_list ap;
    if (c->err != NULL && c->errlen > 0) {
        va_start(ap, fmt);
        vsnprintf(c->err, c->errlen, fmt, ap);
        va_end(ap);
    }
    return status;
}

enum { LINE_OK, LINE_MORE, LINE_BAD_END, LINE_TOO_LONG };

/* Find the line starting at pos, at most maxlen bytes before "\r\n".
 * On LINE_OK: *start, *n, *next (just past the "\r\n"). */
static int read_line(const reply_ctx_t *c, size_t pos, size_t maxlen,
                     size_t *n, size_t *next)
{
    size_t avail = c->len - pos;
    size_t look = (maxlen < avail) ? maxlen + 1 : avail;
    const char *cr = memchr(c->buf + pos, '\r', look);
    size_t k;

    if (cr == NULL)
        return avail > maxlen ? LINE_TOO_LONG : LINE_MORE;
    k = (size_t)(cr - (c->buf + pos));
    if (pos + k + 1 >= c->len)
        return LINE_MORE;
    if (c->buf[pos + k + 1] != '\n')
        return LINE_BAD_END;
    *n = k;
    *next = pos + k + 2;
    return LINE_OK;
}

/* Copy a string into the build arena and point node at it. */
static void reply_set_str(reply_ctx_t *c, resp_reply_t *node, const char *s, size_t n)
{
    if (node == NULL) {
        c->str_bytes = add_size(c->str_bytes, add_size(n, 1));
        return;
    }
    node->str = c->strs + c->next_str;
    node->len = n;
    if (n)
        memcpy(node->str, s, n);
    node->str[n] = '\0';
    c->next_str += n + 1;
}

/* Read a length header line at pos into *v. Returns RESP_OK, NEED_MORE or a
 * protocol error with what (e.g. "bulk") in the message. */
static resp_status_t reply_number(reply_ctx_t *c, size_t pos, const char *what,
                                  long long *v, size_t *next)
{
    size_t n;
    int r = read_line(c, pos, RESP_MAX_NUMBER_LEN, &n, next);

    if (r == LINE_MORE)
        return RESP_NEED_MORE;
    if (r != LINE_OK || parse_ll(c->buf + pos, n, v) != 0)
        return reply_fail(c, RESP_ERR_PROTOCOL, "Protocol error: invalid %s", what);
    return RESP_OK;
}

/* Parse the value at *pos. node == NULL: scan pass (count, allocate nothing);
 * else build pass into node. depth is the number of aggregates around it. */
static resp_status_t parse_value(reply_ctx_t *c, size_t *pos, size_t depth, resp_reply_t *node)
{
    size_t p, n = 0, next = 0;
    unsigned char type;
    long long v = 0;
    resp_status_t st;
    int r;

    if (*pos >= c->len)
        return RESP_NEED_MORE;
    type = (unsigned char)c->buf[*pos];
    p = *pos + 1;
    if (node != NULL)
        memset(node, 0, sizeof *node);

    switch (type) {
    case '+':
    case '-':
        r = read_line(c, p, c->max_bulk, &n, &next);
        if (r == LINE_MORE)
            return RESP_NEED_MORE;
        if (r == LINE_TOO_LONG)
            return reply_fail(c, RESP_ERR_LIMIT,
                              "Protocol error: reply line longer than %zu bytes (max-bulk)", c->max_bulk);
        if (r == LINE_BAD_END)
            return reply_fail(c, RESP_ERR_PROTOCOL, "Protocol error: reply line not ended by CRLF");
        if (node)
            node->type = type == '+' ? RESP_REPLY_STATUS : RESP_REPLY_ERROR;
        reply_set_str(c, node, c->buf + p, n);
        break;

    case ':':
        st = reply_number(c, p, "integer reply", &v, &next);
        if (st != RESP_OK)
            return st;
        if (node) {
            node->type = RESP_REPLY_INTEGER;
            node->integer = v;
        }
        break;

    case '_':
        r = read_line(c, p, 0, &n, &next);
        if (r == LINE_MORE)
            return RESP_NEED_MORE;
        if (r != LINE_OK)
            return reply_fail(c, RESP_ERR_PROTOCOL, "Protocol error: invalid null reply");
        if (node)
            node->type = RESP_REPLY_NIL;
        break;

    case '#':
        r = read_line(c, p, 1, &n, &next);
        if (r == LINE_MORE)
            return RESP_NEED_MORE;
        if (r != LINE_OK || n != 1 || (c->buf[p] != 't' && c->buf[p] != 'f'))
            return reply_fail(c, RESP_ERR_PROTOCOL, "Protocol error: invalid boolean reply");
        if (node) {
            node->type = RESP_REPLY_BOOL;
            node->integer = c->buf[p] == 't';
        }
        break;

    case ',': {
        char text[RESP_MAX_DOUBLE_LEN + 1];
        char *end;
        double d;

        r = read_line(c, p, RESP_MAX_DOUBLE_LEN, &n, &next);
        if (r == LINE_MORE)
            return RESP_NEED_MORE;
        if (r != LINE_OK || n == 0 || is_split_blank((unsigned char)c->buf[p]))
            return reply_fail(c, RESP_ERR_PROTOCOL, "Protocol error: invalid double reply");
        memcpy(text, c->buf + p, n);
        text[n] = '\0';
        d = strtod(text, &end);
        if (end != text + n)
            return reply_fail(c, RESP_ERR_PROTOCOL, "Protocol error: invalid double reply");
        if (node) {
            node->type = RESP_REPLY_DOUBLE;
            node->dval = d;
        }
        reply_set_str(c, node, c->buf + p, n);
        break;
    }

    case '(':
        r = read_line(c, p, c->max_bulk, &n, &next);
        if (r == LINE_MORE)
            return RESP_NEED_MORE;
        if (r == LINE_TOO_LONG)
            return reply_fail(c, RESP_ERR_LIMIT,
                              "Protocol error: reply line longer than %zu bytes (max-bulk)", c->max_bulk);
        {
            size_t i = (n > 0 && c->buf[p] == '-') ? 1 : 0;
            int good = r == LINE_OK && n > i;
            for (; good && i < n; i++)
                good = c->buf[p + i] >= '0' && c->buf[p + i] <= '9';
            if (!good)
                return reply_fail(c, RESP_ERR_PROTOCOL, "Protocol error: invalid big number reply");
        }
        if (node)
            node->type = RESP_REPLY_BIGNUM;
        reply_set_str(c, node, c->buf + p, n);
        break;

    case '$':
    case '!':
    case '=': {
        size_t data;

        st = reply_number(c, p, "bulk length", &v, &data);
        if (st != RESP_OK)
            return st;
        if (v == -1 && type == '$') {
            if (node)
                node->type = RESP_REPLY_NIL;
            next = data;
            break;
        }
        if (v < 0)
            return reply_fail(c, RESP_ERR_PROTOCOL, "Protocol error: invalid bulk length");
        if ((unsigned long long)v > c->max_bulk)
            return reply_fail(c, RESP_ERR_LIMIT,
                              "Protocol error: bulk length %lld exceeds the limit of %zu bytes (max-bulk)",
                              v, c->max_bulk);
        n = (size_t)v;
        if (c->len - data < n || c->len - data - n < 2)
            return RESP_NEED_MORE;
        if (c->buf[data + n] != '\r' || c->buf[data + n + 1] != '\n')
            return reply_fail(c, RESP_ERR_PROTOCOL, "Protocol error: bulk data not followed by CRLF");
        next = data + n + 2;
        if (type == '=') {
            /* "xxx:" where xxx are printable (format[] is handed out as a C string) */
            int good = n >= 4 && c->buf[data + 3] == ':';
            for (size_t i = 0; good && i < 3; i++)
                good = c->buf[data + i] > ' ' && c->buf[data + i] < 0x7f;
            if (!good)
                return reply_fail(c, RESP_ERR_PROTOCOL, "Protocol error: invalid verbatim string");
            if (node) {
                node->type = RESP_REPLY_VERBATIM;
                memcpy(node->format, c->buf + data, 3);
                node->format[3] = '\0';
            }
            reply_set_str(c, node, c->buf + data + 4, n - 4);
        } else {
            if (node)
                node->type = type == '$' ? RESP_REPLY_BULK : RESP_REPLY_ERROR;
            reply_set_str(c, node, c->buf + data, n);
        }
        break;
    }

    case '*':
    case '%':
    case '~':
    case '>': {
        size_t count;
        resp_reply_t *children = NULL;

        st = reply_number(c, p, "multibulk length", &v, &next);
        if (st != RESP_OK)
            return st;
        if (v == -1 && type == '*') {
            if (node)
                node->type = RESP_REPLY_NIL;
            break;
        }
        if (v < 0)
            return reply_fail(c, RESP_ERR_PROTOCOL, "Protocol error: invalid multibulk length");
        if (depth + 1 > c->max_depth)
            return reply_fail(c, RESP_ERR_LIMIT,
                              "Protocol error: reply nested deeper than %zu levels (max-depth)", c->max_depth);
        if ((unsigned long long)v > c->max_elements ||
            (type == '%' && (unsigned long long)v > c->max_elements / 2))
            return reply_fail(c, RESP_ERR_LIMIT,
                              "Protocol error: reply has more than %zu elements (max-elements)", c->max_elements);
        count = type == '%' ? (size_t)v * 2 : (size_t)v;
        if (count > c->max_elements - c->elements)
            return reply_fail(c, RESP_ERR_LIMIT,
                              "Protocol error: reply has more than %zu elements (max-elements)", c->max_elements);
        c->elements += count;
        if (node) {
            node->type = type == '*' ? RESP_REPLY_ARRAY
                       : type == '%' ? RESP_REPLY_MAP
                       : type == '~' ? RESP_REPLY_SET : RESP_REPLY_PUSH;
            node->count = count;
            children = c->nodes + c->next_node;
            node->elements = count ? children : NULL;
            c->next_node += count;
        }
        for (size_t i = 0; i < count; i++) {
            st = parse_value(c, &next, depth + 1, children ? &children[i] : NULL);
            if (st != RESP_OK)
                return st;
        }
        break;
    }

    default: {
        char shown[5];
        printable_byte(shown, type);
        return reply_fail(c, RESP_ERR_PROTOCOL, "Protocol error: unexpected reply type byte '%s'", shown);
    }
    }
    *pos = next;
    return RESP_OK;
}

resp_status_t resp_reply_parse(const char *buf, size_t len,
                               const resp_reply_limits_t *limits,
                               resp_reply_t **out, size_t *consumed,
                               char *err, size_t errlen)
{
    resp_reply_limits_t lim = RESP_REPLY_LIMITS_DEFAULT;
    reply_ctx_t c;
    size_t pos = 0, nodes, bytes;
    resp_status_t st;
    char *mem;

    *out = NULL;
    *consumed = 0;
    if (err != NULL && errlen > 0)
        err[0] = '\0';
    if (limits != NULL) {
        if (limits->max_depth)
            lim.max_depth = limits->max_depth;
        if (limits->max_elements)
            lim.max_elements = limits->max_elements;
        if (limits->max_bulk)
            lim.max_bulk = limits->max_bulk;
    }
    if (lim.max_depth > RESP_REPLY_DEPTH_CAP)
        lim.max_depth = RESP_REPLY_DEPTH_CAP;

    memset(&c, 0, sizeof c);
    c.buf = buf;
    c.len = len;
    c.max_depth = lim.max_depth;
    c.max_elements = lim.max_elements;
    c.max_bulk = lim.max_bulk;
    c.err = err;
    c.errlen = errlen;

    /* pass 1: is one whole, valid reply there? */
    st = parse_value(&c, &pos, 0, NULL);
    if (st != RESP_OK)
        return st;

    /* pass 2: build it in one allocation */
    nodes = add_size(c.elements, 1);
    if (nodes > SIZE_MAX / sizeof(resp_reply_t))
        add_size(SIZE_MAX, 1); /* aborts */
    bytes = add_size(nodes * sizeof(resp_reply_t), c.str_bytes);
    mem = xrealloc(NULL, bytes);
    c.nodes = (resp_reply_t *)(void *)mem;
    c.strs = mem + nodes * sizeof(resp_reply_t);
    c.next_node = 1;
    c.next_str = 0;
    c.elements = 0;
    pos = 0;
    st = parse_value(&c, &pos, 0, &c.nodes[0]);
    if (st != RESP_OK || c.next_node != nodes || c.next_str != c.str_bytes) {
        /* cannot happen: both passes run the same code on the same bytes */
        fprintf(stderr, "hourglass: resp reply parser passes disagree\n");
        abort();
    }
    *out = c.nodes;
    *consumed = pos;
    return RESP_OK;
}

void resp_reply_free(resp_reply_t *r)
{
    free(r);
}

const char *resp_reply_type_name(resp_reply_type_t t)
{
    switch (t) {
    case RESP_REPLY_STATUS: return "status";
    case RESP_REPLY_ERROR: return "error";
    case RESP_REPLY_INTEGER: return "integer";
    case RESP_REPLY_BULK: return "bulk";
    case RESP_REPLY_NIL: return "nil";
    case RESP_REPLY_ARRAY: return "array";
    case RESP_REPLY_MAP: return "map";
    case RESP_REPLY_SET: return "set";
    case RESP_REPLY_PUSH: return "push";
    case RESP_REPLY_DOUBLE: return "double";
    case RESP_REPLY_BOOL: return "bool";
    case RESP_REPLY_BIGNUM: return "bignum";
    case RESP_REPLY_VERBATIM: return "verbatim";
    }
    return "unknown";
}
