/*
 * consumer/consumer_config.c — hourglass-consumer's configuration (contract:
 * consumer_config.h): one table (`options` below) of {name, type, default,
 * range, help} for the engine in common/cfg.h; an INI file (libinih;
 * sections only group keys for the reader) and `--name value` flags set the
 * same keys, flags last. The mysql-* rows are db/keys.h's.
 * consumer_config_validate checks everything that can be checked without
 * connecting and names the field. Main thread, before any other starts.
 */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include "consumer/consumer_config.h"

#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "base/alloc.h"
#include "common/log.h"
#include "common/log_limit.h"

#define REASON_MAX_LEN 64 /* orders.cancel_reason VARCHAR(64) */

/* ------------------------------------------------------------------ logging */

/* The consumer loop's errors and warnings (the broker down: each worker's
 * PULL fails after every backoff, every ACK of a batch in hand fails): the
 * same text at most once per 10 s with a count, and one line when a worker
 * connects again (common/log_limit.h). Lives as long as the process. */
static log_limit_t broker_log = LOG_LIMIT_INITIALIZER("the broker answers", LOG_LIMIT_INTERVAL_MS);

/* How many workers of the running consumer the broker refuses: each
 * worker's HG_CONN_REFUSED adds one, its HG_CONN_ANSWERED takes it back
 * (libhourglass alternates the two per worker). A new consumer starts at 0
 * (consumer_config_loop_events): the old one's workers are gone. Any
 * worker thread. */
static atomic_int workers_refused;

/* The consumer loop's log callback: 0 error, 1 warning, 2 info. A failure's
 * key is its text without the "worker N: " in front (every worker fails
 * alike). The level decides the line's level only: whether the broker
 * refuses comes from the connection events (library_conn_event). Any worker
 * thread. */
static void library_log(int level, const char *message, void *arg)
{
    (void)arg;
    if (level >= 2) {
        log_msg(LOG_LEVEL_INFO, "%s", message);
        return;
    }
    const char *key = message;
    unsigned worker;
    int skip = 0;
    if (sscanf(message, "worker %u: %n", &worker, &skip) == 1 && skip > 0)
        key = message + skip;
    log_limit_fail(&broker_log, level <= 0 ? LOG_LEVEL_ERROR : LOG_LEVEL_WARN, key, "%s", message);
}

/* The consumer loop's connection events: a client that connects (a worker's
 * first connection, after the broker was down at the start or a reload made
 * a new consumer) or reconnects ends an outage of connections: the recovery
 * line, before the loop's own "worker N: reconnected to …". Not while the
 * broker refuses a worker's PULLs with an error reply (HG_CONN_REFUSED: a
 * full disk, a group bound to another topic): a connection does not end
 * that, and each worker's connection said "the broker answers again after
 * 0.0 s" between its refused PULLs. That outage ends when a worker's PULL is
 * answered after the refusals (HG_CONN_ANSWERED: a full disk freed): the
 * recovery line then. Other values: none yet (ignored, as the library's
 * contract asks). Any worker thread. */
static void library_conn_event(hg_conn_event_t event, const char *who, const char *address, void *arg)
{
    (void)who;
    (void)address;
    (void)arg;
    switch (event) {
    case HG_CONN_REFUSED:
        atomic_fetch_add(&workers_refused, 1);
        break;
    case HG_CONN_ANSWERED:
        atomic_fetch_sub(&workers_refused, 1);
        log_limit_ok(&broker_log);
        break;
    case HG_CONN_CONNECTED:
    case HG_CONN_RECONNECTED:
        if (atomic_load(&workers_refused) <= 0)
            log_limit_ok(&broker_log);
        break;
    }
}

void consumer_config_loop_events(hg_consumer_t *c)
{
    atomic_store(&workers_refused, 0);
    hg_consumer_set_conn_event_fn(c, library_conn_event, NULL);
}

/* ------------------------------------------------------------------ configuration */

