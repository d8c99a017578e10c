/*
 * levels/logsync.h — make a store's written batches durable from another
 * thread: fdatasync LevelDB's write-ahead log files (the NNNNNN.log files of
 * the data directory) through descriptors of our own.
 *
 * Why: a synced leveldb_write holds the writing thread for the whole fsync,
 * so every other write (due moves, leases, ACKs) waits behind it. Instead the
 * store's owner writes every batch unsynced (LevelDB has then handed the
 * record to the kernel: its log writer flushes after each record) and a
 * second thread calls logsync_run, which makes durable everything written to
 * the log before the call began — the same guarantee a synced write gives.
 * Rotation is covered: every .log file still in the directory is synced (an
 * older log is deleted only after its contents were compacted into a synced
 * table and the manifest was synced).
 *
 * Threading: a logsync_t is used by one thread (the syncer); it never touches
 * the store_t, only the directory.
 *
 * Errors: 0 / -1 with the cause in err[errlen], naming the file (a long
 * directory shortened: store_path_shown), and whether it was a full disk's
 * (logsync_failed_full).
 */
#ifndef HG_LEVELS_LOGSYNC_H
#define HG_LEVELS_LOGSYNC_H

#include <stddef.h>

typedef struct logsync logsync_t;

/* A syncer for the data directory at path (copied). Never fails (aborts on
 * out-of-memory); the directory is read by logsync_run. */
logsync_t *logsync_new(const char *path);

/* Close the descriptors and free. NULL is a no-op. */
void logsync_free(logsync_t *ls);

/* fdatasync every write-ahead log file of the directory: what was written to
 * them before this call is durable when it returns 0. -1 when the directory
 * cannot be read, holds no log file, or a sync fails (then nothing written
 * since the last successful call may be assumed durable). */
int logsync_run(logsync_t *ls, char *err, size_t errlen);

/* The size in bytes of the newest write-ahead log (the one LevelDB appends
 * to) as the last successful logsync_run found it after its sync; 0 before
 * one. What an open after a crash replays into a memtable and writes out:
 * the store has the memtable written out when it grows long
 * (levels/store_checkpoint.c). Same thread as logsync_run. */
unsigned long long logsync_newest_bytes(const logsync_t *ls);

/* 1 when the last logsync_run failed for want of space (its fdatasync's
 * errno: store_failure_errno_full, levels/store.h), else 0. */
int logsync_failed_full(const logsync_t *ls);

/* 1 and *number when name is a write-ahead log's, "digits.log" (NNNNNN.log);
 * else 0. Pure, any thread. */
int logsync_log_number(const char *name, unsigned long long *number);

#endif
