/*
 * lib/rmq.h — the RabbitMQ transport of libhourglass (amqp://), the internal
 * header its files share. docs/rabbitmq.md has the mapping and its diagram.
 *
 *   rmq_transport.c  the transport_ops_t table: URI, create, ensure, the
 *                    command dispatcher (which command runs where; what is
 *                    refused as not supported on amqp://)
 *   rmq_conn.c       one AMQP connection: connect and login (trying each
 *                    host of the URI), the two channels, the drop
 *   rmq_pump.c       the frame pump (deliveries, publisher confirms,
 *                    returns, channel and connection closes)
 *   rmq_rpc.c        a call's outcome: RPC replies checked, RabbitMQ's
 *                    refusals translated into errors; deliveries settled
 *   rmq_record.c     message records decoded from AMQP messages; ids
 *   rmq_publish.c    publishing on channel 1 and waiting for the confirms
 *   rmq_watchdog.c   the thread that cuts the connection's socket when a
 *                    step of a call (a write, an RPC, the login) outlasts
 *                    its timeout or the stop fd is readable; the guard
 *   rmq_topology.c   names, arguments and idempotent, checked declarations of
 *                    the exchanges and queues; the group registry
 *   rmq_msg.c        SEND / send_many, PULL, ACK, NACK: the message mapping
 *   rmq_route.c      where a delay goes first: levels, plan, remainder (pure)
 *   rmq_admin.c      LEVELS, GROUP CREATE/LIST/DEL, DLQ LEN/LIST/REQUEUE/DROP
 *   rmq_router.c     the hop router of chained delays (a consumer helper)
 *   rmq_reply.c      RESP reply trees built from values
 *
 * Channel 1 ("work") is in confirm mode and carries publishes and the
 * group consumption; channel 2 ("admin") carries declarations and basic.get
 * browsing, so a refused declaration (which closes its channel) never costs
 * the deliveries held on channel 1. One thread per connection.
 */
#ifndef HG_LIB_RMQ_H
#define HG_LIB_RMQ_H

#include "include/hourglass/hourglass.h"
#include "levels/table.h"
#include "lib/transport.h"
#include "proto/client.h"

#include "base/buf.h"

#include <amqp.h>
#include <inttypes.h>
#include <stddef.h>
#include <stdint.h>

#define RMQ_DEFAULT_PORT     5672
#define RMQ_DEFAULT_TLS_PORT 5671
#define RMQ_MAX_HOSTS        8
#define RMQ_WORK_CHANNEL     1
#define RMQ_ADMIN_CHANNEL    2
#define RMQ_HEARTBEAT_S      20
#define RMQ_MAX_DELAY_MS     (3ull * 86400 * 1000) /* as the broker's default max-delay */
#define RMQ_MAX_RECONSUME    16                    /* as the broker's default max-reconsume */
#define RMQ_REFUSED_PAUSE_MS 250                   /* first pause before resending refused publishes (doubling) */
#define RMQ_CLOSE_WAIT_MS    2000                  /* a clean close waits at most this per step (rmq_close_consumer) */
/* What became of one publish of a batch (rmq_t.batch_state). A message no
 * queue takes comes back (basic.return) before its basic.ack. */
#define RMQ_PUB_WAITING        0
#define RMQ_PUB_ACKED          1
#define RMQ_PUB_NACKED         (-1)
#define RMQ_PUB_RETURNED       2 /* returned, its confirm still owed */
#define RMQ_PUB_RETURNED_ACKED 3 /* returned, then confirmed: dropped by RabbitMQ, not sent */
/* rmq_probe_idle_ms: the read timeout, at least the first; the second
 * without a read timeout. */
#define RMQ_PROBE_IDLE_MIN_MS     2000
#define RMQ_PROBE_IDLE_DEFAULT_MS 10000
/* x-delivery-limit of the queues whose messages come back unsettled (group
 * queues, DLQs, hg.groups, hg.hops, hg.unrouted): no limit in practice. -1
 * ("none") exists only from RabbitMQ 4.0; this is valid on 3.10 too. */
