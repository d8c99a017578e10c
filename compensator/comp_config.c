/*
 * compensator/comp_config.c — the key table and validation (contract:
 * comp_config.h).
 *
 * One table (`keys` below) holds every key: name (= INI key = --flag), type,
 * default, range and the help text that --help prints (common/cfg.h). Values
 * are applied in order: table defaults, then the file, then the flags. Runs
 * on the main thread before any other thread starts.
 *
 * The table machinery (parsing, the INI reader, flags, --help) is
 * common/cfg.c's; this file holds the table and the cross-key checks.
 */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include "compensator/comp_config.h"

#include <hourglass/hourglass.h>

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "common/log.h"

#define OFF(field) offsetof(comp_config_t, field)
#define DAY_MS     86400000LL

static const cfg_key_t keys[] = {
    /* broker */
    BROKER_KEYS_ROWS(comp_config_t),
    { CFG_KEY("topic", CFG_STRING, "order-timeout", 0, 0, OFF(topic), "topic the relay sends order ids to"),
      .required = 1 },
    { CFG_KEY("dlq-groups", CFG_STRING, "order-cancel", 0, 0, OFF(dlq_groups),
              "consumer groups whose DLQ depth is watched (blanks or commas between; \"none\" for none)") },
    { CFG_KEY("broker-connect-timeout", CFG_DURATION, "1s", 1, 600000, OFF(broker_connect_timeout_ms),
              "broker connect timeout (the relay's lease counts it, docs/compensator.md)") },
    { CFG_KEY("broker-timeout", CFG_DURATION, "5s", 1, 600000, OFF(broker_timeout_ms),
              "longest wait for a broker reply") },

    /* MariaDB */
    DB_KEYS_ROWS(comp_config_t),

    /* layers */
    { CFG_KEY("layers", CFG_STRING, "relay,overdue,inspection,monitor", 0, 0, OFF(layers_text),
              "layers to run: relay, overdue, inspection, monitor (commas or blanks between)") },
    { CFG_KEY("relay-interval", CFG_DURATION, "1s", 10, DAY_MS, OFF(relay_interval_ms),
              "how often the relay looks for 'new' outbox rows") },
    { CFG_KEY("relay-batch", CFG_INT, "500", 1, 10000, OFF(relay_batch),
              "outbox rows locked, sent (pipelined) and marked per transaction") },
    { CFG_KEY("relay-backoff-base", CFG_DURATION, "1s", 1, DAY_MS, OFF(relay_backoff_base_ms),
              "next_attempt_at after a row's first failed send") },
    { CFG_KEY("relay-backoff-factor", CFG_DOUBLE, "2", 1, 100, OFF(relay_backoff_factor),
              "growth of that delay per failed attempt") },
    { CFG_KEY("relay-backoff-cap", CFG_DURATION, "5m", 1, DAY_MS, OFF(relay_backoff_cap_ms),
              "longest delay between two attempts of a row") },
    { CFG_KEY("relay-backoff-jitter", CFG_DOUBLE, "0.2", 0, 1, OFF(relay_backoff_jitter),
              "random share of each delay, 0..1") },
    { CFG_KEY("overdue-interval", CFG_DURATION, "10s", 10, DAY_MS, OFF(overdue_interval_ms),
              "how often the overdue-outbox layer runs") },
    { CFG_KEY("overdue-grace", CFG_DURATION, "1m", 0, 30 * DAY_MS, OFF(overdue_grace_ms),
              "outbox rows not 'done' this long past expire_at are cancelled directly") },
    { CFG_KEY("overdue-batch", CFG_INT, "200", 1, 10000, OFF(overdue_batch), "overdue outbox rows read per page") },
    { CFG_KEY("inspect-interval", CFG_DURATION, "1m", 10, DAY_MS, OFF(inspect_interval_ms),
              "how often the order-table inspection runs") },
    { CFG_KEY("inspect-grace", CFG_DURATION, "5m", 0, 30 * DAY_MS, OFF(inspect_grace_ms),
              "pending orders this long past expire_at are cancelled by the inspection") },
    { CFG_KEY("inspect-page-size", CFG_INT, "500", 1, 10000, OFF(inspect_page_size),
              "orders per keyset page of the inspection") },
    { CFG_KEY("inspect-page-pause", CFG_DURATION, "0ms", 0, 60000, OFF(inspect_page_pause_ms),
              "pause between two inspection pages (throttle; the lock is kept alive during it)") },
    { CFG_KEY("cancel-batch", CFG_INT, "100", 1, 1000, OFF(cancel_batch),
              "orders the overdue and inspection layers cancel per transaction, locked rows skipped "
              "(1: one transaction per order, waiting on locks)") },
    { CFG_KEY("permanent-failure-backoff", CFG_DURATION, "1m", 0, DAY_MS, OFF(permanent_failure_backoff_ms),
              "an order whose cancel failed permanently is not tried again for this long, doubled at each failure up "
              "to an hour (0: tried every round)") },
    { CFG_KEY("inspect-lock-timeout", CFG_DURATION, "30s", 3000, 3600000, OFF(inspect_lock_timeout_ms),
              "the inspection lock's connection is closed by the server after this long without a statement, and "
              "the lock with it: a frozen or hung inspector loses it within that (the holder keeps it alive)") },
    { CFG_KEY("lock-name", CFG_STRING, NULL, 0, 0, OFF(lock_name),
              "GET_LOCK name that elects the one inspecting instance (default: hourglass-inspection:<database>)") },
    { CFG_KEY("stop-grace", CFG_DURATION, "2s", 0, 3600000, OFF(stop_grace_ms),
              "on SIGTERM/SIGINT, how long a layer's MariaDB or broker call in flight may take before the layers' "
              "MariaDB connections and broker calls are cut (0: at once)") },

    /* monitoring */
    { CFG_KEY("monitor-interval", CFG_DURATION, "15s", 10, DAY_MS, OFF(monitor_interval_ms),
              "how often the gauges (overdue orders, DLQ depth) are read and the thresholds checked") },
    { CFG_KEY(
        "alert-command", CFG_STRING, NULL, 0, 0, OFF(alert_command),
        "shell command run when a threshold is crossed; the alert is in HG_ALERT_* variables (unset: log only)") },
    { CFG_KEY("alert-overdue-pending", CFG_INT, "10", 0, 1000000000000LL, OFF(alert_overdue_pending),
              "alert when this many pending orders are past expire_at + inspect-grace (0: off)") },
    { CFG_KEY("alert-dlq-depth", CFG_INT, "1", 0, 1000000000000LL, OFF(alert_dlq_depth),
              "alert when a watched group's DLQ holds this many (0: off)") },
    { CFG_KEY("alert-layer-failures", CFG_INT, "3", 0, 1000000, OFF(alert_layer_failures),
              "alert when a layer failed this many runs in a row (0: off)") },
    { CFG_KEY("alert-min-interval", CFG_DURATION, "10m", 0, 30 * DAY_MS, OFF(alert_min_interval_ms),
              "no reminder of a firing alert sooner than this after its last firing (a new incident fires at once); "
              "an alert back this soon is resolved only after this long clear") },
    { CFG_KEY("alert-command-timeout", CFG_DURATION, "10s", 100, 3600000, OFF(alert_command_timeout_ms),
              "an alert command still running after this is killed") },

    METRICS_KEYS_ROWS(comp_config_t),
    LOG_KEYS_ROWS(comp_config_t),
};

