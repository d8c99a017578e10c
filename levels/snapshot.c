/*
 * levels/snapshot.c — an online copy of the store: a LevelDB snapshot taken
 * on the owner's thread, copied into a new database on any other thread
 * (store.h, "Online copies").
 *
 * Every commit is one WriteBatch, so the committed state between two
 * commits is what a crash at that moment would leave: counters, indexes and
 * moves agree, and the group records' persisted cursors already stand where a
 * restart wants them (a lease held only in memory is not in it, and its
 * message is delivered again at once after a restore, as after a crash). A
 * LevelDB snapshot fixes that state: later commits do not show through it,
 * and reads of it are safe on another thread while the owner writes.
 *
 * The copy walks the snapshot in key order and writes it into a new
 * database in "<dir>.partial", in batches of SNAP_BATCH_BYTES, unsynced but
 * the last; its reads skip the block cache, so a copy does not push the
 * owner's working set out of it. Between batches it asks the caller whether
 * to go on (to stop, or to fail when the copy's disk runs low). A whole copy
 * is renamed to dir without replacing anything, and the parent directory
 * fsynced, so dir exists only as a whole copy. Just before the rename the
 * copy gets its STORE_COPY_WHOLE file, listing every file with its size and
 * CRC-32C, written and fsynced (copymark.c): a check of a directory holding
 * it knows what every file was when the copy was named, so a file changed,
 * cut or gone, or a torn log end, is damage done after (store.h). A copy that fails or is
 * stopped destroys what it wrote. A copy is a data directory like any other
 * (store_open, --check-data). Its first batch carries the 'M' record
 * STORE_META_COPY_UNFINISHED and its last deletes it, so a copy cut short
 * and put in place anyway (its ".partial" renamed by hand, a transfer cut
 * mid-way) is refused by store_open rather than served with part of its
 * queues missing under counters that count them.
 *
 * A copy cut short by a crash (kill -9, a power cut) leaves its "<dir>.partial"
 * behind, with the disk space it took. store_copy_discard_partial removes
 * it, but only when nothing else could be in it: every file is one of
 * LevelDB's own names, and no process holds the database's lock (LevelDB's
 * LOCK, an fcntl lock the kernel drops with its process), so a copy that
 * another broker is making right now stays.
 *
 * Threading: take and (after the copy) release on any thread while the store
 * is open — the owner must not close the store before the snapshot is
 * released; the copy itself runs on one thread of the caller's.
 */
#ifdef HAVE_CONFIG_H
#include "config.h" /* _GNU_SOURCE: renameat2 */
#endif

#include "levels/store_internal.h"
#include "base/alloc.h"
#include "base/err.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <limits.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define SNAP_BATCH_BYTES  (UINT64_C(4) << 20) /* written per batch into the copy */
#define SNAP_WRITE_BUFFER ((size_t)32 << 20)  /* the copy's memtable: fewer, larger tables */

struct journey_batch {
    leveldb_writebatch_t *b;
    uint64_t bytes, keys;
};

struct store_snapshot {
    leveldb_t *db; /* the store's database, open for the snapshot's whole life */
    const leveldb_snapshot_t *snap;
    struct journey_batch *journeys; /* the `L` entries and 'X' records of the journeys only CQs hold, */
    size_t n_journeys;              /* in batches of about SNAP_BATCH_BYTES */
};

/* m as the copy keeps it: under key k, with an 'X' record naming place p,
 * into the current batch of sn's journeys (a new one past SNAP_BATCH_BYTES). */
static void snap_put(store_snapshot_t *sn, const key_buf_t *k, const msg_t *m, const idx_place_t *p)
{
    if (sn->n_journeys == 0 || sn->journeys[sn->n_journeys - 1].bytes >= SNAP_BATCH_BYTES) {
        sn->journeys = xrealloc(sn->journeys, (sn->n_journeys + 1) * sizeof *sn->journeys);
        sn->journeys[sn->n_journeys++] = (struct journey_batch){ leveldb_writebatch_create(), 0, 0 };
    }
    struct journey_batch *jb = &sn->journeys[sn->n_journeys - 1];
    size_t n = msg_encoded_size(m);
    char *v = xmalloc(n);
    msg_encode(m, v, n);
    leveldb_writebatch_put(jb->b, k->b, k->n, v, n);
    free(v);
    idx_home_batch_put(jb->b, m, p);
    jb->bytes += k->n + n + 64;
    jb->keys += 2;
}

