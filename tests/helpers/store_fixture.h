/*
 * tests/helpers/store_fixture.h — the fixture the store's CUnit programs
 * share (tests/unit/test_store_{open,send,levels,groups,leases,topics,index,
 * failure,batching,snapshot}.c; test_store_model has its own): one fresh temp
 * directory per test, an injected clock, and helpers that fail the test with
 * the line of the call. A helper only one program uses stays in it, static.
 *
 * Contract: a program passes store_fixture_setup and store_fixture_teardown to
 * tu_suites_main. Setup makes g_dir (a fresh tu_mkdtemp directory; empty when
 * that failed, and the first open fails) and g_data (g_dir/data, the default
 * data directory); teardown, run even after a fatal assertion, restores an
 * RLIMIT_FSIZE a test lowered (g_fsize_set), closes every store opened through
 * OPEN/OPEN_AT/OPEN_DEFAULT and not through CLOSE (at most MAX_OPEN at once),
 * and removes g_dir. Every now_ms is passed explicitly, starting at T0; after
 * every step that mutates, CHECK_STORE (store_check must return 0, its message
 * printed when it does not). The X_at functions take the caller's __LINE__
 * through their X macro. Names are those the tests have always called, so
 * the tests moved here from one program unchanged. Single-threaded, like the
 * store's owner; not for the broker.
 */
#ifndef HG_TESTS_STORE_FIXTURE_H
#define HG_TESTS_STORE_FIXTURE_H

#include "levels/store.h"
#include "tests/helpers/testutil.h"

#include <inttypes.h>
#include <leveldb/c.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/resource.h>

/* The injected clock's units; every now_ms a test passes starts at T0. */
#define SEC   UINT64_C(1000)
#define MIN   (60 * SEC)
#define HOUR  (60 * MIN)
#define DAY   (24 * HOUR)
#define T0    UINT64_C(1700000000000) /* the injected clock starts here */
#define LEASE (30 * SEC)

