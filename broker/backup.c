/*
 * broker/backup.c — BACKUP's thread (see backup.h).
 *
 * Invariants:
 *  - At most one copy runs. Its thread owns the snapshot and releases it
 *    when the copy ends; the storage thread joins the thread (backup_stop)
 *    before it closes the store, so the snapshot never outlives the
 *    database it belongs to.
 *  - dir/name exists only as a whole copy (store_snapshot_copy makes it in
 *    dir/name.partial and renames it once whole), and holds BACKUP-WHOLE
 *    (STORE_COPY_WHOLE), which tells --check-data that a torn log end in it
 *    is damage, not a power cut's. A .partial that a crash
 *    left is removed at start-up and by the next BACKUP of its name, once
 *    store_copy_discard_partial sees that no process is still making it.
 *  - The copy keeps to its rate (bytes of records read per second): unpaced,
 *    its writes (the copy's log and tables) made the broker's fsyncs wait,
 *    and a SEND's p99 went from 0.7 to 4-5 ms while it ran
 *    (docs/BENCH-broker.md "BACKUP").
 *  - The status is shared under mu; the progress counters are atomics the
 *    copy bumps as it goes. A BACKUP refused before its copy began (its
 *    backup-dir cannot be made, its disk is under the floor, the name is
 *    taken ...) is recorded as a failed copy too, so that the alert on
 *    hourglass_backup_last_failed fires for a nightly job that is refused
 *    every night; only "still running" is not (that copy's end is).
 */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include "broker/backup.h"

#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "base/alloc.h"
#include "base/err.h"
#include "broker/diskguard.h"
#include "common/log.h"
#include "base/clock.h"

#define BACKUP_NICE   10     /* the copy thread's nice value */
#define PACE_SLICE_US 100000 /* longest sleep of the pace: a stop waits no longer */

struct backup {
    pthread_mutex_t mu;
    backup_status_t st; /* under mu; keys and bytes come from progress while running */
    pthread_t thread;
    int joinable; /* storage thread only: a thread started and not joined yet */
    atomic_int stop;
    store_copy_progress_t progress;
    store_snapshot_t *snap; /* the running copy's (its thread releases it) */
    uint64_t min_free;      /* the copy fails rather than leave less free on its disk */
    uint64_t rate;          /* bytes of records copied per second at most (0: no limit) */
    uint64_t started_mono;  /* µs, for the pace */
    char dir[PATH_MAX], final[PATH_MAX];
};

const char *backup_result_name(backup_result_t r)
{
    switch (r) {
    case BACKUP_OK:
        return "ok";
    case BACKUP_FAILED:
        return "failed";
    case BACKUP_STOPPED:
        return "stopped";
    default:
        return "none";
    }
}

backup_t *backup_new(void)
{
    backup_t *b = xcalloc(1, sizeof *b);
    pthread_mutex_init(&b->mu, NULL);
    return b;
}

void backup_free(backup_t *b)
{
    if (b == NULL) {
        return;
    }
    backup_stop(b);
    pthread_mutex_destroy(&b->mu);
    free(b);
}

int backup_check_name(const char *name, size_t len, char *err, size_t errlen)
{
    if (len == 0) {
        err_set(err, errlen, "the backup name is empty");
        return -1;
    }
    if (len > BACKUP_NAME_MAX) {
        err_set(err, errlen, "the backup name is longer than %d characters", BACKUP_NAME_MAX);
        return -1;
    }
    if (name[0] == '.') {
        err_set(err, errlen, "the backup name must not start with '.'");
        return -1;
    }
    for (size_t i = 0; i < len; i++) {
        char c = name[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' || c == '_' ||
              c == '-')) {
            err_set(err, errlen, "the backup name may hold only letters, digits, '.', '_' and '-'");
            return -1;
        }
    }
    return 0;
}

/* 0 when the file system of dir has at least min_free bytes free (or it
 * cannot be told), else -1 with err: a copy leaves that much free. */
static int check_floor(const char *dir, uint64_t min_free, char *err, size_t errlen)
{
    uint64_t free_bytes = diskguard_free_bytes(dir);
    if (free_bytes != UINT64_MAX && free_bytes < min_free) {
        err_set(err, errlen,
                "the file system of %s has %llu bytes free, under the %llu a copy leaves free (the broker's "
                "own floor: 2 x disk-reserve, at least disk-reserve + one commit-log segment)",
                dir, (unsigned long long)free_bytes, (unsigned long long)min_free);
        return -1;
    }
    return 0;
}

/* Hold the copy to b->rate: wait until the bytes copied so far are due, in
 * slices, so that a stop is seen within PACE_SLICE_US. 1 when told to stop. */
static int pace(backup_t *b)
{
    if (b->rate == 0) {
        return 0;
    }
    uint64_t due = b->started_mono + atomic_load(&b->progress.bytes) * 1000000 / b->rate;
    for (uint64_t now = clock_mono_us(); now < due; now = clock_mono_us()) {
        if (atomic_load(&b->stop)) {
            return 1;
        }
        uint64_t wait = due - now < PACE_SLICE_US ? due - now : PACE_SLICE_US;
        struct timespec ts = { (time_t)(wait / 1000000), (long)(wait % 1000000) * 1000 };
        nanosleep(&ts, NULL);
    }
    return 0;
}

