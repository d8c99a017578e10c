/*
 * base/buf.c — the growable byte buffer (contract: buf.h).
 *
 * Invariant: data == NULL iff cap == 0; len <= cap.
 */
#include "base/buf.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"

void buf_init(buf_t *b)
{
    b->data = NULL;
    b->len = b->cap = 0;
}

void buf_free(buf_t *b)
{
    free(b->data);
    buf_init(b);
}

void buf_clear(buf_t *b)
{
    b->len = 0;
}

char *buf_reserve(buf_t *b, size_t n)
{
    if (n > ((size_t)-1) / 2 - b->len)
        xalloc_oom(n);
    size_t need = b->len + n;
    if (need > b->cap) {
        size_t cap = b->cap ? b->cap : 64;
        while (cap < need)
            cap *= 2;
        b->data = xrealloc(b->data, cap);
        b->cap = cap;
    }
    return b->data + b->len;
}

void buf_append(buf_t *b, const void *p, size_t n)
{
    if (n == 0)
        return;
    memcpy(buf_reserve(b, n), p, n);
    b->len += n;
}

void buf_append_str(buf_t *b, const char *s)
{
    buf_append(b, s, strlen(s));
}

void buf_vprintf(buf_t *b, const char *fmt, va_list ap)
{
    char small[512];
    va_list copy;
    va_copy(copy, ap);
    int n = vsnprintf(small, sizeof small, fmt, copy);
    va_end(copy);
    if (n < 0)
        return;
    if ((size_t)n < sizeof small) {
        buf_append(b, small, (size_t)n);
        return;
    }
    char *dst = buf_reserve(b, (size_t)n + 1);
    vsnprintf(dst, (size_t)n + 1, fmt, ap);
    b->len += (size_t)n;
}

void buf_printf(buf_t *b, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    buf_vprintf(b, fmt, ap);
    va_end(ap);
}

void buf_consume(buf_t *b, size_t n)
{
    if (n >= b->len) {
        b->len = 0;
        return;
    }
    memmove(b->data, b->data + n, b->len - n);
    b->len -= n;
}

const char *buf_cstr(buf_t *b)
{
    buf_reserve(b, 1);
    b->data[b->len] = '\0';
    return b->data;
}

size_t buf_trim(buf_t *b, size_t keep)
{
    if (b->cap <= keep)
        return 0;
    size_t old = b->cap;
    if (b->len == 0) {
        buf_free(b);
        return old;
    }
    size_t cap = b->len > keep ? b->len : keep;
    if (cap >= b->cap)
        return 0;
    b->data = xrealloc(b->data, cap);
    b->cap = cap;
    return old - cap;
}
