/*
 * tests/helpers/failsync.c — an LD_PRELOAD shim that fails one fsync of a
 * LevelDB write-ahead log with EIO, as a disk that loses a write does
 * (tests/integration/test_broker_fsync.c; broker/syncer.c is what it tests).
 *
 * fdatasync(fd) and fsync(fd) of a file whose path ends in ".log" or ".seg" (the
 * store's commit log): when the
 * file named by $HG_FAILSYNC_TRIGGER exists, it is removed and the call
 * fails with EIO without syncing (once per trigger file). With
 * $HG_FAILSYNC_STICKY set, every later sync of that same file through a
 * descriptor open at the failure fails too, as Linux reports a writeback
 * error to each descriptor that was open before it (LevelDB's own, when it
 * syncs its log; the commit log's segment descriptor); a descriptor opened
 * after it syncs (close(2) is wrapped to forget a closed one). Every call on a
 * ".log" or ".seg" is appended to $HG_FAILSYNC_RECORD (when set) as one line
 * "ok|EIO PATH", so a test can see which log a later successful sync was of.
 * With $HG_FAILSYNC_ERRNO=ENOSPC the failure is ENOSPC instead (an fdatasync
 * that finds no room for the pages it writes back: delayed allocation, a
 * thin volume, NFS), recorded as "ENOSPC PATH".
 * With $HG_FAILSYNC_DELAY_MS set, the trigger makes that sync wait so many
 * milliseconds and then sync, instead of failing: a batch held in flight, as a
 * slow disk holds it (test_broker_restart's stop with unread input).
 * With $HG_FAILSYNC_ONLY set to a name's ending (".seg": the commit log's
 * segments, the broker's syncer; ".log": LevelDB's logs, a checkpoint's), only
 * a sync of such a file takes the trigger, so a test knows whose sync fails
 * (both kinds are synced concurrently); the other kind syncs as usual and is
 * still recorded.
 * Other files and calls pass through to libc unchanged.
 *
 * Threading: any thread (the broker's syncer thread calls it); the record
 * file is appended with one write(2) per line (O_APPEND).
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

int fdatasync(int fd);
int fsync(int fd);
int close(int fd);

/* The path of fd into path[len] ("" when unknown); 1 when it is a ".log" or a commit-log segment
 * (".seg": what the broker's syncer syncs since the store commits through its commit log). */
static int log_path(int fd, char *path, size_t len)
{
    char link[64];
    snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
    ssize_t n = readlink(link, path, len - 1);
    path[n > 0 ? n : 0] = '\0';
    return n > 4 && (strcmp(path + n - 4, ".log") == 0 || strcmp(path + n - 4, ".seg") == 0);
}

static void record(const char *what, const char *path)
{
    const char *file = getenv("HG_FAILSYNC_RECORD");
    if (file == NULL) {
        return;
    }
    char line[4200];
    int n = snprintf(line, sizeof line, "%s %s\n", what, path);
    int fd = open(file, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0600);
    if (fd >= 0) {
        if (write(fd, line, (size_t)n) < 0) {
            /* a test's record: nothing to do about a failed write */
        }
        close(fd);
    }
}

#define MAX_STICKY_FDS 16

static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static char g_failed[4096];             /* the log whose sync failed (sticky mode), under g_mu */
static int g_sticky_fd[MAX_STICKY_FDS]; /* the descriptors open on it at the failure, under g_mu */
static int g_nsticky;                   /* under g_mu */
static volatile int g_any_sticky;       /* g_nsticky > 0: close(2) looks (a hint read without the lock) */

/* Remember every descriptor of this process open on path now (g_mu held). */
static void remember_open_descriptors(const char *path)
{
    g_nsticky = 0;
    for (int fd = 0; fd < 4096 && g_nsticky < MAX_STICKY_FDS; fd++) {
        char link[64], p[4096];
        snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
        ssize_t n = readlink(link, p, sizeof p - 1);
        if (n > 0) {
            p[n] = '\0';
            if (strcmp(p, path) == 0) {
                g_sticky_fd[g_nsticky++] = fd;
            }
        }
    }
    g_any_sticky = g_nsticky > 0;
}

