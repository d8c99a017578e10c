/*
 * levels/logsync.c — fdatasync a LevelDB's write-ahead logs from another
 * thread (see logsync.h).
 *
 * Keeps one read-only descriptor per log file it has seen (Linux syncs a
 * file through any descriptor of it). Each run lists the directory, opens
 * the logs it does not know yet, closes those LevelDB deleted, and syncs the
 * rest, newest last, and notes the newest one's size (logsync_newest_bytes).
 * A directory holds one log, two while a memtable is being compacted.
 *
 * Threading: one thread per logsync_t (the broker's syncer thread).
 */
#include "levels/logsync.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/alloc.h"
#include "base/err.h"
#include "levels/store.h"

#define LOGSYNC_MAX_FILES 8 /* logs tracked at once; LevelDB keeps one or two */

typedef struct log_fd {
    unsigned long long number; /* NNNNNN of NNNNNN.log */
    int fd;
    int seen; /* listed by the current run */
} log_fd_t;

struct logsync {
    char *path;
    char shown[STORE_PATH_SHOWN_MAX + 1]; /* path as errors show it */
    log_fd_t files[LOGSYNC_MAX_FILES];
    int nfiles;
    int failed_full;                 /* the last run's fdatasync failed for want of space */
    unsigned long long newest_bytes; /* the newest log's size after the last good run */
};

logsync_t *logsync_new(const char *path)
{
    logsync_t *ls = xcalloc(1, sizeof *ls);
    ls->path = xstrdup(path);
    store_path_shown(path, ls->shown, sizeof ls->shown);
    return ls;
}

void logsync_free(logsync_t *ls)
{
    if (ls == NULL) {
        return;
    }
    for (int i = 0; i < ls->nfiles; i++) {
        close(ls->files[i].fd);
    }
    free(ls->path);
    free(ls);
}

int logsync_log_number(const char *name, unsigned long long *number)
{
    size_t len = strlen(name);
    if (len < 5 || strcmp(name + len - 4, ".log") != 0) {
        return 0;
    }
    unsigned long long n = 0;
    for (size_t i = 0; i < len - 4; i++) {
        if (name[i] < '0' || name[i] > '9') {
            return 0;
        }
        n = n * 10 + (unsigned long long)(name[i] - '0');
    }
    *number = n;
    return 1;
}

static int track(logsync_t *ls, unsigned long long number, char *err, size_t errlen)
{
    for (int i = 0; i < ls->nfiles; i++) {
        if (ls->files[i].number == number) {
            ls->files[i].seen = 1;
            return 0;
        }
    }
    if (ls->nfiles == LOGSYNC_MAX_FILES) {
        return err_set(err, errlen, "more than %d write-ahead logs in %s", LOGSYNC_MAX_FILES, ls->shown);
    }
    char file[4096];
    snprintf(file, sizeof file, "%s/%06llu.log", ls->path, number);
    int fd = open(file, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        if (errno == ENOENT) {
            return 0; /* deleted since the listing: compacted, nothing to sync */
        }
        return err_set(err, errlen, "cannot open %s/%06llu.log: %s", ls->shown, number, strerror(errno));
    }
    ls->files[ls->nfiles++] = (log_fd_t){ .number = number, .fd = fd, .seen = 1 };
    return 0;
}

int logsync_run(logsync_t *ls, char *err, size_t errlen)
{
    ls->failed_full = 0;
    DIR *d = opendir(ls->path);
    if (d == NULL) {
        return err_set(err, errlen, "cannot list %s: %s", ls->shown, strerror(errno));
    }
    for (int i = 0; i < ls->nfiles; i++) {
        ls->files[i].seen = 0;
    }
    int rc = 0;
    struct dirent *e;
    while (rc == 0 && (e = readdir(d)) != NULL) {
        unsigned long long number;
        if (logsync_log_number(e->d_name, &number)) {
            rc = track(ls, number, err, errlen);
        }
    }
    closedir(d);
    if (rc != 0) {
        return -1;
    }
    /* Drop the logs LevelDB deleted; sync the others, oldest first. */
    int kept = 0;
    for (int i = 0; i < ls->nfiles; i++) {
        if (ls->files[i].seen) {
            ls->files[kept++] = ls->files[i];
        } else {
            close(ls->files[i].fd);
        }
    }
    ls->nfiles = kept;
    if (kept == 0) {
        return err_set(err, errlen, "no write-ahead log in %s", ls->shown);
    }
    int newest = 0;
    for (int pass = 0; pass < kept; pass++) {
        int oldest = -1;
        for (int i = 0; i < kept; i++) {
            if (ls->files[i].seen && (oldest < 0 || ls->files[i].number < ls->files[oldest].number)) {
                oldest = i;
            }
        }
        ls->files[oldest].seen = 0;
        if (fdatasync(ls->files[oldest].fd) != 0) {
            int sync_errno = errno;
            ls->failed_full = store_failure_errno_full(sync_errno);
            return err_set(err, errlen, "fdatasync of %s/%06llu.log failed: %s", ls->shown, ls->files[oldest].number,
                           strerror(sync_errno));
        }
        newest = oldest; /* the last synced is the newest */
    }
    struct stat st;
    ls->newest_bytes = fstat(ls->files[newest].fd, &st) == 0 ? (unsigned long long)st.st_size : 0;
    return 0;
}

unsigned long long logsync_newest_bytes(const logsync_t *ls)
{
    return ls->newest_bytes;
}

int logsync_failed_full(const logsync_t *ls)
{
    return ls->failed_full;
}
