/*
 * tests/helpers/powercut.c — the simulated power cut of powercut.h: the
 * interposed pwrite/write/fdatasync/fsync that journal unsynced writes with
 * their undo bytes in shared memory, and the parent's power-off that undoes
 * them and reapplies a seeded random subset, some torn at a sector boundary.
 *
 * The journal is one shared mapping: a header, then entries packed 8-byte
 * aligned, each a struct entry followed by the bytes it replaced (old_len)
 * and the bytes it wrote (len). A file's sync marks its entries synced; they
 * are never reused (a child writes little), and an overflow kills the child
 * and fails the power-off, naming the journal size.
 *
 * At the end, the suites' seed loop (powercut_run_seeds).
 */
#define _GNU_SOURCE
#include "tests/helpers/powercut.h"

#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "tests/helpers/testutil.h"

ssize_t pwrite(int fd, const void *buf, size_t n, off_t off);
ssize_t pread(int fd, void *buf, size_t n, off_t off);
ssize_t write(int fd, const void *buf, size_t n);
int rename(const char *from, const char *to);
int unlink(const char *path);
int fdatasync(int fd);
int fsync(int fd);

struct entry {
    uint64_t dev, ino; /* the file written */
    uint64_t off;      /* where */
    uint64_t old_size; /* the file's size before the write */
    uint32_t len;      /* bytes written (the new bytes follow the old) */
    uint32_t old_len;  /* bytes replaced (those below old_size) */
    uint32_t synced;   /* ENTRY_SYNCED: a later sync covered it; ENTRY_LOST: a failed sync dropped it */
    uint32_t pad;
};

enum {
    ENTRY_UNSYNCED = 0,
    ENTRY_SYNCED = 1,
    ENTRY_LOST = 2,
};

struct journal {
    pthread_mutex_t mu;
    char dir[PATH_MAX];
    size_t dirlen;
    size_t cap;       /* bytes for entries */
    size_t used;      /* bytes of entries */
    uint64_t calls;   /* watched calls so far */
    uint64_t kill_at; /* die before this call (0: never) */
    int armed;
    pid_t armed_pid; /* the process that armed: a parent that forked it is never watched */
    int overflow;
    uint64_t fail_sync_at; /* the nth sync of a file named fail_prefix* fails (0: none) */
    char fail_prefix[64];
    uint64_t prefixed_syncs;                         /* syncs of such files so far */
    uint64_t failed_syncs;                           /* syncs made to fail */
    uint64_t read_dev, read_ino, read_from, read_to; /* preads watched (read_to > read_from) */
    uint64_t range_reads;                            /* preads of that file overlapping [read_from, read_to) */
    char held_dir[PATH_MAX - 32];                    /* "<dir>.held/": links to the inodes names were taken from */
    uint64_t held_seq;                               /* the next link's name there */
    int unheld;                                      /* a link could not be made: the power-off must not pretend */
    size_t renames;                                  /* renames and unlinks since the directory's last fsync */
    struct renamed {
        int unlinked; /* 1: an unlink of from (to unused); 0: a rename of from to to */
        char from[PATH_MAX], to[PATH_MAX];
        char held[PATH_MAX]; /* "" or a link to the file the call took the name from (the file a
                                          rename replaced, the file unlinked) */
    } renamed[256];
    char entries[];
};

static struct journal *g_j;

static size_t entry_bytes(const struct entry *e)
{
    return (sizeof *e + e->old_len + e->len + 7) & ~(size_t)7;
}

int powercut_init(const char *dir, size_t journal_bytes, char *err, size_t errlen)
{
    if (strlen(dir) + 1 >= PATH_MAX) {
        snprintf(err, errlen, "powercut: directory name too long: %s", dir);
        return -1;
    }
    void *p = mmap(NULL, sizeof *g_j + journal_bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) {
        snprintf(err, errlen, "powercut: cannot map a %zu-byte journal: %s", journal_bytes, strerror(errno));
        return -1;
    }
    g_j = p;
    snprintf(g_j->dir, sizeof g_j->dir, "%s/", dir);
    g_j->dirlen = strlen(g_j->dir);
    snprintf(g_j->held_dir, sizeof g_j->held_dir, "%s.held/", dir);
    g_j->cap = journal_bytes;
    powercut_reset();
    return 0;
}

