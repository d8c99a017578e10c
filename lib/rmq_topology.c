/*
 * lib/rmq_topology.c — the exchanges and queues of the RabbitMQ transport,
 * declared idempotently and checked, and the group registry.
 *
 * A binding deleted by hand (or lost) is not seen by a sweep that skips
 * the bindings; a publish that it leaves with no queue comes back
 * (mandatory: rmq_publish.c) and sets r->rebind, and the next sweep of
 * that client binds everything again (and its next group ensure its
 * group's two bindings): the repair.
 *
 * Declarations run on channel 2 once per connection (rmq_topology) and once
 * per group and connection (rmq_group_ensure); bindings only until one
 * connection of the client made them, and not at all when an earlier
 * client's sweep completed (hg.probe exists: topology_made_before; they
 * outlive connections, and no
 * node completes one while a cut link is not yet seen: rmq.h,
 * topology_bound). RabbitMQ answers a
 * declaration whose arguments differ from the existing queue's with
 * PRECONDITION_FAILED; rmq_rpc.c turns that into a message naming the
 * argument and both values (e.g. a level table other than the one the level
 * queues were declared with: x-message-ttl differs).
 *
 * The registry (hg.groups) holds one persistent message per group: its
 * name, topic, creation time and max-reconsume. AMQP 0-9-1 cannot list
 * queues, so GROUP LIST and the "bound to another topic" check read it by
 * browsing: basic.get every message unacknowledged, then one basic.nack
 * (multiple, requeue) returns them all. A client that browses while another
 * holds the records sees none and may add a second record of a group;
 * readers keep the first one of a name and delete the others.
 *
 * hg.probe is always empty: an idle consumer's basic.get of it (a Raft
 * command, answered once a majority commits it) tells whether its node
 * still reaches a quorum (rmq_probe_idle; docs/rabbitmq.md "Faults").
 *
 * Names: a topic or group name is checked (rmq_check_name) before any
 * of it goes on the wire, by the broker's rule and the AMQP shortstr limit:
 * RabbitMQ answers a queue name that is not UTF-8 by closing the whole
 * connection (every delivery held on it comes again), and rabbitmq-c fails
 * to encode a name above 255 bytes as if the connection were lost.
 *
 * One thread per connection.
 */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include "lib/rmq.h"
#include "lib/client.h"

#include "base/alloc.h"
#include "base/clock.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int rmq_check_name(const char *what, const char *name, char *why, size_t whylen)
{
    size_t len = name != NULL ? strlen(name) : 0;

    if (len == 0)
        return snprintf(why, whylen, "%s name is empty", what), -1;
    if (len > RMQ_NAME_USABLE)
        return snprintf(why, whylen,
                        "%s name is %zu bytes, longer than the limit of %d on amqp:// (queue names and routing keys "
                        "hold it: 255 bytes at most)",
                        what, len, RMQ_NAME_USABLE),
               -1;
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)name[i];
        if (c < 0x21 || c > 0x7e)
            return snprintf(why, whylen,
                            "%s name has an invalid byte 0x%02x at offset %zu (printable ASCII without blanks only)",
                            what, c, i),
                   -1;
    }
    return 0;
}

hg_err_t rmq_name_arg(rmq_t *r, const char *what, const char *name)
{
    char why[HG_ERRMSG_MAX];
    if (rmq_check_name(what, name, why, sizeof(why)) < 0)
        return client_fail(r->client, HG_ERR_ARG, "%s", why);
    return HG_OK;
}

void rmq_level_queue(char *buf, size_t len, int level)
{
    snprintf(buf, len, "hg.level.%d", level);
}

void rmq_group_queue(char *buf, size_t len, const char *group)
{
    snprintf(buf, len, "hg.group.%s", group);
}

void rmq_dlq_queue(char *buf, size_t len, const char *group)
{
    snprintf(buf, len, "hg.dlq.%s", group);
}

static amqp_table_entry_t str_arg(const char *key, const char *value)
{
    amqp_table_entry_t e;
    e.key = amqp_cstring_bytes(key);
    e.value.kind = AMQP_FIELD_KIND_UTF8;
    e.value.value.bytes = amqp_cstring_bytes(value);
    return e;
}

