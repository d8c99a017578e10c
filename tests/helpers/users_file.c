/*
 * tests/helpers/users_file.c — a broker users file for a test (contract in
 * users_file.h): each password hashed with passwd_hash (scrypt, ln=10),
 * the whole file written at once.
 */
#include "tests/helpers/users_file.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "common/passwd.h"

int tu_write_users_file(const char *path, const tu_user_t *users, size_t n, char *err, size_t errlen)
{
    passwd_params_t params;
    passwd_params_default(&params, PASSWD_SCRYPT);
    params.log2_n = 10; /* the smallest passwd_params_check takes: a test does not wait for its hashes */
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0) {
        snprintf(err, errlen, "cannot write the users file %s: %s", path, strerror(errno));
        return -1;
    }
    FILE *f = fdopen(fd, "w");
    if (f == NULL) {
        snprintf(err, errlen, "cannot write the users file %s: %s", path, strerror(errno));
        close(fd);
        return -1;
    }
    for (size_t i = 0; i < n; i++) {
        char hash[PASSWD_HASH_MAX], why[256];
        const char *password = users[i].password;
        if (passwd_hash(password, strlen(password), &params, hash, sizeof hash, why, sizeof why) != 0) {
            snprintf(err, errlen, "users file %s: cannot hash the password of %s: %s", path, users[i].name, why);
            fclose(f);
            return -1;
        }
        fprintf(f, "%s %s %s\n", users[i].name, users[i].roles, hash);
    }
    if (ferror(f) | fclose(f)) {
        snprintf(err, errlen, "cannot write the users file %s: %s", path, strerror(errno));
        return -1;
    }
    return 0;
}
