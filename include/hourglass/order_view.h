/*
 * <hourglass/order_view.h> — the order view: which orders are overdue, and
 * why; one order in full; the manual cancel (DESIGN.md §7's fourth layer:
 * operators look up and cancel overdue orders by hand).
 *
 * Part of libhourglass, written for the reference schema (sql/schema.sql:
 * orders, order_items, order_timeout_msg) like hg_order_pay. One module used
 * by hourglass-cli (`orders …`) and hourglass-console (/api/orders…), so the
 * two show the same rows, the same reasons and the same JSON.
 *
 *   hg_order_overdue      pending orders past expire_at (older than a
 *                         margin), oldest first, in keyset pages on the
 *                         (status, expire_at) index, each with its outbox row
 *   hg_order_lookup       one order, its items and its outbox row
 *   hg_order_counts       pending and overdue counts (the console's overview)
 *   hg_order_explain      the order's timeout message(s) in the broker (FIND
 *                         topic <id>, then GET each) and why the order is
 *                         late (hg_order_late_t)
 *   hg_order_manual_cancel  hg_order_cancel with reason "manual"
 *   hg_order_view_json    one view (order, outbox, items, messages, reason)
 *                         as a JSON object
 *
 * Times are Unix ms, read on the database's clock (UNIX_TIMESTAMP of the
 * DATETIME columns in the session time zone, the way hg_order_timeout_create
 * writes them); 0 stands for SQL NULL.
 *
 * Threads: the handle's and the client's rules (one thread at a time each).
 * Every read ends its transaction (the handle runs with autocommit off), so
 * the next read sees fresh data. Errors as in <hourglass/order.h>.
 */
#ifndef HOURGLASS_ORDER_VIEW_H
#define HOURGLASS_ORDER_VIEW_H

#include <stddef.h>
#include <stdint.h>

#include "hourglass.h"
#include "order.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The reason every manual cancel records (orders.cancel_reason). */
#define HG_ORDER_REASON_MANUAL "manual"

/* A keyset position: "<expire_at as YYYYMMDDHHMMSSffffff>-<id>" (digits and
 * one '-', safe in a URL), with its NUL. "" means "from the start" as input
 * and "no more" as output. */
#define HG_ORDER_CURSOR_MAX 48

/* Most rows hg_order_overdue returns in one call. */
#define HG_ORDER_PAGE_MAX 1000

/* One order with its outbox row. */
typedef struct hg_order_info {
    uint64_t id, user_id;
    char status[16];                  /* pending | paid | cancelled */
    uint64_t created_ms, expire_ms;   /* Unix ms */
    uint64_t paid_ms, cancelled_ms;   /* 0: NULL */
    char cancel_reason[65];           /* "" when NULL */
    int64_t overdue_ms;               /* NOW - expire_at on the server's clock; negative: not due yet */
    char cursor[HG_ORDER_CURSOR_MAX]; /* this row's keyset position */
    int has_outbox;                   /* 0: no order_timeout_msg row */
    char outbox_status[8];            /* new | sent | done */
    unsigned outbox_attempts;
    uint64_t outbox_next_attempt_ms;
    char outbox_last_error[256]; /* "" when NULL */
} hg_order_info_t;

typedef struct hg_order_item {
    uint64_t sku_id;
    long long qty;
} hg_order_item_t;

/* Pending orders whose expire_at lies more than older_than_ms in the past
 * (0: any overdue order), ordered by (expire_at, id), after the position
 * `after` (NULL or "": from the oldest). Fills rows[0..*n) with at most
 * limit (1..HG_ORDER_PAGE_MAX) rows and next[HG_ORDER_CURSOR_MAX] with the
 * position to page on from — "" when this was the last page. Returns 0, or
 * -1 with err (a bad cursor: code 0 and a message naming it). */
int hg_order_overdue(hg_order_db *db, uint64_t older_than_ms, const char *after, size_t limit, hg_order_info_t *rows,
                     size_t *n, char *next, hg_order_error_t *err);

/* How many orders are pending, and how many of them are overdue by more
 * than older_than_ms (both on the (status, expire_at) index). Returns 0 / -1. */
int hg_order_counts(hg_order_db *db, uint64_t older_than_ms, uint64_t *pending, uint64_t *overdue,
                    hg_order_error_t *err);

/* Order id with its outbox row into *out and up to max_items of its items
 * into items (may be NULL when max_items is 0; *nitems the number stored,
 * may be NULL). Returns 1 found, 0 no such order, -1 with err. */
int hg_order_lookup(hg_order_db *db, uint64_t id, hg_order_info_t *out, hg_order_item_t *items, size_t max_items,
                    size_t *nitems, hg_order_error_t *err);

/* ------------------------------------------------------------------ the broker's side */