static amqp_table_entry_t long_arg(const char *key, long long value)
{
    amqp_table_entry_t e;
    e.key = amqp_cstring_bytes(key);
    e.value.kind = AMQP_FIELD_KIND_I64;
    e.value.value.i64 = value;
    return e;
}

/* A durable exchange. */
static hg_err_t declare_exchange(rmq_t *r, const char *name, const char *type, amqp_table_t args)
{
    char what[128];
    snprintf(what, sizeof(what), "declaring exchange %s (%s)", name, type);
    amqp_exchange_declare(r->st, RMQ_ADMIN_CHANNEL, amqp_cstring_bytes(name), amqp_cstring_bytes(type), 0, 1, 0, 0,
                          args);
    return rmq_rpc_check(r, RMQ_ADMIN_CHANNEL, what);
}

/* A durable quorum queue with extra arguments. returns: its messages go back
 * to it unsettled (a consumer's connection ends, a browse returns them), so
 * it is declared with x-delivery-limit RMQ_DELIVERY_LIMIT — without it,
 * RabbitMQ 4.0 and later drop a message returned 20 times. A queue an
 * earlier version declared without the limit is refused with
 * PRECONDITION_FAILED naming x-delivery-limit: it is declared again as it
 * is (docs/rabbitmq.md says what that leaves on 4.x). */
static hg_err_t declare_quorum(rmq_t *r, const char *name, const amqp_table_entry_t *extra, int nextra, int returns)
{
    amqp_table_entry_t e[9];
    amqp_table_t args;
    char what[RMQ_QUEUE_NAME_MAX + 32];
    int n = 0;
    hg_err_t err;

    e[n++] = str_arg("x-queue-type", "quorum");
    for (int i = 0; i < nextra && n < 8; i++)
        e[n++] = extra[i];
    if (returns)
        e[n++] = long_arg("x-delivery-limit", RMQ_DELIVERY_LIMIT);
    args.num_entries = n;
    args.entries = e;
    snprintf(what, sizeof(what), "declaring queue %s", name);
    amqp_queue_declare(r->st, RMQ_ADMIN_CHANNEL, amqp_cstring_bytes(name), 0, 1, 0, 0, args);
    err = rmq_rpc_check(r, RMQ_ADMIN_CHANNEL, what);
    if (err != HG_ERR_SERVER || !returns || r->last_code != 406 ||
        strstr(hg_client_errmsg(r->client), "x-delivery-limit") == NULL)
        return err;
    if ((err = rmq_admin(r)) != HG_OK) /* the refusal closed channel 2 */
        return err;
    args.num_entries = n - 1; /* the limit is the last argument */
    amqp_queue_declare(r->st, RMQ_ADMIN_CHANNEL, amqp_cstring_bytes(name), 0, 1, 0, 0, args);
    return rmq_rpc_check(r, RMQ_ADMIN_CHANNEL, what);
}

/* Bind queue to exchange, unless the sweep running now found its bindings
 * in place (r->binds_in_place: an earlier connection of this client made
 * them). */
static hg_err_t bind(rmq_t *r, const char *queue, const char *exchange, const char *key, amqp_table_t args)
{
    char what[RMQ_QUEUE_NAME_MAX * 2];
    if (r->binds_in_place)
        return HG_OK;
    snprintf(what, sizeof(what), "binding queue %s to %s", queue, exchange);
    amqp_queue_bind(r->st, RMQ_ADMIN_CHANNEL, amqp_cstring_bytes(queue), amqp_cstring_bytes(exchange),
                    amqp_cstring_bytes(key), args);
    return rmq_rpc_check(r, RMQ_ADMIN_CHANNEL, what);
}

