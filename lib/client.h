/*
 * lib/client.h — the connection engine of libhourglass (internal part).
 *
 * The public client API (hg_client_open, hg_client_command, ...) is in
 * <hourglass/hourglass.h>. This header is what producer.c and consumer.c use
 * inside the library: creating a client without connecting, the pipelined
 * exchange, the per-call error, and the wake descriptor that lets a consumer
 * stop cut blocking waits short.
 *
 * A client is used by one thread at a time.
 */
#ifndef HG_LIB_CLIENT_H
#define HG_LIB_CLIENT_H

#include "include/hourglass/hourglass.h"
#include "proto/client.h"

#include <stddef.h>
#include <stdint.h>

/* Flags of client_exchange. */
#define CLIENT_INTERRUPTIBLE 0x1 /* the wake fd cuts the wait for replies short */

/* Create a client for a URI without connecting (the first call connects).
 * Returns HG_OK and *out, or HG_ERR_URI / HG_ERR_UNSUPPORTED / HG_ERR_ARG
 * with err filled. */
hg_err_t client_create(const char *uri, const hg_client_opts_t *opts, hg_client_t **out, hg_error_t *err);

/* Use fd (or -1 for none) as the wake descriptor: when it is readable,
 * backoff sleeps and CLIENT_INTERRUPTIBLE waits end with HG_ERR_STOPPED.
 * The client never reads or closes it. Apart from the stop descriptor
 * (hg_client_set_stop_fd), which ends every wait: a consumer's stop ends
 * its PULLs at once and lets the ACKs of the messages in hand finish; its
 * stop descriptor (hg_consumer_set_stop_fd) cuts those too. */
void client_set_wake_fd(hg_client_t *c, int fd);

/* Make sure the client is connected: reuse a live connection (one that the
 * broker closed while idle is noticed here and replaced, nothing was sent
 * on it), else connect (and AUTH), retrying with the reconnect backoff per
 * the options. Returns HG_OK, HG_ERR_CONNECT, HG_ERR_AUTH or HG_ERR_STOPPED
 * (the error is set on the client). */
hg_err_t client_ensure(hg_client_t *c);

/* The longest one connection attempt of c (hourglass://) can take: the TCP
 * connect, the TLS handshake (a connect timeout of its own) and AUTH's reply
 * (with credentials), each up to its timeout; one address per host name.
 * HG_UNBOUNDED when AUTH may wait forever (read timeout 0). */
uint64_t client_attempt_bound_ms(const hg_client_t *c);

/* The longest client_ensure (or a transport's ensure, which follows the same
 * reconnect policy) can take when one connection attempt takes up to
 * attempt_ms: 1 + reconnect_backoff.attempts attempts (1 without reconnect)
 * and the longest pauses between them (backoff_total_ms). HG_UNBOUNDED when
 * attempt_ms is, or when it reconnects forever (attempts 0). */
uint64_t client_connect_bound_ms(const hg_client_opts_t *o, uint64_t attempt_ms);

/* The longest one hg_send / hg_send_many call can take when each of its
 * rounds (1 + HG_SEND_MAX_RESENDS with resend_sends, else 1) takes up to
 * round_ms, plus pauses_ms between them in all. HG_UNBOUNDED when round_ms
 * is. */
uint64_t client_send_bound_ms(const hg_client_opts_t *o, uint64_t round_ms, uint64_t pauses_ms);

/* Write the request bytes req[0..reqlen) (one or more commands) and read
 * nreplies replies into replies[0..nreplies), reading while writing so a big
 * pipeline never deadlocks. extra_wait_ms is added to the read timeout (a
 * blocking PULL). The client must be connected (client_ensure).
 * Returns HG_OK with every reply set (the caller frees each with
 * resp_reply_free); or HG_ERR_IO / HG_ERR_TIMEOUT / HG_ERR_PROTOCOL /
 * HG_ERR_STOPPED with the connection closed, the first *got replies set
 * (the caller frees them) and the error set on the client. */
