/*
 * broker/diskguard.h — the data directory's disk: a reserve ("ballast") file
 * that a full disk can be given back, and free space. (Which failures mean a
 * full disk the store says: store_last_failure_full, store_failure_text_full
 * in levels/store.h.)
 *
 * Why: when the disk fills, LevelDB's write fails and the store must be
 * reopened (its in-memory state may be ahead of the disk); reopening needs a
 * little space itself (a new log, the manifest, a recovered memtable's
 * table). The broker keeps `disk-reserve` bytes in DIR/BALLAST; on a disk-full
 * failure it deletes it, so the reopen (and a restart in place) has room, and
 * refuses writes until the free space is back above twice the reserve and
 * the reserve plus one commit-log segment (writer_disk_resume_bytes), when
 * it writes the ballast again. LevelDB ignores a file of that name.
 *
 * Thread: the storage thread (and main before it starts). Pure file-system
 * calls; no state.
 */
#ifndef HG_BROKER_DISKGUARD_H
#define HG_BROKER_DISKGUARD_H

#include <stddef.h>
#include <stdint.h>

#define DISKGUARD_BALLAST "BALLAST" /* the reserve file's name inside the data directory */

/* Free bytes for an unprivileged writer on the file system of dir
 * (statvfs f_bavail); UINT64_MAX when it cannot be read. */
uint64_t diskguard_free_bytes(const char *dir);

/* Make dir/BALLAST exactly bytes long with real blocks (posix_fallocate, then
 * fsync). bytes 0 removes it. 0, or -1 with the cause in err (no space: the
 * partial file is removed). */
int diskguard_ballast_create(const char *dir, uint64_t bytes, char *err, size_t errlen);

/* Delete dir/BALLAST. Returns the bytes it held (0 when there was none). */
uint64_t diskguard_ballast_release(const char *dir);

#endif
