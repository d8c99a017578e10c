/*
 * db/tls_check.c — the checks of a MariaDB connection's TLS parameters
 * (contract: tls_check.h): the mode's rules, then each file read whole
 * (at most DB_TLS_FILE_MAX bytes) and handed to OpenSSL's PEM and X509
 * readers from memory, so a file that cannot be read reads as the system's
 * reason ("No such file or directory", "Is a directory") and a file that
 * OpenSSL refuses reads as OpenSSL's reason, both after the key's name and
 * the path. Only a regular file is read: anything else (a FIFO, whose open
 * would wait for a writer for ever; a socket; a device) is refused before a
 * byte is read, the file opened without waiting.
 *
 * No passphrase is ever asked: the key is read with a callback that refuses
 * and records that it was asked (without one OpenSSL would prompt on the
 * terminal), which is how an encrypted key — PKCS#8 "ENCRYPTED PRIVATE
 * KEY" or a legacy "Proc-Type: 4,ENCRYPTED" one — is told apart from a
 * damaged one.
 *
 * Any thread; OpenSSL's per-thread error queue is cleared before and after.
 */
#include "config.h" /* _GNU_SOURCE: memmem */

#include "db/tls_check.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>

#include "base/alloc.h"
#include "base/err.h"
#include "base/openssl_error.h"
#include "include/hourglass/order.h"

/* A file's bytes, read whole. */
typedef struct file_bytes {
    char *data;
    size_t len;
} file_bytes_t;

/* What a file that is not regular nor a directory is, for an error. */
static const char *file_kind(mode_t mode)
{
    if (S_ISFIFO(mode))
        return "a FIFO";
    if (S_ISSOCK(mode))
        return "a socket";
    if (S_ISCHR(mode))
        return "a character device";
    if (S_ISBLK(mode))
        return "a block device";
    return "not a plain file";
}

/* Read the file at path into *out (freed with free(out->data)). 0, or -1
 * with err naming name, the path and the problem. */
static int file_read(const char *name, const char *path, file_bytes_t *out, char *err, size_t errlen)
{
    out->data = NULL;
    out->len = 0;
    if (path[0] == '\0')
        return err_set(err, errlen, "%s is empty: give a PEM file", name);
    /* Opened without waiting (a FIFO's open waits for a writer) and refused
     * unless regular (a FIFO, a socket, a device: no PEM file, and reading
     * one may wait for ever), before any byte is read. */
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
    if (fd < 0)
        return err_set(err, errlen, "%s: cannot read %s: %s", name, path, strerror(errno));
    struct stat st = { 0 };
    if (fstat(fd, &st) != 0) {
        int saved = errno;
        close(fd);
        return err_set(err, errlen, "%s: cannot read %s: %s", name, path, strerror(saved));
    }
    if (S_ISDIR(st.st_mode)) {
        close(fd);
        return err_set(err, errlen, "%s: cannot read %s: %s", name, path, strerror(EISDIR));
    }
    if (!S_ISREG(st.st_mode)) {
        close(fd);
        return err_set(err, errlen, "%s: %s is not a regular file (%s): give a PEM file", name, path,
                       file_kind(st.st_mode));
    }
    if (st.st_size > DB_TLS_FILE_MAX) {
        close(fd);
        return err_set(err, errlen, "%s: %s is larger than %d MiB: not a PEM certificate or key file", name, path,
                       DB_TLS_FILE_MAX / (1024 * 1024));
    }
    FILE *f = fdopen(fd, "r");
    if (f == NULL) {
        int saved = errno;
        close(fd);
        return err_set(err, errlen, "%s: cannot read %s: %s", name, path, strerror(saved));
    }
    size_t cap = 64 * 1024;
    char *data = xmalloc(cap);
    size_t len = 0;
    for (;;) {
        if (len == cap) {
            if (cap > DB_TLS_FILE_MAX)
                break;
            cap *= 2;
            data = xrealloc(data, cap);
        }
        size_t got = fread(data + len, 1, cap - len, f);
        len += got;
        if (got == 0)
            break;
    }
    int failed = ferror(f), saved = errno;
    fclose(f);
    if (failed) {
        free(data);
        return err_set(err, errlen, "%s: cannot read %s: %s", name, path, strerror(saved));
    }
    if (len > DB_TLS_FILE_MAX) { /* a file that grew past the limit while it was read */
        free(data);
        return err_set(err, errlen, "%s: %s is larger than %d MiB: not a PEM certificate or key file", name, path,
                       DB_TLS_FILE_MAX / (1024 * 1024));
    }
    out->data = data;
    out->len = len;
    return 0;
}

