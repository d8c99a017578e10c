/*
 * levels/store_dir.c — the data directory around LevelDB's open, for
 * store_open (store.c): what is in the directory before it is opened
 * (created, empty, a crash's creation leftovers, ours or not), a whole
 * BACKUP copy's marker checked and removed, LevelDB's open error mapped to
 * store_open's (-1, STORE_OPEN_DAMAGED, STORE_OPEN_IN_USE) with what the
 * operator can do, the torn end of the newest write-ahead log cut, and a
 * hole in the logs past the commit log's checkpoint replayed past.
 *
 * Invariants: nothing here repairs or deletes data, with two exceptions,
 * both a power cut's loss of unsynced writes (logtail.h) whose bytes are kept
 * beside the log: a torn write at the end of the newest write-ahead log, cut;
 * a hole past the commit log's checkpoint mark, replayed past (the redo from
 * the checkpoint rewrites what it held). A directory that holds
 * anything but creation leftovers and no CURRENT file is refused, never
 * created over. The STORE_COPY_WHOLE marker goes (fsynced) before LevelDB
 * writes anything, and only once the copy was found whole.
 *
 * Threading: one thread at a time (the broker's storage thread);
 * store_dir_in_use from any thread (it changes nothing).
 */
#include "levels/store_internal.h"
#include "levels/logsync.h"
#include "base/err.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* ---- the directory ------------------------------------------------------------------ */

/* fsync the directory path: 0, or -1 with errno. */
static int sync_dir(const char *path)
{
    int fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    int rc = fd < 0 ? -1 : fsync(fd);
    int e = errno;
    if (fd >= 0) {
        close(fd);
    }
    errno = e;
    return rc;
}

int store_sync_new_dir(const char *path, char *err, size_t errlen)
{
    if (sync_dir(path) != 0) {
        return err_set(err, errlen, "cannot fsync data directory %s after creating its database: %s", path,
                       strerror(errno));
    }
    return 0;
}

/* 1 when name is a file LevelDB writes while it creates a database, before
 * its CURRENT file exists (LOCK, LOG, LOG.old, MANIFEST-*, *.dbtmp), or the
 * broker's disk reserve: a directory holding only these is a creation that a
 * crash interrupted, and is created again rather than refused. */
static int creation_leftover(const char *name)
{
    static const char *const exact[] = { "LOCK", "LOG", "LOG.old", "BALLAST" };
    for (size_t i = 0; i < sizeof exact / sizeof exact[0]; i++) {
        if (strcmp(name, exact[i]) == 0) {
            return 1;
        }
    }
    size_t n = strlen(name);
    return strncmp(name, "MANIFEST-", 9) == 0 || (n > 6 && strcmp(name + n - 6, ".dbtmp") == 0);
}

/* 1 when name in path is a write-ahead log of 0 bytes: LevelDB makes its
 * first one before it renames CURRENT into place, and store_open syncs the
 * directory (store_sync_new_dir) before anything is written to it, so
 * without CURRENT it is empty, a creation leftover too. */
static int empty_log(const char *path, const char *name)
{
    unsigned long long number;
    char full[4200];
    struct stat st;
    return logsync_log_number(name, &number) && snprintf(full, sizeof full, "%s/%s", path, name) < (int)sizeof full &&
           stat(full, &st) == 0 && S_ISREG(st.st_mode) && st.st_size == 0;
}

/* 1 when path holds nothing but creation leftovers (or nothing at all; an
 * empty write-ahead log is one), 0
 * when it holds anything else; *has_current says whether CURRENT is there,
 * *has_tables whether a table or log file is (NNNNNN.ldb, NNNNNN.log). */
