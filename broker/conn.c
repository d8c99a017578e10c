/*
 * broker/conn.c — the set of client connections (contract: conn.h; the
 * package's files: conn_internal.h): the id map and the list of open
 * connections, the set's life (new, free, attaching the writer), shutdown
 * (stop reading, drain all), the users file reloaded (a removed or
 * disabled user logged out; a connection whose waiting PULL … BLOCK its
 * user may no longer run closed), the loop's counters,
 * and CLIENT LIST / CLIENT KILL over the list.
 *
 * Invariants: a connection is in the id map and on the list exactly while it
 * is open (conn_link at accept, conn_unlink at conn_close); nconns, ntls and
 * nblocked count what is on the list. A closed connection is on the dead list
 * until the reaper (conn_close.c) frees it.
 *
 * Thread: everything here runs on the event-loop thread.
 */
#include "broker/conn.h"

#include <stdio.h>
#include <sys/socket.h>
#include <stdlib.h>
#include <string.h>

#include <event2/buffer.h>

#include "base/alloc.h"
#include "base/clock.h"
#include "base/map.h"
#include "broker/cmd_shared.h"
#include "broker/commands.h"
#include "broker/conn_internal.h"
#include "broker/users.h"
#include "common/log.h"

/* ---- the id map and the list of open connections ------------------------------- */

void conn_link(conn_set_t *s, conn_t *c)
{
    idmap_put(&s->by_id, c->id, c);
    c->all_prev = NULL;
    c->all_next = s->all;
    if (s->all) {
        s->all->all_prev = c;
    }
    s->all = c;
    s->nconns++;
    s->ntls += c->tls != 0;
    s->tls_total += c->tls != 0;
}

void conn_unlink(conn_set_t *s, conn_t *c)
{
    idmap_del(&s->by_id, c->id);
    if (c->all_prev) {
        c->all_prev->all_next = c->all_next;
    } else {
        s->all = c->all_next;
    }
    if (c->all_next) {
        c->all_next->all_prev = c->all_prev;
    }
    c->all_next = c->all_prev = NULL;
    s->nconns--;
    s->ntls -= c->tls != 0;
    conn_handshake_release(c);
}

conn_t *conn_find(conn_set_t *s, uint64_t id)
{
    return idmap_get(&s->by_id, id);
}

void conn_mark_blocked(conn_t *c, int blocked)
{
    if (c->blocked == blocked) {
        return;
    }
    c->blocked = blocked;
    if (blocked) {
        c->set->nblocked++;
    } else {
        c->set->nblocked--;
    }
}

/* ---- the set ----------------------------------------------------------------------- */

conn_set_t *conn_set_new(const config_t *cfg, struct event_base *base, server_t *srv)
{
    conn_set_t *s = xcalloc(1, sizeof *s);
    s->cfg = cfg;
    s->base = base;
    s->srv = srv;
    s->reading = 1;
    map_init(&s->hs_by_addr);
    s->reaper = event_new(base, -1, 0, conn_reaper_cb, s);
    s->sweep = event_new(base, -1, EV_PERSIST, conn_sweep_cb, s);
    if (s->reaper == NULL || s->sweep == NULL) {
        log_error("out of memory creating events");
        abort();
    }
    resp_buf_init(&s->scratch);
    conn_known_paths_set(s);
    log_limit_init(&s->hidden_log, "paths hidden", HIDDEN_LOG_MS); /* no log_limit_ok: no recovery line */
    log_limit_init(&s->refusal_log, "refusals", REFUSAL_LOG_MS);   /* only log_limit_count */
    struct timeval tv = { 0, CONN_SWEEP_MS * 1000 };
    event_add(s->sweep, &tv);
    return s;
}

void conn_set_free(conn_set_t *s)
{
    if (s == NULL) {
        return;
    }
    for (conn_t *c = s->all, *n; c; c = n) {
        n = c->all_next;
        conn_close(c);
    }
    conn_free_dead(s);
    conn_spare_slots_trim(s, 0);
    event_free(s->reaper);
    event_free(s->sweep);
    idmap_free(&s->by_id);
    map_free(&s->hs_by_addr, NULL);
    resp_buf_free(&s->scratch);
    conn_known_paths_free(s);
    log_limit_destroy(&s->hidden_log);
    log_limit_destroy(&s->refusal_log);
    free(s);
}

void conn_set_attach_writer(conn_set_t *s, writer_t *w)
{
    s->writer = w;
    s->writer_running = 1;
}

size_t conn_set_count(const conn_set_t *s)
{
    return (size_t)s->nconns;
}

conn_t *conn_by_id(conn_set_t *s, uint64_t id)
{
    return conn_find(s, id);
}

void conn_set_users_changed(conn_set_t *s, const users_t *users)
{
    unsigned pull_roles = cmd_roles_of("pull"); /* the one command that parks (PULL … BLOCK) */
    for (conn_t *c = s->all, *n; c; c = n) {
        n = c->all_next;
        if (c->user[0] == '\0') {
            continue;
        }
        char user[sizeof c->user];
        snprintf(user, sizeof user, "%s", c->user);
        const users_entry_t *e = users_find(users, c->user, strlen(c->user));
        if (e == NULL || e->disabled) {
            log_info("client id=%llu addr=%s: user '%s' is %s in the reloaded users file: logged out",
                     (unsigned long long)c->id, c->addr, c->user, e ? "disabled" : "gone");
            c->authenticated = 0;
            c->roles = 0;
            c->user[0] = '\0';
            c->unauth_since_mono = clock_mono_ms(); /* auth-timeout counts from here */
        } else {
            c->roles = e->roles;
        }
        /* A PULL … BLOCK parked before the reload would still lease and deliver messages to a user that may no
         * longer pull (BLOCK 0: whenever one comes): the connection is closed, which cancels it. */
        if (c->blocked && (c->roles & pull_roles) == 0) {
            log_info("client id=%llu addr=%s: user '%s' may no longer PULL, and a PULL … BLOCK of it is waiting: "
                     "closing",
                     (unsigned long long)c->id, c->addr, user);
            conn_close(c);
        }
    }
}

