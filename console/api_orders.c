/*
 * console/api_orders.c — the order half of /api (contract: console.h; the
 * documents: docs/console.md), all of it the order view of
 * <hourglass/order_view.h> — the same rows, verdicts and JSON as
 * `hourglass-cli orders`:
 *
 *   GET  /api/orders/overdue[?older_than=D&limit=N&after=CURSOR]
 *                                   {"orders":[view…],"next":cursor|null}
 *   GET  /api/orders/{id}           one view with its items (404: no such order)
 *   POST /api/orders/{id}/cancel    [reason=R, default manual]: the idempotent
 *                                   cancel; {"outcome":…,"order":view}
 *
 * The broker is asked (FIND) on the session's connection, as the user —
 * but not while it does not answer (sampler_silent), and not for the
 * rest of a page once it failed to answer for one order: a hung broker
 * costs a page of 50 overdue orders at most one broker-timeout, not fifty,
 * and the views say why they lack the broker's half. These pages are the
 * way to cancel by hand when the message path is down. While MariaDB itself
 * does not answer (sampler_silent), they answer 503 at once. A call that
 * failed because MariaDB refused a rotated password or lost the connection
 * is made once more on a handle opened with mysql-password-file's new
 * password (console_db_failed; a cancel only when nothing was sent).
 * Threads: the event loop's only.
 */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include "console/console.h"

#include <inttypes.h>
#include <mysqld_error.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "base/units.h"

#define ORDERS_PAGE_DEFAULT 50
#define ORDERS_MAX_ITEMS    256

/* The order view's broker half for one request: the session's client, or
 * NULL with why once the broker is known not to answer. */
typedef struct broker_half {
    hg_client_t *client;
    char why[200];
} broker_half_t;

static void broker_half_init(request_t *r, broker_half_t *h)
{
    uint64_t for_ms;
    h->client = r->s->client;
    h->why[0] = '\0';
    if (sampler_silent(r->c->sampler, SAMPLER_BROKER, &for_ms)) {
        h->client = NULL;
        snprintf(h->why, sizeof h->why, "not asked: the broker has not answered for %.1f s", for_ms / 1e3);
    }
}

/* hg_order_explain with h's client; after a failure to reach the broker
 * (no answer, a lost connection), the rest of the request goes without it. */
static void explain(request_t *r, broker_half_t *h, const hg_order_info_t *order, hg_order_view_t *v)
{
    hg_order_explain(h->client, r->c->cfg->order_topic, order, v);
    if (h->client == NULL) { /* the verdict again, with the reason instead of "no broker connection" */
        snprintf(v->broker_error, sizeof v->broker_error, "%s", h->why);
        hg_order_late_classify(v);
        return;
    }
    hg_err_t e = hg_client_errcode(h->client);
    if (!v->broker_known && (e == HG_ERR_TIMEOUT || e == HG_ERR_IO || e == HG_ERR_CONNECT)) {
        h->client = NULL;
        snprintf(h->why, sizeof h->why, "not asked: the broker did not answer for order %" PRIu64, order->id);
    }
}

static void overdue(request_t *r)
{
    const char *older = http_param(r, "older_than"), *limit_text = http_param(r, "limit"),
               *after = http_param(r, "after");
    uint64_t older_ms = 0;
    long limit = ORDERS_PAGE_DEFAULT;
    char why[200], next[HG_ORDER_CURSOR_MAX];
    hg_order_error_t err;
    size_t n = 0;

    if (older != NULL && older[0] != '\0' &&
        units_parse_duration_str(older, UNITS_BARE_MS, &older_ms, why, sizeof why) < 0) {
        http_error(r, 400, "older_than: '%.40s' is not a duration: %s", older, why);
        return;
    }
    if (limit_text != NULL) {
        char *end;
        limit = strtol(limit_text, &end, 10);
        if (*end != '\0' || limit < 1 || limit > HG_ORDER_PAGE_MAX) {
            http_error(r, 400, "limit: '%.20s' is not a number 1..%d", limit_text, HG_ORDER_PAGE_MAX);
            return;
        }
    }
    hg_order_info_t *rows = xcalloc((size_t)limit, sizeof *rows);
    broker_half_t half;
    broker_half_init(r, &half);
    hg_order_db *db = NULL;
    int rc = -1;
    for (int attempt = 0; attempt < 2; attempt++) { /* again once, with a rotated password (a read: safe) */
        if ((db = console_db(r->c, &err)) == NULL)
            break;
        rc = hg_order_overdue(db, older_ms, after, (size_t)limit, rows, &n, next, &err);
        if (rc >= 0 || !console_db_failed(r->c, &err))
            break;
    }
    if (rc < 0) {
        /* the library's refusals of a parameter, named as the API names it (limit is checked above) */
        int bad_request = err.code == 0 && db != NULL;
        const char *param = !bad_request                                ? ""
                            : strstr(err.message, "bad cursor") != NULL ? "after: "
                            : strstr(err.message, "older-than") != NULL ? "older_than: "
                                                                        : "";
        http_error(r, bad_request ? 400 : 503, "%s%s", param, err.message);
        free(rows);
        return;
    }
    buf_t b = BUF_INIT;
    buf_append_str(&b, "{\"orders\":[");
    for (size_t i = 0; i < n; i++) {
        hg_order_view_t v;
        explain(r, &half, &rows[i], &v);
        char *js = hg_order_view_json(&v, NULL, 0);
        buf_printf(&b, "%s%s", i > 0 ? "," : "", js);
        free(js);
    }
    buf_append_str(&b, "],\"next\":");
    if (next[0] != '\0')
        buf_printf(&b, "\"%s\"", next); /* digits and one '-' */
    else
        buf_append_str(&b, "null");
    buf_append_str(&b, "}");
    http_json(r, 200, &b);
    buf_free(&b);
    free(rows);
}

