/*
 * levels/checkview.c — store_check_dir: check a data directory without
 * writing a byte to it (see store.h, "Checking a data directory").
 *
 * Opening LevelDB writes: it replays the write-ahead log into a new table,
 * writes a new MANIFEST and a new log, takes the LOCK file, and store_open
 * cuts a torn log end (logtail.h). A check must leave the directory as it
 * found it (it is evidence, or a backup, or on a read-only mount), so the
 * store is opened in a scratch view instead: a new directory holding hard
 * links to the table files (*.ldb, *.sst: LevelDB never writes a table once
 * it is made, and only unlinks its own name of one) and copies of CURRENT,
 * the MANIFEST-* files and the logs (LevelDB may write into those). The view
 * is made beside the directory ("<dir>.check-XXXXXX", the same file system,
 * so links work and only the logs take room), or else under $TMPDIR (or
 * /tmp), with copies where a link fails (another file system, a read-only
 * one, a file the user may not link). Everything else (LOCK, LOG, BALLAST,
 * kept torn tails) stays out. Whatever the open and the check write goes
 * into the view, which is removed at the end.
 *
 * A directory without CURRENT is opened as it is: store_open refuses it
 * (missing, empty, damaged, not ours) before LevelDB touches it. The
 * directory is checked for a running broker (its LOCK) before and after the
 * view is made: a view made while a broker writes could miss a file.
 *
 * Threading: any one thread; no store of the directory may be open in this
 * process.
 */
#include "levels/store_internal.h"
#include "levels/logsync.h"
#include "base/alloc.h"
#include "base/err.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* What goes into the view: 'L' linked (a table), 'C' copied, 0 left out. */
static int view_kind(const char *name)
{
    unsigned long long number;
    size_t n = strlen(name);
    if (n > 4 && (strcmp(name + n - 4, ".ldb") == 0 || strcmp(name + n - 4, ".sst") == 0)) {
        return 'L';
    }
    if (strcmp(name, "CURRENT") == 0 || strncmp(name, "MANIFEST-", 9) == 0 || logsync_log_number(name, &number)) {
        return 'C';
    }
    return 0;
}

/* 1 when dir holds a file named CURRENT. */
static int has_current(const char *dir)
{
    char path[4200];
    struct stat st;
    snprintf(path, sizeof path, "%s/CURRENT", dir);
    return stat(path, &st) == 0;
}

#define COPY_BUFFER      ((size_t)1 << 20)
#define VIEW_CANNOT_READ (-2) /* a file of the directory cannot be read: no view anywhere helps */

/* Copy from into to (a new file, mode 0600; no fsync: a scratch file). 0;
 * VIEW_CANNOT_READ when from cannot be read; -1 when to cannot be written. */
