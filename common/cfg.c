/*
 * common/cfg.c — the config-table engine (contract: cfg.h).
 *
 * Defaults are text and go through the same parser as the file and the
 * flags, so the help, the sample files and the behaviour cannot disagree.
 * Sizes and durations are base/units.h's one grammar; booleans and enums
 * are word tables. Runs on the main thread before any other thread starts;
 * cfg_reload (SIGHUP) re-runs the program's own start-up parse into a fresh
 * struct, copies the .reload keys that differ and logs every difference.
 */
#include "common/cfg.h"

#include "base/alloc.h"
#include "base/err.h"
#include "base/units.h"
#include "common/log.h"
#include "common/uri_password.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <ini.h>

#define CFG_MAX_VALUE 4096 /* longest value, and our INI line buffer (libinih's own limit is smaller) */
#define CFG_MAX_NAME  64   /* longest key name */

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

static int set_key(const cfg_table_t *t, void *conf, const cfg_key_t *k, const char *value_in, cfg_source_t source,
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

/* The origins of conf, or NULL when the table tracks none. */
static cfg_origin_t *origins(const cfg_table_t *t, const void *conf)
{
    return t->track_origin ? (cfg_origin_t *)((char *)conf + t->origin_offset) : NULL;
}

/* Key k was set from line (> 0: of the file; -1: a flag; 0: its default). */
static void note_origin(const cfg_table_t *t, void *conf, const cfg_key_t *k, int line)
{
    cfg_origin_t *o = origins(t, conf);
    size_t i = (size_t)(k - t->keys);
    if (o != NULL && i < CFG_ORIGIN_KEYS)
        o->line[i] = line;
}

int cfg_set(const cfg_table_t *t, void *conf, const char *name, const char *value, cfg_source_t source, char *err,
            size_t errlen)
{
    const cfg_key_t *k = cfg_find(t, name);
    if (k == NULL) {
        err_set(err, errlen, "unknown key '%s' (see --help for the keys)", name);
        return -1;
    }
    if (set_key(t, conf, k, value, source, err, errlen) != 0)
        return -1;
    if (source != CFG_SOURCE_FILE) /* a file's line is noted by the reader */
        note_origin(t, conf, k, source == CFG_SOURCE_FLAG ? -1 : 0);
    return 0;
}

const char *cfg_origin_text(const cfg_table_t *t, const void *conf, const char *name, char *buf, size_t len)
{
    const cfg_key_t *k = cfg_find(t, name);
    const cfg_origin_t *o = origins(t, conf);
    size_t i = k != NULL ? (size_t)(k - t->keys) : 0;
    if (len > 0)
        buf[0] = '\0';
    if (k == NULL || o == NULL || i >= CFG_ORIGIN_KEYS)
        return buf;
    if (o->line[i] > 0)
        snprintf(buf, len, "%s:%d", o->file, o->line[i]);
    else if (o->line[i] < 0)
        snprintf(buf, len, "--%s", k->name);
    else
        snprintf(buf, len, "default");
    return buf;
}

/* How late key name was set, for cfg_origin_prefix: a flag after any line. */
static long origin_rank(const cfg_table_t *t, const void *conf, const char *name)
{
    const cfg_key_t *k = cfg_find(t, name);
    const cfg_origin_t *o = origins(t, conf);
    if (k == NULL || o == NULL || (size_t)(k - t->keys) >= CFG_ORIGIN_KEYS)
        return 0;
    int line = o->line[k - t->keys];
    return line < 0 ? 1L << 30 : line;
}

void cfg_origin_prefix(const cfg_table_t *t, const void *conf, const char *key_a, const char *key_b, char *err,
                       size_t errlen)
{
    long ra = origin_rank(t, conf, key_a), rb = key_b != NULL ? origin_rank(t, conf, key_b) : 0;
    if (errlen == 0 || (ra == 0 && rb == 0))
        return;
    const char *last = ra >= rb ? key_a : key_b, *other = ra >= rb ? key_b : key_a;
    char where_last[600], where_other[600], text[1024];
    cfg_origin_text(t, conf, last, where_last, sizeof where_last);
    snprintf(text, sizeof text, "%s", err);
    int flag = (ra >= rb ? ra : rb) == 1L << 30;
    if (other == NULL) {
        if (!flag) /* a flag's error names the key already */
            snprintf(err, errlen, "%s: %s", where_last, text);
        return;
    }
    cfg_origin_text(t, conf, other, where_other, sizeof where_other);
    long r_other = ra >= rb ? rb : ra;
    if (!flag && r_other > 0) /* the same file: its line is enough */
        snprintf(where_other, sizeof where_other, "line %ld", r_other);
    if (flag)
        snprintf(err, errlen, "%s (%s: %s; %s: %s)", text, last, where_last, other, where_other);
    else
        snprintf(err, errlen, "%s: %s (%s: %s)", where_last, text, other, where_other);
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
            set_key(t, conf, &t->keys[i], t->keys[i].def, CFG_SOURCE_DEFAULT, err, sizeof err) != 0) {
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

/* ---- the INI file ---------------------------------------------------------
 * libinih reads lines of at most INI_MAX_LINE bytes and silently splits
 * longer ones, so our reader refuses them with an error that says what to do:
 * continue a long value on indented lines, which libinih hands to the handler
 * as the same key again; the reader's `indented` flag tells such a
 * continuation from a repeated key (a CFG_CUSTOM key may repeat). */

typedef struct ini_state {
    const cfg_table_t *t;
    void *conf;
    FILE *file;
    const char *path;
    int line;                        /* of the line last read */
    int indented;                    /* it started with a blank */
    char pending_name[CFG_MAX_NAME]; /* the key being collected ("" when none) */
    int pending_line;
    char *pending_value;
    int *set_line;   /* per key of the table: the line that set it, 0 when none yet */
    char error[512]; /* the first error, "" when none */
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
    char buf[CFG_MAX_VALUE];
    size_t len = 0;
    int c = EOF;
    if (st->error[0] != '\0')
        return NULL;
    /* byte by byte, not fgets: a NUL byte would end the line for strlen and
     * drop the rest of it without a word */
    while (len < sizeof buf - 1 && (c = getc(st->file)) != EOF) {
        buf[len++] = (char)c;
        if (c == '\n')
            break;
    }
    if (len == 0)
        return NULL;
    buf[len] = '\0';
    st->line++;
    if (memchr(buf, '\0', len) != NULL) {
        ini_error(st, "%s:%d: a NUL byte in the line (not a text file?)", st->path, st->line);
        return NULL;
    }
    if (len >= (size_t)num) {
        ini_error(st,
                  "%s:%d: line longer than %d bytes (libinih's limit): continue a long value on the next "
                  "line, indented",
                  st->path, st->line, num - 2);
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
    const cfg_key_t *k = cfg_find(st->t, st->pending_name);
    char err[512];
    /* A key set twice in one file: which line the reader meant is a guess
     * (one edited, the other in force); only a CFG_CUSTOM key repeats. */
    int *first = k != NULL ? &st->set_line[k - st->t->keys] : NULL;
    if (k == NULL)
        ini_error(st, "%s:%d: unknown key '%s' (see --help for the keys)", st->path, st->pending_line,
                  st->pending_name);
    else if (k->type != CFG_CUSTOM && *first != 0)
        ini_error(st, "%s:%d: %s is set again (first at line %d): a key may be set once in a file", st->path,
                  st->pending_line, k->name, *first);
    else if (set_key(st->t, st->conf, k, st->pending_value, CFG_SOURCE_FILE, err, sizeof err) != 0)
        ini_error(st, "%s:%d: %s", st->path, st->pending_line, err);
    else
        note_origin(st->t, st->conf, k, st->pending_line);
    if (first != NULL && *first == 0)
        *first = st->pending_line;
    st->pending_name[0] = '\0';
    free(st->pending_value);
    st->pending_value = NULL;
}

static int section_known(const cfg_table_t *t, const char *section)
{
    if (section[0] == '\0')
        return 1;
    for (const char *const *s = t->sections; s != NULL && *s != NULL; s++)
        if (strcasecmp(section, *s) == 0)
            return 1;
    return 0;
}

static int ini_line(void *user, const char *section, const char *name, const char *value)
{
    ini_state_t *st = user;
    if (!section_known(st->t, section)) {
        char list[256] = "";
        for (const char *const *s = st->t->sections; s != NULL && *s != NULL; s++)
            snprintf(list + strlen(list), sizeof list - strlen(list), "%s%s", list[0] ? ", " : "", *s);
        ini_error(st, "%s:%d: unknown section [%s] (sections: %s)", st->path, st->line, section, list);
        return 0;
    }
    if (st->indented && st->pending_name[0] != '\0' && strcmp(name, st->pending_name) == 0) {
        /* libinih hands a continuation line over whole, where a key's own line
         * loses its inline comment (a ';' after a blank): cut it here too, or
         * the joined value holds " ;…", which no line --check-config prints
         * can say (it reads back as a comment) */
        size_t b = cfg_inline_comment_at(value, strlen(value));
        while (b > 0 && isspace((unsigned char)value[b - 1]))
            b--;
        size_t a = strlen(st->pending_value);
        char *joined = malloc(a + b + 2);
        if (joined == NULL)
            abort();
        memcpy(joined, st->pending_value, a);
        joined[a] = ' ';
        memcpy(joined + a + 1, value, b);
        joined[a + 1 + b] = '\0';
        free(st->pending_value);
        st->pending_value = joined;
        return 1;
    }
    ini_flush(st);
    if (name[0] == '\0') { /* "= value": without this, a line read and dropped (and its value never freed) */
        ini_error(st, "%s:%d: a value with no key name (want key = value)", st->path, st->line);
        return 0;
    }
    if (strlen(name) >= sizeof st->pending_name) {
        ini_error(st, "%s:%d: unknown key '%.40s…'", st->path, st->line, name);
        return 0;
    }
    snprintf(st->pending_name, sizeof st->pending_name, "%s", name);
    st->pending_line = st->line;
    st->pending_value = xstrdup(value);
    return 1;
}

int cfg_load_file(const cfg_table_t *t, void *conf, const char *path, char *err, size_t errlen)
{
    ini_state_t st = { .t = t, .conf = conf, .path = path };
    st.file = fopen(path, "r");
    if (st.file == NULL) {
        err_set(err, errlen, "config: cannot open %s: %s", path, strerror(errno));
        return -1;
    }
    st.set_line = xcalloc(t->count > 0 ? t->count : 1, sizeof *st.set_line);
    if (origins(t, conf) != NULL)
        snprintf(origins(t, conf)->file, sizeof origins(t, conf)->file, "%s", path);
    int rc = ini_parse_stream(ini_read_line, &st, ini_line, &st);
    ini_flush(&st);
    fclose(st.file);
    free(st.set_line);
    if (st.error[0] == '\0' && rc > 0)
        ini_error(&st, "%s:%d: not a 'key = value' line, a [section] or a comment", path, rc);
    if (st.error[0] == '\0' && rc < 0)
        ini_error(&st, "%s: cannot read", path);
    free(st.pending_value);
    if (st.error[0] != '\0') {
        err_set(err, errlen, "%s", st.error);
        return -1;
    }
    return 0;
}

/* ---- the command line ------------------------------------------------------ */

/* Index of arg in t->switches, or -1. */
static int switch_index(const cfg_table_t *t, const char *arg)
{
    for (int i = 0; t->switches != NULL && t->switches[i] != NULL; i++)
        if (strcmp(arg, t->switches[i]) == 0)
            return i;
    return -1;
}

static int is_config_flag(const char *a)
{
    return strcmp(a, "-c") == 0 || strcmp(a, "--config") == 0;
}

int cfg_parse_args(const cfg_table_t *t, void *conf, int argc, char **argv, cfg_args_t *out, char *err, size_t errlen)
{
    memset(out, 0, sizeof *out);
    /* Pass 1: the actions and --config, so the file is applied before any flag. */
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
            out->action = CFG_HELP;
            return 0;
        }
        if (strcmp(a, "--help-markdown") == 0) {
            cfg_print_markdown(t, stdout);
            fflush(stdout);
            exit(ferror(stdout) ? 1 : 0);
        }
        if (strcmp(a, "-V") == 0 || strcmp(a, "-v") == 0 || strcmp(a, "--version") == 0) {
            out->action = CFG_VERSION;
            return 0;
        }
        if (strcmp(a, "--check-config") == 0) {
            out->action = CFG_CHECK;
        } else if (is_config_flag(a)) {
            if (i + 1 >= argc) {
                err_set(err, errlen, "%s needs a file name", a);
                return -1;
            }
            out->config_path = argv[++i];
        } else if (strncmp(a, "--config=", 9) == 0) {
            out->config_path = a + 9;
        } else if (switch_index(t, a) >= 0) {
            out->switches |= 1u << switch_index(t, a);
        } else if (strncmp(a, "--", 2) == 0) {
            if (strchr(a, '=') == NULL)
                i++; /* skip the flag's value */
        } else if (t->positional_config && out->config_path == NULL) {
            out->config_path = a;
        } else {
            err_set(err, errlen, "unexpected argument '%s' (see --help)", a);
            return -1;
        }
    }
    if (out->config_path != NULL && cfg_load_file(t, conf, out->config_path, err, errlen) != 0)
        return -1;
    /* Pass 2: every --key value / --key=value, over the file. */
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "--check-config") == 0 || strncmp(a, "--config=", 9) == 0 || switch_index(t, a) >= 0)
            continue;
        if (is_config_flag(a)) {
            i++;
            continue;
        }
        if (strncmp(a, "--", 2) != 0)
            continue; /* the positional config file (pass 1 refused any other) */
        char name[CFG_MAX_NAME];
        const char *eq = strchr(a + 2, '=');
        size_t len = eq != NULL ? (size_t)(eq - a - 2) : strlen(a + 2);
        const cfg_key_t *k = NULL;
        if (len < sizeof name) {
            memcpy(name, a + 2, len);
            name[len] = '\0';
            k = cfg_find(t, name);
        }
        if (k == NULL) {
            err_set(err, errlen, "unknown option '%s' (see --help)", a);
            return -1;
        }
        const char *value;
        if (eq != NULL) {
            value = eq + 1;
        } else if (i + 1 < argc) {
            value = argv[++i];
        } else {
            err_set(err, errlen, "--%s needs a value", name);
            return -1;
        }
        if (set_key(t, conf, k, value, CFG_SOURCE_FLAG, err, errlen) != 0)
            return -1;
        note_origin(t, conf, k, -1);
    }
    return 0;
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

