/*
 * tests/helpers/testutil.c — the helpers every test uses (contract in testutil.h).
 *
 * Design:
 * - Temp directories. Every test writes only below tu_temp_root() ($TMPDIR, or
 *   /tmp when unset or empty), in directories named hg-<tag>-XXXXXX made by
 *   mkdtemp. tu_rmtree resolves both the root and the victim with realpath and
 *   deletes only a path strictly inside the root whose first component starts
 *   with "hg-" — i.e. only what tu_mkdtemp made — so a bad path in a test can
 *   never remove anything else. The walk is nftw(FTW_DEPTH | FTW_PHYS): it never
 *   follows a symlink out of the tree.
 * - Time. Waiting is always "poll a condition until a deadline" on the
 *   monotonic clock (tu_poll_until); a fixed sleep is never the synchronisation.
 * - A private MariaDB. tu_mariadb_start runs mariadb-install-db into DIR/data and
 *   starts /usr/sbin/mariadbd with --no-defaults (no /etc/mysql config can leak
 *   in), --skip-networking and a unix socket DIR/mysql.sock, so it can neither
 *   clash with nor be confused with a system server. Root logs in with an empty
 *   password over that socket (--auth-root-authentication-method=normal). It is
 *   ready when mysql_real_connect over the socket succeeds; if mariadbd exits
 *   first or the deadline passes, the caller gets -1 and the tail of the
 *   server's own log. Measured on Debian 12 / MariaDB 10.11: install ~0.6 s,
 *   start to first connection ~0.1-0.2 s. With tmpfs_size set, DIR/data is a
 *   tmpfs of its own (a test fills it: MariaDB's disk full), unmounted by
 *   tu_mariadb_stop; tu_mariadb_restart starts mariadbd again on the same
 *   DIR after it exited (it aborts on a full disk), crash recovery included.
 * - The server child is isolated: own session (setsid, so a signal sent to the
 *   test's process group does not hit it), stdin from /dev/null, stdout/stderr
 *   to DIR/mariadbd.out, every other descriptor closed, default signal
 *   dispositions and an empty signal mask. PR_SET_PDEATHSIG(SIGKILL) ties its
 *   life to the thread that started it, so a test that crashes or is killed by
 *   the harness's timeout leaves no mariadbd behind. Consequence: call
 *   tu_mariadb_start from a thread that outlives the server (the main thread,
 *   or a suite init function, which runs on it).
 * - CUnit. tu_cunit_main reads every failure counter (assertions, failed
 *   tests, failed suite init/cleanup) before CU_cleanup_registry, because
 *   CU_basic_run_tests returns success even when tests fail, and a suite whose
 *   init fails runs no tests at all and must still fail the program. Each
 *   case's line carries its wall time ("passed (12.3 s)"), so slow cases show
 *   in every log.
 *   tu_suites_main / tu_add_suite build the registry from tables of tests.
 *   TU_CHECK / TU_REQUIRE (and broker_proc.h's BP_CHECK / BP_REQUIRE, the
 *   same macros under other names) are the one formatted assertion every
 *   suite uses. The macro tests the condition and calls tu_check_passed_at or
 *   tu_check_failed_at: the message's arguments sit in the failing branch
 *   only, so a passing check never evaluates them (an argument valid only on
 *   failure cannot fault), while the printf attribute on tu_check_failed_at
 *   still checks every call site's format.
 *
 * Single-threaded use is assumed (tests call these from the main thread).
 */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include "tests/helpers/testutil.h"

#include "base/err.h"
#include "tests/helpers/loopback_dial.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <poll.h>
#include <limits.h>
#include <netinet/in.h>
#include <arpa/inet.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <CUnit/Basic.h>
#include <mysql.h>

#ifndef TU_MARIADBD_PATH /* overridable at compile time, for testing the failure path */
#define TU_MARIADBD_PATH "/usr/sbin/mariadbd"
#endif
#define TU_INSTALL_DB_PATH             "/usr/bin/mariadb-install-db"
#define TU_MARIADB_INSTALL_DEADLINE_MS 120000 /* install-db: ~0.6 s measured */
#define TU_MARIADB_START_DEADLINE_MS   60000  /* first connection: ~0.2 s measured */
#define TU_MARIADB_STOP_DEADLINE_MS    30000  /* SIGTERM → exit, then SIGKILL */
#define TU_LOG_TAIL_BYTES              2048   /* at most this much of a log goes into err */

/* ---------------------------------------------------------------- errors */

/* Append the last lines (at most TU_LOG_TAIL_BYTES, and what fits) of the
 * file at path to err, after a one-line heading. Never fails: a missing or
 * empty file is said so in err. */
static void append_log_tail(char *err, size_t errlen, const char *path)
{
    if (err == NULL || errlen == 0)
        return;
    size_t used = strlen(err);
    if (used + 1 >= errlen)
        return;
    size_t room = errlen - used - 1;

    char tail[TU_LOG_TAIL_BYTES + 1];
    size_t n = 0;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd >= 0) {
        struct stat st;
        if (fstat(fd, &st) == 0) {
            off_t want = st.st_size < TU_LOG_TAIL_BYTES ? st.st_size : TU_LOG_TAIL_BYTES;
            ssize_t r = pread(fd, tail, (size_t)want, st.st_size - want);
            if (r > 0)
                n = (size_t)r;
        }
        close(fd);
    }
    if (n == 0) {
        snprintf(err + used, room + 1, "\n(%s is %s)", strrchr(path, '/') != NULL ? strrchr(path, '/') + 1 : path,
                 fd < 0 ? "missing" : "empty");
        return;
    }
    tail[n] = '\0';

    /* Keep what fits after the heading, starting at a line boundary. */
    /* Name the file, not its path: the caller removes the dir right after. */
    const char *name = strrchr(path, '/') != NULL ? strrchr(path, '/') + 1 : path;
    char heading[700];
    int hl = snprintf(heading, sizeof heading, "\n--- last lines of the server's %s ---\n", name);
    if (hl < 0 || (size_t)hl >= room)
        return;
    size_t body_room = room - (size_t)hl;
    const char *body = tail;
    if (n > body_room)
        body = tail + (n - body_room);
    if (body != tail || n == TU_LOG_TAIL_BYTES) {
        const char *nl = strchr(body, '\n');
        if (nl != NULL && nl[1] != '\0')
            body = nl + 1;
    }
    snprintf(err + used, room + 1, "%s%s", heading, body);
}

void tu_die(const char *prog, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "%s: ", prog);
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\n");
    va_end(ap);
    exit(1);
}

/* ---------------------------------------------------------------- temp dirs */

/* The temp root: $TMPDIR when set and non-empty, else /tmp. Never NULL. */
static const char *tu_temp_root(void)
{
    const char *t = getenv("TMPDIR");
    return (t != NULL && t[0] != '\0') ? t : "/tmp";
}

int tu_mkdtemp(const char *tag, char *path, size_t pathlen)
{
    if (tag == NULL || tag[0] == '\0' || strchr(tag, '/') != NULL || path == NULL) {
        errno = EINVAL;
        return -1;
    }
    const char *root = tu_temp_root();
    size_t rl = strlen(root);
    while (rl > 1 && root[rl - 1] == '/') /* "/tmp/" → "/tmp" */
        rl--;
    int n = snprintf(path, pathlen, "%.*s/hg-%s-XXXXXX", (int)rl, root, tag);
    if (n < 0 || (size_t)n >= pathlen) {
        errno = ENAMETOOLONG;
        return -1;
    }
    return mkdtemp(path) != NULL ? 0 : -1;
}

