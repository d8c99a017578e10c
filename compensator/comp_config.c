/*
 * compensator/comp_config.c — the key table, the INI reader, flags, validation
 * (contract: comp_config.h).
 *
 * One table (`keys` below) holds every key: name (= INI key = --flag), type,
 * default, range and the help text that --help prints. Values are applied in
 * order: table defaults, then the file, then the flags. Runs on the main
 * thread before any other thread starts.
 *
 * Note: the table machinery (typed keys, durations, the INI reader that
 * names over-long lines) follows hourglass-consumer's consumer/consumer_main.c
 * rather than sharing it, because that code is static to the consumer's
 * program; a shared helper (e.g. common/config_table.[ch]) would serve both.
 */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include "compensator/comp_config.h"

#include <hourglass/hourglass.h>

#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <ini.h>

#include "compensator/log.h"

#define CONFIG_MAX_LINE 4096 /* our read buffer; libinih's own limit is smaller */

typedef enum key_type {
    KEY_STRING,   /* any text; "" or an absent default means unset */
    KEY_UINT,     /* decimal integer in [min, max] */
    KEY_DURATION, /* integer + unit ms|s|m|h, stored in ms, in [min, max] ms */
    KEY_DOUBLE    /* decimal number in [min, max] */
} key_type_t;

typedef struct key {
    const char *name;
    key_type_t type;
    const char *def; /* NULL: unset */
    double min, max;
    size_t offset; /* into comp_config_t */
    const char *help;
} config_key_t;

#define OFF(field) offsetof(comp_config_t, field)
#define DAY_MS 86400000.0

