/*
 * consumer/consumer_main.c — hourglass-consumer, the order-cancel worker.
 *
 * Reads order ids from a Hourglass topic (the delayed "order timeout"
 * messages) through libhourglass's consumer loop and cancels each order with
 * hg_order_cancel: one transaction, the claim WHERE status='pending', the side
 * effects only when the claim won (DESIGN.md §5; docs/order-cancel.md).
 *
 *   message payload      the order id in decimal; anything else is a
 *                        permanent failure with the reason (NACK → DLQ)
 *   CANCELLED / NOT_PENDING / NOT_FOUND          → done (ACK)
 *   TRANSIENT (deadlock, lock wait, lost or killed connection …)
 *                        → retry: local backoff, then NACK (broker schedule)
 *   PERMANENT (SQL refused, constraint …)        → fail: NACK with the reason
 *
 * Configuration: one table (`options` below) of {name, type, default, range,
 * help} for the engine in common/cfg.h; an INI file (libinih; sections only
 * group keys for the reader) and `--name value` flags set the same keys,
 * flags last. --check-config checks everything that can be checked without
 * connecting and names the field. Logging is common/log.h; /metrics and
 * /healthz are common/prom.h's endpoint.
 *
 * Threads: the caller of hg_consumer_run (main) waits; the library's N
 * workers call handle_message, each with its own hg_order_db (slot
 * msg->worker, opened lazily on that worker's first message — one handle per
 * thread); the metrics thread (common/prom.c) runs an evhttp server on its
 * own event base.
 * Counters are relaxed atomics. SIGINT / SIGTERM call hg_consumer_stop, which
 * is async-signal-safe; the workers finish the messages in hand.
 */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include <hourglass/hourglass.h>
#include <hourglass/order.h>

#include <inttypes.h>
#include <signal.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include <event2/thread.h>

#include "common/cfg.h"
#include "common/dbkeys.h"
#include "common/log.h"
#include "common/prom.h"

#define PROGRAM "hourglass-consumer"
#define EXIT_CONFIG 2          /* a usage or configuration error */
#define REASON_MAX_LEN 64      /* orders.cancel_reason VARCHAR(64) */

/* ------------------------------------------------------------------ logging */

/* The consumer loop's log callback: 0 error, 1 warning, 2 info. */
static void library_log(int level, const char *message, void *arg)
{
    (void)arg;
    log_msg(level <= 0 ? LOG_LEVEL_ERROR : level == 1 ? LOG_LEVEL_WARN : LOG_LEVEL_INFO, "%s", message);
}

/* ------------------------------------------------------------------ configuration */

typedef struct config {
    char *uri, *group, *topic;
    unsigned long long workers, count, block_ms, lease_ms, touch_ms;

    DB_KEYS_FIELDS; /* the mysql-* keys */

    char *claim_sql, *lookup_sql, *cancel_reason;
    char *side_effect_sql[HG_ORDER_SQL_MAX_SIDE_EFFECTS];
    size_t side_effect_count;
    int side_effect_source; /* which source set the list: a new source replaces it */

    unsigned long long retry_base_ms, retry_cap_ms, retry_attempts;
    double retry_factor, retry_jitter;

    unsigned long long metrics_port;
    char *metrics_bind;
    int log_level; /* log_level_t */
} config_t;

/* side-effect-sql: repeatable, each occurrence adds one statement; "none"
 * empties the list; a new source (file after defaults, flags after the file)
 * replaces the list instead of adding to it. */
static int set_side_effect(void *conf, const cfg_key_t *k, const char *value, cfg_source_t source, char *err,
                           size_t errlen);

