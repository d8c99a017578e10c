/*
 * lib/rmq_msg.c — the message commands on RabbitMQ: SEND (and send_many),
 * PULL, ACK, NACK, each answering the broker's reply shape.
 *
 * A message is one AMQP message: the payload as body, the id (16 hex
 * digits, made by the sender, so a resent message keeps its id) as
 * message-id, persistent, and the headers hg-topic, hg-key, hg-due (the
 * final due time, Unix ms), hg-reconsume, and on its way through the levels
 * hg-level (routes it in hg.levels), hg-plan and hg-dest (chained delays).
 *
 *   delay       published to           routing key    then
 *   none        hg.due                 t.<topic>      every group queue bound to it
 *   LEVEL n     hg.levels, hg-level n  t.<topic>      TTL → dead-lettered into hg.due
 *   DELAY d     the plan's first level "hop" (or t.<topic> when one hop)
 *                                                     → hg.hops → the router
 *                                                     publishes the next hop;
 *               a remainder below the smallest level waits first in the
 *               remainder queues (hg.remainder.bit.<top>, same key; rmq.h)
 *   retry       hg.levels, level 3+r   g.<group>      back to that group only
 *   DLQ         default exchange       hg.dlq.<group> with hg-reason, hg-parked
 *
 * Every publish waits for its publisher confirm before the reply: the
 * message is durable (on a quorum of the queue's replicas) before SEND
 * answers an id. PULL consumes the group queue on channel 1 with prefetch
 * COUNT; the messages it hands out are held (unacknowledged) until ACK or
 * NACK — LEASE is not used: the hold ends only with the connection.
 * NACK publishes the retry (or the DLQ record), waits for its confirm, then
 * acknowledges the delivery: a crash in between repeats the message, never
 * loses it. A NACK refused for its arguments (a LEVEL beyond the table, a
 * DELAY above the max-delay) leaves the delivery held, as on the broker; so
 * does one whose retry no queue took (basic.return) or RabbitMQ refused
 * (basic.nack): its error says the delivery is still held, and a NACK (or
 * ACK) of the same id settles it. Such a refusal does not replace the
 * connection (rmq_conn.c replaces it after other refused publishes): that
 * would give back every delivery it holds, each counted as a failure; a
 * caller that gives up on the NACK drops the connection itself.
 *
 * DEDUP (SEND … KEY k DEDUP, hg_send_item_t.dedup) is taken and answered as
 * the broker answers a new message ([id, 0]; duplicate 0), but nothing is
 * deduplicated: RabbitMQ keeps no index by key, so every send is published.
 * A second timeout message of an order (a resend, the relay racing the
 * order service's fast path) is harmless: the cancel is idempotent.
 *
 * rmq_send_bound_ms counts the waits of the send rounds for
 * hg_client_send_bound_ms, next to the loops it counts.
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
#include "base/units.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#define RMQ_SEND_ROUNDS HG_SEND_MAX_RESENDS /* resend rounds after a lost connection or a refusal */

/* ------------------------------------------------------------------------
 * SEND
 * ------------------------------------------------------------------------ */

/* Parse "SEND topic payload [KEY k [DEDUP]] [LEVEL n | DELAY d | AT ms]",
 * the options in any order as the broker takes them; *dedup gets whether
 * DEDUP was said (it needs a non-empty KEY, as on the broker). */
