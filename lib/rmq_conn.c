/*
 * lib/rmq_conn.c — one AMQP 0-9-1 connection of the RabbitMQ transport.
 *
 * Connecting: each host of the URI in turn (amqp://u:p@h1:p1,h2:p2/vhost),
 * starting after the one whose connection was dropped last (a node that
 * takes connections but cannot serve them, the minority side of a
 * partition, is not tried first again), with connect_timeout_ms each
 * (the TCP connect made here, so the stop fd cuts it: socket_open); a
 * failed round is retried with the client's reconnect backoff, as the RESP
 * transport does. After login: channel 1 ("work", confirm mode) and channel 2
 * ("admin"). rabbitmq-c's RPC timeout is the client's read timeout, so no call
 * hangs on a node that stopped answering; heartbeats (RMQ_HEARTBEAT_S) find a
 * dead peer while we only wait.
 *
 * The frame pump is the one place frames are read outside RPCs: deliveries
 * of channel 1 are copied into the ready list, publisher confirms
 * (basic.ack / basic.nack) settle the batch in flight, a message no queue
 * took (basic.return of a mandatory publish) marks its publish, a channel or
 * connection close is answered and turned into an error. Frames that arrive
 * during an RPC on channel 2 are queued by rabbitmq-c and read here later.
 *
 * A closed channel 1 or any connection error drops the whole connection: the
 * deliveries held on it go back to their queue (RabbitMQ requeues unacked
 * messages), which is the lease of this transport.
 *
 * A refused publish (basic.nack) replaces the connection too, at the next
 * rmq_ensure: RabbitMQ 3.10's quorum-queue client inside a channel asks for
 * a queue's leader once, when the channel first publishes to it, and takes
 * the leader named in the queue's record. When that node was just killed
 * (the record is updated only after the election) every later publish of
 * that channel to that queue is refused, for as long as the node is down:
 * the client keeps asking the dead node and never looks again. A new
 * connection has new channels, which look the leader up again. (We have no
 * reject-publish limit of our own, so a nack means this, or an operator's
 * max-length policy; the send paths resend a few times before giving up.)
 * Not after a refused NACK: rmq_cmd_nack keeps its delivery held and this
 * connection, which holds the consumer's other deliveries too.
 *
 * Errors are set on the client (client_fail) with what was being done and
 * RabbitMQ's reason; PRECONDITION_FAILED of a declaration is rewritten to
 * name the argument and both values. One thread per connection.
 */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include "lib/rmq.h"
#include "lib/backoff.h"
#include "lib/client.h"
#include "lib/uri.h"
#include "lib/wire.h"

#include "base/alloc.h"
#include "base/clock.h"

#include <amqp_tcp_socket.h>
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <inttypes.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

uint64_t rmq_wall_ms(void)
{
    return clock_wall_ms();
}

void rmq_new_id(char id[HG_ID_MAX])
{
    uint64_t v = 0;
    if (getrandom(&v, sizeof(v), 0) != (ssize_t)sizeof(v))
        v = ((uint64_t)rand() << 32) ^ (uint64_t)rand() ^ rmq_wall_ms();
    snprintf(id, HG_ID_MAX, "%016" PRIx64, v);
}

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
static hg_err_t fail_close(rmq_t *r, const char *what, unsigned code, const char *text)
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
        e = fail_close(r, what, m->reply_code, text);
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

/* ------------------------------------------------------------------------
 * Connecting
 * ------------------------------------------------------------------------ */

void rmq_disconnect(rmq_t *r)
{
    if (r->watchdog != NULL)
        (void)rmq_watchdog_disarm(r->watchdog); /* its socket goes; a new one is armed when connected */
    if (r->st != NULL) {
        /* No polite close: the peer may be gone, and a close handshake would
         * wait for it. Unacked deliveries go back to their queues. */
        amqp_destroy_connection(r->st);
        r->st = NULL;
    }
    if (r->up) { /* the next connect starts at the following host (rmq.h) */
        r->up = 0;
        r->next_host = (r->next_host + 1) % r->nhosts;
    }
    rmq_msg_list_free(r->ready);
    rmq_msg_list_free(r->held);
    r->ready = r->ready_tail = r->held = NULL;
    r->consuming[0] = '\0';
    r->ensured_group[0] = '\0';
    r->topology_ok = 0;
    r->admin_open = 0;
    r->batch_n = 0;
    r->refused = 0;
}