/* Why a pending order is still pending past its expiry. */
typedef enum hg_order_late {
    HG_ORDER_LATE_NONE = 0,    /* not late: not pending, or not due yet */
    HG_ORDER_LATE_UNKNOWN,     /* the broker could not be asked (see broker_error) */
    HG_ORDER_LATE_NOT_SENT,    /* the outbox row is still 'new' (or missing) and the broker holds no
                                   message: the timeout never reached it; the relay sends it */
    HG_ORDER_LATE_NO_MESSAGE,  /* the row says sent, the broker holds no live message: it was lost */
    HG_ORDER_LATE_IN_DLQ,      /* the message is parked in a dead-letter queue */
    HG_ORDER_LATE_DELAYED,     /* the message is still waiting in a delay level */
    HG_ORDER_LATE_CONSUMER_LAG /* the message is due (ready, leased or retrying) and the
                                   consumer has not cancelled the order yet */
} hg_order_late_t;

/* A static name: "none", "unknown", "not-sent", "no-message", "in-dlq",
 * "delayed", "consumer-lagging"; "?" outside the enum. */
const char *hg_order_late_name(hg_order_late_t late);

#define HG_ORDER_VIEW_MAX_MSGS 8

/* One message of the order as the broker reports it. */
typedef struct hg_order_msg {
    char id[HG_ID_MAX];
    char state[16];               /* delayed | ready | leased | retry | dlq */
    char where[HG_NAME_MAX + 40]; /* "level 7", "topic order-timeout", "group order-cancel" … */
    uint64_t due_ms;              /* when it is (or was) due; 0: unknown */
    unsigned reconsume;
    char detail[HG_REASON_MAX + 64]; /* the DLQ reason, the lease deadline …; "" */
} hg_order_msg_t;

/* An order with what the broker holds for it and the verdict. */
typedef struct hg_order_view {
    hg_order_info_t order;
    int broker_known; /* 1: the broker answered; msgs are all its live messages with key <id> */
    char broker_error[256];
    hg_order_msg_t msgs[HG_ORDER_VIEW_MAX_MSGS];
    size_t msg_count;
    hg_order_late_t late;
    char why[600]; /* one sentence for people; cut, ending "...", when a DLQ reason does not fit */
} hg_order_view_t;

/* Fill v from *order: ask the broker (client; NULL: not asked) for the live
 * messages of topic (NULL: HG_ORDER_TIMEOUT_TOPIC) with key <order id>, then
 * classify (hg_order_late_classify). Never fails: a broker error leaves
 * broker_known 0 with the cause in broker_error and late UNKNOWN, as does a
 * NULL order ("the order is NULL"); a NULL v is ignored. */
void hg_order_explain(struct hg_client *client, const char *topic, const hg_order_info_t *order, hg_order_view_t *v);

/* The verdict alone, from v->order, v->msgs and v->broker_known: sets
 * v->late and v->why. Pure. */
void hg_order_late_classify(hg_order_view_t *v);

/* A duration for people, two units at most: "45s", "2m05s", "1h02m",
 * "3d04h"; below a second "0s"; negative ms get a leading '-'. Into
 * buf[len]; returns buf. Pure. */
char *hg_order_age_text(int64_t ms, char *buf, size_t len);

/* ------------------------------------------------------------------ acting */

/* Cancel order id by hand: hg_order_cancel(db, id, reason or
 * HG_ORDER_REASON_MANUAL, …) — the same claim and side effects as every
 * other layer, idempotent. Returns and fills like hg_order_cancel. */
int hg_order_manual_cancel(hg_order_db *db, uint64_t id, const char *reason, hg_order_outcome_t *outcome,
                           hg_order_error_t *err);

/* ------------------------------------------------------------------ JSON */

/* v (and items[0..nitems), may be NULL / 0: no "items" key) as one JSON
 * object: {"id":…,"user_id":…,"status":…,"created_ms":…,"expire_ms":…,
 * "paid_ms":…|null,"cancelled_ms":…|null,"cancel_reason":…|null,
 * "overdue_ms":…,"cursor":…,"outbox":{…}|null,"items":[…],
 * "broker_known":…,"broker_error":…|null,"messages":[…],"late":…,"why":…}.
 * Returns a NUL-terminated string the caller frees with free(); "null" when
 * v is NULL. */
char *hg_order_view_json(const hg_order_view_t *v, const hg_order_item_t *items, size_t nitems);

/* A message as GET / FIND report it (hg_msg_get, hg_msg_find of
 * <hourglass/hourglass.h>) as one JSON object: {"id":…,"state":…,"topic":…,
 * "key":…,"payload":… (GET only),"created_ms":…,"due_ms":…,"reconsume":…,
 * "level":…,"hop_due_ms":…,"hops_left":… (delayed),"groups":[{"group":…,
 * "state":…,"reconsume":…,"deadline_ms"|"level","due_ms"|"reason",
 * "parked_ms":…}]}; a gone message is {"id":…,"state":"gone"}. Returns a
 * NUL-terminated string the caller frees with free() ("null" for NULL, as
 * hg_order_view_json). */
struct hg_msg_info;
char *hg_msg_info_json(const struct hg_msg_info *info);

#ifdef __cplusplus
}
#endif

#endif
