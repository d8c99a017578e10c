/*
 * levels/store.c — opening and closing a data directory (see store.h): the
 * options, store_open's steps in their order, store_close, and the wire form
 * of ids. The steps themselves are the package's other files'
 * (store_internal.h lists them all): the directory and LevelDB's open errors
 * are store_dir.c's, the format and meta records and the sequence counter's
 * floor store_meta.c's, the in-memory state read from the records
 * store_load.c's.
 *
 * Opening refuses, with the path and the problem named, anything that is not
 * a Hourglass data directory of this format and level table (keys.h's 'M'
 * records), and never repairs or truncates, with one exception: a torn
 * write at the end of the newest write-ahead log (a power cut; logtail.h),
 * which LevelDB's paranoid checks refuse, is cut off (its bytes kept) and the
 * open tried again. A whole copy BACKUP made (STORE_COPY_WHOLE) is refused
 * as damaged instead when its log ends torn or its files are not the sizes
 * its list says. It needs no scan: the level, topic and group records are
 * read (a few small ranges), queue heads come from the level records and are
 * found later with one seek each.
 *
 * The order of store_open is the invariant this file keeps: the options and
 * the clock are checked before the directory is touched; the meta records
 * are checked before any other record is read; the sequence counter is
 * raised to the clock's floor (store_meta.c) before anything at open could
 * take a number; a refusal once the store_t exists frees all of it
 * (store_free, open_failed).
 *
 * Threading: one thread at a time (the broker's storage thread).
 */
#include "levels/store_internal.h"
#include "base/alloc.h"
#include "base/err.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
    o->segment_bytes = STORE_DEFAULT_SEGMENT_BYTES;
    o->damage_retry_ms = STORE_DEFAULT_DAMAGE_RETRY_MS;
    o->checkpoint_bytes = STORE_CHECKPOINT_BYTES;
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
    if (o->damage_retry_ms < STORE_MIN_DAMAGE_RETRY_MS || o->damage_retry_ms > STORE_MAX_DAMAGE_RETRY_MS) {
        return err_set(err, errlen, "damage-retry %llu ms is outside %d..%d ms", (unsigned long long)o->damage_retry_ms,
                       STORE_MIN_DAMAGE_RETRY_MS, STORE_MAX_DAMAGE_RETRY_MS);
    }
    if (o->lane_max_entries > STORE_LANE_MAX_ENTRIES) {
        return err_set(err, errlen, "a remainder lane of %llu entries is over the limit of %llu",
                       (unsigned long long)o->lane_max_entries, (unsigned long long)STORE_LANE_MAX_ENTRIES);
    }
    if (o->checkpoint_bytes != 0 &&
        (o->checkpoint_bytes < STORE_CHECKPOINT_MIN_BYTES || o->checkpoint_bytes > STORE_CHECKPOINT_BYTES)) {
        return err_set(err, errlen, "commit-log checkpoint interval %llu bytes is not between %llu and %llu",
                       (unsigned long long)o->checkpoint_bytes, (unsigned long long)STORE_CHECKPOINT_MIN_BYTES,
                       (unsigned long long)STORE_CHECKPOINT_BYTES);
    }
    return store_check_segment_bytes(o->segment_bytes, err, errlen);
}

const lvl_table_t *store_levels(const store_t *s)
{
    return &s->opt.levels;
}
const store_options_t *store_options(const store_t *s)
{
    return &s->opt;
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
    /* a failed open, a broken store, a failed close: the log's files are closed as they are, nothing synced,
       applied or checkpointed; the next open redoes every batch the log kept */
    store_log_free(s);
    store_lane_free(s);
    segcount_free(s);
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
    redo_batch_free(&s->log_batch);
    while (s->pend_first != NULL) { /* leases not written (a failed close): lost, as in a crash */
        lease_pend_t *next = s->pend_first->all_next;
        free(s->pend_first);
        s->pend_first = next;
    }
    store_pend_spares_free(s);
    map_free(&s->groups, store_group_free);
    map_free(&s->deleting, store_group_free);
    map_free(&s->topic_queues, NULL);
    free(s->deferred);
    s->topic_last = NULL;
    map_free(&s->topics, store_topic_free);
    for (int l = 0; l <= LVL_MAX_LEVELS; l++) {
        map_free(&s->levels[l].cq_done, NULL);
    }
    map_free(&s->idx_dropped, NULL);
    map_free(&s->sent_keys, NULL);
    map_free(&s->key_count_batch, NULL);
    free(s->sent);
    free(s->dirty_topics);
    free(s->woken);
    free(s->taking);
    free(s->dirty_groups);
    free(s->path);
    free(s);
}

