/*
 * broker/server.c — the server's life cycle (see server.h): create it, start
 * it (server_listen binds the listeners, starts the AUTH worker and the
 * metrics endpoint and installs the signals), the signals, the shutdown
 * sequence, and free it; and what the loop knows (INFO, /metrics). The
 * package's other files (server_internal.h lists them) hold the listeners
 * and accepting, protected mode and users, TLS, and the HTTP endpoint. The
 * connections are conn.h's: accepted sockets go to conn_accept, storage
 * completions to conn_job_done.
 *
 * Thread: everything here runs on the event-loop thread. The only entries
 * from the storage thread are server_job_done / server_writer_stopped, which
 * the writer calls on this thread (through its completion event).
 *
 * SIGHUP calls the reload hook main set (server_on_hup) and never stops
 * the loop. A second SIGTERM/SIGINT during shutdown exits at once.
 *
 * Shutdown: RUNNING -> STOPPING (listener off, no more parsing, writer asked
 * to finish its queue and close the store) -> CLOSING (writer done: every
 * connection refuses the commands it received but did not run, drains its
 * replies and closes without a reset, conn_set_drain_all; a 3 s guard
 * timer) -> loop exit.
 */
#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <event2/http.h>
#include <event2/listener.h>

#include "base/alloc.h"
#include "base/clock.h"
#include "broker/server_internal.h"
#include "common/log.h"
#include "common/service_notify.h"

/* The drain's guard: after the refusal pass, the last replies are written
 * and each connection lingers at most 1 s (conn_close.c); with 10 000
 * lingering clients their closes ended 1.3-1.9 s after the pass on 2 loaded
 * cores, so a 2 s guard cut 32 of them in 1 run of 7 (their refusals lost). */
#define CLOSE_GRACE_MS 3000

static void close_timer_cb(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    server_t *s = arg;
    size_t n = conn_set_count(s->conns);
    if (n > 0) {
        log_warn("%zu clients still had replies unwritten at exit", n);
    }
    event_base_loopbreak(s->base);
}

void server_writer_stopped(void *ctx)
{
    server_t *s = ctx;
    s->writer_running = 0;
    s->state = SRV_CLOSING;
    if (conn_set_drain_all(s->conns) == 0) {
        return;
    } /* the loop breaks once the dead are freed */
    /* The guard counts from now, after the refusal pass: libevent's cached
     * time is this callback's start, and the pass (reading up to 64 MiB,
     * 10 000 shutdowns) took 0.5-1.1 s with 10 000 clients, which left their
     * 1 s lingers too little of the guard: it cut 3 905 of them, and their
     * clients lost 49 664 refusals already written. */
    event_base_update_cache_time(s->base);
    struct timeval tv = { CLOSE_GRACE_MS / 1000, (CLOSE_GRACE_MS % 1000) * 1000 };
    evtimer_add(s->close_timer, &tv);
}

void server_shutdown(server_t *s, const char *why)
{
    if (s->state != SRV_RUNNING) {
        return;
    }
    log_info("shutting down (%s): finishing the batch in flight", why);
    service_notify_or_warn("STOPPING=1\nSTATUS=shutting down (%s)", why);
    s->state = SRV_STOPPING;
    if (s->listener) {
        evconnlistener_disable(s->listener);
    }
    if (s->tls_listener) {
        evconnlistener_disable(s->tls_listener);
    }
    conn_set_stop_reading(s->conns);
    if (s->writer_running) {
        writer_stop(s->writer);
    } else {
        server_writer_stopped(s);
    }
}

/* ---- signals --------------------------------------------------------------------------------- */

static void signal_cb(evutil_socket_t sig, short what, void *arg)
{
    (void)what;
    server_t *s = arg;
    if (s->state != SRV_RUNNING) {
        log_warn("second %s during shutdown: exiting now (the store recovers on the next start)",
                 sig == SIGINT ? "SIGINT" : "SIGTERM");
        _exit(1);
    }
    server_shutdown(s, sig == SIGINT ? "SIGINT" : "SIGTERM");
}

/* SIGHUP (a closed terminal, logrotate): reload, never stop. */
static void hup_cb(evutil_socket_t sig, short what, void *arg)
{
    (void)sig;
    (void)what;
    server_t *s = arg;
    if (s->state != SRV_RUNNING) {
        return;
    }
    if (s->on_hup != NULL) {
        s->on_hup(s->on_hup_arg);
        conn_set_config_changed(s->conns); /* the reload may have replaced the config's strings */
    } else {
        log_info("SIGHUP: nothing to reload");
    }
}

