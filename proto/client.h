/*
 * proto/client.h — the client side of RESP: requests to bytes
 * (resp_add_command) and bytes from a server to a reply tree.
 *
 * Client side only (libhourglass, the test and bench clients;
 * proto/libresp_client.la). Blocking I/O is the caller's: these functions
 * only frame and parse bytes.
 */
#ifndef HG_PROTO_CLIENT_H
#define HG_PROTO_CLIENT_H

#include <stddef.h>

#include "base/buf.h"
#include "proto/resp.h"

/* A request as clients send it: "*<argc>\r\n" and one bulk per argument,
 * appended to a plain byte buffer (a request has no protocol version).
 * argvlen may be NULL when every argv[i] is a C string. */
void resp_add_command(buf_t *b, size_t argc, const char *const *argv, const size_t *argvlen);

/* ------------------------------------------------------------------------
 * Reply parser (client side)
 * ------------------------------------------------------------------------
 *
 * RESP2 (+ - : $ *) and RESP3 (_ , # ( = ! % ~ >). Attributes ('|') and
 * streamed strings ("$?") are refused as protocol errors.
 *
 * Stateless and two-pass: a first pass walks the input and checks that one
 * whole reply is present and within limits, allocating nothing; only then is
 * the tree built, in ONE allocation (nodes, then all string bytes), so one
 * free() releases it. When the input ends inside the reply, nothing is
 * consumed: append the next bytes and call again with the whole buffer. A
 * retry re-walks headers but jumps over bulk payloads, so a big payload
 * arriving in many reads costs little.
 */

#define RESP_DEFAULT_REPLY_MAX_DEPTH    32                   /* nesting of aggregates */
#define RESP_DEFAULT_REPLY_MAX_ELEMENTS (1024u * 1024)       /* elements in one reply, all levels */
#define RESP_DEFAULT_REPLY_MAX_BULK     (512u * 1024 * 1024) /* bytes in one string */
#define RESP_REPLY_DEPTH_CAP            512                  /* max_depth is clamped to this */

typedef struct resp_reply_limits {
    size_t max_depth;    /* an aggregate nested deeper is refused (max-depth);
                             a top-level array is depth 1 */
    size_t max_elements; /* sum of the declared element counts of every
                             aggregate in the reply, a map of n pairs counting
                             2n (max-elements) */
    size_t max_bulk;     /* most bytes in one string of any kind (max-bulk) */
} resp_reply_limits_t;

#define RESP_REPLY_LIMITS_DEFAULT                                                                  \
    {                                                                                              \
        RESP_DEFAULT_REPLY_MAX_DEPTH, RESP_DEFAULT_REPLY_MAX_ELEMENTS, RESP_DEFAULT_REPLY_MAX_BULK \
    }

typedef enum resp_reply_type {
    RESP_REPLY_STATUS = 1, /* +  str */
    RESP_REPLY_ERROR,      /* -  and ! (blob error): str, e.g. "ERR bad" */
    RESP_REPLY_INTEGER,    /* :  integer */
    RESP_REPLY_BULK,       /* $  str (binary) */
    RESP_REPLY_NIL,        /* $-1, *-1, _ */
    RESP_REPLY_ARRAY,      /* *  elements */
    RESP_REPLY_MAP,        /* %  elements: key, value, key, value ... (count = 2 * pairs) */
    RESP_REPLY_SET,        /* ~  elements */
    RESP_REPLY_PUSH,       /* >  elements */
    RESP_REPLY_DOUBLE,     /* ,  dval, and str holding the text as sent */
    RESP_REPLY_BOOL,       /* #  integer 0 or 1 */
    RESP_REPLY_BIGNUM,     /* (  str: the digits as sent */
    RESP_REPLY_VERBATIM    /* =  format ("txt"; three printable bytes, else a
                                 protocol error), str: the text after "txt:" */
} resp_reply_type_t;

typedef struct resp_reply {
    resp_reply_type_t type;
    long long integer; /* INTEGER, BOOL */
    double dval;       /* DOUBLE */
    char *str;         /* string types: len bytes then a NUL; else NULL */
    size_t len;
    char format[4];              /* VERBATIM: three characters and a NUL */
    size_t count;                /* aggregates: number of elements */
    struct resp_reply *elements; /* aggregates: count replies, contiguous */
} resp_reply_t;

/* Parse one reply from the start of buf[0..len).
 *   RESP_OK         *out is the tree, *consumed the bytes it took (the rest
 *                   of buf is untouched: pipelined replies are parsed by
 *                   calling again at buf + *consumed). Free with
 *                   resp_reply_free.
 *   RESP_NEED_MORE  the reply is incomplete: *out = NULL, *consumed = 0.
 *   RESP_ERR_PROTOCOL / RESP_ERR_LIMIT  *out = NULL, *consumed = 0 and
 *                   err[errlen] (may be NULL) holds e.g.
 *                   "Protocol error: invalid bulk length"; the stream is
 *                   unusable, close the connection.
 * limits may be NULL for the defaults; a zero field means its default. */
resp_status_t resp_reply_parse(const char *buf, size_t len, const resp_reply_limits_t *limits, resp_reply_t **out,
                               size_t *consumed, char *err, size_t errlen);

/* Free a tree from resp_reply_parse (the whole tree; never an element of
 * it). NULL is fine. */
void resp_reply_free(resp_reply_t *r);

/* The name of a reply type, e.g. "bulk", for messages. Never NULL. */
const char *resp_reply_type_name(resp_reply_type_t t);

#endif