static int dir_state(const char *path, int *has_current, int *has_tables, char *err, size_t errlen)
{
    DIR *d = opendir(path);
    if (d == NULL) {
        return err_set(err, errlen, "cannot open data directory %s: %s", path, strerror(errno));
    }
    int empty = 1;
    *has_current = 0;
    *has_tables = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) {
            continue;
        }
        if (strcmp(e->d_name, "CURRENT") == 0) {
            *has_current = 1;
        }
        int leftover = creation_leftover(e->d_name) || empty_log(path, e->d_name);
        if (!leftover) {
            empty = 0;
        }
        size_t n = strlen(e->d_name);
        if (!leftover && n > 4 &&
            (strcmp(e->d_name + n - 4, ".ldb") == 0 || strcmp(e->d_name + n - 4, ".log") == 0 ||
             (strncmp(e->d_name, "clog-", 5) == 0 && strcmp(e->d_name + n - 4, ".seg") == 0))) {
            *has_tables = 1;
        }
    }
    closedir(d);
    return empty;
}

int store_prepare_dir(const store_options_t *o, int *is_new, char *err, size_t errlen)
{
    struct stat st;
    if (stat(o->path, &st) != 0) {
        if (errno != ENOENT) {
            return err_set(err, errlen, "cannot use data directory %s: %s", o->path, strerror(errno));
        }
        if (!o->create_if_missing) {
            return err_set(err, errlen, "data directory %s does not exist", o->path);
        }
        if (mkdir(o->path, 0750) != 0) {
            return err_set(err, errlen, "cannot create data directory %s: %s%s", o->path, strerror(errno),
                           errno == ENOENT ? " (its parent directory does not exist: only the last part of the path "
                                             "is created)"
                                           : "");
        }
        *is_new = 1;
        return 0;
    }
    if (!S_ISDIR(st.st_mode)) {
        return err_set(err, errlen, "data directory %s is not a directory", o->path);
    }
    int has_current = 0, has_tables = 0;
    int empty = dir_state(o->path, &has_current, &has_tables, err, errlen);
    if (empty < 0) {
        return -1;
    }
    if (empty) {
        if (!o->create_if_missing) {
            return err_set(err, errlen, "data directory %s is empty (not created yet)", o->path);
        }
        *is_new = 1;
        return 0;
    }
    if (!has_current && has_tables) {
        /* A whole BACKUP copy's list names CURRENT: say so, as --check-data
         * does. Its usual remedy (delete the marker, accept the loss) does
         * not apply: without CURRENT LevelDB opens nothing. */
        store_copy_mark_t m;
        int rc = store_copy_verify(o->path, 0, &m, err, errlen);
        if (rc == STORE_OPEN_DAMAGED && err != NULL) {
            size_t n = strlen(err);
            snprintf(err + n, errlen - n,
                     "; it is not opened: restore another copy (without its CURRENT file no part of it can be read, "
                     "with or without %s/" STORE_COPY_WHOLE ")",
                     o->path);
        }
        if (rc != 0) {
            return rc;
        }
        err_set(err, errlen,
                "data directory %s holds LevelDB files (tables, logs) or commit-log segments but no CURRENT file: it "
                "is damaged; nothing was "
                "changed: restore it from a backup (docs/operations.md, \"A damaged data directory\")",
                o->path);
        return STORE_OPEN_DAMAGED;
    }
    if (!has_current) {
        return err_set(err, errlen,
                       "%s is not a Hourglass data directory: it holds other files and no "
                       "LevelDB CURRENT file; refusing to touch it",
                       o->path);
    }
    *is_new = 0;
    return 0;
}

/* What store_open adds to the damage of a whole copy: how to go on. */
#define COPY_REFUSED_ADVICE                                                                                     \
    "; it is not opened (a broker started on it would serve what is left as if it were all): restore another "  \
    "copy, or, if you accept losing what the damage took, delete %s/" STORE_COPY_WHOLE " and start again (the " \
    "directory then opens as a live one, a torn log end cut as after a power cut)"

/* A whole BACKUP copy (STORE_COPY_WHOLE in path) is about to be opened:
 * refused as damaged when it no longer is what its list says (sizes only:
 * reading every byte is --check-data's) or its log ends torn, which a whole
 * copy never does. Otherwise it becomes a live data directory, whose log a
 * power cut may leave torn, so the file that says "no torn end is
 * legitimate here" goes first, and the removal is fsynced before LevelDB
 * writes anything. 0 (also when there is none, or another process holds the
 * directory: its open is refused next), STORE_OPEN_DAMAGED, or -1 with err. */