/* Remove the links the last child's renames and unlinks left (the held
 * directory itself stays; powercut_run_seeds removes it at the end). */
static void empty_held_dir(void)
{
    DIR *d = opendir(g_j->held_dir);
    struct dirent *de;
    char path[PATH_MAX + 256];
    while (d != NULL && (de = readdir(d)) != NULL) {
        if (strcmp(de->d_name, ".") != 0 && strcmp(de->d_name, "..") != 0) {
            snprintf(path, sizeof path, "%s%s", g_j->held_dir, de->d_name);
            unlink(path);
        }
    }
    if (d != NULL) {
        closedir(d);
    }
}

void powercut_reset(void)
{
    pthread_mutexattr_t a;
    pthread_mutexattr_init(&a);
    pthread_mutexattr_setpshared(&a, PTHREAD_PROCESS_SHARED);
    pthread_mutex_init(&g_j->mu, &a); /* a killed child may have died holding it */
    pthread_mutexattr_destroy(&a);
    g_j->used = 0;
    g_j->calls = 0;
    g_j->kill_at = 0;
    g_j->armed = 0;
    g_j->overflow = 0;
    g_j->renames = 0;
    g_j->unheld = 0;
    empty_held_dir();
    g_j->fail_sync_at = 0;
    g_j->fail_prefix[0] = '\0';
    g_j->prefixed_syncs = 0;
    g_j->failed_syncs = 0;
    g_j->read_to = g_j->read_from = 0;
    g_j->range_reads = 0;
}

void powercut_fail_sync(uint64_t nth, const char *prefix)
{
    g_j->prefixed_syncs = 0;
    g_j->fail_sync_at = nth;
    snprintf(g_j->fail_prefix, sizeof g_j->fail_prefix, "%s", prefix);
}

uint64_t powercut_failed_syncs(void)
{
    return g_j->failed_syncs;
}

int powercut_watch_reads(const char *path, uint64_t from, uint64_t to, char *err, size_t errlen)
{
    struct stat st;
    if (stat(path, &st) != 0) {
        snprintf(err, errlen, "powercut: cannot watch reads of %s: %s", path, strerror(errno));
        return -1;
    }
    g_j->read_dev = (uint64_t)st.st_dev;
    g_j->read_ino = (uint64_t)st.st_ino;
    g_j->read_from = from;
    g_j->read_to = to;
    g_j->range_reads = 0;
    return 0;
}

uint64_t powercut_range_reads(void)
{
    return g_j->range_reads;
}

void powercut_arm(uint64_t kill_at)
{
    g_j->kill_at = kill_at;
    g_j->armed_pid = getpid();
    g_j->armed = 1;
}

uint64_t powercut_calls(void)
{
    return g_j->calls;
}

/* 1 when fd is the watched directory or a file under it. */
static int under_dir(int fd)
{
    char link[64], path[PATH_MAX];
    snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
    ssize_t n = readlink(link, path, sizeof path - 1);
    return n > 0 && (size_t)n + 1 >= g_j->dirlen && strncmp(path, g_j->dir, g_j->dirlen - 1) == 0 &&
           (path[g_j->dirlen - 1] == '/' || (size_t)n + 1 == g_j->dirlen);
}

/* 1 when this process armed the journal (the flag is shared: a parent whose
 * child armed and exited without a reset must not be watched). */
static int armed_here(void)
{
    return g_j != NULL && g_j->armed && g_j->armed_pid == getpid();
}

/* 1 when armed and fd is a regular file under the watched directory (st
 * filled). */
static int watched(int fd, struct stat *st)
{
    st->st_mode = 0;
    return armed_here() && fstat(fd, st) == 0 && S_ISREG(st->st_mode) && under_dir(fd);
}

/* Count a watched call (under mu); the kill_at-th never happens. */
static void count_call(void)
{
    g_j->calls++;
    if (g_j->kill_at != 0 && g_j->calls >= g_j->kill_at) {
        raise(SIGKILL);
    }
}

