/*
 * lib/producer.c — the producer half of libhourglass: SEND, pipelined
 * SENDs, and the delay-level helpers.
 *
 * hg_send is one client_call. hg_send_many writes every SEND of the batch in
 * one client_exchange (replies read while writing, see client.c) and matches
 * reply i to the i-th item sent: the broker answers in request order, also
 * when pipelining (docs/broker.md). When the connection breaks in the middle,
 * the items whose replies arrived keep their outcome and only the rest are
 * sent again (opts.resend_sends), so a broken batch costs at most the
 * duplicates of the SENDs that were in flight.
 *
 * Levels: hg_levels_t wraps levels/table.c's lvl_table_t; hg_level_for is
 * lvl_level_for on the given or the default table. Pure, thread-safe.
 * The client functions run on the caller's thread (one thread per client).
 */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include "lib/client.h"
#include "lib/transport.h"
#include "levels/table.h"

#include "base/alloc.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define PRODUCER_MAX_RESENDS HG_SEND_MAX_RESENDS /* reconnect-and-resend rounds per call */

/* The argv of one SEND, built in place: at most 8 arguments. */
typedef struct send_argv {
    const char *argv[8];
    size_t lens[8];
    size_t argc;
    char number[24];
} send_argv_t;

/* Check one message's arguments; 0, or -1 with why[whylen]. */
static int check_send(const char *topic, const char *key, const void *payload, size_t len, hg_delay_t delay, char *why,
                      size_t whylen)
{
    if (topic == NULL || topic[0] == '\0') {
        snprintf(why, whylen, "topic is %s", topic == NULL ? "NULL" : "empty");
        return -1;
    }
    if (key != NULL && key[0] == '\0') { /* FIND, REVOKE and DEDUP could never name it */
        snprintf(why, whylen, "key is empty (pass NULL for a message without one)");
        return -1;
    }
    if (payload == NULL && len > 0) {
        snprintf(why, whylen, "payload is NULL with length %zu", len);
        return -1;
    }
    switch (delay.kind) {
    case HG_DELAY_NONE:
    case HG_DELAY_MS:
    case HG_DELAY_AT:
        break;
    case HG_DELAY_LEVEL:
        if (delay.value > LVL_MAX_LEVELS) { /* hg_delay_level(-1) arrives as 2^64 - 1: show what was passed */
            snprintf(why, whylen, "level %" PRId64 " out of range 0..%d", (int64_t)delay.value, LVL_MAX_LEVELS);
            return -1;
        }
        break;
    default:
        snprintf(why, whylen, "unknown delay kind %d", (int)delay.kind);
        return -1;
    }
    return 0;
}

static void build_send(send_argv_t *s, const char *topic, const char *key, const void *payload, size_t len,
                       hg_delay_t delay, int dedup)
{
    static const char empty[1] = "";

    s->argc = 0;
    s->argv[s->argc] = "SEND";
    s->lens[s->argc++] = 4;
    s->argv[s->argc] = topic;
    s->lens[s->argc++] = strlen(topic);
    s->argv[s->argc] = payload != NULL ? payload : empty;
    s->lens[s->argc++] = len;
    if (key != NULL) {
        s->argv[s->argc] = "KEY";
        s->lens[s->argc++] = 3;
        s->argv[s->argc] = key;
        s->lens[s->argc++] = strlen(key);
    }
    if (delay.kind != HG_DELAY_NONE) {
        const char *word = delay.kind == HG_DELAY_LEVEL ? "LEVEL" : delay.kind == HG_DELAY_MS ? "DELAY" : "AT";
        snprintf(s->number, sizeof(s->number), "%" PRIu64, delay.value);
        s->argv[s->argc] = word;
        s->lens[s->argc++] = strlen(word);
        s->argv[s->argc] = s->number;
        s->lens[s->argc++] = strlen(s->number);
    }
    if (dedup) {
        s->argv[s->argc] = "DEDUP";
        s->lens[s->argc++] = 5;
    }
}

