/*
 * broker/server.h — the event loop side: listener, connections, limits and
 * reply ordering.
 *
 * A connection is a small state machine (STYLE: memcached):
 *   reading  -> commands are parsed (proto/resp.h, limits from the config)
 *               and dispatched one by one;
 *   blocked  -> a PULL BLOCK is outstanding: later commands wait (as Redis);
 *   paused   -> CONN_MAX_PENDING replies outstanding: parsing waits;
 *   draining -> QUIT / protocol error / shutdown: nothing more is parsed, the
 *               connection closes once every queued reply is written (after
 *               a short linger: write side shut, input discarded, so the
 *               last reply is not destroyed by a TCP RST);
 *   closing  -> detached; freed at the next safe point (never inside a
 *               callback chain that may still use it).
 * Reply order equals request order: each request that cannot be answered at
 * once (a storage job) takes a slot in the connection's reply FIFO; replies
 * computed in the loop take a filled slot when the FIFO is not empty; filled
 * slots are written from the head. Storage jobs carry (connection id, slot
 * seq); a completion for a connection that is gone is dropped.
 *
 * Everything here runs on the event-loop thread.
 */
#ifndef HG_BROKER_SERVER_H
#define HG_BROKER_SERVER_H

#include <stddef.h>
#include <stdint.h>

#include <event2/bufferevent.h>
#include <event2/event.h>

#include "broker/config.h"
#include "broker/metrics.h"
#include "broker/writer.h"
#include "proto/resp.h"

#define CONN_MAX_PENDING 1024   /* outstanding replies before parsing pauses */

/* Roles (the security issue assigns them per user; today every client has all). */
#define ROLE_PRODUCER 1u
#define ROLE_CONSUMER 2u
#define ROLE_ADMIN 4u
#define ROLE_ALL (ROLE_PRODUCER | ROLE_CONSUMER | ROLE_ADMIN)

typedef struct server server_t;
typedef struct reply_slot reply_slot_t;

typedef struct conn {
    uint64_t id;                 /* unique for the process lifetime, never 0 */
    server_t *srv;
    struct bufferevent *bev;
    resp_parser_t parser;
    int proto;                   /* RESP_PROTO_2 / RESP_PROTO_3 */
    char addr[64];               /* "ip:port" */
    char name[128];              /* CLIENT SETNAME */
    char last_cmd[24];
    uint64_t created_mono, last_active_mono;
    /* reply FIFO */
    reply_slot_t *slots_head, *slots_tail;
    size_t nslots;
    uint64_t next_seq;
    /* state */
    int blocked;                 /* a blocking PULL is outstanding */
    int draining;                /* close once all replies are written */
    int lingering;               /* replies written, write side shut, discarding input */
    int closing;                 /* detached, freed at a safe point */
    /* security seam: set by AUTH with the users issue */
    int authenticated;
    unsigned roles;              /* ROLE_* bits */
    /* server bookkeeping */
    struct conn *all_next, *all_prev, *hash_next, *dead_next;
} conn_t;

/* Create the server on base (evthread_use_pthreads() must have been called
 * before base was created). Never fails. */
server_t *server_new(const config_t *cfg, struct event_base *base);

/* Bind and listen on cfg bind:port, install SIGTERM/SIGINT handlers and the
 * metrics HTTP listener. 0, or -1 with e.g. "cannot listen on
 * 127.0.0.1:7379: Address already in use" in err. */
int server_listen(server_t *s, char *err, size_t errlen);

/* The port actually bound (after server_listen; differs from cfg with port 0). */
int server_port(const server_t *s);

/* Attach the storage thread: its completions go to the server. */
void server_set_writer(server_t *s, writer_t *w);

/* The writer's callbacks (pass them to writer_new with the server as ctx). */
void server_job_done(job_t *j, void *ctx);
void server_writer_stopped(void *ctx);

/* Run the loop until shutdown is complete. Returns 0. */
int server_run(server_t *s);

/* Begin shutdown: stop accepting, stop reading, let the writer finish its
 * batch and close the store, write the last replies, stop the loop.
 * Idempotent. why is logged. */
void server_shutdown(server_t *s, const char *why);

void server_free(server_t *s);

/* For commands. */
const config_t *server_config(const server_t *s);
writer_t *server_writer(const server_t *s);
void server_loop_info(server_t *s, loop_info_t *li);
/* CLIENT LIST / CLIENT INFO text: one line per client (only: just that one). */
void server_client_list(server_t *s, buf_t *out, const conn_t *only);

#endif