/* Journal a write of n bytes at off (under mu): its undo bytes read from fd.
 * NULL (the child is killed) when the journal is full. */
static struct entry *journal_write(int fd, const struct stat *st, const void *buf, size_t n, uint64_t off)
{
    static ssize_t (*real_pread)(int, void *, size_t, off_t);
    if (real_pread == NULL) {
        real_pread = (ssize_t(*)(int, void *, size_t, off_t))dlsym(RTLD_NEXT, "pread");
    }
    uint64_t size = (uint64_t)st->st_size;
    uint64_t old_len = off >= size ? 0 : (size - off < n ? size - off : n);
    size_t need = (sizeof(struct entry) + old_len + n + 7) & ~(size_t)7;
    if (n > UINT32_MAX || g_j->used + need > g_j->cap) {
        g_j->overflow = 1;
        raise(SIGKILL);
    }
    struct entry *e = (struct entry *)(g_j->entries + g_j->used);
    *e = (struct entry){ (uint64_t)st->st_dev, (uint64_t)st->st_ino, off, size, (uint32_t)n, (uint32_t)old_len, 0, 0 };
    char *old = (char *)(e + 1);
    if (old_len > 0 && real_pread(fd, old, old_len, (off_t)off) != (ssize_t)old_len) {
        g_j->overflow = 1; /* an undo that cannot be read: the power-off must not pretend */
        raise(SIGKILL);
    }
    memcpy(old + old_len, buf, n);
    g_j->used += need;
    return e;
}

ssize_t pwrite(int fd, const void *buf, size_t n, off_t off)
{
    static ssize_t (*real)(int, const void *, size_t, off_t);
    if (real == NULL) {
        real = (ssize_t(*)(int, const void *, size_t, off_t))dlsym(RTLD_NEXT, "pwrite");
    }
    struct stat st;
    if (!watched(fd, &st)) {
        return real(fd, buf, n, off);
    }
    pthread_mutex_lock(&g_j->mu);
    count_call();
    struct entry *e = journal_write(fd, &st, buf, n, (uint64_t)off);
    ssize_t k = real(fd, buf, n, off);
    if (k < (ssize_t)n) {
        e->len = k > 0 ? (uint32_t)k : 0; /* what reached the file */
    }
    pthread_mutex_unlock(&g_j->mu);
    return k;
}

ssize_t write(int fd, const void *buf, size_t n)
{
    static ssize_t (*real)(int, const void *, size_t);
    if (real == NULL) {
        real = (ssize_t(*)(int, const void *, size_t))dlsym(RTLD_NEXT, "write");
    }
    struct stat st;
    if (!watched(fd, &st)) {
        return real(fd, buf, n);
    }
    pthread_mutex_lock(&g_j->mu);
    count_call();
    int fl = fcntl(fd, F_GETFL);
    off_t at = fl >= 0 && (fl & O_APPEND) ? st.st_size : lseek(fd, 0, SEEK_CUR);
    struct entry *e = journal_write(fd, &st, buf, n, (uint64_t)at);
    ssize_t k = real(fd, buf, n);
    if (k < (ssize_t)n) {
        e->len = k > 0 ? (uint32_t)k : 0;
    }
    pthread_mutex_unlock(&g_j->mu);
    return k;
}

ssize_t pread(int fd, void *buf, size_t n, off_t off)
{
    static ssize_t (*real)(int, void *, size_t, off_t);
    if (real == NULL) {
        real = (ssize_t(*)(int, void *, size_t, off_t))dlsym(RTLD_NEXT, "pread");
    }
    struct stat st;
    if (g_j != NULL && g_j->read_to > g_j->read_from && n > 0 && fstat(fd, &st) == 0 &&
        (uint64_t)st.st_dev == g_j->read_dev && (uint64_t)st.st_ino == g_j->read_ino && (uint64_t)off < g_j->read_to &&
        (uint64_t)off + n > g_j->read_from) {
        __atomic_add_fetch(&g_j->range_reads, 1, __ATOMIC_SEQ_CST);
    }
    return real(fd, buf, n, off);
}

