/*
 * tests/helpers/users_file.h — a broker users file for a test: the lines
 * "name roles hash" with each password hashed here (common/passwd.h), so
 * no test builds them itself.
 *
 * The hashes are scrypt with ln=10 (1 MiB, a few milliseconds each: a test
 * hashes many) in the format `hourglass-cli passwd` writes, which the broker
 * verifies as it does any other. Part of libtestutil (which links
 * libhgpasswd); any thread.
 */
#ifndef HG_TESTS_USERS_FILE_H
#define HG_TESTS_USERS_FILE_H

#include <stddef.h>

/* One user of a users file: its name, its roles as the file spells them
 * ("producer", "producer,consumer,admin") and its password. */
typedef struct tu_user {
    const char *name;
    const char *roles;
    const char *password;
} tu_user_t;

/* Write the users file at path (replacing it, mode 0600): one line
 * "name roles hash" for each of users[n], in order. 0, or -1 with err
 * naming the user whose password could not be hashed, or the file that
 * could not be written, and why. */
int tu_write_users_file(const char *path, const tu_user_t *users, size_t n, char *err, size_t errlen);

#endif