#define OFF(field) offsetof(config_t, field)
/* The flag legend: name = INI key = --flag; the help text is --help's. */
static const cfg_key_t options[] = {
    {CFG_KEY("uri", CFG_STRING, "hourglass://127.0.0.1:7379", 0, 0, OFF(uri),
     "broker URI, hourglass://[user:pass@]host[:port]"), .required = 1},
    {CFG_KEY("group", CFG_STRING, "order-cancel", 0, 0, OFF(group), "consumer group"), .required = 1},
    {CFG_KEY("topic", CFG_STRING, "order-timeout", 0, 0, OFF(topic), "topic carrying the order ids"), .required = 1},
    {CFG_KEY("workers", CFG_INT, "4", 1, 256, OFF(workers),
     "worker threads, each with a broker and a MariaDB connection")},
    {CFG_KEY("count", CFG_INT, "1", 1, 1000, OFF(count), "messages per PULL")},
    {CFG_KEY("block", CFG_DURATION, "5s", 1, 86400000, OFF(block_ms),
     "PULL BLOCK: how long one PULL waits for a message")},
    {CFG_KEY("lease", CFG_DURATION, "30s", 1000, 86400000, OFF(lease_ms),
     "lease per message; renewed while a cancel runs")},
    {CFG_KEY("touch-interval", CFG_DURATION, "0ms", 0, 86400000, OFF(touch_ms), "lease renewal period (0: lease / 2)")},

    DB_KEYS_ROWS(config_t),

    {CFG_KEY("claim-sql", CFG_STRING, NULL, 0, 0, OFF(claim_sql),
     "the claim: ? = order id (exactly one), :reason = cancel-reason; WHERE … status='pending'"),
     .shown_default = "the reference schema's", .required = 1},
    {CFG_KEY("side-effect-sql", CFG_CUSTOM, NULL, 0, 0, OFF(side_effect_sql),
     "a side effect run when the claim won (repeat for several, in order; \"none\" for none)"), .hook = set_side_effect,
     .hint = "SQL", .shown_default = "the reference schema's stock return and outbox update"},
    {CFG_KEY("lookup-sql", CFG_STRING, NULL, 0, 0, OFF(lookup_sql),
     "returns a row when the order exists (? = order id)"),
     .shown_default = "the reference schema's", .required = 1},
    {CFG_KEY("cancel-reason", CFG_STRING, "timeout-message", 0, 0, OFF(cancel_reason),
     "value bound to :reason (at most 64 bytes)")},

    {CFG_KEY("retry-base", CFG_DURATION, "200ms", 1, 3600000, OFF(retry_base_ms),
     "first local retry delay after a transient failure")},
    {CFG_KEY("retry-factor", CFG_DOUBLE, "2", 1, 100, OFF(retry_factor), "growth of the delay per retry")},
    {CFG_KEY("retry-cap", CFG_DURATION, "5s", 1, 3600000, OFF(retry_cap_ms), "longest local retry delay")},
    {CFG_KEY("retry-attempts", CFG_INT, "3", 0, 100, OFF(retry_attempts),
     "local retries before the NACK hands over to the broker")},
    {CFG_KEY("retry-jitter", CFG_DOUBLE, "0.2", 0, 1, OFF(retry_jitter), "random share of each delay, 0..1")},

    {CFG_KEY("metrics-port", CFG_INT, "0", 0, 65535, OFF(metrics_port),
     "HTTP port for /metrics and /healthz (0: off)")},
    {CFG_KEY("metrics-bind", CFG_STRING, "127.0.0.1", 0, 0, OFF(metrics_bind),
     "address the metrics server listens on")},
    {CFG_KEY("log-level", CFG_ENUM, "info", 0, 0, OFF(log_level),
     "least severe log records written"), .words = LOG_LEVEL_WORDS},
};

static const char *const sections[] = {"broker", "consumer", "mysql", "sql", "retry", "metrics", "log", NULL};

static const cfg_table_t table = {
    .program = PROGRAM,
    .keys = options,
    .count = sizeof options / sizeof options[0],
    .sections = sections,
};

static char *xstrdup(const char *s)
{
    char *d = strdup(s);
    if (d == NULL) {
        fputs(PROGRAM ": out of memory\n", stderr);
        abort();
    }
    return d;
}

