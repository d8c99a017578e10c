/*
 * db/tls_check.h — the checks of the TLS parameters of a MariaDB connection
 * (hg_order_db_params_t's tls, tls_ca_file, tls_cert_file, tls_key_file),
 * shared by hg_order_db_open (whose errors name the struct's fields) and
 * db/keys.h (whose errors name the mysql-tls* config keys): one set of rules,
 * the names passed in.
 *
 * Header only (static inline): hourglass-consumer and hourglass-cli reach
 * db/keys.h without linking db/, whose symbols libhourglass hides. Pure but
 * for reading the files; thread-safe.
 */
#ifndef HG_DB_TLS_CHECK_H
#define HG_DB_TLS_CHECK_H

#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "include/hourglass/order.h"

/* The names an error uses for the mode and the three files. */
typedef struct db_tls_names {
    const char *mode, *ca_file, *cert_file, *key_file;
} db_tls_names_t;

#define DB_TLS_PEM_MAX (1024 * 1024) /* bytes of a file looked through for its PEM line */

/* 0 when the file at path can be read and holds a "-----BEGIN …kind-----"
 * line (kind "CERTIFICATE" or "PRIVATE KEY") within its first
 * DB_TLS_PEM_MAX bytes; -1 with err naming name, the path and the problem. */
static inline int db_tls_pem_check(const char *name, const char *path, const char *kind, char *err, size_t errlen)
{
    if (path[0] == '\0') {
        snprintf(err, errlen, "%s is empty: give a PEM file", name);
        return -1;
    }
    FILE *f = fopen(path, "re");
    if (f == NULL) {
        snprintf(err, errlen, "%s: cannot read %s: %s", name, path, strerror(errno));
        return -1;
    }
    char line[512];
    size_t seen = 0;
    int found = 0;
    while (!found && seen < DB_TLS_PEM_MAX && fgets(line, sizeof line, f) != NULL) {
        seen += strlen(line);
        found = strncmp(line, "-----BEGIN ", 11) == 0 && strstr(line, kind) != NULL;
    }
    int failed = ferror(f), saved = errno;
    fclose(f);
    if (failed) { /* a directory, an I/O error */
        snprintf(err, errlen, "%s: cannot read %s: %s", name, path, strerror(saved));
        return -1;
    }
    if (!found) {
        snprintf(err, errlen, "%s: %s holds no PEM %s (no \"-----BEGIN …%s-----\" line)", name, path,
                 strcmp(kind, "PRIVATE KEY") == 0 ? "private key" : "certificate", kind);
        return -1;
    }
    return 0;
}

/* The rules: mode is off, on or verify; verify needs the CA file; the
 * client certificate and its key come together; no file is given with the
 * mode off (it would not be used: a plaintext connection the operator
 * thought was TLS); each file given can be read and holds a PEM of its
 * kind. Returns 0, or -1 with err naming the field or key (n's names). */
static inline int db_tls_check(const db_tls_names_t *n, int mode, const char *ca, const char *cert, const char *key,
                               char *err, size_t errlen)
{
    if (mode < HG_ORDER_TLS_OFF || mode > HG_ORDER_TLS_VERIFY) {
        snprintf(err, errlen, "%s: %d is not off (0), on (1) or verify (2)", n->mode, mode);
        return -1;
    }
    const char *set = ca != NULL ? n->ca_file : cert != NULL ? n->cert_file : key != NULL ? n->key_file : NULL;
    if (mode == HG_ORDER_TLS_OFF && set != NULL) {
        snprintf(err, errlen, "%s is set but %s is off (it would not be used): set %s to on or verify", set, n->mode,
                 n->mode);
        return -1;
    }
    if (mode == HG_ORDER_TLS_VERIFY && ca == NULL) {
        snprintf(err, errlen,
                 "%s is verify but %s is not set: the server's certificate has nothing to be checked against", n->mode,
                 n->ca_file);
        return -1;
    }
    if ((cert == NULL) != (key == NULL)) {
        snprintf(err, errlen, "%s is set without %s", cert != NULL ? n->cert_file : n->key_file,
                 cert != NULL ? n->key_file : n->cert_file);
        return -1;
    }
    if (ca != NULL && db_tls_pem_check(n->ca_file, ca, "CERTIFICATE", err, errlen) != 0)
        return -1;
    if (cert != NULL && db_tls_pem_check(n->cert_file, cert, "CERTIFICATE", err, errlen) != 0)
        return -1;
    if (key != NULL && db_tls_pem_check(n->key_file, key, "PRIVATE KEY", err, errlen) != 0)
        return -1;
    return 0;
}

#endif