static int rmtree_entry(const char *fpath, const struct stat *sb, int typeflag, struct FTW *ftwbuf)
{
    (void)sb;
    (void)ftwbuf;
    int rc = (typeflag == FTW_DP) ? rmdir(fpath) : unlink(fpath);
    if (rc != 0 && errno != ENOENT) {
        fprintf(stderr, "tu_rmtree: cannot remove %s: %s\n", fpath, strerror(errno));
        return -1;
    }
    return 0;
}

/* The end of the last non-zero byte of the file at path (its size when that cannot be read). */
static long long written_end(const char *path, long long size)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return size;
    char buf[65536];
    long long end = size;
    while (end > 0) {
        long long at = end > (long long)sizeof buf ? end - (long long)sizeof buf : 0;
        ssize_t n = pread(fd, buf, (size_t)(end - at), at);
        if (n != end - at) {
            close(fd);
            return size;
        }
        while (n > 0 && buf[n - 1] == 0)
            n--;
        if (n > 0) {
            close(fd);
            return at + n;
        }
        end = at;
    }
    close(fd);
    return 0;
}

long long tu_store_bytes_used(const char *dir)
{
    DIR *d = opendir(dir);
    if (d == NULL)
        return -1;
    long long best = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        char p[PATH_MAX];
        struct stat st;
        snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
        if (stat(p, &st) != 0 || !S_ISREG(st.st_mode))
            continue;
        size_t len = strlen(e->d_name);
        int segment = strncmp(e->d_name, "clog-", 5) == 0 && len > 4 && strcmp(e->d_name + len - 4, ".seg") == 0;
        long long used = segment ? written_end(p, (long long)st.st_size) : (long long)st.st_size;
        if (used > best)
            best = used;
    }
    closedir(d);
    return best;
}

int tu_rmtree(const char *path)
{
    if (path == NULL || path[0] == '\0') {
        errno = EINVAL;
        return -1;
    }
    char real_root[PATH_MAX], real_path[PATH_MAX];
    if (realpath(tu_temp_root(), real_root) == NULL)
        return -1;
    if (realpath(path, real_path) == NULL)
        return errno == ENOENT ? 0 : -1; /* like rm -rf: nothing there is fine */

    size_t rl = strlen(real_root);
    if (rl == 1) /* root is "/": compare against "" so the '/' test below works */
        rl = 0;
    if (strncmp(real_path, real_root, rl) != 0 || real_path[rl] != '/' || strncmp(real_path + rl + 1, "hg-", 3) != 0) {
        fprintf(stderr, "tu_rmtree: refusing to remove %s (%s): not an hg-* directory under %s\n", path, real_path,
                real_root);
        errno = EPERM;
        return -1;
    }
    return nftw(real_path, rmtree_entry, 32, FTW_DEPTH | FTW_PHYS) == 0 ? 0 : -1;
}

/* ---------------------------------------------------------------- ports, time */

#define TU_PORT_LOW 10000 /* the lowest port tu_free_port picks */

/* The first port of the kernel's ephemeral range (Linux's default 32768
 * when it cannot be read). */
static int ephemeral_low(void)
{
    int lo = 32768, hi = 60999;
    FILE *f = fopen("/proc/sys/net/ipv4/ip_local_port_range", "r");
    if (f != NULL) {
        if (fscanf(f, "%d %d", &lo, &hi) != 2)
            lo = 32768;
        fclose(f);
    }
    return lo;
}

/* Bind a TCP socket to 127.0.0.1:port (0: any), without SO_REUSEADDR, so a
 * port in any use (a listener, a connection's end, TIME_WAIT) fails; the
 * port bound, or -1. */
static int bind_port(int port)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -1;
    struct sockaddr_in sa;
    memset(&sa, 0, sizeof sa);
    sa.sin_family = AF_INET;
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    sa.sin_port = htons((uint16_t)port);
    socklen_t len = sizeof sa;
    int bound = -1;
    if (bind(fd, (struct sockaddr *)&sa, sizeof sa) == 0 && getsockname(fd, (struct sockaddr *)&sa, &len) == 0)
        bound = ntohs(sa.sin_port);
    close(fd);
    return bound;
}

#define TU_PORT_CLAIM_DIR "/tmp/hg-test-ports" /* one lock file per claimed port */
#define TU_PORT_CLAIMS    64                   /* claims one process holds at once */

/* Claims port among this machine's test processes, which run two at a time
 * (make -j2 check): an flock on TU_PORT_CLAIM_DIR/PORT, held until
 * TU_PORT_CLAIMS later claims of this process push it out or the process
 * ends (however it ends: the kernel drops the lock). A bind proves a port
 * free only at that instant, and a program binds it later — a broker, a
 * console, MariaDB — so without the claim two tests could pick the same port
 * in that window and one reach the other's server. 0 when another process
 * (or an earlier claim of this one) holds it; 1 when claimed, or when no
 * claim can be made at all (no lock file): the bind still stands alone. */
static int claim_port(int port)
{
    static int held[TU_PORT_CLAIMS];
    static int next = -1;
    if (next < 0) {
        for (int i = 0; i < TU_PORT_CLAIMS; i++)
            held[i] = -1;
        next = 0;
        (void)mkdir(TU_PORT_CLAIM_DIR, 01777);
    }
    char path[64];
    snprintf(path, sizeof path, TU_PORT_CLAIM_DIR "/%d", port);
    int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0666);
    if (fd < 0)
        return 1;
    if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
        int taken = errno == EWOULDBLOCK;
        close(fd);
        return !taken;
    }
    if (held[next] >= 0)
        close(held[next]);
    held[next] = fd;
    next = (next + 1) % TU_PORT_CLAIMS;
    return 1;
}

int tu_free_port(void)
{
    static uint64_t state; /* xorshift64, seeded per process */
    if (state == 0)
        state = (tu_now_mono_ms() * UINT64_C(6364136223846793005)) ^ ((uint64_t)getpid() << 32) ^ 1;
    int high = ephemeral_low();
    for (int i = 0; high - TU_PORT_LOW >= 1000 && i < 1000; i++) {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        int port = TU_PORT_LOW + (int)(state % (uint64_t)(high - TU_PORT_LOW));
        if (claim_port(port) && bind_port(port) == port)
            return port;
    }
    return bind_port(0); /* no room below the ephemeral range */
}