#define RMQ_DELIVERY_LIMIT 1000000000
#define RMQ_NAME_MAX       255                 /* a group or topic name (AMQP shortstr) */
#define RMQ_NAME_USABLE    (RMQ_NAME_MAX - 10) /* what "hg.group." or "t." leaves of a shortstr */
#define RMQ_QUEUE_NAME_MAX 300

/* Names (docs/rabbitmq.md). */
#define RMQ_EX_LEVELS   "hg.levels"   /* headers: hg-level = n → hg.level.n */
#define RMQ_EX_DUE      "hg.due"      /* direct: t.<topic>, g.<group>, hop */
#define RMQ_EX_UNROUTED "hg.unrouted" /* fanout: hg.due's alternate exchange */
#define RMQ_Q_HOPS      "hg.hops"     /* chained messages between two hops */
#define RMQ_Q_UNROUTED  "hg.unrouted" /* due messages of a topic without groups */
#define RMQ_Q_GROUPS    "hg.groups"   /* the group registry */
#define RMQ_Q_PROBE     "hg.probe"    /* always empty: an idle consumer's quorum check (rmq_probe_idle) */
#define RMQ_RK_HOP      "hop"
/* The remainder of a DELAY below the smallest level (docs/rabbitmq.md):
 * one quorum queue per power of two b below the smallest level,
 * hg.remainder.<b> with x-message-ttl b, entered through the headers
 * exchanges hg.remainder.bit.<b>. A message carries hg-rem-<b> for every b
 * from the top one down to 1: "1" (wait in hg.remainder.<b>: bound so) or
 * "0" (skip it: hg.remainder.bit.<b/2>, or hg.remainder.end after b = 1,
 * is bound to hg.remainder.bit.<b> so). hg.remainder.<b> dead-letters into
 * the next lower bit's exchange; hg.remainder.end sends a message on by its
 * hg-then: "level" to hg.levels, "due" to hg.due. No exchange of the chain
 * has an alternate exchange: a binding deleted by hand leaves a message
 * with no route — returned to its publisher (mandatory), held and retried
 * by a dead-lettering queue (at-least-once) — and never lets it skip a wait
 * (the chain of the hg.rem.* names, whose exchanges passed what no binding
 * took to the next bit, delivered it early: left to clients of before
 * 2026-12-06, never declared now). */
#define RMQ_REM_QUEUE    "hg.remainder.%" PRIu64
#define RMQ_REM_EXCHANGE "hg.remainder.bit.%" PRIu64
#define RMQ_EX_REM_END   "hg.remainder.end"
#define RMQ_H_REM        "hg-rem-%" PRIu64 /* "1": waits in hg.remainder.<b>; "0": skips it */
#define RMQ_H_THEN       "hg-then"         /* after the remainder: "level" (a level hop follows) or "due" */
#define RMQ_REM_MAX_BITS 40

/* Message headers. */
#define RMQ_H_TOPIC     "hg-topic"
#define RMQ_H_KEY       "hg-key"
#define RMQ_H_DUE       "hg-due"
#define RMQ_H_RECONSUME "hg-reconsume"
#define RMQ_H_LEVEL     "hg-level"
#define RMQ_H_PLAN      "hg-plan" /* hops left after this one: "15,5" */
#define RMQ_H_DEST      "hg-dest" /* the final routing key on hg.due */
#define RMQ_H_REASON    "hg-reason"
#define RMQ_H_PARKED    "hg-parked"
#define RMQ_H_GROUP     "hg-group" /* registry records */
#define RMQ_H_CREATED   "hg-created"
#define RMQ_H_MAXRETRY  "hg-max-reconsume"
#define RMQ_H_DELIVERY  "x-delivery-count" /* set by a quorum queue on a redelivery */

/* A message as received (copied out of the connection's frames). */
typedef struct rmq_msg {
    uint64_t tag; /* delivery tag on the channel it came from */
    char id[HG_ID_MAX];
    char *topic;
    char *key; /* NULL when none */
    size_t key_len;
    char *payload;
    size_t payload_len;
    unsigned reconsume;
    uint64_t due_ms;
    char *plan;   /* hg-plan, NULL when none */
    char *dest;   /* hg-dest, NULL when none */
    char *reason; /* hg-reason (DLQ), NULL when none */
    uint64_t parked_ms;
    char *group; /* registry records */
    uint64_t created_ms;
    long max_reconsume; /* -1 when absent */
    /* x-delivery-count: how often the queue took this delivery back unsettled
     * (its consumer's channel or connection ended, or a requeue); 0 on the
     * first delivery, when RabbitMQ omits it */
    unsigned delivery_count;
    struct rmq_msg *next;
} rmq_msg_t;

