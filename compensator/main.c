/*
 * compensator/main.c — hourglass-compensator: start-up, the layer threads,
 * signals, --once.
 *
 * The fallbacks that make every unpaid order cancelled even when its
 * message is lost (DESIGN.md §7; docs/compensator.md):
 *   relay       outbox rows still 'new' → sent with the remaining delay (relay.c)
 *   overdue     outbox rows not 'done' past expire_at + grace → cancelled (overdue.c)
 *   inspection  pending orders past expire_at + grace → cancelled, one
 *               instance at a time under GET_LOCK (inspect.c, lock.c)
 *   monitor     gauges, DLQ depth, thresholds → alert command (monitor.c, alerts.c)
 * Cancels go only through hg_order_cancel (cancel.c).
 *
 * Threads (daemon): one per enabled layer, each with its own MariaDB
 * connections and broker client, running its round then sleeping its
 * interval (stop.c cuts the sleep short); the metrics thread (evhttp); the
 * stop thread (common/stop_grace.c, started by comp_stop_start); main,
 * which blocks SIGINT/SIGTERM/SIGHUP everywhere and waits for them with
 * sigwait: SIGHUP re-reads the configuration (reload_config: the log keys are
 * applied, a rotated broker password makes the relay and the monitor
 * reconnect with it, other changes wait for a restart) and waits again; SIGINT /
 * SIGTERM request the stop, and main joins the layers with the two
 * signals unblocked, so a second one cuts at once. A layer finishes the
 * cancel in flight and stops between cancels, pages and batches; a MariaDB
 * call still running stop-grace after the signal (a hung server), or when
 * the layers are freed (the inspection lock's release), has its connection
 * cut (stop.h), so the stop takes about stop-grace at most.
 * --once: main runs each enabled layer one time, in the order above, and
 * exits 0 when none failed, 1 otherwise; SIGINT / SIGTERM stop it the same
 * way, SIGHUP is ignored.
 */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include <hourglass/hourglass.h>
#include <hourglass/order.h>

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <event2/thread.h>

#include "common/argv_secret.h"
#include "common/log.h"
#include "common/passwd.h"
#include "common/reload.h"
#include "common/stop_grace.h"
#include "common/service_notify.h"
#include "compensator/comp_config.h"
#include "compensator/inspect.h"
#include "compensator/metrics.h"
#include "compensator/monitor.h"
#include "compensator/overdue.h"
#include "compensator/relay.h"
#include "compensator/stats.h"
#include "compensator/stop.h"
#include "compensator/stuck.h"
#include "db/conn.h"
#include "base/clock.h"

#define PROGRAM     "hourglass-compensator"
#define EXIT_CONFIG CFG_EXIT_CONFIG /* a usage or configuration error */

/* ------------------------------------------------------------------ layers */

typedef struct runner {
    int layer; /* COMP_LAYER_INDEX_* */
    uint64_t interval_ms;
    void *state;
    comp_run_outcome_t (*run)(void *state, char *err, size_t errlen);
    void (*free_state)(void *state);
    pthread_t thread;
    int started;
    void (*keepalive)(void *state); /* NULL, or run every keepalive_ms while the layer waits for its next round */
    uint64_t keepalive_ms;
} runner_t;

static comp_run_outcome_t run_relay(void *s, char *err, size_t len)
{
    return comp_relay_run(s, NULL, err, len);
}
static comp_run_outcome_t run_overdue(void *s, char *err, size_t len)
{
    return comp_overdue_run(s, err, len);
}
static comp_run_outcome_t run_inspection(void *s, char *err, size_t len)
{
    return comp_inspect_run(s, err, len);
}
static comp_run_outcome_t run_monitor(void *s, char *err, size_t len)
{
    return comp_monitor_run(s, err, len);
}
static void free_relay(void *s)
{
    comp_relay_free(s);
}
static void free_overdue(void *s)
{
    comp_overdue_free(s);
}
static void free_inspection(void *s)
{
    comp_inspect_free(s);
}
static void free_monitor(void *s)
{
    comp_monitor_free(s);
}
static void keepalive_inspection(void *s)
{
    comp_inspect_keepalive(s);
}

/* r->keepalive, busy for /healthz while it runs (a hung server holds it). */
static void keepalive_busy(void *arg)
{
    runner_t *r = arg;
    comp_stats_busy(r->layer);
    r->keepalive(r->state);
    comp_stats_idle(r->layer);
}

