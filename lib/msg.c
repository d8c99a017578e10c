/*
 * lib/msg.c — finding and taking back messages from the library: GET, FIND
 * and REVOKE (hg_msg_*, <hourglass/hourglass.h>).
 *
 * The broker answers message maps: a RESP3 map after HELLO 3, a flat
 * [field, value, ...] array under RESP2 (docs/protocol.md); both are read the
 * same way here, as pairs. Fields that do not apply are absent; unknown
 * fields are ignored, so a newer broker's extra fields break nothing. A
 * reply of another shape is HG_ERR_PROTOCOL naming what came.
 *
 * Runs on the caller's thread (one thread per client).
 */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include "lib/client.h"

#include "base/alloc.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char *hg_msg_state_name(hg_msg_state_t state)
{
    static const char *names[] = { "gone", "delayed", "ready", "leased", "retry", "dlq", "done" };
    return (unsigned)state < sizeof(names) / sizeof(names[0]) ? names[state] : "unknown";
}

int hg_msg_state_live(hg_msg_state_t state)
{
    return state == HG_MSG_DELAYED || state == HG_MSG_READY || state == HG_MSG_LEASED || state == HG_MSG_RETRY;
}

static hg_msg_state_t state_parse(const resp_reply_t *v)
{
    for (int s = HG_MSG_GONE; s <= HG_MSG_DONE; s++) {
        const char *n = hg_msg_state_name((hg_msg_state_t)s);
        if (v->str != NULL && strlen(n) == v->len && memcmp(n, v->str, v->len) == 0)
            return (hg_msg_state_t)s;
    }
    return HG_MSG_GONE;
}

/* A map or a flat pair array: 1 with *pairs, else 0. */
static int as_pairs(const resp_reply_t *r, size_t *pairs)
{
    if ((r->type != RESP_REPLY_MAP && r->type != RESP_REPLY_ARRAY) || r->count % 2 != 0)
        return 0;
    *pairs = r->count / 2;
    return 1;
}

static int field_is(const resp_reply_t *k, const char *name)
{
    return k->str != NULL && strlen(name) == k->len && memcmp(k->str, name, k->len) == 0;
}

static uint64_t as_u64(const resp_reply_t *v)
{
    return v->type == RESP_REPLY_INTEGER && v->integer > 0 ? (uint64_t)v->integer : 0;
}

/* Copy a string value into dst[dstlen] (cut to fit, NUL-terminated); the length copied. */
static size_t copy_str(char *dst, size_t dstlen, const resp_reply_t *v)
{
    size_t n = v->str == NULL ? 0 : v->len < dstlen - 1 ? v->len : dstlen - 1;
    if (n > 0)
        memcpy(dst, v->str, n);
    dst[n] = '\0';
    return n;
}

static int read_group(const resp_reply_t *r, hg_msg_group_t *g)
{
    size_t pairs;
    if (!as_pairs(r, &pairs))
        return -1;
    memset(g, 0, sizeof(*g));
    for (size_t i = 0; i < pairs; i++) {
        const resp_reply_t *k = &r->elements[2 * i], *v = &r->elements[2 * i + 1];
        if (field_is(k, "group"))
            copy_str(g->group, sizeof(g->group), v);
        else if (field_is(k, "state"))
            g->state = state_parse(v);
        else if (field_is(k, "reconsume"))
            g->reconsume = (uint32_t)as_u64(v);
        else if (field_is(k, "deadline_ms"))
            g->deadline_ms = as_u64(v);
        else if (field_is(k, "level"))
            g->level = (int)as_u64(v);
        else if (field_is(k, "due_ms"))
            g->due_ms = as_u64(v);
        else if (field_is(k, "parked_ms"))
            g->parked_ms = as_u64(v);
        else if (field_is(k, "reason"))
            copy_str(g->reason, sizeof(g->reason), v);
    }
    return 0;
}

static void info_clear(hg_msg_info_t *m)
{
    free(m->payload);
    free(m->groups);
    memset(m, 0, sizeof(*m));
}

