/*
 * broker/main.c — hourglass-broker start-up and exit.
 *
 * Order matters: configuration (exit 1 with the key/line on an error);
 * SIGPIPE ignored; evthread_use_pthreads() before the event base exists; the
 * data directory opened (exit 1 with store_open's message: foreign files,
 * another level table, locked by another broker ...); the listener bound
 * (exit 1 when the port is taken); then the storage thread and the loop.
 * SIGTERM/SIGINT/SHUTDOWN end the loop after the storage thread closed the
 * store; main then joins it and exits 0.
 */
#include <config.h>   /* autoconf: PACKAGE_VERSION */

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <event2/event.h>
#include <event2/thread.h>

#include "broker/config.h"
#include "common/log.h"
#include "broker/server.h"
#include "broker/writer.h"
#include "levels/store.h"

static void store_options_from(const config_t *c, store_options_t *o)
{
    store_options_default(o);
    o->path = c->dir;
    o->levels = c->level_table;
    o->create_if_missing = 1;
    o->sync = c->fsync_always;
    o->retention_ms = (uint64_t)c->retention_ms;
    o->max_delay_ms = (uint64_t)c->max_delay_ms;
    o->max_payload = (uint32_t)c->max_payload;
    o->max_reconsume = (uint32_t)c->max_reconsume;
    o->max_lease_bytes = (uint64_t)c->max_pull_bytes;
    o->cache_bytes = (size_t)c->cache_size;
    o->write_buffer_bytes = (size_t)c->write_buffer_size;
    o->max_open_files = (int)c->max_open_files;
}

int main(int argc, char **argv)
{
    config_t cfg;
    config_action_t action;
    char err[1024];
    config_init_defaults(&cfg);
    if (config_load(&cfg, argc, argv, &action, err, sizeof err) != 0) {
        log_error("configuration: %s", err);
        config_free(&cfg);
        return 1;
    }
    switch (action) {
    case CONFIG_HELP:
        config_print_help(stdout, "hourglass-broker");
        config_free(&cfg);
        return 0;
    case CONFIG_VERSION:
        printf("hourglass-broker %s\n", PACKAGE_VERSION);
        config_free(&cfg);
        return 0;
    case CONFIG_CHECK:
        config_print(&cfg, stdout);
        fprintf(stderr, "configuration OK\n");
        config_free(&cfg);
        return 0;
    case CONFIG_RUN:
        break;
    }
    log_set_level((log_level_t)cfg.log_level);
    signal(SIGPIPE, SIG_IGN);
    if (evthread_use_pthreads() != 0) {
        log_error("libevent has no pthreads support");
        return 1;
    }
    struct event_base *base = event_base_new();
    if (base == NULL) {
        log_error("cannot create the event base");
        return 1;
    }

    store_options_t so;
    store_options_from(&cfg, &so);
    store_t *store = NULL;
    if (store_open(&so, &store, err, sizeof err) != 0) {
        log_error("cannot open the data directory: %s", err);
        event_base_free(base);
        config_free(&cfg);
        return 1;
    }

    server_t *srv = server_new(&cfg, base);
    if (server_listen(srv, err, sizeof err) != 0) {
        log_error("%s", err);
        store_close(store, NULL, 0);
        server_free(srv);
        event_base_free(base);
        config_free(&cfg);
        return 1;
    }
    writer_t *w = writer_new(store, &so, base, server_job_done, server_writer_stopped, srv);
    server_set_writer(srv, w);
    if (writer_start(w, err, sizeof err) != 0) {
        log_error("%s", err);
        return 1;
    }
    char spec[512];
    lvl_table_format(&cfg.level_table, spec, sizeof spec);
    log_info("hourglass-broker %s pid %ld listening on %s:%d; dir %s; levels %s; fsync %s%s", PACKAGE_VERSION,
             (long)getpid(), cfg.bind, server_port(srv), cfg.dir, spec, cfg.fsync_always ? "always" : "no",
             cfg.metrics_port ? "" : "; metrics off");
    if (cfg.metrics_port) { log_info("metrics on http://%s:%lld/metrics", cfg.metrics_bind, cfg.metrics_port); }

    server_run(srv);

    writer_free(w);
    server_free(srv);
    event_base_free(base);
    log_info("exited cleanly");
    config_free(&cfg);
    return 0;
}