/* A journey only its CQ holds (journey.c), as the copy keeps it: an `L`
 * entry under the key a journey has (STORE_JOURNEY_SEQ | id) and an 'X'
 * record naming it, so that the copy, whose levels are walked by `L`
 * (copied_value), moves it on as 4a.4 did. */
static int snap_journey(void *ctx, const msg_t *m, const store_journey_t *at, char *err, size_t errlen)
{
    (void)err;
    (void)errlen;
    key_buf_t k;
    uint64_t seq = STORE_JOURNEY_SEQ | m->id;
    key_level(&k, at->level, at->hop_due, seq);
    idx_place_t p = { 'L', at->level, at->hop_due, seq };
    snap_put(ctx, &k, m, &p);
    return 0;
}

/* A message of a topic CQ (topic_cq.c; design-commitlog.md 4b), as the copy
 * keeps it: a 'T' entry at its CQ seq and an 'X' record naming it, so that
 * the copy, whose topics have no CQ (copied_value), walks them as 'T'. */
static int snap_topic_cq(void *ctx, topic_state_t *t, uint64_t index, const msg_t *m, char *err, size_t errlen)
{
    (void)err;
    (void)errlen;
    key_buf_t k;
    uint64_t seq = store_topic_cq_seq(t, index);
    key_queue(&k, KEY_TOPIC_LOG, t->name, t->len, seq);
    idx_place_t p = { 'T', 0, 0, seq };
    snap_put(ctx, &k, m, &p);
    return 0;
}

static void journeys_free(store_snapshot_t *sn)
{
    for (size_t i = 0; i < sn->n_journeys; i++) {
        leveldb_writebatch_destroy(sn->journeys[i].b);
    }
    free(sn->journeys);
}

store_snapshot_t *store_snapshot_take(store_t *s, char *err, size_t errlen)
{
    if (store_read_barrier(s, err, errlen) != 0) { /* what is pending and what the log holds join the snapshot */
        return NULL;
    }
    store_snapshot_t *sn = xcalloc(1, sizeof *sn);
    sn->db = s->db;
    /* The copy holds no log (design-commitlog.md 4a.5): the journeys that only the CQs hold are read now, on
       the owner's thread, at the snapshot's moment, and held until the copy is written. */
    if (store_journeys_each(s, snap_journey, sn, err, errlen) != 0 ||
        topic_cqs_each(s, snap_topic_cq, sn, err, errlen) != 0) {
        journeys_free(sn);
        free(sn);
        return NULL;
    }
    sn->snap = leveldb_create_snapshot(s->db);
    return sn;
}

void store_snapshot_release(store_snapshot_t *sn)
{
    if (sn == NULL) {
        return;
    }
    leveldb_release_snapshot(sn->db, sn->snap);
    journeys_free(sn);
    free(sn);
}

/* fsync a directory, so that a file created or renamed in it stays. */
static int sync_dir(const char *dir, char *err, size_t errlen)
{
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) {
        err_set(err, errlen, "cannot open %s: %s", dir, strerror(errno));
        return -1;
    }
    int rc = fsync(fd);
    int e = errno;
    close(fd);
    if (rc != 0) {
        err_set(err, errlen, "cannot fsync %s: %s", dir, strerror(e));
        return -1;
    }
    return 0;
}

/* Write b into db (synced when sync); 0, or -1 with err naming dir. */
static int copy_write(leveldb_t *db, leveldb_writeoptions_t *wo, leveldb_writebatch_t *b, const char *dir, char *err,
                      size_t errlen)
{
    char *e = NULL;
    leveldb_write(db, wo, b, &e);
    if (e != NULL) {
        err_set(err, errlen, "writing the copy %s: %s", dir, e);
        leveldb_free(e);
        return -1;
    }
    leveldb_writebatch_clear(b);
    return 0;
}

/* A written batch into progress (NULL: none): counted per batch, not per
 * record, which would be two atomic adds for each of millions of records. */
static void count_batch(store_copy_progress_t *progress, uint64_t *keys, uint64_t *bytes)
{
    if (progress != NULL) {
        atomic_fetch_add(&progress->keys, *keys);
        atomic_fetch_add(&progress->bytes, *bytes);
    }
    *keys = *bytes = 0;
}

/* The commit log's marks (`M` "checkpoint", "applied", "clean": levels/clog_redo.h) name offsets of the
 * live store's log, which the copy does not hold: a copied "applied" would make the copy's first open refuse
 * it as a log that lost durable batches. The copy's open writes marks of its own (an empty log). */
