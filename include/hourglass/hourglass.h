/*
 * <hourglass/hourglass.h> — libhourglass, the client library of Hourglass.
 *
 * Hourglass is a delay broker speaking the Redis protocol (RESP). This library
 * is what an application links to talk to it:
 *
 *   client     hg_client_open / hg_client_command / hg_client_close: one
 *              connection, by URI, with timeouts and automatic reconnection
 *              (capped exponential backoff with jitter).
 *   producer   hg_send, hg_send_many (pipelined), hg_level_for (timeout → one
 *              delay level, RocketMQ style).
 *   consumer   hg_consumer_new / hg_consumer_run / hg_consumer_stop: N worker
 *              threads, each with its own connection, running PULL BLOCK →
 *              handler → ACK / NACK, with local retries for transient failures
 *              and lease TOUCH for slow handlers.
 *   backoff    hg_backoff_delay: the pure delay function used for reconnects
 *              and local retries.
 *
 * Conventions
 *  - Every function that can fail returns an hg_err_t: HG_OK (0) on success,
 *    else a code saying what kind of failure it was. The message naming the
 *    cause is kept per handle (hg_client_errmsg, hg_consumer_last_error); functions
 *    that have no handle yet (hg_client_open, hg_consumer_new, ...) fill a
 *    caller-supplied hg_error_t instead (which may be NULL).
 *  - Handles are opaque. What a function allocates and who frees it is stated
 *    at each function. Out of memory aborts the process with a message.
 *  - NULL: pass it only where a function says so (the reply accessors say
 *    the opposite). Elsewhere NULL never crashes: a call returning an
 *    hg_err_t fails with HG_ERR_ARG — for a NULL client or consumer without
 *    a message (there is no handle to keep it), else with one naming the
 *    argument ("hg_msg_find: out is NULL"); a setter, stop or free does
 *    nothing; an accessor gives the empty answer (0, "", HG_ERR_ARG and
 *    "the client is NULL" from hg_client_errcode / errmsg, HG_UNBOUNDED from
 *    hg_client_send_bound_ms, zeroed stats).
 *  - Thread safety: a client handle belongs to one thread at a time (no
 *    internal lock; use one client per thread, or lock around it). Everything
 *    without a handle (hg_level_for, hg_backoff_delay, hg_strerror, ...) is
 *    thread-safe. hg_consumer_stop is safe from any thread and from a signal
 *    handler; hg_consumer_stats from any thread.
 *  - Times are milliseconds: durations as uint32_t/uint64_t, absolute times as
 *    Unix epoch milliseconds (uint64_t).
 *
 * Link with `pkg-config --cflags --libs hourglass` (add libmariadb when the
 * program calls MariaDB Connector/C itself, e.g. on hg_order_db_mysql's MYSQL *).
 */
#ifndef HOURGLASS_HOURGLASS_H
#define HOURGLASS_HOURGLASS_H

#include <stddef.h>
#include <stdint.h>

#include "err.h" /* hg_err_t and hg_client_t, shared with order.h */

