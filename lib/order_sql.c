/*
 * lib/order_sql.c — the SQL lexer of the order cancel (internal to
 * libhourglass): placeholder checking and translation of a configured
 * statement, and script splitting.
 *
 * A configured statement is written with '?' for the order id and ':reason'
 * for the cancel reason (hourglass-consumer's claim-sql, side-effect-sql,
 * lookup-sql). A small lexer walks the text once, skipping what the server
 * would not read as SQL tokens — '…' and "…" strings (with '' doubling and
 * backslash escapes), `…` identifiers, -- / # line comments and slash-star
 * comments — and counts placeholders only outside them. The translation
 * replaces :reason with '?' and records, per placeholder, what to bind.
 *
 * Invariant: a text accepted here has exactly one order-id placeholder and
 * one statement; the server sees exactly the placeholders we bind.
 * Pure logic, no I/O; thread-safe.
 */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include "lib/order_sql.h"

#include "base/alloc.h"
#include "base/err.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* ---------------------------------------------------------------- lexer */

typedef enum opaque {
    OPAQUE_NONE,   /* text[i] starts an ordinary token */
    OPAQUE_STRING, /* '…' or "…" */
    OPAQUE_IDENT,  /* `…` */
    OPAQUE_COMMENT /* -- …, # …, slash-star … star-slash */
} opaque_t;

static const char *opaque_name(opaque_t kind)
{
    return kind == OPAQUE_STRING ? "string" : kind == OPAQUE_IDENT ? "quoted identifier" : "comment";
}

/* If text[i] opens a string, quoted identifier or comment, set *kind and
 * return the index just past its end, or -1 when it never ends; otherwise set
 * OPAQUE_NONE and return i. A line comment ends before its newline. */
static long skip_opaque(const char *text, size_t n, size_t i, opaque_t *kind)
{
    char c = text[i];
    *kind = OPAQUE_NONE;
    if (c == '\'' || c == '"' || c == '`') {
        *kind = c == '`' ? OPAQUE_IDENT : OPAQUE_STRING;
        for (size_t j = i + 1; j < n; j++) {
            if (text[j] == '\\' && c != '`') {
                j++; /* the escaped byte, whatever it is */
                continue;
            }
            if (text[j] == c) {
                if (j + 1 < n && text[j + 1] == c) { /* '' inside '…' */
                    j++;
                    continue;
                }
                return (long)(j + 1);
            }
        }
        return -1;
    }
    /* "--" starts a comment only when a blank or control byte follows (MariaDB). */
    int dash_comment = c == '-' && i + 1 < n && text[i + 1] == '-' && (i + 2 == n || (unsigned char)text[i + 2] <= ' ');
    if (dash_comment || c == '#') {
        *kind = OPAQUE_COMMENT;
        size_t j = i;
        while (j < n && text[j] != '\n')
            j++;
        return (long)j;
    }
    if (c == '/' && i + 1 < n && text[i + 1] == '*') {
        *kind = OPAQUE_COMMENT;
        for (size_t j = i + 2; j + 1 < n; j++)
            if (text[j] == '*' && text[j + 1] == '/')
                return (long)(j + 2);
        return -1;
    }
    return (long)i;
}

static int is_ident_start(char c)
{
    return isalpha((unsigned char)c) || c == '_';
}

static int is_ident_char(char c)
{
    return isalnum((unsigned char)c) || c == '_' || c == '$';
}

/* Whether text[i…n) holds only blanks and comments. */
static int only_blanks_and_comments(const char *text, size_t n, size_t i)
{
    while (i < n) {
        if (isspace((unsigned char)text[i])) {
            i++;
            continue;
        }
        opaque_t kind;
        long j = skip_opaque(text, n, i, &kind);
        if (j < 0 || kind != OPAQUE_COMMENT)
            return 0;
        i = (size_t)j;
    }
    return 1;
}

void order_sql_text_free(order_sql_text_t *t)
{
    if (t == NULL)
        return;
    free(t->sql);
    t->sql = NULL;
    t->nparams = 0;
}