static int is_log_mark(const char *k, size_t kn)
{
    static const char *const marks[] = { "checkpoint", "applied", "clean" };
    for (size_t i = 0; i < sizeof marks / sizeof marks[0]; i++) {
        key_buf_t m;
        key_meta(&m, marks[i]);
        if (kn == m.n && memcmp(k, m.b, kn) == 0) {
            return 1;
        }
    }
    return 0;
}

/* A value as the copy keeps it: the copy holds no commit log and no consume
 * queue or slot file (design-commitlog.md §7: step 6 copies them), so a
 * message's 'X' record loses its journey (no slot or CQ entry of its will be
 * written: it moves on by its 'L' entry alone, as a message sent before
 * 4a.3 does; a journey that had none, on a level served from its CQ, gets
 * one from store_snapshot_take's snap_journey) and each CQ window in the level records and the lane's record
 * becomes [0, 0) (no file to open; no journey left names an index). *vn
 * shrinks; a record is rewritten in out[outcap]. */
static const char *copied_value(const char *k, size_t kn, const char *v, size_t *vn, char *out, size_t outcap)
{
    key_buf_t lane;
    key_meta(&lane, STORE_META_LANE);
    if (kn == 9 && k[0] == KEY_MSG_INDEX) {
        *vn = idx_home_len_without_journey(v, *vn);
        return v;
    }
    record_level_t r;
    if (kn == 2 && k[0] == KEY_LEVEL_RECORD && outcap >= RECORD_LEVEL_BYTES && record_level_decode(v, *vn, &r) == 0) {
        r.cq_head = r.cq_tail = 0;
        if (r.depth > 0 && !(r.flags & RECORD_LEVEL_ON_L)) { /* its journeys move on by `L` alone: walked from */
            r.flags |= RECORD_LEVEL_ON_L;                    /* the level's start (the head: a lower bound) */
            r.head_due = r.head_seq = 0;
            r.retries = 0;
        }
        record_level_encode(&r, out);
        *vn = RECORD_LEVEL_BYTES;
        return out;
    }
    record_topic_t t;
    if (k[0] == KEY_TOPIC_RECORD && outcap >= RECORD_TOPIC_BYTES && *vn == RECORD_TOPIC_BYTES &&
        record_topic_decode(v, *vn, &t) == 0 && t.queue != 0) {
        t.cq_seq_base += t.cq_tail; /* no CQ: its messages are 'T' entries at their CQ seqs, and new ones above */
        t.queue = 0;
        t.cq_head = t.cq_tail = 0;
        record_topic_encode(&t, out);
        return out;
    }
    if (kn == lane.n && memcmp(k, lane.b, kn) == 0 && *vn == 16 && outcap >= 16) {
        memset(out, 0, 16);
        return out;
    }
    return v;
}

/* b written into the copy when it holds SNAP_BATCH_BYTES or more, then the
 * caller asked whether to go on: 0 go on, 1 stopped, -1 error. */
static int copy_batch_full(leveldb_t *to, leveldb_writeoptions_t *wo, leveldb_writebatch_t *b, const char *dir,
                           uint64_t *keys, uint64_t *in_batch, store_copy_check_fn check, void *ctx,
                           store_copy_progress_t *progress, char *err, size_t errlen)
{
    if (*in_batch < SNAP_BATCH_BYTES) {
        return 0;
    }
    if (copy_write(to, wo, b, dir, err, errlen) != 0) {
        return -1;
    }
    count_batch(progress, keys, in_batch);
    int rc = check != NULL ? check(ctx, err, errlen) : 0;
    return rc > 0 ? 1 : rc < 0 ? -1 : 0;
}

