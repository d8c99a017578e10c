/*
 * lib/rmq_route.c — where a delayed message goes first on RabbitMQ: the
 * level plan of a delay (the broker's greedy chain, levels/table.h) mapped
 * onto the exchanges of docs/rabbitmq.md, and the remainder below the
 * smallest level, which waits first in the remainder queues (rmq.h).
 *
 *   none / 0        hg.due, the final routing key
 *   LEVEL n         hg.levels with hg-level n, the final key (n's whole TTL)
 *   DELAY d         the plan's whole levels: the first one on hg.levels,
 *                   the final key when it is the only one, else "hop" with
 *                   the rest in hg-plan (the router takes the later ones);
 *                   a remainder below the smallest level (the plan's last
 *                   hop when it waits less than its level) goes first
 *                   through the remainder queues instead, as the binary
 *                   digits of its milliseconds
 *
 * Never early: every hop waits at least its TTL. Pure functions on
 * caller-owned values: any thread.
 */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include "lib/rmq.h"

#include <inttypes.h>
#include <stdio.h>

uint64_t rmq_remainder_top(const lvl_table_t *t)
{
    uint64_t top = 0;
    if (t->count < 1)
        return 0;
    for (uint64_t b = 1; b < t->delay_ms[1] && top < (UINT64_C(1) << (RMQ_REM_MAX_BITS - 1)); b <<= 1)
        top = b;
    return top;
}

int rmq_route_delay(const lvl_table_t *t, hg_delay_t delay, const char *dest, uint64_t now, rmq_out_t *out,
                    char *plan_buf, size_t plan_len, char *why, size_t whylen)
{
    uint8_t levels[LVL_MAX_HOPS];
    uint64_t ms = 0;
    int hops = 0;

    out->exchange = RMQ_EX_DUE;
    out->routing_key = dest;
    out->level = 0;
    out->plan = NULL;
    out->dest = NULL;
    out->remainder_ms = out->remainder_top = 0;
    out->due_ms = now;
    switch (delay.kind) {
    case HG_DELAY_NONE:
        return 0;
    case HG_DELAY_LEVEL:
        if (delay.value == 0)
            return 0;
        if (delay.value > (uint64_t)t->count) {
            snprintf(why, whylen, "LEVEL must be 0..%d (levels are 1..%d; 0: no delay), got %" PRIu64, t->count,
                     t->count, delay.value);
            return -1;
        }
        out->exchange = RMQ_EX_LEVELS;
        out->level = (int)delay.value;
        out->due_ms = now + t->delay_ms[delay.value];
        return 0;
    case HG_DELAY_MS:
        ms = delay.value;
        break;
    case HG_DELAY_AT:
        ms = delay.value > now ? delay.value - now : 0;
        break;
    }
    if (ms == 0)
        return 0;
    if (lvl_chain_plan(t, ms, RMQ_MAX_DELAY_MS, levels, LVL_MAX_HOPS, &hops, why, whylen) < 0)
        return -1;
    out->due_ms = now + ms;
    /* The plan's last hop may wait only a remainder below the smallest level
     * (lvl_hop_ms): a RabbitMQ level queue waits its whole TTL, so that
     * remainder goes first through the remainder queues instead, as a sum
     * of fixed TTLs (its binary digits): exact, never early. */
    if (lvl_plan_total(t, levels, hops) > ms && rmq_remainder_top(t) > 0) {
        hops--;
        out->remainder_ms = ms - lvl_plan_total(t, levels, hops);
        out->remainder_top = rmq_remainder_top(t);
    }
    if (hops == 0)
        return 0; /* the remainder alone, then hg.due */
    out->exchange = RMQ_EX_LEVELS;
    out->level = levels[0];
    if (hops > 1) {
        size_t used = 0;
        plan_buf[0] = '\0';
        for (int i = 1; i < hops && used + 8 < plan_len; i++)
            used += (size_t)snprintf(plan_buf + used, plan_len - used, i > 1 ? ",%u" : "%u", levels[i]);
        out->routing_key = RMQ_RK_HOP;
        out->plan = plan_buf;
        out->dest = dest;
    }
    return 0;
}