/* Read a SEND reply into id (HG_ID_MAX bytes, may be NULL); with dup (a
 * SEND … DEDUP) the reply is [id, duplicate] and *dup gets the flag. Returns
 * HG_OK, HG_ERR_SERVER or HG_ERR_PROTOCOL with why filled. */
static hg_err_t read_send_reply(const resp_reply_t *r, char *id, int *dup, char *why, size_t whylen)
{
    if (dup != NULL && r->type != RESP_REPLY_ERROR) {
        if (r->type != RESP_REPLY_ARRAY || r->count != 2 || r->elements[1].type != RESP_REPLY_INTEGER) {
            snprintf(why, whylen, "SEND ... DEDUP answered %s, want [id, duplicate]", resp_reply_type_name(r->type));
            return HG_ERR_PROTOCOL;
        }
        *dup = r->elements[1].integer != 0;
        r = &r->elements[0];
    }
    if (r->type == RESP_REPLY_ERROR) {
        snprintf(why, whylen, "%.*s", (int)(r->len > 250 ? 250 : r->len), r->str);
        return HG_ERR_SERVER;
    }
    if (r->type != RESP_REPLY_BULK && r->type != RESP_REPLY_STATUS) {
        snprintf(why, whylen, "SEND answered %s, want a message id (bulk)", resp_reply_type_name(r->type));
        return HG_ERR_PROTOCOL;
    }
    if (r->len == 0 || r->len >= HG_ID_MAX) {
        snprintf(why, whylen, "SEND answered an id of %zu bytes, want 1..%d", r->len, HG_ID_MAX - 1);
        return HG_ERR_PROTOCOL;
    }
    if (id != NULL) {
        memcpy(id, r->str, r->len);
        id[r->len] = '\0';
    }
    return HG_OK;
}

hg_err_t hg_send(hg_client_t *c, const char *topic, const char *key, const void *payload, size_t len, hg_delay_t delay,
                 char *id_out)
{
    char why[HG_ERRMSG_MAX];
    resp_reply_t *r = NULL;
    send_argv_t s;
    hg_err_t e;

    if (id_out != NULL)
        id_out[0] = '\0';
    if (c == NULL)
        return HG_ERR_ARG;
    client_clear_error(c);
    if (check_send(topic, key, payload, len, delay, why, sizeof(why)) < 0)
        return client_fail(c, HG_ERR_ARG, "hg_send: %s", why);
    build_send(&s, topic, key, payload, len, delay, 0);
    e = client_call(c, s.argc, s.argv, s.lens, client_opts(c)->resend_sends, 0, 0, &r);
    if (e != HG_OK)
        return e;
    e = read_send_reply(r, id_out, NULL, why, sizeof(why));
    resp_reply_free(r);
    if (e != HG_OK)
        return client_fail(c, e, "%s", why);
    return HG_OK;
}