static const config_key_t keys[] = {
    /* broker */
    {"uri", KEY_STRING, "hourglass://127.0.0.1:7379", 0, 0, OFF(uri), "broker URI, hourglass://[user:pass@]host[:port]"},
    {"topic", KEY_STRING, "order-timeout", 0, 0, OFF(topic), "topic the relay sends order ids to"},
    {"dlq-groups", KEY_STRING, "order-cancel", 0, 0, OFF(dlq_groups),
     "consumer groups whose DLQ depth is watched (blanks or commas between; \"none\" for none)"},
    {"broker-connect-timeout", KEY_DURATION, "1s", 1, 600000, OFF(broker_connect_timeout_ms),
     "broker connect timeout (the relay holds its rows locked meanwhile)"},
    {"broker-timeout", KEY_DURATION, "5s", 1, 600000, OFF(broker_timeout_ms), "longest wait for a broker reply"},

    /* MariaDB */
    {"mysql-host", KEY_STRING, NULL, 0, 0, OFF(mysql_host), "MariaDB host (unset: localhost / the socket)"},
    {"mysql-socket", KEY_STRING, NULL, 0, 0, OFF(mysql_socket), "MariaDB unix socket path"},
    {"mysql-port", KEY_UINT, "0", 0, 65535, OFF(mysql_port), "MariaDB TCP port (0: 3306)"},
    {"mysql-user", KEY_STRING, NULL, 0, 0, OFF(mysql_user), "MariaDB user (unset: the current user)"},
    {"mysql-password", KEY_STRING, NULL, 0, 0, OFF(mysql_password), "MariaDB password"},
    {"mysql-database", KEY_STRING, NULL, 0, 0, OFF(mysql_database), "database holding the orders (required)"},
    {"mysql-connect-timeout", KEY_DURATION, "5s", 1000, 3600000, OFF(mysql_connect_timeout_ms),
     "connect timeout (whole seconds)"},
    {"mysql-read-timeout", KEY_DURATION, "60s", 1000, DAY_MS, OFF(mysql_read_timeout_ms),
     "read timeout (whole seconds; keep it above innodb_lock_wait_timeout)"},
    {"mysql-write-timeout", KEY_DURATION, "60s", 1000, DAY_MS, OFF(mysql_write_timeout_ms), "write timeout (whole seconds)"},
    {"mysql-lock-wait-timeout", KEY_DURATION, "0s", 0, DAY_MS, OFF(mysql_lock_wait_timeout_ms),
     "session innodb_lock_wait_timeout (whole seconds; 0: the server's)"},

    /* layers */
    {"layers", KEY_STRING, "relay,overdue,inspection,monitor", 0, 0, OFF(layers_text),
     "layers to run: relay, overdue, inspection, monitor (commas or blanks between)"},
    {"relay-interval", KEY_DURATION, "1s", 10, DAY_MS, OFF(relay_interval_ms), "how often the relay looks for 'new' outbox rows"},
    {"relay-batch", KEY_UINT, "500", 1, 10000, OFF(relay_batch), "outbox rows locked, sent (pipelined) and marked per transaction"},
    {"relay-backoff-base", KEY_DURATION, "1s", 1, DAY_MS, OFF(relay_backoff_base_ms),
     "next_attempt_at after a row's first failed send"},
    {"relay-backoff-factor", KEY_DOUBLE, "2", 1, 100, OFF(relay_backoff_factor), "growth of that delay per failed attempt"},
    {"relay-backoff-cap", KEY_DURATION, "5m", 1, DAY_MS, OFF(relay_backoff_cap_ms), "longest delay between two attempts of a row"},
    {"relay-backoff-jitter", KEY_DOUBLE, "0.2", 0, 1, OFF(relay_backoff_jitter), "random share of each delay, 0..1"},
    {"overdue-interval", KEY_DURATION, "10s", 10, DAY_MS, OFF(overdue_interval_ms), "how often the overdue-outbox layer runs"},
    {"overdue-grace", KEY_DURATION, "1m", 0, 30 * DAY_MS, OFF(overdue_grace_ms),
     "outbox rows not 'done' this long past expire_at are cancelled directly"},
    {"overdue-batch", KEY_UINT, "200", 1, 10000, OFF(overdue_batch), "overdue outbox rows read per page"},
    {"inspect-interval", KEY_DURATION, "1m", 10, DAY_MS, OFF(inspect_interval_ms), "how often the order-table inspection runs"},
    {"inspect-grace", KEY_DURATION, "5m", 0, 30 * DAY_MS, OFF(inspect_grace_ms),
     "pending orders this long past expire_at are cancelled by the inspection"},
    {"inspect-page-size", KEY_UINT, "500", 1, 10000, OFF(inspect_page_size), "orders per keyset page of the inspection"},
    {"inspect-page-pause", KEY_DURATION, "0ms", 0, 60000, OFF(inspect_page_pause_ms),
     "pause between two inspection pages (throttle; the lock is checked after it)"},
    {"lock-name", KEY_STRING, NULL, 0, 0, OFF(lock_name),
     "GET_LOCK name that elects the one inspecting instance (default: hourglass-inspection:<database>)"},

    /* monitoring */
    {"monitor-interval", KEY_DURATION, "15s", 10, DAY_MS, OFF(monitor_interval_ms),
     "how often the gauges (overdue orders, DLQ depth) are read and the thresholds checked"},
    {"alert-command", KEY_STRING, NULL, 0, 0, OFF(alert_command),
     "shell command run when a threshold is crossed; the alert is in HG_ALERT_* variables (unset: log only)"},
    {"alert-overdue-pending", KEY_UINT, "10", 0, 1e12, OFF(alert_overdue_pending),
     "alert when this many pending orders are past expire_at + inspect-grace (0: off)"},
    {"alert-dlq-depth", KEY_UINT, "1", 0, 1e12, OFF(alert_dlq_depth), "alert when a watched group's DLQ holds this many (0: off)"},
    {"alert-layer-failures", KEY_UINT, "3", 0, 1000000, OFF(alert_layer_failures),
     "alert when a layer failed this many runs in a row (0: off)"},
    {"alert-min-interval", KEY_DURATION, "10m", 0, 30 * DAY_MS, OFF(alert_min_interval_ms),
     "the same alert fires at most once per this interval while it lasts"},
    {"alert-command-timeout", KEY_DURATION, "10s", 100, 3600000, OFF(alert_command_timeout_ms),
     "an alert command still running after this is killed"},

    {"metrics-port", KEY_UINT, "0", 0, 65535, OFF(metrics_port), "HTTP port for /metrics and /healthz (0: off)"},
    {"metrics-bind", KEY_STRING, "127.0.0.1", 0, 0, OFF(metrics_bind), "address the metrics server listens on"},
    {"log-level", KEY_STRING, "info", 0, 0, OFF(log_level), "error, warn, info or debug"},
};
#define KEY_COUNT (sizeof keys / sizeof keys[0])

