/*
 * levels/store_meta.c — the meta records ('M', keys.h) at open, for
 * store_open (store.c), in two steps around the commit log's redo
 * (store_log.c): before it, the records checked (format version, an
 * unfinished BACKUP copy, the level table against the configuration) and a
 * new directory's format marker written with its level table; after it, an
 * older format upgraded and the sequence counter read. And the sequence
 * counter's floor.
 *
 * Invariants: a directory is marked with this build's format (synced, even in
 * a store that does not sync) before anything of that format is written, so
 * an older build refuses it rather than misreading it; a LevelDB database
 * with data and no marker is never written to. The sequence counter read at
 * open is raised to the wall clock's floor (store.h, STORE_SEQ_CLOCK_BITS),
 * so a directory put back from a copy, which carries the counter as it was
 * when the copy was made, never hands out again an id that its broker gave
 * after the copy.
 *
 * Threading: one thread at a time (the broker's storage thread).
 */
#include "levels/store_internal.h"
#include "base/err.h"

#include <stdio.h>
#include <string.h>

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
    char dberr[384];
    if (store_write_batch(s, 1, NULL, dberr, sizeof dberr) != 0) {
        return err_set(err, errlen, "cannot initialise data directory %s: %s", s->path_shown, dberr);
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
 * only (version 4 adds a meaning to 'X', not a record). 4 → 5: the marker
 * here; the key index's count records are built after the indexes are
 * (idx_key_counts_open, which finishes an interrupted walk at the next
 * open). 5 → 6: the marker only; a level whose `L` range still holds SEND
 * journeys (written by a version-5 build of the commit log) is walked by `L`
 * until it empties, found at every open (level_open.c store_level_cq_open). 6 →
 * 7: the marker only; a topic's 'T' entries are walked before its topic CQ,
 * which its first append makes (topic_cq.c). 7 → 8: the marker only; the
 * topics of version 7 keep their CQ numbers and files of 2^12 entries, and
 * the next topic made draws a number from STORE_TOPIC_QUEUE_GROWING, whose
 * files grow (topic_cq_make, levels/cq.h's layouts). */
static int upgrade_format(store_t *s, uint32_t from, char *err, size_t errlen)
{
    put_format(s);
    char dberr[384];
    if (store_write_batch(s, 1, NULL, dberr, sizeof dberr) != 0) {
        return err_set(err, errlen, "cannot upgrade data directory %s from format version %u to %d: %s", s->path_shown,
                       from, STORE_FORMAT_VERSION, dberr);
    }
    size_t n = strlen(s->open_info);
    snprintf(s->open_info + n, sizeof s->open_info - n,
             "%sdata directory %s: upgraded from format version %u to %d; the build that wrote it refuses it from "
             "now on (to go back: restore a backup taken before the upgrade, docs/operations.md \"Upgrades\")",
             n > 0 ? "; " : "", s->path, from, STORE_FORMAT_VERSION);
    return 0;
}

/* The level table record against the configuration. 0, or -1 with err. */
static int check_level_table(store_t *s, char *err, size_t errlen)
{
    key_buf_t k;
    char *v;
    size_t vlen;
    key_meta(&k, "levels");
    int found = store_get(s, &k, &v, &vlen, err, errlen);
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
    return 0;
}

int store_check_meta(store_t *s, store_meta_state_t *m, char *err, size_t errlen)
{
    key_buf_t k;
    char *v;
    size_t vlen;
    m->fresh = 0;
    m->version = STORE_FORMAT_VERSION;
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
        m->fresh = 1;
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
    m->version = version;
    return check_level_table(s, err, errlen);
}

int store_settle_meta(store_t *s, const store_meta_state_t *m, char *err, size_t errlen)
{
    s->format_marked = STORE_FORMAT_VERSION;
    if (m->fresh) {
        return 0; /* write_new_meta set the counter */
    }
    if (m->version < STORE_FORMAT_VERSION) {
        if (s->opt.no_upgrade) {
            s->format_marked = m->version;
        } else if (upgrade_format(s, m->version, err, errlen) != 0) {
            return -1;
        }
    }
    key_buf_t k;
    char *v;
    size_t vlen;
    key_meta(&k, "seq");
    int found = store_get(s, &k, &v, &vlen, err, errlen);
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

/* ---- the sequence counter's floor ------------------------------------------------------ */

uint64_t store_seq_floor(uint64_t now_ms)
{
    return now_ms << STORE_SEQ_CLOCK_BITS;
}

/* Raise the counter to the clock's floor (store.h), once store_check_meta has read
 * it (or a new directory's first batch has written it). persisted_seq stays
 * what the directory holds, so the next commit writes the raised counter; an
 * open that commits nothing (--check-data of a copy) writes nothing. Never
 * lowers it: a clock set back leaves it where it was. */
void store_raise_seq(store_t *s, uint64_t now_ms)
{
    uint64_t least = store_seq_floor(now_ms);
    if (least > s->next_seq) {
        s->next_seq = least;
    }
}
