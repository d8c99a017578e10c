/*
 * broker/main.c — hourglass-broker start-up and exit.
 *
 * Order matters: configuration (exit 2, CFG_EXIT_CONFIG, with the key/line on an error);
 * the open-files limit raised or max-clients / max-open-files lowered to fit
 * it (broker/fdlimit.h);
 * glibc's mmap threshold fixed (broker/heap_policy.h);
 * SIGPIPE ignored; evthread_use_pthreads() before the event base exists; the
 * data directory opened, with systemd asked for more start time while it
 * opens (common/service_extend.h; a LevelDB recovery can outlast
 * TimeoutStartSec=) (exit 1 with store_open's message: foreign files,
 * another level table, locked by another broker ...); the unfinished
 * copies a crash left in backup-dir removed (broker/backup.h); the listener bound
 * (exit 1 when the port is taken); then the storage thread, READY=1 to systemd
 * (common/service_notify.h; nothing without NOTIFY_SOCKET) and the loop.
 * SIGTERM/SIGINT/SHUTDOWN end the loop after the storage thread closed the
 * store; main then joins it and exits 0. SIGHUP re-reads the configuration
 * (config_reload, on the loop thread), reopens the log file and applies the
 * log keys, then reloads the TLS certificate (server_reload_tls), between
 * RELOADING=1 and READY=1 to systemd; it never stops the broker.
 *
 * --check-data DIR: the same configuration, then the data directory is
 * checked with the configured level table without writing to it
 * (store_check_dir: opened and checked in a scratch view, removed after);
 * "ok: N messages, ..." and exit 0, or the first
 * problem and exit 1 (damaged or inconsistent data; in a whole copy made by
 * BACKUP also a file that is not as its BACKUP-WHOLE list says, or a torn
 * log end, which it never has) or 3 (not checked: the
 * directory is missing, not accessible, held by a running broker, not a data
 * directory of this build, or no room for the view). Scratch views killed
 * checks left are removed first, and said on stderr. SIGINT, SIGTERM and
 * SIGHUP are blocked in every thread (LevelDB's inherit it) and taken by a
 * thread of the check's own, which removes the view and ends the process
 * with 128 + the signal. Main thread and that thread; no event loop.
 */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <event2/event.h>
#include <event2/thread.h>

#include "base/clock.h"
#include "base/units.h"
#include "broker/backup.h"
#include "broker/cmd_shared.h"
#include "broker/diskguard.h"
#include "broker/fdlimit.h"
#include "broker/heap_policy.h"
#include "broker/conn.h"
#include "broker/server.h"
#include "broker/settings.h"
#include "broker/users.h"
#include "broker/writer.h"
#include "common/log.h"
#include "common/service_extend.h"
#include "common/service_notify.h"
#include "levels/store.h"

/* --check-data's exit statuses (docs/operations.md, "Checking a data directory"). */
#define CHECK_DATA_OK        0
#define CHECK_DATA_DAMAGED   1 /* damaged or inconsistent: restore it from a backup */
#define CHECK_DATA_UNCHECKED 3 /* not checked: missing, not accessible, in use, not a data directory of this build */

/* A torn log end --check-data found: what the next start would cut. Not
 * in a whole BACKUP copy, where it is damage (the error says so). */
static void check_data_torn(const char *dir, const store_dir_check_t *r)
{
    if (r->torn && !r->whole_copy) {
        fprintf(stderr,
                "check-data: %s/%s ends in a torn write (what a power cut leaves of a write never fsynced): the broker "
                "would cut %llu bytes at offset %llu of %s at its next start, keeping them in %s.torn-%llu; checked "
                "as after that cut\n",
                dir, r->torn_log, (unsigned long long)r->torn_bytes, (unsigned long long)r->torn_offset, r->torn_log,
                r->torn_log, (unsigned long long)r->torn_offset);
    }
}

/* The signals that stop a check; blocked before the check's thread starts. */
static sigset_t check_data_stop_signals;
/* Set when the check has ended: the signal thread then returns instead of
 * stopping the process (check_data_release_signals wakes it with SIGTERM). */