static const char *const layer_names[COMP_LAYER_COUNT] = {"relay", "overdue", "inspection", "monitor"};

const char *comp_layer_name(int index)
{
    return index >= 0 && index < COMP_LAYER_COUNT ? layer_names[index] : "unknown";
}

static const config_key_t *find_key(const char *name)
{
    for (size_t i = 0; i < KEY_COUNT; i++)
        if (strcmp(keys[i].name, name) == 0)
            return &keys[i];
    return NULL;
}

int comp_config_has_key(const char *name)
{
    return find_key(name) != NULL;
}

static char *xstrdup(const char *s)
{
    char *d = strdup(s);
    if (d == NULL) {
        fputs("hourglass-compensator: out of memory\n", stderr);
        abort();
    }
    return d;
}

/* "<digits><unit>", unit ms|s|m|h (mandatory). Returns 0 / -1. */
static int parse_duration(const char *text, unsigned long long *ms)
{
    if (!isdigit((unsigned char)text[0]))
        return -1;
    char *end;
    errno = 0;
    unsigned long long v = strtoull(text, &end, 10);
    if (errno != 0)
        return -1;
    static const struct {
        const char *unit;
        unsigned long long mult;
    } units[] = {{"ms", 1}, {"s", 1000}, {"m", 60000}, {"h", 3600000}};
    for (size_t i = 0; i < sizeof units / sizeof units[0]; i++)
        if (strcmp(end, units[i].unit) == 0) {
            if (v > ULLONG_MAX / units[i].mult)
                return -1;
            *ms = v * units[i].mult;
            return 0;
        }
    return -1;
}

static int set_key(comp_config_t *cfg, const config_key_t *k, const char *value, char *err, size_t errlen)
{
    char *field = (char *)cfg + k->offset;
    switch (k->type) {
    case KEY_STRING: {
        char **s = (char **)field;
        free(*s);
        *s = xstrdup(value);
        return 0;
    }
    case KEY_UINT:
    case KEY_DURATION: {
        unsigned long long v;
        if (k->type == KEY_DURATION) {
            if (parse_duration(value, &v) != 0) {
                snprintf(err, errlen, "%s: '%s' is not a duration (a number and a unit: ms, s, m or h)", k->name, value);
                return -1;
            }
        } else {
            char *end;
            errno = 0;
            v = strtoull(value, &end, 10);
            if (!isdigit((unsigned char)value[0]) || *end != '\0' || errno != 0) {
                snprintf(err, errlen, "%s: '%s' is not a whole number", k->name, value);
                return -1;
            }
        }
        if ((double)v < k->min || (double)v > k->max) {
            const char *unit = k->type == KEY_DURATION ? "ms" : "";
            snprintf(err, errlen, "%s: '%s' out of range %.0f%s..%.0f%s", k->name, value, k->min, unit, k->max, unit);
            return -1;
        }
        *(unsigned long long *)field = v;
        return 0;
    }
    case KEY_DOUBLE: {
        char *end;
        errno = 0;
        double v = strtod(value, &end);
        if (value[0] == '\0' || *end != '\0' || errno != 0 || v != v) {
            snprintf(err, errlen, "%s: '%s' is not a number", k->name, value);
            return -1;
        }
        if (v < k->min || v > k->max) {
            snprintf(err, errlen, "%s: '%s' out of range %g..%g", k->name, value, k->min, k->max);
            return -1;
        }
        *(double *)field = v;
        return 0;
    }
    }
    return -1;
}

void comp_config_init(comp_config_t *cfg)
{
    char err[256];
    memset(cfg, 0, sizeof *cfg);
    for (size_t i = 0; i < KEY_COUNT; i++)
        if (keys[i].def != NULL && set_key(cfg, &keys[i], keys[i].def, err, sizeof err) != 0)
            abort(); /* a bad default is a bug in the table */
}

