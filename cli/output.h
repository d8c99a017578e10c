/*
 * cli/output.h — hourglass-cli's output helpers: terminal-safe text, JSON,
 * times, aligned tables, reply type checks. Single-threaded.
 */
#ifndef HG_CLI_OUTPUT_H
#define HG_CLI_OUTPUT_H

#include <hourglass/hourglass.h>

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#define CLI_MAX_COLUMNS 16 /* columns of a table */

/* A JSON string of s[0..n) on f, escaped by base/json.h. Valid UTF-8 passes through; control
 * characters are escaped; a byte that is not UTF-8 becomes \u00XX (its
 * Latin-1 reading). */
void out_json_string(FILE *f, const char *s, size_t n);

/* Any reply as JSON on f: integers, booleans, null, aggregates as arrays,
 * everything else as a string (for generic values such as GROUP LIST fields). */
void out_json_reply(FILE *f, const hg_reply_t *r);

/* s[0..n) as text for a terminal: printable ASCII and valid UTF-8 as is, the
 * rest (C0, DEL, the C1 controls U+0080..U+009F, the bidi overrides and
 * isolates, invalid bytes) as \n, \t, \\, \xHH; cut with "…" after max_chars characters (0: no
 * limit). Returns a new NUL-terminated string (free it). */
char *out_text(const char *s, size_t n, size_t max_chars);

/* Wall-clock ms as "2024-05-01 12:00:00Z" into buf; 0 as "-". */
void out_time(uint64_t ms, char *buf, size_t len);

/* 1 when r is an integer; a string (bulk, status, verbatim); an array, map
 * or set. 0 otherwise, and for NULL. */
int reply_is_int(const hg_reply_t *r);
int reply_is_str(const hg_reply_t *r);
int reply_is_aggregate(const hg_reply_t *r);

/* An aligned table: cells fill rows left to right (row 0 is the header);
 * columns flagged in right[] are right-aligned. The table owns its cells. */
typedef struct table {
    int ncols;
    size_t ncells, cap;
    char **cells;
    int right[CLI_MAX_COLUMNS];
} table_t;

/* Start a table of ncols (<= CLI_MAX_COLUMNS) columns with a header row;
 * right (may be NULL) flags the right-aligned columns. */
void table_init(table_t *t, int ncols, const char *const *header, const int *right);

/* Add the next cell: a copy of s; s itself (taken over, freed by
 * table_free); printf output (at most 511 bytes). */
void table_add(table_t *t, const char *s);
void table_add_owned(table_t *t, char *s);
void table_addf(table_t *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Print the rows, columns padded to their widest cell (code points). */
void table_print(table_t *t, FILE *f);

/* Free the cells. */
void table_free(table_t *t);

#endif