static uint64_t clock_ms(clockid_t clock)
{
    struct timespec ts;
    clock_gettime(clock, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

uint64_t tu_now_mono_ms(void)
{
    return clock_ms(CLOCK_MONOTONIC);
}

uint64_t tu_now_wall_ms(void)
{
    return clock_ms(CLOCK_REALTIME);
}

uint64_t tu_now_mono_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000u + (uint64_t)ts.tv_nsec / 1000u;
}

double tu_proc_cpu_secs(pid_t pid)
{
    char path[64], buf[1024];
    snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
    FILE *f = fopen(path, "r");
    if (f == NULL)
        return -1;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = '\0';
    const char *p = strrchr(buf, ')'); /* the fields after "(comm)": comm may hold spaces */
    unsigned long long utime = 0, stime = 0;
    /* state ppid pgrp session tty tpgid flags minflt cminflt majflt cmajflt utime stime */
    if (p == NULL || sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu", &utime, &stime) != 2)
        return -1;
    return (double)(utime + stime) / (double)sysconf(_SC_CLK_TCK);
}

static void sleep_ms(uint64_t ms)
{
    struct timespec ts = { .tv_sec = (time_t)(ms / 1000), .tv_nsec = (long)(ms % 1000) * 1000000L };
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
        ;
}

typedef struct file_text {
    const char *path, *text;
} file_text_t;

/* 1 when the file holds text (read whole: test logs are small). */
static int file_has_text(void *arg)
{
    const file_text_t *ft = arg;
    FILE *f = fopen(ft->path, "r");
    if (f == NULL)
        return 0;
    size_t cap = 1 << 16, len = 0;
    char *buf = malloc(cap);
    size_t n;
    while (buf != NULL && (n = fread(buf + len, 1, cap - len - 1, f)) > 0) {
        len += n;
        if (cap - len - 1 == 0) {
            char *bigger = realloc(buf, cap * 2);
            if (bigger == NULL)
                break;
            buf = bigger;
            cap *= 2;
        }
    }
    fclose(f);
    if (buf == NULL)
        return 0;
    buf[len] = '\0';
    int found = strstr(buf, ft->text) != NULL;
    free(buf);
    return found;
}

int tu_wait_file_contains(const char *path, const char *text, int deadline_ms)
{
    file_text_t ft = { path, text };
    return tu_poll_until(file_has_text, &ft, deadline_ms, 20);
}

int tu_write_file(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    if (f == NULL)
        return -1;
    int bad = fputs(text, f) < 0;
    bad |= fclose(f) != 0;
    return bad ? -1 : 0;
}

int tu_wait_exit(pid_t pid, int deadline_ms, uint64_t *ms)
{
    uint64_t t0 = tu_now_mono_ms();
    int status = 0;
    pid_t r = 0;
    while ((r = waitpid(pid, &status, WNOHANG)) == 0 && tu_now_mono_ms() - t0 < (uint64_t)deadline_ms) {
        struct timespec ts = { 0, 10000000 };
        nanosleep(&ts, NULL);
    }
    *ms = tu_now_mono_ms() - t0;
    if (r != pid) {
        kill(pid, SIGKILL);
        waitpid(pid, NULL, 0);
        return -1;
    }
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

int tu_poll_until(int (*cond)(void *ctx), void *ctx, int deadline_ms, int interval_ms)
{
    if (interval_ms <= 0)
        interval_ms = 10;
    uint64_t deadline = tu_now_mono_ms() + (uint64_t)(deadline_ms > 0 ? deadline_ms : 0);
    for (;;) {
        if (cond(ctx))
            return 0;
        uint64_t now = tu_now_mono_ms();
        if (now >= deadline)
            return -1;
        uint64_t left = deadline - now;
        sleep_ms(left < (uint64_t)interval_ms ? left : (uint64_t)interval_ms);
    }
}

/* ---------------------------------------------------------------- processes */

/* Fork and exec argv[0] (an absolute path) as an isolated child: own session,
 * stdin /dev/null, stdout+stderr appended to out_path, no other descriptors,
 * default signals, killed when the calling thread dies. Returns the pid, or -1
 * with err set. */
static pid_t spawn_isolated(char *const argv[], const char *out_path, char *err, size_t errlen)
{
    if (access(argv[0], X_OK) != 0) {
        err_set(err, errlen, "%s: %s (install the Debian package mariadb-server)", argv[0], strerror(errno));
        return -1;
    }
    pid_t parent = getpid();
    pid_t pid = fork();
    if (pid < 0) {
        err_set(err, errlen, "fork: %s", strerror(errno));
        return -1;
    }
    if (pid > 0)
        return pid;

    /* Child: only async-signal-safe calls from here to exec. */
    setsid();
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) /* the parent died before prctl took effect */
        _exit(126);

    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, NULL);
    for (int sig = 1; sig < NSIG; sig++)
        signal(sig, SIG_DFL); /* fails harmlessly for KILL/STOP/invalid numbers */

    int in = open("/dev/null", O_RDONLY);
    int out = open(out_path, O_WRONLY | O_CREAT | O_APPEND, 0644);
    if (in < 0 || out < 0)
        _exit(126);
    if (dup2(in, 0) < 0 || dup2(out, 1) < 0 || dup2(out, 2) < 0)
        _exit(126);
    if (close_range(3, ~0U, 0) != 0) {
        long max = sysconf(_SC_OPEN_MAX);
        for (long fd = 3; fd < (max > 0 && max < 65536 ? max : 65536); fd++)
            close((int)fd);
    }
    execv(argv[0], argv);
    dprintf(2, "exec %s: %s\n", argv[0], strerror(errno));
    _exit(127);
}

/* Describe a wait status ("exited with status 1", "was killed by signal 9"). */
static void describe_status(int status, char *buf, size_t len)
{
    if (WIFEXITED(status))
        snprintf(buf, len, "exited with status %d", WEXITSTATUS(status));
    else if (WIFSIGNALED(status))
        snprintf(buf, len, "was killed by signal %d (%s)", WTERMSIG(status), strsignal(WTERMSIG(status)));
    else
        snprintf(buf, len, "stopped with wait status 0x%x", status);
}

struct child_wait {
    pid_t pid;
    int status;
    int reaped;
};

static int child_exited(void *ctx)
{
    struct child_wait *cw = ctx;
    if (cw->reaped)
        return 1;
    pid_t r = waitpid(cw->pid, &cw->status, WNOHANG);
    if (r == cw->pid || (r < 0 && errno == ECHILD))
        cw->reaped = 1;
    return cw->reaped;
}

/* Wait up to deadline_ms for pid to exit; SIGKILL it (and wait) after that.
 * Returns 0 and the status in *status when it exited in time, -1 when it
 * had to be killed. */
static int wait_or_kill(pid_t pid, int deadline_ms, int *status)
{
    struct child_wait cw = { .pid = pid };
    int rc = tu_poll_until(child_exited, &cw, deadline_ms, 20);
    if (rc != 0) {
        kill(pid, SIGKILL);
        while (waitpid(pid, &cw.status, 0) < 0 && errno == EINTR)
            ;
    }
    if (status != NULL)
        *status = cw.status;
    return rc;
}

/* ---------------------------------------------------------------- MariaDB */

struct mariadb_probe {
    tu_mariadb_t *db;
    struct child_wait child;
    unsigned last_errno;
    char last_error[256];
};

/* Ready when a root login over the socket works; also stops the polling when
 * the server process has exited (the caller tells the two apart). */
static int mariadb_ready_or_dead(void *ctx)
{
    struct mariadb_probe *p = ctx;
    if (child_exited(&p->child))
        return 1;
    MYSQL *m = mysql_init(NULL);
    if (m == NULL)
        return 0;
    unsigned timeout_s = 5;
    mysql_options(m, MYSQL_OPT_CONNECT_TIMEOUT, &timeout_s);
    int ok = mysql_real_connect(m, NULL, "root", "", NULL, 0, p->db->socket, 0) != NULL;
    if (!ok) {
        p->last_errno = mysql_errno(m);
        snprintf(p->last_error, sizeof p->last_error, "%s", mysql_error(m));
    }
    mysql_close(m);
    return ok;
}

/* Steps 2 and 3 of tu_mariadb_start (and all of tu_mariadb_restart): spawn
 * mariadbd on db->dir's data and wait until it accepts a root login. 0, or
 * -1 with err (db->pid 0 when it died; the caller stops what is left). */
static int run_server(tu_mariadb_t *db, char *err, size_t errlen)
{
    char datadir[600], pidfile[600], errlog[600], outlog[600], tmpdir[600], opt_datadir[620], opt_tmpdir[620];
    snprintf(datadir, sizeof datadir, "%s/data", db->dir);
    snprintf(pidfile, sizeof pidfile, "%s/mariadbd.pid", db->dir);
    snprintf(errlog, sizeof errlog, "%s/error.log", db->dir);
    snprintf(outlog, sizeof outlog, "%s/mariadbd.out", db->dir);
    snprintf(tmpdir, sizeof tmpdir, "%s/tmp", db->dir);
    snprintf(opt_datadir, sizeof opt_datadir, "--datadir=%s", datadir);
    snprintf(opt_tmpdir, sizeof opt_tmpdir, "--tmpdir=%s", tmpdir);
    int as_root = geteuid() == 0;

    char opt_socket[620], opt_pidfile[620], opt_errlog[620], opt_network[40];
    snprintf(opt_socket, sizeof opt_socket, "--socket=%s", db->socket);
    if (db->tcp_port > 0)
        snprintf(opt_network, sizeof opt_network, "--port=%d", db->tcp_port);
    else
        snprintf(opt_network, sizeof opt_network, "--skip-networking");
    snprintf(opt_pidfile, sizeof opt_pidfile, "--pid-file=%s", pidfile);
    snprintf(opt_errlog, sizeof opt_errlog, "--log-error=%s", errlog);
    char *server_argv[] = {
        TU_MARIADBD_PATH,
        "--no-defaults",
        opt_datadir,
        opt_tmpdir,
        opt_socket,
        opt_network,
        "--bind-address=127.0.0.1", /* only with tcp_port: skip-networking otherwise */
        opt_pidfile,
        opt_errlog,
        "--innodb-buffer-pool-size=64M",
        "--innodb-log-file-size=16M",
        "--skip-name-resolve",
        "--character-set-server=utf8mb4",
        "--collation-server=utf8mb4_general_ci",
        as_root ? "--user=root" : NULL,
        NULL,
        NULL, /* room for TU_MARIADB_MAX_EXTRA flags of db->extra_args */
        NULL,
        NULL,
        NULL,
        NULL,
        NULL,
        NULL,
        NULL,
    };
    size_t argc = 0;
    while (server_argv[argc] != NULL)
        argc++;
    for (size_t i = 0; db->extra_args != NULL && db->extra_args[i] != NULL; i++) {
        if (i == TU_MARIADB_MAX_EXTRA) {
            err_set(err, errlen, "more than %d extra mariadbd flags", TU_MARIADB_MAX_EXTRA);
            return -1;
        }
        server_argv[argc++] = (char *)db->extra_args[i];
    }
    uint64_t t0 = tu_now_mono_ms();
    db->pid = spawn_isolated(server_argv, outlog, err, errlen);
    if (db->pid < 0) {
        db->pid = 0;
        return -1;
    }

    /* 3. Wait until it accepts a root login, or dies. */
    mysql_library_init(0, NULL, NULL); /* idempotent; before any MYSQL handle */
    struct mariadb_probe probe = { .db = db, .child = { .pid = db->pid } };
    int rc = tu_poll_until(mariadb_ready_or_dead, &probe, TU_MARIADB_START_DEADLINE_MS, 20);
    if (probe.child.reaped) {
        char how[80];
        describe_status(probe.child.status, how, sizeof how);
        err_set(err, errlen, "mariadbd (pid %d) %s before accepting connections", (int)db->pid, how);
        db->pid = 0;
        append_log_tail(err, errlen, errlog);
        append_log_tail(err, errlen, outlog);
        return -1;
    }
    if (rc != 0) {
        err_set(err, errlen,
                "mariadbd (pid %d) did not accept connections on %s within %d ms; last client error %u: %s",
                (int)db->pid, db->socket, TU_MARIADB_START_DEADLINE_MS, probe.last_errno, probe.last_error);
        append_log_tail(err, errlen, errlog);
        return -1;
    }
    err_set(err, errlen, "mariadbd (pid %d) ready on %s after %llu ms", (int)db->pid, db->socket,
            (unsigned long long)(tu_now_mono_ms() - t0));
    return 0;
}

int tu_mariadb_start(tu_mariadb_t *db, char *err, size_t errlen)
{
    const char *const *extra_args = db->extra_args;
    const char *tmpfs_size = db->tmpfs_size;
    int tcp_port = db->tcp_port;
    memset(db, 0, sizeof *db);
    db->extra_args = extra_args;
    db->tmpfs_size = tmpfs_size;
    db->tcp_port = tcp_port;
    err_set(err, errlen, "no error");
    if (tu_mkdtemp("mariadb", db->dir, sizeof db->dir) != 0) {
        err_set(err, errlen, "cannot create a temp dir under %s: %s", tu_temp_root(), strerror(errno));
        return -1;
    }

    char datadir[600], installlog[600];
    snprintf(db->socket, sizeof db->socket, "%s/mysql.sock", db->dir);
    snprintf(datadir, sizeof datadir, "%s/data", db->dir);
    snprintf(installlog, sizeof installlog, "%s/install.log", db->dir);
    if (strlen(db->socket) >= sizeof(((struct sockaddr_un *)0)->sun_path)) {
        err_set(err, errlen, "socket path %s is too long for a unix socket; set TMPDIR to a shorter directory",
                db->socket);
        goto fail;
    }

    /* --user is only allowed (and, for mariadbd, only required) as root. */
    int as_root = geteuid() == 0;
    char opt_datadir[620];
    snprintf(opt_datadir, sizeof opt_datadir, "--datadir=%s", datadir);

    /* A private tmpdir per server: nothing of two servers meets in /tmp. */
    char tmpdir[600], opt_tmpdir[620];
    snprintf(tmpdir, sizeof tmpdir, "%s/tmp", db->dir);
    snprintf(opt_tmpdir, sizeof opt_tmpdir, "--tmpdir=%s", tmpdir);
    if (mkdir(tmpdir, 0700) != 0) {
        err_set(err, errlen, "cannot create %s: %s", tmpdir, strerror(errno));
        goto fail;
    }

    if (db->tmpfs_size != NULL) {
        char opts[80];
        snprintf(opts, sizeof opts, "size=%s,mode=0750", db->tmpfs_size);
        if (mkdir(datadir, 0750) != 0) {
            err_set(err, errlen, "cannot create %s: %s", datadir, strerror(errno));
            goto fail;
        }
        if (mount("tmpfs", datadir, "tmpfs", 0, opts) != 0) {
            err_set(err, errlen, "cannot mount a tmpfs (%s) on %s (the test needs root, as CI runs it): %s", opts,
                    datadir, strerror(errno));
            goto fail;
        }
        db->tmpfs_mounted = 1;
    }

    /* 1. The system tables. Options it does not know go through to the
     *    bootstrap mariadbd: the smaller redo log keeps the dir at ~30 MB.
     *    Installs run one at a time (an flock in the temp root): two bootstraps
     *    at once were seen to fail ("Unknown table 'mysql.tmp_user_sys'") when
     *    parallel tests each started a server. */
    char *install_argv[] = {
        TU_INSTALL_DB_PATH,
        "--no-defaults",
        opt_datadir,
        opt_tmpdir,
        "--auth-root-authentication-method=normal",
        "--skip-test-db",
        "--skip-name-resolve",
        "--innodb-log-file-size=16M",
        "--innodb-buffer-pool-size=64M",
        as_root ? "--user=root" : NULL,
        NULL,
    };
    char lockpath[600];
    snprintf(lockpath, sizeof lockpath, "%s/hg-mariadb-install.lock", tu_temp_root());
    int lockfd = open(lockpath, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    if (lockfd < 0 || flock(lockfd, LOCK_EX) != 0) {
        err_set(err, errlen, "cannot lock %s: %s", lockpath, strerror(errno));
        if (lockfd >= 0)
            close(lockfd);
        goto fail;
    }
    pid_t ipid = spawn_isolated(install_argv, installlog, err, errlen);
    if (ipid < 0) {
        close(lockfd);
        goto fail;
    }
    int status = 0;
    int waited = wait_or_kill(ipid, TU_MARIADB_INSTALL_DEADLINE_MS, &status);
    close(lockfd); /* releases the flock */
    if (waited != 0) {
        err_set(err, errlen, "mariadb-install-db did not finish within %d ms", TU_MARIADB_INSTALL_DEADLINE_MS);
        append_log_tail(err, errlen, installlog);
        goto fail;
    }
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        char how[80];
        describe_status(status, how, sizeof how);
        err_set(err, errlen, "mariadb-install-db %s", how);
        append_log_tail(err, errlen, installlog);
        goto fail;
    }

    /* 2. The server, 3. its first connection. */
    if (run_server(db, err, errlen) != 0)
        goto fail;
    return 0;

fail:
    tu_mariadb_stop(db);
    return -1;
}

int tu_mariadb_restart(tu_mariadb_t *db, char *err, size_t errlen)
{
    if (db->pid > 0) {
        int status = 0;
        pid_t r = waitpid(db->pid, &status, WNOHANG);
        if (r == 0)
            return err_set(err, errlen, "mariadbd (pid %d) is still running: nothing to restart", (int)db->pid);
        db->pid = 0;
    }
    return run_server(db, err, errlen);
}

void tu_mariadb_stop(tu_mariadb_t *db)
{
    if (db == NULL)
        return;
    if (db->pid > 0) {
        kill(db->pid, SIGTERM);
        if (wait_or_kill(db->pid, TU_MARIADB_STOP_DEADLINE_MS, NULL) != 0)
            fprintf(stderr, "tu_mariadb_stop: mariadbd (pid %d) ignored SIGTERM for %d ms, killed\n", (int)db->pid,
                    TU_MARIADB_STOP_DEADLINE_MS);
        db->pid = 0;
    }
    if (db->tmpfs_mounted) {
        char datadir[600];
        snprintf(datadir, sizeof datadir, "%s/data", db->dir);
        if (umount2(datadir, MNT_DETACH) != 0)
            fprintf(stderr, "tu_mariadb_stop: umount %s: %s\n", datadir, strerror(errno));
        db->tmpfs_mounted = 0;
    }
    if (db->dir[0] != '\0') {
        tu_rmtree(db->dir);
        db->dir[0] = '\0';
    }
}

/* ---------------------------------------------------------------- CUnit */

/* ---- per-case wall time -------------------------------------------------
 * CU_basic_run_* installs its own test start/complete handlers when the run
 * starts, so they cannot be wrapped beforehand. The suite start handler is one
 * basic mode leaves alone: at each suite's start it wraps basic's test handlers
 * (once), so every case's line reads "passed (12.3 s)" or "FAILED (12.3 s)",
 * a failure followed by its list as basic prints it. */

static CU_TestStartMessageHandler basic_test_start;
static CU_TestCompleteMessageHandler basic_test_complete;
static struct timespec case_started;

static void timed_test_start(const CU_pTest test, const CU_pSuite suite)
{
    basic_test_start(test, suite);
    clock_gettime(CLOCK_MONOTONIC, &case_started);
}

static void timed_test_complete(const CU_pTest test, const CU_pSuite suite, const CU_pFailureRecord failures)
{
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    double seconds = (double)(now.tv_sec - case_started.tv_sec) + (double)(now.tv_nsec - case_started.tv_nsec) / 1e9;
    if (failures == NULL) {
        basic_test_complete(test, suite, failures);
        printf(" (%.1f s)", seconds);
    } else {
        /* Basic would print "FAILED" and the failure list at once, so the time
         * could not stay on the case's line: the same lines are printed here. */
        printf("FAILED (%.1f s)", seconds);
        unsigned i = 1;
        for (CU_pFailureRecord f = failures; f != NULL; f = f->pNext, i++)
            printf("\n    %u. %s:%u  - %s", i, f->strFileName != NULL ? f->strFileName : "", f->uiLineNumber,
                   f->strCondition != NULL ? f->strCondition : "");
    }
    fflush(stdout);
}

static void wrap_basic_test_handlers(const CU_pSuite suite)
{
    (void)suite;
    if (CU_get_test_complete_handler() == timed_test_complete)
        return;
    basic_test_start = CU_get_test_start_handler();
    basic_test_complete = CU_get_test_complete_handler();
    if (basic_test_start == NULL || basic_test_complete == NULL)
        return;
    CU_set_test_start_handler(timed_test_start);
    CU_set_test_complete_handler(timed_test_complete);
}

int tu_cunit_main(int argc, char **argv, int (*add_suites)(void))
{
    /* Line-buffered, so a crash still leaves the progress so far in the .log. */
    setvbuf(stdout, NULL, _IOLBF, 0);

    if (CU_initialize_registry() != CUE_SUCCESS) {
        fprintf(stderr, "%s: CUnit registry: %s\n", argv[0], CU_get_error_msg());
        return 1;
    }
    if (add_suites() != 0) {
        fprintf(stderr, "%s: adding suites failed: %s\n", argv[0], CU_get_error_msg());
        CU_cleanup_registry();
        return 1;
    }

    CU_basic_set_mode(CU_BRM_VERBOSE);
    CU_set_suite_start_handler(wrap_basic_test_handlers);
    CU_ErrorCode run_rc;
    if (argc > 1) {
        CU_pSuite suite = CU_get_suite(argv[1]);
        if (suite == NULL) {
            fprintf(stderr, "%s: no suite named '%s'; suites:", argv[0], argv[1]);
            for (CU_pSuite s = CU_get_registry()->pSuite; s != NULL; s = s->pNext)
                fprintf(stderr, " %s", s->pName);
            fprintf(stderr, "\n");
            CU_cleanup_registry();
            return 1;
        }
        CU_pTest test = argc > 2 ? CU_get_test(suite, argv[2]) : NULL;
        if (argc > 2 && test == NULL) {
            fprintf(stderr, "%s: suite '%s' has no test named '%s'\n", argv[0], argv[1], argv[2]);
            CU_cleanup_registry();
            return 1;
        }
        run_rc = test != NULL ? CU_basic_run_test(suite, test) : CU_basic_run_suite(suite);
    } else {
        run_rc = CU_basic_run_tests();
    }

    /* Read everything before CU_cleanup_registry resets it. */
    unsigned asserts_failed = CU_get_number_of_failures();
    unsigned tests_failed = CU_get_number_of_tests_failed();
    unsigned suites_failed = CU_get_number_of_suites_failed(); /* init or cleanup failed */
    unsigned tests_run = CU_get_number_of_tests_run();
    CU_cleanup_registry();

    int failed =
        run_rc != CUE_SUCCESS || asserts_failed != 0 || tests_failed != 0 || suites_failed != 0 || tests_run == 0;
    printf("\n%s: %s (%u tests run, %u failed, %u failed assertions, %u suites failed%s)\n", argv[0],
           failed ? "FAIL" : "PASS", tests_run, tests_failed, asserts_failed, suites_failed,
           tests_run == 0 ? "; no tests ran, which counts as a failure" : "");
    return failed ? 1 : 0;
}

/* ---- a child's output --------------------------------------------------- */

int tu_run_capture(const char *const *argv, char *out, size_t outlen)
{
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
        execv(argv[0], (char *const *)argv);
        _exit(127);
    }
    close(fds[1]);
    size_t n = 0;
    ssize_t r;
    while (n < outlen - 1 && (r = read(fds[0], out + n, outlen - 1 - n)) > 0)
        n += (size_t)r;
    out[n] = '\0';
    char sink[4096];
    while (read(fds[0], sink, sizeof sink) > 0)
        ;
    close(fds[0]);
    int status;
    if (waitpid(pid, &status, 0) != pid)
        return -1;
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

void tu_argv_init(tu_argv_t *a)
{
    memset(a, 0, sizeof *a);
}

void tu_argv_add(tu_argv_t *a, const char *word)
{
    if (a->n < TU_ARGV_MAX)
        a->word[a->n++] = word;
    else
        a->overflow = 1;
    a->word[a->n] = NULL;
}

void tu_argv_add_list(tu_argv_t *a, const char *const *words)
{
    for (size_t i = 0; words != NULL && words[i] != NULL; i++)
        tu_argv_add(a, words[i]);
}

void tu_argv_add_va(tu_argv_t *a, va_list ap)
{
    for (const char *w; (w = va_arg(ap, const char *)) != NULL;)
        tu_argv_add(a, w);
}

int tu_argv_check(const tu_argv_t *a)
{
    if (!a->overflow)
        return 0;
    fprintf(stderr, "\n  %s: more than %d arguments: not run\n", a->n > 0 ? a->word[0] : "(empty)", TU_ARGV_MAX);
    return -1;
}

int tu_run_capture_argv(const tu_argv_t *a, char *out, size_t outlen)
{
    if (outlen > 0)
        out[0] = '\0';
    if (tu_argv_check(a) != 0 || a->n == 0)
        return -1;
    return tu_run_capture(a->word, out, outlen);
}

/* ---- table-driven suites and formatted assertions ----------------------- */

static const tu_suite_t *suites_table;
static size_t suites_count;
static void (*suites_setup)(void);
static void (*suites_teardown)(void);

int tu_add_suite(const char *name, int (*init)(void), int (*cleanup)(void), void (*setup)(void), void (*teardown)(void),
                 const tu_test_t *tests)
{
    CU_pSuite suite = CU_add_suite_with_setup_and_teardown(name, init, cleanup, setup, teardown);
    if (suite == NULL)
        return -1;
    for (const tu_test_t *t = tests; t->name != NULL; t++)
        if (CU_add_test(suite, t->name, t->fn) == NULL)
            return -1;
    return 0;
}

static int add_table_suites(void)
{
    for (size_t s = 0; s < suites_count; s++)
        if (tu_add_suite(suites_table[s].name, NULL, NULL, suites_setup, suites_teardown, suites_table[s].tests) != 0)
            return -1;
    return 0;
}

int tu_suites_main(int argc, char **argv, const tu_suite_t *suites, size_t n, void (*setup)(void),
                   void (*teardown)(void))
{
    suites_table = suites;
    suites_count = n;
    suites_setup = setup;
    suites_teardown = teardown;
    return tu_cunit_main(argc, argv, add_table_suites);
}

void tu_check_passed_at(const char *file, int line)
{
    CU_assertImplementation(CU_TRUE, (unsigned int)line, "ok", file, "", CU_FALSE);
}

void tu_check_failed_at(int fatal, const char *file, int line, const char *fmt, ...)
{
    char text[8448];
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(text, sizeof text, fmt, ap);
    va_end(ap);
    fprintf(stderr, "\n  %s:%d: %s\n", file, line, text);
    CU_assertImplementation(CU_FALSE, (unsigned int)line, text, file, "", fatal ? CU_TRUE : CU_FALSE);
}

int tu_own_ipv4(char *buf, size_t len)
{
    struct ifaddrs *ifs = NULL, *i;
    int rc = -1;
    if (getifaddrs(&ifs) != 0)
        return -1;
    for (i = ifs; i != NULL && rc != 0; i = i->ifa_next) {
        if (i->ifa_addr == NULL || i->ifa_addr->sa_family != AF_INET || !(i->ifa_flags & IFF_UP) ||
            (i->ifa_flags & IFF_LOOPBACK))
            continue;
        const struct sockaddr_in *in = (const struct sockaddr_in *)i->ifa_addr;
        if ((ntohl(in->sin_addr.s_addr) >> 24) == 127)
            continue;
        if (inet_ntop(AF_INET, &in->sin_addr, buf, (socklen_t)len) != NULL)
            rc = 0;
    }
    freeifaddrs(ifs);
    return rc;
}

/* loopback_dial's prepare for tu_dial_opts_t: the source address bound,
 * then the receive buffer set; -1 with errno, said on stderr. */
static int dial_prepare(int fd, void *arg)
{
    const tu_dial_opts_t *opts = arg;
    if (opts->source != NULL) {
        struct sockaddr_in from = { .sin_family = AF_INET };
        if (inet_pton(AF_INET, opts->source, &from.sin_addr) != 1) {
            fprintf(stderr, "tu_tcp_connect: source address '%s' is not a dotted IPv4 address\n", opts->source);
            errno = EINVAL;
            return -1;
        }
        if (bind(fd, (struct sockaddr *)&from, sizeof from) != 0) {
            int why = errno;
            fprintf(stderr, "tu_tcp_connect: cannot bind source address %s: %s\n", opts->source, strerror(why));
            errno = why;
            return -1;
        }
    }
    if (opts->rcvbuf != 0 && setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &opts->rcvbuf, sizeof opts->rcvbuf) != 0) {
        int why = errno;
        fprintf(stderr, "tu_tcp_connect: SO_RCVBUF %d refused: %s\n", opts->rcvbuf, strerror(why));
        errno = why;
        return -1;
    }
    return 0;
}

