/*
 * lib/consumer.c — the consumer loop: N workers, a lease watchdog.
 *
 * Threads
 *   worker i (N of them)  owns client i (its own connection) and loops
 *                         PULL group topic COUNT n BLOCK b LEASE l → for each
 *                         message: handler → ACK / local retries → NACK; or,
 *                         with a batch handler, the whole PULL in one call →
 *                         one ACK for the done ones, NACK DLQ for the failed,
 *                         the handler again (backoff) for the retried.
 *   watchdog (optional)   owns its own client; every tick it TOUCHes the
 *                         messages that a worker holds and whose lease was last
 *                         renewed touch_interval ago. It is the only thread
 *                         that renews leases, so a slow handler needs no
 *                         cooperation: the handler runs undisturbed on its
 *                         worker's thread and connection.
 *   the caller of run     starts them, joins the workers after a stop, then
 *                         stops and joins the watchdog (it keeps renewing
 *                         while workers finish the messages in hand).
 *
 * Shared state
 *   worker->inflight[]    ids a worker holds (leased, not yet ACKed/NACKed)
 *                         and when each lease was last renewed; guarded by
 *                         worker->lock. The watchdog copies ids out under the
 *                         lock and never holds it across network I/O.
 *   stop                  atomic flag + a byte written to wake_pipe (never
 *                         drained, so it stays readable): every PULL wait
 *                         and backoff sleep of every worker polls the read
 *                         end, which is how a stop from a signal handler
 *                         reaches threads blocked in poll(). Handlers and
 *                         ACK/NACK are never interrupted.
 *   stats                 relaxed atomics; PULL health (pulls_failing,
 *                         all_failing_since_ms) sequentially consistent ones.
 *
 * Delivery is at least once: whatever a worker cannot ACK (connection lost,
 * stop during a PULL that the broker had already served) comes back after
 * its lease. ACK answers 0 and NACK/TOUCH answer -1/0 when the lease had
 * expired: counted in lease_lost; the broker delivers the message again.
 */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include "lib/consumer.h"
#include "lib/backoff.h"
#include "lib/client.h"
#include "lib/transport.h"
#include "lib/wire.h"

#include "base/alloc.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define CONSUMER_MAX_WORKERS  256
#define CONSUMER_MAX_COUNT    1000
#define CONSUMER_MAX_BLOCK_MS 86400000u /* 24 h */
#define CONSUMER_MAX_LEASE_MS 86400000u /* the broker's LEASE limit: 24 h */
#define CONSUMER_MAX_NAME     255
#define WATCHDOG_MIN_TICK_MS  10
#define WATCHDOG_MAX_TICK_MS  1000

typedef struct inflight {
    char id[HG_ID_MAX];
    uint64_t renewed_ms; /* monotonic ms of the last lease renewal */
    int active;          /* 1 while the worker holds it */
} inflight_t;

typedef struct worker {
    hg_consumer_t *owner;
    int index;
    pthread_t thread;
    int started;
    hg_client_t *client;
    unsigned connects;      /* client_connect_count seen last (reconnect stat) */
    pthread_mutex_t lock;   /* guards inflight[] */
    inflight_t *inflight;   /* opts.count slots */
    hg_batch_item_t *batch; /* opts.count items, with a batch handler */
} worker_t;

struct hg_consumer {
    hg_consumer_opts_t opts; /* strings point to the copies below */
    hg_client_opts_t client_opts;
    char *uri, *group, *topic;
    uint32_t touch_ms;   /* effective touch interval, 0 = never */
    char lease_text[16]; /* lease_ms as decimal, for PULL and TOUCH */

    atomic_int stop;
    atomic_int fatal;     /* an hg_err_t that stopped the consumer for good (AUTH refused, NOPERM), else 0 */
    int wake_pipe[2];     /* stop: readable once written */
    int watchdog_pipe[2]; /* stops the watchdog after the workers */
    int ran;

    worker_t *workers;
    pthread_t watchdog;
    int watchdog_started;
    hg_client_t *watchdog_client;

    atomic_uint_fast64_t delivered, done, retried, nacked, failed, touched, lease_lost, errors, reconnects;

    /* PULL health (hg_consumer_pull_failing_ms): how many workers' last PULL
     * failed, and since when (monotonic ms, 0: not all) every one's has. */
    atomic_int pulls_failing;
    atomic_uint_fast64_t all_failing_since_ms;

    pthread_mutex_t err_lock; /* guards last_error */
    hg_error_t last_error;

    const transport_ops_t *tops; /* NULL: RESP; else the URI's transport */
    void *helper;                /* its helper while running (lib/transport.h) */
};

/* ------------------------------------------------------------------------
 * Helpers
 * ------------------------------------------------------------------------ */

static void count(atomic_uint_fast64_t *counter)
{
    atomic_fetch_add_explicit(counter, 1, memory_order_relaxed);
}

static int stopping(const hg_consumer_t *c)
{
    return atomic_load_explicit(&c->stop, memory_order_acquire) != 0;
}

