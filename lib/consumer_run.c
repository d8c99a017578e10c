/*
 * lib/consumer_run.c — hg_consumer_run: start a consumer's threads and
 * wait for them.
 *
 * Builds the workers (a client each, its wake fd the stop pipe, its stop fd
 * the consumer's: hg_consumer_set_stop_fd, the watchdog's too), starts the
 * transport's helper when it has one, the watchdog when leases are to be
 * renewed, then the workers; joins the workers after a stop, stops the
 * helper, then stops and joins the watchdog last (it keeps renewing while
 * the workers finish the messages in hand), and frees what it built.
 *
 * Invariants: a consumer runs once (c->ran); a failure to start anything
 * stops the consumer and is returned, as is a fatal PULL refusal (AUTH,
 * NOPERM) recorded by a worker.
 * Thread: the caller's; hg_consumer_stop from any thread or a signal
 * handler makes it return.
 */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include "lib/client.h"
#include "lib/consumer_internal.h"

#include "base/alloc.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ------------------------------------------------------------------------
 * Run
 * ------------------------------------------------------------------------ */

hg_err_t hg_consumer_run(hg_consumer_t *c)
{
    hg_err_t result = HG_OK;
    hg_error_t err;
    int n, rc;

    if (c == NULL)
        return HG_ERR_ARG;
    n = c->opts.workers;
    if (c->ran) {
        consumer_record_error(c, "consumer", HG_ERR_ARG, "hg_consumer_run", "a consumer runs once");
        return HG_ERR_ARG;
    }
    c->ran = 1;
    c->workers = xcalloc((size_t)n, sizeof(*c->workers));
    for (int i = 0; i < n; i++) {
        worker_t *w = &c->workers[i];
        w->owner = c;
        w->index = i;
        pthread_mutex_init(&w->lock, NULL);
        w->inflight = xcalloc((size_t)c->opts.count, sizeof(*w->inflight));
        if (c->opts.batch_handler != NULL)
            w->batch = xcalloc((size_t)c->opts.count, sizeof(*w->batch));
        /* Cannot fail: hg_consumer_new checked the same URI and options. */
        if (client_create(c->uri, &c->client_opts, &w->client, &err) != HG_OK) {
            consumer_record_error(c, "consumer", err.code, "start", err.message);
            hg_consumer_stop(c);
        } else {
            client_set_wake_fd(w->client, c->wake_pipe[0]);
            hg_client_set_stop_fd(w->client, c->stop_fd);
        }
    }

    if (c->tops != NULL && c->tops->helper_start != NULL && !consumer_stopping(c)) {
        if (c->tops->helper_start(c->uri, &c->client_opts, c->stop_fd, c->opts.log, c->opts.log_arg, &c->helper,
                                  &err) != HG_OK) {
            consumer_record_error(c, "consumer", err.code, "starting the transport's helper", err.message);
            result = err.code;
            hg_consumer_stop(c);
        }
    }
    if (c->touch_ms > 0 && !consumer_stopping(c)) {
        if (client_create(c->uri, &c->client_opts, &c->watchdog_client, &err) == HG_OK) {
            client_set_wake_fd(c->watchdog_client, c->watchdog_pipe[0]);
            hg_client_set_stop_fd(c->watchdog_client, c->stop_fd);
            rc = pthread_create(&c->watchdog, NULL, consumer_watchdog_main, c);
            if (rc != 0) {
                consumer_record_error(c, "consumer", HG_ERR_SYSTEM, "starting the watchdog", strerror(rc));
                result = HG_ERR_SYSTEM;
                hg_consumer_stop(c);
            } else {
                c->watchdog_started = 1;
            }
        }
    }
    /* The nodes the workers may connect to, read before they run (a worker
     * rewrites its client's address when it connects); each worker logs the
     * node it gets (consumer_note_connects). */
    char nodes[300];
    snprintf(nodes, sizeof(nodes), "%s", c->workers[0].client != NULL ? hg_client_address(c->workers[0].client) : "?");
    for (int i = 0; i < n && !consumer_stopping(c); i++) {
        worker_t *w = &c->workers[i];
        if (w->client == NULL)
            break;
        rc = pthread_create(&w->thread, NULL, consumer_worker_main, w);
        if (rc != 0) {
            consumer_record_error(c, "consumer", HG_ERR_SYSTEM, "starting a worker", strerror(rc));
            result = HG_ERR_SYSTEM;
            hg_consumer_stop(c);
            break;
        }
        w->started = 1;
    }
    if (result == HG_OK)
        consumer_log(c, 2, "consumer: %d workers on group %s, topic %s at %s", n, c->group, c->topic, nodes);

    for (int i = 0; i < n; i++)
        if (c->workers[i].started)
            pthread_join(c->workers[i].thread, NULL);
    if (c->helper != NULL) {
        c->tops->helper_stop(c->helper);
        c->helper = NULL;
    }
    if (c->watchdog_started) {
        ssize_t wr = write(c->watchdog_pipe[1], "x", 1);
        (void)wr;
        pthread_join(c->watchdog, NULL);
    }
    hg_client_close(c->watchdog_client);
    c->watchdog_client = NULL;
    for (int i = 0; i < n; i++) {
        hg_client_close(c->workers[i].client);
        pthread_mutex_destroy(&c->workers[i].lock);
        free(c->workers[i].inflight);
        free(c->workers[i].batch);
    }
    free(c->workers);
    c->workers = NULL;
    if (result == HG_OK && atomic_load(&c->fatal) != 0)
        result = (hg_err_t)atomic_load(&c->fatal);
    return result;
}
