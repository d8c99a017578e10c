/*
 * broker/backup.h — BACKUP: an online, consistent copy of the data
 * directory, made on a thread of its own (DESIGN §6, docs/operations.md).
 *
 * The storage thread starts a copy (backup_start: it takes the store's
 * snapshot there, so the copy holds every write committed before the
 * command ran) and stops one (backup_stop, before it closes the store: the
 * snapshot lives in the store's database). The copy is written to
 * "<dir>/<name>.partial" and renamed to "<dir>/<name>" once whole, so a
 * name that exists is a whole copy; a failed or stopped copy leaves nothing.
 * Its state is read by any thread (backup_status), for INFO and /metrics.
 */
#ifndef HG_BROKER_BACKUP_H
#define HG_BROKER_BACKUP_H

#include <stddef.h>
#include <stdint.h>

#include "levels/store.h"

#define BACKUP_NAME_MAX 128

typedef struct backup backup_t;

typedef enum backup_result {
    BACKUP_NONE = 0, /* none finished since the broker started */
    BACKUP_OK,
    BACKUP_FAILED,
    BACKUP_STOPPED /* the broker stopped, or its store was reopened, while it ran */
} backup_result_t;

typedef struct backup_status {
    int running;
    char name[BACKUP_NAME_MAX + 1]; /* the running one, else the last one */
    uint64_t started_ms;            /* wall clock, of that one */
    uint64_t keys, bytes;           /* copied so far, or by the last one */
    backup_result_t last;           /* how the last finished one ended */
    uint64_t last_finished_ms;      /* wall clock */
    uint64_t last_ok_ms;            /* wall clock of the last whole copy (0: none) */
    uint64_t last_ms;               /* how long the last finished one took */
    char last_error[300];           /* BACKUP_FAILED: why */
} backup_status_t;

backup_t *backup_new(void);

/* Stops a running copy (as backup_stop) and frees. NULL is a no-op. */
void backup_free(backup_t *b);

/* Is name fit for a copy's directory name: 1..BACKUP_NAME_MAX characters of
 * [A-Za-z0-9._-], not starting with '.'? 0 when it is; -1 with err saying
 * what is wrong. */
int backup_check_name(const char *name, size_t len, char *err, size_t errlen);

/* Start-up: remove every dir/NAME.partial (NAME a backup name) that a
 * broker killed mid-copy left, unless another process is still making it
 * or it holds a file that is not a copy's (store_copy_discard_partial);
 * each removal, and each one left, is logged. A missing dir is nothing. */
void backup_discard_unfinished(const char *dir);

/* Storage thread: take the store's snapshot and start copying it to
 * dir/name (dir is made, 0700, when missing: its parent must exist;
 * dir/name may not exist; a dir/name.partial is removed first when a crash
 * left it, and refused when another process is still making it or it holds
 * a foreign file),
 * at most rate bytes of records a second (0: no limit). The copy fails
 * (and removes what it wrote) when the file system of dir has less than
 * min_free bytes free, so a copy on the data directory's own disk cannot
 * fill it. 0 started; -1 with err (one is running, the name, the
 * directory, its free space, the snapshot), and nothing started; every
 * refusal but "one is running" is also recorded in the status as a failed
 * copy (backup_status: last BACKUP_FAILED, last_error). */
int backup_start(backup_t *b, store_t *s, const char *dir, const char *name, uint64_t min_free, uint64_t rate,
                 uint64_t now_ms, char *err, size_t errlen);

/* Storage thread, before the store is closed: tell a running copy to stop,
 * wait for its thread, and release its snapshot (it is recorded as
 * BACKUP_STOPPED). Also reaps a copy that finished. No-op when none ran. */
void backup_stop(backup_t *b);

/* Any thread. */
void backup_status(backup_t *b, backup_status_t *out);

const char *backup_result_name(backup_result_t r);

#endif
