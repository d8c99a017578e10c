/*
 * broker/conn.h — a client connection and the set of open connections.
 *
 * A connection is a small state machine:
 *   reading  -> commands are parsed (proto/request.h, limits from the config)
 *               and dispatched one by one (broker/commands.h);
 *   blocked  -> a PULL BLOCK is outstanding: later commands wait (as Redis);
 *   paused   -> CONN_MAX_PENDING replies outstanding, or max-inflight-bytes of
 *               requests and replies held for it: parsing waits;
 *   draining -> QUIT / protocol error / shutdown: nothing more is parsed, the
 *               connection closes once every queued reply is written (after
 *               a short linger: write side shut, input discarded, so the
 *               last reply is not destroyed by a TCP RST);
 *   closing  -> detached; freed at the next safe point (never inside a
 *               callback chain that may still use it).
 * A connection accepted on tls-port first completes a TLS handshake (its
 * failure is logged with OpenSSL's reason and closes it); a plaintext
 * connection whose first byte starts a TLS handshake is logged and closed
 * (a TLS client on the wrong port would otherwise wait forever).
 * Reply order equals request order: each request that cannot be answered at
 * once (a storage job) takes a slot in the connection's reply FIFO; replies
 * computed in the loop take a filled slot when the FIFO is not empty; filled
 * slots are written from the head. Storage jobs carry (connection id, slot
 * seq); a completion for a connection that is gone is dropped.
 *
 * The set (conn_set_t) owns every connection: the id map (base/map.h), the
 * list CLIENT LIST walks, the dead list the reaper frees, the loop's
 * counters, and the sweep: every CONN_SWEEP_MS (and at once after a large
 * reply) it closes TLS clients whose handshake is not done
 * CONN_TLS_HANDSHAKE_MS after the accept, clients not logged in within
 * auth-timeout (users-file), clients whose command is older than
 * header-timeout and, while all clients together hold more than
 * max-client-memory, the one that holds most. The server (broker/server.h) owns the listener and hands each
 * accepted socket to conn_accept.
 *
 * Everything here runs on the event-loop thread.
 */
#ifndef HG_BROKER_CONN_H
#define HG_BROKER_CONN_H

#include <stddef.h>
#include <stdint.h>

#include <event2/bufferevent.h>
#include <event2/event.h>
#include <event2/util.h>

#include "base/buf.h"
#include "broker/metrics.h"
#include "broker/settings.h"
#include "broker/users.h"
#include "broker/writer.h"
#include "proto/request.h"

#define CONN_MAX_PENDING      1024  /* outstanding replies before parsing pauses */
#define CONN_SWEEP_MS         200   /* header-timeout and max-client-memory checks */
#define CONN_TLS_HANDSHAKE_MS 10000 /* a TLS client must finish its handshake by then */
#define CONN_ADDR_KEY_SIZE    64    /* an address key (conn_tls_admit) with its NUL */

/* The loop's event priorities (conn_event_base_new): everything runs at
 * CONN_PRIO_DEFAULT, except the events of a TLS connection whose handshake
 * is in progress, at CONN_PRIO_HANDSHAKE — the loop runs them only when no
 * other event is ready, and at most CONN_HANDSHAKES_PER_PASS of them before
 * it looks for other events again. A handshake costs the loop a key
 * exchange and a signature (a fraction of a millisecond with an EC P-256
 * key, milliseconds with RSA); without this, N ClientHellos arriving
 * together were N handshakes run back to back while every logged-in
 * client's command waited behind them (docs/security.md). */
#define CONN_PRIORITIES          3
#define CONN_PRIO_DEFAULT        1 /* libevent's default with 3 priorities: CONN_PRIORITIES / 2 */
#define CONN_PRIO_HANDSHAKE      2
#define CONN_HANDSHAKES_PER_PASS 4

typedef struct server server_t;
struct ssl_st; /* OpenSSL's SSL (common/tls_server.h) */
typedef struct conn_set conn_set_t;
typedef struct reply_slot reply_slot_t;

