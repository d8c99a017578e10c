/*
 * levels/store.c — opening and closing a data directory (see store.h): the
 * options, the directory and format checks, the meta records, loading the
 * in-memory state, and the wire form of ids.
 *
 * Opening refuses, with the path and the problem named, anything that is not
 * a Hourglass data directory of this format and level table (keys.h's 'M'
 * records), and never repairs or truncates, with one exception: a torn
 * write at the end of the newest write-ahead log (a power cut; logtail.h),
 * which LevelDB's paranoid checks refuse, is cut off (its bytes kept) and the
 * open tried again. A whole copy BACKUP made (STORE_COPY_WHOLE) is refused
 * as damaged instead when its log ends torn or its files are not the sizes
 * its list says. It needs no scan: the level,
 * topic and group records are read (a few small ranges), queue heads come
 * from the level records and are found later with one seek each. The package's
 * other files are listed in store_internal.h.
 *
 * The sequence counter read at open is raised to the wall clock's floor
 * (store.h, STORE_SEQ_CLOCK_BITS), so a directory put back from a copy, which
 * carries the counter as it was when the copy was made, never hands out again
 * an id that its broker gave after the copy.
 *
 * Threading: one thread at a time (the broker's storage thread).
 */
#include "levels/store_internal.h"
#include "base/alloc.h"
#include "base/err.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* ---- options ------------------------------------------------------------------------ */

void store_options_default(store_options_t *o)
{
    memset(o, 0, sizeof *o);
    lvl_table_default(&o->levels);
    o->create_if_missing = 1;
    o->sync = 1;
    o->retention_ms = STORE_DEFAULT_RETENTION_MS;
    o->max_delay_ms = STORE_DEFAULT_MAX_DELAY_MS;
    o->max_payload = MSG_DEFAULT_MAX_PAYLOAD;
    o->max_reconsume = STORE_DEFAULT_MAX_RECONSUME;
    o->max_lease_bytes = STORE_DEFAULT_MAX_LEASE_BYTES;
    o->cache_bytes = 8u << 20;
    o->write_buffer_bytes = 64u << 20; /* the broker's default (write-buffer-size); DESIGN.md §2 says why */
    o->max_open_files = 500;
}

static int validate_options(const store_options_t *o, char *err, size_t errlen)
{
    if (o->path == NULL || o->path[0] == '\0') {
        return err_set(err, errlen, "no data directory given");
    }
    if (o->levels.count < 1 || o->levels.count > LVL_MAX_LEVELS) {
        return err_set(err, errlen, "level table has %d levels (1..%d allowed)", o->levels.count, LVL_MAX_LEVELS);
    }
    if (o->max_payload > MSG_HARD_MAX_PAYLOAD) {
        return err_set(err, errlen, "max-payload %u exceeds the hard limit of %u bytes", o->max_payload,
                       MSG_HARD_MAX_PAYLOAD);
    }
    if (o->max_reconsume > STORE_MAX_MAX_RECONSUME) {
        return err_set(err, errlen, "max-reconsume %u exceeds the limit of %d", o->max_reconsume,
                       STORE_MAX_MAX_RECONSUME);
    }
    return 0;
}

const lvl_table_t *store_levels(const store_t *s)
{
    return &s->opt.levels;
}
const store_options_t *store_options(const store_t *s)
{
    return &s->opt;
}

/* ---- the directory ------------------------------------------------------------------ */

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

/* 1 when path holds nothing but creation leftovers (or nothing at all), 0
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
        if (!creation_leftover(e->d_name)) {
            empty = 0;
        }
        size_t n = strlen(e->d_name);
        if (n > 4 && (strcmp(e->d_name + n - 4, ".ldb") == 0 || strcmp(e->d_name + n - 4, ".log") == 0)) {
            *has_tables = 1;
        }
    }
    closedir(d);
    return empty;
}

static int prepare_dir(const store_options_t *o, int *is_new, char *err, size_t errlen)
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
                "data directory %s holds LevelDB files (tables, logs) but no CURRENT file: it is damaged; nothing was "
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
static int unmark_whole_copy(const char *path, char *err, size_t errlen)
{
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
    int fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    rc = fd < 0 ? -1 : fsync(fd);
    int e = errno;
    if (fd >= 0) {
        close(fd);
    }
    if (rc != 0) {
        return err_set(err, errlen, "cannot fsync data directory %s after removing its %s: %s", path, STORE_COPY_WHOLE,
                       strerror(e));
    }
    return 0;
}

/* 1 when a LevelDB or store error about the directory at path says the data
 * itself is damaged (a checksum, a missing or truncated file LevelDB lists,
 * an undecodable record), not that the directory cannot be used as it
 * stands. LevelDB reports a table shorter than its manifest says as EINVAL
 * on that file. The path is left out of the search: a directory named
 * "corrupt-test" says nothing about its data. */
