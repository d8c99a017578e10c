/*
 * broker/heap_policy.c — the allocator settings of heap_policy.h: glibc's
 * mmap threshold fixed, so a burst's large blocks are not kept in the heaps.
 * Main thread, at start-up, before any other thread.
 */
#include "broker/heap_policy.h"
#include "base/err.h"

#include <stdlib.h>
#include <string.h>
#ifdef __GLIBC__
#include <malloc.h>
#endif

int heap_policy_apply(char *err, size_t errlen)
{
#ifdef __GLIBC__
    const char *tunables = getenv("GLIBC_TUNABLES");
    if (tunables != NULL && strstr(tunables, "glibc.malloc.mmap_threshold=") != NULL) {
        return 0;
    }
    /* mallopt's M_MMAP_THRESHOLD also ends glibc's raising of it (and of the trim threshold with it). */
    if (mallopt(M_MMAP_THRESHOLD, HEAP_POLICY_MMAP_THRESHOLD) != 1) {
        return err_set(err, errlen, "mallopt refused an mmap threshold of %d bytes", HEAP_POLICY_MMAP_THRESHOLD);
    }
#else
    (void)err;
    (void)errlen;
#endif
    return 0;
}
