/*
 * lib/rmq_pump.c — the frame pump of a RabbitMQ connection (rmq_pump), the
 * one place frames are read outside RPCs: deliveries of channel 1 are
 * copied into the ready list, publisher confirms (basic.ack / basic.nack)
 * settle the batch in flight, a message no queue took (basic.return of a
 * mandatory publish) marks its publish, a channel or connection close is
 * answered and turned into an error. Frames that arrive during an RPC on
 * channel 2 are queued by rabbitmq-c and read here later.
 *
 * It waits in poll on the socket, the client's stop fd and (when
 * interruptible) its wake fd, waking at least every half heartbeat
 * interval so rabbitmq-c sends heartbeats. One thread per connection.
 */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include "lib/rmq.h"
#include "lib/client.h"
#include "lib/wire.h"

#include "base/clock.h"

#include <errno.h>
#include <inttypes.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>

/* ------------------------------------------------------------------------
 * The frame pump
 * ------------------------------------------------------------------------ */

static void confirm(rmq_t *r, uint64_t tag, int multiple, signed char result)
{
    for (size_t i = 0; i < r->batch_n; i++) {
        uint64_t seq = r->batch_first + i;
        if (seq != tag && !(multiple && seq < tag))
            continue;
        if (r->batch_state[i] == RMQ_PUB_WAITING)
            r->batch_state[i] = result;
        else if (r->batch_state[i] == RMQ_PUB_RETURNED)
            r->batch_state[i] = RMQ_PUB_RETURNED_ACKED;
    }
}

/* basic.return of a mandatory publish: no queue took it. Its content
 * follows (read and dropped here); its basic.ack comes after it, so the
 * publish is the first one of the batch still waiting with the same message
 * id and routing key. Marked returned, and r->returned_to says where it went
 * (the first of the batch). */
static hg_err_t returned(rmq_t *r, const amqp_frame_t *f)
{
    const amqp_basic_return_t *ret = f->payload.method.decoded;
    char exchange[RMQ_NAME_MAX + 1], key[RMQ_NAME_MAX + 1], id[HG_ID_MAX] = "";
    amqp_message_t msg;
    amqp_rpc_reply_t x;

    /* copied first: reading the content may reuse the frame's memory */
    snprintf(exchange, sizeof(exchange), "%.*s", (int)ret->exchange.len, (const char *)ret->exchange.bytes);
    snprintf(key, sizeof(key), "%.*s", (int)ret->routing_key.len, (const char *)ret->routing_key.bytes);
    x = amqp_read_message(r->st, f->channel, &msg, 0);
    if (x.reply_type != AMQP_RESPONSE_NORMAL)
        return rmq_rpc_fail(r, f->channel, "reading a returned message (basic.return)");
    if (msg.properties._flags & AMQP_BASIC_MESSAGE_ID_FLAG)
        snprintf(id, sizeof(id), "%.*s", (int)msg.properties.message_id.len,
                 (const char *)msg.properties.message_id.bytes);
    amqp_destroy_message(&msg);
    for (size_t i = 0; i < r->batch_n && r->batch_out != NULL; i++) {
        const rmq_out_t *o = &r->batch_out[i];
        if (r->batch_state[i] != RMQ_PUB_WAITING || strcmp(o->id, id) != 0 || strcmp(o->routing_key, key) != 0)
            continue;
        r->batch_state[i] = RMQ_PUB_RETURNED;
        if (r->returned++ == 0) {
            int len = snprintf(r->returned_to, sizeof(r->returned_to), "exchange %s, routing key %s",
                               exchange[0] ? exchange : "(default)", key);
            /* a remainder's return names it, not the level hop after it
             * (the error must fit HG_ERRMSG_MAX) */
            if (o->remainder_ms > 0 && len > 0 && (size_t)len < sizeof(r->returned_to))
                snprintf(r->returned_to + len, sizeof(r->returned_to) - (size_t)len, ", remainder %" PRIu64 " ms",
                         o->remainder_ms);
            else if (o->level > 0 && len > 0 && (size_t)len < sizeof(r->returned_to))
                snprintf(r->returned_to + len, sizeof(r->returned_to) - (size_t)len, ", %s %d", RMQ_H_LEVEL, o->level);
        }
        break;
    }
    return HG_OK;
}

