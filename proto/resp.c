/*
 * proto/resp.c — the wire primitives both sides of the codec share (resp.h).
 *
 * Decimal numbers in and out, the printable form of a byte for messages, the
 * inline blank set, and the header/bulk writers that the server's reply
 * writer (reply.c) and the client's command writer (client.c) both use. Pure
 * functions and appends to a caller's buffer: no state, any thread.
 */
#include "proto/resp.h"

#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

size_t resp_size_add(size_t a, size_t b)
{
    if (a > SIZE_MAX - b) {
        fprintf(stderr, "hourglass: size overflow in resp\n");
        abort();
    }
    return a + b;
}

int resp_parse_ll(const char *s, size_t n, long long *out)
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

void resp_printable_byte(char dst[5], unsigned char c)
{
    if (c >= 0x20 && c < 0x7f && c != '\\' && c != '\'')
        snprintf(dst, 5, "%c", c);
    else
        snprintf(dst, 5, "\\x%02x", c);
}

int resp_hex_value(unsigned char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

int resp_is_blank(unsigned char c)
{
    return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f';
}

/* Write u in decimal into dst (room for 20 bytes); returns the length. */
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

void resp_put_header(buf_t *b, char type, size_t n)
{
    char *w = buf_reserve(b, 24);
    size_t k = 0;
    w[k++] = type;
    k += format_ull(w + k, n);
    w[k++] = '\r';
    w[k++] = '\n';
    b->len += k;
}

void resp_put_bulk(buf_t *b, const void *p, size_t len)
{
    char *w;
    resp_put_header(b, '$', len);
    w = buf_reserve(b, resp_size_add(len, 2));
    if (len)
        memcpy(w, p, len);
    w[len] = '\r';
    w[len + 1] = '\n';
    b->len += len + 2;
}
