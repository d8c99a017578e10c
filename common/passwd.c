/*
 * common/passwd.c — the password hash format: parse, derive, compare
 * (contract in passwd.h).
 *
 * Derivation goes through OpenSSL 3's EVP_KDF ("SCRYPT" or "PBKDF2" with
 * SHA-256) with the parameters read from the text; the derived key is as
 * long as the stored one and compared with CRYPTO_memcmp. Salt and hash are
 * lower-case hex: longer than base64, but with one spelling, no padding
 * rules and nothing to escape in a whitespace-separated users file.
 *
 * Any thread; no shared state but a passwd_source_t's, under its lock.
 * passwd_source_refresh_logged writes to the log (common/log.h): this
 * library depends on libhgcommon.
 */
#include "common/passwd.h"

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <openssl/core_names.h>
#include <openssl/crypto.h>
#include <openssl/kdf.h>
#include <openssl/params.h>
#include <openssl/rand.h>

#include "base/alloc.h"
#include "base/err.h"
#include "base/openssl_error.h"
#include "common/log.h"

#define SALT_BYTES     16
#define KEY_BYTES      32
#define SALT_MIN       8
#define SALT_MAX       64
#define KEY_MIN        16
#define KEY_MAX        64
#define SCRYPT_MAXMEM  (256ull * 1024 * 1024)
#define PBKDF2_MIN_ITS 1000u
#define PBKDF2_MAX_ITS 10000000u

/* A parsed hash text. */
typedef struct parsed {
    passwd_params_t params;
    unsigned char salt[SALT_MAX];
    size_t salt_len;
    unsigned char key[KEY_MAX];
    size_t key_len;
} parsed_t;

void passwd_params_default(passwd_params_t *p, passwd_kind_t kind)
{
    memset(p, 0, sizeof *p);
    p->kind = kind;
    p->log2_n = 15;
    p->r = 8;
    p->p = 1;
    p->iterations = 600000;
}

int passwd_params_check(const passwd_params_t *p, char *err, size_t errlen)
{
    if (p->kind == PASSWD_SCRYPT) {
        if (p->log2_n < 10 || p->log2_n > 20) {
            return err_set(err, errlen, "scrypt ln=%u out of range 10..20", p->log2_n);
        }
        if (p->r < 1 || p->r > 32) {
            return err_set(err, errlen, "scrypt r=%u out of range 1..32", p->r);
        }
        if (p->p < 1 || p->p > 16) {
            return err_set(err, errlen, "scrypt p=%u out of range 1..16", p->p);
        }
        unsigned long long mem = 128ull * ((unsigned long long)1 << p->log2_n) * p->r * p->p;
        if (mem > SCRYPT_MAXMEM) {
            return err_set(err, errlen, "scrypt ln=%u,r=%u,p=%u needs %llu MiB, more than %llu MiB", p->log2_n, p->r,
                           p->p, mem >> 20, SCRYPT_MAXMEM >> 20);
        }
        return 0;
    }
    if (p->kind == PASSWD_PBKDF2_SHA256) {
        if (p->iterations < PBKDF2_MIN_ITS || p->iterations > PBKDF2_MAX_ITS) {
            return err_set(err, errlen, "pbkdf2 i=%u out of range %u..%u", p->iterations, PBKDF2_MIN_ITS,
                           PBKDF2_MAX_ITS);
        }
        return 0;
    }
    return err_set(err, errlen, "unknown hash kind %d", (int)p->kind);
}

/* Derive key[key_len] from the password with the parameters and salt. */
static int derive(const passwd_params_t *p, const char *password, size_t len, const unsigned char *salt,
                  size_t salt_len, unsigned char *key, size_t key_len, char *err, size_t errlen)
{
    OSSL_PARAM params[7];
    int n = 0;
    uint64_t big_n = (uint64_t)1 << p->log2_n;
    uint32_t r = p->r, par = p->p, its = p->iterations;
    uint64_t maxmem = SCRYPT_MAXMEM + (1u << 20);
    const char *alg = p->kind == PASSWD_SCRYPT ? OSSL_KDF_NAME_SCRYPT : OSSL_KDF_NAME_PBKDF2;

    /* OpenSSL takes the password as a non-const octet string it only reads. */
    params[n++] = OSSL_PARAM_construct_octet_string(OSSL_KDF_PARAM_PASSWORD, (void *)(uintptr_t)password, len);
    params[n++] = OSSL_PARAM_construct_octet_string(OSSL_KDF_PARAM_SALT, (void *)(uintptr_t)salt, salt_len);
    if (p->kind == PASSWD_SCRYPT) {
        params[n++] = OSSL_PARAM_construct_uint64(OSSL_KDF_PARAM_SCRYPT_N, &big_n);
        params[n++] = OSSL_PARAM_construct_uint32(OSSL_KDF_PARAM_SCRYPT_R, &r);
        params[n++] = OSSL_PARAM_construct_uint32(OSSL_KDF_PARAM_SCRYPT_P, &par);
        params[n++] = OSSL_PARAM_construct_uint64(OSSL_KDF_PARAM_SCRYPT_MAXMEM, &maxmem);
    } else {
        params[n++] = OSSL_PARAM_construct_utf8_string(OSSL_KDF_PARAM_DIGEST, (char *)"SHA256", 0);
        params[n++] = OSSL_PARAM_construct_uint32(OSSL_KDF_PARAM_ITER, &its);
    }
    params[n] = OSSL_PARAM_construct_end();

    EVP_KDF *kdf = EVP_KDF_fetch(NULL, alg, NULL);
    EVP_KDF_CTX *ctx = kdf ? EVP_KDF_CTX_new(kdf) : NULL;
    int ok = ctx != NULL && EVP_KDF_derive(ctx, key, key_len, params) == 1;
    EVP_KDF_CTX_free(ctx);
    EVP_KDF_free(kdf);
    if (!ok) {
        char why[160];
        return err_set(err, errlen, "%s key derivation failed: %s", alg,
                       openssl_last_error(why, sizeof why, "no OpenSSL error recorded"));
    }
    return 0;
}

