/*
 * cli/cmd_passwd.c — `hourglass-cli passwd`: make a password hash for the
 * broker's users file (docs/security.md). Local: no broker is contacted.
 *
 *   hourglass-cli passwd [--pbkdf2] [--cost N] [USER ROLES]
 *
 * The password is read from the terminal without echo (asked twice), or,
 * when stdin is not a terminal, as the first line of stdin (for scripts:
 * `printf '%s\n' "$pw" | hourglass-cli passwd`). It never comes from the
 * command line, where `ps` and shell histories would show it. Prints the
 * hash (common/passwd.h's format), or with USER and ROLES a whole users-file
 * line "USER ROLES HASH". --cost: scrypt's log2(N) (10..18 with r=8: at
 * most 256 MiB; default 15) or PBKDF2's iterations (1000..10000000, default
 * 600000). Every argument — USER, ROLES, --cost — is checked before the
 * password is asked; a bad one is a usage error (exit 2).
 *
 * Single-threaded.
 */
#include "cli/cli.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <termios.h>
#include <unistd.h>

#include "base/err.h"
#include "cli/args.h"
#include "common/passwd.h"

#define PW_MAX                   PASSWD_MAX /* the broker's AUTH refuses a longer password (common/passwd.h) */
#define USER_NAME_MAX            64         /* the broker's users-file limit (docs/security.md) */
#define PASSWD_CLI_SCRYPT_LN_MIN 10         /* passwd_params_check's low bound */
#define PASSWD_CLI_SCRYPT_LN_MAX 18         /* with r=8, ln 19 needs 512 MiB: more than the broker reads */

/* USER and ROLES as the broker's users file takes them (docs/security.md):
 * a name of 1..64 of A-Z a-z 0-9 . _ @ -, and roles a comma-separated list
 * of producer, consumer, admin, viewer. A line the broker would refuse makes
 * it refuse the whole file (at start: it does not start), so it is refused
 * here, before the password is asked. 0, or -1 with the problem in err. */
static int check_user_roles(const char *user, const char *roles, char *err, size_t errlen)
{
    static const char *const names[] = { "producer", "consumer", "admin", "viewer" };
    size_t n = strlen(user);

    if (n == 0 || n > USER_NAME_MAX)
        return err_set(err, errlen, "user name '%.80s' must be 1..%d bytes", user, USER_NAME_MAX);
    for (size_t i = 0; i < n; i++)
        if (!isalnum((unsigned char)user[i]) && strchr("._@-", user[i]) == NULL)
            return err_set(err, errlen, "user name '%.80s' has a character other than A-Z a-z 0-9 . _ @ -", user);
    for (const char *r = roles;; r++) {
        size_t len = strcspn(r, ","), k = 0;
        while (k < 4 && (strlen(names[k]) != len || strncmp(names[k], r, len) != 0))
            k++;
        if (k == 4)
            return err_set(err, errlen,
                           "unknown role '%.*s' in '%.80s' (want producer, consumer, admin or viewer, "
                           "comma-separated)",
                           (int)(len > 32 ? 32 : len), r, roles);
        r += len;
        if (*r == '\0')
            return 0;
    }
}

/* Read one line (without its newline and a "\r" before it) of at most
 * PW_MAX bytes from fd into buf[len] (len > PW_MAX + 1). 0, or -1 at EOF
 * before any byte / on a read error, READ_NUL when it holds a NUL byte (the
 * hash would cover only the bytes before it, while a client's AUTH sends
 * them all), READ_LONG when it is longer than PW_MAX (the rest of the line
 * is left unread). */
#define READ_NUL  (-2)
#define READ_LONG (-3)
static int read_line(int fd, char *buf, size_t len)
{
    size_t n = 0;
    if (len < PW_MAX + 2) {
        return -1;
    }
    for (;;) {
        char ch;
        ssize_t r = read(fd, &ch, 1);
        if (r < 0 && errno == EINTR) {
            continue;
        }
        if (r <= 0) {
            if (n == 0) {
                return -1;
            }
            break;
        }
        if (ch == '\n') {
            break;
        }
        if (ch == '\0') {
            memset(buf, 0, len);
            return READ_NUL;
        }
        if (n == PW_MAX + 1) { /* room for PW_MAX bytes and a "\r" before the newline */
            memset(buf, 0, len);
            return READ_LONG;
        }
        buf[n++] = ch;
    }
    if (n > 0 && buf[n - 1] == '\r') {
        n--;
    }
    if (n > PW_MAX) {
        memset(buf, 0, len);
        return READ_LONG;
    }
    buf[n] = '\0';
    return 0;
}

/* Prompt on the terminal tty with echo off; read one line from it. */
static int read_tty(int tty, const char *prompt, char *buf, size_t len)
{
    struct termios old, quiet;
    int rc;
    if (write(tty, prompt, strlen(prompt)) < 0 || tcgetattr(tty, &old) != 0) {
        return -1;
    }
    quiet = old;
    quiet.c_lflag &= ~(tcflag_t)(ECHO | ECHONL);
    quiet.c_lflag |= ICANON;
    if (tcsetattr(tty, TCSAFLUSH, &quiet) != 0) {
        return -1;
    }
    rc = read_line(tty, buf, len);
    tcsetattr(tty, TCSAFLUSH, &old);
    if (write(tty, "\n", 1) < 0) {
        rc = -1;
    }
    return rc;
}

