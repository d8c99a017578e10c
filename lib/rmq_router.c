/*
 * lib/rmq_router.c — the hop router of chained delays on RabbitMQ.
 *
 * RabbitMQ dead-letters an expired message with the routing key it was
 * published with; nothing in a dead-lettering can change per message where
 * it goes next. A single-hop delay needs nothing more (its key is the final
 * t.<topic> or g.<group>). A chained delay (DELAY 25m = 20m + 5m, or 4s =
 * 1s × 4) is published to its first level with routing key "hop" and the
 * hops left in its hg-plan header; each expiry lands it in hg.hops, where
 * this router takes it, publishes it to its next level (routing key "hop"
 * again, or the final hg-dest for the last hop), waits for the publisher
 * confirm and only then acknowledges it: at least once, like the level move
 * itself (at-least-once dead-lettering).
 *
 * Every consumer of an amqp:// URI runs one router (hg_consumer_run starts
 * it as the transport's helper); several compete on hg.hops, which is
 * fine. A chained message waits in hg.hops (durable, replicated) while no
 * consumer runs, and moves on when one starts.
 *
 * A stop (rmq_router_stop) ends its wait for hops at once and lets a
 * round in progress finish (its publish confirmed, its hops acknowledged);
 * the consumer's stop fd, which its client takes, cuts any wait on the node
 * at once (a hop then cut comes back from hg.hops: at least once).
 *
 * Threads: one router thread with its own connection; start and stop on
 * the thread that runs hg_consumer_run.
 */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include "lib/rmq.h"
#include "lib/backoff.h"
#include "lib/client.h"
#include "lib/wire.h"

#include "base/alloc.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define ROUTER_BATCH   256  /* messages routed per publish round (and prefetch) */
#define ROUTER_WAIT_MS 1000 /* longest wait for hops before checking stop */

typedef struct router {
    hg_client_t *client;
    rmq_t *r;
    int pipe[2];
    pthread_t thread;
    hg_log_fn log;
    void *log_arg;
} router_t;

static void router_log(router_t *rt, int level, const char *what)
{
    char line[HG_ERRMSG_MAX + 64];
    if (rt->log == NULL)
        return;
    snprintf(line, sizeof(line), "hop router: %s: %s", what, hg_client_errmsg(rt->client));
    rt->log(level, line, rt->log_arg);
}

/* The next hop of m into *o (plan_rest: storage for the rest of the plan). */
static void next_hop(rmq_msg_t *m, rmq_out_t *o, char *plan_rest, size_t restlen)
{
    const char *plan = m->plan != NULL ? m->plan : "", *comma = strchr(plan, ',');
    int level = atoi(plan);

    memset(o, 0, sizeof(*o));
    rmq_out_message(o, m);
    o->due_ms = m->due_ms;
    o->reconsume = m->reconsume;
    if (m->dest == NULL) { /* not ours: park it where an operator looks */
        o->exchange = RMQ_EX_UNROUTED;
        o->routing_key = "";
        return;
    }
    if (level <= 0) { /* no hop left: deliver */
        o->exchange = RMQ_EX_DUE;
        o->routing_key = m->dest;
        return;
    }
    o->exchange = RMQ_EX_LEVELS;
    o->level = level;
    if (comma != NULL && comma[1] != '\0') {
        snprintf(plan_rest, restlen, "%s", comma + 1);
        o->plan = plan_rest;
        o->dest = m->dest;
        o->routing_key = RMQ_RK_HOP;
    } else {
        o->routing_key = m->dest;
    }
}