static int parse_send(size_t argc, const char *const *argv, const size_t *lens, hg_delay_t *delay, const char **key,
                      int *dedup, char *why, size_t whylen)
{
    int kinds = 0;

    *key = NULL;
    *dedup = 0;
    *delay = hg_delay_none();
    if (argc < 3) {
        snprintf(why, whylen, "wrong number of arguments for 'SEND' command");
        return -1;
    }
    for (size_t i = 3; i < argc; i += 2) {
        const char *w = argv[i];
        uint64_t v = 0;
        if (strcasecmp(w, "DEDUP") == 0) { /* a flag: the next word is an option again */
            if ((*dedup)++) {
                snprintf(why, whylen, "syntax error: DEDUP given twice");
                return -1;
            }
            i--;
            continue;
        }
        if (i + 1 >= argc) {
            snprintf(why, whylen, "syntax error: %s needs a value", w);
            return -1;
        }
        if (strcasecmp(w, "KEY") == 0) {
            if ((lens != NULL ? lens[i + 1] : strlen(argv[i + 1])) == 0) { /* as the broker refuses it */
                snprintf(why, whylen, "key is empty (omit KEY for a message without one)");
                return -1;
            }
            *key = argv[i + 1];
            continue;
        }
        if (strcasecmp(w, "LEVEL") != 0 && strcasecmp(w, "DELAY") != 0 && strcasecmp(w, "AT") != 0) {
            snprintf(why, whylen, "syntax error: unknown SEND option '%.40s'", w);
            return -1;
        }
        if (++kinds > 1) {
            snprintf(why, whylen, "syntax error: only one of LEVEL, DELAY and AT may be given");
            return -1;
        }
        if (strcasecmp(w, "DELAY") == 0) {
            char e[96];
            if (units_parse_duration(argv[i + 1], lens != NULL ? lens[i + 1] : strlen(argv[i + 1]), UNITS_BARE_MS, &v,
                                     e, sizeof(e)) < 0) {
                snprintf(why, whylen, "bad DELAY: %s", e);
                return -1;
            }
            *delay = hg_delay_ms(v);
        } else {
            char *end = NULL;
            v = strtoull(argv[i + 1], &end, 10);
            if (end == argv[i + 1] || *end != '\0') {
                snprintf(why, whylen, "%s wants a whole number, got '%.40s'", w, argv[i + 1]);
                return -1;
            }
            *delay = strcasecmp(w, "LEVEL") == 0 ? hg_delay_level((int)(v > 1000 ? 1000 : v)) : hg_delay_at(v);
        }
    }
    if (*dedup && (*key == NULL || (*key)[0] == '\0')) {
        snprintf(why, whylen, "DEDUP needs a non-empty KEY (it deduplicates by topic and key)");
        return -1;
    }
    return 0;
}

/* Whether a send round that ended with e is worth another round (with the
 * same ids): a lost connection or a missing confirm, and a refusal — which
 * can come from a channel that lost track of a queue's leader (rmq_conn.c);
 * rmq_ensure replaces the connection first. Not when resend_sends is off. */
static int resend_worth(rmq_t *r, hg_err_t e)
{
    if (!client_opts(r->client)->resend_sends)
        return 0;
    return e == HG_ERR_IO || e == HG_ERR_TIMEOUT || (e == HG_ERR_SERVER && r->refused > 0);
}

/* After a refused round, the pause before the next one (the election that
 * refused it has time to finish); nothing after other failures. 0, or -1
 * when the client was woken. */
static int pause_after_refusal(rmq_t *r, hg_err_t e, int *refusals)
{
    if (e != HG_ERR_SERVER || r->refused == 0)
        return 0;
    return rmq_refused_pause(r, (*refusals)++);
}

/* Build the message of one send; 0, or -1 with why. */
static int build_out(rmq_t *r, rmq_out_t *o, char *id, char *dest, size_t destlen, char *plan, size_t planlen,
                     const char *topic, const char *key, const void *payload, size_t len, hg_delay_t delay, char *why,
                     size_t whylen)
{
    memset(o, 0, sizeof(*o));
    if (rmq_check_name("topic", topic, why, whylen) < 0)
        return -1;
    snprintf(dest, destlen, "t.%s", topic);
    if (rmq_route_delay(&r->levels, delay, dest, rmq_wall_ms(), o, plan, planlen, why, whylen) < 0)
        return -1;
    o->id = id;
    o->topic = topic;
    o->key = key;
    o->payload = payload;
    o->payload_len = len;
    o->max_reconsume = -1;
    return 0;
}