/* Wait r->interval_ms for the next round, running r->keepalive every
 * r->keepalive_ms meanwhile. 1 when told to stop. */
static int wait_next_round(runner_t *r)
{
    return comp_sleep_keepalive(r->interval_ms, r->keepalive_ms, r->keepalive != NULL ? keepalive_busy : NULL, r);
}

/* One run of a layer, recorded in comp_stats (busy meanwhile: /healthz). */
static comp_run_outcome_t run_once(runner_t *r, char *err, size_t errlen)
{
    comp_stats_busy(r->layer);
    uint64_t t0 = clock_mono_us();
    comp_run_outcome_t o = r->run(r->state, err, errlen);
    comp_stats_run_end(r->layer, o, clock_mono_us() - t0, err);
    return o;
}

static void *layer_thread(void *arg)
{
    runner_t *r = arg;
    char err[600];
    while (!comp_stopping()) {
        run_once(r, err, sizeof err);
        if (wait_next_round(r))
            break;
    }
    return NULL;
}

/* Create the enabled layers, in run order. Returns how many. */
static size_t make_runners(const comp_config_t *cfg, const hg_order_db_params_t *params, runner_t *out)
{
    size_t n = 0;
    if (cfg->layers & COMP_LAYER_BIT(COMP_LAYER_INDEX_RELAY))
        out[n++] = (runner_t){ .layer = COMP_LAYER_INDEX_RELAY,
                               .interval_ms = cfg->relay_interval_ms,
                               .state = comp_relay_new(cfg, params),
                               .run = run_relay,
                               .free_state = free_relay };
    if (cfg->layers & COMP_LAYER_BIT(COMP_LAYER_INDEX_OVERDUE))
        out[n++] = (runner_t){ .layer = COMP_LAYER_INDEX_OVERDUE,
                               .interval_ms = cfg->overdue_interval_ms,
                               .state = comp_overdue_new(cfg, params),
                               .run = run_overdue,
                               .free_state = free_overdue };
    if (cfg->layers & COMP_LAYER_BIT(COMP_LAYER_INDEX_INSPECTION))
        out[n++] = (runner_t){ .layer = COMP_LAYER_INDEX_INSPECTION,
                               .interval_ms = cfg->inspect_interval_ms,
                               .state = comp_inspect_new(cfg, params),
                               .run = run_inspection,
                               .free_state = free_inspection,
                               .keepalive = keepalive_inspection,
                               .keepalive_ms = comp_inspect_keepalive_ms(cfg) };
    if (cfg->layers & COMP_LAYER_BIT(COMP_LAYER_INDEX_MONITOR))
        out[n++] = (runner_t){ .layer = COMP_LAYER_INDEX_MONITOR,
                               .interval_ms = cfg->monitor_interval_ms,
                               .state = comp_monitor_new(cfg, params),
                               .run = run_monitor,
                               .free_state = free_monitor };
    return n;
}

/* ------------------------------------------------------------------ start-up */

static void usage(FILE *out)
{
    fprintf(out, "Usage: " PROGRAM " [--config FILE] [--KEY VALUE]... [--once] [--check-config]\n"
                 "\n"
                 "The fallbacks that cancel every unpaid order on time even when its delayed message\n"
                 "is lost: the outbox relay, the overdue-outbox cancel, the order-table inspection\n"
                 "(one instance at a time, under a MySQL GET_LOCK) and monitoring with alerts.\n"
                 "Every cancel is hg_order_cancel: paid orders are never touched, none twice.\n"
                 "\n"
                 "  -c, --config FILE   INI file with the keys below (flags override it)\n"
                 "      --once          run each enabled layer one time and exit (cron, tests):\n"
                 "                      0 when none failed, 1 otherwise\n"
                 "      --check-config  check the configuration without connecting; exit 0 if valid,\n"
                 "                      2 with an error naming the key otherwise\n"
                 "  -h, --help          this text\n"
                 "  -V, --version       the version\n"
                 "\n"
                 "Keys (INI `key = value`, or `--key value` / `--key=value`; durations take a unit:\n"
                 "ms, s, m, h, d):\n");
    cfg_print_keys(comp_config_table(), out);
    fprintf(out, "\nExit status: 0 after a clean stop (SIGINT/SIGTERM), a valid --check-config or a\n"
                 "successful --once; 1 on a start-up failure or a failed --once; 2 on a usage or\n"
                 "configuration error. See docs/compensator.md and etc/hourglass-compensator.conf.\n");
}

