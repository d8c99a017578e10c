/*
 * lib/rmq_admin.c — the admin commands on RabbitMQ: LEVELS, GROUP
 * CREATE/LIST/DEL, DLQ LEN/LIST/REQUEUE/DROP, answering the broker's reply
 * shapes (docs/protocol.md) so hourglass-cli and the compensator's DLQ
 * monitor work unchanged.
 *
 * Depths come from a passive queue.declare (message_count: ready messages);
 * a queue declared empty is looked into with one get (checked_depth).
 * What RabbitMQ does not tell an AMQP client is left out rather than
 * invented: LEVELS answers next_due_ms 0; GROUP LIST sends group, topic,
 * ready, dlq, max-reconsume and created-ms (the CLI shows "-" for the rest).
 * DLQ LIST browses the group's DLQ (docs/rabbitmq.md): ids are random, so
 * "id order" is the sorted order of what is parked. REQUEUE publishes the
 * chosen messages to the group (reconsume 0), waits for the confirms, and
 * only then deletes them from the DLQ.
 *
 * One thread per connection.
 */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include "lib/rmq.h"
#include "lib/client.h"

#include "base/alloc.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* A transport failure is returned; a refusal becomes an error reply. */
static hg_err_t refusal(rmq_t *r, hg_err_t e, resp_reply_t **reply)
{
    buf_t b = BUF_INIT;
    const char *msg = hg_client_errmsg(r->client);

    if (e != HG_ERR_SERVER && e != HG_ERR_ARG)
        return e;
    rmq_w_error(&b, "%s%s", strncmp(msg, "ERR ", 4) == 0 ? "" : "ERR ", msg);
    client_clear_error(r->client);
    return rmq_reply_finish(&b, reply);
}

static hg_err_t error_reply(resp_reply_t **reply, const char *text)
{
    buf_t b = BUF_INIT;
    rmq_w_error(&b, "%s", text);
    return rmq_reply_finish(&b, reply);
}

/* Counts asked again after a look found a message (checked_depth). */
#define RECOUNTS 3

/* The ready messages in queue q, every depth the admin commands answer
 * (LEVELS, GROUP LIST's ready and dlq, DLQ LEN): -1 when it does not exist.
 * A passive declare answers the count the queue's leader gave within 250 ms,
 * and 0 when it gave none (RabbitMQ 3.10's quorum-queue stat: a busy, stale
 * or unreachable leader reads as an empty queue). So a queue said to be
 * empty is looked into with one get (rmq_queue_peek; copy_to: a group
 * queue's routing key), which the leader must answer (or the call fails):
 * empty, 0; a message there, the queue is counted again, up to RECOUNTS
 * times (a message that arrived between the count and the look is then
 * counted, a busy leader may answer a later count), and when every count
 * still says 0 the count is not known and the call fails saying so, rather
 * than browse a queue that may hold millions. */
static hg_err_t checked_depth(rmq_t *r, const char *q, const char *copy_to, long long *depth)
{
    int nonempty = 0;
    hg_err_t e;

    if ((e = rmq_queue_depth(r, q, depth)) != HG_OK || *depth != 0)
        return e;
    if ((e = rmq_queue_peek(r, q, copy_to, &nonempty)) != HG_OK)
        return e;
    /* a message that came in between the count and the look is counted by
     * the next count, and a leader too busy for one count (each waits up to
     * 250 ms) may give the next; one that gives none still reads 0 */
    for (int recount = 0; nonempty && recount < RECOUNTS; recount++)
        if ((e = rmq_queue_depth(r, q, depth)) != HG_OK || *depth > 0)
            return e;
    if (nonempty)
        return client_fail(r->client, HG_ERR_SERVER,
                           "RabbitMQ counted 0 in queue %s and it is not empty (its leader gave no count within "
                           "250 ms, or a message came in between the count and the look): ask again",
                           q);
    return HG_OK;
}

hg_err_t rmq_cmd_levels(rmq_t *r, resp_reply_t **reply)
{
    buf_t b = BUF_INIT;
    hg_err_t e;

    if ((e = rmq_ensure(r)) != HG_OK || (e = rmq_topology(r)) != HG_OK)
        return refusal(r, e, reply);
    rmq_w_array(&b, (size_t)r->levels.count);
    for (int level = 1; level <= r->levels.count; level++) {
        char q[64];
        long long depth = 0;
        rmq_level_queue(q, sizeof(q), level);
        if ((e = checked_depth(r, q, NULL, &depth)) != HG_OK) {
            buf_free(&b);
            return refusal(r, e, reply);
        }
        rmq_w_array(&b, 4);
        rmq_w_int(&b, level);
        rmq_w_int(&b, (long long)r->levels.delay_ms[level]);
        rmq_w_int(&b, depth < 0 ? 0 : depth);
        rmq_w_int(&b, 0);
    }
    return rmq_reply_finish(&b, reply);
}

static void pair_int(buf_t *b, const char *name, long long v)
{
    rmq_w_str(b, name);
    rmq_w_int(b, v);
}

