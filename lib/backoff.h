/*
 * lib/backoff.h — capped exponential backoff with jitter (internal part).
 *
 * The public half (hg_backoff_t, hg_backoff_default, hg_backoff_delay) is in
 * <hourglass/hourglass.h>; this header adds what the library uses inside:
 * option checking and the default random source. Pure logic; thread-safe.
 */
#ifndef HG_LIB_BACKOFF_H
#define HG_LIB_BACKOFF_H

#include "include/hourglass/hourglass.h"

#include <stddef.h>
#include <stdint.h>

/* Check a backoff's fields: factor 1.0..1000, jitter 0..1, cap >= base,
 * attempts >= 0. what names it in messages ("retry", "reconnect").
 * Returns 0, or -1 with err[errlen] e.g. "retry: factor 0.5 out of range
 * 1.0..1000". */
int backoff_check(const hg_backoff_t *b, const char *what, char *err, size_t errlen);

/* The default random source (hg_random_fn): a per-thread splitmix64 seeded
 * from the clock, the thread and a counter. Not for cryptography. */
uint64_t backoff_random(void *unused);

/* Map 64 random bits to a double uniform in [0, 1). */
double backoff_unit(uint64_t bits);

/* The most the first n delays of b (attempts 0 .. n-1) can add up to, in
 * ms: the sum of their raw delays (jitter only shortens), with the same
 * clamping as hg_backoff_delay. What the pauses between n + 1 reconnect
 * attempts can cost (hg_client_send_bound_ms). */
uint64_t backoff_total_ms(const hg_backoff_t *b, unsigned n);

#endif
