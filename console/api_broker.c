/*
 * console/api_broker.c — the broker's half of /api (contract: console.h;
 * the documents: docs/console.md):
 *
 *   GET  /api/overview                    the sampler's figures
 *   GET  /api/dlq                         groups with their DLQ depth (GROUP LIST)
 *   GET  /api/dlq/{group}[?after=ID&count=N]   one page, "next" when there is more
 *   GET  /api/dlq/{group}/{id}            one parked message
 *   POST /api/dlq/{group}/requeue         id=… (repeated) or all=1
 *   POST /api/dlq/{group}/drop            id=… (repeated) or all=1&confirm=N
 *                                         (N must be the DLQ's current depth: 409 otherwise)
 *   GET  /api/msg/{id}                    GET: the message and its state
 *   GET  /api/msg?topic=T&key=K           FIND
 *   POST /api/msg/{id}/revoke             REVOKE id
 *   POST /api/msg/revoke                  topic=T&key=K: REVOKE T KEY K
 *   GET  /api/topics[?after=T]            TOPICS, a page of TOPICS_PAGE; "next" when there is more
 *   POST /api/topics/{topic}/delete       TOPIC DEL topic, [purge=1]: PURGE (what a topic without
 *                                         groups keeps for retention goes first)
 *   POST /api/backup                      name=N: BACKUP N (the copy runs on; the
 *                                         overview shows how it ends)
 *
 * A {group} or {topic} segment may be left empty, the name given as the
 * parameter group or topic instead (the page of one group: GET
 * /api/dlq?group=G): a name that is "." or ".." cannot be a path segment,
 * browsers resolve it away in any percent-encoding.
 *
 * Every broker command runs on the session's connection, as the user; every
 * POST is audited with the user and what it changed.
 *
 * Threads: the event loop's only.
 */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include "console/console.h"

#include <ctype.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/queue.h>

#include <event2/keyvalq_struct.h>

#include "base/json.h"

#define DLQ_PAGE_DEFAULT 50
#define DLQ_PAGE_MAX     500
#define DLQ_IDS_MAX      1000 /* ids in one requeue / drop */
#define TOPICS_PAGE      200

int api_broker_failure(request_t *r, hg_err_t e)
{
    if (e == HG_OK)
        return 0;
    const char *msg = hg_client_errmsg(r->s->client);
    int status = strncmp(msg, "NOPERM", 6) == 0                       ? 403
                 : strncmp(msg, "NOAUTH", 6) == 0 || e == HG_ERR_AUTH ? 401 /* the user was removed */
                 : e == HG_ERR_SERVER                                 ? 400
                                                                      : 502;
    http_error(r, status, "broker: %s", msg);
    return status;
}

static int is_id(const char *s)
{
    if (s == NULL || strlen(s) != 16)
        return 0;
    for (const char *p = s; *p; p++)
        if (!isxdigit((unsigned char)*p))
            return 0;
    return 1;
}

/* Run a command on the session's client; replies with the failure itself. */
static hg_reply_t *run(request_t *r, int argc, const char *const *argv)
{
    hg_reply_t *reply = NULL;
    hg_err_t e = hg_client_command(r->s->client, argc, argv, NULL, &reply);
    if (e != HG_OK) {
        api_broker_failure(r, e);
        return NULL;
    }
    return reply;
}

/* A reply as JSON: integers, strings, arrays; a flat name/value list when
 * pairs is set (GROUP LIST entries). */
static void reply_json(json_t *j, const hg_reply_t *v)
{
    size_t len;
    const char *s;
    switch (hg_reply_type(v)) {
    case HG_REPLY_INTEGER:
    case HG_REPLY_BOOL:
        json_int(j, hg_reply_integer(v));
        break;
    case HG_REPLY_NIL:
        json_null(j);
        break;
    case HG_REPLY_ARRAY:
    case HG_REPLY_SET:
    case HG_REPLY_PUSH:
        json_array_open(j);
        for (size_t i = 0; i < hg_reply_count(v); i++)
            reply_json(j, hg_reply_element(v, i));
        json_array_close(j);
        break;
    default:
        s = hg_reply_str(v, &len);
        json_strn(j, s != NULL ? s : "", s != NULL ? len : 0);
    }
}