/* A blocking connection to 127.0.0.1:port (loopback_dial's tries), each
 * attempt's socket given opts (NULL: none), none waiting past deadline
 * (tu_now_mono_ms, the clock loopback_dial reads; 0: none); -1 with errno.
 * A dial that stalled out is said on stderr: a refusal is an answer a poll
 * waits past. */
static int tcp_connect_by(int port, const tu_dial_opts_t *opts, uint64_t deadline)
{
    loopback_dial_t how = { .try_ms = LOOPBACK_DIAL_TRY_MS, .tries = LOOPBACK_DIAL_TRIES, .deadline = deadline };
    if (opts != NULL) {
        how.prepare = dial_prepare;
        how.prepare_arg = (void *)opts;
    }
    int why = 0, fd = loopback_dial(port, &how, &why);
    if (fd < 0) {
        if (why == ETIMEDOUT && deadline != 0 && tu_now_mono_ms() >= deadline)
            fprintf(stderr, "tu_tcp_connect: 127.0.0.1:%d: no connection before the deadline\n", port);
        else if (why == ETIMEDOUT)
            fprintf(stderr, "tu_tcp_connect: 127.0.0.1:%d: no connection in %d tries of %d ms\n", port, how.tries,
                    how.try_ms);
        errno = why;
        return -1;
    }
    int flags = fcntl(fd, F_GETFL);
    if (flags < 0 || fcntl(fd, F_SETFL, flags & ~O_NONBLOCK) != 0) {
        why = errno;
        close(fd);
        errno = why;
        return -1;
    }
    return fd;
}

