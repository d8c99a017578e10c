/*
 * tests/integration/test_check_data.c — `hourglass-broker --check-data DIR`
 * only reads DIR.
 *
 * An operator checks a directory that is evidence (a broker killed, a power
 * cut) or a backup, often on a read-only mount; the check must leave it as
 * it found it. Each test records every file of the data directory (name,
 * size, mode, mtime, a hash of its bytes) and the directory's own mtime
 * before the check and compares after:
 *  - after kill -9 (a write-ahead log not replayed yet): ok, nothing changed,
 *    no scratch view left beside it, and the broker starts on it;
 *  - with a torn write at the log's end (a power cut's): ok, the output says
 *    what the broker would cut at its next start, nothing is cut; the next
 *    start cuts it;
 *  - after a clean stop with a table block damaged: exit 1 (damaged), nothing
 *    changed;
 *  - on a read-only bind mount (in a mount namespace of the check's own):
 *    ok, nothing changed;
 *  - made read-only by `chmod -R a-w` and checked as a user other than root
 *    (nobody), where links fail and the scratch view is made of copies under
 *    $TMPDIR (a directory of nobody's: this machine's /tmp may not be
 *    writable by all): ok, nothing changed; and with a file nobody may read:
 *    exit 3, naming it;
 *  - stopped mid-check (a FIFO named like a log holds it in the view's
 *    making) by SIGTERM, SIGINT, SIGHUP: the view removed, exit 128+signal;
 *    by kill -9: the next check removes the view it left, and says so; two
 *    checks at once: neither removes the other's view;
 *  - a whole copy BACKUP made (BACKUP-WHOLE lists its files): ok, its list
 *    checked, nothing changed; its log cut on a record boundary: exit 1,
 *    naming the log, nothing changed (also on a read-only mount).
 * The tests need root (to mount, and to become nobody), as CI runs them.
 *
 * Run one suite: ./tests/integration/test_check_data check-data
 */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <CUnit/CUnit.h>

#include "tests/helpers/broker_test.h"
#include "tests/helpers/testutil.h"

#define STATE_MAX 65536
#define NOBODY    65534

/* FNV-1a over the bytes of path; 0 with *h, -1 when it cannot be read. */
static int file_hash(const char *path, uint64_t *h)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    uint64_t v = 1469598103934665603ULL;
    unsigned char buf[65536];
    ssize_t k;
    while ((k = read(fd, buf, sizeof buf)) > 0)
        for (ssize_t i = 0; i < k; i++)
            v = (v ^ buf[i]) * 1099511628211ULL;
    close(fd);
    *h = v;
    return k < 0 ? -1 : 0;
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* What dir holds, one line a file (sorted): name, size, mode, mtime in ns,
 * hash of the bytes; and the directory's own mtime. 0, or -1. */
static int dir_state(const char *dir, char *out, size_t outlen)
{
    struct stat st;
    if (stat(dir, &st) != 0)
        return -1;
    size_t n =
        (size_t)snprintf(out, outlen, "dir mtime %lld.%09ld\n", (long long)st.st_mtim.tv_sec, st.st_mtim.tv_nsec);
    DIR *d = opendir(dir);
    if (d == NULL)
        return -1;
    char *lines[512];
    size_t count = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL && count < 512) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
            continue;
        char path[1200], line[1400];
        uint64_t h = 0;
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        if (lstat(path, &st) != 0 || (S_ISREG(st.st_mode) && file_hash(path, &h) != 0)) {
            closedir(d);
            return -1;
        }
        snprintf(line, sizeof line, "%s %lld %o %lld.%09ld %016llx\n", e->d_name, (long long)st.st_size,
                 (unsigned)st.st_mode, (long long)st.st_mtim.tv_sec, st.st_mtim.tv_nsec, (unsigned long long)h);
        lines[count++] = strdup(line);
    }
    closedir(d);
    qsort(lines, count, sizeof *lines, cmp_str);
    for (size_t i = 0; i < count; i++) {
        n += (size_t)snprintf(out + (n < outlen ? n : outlen), n < outlen ? outlen - n : 0, "%s", lines[i]);
        free(lines[i]);
    }
    return n < outlen ? 0 : -1;
}