/* The walk itself, into an open db; 0 done, 1 stopped, -1 error. */
static int copy_all(store_snapshot_t *sn, leveldb_t *to, const char *dir, store_copy_check_fn check, void *ctx,
                    store_copy_progress_t *progress, char *err, size_t errlen)
{
    leveldb_readoptions_t *ro = leveldb_readoptions_create();
    leveldb_readoptions_set_snapshot(ro, sn->snap);
    leveldb_readoptions_set_fill_cache(ro, 0);
    leveldb_readoptions_set_verify_checksums(ro, 1);
    leveldb_writeoptions_t *wo = leveldb_writeoptions_create();
    leveldb_writebatch_t *b = leveldb_writebatch_create();
    leveldb_iterator_t *it = leveldb_create_iterator(sn->db, ro);
    uint64_t in_batch = 0, keys = 0;
    int rc = 0;
    key_buf_t unfinished; /* in the first batch, deleted by the last: a cut copy says so */
    key_meta(&unfinished, STORE_META_COPY_UNFINISHED);
    leveldb_writebatch_put(b, unfinished.b, unfinished.n, "1", 1);
    for (leveldb_iter_seek_to_first(it); leveldb_iter_valid(it); leveldb_iter_next(it)) {
        size_t kn, vn;
        const char *k = leveldb_iter_key(it, &kn);
        if (is_log_mark(k, kn) || (kn == 9 && k[0] == KEY_SEGMENT)) { /* no log: no segment counts either */
            continue;
        }
        char rewritten[RECORD_LEVEL_BYTES];
        const char *v = copied_value(k, kn, leveldb_iter_value(it, &vn), &vn, rewritten, sizeof rewritten);
        leveldb_writebatch_put(b, k, kn, v, vn);
        in_batch += kn + vn;
        keys++;
        if ((rc = copy_batch_full(to, wo, b, dir, &keys, &in_batch, check, ctx, progress, err, errlen)) != 0) {
            break;
        }
    }
    if (rc == 0) {
        char *e = NULL;
        leveldb_iter_get_error(it, &e);
        if (e != NULL) {
            err_set(err, errlen, "reading the store: %s", e);
            leveldb_free(e);
            rc = -1;
        }
    }
    for (size_t i = 0; rc == 0 && i < sn->n_journeys; i++) { /* the journeys only the CQs held */
        leveldb_writebatch_append(b, sn->journeys[i].b);
        in_batch += sn->journeys[i].bytes;
        keys += sn->journeys[i].keys;
        if ((rc = copy_batch_full(to, wo, b, dir, &keys, &in_batch, check, ctx, progress, err, errlen)) != 0) {
            break;
        }
    }
    if (rc == 0) { /* the last batch, synced: the log holds whatever no table does yet */
        leveldb_writebatch_delete(b, unfinished.b, unfinished.n);
        leveldb_writeoptions_set_sync(wo, 1);
        rc = copy_write(to, wo, b, dir, err, errlen);
        count_batch(progress, &keys, &in_batch);
    }
    leveldb_iter_destroy(it);
    leveldb_writebatch_destroy(b);
    leveldb_writeoptions_destroy(wo);
    leveldb_readoptions_destroy(ro);
    return rc;
}

/* Does path exist? 1 yes, 0 no, -1 with err when it cannot be told. */
static int path_exists(const char *path, char *err, size_t errlen)
{
    struct stat st;
    if (stat(path, &st) == 0) {
        err_set(err, errlen, "%s already exists", path);
        return 1;
    }
    if (errno == ENOENT) {
        return 0;
    }
    err_set(err, errlen, "%s: %s", path, strerror(errno));
    return -1;
}

int store_snapshot_copy(store_snapshot_t *sn, const char *dir, store_copy_check_fn check, void *ctx,
                        store_copy_progress_t *progress, char *err, size_t errlen)
{
    char partial[PATH_MAX], parent[PATH_MAX];
    if ((size_t)snprintf(partial, sizeof partial, "%s" STORE_COPY_PARTIAL, dir) >= sizeof partial) {
        err_set(err, errlen, "%s: the path is too long", dir);
        return -1;
    }
    if (path_exists(dir, err, errlen) != 0 || path_exists(partial, err, errlen) != 0) {
        return -1;
    }
    snprintf(parent, sizeof parent, "%s", dir);
    char *up = dirname(parent); /* may point into parent, or at "." */
    leveldb_options_t *o = leveldb_options_create();
    leveldb_options_set_create_if_missing(o, 1);
    leveldb_options_set_error_if_exists(o, 1);
    leveldb_options_set_paranoid_checks(o, 1);
    leveldb_options_set_write_buffer_size(o, SNAP_WRITE_BUFFER);
    leveldb_options_set_compression(o, leveldb_snappy_compression);
    char *e = NULL;
    leveldb_t *to = leveldb_open(o, partial, &e);
    if (e != NULL) {
        err_set(err, errlen, "cannot create the copy %s: %s", partial, e);
        leveldb_free(e);
        leveldb_options_destroy(o);
        return -1;
    }
    int rc = copy_all(sn, to, partial, check, ctx, progress, err, errlen);
    leveldb_close(to);
    if (rc == 0) {
        rc = copy_mark_write(partial, err, errlen); /* the last file of the copy */
    }
    if (rc == 0) {
        rc = sync_dir(partial, err, errlen);
    }
    if (rc == 0 && renameat2(AT_FDCWD, partial, AT_FDCWD, dir, RENAME_NOREPLACE) != 0) {
        err_set(err, errlen, "cannot rename %s to %s: %s", partial, dir, strerror(errno));
        rc = -1;
    }
    if (rc == 0) {
        rc = sync_dir(up, err, errlen); /* the rename stays */
    } else {                            /* failed or stopped: nothing half-written is left behind */
        e = NULL;
        leveldb_destroy_db(o, partial, &e);
        if (e != NULL) {
            leveldb_free(e);
        }
        char mark[PATH_MAX + 32];
        snprintf(mark, sizeof mark, "%s/" STORE_COPY_WHOLE, partial);
        (void)unlink(mark); /* a failed rename's: not one of LevelDB's files */
        (void)rmdir(partial);
        if (rc == 1) {
            err_set(err, errlen, "stopped");
        }
    }
    leveldb_options_destroy(o);
    return rc;
}