const char *store_open_note(const store_t *s)
{
    return s->open_note;
}

const char *store_open_info(const store_t *s)
{
    return s->open_info;
}

int store_created(const store_t *s)
{
    return s->created;
}

/* A refusal after LevelDB opened the directory: free s; -1, or
 * STORE_OPEN_DAMAGED (with what to do added) when a read found damage. */
static int open_failed(store_t *s, char *err, size_t errlen)
{
    int damaged = err != NULL && store_error_is_damage(err, s->path);
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
    int is_new = 0, unmarked = 0;
    int rc = store_prepare_dir(o, &is_new, err, errlen);
    if (rc != 0) {
        return rc;
    }
    if (!is_new && (rc = store_unmark_whole_copy(o->path, &unmarked, err, errlen)) != 0) {
        return rc;
    }

    store_t *s = xcalloc(1, sizeof *s);
    s->opt = *o;
    s->path = xstrdup(o->path);
    store_path_shown(s->path, s->path_shown, sizeof s->path_shown);
    s->opt.path = s->path;
    s->created = is_new;
    if (unmarked) {
        snprintf(s->open_info, sizeof s->open_info,
                 "data directory %s: a whole copy made by BACKUP, checked (the sizes its " STORE_COPY_WHOLE
                 " lists, its log's end) and opened; its " STORE_COPY_WHOLE " is removed: a live data directory from "
                 "now on",
                 s->path);
    }
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
    if (dberr != NULL && store_log_reader_error(dberr) && store_cut_torn_log(s) == 1) {
        log_cut = 1;
        leveldb_free(dberr);
        dberr = NULL;
        s->db = leveldb_open(s->dbopt, s->path, &dberr);
    }
    /* a hole past the commit log's checkpoint: the redo from B rewrites what it lost */
    if (dberr != NULL && store_log_reader_error(dberr) && store_open_past_hole(s) == 1) {
        leveldb_free(dberr);
        dberr = NULL;
        s->db = leveldb_open(s->dbopt, s->path, &dberr);
    }
    if (dberr != NULL) {
        rc = store_map_open_error(s->path, dberr, log_cut, err, errlen);
        if (s->open_note[0] != '\0' && err != NULL) { /* a cut, or why there was none */
            size_t n = strlen(err);
            snprintf(err + n, errlen - n, "; %s", s->open_note);
        }
        leveldb_free(dberr);
        s->db = NULL;
        store_free(s);
        return rc;
    }
    if (is_new && store_sync_new_dir(s->path, err, errlen) != 0) {
        store_free(s);
        return -1;
    }
    s->compactor = compactor_new(s->db, err, errlen);
    store_meta_state_t meta;
    if (s->compactor == NULL || store_check_meta(s, &meta, err, errlen) != 0) {
        return open_failed(s, err, errlen);
    }
    /* The redo before the counter is read: it may rewrite it (design-commitlog.md, "Step 4a: the wiring plan") */
    if ((rc = store_log_open(s, store_seq_floor(now_ms), err, errlen)) != 0) {
        store_free(s);
        return rc;
    }
    if (store_settle_meta(s, &meta, err, errlen) != 0) {
        return open_failed(s, err, errlen);
    }
    store_raise_seq(s, now_ms); /* before anything at open could take a number */
    if (store_load_levels(s, err, errlen) != 0 || store_lane_open(s, err, errlen) != 0 ||
        segcount_load(s, err, errlen) != 0 || store_log_recycle(s, err, errlen) != 0 ||
        store_load_topics(s, err, errlen) != 0 || topic_cq_load(s, err, errlen) != 0 ||
        topic_cq_sweep_dead(s, err, errlen) != 0 || store_load_groups(s, err, errlen) != 0 ||
        idx_open(s, err, errlen) != 0 || idx_key_counts_open(s, err, errlen) != 0 ||
        lease_index_fold(s, err, errlen) != 0 || store_topic_delayed_open(s, err, errlen) != 0 ||
        store_level_cq_open(s, err, errlen) != 0) {
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

/* The memtable written out to a table so that the next open has no LevelDB
 * log to replay: a compaction of a range that holds no key (every key starts
 * with an ASCII tag, keys.h) only does that. The compactor stops first. */
static void write_memtable_out(store_t *s)
{
    compactor_free(s->compactor);
    s->compactor = NULL;
    leveldb_compact_range(s->db, "\xff", 1, "\xff", 1);
}

/* store_close and store_close_unsynced: the last commit synced or not. */
static int close_store(store_t *s, int durable, char *err, size_t errlen)
{
    if (s == NULL) {
        return 0;
    }
    int sync_failed = store_log_sync_has_failed(s);
    if (sync_failed) {
        durable = 0; /* a sync of the log failed (the syncer's, not seen by the caller yet): never synced again */
    }
    if (sync_failed && s->broken) {
        /* Broken by a failed sync of the log on this thread (a read
         * barrier's, a synced commit's) or since: its segments are
         * abandoned and the held batches carried as store_close_unsynced
         * does, then the log is closed, so that the reopen never reads the
         * range the failure lost. The pending batch and the leases not
         * written are lost, as with any broken store; the break is
         * reported. */
        if (store_log_sync_failed(s, NULL, 0) == 0 && store_log_close(s, NULL, 0) == 0) {
            write_memtable_out(s);
        }
        store_usable(s, err, errlen);
        store_free(s);
        return -1;
    }
    if (durable && s->broken && s->log_append_failed) {
        /* Broken by a refused append (a full disk: no room for the next
         * segment), which changed neither the log nor LevelDB, and no sync
         * failed since (store_close, not _unsynced): the log is
         * closed cleanly all the same, so that the reopen on the full disk
         * redoes nothing (redoing every batch since the last checkpoint
         * needed room the released disk reserve did not give). The pending
         * batch and the leases not written are lost, as with any broken
         * store; the break is reported. */
        if (store_log_close_after_failed_append(s, NULL, 0) == 0) {
            write_memtable_out(s);
        }
        store_usable(s, err, errlen);
        store_free(s);
        return -1;
    }
    /* A broken store cannot commit: report that (its pending batch is lost)
     * rather than a clean close. The leases not written yet are written, so
     * that a clean restart keeps them. */
    int rc = store_leases_write(s, NULL, UINT64_MAX, err, errlen);
    if (rc == 0) {
        rc = store_commit_durable(s, durable, err, errlen);
    }
    if (rc == 0 && !durable) {
        /* The log's fdatasync failed (fsyncgate, design-commitlog.md §3): the
         * segments past the last good sync are abandoned and the batches they
         * hold carried into a fresh one (redo_sync_failed) before anything
         * is built on them; the close below never syncs them again. */
        rc = store_log_sync_failed(s, err, errlen);
    }
    if (rc == 0) {
        /* The commit log's clean checkpoint (the next open redoes nothing),
         * then the memtable written out (up to write-buffer-size) so that the
         * next open has no LevelDB log to replay; the checkpoint's marks are
         * LevelDB writes it writes out with the rest. A clean restart then opens in milliseconds and without the
         * memtable's RAM. A failed checkpoint is reported; the memtable is
         * written out all the same. */
        rc = store_log_close(s, err, errlen);
        write_memtable_out(s);
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

/* Eight hex digits of half, most significant first, as the bytes of a
 * big-endian word: each nibble is spread into a byte of its own (three
 * shift-and-mask steps), then every byte becomes its digit at once: '0' is
 * added to all, and 'a' - '0' - 10 more to those of 10 and above (b + 6
 * carries into bit 4 exactly then; no byte ever carries into the next). */
static uint64_t hex_digits(uint32_t half)
{
    const uint64_t ones = UINT64_C(0x0101010101010101);
    uint64_t v = half;
    v = ((v & UINT64_C(0xffff0000)) << 16) | (v & UINT64_C(0x0000ffff));
    v = ((v & UINT64_C(0x0000ff000000ff00)) << 8) | (v & UINT64_C(0x000000ff000000ff));
    v = ((v & UINT64_C(0x00f000f000f000f0)) << 4) | (v & UINT64_C(0x000f000f000f000f));
    uint64_t letters = ((v + 6 * ones) >> 4) & ones;
    return v + '0' * ones + letters * ('a' - '0' - 10);
}

/* The word's bytes, most significant first, as one store (be64_put's byte
 * stores are not merged here by GCC 12). */
static void put_digits(char *out, uint64_t digits)
{
#if __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    digits = __builtin_bswap64(digits);
#endif
    memcpy(out, &digits, sizeof digits);
}

/* Once per id in every SEND and PULL reply: no loop over the digits. */
void store_id_format(uint64_t id, char out[17])
{
    put_digits(out, hex_digits((uint32_t)(id >> 32)));
    put_digits(out + 8, hex_digits((uint32_t)id));
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
