/*
 * proto/reply.h — the server's reply writer: replies to RESP bytes in a
 * resp_buf_t, in the connection's protocol (RESP2 or RESP3).
 *
 * Server side only (hourglass-broker, proto/libresp_server.la); the client
 * writes its requests with proto/client.h's resp_add_command.
 */
#ifndef HG_PROTO_REPLY_H
#define HG_PROTO_REPLY_H

#include <stdarg.h>
#include <stddef.h>

#include "base/buf.h"
#include "proto/resp.h"

/* ------------------------------------------------------------------------
 * The reply writer
 * ------------------------------------------------------------------------
 *
 * resp_buf_t is a reply being written: a byte buffer (base/buf.h; raw.data
 * [0..raw.len) are the bytes) and the protocol it is written in. proto
 * selects how replies are written: RESP_PROTO_2 (default) or RESP_PROTO_3
 * (after HELLO 3). Where RESP3 has a type RESP2 lacks, the RESP2 form is what
 * Redis sends: null -> "$-1" / "*-1", map of n pairs -> array of 2n, set ->
 * array, double -> bulk string, bool -> integer 0/1, verbatim -> bulk string.
 *
 * Writers never fail (out of memory aborts, base/alloc.h) and return nothing.
 */

typedef struct resp_buf {
    buf_t raw; /* the bytes written so far */
    int proto; /* RESP_PROTO_2 or RESP_PROTO_3 */
} resp_buf_t;

#define RESP_BUF_INIT          \
    {                          \
        BUF_INIT, RESP_PROTO_2 \
    }

/* An empty RESP2 reply; allocates nothing. */
void resp_buf_init(resp_buf_t *b);
/* Free the bytes (proto kept). */
void resp_buf_free(resp_buf_t *b);
/* Drop all bytes, keep the allocation and proto. */
void resp_buf_clear(resp_buf_t *b);

/* "+<s>\r\n". A CR or LF inside s becomes a space, so the reply stays one line. */
void resp_add_simple(resp_buf_t *b, const char *s);

/* "-<msg>\r\n". msg carries its code: "ERR unknown command", "NOPERM ...".
 * A leading '-' in msg is dropped (so "-ERR x" works too); CR and LF inside
 * become spaces; an empty msg is sent as "-ERR". */
void resp_add_error(resp_buf_t *b, const char *msg);
void resp_add_error_len(resp_buf_t *b, const char *msg, size_t len);
/* resp_add_error with printf formatting: resp_add_errorf(b, "ERR no group '%s'", g). */
void resp_add_errorf(resp_buf_t *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void resp_add_verrorf(resp_buf_t *b, const char *fmt, va_list ap) __attribute__((format(printf, 2, 0)));

/* ":<v>\r\n" */
void resp_add_int(resp_buf_t *b, long long v);
/* "$<len>\r\n<bytes>\r\n", binary safe; len 0 gives "$0\r\n\r\n". */
void resp_add_bulk(resp_buf_t *b, const void *p, size_t len);
/* resp_add_bulk of a C string. */
void resp_add_bulk_str(resp_buf_t *b, const char *s);
/* A null bulk: "$-1\r\n" (RESP2) / "_\r\n" (RESP3). */
void resp_add_null(resp_buf_t *b);
/* A null array: "*-1\r\n" (RESP2) / "_\r\n" (RESP3). */
void resp_add_null_array(resp_buf_t *b);
/* "*<n>\r\n"; the caller then adds n elements. */
void resp_add_array(resp_buf_t *b, size_t n);
/* A map of n pairs: "%<n>\r\n" (RESP3) / "*<2n>\r\n" (RESP2); then 2n elements. */
void resp_add_map(resp_buf_t *b, size_t npairs);
/* A set: "~<n>\r\n" (RESP3) / "*<n>\r\n" (RESP2); then n elements. */
void resp_add_set(resp_buf_t *b, size_t n);
/* ",<v>\r\n" (RESP3) / a bulk string (RESP2); the shortest text that reads
 * back to the same double; "inf", "-inf", "nan" for the special values.
 * Uses snprintf, so LC_NUMERIC must be "C" (the default until a program
 * calls setlocale); the reply parser's strtod has the same requirement. */
void resp_add_double(resp_buf_t *b, double v);
/* "#t\r\n"/"#f\r\n" (RESP3) / ":1\r\n"/":0\r\n" (RESP2). */
void resp_add_bool(resp_buf_t *b, int v);
/* Verbatim text: "=<len+4>\r\ntxt:<text>\r\n" (RESP3) / a bulk (RESP2).
 * format is three characters ("txt", "mkd"); anything else is sent as "txt". */
void resp_add_verbatim(resp_buf_t *b, const char *format, const char *text, size_t len);

#endif
