/*
 * levels/compactor.h — compact LevelDB key ranges on a thread of its own.
 *
 * Why: leveldb_compact_range first writes the whole memtable out (up to
 * write-buffer-size, 64 MiB by default) and then rewrites the range; on the
 * store owner's thread that held every command for 70–255 ms after a burst
 * was consumed. The owner queues the range here and goes on; LevelDB's own
 * locking makes the compaction safe beside the owner's reads and writes.
 *
 * Contract: compactor_add copies the keys and never blocks on a compaction;
 * a range asked for while the queue is full is dropped (the caller asks
 * again once more heads were popped). compactor_flush_memtable asks for the
 * memtable alone to be written out, and never blocks either. compactor_wait
 * returns when every range and write-out queued before it is done. compactor_free waits for the compaction in
 * progress, drops the rest, and must run before the database is closed.
 *
 * Threading: add, wait and free from one thread (the store's owner); the
 * compactor thread only calls leveldb_compact_range.
 */
#ifndef HG_LEVELS_COMPACTOR_H
#define HG_LEVELS_COMPACTOR_H

#include <stddef.h>

#include <leveldb/c.h>

typedef struct compactor compactor_t;

/* A compactor for db, its thread started. NULL with the cause in err when
 * the thread cannot be started. */
compactor_t *compactor_new(leveldb_t *db, char *err, size_t errlen);

/* Queue [start, limit) for compaction. 1 when queued, 0 when dropped (the
 * queue is full). */
int compactor_add(compactor_t *c, const char *start, size_t start_len, const char *limit, size_t limit_len);

/* Queue a write-out of LevelDB's memtable to a table, and nothing more:
 * leveldb_compact_range begins with it (LevelDB's DBImpl::CompactRange writes
 * the memtable out first, whatever the range) and then finds no table in the
 * one-key range past every key of the store's layout (levels/keys.h: a key
 * begins with an ASCII tag). Its write-ahead log is then replaced by an
 * empty one, so an open after a crash has little to replay. 1 when queued, 0
 * when a write-out already waits (it covers what this one would). Ahead of
 * the ranges queued. */
int compactor_flush_memtable(compactor_t *c);

/* Wait until every range and write-out queued so far is done. */
void compactor_wait(compactor_t *c);

/* Stop the thread (after the compaction in progress) and free. NULL is a no-op. */
void compactor_free(compactor_t *c);

#endif