void conn_set_stop_reading(conn_set_t *s)
{
    s->reading = 0;
    for (conn_t *c = s->all; c; c = c->all_next) {
        bufferevent_disable(c->bev, EV_READ);
    }
}

size_t conn_set_drain_all(conn_set_t *s)
{
    s->writer_running = 0;
    s->reading = 0;
    s->draining_all = 1;
    s->refuse_budget = CONN_REFUSE_BUDGET_BYTES;
    size_t refused = 0;
    for (conn_t *c = s->all, *n; c; c = n) {
        n = c->all_next;
        conn_flush(c);
        refused += conn_refuse_unread(c);
        if (!c->closing) {
            c->draining = 1;
            conn_maybe_finish(c);
        }
    }
    if (refused > 0) {
        log_info("stopping: %zu command(s) received but not run were refused (ERR shutting down)", refused);
    }
    if (s->nconns == 0) {
        event_active(s->reaper, 0, 0);
    } /* breaks the loop once the dead are freed */
    return (size_t)s->nconns;
}

void conn_set_stats(const conn_set_t *s, loop_info_t *li)
{
    li->connected_clients = s->nconns;
    li->connected_tls_clients = s->ntls;
    li->tls_connections_total = s->tls_total;
    li->tls_handshakes_in_progress = s->hs_in_progress;
    li->tls_handshakes_refused = s->hs_refused;
    li->blocked_clients = s->nblocked;
    li->connections_total = s->connections_total;
    li->protocol_errors = s->protocol_errors;
    li->reply_buffer_kills = s->reply_kills;
    li->idle_kills = s->idle_kills;
    li->commands_processed = s->commands;
    li->client_memory = s->client_memory;
    li->memory_kills = s->memory_kills;
    li->header_timeout_kills = s->header_kills;
}

const char *conn_user_shown(const conn_t *c)
{
    return c->user[0] ? c->user : (c->authenticated ? "default" : "-");
}

size_t conn_kill(conn_set_t *s, const conn_kill_filter_t *f, conn_t *self, int *self_matched)
{
    size_t n = 0;
    *self_matched = 0;
    conn_t *next;
    for (conn_t *c = s->all; c; c = next) {
        next = c->all_next; /* conn_close unlinks c */
        if ((f->id != 0 && c->id != f->id) || (f->addr != NULL && strcmp(c->addr, f->addr) != 0) ||
            (f->user != NULL && strcmp(conn_user_shown(c), f->user) != 0) || (f->skip_self && c == self)) {
            continue;
        }
        n++;
        log_info("client id=%llu addr=%s user=%s: closed by CLIENT KILL from client id=%llu user=%s",
                 (unsigned long long)c->id, c->addr, conn_user_shown(c), (unsigned long long)self->id,
                 conn_user_shown(self));
        if (c == self) {
            *self_matched = 1;
        } else {
            conn_close(c);
        }
    }
    return n;
}

void conn_list(const conn_set_t *s, buf_t *out, const conn_t *only)
{
    uint64_t now = clock_mono_ms();
    for (const conn_t *c = s->all; c; c = c->all_next) {
        if (only && c != only) {
            continue;
        }
        /* Redis's fields (clients such as redis-py parse id, age, idle, db, sub,
         * psub, multi, qbuf, qbuf-free, argv-mem, obl, oll, omem, tot-mem as
         * integers and fail when one is missing; lib-name and lib-ver as Redis 7.2),
         * then ours (replies; tls: yes for a connection from tls-port). */
        size_t qbuf = evbuffer_get_length(bufferevent_get_input(c->bev)) - c->input_parsed; /* CLIENT LIST's own */
        struct sockaddr_storage local; /* the broker's end: asked here, CLIENT LIST is rare and accept is not */
        socklen_t local_len = sizeof local;
        char laddr[64] = "?";
        if (getsockname(bufferevent_getfd(c->bev), (struct sockaddr *)&local, &local_len) == 0) {
            conn_format_addr((const struct sockaddr *)&local, laddr, sizeof laddr);
        }
        size_t omem = evbuffer_get_length(bufferevent_get_output(c->bev));
        buf_printf(out,
                   "id=%llu addr=%s laddr=%s fd=%d name=%s age=%llu idle=%llu flags=%s db=0 sub=0 psub=0 ssub=0 "
                   "multi=%lld qbuf=%zu qbuf-free=0 argv-mem=0 multi-mem=0 rbs=0 rbp=0 obl=0 oll=%zu omem=%zu "
                   "tot-mem=%zu events=r cmd=%s user=%s redir=-1 resp=%d lib-name=%s lib-ver=%s replies=%zu tls=%s\n",
                   (unsigned long long)c->id, c->addr, laddr, (int)bufferevent_getfd(c->bev), c->name,
                   (unsigned long long)((now - c->created_mono) / 1000),
                   (unsigned long long)((now - c->last_active_mono) / 1000),
                   c->blocked ? "b"
                   : c->multi ? "x"
                              : "N",
                   c->multi ? (long long)cmd_multi_count(c->multi) : -1LL, qbuf, c->nslots, omem, qbuf + omem,
                   c->last_cmd != NULL ? c->last_cmd : "NULL", conn_user_shown(c), c->proto, c->lib_name, c->lib_ver,
                   c->nslots, c->tls ? "yes" : "no");
    }
}
