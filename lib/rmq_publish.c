/*
 * lib/rmq_publish.c — publishing on channel 1 of the RabbitMQ transport,
 * with publisher confirms.
 *
 * A message (rmq_out_t) becomes one AMQP message: its fields as headers
 * (rmq.h names them), persistent, its id as message-id; one sent to the
 * remainder queues first carries the bits of its remainder (rmq.h). A batch
 * is published in one go, then the frame pump (rmq_pump.c) reads the
 * confirms until every message of it is acknowledged or refused, or the
 * read timeout passes. Channel 1 is in confirm mode (rmq_conn.c opens it
 * so), so RabbitMQ numbers the publishes 1, 2, … per connection: next_seq.
 *
 * Every publish is mandatory. Without it RabbitMQ confirms a message that
 * no queue takes (no binding matches: a binding or queue deleted by hand, or
 * lost) and drops it — a confirmed send that is lost. With it, such a
 * message comes back as basic.return with its content before the basic.ack
 * of the same publish; the pump (rmq_pump.c) marks that publish returned,
 * and the batch reports it as HG_ERR_SERVER naming the exchange and routing
 * key. A message an alternate exchange takes (hg.due's hg.unrouted) is
 * routed, not returned; the remainder chain has none, so a binding missing
 * on a remainder's path returns it rather than letting it skip a wait
 * (rmq.h). A returned publish sets
 * r->rebind: the client's next declaration sweep binds everything again
 * (rmq_topology.c), which repairs what the return found missing.
 *
 * librabbitmq writes a publish with no deadline, so the writes are bounded
 * by the guard (rmq_watchdog.c): the connection's watchdog is armed over its
 * socket and the client's stop fd for the whole batch, with a deadline of
 * the read timeout that restarts with every message (a long batch the node
 * takes steadily is not cut; one message that it stops taking is), then
 * the confirm wait's deadline. When it cut the socket, the batch ends with
 * an error naming the write or the wait and the timeout (or the stop), and
 * the connection is dropped: half a frame may be on the wire.
 *
 * One thread per connection.
 */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include "lib/rmq.h"
#include "lib/client.h"
#include "lib/wire.h"

#include "base/alloc.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

static void add_str(amqp_table_entry_t *e, int *n, const char *key, const char *value, size_t len)
{
    e[*n].key = amqp_cstring_bytes(key);
    e[*n].value.kind = AMQP_FIELD_KIND_UTF8;
    e[*n].value.value.bytes.bytes = (void *)value;
    e[*n].value.value.bytes.len = len;
    (*n)++;
}

static void add_int(amqp_table_entry_t *e, int *n, const char *key, long long value)
{
    e[*n].key = amqp_cstring_bytes(key);
    e[*n].value.kind = AMQP_FIELD_KIND_I64;
    e[*n].value.value.i64 = value;
    (*n)++;
}

/* Publish one message on channel 1 (no wait). */
static int publish_one(rmq_t *r, const rmq_out_t *o)
{
    amqp_table_entry_t e[16 + RMQ_REM_MAX_BITS];
    amqp_basic_properties_t p;
    amqp_bytes_t body;
    char level[16], exchange[64], bits[RMQ_REM_MAX_BITS][32];
    int n = 0;

    if (o->topic != NULL)
        add_str(e, &n, RMQ_H_TOPIC, o->topic, strlen(o->topic));
    if (o->key != NULL)
        add_str(e, &n, RMQ_H_KEY, o->key, strlen(o->key));
    add_int(e, &n, RMQ_H_DUE, (long long)o->due_ms);
    add_int(e, &n, RMQ_H_RECONSUME, o->reconsume);
    if (o->level > 0) {
        snprintf(level, sizeof(level), "%d", o->level);
        add_str(e, &n, RMQ_H_LEVEL, level, strlen(level));
    }
    if (o->plan != NULL)
        add_str(e, &n, RMQ_H_PLAN, o->plan, strlen(o->plan));
    if (o->dest != NULL)
        add_str(e, &n, RMQ_H_DEST, o->dest, strlen(o->dest));
    if (o->reason != NULL) {
        add_str(e, &n, RMQ_H_REASON, o->reason, strlen(o->reason));
        add_int(e, &n, RMQ_H_PARKED, (long long)o->parked_ms);
    }
    if (o->group != NULL) {
        add_str(e, &n, RMQ_H_GROUP, o->group, strlen(o->group));
        add_int(e, &n, RMQ_H_CREATED, (long long)o->created_ms);
        add_int(e, &n, RMQ_H_MAXRETRY, o->max_reconsume);
    }
    snprintf(exchange, sizeof(exchange), "%s", o->exchange);
    if (o->remainder_ms > 0) { /* the remainder queues first: every bit says wait or skip (rmq.h) */
        int k = 0;
        snprintf(exchange, sizeof(exchange), RMQ_REM_EXCHANGE, o->remainder_top);
        for (uint64_t b = o->remainder_top; b > 0 && k < RMQ_REM_MAX_BITS; b >>= 1) {
            snprintf(bits[k], sizeof(bits[k]), RMQ_H_REM, b);
            add_str(e, &n, bits[k++], (o->remainder_ms & b) ? "1" : "0", 1);
        }
        if (o->level > 0)
            add_str(e, &n, RMQ_H_THEN, "level", 5);
        else
            add_str(e, &n, RMQ_H_THEN, "due", 3);
    }
    memset(&p, 0, sizeof(p));
    p._flags = AMQP_BASIC_DELIVERY_MODE_FLAG | AMQP_BASIC_HEADERS_FLAG | AMQP_BASIC_MESSAGE_ID_FLAG;
    p.delivery_mode = 2; /* persistent */
    p.message_id = amqp_cstring_bytes(o->id);
    p.headers.num_entries = n;
    p.headers.entries = e;
    body.bytes = (void *)(o->payload != NULL ? o->payload : "");
    body.len = o->payload_len;
    return amqp_basic_publish(r->st, RMQ_WORK_CHANNEL, amqp_cstring_bytes(exchange), amqp_cstring_bytes(o->routing_key),
                              1 /* mandatory: a message no queue takes comes back */, 0, &p, body);
}

