/*
 * tests/helpers/powercut.h — a simulated power cut for files under one
 * directory (docs/design-commitlog.md §10 step 3): kill -9 keeps the page
 * cache, a power cut loses any subset of the writes made since a file's last
 * fdatasync/fsync and can tear a write at a sector boundary.
 *
 * Method (an undo journal): linked into a test program, this module defines
 * pwrite, write, rename, fdatasync, fsync and pread, so the code under test calls
 * them. Once
 * armed (in a forked child), every pwrite/write to a regular file under the
 * watched directory is applied to the real file and journalled with the
 * bytes it replaced, in memory shared with the parent; a file's fdatasync or
 * fsync drops its entries (they are durable). At the Nth watched call the
 * child kills itself with SIGKILL before making it. The parent's
 * powercut_power_off then undoes every unsynced write (newest first, back to
 * the durable bytes and size) and reapplies a random subset of them in order:
 * each kept whole, dropped, or torn at a 512- or 4096-byte boundary of the
 * file (one side of the boundary kept).
 *
 * A sync can be made to fail (powercut_fail_sync): the nth fdatasync/fsync
 * of a file whose name starts with a prefix returns EIO and its unsynced
 * writes are lost — the child still reads them (the page cache keeps them),
 * the power-off never reapplies them (the disk never got them), as Linux
 * does after a failed writeback (design §3 "fsyncgate").
 *
 * Reads can be watched: preads of one file overlapping a byte range are
 * counted (armed or not), so a test can show a range is never read.
 *
 * Syncs of the directory and of files under it never reach the host's disk
 * (armed or not): the simulated disk is the files' contents.
 *
 * Renames and unlinks within the directory are journalled too, in one list,
 * until the directory's fsync: at power-off a seeded prefix of that list
 * survives (a journalling file system commits them in order: ext4's and
 * XFS's metadata journals) and the rest are undone, newest first. The file a
 * call took a name from (the one a rename replaced, the one unlinked) is kept
 * alive meanwhile as a hard link in "<dir>.held/", so an undone call gives
 * the name back to that very file, with the bytes it held (its own unsynced
 * writes are then cut like any other file's). A link that cannot be made
 * fails the power-off rather than pretend. Not simulated: a created name
 * survives the cut as made, and reads in the child see every write, as the
 * page cache does.
 *
 * Threads: the child's calls may come from any thread (the journal is under a
 * process-shared mutex); powercut_power_off runs in the parent after the
 * child is gone.
 *
 * The seed loop (powercut_run_seeds) is the power-cut suites' common driver:
 * it reads HG_POWERCUT_SEED (replay one seed) and HG_POWERCUT_SEEDS (how many
 * seeds, from 1), gives each seed an empty directory, stops at the first
 * seed that fails and prints the line that replays it.
 */
#ifndef HG_TESTS_POWERCUT_H
#define HG_TESTS_POWERCUT_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/* What one power-off did to the unsynced writes. */
typedef struct powercut_stats {
    uint64_t unsynced;      /* writes not covered by a sync when the power went */
    uint64_t kept;          /* reapplied whole */
    uint64_t dropped;       /* lost */
    uint64_t torn;          /* one side of a sector boundary kept */
    uint64_t renames_lost;  /* renames undone (not covered by a directory fsync) */
    uint64_t replaced_back; /* of those, renames over an existing file: that file has its name again */
    uint64_t unlinks_lost;  /* unlinks undone: the file is back */
    uint64_t lost;          /* writes a failed sync dropped (never reapplied) */
} powercut_stats_t;

/* Map the shared journal (journal_bytes) and watch files under dir; call once,
 * before forking. 0, or -1 with err. */
int powercut_init(const char *dir, size_t journal_bytes, char *err, size_t errlen);

/* Empty the journal and disarm (parent, before each child). */
void powercut_reset(void);

/* In the child: journal from now on and die by SIGKILL before the kill_at-th
 * watched call (1-based; 0: never). */
void powercut_arm(uint64_t kill_at);

/* The nth fdatasync/fsync from this call on (1-based; armed) of a watched file whose name starts with prefix fails with
 * EIO and loses that file's unsynced writes (above). */
void powercut_fail_sync(uint64_t nth, const char *prefix);

/* The syncs made to fail since powercut_reset. */
uint64_t powercut_failed_syncs(void);

/* Count preads of the file at path overlapping [from, to), in any process
 * sharing the journal, until powercut_reset (which also ends the watch). 0,
 * or -1 with err (no such file). */
int powercut_watch_reads(const char *path, uint64_t from, uint64_t to, char *err, size_t errlen);
uint64_t powercut_range_reads(void);

/* The watched calls made since powercut_reset (what the child got to). */
uint64_t powercut_calls(void);

/* Power off (parent, after the child died): undo every unsynced write and
 * reapply a subset chosen by seed. 0, or -1 with err (a file of the journal
 * that cannot be rewritten, a journal that overflowed). */
int powercut_power_off(uint64_t seed, powercut_stats_t *st, char *err, size_t errlen);

/* The suites' seeded generator (splitmix64): the next number from state *s. */
uint64_t powercut_next_rand(uint64_t *s);

/* Add st's counts to sum. */
void powercut_stats_add(powercut_stats_t *sum, const powercut_stats_t *st);

/* The power-cut suites' step after forking a writer that arms: wait for
 * child pid, which must have died by the cut's SIGKILL, then power off with
 * cut_seed and add what the power-off did to *sum. 0, or -1 with err (the
 * child ended otherwise, saying how; or the power-off failed). */
int powercut_cut_child(pid_t pid, uint64_t cut_seed, powercut_stats_t *sum, char *err, size_t errlen);

/* One seed's run, on an empty watched directory: 0 when it held, nonzero
 * after a failure it reported itself. ctx is powercut_run_seeds's. */
typedef int (*powercut_seed_fn)(uint64_t seed, void *ctx);

/* What powercut_run_seeds did. */
typedef struct powercut_seed_run {
    uint64_t ran;     /* seeds run, the failed one included */
    int failed;       /* a seed failed: the loop stopped there and printed its replay line */
    uint64_t wall_ms; /* the loop's wall time */
} powercut_seed_run_t;

/* Run seeds 1..default_seeds (HG_POWERCUT_SEEDS=<n>: 1..n; HG_POWERCUT_SEED=<n>:
 * n alone), each after emptying dir (removed and made again, 0700), until
 * one fails; on a failure prints "power cut failure: replay with
 * HG_POWERCUT_SEED=<seed>" on stderr. Inside a CUnit test: a variable that
 * is not a whole number (a count of 0 too) or a dir that cannot be made ends
 * the test with a failure naming it. */
powercut_seed_run_t powercut_run_seeds(const char *dir, uint64_t default_seeds, powercut_seed_fn run_seed, void *ctx);

#endif
