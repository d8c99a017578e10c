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
 * help}; an INI file (libinih; sections only group keys for the reader) and
 * `--name value` flags set the same keys, flags last. --check-config checks
 * everything that can be checked without connecting and names the field.
 *
 * Threads: the caller of hg_consumer_run (main) waits; the library's N
 * workers call handle_message, each with its own hg_order_db (slot
 * msg->worker, opened lazily on that worker's first message — one handle per
 * thread); the metrics thread runs an evhttp server on its own event base.
 * Counters are relaxed atomics. SIGINT / SIGTERM call hg_consumer_stop, which
 * is async-signal-safe; the workers finish the messages in hand.
 */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include <hourglass/hourglass.h>
#include <hourglass/order.h>

#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

#include <event2/buffer.h>
#include <event2/event.h>
#include <event2/http.h>
#include <event2/thread.h>
#include <ini.h>

#define PROGRAM "hourglass-consumer"
#define EXIT_CONFIG 2          /* a usage or configuration error */
#define CONFIG_MAX_LINE 4096   /* our own line buffer; libinih's limit is smaller */
#define REASON_MAX_LEN 64      /* orders.cancel_reason VARCHAR(64) */

/* ------------------------------------------------------------------ logging */

typedef enum log_level { LOG_ERROR, LOG_WARN, LOG_INFO, LOG_DEBUG } log_level_t;
static const char *const log_names[] = {"error", "warn", "info", "debug"};
static log_level_t log_threshold = LOG_INFO;

