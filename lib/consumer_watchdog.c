/*
 * lib/consumer_watchdog.c — the lease watchdog of a consumer.
 *
 * One thread with its own client: every tick (a quarter of the touch
 * interval, within 10 ms .. 1 s) it TOUCHes the messages a worker holds
 * whose lease was last renewed touch_interval ago. It is the only thread
 * that renews leases, so a slow handler needs no cooperation: the handler
 * runs undisturbed on its worker's thread and connection.
 *
 * Invariants: ids are copied out of a worker's inflight[] under w->lock,
 * and the lock is never held across network I/O. A TOUCH answered 0 for an
 * id the worker still holds counts a lost lease and stops renewing it.
 * Thread: the watchdog's own; it runs until watchdog_pipe is written, which
 * hg_consumer_run does after the workers have finished, so leases are
 * renewed while they settle the messages in hand.
 */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include "lib/client.h"
#include "lib/consumer_internal.h"
#include "lib/wire.h"

#include "base/alloc.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#define WATCHDOG_MIN_TICK_MS 10
#define WATCHDOG_MAX_TICK_MS 1000

/* ------------------------------------------------------------------------
 * Watchdog
 * ------------------------------------------------------------------------ */

static void watchdog_touch(hg_consumer_t *c, worker_t *w, const char *id, unsigned *connects)
{
    const char *argv[5] = { "TOUCH", c->group, id, "LEASE", c->lease_text };
    resp_reply_t *r = NULL;
    hg_err_t e;

    e = client_call(c->watchdog_client, 5, argv, NULL, 1, 0, 0, &r);
    consumer_note_connects(c, c->watchdog_client, connects, "watchdog");
    if (e != HG_OK) {
        if (e != HG_ERR_STOPPED)
            consumer_record_error(c, "watchdog", e, "TOUCH", hg_client_errmsg(c->watchdog_client));
        return;
    }
    if (r->type == RESP_REPLY_ERROR) {
        client_fail_reply(c->watchdog_client, r);
        consumer_record_error(c, "watchdog", HG_ERR_SERVER, "TOUCH", hg_client_errmsg(c->watchdog_client));
    } else if (r->type != RESP_REPLY_INTEGER) {
        consumer_record_error(c, "watchdog", HG_ERR_PROTOCOL, "TOUCH", resp_reply_type_name(r->type));
    } else if (r->integer <= 0) {
        /* 0: no lease. Either the worker settled it meanwhile (fine) or the
         * lease expired before we renewed it (the message will come again). */
        if (consumer_inflight_holds(w, id)) {
            consumer_count(&c->lease_lost);
            consumer_log(c, 1, "watchdog: TOUCH %s: the lease had expired; the broker will deliver it again", id);
            consumer_inflight_remove(w, id); /* stop touching it; the worker's ACK will say 0 too */
        }
    } else {
        uint64_t now = wire_now_ms();
        consumer_count(&c->touched);
        pthread_mutex_lock(&w->lock);
        for (int i = 0; i < c->opts.count; i++)
            if (w->inflight[i].active && strcmp(w->inflight[i].id, id) == 0)
                w->inflight[i].renewed_ms = now;
        pthread_mutex_unlock(&w->lock);
    }
    resp_reply_free(r);
}

void *consumer_watchdog_main(void *arg)
{
    hg_consumer_t *c = arg;
    uint64_t tick = c->touch_ms / 4;
    unsigned connects = 0;
    char(*due)[HG_ID_MAX] = xcalloc((size_t)c->opts.count, HG_ID_MAX);

    if (tick < WATCHDOG_MIN_TICK_MS)
        tick = WATCHDOG_MIN_TICK_MS;
    if (tick > WATCHDOG_MAX_TICK_MS)
        tick = WATCHDOG_MAX_TICK_MS;

    while (client_sleep(c->watchdog_pipe[0], tick) == 0) {
        for (int wi = 0; wi < c->opts.workers; wi++) {
            worker_t *w = &c->workers[wi];
            uint64_t now = wire_now_ms();
            int ndue = 0;

            pthread_mutex_lock(&w->lock);
            for (int i = 0; i < c->opts.count; i++)
                if (w->inflight[i].active && now - w->inflight[i].renewed_ms >= c->touch_ms)
                    memcpy(due[ndue++], w->inflight[i].id, HG_ID_MAX);
            pthread_mutex_unlock(&w->lock);
            for (int i = 0; i < ndue; i++)
                watchdog_touch(c, w, due[i], &connects);
        }
    }
    free(due);
    return NULL;
}