#ifdef __cplusplus
extern "C" {
#endif

#define HG_VERSION_STRING "0.1.0"

/* The port used when a URI names none: the broker's default listening port. */
#define HG_DEFAULT_PORT 7379

/* Buffer sizes of the fixed strings handed out (each includes the NUL). */
#define HG_ERRMSG_MAX 256 /* an error message */
#define HG_ID_MAX     64  /* a message id as the broker returns it */
#define HG_REASON_MAX 256 /* a failure reason written by a handler */

/* ------------------------------------------------------------------------
 * Errors
 * ------------------------------------------------------------------------ */

/* hg_err_t, the codes every call below returns, is in err.h (included above). */

/* A code plus the message naming the cause, for functions without a handle. */
typedef struct hg_error {
    hg_err_t code;
    char message[HG_ERRMSG_MAX];
} hg_error_t;

/* A short constant description of a code ("connection lost"). Never NULL. */
const char *hg_strerror(hg_err_t code);

/* ------------------------------------------------------------------------
 * Backoff: capped exponential with jitter
 * ------------------------------------------------------------------------ */

typedef struct hg_backoff {
    uint32_t base_ms; /* delay before the first retry (attempt 0) */
    double factor;    /* growth per attempt, >= 1.0 */
    uint32_t cap_ms;  /* no delay exceeds this, >= base_ms */
    int attempts;     /* how many retries before giving up (>= 0); for
                           reconnects 0 means "retry forever" (see
                           hg_client_opts_t.reconnect) */
    double jitter;    /* 0.0 .. 1.0: the share of the delay that is random */
} hg_backoff_t;

/* A random source: returns 64 uniformly random bits. Used to make the jitter
 * deterministic in tests. */
typedef uint64_t (*hg_random_fn)(void *arg);

/* Defaults: base 100 ms, factor 2.0, cap 10 s, attempts 5, jitter 0.2. */
void hg_backoff_default(hg_backoff_t *b);

/* The delay before retry number `attempt` (0 for the first retry):
 *     raw   = min(cap, base * factor^attempt)
 *     delay = raw * (1 - jitter * u),  u uniform in [0, 1) drawn from rnd
 * so the delay lies in (raw * (1 - jitter), raw] and never exceeds the cap;
 * jitter 0 is deterministic, jitter 1 is "full jitter". rnd NULL uses an
 * internal per-thread generator seeded from the clock. Out-of-range fields
 * are clamped (factor < 1 → 1, jitter into [0, 1], cap < base → base).
 * Pure apart from rnd; thread-safe. */
uint64_t hg_backoff_delay(const hg_backoff_t *b, unsigned attempt, hg_random_fn rnd, void *rnd_arg);

/* ------------------------------------------------------------------------
 * Client: one connection to a broker
 * ------------------------------------------------------------------------ */

/* hg_client_t: a connection handle (declared in err.h, shared with order.h). */

/* With opts.resend_sends, one hg_send / hg_send_many call sends again at most
 * this many times after its connection broke (each time after reconnecting,
 * each wait up to read_timeout_ms). A caller that must bound how long a call
 * can take (a lease) asks hg_client_send_bound_ms, which counts these rounds
 * with everything else the client waits for. */
#define HG_SEND_MAX_RESENDS 3

/* What hg_client_send_bound_ms returns for a client that may wait forever. */
#define HG_UNBOUNDED UINT64_MAX

typedef struct hg_client_opts {
    uint32_t connect_timeout_ms;    /* per connection attempt; default 5000 */
    uint32_t read_timeout_ms;       /* longest wait for a reply once the command is
                                    written (a blocking PULL adds its BLOCK time);
                                    on amqp:// also for the writes of each step
                                    (a message published, an RPC, an ack, the
                                    close); default 10000; 0 waits forever */
    int reconnect;                  /* 1 (default): a lost or refused connection is
                                    retried with the backoff below before a call
                                    fails; 0: one connection attempt per call */
    hg_backoff_t reconnect_backoff; /* default: base 100 ms, factor 2, cap 5 s,
                                       attempts 5, jitter 0.2 */
    int resend_sends;               /* 1 (default): a SEND whose connection broke
                                    before its reply arrived is sent again after
                                    reconnecting (at-least-once: the broker may
                                    then hold it twice); 0: fail with HG_ERR_IO */
    /* hourglass+tls:// only (a URI parameter of the same meaning wins over
     * the option). Paths are read when the client is created; the strings
     * must stay valid while a client or consumer made with them exists.
     * NULL (default): unset. */
    const char *tls_ca_file;     /* PEM CAs the broker's certificate must chain
                                    to (ca=); unset: the system's trust store */
    const char *tls_cert_file;   /* client certificate chain for mutual TLS
                                    (cert=); needs tls_key_file */
    const char *tls_key_file;    /* its unencrypted private key (key=) */
    const char *tls_server_name; /* the name the broker's certificate must carry,
                                    also sent as SNI (sni=); unset: the URI's host */
    const char *user;            /* NULL (default): the URI's user; else this user
                                       (with password: the URI need not carry one) */
    const char *password;        /* NULL (default): the URI's password; else this one
                                       (e.g. read from a file; copied at open, so the
                                       caller may wipe it afterwards). A password
                                       without a user logs in as "default" */
    int has_stop_fd;             /* 0 (default, and zeroed options): no stop fd, as
                                    before; 1: stop_fd is the client's stop fd from
                                    its creation (fd 0 is a real descriptor, hence
                                    the flag) */
    int stop_fd;                 /* with has_stop_fd: what hg_client_set_stop_fd
                                    sets, in force already in hg_client_open, so
                                    its own connect — the TCP connect, the TLS
                                    handshake, AUTH's wait for a broker that
                                    accepts and never answers — ends at once with
                                    HG_ERR_STOPPED while fd is readable; then kept
                                    (hg_client_set_stop_fd changes it); on amqp://
                                    as hg_client_set_stop_fd says. A negative
                                    fd is HG_ERR_ARG. hg_client_clone does not take
                                    it, nor a consumer's clients (they take
                                    hg_consumer_set_stop_fd's) */
} hg_client_opts_t;

/* Fill *opts with the defaults above. */
void hg_client_opts_init(hg_client_opts_t *opts);

/* Open a client and connect it.
 *
 * uri: "hourglass://[user[:pass]@]host[:port][/]". host is a name, an IPv4
 * address or an IPv6 address in brackets ("[::1]"); port 1..65535, default
 * HG_DEFAULT_PORT; user and password may use %XX escapes (for ':', '@', '/').
 * A user without ":pass" takes opts->password (a password kept out of the
 * URI: a daemon's password-file); without one that is HG_ERR_ARG, before
 * any connection, with a message that begins "no password given for user"
 * (as for opts->user without a password anywhere). The message does not
 * say where a password could come from — the library does not know its
 * caller: a program adds its own hint (hourglass-cli: --password-file;
 * the daemons: their password-file key).
 * With credentials the client sends AUTH user pass after every (re)connect.
 * "hourglass+tls://[user:pass@]host[:port][?ca=FILE&cert=FILE&key=FILE&sni=NAME]"
 * speaks TLS (1.2 or later) to the broker's tls-port: the broker's
 * certificate is always verified, against ca (or opts->tls_ca_file, else the
 * system's trust store), and must be issued to host (an IP address: an IP
 * SAN; a name: a DNS SAN) or to sni; cert and key are a client certificate
 * for a broker with tls-auth-clients. Parameter values are percent-decoded.
 * A certificate that fails verification fails at once with HG_ERR_CONNECT
 * ("the broker's TLS certificate is not trusted: certificate has expired"),
 * without reconnect attempts.
 * With credentials (in the URI, or opts->user / opts->password, which win)
 * the client sends AUTH user pass after every (re)connect; a refused AUTH is
 * HG_ERR_AUTH at once, never retried (a wrong password stays wrong). Without
 * credentials nothing is sent at open, so the open succeeds on a broker with
 * a users-file too; each command then fails with HG_ERR_SERVER
 * ("NOAUTH Authentication required.").
 * "amqp://[user:pass@]host[:port][,host[:port]...][/vhost][?levels=TABLE]"
 * selects RabbitMQ (3.10+, quorum queues) as the transport (levels=: the
 * level table, "1s,5s,..."; the default one without it; one table per
 * vhost): the same calls work on it, and the
 * commands it cannot honour (TOUCH, INFO, ...) fail with HG_ERR_UNSUPPORTED
 * naming amqp:// (docs/rabbitmq.md). "amqps://…[?ca=FILE&cert=FILE&key=FILE&
 * sni=NAME]" is the same over TLS (default port 5671), with the parameters
 * and opts->tls_* meaning what they mean for hourglass+tls://; an untrusted
 * certificate fails at once with HG_ERR_CONNECT, as there.
 * opts may be NULL for the defaults.
 * Another thread can cut the open short: with opts->has_stop_fd, while
 * opts->stop_fd is readable every wait of the open (the TCP connect, the TLS
 * handshake, AUTH's reply, a reconnect's backoff) ends at once and the open
 * returns HG_ERR_STOPPED ("stopped during AUTH with 127.0.0.1:7379"); an open
 * begun while it is readable connects to nothing. Without it, only the
 * timeouts end them (hg_client_set_stop_fd is for an open client).
 *
 * Returns HG_OK and *out, a client the caller frees with hg_client_close; or
 * HG_ERR_URI / HG_ERR_UNSUPPORTED / HG_ERR_ARG / HG_ERR_CONNECT / HG_ERR_AUTH /
 * HG_ERR_STOPPED,
 * *out = NULL and err (may be NULL) holds the code and the cause, e.g.
 * "bad URI: bad port '65536': out of range (want 1..65535)" or
 * "cannot connect to 127.0.0.1:7379: Connection refused (after 6 attempts)". */
hg_err_t hg_client_open(const char *uri, const hg_client_opts_t *opts, hg_client_t **out, hg_error_t *err);

/* Close the connection and free the client. NULL is fine. */
void hg_client_close(hg_client_t *c);

/* A new client with c's URI, options and credentials (and c's TLS context,
 * shared), not yet connected: its first command connects and logs in, as a
 * reconnect of c would. For a second connection as the same user without
 * holding the password, e.g. a command run on a thread of its own (a client
 * belongs to one thread at a time). c is only read; the clone gets the read
 * timeout in force on c, not its stop fd. Returns HG_OK and *out
 * (free with hg_client_close), or HG_ERR_UNSUPPORTED for an AMQP client,
 * HG_ERR_ARG for a NULL argument, with err (may be NULL). */
hg_err_t hg_client_clone(const hg_client_t *c, hg_client_t **out, hg_error_t *err);

/* Let another thread stop c's calls: while fd is readable (a pipe or an
 * eventfd the caller writes to), every wait of c for the broker — a reply,
 * connecting (the TCP connect, the TLS handshake, AUTH), a reconnect's
 * backoff — ends at once with HG_ERR_STOPPED, and the connection is closed;
 * a call made while it is readable stops before it connects. hg_send_many
 * gives each item whose reply had not arrived HG_ERR_STOPPED (it may have
 * reached the broker: a caller that sends it again later should send with
 * DEDUP). On amqp:// every write and wait ends too (the TCP connect, the
 * TLS handshake and the login, publishes and their confirms, declarations
 * and other RPCs, acks, the close) and the pauses; only amqps://'s TCP
 * connect, made inside librabbitmq, ends with its connect timeout. -1 (the
 * default) turns it off.
 * The client never reads or closes fd. Set it before the call, on the
 * thread that owns c. */
void hg_client_set_stop_fd(hg_client_t *c, int fd);

/* The read timeout (hg_client_opts_t.read_timeout_ms; 0 waits forever) for
 * the commands that follow, and the one in force: for a command known to
 * take long, e.g. DLQ REQUEUE … ALL of a big DLQ, which the broker answers
 * after its last step. On an AMQP URI only the wait for a reply changes, not
 * the socket timeouts set when it connected. */
void hg_client_set_read_timeout(hg_client_t *c, uint32_t ms);
uint32_t hg_client_read_timeout(const hg_client_t *c);

/* The longest one hg_send or hg_send_many call on c can take, in ms, as c is
 * configured now (its URI, its options, hg_client_set_read_timeout), when
 * every wait lasts up to its timeout: each of its rounds (1 +
 * HG_SEND_MAX_RESENDS with opts.resend_sends, else 1) connecting again as the
 * reconnect options allow (1 + reconnect_backoff.attempts connection
 * attempts, 1 without reconnect, the backoff's longest pauses between them)
 * and then waiting for the replies, read_timeout_ms. A connection attempt is,
 * on hourglass://, the TCP connect, the TLS handshake (hourglass+tls://, a
 * connect timeout of its own) and AUTH's reply (with credentials); on
 * amqp://, for each host of the URI, the TCP connect with the TLS handshake
 * and the login (a connect timeout each) and opening the channels (3
 * replies); and a new amqp:// connection declares the level and remainder
 * queues before it publishes (a reply each: 17 + 2 per level + 3 per
 * remainder queue at most — minutes with the default timeouts), an amqp://
 * round's writes take up to read_timeout_ms before its confirms do, and a
 * round RabbitMQ refused pauses before the next (250 ms, doubling).
 * What a caller that must not outlast a send uses: the compensator's relay
 * leases its batch for this plus a second, at most 2 minutes.
 * Assumes that a host name has one address (on hourglass:// each more adds a
 * connect timeout to every attempt), that name lookups answer at once, and
 * that replies do not trickle: the read timeout restarts with every reply
 * (on amqp://, with every message written), so a broker that answers (or
 * takes) a long pipeline slowly but steadily can take longer.
 * HG_UNBOUNDED when a wait has no end: read_timeout_ms 0, or reconnecting
 * forever (reconnect with attempts 0). Reads c only; it may be called
 * before any send (a client from hg_client_open or hg_client_clone). */
uint64_t hg_client_send_bound_ms(const hg_client_t *c);

/* The read timeout for DLQ REQUEUE|DROP … ALL of a DLQ of `entries` (DLQ LEN
 * first): the broker moves the DLQ in steps between other clients' commands
 * (2–4 µs an entry on an idle broker) and answers after the last, so this is
 * read_timeout_ms plus 50 µs an entry, at most a day — but never less than
 * read_timeout_ms itself; 0 (wait forever) stays 0. hourglass-cli and the console set it for that one command. */
uint32_t hg_dlq_all_read_timeout(uint32_t read_timeout_ms, long long entries);

/* The value of "key:" in INFO text info[0..len) ("# Section\r\nkey:value\r\n…"),
 * or NULL when no line has that key; *vlen is its length, without the line
 * end. The value points into info. */
const char *hg_info_value(const char *info, size_t len, const char *key, size_t *vlen);

/* The read timeout for TOPIC DEL … PURGE, which the broker answers after
 * deleting the topic's retained messages in steps: read_timeout_ms, at
 * least 10 minutes; 0 (wait forever) stays 0. hourglass-cli and the console
 * set it for that one command. */
uint32_t hg_topic_purge_read_timeout(uint32_t read_timeout_ms);

/* The code and message of the client's last failed call ("" / HG_OK when the
 * last call succeeded). The string belongs to the client and stays valid
 * until its next call. */
hg_err_t hg_client_errcode(const hg_client_t *c);
const char *hg_client_errmsg(const hg_client_t *c);

/* The node the client is connected to, as "host:port" ("[v6]:port"): on
 * hourglass:// the URI's host and port; on amqp:// with several hosts the one
 * the current connection (or, while it is down, the last one) was made to —
 * after a failover the node now used, never simply the URI's first. Before
 * the first connection it names every node the client may connect to
 * ("h1:5672,h2:5672"; one host: that host). The string belongs to the client
 * and changes when it (re)connects: read it on the thread that owns the
 * client, not while another thread uses the client. "" for NULL. */
const char *hg_client_address(const hg_client_t *c);

/* --- replies, for the generic command --- */

typedef struct hg_reply hg_reply_t;

typedef enum hg_reply_type {
    HG_REPLY_STATUS = 1, /* +OK: string */
    HG_REPLY_ERROR,      /* never handed out by hg_client_command (it fails
                            with HG_ERR_SERVER); may appear inside an array */
    HG_REPLY_INTEGER,    /* integer */
    HG_REPLY_STRING,     /* bulk string (binary safe): string */
    HG_REPLY_NIL,        /* null */
    HG_REPLY_ARRAY,      /* elements */
    HG_REPLY_MAP,        /* elements: key, value, key, value ... (RESP3) */
    HG_REPLY_SET,        /* elements (RESP3) */
    HG_REPLY_PUSH,       /* elements (RESP3) */
    HG_REPLY_DOUBLE,     /* double, and string with its text */
    HG_REPLY_BOOL,       /* integer 0 or 1 */
    HG_REPLY_BIGNUM,     /* string: the digits */
    HG_REPLY_VERBATIM    /* string */
} hg_reply_type_t;

/* Accessors; r must not be NULL. Strings belong to the reply tree. */
hg_reply_type_t hg_reply_type(const hg_reply_t *r);
/* The bytes of a string-like reply (STATUS, ERROR, STRING, DOUBLE, BIGNUM,
 * VERBATIM), NUL-terminated after len bytes; NULL for other types. */
const char *hg_reply_str(const hg_reply_t *r, size_t *len);
/* INTEGER and BOOL: the value; other types 0. */
long long hg_reply_integer(const hg_reply_t *r);
/* DOUBLE: the value; other types 0. */
double hg_reply_double(const hg_reply_t *r);
/* Aggregates: the number of elements (a map counts keys and values); else 0. */
size_t hg_reply_count(const hg_reply_t *r);
/* Element i of an aggregate (belongs to the tree), or NULL when out of range. */
const hg_reply_t *hg_reply_element(const hg_reply_t *r, size_t i);
/* Free a reply tree from hg_client_command (only the root). NULL is fine. */
void hg_reply_free(hg_reply_t *r);

/* Send one command and read its reply.
 *
 * argv[0..argc) are the command and its arguments; argvlen gives their
 * lengths (binary safe) or is NULL when all are C strings. If the client is
 * disconnected it first reconnects (with backoff, per opts). The command is
 * NOT sent again when the connection breaks after it was written (the caller
 * knows whether it is idempotent): the call fails with HG_ERR_IO and the next
 * call reconnects.
 *
 * Returns HG_OK and *reply (the caller frees it with hg_reply_free); or
 * HG_ERR_SERVER when the broker answered an error (hg_client_errmsg is its
 * text, e.g. "ERR unknown command 'FOO'"), HG_ERR_CONNECT, HG_ERR_IO,
 * HG_ERR_TIMEOUT, HG_ERR_PROTOCOL, HG_ERR_ARG; *reply = NULL. */
hg_err_t hg_client_command(hg_client_t *c, int argc, const char *const *argv, const size_t *argvlen,
                           hg_reply_t **reply);

/* hg_client_command that also tells the caller when the reply is slow:
 * when notice_ms have passed since the command began to be sent (after
 * connecting) and its reply is not whole, notice(arg) is called once, on
 * this thread inside the call, and the call goes on waiting for the reply as
 * hg_client_command does (the read timeout in force is not changed). A reply
 * in time — an error such as NOPERM too — returns without calling it. For a
 * command that the broker refuses at once but answers late when it accepts
 * (DLQ REQUEUE|DROP … ALL): announce the wait only when there is one.
 * notice must not use c. Returns as hg_client_command; also HG_ERR_ARG for a
 * NULL notice. On amqp:// the library runs the command itself (RabbitMQ
 * has no broker to answer it) and cannot time it: notice(arg) is called
 * once before it runs, then the call returns as hg_client_command. */
hg_err_t hg_client_command_notice(hg_client_t *c, int argc, const char *const *argv, const size_t *argvlen,
                                  uint32_t notice_ms, void (*notice)(void *arg), void *arg, hg_reply_t **reply);

/* ------------------------------------------------------------------------
 * Producer
 * ------------------------------------------------------------------------ */

typedef enum hg_delay_kind {
    HG_DELAY_NONE = 0, /* deliver now (level 0) */
    HG_DELAY_LEVEL,    /* value = a level 1..count of the broker's table
                          (0: no delay, as HG_DELAY_NONE) */
    HG_DELAY_MS,       /* value = a delay in ms (the broker chains levels to
                           reach it, exact to the millisecond) */
    HG_DELAY_AT        /* value = an absolute Unix time in ms */
} hg_delay_kind_t;

typedef struct hg_delay {
    hg_delay_kind_t kind;
    uint64_t value;
} hg_delay_t;

static inline hg_delay_t hg_delay_none(void)
{
    hg_delay_t d = { HG_DELAY_NONE, 0 };
    return d;
}
static inline hg_delay_t hg_delay_level(int level)
{
    hg_delay_t d = { HG_DELAY_LEVEL, (uint64_t)level };
    return d;
}
static inline hg_delay_t hg_delay_ms(uint64_t ms)
{
    hg_delay_t d = { HG_DELAY_MS, ms };
    return d;
}
static inline hg_delay_t hg_delay_at(uint64_t unix_ms)
{
    hg_delay_t d = { HG_DELAY_AT, unix_ms };
    return d;
}

/* Send one message: SEND topic payload [KEY key] [LEVEL n | DELAY ms | AT ms].
 *
 * topic: a non-empty C string. key: a non-empty C string, or NULL (no key);
 * an empty key is HG_ERR_ARG ("hg_send: key is empty (pass NULL for a
 * message without one)"), since FIND, REVOKE and DEDUP could never name it
 * (the broker and amqp:// refuse SEND … KEY "" too). payload:
 * len bytes, binary safe (len 0 allowed, payload may then be NULL).
 * id_out: NULL, or a buffer of HG_ID_MAX bytes receiving the message id.
 * The reply arrives only after the broker made the message durable.
 * On a connection loss before the reply, the message is sent again after
 * reconnecting when opts.resend_sends (the default): delivery is at least
 * once, consumers must be idempotent.
 *
 * Returns HG_OK; or HG_ERR_ARG, HG_ERR_SERVER (e.g. "ERR delay 4d exceeds
 * max-delay 3d"), HG_ERR_CONNECT, HG_ERR_IO, HG_ERR_TIMEOUT, HG_ERR_PROTOCOL
 * with the cause in hg_client_errmsg. A payload past the broker's
 * max-payload is HG_ERR_SERVER with the connection kept; one past its
 * max-bulk too ("ERR Protocol error: … (max-bulk)"), not sent again, with
 * the connection closed by the broker (the next call reconnects). */
hg_err_t hg_send(hg_client_t *c, const char *topic, const char *key, const void *payload, size_t len, hg_delay_t delay,
                 char *id_out);

/* One message of hg_send_many: inputs, then outputs filled by the call. */
typedef struct hg_send_item {
    const char *topic;         /* in: as hg_send */
    const char *key;           /* in: or NULL */
    const void *payload;       /* in */
    size_t payload_len;        /* in */
    hg_delay_t delay;          /* in */
    hg_err_t err;              /* out: HG_OK, or why this one failed */
    char id[HG_ID_MAX];        /* out: the message id when err == HG_OK */
    char error[HG_ERRMSG_MAX]; /* out: the cause when err != HG_OK */
    int dedup;                 /* in: 1 = SEND … KEY key DEDUP (key required; see hg_send_dedup) */
    int duplicate;             /* out, with dedup: 1 = id names the live message already there */
} hg_send_item_t;

/* Send n messages pipelined: all n SENDs are written (while replies are read
 * as they arrive), then the n replies are matched to the items in order. Far
 * faster than n hg_send calls: one round trip instead of n.
 *
 * Each item gets its own outcome (err, id or error). A broker error for one
 * item does not stop the others. If the connection breaks, the items whose
 * replies did not arrive are sent again after reconnecting (when
 * opts.resend_sends), else they fail with HG_ERR_IO.
 *
 * Returns HG_OK when every item succeeded; otherwise the code of the first
 * failed item (its message also in hg_client_errmsg). *ok_count (may be
 * NULL) receives the number of items that succeeded. */
hg_err_t hg_send_many(hg_client_t *c, hg_send_item_t *items, size_t n, size_t *ok_count);

/* Send one message unless a live one with the same topic and key exists:
 * SEND topic payload KEY key DEDUP [delay]. key must be non-empty. Live =
 * delayed, ready, leased or retrying (see hg_msg_state_t; a message only in a
 * DLQ is not live). *duplicate (may be NULL) is 1 when the broker stored
 * nothing and id_out names the live message, 0 when it stored a new one
 * (durable, as hg_send). A resend after a lost connection is answered with the
 * first one's id: DEDUP makes the retry exact. Returns as hg_send. On
 * amqp:// every call sends and *duplicate is 0: RabbitMQ keeps no index by
 * key (the same for hg_send_item_t.dedup). */
hg_err_t hg_send_dedup(hg_client_t *c, const char *topic, const char *key, const void *payload, size_t len,
                       hg_delay_t delay, char *id_out, int *duplicate);

/* --- finding and taking back messages (GET, FIND, REVOKE) --- */

#define HG_NAME_MAX 256  /* a topic or group name, with its NUL */
#define HG_KEY_MAX  1025 /* a message key (at most 1024 bytes), with its NUL */

/* Where a message is. Overall (hg_msg_info_t.state): DELAYED, READY, LEASED,
 * RETRY, DLQ or GONE, the first that applies in that order. Per group
 * (hg_msg_group_t.state): READY, LEASED, RETRY, DLQ or DONE. */
typedef enum hg_msg_state {
    HG_MSG_GONE = 0, /* the broker holds no copy: never sent, consumed everywhere, revoked, dropped */
    HG_MSG_DELAYED,  /* on its SEND journey in a level queue */
    HG_MSG_READY,    /* in the topic log, not yet taken by a group (or the topic has no group) */
    HG_MSG_LEASED,   /* a group holds a lease on it */
    HG_MSG_RETRY,    /* a group gets it again later (a delayed retry) or now (retry-ready) */
    HG_MSG_DLQ,      /* parked in a group's DLQ */
    HG_MSG_DONE      /* per group only: that group took and acknowledged it */
} hg_msg_state_t;

/* "gone", "delayed", "ready", "leased", "retry", "dlq", "done"; "unknown"
 * outside the enum. */
const char *hg_msg_state_name(hg_msg_state_t state);

/* 1 for the live states (DELAYED, READY, LEASED, RETRY): what DEDUP tests. */
int hg_msg_state_live(hg_msg_state_t state);

/* One group's copy of a message. */
typedef struct hg_msg_group {
    char group[HG_NAME_MAX];
    hg_msg_state_t state;       /* READY, LEASED, RETRY, DLQ or DONE */
    uint32_t reconsume;         /* that copy's failures so far */
    uint64_t deadline_ms;       /* LEASED: the lease's deadline */
    int level;                  /* RETRY: the level it waits on, 0 = retry-ready now */
    uint64_t due_ms;            /* RETRY on a level: when it is ready again */
    uint64_t parked_ms;         /* DLQ: when it was parked */
    char reason[HG_REASON_MAX]; /* the last failure reason ("" when none; cut to fit) */
} hg_msg_group_t;

/* A message as GET and FIND describe it. */
typedef struct hg_msg_info {
    char id[HG_ID_MAX];
    hg_msg_state_t state; /* overall; GONE leaves every other field empty */
    char topic[HG_NAME_MAX];
    char key[HG_KEY_MAX]; /* NUL-terminated; key_len bytes (binary keys) */
    size_t key_len;
    void *payload; /* hg_msg_get only (NULL from hg_msg_find); owned by the info */
    size_t payload_len;
    uint64_t created_ms;    /* when SEND accepted it */
    uint64_t due_ms;        /* the end of its current journey (its SEND's; a retry's once only groups hold it) */
    int level;              /* DELAYED: the level it waits on */
    uint64_t hop_due_ms;    /* DELAYED: when it leaves that level */
    int hops_left;          /* DELAYED: hops still to come after it */
    uint32_t reconsume;     /* the highest over the groups' copies */
    size_t ngroups;         /* the groups holding a copy and, while it is in the topic log, every group of its topic */
    hg_msg_group_t *groups; /* owned by the info */
} hg_msg_info_t;

/* GET id: HG_OK and *out (free with hg_msg_info_free), also for an id the
 * broker no longer holds (state HG_MSG_GONE); HG_ERR_ARG for an id that is
 * not 16 hex digits; else the codes of hg_client_command. On failure *out
 * is NULL (nothing to free). */
hg_err_t hg_msg_get(hg_client_t *c, const char *id, hg_msg_info_t **out);
void hg_msg_info_free(hg_msg_info_t *info);

/* FIND topic key: the messages of topic with that key the broker still holds
 * (not GONE), in id order, without payloads. HG_OK with *out (an array of *n
 * infos, NULL when *n is 0; free with hg_msg_infos_free) or an error code,
 * with *out NULL and *n 0 (freeing them is harmless). */
hg_err_t hg_msg_find(hg_client_t *c, const char *topic, const char *key, hg_msg_info_t **out, size_t *n);
void hg_msg_infos_free(hg_msg_info_t *infos, size_t n);

#define HG_REVOKE_REFUSED_MAX 16

/* What a REVOKE did. */
typedef struct hg_revoke_result {
    uint64_t revoked;      /* taken back, in all */
    uint64_t from_delayed; /* of them, from a level queue (DELAYED) */
    uint64_t from_ready;   /* of them, from the topic log (READY, no group had taken it) */
    uint64_t refused_total;
    size_t nrefused; /* the first HG_REVOKE_REFUSED_MAX refusals */
    struct {
        char id[HG_ID_MAX];
        char reason[HG_ERRMSG_MAX]; /* "already delivered to group g (leased)", "gone" */
    } refused[HG_REVOKE_REFUSED_MAX];
} hg_revoke_result_t;

/* REVOKE id / REVOKE topic KEY key: take back the messages no group has
 * received yet (DELAYED, or READY with no group past it), atomically. HG_OK
 * with *res (may be NULL) — revoked may be 0 with the reasons in refused[];
 * HG_ERR_ARG for a bad id, topic or key; else the codes of hg_client_command. */
hg_err_t hg_msg_revoke_id(hg_client_t *c, const char *id, hg_revoke_result_t *res);
hg_err_t hg_msg_revoke_key(hg_client_t *c, const char *topic, const char *key, hg_revoke_result_t *res);

/* --- delay levels --- */

typedef struct hg_levels hg_levels_t;

typedef enum hg_round {
    HG_ROUND_UP,     /* the smallest level >= timeout: never early */
    HG_ROUND_NEAREST /* the level closest to the timeout; ties to the larger */
} hg_round_t;

/* Parse a level table spec, e.g. "1s 5s 10s 30s 1m" (durations with units
 * ms/s/m/h/d, blanks or commas between, strictly increasing).
 * Returns HG_OK and *out (free with hg_levels_free), or HG_ERR_ARG with the
 * cause in err (e.g. "level 3 (5s) is not greater than level 2 (10s)"). */
hg_err_t hg_levels_parse(const char *spec, hg_levels_t **out, hg_error_t *err);

/* Ask the broker for its table (the LEVELS command). Returns HG_OK and *out
 * (free with hg_levels_free), or an error as hg_client_command. */
hg_err_t hg_levels_fetch(hg_client_t *c, hg_levels_t **out);

/* The number of levels, and the delay of level n (1..count; 0 out of range). */
int hg_levels_count(const hg_levels_t *l);
uint64_t hg_levels_delay_ms(const hg_levels_t *l, int level);

/* Free a table. NULL is fine. */
void hg_levels_free(hg_levels_t *l);

/* A table is only read once made: hg_levels_count, hg_levels_delay_ms and
 * hg_level_for may share one between threads (until hg_levels_free). */

/* The one level for a timeout, RocketMQ style, in the table l (NULL: the
 * default table 1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h).
 * HG_ROUND_UP: the smallest level whose delay >= timeout_ms (a timeout above
 * the last level gets the last level, 0 gets level 1). HG_ROUND_NEAREST: the
 * level with the smallest |delay - timeout_ms|, ties to the larger.
 * Returns a level in 1..count. Thread-safe. */
int hg_level_for(const hg_levels_t *l, uint64_t timeout_ms, hg_round_t mode);

/* ------------------------------------------------------------------------
 * Consumer loop
 * ------------------------------------------------------------------------ */

typedef struct hg_consumer hg_consumer_t;

/* One delivered message, as the handler sees it. Every pointer belongs to the
 * worker and is valid only during the handler call: copy what must outlive it. */
typedef struct hg_message {
    const char *id; /* the message id (for logs; the worker ACKs) */
    const char *topic;
    const char *key; /* "" when the message has no key */
    size_t key_len;
    const void *payload; /* payload_len bytes, followed by a NUL byte */
    size_t payload_len;
    unsigned reconsume; /* earlier failures reported to the broker */
    uint64_t due_ms;    /* when it was due (Unix ms) */
    unsigned attempt;   /* local attempt: 0, then 1.. on local retries */
    int worker;         /* 0 .. workers-1: the worker running the handler */
} hg_message_t;

typedef enum hg_outcome {
    HG_DONE = 0, /* handled: the worker ACKs it */
    HG_RETRY,    /* transient failure: retried locally with backoff, then
                      NACKed so the broker's level schedule takes over */
    HG_FAIL      /* permanent failure: NACK … DLQ at once — straight to the
                      DLQ with the reason, no retries (DLQ LIST shows it) */
} hg_outcome_t;

/* The handler. Runs on a worker thread, up to `workers` at a time (one per
 * worker), so it must be thread-safe across workers. reason is a buffer of
 * reason_size (HG_REASON_MAX) bytes, "" on entry: on HG_RETRY or HG_FAIL write
 * why (it is sent as the NACK's REASON). */
typedef hg_outcome_t (*hg_handler_fn)(const hg_message_t *msg, char *reason, size_t reason_size, void *arg);

/* One message of a batch (hg_batch_handler_fn): the message and the
 * handler's answer for it. */
typedef struct hg_batch_item {
    hg_message_t msg;           /* as a handler sees it; valid during the call */
    hg_outcome_t outcome;       /* the answer: HG_RETRY on entry (an item left
                                   alone is retried, never ACKed unhandled) */
    char reason[HG_REASON_MAX]; /* "" on entry: why, for HG_RETRY and HG_FAIL */
} hg_batch_item_t;

/* The batch handler: the messages of one PULL (those that parse; up to
 * `count`) at once, so that it can handle them together — e.g. cancel them
 * in one database transaction (hourglass-consumer's batch-size). It sets
 * items[i].outcome (and reason) for each. The worker then ACKs every HG_DONE
 * message in one ACK, NACKs each HG_FAIL straight to the DLQ, and calls the
 * handler again after the retry backoff with only the HG_RETRY ones (their
 * msg.attempt counting up), NACKing them when the attempts run out. Runs on
 * worker threads like hg_handler_fn. */
typedef void (*hg_batch_handler_fn)(hg_batch_item_t *items, size_t n, void *arg);

/* A log line from a worker: level 0 error, 1 warning, 2 info. Called from
 * worker threads (and the lease watchdog); must be thread-safe. */
typedef void (*hg_log_fn)(int level, const char *message, void *arg);

#define HG_TOUCH_NEVER UINT32_MAX

typedef struct hg_consumer_opts {
    const char *uri;                /* required: as hg_client_open */
    const hg_client_opts_t *client; /* NULL: defaults (timeouts, reconnect) */
    const char *group;              /* required: the consumer group */
    const char *topic;              /* required: the topic the group reads */
    int workers;                    /* threads, each with its own connection;
                                      default 1, 1..256 */
    int count;                      /* messages per PULL; default 1, 1..1000 */
    uint32_t block_ms;              /* PULL BLOCK: wait this long for a message;
                                      default 5000, 1..86400000 */
    uint32_t lease_ms;              /* PULL LEASE: time to ACK/NACK before the
                                      broker redelivers; default 30000 */
    uint32_t touch_interval_ms;     /* renew the lease of unfinished messages this
                                      often (TOUCH); default 0 = lease_ms / 2;
                                      HG_TOUCH_NEVER disables it */
    hg_backoff_t retry;             /* local retries of HG_RETRY; default base
                                      200 ms, factor 2, cap 5 s, attempts 3,
                                      jitter 0.2 */
    hg_handler_fn handler;          /* required, unless batch_handler is set */
    void *handler_arg;              /* passed to handler or batch_handler */
    hg_log_fn log;                  /* optional; NULL: silent */
    void *log_arg;
    hg_batch_handler_fn batch_handler; /* instead of handler (exactly one of the two): each PULL's
                                          messages in one call */
} hg_consumer_opts_t;

/* Fill *opts with the defaults (uri, group, topic and handler NULL). */
void hg_consumer_opts_init(hg_consumer_opts_t *opts);

/* Create a consumer. Checks the options and the URI (nothing connects yet);
 * copies every string, so opts may be discarded afterwards — opts->client's
 * user and password too (the caller may wipe its password at once); only
 * opts->client's tls_* paths must stay valid (hg_client_opts_t).
 * Returns HG_OK and *out (free with hg_consumer_free after hg_consumer_run
 * returned), or HG_ERR_ARG / HG_ERR_URI / HG_ERR_UNSUPPORTED / HG_ERR_SYSTEM
 * with the cause in err (e.g. "workers 0 out of range 1..256"). */
hg_err_t hg_consumer_new(const hg_consumer_opts_t *opts, hg_consumer_t **out, hg_error_t *err);

/* Run the workers and block until hg_consumer_stop. Each worker loops: PULL
 * group topic COUNT n BLOCK ms LEASE ms; for each message call the handler;
 * HG_DONE → ACK; HG_RETRY → call it again after hg_backoff_delay(retry, k)
 * for k < retry.attempts, then NACK REASON; HG_FAIL → NACK DLQ REASON. While a
 * worker holds messages, a watchdog thread TOUCHes their leases every
 * touch_interval_ms. A lost connection is reconnected with the client's
 * backoff, for as long as it takes; the worker never gives up on its own,
 * except when the broker refuses the credentials (HG_ERR_AUTH), wants some
 * and the consumer has none (NOAUTH, also HG_ERR_AUTH) or the user may not
 * PULL (NOPERM): those stay wrong, so the consumer stops.
 * On stop: the PULL waits and backoff sleeps are cut short, messages already
 * in hand are finished (handlers are never interrupted), then the workers
 * exit. The messages a worker could not ACK come back after their lease.
 *
 * Returns HG_OK after a stop; HG_ERR_ARG if it is already running or ran
 * before (a consumer runs once); HG_ERR_SYSTEM if a thread cannot start;
 * HG_ERR_AUTH (credentials refused or missing) or HG_ERR_SERVER (NOPERM) when it
 * stopped by itself for that reason (hg_consumer_last_error says which). */
hg_err_t hg_consumer_run(hg_consumer_t *c);

/* Ask hg_consumer_run to return. Async-signal-safe (an atomic store and a
 * write to a pipe) and thread-safe; may be called before run (run then
 * returns at once) and more than once. */
void hg_consumer_stop(hg_consumer_t *c);

/* Give every client of c (its workers' and its watchdog's) fd as its stop
 * fd (hg_client_set_stop_fd): while fd is readable, every wait for the
 * broker — a PULL, an ACK or NACK of a message in hand, a TOUCH, a
 * reconnect — ends at once with HG_ERR_STOPPED. For a bounded stop:
 * hg_consumer_stop lets the workers finish the messages in hand, which a
 * broker that stopped answering holds for read_timeout_ms per call; making
 * fd readable a while after it ends those waits. A message whose ACK or
 * NACK was cut stays leased and comes back when its lease ends. -1 (the
 * default) turns it off; c never reads or closes fd. Before hg_consumer_run,
 * on the thread that calls it. */
void hg_consumer_set_stop_fd(hg_consumer_t *c, int fd);

/* What happened to a consumer's connection to the broker. A callback should
 * ignore a value it does not know: later interfaces may add some. */
typedef enum hg_conn_event {
    HG_CONN_CONNECTED = 1,   /* a client's first connection (each worker's, the watchdog's) */
    HG_CONN_RECONNECTED = 2, /* a client connected again after it lost its connection: the broker is back */
    HG_CONN_ANSWERED = 3,    /* a worker's PULL was answered after the broker refused its PULLs with an error
                                reply (a full disk, a group bound to another topic): the refusals ended
                                (interface 3) */
    HG_CONN_REFUSED = 4      /* the broker refused a worker's PULL with an error reply, the first since that
                                worker's last answered PULL (or its start): the broker answers but will not
                                deliver; HG_CONN_ANSWERED from the same worker ends it (interface 3) */
} hg_conn_event_t;

/* Told of a connection event: who is the client's owner ("worker 2",
 * "watchdog"), address the node connected, as hg_client_address ("host:port";
 * on amqp:// with several hosts, the live one). Both strings are valid
 * during the call only. Runs on the thread that owns the client (a worker or
 * the lease watchdog), so several at once: must be thread-safe, return soon
 * (that thread waits) and not call hg_consumer_* functions other than
 * hg_consumer_stats and hg_consumer_stop. */
typedef void (*hg_conn_event_fn)(hg_conn_event_t event, const char *who, const char *address, void *arg);

/* Call fn(event, who, address, arg) each time a client of c connects: once
 * per connect or reconnect noticed (several reconnects between two calls of
 * that client's are one event; hg_consumer_stats' reconnects counts them
 * all), before the info line "<who>: connected to <address>" /
 * "<who>: reconnected to <address>" goes to opts.log. For a worker's PULLs
 * also: HG_CONN_REFUSED on the first PULL the broker refuses with an error
 * reply since the worker started or its last PULL was answered, before that
 * error goes to opts.log — a refusal that stops the consumer (NOAUTH,
 * NOPERM) too; and HG_CONN_ANSWERED on the worker's first answered PULL
 * after that, before the info line "<who>: PULL answered again after
 * refusals". Connection failures between the two do not matter, so each
 * worker's events alternate REFUSED, ANSWERED, REFUSED, ... (a consumer
 * that stops while refused ends on REFUSED). The structured way to learn
 * that the broker is back or refusing: the log's text and levels are for
 * people and may change. NULL (the default) turns it off. Before
 * hg_consumer_run, on the thread that calls it; c NULL: nothing. */
void hg_consumer_set_conn_event_fn(hg_consumer_t *c, hg_conn_event_fn fn, void *arg);

/* Counters since hg_consumer_new, for metrics. */
typedef struct hg_consumer_stats {
    uint64_t delivered;  /* messages received from PULL */
    uint64_t done;       /* handler returned HG_DONE and the ACK was attempted
                            (a failed ACK also counts in errors) */
    uint64_t retried;    /* local retries (handler calls after HG_RETRY) */
    uint64_t nacked;     /* NACKs after local retries ran out (or on stop) */
    uint64_t failed;     /* handler returned HG_FAIL (NACK with the reason) */
    uint64_t touched;    /* TOUCHes sent to renew leases */
    uint64_t lease_lost; /* ACK/NACK/TOUCH answered 0: the lease had expired and
                            the broker will deliver the message again */
    uint64_t errors;     /* calls that failed after the client's own retries
                            (connection, broker and protocol errors) */
    uint64_t reconnects; /* connections re-established by workers and the
                            watchdog (a broker restart shows here even when
                            no call failed: commands are resent transparently) */
} hg_consumer_stats_t;

/* Copy the counters into *out. Thread-safe (each counter is read atomically;
 * the set is not one snapshot). */
void hg_consumer_stats(const hg_consumer_t *c, hg_consumer_stats_t *out);

/* The last error a worker met (a lost connection, a broker error, a failed
 * thread start), copied into *out; HG_OK and "" when none. Thread-safe. The
 * same text went to the log callback. Returns out->code. */
hg_err_t hg_consumer_last_error(const hg_consumer_t *c, hg_error_t *out);

/* How long every worker's PULL has been failing, in ms: 0 while at least
 * one worker's last PULL was answered (or none has failed yet); else the
 * time since the last of them failed — the broker cannot be reached, refuses
 * the credentials, or answers PULL with an error — after the client's own
 * retries. What a daemon's /healthz reports about the broker (the text is
 * hg_consumer_last_error). Thread-safe; 0 before and after hg_consumer_run. */
uint64_t hg_consumer_pull_failing_ms(const hg_consumer_t *c);

/* Free a consumer that is not running. NULL is fine. */
void hg_consumer_free(hg_consumer_t *c);

#ifdef __cplusplus
}
#endif

/* The order cancel on MySQL/MariaDB (hg_order_cancel, hg_order_pay): part of
 * libhourglass, declared in its own header next to this one. Included by
 * relative name so it resolves both in the source tree and installed. */
#include "order.h"

#endif
