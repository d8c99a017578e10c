/*
 * tests/helpers/store_probe.h — looking into a store from a test through its
 * public reading call (store_scan), for assertions on where a message is.
 *
 * Slow (a scan of the whole store per call) and for tests only: the store
 * itself has no "get a lease" call, since nothing in the broker needs one.
 */
#ifndef HG_TESTS_STORE_PROBE_H
#define HG_TESTS_STORE_PROBE_H

#include <stddef.h>
#include <stdint.h>

#include "levels/store.h"

/* Find group's lease of id: 1 with *out (an owned copy, free with
 * msg_owned_free; out may be NULL) and *deadline_ms (may be NULL), 0 when
 * there is none, -1 when the scan fails (err). Commits what is pending first,
 * like every store read. */
int probe_lease_get(store_t *s, const char *group, size_t group_len, uint64_t id, msg_owned_t *out,
                    uint64_t *deadline_ms, char *err, size_t errlen);

#endif
