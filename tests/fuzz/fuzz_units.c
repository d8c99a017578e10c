/*
 * tests/fuzz/fuzz_units.c — libFuzzer target: the duration and size grammar
 * (base/units.c) that every config file, flag, CLI option and protocol
 * argument goes through.
 *
 * The first input byte picks the flags (UNITS_BARE_MS or none) and the size
 * maximum, the rest is the text, parsed as a duration and as a size, with
 * an exact length (not NUL-terminated) and, up to its first NUL, as a C
 * string. A refusal must say why; an accepted value must be within its
 * bound, and format to a text that parses back to the same value (the
 * contract of units_format_*). A failed check calls abort(), which
 * libFuzzer reports as a crash.
 */
#include "base/units.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#include "tests/fuzz/fuzz_check.h"

static void check_duration(const char *text, size_t len, unsigned flags)
{
    uint64_t ms = 0, again = 0;
    char err[256] = "", formatted[UNITS_TEXT_MAX];
    if (units_parse_duration(text, len, flags, &ms, err, sizeof err) != 0) {
        CHECK(err[0] != '\0');
        return;
    }
    CHECK(ms <= UNITS_MAX_DURATION_MS);
    int n = units_format_duration(ms, formatted, sizeof formatted);
    CHECK(n > 0 && (size_t)n < sizeof formatted);
    CHECK(units_parse_duration_str(formatted, 0, &again, err, sizeof err) == 0);
    CHECK(again == ms);
}

static void check_size(const char *text, size_t len, uint64_t max)
{
    uint64_t bytes = 0, again = 0;
    char err[256] = "", formatted[UNITS_TEXT_MAX];
    if (units_parse_size(text, len, max, &bytes, err, sizeof err) != 0) {
        CHECK(err[0] != '\0');
        return;
    }
    CHECK(bytes <= max);
    int n = units_format_size(bytes, formatted, sizeof formatted);
    CHECK(n > 0 && (size_t)n < sizeof formatted);
    CHECK(units_parse_size(formatted, (size_t)n, UINT64_MAX, &again, err, sizeof err) == 0);
    CHECK(again == bytes);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static const uint64_t maxima[] = { UINT64_MAX, UINT64_C(4) << 30, 64u << 20, 1000, 0 };
    if (size < 1) {
        return 0;
    }
    unsigned flags = data[0] & 1 ? UNITS_BARE_MS : 0;
    uint64_t max = maxima[(data[0] >> 1) % (sizeof maxima / sizeof maxima[0])];
    size_t len = size - 1;
    /* an allocation of exactly len bytes, so a read past the end is ASan's */
    char *text = malloc(len ? len : 1);
    CHECK(text != NULL);
    memcpy(text, data + 1, len);
    check_duration(text, len, flags);
    check_size(text, len, max);
    free(text);

    char *str = malloc(len + 1);
    CHECK(str != NULL);
    memcpy(str, data + 1, len);
    str[len] = '\0';
    uint64_t ms = 0;
    char err[256] = "";
    if (units_parse_duration_str(str, flags, &ms, err, sizeof err) != 0) {
        CHECK(err[0] != '\0');
    } else {
        CHECK(ms <= UNITS_MAX_DURATION_MS);
    }
    free(str);
    return 0;
}
