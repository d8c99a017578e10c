/*
 * base/openssl_error.h — OpenSSL's error queue as the text of a message:
 * the one way every TLS and crypto failure says why ("TLS CA file x: no
 * start line", "scrypt key derivation failed: memory limit exceeded").
 *
 * An error reads as its reason ("no start line"; a system error as its
 * errno's text, "No such file or directory"), or as OpenSSL's whole error
 * string ("error:0A000086:SSL routines::...") when its reason has no text. The queue is OpenSSL's, one per thread: each function here reads
 * the calling thread's (or the queue next pops) and leaves it empty, so a
 * later failure is never described by an earlier one's errors.
 *
 * The one member of base/ that needs libcrypto: a program that calls it
 * links libcrypto (every caller's library already does: libhgpasswd,
 * libhgtls, libhgtlscheck, libhourglass). Thread-safe.
 */
#ifndef HG_BASE_OPENSSL_ERROR_H
#define HG_BASE_OPENSSL_ERROR_H

#include <stddef.h>

/* The text of the error code e into buf[len] (cut to fit): its reason (a
 * system error's: strerror of its errno), or OpenSSL's whole error string
 * when the reason has none; "" for e = 0.
 * Returns buf. The queue is not touched. */
const char *openssl_error_text(unsigned long e, char *buf, size_t len);

/* The newest (last) error of this thread's queue — the one the failed call
 * itself recorded, after what its callees did — as openssl_error_text, or
 * none (a string, e.g. "" or "unknown") when the queue is empty. The queue
 * is then cleared, older errors too. Returns buf. */
const char *openssl_last_error(char *buf, size_t len, const char *none);

/* Every error next(arg) pops until it returns 0, oldest first, joined by
 * "; " into buf[len] (cut to fit); an error of no library (libevent's bare
 * SSL_get_error codes) is skipped. "" when there is none. next: a queue's
 * pop — openssl_thread_error for this thread's (drained), or another's (a
 * bufferevent's). Returns buf. */
const char *openssl_errors_join(unsigned long (*next)(void *arg), void *arg, char *buf, size_t len);

/* ERR_get_error as openssl_errors_join's next: this thread's oldest error,
 * removed from its queue; arg unused. */
unsigned long openssl_thread_error(void *arg);

/* Every error of this thread's queue, oldest first, joined by "; " as
 * openssl_errors_join (the queue drained); "" when it is empty. Returns
 * buf. For a failure that records a chain ("no start line; PEM lib"). */
const char *openssl_errors(char *buf, size_t len);

#endif
