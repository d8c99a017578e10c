/*
 * consumer/cli.c — hourglass-cli, the operator's tool: levels, groups, INFO,
 * send, and draining a dead-letter queue by hand.
 *
 *   hourglass-cli [--uri URI] [--json] [--timeout MS] COMMAND [ARGS]
 *
 * A client of the public libhourglass API only (<hourglass/hourglass.h>):
 * hg_send for `send`, hg_client_command for the rest. Commands live in one
 * table (name, handler, usage, help); `--help` output and dispatch come from
 * it. Output is an aligned table for people or, with --json, one JSON value
 * on stdout for scripts. Messages go to stderr.
 *
 * Exit codes (also in --help):
 *   0  success
 *   1  the broker answered an error (or something the cli cannot read),
 *      or the thing asked for does not exist (dlq show/requeue/drop ID)
 *   2  usage: bad command, option or URI
 *   3  cannot reach the broker: connect failed, connection lost, timed out
 *
 * Single-threaded; everything is freed before exit (valgrind-clean).
 */
#include <hourglass/hourglass.h>

#include "base/units.h"

#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define EXIT_BROKER 1
#define EXIT_USAGE 2
#define EXIT_CONNECT 3

#define CLI_DEFAULT_URI "hourglass://127.0.0.1:7379"
#define CLI_PAYLOAD_COLUMN 40   /* payload characters shown in dlq list */
#define CLI_MAX_ARGS 16

typedef struct cli {
    const char *uri;
    int json;
    uint32_t timeout_ms;
    hg_client_t *client;       /* opened on first use */
} cli_t;

typedef int (*command_fn)(cli_t *cli, int argc, char **argv);

typedef struct command {
    const char *name;          /* "dlq list" */
    command_fn fn;
    const char *usage;         /* after the name */
    const char *help;          /* one paragraph */
} command_t;

static const command_t *find_command(const char *name);
static void print_command_help(FILE *f, const command_t *cmd);

/* ------------------------------------------------------------------------
 * Messages and exit codes
 * ------------------------------------------------------------------------ */

static int usage_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int usage_error(const char *fmt, ...)
{
    va_list ap;
    fprintf(stderr, "hourglass-cli: ");
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fprintf(stderr, " (see hourglass-cli --help)\n");
    return EXIT_USAGE;
}

static int fail(int code, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int fail(int code, const char *fmt, ...)
{
    va_list ap;
    fprintf(stderr, "hourglass-cli: ");
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    return code;
}

/* The exit code for a library error. */
static int exit_code_for(hg_err_t e)
{
    switch (e) {
    case HG_OK: return 0;
    case HG_ERR_ARG: case HG_ERR_URI: case HG_ERR_UNSUPPORTED: return EXIT_USAGE;
    case HG_ERR_CONNECT: case HG_ERR_IO: case HG_ERR_TIMEOUT: case HG_ERR_STOPPED: return EXIT_CONNECT;
    default: return EXIT_BROKER;
    }
}

/* Report a failed library call on the open client; returns the exit code. */
static int client_failure(cli_t *cli, hg_err_t e)
{
    return fail(exit_code_for(e), "%s", hg_client_errmsg(cli->client));
}

/* ------------------------------------------------------------------------
 * Connection and commands
 * ------------------------------------------------------------------------ */

static int connect_cli(cli_t *cli)
{
    hg_client_opts_t opts;
    hg_error_t err;
    hg_err_t e;

    if (cli->client != NULL)
        return 0;
    hg_client_opts_init(&opts);
    opts.connect_timeout_ms = cli->timeout_ms;
    opts.read_timeout_ms = cli->timeout_ms;
    opts.reconnect_backoff.attempts = 1;  /* an operator wants an answer now */
    opts.resend_sends = 0;                /* `send` once, as typed */
    e = hg_client_open(cli->uri, &opts, &cli->client, &err);
    if (e != HG_OK)
        return fail(exit_code_for(e), "%s", err.message);
    return 0;
}

/* Run a command given as C strings; on success *reply is set. Returns 0 or
 * the exit code (the message printed). */
static int run(cli_t *cli, hg_reply_t **reply, int argc, const char *const *argv)
{
    hg_err_t e;
    int rc = connect_cli(cli);

    *reply = NULL;
    if (rc != 0)
        return rc;
    e = hg_client_command(cli->client, argc, argv, NULL, reply);
    if (e != HG_OK)
        return client_failure(cli, e);
    return 0;
}

static int unexpected(const char *cmd, const hg_reply_t *r)
{
    (void)r;
    return fail(EXIT_BROKER, "unexpected reply to %s from the broker", cmd);
}

/* ------------------------------------------------------------------------
 * Argument parsing: options (--name value, --name=value, flags) and
 * positionals, per command.
 * ------------------------------------------------------------------------ */

typedef struct opt_spec {
    const char *name;      /* "--count" */
    int takes_value;
    const char *value;     /* out: the value, or "" for a flag given */
} opt_spec_t;

/* Split argv[1..argc) into options (per specs, NULL-name terminated) and
 * positionals (at most maxpos, stored in pos[]). "--help" anywhere → the
 * command's help, exit 0 (returns -1 with *exit_code 0). Returns the number
 * of positionals, or -1 with *exit_code set. */
static int parse_args(const command_t *cmd, int argc, char **argv, opt_spec_t *specs,
                      char **pos, int maxpos, int *exit_code)
{
    int npos = 0;

    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
            print_command_help(stdout, cmd);
            *exit_code = 0;
            return -1;
        }
        if (strcmp(a, "--") == 0) {
            for (i++; i < argc; i++) {
                if (npos >= maxpos) {
                    *exit_code = usage_error("%s: unexpected argument '%s'", cmd->name, argv[i]);
                    return -1;
                }
                pos[npos++] = argv[i];
            }
            break;
        }
        if (a[0] == '-' && a[1] == '-' && a[2] != '\0') {
            const char *eq = strchr(a, '=');
            size_t n = eq != NULL ? (size_t)(eq - a) : strlen(a);
            opt_spec_t *s = specs;
            for (; s != NULL && s->name != NULL; s++)
                if (strlen(s->name) == n && strncmp(s->name, a, n) == 0)
                    break;
            if (s == NULL || s->name == NULL) {
                *exit_code = usage_error("%s: unknown option '%.*s'", cmd->name, (int)n, a);
                return -1;
            }
            if (s->value != NULL) {
                *exit_code = usage_error("%s: %s given twice", cmd->name, s->name);
                return -1;
            }
            if (!s->takes_value) {
                if (eq != NULL) {
                    *exit_code = usage_error("%s: %s takes no value", cmd->name, s->name);
                    return -1;
                }
                s->value = "";
            } else if (eq != NULL) {
                s->value = eq + 1;
            } else if (i + 1 < argc) {
                s->value = argv[++i];
            } else {
                *exit_code = usage_error("%s: %s needs a value", cmd->name, s->name);
                return -1;
            }
            continue;
        }
        if (npos >= maxpos) {
            *exit_code = usage_error("%s: unexpected argument '%s'", cmd->name, a);
            return -1;
        }
        pos[npos++] = argv[i];
    }
    return npos;
}

