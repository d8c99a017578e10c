/*
 * broker/conn_internal.h — the connection package's private header: the state
 * behind conn_set_t and a reply slot, and the functions its files share. Not
 * installed; only the package's own files (below) include it. The public
 * contract is conn.h.
 *
 * The files of the package (each opens with its own design comment):
 *   conn.c          the set: the id map and list of open connections, the
 *                   set's API (new, free, shutdown, CLIENT LIST / KILL, stats)
 *   conn_close.c    closing: detach, the reaper, draining and lingering
 *   conn_reply.c    the reply FIFO: writing replies, completions from the
 *                   storage thread
 *   conn_request.c  requests: parsing the input (with the cross-protocol and
 *                   TLS-on-the-plaintext-port guards) and dispatch
 *   conn_accept.c   accepting: a socket becomes a connection; its
 *                   bufferevent's callbacks (the TLS handshake, timeouts, EOF)
 *   conn_sweep.c    the sweep: header-timeout and max-client-memory
 *
 * Memory safety rules (every file):
 *  - a connection is never freed inside a callback chain: conn_close detaches
 *    it (out of the id map, callbacks cleared) and queues it; the reaper
 *    event frees it on a later loop turn;
 *  - a storage completion finds its connection by id; a closed connection is
 *    not in the map, so its late completions are simply freed;
 *  - every reply goes through conn_write_reply (conn_reply.c), which enforces
 *    max-reply-buffer.
 *
 * Threading: everything here runs on the event-loop thread.
 */
#ifndef HG_BROKER_CONN_INTERNAL_H
#define HG_BROKER_CONN_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include <event2/event.h>

#include "base/idmap.h"
#include "base/map.h"
#include "broker/conn.h"
#include "common/log_limit.h"
#include "proto/reply.h"

#define CONN_REFUSE_BUDGET_BYTES (64u << 20) /* a stop reads at most this much unread input in all */
#define REFUSAL_LOG_MS           1000        /* refusal_log's interval */
#define HIDDEN_LOG_MS            60000 /* the same error with paths hidden: logged at most once a minute (conn_reply.c) */

#define CONN_DRAIN_TIMEOUT_MS 10000 /* a draining client must read its last replies by then */


struct reply_slot {
    reply_slot_t *next;
    uint64_t seq; /* storage slots: the job's seq */
    int filled;
    int blocking; /* the blocking PULL of this connection */
    int holds;    /* an AUTH: parsing waits until it is written */
    job_t *job;   /* storage reply */
    char *data;   /* loop reply (copied) */
    size_t len;
    size_t charge;   /* bytes counted in the connection's inflight_bytes for this slot */
    size_t reserved; /* of which not held by the loop until the reply exists (reserved_bytes): a PULL BLOCK's
                        reply estimate, an EXEC's queued SENDs (the storage thread's batch now) */
};

struct conn_set {
    const config_t *cfg;
    struct event_base *base;
    server_t *srv; /* for the commands (cmd_call_t) */
    writer_t *writer;
    int writer_running;
    int reading;      /* 0 once shutdown began: parse nothing more */
    int draining_all; /* shutdown: break the loop when the last one is freed */
    struct event *reaper;
    struct event *sweep; /* header-timeout and max-client-memory (CONN_SWEEP_MS) */
    idmap_t by_id;       /* open connections by id */
    conn_t *all;         /* open connections */
    conn_t *dead;        /* closed, to free */
    uint64_t next_id;
    uint64_t nconns, nblocked;
    uint64_t ntls, tls_total; /* connections from tls-port: open now, accepted since start */
    map_t hs_by_addr;         /* authfail_key -> handshakes in progress from it (a count, as a pointer) */
    uint64_t hs_in_progress, hs_refused;
    resp_buf_t scratch; /* immediate replies */
    /* written reply slots kept for reuse (conn_reply.c), linked by next; no more than the slots that were in
       use at once, trimmed by the sweep */
    reply_slot_t *spare_slots;
    size_t nspare_slots;
    /* counters */
    uint64_t connections_total, protocol_errors, reply_kills, idle_kills, commands;
    uint64_t client_memory, memory_kills, header_kills;
    uint64_t woken_delivered; /* bytes of PULL BLOCK replies received from the writer (writer_note_client_memory) */
    /* the paths hidden from a non-admin's error replies (conn_reply.c): copies of cfg's dir, store path and
       backup-dir (those set), NULL-terminated; made at conn_set_new and after each reload, not per reply */
    char *known_paths[4];
    /* error replies whose paths were hidden from a non-admin (conn_reply.c's log_hidden): the same text
       logged at most once per HIDDEN_LOG_MS, with a count */
    log_limit_t hidden_log;
    /* clients closed before their TLS handshake (conn_tls_admit): at most a line per REFUSAL_LOG_MS, with a count */
    log_limit_t refusal_log;
    /* a stop's read of unread requests to refuse them (conn_refuse_unread): bytes left for all connections */
    size_t refuse_budget;
};