static int set_side_effect(void *conf, const cfg_key_t *k, const char *value, cfg_source_t source, char *err,
                           size_t errlen)
{
    config_t *cfg = conf;
    if (cfg->side_effect_source != (int)source) { /* a new source replaces the list */
        for (size_t i = 0; i < cfg->side_effect_count; i++)
            free(cfg->side_effect_sql[i]);
        cfg->side_effect_count = 0;
        cfg->side_effect_source = (int)source;
    }
    if (strcasecmp(value, "none") == 0)
        return 0;
    if (cfg->side_effect_count == HG_ORDER_SQL_MAX_SIDE_EFFECTS) {
        snprintf(err, errlen, "%s: more than %d statements", k->name, HG_ORDER_SQL_MAX_SIDE_EFFECTS);
        return -1;
    }
    cfg->side_effect_sql[cfg->side_effect_count++] = xstrdup(value);
    return 0;
}

static void config_init(config_t *cfg)
{
    memset(cfg, 0, sizeof *cfg);
    cfg_init(&table, cfg);
    /* The SQL defaults are the library's: the reference schema's statements. */
    hg_order_sql_t sql;
    hg_order_sql_default(&sql);
    cfg->claim_sql = xstrdup(sql.claim);
    cfg->lookup_sql = xstrdup(sql.lookup);
    for (size_t i = 0; i < sql.side_effect_count; i++)
        cfg->side_effect_sql[cfg->side_effect_count++] = xstrdup(sql.side_effects[i]);
    cfg->side_effect_source = CFG_SOURCE_DEFAULT;
}

static void config_free(config_t *cfg)
{
    cfg_free(&table, cfg);
    for (size_t i = 0; i < cfg->side_effect_count; i++)
        free(cfg->side_effect_sql[i]);
}

static void config_sql(const config_t *cfg, hg_order_sql_t *sql)
{
    memset(sql, 0, sizeof *sql);
    sql->claim = cfg->claim_sql;
    for (size_t i = 0; i < cfg->side_effect_count; i++)
        sql->side_effects[i] = cfg->side_effect_sql[i];
    sql->side_effect_count = cfg->side_effect_count;
    sql->lookup = cfg->lookup_sql;
}

static void config_db_params(const config_t *cfg, const hg_order_sql_t *sql, hg_order_db_params_t *p)
{
    memset(p, 0, sizeof *p);
    DB_KEYS_TO_PARAMS(cfg, p);
    p->sql = sql;
}

/* Everything checkable without connecting. Returns 0 / -1 with err naming
 * the field. */
static hg_outcome_t noop_handler(const hg_message_t *m, char *r, size_t n, void *a)
{
    (void)m, (void)r, (void)n, (void)a;
    return HG_DONE;
}

static void consumer_opts(const config_t *cfg, hg_consumer_opts_t *o)
{
    hg_consumer_opts_init(o);
    o->uri = cfg->uri;
    o->group = cfg->group;
    o->topic = cfg->topic;
    o->workers = (int)cfg->workers;
    o->count = (int)cfg->count;
    o->block_ms = (uint32_t)cfg->block_ms;
    o->lease_ms = (uint32_t)cfg->lease_ms;
    o->touch_interval_ms = (uint32_t)cfg->touch_ms;
    o->retry.base_ms = (uint32_t)cfg->retry_base_ms;
    o->retry.factor = cfg->retry_factor;
    o->retry.cap_ms = (uint32_t)cfg->retry_cap_ms;
    o->retry.attempts = (int)cfg->retry_attempts;
    o->retry.jitter = cfg->retry_jitter;
    o->log = library_log;
}

