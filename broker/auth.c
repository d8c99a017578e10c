/*
 * broker/auth.c — the verification thread, the failure slow-down and the
 * verified-password cache (contract in auth.h).
 *
 * One mutex guards the queue, the held requests and the done list; the
 * thread sleeps on a condition variable until a request arrives or the
 * earliest held request is due. Held are failures whose reply is held back,
 * and requests gated by their address: an address whose latest failure's
 * reply is still held back gets no verification before that release, so
 * opening many connections does not multiply its guesses. The per-address failure counts and the
 * dummy hash belong to the thread; the cache belongs to the loop thread.
 */
#include "broker/auth.h"
#include "broker/authfail.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>

#include "base/alloc.h"
#include "base/err.h"
#include "base/map.h"
#include "common/log.h"
#include "base/clock.h"

#define DELAY_BASE_MS   200u
#define DELAY_MAX_MS    5000u
#define FAIL_WINDOW_MS  60000u
#define FAIL_ADDRS_MAX  4096 /* addresses remembered; when full, the least recently failed is forgotten */
#define CACHE_KEY_BYTES 32
#define CACHE_MAC_BYTES 32

/* Same cost as passwd_params_default(PASSWD_SCRYPT); never matches anything
 * (the all-zero key is not what scrypt derives). */
static const char dummy_hash[] = "$scrypt$ln=15,r=8,p=1$00000000000000000000000000000000$"
                                 "0000000000000000000000000000000000000000000000000000000000000000";

typedef struct cached {
    unsigned char mac[CACHE_MAC_BYTES];
} cached_t;

struct auth_worker {
    pthread_t thread;
    int started;
    pthread_mutex_t mu;
    pthread_cond_t cond;
    int stop;                     /* under mu */
    job_t *q_head, *q_tail;       /* waiting, under mu */
    size_t queued;                /* under mu */
    auth_req_t **held;            /* failures held back, under mu */
    size_t nheld, capheld;        /* under mu */
    job_t *done_head, *done_tail; /* verified, for the loop, under mu */
    struct event *done_ev;
    writer_done_fn on_done;
    void *ctx;
    authfail_t *fails; /* auth thread: failures per address (authfail.h) */
    atomic_uint_fast64_t nfailures;
    unsigned char cache_key[CACHE_KEY_BYTES]; /* loop thread */
    map_t cache;                              /* loop thread: user -> cached_t */
};

static void list_push(job_t **head, job_t **tail, job_t *j)
{
    j->next = NULL;
    if (*tail) {
        (*tail)->next = j;
    } else {
        *head = j;
    }
    *tail = j;
}

/* Loop thread: hand every verified request to done(). */
static void done_cb(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    auth_worker_t *a = arg;
    pthread_mutex_lock(&a->mu);
    job_t *j = a->done_head;
    a->done_head = a->done_tail = NULL;
    pthread_mutex_unlock(&a->mu);
    while (j) {
        job_t *n = j->next;
        j->next = NULL;
        a->on_done(j, a->ctx);
        j = n;
    }
}

/* Under mu: post r to the loop. */
static void post(auth_worker_t *a, auth_req_t *r)
{
    list_push(&a->done_head, &a->done_tail, &r->job);
    event_active(a->done_ev, EV_READ, 0);
}

/* How long the failures-th failure from an address within the window is
 * held back: 200 ms, doubling up to 5 s. */
static unsigned fail_delay(unsigned failures)
{
    unsigned shift = failures - 1 > 5 ? 5 : failures - 1;
    unsigned d = DELAY_BASE_MS << shift;
    return d > DELAY_MAX_MS ? DELAY_MAX_MS : d;
}

/* Auth thread: count a failure from ip; returns how long to hold it back. */
static unsigned count_failure(auth_worker_t *a, auth_req_t *r, uint64_t now)
{
    r->failures = authfail_count(a->fails, r->ip, strlen(r->ip), now);
    return fail_delay(r->failures);
}

/* Auth thread: the earliest time a request from ip may be verified: the
 * release of the reply of its address's latest failure (0: at once). */
static uint64_t verify_gate(const auth_worker_t *a, const char *ip, uint64_t now)
{
    uint64_t last = 0;
    unsigned n = authfail_recent(a->fails, ip, strlen(ip), now, &last);
    return n > 0 ? last + fail_delay(n) : 0;
}

static void cache_mac(const auth_worker_t *a, const char *hash, const char *password, size_t len, unsigned char *mac);