int order_sql_translate(const char *field, const char *text, int allow_reason, order_sql_text_t *out, char *err,
                        size_t errlen)
{
    if (out != NULL)
        memset(out, 0, sizeof *out);
    if (text == NULL || text[strspn(text, " \t\r\n")] == '\0') {
        err_set(err, errlen, "%s: empty statement", field);
        return -1;
    }
    size_t n = strlen(text);
    if (n > HG_ORDER_SQL_MAX_LEN) {
        err_set(err, errlen, "%s: statement is %zu bytes, more than the limit of %d", field, n, HG_ORDER_SQL_MAX_LEN);
        return -1;
    }
    /* The translation is never longer than the text (":reason" → "?"). */
    char *sql = xmalloc(n + 1);
    size_t o = 0;
    int ids = 0, nparams = 0;
    order_sql_param_t kinds[ORDER_SQL_MAX_PARAMS];

    for (size_t i = 0; i < n;) {
        opaque_t kind;
        long j = skip_opaque(text, n, i, &kind);
        if (j < 0) {
            err_set(err, errlen, "%s: unterminated %s starting at byte %zu", field, opaque_name(kind), i + 1);
            goto fail;
        }
        if ((size_t)j != i) {
            memcpy(sql + o, text + i, (size_t)j - i);
            o += (size_t)j - i;
            i = (size_t)j;
            continue;
        }
        char c = text[i];
        if (c == '?' || (c == ':' && i + 1 < n && is_ident_start(text[i + 1]))) {
            order_sql_param_t param = ORDER_SQL_PARAM_ORDER_ID;
            size_t len = 1;
            if (c == ':') {
                while (i + len < n && is_ident_char(text[i + len]))
                    len++;
                if (len != 7 || strncasecmp(text + i, ":reason", 7) != 0) {
                    err_set(err, errlen,
                            "%s: unknown placeholder '%.*s' at byte %zu (known: ? = the order id, :reason)", field,
                            (int)len, text + i, i + 1);
                    goto fail;
                }
                if (!allow_reason) {
                    err_set(err, errlen, "%s: ':reason' is not available here (only ? = the order id)", field);
                    goto fail;
                }
                param = ORDER_SQL_PARAM_REASON;
            } else {
                ids++;
            }
            if (nparams == ORDER_SQL_MAX_PARAMS) {
                err_set(err, errlen, "%s: more than %d placeholders", field, ORDER_SQL_MAX_PARAMS);
                goto fail;
            }
            kinds[nparams++] = param;
            sql[o++] = '?';
            i += len;
            continue;
        }
        if (c == ';') {
            if (!only_blanks_and_comments(text, n, i + 1)) {
                err_set(err, errlen, "%s: more than one statement (a ';' at byte %zu is followed by more SQL)", field,
                        i + 1);
                goto fail;
            }
            break; /* a trailing ';' is dropped */
        }
        sql[o++] = c;
        i++;
    }
    sql[o] = '\0';
    if (ids != 1) {
        err_set(err, errlen, "%s: expected exactly one '?' (the order id), found %d", field, ids);
        goto fail;
    }
    if (out != NULL) {
        out->sql = sql;
        out->nparams = nparams;
        memcpy(out->kinds, kinds, sizeof kinds[0] * (size_t)nparams);
    } else {
        free(sql);
    }
    return 0;

fail:
    free(sql);
    return -1;
}

/* ---------------------------------------------------------------- scripts */

int order_sql_next_statement(const char *script, size_t *pos, const char **stmt, size_t *len, char *err, size_t errlen)
{
    size_t n = strlen(script);
    size_t i = *pos;
    /* Skip blanks and comments before the statement. */
    for (;;) {
        while (i < n && (isspace((unsigned char)script[i]) || script[i] == ';'))
            i++;
        if (i >= n) {
            *pos = n;
            return 0;
        }
        opaque_t kind;
        long j = skip_opaque(script, n, i, &kind);
        if (j < 0) {
            err_set(err, errlen, "unterminated %s starting at byte %zu", opaque_name(kind), i + 1);
            return -1;
        }
        if (kind != OPAQUE_COMMENT)
            break;
        i = (size_t)j;
    }
    size_t start = i;
    while (i < n && script[i] != ';') {
        opaque_t kind;
        long j = skip_opaque(script, n, i, &kind);
        if (j < 0) {
            err_set(err, errlen, "unterminated %s starting at byte %zu", opaque_name(kind), i + 1);
            return -1;
        }
        i = kind == OPAQUE_NONE ? i + 1 : (size_t)j;
    }
    size_t end = i;
    while (end > start && isspace((unsigned char)script[end - 1]))
        end--;
    *stmt = script + start;
    *len = end - start;
    *pos = i < n ? i + 1 : n;
    return 1;
}