/* Is name one of the files LevelDB keeps in a database directory (CURRENT,
 * LOCK, LOG, LOG.old, MANIFEST-n, n.log, n.ldb, n.sst, n.dbtmp), or the
 * STORE_COPY_WHOLE a crash before the rename left? */
static int is_copy_file(const char *name)
{
    if (strcmp(name, "CURRENT") == 0 || strcmp(name, "LOCK") == 0 || strcmp(name, "LOG") == 0 ||
        strcmp(name, "LOG.old") == 0 || strcmp(name, STORE_COPY_WHOLE) == 0) {
        return 1;
    }
    const char *digits = strncmp(name, "MANIFEST-", 9) == 0 ? name + 9 : name;
    size_t n = strspn(digits, "0123456789");
    if (n == 0) {
        return 0;
    }
    const char *rest = digits + n;
    if (digits != name) {
        return *rest == '\0';
    }
    return strcmp(rest, ".log") == 0 || strcmp(rest, ".ldb") == 0 || strcmp(rest, ".sst") == 0 ||
           strcmp(rest, ".dbtmp") == 0;
}

int store_copy_discard_partial(const char *dir, char *err, size_t errlen)
{
    char partial[PATH_MAX];
    if ((size_t)snprintf(partial, sizeof partial, "%s" STORE_COPY_PARTIAL, dir) >= sizeof partial) {
        err_set(err, errlen, "%s: the path is too long", dir);
        return -1;
    }
    DIR *d = opendir(partial);
    if (d == NULL) {
        if (errno == ENOENT) {
            return 0;
        }
        err_set(err, errlen, "cannot open %s: %s", partial, strerror(errno));
        return -1;
    }
    char foreign[256] = "";
    for (struct dirent *de = readdir(d); de != NULL && foreign[0] == '\0'; de = readdir(d)) {
        if (strcmp(de->d_name, ".") != 0 && strcmp(de->d_name, "..") != 0 && !is_copy_file(de->d_name)) {
            snprintf(foreign, sizeof foreign, "%s", de->d_name);
        }
    }
    closedir(d);
    if (foreign[0] != '\0') {
        err_set(err, errlen, "%s holds '%s', which is not a file of a copy: it is left as it is (remove it by hand)",
                partial, foreign);
        return -1;
    }
    /* LevelDB's own removal takes the database's lock first, and fails
     * while another process holds it: that copy is still being made. */
    leveldb_options_t *o = leveldb_options_create();
    char *e = NULL;
    leveldb_destroy_db(o, partial, &e);
    leveldb_options_destroy(o);
    if (e != NULL) {
        err_set(err, errlen, "%s is a copy another process is still making, or cannot be removed (%s)", partial, e);
        leveldb_free(e);
        return -1;
    }
    char mark[PATH_MAX + 32];
    snprintf(mark, sizeof mark, "%s/" STORE_COPY_WHOLE, partial);
    if (unlink(mark) != 0 && errno != ENOENT) {
        err_set(err, errlen, "cannot remove %s: %s", mark, strerror(errno));
        return -1;
    }
    if (rmdir(partial) != 0 && errno != ENOENT) {
        err_set(err, errlen, "cannot remove %s: %s", partial, strerror(errno));
        return -1;
    }
    return 1;
}
