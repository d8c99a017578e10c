/*
 * lib/consumer_worker.c — a consumer's worker: the PULL loop, the handler,
 * ACK / NACK, and batches.
 *
 * Each worker thread owns client i (its own connection) and loops
 * PULL group topic COUNT n BLOCK b LEASE l; for each message it runs the
 * handler, then ACK, local retries with the retry backoff, or NACK (DLQ for
 * a permanent failure). With a batch handler the whole PULL goes to one
 * call: one ACK for the done ones, NACK DLQ for the failed, the handler
 * again (after the backoff) for the retried.
 *
 * Invariants: every id a worker holds (leased, not yet settled) is active
 * in its inflight[] (under w->lock) from the PULL's reply until it is
 * settled or given up to its lease, so the watchdog renews exactly those;
 * all are cleared before the next PULL. A PULL refused for good (AUTH,
 * NOAUTH: no credentials for a broker with users, NOPERM) stops the whole
 * consumer. Settling errors are recorded; an ACK is not resent (the lease
 * brings the message back: delivery is at least once), a NACK is, on the
 * retry backoff, then the connection dropped (settle).
 * Thread: the worker's own; the stop (wake_pipe) cuts the PULL wait and the
 * backoff sleeps short, never a handler or an ACK/NACK; the consumer's stop
 * fd (hg_consumer_set_stop_fd: a daemon's stop that has waited long enough)
 * ends an ACK/NACK too, with HG_ERR_STOPPED: its message comes back after
 * its lease.
 */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include "lib/consumer.h"
#include "lib/backoff.h"
#include "lib/client.h"
#include "lib/consumer_internal.h"
#include "lib/wire.h"

#include "base/alloc.h"

#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------------------
 * Worker
 * ------------------------------------------------------------------------ */

/* A worker's PULL ended (ok 1: answered; 0: failed after the client's own
 * retries); *failing is the worker's own last state. Called by the worker. */
static void note_pull(hg_consumer_t *c, int ok, int *failing)
{
    if (!ok && !*failing) {
        *failing = 1;
        if (atomic_fetch_add(&c->pulls_failing, 1) + 1 == c->opts.workers)
            atomic_store(&c->all_failing_since_ms, wire_now_ms() + 1); /* never 0 */
    } else if (ok && *failing) {
        *failing = 0;
        atomic_fetch_sub(&c->pulls_failing, 1);
        atomic_store(&c->all_failing_since_ms, 0);
    }
}

void consumer_inflight_remove(worker_t *w, const char *id)
{
    pthread_mutex_lock(&w->lock);
    for (int i = 0; i < w->owner->opts.count; i++)
        if (w->inflight[i].active && strcmp(w->inflight[i].id, id) == 0) {
            w->inflight[i].active = 0;
            break;
        }
    pthread_mutex_unlock(&w->lock);
}

int consumer_inflight_holds(worker_t *w, const char *id)
{
    int found = 0;
    pthread_mutex_lock(&w->lock);
    for (int i = 0; i < w->owner->opts.count && !found; i++)
        found = w->inflight[i].active && strcmp(w->inflight[i].id, id) == 0;
    pthread_mutex_unlock(&w->lock);
    return found;
}

/* Send ACK or NACK for one message once and count a lost lease. reason
 * NULL for ACK; dead = 1 for a permanent failure (NACK … DLQ: straight to
 * the DLQ). Errors are recorded; returns 0 when the broker answered the
 * command (a lost lease too), -1 when it failed or was refused. */
static int settle_once(worker_t *w, const char *id, const char *reason, int dead)
{
    hg_consumer_t *c = w->owner;
    const char *argv[6] = { reason == NULL ? "ACK" : "NACK", c->group, id };
    int argc = 3, rc = -1;
    if (reason != NULL) {
        if (dead) {
            argv[argc++] = "DLQ";
        }
        argv[argc++] = "REASON";
        argv[argc++] = reason;
    }
    char who[32];
    resp_reply_t *r = NULL;
    hg_err_t e;

    e = client_call(w->client, argc, argv, NULL, 1, 0, 0, &r);
    snprintf(who, sizeof(who), "worker %d", w->index);
    consumer_note_connects(c, w->client, &w->connects, who);
    if (e != HG_OK) {
        consumer_record_error(c, who, e, argv[0], hg_client_errmsg(w->client));
        return e == HG_ERR_STOPPED ? 0 : -1; /* the stop cut it: nothing more to try */
    }
    if (r->type == RESP_REPLY_ERROR) {
        client_fail_reply(w->client, r);
        consumer_record_error(c, who, HG_ERR_SERVER, argv[0], hg_client_errmsg(w->client));
    } else if (r->type != RESP_REPLY_INTEGER) {
        consumer_record_error(c, who, HG_ERR_PROTOCOL, argv[0], resp_reply_type_name(r->type));
    } else {
        rc = 0;
        if (reason == NULL ? r->integer == 0 : r->integer < 0) {
            consumer_count(&c->lease_lost);
            consumer_log(c, 1, "%s: %s %s: the lease had expired; the broker will deliver it again", who, argv[0], id);
        }
    }
    resp_reply_free(r);
    return rc;
}

