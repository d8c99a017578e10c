/*
 * common/passwd.h — salted, slow password hashes in one self-describing
 * text format (OpenSSL 3's EVP_KDF): made by `hourglass-cli passwd`, stored
 * in the broker's users file, checked by the broker's AUTH.
 *
 *   $scrypt$ln=15,r=8,p=1$<salt: 32 hex digits>$<hash: 64 hex digits>
 *   $pbkdf2-sha256$i=600000$<salt hex>$<hash hex>
 *
 * The parameters travel with the hash, so a file may mix old and new
 * settings and raising them never breaks a stored line. Parsing is strict
 * and bounded (a hostile or mistyped line cannot make the verifier allocate
 * gigabytes or loop for minutes): scrypt 2^10 <= N <= 2^20, 1 <= r <= 32,
 * 1 <= p <= 16, 128*N*r*p <= 256 MiB; PBKDF2 1000..10 000 000 iterations;
 * salt 8..64 bytes, hash 16..64 bytes. Comparison is constant-time
 * (CRYPTO_memcmp).
 *
 * Pure apart from the random salt and the password files
 * (passwd_source_t, whose refresh_logged writes to common/log.h);
 * thread-safe (OpenSSL 3 is).
 */
#ifndef HG_COMMON_PASSWD_H
#define HG_COMMON_PASSWD_H

#include <pthread.h>
#include <stddef.h>
#include <stdio.h>

#define PASSWD_HASH_MAX 320 /* longest hash text, NUL included */

typedef enum passwd_kind {
    PASSWD_SCRYPT = 0,
    PASSWD_PBKDF2_SHA256 = 1
} passwd_kind_t;

typedef struct passwd_params {
    passwd_kind_t kind;
    unsigned log2_n;     /* scrypt: N = 2^log2_n */
    unsigned r, p;       /* scrypt */
    unsigned iterations; /* PBKDF2 */
} passwd_params_t;

/* The defaults of `hourglass-cli passwd` for kind: scrypt ln=15 r=8 p=1
 * (32 MiB), PBKDF2-SHA256 600 000 iterations. */
void passwd_params_default(passwd_params_t *p, passwd_kind_t kind);

/* Check params against the bounds above (scrypt 10 <= ln <= 20, r, p, and
 * 128*N*r*p <= 256 MiB — so with r=8, p=1 ln is at most 18; PBKDF2
 * iterations): what passwd_hash refuses, without hashing — so a program can
 * refuse bad parameters before it asks for a password. 0, or -1 with err
 * naming the parameter and its value ("scrypt ln=25 out of range 10..20"). */
int passwd_params_check(const passwd_params_t *p, char *err, size_t errlen);

/* Hash password[len] with a fresh 16-byte random salt into out[outlen]
 * (PASSWD_HASH_MAX is enough). 0, or -1 with err naming the problem (an
 * empty password or one longer than PASSWD_MAX, parameters out of bounds,
 * OpenSSL's failure). */
int passwd_hash(const char *password, size_t len, const passwd_params_t *params, char *out, size_t outlen, char *err,
                size_t errlen);

/* Check that hash is a well-formed hash text within the bounds above
 * (nothing is computed). 0, or -1 with err naming the bad part. */
int passwd_check(const char *hash, char *err, size_t errlen);

/* 1 when password[len] matches hash, 0 when it does not, -1 when hash is
 * malformed (err says why). Takes as long as the hash's parameters say. */
int passwd_verify(const char *hash, const char *password, size_t len, char *err, size_t errlen);

/* The longest password anything here takes: the broker's AUTH refuses a
 * longer one without hashing it, `hourglass-cli passwd` refuses to hash one,
 * and a password file may hold no more. 1 KiB is far above any passphrase or
 * generated secret (a 256-bit key in hex is 64 bytes), and it keeps what one
 * AUTH costs the broker what the hash's parameters say: the bytes of a
 * password are hashed (the verified-password cache's HMAC, on the event
 * loop; the KDF's, on the AUTH thread) before any slow-down applies, and a
 * 4 MiB one took 0.2 s. */
#define PASSWD_MAX      1024
#define PASSWD_FILE_MAX PASSWD_MAX /* longest password a password file may hold */

/* Read a password file (a systemd credential, a Kubernetes secret): its
 * whole content, minus one trailing "\n" or "\r\n", into out[outlen]
 * (outlen > PASSWD_FILE_MAX is enough). 0, or -1 with err naming the file
 * and the problem (an empty name, cannot read, empty, NUL byte, longer than
 * PASSWD_FILE_MAX). The program's boundary; no hashing. */
int passwd_read_file(const char *path, char *out, size_t outlen, char *err, size_t errlen);

