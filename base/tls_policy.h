/*
 * base/tls_policy.h — the TLS 1.2 cipher suites every Hourglass TLS endpoint
 * offers, server (common/tls_server.c: the broker's tls-port, the console's
 * https) and client (lib/tlsconn.c: libhourglass to a broker) alike: one
 * list, so the two sides cannot drift apart.
 *
 * Forward secrecy (ECDHE) and an AEAD cipher (AES-GCM, ChaCha20-Poly1305)
 * only: the "intermediate" profile without its DHE suites. No CBC, no SHA-1
 * MAC, no static RSA key exchange. TLS 1.3's suites are set apart by OpenSSL
 * (all AEAD) and are not touched. Header only; a string for
 * SSL_CTX_set_cipher_list.
 */
#ifndef HG_BASE_TLS_POLICY_H
#define HG_BASE_TLS_POLICY_H

#define HG_TLS12_CIPHERS                                                                       \
    "ECDHE-ECDSA-AES128-GCM-SHA256:ECDHE-RSA-AES128-GCM-SHA256:ECDHE-ECDSA-AES256-GCM-SHA384:" \
    "ECDHE-RSA-AES256-GCM-SHA384:ECDHE-ECDSA-CHACHA20-POLY1305:ECDHE-RSA-CHACHA20-POLY1305"

#endif