/* 1 when fd is one of the descriptors open at the failure (g_mu held). */
static int sticky_fd(int fd)
{
    for (int i = 0; i < g_nsticky; i++) {
        if (g_sticky_fd[i] == fd) {
            return 1;
        }
    }
    return 0;
}

/* 1 when path may take the trigger: it ends in $HG_FAILSYNC_ONLY, or that is unset. */
static int trigger_may_take(const char *path)
{
    const char *only = getenv("HG_FAILSYNC_ONLY");
    size_t n = strlen(path), k = only != NULL ? strlen(only) : 0;
    return only == NULL || (n >= k && strcmp(path + n - k, only) == 0);
}

/* 1 when this sync of path through fd must fail: the trigger is there (and
 * is taken: only by a path trigger_may_take allows), or in sticky mode path is the log that failed before and fd was
 * open on it then (Linux reports a writeback error to each descriptor open
 * before it; one opened after syncs as usual — over pages the kernel may have
 * dropped, which is why the broker must never rely on such a sync). */
static int must_fail(const char *path, int fd)
{
    const char *trigger = getenv("HG_FAILSYNC_TRIGGER");
    pthread_mutex_lock(&g_mu);
    int fail = g_failed[0] != '\0' && strcmp(g_failed, path) == 0 && sticky_fd(fd);
    if (!fail && trigger != NULL && trigger_may_take(path) && unlink(trigger) == 0) {
        fail = 1;
        if (getenv("HG_FAILSYNC_STICKY") != NULL) {
            snprintf(g_failed, sizeof g_failed, "%s", path);
            remember_open_descriptors(path);
        }
    }
    pthread_mutex_unlock(&g_mu);
    return fail;
}

/* A descriptor closed is no longer one that saw the error (its number may be
 * reused for another open). */
int close(int fd)
{
    if (g_any_sticky) {
        pthread_mutex_lock(&g_mu);
        for (int i = 0; i < g_nsticky; i++) {
            if (g_sticky_fd[i] == fd) {
                g_sticky_fd[i] = g_sticky_fd[--g_nsticky];
                break;
            }
        }
        g_any_sticky = g_nsticky > 0;
        pthread_mutex_unlock(&g_mu);
    }
    int (*real)(int) = (int (*)(int))dlsym(RTLD_NEXT, "close");
    return real(fd);
}

/* -1 (EIO, or ENOSPC: see above) when this sync of a log must fail, else the real call's result
 * (after the delay, in delay mode). */
static int sync_or_fail(int fd, const char *name)
{
    char path[4096];
    int (*real)(int) = (int (*)(int))dlsym(RTLD_NEXT, name);
    if (!log_path(fd, path, sizeof path)) {
        return real(fd);
    }
    const char *delay_ms = getenv("HG_FAILSYNC_DELAY_MS");
    if (delay_ms != NULL && must_fail(path, fd)) {
        long ms = strtol(delay_ms, NULL, 10);
        struct timespec ts = { ms / 1000, (ms % 1000) * 1000000L };
        while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
        }
        record("delayed", path);
    } else if (must_fail(path, fd)) {
        const char *as = getenv("HG_FAILSYNC_ERRNO");
        int no_room = as != NULL && strcmp(as, "ENOSPC") == 0;
        record(no_room ? "ENOSPC" : "EIO", path);
        errno = no_room ? ENOSPC : EIO;
        return -1;
    }
    int rc = real(fd);
    record(rc == 0 ? "ok" : "failed", path);
    return rc;
}

int fdatasync(int fd)
{
    return sync_or_fail(fd, "fdatasync");
}

int fsync(int fd)
{
    return sync_or_fail(fd, "fsync");
}
