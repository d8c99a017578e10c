/*
 * lib/client_internal.h — the insides of a client, shared by the files of
 * the client only: lib/client.c, client_connect.c, client_exchange.c and
 * client_api.c. Nothing else includes it: the rest of the library goes
 * through lib/client.h, and applications see an opaque hg_client_t.
 *
 * Invariant (lib/client.c): when fd >= 0 no reply is outstanding, so the
 * bytes in `in` beyond in_off are empty between calls.
 * Threading: a client is used by one thread at a time.
 */
#ifndef HG_LIB_CLIENT_INTERNAL_H
#define HG_LIB_CLIENT_INTERNAL_H

#include "lib/client.h"
#include "lib/tlsconn.h"
#include "lib/transport.h"
#include "lib/uri.h"

#include "base/buf.h"

struct hg_client {
    uri_t uri;
    hg_client_opts_t opts;
    char address[URI_HOST_MAX + 16]; /* "host:port" or "[v6]:port" */
    int fd;                          /* -1 when disconnected */
    tlsconn_ctx_t *tls_ctx;          /* hourglass+tls://: the client context; else NULL */
    tlsconn_t *tls;                  /* the TLS session on fd, when tls_ctx */
    char tls_name[URI_HOST_MAX];     /* the name the broker's certificate must carry */
    int verify_failed;               /* the last connect round failed on the certificate */
    int wake_fd;                     /* -1, or readable = stop CLIENT_INTERRUPTIBLE waits and sleeps */
    int stop_fd;                     /* opts.stop_fd, hg_client_set_stop_fd: -1, or readable = stop every wait */
    buf_t in;                        /* bytes received */
    size_t in_off;                   /* parsed up to here */
    buf_t out;                       /* request scratch for client_call */
    unsigned connects;               /* successful connections so far */
    const transport_ops_t *tops;     /* NULL: RESP (hourglass://); else the transport */
    transport_state_t *tstate;       /* its state */
    hg_err_t errcode;
    char errmsg[HG_ERRMSG_MAX];
};

/* 1 when wake_fd (may be -1) is readable now: a stop was asked. Never
 * blocks. */
int client_woken(int wake_fd);

#endif