/* One round: wait for hops, route what arrived (inside route_round's guard). */
static hg_err_t route_guarded(router_t *rt)
{
    rmq_t *r = rt->r;
    rmq_msg_t *batch[ROUTER_BATCH];
    rmq_out_t out[ROUTER_BATCH];
    hg_err_t res[ROUTER_BATCH], e;
    char(*rest)[LVL_MAX_HOPS * 4] = NULL;
    size_t n = 0;

    if ((e = rmq_ensure(r)) != HG_OK || (e = rmq_topology(r)) != HG_OK ||
        (e = rmq_consume(r, RMQ_Q_HOPS, RMQ_Q_HOPS, ROUTER_BATCH)) != HG_OK)
        return e;
    e = rmq_pump(r, wire_now_ms() + ROUTER_WAIT_MS, 1, 1);
    if (e == HG_ERR_TIMEOUT) /* nothing for a while: is the node on the minority side of a partition? */
        return rmq_probe_idle(r);
    if (e != HG_OK)
        return e;
    rest = xcalloc(ROUTER_BATCH, sizeof(*rest));
    while (n < ROUTER_BATCH && r->ready != NULL) {
        rmq_msg_t *m = r->ready;
        r->ready = m->next;
        if (r->ready == NULL)
            r->ready_tail = NULL;
        m->next = NULL;
        next_hop(m, &out[n], rest[n], sizeof(rest[n]));
        batch[n++] = m;
    }
    e = rmq_publish(r, out, n, res);
    for (size_t i = 0; i < n; i++) {
        if (r->st != NULL) {
            /* refused (res[i] not HG_OK): back to hg.hops, tried again on a
             * new connection (rmq_ensure replaces one whose publish was
             * refused: its channel may have lost track of the level's
             * leader) */
            (void)rmq_settle(r, RMQ_WORK_CHANNEL, batch[i]->tag, res[i] == HG_OK);
        }
        rmq_msg_free(batch[i]);
    }
    free(rest);
    return e;
}

/* One round, guarded (rmq_watchdog.c): a node that stops reading costs a
 * step its read timeout, never the router for ever. */
static hg_err_t route_round(router_t *rt)
{
    hg_err_t e;

    rmq_guard_enter(rt->r);
    e = route_guarded(rt);
    rmq_guard_leave(rt->r);
    return e;
}

static void *router_main(void *arg)
{
    router_t *rt = arg;
    const hg_backoff_t *b = &client_opts(rt->client)->reconnect_backoff;
    unsigned failures = 0;

    for (;;) {
        hg_err_t e = route_round(rt);
        if (e == HG_ERR_STOPPED)
            break;
        if (e == HG_OK) {
            failures = 0;
            continue;
        }
        router_log(rt, 1, "routing chained delays");
        if (client_sleep(rt->pipe[0], hg_backoff_delay(b, failures, NULL, NULL)) < 0)
            break;
        if (failures < 64)
            failures++;
    }
    return NULL;
}

hg_err_t rmq_router_start(const char *uri, const hg_client_opts_t *opts, int stop_fd, hg_log_fn log, void *log_arg,
                          void **handle, hg_error_t *err)
{
    router_t *rt = xcalloc(1, sizeof(*rt));
    hg_client_opts_t o;
    hg_err_t e;
    int rc;

    *handle = NULL;
    if (opts != NULL)
        o = *opts;
    else
        hg_client_opts_init(&o);
    o.reconnect = 1;
    o.reconnect_backoff.attempts = 0; /* forever: the router never gives up */
    rt->log = log;
    rt->log_arg = log_arg;
    if (pipe2(rt->pipe, O_NONBLOCK | O_CLOEXEC) != 0) {
        client_error_fill(err, HG_ERR_SYSTEM, "pipe: %s", strerror(errno));
        free(rt);
        return HG_ERR_SYSTEM;
    }
    e = client_create(uri, &o, &rt->client, err);
    if (e != HG_OK) {
        close(rt->pipe[0]);
        close(rt->pipe[1]);
        free(rt);
        return e;
    }
    client_set_wake_fd(rt->client, rt->pipe[0]);
    /* the consumer's stop fd (its stop-grace cut) ends the router's waits on
     * the node too: its login, its declarations, its publishes */
    hg_client_set_stop_fd(rt->client, stop_fd);
    rt->r = rmq_of(client_transport_state(rt->client));
    rc = pthread_create(&rt->thread, NULL, router_main, rt);
    if (rc != 0) {
        client_error_fill(err, HG_ERR_SYSTEM, "starting the hop router: %s", strerror(rc));
        hg_client_close(rt->client);
        close(rt->pipe[0]);
        close(rt->pipe[1]);
        free(rt);
        return HG_ERR_SYSTEM;
    }
    *handle = rt;
    return HG_OK;
}

void rmq_router_stop(void *handle)
{
    router_t *rt = handle;
    ssize_t w;

    if (rt == NULL)
        return;
    w = write(rt->pipe[1], "x", 1);
    (void)w;
    pthread_join(rt->thread, NULL);
    hg_client_close(rt->client);
    close(rt->pipe[0]);
    close(rt->pipe[1]);
    free(rt);
}