int tu_tcp_connect(int port)
{
    return tcp_connect_by(port, NULL, 0);
}

int tu_tcp_connect_with(int port, const tu_dial_opts_t *opts)
{
    return tcp_connect_by(port, opts, 0);
}

typedef struct http_status_wait {
    int port, want;
    const char *path;
    char *out;
    size_t outlen;
    uint64_t deadline; /* tu_now_mono_ms() at which the poll ends */
} http_status_wait_t;

static int http_get_within(int port, const char *path, char *out, size_t outlen, int deadline_ms);

/* One GET of the poll, bounded by what is left of the poll's deadline (at
 * most TU_HTTP_DEADLINE_MS), so a hung request cannot carry the poll past it. */
static int http_status_is(void *arg)
{
    http_status_wait_t *h = arg;
    uint64_t now = tu_now_mono_ms();
    uint64_t left = h->deadline > now ? h->deadline - now : 0;
    int within = left < TU_HTTP_DEADLINE_MS ? (int)left : TU_HTTP_DEADLINE_MS;
    return http_get_within(h->port, h->path, h->out, h->outlen, within) == h->want;
}

int tu_poll_http_status(int port, const char *path, int want, int deadline_ms, int interval_ms, char *out,
                        size_t outlen)
{
    http_status_wait_t h = { .port = port,
                             .want = want,
                             .path = path,
                             .out = out,
                             .outlen = outlen,
                             .deadline = tu_now_mono_ms() + (uint64_t)(deadline_ms > 0 ? deadline_ms : 0) };
    if (outlen > 0)
        out[0] = '\0';
    return tu_poll_until(http_status_is, &h, deadline_ms, interval_ms);
}

