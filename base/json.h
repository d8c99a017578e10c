/*
 * base/json.h — a JSON writer over a byte buffer (base/buf.h).
 *
 * What hourglass-cli's --json, the order view (libhourglass) and
 * hourglass-console's /api replies are written with, so the three agree on
 * escaping. A json_t tracks nesting and commas: the caller opens objects and
 * arrays, writes keys and values, and never writes a ',' itself.
 *
 * Strings: valid UTF-8 passes through; '"', '\\' and control characters are
 * escaped; '<', '>' and '&' are written as \u003c, \u003e, \u0026 (so a
 * reply pasted into a page can never close a script element); a byte that is
 * not UTF-8 becomes \u00XX (its Latin-1 reading). Output is always valid JSON.
 *
 * Writers never fail (out of memory aborts). Nesting deeper than
 * JSON_MAX_DEPTH is a bug in the caller and aborts. One thread per json_t.
 */
#ifndef HG_BASE_JSON_H
#define HG_BASE_JSON_H

#include <stddef.h>
#include <stdint.h>

#include "base/buf.h"

#define JSON_MAX_DEPTH 32

typedef struct json {
    buf_t *out;
    int depth;
    int after_key;                               /* a key was written: the next value takes no comma */
    unsigned char has_items[JSON_MAX_DEPTH + 1]; /* per level: something was written, a ',' comes next */
} json_t;

/* Write into out (appending; the caller owns and frees it). */
void json_init(json_t *j, buf_t *out);

void json_object_open(json_t *j);
void json_object_close(json_t *j);
void json_array_open(json_t *j);
void json_array_close(json_t *j);

/* A key inside an object (a C string); the next call writes its value. */
void json_key(json_t *j, const char *key);

/* Values. json_str of NULL writes null. json_raw writes text that is
 * already JSON (a number the caller formatted, a nested document). */
void json_str(json_t *j, const char *s);
void json_strn(json_t *j, const char *s, size_t n);
void json_int(json_t *j, long long v);
void json_uint(json_t *j, unsigned long long v);
void json_double(json_t *j, double v);
void json_bool(json_t *j, int v);
void json_null(json_t *j);
void json_raw(json_t *j, const char *text);

/* key + value in one call, inside an object. */
void json_kstr(json_t *j, const char *key, const char *s);
void json_kint(json_t *j, const char *key, long long v);
void json_kuint(json_t *j, const char *key, unsigned long long v);
void json_kbool(json_t *j, const char *key, int v);
/* key + v, or key + null when v is 0 (a time in ms that is unknown, never, SQL NULL). */
void json_kuint_or_null(json_t *j, const char *key, unsigned long long v);

/* The quoted, escaped string s[0..n) appended to out (no comma logic). */
void json_escape(buf_t *out, const char *s, size_t n);

/* Length of the valid UTF-8 sequence at s[0..n) (1 for ASCII), 0 when the
 * bytes there are not valid UTF-8 (overlong, surrogate, cut short). Pure. */
size_t json_utf8_len(const unsigned char *s, size_t n);

#endif