/* Bind exchange dest to exchange source, as bind() does queues. */
static hg_err_t bind_exchange(rmq_t *r, const char *dest, const char *source, amqp_table_t args)
{
    char what[RMQ_QUEUE_NAME_MAX * 2];
    if (r->binds_in_place)
        return HG_OK;
    snprintf(what, sizeof(what), "binding exchange %s to %s", dest, source);
    amqp_exchange_bind(r->st, RMQ_ADMIN_CHANNEL, amqp_cstring_bytes(dest), amqp_cstring_bytes(source), amqp_empty_bytes,
                       args);
    return rmq_rpc_check(r, RMQ_ADMIN_CHANNEL, what);
}

/* The headers binding arguments "x-match all, header = value" in e[2]. */
static amqp_table_t match_one(amqp_table_entry_t e[2], const char *header, const char *value)
{
    amqp_table_t t = { 2, e };
    e[0] = str_arg("x-match", "all");
    e[1] = str_arg(header, value);
    return t;
}

/* Where hg.remainder.<b> and hg.remainder.bit.<b> hand a message on:
 * hg.remainder.bit.<b/2>, or hg.remainder.end after the last bit. */
static void remainder_next(char *buf, size_t len, uint64_t b)
{
    if (b > 1)
        snprintf(buf, len, RMQ_REM_EXCHANGE, b / 2);
    else
        snprintf(buf, len, "%s", RMQ_EX_REM_END);
}

/* The remainder queues and their exchanges, from hg.remainder.end up to the
 * top bit of r's level table (rmq.h has the routing). Every step is an
 * explicit binding and no exchange has an alternate exchange, so a binding
 * that is missing stops a message (returned, or held by the dead-lettering
 * queue) instead of letting it skip a wait. */
static hg_err_t remainder_topology(rmq_t *r)
{
    amqp_table_entry_t m[2];
    hg_err_t e;

    if ((e = declare_exchange(r, RMQ_EX_REM_END, "headers", amqp_empty_table)) != HG_OK ||
        (e = bind_exchange(r, RMQ_EX_LEVELS, RMQ_EX_REM_END, match_one(m, RMQ_H_THEN, "level"))) != HG_OK ||
        (e = bind_exchange(r, RMQ_EX_DUE, RMQ_EX_REM_END, match_one(m, RMQ_H_THEN, "due"))) != HG_OK)
        return e;
    for (uint64_t b = 1, top = rmq_remainder_top(&r->levels); top > 0 && b <= top; b <<= 1) {
        char queue[64], exchange[64], next[64], header[64];
        amqp_table_entry_t q[4];
        snprintf(queue, sizeof(queue), RMQ_REM_QUEUE, b);
        snprintf(exchange, sizeof(exchange), RMQ_REM_EXCHANGE, b);
        snprintf(header, sizeof(header), RMQ_H_REM, b);
        remainder_next(next, sizeof(next), b);
        q[0] = long_arg("x-message-ttl", (long long)b);
        q[1] = str_arg("x-dead-letter-exchange", next);
        q[2] = str_arg("x-dead-letter-strategy", "at-least-once");
        q[3] = str_arg("x-overflow", "reject-publish");
        if ((e = declare_exchange(r, exchange, "headers", amqp_empty_table)) != HG_OK ||
            (e = declare_quorum(r, queue, q, 4, 0)) != HG_OK ||
            (e = bind(r, queue, exchange, "", match_one(m, header, "1"))) != HG_OK ||
            (e = bind_exchange(r, next, exchange, match_one(m, header, "0"))) != HG_OK)
            return e;
    }
    return HG_OK;
}

/* On the client's first connection: whether an earlier client made the
 * whole topology, bindings included — hg.probe exists, and a sweep declares
 * it last, after every binding (a sweep cut short, or a vhost from before
 * the probe, has none). Then r->topology_bound, and this sweep declares and
 * checks but binds nothing: a short-lived client (a CLI call, a monitor's
 * DLQ LEN) does not wait on Mnesia transactions that no node completes
 * while a peer is stopped, cut off or rejoining. A passive declare of a
 * missing queue closes the admin channel; rmq_admin reopens it. */
static hg_err_t topology_made_before(rmq_t *r)
{
    long long depth;
    hg_err_t e = rmq_queue_depth(r, RMQ_Q_PROBE, &depth);
    if (e == HG_OK && depth >= 0)
        r->topology_bound = 1;
    return e;
}

