/*
 * lib/order_view_explain.c — the order view's broker side and its words
 * (contract: include/hourglass/order_view.h): the order's timeout messages
 * as the broker holds them, the verdict on why a pending order is late, and
 * the view as JSON.
 *
 * The verdict, for a pending order past expire_at, first match wins:
 *   the broker could not be asked        unknown
 *   a message parked in a DLQ            in-dlq
 *   a message ready, leased or retrying  consumer-lagging
 *   a message still in a delay level     delayed
 *   no message, outbox row new/missing   not-sent
 *   no message otherwise                 no-message (lost)
 *
 * Threads: the client's (one thread at a time); classify and JSON are pure.
 */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include "include/hourglass/order_view.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "base/buf.h"
#include "base/json.h"
#include "lib/order_view_broker.h"

const char *hg_order_late_name(hg_order_late_t late)
{
    switch (late) {
    case HG_ORDER_LATE_NONE:
        return "none";
    case HG_ORDER_LATE_UNKNOWN:
        return "unknown";
    case HG_ORDER_LATE_NOT_SENT:
        return "not-sent";
    case HG_ORDER_LATE_NO_MESSAGE:
        return "no-message";
    case HG_ORDER_LATE_IN_DLQ:
        return "in-dlq";
    case HG_ORDER_LATE_DELAYED:
        return "delayed";
    case HG_ORDER_LATE_CONSUMER_LAG:
        return "consumer-lagging";
    }
    return "?";
}

/* The first message in one of the states (a NULL-terminated list), or NULL. */
static const hg_order_msg_t *first_in(const hg_order_view_t *v, const char *const *states)
{
    for (size_t i = 0; i < v->msg_count; i++)
        for (const char *const *s = states; *s != NULL; s++)
            if (strcmp(v->msgs[i].state, *s) == 0)
                return &v->msgs[i];
    return NULL;
}

/* Mark text[size], which snprintf cut, as cut: its last bytes become "...",
 * moved back to the start of a UTF-8 character so that no half of one stays. */
static void mark_cut(char *text, size_t size)
{
    size_t at = size - sizeof "...";
    while (at > 0 && ((unsigned char)text[at] & 0xC0) == 0x80)
        at--;
    memcpy(text + at, "...", sizeof "...");
}

void hg_order_late_classify(hg_order_view_t *v)
{
    static const char *const dlq[] = { "dlq", NULL };
    static const char *const due[] = { "ready", "leased", "retry", NULL };
    static const char *const waiting[] = { "delayed", NULL };
    const hg_order_info_t *o;
    const hg_order_msg_t *m;

    if (v == NULL)
        return;
    o = &v->order;
    char late[32];

    if (strcmp(o->status, "pending") != 0) {
        v->late = HG_ORDER_LATE_NONE;
        snprintf(v->why, sizeof v->why, "the order is %s%s%s%s", o->status, o->cancel_reason[0] ? " (reason " : "",
                 o->cancel_reason, o->cancel_reason[0] ? ")" : "");
        return;
    }
    if (o->overdue_ms <= 0) {
        v->late = HG_ORDER_LATE_NONE;
        hg_order_age_text(-o->overdue_ms, late, sizeof late);
        snprintf(v->why, sizeof v->why, "not due yet: it expires in %s", late);
        return;
    }
    hg_order_age_text(o->overdue_ms, late, sizeof late);
    if (!v->broker_known) {
        v->late = HG_ORDER_LATE_UNKNOWN;
        snprintf(v->why, sizeof v->why, "%s overdue; the broker could not be asked: %s", late,
                 v->broker_error[0] ? v->broker_error : "no broker connection");
    } else if ((m = first_in(v, dlq)) != NULL) {
        v->late = HG_ORDER_LATE_IN_DLQ;
        /* A long group name and a long DLQ reason do not both fit in why (its
         * size is part of the public struct): the reason is cut and the cut
         * shown; m->detail keeps it whole. The other sentences always fit. */
        int n = snprintf(v->why, sizeof v->why, "%s overdue; its message %s is parked in the DLQ of %s%s%s", late,
                         m->id, m->where, m->detail[0] ? ": " : "", m->detail);
        if (n >= (int)sizeof v->why)
            mark_cut(v->why, sizeof v->why);
    } else if ((m = first_in(v, due)) != NULL) {
        v->late = HG_ORDER_LATE_CONSUMER_LAG;
        snprintf(v->why, sizeof v->why, "%s overdue; its message %s is due and %s in %s: the consumer is lagging", late,
                 m->id, m->state, m->where);
    } else if ((m = first_in(v, waiting)) != NULL) {
        v->late = HG_ORDER_LATE_DELAYED;
        snprintf(v->why, sizeof v->why, "%s overdue; its message %s is still delayed in %s", late, m->id, m->where);
    } else if (!o->has_outbox || strcmp(o->outbox_status, "new") == 0) {
        v->late = HG_ORDER_LATE_NOT_SENT;
        snprintf(v->why, sizeof v->why, "%s overdue; no message in the broker and %s: the timeout was never sent", late,
                 o->has_outbox ? "the outbox row is still 'new'" : "no outbox row");
    } else {
        v->late = HG_ORDER_LATE_NO_MESSAGE;
        snprintf(v->why, sizeof v->why,
                 "%s overdue; the outbox row is '%s' but the broker holds no live message with key %" PRIu64
                 ": the message was lost",
                 late, o->outbox_status, o->id);
    }
}