/* What to publish. */
typedef struct rmq_out {
    const char *exchange;
    const char *routing_key;
    const char *id;
    const char *topic;
    const char *key; /* NULL: none */
    const void *payload;
    size_t payload_len;
    uint64_t due_ms;
    unsigned reconsume;
    int level; /* > 0: the hg-level header (for hg.levels) */
    /* > 0: first wait remainder_ms in the remainder queues (rmq_route_delay),
     * entering at hg.remainder.bit.<remainder_top>; exchange is then where the
     * message goes after them (hg.levels or hg.due) */
    uint64_t remainder_ms, remainder_top;
    const char *plan;   /* NULL: none */
    const char *dest;   /* NULL: none */
    const char *reason; /* NULL: none */
    uint64_t parked_ms;
    const char *group; /* registry records */
    uint64_t created_ms;
    long max_reconsume; /* -1: none */
} rmq_out_t;

typedef struct rmq_watchdog rmq_watchdog_t; /* rmq_watchdog.c */

typedef struct rmq_host {
    char host[256];
    int port;
} rmq_host_t;

typedef struct rmq {
    hg_client_t *client; /* errors go here */
    rmq_host_t hosts[RMQ_MAX_HOSTS];
    int nhosts, next_host;
    /* 1 from a successful connect to its drop: a dropped connection moves
     * next_host on, so the next connect tries the following node first (a
     * node that takes connections but cannot serve them, e.g. the minority
     * side of a partition, is not tried again and again) */
    int up;
    char user[256], password[256], vhost[256];
    char address[300]; /* host:port of the node connected or being tried (messages) */
    /* the client's hg_client_address buffer (handed to the transport's create):
     * every host of the URI until the first connection, then the node of the
     * live or last connection (written on each successful connect) */
    char *client_address;
    size_t client_addrlen;
    /* amqps:// (tls = 1): the URI's ?ca=&cert=&key=&sni= ("" when absent; the
     * client's tls_* options fill what the URI leaves out, at connect) */
    int tls;
    char tls_ca[1024], tls_cert[1024], tls_key[1024], tls_sni[256];
    char tls_why[256];          /* why the peer's certificate was refused, during a connect */
    int connect_fatal;          /* the last connect failed in a way retrying cannot mend */
    amqp_connection_state_t st; /* NULL when disconnected */
    int admin_open;             /* channel 2 usable */
    unsigned last_code;         /* reply code of the last channel close (404, 406 ...) */
    lvl_table_t levels;
    int topology_ok; /* exchanges and level queues checked on this connection */
    /* Bindings outlive connections (durable, with their queues), and a
     * binding is a Mnesia transaction that no node completes while a cut
     * link is not yet seen (the net tick): a reconnect declares the queues
     * (answered) but binds only what no earlier connection of this client
     * bound (rmq_topology.c; docs/rabbitmq.md "Faults"). */
    int topology_bound;                 /* rmq_topology's bindings made on an earlier connection */
    char bound_group[RMQ_NAME_MAX + 1]; /* the group whose two bindings were made, "" none */
    char bound_topic[RMQ_NAME_MAX + 1];
    int binds_in_place; /* the declaration sweep running now skips its bindings */

    /* publisher confirms on channel 1 */
    uint64_t next_seq;    /* seq of the next publish */
    uint64_t batch_first; /* seq of batch_state[0] */
    size_t batch_n;
    signed char *batch_state;   /* RMQ_PUB_*: what became of each publish of the batch */
    const rmq_out_t *batch_out; /* the batch's messages while it waits (basic.return finds its own) */
    size_t batch_cap;
    /* publishes RabbitMQ refused (basic.nack) in the last rmq_publish; while
     * set, rmq_ensure starts a new connection (rmq_publish says why) */
    size_t refused;
    /* publishes of the last rmq_publish that no queue took (basic.return of
     * a mandatory publish: a binding or queue is missing); where the first
     * went, "exchange X, routing key K" */
    size_t returned;
    char returned_to[2 * RMQ_NAME_MAX + 64];
    /* the next rmq_topology binds everything, whatever hg.probe or an
     * earlier connection says, and the next group ensure rebinds its group:
     * set when a publish came back unrouted (the topology is damaged) */
    int rebind;
    rmq_watchdog_t *watchdog; /* bounds every librabbitmq call (the guard); made with r */
    int guard_depth;          /* transport calls entered (rmq_guard_enter) */
    uint32_t guard_ms;        /* the timeout of the step guarded now (for the error) */

    /* consumption on channel 1 */
    char consuming[RMQ_NAME_MAX + 1]; /* the group consumed, "" none */
    long consuming_max;               /* its max-reconsume (NACK's limit) */
    char ctag[64];
    rmq_msg_t *ready, *ready_tail;        /* delivered, not yet handed out */
    rmq_msg_t *held;                      /* handed out by PULL, not settled */
    char ensured_group[RMQ_NAME_MAX + 1]; /* group declared on this connection */
    char ensured_topic[RMQ_NAME_MAX + 1];
    long ensured_max;
    /* clock_mono_ms of the last sign that the node reaches its quorum queues
     * (the connect, a delivery, a probe answered): rmq_probe_idle */
    uint64_t alive_ms;
} rmq_t;