hg_err_t rmq_cmd_group(rmq_t *r, size_t argc, const char *const *argv, resp_reply_t **reply)
{
    buf_t b = BUF_INIT;
    hg_err_t e;

    if ((e = rmq_ensure(r)) != HG_OK)
        return e;
    if (argc >= 4 && strcasecmp(argv[1], "CREATE") == 0) {
        long max = -1;
        if ((argc - 4) % 2 != 0)
            return error_reply(reply, "ERR syntax error: GROUP CREATE group topic [FROM NOW] [MAXRETRY n]");
        for (size_t i = 4; i + 1 < argc; i += 2) {
            if (strcasecmp(argv[i], "MAXRETRY") == 0) {
                char *end = NULL;
                max = strtol(argv[i + 1], &end, 10);
                if (end == argv[i + 1] || *end != '\0' || max < 0 || max > 1000)
                    return error_reply(reply, "ERR MAXRETRY must be 0..1000");
            } else if (strcasecmp(argv[i], "FROM") == 0 && strcasecmp(argv[i + 1], "FIRST") == 0) {
                /* A queue bound now cannot receive what was routed before it existed. */
                return client_fail(r->client, HG_ERR_UNSUPPORTED,
                                   "GROUP CREATE ... FROM FIRST is not supported on amqp:// (a group receives what "
                                   "becomes due after it exists: create it FROM NOW before the messages are sent; "
                                   "docs/rabbitmq.md)");
            } else if (strcasecmp(argv[i], "FROM") == 0 && strcasecmp(argv[i + 1], "NOW") != 0) {
                return error_reply(reply, "ERR FROM must be FIRST or NOW");
            } else if (strcasecmp(argv[i], "FROM") != 0) {
                return error_reply(reply, "ERR syntax error: GROUP CREATE group topic [FROM NOW] [MAXRETRY n]");
            }
        }
        if ((e = rmq_group_ensure(r, argv[2], argv[3], max, 1, NULL)) != HG_OK)
            return refusal(r, e, reply);
        rmq_w_status(&b, "OK");
        return rmq_reply_finish(&b, reply);
    }
    if (argc == 2 && strcasecmp(argv[1], "LIST") == 0) {
        rmq_msg_t *all = NULL;
        size_t n = 0;
        if ((e = rmq_registry(r, &all)) != HG_OK)
            return refusal(r, e, reply);
        for (rmq_msg_t *m = all; m != NULL; m = m->next)
            n++;
        rmq_w_array(&b, n);
        for (rmq_msg_t *m = all; m != NULL; m = m->next) {
            char q[RMQ_QUEUE_NAME_MAX], dest[RMQ_QUEUE_NAME_MAX];
            long long ready = 0, dlq = 0;
            rmq_group_queue(q, sizeof(q), m->group);
            snprintf(dest, sizeof(dest), "g.%s", m->group);
            e = checked_depth(r, q, dest, &ready);
            rmq_dlq_queue(q, sizeof(q), m->group);
            if (e == HG_OK)
                e = checked_depth(r, q, NULL, &dlq);
            if (e != HG_OK) {
                rmq_msg_list_free(all);
                buf_free(&b);
                return refusal(r, e, reply);
            }
            rmq_w_array(&b, 12);
            rmq_w_str(&b, "group");
            rmq_w_str(&b, m->group);
            rmq_w_str(&b, "topic");
            rmq_w_str(&b, m->topic);
            pair_int(&b, "ready", ready < 0 ? 0 : ready);
            pair_int(&b, "dlq", dlq < 0 ? 0 : dlq);
            pair_int(&b, "max-reconsume", m->max_reconsume >= 0 ? m->max_reconsume : RMQ_MAX_RECONSUME);
            pair_int(&b, "created-ms", (long long)m->created_ms);
        }
        rmq_msg_list_free(all);
        return rmq_reply_finish(&b, reply);
    }
    if (argc == 3 && strcasecmp(argv[1], "DEL") == 0) {
        int deleted = 0;
        if ((e = rmq_group_delete(r, argv[2], &deleted)) != HG_OK)
            return refusal(r, e, reply);
        rmq_w_int(&b, deleted);
        return rmq_reply_finish(&b, reply);
    }
    return error_reply(reply, "ERR syntax error: GROUP CREATE group topic | GROUP LIST | GROUP DEL group");
}

static int by_id(const void *a, const void *b)
{
    return strcmp((*(rmq_msg_t *const *)a)->id, (*(rmq_msg_t *const *)b)->id);
}

/* The DLQ of group, browsed and sorted by id: *v (free) of *n, the list in
 * *all (each returned or deleted, then freed with rmq_msg_list_free). */
static hg_err_t dlq_browse(rmq_t *r, const char *group, rmq_msg_t **all, rmq_msg_t ***v, size_t *n)
{
    char q[RMQ_QUEUE_NAME_MAX];
    size_t k = 0;
    hg_err_t e;

    rmq_dlq_queue(q, sizeof(q), group);
    *v = NULL;
    *n = 0;
    if ((e = rmq_browse(r, q, all)) != HG_OK)
        return e;
    for (rmq_msg_t *m = *all; m != NULL; m = m->next)
        k++;
    *v = xcalloc(k + 1, sizeof(**v));
    for (rmq_msg_t *m = *all; m != NULL; m = m->next)
        (*v)[(*n)++] = m;
    qsort(*v, *n, sizeof(**v), by_id);
    return HG_OK;
}