static const char *const sections[] = { "broker",  "mysql",  "layers",  "relay", "overdue", "inspection",
                                        "monitor", "alerts", "metrics", "log",   NULL };
static const char *const switches[] = { "--once", NULL };

static const cfg_table_t table = {
    .program = "hourglass-compensator",
    .keys = keys,
    .count = sizeof keys / sizeof keys[0],
    .sections = sections,
    .switches = switches,
    .track_origin = 1,
    .origin_offset = OFF(origin),
};

const cfg_table_t *comp_config_table(void)
{
    return &table;
}

static const char *const layer_names[COMP_LAYER_COUNT] = { "relay", "overdue", "inspection", "monitor" };

const char *comp_layer_name(int index)
{
    return index >= 0 && index < COMP_LAYER_COUNT ? layer_names[index] : "unknown";
}

void comp_config_init(comp_config_t *cfg)
{
    memset(cfg, 0, sizeof *cfg);
    cfg_init(&table, cfg);
}

void comp_config_free(comp_config_t *cfg)
{
    cfg_free(&table, cfg);
    for (size_t i = 0; i < cfg->group_count; i++)
        free(cfg->groups[i]);
    cfg->group_count = 0;
}

int comp_config_set(comp_config_t *cfg, const char *name, const char *value, char *err, size_t errlen)
{
    return cfg_set(&table, cfg, name, value, CFG_SOURCE_FLAG, err, errlen);
}

/* ---------------------------------------------------------------- validation */

static int is_sep(char c)
{
    return c == ',' || c == ' ' || c == '\t';
}

/* Split text on blanks and commas; call fn for each word. Returns 0, or the
 * first nonzero value fn returned. */
static int each_word(const char *text, int (*fn)(const char *word, size_t len, void *arg), void *arg)
{
    const char *p = text;
    while (*p != '\0') {
        while (is_sep(*p))
            p++;
        const char *start = p;
        while (*p != '\0' && !is_sep(*p))
            p++;
        if (p > start) {
            int rc = fn(start, (size_t)(p - start), arg);
            if (rc != 0)
                return rc;
        }
    }
    return 0;
}

