/*
 * base/units.c — durations and sizes (grammar and wording: units.h).
 *
 * One unit table per kind drives both parsing and formatting, so a unit added
 * there is understood everywhere. Arithmetic never overflows: integer digits
 * stop accumulating once the value is above the maximum (far below
 * UINT64_MAX / 10), at most 9 fraction digits are kept exactly (numerator <
 * 10^9), and value * unit is checked by division before it is computed.
 * Syntax errors are reported before range errors, so "99999999999999999999x"
 * is an unknown unit, not too large.
 */
#include "base/units.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "base/err.h"

typedef struct unit {
    const char *name;
    size_t len; /* strlen(name), kept so a lookup compares lengths without a strlen per row */
    uint64_t mult;
} unit_t;
#define UNIT(name, mult)             \
    {                                \
        name, sizeof(name) - 1, mult \
    }

/* Largest first: formatting picks the first that divides exactly. */
static const unit_t duration_units[] = {
    UNIT("d", UINT64_C(86400000)),
    UNIT("h", UINT64_C(3600000)),
    UNIT("m", UINT64_C(60000)),
    UNIT("s", UINT64_C(1000)),
    UNIT("ms", 1),
};
static const unit_t size_units[] = {
    UNIT("g", UINT64_C(1) << 30),
    UNIT("gb", UINT64_C(1) << 30),
    UNIT("m", UINT64_C(1) << 20),
    UNIT("mb", UINT64_C(1) << 20),
    UNIT("k", UINT64_C(1) << 10),
    UNIT("kb", UINT64_C(1) << 10),
    UNIT("b", 1),
};
#define NUNITS(a)           (sizeof(a) / sizeof((a)[0]))
#define DURATION_HINT       "use ms, s, m, h or d"
#define SIZE_HINT           "use b, k, m or g, e.g. 64k"
#define MAX_FRACTION_DIGITS 9

static int is_blank(char c)
{
    return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f';
}

static int is_digit(char c)
{
    return c >= '0' && c <= '9';
}

static int is_letter(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
}

/* A span length as a printf precision (%.*s takes an int). */
static int width(size_t len)
{
    return len > 4096 ? 4096 : (int)len;
}

static void trim(const char **s, size_t *len)
{
    while (*len > 0 && is_blank(**s)) {
        (*s)++;
        (*len)--;
    }
    while (*len > 0 && is_blank((*s)[*len - 1]))
        (*len)--;
}

/* A decimal number with an optional fraction at s[*i..len): integer part
 * (saturating above cap: *too_large), fraction as num / den. */
typedef struct number {
    uint64_t whole;
    uint64_t frac_num, frac_den;
    int too_large;
    int has_fraction;
} number_t;

/* Reads the number; returns 0, or -1 with a syntax message (what = "duration"
 * or "size"). On success *i is past the number. */
static int read_number(const char *s, size_t len, size_t *i, uint64_t cap, const char *what, number_t *n, char *err,
                       size_t errlen)
{
    int w = width(len);
    memset(n, 0, sizeof *n);
    n->frac_den = 1;
    if (len == 0)
        return err_set(err, errlen, "empty %s (expected e.g. \"%s\")", what, what[0] == 'd' ? "5s" : "64k");
    if (s[0] == '-' || s[0] == '+')
        return err_set(err, errlen, "sign not allowed in %s \"%.*s\" (a %s is a number >= 0%s)", what, w, s, what,
                       what[0] == 'd' ? " and a unit, e.g. \"5s\"" : "");
    if (!is_digit(s[0]))
        return err_set(err, errlen, "%s \"%.*s\" does not start with a number (expected e.g. \"%s\")", what, w, s,
                       what[0] == 'd' ? "5s" : "64k");
    for (; *i < len && is_digit(s[*i]); (*i)++) {
        if (n->too_large)
            continue;
        if (n->whole > (UINT64_MAX - 9) / 10) {
            n->too_large = 1;
            continue;
        }
        n->whole = n->whole * 10 + (uint64_t)(s[*i] - '0');
        if (n->whole > cap)
            n->too_large = 1;
    }
    if (*i < len && s[*i] == '.') {
        (*i)++;
        size_t start = *i;
        for (; *i < len && is_digit(s[*i]); (*i)++) {
            if (*i - start >= MAX_FRACTION_DIGITS) {
                if (s[*i] != '0')
                    return err_set(err, errlen, "%s \"%.*s\" has more than %d decimals", what, w, s,
                                   MAX_FRACTION_DIGITS);
                continue;
            }
            n->frac_num = n->frac_num * 10 + (uint64_t)(s[*i] - '0');
            n->frac_den *= 10;
        }
        if (*i == start)
            return err_set(err, errlen, "expected digits after the decimal point in %s \"%.*s\"", what, w, s);
        n->has_fraction = 1;
    }
    return 0;
}

