/*
 * lib/order_view_broker.h — the order view's one question to the broker
 * (internal to libhourglass; used by lib/order_view_explain.c).
 */
#ifndef HG_LIB_ORDER_VIEW_BROKER_H
#define HG_LIB_ORDER_VIEW_BROKER_H

#include <stddef.h>
#include <stdint.h>

#include "include/hourglass/order_view.h"

/* FIND topic <order_id> on client: every message of that topic with that key
 * the broker still holds (any state but gone), summarised into
 * msgs[0..*n) (at most max; the rest are left out). Returns 0, or -1 with
 * the cause in err[errlen] (the client's error text). */
int view_broker_messages(struct hg_client *client, const char *topic, uint64_t order_id, hg_order_msg_t *msgs,
                         size_t max, size_t *n, char *err, size_t errlen);

#endif
