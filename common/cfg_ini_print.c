/*
 * common/cfg_ini_print.c — one setting written as INI lines that
 * cfg_load_file reads back to the same value (contract: cfg.h,
 * cfg_print_setting); --check-config prints through it (cfg_print_values).
 *
 * The reader (libinih and common/cfg_ini.c's join) takes lines of at most
 * CFG_INI_LINE bytes; it strips the blanks (isspace) around a value and
 * around a continuation line, takes a ';' after a blank for the start of a
 * comment (on the key's own line and on a continuation line alike), takes a
 * line that starts with ';' or '#' after its indent for a comment, and joins
 * a value with each continuation line by exactly one ' '. So a value too long
 * for one line is split at a ' ' that has a non-blank on both sides and is
 * not followed by ';' or '#': each such ' ' comes back from the join, and
 * nothing else changes. The split is greedy (each line as full as it may be),
 * which finds a split whenever there is one. The usual form is
 * "key = value" with continuation lines indented by four blanks; a value
 * that does not fit that form is tried in the tight ones ("key=value", one
 * blank of indent; then "key=" with the value from the next line on), which
 * hold every value a file can give: a file's own lines are no shorter.
 *
 * A value no INI file can hold (a line break, a blank at either end, a ';'
 * after a blank, or a run longer than a line with no place to split it) is
 * written as a comment that names the problem and shows the value C-escaped,
 * then a line that is not a setting, so that reading the print back fails
 * on it instead of giving another value.
 */
#include "common/cfg.h"

#include <ctype.h>
#include <string.h>

#include <ini.h>

#define CFG_INI_LINE (INI_MAX_LINE - 2) /* longest line the reader takes, less its newline */

/* How a setting's lines look: the key line's separator, the indent of a
 * continuation line, and whether the value starts on the first continuation
 * line (the key line ends at the '='; the join's blank before the value is
 * trimmed with the value's own). */
typedef struct ini_form {
    const char *equals;
    const char *indent;
    int value_below;
} ini_form_t;

static const ini_form_t usual_form = { " = ", "    ", 0 };
static const ini_form_t tight_form = { "=", " ", 0 };
static const ini_form_t below_form = { "=", " ", 1 };

static int is_blank(char c)
{
    return isspace((unsigned char)c); /* libinih's rule for blanks */
}

/* Why value cannot be written so that it reads back whatever the split, or
 * NULL when it can be (as far as its characters go). */
static const char *unwritable_reason(const char *value)
{
    size_t len = strlen(value);
    if (strchr(value, '\n') != NULL)
        return "it holds a line break";
    if (len > 0 && (is_blank(value[0]) || is_blank(value[len - 1])))
        return "it begins or ends with a blank, which the reader strips";
    if (cfg_inline_comment_at(value, len) < len)
        return "a ';' after a blank starts a comment";
    return NULL;
}

size_t cfg_inline_comment_at(const char *s, size_t len)
{
    for (size_t i = 1; i < len; i++)
        if (s[i] == ';' && is_blank(s[i - 1]))
            return i;
    return len;
}

/* 1 when the lines may break at value[j], a ' ' the join puts back. */
static int split_point(const char *value, size_t j)
{
    return j > 0 && value[j] == ' ' && !is_blank(value[j - 1]) && value[j + 1] != '\0' && !is_blank(value[j + 1]) &&
           value[j + 1] != ';' && value[j + 1] != '#';
}

#define NO_SPLIT ((size_t)-1)

/* The end of the line's part of value that starts at pos and may take width
 * bytes: len when the rest fits (an empty value too), else the last split
 * point within width, else NO_SPLIT. */
static size_t part_end(const char *value, size_t len, size_t pos, size_t width)
{
    if (len - pos <= width)
        return len;
    for (size_t j = pos + width; j > pos; j--)
        if (split_point(value, j))
            return j;
    return NO_SPLIT;
}

/* Whether value splits into lines of form for key name (writing them to out
 * unless out is NULL). */
static int write_in_form(FILE *out, const char *name, const char *value, const ini_form_t *form)
{
    size_t len = strlen(value);
    size_t key_line = strlen(name) + strlen(form->equals);
    if (key_line > CFG_INI_LINE)
        return 0;
    /* a continuation line that begins with ';' or '#' is a comment */
    if (form->value_below && (len == 0 || value[0] == ';' || value[0] == '#'))
        return 0;
    size_t pos = 0, width = CFG_INI_LINE - key_line;
    /* libinih takes a ';' after a blank for a comment: a value that begins
     * with one is written right after the '=' */
    const char *equals = value[0] == ';' && form == &usual_form ? " =" : form->equals;
    if (out != NULL)
        fprintf(out, "%s%s%s", name, equals, form->value_below ? "\n" : "");
    for (int line = form->value_below;; line++) {
        if (line > 0) {
            width = CFG_INI_LINE - strlen(form->indent);
            if (out != NULL)
                fputs(form->indent, out);
        }
        size_t end = part_end(value, len, pos, width);
        if (end == NO_SPLIT)
            return 0;
        if (out != NULL)
            fprintf(out, "%.*s\n", (int)(end - pos), value + pos);
        if (end == len)
            return 1;
        pos = end + 1;
    }
}

/* value as a C string literal's body, in comment lines of at most a line. */
static void write_escaped_comment(FILE *out, const char *value)
{
    const char *lead = ";   ";
    size_t used = (size_t)fprintf(out, "%s\"", lead);
    for (const unsigned char *p = (const unsigned char *)value; *p != '\0'; p++) {
        char piece[8];
        if (*p == '\\' || *p == '"')
            snprintf(piece, sizeof piece, "\\%c", *p);
        else if (*p == '\n')
            snprintf(piece, sizeof piece, "\\n");
        else if (*p == '\t')
            snprintf(piece, sizeof piece, "\\t");
        else if (*p < 0x20 || *p == 0x7f)
            snprintf(piece, sizeof piece, "\\x%02x", *p);
        else
            snprintf(piece, sizeof piece, "%c", *p);
        if (used + strlen(piece) + 1 > CFG_INI_LINE) { /* + 1: the closing quote */
            used = (size_t)fprintf(out, "\n%s", lead) - 1;
        }
        used += (size_t)fprintf(out, "%s", piece);
    }
    fputs("\"\n", out);
}

int cfg_print_setting(FILE *out, const char *name, const char *value)
{
    const char *why = unwritable_reason(value);
    if (why == NULL) {
        static const ini_form_t *const forms[] = { &usual_form, &tight_form, &below_form };
        for (size_t i = 0; i < sizeof forms / sizeof forms[0]; i++)
            if (write_in_form(NULL, name, value, forms[i]))
                return write_in_form(out, name, value, forms[i]) ? 0 : -1;
        why = "a run longer than an INI line with no blank to split it at";
    }
    fprintf(out, "; %s: not printable so that it reads back (%s); its value, C-escaped:\n", name, why);
    write_escaped_comment(out, value);
    fprintf(out, "%s (not printable, see the comment above)\n", name);
    return -1;
}