static void db_params(const comp_config_t *cfg, hg_order_db_params_t *p)
{
    memset(p, 0, sizeof *p);
    DB_KEYS_TO_PARAMS(cfg, p);
}

/* The database has the tables: a set-up error (no such database or table,
 * access denied, a missing GRANT: hg_order_setup_hint) or another permanent
 * one stops the start; an unreachable server only warns (the layers keep
 * trying and report it). Returns 0 / -1. */
static int waiting_will_not_heal(unsigned code)
{
    return hg_order_setup_hint(code) != NULL || hg_order_classify(code) == HG_ORDER_PERMANENT;
}

static int check_database(const hg_order_db_params_t *params)
{
    db_conn_t *db = db_conn_new(params, "start-up check", DB_AUTOCOMMIT | DB_READ_COMMITTED);
    hg_order_error_t err;
    int rc = 0;
    static const char *const probes[] = { "SELECT 1 FROM orders LIMIT 0", "SELECT 1 FROM order_timeout_msg LIMIT 0" };
    if (db_connect(db, &err) != 0) {
        if (waiting_will_not_heal(err.code)) {
            log_msg(LOG_LEVEL_ERROR, "%s", err.message);
            rc = -1;
        } else {
            log_msg(LOG_LEVEL_WARN, "MariaDB not reachable yet (%s); the layers will keep trying", err.message);
        }
    } else {
        for (size_t i = 0; i < sizeof probes / sizeof probes[0] && rc == 0; i++)
            if (db_query(db, probes[i], &err) != 0 && waiting_will_not_heal(err.code)) {
                log_msg(LOG_LEVEL_ERROR, "the database does not have the reference schema: %s", err.message);
                rc = -1;
            }
    }
    db_conn_free(db);
    return rc;
}

/* SIGINT / SIGTERM during --once, and the second one of a daemon's stop. */
static void on_stop_signal(int sig)
{
    (void)sig;
    comp_stop_request_from_signal();
}

/* Warn about the password files others can read or write (mysql-password-file,
 * password-file): on out at --check-config, else in the log at start-up. */
static void warn_exposed(const comp_config_t *cfg, FILE *out)
{
    const passwd_key_file_t secrets[] = { DB_KEYS_SECRET_FILE(cfg), { "password-file", cfg->password_file } };
    passwd_warn_exposed(secrets, sizeof secrets / sizeof secrets[0], PROGRAM, out);
}

/* Parse the command line over cfg. Returns 0, or the exit status to use
 * (EXIT_CONFIG, or -1 for an immediate 0 after --help / --version). */
static int parse_args(int argc, char **argv, comp_config_t *cfg, int *check_only, int *once)
{
    char err[600];
    cfg_args_t args;
    if (cfg_parse_args(comp_config_table(), cfg, argc, argv, &args, err, sizeof err) != 0) {
        fprintf(stderr, PROGRAM ": %s\n", err);
        return EXIT_CONFIG;
    }
    if (args.action == CFG_HELP) {
        usage(stdout);
        return -1;
    }
    if (args.action == CFG_VERSION) {
        printf(PROGRAM " %s\n", HG_VERSION_STRING);
        return -1;
    }
    *check_only = args.action == CFG_CHECK;
    *once = (args.switches & 1u) != 0; /* switches[0]: --once */
    if (comp_config_validate(cfg, err, sizeof err) != 0) {
        fprintf(stderr, PROGRAM ": %s\n", err);
        return EXIT_CONFIG;
    }
    comp_stuck_set_backoff(cfg->permanent_failure_backoff_ms);
    if (*check_only) {
        warn_exposed(cfg, stderr);
        cfg_print_check(comp_config_table(), cfg, HG_VERSION_STRING, NULL, args.config_path, stdout, stderr);
    }
    return 0;
}