hg_err_t rmq_topology(rmq_t *r)
{
    amqp_table_entry_t ae = str_arg("alternate-exchange", RMQ_EX_UNROUTED);
    amqp_table_t ae_args = { 1, &ae };
    hg_err_t e;

    if (r->topology_ok)
        return HG_OK;
    if (!r->rebind && !r->topology_bound && (e = topology_made_before(r)) != HG_OK)
        return e;
    if ((e = rmq_admin(r)) != HG_OK)
        return e;
    /* a publish came back unrouted (r->rebind): bind everything again,
     * whatever hg.probe and earlier connections say */
    r->binds_in_place = r->topology_bound && !r->rebind;
    if ((e = declare_exchange(r, RMQ_EX_UNROUTED, "fanout", amqp_empty_table)) != HG_OK ||
        (e = declare_quorum(r, RMQ_Q_UNROUTED, NULL, 0, 1)) != HG_OK ||
        (e = bind(r, RMQ_Q_UNROUTED, RMQ_EX_UNROUTED, "", amqp_empty_table)) != HG_OK ||
        (e = declare_exchange(r, RMQ_EX_DUE, "direct", ae_args)) != HG_OK ||
        (e = declare_exchange(r, RMQ_EX_LEVELS, "headers", amqp_empty_table)) != HG_OK)
        return e;
    for (int level = 1; level <= r->levels.count; level++) {
        char name[64], value[16];
        amqp_table_entry_t q[5], b[2];
        amqp_table_t bargs = { 2, b };
        rmq_level_queue(name, sizeof(name), level);
        snprintf(value, sizeof(value), "%d", level);
        q[0] = long_arg("x-message-ttl", (long long)r->levels.delay_ms[level]);
        q[1] = str_arg("x-dead-letter-exchange", RMQ_EX_DUE);
        q[2] = str_arg("x-dead-letter-strategy", "at-least-once");
        q[3] = str_arg("x-overflow", "reject-publish");
        b[0] = str_arg("x-match", "all");
        b[1] = str_arg(RMQ_H_LEVEL, value);
        if ((e = declare_quorum(r, name, q, 4, 0)) != HG_OK || (e = bind(r, name, RMQ_EX_LEVELS, "", bargs)) != HG_OK)
            return e;
    }
    if ((e = remainder_topology(r)) != HG_OK || (e = declare_quorum(r, RMQ_Q_HOPS, NULL, 0, 1)) != HG_OK ||
        (e = bind(r, RMQ_Q_HOPS, RMQ_EX_DUE, RMQ_RK_HOP, amqp_empty_table)) != HG_OK ||
        (e = declare_quorum(r, RMQ_Q_GROUPS, NULL, 0, 1)) != HG_OK ||
        (e = declare_quorum(r, RMQ_Q_PROBE, NULL, 0, 0)) != HG_OK)
        return e;
    r->topology_ok = 1;
    r->topology_bound = 1;
    if (r->rebind) { /* the group consumed binds again at its next ensure too */
        r->rebind = 0;
        r->bound_group[0] = r->bound_topic[0] = '\0';
    }
    return HG_OK;
}

unsigned rmq_topology_waits(const lvl_table_t *t)
{
    unsigned bits = 0;
    for (uint64_t b = 1, top = rmq_remainder_top(t); top > 0 && b <= top; b <<= 1)
        bits++;
    /* rmq_topology, each rpc one wait, a declare_quorum with returns up to
     * three (refused for x-delivery-limit: channel.open, declared again):
     *   the first connection's check of hg.probe 1 (and the admin
     *   channel's reopening after a 404: 1); rmq_admin 1; unrouted exchange 1, queue 3, bind 1; hg.due and
     *   hg.levels 2; per level a queue and a bind; remainder_topology's
     *   hg.remainder.end and its two bindings 3, per remainder queue an
     *   exchange, a queue, its bind and the skip bind; hg.hops 3 and its
     *   bind 1; hg.groups 3; hg.probe 1. */
    return 2u + 1u + 5u + 2u + 2u * (unsigned)t->count + 3u + 4u * bits + 4u + 3u + 1u;
}