static const char *io_error_hint(const char *dberr);

/* store_unmark_whole_copy without the hint on an I/O error. */
static int unmark_whole_copy(const char *path, int *unmarked, char *err, size_t errlen)
{
    *unmarked = 0;
    char mark[4200];
    struct stat st;
    snprintf(mark, sizeof mark, "%s/" STORE_COPY_WHOLE, path);
    if (lstat(mark, &st) != 0 || store_dir_in_use(path)) {
        return 0;
    }
    store_copy_mark_t m;
    int rc = store_copy_verify(path, 0, &m, err, errlen);
    if (rc == 0) {
        logtail_t t;
        if (logtail_inspect(path, &t, err, errlen) != 0) {
            return -1;
        }
        if (t.damage < t.size) {
            err_set(err, errlen,
                    "data directory %s is damaged: it is a whole copy made by BACKUP (its " STORE_COPY_WHOLE
                    " file says so), and a whole copy made by BACKUP never has a torn end, but its write-ahead "
                    "log %s %s: %llu bytes at offset %llu (damaged from %llu) are not whole records, and the "
                    "messages in them may be acknowledged ones",
                    path, t.file, t.torn ? "ends in one" : "is damaged with whole records after it",
                    (unsigned long long)(t.size - t.good_end), (unsigned long long)t.good_end,
                    (unsigned long long)t.damage);
            rc = STORE_OPEN_DAMAGED;
        }
    }
    if (rc == STORE_OPEN_DAMAGED && err != NULL) {
        size_t n = strlen(err);
        snprintf(err + n, errlen - n, COPY_REFUSED_ADVICE, path);
    }
    if (rc != 0) {
        return rc;
    }
    if (unlink(mark) != 0) {
        return err_set(err, errlen,
                       "cannot remove %s (a whole BACKUP copy is opened, and so becomes a live data directory): %s",
                       mark, strerror(errno));
    }
    if (sync_dir(path) != 0) {
        return err_set(err, errlen, "cannot fsync data directory %s after removing its %s: %s", path, STORE_COPY_WHOLE,
                       strerror(errno));
    }
    *unmarked = 1;
    return 0;
}

int store_unmark_whole_copy(const char *path, int *unmarked, char *err, size_t errlen)
{
    int rc = unmark_whole_copy(path, unmarked, err, errlen);
    if (rc == -1 && err != NULL) { /* a copy restored by root for a broker that runs as another user */
        size_t n = strlen(err);
        snprintf(err + n, errlen - n, "%s", io_error_hint(err));
    }
    return rc;
}

/* 1 when a LevelDB or store error about the directory at path says the data
 * itself is damaged (a checksum, a missing or truncated file LevelDB lists,
 * an undecodable record), not that the directory cannot be used as it
 * stands. LevelDB reports a table shorter than its manifest says as EINVAL
 * on that file. The path is left out of the search: a directory named
 * "corrupt-test" says nothing about its data. */
int store_error_is_damage(const char *e, const char *path)
{
    char text[1024];
    size_t n = 0, plen = strlen(path);
    while (*e != '\0' && n + 1 < sizeof text) {
        if (plen > 0 && strncmp(e, path, plen) == 0) {
            e += plen;
            continue;
        }
        text[n++] = *e++;
    }
    text[n] = '\0';
    return strstr(text, "Corruption") != NULL || strstr(text, "corrupt") != NULL ||
           strstr(text, ".ldb: Invalid argument") != NULL || strstr(text, ".sst: Invalid argument") != NULL;
}

/* What the operator can do about an I/O error on the directory, or "". */
static const char *io_error_hint(const char *dberr)
{
    if (strstr(dberr, "Read-only file system") != NULL) {
        return " (the broker writes in its data directory at every open: remount it read-write; --check-data only "
               "reads it)";
    }
    if (strstr(dberr, "Permission denied") != NULL) {
        return " (the broker must read and write every file in its data directory: give it to the user the broker "
               "runs as)";
    }
    return "";
}