static int config_validate(const config_t *cfg, char *err, size_t errlen)
{
    if (cfg_check_required(&table, cfg, err, errlen) != 0)
        return -1;
    hg_order_sql_t sql;
    config_sql(cfg, &sql);
    if (hg_order_sql_validate(&sql, err, errlen) != 0)
        return -1;
    if (strlen(cfg->cancel_reason) > REASON_MAX_LEN) {
        snprintf(err, errlen, "cancel-reason: %zu bytes, at most %d (orders.cancel_reason)", strlen(cfg->cancel_reason),
                 REASON_MAX_LEN);
        return -1;
    }
    if (cfg->retry_cap_ms < cfg->retry_base_ms) {
        snprintf(err, errlen, "retry-cap: %llums is below retry-base %llums", cfg->retry_cap_ms, cfg->retry_base_ms);
        return -1;
    }
    if (db_keys_check(cfg->mysql_socket, err, errlen) != 0)
        return -1;
    /* The broker URI and the loop's options: the library checks them without
     * connecting. Its URI errors get the field name in front. */
    hg_consumer_opts_t o;
    consumer_opts(cfg, &o);
    o.handler = noop_handler;
    o.log = NULL;
    hg_consumer_t *c = NULL;
    hg_error_t e = {0};
    hg_err_t rc = hg_consumer_new(&o, &c, &e);
    hg_consumer_free(c);
    if (rc != HG_OK) {
        snprintf(err, errlen, "%s: %s", rc == HG_ERR_URI || rc == HG_ERR_UNSUPPORTED ? "uri" : "consumer", e.message);
        return -1;
    }
    return 0;
}

static void usage(FILE *out)
{
    fprintf(out,
            "Usage: " PROGRAM " [--config FILE] [--KEY VALUE]... [--check-config]\n"
            "\n"
            "Cancels unpaid orders: reads order ids from a Hourglass topic and runs, for each,\n"
            "one transaction — the claim (UPDATE … WHERE id=? AND status='pending'), then the side\n"
            "effects only if the claim changed a row. Duplicates and paid orders change nothing.\n"
            "\n"
            "  -c, --config FILE   INI file with the keys below (flags override it)\n"
            "      --check-config  check the configuration without connecting; exit 0 if valid,\n"
            "                      2 with an error naming the field otherwise\n"
            "  -h, --help          this text\n"
            "  -V, --version       the version\n"
            "\n"
            "Keys (INI `key = value`, or `--key value` / `--key=value`):\n");
    cfg_print_keys(&table, out);
    fprintf(out, "\nExit status: 0 after a clean stop (SIGINT/SIGTERM) or a valid --check-config,\n"
                 "1 on a start-up failure, 2 on a usage or configuration error.\n"
                 "See docs/order-cancel.md and etc/hourglass-consumer.conf.\n");
}

/* ------------------------------------------------------------------ metrics */

static const double latency_bounds[] = {0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05,
                                        0.1,    0.25,  0.5,    1,     2.5,  5,     10};
#define LATENCY_BUCKETS (sizeof latency_bounds / sizeof latency_bounds[0])

static struct counters {
    atomic_uint_fast64_t cancelled, not_pending, not_found, transient, permanent, bad_payload, db_unavailable;
    atomic_uint_fast64_t latency_bucket[LATENCY_BUCKETS + 1]; /* last: +Inf */
    atomic_uint_fast64_t latency_count, latency_sum_us;
} counters;

static void count(atomic_uint_fast64_t *c)
{
    atomic_fetch_add_explicit(c, 1, memory_order_relaxed);
}

static void observe_latency(uint64_t us)
{
    size_t b = 0;
    while (b < LATENCY_BUCKETS && (double)us / 1e6 > latency_bounds[b])
        b++;
    count(&counters.latency_bucket[b]);
    count(&counters.latency_count);
    atomic_fetch_add_explicit(&counters.latency_sum_us, us, memory_order_relaxed);
}

static uint64_t load(atomic_uint_fast64_t *c)
{
    return atomic_load_explicit(c, memory_order_relaxed);
}

/* /metrics: this program's counters, the handler histogram and the loop's
 * statistics. arg: the hg_consumer_t. */