hg_err_t rmq_queue_depth(rmq_t *r, const char *queue, long long *depth)
{
    amqp_queue_declare_ok_t *ok;
    char what[RMQ_QUEUE_NAME_MAX + 32];
    hg_err_t e;

    *depth = -1;
    if ((e = rmq_admin(r)) != HG_OK)
        return e;
    snprintf(what, sizeof(what), "checking queue %s", queue);
    ok = amqp_queue_declare(r->st, RMQ_ADMIN_CHANNEL, amqp_cstring_bytes(queue), 1, 0, 0, 0, amqp_empty_table);
    if (ok != NULL) {
        *depth = ok->message_count;
        rmq_guard_step(r);
        return HG_OK;
    }
    e = rmq_rpc_fail(r, RMQ_ADMIN_CHANNEL, what);
    if (e == HG_ERR_SERVER && r->last_code == 404) {
        client_clear_error(r->client);
        return HG_OK; /* no such queue: -1 */
    }
    return e;
}

/* ------------------------------------------------------------------------
 * The quorum probe
 * ------------------------------------------------------------------------ */

uint64_t rmq_probe_idle_ms(const rmq_t *r)
{
    uint32_t read_timeout = client_opts(r->client)->read_timeout_ms;

    if (read_timeout == 0)
        return RMQ_PROBE_IDLE_DEFAULT_MS;
    return read_timeout < RMQ_PROBE_IDLE_MIN_MS ? RMQ_PROBE_IDLE_MIN_MS : read_timeout;
}

hg_err_t rmq_probe_idle(rmq_t *r)
{
    char what[RMQ_QUEUE_NAME_MAX + 128];
    amqp_rpc_reply_t x;
    uint64_t now = clock_mono_ms();
    hg_err_t e;

    if (r->st == NULL || r->consuming[0] == '\0' || r->ready != NULL || now - r->alive_ms < rmq_probe_idle_ms(r))
        return HG_OK;
    if ((e = rmq_topology(r)) != HG_OK) /* hg.probe, on a connection that has not declared it */
        return e;
    snprintf(what, sizeof(what),
             "checking that RabbitMQ at %s reaches a quorum (basic.get of queue " RMQ_Q_PROBE
             ", nothing delivered for %" PRIu64 "ms)",
             r->address, now - r->alive_ms);
    x = amqp_basic_get(r->st, RMQ_ADMIN_CHANNEL, amqp_cstring_bytes(RMQ_Q_PROBE), 1);
    if (x.reply_type != AMQP_RESPONSE_NORMAL) {
        e = rmq_rpc_fail(r, RMQ_ADMIN_CHANNEL, what);
        if (e == HG_ERR_SERVER && r->last_code == 404) { /* deleted by hand: declared again next time */
            r->topology_ok = 0;
            client_clear_error(r->client);
            return HG_OK;
        }
        if (r->st != NULL) /* another channel error: the node answered, but cannot serve the queue */
            rmq_disconnect(r);
        return e;
    }
    if (x.reply.id == AMQP_BASIC_GET_OK_METHOD) { /* nobody publishes there; drop what someone did */
        amqp_message_t msg;
        x = amqp_read_message(r->st, RMQ_ADMIN_CHANNEL, &msg, 0);
        if (x.reply_type != AMQP_RESPONSE_NORMAL)
            return rmq_rpc_fail(r, RMQ_ADMIN_CHANNEL, what);
        amqp_destroy_message(&msg);
    }
    rmq_guard_step(r);
    r->alive_ms = clock_mono_ms();
    return HG_OK;
}

/* ------------------------------------------------------------------------
 * The registry
 * ------------------------------------------------------------------------ */

/* One unacknowledged get from queue on channel 2 (what names the step in an
 * error): *m the message (NULL: the queue was empty), its delivery tag in
 * it. A failure leaves the channel or connection gone, and RabbitMQ returns
 * what the channel held. */