/* One message map into *m (zeroed first). 0, or -1 when it is not one. */
static int read_info(const resp_reply_t *r, hg_msg_info_t *m)
{
    size_t pairs;
    memset(m, 0, sizeof(*m));
    if (!as_pairs(r, &pairs))
        return -1;
    for (size_t i = 0; i < pairs; i++) {
        const resp_reply_t *k = &r->elements[2 * i], *v = &r->elements[2 * i + 1];
        if (field_is(k, "id"))
            copy_str(m->id, sizeof(m->id), v);
        else if (field_is(k, "state"))
            m->state = state_parse(v);
        else if (field_is(k, "topic"))
            copy_str(m->topic, sizeof(m->topic), v);
        else if (field_is(k, "key"))
            m->key_len = copy_str(m->key, sizeof(m->key), v);
        else if (field_is(k, "payload") && v->str != NULL) {
            m->payload = xmalloc(v->len + 1);
            memcpy(m->payload, v->str, v->len + 1);
            m->payload_len = v->len;
        } else if (field_is(k, "created_ms"))
            m->created_ms = as_u64(v);
        else if (field_is(k, "due_ms"))
            m->due_ms = as_u64(v);
        else if (field_is(k, "level"))
            m->level = (int)as_u64(v);
        else if (field_is(k, "hop_due_ms"))
            m->hop_due_ms = as_u64(v);
        else if (field_is(k, "hops_left"))
            m->hops_left = (int)as_u64(v);
        else if (field_is(k, "reconsume"))
            m->reconsume = (uint32_t)as_u64(v);
        else if (field_is(k, "groups") && v->type == RESP_REPLY_ARRAY && v->count > 0) {
            m->groups = xcalloc(v->count, sizeof(*m->groups));
            for (size_t g = 0; g < v->count; g++) {
                if (read_group(&v->elements[g], &m->groups[m->ngroups]) == 0)
                    m->ngroups++;
            }
        }
    }
    if (m->id[0] == '\0') {
        info_clear(m);
        return -1;
    }
    return 0;
}

void hg_msg_info_free(hg_msg_info_t *info)
{
    if (info == NULL)
        return;
    info_clear(info);
    free(info);
}

void hg_msg_infos_free(hg_msg_info_t *infos, size_t n)
{
    if (infos == NULL)
        return;
    for (size_t i = 0; i < n; i++)
        info_clear(&infos[i]);
    free(infos);
}

/* An id of exactly 16 hex digits: 0, or -1. */
static int check_id(const char *id)
{
    if (id == NULL || strlen(id) != 16)
        return -1;
    for (const char *p = id; *p; p++) {
        if (!((*p >= '0' && *p <= '9') || (*p >= 'a' && *p <= 'f') || (*p >= 'A' && *p <= 'F')))
            return -1;
    }
    return 0;
}

static hg_err_t check_topic_key(hg_client_t *c, const char *fn, const char *topic, const char *key)
{
    if (topic == NULL || topic[0] == '\0')
        return client_fail(c, HG_ERR_ARG, "%s: topic is %s", fn, topic == NULL ? "NULL" : "empty");
    if (key == NULL || key[0] == '\0')
        return client_fail(c, HG_ERR_ARG, "%s: key is %s", fn, key == NULL ? "NULL" : "empty");
    return HG_OK;
}

hg_err_t hg_msg_get(hg_client_t *c, const char *id, hg_msg_info_t **out)
{
    if (out != NULL)
        *out = NULL;
    if (c == NULL)
        return HG_ERR_ARG;
    client_clear_error(c);
    if (out == NULL)
        return client_fail(c, HG_ERR_ARG, "hg_msg_get: out is NULL");
    if (check_id(id) != 0)
        return client_fail(c, HG_ERR_ARG, "hg_msg_get: id '%.40s' is not 16 hex digits", id ? id : "(null)");
    const char *argv[2] = { "GET", id };
    size_t lens[2] = { 3, 16 };
    resp_reply_t *r;
    hg_err_t e = client_call_checked(c, 2, argv, lens, 1, &r);
    if (e != HG_OK)
        return e;
    hg_msg_info_t *m = xcalloc(1, sizeof(*m));
    if (read_info(r, m) != 0) {
        e = client_fail(c, HG_ERR_PROTOCOL, "GET answered %s, want a message map", resp_reply_type_name(r->type));
        free(m);
    } else {
        *out = m;
    }
    resp_reply_free(r);
    return e;
}

