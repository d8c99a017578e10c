/*
 * broker/heap_policy.h — how the broker's allocator keeps freed memory.
 *
 * glibc serves a block of at least its mmap threshold with a mapping of its
 * own, returned to the kernel when freed; smaller blocks come from heaps that
 * keep freed memory until malloc_trim. The threshold starts at 128 KiB but
 * rises to the size of every large block freed (up to 32 MiB), so after the
 * first 4 MiB SEND every query buffer, LevelDB memtable block and compaction
 * buffer of a burst came from the heaps and stayed there: 166 MB 30 s after a
 * burst of 200 SENDs of 4 MiB for a broker that got a command every second
 * (its only trim, on the storage thread, waits for an idle second; a trim
 * while loaded held the loop on the heaps' locks for 150-280 ms).
 * heap_policy_apply fixes the threshold at HEAP_POLICY_MMAP_THRESHOLD, so a
 * burst's large blocks go back to the kernel as they are freed, whatever the
 * traffic, and the heaps a trim walks stay small (65 µs instead of 4.4 ms
 * after that burst).
 */
#ifndef HG_BROKER_HEAP_POLICY_H
#define HG_BROKER_HEAP_POLICY_H

#include <stddef.h>

/* Blocks of this size and more get a mapping of their own. Above the
 * 64 KiB a connection keeps of its buffers, so steady small-message traffic
 * maps nothing. */
#define HEAP_POLICY_MMAP_THRESHOLD (256 * 1024)

/* Fix glibc's mmap threshold at HEAP_POLICY_MMAP_THRESHOLD, unless the
 * environment's GLIBC_TUNABLES sets glibc.malloc.mmap_threshold (the
 * operator's choice stands). Call from the main thread before any other
 * thread starts. Returns 0, or -1 with the cause in err (mallopt refused);
 * without glibc it does nothing and returns 0. */
int heap_policy_apply(char *err, size_t errlen);

#endif