static hg_err_t admin_get(rmq_t *r, const char *queue, const char *what, rmq_msg_t **m)
{
    amqp_rpc_reply_t x = amqp_basic_get(r->st, RMQ_ADMIN_CHANNEL, amqp_cstring_bytes(queue), 0);
    amqp_message_t msg;
    uint64_t tag;

    *m = NULL;
    if (x.reply_type != AMQP_RESPONSE_NORMAL)
        return rmq_rpc_fail(r, RMQ_ADMIN_CHANNEL, what);
    if (x.reply.id == AMQP_BASIC_GET_EMPTY_METHOD)
        return HG_OK;
    tag = ((amqp_basic_get_ok_t *)x.reply.decoded)->delivery_tag;
    x = amqp_read_message(r->st, RMQ_ADMIN_CHANNEL, &msg, 0);
    if (x.reply_type != AMQP_RESPONSE_NORMAL)
        return rmq_rpc_fail(r, RMQ_ADMIN_CHANNEL, what);
    rmq_guard_step(r);
    *m = rmq_msg_decode(&msg.properties, &msg.body, tag);
    amqp_destroy_message(&msg);
    amqp_maybe_release_buffers_on_channel(r->st, RMQ_ADMIN_CHANNEL);
    return HG_OK;
}

hg_err_t rmq_browse(rmq_t *r, const char *queue, rmq_msg_t **out)
{
    rmq_msg_t *head = NULL, *tail = NULL, *m;
    char what[RMQ_QUEUE_NAME_MAX + 32];
    hg_err_t e;

    *out = NULL;
    if ((e = rmq_admin(r)) != HG_OK)
        return e;
    snprintf(what, sizeof(what), "browsing queue %s", queue);
    while ((e = admin_get(r, queue, what, &m)) == HG_OK && m != NULL) {
        if (tail != NULL)
            tail->next = m;
        else
            head = m;
        tail = m;
    }
    if (e != HG_OK) { /* the channel or connection is gone: RabbitMQ returns them */
        rmq_msg_list_free(head);
        return e;
    }
    *out = head;
    return HG_OK;
}

/* The message a peek took, back where it was: as an uncounted copy when
 * copy_to names a group's routing key and m was never returned (published,
 * confirmed, then m acknowledged), else returned to its queue. */
static void peek_give_back(rmq_t *r, const rmq_msg_t *m, const char *copy_to)
{
    rmq_out_t copy;
    hg_err_t result = HG_ERR_IO;

    if (copy_to != NULL && m->delivery_count == 0) {
        memset(&copy, 0, sizeof(copy));
        rmq_out_to_group(&copy, m, copy_to);
        (void)rmq_publish(r, &copy, 1, &result);
        if (result == HG_OK) {
            rmq_browse_delete(r, m);
            return;
        }
    }
    rmq_browse_return(r, m);
}

hg_err_t rmq_queue_peek(rmq_t *r, const char *queue, const char *copy_to, int *nonempty)
{
    char what[RMQ_QUEUE_NAME_MAX + 32];
    rmq_msg_t *m;
    hg_err_t e;

    *nonempty = 0;
    if ((e = rmq_admin(r)) != HG_OK)
        return e;
    snprintf(what, sizeof(what), "looking into queue %s", queue);
    if ((e = admin_get(r, queue, what, &m)) != HG_OK || m == NULL)
        return e;
    *nonempty = 1;
    peek_give_back(r, m, copy_to);
    rmq_msg_free(m);
    return HG_OK;
}

void rmq_browse_return(rmq_t *r, const rmq_msg_t *m)
{
    if (m->tag != 0 && r->st != NULL && r->admin_open)
        (void)rmq_settle(r, RMQ_ADMIN_CHANNEL, m->tag, 0);
}

void rmq_browse_delete(rmq_t *r, const rmq_msg_t *m)
{
    if (m->tag != 0 && r->st != NULL && r->admin_open)
        (void)rmq_settle(r, RMQ_ADMIN_CHANNEL, m->tag, 1);
}

static int by_group(const void *a, const void *b)
{
    const rmq_msg_t *x = *(rmq_msg_t *const *)a, *y = *(rmq_msg_t *const *)b;
    return strcmp(x->group, y->group);
}