static atomic_int check_data_done;

/* The check's signal thread: wait for a stop signal, remove the scratch view
 * (store_check_dir_interrupt: the check removes nothing after it) and end
 * the process with 128 + the signal. Writes with dprintf: the main thread
 * may hold stderr's lock. */
static void *check_data_signals(void *arg)
{
    (void)arg;
    int sig = 0;
    while (sigwait(&check_data_stop_signals, &sig) != 0) {
    }
    if (atomic_load(&check_data_done)) {
        return NULL; /* the wake-up of check_data_release_signals: the check has ended */
    }
    char view[4200];
    store_check_dir_interrupt(view, sizeof view);
    if (view[0] != '\0') {
        dprintf(STDERR_FILENO, "check-data: stopped by signal %d (%s): not checked; removed its scratch view %s\n", sig,
                strsignal(sig), view);
    } else {
        dprintf(STDERR_FILENO, "check-data: stopped by signal %d (%s): not checked\n", sig, strsignal(sig));
    }
    _exit(128 + sig);
}

/* Block the stop signals in this thread (and so in every thread started
 * after, LevelDB's too) and start the thread that takes them, in *t (ended
 * by check_data_release_signals). 0, or -1 with err. */
static int check_data_catch_signals(pthread_t *t, char *err, size_t errlen)
{
    sigemptyset(&check_data_stop_signals);
    sigaddset(&check_data_stop_signals, SIGINT);
    sigaddset(&check_data_stop_signals, SIGTERM);
    sigaddset(&check_data_stop_signals, SIGHUP);
    int e = pthread_sigmask(SIG_BLOCK, &check_data_stop_signals, NULL);
    if (e == 0 && (e = pthread_create(t, NULL, check_data_signals, NULL)) == 0) {
        return 0;
    }
    pthread_sigmask(SIG_UNBLOCK, &check_data_stop_signals, NULL);
    snprintf(err, errlen, "cannot start the thread that removes the scratch view on a signal: %s", strerror(e));
    return -1;
}

/* After the check: end the signal thread, or wait for the _exit of one that
 * took a signal already. Not pthread_cancel: a thread cancelled in sigwait
 * made AddressSanitizer abort the process at its exit (a stack-buffer-
 * overflow in its own thread teardown), so the thread is woken with a
 * signal it waits for and returns. A stop signal that arrives from here on
 * stays blocked: the check is over and its outcome is reported. */
static void check_data_release_signals(pthread_t t)
{
    atomic_store(&check_data_done, 1);
    pthread_kill(t, SIGTERM);
    pthread_join(t, NULL);
}

/* --check-data: CHECK_DATA_OK when the directory is consistent, with one
 * line on stdout ("ok: ...", saying what was read and where: scripts read
 * it as the only line of stdout, or the last of both streams); else the
 * status above, with where it was read and the problem on stderr. A torn
 * log end goes to stderr either way. The directory is only read
 * (store_check_dir: the open and the check run in a scratch view). */