static void render_metrics(buf_t *b, void *arg)
{
    hg_consumer_t *consumer = arg;
    prom_metric_u64(b, "hourglass_consumer_cancelled_total", "counter", "Orders this consumer cancelled.",
                    load(&counters.cancelled));
    prom_metric_u64(b, "hourglass_consumer_not_pending_total", "counter",
                    "Messages for orders already paid or cancelled (nothing changed).", load(&counters.not_pending));
    prom_metric_u64(b, "hourglass_consumer_not_found_total", "counter",
                    "Messages for unknown orders (nothing changed).",
                    load(&counters.not_found));
    prom_metric_u64(b, "hourglass_consumer_retries_total", "counter",
                    "Transient failures (deadlock, lock wait, lost connection …) handed to the retry schedule.",
                    load(&counters.transient));
    prom_metric_u64(b, "hourglass_consumer_permanent_failures_total", "counter",
                    "Permanent failures (bad payload, SQL refused …) NACKed with their reason.",
                    load(&counters.permanent));
    prom_metric_u64(b, "hourglass_consumer_bad_payload_total", "counter",
                    "Payloads that are not an order id (part of the permanent failures).", load(&counters.bad_payload));
    prom_metric_u64(b, "hourglass_consumer_db_unavailable_total", "counter",
                    "Messages retried because MariaDB could not be reached.", load(&counters.db_unavailable));

    prom_hist_t h; /* a snapshot of the atomic buckets */
    prom_hist_init(&h, latency_bounds, (int)LATENCY_BUCKETS);
    for (size_t i = 0; i <= LATENCY_BUCKETS; i++)
        h.buckets[i] = load(&counters.latency_bucket[i]);
    h.count = load(&counters.latency_count);
    h.sum = (double)load(&counters.latency_sum_us) / 1e6;
    prom_hist_write(b, "hourglass_consumer_handler_seconds", "Time to handle one message (parse + cancel transaction).",
                    &h);

    hg_consumer_stats_t st;
    hg_consumer_stats(consumer, &st);
    prom_metric_u64(b, "hourglass_consumer_delivered_total", "counter", "Messages received from PULL.", st.delivered);
    prom_metric_u64(b, "hourglass_consumer_acked_total", "counter", "Messages ACKed.", st.done);
    prom_metric_u64(b, "hourglass_consumer_local_retries_total", "counter",
                    "Handler calls repeated after a local backoff.",
                    st.retried);
    prom_metric_u64(b, "hourglass_consumer_nacked_total", "counter", "NACKs after the local retries ran out.",
                    st.nacked);
    prom_metric_u64(b, "hourglass_consumer_failed_total", "counter", "NACKs of permanent failures.", st.failed);
    prom_metric_u64(b, "hourglass_consumer_lease_lost_total", "counter", "ACK/NACK/TOUCH that found the lease expired.",
                    st.lease_lost);
    prom_metric_u64(b, "hourglass_consumer_broker_errors_total", "counter",
                    "Connection and broker errors met by the workers.", st.errors);
}

/* ------------------------------------------------------------------ the handler */

typedef struct app {
    config_t cfg;
    hg_order_sql_t sql;
    hg_order_db_params_t db_params;
    hg_order_db **dbs; /* one per worker, opened by that worker */
} app_t;

static uint64_t mono_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000u + (uint64_t)ts.tv_nsec / 1000u;
}