static void pairs_json(json_t *j, const hg_reply_t *entry)
{
    json_object_open(j);
    for (size_t k = 0; k + 1 < hg_reply_count(entry); k += 2) {
        size_t len;
        const char *key = hg_reply_str(hg_reply_element(entry, k), &len);
        char name[64];
        snprintf(name, sizeof name, "%.*s", (int)(key != NULL ? len : 0), key != NULL ? key : "");
        for (char *p = name; *p; p++)
            if (*p == '-')
                *p = '_';
        json_key(j, name);
        reply_json(j, hg_reply_element(entry, k + 1));
    }
    json_object_close(j);
}

/* One DLQ LIST entry [id, key, payload, reconsume, reason, parked_ms]. */
static int dlq_entry_json(json_t *j, const hg_reply_t *e)
{
    static const char *const names[6] = { "id", "key", "payload", "reconsume", "reason", "parked_ms" };
    if (hg_reply_count(e) < 6)
        return -1;
    json_object_open(j);
    for (size_t i = 0; i < 6; i++) {
        json_key(j, names[i]);
        reply_json(j, hg_reply_element(e, i));
    }
    json_object_close(j);
    return 0;
}

static void entry_id(const hg_reply_t *e, char *id, size_t len)
{
    size_t n;
    const char *s = hg_reply_count(e) > 0 ? hg_reply_str(hg_reply_element(e, 0), &n) : NULL;
    snprintf(id, len, "%.*s", s != NULL ? (int)n : 0, s != NULL ? s : "");
}

static long long dlq_len(request_t *r, const char *group)
{
    const char *argv[3] = { "DLQ", "LEN", group };
    hg_reply_t *reply = run(r, 3, argv);
    if (reply == NULL)
        return -1;
    long long n = hg_reply_integer(reply);
    hg_reply_free(reply);
    return n;
}

static void dlq_groups(request_t *r)
{
    const char *argv[2] = { "GROUP", "LIST" };
    hg_reply_t *reply = run(r, 2, argv);
    if (reply == NULL)
        return;
    json_reply_t out;
    json_t *j = json_reply_open(&out);
    json_key(j, "groups");
    json_array_open(j);
    for (size_t i = 0; i < hg_reply_count(reply); i++)
        pairs_json(j, hg_reply_element(reply, i));
    json_array_close(j);
    json_reply_send(r, 200, &out);
    hg_reply_free(reply);
}

/* Does the DLQ of group hold an entry after id? (A failure reads as no.) */
static int dlq_has_after(request_t *r, const char *group, const char *id)
{
    const char *argv[7] = { "DLQ", "LIST", group, "COUNT", "1", "AFTER", id };
    hg_reply_t *reply = NULL;
    int more = hg_client_command(r->s->client, 7, argv, NULL, &reply) == HG_OK && hg_reply_count(reply) > 0;
    hg_reply_free(reply);
    return more;
}

static void dlq_page(request_t *r, const char *group)
{
    const char *after = http_param(r, "after"), *count_text = http_param(r, "count");
    long count = DLQ_PAGE_DEFAULT;
    char ask[24];
    if (after != NULL && after[0] != '\0' && !is_id(after)) {
        http_error(r, 400, "after: '%.40s' is not a message id (16 hex digits)", after);
        return;
    }
    if (count_text != NULL) {
        char *end;
        count = strtol(count_text, &end, 10);
        if (*end != '\0' || count < 1 || count > DLQ_PAGE_MAX) {
            http_error(r, 400, "count: '%.20s' is not a number 1..%d", count_text, DLQ_PAGE_MAX);
            return;
        }
    }
    long long total = dlq_len(r, group);
    if (total < 0)
        return;
    snprintf(ask, sizeof ask, "%ld", count + 1); /* one more: is there a next page? */
    const char *argv[7] = { "DLQ", "LIST", group, "COUNT", ask, "AFTER", after };
    hg_reply_t *reply = run(r, after != NULL && after[0] ? 7 : 5, argv);
    if (reply == NULL)
        return;
    json_reply_t out;
    json_t *j = json_reply_open(&out);
    json_kstr(j, "group", group);
    json_kint(j, "total", total);
    json_key(j, "messages");
    json_array_open(j);
    size_t n = hg_reply_count(reply), shown = n > (size_t)count ? (size_t)count : n;
    char last[64] = "";
    for (size_t i = 0; i < shown; i++) {
        dlq_entry_json(j, hg_reply_element(reply, i));
        entry_id(hg_reply_element(reply, i), last, sizeof last);
    }
    json_array_close(j);
    /* A short page is the DLQ's end, or the broker's byte budget for one
     * reply (max-pull-bytes: 16 of 1 MiB messages): ask whether one follows. */
    int more = n > (size_t)count || (n > 0 && dlq_has_after(r, group, last));
    json_kstr(j, "next", more ? last : NULL);
    json_reply_send(r, 200, &out);
    hg_reply_free(reply);
}