/* rc must be 0; otherwise stop the test and print err. */
#define REQUIRE_OK(rc, err) TU_REQUIRE((rc) == 0, "%s failed: %s", #rc, (err))
/* got and want are evaluated once each (got may be a call that acts: ACK, MOVE). */
#define CHECK_EQ_U64(got, want)                                                                        \
    do {                                                                                               \
        uint64_t got_u64_ = (uint64_t)(got), want_u64_ = (uint64_t)(want);                             \
        TU_CHECK(got_u64_ == want_u64_, "%s = %" PRIu64 ", want %" PRIu64, #got, got_u64_, want_u64_); \
    } while (0)

/* store_check(s) must return 0; otherwise stop the test and print its message. */
void check_store_at(store_t *s, int line);
#define CHECK_STORE(s) check_store_at((s), __LINE__)

/* The groups being deleted and the entries they hold yet. */
void check_deleting_at(store_t *s, uint64_t groups, uint64_t entries, int line);
#define CHECK_DELETING(s, groups, entries) check_deleting_at((s), (groups), (entries), __LINE__)

/* Run the steps of GROUP DEL (store_collect with a grace no entry of the
 * topic logs outlives: no GC) until no group is being deleted; committed. */
void drain_deletes_at(store_t *s, int line);
#define DRAIN_DELETES(s) drain_deletes_at((s), __LINE__)

/* A refusal: rc must be -1 and err must contain every fragment given. */
void check_refusal_at(int rc, const char *err, int line, const char *frag1, const char *frag2);
#define CHECK_REFUSAL(rc, err, f1, f2) check_refusal_at((rc), (err), __LINE__, (f1), (f2))

/* The fixture's state, set by store_fixture_setup: this test's temp directory
 * and g_dir/data, the default data directory. */
extern char g_dir[512];
extern char g_data[600];
/* The stores open_at opened and close_at did not close, closed by teardown. */
#define MAX_OPEN 4
extern store_t *g_open[MAX_OPEN];
/* A test that lowers RLIMIT_FSIZE saves the old limit here and sets
 * g_fsize_set; teardown restores it. */
extern struct rlimit g_fsize_saved;
extern int g_fsize_set;

/* A "full disk" for this process: RLIMIT_FSIZE lowered to bytes (the old
 * limit saved in g_fsize_saved), SIGXFSZ ignored, so a write past it fails
 * with EFBIG (lowered again, the first saved limit is kept); disk_room_again
 * gives both back (teardown does when a test stops before it). */
void disk_full_at(rlim_t bytes);
void disk_room_again(void);

/* Per test: a fresh temp directory (a failure shows up as the first open's). */
void store_fixture_setup(void);

/* Per test, even after a fatal assertion: close what is open, remove the dir. */
void store_fixture_teardown(void);

/* The options most tests use: defaults, g_data, no fsync. */
void opts_default(store_options_t *o);

/* Open at wall-clock time now (fatal on failure) and remember the store so
 * teardown closes it. */
store_t *open_at(const store_options_t *o, uint64_t now, int line);
#define OPEN(o) open_at((o), T0, __LINE__)

/* open_at with opts_default's options at T0. */
store_t *open_default_at(int line);
#define OPEN_DEFAULT() open_default_at(__LINE__)

/* A snapshot of s copied whole to dir (store_snapshot_take, _copy,
 * _release): a failure fails the test at line. */
void snapshot_copy_to_at(store_t *s, const char *dir, int line);
#define SNAPSHOT_COPY_TO(s, dir) snapshot_copy_to_at((s), (dir), __LINE__)

/* Close *sp (fatal on failure), forget it, set *sp to NULL. */
void close_at(store_t **sp, int line);
#define CLOSE(sp) close_at((sp), __LINE__)

/* Close *sp, a store that must be broken: its close fails naming `says`
 * (checked), *sp forgotten and set to NULL. A store that is not broken
 * fails the test there and is closed as CLOSE does. */
void close_broken_at(store_t **sp, const char *says, int line);
#define CLOSE_BROKEN(sp, says) close_broken_at((sp), (says), __LINE__)

/* store_send with the fields given, nothing fatal: its rc and err. */
int send_raw(store_t *s, const char *topic, size_t topic_len, const char *key, size_t key_len, const char *payload,
             size_t payload_len, int level, uint64_t delay_ms, uint64_t now, uint64_t *id, uint64_t *due, char *err,
             size_t errlen);

/* Send (fatal on failure); returns the id, *due (may be NULL) the due time. */
uint64_t send_at(store_t *s, const char *topic, const char *payload, int level, uint64_t delay, uint64_t now,
                 uint64_t *due, int line);
#define SEND(s, topic, payload, level, delay, now, due) \
    send_at((s), (topic), (payload), (level), (delay), (now), (due), __LINE__)

/* store_lease of up to count messages into out (fatal on failure); returns
 * how many; the caller frees them (free_msgs). */
int lease_at(store_t *s, const char *group, const char *topic, int count, uint64_t lease_ms, uint64_t now,
             msg_owned_t *out, int line);
#define LEASE_N(s, g, t, count, lease_ms, now, out) lease_at((s), (g), (t), (count), (lease_ms), (now), (out), __LINE__)

/* msg_owned_free on each of m[0..n). */
void free_msgs(msg_owned_t *m, int n);

/* Move due messages (fatal on error); returns the number moved. */
int move_at(store_t *s, uint64_t now, int max, int *ready, int line);
#define MOVE(s, now, max, ready) move_at((s), (now), (max), (ready), __LINE__)

/* store_group_create (fatal on failure). */
void group_create_at(store_t *s, const char *group, const char *topic, int from_first, uint64_t now, int line);
#define GROUP_CREATE(s, g, t, ff, now) group_create_at((s), (g), (t), (ff), (now), __LINE__)

/* The group's info; fatal when it does not exist. */
store_group_info_t group_info_at(store_t *s, const char *group, int line);
#define GINFO(s, g) group_info_at((s), (g), __LINE__)

/* Compare every counter of a group at once. */
void check_counts_at(store_t *s, const char *group, uint64_t ready, uint64_t backlog, uint64_t retry_ready,
                     uint64_t retry_delayed, uint64_t inflight, uint64_t dlq, int line);
#define CHECK_COUNTS(s, g, ready, backlog, rr, rd, infl, dlq) \
    check_counts_at((s), (g), (ready), (backlog), (rr), (rd), (infl), (dlq), __LINE__)

/* store_fail of group's lease of id (fatal on failure): to the DLQ, to level,
 * or after delay; found must be want_found; *due (may be NULL) the due time. */
void fail_at(store_t *s, const char *group, uint64_t id, int to_dlq, int level, uint64_t delay, const char *reason,
             uint64_t now, int want_found, uint64_t *due, int line);
#define FAIL_LEVEL(s, g, id, level, reason, now, due) \
    fail_at((s), (g), (id), 0, (level), 0, (reason), (now), 1, (due), __LINE__)

#define FAIL_DLQ(s, g, id, reason, now) fail_at((s), (g), (id), 1, 0, 0, (reason), (now), 1, NULL, __LINE__)

/* store_ack of n ids (fatal on failure); returns how many were released. */
int ack_at(store_t *s, const char *group, const uint64_t *ids, int n, int line);
#define ACK(s, g, ids, n) ack_at((s), (g), (ids), (n), __LINE__)

/* store_commit (fatal on failure). */
void commit_at(store_t *s, int line);
#define COMMIT(s) commit_at((s), __LINE__)

/* The depth of level / the due time of its head; UINT64_MAX for no such level. */
uint64_t level_depth(store_t *s, int level);
uint64_t level_head(store_t *s, int level);

/* 1 when m holds exactly the bytes of s. */
int msg_str_is(const msg_str_t *m, const char *s);

/* Write text to path (created or truncated): 0, or -1 when it cannot be. */
int write_file(const char *path, const char *text);

/* A new store with group g on topic t holding one message, leased (*id). */
store_t *open_with_one_lease(uint64_t *id);

/* The closed data directory opened as a plain LevelDB (LevelDB copies the
 * options, so none are left to free): for the raw_* helpers below. */
leveldb_t *raw_open(int line);

/* The keys of one range tag (keys.h) in a closed data directory. */
uint64_t raw_count_at(char tag, int line);
#define RAW_COUNT(tag) raw_count_at((tag), __LINE__)

/* The value under key in a closed data directory (leveldb_free it), or
 * NULL with *vlen 0 when absent; a read error fails the test at line. */
char *raw_get_at(const char *key, size_t klen, size_t *vlen, int line);
#define RAW_GET(key, klen, vlen) raw_get_at((key), (klen), (vlen), __LINE__)

/* Put one raw key into a closed data directory. */
void raw_put(const char *key, size_t klen, const char *val, size_t vlen, int line);

/* Replace the value under key in a closed data directory with `with`
 * (damage): the value it held, for raw_put to put back (leveldb_free it). */
char *raw_replace_at(const char *key, size_t klen, const char *with, size_t wlen, size_t *vlen, int line);
#define RAW_REPLACE(key, klen, with, wlen, vlen) raw_replace_at((key), (klen), (with), (wlen), (vlen), __LINE__)

/* RAW_REPLACE for a key that may be absent: NULL (and *vlen 0) when it was,
 * so that raw_put(key, klen, old, *vlen) puts back what was there (deletes
 * the key again when nothing was). */
char *raw_replace_or_add_at(const char *key, size_t klen, const char *with, size_t wlen, size_t *vlen, int line);
#define RAW_REPLACE_OR_ADD(key, klen, with, wlen, vlen) \
    raw_replace_or_add_at((key), (klen), (with), (wlen), (vlen), __LINE__)

/* Flip byte `at` of message id's record in its commit-log segment (the
 * fixture's segment size): a record whose CRC fails. Flipping it again
 * repairs it. */
void record_flip_at(uint64_t id, uint64_t at, int line);
#define RECORD_FLIP(id) record_flip_at((id), 40, __LINE__)

/* The big-endian u64 at p; write v at p big-endian. */
uint64_t be64_at(const char *p);
void be64_to(char *p, uint64_t v);

/* Read the copy index entry of message id's lease (its one 'Y' entry) from
 * db: its key into yk (*klen bytes) and its 18-byte place. */
void raw_lease_place(leveldb_t *db, uint64_t id, char yk[64], size_t *klen, char place[18], int line);

/* Write batch wb into db and close it. */
void raw_write_close(leveldb_t *db, leveldb_writebatch_t *wb, int line);

/* The format marker as it is on disk (a closed data directory). */
uint32_t raw_format(void);

/* Turn the lease of message id (its one copy index entry) back into what
 * format 1 or 2 wrote, in a closed data directory: a lease index entry 'J'
 * group 0x00 id → u64 deadline, and with format 2 also the topic-log seq
 * when known; the copy index entry's place 'I' without either. */
void raw_downgrade_lease(uint64_t id, int format, int line);

/* ACK n leased messages and free them (fatal when one is not released). */
void ack_leased_at(store_t *s, const char *group, msg_owned_t *m, int n, int line);
#define ACK_LEASED(s, g, m, n) ack_leased_at((s), (g), (m), (n), __LINE__)

/* store_maintain until it has no work left (fatal on failure or after 100 000
 * calls); returns the work done. */
int maintain_all(store_t *s, uint64_t now, int max, int line);
#define MAINTAIN(s, now, max) maintain_all((s), (now), (max), __LINE__)

/* The topic's retained count; fatal when the topic does not exist. */
uint64_t retained_of(store_t *s, const char *topic);

/* Of the regular files in dir whose names end in suffix ("" for all): the
 * size of the largest (largest 1) or their total (largest 0), or -1 when dir
 * cannot be read. */
long long file_bytes(const char *dir, const char *suffix, int largest);

/* A store with a bit of everything: messages on the levels and ready, a
 * group with leases, acknowledged ones, a retry and a DLQ entry. */
void fill_mixed(store_t *s);

/* FNV-1a of every file of dir (name, size, mode, mtime, bytes) and dir's
 * own mtime: equal before and after when nothing in dir changed. */
uint64_t dir_digest(const char *dir);

/* ---- leases written late (store_options_t.lease_write_delay_ms) ---- */
#define WRITE_DELAY 100

/* open_at with opts_default's options and leases written WRITE_DELAY ms late. */
store_t *open_write_late(void);

/* A step crash_after_at runs in the child: 0 when done, else -1 with err. */
typedef int (*crash_work_fn)(store_t *c, char *err, size_t errlen);

/* Run work (0: done) in a forked process on the store of open_write_late,
 * commit (unless work broke the store on purpose), and kill the process
 * with SIGKILL: a crash, no store_close, the
 * leases it held are lost with it. No CUnit in the child: its exit status
 * says how far it got. */
void crash_after_at(crash_work_fn work, int line);
#define CRASH_AFTER(work) crash_after_at((work), __LINE__)

/* Send payload "p" on level 0 with key and delay (fatal on failure); the id. */
uint64_t send_key(store_t *s, const char *topic, const char *key, uint64_t delay, uint64_t now);

/* Where message id is (store_msg_get); *gstate where group's copy is
 * (STORE_MSG_GONE when group is NULL or holds none). */
store_msg_state_t state_of(store_t *s, uint64_t id, const char *group, store_msg_state_t *gstate);

#endif