hg_err_t rmq_cmd_send(rmq_t *r, size_t argc, const char *const *argv, const size_t *lens, resp_reply_t **reply)
{
    char why[HG_ERRMSG_MAX], id[HG_ID_MAX], dest[RMQ_QUEUE_NAME_MAX], plan[LVL_MAX_HOPS * 4];
    const char *key = NULL;
    int dedup = 0;
    hg_delay_t delay;
    buf_t b = BUF_INIT;
    rmq_out_t o;
    hg_err_t e = HG_OK, res;

    if (parse_send(argc, argv, lens, &delay, &key, &dedup, why, sizeof(why)) < 0 ||
        build_out(r, &o, id, dest, sizeof(dest), plan, sizeof(plan), argv[1], key, argv[2],
                  lens != NULL ? lens[2] : strlen(argv[2]), delay, why, sizeof(why)) < 0) {
        rmq_w_error(&b, "ERR %s", why);
        return rmq_reply_finish(&b, reply);
    }
    rmq_new_id(id);
    for (int round = 0, refusals = 0; round <= RMQ_SEND_ROUNDS; round++) {
        if ((e = rmq_ensure(r)) != HG_OK || (e = rmq_topology(r)) != HG_OK)
            break;
        /* the due time of a resend stays the first one: build_out fixed it */
        e = rmq_publish(r, &o, 1, &res);
        if (!resend_worth(r, e) || round == RMQ_SEND_ROUNDS || pause_after_refusal(r, e, &refusals) < 0)
            break;
    }
    if (e == HG_ERR_SERVER) {
        rmq_w_error(&b, "ERR %s", hg_client_errmsg(r->client));
        return rmq_reply_finish(&b, reply);
    }
    if (e != HG_OK)
        return e;
    if (dedup) { /* the broker's [id, duplicate]: never a duplicate here (no index by key) */
        rmq_w_array(&b, 2);
        rmq_w_str(&b, id);
        rmq_w_int(&b, 0);
    } else {
        rmq_w_str(&b, id);
    }
    return rmq_reply_finish(&b, reply);
}

void rmq_send_many(rmq_t *r, hg_send_item_t *items, size_t n)
{
    rmq_out_t *out = xcalloc(n, sizeof(*out));
    size_t *which = xcalloc(n, sizeof(*which));
    hg_err_t *res = xcalloc(n, sizeof(*res));
    char(*dest)[RMQ_QUEUE_NAME_MAX] = xcalloc(n, RMQ_QUEUE_NAME_MAX);
    char(*plan)[LVL_MAX_HOPS * 4] = xcalloc(n, LVL_MAX_HOPS * 4);
    size_t m = 0;
    hg_err_t e = HG_OK;

    for (size_t i = 0; i < n; i++) {
        hg_send_item_t *it = &items[i];
        if (it->err != HG_ERR_IO) /* producer.c marked the invalid ones */
            continue;
        if (build_out(r, &out[m], it->id, dest[m], sizeof(dest[m]), plan[m], sizeof(plan[m]), it->topic, it->key,
                      it->payload, it->payload_len, it->delay, it->error, sizeof(it->error)) < 0) {
            it->err = HG_ERR_SERVER;
            continue;
        }
        rmq_new_id(it->id);
        which[m++] = i;
    }
    for (int round = 0, refusals = 0; m > 0 && round <= RMQ_SEND_ROUNDS; round++) {
        size_t keep = 0;
        int again;
        if ((e = rmq_ensure(r)) != HG_OK || (e = rmq_topology(r)) != HG_OK)
            break;
        e = rmq_publish(r, out, m, res);
        again = resend_worth(r, e);
        for (size_t k = 0; k < m; k++) {
            hg_send_item_t *it = &items[which[k]];
            if (res[k] == HG_OK) {
                it->err = HG_OK;
            } else if (again) {
                out[keep] = out[k];
                which[keep++] = which[k];
            } else {
                it->err = res[k];
                snprintf(it->error, sizeof(it->error), "%s", hg_client_errmsg(r->client));
            }
        }
        m = keep;
        if (!again || round == RMQ_SEND_ROUNDS || pause_after_refusal(r, e, &refusals) < 0)
            break;
    }
    for (size_t k = 0; k < m; k++) {
        hg_send_item_t *it = &items[which[k]];
        it->err = e != HG_OK ? e : HG_ERR_IO;
        it->id[0] = '\0';
        snprintf(it->error, sizeof(it->error), "%s", hg_client_errmsg(r->client));
    }
    free(out);
    free(which);
    free(res);
    free(dest);
    free(plan);
}

