/*
 * proto/resp.h — the RESP wire format: request parser, reply writer, reply parser.
 *
 * The codec shared by hourglass-broker (libevent bufferevents) and libhourglass
 * (blocking sockets). Wire format only: no sockets, no event loop, no globals,
 * no logging. Every object here belongs to one thread at a time.
 *
 *   request parser  bytes from a client  -> commands (argc/argv)    broker side
 *   reply writer    replies              -> bytes into a resp_buf_t broker side
 *                   commands             -> bytes (resp_add_command) client side
 *   reply parser    bytes from a server  -> a reply tree            client side
 *
 * Every byte from the network is hostile (STYLE.md §6). The request parser
 * follows Redis's processMultibulkBuffer/processInlineBuffer and is bounded by
 * named limits (resp_limits_t); it never allocates on the strength of a
 * declared length: a "*1000000000" or "$1073741824" header costs nothing until
 * the bytes themselves arrive, and buffers grow (by doubling) only with data
 * received, so memory held is at most about twice the bytes received for the
 * command being parsed.
 *
 * Error convention (STYLE.md §4): parsers return a resp_status_t. A protocol
 * error leaves a message in Redis's wording, without the "ERR " code and
 * without a newline, e.g. "Protocol error: invalid bulk length"; the broker
 * replies "-ERR <message>" and closes the connection. Out of memory aborts the
 * process with a message on stderr (one wrapper inside resp.c); no function
 * here returns an allocation failure.
 */
#ifndef HG_PROTO_RESP_H
#define HG_PROTO_RESP_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include "base/buf.h"

/* ------------------------------------------------------------------------
 * Status codes shared by both parsers
 * ------------------------------------------------------------------------ */

typedef enum resp_status {
    RESP_OK = 0,            /* one complete command / reply was produced */
    RESP_NEED_MORE = 1,     /* the input ends inside a command / reply */
    RESP_ERR_PROTOCOL = -1, /* malformed input (bad header, bad length, ...) */
    RESP_ERR_LIMIT = -2     /* well-formed so far but over a configured limit */
} resp_status_t;

/* ------------------------------------------------------------------------
 * Request limits (the broker's max-args, max-bulk, max-inline, max-query)
 * ------------------------------------------------------------------------ */

#define RESP_DEFAULT_MAX_ARGS   65536                     /* arguments per command */
#define RESP_DEFAULT_MAX_BULK   (64u * 1024 * 1024)       /* bytes in one argument */
#define RESP_DEFAULT_MAX_INLINE (64u * 1024)              /* bytes in one inline line */
#define RESP_DEFAULT_MAX_QUERY  (128u * 1024 * 1024)      /* wire bytes of one command */

/* The longest length header accepted: "-9223372036854775808" (a long long). */
#define RESP_MAX_NUMBER_LEN 20

typedef struct resp_limits {
    size_t max_args;    /* most arguments in one command (max-args) */
    size_t max_bulk;    /* most bytes in one bulk argument (max-bulk) */
    size_t max_inline;  /* most bytes on one inline line, counted before its
                           '\n' (a '\r' before the '\n' counts) (max-inline) */
    size_t max_query;   /* most wire bytes of one command, headers and CRLFs
                           included (max-query); keep it above max-bulk */
} resp_limits_t;

/* The defaults above, as an initialiser. */
#define RESP_LIMITS_DEFAULT { RESP_DEFAULT_MAX_ARGS, RESP_DEFAULT_MAX_BULK, \
                              RESP_DEFAULT_MAX_INLINE, RESP_DEFAULT_MAX_QUERY }

/* Fill *l with the defaults. */
void resp_limits_default(resp_limits_t *l);

