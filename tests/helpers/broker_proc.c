/*
 * tests/helpers/broker_proc.c — run the real hourglass-broker for a test
 * (contract in broker_proc.h).
 *
 * Design:
 * - The child is isolated like testutil's MariaDB: its own session (a signal
 *   to the test's process group does not hit it), stdin /dev/null, stdout and
 *   stderr appended to DIR/broker.log, every other descriptor closed, default
 *   signal dispositions, PR_SET_PDEATHSIG(SIGKILL) so it dies with the thread
 *   that started it.
 * - Ready means "answers PING with PONG" over a fresh connection, polled every
 *   20 ms; if the process exits first the caller gets its exit status and the
 *   tail of its log at once instead of waiting out the deadline.
 * - Ports come from tu_free_port (below the ephemeral range, so no outgoing
 *   connection takes one), which can still race with another test picking
 *   the same port before the broker binds it; bp_start retries with new ports
 *   when the broker exits early and its log says "Address already in use".
 *
 * Single-threaded use (the main thread of a test).
 */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include "tests/helpers/broker_proc.h"

#include <errno.h>
#include <inttypes.h>
#include <fcntl.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "tests/helpers/testutil.h"

#ifndef HG_BUILDDIR
#define HG_BUILDDIR "."
#endif

#define BP_LOG_TAIL       4096 /* bytes of log put into err */
#define BP_START_ATTEMPTS 3    /* tries with fresh ports when a port was taken */

static unsigned (*failure_counter)(void);

void bp_set_failure_counter(unsigned (*fn)(void))
{
    failure_counter = fn;
}

