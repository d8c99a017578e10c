/*
 * proto/request.h — the server's request parser: bytes from a client to
 * commands (argc/argv), bounded by the broker's limits.
 *
 * Server side only (hourglass-broker, proto/libresp_server.la). The parser
 * follows Redis's processMultibulkBuffer/processInlineBuffer and is bounded by
 * named limits (resp_limits_t); it never allocates on the strength of a
 * declared length: a "*1000000000" or "$1073741824" header costs nothing until
 * the bytes themselves arrive, and buffers grow (by doubling) only with data
 * received, so memory held is at most about twice the bytes received for the
 * command being parsed.
 *
 * Error convention: the parser returns a resp_status_t (proto/resp.h). A
 * protocol error leaves a message in Redis's wording, without the "ERR " code
 * and without a newline, e.g. "Protocol error: invalid bulk length"; the
 * broker replies "-ERR <message>" and closes the connection.
 */
#ifndef HG_PROTO_REQUEST_H
#define HG_PROTO_REQUEST_H

#include <stddef.h>

#include "proto/resp.h"

/* ------------------------------------------------------------------------
 * Request limits (the broker's max-args, max-bulk, max-inline, max-query)
 * ------------------------------------------------------------------------ */

#define RESP_DEFAULT_MAX_ARGS   65536                /* arguments per command */
#define RESP_DEFAULT_MAX_BULK   (64u * 1024 * 1024)  /* bytes in one argument */
#define RESP_DEFAULT_MAX_INLINE (64u * 1024)         /* bytes in one inline line */
#define RESP_DEFAULT_MAX_QUERY  (128u * 1024 * 1024) /* wire bytes of one command */

typedef struct resp_limits {
    size_t max_args;   /* most arguments in one command (max-args) */
    size_t max_bulk;   /* most bytes in one bulk argument (max-bulk) */
    size_t max_inline; /* most bytes on one inline line, counted before its
                           '\n' (a '\r' before the '\n' counts) (max-inline) */
    size_t max_query;  /* most wire bytes of one command, headers and CRLFs
                           included (max-query); keep it above max-bulk */
} resp_limits_t;

/* The defaults above, as an initialiser. */
#define RESP_LIMITS_DEFAULT                                                                           \
    {                                                                                                 \
        RESP_DEFAULT_MAX_ARGS, RESP_DEFAULT_MAX_BULK, RESP_DEFAULT_MAX_INLINE, RESP_DEFAULT_MAX_QUERY \
    }

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
    size_t argc;            /* >= 1 */
    const resp_arg_t *argv; /* argc entries */
    size_t wire_len;        /* bytes the command took on the wire */
    int is_inline;          /* 1 when it came as an inline line */
} resp_command_t;

/* The parser state. Embed it in a connection; the fields are private to
 * request.c (use the functions below). */
typedef struct resp_parser {
    resp_limits_t limits;
    int state;                            /* where in the grammar the next byte lands */
    int have_command;                     /* argv was handed out; reset on the next feed */
    resp_status_t dead;                   /* RESP_OK while alive, else the fatal status */
    size_t query_len;                     /* wire bytes of the current command so far */
    size_t want_args;                     /* multibulk: the declared count */
    size_t bulk_left;                     /* multibulk: bytes of the current bulk still due */
    size_t bulk_len;                      /* multibulk: declared length of the current bulk */
    char number[RESP_MAX_NUMBER_LEN + 1]; /* a length header being read */
    size_t number_len;
    int number_cr; /* the '\r' ending the header was seen */
    char *data;    /* argument bytes, each followed by NUL; or the
                                inline line being collected */
    size_t data_len, data_cap;
    resp_arg_t *argv; /* arguments of the current command */
    size_t argc, argv_cap;
    char err[160]; /* message after an error, else "" */
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
resp_status_t resp_parser_feed(resp_parser_t *p, const char *buf, size_t len, size_t *consumed, resp_command_t *cmd);

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

#endif