static int path_under_dir(const char *path)
{
    return strncmp(path, g_j->dir, g_j->dirlen) == 0;
}

/* The next journal slot for a rename or unlink (under mu); the child is
 * killed when they are full. */
static struct renamed *next_renamed(void)
{
    if (g_j->renames == sizeof g_j->renamed / sizeof g_j->renamed[0]) {
        g_j->overflow = 1;
        raise(SIGKILL);
    }
    struct renamed *r = &g_j->renamed[g_j->renames];
    memset(r, 0, sizeof *r);
    return r;
}

/* Keep the file named path (when there is one) alive as a link in the held
 * directory, its name in r->held, so that the loss of the call about to take
 * its name can bring it back (under mu). */
static void hold(const char *path, struct renamed *r)
{
    struct stat st;
    if (lstat(path, &st) != 0 || !S_ISREG(st.st_mode)) {
        return;
    }
    if (mkdir(g_j->held_dir, 0700) != 0 && errno != EEXIST) {
        g_j->unheld = 1;
        return;
    }
    snprintf(r->held, sizeof r->held, "%s%" PRIu64, g_j->held_dir, g_j->held_seq++);
    if (link(path, r->held) != 0) {
        g_j->unheld = 1;
        r->held[0] = '\0';
    }
}

int rename(const char *from, const char *to)
{
    int (*real)(const char *, const char *) = (int (*)(const char *, const char *))dlsym(RTLD_NEXT, "rename");
    if (!armed_here() || !path_under_dir(from) || !path_under_dir(to)) {
        return real(from, to);
    }
    pthread_mutex_lock(&g_j->mu);
    count_call();
    struct renamed *r = next_renamed();
    hold(to, r);
    int rc = real(from, to);
    if (rc == 0) {
        snprintf(r->from, sizeof r->from, "%s", from);
        snprintf(r->to, sizeof r->to, "%s", to);
        g_j->renames++;
    } else if (r->held[0] != '\0') {
        int (*real_unlink)(const char *) = (int (*)(const char *))dlsym(RTLD_NEXT, "unlink");
        real_unlink(r->held);
    }
    pthread_mutex_unlock(&g_j->mu);
    return rc;
}

int unlink(const char *path)
{
    int (*real)(const char *) = (int (*)(const char *))dlsym(RTLD_NEXT, "unlink");
    if (!armed_here() || !path_under_dir(path)) {
        return real(path);
    }
    pthread_mutex_lock(&g_j->mu);
    count_call();
    struct renamed *r = next_renamed();
    hold(path, r);
    int rc = real(path);
    if (rc == 0 && r->held[0] != '\0') {
        r->unlinked = 1;
        snprintf(r->from, sizeof r->from, "%s", path);
        g_j->renames++;
    } else if (r->held[0] != '\0') {
        real(r->held);
    }
    pthread_mutex_unlock(&g_j->mu);
    return rc;
}

/* The directory's fsync: its renames are durable. */
static void sync_dir(void)
{
    pthread_mutex_lock(&g_j->mu);
    count_call();
    g_j->renames = 0;
    pthread_mutex_unlock(&g_j->mu);
}

/* 1 when the name of fd's file starts with prefix. */
static int has_prefix(int fd, const char *prefix)
{
    char link[64], path[PATH_MAX];
    snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
    ssize_t n = readlink(link, path, sizeof path - 1);
    if (n <= 0) {
        return 0;
    }
    path[n] = '\0';
    const char *base = strrchr(path, '/');
    base = base ? base + 1 : path;
    return strncmp(base, prefix, strlen(prefix)) == 0;
}

/* The file's entries become durable; or, at the sync powercut_fail_sync
 * chose, they are lost (EIO: the page cache keeps them, the disk never gets
 * them). The real sync is skipped, armed or not,
 * for the directory and every file under it: the simulated disk is the
 * files' contents, which a power-off rewrites, so the host's durability adds
 * nothing but time. */
