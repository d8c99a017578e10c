/*
 * proto/request.c — the server's request parser (contract: request.h).
 *
 * A state machine (states below), fed whatever the socket delivered. A
 * length header that arrived whole is read at once (header_line_whole: one
 * pass to its CR), and so is an argument that arrived whole, header, bytes
 * and CRLF (take_whole_arguments: one copy, no state per byte); what is
 * split across reads, or malformed, is read a byte at a time, which is also
 * what names the error. Every byte it keeps is copied into one arena (p->data): a
 * multibulk command's arguments are stored back to back, each followed by a
 * NUL; an inline line is collected whole and then split in place into the
 * same layout (the split only ever shrinks text, so the write cursor never
 * overtakes the read cursor). Argument pointers are computed only when the
 * command is complete, so the arena may move while it grows.
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
 * No globals; a parser belongs to one connection, on the broker's loop thread.
 */
#include "proto/request.h"

#include "base/alloc.h"

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Buffers above these sizes are released once their command is done. */
#define RESP_PARSER_KEEP_BYTES  (64u * 1024)
#define RESP_PARSER_KEEP_ARGS   1024
#define RESP_PARSER_FIRST_BYTES 256
#define RESP_PARSER_FIRST_ARGS  8

enum {
    ST_START,       /* between commands: the next byte picks the form */
    ST_INLINE,      /* collecting an inline line up to '\n' */
    ST_MB_COUNT,    /* reading the digits after '*' up to "\r\n" */
    ST_BULK_DOLLAR, /* expecting the '$' of the next argument */
    ST_BULK_LEN,    /* reading the digits after '$' up to "\r\n" */
    ST_BULK_DATA,   /* copying bulk_left more bytes of the argument */
    ST_BULK_CR,     /* expecting the '\r' after the argument */
    ST_BULK_LF      /* expecting the '\n' after the argument */
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
    size_t need = resp_size_add(p->data_len, extra);
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
static inline void argv_push(resp_parser_t *p, size_t len)
{
    if (p->argc == p->argv_cap) {
        size_t cap = p->argv_cap ? p->argv_cap * 2 : RESP_PARSER_FIRST_ARGS;
        if (cap > SIZE_MAX / sizeof(resp_arg_t))
            cap = resp_size_add(p->argv_cap, 1);
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

        while (r < n && resp_is_blank((unsigned char)s[r]))
            r++;
        if (r == n)
            break;
        start = w;
        while (!done) {
            if (in_dq) {
                if (r == n)
                    return -1;
                if (s[r] == '\\' && r + 3 < n && s[r + 1] == 'x' && resp_hex_value((unsigned char)s[r + 2]) >= 0 &&
                    resp_hex_value((unsigned char)s[r + 3]) >= 0) {
                    s[w++] =
                        (char)(resp_hex_value((unsigned char)s[r + 2]) * 16 + resp_hex_value((unsigned char)s[r + 3]));
                    r += 4;
                } else if (s[r] == '\\' && r + 1 < n) {
                    char c;
                    switch (s[r + 1]) {
                    case 'n':
                        c = '\n';
                        break;
                    case 'r':
                        c = '\r';
                        break;
                    case 't':
                        c = '\t';
                        break;
                    case 'b':
                        c = '\b';
                        break;
                    case 'a':
                        c = '\a';
                        break;
                    default:
                        c = s[r + 1];
                        break;
                    }
                    s[w++] = c;
                    r += 2;
                } else if (s[r] == '"') {
                    /* a closing quote must be followed by a blank or the end */
                    if (r + 1 < n && !resp_is_blank((unsigned char)s[r + 1]))
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
                    if (r + 1 < n && !resp_is_blank((unsigned char)s[r + 1]))
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
        return parser_fail(p, RESP_ERR_LIMIT, "Protocol error: %lld arguments exceed the limit of %zu (max-args)",
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

/* The fast path for a length header: when the bytes buf[0..avail) hold the
 * whole rest of a header line, "<up to RESP_MAX_NUMBER_LEN digits or
 * '-'>\r\n", with nothing of it read yet, store the header's length with its
 * CRLF in *taken, its value in *v and its parse result in *ok, and return 1.
 * Return 0 otherwise (the line is split across reads, too long, or holds a
 * byte no length can contain): the byte-at-a-time path then reads it and
 * reports what it finds, so both paths accept and refuse the same lines. */
static inline int header_line_whole(const char *buf, size_t avail, size_t *taken, int *ok, long long *v)
{
    size_t scan = avail < RESP_MAX_NUMBER_LEN + 1 ? avail : RESP_MAX_NUMBER_LEN + 1;
    unsigned long long plain = 0; /* the value of the leading digits (read when at most 18) */
    size_t digits = 0, end;

    /* one pass up to the CR, which is also where the digits end: a header is
     * a byte or two, shorter than a memchr call */
    while (digits < scan && (unsigned)(buf[digits] - '0') <= 9) {
        plain = plain * 10 + (unsigned)(buf[digits] - '0');
        digits++;
    }
    end = digits;
    if (end == scan || buf[end] != '\r') { /* past a '-' too: what resp_parse_ll judges */
        while (end < scan && ((unsigned)(buf[end] - '0') <= 9 || buf[end] == '-'))
            end++;
    }
    if (end == scan || buf[end] != '\r' || end + 1 >= avail || buf[end + 1] != '\n')
        return 0;
    /* up to 18 digits, no sign, no leading zero: the common case, which
     * cannot overflow; anything else goes through the full parse */
    if (end == digits && digits >= 1 && digits <= 18 && (buf[0] != '0' || digits == 1)) {
        *ok = 1;
        *v = (long long)plain;
    } else {
        *ok = resp_parse_ll(buf, end, v) == 0;
    }
    *taken = end + 2;
    return 1;
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
        return parser_fail(p, RESP_ERR_LIMIT, "Protocol error: %lld arguments exceed the limit of %zu (max-args)", v,
                           p->limits.max_args);
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
                           "Protocol error: bulk length %lld exceeds the limit of %zu bytes (max-bulk)", v,
                           p->limits.max_bulk);
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

/* The fast path for arguments: from the '$' of the next argument, take each
 * one that lies whole in buf[0..avail) — "$<len>\r\n", its bytes and their
 * CRLF — in one step, up to the command's last; returns the bytes taken.
 * It stops, taking nothing of it, at an argument that is split across reads
 * or that would be refused (a bad header, a length over max-bulk or
 * max-query, no CRLF after the data): the state machine then reads that one
 * byte by byte and names its error, so both paths accept and refuse the
 * same bytes, count the same query_len and grow the arena alike. */
static size_t take_whole_arguments(resp_parser_t *p, const char *buf, size_t avail)
{
    size_t pos = 0;

    while (p->argc < p->want_args && avail - pos >= 4 && buf[pos] == '$') {
        size_t taken, head, n;
        int ok;
        long long v;

        if (!header_line_whole(buf + pos + 1, avail - pos - 1, &taken, &ok, &v) || !ok || v < 0)
            break;
        head = 1 + taken;
        /* v <= LLONG_MAX and query_len is small: no overflow in 64 bits */
        if ((unsigned long long)v > p->limits.max_bulk ||
            (unsigned long long)p->query_len + head + (unsigned long long)v + 2 > p->limits.max_query)
            break;
        n = (size_t)v;
        if (avail - pos - head < n + 2 || buf[pos + head + n] != '\r' || buf[pos + head + n + 1] != '\n')
            break;
        if (p->data_cap - p->data_len < n + 1)
            data_reserve(p, n + 1, p->data_len + n + 1);
        memcpy(p->data + p->data_len, buf + pos + head, n);
        p->data_len += n;
        p->data[p->data_len++] = '\0';
        argv_push(p, n);
        p->query_len += head + n + 2;
        pos += head + n + 2;
    }
    return pos;
}

resp_status_t resp_parser_feed(resp_parser_t *p, const char *buf, size_t len, size_t *consumed, resp_command_t *cmd)
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
            if (p->data_len > p->limits.max_inline || take > p->limits.max_inline - p->data_len) {
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
            int is_count = p->state == ST_MB_COUNT;
            long long v = 0;
            int ok;
            size_t taken;
            char c;

            if (p->number_len == 0 && !p->number_cr && header_line_whole(buf + pos, len - pos, &taken, &ok, &v)) {
                pos += taken;
                p->query_len += taken;
                st = is_count ? on_count(p, ok, v) : on_bulk_len(p, ok, v);
                if (st < 0) {
                    *consumed = pos;
                    return st;
                }
                break;
            }
            c = buf[pos++];
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
                ok = c == '\n' && resp_parse_ll(p->number, p->number_len, &v) == 0;
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
            pos += take_whole_arguments(p, buf + pos, len - pos);
            if (p->argc == p->want_args) {
                *consumed = pos;
                return finish_command(p, cmd, 0);
            }
            if (pos == len)
                break;
            unsigned char c = (unsigned char)buf[pos++];
            p->query_len++;
            if (c != '$') {
                char shown[5];
                resp_printable_byte(shown, c);
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
            char c;
            if (p->state == ST_BULK_CR && len - pos >= 2 && buf[pos] == '\r' && buf[pos + 1] == '\n') {
                pos++; /* the whole CRLF is here: take its CR, the LF below */
                p->query_len++;
                p->state = ST_BULK_LF;
            }
            c = buf[pos++];
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