hg_err_t rmq_registry(rmq_t *r, rmq_msg_t **out)
{
    rmq_msg_t *all = NULL, **v, *head = NULL;
    size_t n = 0, k = 0;
    hg_err_t e;

    *out = NULL;
    if ((e = rmq_topology(r)) != HG_OK || (e = rmq_browse(r, RMQ_Q_GROUPS, &all)) != HG_OK)
        return e;
    for (rmq_msg_t *m = all; m != NULL; m = m->next)
        n++;
    v = xcalloc(n + 1, sizeof(*v));
    for (rmq_msg_t *m = all; m != NULL; m = m->next)
        v[k++] = m;
    /* keep the first record of each group name (stable: by queue order) */
    for (size_t i = 0; i < n; i++) {
        if (v[i] == NULL)
            continue;
        if (v[i]->group == NULL) {
            rmq_browse_return(r, v[i]);
            rmq_msg_free(v[i]);
            v[i] = NULL;
            continue;
        }
        for (size_t j = i + 1; j < n; j++)
            if (v[j] != NULL && v[j]->group != NULL && strcmp(v[i]->group, v[j]->group) == 0) {
                /* a second record of a name (two clients created it at
                 * once): the older one is the group, the newer one is
                 * deleted, so the registry stays one per group */
                if (v[j]->created_ms < v[i]->created_ms) {
                    rmq_msg_t *older = v[j];
                    v[j] = v[i];
                    v[i] = older;
                }
                rmq_browse_delete(r, v[j]);
                rmq_msg_free(v[j]);
                v[j] = NULL;
            }
    }
    k = 0;
    for (size_t i = 0; i < n; i++)
        if (v[i] != NULL) {
            rmq_browse_return(r, v[i]);
            v[k++] = v[i];
        }
    qsort(v, k, sizeof(*v), by_group);
    for (size_t i = k; i-- > 0;) {
        v[i]->next = head;
        head = v[i];
    }
    free(v);
    *out = head;
    return HG_OK;
}

hg_err_t rmq_group_find(rmq_t *r, const char *group, rmq_msg_t **out)
{
    rmq_msg_t *all = NULL;
    hg_err_t e = rmq_registry(r, &all);

    *out = NULL;
    while (all != NULL) {
        rmq_msg_t *next = all->next;
        if (*out == NULL && strcmp(all->group, group) == 0) {
            all->next = NULL;
            *out = all;
        } else {
            rmq_msg_free(all);
        }
        all = next;
    }
    return e;
}