/* --- rmq_tls.c --- */
/* The TLS socket of an amqps:// connection on st, set up for host (the CA,
 * client certificate, name to verify: r's URI parameters, else the client's
 * tls_* options). NULL with the client error set (st still owns whatever
 * was made: the caller destroys st). */
amqp_socket_t *rmq_tls_socket(rmq_t *r, amqp_connection_state_t st, const char *host);
/* Why the TLS handshake of a connect that returned status failed, into
 * buf[len]: the refused certificate's reason when there is one. */
const char *rmq_tls_failure(rmq_t *r, int status, char *buf, size_t len);

/* --- rmq_conn.c --- */
/* Connected (reconnecting with the client's backoff when not); a
 * connection whose last publish was refused is replaced first. */
hg_err_t rmq_ensure(rmq_t *r);
/* Before resend round `round` (0, 1, …) of messages RabbitMQ refused: wait
 * RMQ_REFUSED_PAUSE_MS << round (interruptible by the client's wake fd).
 * Returns 0, or -1 when woken (HG_ERR_STOPPED set on the client). */
int rmq_refused_pause(rmq_t *r, int round);
/* The most the pauses before resend rounds 0 .. n-1 add up to, in ms. */
uint64_t rmq_refused_pauses_ms(int n);
/* The longest one connection attempt of rmq_ensure can take: for each host,
 * the TCP connect with the TLS handshake (one deadline: connect timeout), the
 * login (the handshake timeout: connect timeout) and the three channel
 * replies (channel.open, confirm.select, channel.open: read timeout each).
 * HG_UNBOUNDED with a read timeout of 0. */
uint64_t rmq_attempt_bound_ms(const rmq_t *r);
/* Drop the connection at once (no close handshake: the peer may be gone)
 * and forget its state; unacked deliveries go back to their queues. */
void rmq_disconnect(rmq_t *r);
/* A clean close's end: connection.close, and close-ok awaited at most
 * RMQ_CLOSE_WAIT_MS, so RabbitMQ logs a closed connection, not "client
 * unexpectedly closed TCP connection" (a warning for every CLI call and
 * every daemon stop), then rmq_disconnect. Nothing to do when not
 * connected. */
void rmq_close_politely(rmq_t *r);
/* Reopen channel 2 when a refusal closed it. */
hg_err_t rmq_admin(rmq_t *r);

/* --- rmq_rpc.c --- */
/* A channel close's reason (code, text) as the client error of what: PRECONDITION_FAILED of an
 * inequivalent argument names the argument and both values; 403 is HG_ERR_AUTH. Records the code in
 * r->last_code; returns the error code. */