static int run_once_mode(runner_t *runners, size_t n)
{
    stop_grace_handle_signals(on_stop_signal);
    /* A logrotate postrotate that sends SIGHUP to every hourglass-compensator
     * must not kill a cron run mid-round (the default action): the run is
     * short, its log is not reopened. */
    signal(SIGHUP, SIG_IGN);
    int failed = 0;
    char err[600];
    for (size_t i = 0; i < n && !comp_stopping(); i++) {
        comp_run_outcome_t o = run_once(&runners[i], err, sizeof err);
        printf("%s: %s%s%s\n", comp_layer_name(runners[i].layer), comp_run_outcome_name(o), err[0] ? ": " : "", err);
        failed |= o == COMP_RUN_FAILED;
    }
    return failed ? 1 : 0;
}

/* ---- SIGHUP: the same start-up parse into a fresh struct (common/reload.h) */

static comp_config_t *running_config; /* run_daemon's: reload_load compares what password-file holds */

static int reload_load(void *conf, int argc, char **argv, char *err, size_t errlen)
{
    cfg_args_t args;
    comp_config_init(conf);
    if (cfg_parse_args(comp_config_table(), conf, argc, argv, &args, err, errlen) != 0 ||
        comp_config_validate(conf, err, errlen) != 0)
        return -1;
    /* The password is read from its file, not a key. A new one (a rotated
     * credential): the relay and the monitor close their broker clients at
     * their next round and open them again, reading the file again (they
     * also read it before every open, so a reconnect after the broker
     * refused the old password takes the new one without a SIGHUP). The
     * running config's copy follows, so the next SIGHUP compares with it.
     * (A changed password-file path is a key: cfg_reload names it.) */
    const comp_config_t *fresh = conf;
    comp_db_password_refresh(); /* mysql-password-file: the connections use a new one from their next connect */
    if (running_config != NULL && passwd_file_rotated(running_config->password_file, running_config->password,
                                                      fresh->password_file, fresh->password)) {
        memcpy(running_config->password, fresh->password, sizeof running_config->password);
        comp_password_rotated();
        log_msg(LOG_LEVEL_INFO,
                "SIGHUP: password-file %s holds another password: the relay and the monitor reconnect to the broker "
                "with it at their next round",
                fresh->password_file);
    }
    return 0;
}

static void reload_release(void *conf)
{
    comp_config_free(conf);
}

static const reload_program_t reload_program = { sizeof(comp_config_t), reload_load, reload_release };

/* The daemon's signals, SIGINT/SIGTERM/SIGHUP, into set and blocked in the
 * calling thread and every thread it starts from now on (they inherit the
 * mask); main takes them with sigwait. */
static void block_daemon_signals(sigset_t *set)
{
    sigemptyset(set);
    sigaddset(set, SIGINT);
    sigaddset(set, SIGTERM);
    sigaddset(set, SIGHUP);
    pthread_sigmask(SIG_BLOCK, set, NULL);
}

static int run_daemon(comp_config_t *cfg, runner_t *runners, size_t n, int argc, char **argv)
{
    sigset_t set;
    block_daemon_signals(&set); /* blocked since before the stop thread started (main) */

    comp_metrics_t *metrics = NULL;
    char err[600];
    if (cfg->metrics_port > 0) {
        if (comp_metrics_start(&metrics, cfg, err, sizeof err) != 0) {
            log_msg(LOG_LEVEL_ERROR, "%s", err);
            return 1;
        }
        log_msg(LOG_LEVEL_INFO, "metrics on http://%s:%llu/metrics", cfg->metrics_bind, cfg->metrics_port);
    }
    int status = 0;
    for (size_t i = 0; i < n; i++) {
        int rc = pthread_create(&runners[i].thread, NULL, layer_thread, &runners[i]);
        if (rc != 0) {
            log_msg(LOG_LEVEL_ERROR, "cannot start the %s thread: %s", comp_layer_name(runners[i].layer), strerror(rc));
            status = 1;
            break;
        }
        runners[i].started = 1;
    }
    if (status == 0) {
        int sig = 0;
        running_config = cfg;
        service_notify_or_warn("READY=1\nSTATUS=layers running");
        while (sigwait(&set, &sig) == 0 && sig == SIGHUP) {
            service_notify_or_warn("RELOADING=1");
            reload_config(comp_config_table(), cfg, &reload_program, argc, argv);
            prom_http_set_allowed_hosts(metrics, cfg->metrics_allowed_hosts); /* metrics-allowed-hosts */
            service_notify_or_warn("READY=1");
        }
        log_msg(LOG_LEVEL_INFO, "signal %d: stopping", sig);
        service_notify_or_warn("STOPPING=1\nSTATUS=stopping (signal %d)", sig);
    }
    comp_stop_request(); /* starts stop-grace */
    /* A second SIGINT / SIGTERM cuts at once: handled from now on, here. */
    stop_grace_handle_signals(on_stop_signal);
    sigset_t stops;
    sigemptyset(&stops);
    sigaddset(&stops, SIGINT);
    sigaddset(&stops, SIGTERM);
    pthread_sigmask(SIG_UNBLOCK, &stops, NULL);
    for (size_t i = 0; i < n; i++)
        if (runners[i].started)
            pthread_join(runners[i].thread, NULL);
    comp_metrics_stop(metrics);
    return status;
}

