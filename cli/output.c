/*
 * cli/output.c — hourglass-cli's output (contract: output.h): text made safe
 * for a terminal, JSON strings and values, times, aligned tables.
 *
 * Text in a reply is the broker's (or a producer's) bytes: valid UTF-8 and
 * printable ASCII are shown as they are, everything else escaped, so a
 * payload can never move the cursor or ring the bell. "Everything else"
 * includes the C1 controls U+0080..U+009F, which are valid UTF-8 but which
 * xterm and VTE obey as controls (U+009B is CSI: "\xc2\x9b2J" clears the
 * screen), and the bidirectional overrides and isolates (U+202A..U+202E,
 * U+2066..U+2069), which reorder what is shown. Out of memory aborts
 * (base/alloc.h). Single-threaded.
 */
#include "cli/output.h"

#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/alloc.h"
#include "base/buf.h"
#include "base/json.h"

/* A JSON string (base/json.h's escaping, shared with the order view and
 * the console). */
void out_json_string(FILE *f, const char *s, size_t n)
{
    buf_t b = BUF_INIT;

    json_escape(&b, s, n);
    fwrite(b.data, 1, b.len, f);
    buf_free(&b);
}

/* 1 when the UTF-8 sequence p[0..len) is a character a terminal obeys
 * rather than shows: a C1 control or a bidirectional override / isolate. */
static int utf8_control(const unsigned char *p, size_t len)
{
    if (len == 2)
        return p[0] == 0xc2 && p[1] <= 0x9f; /* U+0080..U+009F */
    if (len == 3 && p[0] == 0xe2 && p[1] == 0x80)
        return p[2] >= 0xaa && p[2] <= 0xae; /* U+202A..U+202E */
    if (len == 3 && p[0] == 0xe2 && p[1] == 0x81)
        return p[2] >= 0xa6 && p[2] <= 0xa9; /* U+2066..U+2069 */
    return 0;
}

/* Text for a terminal: printable ASCII and valid UTF-8 as is, the rest (C0,
 * DEL, C1 controls, bidi overrides, invalid bytes) as \n, \t, \xHH.
 * Appends to buf (NUL-terminated, truncated with "…" when longer than
 * max_chars characters; max_chars 0 = no limit). */
char *out_text(const char *s, size_t n, size_t max_chars)
{
    size_t cap = n * 4 + 8, out = 0, chars = 0;
    char *buf = xmalloc(cap);
    const unsigned char *p = (const unsigned char *)s;

    for (size_t i = 0; i < n;) {
        size_t len;
        if (max_chars > 0 && chars >= max_chars) {
            memcpy(buf + out, "\xe2\x80\xa6", 3); /* … */
            out += 3;
            break;
        }
        if (p[i] == '\n') {
            memcpy(buf + out, "\\n", 2);
            out += 2;
            i++;
        } else if (p[i] == '\t') {
            memcpy(buf + out, "\\t", 2);
            out += 2;
            i++;
        } else if (p[i] == '\\') {
            memcpy(buf + out, "\\\\", 2);
            out += 2;
            i++;
        } else if (p[i] < 0x20 || p[i] == 0x7f || (len = json_utf8_len(p + i, n - i)) == 0) {
            out += (size_t)snprintf(buf + out, cap - out, "\\x%02x", p[i]);
            i++;
        } else if (utf8_control(p + i, len)) {
            for (size_t k = 0; k < len; k++)
                out += (size_t)snprintf(buf + out, cap - out, "\\x%02x", p[i + k]);
            i += len;
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
void out_time(uint64_t ms, char *buf, size_t len)
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

/* Add a cell; takes ownership of s. */
void table_add_owned(table_t *t, char *s)
{
    if (t->ncells == t->cap) {
        t->cap = t->cap ? t->cap * 2 : 64;
        t->cells = xrealloc(t->cells, t->cap * sizeof(char *));
    }
    t->cells[t->ncells++] = s;
}

void table_init(table_t *t, int ncols, const char *const *header, const int *right)
{
    memset(t, 0, sizeof(*t));
    t->ncols = ncols;
    for (int i = 0; i < ncols; i++) {
        t->right[i] = right != NULL ? right[i] : 0;
        table_add_owned(t, xstrdup(header[i]));
    }
}

void table_add(table_t *t, const char *s)
{
    table_add_owned(t, xstrdup(s));
}

void table_addf(table_t *t, const char *fmt, ...)
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

void table_print(table_t *t, FILE *f)
{
    size_t width[CLI_MAX_COLUMNS] = { 0 }, ncols = (size_t)t->ncols;

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

void table_free(table_t *t)
{
    for (size_t i = 0; i < t->ncells; i++)
        free(t->cells[i]);
    free(t->cells);
}

/* Reply helpers. */
int reply_is_int(const hg_reply_t *r)
{
    return r != NULL && hg_reply_type(r) == HG_REPLY_INTEGER;
}

int reply_is_str(const hg_reply_t *r)
{
    hg_reply_type_t t;
    if (r == NULL)
        return 0;
    t = hg_reply_type(r);
    return t == HG_REPLY_STRING || t == HG_REPLY_STATUS || t == HG_REPLY_VERBATIM;
}

int reply_is_aggregate(const hg_reply_t *r)
{
    hg_reply_type_t t;
    if (r == NULL)
        return 0;
    t = hg_reply_type(r);
    return t == HG_REPLY_ARRAY || t == HG_REPLY_MAP || t == HG_REPLY_SET;
}

/* Any reply as JSON (for generic values such as GROUP LIST fields). */
void out_json_reply(FILE *f, const hg_reply_t *r)
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
    case HG_REPLY_ARRAY:
    case HG_REPLY_SET:
    case HG_REPLY_PUSH:
    case HG_REPLY_MAP:
        fputc('[', f);
        for (size_t i = 0; i < hg_reply_count(r); i++) {
            if (i > 0)
                fputc(',', f);
            out_json_reply(f, hg_reply_element(r, i));
        }
        fputc(']', f);
        break;
    default:
        s = hg_reply_str(r, &len);
        out_json_string(f, s != NULL ? s : "", s != NULL ? len : 0);
        break;
    }
}