hg_err_t rmq_fail_close(rmq_t *r, const char *what, unsigned code, const char *text);
/* After a failed rpc on channel ch: the client error names what (e.g.
 * "queue.declare hg.level.3"); a server channel close is answered and the
 * channel marked closed; a connection problem disconnects. Returns the code
 * (HG_ERR_SERVER for a refusal, HG_ERR_IO for a lost connection). */
hg_err_t rmq_rpc_fail(rmq_t *r, int ch, const char *what);
/* Check the last rpc on channel ch; HG_OK or rmq_rpc_fail. */
hg_err_t rmq_rpc_check(rmq_t *r, int ch, const char *what);
/* basic.ack (ack 1) or basic.nack with requeue (ack 0) of delivery tag on
 * channel ch, guarded: HG_OK, or the error set (rmq_guard_failed's, else a
 * lost connection) and the connection dropped. */
hg_err_t rmq_settle(rmq_t *r, int ch, uint64_t tag, int ack);

/* --- rmq_pump.c --- */
/* Wait for frames until deadline (monotonic ms; 0 = poll once) or until
 * a delivery is ready (want_delivery) — interruptible by the client's wake
 * fd when interruptible, by its stop fd (hg_client_set_stop_fd) always.
 * Returns HG_OK, HG_ERR_STOPPED or a connection error. */
hg_err_t rmq_pump(rmq_t *r, uint64_t deadline, int want_delivery, int interruptible);

/* --- rmq_record.c --- */
/* Decode an AMQP message into a rmq_msg_t (malloc'd; free with rmq_msg_free). */
rmq_msg_t *rmq_msg_decode(const amqp_basic_properties_t *p, const amqp_bytes_t *body, uint64_t tag);
void rmq_msg_free(rmq_msg_t *m);
void rmq_msg_list_free(rmq_msg_t *m);
/* The messages on list m. */
size_t rmq_msg_list_count(const rmq_msg_t *m);
/* A fresh message id: 16 hex digits. */
void rmq_new_id(char id[HG_ID_MAX]);
uint64_t rmq_wall_ms(void);

/* --- rmq_publish.c --- */
/* Publish n messages on channel 1 and wait for their confirms; results[i]
 * HG_OK or the error. Returns HG_OK when all were
 * confirmed, else the first error (set on the client). A refusal
 * (basic.nack: HG_ERR_SERVER, r->refused > 0) leaves the connection up for
 * the caller to settle what it holds; the next rmq_ensure replaces it (unless
 * the caller clears r->refused: rmq_cmd_nack, whose delivery stays held). The
 * send paths resend refused messages (rmq_refused_pause). Every message is
 * published mandatory: one that no queue takes (a binding or queue of the
 * topology is missing) comes back (basic.return) and is HG_ERR_SERVER
 * (r->returned > 0), naming the exchange and routing key, never a confirmed
 * drop; the connection stays up and r->rebind makes the next rmq_topology
 * bind the whole topology again (the send paths do not resend it in the
 * same call: the caller learns the topology was damaged). Each message's
 * writes take at most the read timeout, the wait for the confirms another:
 * past either, HG_ERR_TIMEOUT naming what waited and the timeout (r's
 * watchdog cuts a write that librabbitmq would wait on for ever). A batch
 * cut short by a lost connection, a missing confirm or a write timeout still
 * sets results[]: HG_OK for what was confirmed before, HG_ERR_IO for the
 * rest (to resend); cut by the client's stop fd (a write too),
 * HG_ERR_STOPPED for the rest. Every one of these drops the connection. */
hg_err_t rmq_publish(rmq_t *r, const rmq_out_t *out, size_t n, hg_err_t *results);

/* --- rmq_watchdog.c --- */
/* What the watchdog did while armed. */
typedef enum rmq_cut {
    RMQ_CUT_NONE,     /* nothing */
    RMQ_CUT_DEADLINE, /* the deadline passed: it shut the socket down */
    RMQ_CUT_STOP      /* the stop fd was readable: it shut the socket down */
} rmq_cut_t;
/* A watchdog, disarmed, and its thread. NULL with errno when the pipe or
 * the thread cannot be made. */