/* conn.c: the id map and the list of open connections (and the set's
 * counters of open and TLS connections). */
void conn_link(conn_set_t *s, conn_t *c);
void conn_unlink(conn_set_t *s, conn_t *c);
/* The open connection with this id, or NULL. */
conn_t *conn_find(conn_set_t *s, uint64_t id);
/* Set c->blocked, keeping the set's count of blocked clients. */
void conn_mark_blocked(conn_t *c, int blocked);

/* conn_accept.c: c's handshake is over (done, failed, or c is closing): it
 * no longer counts in its address's handshakes in progress. Idempotent. */
void conn_handshake_release(conn_t *c);

/* conn_reply.c: (re)make s->known_paths from s->cfg (the previous copies
 * freed); conn_known_paths_free frees them. */
void conn_known_paths_set(conn_set_t *s);
void conn_known_paths_free(conn_set_t *s);

/* conn_close.c */
/* Detach c now; free it at the next safe point (the reaper). Idempotent. */
void conn_close(conn_t *c);
/* Free a detached connection and everything its FIFO holds. */
void conn_free(conn_t *c);
/* Free every connection on s's dead list (closed, waiting for a safe point). */
void conn_free_dead(conn_set_t *s);
/* The reaper event's callback (arg = the set): frees the dead list. */
void conn_reaper_cb(evutil_socket_t fd, short what, void *arg);
/* A draining connection whose replies are all written starts lingering. */
void conn_maybe_finish(conn_t *c);
/* At a stop, after the storage thread finished: each complete request c sent
 * that was never run is answered "ERR shutting down: …" (conn_request.c).
 * Returns how many were. */
size_t conn_refuse_unread(conn_t *c);
/* Parse nothing more; close once every queued reply is written. */
void conn_start_draining(conn_t *c);
/* Reply an error (printf format, the whole message: "ERR …") after what is
 * queued, then conn_start_draining: a client told why before it is closed. */
void conn_error_and_drain(conn_t *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* conn_reply.c */
/* A new slot at the tail of c's reply FIFO (seq: a storage job's, else 0),
 * zeroed: a spare of the set's, or a new one. */
reply_slot_t *conn_slot_append(conn_t *c, uint64_t seq);
/* A slot off a FIFO, its job and data already freed or handed on: kept as a
 * spare of s's. */
void conn_slot_release(conn_set_t *s, reply_slot_t *sl);
/* Free s's spare slots but keep of them (the sweep; 0: conn_set_free). */
void conn_spare_slots_trim(conn_set_t *s, size_t keep);
/* A reply computed now: straight out when nothing is ahead of it, else into the FIFO. */
void conn_reply(conn_t *c, const char *data, size_t len);
/* Write filled slots from the head. */
void conn_flush(conn_t *c);

/* conn_accept.c: a TLS connection whose handshake is not complete
 * CONN_TLS_HANDSHAKE_MS after it was accepted is logged and closed (the
 * sweep asks: a deadline from the accept, which bytes trickled in one at a
 * time cannot push back as they would a read timeout). */
void conn_handshake_expired(conn_t *c);

/* conn_request.c: parse and execute what c's input holds, while c may. The
 * bytes parsed stay in the input until the pass ends (c->input_parsed: one
 * drain a pass, not one a command: each drain re-arms the bufferevent's read
 * event); code a command runs that reads or discards c's input calls
 * conn_input_settle first, which drains them now. */
void conn_process_input(conn_t *c);
void conn_input_settle(conn_t *c);

/* conn_sweep.c: the sweep event's callback (arg = the set). */
void conn_sweep_cb(evutil_socket_t fd, short what, void *arg);

/* conn_accept.c: "ip:port" ("[ip]:port" for IPv6) of sa, or "?" for another family. */
struct sockaddr;
void conn_format_addr(const struct sockaddr *sa, char *out, size_t outlen);

#endif