static void dlq_one(request_t *r, const char *group, const char *id)
{
    char before[24];
    if (!is_id(id)) {
        http_error(r, 400, "'%.40s' is not a message id (16 hex digits)", id);
        return;
    }
    uint64_t v = strtoull(id, NULL, 16);
    snprintf(before, sizeof before, "%016" PRIx64, v - 1);
    const char *argv[7] = { "DLQ", "LIST", group, "COUNT", "1", "AFTER", before };
    hg_reply_t *reply = run(r, v > 0 ? 7 : 5, argv);
    if (reply == NULL)
        return;
    char got[64] = "";
    if (hg_reply_count(reply) == 1)
        entry_id(hg_reply_element(reply, 0), got, sizeof got);
    if (strcasecmp(got, id) != 0) {
        http_error(r, 404, "no message %s in the DLQ of group %s", id, group);
    } else {
        buf_t b = BUF_INIT;
        json_t j;
        json_init(&j, &b);
        dlq_entry_json(&j, hg_reply_element(reply, 0));
        http_json(r, 200, &b);
        buf_free(&b);
    }
    hg_reply_free(reply);
}

/* requeue / drop all: a job (job.c), after the DLQ's depth (the job's
 * wait, and a drop's confirmation). */
static void dlq_move_all(request_t *r, const char *group, const char *verb)
{
    int drop = strcmp(verb, "DROP") == 0;
    long long depth = dlq_len(r, group);
    if (depth < 0)
        return;
    const char *confirm = http_param(r, "confirm");
    char *end = NULL;
    if (drop && (confirm == NULL || confirm[0] == '\0' || strtoll(confirm, &end, 10) != depth || *end != '\0')) {
        console_audit(r, "refused dlq drop all group=%s: confirm=%s but the DLQ holds %lld", group,
                      confirm ? confirm : "-", depth);
        http_error(r, 409, "the DLQ of %s holds %lld messages; confirm=%lld drops them all", group, depth, depth);
        return;
    }
    const char *argv[4] = { "DLQ", verb, group, "ALL" };
    job_spec_t spec;
    if (job_spec_init(&spec, "group", group, drop ? "dropped" : "requeued",
                      hg_dlq_all_read_timeout(hg_client_read_timeout(r->s->client), depth), 4, argv) != 0) {
        http_error(r, 400, "group: longer than %d bytes", HG_NAME_MAX - 1);
        return;
    }
    snprintf(spec.what, sizeof spec.what, "%s all %lld of the DLQ of group %s", drop ? "drop" : "requeue", depth,
             group);
    snprintf(spec.audit, sizeof spec.audit, "dlq %s all group=%s", drop ? "drop" : "requeue", group);
    job_start(r, &spec);
}

/* requeue / drop: ids or all. */
static void dlq_move(request_t *r, const char *group, const char *verb)
{
    int drop = strcmp(verb, "DROP") == 0;
    const char *all = http_param(r, "all");
    struct evkeyval *kv;
    size_t nids = 0;
    TAILQ_FOREACH(kv, &r->form, next)
    {
        if (strcmp(kv->key, "id") != 0)
            continue;
        if (!is_id(kv->value)) {
            http_error(r, 400, "id: '%.40s' is not a message id (16 hex digits)", kv->value);
            return;
        }
        nids++;
    }
    int is_all = all != NULL && strcmp(all, "1") == 0;
    if ((nids > 0) == is_all || nids > DLQ_IDS_MAX) {
        http_error(r, 400, "give id=… (1..%d of them) or all=1, not both", DLQ_IDS_MAX);
        return;
    }
    if (is_all) {
        dlq_move_all(r, group, verb);
        return;
    }
    json_reply_t out;
    json_t *j = json_reply_open(&out);
    json_kstr(j, "group", group);
    long long moved = 0;
    json_key(j, "missing");
    json_array_open(j);
    TAILQ_FOREACH(kv, &r->form, next)
    {
        if (strcmp(kv->key, "id") != 0)
            continue;
        const char *argv[4] = { "DLQ", verb, group, kv->value };
        hg_reply_t *reply = run(r, 4, argv);
        if (reply == NULL) {
            json_reply_drop(&out);
            console_audit(r, "dlq %s group=%s failed after %lld moved", drop ? "drop" : "requeue", group, moved);
            return;
        }
        if (hg_reply_integer(reply) > 0)
            moved++;
        else
            json_str(j, kv->value);
        hg_reply_free(reply);
    }
    json_array_close(j);
    console_audit(r, "dlq %s group=%s ids=%zu moved=%lld", drop ? "drop" : "requeue", group, nids, moved);
    json_kint(j, drop ? "dropped" : "requeued", moved);
    json_reply_send(r, 200, &out);
}