static int sync_file(int fd, const char *name)
{
    int (*real)(int) = (int (*)(int))dlsym(RTLD_NEXT, name);
    struct stat st;
    if (!watched(fd, &st)) {
        if (g_j == NULL || !under_dir(fd)) {
            return real(fd);
        }
        if (armed_here() && S_ISDIR(st.st_mode)) {
            sync_dir();
        }
        return 0;
    }
    pthread_mutex_lock(&g_j->mu);
    count_call();
    int fail = g_j->fail_sync_at != 0 && has_prefix(fd, g_j->fail_prefix) && ++g_j->prefixed_syncs == g_j->fail_sync_at;
    for (size_t at = 0; at < g_j->used;) {
        struct entry *e = (struct entry *)(g_j->entries + at);
        if (e->dev == (uint64_t)st.st_dev && e->ino == (uint64_t)st.st_ino && e->synced == ENTRY_UNSYNCED) {
            e->synced = fail ? ENTRY_LOST : ENTRY_SYNCED;
        }
        at += entry_bytes(e);
    }
    g_j->failed_syncs += (uint64_t)fail;
    pthread_mutex_unlock(&g_j->mu);
    if (fail) {
        errno = EIO;
        return -1;
    }
    return 0;
}

int fdatasync(int fd)
{
    return sync_file(fd, "fdatasync");
}

int fsync(int fd)
{
    return sync_file(fd, "fsync");
}

/* ---- power off (parent) ---------------------------------------------------------- */

uint64_t powercut_next_rand(uint64_t *s)
{
    uint64_t z = (*s += UINT64_C(0x9e3779b97f4a7c15));
    z = (z ^ (z >> 30)) * UINT64_C(0xbf58476d1ce4e5b9);
    z = (z ^ (z >> 27)) * UINT64_C(0x94d049bb133111eb);
    return z ^ (z >> 31);
}

/* The path under the watched directory of the file dev/ino into path. 0, or
 * 1 when it is gone (unlinked: nothing to do). */
static int path_of(uint64_t dev, uint64_t ino, char *path, size_t len)
{
    DIR *d = opendir(g_j->dir);
    struct dirent *de;
    int rc = 1;
    while (d != NULL && rc == 1 && (de = readdir(d)) != NULL) {
        struct stat st;
        snprintf(path, len, "%s%s", g_j->dir, de->d_name);
        if (stat(path, &st) == 0 && S_ISREG(st.st_mode) && (uint64_t)st.st_dev == dev && (uint64_t)st.st_ino == ino) {
            rc = 0;
        }
    }
    if (d != NULL) {
        closedir(d);
    }
    return rc;
}

static int put(int fd, const char *p, size_t n, uint64_t at, const char *path, char *err, size_t errlen)
{
    if (n > 0 && pwrite(fd, p, n, (off_t)at) != (ssize_t)n) {
        snprintf(err, errlen, "powercut: %s: cannot write %zu bytes at %" PRIu64 ": %s", path, n, at, strerror(errno));
        return -1;
    }
    return 0;
}

/* Reapply entry e to fd as the seeded cut decides: whole, not at all, or one
 * side of a 512- or 4096-byte boundary inside it. */
static int replay(int fd, const struct entry *e, uint64_t *s, powercut_stats_t *st, const char *path, char *err,
                  size_t errlen)
{
    const char *p = (const char *)(e + 1) + e->old_len;
    uint64_t r = powercut_next_rand(s) % 100;
    uint64_t sector = powercut_next_rand(s) % 2 ? 512 : 4096;
    uint64_t first = e->off / sector + 1, last = (e->off + e->len - 1) / sector; /* boundaries inside: first..last */
    if (r < 25 && e->len > 0 && first <= last) {
        uint64_t b = (first + powercut_next_rand(s) % (last - first + 1)) * sector;
        st->torn++;
        if (powercut_next_rand(s) % 2) {
            return put(fd, p, b - e->off, e->off, path, err, errlen);
        }
        return put(fd, p + (b - e->off), e->off + e->len - b, b, path, err, errlen);
    }
    if (r < 60) {
        st->dropped++;
        return 0;
    }
    st->kept++;
    return put(fd, p, e->len, e->off, path, err, errlen);
}