uint64_t rmq_send_bound_ms(const rmq_t *r)
{
    const hg_client_opts_t *o = client_opts(r->client);
    uint64_t ensure = client_connect_bound_ms(o, rmq_attempt_bound_ms(r));

    if (ensure == HG_UNBOUNDED || o->read_timeout_ms == 0)
        return HG_UNBOUNDED;
    /* a round of rmq_cmd_send / rmq_send_many: rmq_ensure, rmq_topology on a
     * new connection, rmq_publish's writes (a read timeout, restarting with
     * each message: counted once, as the RESP transport counts a pipeline's)
     * and its one deadline for the confirms; a refused round pauses before
     * the next (never after the last) */
    uint64_t round = ensure + (uint64_t)(rmq_topology_waits(&r->levels) + 2u) * o->read_timeout_ms;
    return client_send_bound_ms(o, round, o->resend_sends ? rmq_refused_pauses_ms(RMQ_SEND_ROUNDS) : 0);
}

/* ------------------------------------------------------------------------
 * PULL, ACK, NACK
 * ------------------------------------------------------------------------ */

static long opt_number(size_t argc, const char *const *argv, size_t from, const char *name, long def)
{
    for (size_t i = from; i + 1 < argc; i += 2)
        if (strcasecmp(argv[i], name) == 0)
            return strtol(argv[i + 1], NULL, 10);
    return def;
}

/* The deliveries read ahead (prefetch) and never handed out by a PULL go
 * back to the group's queue as copies — published to hg.due with routing
 * key g.<group>, reconsume unchanged, confirmed, then the originals
 * acknowledged — because a delivery returned unsettled comes back with
 * x-delivery-count and would count as a failure of its consumer
 * (settle_redelivered). What is not confirmed is returned unsettled (and
 * counted), and so is a delivery that already came back counted (its
 * failure stays owed). group: the one consumed. Frees the ready list. */
static void return_unread(rmq_t *r, const char *group)
{
    size_t n = 0, i = 0;
    rmq_out_t *out;
    hg_err_t *res;
    char dest[RMQ_QUEUE_NAME_MAX];
    rmq_msg_t *list = r->ready;

    r->ready = r->ready_tail = NULL;
    if ((n = rmq_msg_list_count(list)) == 0)
        return;
    out = xcalloc(n, sizeof(*out));
    res = xcalloc(n, sizeof(*res));
    snprintf(dest, sizeof(dest), "g.%s", group);
    n = 0; /* from here: the copies */
    for (rmq_msg_t *m = list; m != NULL; m = m->next)
        if (m->delivery_count == 0)
            rmq_out_to_group(&out[n++], m, dest);
    if (n > 0)
        (void)rmq_publish(r, out, n, res);
    i = 0;
    for (rmq_msg_t *m = list; m != NULL && r->st != NULL; m = m->next) {
        if (m->delivery_count == 0 && res[i++] == HG_OK)
            (void)rmq_settle(r, RMQ_WORK_CHANNEL, m->tag, 1);
        else
            (void)rmq_settle(r, RMQ_WORK_CHANNEL, m->tag, 0);
    }
    rmq_msg_list_free(list);
    free(out);
    free(res);
}

/* Stop consuming: basic.cancel, then the deliveries that came before
 * cancel-ok (rabbitmq-c queued them during the RPC) read into the ready
 * list — or the pump would hand them out later as another group's — and
 * every unread one returned uncounted (return_unread). The hop queue's go
 * back as they are (the router counts nothing). */
static hg_err_t stop_consuming(rmq_t *r)
{
    char was[sizeof(r->consuming)];

    amqp_basic_cancel(r->st, RMQ_WORK_CHANNEL, amqp_cstring_bytes(r->ctag));
    if (rmq_rpc_check(r, RMQ_WORK_CHANNEL, "basic.cancel") != HG_OK)
        return hg_client_errcode(r->client);
    while (amqp_frames_enqueued(r->st)) {
        hg_err_t e = rmq_pump(r, wire_now_ms(), 0, 0);
        if (e != HG_OK)
            return e;
    }
    snprintf(was, sizeof(was), "%s", r->consuming);
    r->consuming[0] = '\0';
    if (strcmp(was, RMQ_Q_HOPS) != 0) {
        return_unread(r, was);
        return r->st != NULL ? HG_OK : hg_client_errcode(r->client);
    }
    while (r->ready != NULL) {
        rmq_msg_t *m = r->ready;
        r->ready = m->next;
        if (r->st != NULL)
            (void)rmq_settle(r, RMQ_WORK_CHANNEL, m->tag, 0);
        rmq_msg_free(m);
    }
    r->ready_tail = NULL;
    return HG_OK;
}