static int check_data(const config_t *cfg)
{
    store_options_t o = cfg->store;
    o.no_upgrade = 1; /* an older format is checked as it is, or reported when only an upgrade could read it */
    store_dir_check_t r;
    char err[1024];
    pthread_t signals;
    if (check_data_catch_signals(&signals, err, sizeof err) != 0) {
        fprintf(stderr, "check-data: not checked: %s\n", err);
        return CHECK_DATA_UNCHECKED;
    }
    int rc = store_check_dir(&o, clock_wall_ms(), &r, err, sizeof err);
    check_data_release_signals(signals);
    if (r.stale_removed > 0) {
        fprintf(stderr,
                "check-data: removed %u scratch view%s a stopped check left behind (%s%s), with the disk space its "
                "hard links kept\n",
                r.stale_removed, r.stale_removed == 1 ? "" : "s", r.stale_view, r.stale_removed == 1 ? "" : ", ...");
    }
    check_data_torn(cfg->dir, &r);
    char view[4400] = "";
    if (r.view[0] != '\0') {
        snprintf(view, sizeof view,
                 "read only, through a scratch view %s (%u table files hard-linked, %u files copied, %llu bytes), "
                 "removed after",
                 r.view, r.linked, r.copied, (unsigned long long)r.copied_bytes);
    }
    char whole[256] = "";
    if (r.whole_copy && r.whole_listed) {
        snprintf(whole, sizeof whole,
                 ", a whole copy made by BACKUP: its %u files, %llu bytes, as its " STORE_COPY_WHOLE
                 " lists them (sizes and CRC-32C)",
                 r.whole_files, (unsigned long long)r.whole_bytes);
    } else if (r.whole_copy) {
        snprintf(whole, sizeof whole,
                 ", a whole copy made by BACKUP: its " STORE_COPY_WHOLE " is an older one, without a list of files");
    }
    if (rc == 0) {
        const store_check_counts_t *n = &r.counts;
        printf(
            "ok: %llu messages, %llu on levels, %llu ready in topics, %llu retrying, %llu leased, %llu in DLQs (%s%s; "
            "%llu records read once, %s)\n",
            (unsigned long long)n->messages, (unsigned long long)n->level, (unsigned long long)n->topic,
            (unsigned long long)n->retry, (unsigned long long)n->lease, (unsigned long long)n->dlq, cfg->dir, whole,
            (unsigned long long)n->records, view);
        return CHECK_DATA_OK;
    }
    if (view[0] != '\0') {
        fprintf(stderr, "check-data: %s %s\n", cfg->dir, view);
    }
    if (rc == STORE_OPEN_DAMAGED) {
        fprintf(stderr, "check-data: %s\n", err);
        return CHECK_DATA_DAMAGED;
    }
    fprintf(stderr, "check-data: not checked: %s\n", err);
    if (rc == STORE_OPEN_IN_USE) {
        fprintf(stderr, "check-data: a running broker holds %s: stop it first, then check\n", cfg->dir);
    }
    return CHECK_DATA_UNCHECKED;
}

/* While the store opens, systemd is asked for more start time every
 * STORE_OPEN_EXTEND_TICK_MS (common/service_extend.h: each request covers
 * three ticks), up to STORE_OPEN_EXTEND_MAX_MS: a LevelDB recovery replays
 * the logs not yet in tables (a few write-buffer-size memtables) and the
 * compactions they cause, which takes seconds to minutes on a slow disk; an
 * open still running after an hour is taken as hung, and systemd ends it at
 * max(TimeoutStartSec=, an hour) — a restart that recovers from scratch
 * every 90 s for good is what the requests are for, a broker hung for ever
 * what the bound is for. */
#define STORE_OPEN_EXTEND_TICK_MS 10000
#define STORE_OPEN_EXTEND_MAX_MS  (3600 * 1000)

/* What the broker says once it serves, in its log line and to systemd:
 * "listening on 127.0.0.1:7379" and "; TLS on 127.0.0.1:7380" or
 * " (TLS only)" when it has a TLS port. */
static void format_listening(const config_t *cfg, const server_t *srv, char *buf, size_t len)
{
    char tls[96] = "";
    if (server_port(srv) == 0) {
        snprintf(tls, sizeof tls, " (TLS only)");
    } else if (server_tls_port(srv) != 0) {
        snprintf(tls, sizeof tls, "; TLS on %s:%d", cfg->bind, server_tls_port(srv));
    }
    snprintf(buf, len, "listening on %s:%d%s", cfg->bind, server_port(srv) ? server_port(srv) : server_tls_port(srv),
             tls);
}

typedef struct hup_ctx {
    config_t *cfg;
    server_t *srv;
    int argc;
    char **argv;
    const char *listening; /* format_listening's, for READY=1's STATUS= after a reload */
} hup_ctx_t;

/* SIGHUP: the configuration, then the TLS files (replaced in place or
 * renamed by the reload), even when the configuration did not re-read. */
static void on_hup(void *arg)
{
    hup_ctx_t *h = arg;
    service_notify_or_warn("RELOADING=1\nSTATUS=SIGHUP: re-reading the configuration");
    config_reload(h->cfg, h->argc, h->argv);
    server_reload_metrics_hosts(h->srv);
    server_reload_tls(h->srv);
    server_reload_users(h->srv);
    service_notify_or_warn("READY=1\nSTATUS=%s", h->listening);
}