void rmq_close_politely(rmq_t *r)
{
    struct timeval wait = { RMQ_CLOSE_WAIT_MS / 1000, (RMQ_CLOSE_WAIT_MS % 1000) * 1000 };

    if (r->st != NULL) {
        rmq_guard_enter(r);
        rmq_guard_within(r, RMQ_CLOSE_WAIT_MS); /* its write too; a stop cuts it at once */
        amqp_set_rpc_timeout(r->st, &wait);
        (void)amqp_connection_close(r->st, AMQP_REPLY_SUCCESS); /* a silent node: RMQ_CLOSE_WAIT_MS, then dropped */
        rmq_guard_leave(r);
    }
    rmq_disconnect(r);
}

int rmq_refused_pause(rmq_t *r, int round)
{
    uint32_t ms = RMQ_REFUSED_PAUSE_MS << (round < 5 ? round : 5);
    if (client_pause(r->client, ms) < 0) {
        client_fail(r->client, HG_ERR_STOPPED, "stopped while waiting to resend to RabbitMQ at %s", r->address);
        return -1;
    }
    return 0;
}

uint64_t rmq_refused_pauses_ms(int n)
{
    uint64_t total = 0;
    for (int round = 0; round < n; round++)
        total += (uint64_t)RMQ_REFUSED_PAUSE_MS << (round < 5 ? round : 5);
    return total;
}

static struct timeval tv_ms(uint32_t ms)
{
    struct timeval tv = { (time_t)(ms / 1000), (suseconds_t)(ms % 1000) * 1000 };
    return tv;
}

/* 1 when the client's stop fd is readable now (a stop was asked). */
static int stop_readable(const rmq_t *r)
{
    struct pollfd p = { client_stop_fd(r->client), POLLIN, 0 };
    return p.fd >= 0 && poll(&p, 1, 0) > 0 && (p.revents & POLLIN);
}

/* The TCP connect librabbitmq would make (every address of the host within
 * the deadline, non-blocking, TCP_NODELAY, keepalives), made here with
 * wire_connect so the client's stop fd cuts it. The connected socket in
 * *fd and HG_OK, or the error set: HG_ERR_STOPPED, HG_ERR_CONNECT. */
static hg_err_t tcp_dial(rmq_t *r, const rmq_host_t *h, uint64_t deadline, int *fd)
{
    struct addrinfo hints, *res = NULL;
    char port[8];
    int why = 0, rc, one = 1;

    *fd = -1;
    memset(&hints, 0, sizeof(hints));
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_protocol = IPPROTO_TCP;
    snprintf(port, sizeof(port), "%d", h->port);
    if ((rc = getaddrinfo(h->host, port, &hints, &res)) != 0)
        return client_fail(r->client, HG_ERR_CONNECT, "cannot connect to RabbitMQ at %s: cannot resolve host '%s': %s",
                           r->address, h->host, rc == EAI_SYSTEM ? strerror(errno) : gai_strerror(rc));
    for (struct addrinfo *ai = res; ai != NULL && *fd < 0 && why != ECANCELED && why != ETIMEDOUT; ai = ai->ai_next) {
        uint64_t now = wire_now_ms();
        *fd = now < deadline ? wire_connect(ai->ai_addr, ai->ai_addrlen, (uint32_t)(deadline - now),
                                            client_stop_fd(r->client), &why)
                             : (why = ETIMEDOUT, -1);
    }
    freeaddrinfo(res);
    if (*fd < 0 && why == ECANCELED)
        return client_fail(r->client, HG_ERR_STOPPED, "stopped while connecting to RabbitMQ at %s", r->address);
    if (*fd < 0)
        return client_fail(r->client, HG_ERR_CONNECT, "cannot connect to RabbitMQ at %s: %s", r->address,
                           why == ETIMEDOUT ? "connection timed out" : strerror(why));
    (void)setsockopt(*fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof(one));
    return HG_OK;
}