void rmq_close_consumer(rmq_t *r)
{
    uint32_t read_timeout = hg_client_read_timeout(r->client);
    struct timeval wait = { RMQ_CLOSE_WAIT_MS / 1000, (RMQ_CLOSE_WAIT_MS % 1000) * 1000 };

    if (r->st == NULL || r->consuming[0] == '\0')
        return;
    /* a close waits for a silent node briefly, never read_timeout (0: for ever) */
    if (read_timeout == 0 || read_timeout > RMQ_CLOSE_WAIT_MS)
        hg_client_set_read_timeout(r->client, RMQ_CLOSE_WAIT_MS);
    amqp_set_rpc_timeout(r->st, &wait);
    (void)stop_consuming(r);
    hg_client_set_read_timeout(r->client, read_timeout);
}

hg_err_t rmq_consume(rmq_t *r, const char *queue, const char *name, int count)
{
    amqp_basic_consume_ok_t *ok;

    if (strcmp(r->consuming, name) == 0)
        return HG_OK;
    if (r->consuming[0] != '\0') {
        hg_err_t e = stop_consuming(r);
        if (e != HG_OK)
            return e;
    }
    amqp_basic_qos(r->st, RMQ_WORK_CHANNEL, 0, (uint16_t)(count > 65535 ? 65535 : count), 0);
    if (rmq_rpc_check(r, RMQ_WORK_CHANNEL, "basic.qos") != HG_OK)
        return hg_client_errcode(r->client);
    ok = amqp_basic_consume(r->st, RMQ_WORK_CHANNEL, amqp_cstring_bytes(queue), amqp_empty_bytes, 0, 0, 0,
                            amqp_empty_table);
    if (ok == NULL)
        return rmq_rpc_fail(r, RMQ_WORK_CHANNEL, "basic.consume");
    rmq_guard_step(r);
    snprintf(r->ctag, sizeof(r->ctag), "%.*s", (int)ok->consumer_tag.len, (const char *)ok->consumer_tag.bytes);
    snprintf(r->consuming, sizeof(r->consuming), "%s", name);
    return HG_OK;
}

void rmq_out_message(rmq_out_t *o, const rmq_msg_t *m)
{
    o->id = m->id;
    o->topic = m->topic;
    o->key = m->key;
    o->payload = m->payload;
    o->payload_len = m->payload_len;
    o->max_reconsume = -1;
}

void rmq_out_to_group(rmq_out_t *o, const rmq_msg_t *m, const char *dest)
{
    memset(o, 0, sizeof(*o));
    rmq_out_message(o, m);
    o->exchange = RMQ_EX_DUE;
    o->routing_key = dest;
    o->due_ms = m->due_ms;
    o->reconsume = m->reconsume;
}

/* The publish of one failure of delivery m in group (RocketMQ's rule, as on
 * the broker): to hg.dlq.<group> when dead or m's reconsume reached the
 * group's max-reconsume (reason kept), else a retry after delay — level
 * 3 + reconsume unless retry_given — with reconsume + 1 and routing key
 * g.<group>. dest and plan hold what o points to. 0, or -1 with why (a
 * given delay the table cannot take). */
static int failure_out(rmq_t *r, const char *group, const rmq_msg_t *m, int dead, int retry_given, hg_delay_t delay,
                       const char *reason, uint64_t now, rmq_out_t *o, char *dest, size_t destlen, char *plan,
                       size_t planlen, char *why, size_t whylen)
{
    memset(o, 0, sizeof(*o)); /* both ways below set only their own fields */
    if (dead || (long)m->reconsume >= r->consuming_max) {
        rmq_dlq_queue(dest, destlen, group);
        o->exchange = "";
        o->routing_key = dest;
        o->due_ms = m->due_ms;
        o->reason = reason;
        o->parked_ms = now;
        o->reconsume = m->reconsume;
    } else {
        int level = 3 + (int)m->reconsume;
        if (!retry_given)
            delay = hg_delay_level(level > r->levels.count ? r->levels.count : level);
        snprintf(dest, destlen, "g.%s", group);
        if (rmq_route_delay(&r->levels, delay, dest, now, o, plan, planlen, why, whylen) < 0)
            return -1;
        o->reconsume = m->reconsume + 1;
    }
    rmq_out_message(o, m);
    return 0;
}

