/*
 * proto/reply.c — the server's reply writer (contract: reply.h).
 *
 * Every writer appends to a resp_buf_t through base/buf.h (the only
 * allocation path; out of memory aborts). Headers and bulks are the shared
 * primitives of resp.c, so a reply and a client's request are framed by the
 * same code. RESP3-only types fall back to their RESP2 form as Redis does.
 *
 * Runs on whichever thread owns the buffer: the broker's loop thread for
 * immediate replies, its storage thread for a job's reply.
 */
#include "proto/reply.h"

#include "base/alloc.h"
#include "base/buf.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

/* "<type><text with CR/LF turned into spaces>\r\n" */
static void add_line(buf_t *b, char type, const char *s, size_t n)
{
    char *w = buf_reserve(b, resp_size_add(n, 3));
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

void resp_add_bulk(resp_buf_t *b, const void *p, size_t len)
{
    resp_put_bulk(&b->raw, p, len);
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
    resp_put_header(&b->raw, '*', n);
}

void resp_add_map(resp_buf_t *b, size_t npairs)
{
    if (b->proto == RESP_PROTO_3)
        resp_put_header(&b->raw, '%', npairs);
    else
        resp_put_header(&b->raw, '*', resp_size_add(npairs, npairs));
}

void resp_add_set(resp_buf_t *b, size_t n)
{
    resp_put_header(&b->raw, b->proto == RESP_PROTO_3 ? '~' : '*', n);
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
    resp_put_header(&b->raw, '=', resp_size_add(len, 4));
    w = buf_reserve(&b->raw, resp_size_add(len, 6));
    memcpy(w, format, 3);
    w[3] = ':';
    if (len)
        memcpy(w + 4, text, len);
    w[4 + len] = '\r';
    w[5 + len] = '\n';
    b->raw.len += len + 6;
}