int tu_file_count(const char *path, const char *text)
{
    FILE *f = fopen(path, "r");
    if (f == NULL)
        return -1;
    static char body[4 << 20];
    size_t n = fread(body, 1, sizeof body - 1, f);
    fclose(f);
    body[n] = '\0';
    int count = 0;
    for (const char *p = body; (p = strstr(p, text)) != NULL; p += strlen(text))
        count++;
    return count;
}

int tu_watch_http_503(int port, const char *path, int span_ms, int interval_ms, int *answered, char *first,
                      size_t firstlen, double *first_s)
{
    char body[4096];
    int unhealthy = 0;
    uint64_t t0 = tu_now_mono_ms();
    *answered = 0;
    *first_s = 0;
    if (firstlen > 0)
        first[0] = '\0';
    while (tu_now_mono_ms() - t0 < (uint64_t)span_ms) {
        int status = tu_http_get(port, path, body, sizeof body);
        *answered += status == 200 || status == 503;
        if (status == 503 && !unhealthy++) {
            *first_s = (double)(tu_now_mono_ms() - t0) / 1000;
            if (firstlen > 0)
                snprintf(first, firstlen, "%s", body);
        }
        sleep_ms((uint64_t)interval_ms);
    }
    return unhealthy;
}

/* Connect to 127.0.0.1:port, send req[rl] and read the whole reply (the
 * server closes) into out[outlen], all within deadline_ms: tu_http_get's
 * result. A server that closes before it has the request is a -1, not a
 * SIGPIPE (MSG_NOSIGNAL). */