/* side-effect-sql: repeatable, each occurrence adds one statement; "none"
 * (any case) alone is the empty list, and "none" with a statement in the
 * same source is refused, both ways round (it was skipped, so "none" next to
 * statements ran them, and a statement "none" could not be told from the
 * word); a new source (file after defaults, flags after the file) replaces
 * the list instead of adding to it. */
static int set_side_effect(void *conf, const cfg_key_t *k, const char *value, cfg_source_t source, char *err,
                           size_t errlen);
/* side-effect-sql as --check-config shows it: one setting per statement
 * (cfg_print_setting), or "none" for an empty list; returns how many
 * statements were not printable. */
static int print_side_effects(const void *conf, const cfg_key_t *k, FILE *out);

#define OFF(field) offsetof(consumer_config_t, field)
/* The flag legend: name = INI key = --flag; the help text is --help's. */
static const cfg_key_t options[] = {
    BROKER_KEYS_ROWS(consumer_config_t),
    { CFG_KEY("group", CFG_STRING, "order-cancel", 0, 0, OFF(group), "consumer group"), .required = 1 },
    { CFG_KEY("topic", CFG_STRING, "order-timeout", 0, 0, OFF(topic), "topic carrying the order ids"), .required = 1 },
    { CFG_KEY("workers", CFG_INT, "4", 1, 256, OFF(workers),
              "worker threads, each with a broker and a MariaDB connection") },
    { CFG_KEY("count", CFG_INT, "1", 1, 1000, OFF(count), "messages per PULL (raised to batch-size when below it)") },
    { CFG_KEY("batch-size", CFG_INT, "100", 1, 1000, OFF(batch_size),
              "orders cancelled per transaction, from one PULL's messages (1: one transaction per message)") },
    { CFG_KEY("block", CFG_DURATION, "5s", 1, 86400000, OFF(block_ms),
              "PULL BLOCK: how long one PULL waits for a message") },
    { CFG_KEY("lease", CFG_DURATION, "30s", 1000, 86400000, OFF(lease_ms),
              "lease per message; renewed while a cancel runs") },
    { CFG_KEY("touch-interval", CFG_DURATION, "0ms", 0, 86400000, OFF(touch_ms),
              "lease renewal period (0: lease / 2)") },
    { CFG_KEY("stop-grace", CFG_DURATION, "2s", 0, 3600000, OFF(stop_grace_ms),
              "on SIGTERM/SIGINT, how long a cancel in flight may take before its MariaDB connection is cut, and an "
              "ACK/NACK/TOUCH the broker has not answered with it (0: at once)") },

    DB_KEYS_ROWS(consumer_config_t),

    { CFG_KEY("claim-sql", CFG_STRING, NULL, 0, 0, OFF(claim_sql),
              "the claim: ? = order id (exactly one), :reason = cancel-reason; WHERE … status='pending'"),
      .shown_default = "the reference schema's", .required = 1 },
    { CFG_KEY("side-effect-sql", CFG_CUSTOM, NULL, 0, 0, OFF(side_effect_sql),
              "a side effect run when the claim won (repeat for several, in order; \"none\" alone for none)"),
      .hook = set_side_effect, .print = print_side_effects, .hint = "SQL",
      .shown_default = "the reference schema's stock return and outbox update" },
    { CFG_KEY("lookup-sql", CFG_STRING, NULL, 0, 0, OFF(lookup_sql),
              "returns a row when the order exists (? = order id)"),
      .shown_default = "the reference schema's", .required = 1 },
    { CFG_KEY("cancel-reason", CFG_STRING, "timeout-message", 0, 0, OFF(cancel_reason),
              "value bound to :reason (at most 64 bytes)"),
      .required = 1 },

    { CFG_KEY("retry-base", CFG_DURATION, "200ms", 1, 3600000, OFF(retry_base_ms),
              "first local retry delay after a transient failure") },
    { CFG_KEY("retry-factor", CFG_DOUBLE, "2", 1, 100, OFF(retry_factor), "growth of the delay per retry") },
    { CFG_KEY("retry-cap", CFG_DURATION, "5s", 1, 3600000, OFF(retry_cap_ms), "longest local retry delay") },
    { CFG_KEY("retry-attempts", CFG_INT, "3", 0, 100, OFF(retry_attempts),
              "local retries before the NACK hands over to the broker") },
    { CFG_KEY("retry-jitter", CFG_DOUBLE, "0.2", 0, 1, OFF(retry_jitter), "random share of each delay, 0..1") },

    METRICS_KEYS_ROWS(consumer_config_t),
    { CFG_KEY("broker-unhealthy-after", CFG_DURATION, "10s", 0, 86400000, OFF(broker_unhealthy_after_ms),
              "/healthz answers 503 once every worker's PULL has failed this long (0: at once)") },
    LOG_KEYS_ROWS(consumer_config_t),
};