hg_err_t hg_msg_find(hg_client_t *c, const char *topic, const char *key, hg_msg_info_t **out, size_t *n)
{
    if (out != NULL)
        *out = NULL;
    if (n != NULL)
        *n = 0;
    if (c == NULL)
        return HG_ERR_ARG;
    client_clear_error(c);
    if (out == NULL || n == NULL)
        return client_fail(c, HG_ERR_ARG, "hg_msg_find: %s is NULL", out == NULL ? "out" : "n");
    hg_err_t e = check_topic_key(c, "hg_msg_find", topic, key);
    if (e != HG_OK)
        return e;
    const char *argv[3] = { "FIND", topic, key };
    size_t lens[3] = { 4, strlen(topic), strlen(key) };
    resp_reply_t *r;
    e = client_call_checked(c, 3, argv, lens, 1, &r);
    if (e != HG_OK)
        return e;
    if (r->type != RESP_REPLY_ARRAY) {
        e = client_fail(c, HG_ERR_PROTOCOL, "FIND answered %s, want an array of message maps",
                        resp_reply_type_name(r->type));
        resp_reply_free(r);
        return e;
    }
    hg_msg_info_t *infos = r->count ? xcalloc(r->count, sizeof(*infos)) : NULL;
    size_t got = 0;
    for (size_t i = 0; i < r->count; i++) {
        if (read_info(&r->elements[i], &infos[got]) != 0) {
            e = client_fail(c, HG_ERR_PROTOCOL, "FIND answered %s as element %zu, want a message map",
                            resp_reply_type_name(r->elements[i].type), i);
            hg_msg_infos_free(infos, got);
            resp_reply_free(r);
            return e;
        }
        got++;
    }
    resp_reply_free(r);
    *out = infos;
    *n = got;
    return HG_OK;
}

/* The REVOKE reply map into *res (may be NULL). */
static hg_err_t read_revoke(hg_client_t *c, const resp_reply_t *r, hg_revoke_result_t *res)
{
    hg_revoke_result_t tmp;
    size_t pairs;
    if (res == NULL)
        res = &tmp;
    memset(res, 0, sizeof(*res));
    if (!as_pairs(r, &pairs))
        return client_fail(c, HG_ERR_PROTOCOL, "REVOKE answered %s, want a map", resp_reply_type_name(r->type));
    for (size_t i = 0; i < pairs; i++) {
        const resp_reply_t *k = &r->elements[2 * i], *v = &r->elements[2 * i + 1];
        if (field_is(k, "revoked"))
            res->revoked = as_u64(v);
        else if (field_is(k, "delayed"))
            res->from_delayed = as_u64(v);
        else if (field_is(k, "ready"))
            res->from_ready = as_u64(v);
        else if (field_is(k, "refused_total"))
            res->refused_total = as_u64(v);
        else if (field_is(k, "refused") && v->type == RESP_REPLY_ARRAY) {
            for (size_t j = 0; j < v->count && res->nrefused < HG_REVOKE_REFUSED_MAX; j++) {
                const resp_reply_t *e = &v->elements[j];
                if (e->type != RESP_REPLY_ARRAY || e->count != 2)
                    continue;
                copy_str(res->refused[res->nrefused].id, HG_ID_MAX, &e->elements[0]);
                copy_str(res->refused[res->nrefused].reason, HG_ERRMSG_MAX, &e->elements[1]);
                res->nrefused++;
            }
        }
    }
    return HG_OK;
}

static hg_err_t revoke_call(hg_client_t *c, size_t argc, const char *const *argv, const size_t *lens,
                            hg_revoke_result_t *res)
{
    resp_reply_t *r;
    /* Not resent after a lost connection: a second REVOKE would find the
     * first one's work done and report 0, hiding what happened. */
    hg_err_t e = client_call_checked(c, argc, argv, lens, 0, &r);
    if (e != HG_OK)
        return e;
    e = read_revoke(c, r, res);
    resp_reply_free(r);
    return e;
}

hg_err_t hg_msg_revoke_id(hg_client_t *c, const char *id, hg_revoke_result_t *res)
{
    if (c == NULL)
        return HG_ERR_ARG;
    client_clear_error(c);
    if (check_id(id) != 0)
        return client_fail(c, HG_ERR_ARG, "hg_msg_revoke_id: id '%.40s' is not 16 hex digits", id ? id : "(null)");
    const char *argv[2] = { "REVOKE", id };
    size_t lens[2] = { 6, 16 };
    return revoke_call(c, 2, argv, lens, res);
}

hg_err_t hg_msg_revoke_key(hg_client_t *c, const char *topic, const char *key, hg_revoke_result_t *res)
{
    if (c == NULL)
        return HG_ERR_ARG;
    client_clear_error(c);
    hg_err_t e = check_topic_key(c, "hg_msg_revoke_key", topic, key);
    if (e != HG_OK)
        return e;
    const char *argv[4] = { "REVOKE", topic, "KEY", key };
    size_t lens[4] = { 6, strlen(topic), 3, strlen(key) };
    return revoke_call(c, 4, argv, lens, res);
}