static int http_exchange(int port, const char *req, int rl, char *out, size_t outlen, int deadline_ms)
{
    out[0] = '\0';
    uint64_t deadline = tu_now_mono_ms() + (uint64_t)(deadline_ms > 0 ? deadline_ms : 0);
    int fd = tcp_connect_by(port, NULL, deadline);
    if (fd < 0)
        return -1;
    /* a server that never reads cannot hold the send past the deadline either */
    uint64_t left = deadline > tu_now_mono_ms() ? deadline - tu_now_mono_ms() : 1;
    struct timeval tv = { .tv_sec = (time_t)(left / 1000), .tv_usec = (suseconds_t)(left % 1000 * 1000) };
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    errno = 0;
    ssize_t sent = send(fd, req, (size_t)rl, MSG_NOSIGNAL);
    if (sent != rl) {
        fprintf(stderr, "tu_http: 127.0.0.1:%d: %zd of the request's %d bytes sent: %s\n", port, sent < 0 ? 0 : sent,
                rl, sent < 0 ? strerror(errno) : "the server stopped taking them (closed, or the deadline)");
        close(fd);
        return -1;
    }
    size_t n = 0;
    int closed = 0;
    while (n < outlen - 1) {
        uint64_t now = tu_now_mono_ms();
        struct pollfd p = { .fd = fd, .events = POLLIN };
        if (now >= deadline || poll(&p, 1, (int)(deadline - now)) == 0)
            break;
        ssize_t r = read(fd, out + n, outlen - 1 - n);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0) {
            closed = 1;
            break;
        }
        n += (size_t)r;
    }
    out[n] = '\0';
    close(fd);
    if (!closed && n < outlen - 1) {
        fprintf(stderr, "tu_http: 127.0.0.1:%d: no whole reply within %d ms (%zu bytes came)\n", port, deadline_ms, n);
        return -1;
    }
    int status = -1;
    return sscanf(out, "HTTP/1.%*d %d", &status) == 1 ? status : -1;
}

int tu_http_request(int port, const char *req, int rl, char *out, size_t outlen)
{
    return http_exchange(port, req, rl, out, outlen, TU_HTTP_DEADLINE_MS);
}

int tu_http_request_within(int port, const char *req, int rl, char *out, size_t outlen, int deadline_ms)
{
    return http_exchange(port, req, rl, out, outlen, deadline_ms);
}

int tu_http_get_host(int port, const char *path, const char *host, char *out, size_t outlen)
{
    char req[512], hline[300] = "";
    if (host != NULL)
        snprintf(hline, sizeof hline, "Host: %s\r\n", host);
    int rl = snprintf(req, sizeof req, "GET %s HTTP/1.%d\r\n%sConnection: close\r\n\r\n", path, host != NULL, hline);
    return http_exchange(port, req, rl, out, outlen, TU_HTTP_DEADLINE_MS);
}