/* 0 when bytes hold a PEM block at all; else -1 with err saying the file is
 * DER (binary: it starts with an ASN.1 SEQUENCE) or holds no PEM `what`,
 * with the command that converts a DER one (convert: "x509" or "pkey"). */
static int pem_present(const char *name, const char *path, const file_bytes_t *bytes, const char *what,
                       const char *convert, char *err, size_t errlen)
{
    static const char begin[] = "-----BEGIN ";
    if (bytes->len >= sizeof begin - 1 && memmem(bytes->data, bytes->len, begin, sizeof begin - 1) != NULL)
        return 0;
    if (bytes->len > 0 && (unsigned char)bytes->data[0] == 0x30)
        return err_set(err, errlen,
                       "%s: %s is DER (binary), not PEM: convert it with openssl %s -inform DER -in %s -out FILE.pem",
                       name, path, convert, path);
    return err_set(err, errlen, "%s: %s holds no PEM %s (no \"-----BEGIN ...-----\" block)", name, path, what);
}

/* 1 when this thread's last OpenSSL error is "no PEM block of the kind
 * asked for" (the reader ran out of file), the end of a bundle. */
static int openssl_no_more_pem(void)
{
    unsigned long e = ERR_peek_last_error();
    return ERR_GET_LIB(e) == ERR_LIB_PEM && ERR_GET_REASON(e) == PEM_R_NO_START_LINE;
}

/* OpenSSL's passphrase callback: refuses, and records that it was asked
 * (*asked = 1: the key is encrypted). Given to every PEM read: without one,
 * OpenSSL would prompt on the terminal for any block with a Proc-Type
 * ENCRYPTED header. */
static int passphrase_refused(char *buf, int size, int rwflag, void *asked)
{
    (void)buf;
    (void)size;
    (void)rwflag;
    *(int *)asked = 1;
    return -1;
}

/* Read certificates from bio until it ends: the first into *first when
 * first is not NULL (else each is freed), at most max (0: all). 0 with
 * *count, or -1 with err naming the file and the certificate that is
 * damaged or the absence of any. */
static int certificates_read(const char *name, const char *path, BIO *bio, size_t max, X509 **first, size_t *count,
                             char *err, size_t errlen)
{
    char why[256];
    *count = 0;
    while (max == 0 || *count < max) {
        int asked = 0;
        X509 *x = PEM_read_bio_X509(bio, NULL, passphrase_refused, &asked);
        if (x == NULL)
            break;
        if (first != NULL && *count == 0)
            *first = x;
        else
            X509_free(x);
        (*count)++;
    }
    if ((max == 0 || *count < max) && !openssl_no_more_pem()) {
        if (first != NULL && *first != NULL) {
            X509_free(*first);
            *first = NULL;
        }
        return err_set(err, errlen, "%s: %s: certificate %zu is damaged (%s)", name, path, *count + 1,
                       openssl_last_error(why, sizeof why, "unknown"));
    }
    ERR_clear_error();
    if (*count == 0)
        return err_set(err, errlen, "%s: %s holds no PEM certificate (no \"-----BEGIN CERTIFICATE-----\" block)", name,
                       path);
    return 0;
}

/* The certificates of the file at path: every one of a bundle when first is
 * NULL, else only the first, into *first (X509_free). 0, or -1 with err. */
static int certificate_file_check(const char *name, const char *path, X509 **first, char *err, size_t errlen)
{
    file_bytes_t bytes;
    if (file_read(name, path, &bytes, err, errlen) != 0)
        return -1;
    int rc = pem_present(name, path, &bytes, "certificate", "x509", err, errlen);
    if (rc == 0) {
        BIO *bio = BIO_new_mem_buf(bytes.data, (int)bytes.len);
        size_t count = 0;
        if (bio == NULL)
            rc = err_set(err, errlen, "%s: %s: out of memory", name, path);
        else
            rc = certificates_read(name, path, bio, first != NULL ? 1 : 0, first, &count, err, errlen);
        BIO_free(bio);
    }
    free(bytes.data);
    return rc;
}