/* A SIGHUP re-read the same password file (old_path and new_path equal, both
 * set) and found a password other than the running one: a rotated
 * credential (a changed path is a changed key: the reload names that
 * itself). 1 then, else 0. hourglass-consumer logs PASSWD_ROTATED_NOTE
 * after the file's name and makes its library consumer again with the new
 * password (libhourglass keeps the one a consumer was made with; it does so
 * too when the broker refuses the running password and the file holds
 * another); hourglass-compensator re-reads the file before each connect and
 * makes its clients reconnect. */
int passwd_file_rotated(const char *old_path, const char *old_password, const char *new_path, const char *new_password);
#define PASSWD_ROTATED_NOTE "holds another password: the consumer connects to the broker again with it (no restart)"

/* When the file at path, which holds what ("a password", "the TLS private
 * key"), can be read or written by its group or others: 1, with why[whylen]
 * saying so and the fix ("<path> is readable by every user of this host
 * (mode 0644), and it holds <what>: chmod 600 it, …"); 0 when it is private
 * or cannot be stat'ed (reading it reports that). The one rule of every
 * daemon's secret files (the broker's users-file and tls-key-file too). */
int passwd_secret_exposed(const char *path, const char *what, char *why, size_t whylen);

/* passwd_secret_exposed for a password file ("a password"). */
int passwd_file_exposed(const char *path, char *why, size_t whylen);

/* A config key naming a file that holds a password, and the file (NULL:
 * the key is unset). */
typedef struct passwd_key_file {
    const char *key;
    const char *path;
} passwd_key_file_t;

/* Each of the n files that passwd_file_exposed reports, said once as
 * "<key>: <its text>": a "<program>: warning: …" line on out when out is
 * set (--check-config), else logged at warn (start-up). Every daemon that
 * reads a password file (mysql-password-file, the broker's password-file)
 * warns through this one rule. Returns how many were reported. */
int passwd_warn_exposed(const passwd_key_file_t *files, size_t n, const char *program, FILE *out);

/* A password kept in a file and read again when asked (a rotated MariaDB
 * password): the last good password, its generation (1 for the first,
 * +1 at each change) and the last read error, under a lock — any thread.
 * Zero it, then passwd_source_init. */
typedef struct passwd_source {
    pthread_mutex_t lock;
    char *path;                           /* NULL: no file, nothing to re-read */
    char password[PASSWD_FILE_MAX + 1];   /* the last good one */
    unsigned long generation;             /* 0 until the first good read */
    char last_error[PASSWD_FILE_MAX + 1]; /* the read error last reported; "" after a good read */
} passwd_source_t;

/* Set s up for path (copied; NULL: no file) with password (the one read at
 * start-up; may be NULL when path is). */
void passwd_source_init(passwd_source_t *s, const char *path, const char *password);

/* Free what init took and wipe the password. */
void passwd_source_destroy(passwd_source_t *s);

/* Read the file again: 1 when it holds another password (now the current
 * one, the generation advanced), 0 when the same or no file, -1 when it
 * cannot be read (the last good password stays) with err naming the file
 * and the problem — *report is 1 the first time this error is met (report
 * it), 0 when it was the last one already (once per change, not per
 * attempt). */
int passwd_source_refresh(passwd_source_t *s, int *report, char *err, size_t errlen);

/* 1 when s re-reads a file (passwd_source_init was given a path), 0 when it
 * has none — or when s is zeroed and was never initialised. The path never
 * changes after init: any thread, no lock. */
int passwd_source_has_file(const passwd_source_t *s);

/* passwd_source_refresh at a program's boundary, its outcome logged
 * (common/log.h): a new password at info as "<key> <path> holds another
 * password: <changed>"; an error that cannot be read, the first time it is
 * met (once per error, not per attempt), at warn as "<key>: <the error>;
 * <kept>". key names the config key of the file ("mysql-password-file");
 * changed and kept say what the program does with a new password and
 * without one. Returns passwd_source_refresh's 1 / 0 / -1 (0 without a
 * file: nothing read, nothing logged). Any thread. */
int passwd_source_refresh_logged(passwd_source_t *s, const char *key, const char *changed, const char *kept);

/* The kept of the MariaDB password files (every passwd_source_t's), and the
 * changed of the programs whose connections take a new one at their next
 * connect (the compensator, the console). */
#define PASSWD_DB_KEPT_NOTE         "MariaDB connections keep the password read before"
#define PASSWD_DB_NEXT_CONNECT_NOTE "the connections to MariaDB use it from their next connect"

/* Copy the current password into out[outlen] (outlen > PASSWD_FILE_MAX is
 * enough; "" when none); returns its generation. */
unsigned long passwd_source_get(passwd_source_t *s, char *out, size_t outlen);

/* The current password's generation alone (passwd_source_get's return),
 * for a caller that only asks whether its connection is stale: no copy of
 * the secret. */
unsigned long passwd_source_generation(passwd_source_t *s);

#endif