#define RMQ_REDELIVERED_REASON "redelivered: its consumer ended without ACK or NACK"

/* Settle the deliveries of list (taken from the ready list, never handed
 * out) that RabbitMQ redelivered after their consumer's channel or
 * connection ended unsettled (x-delivery-count > 0): each one is a failure,
 * as an expired lease on the broker — a retry with reconsume + 1, or the
 * group's DLQ at its max-reconsume. The copies are published and confirmed
 * first, then the deliveries acknowledged: a crash in between repeats a
 * message, never loses it. A delivery whose copy was not confirmed stays
 * unacknowledged; RabbitMQ gives it back when this connection ends (a
 * refusal replaces it at the next rmq_ensure), counted again. Frees list.
 * May disconnect r (a lost connection): the caller holds no pointer into
 * r's held list across this call. */
static void settle_redelivered(rmq_t *r, const char *group, rmq_msg_t *list)
{
    size_t n = 0, i = 0;
    rmq_out_t *out;
    hg_err_t *res;
    char(*dest)[RMQ_QUEUE_NAME_MAX];
    char(*plan)[LVL_MAX_HOPS * 4];
    char why[HG_ERRMSG_MAX];
    uint64_t now = rmq_wall_ms();

    if ((n = rmq_msg_list_count(list)) == 0)
        return;
    out = xcalloc(n, sizeof(*out));
    res = xcalloc(n, sizeof(*res));
    dest = xcalloc(n, RMQ_QUEUE_NAME_MAX);
    plan = xcalloc(n, LVL_MAX_HOPS * 4);
    for (rmq_msg_t *m = list; m != NULL; m = m->next, i++)
        (void)failure_out(r, group, m, 0, 0, hg_delay_none(), RMQ_REDELIVERED_REASON, now, &out[i], dest[i],
                          sizeof(dest[i]), plan[i], sizeof(plan[i]), why, sizeof(why)); /* a level: cannot fail */
    (void)rmq_publish(r, out, n, res); /* what failed stays unacknowledged (above) */
    i = 0;
    for (rmq_msg_t *m = list; m != NULL; m = m->next, i++)
        if (res[i] == HG_OK && r->st != NULL)
            (void)rmq_settle(r, RMQ_WORK_CHANNEL, m->tag, 1);
    rmq_msg_list_free(list);
    free(out);
    free(res);
    free(dest);
    free(plan);
}

