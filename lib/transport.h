/*
 * lib/transport.h — the seam under the client API: what a transport other
 * than the built-in RESP one (hourglass://) provides (internal to
 * libhourglass).
 *
 * The library above the client (producer.c, consumer.c, the order cancel,
 * and every program through hg_client_command) speaks in broker commands:
 * an argv such as SEND/PULL/ACK/NACK/LEVELS/GROUP/DLQ and a RESP reply tree.
 * A transport executes those commands its own way and answers the same reply
 * shapes (docs/protocol.md), so nothing above it changes. A command it cannot
 * honour is refused with HG_ERR_UNSUPPORTED and a message naming the command
 * and the scheme — never silently.
 *
 * The RESP transport is client.c itself (a client with ops == NULL). The one
 * other transport is RabbitMQ (amqp://, lib/rmq_*.c, docs/rabbitmq.md).
 *
 * Every function runs on the thread that owns the client (one at a time), the
 * consumer helpers on the thread that runs hg_consumer_run.
 */
#ifndef HG_LIB_TRANSPORT_H
#define HG_LIB_TRANSPORT_H

#include "include/hourglass/hourglass.h"
#include "proto/client.h"

#include <stddef.h>
#include <stdint.h>

typedef struct transport_state transport_state_t; /* one client's connection state */

typedef struct transport_ops {
    const char *scheme; /* "amqp://", for messages */
    int leases;         /* 1: deliveries carry leases that TOUCH renews; 0: a
                           delivery is held until ACK/NACK or the connection
                           ends (the consumer runs no lease watchdog) */

    /* A state for uri (not connected yet). address[addrlen] is the client's
     * hg_client_address buffer, which outlives the state: the transport
     * writes there every node it may connect to ("h1:p1,h2:p2"), then, at
     * each connection it makes, the node connected ("h2:p2"), on the thread
     * that owns the client. The login is uri's, with client_opts(c)'s user and
     * password over it (copied: the client forgets those pointers after
     * create). Returns HG_OK, or HG_ERR_URI / HG_ERR_ARG with err. */
    hg_err_t (*create)(hg_client_t *c, const char *uri, transport_state_t **out, char *address, size_t addrlen,
                       hg_error_t *err);
    /* Connected (reconnect with the client's backoff). Errors set on c. */
    hg_err_t (*ensure)(hg_client_t *c, transport_state_t *t);
    /* One command, as client_call (flags CLIENT_INTERRUPTIBLE: the wake fd
     * cuts waits short). An error the server answered comes back as a reply
     * of type RESP_REPLY_ERROR; transport failures as codes set on c. */
    hg_err_t (*call)(hg_client_t *c, transport_state_t *t, size_t argc, const char *const *argv, const size_t *argvlen,
                     int resend, uint32_t extra_wait_ms, int flags, resp_reply_t **reply);
    /* hg_send_many's work: fill every item's err/id/error. */
    void (*send_many)(hg_client_t *c, transport_state_t *t, hg_send_item_t *items, size_t n);
    /* hg_client_send_bound_ms for this transport: the longest one send call
     * can take with the client's options as they are now. Reads only. */
    uint64_t (*send_bound_ms)(const hg_client_t *c, const transport_state_t *t);
    /* Close the connection (the state stays usable). */
    void (*disconnect)(transport_state_t *t);
    /* hg_client_close's first step, while the connection may still be up:
     * settle what a clean close should (RabbitMQ: give back the deliveries
     * read ahead uncounted, then close with the close handshake). NULL:
     * nothing. */
    void (*before_close)(transport_state_t *t);
    /* Free the state (closing first). */
    void (*destroy)(transport_state_t *t);

    /* What a consumer of this transport needs besides its workers (the hop
     * router of chained delays on RabbitMQ), started by hg_consumer_run with
     * its own client, which takes the consumer's stop fd (-1: none) as every
     * client of the consumer does, stopped after the workers. NULL when
     * nothing. */
    hg_err_t (*helper_start)(const char *uri, const hg_client_opts_t *opts, int stop_fd, hg_log_fn log, void *log_arg,
                             void **handle, hg_error_t *err);
    void (*helper_stop)(void *handle);
} transport_ops_t;

/* The transport for uri's scheme, or NULL for hourglass:// (the built-in
 * RESP transport, also for anything unparsable: its parser names the error). */
const transport_ops_t *transport_for_uri(const char *uri);

/* The RabbitMQ transport (lib/rmq_transport.c). */
extern const transport_ops_t rmq_transport_ops;

#endif