hg_err_t rmq_cmd_dlq(rmq_t *r, size_t argc, const char *const *argv, resp_reply_t **reply)
{
    char q[RMQ_QUEUE_NAME_MAX], dest[RMQ_QUEUE_NAME_MAX];
    const char *verb = argc >= 2 ? argv[1] : "";
    long long depth = -1;
    rmq_msg_t *all = NULL, **v = NULL;
    size_t n = 0;
    buf_t b = BUF_INIT;
    hg_err_t e;

    if (argc < 3)
        return error_reply(reply, "ERR syntax error: DLQ LEN|LIST|REQUEUE|DROP group ...");
    if ((e = rmq_name_arg(r, "group", argv[2])) != HG_OK || (e = rmq_ensure(r)) != HG_OK ||
        (e = rmq_topology(r)) != HG_OK)
        return refusal(r, e, reply);
    rmq_dlq_queue(q, sizeof(q), argv[2]);
    if ((e = checked_depth(r, q, NULL, &depth)) != HG_OK)
        return refusal(r, e, reply);
    if (depth < 0) {
        rmq_w_error(&b, "ERR no such group '%s'", argv[2]);
        return rmq_reply_finish(&b, reply);
    }
    if (strcasecmp(verb, "LEN") == 0 && argc == 3) {
        rmq_w_int(&b, depth);
        return rmq_reply_finish(&b, reply);
    }
    if (strcasecmp(verb, "LIST") == 0) {
        long count = 100;
        const char *after = "";
        size_t shown = 0, first = 0;
        for (size_t i = 3; i + 1 < argc; i += 2) {
            if (strcasecmp(argv[i], "COUNT") == 0)
                count = strtol(argv[i + 1], NULL, 10);
            else if (strcasecmp(argv[i], "AFTER") == 0)
                after = argv[i + 1];
        }
        if (count < 1 || count > 1000)
            return error_reply(reply, "ERR COUNT must be 1..1000");
        if ((e = dlq_browse(r, argv[2], &all, &v, &n)) != HG_OK)
            return refusal(r, e, reply);
        for (rmq_msg_t *m = all; m != NULL; m = m->next)
            rmq_browse_return(r, m);
        while (first < n && strcmp(v[first]->id, after) <= 0)
            first++;
        shown = n - first < (size_t)count ? n - first : (size_t)count;
        rmq_w_array(&b, shown);
        for (size_t i = first; i < first + shown; i++) {
            rmq_msg_t *m = v[i];
            rmq_w_array(&b, 6);
            rmq_w_str(&b, m->id);
            rmq_w_bulk(&b, m->key != NULL ? m->key : "", m->key_len);
            rmq_w_bulk(&b, m->payload, m->payload_len);
            rmq_w_int(&b, m->reconsume);
            rmq_w_str(&b, m->reason);
            rmq_w_int(&b, (long long)m->parked_ms);
        }
        free(v);
        rmq_msg_list_free(all);
        return rmq_reply_finish(&b, reply);
    }
    if ((strcasecmp(verb, "REQUEUE") == 0 || strcasecmp(verb, "DROP") == 0) && argc == 4) {
        int requeue = strcasecmp(verb, "REQUEUE") == 0, every = strcasecmp(argv[3], "ALL") == 0;
        rmq_out_t *out;
        hg_err_t *res;
        size_t m = 0;
        long long moved = 0;
        if ((e = dlq_browse(r, argv[2], &all, &v, &n)) != HG_OK)
            return refusal(r, e, reply);
        out = xcalloc(n + 1, sizeof(*out));
        res = xcalloc(n + 1, sizeof(*res));
        snprintf(dest, sizeof(dest), "g.%s", argv[2]);
        for (size_t i = 0; i < n; i++) {
            if (!every && strcmp(v[i]->id, argv[3]) != 0)
                continue;
            v[m] = v[i]; /* the chosen ones, in order */
            rmq_out_to_group(&out[m], v[i], dest);
            out[m].reconsume = 0; /* a requeue starts the retry schedule again (DESIGN §2) */
            m++;
        }
        e = requeue && m > 0 ? rmq_publish(r, out, m, res) : HG_OK;
        for (size_t i = 0; i < m; i++)
            if (!requeue || res[i] == HG_OK) {
                rmq_browse_delete(r, v[i]);
                v[i]->tag = 0; /* settled */
                moved++;
            }
        for (rmq_msg_t *x = all; x != NULL; x = x->next)
            rmq_browse_return(r, x); /* the rest (tag 0: already deleted) */
        free(out);
        free(res);
        free(v);
        rmq_msg_list_free(all);
        if (e != HG_OK && moved == 0)
            return refusal(r, e, reply);
        rmq_w_int(&b, moved);
        return rmq_reply_finish(&b, reply);
    }
    return error_reply(reply, "ERR syntax error: DLQ LEN|LIST|REQUEUE|DROP group ...");
}