/* The results of a batch that ended early (a lost connection, a missing
 * confirm): what RabbitMQ confirmed before is sent (HG_OK), the rest
 * HG_ERR_IO — a caller resends only those, so a confirmed message is never
 * sent twice. batch_state outlives rmq_disconnect (it only zeroes batch_n). */
static void results_so_far(const rmq_t *r, size_t n, hg_err_t *results)
{
    for (size_t i = 0; i < n; i++)
        results[i] = r->batch_state[i] == RMQ_PUB_ACKED ? HG_OK : HG_ERR_IO;
}

/* Whether publish i of the batch is settled: confirmed or refused (a
 * returned one still waits for its confirm). */
static int settled(const rmq_t *r, size_t i)
{
    return r->batch_state[i] != RMQ_PUB_WAITING && r->batch_state[i] != RMQ_PUB_RETURNED;
}

/* The end of a batch in which some messages came back unrouted: the next
 * sweep binds the whole topology again, and the next group ensure its
 * group. Returns the error that names where the first went and what to do. */
static hg_err_t unrouted(rmq_t *r)
{
    r->rebind = 1;
    r->topology_ok = 0;
    r->ensured_group[0] = '\0';
    /* HG_ERRMSG_MAX is 256: what matters first */
    return client_fail(r->client, HG_ERR_SERVER,
                       "no queue is bound for %s (RabbitMQ at %s returned %zu, none sent): topology damaged; this "
                       "client binds it all again before its next publish: send again",
                       r->returned_to, r->address, r->returned);
}

/* A batch the stop fd ended: the connection's state is unknown (confirms
 * still owed, perhaps half a frame written), so it is dropped; the
 * unconfirmed say they were stopped (not to be resent). */
static void stopped(rmq_t *r, size_t n, hg_err_t *results)
{
    rmq_disconnect(r);
    results_so_far(r, n, results);
    for (size_t i = 0; i < n; i++)
        if (results[i] != HG_OK)
            results[i] = HG_ERR_STOPPED;
}

/* The end of a batch whose socket the watchdog shut down (cut), while
 * writing it (writing) or waiting for its confirms: the connection is
 * dropped, and the error says what was being done and why it ended — the
 * read timeout, or the stop fd. The unconfirmed messages: HG_ERR_IO (to be
 * resent, as after a lost connection), or HG_ERR_STOPPED. */
static hg_err_t cut_short(rmq_t *r, rmq_cut_t cut, int writing, size_t n, hg_err_t *results)
{
    uint32_t timeout = client_opts(r->client)->read_timeout_ms;

    if (cut == RMQ_CUT_STOP) {
        stopped(r, n, results);
        return client_fail(r->client, HG_ERR_STOPPED, "stopped while %s RabbitMQ at %s",
                           writing ? "writing a publish to" : "waiting for", r->address);
    }
    rmq_disconnect(r);
    results_so_far(r, n, results);
    if (writing)
        return client_fail(r->client, HG_ERR_TIMEOUT,
                           "writing a publish to RabbitMQ at %s: not done within %" PRIu32
                           "ms (the node takes no more bytes)",
                           r->address, timeout);
    return client_fail(r->client, HG_ERR_TIMEOUT, "no publisher confirm from RabbitMQ at %s within %" PRIu32 "ms",
                       r->address, timeout);
}