/* The unit named name[0..len), or NULL. The callers pass letters only (they stop at the first
 * non-letter), and the table's names are lower case, so with nocase a letter is folded by setting its
 * 0x20 bit. The length is compared first and the name byte by byte in place: no strlen and no libc call
 * per row (this runs for every DELAY, LEASE and BLOCK a client sends). */
static const unit_t *unit_lookup(const unit_t *units, size_t nunits, const char *name, size_t len, int nocase)
{
    const char fold = nocase ? 0x20 : 0;
    for (size_t i = 0; i < nunits; i++) {
        if (units[i].len != len)
            continue;
        size_t same = 0;
        while (same < len && (char)(name[same] | fold) == units[i].name[same])
            same++;
        if (same == len)
            return &units[i];
    }
    return NULL;
}

/* n * mult into *out; -1 when above max or not whole (*not_whole set). */
static int scale(const number_t *n, uint64_t mult, uint64_t max, uint64_t *out, int *not_whole)
{
    *not_whole = 0;
    if (n->too_large || n->whole > max / mult)
        return -1;
    uint64_t v = n->whole * mult;
    uint64_t frac = n->frac_num * mult; /* < 10^9 * 2^30: no overflow */
    if (frac % n->frac_den != 0) {
        *not_whole = 1;
        return -1;
    }
    frac /= n->frac_den;
    if (frac > max - v) /* v <= max (checked above); the fraction alone may be above max */
        return -1;
    *out = v + frac;
    return 0;
}

int units_parse_duration(const char *text, size_t len, unsigned flags, uint64_t *ms_out, char *err, size_t errlen)
{
    const char *s = text != NULL ? text : "";
    trim(&s, &len);
    int w = width(len);
    size_t i = 0;
    number_t n;
    if (read_number(s, len, &i, UNITS_MAX_DURATION_MS, "duration", &n, err, errlen) != 0)
        return -1;

    size_t unit_start = i;
    while (i < len && is_letter(s[i]))
        i++;
    size_t unit_len = i - unit_start;
    const unit_t *unit = NULL;
    if (unit_len == 0) {
        if (i == len && !n.has_fraction && (n.whole == 0 || (flags & UNITS_BARE_MS))) {
            static const unit_t ms = UNIT("ms", 1);
            unit = &ms;
        } else if (i == len) {
            return err_set(err, errlen, "missing unit in duration \"%.*s\" (" DURATION_HINT ")", w, s);
        } else if (is_blank(s[i])) {
            return err_set(err, errlen,
                           "blank between number and unit in duration \"%.*s\" (write them together, e.g. \"5s\")", w,
                           s);
        } else {
            return err_set(
                err, errlen,
                "unexpected \"%c\" after the number in duration \"%.*s\" (expected a number and a unit: " DURATION_HINT
                ")",
                s[i], w, s);
        }
    } else {
        unit = unit_lookup(duration_units, NUNITS(duration_units), s + unit_start, unit_len, 0);
        if (unit == NULL)
            return err_set(err, errlen, "unknown unit \"%.*s\" in duration \"%.*s\" (" DURATION_HINT ")",
                           width(unit_len), s + unit_start, w, s);
        if (i < len)
            return err_set(err, errlen, "unexpected \"%.*s\" after \"%.*s\" in duration \"%.*s\"", width(len - i),
                           s + i, width(i), s, w, s);
    }
    int not_whole;
    if (scale(&n, unit->mult, UNITS_MAX_DURATION_MS, ms_out, &not_whole) != 0) {
        if (not_whole)
            return err_set(err, errlen, "duration \"%.*s\" is not a whole number of milliseconds", w, s);
        char max_text[UNITS_TEXT_MAX];
        units_format_duration(UNITS_MAX_DURATION_MS, max_text, sizeof max_text);
        return err_set(err, errlen, "duration \"%.*s\" is above the maximum of %s", w, s, max_text);
    }
    return 0;
}

