/*
 * console/main.c — hourglass-console: the operator's web console.
 *
 *   hourglass-console [--config FILE] [--KEY VALUE]... [--check-config]
 *
 * A page and a JSON API on one port (default 127.0.0.1:7390): the broker's
 * levels, groups and dead-letter queues, messages by id or key, and the
 * order view — overdue orders, why each is late, the manual cancel — for
 * people logged in with the broker's own users (docs/console.md).
 *
 * Start-up: configuration (defaults < file < flags; --check-config prints
 * the effective values, warns of a static-dir the page cannot be served
 * from, ends with "configuration OK" and exits; the start warns of it
 * once too), the MariaDB client library, the order
 * database handle (a database that cannot be reached at start-up is fatal,
 * with the server's error; a later loss is reported in the overview and
 * healed on the next request), the listener, the sampler, then the
 * event loop until SIGINT / SIGTERM. SIGHUP re-reads the configuration
 * (reload_config: the log keys, allowed-hosts, header-timeout,
 * max-connections and static-dir — a new one only when the page can be
 * served from it, else the running one stays, logged — are applied and the
 * log file reopened; other
 * changes are named as waiting for a restart; the https certificate and key
 * are read again, and mysql-password-file: a rotated MariaDB password is
 * taken at the next call, as at every reconnect — console/db.c — and
 * sampler-password-file: the sampler's next sample logs in with a new
 * one — console/sampler.c), never stops it. Exit status: 0 after a clean stop or a valid
 * --check-config; 1 when it cannot start; 2 on a configuration error.
 *
 * Threads: the event loop's, the sampler's, the jobs' and the logins'
 * (console.h).
 */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include "console/console.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "common/argv_secret.h"
#include "common/log.h"
#include "common/reload.h"
#include "common/service_notify.h"

#define PROGRAM     "hourglass-console"
#define EXIT_CONFIG 2

static void usage(FILE *out)
{
    fprintf(out, "Usage: " PROGRAM " [--config FILE] [--KEY VALUE]... [--check-config]\n"
                 "\n"
                 "The operator's web console: delay levels, DLQs, messages and overdue orders with\n"
                 "the manual cancel, in a browser, for the broker's users (admin acts, other roles\n"
                 "look). A page and a JSON API under /api on one port; see docs/console.md.\n"
                 "\n"
                 "  -c, --config FILE   INI file with the keys below (flags override it)\n"
                 "      --check-config  check the configuration, print the effective values, exit\n"
                 "  -h, --help          this text\n"
                 "  -V, --version       the version\n"
                 "\n"
                 "Keys (INI `key = value`, or `--key value` / `--key=value`; durations take a unit):\n");
    cfg_print_keys(console_config_table(), out);
    fprintf(out, "\nExit status: 0 after a clean stop (SIGINT/SIGTERM) or a valid --check-config;\n"
                 "1 when it cannot start; 2 on a usage or configuration error.\n");
}

/* ---- SIGHUP: the start-up parse into a fresh struct (common/reload.h) */

typedef struct reload_args {
    int argc;
    char **argv;
    console_t *c;
} reload_args_t;

static const console_config_t *running_cfg; /* main's: reload_load checks a new static-dir against it */

static int reload_load(void *conf, int argc, char **argv, char *err, size_t errlen)
{
    cfg_args_t args;
    console_config_t *fresh = conf;
    console_config_init(fresh);
    if (cfg_parse_args(console_config_table(), fresh, argc, argv, &args, err, errlen) != 0 ||
        console_config_validate(fresh, err, errlen) != 0)
        return -1;
    /* static-dir is reloaded (the event loop, this thread, is its only reader), but only to a directory the page
     * can be served from: a bad one keeps the running one, said once here, and the other keys still apply */
    char why[4800];
    if (running_cfg != NULL && strcmp(fresh->static_dir, running_cfg->static_dir) != 0 &&
        server_static_check(fresh->static_dir, why, sizeof why) != 0) {
        log_error("SIGHUP: %s; keeping static-dir %s", why, running_cfg->static_dir);
        free(fresh->static_dir);
        fresh->static_dir = xstrdup(running_cfg->static_dir);
    }
    return 0;
}

static void reload_release(void *conf)
{
    console_config_free(conf);
}

static const reload_program_t reload_program = { sizeof(console_config_t), reload_load, reload_release };

static void on_hup(evutil_socket_t sig, short what, void *arg)
{
    (void)sig, (void)what;
    reload_args_t *a = arg;
    service_notify_or_warn("RELOADING=1");
    if (reload_config(console_config_table(), a->c->cfg, &reload_program, a->argc, a->argv) >= 0)
        server_reload_tls(a->c); /* the files may have been replaced in place */
    /* mysql-password-file is read, not a key: a rotated password reloads
     * "without a change"; the handles take it at their next call. */
    console_db_password_refresh(a->c);
    sampler_password_refresh(a->c->sampler); /* likewise sampler-password-file: its next sample logs in with it */
    service_notify_or_warn("READY=1");
}

static void on_stop(evutil_socket_t sig, short what, void *arg)
{
    (void)what;
    log_info("signal %d: stopping", (int)sig);
    service_notify_or_warn("STOPPING=1\nSTATUS=stopping (signal %d)", (int)sig);
    event_base_loopexit(arg, NULL);
}

#define SESSION_SWEEP_S 60 /* expired sessions are looked for this often */

static void on_sweep(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    session_sweep(arg);
}