hg_err_t rmq_cmd_pull(rmq_t *r, size_t argc, const char *const *argv, uint32_t extra_wait_ms, int flags,
                      resp_reply_t **reply)
{
    long count = opt_number(argc, argv, 3, "COUNT", 1), block = opt_number(argc, argv, 3, "BLOCK", -1), max = 0;
    uint64_t deadline;
    buf_t b = BUF_INIT;
    rmq_msg_t *got[1000], *redelivered = NULL;
    size_t n = 0;
    hg_err_t e;

    if (argc < 3 || count < 1 || count > 1000) {
        rmq_w_error(&b, "ERR PULL group topic [COUNT 1..1000] [BLOCK ms] [LEASE ms]");
        return rmq_reply_finish(&b, reply);
    }
    if ((e = rmq_ensure(r)) != HG_OK)
        return e;
    e = rmq_group_ensure(r, argv[1], argv[2], -1, 0, &max);
    if (e == HG_OK) {
        char q[RMQ_QUEUE_NAME_MAX];
        rmq_group_queue(q, sizeof(q), argv[1]);
        e = rmq_consume(r, q, argv[1], (int)count);
    }
    if (e == HG_OK) /* NACK's limit: this group's, whatever group is ensured later on this client */
        r->consuming_max = max;
    if (e == HG_ERR_SERVER) {
        const char *msg = hg_client_errmsg(r->client);
        rmq_w_error(&b, "%s%s", strncmp(msg, "ERR ", 4) == 0 ? "" : "ERR ", msg);
        return rmq_reply_finish(&b, reply);
    }
    if (e != HG_OK)
        return e;
    deadline = block < 0 ? wire_now_ms() : block == 0 ? 0 : wire_now_ms() + (uint64_t)block;
    (void)extra_wait_ms;
    for (;;) {
        e = rmq_pump(r, deadline, 1, (flags & CLIENT_INTERRUPTIBLE) != 0);
        if (e == HG_OK) { /* take what is there, up to COUNT, without waiting more */
            while ((long)n < count) {
                rmq_msg_t *m = r->ready;
                if (m == NULL) {
                    if (rmq_pump(r, wire_now_ms(), 1, 0) != HG_OK || r->ready == NULL)
                        break;
                    continue;
                }
                r->ready = m->next;
                if (r->ready == NULL)
                    r->ready_tail = NULL;
                if (m->delivery_count > 0) { /* a failure already: settle_redelivered */
                    m->next = redelivered;
                    redelivered = m;
                    continue;
                }
                m->next = r->held;
                r->held = m;
                got[n++] = m;
            }
        } else if (e != HG_ERR_TIMEOUT) {
            return e;
        }
        if (redelivered == NULL || n > 0)
            break;
        /* only redelivered ones: settle them, then wait on for the rest of BLOCK */
        settle_redelivered(r, argv[1], redelivered);
        redelivered = NULL;
        if (r->st == NULL)
            return hg_client_errcode(r->client);
        if (e != HG_OK || (deadline != 0 && wire_now_ms() >= deadline))
            break;
    }
    /* nothing for a while: is the node on the minority side of a partition? */
    if (n == 0 && redelivered == NULL && (e = rmq_probe_idle(r)) != HG_OK)
        return e;
    rmq_w_array(&b, n);
    for (size_t i = 0; i < n; i++) {
        rmq_msg_t *m = got[i];
        rmq_w_array(&b, 6);
        rmq_w_str(&b, m->id);
        rmq_w_str(&b, m->topic);
        rmq_w_bulk(&b, m->key != NULL ? m->key : "", m->key_len);
        rmq_w_bulk(&b, m->payload, m->payload_len);
        rmq_w_int(&b, m->reconsume);
        rmq_w_int(&b, (long long)m->due_ms);
    }
    /* after the reply is written: settling may lose the connection, which
     * frees the held list got[] points into */
    settle_redelivered(r, argv[1], redelivered);
    return rmq_reply_finish(&b, reply);
}

/* Take the held message id of group out of the held list (NULL if none). */
static rmq_msg_t *take_held(rmq_t *r, const char *group, const char *id)
{
    if (strcmp(r->consuming, group) != 0)
        return NULL;
    for (rmq_msg_t **p = &r->held; *p != NULL; p = &(*p)->next)
        if (strcmp((*p)->id, id) == 0) {
            rmq_msg_t *m = *p;
            *p = m->next;
            m->next = NULL;
            return m;
        }
    return NULL;
}

hg_err_t rmq_cmd_ack(rmq_t *r, size_t argc, const char *const *argv, resp_reply_t **reply)
{
    buf_t b = BUF_INIT;
    long long acked = 0;
    hg_err_t e;

    if (argc < 3) {
        rmq_w_error(&b, "ERR wrong number of arguments for 'ACK' command");
        return rmq_reply_finish(&b, reply);
    }
    for (size_t i = 2; i < argc; i++) {
        rmq_msg_t *m = take_held(r, argv[1], argv[i]);
        if (m == NULL || r->st == NULL) {
            rmq_msg_free(m);
            continue;
        }
        e = rmq_settle(r, RMQ_WORK_CHANNEL, m->tag, 1);
        rmq_msg_free(m);
        if (e != HG_OK) /* cut or lost: the rest go back with the connection */
            return e;
        acked++;
    }
    rmq_w_int(&b, acked);
    return rmq_reply_finish(&b, reply);
}

