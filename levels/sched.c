/*
 * levels/sched.c — due processing, lease expiry and the retry/DLQ policy (see sched.h).
 *
 * The scheduler holds no queue state of its own: the store keeps exact level
 * heads and a lease floor in memory, so "what is due" is a few comparisons and
 * one seek per level that has due work. Nothing here polls or scans.
 *
 * The retry policy is a pure function (sched_retry_decide) that store_fail
 * calls back with the reconsume it reads while taking the lease, so a NACK
 * or an expiry looks its lease up once and never copies the message out.
 *
 * Threading: the store's thread (the broker's storage thread).
 */
#include "levels/sched.h"
#include "base/alloc.h"
#include "base/clock.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define SCHED_EXPIRE_CHUNK 256

struct sched {
    store_t *store;
    sched_clock_fn clock;
    void *clock_ctx;
};

uint64_t sched_wall_clock(void *ctx)
{
    (void)ctx;
    return clock_wall_ms();
}

sched_t *sched_new(store_t *s, sched_clock_fn clock, void *clock_ctx)
{
    sched_t *sc = xmalloc(sizeof *sc);
    sc->store = s;
    sc->clock = clock ? clock : sched_wall_clock;
    sc->clock_ctx = clock_ctx;
    return sc;
}

void sched_free(sched_t *sc)
{
    free(sc);
}

uint64_t sched_now(sched_t *sc)
{
    return sc->clock(sc->clock_ctx);
}

uint64_t sched_next_wakeup(sched_t *sc)
{
    uint64_t due = store_next_due(sc->store);
    uint64_t lease = store_next_lease_deadline(sc->store);
    return due < lease ? due : lease;
}

int sched_retry_level(const lvl_table_t *t, uint32_t reconsume, uint32_t max_reconsume, int *level)
{
    if (reconsume >= max_reconsume) {
        return 0;
    }
    uint64_t l = (uint64_t)SCHED_RETRY_BASE_LEVEL + reconsume;
    *level = l > (uint64_t)t->count ? t->count : (int)l;
    return 1;
}

store_fail_req_t sched_retry_decide(const lvl_table_t *t, uint32_t reconsume, uint32_t max_reconsume,
                                    const sched_nack_req_t *nack)
{
    store_fail_req_t d = { .reason = nack->reason, .reason_len = nack->reason_len };
    int level = 0;
    if (nack->to_dlq || !sched_retry_level(t, reconsume, max_reconsume, &level)) {
        d.to_dlq = 1;
    } else if (nack->level > 0) {
        d.level = nack->level;
    } else if (nack->delay_ms > 0) {
        d.delay_ms = nack->delay_ms;
    } else {
        d.level = level;
    }
    return d;
}

/* store_fail's decide for one failure: the policy with the NACK's overrides;
 * remembers where the message went, for the stats. */
typedef struct retry_ctx {
    const sched_nack_req_t *nack;
    int to_dlq;
} retry_ctx_t;

static void retry_decide(void *ctx, const lvl_table_t *levels, uint32_t reconsume, uint32_t max_reconsume,
                         store_fail_req_t *req)
{
    retry_ctx_t *c = ctx;
    *req = sched_retry_decide(levels, reconsume, max_reconsume, c->nack);
    c->to_dlq = req->to_dlq;
}

/* Fail one lease of group by policy (or req's explicit choice): one store_fail. */
static int fail_one(sched_t *sc, const char *group, size_t group_len, uint64_t id, const sched_nack_req_t *req,
                    uint64_t now, int *found, uint64_t *due, sched_stats_t *st, char *err, size_t errlen)
{
    retry_ctx_t c = { req, 0 };
    store_fail_req_t fr = {
        .reason = req->reason, .reason_len = req->reason_len, .decide = retry_decide, .decide_ctx = &c
    };
    if (store_fail(sc->store, group, group_len, id, &fr, now, found, due, err, errlen) != 0) {
        return -1;
    }
    if (*found && st) {
        if (c.to_dlq) {
            st->dead++;
        } else {
            st->retried++;
        }
    }
    return 0;
}

int sched_run(sched_t *sc, int max, sched_stats_t *st, int *more, char *err, size_t errlen)
{
    if (more) {
        *more = 0;
    }
    uint64_t now = sched_now(sc);
    int moved = 0, ready = 0;
    if (store_next_due(sc->store) <= now) {
        if (store_move_due(sc->store, now, max, &moved, &ready, err, errlen) != 0) {
            return -1;
        }
        if (st) {
            st->moved += (uint64_t)moved;
            st->ready += (uint64_t)ready;
        }
        if (more && store_next_due(sc->store) <= now) {
            *more = 1;
        }
    }
    if (store_next_lease_deadline(sc->store) > now) {
        return 0;
    }
    store_lease_ref_t refs[SCHED_EXPIRE_CHUNK];
    int done = 0;
    while (done < max && store_pending_bytes(sc->store) < STORE_BATCH_MAX_BYTES) {
        int want = max - done < SCHED_EXPIRE_CHUNK ? max - done : SCHED_EXPIRE_CHUNK;
        int n = 0;
        if (store_expired_leases(sc->store, now, refs, want, &n, err, errlen) != 0) {
            return -1;
        }
        for (int i = 0; i < n; i++) {
            sched_nack_req_t req = { .reason = SCHED_LEASE_EXPIRED_REASON,
                                     .reason_len = sizeof SCHED_LEASE_EXPIRED_REASON - 1 };
            int found = 0;
            uint64_t due = 0;
            if (fail_one(sc, refs[i].group, strlen(refs[i].group), refs[i].id, &req, now, &found, &due, st, err,
                         errlen) != 0) {
                return -1;
            }
            if (found && st) {
                st->expired++;
            }
        }
        done += n;
        if (n < want) {
            return 0;
        }
    }
    if (more) {
        *more = 1;
    }
    return 0;
}

int sched_nack(sched_t *sc, const char *group, size_t group_len, uint64_t id, const sched_nack_req_t *req, int *found,
               uint64_t *next_due_ms, sched_stats_t *st, char *err, size_t errlen)
{
    return fail_one(sc, group, group_len, id, req, sched_now(sc), found, next_due_ms, st, err, errlen);
}
