/*
 * common/argv_secret.h — passwords given on a command line, hidden from
 * ps and /proc/PID/cmdline.
 *
 * A password in argv (hourglass-cli --uri hourglass://ops:PW@host, a
 * daemon's --uri user:PW@… or --mysql-password PW) is readable by every
 * user of the host for as long as the process runs. As the mysql client
 * does, a program copies its argv for its own use (argv_secret_copy: the
 * parse, and SIGHUP's re-parse, read the copy) and overwrites the
 * password's bytes in the original with 'x' (argv_secret_hide), which is
 * what the kernel shows; one warning goes to stderr, as redis-cli's does.
 * The bytes hidden are the password's only: a URI keeps its scheme, user
 * and host ("hourglass://ops:xxxx@host:7379"), a --mysql-password its flag.
 *
 * Thread: main, at start-up, before any other thread reads argv.
 */
#ifndef HG_COMMON_ARGV_SECRET_H
#define HG_COMMON_ARGV_SECRET_H

#include <stddef.h>
#include <stdio.h>

/* An option whose value holds a password. */
typedef struct argv_secret_opt {
    const char *name;       /* "--uri" (also "--uri=VALUE") */
    const char *short_name; /* "-u", or NULL */
    int is_uri;             /* 1: only the password of the URI's user:password@; 0: the whole value */
} argv_secret_opt_t;

/* A copy of argv[0..argc) (argv[argc] NULL) for the program to parse;
 * never NULL (out of memory aborts). Free with argv_secret_free. */
char **argv_secret_copy(int argc, char *const *argv);

void argv_secret_free(int argc, char **copy);

/* Overwrite with 'x', in place, the password in each value of opts[nopts]
 * in argv, up to a "--" argument. Returns how many were hidden; when any
 * was, writes one line to warn (NULL: none): "Warning: using a password on
 * the command line may not be safe; use <use_instead>". */
int argv_secret_hide(int argc, char **argv, const argv_secret_opt_t *opts, size_t nopts, const char *use_instead,
                     FILE *warn);

/* What every program calls first thing in main: a copy of argv for the
 * program (argv_secret_copy), and the passwords of --uri / -u URI /
 * --uri=URI and --mysql-password / --mysql-password=PW hidden in argv
 * (argv_secret_hide), the warning naming use_instead
 * ("--password-file"). Never NULL; the copy is kept for the life of the
 * process (a second call replaces it): the caller does not free it. */
char **argv_secret_protect(int argc, char **argv, const char *use_instead);

/* Overwrite with 'x' the password of uri's user:password@ in place (the
 * bytes common/uri_password.h's uri_password_span finds). 1 when there was
 * one, else 0. */
int argv_secret_hide_uri(char *uri);

#endif
