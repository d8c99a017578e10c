/*
 * base/json.c — the JSON writer (contract: json.h). Pure apart from the
 * buffer it appends to; one thread per json_t.
 */
#include "base/json.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

size_t json_utf8_len(const unsigned char *s, size_t n)
{
    size_t len;
    uint32_t cp;

    if (n == 0)
        return 0;
    if (s[0] < 0x80)
        return 1;
    if ((s[0] & 0xE0) == 0xC0) {
        len = 2;
        cp = s[0] & 0x1F;
    } else if ((s[0] & 0xF0) == 0xE0) {
        len = 3;
        cp = s[0] & 0x0F;
    } else if ((s[0] & 0xF8) == 0xF0) {
        len = 4;
        cp = s[0] & 0x07;
    } else
        return 0;
    if (n < len)
        return 0;
    for (size_t i = 1; i < len; i++) {
        if ((s[i] & 0xC0) != 0x80)
            return 0;
        cp = (cp << 6) | (s[i] & 0x3F);
    }
    if ((len == 2 && cp < 0x80) || (len == 3 && cp < 0x800) || (len == 4 && cp < 0x10000) || cp > 0x10FFFF ||
        (cp >= 0xD800 && cp <= 0xDFFF))
        return 0;
    return len;
}

void json_escape(buf_t *out, const char *s, size_t n)
{
    const unsigned char *p = (const unsigned char *)s;

    buf_append(out, "\"", 1);
    for (size_t i = 0; i < n;) {
        unsigned char c = p[i];
        size_t len;
        if (c == '"' || c == '\\') {
            char e[2] = { '\\', (char)c };
            buf_append(out, e, 2);
            i++;
        } else if (c == '\n') {
            buf_append_str(out, "\\n");
            i++;
        } else if (c == '\r') {
            buf_append_str(out, "\\r");
            i++;
        } else if (c == '\t') {
            buf_append_str(out, "\\t");
            i++;
        } else if (c < 0x20 || c == 0x7f || c == '<' || c == '>' || c == '&') {
            buf_printf(out, "\\u%04x", c);
            i++;
        } else if ((len = json_utf8_len(p + i, n - i)) == 0) {
            buf_printf(out, "\\u%04x", c);
            i++;
        } else {
            buf_append(out, p + i, len);
            i += len;
        }
    }
    buf_append(out, "\"", 1);
}

void json_init(json_t *j, buf_t *out)
{
    memset(j, 0, sizeof *j);
    j->out = out;
}

/* Before a value (or a key): the comma when the level has items. */
static void before_value(json_t *j)
{
    if (j->after_key) {
        j->after_key = 0;
        return;
    }
    if (j->has_items[j->depth])
        buf_append(j->out, ",", 1);
    j->has_items[j->depth] = 1;
}

static void open_level(json_t *j, char c)
{
    before_value(j);
    if (j->depth >= JSON_MAX_DEPTH) {
        fputs("json: nesting deeper than JSON_MAX_DEPTH\n", stderr);
        abort();
    }
    buf_append(j->out, &c, 1);
    j->depth++;
    j->has_items[j->depth] = 0;
}

static void close_level(json_t *j, char c)
{
    if (j->depth > 0)
        j->depth--;
    j->after_key = 0;
    buf_append(j->out, &c, 1);
}

void json_object_open(json_t *j)
{
    open_level(j, '{');
}

void json_object_close(json_t *j)
{
    close_level(j, '}');
}

void json_array_open(json_t *j)
{
    open_level(j, '[');
}

void json_array_close(json_t *j)
{
    close_level(j, ']');
}

void json_key(json_t *j, const char *key)
{
    before_value(j);
    json_escape(j->out, key, strlen(key));
    buf_append(j->out, ":", 1);
    j->after_key = 1;
}

void json_strn(json_t *j, const char *s, size_t n)
{
    before_value(j);
    json_escape(j->out, s, n);
}

void json_str(json_t *j, const char *s)
{
    if (s == NULL)
        json_null(j);
    else
        json_strn(j, s, strlen(s));
}

void json_int(json_t *j, long long v)
{
    before_value(j);
    buf_printf(j->out, "%lld", v);
}

void json_uint(json_t *j, unsigned long long v)
{
    before_value(j);
    buf_printf(j->out, "%llu", v);
}

void json_double(json_t *j, double v)
{
    before_value(j);
    if (isfinite(v))
        buf_printf(j->out, "%.15g", v);
    else
        buf_append_str(j->out, "null");
}

void json_bool(json_t *j, int v)
{
    before_value(j);
    buf_append_str(j->out, v ? "true" : "false");
}

void json_null(json_t *j)
{
    before_value(j);
    buf_append_str(j->out, "null");
}

void json_raw(json_t *j, const char *text)
{
    before_value(j);
    buf_append_str(j->out, text);
}

void json_kstr(json_t *j, const char *key, const char *s)
{
    json_key(j, key);
    json_str(j, s);
}

void json_kint(json_t *j, const char *key, long long v)
{
    json_key(j, key);
    json_int(j, v);
}

void json_kuint(json_t *j, const char *key, unsigned long long v)
{
    json_key(j, key);
    json_uint(j, v);
}

void json_kbool(json_t *j, const char *key, int v)
{
    json_key(j, key);
    json_bool(j, v);
}

void json_kuint_or_null(json_t *j, const char *key, unsigned long long v)
{
    json_key(j, key);
    if (v == 0)
        json_null(j);
    else
        json_uint(j, v);
}
