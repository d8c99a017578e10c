/*
 * common/cfg.c — the config-table engine's core (contract: cfg.h): a key
 * found by name, its value parsed into the program's struct (the value
 * grammars: numbers, sizes and durations, booleans, enums), where each key
 * was set (its origin: cfg_origin.c), the defaults, the required keys, a
 * value back as text. The INI file is cfg_ini.c, the command line
 * cfg_args.c, --help and --check-config's print cfg_print.c, SIGHUP
 * cfg_reload.c; what they share is common/cfg_internal.h.
 *
 * Defaults are text and go through the same parser as the file and the
 * flags, so the help, the sample files and the behaviour cannot disagree.
 * Sizes and durations are base/units.h's one grammar; booleans and enums
 * are word tables. Runs on the main thread before any other thread starts;
 * cfg_reload (SIGHUP) re-runs the program's own start-up parse into a fresh
 * struct, copies the .reload keys that differ and logs every difference.
 */
#include "common/cfg.h"
#include "common/cfg_internal.h"

#include "base/alloc.h"
#include "base/err.h"
#include "base/units.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

const cfg_key_t *cfg_find(const cfg_table_t *t, const char *name)
{
    for (size_t i = 0; i < t->count; i++)
        if (strcasecmp(t->keys[i].name, name) == 0)
            return &t->keys[i];
    return NULL;
}

/* Leading digits of s as a number into *v, the rest in *rest. Returns 0, or
 * -1 when s does not start with a digit or the number overflows. */
static int parse_digits(const char *s, long long *v, const char **rest)
{
    if (!isdigit((unsigned char)*s))
        return -1;
    long long n = 0;
    for (; isdigit((unsigned char)*s); s++) {
        if (n > (LLONG_MAX - (*s - '0')) / 10)
            return -1;
        n = n * 10 + (*s - '0');
    }
    *v = n;
    *rest = s;
    return 0;
}

static int parse_bool(const char *s, int *out)
{
    static const char *const words[][2] = { { "no", "yes" }, { "false", "true" }, { "off", "on" }, { "0", "1" } };
    for (size_t i = 0; i < sizeof words / sizeof words[0]; i++)
        for (int b = 0; b < 2; b++)
            if (strcasecmp(s, words[i][b]) == 0) {
                *out = b;
                return 0;
            }
    return -1;
}

/* Index of s in "a|b|c" (case-insensitive), or -1. */
static int enum_index(const char *words, const char *s)
{
    size_t sl = strlen(s);
    int idx = 0;
    for (const char *p = words; *p != '\0'; idx++) {
        const char *bar = strchr(p, '|');
        size_t wl = bar != NULL ? (size_t)(bar - p) : strlen(p);
        if (wl == sl && strncasecmp(p, s, wl) == 0)
            return idx;
        if (bar == NULL)
            break;
        p = bar + 1;
    }
    return -1;
}

/* Word idx of "a|b|c" into buf. */
static void enum_word(const char *words, int idx, char *buf, size_t len)
{
    const char *p = words;
    for (int i = 0; i < idx && p != NULL; i++) {
        p = strchr(p, '|');
        if (p != NULL)
            p++;
    }
    if (p == NULL) {
        snprintf(buf, len, "?");
        return;
    }
    const char *bar = strchr(p, '|');
    snprintf(buf, len, "%.*s", (int)(bar != NULL ? (size_t)(bar - p) : strlen(p)), p);
}

static void trim_copy(char *dst, size_t dstlen, const char *src)
{
    while (*src == ' ' || *src == '\t')
        src++;
    size_t n = strlen(src);
    while (n > 0 && (src[n - 1] == ' ' || src[n - 1] == '\t' || src[n - 1] == '\r' || src[n - 1] == '\n'))
        n--;
    if (n >= dstlen)
        n = dstlen - 1;
    memcpy(dst, src, n);
    dst[n] = '\0';
}

