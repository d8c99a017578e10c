/*
 * lib/rmq_conn.c — one AMQP 0-9-1 connection of the RabbitMQ transport:
 * connecting, logging in and opening the channels, and dropping it. The
 * frame pump is rmq_pump.c, the calls' outcomes and their errors
 * rmq_rpc.c, the message records rmq_record.c.
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
 * One thread per connection.
 */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include "lib/rmq.h"
#include "lib/backoff.h"
#include "lib/client.h"
#include "lib/uri.h"
#include "lib/wire.h"

#include "base/clock.h"

#include <amqp_tcp_socket.h>
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <inttypes.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

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
