/*
 * base/buf.h — the growable byte buffer (Redis's sds role, kept plain).
 *
 * data[0..len) are the bytes; cap is the allocation. data is NULL until the
 * first write. Binary safe; buf_cstr adds a NUL after the bytes (not counted
 * in len) for callers that want a C string. Growth doubles, so n appends cost
 * O(n) amortised; buf_trim gives memory back after a burst, so one large
 * reply does not pin its capacity for the life of a connection.
 *
 * Writers never fail (out of memory aborts, base/alloc.h) and return nothing.
 * A buf_t belongs to one thread at a time.
 */
#ifndef HG_BASE_BUF_H
#define HG_BASE_BUF_H

#include <stdarg.h>
#include <stddef.h>

typedef struct buf {
    char *data; /* NULL until the first write */
    size_t len; /* bytes in use */
    size_t cap; /* bytes allocated */
} buf_t;

#define BUF_INIT   \
    {              \
        NULL, 0, 0 \
    }

/* An empty buffer; allocates nothing. */
void buf_init(buf_t *b);

/* Free the bytes and return to the state after init. Safe to call twice. */
void buf_free(buf_t *b);

/* Drop all bytes, keep the allocation. */
void buf_clear(buf_t *b);

/* Make room for n more bytes and return a pointer to them (data + len); the
 * caller writes there (e.g. recv) and then adds what it wrote to len. */
char *buf_reserve(buf_t *b, size_t n);

/* Append n raw bytes. */
void buf_append(buf_t *b, const void *p, size_t n);

/* Append a C string (without its NUL). */
void buf_append_str(buf_t *b, const char *s);

/* Append printf output. */
void buf_printf(buf_t *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void buf_vprintf(buf_t *b, const char *fmt, va_list ap) __attribute__((format(printf, 2, 0)));

/* Remove the first n bytes (n > len removes all), moving the rest down. */
void buf_consume(buf_t *b, size_t n);

/* The bytes as a C string: a NUL is kept after data[len] (not counted in
 * len). Never NULL ("" for an empty buffer). Valid until the next write. */
const char *buf_cstr(buf_t *b);

/* When more than keep bytes are allocated, shrink the allocation to
 * max(len, keep) (free it when empty). Returns the bytes given back. */
size_t buf_trim(buf_t *b, size_t keep);

#endif