static void to_hex(const unsigned char *b, size_t n, char *out)
{
    static const char digits[] = "0123456789abcdef";
    for (size_t i = 0; i < n; i++) {
        out[2 * i] = digits[b[i] >> 4];
        out[2 * i + 1] = digits[b[i] & 15];
    }
    out[2 * n] = '\0';
}

static int hex_digit(char c)
{
    if (c >= '0' && c <= '9') {
        return c - '0';
    }
    if (c >= 'a' && c <= 'f') {
        return c - 'a' + 10;
    }
    return -1; /* lower case only: one spelling */
}

/* Decode the hex field s[0..len) of bounds [min, max] bytes into out. */
static int from_hex(const char *s, size_t len, unsigned char *out, size_t *n, size_t min, size_t max, const char *what,
                    char *err, size_t errlen)
{
    if (len % 2 != 0 || len / 2 < min || len / 2 > max) {
        return err_set(err, errlen, "%s has %zu hex digits; want an even number from %zu to %zu", what, len, 2 * min,
                       2 * max);
    }
    for (size_t i = 0; i < len; i += 2) {
        int hi = hex_digit(s[i]), lo = hex_digit(s[i + 1]);
        if (hi < 0 || lo < 0) {
            return err_set(err, errlen, "%s is not lower-case hex", what);
        }
        out[i / 2] = (unsigned char)(hi * 16 + lo);
    }
    *n = len / 2;
    return 0;
}

/* A decimal parameter "name=digits" at *s ending at ',' or '$'; advances *s. */
static int param(const char **s, const char *name, unsigned *out, char *err, size_t errlen)
{
    size_t nl = strlen(name);
    if (strncmp(*s, name, nl) != 0 || (*s)[nl] != '=') {
        return err_set(err, errlen, "expected parameter '%s='", name);
    }
    const char *p = *s + nl + 1;
    unsigned long long v = 0;
    const char *start = p;
    while (*p >= '0' && *p <= '9' && p - start < 9) {
        v = v * 10 + (unsigned long long)(*p - '0');
        p++;
    }
    if (p == start || (*p != ',' && *p != '$')) {
        return err_set(err, errlen, "parameter '%s' is not a number of at most 9 digits", name);
    }
    *out = (unsigned)v;
    *s = p;
    return 0;
}

static int parse(const char *text, parsed_t *out, char *err, size_t errlen)
{
    memset(out, 0, sizeof *out);
    const char *s = text;
    char why[120] = "";
    if (strncmp(s, "$scrypt$", 8) == 0) {
        out->params.kind = PASSWD_SCRYPT;
        s += 8;
        if (param(&s, "ln", &out->params.log2_n, why, sizeof why) != 0 ||
            (*s++ != ',' && err_set(why, sizeof why, "expected ',' after ln")) ||
            param(&s, "r", &out->params.r, why, sizeof why) != 0 ||
            (*s++ != ',' && err_set(why, sizeof why, "expected ',' after r")) ||
            param(&s, "p", &out->params.p, why, sizeof why) != 0) {
            return err_set(err, errlen, "bad scrypt parameters: %s (want $scrypt$ln=N,r=N,p=N$salt$hash)", why);
        }
    } else if (strncmp(s, "$pbkdf2-sha256$", 15) == 0) {
        out->params.kind = PASSWD_PBKDF2_SHA256;
        s += 15;
        if (param(&s, "i", &out->params.iterations, why, sizeof why) != 0) {
            return err_set(err, errlen, "bad pbkdf2 parameters: %s (want $pbkdf2-sha256$i=N$salt$hash)", why);
        }
    } else {
        return err_set(err, errlen,
                       "unknown hash format (want $scrypt$... or $pbkdf2-sha256$..., made by hourglass-cli passwd)");
    }
    if (passwd_params_check(&out->params, err, errlen) != 0) {
        return -1;
    }
    if (*s++ != '$') {
        return err_set(err, errlen, "missing '$' before the salt");
    }
    const char *salt = s;
    const char *dollar = strchr(salt, '$');
    if (dollar == NULL) {
        return err_set(err, errlen, "missing '$' before the hash");
    }
    if (from_hex(salt, (size_t)(dollar - salt), out->salt, &out->salt_len, SALT_MIN, SALT_MAX, "the salt", err,
                 errlen) != 0) {
        return -1;
    }
    const char *key = dollar + 1;
    return from_hex(key, strlen(key), out->key, &out->key_len, KEY_MIN, KEY_MAX, "the hash", err, errlen);
}