static int error_is_damage(const char *e, const char *path)
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
static int map_open_error(const char *path, const char *dberr, int log_cut, char *err, size_t errlen)
{
    if (strstr(dberr, "error: lock ") != NULL) {
        err_set(err, errlen,
                "data directory %s is in use: another broker (or process) holds its LOCK file (one broker per "
                "data directory; LevelDB: %s)",
                path, dberr);
        return STORE_OPEN_IN_USE;
    }
    if (error_is_damage(dberr, path)) {
        err_set(err, errlen,
                "data directory %s is damaged (LevelDB: %s); %s: restore it from a backup (docs/operations.md, \"A "
                "damaged data directory\")",
                path, dberr,
                log_cut ? "its log's torn end was cut, which did not help (see below)" : "nothing was changed");
        return STORE_OPEN_DAMAGED;
    }
    return err_set(err, errlen, "cannot open data directory %s: %s%s", path, dberr, io_error_hint(dberr));
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

/* ---- the meta records ---------------------------------------------------------------- */

/* Add this build's format marker to the pending batch. */
static void put_format(store_t *s)
{
    key_buf_t k;
    char v[4];
    key_meta(&k, "format");
    be32_put(v, STORE_FORMAT_VERSION);
    store_put(s, &k, v, 4);
}

static int write_new_meta(store_t *s, char *err, size_t errlen)
{
    key_buf_t k;
    char spec[LVL_MAX_LEVELS * 16];
    put_format(s);
    lvl_table_format(&s->opt.levels, spec, sizeof spec);
    key_meta(&k, "levels");
    store_put(s, &k, spec, strlen(spec));
    key_meta(&k, STORE_META_TOPIC_DELAYED);
    store_put(s, &k, "1", 1);
    s->next_seq = 1;
    s->persisted_seq = 0;
    /* Always synced, even in a store that does not sync: the marker decides
     * whether the directory is ours. */
    char dberr[256];
    if (store_write_batch(s, 1, dberr, sizeof dberr) != 0) {
        return err_set(err, errlen, "cannot initialise data directory %s: %s", s->path, dberr);
    }
    return 0;
}

/* An older format this build reads: mark the directory as of this build's
 * format before anything of the new format is written (synced, like the
 * marker of a new directory), so that an older build refuses it rather than
 * misreading it. 1 → 2: a lease index value may carry the topic-log seq
 * (keys.h 'J'; the 8-byte values stay readable). 2 → 3: the lease index is
 * folded into the copy index once the groups are loaded (lease_index_fold,
 * which finishes an interrupted fold at the next open). 3 → 4: the marker
 * only (version 4 adds a meaning to 'X', not a record). */
static int upgrade_format(store_t *s, uint32_t from, char *err, size_t errlen)
{
    put_format(s);
    char dberr[256];
    if (store_write_batch(s, 1, dberr, sizeof dberr) != 0) {
        return err_set(err, errlen, "cannot upgrade data directory %s from format version %u to %d: %s", s->path, from,
                       STORE_FORMAT_VERSION, dberr);
    }
    return 0;
}

static int check_meta(store_t *s, char *err, size_t errlen)
{
    key_buf_t k;
    char *v;
    size_t vlen;
    key_meta(&k, "format");
    int found = store_get(s, &k, &v, &vlen, err, errlen);
    if (found < 0) {
        return -1;
    }
    if (!found) {
        /* A LevelDB that is not ours, unless it is completely empty. */
        leveldb_iterator_t *it = leveldb_create_iterator(s->db, s->ropt);
        leveldb_iter_seek_to_first(it);
        int empty = !leveldb_iter_valid(it);
        leveldb_iter_destroy(it);
        if (!empty) {
            return err_set(err, errlen,
                           "%s is a LevelDB database but not a Hourglass data directory "
                           "(no format marker); refusing to use it (no record of it was changed; LevelDB's "
                           "open kept its data and may have rewritten its log and manifest)",
                           s->path);
        }
        return write_new_meta(s, err, errlen);
    }
    uint32_t version = vlen == 4 ? be32_get(v) : 0;
    leveldb_free(v);
    if (version < STORE_FORMAT_OLDEST || version > STORE_FORMAT_VERSION) {
        return err_set(err, errlen, "data directory %s has format version %u; this build reads versions %d to %d",
                       s->path, version, STORE_FORMAT_OLDEST, STORE_FORMAT_VERSION);
    }
    key_meta(&k, STORE_META_COPY_UNFINISHED);
    found = store_get(s, &k, &v, &vlen, err, errlen);
    if (found != 0) {
        if (found > 0) {
            leveldb_free(v);
            err_set(err, errlen,
                    "data directory %s is a BACKUP copy that was cut before it was whole (a copy's \".partial\" or "
                    "a transfer cut short; corrupt: part of its queues is missing)",
                    s->path);
        }
        return -1;
    }
    if (version < STORE_FORMAT_SAME_RECORDS && s->opt.no_upgrade) {
        return err_set(err, errlen,
                       "data directory %s has format version %u: this build reads it, but only by upgrading it to "
                       "version %d, after which the build that wrote it refuses it; check it with that build, or "
                       "start this one on it to upgrade",
                       s->path, version, STORE_FORMAT_VERSION);
    }
    if (version < STORE_FORMAT_VERSION && !s->opt.no_upgrade && upgrade_format(s, version, err, errlen) != 0) {
        return -1;
    }
    key_meta(&k, "levels");
    found = store_get(s, &k, &v, &vlen, err, errlen);
    if (found <= 0) {
        if (found == 0) {
            err_set(err, errlen, "data directory %s has no level table record (corrupt)", s->path);
        }
        return -1;
    }
    char spec[LVL_MAX_LEVELS * 24];
    if (vlen >= sizeof spec) {
        vlen = sizeof spec - 1;
    }
    memcpy(spec, v, vlen);
    spec[vlen] = '\0';
    leveldb_free(v);
    lvl_table_t stored;
    char perr[160], diff[256];
    if (lvl_table_parse(spec, &stored, perr, sizeof perr) != 0) {
        return err_set(err, errlen, "data directory %s has an unreadable level table \"%s\": %s", s->path, spec, perr);
    }
    if (lvl_table_diff(&stored, "the data directory", &s->opt.levels, "the configuration", diff, sizeof diff)) {
        return err_set(err, errlen, "level table mismatch for %s: %s (data directory: \"%s\")", s->path, diff, spec);
    }
    key_meta(&k, "seq");
    found = store_get(s, &k, &v, &vlen, err, errlen);
    if (found < 0) {
        return -1;
    }
    s->next_seq = 1;
    if (found) {
        if (vlen != 8) {
            leveldb_free(v);
            return err_set(err, errlen, "data directory %s has a corrupt sequence record", s->path);
        }
        s->next_seq = be64_get(v);
        leveldb_free(v);
    }
    s->persisted_seq = s->next_seq;
    return 0;
}

/* ---- loading the in-memory state -------------------------------------------------- */

/* Level records carry the exact head key and the monotone enqueue clock, written
 * in every batch that changes them (a head changes only with the depth), so open
 * reads 18 small records and never seeks a level range: a seek from the range
 * start would walk every popped head not yet compacted. */
static int load_levels(store_t *s, char *err, size_t errlen)
{
    for (int l = 1; l <= s->opt.levels.count; l++) {
        level_state_t *ls = &s->levels[l];
        key_buf_t k;
        char *v;
        size_t vlen;
        key_level_record(&k, l);
        int found = store_get(s, &k, &v, &vlen, err, errlen);
        if (found < 0) {
            return -1;
        }
        if (!found) {
            continue;
        }
        record_level_t r;
        int bad = record_level_decode(v, vlen, &r);
        leveldb_free(v);
        if (bad) {
            return err_set(err, errlen, "corrupt record of level %d in %s (%zu bytes)", l, s->path, vlen);
        }
        ls->depth = r.depth;
        ls->has_head = r.depth > 0;
        ls->head_due = r.head_due;
        ls->head_seq = r.head_seq;
        ls->last_enqueue_ms = r.last_enqueue_ms;
        /* Pops since the last compaction are not persisted: assume one is owed,
         * so the first store_maintain after open compacts below the head. */
        ls->pops_since_compact = STORE_COMPACT_AFTER_POPS;
    }
    return 0;
}

static int load_topics(store_t *s, char *err, size_t errlen)
{
    leveldb_iterator_t *it = store_iter_range(s, KEY_TOPIC_RECORD);
    const char *key;
    size_t klen;
    for (; store_iter_in_range(it, KEY_TOPIC_RECORD, &key, &klen); leveldb_iter_next(it)) {
        size_t vlen;
        const char *v = leveldb_iter_value(it, &vlen);
        record_topic_t r;
        if (record_topic_decode(v, vlen, &r) != 0 || klen < 2 || klen - 1 > MSG_MAX_NAME) {
            leveldb_iter_destroy(it);
            return err_set(err, errlen, "corrupt topic record in %s", s->path);
        }
        topic_state_t *t = store_topic_get_or_create(s, key + 1, klen - 1);
        t->appended = r.appended;
        t->removed = r.removed;
        t->delayed = r.delayed;
        t->dirty = 0;
    }
    s->n_dirty_topics = 0;
    int rc = store_iter_error(it, "topic records", err, errlen);
    leveldb_iter_destroy(it);
    return rc;
}

static int load_groups(store_t *s, char *err, size_t errlen)
{
    leveldb_iterator_t *it = store_iter_range(s, KEY_GROUP_RECORD);
    const char *key;
    size_t klen;
    int rc = 0;
    for (; store_iter_in_range(it, KEY_GROUP_RECORD, &key, &klen); leveldb_iter_next(it)) {
        size_t vlen;
        const char *v = leveldb_iter_value(it, &vlen);
        record_group_t r;
        int bad = klen < 2 || klen - 1 > MSG_MAX_NAME ? -1 : record_group_decode(v, vlen, &r);
        if (bad) {
            rc = err_set(err, errlen,
                         bad == -2 ? "corrupt group record in %s (topic name)" : "corrupt group record in %s", s->path);
            break;
        }
        group_state_t *g = xcalloc(1, sizeof *g);
        g->max_reconsume = r.max_reconsume;
        g->gen = r.gen;
        g->cursor = r.cursor;
        g->position = r.position;
        g->retry_ready = r.retry_ready;
        g->retry_delayed = r.retry_delayed;
        g->inflight = r.inflight;
        g->leases_untracked = r.inflight; /* which ids they are is not read at open */
        g->dlq = r.dlq;
        g->created_ms = r.created_ms;
        g->topic = store_topic_get_or_create(s, r.topic, r.topic_len);
        g->name = xstrndup(key + 1, klen - 1);
        g->len = klen - 1;
        if (r.flags & RECORD_GROUP_DELETING) {
            group_delete_resume(s, g); /* out of sight, as before the restart */
        } else {
            store_topic_add_group(g);
            map_put(&s->groups, g->name, g->len, g);
        }
    }
    /* A topic created here only in memory (group with an empty topic log) is
     * written with the next commit; keep it dirty. */
    if (rc == 0) {
        rc = store_iter_error(it, "group records", err, errlen);
    }
    leveldb_iter_destroy(it);
    return rc;
}

/* ---- open and close ------------------------------------------------------------------ */

static void store_free(store_t *s)
{
    if (s == NULL) {
        return;
    }
    if (s->key_it) {
        leveldb_iter_destroy(s->key_it);
    }
    compactor_free(s->compactor); /* before the database it compacts */
    if (s->db) {
        leveldb_close(s->db);
    }
    if (s->dbopt) {
        leveldb_options_destroy(s->dbopt);
    }
    if (s->cache) {
        leveldb_cache_destroy(s->cache);
    }
    if (s->ropt) {
        leveldb_readoptions_destroy(s->ropt);
    }
    if (s->wopt_sync) {
        leveldb_writeoptions_destroy(s->wopt_sync);
    }
    if (s->wopt_nosync) {
        leveldb_writeoptions_destroy(s->wopt_nosync);
    }
    if (s->batch) {
        leveldb_writebatch_destroy(s->batch);
    }
    while (s->pend_first != NULL) { /* leases not written (a failed close): lost, as in a crash */
        lease_pend_t *next = s->pend_first->all_next;
        free(s->pend_first);
        s->pend_first = next;
    }
    map_free(&s->groups, store_group_free);
    map_free(&s->deleting, store_group_free);
    map_free(&s->topics, store_topic_free);
    map_free(&s->idx_dropped, NULL);
    map_free(&s->sent_keys, NULL);
    free(s->sent);
    free(s->dirty_topics);
    free(s->woken);
    free(s->taking);
    free(s->dirty_groups);
    free(s->path);
    free(s);
}

uint64_t store_seq_floor(uint64_t now_ms)
{
    return now_ms << STORE_SEQ_CLOCK_BITS;
}

/* Raise the counter to the clock's floor (store.h), once check_meta has read
 * it (or a new directory's first batch has written it). persisted_seq stays
 * what the directory holds, so the next commit writes the raised counter; an
 * open that commits nothing (--check-data of a copy) writes nothing. Never
 * lowers it: a clock set back leaves it where it was. */
static void raise_seq(store_t *s, uint64_t now_ms)
{
    uint64_t least = store_seq_floor(now_ms);
    if (least > s->next_seq) {
        s->next_seq = least;
    }
}

/* 1 when LevelDB's error is one its log reader reports (db/log_reader.cc),
 * about a write-ahead log or the MANIFEST: only then can a torn log end be
 * what refused the open ("1 missing files" or "no meta-nextfile entry" are
 * not, and the log is then left as it is). */
static int log_reader_error(const char *dberr)
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
static int cut_torn_log(store_t *s)
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

const char *store_open_note(const store_t *s)
{
    return s->open_note;
}

int store_created(const store_t *s)
{
    return s->created;
}

/* A refusal after LevelDB opened the directory: free s; -1, or
 * STORE_OPEN_DAMAGED (with what to do added) when a read found damage. */
static int open_failed(store_t *s, char *err, size_t errlen)
{
    int damaged = err != NULL && error_is_damage(err, s->path);
    if (damaged) {
        char why[768];
        snprintf(why, sizeof why, "%s", err);
        err_set(err, errlen,
                "data directory %s is damaged: %s; restore it from a backup (docs/operations.md, \"A damaged data "
                "directory\")",
                s->path, why);
    }
    store_free(s);
    return damaged ? STORE_OPEN_DAMAGED : -1;
}

int store_open(const store_options_t *o, uint64_t now_ms, store_t **out, char *err, size_t errlen)
{
    *out = NULL;
    if (validate_options(o, err, errlen) != 0) {
        return -1;
    }
    if (now_ms > STORE_SEQ_CLOCK_MAX_MS) {
        return err_set(err, errlen,
                       "the wall clock reads %llu ms since 1970, past the year 2527: no message id can be drawn "
                       "from it; set the clock before opening %s",
                       (unsigned long long)now_ms, o->path);
    }
    int is_new = 0;
    int rc = prepare_dir(o, &is_new, err, errlen);
    if (rc != 0) {
        return rc;
    }
    if (!is_new && (rc = unmark_whole_copy(o->path, err, errlen)) != 0) {
        return rc;
    }

    store_t *s = xcalloc(1, sizeof *s);
    s->opt = *o;
    s->path = xstrdup(o->path);
    s->opt.path = s->path;
    s->created = is_new;
    map_init(&s->topics);
    map_init(&s->groups);
    map_init(&s->deleting);
    s->dbopt = leveldb_options_create();
    s->cache = leveldb_cache_create_lru(o->cache_bytes);
    leveldb_options_set_cache(s->dbopt, s->cache);
    leveldb_options_set_create_if_missing(s->dbopt, (unsigned char)is_new);
    leveldb_options_set_paranoid_checks(s->dbopt, 1);
    leveldb_options_set_write_buffer_size(s->dbopt, o->write_buffer_bytes);
    leveldb_options_set_max_open_files(s->dbopt, o->max_open_files);
    leveldb_options_set_compression(s->dbopt, leveldb_snappy_compression);
    s->ropt = leveldb_readoptions_create();
    leveldb_readoptions_set_verify_checksums(s->ropt, 1);
    s->wopt_sync = leveldb_writeoptions_create();
    leveldb_writeoptions_set_sync(s->wopt_sync, 1);
    s->wopt_nosync = leveldb_writeoptions_create();
    leveldb_writeoptions_set_sync(s->wopt_nosync, 0);
    s->batch = leveldb_writebatch_create();

    char *dberr = NULL;
    s->db = leveldb_open(s->dbopt, s->path, &dberr);
    int log_cut = 0;
    if (dberr != NULL && log_reader_error(dberr) && cut_torn_log(s) == 1) {
        log_cut = 1;
        leveldb_free(dberr);
        dberr = NULL;
        s->db = leveldb_open(s->dbopt, s->path, &dberr);
    }
    if (dberr != NULL) {
        rc = map_open_error(s->path, dberr, log_cut, err, errlen);
        if (s->open_note[0] != '\0' && err != NULL) { /* a cut, or why there was none */
            size_t n = strlen(err);
            snprintf(err + n, errlen - n, "; %s", s->open_note);
        }
        leveldb_free(dberr);
        s->db = NULL;
        store_free(s);
        return rc;
    }
    s->compactor = compactor_new(s->db, err, errlen);
    if (s->compactor == NULL || check_meta(s, err, errlen) != 0) {
        return open_failed(s, err, errlen);
    }
    raise_seq(s, now_ms); /* before anything at open could take a number */
    if (load_levels(s, err, errlen) != 0 || load_topics(s, err, errlen) != 0 || load_groups(s, err, errlen) != 0 ||
        idx_open(s, err, errlen) != 0 || lease_index_fold(s, err, errlen) != 0 ||
        store_topic_delayed_open(s, err, errlen) != 0) {
        return open_failed(s, err, errlen);
    }
    /* Topic heads stay at 0 (one walk to the first retained entry on the
     * first read): below a group's cursor an entry may still be retained (the
     * GC's grace), and store_topic_log_holds needs a head the GC has reached. */
    s->lease_floor = 0;
    s->lease_next_valid = 0;
    *out = s;
    return 0;
}

/* store_close and store_close_unsynced: the last commit synced or not. */
static int close_store(store_t *s, int durable, char *err, size_t errlen)
{
    if (s == NULL) {
        return 0;
    }
    /* A broken store cannot commit: report that (its pending batch is lost)
     * rather than a clean close. The leases not written yet are written, so
     * that a clean restart keeps them. */
    int rc = store_leases_write(s, NULL, UINT64_MAX, err, errlen);
    if (rc == 0) {
        rc = store_commit_durable(s, durable, err, errlen);
    }
    if (rc == 0) {
        /* Write the memtable out (up to write-buffer-size), so the next open
         * has no log to replay: a compaction of a range that holds no key
         * (every key starts with an ASCII tag, keys.h) only does that. A
         * clean restart then opens in milliseconds and without the memtable's
         * RAM; after a crash the log is replayed as usual. */
        compactor_free(s->compactor);
        s->compactor = NULL;
        leveldb_compact_range(s->db, "\xff", 1, "\xff", 1);
    }
    store_free(s);
    return rc;
}

int store_close(store_t *s, char *err, size_t errlen)
{
    return close_store(s, 1, err, errlen);
}

int store_close_unsynced(store_t *s, char *err, size_t errlen)
{
    return close_store(s, 0, err, errlen);
}

/* ---- ids ------------------------------------------------------------------------------ */

void store_id_format(uint64_t id, char out[17])
{
    static const char hex[] = "0123456789abcdef";
    for (int i = 15; i >= 0; i--) {
        out[i] = hex[id & 15];
        id >>= 4;
    }
    out[16] = '\0';
}

int store_id_parse(const char *text, size_t len, uint64_t *id)
{
    if (len != 16) {
        return -1;
    }
    uint64_t v = 0;
    for (size_t i = 0; i < len; i++) {
        char c = text[i];
        int d = c >= '0' && c <= '9'   ? c - '0'
                : c >= 'a' && c <= 'f' ? c - 'a' + 10
                : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                       : -1;
        if (d < 0) {
            return -1;
        }
        v = (v << 4) | (uint64_t)d;
    }
    *id = v;
    return 0;
}
