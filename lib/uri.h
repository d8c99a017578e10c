/*
 * lib/uri.h — parsing broker URIs (internal to libhourglass).
 *
 *   hourglass://[user:pass@]host[:port][/]
 *   hourglass+tls://[user:pass@]host[:port][/][?ca=FILE&cert=FILE&key=FILE&sni=NAME]
 *
 * Strict: anything not in this grammar is refused with a message naming the
 * bad part (never echoing the password). Pure logic, no allocation, no I/O;
 * thread-safe.
 */
#ifndef HG_LIB_URI_H
#define HG_LIB_URI_H

#include <stddef.h>

#define URI_HOST_MAX 256  /* host buffer: a DNS name is at most 253 bytes */
#define URI_CRED_MAX 256  /* user and password buffers (decoded, NUL included) */
#define URI_PATH_MAX 1024 /* a TLS file path (decoded, NUL included) */

typedef struct uri {
    int tls;                 /* 1 for hourglass+tls:// */
    char host[URI_HOST_MAX]; /* name, IPv4, or IPv6 without the brackets */
    int port;                /* 1..65535 (default_port when absent) */
    int has_auth;            /* 1 when user:pass@ was given */
    int has_user;            /* 1 when user@ or user:pass@ was given (user@ alone: the password
                                must come from elsewhere: hg_client_opts_t.password) */
    char user[URI_CRED_MAX]; /* percent-decoded */
    char password[URI_CRED_MAX];
    /* hourglass+tls:// query parameters (percent-decoded; "" when absent) */
    char tls_ca[URI_PATH_MAX];   /* ca=: CA file the broker's certificate must chain to */
    char tls_cert[URI_PATH_MAX]; /* cert=: client certificate (mutual TLS) */
    char tls_key[URI_PATH_MAX];  /* key=: its private key */
    char tls_sni[URI_HOST_MAX];  /* sni=: the name to verify and send instead of host */
} uri_t;

/* Parse text into *out. default_port is used when the URI names no port.
 * Returns 0, or -1 with err[errlen] (err may be NULL) naming the bad part:
 *   "missing scheme (want hourglass://host[:port], hourglass+tls://…, amqp://… or amqps://…)"
 *   "unsupported scheme 'redis' (want hourglass://, hourglass+tls://, amqp:// or amqps://)"
 * (the schemes hg_client_open takes: it hands amqp:// and amqps:// to their transport before this
 * parser, so an unknown scheme's message names those too)
 *   "missing host"
 *   "bad port '65536': out of range (want 1..65535)", "bad port 'x': not a number …"
 *   "empty user name", "empty password for user 'bob'"
 * A user without a password ("hourglass://bob@host") parses, with has_user
 * set and has_auth not: its password is the caller's to supply.
 *   "bad percent-escape '%zz' in the password",
 *   "unknown URI parameter 'foo' (want ca, cert, key or sni)",
 *   "unexpected query '?ca=x' (only hourglass+tls:// takes parameters)", ...
 * On failure *out is left zeroed. */
int uri_parse(const char *text, int default_port, uri_t *out, char *err, size_t errlen);

/* The port text p[0..n) as 1..65535 into *port. 0, or -1 with err naming
 * the text: "empty port after ':' (want 1..65535)", "bad port 'x': not a
 * number (want 1..65535)", "bad port '99999': out of range (want
 * 1..65535)". Shared with amqp:// (lib/rmq_transport.c). */
int uri_parse_port(const char *p, size_t n, int *port, char *err, size_t errlen);

/* host and port as messages show them, into buf[len]: "host:port", or
 * "[host]:port" for an IPv6 address (a host holding ':'). Returns buf. */
const char *uri_address(char *buf, size_t len, const char *host, int port);

/* The TLS parameters q (the text after '?', to the end): name=value pairs
 * joined by '&', each of ca, cert, key, sni at most once, percent-decoded
 * into u->tls_ca, tls_cert, tls_key, tls_sni (which must be "" on entry; the
 * other fields are not touched). Shared with amqps:// (lib/rmq_transport.c).
 * Returns 0, or -1 with err naming the bad parameter. */
int uri_parse_tls_query(const char *q, uri_t *u, char *err, size_t errlen);

#endif