typedef struct word_ctx {
    comp_config_t *cfg;
    char *err;
    size_t errlen;
} word_ctx_t;

static int add_layer(const char *word, size_t len, void *arg)
{
    word_ctx_t *w = arg;
    for (int i = 0; i < COMP_LAYER_COUNT; i++)
        if (strlen(layer_names[i]) == len && strncmp(word, layer_names[i], len) == 0) {
            w->cfg->layers |= COMP_LAYER_BIT(i);
            return 0;
        }
    snprintf(w->err, w->errlen, "layers: unknown layer '%.*s' (relay, overdue, inspection, monitor)", (int)len, word);
    return -1;
}

static int add_group(const char *word, size_t len, void *arg)
{
    word_ctx_t *w = arg;
    if (len == 4 && strncmp(word, "none", 4) == 0)
        return 0;
    if (w->cfg->group_count == COMP_MAX_DLQ_GROUPS) {
        snprintf(w->err, w->errlen, "dlq-groups: more than %d groups", COMP_MAX_DLQ_GROUPS);
        return -1;
    }
    for (size_t i = 0; i < w->cfg->group_count; i++)
        if (strlen(w->cfg->groups[i]) == len && strncmp(w->cfg->groups[i], word, len) == 0) {
            /* Its dlq_depth series would be exposed twice (a page Prometheus refuses) and its alert checked twice */
            snprintf(w->err, w->errlen, "dlq-groups: group '%.*s' is named twice", (int)len, word);
            return -1;
        }
    w->cfg->groups[w->cfg->group_count++] = xstrndup(word, len);
    return 0;
}

/* err (a validation error about key, and key_b for a cross-key check, or
 * NULL) with where they were set; -1. */
static int located(const comp_config_t *cfg, const char *key, const char *key_b, char *err, size_t errlen)
{
    cfg_origin_prefix(&table, cfg, key, key_b, err, errlen);
    return -1;
}

int comp_config_validate(comp_config_t *cfg, char *err, size_t errlen)
{
    if (cfg_check_required(&table, cfg, err, errlen) != 0)
        return -1;
    if (DB_KEYS_CHECK(cfg, err, errlen) != 0)
        return strncmp(err, "mysql-socket", 12) == 0
                   ? located(cfg, "mysql-socket", NULL, err, errlen)
                   : located(cfg, "mysql-lock-wait-timeout", "mysql-read-timeout", err, errlen);
    const char *metrics_key =
        metrics_keys_check(cfg->metrics_port != 0, cfg->metrics_bind, cfg->metrics_allowed_hosts, err, errlen);
    if (metrics_key != NULL) /* a bad metrics-bind matters only with metrics-port set */
        return located(cfg, metrics_key, strcmp(metrics_key, "metrics-bind") == 0 ? "metrics-port" : NULL, err, errlen);
    if (cfg->relay_backoff_cap_ms < cfg->relay_backoff_base_ms) {
        snprintf(err, errlen, "relay-backoff-cap: %llums is below relay-backoff-base %llums", cfg->relay_backoff_cap_ms,
                 cfg->relay_backoff_base_ms);
        return located(cfg, "relay-backoff-cap", "relay-backoff-base", err, errlen);
    }
    if (DB_KEYS_CREDENTIALS(cfg, err, errlen) != 0)
        return located(cfg, strncmp(err, "mysql-password and", 18) == 0 ? "mysql-password" : "mysql-password-file",
                       strncmp(err, "mysql-password and", 18) == 0 ? "mysql-password-file" : NULL, err, errlen);
    const char *bad_key =
        broker_keys_read_password(cfg->password_file, cfg->user, cfg->password, sizeof cfg->password, err, errlen);
    if (bad_key != NULL)
        return located(cfg, bad_key, NULL, err, errlen);

    word_ctx_t w = { cfg, err, errlen };
    cfg->layers = 0;
    if (each_word(cfg->layers_text != NULL ? cfg->layers_text : "", add_layer, &w) != 0)
        return located(cfg, "layers", NULL, err, errlen);
    if (cfg->layers == 0) {
        snprintf(err, errlen, "layers: no layer named (relay, overdue, inspection, monitor)");
        return located(cfg, "layers", NULL, err, errlen);
    }
    for (size_t i = 0; i < cfg->group_count; i++)
        free(cfg->groups[i]);
    cfg->group_count = 0;
    if (each_word(cfg->dlq_groups != NULL ? cfg->dlq_groups : "", add_group, &w) != 0)
        return located(cfg, "dlq-groups", NULL, err, errlen);

    if (cfg->lock_name != NULL && cfg->lock_name[0] != '\0') {
        if (strlen(cfg->lock_name) > COMP_LOCK_NAME_MAX) {
            snprintf(err, errlen, "lock-name: %zu characters, GET_LOCK allows at most %d", strlen(cfg->lock_name),
                     COMP_LOCK_NAME_MAX);
            return located(cfg, "lock-name", NULL, err, errlen);
        }
        snprintf(cfg->effective_lock_name, sizeof cfg->effective_lock_name, "%s", cfg->lock_name);
    } else {
        /* The name must be the same for every instance on this database and
         * differ between databases: GET_LOCK names are server-wide and at
         * most 64 characters, so a database name longer than 43 is cut and
         * a hash of the whole name told apart (two long names sharing their
         * first 43 characters shared one lock, and one was never inspected). */
        const char *db = cfg->mysql_database;
        if (strlen(db) <= 43) {
            snprintf(cfg->effective_lock_name, sizeof cfg->effective_lock_name, "hourglass-inspection:%s", db);
        } else {
            uint32_t h = 2166136261u; /* FNV-1a */
            for (const unsigned char *p = (const unsigned char *)db; *p; p++)
                h = (h ^ *p) * 16777619u;
            snprintf(cfg->effective_lock_name, sizeof cfg->effective_lock_name, "hourglass-inspection:%.34s-%08x", db,
                     (unsigned)h);
        }
    }

    /* The URI: libhourglass checks it without connecting when a consumer is
     * created (it has no separate URI check); tls_keys_check_consumer creates
     * one and frees it. */
    if (TLS_KEYS_CHECK(cfg, cfg->uri, err, errlen) != 0)
        return -1;
    hg_consumer_opts_t o;
    hg_client_opts_t client;
    hg_consumer_opts_init(&o);
    hg_client_opts_init(&client);
    TLS_KEYS_TO_OPTS(cfg, &client);
    comp_config_client_credentials(cfg, &client); /* a URI's user may take password-file's password */
    o.client = &client;
    o.uri = cfg->uri;
    o.group = "check";
    o.topic = cfg->topic;
    if (tls_keys_check_consumer(&o, "topic", err, errlen) != 0)
        return -1;
    /* The watched groups' names, by the same check (a name the broker refuses
     * failed every monitor round's DLQ LEN, found only at run time). */
    for (size_t i = 0; i < cfg->group_count; i++) {
        o.group = cfg->groups[i];
        if (tls_keys_check_consumer(&o, "dlq-groups", err, errlen) != 0)
            return -1;
    }
    return 0;
}