void hg_order_explain(struct hg_client *client, const char *topic, const hg_order_info_t *order, hg_order_view_t *v)
{
    if (v == NULL)
        return;
    memset(v, 0, sizeof *v);
    if (order == NULL) { /* nothing to explain: say so rather than classify an empty order */
        snprintf(v->broker_error, sizeof v->broker_error, "the order is NULL");
        v->late = HG_ORDER_LATE_UNKNOWN;
        snprintf(v->why, sizeof v->why, "no order given");
        return;
    }
    v->order = *order;
    if (client == NULL)
        snprintf(v->broker_error, sizeof v->broker_error, "no broker connection");
    else if (view_broker_messages(client, topic != NULL ? topic : HG_ORDER_TIMEOUT_TOPIC, order->id, v->msgs,
                                  HG_ORDER_VIEW_MAX_MSGS, &v->msg_count, v->broker_error, sizeof v->broker_error) == 0)
        v->broker_known = 1;
    hg_order_late_classify(v);
}

/* A string column: the text, or null for "". */
static void json_kopt(json_t *j, const char *key, const char *s)
{
    json_kstr(j, key, s[0] != '\0' ? s : NULL);
}

char *hg_order_view_json(const hg_order_view_t *v, const hg_order_item_t *items, size_t nitems)
{
    if (v == NULL)
        return xstrdup("null");
    const hg_order_info_t *o = &v->order;
    buf_t b = BUF_INIT;
    json_t j;

    json_init(&j, &b);
    json_object_open(&j);
    json_kuint(&j, "id", o->id);
    json_kuint(&j, "user_id", o->user_id);
    json_kstr(&j, "status", o->status);
    json_kuint_or_null(&j, "created_ms", o->created_ms);
    json_kuint_or_null(&j, "expire_ms", o->expire_ms);
    json_kuint_or_null(&j, "paid_ms", o->paid_ms);
    json_kuint_or_null(&j, "cancelled_ms", o->cancelled_ms);
    json_kopt(&j, "cancel_reason", o->cancel_reason);
    json_kint(&j, "overdue_ms", o->overdue_ms);
    json_kstr(&j, "cursor", o->cursor);
    json_key(&j, "outbox");
    if (o->has_outbox) {
        json_object_open(&j);
        json_kstr(&j, "status", o->outbox_status);
        json_kuint(&j, "attempts", o->outbox_attempts);
        json_kuint_or_null(&j, "next_attempt_ms", o->outbox_next_attempt_ms);
        json_kopt(&j, "last_error", o->outbox_last_error);
        json_object_close(&j);
    } else {
        json_null(&j);
    }
    if (items != NULL) {
        json_key(&j, "items");
        json_array_open(&j);
        for (size_t i = 0; i < nitems; i++) {
            json_object_open(&j);
            json_kuint(&j, "sku_id", items[i].sku_id);
            json_kint(&j, "qty", items[i].qty);
            json_object_close(&j);
        }
        json_array_close(&j);
    }
    json_kbool(&j, "broker_known", v->broker_known);
    json_kopt(&j, "broker_error", v->broker_error);
    json_key(&j, "messages");
    json_array_open(&j);
    for (size_t i = 0; i < v->msg_count; i++) {
        const hg_order_msg_t *m = &v->msgs[i];
        json_object_open(&j);
        json_kstr(&j, "id", m->id);
        json_kstr(&j, "state", m->state);
        json_kstr(&j, "where", m->where);
        json_kuint_or_null(&j, "due_ms", m->due_ms);
        json_kuint(&j, "reconsume", m->reconsume);
        json_kopt(&j, "detail", m->detail);
        json_object_close(&j);
    }
    json_array_close(&j);
    json_kstr(&j, "late", hg_order_late_name(v->late));
    json_kstr(&j, "why", v->why);
    json_object_close(&j);
    char *out = xstrdup(buf_cstr(&b));
    buf_free(&b);
    return out;
}