/* The socket's connect, within one connect timeout from now. amqp://: the
 * socket tcp_dial made is handed to sock (librabbitmq closes it with the
 * connection). amqps://: librabbitmq connects and shakes hands in one call
 * that takes no socket of ours, and only its handshake can be guarded
 * (rmq_tls.c). librabbitmq 0.11 (Debian 12's) has no way to hand it one:
 * its SSL socket's open makes the TCP connect itself (the same inner
 * connect as amqp_socket_open_noblock's TCP socket) and only then creates
 * the SSL object on that descriptor; amqp_tcp_socket_set_sockfd and
 * amqp_set_sockfd set the descriptor of a plain TCP socket only (the
 * former aborts the process when given an SSL socket); the socket class
 * table that would let us bring our own socket (amqp_set_socket, struct
 * amqp_socket_class_t) is neither exported nor in the installed headers;
 * and amqp_ssl_socket_get_context gives the SSL_CTX, from which no
 * descriptor of ours reaches the SSL object librabbitmq makes. So a
 * stoppable tcp_dial first proves the host answers, and is closed before
 * librabbitmq connects again within what is left of the deadline. A host
 * that drops SYNs (a blackholed address, a full accept queue) then costs a
 * stop nothing; only a host that stops answering between the two connects
 * can still hold one librabbitmq connect to the deadline. The extra connection closes before a byte is sent: RabbitMQ's
 * listener sees a client that left before its handshake. HG_OK, or the
 * error set: HG_ERR_STOPPED, HG_ERR_CONNECT, HG_ERR_SYSTEM. */
static hg_err_t socket_open(rmq_t *r, const rmq_host_t *h, amqp_socket_t *sock)
{
    const hg_client_opts_t *o = client_opts(r->client);
    uint64_t deadline = wire_now_ms() + o->connect_timeout_ms, now;
    struct timeval left;
    hg_err_t e;
    int fd, rc;

    if ((e = tcp_dial(r, h, deadline, &fd)) != HG_OK)
        return e;
    if (!r->tls) {
        amqp_tcp_socket_set_sockfd(sock, fd);
        return HG_OK;
    }
    close(fd);
    now = wire_now_ms();
    left = tv_ms(now < deadline ? (uint32_t)(deadline - now) : 1);
    rc = amqp_socket_open_noblock(sock, h->host, h->port, &left);
    if (rc != AMQP_STATUS_OK && rmq_guard_cut(r) == RMQ_CUT_STOP) { /* in the TLS handshake (rmq_tls.c) */
        (void)rmq_watchdog_disarm(r->watchdog);
        return client_fail(r->client, HG_ERR_STOPPED, "stopped during the TLS handshake with RabbitMQ at %s",
                           r->address);
    }
    (void)rmq_watchdog_disarm(r->watchdog);
    if (rc == AMQP_STATUS_OK)
        return HG_OK;
    if (rc != AMQP_STATUS_SOCKET_ERROR && rc != AMQP_STATUS_TIMEOUT && rc != AMQP_STATUS_HOSTNAME_RESOLUTION_FAILED) {
        char why[300];
        rmq_tls_failure(r, rc, why, sizeof(why));
        if (r->tls_why[0] != '\0') { /* reconnecting cannot make it trusted */
            r->connect_fatal = 1;
            return client_fail(r->client, HG_ERR_CONNECT, "cannot connect to RabbitMQ at %s: not trusted: %s",
                               r->address, why);
        }
        return client_fail(r->client, HG_ERR_CONNECT, "cannot connect to RabbitMQ at %s: TLS handshake failed: %s",
                           r->address, why);
    }
    return client_fail(r->client, HG_ERR_CONNECT, "cannot connect to RabbitMQ at %s: %s", r->address,
                       amqp_error_string2(rc));
}