static const char *const sections[] = { "broker", "consumer", "mysql", "sql", "retry", "metrics", "log", NULL };

static const cfg_table_t table = {
    .program = PROGRAM,
    .keys = options,
    .count = sizeof options / sizeof options[0],
    .sections = sections,
};

static int set_side_effect(void *conf, const cfg_key_t *k, const char *value, cfg_source_t source, char *err,
                           size_t errlen)
{
    consumer_config_t *cfg = conf;
    if (cfg->side_effect_source != (int)source) { /* a new source replaces the list */
        for (size_t i = 0; i < cfg->side_effect_count; i++)
            free(cfg->side_effect_sql[i]);
        cfg->side_effect_count = 0;
        cfg->side_effect_source = (int)source;
        cfg->side_effect_none = 0;
    }
    int none = strcasecmp(value, "none") == 0;
    if ((none && cfg->side_effect_count > 0) || (!none && cfg->side_effect_none)) {
        snprintf(err, errlen,
                 "%s: 'none' (no side effects) given together with a statement: give 'none' alone, or the "
                 "statements without it",
                 k->name);
        return -1;
    }
    if (none) {
        cfg->side_effect_none = 1;
        return 0;
    }
    if (cfg->side_effect_count == HG_ORDER_SQL_MAX_SIDE_EFFECTS) {
        snprintf(err, errlen, "%s: more than %d statements", k->name, HG_ORDER_SQL_MAX_SIDE_EFFECTS);
        return -1;
    }
    cfg->side_effect_sql[cfg->side_effect_count++] = xstrdup(value);
    return 0;
}

static int print_side_effects(const void *conf, const cfg_key_t *k, FILE *out)
{
    const consumer_config_t *cfg = conf;
    if (cfg->side_effect_count == 0)
        return cfg_print_setting(out, k->name, "none") != 0;
    int unprintable = 0;
    for (size_t i = 0; i < cfg->side_effect_count; i++)
        if (cfg_print_setting(out, k->name, cfg->side_effect_sql[i]) != 0)
            unprintable++;
    return unprintable;
}

const cfg_table_t *consumer_config_table(void)
{
    return &table;
}

void consumer_config_init(consumer_config_t *cfg)
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
    hg_client_opts_init(&cfg->client_opts);
}

int consumer_config_credentials(consumer_config_t *cfg, char *err, size_t errlen)
{
    hg_client_opts_init(&cfg->client_opts);
    if (DB_KEYS_CREDENTIALS(cfg, err, errlen) != 0)
        return -1;
    if (broker_keys_read_password(cfg->password_file, cfg->user, cfg->password, sizeof cfg->password, err, errlen) !=
        NULL)
        return -1;
    if (cfg->password_file != NULL)
        cfg->client_opts.password = cfg->password;
    cfg->client_opts.user = cfg->user;
    return 0;
}

void consumer_config_free(consumer_config_t *cfg)
{
    cfg_free(&table, cfg);
    for (size_t i = 0; i < cfg->side_effect_count; i++)
        free(cfg->side_effect_sql[i]);
}