/* Parse a number of type k->type from value (sizes and durations in the
 * grammar of base/units.h). Returns 0 / -1 with err. */
static int parse_number(const cfg_key_t *k, const char *value, long long *num, char *err, size_t errlen)
{
    const char *rest;
    char why[200];
    uint64_t v;
    switch (k->type) {
    case CFG_INT:
        if (parse_digits(value, num, &rest) == 0 && *rest == '\0')
            return 0;
        return err_set(err, errlen, "%s: '%s' is not a whole number", k->name, value);
    case CFG_SIZE:
        if (units_parse_size(value, strlen(value), (uint64_t)LLONG_MAX, &v, why, sizeof why) != 0)
            return err_set(err, errlen, "%s: '%s' is not a size: %s", k->name, value, why);
        *num = (long long)v;
        return 0;
    default: /* CFG_DURATION */
        if (units_parse_duration_str(value, 0, &v, why, sizeof why) != 0)
            return err_set(err, errlen, "%s: '%s' is not a duration: %s", k->name, value, why);
        *num = (long long)v;
        return 0;
    }
}

int cfg_set_key(const cfg_table_t *t, void *conf, const cfg_key_t *k, const char *value_in, cfg_source_t source,
                char *err, size_t errlen)
{
    char value[CFG_MAX_VALUE];
    if (strlen(value_in) >= sizeof value) {
        err_set(err, errlen, "%s: value is too long", k->name);
        return -1;
    }
    trim_copy(value, sizeof value, value_in);
    if (k->hook != NULL && k->hook(conf, k, value, source, err, errlen) != 0)
        return -1;
    char *field = (char *)conf + k->offset;
    switch (k->type) {
    case CFG_CUSTOM:
        return 0; /* the hook stored it */
    case CFG_STRING: {
        if (t->strings_nonempty && value[0] == '\0') {
            err_set(err, errlen, "%s: empty value", k->name);
            return -1;
        }
        char **sp = (char **)field;
        free(*sp);
        *sp = xstrdup(value);
        return 0;
    }
    case CFG_BOOL:
        if (parse_bool(value, (int *)field) != 0) {
            err_set(err, errlen, "%s: '%s' is not yes or no", k->name, value);
            return -1;
        }
        return 0;
    case CFG_ENUM: {
        int e = enum_index(k->words, value);
        if (e < 0) {
            err_set(err, errlen, "%s: '%s' is not one of %s", k->name, value, k->words);
            return -1;
        }
        *(int *)field = e;
        return 0;
    }
    case CFG_DOUBLE: {
        char *end;
        errno = 0;
        double v = strtod(value, &end);
        if (value[0] == '\0' || *end != '\0' || errno != 0 || v != v) {
            err_set(err, errlen, "%s: '%s' is not a number", k->name, value);
            return -1;
        }
        if (v < (double)k->min || v > (double)k->max) {
            err_set(err, errlen, "%s: '%s' out of range %lld..%lld", k->name, value, k->min, k->max);
            return -1;
        }
        *(double *)field = v;
        return 0;
    }
    case CFG_INT:
    case CFG_SIZE:
    case CFG_DURATION: {
        long long num = 0;
        if (parse_number(k, value, &num, err, errlen) != 0)
            return -1;
        if (num < k->min || num > k->max) {
            char lo[48], hi[48];
            if (k->type == CFG_DURATION) {
                units_format_duration((uint64_t)k->min, lo, sizeof lo);
                units_format_duration((uint64_t)k->max, hi, sizeof hi);
            } else {
                snprintf(lo, sizeof lo, "%lld", k->min);
                snprintf(hi, sizeof hi, "%lld", k->max);
            }
            err_set(err, errlen, "%s: '%s' out of range %s..%s", k->name, value, lo, hi);
            return -1;
        }
        *(long long *)field = num; /* also an unsigned long long field's bytes: num >= 0 */
        return 0;
    }
    }
    return -1;
}

