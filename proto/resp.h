/*
 * proto/resp.h — what both sides of the RESP wire format share.
 *
 * The codec is cut by side, so each program links only what it runs:
 *
 *   proto/request.h  bytes from a client  -> commands (argc/argv)     broker
 *   proto/reply.h    replies              -> bytes (resp_buf_t)       broker
 *   proto/client.h   commands             -> bytes (resp_add_command) client
 *                    bytes from a server  -> a reply tree             client
 *
 * This header holds the little they have in common: the status codes of the
 * two parsers, the protocol versions, the longest length header, and a few
 * wire primitives (decimal numbers, headers, bulks) that the writer on either
 * side and both parsers use, so there is one copy of each. Wire format only:
 * no sockets, no event loop, no globals, no logging; every object belongs to
 * one thread at a time.
 *
 * Every byte from the network is hostile (CONTRIBUTING.md): both parsers are
 * bounded by named limits and never allocate on the strength of a declared
 * length. Out of memory aborts the process (base/alloc.h); no function of the
 * codec returns an allocation failure.
 */
#ifndef HG_PROTO_RESP_H
#define HG_PROTO_RESP_H

#include <stddef.h>

#include "base/buf.h"

/* The result of feeding either parser. */
typedef enum resp_status {
    RESP_OK = 0,            /* one complete command / reply was produced */
    RESP_NEED_MORE = 1,     /* the input ends inside a command / reply */
    RESP_ERR_PROTOCOL = -1, /* malformed input (bad header, bad length, ...) */
    RESP_ERR_LIMIT = -2     /* well-formed so far but over a configured limit */
} resp_status_t;

/* The protocol a reply is written in: RESP2 (the default) or RESP3 (after
 * HELLO 3). The reply parser reads both. */
#define RESP_PROTO_2 2
#define RESP_PROTO_3 3

/* The longest length header accepted: "-9223372036854775808" (a long long). */
#define RESP_MAX_NUMBER_LEN 20

/* ---- wire primitives (used by proto/ itself) ------------------------------ */

/* a + b; aborts the process on overflow (only reachable with absurd sizes). */
size_t resp_size_add(size_t a, size_t b);

/* Parse n bytes of decimal exactly as Redis's string2ll: optional '-', no
 * '+', no blanks, no leading zeros (but "0"), no "-0", no overflow.
 * Returns 0 and *out, or -1. */
int resp_parse_ll(const char *s, size_t n, long long *out);

/* dst gets a byte for an error message: the byte itself when printable, else
 * "\xHH" (NUL-terminated; dst has room for 5 bytes). */
void resp_printable_byte(char dst[5], unsigned char c);

/* 1 for the blanks that separate inline arguments (space, \t \n \r \v \f). */
int resp_is_blank(unsigned char c);

/* The value of a hex digit (0-9, a-f, A-F), or -1 for any other byte (the
 * \xHH escapes of inline commands; the library's %XX URI escapes). */
int resp_hex_value(unsigned char c);

/* Append "<type><n>\r\n" (an aggregate or bulk header) to b. */
void resp_put_header(buf_t *b, char type, size_t n);

/* Append "$<len>\r\n<bytes>\r\n" to b; binary safe, len 0 gives "$0\r\n\r\n". */
void resp_put_bulk(buf_t *b, const void *p, size_t len);

#endif
