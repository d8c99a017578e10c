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
 *                         ACK/NACK are not interrupted by it; the stop fd
 *                         (hg_consumer_set_stop_fd), every client's, ends
 *                         those waits too (a daemon's bounded stop).
 *   stats                 relaxed atomics; PULL health (pulls_failing,
 *                         all_failing_since_ms) sequentially consistent ones.
 *
 * Delivery is at least once: whatever a worker cannot ACK (connection lost,
 * stop during a PULL that the broker had already served) comes back after
 * its lease. ACK answers 0 and NACK/TOUCH answer -1/0 when the lease had
 * expired: counted in lease_lost; the broker delivers the message again.
 *
 * The consumer is four files around one private header
 * (lib/consumer_internal.h: struct hg_consumer, worker_t, the shared
 * helpers): this one (helpers, options, creation, stop, stats),
 * consumer_worker.c (the worker loop: PULL, handler, ACK/NACK, batches),
 * consumer_watchdog.c (the thread that renews leases) and consumer_run.c
 * (hg_consumer_run: starting and joining the threads).
 */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include "lib/consumer.h"
#include "lib/backoff.h"
#include "lib/client.h"
#include "lib/consumer_internal.h"
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

/* ------------------------------------------------------------------------
 * Helpers
 * ------------------------------------------------------------------------ */

void consumer_count(atomic_uint_fast64_t *counter)
{
    atomic_fetch_add_explicit(counter, 1, memory_order_relaxed);
}

int consumer_stopping(const hg_consumer_t *c)
{
    return atomic_load_explicit(&c->stop, memory_order_acquire) != 0;
}

uint64_t hg_consumer_pull_failing_ms(const hg_consumer_t *c)
{
    hg_consumer_t *m = (hg_consumer_t *)c; /* atomics are read, never written */
    if (c == NULL)
        return 0;
    uint64_t since = atomic_load(&m->all_failing_since_ms);
    /* A worker that failed last may store its time after another one's
     * success cleared it: the count decides. */
    if (since == 0 || atomic_load(&m->pulls_failing) < c->opts.workers)
        return 0;
    uint64_t now = wire_now_ms() + 1;
    return now > since ? now - since : 1;
}

void consumer_log(hg_consumer_t *c, int level, const char *fmt, ...)
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
void consumer_record_error(hg_consumer_t *c, const char *who, hg_err_t code, const char *what, const char *msg)
{
    consumer_count(&c->errors);
    pthread_mutex_lock(&c->err_lock);
    c->last_error.code = code;
    snprintf(c->last_error.message, sizeof(c->last_error.message), "%s: %s: %s", who, what, msg);
    pthread_mutex_unlock(&c->err_lock);
    consumer_log(c, code == HG_ERR_SERVER || code == HG_ERR_PROTOCOL ? 0 : 1, "%s: %s: %s", who, what, msg);
}

/* Tell c's connection-event hook (hg_consumer_set_conn_event_fn), when set,
 * of event on client. */
static void tell_conn_event(hg_consumer_t *c, hg_conn_event_t event, hg_client_t *client, const char *who)
{
    if (c->conn_event != NULL)
        c->conn_event(event, who, hg_client_address(client), c->conn_event_arg);
}

/* Count the connections a client made since *seen (the first one is not a
 * reconnect), tell conn_event (hg_consumer_set_conn_event_fn) and log them,
 * naming the node connected (on amqp:// with several hosts, the live one:
 * hg_client_address). Called by the thread that owns the client. */
void consumer_note_connects(hg_consumer_t *c, hg_client_t *client, unsigned *seen, const char *who)
{
    unsigned now = client_connect_count(client);
    if (now == *seen)
        return;
    atomic_fetch_add_explicit(&c->reconnects, *seen == 0 ? now - 1 : now - *seen, memory_order_relaxed);
    tell_conn_event(c, *seen > 0 ? HG_CONN_RECONNECTED : HG_CONN_CONNECTED, client, who);
    consumer_log(c, 2, "%s: %s to %s", who, *seen > 0 ? "reconnected" : "connected", hg_client_address(client));
    *seen = now;
}

/* A worker's PULL was refused with an error reply after an answered one:
 * tell conn_event (HG_CONN_REFUSED); the caller logs the refusal itself.
 * Called by the worker. */
void consumer_note_refused(hg_consumer_t *c, hg_client_t *client, const char *who)
{
    tell_conn_event(c, HG_CONN_REFUSED, client, who);
}

/* A worker's PULL was answered after refused ones: tell conn_event
 * (HG_CONN_ANSWERED) and log it. Called by the worker. */
void consumer_note_answered(hg_consumer_t *c, hg_client_t *client, const char *who)
{
    tell_conn_event(c, HG_CONN_ANSWERED, client, who);
    consumer_log(c, 2, "%s: PULL answered again after refusals", who);
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
    if (o == NULL)
        return;
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
    /* Every worker's client is created at run time from client_opts: keep our own copies of the
     * credentials, as hg_client_open does (the caller may wipe its password right after). */
    c->user = c->client_opts.user != NULL ? xstrdup(c->client_opts.user) : NULL;
    c->password = c->client_opts.password != NULL ? xstrdup(c->client_opts.password) : NULL;
    c->client_opts.user = c->user;
    c->client_opts.password = c->password;
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
    c->stop_fd = -1;
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
    if (c->password != NULL)
        explicit_bzero(c->password, strlen(c->password)); /* a memset before free may be optimised away */
    free(c->user);
    free(c->password);
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
    if (c == NULL)
        return;
    atomic_store_explicit(&c->stop, 1, memory_order_release);
    if (c->wake_pipe[1] >= 0) {
        ssize_t n = write(c->wake_pipe[1], "x", 1);
        (void)n;
    }
}

void hg_consumer_set_stop_fd(hg_consumer_t *c, int fd)
{
    if (c != NULL)
        c->stop_fd = fd;
}

void hg_consumer_set_conn_event_fn(hg_consumer_t *c, hg_conn_event_fn fn, void *arg)
{
    if (c == NULL)
        return;
    c->conn_event = fn;
    c->conn_event_arg = arg;
}

void hg_consumer_stats(const hg_consumer_t *c, hg_consumer_stats_t *out)
{
    hg_consumer_t *m = (hg_consumer_t *)c; /* atomics are read, never written */
    if (out == NULL)
        return;
    if (c == NULL) {
        memset(out, 0, sizeof(*out));
        return;
    }
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
    if (out == NULL)
        return HG_ERR_ARG;
    if (c == NULL) {
        client_error_fill(out, HG_ERR_ARG, "hg_consumer_last_error: the consumer is NULL");
        return HG_ERR_ARG;
    }
    pthread_mutex_lock(&m->err_lock);
    *out = m->last_error;
    pthread_mutex_unlock(&m->err_lock);
    return out->code;
}