/* ---- help and the effective values ----------------------------------------- */

static const char *type_hint(const cfg_key_t *k)
{
    static const char *const hints[] = {
        [CFG_STRING] = "TEXT",       [CFG_BOOL] = "yes|no",   [CFG_INT] = "N",   [CFG_SIZE] = "SIZE",
        [CFG_DURATION] = "DURATION", [CFG_DOUBLE] = "NUMBER", [CFG_ENUM] = NULL, [CFG_CUSTOM] = "TEXT",
    };
    if (k->hint != NULL)
        return k->hint;
    return k->type == CFG_ENUM ? k->words : hints[k->type];
}

void cfg_print_keys(const cfg_table_t *t, FILE *out)
{
    for (size_t i = 0; i < t->count; i++) {
        const cfg_key_t *k = &t->keys[i];
        const char *def = k->shown_default != NULL ? k->shown_default : k->def;
        char left[96];
        snprintf(left, sizeof left, "--%s %s", k->name, type_hint(k));
        fprintf(out, "  %-34s %s%s%s%s%s\n", left, k->help, k->reload ? " (reloaded on SIGHUP)" : "",
                def != NULL ? " [" : "", def != NULL ? def : "", def != NULL ? "]" : "");
    }
    int sizes = 0, durations = 0;
    for (size_t i = 0; i < t->count; i++) {
        sizes |= t->keys[i].type == CFG_SIZE && t->keys[i].hint == NULL;
        durations |= t->keys[i].type == CFG_DURATION && t->keys[i].hint == NULL;
    }
    if (sizes || durations)
        fprintf(out, "\n%s%s%s\n", sizes ? "SIZE: bytes, or a number with kb, mb, gb." : "",
                sizes && durations ? " " : "",
                durations ? "DURATION: a number with ms, s, m, h, d (\"0\" = zero)." : "");
}