long tu_http_flood_headers(int port, size_t limit, char *reply, size_t replylen)
{
    reply[0] = '\0';
    int fd = tu_tcp_connect(port);
    if (fd < 0)
        return -1;
    const char *head = "GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\n";
    size_t sent = 0;
    if (send(fd, head, strlen(head), MSG_NOSIGNAL) != (ssize_t)strlen(head)) {
        close(fd);
        return 0;
    }
    static char lines[64 * 1000];
    for (size_t i = 0; i + 1000 <= sizeof lines; i += 1000) {
        memset(lines + i, 'a', 1000);
        memcpy(lines + i, "X-Pad: ", 7);
        memcpy(lines + i + 998, "\r\n", 2);
    }
    /* a peer that stops reading without closing fills the socket buffers: a send timeout ends the flood */
    struct timeval tv = { 2, 0 };
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    while (sent < limit) {
        ssize_t w = send(fd, lines, sizeof lines, MSG_NOSIGNAL);
        if (w <= 0)
            break;
        sent += (size_t)w;
    }
    struct pollfd p = { .fd = fd, .events = POLLIN };
    if (poll(&p, 1, 10000) == 1) {
        ssize_t r = recv(fd, reply, replylen - 1, 0);
        reply[r > 0 ? r : 0] = '\0';
    }
    close(fd);
    return (long)sent;
}

int tu_http_fill(int port, int n, int *fds, char *reply, size_t replylen)
{
    reply[0] = '\0';
    for (int i = 0; i < n; i++) {
        fds[i] = tu_tcp_connect(port);
        if (fds[i] < 0) {
            while (i-- > 0)
                close(fds[i]);
            return -1;
        }
    }
    const char *req = "GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n";
    if (send(fds[n - 1], req, strlen(req), MSG_NOSIGNAL) != (ssize_t)strlen(req))
        return 0;
    struct pollfd p = { .fd = fds[n - 1], .events = POLLIN };
    ssize_t r = poll(&p, 1, 10000) == 1 ? recv(fds[n - 1], reply, replylen - 1, 0) : -1;
    reply[r > 0 ? r : 0] = '\0';
    return r > 12 && strncmp(reply, "HTTP/1.1 200", 12) == 0;
}

double tu_http_trickle(int port, double limit_s, char *reply, size_t replylen)
{
    reply[0] = '\0';
    int fd = tu_tcp_connect(port);
    if (fd < 0)
        return -1;
    const char *head = "GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ";
    uint64_t start = tu_now_mono_us();
    size_t i = 0;
    while ((double)(tu_now_mono_us() - start) < limit_s * 1e6) {
        char byte = head[i] != '\0' ? head[i++] : 'a';
        if (send(fd, &byte, 1, MSG_NOSIGNAL) != 1)
            break;
        struct pollfd p = { .fd = fd, .events = POLLIN };
        if (poll(&p, 1, 200) == 1) {
            ssize_t r = recv(fd, reply, replylen - 1, 0);
            reply[r > 0 ? r : 0] = '\0';
            break;
        }
    }
    double waited = (double)(tu_now_mono_us() - start) / 1e6;
    close(fd);
    return waited;
}

/* tu_http_get within deadline_ms. */
static int http_get_within(int port, const char *path, char *out, size_t outlen, int deadline_ms)
{
    char req[256];
    int rl = snprintf(req, sizeof req, "GET %s HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n", path);
    return http_exchange(port, req, rl, out, outlen, deadline_ms);
}

int tu_http_get(int port, const char *path, char *out, size_t outlen)
{
    return http_get_within(port, path, out, outlen, TU_HTTP_DEADLINE_MS);
}

/* ---- docs/metrics.md against a /metrics page ------------------------------------ */

#define TU_MAX_FAMILIES 256

typedef struct tu_family {
    char name[128], type[32];
} tu_family_t;

/* The "# TYPE NAME TYPE" lines of page into f[TU_MAX_FAMILIES]; how many. */
static size_t page_families(const char *page, tu_family_t *f)
{
    size_t n = 0;
    for (const char *p = page; p != NULL && *p != '\0' && n < TU_MAX_FAMILIES; p = strchr(p, '\n'), p = p ? p + 1 : p)
        if (sscanf(p, "# TYPE %127s %31s", f[n].name, f[n].type) == 2)
            n++;
    return n;
}

/* The rows "| `NAME` | TYPE | …" of section "## daemon" of the file at path
 * into f[TU_MAX_FAMILIES]; how many, -1 when the file or the section is
 * missing (printed). */
static long doc_families(const char *path, const char *daemon, tu_family_t *f)
{
    FILE *in = fopen(path, "r");
    if (in == NULL) {
        fprintf(stderr, "%s: %s\n", path, strerror(errno));
        return -1;
    }
    char line[2048], heading[160];
    snprintf(heading, sizeof heading, "## %s\n", daemon);
    int inside = 0, found = 0;
    size_t n = 0;
    while (fgets(line, sizeof line, in) != NULL && n < TU_MAX_FAMILIES) {
        if (strncmp(line, "## ", 3) == 0) {
            inside = strcmp(line, heading) == 0;
            found |= inside;
            continue;
        }
        if (inside && sscanf(line, "| `%127[^`]` | %31[a-z] |", f[n].name, f[n].type) == 2)
            n++;
    }
    fclose(in);
    if (!found) {
        fprintf(stderr, "%s: no section \"## %s\"\n", path, daemon);
        return -1;
    }
    return (long)n;
}

static const tu_family_t *family_find(const tu_family_t *f, size_t n, const char *name)
{
    for (size_t i = 0; i < n; i++)
        if (strcmp(f[i].name, name) == 0)
            return &f[i];
    return NULL;
}

int tu_metrics_doc_diff(const char *page, const char *daemon)
{
    static const char path[] = HG_SRCDIR "/docs/metrics.md";
    tu_family_t *served = calloc(2 * TU_MAX_FAMILIES, sizeof *served), *documented = served + TU_MAX_FAMILIES;
    if (served == NULL)
        return -1;
    size_t ns = page_families(page, served);
    long nd = doc_families(path, daemon, documented);
    int differ = nd < 0 ? -1 : 0;
    if (ns == 0) {
        fprintf(stderr, "%s's /metrics page has no # TYPE line\n", daemon);
        differ = -1;
    }
    for (size_t i = 0; differ >= 0 && i < ns; i++) {
        const tu_family_t *d = family_find(documented, (size_t)nd, served[i].name);
        if (d == NULL) {
            fprintf(stderr, "%s serves %s (%s), not in docs/metrics.md\n", daemon, served[i].name, served[i].type);
            differ++;
        } else if (strcmp(d->type, served[i].type) != 0) {
            fprintf(stderr, "%s serves %s as a %s, docs/metrics.md says %s\n", daemon, served[i].name, served[i].type,
                    d->type);
            differ++;
        }
    }
    for (long i = 0; differ >= 0 && i < nd; i++)
        if (family_find(served, ns, documented[i].name) == NULL) {
            fprintf(stderr, "docs/metrics.md lists %s under %s, which does not serve it\n", documented[i].name, daemon);
            differ++;
        }
    free(served);
    return differ;
}