void consumer_config_sql(const consumer_config_t *cfg, hg_order_sql_t *sql)
{
    memset(sql, 0, sizeof *sql);
    sql->claim = cfg->claim_sql;
    for (size_t i = 0; i < cfg->side_effect_count; i++)
        sql->side_effects[i] = cfg->side_effect_sql[i];
    sql->side_effect_count = cfg->side_effect_count;
    sql->lookup = cfg->lookup_sql;
}

void consumer_config_db_params(const consumer_config_t *cfg, const hg_order_sql_t *sql, hg_order_db_params_t *p)
{
    memset(p, 0, sizeof *p);
    DB_KEYS_TO_PARAMS(cfg, p);
    p->idle_transaction_timeout_s = db_keys_seconds(cfg->mysql_idle_transaction_timeout_ms);
    p->sql = sql;
}

void consumer_config_loop_opts(const consumer_config_t *cfg, hg_consumer_opts_t *o, hg_client_opts_t *client)
{
    hg_consumer_opts_init(o);
    *client = cfg->client_opts; /* the credentials (consumer_config_credentials) */
    TLS_KEYS_TO_OPTS(cfg, client);
    o->client = client;
    o->uri = cfg->uri;
    o->group = cfg->group;
    o->topic = cfg->topic;
    o->workers = (int)cfg->workers;
    o->count = (int)(cfg->count > cfg->batch_size ? cfg->count : cfg->batch_size);
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

int consumer_config_validate(const consumer_config_t *cfg, char *err, size_t errlen)
{
    if (cfg_check_required(&table, cfg, err, errlen) != 0)
        return -1;
    hg_order_sql_t sql;
    consumer_config_sql(cfg, &sql);
    if (hg_order_sql_validate(&sql, err, errlen) != 0)
        return -1;
    if (strlen(cfg->cancel_reason) > REASON_MAX_LEN) {
        snprintf(err, errlen, "cancel-reason: %zu bytes, at most %d (orders.cancel_reason)", strlen(cfg->cancel_reason),
                 REASON_MAX_LEN);
        return -1;
    }
    if (metrics_keys_check(cfg->metrics_port != 0, cfg->metrics_bind, cfg->metrics_allowed_hosts, err, errlen) != NULL)
        return -1;
    if (cfg->retry_cap_ms < cfg->retry_base_ms) {
        snprintf(err, errlen, "retry-cap: %llums is below retry-base %llums", cfg->retry_cap_ms, cfg->retry_base_ms);
        return -1;
    }
    if (cfg->touch_ms != 0 && cfg->touch_ms >= cfg->lease_ms) {
        snprintf(err, errlen, "touch-interval: %llums is not below lease %llums (0: lease / 2)", cfg->touch_ms,
                 cfg->lease_ms);
        return -1;
    }
    if (DB_KEYS_CHECK(cfg, err, errlen) != 0)
        return -1;
    if (TLS_KEYS_CHECK(cfg, cfg->uri, err, errlen) != 0)
        return -1;
    /* The broker URI and the loop's options: the library checks them without
     * connecting. Its URI errors get the field name in front. */
    hg_consumer_opts_t o;
    hg_client_opts_t client;
    consumer_config_loop_opts(cfg, &o, &client);
    o.log = NULL;
    if (tls_keys_check_consumer(&o, "consumer", err, errlen) != 0)
        return -1;
    return 0;
}

void consumer_config_usage(FILE *out)
{
    fprintf(out, "Usage: " PROGRAM " [--config FILE] [--KEY VALUE]... [--check-config]\n"
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

unsigned long long consumer_stuck_after_ms(const consumer_config_t *cfg)
{
    unsigned long long step = cfg->mysql_lock_wait_timeout_ms != 0 ? cfg->mysql_lock_wait_timeout_ms : 50000;
    if (cfg->mysql_connect_timeout_ms > step)
        step = cfg->mysql_connect_timeout_ms;
    return step + 5000;
}