static hg_outcome_t cancel_message(app_t *app, const hg_message_t *msg, char *reason, size_t reason_size)
{
    uint64_t order_id;
    char why[160];
    if (hg_order_parse_id(msg->payload, msg->payload_len, &order_id, why, sizeof why) != 0) {
        count(&counters.bad_payload);
        count(&counters.permanent);
        snprintf(reason, reason_size, "%s", why);
        log_msg(LOG_LEVEL_WARN, "message %s: %s", msg->id, why);
        return HG_FAIL;
    }

    hg_order_db **slot = &app->dbs[msg->worker];
    hg_order_error_t err;
    if (*slot == NULL) {
        *slot = hg_order_db_open(&app->db_params, &err);
        if (*slot == NULL) {
            count(&counters.db_unavailable);
            count(&counters.transient);
            snprintf(reason, reason_size, "order %" PRIu64 ": MariaDB unavailable: %s", order_id, err.message);
            log_msg(LOG_LEVEL_WARN, "worker %d: %s", msg->worker, reason);
            return HG_RETRY;
        }
    }

    hg_order_outcome_t outcome;
    hg_order_cancel(*slot, order_id, app->cfg.cancel_reason, &outcome, &err);
    switch (outcome) {
    case HG_ORDER_CANCELLED:
        count(&counters.cancelled);
        log_msg(LOG_LEVEL_DEBUG, "order %" PRIu64 ": cancelled (message %s)", order_id, msg->id);
        return HG_DONE;
    case HG_ORDER_NOT_PENDING:
        count(&counters.not_pending);
        log_msg(LOG_LEVEL_DEBUG, "order %" PRIu64 ": not pending, nothing to do (message %s)", order_id, msg->id);
        return HG_DONE;
    case HG_ORDER_NOT_FOUND:
        count(&counters.not_found);
        log_msg(LOG_LEVEL_WARN, "order %" PRIu64 ": no such order, message %s acknowledged", order_id, msg->id);
        return HG_DONE;
    case HG_ORDER_TRANSIENT:
        count(&counters.transient);
        snprintf(reason, reason_size, "order %" PRIu64 ": transient: %s", order_id, err.message);
        log_msg(LOG_LEVEL_INFO, "%s (attempt %u)", reason, msg->attempt);
        return HG_RETRY;
    case HG_ORDER_PAID:
    case HG_ORDER_PERMANENT:
        break;
    }
    count(&counters.permanent);
    snprintf(reason, reason_size, "order %" PRIu64 ": %s", order_id, err.message);
    log_msg(LOG_LEVEL_ERROR, "%s", reason);
    return HG_FAIL;
}

static hg_outcome_t handle_message(const hg_message_t *msg, char *reason, size_t reason_size, void *arg)
{
    uint64_t t0 = mono_us();
    hg_outcome_t r = cancel_message(arg, msg, reason, reason_size);
    observe_latency(mono_us() - t0);
    return r;
}

/* ------------------------------------------------------------------ main */

static hg_consumer_t *volatile running_consumer;

static void on_signal(int sig)
{
    (void)sig;
    hg_consumer_t *c = running_consumer;
    if (c != NULL)
        hg_consumer_stop(c);
}

/* Start-up check of the SQL against the database: a statement the server
 * refuses stops the start with the field named; an unreachable server only
 * warns (the workers keep trying). Returns 0 / -1. */
static int check_database(app_t *app)
{
    hg_order_error_t err;
    hg_order_db *db = hg_order_db_open(&app->db_params, &err);
    if (db == NULL) {
        if (err.code == 0) {
            log_msg(LOG_LEVEL_ERROR, "%s", err.message);
            return -1;
        }
        log_msg(LOG_LEVEL_WARN, "MariaDB not reachable yet (%s); the workers will keep trying", err.message);
        return 0;
    }
    int rc = 0;
    if (hg_order_db_prepare(db, &err) != 0) {
        if (hg_order_classify(err.code) == HG_ORDER_PERMANENT) {
            log_msg(LOG_LEVEL_ERROR, "the database refuses the configured SQL: %s", err.message);
            rc = -1;
        } else {
            log_msg(LOG_LEVEL_WARN, "could not check the SQL yet (%s); the workers will keep trying", err.message);
        }
    }
    hg_order_db_close(db);
    return rc;
}