/* Parse a non-negative decimal integer. Returns 0 / -1. */
static int parse_u64(const char *s, uint64_t *out)
{
    char *end;
    unsigned long long v;

    if (s == NULL || !isdigit((unsigned char)s[0]))
        return -1;
    errno = 0;
    v = strtoull(s, &end, 10);
    if (errno != 0 || *end != '\0')
        return -1;
    *out = v;
    return 0;
}


/* A message id: 1..16 hex digits. Returns 0 / -1 and the value. */
static int parse_id(const char *s, uint64_t *out)
{
    uint64_t v = 0;
    size_t n = strlen(s);

    if (n == 0 || n > 16)
        return -1;
    for (size_t i = 0; i < n; i++) {
        int c = tolower((unsigned char)s[i]);
        if (!isxdigit(c))
            return -1;
        v = v * 16 + (uint64_t)(isdigit(c) ? c - '0' : c - 'a' + 10);
    }
    *out = v;
    return 0;
}

/* ------------------------------------------------------------------------
 * Output: text escaping, JSON, time, tables
 * ------------------------------------------------------------------------ */

/* Length of the valid UTF-8 sequence at s[0..n), or 0 when invalid. */
static size_t utf8_len(const unsigned char *s, size_t n)
{
    size_t len;
    uint32_t cp;

    if (s[0] < 0x80)
        return 1;
    if ((s[0] & 0xE0) == 0xC0) { len = 2; cp = s[0] & 0x1F; }
    else if ((s[0] & 0xF0) == 0xE0) { len = 3; cp = s[0] & 0x0F; }
    else if ((s[0] & 0xF8) == 0xF0) { len = 4; cp = s[0] & 0x07; }
    else return 0;
    if (n < len)
        return 0;
    for (size_t i = 1; i < len; i++) {
        if ((s[i] & 0xC0) != 0x80)
            return 0;
        cp = (cp << 6) | (s[i] & 0x3F);
    }
    if ((len == 2 && cp < 0x80) || (len == 3 && cp < 0x800) || (len == 4 && cp < 0x10000) ||
        cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF))
        return 0;
    return len;
}

/* A JSON string. Valid UTF-8 passes through; control characters are
 * escaped; a byte that is not UTF-8 becomes \u00XX (its Latin-1 reading). */
static void json_string(FILE *f, const char *s, size_t n)
{
    const unsigned char *p = (const unsigned char *)s;

    fputc('"', f);
    for (size_t i = 0; i < n;) {
        unsigned char c = p[i];
        size_t len;
        if (c == '"' || c == '\\') {
            fputc('\\', f);
            fputc(c, f);
            i++;
        } else if (c == '\n') { fputs("\\n", f); i++; }
        else if (c == '\r') { fputs("\\r", f); i++; }
        else if (c == '\t') { fputs("\\t", f); i++; }
        else if (c < 0x20 || c == 0x7f) { fprintf(f, "\\u%04x", c); i++; }
        else if ((len = utf8_len(p + i, n - i)) == 0) { fprintf(f, "\\u%04x", c); i++; }
        else { fwrite(p + i, 1, len, f); i += len; }
    }
    fputc('"', f);
}

/* Text for a terminal: printable ASCII and valid UTF-8 as is, the rest as
 * \n, \t, \xHH. Appends to buf (NUL-terminated, truncated with "…" when
 * longer than max_chars characters; max_chars 0 = no limit). */
static char *display_text(const char *s, size_t n, size_t max_chars)
{
    size_t cap = n * 4 + 8, out = 0, chars = 0;
    char *buf = malloc(cap);
    const unsigned char *p = (const unsigned char *)s;

    if (buf == NULL) {
        fprintf(stderr, "hourglass-cli: out of memory\n");
        abort();
    }
    for (size_t i = 0; i < n;) {
        size_t len;
        if (max_chars > 0 && chars >= max_chars) {
            memcpy(buf + out, "\xe2\x80\xa6", 3); /* … */
            out += 3;
            break;
        }
        if (p[i] == '\n') { memcpy(buf + out, "\\n", 2); out += 2; i++; }
        else if (p[i] == '\t') { memcpy(buf + out, "\\t", 2); out += 2; i++; }
        else if (p[i] == '\\') { memcpy(buf + out, "\\\\", 2); out += 2; i++; }
        else if (p[i] < 0x20 || p[i] == 0x7f || (len = utf8_len(p + i, n - i)) == 0) {
            out += (size_t)snprintf(buf + out, cap - out, "\\x%02x", p[i]);
            i++;
        } else {
            memcpy(buf + out, p + i, len);
            out += len;
            i += len;
        }
        chars++;
    }
    buf[out] = '\0';
    return buf;
}

