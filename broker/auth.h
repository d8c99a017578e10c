/*
 * broker/auth.h — password checks off the event loop: one verification
 * thread, per-address slow-down of failures, and a cache of passwords already
 * verified.
 *
 * A password hash is slow by design (scrypt ln=15: tens of milliseconds), so
 * AUTH never runs it on the loop thread. AUTH and HELLO ... AUTH build an
 * auth_req_t (whose first member is a job_t, so its reply travels back like a
 * storage job's: a reply slot, conn_job_done, the job's complete()) and the
 * connection parses nothing more until it completes. The thread verifies
 * requests one at a time; a failed one is held back before it is posted:
 * 200 ms for an address's first failure within a minute, doubling up to 5 s
 * (other addresses are not delayed: the thread keeps verifying meanwhile).
 * Until that failure is released no request from the same address is
 * verified (it waits, unverified): an address guesses once per delay, however
 * many connections it opens or pipelines from.
 * The counts are kept for 4 096 addresses; beyond, the least recently failed
 * address is forgotten first (authfail.h), so many source addresses cannot
 * wipe the count of one that failed recently.
 * An unknown or disabled user is checked against a dummy hash of the default
 * cost, so the reply time does not say whether the user exists. A password
 * longer than PASSWD_MAX (refused) is not hashed at all: it fails, is
 * counted and held back like a wrong one.
 *
 * The cache: after a successful verification the loop keeps, per user, an
 * HMAC-SHA-256 of (hash text, password) under a random key made at start; an
 * AUTH whose HMAC matches (CRYPTO_memcmp) is answered at once on the loop
 * thread. A changed hash (users file reloaded) no longer matches. The trade:
 * someone who can read the broker's memory could test guesses fast against
 * it (they could read the data anyway).
 *
 * Threads: auth_new/start/submit/free and the cache run on the loop thread;
 * verification on the auth thread; done() is called on the loop thread.
 */
#ifndef HG_BROKER_AUTH_H
#define HG_BROKER_AUTH_H

#include <stddef.h>
#include <stdint.h>

#include <event2/event.h>

#include "broker/writer.h"
#include "common/passwd.h"

#define AUTH_MAX_QUEUE 1024 /* requests waiting for the thread; more are refused at once */

typedef struct auth_worker auth_worker_t;

/* A verification request. The caller embeds it first in its own struct
 * (allocated with cmd_job_new) and sets job.complete, which runs on the loop
 * thread with ok / delay_ms filled. */
typedef struct auth_req {
    job_t job;                  /* first member */
    char ip[64];                /* authfail_key of the peer's address (IPv6: its /64): failures are counted per key */
    char hash[PASSWD_HASH_MAX]; /* the user's hash; "" for no such user or a disabled one (always fails) */
    char *password;             /* the caller's copy; wiped by the thread after use */
    size_t password_len;
    int refused;           /* the password is longer than PASSWD_MAX: not verified, counted as a failure */
    int ok;                /* out: 1 when the password matched */
    unsigned delay_ms;     /* out: how long a failure was held back */
    unsigned failures;     /* out: failures from ip in the last minute, this one included */
    unsigned char mac[32]; /* out, when ok: the cache entry (auth_cache_put) */
    uint64_t release_mono; /* auth-thread private: when a held request is released */
    int gated;             /* auth-thread private: held unverified, waiting for its address's gate */
} auth_req_t;

/* A worker whose completions reach done(j, ctx) on base's thread (the loop).
 * Never fails (aborts on out-of-memory). */
auth_worker_t *auth_new(struct event_base *base, writer_done_fn done, void *ctx);

/* Start the thread. 0, or -1 with the cause in err. */
int auth_start(auth_worker_t *a, char *err, size_t errlen);

/* Queue r (loop thread); the worker owns it until done() hands it back.
 * -1 (r still the caller's) when AUTH_MAX_QUEUE requests are waiting. */
int auth_submit(auth_worker_t *a, auth_req_t *r);

/* Stop and join the thread; requests not yet handed back are freed
 * (job_free). NULL is fine. */
void auth_free(auth_worker_t *a);

/* Loop thread: failed verifications so far. */
uint64_t auth_failures(auth_worker_t *a);

/* Loop thread: 1 when user's password was verified against hash before
 * (the cache), else 0. */
int auth_cache_hit(auth_worker_t *a, const char *user, const char *hash, const char *password, size_t len);

/* Loop thread: remember a successful verification (r->ok, r->mac). */
void auth_cache_put(auth_worker_t *a, const char *user, const auth_req_t *r);

/* Loop thread: r could not be queued (auth_submit refused it): wipe its
 * password and write "ERR too many AUTH requests in progress" as its reply. */
void auth_refuse_busy(auth_req_t *r);

#endif
