/*
 * lib/wire.h — blocking RESP over one TCP socket: the pieces that
 * libhourglass's connection engine (lib/client.c) and the tests' raw RESP
 * client (tests/helpers/resp_client.c, which sends hostile bytes the library
 * never would) share — a non-blocking connect with a deadline, waiting on a
 * deadline, reading into the input buffer and taking whole replies out of it.
 *
 * The caller owns the socket and the input buffer: `in` holds the bytes
 * received, [0, *off) already parsed. Policies that differ between the two
 * users (pipelining, reconnects, a wake descriptor, raw output) stay with
 * them.
 *
 * Compiled into libhourglass (hidden by its export list) and into the test
 * helpers. Pure functions of their arguments and the socket; thread-safe.
 */
#ifndef HG_LIB_WIRE_H
#define HG_LIB_WIRE_H

#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>
#include <sys/types.h>

#include "base/buf.h"
#include "proto/client.h"

#define WIRE_READ_CHUNK (64u * 1024) /* bytes reserved per recv */

/* Monotonic milliseconds. */
uint64_t wire_now_ms(void);

/* The poll(2) timeout until deadline (monotonic ms; 0 means none: -1),
 * capped at 10^6 ms; 0 once the deadline has passed. */
int wire_poll_ms(uint64_t deadline);

/* Wait until fd has one of events or deadline (monotonic ms, 0: none)
 * passes. Returns 1 ready, 0 timed out, -1 with errno (EINTR is retried). */
int wire_wait(int fd, short events, uint64_t deadline);

#define WIRE_STOPPED 2 /* wire_wait_stop: stop_fd became readable */

/* wire_wait that also ends when stop_fd (-1: none) is readable (POLLIN: a
 * pipe whose writer went away is not a stop): WIRE_STOPPED. */
int wire_wait_stop(int fd, short events, uint64_t deadline, int stop_fd);

/* A TCP connection to sa within timeout_ms: a non-blocking, close-on-exec
 * socket with TCP_NODELAY. Returns it, or -1 with the cause as an errno
 * value in *why (ETIMEDOUT when the timeout passed, ECANCELED when stop_fd
 * (-1: none) became readable first). */
int wire_connect(const struct sockaddr *sa, socklen_t salen, uint32_t timeout_ms, int stop_fd, int *why);

/* One recv of at most WIRE_READ_CHUNK bytes appended to in (never blocks:
 * MSG_DONTWAIT). Returns the bytes read, 0 on EOF, -1 with errno (EAGAIN:
 * nothing there yet). */
ssize_t wire_recv(int fd, buf_t *in);

/* Parse one reply at in->data + *off with resp_reply_parse (default limits).
 *   RESP_OK         *out is the reply (free with resp_reply_free), *off moved
 *                   past it; the parsed prefix is dropped from in when all of
 *                   in is parsed or it exceeds WIRE_READ_CHUNK (so a long
 *                   pipeline costs no quadratic copying)
 *   RESP_NEED_MORE  no whole reply yet (also when nothing is buffered)
 *   RESP_ERR_*      a malformed reply: why[whylen] says what; the stream is
 *                   unusable */
resp_status_t wire_take_reply(buf_t *in, size_t *off, resp_reply_t **out, char *why, size_t whylen);

#endif
