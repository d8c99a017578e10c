/*
 * tests/fuzz/fuzz_users.c — libFuzzer target: the users file parser
 * (broker/users.c, with common/passwd.c's hash format check), which reads a
 * file an operator wrote by hand and the broker reads again at every SIGHUP.
 *
 * The input is the file's text. It is refused with "PATH:LINE: problem", or
 * accepted; then every user it holds must be found by its name, have a valid
 * name, at least one known role and a hash passwd_check accepts, and no name
 * may appear twice. Nothing may leak on either path (LeakSanitizer). A failed
 * check calls abort(), which libFuzzer reports as a crash.
 */
#include "broker/users.h"
#include "common/passwd.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#include "tests/fuzz/fuzz_check.h"

static void check_entry(const users_t *u, const users_entry_t *e)
{
    size_t nl = strlen(e->name);
    char why[200];
    CHECK(nl >= 1 && nl <= USERS_NAME_MAX);
    CHECK(strspn(e->name, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._@-") == nl);
    CHECK(e->roles != 0 && (e->roles & ~ROLE_ALL) == 0);
    CHECK(e->hash != NULL && passwd_check(e->hash, why, sizeof why) == 0);
    CHECK(users_find(u, e->name, nl) == e);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static const char path[] = "users.conf";
    /* an allocation of exactly size bytes, so a read past the end is ASan's */
    char *text = malloc(size ? size : 1);
    users_t *u = NULL;
    char err[512] = "";

    CHECK(text != NULL);
    memcpy(text, data, size);
    if (users_parse(text, size, path, &u, err, sizeof err) != 0) {
        CHECK(u == NULL);
        CHECK(strncmp(err, "users.conf:", strlen("users.conf:")) == 0);
        free(text);
        return 0;
    }
    CHECK(u != NULL);
    free(text); /* the table must own everything it holds */
    /* accepted: every line that is not blank or a comment names one user, its first field */
    size_t users = 0;
    for (size_t off = 0; off < size;) {
        const char *line = (const char *)data + off;
        const uint8_t *end = memchr(data + off, '\n', size - off);
        size_t ll = end ? (size_t)(end - (data + off)) : size - off;
        off += ll + (end ? 1 : 0);
        size_t b = 0;
        while (b < ll && (line[b] == ' ' || line[b] == '\t')) {
            b++;
        }
        if (b == ll || line[b] == '#' || (line[b] == '\r' && b + 1 == ll)) {
            continue;
        }
        size_t e = b;
        while (e < ll && line[e] != ' ' && line[e] != '\t') {
            e++;
        }
        const users_entry_t *entry = users_find(u, line + b, e - b);
        CHECK(entry != NULL);
        check_entry(u, entry);
        users++;
    }
    CHECK(users == users_count(u));
    users_free(u);
    return 0;
}