int passwd_check(const char *hash, char *err, size_t errlen)
{
    parsed_t p;
    return parse(hash, &p, err, errlen);
}

int passwd_hash(const char *password, size_t len, const passwd_params_t *params, char *out, size_t outlen, char *err,
                size_t errlen)
{
    unsigned char salt[SALT_BYTES], key[KEY_BYTES];
    char salt_hex[2 * SALT_BYTES + 1], key_hex[2 * KEY_BYTES + 1];

    if (len == 0) {
        return err_set(err, errlen, "empty password");
    }
    if (len > PASSWD_MAX) { /* the broker's AUTH refuses it: the hash could never be matched */
        return err_set(err, errlen, "the password is %zu bytes, longer than %d", len, PASSWD_MAX);
    }
    if (passwd_params_check(params, err, errlen) != 0) {
        return -1;
    }
    if (RAND_bytes(salt, sizeof salt) != 1) {
        return err_set(err, errlen, "no random bytes for the salt (OpenSSL RAND_bytes failed)");
    }
    if (derive(params, password, len, salt, sizeof salt, key, sizeof key, err, errlen) != 0) {
        return -1;
    }
    to_hex(salt, sizeof salt, salt_hex);
    to_hex(key, sizeof key, key_hex);
    OPENSSL_cleanse(key, sizeof key);
    int n;
    if (params->kind == PASSWD_SCRYPT) {
        n = snprintf(out, outlen, "$scrypt$ln=%u,r=%u,p=%u$%s$%s", params->log2_n, params->r, params->p, salt_hex,
                     key_hex);
    } else {
        n = snprintf(out, outlen, "$pbkdf2-sha256$i=%u$%s$%s", params->iterations, salt_hex, key_hex);
    }
    if (n < 0 || (size_t)n >= outlen) {
        return err_set(err, errlen, "hash text longer than %zu bytes", outlen);
    }
    return 0;
}

int passwd_verify(const char *hash, const char *password, size_t len, char *err, size_t errlen)
{
    parsed_t p;
    unsigned char key[KEY_MAX];

    if (parse(hash, &p, err, errlen) != 0) {
        return -1;
    }
    if (derive(&p.params, password, len, p.salt, p.salt_len, key, p.key_len, err, errlen) != 0) {
        return -1;
    }
    int same = CRYPTO_memcmp(key, p.key, p.key_len) == 0;
    OPENSSL_cleanse(key, sizeof key);
    return same;
}

int passwd_read_file(const char *path, char *out, size_t outlen, char *err, size_t errlen)
{
    char buf[PASSWD_FILE_MAX + 2];
    if (path[0] == '\0') {
        return err_set(err, errlen,
                       "cannot read the password file: no file named (an empty value; leave the key out for none)");
    }
    FILE *f = fopen(path, "rb");
    if (f == NULL) {
        return err_set(err, errlen, "cannot read the password file %s: %s", path, strerror(errno));
    }
    size_t n = fread(buf, 1, sizeof buf, f);
    int bad = ferror(f);
    fclose(f);
    if (bad) {
        OPENSSL_cleanse(buf, sizeof buf);
        return err_set(err, errlen, "cannot read the password file %s: read error", path);
    }
    if (n > 0 && buf[n - 1] == '\n') {
        n--;
        if (n > 0 && buf[n - 1] == '\r') {
            n--;
        }
    }
    int rc = 0;
    if (n == 0) {
        rc = err_set(err, errlen, "the password file %s is empty", path);
    } else if (n > PASSWD_FILE_MAX) {
        rc = err_set(err, errlen, "the password file %s holds more than %d bytes", path, PASSWD_FILE_MAX);
    } else if (memchr(buf, '\0', n) != NULL) {
        rc = err_set(err, errlen, "the password file %s contains a NUL byte", path);
    } else if (n >= outlen) {
        rc = err_set(err, errlen, "the password in %s is longer than %zu bytes", path, outlen - 1);
    } else {
        memcpy(out, buf, n);
        out[n] = '\0';
    }
    OPENSSL_cleanse(buf, sizeof buf);
    return rc;
}

