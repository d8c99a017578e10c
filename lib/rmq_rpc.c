/*
 * lib/rmq_rpc.c — the outcome of a call on a RabbitMQ connection: an RPC's
 * reply checked (rmq_rpc_check), a failed one turned into the client's
 * error (rmq_rpc_fail: a channel or connection close answered, a lost
 * connection dropped), and a delivery settled (rmq_settle: basic.ack or
 * basic.nack, which have no reply).
 *
 * Errors are set on the client (client_fail) with what was being done and
 * RabbitMQ's reason; PRECONDITION_FAILED of a declaration is rewritten to
 * name the argument and both values (rmq_fail_close, which the frame pump
 * uses for a close it reads). A closed channel 1 or any connection error
 * drops the whole connection (rmq_conn.c). One thread per connection.
 */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include "lib/rmq.h"
#include "lib/client.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

/* ------------------------------------------------------------------------
 * Errors
 * ------------------------------------------------------------------------ */

/* Copy the text between after `from` and `to` in s into out. 0 / -1. */
static int between(const char *s, const char *from, const char *to, char *out, size_t outlen)
{
    const char *a = strstr(s, from), *b;
    if (a == NULL)
        return -1;
    a += strlen(from);
    b = to != NULL ? strstr(a, to) : a + strlen(a);
    if (b == NULL)
        return -1;
    snprintf(out, outlen, "%.*s", (int)(b - a), a);
    return 0;
}

/* A channel close reason as a message: PRECONDITION_FAILED of an
 * inequivalent argument names the argument and both values. */
hg_err_t rmq_fail_close(rmq_t *r, const char *what, unsigned code, const char *text)
{
    char arg[64], object[160], received[96], current[96];

    r->last_code = code;
    if (code == 406 && between(text, "inequivalent arg '", "'", arg, sizeof(arg)) == 0 &&
        between(text, "' for ", " in vhost", object, sizeof(object)) == 0 &&
        between(text, "received ", " but current is ", received, sizeof(received)) == 0 &&
        between(text, " but current is ", NULL, current, sizeof(current)) == 0)
        return client_fail(r->client, HG_ERR_SERVER,
                           "%s: %s already exists with other arguments: %s is %s there, this client declares %s "
                           "(RabbitMQ: PRECONDITION_FAILED)",
                           what, object, arg, current, received);
    return client_fail(r->client, code == 403 ? HG_ERR_AUTH : HG_ERR_SERVER, "%s: RabbitMQ refused it: %u %s", what,
                       code, text);
}

hg_err_t rmq_rpc_fail(rmq_t *r, int ch, const char *what)
{
    amqp_rpc_reply_t x;
    char text[256];

    if (r->st == NULL)
        return client_fail(r->client, HG_ERR_IO, "%s: not connected to %s", what, r->address);
    x = amqp_get_rpc_reply(r->st);
    if (x.reply_type == AMQP_RESPONSE_SERVER_EXCEPTION && x.reply.id == AMQP_CHANNEL_CLOSE_METHOD) {
        amqp_channel_close_t *m = x.reply.decoded;
        amqp_channel_close_ok_t ok;
        hg_err_t e;
        snprintf(text, sizeof(text), "%.*s", (int)m->reply_text.len, (const char *)m->reply_text.bytes);
        e = rmq_fail_close(r, what, m->reply_code, text);
        amqp_send_method(r->st, (amqp_channel_t)ch, AMQP_CHANNEL_CLOSE_OK_METHOD, &ok);
        if (ch == RMQ_WORK_CHANNEL)
            rmq_disconnect(r);
        else
            r->admin_open = 0;
        return e;
    }
    if (x.reply_type == AMQP_RESPONSE_SERVER_EXCEPTION && x.reply.id == AMQP_CONNECTION_CLOSE_METHOD) {
        amqp_connection_close_t *m = x.reply.decoded;
        amqp_connection_close_ok_t ok;
        hg_err_t e;
        snprintf(text, sizeof(text), "%.*s", (int)m->reply_text.len, (const char *)m->reply_text.bytes);
        e = client_fail(r->client, m->reply_code == 403 ? HG_ERR_AUTH : HG_ERR_IO,
                        "%s: RabbitMQ at %s closed the connection: %u %s", what, r->address, m->reply_code, text);
        amqp_send_method(r->st, 0, AMQP_CONNECTION_CLOSE_OK_METHOD, &ok);
        rmq_disconnect(r);
        return e;
    }
    if (x.reply_type == AMQP_RESPONSE_LIBRARY_EXCEPTION) {
        hg_err_t code = rmq_guard_failed(r, what); /* the watchdog's cut: the step and why */
        if (code == HG_OK && x.library_error == AMQP_STATUS_TIMEOUT)
            code = client_fail(r->client, HG_ERR_TIMEOUT, "%s: no answer from RabbitMQ at %s within %" PRIu32 "ms",
                               what, r->address, client_opts(r->client)->read_timeout_ms);
        else if (code == HG_OK)
            code = client_fail(r->client, HG_ERR_IO, "%s: connection to RabbitMQ at %s lost: %s", what, r->address,
                               amqp_error_string2(x.library_error));
        rmq_disconnect(r);
        return code;
    }
    client_fail(r->client, HG_ERR_PROTOCOL, "%s: unexpected answer from RabbitMQ at %s", what, r->address);
    rmq_disconnect(r);
    return HG_ERR_PROTOCOL;
}

hg_err_t rmq_rpc_check(rmq_t *r, int ch, const char *what)
{
    if (r->st == NULL)
        return client_fail(r->client, HG_ERR_IO, "%s: not connected to %s", what, r->address);
    if (amqp_get_rpc_reply(r->st).reply_type == AMQP_RESPONSE_NORMAL) {
        rmq_guard_step(r);
        return HG_OK;
    }
    return rmq_rpc_fail(r, ch, what);
}

hg_err_t rmq_settle(rmq_t *r, int ch, uint64_t tag, int ack)
{
    const char *what = ack ? "acknowledging a delivery (basic.ack)" : "returning a delivery (basic.nack)";
    hg_err_t e;
    int rc;

    if (r->st == NULL)
        return client_fail(r->client, HG_ERR_IO, "%s: not connected to RabbitMQ at %s", what, r->address);
    rmq_guard_enter(r);
    rc =
        ack ? amqp_basic_ack(r->st, (amqp_channel_t)ch, tag, 0) : amqp_basic_nack(r->st, (amqp_channel_t)ch, tag, 0, 1);
    if (rc == AMQP_STATUS_OK) {
        rmq_guard_step(r);
        rmq_guard_leave(r);
        return HG_OK;
    }
    if ((e = rmq_guard_failed(r, what)) == HG_OK)
        e = client_fail(r->client, HG_ERR_IO, "%s: connection to RabbitMQ at %s lost: %s", what, r->address,
                        amqp_error_string2(rc));
    rmq_disconnect(r);
    rmq_guard_leave(r);
    return e;
}