/* Between the copy's batches: keep the pace, stop when told, fail before the
 * copy's disk drops below min_free. */
static int copy_check(void *ctx, char *err, size_t errlen)
{
    backup_t *b = ctx;
    if (pace(b) != 0 || atomic_load(&b->stop)) {
        return 1;
    }
    return check_floor(b->dir, b->min_free, err, errlen);
}

/* The status of a copy that ended at now (wall ms): rc 0 whole, 1 stopped,
 * -1 failed with err; also a BACKUP refused before its copy began (running
 * was never set), so that INFO and /metrics say the last BACKUP failed. */
static void record_end(backup_t *b, int rc, const char *err, uint64_t now)
{
    pthread_mutex_lock(&b->mu);
    b->st.running = 0;
    b->st.keys = atomic_load(&b->progress.keys);
    b->st.bytes = atomic_load(&b->progress.bytes);
    b->st.last = rc == 0 ? BACKUP_OK : rc == 1 ? BACKUP_STOPPED : BACKUP_FAILED;
    b->st.last_finished_ms = now;
    b->st.last_ms = now > b->st.started_ms ? now - b->st.started_ms : 0;
    snprintf(b->st.last_error, sizeof b->st.last_error, "%s", rc == -1 ? err : "");
    for (char *c = b->st.last_error; *c; c++) {
        if (*c == '\r' || *c == '\n') {
            *c = ' '; /* one INFO line */
        }
    }
    if (rc == 0) {
        b->st.last_ok_ms = now;
    }
    pthread_mutex_unlock(&b->mu);
}

static void *backup_main(void *arg)
{
    backup_t *b = arg;
    char err[300] = "";
    /* The copy yields the CPU to the loop and the storage thread (a thread's
     * nice value is its own on Linux); failing that it runs as it is. */
    if (setpriority(PRIO_PROCESS, (id_t)syscall(SYS_gettid), BACKUP_NICE) != 0) {
        log_debug("backup: cannot lower the copy's priority: %s", strerror(errno));
    }
    int rc = store_snapshot_copy(b->snap, b->final, copy_check, b, &b->progress, err, sizeof err);
    store_snapshot_release(b->snap);
    b->snap = NULL;
    record_end(b, rc, err, clock_wall_ms());
    if (rc == 0) {
        log_info("backup %s done: %llu records, %llu bytes in %llu ms", b->final, (unsigned long long)b->st.keys,
                 (unsigned long long)b->st.bytes, (unsigned long long)b->st.last_ms);
    } else if (rc == 1) {
        log_warn("backup %s stopped before it was whole; nothing of it is left", b->final);
    } else {
        log_error("backup %s failed: %s", b->final, err);
    }
    return NULL;
}

/* Does path exist? 1 yes, 0 no, -1 with err when it cannot be told. */
static int path_exists(const char *path, char *err, size_t errlen)
{
    struct stat st;
    if (stat(path, &st) == 0) {
        return 1;
    }
    if (errno == ENOENT) {
        return 0;
    }
    err_set(err, errlen, "%s: %s", path, strerror(errno));
    return -1;
}

/* A copy of final's that a broker did not finish (it was killed mid-copy)
 * is removed, and the removal logged; 0 when none is left, -1 with err when
 * one stays (a foreign file in it, or another process still making it). */
static int discard_partial(const char *final, char *err, size_t errlen)
{
    int rc = store_copy_discard_partial(final, err, errlen);
    if (rc == 1) {
        log_warn("backup: removed %s" STORE_COPY_PARTIAL ", a copy that a broker did not finish (it was stopped "
                 "mid-copy by a crash)",
                 final);
    }
    return rc < 0 ? -1 : 0;
}

void backup_discard_unfinished(const char *dir)
{
    DIR *d = opendir(dir);
    if (d == NULL) {
        if (errno != ENOENT) {
            log_warn("backup-dir %s: %s", dir, strerror(errno));
        }
        return;
    }
    const size_t suffix = strlen(STORE_COPY_PARTIAL);
    for (struct dirent *de = readdir(d); de != NULL; de = readdir(d)) {
        size_t len = strlen(de->d_name);
        char err[PATH_MAX + 300];
        if (len <= suffix || strcmp(de->d_name + len - suffix, STORE_COPY_PARTIAL) != 0 ||
            backup_check_name(de->d_name, len - suffix, err, sizeof err) != 0) {
            continue; /* not a name BACKUP makes */
        }
        char final[PATH_MAX];
        if ((size_t)snprintf(final, sizeof final, "%s/%.*s", dir, (int)(len - suffix), de->d_name) >= sizeof final) {
            continue;
        }
        if (discard_partial(final, err, sizeof err) != 0) {
            log_warn("backup: %s", err);
        }
    }
    closedir(d);
}