/* Wall-clock ms as "2024-05-01 12:00:00Z"; 0 as "-". */
static void format_time(uint64_t ms, char *buf, size_t len)
{
    time_t t = (time_t)(ms / 1000);
    struct tm tm;

    if (ms == 0) {
        snprintf(buf, len, "-");
        return;
    }
    gmtime_r(&t, &tm);
    strftime(buf, len, "%Y-%m-%d %H:%M:%SZ", &tm);
}


/* An aligned table: cells fill rows left to right (row 0 is the header);
 * columns flagged in right[] are right-aligned. The table owns its cells. */
typedef struct table {
    int ncols;
    size_t ncells, cap;
    char **cells;
    int right[CLI_MAX_ARGS];
} table_t;

static char *xstrdup(const char *s)
{
    char *d = strdup(s);
    if (d == NULL) {
        fprintf(stderr, "hourglass-cli: out of memory\n");
        abort();
    }
    return d;
}

/* Add a cell; takes ownership of s. */
static void table_add_owned(table_t *t, char *s)
{
    if (t->ncells == t->cap) {
        t->cap = t->cap ? t->cap * 2 : 64;
        t->cells = realloc(t->cells, t->cap * sizeof(char *));
        if (t->cells == NULL) {
            fprintf(stderr, "hourglass-cli: out of memory\n");
            abort();
        }
    }
    t->cells[t->ncells++] = s;
}

static void table_init(table_t *t, int ncols, const char *const *header, const int *right)
{
    memset(t, 0, sizeof(*t));
    t->ncols = ncols;
    for (int i = 0; i < ncols; i++) {
        t->right[i] = right != NULL ? right[i] : 0;
        table_add_owned(t, xstrdup(header[i]));
    }
}

static void table_add(table_t *t, const char *s)
{
    table_add_owned(t, xstrdup(s));
}