/* Send ACK (reason NULL) or NACK for one message (settle_once). A NACK that
 * fails is sent again on the retry backoff (c->opts.retry: its delays, at
 * most its attempts but at least once), because on amqp:// a NACK that
 * failed on a live connection (its retry came back unrouted, or was
 * refused) leaves the delivery held by that connection, which nothing else
 * settles. When every resend failed the worker drops its connection: the
 * delivery goes back to its queue and comes again as one failure (amqp://:
 * x-delivery-count; the broker: its lease ends anyway). The stop ends the
 * resends (the close gives the delivery back). An ACK is not resent: an
 * unsettled one comes again, which the handler's outcome tolerates. */
static void settle(worker_t *w, const char *id, const char *reason, int dead)
{
    hg_consumer_t *c = w->owner;
    unsigned resends = c->opts.retry.attempts > 0 ? (unsigned)c->opts.retry.attempts : 1;

    if (settle_once(w, id, reason, dead) == 0 || reason == NULL)
        return;
    for (unsigned k = 0; k < resends; k++) {
        if (consumer_stopping(c) || client_sleep(c->wake_pipe[0], hg_backoff_delay(&c->opts.retry, k, NULL, NULL)) < 0)
            return;
        consumer_log(c, 1, "worker %d: NACK %s failed: sending it again (%u of %u)", w->index, id, k + 1, resends);
        if (settle_once(w, id, reason, dead) == 0)
            return;
    }
    consumer_log(c, 0, "worker %d: NACK %s failed %u times: dropping the connection, so %s goes back to its queue",
                 w->index, id, resends + 1, id);
    client_disconnect(w->client);
}

/* Run the handler on one message until it is settled. */
static void process(worker_t *w, hg_message_t *m)
{
    hg_consumer_t *c = w->owner;
    char reason[HG_REASON_MAX], nack[HG_REASON_MAX + 96];
    hg_outcome_t outcome;

    for (unsigned attempt = 0;; attempt++) {
        m->attempt = attempt;
        reason[0] = '\0';
        outcome = c->opts.handler(m, reason, sizeof(reason), c->opts.handler_arg);
        reason[sizeof(reason) - 1] = '\0';
        if (outcome == HG_DONE) {
            settle(w, m->id, NULL, 0);
            consumer_count(&c->done);
            break;
        }
        if (outcome != HG_RETRY) { /* HG_FAIL, or anything unknown: permanent */
            if (outcome != HG_FAIL)
                snprintf(reason, sizeof(reason), "handler returned unknown outcome %d", (int)outcome);
            consumer_count(&c->failed);
            settle(w, m->id, reason[0] != '\0' ? reason : "permanent failure", 1);
            break;
        }
        if ((int)attempt >= c->opts.retry.attempts) {
            snprintf(nack, sizeof(nack), "%s (gave up after %u local attempts)",
                     reason[0] != '\0' ? reason : "transient failure", attempt + 1);
            consumer_count(&c->nacked);
            settle(w, m->id, nack, 0);
            break;
        }
        if (consumer_stopping(c) ||
            client_sleep(c->wake_pipe[0], hg_backoff_delay(&c->opts.retry, attempt, NULL, NULL)) < 0) {
            snprintf(nack, sizeof(nack), "%s (consumer stopping after %u local attempts)",
                     reason[0] != '\0' ? reason : "transient failure", attempt + 1);
            consumer_count(&c->nacked);
            settle(w, m->id, nack, 0);
            break;
        }
        consumer_count(&c->retried);
    }
    consumer_inflight_remove(w, m->id);
}

/* ACK the ids in one command (ACK group id …); a reply below n counts the
 * leases that had expired. */