static atomic_uint password_generation; /* comp_password_rotated */

void comp_password_rotated(void)
{
    atomic_fetch_add(&password_generation, 1);
}

int comp_password_stale(const comp_password_t *pw)
{
    return pw->generation != atomic_load(&password_generation);
}

void comp_password_init(const comp_config_t *cfg, comp_password_t *pw)
{
    snprintf(pw->text, sizeof pw->text, "%s", cfg->password);
    pw->generation = atomic_load(&password_generation);
}

void comp_password_refresh(const comp_config_t *cfg, comp_password_t *pw, hg_client_opts_t *opts)
{
    if (cfg->password_file == NULL)
        return;
    unsigned generation = atomic_load(&password_generation);
    char fresh[PASSWD_FILE_MAX + 1], why[400];
    if (passwd_read_file(cfg->password_file, fresh, sizeof fresh, why, sizeof why) != 0) {
        log_msg(LOG_LEVEL_WARN, "password-file: %s; the broker client keeps the password read before", why);
    } else {
        memcpy(pw->text, fresh, sizeof pw->text);
        memset(fresh, 0, sizeof fresh);
    }
    pw->generation = generation;
    opts->password = pw->text;
}

void comp_config_client_credentials(const comp_config_t *cfg, hg_client_opts_t *opts)
{
    opts->user = cfg->user;
    opts->password = cfg->password_file != NULL ? cfg->password : NULL;
}

static passwd_source_t db_password; /* comp_db_password_init; zeroed (no file) with mysql-password */

void comp_db_password_refresh(void)
{
    passwd_source_refresh_logged(&db_password, "mysql-password-file", PASSWD_DB_NEXT_CONNECT_NOTE, PASSWD_DB_KEPT_NOTE);
}

unsigned long comp_db_password(char *out, size_t outlen)
{
    return passwd_source_has_file(&db_password) ? passwd_source_get(&db_password, out, outlen) : 0;
}

/* db/conn.h's password hook: the file read again before every connect. */
static int db_password_hook(void *arg, char *out, size_t outlen)
{
    (void)arg;
    comp_db_password_refresh();
    comp_db_password(out, outlen);
    return 1;
}

void comp_db_password_init(const comp_config_t *cfg)
{
    if (cfg->mysql_password_file == NULL)
        return;
    passwd_source_init(&db_password, cfg->mysql_password_file, cfg->mysql_password_read);
    db_set_password_hook(db_password_hook, NULL);
}