/* The group or topic name of a path: its segment i, or, when that segment
 * is empty or missing, the parameter key (query or form). A name that is "."
 * or ".." cannot travel as a path segment (browsers resolve dot segments,
 * percent-encoded or not), so the page sends those this way:
 * /api/dlq//requeue with group=.. in the form. NULL (replied 400) when
 * neither gives a name. */
static const char *path_name(request_t *r, int i, const char *key)
{
    const char *name = i < r->nparts && r->parts[i][0] != '\0' ? r->parts[i] : http_param(r, key);
    if (name == NULL || name[0] == '\0') {
        http_error(r, 400, "%s: empty (a %s named . or .. is given as the parameter %s, its path segment left empty)",
                   key, key, key);
        return NULL;
    }
    return name;
}

static int api_dlq(request_t *r)
{
    int move =
        r->nparts == 3 && r->is_post && (strcmp(r->parts[2], "requeue") == 0 || strcmp(r->parts[2], "drop") == 0);
    const char *group;
    if (!move && (r->is_post || r->nparts > 3))
        return 0;
    if (r->nparts == 1 && http_param(r, "group") == NULL)
        dlq_groups(r);
    else if ((group = path_name(r, 1, "group")) == NULL)
        ; /* answered */
    else if (move)
        dlq_move(r, group, strcmp(r->parts[2], "requeue") == 0 ? "REQUEUE" : "DROP");
    else if (r->nparts <= 2) /* GET /api/dlq/{group}, or /api/dlq?group=G */
        dlq_page(r, group);
    else
        dlq_one(r, group, r->parts[2]);
    return 1;
}

/* ------------------------------------------------------------------ messages */


static void msg_get(request_t *r, const char *id)
{
    hg_msg_info_t *m = NULL;
    if (!is_id(id)) {
        http_error(r, 400, "'%.40s' is not a message id (16 hex digits)", id);
        return;
    }
    hg_err_t e = hg_msg_get(r->s->client, id, &m);
    if (api_broker_failure(r, e) != 0)
        return;
    char *js = hg_msg_info_json(m);
    buf_t b = BUF_INIT;
    buf_append_str(&b, js);
    http_json(r, 200, &b);
    buf_free(&b);
    free(js);
    hg_msg_info_free(m);
}

static void msg_find(request_t *r)
{
    const char *topic = http_param(r, "topic"), *key = http_param(r, "key");
    hg_msg_info_t *ms = NULL;
    size_t n = 0;
    if (topic == NULL || topic[0] == '\0' || key == NULL) {
        http_error(r, 400, "give topic=… and key=…");
        return;
    }
    if (api_broker_failure(r, hg_msg_find(r->s->client, topic, key, &ms, &n)) != 0)
        return;
    buf_t b = BUF_INIT;
    buf_append_str(&b, "{\"messages\":[");
    for (size_t i = 0; i < n; i++) {
        char *js = hg_msg_info_json(&ms[i]);
        buf_printf(&b, "%s%s", i > 0 ? "," : "", js);
        free(js);
    }
    buf_append_str(&b, "]}");
    http_json(r, 200, &b);
    buf_free(&b);
    hg_msg_infos_free(ms, n);
}