typedef struct conn {
    uint64_t id; /* unique for the process lifetime, never 0 */
    conn_set_t *set;
    struct bufferevent *bev;
    resp_parser_t parser;
    int proto;      /* RESP_PROTO_2 / RESP_PROTO_3 */
    char addr[64];  /* "ip:port" */
    char name[128]; /* CLIENT SETNAME */
    /* CLIENT SETINFO LIB-NAME / LIB-VER: the client library, shown by CLIENT LIST ("" until set) */
    char lib_name[64], lib_ver[64];
    const char *last_cmd; /* the command table's name of the last command dispatched (static), or NULL */
    uint64_t ncommands;   /* commands executed (the HTTP guard looks at the first) */
    size_t input_parsed;  /* bytes at the input's head the parser has read, drained once a pass (conn_request.c's
                             conn_input_settle; 0 outside conn_process_input) */
    uint64_t created_mono;
    /* the last activity, for idle-timeout and CLIENT LIST's idle: stamped at the first command of a read pass and
       after its last (conn_request.c), and when the output has been written out (conn_accept.c's write_cb); never
       before the activity it stands for, so idle-timeout is never early */
    uint64_t last_active_mono;
    /* reply FIFO */
    reply_slot_t *slots_head, *slots_tail;
    size_t nslots;
    uint64_t next_seq;
    /* state */
    int blocked;                   /* a blocking PULL is outstanding */
    int draining;                  /* close once all replies are written */
    int lingering;                 /* replies written, write side shut, discarding input */
    uint64_t linger_deadline_mono; /* lingering: closed by then at the latest (conn_close.c) */
    int linger_input;              /* lingering: the client sent bytes after the last request read, so only its
                                      EOF or the deadline closes (conn_close.c) */
    int closing;                   /* detached, freed at a safe point */
    /* TLS (common/tls_server.h): the bufferevent is an OpenSSL one */
    int tls;         /* accepted on tls-port */
    int tls_ready;   /* the handshake completed */
    int sniffed;     /* plaintext port: the first input byte was checked for a TLS handshake */
    int hs_counted;  /* counted in its address's handshakes in progress (tls-max-handshakes-per-address) */
    char hs_key[64]; /* that address's key (conn_tls_admit: CONN_ADDR_KEY_SIZE) */
    /* authentication (broker/users.h, cmd_conn.c): without users every
     * connection is authenticated with every role */
    int authenticated;
    unsigned roles;                /* ROLE_* bits */
    char user[USERS_NAME_MAX + 1]; /* the user AUTH logged in as; "" = none ("default") */
    int auth_held;                 /* an AUTH is being verified: parse nothing more until it is answered */
    uint64_t unauth_since_mono;    /* users-file, not logged in: since when (the accept, or a reload's logout) */
    struct cmd_multi *multi;       /* inside MULTI: the queued commands (broker/cmd_multi.c); NULL otherwise */
    /* resource budgets (conn_request.c, conn_sweep.c, docs/operations.md "Resource limits") */
    uint64_t cmd_started_mono; /* when the unfinished command's first byte was parsed; 0: none */
    size_t inflight_bytes;     /* request bytes awaiting replies + replies queued in the FIFO (listings
                                  awaiting theirs at their reply estimate: max-inflight-bytes) */
    size_t reserved_bytes;     /* of which PULL BLOCK reply estimates (waiting, not held) and EXECs' queued SENDs
                                  (the storage thread's batch): not in max-client-memory */
    /* set bookkeeping */
    struct conn *all_next, *all_prev, *dead_next;
} conn_t;

/* The loop's event base, with CONN_PRIORITIES priorities and handshakes
 * limited to CONN_HANDSHAKES_PER_PASS callbacks a pass (see above). NULL
 * when libevent cannot make one. */
struct event_base *conn_event_base_new(void);

/* Loop thread, on tls-port before anything is done for the client at sa:
 * writes the key its handshakes are counted under (authfail_key of its
 * address: IPv6 by its /64) into key[CONN_ADDR_KEY_SIZE], to be handed to
 * conn_accept, which counts the handshake under it. 0 when it may start a
 * handshake; -1 when its address already has tls-max-handshakes-per-address
 * of them in progress — the caller closes it without a word (a TLS client
 * cannot read a plaintext error); counted in INFO's tls_handshakes_refused
 * and logged at most once a second. */
