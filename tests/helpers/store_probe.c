/*
 * tests/helpers/store_probe.c — finding a lease through store_scan (see
 * store_probe.h). Single-threaded, like the store.
 */
#include "tests/helpers/store_probe.h"

#include <string.h>

typedef struct lease_probe {
    const char *group;
    size_t group_len;
    uint64_t id;
    int found;
    uint64_t deadline_ms;
    msg_owned_t *out;
} lease_probe_t;

static int probe_entry(void *ctx, const store_entry_t *e)
{
    lease_probe_t *p = ctx;
    const msg_t *m = e->m;
    if (e->range != STORE_LEASE || m->id != p->id || m->group.len != p->group_len ||
        memcmp(m->group.ptr, p->group, p->group_len) != 0) {
        return 0;
    }
    p->found = 1;
    p->deadline_ms = e->deadline_ms;
    if (p->out != NULL) {
        msg_owned_copy(p->out, m);
    }
    return 1;
}

int probe_lease_get(store_t *s, const char *group, size_t group_len, uint64_t id, msg_owned_t *out,
                    uint64_t *deadline_ms, char *err, size_t errlen)
{
    lease_probe_t p = { group, group_len, id, 0, 0, out };
    if (store_scan(s, probe_entry, &p, err, errlen) != 0) {
        return -1;
    }
    if (p.found && deadline_ms != NULL) {
        *deadline_ms = p.deadline_ms;
    }
    return p.found;
}