static void msg_revoke(request_t *r, const char *id)
{
    const char *topic = http_param(r, "topic"), *key = http_param(r, "key");
    hg_revoke_result_t res;
    hg_err_t e;
    memset(&res, 0, sizeof res);
    if (id != NULL && !is_id(id)) {
        http_error(r, 400, "'%.40s' is not a message id (16 hex digits)", id);
        return;
    }
    if (id == NULL && (topic == NULL || topic[0] == '\0' || key == NULL)) {
        http_error(r, 400, "give topic=… and key=…");
        return;
    }
    e = id != NULL ? hg_msg_revoke_id(r->s->client, id, &res) : hg_msg_revoke_key(r->s->client, topic, key, &res);
    if (api_broker_failure(r, e) != 0)
        return;
    if (id != NULL)
        console_audit(r, "revoke id=%s revoked=%" PRIu64 " refused=%zu", id, res.revoked, res.nrefused);
    else
        console_audit(r, "revoke topic=%s key=%s revoked=%" PRIu64 " refused=%zu", topic, key, res.revoked,
                      res.nrefused);
    json_reply_t out;
    json_t *j = json_reply_open(&out);
    json_kuint(j, "revoked", res.revoked);
    json_kuint(j, "delayed", res.from_delayed);
    json_kuint(j, "ready", res.from_ready);
    json_key(j, "refused");
    json_array_open(j);
    for (size_t i = 0; i < res.nrefused && i < 16; i++) {
        json_object_open(j);
        json_kstr(j, "id", res.refused[i].id);
        json_kstr(j, "reason", res.refused[i].reason);
        json_object_close(j);
    }
    json_array_close(j);
    json_reply_send(r, 200, &out);
}

static int api_msg(request_t *r)
{
    if (r->nparts == 1 && !r->is_post)
        msg_find(r);
    else if (r->nparts == 2 && !r->is_post)
        msg_get(r, r->parts[1]);
    else if (r->nparts == 2 && r->is_post && strcmp(r->parts[1], "revoke") == 0)
        msg_revoke(r, NULL);
    else if (r->nparts == 3 && r->is_post && strcmp(r->parts[2], "revoke") == 0)
        msg_revoke(r, r->parts[1]);
    else
        return 0;
    return 1;
}


/* ------------------------------------------------------------------ topics */

/* One TOPICS entry as JSON: its counts, and its groups by name. */
static void topic_json(json_t *j, const hg_reply_t *entry)
{
    json_object_open(j);
    for (size_t k = 0; k + 1 < hg_reply_count(entry); k += 2) {
        size_t len;
        const char *key = hg_reply_str(hg_reply_element(entry, k), &len);
        const hg_reply_t *v = hg_reply_element(entry, k + 1);
        char name[32];
        snprintf(name, sizeof name, "%.*s", (int)(key != NULL ? len : 0), key != NULL ? key : "");
        json_key(j, name);
        if (strcmp(name, "groups") != 0) {
            reply_json(j, v);
            continue;
        }
        json_array_open(j); /* each group's map: only its name here (the DLQ view has the rest) */
        for (size_t g = 0; g < hg_reply_count(v); g++) {
            const hg_reply_t *map = hg_reply_element(v, g);
            for (size_t f = 0; f + 1 < hg_reply_count(map); f += 2) {
                const char *fk = hg_reply_str(hg_reply_element(map, f), &len);
                if (fk != NULL && len == 5 && memcmp(fk, "group", 5) == 0)
                    reply_json(j, hg_reply_element(map, f + 1));
            }
        }
        json_array_close(j);
    }
    json_object_close(j);
}

static void topics_page(request_t *r)
{
    const char *after = http_param(r, "after");
    char count[16];
    snprintf(count, sizeof count, "%d", TOPICS_PAGE);
    const char *argv[5] = { "TOPICS", "COUNT", count, "AFTER", after };
    hg_reply_t *reply = run(r, after != NULL && after[0] != '\0' ? 5 : 3, argv);
    if (reply == NULL)
        return;
    json_reply_t out;
    json_t *j = json_reply_open(&out);
    json_key(j, "topics");
    json_array_open(j);
    size_t n = hg_reply_count(reply);
    for (size_t i = 0; i < n; i++)
        topic_json(j, hg_reply_element(reply, i));
    json_array_close(j);
    json_key(j, "next"); /* the last name of a full page: the next page starts after it */
    const hg_reply_t *last = n == TOPICS_PAGE ? hg_reply_element(reply, n - 1) : NULL;
    size_t len = 0;
    const char *name = last != NULL && hg_reply_count(last) >= 2 ? hg_reply_str(hg_reply_element(last, 1), &len) : NULL;
    if (name != NULL)
        json_strn(j, name, len);
    else
        json_null(j);
    json_reply_send(r, 200, &out);
    hg_reply_free(reply);
}