/* One line on stderr: UTC time, level, message. Thread-safe (one fprintf). */
static void log_msg(log_level_t level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void log_msg(log_level_t level, const char *fmt, ...)
{
    if (level > log_threshold)
        return;
    char text[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(text, sizeof text, fmt, ap);
    va_end(ap);
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    struct tm tm;
    gmtime_r(&ts.tv_sec, &tm);
    fprintf(stderr, "%04d-%02d-%02dT%02d:%02d:%02d.%03ldZ %-5s %s\n", tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday,
            tm.tm_hour, tm.tm_min, tm.tm_sec, ts.tv_nsec / 1000000, log_names[level], text);
}

/* The consumer loop's log callback: 0 error, 1 warning, 2 info. */
static void library_log(int level, const char *message, void *arg)
{
    (void)arg;
    log_msg(level <= 0 ? LOG_ERROR : level == 1 ? LOG_WARN : LOG_INFO, "%s", message);
}

/* ------------------------------------------------------------------ configuration */

typedef struct config {
    char *uri, *group, *topic;
    unsigned long long workers, count, block_ms, lease_ms, touch_ms;

    char *mysql_host, *mysql_socket, *mysql_user, *mysql_password, *mysql_database;
    unsigned long long mysql_port, mysql_connect_timeout_ms, mysql_read_timeout_ms, mysql_write_timeout_ms,
        mysql_lock_wait_timeout_ms;

    char *claim_sql, *lookup_sql, *cancel_reason;
    char *side_effect_sql[HG_ORDER_SQL_MAX_SIDE_EFFECTS];
    size_t side_effect_count;
    int side_effect_source; /* which source set the list: a new source replaces it */

    unsigned long long retry_base_ms, retry_cap_ms, retry_attempts;
    double retry_factor, retry_jitter;

    unsigned long long metrics_port;
    char *metrics_bind;
    char *log_level;
} config_t;

typedef enum opt_type {
    OPT_STRING,    /* any text */
    OPT_UINT,      /* decimal integer in [min, max] */
    OPT_DURATION,  /* integer + unit ms|s|m|h, in ms, in [min, max] */
    OPT_DOUBLE,    /* decimal number in [min, max] */
    OPT_SQL_LIST   /* repeatable: each occurrence adds one statement; "none" empties */
} opt_type_t;

/* Source of a value, in the order they are applied. */
enum { SOURCE_DEFAULT, SOURCE_FILE, SOURCE_FLAG };

typedef struct option {
    const char *name;
    opt_type_t type;
    const char *def;        /* NULL: unset */
    double min, max;        /* numbers and durations (ms) */
    size_t offset;          /* into config_t */
    const char *help;
} option_t;

#define OFF(field) offsetof(config_t, field)
/* The flag legend: name = INI key = --flag; the help text is --help's. */
static const option_t options[] = {
    {"uri", OPT_STRING, "hourglass://127.0.0.1:7379", 0, 0, OFF(uri), "broker URI, hourglass://[user:pass@]host[:port]"},
    {"group", OPT_STRING, "order-cancel", 0, 0, OFF(group), "consumer group"},
    {"topic", OPT_STRING, "order-timeout", 0, 0, OFF(topic), "topic carrying the order ids"},
    {"workers", OPT_UINT, "4", 1, 256, OFF(workers), "worker threads, each with a broker and a MariaDB connection"},
    {"count", OPT_UINT, "1", 1, 1000, OFF(count), "messages per PULL"},
    {"block", OPT_DURATION, "5s", 1, 86400000, OFF(block_ms), "PULL BLOCK: how long one PULL waits for a message"},
    {"lease", OPT_DURATION, "30s", 1000, 86400000, OFF(lease_ms), "lease per message; renewed while a cancel runs"},
    {"touch-interval", OPT_DURATION, "0ms", 0, 86400000, OFF(touch_ms), "lease renewal period (0: lease / 2)"},

    {"mysql-host", OPT_STRING, NULL, 0, 0, OFF(mysql_host), "MariaDB host (unset: localhost / the socket)"},
    {"mysql-socket", OPT_STRING, NULL, 0, 0, OFF(mysql_socket), "MariaDB unix socket path"},
    {"mysql-port", OPT_UINT, "0", 0, 65535, OFF(mysql_port), "MariaDB TCP port (0: 3306)"},
    {"mysql-user", OPT_STRING, NULL, 0, 0, OFF(mysql_user), "MariaDB user (unset: the current user)"},
    {"mysql-password", OPT_STRING, NULL, 0, 0, OFF(mysql_password), "MariaDB password"},
    {"mysql-database", OPT_STRING, NULL, 0, 0, OFF(mysql_database), "database holding the orders (required)"},
    {"mysql-connect-timeout", OPT_DURATION, "5s", 1000, 3600000, OFF(mysql_connect_timeout_ms), "connect timeout (whole seconds)"},
    {"mysql-read-timeout", OPT_DURATION, "60s", 1000, 86400000, OFF(mysql_read_timeout_ms),
     "read timeout (whole seconds; keep it above innodb_lock_wait_timeout)"},
    {"mysql-write-timeout", OPT_DURATION, "60s", 1000, 86400000, OFF(mysql_write_timeout_ms), "write timeout (whole seconds)"},
    {"mysql-lock-wait-timeout", OPT_DURATION, "0s", 0, 86400000, OFF(mysql_lock_wait_timeout_ms),
     "session innodb_lock_wait_timeout (whole seconds; 0: the server's)"},

    {"claim-sql", OPT_STRING, NULL, 0, 0, OFF(claim_sql),
     "the claim: ? = order id (exactly one), :reason = cancel-reason; WHERE … status='pending'"},
    {"side-effect-sql", OPT_SQL_LIST, NULL, 0, 0, OFF(side_effect_sql),
     "a side effect run when the claim won (repeat for several, in order; \"none\" for none)"},
    {"lookup-sql", OPT_STRING, NULL, 0, 0, OFF(lookup_sql), "returns a row when the order exists (? = order id)"},
    {"cancel-reason", OPT_STRING, "timeout-message", 0, 0, OFF(cancel_reason), "value bound to :reason (at most 64 bytes)"},

    {"retry-base", OPT_DURATION, "200ms", 1, 3600000, OFF(retry_base_ms), "first local retry delay after a transient failure"},
    {"retry-factor", OPT_DOUBLE, "2", 1, 100, OFF(retry_factor), "growth of the delay per retry"},
    {"retry-cap", OPT_DURATION, "5s", 1, 3600000, OFF(retry_cap_ms), "longest local retry delay"},
    {"retry-attempts", OPT_UINT, "3", 0, 100, OFF(retry_attempts), "local retries before the NACK hands over to the broker"},
    {"retry-jitter", OPT_DOUBLE, "0.2", 0, 1, OFF(retry_jitter), "random share of each delay, 0..1"},

    {"metrics-port", OPT_UINT, "0", 0, 65535, OFF(metrics_port), "HTTP port for /metrics and /healthz (0: off)"},
    {"metrics-bind", OPT_STRING, "127.0.0.1", 0, 0, OFF(metrics_bind), "address the metrics server listens on"},
    {"log-level", OPT_STRING, "info", 0, 0, OFF(log_level), "error, warn, info or debug"},
};
#define OPTION_COUNT (sizeof options / sizeof options[0])

static const option_t *find_option(const char *name)
{
    for (size_t i = 0; i < OPTION_COUNT; i++)
        if (strcmp(options[i].name, name) == 0)
            return &options[i];
    return NULL;
}

static char *xstrdup(const char *s)
{
    char *d = strdup(s);
    if (d == NULL) {
        fputs(PROGRAM ": out of memory\n", stderr);
        abort();
    }
    return d;
}

/* Parse "<digits><unit>", unit ms|s|m|h (mandatory). Returns 0 / -1. */
static int parse_duration(const char *text, unsigned long long *ms)
{
    char *end;
    if (!isdigit((unsigned char)text[0]))
        return -1;
    errno = 0;
    unsigned long long v = strtoull(text, &end, 10);
    if (errno != 0)
        return -1;
    unsigned long long mult;
    if (strcmp(end, "ms") == 0)
        mult = 1;
    else if (strcmp(end, "s") == 0)
        mult = 1000;
    else if (strcmp(end, "m") == 0)
        mult = 60000;
    else if (strcmp(end, "h") == 0)
        mult = 3600000;
    else
        return -1;
    if (v > ULLONG_MAX / mult)
        return -1;
    *ms = v * mult;
    return 0;
}

/* Set one option from text. source: SOURCE_*. Returns 0, or -1 with err
 * naming the option. */
static int set_option(config_t *cfg, const option_t *o, const char *value, int source, char *err, size_t errlen)
{
    char *field = (char *)cfg + o->offset;
    switch (o->type) {
    case OPT_STRING: {
        char **s = (char **)field;
        free(*s);
        *s = xstrdup(value);
        return 0;
    }
    case OPT_SQL_LIST: {
        if (cfg->side_effect_source != source) { /* a new source replaces the list */
            for (size_t i = 0; i < cfg->side_effect_count; i++)
                free(cfg->side_effect_sql[i]);
            cfg->side_effect_count = 0;
            cfg->side_effect_source = source;
        }
        if (strcasecmp(value, "none") == 0)
            return 0;
        if (cfg->side_effect_count == HG_ORDER_SQL_MAX_SIDE_EFFECTS) {
            snprintf(err, errlen, "%s: more than %d statements", o->name, HG_ORDER_SQL_MAX_SIDE_EFFECTS);
            return -1;
        }
        cfg->side_effect_sql[cfg->side_effect_count++] = xstrdup(value);
        return 0;
    }
    case OPT_UINT:
    case OPT_DURATION: {
        unsigned long long v;
        char *end;
        if (o->type == OPT_DURATION) {
            if (parse_duration(value, &v) != 0) {
                snprintf(err, errlen, "%s: '%s' is not a duration (a number and a unit: ms, s, m or h)", o->name, value);
                return -1;
            }
        } else {
            errno = 0;
            v = strtoull(value, &end, 10);
            if (!isdigit((unsigned char)value[0]) || *end != '\0' || errno != 0) {
                snprintf(err, errlen, "%s: '%s' is not a whole number", o->name, value);
                return -1;
            }
        }
        if ((double)v < o->min || (double)v > o->max) {
            if (o->type == OPT_DURATION)
                snprintf(err, errlen, "%s: '%s' out of range %.0fms..%.0fms", o->name, value, o->min, o->max);
            else
                snprintf(err, errlen, "%s: '%s' out of range %.0f..%.0f", o->name, value, o->min, o->max);
            return -1;
        }
        *(unsigned long long *)field = v;
        return 0;
    }
    case OPT_DOUBLE: {
        char *end;
        errno = 0;
        double v = strtod(value, &end);
        if (value[0] == '\0' || *end != '\0' || errno != 0 || v != v) {
            snprintf(err, errlen, "%s: '%s' is not a number", o->name, value);
            return -1;
        }
        if (v < o->min || v > o->max) {
            snprintf(err, errlen, "%s: '%s' out of range %g..%g", o->name, value, o->min, o->max);
            return -1;
        }
        *(double *)field = v;
        return 0;
    }
    }
    return -1;
}

static void config_init(config_t *cfg)
{
    char err[256];
    memset(cfg, 0, sizeof *cfg);
    for (size_t i = 0; i < OPTION_COUNT; i++)
        if (options[i].def != NULL && set_option(cfg, &options[i], options[i].def, SOURCE_DEFAULT, err, sizeof err) != 0)
            abort(); /* a bad default is a bug in the table */
    /* The SQL defaults are the library's: the reference schema's statements. */
    hg_order_sql_t sql;
    hg_order_sql_default(&sql);
    cfg->claim_sql = xstrdup(sql.claim);
    cfg->lookup_sql = xstrdup(sql.lookup);
    for (size_t i = 0; i < sql.side_effect_count; i++)
        cfg->side_effect_sql[cfg->side_effect_count++] = xstrdup(sql.side_effects[i]);
    cfg->side_effect_source = SOURCE_DEFAULT;
}

static void config_free(config_t *cfg)
{
    for (size_t i = 0; i < OPTION_COUNT; i++)
        if (options[i].type == OPT_STRING)
            free(*(char **)((char *)cfg + options[i].offset));
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

/* Whole seconds for the client library, rounding up. */
static unsigned seconds_of(unsigned long long ms)
{
    return (unsigned)((ms + 999) / 1000);
}

static void config_db_params(const config_t *cfg, const hg_order_sql_t *sql, hg_order_db_params_t *p)
{
    memset(p, 0, sizeof *p);
    p->host = cfg->mysql_host;
    p->socket = cfg->mysql_socket;
    p->port = (unsigned)cfg->mysql_port;
    p->user = cfg->mysql_user;
    p->password = cfg->mysql_password;
    p->database = cfg->mysql_database;
    p->connect_timeout_s = seconds_of(cfg->mysql_connect_timeout_ms);
    p->read_timeout_s = seconds_of(cfg->mysql_read_timeout_ms);
    p->write_timeout_s = seconds_of(cfg->mysql_write_timeout_ms);
    p->lock_wait_timeout_s = seconds_of(cfg->mysql_lock_wait_timeout_ms);
    p->sql = sql;
}

/* --- the INI file ---
 * libinih reads lines of at most INI_MAX_LINE (200) bytes and silently splits
 * longer ones, so our reader refuses them with an error that says what to do:
 * continue a long value (SQL) on indented lines, which libinih hands to the
 * handler as the same key again; the reader's `indented` flag tells such a
 * continuation from a repeated key (side-effect-sql may repeat). */
typedef struct ini_state {
    FILE *file;
    const char *path;
    config_t *cfg;
    int line;               /* of the line last read */
    int indented;           /* it started with a blank */
    char pending_name[64];  /* the key being collected ("" when none) */
    int pending_line;
    char *pending_value;
    char error[512];        /* the first error, "" when none */
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

static char *ini_read_line(char *str, int num, void *stream)
{
    ini_state_t *st = stream;
    char buf[CONFIG_MAX_LINE];
    if (st->error[0] != '\0' || fgets(buf, sizeof buf, st->file) == NULL)
        return NULL;
    st->line++;
    size_t len = strlen(buf);
    if (len >= (size_t)num) {
        ini_error(st, "%s:%d: line longer than %d bytes (libinih's limit): continue a long value on the next "
                      "line, indented", st->path, st->line, num - 2);
        return NULL;
    }
    st->indented = buf[0] == ' ' || buf[0] == '\t';
    memcpy(str, buf, len + 1);
    return str;
}

/* Apply the collected key, if any. */
static void ini_flush(ini_state_t *st)
{
    if (st->pending_name[0] == '\0')
        return;
    const option_t *o = find_option(st->pending_name);
    char err[512];
    if (o == NULL)
        ini_error(st, "%s:%d: unknown key '%s' (see --help for the keys)", st->path, st->pending_line, st->pending_name);
    else if (set_option(st->cfg, o, st->pending_value, SOURCE_FILE, err, sizeof err) != 0)
        ini_error(st, "%s:%d: %s", st->path, st->pending_line, err);
    st->pending_name[0] = '\0';
    free(st->pending_value);
    st->pending_value = NULL;
}

static const char *const known_sections[] = {"", "broker", "consumer", "mysql", "sql", "retry", "metrics", "log"};

static int config_ini_handler(void *user, const char *section, const char *name, const char *value)
{
    ini_state_t *st = user;
    int known = 0;
    for (size_t i = 0; i < sizeof known_sections / sizeof known_sections[0]; i++)
        known |= strcmp(section, known_sections[i]) == 0;
    if (!known) {
        ini_error(st, "%s:%d: unknown section [%s] (sections: broker, consumer, mysql, sql, retry, metrics, log)",
                  st->path, st->line, section);
        return 0;
    }
    if (st->indented && st->pending_name[0] != '\0' && strcmp(name, st->pending_name) == 0) {
        size_t a = strlen(st->pending_value), b = strlen(value);
        char *joined = malloc(a + b + 2);
        if (joined == NULL)
            abort();
        memcpy(joined, st->pending_value, a);
        joined[a] = ' ';
        memcpy(joined + a + 1, value, b + 1);
        free(st->pending_value);
        st->pending_value = joined;
        return 1;
    }
    ini_flush(st);
    if (strlen(name) >= sizeof st->pending_name) {
        ini_error(st, "%s:%d: unknown key '%.40s…'", st->path, st->line, name);
        return 0;
    }
    snprintf(st->pending_name, sizeof st->pending_name, "%s", name);
    st->pending_line = st->line;
    st->pending_value = xstrdup(value);
    return 1;
}

static int config_load_file(config_t *cfg, const char *path, char *err, size_t errlen)
{
    ini_state_t st = {.path = path, .cfg = cfg};
    st.file = fopen(path, "r");
    if (st.file == NULL) {
        snprintf(err, errlen, "config: cannot open %s: %s", path, strerror(errno));
        return -1;
    }
    int rc = ini_parse_stream(ini_read_line, &st, config_ini_handler, &st);
    ini_flush(&st);
    fclose(st.file);
    if (st.error[0] == '\0' && rc > 0)
        ini_error(&st, "%s:%d: not a 'key = value' line, a [section] or a comment", path, rc);
    if (st.error[0] == '\0' && rc < 0)
        ini_error(&st, "%s: cannot read", path);
    free(st.pending_value);
    if (st.error[0] != '\0') {
        snprintf(err, errlen, "%s", st.error);
        return -1;
    }
    return 0;
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
    static const struct {
        size_t offset;
        const char *name;
    } required[] = {{OFF(uri), "uri"}, {OFF(group), "group"}, {OFF(topic), "topic"},
                    {OFF(mysql_database), "mysql-database"}, {OFF(claim_sql), "claim-sql"},
                    {OFF(lookup_sql), "lookup-sql"}};
    for (size_t i = 0; i < sizeof required / sizeof required[0]; i++) {
        const char *v = *(char *const *)((const char *)cfg + required[i].offset);
        if (v == NULL || v[0] == '\0') {
            snprintf(err, errlen, "%s: required, not set", required[i].name);
            return -1;
        }
    }
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
    if (cfg->mysql_socket != NULL && cfg->mysql_socket[0] != '\0' && cfg->mysql_socket[0] != '/') {
        snprintf(err, errlen, "mysql-socket: '%s' is not an absolute path", cfg->mysql_socket);
        return -1;
    }
    int level = -1;
    for (int i = 0; i <= LOG_DEBUG; i++)
        if (strcmp(cfg->log_level, log_names[i]) == 0)
            level = i;
    if (level < 0) {
        snprintf(err, errlen, "log-level: '%s' is not one of error, warn, info, debug", cfg->log_level);
        return -1;
    }
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
    for (size_t i = 0; i < OPTION_COUNT; i++) {
        const option_t *o = &options[i];
        const char *def = o->def;
        if (o->type == OPT_SQL_LIST)
            def = "the reference schema's stock return and outbox update";
        else if (def == NULL && strstr(o->name, "-sql") != NULL)
            def = "the reference schema's";
        fprintf(out, "  %-24s %s%s%s%s\n", o->name, o->help, def != NULL ? " [" : "", def != NULL ? def : "",
                def != NULL ? "]" : "");
    }
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

typedef struct metrics_server {
    struct event_base *base;
    struct evhttp *http;
    pthread_t thread;
    int running;
    hg_consumer_t *consumer;
} metrics_server_t;

static void metric(struct evbuffer *b, const char *name, const char *type, const char *help, uint64_t v)
{
    evbuffer_add_printf(b, "# HELP %s %s\n# TYPE %s %s\n%s %" PRIu64 "\n", name, help, name, type, name, v);
}

static void metrics_cb(struct evhttp_request *req, void *arg)
{
    metrics_server_t *m = arg;
    struct evbuffer *b = evbuffer_new();
    if (b == NULL) {
        evhttp_send_error(req, HTTP_INTERNAL, "out of memory");
        return;
    }
    metric(b, "hourglass_consumer_cancelled_total", "counter", "Orders this consumer cancelled.", load(&counters.cancelled));
    metric(b, "hourglass_consumer_not_pending_total", "counter",
           "Messages for orders already paid or cancelled (nothing changed).", load(&counters.not_pending));
    metric(b, "hourglass_consumer_not_found_total", "counter", "Messages for unknown orders (nothing changed).",
           load(&counters.not_found));
    metric(b, "hourglass_consumer_retries_total", "counter",
           "Transient failures (deadlock, lock wait, lost connection …) handed to the retry schedule.",
           load(&counters.transient));
    metric(b, "hourglass_consumer_permanent_failures_total", "counter",
           "Permanent failures (bad payload, SQL refused …) NACKed with their reason.", load(&counters.permanent));
    metric(b, "hourglass_consumer_bad_payload_total", "counter", "Payloads that are not an order id (part of the permanent failures).",
           load(&counters.bad_payload));
    metric(b, "hourglass_consumer_db_unavailable_total", "counter", "Messages retried because MariaDB could not be reached.",
           load(&counters.db_unavailable));

    evbuffer_add_printf(b, "# HELP hourglass_consumer_handler_seconds Time to handle one message (parse + cancel transaction).\n"
                           "# TYPE hourglass_consumer_handler_seconds histogram\n");
    uint64_t cumulative = 0;
    for (size_t i = 0; i <= LATENCY_BUCKETS; i++) {
        cumulative += load(&counters.latency_bucket[i]);
        if (i < LATENCY_BUCKETS)
            evbuffer_add_printf(b, "hourglass_consumer_handler_seconds_bucket{le=\"%g\"} %" PRIu64 "\n", latency_bounds[i],
                                cumulative);
        else
            evbuffer_add_printf(b, "hourglass_consumer_handler_seconds_bucket{le=\"+Inf\"} %" PRIu64 "\n", cumulative);
    }
    evbuffer_add_printf(b, "hourglass_consumer_handler_seconds_sum %.6f\nhourglass_consumer_handler_seconds_count %" PRIu64 "\n",
                        (double)load(&counters.latency_sum_us) / 1e6, load(&counters.latency_count));

    hg_consumer_stats_t s;
    hg_consumer_stats(m->consumer, &s);
    metric(b, "hourglass_consumer_delivered_total", "counter", "Messages received from PULL.", s.delivered);
    metric(b, "hourglass_consumer_acked_total", "counter", "Messages ACKed.", s.done);
    metric(b, "hourglass_consumer_local_retries_total", "counter", "Handler calls repeated after a local backoff.", s.retried);
    metric(b, "hourglass_consumer_nacked_total", "counter", "NACKs after the local retries ran out.", s.nacked);
    metric(b, "hourglass_consumer_failed_total", "counter", "NACKs of permanent failures.", s.failed);
    metric(b, "hourglass_consumer_lease_lost_total", "counter", "ACK/NACK/TOUCH that found the lease expired.", s.lease_lost);
    metric(b, "hourglass_consumer_broker_errors_total", "counter", "Connection and broker errors met by the workers.", s.errors);

    evhttp_add_header(evhttp_request_get_output_headers(req), "Content-Type", "text/plain; version=0.0.4");
    evhttp_send_reply(req, HTTP_OK, "OK", b);
    evbuffer_free(b);
}

static void healthz_cb(struct evhttp_request *req, void *arg)
{
    (void)arg;
    struct evbuffer *b = evbuffer_new();
    if (b == NULL) {
        evhttp_send_error(req, HTTP_INTERNAL, "out of memory");
        return;
    }
    evbuffer_add_printf(b, "ok\n");
    evhttp_send_reply(req, HTTP_OK, "OK", b);
    evbuffer_free(b);
}

static void *metrics_thread(void *arg)
{
    metrics_server_t *m = arg;
    event_base_dispatch(m->base);
    return NULL;
}

static int metrics_start(metrics_server_t *m, const config_t *cfg, hg_consumer_t *consumer, char *err, size_t errlen)
{
    memset(m, 0, sizeof *m);
    m->consumer = consumer;
    m->base = event_base_new();
    m->http = m->base != NULL ? evhttp_new(m->base) : NULL;
    if (m->http == NULL) {
        snprintf(err, errlen, "metrics-port: cannot create the HTTP server");
        goto fail;
    }
    evhttp_set_cb(m->http, "/metrics", metrics_cb, m);
    evhttp_set_cb(m->http, "/healthz", healthz_cb, m);
    if (evhttp_bind_socket_with_handle(m->http, cfg->metrics_bind, (ev_uint16_t)cfg->metrics_port) == NULL) {
        snprintf(err, errlen, "metrics-port: cannot listen on %s:%llu: %s", cfg->metrics_bind, cfg->metrics_port,
                 strerror(errno));
        goto fail;
    }
    int rc = pthread_create(&m->thread, NULL, metrics_thread, m);
    if (rc != 0) {
        snprintf(err, errlen, "metrics: cannot start a thread: %s", strerror(rc));
        goto fail;
    }
    m->running = 1;
    return 0;

fail:
    if (m->http != NULL)
        evhttp_free(m->http);
    if (m->base != NULL)
        event_base_free(m->base);
    memset(m, 0, sizeof *m);
    return -1;
}

static void metrics_stop(metrics_server_t *m)
{
    if (!m->running)
        return;
    event_base_loopbreak(m->base); /* thread-safe: evthread_use_pthreads ran first */
    pthread_join(m->thread, NULL);
    evhttp_free(m->http);
    event_base_free(m->base);
    m->running = 0;
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
        log_msg(LOG_WARN, "message %s: %s", msg->id, why);
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
            log_msg(LOG_WARN, "worker %d: %s", msg->worker, reason);
            return HG_RETRY;
        }
    }

    hg_order_outcome_t outcome;
    hg_order_cancel(*slot, order_id, app->cfg.cancel_reason, &outcome, &err);
    switch (outcome) {
    case HG_ORDER_CANCELLED:
        count(&counters.cancelled);
        log_msg(LOG_DEBUG, "order %" PRIu64 ": cancelled (message %s)", order_id, msg->id);
        return HG_DONE;
    case HG_ORDER_NOT_PENDING:
        count(&counters.not_pending);
        log_msg(LOG_DEBUG, "order %" PRIu64 ": not pending, nothing to do (message %s)", order_id, msg->id);
        return HG_DONE;
    case HG_ORDER_NOT_FOUND:
        count(&counters.not_found);
        log_msg(LOG_WARN, "order %" PRIu64 ": no such order, message %s acknowledged", order_id, msg->id);
        return HG_DONE;
    case HG_ORDER_TRANSIENT:
        count(&counters.transient);
        snprintf(reason, reason_size, "order %" PRIu64 ": transient: %s", order_id, err.message);
        log_msg(LOG_INFO, "%s (attempt %u)", reason, msg->attempt);
        return HG_RETRY;
    case HG_ORDER_PAID:
    case HG_ORDER_PERMANENT:
        break;
    }
    count(&counters.permanent);
    snprintf(reason, reason_size, "order %" PRIu64 ": %s", order_id, err.message);
    log_msg(LOG_ERROR, "%s", reason);
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
            log_msg(LOG_ERROR, "%s", err.message);
            return -1;
        }
        log_msg(LOG_WARN, "MariaDB not reachable yet (%s); the workers will keep trying", err.message);
        return 0;
    }
    int rc = 0;
    if (hg_order_db_prepare(db, &err) != 0) {
        if (hg_order_classify(err.code) == HG_ORDER_PERMANENT) {
            log_msg(LOG_ERROR, "the database refuses the configured SQL: %s", err.message);
            rc = -1;
        } else {
            log_msg(LOG_WARN, "could not check the SQL yet (%s); the workers will keep trying", err.message);
        }
    }
    hg_order_db_close(db);
    return rc;
}

int main(int argc, char **argv)
{
    const char *config_path = NULL;
    int check_only = 0;
    char err[600];

    /* Pass 1: the options that are not keys. */
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "-h") == 0 || strcmp(argv[i], "--help") == 0) {
            usage(stdout);
            return 0;
        }
        if (strcmp(argv[i], "-V") == 0 || strcmp(argv[i], "--version") == 0) {
            printf(PROGRAM " %s\n", HG_VERSION_STRING);
            return 0;
        }
        if (strcmp(argv[i], "--check-config") == 0)
            check_only = 1;
        else if (strcmp(argv[i], "-c") == 0 || strcmp(argv[i], "--config") == 0) {
            if (i + 1 >= argc) {
                fprintf(stderr, PROGRAM ": %s needs a file name\n", argv[i]);
                return EXIT_CONFIG;
            }
            config_path = argv[++i];
        } else if (strncmp(argv[i], "--config=", 9) == 0)
            config_path = argv[i] + 9;
    }

    app_t app;
    memset(&app, 0, sizeof app);
    config_init(&app.cfg);
    if (config_path != NULL && config_load_file(&app.cfg, config_path, err, sizeof err) != 0) {
        fprintf(stderr, PROGRAM ": %s\n", err);
        config_free(&app.cfg);
        return EXIT_CONFIG;
    }

    /* Pass 2: --key value / --key=value, over the file. */
    for (int i = 1; i < argc; i++) {
        const char *arg = argv[i];
        if (strcmp(arg, "--check-config") == 0)
            continue;
        if (strcmp(arg, "-c") == 0 || strcmp(arg, "--config") == 0) {
            i++;
            continue;
        }
        if (strncmp(arg, "--config=", 9) == 0)
            continue;
        if (strncmp(arg, "--", 2) != 0) {
            fprintf(stderr, PROGRAM ": unexpected argument '%s' (see --help)\n", arg);
            config_free(&app.cfg);
            return EXIT_CONFIG;
        }
        char name[64];
        const char *value;
        const char *eq = strchr(arg + 2, '=');
        size_t len = eq != NULL ? (size_t)(eq - arg - 2) : strlen(arg + 2);
        snprintf(name, sizeof name, "%.*s", (int)(len < sizeof name ? len : sizeof name - 1), arg + 2);
        const option_t *o = len < sizeof name ? find_option(name) : NULL;
        if (o == NULL) {
            fprintf(stderr, PROGRAM ": unknown option '%s' (see --help)\n", arg);
            config_free(&app.cfg);
            return EXIT_CONFIG;
        }
        if (eq != NULL) {
            value = eq + 1;
        } else if (i + 1 < argc) {
            value = argv[++i];
        } else {
            fprintf(stderr, PROGRAM ": --%s needs a value\n", name);
            config_free(&app.cfg);
            return EXIT_CONFIG;
        }
        if (set_option(&app.cfg, o, value, SOURCE_FLAG, err, sizeof err) != 0) {
            fprintf(stderr, PROGRAM ": %s\n", err);
            config_free(&app.cfg);
            return EXIT_CONFIG;
        }
    }

    if (config_validate(&app.cfg, err, sizeof err) != 0) {
        fprintf(stderr, PROGRAM ": %s\n", err);
        config_free(&app.cfg);
        return EXIT_CONFIG;
    }
    if (check_only) {
        if (config_path != NULL)
            printf(PROGRAM ": configuration OK (%s)\n", config_path);
        else
            printf(PROGRAM ": configuration OK\n");
        config_free(&app.cfg);
        return 0;
    }
    for (int i = 0; i <= LOG_DEBUG; i++)
        if (strcmp(app.cfg.log_level, log_names[i]) == 0)
            log_threshold = (log_level_t)i;

    /* Process-wide set-up before any thread. */
    signal(SIGPIPE, SIG_IGN);
    if (hg_order_library_init() != 0) {
        log_msg(LOG_ERROR, "the MariaDB client library failed to initialise");
        config_free(&app.cfg);
        return 1;
    }
    evthread_use_pthreads();

    config_sql(&app.cfg, &app.sql);
    config_db_params(&app.cfg, &app.sql, &app.db_params);
    int status = 1;
    hg_consumer_t *consumer = NULL;
    metrics_server_t metrics = {0};
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
        log_msg(LOG_ERROR, "consumer: %s", e.message);
        goto out;
    }
    if (app.cfg.metrics_port > 0) {
        if (metrics_start(&metrics, &app.cfg, consumer, err, sizeof err) != 0) {
            log_msg(LOG_ERROR, "%s", err);
            goto out;
        }
        log_msg(LOG_INFO, "metrics on http://%s:%llu/metrics", app.cfg.metrics_bind, app.cfg.metrics_port);
    }

    running_consumer = consumer;
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);

    log_msg(LOG_INFO, PROGRAM " %s: group %s, topic %s, %llu workers, database %s", HG_VERSION_STRING, app.cfg.group,
            app.cfg.topic, app.cfg.workers, app.cfg.mysql_database);
    hg_err_t rc = hg_consumer_run(consumer);
    running_consumer = NULL;
    if (rc != HG_OK) {
        hg_error_t last;
        hg_consumer_last_error(consumer, &last);
        log_msg(LOG_ERROR, "consumer stopped: %s", last.message[0] ? last.message : hg_strerror(rc));
        goto out;
    }
    log_msg(LOG_INFO, "stopped: cancelled %" PRIu64 ", not pending %" PRIu64 ", not found %" PRIu64
                      ", transient %" PRIu64 ", permanent %" PRIu64,
            load(&counters.cancelled), load(&counters.not_pending), load(&counters.not_found),
            load(&counters.transient), load(&counters.permanent));
    status = 0;

out:
    metrics_stop(&metrics);
    hg_consumer_free(consumer);
    for (unsigned long long i = 0; i < app.cfg.workers; i++)
        hg_order_db_close(app.dbs[i]);
    free(app.dbs);
    config_free(&app.cfg);
    return status;
}