rmq_watchdog_t *rmq_watchdog_new(void);
/* Disarm, stop the thread, free. NULL is fine. */
void rmq_watchdog_free(rmq_watchdog_t *w);
/* Arm w over socket fd: until rmq_watchdog_disarm it shuts that
 * socket down, both ways, once deadline (wire_now_ms; 0: none) passes or
 * stop_fd (-1: none) is readable, so a write or read waiting on it ends with
 * an error. w holds a duplicate of fd while armed and cuts through it: the
 * socket cut is the one armed even if fd is closed meanwhile. 0, or -1 with
 * errno (no descriptor left). Costs the thread no wake when its plan already
 * covers the deadline and stop_fd. */
int rmq_watchdog_arm(rmq_watchdog_t *w, int fd, uint64_t deadline, int stop_fd);
/* Move the deadline of an armed w (0: none); nothing when disarmed. */
void rmq_watchdog_extend(rmq_watchdog_t *w, uint64_t deadline);
/* Disarm w; what it did while armed (RMQ_CUT_NONE when it was not armed). */
rmq_cut_t rmq_watchdog_disarm(rmq_watchdog_t *w);
/* What w did since it was armed, leaving it armed (RMQ_CUT_NONE when not armed). */
rmq_cut_t rmq_watchdog_cut(rmq_watchdog_t *w);
/* After a deadline cut (still armed): the bytes the peer had not
 * acknowledged when the socket was cut (SIOCOUTQ); -1 unknown or no such cut. */
int rmq_watchdog_unacked(rmq_watchdog_t *w);

/* The guard: every librabbitmq call that writes or waits runs inside one.
 * A transport call (rmq_transport.c's ops, the hop router's round,
 * rmq_ensure, rmq_publish) enters it and leaves it; nested calls count. While
 * entered, r's watchdog is armed over the connection's socket (a new one
 * from its TLS handshake and login on) and the client's stop fd. Leaving
 * the outermost call disarms it, and drops the connection when the
 * watchdog cut its socket meanwhile. */
void rmq_guard_enter(rmq_t *r);
void rmq_guard_leave(rmq_t *r);
/* Arm over fd (a new connection's socket) for a step of ms (0: no
 * deadline); nothing outside a guarded call. */
void rmq_guard_socket(rmq_t *r, int fd, uint32_t ms);
/* The next step may take ms from now (0: only the stop fd cuts it). */
void rmq_guard_within(rmq_t *r, uint32_t ms);
/* rmq_guard_within the client's read timeout: call after each step done. */
void rmq_guard_step(rmq_t *r);
/* What the watchdog did in this guarded call so far. */
rmq_cut_t rmq_guard_cut(rmq_t *r);
/* After a librabbitmq call failed: when the watchdog cut the socket, the
 * client error names what (e.g. "declaring queue hg.level.3"), where, and
 * why — HG_ERR_STOPPED "stopped while …" or HG_ERR_TIMEOUT "…: RabbitMQ at
 * H:P did not take it or answer within Nms" — and that code is returned;
 * HG_OK when it did not cut (the caller reports the failure itself). The
 * caller drops the connection. */
hg_err_t rmq_guard_failed(rmq_t *r, const char *what);

/* --- rmq_topology.c --- */
/* Declare (idempotently, checking arguments) the exchanges, the level
 * queues and the service queues once per connection, and bind them on the
 * client's first connection that gets that far (later ones skip the
 * bindings: r->topology_bound) — unless that first connection finds
 * hg.probe, which a completed sweep declares last: then no client of this
 * process binds them. */
hg_err_t rmq_topology(rmq_t *r);
/* A consuming connection that got nothing for rmq_probe_idle_ms: check
 * that its node still reaches its quorum queues' quorum with a basic.get of
 * the always-empty quorum queue hg.probe (a Raft command: answered only
 * when committed by a majority). On the minority side of a partition whose
 * handling leaves the node up (ignore, autoheal) the node keeps the
 * consumer's channel but delivers nothing, and the get is answered by an
 * error or not within the read timeout: the connection is dropped, and the
 * next connect starts at the following host (rmq_disconnect). HG_OK (not
 * consuming, not idle long enough, or answered), or the error set with the
 * connection dropped. */