static void verify(auth_worker_t *a, auth_req_t *r)
{
    char err[200];
    if (r->refused) { /* longer than PASSWD_MAX: a failure, never hashed */
        r->ok = 0;
        atomic_fetch_add(&a->nfailures, 1);
        return;
    }
    const char *hash = r->hash[0] ? r->hash : dummy_hash;
    int rc = passwd_verify(hash, r->password, r->password_len, err, sizeof err);
    if (rc < 0) {
        log_error("AUTH: the stored hash does not verify: %s", err);
    }
    r->ok = rc == 1 && r->hash[0] != '\0';
    if (r->ok) {
        cache_mac(a, r->hash, r->password, r->password_len, r->mac);
    }
    OPENSSL_cleanse(r->password, r->password_len);
    if (!r->ok) {
        atomic_fetch_add(&a->nfailures, 1);
    }
}

/* Under mu: hold r until release (a failure's reply, or a request waiting
 * for its address's gate); returns the earliest release held, next
 * included (0: none). */
static uint64_t hold(auth_worker_t *a, auth_req_t *r, uint64_t release, uint64_t next)
{
    if (a->nheld == a->capheld) {
        a->capheld = a->capheld ? 2 * a->capheld : 16;
        a->held = xrealloc(a->held, a->capheld * sizeof *a->held);
    }
    r->release_mono = release;
    a->held[a->nheld++] = r;
    return next == 0 || release < next ? release : next;
}

/* Under mu: release what is due — a failure's reply to the loop, a gated
 * request back to the queue (its gate is checked again there, since another
 * request from its address may have failed meanwhile). Returns the earliest
 * release still held (0: none). */
static uint64_t release_due(auth_worker_t *a, uint64_t now)
{
    uint64_t next = 0;
    for (size_t i = 0; i < a->nheld;) {
        auth_req_t *r = a->held[i];
        if (r->release_mono > now) {
            next = next == 0 || r->release_mono < next ? r->release_mono : next;
            i++;
            continue;
        }
        a->held[i] = a->held[--a->nheld];
        if (r->gated) {
            list_push(&a->q_head, &a->q_tail, &r->job); /* not counted in queued: it was let in already */
        } else {
            post(a, r);
        }
    }
    return next;
}

static void *auth_main(void *arg)
{
    auth_worker_t *a = arg;
    uint64_t next = 0; /* the earliest release_mono held (0: none), so the held list is scanned only when due */
    pthread_mutex_lock(&a->mu);
    while (!a->stop) {
        uint64_t now = clock_mono_ms();
        if (next != 0 && next <= now) {
            next = release_due(a, now);
        }
        if (a->q_head != NULL) {
            auth_req_t *r = (auth_req_t *)a->q_head;
            a->q_head = r->job.next;
            if (a->q_head == NULL) {
                a->q_tail = NULL;
            }
            if (!r->gated) {
                a->queued--;
            }
            /* One verification per address per held-back failure, however
             * many connections it opens: a request from an address whose
             * latest failure is still held back waits, unverified, until its
             * release. Holding back only the replies would let an address
             * with N connections guess N passwords per delay. */
            uint64_t gate = verify_gate(a, r->ip, now);
            if (gate > now) {
                r->gated = 1;
                next = hold(a, r, gate, next);
                continue;
            }
            pthread_mutex_unlock(&a->mu);
            verify(a, r);
            now = clock_mono_ms();
            if (!r->ok) {
                r->delay_ms = count_failure(a, r, now);
            }
            pthread_mutex_lock(&a->mu);
            if (r->ok) {
                post(a, r);
            } else {
                r->gated = 0;
                next = hold(a, r, now + r->delay_ms, next);
            }
            continue;
        }
        if (next == 0) {
            pthread_cond_wait(&a->cond, &a->mu);
        } else {
            struct timespec ts = { (time_t)(next / 1000), (long)(next % 1000) * 1000000 };
            pthread_cond_timedwait(&a->cond, &a->mu, &ts);
        }
    }
    pthread_mutex_unlock(&a->mu);
    return NULL;
}

auth_worker_t *auth_new(struct event_base *base, writer_done_fn done, void *ctx)
{
    auth_worker_t *a = xcalloc(1, sizeof *a);
    pthread_mutex_init(&a->mu, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&a->cond, &ca);
    pthread_condattr_destroy(&ca);
    a->done_ev = event_new(base, -1, 0, done_cb, a);
    if (a->done_ev == NULL) {
        log_error("cannot create the AUTH completion event (out of memory)");
        abort();
    }
    a->on_done = done;
    a->ctx = ctx;
    a->fails = authfail_new(FAIL_ADDRS_MAX, FAIL_WINDOW_MS);
    map_init(&a->cache);
    if (RAND_bytes(a->cache_key, sizeof a->cache_key) != 1) {
        log_error("no random bytes for the AUTH cache key (OpenSSL RAND_bytes failed)");
        abort();
    }
    atomic_init(&a->nfailures, 0);
    return a;
}