static hg_err_t handle_method(rmq_t *r, const amqp_frame_t *f)
{
    amqp_method_t m = f->payload.method;
    char text[256];

    switch (m.id) {
    case AMQP_BASIC_DELIVER_METHOD: {
        amqp_basic_deliver_t *d = m.decoded;
        uint64_t tag = d->delivery_tag;
        amqp_message_t msg;
        amqp_rpc_reply_t x = amqp_read_message(r->st, f->channel, &msg, 0);
        rmq_msg_t *dm;
        if (x.reply_type != AMQP_RESPONSE_NORMAL)
            return rmq_rpc_fail(r, f->channel, "reading a delivery");
        dm = rmq_msg_decode(&msg.properties, &msg.body, tag);
        amqp_destroy_message(&msg);
        if (r->ready_tail != NULL)
            r->ready_tail->next = dm;
        else
            r->ready = dm;
        r->ready_tail = dm;
        r->alive_ms = clock_mono_ms(); /* the node serves this consumer: rmq_probe_idle waits */
        return HG_OK;
    }
    case AMQP_BASIC_ACK_METHOD: {
        amqp_basic_ack_t *a = m.decoded;
        confirm(r, a->delivery_tag, a->multiple, RMQ_PUB_ACKED);
        return HG_OK;
    }
    case AMQP_BASIC_NACK_METHOD: {
        amqp_basic_nack_t *a = m.decoded;
        confirm(r, a->delivery_tag, a->multiple, RMQ_PUB_NACKED);
        return HG_OK;
    }
    case AMQP_BASIC_RETURN_METHOD:
        return returned(r, f);
    case AMQP_BASIC_CANCEL_METHOD:
        r->consuming[0] = '\0';
        return HG_OK;
    case AMQP_CHANNEL_CLOSE_METHOD: {
        amqp_channel_close_t *c = m.decoded;
        amqp_channel_close_ok_t ok;
        hg_err_t e;
        snprintf(text, sizeof(text), "%.*s", (int)c->reply_text.len, (const char *)c->reply_text.bytes);
        e = rmq_fail_close(r, f->channel == RMQ_WORK_CHANNEL ? "channel 1" : "channel 2", c->reply_code, text);
        amqp_send_method(r->st, f->channel, AMQP_CHANNEL_CLOSE_OK_METHOD, &ok);
        if (f->channel == RMQ_WORK_CHANNEL)
            rmq_disconnect(r);
        else
            r->admin_open = 0;
        return e;
    }
    case AMQP_CONNECTION_CLOSE_METHOD: {
        amqp_connection_close_t *c = m.decoded;
        amqp_connection_close_ok_t ok;
        snprintf(text, sizeof(text), "%.*s", (int)c->reply_text.len, (const char *)c->reply_text.bytes);
        client_fail(r->client, HG_ERR_IO, "RabbitMQ at %s closed the connection: %u %s", r->address, c->reply_code,
                    text);
        amqp_send_method(r->st, 0, AMQP_CONNECTION_CLOSE_OK_METHOD, &ok);
        rmq_disconnect(r);
        return HG_ERR_IO;
    }
    default:
        return HG_OK;
    }
}

hg_err_t rmq_pump(rmq_t *r, uint64_t deadline, int want_delivery, int interruptible)
{
    int wake = interruptible ? client_wake_fd(r->client) : -1, stop = client_stop_fd(r->client);

    for (;;) {
        struct timeval zero = { 0, 0 };
        amqp_frame_t f;
        int rc;

        if (r->st == NULL)
            return client_fail(r->client, HG_ERR_IO, "not connected to RabbitMQ at %s", r->address);
        if (want_delivery && r->ready != NULL)
            return HG_OK;
        /* Read before polling: on amqps:// OpenSSL may already hold the
         * next records (read from the socket with the last ones), which
         * neither poll nor amqp_data_in_buffer sees; a delivery would wait
         * for the next packet or the poll's timeout. */
        rc = amqp_simple_wait_frame_noblock(r->st, &f, &zero);
        if (rc == AMQP_STATUS_TIMEOUT) {
            struct pollfd p[3] = { { amqp_get_sockfd(r->st), POLLIN, 0 } };
            nfds_t np = 1;
            int left = wire_poll_ms(deadline), n, stopped = 0;
            if (wake >= 0)
                p[np++] = (struct pollfd){ wake, POLLIN, 0 };
            if (stop >= 0)
                p[np++] = (struct pollfd){ stop, POLLIN, 0 };
            if (left < 0 || left > RMQ_HEARTBEAT_S * 500)
                left = RMQ_HEARTBEAT_S * 500; /* wake up to send heartbeats */
            rmq_guard_within(r, 0);           /* this poll has its own deadline and the stop fd */
            n = poll(p, np, left);
            rmq_guard_step(r);
            if (n < 0 && errno != EINTR)
                return client_fail(r->client, HG_ERR_IO, "poll: %s", strerror(errno));
            if (n == 0 && deadline != 0 && wire_poll_ms(deadline) == 0)
                return HG_ERR_TIMEOUT;
            for (nfds_t i = 1; n > 0 && i < np; i++)
                stopped |= (p[i].revents & POLLIN) != 0;
            if (stopped)
                return client_fail(r->client, HG_ERR_STOPPED, "stopped while waiting for RabbitMQ at %s", r->address);
            continue;
        }
        if (rc != AMQP_STATUS_OK) {
            hg_err_t e = rmq_guard_failed(r, "waiting for frames");
            if (e == HG_OK)
                e = client_fail(r->client, HG_ERR_IO, "connection to RabbitMQ at %s lost: %s", r->address,
                                amqp_error_string2(rc));
            rmq_disconnect(r);
            return e;
        }
        rmq_guard_step(r);
        if (f.frame_type == AMQP_FRAME_METHOD) {
            hg_err_t e = handle_method(r, &f);
            if (e != HG_OK)
                return e;
        }
        if (r->st != NULL)
            amqp_maybe_release_buffers(r->st);
        if (!want_delivery)
            return HG_OK;
    }
}