/* The names in parent that start with base ".check-" (a scratch view left behind). */
static int views_left(const char *parent, const char *base)
{
    char prefix[256];
    snprintf(prefix, sizeof prefix, "%s.check-", base);
    DIR *d = opendir(parent);
    int n = 0;
    struct dirent *e;
    while (d != NULL && (e = readdir(d)) != NULL)
        n += strncmp(e->d_name, prefix, strlen(prefix)) == 0;
    if (d != NULL)
        closedir(d);
    return n;
}

/* The N of "ok: N messages, ..." on the last line (where scripts take it,
 * as scripts/demo does with tail -1), or -1. */
static long long ok_count(const char *out)
{
    size_t len = strlen(out);
    while (len > 0 && out[len - 1] == '\n')
        len--;
    const char *last = out + len;
    while (last > out && last[-1] != '\n')
        last--;
    long long n;
    return sscanf(last, "ok: %lld messages,", &n) == 1 ? n : -1;
}

/* How the check's process is made to see the directory. */
enum check_as {
    AS_IS,        /* as the test runs (root) */
    AS_RO_MOUNT,  /* in a mount namespace of its own, the directory bind-mounted read-only */
    AS_NOBODY_RO, /* as the user nobody (the directory made read-only by chmod -R a-w) */
};

/* Start --check-data on the fixture's directory the way as says: its pid
 * (-1 when it did not start), both its streams into *fd. */
static pid_t spawn_check(enum check_as as, int *fd)
{
    const char *argv[BP_MAX_EXTRA + 4];
    int n = 0;
    argv[n++] = bt_broker.binary;
    argv[n++] = "--check-data";
    argv[n++] = bt_broker.data_dir;
    for (int i = 0; i < bt_broker.nextra; i++)
        argv[n++] = bt_broker.extra[i];
    argv[n] = NULL;
    int fds[2];
    if (pipe(fds) != 0)
        return -1;
    pid_t pid = fork();
    if (pid < 0) {
        close(fds[0]);
        close(fds[1]);
        return -1;
    }
    if (pid == 0) {
        dup2(fds[1], 1);
        dup2(fds[1], 2);
        close(fds[0]);
        close(fds[1]);
        const char *dir = bt_broker.data_dir;
        if (as == AS_RO_MOUNT) {
            if (unshare(CLONE_NEWNS) != 0 || mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) != 0 ||
                mount(dir, dir, NULL, MS_BIND, NULL) != 0 ||
                mount(NULL, dir, NULL, MS_BIND | MS_REMOUNT | MS_RDONLY, NULL) != 0) {
                printf("test: cannot bind-mount %s read-only (the test needs root, as CI runs it): %s\n", dir,
                       strerror(errno));
                _exit(126);
            }
            char probe[1200];
            snprintf(probe, sizeof probe, "%s/probe", dir);
            if (open(probe, O_WRONLY | O_CREAT, 0600) >= 0 || errno != EROFS) {
                printf("test: %s is writable after the read-only bind mount\n", dir);
                _exit(126);
            }
        }
        char tmp[1200];
        snprintf(tmp, sizeof tmp, "%s/tmp", bt_broker.dir);
        if (as == AS_NOBODY_RO &&
            ((mkdir(tmp, 0700) != 0 && errno != EEXIST) || chown(tmp, NOBODY, NOBODY) != 0 ||
             setenv("TMPDIR", tmp, 1) != 0 || setgroups(0, NULL) != 0 || setgid(NOBODY) != 0 || setuid(NOBODY) != 0)) {
            printf("test: cannot become nobody (the test needs root, as CI runs it): %s\n", strerror(errno));
            _exit(126);
        }
        execv(argv[0], (char *const *)argv);
        _exit(127);
    }
    close(fds[1]);
    *fd = fds[0];
    return pid;
}

/* Read a started check's output (both streams) into out until it ends: its
 * exit status, or -1 when a signal killed it. */
