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
 * the MANIFEST-* files and the logs (LevelDB may write into those), and
 * copies of the commit log's segments (clog-*.seg: LevelDB lags the log by
 * the batches not applied yet, which the view's open redoes) and of the
 * consume queue and where-slot files (cq-*.q, slot-*.w: the redo rewrites
 * them by position). The view
 * is made beside the directory ("<dir>.check-XXXXXX", the same file system,
 * so links work and only the logs take room), or else under $TMPDIR (or
 * /tmp), with copies where a link fails (another file system, a read-only
 * one, a file the user may not link). Everything else (LOCK, LOG, BALLAST,
 * kept torn tails) stays out. Whatever the open and the check write goes
 * into the view, which is removed at the end.
 *
 * The check holds an flock on the view's directory from just after it is
 * made until it is removed. A check that was killed (kill -9, a power cut)
 * leaves its view, whose hard links keep old tables' disk space taken: the
 * next check sweeps the views of the same directory (and those under
 * $TMPDIR) whose lock it can take and that hold only files a view holds;
 * the view of a check running now stays (its lock is held). A view a sweep
 * removed between its mkdtemp and its lock is seen (no link left) and made
 * again. store_check_dir_interrupt removes the view of a check stopped by a
 * signal; view_mutex makes that removal and the check's own one exclusive.
 *
 * A directory without CURRENT is opened as it is: store_open refuses it
 * (missing, empty, damaged, not ours) before LevelDB touches it. The
 * directory is checked for a running broker (its LOCK) before and after the
 * view is made: a view made while a broker writes could miss a file.
 *
 * A directory holding STORE_COPY_WHOLE is a whole copy BACKUP made (every
 * file fsynced before it was named, snapshot.c): before anything else its
 * files are checked against the marker's list (store_copy_verify: names,
 * sizes, and the CRC-32C of every byte), which finds a copy cut on a record
 * boundary or missing a file LevelDB does not list. A torn log end in it
 * (also in a copy whose older marker has no list) is no power cut's but
 * damage done to the copy after, and the check says so as damage (the
 * records it cut may be acknowledged messages) instead of checking what is
 * left. The file stays out of the view, so the view's store_open has none
 * to check or remove.
 *
 * Threading: store_check_dir on any one thread, no store of the directory
 * open in this process; store_check_dir_interrupt on another.
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
#include <pthread.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

/* The view being made or checked ("" when none), for
 * store_check_dir_interrupt, which keeps view_mutex locked. */
static pthread_mutex_t view_mutex = PTHREAD_MUTEX_INITIALIZER;
static char view_active[4200];