int main(int argc, char **argv)
{
    char err[600];
    app_t app;
    memset(&app, 0, sizeof app);
    config_init(&app.cfg);
    cfg_args_t args;
    if (cfg_parse_args(&table, &app.cfg, argc, argv, &args, err, sizeof err) != 0) {
        fprintf(stderr, PROGRAM ": %s\n", err);
        config_free(&app.cfg);
        return EXIT_CONFIG;
    }
    if (args.action == CFG_HELP || args.action == CFG_VERSION) {
        if (args.action == CFG_HELP)
            usage(stdout);
        else
            printf(PROGRAM " %s\n", HG_VERSION_STRING);
        config_free(&app.cfg);
        return 0;
    }
    if (config_validate(&app.cfg, err, sizeof err) != 0) {
        fprintf(stderr, PROGRAM ": %s\n", err);
        config_free(&app.cfg);
        return EXIT_CONFIG;
    }
    if (args.action == CFG_CHECK) {
        if (args.config_path != NULL)
            printf(PROGRAM ": configuration OK (%s)\n", args.config_path);
        else
            printf(PROGRAM ": configuration OK\n");
        config_free(&app.cfg);
        return 0;
    }
    log_set_level((log_level_t)app.cfg.log_level);

    /* Process-wide set-up before any thread. */
    signal(SIGPIPE, SIG_IGN);
    if (hg_order_library_init() != 0) {
        log_msg(LOG_LEVEL_ERROR, "the MariaDB client library failed to initialise");
        config_free(&app.cfg);
        return 1;
    }
    evthread_use_pthreads();

    config_sql(&app.cfg, &app.sql);
    config_db_params(&app.cfg, &app.sql, &app.db_params);
    int status = 1;
    hg_consumer_t *consumer = NULL;
    prom_http_t *metrics = NULL;
    app.dbs = calloc(app.cfg.workers, sizeof *app.dbs);
    if (app.dbs == NULL)
        abort();
    if (check_database(&app) != 0)
        goto out;

    hg_consumer_opts_t opts;
    consumer_opts(&app.cfg, &opts);
    opts.handler = handle_message;
    opts.handler_arg = &app;
    hg_error_t e = {0};
    if (hg_consumer_new(&opts, &consumer, &e) != HG_OK) {
        log_msg(LOG_LEVEL_ERROR, "consumer: %s", e.message);
        goto out;
    }
    if (app.cfg.metrics_port > 0) {
        if (prom_http_start(&metrics, app.cfg.metrics_bind, (unsigned)app.cfg.metrics_port, render_metrics, NULL,
                            consumer, err, sizeof err) != 0) {
            log_msg(LOG_LEVEL_ERROR, "%s", err);
            goto out;
        }
        log_msg(LOG_LEVEL_INFO, "metrics on http://%s:%llu/metrics", app.cfg.metrics_bind, app.cfg.metrics_port);
    }

    running_consumer = consumer;
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);

    log_msg(LOG_LEVEL_INFO, PROGRAM " %s: group %s, topic %s, %llu workers, database %s", HG_VERSION_STRING, app.cfg.group,
            app.cfg.topic, app.cfg.workers, app.cfg.mysql_database);
    hg_err_t rc = hg_consumer_run(consumer);
    running_consumer = NULL;
    if (rc != HG_OK) {
        hg_error_t last;
        hg_consumer_last_error(consumer, &last);
        log_msg(LOG_LEVEL_ERROR, "consumer stopped: %s", last.message[0] ? last.message : hg_strerror(rc));
        goto out;
    }
    log_msg(LOG_LEVEL_INFO, "stopped: cancelled %" PRIu64 ", not pending %" PRIu64 ", not found %" PRIu64
                      ", transient %" PRIu64 ", permanent %" PRIu64,
            load(&counters.cancelled), load(&counters.not_pending), load(&counters.not_found),
            load(&counters.transient), load(&counters.permanent));
    status = 0;

out:
    prom_http_stop(metrics);
    hg_consumer_free(consumer);
    for (unsigned long long i = 0; i < app.cfg.workers; i++)
        hg_order_db_close(app.dbs[i]);
    free(app.dbs);
    config_free(&app.cfg);
    return status;
}