hg_err_t client_exchange(hg_client_t *c, const char *req, size_t reqlen, size_t nreplies, resp_reply_t **replies,
                         size_t *got, uint32_t extra_wait_ms, int flags);

/* What client_exchange_notice calls when the replies are slow: fn(arg),
 * once, when ms have passed since the exchange began and the replies are not
 * all in. It runs on the calling thread, inside the exchange, and must not
 * use the client. */
typedef struct client_notice {
    uint32_t ms;
    void (*fn)(void *arg);
    void *arg;
} client_notice_t;

/* client_exchange, and when notice is not NULL, notice->fn(notice->arg) is
 * called once if the nreplies replies are not all in notice->ms after the
 * exchange began; the exchange then goes on as before (the read timeout is
 * not changed by it). NULL: client_exchange. Returns as client_exchange. */
hg_err_t client_exchange_notice(hg_client_t *c, const char *req, size_t reqlen, size_t nreplies, resp_reply_t **replies,
                                size_t *got, uint32_t extra_wait_ms, int flags, const client_notice_t *notice);

/* One command, one reply: client_ensure, then client_exchange; when resend
 * is nonzero and the connection broke before the reply, reconnect and send
 * again (at most a few times). A reply that is an error is returned as a
 * reply (type RESP_REPLY_ERROR): callers decide. Returns as client_exchange
 * (plus client_ensure's errors); on success *reply is set. */
hg_err_t client_call(hg_client_t *c, size_t argc, const char *const *argv, const size_t *argvlen, int resend,
                     uint32_t extra_wait_ms, int flags, resp_reply_t **reply);

/* client_call, and an error reply becomes HG_ERR_SERVER with its text as
 * the client's error (the reply freed, *reply NULL). Returns as client_call. */
hg_err_t client_call_checked(hg_client_t *c, size_t argc, const char *const *argv, const size_t *argvlen, int resend,
                             resp_reply_t **reply);

/* Close the connection (the client stays usable: the next call reconnects). */
void client_disconnect(hg_client_t *c);

/* Set the client's error (code and printf message) and return code. An
 * argument may be the client's current message (c->errmsg): it is read
 * before it is replaced. */
hg_err_t client_fail(hg_client_t *c, hg_err_t code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* Fill a caller's hg_error_t (may be NULL) with code and a printf message:
 * the one way the library's constructors report errors before a client
 * exists. */
void client_error_fill(hg_error_t *err, hg_err_t code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* Clear the client's error (start of a public call). */
void client_clear_error(hg_client_t *c);

/* Turn an error reply into HG_ERR_SERVER with its text as the message.
 * Returns HG_ERR_SERVER. */
hg_err_t client_fail_reply(hg_client_t *c, const resp_reply_t *r);

/* The client's options (as given to create, defaults filled in). */
const hg_client_opts_t *client_opts(const hg_client_t *c);

/* The number of successful connections so far (1 after the first). */
unsigned client_connect_count(const hg_client_t *c);

/* The client's transport (lib/transport.h), or NULL for RESP (hourglass://). */
const struct transport_ops *client_transport(const hg_client_t *c);

/* The transport's state of the client (NULL for RESP). */
struct transport_state *client_transport_state(const hg_client_t *c);

/* A transport counts a successful (re)connection (client_connect_count). */
void client_note_connect(hg_client_t *c);

/* The wake descriptor (-1 when none), for a transport's waits. */
int client_wake_fd(const hg_client_t *c);

/* The stop descriptor (hg_client_set_stop_fd; -1 when none): a transport's
 * waits for the broker end when it is readable, whatever their flags. */
int client_stop_fd(const hg_client_t *c);

/* Sleep ms milliseconds, returning early with -1 when wake_fd (may be -1)
 * becomes readable; 0 after the full sleep. */
int client_sleep(int wake_fd, uint64_t ms);

/* A backoff pause of c: client_sleep that ends early on c's wake or stop
 * descriptor. */
int client_pause(const hg_client_t *c, uint64_t ms);

#endif