/* One attempt on one host. */
static hg_err_t connect_host(rmq_t *r, const rmq_host_t *h)
{
    const hg_client_opts_t *o = client_opts(r->client);
    struct timeval tv = tv_ms(o->connect_timeout_ms), rpc = tv_ms(o->read_timeout_ms);
    amqp_connection_state_t st = amqp_new_connection();
    amqp_socket_t *sock;
    amqp_rpc_reply_t x;
    hg_err_t e;

    uri_address(r->address, sizeof(r->address), h->host, h->port);
    if (r->tls) {
        sock = rmq_tls_socket(r, st, h->host);
        if (sock == NULL) { /* the client error says why: a bad file, no retry helps */
            amqp_destroy_connection(st);
            r->connect_fatal = 1;
            return hg_client_errcode(r->client);
        }
    } else {
        sock = amqp_tcp_socket_new(st);
        if (sock == NULL) {
            amqp_destroy_connection(st);
            return client_fail(r->client, HG_ERR_SYSTEM, "cannot create a socket for %s", r->address);
        }
    }
    if ((e = socket_open(r, h, sock)) != HG_OK) {
        amqp_destroy_connection(st);
        return e;
    }
    amqp_set_handshake_timeout(st, &tv);
    if (o->read_timeout_ms > 0)
        amqp_set_rpc_timeout(st, &rpc);
    /* the login's writes and waits within a connect timeout; a stop cuts it */
    rmq_guard_socket(r, amqp_get_sockfd(st), o->connect_timeout_ms);
    x = amqp_login(st, r->vhost, 0, AMQP_DEFAULT_FRAME_SIZE, RMQ_HEARTBEAT_S, AMQP_SASL_METHOD_PLAIN, r->user,
                   r->password);
    if (x.reply_type != AMQP_RESPONSE_NORMAL) {
        hg_err_t code = HG_ERR_CONNECT;
        char text[200] = "";
        if (rmq_guard_cut(r) != RMQ_CUT_NONE) { /* before the cut socket passes for a refused login */
            code = rmq_guard_failed(r, "logging in");
            (void)rmq_watchdog_disarm(r->watchdog);
            amqp_destroy_connection(st);
            if (code == HG_ERR_STOPPED)
                return code;
            return client_fail(r->client, HG_ERR_CONNECT,
                               "cannot log in to RabbitMQ at %s: no answer within %" PRIu32 "ms", r->address,
                               o->connect_timeout_ms);
        }
        if (x.reply_type == AMQP_RESPONSE_SERVER_EXCEPTION && x.reply.id == AMQP_CONNECTION_CLOSE_METHOD) {
            amqp_connection_close_t *m = x.reply.decoded;
            snprintf(text, sizeof(text), "%u %.*s", m->reply_code, (int)m->reply_text.len,
                     (const char *)m->reply_text.bytes);
            if (m->reply_code == 403 || m->reply_code == 530)
                code = HG_ERR_AUTH;
        } else if (x.reply_type == AMQP_RESPONSE_LIBRARY_EXCEPTION && r->tls &&
                   x.library_error == AMQP_STATUS_SSL_ERROR) {
            /* TLS 1.3: a node that refuses our certificate (or its absence)
             * says so after the handshake, when the login reads */
            char why[200];
            (void)rmq_watchdog_disarm(r->watchdog);
            amqp_destroy_connection(st);
            rmq_tls_failure(r, x.library_error, why, sizeof(why));
            r->connect_fatal = strstr(why, "alert") != NULL; /* the node's deliberate refusal, not a lost link */
            return client_fail(r->client, HG_ERR_CONNECT,
                               "cannot connect to RabbitMQ at %s: TLS refused by the node: %s", r->address, why);
        } else if (x.reply_type == AMQP_RESPONSE_LIBRARY_EXCEPTION) {
            snprintf(text, sizeof(text), "%s", amqp_error_string2(x.library_error));
            /* RabbitMQ closes the socket on bad credentials before a reason */
            if (x.library_error == AMQP_STATUS_CONNECTION_CLOSED || x.library_error == AMQP_STATUS_SOCKET_ERROR)
                code = HG_ERR_AUTH;
        }
        (void)rmq_watchdog_disarm(r->watchdog);
        amqp_destroy_connection(st);
        if (code == HG_ERR_AUTH)
            return client_fail(r->client, HG_ERR_AUTH, "login as '%s' to vhost '%s' at %s refused: %s", r->user,
                               r->vhost, r->address, text);
        return client_fail(r->client, code, "cannot log in to RabbitMQ at %s: %s", r->address, text);
    }
    r->st = st;
    rmq_guard_step(r);
    amqp_channel_open(st, RMQ_WORK_CHANNEL);
    if (rmq_rpc_check(r, RMQ_WORK_CHANNEL, "channel.open") == HG_OK) {
        amqp_confirm_select(st, RMQ_WORK_CHANNEL);
        if (rmq_rpc_check(r, RMQ_WORK_CHANNEL, "confirm.select") == HG_OK) {
            amqp_channel_open(st, RMQ_ADMIN_CHANNEL);
            if (rmq_rpc_check(r, RMQ_ADMIN_CHANNEL, "channel.open") == HG_OK)
                r->admin_open = 1;
        }
    }
    if (!r->admin_open) {
        char msg[HG_ERRMSG_MAX];
        hg_err_t code = hg_client_errcode(r->client) == HG_ERR_STOPPED ? HG_ERR_STOPPED : HG_ERR_CONNECT;
        snprintf(msg, sizeof(msg), "%s", hg_client_errmsg(r->client));
        rmq_disconnect(r);
        return client_fail(r->client, code, "cannot open channels on RabbitMQ at %s: %s", r->address, msg);
    }
    r->next_seq = 1;
    r->batch_n = 0;
    r->alive_ms = clock_mono_ms();
    return HG_OK;
}

