/*
 * broker/conn_reply.c — the reply FIFO of a client connection: replies
 * computed in the loop, storage replies as they complete (conn_job_done),
 * and writing them to the socket in request order. A written slot goes to
 * the set's spares for the next request's, instead of a malloc and a free
 * for every request; the sweep trims the spares a burst left (conn_sweep.c).
 *
 * Invariants: reply order equals request order — a request answered by a
 * storage job takes a slot; a reply computed now goes straight out only
 * when the FIFO is empty, else into a filled slot; filled slots are written
 * from the head. Every reply goes through conn_write_reply, which enforces
 * max-reply-buffer. inflight_bytes holds each slot's charge (a request's
 * reply estimate until the reply exists, then the reply's length).
 * conn_write_reply is also where file-system paths leave the error replies
 * of a client that is not an admin (broker/redact.h): one place for every
 * reply, computed in the loop or by the storage thread; the log keeps the
 * whole text.
 *
 * Thread: everything here runs on the event-loop thread. The only entry
 * from the storage thread is conn_job_done, which the writer calls on this
 * thread (through its completion event).
 */
#include <stdlib.h>
#include <string.h>

#include <event2/buffer.h>

#include "base/alloc.h"
#include "broker/commands.h"
#include "broker/conn_internal.h"
#include "broker/redact.h"
#include "common/log.h"

#define CONN_SWEEP_NOW_BYTES     (1u << 20)  /* a reply this large runs the memory sweep at once */
#define REPLY_BY_REFERENCE_BYTES (64u << 10) /* storage replies this large are not copied (conn_write_reply) */

/* Called by the output buffer once a reply added by reference is written (or the connection freed). */
static void job_reply_written(const void *data, size_t len, void *arg)
{
    (void)data;
    (void)len;
    job_free(arg);
}

/* Log the whole text of error replies whose paths were hidden from client c
 * (the operator needs the paths): one line per new text, the same text again
 * at most once per HIDDEN_LOG_MS (a producer retrying against a failed disk
 * would write thousands a second), saying how many were not logged
 * (common/log_limit.h, keyed by the text). */
static void log_hidden(conn_t *c, const buf_t *hidden)
{
    char key[LOG_LIMIT_KEY_MAX];
    size_t keep = hidden->len < sizeof key - 1 ? hidden->len : sizeof key - 1;
    memcpy(key, hidden->data, keep);
    key[keep] = '\0';
    log_limit_fail(&c->set->hidden_log, LOG_LEVEL_WARN, key,
                   "error reply to client id=%llu addr=%s user=%s, its paths hidden (not an admin): %.*s",
                   (unsigned long long)c->id, c->addr,
                   !c->authenticated    ? "(not logged in)"
                   : c->user[0] != '\0' ? c->user
                                        : "default",
                   (int)hidden->len, hidden->data);
}

/* Append a reply to the socket's output, unless the client already has
 * more than max-reply-buffer unread: then it is disconnected. With job (its
 * reply is data) and a reply of REPLY_BY_REFERENCE_BYTES or more, the
 * output takes the job's buffer by reference and frees the job once it is
 * written, instead of copying it: copying a listing of several MiB cost
 * the loop tens of milliseconds (a fresh buffer's page faults) while every
 * other client's reply waited behind it. Otherwise the bytes are copied
 * (and job, if any, freed). -1 when the connection was closed. */
static int conn_output_reply(conn_t *c, const char *data, size_t len, job_t *job)
{
    if (c->closing) {
        job_free(job);
        return -1;
    }
    struct evbuffer *out = bufferevent_get_output(c->bev);
    size_t waiting = evbuffer_get_length(out);
    if (waiting > (size_t)c->set->cfg->max_reply_buffer) {
        c->set->reply_kills++;
        log_warn("closing client id=%llu addr=%s: %zu bytes of replies unread, over max-reply-buffer %lld "
                 "(the client is not reading)",
                 (unsigned long long)c->id, c->addr, waiting, c->set->cfg->max_reply_buffer);
        job_free(job);
        conn_close(c);
        return -1;
    }
    int rc = 0;
    if (job != NULL && len >= REPLY_BY_REFERENCE_BYTES) {
        rc = evbuffer_add_reference(out, data, len, job_reply_written, job);
        if (rc != 0) {
            job_free(job);
        }
    } else {
        rc = len > 0 ? evbuffer_add(out, data, len) : 0;
        job_free(job);
    }
    if (rc != 0) {
        log_error("client id=%llu: out of memory for a reply; closing", (unsigned long long)c->id);
        conn_close(c);
        return -1;
    }
    if (len >= CONN_SWEEP_NOW_BYTES && c->set->cfg->max_client_memory > 0) {
        event_active(c->set->sweep, EV_TIMEOUT, 0); /* check the budget before the next turn's reads */
    }
    return 0;
}

void conn_known_paths_free(conn_set_t *s)
{
    for (size_t i = 0; s->known_paths[i] != NULL; i++) {
        free(s->known_paths[i]);
        s->known_paths[i] = NULL;
    }
}

void conn_known_paths_set(conn_set_t *s)
{
    conn_known_paths_free(s);
    const config_t *cfg = s->cfg;
    const char *paths[] = { cfg->dir, cfg->store.path, cfg->backup_dir };
    size_t n = 0;
    for (size_t i = 0; i < sizeof paths / sizeof paths[0]; i++) {
        if (paths[i] != NULL) {
            s->known_paths[n++] = xstrdup(paths[i]);
        }
    }
    s->known_paths[n] = NULL;
}