void server_on_hup(server_t *s, void (*fn)(void *arg), void *arg)
{
    s->on_hup = fn;
    s->on_hup_arg = arg;
}

/* ---- life cycle ------------------------------------------------------------------------------ */

server_t *server_new(const config_t *cfg, struct event_base *base)
{
    server_t *s = xmalloc(sizeof *s);
    memset(s, 0, sizeof *s);
    s->cfg = cfg;
    s->base = base;
    s->accept_timer = evtimer_new(base, server_accept_timer_cb, s);
    s->close_timer = evtimer_new(base, close_timer_cb, s);
    s->sig_term = evsignal_new(base, SIGTERM, signal_cb, s);
    s->sig_int = evsignal_new(base, SIGINT, signal_cb, s);
    s->sig_hup = evsignal_new(base, SIGHUP, hup_cb, s);
    if (!s->accept_timer || !s->close_timer || !s->sig_term || !s->sig_int || !s->sig_hup) {
        log_error("out of memory creating events");
        abort();
    }
    s->conns = conn_set_new(cfg, base, s);
    s->auth = auth_new(base, server_job_done, s);
    s->started_mono = clock_mono_ms();
    s->spare_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
    log_limit_init(&s->accept_log, "accepts", ACCEPT_LOG_MS); /* only log_limit_count: no recovery line */
    return s;
}

int server_listen(server_t *s, char *err, size_t errlen)
{
    const config_t *cfg = s->cfg;
    if (cfg->tls_port != 0) {
        if (server_tls_start(s, err, errlen) != 0) {
            return -1;
        }
        s->tls_listener = server_accept_listen(s, cfg->tls_port, &s->tls_port, err, errlen);
        if (s->tls_listener == NULL) {
            return -1;
        }
    }
    if (cfg->port != 0 || cfg->tls_port == 0) {
        s->listener = server_accept_listen(s, cfg->port, &s->port, err, errlen);
        if (s->listener == NULL) {
            return -1;
        }
    }
    if (auth_start(s->auth, err, errlen) != 0) {
        return -1;
    }
    if (server_http_start(s, err, errlen) != 0) {
        return -1;
    }
    evsignal_add(s->sig_term, NULL);
    evsignal_add(s->sig_int, NULL);
    evsignal_add(s->sig_hup, NULL);
    server_security_check(s);
    return 0;
}

int server_port(const server_t *s)
{
    return s->port;
}

int server_tls_port(const server_t *s)
{
    return s->tls_port;
}

void server_set_writer(server_t *s, writer_t *w)
{
    s->writer = w;
    s->writer_running = 1;
    conn_set_attach_writer(s->conns, w);
}

void server_job_done(job_t *j, void *ctx)
{
    server_t *s = ctx;
    conn_job_done(j, s->conns);
}

int server_run(server_t *s)
{
    event_base_dispatch(s->base);
    return 0;
}

void server_free(server_t *s)
{
    if (s == NULL) {
        return;
    }
    auth_free(s->auth);
    conn_set_free(s->conns);
    users_free(s->users);
    server_http_stop(s);
    if (s->listener) {
        evconnlistener_free(s->listener);
    }
    if (s->tls_listener) {
        evconnlistener_free(s->tls_listener);
    }
    tls_server_free(s->tls);
    event_free(s->accept_timer);
    event_free(s->close_timer);
    event_free(s->sig_term);
    event_free(s->sig_int);
    event_free(s->sig_hup);
    if (s->spare_fd >= 0) {
        close(s->spare_fd);
    }
    log_limit_destroy(&s->accept_log);
    free(s);
}

const config_t *server_config(const server_t *s)
{
    return s->cfg;
}

void server_loop_info(server_t *s, loop_info_t *li)
{
    memset(li, 0, sizeof *li);
    li->cfg = s->cfg;
    li->port = s->port;
    li->tls_port = s->tls_listener != NULL ? s->tls_port : 0;
    li->uptime_ms = clock_mono_ms() - s->started_mono;
    conn_set_stats(s->conns, li);
    li->rejected_connections = s->rejected;
    li->protected_mode = server_protected(s);
    li->auth_required = server_auth_required(s);
    li->users = users_count(s->users);
    li->auth_failures = auth_failures(s->auth);
    li->denied_connections = s->denied;
    li->security_warning = server_security_warning(s);
    if (s->writer_running) {
        li->jobs_queued = writer_queued(s->writer);
        li->jobs_parked = writer_parked(s->writer);
    }
}