/* leveldb_open's error as store_open's: -1, STORE_OPEN_DAMAGED or
 * STORE_OPEN_IN_USE; log_cut: a torn log end was cut before this open. Only
 * LevelDB's "lock <path>" error means another process holds the LOCK (its
 * fcntl lock failed); an error opening the LOCK file itself (permissions, a
 * read-only file system) is about the directory, not another broker. */
int store_map_open_error(const char *path, const char *dberr, int log_cut, char *err, size_t errlen)
{
    char path_shown[STORE_PATH_SHOWN_MAX + 1], dberr_shown[384]; /* a long path shortened: the cause stays */
    store_path_shown(path, path_shown, sizeof path_shown);
    store_failure_text(dberr, path, dberr_shown, sizeof dberr_shown);
    if (strstr(dberr, "error: lock ") != NULL) {
        err_set(err, errlen,
                "data directory %s is in use: another broker (or process) holds its LOCK file (one broker per "
                "data directory; LevelDB: %s)",
                path_shown, dberr_shown);
        return STORE_OPEN_IN_USE;
    }
    if (store_error_is_damage(dberr, path)) {
        err_set(err, errlen,
                "data directory %s is damaged (LevelDB: %s); %s: restore it from a backup (docs/operations.md, \"A "
                "damaged data directory\")",
                path_shown, dberr_shown,
                log_cut ? "its log's torn end was cut, which did not help (see below)" : "nothing was changed");
        return STORE_OPEN_DAMAGED;
    }
    return err_set(err, errlen, "cannot open data directory %s: %s%s", path_shown, dberr_shown, io_error_hint(dberr));
}

int store_dir_in_use(const char *path)
{
    char lock[4096];
    if ((size_t)snprintf(lock, sizeof lock, "%s/LOCK", path) >= sizeof lock) {
        return 0;
    }
    int fd = open(lock, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        return 0;
    }
    /* F_GETLK takes nothing, so closing fd releases nothing of this
     * process's (a store it has open holds LevelDB's lock, not one here). */
    struct flock fl = { .l_type = F_WRLCK, .l_whence = SEEK_SET, .l_start = 0, .l_len = 0 };
    int held = fcntl(fd, F_GETLK, &fl) == 0 && fl.l_type != F_UNLCK;
    close(fd);
    return held;
}

/* ---- a torn log end ----------------------------------------------------------------- */

/* 1 when LevelDB's error is one its log reader reports (db/log_reader.cc),
 * about a write-ahead log or the MANIFEST: only then can a torn log end be
 * what refused the open ("1 missing files" or "no meta-nextfile entry" are
 * not, and the log is then left as it is). */
int store_log_reader_error(const char *dberr)
{
    static const char *const reports[] = { "checksum mismatch",          "bad record length",
                                           "partial record without end", "missing start of fragmented record",
                                           "unknown record type",        "error in middle of record" };
    if (strstr(dberr, "Corruption") == NULL) {
        return 0;
    }
    for (size_t i = 0; i < sizeof reports / sizeof reports[0]; i++) {
        if (strstr(dberr, reports[i]) != NULL) {
            return 1;
        }
    }
    return 0;
}

/* LevelDB refused the directory as corrupt: when the newest write-ahead log
 * ends in a torn write (levels/logtail.h: a power cut in the middle of the
 * last write, whose batch was never fsynced, hence never acknowledged under
 * fsync always), cut it there, keeping its bytes beside the log, and say so
 * in s->open_note. 1 when it was cut (open again), 0 when there was nothing
 * to cut or the cut failed (the open's refusal stands; a failed cut, or log
 * damage that is not a torn end, is in the note, which the refusal adds). */