int conn_tls_admit(conn_set_t *set, const struct sockaddr *sa, char key[CONN_ADDR_KEY_SIZE]);

/* A new, empty set on base. srv is handed to the commands (cmd_call_t) as is.
 * Never fails (aborts on out-of-memory). */
conn_set_t *conn_set_new(const config_t *cfg, struct event_base *base, server_t *srv);

/* Close and free every connection, then the set. NULL is fine. */
void conn_set_free(conn_set_t *set);

/* Attach the storage thread: commands become its jobs from now on. */
void conn_set_attach_writer(conn_set_t *set, writer_t *w);

/* A client socket was accepted: make it a connection (TCP_NODELAY, the
 * parser with the configured limits, the idle timeout). ssl (may be NULL:
 * plaintext) is a fresh server-side SSL for a connection on tls-port: the
 * connection owns it, runs the handshake first (within
 * CONN_TLS_HANDSHAKE_MS) and speaks RESP inside TLS; hs_key is then the key
 * conn_tls_admit wrote for sa (NULL with a NULL ssl). 0, or -1 when no
 * bufferevent could be made (fd and ssl are then freed). */
int conn_accept(conn_set_t *set, evutil_socket_t fd, const struct sockaddr *sa, struct ssl_st *ssl, const char *hs_key);

/* Open connections. */
size_t conn_set_count(const conn_set_t *set);

/* The file-system paths a non-admin must not read (the data directory, the
 * store, the backup directory), NULL-terminated; the set's own copies, valid
 * until the next conn_set_config_changed. */
const char *const *conn_set_hidden_paths(const conn_set_t *set);

/* The open connection with this id, or NULL (an AUTH completion finds its
 * connection with it). */
conn_t *conn_by_id(conn_set_t *set, uint64_t id);

/* The users file was reloaded: a connection logged in as a user that is gone
 * or disabled is logged out (NOAUTH from its next command on); the others
 * take their user's new roles. */
void conn_set_users_changed(conn_set_t *set, const users_t *users);

/* The configuration was reloaded (SIGHUP, on the loop thread): the set's
 * copies of what it derives from it once per generation (the known paths
 * hidden from a non-admin's error replies, conn_reply.c) are made again. */
void conn_set_config_changed(conn_set_t *set);

/* The writer's completion callback (ctx = the set): the job's reply fills its
 * slot and the FIFO is written from the head; a job for a connection that is
 * gone is freed. A job with conn_id 0 (HTTP) is its complete()'s to free. */
void conn_job_done(job_t *j, void *ctx);

/* Shutdown, step 1: parse nothing more on any connection. */
void conn_set_stop_reading(conn_set_t *set);

/* Shutdown, step 2 (the writer has stopped: no completion will come): write
 * every connection's filled replies and close each once they are written.
 * When the last connection is freed the loop is broken. Returns the number
 * still open (0: the loop breaks on the next turn). */
size_t conn_set_drain_all(conn_set_t *set);

/* The loop's counters into li (clients, blocked, totals, protocol errors,
 * kills, commands, the memory clients held at the last sweep). */
void conn_set_stats(const conn_set_t *set, loop_info_t *li);

/* CLIENT KILL's filter: every field set must match (id 0, addr NULL, user
 * NULL: any). user is the name CLIENT LIST shows ("default" for a
 * connection without a user that needs none, "-" before AUTH). */
typedef struct conn_kill_filter {
    uint64_t id;
    const char *addr; /* "ip:port" */
    const char *user;
    int skip_self; /* 1: never the caller's own connection */
} conn_kill_filter_t;

/* Close every connection matching f, each logged with who asked (self,
 * the caller). Others are closed at once (their queued replies dropped);
 * self, when it matches, only after its reply (*self_matched = 1: the
 * caller sets close_after). Returns how many matched. */
size_t conn_kill(conn_set_t *set, const conn_kill_filter_t *f, conn_t *self, int *self_matched);

/* The user name CLIENT LIST shows for c. */
const char *conn_user_shown(const conn_t *c);

/* CLIENT LIST / CLIENT INFO text: one line per client (only: just that one). */
void conn_list(const conn_set_t *set, buf_t *out, const conn_t *only);

#endif