static int finish_check(pid_t pid, int fd, char *out, size_t outlen)
{
    size_t got = 0;
    ssize_t r;
    while (got < outlen - 1 && (r = read(fd, out + got, outlen - 1 - got)) > 0)
        got += (size_t)r;
    out[got] = '\0';
    close(fd);
    int status;
    if (waitpid(pid, &status, 0) != pid)
        return -1;
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

/* Run --check-data on the fixture's directory; its exit status (-1 when it
 * did not run, with why in out), its output (both streams) in out. */
static int run_check(enum check_as as, char *out, size_t outlen)
{
    int fd;
    pid_t pid = spawn_check(as, &fd);
    if (pid < 0) {
        snprintf(out, outlen, "cannot start --check-data: %s", strerror(errno));
        return -1;
    }
    return finish_check(pid, fd, out, outlen);
}

/* Check the stopped broker's directory the way as says; require exit want,
 * every file as it was, no scratch view left; out gets the output. */
static void check_leaves_dir(enum check_as as, int want, char *out, size_t outlen)
{
    static char before[STATE_MAX], after[STATE_MAX];
    BP_REQUIRE(dir_state(bt_broker.data_dir, before, sizeof before) == 0, "reading %s", bt_broker.data_dir);
    int rc = run_check(as, out, outlen);
    printf("\n    %s", out);
    BP_CHECK(rc == want, "--check-data: exit %d, want %d: %s", rc, want, out);
    BP_REQUIRE(dir_state(bt_broker.data_dir, after, sizeof after) == 0, "reading %s", bt_broker.data_dir);
    BP_CHECK(strcmp(before, after) == 0, "--check-data changed %s:\nbefore:\n%safter:\n%s", bt_broker.data_dir, before,
             after);
    BP_CHECK(views_left(bt_broker.dir, "data") == 0, "a scratch view is left in %s", bt_broker.dir);
}

/* SENDs: n ready on topic t, n on level 3; a PULL of 2 (two leases). */
static void fill(int n)
{
    char e[8192], id[32];
    for (int i = 0; i < n; i++) {
        BP_REQUIRE(bp_send(&bt_conn, id, sizeof id, e, sizeof e, "t", "ready", NULL) == 0, "%s", e);
        BP_REQUIRE(bp_send(&bt_conn, id, sizeof id, e, sizeof e, "t", "later", "LEVEL", "3", NULL) == 0, "%s", e);
    }
    resp_reply_t *r = bp_pull(&bt_conn, e, sizeof e, "g", "t", "COUNT", "2", NULL);
    BP_REQUIRE(r != NULL && r->count == 2, "PULL: %s", e);
    resp_reply_free(r);
}

/* After kill -9 the log is not replayed: a LevelDB open would write a table,
 * a manifest and a new log. Before the fix the check did; now it changes
 * nothing, and the broker then starts on the directory with every message. */
static void test_after_kill9(void)
{
    char e[8192], out[8192];
    bt_start(NULL);
    fill(50);
    rc_close(&bt_conn);
    BP_REQUIRE(bp_kill9(&bt_broker) == 0, "kill -9");
    check_leaves_dir(AS_IS, 0, out, sizeof out);
    BP_CHECK(ok_count(out) == 100, "--check-data after kill -9: want ok: 100 messages: %s", out);
    BP_CHECK(strstr(out, "read only") != NULL && strstr(out, "scratch view") != NULL,
             "--check-data does not say what it checked: %s", out);
    check_leaves_dir(AS_IS, 0, out, sizeof out); /* again: the first changed nothing a second sees */
    BP_REQUIRE(bp_restart(&bt_broker, e, sizeof e) == 0, "restart: %s", e);
    BP_REQUIRE(bp_stop(&bt_broker, e, sizeof e) == 0, "stop: %s", e);
}

/* A torn write at the log's end: before the fix the check cut it (and kept
 * the tail beside it); now it says what the broker would cut and cuts
 * nothing; the broker's next start cuts it. */
static void test_torn_log_end(void)
{
    char e[8192], out[8192];
    char log[1200];
    bt_torn_log_end(log, sizeof log);

    check_leaves_dir(AS_IS, 0, out, sizeof out);
    const char *base = strrchr(log, '/') + 1;
    char want[256];
    snprintf(want, sizeof want, "of %s at its next start", base);
    BP_CHECK(strstr(out, "the broker would cut ") != NULL && strstr(out, want) != NULL,
             "--check-data does not say what the broker would cut: %s", out);
    BP_CHECK(ok_count(out) == BT_TORN_SENT, "--check-data of the torn log: want ok: %d messages: %s", BT_TORN_SENT,
             out);

    BP_REQUIRE(bp_restart(&bt_broker, e, sizeof e) == 0, "restart after a torn log end: %s", e);
    BP_CHECK(bp_log_contains(&bt_broker, "ended in a torn write"), "the start does not say it cut a torn write");
    BP_REQUIRE(bp_stop(&bt_broker, e, sizeof e) == 0, "stop: %s", e);
}

/* The first *.ldb of dir into path, or -1. */
static long first_table(const char *dir, char *path, size_t pathlen)
{
    DIR *d = opendir(dir);
    if (d == NULL)
        return -1;
    struct dirent *e;
    long size = -1;
    while (size < 0 && (e = readdir(d)) != NULL) {
        size_t n = strlen(e->d_name);
        struct stat st;
        snprintf(path, pathlen, "%s/%s", dir, e->d_name);
        if (n > 4 && strcmp(e->d_name + n - 4, ".ldb") == 0 && stat(path, &st) == 0)
            size = (long)st.st_size;
    }
    closedir(d);
    return size;
}

/* A table block damaged after a clean stop: exit 1, and still nothing changed. */
static void test_damaged_table(void)
{
    char e[8192], out[8192];
    bt_start(NULL);
    fill(200);
    rc_close(&bt_conn);
    BP_REQUIRE(bp_stop(&bt_broker, e, sizeof e) == 0, "stop: %s", e);
    char table[1200];
    long size = first_table(bt_broker.data_dir, table, sizeof table);
    BP_REQUIRE(size > 200, "no table in %s after a clean stop", bt_broker.data_dir);
    FILE *f = fopen(table, "r+b");
    BP_REQUIRE(f != NULL && fseek(f, 100, SEEK_SET) == 0, "open %s", table);
    int c = fgetc(f);
    fseek(f, 100, SEEK_SET);
    fputc(c ^ 0x55, f);
    fclose(f);
    check_leaves_dir(AS_IS, 1, out, sizeof out);
    BP_CHECK(strstr(out, "damaged") != NULL, "--check-data of a damaged table does not say so: %s", out);
    const char *last = out; /* the last line the broker wrote: the error */
    for (const char *p = strstr(out, "check-data: "); p != NULL; p = strstr(p + 1, "check-data: "))
        last = p;
    BP_CHECK(strstr(last, bt_broker.data_dir) != NULL && strstr(last, ".check-") == NULL,
             "the error does not name %s (or names the scratch view): %s", bt_broker.data_dir, last);
}

/* A read-only bind mount of a directory killed with kill -9: before the fix
 * exit 3 ("Read-only file system"); now ok, and nothing changed. */
static void test_read_only_mount(void)
{
    char out[8192];
    bt_start(NULL);
    fill(50);
    rc_close(&bt_conn);
    BP_REQUIRE(bp_kill9(&bt_broker) == 0, "kill -9");
    check_leaves_dir(AS_RO_MOUNT, 0, out, sizeof out);
    BP_CHECK(ok_count(out) == 100, "--check-data on a read-only mount: want ok: 100 messages: %s", out);
}

/* chmod -R a-w (readable by all) and checked by nobody: no link is allowed
 * (another user's file) and nothing can be made beside the directory, so the
 * view is copies under $TMPDIR. Before the fix exit 3 ("Permission denied"). */
static void test_read_only_by_permission(void)
{
    char e[8192], out[8192];
    bt_start(NULL);
    fill(50);
    rc_close(&bt_conn);
    BP_REQUIRE(bp_stop(&bt_broker, e, sizeof e) == 0, "stop: %s", e);
    char cmd[1400];
    snprintf(cmd, sizeof cmd, "chmod 0755 '%s' && chmod -R a-w,a+rX '%s'", bt_broker.dir, bt_broker.data_dir);
    BP_REQUIRE(system(cmd) == 0, "%s", cmd);
    check_leaves_dir(AS_NOBODY_RO, 0, out, sizeof out);
    BP_CHECK(ok_count(out) == 102 && strstr(out, "0 table files hard-linked") != NULL,
             "--check-data by nobody of a read-only directory: want ok: 102 messages (the 2 leases written at the "
             "stop), the tables copied: %s",
             out);
    /* A file the user may not read: not checked (exit 3), naming it. */
    snprintf(cmd, sizeof cmd, "chmod 0400 '%s/CURRENT'", bt_broker.data_dir);
    BP_REQUIRE(system(cmd) == 0, "%s", cmd);
    check_leaves_dir(AS_NOBODY_RO, 3, out, sizeof out);
    BP_CHECK(strstr(out, "cannot read ") != NULL && strstr(out, "/CURRENT: Permission denied") != NULL &&
                 strstr(out, "TMPDIR") == NULL,
             "--check-data by nobody of an unreadable CURRENT does not name it: %s", out);
    snprintf(cmd, sizeof cmd, "chmod -R u+w '%s'", bt_broker.data_dir);
    BP_CHECK(system(cmd) == 0, "%s", cmd);
}

/* A FIFO named like a log in the data directory: the check's copy of it
 * blocks in open() until a writer comes (none does), after its scratch view
 * is made: a check that stays stopped mid-way, as long as the test wants,
 * with no knob in the broker. Returns its path in path. */
static void add_blocking_log(char *path, size_t pathlen)
{
    snprintf(path, pathlen, "%s/999999.log", bt_broker.data_dir);
    BP_REQUIRE(mkfifo(path, 0600) == 0, "mkfifo %s: %s", path, strerror(errno));
}

typedef struct views_want {
    int n;
} views_want_t;

static int views_reached(void *ctx)
{
    return views_left(bt_broker.dir, "data") == ((views_want_t *)ctx)->n;
}

/* A broker's directory after kill -9, with the blocking log in fifo: the
 * fixture of the tests below. */
static void stopped_dir_with_blocking_log(char *fifo, size_t fifolen)
{
    bt_start(NULL);
    fill(20);
    rc_close(&bt_conn);
    BP_REQUIRE(bp_kill9(&bt_broker) == 0, "kill -9");
    add_blocking_log(fifo, fifolen);
}

/* SIGTERM, SIGINT or SIGHUP mid-check: before the fix the process died with
 * its scratch view left (hard links holding old tables' space); now the view
 * is removed, the exit status is 128 + the signal and stderr says so. */
static void test_signal_mid_check(void)
{
    char out[8192], fifo[1200];
    stopped_dir_with_blocking_log(fifo, sizeof fifo);
    const int signals[] = { SIGTERM, SIGINT, SIGHUP };
    for (size_t i = 0; i < sizeof signals / sizeof signals[0]; i++) {
        int fd;
        pid_t pid = spawn_check(AS_IS, &fd);
        BP_REQUIRE(pid > 0, "cannot start --check-data");
        views_want_t one = { 1 };
        int made = tu_poll_until(views_reached, &one, 20000, 10) == 0;
        kill(pid, signals[i]);
        int rc = finish_check(pid, fd, out, sizeof out);
        printf("\n    %s", out);
        BP_CHECK(made, "no scratch view was made beside %s: %s", bt_broker.data_dir, out);
        BP_CHECK(rc == 128 + signals[i], "--check-data stopped by signal %d: exit %d, want %d: %s", signals[i], rc,
                 128 + signals[i], out);
        BP_CHECK(strstr(out, "stopped by signal") != NULL && strstr(out, "removed its scratch view") != NULL,
                 "--check-data stopped by signal %d does not say it removed its view: %s", signals[i], out);
        BP_CHECK(views_left(bt_broker.dir, "data") == 0, "signal %d: a scratch view is left in %s", signals[i],
                 bt_broker.dir);
    }
    unlink(fifo);
}

/* A check killed with kill -9 leaves its view; before the fix it stayed for
 * good (and the next check made another); now the next check of the same
 * directory removes it, says so on stderr, and checks as before. */
static void test_kill9_leftover_removed(void)
{
    char out[8192], fifo[1200];
    stopped_dir_with_blocking_log(fifo, sizeof fifo);
    int fd;
    pid_t pid = spawn_check(AS_IS, &fd);
    BP_REQUIRE(pid > 0, "cannot start --check-data");
    views_want_t one = { 1 };
    int made = tu_poll_until(views_reached, &one, 20000, 10) == 0;
    kill(pid, SIGKILL);
    int rc = finish_check(pid, fd, out, sizeof out);
    BP_REQUIRE(made && rc == -1, "--check-data was not killed mid-check (view made %d, exit %d): %s", made, rc, out);
    BP_REQUIRE(views_left(bt_broker.dir, "data") == 1, "kill -9 left no scratch view to remove: the test is void");
    unlink(fifo);
    check_leaves_dir(AS_IS, 0, out, sizeof out); /* and no view left, the old one included */
    BP_CHECK(ok_count(out) == 40, "--check-data after a killed check: want ok: 40 messages: %s", out);
    BP_CHECK(strstr(out, "removed 1 scratch view a stopped check left behind") != NULL &&
                 strstr(out, "/data.check-") != NULL,
             "--check-data does not say it removed the view a killed check left: %s", out);
    /* What only looks like a view stays: a copy of the directory (its own
     * mode, its BALLAST), an operator's file in a directory of mode 0700. */
    char copy[1400], notes[1400], cmd[4900]; /* cmd: room for the directory and three of the paths at their longest */
    snprintf(copy, sizeof copy, "%s/data.check-backup", bt_broker.dir);
    snprintf(notes, sizeof notes, "%s/data.check-notes1", bt_broker.dir);
    snprintf(cmd, sizeof cmd, "cp -a '%s' '%s' && mkdir -m 0700 '%s' && touch '%s/notes.txt'", bt_broker.data_dir, copy,
             notes, notes);
    BP_REQUIRE(system(cmd) == 0, "%s", cmd);
    rc = run_check(AS_IS, out, sizeof out);
    BP_CHECK(rc == 0 && strstr(out, "left behind") == NULL,
             "--check-data with look-alikes beside the directory: exit %d: %s", rc, out);
    BP_CHECK(views_left(bt_broker.dir, "data") == 2, "--check-data removed a directory that is not a scratch view");
    snprintf(cmd, sizeof cmd, "rm -rf '%s' '%s'", copy, notes);
    BP_CHECK(system(cmd) == 0, "%s", cmd);
}

/* Two checks of one directory at once: the second's sweep must not take the
 * first's view (its lock is held); both stopped, neither view is left. */
static void test_two_checks_at_once(void)
{
    char out[8192], fifo[1200];
    stopped_dir_with_blocking_log(fifo, sizeof fifo);
    int fd1, fd2;
    pid_t first = spawn_check(AS_IS, &fd1);
    BP_REQUIRE(first > 0, "cannot start --check-data");
    views_want_t one = { 1 }, two = { 2 };
    int made1 = tu_poll_until(views_reached, &one, 20000, 10) == 0;
    pid_t second = spawn_check(AS_IS, &fd2);
    int made2 = second > 0 && tu_poll_until(views_reached, &two, 20000, 10) == 0;
    BP_CHECK(made1 && made2, "two running checks do not have a view each (%d of them left in %s)",
             views_left(bt_broker.dir, "data"), bt_broker.dir);
    if (second > 0) {
        kill(second, SIGTERM);
        int rc = finish_check(second, fd2, out, sizeof out);
        printf("\n    second: %s", out);
        BP_CHECK(rc == 128 + SIGTERM && strstr(out, "removed 1 scratch view") == NULL,
                 "the second check: exit %d, want %d, and no view removed: %s", rc, 128 + SIGTERM, out);
    }
    BP_CHECK(views_left(bt_broker.dir, "data") == 1, "the second check took the first's view with its own");
    kill(first, SIGTERM);
    int rc = finish_check(first, fd1, out, sizeof out);
    printf("\n    first: %s", out);
    BP_CHECK(rc == 128 + SIGTERM && strstr(out, "removed its scratch view") != NULL,
             "the first check: exit %d, want %d, its view removed: %s", rc, 128 + SIGTERM, out);
    BP_CHECK(views_left(bt_broker.dir, "data") == 0, "a scratch view is left in %s", bt_broker.dir);
    unlink(fifo);
}

static int path_exists(void *ctx)
{
    struct stat st;
    return stat(ctx, &st) == 0;
}

/* A whole copy BACKUP made, put in place of the stopped broker's directory
 * (not started: it keeps BACKUP-WHOLE). The check of its list reads every
 * byte and changes none: ok, saying so. With its log cut on a record
 * boundary (to 0 bytes; "ok: 0 messages" before the list) it is exit 1,
 * naming the log, and still nothing changed, on a read-only mount too. */
static void test_whole_copy_list(void)
{
    char e[8192], out[8192], bk[512], copy[700], live[700], log[700];
    BP_REQUIRE(tu_mkdtemp("check-bk", bk, sizeof bk) == 0, "mkdtemp: %s", strerror(errno));
    const char *extra[] = { "--backup-dir", bk, NULL };
    bt_start(extra);
    fill(20);
    resp_reply_t *r = rc_cmd(&bt_conn, "BACKUP", "c", NULL);
    BP_REQUIRE(r != NULL, "BACKUP: no reply (%s)", bt_conn.err);
    resp_reply_free(r);
    snprintf(copy, sizeof copy, "%s/c", bk);
    BP_REQUIRE(tu_poll_until(path_exists, copy, 60000, 20) == 0, "no whole copy %s after 60 s", copy);
    rc_close(&bt_conn);
    BP_REQUIRE(bp_stop(&bt_broker, e, sizeof e) == 0, "stop: %s", e);
    snprintf(live, sizeof live, "%s/live", bt_broker.dir);
    BP_REQUIRE(rename(bt_broker.data_dir, live) == 0 && rename(copy, bt_broker.data_dir) == 0, "rename: %s",
               strerror(errno));
    rmdir(bk);

    check_leaves_dir(AS_IS, 0, out, sizeof out);
    BP_CHECK(ok_count(out) == 40 && strstr(out, "as its BACKUP-WHOLE lists them (sizes and CRC-32C)") != NULL,
             "--check-data of a whole copy: %s", out);

    snprintf(log, sizeof log, "%s/000003.log", bt_broker.data_dir);
    BP_REQUIRE(truncate(log, 0) == 0, "truncate %s: %s", log, strerror(errno));
    check_leaves_dir(AS_IS, 1, out, sizeof out);
    BP_CHECK(strstr(out, "BACKUP-WHOLE file lists 000003.log with ") != NULL &&
                 strstr(out, "but it has 0: truncated") != NULL,
             "--check-data of a whole copy cut on a record boundary: %s", out);
    check_leaves_dir(AS_RO_MOUNT, 1, out, sizeof out);
}

/* "--check-data --dir D", as one writes the other keys, took "--dir" for the
 * directory and said "data directory --dir does not exist": the option is
 * named, with the form to use, and nothing is checked (exit 2). */
static void test_option_as_directory(void)
{
    bt_start(NULL); /* the fixture's binary and directory; the refusal reads neither */
    const char *argv[] = { bt_broker.binary, "--check-data", "--dir", bt_broker.data_dir, NULL };
    char out[4096];
    int rc = tu_run_capture(argv, out, sizeof out);
    BP_CHECK(rc == 2 && strstr(out, "--check-data takes the data directory right after it (--check-data DIR), not "
                                    "the option '--dir'") != NULL,
             "--check-data --dir DIR: exit %d: %s", rc, out);
}

static const tu_test_t check_data_tests[] = {
    { "after kill -9: ok, nothing changed", test_after_kill9 },
    { "a torn log end: reported as what a start would cut, not cut", test_torn_log_end },
    { "a damaged table: exit 1, nothing changed", test_damaged_table },
    { "a read-only bind mount: ok, nothing changed", test_read_only_mount },
    { "chmod -R a-w, checked as nobody: ok, nothing changed", test_read_only_by_permission },
    { "SIGTERM/SIGINT/SIGHUP mid-check: its scratch view removed, exit 128+signal", test_signal_mid_check },
    { "a kill -9'd check's view: removed by the next check, and said", test_kill9_leftover_removed },
    { "two checks at once: neither removes the other's view", test_two_checks_at_once },
    { "a whole copy: its list checked, every byte read, nothing changed", test_whole_copy_list },
    { "--check-data --dir DIR: the option named, not taken for the directory", test_option_as_directory },
    { NULL, NULL },
};

int main(int argc, char **argv)
{
    return bt_main(argc, argv, "check-data", check_data_tests);
}
