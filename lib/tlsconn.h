/*
 * lib/tlsconn.h — TLS on libhourglass's non-blocking sockets (internal),
 * for hourglass+tls:// (lib/client.c).
 *
 * A context (tlsconn_ctx_t) is one OpenSSL client SSL_CTX: TLS 1.2 at
 * least, the broker's certificate verified against the CA file given (or
 * the system's trust store when none is), a client certificate and key for
 * mutual TLS when given. A connection (tlsconn_t) is one SSL on a connected
 * non-blocking socket the caller owns: the handshake checks the
 * certificate's name against the host of the URI (or the name given: SNI
 * and verification), then send and recv behave like send(2) / recv(2) on a
 * non-blocking socket, with the poll events to wait for when they would
 * block.
 *
 * Errors are texts naming the problem: "certificate has expired",
 * "hostname mismatch", "tlsv13 alert certificate required", ...
 * A context is read-only after creation (OpenSSL makes that safe to share);
 * a connection belongs to one thread at a time.
 */
#ifndef HG_LIB_TLSCONN_H
#define HG_LIB_TLSCONN_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "base/buf.h"

typedef struct tlsconn_ctx tlsconn_ctx_t;
typedef struct tlsconn tlsconn_t;

/* Build a client context. ca_file: PEM CAs the broker's certificate must
 * chain to (NULL: the system's default trust store); cert_file and
 * key_file: the client certificate chain and its unencrypted key for mutual
 * TLS (both or neither; NULL: none). 0 and *out (free with
 * tlsconn_ctx_free), or -1 with err naming the file and the reason. */
int tlsconn_ctx_new(const char *ca_file, const char *cert_file, const char *key_file, tlsconn_ctx_t **out, char *err,
                    size_t errlen);

void tlsconn_ctx_free(tlsconn_ctx_t *ctx);

/* Another handle on ctx's context (shared, counted: each handle is freed
 * with tlsconn_ctx_free); for a client cloned from one that has ctx. */
tlsconn_ctx_t *tlsconn_ctx_ref(const tlsconn_ctx_t *ctx);

/* Run the TLS handshake on the connected non-blocking socket fd, waiting
 * (poll) until deadline (monotonic ms, wire_now_ms) or until stop_fd (-1:
 * none) is readable ("stopped", errno ECANCELED). name is what the
 * broker's certificate must be issued to: an IP address is checked against
 * its IP SANs, a DNS name against its DNS SANs / CN and also sent as SNI.
 * 0 and *out; or -1 with err ("certificate verify failed: certificate has
 * expired", "timed out", "connection closed by the broker (not a TLS
 * port?)") and *verify_failed 1 when the broker's certificate was refused
 * (retrying cannot help). fd stays the caller's either way. */
int tlsconn_open(tlsconn_ctx_t *ctx, int fd, const char *name, uint64_t deadline, int stop_fd, tlsconn_t **out,
                 int *verify_failed, char *err, size_t errlen);

/* Write up to len bytes. Returns the bytes written (> 0), or -1 with errno:
 * EAGAIN (wait for tlsconn_wants, then call again with the same bytes),
 * EPIPE / ECONNRESET / EPROTO (the reason in tlsconn_error). */
ssize_t tlsconn_send(tlsconn_t *t, const void *data, size_t len);

/* Read what is there (at most one read chunk) and append it to in. Returns
 * the bytes read (> 0), 0 on the broker's close, or -1 with errno as
 * tlsconn_send. */
ssize_t tlsconn_recv(tlsconn_t *t, buf_t *in);

/* The poll events the last EAGAIN waits for (POLLIN and/or POLLOUT). */
short tlsconn_wants(const tlsconn_t *t);

/* 1 when decrypted bytes are buffered inside TLS (poll would not see them). */
int tlsconn_pending(const tlsconn_t *t);

/* 1 when the idle connection is still usable: no close or error is
 * pending (TLS records that carry no data, like session tickets, are
 * consumed). */
int tlsconn_alive(tlsconn_t *t);

/* The reason of the last failure ("" when none). Belongs to t. */
const char *tlsconn_error(const tlsconn_t *t);

/* Send close_notify (best effort, never waits) and free t. The socket is
 * not closed. NULL is fine. */
void tlsconn_close(tlsconn_t *t);

#endif