static int copy_file(const char *from, const char *to, uint64_t *bytes, char *err, size_t errlen)
{
    int in = open(from, O_RDONLY | O_CLOEXEC);
    if (in < 0) {
        err_set(err, errlen, "cannot read %s: %s", from, strerror(errno));
        return VIEW_CANNOT_READ;
    }
    int out = open(to, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (out < 0) {
        err_set(err, errlen, "cannot create %s: %s", to, strerror(errno));
        close(in);
        return -1;
    }
    char *buf = xmalloc(COPY_BUFFER);
    int rc = 0;
    for (;;) {
        ssize_t k = read(in, buf, COPY_BUFFER);
        if (k < 0 && errno == EINTR) {
            continue;
        }
        if (k < 0) {
            err_set(err, errlen, "cannot read %s: %s", from, strerror(errno));
            rc = VIEW_CANNOT_READ;
            break;
        }
        if (k == 0) {
            break;
        }
        for (ssize_t done = 0; done < k;) {
            ssize_t w = write(out, buf + done, (size_t)(k - done));
            if (w < 0 && errno == EINTR) {
                continue;
            }
            if (w < 0) {
                rc = err_set(err, errlen, "cannot write %s: %s", to, strerror(errno));
                break;
            }
            done += w;
        }
        if (rc != 0) {
            break;
        }
        *bytes += (uint64_t)k;
    }
    free(buf);
    close(in);
    if (close(out) != 0 && rc == 0) {
        rc = err_set(err, errlen, "cannot write %s: %s", to, strerror(errno));
    }
    return rc;
}

/* Remove the view and everything in it (names only: a link's table stays). */
static void view_remove(const char *view)
{
    DIR *d = opendir(view);
    if (d != NULL) {
        struct dirent *e;
        while ((e = readdir(d)) != NULL) {
            if (strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0) {
                unlinkat(dirfd(d), e->d_name, 0);
            }
        }
        closedir(d);
    }
    rmdir(view);
}

/* Fill the new, empty view with dir's files: 0, -1, or VIEW_CANNOT_READ. */
static int view_fill(const char *dir, const char *view, store_dir_check_t *r, char *err, size_t errlen)
{
    DIR *d = opendir(dir);
    if (d == NULL) {
        err_set(err, errlen, "cannot list %s: %s", dir, strerror(errno));
        return VIEW_CANNOT_READ;
    }
    int rc = 0;
    struct dirent *e;
    while (rc == 0 && (e = readdir(d)) != NULL) {
        int kind = view_kind(e->d_name);
        if (kind == 0) {
            continue;
        }
        char from[4200], to[4200];
        snprintf(from, sizeof from, "%s/%s", dir, e->d_name);
        snprintf(to, sizeof to, "%s/%s", view, e->d_name);
        if (kind == 'L' && link(from, to) == 0) {
            r->linked++;
            continue;
        }
        rc = copy_file(from, to, &r->copied_bytes, err, errlen);
        r->copied += rc == 0;
    }
    closedir(d);
    return rc;
}

/* Make the view under the template tmpl (mkdtemp's, changed in place): 0,
 * -1, or VIEW_CANNOT_READ. */
static int view_make(const char *dir, char *tmpl, store_dir_check_t *r, char *err, size_t errlen)
{
    r->linked = r->copied = 0;
    r->copied_bytes = 0;
    if (mkdtemp(tmpl) == NULL) {
        return err_set(err, errlen, "cannot create a scratch directory %s: %s", tmpl, strerror(errno));
    }
    int rc = view_fill(dir, tmpl, r, err, errlen);
    if (rc != 0) {
        view_remove(tmpl);
        return rc;
    }
    snprintf(r->view, sizeof r->view, "%s", tmpl);
    return 0;
}

/* Replace every from in err by to (an error about the view is about dir). */
static void name_dir(char *err, size_t errlen, const char *from, const char *to)
{
    size_t flen = strlen(from);
    if (err == NULL || flen == 0) {
        return;
    }
    char out[4096];
    size_t n = 0;
    for (const char *p = err; *p != '\0' && n + 1 < sizeof out;) {
        if (strncmp(p, from, flen) == 0) {
            n += (size_t)snprintf(out + n, sizeof out - n, "%s", to);
            n = n < sizeof out ? n : sizeof out - 1;
            p += flen;
        } else {
            out[n++] = *p++;
        }
    }
    out[n] = '\0';
    snprintf(err, errlen, "%s", out);
}

static int in_use(const char *dir, char *err, size_t errlen)
{
    err_set(err, errlen,
            "data directory %s is in use: another broker (or process) holds its LOCK file (one broker per data "
            "directory)",
            dir);
    return STORE_OPEN_IN_USE;
}

/* Open the view, note a torn log end it cut, check it. */
static int check_view(const store_options_t *o, uint64_t now_ms, store_dir_check_t *r, char *err, size_t errlen)
{
    store_options_t vo = *o;
    vo.path = r->view;
    vo.create_if_missing = 0;
    store_t *s = NULL;
    int rc = store_open(&vo, now_ms, &s, err, errlen);
    if (rc != 0) {
        return rc;
    }
    if (s->log_was_cut) {
        r->torn = 1;
        snprintf(r->torn_log, sizeof r->torn_log, "%s", s->log_cut.file);
        r->torn_offset = s->log_cut.good_end;
        r->torn_bytes = s->log_cut.size - s->log_cut.good_end;
    }
    rc = store_check_counted(s, &r->counts, err, errlen) != 0 ? STORE_OPEN_DAMAGED : 0;
    char cerr[256];
    if (store_close_unsynced(s, cerr, sizeof cerr) != 0 && rc == 0) { /* a failed write in the view */
        rc = err_set(err, errlen, "closing the scratch view: %s", cerr);
    }
    return rc;
}

int store_check_dir(const store_options_t *o, uint64_t now_ms, store_dir_check_t *r, char *err, size_t errlen)
{
    memset(r, 0, sizeof *r);
    if (o->path == NULL || o->path[0] == '\0') {
        return err_set(err, errlen, "no data directory given");
    }
    const char *dir = o->path;
    if (!has_current(dir)) {
        store_options_t ro = *o;
        ro.create_if_missing = 0;
        store_t *s = NULL;
        int rc = store_open(&ro, now_ms, &s, err, errlen); /* refuses before LevelDB opens anything */
        if (rc == 0) {
            store_close(s, NULL, 0);
            return err_set(err, errlen, "%s has no CURRENT file but opened", dir);
        }
        return rc;
    }
    if (store_dir_in_use(dir)) {
        return in_use(dir, err, errlen);
    }
    /* Beside the directory's real path: "DIR/." or a symbolic link would put
     * it inside the directory, or beside the link. */
    char real[PATH_MAX];
    if (realpath(dir, real) == NULL) {
        return err_set(err, errlen, "cannot resolve the path of data directory %s: %s", dir, strerror(errno));
    }
    const char *tmp = getenv("TMPDIR");
    char beside[PATH_MAX + 32], elsewhere[4200], why_beside[1024] = "", why_elsewhere[1024] = "";
    snprintf(beside, sizeof beside, "%s.check-XXXXXX", real);
    snprintf(elsewhere, sizeof elsewhere, "%s/hourglass-check-XXXXXX", tmp != NULL && tmp[0] != '\0' ? tmp : "/tmp");
    int made = strcmp(real, "/") == 0 ? err_set(why_beside, sizeof why_beside, "it is the root directory")
                                      : view_make(dir, beside, r, why_beside, sizeof why_beside);
    if (made != 0 && made != VIEW_CANNOT_READ) {
        made = view_make(dir, elsewhere, r, why_elsewhere, sizeof why_elsewhere);
        if (made == VIEW_CANNOT_READ) {
            snprintf(why_beside, sizeof why_beside, "%s", why_elsewhere);
        }
    }
    if (made == VIEW_CANNOT_READ) {
        return err_set(err, errlen, "%s (the check must read every file of the data directory)", why_beside);
    }
    if (made != 0) {
        return err_set(err, errlen,
                       "no scratch view of %s could be made (the check opens the store in a scratch directory, "
                       "never in %s itself): beside it: %s; under $TMPDIR: %s; set TMPDIR to a directory this user "
                       "can write, with room for the logs and, on another file system, the tables",
                       dir, dir, why_beside, why_elsewhere);
    }
    int rc = store_dir_in_use(dir) ? in_use(dir, err, errlen) : check_view(o, now_ms, r, err, errlen);
    if (rc != 0) {
        name_dir(err, errlen, r->view, dir);
    }
    view_remove(r->view);
    return rc;
}