hg_err_t hg_send_many(hg_client_t *c, hg_send_item_t *items, size_t n, size_t *ok_count)
{
    size_t *pending, npending = 0, ok = 0;
    resp_reply_t **replies;
    buf_t req = BUF_INIT;
    hg_err_t first = HG_OK, e = HG_OK;
    int rounds = 0;

    if (ok_count != NULL)
        *ok_count = 0;
    if (c == NULL)
        return HG_ERR_ARG;
    client_clear_error(c);
    if (n == 0)
        return HG_OK;
    if (items == NULL)
        return client_fail(c, HG_ERR_ARG, "hg_send_many: items is NULL");

    pending = xcalloc(n, sizeof(*pending));
    replies = xcalloc(n, sizeof(*replies));
    for (size_t i = 0; i < n; i++) {
        hg_send_item_t *it = &items[i];
        it->id[0] = '\0';
        it->error[0] = '\0';
        it->duplicate = 0;
        if (it->dedup && (it->key == NULL || it->key[0] == '\0')) {
            snprintf(it->error, sizeof(it->error), "DEDUP needs a key");
            it->err = HG_ERR_ARG;
            continue;
        }
        if (check_send(it->topic, it->key, it->payload, it->payload_len, it->delay, it->error, sizeof(it->error)) < 0) {
            it->err = HG_ERR_ARG;
            continue;
        }
        it->err = HG_ERR_IO; /* until its reply arrives */
        pending[npending++] = i;
    }

    if (client_transport(c) != NULL && npending > 0) { /* another transport (lib/transport.h) */
        client_transport(c)->send_many(c, client_transport_state(c), items, n);
        npending = 0;
    }
    while (npending > 0) {
        size_t got = 0, keep = 0;

        buf_clear(&req);
        for (size_t k = 0; k < npending; k++) {
            hg_send_item_t *it = &items[pending[k]];
            send_argv_t s;
            build_send(&s, it->topic, it->key, it->payload, it->payload_len, it->delay, it->dedup);
            resp_add_command(&req, s.argc, s.argv, s.lens);
        }
        e = client_ensure(c);
        if (e == HG_OK)
            e = client_exchange(c, req.data, req.len, npending, replies, &got, 0, 0);
        for (size_t k = 0; k < got; k++) {
            hg_send_item_t *it = &items[pending[k]];
            it->err =
                read_send_reply(replies[k], it->id, it->dedup ? &it->duplicate : NULL, it->error, sizeof(it->error));
            resp_reply_free(replies[k]);
        }
        /* The items without a reply stay pending, in order. */
        for (size_t k = got; k < npending; k++)
            pending[keep++] = pending[k];
        npending = keep;
        if (e == HG_OK || npending == 0)
            break;
        if (e != HG_ERR_IO || !client_opts(c)->resend_sends || ++rounds > PRODUCER_MAX_RESENDS)
            break;
    }
    for (size_t k = 0; k < npending; k++) {
        hg_send_item_t *it = &items[pending[k]];
        it->err = e != HG_OK ? e : HG_ERR_IO;
        snprintf(it->error, sizeof(it->error), "%s", hg_client_errmsg(c));
    }
    for (size_t i = 0; i < n; i++) {
        if (items[i].err == HG_OK)
            ok++;
        else if (first == HG_OK) {
            first = items[i].err;
            client_fail(c, first, "item %zu: %s", i, items[i].error);
        }
    }
    buf_free(&req);
    free(pending);
    free(replies);
    if (ok_count != NULL)
        *ok_count = ok;
    return first;
}

/* ------------------------------------------------------------------------
 * Levels
 * ------------------------------------------------------------------------ */

struct hg_levels {
    lvl_table_t table;
};

hg_err_t hg_levels_parse(const char *spec, hg_levels_t **out, hg_error_t *err)
{
    hg_levels_t *l;
    char why[HG_ERRMSG_MAX - 32];

    if (out == NULL) {
        client_error_fill(err, HG_ERR_ARG, "hg_levels_parse: out is NULL");
        return HG_ERR_ARG;
    }
    *out = NULL;
    l = xcalloc(1, sizeof(*l));
    if (spec == NULL || lvl_table_parse(spec, &l->table, why, sizeof(why)) < 0) {
        client_error_fill(err, HG_ERR_ARG, "bad level table: %s", spec == NULL ? "spec is NULL" : why);
        free(l);
        return HG_ERR_ARG;
    }
    client_error_fill(err, HG_OK, "%s", "");
    *out = l;
    return HG_OK;
}

/* An integer element of a LEVELS row, or -1. */
static long long row_int(const resp_reply_t *row, size_t i)
{
    if (i >= row->count || row->elements[i].type != RESP_REPLY_INTEGER)
        return -1;
    return row->elements[i].integer;
}

