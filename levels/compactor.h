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
 * again once more heads were popped). compactor_wait returns when every range
 * queued before it is compacted. compactor_free waits for the compaction in
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

/* Wait until every range queued so far is compacted. */
void compactor_wait(compactor_t *c);

/* Stop the thread (after the compaction in progress) and free. NULL is a no-op. */
void compactor_free(compactor_t *c);

#endif