uint64_t rmq_attempt_bound_ms(const rmq_t *r)
{
    const hg_client_opts_t *o = client_opts(r->client);

    if (o->read_timeout_ms == 0) /* no rpc timeout is set: rabbitmq-c waits forever */
        return HG_UNBOUNDED;
    /* connect_host's waits: amqp_socket_open_noblock (every address of the
     * host and the TLS handshake within one deadline), amqp_login (one
     * deadline), then three rpcs */
    return (uint64_t)r->nhosts * (2u * (uint64_t)o->connect_timeout_ms + 3u * (uint64_t)o->read_timeout_ms);
}

/* rmq_ensure's rounds. */
static hg_err_t ensure_connected(rmq_t *r)
{
    const hg_client_opts_t *o = client_opts(r->client);
    const hg_backoff_t *b = &o->reconnect_backoff;
    unsigned attempt = 0;
    hg_err_t e = HG_OK;

    if (r->st != NULL && r->refused > 0)
        rmq_disconnect(r); /* a refused publish: new channels ask for the leaders again */
    if (r->st != NULL)
        return HG_OK;
    for (;;) {
        for (int i = 0; i < r->nhosts; i++) {
            int h = (r->next_host + i) % r->nhosts;
            if (stop_readable(r))
                return client_fail(r->client, HG_ERR_STOPPED, "stopped before connecting to RabbitMQ at %s",
                                   r->address);
            e = connect_host(r, &r->hosts[h]);
            if (e == HG_OK) {
                r->next_host = h;
                r->up = 1;
                if (r->client_address != NULL) /* hg_client_address: the node connected */
                    snprintf(r->client_address, r->client_addrlen, "%s", r->address);
                client_note_connect(r->client);
                return HG_OK;
            }
            if (e == HG_ERR_AUTH || e == HG_ERR_STOPPED || r->connect_fatal) {
                r->connect_fatal = 0;
                return e;
            }
        }
        r->next_host = (r->next_host + 1) % r->nhosts;
        if (!o->reconnect || (b->attempts > 0 && attempt >= (unsigned)b->attempts)) {
            if (attempt > 0) {
                char msg[HG_ERRMSG_MAX];
                snprintf(msg, sizeof(msg), "%s (after %u attempts)", hg_client_errmsg(r->client), attempt + 1);
                client_fail(r->client, e, "%s", msg);
            }
            return e;
        }
        if (client_pause(r->client, hg_backoff_delay(b, attempt, NULL, NULL)) < 0)
            return client_fail(r->client, HG_ERR_STOPPED, "stopped while reconnecting to %s", r->address);
        attempt++;
    }
}

hg_err_t rmq_ensure(rmq_t *r)
{
    hg_err_t e;

    rmq_guard_enter(r); /* a new connection's login and channels */
    e = ensure_connected(r);
    rmq_guard_leave(r);
    return e;
}

hg_err_t rmq_admin(rmq_t *r)
{
    hg_err_t e = rmq_ensure(r);
    if (e != HG_OK || r->admin_open)
        return e;
    amqp_channel_open(r->st, RMQ_ADMIN_CHANNEL);
    e = rmq_rpc_check(r, RMQ_ADMIN_CHANNEL, "channel.open");
    if (e == HG_OK)
        r->admin_open = 1;
    return e;
}

/* ------------------------------------------------------------------------
 * Messages: encoding and decoding
 * ------------------------------------------------------------------------ */

void rmq_msg_free(rmq_msg_t *m)
{
    if (m == NULL)
        return;
    free(m->topic);
    free(m->key);
    free(m->payload);
    free(m->plan);
    free(m->dest);
    free(m->reason);
    free(m->group);
    free(m);
}

size_t rmq_msg_list_count(const rmq_msg_t *m)
{
    size_t n = 0;
    for (; m != NULL; m = m->next)
        n++;
    return n;
}

void rmq_msg_list_free(rmq_msg_t *m)
{
    while (m != NULL) {
        rmq_msg_t *next = m->next;
        rmq_msg_free(m);
        m = next;
    }
}