static void table_addf(table_t *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void table_addf(table_t *t, const char *fmt, ...)
{
    char buf[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof(buf), fmt, ap);
    va_end(ap);
    table_add(t, buf);
}

/* Display width of a UTF-8 string (code points; good enough for tables). */
static size_t text_width(const char *s)
{
    size_t w = 0;
    for (; *s; s++)
        if (((unsigned char)*s & 0xC0) != 0x80)
            w++;
    return w;
}

static void table_print(table_t *t, FILE *f)
{
    size_t width[CLI_MAX_ARGS] = { 0 }, ncols = (size_t)t->ncols;

    for (size_t i = 0; i < t->ncells; i++) {
        size_t w = text_width(t->cells[i]);
        if (w > width[i % ncols])
            width[i % ncols] = w;
    }
    for (size_t i = 0; i < t->ncells; i++) {
        size_t c = i % ncols, pad = width[c] - text_width(t->cells[i]);
        int last = c + 1 == ncols || i + 1 == t->ncells;
        if (t->right[c])
            fprintf(f, "%*s%s", (int)pad, "", t->cells[i]);
        else if (!last)
            fprintf(f, "%s%*s", t->cells[i], (int)pad, "");
        else
            fputs(t->cells[i], f);
        fputs(last ? "\n" : "  ", f);
    }
}

static void table_free(table_t *t)
{
    for (size_t i = 0; i < t->ncells; i++)
        free(t->cells[i]);
    free(t->cells);
}

/* Reply helpers. */
static int is_int(const hg_reply_t *r)
{
    return r != NULL && hg_reply_type(r) == HG_REPLY_INTEGER;
}

static int is_str(const hg_reply_t *r)
{
    hg_reply_type_t t;
    if (r == NULL)
        return 0;
    t = hg_reply_type(r);
    return t == HG_REPLY_STRING || t == HG_REPLY_STATUS || t == HG_REPLY_VERBATIM;
}

static int is_aggregate(const hg_reply_t *r)
{
    hg_reply_type_t t;
    if (r == NULL)
        return 0;
    t = hg_reply_type(r);
    return t == HG_REPLY_ARRAY || t == HG_REPLY_MAP || t == HG_REPLY_SET;
}

/* Any reply as JSON (for generic values such as GROUP LIST fields). */
static void json_reply(FILE *f, const hg_reply_t *r)
{
    size_t len;
    const char *s;

    switch (hg_reply_type(r)) {
    case HG_REPLY_INTEGER:
        fprintf(f, "%lld", hg_reply_integer(r));
        break;
    case HG_REPLY_BOOL:
        fputs(hg_reply_integer(r) ? "true" : "false", f);
        break;
    case HG_REPLY_NIL:
        fputs("null", f);
        break;
    case HG_REPLY_ARRAY: case HG_REPLY_SET: case HG_REPLY_PUSH: case HG_REPLY_MAP:
        fputc('[', f);
        for (size_t i = 0; i < hg_reply_count(r); i++) {
            if (i > 0)
                fputc(',', f);
            json_reply(f, hg_reply_element(r, i));
        }
        fputc(']', f);
        break;
    default:
        s = hg_reply_str(r, &len);
        json_string(f, s != NULL ? s : "", s != NULL ? len : 0);
        break;
    }
}

/* ------------------------------------------------------------------------
 * Commands
 * ------------------------------------------------------------------------ */

static int cmd_ping(cli_t *cli, int argc, char **argv)
{
    const char *cmdv[1] = { "PING" };
    char *pos[1];
    hg_reply_t *r;
    int rc = 0, n = parse_args(find_command("ping"), argc, argv, NULL, pos, 0, &rc);

    if (n < 0)
        return rc;
    if ((rc = run(cli, &r, 1, cmdv)) != 0)
        return rc;
    if (cli->json)
        printf("{\"pong\":true,\"address\":\"%s\"}\n", hg_client_address(cli->client));
    else
        printf("PONG from %s\n", hg_client_address(cli->client));
    hg_reply_free(r);
    return 0;
}

static int cmd_levels(cli_t *cli, int argc, char **argv)
{
    static const char *const header[4] = { "LEVEL", "DELAY", "DEPTH", "NEXT DUE" };
    static const int right[4] = { 1, 1, 1, 0 };
    const char *cmdv[1] = { "LEVELS" };
    char *pos[1], buf[64];
    hg_reply_t *r;
    table_t t;
    int rc = 0, n = parse_args(find_command("levels"), argc, argv, NULL, pos, 0, &rc);

    if (n < 0)
        return rc;
    if ((rc = run(cli, &r, 1, cmdv)) != 0)
        return rc;
    if (hg_reply_type(r) != HG_REPLY_ARRAY) {
        hg_reply_free(r);
        return unexpected("LEVELS", NULL);
    }
    for (size_t i = 0; i < hg_reply_count(r); i++) {
        const hg_reply_t *row = hg_reply_element(r, i);
        if (hg_reply_count(row) < 4)
            continue;
        for (size_t k = 0; k < 4; k++)
            if (!is_int(hg_reply_element(row, k))) {
                hg_reply_free(r);
                return unexpected("LEVELS", NULL);
            }
    }
    if (cli->json) {
        fputc('[', stdout);
        for (size_t i = 0; i < hg_reply_count(r); i++) {
            const hg_reply_t *row = hg_reply_element(r, i);
            if (hg_reply_count(row) < 4)
                continue;
            units_format_duration((uint64_t)hg_reply_integer(hg_reply_element(row, 1)), buf, sizeof(buf));
            printf("%s{\"level\":%lld,\"delay_ms\":%lld,\"delay\":\"%s\",\"depth\":%lld,\"next_due_ms\":%lld}",
                   i > 0 ? "," : "", hg_reply_integer(hg_reply_element(row, 0)),
                   hg_reply_integer(hg_reply_element(row, 1)), buf,
                   hg_reply_integer(hg_reply_element(row, 2)),
                   hg_reply_integer(hg_reply_element(row, 3)));
        }
        fputs("]\n", stdout);
    } else {
        table_init(&t, 4, header, right);
        for (size_t i = 0; i < hg_reply_count(r); i++) {
            const hg_reply_t *row = hg_reply_element(r, i);
            if (hg_reply_count(row) < 4)
                continue;
            table_addf(&t, "%lld", hg_reply_integer(hg_reply_element(row, 0)));
            units_format_duration((uint64_t)hg_reply_integer(hg_reply_element(row, 1)), buf, sizeof(buf));
            table_add(&t, buf);
            table_addf(&t, "%lld", hg_reply_integer(hg_reply_element(row, 2)));
            format_time((uint64_t)hg_reply_integer(hg_reply_element(row, 3)), buf, sizeof(buf));
            table_add(&t, buf);
        }
        table_print(&t, stdout);
        table_free(&t);
    }
    hg_reply_free(r);
    return 0;
}

/* One field of a GROUP LIST entry (a flat list of name/value pairs). */
static const hg_reply_t *pair_value(const hg_reply_t *entry, const char *name)
{
    for (size_t i = 0; i + 1 < hg_reply_count(entry); i += 2) {
        size_t len;
        const char *k = hg_reply_str(hg_reply_element(entry, i), &len);
        if (k != NULL && len == strlen(name) && memcmp(k, name, len) == 0)
            return hg_reply_element(entry, i + 1);
    }
    return NULL;
}

static int cmd_groups(cli_t *cli, int argc, char **argv)
{
    /* Columns in the order of GROUP LIST (docs/broker.md); a field the
     * broker does not send shows as "-". */
    static const char *const fields[] = { "group", "topic", "ready", "backlog", "retry-ready",
                                          "retry-delayed", "inflight", "dlq", "max-reconsume",
                                          "created-ms" };
    static const char *const header[] = { "GROUP", "TOPIC", "READY", "BACKLOG", "RETRY-READY",
                                          "RETRY-DELAYED", "INFLIGHT", "DLQ", "MAXRETRY",
                                          "CREATED" };
    static const int right[] = { 0, 0, 1, 1, 1, 1, 1, 1, 1, 0 };
    const int nf = (int)(sizeof(fields) / sizeof(fields[0]));
    const char *cmdv[2] = { "GROUP", "LIST" };
    char *pos[1], buf[64];
    hg_reply_t *r;
    table_t t;
    int rc = 0, n = parse_args(find_command("groups"), argc, argv, NULL, pos, 0, &rc);

    if (n < 0)
        return rc;
    if ((rc = run(cli, &r, 2, cmdv)) != 0)
        return rc;
    if (!is_aggregate(r)) {
        hg_reply_free(r);
        return unexpected("GROUP LIST", NULL);
    }
    if (cli->json) {
        fputc('[', stdout);
        for (size_t i = 0; i < hg_reply_count(r); i++) {
            const hg_reply_t *entry = hg_reply_element(r, i);
            fputs(i > 0 ? ",{" : "{", stdout);
            for (size_t k = 0; k + 1 < hg_reply_count(entry); k += 2) {
                size_t len;
                const char *key = hg_reply_str(hg_reply_element(entry, k), &len);
                if (k > 0)
                    fputc(',', stdout);
                json_string(stdout, key != NULL ? key : "", key != NULL ? len : 0);
                fputc(':', stdout);
                json_reply(stdout, hg_reply_element(entry, k + 1));
            }
            fputc('}', stdout);
        }
        fputs("]\n", stdout);
    } else {
        table_init(&t, nf, header, right);
        for (size_t i = 0; i < hg_reply_count(r); i++) {
            const hg_reply_t *entry = hg_reply_element(r, i);
            for (int k = 0; k < nf; k++) {
                const hg_reply_t *v = pair_value(entry, fields[k]);
                if (v == NULL) {
                    table_add(&t, "-");
                } else if (is_int(v) && strcmp(fields[k], "created-ms") == 0) {
                    format_time((uint64_t)hg_reply_integer(v), buf, sizeof(buf));
                    table_add(&t, buf);
                } else if (is_int(v)) {
                    table_addf(&t, "%lld", hg_reply_integer(v));
                } else {
                    size_t len;
                    const char *s = hg_reply_str(v, &len);
                    table_add_owned(&t, display_text(s != NULL ? s : "", s != NULL ? len : 0, 0));
                }
            }
        }
        if (hg_reply_count(r) == 0)
            printf("no consumer groups\n");
        else
            table_print(&t, stdout);
        table_free(&t);
    }
    hg_reply_free(r);
    return 0;
}

/* Print INFO text ("# Section\r\nkey:value\r\n") as JSON: an object of
 * sections, each an object of fields; integer values become numbers. */
static void info_json(const char *s, size_t n)
{
    int open_section = 0, first_field = 1, first_section = 1;
    size_t i = 0;

    fputc('{', stdout);
    while (i < n) {
        size_t end = i, len;
        while (end < n && s[end] != '\n')
            end++;
        len = end - i;
        if (len > 0 && s[i + len - 1] == '\r')
            len--;
        if (len > 2 && s[i] == '#' && s[i + 1] == ' ') {
            if (open_section)
                fputc('}', stdout);
            if (!first_section)
                fputc(',', stdout);
            first_section = 0;
            json_string(stdout, s + i + 2, len - 2);
            fputs(":{", stdout);
            open_section = 1;
            first_field = 1;
        } else if (len > 0 && open_section) {
            const char *colon = memchr(s + i, ':', len);
            if (colon != NULL) {
                size_t klen = (size_t)(colon - (s + i)), vlen = len - klen - 1;
                int numeric = vlen > 0 && vlen < 19;
                for (size_t k = 0; k < vlen && numeric; k++)
                    numeric = isdigit((unsigned char)colon[1 + k]) || (k == 0 && colon[1] == '-' && vlen > 1);
                if (numeric && vlen > 1 && (colon[1] == '0' || (colon[1] == '-' && colon[2] == '0')))
                    numeric = 0; /* leading zeros: keep the text */
                if (!first_field)
                    fputc(',', stdout);
                first_field = 0;
                json_string(stdout, s + i, klen);
                fputc(':', stdout);
                if (numeric)
                    fwrite(colon + 1, 1, vlen, stdout);
                else
                    json_string(stdout, colon + 1, vlen);
            }
        }
        i = end + 1;
    }
    if (open_section)
        fputc('}', stdout);
    fputs("}\n", stdout);
}

static int cmd_info(cli_t *cli, int argc, char **argv)
{
    const char *cmdv[2] = { "INFO", NULL };
    char *pos[1];
    hg_reply_t *r;
    const char *s;
    size_t len;
    int rc = 0, n = parse_args(find_command("info"), argc, argv, NULL, pos, 1, &rc);

    if (n < 0)
        return rc;
    if (n == 1)
        cmdv[1] = pos[0];
    if ((rc = run(cli, &r, n == 1 ? 2 : 1, cmdv)) != 0)
        return rc;
    if (!is_str(r)) {
        hg_reply_free(r);
        return unexpected("INFO", NULL);
    }
    s = hg_reply_str(r, &len);
    if (cli->json) {
        info_json(s, len);
    } else {
        for (size_t i = 0; i < len; i++)
            if (s[i] != '\r')
                fputc(s[i], stdout);
        if (len > 0 && s[len - 1] != '\n')
            fputc('\n', stdout);
    }
    hg_reply_free(r);
    return 0;
}

static int cmd_send(cli_t *cli, int argc, char **argv)
{
    opt_spec_t specs[] = { { "--key", 1, NULL }, { "--level", 1, NULL }, { "--delay", 1, NULL },
                           { "--at", 1, NULL }, { NULL, 0, NULL } };
    const command_t *cmd = find_command("send");
    char *pos[2], id[HG_ID_MAX];
    hg_delay_t delay = hg_delay_none();
    uint64_t v;
    hg_err_t e;
    int rc = 0, given = 0, n = parse_args(cmd, argc, argv, specs, pos, 2, &rc);

    if (n < 0)
        return rc;
    if (n < 2)
        return usage_error("send: needs TOPIC and PAYLOAD");
    for (int i = 1; i <= 3; i++)
        given += specs[i].value != NULL;
    if (given > 1)
        return usage_error("send: only one of --level, --delay and --at may be given");
    if (specs[1].value != NULL) {
        if (parse_u64(specs[1].value, &v) < 0 || v > 64)
            return usage_error("send: --level '%s' is not a level number 0..64", specs[1].value);
        delay = hg_delay_level((int)v);
    } else if (specs[2].value != NULL) {
        char why[200];
        if (units_parse_duration_str(specs[2].value, UNITS_BARE_MS, &v, why, sizeof why) < 0)
            return usage_error("send: --delay '%s' is not a duration: %s", specs[2].value, why);
        delay = hg_delay_ms(v);
    } else if (specs[3].value != NULL) {
        if (parse_u64(specs[3].value, &v) < 0)
            return usage_error("send: --at '%s' is not a Unix time in milliseconds", specs[3].value);
        delay = hg_delay_at(v);
    }
    if ((rc = connect_cli(cli)) != 0)
        return rc;
    e = hg_send(cli->client, pos[0], specs[0].value, pos[1], strlen(pos[1]), delay, id);
    if (e != HG_OK)
        return client_failure(cli, e);
    if (cli->json)
        printf("{\"id\":\"%s\"}\n", id);
    else
        printf("%s\n", id);
    return 0;
}

/* The fields of one DLQ LIST entry [id, key, payload, reconsume, reason, parked_ms]. */
typedef struct dlq_entry {
    const char *id, *key, *payload, *reason;
    size_t id_len, key_len, payload_len, reason_len;
    long long reconsume, parked_ms;
} dlq_entry_t;

static int dlq_entry(const hg_reply_t *e, dlq_entry_t *d)
{
    if (hg_reply_count(e) < 6)
        return -1;
    for (size_t i = 0; i < 6; i++) {
        const hg_reply_t *x = hg_reply_element(e, i);
        if ((i == 3 || i == 5) ? !is_int(x) : !is_str(x))
            return -1;
    }
    d->id = hg_reply_str(hg_reply_element(e, 0), &d->id_len);
    d->key = hg_reply_str(hg_reply_element(e, 1), &d->key_len);
    d->payload = hg_reply_str(hg_reply_element(e, 2), &d->payload_len);
    d->reconsume = hg_reply_integer(hg_reply_element(e, 3));
    d->reason = hg_reply_str(hg_reply_element(e, 4), &d->reason_len);
    d->parked_ms = hg_reply_integer(hg_reply_element(e, 5));
    return 0;
}

static void dlq_json(const dlq_entry_t *d)
{
    fputs("{\"id\":", stdout);
    json_string(stdout, d->id, d->id_len);
    fputs(",\"key\":", stdout);
    json_string(stdout, d->key, d->key_len);
    fputs(",\"payload\":", stdout);
    json_string(stdout, d->payload, d->payload_len);
    printf(",\"reconsume\":%lld,\"reason\":", d->reconsume);
    json_string(stdout, d->reason, d->reason_len);
    printf(",\"parked_ms\":%lld}", d->parked_ms);
}

/* DLQ LIST group [COUNT n] [AFTER id]; *reply is the array. */
static int dlq_list_reply(cli_t *cli, const char *group, const char *count, const char *after,
                          hg_reply_t **reply)
{
    const char *cmdv[7] = { "DLQ", "LIST", group };
    int argc = 3, rc;

    if (count != NULL) {
        cmdv[argc++] = "COUNT";
        cmdv[argc++] = count;
    }
    if (after != NULL) {
        cmdv[argc++] = "AFTER";
        cmdv[argc++] = after;
    }
    if ((rc = run(cli, reply, argc, cmdv)) != 0)
        return rc;
    if (hg_reply_type(*reply) != HG_REPLY_ARRAY) {
        hg_reply_free(*reply);
        *reply = NULL;
        return unexpected("DLQ LIST", NULL);
    }
    for (size_t i = 0; i < hg_reply_count(*reply); i++) {
        dlq_entry_t d;
        if (dlq_entry(hg_reply_element(*reply, i), &d) < 0) {
            hg_reply_free(*reply);
            *reply = NULL;
            return unexpected("DLQ LIST", NULL);
        }
    }
    return 0;
}

static int cmd_dlq_list(cli_t *cli, int argc, char **argv)
{
    static const char *const header[6] = { "ID", "KEY", "RECONSUME", "PARKED", "REASON", "PAYLOAD" };
    static const int right[6] = { 0, 0, 1, 0, 0, 0 };
    opt_spec_t specs[] = { { "--count", 1, NULL }, { "--after", 1, NULL }, { NULL, 0, NULL } };
    char *pos[1], buf[64];
    uint64_t v;
    hg_reply_t *r;
    table_t t;
    int rc = 0, n = parse_args(find_command("dlq list"), argc, argv, specs, pos, 1, &rc);

    if (n < 0)
        return rc;
    if (n < 1)
        return usage_error("dlq list: needs GROUP");
    if (specs[0].value != NULL && (parse_u64(specs[0].value, &v) < 0 || v == 0))
        return usage_error("dlq list: --count '%s' is not a positive number", specs[0].value);
    if (specs[1].value != NULL && parse_id(specs[1].value, &v) < 0)
        return usage_error("dlq list: --after '%s' is not a message id (1..16 hex digits)", specs[1].value);
    if ((rc = dlq_list_reply(cli, pos[0], specs[0].value, specs[1].value, &r)) != 0)
        return rc;
    if (cli->json) {
        fputc('[', stdout);
        for (size_t i = 0; i < hg_reply_count(r); i++) {
            dlq_entry_t d;
            dlq_entry(hg_reply_element(r, i), &d);
            if (i > 0)
                fputc(',', stdout);
            dlq_json(&d);
        }
        fputs("]\n", stdout);
    } else if (hg_reply_count(r) == 0) {
        printf("the DLQ of group %s is empty%s\n", pos[0], specs[1].value != NULL ? " after that id" : "");
    } else {
        table_init(&t, 6, header, right);
        for (size_t i = 0; i < hg_reply_count(r); i++) {
            dlq_entry_t d;
            dlq_entry(hg_reply_element(r, i), &d);
            table_add_owned(&t, display_text(d.id, d.id_len, 0));
            table_add_owned(&t, display_text(d.key, d.key_len, 24));
            table_addf(&t, "%lld", d.reconsume);
            format_time((uint64_t)d.parked_ms, buf, sizeof(buf));
            table_add(&t, buf);
            table_add_owned(&t, display_text(d.reason, d.reason_len, 48));
            table_add_owned(&t, display_text(d.payload, d.payload_len, CLI_PAYLOAD_COLUMN));
        }
        table_print(&t, stdout);
        table_free(&t);
    }
    hg_reply_free(r);
    return 0;
}

static int cmd_dlq_show(cli_t *cli, int argc, char **argv)
{
    char *pos[2], after[24], buf[64], *text;
    const hg_reply_t *found = NULL;
    hg_reply_t *r;
    uint64_t id;
    dlq_entry_t d;
    int rc = 0, n = parse_args(find_command("dlq show"), argc, argv, NULL, pos, 2, &rc);

    if (n < 0)
        return rc;
    if (n < 2)
        return usage_error("dlq show: needs GROUP and ID");
    if (parse_id(pos[1], &id) < 0)
        return usage_error("dlq show: '%s' is not a message id (1..16 hex digits)", pos[1]);
    /* There is no "DLQ GET": list one entry after the id's predecessor. */
    snprintf(after, sizeof(after), "%016" PRIx64, id - 1);
    if ((rc = dlq_list_reply(cli, pos[0], "1", id > 0 ? after : NULL, &r)) != 0)
        return rc;
    if (hg_reply_count(r) == 1) {
        uint64_t got;
        dlq_entry(hg_reply_element(r, 0), &d);
        text = display_text(d.id, d.id_len, 0);
        if (parse_id(text, &got) == 0 && got == id)
            found = hg_reply_element(r, 0);
        free(text);
    }
    if (found == NULL) {
        hg_reply_free(r);
        return fail(EXIT_BROKER, "no message %s in the DLQ of group %s", pos[1], pos[0]);
    }
    if (cli->json) {
        dlq_json(&d);
        fputc('\n', stdout);
    } else {
        printf("id:        %.*s\n", (int)d.id_len, d.id);
        text = display_text(d.key, d.key_len, 0);
        printf("key:       %s\n", text);
        free(text);
        printf("reconsume: %lld\n", d.reconsume);
        format_time((uint64_t)d.parked_ms, buf, sizeof(buf));
        printf("parked:    %s (%lld)\n", buf, d.parked_ms);
        text = display_text(d.reason, d.reason_len, 0);
        printf("reason:    %s\n", text);
        free(text);
        text = display_text(d.payload, d.payload_len, 0);
        printf("payload:   %s\n", text);
        free(text);
    }
    hg_reply_free(r);
    return 0;
}

/* dlq requeue / dlq drop: DLQ <verb> group id|ALL → integer. */
static int dlq_move(cli_t *cli, const char *name, const char *verb, const char *done,
                    int argc, char **argv)
{
    opt_spec_t specs[] = { { "--all", 0, NULL }, { NULL, 0, NULL } };
    const char *cmdv[4] = { "DLQ", verb, NULL, NULL };
    char *pos[2];
    uint64_t id;
    hg_reply_t *r;
    long long moved;
    int rc = 0, n = parse_args(find_command(name), argc, argv, specs, pos, 2, &rc);

    if (n < 0)
        return rc;
    if (n < 1)
        return usage_error("%s: needs GROUP", name);
    if ((n == 2) == (specs[0].value != NULL))
        return usage_error("%s: give either one message ID or --all", name);
    if (n == 2 && parse_id(pos[1], &id) < 0)
        return usage_error("%s: '%s' is not a message id (1..16 hex digits)", name, pos[1]);
    cmdv[2] = pos[0];
    cmdv[3] = n == 2 ? pos[1] : "ALL";
    if ((rc = run(cli, &r, 4, cmdv)) != 0)
        return rc;
    if (!is_int(r)) {
        hg_reply_free(r);
        return unexpected(name, NULL);
    }
    moved = hg_reply_integer(r);
    hg_reply_free(r);
    if (cli->json)
        printf("{\"%s\":%lld}\n", done, moved);
    else if (n == 2 && moved > 0)
        printf("%s %s\n", done, pos[1]);
    else if (n != 2)
        printf("%s %lld message%s\n", done, moved, moved == 1 ? "" : "s");
    if (n == 2 && moved == 0)
        return fail(EXIT_BROKER, "no message %s in the DLQ of group %s", pos[1], pos[0]);
    return 0;
}

static int cmd_dlq_requeue(cli_t *cli, int argc, char **argv)
{
    return dlq_move(cli, "dlq requeue", "REQUEUE", "requeued", argc, argv);
}

static int cmd_dlq_drop(cli_t *cli, int argc, char **argv)
{
    return dlq_move(cli, "dlq drop", "DROP", "dropped", argc, argv);
}

/* ------------------------------------------------------------------------
 * The command table and help
 * ------------------------------------------------------------------------ */

static int cmd_dlq(cli_t *cli, int argc, char **argv);

static const command_t commands[] = {
    { "ping", cmd_ping, "",
      "Check that the broker answers." },
    { "levels", cmd_levels, "",
      "The delay levels: number, delay, messages waiting (depth) and when the head is due." },
    { "groups", cmd_groups, "",
      "The consumer groups: topic, ready/backlog/retry/in-flight/DLQ counts, max retries." },
    { "info", cmd_info, "[SECTION]",
      "The broker's INFO text (sections: server clients levels groups storage stats). "
      "With --json: an object of sections, each an object of fields." },
    { "send", cmd_send, "TOPIC PAYLOAD [--key K] [--level N | --delay D | --at MS]",
      "Send one message and print its id. --level N: exactly level N (0 = now). "
      "--delay D: a duration (1500 = ms, or 500ms 30s 25m 2h 1d), reached by chaining levels. "
      "--at MS: an absolute Unix time in milliseconds. Without any: deliver now." },
    { "dlq", cmd_dlq, "(list|show|requeue|drop) ...",
      "Inspect and drain a group's dead-letter queue. See `hourglass-cli dlq SUBCOMMAND --help`." },
    { "dlq list", cmd_dlq_list, "GROUP [--count N] [--after ID]",
      "List parked messages in id order: id, key, failures, when parked, the last failure "
      "reason, the payload (shortened; see dlq show). --count: at most N (default 100); "
      "--after ID: page on from the last id shown." },
    { "dlq show", cmd_dlq_show, "GROUP ID",
      "Show one parked message in full. Exit 1 when it is not in the DLQ." },
    { "dlq requeue", cmd_dlq_requeue, "GROUP (ID | --all)",
      "Move one message (or all) back to the group's retry-ready queue with its failure count "
      "reset; consumers get it at once. Exit 1 when the ID is not in the DLQ." },
    { "dlq drop", cmd_dlq_drop, "GROUP (ID | --all)",
      "Delete one parked message (or all) for good. Exit 1 when the ID is not in the DLQ." },
};

#define NCOMMANDS (sizeof(commands) / sizeof(commands[0]))

static const command_t *find_command(const char *name)
{
    for (size_t i = 0; i < NCOMMANDS; i++)
        if (strcmp(commands[i].name, name) == 0)
            return &commands[i];
    return NULL;
}

/* Print text word-wrapped at 78 columns, every line indented by indent. */
static void print_wrapped(FILE *f, int indent, const char *text)
{
    const int width = 78;
    int col = 0;

    while (*text != '\0') {
        size_t word = strcspn(text, " ");
        if (col > 0 && col + 1 + (int)word > width) {
            fputc('\n', f);
            col = 0;
        }
        if (col == 0) {
            fprintf(f, "%*s", indent, "");
            col = indent;
        } else {
            fputc(' ', f);
            col++;
        }
        fwrite(text, 1, word, f);
        col += (int)word;
        text += word;
        while (*text == ' ')
            text++;
    }
    fputc('\n', f);
}

static void print_command_help(FILE *f, const command_t *cmd)
{
    fprintf(f, "usage: hourglass-cli [--uri URI] [--json] %s%s%s\n\n", cmd->name,
            cmd->usage[0] ? " " : "", cmd->usage);
    print_wrapped(f, 0, cmd->help);
}

static void print_help(FILE *f)
{
    fprintf(f,
            "usage: hourglass-cli [--uri URI] [--json] [--timeout MS] COMMAND [ARGS]\n"
            "\n"
            "Administer an Hourglass broker and drain dead-letter queues by hand.\n"
            "\n"
            "Options:\n"
            "  --uri URI      broker to talk to: hourglass://[user:pass@]host[:port]\n"
            "                 (default: $HOURGLASS_URI, else " CLI_DEFAULT_URI ")\n"
            "  --json         print one JSON value for scripts instead of tables\n"
            "  --timeout MS   connect and reply timeout in milliseconds (default 5000)\n"
            "  --help         this text; COMMAND --help describes one command\n"
            "  --version      print the version\n"
            "\n"
            "Commands:\n");
    for (size_t i = 0; i < NCOMMANDS; i++)
        if (strcmp(commands[i].name, "dlq") != 0)
            fprintf(f, "  %s%s%s\n", commands[i].name, commands[i].usage[0] ? " " : "", commands[i].usage);
    fprintf(f,
            "\n"
            "Exit status:\n"
            "  0  success\n"
            "  1  the broker answered an error, or the message asked for is not there\n"
            "  2  usage error: unknown command or option, bad argument or URI\n"
            "  3  cannot reach the broker: connection refused, lost or timed out\n");
}

static int cmd_dlq(cli_t *cli, int argc, char **argv)
{
    char name[32];
    const command_t *sub;

    if (argc < 2 || strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0) {
        FILE *f = argc < 2 ? stderr : stdout;
        fprintf(f, "usage: hourglass-cli [--uri URI] [--json] dlq SUBCOMMAND ...\n\n");
        for (size_t i = 0; i < NCOMMANDS; i++)
            if (strncmp(commands[i].name, "dlq ", 4) == 0)
            {
                fprintf(f, "  %s %s\n", commands[i].name, commands[i].usage);
                print_wrapped(f, 6, commands[i].help);
            }
        return argc < 2 ? EXIT_USAGE : 0;
    }
    snprintf(name, sizeof(name), "dlq %s", argv[1]);
    sub = find_command(name);
    if (sub == NULL)
        return usage_error("unknown dlq subcommand '%s' (list, show, requeue, drop)", argv[1]);
    return sub->fn(cli, argc - 1, argv + 1);
}

int main(int argc, char **argv)
{
    cli_t cli;
    const command_t *cmd;
    const char *env = getenv("HOURGLASS_URI");
    int i, rc;

    memset(&cli, 0, sizeof(cli));
    cli.uri = env != NULL && env[0] != '\0' ? env : CLI_DEFAULT_URI;
    cli.timeout_ms = 5000;

    for (i = 1; i < argc && argv[i][0] == '-'; i++) {
        const char *a = argv[i], *value = NULL;
        size_t n = strcspn(a, "=");
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
            print_help(stdout);
            return 0;
        }
        if (strcmp(a, "--version") == 0) {
            printf("hourglass-cli %s\n", HG_VERSION_STRING);
            return 0;
        }
        if (strcmp(a, "--json") == 0) {
            cli.json = 1;
            continue;
        }
        if ((n == 5 && strncmp(a, "--uri", 5) == 0) || (n == 9 && strncmp(a, "--timeout", 9) == 0)) {
            if (a[n] == '=')
                value = a + n + 1;
            else if (i + 1 < argc)
                value = argv[++i];
            else
                return usage_error("%.*s needs a value", (int)n, a);
            if (n == 5) {
                cli.uri = value;
            } else {
                uint64_t v;
                if (parse_u64(value, &v) < 0 || v == 0 || v > 86400000)
                    return usage_error("--timeout '%s' is not a number of milliseconds 1..86400000", value);
                cli.timeout_ms = (uint32_t)v;
            }
            continue;
        }
        return usage_error("unknown option '%s'", a);
    }
    if (i >= argc) {
        print_help(stderr);
        return EXIT_USAGE;
    }
    cmd = find_command(argv[i]);
    if (cmd == NULL || strchr(argv[i], ' ') != NULL)
        return usage_error("unknown command '%s'", argv[i]);
    rc = cmd->fn(&cli, argc - i, argv + i);
    hg_client_close(cli.client);
    if (fflush(stdout) != 0 && rc == 0)
        rc = fail(EXIT_BROKER, "writing the output: %s", strerror(errno));
    return rc;
}
