/*
 * broker/users.c — the users file parser and the user table (contract and
 * file format in users.h).
 *
 * The table is a flat array searched linearly: a broker has a handful of
 * users, and AUTH is rare next to SEND. Loop thread (or any thread that owns
 * the table).
 */
#include "broker/users.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "base/err.h"
#include "common/passwd.h"

struct users {
    users_entry_t *v;
    size_t n, cap;
};

static const struct {
    const char *name;
    unsigned bit;
} role_names[] = {
    { "producer", ROLE_PRODUCER },
    { "consumer", ROLE_CONSUMER },
    { "admin", ROLE_ADMIN },
    { "viewer", ROLE_VIEWER },
};

unsigned users_role_named(const char *name, size_t len)
{
    for (size_t i = 0; i < sizeof role_names / sizeof role_names[0]; i++) {
        if (strlen(role_names[i].name) == len && memcmp(role_names[i].name, name, len) == 0) {
            return role_names[i].bit;
        }
    }
    return 0;
}

const char *users_roles_text(unsigned roles, char *buf, size_t len)
{
    size_t off = 0;
    if (len == 0) {
        return buf;
    }
    buf[0] = '\0';
    for (size_t i = 0; i < sizeof role_names / sizeof role_names[0]; i++) {
        if (roles & role_names[i].bit) {
            int n = snprintf(buf + off, len - off, "%s%s", off ? "," : "", role_names[i].name);
            if (n < 0 || (size_t)n >= len - off) {
                break;
            }
            off += (size_t)n;
        }
    }
    if (off == 0) {
        snprintf(buf, len, "none");
    }
    return buf;
}

static int name_char(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' || c == '_' ||
           c == '@' || c == '-';
}

/* The next blank-separated field of line[0..len) from *pos: its start and
 * length (0 when there is none). */
static size_t next_field(const char *line, size_t len, size_t *pos, const char **start)
{
    size_t i = *pos;
    while (i < len && (line[i] == ' ' || line[i] == '\t')) {
        i++;
    }
    size_t b = i;
    while (i < len && line[i] != ' ' && line[i] != '\t') {
        i++;
    }
    *pos = i;
    *start = line + b;
    return i - b;
}

/* One non-comment line into e. 0, or -1 with the problem (no file:line). */
static int parse_line(const users_t *u, const char *line, size_t len, users_entry_t *e, char *err, size_t errlen)
{
    size_t pos = 0, nl, rl, hl;
    const char *name, *roles, *hash, *extra;
    size_t xl;

    memset(e, 0, sizeof *e);
    nl = next_field(line, len, &pos, &name);
    rl = next_field(line, len, &pos, &roles);
    hl = next_field(line, len, &pos, &hash);
    if (rl == 0 || hl == 0) {
        return err_set(err, errlen, "want three fields: name roles hash");
    }
    if ((xl = next_field(line, len, &pos, &extra)) != 0) {
        return err_set(err, errlen, "unexpected fourth field '%.*s' (want: name roles hash)", (int)(xl < 40 ? xl : 40),
                       extra);
    }
    if (nl > USERS_NAME_MAX) {
        return err_set(err, errlen, "user name longer than %d bytes", USERS_NAME_MAX);
    }
    for (size_t i = 0; i < nl; i++) {
        unsigned char ch = (unsigned char)name[i];
        if (name_char((char)ch)) {
            continue;
        }
        size_t shown = 0; /* the name is shown when all of it is printable */
        while (shown < nl && (unsigned char)name[shown] > ' ' && (unsigned char)name[shown] < 0x7f) {
            shown++;
        }
        if (shown == nl) {
            return err_set(err, errlen, "user name '%.*s' has a character other than A-Z a-z 0-9 . _ @ -: '%c'",
                           (int)nl, name, ch);
        }
        /* Not all printable: the name is not shown as it is (an invisible byte order mark would read as 'shop',
         * a control byte would reach the terminal), the byte is named instead. */
        return err_set(
            err, errlen, "user name has a character other than A-Z a-z 0-9 . _ @ -: byte 0x%02X at column %zu%s", ch,
            (size_t)(name - line) + i + 1,
            ch == 0xEF && i + 2 < nl && (unsigned char)name[i + 1] == 0xBB && (unsigned char)name[i + 2] == 0xBF
                ? " (a UTF-8 byte order mark: save the file without it)"
                : "");
    }
    if (users_find(u, name, nl) != NULL) {
        return err_set(err, errlen, "user '%.*s' is listed twice", (int)nl, name);
    }
    memcpy(e->name, name, nl);
    e->name[nl] = '\0';
    for (size_t i = 0; i < rl;) {
        size_t j = i;
        while (j < rl && roles[j] != ',') {
            j++;
        }
        unsigned bit = users_role_named(roles + i, j - i);
        if (bit == 0) {
            return err_set(err, errlen, "user '%s': unknown role '%.*s' (want producer, consumer, admin or viewer)",
                           e->name, (int)(j - i > 32 ? 32 : j - i), roles + i);
        }
        e->roles |= bit;
        i = j + 1;
        if (j + 1 == rl) {
            return err_set(err, errlen, "user '%s': empty role after ','", e->name);
        }
    }
    if (hash[0] == '!') {
        e->disabled = 1;
        hash++;
        hl--;
    }
    if (hl >= PASSWD_HASH_MAX) {
        return err_set(err, errlen, "user '%s': hash longer than %d bytes", e->name, PASSWD_HASH_MAX - 1);
    }
    e->hash = xstrndup(hash, hl);
    char why[200];
    if (passwd_check(e->hash, why, sizeof why) != 0) {
        free(e->hash);
        e->hash = NULL;
        return err_set(err, errlen, "user '%s': %s", e->name, why);
    }
    return 0;
}