int units_parse_duration_str(const char *text, unsigned flags, uint64_t *ms_out, char *err, size_t errlen)
{
    if (text == NULL)
        text = "";
    return units_parse_duration(text, strlen(text), flags, ms_out, err, errlen);
}

int units_format_duration(uint64_t ms, char *buf, size_t buflen)
{
    if (ms == 0)
        return snprintf(buf, buflen, "0s");
    for (size_t i = 0; i < NUNITS(duration_units); i++) {
        if (ms % duration_units[i].mult == 0)
            return snprintf(buf, buflen, "%" PRIu64 "%s", ms / duration_units[i].mult, duration_units[i].name);
    }
    return snprintf(buf, buflen, "%" PRIu64 "ms", ms); /* not reached: ms divides all */
}

int units_parse_size(const char *text, size_t len, uint64_t max, uint64_t *bytes_out, char *err, size_t errlen)
{
    const char *s = text != NULL ? text : "";
    trim(&s, &len);
    int w = width(len);
    size_t i = 0;
    number_t n;
    if (read_number(s, len, &i, max, "size", &n, err, errlen) != 0)
        return -1;
    size_t unit_start = i;
    while (i < len && is_letter(s[i]))
        i++;
    static const unit_t bytes = UNIT("", 1);
    const unit_t *unit = &bytes;
    if (i > unit_start) {
        unit = unit_lookup(size_units, NUNITS(size_units), s + unit_start, i - unit_start, 1);
        if (unit == NULL)
            return err_set(err, errlen, "size \"%.*s\" has an unknown unit \"%.*s\" (" SIZE_HINT ")", w, s,
                           width(i - unit_start), s + unit_start);
    }
    if (i < len) {
        if (is_blank(s[i]) && i == unit_start)
            return err_set(err, errlen,
                           "blank between number and unit in size \"%.*s\" (write them together, "
                           "e.g. \"64k\")",
                           w, s);
        return err_set(err, errlen, "unexpected \"%.*s\" in size \"%.*s\" (" SIZE_HINT ")", width(len - i), s + i, w,
                       s);
    }
    int not_whole;
    if (scale(&n, unit->mult, max, bytes_out, &not_whole) != 0) {
        if (not_whole)
            return err_set(err, errlen, "size \"%.*s\" is not a whole number of bytes", w, s);
        char max_text[UNITS_TEXT_MAX];
        units_format_size(max, max_text, sizeof max_text);
        return err_set(err, errlen, "size \"%.*s\" is above the maximum of %s", w, s, max_text);
    }
    return 0;
}

int units_format_size(uint64_t bytes, char *buf, size_t buflen)
{
    static const unit_t shown[] = { UNIT("gb", UINT64_C(1) << 30), UNIT("mb", UINT64_C(1) << 20),
                                    UNIT("kb", UINT64_C(1) << 10) };
    for (size_t i = 0; bytes != 0 && i < NUNITS(shown); i++) {
        if (bytes % shown[i].mult == 0)
            return snprintf(buf, buflen, "%" PRIu64 "%s", bytes / shown[i].mult, shown[i].name);
    }
    return snprintf(buf, buflen, "%" PRIu64, bytes);
}
