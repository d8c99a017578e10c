/*
 * base/units.h — the one grammar for durations and sizes.
 *
 * Every duration and size Hourglass reads — protocol arguments (DELAY, LEASE,
 * BLOCK), every config file and flag, every CLI option, the level table spec
 * — goes through these functions, so "2.5s" and "1500ms" mean the same
 * everywhere and a mistake is refused everywhere in the same words.
 *
 * Durations:  NUMBER UNIT, written together ("500ms", "5s", "2.5s", "30m",
 *             "1.5h", "3d"). NUMBER is decimal digits with an optional
 *             fraction ("2.5"); no sign, no exponent. UNIT is one of ms, s,
 *             m, h, d — lower case, because "M" could mean minutes or months.
 *             The value must be a whole number of milliseconds ("0.5ms" is
 *             refused). "0" alone is zero. A bare number is refused ("30"
 *             could mean 30 ms or 30 s) unless the caller passes
 *             UNITS_BARE_MS, which the protocol does for arguments that are
 *             named in milliseconds (LEASE, BLOCK, DELAY: Redis's habit).
 *             At most UNITS_MAX_DURATION_MS (100 years).
 * Sizes:      NUMBER [UNIT], UNIT one of b, k, kb, m, mb, g, gb (x1024;
 *             case-insensitive: "64k", "4MB", "1.5g"); a bare number is
 *             bytes; the value must be a whole number of bytes.
 *
 * Surrounding blanks are ignored. Errors name the text and what was wrong:
 *   missing unit in duration "30" (use ms, s, m, h or d)
 *   unknown unit "x" in duration "5x" (use ms, s, m, h or d)
 *   duration "0.5ms" is not a whole number of milliseconds
 *   duration "36501d" is above the maximum of 36500d
 *   size "4q" has an unknown unit "q" (use b, k, m or g, e.g. 64k)
 *
 * Pure functions; thread-safe; no allocation.
 */
#ifndef HG_BASE_UNITS_H
#define HG_BASE_UNITS_H

#include <stddef.h>
#include <stdint.h>

#define UNITS_MAX_DURATION_MS (UINT64_C(100) * 365 * 86400 * 1000) /* 100 years */
#define UNITS_TEXT_MAX        32 /* enough for any formatted duration or size, NUL included */

/* Flags for units_parse_duration. */
#define UNITS_BARE_MS 1u /* a bare whole number is milliseconds */

/* Parse the duration in text[0..len) (need not be NUL-terminated; may hold
 * blanks around it). Returns 0 with *ms_out, or -1 with the message in err. */
int units_parse_duration(const char *text, size_t len, unsigned flags, uint64_t *ms_out, char *err, size_t errlen);

/* The same for a NUL-terminated string (NULL reads as ""). */
int units_parse_duration_str(const char *text, unsigned flags, uint64_t *ms_out, char *err, size_t errlen);

/* Format ms with the largest unit that divides it exactly: 7200000 → "2h",
 * 90000 → "90s", 1500 → "1500ms", 0 → "0s". Reads back to the same value.
 * Returns the length (snprintf semantics). */
int units_format_duration(uint64_t ms, char *buf, size_t buflen);

/* Parse a size in text[0..len); values above max are refused ("size \"9g\" is
 * above the maximum of 4gb"). Returns 0 with *bytes_out, or -1 with err. */
int units_parse_size(const char *text, size_t len, uint64_t max, uint64_t *bytes_out, char *err, size_t errlen);

/* Format bytes with the largest of gb, mb, kb that divides it exactly, else
 * bare bytes: 4194304 → "4mb", 1000 → "1000", 0 → "0". Reads back to the same
 * value. Returns the length (snprintf semantics). */
int units_format_size(uint64_t bytes, char *buf, size_t buflen);

#endif
