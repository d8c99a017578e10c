/*
 * common/tls_keys.h — the broker-TLS keys of the programs that connect to
 * a broker (hourglass-consumer, hourglass-compensator; hourglass-cli takes
 * the same names as flags): one set of config-table rows (common/cfg.h), one
 * set of fields, one copy into libhourglass's client options.
 *
 * A program puts TLS_KEYS_FIELDS in its config struct and
 * TLS_KEYS_ROWS(its_config_t) in its cfg_key_t table; the keys are
 *   tls-ca-cert-file   CA file the broker's certificate must chain to
 *   tls-cert-file      client certificate for a broker with tls-auth-clients
 *   tls-key-file       its private key
 *   tls-server-name    the name the broker's certificate must carry (and SNI)
 * They act only on a TLS uri, hourglass+tls:// or amqps:// (tls_keys_check
 * refuses them otherwise, so a forgotten "+tls" never silently sends
 * plaintext), and a parameter in the URI itself (?ca=...) wins over them
 * (the library's rule).
 *
 * Header only, with no library of ours to link: TLS_KEYS_TO_OPTS names the
 * fields of <hourglass/hourglass.h>'s hg_client_opts_t and
 * tls_keys_check_consumer calls libhourglass, which every program that
 * includes this header links. Main thread, at start-up.
 */
#ifndef HG_COMMON_TLS_KEYS_H
#define HG_COMMON_TLS_KEYS_H

#include <hourglass/hourglass.h>

#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "common/cfg.h"

/* The fields, inside the program's config struct (NULL: unset). */
#define TLS_KEYS_FIELDS char *tls_ca_cert_file, *tls_cert_file, *tls_key_file, *tls_server_name

/* The rows, for a table of the program's config_type (with TLS_KEYS_FIELDS). */
#define TLS_KEYS_ROWS(config_type)                                                                 \
    { CFG_KEY("tls-ca-cert-file", CFG_STRING, NULL, 0, 0, offsetof(config_type, tls_ca_cert_file), \
              "TLS uri: CA file (PEM) the broker's certificate must chain to"),                    \
      .hint = "FILE", .shown_default = "the system's trust store" },                               \
        { CFG_KEY("tls-cert-file", CFG_STRING, NULL, 0, 0, offsetof(config_type, tls_cert_file),   \
                  "TLS uri: client certificate (PEM) for a broker with tls-auth-clients"),         \
          .hint = "FILE" },                                                                        \
        { CFG_KEY("tls-key-file", CFG_STRING, NULL, 0, 0, offsetof(config_type, tls_key_file),     \
                  "TLS uri: the private key of tls-cert-file (PEM, unencrypted)"),                 \
          .hint = "FILE" },                                                                        \
    {                                                                                              \
        CFG_KEY("tls-server-name", CFG_STRING, NULL, 0, 0, offsetof(config_type, tls_server_name), \
                "TLS uri: the name the broker's certificate must carry (also sent as SNI)"),       \
            .hint = "NAME", .shown_default = "the uri's host"                                      \
    }

/* 1 when uri speaks TLS: hourglass+tls:// or amqps://. */
static inline int tls_uri(const char *uri)
{
    return uri != NULL && (strncasecmp(uri, "hourglass+tls://", 16) == 0 || strncasecmp(uri, "amqps://", 8) == 0);
}

/* Checks beyond the table's: a tls-* key set with a uri that is not a TLS
 * uri (tls_uri), or only one of tls-cert-file and tls-key-file. Returns 0,
 * or -1 with err naming the key. */
static inline int tls_keys_check(const char *uri, const char *ca, const char *cert, const char *key,
                                 const char *server_name, char *err, size_t errlen)
{
    const char *set = ca != NULL            ? "tls-ca-cert-file"
                      : cert != NULL        ? "tls-cert-file"
                      : key != NULL         ? "tls-key-file"
                      : server_name != NULL ? "tls-server-name"
                                            : NULL;
    if (set != NULL && !tls_uri(uri)) {
        snprintf(err, errlen, "%s is set but uri is neither hourglass+tls:// nor amqps:// (it would not be used)", set);
        return -1;
    }
    if ((cert == NULL) != (key == NULL)) {
        snprintf(err, errlen, "%s is set without %s", cert != NULL ? "tls-cert-file" : "tls-key-file",
                 cert != NULL ? "tls-key-file" : "tls-cert-file");
        return -1;
    }
    return 0;
}

/* tls_keys_check on the TLS_KEYS_FIELDS of the config *k and its uri. */
#define TLS_KEYS_CHECK(k, uri, err, errlen)                                                                        \
    tls_keys_check((uri), (k)->tls_ca_cert_file, (k)->tls_cert_file, (k)->tls_key_file, (k)->tls_server_name, err, \
                   errlen)

/* Copy the TLS_KEYS_FIELDS of the config *k into the hg_client_opts_t *o
 * (the strings stay the config's). */
#define TLS_KEYS_TO_OPTS(k, o)                       \
    do {                                             \
        (o)->tls_ca_file = (k)->tls_ca_cert_file;    \
        (o)->tls_cert_file = (k)->tls_cert_file;     \
        (o)->tls_key_file = (k)->tls_key_file;       \
        (o)->tls_server_name = (k)->tls_server_name; \
    } while (0)

/* The handler of the consumer tls_keys_check_consumer builds (and frees). */
static inline hg_outcome_t tls_keys_noop_handler(const hg_message_t *m, char *r, size_t n, void *a)
{
    (void)m, (void)r, (void)n, (void)a;
    return HG_DONE;
}

/* The uri, the tls-* keys as copied into *opts (TLS_KEYS_TO_OPTS) and the
 * rest of a consumer's options, checked by libhourglass without connecting:
 * it has no separate URI check, so this creates a consumer from a copy of
 * *opts (with a handler that does nothing in place of opts->handler) and
 * frees it. Returns 0, or -1 with err "uri: <the library's message>" for a
 * bad or unsupported URI and for the library's TLS file errors ("TLS CA file
 * x: ...", which belong to the uri and its tls-* keys), "uri: no password
 * given for user …: <password_hint>" when the URI names a user and no
 * password came (the library does not know where this program takes one:
 * password_hint says, e.g. "set password-file (…)"), and "<other_key>: <the
 * library's message>" for any other refusal. */
static inline int tls_keys_check_uri(const hg_consumer_opts_t *opts, const char *other_key, const char *password_hint,
                                     char *err, size_t errlen)
{
    hg_consumer_opts_t o = *opts;
    o.handler = tls_keys_noop_handler;
    hg_consumer_t *c = NULL;
    hg_error_t e = { 0 };
    hg_err_t rc = hg_consumer_new(&o, &c, &e);
    hg_consumer_free(c);
    if (rc != HG_OK) {
        static const char no_password[] = "no password given for user";
        if (strncmp(e.message, no_password, sizeof no_password - 1) == 0) {
            snprintf(err, errlen, "uri: %s: %s", e.message, password_hint);
            return -1;
        }
        int uri_part = rc == HG_ERR_URI || rc == HG_ERR_UNSUPPORTED || strncmp(e.message, "TLS ", 4) == 0;
        snprintf(err, errlen, "%s: %s", uri_part ? "uri" : other_key, e.message);
        return -1;
    }
    return 0;
}

/* tls_keys_check_uri for a daemon, whose URI's password comes from its
 * password-file key. */
static inline int tls_keys_check_consumer(const hg_consumer_opts_t *opts, const char *other_key, char *err,
                                          size_t errlen)
{
    return tls_keys_check_uri(opts, other_key, "set password-file (or put user:password in the uri)", err, errlen);
}

#endif