static void set_err(char *err, size_t errlen, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void set_err(char *err, size_t errlen, const char *fmt, ...)
{
    if (err == NULL || errlen == 0)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
}

/* Read the last max bytes of path into a malloc'd NUL-terminated string
 * (empty when missing). Never NULL. */
static char *read_tail(const char *path, size_t max)
{
    char *buf = calloc(1, max + 1);
    if (buf == NULL)
        abort();
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return buf;
    struct stat st;
    if (fstat(fd, &st) == 0) {
        off_t want = st.st_size < (off_t)max ? st.st_size : (off_t)max;
        ssize_t r = pread(fd, buf, (size_t)want, st.st_size - want);
        if (r > 0)
            buf[r] = '\0';
    }
    close(fd);
    return buf;
}

static void append_log_tail(const bp_broker_t *b, char *err, size_t errlen)
{
    if (err == NULL || errlen == 0)
        return;
    size_t used = strlen(err);
    if (used + 1 >= errlen)
        return;
    char *tail = read_tail(b->log_path, BP_LOG_TAIL);
    snprintf(err + used, errlen - used, "\n--- last lines of broker.log ---\n%s", tail[0] ? tail : "(empty)\n");
    free(tail);
}

void bp_describe_status(int status, char *buf, size_t len)
{
    if (WIFEXITED(status))
        snprintf(buf, len, "exited with status %d", WEXITSTATUS(status));
    else if (WIFSIGNALED(status))
        snprintf(buf, len, "was killed by signal %d (%s)", WTERMSIG(status), strsignal(WTERMSIG(status)));
    else
        snprintf(buf, len, "stopped with wait status 0x%x", status);
}

static void sleep_ms(int ms)
{
    struct timespec ts = { .tv_sec = ms / 1000, .tv_nsec = (long)(ms % 1000) * 1000000L };
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
        ;
}

/* Reap the child if it exited. Returns 1 when it is gone (status saved). */
static int reap(bp_broker_t *b)
{
    if (b->pid <= 0)
        return 1;
    int st = 0;
    pid_t r = waitpid(b->pid, &st, WNOHANG);
    if (r == b->pid || (r < 0 && errno == ECHILD)) {
        if (r == b->pid)
            b->last_status = st;
        b->pid = 0;
        if (!b->exit_expected)
            b->died_unexpectedly = 1;
        return 1;
    }
    return 0;
}

int bp_alive(bp_broker_t *b)
{
    return !reap(b);
}

/* Wait up to deadline_ms for the child to exit. Returns 0 exited, -1 still running. */
static int wait_gone(bp_broker_t *b, int deadline_ms)
{
    uint64_t end = tu_now_mono_ms() + (uint64_t)deadline_ms;
    while (!reap(b)) {
        if (tu_now_mono_ms() >= end)
            return -1;
        sleep_ms(10);
    }
    return 0;
}

int bp_spawn(bp_broker_t *b, char *err, size_t errlen)
{
    if (b->pid > 0) {
        set_err(err, errlen, "broker already running (pid %d)", (int)b->pid);
        return -1;
    }
    if (access(b->binary, X_OK) != 0) {
        set_err(err, errlen, "%s: %s (build it: make hourglass-broker)", b->binary, strerror(errno));
        return -1;
    }
    char port[16], mport[16], segment[24];
    snprintf(port, sizeof port, "%d", b->port);
    snprintf(mport, sizeof mport, "%d", b->metrics_port);
    snprintf(segment, sizeof segment, "%" PRIu64, TU_SEGMENT_BYTES);
    char *argv[10 + BP_MAX_EXTRA];
    int argc = 0;
    argv[argc++] = b->binary;
    argv[argc++] = (char *)BP_FLAG_PORT;
    argv[argc++] = port;
    argv[argc++] = (char *)BP_FLAG_DIR;
    argv[argc++] = b->data_dir;
    argv[argc++] = (char *)BP_FLAG_METRICS_PORT;
    argv[argc++] = mport;
    argv[argc++] = (char *)BP_FLAG_SEGMENT_SIZE; /* before the extra flags: a test's own size wins */
    argv[argc++] = segment;
    for (int i = 0; i < b->nextra; i++)
        argv[argc++] = b->extra[i];
    argv[argc] = NULL;

    { /* a separator line so restarts are visible in the log */
        FILE *lf = fopen(b->log_path, "a");
        if (lf != NULL) {
            fprintf(lf, "=== broker_proc: starting");
            for (int i = 0; i < argc; i++)
                fprintf(lf, " %s", argv[i]);
            fprintf(lf, "\n");
            fclose(lf);
        }
    }

    pid_t parent = getpid();
    b->start_ms = tu_now_mono_ms();
    pid_t pid = fork();
    if (pid < 0) {
        set_err(err, errlen, "fork: %s", strerror(errno));
        return -1;
    }
    if (pid == 0) {
        /* Child: only async-signal-safe calls from here to exec. */
        setsid();
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (getppid() != parent)
            _exit(126);
        sigset_t none;
        sigemptyset(&none);
        sigprocmask(SIG_SETMASK, &none, NULL);
        for (int sig = 1; sig < NSIG; sig++)
            signal(sig, SIG_DFL);
        int in = open("/dev/null", O_RDONLY);
        int out = open(b->log_path, O_WRONLY | O_CREAT | O_APPEND, 0644);
        if (in < 0 || out < 0)
            _exit(126);
        if (dup2(in, 0) < 0 || dup2(out, 1) < 0 || dup2(out, 2) < 0)
            _exit(126);
        if (b->nofile > 0) {
            struct rlimit rl = { (rlim_t)b->nofile, (rlim_t)b->nofile };
            if (setrlimit(RLIMIT_NOFILE, &rl) != 0)
                _exit(126);
        }
        if (close_range(3, ~0U, 0) != 0) {
            for (int fd = 3; fd < 65536; fd++)
                close(fd);
        }
        execv(argv[0], argv);
        dprintf(2, "exec %s: %s\n", argv[0], strerror(errno));
        _exit(127);
    }
    b->pid = pid;
    b->exit_expected = 0;
    return 0;
}

/* One PING over a fresh connection: 1 on PONG, 0 otherwise. */
static int ping_once(const bp_broker_t *b)
{
    rc_conn_t c;
    if (rc_connect(&c, "127.0.0.1", b->port, 2000) != 0) {
        rc_close(&c);
        return 0;
    }
    resp_reply_t *r = rc_cmd(&c, "PING", NULL);
    int ok = r != NULL && r->type == RESP_REPLY_STATUS && r->len == 4 && memcmp(r->str, "PONG", 4) == 0;
    resp_reply_free(r);
    rc_close(&c);
    return ok;
}

int bp_wait_ready(bp_broker_t *b, int deadline_ms, char *err, size_t errlen)
{
    uint64_t end = tu_now_mono_ms() + (uint64_t)deadline_ms;
    for (;;) {
        if (ping_once(b))
            return 0;
        if (reap(b)) {
            b->died_unexpectedly = 0; /* reported to the caller right here */
            char how[128];
            bp_describe_status(b->last_status, how, sizeof how);
            set_err(err, errlen, "hourglass-broker %s before answering PING on port %d", how, b->port);
            append_log_tail(b, err, errlen);
            return -1;
        }
        if (tu_now_mono_ms() >= end) {
            set_err(err, errlen, "hourglass-broker (pid %d) did not answer PING on port %d within %d ms", (int)b->pid,
                    b->port, deadline_ms);
            append_log_tail(b, err, errlen);
            return -1;
        }
        sleep_ms(20);
    }
}

static void free_extra(bp_broker_t *b)
{
    for (int i = 0; i < b->nextra; i++)
        free(b->extra[i]);
    b->nextra = 0;
}

/* 1 when port is the value of a "--...-port" flag among b's extra flags (a
 * tls-port the test chose): a free port picked after it may be the same. */
static int port_in_flags(const bp_broker_t *b, int port)
{
    for (int i = 0; i + 1 < b->nextra; i++) {
        size_t n = strlen(b->extra[i]);
        if (n > 5 && strcmp(b->extra[i] + n - 5, "-port") == 0 && atoi(b->extra[i + 1]) == port)
            return 1;
    }
    return 0;
}

int bp_start(bp_broker_t *b, const char *const *extra, char *err, size_t errlen)
{
    return bp_start_limited(b, 0, extra, err, errlen);
}

int bp_start_limited(bp_broker_t *b, long nofile, const char *const *extra, char *err, size_t errlen)
{
    memset(b, 0, sizeof *b);
    b->nofile = nofile;
    if (failure_counter != NULL)
        b->failures_at_start = failure_counter();
    const char *bin = getenv("HG_BROKER");
    snprintf(b->binary, sizeof b->binary, "%s", bin != NULL && bin[0] ? bin : HG_BUILDDIR "/hourglass-broker");
    for (int i = 0; extra != NULL && extra[i] != NULL; i++) {
        if (b->nextra == BP_MAX_EXTRA) {
            set_err(err, errlen, "more than %d extra flags", BP_MAX_EXTRA);
            free_extra(b);
            return -1;
        }
        b->extra[b->nextra] = strdup(extra[i]);
        if (b->extra[b->nextra] == NULL)
            abort();
        b->nextra++;
    }
    if (tu_mkdtemp("broker", b->dir, sizeof b->dir) != 0) {
        set_err(err, errlen, "cannot make a temp dir: %s", strerror(errno));
        free_extra(b);
        return -1;
    }
    snprintf(b->data_dir, sizeof b->data_dir, "%s/data", b->dir);
    snprintf(b->log_path, sizeof b->log_path, "%s/broker.log", b->dir);

    for (int attempt = 1;; attempt++) {
        b->port = tu_free_port();
        while (b->port > 0 && port_in_flags(b, b->port))
            b->port = tu_free_port();
        b->metrics_port = tu_free_port();
        while (b->metrics_port > 0 && (b->metrics_port == b->port || port_in_flags(b, b->metrics_port)))
            b->metrics_port = tu_free_port();
        if (b->port < 0 || b->metrics_port < 0) {
            set_err(err, errlen, "no free port");
            break;
        }
        if (bp_spawn(b, err, errlen) != 0)
            break;
        if (bp_wait_ready(b, BP_START_DEADLINE_MS, err, errlen) == 0)
            return 0;
        if (b->pid > 0) { /* still running but not answering */
            kill(b->pid, SIGKILL);
            wait_gone(b, BP_STOP_DEADLINE_MS);
            break;
        }
        if (attempt >= BP_START_ATTEMPTS || !bp_log_contains(b, "Address already in use"))
            break;
    }
    /* err already holds the cause */
    if (getenv("HG_KEEP_TMP") == NULL)
        tu_rmtree(b->dir);
    free_extra(b);
    b->dir[0] = '\0';
    return -1;
}

int bp_startl(bp_broker_t *b, char *err, size_t errlen, ...)
{
    const char *extra[BP_MAX_EXTRA + 1];
    int n = 0;
    va_list ap;
    va_start(ap, errlen);
    for (const char *a = va_arg(ap, const char *); a != NULL && n < BP_MAX_EXTRA; a = va_arg(ap, const char *))
        extra[n++] = a;
    va_end(ap);
    extra[n] = NULL;
    return bp_start(b, extra, err, errlen);
}

int bp_restart(bp_broker_t *b, char *err, size_t errlen)
{
    if (bp_spawn(b, err, errlen) != 0)
        return -1;
    return bp_wait_ready(b, BP_START_DEADLINE_MS, err, errlen);
}

/* 0 when the broker's last exit was status 0; else -1 with err =
 * "hourglass-broker <how it ended><when>" and the tail of its log. */
static int exit_status_result(bp_broker_t *b, const char *when, char *err, size_t errlen)
{
    if (WIFEXITED(b->last_status) && WEXITSTATUS(b->last_status) == 0)
        return 0;
    char how[128];
    bp_describe_status(b->last_status, how, sizeof how);
    set_err(err, errlen, "hourglass-broker %s%s", how, when);
    append_log_tail(b, err, errlen);
    return -1;
}

int bp_wait_exit(bp_broker_t *b, int deadline_ms, char *err, size_t errlen)
{
    b->exit_expected = 1;
    if (wait_gone(b, deadline_ms) != 0) {
        set_err(err, errlen, "hourglass-broker (pid %d) still running after %d ms", (int)b->pid, deadline_ms);
        return -1;
    }
    return exit_status_result(b, "", err, errlen);
}

int bp_stop(bp_broker_t *b, char *err, size_t errlen)
{
    if (reap(b))
        return 0;
    b->exit_expected = 1;
    kill(b->pid, SIGTERM);
    if (wait_gone(b, BP_STOP_DEADLINE_MS) != 0) {
        kill(b->pid, SIGKILL);
        wait_gone(b, BP_STOP_DEADLINE_MS);
        set_err(err, errlen, "hourglass-broker ignored SIGTERM for %d ms and was killed", BP_STOP_DEADLINE_MS);
        append_log_tail(b, err, errlen);
        return -1;
    }
    return exit_status_result(b, " after SIGTERM", err, errlen);
}

int bp_kill9(bp_broker_t *b)
{
    if (reap(b))
        return -1;
    b->exit_expected = 1;
    kill(b->pid, SIGKILL);
    return wait_gone(b, BP_STOP_DEADLINE_MS);
}

void bp_print_log(const bp_broker_t *b, FILE *f, size_t max_bytes)
{
    char *tail = read_tail(b->log_path, max_bytes);
    fprintf(f, "\n--- %s (last %zu bytes at most) ---\n%s%s--- end of broker.log ---\n", b->log_path, max_bytes, tail,
            tail[0] && tail[strlen(tail) - 1] != '\n' ? "\n" : "");
    free(tail);
}

int bp_log_contains(const bp_broker_t *b, const char *text)
{
    char *all = read_tail(b->log_path, 1u << 20);
    int found = strstr(all, text) != NULL;
    free(all);
    return found;
}

int bp_destroy(bp_broker_t *b)
{
    if (b->dir[0] == '\0')
        return 0;
    char err[8192];
    err[0] = '\0';
    reap(b);
    int died = b->died_unexpectedly;
    int stop_failed = b->pid > 0 && bp_stop(b, err, sizeof err) != 0;
    int failed = failure_counter != NULL && failure_counter() != b->failures_at_start;
    if (stop_failed) {
        fprintf(stderr, "\nbroker_proc: stopping the broker: %s\n", err);
    } else if (died) {
        char how[128];
        bp_describe_status(b->last_status, how, sizeof how);
        fprintf(stderr, "\nbroker_proc: the broker %s on its own during the test\n", how);
        bp_print_log(b, stderr, 16384);
    } else if (failed) {
        bp_print_log(b, stderr, 16384);
    }
    if (getenv("HG_KEEP_TMP") == NULL)
        tu_rmtree(b->dir);
    else
        fprintf(stderr, "broker_proc: kept %s\n", b->dir);
    free_extra(b);
    b->dir[0] = '\0';
    return stop_failed || died ? -1 : 0;
}

int bp_connect(const bp_broker_t *b, rc_conn_t *c, char *err, size_t errlen)
{
    if (rc_connect(c, "127.0.0.1", b->port, RC_DEFAULT_TIMEOUT_MS) != 0) {
        set_err(err, errlen, "%s", c->err);
        return -1;
    }
    return 0;
}

long bp_rss_kib(const bp_broker_t *b)
{
    if (b->pid <= 0)
        return -1;
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/status", (int)b->pid);
    FILE *f = fopen(path, "r");
    if (f == NULL)
        return -1;
    char line[256];
    long kib = -1;
    while (fgets(line, sizeof line, f) != NULL) {
        if (strncmp(line, "VmRSS:", 6) == 0) {
            kib = strtol(line + 6, NULL, 10);
            break;
        }
    }
    fclose(f);
    return kib;
}

/* ---- Hourglass commands ---------------------------------------------------- */

#define BP_CMD_MAX_ARGS 64

/* Collect NULL-terminated varargs after the fixed arguments into argv from
 * position argc; returns the new argc. */
static int collect_va(const char **argv, int argc, va_list ap)
{
    for (const char *a = va_arg(ap, const char *); a != NULL && argc < BP_CMD_MAX_ARGS; a = va_arg(ap, const char *))
        argv[argc++] = a;
    return argc;
}

/* Send argv, read the reply with a timeout of read_ms (0: the conn's). NULL
 * on I/O failure (err set); an error reply is returned as such. */
static resp_reply_t *run(rc_conn_t *c, int argc, const char **argv, int read_ms, char *err, size_t errlen)
{
    rc_append(c, argc, argv, NULL);
    if (rc_flush(c, 0) != 0) {
        set_err(err, errlen, "%s: %s", argv[0], c->err);
        return NULL;
    }
    resp_reply_t *r = rc_read(c, read_ms);
    if (r == NULL)
        set_err(err, errlen, "%s: %s", argv[0], c->err);
    return r;
}

/* NULL after freeing r and setting err when r is an error reply. */
static resp_reply_t *no_error(resp_reply_t *r, const char *what, char *err, size_t errlen)
{
    if (r != NULL && r->type == RESP_REPLY_ERROR) {
        set_err(err, errlen, "%s: %.*s", what, (int)r->len, r->str);
        resp_reply_free(r);
        return NULL;
    }
    return r;
}

/* Run arg0 and the NULL-terminated rest of ap: the reply, or NULL with err
 * set (I/O failure, or an error reply, which is freed). */
static resp_reply_t *run_va(rc_conn_t *c, const char *arg0, va_list ap, char *err, size_t errlen)
{
    const char *argv[BP_CMD_MAX_ARGS];
    int argc = 0;
    argv[argc++] = arg0;
    argc = collect_va(argv, argc, ap);
    return no_error(run(c, argc, argv, 0, err, errlen), arg0, err, errlen);
}

/* err = "what: reply is <r>, want <want>"; frees r; returns -1. */
static int wrong_reply(resp_reply_t *r, const char *what, const char *want, char *err, size_t errlen)
{
    char d[300];
    set_err(err, errlen, "%s: reply is %s, want %s", what, rc_describe(r, d, sizeof d), want);
    resp_reply_free(r);
    return -1;
}

int bp_send(rc_conn_t *c, char *id_out, size_t id_len, char *err, size_t errlen, const char *topic, const char *payload,
            ...)
{
    const char *argv[BP_CMD_MAX_ARGS];
    int argc = 0;
    argv[argc++] = "SEND";
    argv[argc++] = topic;
    argv[argc++] = payload;
    va_list ap;
    va_start(ap, payload);
    argc = collect_va(argv, argc, ap);
    va_end(ap);
    resp_reply_t *r = no_error(run(c, argc, argv, 0, err, errlen), "SEND", err, errlen);
    if (r == NULL)
        return -1;
    if (r->type != RESP_REPLY_BULK || r->len == 0 || r->len >= id_len)
        return wrong_reply(r, "SEND", "a bulk id", err, errlen);
    memcpy(id_out, r->str, r->len);
    id_out[r->len] = '\0';
    resp_reply_free(r);
    return 0;
}

resp_reply_t *bp_pull(rc_conn_t *c, char *err, size_t errlen, const char *group, const char *topic, ...)
{
    const char *argv[BP_CMD_MAX_ARGS];
    int argc = 0;
    argv[argc++] = "PULL";
    argv[argc++] = group;
    argv[argc++] = topic;
    va_list ap;
    va_start(ap, topic);
    argc = collect_va(argv, argc, ap);
    va_end(ap);
    int read_ms = 0;
    for (int i = 3; i + 1 < argc; i++) {
        if (strcasecmp(argv[i], "BLOCK") == 0) {
            long long ms = strtoll(argv[i + 1], NULL, 10); /* bare ms, or "5s" style: a unit */
            const char *u = argv[i + 1];
            while (*u >= '0' && *u <= '9')
                u++;
            if (strcmp(u, "s") == 0)
                ms *= 1000;
            else if (strcmp(u, "m") == 0)
                ms *= 60000;
            if (ms <= 0 || ms > 600000)
                ms = 600000;
            read_ms = (int)ms + 10000;
        }
    }
    resp_reply_t *r = no_error(run(c, argc, argv, read_ms, err, errlen), "PULL", err, errlen);
    if (r != NULL && r->type != RESP_REPLY_ARRAY) {
        wrong_reply(r, "PULL", "an array", err, errlen);
        return NULL;
    }
    return r;
}

int bp_int_cmd(rc_conn_t *c, long long *out, char *err, size_t errlen, const char *arg0, ...)
{
    va_list ap;
    va_start(ap, arg0);
    resp_reply_t *r = run_va(c, arg0, ap, err, errlen);
    va_end(ap);
    if (r == NULL)
        return -1;
    if (r->type != RESP_REPLY_INTEGER)
        return wrong_reply(r, arg0, "an integer", err, errlen);
    *out = r->integer;
    resp_reply_free(r);
    return 0;
}

int bp_ok_cmd(rc_conn_t *c, char *err, size_t errlen, const char *arg0, ...)
{
    va_list ap;
    va_start(ap, arg0);
    resp_reply_t *r = run_va(c, arg0, ap, err, errlen);
    va_end(ap);
    if (r == NULL)
        return -1;
    if (r->type != RESP_REPLY_STATUS || r->len != 2 || memcmp(r->str, "OK", 2) != 0)
        return wrong_reply(r, arg0, "+OK", err, errlen);
    resp_reply_free(r);
    return 0;
}

int bp_level(rc_conn_t *c, int level, uint64_t *delay_ms, uint64_t *depth, uint64_t *next_due_ms, char *err,
             size_t errlen)
{
    const char *argv[] = { "LEVELS" };
    resp_reply_t *r = no_error(run(c, 1, argv, 0, err, errlen), "LEVELS", err, errlen);
    if (r == NULL)
        return -1;
    int rc = -1;
    char d[300];
    if (r->type != RESP_REPLY_ARRAY) {
        set_err(err, errlen, "LEVELS: reply is %s", rc_describe(r, d, sizeof d));
        goto out;
    }
    for (size_t i = 0; i < r->count; i++) {
        const resp_reply_t *e = &r->elements[i];
        long long lv;
        uint64_t dl, dp, nd;
        if (e->type != RESP_REPLY_ARRAY || e->count != 4 || rc_int(&e->elements[0], &lv) != 0 ||
            rc_u64(&e->elements[1], &dl) != 0 || rc_u64(&e->elements[2], &dp) != 0 ||
            rc_u64(&e->elements[3], &nd) != 0) {
            set_err(err, errlen, "LEVELS: row %zu is %s, want [level, delay_ms, depth, next_due_ms]", i,
                    rc_describe(e, d, sizeof d));
            goto out;
        }
        if (lv == level) {
            if (delay_ms != NULL)
                *delay_ms = dl;
            if (depth != NULL)
                *depth = dp;
            if (next_due_ms != NULL)
                *next_due_ms = nd;
            rc = 0;
            goto out;
        }
    }
    set_err(err, errlen, "LEVELS: no level %d among %zu rows", level, r->count);
out:
    resp_reply_free(r);
    return rc;
}

/* Find group in a GROUP LIST reply; returns the element or NULL. Each
 * element is a flat array of pairs (RESP2) or a map. */
static const resp_reply_t *find_group(const resp_reply_t *r, const char *group)
{
    for (size_t i = 0; i < r->count; i++) {
        const resp_reply_t *e = &r->elements[i];
        if (e->type != RESP_REPLY_ARRAY && e->type != RESP_REPLY_MAP)
            continue;
        for (size_t k = 0; k + 1 < e->count; k += 2)
            if (rc_str_eq(&e->elements[k], "group") && rc_str_eq(&e->elements[k + 1], group))
                return e;
    }
    return NULL;
}

static const resp_reply_t *pair_value(const resp_reply_t *e, const char *field)
{
    for (size_t k = 0; k + 1 < e->count; k += 2)
        if (rc_str_eq(&e->elements[k], field))
            return &e->elements[k + 1];
    return NULL;
}

/* GROUP LIST, then the element of group: 1 with *rep (caller frees) and
 * *elem, 0 not listed, -1 error. */
static int group_list_elem(rc_conn_t *c, const char *group, resp_reply_t **rep, const resp_reply_t **elem, char *err,
                           size_t errlen)
{
    const char *argv[] = { "GROUP", "LIST" };
    resp_reply_t *r = no_error(run(c, 2, argv, 0, err, errlen), "GROUP LIST", err, errlen);
    if (r == NULL)
        return -1;
    if (r->type != RESP_REPLY_ARRAY) {
        char d[300];
        set_err(err, errlen, "GROUP LIST: reply is %s", rc_describe(r, d, sizeof d));
        resp_reply_free(r);
        return -1;
    }
    *elem = find_group(r, group);
    if (*elem == NULL) {
        resp_reply_free(r);
        return 0;
    }
    *rep = r;
    return 1;
}

int bp_group_field(rc_conn_t *c, const char *group, const char *field, long long *out, char *err, size_t errlen)
{
    resp_reply_t *r = NULL;
    const resp_reply_t *e = NULL;
    int found = group_list_elem(c, group, &r, &e, err, errlen);
    if (found <= 0)
        return found;
    const resp_reply_t *v = pair_value(e, field);
    int rc = 1;
    if (v == NULL || rc_int(v, out) != 0) {
        set_err(err, errlen, "GROUP LIST: group %s has no numeric field '%s'", group, field);
        rc = -1;
    }
    resp_reply_free(r);
    return rc;
}

int bp_group_topic(rc_conn_t *c, const char *group, char *topic, size_t topic_len, char *err, size_t errlen)
{
    resp_reply_t *r = NULL;
    const resp_reply_t *e = NULL;
    int found = group_list_elem(c, group, &r, &e, err, errlen);
    if (found <= 0)
        return found;
    const resp_reply_t *v = pair_value(e, "topic");
    int rc = 1;
    if (v == NULL || (v->type != RESP_REPLY_BULK && v->type != RESP_REPLY_STATUS)) {
        set_err(err, errlen, "GROUP LIST: group %s has no topic", group);
        rc = -1;
    } else {
        snprintf(topic, topic_len, "%.*s", (int)v->len, v->str);
    }
    resp_reply_free(r);
    return rc;
}

int bp_info_field(rc_conn_t *c, const char *field, char *buf, size_t len, char *err, size_t errlen)
{
    const char *argv[] = { "INFO" };
    resp_reply_t *r = no_error(run(c, 1, argv, 0, err, errlen), "INFO", err, errlen);
    if (r == NULL)
        return -1;
    int rc = rc_info_field(r, field, buf, len);
    if (rc != 0)
        set_err(err, errlen, "INFO: no field '%s'", field);
    resp_reply_free(r);
    return rc;
}

int bp_check_data(const bp_broker_t *b, char *out, size_t outlen)
{
    const char *argv[BP_MAX_EXTRA + 4];
    int n = 0;
    argv[n++] = b->binary;
    argv[n++] = "--check-data";
    argv[n++] = b->data_dir;
    for (int i = 0; i < b->nextra; i++)
        argv[n++] = b->extra[i];
    argv[n] = NULL;
    return tu_run_capture(argv, out, outlen);
}