static int begin_copy(backup_t *b, store_t *s, const char *dir, const char *name, uint64_t min_free, uint64_t rate,
                      uint64_t now_ms, char *err, size_t errlen);

int backup_start(backup_t *b, store_t *s, const char *dir, const char *name, uint64_t min_free, uint64_t rate,
                 uint64_t now_ms, char *err, size_t errlen)
{
    pthread_mutex_lock(&b->mu);
    int running = b->st.running;
    char running_name[BACKUP_NAME_MAX + 1];
    snprintf(running_name, sizeof running_name, "%s", b->st.name);
    pthread_mutex_unlock(&b->mu);
    if (running) {
        err_set(err, errlen, "backup '%s' is still running (INFO storage: backup_in_progress)", running_name);
        return -1;
    }
    backup_stop(b); /* reap the last one's thread */
    if (begin_copy(b, s, dir, name, min_free, rate, now_ms, err, errlen) != 0) {
        pthread_mutex_lock(&b->mu);
        snprintf(b->st.name, sizeof b->st.name, "%s", backup_check_name(name, strlen(name), NULL, 0) ? "" : name);
        b->st.started_ms = now_ms;
        pthread_mutex_unlock(&b->mu);
        atomic_store(&b->progress.keys, 0);
        atomic_store(&b->progress.bytes, 0);
        record_end(b, -1, err, now_ms);
        return -1;
    }
    return 0;
}

/* backup_start once no copy runs: check name and dir, take the snapshot,
 * start the thread. 0, or -1 with err (nothing started). */
static int begin_copy(backup_t *b, store_t *s, const char *dir, const char *name, uint64_t min_free, uint64_t rate,
                      uint64_t now_ms, char *err, size_t errlen)
{
    if (backup_check_name(name, strlen(name), err, errlen) != 0) {
        return -1;
    }
    struct stat st;
    if (stat(dir, &st) != 0) {
        if (errno != ENOENT) {
            return err_set(err, errlen, "backup-dir %s: %s", dir, strerror(errno));
        }
        if (mkdir(dir, 0700) != 0) { /* its parent missing, not writable, a read-only mount */
            return err_set(err, errlen, "cannot create backup-dir %s: %s", dir, strerror(errno));
        }
        log_info("backup-dir %s created", dir); /* e.g. in a systemd unit's state directory */
        if (stat(dir, &st) != 0) {
            return err_set(err, errlen, "backup-dir %s: %s", dir, strerror(errno));
        }
    }
    if (!S_ISDIR(st.st_mode)) {
        err_set(err, errlen, "backup-dir %s is not a directory", dir);
        return -1;
    }
    char final[PATH_MAX];
    if ((size_t)snprintf(final, sizeof final, "%s/%s", dir, name) >= sizeof final) {
        err_set(err, errlen, "the backup path is too long");
        return -1;
    }
    int e = path_exists(final, err, errlen);
    if (e != 0) {
        if (e == 1) {
            err_set(err, errlen, "backup '%s' already exists in %s (choose another name)", name, dir);
        }
        return -1;
    }
    if (discard_partial(final, err, errlen) != 0) {
        return -1;
    }
    if (check_floor(dir, min_free, err, errlen) != 0) {
        return -1;
    }
    store_snapshot_t *snap = store_snapshot_take(s, err, errlen);
    if (snap == NULL) {
        return -1;
    }
    snprintf(b->dir, sizeof b->dir, "%s", dir);
    snprintf(b->final, sizeof b->final, "%s", final);
    b->snap = snap;
    b->min_free = min_free;
    b->rate = rate;
    b->started_mono = clock_mono_us();
    atomic_store(&b->stop, 0);
    atomic_store(&b->progress.keys, 0);
    atomic_store(&b->progress.bytes, 0);
    pthread_mutex_lock(&b->mu);
    b->st.running = 1;
    snprintf(b->st.name, sizeof b->st.name, "%s", name);
    b->st.started_ms = now_ms;
    b->st.keys = b->st.bytes = 0;
    pthread_mutex_unlock(&b->mu);
    int rc = pthread_create(&b->thread, NULL, backup_main, b);
    if (rc != 0) {
        store_snapshot_release(snap);
        b->snap = NULL;
        pthread_mutex_lock(&b->mu);
        b->st.running = 0;
        pthread_mutex_unlock(&b->mu);
        err_set(err, errlen, "cannot start the backup thread: %s", strerror(rc));
        return -1;
    }
    b->joinable = 1;
    log_info("backup %s started", final);
    return 0;
}

void backup_stop(backup_t *b)
{
    if (b == NULL || !b->joinable) {
        return;
    }
    atomic_store(&b->stop, 1);
    pthread_join(b->thread, NULL);
    b->joinable = 0;
}

void backup_status(backup_t *b, backup_status_t *out)
{
    pthread_mutex_lock(&b->mu);
    *out = b->st;
    pthread_mutex_unlock(&b->mu);
    if (out->running) {
        out->keys = atomic_load(&b->progress.keys);
        out->bytes = atomic_load(&b->progress.bytes);
    }
}
