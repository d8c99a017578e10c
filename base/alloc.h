/*
 * base/alloc.h — the process allocator: one out-of-memory policy for all of
 * Hourglass.
 *
 * Policy: an allocation that fails is not an error a caller can handle
 * sensibly in a server that holds promises (a half-built reply, a half-built
 * batch), so every allocation goes through these wrappers and out-of-memory
 * aborts the process with one line on stderr naming the size:
 *     hourglass: out of memory allocating 1048576 bytes
 * Nothing else in the tree calls malloc and checks for NULL. Memory limits
 * that clients can reach (query buffers, replies, pulls) are enforced as
 * byte budgets before allocating, never by running out.
 *
 * Tests may install a hook that runs before the abort (to log, or to prove
 * the path is taken in a child process); it must not return normally if it
 * wants to keep the process alive — longjmp or _exit.
 *
 * Thread-safe (the hook is set once, before threads start).
 */
#ifndef HG_BASE_ALLOC_H
#define HG_BASE_ALLOC_H

#include <stddef.h>

/* malloc / calloc / realloc that never return NULL. n == 0 returns a valid
 * unique pointer (one byte is allocated) so callers never special-case it. */
void *xmalloc(size_t n);
void *xcalloc(size_t count, size_t size);
void *xrealloc(void *p, size_t n);

/* A NUL-terminated copy of s (s must not be NULL). */
char *xstrdup(const char *s);

/* A copy of the first n bytes of s plus a NUL (s may hold NULs). */
char *xstrndup(const char *s, size_t n);

/* A copy of n bytes (no NUL added); n == 0 still returns a valid pointer. */
void *xmemdup(const void *p, size_t n);

/* Called with the size that could not be allocated, before the abort. NULL
 * restores the default (print and abort). For tests. */
void xalloc_set_oom_hook(void (*hook)(size_t n));

/* The out-of-memory path itself (prints, runs the hook, aborts). For code
 * that allocates through a library (LevelDB, libevent) and sees NULL. */
void xalloc_oom(size_t n) __attribute__((noreturn));

#endif