/* ------------------------------------------------------------------------
 * Request parser
 * ------------------------------------------------------------------------
 *
 * Two request forms, chosen like Redis by the first byte of each command:
 *  - multibulk: "*<n>\r\n" then n times "$<len>\r\n<len bytes>\r\n". Binary
 *    safe; zero-length arguments allowed. "*0\r\n" and "*-1\r\n" are skipped
 *    silently (as Redis does); any other count below 1 is an error. The
 *    bytes after each bulk must be "\r\n" (Redis does not check; we do, so a
 *    wrong length is caught at once instead of desynchronising the stream).
 *  - inline: a line ending in "\n" (a "\r" before it is dropped), split on
 *    blanks, as telnet and redis-cli send. Quotes work as in Redis's
 *    sdssplitargs: "..." with \n \r \t \b \a \\ \" \xHH escapes, '...' with \'
 *    only; a closing quote must be followed by a blank or the end of line.
 *    A NUL byte is an ordinary character. Empty or blank lines are skipped.
 *
 * Protocol errors (RESP_ERR_PROTOCOL), in Redis's words:
 *   "Protocol error: invalid multibulk length"   bad count, or below -1
 *   "Protocol error: invalid bulk length"        bad length, or negative
 *   "Protocol error: expected '$', got 'x'"      (non-printables as \xHH)
 *   "Protocol error: unbalanced quotes in request"
 *   "Protocol error: bulk data not followed by CRLF"
 * Limit errors (RESP_ERR_LIMIT):
 *   "Protocol error: too big inline request"     (max-inline, Redis's words)
 *   "Protocol error: 1000000 arguments exceed the limit of 65536 (max-args)"
 *   "Protocol error: bulk length 1073741824 exceeds the limit of 67108864 bytes (max-bulk)"
 *   "Protocol error: command of at least N bytes exceeds the limit of M bytes (max-query)"
 * After any error the parser is dead: every later feed returns the same
 * status, consumes nothing and the message stays. The caller replies the
 * error and closes.
 */

/* One argument: binary safe. ptr[len] is always a NUL byte (handy for
 * numbers and names), but ptr may contain NULs itself: always use len. */
typedef struct resp_arg {
    const char *ptr;
    size_t len;
} resp_arg_t;

/* A complete command, as handed out by resp_parser_feed. argv points into
 * the parser and stays valid until the next resp_parser_feed, resp_parser_reset
 * or resp_parser_free on the same parser; copy what must live longer. */
typedef struct resp_command {
    size_t argc;             /* >= 1 */
    const resp_arg_t *argv;  /* argc entries */
    size_t wire_len;         /* bytes the command took on the wire */
    int is_inline;           /* 1 when it came as an inline line */
} resp_command_t;

/* The parser state. Embed it in a connection; the fields are private to
 * resp.c (use the functions below). */
typedef struct resp_parser {
    resp_limits_t limits;
    int state;               /* where in the grammar the next byte lands */
    int have_command;        /* argv was handed out; reset on the next feed */
    resp_status_t dead;      /* RESP_OK while alive, else the fatal status */
    size_t query_len;        /* wire bytes of the current command so far */
    size_t want_args;        /* multibulk: the declared count */
    size_t bulk_left;        /* multibulk: bytes of the current bulk still due */
    size_t bulk_len;         /* multibulk: declared length of the current bulk */
    char number[RESP_MAX_NUMBER_LEN + 1]; /* a length header being read */
    size_t number_len;
    int number_cr;           /* the '\r' ending the header was seen */
    char *data;              /* argument bytes, each followed by NUL; or the
                                inline line being collected */
    size_t data_len, data_cap;
    resp_arg_t *argv;        /* arguments of the current command */
    size_t argc, argv_cap;
    char err[160];           /* message after an error, else "" */
} resp_parser_t;

/* Prepare *p. limits may be NULL for the defaults; a zero field in *limits
 * also means that field's default. Allocates nothing; cannot fail. */
void resp_parser_init(resp_parser_t *p, const resp_limits_t *limits);

/* Change the limits of a live parser (e.g. after AUTH). They apply to the
 * next header read; NULL and zero fields mean defaults as in init. */
void resp_parser_set_limits(resp_parser_t *p, const resp_limits_t *limits);

/* Release what the parser holds; *p may then be re-initialised or dropped.
 * Any argv handed out becomes invalid. Safe to call twice. */
void resp_parser_free(resp_parser_t *p);

/* Forget any partial command and any error: back to the state after init,
 * keeping the limits. Invalidates any argv handed out. */