#define VIEW_MAKE_TRIES 4 /* views made when a sweep takes the new one before its lock */

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
    if (n > 9 && strncmp(name, "clog-", 5) == 0 && strcmp(name + n - 4, ".seg") == 0) {
        return 'C'; /* the commit log: LevelDB lacks what its redo rewrites, and the open may cut its torn tail */
    }
    if ((n > 5 && strncmp(name, "cq-", 3) == 0 && strcmp(name + n - 2, ".q") == 0) ||
        (n > 7 && strncmp(name, "slot-", 5) == 0 && strcmp(name + n - 2, ".w") == 0)) {
        return 'C'; /* consume queues and where-slots: the redo and the check's checkpoint write into them */
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

/* Remove the view and everything in it (names only: a link's table stays).
 * Again while a thread of a stopped check still makes files in it. */
static void view_remove(const char *view)
{
    for (int pass = 0; pass < 20; pass++) {
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
        if (rmdir(view) == 0 || errno != ENOTEMPTY) {
            return;
        }
    }
}

/* Remove the view of this check and forget it. */
static void view_discard(const char *view)
{
    pthread_mutex_lock(&view_mutex);
    view_remove(view);
    view_active[0] = '\0';
    pthread_mutex_unlock(&view_mutex);
}

void store_check_dir_interrupt(char *removed, size_t len)
{
    pthread_mutex_lock(&view_mutex); /* kept: the check never removes it too, nor makes another */
    if (len > 0) {
        snprintf(removed, len, "%s", view_active);
    }
    if (view_active[0] != '\0') {
        view_remove(view_active);
    }
}

/* Is name a file a view holds: what view_fill puts in, or what LevelDB
 * writes there (LOCK, LOG, LOG.old, n.dbtmp)? */
static int view_file(const char *name)
{
    size_t digits = strspn(name, "0123456789");
    return view_kind(name) != 0 || strcmp(name, "LOCK") == 0 || strcmp(name, "LOG") == 0 ||
           strcmp(name, "LOG.old") == 0 || (digits > 0 && strcmp(name + digits, ".dbtmp") == 0);
}

/* 1 when the directory open as fd holds only files a view holds. */
static int only_view_files(int fd)
{
    int dup_fd = dup(fd);
    DIR *d = dup_fd < 0 ? NULL : fdopendir(dup_fd);
    if (d == NULL) {
        if (dup_fd >= 0) {
            close(dup_fd);
        }
        return 0;
    }
    int ok = 1;
    struct dirent *e;
    while (ok && (e = readdir(d)) != NULL) {
        ok = strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0 || view_file(e->d_name);
    }
    closedir(d);
    return ok;
}

/* Remove the views in parent named prefix and six characters (mkdtemp's)
 * that a killed check left: this user's directories of mode 0700 whose
 * flock can be taken (no check holds it) holding only a view's files.
 * Counted in r. */
static void sweep_stale(const char *parent, const char *prefix, store_dir_check_t *r)
{
    DIR *d = opendir(parent);
    if (d == NULL) {
        return;
    }
    size_t plen = strlen(prefix);
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (strncmp(e->d_name, prefix, plen) != 0 || strlen(e->d_name) != plen + 6) {
            continue;
        }
        char path[4200];
        struct stat st;
        snprintf(path, sizeof path, "%s/%s", parent, e->d_name);
        int fd = open(path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (fd < 0) {
            continue;
        }
        /* Locked, still linked (not swept by another check meanwhile), and a
         * view: mkdtemp's mode, this user's, only a view's files (a copy of a
         * data directory has its BALLAST, and the mode it was given). */
        if (flock(fd, LOCK_EX | LOCK_NB) == 0 && fstat(fd, &st) == 0 && st.st_nlink > 0 &&
            (st.st_mode & 07777) == 0700 && st.st_uid == geteuid() && only_view_files(fd)) {
            view_remove(path);
            if (r->stale_removed++ == 0) {
                snprintf(r->stale_view, sizeof r->stale_view, "%s", path);
            }
        }
        close(fd);
    }
    closedir(d);
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

/* Make a new, empty view under the template tmpl (mkdtemp's, changed in
 * place) and take its lock, held in *lock_fd: 0, or -1. */
static int view_create(char *tmpl, int *lock_fd, char *err, size_t errlen)
{
    char pattern[4200];
    snprintf(pattern, sizeof pattern, "%s", tmpl);
    for (int attempt = 0; attempt < VIEW_MAKE_TRIES; attempt++) {
        snprintf(tmpl, strlen(pattern) + 1, "%s", pattern);
        pthread_mutex_lock(&view_mutex);
        if (mkdtemp(tmpl) == NULL) {
            pthread_mutex_unlock(&view_mutex);
            return err_set(err, errlen, "cannot create a scratch directory %s: %s", tmpl, strerror(errno));
        }
        snprintf(view_active, sizeof view_active, "%s", tmpl);
        pthread_mutex_unlock(&view_mutex);
        int fd = open(tmpl, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (fd < 0) {
            err_set(err, errlen, "cannot open the scratch directory %s: %s", tmpl, strerror(errno));
            view_discard(tmpl);
            return -1;
        }
        struct stat st;
        int locked = flock(fd, LOCK_EX | LOCK_NB) == 0;
        if (!locked && errno != EWOULDBLOCK) {
            err_set(err, errlen, "cannot lock the scratch directory %s: %s", tmpl, strerror(errno));
            close(fd);
            view_discard(tmpl);
            return -1;
        }
        if (locked && fstat(fd, &st) == 0 && st.st_nlink > 0) {
            *lock_fd = fd;
            return 0;
        }
        close(fd); /* another check's sweep took it before the lock: it is gone, or going */
        view_discard(tmpl);
    }
    return err_set(err, errlen, "cannot keep a scratch directory %s: other checks removed it %d times", pattern,
                   VIEW_MAKE_TRIES);
}

/* Make the view under the template tmpl (mkdtemp's, changed in place), its
 * lock held in *lock_fd: 0, -1, or VIEW_CANNOT_READ. */
static int view_make(const char *dir, char *tmpl, int *lock_fd, store_dir_check_t *r, char *err, size_t errlen)
{
    r->linked = r->copied = 0;
    r->copied_bytes = 0;
    if (view_create(tmpl, lock_fd, err, errlen) != 0) {
        return -1;
    }
    int rc = view_fill(dir, tmpl, r, err, errlen);
    if (rc != 0) {
        view_discard(tmpl);
        close(*lock_fd);
        *lock_fd = -1;
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

/* A torn log end in a whole copy BACKUP made: damage (store.h,
 * STORE_COPY_WHOLE), said in err about the view (name_dir names the dir). */
static int torn_copy(const store_dir_check_t *r, uint64_t damage, char *err, size_t errlen)
{
    err_set(err, errlen,
            "data directory %s is damaged: it is a whole copy made by BACKUP (its " STORE_COPY_WHOLE
            " file says so), and a whole copy made by BACKUP never has a torn end, but its write-ahead log %s ends in "
            "one: %llu bytes at offset %llu (damaged from %llu) are not whole records; the copy was truncated or "
            "overwritten after it was made, and the messages in those bytes may be acknowledged ones: do not "
            "restore it; take a new backup, or use an older one",
            r->view, r->torn_log, (unsigned long long)r->torn_bytes, (unsigned long long)r->torn_offset,
            (unsigned long long)damage);
    return STORE_OPEN_DAMAGED;
}

/* Open the view, note a torn log end it cut (damage in a whole copy), check it. */
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
    if (r->torn && r->whole_copy) {
        rc = torn_copy(r, s->log_cut.damage, err, errlen);
    } else {
        rc = store_check_counted(s, &r->counts, err, errlen) != 0 ? STORE_OPEN_DAMAGED : 0;
    }
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
    /* First: a copy's files must be its list's (every byte read; a lost
     * CURRENT too), and a start on dir removes the marker. */
    store_copy_mark_t m;
    int listed = store_copy_verify(dir, 1, &m, err, errlen);
    r->whole_copy = m.marked;
    r->whole_listed = m.listed;
    r->whole_files = m.files;
    r->whole_bytes = m.bytes;
    if (listed != 0) {
        return listed;
    }
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
    tmp = tmp != NULL && tmp[0] != '\0' ? tmp : "/tmp";
    char beside[PATH_MAX + 32], elsewhere[4200], why_beside[1024] = "", why_elsewhere[1024] = "";
    snprintf(beside, sizeof beside, "%s.check-XXXXXX", real);
    snprintf(elsewhere, sizeof elsewhere, "%s/hourglass-check-XXXXXX", tmp);
    if (strcmp(real, "/") != 0) { /* the views killed checks left: their links hold old tables' disk space */
        char parent[PATH_MAX], prefix[PATH_MAX + 8];
        const char *slash = strrchr(real, '/');
        snprintf(parent, sizeof parent, "%.*s", slash == real ? 1 : (int)(slash - real), real);
        snprintf(prefix, sizeof prefix, "%s.check-", slash + 1);
        sweep_stale(parent, prefix, r);
    }
    sweep_stale(tmp, "hourglass-check-", r);
    int lock_fd = -1;
    int made = strcmp(real, "/") == 0 ? err_set(why_beside, sizeof why_beside, "it is the root directory")
                                      : view_make(dir, beside, &lock_fd, r, why_beside, sizeof why_beside);
    if (made != 0 && made != VIEW_CANNOT_READ) {
        made = view_make(dir, elsewhere, &lock_fd, r, why_elsewhere, sizeof why_elsewhere);
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
    view_discard(r->view);
    close(lock_fd); /* after the removal: a sweep never takes a view still in use */
    return rc;
}
