/*
 * broker/config.c — the config table and its parsers (see config.h).
 *
 * One row per key: {name, type, default, min, max, offset, help}. Defaults
 * are text and go through the same parser as the file and the flags, so the
 * help, the sample file and the behaviour cannot disagree. Runs on the main
 * thread before any other thread starts.
 */
#include <config.h>   /* autoconf: PACKAGE_VERSION */
#include "broker/config.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <errno.h>
#include <ini.h>
#include <limits.h>
#include <netdb.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "levels/msg.h"

typedef enum cfg_type {
    CFG_STRING, CFG_BOOL, CFG_INT, CFG_SIZE, CFG_DURATION, CFG_ENUM, CFG_LEVELS
} cfg_type_t;

typedef struct cfg_key {
    const char *name;
    cfg_type_t type;
    const char *default_text;
    long long min, max;         /* numeric types, in base units (bytes, ms) */
    size_t offset;              /* into config_t */
    const char *enum_words;     /* CFG_ENUM: "always|no"; value is the word's index */
    const char *help;
} cfg_key_t;

#define OFF(f) offsetof(config_t, f)
#define KB 1024LL
#define MB (1024LL * 1024)
#define GB (1024LL * 1024 * 1024)
#define DAY_MS (86400000LL)

/* The table. Keep it in the order of docs/broker.md and etc/hourglass-broker.conf. */
static const cfg_key_t cfg_keys[] = {
    { "bind", CFG_STRING, "127.0.0.1", 0, 0, OFF(bind), NULL,
      "address to listen on; a non-loopback address needs allow-remote yes" },
    { "port", CFG_INT, "7379", 0, 65535, OFF(port), NULL,
      "TCP port for RESP clients (0: any free port, logged at start-up)" },
    { "allow-remote", CFG_BOOL, "no", 0, 1, OFF(allow_remote), NULL,
      "allow listening on a non-loopback address (no users or TLS yet)" },
    { "max-clients", CFG_INT, "10000", 1, 1000000, OFF(max_clients), NULL,
      "most client connections; more are told '-ERR max number of clients reached'" },
    { "idle-timeout", CFG_DURATION, "0", 0, 365 * DAY_MS, OFF(idle_timeout_ms), NULL,
      "close a client idle this long (0: never); blocked PULLs are exempt" },
    { "tcp-backlog", CFG_INT, "511", 1, 65535, OFF(tcp_backlog), NULL,
      "listen(2) backlog" },
    { "dir", CFG_STRING, "./hourglass-data", 0, 0, OFF(dir), NULL,
      "data directory (created if missing; one broker per directory)" },
    { "levels", CFG_LEVELS, LVL_DEFAULT_SPEC, 0, 0, OFF(levels), NULL,
      "delay level table; must match the one the data directory was created with" },
    { "fsync", CFG_ENUM, "always", 0, 1, OFF(fsync_always), "no|always",
      "always: fsync every group commit before replying; no: write only (survives a crash, not a power cut)" },
    { "cache-size", CFG_SIZE, "8mb", 0, 64 * GB, OFF(cache_size), NULL,
      "LevelDB block cache" },
    { "write-buffer-size", CFG_SIZE, "4mb", 64 * KB, 4 * GB, OFF(write_buffer_size), NULL,
      "LevelDB memtable size" },
    { "max-open-files", CFG_INT, "500", 16, 1000000, OFF(max_open_files), NULL,
      "LevelDB table file cache" },
    { "lease", CFG_DURATION, "30s", 1, DAY_MS, OFF(lease_ms), NULL,
      "default lease of a PULLed message (PULL/TOUCH LEASE override it)" },
    { "max-reconsume", CFG_INT, "16", 0, 1000, OFF(max_reconsume), NULL,
      "failures retried before the DLQ (GROUP CREATE MAXRETRY overrides it per group)" },
    { "retention", CFG_DURATION, "72h", 1000, 3650 * DAY_MS, OFF(retention_ms), NULL,
      "how long a topic with no group keeps due messages" },
    { "max-delay", CFG_DURATION, "3d", 1000, 3650 * DAY_MS, OFF(max_delay_ms), NULL,
      "longest DELAY / AT accepted" },
    { "max-pull-count", CFG_INT, "1000", 1, 100000, OFF(max_pull_count), NULL,
      "largest PULL COUNT and DLQ LIST COUNT" },
    { "max-payload", CFG_SIZE, "4mb", 0, (long long)MSG_HARD_MAX_PAYLOAD, OFF(max_payload), NULL,
      "largest message payload" },
    { "max-pull-bytes", CFG_SIZE, "16mb", 1, 1 * GB, OFF(max_pull_bytes), NULL,
      "payload bytes one PULL returns at most (fewer messages than COUNT; always at least one)" },
    { "max-args", CFG_INT, "1024", 3, 1000000, OFF(max_args), NULL,
      "most arguments in one command (protocol error and close above)" },
    { "max-bulk", CFG_SIZE, "8mb", 1 * KB, 1 * GB, OFF(max_bulk), NULL,
      "largest single argument (protocol error and close above); >= max-payload" },
    { "max-inline", CFG_SIZE, "64kb", 256, 64 * MB, OFF(max_inline), NULL,
      "longest inline (telnet-style) command line" },
    { "max-query", CFG_SIZE, "16mb", 4 * KB, 2 * GB, OFF(max_query), NULL,
      "most wire bytes of one command; > max-bulk" },
    { "max-reply-buffer", CFG_SIZE, "64mb", 64 * KB, 64 * GB, OFF(max_reply_buffer), NULL,
      "a client with more unread replies than this is disconnected" },
    { "metrics-port", CFG_INT, "0", 0, 65535, OFF(metrics_port), NULL,
      "HTTP port for /metrics and /healthz (0: off)" },
    { "metrics-bind", CFG_STRING, "127.0.0.1", 0, 0, OFF(metrics_bind), NULL,
      "address of the metrics listener; non-loopback needs allow-remote yes" },
    { "log-level", CFG_ENUM, "info", 0, 3, OFF(log_level), "debug|info|warn|error",
      "least severe log records written" },
};