int cfg_set(const cfg_table_t *t, void *conf, const char *name, const char *value, cfg_source_t source, char *err,
            size_t errlen)
{
    const cfg_key_t *k = cfg_find(t, name);
    if (k == NULL) {
        err_set(err, errlen, "unknown key '%s' (see --help for the keys)", name);
        return -1;
    }
    if (cfg_set_key(t, conf, k, value, source, err, errlen) != 0)
        return -1;
    if (source != CFG_SOURCE_FILE) /* a file's line is noted by the reader */
        cfg_note_origin(t, conf, k, source == CFG_SOURCE_FLAG ? -1 : 0);
    return 0;
}

void cfg_init(const cfg_table_t *t, void *conf)
{
    if (t->track_origin && t->count > CFG_ORIGIN_KEYS) {
        fprintf(stderr, "%s: %zu keys, more than CFG_ORIGIN_KEYS\n", t->program, t->count);
        abort();
    }
    for (size_t i = 0; i < t->count; i++) {
        char err[256];
        if (t->keys[i].def != NULL &&
            cfg_set_key(t, conf, &t->keys[i], t->keys[i].def, CFG_SOURCE_DEFAULT, err, sizeof err) != 0) {
            fprintf(stderr, "%s: bad built-in default: %s\n", t->program, err);
            abort();
        }
    }
}

void cfg_free(const cfg_table_t *t, void *conf)
{
    for (size_t i = 0; i < t->count; i++)
        if (t->keys[i].type == CFG_STRING) {
            char **sp = (char **)((char *)conf + t->keys[i].offset);
            free(*sp);
            *sp = NULL;
        }
}

int cfg_check_required(const cfg_table_t *t, const void *conf, char *err, size_t errlen)
{
    for (size_t i = 0; i < t->count; i++) {
        const cfg_key_t *k = &t->keys[i];
        if (!k->required || k->type != CFG_STRING)
            continue;
        const char *v = *(char *const *)((const char *)conf + k->offset);
        if (v == NULL || v[0] == '\0') {
            err_set(err, errlen, "%s: required, not set", k->name);
            return -1;
        }
    }
    return 0;
}

void cfg_value_text(const cfg_table_t *t, const void *conf, size_t i, char *buf, size_t len)
{
    const cfg_key_t *k = &t->keys[i];
    const char *field = (const char *)conf + k->offset;
    switch (k->type) {
    case CFG_STRING: {
        const char *s = *(char *const *)field;
        snprintf(buf, len, "%s", s != NULL ? s : "");
        return;
    }
    case CFG_BOOL:
        snprintf(buf, len, "%s", *(const int *)field ? "yes" : "no");
        return;
    case CFG_ENUM:
        enum_word(k->words, *(const int *)field, buf, len);
        return;
    case CFG_INT:
        snprintf(buf, len, "%lld", *(const long long *)field);
        return;
    case CFG_SIZE:
        units_format_size((uint64_t) * (const long long *)field, buf, len);
        return;
    case CFG_DURATION:
        units_format_duration((uint64_t) * (const long long *)field, buf, len);
        return;
    case CFG_DOUBLE:
        snprintf(buf, len, "%g", *(const double *)field);
        return;
    case CFG_CUSTOM:
        break;
    }
    if (len > 0)
        buf[0] = '\0';
}

int cfg_bind_is_loopback(const char *addr)
{
    struct in_addr a4;
    struct in6_addr a6;
    if (addr == NULL)
        return 0;
    if (strcasecmp(addr, "localhost") == 0)
        return 1;
    if (inet_pton(AF_INET, addr, &a4) == 1)
        return (ntohl(a4.s_addr) >> 24) == 127;
    if (inet_pton(AF_INET6, addr, &a6) == 1)
        return IN6_IS_ADDR_LOOPBACK(&a6);
    return 0;
}