/* The private key of the file at path into *key (EVP_PKEY_free). 0, or -1
 * with err naming name, the path and why: encrypted, DER, none, damaged. */
static int key_file_read(const char *name, const char *path, EVP_PKEY **key, char *err, size_t errlen)
{
    char why[256];
    file_bytes_t bytes;
    *key = NULL;
    if (file_read(name, path, &bytes, err, errlen) != 0)
        return -1;
    int rc = pem_present(name, path, &bytes, "private key", "pkey", err, errlen);
    if (rc == 0) {
        BIO *bio = BIO_new_mem_buf(bytes.data, (int)bytes.len);
        int asked = 0;
        *key = bio != NULL ? PEM_read_bio_PrivateKey(bio, NULL, passphrase_refused, &asked) : NULL;
        if (*key == NULL && asked)
            rc = err_set(err, errlen, "%s: %s is encrypted (a passphrase cannot be given): give the key without one",
                         name, path);
        else if (*key == NULL)
            rc = err_set(err, errlen,
                         "%s: %s holds no PEM private key OpenSSL can read (a \"-----BEGIN "
                         "PRIVATE KEY-----\", \"EC PRIVATE KEY\" or \"RSA PRIVATE KEY\" block; OpenSSL: %s)",
                         name, path, openssl_last_error(why, sizeof why, "unknown"));
        BIO_free(bio);
    }
    OPENSSL_cleanse(bytes.data, bytes.len);
    free(bytes.data);
    return rc;
}

/* The client certificate and its key: each readable, and the key the
 * certificate's. 0, or -1 with err. */
static int client_pair_check(const db_tls_names_t *n, const char *cert, const char *key, char *err, size_t errlen)
{
    char why[256];
    X509 *x = NULL;
    EVP_PKEY *pkey = NULL;
    if (certificate_file_check(n->cert_file, cert, &x, err, errlen) != 0)
        return -1;
    int rc = key_file_read(n->key_file, key, &pkey, err, errlen);
    if (rc == 0 && X509_check_private_key(x, pkey) != 1)
        rc = err_set(err, errlen,
                     "%s: %s is not the key of the certificate in %s (%s): give the pair that belongs "
                     "together",
                     n->key_file, key, cert, openssl_last_error(why, sizeof why, "unknown"));
    EVP_PKEY_free(pkey);
    X509_free(x);
    return rc;
}

int db_tls_check(const db_tls_names_t *n, int mode, const char *ca, const char *cert, const char *key, char *err,
                 size_t errlen)
{
    if (mode < HG_ORDER_TLS_OFF || mode > HG_ORDER_TLS_VERIFY)
        return err_set(err, errlen, "%s: %d is not off (0), on (1) or verify (2)", n->mode, mode);
    const char *set = ca != NULL ? n->ca_file : cert != NULL ? n->cert_file : key != NULL ? n->key_file : NULL;
    if (mode == HG_ORDER_TLS_OFF && set != NULL)
        return err_set(err, errlen, "%s is set but %s is off (it would not be used): set %s to on or verify", set,
                       n->mode, n->mode);
    if (mode == HG_ORDER_TLS_VERIFY && ca == NULL)
        return err_set(err, errlen,
                       "%s is verify but %s is not set: the server's certificate has nothing to be checked against",
                       n->mode, n->ca_file);
    if ((cert == NULL) != (key == NULL))
        return err_set(err, errlen, "%s is set without %s", cert != NULL ? n->cert_file : n->key_file,
                       cert != NULL ? n->key_file : n->cert_file);
    ERR_clear_error();
    int rc = 0;
    if (ca != NULL)
        rc = certificate_file_check(n->ca_file, ca, NULL, err, errlen);
    if (rc == 0 && cert != NULL)
        rc = client_pair_check(n, cert, key, err, errlen);
    ERR_clear_error();
    return rc;
}