#define CFG_NKEYS ((int)(sizeof cfg_keys / sizeof cfg_keys[0]))
_Static_assert(sizeof cfg_keys / sizeof cfg_keys[0] <= CONFIG_MAX_KEYS, "raise CONFIG_MAX_KEYS");

static void set_err(char *err, size_t errlen, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void set_err(char *err, size_t errlen, const char *fmt, ...)
{
    if (err == NULL || errlen == 0) { return; }
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
}

int config_key_count(void) { return CFG_NKEYS; }
const char *config_key_name(int i) { return (i >= 0 && i < CFG_NKEYS) ? cfg_keys[i].name : NULL; }
const char *config_key_value(const config_t *c, int i)
{
    return (i >= 0 && i < CFG_NKEYS && c->text[i]) ? c->text[i] : "";
}

static const cfg_key_t *find_key(const char *name, int *index)
{
    for (int i = 0; i < CFG_NKEYS; i++) {
        if (strcasecmp(cfg_keys[i].name, name) == 0) { *index = i; return &cfg_keys[i]; }
    }
    return NULL;
}

/* Strict decimal: digits only, no sign, fits in long long. */
static int parse_ll(const char *s, long long *out)
{
    if (*s == '\0') { return -1; }
    long long v = 0;
    for (const char *p = s; *p; p++) {
        if (*p < '0' || *p > '9') { return -1; }
        if (v > (LLONG_MAX - (*p - '0')) / 10) { return -1; }
        v = v * 10 + (*p - '0');
    }
    *out = v;
    return 0;
}

static int parse_size(const char *s, long long *out)
{
    size_t n = 0;
    while (s[n] >= '0' && s[n] <= '9') { n++; }
    if (n == 0 || n > 18) { return -1; }
    char num[20];
    memcpy(num, s, n);
    num[n] = '\0';
    long long v;
    if (parse_ll(num, &v) != 0) { return -1; }
    const char *u = s + n;
    long long mul;
    if (*u == '\0' || strcasecmp(u, "b") == 0) { mul = 1; }
    else if (strcasecmp(u, "k") == 0 || strcasecmp(u, "kb") == 0) { mul = KB; }
    else if (strcasecmp(u, "m") == 0 || strcasecmp(u, "mb") == 0) { mul = MB; }
    else if (strcasecmp(u, "g") == 0 || strcasecmp(u, "gb") == 0) { mul = GB; }
    else { return -1; }
    if (v > LLONG_MAX / mul) { return -1; }
    *out = v * mul;
    return 0;
}

static int parse_bool(const char *s, int *out)
{
    static const char *const yes[] = { "yes", "true", "on", "1" };
    static const char *const no[] = { "no", "false", "off", "0" };
    for (int i = 0; i < 4; i++) {
        if (strcasecmp(s, yes[i]) == 0) { *out = 1; return 0; }
        if (strcasecmp(s, no[i]) == 0) { *out = 0; return 0; }
    }
    return -1;
}

/* Index of word in "a|b|c", or -1. */
static int enum_index(const char *words, const char *s)
{
    int idx = 0;
    const char *p = words;
    size_t sl = strlen(s);
    while (*p) {
        const char *bar = strchr(p, '|');
        size_t wl = bar ? (size_t)(bar - p) : strlen(p);
        if (wl == sl && strncasecmp(p, s, wl) == 0) { return idx; }
        idx++;
        if (!bar) { break; }
        p = bar + 1;
    }
    return -1;
}

static void trim_copy(char *dst, size_t dstlen, const char *src)
{
    while (*src == ' ' || *src == '\t') { src++; }
    size_t n = strlen(src);
    while (n > 0 && (src[n - 1] == ' ' || src[n - 1] == '\t' || src[n - 1] == '\r' || src[n - 1] == '\n')) { n--; }
    if (n >= dstlen) { n = dstlen - 1; }
    memcpy(dst, src, n);
    dst[n] = '\0';
}

int config_set(config_t *c, const char *key, const char *value_in, char *err, size_t errlen)
{
    int idx = -1;
    const cfg_key_t *k = find_key(key, &idx);
    if (k == NULL) {
        set_err(err, errlen, "unknown configuration key '%s' (see --help)", key);
        return -1;
    }
    char value[4096];
    if (strlen(value_in) >= sizeof value) {
        set_err(err, errlen, "%s: value is too long", k->name);
        return -1;
    }
    trim_copy(value, sizeof value, value_in);
    char *field = (char *)c + k->offset;
    long long num = 0;
    char fmt[64];
    switch (k->type) {
    case CFG_STRING:
    case CFG_LEVELS: {
        if (value[0] == '\0') {
            set_err(err, errlen, "%s: empty value", k->name);
            return -1;
        }
        if (k->type == CFG_LEVELS) {
            char lerr[256];
            if (lvl_table_parse(value, &c->level_table, lerr, sizeof lerr) != 0) {
                set_err(err, errlen, "levels: %s", lerr);
                return -1;
            }
        }
        char **sp = (char **)field;
        free(*sp);
        *sp = hg_xstrndup(value, strlen(value));
        break;
    }
    case CFG_BOOL: {
        int b;
        if (parse_bool(value, &b) != 0) {
            set_err(err, errlen, "%s: '%s' is not yes or no", k->name, value);
            return -1;
        }
        *(int *)field = b;
        snprintf(value, sizeof value, "%s", b ? "yes" : "no");
        break;
    }
    case CFG_ENUM: {
        int e = enum_index(k->enum_words, value);
        if (e < 0) {
            set_err(err, errlen, "%s: '%s' is not one of %s", k->name, value, k->enum_words);
            return -1;
        }
        *(int *)field = e;
        for (char *p = value; *p; p++) { *p = (char)tolower((unsigned char)*p); }
        break;
    }
    case CFG_INT:
    case CFG_SIZE:
    case CFG_DURATION:
        if (k->type == CFG_INT) {
            if (parse_ll(value, &num) != 0) {
                set_err(err, errlen, "%s: '%s' is not a non-negative integer", k->name, value);
                return -1;
            }
        } else if (k->type == CFG_SIZE) {
            if (parse_size(value, &num) != 0) {
                set_err(err, errlen, "%s: '%s' is not a size (bytes, or a number with kb, mb, gb)", k->name, value);
                return -1;
            }
        } else {
            uint64_t ms;
            char derr[160];
            if (strcmp(value, "0") == 0) {
                ms = 0;
            } else if (lvl_parse_duration(value, &ms, derr, sizeof derr) != 0) {
                set_err(err, errlen, "%s: %s", k->name, derr);
                return -1;
            }
            num = (long long)ms;
        }
        if (num < k->min || num > k->max) {
            char lo[48], hi[48];
            if (k->type == CFG_DURATION) {
                lvl_format_duration((uint64_t)k->min, lo, sizeof lo);
                lvl_format_duration((uint64_t)k->max, hi, sizeof hi);
            } else {
                snprintf(lo, sizeof lo, "%lld", k->min);
                snprintf(hi, sizeof hi, "%lld", k->max);
            }
            set_err(err, errlen, "%s: %s is outside %s..%s", k->name, value, lo, hi);
            return -1;
        }
        *(long long *)field = num;
        if (k->type == CFG_DURATION) {
            lvl_format_duration((uint64_t)num, fmt, sizeof fmt);
            snprintf(value, sizeof value, "%s", fmt);
        }
        break;
    }
    free(c->text[idx]);
    c->text[idx] = hg_xstrndup(value, strlen(value));
    return 0;
}

void config_init_defaults(config_t *c)
{
    memset(c, 0, sizeof *c);
    lvl_table_default(&c->level_table);
    for (int i = 0; i < CFG_NKEYS; i++) {
        char err[256];
        if (config_set(c, cfg_keys[i].name, cfg_keys[i].default_text, err, sizeof err) != 0) {
            fprintf(stderr, "hourglass-broker: bad built-in default: %s\n", err);
            abort();
        }
    }
}

void config_free(config_t *c)
{
    for (int i = 0; i < CFG_NKEYS; i++) {
        if (cfg_keys[i].type == CFG_STRING || cfg_keys[i].type == CFG_LEVELS) {
            char **sp = (char **)((char *)c + cfg_keys[i].offset);
            free(*sp);
            *sp = NULL;
        }
        free(c->text[i]);
        c->text[i] = NULL;
    }
}

int config_is_loopback(const char *host)
{
    if (strcasecmp(host, "localhost") == 0) { return 1; }
    struct in_addr a4;
    struct in6_addr a6;
    if (inet_pton(AF_INET, host, &a4) == 1) { return (ntohl(a4.s_addr) >> 24) == 127; }
    if (inet_pton(AF_INET6, host, &a6) == 1) { return memcmp(&a6, &in6addr_loopback, sizeof a6) == 0; }
    return 0;
}

int config_validate(config_t *c, char *err, size_t errlen)
{
    char lerr[256];
    if (lvl_table_parse(c->levels, &c->level_table, lerr, sizeof lerr) != 0) {
        set_err(err, errlen, "levels: %s", lerr);
        return -1;
    }
    if (c->max_bulk < c->max_payload) {
        set_err(err, errlen, "max-bulk (%lld) must be at least max-payload (%lld): a payload is one bulk argument",
                c->max_bulk, c->max_payload);
        return -1;
    }
    if (c->max_query <= c->max_bulk) {
        set_err(err, errlen, "max-query (%lld) must be larger than max-bulk (%lld)", c->max_query, c->max_bulk);
        return -1;
    }
    if ((uint64_t)c->max_delay_ms > LVL_MAX_DURATION_MS) {
        set_err(err, errlen, "max-delay is too long");
        return -1;
    }
    if (!c->allow_remote && !config_is_loopback(c->bind)) {
        set_err(err, errlen, "bind %s is not a loopback address: the broker has no users or TLS yet; "
                "set allow-remote yes to listen there anyway", c->bind);
        return -1;
    }
    if (c->metrics_port != 0 && !c->allow_remote && !config_is_loopback(c->metrics_bind)) {
        set_err(err, errlen, "metrics-bind %s is not a loopback address; set allow-remote yes to listen there anyway",
                c->metrics_bind);
        return -1;
    }
    if (c->metrics_port != 0 && c->metrics_port == c->port && strcmp(c->bind, c->metrics_bind) == 0) {
        set_err(err, errlen, "metrics-port %lld is the same as port", c->metrics_port);
        return -1;
    }
    return 0;
}

/* ---- the INI file ------------------------------------------------------- */

typedef struct ini_ctx {
    config_t *c;
    const char *path;
    char err[512];
    int failed;
} ini_ctx_t;

static int config_ini_line(void *user, const char *section, const char *name, const char *value)
{
    ini_ctx_t *ctx = user;
    if (ctx->failed) { return 0; }
    if (section[0] != '\0' && strcasecmp(section, "broker") != 0) {
        snprintf(ctx->err, sizeof ctx->err, "unknown section [%s] (keys go at the top or under [broker])", section);
        ctx->failed = 1;
        return 0;
    }
    if (config_set(ctx->c, name, value, ctx->err, sizeof ctx->err) != 0) {
        ctx->failed = 1;
        return 0;
    }
    return 1;
}

static int load_file(config_t *c, const char *path, char *err, size_t errlen)
{
    FILE *f = fopen(path, "r");
    if (f == NULL) {
        set_err(err, errlen, "cannot open config file %s: %s", path, strerror(errno));
        return -1;
    }
    ini_ctx_t ctx = { .c = c, .path = path };
    int line = ini_parse_file(f, config_ini_line, &ctx);
    fclose(f);
    if (line != 0) {
        if (ctx.failed) {
            set_err(err, errlen, "%s:%d: %s", path, line, ctx.err);
        } else {
            set_err(err, errlen, "%s:%d: syntax error (expected 'key = value', '[section]' or a comment)", path, line);
        }
        return -1;
    }
    return 0;
}

/* ---- the command line --------------------------------------------------- */

int config_load(config_t *c, int argc, char **argv, config_action_t *action, char *err, size_t errlen)
{
    *action = CONFIG_RUN;
    const char *file = NULL;
    /* Pass 1: actions and --config, so the file is applied before any flag. */
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) { *action = CONFIG_HELP; return 0; }
        if (strcmp(a, "--version") == 0 || strcmp(a, "-v") == 0) { *action = CONFIG_VERSION; return 0; }
        if (strcmp(a, "--check-config") == 0) { *action = CONFIG_CHECK; continue; }
        if (strcmp(a, "--config") == 0 || strcmp(a, "-c") == 0) {
            if (i + 1 >= argc) { set_err(err, errlen, "%s needs a file name", a); return -1; }
            file = argv[++i];
            continue;
        }
        if (strncmp(a, "--config=", 9) == 0) { file = a + 9; continue; }
        if (strncmp(a, "--", 2) == 0) {
            if (strchr(a, '=') == NULL) { i++; }   /* skip the flag's value */
            continue;
        }
        if (file == NULL) { file = a; continue; }  /* one positional argument: the config file */
        set_err(err, errlen, "unexpected argument '%s' (see --help)", a);
        return -1;
    }
    if (file != NULL && load_file(c, file, err, errlen) != 0) { return -1; }
    /* Pass 2: every other --key value. */
    int positional_seen = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "--check-config") == 0) { continue; }
        if (strcmp(a, "--config") == 0 || strcmp(a, "-c") == 0) { i++; continue; }
        if (strncmp(a, "--config=", 9) == 0) { continue; }
        if (strncmp(a, "--", 2) != 0) {
            if (positional_seen++ == 0) { continue; }
            set_err(err, errlen, "unexpected argument '%s' (see --help)", a);
            return -1;
        }
        char key[128];
        const char *value;
        const char *eq = strchr(a + 2, '=');
        if (eq != NULL) {
            size_t kl = (size_t)(eq - (a + 2));
            if (kl >= sizeof key) { kl = sizeof key - 1; }
            memcpy(key, a + 2, kl);
            key[kl] = '\0';
            value = eq + 1;
        } else {
            snprintf(key, sizeof key, "%s", a + 2);
            int idx;
            if (find_key(key, &idx) == NULL) {
                set_err(err, errlen, "unknown option %s (see --help)", a);
                return -1;
            }
            if (i + 1 >= argc) { set_err(err, errlen, "%s needs a value", a); return -1; }
            value = argv[++i];
        }
        char kerr[512];
        if (config_set(c, key, value, kerr, sizeof kerr) != 0) {
            set_err(err, errlen, "--%s", kerr);
            return -1;
        }
    }
    return config_validate(c, err, errlen);
}