/* Undo, then replay a subset of, the unsynced entries of the file of entry
 * `from` (marking them done in `done`). A write a failed sync lost is undone
 * and never replayed; the file's synced writes after it are undone with it
 * and made again whole (they may overlap it: the disk has them). */
static int cut_file(size_t from, char *done, uint64_t *s, powercut_stats_t *st, char *err, size_t errlen)
{
    const struct entry *f = (const struct entry *)(g_j->entries + from);
    size_t n = 0, cap = 16;
    const struct entry **es = malloc(cap * sizeof *es);
    int lost = 0; /* a lost write seen: the file's synced writes after it are undone and made again */
    for (size_t at = from; at < g_j->used;) {
        const struct entry *e = (const struct entry *)(g_j->entries + at);
        lost |= e->synced == ENTRY_LOST && e->dev == f->dev && e->ino == f->ino;
        if ((e->synced != ENTRY_SYNCED || lost) && !done[at / 8] && e->dev == f->dev && e->ino == f->ino) {
            if (n == cap) {
                es = realloc(es, (cap *= 2) * sizeof *es);
            }
            es[n++] = e;
            done[at / 8] = 1;
        }
        at += entry_bytes(e);
    }
    char path[PATH_MAX + 256];
    int rc = 0;
    if (path_of(f->dev, f->ino, path, sizeof path) == 0) {
        int fd = open(path, O_RDWR | O_CLOEXEC);
        if (fd < 0) {
            snprintf(err, errlen, "powercut: cannot open %s: %s", path, strerror(errno));
            rc = -1;
        }
        for (size_t i = n; rc == 0 && i-- > 0;) {
            rc = put(fd, (const char *)(es[i] + 1), es[i]->old_len, es[i]->off, path, err, errlen);
            if (rc == 0 && ftruncate(fd, (off_t)es[i]->old_size) != 0) {
                snprintf(err, errlen, "powercut: %s: cannot truncate to %" PRIu64 ": %s", path, es[i]->old_size,
                         strerror(errno));
                rc = -1;
            }
        }
        for (size_t i = 0; rc == 0 && i < n; i++) {
            if (es[i]->synced == ENTRY_LOST) {
                st->lost++; /* a failed sync dropped it: never on the disk */
                continue;
            }
            if (es[i]->synced == ENTRY_SYNCED) {
                rc = put(fd, (const char *)(es[i] + 1) + es[i]->old_len, es[i]->len, es[i]->off, path, err, errlen);
                continue; /* durable after the lost one: on the disk whole */
            }
            st->unsynced++;
            rc = replay(fd, es[i], s, st, path, err, errlen);
        }
        if (fd >= 0) {
            close(fd);
        }
    }
    free(es);
    return rc;
}

/* The renames and unlinks since the directory's last fsync: a seeded prefix
 * of them survives (a journalling file system commits them in order), the
 * rest are undone newest first, each name given back to the file it named
 * before (kept as a link in the held directory). */
static int lose_renames(uint64_t *s, powercut_stats_t *st, char *err, size_t errlen)
{
    size_t keep = (size_t)(powercut_next_rand(s) % (g_j->renames + 1));
    for (size_t i = g_j->renames; i-- > keep;) {
        const struct renamed *r = &g_j->renamed[i];
        if (r->unlinked) {
            if (link(r->held, r->from) != 0) {
                snprintf(err, errlen, "powercut: cannot undo the unlink of %s: %s", r->from, strerror(errno));
                return -1;
            }
            st->unlinks_lost++;
            continue;
        }
        if (rename(r->to, r->from) != 0 || (r->held[0] != '\0' && link(r->held, r->to) != 0)) {
            snprintf(err, errlen, "powercut: cannot undo the rename of %s to %s: %s", r->from, r->to, strerror(errno));
            return -1;
        }
        st->renames_lost++;
        st->replaced_back += r->held[0] != '\0';
    }
    return 0;
}