hg_err_t rmq_probe_idle(rmq_t *r);
/* How long a consuming connection may get nothing before rmq_probe_idle
 * checks it: the client's read timeout, at least RMQ_PROBE_IDLE_MIN_MS
 * (RMQ_PROBE_IDLE_DEFAULT_MS without a read timeout). */
uint64_t rmq_probe_idle_ms(const rmq_t *r);
/* The most replies rmq_topology waits for on one connection with the level
 * table t (each up to the read timeout): 18 + 2 per level + 4 per remainder
 * queue. Kept next to rmq_topology, which it counts. */
unsigned rmq_topology_waits(const lvl_table_t *t);
/* 0 when name is a topic or group name the transport can use: the broker's
 * rule (printable ASCII without blanks, 0x21..0x7e), 1..RMQ_NAME_USABLE
 * bytes, so the queue name or routing key made of it fits an AMQP shortstr
 * (RabbitMQ closes the whole connection on a name that is not UTF-8, and
 * rabbitmq-c cannot encode one above 255 bytes). Otherwise -1 and why names
 * the problem, using `what` ("topic", "group"). */
int rmq_check_name(const char *what, const char *name, char *why, size_t whylen);
/* rmq_check_name as HG_ERR_ARG set on the client (HG_OK when fine). */
hg_err_t rmq_name_arg(rmq_t *r, const char *what, const char *name);
/* Queue names. */
void rmq_level_queue(char *buf, size_t len, int level);
void rmq_group_queue(char *buf, size_t len, const char *group);
void rmq_dlq_queue(char *buf, size_t len, const char *group);
/* Declare group's queue and DLQ and bind them to topic; register the group
 * (from: 1 created now). Fails with HG_ERR_SERVER "group g is bound to topic
 * a, not b" as the broker does. *max_out (may be NULL): its max-reconsume. */
hg_err_t rmq_group_ensure(rmq_t *r, const char *group, const char *topic, long max_reconsume, int must_be_new,
                          long *max_out);
/* Browse queue on channel 2: every message, fetched and left
 * unacknowledged, in queue order. Then each one is either deleted
 * (rmq_browse_delete) or returned to the queue (rmq_browse_return) — one
 * by one: a multiple nack would name a tag already acknowledged, which
 * RabbitMQ answers by closing the channel. */
hg_err_t rmq_browse(rmq_t *r, const char *queue, rmq_msg_t **out);
/* Whether queue holds a message (*nonempty 1), by one get on channel 2
 * whose message, if any, goes straight back: the queue's leader must answer,
 * unlike a passive declare's count. RabbitMQ 3.10 counts a message returned
 * to a quorum queue (x-delivery-count), which a group's consumer takes for
 * its failure: for a group's queue copy_to is its routing key (g.<group>)
 * and the message goes back as an uncounted copy (confirmed, then the
 * original acknowledged: it moves to the queue's tail); only when the copy
 * is not confirmed is it returned, counted. copy_to NULL: returned (level
 * queues and DLQs, where the count means nothing). */
hg_err_t rmq_queue_peek(rmq_t *r, const char *queue, const char *copy_to, int *nonempty);
void rmq_browse_return(rmq_t *r, const rmq_msg_t *m);
void rmq_browse_delete(rmq_t *r, const rmq_msg_t *m);
/* Read the registry (browse). *out: a list (free each with rmq_msg_free),
 * one record per group (the first wins), sorted by group name. */
hg_err_t rmq_registry(rmq_t *r, rmq_msg_t **out);
/* The registry record of group, or NULL (*found 0). */
hg_err_t rmq_group_find(rmq_t *r, const char *group, rmq_msg_t **out);
/* Messages in a queue (passive declare); -1 when it does not exist. */
hg_err_t rmq_queue_depth(rmq_t *r, const char *queue, long long *depth);
/* Delete group: queues, bindings and registry records. *deleted 0/1. */
hg_err_t rmq_group_delete(rmq_t *r, const char *group, int *deleted);

/* --- rmq_msg.c --- */
hg_err_t rmq_cmd_send(rmq_t *r, size_t argc, const char *const *argv, const size_t *lens, resp_reply_t **reply);
void rmq_send_many(rmq_t *r, hg_send_item_t *items, size_t n);
/* hg_client_send_bound_ms on amqp://: each of the send rounds connecting
 * (rmq_ensure: rmq_attempt_bound_ms per attempt), declaring the topology,
 * writing the messages (one read timeout) and waiting for the confirms, with
 * the pauses after refusals between them. */