/* A worker's PULL ended (ok 1: answered; 0: failed after the client's own
 * retries); *failing is the worker's own last state. Called by the worker. */
static void note_pull(hg_consumer_t *c, int ok, int *failing)
{
    if (!ok && !*failing) {
        *failing = 1;
        if (atomic_fetch_add(&c->pulls_failing, 1) + 1 == c->opts.workers)
            atomic_store(&c->all_failing_since_ms, wire_now_ms() + 1); /* never 0 */
    } else if (ok && *failing) {
        *failing = 0;
        atomic_fetch_sub(&c->pulls_failing, 1);
        atomic_store(&c->all_failing_since_ms, 0);
    }
}

uint64_t hg_consumer_pull_failing_ms(const hg_consumer_t *c)
{
    hg_consumer_t *m = (hg_consumer_t *)c; /* atomics are read, never written */
    uint64_t since = atomic_load(&m->all_failing_since_ms);
    /* A worker that failed last may store its time after another one's
     * success cleared it: the count decides. */
    if (since == 0 || atomic_load(&m->pulls_failing) < c->opts.workers)
        return 0;
    uint64_t now = wire_now_ms() + 1;
    return now > since ? now - since : 1;
}

static void log_line(hg_consumer_t *c, int level, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void log_line(hg_consumer_t *c, int level, const char *fmt, ...)
{
    char line[512];
    va_list ap;

    if (c->opts.log == NULL)
        return;
    va_start(ap, fmt);
    vsnprintf(line, sizeof(line), fmt, ap);
    va_end(ap);
    c->opts.log(level, line, c->opts.log_arg);
}

/* Count an error, keep it as the last error and log it. who: "worker 2". */
static void record_error(hg_consumer_t *c, const char *who, hg_err_t code, const char *what, const char *msg)
{
    count(&c->errors);
    pthread_mutex_lock(&c->err_lock);
    c->last_error.code = code;
    snprintf(c->last_error.message, sizeof(c->last_error.message), "%s: %s: %s", who, what, msg);
    pthread_mutex_unlock(&c->err_lock);
    log_line(c, code == HG_ERR_SERVER || code == HG_ERR_PROTOCOL ? 0 : 1, "%s: %s: %s", who, what, msg);
}

int consumer_valid_name(const char *name)
{
    size_t n = 0;
    if (name == NULL)
        return 0;
    for (; name[n] != '\0'; n++)
        if ((unsigned char)name[n] < 0x21 || (unsigned char)name[n] > 0x7e)
            return 0;
    return n >= 1 && n <= CONSUMER_MAX_NAME;
}

int consumer_parse_message(const resp_reply_t *r, hg_message_t *m, char *why, size_t whylen)
{
    static const char *const names[6] = { "id", "topic", "key", "payload", "reconsume", "due_ms" };
    const resp_reply_t *e;

    memset(m, 0, sizeof(*m));
    if (r->type != RESP_REPLY_ARRAY || r->count != 6) {
        snprintf(why, whylen, "a message is %s of %zu, want an array of 6", resp_reply_type_name(r->type), r->count);
        return -1;
    }
    e = r->elements;
    for (int i = 0; i < 6; i++) {
        resp_reply_type_t want = i < 4 ? RESP_REPLY_BULK : RESP_REPLY_INTEGER;
        if (e[i].type != want) {
            snprintf(why, whylen, "element %d (%s) is %s, want %s", i, names[i], resp_reply_type_name(e[i].type),
                     resp_reply_type_name(want));
            return -1;
        }
    }
    if (e[0].len == 0 || e[0].len >= HG_ID_MAX) {
        snprintf(why, whylen, "element 0 (id) has length %zu, want 1..%d", e[0].len, HG_ID_MAX - 1);
        return -1;
    }
    if (e[4].integer < 0 || e[5].integer < 0) {
        snprintf(why, whylen, "negative %s %lld", e[4].integer < 0 ? "reconsume" : "due_ms",
                 e[4].integer < 0 ? e[4].integer : e[5].integer);
        return -1;
    }
    m->id = e[0].str;
    m->topic = e[1].str;
    m->key = e[2].str;
    m->key_len = e[2].len;
    m->payload = e[3].str;
    m->payload_len = e[3].len;
    m->reconsume = e[4].integer > UINT32_MAX ? UINT32_MAX : (unsigned)e[4].integer;
    m->due_ms = (uint64_t)e[5].integer;
    return 0;
}

/* ------------------------------------------------------------------------
 * Options
 * ------------------------------------------------------------------------ */

void hg_consumer_opts_init(hg_consumer_opts_t *o)
{
    memset(o, 0, sizeof(*o));
    o->workers = 1;
    o->count = 1;
    o->block_ms = 5000;
    o->lease_ms = 30000;
    o->touch_interval_ms = 0;
    o->retry.base_ms = 200;
    o->retry.factor = 2.0;
    o->retry.cap_ms = 5000;
    o->retry.attempts = 3;
    o->retry.jitter = 0.2;
}

/* Check the options; 0, or -1 with err filled. */
static int check_opts(const hg_consumer_opts_t *o, hg_error_t *err)
{
    char why[HG_ERRMSG_MAX];

    if (o->uri == NULL || o->uri[0] == '\0')
        return client_error_fill(err, HG_ERR_ARG, "uri is required"), -1;
    if (!consumer_valid_name(o->group))
        return client_error_fill(err, HG_ERR_ARG,
                                 "group %s%.64s%s is not a valid name (1..255 printable ASCII bytes, no blanks)",
                                 o->group ? "'" : "", o->group ? o->group : "(NULL)", o->group ? "'" : ""),
               -1;
    if (!consumer_valid_name(o->topic))
        return client_error_fill(err, HG_ERR_ARG,
                                 "topic %s%.64s%s is not a valid name (1..255 printable ASCII bytes, no blanks)",
                                 o->topic ? "'" : "", o->topic ? o->topic : "(NULL)", o->topic ? "'" : ""),
               -1;
    if ((o->handler == NULL) == (o->batch_handler == NULL))
        return client_error_fill(err, HG_ERR_ARG, "%s",
                                 o->handler == NULL ? "handler is required (or batch_handler)"
                                                    : "handler and batch_handler are both set: give one"),
               -1;
    if (o->workers < 1 || o->workers > CONSUMER_MAX_WORKERS)
        return client_error_fill(err, HG_ERR_ARG, "workers %d out of range 1..%d", o->workers, CONSUMER_MAX_WORKERS),
               -1;
    if (o->count < 1 || o->count > CONSUMER_MAX_COUNT)
        return client_error_fill(err, HG_ERR_ARG, "count %d out of range 1..%d", o->count, CONSUMER_MAX_COUNT), -1;
    if (o->block_ms < 1 || o->block_ms > CONSUMER_MAX_BLOCK_MS)
        return client_error_fill(err, HG_ERR_ARG, "block_ms %" PRIu32 " out of range 1..%u", o->block_ms,
                                 CONSUMER_MAX_BLOCK_MS),
               -1;
    if (o->lease_ms < 1 || o->lease_ms > CONSUMER_MAX_LEASE_MS)
        return client_error_fill(err, HG_ERR_ARG, "lease_ms %" PRIu32 " out of range 1..%u", o->lease_ms,
                                 CONSUMER_MAX_LEASE_MS),
               -1;
    if (o->touch_interval_ms != HG_TOUCH_NEVER && o->touch_interval_ms >= o->lease_ms)
        return client_error_fill(err, HG_ERR_ARG,
                                 "touch_interval_ms %" PRIu32 " must be below lease_ms %" PRIu32 " (or HG_TOUCH_NEVER)",
                                 o->touch_interval_ms, o->lease_ms),
               -1;
    if (backoff_check(&o->retry, "retry", why, sizeof(why)) < 0)
        return client_error_fill(err, HG_ERR_ARG, "%s", why), -1;
    return 0;
}

hg_err_t hg_consumer_new(const hg_consumer_opts_t *opts, hg_consumer_t **out, hg_error_t *err)
{
    hg_client_t *probe = NULL;
    const transport_ops_t *tops;
    hg_consumer_t *c;
    hg_err_t e;

    if (out == NULL || opts == NULL) {
        client_error_fill(err, HG_ERR_ARG, "hg_consumer_new: %s is NULL", out == NULL ? "out" : "opts");
        return HG_ERR_ARG;
    }
    *out = NULL;
    if (check_opts(opts, err) < 0)
        return HG_ERR_ARG;
    /* Validate URI and client options the way every worker will use them. */
    e = client_create(opts->uri, opts->client, &probe, err);
    if (e != HG_OK)
        return e;
    tops = client_transport(probe);
    hg_client_close(probe);

    c = xcalloc(1, sizeof(*c));
    c->opts = *opts;
    if (opts->client != NULL)
        c->client_opts = *opts->client;
    else
        hg_client_opts_init(&c->client_opts);
    c->opts.client = &c->client_opts;
    c->uri = xstrdup(opts->uri);
    c->group = xstrdup(opts->group);
    c->topic = xstrdup(opts->topic);
    c->opts.uri = c->uri;
    c->opts.group = c->group;
    c->opts.topic = c->topic;
    c->touch_ms = opts->touch_interval_ms == HG_TOUCH_NEVER ? 0
                  : opts->touch_interval_ms == 0            ? (opts->lease_ms / 2 > 0 ? opts->lease_ms / 2 : 1)
                                                            : opts->touch_interval_ms;
    c->tops = tops;
    if (tops != NULL && !tops->leases)
        c->touch_ms = 0; /* no leases to renew (a delivery is held until ACK/NACK) */
    snprintf(c->lease_text, sizeof(c->lease_text), "%" PRIu32, opts->lease_ms);
    atomic_init(&c->stop, 0);
    atomic_init(&c->pulls_failing, 0);
    atomic_init(&c->all_failing_since_ms, 0);
    pthread_mutex_init(&c->err_lock, NULL);
    c->wake_pipe[0] = c->wake_pipe[1] = -1;
    c->watchdog_pipe[0] = c->watchdog_pipe[1] = -1;
    if (pipe2(c->wake_pipe, O_NONBLOCK | O_CLOEXEC) != 0 || pipe2(c->watchdog_pipe, O_NONBLOCK | O_CLOEXEC) != 0) {
        client_error_fill(err, HG_ERR_SYSTEM, "pipe: %s", strerror(errno));
        hg_consumer_free(c);
        return HG_ERR_SYSTEM;
    }
    client_error_fill(err, HG_OK, "%s", "");
    *out = c;
    return HG_OK;
}

void hg_consumer_free(hg_consumer_t *c)
{
    if (c == NULL)
        return;
    for (int i = 0; i < 2; i++) {
        if (c->wake_pipe[i] >= 0)
            close(c->wake_pipe[i]);
        if (c->watchdog_pipe[i] >= 0)
            close(c->watchdog_pipe[i]);
    }
    pthread_mutex_destroy(&c->err_lock);
    free(c->uri);
    free(c->group);
    free(c->topic);
    free(c);
}

void hg_consumer_stop(hg_consumer_t *c)
{
    /* Async-signal-safe: an atomic store and write(2). The pipe is
     * non-blocking, so a full pipe (it never is: one byte is enough) cannot
     * block a signal handler. */
    atomic_store_explicit(&c->stop, 1, memory_order_release);
    if (c->wake_pipe[1] >= 0) {
        ssize_t n = write(c->wake_pipe[1], "x", 1);
        (void)n;
    }
}

void hg_consumer_stats(const hg_consumer_t *c, hg_consumer_stats_t *out)
{
    hg_consumer_t *m = (hg_consumer_t *)c; /* atomics are read, never written */
    out->delivered = atomic_load_explicit(&m->delivered, memory_order_relaxed);
    out->done = atomic_load_explicit(&m->done, memory_order_relaxed);
    out->retried = atomic_load_explicit(&m->retried, memory_order_relaxed);
    out->nacked = atomic_load_explicit(&m->nacked, memory_order_relaxed);
    out->failed = atomic_load_explicit(&m->failed, memory_order_relaxed);
    out->touched = atomic_load_explicit(&m->touched, memory_order_relaxed);
    out->lease_lost = atomic_load_explicit(&m->lease_lost, memory_order_relaxed);
    out->errors = atomic_load_explicit(&m->errors, memory_order_relaxed);
    out->reconnects = atomic_load_explicit(&m->reconnects, memory_order_relaxed);
}

hg_err_t hg_consumer_last_error(const hg_consumer_t *c, hg_error_t *out)
{
    hg_consumer_t *m = (hg_consumer_t *)c;
    pthread_mutex_lock(&m->err_lock);
    *out = m->last_error;
    pthread_mutex_unlock(&m->err_lock);
    return out->code;
}

/* ------------------------------------------------------------------------
 * Worker
 * ------------------------------------------------------------------------ */

/* Count and log the connections a client made since *seen (the first one
 * is not a reconnect). Called by the thread that owns the client. */
static void note_connects(hg_consumer_t *c, hg_client_t *client, unsigned *seen, const char *who)
{
    unsigned now = client_connect_count(client);
    if (now == *seen)
        return;
    atomic_fetch_add_explicit(&c->reconnects, *seen == 0 ? now - 1 : now - *seen, memory_order_relaxed);
    if (*seen > 0)
        log_line(c, 2, "%s: reconnected to %s", who, hg_client_address(client));
    *seen = now;
}

static void inflight_remove(worker_t *w, const char *id)
{
    pthread_mutex_lock(&w->lock);
    for (int i = 0; i < w->owner->opts.count; i++)
        if (w->inflight[i].active && strcmp(w->inflight[i].id, id) == 0) {
            w->inflight[i].active = 0;
            break;
        }
    pthread_mutex_unlock(&w->lock);
}

static int inflight_holds(worker_t *w, const char *id)
{
    int found = 0;
    pthread_mutex_lock(&w->lock);
    for (int i = 0; i < w->owner->opts.count && !found; i++)
        found = w->inflight[i].active && strcmp(w->inflight[i].id, id) == 0;
    pthread_mutex_unlock(&w->lock);
    return found;
}

/* Send ACK or NACK for one message and count a lost lease. reason NULL for
 * ACK; dead = 1 for a permanent failure (NACK … DLQ: straight to the DLQ).
 * Errors are recorded, not returned: the lease brings the message back. */
static void settle(worker_t *w, const char *id, const char *reason, int dead)
{
    hg_consumer_t *c = w->owner;
    const char *argv[6] = { reason == NULL ? "ACK" : "NACK", c->group, id };
    int argc = 3;
    if (reason != NULL) {
        if (dead) {
            argv[argc++] = "DLQ";
        }
        argv[argc++] = "REASON";
        argv[argc++] = reason;
    }
    char who[32];
    resp_reply_t *r = NULL;
    hg_err_t e;

    e = client_call(w->client, argc, argv, NULL, 1, 0, 0, &r);
    snprintf(who, sizeof(who), "worker %d", w->index);
    note_connects(c, w->client, &w->connects, who);
    if (e != HG_OK) {
        record_error(c, who, e, argv[0], hg_client_errmsg(w->client));
        return;
    }
    if (r->type == RESP_REPLY_ERROR) {
        client_fail_reply(w->client, r);
        record_error(c, who, HG_ERR_SERVER, argv[0], hg_client_errmsg(w->client));
    } else if (r->type != RESP_REPLY_INTEGER) {
        record_error(c, who, HG_ERR_PROTOCOL, argv[0], resp_reply_type_name(r->type));
    } else if (reason == NULL ? r->integer == 0 : r->integer < 0) {
        count(&c->lease_lost);
        log_line(c, 1, "%s: %s %s: the lease had expired; the broker will deliver it again", who, argv[0], id);
    }
    resp_reply_free(r);
}

/* Run the handler on one message until it is settled. */
static void process(worker_t *w, hg_message_t *m)
{
    hg_consumer_t *c = w->owner;
    char reason[HG_REASON_MAX], nack[HG_REASON_MAX + 96];
    hg_outcome_t outcome;

    for (unsigned attempt = 0;; attempt++) {
        m->attempt = attempt;
        reason[0] = '\0';
        outcome = c->opts.handler(m, reason, sizeof(reason), c->opts.handler_arg);
        reason[sizeof(reason) - 1] = '\0';
        if (outcome == HG_DONE) {
            settle(w, m->id, NULL, 0);
            count(&c->done);
            break;
        }
        if (outcome != HG_RETRY) { /* HG_FAIL, or anything unknown: permanent */
            if (outcome != HG_FAIL)
                snprintf(reason, sizeof(reason), "handler returned unknown outcome %d", (int)outcome);
            count(&c->failed);
            settle(w, m->id, reason[0] != '\0' ? reason : "permanent failure", 1);
            break;
        }
        if ((int)attempt >= c->opts.retry.attempts) {
            snprintf(nack, sizeof(nack), "%s (gave up after %u local attempts)",
                     reason[0] != '\0' ? reason : "transient failure", attempt + 1);
            count(&c->nacked);
            settle(w, m->id, nack, 0);
            break;
        }
        if (stopping(c) || client_sleep(c->wake_pipe[0], hg_backoff_delay(&c->opts.retry, attempt, NULL, NULL)) < 0) {
            snprintf(nack, sizeof(nack), "%s (consumer stopping after %u local attempts)",
                     reason[0] != '\0' ? reason : "transient failure", attempt + 1);
            count(&c->nacked);
            settle(w, m->id, nack, 0);
            break;
        }
        count(&c->retried);
    }
    inflight_remove(w, m->id);
}

/* ACK the ids in one command (ACK group id …); a reply below n counts the
 * leases that had expired. */
static void settle_many(worker_t *w, const char *const *ids, size_t n)
{
    hg_consumer_t *c = w->owner;
    const char **argv = xmalloc((n + 2) * sizeof(*argv));
    char who[32];
    resp_reply_t *r = NULL;

    argv[0] = "ACK";
    argv[1] = c->group;
    memcpy(argv + 2, ids, n * sizeof(*ids));
    hg_err_t e = client_call(w->client, (int)n + 2, argv, NULL, 1, 0, 0, &r);
    free(argv);
    snprintf(who, sizeof(who), "worker %d", w->index);
    note_connects(c, w->client, &w->connects, who);
    if (e != HG_OK) {
        record_error(c, who, e, "ACK", hg_client_errmsg(w->client));
        return;
    }
    if (r->type == RESP_REPLY_ERROR) {
        client_fail_reply(w->client, r);
        record_error(c, who, HG_ERR_SERVER, "ACK", hg_client_errmsg(w->client));
    } else if (r->type != RESP_REPLY_INTEGER) {
        record_error(c, who, HG_ERR_PROTOCOL, "ACK", resp_reply_type_name(r->type));
    } else if (r->integer >= 0 && (uint64_t)r->integer < n) {
        atomic_fetch_add_explicit(&c->lease_lost, n - (uint64_t)r->integer, memory_order_relaxed);
        log_line(c, 1,
                 "%s: ACK of %zu messages released %lld: the other leases had expired; the broker will "
                 "deliver them again",
                 who, n, r->integer);
    }
    resp_reply_free(r);
}

/* Run the batch handler on items[0..n) until every message is settled:
 * HG_DONE ones ACKed together, HG_FAIL ones NACKed to the DLQ, HG_RETRY ones
 * handed to the handler again after the backoff, then NACKed. */
static void process_batch(worker_t *w, hg_batch_item_t *items, size_t n)
{
    hg_consumer_t *c = w->owner;
    const char **done = xmalloc(n * sizeof(*done));
    char nack[HG_REASON_MAX + 96];

    for (unsigned attempt = 0; n > 0; attempt++) {
        for (size_t i = 0; i < n; i++) {
            items[i].msg.attempt = attempt;
            items[i].outcome = HG_RETRY;
            items[i].reason[0] = '\0';
        }
        c->opts.batch_handler(items, n, c->opts.handler_arg);

        size_t ndone = 0, nretry = 0;
        for (size_t i = 0; i < n; i++) {
            items[i].reason[sizeof(items[i].reason) - 1] = '\0';
            if (items[i].outcome == HG_DONE)
                done[ndone++] = items[i].msg.id;
        }
        if (ndone > 0) {
            settle_many(w, done, ndone);
            atomic_fetch_add_explicit(&c->done, ndone, memory_order_relaxed);
        }
        int give_up = (int)attempt >= c->opts.retry.attempts;
        for (size_t i = 0; i < n; i++) {
            hg_batch_item_t *it = &items[i];
            if (it->outcome == HG_DONE) {
                inflight_remove(w, it->msg.id);
            } else if (it->outcome != HG_RETRY) { /* HG_FAIL, or anything unknown: permanent */
                if (it->outcome != HG_FAIL)
                    snprintf(it->reason, sizeof(it->reason), "handler returned unknown outcome %d", (int)it->outcome);
                count(&c->failed);
                settle(w, it->msg.id, it->reason[0] != '\0' ? it->reason : "permanent failure", 1);
                inflight_remove(w, it->msg.id);
            } else {
                if (nretry != i)
                    items[nretry] = *it;
                nretry++;
            }
        }
        n = nretry;
        if (n == 0)
            break;
        if (!give_up && !stopping(c) &&
            client_sleep(c->wake_pipe[0], hg_backoff_delay(&c->opts.retry, attempt, NULL, NULL)) == 0) {
            atomic_fetch_add_explicit(&c->retried, n, memory_order_relaxed);
            continue;
        }
        for (size_t i = 0; i < n; i++) {
            snprintf(nack, sizeof(nack), "%s (%s after %u local attempts)",
                     items[i].reason[0] != '\0' ? items[i].reason : "transient failure",
                     give_up ? "gave up" : "consumer stopping", attempt + 1);
            count(&c->nacked);
            settle(w, items[i].msg.id, nack, 0);
            inflight_remove(w, items[i].msg.id);
        }
        break;
    }
    free(done);
}

static void *worker_main(void *arg)
{
    worker_t *w = arg;
    hg_consumer_t *c = w->owner;
    char count_text[16], block_text[16], who[32], why[160];
    const char *argv[10] = { "PULL",  c->group,   c->topic, "COUNT",      count_text,
                             "BLOCK", block_text, "LEASE",  c->lease_text };
    const hg_backoff_t *pause = &c->client_opts.reconnect_backoff;
    unsigned failures = 0;
    int pull_failing = 0; /* this worker's last PULL failed (note_pull) */

    snprintf(count_text, sizeof(count_text), "%d", c->opts.count);
    snprintf(block_text, sizeof(block_text), "%" PRIu32, c->opts.block_ms);
    snprintf(who, sizeof(who), "worker %d", w->index);

    while (!stopping(c)) {
        resp_reply_t *r = NULL;
        hg_err_t e = client_call(w->client, 9, argv, NULL, 1, c->opts.block_ms, CLIENT_INTERRUPTIBLE, &r);
        note_connects(c, w->client, &w->connects, who);
        if (e == HG_OK && r->type == RESP_REPLY_ERROR) {
            e = client_fail_reply(w->client, r);
            resp_reply_free(r);
            r = NULL;
        } else if (e == HG_OK && r->type != RESP_REPLY_ARRAY) {
            e = client_fail(w->client, HG_ERR_PROTOCOL, "PULL answered %s, want an array",
                            resp_reply_type_name(r->type));
            resp_reply_free(r);
            r = NULL;
            client_disconnect(w->client);
        }
        if (e != HG_OK) {
            if (e == HG_ERR_STOPPED || stopping(c))
                break;
            record_error(c, who, e, "PULL", hg_client_errmsg(w->client));
            note_pull(c, 0, &pull_failing);
            if (e == HG_ERR_AUTH || (e == HG_ERR_SERVER && strncmp(hg_client_errmsg(w->client), "NOPERM", 6) == 0)) {
                /* Wrong credentials or a user without the consumer role stay so: retrying only fills the log. */
                log_line(c, 0, "%s: %s: stopping the consumer", who,
                         e == HG_ERR_AUTH ? "the broker refused the credentials" : "the user may not PULL");
                atomic_store(&c->fatal, (int)e);
                hg_consumer_stop(c);
                break;
            }
            if (client_sleep(c->wake_pipe[0], hg_backoff_delay(pause, failures, NULL, NULL)) < 0)
                break;
            if (failures < 64)
                failures++;
            continue;
        }
        failures = 0;
        note_pull(c, 1, &pull_failing);

        /* Register the whole batch first: the watchdog renews every lease
         * the worker holds, not only the one being handled. */
        {
            uint64_t now = wire_now_ms();
            pthread_mutex_lock(&w->lock);
            for (size_t i = 0; i < r->count && i < (size_t)c->opts.count; i++) {
                const resp_reply_t *e0 = &r->elements[i];
                inflight_t *slot = &w->inflight[i];
                slot->active = 0;
                if (e0->type == RESP_REPLY_ARRAY && e0->count >= 1 && e0->elements[0].type == RESP_REPLY_BULK &&
                    e0->elements[0].len < HG_ID_MAX) {
                    memcpy(slot->id, e0->elements[0].str, e0->elements[0].len + 1);
                    slot->renewed_ms = now;
                    slot->active = 1;
                }
            }
            pthread_mutex_unlock(&w->lock);
        }
        size_t nbatch = 0;
        for (size_t i = 0; i < r->count; i++) {
            hg_message_t m;
            count(&c->delivered);
            if (consumer_parse_message(&r->elements[i], &m, why, sizeof(why)) < 0) {
                /* Unreadable: leave it to its lease (it comes back, and a
                 * broker that keeps sending garbage shows in the errors);
                 * the watchdog must not keep it alive. */
                const resp_reply_t *x = &r->elements[i];
                record_error(c, who, HG_ERR_PROTOCOL, "PULL", why);
                if (x->type == RESP_REPLY_ARRAY && x->count >= 1 && x->elements[0].type == RESP_REPLY_BULK)
                    inflight_remove(w, x->elements[0].str);
                continue;
            }
            m.worker = w->index;
            if (w->batch == NULL)
                process(w, &m);
            else if (nbatch < (size_t)c->opts.count)
                w->batch[nbatch++].msg = m;
            else /* more than COUNT: a broker bug; its lease brings it back */
                inflight_remove(w, m.id);
        }
        if (nbatch > 0)
            process_batch(w, w->batch, nbatch);
        pthread_mutex_lock(&w->lock);
        for (int i = 0; i < c->opts.count; i++)
            w->inflight[i].active = 0;
        pthread_mutex_unlock(&w->lock);
        resp_reply_free(r);
    }
    return NULL;
}

/* ------------------------------------------------------------------------
 * Watchdog
 * ------------------------------------------------------------------------ */

static void watchdog_touch(hg_consumer_t *c, worker_t *w, const char *id, unsigned *connects)
{
    const char *argv[5] = { "TOUCH", c->group, id, "LEASE", c->lease_text };
    resp_reply_t *r = NULL;
    hg_err_t e;

    e = client_call(c->watchdog_client, 5, argv, NULL, 1, 0, 0, &r);
    note_connects(c, c->watchdog_client, connects, "watchdog");
    if (e != HG_OK) {
        if (e != HG_ERR_STOPPED)
            record_error(c, "watchdog", e, "TOUCH", hg_client_errmsg(c->watchdog_client));
        return;
    }
    if (r->type == RESP_REPLY_ERROR) {
        client_fail_reply(c->watchdog_client, r);
        record_error(c, "watchdog", HG_ERR_SERVER, "TOUCH", hg_client_errmsg(c->watchdog_client));
    } else if (r->type != RESP_REPLY_INTEGER) {
        record_error(c, "watchdog", HG_ERR_PROTOCOL, "TOUCH", resp_reply_type_name(r->type));
    } else if (r->integer <= 0) {
        /* 0: no lease. Either the worker settled it meanwhile (fine) or the
         * lease expired before we renewed it (the message will come again). */
        if (inflight_holds(w, id)) {
            count(&c->lease_lost);
            log_line(c, 1, "watchdog: TOUCH %s: the lease had expired; the broker will deliver it again", id);
            inflight_remove(w, id); /* stop touching it; the worker's ACK will say 0 too */
        }
    } else {
        uint64_t now = wire_now_ms();
        count(&c->touched);
        pthread_mutex_lock(&w->lock);
        for (int i = 0; i < c->opts.count; i++)
            if (w->inflight[i].active && strcmp(w->inflight[i].id, id) == 0)
                w->inflight[i].renewed_ms = now;
        pthread_mutex_unlock(&w->lock);
    }
    resp_reply_free(r);
}

static void *watchdog_main(void *arg)
{
    hg_consumer_t *c = arg;
    uint64_t tick = c->touch_ms / 4;
    unsigned connects = 0;
    char(*due)[HG_ID_MAX] = xcalloc((size_t)c->opts.count, HG_ID_MAX);

    if (tick < WATCHDOG_MIN_TICK_MS)
        tick = WATCHDOG_MIN_TICK_MS;
    if (tick > WATCHDOG_MAX_TICK_MS)
        tick = WATCHDOG_MAX_TICK_MS;

    while (client_sleep(c->watchdog_pipe[0], tick) == 0) {
        for (int wi = 0; wi < c->opts.workers; wi++) {
            worker_t *w = &c->workers[wi];
            uint64_t now = wire_now_ms();
            int ndue = 0;

            pthread_mutex_lock(&w->lock);
            for (int i = 0; i < c->opts.count; i++)
                if (w->inflight[i].active && now - w->inflight[i].renewed_ms >= c->touch_ms)
                    memcpy(due[ndue++], w->inflight[i].id, HG_ID_MAX);
            pthread_mutex_unlock(&w->lock);
            for (int i = 0; i < ndue; i++)
                watchdog_touch(c, w, due[i], &connects);
        }
    }
    free(due);
    return NULL;
}

/* ------------------------------------------------------------------------
 * Run
 * ------------------------------------------------------------------------ */

hg_err_t hg_consumer_run(hg_consumer_t *c)
{
    hg_err_t result = HG_OK;
    hg_error_t err;
    int n = c->opts.workers, rc;

    if (c->ran) {
        record_error(c, "consumer", HG_ERR_ARG, "hg_consumer_run", "a consumer runs once");
        return HG_ERR_ARG;
    }
    c->ran = 1;
    c->workers = xcalloc((size_t)n, sizeof(*c->workers));
    for (int i = 0; i < n; i++) {
        worker_t *w = &c->workers[i];
        w->owner = c;
        w->index = i;
        pthread_mutex_init(&w->lock, NULL);
        w->inflight = xcalloc((size_t)c->opts.count, sizeof(*w->inflight));
        if (c->opts.batch_handler != NULL)
            w->batch = xcalloc((size_t)c->opts.count, sizeof(*w->batch));
        /* Cannot fail: hg_consumer_new checked the same URI and options. */
        if (client_create(c->uri, &c->client_opts, &w->client, &err) != HG_OK) {
            record_error(c, "consumer", err.code, "start", err.message);
            hg_consumer_stop(c);
        } else {
            client_set_wake_fd(w->client, c->wake_pipe[0]);
        }
    }

    if (c->tops != NULL && c->tops->helper_start != NULL && !stopping(c)) {
        if (c->tops->helper_start(c->uri, &c->client_opts, c->opts.log, c->opts.log_arg, &c->helper, &err) != HG_OK) {
            record_error(c, "consumer", err.code, "starting the transport's helper", err.message);
            result = err.code;
            hg_consumer_stop(c);
        }
    }
    if (c->touch_ms > 0 && !stopping(c)) {
        if (client_create(c->uri, &c->client_opts, &c->watchdog_client, &err) == HG_OK) {
            client_set_wake_fd(c->watchdog_client, c->watchdog_pipe[0]);
            rc = pthread_create(&c->watchdog, NULL, watchdog_main, c);
            if (rc != 0) {
                record_error(c, "consumer", HG_ERR_SYSTEM, "starting the watchdog", strerror(rc));
                result = HG_ERR_SYSTEM;
                hg_consumer_stop(c);
            } else {
                c->watchdog_started = 1;
            }
        }
    }
    for (int i = 0; i < n && !stopping(c); i++) {
        worker_t *w = &c->workers[i];
        if (w->client == NULL)
            break;
        rc = pthread_create(&w->thread, NULL, worker_main, w);
        if (rc != 0) {
            record_error(c, "consumer", HG_ERR_SYSTEM, "starting a worker", strerror(rc));
            result = HG_ERR_SYSTEM;
            hg_consumer_stop(c);
            break;
        }
        w->started = 1;
    }
    if (result == HG_OK)
        log_line(c, 2, "consumer: %d workers on group %s, topic %s at %s", n, c->group, c->topic,
                 c->workers[0].client != NULL ? hg_client_address(c->workers[0].client) : "?");

    for (int i = 0; i < n; i++)
        if (c->workers[i].started)
            pthread_join(c->workers[i].thread, NULL);
    if (c->helper != NULL) {
        c->tops->helper_stop(c->helper);
        c->helper = NULL;
    }
    if (c->watchdog_started) {
        ssize_t wr = write(c->watchdog_pipe[1], "x", 1);
        (void)wr;
        pthread_join(c->watchdog, NULL);
    }
    hg_client_close(c->watchdog_client);
    c->watchdog_client = NULL;
    for (int i = 0; i < n; i++) {
        hg_client_close(c->workers[i].client);
        pthread_mutex_destroy(&c->workers[i].lock);
        free(c->workers[i].inflight);
        free(c->workers[i].batch);
    }
    free(c->workers);
    c->workers = NULL;
    if (result == HG_OK && atomic_load(&c->fatal) != 0)
        result = (hg_err_t)atomic_load(&c->fatal);
    return result;
}