static const char *type_hint(const cfg_key_t *k)
{
    switch (k->type) {
    case CFG_BOOL: return "yes|no";
    case CFG_INT: return "N";
    case CFG_SIZE: return "SIZE";
    case CFG_DURATION: return "DURATION";
    case CFG_ENUM: return k->enum_words;
    case CFG_LEVELS: return "'SPEC'";
    default: return "TEXT";
    }
}

void config_print_help(FILE *out, const char *prog)
{
    fprintf(out,
            "Usage: %s [--config FILE] [--KEY VALUE ...]\n"
            "       %s --check-config [--config FILE] [--KEY VALUE ...]\n"
            "       %s --help | --version\n\n"
            "hourglass-broker %s: a RocketMQ-style delay broker speaking RESP (redis-cli works).\n\n"
            "Every key can be set in the INI file (key = value, at the top or under [broker])\n"
            "or as a flag --key value (or --key=value); flags win over the file.\n"
            "  --config FILE    read FILE (also the only positional argument)\n"
            "  --check-config   validate the configuration, print it, exit 0 (valid) or 1\n"
            "  --help           this text\n"
            "  --version        print the version\n\nKeys (default in brackets):\n",
            prog, prog, prog, HG_BROKER_VERSION);
    for (int i = 0; i < CFG_NKEYS; i++) {
        const cfg_key_t *k = &cfg_keys[i];
        char left[96];
        snprintf(left, sizeof left, "--%s %s", k->name, type_hint(k));
        fprintf(out, "  %-34s %s [%s]\n", left, k->help, k->default_text);
    }
    fprintf(out, "\nSIZE: bytes, or a number with kb, mb, gb. DURATION: a number with ms, s, m, h, d (\"0\" = zero).\n");
}

void config_print(const config_t *c, FILE *out)
{
    fprintf(out, "# hourglass-broker %s: effective configuration\n[broker]\n", HG_BROKER_VERSION);
    for (int i = 0; i < CFG_NKEYS; i++) {
        fprintf(out, "%s = %s\n", cfg_keys[i].name, config_key_value(c, i));
    }
}