uint64_t rmq_send_bound_ms(const rmq_t *r);
hg_err_t rmq_cmd_pull(rmq_t *r, size_t argc, const char *const *argv, uint32_t extra_wait_ms, int flags,
                      resp_reply_t **reply);
/* Consume queue on channel 1 with prefetch count, remembered as name (a
 * group, or the hop queue); another one consumed before is cancelled and
 * its unread deliveries returned (a group's as uncounted copies). */
hg_err_t rmq_consume(rmq_t *r, const char *queue, const char *name, int count);
/* o's fields that every copy of m carries: its id, topic, key and payload,
 * and max_reconsume -1 (the group's). Where it goes, its due time and its
 * reconsume are the caller's. */
void rmq_out_message(rmq_out_t *o, const rmq_msg_t *m);
/* *o: message m published to one group again — to hg.due with routing key
 * dest ("g.<group>"), reconsume unchanged; o points into m and dest. */
void rmq_out_to_group(rmq_out_t *o, const rmq_msg_t *m, const char *dest);
/* Before a clean close: stop consuming, and give the group's deliveries
 * read ahead but never handed out back as uncounted copies (a delivery
 * returned unsettled would come back as a failure of its consumer). What
 * PULL handed out and nobody settled goes back unsettled with the
 * connection: a failure, as an expired lease is on the broker. Each step
 * (the cancel, the copies' confirms) waits at most RMQ_CLOSE_WAIT_MS: a
 * silent node costs the close ~4 s, and what was read ahead then goes back
 * counted. */
void rmq_close_consumer(rmq_t *r);
hg_err_t rmq_cmd_ack(rmq_t *r, size_t argc, const char *const *argv, resp_reply_t **reply);
hg_err_t rmq_cmd_nack(rmq_t *r, size_t argc, const char *const *argv, resp_reply_t **reply);

/* --- rmq_route.c --- */
/* The largest power of two below t's smallest level (the highest
 * remainder queue); 0 when the smallest level is 1 ms (no remainders). */
uint64_t rmq_remainder_top(const lvl_table_t *t);
/* The destination and plan of a delay: fills out->exchange, routing_key,
 * level, plan, remainder_ms/remainder_top (a remainder below the smallest
 * level, waited first in the remainder queues), due_ms (plan_buf holds the
 * plan text). dest is the final routing key. Returns 0, or -1 with why. */
int rmq_route_delay(const lvl_table_t *t, hg_delay_t delay, const char *dest, uint64_t now, rmq_out_t *out,
                    char *plan_buf, size_t plan_len, char *why, size_t whylen);

/* --- rmq_admin.c --- */
hg_err_t rmq_cmd_levels(rmq_t *r, resp_reply_t **reply);
hg_err_t rmq_cmd_group(rmq_t *r, size_t argc, const char *const *argv, resp_reply_t **reply);
hg_err_t rmq_cmd_dlq(rmq_t *r, size_t argc, const char *const *argv, resp_reply_t **reply);

/* --- rmq_router.c --- */
hg_err_t rmq_router_start(const char *uri, const hg_client_opts_t *opts, int stop_fd, hg_log_fn log, void *log_arg,
                          void **handle, hg_error_t *err);
void rmq_router_stop(void *handle);

/* --- rmq_reply.c: a reply is written as RESP text, then parsed once --- */
void rmq_w_array(buf_t *b, size_t n);
void rmq_w_int(buf_t *b, long long v);
void rmq_w_bulk(buf_t *b, const void *s, size_t len);
void rmq_w_str(buf_t *b, const char *s); /* bulk of a C string */
void rmq_w_status(buf_t *b, const char *s);
void rmq_w_error(buf_t *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Parse b into *reply (always valid RESP: aborts otherwise); frees b. */
hg_err_t rmq_reply_finish(buf_t *b, resp_reply_t **reply);

/* rmq_transport.c */
rmq_t *rmq_of(transport_state_t *t);

#endif