void comp_config_free(comp_config_t *cfg)
{
    for (size_t i = 0; i < KEY_COUNT; i++)
        if (keys[i].type == KEY_STRING) {
            char **s = (char **)((char *)cfg + keys[i].offset);
            free(*s);
            *s = NULL;
        }
    for (size_t i = 0; i < cfg->group_count; i++)
        free(cfg->groups[i]);
    cfg->group_count = 0;
}

int comp_config_set(comp_config_t *cfg, const char *name, const char *value, char *err, size_t errlen)
{
    const config_key_t *k = find_key(name);
    if (k == NULL) {
        snprintf(err, errlen, "unknown option '--%s' (see --help)", name);
        return -1;
    }
    return set_key(cfg, k, value, err, errlen);
}

/* ---------------------------------------------------------------- INI file */

typedef struct ini_state {
    FILE *file;
    const char *path;
    comp_config_t *cfg;
    int line;
    char error[512];
} ini_state_t;

static void ini_error(ini_state_t *st, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void ini_error(ini_state_t *st, const char *fmt, ...)
{
    if (st->error[0] != '\0')
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(st->error, sizeof st->error, fmt, ap);
    va_end(ap);
}

/* libinih's reader: counts lines and refuses one longer than its buffer
 * (libinih would otherwise split it and report a confusing error). */
static char *ini_read_line(char *str, int num, void *stream)
{
    ini_state_t *st = stream;
    char buf[CONFIG_MAX_LINE];
    if (st->error[0] != '\0' || fgets(buf, sizeof buf, st->file) == NULL)
        return NULL;
    st->line++;
    size_t len = strlen(buf);
    if (len >= (size_t)num) {
        ini_error(st, "%s:%d: line longer than %d bytes (libinih's limit)", st->path, st->line, num - 2);
        return NULL;
    }
    memcpy(str, buf, len + 1);
    return str;
}

static const char *const known_sections[] = {"",           "broker",  "mysql",  "layers", "relay", "overdue",
                                             "inspection", "monitor", "alerts", "metrics", "log"};

static int config_ini_handler(void *user, const char *section, const char *name, const char *value)
{
    ini_state_t *st = user;
    int known = 0;
    for (size_t i = 0; i < sizeof known_sections / sizeof known_sections[0]; i++)
        known |= strcmp(section, known_sections[i]) == 0;
    if (!known) {
        ini_error(st, "%s:%d: unknown section [%s] (sections: broker, mysql, layers, relay, overdue, inspection, "
                      "monitor, alerts, metrics, log)", st->path, st->line, section);
        return 0;
    }
    const config_key_t *k = find_key(name);
    char err[400];
    if (k == NULL) {
        ini_error(st, "%s:%d: unknown key '%.64s' (see --help for the keys)", st->path, st->line, name);
        return 0;
    }
    if (set_key(st->cfg, k, value, err, sizeof err) != 0) {
        ini_error(st, "%s:%d: %s", st->path, st->line, err);
        return 0;
    }
    return 1;
}

int comp_config_load_file(comp_config_t *cfg, const char *path, char *err, size_t errlen)
{
    ini_state_t st = {.path = path, .cfg = cfg};
    st.file = fopen(path, "r");
    if (st.file == NULL) {
        snprintf(err, errlen, "config: cannot open %s: %s", path, strerror(errno));
        return -1;
    }
    int rc = ini_parse_stream(ini_read_line, &st, config_ini_handler, &st);
    fclose(st.file);
    if (st.error[0] == '\0' && rc > 0)
        ini_error(&st, "%s:%d: not a 'key = value' line, a [section] or a comment", path, rc);
    if (st.error[0] == '\0' && rc < 0)
        ini_error(&st, "%s: cannot read", path);
    if (st.error[0] != '\0') {
        snprintf(err, errlen, "%s", st.error);
        return -1;
    }
    return 0;
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
    char *g = malloc(len + 1);
    if (g == NULL)
        abort();
    memcpy(g, word, len);
    g[len] = '\0';
    w->cfg->groups[w->cfg->group_count++] = g;
    return 0;
}

static hg_outcome_t noop_handler(const hg_message_t *m, char *r, size_t n, void *a)
{
    (void)m, (void)r, (void)n, (void)a;
    return HG_DONE;
}

int comp_config_validate(comp_config_t *cfg, char *err, size_t errlen)
{
    static const struct {
        size_t offset;
        const char *name;
    } required[] = {{OFF(uri), "uri"}, {OFF(topic), "topic"}, {OFF(mysql_database), "mysql-database"},
                    {OFF(metrics_bind), "metrics-bind"}, {OFF(log_level), "log-level"}};
    for (size_t i = 0; i < sizeof required / sizeof required[0]; i++) {
        const char *v = *(char *const *)((const char *)cfg + required[i].offset);
        if (v == NULL || v[0] == '\0') {
            snprintf(err, errlen, "%s: required, not set", required[i].name);
            return -1;
        }
    }
    comp_log_level_t level;
    if (comp_log_parse_level(cfg->log_level, &level) != 0) {
        snprintf(err, errlen, "log-level: '%s' is not one of error, warn, info, debug", cfg->log_level);
        return -1;
    }
    if (cfg->mysql_socket != NULL && cfg->mysql_socket[0] != '\0' && cfg->mysql_socket[0] != '/') {
        snprintf(err, errlen, "mysql-socket: '%s' is not an absolute path", cfg->mysql_socket);
        return -1;
    }
    if (cfg->relay_backoff_cap_ms < cfg->relay_backoff_base_ms) {
        snprintf(err, errlen, "relay-backoff-cap: %llums is below relay-backoff-base %llums", cfg->relay_backoff_cap_ms,
                 cfg->relay_backoff_base_ms);
        return -1;
    }

    word_ctx_t w = {cfg, err, errlen};
    cfg->layers = 0;
    if (each_word(cfg->layers_text != NULL ? cfg->layers_text : "", add_layer, &w) != 0)
        return -1;
    if (cfg->layers == 0) {
        snprintf(err, errlen, "layers: no layer named (relay, overdue, inspection, monitor)");
        return -1;
    }
    for (size_t i = 0; i < cfg->group_count; i++)
        free(cfg->groups[i]);
    cfg->group_count = 0;
    if (each_word(cfg->dlq_groups != NULL ? cfg->dlq_groups : "", add_group, &w) != 0)
        return -1;

    if (cfg->lock_name != NULL && cfg->lock_name[0] != '\0') {
        if (strlen(cfg->lock_name) > COMP_LOCK_NAME_MAX) {
            snprintf(err, errlen, "lock-name: %zu characters, GET_LOCK allows at most %d", strlen(cfg->lock_name),
                     COMP_LOCK_NAME_MAX);
            return -1;
        }
        snprintf(cfg->effective_lock_name, sizeof cfg->effective_lock_name, "%s", cfg->lock_name);
    } else {
        /* Truncation is fine: the name only has to be the same for every
         * instance that works on this database. */
        snprintf(cfg->effective_lock_name, sizeof cfg->effective_lock_name, "hourglass-inspection:%.43s",
                 cfg->mysql_database);
    }

    /* The URI: libhourglass checks it without connecting when a consumer is
     * created (it has no separate URI check), so create one and free it. */
    hg_consumer_opts_t o;
    hg_consumer_opts_init(&o);
    o.uri = cfg->uri;
    o.group = "check";
    o.topic = cfg->topic;
    o.handler = noop_handler;
    hg_consumer_t *c = NULL;
    hg_error_t e = {0};
    hg_err_t rc = hg_consumer_new(&o, &c, &e);
    hg_consumer_free(c);
    if (rc != HG_OK) {
        snprintf(err, errlen, "%s: %s", rc == HG_ERR_URI || rc == HG_ERR_UNSUPPORTED ? "uri" : "topic", e.message);
        return -1;
    }
    return 0;
}

void comp_config_usage(FILE *out)
{
    for (size_t i = 0; i < KEY_COUNT; i++) {
        const config_key_t *k = &keys[i];
        fprintf(out, "  %-24s %s%s%s%s\n", k->name, k->help, k->def != NULL ? " [" : "", k->def != NULL ? k->def : "",
                k->def != NULL ? "]" : "");
    }
}