void resp_parser_reset(resp_parser_t *p);

/* Feed bytes as they arrive. Parsing stops at the end of the first complete
 * command, so call again with the rest while it returns RESP_OK:
 *   RESP_OK         *cmd holds a command; *consumed (<= len) bytes were used,
 *                   the rest of buf has not been looked at.
 *   RESP_NEED_MORE  all len bytes were used (*consumed == len) and are kept
 *                   in the parser; feed more when they arrive. buf itself is
 *                   never referenced after the call returns.
 *   RESP_ERR_PROTOCOL / RESP_ERR_LIMIT  the parser is dead; the message is
 *                   resp_parser_error(p). *consumed says how far it got.
 * len 0 returns RESP_NEED_MORE. consumed and cmd must not be NULL. */
resp_status_t resp_parser_feed(resp_parser_t *p, const char *buf, size_t len,
                               size_t *consumed, resp_command_t *cmd);

/* The message of the error that killed the parser, or "" when alive.
 * Owned by the parser; valid until reset/free. */
const char *resp_parser_error(const resp_parser_t *p);

/* 1 when some bytes of an unfinished command are held (a client closing now
 * would lose a partial command), else 0. */
int resp_parser_in_command(const resp_parser_t *p);

/* Bytes of heap the parser holds right now (its buffers' capacities). For
 * INFO's memory figures and for tests that check nothing was allocated on
 * the word of a length header. After a command larger than 64 KiB the
 * buffers are released on the next feed, so an idle connection is small. */
size_t resp_parser_buffered(const resp_parser_t *p);

/* ------------------------------------------------------------------------
 * Growable byte buffer and the reply writer
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

#define RESP_PROTO_2 2
#define RESP_PROTO_3 3

typedef struct resp_buf {
    buf_t raw;    /* the bytes written so far */
    int proto;    /* RESP_PROTO_2 or RESP_PROTO_3 */
} resp_buf_t;

#define RESP_BUF_INIT { BUF_INIT, RESP_PROTO_2 }

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
void resp_add_errorf(resp_buf_t *b, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
void resp_add_verrorf(resp_buf_t *b, const char *fmt, va_list ap)
    __attribute__((format(printf, 2, 0)));

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

#define RESP_DEFAULT_REPLY_MAX_DEPTH    32                 /* nesting of aggregates */
#define RESP_DEFAULT_REPLY_MAX_ELEMENTS (1024u * 1024)     /* elements in one reply, all levels */
#define RESP_DEFAULT_REPLY_MAX_BULK     (512u * 1024 * 1024) /* bytes in one string */
#define RESP_REPLY_DEPTH_CAP            512                /* max_depth is clamped to this */

typedef struct resp_reply_limits {
    size_t max_depth;     /* an aggregate nested deeper is refused (max-depth);
                             a top-level array is depth 1 */
    size_t max_elements;  /* sum of the declared element counts of every
                             aggregate in the reply, a map of n pairs counting
                             2n (max-elements) */
    size_t max_bulk;      /* most bytes in one string of any kind (max-bulk) */
} resp_reply_limits_t;

#define RESP_REPLY_LIMITS_DEFAULT { RESP_DEFAULT_REPLY_MAX_DEPTH, \
        RESP_DEFAULT_REPLY_MAX_ELEMENTS, RESP_DEFAULT_REPLY_MAX_BULK }

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
    long long integer;           /* INTEGER, BOOL */
    double dval;                 /* DOUBLE */
    char *str;                   /* string types: len bytes then a NUL; else NULL */
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
resp_status_t resp_reply_parse(const char *buf, size_t len,
                               const resp_reply_limits_t *limits,
                               resp_reply_t **out, size_t *consumed,
                               char *err, size_t errlen);

/* Free a tree from resp_reply_parse (the whole tree; never an element of
 * it). NULL is fine. */
void resp_reply_free(resp_reply_t *r);

/* The name of a reply type, e.g. "bulk", for messages. Never NULL. */
const char *resp_reply_type_name(resp_reply_type_t t);

#endif