int auth_start(auth_worker_t *a, char *err, size_t errlen)
{
    int rc = pthread_create(&a->thread, NULL, auth_main, a);
    if (rc != 0) {
        return err_set(err, errlen, "cannot start the AUTH thread: %s", strerror(rc));
    }
    a->started = 1;
    return 0;
}

int auth_submit(auth_worker_t *a, auth_req_t *r)
{
    pthread_mutex_lock(&a->mu);
    if (a->queued >= AUTH_MAX_QUEUE) {
        pthread_mutex_unlock(&a->mu);
        return -1;
    }
    list_push(&a->q_head, &a->q_tail, &r->job);
    a->queued++;
    pthread_cond_signal(&a->cond);
    pthread_mutex_unlock(&a->mu);
    return 0;
}

static void free_list(job_t *j)
{
    while (j) {
        job_t *n = j->next;
        job_free(j);
        j = n;
    }
}

void auth_free(auth_worker_t *a)
{
    if (a == NULL) {
        return;
    }
    if (a->started) {
        pthread_mutex_lock(&a->mu);
        a->stop = 1;
        pthread_cond_signal(&a->cond);
        pthread_mutex_unlock(&a->mu);
        pthread_join(a->thread, NULL);
    }
    free_list(a->q_head);
    free_list(a->done_head);
    for (size_t i = 0; i < a->nheld; i++) {
        job_free(&a->held[i]->job);
    }
    free(a->held);
    event_free(a->done_ev);
    authfail_free(a->fails);
    map_free(&a->cache, free);
    OPENSSL_cleanse(a->cache_key, sizeof a->cache_key);
    pthread_cond_destroy(&a->cond);
    pthread_mutex_destroy(&a->mu);
    free(a);
}

uint64_t auth_failures(auth_worker_t *a)
{
    return (uint64_t)atomic_load(&a->nfailures);
}

/* HMAC-SHA-256(key, hash NUL password) into mac. Any thread: the key does
 * not change after auth_new. */
static void cache_mac(const auth_worker_t *a, const char *hash, const char *password, size_t len, unsigned char *mac)
{
    size_t hl = strlen(hash);
    size_t n = hl + 1 + len;
    unsigned char *msg = xmalloc(n);
    memcpy(msg, hash, hl + 1);
    memcpy(msg + hl + 1, password, len);
    unsigned int maclen = CACHE_MAC_BYTES;
    if (HMAC(EVP_sha256(), a->cache_key, sizeof a->cache_key, msg, n, mac, &maclen) == NULL) {
        memset(mac, 0, CACHE_MAC_BYTES);  /* never matches a stored MAC of a real HMAC... */
        RAND_bytes(mac, CACHE_MAC_BYTES); /* ...and a random one cannot be guessed */
    }
    OPENSSL_cleanse(msg, n);
    free(msg);
}

int auth_cache_hit(auth_worker_t *a, const char *user, const char *hash, const char *password, size_t len)
{
    cached_t *c = map_get(&a->cache, user, strlen(user));
    if (c == NULL) {
        return 0;
    }
    unsigned char mac[CACHE_MAC_BYTES];
    cache_mac(a, hash, password, len, mac);
    int hit = CRYPTO_memcmp(mac, c->mac, sizeof mac) == 0;
    OPENSSL_cleanse(mac, sizeof mac);
    return hit;
}

void auth_cache_put(auth_worker_t *a, const char *user, const auth_req_t *r)
{
    if (!r->ok) {
        return;
    }
    cached_t *c = map_get(&a->cache, user, strlen(user));
    if (c == NULL) {
        c = xcalloc(1, sizeof *c);
        map_put(&a->cache, user, strlen(user), c);
    }
    memcpy(c->mac, r->mac, sizeof c->mac);
}

void auth_refuse_busy(auth_req_t *r)
{
    OPENSSL_cleanse(r->password, r->password_len);
    r->ok = 0;
    r->job.complete = NULL;
    resp_buf_clear(&r->job.reply);
    resp_add_error(&r->job.reply, "ERR too many AUTH requests in progress; try again later");
}