hg_err_t hg_levels_fetch(hg_client_t *c, hg_levels_t **out)
{
    const char *argv[1] = { "LEVELS" };
    resp_reply_t *r = NULL;
    hg_levels_t *l;
    hg_err_t e;

    if (out != NULL)
        *out = NULL;
    if (c == NULL)
        return HG_ERR_ARG;
    client_clear_error(c);
    if (out == NULL)
        return client_fail(c, HG_ERR_ARG, "hg_levels_fetch: out is NULL");
    e = client_call_checked(c, 1, argv, NULL, 1, &r);
    if (e != HG_OK)
        return e;
    if (r->type != RESP_REPLY_ARRAY || r->count == 0 || r->count > LVL_MAX_LEVELS) {
        e = client_fail(c, HG_ERR_PROTOCOL, "LEVELS answered %s of %zu, want an array of 1..%d levels",
                        resp_reply_type_name(r->type), r->count, LVL_MAX_LEVELS);
        resp_reply_free(r);
        return e;
    }
    l = xcalloc(1, sizeof(*l));
    l->table.count = (int)r->count;
    for (size_t i = 0; i < r->count; i++) {
        const resp_reply_t *row = &r->elements[i];
        long long level = -1, delay = -1;
        if (row->type == RESP_REPLY_ARRAY) {
            level = row_int(row, 0);
            delay = row_int(row, 1);
        }
        if (level != (long long)i + 1 || delay <= 0 || (uint64_t)delay <= l->table.delay_ms[i]) {
            e = client_fail(c, HG_ERR_PROTOCOL, "LEVELS row %zu is not [level %zu, increasing delay_ms, ...]", i,
                            i + 1);
            free(l);
            resp_reply_free(r);
            return e;
        }
        l->table.delay_ms[i + 1] = (uint64_t)delay;
    }
    resp_reply_free(r);
    *out = l;
    return HG_OK;
}

int hg_levels_count(const hg_levels_t *l)
{
    return l != NULL ? l->table.count : 0;
}

uint64_t hg_levels_delay_ms(const hg_levels_t *l, int level)
{
    if (l == NULL || level < 1 || level > l->table.count)
        return 0;
    return l->table.delay_ms[level];
}

void hg_levels_free(hg_levels_t *l)
{
    free(l);
}

int hg_level_for(const hg_levels_t *l, uint64_t timeout_ms, hg_round_t mode)
{
    lvl_table_t def;
    const lvl_table_t *t = l != NULL ? &l->table : NULL;

    if (t == NULL) {
        lvl_table_default(&def);
        t = &def;
    }
    return lvl_level_for(t, timeout_ms, mode == HG_ROUND_NEAREST ? LVL_ROUND_NEAREST : LVL_ROUND_UP);
}

/* SEND … KEY key DEDUP: the reply is [id, duplicate] (docs/protocol.md). */
hg_err_t hg_send_dedup(hg_client_t *c, const char *topic, const char *key, const void *payload, size_t len,
                       hg_delay_t delay, char *id_out, int *duplicate)
{
    char why[HG_ERRMSG_MAX];
    resp_reply_t *r = NULL;
    send_argv_t s;
    int dup = 0;
    hg_err_t e;

    if (id_out != NULL)
        id_out[0] = '\0';
    if (duplicate != NULL)
        *duplicate = 0;
    if (c == NULL)
        return HG_ERR_ARG;
    client_clear_error(c);
    if (key == NULL || key[0] == '\0')
        return client_fail(c, HG_ERR_ARG, "hg_send_dedup: key is %s (DEDUP deduplicates by topic and key)",
                           key == NULL ? "NULL" : "empty");
    if (check_send(topic, key, payload, len, delay, why, sizeof(why)) < 0)
        return client_fail(c, HG_ERR_ARG, "hg_send_dedup: %s", why);
    build_send(&s, topic, key, payload, len, delay, 1);
    e = client_call(c, s.argc, s.argv, s.lens, client_opts(c)->resend_sends, 0, 0, &r);
    if (e != HG_OK)
        return e;
    e = read_send_reply(r, id_out, &dup, why, sizeof(why));
    resp_reply_free(r);
    if (e != HG_OK)
        return client_fail(c, e, "%s", why);
    if (duplicate != NULL)
        *duplicate = dup;
    return HG_OK;
}