/* The view of order id with its items, as JSON appended to b; with outcome
 * (not NULL) wrapped as {"outcome":…,"order":…}. Returns 1, 0 when there is
 * no such order, -1 on a database error (replied). */
static int order_json(request_t *r, uint64_t id, const char *outcome, buf_t *b)
{
    hg_order_item_t *items = xcalloc(ORDERS_MAX_ITEMS, sizeof *items);
    hg_order_info_t info;
    hg_order_error_t err;
    size_t nitems = 0;
    int found = -1;
    for (int attempt = 0; attempt < 2; attempt++) { /* again once, with a rotated password (a read: safe) */
        hg_order_db *db = console_db(r->c, &err);
        if (db == NULL)
            break;
        found = hg_order_lookup(db, id, &info, items, ORDERS_MAX_ITEMS, &nitems, &err);
        if (found >= 0 || !console_db_failed(r->c, &err))
            break;
    }
    if (found < 0)
        http_error(r, 503, "order %" PRIu64 ": %s", id, err.message);
    if (found > 0) {
        hg_order_view_t v;
        broker_half_t half;
        broker_half_init(r, &half);
        explain(r, &half, &info, &v);
        char *js = hg_order_view_json(&v, items, nitems);
        if (outcome != NULL)
            buf_printf(b, "{\"outcome\":\"%s\",\"order\":%s}", outcome, js);
        else
            buf_append_str(b, js);
        free(js);
    }
    free(items);
    return found;
}

static int parse_id(request_t *r, const char *text, uint64_t *id)
{
    char why[160];
    if (hg_order_parse_id(text, strlen(text), id, why, sizeof why) < 0) {
        http_error(r, 400, "'%.40s' is not an order id: %s", text, why);
        return -1;
    }
    return 0;
}

static void show(request_t *r, const char *text)
{
    uint64_t id;
    if (parse_id(r, text, &id) != 0)
        return;
    buf_t b = BUF_INIT;
    int found = order_json(r, id, NULL, &b);
    if (found > 0)
        http_json(r, 200, &b);
    else if (found == 0)
        http_error(r, 404, "no order %" PRIu64 " in the database", id);
    buf_free(&b);
}

static void cancel(request_t *r, const char *text)
{
    const char *reason = http_param(r, "reason");
    hg_order_outcome_t outcome;
    hg_order_error_t err;
    uint64_t id;

    if (parse_id(r, text, &id) != 0)
        return;
    if (reason != NULL && (reason[0] == '\0' || strlen(reason) > 64)) {
        http_error(r, 400, "reason: 1..64 bytes");
        return;
    }
    /* Again once only when the rotated password was refused at the connect
     * (1045: nothing was sent); after a lost connection the COMMIT's outcome
     * may be unknown, and the operator's retry says what it came to. */
    int rc = -1;
    outcome = HG_ORDER_TRANSIENT;
    for (int attempt = 0; attempt < 2; attempt++) {
        hg_order_db *db = console_db(r->c, &err);
        if (db == NULL)
            break;
        rc = hg_order_manual_cancel(db, id, reason, &outcome, &err);
        if (rc >= 0 || !console_db_failed(r->c, &err) || err.code != ER_ACCESS_DENIED_ERROR)
            break;
    }
    if (rc < 0) {
        console_audit(r, "order cancel id=%" PRIu64 " failed: %s", id, err.message);
        http_error(r, outcome == HG_ORDER_TRANSIENT ? 503 : 500, "cancel %" PRIu64 " (%s, nothing changed): %s", id,
                   hg_order_outcome_name(outcome), err.message);
        return;
    }
    console_audit(r, "order cancel id=%" PRIu64 " reason=%s outcome=%s", id,
                  reason != NULL ? reason : HG_ORDER_REASON_MANUAL, hg_order_outcome_name(outcome));
    if (outcome == HG_ORDER_NOT_FOUND) {
        http_error(r, 404, "no order %" PRIu64 " in the database", id);
        return;
    }
    buf_t b = BUF_INIT;
    if (order_json(r, id, hg_order_outcome_name(outcome), &b) > 0)
        http_json(r, 200, &b);
    buf_free(&b);
}

int api_orders(request_t *r)
{
    if (r->nparts < 2 || strcmp(r->parts[0], "orders") != 0)
        return 0;
    uint64_t silent_ms;
    if (sampler_silent(r->c->sampler, SAMPLER_DB, &silent_ms)) { /* each request would wait for it, in turn */
        http_error(r, 503,
                   "the database has not answered for %.1f s: the order pages answer again once it does (the "
                   "overview says when); the overview and the broker's pages work meanwhile",
                   silent_ms / 1e3);
        return 1;
    }
    if (r->nparts == 2 && !r->is_post && strcmp(r->parts[1], "overdue") == 0)
        overdue(r);
    else if (r->nparts == 2 && !r->is_post)
        show(r, r->parts[1]);
    else if (r->nparts == 3 && r->is_post && strcmp(r->parts[2], "cancel") == 0)
        cancel(r, r->parts[1]);
    else
        return 0;
    return 1;
}