/* s into out for a Markdown table cell: '|' escaped, as code when code. */
static void md_cell(FILE *out, const char *s, int code)
{
    fputs(code ? "`" : "", out);
    for (; *s != '\0'; s++) {
        if (*s == '|')
            fputs("\\|", out);
        else
            fputc(*s, out);
    }
    fputs(code ? "`" : "", out);
}

void cfg_print_markdown(const cfg_table_t *t, FILE *out)
{
    fprintf(out, "| key | value | default | meaning |\n| --- | --- | --- | --- |\n");
    for (size_t i = 0; i < t->count; i++) {
        const cfg_key_t *k = &t->keys[i];
        const char *def = k->shown_default != NULL ? k->shown_default : k->def;
        fputs("| ", out);
        md_cell(out, k->name, 1);
        fputs(" | ", out);
        md_cell(out, type_hint(k), 0);
        fputs(" | ", out);
        if (def == NULL)
            fputs("(unset)", out);
        else if (def[0] == '\0')
            fputs("(empty)", out);
        else
            md_cell(out, def, k->shown_default == NULL);
        fputs(" | ", out);
        md_cell(out, k->help, 0);
        fputs(k->reload ? " (reloaded on SIGHUP)" : "", out);
        fputs(" |\n", out);
    }
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

/* A key that must read back as not set, as a comment line naming it. */
static void print_absent(FILE *out, const char *name, const char *why)
{
    fprintf(out, "; %s = (%s)\n", name, why);
}

/* A URI key's value v (CFG_MAX_VALUE bytes) in place without the password
 * of its user:password@, after a comment saying so when it had one. */
static void take_out_uri_password(FILE *out, const char *name, char *v)
{
    char bare[CFG_MAX_VALUE]; /* as large as v: what is left always fits */
    if (uri_password_strip(v, bare, sizeof bare) != 1)
        return;
    fprintf(out, "; %s: its password is not shown (give it in password-file, or put it back)\n", name);
    memcpy(v, bare, strlen(bare) + 1);
}

int cfg_print_values(const cfg_table_t *t, const void *conf, FILE *out)
{
    int unprintable = 0;
    for (size_t i = 0; i < t->count; i++) {
        const cfg_key_t *k = &t->keys[i];
        if (k->type == CFG_CUSTOM) {
            if (k->print != NULL)
                unprintable += k->print(conf, k, out);
            continue;
        }
        if (k->type == CFG_STRING && *(char *const *)((const char *)conf + k->offset) == NULL) {
            print_absent(out, k->name, "not set");
            continue;
        }
        if (k->secret == CFG_SECRET_VALUE) {
            print_absent(out, k->name, "set, not shown");
            continue;
        }
        char v[CFG_MAX_VALUE];
        cfg_value_text(t, conf, i, v, sizeof v);
        if (k->secret == CFG_SECRET_URI)
            take_out_uri_password(out, k->name, v);
        if (cfg_print_setting(out, k->name, v) != 0)
            unprintable++;
    }
    return unprintable;
}

int cfg_print_check(const cfg_table_t *t, const void *conf, const char *version, const char *section,
                    const char *config_path, FILE *out, FILE *err)
{
    fprintf(out, "# %s %s: effective configuration\n", t->program, version);
    if (section != NULL)
        fprintf(out, "[%s]\n", section);
    int unprintable = cfg_print_values(t, conf, out);
    if (config_path != NULL)
        fprintf(out, "; %s: configuration OK (%s)\n", t->program, config_path);
    else
        fprintf(out, "; %s: configuration OK\n", t->program);
    if (unprintable > 0) {
        fflush(out); /* the comments it points at come first */
        fprintf(err, "%s: %d value%s cannot be printed so that %s back; see the comments\n", t->program, unprintable,
                unprintable == 1 ? "" : "s", unprintable == 1 ? "it reads" : "they read");
    }
    return unprintable;
}

/* ---- SIGHUP ------------------------------------------------------------------ */

/* The bytes of key k's field. */
static size_t field_size(const cfg_key_t *k)
{
    switch (k->type) {
    case CFG_STRING:
        return sizeof(char *);
    case CFG_BOOL:
    case CFG_ENUM:
        return sizeof(int);
    case CFG_DOUBLE:
        return sizeof(double);
    case CFG_INT:
    case CFG_SIZE:
    case CFG_DURATION:
        return sizeof(long long);
    case CFG_CUSTOM:
        break;
    }
    return 0;
}

/* Swap key k's field between a and b. */
static void swap_field(const cfg_key_t *k, void *a, void *b)
{
    unsigned char tmp[16];
    _Static_assert(sizeof(long long) <= 16 && sizeof(double) <= 16 && sizeof(char *) <= 16, "tmp");
    size_t n = field_size(k);
    memcpy(tmp, (char *)a + k->offset, n);
    memcpy((char *)a + k->offset, (char *)b + k->offset, n);
    memcpy((char *)b + k->offset, tmp, n);
}

int cfg_reload(const cfg_table_t *t, void *running, const cfg_reload_ops_t *ops)
{
    char err[1024];
    if (log_reopen(err, sizeof err) != 0) /* logrotate moved the file away: a new one by the same path */
        log_error("SIGHUP: %s (still logging to the old file)", err);
    void *fresh = xcalloc(1, ops->size);
    if (ops->load(fresh, ops->arg, err, sizeof err) != 0) {
        log_error("SIGHUP: configuration error, keeping the running configuration: %s", err);
        ops->release(fresh);
        free(fresh);
        return -1;
    }
    /* Pass 1: swap the reloadable keys that differ (fresh then holds the old values). */
    unsigned char *swapped = xcalloc(t->count ? t->count : 1, 1);
    int applied = 0, differ = 0;
    char was[CFG_MAX_VALUE], now[CFG_MAX_VALUE];
    for (size_t i = 0; i < t->count; i++) {
        const cfg_key_t *k = &t->keys[i];
        if (k->type == CFG_CUSTOM)
            continue;
        cfg_value_text(t, running, i, was, sizeof was);
        cfg_value_text(t, fresh, i, now, sizeof now);
        if (strcmp(was, now) == 0)
            continue;
        differ++;
        if (!k->reload) {
            /* No values: this key may be a password. */
            log_warn("SIGHUP: %s changed, but takes effect only at a restart (keeping the running value)", k->name);
            continue;
        }
        swap_field(k, running, fresh);
        swapped[i] = 1;
        applied++;
    }
    log_level_t before = log_get_level();
    if (applied > 0 && ops->apply != NULL)
        ops->apply(running, ops->arg);
    log_level_t after = log_get_level();
    /* Pass 2: say what changed, at the more verbose of the two levels. */
    log_set_level(before < after ? before : after);
    for (size_t i = 0; i < t->count; i++) {
        if (!swapped[i])
            continue;
        cfg_value_text(t, fresh, i, was, sizeof was);
        cfg_value_text(t, running, i, now, sizeof now);
        /* An empty value said as such: "dedup-topics  -> order-timeout" read as a typo */
        log_info("SIGHUP: %s %s -> %s", t->keys[i].name, was[0] ? was : "(unset)", now[0] ? now : "(unset)");
    }
    if (differ == 0)
        log_info("SIGHUP: configuration re-read, nothing changed");
    log_set_level(after);
    free(swapped);
    ops->release(fresh);
    free(fresh);
    return applied;
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