int main(int argc, char **argv_shown)
{
    /* The program reads a copy of its arguments: in argv_shown (ps, /proc/PID/cmdline) a password is hidden. */
    char **argv = argv_secret_protect(argc, argv_shown, "password-file and mysql-password-file");
    comp_config_t cfg;
    comp_config_init(&cfg);
    int check_only = 0, once = 0;
    int rc = parse_args(argc, argv, &cfg, &check_only, &once);
    if (rc != 0 || check_only) {
        comp_config_free(&cfg);
        return rc < 0 ? 0 : rc;
    }
    char log_err[512];
    if (log_keys_apply(&cfg, log_err, sizeof log_err) != 0) {
        fprintf(stderr, PROGRAM ": %s\n", log_err);
        comp_config_free(&cfg);
        return EXIT_CONFIG;
    }
    warn_exposed(&cfg, NULL);

    signal(SIGPIPE, SIG_IGN);
    if (hg_order_library_init() != 0) {
        log_msg(LOG_LEVEL_ERROR, "the MariaDB client library failed to initialise");
        comp_config_free(&cfg);
        return 1;
    }
    evthread_use_pthreads();
    comp_stats_init();

    comp_db_password_init(&cfg);
    hg_order_db_params_t params;
    db_params(&cfg, &params);
    if (check_database(&params) != 0) {
        comp_config_free(&cfg);
        return 1;
    }
    char err[600];
    sigset_t daemon_signals;
    if (!once)
        block_daemon_signals(&daemon_signals); /* before the stop thread starts: only main may take them */
    if (comp_stop_start(cfg.stop_grace_ms, err, sizeof err) != 0) { /* before the layers register their connections */
        log_msg(LOG_LEVEL_ERROR, "%s", err);
        comp_config_free(&cfg);
        return 1;
    }
    runner_t runners[COMP_LAYER_COUNT];
    size_t n = make_runners(&cfg, &params, runners);
    char layers[128] = "";
    for (size_t i = 0; i < n; i++)
        snprintf(layers + strlen(layers), sizeof layers - strlen(layers), "%s%s", i ? "," : "",
                 comp_layer_name(runners[i].layer));
    log_msg(LOG_LEVEL_INFO, PROGRAM " %s: database %s, layers %s, topic %s, lock '%s'%s", HG_VERSION_STRING,
            cfg.mysql_database, layers, cfg.topic, cfg.effective_lock_name, once ? " (--once)" : "");

    int status = once ? run_once_mode(runners, n) : run_daemon(&cfg, runners, n, argc, argv);

    /* Still under stop-grace: freeing releases the inspection lock, a round
     * trip a hung server would hold. */
    for (size_t i = 0; i < n; i++)
        runners[i].free_state(runners[i].state);
    stop_grace_handle_signals(SIG_IGN); /* nothing left to stop; the stop thread ends next */
    comp_stop_finish();
    log_msg(LOG_LEVEL_INFO,
            "stopped: relayed %" PRIu64 ", cancelled %" PRIu64 " (outbox-overdue) + %" PRIu64
            " (inspection), commit outcome unknown %" PRIu64 " (outbox-overdue) + %" PRIu64 " (inspection)",
            comp_load(&comp_stats.relay_sent), comp_load(&comp_stats.cancels[COMP_CANCELLER_OVERDUE][COMP_CANCEL_DONE]),
            comp_load(&comp_stats.cancels[COMP_CANCELLER_INSPECTION][COMP_CANCEL_DONE]),
            comp_load(&comp_stats.commit_unknown[COMP_CANCELLER_OVERDUE]),
            comp_load(&comp_stats.commit_unknown[COMP_CANCELLER_INSPECTION]));
    comp_config_free(&cfg);
    return status;
}