/* rmq_publish inside its guard. */
static hg_err_t publish_guarded(rmq_t *r, const rmq_out_t *out, size_t n, hg_err_t *results)
{
    const hg_client_opts_t *o = client_opts(r->client);
    uint64_t deadline;
    hg_err_t first = HG_OK;
    size_t done = 0;
    rmq_cut_t cut;

    for (size_t i = 0; i < n; i++)
        results[i] = HG_ERR_IO;
    r->refused = 0;
    r->returned = 0;
    r->returned_to[0] = '\0';
    if (r->st == NULL || amqp_get_sockfd(r->st) < 0) { /* librabbitmq closed it (a timeout) */
        rmq_disconnect(r);
        return client_fail(r->client, HG_ERR_IO, "not connected to RabbitMQ at %s", r->address);
    }
    if (n > r->batch_cap) {
        r->batch_state = xrealloc(r->batch_state, n);
        r->batch_cap = n;
    }
    memset(r->batch_state, 0, n);
    r->batch_first = r->next_seq;
    r->batch_n = n;
    r->batch_out = out;
    for (size_t i = 0; i < n; i++) {
        int rc;
        /* each message within the read timeout: a long batch that the node
         * takes steadily is not cut */
        rmq_guard_step(r);
        rc = publish_one(r, &out[i]);
        r->next_seq++;
        if (rc != AMQP_STATUS_OK) {
            if ((cut = rmq_guard_cut(r)) != RMQ_CUT_NONE)
                return cut_short(r, cut, 1, n, results);
            client_fail(r->client, HG_ERR_IO, "publishing to %s at %s: %s",
                        out[i].exchange[0] ? out[i].exchange : "the default exchange", r->address,
                        amqp_error_string2(rc));
            rmq_disconnect(r);
            return HG_ERR_IO;
        }
    }
    deadline = o->read_timeout_ms == 0 ? 0 : wire_now_ms() + o->read_timeout_ms;
    /* the pump reads with a deadline of its own, but a heartbeat that
     * librabbitmq writes meanwhile would wait for ever too */
    rmq_guard_step(r);
    for (;;) {
        hg_err_t e;
        done = 0;
        for (size_t i = 0; i < n; i++)
            done += settled(r, i);
        if (done == n)
            break;
        e = rmq_pump(r, deadline, 0, 0);
        if (e != HG_OK && (cut = rmq_guard_cut(r)) != RMQ_CUT_NONE)
            return cut_short(r, cut, 0, n, results);
        if (e == HG_ERR_TIMEOUT) {
            client_fail(r->client, HG_ERR_TIMEOUT, "no publisher confirm from RabbitMQ at %s within %" PRIu32 "ms",
                        r->address, o->read_timeout_ms);
            rmq_disconnect(r);
            results_so_far(r, n, results);
            return HG_ERR_TIMEOUT;
        }
        if (e == HG_ERR_STOPPED) {
            stopped(r, n, results);
            return e;
        }
        if (e != HG_OK) {
            results_so_far(r, n, results);
            return e;
        }
    }
    if (rmq_guard_cut(r) != RMQ_CUT_NONE)
        rmq_disconnect(r); /* cut as the last confirm came: the socket is shut */
    for (size_t i = 0; i < n; i++) {
        results[i] = r->batch_state[i] == RMQ_PUB_ACKED ? HG_OK : HG_ERR_SERVER;
        if (results[i] == HG_OK || r->batch_state[i] == RMQ_PUB_RETURNED_ACKED)
            continue;
        r->refused++;
        if (first == HG_OK)
            first = client_fail(r->client, HG_ERR_SERVER,
                                "RabbitMQ at %s refused the message (basic.nack): a queue on its route is full "
                                "(x-overflow reject-publish) or its leader is unreachable from this connection",
                                r->address);
    }
    r->batch_n = 0;
    if (r->returned > 0) {
        /* a refusal as well keeps its error: the send paths resend the
         * batch's failures on a new connection, after the rebinding sweep */
        char refusal[HG_ERRMSG_MAX];
        snprintf(refusal, sizeof(refusal), "%s", first != HG_OK ? hg_client_errmsg(r->client) : "");
        hg_err_t e = unrouted(r);
        if (first == HG_OK)
            first = e;
        else
            client_fail(r->client, first, "%s", refusal);
    }
    return first;
}

hg_err_t rmq_publish(rmq_t *r, const rmq_out_t *out, size_t n, hg_err_t *results)
{
    hg_err_t e;

    rmq_guard_enter(r);
    e = publish_guarded(r, out, n, results);
    r->batch_out = NULL; /* the caller's: a batch left unsettled (an error) must not point at it */
    rmq_guard_leave(r);
    return e;
}
