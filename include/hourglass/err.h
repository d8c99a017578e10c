/*
 * <hourglass/err.h> — the two types every libhourglass header shares: the
 * error codes (hg_err_t) a client call returns, and the client handle
 * (hg_client_t, opaque). <hourglass/hourglass.h> and <hourglass/order.h>
 * include it, so neither header includes the other's; an application
 * includes one of those two, not this one.
 */
#ifndef HOURGLASS_ERR_H
#define HOURGLASS_ERR_H

#ifdef __cplusplus
extern "C" {
#endif

typedef enum hg_err {
    HG_OK = 0,
    HG_ERR_ARG,         /* an invalid argument or option (the message names it) */
    HG_ERR_URI,         /* the URI does not parse (the message names the bad part) */
    HG_ERR_UNSUPPORTED, /* a feature this version lacks */
    HG_ERR_CONNECT,     /* could not connect (resolve, refuse, timeout), after
                           the configured reconnect attempts */
    HG_ERR_IO,          /* the connection was lost during a command; the command
                           may or may not have been applied by the broker */
    HG_ERR_TIMEOUT,     /* no reply within the read timeout (connection closed) */
    HG_ERR_PROTOCOL,    /* the broker sent something that is not valid RESP or
                           not the reply shape the command expects */
    HG_ERR_SERVER,      /* the broker answered with an error reply (-ERR ...,
                           -NOPERM ...); the message is that reply's text */
    HG_ERR_AUTH,        /* AUTH with the URI's credentials was refused (a client
                           without credentials sends no AUTH: a broker with
                           users answers its commands "NOAUTH …", HG_ERR_SERVER;
                           a consumer stops on it with HG_ERR_AUTH) */
    HG_ERR_STOPPED,     /* interrupted because a stop was requested */
    HG_ERR_SYSTEM       /* an operating-system call failed (threads, pipes) */
} hg_err_t;

/* One connection to a broker (<hourglass/hourglass.h>: hg_client_open). */
typedef struct hg_client hg_client_t;

#ifdef __cplusplus
}
#endif

#endif