/* The users file, when users-file is set: 0 and *out (NULL without one), or 1
 * with the message logged. */
static int load_users(const config_t *cfg, users_t **out)
{
    char err[512];
    *out = NULL;
    if (cfg->users_file == NULL) {
        return 0;
    }
    if (users_load(cfg->users_file, out, err, sizeof err) != 0) {
        log_error("configuration: users-file: %s", err);
        return 1;
    }
    if (users_count(*out) == 0) {
        log_warn("users-file %s lists no users: every client must AUTH, and nobody can", cfg->users_file);
    }
    return 0;
}

int main(int argc, char **argv)
{
    const uint64_t start_us = clock_mono_us(); /* the start's timeline, logged with the listening line */
    config_t cfg;
    config_action_t action;
    char err[1024];
    config_init_defaults(&cfg);
    if (config_load(&cfg, argc, argv, &action, err, sizeof err) != 0) {
        log_error("configuration: %s", err);
        config_free(&cfg);
        return CFG_EXIT_CONFIG;
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
    case CONFIG_CHECK: {
        users_t *u = NULL;
        if (load_users(&cfg, &u) != 0) {
            config_free(&cfg);
            return CFG_EXIT_CONFIG;
        }
        users_free(u);
        if (server_check_tls(&cfg, err, sizeof err) != 0) { /* the files a start would refuse, said now */
            log_error("configuration: %s", err);
            config_free(&cfg);
            return CFG_EXIT_CONFIG;
        }
        config_print(&cfg, stdout); /* a value not printable is said on stderr; still valid: 0 */
        config_free(&cfg);
        return 0;
    }
    case CONFIG_CHECK_DATA: {
        int rc = check_data(&cfg);
        config_free(&cfg);
        return rc;
    }
    case CONFIG_RUN:
        break;
    }
    if (log_keys_apply(&cfg, err, sizeof err) != 0) {
        log_error("configuration: %s", err);
        config_free(&cfg);
        return CFG_EXIT_CONFIG;
    }
    if (fdlimit_apply(&cfg.max_clients, &cfg.max_open_files, err, sizeof err) != 0) {
        log_error("%s", err);
        config_free(&cfg);
        return 1;
    }
    cfg.store.max_open_files = (int)cfg.max_open_files;
    users_t *users = NULL;
    if (load_users(&cfg, &users) != 0) {
        config_free(&cfg);
        return CFG_EXIT_CONFIG;
    }
    if (heap_policy_apply(err, sizeof err) != 0) {
        log_warn("%s; a burst's large blocks stay in the heaps until an idle second's trim", err);
    }
    signal(SIGPIPE, SIG_IGN);
    if (evthread_use_pthreads() != 0) {
        log_error("libevent has no pthreads support");
        return 1;
    }
    struct event_base *base = conn_event_base_new(); /* priorities: TLS handshakes after all else (conn.h) */
    if (base == NULL) {
        log_error("cannot create the event base");
        return 1;
    }

    /* The disk reserve is given back before the open, so a full disk still has
     * the room a reopen needs; the writer writes it again when there is space.
     * That room is up to two memtables. */
    if (cfg.disk_reserve > 0 && cfg.disk_reserve < 2 * cfg.write_buffer_size) {
        char reserve[32], memtable[32];
        units_format_size((uint64_t)cfg.disk_reserve, reserve, sizeof reserve);
        units_format_size((uint64_t)cfg.write_buffer_size, memtable, sizeof memtable);
        log_warn("disk-reserve %s is less than twice write-buffer-size %s: on a full disk a restart may lack the room "
                 "to reopen the store (it writes up to two memtables)",
                 reserve, memtable);
    }
    /* Not the reserve of a broker that runs on this directory: its start is
     * refused below, and it would have taken that broker's room. */
    uint64_t released = store_dir_in_use(cfg.dir) ? 0 : diskguard_ballast_release(cfg.dir);
    if (released > 0 && diskguard_free_bytes(cfg.dir) < 2 * released) {
        log_warn("disk nearly full: %llu bytes free on %s after releasing the disk reserve",
                 (unsigned long long)diskguard_free_bytes(cfg.dir), cfg.dir);
    }
    const uint64_t open_us = clock_mono_us();
    store_t *store = NULL;
    char opening[4200];
    snprintf(opening, sizeof opening, "recovering the store %s", cfg.dir);
    service_extend_t *extend = service_extend_start(opening, STORE_OPEN_EXTEND_TICK_MS, STORE_OPEN_EXTEND_MAX_MS);
    int opened = store_open(&cfg.store, clock_wall_ms(), &store, err, sizeof err);
    service_extend_stop(extend);
    if (opened != 0) {
        log_error("cannot open the data directory: %s", err);
        users_free(users);
        event_base_free(base);
        config_free(&cfg);
        return 1;
    }
    if (store_open_note(store)[0] != '\0') {
        log_warn("%s", store_open_note(store));
    }
    if (store_open_info(store)[0] != '\0') { /* a restore or an upgrade: the operator sees it happen */
        log_info("%s", store_open_info(store));
    }
    if (store_created(store)) { /* a --dir typo starts empty: say so, once, where the start is logged */
        log_info("data directory %s: created a new, empty store (nothing was there)", cfg.dir);
    }
    if (cfg.backup_dir != NULL && cfg.backup_dir[0] != '\0') {
        backup_discard_unfinished(cfg.backup_dir); /* the disk space of copies a crash cut short */
    }

    const uint64_t opened_us = clock_mono_us();
    server_t *srv = server_new(&cfg, base);
    server_set_users(srv, users);
    char listening[256] = "";
    hup_ctx_t hup = { &cfg, srv, argc, argv, listening };
    server_on_hup(srv, on_hup, &hup);
    if (server_listen(srv, err, sizeof err) != 0) {
        log_error("%s", err);
        store_close(store, NULL, 0);
        server_free(srv);
        event_base_free(base);
        config_free(&cfg);
        return 1;
    }
    writer_t *w = writer_new(store, &cfg.store, base, server_job_done, server_writer_stopped, srv);
    server_set_writer(srv, w);
    const uint64_t reserve_us = clock_mono_us();
    writer_set_disk_reserve(w, (uint64_t)cfg.disk_reserve);
    const uint64_t reserved_us = clock_mono_us();
    writer_set_wake_budget(w, (uint64_t)cfg.max_client_memory, cmd_listing_estimate(&cfg, 1));
    if (writer_start(w, err, sizeof err) != 0) {
        log_error("%s", err);
        return 1;
    }
    char spec[512];
    lvl_table_format(&cfg.store.levels, spec, sizeof spec);
    format_listening(&cfg, srv, listening, sizeof listening);
    log_info("hourglass-broker %s pid %ld %s; dir %s; levels %s; fsync %s%s; %s", PACKAGE_VERSION, (long)getpid(),
             listening, cfg.dir, spec, cfg.fsync_always ? "always" : "no", cfg.metrics_port ? "" : "; metrics off",
             cfg.users_file ? "users from the users-file (AUTH required)" : "no users (no AUTH)");
    log_info("started in %.3f s: configuration and disk reserve released %.3f s, store open (LevelDB recovery) %.3f "
             "s, disk reserve written %.3f s",
             (double)(clock_mono_us() - start_us) / 1e6, (double)(open_us - start_us) / 1e6,
             (double)(opened_us - open_us) / 1e6, (double)(reserved_us - reserve_us) / 1e6);
    if (cfg.metrics_port) {
        log_info("metrics on http://%s:%lld/metrics", cfg.metrics_bind, cfg.metrics_port);
    }
    /* Ready for systemd (Type=notify): the listener is bound, the storage
     * thread runs; a connection made now waits in the backlog for the loop. */
    service_notify_or_warn("READY=1\nSTATUS=%s", listening);

    server_run(srv);

    writer_free(w);
    server_free(srv);
    event_base_free(base);
    log_info("exited cleanly");
    config_free(&cfg);
    return 0;
}