int main(int argc, char **argv_shown)
{
    /* The program reads a copy of its arguments: in argv_shown (ps, /proc/PID/cmdline) a password is hidden. */
    char **argv = argv_secret_protect(argc, argv_shown, "sampler-password-file and mysql-password-file");
    console_config_t cfg;
    cfg_args_t args;
    char err[600];
    console_t c;

    console_config_init(&cfg);
    if (cfg_parse_args(console_config_table(), &cfg, argc, argv, &args, err, sizeof err) != 0) {
        fprintf(stderr, PROGRAM ": %s\n", err);
        console_config_free(&cfg);
        return EXIT_CONFIG;
    }
    if (args.action == CFG_HELP || args.action == CFG_VERSION) {
        if (args.action == CFG_HELP)
            usage(stdout);
        else
            printf(PROGRAM " %s\n", HG_VERSION_STRING);
        console_config_free(&cfg);
        return 0;
    }
    if (console_config_validate(&cfg, err, sizeof err) != 0) {
        fprintf(stderr, PROGRAM ": %s\n", err);
        console_config_free(&cfg);
        return EXIT_CONFIG;
    }
    const passwd_key_file_t secrets[] = { DB_KEYS_SECRET_FILE(&cfg),
                                          { "sampler-password-file", cfg.sampler_password_file } };
    char page_err[4800];
    int page_missing = server_static_check(cfg.static_dir, page_err, sizeof page_err) != 0;
    if (args.action == CFG_CHECK) { /* worded as hourglass-consumer's and hourglass-compensator's */
        passwd_warn_exposed(secrets, sizeof secrets / sizeof secrets[0], PROGRAM, stderr);
        if (page_missing)
            fprintf(stderr, PROGRAM ": warning: %s\n", page_err);
        cfg_print_check(console_config_table(), &cfg, HG_VERSION_STRING, NULL, args.config_path, stdout, stderr);
        console_config_free(&cfg);
        return 0;
    }
    if (log_keys_apply(&cfg, err, sizeof err) != 0) {
        fprintf(stderr, PROGRAM ": %s\n", err);
        console_config_free(&cfg);
        return EXIT_CONFIG;
    }
    passwd_warn_exposed(secrets, sizeof secrets / sizeof secrets[0], PROGRAM, NULL);
    if (page_missing)
        log_warn("%s", page_err); /* once here; the requests' own 404s are logged once per distinct error */
    signal(SIGPIPE, SIG_IGN);
    if (hg_order_library_init() != 0) {
        log_error("the MariaDB client library failed to initialise");
        console_config_free(&cfg);
        return 1;
    }

    memset(&c, 0, sizeof c);
    c.cfg = &cfg;
    int rc = 1;
    struct event *sigterm = NULL, *sigint = NULL, *sighup = NULL, *sweep = NULL;
    hg_order_error_t derr;
    console_db_password_init(&c);
    c.db = console_db_open(&c, &c.db_generation, &derr);
    if (c.db == NULL) {
        log_error("MariaDB: %s", derr.message);
        goto out;
    }
    c.base = event_base_new();
    if (c.base == NULL || server_start(&c, err, sizeof err) != 0) {
        log_error("%s", c.base == NULL ? "event_base_new failed" : err);
        goto out;
    }
    sigterm = evsignal_new(c.base, SIGTERM, on_stop, c.base);
    sigint = evsignal_new(c.base, SIGINT, on_stop, c.base);
    reload_args_t reload = { argc, argv, &c };
    running_cfg = &cfg;
    sighup = evsignal_new(c.base, SIGHUP, on_hup, &reload);
    event_add(sigterm, NULL);
    event_add(sigint, NULL);
    event_add(sighup, NULL);
    /* expired sessions end (and their broker connections close) without waiting for the next login */
    sweep = event_new(c.base, -1, EV_PERSIST, on_sweep, &c);
    struct timeval every = { SESSION_SWEEP_S, 0 };
    event_add(sweep, &every);
    if ((c.sampler = sampler_start(&c, err, sizeof err)) == NULL || (c.jobs = jobs_new(err, sizeof err)) == NULL ||
        (c.logins = logins_new(&c, err, sizeof err)) == NULL) {
        log_error("%s", err);
        goto out;
    }
    log_info(PROGRAM " %s listening on %s://%s:%d/ (broker %s, database %s, page %s)", HG_VERSION_STRING,
             server_scheme(&c), cfg.bind, c.port, cfg.uri, cfg.mysql_database, cfg.static_dir);
    service_notify_or_warn("READY=1\nSTATUS=listening on %s://%s:%d/", server_scheme(&c), cfg.bind, c.port);

    event_base_dispatch(c.base);
    rc = 0;

out:
    jobs_stop(c.jobs);     /* the stop pipe readable: every job's wait ends; the jobs joined */
    logins_free(c.logins); /* stopped, joined, their connections closed (before server_stop frees the rest) */
    jobs_free(c.jobs);     /* their threads end and are joined before anything they read goes */
    session_end_all(&c);
    sampler_free(c.sampler);
    server_stop(&c);
    if (sigterm != NULL)
        event_free(sigterm);
    if (sigint != NULL)
        event_free(sigint);
    if (sighup != NULL)
        event_free(sighup);
    if (sweep != NULL)
        event_free(sweep);
    if (c.base != NULL)
        event_base_free(c.base);
    hg_order_db_close(c.db);
    console_db_password_free(&c);
    if (rc == 0)
        log_info("stopped");
    console_config_free(&cfg);
    return rc;
}