int cli_cmd_passwd(cli_t *cli, int argc, char **argv)
{
    cli_opt_t opts[] = { { "--pbkdf2", 0, NULL }, { "--cost", 1, NULL }, { NULL, 0, NULL } };
    char *pos[2];
    int code = 0;
    int npos = cli_parse_args(cli_find_command("passwd"), argc, argv, opts, pos, 2, &code);
    char pw[PW_MAX + 2], again[PW_MAX + 2], hash[PASSWD_HASH_MAX], err[256];
    passwd_params_t params;

    (void)cli;
    if (npos < 0) {
        return code;
    }
    if (npos == 1) {
        return cli_usage_error("passwd: USER needs ROLES too (e.g. producer or consumer,viewer)");
    }
    if (npos == 2 && check_user_roles(pos[0], pos[1], err, sizeof err) != 0) {
        return cli_usage_error("passwd: %s", err);
    }
    /* Every argument is checked here, before the password is asked: a bad
     * --cost found by passwd_hash would come after the user typed it twice. */
    passwd_params_default(&params, opts[0].value != NULL ? PASSWD_PBKDF2_SHA256 : PASSWD_SCRYPT);
    if (opts[1].value != NULL) {
        const char *what = params.kind == PASSWD_SCRYPT ? "scrypt's ln" : "PBKDF2's iterations";
        uint64_t v;
        if (cli_parse_u64(opts[1].value, &v) < 0) {
            return cli_usage_error("passwd: --cost '%.40s' is not a whole number (%s)", opts[1].value, what);
        }
        if (v > UINT_MAX) {
            return cli_usage_error("passwd: --cost %.40s is out of range (%s)", opts[1].value, what);
        }
        if (params.kind == PASSWD_SCRYPT) {
            /* passwd_params_check's 10..20 is what the broker reads for any r;
             * with passwd's r=8, ln 19 and 20 are past its 256 MiB: say 10..18
             * at once rather than a range whose top is refused too. */
            if (v < PASSWD_CLI_SCRYPT_LN_MIN || v > PASSWD_CLI_SCRYPT_LN_MAX) {
                return cli_usage_error("passwd: --cost %.40s is out of range for scrypt's ln: %d..%d (r=8; ln 19 "
                                       "needs 512 MiB, past the 256 MiB the broker reads; --pbkdf2 for iterations)",
                                       opts[1].value, PASSWD_CLI_SCRYPT_LN_MIN, PASSWD_CLI_SCRYPT_LN_MAX);
            }
            params.log2_n = (unsigned)v;
        } else {
            params.iterations = (unsigned)v;
        }
        if (passwd_params_check(&params, err, sizeof err) != 0) {
            return cli_usage_error("passwd: --cost %.40s: %s", opts[1].value, err);
        }
    }
    if (isatty(STDIN_FILENO)) {
        int tty = open("/dev/tty", O_RDWR | O_CLOEXEC);
        if (tty < 0) {
            return cli_fail(EXIT_USAGE, "passwd: cannot open the terminal: %s", strerror(errno));
        }
        int rc = read_tty(tty, "Password: ", pw, sizeof pw);
        if (rc == 0) {
            rc = read_tty(tty, "Again: ", again, sizeof again);
        }
        close(tty);
        if (rc == READ_NUL) {
            return cli_fail(EXIT_USAGE, "passwd: the password has a NUL byte (no hash could match what AUTH sends)");
        }
        if (rc == READ_LONG) {
            return cli_fail(EXIT_USAGE, "passwd: the password is longer than %d bytes (the broker's AUTH refuses it)",
                            PW_MAX);
        }
        if (rc != 0) {
            return cli_fail(EXIT_USAGE, "passwd: no password read");
        }
        int same = strcmp(pw, again) == 0;
        memset(again, 0, sizeof again);
        if (!same) {
            memset(pw, 0, sizeof pw);
            return cli_fail(EXIT_USAGE, "passwd: the two passwords differ");
        }
    } else {
        int rc = read_line(STDIN_FILENO, pw, sizeof pw);
        if (rc == READ_NUL) {
            return cli_fail(EXIT_USAGE, "passwd: the password on stdin has a NUL byte (no hash could match what AUTH "
                                        "sends)");
        }
        if (rc == READ_LONG) {
            return cli_fail(EXIT_USAGE,
                            "passwd: the password on stdin is longer than %d bytes (the broker's AUTH refuses it)",
                            PW_MAX);
        }
        if (rc != 0) {
            return cli_fail(EXIT_USAGE, "passwd: no password on stdin (one line, at most %d bytes)", PW_MAX);
        }
    }
    int rc = passwd_hash(pw, strlen(pw), &params, hash, sizeof hash, err, sizeof err);
    memset(pw, 0, sizeof pw);
    if (rc != 0) {
        return cli_fail(EXIT_USAGE, "passwd: %s", err);
    }
    if (npos == 2) {
        printf("%s %s %s\n", pos[0], pos[1], hash);
    } else {
        printf("%s\n", hash);
    }
    return 0;
}