int passwd_file_rotated(const char *old_path, const char *old_password, const char *new_path, const char *new_password)
{
    return old_path != NULL && new_path != NULL && strcmp(old_path, new_path) == 0 &&
           strcmp(old_password, new_password) != 0;
}

int passwd_file_exposed(const char *path, char *why, size_t whylen)
{
    return passwd_secret_exposed(path, "a password", why, whylen);
}

int passwd_secret_exposed(const char *path, const char *what, char *why, size_t whylen)
{
    struct stat st;
    if (path == NULL || stat(path, &st) != 0 || (st.st_mode & (S_IRGRP | S_IROTH | S_IWGRP | S_IWOTH)) == 0) {
        return 0;
    }
    int writable = (st.st_mode & (S_IWGRP | S_IWOTH)) != 0;
    mode_t bit = writable ? S_IWOTH : S_IROTH;
    snprintf(why, whylen,
             "%s is %s by %s (mode %04o), and it holds %s: chmod 600 it, owned by the program's user "
             "(docs/security.md)",
             path, writable ? "writable" : "readable", (st.st_mode & bit) ? "every user of this host" : "its group",
             (unsigned)(st.st_mode & 07777), what);
    return 1;
}

int passwd_warn_exposed(const passwd_key_file_t *files, size_t n, const char *program, FILE *out)
{
    int reported = 0;
    for (size_t i = 0; i < n; i++) {
        char why[PASSWD_FILE_MAX + 200];
        if (files[i].path == NULL || !passwd_file_exposed(files[i].path, why, sizeof why)) {
            continue;
        }
        if (out != NULL) {
            fprintf(out, "%s: warning: %s: %s\n", program, files[i].key, why);
        } else {
            log_msg(LOG_LEVEL_WARN, "%s: %s", files[i].key, why);
        }
        reported++;
    }
    return reported;
}

void passwd_source_init(passwd_source_t *s, const char *path, const char *password)
{
    memset(s, 0, sizeof *s);
    pthread_mutex_init(&s->lock, NULL);
    s->path = path != NULL ? xstrdup(path) : NULL;
    if (password != NULL) {
        snprintf(s->password, sizeof s->password, "%s", password);
        s->generation = 1;
    }
}

void passwd_source_destroy(passwd_source_t *s)
{
    OPENSSL_cleanse(s->password, sizeof s->password);
    free(s->path);
    s->path = NULL;
    pthread_mutex_destroy(&s->lock);
}

int passwd_source_refresh(passwd_source_t *s, int *report, char *err, size_t errlen)
{
    char fresh[PASSWD_FILE_MAX + 1], why[PASSWD_FILE_MAX + 1];
    *report = 0;
    if (s->path == NULL) {
        return 0;
    }
    int rc = passwd_read_file(s->path, fresh, sizeof fresh, why, sizeof why);
    pthread_mutex_lock(&s->lock);
    if (rc != 0) {
        *report = strcmp(why, s->last_error) != 0;
        snprintf(s->last_error, sizeof s->last_error, "%s", why);
        snprintf(err, errlen, "%s", why);
        rc = -1;
    } else {
        s->last_error[0] = '\0';
        rc = strcmp(fresh, s->password) != 0;
        if (rc) {
            memcpy(s->password, fresh, sizeof s->password);
            s->generation++;
        }
    }
    pthread_mutex_unlock(&s->lock);
    OPENSSL_cleanse(fresh, sizeof fresh);
    return rc;
}

int passwd_source_has_file(const passwd_source_t *s)
{
    return s->path != NULL;
}

int passwd_source_refresh_logged(passwd_source_t *s, const char *key, const char *changed, const char *kept)
{
    char why[PASSWD_FILE_MAX + 200];
    int report;
    int rc = passwd_source_refresh(s, &report, why, sizeof why);
    if (rc > 0) {
        log_info("%s %s holds another password: %s", key, s->path, changed);
    } else if (rc < 0 && report) {
        log_warn("%s: %s; %s", key, why, kept);
    }
    return rc;
}

unsigned long passwd_source_generation(passwd_source_t *s)
{
    pthread_mutex_lock(&s->lock);
    unsigned long generation = s->generation;
    pthread_mutex_unlock(&s->lock);
    return generation;
}

unsigned long passwd_source_get(passwd_source_t *s, char *out, size_t outlen)
{
    pthread_mutex_lock(&s->lock);
    snprintf(out, outlen, "%s", s->password);
    unsigned long generation = s->generation;
    pthread_mutex_unlock(&s->lock);
    return generation;
}
