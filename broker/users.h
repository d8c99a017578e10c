/*
 * broker/users.h — roles, and the users file: who may log in with AUTH and
 * with which roles.
 *
 * The users file (config key users-file; docs/security.md) has one user per
 * line, fields separated by blanks; '#' starts a comment line:
 *
 *     # name     roles              password hash (hourglass-cli passwd)
 *     shop       producer           $scrypt$ln=15,r=8,p=1$<salt>$<hash>
 *     canceller  consumer           $scrypt$...
 *     ops        admin              $scrypt$...
 *     grafana    viewer             $pbkdf2-sha256$i=600000$...
 *     old-app    producer,consumer  !$scrypt$...      <- '!': disabled
 *
 * name: 1..64 of [A-Za-z0-9._@-], unique; roles: a comma-separated list of
 * producer, consumer, admin, viewer; hash: common/passwd.h's format, checked
 * when the file is read; a leading '!' disables the user (it can no longer
 * log in, the line stays for the record). Every bad line is refused with
 * "FILE:LINE: problem" and the whole file is then refused.
 *
 * Pure apart from reading the file; a users_t is immutable once loaded, owned
 * by the loop thread (the broker swaps in a new one on SIGHUP).
 */
#ifndef HG_BROKER_USERS_H
#define HG_BROKER_USERS_H

#include <stddef.h>

/* Roles: bits of a role set. The command table's roles column
 * (broker/cmd_table.c) says which of them may run each command. */
#define ROLE_PRODUCER 1u
#define ROLE_CONSUMER 2u
#define ROLE_ADMIN    4u
#define ROLE_VIEWER   8u
#define ROLE_ALL      (ROLE_PRODUCER | ROLE_CONSUMER | ROLE_ADMIN | ROLE_VIEWER)

#define USERS_NAME_MAX   64        /* bytes of a user name */
#define USERS_FILE_MAX   (1 << 20) /* a bigger users file is refused */
#define USERS_ROLES_TEXT 40        /* "producer,consumer,admin,viewer" and a NUL */

typedef struct users_entry {
    char name[USERS_NAME_MAX + 1];
    unsigned roles; /* ROLE_* bits, never 0 */
    int disabled;   /* the hash had a leading '!' */
    char *hash;     /* the hash text (without the '!') */
} users_entry_t;

typedef struct users users_t;

/* Parse text[len] (named path in messages) into a new table. 0 and *out, or
 * -1 with "path:line: problem" in err. */
int users_parse(const char *text, size_t len, const char *path, users_t **out, char *err, size_t errlen);

/* Read and parse the file at path. 0 and *out, or -1 with err ("cannot read
 * path: No such file or directory", or users_parse's message). */
int users_load(const char *path, users_t **out, char *err, size_t errlen);

/* The user named name[len], or NULL. */
const users_entry_t *users_find(const users_t *u, const char *name, size_t len);

/* Number of users (0 for NULL). */
size_t users_count(const users_t *u);

/* Free the table. NULL is fine. */
void users_free(users_t *u);

/* "producer,consumer" into buf[len] (at least USERS_ROLES_TEXT), in the
 * order producer, consumer, admin, viewer; "none" for 0. Returns buf. */
const char *users_roles_text(unsigned roles, char *buf, size_t len);

/* The role named name[len] (ROLE_*), or 0. */
unsigned users_role_named(const char *name, size_t len);

#endif