static char *dup_bytes(amqp_bytes_t b, size_t *len)
{
    char *s = xmalloc(b.len + 1);
    if (b.len > 0)
        memcpy(s, b.bytes, b.len);
    s[b.len] = '\0';
    if (len != NULL)
        *len = b.len;
    return s;
}

static int field_int(const amqp_field_value_t *v, long long *out)
{
    switch (v->kind) {
    case AMQP_FIELD_KIND_I8:
        *out = v->value.i8;
        return 0;
    case AMQP_FIELD_KIND_U8:
        *out = v->value.u8;
        return 0;
    case AMQP_FIELD_KIND_I16:
        *out = v->value.i16;
        return 0;
    case AMQP_FIELD_KIND_U16:
        *out = v->value.u16;
        return 0;
    case AMQP_FIELD_KIND_I32:
        *out = v->value.i32;
        return 0;
    case AMQP_FIELD_KIND_U32:
        *out = v->value.u32;
        return 0;
    case AMQP_FIELD_KIND_I64:
        *out = v->value.i64;
        return 0;
    case AMQP_FIELD_KIND_U64:
        *out = (long long)v->value.u64;
        return 0;
    default:
        return -1;
    }
}

rmq_msg_t *rmq_msg_decode(const amqp_basic_properties_t *p, const amqp_bytes_t *body, uint64_t tag)
{
    rmq_msg_t *m = xcalloc(1, sizeof(*m));

    m->tag = tag;
    m->max_reconsume = -1;
    m->payload = dup_bytes(*body, &m->payload_len);
    if ((p->_flags & AMQP_BASIC_MESSAGE_ID_FLAG) && p->message_id.len < HG_ID_MAX) {
        memcpy(m->id, p->message_id.bytes, p->message_id.len);
        m->id[p->message_id.len] = '\0';
    }
    if (p->_flags & AMQP_BASIC_HEADERS_FLAG) {
        for (int i = 0; i < p->headers.num_entries; i++) {
            const amqp_table_entry_t *e = &p->headers.entries[i];
            int is_str = e->value.kind == AMQP_FIELD_KIND_UTF8 || e->value.kind == AMQP_FIELD_KIND_BYTES;
            char name[32];
            long long n = 0;
            snprintf(name, sizeof(name), "%.*s", (int)e->key.len, (const char *)e->key.bytes);
            if (is_str && strcmp(name, RMQ_H_TOPIC) == 0 && m->topic == NULL)
                m->topic = dup_bytes(e->value.value.bytes, NULL);
            else if (is_str && strcmp(name, RMQ_H_KEY) == 0 && m->key == NULL)
                m->key = dup_bytes(e->value.value.bytes, &m->key_len);
            else if (is_str && strcmp(name, RMQ_H_PLAN) == 0 && m->plan == NULL)
                m->plan = dup_bytes(e->value.value.bytes, NULL);
            else if (is_str && strcmp(name, RMQ_H_DEST) == 0 && m->dest == NULL)
                m->dest = dup_bytes(e->value.value.bytes, NULL);
            else if (is_str && strcmp(name, RMQ_H_REASON) == 0 && m->reason == NULL)
                m->reason = dup_bytes(e->value.value.bytes, NULL);
            else if (is_str && strcmp(name, RMQ_H_GROUP) == 0 && m->group == NULL)
                m->group = dup_bytes(e->value.value.bytes, NULL);
            else if (field_int(&e->value, &n) == 0 && n >= 0) {
                if (strcmp(name, RMQ_H_DUE) == 0)
                    m->due_ms = (uint64_t)n;
                else if (strcmp(name, RMQ_H_RECONSUME) == 0)
                    m->reconsume = n > 1000000 ? 1000000 : (unsigned)n;
                else if (strcmp(name, RMQ_H_PARKED) == 0)
                    m->parked_ms = (uint64_t)n;
                else if (strcmp(name, RMQ_H_CREATED) == 0)
                    m->created_ms = (uint64_t)n;
                else if (strcmp(name, RMQ_H_MAXRETRY) == 0)
                    m->max_reconsume = (long)n;
                else if (strcmp(name, RMQ_H_DELIVERY) == 0)
                    m->delivery_count = n > 1000000 ? 1000000 : (unsigned)n;
            }
        }
    }
    if (m->topic == NULL)
        m->topic = xstrdup("");
    return m;
}

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
        e = fail_close(r, f->channel == RMQ_WORK_CHANNEL ? "channel 1" : "channel 2", c->reply_code, text);
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