int powercut_power_off(uint64_t seed, powercut_stats_t *st, char *err, size_t errlen)
{
    memset(st, 0, sizeof *st);
    g_j->armed = 0;
    if (g_j->overflow) {
        snprintf(err, errlen, "powercut: the %zu-byte journal overflowed (or an undo read failed)", g_j->cap);
        return -1;
    }
    if (g_j->unheld) {
        snprintf(err, errlen, "powercut: a file a rename or unlink took the name from could not be linked into %s",
                 g_j->held_dir);
        return -1;
    }
    uint64_t s = seed;
    int rc = lose_renames(&s, st, err, errlen);
    char *done = calloc(g_j->used / 8 + 1, 1);
    for (size_t at = 0; rc == 0 && at < g_j->used;) {
        const struct entry *e = (const struct entry *)(g_j->entries + at);
        if (e->synced != ENTRY_SYNCED && !done[at / 8]) {
            rc = cut_file(at, done, &s, st, err, errlen);
        }
        at += entry_bytes(e);
    }
    free(done);
    return rc;
}

/* ---- the seed loop ------------------------------------------------------ */

/* The environment variable name as a whole number >= min into *out: 1 when
 * set and valid, 0 when unset; a bad value ends the test naming it. */
static int seed_env(const char *name, uint64_t min, uint64_t *out)
{
    const char *text = getenv(name);
    if (text == NULL)
        return 0;
    char *end = NULL;
    errno = 0;
    unsigned long long v = strtoull(text, &end, 10);
    int ok = text[0] >= '0' && text[0] <= '9' && *end == '\0' && errno == 0 && v >= min;
    TU_REQUIRE(ok, "%s='%s': not a whole number from %" PRIu64, name, text, min);
    *out = (uint64_t)v;
    return 1;
}

powercut_seed_run_t powercut_run_seeds(const char *dir, uint64_t default_seeds, powercut_seed_fn run_seed, void *ctx)
{
    powercut_seed_run_t r = { 0 };
    uint64_t from = 1, n = default_seeds;
    if (seed_env("HG_POWERCUT_SEED", 0, &from))
        n = 1;
    else
        seed_env("HG_POWERCUT_SEEDS", 1, &n);
    uint64_t t0 = tu_now_mono_ms();
    for (uint64_t seed = from; seed - from < n && !r.failed; seed++, r.ran++) {
        tu_rmtree(dir);
        TU_REQUIRE(mkdir(dir, 0700) == 0, "mkdir %s: %s", dir, strerror(errno));
        r.failed = run_seed(seed, ctx) != 0;
        if (r.failed)
            fprintf(stderr, "power cut failure: replay with HG_POWERCUT_SEED=%" PRIu64 "\n", seed);
    }
    r.wall_ms = tu_now_mono_ms() - t0;
    empty_held_dir();
    rmdir(g_j->held_dir);
    return r;
}

void powercut_stats_add(powercut_stats_t *sum, const powercut_stats_t *st)
{
    sum->unsynced += st->unsynced;
    sum->kept += st->kept;
    sum->dropped += st->dropped;
    sum->torn += st->torn;
    sum->renames_lost += st->renames_lost;
    sum->replaced_back += st->replaced_back;
    sum->unlinks_lost += st->unlinks_lost;
    sum->lost += st->lost;
}

int powercut_cut_child(pid_t pid, uint64_t cut_seed, powercut_stats_t *sum, char *err, size_t errlen)
{
    int status = 0;
    if (waitpid(pid, &status, 0) != pid) {
        snprintf(err, errlen, "waitpid %d: %s", (int)pid, strerror(errno));
        return -1;
    }
    if (!WIFSIGNALED(status) || WTERMSIG(status) != SIGKILL) {
        snprintf(err, errlen, "the writer ended by status %#x, not by the cut", (unsigned)status);
        return -1;
    }
    powercut_stats_t st;
    char why[512];
    if (powercut_power_off(cut_seed, &st, why, sizeof why) != 0) {
        snprintf(err, errlen, "power off: %s", why);
        return -1;
    }
    powercut_stats_add(sum, &st);
    return 0;
}