static void topic_delete(request_t *r, const char *topic)
{
    const char *purge_text = http_param(r, "purge");
    int purge = purge_text != NULL && strcmp(purge_text, "1") == 0;
    if (purge_text != NULL && !purge && strcmp(purge_text, "0") != 0) {
        http_error(r, 400, "purge: '%.20s' is not 0 or 1", purge_text);
        return;
    }
    const char *argv[4] = { "TOPIC", "DEL", topic, "PURGE" };
    if (purge) {
        job_spec_t spec;
        if (job_spec_init(&spec, "topic", topic, "deleted",
                          hg_topic_purge_read_timeout(hg_client_read_timeout(r->s->client)), 4, argv) != 0) {
            http_error(r, 400, "topic: longer than %d bytes", HG_NAME_MAX - 1);
            return;
        }
        snprintf(spec.what, sizeof spec.what, "delete topic %s with its retained messages", topic);
        snprintf(spec.audit, sizeof spec.audit, "topic delete topic=%s purge=1", topic);
        snprintf(spec.zero_error, sizeof spec.zero_error, "no topic '%.200s'", topic);
        job_start(r, &spec);
        return;
    }
    hg_reply_t *reply = run(r, 3, argv);
    if (reply == NULL)
        return;
    long long deleted = hg_reply_integer(reply);
    hg_reply_free(reply);
    console_audit(r, "topic delete topic=%s purge=0 deleted=%lld", topic, deleted);
    if (deleted == 0) {
        http_error(r, 404, "no topic '%.200s'", topic);
        return;
    }
    json_reply_t out;
    json_t *j = json_reply_open(&out);
    json_kstr(j, "topic", topic);
    json_kint(j, "deleted", deleted);
    json_reply_send(r, 200, &out);
}

static int api_topics(request_t *r)
{
    if (r->nparts == 1 && !r->is_post)
        topics_page(r);
    else if (r->nparts == 3 && r->is_post && strcmp(r->parts[2], "delete") == 0) {
        const char *topic = path_name(r, 1, "topic");
        if (topic != NULL)
            topic_delete(r, topic);
    } else
        return 0;
    return 1;
}

/* POST /api/backup name=N: BACKUP N, as the user (admin); the broker checks the name. */
static void backup_start(request_t *r)
{
    const char *name = http_param(r, "name");
    if (name == NULL || name[0] == '\0') {
        http_error(r, 400, "give name=… (letters, digits, '.', '_', '-')");
        return;
    }
    const char *argv[2] = { "BACKUP", name };
    hg_reply_t *rep = run(r, 2, argv);
    if (rep == NULL)
        return;
    size_t len = 0;
    const char *text = hg_reply_str(rep, &len);
    console_audit(r, "backup name=%s: %.*s", name, (int)len, text != NULL ? text : "");
    json_reply_t out;
    json_t *j = json_reply_open(&out);
    json_kstr(j, "name", name);
    json_key(j, "started");
    json_strn(j, text != NULL ? text : "", len);
    json_reply_send(r, 202, &out);
    hg_reply_free(rep);
}

/* The broker does not answer (sampler_silent): 503 at once, rather
 * than waiting broker-timeout for nothing while every other request waits
 * behind this one. Returns 1 when it replied. */
static int broker_silent(request_t *r)
{
    uint64_t for_ms;
    if (!sampler_silent(r->c->sampler, SAMPLER_BROKER, &for_ms))
        return 0;
    http_error(r, 503,
               "the broker has not answered for %.1f s: its pages answer again once it does (the overview says "
               "when); the overview and the order pages work meanwhile",
               for_ms / 1e3);
    return 1;
}

int api_broker(request_t *r)
{
    if (r->nparts == 1 && strcmp(r->parts[0], "backup") == 0 && r->is_post) {
        if (!broker_silent(r))
            backup_start(r);
        return 1;
    }
    if (r->nparts == 1 && strcmp(r->parts[0], "overview") == 0 && !r->is_post) {
        buf_t b = BUF_INIT;
        sampler_overview_json(r->c->sampler, &b);
        http_json(r, 200, &b);
        buf_free(&b);
        return 1;
    }
    static const struct {
        const char *family;
        int (*route)(request_t *);
    } families[] = { { "dlq", api_dlq }, { "topics", api_topics }, { "msg", api_msg } };
    for (size_t i = 0; r->nparts >= 1 && i < sizeof families / sizeof families[0]; i++)
        if (strcmp(r->parts[0], families[i].family) == 0)
            return broker_silent(r) || families[i].route(r);
    return 0;
}