static void settle_many(worker_t *w, const char *const *ids, size_t n)
{
    hg_consumer_t *c = w->owner;
    const char **argv = xmalloc((n + 2) * sizeof(*argv));
    char who[32];
    resp_reply_t *r = NULL;

    argv[0] = "ACK";
    argv[1] = c->group;
    memcpy(argv + 2, ids, n * sizeof(*ids));
    hg_err_t e = client_call(w->client, (int)n + 2, argv, NULL, 1, 0, 0, &r);
    free(argv);
    snprintf(who, sizeof(who), "worker %d", w->index);
    consumer_note_connects(c, w->client, &w->connects, who);
    if (e != HG_OK) {
        consumer_record_error(c, who, e, "ACK", hg_client_errmsg(w->client));
        return;
    }
    if (r->type == RESP_REPLY_ERROR) {
        client_fail_reply(w->client, r);
        consumer_record_error(c, who, HG_ERR_SERVER, "ACK", hg_client_errmsg(w->client));
    } else if (r->type != RESP_REPLY_INTEGER) {
        consumer_record_error(c, who, HG_ERR_PROTOCOL, "ACK", resp_reply_type_name(r->type));
    } else if (r->integer >= 0 && (uint64_t)r->integer < n) {
        atomic_fetch_add_explicit(&c->lease_lost, n - (uint64_t)r->integer, memory_order_relaxed);
        consumer_log(c, 1,
                     "%s: ACK of %zu messages released %lld: the other leases had expired; the broker will "
                     "deliver them again",
                     who, n, r->integer);
    }
    resp_reply_free(r);
}

/* Run the batch handler on items[0..n) until every message is settled:
 * HG_DONE ones ACKed together, HG_FAIL ones NACKed to the DLQ, HG_RETRY ones
 * handed to the handler again after the backoff, then NACKed. */
static void process_batch(worker_t *w, hg_batch_item_t *items, size_t n)
{
    hg_consumer_t *c = w->owner;
    const char **done = xmalloc(n * sizeof(*done));
    char nack[HG_REASON_MAX + 96];

    for (unsigned attempt = 0; n > 0; attempt++) {
        for (size_t i = 0; i < n; i++) {
            items[i].msg.attempt = attempt;
            items[i].outcome = HG_RETRY;
            items[i].reason[0] = '\0';
        }
        c->opts.batch_handler(items, n, c->opts.handler_arg);

        size_t ndone = 0, nretry = 0;
        for (size_t i = 0; i < n; i++) {
            items[i].reason[sizeof(items[i].reason) - 1] = '\0';
            if (items[i].outcome == HG_DONE)
                done[ndone++] = items[i].msg.id;
        }
        if (ndone > 0) {
            settle_many(w, done, ndone);
            atomic_fetch_add_explicit(&c->done, ndone, memory_order_relaxed);
        }
        int give_up = (int)attempt >= c->opts.retry.attempts;
        for (size_t i = 0; i < n; i++) {
            hg_batch_item_t *it = &items[i];
            if (it->outcome == HG_DONE) {
                consumer_inflight_remove(w, it->msg.id);
            } else if (it->outcome != HG_RETRY) { /* HG_FAIL, or anything unknown: permanent */
                if (it->outcome != HG_FAIL)
                    snprintf(it->reason, sizeof(it->reason), "handler returned unknown outcome %d", (int)it->outcome);
                consumer_count(&c->failed);
                settle(w, it->msg.id, it->reason[0] != '\0' ? it->reason : "permanent failure", 1);
                consumer_inflight_remove(w, it->msg.id);
            } else {
                if (nretry != i)
                    items[nretry] = *it;
                nretry++;
            }
        }
        n = nretry;
        if (n == 0)
            break;
        if (!give_up && !consumer_stopping(c) &&
            client_sleep(c->wake_pipe[0], hg_backoff_delay(&c->opts.retry, attempt, NULL, NULL)) == 0) {
            atomic_fetch_add_explicit(&c->retried, n, memory_order_relaxed);
            continue;
        }
        for (size_t i = 0; i < n; i++) {
            snprintf(nack, sizeof(nack), "%s (%s after %u local attempts)",
                     items[i].reason[0] != '\0' ? items[i].reason : "transient failure",
                     give_up ? "gave up" : "consumer stopping", attempt + 1);
            consumer_count(&c->nacked);
            settle(w, items[i].msg.id, nack, 0);
            consumer_inflight_remove(w, items[i].msg.id);
        }
        break;
    }
    free(done);
}