int users_parse(const char *text, size_t len, const char *path, users_t **out, char *err, size_t errlen)
{
    users_t *u = xcalloc(1, sizeof *u);
    size_t lineno = 0;

    *out = NULL;
    for (size_t off = 0; off < len;) {
        const char *line = text + off;
        const char *nl = memchr(line, '\n', len - off);
        size_t ll = nl ? (size_t)(nl - line) : len - off;
        off += ll + (nl ? 1 : 0);
        lineno++;
        if (ll > 0 && line[ll - 1] == '\r') {
            ll--;
        }
        if (memchr(line, '\0', ll) != NULL) {
            users_free(u);
            return err_set(err, errlen, "%s:%zu: NUL byte in the line", path, lineno);
        }
        size_t i = 0;
        while (i < ll && (line[i] == ' ' || line[i] == '\t')) {
            i++;
        }
        if (i == ll || line[i] == '#') {
            continue;
        }
        users_entry_t e;
        char why[300];
        if (parse_line(u, line, ll, &e, why, sizeof why) != 0) {
            users_free(u);
            return err_set(err, errlen, "%s:%zu: %s", path, lineno, why);
        }
        if (u->n == u->cap) {
            u->cap = u->cap ? 2 * u->cap : 8;
            u->v = xrealloc(u->v, u->cap * sizeof *u->v);
        }
        u->v[u->n++] = e;
    }
    *out = u;
    return 0;
}

int users_load(const char *path, users_t **out, char *err, size_t errlen)
{
    *out = NULL;
    FILE *f = fopen(path, "rb");
    if (f == NULL) {
        return err_set(err, errlen, "cannot read %s: %s", path, strerror(errno));
    }
    char *text = xmalloc(USERS_FILE_MAX + 1);
    errno = 0;
    size_t n = fread(text, 1, USERS_FILE_MAX + 1, f);
    int bad = ferror(f) ? (errno != 0 ? errno : EIO) : 0;
    fclose(f);
    if (bad) {
        free(text);
        return err_set(err, errlen, "cannot read %s: %s", path, strerror(bad)); /* a directory: "Is a directory" */
    }
    if (n > USERS_FILE_MAX) {
        free(text);
        return err_set(err, errlen, "%s is larger than %d bytes", path, USERS_FILE_MAX);
    }
    int rc = users_parse(text, n, path, out, err, errlen);
    free(text);
    return rc;
}

const users_entry_t *users_find(const users_t *u, const char *name, size_t len)
{
    if (u == NULL) {
        return NULL;
    }
    for (size_t i = 0; i < u->n; i++) {
        if (strlen(u->v[i].name) == len && memcmp(u->v[i].name, name, len) == 0) {
            return &u->v[i];
        }
    }
    return NULL;
}

size_t users_count(const users_t *u)
{
    return u ? u->n : 0;
}

void users_free(users_t *u)
{
    if (u == NULL) {
        return;
    }
    for (size_t i = 0; i < u->n; i++) {
        free(u->v[i].hash);
    }
    free(u->v);
    free(u);
}
