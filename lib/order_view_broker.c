/*
 * lib/order_view_broker.c — the order's timeout messages as the broker holds
 * them (contract: order_view_broker.h), through hg_msg_find; and
 * hg_msg_info_json (<hourglass/order_view.h>), the JSON of a looked-up
 * message that hourglass-cli and hourglass-console both print.
 *
 * Each message is summarised for people: its overall state, where it is
 * (the level it waits on, the group that holds it) and the detail that
 * explains it (the DLQ reason, the lease deadline, the hops left).
 *
 * Threads: the client's (one thread at a time).
 */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include "lib/order_view_broker.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "base/alloc.h"
#include "base/buf.h"
#include "base/json.h"
#include "include/hourglass/hourglass.h"
#include "base/clock.h"

/* The first group copy in state s, or NULL. */
static const hg_msg_group_t *group_in(const hg_msg_info_t *info, hg_msg_state_t s)
{
    for (size_t i = 0; i < info->ngroups; i++)
        if (info->groups[i].state == s)
            return &info->groups[i];
    return NULL;
}

/* "in 3m05s" / "3m05s ago" for a wall-clock time, into buf. */
static const char *when(uint64_t ms, char *buf, size_t len)
{
    char age[32];
    int64_t now = (int64_t)clock_wall_ms();
    int64_t d = (int64_t)ms - now;
    hg_order_age_text(d < 0 ? -d : d, age, sizeof age);
    snprintf(buf, len, d >= 0 ? "in %s" : "%s ago", age);
    return buf;
}

static void summarise(const hg_msg_info_t *info, const char *topic, hg_order_msg_t *m)
{
    const hg_msg_group_t *g = group_in(info, info->state);
    char t[48];

    memset(m, 0, sizeof *m);
    snprintf(m->id, sizeof m->id, "%s", info->id);
    snprintf(m->state, sizeof m->state, "%s", hg_msg_state_name(info->state));
    m->due_ms = info->due_ms;
    m->reconsume = info->reconsume;
    switch (info->state) {
    case HG_MSG_DELAYED:
        snprintf(m->where, sizeof m->where, "level %d", info->level);
        snprintf(m->detail, sizeof m->detail, "leaves the level at %" PRIu64 " ms, %d hop%s after it", info->hop_due_ms,
                 info->hops_left, info->hops_left == 1 ? "" : "s");
        break;
    case HG_MSG_READY:
        if (g != NULL)
            snprintf(m->where, sizeof m->where, "group %s", g->group);
        else
            snprintf(m->where, sizeof m->where, "topic %s (no group has taken it)", topic);
        break;
    case HG_MSG_LEASED:
        snprintf(m->where, sizeof m->where, "group %s", g != NULL ? g->group : "?");
        if (g != NULL)
            snprintf(m->detail, sizeof m->detail, "the lease ends %s", when(g->deadline_ms, t, sizeof t));
        break;
    case HG_MSG_RETRY:
        snprintf(m->where, sizeof m->where, "group %s", g != NULL ? g->group : "?");
        if (g != NULL && g->level > 0)
            snprintf(m->detail, sizeof m->detail, "retry %u on level %d, ready again at %" PRIu64 " ms", g->reconsume,
                     g->level, g->due_ms);
        else if (g != NULL)
            snprintf(m->detail, sizeof m->detail, "retry %u ready now", g->reconsume);
        break;
    case HG_MSG_DLQ:
        snprintf(m->where, sizeof m->where, "group %s", g != NULL ? g->group : "?");
        if (g != NULL)
            snprintf(m->detail, sizeof m->detail, "%s", g->reason);
        break;
    default:
        snprintf(m->where, sizeof m->where, "-");
        break;
    }
}

int view_broker_messages(struct hg_client *client, const char *topic, uint64_t order_id, hg_order_msg_t *msgs,
                         size_t max, size_t *n, char *err, size_t errlen)
{
    char key[24];
    hg_msg_info_t *infos = NULL;
    size_t count = 0;

    *n = 0;
    snprintf(key, sizeof key, "%" PRIu64, order_id);
    if (hg_msg_find(client, topic, key, &infos, &count) != HG_OK) {
        snprintf(err, errlen, "FIND %s %s: %s", topic, key, hg_client_errmsg(client));
        return -1;
    }
    for (size_t i = 0; i < count && *n < max; i++)
        summarise(&infos[i], topic, &msgs[(*n)++]);
    hg_msg_infos_free(infos, count);
    return 0;
}

char *hg_msg_info_json(const struct hg_msg_info *info)
{
    buf_t b = BUF_INIT;
    json_t j;

    if (info == NULL)
        return xstrdup("null");
    json_init(&j, &b);
    json_object_open(&j);
    json_kstr(&j, "id", info->id);
    json_kstr(&j, "state", hg_msg_state_name(info->state));
    if (info->state != HG_MSG_GONE) {
        json_kstr(&j, "topic", info->topic);
        json_key(&j, "key");
        json_strn(&j, info->key, info->key_len);
        if (info->payload != NULL) {
            json_key(&j, "payload");
            json_strn(&j, info->payload, info->payload_len);
        }
        json_kuint_or_null(&j, "created_ms", info->created_ms);
        json_kuint_or_null(&j, "due_ms", info->due_ms);
        json_kuint(&j, "reconsume", info->reconsume);
        if (info->state == HG_MSG_DELAYED) {
            json_kint(&j, "level", info->level);
            json_kuint_or_null(&j, "hop_due_ms", info->hop_due_ms);
            json_kint(&j, "hops_left", info->hops_left);
        }
        json_key(&j, "groups");
        json_array_open(&j);
        for (size_t i = 0; i < info->ngroups; i++) {
            const hg_msg_group_t *g = &info->groups[i];
            json_object_open(&j);
            json_kstr(&j, "group", g->group);
            json_kstr(&j, "state", hg_msg_state_name(g->state));
            json_kuint(&j, "reconsume", g->reconsume);
            if (g->state == HG_MSG_LEASED)
                json_kuint_or_null(&j, "deadline_ms", g->deadline_ms);
            if (g->state == HG_MSG_RETRY) {
                json_kint(&j, "level", g->level);
                json_kuint_or_null(&j, "due_ms", g->due_ms);
            }
            if (g->state == HG_MSG_DLQ) {
                json_kstr(&j, "reason", g->reason);
                json_kuint_or_null(&j, "parked_ms", g->parked_ms);
            }
            json_object_close(&j);
        }
        json_array_close(&j);
    }
    json_object_close(&j);
    char *out = xstrdup(buf_cstr(&b));
    buf_free(&b);
    return out;
}