const char *const *conn_set_hidden_paths(const conn_set_t *s)
{
    return (const char *const *)s->known_paths;
}

void conn_set_config_changed(conn_set_t *s)
{
    conn_known_paths_set(s);
}

/* conn_output_reply of what client c may read: to a client without the
 * admin role (users-file set; without it every client has every role), each
 * file-system path in an error reply replaced (broker/redact.h), the whole
 * text logged. The paths are the set's copies (conn_known_paths_set), made
 * once per configuration, not per reply. */
static int conn_write_reply(conn_t *c, const char *data, size_t len, job_t *job)
{
    if ((c->roles & ROLE_ADMIN) || c->closing) {
        return conn_output_reply(c, data, len, job);
    }
    buf_t shown = BUF_INIT, hidden = BUF_INIT;
    if (redact_reply(data, len, (const char *const *)c->set->known_paths, &shown, &hidden) == 0) {
        return conn_output_reply(c, data, len, job);
    }
    log_hidden(c, &hidden);
    job_free(job);
    int rc = conn_output_reply(c, shown.data, shown.len, NULL);
    buf_free(&shown);
    buf_free(&hidden);
    return rc;
}

static int conn_write(conn_t *c, const char *data, size_t len)
{
    return conn_write_reply(c, data, len, NULL);
}

reply_slot_t *conn_slot_append(conn_t *c, uint64_t seq)
{
    conn_set_t *s = c->set;
    reply_slot_t *sl = s->spare_slots;
    if (sl != NULL) {
        s->spare_slots = sl->next;
        s->nspare_slots--;
    } else {
        sl = xmalloc(sizeof *sl);
    }
    memset(sl, 0, sizeof *sl);
    sl->seq = seq;
    if (c->slots_tail) {
        c->slots_tail->next = sl;
    } else {
        c->slots_head = sl;
    }
    c->slots_tail = sl;
    c->nslots++;
    return sl;
}

void conn_slot_release(conn_set_t *s, reply_slot_t *sl)
{
    sl->next = s->spare_slots;
    s->spare_slots = sl;
    s->nspare_slots++;
}

void conn_spare_slots_trim(conn_set_t *s, size_t keep)
{
    while (s->nspare_slots > keep) {
        reply_slot_t *sl = s->spare_slots;
        s->spare_slots = sl->next;
        s->nspare_slots--;
        free(sl);
    }
}

/* A reply computed now: straight out when nothing is ahead of it, else into the FIFO. */
void conn_reply(conn_t *c, const char *data, size_t len)
{
    if (c->closing) {
        return;
    }
    if (c->nslots == 0) {
        conn_write(c, data, len);
        return;
    }
    reply_slot_t *sl = conn_slot_append(c, 0);
    sl->data = xmalloc(len ? len : 1);
    memcpy(sl->data, data, len);
    sl->len = len;
    sl->filled = 1;
    sl->charge = len;
    c->inflight_bytes += len;
}

/* Write filled slots from the head. */
void conn_flush(conn_t *c)
{
    while (!c->closing && c->slots_head && c->slots_head->filled) {
        reply_slot_t *sl = c->slots_head;
        c->slots_head = sl->next;
        if (c->slots_head == NULL) {
            c->slots_tail = NULL;
        }
        c->nslots--;
        c->inflight_bytes -= sl->charge;
        if (sl->blocking) {
            conn_mark_blocked(c, 0);
        }
        if (sl->holds) {
            c->auth_held = 0;
        }
        if (sl->job) {
            conn_write_reply(c, sl->job->reply.raw.data, sl->job->reply.raw.len, sl->job);
        } else {
            conn_write(c, sl->data, sl->len);
            free(sl->data);
        }
        conn_slot_release(c->set, sl);
    }
}

/* ---- completions from the storage thread ---------------------------------------------- */

void conn_job_done(job_t *j, void *ctx)
{
    conn_set_t *s = ctx;
    s->woken_delivered += j->woken_bytes; /* from now on in the connection's memory (or freed), not in flight */
    uint64_t conn_id = j->conn_id;        /* read first: complete() may free an HTTP job */
    if (j->complete) {
        j->complete(j);
    }
    if (conn_id == 0) {
        return;
    } /* HTTP: complete() owned and freed it */
    if (j->audit != NULL) {
        cmd_audit_done(j);
    }
    conn_t *c = conn_find(s, conn_id);
    if (c == NULL) {
        job_free(j);
        return;
    }
    reply_slot_t *sl = c->slots_head;
    while (sl && !(sl->seq == j->seq && !sl->filled)) {
        sl = sl->next;
    }
    if (sl == NULL) {
        job_free(j);
        return;
    }
    sl->job = j;
    sl->filled = 1;
    c->inflight_bytes -= sl->charge; /* the estimate gives way to the real reply */
    c->reserved_bytes -= sl->reserved;
    sl->reserved = 0;
    sl->charge = j->reply.raw.len;
    c->inflight_bytes += sl->charge;
    conn_flush(c);
    if (c->closing) {
        return;
    }
    if (c->draining) {
        conn_maybe_finish(c);
        return;
    }
    conn_process_input(c);
}