hg_err_t rmq_group_ensure(rmq_t *r, const char *group, const char *topic, long max_reconsume, int must_be_new,
                          long *max_out)
{
    char gq[RMQ_QUEUE_NAME_MAX], dq[RMQ_QUEUE_NAME_MAX], rk[RMQ_QUEUE_NAME_MAX];
    rmq_msg_t *rec = NULL;
    hg_err_t e;

    if ((e = rmq_name_arg(r, "group", group)) != HG_OK || (e = rmq_name_arg(r, "topic", topic)) != HG_OK)
        return e;
    if (!must_be_new && strcmp(r->ensured_group, group) == 0 && strcmp(r->ensured_topic, topic) == 0) {
        if (max_out != NULL)
            *max_out = r->ensured_max;
        return HG_OK;
    }
    if ((e = rmq_topology(r)) != HG_OK || (e = rmq_group_find(r, group, &rec)) != HG_OK)
        return e;
    if (rec != NULL && (must_be_new || strcmp(rec->topic, topic) != 0)) {
        if (must_be_new)
            client_fail(r->client, HG_ERR_SERVER, "ERR group %s already exists (bound to topic %s)", group, rec->topic);
        else
            client_fail(r->client, HG_ERR_SERVER, "ERR group %s is bound to topic %s, not %s", group, rec->topic,
                        topic);
        rmq_msg_free(rec);
        return HG_ERR_SERVER;
    }
    rmq_group_queue(gq, sizeof(gq), group);
    rmq_dlq_queue(dq, sizeof(dq), group);
    if ((e = declare_quorum(r, gq, NULL, 0, 1)) != HG_OK || (e = declare_quorum(r, dq, NULL, 0, 1)) != HG_OK)
        goto out;
    /* not rec != NULL: workers reconnecting together browse the registry
     * at once, and one that finds the records held by another sees none;
     * a GROUP CREATE (must_be_new: the group was deleted) always binds */
    r->binds_in_place = !must_be_new && strcmp(r->bound_group, group) == 0 && strcmp(r->bound_topic, topic) == 0;
    snprintf(rk, sizeof(rk), "t.%s", topic);
    if ((e = bind(r, gq, RMQ_EX_DUE, rk, amqp_empty_table)) != HG_OK)
        goto out;
    snprintf(rk, sizeof(rk), "g.%s", group);
    if ((e = bind(r, gq, RMQ_EX_DUE, rk, amqp_empty_table)) != HG_OK)
        goto out;
    if (rec == NULL) {
        char id[HG_ID_MAX];
        rmq_out_t o;
        hg_err_t res;
        rmq_new_id(id);
        memset(&o, 0, sizeof(o));
        o.exchange = "";
        o.routing_key = RMQ_Q_GROUPS;
        o.id = id;
        o.topic = topic;
        o.group = group;
        o.created_ms = rmq_wall_ms();
        o.max_reconsume = max_reconsume >= 0 ? max_reconsume : RMQ_MAX_RECONSUME;
        o.due_ms = o.created_ms;
        if ((e = rmq_publish(r, &o, 1, &res)) != HG_OK)
            goto out;
        r->ensured_max = o.max_reconsume;
    } else {
        r->ensured_max = rec->max_reconsume >= 0 ? rec->max_reconsume : RMQ_MAX_RECONSUME;
    }
    snprintf(r->ensured_group, sizeof(r->ensured_group), "%s", group);
    snprintf(r->ensured_topic, sizeof(r->ensured_topic), "%s", topic);
    snprintf(r->bound_group, sizeof(r->bound_group), "%s", group);
    snprintf(r->bound_topic, sizeof(r->bound_topic), "%s", topic);
    if (max_out != NULL)
        *max_out = r->ensured_max;
out:
    rmq_msg_free(rec);
    return e;
}

hg_err_t rmq_group_delete(rmq_t *r, const char *group, int *deleted)
{
    char q[RMQ_QUEUE_NAME_MAX];
    rmq_msg_t *all = NULL;
    int dropped = 0;
    hg_err_t e;

    *deleted = 0;
    if ((e = rmq_name_arg(r, "group", group)) != HG_OK || (e = rmq_topology(r)) != HG_OK ||
        (e = rmq_browse(r, RMQ_Q_GROUPS, &all)) != HG_OK)
        return e;
    for (rmq_msg_t *m = all; m != NULL; m = m->next)
        if (m->group != NULL && strcmp(m->group, group) == 0) {
            rmq_browse_delete(r, m);
            dropped++;
        } else {
            rmq_browse_return(r, m);
        }
    rmq_msg_list_free(all);
    for (int i = 0; i < 2; i++) {
        char what[RMQ_QUEUE_NAME_MAX + 32];
        if (i == 0)
            rmq_group_queue(q, sizeof(q), group);
        else
            rmq_dlq_queue(q, sizeof(q), group);
        snprintf(what, sizeof(what), "deleting queue %s", q);
        if (r->st == NULL) /* a settle above lost the connection (its error is set) */
            return hg_client_errcode(r->client);
        amqp_queue_delete(r->st, RMQ_ADMIN_CHANNEL, amqp_cstring_bytes(q), 0, 0);
        if ((e = rmq_rpc_check(r, RMQ_ADMIN_CHANNEL, what)) != HG_OK)
            return e;
    }
    if (strcmp(r->ensured_group, group) == 0)
        r->ensured_group[0] = '\0';
    if (strcmp(r->bound_group, group) == 0) /* its queues are gone, and their bindings with them */
        r->bound_group[0] = '\0';
    *deleted = dropped > 0;
    return HG_OK;
}