hg_err_t rmq_cmd_nack(rmq_t *r, size_t argc, const char *const *argv, resp_reply_t **reply)
{
    const char *reason = "";
    char why[HG_ERRMSG_MAX], dest[RMQ_QUEUE_NAME_MAX], plan[LVL_MAX_HOPS * 4];
    hg_delay_t delay = hg_delay_none();
    int dead = 0, retry_given = 0;
    buf_t b = BUF_INIT;
    rmq_msg_t *m;
    rmq_out_t o;
    hg_err_t e, res;
    uint64_t now = rmq_wall_ms();

    if (argc < 3) {
        rmq_w_error(&b, "ERR wrong number of arguments for 'NACK' command");
        return rmq_reply_finish(&b, reply);
    }
    for (size_t i = 3; i < argc; i++) {
        if (strcasecmp(argv[i], "DLQ") == 0) {
            dead = 1;
        } else if (i + 1 < argc && strcasecmp(argv[i], "REASON") == 0) {
            reason = argv[++i];
        } else if (i + 1 < argc && strcasecmp(argv[i], "LEVEL") == 0) {
            char *end = NULL;
            long level = strtol(argv[++i], &end, 10);
            if (end == argv[i] || *end != '\0' || level < 1 || level > r->levels.count) {
                rmq_w_error(&b, "ERR NACK LEVEL must be 1..%d, got '%.40s'", r->levels.count, argv[i]);
                return rmq_reply_finish(&b, reply);
            }
            delay = hg_delay_level((int)level);
            retry_given = 1;
        } else if (i + 1 < argc && strcasecmp(argv[i], "DELAY") == 0) {
            uint64_t v = 0;
            char err[96];
            if (units_parse_duration_str(argv[++i], UNITS_BARE_MS, &v, err, sizeof(err)) < 0) {
                rmq_w_error(&b, "ERR bad DELAY: %s", err);
                return rmq_reply_finish(&b, reply);
            }
            if (v == 0) {
                rmq_w_error(&b, "ERR NACK DELAY must be greater than 0");
                return rmq_reply_finish(&b, reply);
            }
            delay = hg_delay_ms(v);
            retry_given = 1;
        } else {
            rmq_w_error(&b, "ERR syntax error: unknown NACK option '%.40s'", argv[i]);
            return rmq_reply_finish(&b, reply);
        }
    }
    m = take_held(r, argv[1], argv[2]);
    if (m == NULL || r->st == NULL) {
        rmq_msg_free(m);
        rmq_w_int(&b, -1);
        return rmq_reply_finish(&b, reply);
    }
    if (failure_out(r, argv[1], m, dead, retry_given, delay, reason, now, &o, dest, sizeof(dest), plan, sizeof(plan),
                    why, sizeof(why)) < 0) {
        m->next = r->held; /* refused: still held, as on the broker (ACK or NACK it again) */
        r->held = m;
        rmq_w_error(&b, "ERR %s", why);
        return rmq_reply_finish(&b, reply);
    }
    e = rmq_publish(r, &o, 1, &res);
    if (e == HG_ERR_SERVER && r->st != NULL) {
        /* no queue took the retry (the topology is damaged: after the
         * rebinding sweep a NACK again is routed) or RabbitMQ refused it
         * (basic.nack): either way still held on a live connection, never
         * acknowledged with its retry lost, so the same delivery is settled
         * by the next NACK or ACK of it. A refusal does not replace this
         * connection (rmq_ensure would: the reconnect would give back this
         * delivery and every other one held, each counted as a failure); a
         * caller that gives up drops the connection itself. */
        char cause[HG_ERRMSG_MAX];
        snprintf(cause, sizeof(cause), "%s", hg_client_errmsg(r->client));
        m->next = r->held;
        r->held = m;
        r->refused = 0;
        return client_fail(r->client, HG_ERR_SERVER, "NACK %s not done, the delivery still held (NACK it again): %s",
                           m->id, cause);
    }
    if (e == HG_OK && r->st != NULL)
        e = rmq_settle(r, RMQ_WORK_CHANNEL, m->tag, 1);
    rmq_msg_free(m);
    if (e != HG_OK)
        return e;
    rmq_w_int(&b, o.reason != NULL ? 0 : (long long)o.due_ms);
    return rmq_reply_finish(&b, reply);
}