int store_cut_torn_log(store_t *s)
{
    logtail_t t;
    char e[512];
    if (logtail_inspect(s->path, &t, e, sizeof e) != 0) {
        return 0;
    }
    if (!t.torn) {
        if (t.damage < t.size) {
            snprintf(s->open_note, sizeof s->open_note,
                     "the write-ahead log %s/%s is damaged at offset %llu of %llu with whole records after it: not "
                     "a torn write at its end, so not cut",
                     s->path, t.file, (unsigned long long)t.damage, (unsigned long long)t.size);
        }
        return 0;
    }
    if (logtail_cut(s->path, &t, e, sizeof e) != 0) {
        snprintf(s->open_note, sizeof s->open_note, "a torn write at the end of %s/%s could not be cut: %s", s->path,
                 t.file, e);
        return 0;
    }
    s->log_was_cut = 1;
    s->log_cut = t;
    snprintf(s->open_note, sizeof s->open_note,
             "the write-ahead log %s/%s ended in a torn write (%llu bytes from offset %llu, damaged from %llu; what a "
             "power cut leaves of a write that was never fsynced): cut at the last whole record, its bytes kept in "
             "%s.torn-%llu",
             s->path, t.file, (unsigned long long)(t.size - t.good_end), (unsigned long long)t.good_end,
             (unsigned long long)t.damage, t.file, (unsigned long long)t.good_end);
    return 1;
}

/* ---- a hole past the checkpoint ----------------------------------------------------- */

/* Open LevelDB once without paranoid checks (it replays the logs, skipping
 * the damaged records, writes the memtable out and deletes the logs), read
 * the checkpoint mark k, close. 1 when the mark was read whole, 0 with why. */
static int replay_without_paranoid_checks(store_t *s, const key_buf_t *k, char *why, size_t whylen)
{
    char *dberr = NULL;
    leveldb_options_set_paranoid_checks(s->dbopt, 0);
    leveldb_t *db = leveldb_open(s->dbopt, s->path, &dberr);
    leveldb_options_set_paranoid_checks(s->dbopt, 1);
    if (dberr != NULL) {
        snprintf(why, whylen, "LevelDB refused it without paranoid checks too: %s", dberr);
        leveldb_free(dberr);
        return 0;
    }
    size_t vlen = 0;
    char *v = leveldb_get(db, s->ropt, k->b, k->n, &vlen, &dberr);
    int ok = dberr == NULL && v != NULL && vlen == 8;
    snprintf(why, whylen, "%s", dberr != NULL ? dberr : "the commit log's checkpoint mark is missing or not 8 bytes");
    leveldb_free(dberr);
    leveldb_free(v);
    leveldb_close(db);
    return ok;
}

int store_open_past_hole(store_t *s)
{
    key_buf_t k;
    key_meta(&k, "checkpoint");
    loghole_t h;
    char e[512];
    if (!store_log_present(s->path) || logtail_find_hole(s->path, k.b, k.n, &h, e, sizeof e) != 0 ||
        h.file[0] == '\0') {
        return 0;
    }
    size_t n = strlen(s->open_note);
    char *note = s->open_note + n;
    size_t room = sizeof s->open_note - n;
    const char *sep = n > 0 ? "; " : "";
    if (h.needle_after) {
        snprintf(note, room,
                 "%sthe write-ahead log %s/%s is damaged at offset %llu of %llu, below the commit log's checkpoint "
                 "mark written after it: writes made durable were lost, not replayed past",
                 sep, s->path, h.file, (unsigned long long)h.at, (unsigned long long)h.size);
        return 0;
    }
    char kept[4400];
    if (logtail_keep_from(s->path, h.file, h.at, kept, sizeof kept, e, sizeof e) != 0) {
        snprintf(note, room, "%sa hole in the write-ahead log %s/%s at offset %llu could not be kept: %s", sep, s->path,
                 h.file, (unsigned long long)h.at, e);
        return 0;
    }
    if (!replay_without_paranoid_checks(s, &k, e, sizeof e)) {
        snprintf(note, room,
                 "%sthe write-ahead log %s/%s has a hole at offset %llu (its bytes kept in %s); replayed past it, "
                 "the directory is not one the commit log's redo can complete: %s",
                 sep, s->path, h.file, (unsigned long long)h.at, kept, e);
        return 0;
    }
    snprintf(note, room,
             "%sthe write-ahead log %s/%s had a hole at offset %llu of %llu, past the commit log's checkpoint mark (a "
             "power cut's loss of unsynced writes): replayed past it, its bytes kept in %s; the commit log's redo "
             "from its checkpoint rewrites what it held",
             sep, s->path, h.file, (unsigned long long)h.at, (unsigned long long)h.size, kept);
    return 1;
}
