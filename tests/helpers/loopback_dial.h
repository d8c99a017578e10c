/*
 * tests/helpers/loopback_dial.h — a TCP connect to 127.0.0.1 that cannot
 * stall: each attempt has a deadline of its own and a stalled one is made
 * again from a new local port, so a lost SYN costs one attempt, not the
 * kernel's SYN retransmit backoff (1 s, 3 s, 7 s … about 127 s in all).
 *
 * Why a stall happens on loopback: a SYN meeting a 4-tuple still in
 * TIME-WAIT on the server's side (after thousands of short connections the
 * server closed first), or a listener whose accept queue is full (the SYN is
 * dropped), waits out that backoff. test_tu_http once took 144.5 s on one.
 * A new socket gets a new ephemeral port, so a retry leaves the TIME-WAIT
 * tuple behind; a full queue stays full, and the tries run out.
 *
 * Shared by the tests' helpers (tests/helpers/testutil.c: tu_tcp_connect,
 * the HTTP client) and the in-process fuzz harness
 * (tests/fuzz/fuzz_dispatch.c), which must keep its own broker's event loop
 * turning while it waits (the pump). Plain libc and base/clock; no state of
 * its own; thread-safe.
 */
#ifndef HG_TESTS_LOOPBACK_DIAL_H
#define HG_TESTS_LOOPBACK_DIAL_H

#include <stdint.h>

typedef struct loopback_dial {
    int try_ms;              /* one attempt's limit (> 0) */
    int tries;               /* attempts at most (> 0) */
    uint64_t deadline;       /* clock_mono_ms() past which no attempt waits; 0: none */
    void (*pump)(void *ctx); /* NULL: block in poll(2); else called between polls of 1 ms */
    void *ctx;               /* pump's argument */
    /* NULL: none; else called on each attempt's new socket before its
     * connect (a source address bound, a buffer size set): 0, or -1 with
     * errno, which ends the dial with that cause (not retried) */
    int (*prepare)(int fd, void *arg);
    void *prepare_arg; /* prepare's argument */
} loopback_dial_t;

#define LOOPBACK_DIAL_TRY_MS 1000
#define LOOPBACK_DIAL_TRIES  10

/* A connected TCP socket to 127.0.0.1:port, non-blocking and close-on-exec.
 * -1 with the cause as an errno value in *why: the refusal or error the
 * kernel gave (not retried: it is an answer), or ETIMEDOUT when every
 * attempt stalled past its try_ms or the deadline passed, or the errno
 * prepare failed with. */
int loopback_dial(int port, const loopback_dial_t *how, int *why);

#endif
