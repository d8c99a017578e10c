/*
 * tests/helpers/resp_client.h — a small blocking RESP client for tests and the bench.
 *
 * One TCP connection to a RESP server (hourglass-broker, redis-server), with a
 * timeout on every wait. Commands are sent as argv (binary safe) through
 * proto/resp.h's resp_add_command; the connect, the reads and the reply
 * parsing are libhourglass's lib/wire.h (link lib/wire.c with this file).
 * Pipelining: rc_append() queues commands in an output buffer, rc_flush()
 * writes them, rc_read() reads the replies one by one.
 *
 * Error convention: a reply the server sends as an error ("-ERR ...") is an
 * ordinary reply of type RESP_REPLY_ERROR. Functions that do I/O return 0 / -1
 * (or NULL) when the connection failed — timeout, reset, EOF, a malformed
 * reply — and leave the cause in c->err; after such a failure the connection
 * is unusable except for rc_close.
 *
 * Threading: one rc_conn_t per thread. SIGPIPE is never raised (MSG_NOSIGNAL).
 */
#ifndef HG_TESTS_RESP_CLIENT_H
#define HG_TESTS_RESP_CLIENT_H

#include <stddef.h>
#include <stdint.h>

#include "proto/client.h"

#define RC_DEFAULT_TIMEOUT_MS 10000

typedef struct rc_conn {
    int fd;         /* -1 when closed */
    int timeout_ms; /* default wait for rc_read / rc_flush / rc_cmd */
    buf_t out;      /* bytes appended, not yet written */
    buf_t in;       /* bytes received, from in_off on not yet parsed */
    size_t in_off;
    int eof;       /* the peer closed its side */
    int timed_out; /* the last rc_read failed by timeout only */
    char err[256]; /* cause of the last failure */
} rc_conn_t;

/* Connect to host:port (numeric IPv4 address or "localhost") within
 * timeout_ms (also the default I/O timeout; 0 means RC_DEFAULT_TIMEOUT_MS);
 * to 127.0.0.1 in attempts of at most 1 s, a stalled one made again from a
 * new local port (tests/helpers/loopback_dial.h).
 * Returns 0, or -1 with the cause in c->err (c is then closed, fd -1). */
int rc_connect(rc_conn_t *c, const char *host, int port, int timeout_ms);

/* Close the socket and free the buffers; safe on a closed or failed conn. */
void rc_close(rc_conn_t *c);

/* Queue one command (argv; argvlen may be NULL for C strings). No I/O. */
void rc_append(rc_conn_t *c, int argc, const char *const *argv, const size_t *argvlen);

/* Queue a command given as C strings ending with NULL: rc_appendl(c, "PING", NULL). */
void rc_appendl(rc_conn_t *c, const char *arg0, ...) __attribute__((sentinel));

/* Queue raw bytes, unframed (for hostile input). */
void rc_append_raw(rc_conn_t *c, const void *p, size_t n);

/* Write everything queued, waiting up to timeout_ms (<= 0: c->timeout_ms).
 * Returns 0, or -1 on timeout / a reset connection. */
int rc_flush(rc_conn_t *c, int timeout_ms);

/* Read one reply, waiting up to timeout_ms (<= 0: c->timeout_ms). Returns the
 * reply (free with resp_reply_free) or NULL on timeout, EOF, a reset or a
 * malformed reply (c->err says which; rc_timed_out() tells a timeout). */
resp_reply_t *rc_read(rc_conn_t *c, int timeout_ms);

/* 1 when the last failure of rc_read was a plain timeout (the connection
 * is still usable: nothing was consumed). */
int rc_timed_out(const rc_conn_t *c);

/* Send one command and read its reply: rc_append + rc_flush + rc_read. */
resp_reply_t *rc_cmdv(rc_conn_t *c, int argc, const char *const *argv, const size_t *argvlen);

/* rc_cmdv with C strings ending with NULL: rc_cmd(c, "SEND", "t", "p", NULL). */
resp_reply_t *rc_cmd(rc_conn_t *c, const char *arg0, ...) __attribute__((sentinel));

/* Wait up to timeout_ms for the peer to close the connection, reading and
 * discarding whatever arrives. Returns 1 when it closed (EOF or reset), 0 on
 * timeout. */
int rc_wait_closed(rc_conn_t *c, int timeout_ms);

/* Read until the peer closes, keeping the bytes (for a plain HTTP/1.0 GET):
 * afterwards rc_input(c) / rc_pending_input(c) are everything received and
 * not parsed. Returns 1 when the peer closed, 0 on timeout. */
int rc_read_to_eof(rc_conn_t *c, int timeout_ms);

/* The bytes received and not yet parsed (rc_pending_input of them). */
const char *rc_input(const rc_conn_t *c);

/* Bytes received and not yet parsed. */
size_t rc_pending_input(const rc_conn_t *c);

/* ---- reading replies ---------------------------------------------------- */

/* A short description of a reply for failure messages, e.g. "error 'ERR x'",
 * "integer 3", "array of 2", "bulk '123'". Writes into buf, returns buf. */
const char *rc_describe(const resp_reply_t *r, char *buf, size_t len);

/* 1 when r is an error reply whose text starts with prefix (case-sensitive). */
int rc_is_error(const resp_reply_t *r, const char *prefix);

/* The integer in r: an integer reply, or a bulk/status holding a decimal
 * number. Returns 0 with *out set, -1 when r is anything else. */
int rc_int(const resp_reply_t *r, long long *out);

/* The unsigned integer in r, like rc_int. */
int rc_u64(const resp_reply_t *r, uint64_t *out);

/* 1 when r is a bulk or status reply equal to s. */
int rc_str_eq(const resp_reply_t *r, const char *s);

/* One message of a PULL reply: [id, topic, key, payload, reconsume, due_ms]. */
typedef struct rc_msg {
    char id[64];     /* the id as text: 16 hex digits (docs/broker.md) */
    uint64_t id_num; /* the id as a number (rc_id_num), 0 when not hex */
    const char *topic;
    size_t topic_len; /* point into the reply */
    const char *key;
    size_t key_len;
    const char *payload;
    size_t payload_len;
    long long reconsume;
    uint64_t due_ms;
} rc_msg_t;

/* A message id (up to 16 hex digits) as a number; 0 when it is not one. */
uint64_t rc_id_num(const char *id);

/* Decode element i of a PULL reply (an array of 6-element arrays) into *m.
 * The pointers in *m live as long as r. Returns 0, or -1 with a description of
 * what is wrong in err. */
int rc_msg_at(const resp_reply_t *r, size_t i, rc_msg_t *m, char *err, size_t errlen);

/* The value of "key:" in an INFO-style text reply (bulk or verbatim) into
 * buf; returns 0, or -1 when r has no such line. */
int rc_info_field(const resp_reply_t *r, const char *key, char *buf, size_t len);

#endif