void *consumer_worker_main(void *arg)
{
    worker_t *w = arg;
    hg_consumer_t *c = w->owner;
    char count_text[16], block_text[16], who[32], why[160];
    const char *argv[10] = { "PULL",  c->group,   c->topic, "COUNT",      count_text,
                             "BLOCK", block_text, "LEASE",  c->lease_text };
    const hg_backoff_t *pause = &c->client_opts.reconnect_backoff;
    unsigned failures = 0;
    int pull_failing = 0; /* this worker's last PULL failed (note_pull) */
    int pull_refused = 0; /* the broker refused a PULL with an error reply since the last answered one */

    snprintf(count_text, sizeof(count_text), "%d", c->opts.count);
    snprintf(block_text, sizeof(block_text), "%" PRIu32, c->opts.block_ms);
    snprintf(who, sizeof(who), "worker %d", w->index);

    while (!consumer_stopping(c)) {
        resp_reply_t *r = NULL;
        hg_err_t e = client_call(w->client, 9, argv, NULL, 1, c->opts.block_ms, CLIENT_INTERRUPTIBLE, &r);
        consumer_note_connects(c, w->client, &w->connects, who);
        if (e == HG_OK && r->type == RESP_REPLY_ERROR) {
            if (!pull_refused)
                consumer_note_refused(c, w->client, who);
            pull_refused = 1;
            e = client_fail_reply(w->client, r);
            resp_reply_free(r);
            r = NULL;
        } else if (e == HG_OK && r->type != RESP_REPLY_ARRAY) {
            e = client_fail(w->client, HG_ERR_PROTOCOL, "PULL answered %s, want an array",
                            resp_reply_type_name(r->type));
            resp_reply_free(r);
            r = NULL;
            client_disconnect(w->client);
        }
        if (e != HG_OK) {
            if (e == HG_ERR_STOPPED || consumer_stopping(c))
                break;
            int no_credentials = e == HG_ERR_SERVER && strncmp(hg_client_errmsg(w->client), "NOAUTH", 6) == 0;
            if (no_credentials)
                e = HG_ERR_AUTH; /* no credentials for a broker with users: as lasting as a wrong password */
            consumer_record_error(c, who, e, "PULL", hg_client_errmsg(w->client));
            note_pull(c, 0, &pull_failing);
            if (e == HG_ERR_AUTH || (e == HG_ERR_SERVER && strncmp(hg_client_errmsg(w->client), "NOPERM", 6) == 0)) {
                /* Wrong credentials or a user without the consumer role stay so: retrying only fills the log. */
                consumer_log(c, 0, "%s: %s: stopping the consumer", who,
                             no_credentials     ? "the broker has users and the URI names none"
                             : e == HG_ERR_AUTH ? "the broker refused the credentials"
                                                : "the user may not PULL");
                atomic_store(&c->fatal, (int)e);
                hg_consumer_stop(c);
                break;
            }
            if (client_sleep(c->wake_pipe[0], hg_backoff_delay(pause, failures, NULL, NULL)) < 0)
                break;
            if (failures < 64)
                failures++;
            continue;
        }
        failures = 0;
        note_pull(c, 1, &pull_failing);
        if (pull_refused) {
            pull_refused = 0;
            consumer_note_answered(c, w->client, who);
        }

        /* Register the whole batch first: the watchdog renews every lease
         * the worker holds, not only the one being handled. */
        {
            uint64_t now = wire_now_ms();
            pthread_mutex_lock(&w->lock);
            for (size_t i = 0; i < r->count && i < (size_t)c->opts.count; i++) {
                const resp_reply_t *e0 = &r->elements[i];
                inflight_t *slot = &w->inflight[i];
                slot->active = 0;
                if (e0->type == RESP_REPLY_ARRAY && e0->count >= 1 && e0->elements[0].type == RESP_REPLY_BULK &&
                    e0->elements[0].len < HG_ID_MAX) {
                    memcpy(slot->id, e0->elements[0].str, e0->elements[0].len + 1);
                    slot->renewed_ms = now;
                    slot->active = 1;
                }
            }
            pthread_mutex_unlock(&w->lock);
        }
        size_t nbatch = 0;
        for (size_t i = 0; i < r->count; i++) {
            hg_message_t m;
            consumer_count(&c->delivered);
            if (consumer_parse_message(&r->elements[i], &m, why, sizeof(why)) < 0) {
                /* Unreadable: leave it to its lease (it comes back, and a
                 * broker that keeps sending garbage shows in the errors);
                 * the watchdog must not keep it alive. */
                const resp_reply_t *x = &r->elements[i];
                consumer_record_error(c, who, HG_ERR_PROTOCOL, "PULL", why);
                if (x->type == RESP_REPLY_ARRAY && x->count >= 1 && x->elements[0].type == RESP_REPLY_BULK)
                    consumer_inflight_remove(w, x->elements[0].str);
                continue;
            }
            m.worker = w->index;
            if (w->batch == NULL)
                process(w, &m);
            else if (nbatch < (size_t)c->opts.count)
                w->batch[nbatch++].msg = m;
            else /* more than COUNT: a broker bug; its lease brings it back */
                consumer_inflight_remove(w, m.id);
        }
        if (nbatch > 0)
            process_batch(w, w->batch, nbatch);
        pthread_mutex_lock(&w->lock);
        for (int i = 0; i < c->opts.count; i++)
            w->inflight[i].active = 0;
        pthread_mutex_unlock(&w->lock);
        resp_reply_free(r);
    }
    return NULL;
}
